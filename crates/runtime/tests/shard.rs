//! The shard's budgeted poll loop over the `sim` link: floods processed in budget-sized
//! rounds with time squeezes counted and nothing lost, the time limit on a virtual clock,
//! timers driven by the loop, transmit batches over shm (one ring publication per batch,
//! drops counted exactly), and two shards behind RSS (flows on their own shard, outbound
//! connections getting their replies on the shard that opened them).

use core::cell::RefCell;
use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::collections::VecDeque;
use std::rc::Rc;

use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_dev::sim::{Side, SimLink, SimLinkConfig};
use ustack_dev::{Device, DeviceCaps, Medium};
use ustack_obs::{Counter, DropReason};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{SimPort, sim_pair};
use ustack_runtime::shard::{
    Budget, MAX_TIMER_DEFER, MAX_TIMER_DEFER_ROUNDS, RX_ROUND_BYTES, Shard, TX_BATCH, TX_QUOTA,
};
use ustack_stack::tcp::State;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Stack, UdpHandle};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

type Link = Rc<RefCell<SimLink>>;

fn eth_stack(last: u8, seed: u64) -> Stack {
    let mut config = Config::ethernet(
        EthernetAddress([2, 0, 0, 0, 0, last]),
        Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, last), 24),
    );
    config.seed = Some(seed);
    Stack::new(config)
}

/// Shard 0 on side A of an Ethernet sim link (stack 10.0.0.1), and a plain peer stack
/// (10.0.0.2) on side B that the test drives by hand.
struct Setup<D: Device = SimPort> {
    link: Link,
    shard: Shard<D>,
    peer: Stack,
    now: Instant,
}

impl Setup {
    fn new() -> Setup {
        // Side A is the shard's device; the test drives side B of the same link by hand.
        let (port, b) = sim_pair(SimLinkConfig::default());
        Setup {
            shard: Shard::new(0, eth_stack(1, 1), port),
            peer: eth_stack(2, 2),
            link: b.link().clone(),
            now: Instant::ZERO,
        }
    }
}

impl<D: Device> Setup<D> {
    /// Everything the peer has to do at `now`: receive, timers, transmit.
    fn pump_peer(&mut self) {
        let now = self.now;
        let mut buf = [0u8; 1514];
        while let Some(n) = self.link.borrow_mut().recv(now, Side::B, &mut buf) {
            self.peer.receive(now, &buf[..n]);
        }
        if self.peer.poll_timeout().is_some_and(|t| t <= now) {
            self.peer.handle_timeout(now);
        }
        while let Some(f) = self.peer.poll_transmit(now) {
            self.link.borrow_mut().send(now, Side::B, &f);
        }
    }

    /// Queue a datagram from the shard to [`NOBODY`], an address no one answers: the
    /// neighbour entry's ARP requests go out one second apart, then it fails.
    fn datagram_to_nobody(&mut self) {
        let stack = self.shard.stack_mut();
        let h = stack.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
        stack
            .udp_send_to(self.now, h, b"hello?", SocketAddrV4::new(NOBODY, 9))
            .unwrap();
    }

    /// Resolve ARP both ways with a ping from the peer, answered through the shard's loop.
    fn warm_up(&mut self) {
        self.peer.ping(self.now, A_IP, 1, 1, b"warm").unwrap();
        for _ in 0..4 {
            self.pump_peer();
            let budget = self.shard.budget();
            self.shard.poll_once(self.now, budget);
        }
        self.pump_peer();
        assert!(
            self.peer.recv_echo_reply().is_some(),
            "warm-up ping answered"
        );
    }
}

/// `n` numbered datagrams from the peer to 10.0.0.1:9000, all on the wire at once.
fn flood(s: &mut Setup, n: u32) -> ustack_stack::UdpHandle {
    s.shard
        .stack_mut()
        .set_sysctl("net.core.rmem_default", 64 << 20)
        .unwrap();
    let sock = s
        .shard
        .stack_mut()
        .udp_bind(SocketAddrV4::new(A_IP, 9000))
        .unwrap();
    let tx = s.peer.udp_bind(SocketAddrV4::new(B_IP, 0)).unwrap();
    for i in 0..n {
        s.peer
            .udp_send_to(s.now, tx, &i.to_be_bytes(), SocketAddrV4::new(A_IP, 9000))
            .unwrap();
        if i % 100 == 99 {
            s.pump_peer();
        }
    }
    s.pump_peer();
    assert_eq!(
        s.link.borrow().poll_at(Side::A),
        Some(s.now),
        "flood waiting"
    );
    sock
}

/// Read every datagram and check they are 0..n in order.
fn assert_all_received(s: &mut Setup, sock: ustack_stack::UdpHandle, n: u32) {
    let mut buf = [0u8; 16];
    for i in 0..n {
        let (len, from) = s
            .shard
            .stack_mut()
            .udp_recv_from(sock, &mut buf)
            .unwrap_or_else(|e| panic!("datagram {i} missing: {e}"));
        assert_eq!(&buf[..len], &i.to_be_bytes(), "datagram {i} in order");
        assert_eq!(*from.ip(), B_IP);
    }
    assert!(s.shard.stack_mut().udp_recv_from(sock, &mut buf).is_err());
    let mib = s.shard.stack().mib();
    assert_eq!(mib.get(Counter::UdpInDatagrams), u64::from(n));
    let drops: u64 = DropReason::ALL.iter().map(|&r| mib.drops(r)).sum();
    assert_eq!(drops, 0, "nothing dropped");
}

#[test]
fn flood_is_received_in_netdev_budget_rounds() {
    let mut s = Setup::new();
    s.warm_up();
    let before = *s.shard.stats();
    let sock = flood(&mut s, 1000);

    // net.core.netdev_budget = 300: three full rounds, each a time squeeze, then the rest.
    let mut rounds = Vec::new();
    loop {
        let budget = s.shard.budget();
        assert_eq!(budget.frames, 300);
        let r = s.shard.poll_once(s.now, budget);
        rounds.push((r.rx, r.work_left));
        if !r.work_left {
            break;
        }
    }
    assert_eq!(
        rounds,
        [(300, true), (300, true), (300, true), (100, false)]
    );
    let st = s.shard.stats();
    assert_eq!(st.processed - before.processed, 1000);
    assert_eq!(st.time_squeeze - before.time_squeeze, 3);
    assert_eq!(st.time_limit_hits, 0, "no clock, no time limit");
    assert_eq!(st.polls - before.polls, 4);
    assert_all_received(&mut s, sock, 1000);
}

#[test]
fn netdev_budget_sysctl_sets_the_round_size() {
    let mut s = Setup::new();
    s.warm_up();
    s.shard
        .stack_mut()
        .set_sysctl("net.core.netdev_budget", 64)
        .unwrap();
    assert!(
        s.shard
            .stack_mut()
            .set_sysctl("net.core.netdev_budget", 0)
            .is_err(),
        "a zero budget would never receive"
    );
    let before = *s.shard.stats();
    let sock = flood(&mut s, 200);
    let mut sizes = Vec::new();
    loop {
        let budget = s.shard.budget();
        let r = s.shard.poll_once(s.now, budget);
        sizes.push(r.rx);
        if !r.work_left {
            break;
        }
    }
    assert_eq!(sizes, [64, 64, 64, 8]);
    assert_eq!(s.shard.stats().time_squeeze - before.time_squeeze, 3);
    assert_all_received(&mut s, sock, 200);
}

