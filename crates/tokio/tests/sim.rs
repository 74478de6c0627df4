//! ustack-tokio over an in-process sim link (two stacks, one loop thread, the real
//! clock): a tokio echo server and many concurrent tokio clients with every byte checked,
//! `into_split` across tasks, UDP, and cancellation (a dropped `connect`, a task aborted
//! in a read: the stack's socket table and the runtime's counters show the socket closed).

use core::time::Duration;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::{Net, TcpListener, TcpStream, UdpSocket};

const LIMIT: Duration = Duration::from_secs(60);
const SERVER: &str = "10.0.0.1";

fn sim_nets() -> (Net, Net) {
    let a = RuntimeBuilder::new()
        .ipv4(SERVER.parse().unwrap(), 24)
        .seed(1);
    let b = RuntimeBuilder::new()
        .ipv4("10.0.0.2".parse().unwrap(), 24)
        .seed(2);
    Net::sim_pair(a, b, SimLinkConfig::default()).expect("sim pair")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn addr(port: u16) -> String {
    format!("{SERVER}:{port}")
}

/// `n` bytes of connection `salt`'s own pattern.
fn pattern(n: usize, salt: u64) -> Vec<u8> {
    ustack_testkit::pattern(n, salt)
}

/// The stack's TCP sockets (state, remote) other than listeners.
fn connections(net: &Net) -> Vec<(&'static str, Option<std::net::SocketAddr>)> {
    net.on_each_shard(|rt| {
        let now = rt.now();
        rt.stack()
            .sockets(now)
            .into_iter()
            .filter(|s| s.state != "LISTEN" && s.state != "UNCONN")
            .map(|s| (s.state, s.remote))
            .collect::<Vec<_>>()
    })
    .unwrap()
    .concat()
}

/// `f()` once it is empty, or after 2 s (the loop closes a dropped socket in its next
/// round, shortly after the drop).
fn settled<T>(f: impl Fn() -> Vec<T>) -> Vec<T> {
    let end = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let v = f();
        if v.is_empty() || std::time::Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An echo server: a task per connection, `tokio::io::copy` between the halves of
/// `into_split`.
fn spawn_echo(listener: TcpListener) {
    tokio::spawn(async move {
        loop {
            let (s, _) = listener.accept().await.expect("accept");
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                tokio::io::copy(&mut r, &mut w).await.expect("copy");
                w.shutdown().await.expect("shutdown");
            });
        }
    });
}

/// One client: writes `len` bytes of its pattern while reading the echo; returns what
/// came back.
async fn client(net: Net, port: u16, salt: u64, len: usize) -> Vec<u8> {
    let s = TcpStream::connect(&net, addr(port)).await.expect("connect");
    let (mut r, mut w) = s.into_split();
    let data = pattern(len, salt);
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(1000 + salt as usize % 3000) {
            w.write_all(chunk).await.expect("write");
        }
        w.shutdown().await.expect("shutdown");
        w
    });
    let mut got = Vec::with_capacity(len);
    r.read_to_end(&mut got).await.expect("read");
    drop(writer.await.unwrap());
    got
}

#[test]
fn tokio_echo_many_concurrent_connections_every_byte_checked() {
    let (server, client_net) = sim_nets();
    echo_many(server, client_net, 64, 100_000);
}

/// The same over a shm link of two queue pairs: two shards a side, each with its loop
/// thread, the listener on both.
#[test]
fn tokio_echo_over_two_shm_shards_every_byte_checked() {
    let (a, b) = ShmLink::pair(&ShmConfig {
        queue_pairs: 2,
        ..ShmConfig::default()
    })
    .expect("shm pair");
    let server = Net::shm(RuntimeBuilder::new().ipv4(SERVER.parse().unwrap(), 24), a).unwrap();
    let client = Net::shm(
        RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24),
        b,
    )
    .unwrap();
    assert_eq!(server.shards(), 2);
    echo_many(server, client.clone(), 32, 100_000);
    // The client closed first: its TIME-WAIT records show which shards carried connections.
    let per_shard = client
        .on_each_shard(|rt| {
            let now = rt.now();
            rt.stack()
                .sockets(now)
                .iter()
                .filter(|s| s.state != "LISTEN" && s.state != "UNCONN")
                .count()
        })
        .unwrap();
    assert!(
        per_shard.iter().all(|&n| n > 0),
        "connections on each shard: {per_shard:?}"
    );
}

