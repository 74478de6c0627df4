//! `sim`: a simulated link between two ports, on a virtual clock, with seeded faults.
//!
//! A [`SimLink`] joins port [`Side::A`] and port [`Side::B`]. Each direction has its own
//! [`SimConfig`], so one direction can be lossy while the other is clean. The link never
//! reads the wall clock: every call takes `now` from the caller's (virtual) clock, and
//! [`SimLink::next_event`] / [`Device::poll_at`] say when to jump the clock to next.
//!
//! What happens to a frame sent from one side (the order follows Linux's netem,
//! `net/sched/sch_netem.c`: loss, duplication, corruption, then rate and delay):
//! 1. **MTU**: a frame longer than the MTU plus the link-layer header is refused
//!    ([`SimStats::too_big`], `send` returns false).
//! 2. **Loss** with probability [`SimConfig::loss`] ([`SimStats::lost`]; `send` still
//!    returns true: the frame left the device and vanished on the wire).
//! 3. **Duplication** with probability [`SimConfig::duplicate`]: a second copy follows the
//!    first ([`SimStats::duplicated`]). Each copy then goes through the steps below on its own.
//! 4. **Rate and queue**: with [`SimConfig::rate_bps`], a frame of `n` bytes occupies the
//!    link for `n * 8 / rate` seconds and frames queue behind each other; a frame that
//!    would take the queue past [`SimConfig::queue_limit_bytes`] is tail-dropped
//!    ([`SimStats::queue_dropped`]), like Linux's `bfifo` (`net/sched/sch_fifo.c`).
//! 5. **Corruption** with probability [`SimConfig::corrupt`]: one random bit of the frame
//!    is flipped ([`SimStats::corrupted`]).
//! 6. **Delay**: the frame arrives [`SimConfig::delay`] plus a uniform
//!    `0..=`[`SimConfig::jitter`] after it was serialised; with probability
//!    [`SimConfig::reorder`] it is held [`SimConfig::reorder_delay`] longer, so later
//!    frames overtake it ([`SimStats::reordered`]).
//!
//! Arrivals are kept in a min-heap ordered by (arrival time, send sequence), so frames
//! arriving at the same instant keep the order they were sent in.
//!
//! **Determinism.** All randomness comes from a ChaCha8 generator per direction, both
//! derived from [`SimLinkConfig::seed`]. Every frame that passes the MTU check draws the
//! same number of random values whatever the configuration, so for one seed the loss
//! pattern does not change when, say, jitter is turned on. Same seed and same calls (same
//! frames at the same `now`s) give the same deliveries, byte for byte.
//!
//! ```
//! use core::time::Duration;
//! use ustack_dev::{Device, Medium};
//! use ustack_dev::sim::{Side, SimConfig, SimLink, SimLinkConfig};
//! use ustack_obs::time::Instant;
//!
//! // A->B: 5 ms away and 1% lossy; B->A: perfect.
//! let slow = SimConfig { delay: Duration::from_millis(5), loss: 0.01, ..SimConfig::default() };
//! let mut link = SimLink::new(SimLinkConfig {
//!     seed: 1,
//!     a_to_b: slow,
//!     b_to_a: SimConfig::default(),
//!     medium: Medium::Ip,
//!     mtu: 1500,
//! });
//! let mut buf = [0u8; 1500];
//! assert!(link.port(Side::A).send(Instant::ZERO, b"hello"));
//! assert_eq!(link.port(Side::B).recv(Instant::ZERO, &mut buf), None); // still on the wire
//! let at = link.next_event().expect("seed 1 does not lose the first frame");
//! assert_eq!(at, Instant::from_millis(5));
//! assert_eq!(link.port(Side::B).recv(at, &mut buf), Some(5));
//! assert_eq!(&buf[..5], b"hello");
//! assert_eq!(link.stats(Side::A).delivered, 1);
//! ```

use core::cmp::Ordering;
use core::fmt;
use core::time::Duration;
use std::collections::BinaryHeap;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use ustack_obs::time::Instant;

use crate::{Device, DeviceCaps, Medium};

/// One end of a [`SimLink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// Port A: sends in the `a_to_b` direction, receives from `b_to_a`.
    A,
    /// Port B: sends in the `b_to_a` direction, receives from `a_to_b`.
    B,
}

