//! Segment-level TCP fixtures: one stack under test on an IP-only link, and the test
//! playing its peer by crafting segments and reading the stack's answers, on a virtual
//! clock (EXAMPLES item 15; the shape of packetdrill scripts and smoltcp's `send!`/`recv!`).
//!
//! ```ignore
//! let mut t = SegTest::listening(80);
//! t.send(Seg::syn(1000).mss(1460));
//! let synack = t.recv().expect("SYN-ACK");
//! assert!(synack.has(Flags::SYN | Flags::ACK) && synack.ack == 1001);
//! ```

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};
use core::time::Duration;

use ustack_stack::{Config, Instant, Ipv4Cidr, ListenerHandle, Stack, TcpHandle, TcpResources};
use ustack_wire::tcp::{self, Flags, TcpTimestamp};
use ustack_wire::{IpProtocol, SeqNumber, ipv4, ipv6};

/// The stack under test: 192.0.2.2.
pub const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The scripted peer: 192.0.2.1, port 40000.
pub const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 40000);

/// A segment as the test writes or reads it (sequence numbers as plain u32).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seg {
    pub src_port: u16,
    pub dst_port: u16,
    pub flags: Flags,
    pub seq: u32,
    pub ack: u32,
    pub window: u16,
    pub payload: Vec<u8>,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_perm: bool,
    /// (TSval, TSecr)
    pub ts: Option<(u32, u32)>,
    pub sack: Vec<(u32, u32)>,
}

impl Seg {
    fn with(flags: Flags, seq: u32) -> Seg {
        Seg {
            flags,
            seq,
            window: 65_535,
            ..Seg::default()
        }
    }
    /// A bare SYN.
    pub fn syn(seq: u32) -> Seg {
        Seg::with(Flags::SYN, seq)
    }
    /// An ACK segment.
    pub fn ack(seq: u32, ack: u32) -> Seg {
        let mut s = Seg::with(Flags::ACK, seq);
        s.ack = ack;
        s
    }
    /// A RST (without ACK).
    pub fn rst(seq: u32) -> Seg {
        Seg::with(Flags::RST, seq)
    }
    /// Add FIN.
    pub fn fin(self) -> Seg {
        self.flags(Flags::FIN)
    }
    pub fn flags(mut self, f: Flags) -> Seg {
        self.flags |= f;
        self
    }
    pub fn with_ack(mut self, ack: u32) -> Seg {
        self.flags |= Flags::ACK;
        self.ack = ack;
        self
    }
    pub fn win(mut self, w: u16) -> Seg {
        self.window = w;
        self
    }
    pub fn data(mut self, d: &[u8]) -> Seg {
        self.payload = d.to_vec();
        self
    }
    pub fn mss(mut self, m: u16) -> Seg {
        self.mss = Some(m);
        self
    }
    pub fn wscale(mut self, s: u8) -> Seg {
        self.wscale = Some(s);
        self
    }
    pub fn sack_perm(mut self) -> Seg {
        self.sack_perm = true;
        self
    }
    pub fn ts(mut self, tsval: u32, tsecr: u32) -> Seg {
        self.ts = Some((tsval, tsecr));
        self
    }
    pub fn sack(mut self, blocks: &[(u32, u32)]) -> Seg {
        self.sack = blocks.to_vec();
        self
    }
    /// Whether every flag in `f` is set.
    pub fn has(&self, f: Flags) -> bool {
        self.flags.contains(f)
    }
    /// The sequence space it occupies (data, plus SYN and FIN).
    pub fn len(&self) -> u32 {
        self.payload.len() as u32
            + u32::from(self.has(Flags::SYN))
            + u32::from(self.has(Flags::FIN))
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One stack under test and its scripted peer.
pub struct SegTest {
    pub stack: Stack,
    pub now: Instant,
    /// The stack's port the peer talks to.
    pub port: u16,
    pub listener: Option<ListenerHandle>,
}

impl core::fmt::Debug for SegTest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SegTest")
            .field("now", &self.now)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl SegTest {
    /// A stack with default tunables (change them with `self.stack.set_sysctl` first).
    pub fn new(port: u16) -> SegTest {
        let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24));
        c.seed = Some(42);
        // A default route, as on a TUN link, so that peers off the subnet are reachable.
        c.gateway = Some(*PEER.ip());
        SegTest {
            stack: Stack::new(c),
            now: Instant::from_secs(1),
            port,
            listener: None,
        }
    }

