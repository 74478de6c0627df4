//! Model (b), `ustack_tokio::local`: two stacks over a shm link, both driven inside one
//! current-thread tokio runtime (no loop thread), an echo server and clients on it.

use core::time::Duration;
use std::cell::Cell;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::local::{LocalStack, LocalTcpListener, LocalTcpStream};

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