#[test]
fn time_limit_stops_a_round_on_a_virtual_clock() {
    let mut s = Setup::new();
    s.warm_up();
    let sock = flood(&mut s, 1000);
    let before = *s.shard.stats();

    // A clock that advances 7 µs per reading, as if each frame cost 7 µs: with
    // netdev_budget_usecs = 2000 a round stops after ceil(2000 / 7) = 286 frames, before
    // the 300-frame limit.
    let mut t = Instant::from_secs(100);
    let mut clock = move || {
        t += Duration::from_micros(7);
        t
    };
    let mut sizes = Vec::new();
    loop {
        let budget = s.shard.budget().with_clock(&mut clock);
        assert_eq!(budget.time, Duration::from_micros(2000));
        let r = s.shard.poll_once(s.now, budget);
        sizes.push(r.rx);
        if !r.work_left {
            break;
        }
    }
    assert_eq!(sizes, [286, 286, 286, 142]);
    let st = s.shard.stats();
    assert_eq!(st.time_squeeze - before.time_squeeze, 3);
    assert_eq!(st.time_limit_hits - before.time_limit_hits, 3);
    assert_all_received(&mut s, sock, 1000);
}

#[test]
fn zero_budget_usecs_means_one_frame_per_round() {
    let mut s = Setup::new();
    s.warm_up();
    s.shard
        .stack_mut()
        .set_sysctl("net.core.netdev_budget_usecs", 0)
        .unwrap();
    let sock = flood(&mut s, 5);
    let mut tick = Instant::ZERO;
    let mut clock = move || {
        tick += Duration::from_nanos(1);
        tick
    };
    let sizes: Vec<usize> = (0..6)
        .map(|_| {
            let budget = s.shard.budget().with_clock(&mut clock);
            s.shard.poll_once(s.now, budget).rx
        })
        .collect();
    assert_eq!(sizes, [1, 1, 1, 1, 1, 0]);
    assert_all_received(&mut s, sock, 5);
}

/// Frames that reached side B (the peer is not listening), with the time they arrived.
fn drain_side_b<D: Device>(s: &Setup<D>, seen: &mut Vec<(Instant, Vec<u8>)>) {
    let mut buf = [0u8; 1514];
    while let Some(n) = s.link.borrow_mut().recv(s.now, Side::B, &mut buf) {
        seen.push((s.now, buf[..n].to_vec()));
    }
}

#[test]
fn timers_fire_through_the_loop() {
    // ARP: a datagram to a silent neighbour. Linux (and the stack) send mcast_solicit = 3
    // requests retrans_time_ms = 1000 apart, then fail the entry and drop the queue.
    let mut s = Setup::new();
    s.datagram_to_nobody();
    let mut seen = Vec::new();
    let mut timer_rounds = Vec::new();
    let budget = s.shard.budget();
    let r = s.shard.poll_once(s.now, budget);
    assert_eq!((r.rx, r.tx), (0, 1), "first ARP request");
    // The neighbour table's garbage collection is due from the start (and every 15 s).
    assert!(r.timers);
    drain_side_b(&s, &mut seen);
    while let Some(at) = s.shard.next_wakeup() {
        if at > Instant::from_secs(5) {
            break;
        }
        assert!(at > s.now, "next_wakeup moves forward");
        s.now = at;
        let budget = s.shard.budget();
        let r = s.shard.poll_once(s.now, budget);
        if r.timers {
            timer_rounds.push((s.now, r.tx));
        }
        drain_side_b(&s, &mut seen);
    }
    let arp: Vec<Instant> = seen
        .iter()
        .filter(|(_, f)| f[12..14] == [0x08, 0x06])
        .map(|&(t, _)| t)
        .collect();
    assert_eq!(
        arp,
        [Instant::ZERO, Instant::from_secs(1), Instant::from_secs(2)]
    );
    assert_eq!(
        timer_rounds,
        [
            (Instant::from_secs(1), 1),
            (Instant::from_secs(2), 1),
            (Instant::from_secs(3), 0)
        ],
        "two retransmits, then the failure"
    );
    assert_eq!(s.shard.stack().mib().drops(DropReason::NeighFailed), 1);
    assert_eq!(s.shard.stats().timer_runs, 1 + 3);

    // TCP: a SYN to the peer, which has gone silent after ARP. The first
    // `tcp_syn_linear_timeouts` (4) retransmissions keep the 1 s initial RTO, then it backs
    // off (RFC 6298 §5.5; Linux `tcp_retransmit_timer`): SYNs at 0, 1, 2, 3, 4, 5, 7 s.
    let mut s = Setup::new();
    s.warm_up();
    s.shard
        .stack_mut()
        .tcp_connect(s.now, SocketAddrV4::new(B_IP, 80))
        .unwrap();
    let mut seen = Vec::new();
    let budget = s.shard.budget();
    s.shard.poll_once(s.now, budget);
    drain_side_b(&s, &mut seen);
    while let Some(at) = s.shard.next_wakeup() {
        if at > Instant::from_secs(10) {
            break;
        }
        s.now = at;
        let budget = s.shard.budget();
        s.shard.poll_once(s.now, budget);
        drain_side_b(&s, &mut seen);
    }
    let syns: Vec<Instant> = seen
        .iter()
        .filter(|(_, f)| f[12..14] == [0x08, 0x00] && f[14 + 9] == 6)
        .map(|&(t, _)| t)
        .collect();
    let secs: Vec<u64> = syns.iter().map(|t| t.since_epoch().as_secs()).collect();
    assert_eq!(secs, [0, 1, 2, 3, 4, 5, 7]);
    assert_eq!(s.shard.stack().mib().get(Counter::TcpRetransSegs), 6);
}

#[test]
fn next_wakeup_is_the_earlier_of_timer_and_arrival() {
    let mut s = Setup::new();
    assert_eq!(s.shard.next_wakeup(), None, "nothing scheduled");
    // A frame on the wire for 5 ms.
    s.link.borrow_mut().set_config(
        Side::B,
        ustack_dev::sim::SimConfig {
            delay: Duration::from_millis(5),
            ..Default::default()
        },
    );
    s.peer.ping(s.now, A_IP, 1, 1, b"x").unwrap();
    s.pump_peer();
    assert_eq!(s.shard.next_wakeup(), Some(Instant::from_millis(5)));
    // A neighbour timer at 1 s does not hide the earlier arrival.
    s.datagram_to_nobody();
    let budget = s.shard.budget();
    s.shard.poll_once(s.now, budget);
    assert_eq!(s.shard.next_wakeup(), Some(Instant::from_millis(5)));
    s.now = Instant::from_millis(5);
    let budget = s.shard.budget();
    let r = s.shard.poll_once(s.now, budget);
    assert_eq!(r.rx, 1, "the ARP request arrived");
    assert_eq!(s.shard.stack().poll_timeout(), Some(Instant::from_secs(1)));
    assert_eq!(s.shard.next_wakeup(), Some(Instant::from_secs(1)));
}

/// The shard answers [`Shard::next_wakeup`] from the stack's deadline as of its last
/// change: a socket call between rounds that schedules a timer shows at once. A datagram
/// to an address nobody answers, sent after the loop went idle with nothing scheduled,
/// starts neighbour resolution: its timer must wake the loop without a round first.
#[test]
fn a_timer_armed_between_rounds_moves_the_next_wakeup() {
    let mut s = Setup::new();
    s.warm_up();
    let idle = s.shard.next_wakeup();
    assert_eq!(idle, s.shard.stack().poll_timeout(), "the cached deadline");
    let stack = s.shard.stack_mut();
    let h = stack.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    stack
        .udp_send_to(s.now, h, b"hello?", SocketAddrV4::new(NOBODY, 9))
        .unwrap();
    let armed = s.shard.stack().poll_timeout();
    assert_ne!(armed, idle, "the datagram started a neighbour timer");
    assert_eq!(s.shard.next_wakeup(), armed);
}