    /// A stack listening on `port` with backlog 128.
    pub fn listening(port: u16) -> SegTest {
        let mut t = SegTest::new(port);
        t.listen(128);
        t
    }

    pub fn listen(&mut self, backlog: u32) {
        self.listener = Some(
            self.stack
                .tcp_listen(SocketAddrV4::new(LOCAL_IP, self.port), backlog)
                .unwrap(),
        );
    }

    /// Deliver `seg` from the peer to the stack (ports filled in if zero).
    pub fn send(&mut self, mut seg: Seg) {
        if seg.src_port == 0 {
            seg.src_port = PEER.port();
        }
        if seg.dst_port == 0 {
            seg.dst_port = self.port;
        }
        let packet = build(&seg, *PEER.ip(), LOCAL_IP);
        self.stack.receive(self.now, &packet);
    }

    /// The next segment the stack sends, if any.
    pub fn recv(&mut self) -> Option<Seg> {
        let frame = self.stack.poll_transmit(self.now)?;
        Some(parse(&frame).expect("the stack sends well-formed TCP/IPv4"))
    }

    /// Every segment the stack has to send now.
    pub fn recv_all(&mut self) -> Vec<Seg> {
        core::iter::from_fn(|| self.recv()).collect()
    }

    /// Move the clock on by `d`, running the stack's timers as they fall due; returns
    /// the segments sent meanwhile (with when they were sent).
    pub fn advance(&mut self, d: Duration) -> Vec<(Instant, Seg)> {
        let end = self.now + d;
        let mut out: Vec<(Instant, Seg)> =
            self.recv_all().into_iter().map(|s| (self.now, s)).collect();
        while let Some(t) = self.stack.poll_timeout().filter(|t| *t <= end) {
            self.now = self.now.max(t);
            self.stack.handle_timeout(self.now);
            out.extend(self.recv_all().into_iter().map(|s| (self.now, s)));
        }
        self.now = end;
        out
    }

    /// Complete a passive open from the peer's ISN `isn` (no options): returns our ISN.
    pub fn handshake(&mut self, isn: u32) -> u32 {
        self.send(Seg::syn(isn));
        let synack = self.recv().expect("SYN-ACK");
        assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
        self.send(Seg::ack(isn + 1, synack.seq.wrapping_add(1)));
        synack.seq
    }

    /// A passive open driven by `syn` (its options are the peer's), completed with an ACK
    /// of window `window` (echoing our timestamp if both sides use them) and accepted.
    /// Returns the accepted handle and our SYN-ACK. Needs a listener on `self.port`.
    pub fn accept_with(&mut self, syn: Seg, window: u16) -> (TcpHandle, Seg) {
        self.accept_after(syn, window, Duration::ZERO)
    }

    /// [`SegTest::accept_with`], the final ACK arriving `rtt` after the SYN-ACK left: the
    /// handshake gives the stack its first RTT sample (Linux `tcp_synack_rtt_meas`).
    pub fn accept_after(&mut self, syn: Seg, window: u16, rtt: Duration) -> (TcpHandle, Seg) {
        let isn = syn.seq;
        let tsval = syn.ts.map(|t| t.0);
        self.send(syn);
        let synack = self.recv().expect("SYN-ACK");
        assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
        self.now += rtt;
        let mut ack = Seg::ack(isn.wrapping_add(1), synack.seq.wrapping_add(1)).win(window);
        if let (Some(tsval), Some((ours, _))) = (tsval, synack.ts) {
            ack = ack.ts(tsval.wrapping_add(1), ours);
        }
        self.send(ack);
        let listener = self.listener.expect("a listener");
        let (h, peer) = self.stack.tcp_accept(listener).expect("accepted");
        assert_eq!(peer, PEER);
        (h, synack)
    }

    /// An active open from the stack to [`PEER`]: returns the handle and the SYN it sent.
    /// `self.port` becomes the stack's ephemeral port, so that [`SegTest::send`] reaches
    /// the connection.
    pub fn connect(&mut self) -> (TcpHandle, Seg) {
        let now = self.now;
        let h = self.stack.tcp_connect(now, PEER).expect("connect");
        let syn = self.recv().expect("our SYN");
        assert!(syn.has(Flags::SYN) && !syn.has(Flags::ACK), "{syn:?}");
        self.port = syn.src_port;
        (h, syn)
    }

    /// Segments early demux took straight to their connection
    /// ([`Stack::tcp_early_demux_hits`]).
    pub fn hits(&self) -> u64 {
        self.stack.tcp_early_demux_hits()
    }