impl Side {
    /// The other end of the link.
    pub const fn peer(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// Conditions of one direction of a [`SimLink`]. `SimConfig::default()` is a perfect link:
/// no faults, no delay, no rate limit.
///
/// Probabilities are in `0.0..=1.0`; values outside are clamped and NaN counts as 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Probability that a frame is lost on the wire.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame is held back by [`reorder_delay`](Self::reorder_delay), so
    /// that frames sent after it overtake it.
    pub reorder: f64,
    /// Probability that one random bit of a frame is flipped.
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniformly distributed extra delay, `0..=jitter`, drawn per frame. Jitter alone can
    /// reorder frames (as in netem without a rate).
    pub jitter: Duration,
    /// Extra hold for a frame picked for reordering.
    pub reorder_delay: Duration,
    /// Serialisation rate in bits per second: a frame of `n` bytes occupies the link for
    /// `n * 8 / rate` seconds and frames queue behind each other. `None` (or `Some(0)`):
    /// infinitely fast.
    pub rate_bps: Option<u64>,
    /// Byte limit of the queue in front of the rate limiter: a frame that would take the
    /// backlog (bytes not yet serialised, including the rest of the frame on the wire)
    /// past this limit is tail-dropped. Only meaningful with [`rate_bps`](Self::rate_bps).
    /// `None`: unlimited.
    pub queue_limit_bytes: Option<usize>,
    /// A narrower IP MTU for this direction only (a path MTU smaller than the devices'),
    /// link-layer header excluded. `None`: the link's [`SimLinkConfig::mtu`]. Frames over
    /// the smaller of the two (plus the link-layer header) are dropped as too big.
    pub mtu: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            reorder_delay: Duration::ZERO,
            rate_bps: None,
            queue_limit_bytes: None,
            mtu: None,
        }
    }
}

/// Configuration of a whole [`SimLink`].
#[derive(Debug, Clone, PartialEq)]
pub struct SimLinkConfig {
    /// Seed of the link's random number generators.
    pub seed: u64,
    /// Conditions for frames sent by [`Side::A`].
    pub a_to_b: SimConfig,
    /// Conditions for frames sent by [`Side::B`].
    pub b_to_a: SimConfig,
    /// What both ports carry.
    pub medium: Medium,
    /// IP MTU of both ports, link-layer header excluded (reported by [`Device::caps`]).
    pub mtu: usize,
}

impl Default for SimLinkConfig {
    /// A perfect Ethernet link with a 1500-byte MTU and seed 0.
    fn default() -> Self {
        SimLinkConfig {
            seed: 0,
            a_to_b: SimConfig::default(),
            b_to_a: SimConfig::default(),
            medium: Medium::Ethernet,
            mtu: 1500,
        }
    }
}

/// Counters of one direction of a [`SimLink`]. They always balance:
/// `sent + duplicated == delivered + lost + too_big + queue_dropped + in_flight`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Frames handed to `send` (including those refused as too big).
    pub sent: u64,
    /// Frame copies taken by the receiver with `recv`.
    pub delivered: u64,
    /// Frames lost on the wire.
    pub lost: u64,
    /// Frames duplicated (each adds one extra copy).
    pub duplicated: u64,
    /// Frame copies held back for reordering.
    pub reordered: u64,
    /// Frame copies with one bit flipped.
    pub corrupted: u64,
    /// Frames refused for exceeding the MTU.
    pub too_big: u64,
    /// Frame copies tail-dropped by the rate limiter's queue.
    pub queue_dropped: u64,
    /// Delivered frames that were longer than the receiver's buffer (cut to fit).
    pub truncated: u64,
    /// Frame copies on the wire now: sent, not yet delivered.
    pub in_flight: u64,
    /// Bytes copied to receivers.
    pub bytes_delivered: u64,
}

/// What a [`SimLink`] did to a frame, reported to its observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimEvent {
    /// Lost on the wire (the frame as sent).
    Lost,
    /// Duplicated (the frame as sent; its copies are reported separately).
    Duplicated,
    /// One copy held back for reordering (the copy, possibly corrupted).
    Reordered,
    /// One bit of a copy flipped (the copy after the flip).
    Corrupted,
    /// Refused for exceeding the MTU (the frame as sent).
    TooBig,
    /// One copy tail-dropped by the rate limiter's queue (the frame as sent).
    QueueDropped,
    /// One copy delivered by `recv` (the whole frame, even if the receiver's buffer cut it).
    Delivered,
}

/// An observer of a [`SimLink`]: called with what happened, the side that sent the frame,
/// and the frame's bytes.
pub type SimObserver = Box<dyn FnMut(SimEvent, Side, &[u8])>;

