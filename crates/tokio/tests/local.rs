//! Model (b), `ustack_tokio::local`: two stacks over a shm link, both driven inside one
//! current-thread tokio runtime (no loop thread), an echo server and clients on it.

use core::time::Duration;
use std::cell::Cell;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::local::{LocalStack, LocalTcpListener, LocalTcpStream, LocalUdpSocket};

/// Every test is bounded by this (on tokio's clock).
const LIMIT: Duration = Duration::from_secs(60);
const CONNS: u64 = 8;
const BYTES: usize = 256 * 1024;

/// This process's threads whose name starts with "ustack" (ustack-net names its loop
/// threads `ustack-net-N`; the test harness's threads are named after the tests).
fn ustack_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|n| n.starts_with("ustack"))
        })
        .count()
}

/// The stack's TCP sockets other than listeners and TIME-WAIT.
fn open_conns(stack: &LocalStack) -> usize {
    let rt = stack.runtime();
    let now = rt.now();
    rt.stack()
        .sockets(now)
        .iter()
        .filter(|s| !matches!(s.state, "LISTEN" | "UNCONN" | "TIME-WAIT"))
        .count()
}

/// Runs `f` on a current-thread runtime inside a `LocalSet`, bounded by [`LIMIT`].
fn on_one_thread<F: core::future::Future<Output = ()>>(f: impl FnOnce() -> F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, async {
        tokio::time::timeout(LIMIT, f()).await.expect("in time");
    });
}

/// The server and client stacks over a new shm link.
fn stacks() -> (LocalStack, LocalStack) {
    let (a, b) = ShmLink::pair(&ShmConfig::default()).unwrap();
    let one = |v: Vec<_>| v.into_iter().next().unwrap();
    let server = RuntimeBuilder::new()
        .ipv4("10.0.0.1".parse().unwrap(), 24)
        .seed(1);
    let client = RuntimeBuilder::new()
        .ipv4("10.0.0.2".parse().unwrap(), 24)
        .seed(2);
    (
        LocalStack::new(server, one(a)).unwrap(),
        LocalStack::new(client, one(b)).unwrap(),
    )
}