// ---- two shards behind RSS --------------------------------------------------------------

/// A NIC with RSS on side A of an IP-medium sim link (a multi-queue TUN, say): frames from
/// the wire are hashed and queued to their shard; every shard transmits onto the one link.
struct Nic {
    link: SimLink,
    rss: Rss,
    queues: Vec<VecDeque<Vec<u8>>>,
    /// Frames steered to each queue.
    steered: Vec<u64>,
}

impl Nic {
    fn dispatch(&mut self, now: Instant) {
        let mut buf = [0u8; 1500];
        while let Some(n) = self.link.recv(now, Side::A, &mut buf) {
            let q = self.rss.shard_of_frame(&buf[..n], Medium::Ip).unwrap_or(0);
            self.queues[q].push_back(buf[..n].to_vec());
            self.steered[q] += 1;
        }
    }
}

/// One queue of the NIC.
struct Queue {
    nic: Rc<RefCell<Nic>>,
    index: usize,
}

impl Device for Queue {
    fn caps(&self) -> DeviceCaps {
        self.nic.borrow().link.caps()
    }
    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let frame = self.nic.borrow_mut().queues[self.index].pop_front()?;
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        Some(n)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.nic.borrow_mut().link.send(now, Side::A, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        (!self.nic.borrow().queues[self.index].is_empty()).then_some(Instant::ZERO)
    }
}

/// Two shards sharing 10.0.0.1 behind the NIC, and a peer 10.0.0.2 on side B.
struct World {
    nic: Rc<RefCell<Nic>>,
    shards: Vec<Shard<Queue>>,
    peer: Stack,
    now: Instant,
}

impl World {
    fn new(key: RssKey) -> World {
        let link = SimLink::new(SimLinkConfig {
            medium: Medium::Ip,
            a_to_b: ustack_dev::sim::SimConfig {
                delay: Duration::from_micros(100),
                ..Default::default()
            },
            b_to_a: ustack_dev::sim::SimConfig {
                delay: Duration::from_micros(100),
                ..Default::default()
            },
            ..SimLinkConfig::default()
        });
        let nic = Rc::new(RefCell::new(Nic {
            link,
            rss: Rss::new(key, 2),
            queues: vec![VecDeque::new(), VecDeque::new()],
            steered: vec![0, 0],
        }));
        let shards = (0..2)
            .map(|i| {
                let mut config = Config::ip(Ipv4Cidr::new(A_IP, 24));
                config.seed = Some(100 + i as u64);
                let queue = Queue {
                    nic: nic.clone(),
                    index: i,
                };
                Shard::new(i, Stack::new(config), queue)
            })
            .collect();
        let mut config = Config::ip(Ipv4Cidr::new(B_IP, 24));
        config.seed = Some(7);
        World {
            nic,
            shards,
            peer: Stack::new(config),
            now: Instant::ZERO,
        }
    }

    fn rss(&self) -> Rss {
        self.nic.borrow().rss.clone()
    }

    /// Run every party at `now` until nothing moves.
    fn settle(&mut self) {
        let now = self.now;
        let mut buf = [0u8; 1500];
        loop {
            let mut moved = 0;
            self.nic.borrow_mut().dispatch(now);
            for shard in &mut self.shards {
                loop {
                    let budget = shard.budget();
                    let r = shard.poll_once(now, budget);
                    moved += r.rx + r.tx;
                    if !r.work_left {
                        break;
                    }
                }
            }
            while let Some(n) = self.nic.borrow_mut().link.recv(now, Side::B, &mut buf) {
                self.peer.receive(now, &buf[..n]);
                moved += 1;
            }
            if self.peer.poll_timeout().is_some_and(|t| t <= now) {
                self.peer.handle_timeout(now);
            }
            while let Some(f) = self.peer.poll_transmit(now) {
                self.nic.borrow_mut().link.send(now, Side::B, &f);
                moved += 1;
            }
            if moved == 0 {
                return;
            }
        }
    }

    /// Advance the virtual clock event by event for `d`.
    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.settle();
            let next = [
                self.nic.borrow().link.next_event(),
                self.peer.poll_timeout(),
                self.shards[0].next_wakeup(),
                self.shards[1].next_wakeup(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= end => self.now = t.max(self.now + Duration::from_nanos(1)),
                _ => break,
            }
        }
        self.now = end;
        self.settle();
    }

    fn rsts(&self, shard: usize) -> u64 {
        self.shards[shard].stack().mib().get(Counter::TcpOutRsts)
    }
}

#[test]
fn flows_land_on_their_own_shard() {
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        let mut w = World::new(key);
        let rss = w.rss();
        let server = SocketAddrV4::new(A_IP, 80);
        let echo = SocketAddrV4::new(A_IP, 7);
        // A listener and a UDP socket on every shard, like SO_REUSEPORT.
        let listeners: Vec<_> = w
            .shards
            .iter_mut()
            .map(|s| s.stack_mut().tcp_listen(server, 128).unwrap())
            .collect();
        let udp: Vec<_> = w
            .shards
            .iter_mut()
            .map(|s| s.stack_mut().udp_bind(echo).unwrap())
            .collect();

        // 64 TCP connections and 32 UDP flows of 3 datagrams from the peer.
        let conns: Vec<_> = (0..64)
            .map(|_| w.peer.tcp_connect(w.now, server).unwrap())
            .collect();
        let flows: Vec<_> = (0..32)
            .map(|_| w.peer.udp_bind(SocketAddrV4::new(B_IP, 0)).unwrap())
            .collect();
        for round in 0..3u8 {
            for (i, &f) in flows.iter().enumerate() {
                w.peer
                    .udp_send_to(w.now, f, &[i as u8, round], echo)
                    .unwrap();
            }
        }
        w.run_for(Duration::from_millis(50));
        for (i, &c) in conns.iter().enumerate() {
            assert_eq!(
                w.peer.tcp_state(c),
                Ok(State::Established),
                "{key:?} conn {i}"
            );
            w.peer.tcp_send(w.now, c, &[i as u8]).unwrap();
        }
        w.run_for(Duration::from_millis(50));

        // Every connection was accepted, and its data read, on the shard its tuple hashes
        // to; the handshake's three segments and the data all found the same shard, or
        // the other shard would have answered with a reset.
        let mut accepted = [0usize; 2];
        for (k, shard) in w.shards.iter_mut().enumerate() {
            while let Ok((h, remote)) = shard.stack_mut().tcp_accept(listeners[k]) {
                assert_eq!(rss.shard_of_tuple(remote, server), k, "{key:?} {remote}");
                let mut b = [0u8; 4];
                assert_eq!(shard.stack_mut().tcp_recv(w.now, h, &mut b), Ok(1));
                accepted[k] += 1;
            }
        }
        assert_eq!(accepted[0] + accepted[1], 64, "{key:?}");
        assert!(accepted.iter().all(|&n| n > 0), "{key:?}: {accepted:?}");
        assert_eq!((w.rsts(0), w.rsts(1)), (0, 0), "{key:?}: no resets");

        // Every datagram of a flow arrived at the flow's shard.
        let mut got = [0usize; 2];
        for (k, shard) in w.shards.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            while let Ok((n, from)) = shard.stack_mut().udp_recv_from(udp[k], &mut b) {
                assert_eq!(n, 2);
                assert_eq!(rss.shard_of_tuple(from, echo), k, "{key:?} {from}");
                got[k] += 1;
            }
        }
        assert_eq!(got[0] + got[1], 96, "{key:?}");
        assert!(got.iter().all(|&n| n > 0), "{key:?}: {got:?}");
        let nic = w.nic.borrow();
        assert_eq!(
            nic.steered[0] + nic.steered[1],
            w.shards.iter().map(|s| s.stats().processed).sum::<u64>(),
            "every steered frame processed by its shard"
        );
    }
}

