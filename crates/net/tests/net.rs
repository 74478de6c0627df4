//! ustack-net end to end: std-shaped blocking sockets used from many threads at once, over
//! a sim pair and over a sharded shm link, every byte checked; errors and timeouts with
//! the `io::ErrorKind` std gives on Linux (compared with the kernel's own sockets on
//! loopback where the case allows); shutdown, reset, close on drop; UDP; the epoll-like
//! set and the per-socket waker.
//!
//! Every blocking call in these tests has a timeout, so a broken feature fails the test
//! instead of hanging it.

mod common;

use core::net::Ipv4Addr;
use core::time::Duration;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_net::{Epoll, Mode, Net, Readiness, TcpListener, TcpStream, UdpSocket};
use ustack_runtime::{Rss, RssKey, RssSplitter, RuntimeBuilder};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The longest any blocking call in these tests may wait before the test fails.
const LIMIT: Duration = Duration::from_secs(20);

fn builders() -> (RuntimeBuilder, RuntimeBuilder) {
    (
        RuntimeBuilder::new().ipv4(SERVER_IP, 24).seed(1),
        RuntimeBuilder::new().ipv4(CLIENT_IP, 24).seed(2),
    )
}

fn sim_nets() -> (Net, Net) {
    let (s, c) = builders();
    Net::sim_pair(s, c, SimLinkConfig::default()).expect("sim pair")
}

/// A server and a client `Net` on the two ends of a shm link of `queues` queue pairs: a
/// shard (and loop thread) per queue on each side.
fn shm_nets(queues: usize) -> (Net, Net) {
    let config = ShmConfig {
        queue_pairs: queues,
        ..ShmConfig::default()
    };
    let (a, b) = ShmLink::pair(&config).expect("shm link");
    let (s, c) = builders();
    (
        Net::shm(s, a).expect("server"),
        Net::shm(c, b).expect("client"),
    )
}

/// A server `Net` with a shard per queue of a shm link (IP medium), and a one-shard client
/// whose device steers each frame to the queue RSS picks for it (`RssSplitter`, as a NIC
/// with RSS does): the server's shards see the flows a real device would give them.
fn rss_nets(queues: usize) -> (Net, Net) {
    let config = ShmConfig {
        queue_pairs: queues,
        medium: ustack_dev::Medium::Ip,
        ..ShmConfig::default()
    };
    let (a, b) = ShmLink::pair(&config).expect("shm link");
    let (s, c) = builders();
    let splitter = RssSplitter::new(b, Rss::new(RssKey::MICROSOFT, queues));
    (
        Net::shm(s, a).expect("server"),
        Net::on_links(c, vec![splitter]).expect("client"),
    )
}

/// What each of the server's shards counted for `counter`.
fn per_shard(net: &Net, counter: ustack_obs::Counter) -> Vec<u64> {
    net.on_each_shard(move |rt| rt.stack().mib().get(counter))
        .unwrap()
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((SERVER_IP, port))
}

fn connect(net: &Net, port: u16) -> TcpStream {
    let s = TcpStream::connect_timeout(net, &addr(port), LIMIT).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.set_write_timeout(Some(LIMIT)).unwrap();
    s
}

/// Two stacks over sim and one connection between them on `port`: (server net, client
/// net, the client's stream, the server's).
fn connected(port: u16) -> (Net, Net, TcpStream, TcpStream) {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(port)).unwrap();
    let c = connect(&client, port);
    let (s, _) = listener.accept().unwrap();
    (server, client, c, s)
}

