//! Shards on threads ([`ShardedRuntime`]) over a shm link with one queue pair per shard:
//! flows stay on their shard under RSS, outbound connections get their replies on the
//! shard that opened them, a listener accepts on every shard, and stopping joins every
//! thread and drops everything the shards owned.
//!
//! The far end is a plain stack in the test's thread behind an [`RssSplitter`], which puts
//! each frame on the queue pair of the shard its 4-tuple hashes to (what a NIC with RSS
//! does in hardware). The link carries IP packets (no ARP: see the module docs of
//! `ustack_runtime::multi`).

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ustack_dev::Medium;
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_obs::Counter;
use ustack_runtime::multi::{RssSplitter, ShardApp, ShardContext, ShardedBuilder, ShardedRuntime};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::{RuntimeBuilder, TcpStream};
use ustack_stack::tcp::State;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Ipv6Cidr, Stack, TcpHandle};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const SHARDS: usize = 2;
/// How long any wait in these tests may take before it fails.
const LIMIT: Duration = Duration::from_secs(10);

/// The cases the flow tests run: both standard keys over IP, and Ethernet (ARP copied to
/// every shard by the splitter).
const CASES: [(RssKey, Medium); 3] = [
    (RssKey::MICROSOFT, Medium::Ip),
    (RssKey::SYMMETRIC, Medium::Ip),
    (RssKey::MICROSOFT, Medium::Ethernet),
];

fn link(medium: Medium) -> (Vec<ShmPort>, Vec<ShmPort>) {
    ShmLink::pair(&ShmConfig {
        queue_pairs: SHARDS,
        medium,
        ..ShmConfig::default()
    })
    .expect("shm link")
}

fn builder(key: RssKey) -> ShardedBuilder {
    builder_on(key, RuntimeBuilder::new().ipv4(SERVER_IP, 24))
}

fn builder_on(key: RssKey, runtime: RuntimeBuilder) -> ShardedBuilder {
    ShardedBuilder::new(runtime, Rss::new(key, SHARDS)).seed(100)
}

/// The far end: a stack on side B of the link, pumped by the test's thread on the real
/// clock.
struct Peer {
    stack: Stack,
    dev: RssSplitter<ShmPort>,
    origin: std::time::Instant,
}

impl Peer {
    fn new(ports: Vec<ShmPort>, rss: Rss) -> Peer {
        Peer::with_ipv6(ports, rss, false)
    }