/// [`CONNS`] connections each send [`BYTES`] of their own pattern (in uneven pieces) and
/// read the echo back, every byte compared, all on one thread: no thread is started; the
/// connections close on both stacks once dropped; and an idle stack's driver waits on the
/// reactor rather than turning (a handful of rounds in 300 ms, not thousands).
#[test]
fn echo_over_shm_on_one_thread_verifies_every_byte() {
    on_one_thread(|| async {
        let (server, client) = stacks();
        let addr = "10.0.0.1:7".parse().unwrap();
        let listener = LocalTcpListener::bind(&server, addr).unwrap();
        let served = Rc::new(Cell::new(0u64));
        let counted = served.clone();
        tokio::task::spawn_local(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::task::spawn_local(async move {
                    let mut buf = vec![0u8; 7000];
                    loop {
                        match s.read(&mut buf).await.unwrap() {
                            0 => break,
                            n => s.write_all(&buf[..n]).await.unwrap(),
                        }
                    }
                    counted.set(counted.get() + 1);
                });
            }
        });
        let mut clients = Vec::new();
        for i in 0..CONNS {
            let c = LocalTcpStream::connect(&client, addr).await.unwrap();
            clients.push(tokio::task::spawn_local(async move {
                let want = ustack_testkit::pattern(BYTES, i);
                let (mut r, mut w) = tokio::io::split(c);
                let sent = want.clone();
                let writer = tokio::task::spawn_local(async move {
                    for piece in sent.chunks(1000 + 97 * i as usize) {
                        w.write_all(piece).await.unwrap();
                    }
                    w
                });
                let mut got = vec![0u8; BYTES];
                r.read_exact(&mut got).await.unwrap();
                assert!(got == want, "connection {i}: the echo differs");
                drop(r.unsplit(writer.await.unwrap()));
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        assert_eq!(ustack_threads(), 0, "no loop thread started for the stacks");
        // Closed: the server's tasks saw the end, and neither stack keeps a connection.
        while served.get() < CONNS || open_conns(&server) + open_conns(&client) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (rounds, _) = server.driver_counters();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = server.driver_counters().0 - rounds;
        assert!(idle < 100, "{idle} rounds in 300 ms idle: the driver spins");
    });
}

/// A refused connect reports `ConnectionRefused`; a link without a file is refused.
#[test]
fn refused_connect_and_a_link_without_a_file() {
    on_one_thread(|| async {
        let (_server, client) = stacks();
        let e = LocalTcpStream::connect(&client, "10.0.0.1:9".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
        let (sim, _) = ustack_runtime::sim_pair(Default::default());
        let b = RuntimeBuilder::new().ipv4("10.0.0.3".parse().unwrap(), 24);
        let e = LocalStack::new(b, sim).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    });
}

/// `into_split`: a task writing 256 KiB through the write half while another reads the
/// echo through the read half, at once (each waits for its own readiness); dropping the
/// write half sends the FIN (the server's task sees the end and closes, the read half
/// reads 0); `reunite` refuses halves of two streams and gives back the stream from its
/// own; both stacks hold no connection at the end.
#[test]
fn into_split_halves_read_and_write_from_two_tasks() {
    on_one_thread(|| async {
        let (server, client) = stacks();
        let addr = "10.0.0.1:7".parse().unwrap();
        let listener = LocalTcpListener::bind(&server, addr).unwrap();
        tokio::task::spawn_local(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::task::spawn_local(async move {
                    let (mut r, mut w) = s.into_split();
                    tokio::io::copy(&mut r, &mut w).await.unwrap();
                    // The peer's FIN: drop both halves, closing this side.
                });
            }
        });
        let c = LocalTcpStream::connect(&client, addr).await.unwrap();
        let (mut r, mut w) = c.into_split();
        assert_eq!(w.peer_addr().unwrap(), addr);
        let want = ustack_testkit::pattern(BYTES, 3);
        let sent = want.clone();
        let writer = tokio::task::spawn_local(async move {
            for piece in sent.chunks(1500) {
                w.write_all(piece).await.unwrap();
            }
            // The FIN leaves with the write half.
            drop(w);
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(
            got == want,
            "the echo differs ({} bytes of {BYTES})",
            got.len()
        );

        // Halves of two streams do not reunite; a stream's own do.
        let a = LocalTcpStream::connect(&client, addr).await.unwrap();
        let b = LocalTcpStream::connect(&client, addr).await.unwrap();
        let ((ar, aw), (br, bw)) = (a.into_split(), b.into_split());
        let e = ar.reunite(bw).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let e = br.reunite(aw).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        let c = LocalTcpStream::connect(&client, addr).await.unwrap();
        let (cr, cw) = c.into_split();
        let mut c = cr.reunite(cw).unwrap();
        c.write_all(b"again").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"again");
        drop(c);
        while open_conns(&server) + open_conns(&client) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

/// `readable` waits for bytes without taking them, `try_read` takes them without waiting
/// (`WouldBlock` when none), and the peer's FIN makes the stream readable with `Ok(0)`.
#[test]
fn readable_then_try_read_without_waiting() {
    on_one_thread(|| async {
        let (server, client) = stacks();
        let addr = "10.0.0.1:7".parse().unwrap();
        let listener = LocalTcpListener::bind(&server, addr).unwrap();
        let mut c = LocalTcpStream::connect(&client, addr).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            s.try_read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        let quiet = tokio::time::timeout(Duration::from_millis(100), s.readable()).await;
        assert!(quiet.is_err(), "readable with nothing sent");
        c.write_all(b"hello").await.unwrap();
        s.readable().await.unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(
            s.try_read(&mut buf).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        c.shutdown().await.unwrap();
        s.readable().await.unwrap();
        assert_eq!(s.try_read(&mut buf).unwrap(), 0, "the end of the stream");
    });
}

/// `LocalUdpSocket`: datagrams each way between two stacks, each arriving whole with its
/// sender's address; a `recv_from` waiting before the datagram is sent is woken by it.
#[test]
fn udp_datagrams_both_ways_with_their_senders() {
    on_one_thread(|| async {
        let (server, client) = stacks();
        let a = LocalUdpSocket::bind(&server, "10.0.0.1:53".parse().unwrap()).unwrap();
        let b = LocalUdpSocket::bind(&client, "10.0.0.2:0".parse().unwrap()).unwrap();
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        assert_eq!(a_addr, "10.0.0.1:53".parse().unwrap());
        assert_ne!(b_addr.port(), 0, "an ephemeral port");
        let a = Rc::new(a);
        let waiting = tokio::task::spawn_local({
            let a = a.clone();
            async move {
                let mut buf = [0u8; 2048];
                let (n, from) = a.recv_from(&mut buf).await.unwrap();
                (buf[..n].to_vec(), from)
            }
        });
        tokio::task::yield_now().await;
        let msg = ustack_testkit::pattern(1200, 5);
        assert_eq!(b.send_to(&msg, a_addr).await.unwrap(), 1200);
        let (got, from) = waiting.await.unwrap();
        assert_eq!(got, msg);
        assert_eq!(from, b_addr);
        for i in 0..10u8 {
            a.send_to(&[i; 100], b_addr).await.unwrap();
        }
        let mut buf = [0u8; 2048];
        for i in 0..10u8 {
            let (n, from) = b.recv_from(&mut buf).await.unwrap();
            assert_eq!((&buf[..n], from), (&[i; 100][..], a_addr));
        }
    });
}