/// Bytes that differ per connection and per position.
fn pattern(conn: usize, len: usize) -> Vec<u8> {
    let mut x = (conn as u32).wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A thread-per-connection echo server (the std way): accepts until `conns` connections
/// were served, each echoed to EOF by a thread of its own. Returns the bytes echoed.
fn echo_server(net: &Net, port: u16, conns: usize) -> std::thread::JoinHandle<usize> {
    let listener = TcpListener::bind(net, addr(port)).expect("bind");
    std::thread::spawn(move || {
        let mut workers = Vec::new();
        for _ in 0..conns {
            let (s, _) = listener.accept().expect("accept");
            s.set_read_timeout(Some(LIMIT)).unwrap();
            workers.push(std::thread::spawn(move || common::echo_to_eof(s)));
        }
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    })
}

/// `threads` client threads, each opening `per_thread` connections one after the other;
/// on each, a writer thread (a `try_clone` of the stream) sends `bytes` while the reader
/// checks every byte of the echo, then half-closes and sees EOF.
fn echo_load(
    server: &Net,
    client: &Net,
    port: u16,
    threads: usize,
    per_thread: usize,
    bytes: usize,
) {
    let srv = echo_server(server, port, threads * per_thread);
    let checked = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..threads)
        .map(|t| {
            let (client, checked) = (client.clone(), checked.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let conn = t * per_thread + i;
                    let data = pattern(conn, bytes);
                    let mut s = connect(&client, port);
                    let mut w = s.try_clone().unwrap();
                    let out = data.clone();
                    let writer = std::thread::spawn(move || {
                        // Chunks of varying size, through `&TcpStream` as std allows.
                        let mut off = 0;
                        let mut step = 1;
                        while off < out.len() {
                            let end = (off + step).min(out.len());
                            (&w).write_all(&out[off..end]).expect("client write");
                            off = end;
                            step = step * 3 % 7919 + 1;
                        }
                        w.flush().unwrap();
                        w.shutdown(Shutdown::Write).unwrap();
                    });
                    let mut echoed = Vec::with_capacity(bytes);
                    s.read_to_end(&mut echoed).expect("client read");
                    writer.join().unwrap();
                    assert_eq!(echoed.len(), data.len(), "connection {conn}: echo length");
                    assert!(echoed == data, "connection {conn}: echoed bytes differ");
                    checked.fetch_add(echoed.len(), Ordering::Relaxed);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let total = threads * per_thread * bytes;
    assert_eq!(checked.load(Ordering::Relaxed), total);
    assert_eq!(srv.join().unwrap(), total, "bytes the server echoed");
}

#[test]
fn echo_under_load_from_eight_threads_over_sim() {
    let (server, client) = sim_nets();
    echo_load(&server, &client, 7, 8, 12, 48 * 1024);
    // Every connection closed by dropping its streams, on both sides.
    let conns = 8 * 12;
    let stats = server.runtime_stats().unwrap();
    assert!(
        stats.closed_on_drop >= conns,
        "server closed {} of {conns}",
        stats.closed_on_drop
    );
}

#[test]
fn echo_under_load_from_eight_threads_over_sharded_shm() {
    let (server, client) = shm_nets(2);
    assert_eq!(server.shards(), 2);
    echo_load(&server, &client, 7, 8, 12, 48 * 1024);
    // Both shards served connections (the listener is on each; RSS spread the flows).
    let per_shard = server
        .on_each_shard(|rt| rt.stack().mib().get(ustack_obs::Counter::TcpPassiveOpens))
        .unwrap();
    assert_eq!(per_shard.iter().sum::<u64>(), 8 * 12, "{per_shard:?}");
    assert!(
        per_shard.iter().all(|&n| n > 0),
        "a shard accepted nothing: {per_shard:?}"
    );
}

/// The kernel's answer for the same situation, to compare kinds with.
fn kernel_read_timeout_kind() -> ErrorKind {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let _peer = l.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    c.read(&mut [0; 8]).unwrap_err().kind()
}

#[test]
fn read_timeout_returns_what_std_returns() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(80)).unwrap();
    let mut c = connect(&client, 80);
    let (_s, _) = listener.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    assert_eq!(c.read_timeout().unwrap(), Some(Duration::from_millis(100)));
    let t0 = std::time::Instant::now();
    let e = c.read(&mut [0; 8]).unwrap_err();
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "returned before the timeout"
    );
    let std_kind = kernel_read_timeout_kind();
    assert_eq!(e.kind(), std_kind, "ustack: {e}");
    assert_eq!(e.kind(), ErrorKind::WouldBlock, "Linux: EAGAIN");
    // A zero timeout is refused, as std refuses it.
    let zero = c.set_read_timeout(Some(Duration::ZERO)).unwrap_err();
    assert_eq!(zero.kind(), ErrorKind::InvalidInput);
    // Non-blocking: WouldBlock at once.
    c.set_nonblocking(true).unwrap();
    assert_eq!(
        c.read(&mut [0; 8]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    // connect_timeout that runs out: TimedOut, as std's (to an address nobody answers).
    let lost = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 99), 80));
    let e = TcpStream::connect_timeout(&client, &lost, Duration::from_millis(200)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
}