    /// Drops counted with `reason`.
    pub fn drops(&self, reason: ustack_obs::DropReason) -> u64 {
        self.stack.mib().drops(reason)
    }

    /// Counter `c`.
    pub fn counter(&self, c: ustack_obs::Counter) -> u64 {
        self.stack.mib().get(c)
    }

    /// Queue `data` on `h` at the current time; returns how much was taken.
    pub fn write(&mut self, h: TcpHandle, data: &[u8]) -> usize {
        let now = self.now;
        self.stack.tcp_send(now, h, data).expect("tcp_send")
    }

    /// Everything readable on `h` now; `None` at end of stream (recv returned 0), an
    /// empty vector when there is nothing to read yet.
    pub fn read(&mut self, h: TcpHandle) -> Option<Vec<u8>> {
        let now = self.now;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.stack.tcp_recv(now, h, &mut buf) {
                Ok(0) if out.is_empty() => return None,
                Ok(0) => return Some(out),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(ustack_stack::Error::WouldBlock) => return Some(out),
                Err(e) => panic!("tcp_recv: {e:?}"),
            }
        }
    }

    /// The next segment the stack sends, running its timers for up to `limit` of virtual
    /// time until one comes out; with the time it was sent. `None` if none did (the clock
    /// is then at the end of `limit`).
    pub fn next_seg(&mut self, limit: Duration) -> Option<(Instant, Seg)> {
        if let Some(s) = self.recv() {
            return Some((self.now, s));
        }
        let end = self.now + limit;
        while let Some(t) = self.stack.poll_timeout().filter(|t| *t <= end) {
            self.now = self.now.max(t);
            self.stack.handle_timeout(self.now);
            if let Some(s) = self.recv() {
                return Some((self.now, s));
            }
            assert!(
                self.stack.poll_timeout().is_none_or(|n| n > self.now),
                "a timer at {t:?} is still due after running it"
            );
        }
        self.now = end;
        None
    }

    /// Run every timer the stack still has (TIME-WAIT records, stale timer-queue
    /// entries) for up to `limit` of virtual time; returns what was sent meanwhile.
    pub fn run_timers(&mut self, limit: Duration) -> Vec<(Instant, Seg)> {
        let end = self.now + limit;
        let mut out = Vec::new();
        while let Some(t) = self.stack.poll_timeout().filter(|t| *t <= end) {
            out.extend(self.advance(t.max(self.now) - self.now));
            assert!(
                self.stack.poll_timeout().is_none_or(|n| n > self.now),
                "a timer at {t:?} is still due after running it"
            );
        }
        out.extend(self.recv_all().into_iter().map(|s| (self.now, s)));
        out
    }

    /// The leak check: once every timer has run (up to 3 hours of virtual
    /// time), TCP holds no connection, request, TIME-WAIT record, buffer byte or timer.
    /// Handles the test still holds must have been closed.
    pub fn assert_released(&mut self) {
        self.run_timers(Duration::from_secs(3 * 3600));
        assert_eq!(
            self.stack.tcp_resources(),
            TcpResources::default(),
            "TCP still holds something after close and timeouts"
        );
    }
}

/// The TCP header fields of `seg` (its payload borrowed).
fn repr_of(seg: &Seg) -> tcp::Repr<'_> {
    let mut sack_ranges = [None; 4];
    for (slot, (a, b)) in sack_ranges.iter_mut().zip(&seg.sack) {
        *slot = Some((SeqNumber(*a), SeqNumber(*b)));
    }
    tcp::Repr {
        src_port: seg.src_port,
        dst_port: seg.dst_port,
        seq_number: SeqNumber(seg.seq),
        ack_number: SeqNumber(seg.ack),
        flags: seg.flags,
        window_len: seg.window,
        max_seg_size: seg.mss,
        window_scale: seg.wscale,
        sack_permitted: seg.sack_perm,
        sack_ranges,
        timestamp: seg.ts.map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
        payload: &seg.payload,
        ..tcp::Repr::default()
    }
}

/// An IPv4 packet carrying `seg` from `src` to `dst`, checksums right.
pub fn build(seg: &Seg, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let repr = repr_of(seg);
    let ip = ipv4::Repr::atomic(src, dst, IpProtocol::Tcp, repr.buffer_len());
    let mut out = vec![0u8; 20 + repr.buffer_len()];
    ip.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]), true);
    repr.emit(
        &mut tcp::Packet::new_unchecked(&mut out[20..]),
        &src.into(),
        &dst.into(),
        true,
    );
    out
}