/// Random draws per frame: loss, duplicate, then per copy (2 copies at most) corrupt,
/// corrupted bit, reorder, jitter. Always all of them, so one fault's decisions do not
/// depend on which other faults are configured.
const DRAWS: usize = 2 + 2 * 4;

/// Spare frame buffers kept per direction for reuse.
const POOL_MAX: usize = 64;

/// One frame copy on the wire.
#[derive(Debug)]
struct InFlight {
    arrive_at: Instant,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.arrive_at, other.seq).cmp(&(self.arrive_at, self.seq))
    }
}

/// One direction of the link.
#[derive(Debug)]
struct Direction {
    config: SimConfig,
    rng: ChaCha8Rng,
    wire: BinaryHeap<InFlight>,
    /// When the rate limiter finishes serialising everything queued so far.
    busy_until: Instant,
    /// Sub-nanosecond remainder of serialisation times (in units of 1/rate ns), so that
    /// rounding does not accumulate over many frames.
    carry: u128,
    next_seq: u64,
    stats: SimStats,
    pool: Vec<Vec<u8>>,
}

impl Direction {
    fn new(config: SimConfig, rng: ChaCha8Rng) -> Self {
        Direction {
            config: normalise(config),
            rng,
            wire: BinaryHeap::new(),
            busy_until: Instant::ZERO,
            carry: 0,
            next_seq: 0,
            stats: SimStats::default(),
            pool: Vec::new(),
        }
    }

    /// Bytes waiting for or under serialisation at `now`.
    fn backlog_bytes(&self, now: Instant, rate: u64) -> u128 {
        let remaining_ns = (self.busy_until - now).as_nanos();
        (remaining_ns * u128::from(rate)).div_ceil(8 * 1_000_000_000)
    }

    /// Reserve the rate limiter for `len` bytes starting at `now`; returns when the last
    /// bit is on the wire.
    fn serialise(&mut self, now: Instant, len: usize, rate: u64) -> Instant {
        let start = self.busy_until.max(now);
        let bit_ns = (len as u128) * 8 * 1_000_000_000 + self.carry;
        let rate = u128::from(rate);
        let tx_ns = bit_ns / rate;
        self.carry = bit_ns % rate;
        let done = start + Duration::from_nanos(u64::try_from(tx_ns).unwrap_or(u64::MAX));
        self.busy_until = done;
        done
    }
}