#[test]
fn shutdown_write_gives_the_peer_eof_and_keeps_the_other_direction() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(81)).unwrap();
    let mut c = connect(&client, 81);
    let (mut s, peer) = listener.accept().unwrap();
    assert_eq!(peer, c.local_addr().unwrap());
    assert_eq!(c.peer_addr().unwrap(), addr(81));
    s.set_read_timeout(Some(LIMIT)).unwrap();
    c.write_all(b"last words").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"last words");
    assert_eq!(s.read(&mut [0; 4]).unwrap(), 0, "EOF again");
    // The other direction still works.
    s.write_all(b"reply").unwrap();
    let mut r = [0; 5];
    c.read_exact(&mut r).unwrap();
    assert_eq!(&r, b"reply");
    // Writing after our own shutdown: EPIPE, as on Linux.
    assert_eq!(c.write(b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
}

fn kernel_refused_kind() -> ErrorKind {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    std::net::TcpStream::connect(a).unwrap_err().kind()
}

#[test]
fn connect_to_a_closed_port_is_refused() {
    let (_server, client) = sim_nets();
    let e = TcpStream::connect(&client, addr(9)).unwrap_err();
    assert_eq!(e.kind(), kernel_refused_kind());
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    // A port in use: AddrInUse, as std.
    let (server, _client) = sim_nets();
    let _l = TcpListener::bind(&server, addr(82)).unwrap();
    let e = TcpListener::bind(&server, addr(82)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
}

#[test]
fn write_after_the_peer_reset_fails() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(83)).unwrap();
    let mut c = connect(&client, 83);
    let (s, _) = listener.accept().unwrap();
    c.write_all(b"unread").unwrap();
    // Wait until the server has the bytes, then close with them unread: a RST (Linux).
    let deadline = std::time::Instant::now() + LIMIT;
    while !server
        .readiness(s.fd())
        .unwrap()
        .contains(Readiness::READABLE)
    {
        assert!(std::time::Instant::now() < deadline, "data never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s);
    let e = c.read(&mut [0; 8]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    let e = c.write(b"more").unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::NotConnected
        ),
        "{e}"
    );
}

#[test]
fn dropping_a_stream_closes_it() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(84)).unwrap();
    let before = client.runtime_stats().unwrap().closed_on_drop;
    let c = connect(&client, 84);
    let dup = c.try_clone().unwrap();
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    drop(c);
    // One handle left: still open.
    (&dup).write_all(b"still here").unwrap();
    let mut got = [0; 10];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
    drop(dup);
    assert_eq!(s.read(&mut [0; 8]).unwrap(), 0, "the peer sees EOF");
    assert_eq!(client.runtime_stats().unwrap().closed_on_drop, before + 1);
}

