//! The Linux kernel as the peer, over a TUN interface in a namespace of the test's own
//! (`ustack_testkit::netns::TunRig`): ustack runs a runtime over the TUN queue on a thread
//! of this process (real clock), the kernel side runs `ping` and Python sockets inside the
//! namespace (`nsenter`, every command bounded by `timeout`).
//!
//! - ICMP: `ping` answered by ustack (also 4000-byte echoes: reassembly and fragmentation
//!   both ways);
//! - TCP, ustack as the server: a kernel client sends 1 MiB and 16 MiB, ustack hashes what
//!   it read and answers with the SHA-256, both ends compare; and 64 MiB over an interface
//!   with the kernel's offloads taken (super-segments, partial checksums); the echo server of
//!   `servers.rs` returns 1 MiB that the client checks;
//! - TCP, ustack as the client: bulk to a kernel server and back, SHA-256 at both ends:
//!   4 MiB each way, and 512 MiB each way (about 12 s with a debug build; 1 GiB each way
//!   would take about 24 s), streamed at both ends without holding it in memory;
//! - UDP echo, datagrams from 1 byte to 8000 (fragmented).
//!
//! Without root or `/dev/net/tun` each test skips with a note, unless `USTACK_REQUIRE_ROOT`
//! is set (CI), which makes that a failure.

use core::net::SocketAddrV4;
use core::time::Duration;
use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};
use ustack_dev::Device;
use ustack_dev::tun::{Tun, TunConfig, TunQueue, TunStats};
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream, UdpSocket};
use ustack_runtime::multi::{ShardApp, ShardContext, ShardedBuilder};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{Interest, Runtime, RuntimeBuilder};
use ustack_runtime::servers::{Protocol, Server};
use ustack_stack::Instant;
use ustack_testkit::netns::{
    KERNEL_IP, PY_ECHO_CLIENT, TunRig, USTACK_IP, python_argv, root_or_skip, tool_or_skip,
};
use ustack_wire::checksum::checksum;

mod kernel;

use kernel::{
    KernelServer, LIMIT, Source, Ustack, builder, drive, hex, idle, python, read_into, would_block,
    write_from,
};

type Rt = Runtime<TunQueue>;

fn rig(test: &str) -> Option<TunRig> {
    root_or_skip(test)?;
    Some(TunRig::new(1, None).expect("setting up the TUN rig"))
}

// ---- ICMP -------------------------------------------------------------------------------

#[test]
fn kernel_pings_ustack() {
    let Some(mut rig) = rig("kernel_pings_ustack") else {
        return;
    };
    if !tool_or_skip("kernel_pings_ustack", "ping") {
        return;
    }
    let app = Ustack::start(builder(), rig.queues.remove(0), |rt, stop| {
        idle(rt, stop)?;
        let mib = rt.stack().mib();
        Ok((
            mib.get(Counter::IcmpInEchos),
            mib.get(Counter::IcmpOutEchoReps),
            mib.get(Counter::IpReasmOKs),
            mib.get(Counter::IpFragCreates),
        ))
    });
    let ip = USTACK_IP.to_string();
    for size in ["56", "4000"] {
        let out = rig
            .ns
            .run(
                LIMIT,
                &["ping", "-c", "3", "-i", "0.2", "-W", "2", "-s", size, &ip],
            )
            .expect("ping answered");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("3 packets transmitted, 3 received"),
            "ping -s {size}: {text}"
        );
    }
    let (in_echos, out_reps, reasm, frags) = app.finish();
    assert_eq!((in_echos, out_reps), (6, 6));
    // 4000 bytes of ICMP over a 1500-byte MTU: three fragments each way, per echo.
    assert_eq!(reasm, 3, "echo requests reassembled");
    assert_eq!(frags, 9, "fragments of the echo replies");
}

// ---- TCP: ustack as the server ------------------------------------------------------------

