//! The bench's other Linux modes: busy-polling epoll workers (spinning, pinned) and the
//! io_uring servers (multishot accept and receive, provided buffers). A kernel without
//! io_uring skips its tests unless `USTACK_REQUIRE_IO_URING` is set.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, UdpSocket};
use std::time::{Duration, Instant};

use common::{Rng, TIMEOUT, assert_eof, connect, echo_round, wait_stats};
use ustack_baseline::{Proto, Server, ServerConfig, UringProto, UringServer};

/// Whether io_uring can be tested here; a skip says why (a failure when required).
fn uring_or_skip() -> bool {
    match ustack_baseline::uring_available() {
        Ok(()) => true,
        Err(why) if std::env::var_os("USTACK_REQUIRE_IO_URING").is_some() => {
            panic!("USTACK_REQUIRE_IO_URING is set but io_uring is not offered: {why}")
        }
        Err(why) => {
            eprintln!("skipped: io_uring is not offered here: {why}");
            false
        }
    }
}

/// `conns` connections each sending random-sized writes (up to 16 KiB, several provided
/// buffers' worth) and reading every byte back, `rounds` times; the bytes echoed.
fn echo_rounds(addr: std::net::SocketAddr, conns: usize, rounds: usize) -> u64 {
    let mut rng = Rng::new(9);
    let mut socks: Vec<_> = (0..conns).map(|_| connect(addr)).collect();
    let mut total = 0;
    for _ in 0..rounds {
        total += echo_round(&mut socks, &mut rng);
    }
    // Half-close: the server sees the end of stream and closes its side.
    for c in &mut socks {
        c.shutdown(Shutdown::Write).unwrap();
        assert_eof(c);
    }
    total
}

/// The CPU time of this process's thread named `name` (utime + stime of
/// /proc/self/task/TID/stat, in clock ticks) and its allowed CPUs (`Cpus_allowed_list`).
fn thread_cpu(name: &str) -> (u64, String) {
    // A thread names itself once it runs: give it a moment.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(found) = find_thread(name) {
            return found;
        }
        assert!(Instant::now() < deadline, "no thread named {name}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn find_thread(name: &str) -> Option<(u64, String)> {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap();
        let rest = &stat[stat.rfind(')').unwrap() + 1..];
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(|x| x.parse().unwrap())
            .collect();
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned();
        return Some((f[0] + f[1], cpus));
    }
    None
}

#[test]
fn a_busy_worker_spins_on_its_own_cpu_and_echoes_every_byte() {
    let server = Server::start(ServerConfig {
        workers: 1,
        busy_poll: true,
        cpus: vec![0],
        ..ServerConfig::new(Proto::Echo, "127.0.0.1:0".parse().unwrap())
    })
    .unwrap();
    let total = echo_rounds(server.local_addr(), 20, 3);
    wait_stats(&server, "every byte counted", |s| {
        s.bytes_in == total && s.connections_closed == 20
    });
    // Idle, it still runs: it keeps polling and finding nothing, and uses more CPU than a
    // sleeping worker does in the same time (below), however busy the machine is.
    let (before, cpus) = thread_cpu("baseline-echo-0");
    assert_eq!(cpus, "0", "the worker is pinned to CPU 0");
    let polls = server.stats().empty_polls;
    std::thread::sleep(Duration::from_millis(400));
    let (after, _) = thread_cpu("baseline-echo-0");
    let more = server.stats().empty_polls - polls;
    assert!(more >= 1024, "{more} empty polls while idle");
    assert!(after - before > 2, "{} ticks while idle", after - before);
    server.stop().unwrap();
}

#[test]
fn an_epoll_worker_sleeps_when_idle() {
    // The other side of the check above: the same measurement of a sleeping worker.
    let server = Server::start(ServerConfig {
        workers: 1,
        ..ServerConfig::new(Proto::Echo, "127.0.0.1:0".parse().unwrap())
    })
    .unwrap();
    let (before, _) = thread_cpu("baseline-echo-0");
    std::thread::sleep(Duration::from_millis(400));
    let (after, _) = thread_cpu("baseline-echo-0");
    assert!(after - before <= 2, "{} ticks while idle", after - before);
    server.stop().unwrap();
}

#[test]
fn io_uring_echo_returns_every_byte_and_closes_on_end_of_stream() {
    if !uring_or_skip() {
        return;
    }
    let server =
        UringServer::start(UringProto::Echo, "127.0.0.1:0".parse().unwrap(), None).unwrap();
    // More bytes than the provided buffers hold at once: they must come back to the kernel.
    let total = echo_rounds(server.local_addr(), 50, 8);
    let pool = u64::from(ustack_baseline::URING_BUFS) * ustack_baseline::URING_BUF as u64;
    assert!(total > pool, "{total} bytes moved, the pool holds {pool}");
    assert_eq!(server.accepted(), 50);
    server.stop().unwrap();
}

#[test]
fn io_uring_reply_close_answers_one_request_then_closes_first() {
    if !uring_or_skip() {
        return;
    }
    let server = UringServer::start(
        UringProto::ReplyClose { size: 100 },
        "127.0.0.1:0".parse().unwrap(),
        None,
    )
    .unwrap();
    let mut rng = Rng::new(4);
    for i in 0..30 {
        let mut c = connect(server.local_addr());
        let req = rng.bytes(100);
        // In two pieces: the server waits for the whole request.
        c.write_all(&req[..40]).unwrap();
        std::thread::sleep(Duration::from_millis(if i == 0 { 20 } else { 0 }));
        c.write_all(&req[40..]).unwrap();
        let mut back = vec![0; 100];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, req, "request {i}");
        assert_eof(&mut c);
    }
    assert_eq!(server.accepted(), 30);
    server.stop().unwrap();
}

#[test]
fn io_uring_udp_echo_sends_each_datagram_back_to_its_sender() {
    if !uring_or_skip() {
        return;
    }
    let server =
        UringServer::start(UringProto::UdpEcho, "127.0.0.1:0".parse().unwrap(), None).unwrap();
    let mut rng = Rng::new(5);
    let clients: Vec<UdpSocket> = (0..3)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s.connect(server.local_addr()).unwrap();
            s
        })
        .collect();
    let mut buf = vec![0u8; 4096];
    for i in 0..300 {
        let c = &clients[i % clients.len()];
        let n = rng.range(1, 1472);
        let data = rng.bytes(n);
        c.send(&data).unwrap();
        // The ring's thread shares this process: its task work may interrupt the wait.
        let n = loop {
            match c.recv(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => break r.unwrap(),
            }
        };
        assert_eq!(&buf[..n], &data[..], "datagram {i}");
    }
    server.stop().unwrap();
}