#[test]
fn udp_round_trip() {
    let (server, client) = sim_nets();
    let srv = UdpSocket::bind(&server, addr(53)).unwrap();
    srv.set_read_timeout(Some(LIMIT)).unwrap();
    let cli = UdpSocket::bind(&client, (CLIENT_IP, 0)).unwrap();
    cli.set_read_timeout(Some(LIMIT)).unwrap();
    let cli_addr = cli.local_addr().unwrap();
    assert_ne!(cli_addr.port(), 0, "an ephemeral port was picked");
    let t = std::thread::spawn(move || {
        let mut buf = [0; 64];
        let (n, from) = srv.recv_from(&mut buf).unwrap();
        let mut reply = buf[..n].to_vec();
        reply.reverse();
        srv.send_to(&reply, from).unwrap();
        from
    });
    assert_eq!(cli.send_to(b"datagram", addr(53)).unwrap(), 8);
    let mut buf = [0; 64];
    let (n, from) = cli.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"margatad");
    assert_eq!(from, addr(53));
    assert_eq!(t.join().unwrap(), cli_addr, "the server saw our address");
    // Connected: send/recv, and a read timeout gives WouldBlock.
    cli.connect(addr(53)).unwrap();
    assert_eq!(cli.peer_addr().unwrap(), addr(53));
    cli.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    assert_eq!(
        cli.recv(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}

/// Counts its wake-ups.
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn epoll_set_and_waker_follow_the_loop_readiness() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(85)).unwrap();
    let ep = Epoll::new(&server).unwrap();
    ep.add(listener.fd(), 1, Readiness::READABLE, Mode::Level, false)
        .unwrap();
    let mut events = Vec::new();
    assert_eq!(
        ep.wait(&mut events, 8, Some(Duration::ZERO)).unwrap(),
        0,
        "nothing yet"
    );
    let mut c = connect(&client, 85);
    assert_eq!(ep.wait(&mut events, 8, Some(LIMIT)).unwrap(), 1);
    assert_eq!(
        (events[0].token, events[0].readiness),
        (1, Readiness::READABLE)
    );
    let (s, _) = listener.accept().unwrap();
    ep.add(s.fd(), 2, Readiness::READABLE, Mode::Edge, false)
        .unwrap();
    // A waker on the new stream, woken once data arrives.
    let count = Arc::new(CountWaker(AtomicUsize::new(0)));
    let waker = Waker::from(count.clone());
    server
        .register_waker(s.fd(), Readiness::READABLE, &waker)
        .unwrap();
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    // A waiter on another thread, woken by the data.
    let waiter = {
        let ep = Arc::new(ep);
        let ep2 = ep.clone();
        (
            std::thread::spawn(move || {
                let mut ev = Vec::new();
                ep2.wait(&mut ev, 8, Some(LIMIT)).unwrap();
                ev
            }),
            ep,
        )
    };
    c.write_all(b"wake").unwrap();
    let ev = waiter.0.join().unwrap();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!((ev[0].token, ev[0].fd), (2, s.fd()));
    assert!(ev[0].readiness.contains(Readiness::READABLE));
    // The loop wakes the set's waiter and then the waker, in one pass.
    let deadline = std::time::Instant::now() + LIMIT;
    while count.0.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "the waker was woken once"
    );
    let ep = waiter.1;
    // Edge-triggered: not reported again without new data.
    events.clear();
    assert_eq!(
        ep.wait(&mut events, 8, Some(Duration::from_millis(20)))
            .unwrap(),
        0
    );
    // Level-triggered after a modify: reported while readable, until read.
    ep.modify(s.fd(), 3, Readiness::READABLE, Mode::Level, false)
        .unwrap();
    assert_eq!(ep.wait(&mut events, 8, Some(LIMIT)).unwrap(), 1);
    assert_eq!(ep.wait(&mut events, 8, Some(LIMIT)).unwrap(), 1);
    let mut buf = [0; 4];
    (&s).read_exact(&mut buf).unwrap();
    events.clear();
    assert_eq!(
        ep.wait(&mut events, 8, Some(Duration::from_millis(20)))
            .unwrap(),
        0,
        "{events:?}"
    );
    // Closing the socket takes it out of the set.
    ep.delete(listener.fd()).unwrap();
    assert!(ep.delete(listener.fd()).is_err(), "ENOENT");
}

#[test]
fn a_blocked_reader_costs_no_polling() {
    let (server, _client, c, s) = connected(86);
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let (_, turns0) = server.loop_counters();
    let e = (&s).read(&mut [0; 8]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    let (_, turns1) = server.loop_counters();
    // 300 ms parked: the loop ran a few turns (its own timers: delayed ACKs, the
    // connection's) and slept between them; a polling reader or loop would turn
    // hundreds of thousands of times.
    assert!(
        turns1 - turns0 < 200,
        "{} turns while idle",
        turns1 - turns0
    );
    drop(c);
}

#[test]
fn bytes_written_before_a_drop_all_arrive_then_eof() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(87)).unwrap();
    let mut c = connect(&client, 87);
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let data = pattern(87, 512 * 1024);
    let reader = std::thread::spawn(move || {
        // Late, so that the windows and the send buffer fill and the writer runs ahead
        // of what the stack takes (the loop's backlog).
        std::thread::sleep(Duration::from_millis(200));
        let mut got = Vec::new();
        s.read_to_end(&mut got).map(|_| got)
    });
    // Writes return once the bytes are handed to the loop; the drop right after must
    // still send every one of them before the FIN.
    c.write_all(&data).unwrap();
    drop(c);
    let got = reader.join().unwrap().unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
}

