//! Test helpers for ustack: two stacks joined by a [`SimLink`] on a virtual clock.
//!
//! [`Pair`] moves frames between the stacks and the link and advances the clock to the
//! next thing that will happen (a frame arriving, a stack timer), so a test that spans
//! minutes of protocol time runs in milliseconds and repeats exactly for a given seed.
//! A pair can record everything on the wire, as each side saw it, to pcap files.
//!
//! [`netns`]: network namespaces and TUN rigs for tests whose peer is the Linux kernel;
//! [`cc`]: C test programs compiled with the usual flags;
//! [`tshark`]: captures of those runs checked by tshark; [`peak_rss_kb`]: the test
//! process's peak resident set, for tests that bound a server's memory.

pub mod cc;
pub mod netns;
pub mod tcp;
pub mod tshark;

use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::io::Write;

use ustack_dev::Device;
use ustack_dev::capture::Capture;
use ustack_dev::sim::{Side, SimConfig, SimLink, SimLinkConfig};
use ustack_obs::pcap::{LinkType, PcapWriter};
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Ipv6Cidr, Stack};

/// The peak resident set (`VmHWM` of `/proc/self/status`) of this process, in kB.
pub fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("our status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// Address of side A: 192.0.2.1/24 (TEST-NET-1), MAC 02:00:00:00:00:01.
pub const A_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// Address of side B: 192.0.2.2/24, MAC 02:00:00:00:00:02.
pub const B_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// IPv6 address of side A in a [`Pair::dual_stack`]: 2001:db8::1/64 (RFC 3849).
pub const A_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// IPv6 address of side B in a [`Pair::dual_stack`]: 2001:db8::2/64.
pub const B_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
pub const A_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
pub const B_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// An Ethernet frame from `src_mac` to `dst_mac` carrying an IPv6 packet `src` -> `dst`
/// with next header `nh` and `payload` (hop limit 64), for tests that inject IPv6.
pub fn ipv6_frame(
    (src_mac, dst_mac): (EthernetAddress, EthernetAddress),
    src: Ipv6Addr,
    dst: Ipv6Addr,
    nh: u8,
    payload: &[u8],
) -> Vec<u8> {
    use ustack_wire::{IpProtocol, ethernet, ipv6};
    let mut f = vec![0u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN + payload.len()];
    ethernet::Repr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: ethernet::EtherType::Ipv6,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    ipv6::Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::from(nh),
        payload_len: payload.len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(
        &mut f[ethernet::HEADER_LEN..],
    ));
    f[ethernet::HEADER_LEN + ipv6::HEADER_LEN..].copy_from_slice(payload);
    f
}

/// Largest frame the harness moves (a 64 KiB IP packet plus an Ethernet header).
const FRAME_MAX: usize = 65_536 + 14;

/// Two stacks on one simulated link, and the virtual clock.
pub struct Pair {
    pub a: Stack,
    pub b: Stack,
    pub link: SimLink,
    pub now: Instant,
    buf: Vec<u8>,
    /// Frames as side A sent and received them, if recording.
    capture: Option<PcapWriter<Box<dyn Write>>>,
}