/// The kernel client of [`ustack_sink`]: sends `n` bytes, half-closes, prints the
/// SHA-256 of what it sent and the server's answer.
const SINK_CLIENT: &str = r#"
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
t = time.monotonic()
s = socket.create_connection((host, port), timeout=20)
sent = stream(s, n, n)
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    reply += b
t = time.monotonic() - t
print(sent, reply.decode(), f"{t:.6f}")
"#;

/// ustack's side: accept one connection on `port`, read to its end hashing, answer with
/// the SHA-256 in hex and close. Returns the bytes read and the digest.
fn ustack_sink(rt: &mut Rt, stop: &AtomicBool, port: u16) -> io::Result<(u64, String)> {
    let listener = TcpListener::bind(rt, SocketAddrV4::new(USTACK_IP, port), 16)?;
    rt.register(&listener, 0, Interest::READABLE, Mode::Level)?;
    let mut conn: Option<TcpStream> = None;
    let mut hasher = Sha256::new();
    let mut total = 0;
    let mut reply: Option<String> = None;
    let mut off = 0;
    let mut buf = vec![0; 64 * 1024];
    let done = drive(rt, stop, |rt| {
        if conn.is_none() {
            match listener.accept(rt) {
                Ok((s, _)) => {
                    rt.register(&s, 1, Interest::READABLE | Interest::WRITABLE, Mode::Edge)?;
                    conn = Some(s);
                }
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let s = conn.as_ref().expect("accepted");
        if reply.is_none() {
            let (n, fin) = read_into(rt, s, &mut buf, &mut hasher)?;
            total += n;
            if !fin {
                return Ok(None);
            }
            reply = Some(hex(&core::mem::take(&mut hasher).finalize()));
        }
        let digest = reply.as_ref().expect("set above");
        if !write_from(rt, s, digest.as_bytes(), &mut off)? {
            return Ok(None);
        }
        s.shutdown(rt, Shutdown::Write)?;
        Ok(Some((total, digest.clone())))
    })?;
    let done = done.ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
    // Stay up for the client's last ACKs and its FIN.
    idle(rt, stop)?;
    Ok(done)
}

/// A kernel client sends `n` bytes to [`ustack_sink`] (over an interface with the
/// kernel's offloads taken if `offload`); SHA-256 compared at both ends. The queue's
/// counters at the end, if the test ran.
fn kernel_sends_to_ustack(test: &str, n: usize, offload: bool) -> Option<TunStats> {
    root_or_skip(test)?;
    let mut rig = if offload {
        TunRig::with_offload(1)
    } else {
        TunRig::new(1, None)
    }
    .expect("setting up the TUN rig");
    let port = 9;
    let app = Ustack::start(builder(), rig.queues.remove(0), move |rt, stop| {
        let done = ustack_sink(rt, stop, port)?;
        Ok((done, *rt.device().stats()))
    });
    let out = python(
        &rig,
        SINK_CLIENT,
        &[n.to_string(), USTACK_IP.to_string(), port.to_string()],
    );
    let ((bytes, ustack_digest), stats) = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent_digest, answer, secs] = fields[..] else {
        panic!("client printed `{out}`");
    };
    assert_eq!(bytes, n as u64, "bytes ustack read");
    assert_eq!(
        ustack_digest, sent_digest,
        "SHA-256: ustack read what was sent"
    );
    assert_eq!(answer, sent_digest, "the client got ustack's digest back");
    let secs: f64 = secs.parse().expect("seconds");
    eprintln!(
        "{test}: {n} bytes kernel -> ustack in {secs:.3} s ({:.1} MB/s), {} packets read \
         ({} super-segments)",
        n as f64 / secs / 1e6,
        stats.rx_packets,
        stats.rx_gso
    );
    Some(stats)
}

#[test]
fn kernel_client_sends_1mib_to_ustack() {
    kernel_sends_to_ustack("kernel_client_sends_1mib_to_ustack", 1 << 20, false);
}

#[test]
fn kernel_client_sends_16mib_to_ustack() {
    kernel_sends_to_ustack("kernel_client_sends_16mib_to_ustack", 16 << 20, false);
}

/// With the offloads taken, the kernel sends super-segments with partial checksums: the
/// queue completes each checksum and the stack takes segments far larger than the MTU.
#[test]
fn kernel_client_sends_64mib_to_ustack_in_super_segments() {
    let test = "kernel_client_sends_64mib_to_ustack_in_super_segments";
    let Some(s) = kernel_sends_to_ustack(test, 64 << 20, true) else {
        return;
    };
    assert!(s.rx_gso > 0, "no super-segment came: {s:?}");
    assert!(s.rx_csum_completed > 0, "no partial checksum came: {s:?}");
    assert_eq!(
        (s.rx_bad_vnet, s.rx_truncated, s.rx_errors),
        (0, 0, 0),
        "{s:?}"
    );
    // Far fewer reads than 1500-byte packets would need.
    assert!(s.rx_packets < (64 << 20) / 1460 / 4, "{s:?}");
}

#[test]
fn kernel_client_through_ustack_echo_server() {
    let Some(mut rig) = rig("kernel_client_through_ustack_echo_server") else {
        return;
    };
    let n = 1 << 20;
    let app = Ustack::start(builder(), rig.queues.remove(0), |rt, stop| {
        let mut server = Server::bind(rt, Protocol::Echo, SocketAddrV4::new(USTACK_IP, 7), None)?;
        while !stop.load(Ordering::Relaxed) {
            server.step(rt, Some(Duration::from_millis(10)))?;
        }
        Ok(*server.stats())
    });
    let out = python(
        &rig,
        PY_ECHO_CLIENT,
        &[n.to_string(), USTACK_IP.to_string(), "7".to_owned()],
    );
    let stats = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent, echoed, got] = fields[..] else {
        panic!("client printed `{out}`");
    };
    assert_eq!(got, n.to_string(), "bytes echoed back");
    assert_eq!(echoed, sent, "SHA-256 of the echo");
    assert_eq!((stats.accepted, stats.bytes_in), (1, n as u64));
    assert_eq!(stats.errors, 0);
}