#[test]
fn an_epoll_set_has_a_file_a_kernel_poll_can_wait_on() {
    use rustix::event::{PollFd, PollFlags, poll};
    use rustix::time::Timespec;
    use std::os::fd::AsFd;
    let readable = |ep: &Epoll, ms: i64| {
        let mut fds = [PollFd::new(ep, PollFlags::IN)];
        let ts = Timespec {
            tv_sec: ms / 1000,
            tv_nsec: (ms % 1000) * 1_000_000,
        };
        poll(&mut fds, Some(&ts)).unwrap() == 1
    };
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(88)).unwrap();
    let ep = Epoll::new(&server).unwrap();
    ep.add(listener.fd(), 7, Readiness::READABLE, Mode::Level, false)
        .unwrap();
    // Added: queued for a look, so readable once; the look finds nothing and drains it.
    let mut events = Vec::new();
    assert_eq!(ep.wait(&mut events, 4, Some(Duration::ZERO)).unwrap(), 0);
    assert!(!readable(&ep, 0), "nothing queued");
    let _c = connect(&client, 88);
    assert!(
        readable(&ep, 20_000),
        "a connection to accept wakes a kernel poll on the set"
    );
    assert_eq!(ep.wait(&mut events, 4, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(events[0].token, 7);
    let _s = listener.accept().unwrap();
    events.clear();
    assert_eq!(
        ep.wait(&mut events, 4, Some(Duration::ZERO)).unwrap(),
        0,
        "{events:?}"
    );
    assert!(!readable(&ep, 0), "drained once nothing is ready");
    let _ = ep.as_fd();
}

/// Write to a peer that never reads until the write timeout expires: the error kind.
fn write_until_timeout(mut w: impl Write) -> ErrorKind {
    let chunk = vec![7u8; 64 * 1024];
    for _ in 0..100_000 {
        if let Err(e) = w.write(&chunk) {
            return e.kind();
        }
    }
    panic!("100,000 writes of 64 KiB never blocked");
}

#[test]
fn write_timeout_returns_what_std_returns() {
    let kernel = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _peer = l.accept().unwrap();
        c.set_write_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        write_until_timeout(&c)
    };
    let (_server, _client, c, _s) = connected(89);
    c.set_write_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    assert_eq!(c.write_timeout().unwrap(), Some(Duration::from_millis(50)));
    let ours = write_until_timeout(&c);
    assert_eq!(ours, kernel);
    assert_eq!(ours, ErrorKind::WouldBlock, "Linux: EAGAIN");
}