impl core::fmt::Debug for Pair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pair")
            .field("now", &self.now)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Two Ethernet stacks (A = 192.0.2.1, B = 192.0.2.2, both /24) over `link`.
    pub fn new(link: SimLinkConfig) -> Pair {
        let mut a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24));
        let mut b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24));
        a.mtu = link.mtu;
        b.mtu = link.mtu;
        a.seed = Some(link.seed ^ 0xa);
        b.seed = Some(link.seed ^ 0xb);
        Pair::with_configs(link, a, b)
    }

    /// [`Pair::new`]'s stacks with [`A_IP6`] and [`B_IP6`] as well, run past duplicate
    /// address detection (1.1 s of virtual time: one solicitation and RFC 4862's one
    /// second), so both addresses are usable.
    pub fn dual_stack(link: SimLinkConfig) -> Pair {
        let mut a =
            Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A_IP6, 64));
        let mut b =
            Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_IP6, 64));
        a.mtu = link.mtu;
        b.mtu = link.mtu;
        a.seed = Some(link.seed ^ 0xa);
        b.seed = Some(link.seed ^ 0xb);
        let mut p = Pair::with_configs(link, a, b);
        p.run_for(Duration::from_millis(1100));
        p
    }

    /// Two stacks with the given configurations over `link`.
    pub fn with_configs(link: SimLinkConfig, a: Config, b: Config) -> Pair {
        Pair {
            a: Stack::new(a),
            b: Stack::new(b),
            link: SimLink::new(link),
            now: Instant::ZERO,
            buf: vec![0; FRAME_MAX],
            capture: None,
        }
    }

    /// Record every frame side A sends or receives (what a capture on A's interface
    /// shows) as pcap to `out`, through the device crate's `Capture` wrapper.
    pub fn record(&mut self, out: Box<dyn Write>) -> std::io::Result<()> {
        self.capture = Some(PcapWriter::new(out, LinkType::Ethernet, 65_535)?);
        Ok(())
    }

    /// Finish recording: flushes and returns the pcap writer's output.
    pub fn finish_recording(&mut self) -> Option<Box<dyn Write>> {
        let mut w = self.capture.take()?;
        w.flush().ok()?;
        Some(w.into_inner())
    }

    /// The stack on `side`.
    pub fn stack(&mut self, side: Side) -> &mut Stack {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Do everything due at `now`, without moving the clock: run due timers, drain both
    /// stacks' transmit queues into the link and deliver the frames that have arrived,
    /// until nothing moves. Returns the number of frames delivered.
    pub fn settle(&mut self) -> usize {
        let mut delivered = 0;
        loop {
            let mut moved = 0;
            for side in [Side::A, Side::B] {
                let Pair {
                    a,
                    b,
                    link,
                    buf,
                    capture,
                    now,
                } = self;
                let stack = if side == Side::A { a } else { b };
                let port = link.port(side);
                match if side == Side::A {
                    capture.take()
                } else {
                    None
                } {
                    // Side A is seen through a `Capture`, as tcpdump on its interface would.
                    Some(writer) => {
                        let mut dev = Capture::with_writer(port, writer);
                        let (m, d) = pump(stack, &mut dev, *now, buf);
                        assert_eq!(dev.write_errors(), 0, "pcap write failed");
                        *capture = Some(dev.into_parts().1);
                        (moved, delivered) = (moved + m, delivered + d);
                    }
                    None => {
                        let mut dev = port;
                        let (m, d) = pump(stack, &mut dev, *now, buf);
                        (moved, delivered) = (moved + m, delivered + d);
                    }
                }
            }
            if moved == 0 {
                return delivered;
            }
        }
    }

    /// When something next happens after the settled present: a frame arrives or a
    /// stack timer fires. Panics if a stack asks for a timer in the past that running its
    /// timers did not clear: that is a stack bug that would otherwise hang the test.
    pub fn next_event(&self) -> Option<Instant> {
        let next = [
            self.link.next_event(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(t) = next {
            assert!(
                t > self.now,
                "an event at {t:?} is still due after settling at {:?}",
                self.now
            );
        }
        next
    }

    /// Run until `deadline` on the virtual clock, jumping from event to event.
    pub fn run_until(&mut self, deadline: Instant) {
        loop {
            self.settle();
            match self.next_event() {
                Some(t) if t <= deadline => self.now = t,
                _ => {
                    self.now = self.now.max(deadline);
                    self.settle();
                    return;
                }
            }
        }
    }

    /// Run for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.run_until(self.now + d);
    }

    /// Run until `done` holds (checked after every settled instant) or `limit` of virtual
    /// time passes. Returns whether `done` held.
    pub fn run_until_cond(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> bool {
        let deadline = self.now + limit;
        loop {
            self.settle();
            if done(self) {
                return true;
            }
            match self.next_event() {
                Some(t) if t <= deadline => self.now = t,
                _ => return false,
            }
        }
    }
}

/// One stack and its device at `now`: run due timers, send what the stack has queued,
/// hand it what has arrived. Returns (frames moved either way, frames delivered).
fn pump(stack: &mut Stack, dev: &mut impl Device, now: Instant, buf: &mut [u8]) -> (usize, usize) {
    let mut moved = 0;
    let mut delivered = 0;
    if stack.poll_timeout().is_some_and(|t| t <= now) {
        stack.handle_timeout(now);
    }
    while let Some(frame) = stack.poll_transmit(now) {
        dev.send(now, &frame);
        stack.recycle(frame);
        moved += 1;
    }
    while let Some(n) = dev.recv(now, buf) {
        stack.receive(now, &buf[..n]);
        delivered += 1;
        moved += 1;
    }
    (moved, delivered)
}

/// A link direction with the given loss, reordering and corruption probabilities, 50 µs of
/// delay and 300 µs of reordering hold (the sim UDP tests' faults).
pub fn faulty(loss: f64, reorder: f64, corrupt: f64) -> SimConfig {
    SimConfig {
        loss,
        reorder,
        corrupt,
        delay: Duration::from_micros(50),
        reorder_delay: Duration::from_micros(300),
        ..SimConfig::default()
    }
}

/// A stack on Ethernet with `ip`/24 and `ip6`/64 (duplicate address detection off, so the
/// IPv6 address is usable at once), TCP and UDP checksums skipped at both ends as over a
/// shm link (`Config::checksum_offload`), its secrets from `seed`.
pub fn offload_stack(mac: EthernetAddress, ip: Ipv4Addr, ip6: Ipv6Addr, seed: u64) -> Stack {
    let mut c = Config::ethernet(mac, Ipv4Cidr::new(ip, 24)).with_ipv6(Ipv6Cidr::new(ip6, 64));
    c.sysctl.ip6_dad_transmits = 0;
    c.seed = Some(seed);
    c.checksum_offload = true;
    Stack::new(c)
}

/// A streams `data` to B's listener at `to`, frames carried by hand on a clock that steps
/// 100 us from 1 s: each step A writes what it can, `carry(a, b, now)` takes A's frames to
/// B, B accepts and reads all it can, and B's frames go back to A; until B has read as
/// many bytes as `data` holds, or 10,000 steps. What B read.
pub fn stream_by_hand(
    a: &mut Stack,
    b: &mut Stack,
    data: &[u8],
    to: core::net::SocketAddr,
    mut carry: impl FnMut(&mut Stack, &mut Stack, Instant),
) -> Vec<u8> {
    let l = b.tcp_listen(to, 4).expect("listen");
    let mut now = Instant::from_secs(1);
    let c = a.tcp_connect(now, to).expect("connect");
    let (mut sent, mut got, mut server) = (0, Vec::new(), None);
    let mut buf = vec![0u8; 65536];
    for _ in 0..10_000 {
        now += Duration::from_micros(100);
        if sent < data.len()
            && let Ok(n) = a.tcp_send(now, c, &data[sent..])
        {
            sent += n;
        }
        carry(a, b, now);
        if server.is_none() {
            server = b.tcp_accept_addr(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = server {
            while let Ok(n @ 1..) = b.tcp_recv(now, s, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        while let Some(f) = b.poll_transmit(now) {
            a.receive(now, &f);
        }
        if got.len() == data.len() {
            break;
        }
    }
    got
}

/// `n` bytes of a pattern that differs per `salt` and is not periodic in any small power
/// of two (xorshift64): test data whose every byte matters.
pub fn pattern(n: usize, salt: u64) -> Vec<u8> {
    let mut x = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The value of counter `name` in `name value` lines (`/proc/net/snmp6`, `ustack stat
/// --snmp6`); panics, showing the text, when it is not there.
pub fn snmp6(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(name)).then(|| it.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}