fn clamp_probability(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

fn normalise(mut c: SimConfig) -> SimConfig {
    c.loss = clamp_probability(c.loss);
    c.duplicate = clamp_probability(c.duplicate);
    c.reorder = clamp_probability(c.reorder);
    c.corrupt = clamp_probability(c.corrupt);
    if c.rate_bps == Some(0) {
        c.rate_bps = None;
    }
    c
}

/// True with probability `p`, from one uniform 64-bit draw (53 bits used: p = 1.0 is always
/// true, p = 0.0 never).
fn chance(draw: u64, p: f64) -> bool {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    ((draw >> 11) as f64) * SCALE < p
}

/// A uniform value in `0..n` from one 64-bit draw (Lemire's multiply-shift; `n = 0` gives 0).
fn below(draw: u64, n: u64) -> u64 {
    ((u128::from(draw) * u128::from(n)) >> 64) as u64
}

/// A simulated link between two ports on a virtual clock. See the [module docs](self).
pub struct SimLink {
    medium: Medium,
    mtu: usize,
    a_to_b: Direction,
    b_to_a: Direction,
    observer: Option<SimObserver>,
}

impl fmt::Debug for SimLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimLink")
            .field("medium", &self.medium)
            .field("mtu", &self.mtu)
            .field("a_to_b", &self.a_to_b)
            .field("b_to_a", &self.b_to_a)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl SimLink {
    /// A link with the given conditions. Nothing is in flight.
    pub fn new(config: SimLinkConfig) -> SimLink {
        // One master generator seeds the two directions, so each direction's random
        // stream depends only on the seed and on that direction's own traffic.
        let mut master = ChaCha8Rng::seed_from_u64(config.seed);
        let mut seed_ab = [0u8; 32];
        let mut seed_ba = [0u8; 32];
        master.fill_bytes(&mut seed_ab);
        master.fill_bytes(&mut seed_ba);
        SimLink {
            medium: config.medium,
            mtu: config.mtu,
            a_to_b: Direction::new(config.a_to_b, ChaCha8Rng::from_seed(seed_ab)),
            b_to_a: Direction::new(config.b_to_a, ChaCha8Rng::from_seed(seed_ba)),
            observer: None,
        }
    }

    fn dir(&self, from: Side) -> &Direction {
        match from {
            Side::A => &self.a_to_b,
            Side::B => &self.b_to_a,
        }
    }

    fn dir_mut(&mut self, from: Side) -> &mut Direction {
        match from {
            Side::A => &mut self.a_to_b,
            Side::B => &mut self.b_to_a,
        }
    }

    /// What both ports carry (the same for both sides).
    pub fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            medium: self.medium,
            mtu: self.mtu,
        }
    }

    /// The conditions of frames sent by `from` (probabilities as clamped).
    pub fn config(&self, from: Side) -> &SimConfig {
        &self.dir(from).config
    }

    /// Change the conditions of frames sent by `from` from now on (frames already on the
    /// wire keep their arrival times). E.g. `loss: 1.0` for a partition, then heal it.
    pub fn set_config(&mut self, from: Side, config: SimConfig) {
        self.dir_mut(from).config = normalise(config);
    }

    /// Install an observer called for every [`SimEvent`] (replacing any previous one).
    pub fn set_observer(&mut self, observer: SimObserver) {
        self.observer = Some(observer);
    }

    /// Remove the observer, returning it.
    pub fn take_observer(&mut self) -> Option<SimObserver> {
        self.observer.take()
    }

    /// The counters of frames sent by `from`.
    pub fn stats(&self, from: Side) -> &SimStats {
        &self.dir(from).stats
    }

    /// A [`Device`] view of one port.
    pub fn port(&mut self, side: Side) -> SimPort<'_> {
        SimPort { link: self, side }
    }

    /// Send `frame` from port `from` at `now`. Returns false if the link refused it (too
    /// big for the MTU, or tail-dropped by a full queue); a frame lost on the wire counts
    /// as sent (true). See the [module docs](self) for what happens to it.
    pub fn send(&mut self, now: Instant, from: Side, frame: &[u8]) -> bool {
        let link_mtu = self.mtu;
        let l2 = self.medium.header_len();
        let observer = &mut self.observer;
        let dir = match from {
            Side::A => &mut self.a_to_b,
            Side::B => &mut self.b_to_a,
        };
        let mut observe = |event: SimEvent, bytes: &[u8]| {
            if let Some(obs) = observer.as_mut() {
                obs(event, from, bytes);
            }
        };

        dir.stats.sent += 1;
        let mtu = dir.config.mtu.map_or(link_mtu, |m| m.min(link_mtu));
        if frame.len() > mtu.saturating_add(l2) {
            dir.stats.too_big += 1;
            observe(SimEvent::TooBig, frame);
            return false;
        }

        let mut draws = [0u64; DRAWS];
        for d in &mut draws {
            *d = dir.rng.next_u64();
        }
        let cfg = &dir.config;
        if chance(draws[0], cfg.loss) {
            dir.stats.lost += 1;
            observe(SimEvent::Lost, frame);
            return true;
        }
        let copies = if chance(draws[1], cfg.duplicate) {
            dir.stats.duplicated += 1;
            observe(SimEvent::Duplicated, frame);
            2
        } else {
            1
        };

        let mut accepted = true;
        for copy in 0..copies {
            let [r_corrupt, r_bit, r_reorder, r_jitter] =
                [0, 1, 2, 3].map(|i| draws[2 + 4 * copy + i]);

            // Rate limiter and its queue.
            let departs = match dir.config.rate_bps {
                Some(rate) => {
                    if let Some(limit) = dir.config.queue_limit_bytes
                        && dir.backlog_bytes(now, rate) + frame.len() as u128 > limit as u128
                    {
                        dir.stats.queue_dropped += 1;
                        observe(SimEvent::QueueDropped, frame);
                        if copy == 0 {
                            accepted = false;
                        }
                        continue;
                    }
                    dir.serialise(now, frame.len(), rate)
                }
                None => now,
            };

            let mut buf = dir.pool.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(frame);

            if chance(r_corrupt, dir.config.corrupt) && !buf.is_empty() {
                let bit = below(r_bit, buf.len() as u64 * 8);
                buf[(bit / 8) as usize] ^= 1 << (bit % 8);
                dir.stats.corrupted += 1;
                observe(SimEvent::Corrupted, &buf);
            }

            let jitter_ns = u64::try_from(dir.config.jitter.as_nanos()).unwrap_or(u64::MAX);
            let jitter = Duration::from_nanos(below(r_jitter, jitter_ns.saturating_add(1)));
            let mut arrive_at = departs + dir.config.delay + jitter;
            if chance(r_reorder, dir.config.reorder) {
                arrive_at += dir.config.reorder_delay;
                dir.stats.reordered += 1;
                observe(SimEvent::Reordered, &buf);
            }

            let seq = dir.next_seq;
            dir.next_seq += 1;
            dir.stats.in_flight += 1;
            dir.wire.push(InFlight {
                arrive_at,
                seq,
                frame: buf,
            });
        }
        accepted
    }

    /// Receive at port `to` the next frame that has arrived by `now`: copies it into `buf`
    /// (cut to `buf.len()` if longer, counted in [`SimStats::truncated`]) and returns the
    /// number of bytes copied.
    pub fn recv(&mut self, now: Instant, to: Side, buf: &mut [u8]) -> Option<usize> {
        let from = to.peer();
        let observer = &mut self.observer;
        let dir = match from {
            Side::A => &mut self.a_to_b,
            Side::B => &mut self.b_to_a,
        };
        if dir.wire.peek()?.arrive_at > now {
            return None;
        }
        let InFlight { frame, .. } = dir.wire.pop()?;
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        dir.stats.in_flight -= 1;
        dir.stats.delivered += 1;
        dir.stats.bytes_delivered += n as u64;
        if n < frame.len() {
            dir.stats.truncated += 1;
        }
        if let Some(obs) = observer.as_mut() {
            obs(SimEvent::Delivered, from, &frame);
        }
        if dir.pool.len() < POOL_MAX {
            dir.pool.push(frame);
        }
        Some(n)
    }

    /// When the next frame arrives at port `to` (`None`: nothing on the way to it).
    pub fn poll_at(&self, to: Side) -> Option<Instant> {
        self.dir(to.peer()).wire.peek().map(|f| f.arrive_at)
    }

    /// The earliest arrival at either port (`None`: the link is empty). A virtual clock can
    /// jump straight to it.
    pub fn next_event(&self) -> Option<Instant> {
        match (self.poll_at(Side::A), self.poll_at(Side::B)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One port of a [`SimLink`] as a [`Device`]: borrow it with [`SimLink::port`].
#[derive(Debug)]
pub struct SimPort<'a> {
    link: &'a mut SimLink,
    side: Side,
}

impl SimPort<'_> {
    /// Which end of the link this port is.
    pub fn side(&self) -> Side {
        self.side
    }
}