/// `conns` concurrent clients of `len` bytes each against a tokio echo server on port 7.
fn echo_many(server: Net, client_net: Net, conns: u64, len: usize) {
    runtime().block_on(async {
        let listener = TcpListener::bind(&server, addr(7)).unwrap();
        spawn_echo(listener);
        let clients: Vec<_> = (0..conns)
            .map(|i| tokio::spawn(client(client_net.clone(), 7, i, len)))
            .collect();
        let all = async {
            for (i, c) in clients.into_iter().enumerate() {
                let got = c.await.unwrap();
                assert_eq!(got.len(), len, "connection {i}: length");
                assert!(
                    got == pattern(len, i as u64),
                    "connection {i}: bytes differ"
                );
            }
        };
        tokio::time::timeout(LIMIT, all).await.expect("in time");
    });
}

#[test]
fn a_current_thread_runtime_serves_and_connects() {
    let (server, client_net) = sim_nets();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind(&server, addr(8)).unwrap();
        assert_eq!(listener.local_addr().unwrap(), addr(8).parse().unwrap());
        spawn_echo(listener);
        let got = tokio::time::timeout(LIMIT, client(client_net, 8, 99, 300_000))
            .await
            .expect("in time");
        assert!(got == pattern(300_000, 99), "bytes differ");
    });
}

#[test]
fn udp_send_to_and_recv_from() {
    let (server, client_net) = sim_nets();
    runtime().block_on(async {
        let s = UdpSocket::bind(&server, addr(53)).unwrap();
        let c = UdpSocket::bind(&client_net, "10.0.0.2:0").unwrap();
        let echo = tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            for _ in 0..10 {
                let (n, from) = s.recv_from(&mut buf).await.unwrap();
                s.send_to(&buf[..n], from).await.unwrap();
            }
        });
        let mut buf = [0u8; 2048];
        for i in 0..10u64 {
            let msg = pattern(100 + i as usize * 100, i);
            c.send_to(&msg, addr(53)).await.unwrap();
            let (n, from) = tokio::time::timeout(LIMIT, c.recv_from(&mut buf))
                .await
                .expect("in time")
                .unwrap();
            assert_eq!(from, addr(53).parse::<SocketAddr>().unwrap());
            assert_eq!(&buf[..n], &msg[..]);
        }
        echo.await.unwrap();
    });
}

#[test]
fn a_dropped_connect_leaves_no_socket() {
    let (_server, client_net) = sim_nets();
    runtime().block_on(async {
        // Nobody has 10.0.0.9: the handshake cannot finish.
        let r = tokio::time::timeout(
            Duration::from_millis(300),
            TcpStream::connect(&client_net, "10.0.0.9:80"),
        )
        .await;
        assert!(r.is_err(), "the connect cannot have finished");
    });
    // The close is handed to the loop, and the runtime closes the socket in its next
    // round: give it a moment.
    let left = settled(|| connections(&client_net));
    assert!(
        left.is_empty(),
        "sockets left after a dropped connect: {left:?}"
    );
}