/// An IPv6 packet carrying `seg` from `src` to `dst` (hop limit 64, flow label 0, no
/// extension headers), its checksum right.
pub fn build6(seg: &Seg, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let repr = repr_of(seg);
    let mut out = vec![0u8; ipv6::HEADER_LEN + repr.buffer_len()];
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut out[..]));
    repr.emit(
        &mut tcp::Packet::new_unchecked(&mut out[ipv6::HEADER_LEN..]),
        &src.into(),
        &dst.into(),
        true,
    );
    out
}

/// The [`Seg`] of a TCP header and payload (checksum verified against `src`, `dst`).
fn seg_of(segment: &[u8], src: IpAddr, dst: IpAddr) -> Option<Seg> {
    let p = tcp::Packet::new_checked(segment).ok()?;
    let r = tcp::Repr::parse(&p, &src, &dst, true).ok()?;
    Some(Seg {
        src_port: r.src_port,
        dst_port: r.dst_port,
        flags: r.flags,
        seq: r.seq_number.0,
        ack: r.ack_number.0,
        window: r.window_len,
        payload: r.payload.to_vec(),
        mss: r.max_seg_size,
        wscale: r.window_scale,
        sack_perm: r.sack_permitted,
        ts: r.timestamp.map(|t| (t.tsval, t.tsecr)),
        sack: r
            .sack_ranges
            .iter()
            .flatten()
            .map(|(a, b)| (a.0, b.0))
            .collect(),
    })
}

/// Parse an IPv4 packet carrying TCP into a [`Seg`] (checksums verified).
pub fn parse(packet: &[u8]) -> Option<Seg> {
    let ip = ipv4::Packet::new_checked(packet).ok()?;
    let ipr = ipv4::Repr::parse(&ip, true).ok()?;
    if ipr.next_header != IpProtocol::Tcp {
        return None;
    }
    seg_of(ip.payload(), ipr.src_addr.into(), ipr.dst_addr.into())
}

/// Parse an IPv6 packet whose Next Header is TCP into a [`Seg`] (checksum verified).
pub fn parse6(packet: &[u8]) -> Option<Seg> {
    let ip = ipv6::Packet::new_checked(packet).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let end = ipv6::HEADER_LEN + usize::from(ip.payload_len());
    let seg = packet.get(ipv6::HEADER_LEN..end)?;
    seg_of(seg, ip.src_addr().into(), ip.dst_addr().into())
}

/// A small deterministic generator (Knuth's MMIX LCG) for crafted sequence numbers,
/// windows and flags in hostile-peer tests: the same seed gives the same segments.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 32 bits (the state's high half).
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 32) as u32
    }
}

/// What [`ethernet6_exchange`] saw.
#[derive(Debug)]
pub struct Exchange6 {
    /// Every frame either stack sent, in order (A's and B's interleaved as they left).
    pub frames: Vec<Vec<u8>>,
    /// Segments early demux took on A and on B.
    pub hits: (u64, u64),
    /// A's and B's counters ([`all_counters`]).
    pub counters: (String, String),
    /// Segments A wrote from its header templates ([`Stack::tcp_header_template_hits`]).
    pub template_hits: u64,
}