#[test]
fn outbound_connection_gets_replies_on_its_own_shard() {
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        let mut w = World::new(key);
        let rss = w.rss();
        let remote = SocketAddrV4::new(B_IP, 8080);
        let listener = w.peer.tcp_listen(remote, 16).unwrap();
        for k in 0..2 {
            let other = 1 - k;
            let port = rss
                .pick_local_port(A_IP, remote, k, 32768..=60999, &mut 0, |_| false)
                .unwrap();
            assert_eq!(rss.shard_of_tuple(remote, SocketAddrV4::new(A_IP, port)), k);
            // Pin the stack's ephemeral range to the picked port (the stack has no
            // bind-before-connect yet).
            let stack = w.shards[k].stack_mut();
            stack
                .set_sysctl("net.ipv4.ip_local_port_range.min", u64::from(port))
                .unwrap();
            stack
                .set_sysctl("net.ipv4.ip_local_port_range.max", u64::from(port))
                .unwrap();
            let other_segs = w.shards[other].stack().mib().get(Counter::TcpInSegs);
            let c = w.shards[k].stack_mut().tcp_connect(w.now, remote).unwrap();
            w.run_for(Duration::from_millis(10));
            let stack = w.shards[k].stack_mut();
            assert_eq!(
                stack.tcp_state(c),
                Ok(State::Established),
                "{key:?} shard {k}"
            );
            assert_eq!(stack.tcp_info(c).unwrap().local.port(), port);
            stack.tcp_send(w.now, c, b"from shard").unwrap();
            w.run_for(Duration::from_millis(10));
            let (pc, from) = w.peer.tcp_accept(listener).unwrap();
            assert_eq!(from, SocketAddrV4::new(A_IP, port));
            let mut b = [0u8; 32];
            assert_eq!(w.peer.tcp_recv(w.now, pc, &mut b), Ok(10));
            w.peer.tcp_send(w.now, pc, b"reply").unwrap();
            w.run_for(Duration::from_millis(10));
            assert_eq!(w.shards[k].stack_mut().tcp_recv(w.now, c, &mut b), Ok(5));
            assert_eq!(&b[..5], b"reply");
            assert_eq!(
                w.shards[other].stack().mib().get(Counter::TcpInSegs),
                other_segs,
                "{key:?}: no segment of shard {k}'s connection reached shard {other}"
            );
        }
        assert_eq!((w.rsts(0), w.rsts(1)), (0, 0));
    }
}

#[test]
fn a_port_that_hashes_elsewhere_sends_the_replies_to_the_wrong_shard() {
    // The control for the test above: connect from shard 0 with a port whose replies hash
    // to shard 1. The SYN-ACK reaches shard 1, which has no such connection and resets it.
    let mut w = World::new(RssKey::MICROSOFT);
    let rss = w.rss();
    let remote = SocketAddrV4::new(B_IP, 8080);
    w.peer.tcp_listen(remote, 16).unwrap();
    let port = rss
        .pick_local_port(A_IP, remote, 1, 32768..=60999, &mut 0, |_| false)
        .unwrap();
    let stack = w.shards[0].stack_mut();
    stack
        .set_sysctl("net.ipv4.ip_local_port_range.min", u64::from(port))
        .unwrap();
    stack
        .set_sysctl("net.ipv4.ip_local_port_range.max", u64::from(port))
        .unwrap();
    let c = w.shards[0].stack_mut().tcp_connect(w.now, remote).unwrap();
    w.run_for(Duration::from_millis(10));
    assert_eq!(w.shards[0].stack().tcp_state(c), Ok(State::SynSent));
    assert!(w.rsts(1) >= 1, "shard 1 reset the stray SYN-ACK");
    assert_eq!(w.shards[0].stack().mib().get(Counter::TcpInSegs), 0);
}

#[test]
fn budget_debug_and_defaults() {
    let b = Budget::from_sysctl(&ustack_stack::Sysctl::default());
    assert_eq!((b.frames, b.time), (300, Duration::from_micros(2000)));
    assert_eq!(
        format!("{b:?}"),
        "Budget { frames: 300, time: 2ms, clock: false }"
    );
    let b = Budget::new(10, Duration::from_millis(1));
    assert!(b.clock.is_none());
}

// ---- transmit batches over shm ---------------------------------------------------------

/// A shard on side A of an IP shm link with `ring_size` slots a way, its UDP socket,
/// and side B's port.
fn shm_shard(ring_size: usize) -> (Shard<ShmPort>, ShmPort, UdpHandle) {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        ring_size,
        medium: Medium::Ip,
        ..ShmConfig::default()
    })
    .unwrap();
    let mut shard = Shard::new(
        0,
        Stack::new(Config::ip(Ipv4Cidr::new(A_IP, 24))),
        a.remove(0),
    );
    let sock = shard
        .stack_mut()
        .udp_bind(SocketAddrV4::new(A_IP, 5000))
        .unwrap();
    (shard, b.remove(0), sock)
}

/// Queue `n` UDP datagrams (payload: their number) to the peer in the shard's stack.
fn queue(shard: &mut Shard<ShmPort>, sock: UdpHandle, n: u32) {
    for i in 0..n {
        shard
            .stack_mut()
            .udp_send_to(
                Instant::ZERO,
                sock,
                &i.to_be_bytes(),
                SocketAddrV4::new(B_IP, 9),
            )
            .unwrap();
    }
}

/// [`shm_shard`] with `n` datagrams queued.
fn shm_shard_with_queued(ring_size: usize, n: u32) -> (Shard<ShmPort>, ShmPort) {
    let (mut shard, peer, sock) = shm_shard(ring_size);
    queue(&mut shard, sock, n);
    (shard, peer)
}

/// The datagram numbers that arrived on `port`, in order.
fn shm_datagrams(port: &mut ShmPort) -> Vec<u32> {
    let mut buf = [0u8; 1500];
    let mut got = Vec::new();
    while let Some(n) = port.recv(Instant::ZERO, &mut buf) {
        got.push(u32::from_be_bytes(buf[n - 4..n].try_into().unwrap()));
    }
    got
}

/// One round hands what the stack queued to the device in batches of `TX_BATCH`: the shm
/// port publishes its ring index once per batch, not once per frame, and wakes the
/// sleeping peer once.
#[test]
fn a_round_transmits_in_batches_with_one_publication_each() {
    let n = TX_BATCH as u32 + 36;
    let (mut shard, mut peer) = shm_shard_with_queued(256, n);
    assert!(
        peer.prepare_sleep(),
        "the peer goes to sleep on an empty ring"
    );
    let budget = shard.budget();
    let r = shard.poll_once(Instant::ZERO, budget);
    assert_eq!(r.tx, n as usize);
    let st = *shard.stats();
    assert_eq!(
        (st.transmitted, st.tx_dropped, st.tx_batches),
        (u64::from(n), 0, 2)
    );
    let dev = shard.device().stats().clone();
    assert_eq!(dev.tx_frames, u64::from(n));
    assert_eq!(dev.tx_publishes, 2, "one per batch");
    assert_eq!(dev.doorbells, 1, "the sleeping peer is woken once");
    peer.finish_sleep();
    assert_eq!(shm_datagrams(&mut peer), (0..n).collect::<Vec<_>>());
}