// ---- TCP: ustack as the client ------------------------------------------------------------

/// ustack connects to a kernel bulk server ([`KernelServer`]), sends `up` bytes and
/// half-closes; the server reads them to the end, sends `down` bytes and closes. SHA-256
/// compared at both ends, both ways; prints the rate of each direction (the kernel starts
/// sending only once it has read everything, so ustack's first byte read ends the upload).
fn ustack_client_bulk(test: &str, up: u64, down: u64) {
    let Some(mut rig) = rig(test) else {
        return;
    };
    let port = 5001;
    let server = KernelServer::start(&rig.ns, down as usize, port, None);
    let app = Ustack::start(builder(), rig.queues.remove(0), move |rt, stop| {
        let start = std::time::Instant::now();
        let s = TcpStream::connect(rt, SocketAddrV4::new(KERNEL_IP, port))?;
        rt.register(&s, 1, Interest::READABLE | Interest::WRITABLE, Mode::Edge)?;
        let mut source = Source::new(up, 5);
        let mut shut = false;
        let mut hasher = Sha256::new();
        let (mut got, mut first) = (0, None);
        let mut buf = vec![0; 64 * 1024];
        let done = drive(rt, stop, |rt| {
            if !shut && source.write(rt, &s)? {
                s.shutdown(rt, Shutdown::Write)?;
                shut = true;
            }
            let (n, fin) = read_into(rt, &s, &mut buf, &mut hasher)?;
            got += n;
            if got > 0 && first.is_none() {
                first = Some(start.elapsed());
            }
            Ok(fin.then(|| (got, hex(&core::mem::take(&mut hasher).finalize()))))
        })?;
        let (got, digest) =
            done.ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
        let (all, first) = (start.elapsed(), first.unwrap_or_default());
        s.close(rt)?;
        Ok((got, digest, source.digest(), first, all - first))
    });
    // The kernel server ends once it has sent everything and closed.
    let rest = server.finish();
    // ustack's side ends by itself once it has read the kernel's FIN.
    let (got, got_digest, sent_digest, up_time, down_time) = app.join();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let [k_got, k_digest, k_sent_digest] = fields[..] else {
        panic!("kernel server printed `{rest}`");
    };
    assert_eq!(k_got, up.to_string(), "bytes the kernel read");
    assert_eq!(
        k_digest, sent_digest,
        "SHA-256: the kernel read what ustack sent"
    );
    assert_eq!(got, down, "bytes ustack read");
    assert_eq!(
        got_digest, k_sent_digest,
        "SHA-256: ustack read what the kernel sent"
    );
    let rate = |n: u64, t: Duration| n as f64 / t.as_secs_f64() / 1e6;
    eprintln!(
        "{test}: {up} bytes ustack -> kernel in {:.3} s ({:.1} MB/s), {down} bytes kernel -> \
         ustack in {:.3} s ({:.1} MB/s)",
        up_time.as_secs_f64(),
        rate(up, up_time),
        down_time.as_secs_f64(),
        rate(down, down_time)
    );
}