#[test]
fn socket_options_reach_the_stack() {
    let (_server, _client, c, mut s) = connected(90);
    let net = c.net().clone();
    // SO_SNDBUF and SO_RCVBUF: Linux doubles what is asked.
    net.set_send_buffer_size(c.fd(), 16 * 1024).unwrap();
    assert_eq!(net.send_buffer_size(c.fd()).unwrap(), 32 * 1024);
    net.set_recv_buffer_size(c.fd(), 16 * 1024).unwrap();
    assert_eq!(net.recv_buffer_size(c.fd()).unwrap(), 32 * 1024);
    net.set_keepalive(c.fd(), true).unwrap();
    c.set_nodelay(true).unwrap();
    assert!(c.nodelay().unwrap());
    // SO_LINGER zero: the close is a reset, and the peer reads ECONNRESET, not EOF.
    c.set_linger(Some(Duration::ZERO)).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    drop(c);
    assert_eq!(
        s.read(&mut [0; 8]).unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
}

#[test]
fn echo_under_load_over_shm_steered_by_rss() {
    let (server, client) = rss_nets(2);
    echo_load(&server, &client, 7, 8, 6, 32 * 1024);
    let opens = per_shard(&server, ustack_obs::Counter::TcpPassiveOpens);
    assert_eq!(opens.iter().sum::<u64>(), 8 * 6, "{opens:?}");
    assert!(
        opens.iter().all(|&n| n > 0),
        "RSS gave a shard nothing: {opens:?}"
    );
}

#[test]
fn udp_on_every_shard_receives_what_rss_steers_to_each() {
    let (server, client) = rss_nets(2);
    let srv = UdpSocket::bind(&server, addr(53)).unwrap();
    srv.set_read_timeout(Some(LIMIT)).unwrap();
    const N: usize = 32;
    let echo = std::thread::spawn(move || {
        let mut buf = [0; 64];
        for _ in 0..N {
            let (n, from) = srv.recv_from(&mut buf).unwrap();
            srv.send_to(&buf[..n], from).unwrap();
        }
    });
    for i in 0..N {
        let cli = UdpSocket::bind(&client, (CLIENT_IP, 0)).unwrap();
        cli.set_read_timeout(Some(LIMIT)).unwrap();
        let msg = format!("datagram {i}");
        cli.send_to(msg.as_bytes(), addr(53)).unwrap();
        let mut buf = [0; 64];
        let (n, from) = cli.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (msg.as_bytes(), addr(53)));
    }
    echo.join().unwrap();
    let got = per_shard(&server, ustack_obs::Counter::UdpInDatagrams);
    assert_eq!(got.iter().sum::<u64>(), N as u64, "{got:?}");
    assert!(
        got.iter().all(|&n| n > 0),
        "RSS gave a shard nothing: {got:?}"
    );
}

/// `TcpListener::incoming`, as std's: each connection made comes out of the iterator as
/// `Ok(stream)`, in order, and answers on it.
#[test]
fn incoming_yields_each_connection() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, addr(7)).unwrap();
    let served = std::thread::spawn(move || {
        let mut peers = Vec::new();
        for s in listener.incoming().take(3) {
            let mut s = s.expect("an accepted connection");
            s.set_read_timeout(Some(LIMIT)).unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            s.write_all(&[b[0] + 1]).unwrap();
            peers.push(s.peer_addr().unwrap());
        }
        peers
    });
    let mut mine = Vec::new();
    for i in 0..3u8 {
        let mut c = connect(&client, 7);
        c.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(
            b[0],
            i + 1,
            "connection {i} answered by its own accepted stream"
        );
        mine.push(c.local_addr().unwrap());
    }
    assert_eq!(
        served.join().unwrap(),
        mine,
        "accepted in the order connected"
    );
}

/// `Net::connections_sending` (what the LD_PRELOAD library waits for at exit): bytes
/// written and not yet acknowledged count; once read and acknowledged they do not; a FIN
/// nobody answers (the server's stack is gone) counts.
#[test]
fn connections_sending_counts_data_and_fins_not_yet_acknowledged() {
    fn wait_until(net: &Net, what: &str, f: impl Fn(usize) -> bool) {
        let start = std::time::Instant::now();
        while !f(net.connections_sending().unwrap()) {
            assert!(start.elapsed() < LIMIT, "never {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Each stack on its own loop thread (shm), so that dropping the server's `Net` stops
    // its stack: on a sim pair both stacks share one loop, the server's would go on and
    // acknowledge the FIN within microseconds, and the test would depend on catching that.
    let (server, client) = shm_nets(1);
    let listener = TcpListener::bind(&server, addr(7100)).unwrap();
    let c = TcpStream::connect(&client, addr(7100)).unwrap();
    c.set_write_timeout(Some(LIMIT)).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    assert_eq!(
        client.connections_sending().unwrap(),
        0,
        "nothing written yet"
    );
    const LEN: usize = 4 << 20;
    std::thread::scope(|scope| {
        scope.spawn(|| (&c).write_all(&vec![7u8; LEN]).unwrap());
        // The server does not read: its window fills and the bytes wait, unacknowledged.
        wait_until(&client, "seen sending data", |n| n == 1);
        let mut got = vec![0u8; LEN];
        s.read_exact(&mut got).unwrap();
    });
    wait_until(&client, "done once everything was read", |n| n == 0);
    // The server's stack goes; the client's FIN is never answered.
    drop((s, listener, server));
    c.shutdown(Shutdown::Write).unwrap();
    wait_until(&client, "seen sending its FIN", |n| n == 1);
}