/// A device that says how much room it has gets no more than that: when the ring is full
/// the rest waits in the stack's queue (as Linux's qdisc holds packets while a driver's
/// queue is stopped) and goes out, in order, as the peer hands slots back. Nothing is
/// dropped.
#[test]
fn a_full_ring_holds_frames_back_until_the_peer_returns_slots() {
    let (mut shard, mut peer) = shm_shard_with_queued(16, 40);
    let budget = shard.budget();
    let r = shard.poll_once(Instant::ZERO, budget);
    assert_eq!(r.tx, 16, "what fits");
    let st = *shard.stats();
    assert_eq!((st.transmitted, st.tx_dropped, st.tx_held), (16, 0, 1));
    assert_eq!(shard.stack().tx_queue_len(), 24, "held, not dropped");
    let mut got = shm_datagrams(&mut peer);
    let mut rounds = 1;
    while got.len() < 40 {
        rounds += 1;
        assert!(rounds < 10, "stuck at {got:?}");
        shard.poll_once(Instant::ZERO, shard.budget());
        got.extend(shm_datagrams(&mut peer));
    }
    assert_eq!(got, (0..40).collect::<Vec<_>>(), "every frame, in order");
    let st = *shard.stats();
    assert_eq!((st.transmitted, st.tx_dropped), (40, 0));
    let dev = shard.device().stats().clone();
    assert_eq!((dev.tx_frames, dev.tx_full), (40, 0));
}

/// Held frames are bounded like a qdisc: the stack's transmit queue holds at most
/// `net.core.txqueuelen` (Linux's default 1000) and drops what would go beyond (a UDP
/// datagram's reason: `UDP_SNDBUF`); with the peer not reading, the rest waits, and goes out in order
/// once it reads.
#[test]
fn held_frames_are_bounded_by_the_queue_length() {
    let n = 1100;
    let (mut shard, mut peer) = shm_shard_with_queued(16, n);
    let queued = shard.stack().tx_queue_len();
    assert_eq!(queued, 1000, "txqueuelen");
    // UDP's reason for a full device queue, as Linux counts UdpSndbufErrors there.
    let full = shard.stack().mib().drops(ustack_obs::DropReason::UdpSndbuf);
    assert_eq!(full, 100);
    shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(shard.stats().transmitted, 16);
    assert_eq!(shard.stack().tx_queue_len(), 1000 - 16, "held");
    let mut got = Vec::new();
    for _ in 0..200 {
        got.extend(shm_datagrams(&mut peer));
        shard.poll_once(Instant::ZERO, shard.budget());
    }
    got.extend(shm_datagrams(&mut peer));
    assert_eq!(
        got,
        (0..1000).collect::<Vec<_>>(),
        "every one queued, in order"
    );
    assert_eq!(shard.stats().tx_dropped, 0);
}

/// `n` numbered datagrams from the shard to the peer's port 9000, queued in the shard's
/// stack (not yet on the wire); the peer's socket, with room for all of them.
fn queue_burst<D: Device>(s: &mut Setup<D>, n: u32) -> ustack_stack::UdpHandle {
    let rx = s.peer.udp_bind(SocketAddrV4::new(B_IP, 9000)).unwrap();
    s.peer
        .set_sysctl("net.core.rmem_default", 64 << 20)
        .unwrap();
    let tx = s
        .shard
        .stack_mut()
        .udp_bind(SocketAddrV4::new(A_IP, 0))
        .unwrap();
    for i in 0..n {
        s.shard
            .stack_mut()
            .udp_send_to(s.now, tx, &i.to_be_bytes(), SocketAddrV4::new(B_IP, 9000))
            .unwrap();
    }
    assert_eq!(s.shard.stack().tx_queue_len(), n as usize);
    rx
}

/// The peer received datagrams 0..n, in order.
fn assert_peer_received_in_order<D: Device>(s: &mut Setup<D>, rx: ustack_stack::UdpHandle, n: u32) {
    s.pump_peer();
    let mut buf = [0u8; 16];
    for i in 0..n {
        let (len, _) = s.peer.udp_recv_from(rx, &mut buf).unwrap();
        assert_eq!(&buf[..len], &i.to_be_bytes(), "datagram {i} in order");
    }
}

/// A queued burst is not throttled by the transmit quota when nothing arrives: the quota
/// ([`TX_QUOTA`], Linux's `dev_tx_weight`) only makes the loop read the device between
/// quotas. 1,000 datagrams queued at once (a full `txqueuelen`) all reach the device in
/// one round, in order, none dropped; a loop that stopped at the quota would need eight
/// rounds, and a burst an application queued would wait for them (its retransmission
/// timers running from the moment TCP queued each segment).
#[test]
fn a_queued_burst_reaches_the_device_in_one_round_when_nothing_arrives() {
    let mut s = Setup::new();
    s.warm_up();
    let n = 1000u32;
    let rx = queue_burst(&mut s, n);
    let budget = s.shard.budget();
    let r = s.shard.poll_once(s.now, budget);
    assert_eq!((r.tx, r.rx, r.work_left), (n as usize, 0, false));
    assert_eq!(s.shard.stack().tx_queue_len(), 0);
    assert_eq!(s.shard.stats().tx_dropped, 0);
    assert_peer_received_in_order(&mut s, rx, n);
}

/// A transmit step still stops at the round's time limit: with a clock that moves 1 ms
/// per reading and `netdev_budget_usecs` 2000, the loop looks at the clock after each
/// quota and leaves the rest of a 1,000-frame burst to the next rounds (work left), each
/// round handing over whole quotas; everything arrives, in order.
#[test]
fn a_transmit_step_stops_at_the_time_limit() {
    let mut s = Setup::new();
    s.warm_up();
    let n = 1000u32;
    let rx = queue_burst(&mut s, n);
    let mut t = Instant::from_secs(100);
    let mut clock = move || {
        t += Duration::from_millis(1);
        t
    };
    let mut rounds = Vec::new();
    loop {
        let budget = s.shard.budget().with_clock(&mut clock);
        let r = s.shard.poll_once(s.now, budget);
        rounds.push(r.tx);
        if !r.work_left {
            break;
        }
        assert!(rounds.len() < 20, "{rounds:?}");
    }
    assert!(rounds.len() > 1, "stopped by the time limit: {rounds:?}");
    let (last, full) = rounds.split_last().unwrap();
    assert!(
        full.iter().all(|&tx| tx > 0 && tx % TX_QUOTA == 0),
        "whole quotas: {rounds:?}"
    );
    assert!(*last <= 3 * TX_QUOTA, "{rounds:?}");
    assert_eq!(rounds.iter().sum::<usize>(), n as usize);
    assert_peer_received_in_order(&mut s, rx, n);
}

/// Side A of a sim link whose receive queue fills like a TUN's (a kernel peer that
/// answers every second frame the shard sends with one of its own, a delayed ACK, into a
/// queue of `capacity` frames; the rest are dropped at the door and counted).
struct Answering {
    port: SimPort,
    queue: VecDeque<Vec<u8>>,
    capacity: usize,
    dropped: usize,
    answered: usize,
    sent: usize,
}

/// An Ethernet frame of a type the stack does not speak: the stack counts and drops it,
/// as it would take an ACK, without an answer.
const ANSWER: [u8; 60] = {
    let mut f = [0u8; 60];
    f[12] = 0x88;
    f[13] = 0xb5; // IEEE 802 local experimental EtherType
    f
};