#[test]
fn ustack_client_bulk_both_ways_with_kernel_server() {
    ustack_client_bulk(
        "ustack_client_bulk_both_ways_with_kernel_server",
        4 << 20,
        4 << 20,
    );
}

#[test]
fn ustack_client_moves_512mib_each_way_with_kernel_server() {
    ustack_client_bulk(
        "ustack_client_moves_512mib_each_way_with_kernel_server",
        512 << 20,
        512 << 20,
    );
}

// ---- UDP ----------------------------------------------------------------------------------

/// The kernel client: datagrams of many sizes (the largest fragmented both ways), each
/// echo compared byte for byte and by source; prints `ok <count>`.
const UDP_CLIENT: &str = r#"
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
sizes = [1, 2, 64, 100, 512, 1000, 1472, 1473, 3000, 8000] + list(range(1400, 1500, 7))
for i, n in enumerate(sizes):
    d = bytes((i * 31 + j) % 251 for j in range(n))
    s.sendto(d, (host, port))
    r, a = s.recvfrom(65536)
    if r != d or a != (host, port):
        sys.exit(f"datagram {i} ({n} bytes): got {len(r)} bytes from {a}")
print("ok", len(sizes))
"#;

#[test]
fn kernel_udp_client_through_ustack_echo() {
    let Some(mut rig) = rig("kernel_udp_client_through_ustack_echo") else {
        return;
    };
    let app = Ustack::start(builder(), rig.queues.remove(0), |rt, stop| {
        let sock = UdpSocket::bind(rt, SocketAddrV4::new(USTACK_IP, 7))?;
        rt.register(&sock, 1, Interest::READABLE, Mode::Level)?;
        let mut buf = vec![0; 65536];
        let mut echoed = 0u64;
        drive(rt, stop, |rt| {
            loop {
                match sock.recv_from(rt, &mut buf) {
                    Ok((n, from)) => {
                        sock.send_to(rt, &buf[..n], from)?;
                        echoed += 1;
                    }
                    Err(e) if would_block(&e) => return Ok(None::<()>),
                    Err(e) => return Err(e),
                }
            }
        })?;
        Ok(echoed)
    });
    let out = python(&rig, UDP_CLIENT, &[USTACK_IP.to_string(), "7".to_owned()]);
    let echoed = app.finish();
    assert_eq!(out.trim(), "ok 25");
    assert_eq!(echoed, 25);
}

// ---- the device ---------------------------------------------------------------------------