#[test]
fn an_aborted_task_closes_its_stream() {
    let (server, client_net) = sim_nets();
    runtime().block_on(async {
        let listener = TcpListener::bind(&server, addr(9)).unwrap();
        let before = client_net.runtime_stats().unwrap().closed_on_drop;
        let c = TcpStream::connect(&client_net, addr(9)).await.unwrap();
        let (mut s, _) = listener.accept().await.unwrap();
        // A task parked in a read that will never complete, then aborted.
        let reader = tokio::spawn(async move {
            let mut c = c;
            let mut buf = [0u8; 16];
            let _ = c.read(&mut buf).await;
            c
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        reader.abort();
        assert!(reader.await.unwrap_err().is_cancelled());
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(LIMIT, s.read(&mut buf))
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(n, 0, "the peer sees the FIN of the aborted task's stream");
        assert_eq!(
            client_net.runtime_stats().unwrap().closed_on_drop,
            before + 1
        );
    });
    let left = settled(|| {
        connections(&client_net)
            .into_iter()
            .filter(|(state, _)| *state == "ESTAB")
            .collect()
    });
    assert!(
        left.is_empty(),
        "an established connection is left: {left:?}"
    );
}

#[test]
fn a_dropped_accept_takes_nothing_from_the_queue() {
    let (server, client_net) = sim_nets();
    runtime().block_on(async {
        let listener = TcpListener::bind(&server, addr(10)).unwrap();
        let r = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(r.is_err(), "nobody connected yet");
        let mut c = TcpStream::connect(&client_net, addr(10)).await.unwrap();
        let (mut s, peer) = tokio::time::timeout(LIMIT, listener.accept())
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        c.write_all(b"after a cancelled accept").await.unwrap();
        let mut got = [0u8; 24];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"after a cancelled accept");
    });
}

#[test]
fn a_refused_connect_is_connection_refused() {
    let (_server, client_net) = sim_nets();
    runtime().block_on(async {
        let e = tokio::time::timeout(LIMIT, TcpStream::connect(&client_net, addr(11)))
            .await
            .expect("in time")
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    });
}

/// A future that counts how often it is polled.
struct Counted<F> {
    inner: core::pin::Pin<Box<F>>,
    polls: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<F: core::future::Future> core::future::Future for Counted<F> {
    type Output = F::Output;
    fn poll(
        mut self: core::pin::Pin<&mut Self>,
        cx: &mut core::task::Context<'_>,
    ) -> core::task::Poll<F::Output> {
        self.polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.as_mut().poll(cx)
    }
}

#[test]
fn a_socket_that_is_not_ready_is_not_polled() {
    let (server, client_net) = sim_nets();
    runtime().block_on(async {
        let listener = TcpListener::bind(&server, addr(12)).unwrap();
        let mut c = TcpStream::connect(&client_net, addr(12)).await.unwrap();
        let (mut s, _) = listener.accept().await.unwrap();
        let polls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = tokio::spawn(Counted {
            inner: Box::pin(async move {
                let mut buf = [0u8; 8];
                let n = s.read(&mut buf).await.unwrap();
                buf[..n].to_vec()
            }),
            polls: polls.clone(),
        });
        // Nothing to read for a while: the task is parked on the socket's waker.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = polls.load(std::sync::atomic::Ordering::Relaxed);
        assert!(idle <= 2, "polled {idle} times while not readable");
        c.write_all(b"wake").await.unwrap();
        let got = tokio::time::timeout(LIMIT, reader)
            .await
            .expect("woken in time")
            .unwrap();
        assert_eq!(got, b"wake");
    });
}

/// Model (a)'s `reunite`: halves of two streams are refused (`InvalidInput`); a stream's
/// own halves give the stream back, which still echoes; dropping a write half alone sends
/// the FIN (the echo server's copy ends and it closes: the read half reads 0).
#[test]
fn reunite_gives_back_its_own_stream_and_a_dropped_write_half_sends_the_fin() {
    let (server, client_net) = sim_nets();
    runtime().block_on(async move {
        tokio::time::timeout(LIMIT, async move {
            spawn_echo(TcpListener::bind(&server, addr(7)).unwrap());
            let a = TcpStream::connect(&client_net, addr(7)).await.unwrap();
            let b = TcpStream::connect(&client_net, addr(7)).await.unwrap();
            let ((ar, aw), (br, bw)) = (a.into_split(), b.into_split());
            let e = ar.reunite(bw).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            let e = br.reunite(aw).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            let c = TcpStream::connect(&client_net, addr(7)).await.unwrap();
            let (cr, cw) = c.into_split();
            let mut c = cr.reunite(cw).unwrap();
            c.write_all(b"again").await.unwrap();
            let mut back = [0u8; 5];
            c.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"again");
            let (mut r, w) = c.into_split();
            drop(w);
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "nothing more after the FIN: {rest:?}");
        })
        .await
        .expect("in time");
    });
}