impl Device for Answering {
    fn caps(&self) -> DeviceCaps {
        self.port.caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(n) = self.port.recv(now, buf) {
            return Some(n);
        }
        let f = self.queue.pop_front()?;
        buf[..f.len()].copy_from_slice(&f);
        Some(f.len())
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.sent += 1;
        if self.sent % 2 == 1 {
            // A delayed ACK: one answer every second frame.
            return self.port.send(now, frame);
        }
        self.answered += 1;
        if self.queue.len() < self.capacity {
            self.queue.push_back(ANSWER.to_vec());
        } else {
            self.dropped += 1;
        }
        self.port.send(now, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.port.poll_at()
    }
}

/// The quota's purpose: between quotas the loop reads what the burst drew. A peer that
/// answers every second one of 1,000 frames into a receive queue of 150 (the TUN queue of
/// the HTTP load test in tools/ustack/tests/kernel_load.rs) loses none of its 500
/// answers, since the shard reads them after every [`TX_QUOTA`] frames it sends (the
/// answers count against the receive budget, so the burst may take more than a round); a
/// loop handing the whole burst over before reading would overflow it by 350.
#[test]
fn the_device_is_read_between_transmit_quotas() {
    let (port, b) = sim_pair(SimLinkConfig::default());
    let link = b.link().clone();
    let device = Answering {
        port,
        queue: VecDeque::new(),
        capacity: 150,
        dropped: 0,
        answered: 0,
        sent: 0,
    };
    let mut s = Setup {
        shard: Shard::new(0, eth_stack(1, 1), device),
        peer: eth_stack(2, 2),
        link,
        now: Instant::ZERO,
    };
    s.warm_up();
    let n = 1000u32;
    let rx = queue_burst(&mut s, n);
    let before = s.shard.device().answered;
    let mut sent = 0;
    for _ in 0..10 {
        let budget = s.shard.budget();
        let r = s.shard.poll_once(s.now, budget);
        sent += r.tx;
        if !r.work_left {
            break;
        }
    }
    assert_eq!(sent, n as usize);
    let dev = s.shard.device();
    assert_eq!(dev.answered - before, n as usize / 2);
    assert_eq!(dev.dropped, 0, "no answer lost at the device's door");
    assert!(dev.queue.is_empty(), "every answer read");
    assert_peer_received_in_order(&mut s, rx, n);
}

/// Due timers wait while frames wait on the device (they may answer what the timers
/// would retransmit), until a round drains it: with a budget of 10 frames and 195
/// waiting, on a clock that stands still, the ARP retransmission due at 1 s waits 19
/// rounds (no time passes, so the bound in time is not reached) and goes out in the 20th,
/// which reads the last 5 frames.
#[test]
fn due_timers_wait_for_the_device_to_drain() {
    let mut s = Setup::new();
    s.warm_up();
    // A datagram to an address nobody answers: an ARP request now, again at 1 s.
    s.datagram_to_nobody();
    let budget = s.shard.budget();
    s.shard.poll_once(s.now, budget);
    let mut seen = Vec::new();
    drain_side_b(&s, &mut seen);
    assert_eq!(seen.len(), 1, "the first ARP request");
    s.shard
        .stack_mut()
        .set_sysctl("net.core.netdev_budget", 10)
        .unwrap();
    let sock = flood(&mut s, 195);
    s.now = Instant::from_secs(1);
    let before = *s.shard.stats();
    let mut rounds = Vec::new();
    loop {
        let budget = s.shard.budget();
        let r = s.shard.poll_once(s.now, budget);
        rounds.push((r.rx, r.timers, r.work_left));
        if !r.work_left {
            break;
        }
    }
    assert_eq!(rounds[..19], vec![(10, false, true); 19][..]);
    assert_eq!(rounds[19..], [(5, true, false)], "drained: the timers run");
    assert_eq!(s.shard.stats().timer_defers - before.timer_defers, 19);
    let mut seen = Vec::new();
    drain_side_b(&s, &mut seen);
    let arp = seen
        .iter()
        .filter(|(_, f)| f[12..14] == [0x08, 0x06])
        .count();
    assert_eq!(arp, 1, "the ARP retransmission");
    assert_all_received(&mut s, sock, 195);
}

/// Side A of a sim link with a receive ring in front: frames the test puts in `ring` are
/// read first (a backlog the peer's frames wait behind), with `endless` the ring never
/// runs dry (a flood of frames the stack drops), and with `stutter` every second read
/// finds nothing. `poll_at` says "now" while
/// anything is in it, as the shm port does.
struct Backlog {
    port: SimPort,
    ring: VecDeque<Vec<u8>>,
    endless: bool,
    /// `Some`: every second read of the ring finds nothing (flips each read).
    stutter: Option<bool>,
}

impl Backlog {
    fn new(port: SimPort) -> Backlog {
        Backlog {
            port,
            ring: VecDeque::new(),
            endless: false,
            stutter: None,
        }
    }
}

impl Device for Backlog {
    fn caps(&self) -> DeviceCaps {
        self.port.caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(skip) = self.stutter.as_mut() {
            *skip = !*skip;
            if *skip && !self.ring.is_empty() {
                return None;
            }
        }
        if let Some(f) = self.ring.pop_front() {
            buf[..f.len()].copy_from_slice(&f);
            return Some(f.len());
        }
        if self.endless {
            buf[..ANSWER.len()].copy_from_slice(&ANSWER);
            return Some(ANSWER.len());
        }
        self.port.recv(now, buf)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.port.send(now, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        if self.endless || !self.ring.is_empty() {
            return Some(Instant::ZERO);
        }
        self.port.poll_at()
    }
}

fn backlog_setup() -> Setup<Backlog> {
    let (port, b) = sim_pair(SimLinkConfig::default());
    let mut s = Setup {
        shard: Shard::new(0, eth_stack(1, 1), Backlog::new(port)),
        peer: eth_stack(2, 2),
        link: b.link().clone(),
        now: Instant::ZERO,
    };
    s.warm_up();
    s
}

/// Rounds at `now`, `now + step`, ... until one leaves no work (at most `max`): the
/// rounds whose timers ran, by number.
fn rounds_until_idle<D: Device>(s: &mut Setup<D>, step: Duration, max: usize) -> Vec<usize> {
    let mut timers = Vec::new();
    for i in 0..max {
        let budget = s.shard.budget();
        let r = s.shard.poll_once(s.now, budget);
        if r.timers {
            timers.push(i);
        }
        if !r.work_left {
            return timers;
        }
        s.now += step;
    }
    panic!("still busy after {max} rounds");
}

/// A connection from the shard to the peer that has sent "ping" and whose reply ("pong",
/// carrying the ACK) sits in the device's ring behind `backlog` frames; the clock at the
/// moment the segment's retransmission timer falls due.
fn ack_behind_backlog(backlog: usize) -> (Setup<Backlog>, ustack_stack::TcpHandle) {
    let mut s = backlog_setup();
    let listener = s.peer.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let c = s
        .shard
        .stack_mut()
        .tcp_connect(s.now, SocketAddrV4::new(B_IP, 80))
        .unwrap();
    for _ in 0..20 {
        let budget = s.shard.budget();
        s.shard.poll_once(s.now, budget);
        s.pump_peer();
        s.now += Duration::from_millis(1);
    }
    let budget = s.shard.budget();
    s.shard.poll_once(s.now, budget);
    assert_eq!(s.shard.stack().tcp_state(c), Ok(State::Established));
    let (pc, _) = s.peer.tcp_accept(listener).unwrap();
    s.shard.stack_mut().tcp_send(s.now, c, b"ping").unwrap();
    let budget = s.shard.budget();
    assert_eq!(s.shard.poll_once(s.now, budget).tx, 1, "the segment");
    // The peer reads it and replies; the reply (with the ACK) lands behind the backlog.
    let mut buf = [0u8; 1514];
    while let Some(n) = s.link.borrow_mut().recv(s.now, Side::B, &mut buf) {
        s.peer.receive(s.now, &buf[..n]);
    }
    assert_eq!(s.peer.tcp_recv(s.now, pc, &mut buf), Ok(4));
    s.peer.tcp_send(s.now, pc, b"pong").unwrap();
    let ring = &mut s.shard.device_mut().ring;
    ring.extend(std::iter::repeat_n(ANSWER.to_vec(), backlog));
    while let Some(f) = s.peer.poll_transmit(s.now) {
        s.shard.device_mut().ring.push_back(f);
    }
    let due = s.shard.stack().poll_timeout().expect("the timer is armed");
    assert!(due > s.now);
    s.now = due;
    (s, c)
}

/// The ACK was read before the timer fired: nothing retransmitted, "pong" received, no
/// timer left due.
fn assert_no_timeout(s: &mut Setup<Backlog>, c: ustack_stack::TcpHandle) {
    assert!(s.shard.device().ring.is_empty(), "the ring drained");
    let mib = s.shard.stack().mib();
    assert_eq!(
        (
            mib.get(Counter::TcpExtTCPTimeouts),
            mib.get(Counter::TcpRetransSegs)
        ),
        (0, 0),
        "the timer did not fire: the ACK was read first"
    );
    let mut buf = [0u8; 8];
    assert_eq!(s.shard.stack_mut().tcp_recv(s.now, c, &mut buf), Ok(4));
    assert!(
        s.shard.stack().poll_timeout().is_none_or(|t| t > s.now),
        "no retransmission timer left due"
    );
}

/// The close of `ustack bench c1m`: the ACK that settles the shard's segment (here a
/// reply carrying it) sits in the device's ring behind 300 frames when the segment's
/// retransmission timer falls due. With a budget of 10 frames a round and 0.1 ms a round,
/// reading up to it takes 31 rounds (3 ms, within [`MAX_TIMER_DEFER`]): the timer waits
/// for them and never fires, so nothing is retransmitted (a bound of 10 rounds fired it,
/// and the retransmission was spurious).
#[test]
fn a_retransmission_timer_waits_for_the_ack_in_the_ring() {
    let (mut s, c) = ack_behind_backlog(300);
    s.shard
        .stack_mut()
        .set_sysctl("net.core.netdev_budget", 10)
        .unwrap();
    let before = *s.shard.stats();
    rounds_until_idle(&mut s, Duration::from_micros(100), 100);
    assert_no_timeout(&mut s, c);
    assert_eq!(s.shard.stats().timer_defers - before.timer_defers, 30);
}

/// Frames that land while the round runs: the device finds none on every second call
/// (as a ring read just before the peer published more), so every receive stops early,
/// inside its budget, with frames left. The due timer waits on what the device reports
/// (`poll_at`: frames ready) and the ACK behind 20 frames is read first.
#[test]
fn a_retransmission_timer_waits_for_frames_the_device_reports_ready() {
    let (mut s, c) = ack_behind_backlog(20);
    s.shard.device_mut().stutter = Some(false);
    let before = *s.shard.stats();
    rounds_until_idle(&mut s, Duration::from_micros(100), 100);
    assert_no_timeout(&mut s, c);
    assert!(s.shard.stats().timer_defers > before.timer_defers);
}

/// The bound: a device that never runs dry does not hold due timers longer than
/// [`MAX_TIMER_DEFER`] from the first round that deferred them, on the rounds' clock
/// (1 ms a round here: the ARP retransmission due at 1 s goes out in the round at
/// 1.020 s), nor, on a clock that stands still, for more than [`MAX_TIMER_DEFER_ROUNDS`]
/// rounds.
#[test]
fn a_device_that_never_runs_dry_holds_timers_at_most_the_bound() {
    for (step, deferred) in [
        (Duration::from_millis(1), 20),
        (Duration::ZERO, MAX_TIMER_DEFER_ROUNDS as usize),
    ] {
        let mut s = backlog_setup();
        s.datagram_to_nobody();
        let budget = s.shard.budget();
        s.shard.poll_once(s.now, budget);
        let mut seen = Vec::new();
        drain_side_b(&s, &mut seen);
        s.shard
            .stack_mut()
            .set_sysctl("net.core.netdev_budget", 10)
            .unwrap();
        s.shard.device_mut().endless = true;
        s.now = Instant::from_secs(1);
        assert_eq!(s.shard.stack().poll_timeout(), Some(s.now));
        let mut timers = Vec::new();
        for i in 0..=deferred {
            let budget = s.shard.budget();
            let r = s.shard.poll_once(s.now, budget);
            assert!(r.work_left, "the device never runs dry");
            if r.timers {
                timers.push(i);
                break;
            }
            s.now += step;
        }
        assert_eq!(timers, [deferred], "the timers run at the bound");
        assert!(s.now - Instant::from_secs(1) <= MAX_TIMER_DEFER);
        let mut seen = Vec::new();
        drain_side_b(&s, &mut seen);
        let arp = seen.iter().filter(|(_, f)| f[12..14] == [0x08, 0x06]);
        assert_eq!(arp.count(), 1, "the ARP retransmission");
    }
}

/// Side A of a sim link whose frames show up one receive call late: the first call after
/// a frame lands finds the device empty, as when a frame arrives just after the round
/// looked (the ACK to what the round just sent, say).
struct Late {
    port: SimPort,
    held: Option<Vec<u8>>,
}

impl Device for Late {
    fn caps(&self) -> DeviceCaps {
        self.port.caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(frame) = self.held.take() {
            buf[..frame.len()].copy_from_slice(&frame);
            return Some(frame.len());
        }
        let n = self.port.recv(now, buf)?;
        self.held = Some(buf[..n].to_vec());
        None
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.port.send(now, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.port.poll_at()
    }
}

/// Due timers run only after one more receive: a frame that came in while the round was
/// busy is read first. The shard's datagram to the peer waits for ARP; the peer's reply
/// arrives just as the retransmission timer (1 s) is due and after the round's first
/// receive found nothing. Read first, it resolves the neighbour: the datagram goes out
/// and no second ARP request does.
#[test]
fn due_timers_run_after_one_more_receive() {
    let (port, b) = sim_pair(SimLinkConfig::default());
    let link = b.link().clone();
    let mut shard = Shard::new(0, eth_stack(1, 1), Late { port, held: None });
    let mut peer = eth_stack(2, 2);
    let stack = shard.stack_mut();
    let h = stack.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    stack
        .udp_send_to(Instant::ZERO, h, b"x", SocketAddrV4::new(B_IP, 9))
        .unwrap();
    let budget = shard.budget();
    assert_eq!(
        shard.poll_once(Instant::ZERO, budget).tx,
        1,
        "the ARP request"
    );
    // The peer answers at 1 s, when the shard's retransmission is due.
    let now = Instant::from_secs(1);
    assert_eq!(shard.stack().poll_timeout(), Some(now));
    let mut buf = [0u8; 1514];
    while let Some(n) = link.borrow_mut().recv(now, Side::B, &mut buf) {
        peer.receive(now, &buf[..n]);
    }
    while let Some(f) = peer.poll_transmit(now) {
        link.borrow_mut().send(now, Side::B, &f);
    }
    let budget = shard.budget();
    let r = shard.poll_once(now, budget);
    assert_eq!((r.rx, r.tx, r.timers), (1, 1, false));
    let mut sent = Vec::new();
    while link.borrow_mut().recv(now, Side::B, &mut buf).is_some() {
        sent.push([buf[12], buf[13]]);
    }
    assert_eq!(sent, [[0x08, 0x00]], "the datagram, no second ARP request");
}

/// A round receives nothing while the transmit queue has no room for replies, even
/// the first frame (the round's first look at the device is made before the loop):
/// the frame waits on the device, and comes in once the queue drains.
#[test]
fn a_full_transmit_queue_leaves_the_first_frame_on_the_device() {
    let (mut shard, mut peer, sock) = shm_shard(16);
    queue(&mut shard, sock, 1000);
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.tx, 16, "the ring's worth");
    queue(&mut shard, sock, 16);
    assert_eq!(shard.stack().tx_room(), 0, "txqueuelen frames queued");
    assert!(peer.send(Instant::ZERO, &[0x45; 28]));
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!((r.rx, r.tx), (0, 0));
    assert_eq!(shard.stats().processed, 0);
    assert!(shard.device().poll_at().is_some(), "still on the device");
    assert_eq!(shm_datagrams(&mut peer).len(), 16);
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!((r.rx, r.tx), (1, 16));
}

/// A round with no frame budget receives nothing and says work is left (NAPI's
/// "the whole budget was used").
#[test]
fn a_zero_frame_budget_takes_nothing_and_leaves_work() {
    let (mut shard, mut peer, _) = shm_shard(16);
    assert!(peer.send(Instant::ZERO, &[0x45; 28]));
    let r = shard.poll_once(Instant::ZERO, Budget::new(0, Duration::from_millis(2)));
    assert_eq!(r.rx, 0);
    assert!(r.work_left);
    assert!(shard.device().poll_at().is_some(), "still on the device");
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.rx, 1);
    assert!(!r.work_left);
}

/// One queued frame goes straight to a device with room (one batch), and waits in
/// the stack's queue, not dropped, while the device has none.
#[test]
fn one_queued_frame_waits_while_the_device_has_no_room() {
    let (mut shard, mut peer, sock) = shm_shard(16);
    queue(&mut shard, sock, 1);
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.tx, 1);
    assert_eq!(shard.stats().tx_batches, 1);
    queue(&mut shard, sock, 15);
    shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(shard.device().stats().tx_frames, 16, "the ring is full");
    queue(&mut shard, sock, 1);
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.tx, 0);
    assert_eq!(shard.stack().tx_queue_len(), 1, "held");
    assert_eq!(shard.stats().tx_dropped, 0);
    assert_eq!(shard.device().stats().tx_full, 0);
    assert_eq!(shm_datagrams(&mut peer).len(), 16);
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.tx, 1);
    assert_eq!(shm_datagrams(&mut peer).len(), 1);
    assert_eq!(shard.stats().tx_dropped, 0);
}