#[test]
fn multi_queue_interface_has_every_queue() {
    let Some(()) = root_or_skip("multi_queue_interface_has_every_queue") else {
        return;
    };
    let rig = TunRig::new(3, Some(1400)).expect("setting up the TUN rig");
    assert_eq!(rig.mtu, 1400);
    let queues: Vec<usize> = rig.queues.iter().map(|q| q.queue()).collect();
    assert_eq!(queues, [0, 1, 2]);
    let out = rig
        .ns
        .run(LIMIT, &["ip", "-details", "link", "show", "tun0"])
        .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mtu 1400"), "{text}");
    assert!(text.contains("multi_queue"), "{text}");
    assert!(text.contains("numqueues 3"), "{text}");
}

/// An ICMP echo request from `src` to `dst`, as bytes on a TUN queue (a bare IPv4 packet).
fn echo_request(src: core::net::Ipv4Addr, dst: core::net::Ipv4Addr, id: u16) -> Vec<u8> {
    let mut p = vec![0u8; 28 + 8];
    p[..12].copy_from_slice(&[0x45, 0, 0, 36, 0, 1, 0x40, 0, 64, 1, 0, 0]);
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20] = 8; // echo request
    p[24..26].copy_from_slice(&id.to_be_bytes());
    p[28..].copy_from_slice(b"ustack!!");
    let sum = checksum(&p[20..]);
    p[22..24].copy_from_slice(&sum.to_be_bytes());
    p
}

