//! The executor against a scripted stand-in for a stack on a virtual clock (no root): ISN
//! mapping both ways, field-by-field comparison, timing in both directions, descriptor
//! mapping, results and errnos, refusals. (The real stacks are in `linux.rs`.)

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;

mod common;

use ustack_conform::backend::{Backend, EpollEvent, PollFd, SysResult};
use ustack_conform::exec::{Config, Failure, Report, run};
use ustack_conform::packet::{self, LiveBody, LiveTcp};
use ustack_conform::parse::parse;
use ustack_conform::script::{Flags, TcpOpt};

/// A stand-in for a stack: it "sends" packets queued with their times, records what it is
/// given, and answers calls from a table; its clock is virtual.
#[derive(Debug, Default)]
struct Fake {
    clock: Mutex<u64>,
    outbox: Mutex<VecDeque<(u64, Vec<u8>)>>,
    inbox: Mutex<Vec<Vec<u8>>>,
    /// Results by call name (anything else returns 0; socket 10, accept 11).
    results: Mutex<Vec<(&'static str, SysResult)>>,
    /// The descriptors write(2) was called on.
    writes: Mutex<Vec<i32>>,
}

impl Fake {
    fn result(&self, name: &str, default: SysResult) -> SysResult {
        let r = self.results.lock().unwrap();
        r.iter()
            .find(|(n, _)| *n == name)
            .map_or(default, |&(_, v)| v)
    }
}

impl Backend for Fake {
    fn netdev_send(&self, packet: &[u8]) -> std::io::Result<()> {
        self.inbox.lock().unwrap().push(packet.to_vec());
        Ok(())
    }
    fn netdev_receive(&self, timeout: Duration) -> std::io::Result<Option<(Vec<u8>, u64)>> {
        let mut clock = self.clock.lock().unwrap();
        let until = *clock + timeout.as_micros() as u64;
        let mut out = self.outbox.lock().unwrap();
        if out.front().is_some_and(|(at, _)| *at <= until) {
            let (at, p) = out.pop_front().unwrap();
            *clock = (*clock).max(at);
            return Ok(Some((p, at)));
        }
        *clock = until;
        Ok(None)
    }
    fn usleep(&self, us: u64) {
        *self.clock.lock().unwrap() += us;
    }
    fn now_us(&self) -> u64 {
        *self.clock.lock().unwrap()
    }
    fn socket(&self, _: i32, _: i32, _: i32) -> SysResult {
        self.result("socket", Ok(10))
    }
    fn bind(&self, _: i32, _: SocketAddr) -> SysResult {
        self.result("bind", Ok(0))
    }
    fn listen(&self, _: i32, _: i32) -> SysResult {
        self.result("listen", Ok(0))
    }
    fn accept(&self, _: i32, _: i32) -> SysResult {
        self.result("accept", Ok(11))
    }
    fn connect(&self, _: i32, _: SocketAddr) -> SysResult {
        self.result("connect", Ok(0))
    }
    fn read(&self, _: i32, buf: &mut [u8]) -> SysResult {
        self.result("read", Ok(buf.len() as i64))
    }
    fn recv(&self, _: i32, buf: &mut [u8], _: i32) -> SysResult {
        self.result("recv", Ok(buf.len() as i64))
    }
    fn write(&self, fd: i32, buf: &[u8]) -> SysResult {
        self.writes.lock().unwrap().push(fd);
        self.result("write", Ok(buf.len() as i64))
    }
    fn send(&self, _: i32, buf: &[u8], _: i32) -> SysResult {
        Ok(buf.len() as i64)
    }
    fn shutdown(&self, _: i32, _: i32) -> SysResult {
        Ok(0)
    }
    fn close(&self, _: i32) -> SysResult {
        self.result("close", Ok(0))
    }
    fn getsockopt(&self, _: i32, _: i32, _: i32, buf: &mut [u8]) -> Result<usize, i32> {
        buf[..4].copy_from_slice(&111i32.to_ne_bytes());
        Ok(4)
    }
    fn setsockopt(&self, _: i32, _: i32, _: i32, _: &[u8]) -> SysResult {
        Ok(0)
    }
    fn fcntl(&self, _: i32, _: i32, _: i64) -> SysResult {
        Ok(0)
    }
    fn poll(&self, fds: &mut [PollFd], _: i32) -> SysResult {
        fds[0].revents = libc::POLLOUT;
        Ok(1)
    }
    fn epoll_create(&self, _: i32) -> SysResult {
        Ok(12)
    }
    fn epoll_ctl(&self, _: i32, _: i32, _: i32, _: EpollEvent) -> SysResult {
        Ok(0)
    }
    fn epoll_wait(&self, _: i32, _: &mut [EpollEvent], _: i32) -> SysResult {
        Ok(0)
    }
    fn free(&self) {}
}

const ISN: u32 = 1_000_000;

/// A segment from the stand-in stack (local 192.168.0.1:8080 to the remote end).
fn seg(flags: u8, seq: u32, ack: u32, len: u32, options: Vec<TcpOpt>) -> Vec<u8> {
    let cfg = Config::default();
    packet::ipv4(
        cfg.local_ip,
        cfg.remote_ip,
        6,
        packet::tcp(&LiveTcp {
            src_port: cfg.local_port,
            dst_port: cfg.remote_port,
            seq: ISN + seq,
            ack: cfg.remote_isn.wrapping_add(ack),
            flags: Flags(flags),
            win: 1000,
            options,
            len,
        }),
    )
}

const SCRIPT: &str = "// test
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
  +.1 < S 0:0(0) win 32792 <mss 1000>
   +0 > S. 0:0(0) ack 1 <mss 1460>
  +.1 < . 1:1(0) ack 1 win 257
   +0 accept(3, ..., ...) = 4
  +.1 write(4, ..., 100) = 100
   +0 > P. 1:101(100) ack 1
";

fn go(
    script: &str,
    out: Vec<(u64, Vec<u8>)>,
    results: Vec<(&'static str, SysResult)>,
) -> (Result<Report, Failure>, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    *fake.outbox.lock().unwrap() = out.into();
    *fake.results.lock().unwrap() = results;
    let cfg = Config {
        call_wait_us: 200_000,
        ..Config::default()
    };
    let r = run(&parse(script).unwrap(), fake.clone(), &cfg);
    (r, fake)
}

fn good_packets() -> Vec<(u64, Vec<u8>)> {
    vec![
        (
            100_000,
            seg(Flags::SYN | Flags::ACK, 0, 1, 0, vec![TcpOpt::Mss(1460)]),
        ),
        (300_000, seg(Flags::PSH | Flags::ACK, 1, 1, 100, vec![])),
    ]
}

#[test]
fn a_matching_run_passes_and_maps_both_isns() {
    let (r, fake) = go(SCRIPT, good_packets(), vec![]);
    let report = r.unwrap();
    assert_eq!(report.packets_matched, 2);
    // The script's descriptor 4 is the live one accept returned (11).
    assert_eq!(*fake.writes.lock().unwrap(), vec![11]);
    let inbox = fake.inbox.lock().unwrap();
    assert_eq!(inbox.len(), 2);
    let tcp = |p: &[u8]| match packet::decode(p).unwrap().body {
        LiveBody::Tcp(t) => t,
        other => panic!("{other:?}"),
    };
    let cfg = Config::default();
    // The SYN carries the remote ISN; the ACK acknowledges the ISN learned from the SYN-ACK.
    assert_eq!(tcp(&inbox[0]).seq, cfg.remote_isn);
    assert_eq!(tcp(&inbox[1]).seq, cfg.remote_isn + 1);
    assert_eq!(tcp(&inbox[1]).ack, ISN + 1);
    assert_eq!(
        (tcp(&inbox[0]).dst_port, tcp(&inbox[0]).src_port),
        (cfg.local_port, cfg.remote_port)
    );
}

#[test]
fn a_wrong_flag_fails_with_the_diff_and_line() {
    let mut p = good_packets();
    p[0].1 = seg(Flags::SYN, 0, 1, 0, vec![TcpOpt::Mss(1460)]);
    let e = go(SCRIPT, p, vec![]).0.unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(
        e.message
            .contains("script packet: 0.100000 > S. 0:0(0) ack 1 <mss 1460>"),
        "{e}"
    );
    assert!(
        e.message.contains("tcp_flags: expected S., actual S"),
        "{e}"
    );
}

#[test]
fn wrong_options_and_lengths_are_named() {
    let mut p = good_packets();
    p[1].1 = seg(
        Flags::PSH | Flags::ACK,
        1,
        2,
        99,
        vec![TcpOpt::Nop, TcpOpt::Nop, TcpOpt::Ts { val: 1, ecr: 2 }],
    );
    let e = go(SCRIPT, p, vec![]).0.unwrap_err();
    assert_eq!(e.line, 10, "{e}");
    for want in [
        "tcp_payload_len: expected 100, actual 99",
        "tcp_ack: expected 1, actual 2",
        "tcp_options: expected <>, actual <nop,nop,TS val 1 ecr 2>",
    ] {
        assert!(e.message.contains(want), "`{want}` missing:\n{e}");
    }
}

#[test]
fn early_and_missing_packets_are_timing_errors() {
    let mut p = good_packets();
    p[1].0 = 150_000; // 150 ms early: before the write is even made.
    let e = go(SCRIPT, p, vec![]).0.unwrap_err();
    assert!(
        e.message.contains("timing error") && e.message.contains("sent at 0.150000"),
        "{e}"
    );
    let mut p = good_packets();
    p.pop();
    let e = go(SCRIPT, p, vec![]).0.unwrap_err();
    assert_eq!(e.line, 10);
    assert!(e.message.contains("was not sent"), "{e}");
    let mut p = good_packets();
    p[1].0 = 300_000 + 5_000; // past the 4 ms tolerance
    let e = go(SCRIPT, p, vec![]).0.unwrap_err();
    assert!(e.message.contains("was not sent"), "{e}");
    let mut p = good_packets();
    p[1].0 = 300_000 + 3_000; // within it
    go(SCRIPT, p, vec![]).0.unwrap();
}

#[test]
fn results_and_errnos_are_checked() {
    let e = go(
        SCRIPT,
        good_packets(),
        vec![("listen", Err(libc::EADDRINUSE))],
    )
    .0
    .unwrap_err();
    assert_eq!(e.line, 4);
    assert!(e.message.contains("listen() returned -1 EADDRINUSE"), "{e}");
    assert!(e.message.contains("expected 0"), "{e}");
    let script =
        "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 connect(3, ..., ...) = -1 EINPROGRESS\n";
    go(script, vec![], vec![("connect", Err(libc::EINPROGRESS))])
        .0
        .unwrap();
    let e = go(script, vec![], vec![("connect", Err(libc::ECONNREFUSED))])
        .0
        .unwrap_err();
    assert!(
        e.message.contains("returned -1 ECONNREFUSED")
            && e.message.contains("expected -1 EINPROGRESS"),
        "{e}"
    );
    // Outputs: getsockopt's int (the stand-in writes 111).
    let s = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 getsockopt(3, SOL_SOCKET, SO_ERROR, [ECONNREFUSED], [4]) = 0\n";
    go(s, vec![], vec![]).0.unwrap();
    let s = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 getsockopt(3, SOL_SOCKET, SO_ERROR, [0], [4]) = 0\n";
    assert!(
        go(s, vec![], vec![])
            .0
            .unwrap_err()
            .message
            .contains("expected [0], actual [111]")
    );
    let s = "0 epoll_create(1) = 5\n+0 epoll_wait(5, {events=0, ptr=0}, 1, 0) = 0\n+0 setsockopt(5, SOL_TCP, TCP_NOTSENT_LOWAT, [0xffffffff], 4) = 0\n";
    go(s, vec![], vec![]).0.unwrap();
    let s = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 poll([{fd=3, events=POLLIN, revents=POLLIN}], 1, 0) = 1\n";
    let e = go(s, vec![], vec![]).0.unwrap_err();
    assert!(
        e.message
            .contains("revents: expected POLLIN, actual POLLOUT"),
        "{e}"
    );
}

#[test]
fn a_call_that_blocks_must_be_written_as_blocking() {
    // close() here takes 300 ms; the script wrote it as an immediate call.
    let script = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 close(3) = 0\n";
    let cfg = Config {
        call_wait_us: 50_000,
        ..Config::default()
    };
    let e = run(
        &parse(script).unwrap(),
        Arc::new(SlowClose(Fake::default())),
        &cfg,
    )
    .unwrap_err();
    assert_eq!(e.line, 2);
    assert!(
        e.message.contains("close() did not return") && e.message.contains("start...end"),
        "{e}"
    );
}

/// A stand-in whose close(2) takes 300 ms of real time.
#[derive(Debug)]
struct SlowClose(Fake);

impl Backend for SlowClose {
    fn netdev_send(&self, p: &[u8]) -> std::io::Result<()> {
        self.0.netdev_send(p)
    }
    fn netdev_receive(&self, t: Duration) -> std::io::Result<Option<(Vec<u8>, u64)>> {
        // Real time here, so that the executor's bounded wait for the call elapses.
        std::thread::sleep(t.min(Duration::from_millis(10)));
        Ok(None)
    }
    fn usleep(&self, us: u64) {
        std::thread::sleep(Duration::from_micros(us))
    }
    fn now_us(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_micros() as u64
    }
    fn socket(&self, d: i32, t: i32, p: i32) -> SysResult {
        self.0.socket(d, t, p)
    }
    fn bind(&self, f: i32, a: SocketAddr) -> SysResult {
        self.0.bind(f, a)
    }
    fn listen(&self, f: i32, b: i32) -> SysResult {
        self.0.listen(f, b)
    }
    fn accept(&self, f: i32, fl: i32) -> SysResult {
        self.0.accept(f, fl)
    }
    fn connect(&self, f: i32, a: SocketAddr) -> SysResult {
        self.0.connect(f, a)
    }
    fn read(&self, f: i32, b: &mut [u8]) -> SysResult {
        self.0.read(f, b)
    }
    fn recv(&self, f: i32, b: &mut [u8], fl: i32) -> SysResult {
        self.0.recv(f, b, fl)
    }
    fn write(&self, f: i32, b: &[u8]) -> SysResult {
        self.0.write(f, b)
    }
    fn send(&self, f: i32, b: &[u8], fl: i32) -> SysResult {
        self.0.send(f, b, fl)
    }
    fn shutdown(&self, f: i32, h: i32) -> SysResult {
        self.0.shutdown(f, h)
    }
    fn close(&self, _: i32) -> SysResult {
        std::thread::sleep(Duration::from_millis(300));
        Ok(0)
    }
    fn getsockopt(&self, f: i32, l: i32, n: i32, b: &mut [u8]) -> Result<usize, i32> {
        self.0.getsockopt(f, l, n, b)
    }
    fn setsockopt(&self, f: i32, l: i32, n: i32, v: &[u8]) -> SysResult {
        self.0.setsockopt(f, l, n, v)
    }
    fn fcntl(&self, f: i32, c: i32, a: i64) -> SysResult {
        self.0.fcntl(f, c, a)
    }
    fn poll(&self, f: &mut [PollFd], t: i32) -> SysResult {
        self.0.poll(f, t)
    }
    fn epoll_create(&self, s: i32) -> SysResult {
        self.0.epoll_create(s)
    }
    fn epoll_ctl(&self, e: i32, o: i32, f: i32, v: EpollEvent) -> SysResult {
        self.0.epoll_ctl(e, o, f, v)
    }
    fn epoll_wait(&self, e: i32, v: &mut [EpollEvent], t: i32) -> SysResult {
        self.0.epoll_wait(e, v, t)
    }
    fn free(&self) {}
}

#[test]
fn what_cannot_run_is_refused_before_anything_is_sent() {
    for (script, want) in [
        ("0 `ip link set lo down`\n", "shell commands are refused"),
        (
            "0 `sysctl -w net.ipv4.tcp_rmem=4096,131072`\n",
            "a sysctl is `net.NAME=NUMBER`",
        ),
        // A sysctl line is taken, and handed to the backend, which may refuse it.
        (
            "`sysctl -q net.ipv4.tcp_sack=0`\n0 close(3) = 0\n",
            "sysctl net.ipv4.tcp_sack=0: this backend cannot set net.ipv4.tcp_sack",
        ),
        ("0 %{ assert tcpi_rto == 1 }%\n", "not supported"),
        (
            "--mss=1000\n0 close(3) = 0\n",
            "option --mss=1000 is not supported",
        ),
        (
            "0 splice(3, 4) = 0\n",
            "system call `splice` is not supported",
        ),
        ("200 close(3) = 0\n", "past the run's limit of 120.000000"),
        ("0...200 close(3) = 0\n", "past the run's limit"),
        (
            "0 < P. 1:4000000001(4000000000) ack 1 win 1\n",
            "does not fit an IP packet",
        ),
    ] {
        let (r, fake) = go(script, vec![], vec![]);
        let e = r.unwrap_err();
        assert!(e.message.contains(want), "{script}: {e}");
        assert!(fake.inbox.lock().unwrap().is_empty());
    }
}

/// A line of a plausible script, with random numbers.
fn line() -> impl Strategy<Value = String> {
    let n = 0u32..5000;
    let fd = 0i64..8;
    (0usize..12, n.clone(), n.clone(), n, fd, 0u32..3).prop_map(|(k, a, b, c, fd, t)| {
        let t = format!("+0.{t}");
        match k {
            0 => format!("{t} socket(..., SOCK_STREAM, IPPROTO_TCP) = {fd}"),
            1 => format!(
                "{t} < S {a}:{a}(0) win {b} <mss {c},sackOK,TS val {a} ecr {b},nop,wscale 7>"
            ),
            2 => format!("{t} > S. 0:0(0) ack {a} <...>"),
            3 => format!(
                "{t} < P. {a}:{}({b}) ack {c} win {b} <nop,nop,sack {a}:{b}>",
                a.wrapping_add(b)
            ),
            4 => format!("{t} > . {a}:{a}(0) ack {b} win {c}"),
            5 => format!("{t} write({fd}, ..., {a}) = {a}"),
            6 => format!("{t}...{t} accept({fd}, ..., ...) = {}", fd + 1),
            7 => format!(
                "{t} poll([{{fd={fd}, events=POLLIN, revents=POLLOUT}}], 1, 0) = {}",
                a % 2
            ),
            8 => format!(
                "{t} epoll_wait({fd}, {{events=EPOLLIN, fd={fd}}}, {a}, 0) = {}",
                b % 2
            ),
            9 => format!(
                "{t} < icmp unreachable frag_needed mtu {a} [{b}:{c}({})]",
                c.wrapping_sub(b)
            ),
            10 => format!("{t} getsockopt({fd}, SOL_SOCKET, SO_ERROR, [{a}], [{b}]) = 0"),
            _ => format!("* > udp ({a})"),
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever parses runs to a verdict: no panic, every wait bounded.
    #[test]
    fn random_scripts_run_to_a_verdict(
        soup in common::soup(),
        lines in prop::collection::vec(line(), 1..10),
    ) {
        let cfg = Config {
            call_wait_us: 20_000,
            any_wait_us: 20_000,
            ..Config::default()
        };
        if let Ok(script) = parse(&soup) {
            let _ = run(&script, Arc::new(Fake::default()), &cfg);
        }
        // The plausible lines always parse, and run to a verdict.
        let text = lines.join("\n");
        let script = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let _ = run(&script, Arc::new(Fake::default()), &cfg);
    }
}

/// A segment from the stand-in stack to remote port `port`, with its own ISN.
fn seg_to(port: u16, isn: u32, flags: u8, seq: u32, ack: u32, len: u32) -> Vec<u8> {
    let cfg = Config::default();
    packet::ipv4(
        cfg.local_ip,
        cfg.remote_ip,
        6,
        packet::tcp(&LiveTcp {
            src_port: cfg.local_port,
            dst_port: port,
            seq: isn + seq,
            ack: cfg.remote_isn.wrapping_add(ack),
            flags: Flags(flags),
            win: 1000,
            options: vec![],
            len,
        }),
    )
}

const TWO_FLOWS: &str = "// two connections
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 2) = 0
  +.1 < 40001>8080 S 0:0(0) win 32792
   +0 > 8080>40001 S. 0:0(0) ack 1
   +0 < 40002>8080 S 0:0(0) win 32792
   +0 > 8080>40002 S. 0:0(0) ack 1
  +.1 < 40002>8080 . 1:1(0) ack 1 win 257
  +.1 < 40001>8080 . 1:1(0) ack 1 win 257
";

/// Lines with `SRC>DST` ports are connections of their own: inbound packets leave from
/// the port written, each connection's ISN is learned from its own SYN-ACK (two
/// different ISNs here), and a packet to the wrong port is a diff naming the ports.
#[test]
fn ports_on_packet_lines_keep_connections_apart() {
    let (isn1, isn2) = (5_000u32, 9_000_000u32);
    let out = vec![
        (
            100_000,
            seg_to(40001, isn1, Flags::SYN | Flags::ACK, 0, 1, 0),
        ),
        (
            100_000,
            seg_to(40002, isn2, Flags::SYN | Flags::ACK, 0, 1, 0),
        ),
    ];
    let (r, fake) = go(TWO_FLOWS, out.clone(), vec![]);
    assert_eq!(r.unwrap().packets_matched, 2);
    let inbox = fake.inbox.lock().unwrap();
    let tcp = |p: &[u8]| match packet::decode(p).unwrap().body {
        LiveBody::Tcp(t) => t,
        other => panic!("{other:?}"),
    };
    let got: Vec<(u16, u16, u32)> = inbox
        .iter()
        .map(|p| {
            let t = tcp(p);
            (t.src_port, t.dst_port, t.ack)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (40001, 8080, 0),
            (40002, 8080, 0),
            (40002, 8080, isn2 + 1),
            (40001, 8080, isn1 + 1),
        ]
    );
    drop(inbox);
    // The SYN-ACKs the other way round: the first line's packet goes to 40002.
    let swapped = vec![out[1].clone(), out[0].clone()];
    let (r, _) = go(TWO_FLOWS, swapped, vec![]);
    let e = r.unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(
        e.message
            .contains("ports: expected 8080>40001, actual 8080>40002"),
        "{e}"
    );
    assert!(
        e.message
            .contains("actual packet: 0.100000 > 8080>40002 S."),
        "{e}"
    );
}

/// A blocking call must return at its end time, within the tolerance, not before (as
/// packetdrill's `verify_time` of a blocking call's return): the stand-in's calls return
/// at once, so `+0...0.5` fails as early, and `+0...0~0.5` (an end range) passes.
#[test]
fn a_blocking_call_that_returns_early_fails() {
    let script = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0...0.5 close(3) = 0\n";
    let e = go(script, vec![], vec![]).0.unwrap_err();
    assert_eq!(e.line, 2);
    assert!(
        e.message.contains("close() expected to return at 0.500000")
            && e.message.contains("returned early at 0.000000"),
        "{e}"
    );
    let script = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0...0~0.5 close(3) = 0\n";
    go(script, vec![], vec![]).0.unwrap();
    // Within the tolerance (4 ms) of the end: in time.
    let script = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0...0.003 close(3) = 0\n";
    go(script, vec![], vec![]).0.unwrap();
}