/// A frame taken from the queue can let connections held back by a full queue
/// queue theirs behind it (`Stack::poll_transmit` wakes them): they go with it, in
/// one batch (one ring publication), not the frame alone and theirs a step later.
#[test]
fn frames_woken_behind_the_one_queued_go_in_its_batch() {
    let (mut shard, mut peer, sock) = shm_shard(2);
    let stack = shard.stack_mut();
    // TCP may fill the queue to txqueuelen less the budget: 2 frames.
    stack.set_sysctl("net.core.txqueuelen", 4).unwrap();
    stack.set_sysctl("net.core.netdev_budget", 2).unwrap();
    queue(&mut shard, sock, 2);
    let stack = shard.stack_mut();
    let to = SocketAddrV4::new(B_IP, 80);
    stack.tcp_connect(Instant::ZERO, to).unwrap();
    stack.tcp_connect(Instant::ZERO, to).unwrap();
    assert_eq!(stack.tx_queue_len(), 2, "the SYNs wait");
    assert!(stack.tx_waiting());
    // The datagrams fill the ring; taking the second wakes the first connection.
    let r = shard.poll_once(Instant::ZERO, shard.budget());
    assert_eq!(r.tx, 2);
    assert_eq!(shard.stack().tx_queue_len(), 1, "the first SYN");
    assert!(shard.stack().tx_waiting(), "the second connection waits");
    assert_eq!(shm_datagrams(&mut peer).len(), 2);
    let publishes = shard.device().stats().tx_publishes;
    let batches = shard.stats().tx_batches;
    // A new instant: taking the first SYN wakes the second connection.
    let now = Instant::from_millis(1);
    let r = shard.poll_once(now, shard.budget());
    assert_eq!(r.tx, 2, "both SYNs");
    assert_eq!(shard.stats().tx_batches - batches, 1, "in one batch");
    assert_eq!(shard.device().stats().tx_publishes - publishes, 1);
    assert_eq!(shm_datagrams(&mut peer).len(), 2);
}