/// Two dual-stack stacks on an Ethernet link ([`crate::A_IP6`], [`crate::B_IP6`], no
/// duplicate address detection), the frames carried by hand: neighbour discovery, A's
/// connection to B over IPv6, four 64-byte requests echoed, A's close; A's header
/// templates `template` and both stacks' early demux `early_demux` on or off.
pub fn ethernet6_exchange(template: bool, early_demux: bool) -> Exchange6 {
    use crate::{A_IP, A_IP6, A_MAC, B_IP, B_IP6, B_MAC};
    use core::net::{SocketAddr, SocketAddrV6};
    use ustack_stack::Ipv6Cidr;
    let config = |mac, ip, ip6, seed| {
        let mut c = Config::ethernet(mac, Ipv4Cidr::new(ip, 24)).with_ipv6(Ipv6Cidr::new(ip6, 64));
        c.seed = Some(seed);
        c.sysctl
            .set("net.ipv6.conf.default.accept_dad", 0)
            .expect("a sysctl");
        c
    };
    let mut a = Stack::new(config(A_MAC, A_IP, A_IP6, 1));
    let mut b = Stack::new(config(B_MAC, B_IP, B_IP6, 2));
    a.set_tcp_header_template(template);
    a.set_tcp_early_demux(early_demux);
    b.set_tcp_early_demux(early_demux);
    let mut now = Instant::from_secs(1);
    let mut frames = Vec::new();
    let mut shuttle = |a: &mut Stack, b: &mut Stack, now: Instant| {
        for _ in 0..16 {
            let mut moved = false;
            while let Some(f) = a.poll_transmit(now) {
                b.receive(now, &f);
                frames.push(f);
                moved = true;
            }
            while let Some(f) = b.poll_transmit(now) {
                a.receive(now, &f);
                frames.push(f);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    };
    let server = SocketAddr::V6(SocketAddrV6::new(B_IP6, 80, 0, 0));
    let l = b.tcp_listen(server, 4).expect("listen");
    let c = a.tcp_connect(now, server).expect("connect");
    shuttle(&mut a, &mut b, now);
    let (s, _) = b.tcp_accept_addr(l).expect("accepted");
    let mut buf = [0u8; 256];
    for round in 0..4u8 {
        now += Duration::from_millis(1);
        a.tcp_send(now, c, &[round; 64]).expect("send");
        shuttle(&mut a, &mut b, now);
        let n = b.tcp_recv(now, s, &mut buf).expect("recv");
        assert_eq!(&buf[..n], &[round; 64]);
        b.tcp_send(now, s, &buf[..n]).expect("send");
        shuttle(&mut a, &mut b, now);
        assert_eq!(a.tcp_recv(now, c, &mut buf).expect("recv"), 64);
    }
    now += Duration::from_millis(1);
    a.tcp_close(now, c).expect("close");
    shuttle(&mut a, &mut b, now);
    Exchange6 {
        frames,
        hits: (a.tcp_early_demux_hits(), b.tcp_early_demux_hits()),
        counters: (all_counters(a.mib()), all_counters(b.mib())),
        template_hits: a.tcp_header_template_hits(),
    }
}

/// Every counter of `mib` as `nstat` would show them (SNMP, SNMP6, netstat tables) and
/// every drop by reason, for tests comparing two runs' counters.
pub fn all_counters(mib: &ustack_obs::Mib) -> String {
    [
        mib.render_snmp(),
        mib.render_snmp6(),
        mib.render_netstat(),
        mib.render_drops(),
    ]
    .concat()
}

/// The frames of two runs, compared one by one (the first difference named: which frame,
/// at which byte), then their counts: for tests that run one exchange two ways (a fast
/// path on and off) and want the same bytes.
pub fn assert_same_frames(first: &[Vec<u8>], second: &[Vec<u8>]) {
    for (i, (a, b)) in first.iter().zip(second).enumerate() {
        if a != b {
            let at = a.iter().zip(b).position(|(x, y)| x != y);
            panic!(
                "frame {i} differs (first at byte {at:?}; lengths {} and {}):\n first  {a:02x?}\n second {b:02x?}",
                a.len(),
                b.len()
            );
        }
    }
    assert_eq!(first.len(), second.len(), "frame counts");
}

/// The segments a header-template comparison must cover were sent: `data` has the data
/// segment `payload` with timestamps, `pure_ack` an ACK of `ack` without data, `sack` an
/// ACK with two SACK blocks.
pub fn assert_template_covers(
    data: &[Seg],
    payload: &[u8],
    pure_ack: &[Seg],
    ack: u32,
    sack: &[Seg],
) {
    assert!(
        data.iter().any(|s| s.payload == payload && s.ts.is_some()),
        "a data segment: {data:?}"
    );
    assert!(
        pure_ack
            .iter()
            .any(|s| s.payload.is_empty() && s.ack == ack),
        "a pure ACK: {pure_ack:?}"
    );
    assert!(
        sack.iter().any(|s| s.sack.len() == 2),
        "an ACK with two SACK blocks: {sack:?}"
    );
}

/// The stack under test's IPv6 address in [`Family::V6`] fixtures (documentation prefix,
/// RFC 3849).
pub const LOCAL_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
/// The scripted peer's IPv6 address in [`Family::V6`] fixtures; its port is [`PEER`]'s.
pub const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// The address family a family-generic test runs over: each such test is one body taking
/// a `Family`, run once for IPv4 and once for IPv6 ([`crate::for_both_families`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// The peer [`PEER`] and the stack [`LOCAL_IP`], on an IPv4-only stack.
    V4,
    /// The peer [`PEER_IP6`] and the stack [`LOCAL_IP6`], on a dual-stack stack (also
    /// [`LOCAL_IP`]) whose listeners are on `::`.
    V6,
}

impl Family {
    /// The stack's configuration: seed 42, a default IPv4 route through [`PEER`] (as on a
    /// TUN link), and for IPv6 [`LOCAL_IP6`]/64 besides [`LOCAL_IP`]/24.
    pub fn config(self) -> Config {
        let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24));
        if self == Family::V6 {
            c = c.with_ipv6(ustack_stack::Ipv6Cidr::new(LOCAL_IP6, 64));
        }
        c.seed = Some(42);
        c.gateway = Some(*PEER.ip());
        c
    }

    /// A stack made from `config` listening on `port` (backlog 128): IPv4 on
    /// [`LOCAL_IP`], IPv6 on `[::]` (dual-stack).
    pub fn listening(self, config: Config, port: u16) -> SegTest {
        let mut t = SegTest {
            stack: Stack::new(config),
            now: Instant::from_secs(1),
            port,
            listener: None,
        };
        let any = match self {
            Family::V4 => core::net::SocketAddr::V4(SocketAddrV4::new(LOCAL_IP, port)),
            Family::V6 => core::net::SocketAddr::V6(core::net::SocketAddrV6::new(
                Ipv6Addr::UNSPECIFIED,
                port,
                0,
                0,
            )),
        };
        t.listener = Some(t.stack.tcp_listen(any, 128).unwrap());
        t
    }

    /// The stack's address.
    pub fn local(self) -> IpAddr {
        match self {
            Family::V4 => LOCAL_IP.into(),
            Family::V6 => LOCAL_IP6.into(),
        }
    }

    /// The peer's address.
    pub fn peer(self) -> IpAddr {
        match self {
            Family::V4 => (*PEER.ip()).into(),
            Family::V6 => PEER_IP6.into(),
        }
    }

    /// The length of the IP header [`Family::build`] writes (no options or extension
    /// headers).
    pub fn header_len(self) -> usize {
        match self {
            Family::V4 => ipv4::HEADER_LEN,
            Family::V6 => ipv6::HEADER_LEN,
        }
    }

    /// The packet of the peer's `seg` to the stack ([`build`] or [`build6`]).
    pub fn build(self, seg: &Seg) -> Vec<u8> {
        match self {
            Family::V4 => build(seg, *PEER.ip(), LOCAL_IP),
            Family::V6 => build6(seg, PEER_IP6, LOCAL_IP6),
        }
    }

    /// The segment of a packet of this family ([`parse`] or [`parse6`]).
    pub fn parse(self, packet: &[u8]) -> Option<Seg> {
        match self {
            Family::V4 => parse(packet),
            Family::V6 => parse6(packet),
        }
    }

    /// A passive open on `t` (which listens on `syn`'s destination port) driven by the
    /// peer's `syn` (its ports and options): the stack's SYN-ACK, the peer's ACK with
    /// window `window` (echoing the stack's timestamp, TSval one past the SYN's, if both
    /// use them), the accept. Returns the handle and the stack's SYN-ACK.
    pub fn accept(self, t: &mut SegTest, syn: &Seg, window: u16) -> (TcpHandle, Seg) {
        t.stack.receive(t.now, &self.build(syn));
        let synack = self
            .parse(&t.stack.poll_transmit(t.now).expect("SYN-ACK"))
            .expect("TCP");
        assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
        let mut ack = Seg::ack(syn.seq.wrapping_add(1), synack.seq.wrapping_add(1)).win(window);
        (ack.src_port, ack.dst_port) = (syn.src_port, syn.dst_port);
        if let (Some((tsval, _)), Some((ours, _))) = (syn.ts, synack.ts) {
            ack = ack.ts(tsval.wrapping_add(1), ours);
        }
        t.stack.receive(t.now, &self.build(&ack));
        let listener = t.listener.expect("a listener");
        let (h, peer) = t.stack.tcp_accept_addr(listener).expect("accepted");
        assert_eq!(peer, core::net::SocketAddr::new(self.peer(), syn.src_port));
        (h, synack)
    }
}

/// One `#[test]` per family for each family-generic test body: `for_both_families!(a, b)`
/// makes `ipv4::a`, `ipv6::a`, `ipv4::b`, `ipv6::b`, each calling the body `a(Family)` or
/// `b(Family)` of the enclosing module with [`Family::V4`] or [`Family::V6`].
#[macro_export]
macro_rules! for_both_families {
    ($($name:ident),* $(,)?) => {
        mod ipv4 {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::tcp::Family::V4)
                }
            )*
        }
        mod ipv6 {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::tcp::Family::V6)
                }
            )*
        }
    };
}