    /// With `ipv6`, the peer also has [`PEER_IP6`].
    fn with_ipv6(ports: Vec<ShmPort>, rss: Rss, ipv6: bool) -> Peer {
        use ustack_dev::Device;
        let cidr = Ipv4Cidr::new(PEER_IP, 24);
        let medium = ports[0].caps().medium;
        let mut config = match medium {
            Medium::Ip => Config::ip(cidr),
            Medium::Ethernet => Config::ethernet(EthernetAddress([2, 0, 0, 0, 0, 2]), cidr),
        };
        if ipv6 {
            config = config.with_ipv6(Ipv6Cidr::new(PEER_IP6, 64));
        }
        config.seed = Some(7);
        Peer {
            stack: Stack::new(config),
            dev: RssSplitter::new(ports, rss).replicate_unhashed(medium == Medium::Ethernet),
            origin: std::time::Instant::now(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    /// Receive, run due timers, transmit.
    fn pump(&mut self) {
        use ustack_dev::Device;
        let now = self.now();
        let mut buf = [0u8; 2048];
        while let Some(n) = self.dev.recv(now, &mut buf) {
            self.stack.receive(now, &buf[..n]);
        }
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
        }
        while let Some(f) = self.stack.poll_transmit(now) {
            self.dev.send(now, &f);
        }
    }

    /// Pump until `done` holds, or fail after [`LIMIT`].
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Peer) -> bool) {
        let start = std::time::Instant::now();
        loop {
            self.pump();
            if done(self) {
                return;
            }
            assert!(start.elapsed() < LIMIT, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

// ---- a server on every shard ------------------------------------------------------------

/// The IPv4 address of these IPv4 connections.
fn ipv4(a: std::net::SocketAddr) -> SocketAddrV4 {
    match a {
        std::net::SocketAddr::V4(a) => a,
        a => panic!("{a}: an IPv6 address on an IPv4 test"),
    }
}

/// Accepts on the shard's listener and echoes; remembers whom it accepted.
#[derive(Default)]
struct Echo {
    accepted: Vec<SocketAddrV4>,
    conns: Vec<TcpStream>,
}

impl ShardApp<ShmPort> for Echo {
    fn poll(&mut self, ctx: &mut ShardContext<'_, ShmPort>) -> io::Result<()> {
        let listener = &ctx.listeners()[0];
        while let Ok((stream, remote)) = listener.accept(ctx.rt) {
            self.accepted.push(ipv4(remote));
            self.conns.push(stream);
        }
        let mut buf = [0u8; 256];
        for s in &self.conns {
            if let Ok(n) = s.read(ctx.rt, &mut buf)
                && n > 0
            {
                s.write(ctx.rt, &buf[..n])?;
            }
        }
        Ok(())
    }
}

/// Pump the peer until every shard's count of received TCP segments is the number of
/// frames the splitter put on its queue (frames still in flight when asked are waited
/// for); the per-shard counters then.
fn settled_counters(
    peer: &mut Peer,
    rt: &ShardedRuntime<impl Sized>,
) -> Vec<(ustack_obs::Mib, ustack_runtime::ShardStats)> {
    let start = std::time::Instant::now();
    loop {
        peer.pump();
        let counters = rt.shard_counters(LIMIT).expect("counters");
        let segs: Vec<u64> = counters
            .iter()
            .map(|(m, _)| m.get(Counter::TcpInSegs))
            .collect();
        if segs == peer.dev.sent_per_queue() {
            return counters;
        }
        assert!(
            start.elapsed() < LIMIT,
            "shards received {segs:?}, the splitter sent {:?}",
            peer.dev.sent_per_queue()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn flows_stay_on_their_shard_and_a_listener_accepts_on_every_shard() {
    for (key, medium) in CASES {
        let (a, b) = link(medium);
        let server = SocketAddrV4::new(SERVER_IP, 80);
        let rt = builder(key)
            .listen(server, 128)
            .start(a, |_| Echo::default())
            .expect("start");
        let rss = rt.rss().clone();
        let mut peer = Peer::new(b, rss.clone());

        const CONNS: usize = 48;
        let now = peer.now();
        let conns: Vec<TcpHandle> = (0..CONNS)
            .map(|_| peer.stack.tcp_connect(now, server).unwrap())
            .collect();
        peer.run_until("every connection established", |p| {
            conns
                .iter()
                .all(|&c| p.stack.tcp_state(c) == Ok(State::Established))
        });
        let now = peer.now();
        for (i, &c) in conns.iter().enumerate() {
            peer.stack.tcp_send(now, c, &[i as u8, 0xee]).unwrap();
        }
        let mut echoed = [false; CONNS];
        peer.run_until("every echo", |p| {
            let now = p.now();
            for (i, &c) in conns.iter().enumerate() {
                let mut b = [0u8; 8];
                if let Ok(2) = p.stack.tcp_recv(now, c, &mut b) {
                    assert_eq!(&b[..2], &[i as u8, 0xee], "{key:?} {medium:?} conn {i}");
                    echoed[i] = true;
                }
            }
            echoed.iter().all(|&e| e)
        });

        // Every TCP segment the splitter put on queue k was received by shard k, and
        // nothing else was: a shard's counters hold only its own flows.
        let counters = settled_counters(&mut peer, &rt);
        let sent = peer.dev.sent_per_queue().to_vec();
        assert!(sent.iter().all(|&n| n > 0), "{key:?} {medium:?}: {sent:?}");
        let summed = rt.mib(LIMIT).unwrap();
        assert_eq!(summed.get(Counter::TcpPassiveOpens), CONNS as u64);
        assert_eq!(summed.get(Counter::TcpCurrEstab), CONNS as u64);
        assert_eq!(
            summed.get(Counter::TcpInSegs),
            sent.iter().sum::<u64>(),
            "merged counters are the sum of the shards'"
        );
        // Every frame reached exactly the shards it was meant for: its own, or (ARP) all.
        let processed: u64 = counters.iter().map(|(_, st)| st.processed).sum();
        assert_eq!(
            processed,
            sent.iter().sum::<u64>() + SHARDS as u64 * peer.dev.unhashed()
        );
        assert_eq!(peer.dev.unhashed() > 0, medium == Medium::Ethernet);

        let apps: Vec<Echo> = rt
            .stop()
            .into_iter()
            .map(|r| r.expect("shard ran cleanly"))
            .collect();
        assert_eq!(apps.len(), SHARDS);
        let mut total = 0;
        for (k, app) in apps.iter().enumerate() {
            assert!(
                !app.accepted.is_empty(),
                "{key:?} {medium:?}: shard {k}'s listener accepted nothing"
            );
            for &remote in &app.accepted {
                assert_eq!(
                    rss.shard_of_tuple(remote, server),
                    k,
                    "{key:?} {medium:?} {remote}"
                );
            }
            let mib = &counters[k].0;
            assert_eq!(
                mib.get(Counter::TcpPassiveOpens),
                app.accepted.len() as u64,
                "{key:?} {medium:?}: shard {k} opened exactly the connections it accepted"
            );
            assert_eq!(
                mib.get(Counter::TcpOutRsts),
                0,
                "{key:?} {medium:?} shard {k}"
            );
            assert_eq!(
                mib.get(Counter::TcpActiveOpens),
                0,
                "{key:?} {medium:?} shard {k}"
            );
            total += app.accepted.len();
        }
        assert_eq!(total, CONNS, "{key:?} {medium:?}");
    }
}

// ---- a client on every shard ------------------------------------------------------------

/// Connects from its shard, sends its shard number, and keeps the reply.
struct Client {
    remote: SocketAddr,
    conn: Option<TcpHandle>,
    sent: bool,
    local: Option<SocketAddr>,
    reply: Vec<u8>,
    done: Arc<AtomicUsize>,
}

impl ShardApp<ShmPort> for Client {
    fn start(&mut self, ctx: &mut ShardContext<'_, ShmPort>) -> io::Result<()> {
        self.conn = Some(ctx.connect(self.remote)?);
        Ok(())
    }

    fn poll(&mut self, ctx: &mut ShardContext<'_, ShmPort>) -> io::Result<()> {
        let Some(h) = self.conn else { return Ok(()) };
        let now = ctx.now();
        let shard = ctx.shard();
        let stack = ctx.rt.stack_mut();
        if !self.sent && stack.tcp_state(h) == Ok(State::Established) {
            self.local = Some(stack.tcp_info(h).unwrap().local);
            stack
                .tcp_send(now, h, format!("shard {shard}").as_bytes())
                .unwrap();
            self.sent = true;
        }
        let mut buf = [0u8; 64];
        if let Ok(n) = stack.tcp_recv(now, h, &mut buf)
            && n > 0
        {
            self.reply.extend_from_slice(&buf[..n]);
            if self.reply.ends_with(b"!") {
                self.done.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

#[test]
fn outbound_connections_get_their_replies_on_their_own_shard() {
    for (key, medium) in CASES {
        let remote = SocketAddr::from((PEER_IP, 8080));
        outbound_on_own_shard(key, medium, remote, builder(key));
    }
}

/// The same over IPv6: each shard's port is chosen by the IPv6 4-tuple's hash (36 bytes
/// of input, the port at another offset), so the peer's replies, steered by that hash,
/// reach the shard that connected. Eight peer ports a key, so that a port chosen by
/// another hash cannot land home by luck every time (1 in 2 a connection with 2 shards).
/// Over an IP link (an Ethernet one would need the splitter to copy neighbour discovery
/// to every shard, as it copies ARP).
#[test]
fn outbound_ipv6_connections_get_their_replies_on_their_own_shard() {
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        for port in 8080..8088 {
            let remote = SocketAddr::from((PEER_IP6, port));
            let runtime = RuntimeBuilder::new()
                .ipv4(SERVER_IP, 24)
                .ipv6(SERVER_IP6, 64);
            outbound_on_own_shard(key, Medium::Ip, remote, builder_on(key, runtime));
        }
    }
}

/// A client on every shard of `shards` connects to `remote` on the peer, which answers
/// each with what it said and a "!": every shard gets its own answer, from a local port
/// whose tuple hashes to it, with no connection failed or reset.
fn outbound_on_own_shard(key: RssKey, medium: Medium, remote: SocketAddr, shards: ShardedBuilder) {
    let (a, b) = link(medium);
    let rss = Rss::new(key, SHARDS);
    let mut peer = Peer::with_ipv6(b, rss.clone(), remote.is_ipv6());
    let listener = peer.stack.tcp_listen(remote, 16).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let rt = shards
        .start(a, move |_| Client {
            remote,
            conn: None,
            sent: false,
            local: None,
            reply: Vec::new(),
            done: d.clone(),
        })
        .expect("start");

    // The peer answers each connection with what it said, and a "!".
    let mut accepted = Vec::new();
    let mut answered = 0;
    peer.run_until("both shards' replies", |p| {
        let now = p.now();
        while let Ok((c, from)) = p.stack.tcp_accept_addr(listener) {
            accepted.push((c, from));
        }
        for &(c, _) in &accepted {
            let mut buf = [0u8; 64];
            if let Ok(n) = p.stack.tcp_recv(now, c, &mut buf)
                && n > 0
            {
                let mut reply = buf[..n].to_vec();
                reply.push(b'!');
                p.stack.tcp_send(now, c, &reply).unwrap();
                answered += 1;
            }
        }
        done.load(Ordering::SeqCst) == SHARDS
    });
    assert_eq!(answered, SHARDS);
    let counters = settled_counters(&mut peer, &rt);
    let clients: Vec<Client> = rt.stop().into_iter().map(|r| r.unwrap()).collect();
    let case = format!("{key:?} {medium:?} {remote}");
    let server_ip = match remote {
        SocketAddr::V4(_) => SERVER_IP.into(),
        SocketAddr::V6(_) => core::net::IpAddr::from(SERVER_IP6),
    };
    for (k, c) in clients.iter().enumerate() {
        assert_eq!(c.reply, format!("shard {k}!").as_bytes(), "{case}");
        let local = c.local.unwrap();
        assert_eq!(local.ip(), server_ip, "{case}");
        assert_eq!(
            rss.shard_of_tuple(remote, local),
            k,
            "{case}: shard {k} picked a port whose replies hash home"
        );
        assert!(accepted.iter().any(|&(_, from)| from == local), "{case}");
        let mib = &counters[k].0;
        for (counter, want) in [
            (Counter::TcpActiveOpens, 1),
            (Counter::TcpAttemptFails, 0),
            (Counter::TcpOutRsts, 0),
            (Counter::TcpEstabResets, 0),
        ] {
            assert_eq!(mib.get(counter), want, "{case} shard {k} {counter:?}");
        }
    }
}

// ---- starting and stopping ----------------------------------------------------------------

/// Does nothing but hold a reference that shows whether it was dropped.
struct Idle {
    _guard: Arc<()>,
}

impl ShardApp<ShmPort> for Idle {
    fn poll(&mut self, _ctx: &mut ShardContext<'_, ShmPort>) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn stop_joins_every_thread_and_nothing_leaks() {
    let guard = Arc::new(());
    let (a, b) = link(Medium::Ip);
    let g = guard.clone();
    let rt = builder(RssKey::MICROSOFT)
        .listen(SocketAddrV4::new(SERVER_IP, 80), 16)
        .start(a, move |_| Idle { _guard: g.clone() })
        .unwrap();
    assert_eq!(rt.shards(), SHARDS);
    // The factory and both apps hold the guard.
    assert_eq!(Arc::strong_count(&guard), 2 + SHARDS);
    let counters = rt.shard_counters(LIMIT).unwrap();
    assert_eq!(counters.len(), SHARDS);
    let started = std::time::Instant::now();
    let apps = rt.stop();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "stop is served within a tick"
    );
    assert_eq!(apps.len(), SHARDS);
    assert!(apps.iter().all(Result::is_ok));
    drop(apps);
    assert_eq!(
        Arc::strong_count(&guard),
        1,
        "every thread ended; its app and the factory are gone"
    );
    drop(b);

    // Dropping the runtime stops it too.
    let (a, _b) = link(Medium::Ip);
    let g = guard.clone();
    let rt = builder(RssKey::MICROSOFT)
        .start(a, move |_| Idle { _guard: g.clone() })
        .unwrap();
    assert_eq!(Arc::strong_count(&guard), 2 + SHARDS);
    drop(rt);
    assert_eq!(Arc::strong_count(&guard), 1);
}

#[test]
fn a_failed_start_stops_the_shards_that_did_start() {
    let guard = Arc::new(());
    // Wrong number of devices.
    let (a, _b) = link(Medium::Ip);
    let err = ShardedBuilder::new(
        RuntimeBuilder::new().ipv4(SERVER_IP, 24),
        Rss::new(RssKey::MICROSOFT, 3),
    )
    .start(a, |_| Idle {
        _guard: Arc::new(()),
    })
    .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

    // A listener on an address that is not ours: EADDRNOTAVAIL from every shard.
    let (a, _b) = link(Medium::Ip);
    let g = guard.clone();
    let err = builder(RssKey::MICROSOFT)
        .listen(SocketAddrV4::new(Ipv4Addr::new(10, 9, 9, 9), 80), 16)
        .start(a, move |_| Idle { _guard: g.clone() })
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::AddrNotAvailable);
    assert!(err.to_string().contains("shard"), "{err}");
    assert_eq!(Arc::strong_count(&guard), 1, "every thread joined");
}

/// A batch through the splitter reaches each queue as a batch of its own: every queue's
/// port publishes once, and every frame arrives on the queue RSS picks, none left
/// unpublished behind an `xmit_more` hint for a queue whose last frame came earlier.
#[test]
fn splitter_batches_publish_once_per_queue_and_deliver_everything() {
    use ustack_dev::Device;
    let (a, mut b) = link(Medium::Ip);
    let rss = Rss::new(RssKey::MICROSOFT, SHARDS);
    let mut splitter = RssSplitter::new(a, rss.clone());
    let mut peer = Stack::new(Config::ip(Ipv4Cidr::new(PEER_IP, 24)));
    let now = Instant::ZERO;
    for port in 40_000..40_032u16 {
        let sock = peer.udp_bind(SocketAddrV4::new(PEER_IP, port)).unwrap();
        let to = SocketAddrV4::new(SERVER_IP, 7);
        peer.udp_send_to(now, sock, &port.to_be_bytes(), to)
            .unwrap();
    }
    let frames: Vec<Vec<u8>> = std::iter::from_fn(|| peer.poll_transmit(now)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    assert_eq!(splitter.send_batch(now, &refs), 0);

    let mut want = vec![Vec::new(); SHARDS];
    for f in &frames {
        want[rss.shard_of_frame(f, Medium::Ip).unwrap()].push(f.clone());
    }
    assert!(want.iter().all(|w| !w.is_empty()), "both queues get frames");
    let mut buf = [0u8; 2048];
    for (q, port) in b.iter_mut().enumerate() {
        let mut got = Vec::new();
        while let Some(n) = port.recv(now, &mut buf) {
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got, want[q], "queue {q}");
        assert_eq!(splitter.queues()[q].stats().tx_publishes, 1, "queue {q}");
        assert_eq!(splitter.sent_per_queue()[q], want[q].len() as u64);
    }
}

/// An app that fails on its shard once asked to, to test a stopped shard.
struct FailOn(usize, Arc<std::sync::atomic::AtomicBool>);

impl ShardApp<ShmPort> for FailOn {
    fn poll(&mut self, ctx: &mut ShardContext<'_, ShmPort>) -> io::Result<()> {
        if ctx.shard() == self.0 && self.1.load(Ordering::Relaxed) {
            return Err(io::Error::other("asked to fail"));
        }
        Ok(())
    }
}

#[test]
fn jobs_run_on_every_shard_with_its_own_stack() {
    let (a, _b) = link(Medium::Ip);
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = fail.clone();
    let rt = builder(RssKey::MICROSOFT)
        .listen(SocketAddrV4::new(SERVER_IP, 80), 16)
        .start(a, move |_| FailOn(1, f.clone()))
        .unwrap();
    // Each shard answers from its own thread and stack, in shard order.
    let seen = rt
        .on_each_shard(
            |k, stack, _now| {
                (
                    k,
                    std::thread::current().name().map(str::to_owned),
                    stack.sockets(Instant::ZERO).len(),
                )
            },
            LIMIT,
        )
        .unwrap();
    assert_eq!(
        seen,
        (0..SHARDS)
            .map(|k| (k, Some(format!("ustack-shard-{k}")), 1))
            .collect::<Vec<_>>(),
        "one listener on every shard"
    );
    // A job may change a shard's stack: a sysctl set everywhere reads back everywhere.
    rt.on_each_shard(
        |_, stack, _| stack.set_sysctl("net.ipv4.tcp_keepalive_time", 600),
        LIMIT,
    )
    .unwrap()
    .into_iter()
    .collect::<Result<Vec<()>, _>>()
    .unwrap();
    let values = rt
        .on_each_shard(|_, stack, _| stack.sysctl().tcp_keepalive_time, LIMIT)
        .unwrap();
    assert_eq!(values, vec![600; SHARDS]);
    // A stopped shard makes a job fail at once, not hang.
    fail.store(true, Ordering::Relaxed);
    let t = std::time::Instant::now();
    let err = loop {
        match rt.on_each_shard(|k, _, _| k, LIMIT) {
            Err(e) => break e,
            Ok(_) => assert!(t.elapsed() < LIMIT, "shard 1 never stopped"),
        }
    };
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
    let results = rt.stop();
    assert!(results[0].is_ok() && results[1].is_err());
}