impl Device for SimPort<'_> {
    fn caps(&self) -> DeviceCaps {
        self.link.caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.link.recv(now, self.side, buf)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.link.send(now, self.side, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.link.poll_at(self.side)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chance_edges() {
        assert!(chance(u64::MAX, 1.0));
        assert!(!chance(0, 0.0));
        assert!(chance(0, 1e-9));
        assert!(!chance(u64::MAX, 0.999_999));
    }

    #[test]
    fn below_range() {
        assert_eq!(below(u64::MAX, 10), 9);
        assert_eq!(below(0, 10), 0);
        assert_eq!(below(u64::MAX, 0), 0);
        assert_eq!(below(1 << 63, 10), 5);
    }

    #[test]
    fn heap_pops_earliest_then_fifo() {
        let mut h = BinaryHeap::new();
        for (t, seq) in [(5, 0), (3, 1), (5, 2), (3, 3)] {
            h.push(InFlight {
                arrive_at: Instant::from_nanos(t),
                seq,
                frame: Vec::new(),
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|f| f.seq)).collect();
        assert_eq!(order, [1, 3, 0, 2]);
    }

    #[test]
    fn serialisation_carry_is_exact() {
        let mut d = Direction::new(SimConfig::default(), ChaCha8Rng::seed_from_u64(0));
        // 3 bytes at 7 bps: 24/7 s each; 7 frames take exactly 24 s.
        let mut done = Instant::ZERO;
        for _ in 0..7 {
            done = d.serialise(Instant::ZERO, 3, 7);
        }
        assert_eq!(done, Instant::from_secs(24));
        assert_eq!(d.backlog_bytes(Instant::ZERO, 7), 21);
        assert_eq!(d.backlog_bytes(Instant::from_secs(24), 7), 0);
    }
}