// ---- the receive byte budget over shm --------------------------------------------------

/// A round takes frames from a device that leaves long frames' payloads in place (the shm
/// port) only up to `RX_ROUND_BYTES` of them, then ends with `work_left` so that the
/// application reads them before more come; the next rounds take the rest, none lost.
#[test]
fn a_round_over_shm_stops_at_its_byte_budget_and_the_next_takes_the_rest() {
    let config = ShmConfig {
        ring_size: 16,
        slot_size: 65_600,
        mtu: 65_535,
        medium: Medium::Ip,
        ..ShmConfig::default()
    };
    let (mut a, mut b) = ShmLink::pair(&config).unwrap();
    let ip = |addr| {
        let mut c = Config::ip(Ipv4Cidr::new(addr, 24));
        c.mtu = config.mtu;
        // Room in the socket for all twelve datagrams.
        c.sysctl.set("net.core.rmem_default", 4 << 20).unwrap();
        Stack::new(c)
    };
    let mut shard = Shard::new(0, ip(A_IP), a.remove(0));
    let (mut peer, mut port) = (ip(B_IP), b.remove(0));
    let to = SocketAddrV4::new(A_IP, 5000);
    let sock = shard.stack_mut().udp_bind(to).unwrap();
    let from = peer.udp_bind(SocketAddrV4::new(B_IP, 5001)).unwrap();
    // Twelve 60,000-byte datagrams: 720,000 bytes, nearly three budgets' worth.
    let (n, len) = (12, 60_000);
    for i in 0..n {
        let payload = vec![i as u8; len];
        peer.udp_send_to(Instant::ZERO, from, &payload, to).unwrap();
        let frame = peer.poll_transmit(Instant::ZERO).unwrap();
        assert!(port.send(Instant::ZERO, &frame));
    }
    let frame_len = len + 28;
    let per_round = RX_ROUND_BYTES.div_ceil(frame_len);
    let mut rounds = Vec::new();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    for _ in 0..4 {
        let r = shard.poll_once(Instant::ZERO, shard.budget());
        rounds.push((r.rx, r.work_left));
        while let Ok((k, _)) = shard.stack_mut().udp_recv_from(sock, &mut buf) {
            assert_eq!(k, len);
            got.push(buf[0]);
        }
    }
    assert_eq!(
        rounds,
        [
            (per_round, true),
            (per_round, true),
            (n - 2 * per_round, false),
            (0, false)
        ]
    );
    assert_eq!(shard.stats().rx_bytes_limit_hits, 2);
    assert_eq!(
        got,
        (0..n as u8).collect::<Vec<_>>(),
        "every datagram, in order"
    );
}