#[test]
fn device_moves_packets_and_counts_what_it_refuses() {
    let Some(mut rig) = rig("device_moves_packets_and_counts_what_it_refuses") else {
        return;
    };
    let mut q = rig.queues.remove(0);
    let now = Instant::ZERO;
    let mut buf = vec![0; q.caps().max_frame_len()];
    assert_eq!(q.caps().max_frame_len(), 1500, "IP medium: no link header");
    while q.recv(now, &mut buf).is_some() {}
    assert!(!q.wait(Some(Duration::ZERO)).unwrap(), "nothing waiting");

    // Refused: larger than the MTU (by us), not an IP packet (by the kernel).
    assert!(!q.send(now, &vec![0x45; 1501]));
    assert!(!q.send(now, &[0xff; 40]));
    assert_eq!(q.stats().tx_errors, 2);

    // The kernel answers a hand-made echo request on the same queue.
    let req = echo_request(USTACK_IP, KERNEL_IP, 0x7573);
    assert!(q.send(now, &req));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let reply = loop {
        assert!(std::time::Instant::now() < deadline, "no echo reply");
        q.wait(Some(Duration::from_millis(100))).unwrap();
        if let Some(n) = q.recv(now, &mut buf) {
            let p = &buf[..n];
            // Skip anything else the kernel sends; the reply is ICMP type 0 to us.
            if n == req.len() && p[9] == 1 && p[20] == 0 {
                break p.to_vec();
            }
        }
    };
    assert_eq!(&reply[12..16], &KERNEL_IP.octets(), "from the kernel");
    assert_eq!(&reply[16..20], &USTACK_IP.octets(), "to us");
    assert_eq!(&reply[24..26], &0x7573u16.to_be_bytes(), "our identifier");
    assert_eq!(&reply[28..], b"ustack!!", "our payload");
    let s = *q.stats();
    assert_eq!((s.tx_packets, s.tx_bytes), (1, req.len() as u64));
    assert!(s.rx_packets >= 1 && s.rx_bytes >= req.len() as u64);
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let bad = [
        (
            TunConfig {
                name: String::new(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a".repeat(16),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a/b".into(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a b".into(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                queues: 0,
                ..TunConfig::default()
            },
            "queues",
        ),
        (
            TunConfig {
                queues: 257,
                ..TunConfig::default()
            },
            "queues",
        ),
        (
            TunConfig {
                mtu: Some(67),
                ..TunConfig::default()
            },
            "MTU",
        ),
        (
            TunConfig {
                mtu: Some(65536),
                ..TunConfig::default()
            },
            "MTU",
        ),
    ];
    for (config, what) in bad {
        let e = Tun::open(&config).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{config:?}");
        assert!(e.to_string().contains(what), "{config:?}: {e}");
    }
    // A namespace file that does not exist: the error names it (before any root check).
    let config = TunConfig {
        netns: Some("/nonexistent/ns/net".into()),
        ..TunConfig::default()
    };
    let e = Tun::open(&config).expect_err("no such namespace");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("/nonexistent/ns/net"), "{e}");
    // 15 bytes is the longest name; `%d` is the kernel's to fill.
    for name in ["a".repeat(15), "ustack%d".to_owned()] {
        TunConfig {
            name,
            ..TunConfig::default()
        }
        .validate()
        .expect("valid");
    }
}

// ---- shards: one TUN queue each -----------------------------------------------------------

/// Kernel clients, arguments `conns n host port`: `conns` connections at once, each sends
/// `n` bytes and half-closes, then reads to the end; prints `ok <conns>`.
const MANY_CLIENTS: &str = r#"
conns, n, host, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
socks = [socket.create_connection((host, port), timeout=20) for _ in range(conns)]
def one(s, i):
    s.sendall(random.Random(i).randbytes(n))
    s.shutdown(socket.SHUT_WR)
    drain(s)
ts = [threading.Thread(target=one, args=(s, i)) for i, s in enumerate(socks)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("ok", conns)
"#;

/// One shard's sink: accepts on its listener, reads every connection to its end, closes.
#[derive(Default)]
struct ShardSink {
    conns: Vec<TcpStream>,
    accepted: u64,
    bytes: u64,
    buf: Vec<u8>,
}

impl ShardApp<TunQueue> for ShardSink {
    fn poll(&mut self, ctx: &mut ShardContext<'_, TunQueue>) -> io::Result<()> {
        while let Ok((s, _)) = ctx.listeners()[0].accept(ctx.rt) {
            self.accepted += 1;
            self.conns.push(s);
        }
        self.buf.resize(64 * 1024, 0);
        let mut open = Vec::new();
        for s in self.conns.drain(..) {
            let mut eof = false;
            loop {
                match s.read(ctx.rt, &mut self.buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(k) => self.bytes += k as u64,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            if eof {
                s.close(ctx.rt)?;
            } else {
                open.push(s);
            }
        }
        self.conns = open;
        Ok(())
    }
}

#[test]
fn two_shards_on_two_queues_serve_kernel_clients() {
    let Some(()) = root_or_skip("two_shards_on_two_queues_serve_kernel_clients") else {
        return;
    };
    let rig = TunRig::new(2, None).expect("setting up the TUN rig");
    let TunRig { queues, ns, .. } = rig;
    let (conns, n) = (16u64, 256 * 1024u64);
    let rt = ShardedBuilder::new(
        RuntimeBuilder::new().ipv4(USTACK_IP, 24),
        Rss::new(RssKey::MICROSOFT, 2),
    )
    .listen(SocketAddrV4::new(USTACK_IP, 9), 128)
    .start(queues, |_| ShardSink::default())
    .expect("two shards");
    let argv = python_argv(
        MANY_CLIENTS,
        &[
            conns.to_string(),
            n.to_string(),
            USTACK_IP.to_string(),
            "9".to_owned(),
        ],
    );
    let out = ns.run(LIMIT, &argv).expect("the kernel clients");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 16");
    let shards: Vec<(u64, u64)> = rt
        .stop()
        .into_iter()
        .map(|r| r.map(|s| (s.accepted, s.bytes)).expect("a shard failed"))
        .collect();
    eprintln!("two shards: (accepted, bytes) per shard {shards:?}");
    let accepted: u64 = shards.iter().map(|s| s.0).sum();
    let bytes: u64 = shards.iter().map(|s| s.1).sum();
    assert_eq!((accepted, bytes), (conns, conns * n));
    // The kernel spreads flows over the queues (by flow hash): with 16 flows, both shards
    // get some (all on one would be a 1 in 32,768 chance).
    assert!(shards.iter().all(|s| s.0 > 0), "{shards:?}");
    drop(ns);
}
