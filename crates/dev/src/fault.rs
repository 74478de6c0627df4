//! `fault`: seeded link faults, for the `sim` link and as a relay around a real device.
//!
//! The kernel on the test machines has no netem, so loss, duplication, reordering,
//! corruption, delay, jitter and rate limits come from here. One direction of a faulty wire
//! is a [`FaultLine`]: frames go in with [`FaultLine::send`] and come out, when their time
//! has come, with [`FaultLine::recv`] (or [`FaultLine::pop_due`]). Two lines make the
//! [`sim`](crate::sim) link; two lines around a real device make [`Faulty`], the fault
//! relay for `tun` (and later `packet`) links.
//!
//! What happens to a frame sent into a line (the order follows Linux's netem,
//! `net/sched/sch_netem.c`: loss, duplication, corruption, then rate and delay):
//! 1. **MTU**: a frame longer than the line's limit (the link's MTU plus the link-layer
//!    header, or the narrower [`FaultConfig::mtu`]) is refused ([`FaultStats::too_big`],
//!    `send` returns false).
//! 2. **Loss** with probability [`FaultConfig::loss`] ([`FaultStats::lost`]; `send` still
//!    returns true: the frame left the device and vanished on the wire).
//! 3. **Duplication** with probability [`FaultConfig::duplicate`]: a second copy follows the
//!    first ([`FaultStats::duplicated`]). Each copy then goes through the steps below on
//!    its own.
//! 4. **Rate and queue**: with [`FaultConfig::rate_bps`], a frame of `n` bytes occupies the
//!    link for `n * 8 / rate` seconds and frames queue behind each other; a frame that
//!    would take the queue past [`FaultConfig::queue_limit_bytes`] is tail-dropped
//!    ([`FaultStats::queue_dropped`]), like Linux's `bfifo` (`net/sched/sch_fifo.c`).
//! 5. **Corruption** with probability [`FaultConfig::corrupt`]: one random bit of the frame
//!    is flipped ([`FaultStats::corrupted`]).
//! 6. **Delay**: the frame arrives [`FaultConfig::delay`] plus a uniform
//!    `0..=`[`FaultConfig::jitter`] after it was serialised; with probability
//!    [`FaultConfig::reorder`] it is held [`FaultConfig::reorder_delay`] longer, so later
//!    frames overtake it ([`FaultStats::reordered`]). A copy that cannot be delivered at
//!    once is counted in [`FaultStats::delayed`].
//!
//! Arrivals are kept in a min-heap ordered by (arrival time, send sequence), so frames
//! arriving at the same instant keep the order they were sent in. A *clean* line (no
//! fault that draws, no delay, no rate limit: `FaultConfig::default()`, the sim link's
//! usual case) delivers a frame the moment it is sent; such frames go on a FIFO beside the
//! heap instead, with the same (arrival time, sequence) keys, and the receiver takes
//! whichever of the two heads comes first: the same order, without the heap's sifting
//! or the per-frame fault arithmetic.
//!
//! **Buffers.** [`FaultLine::send`] copies the frame into a buffer of the line's pool
//! (at most 64 spares), and [`FaultLine::recv`] copies it out and keeps the buffer. The
//! swapping calls copy nothing on a clean line: [`FaultLine::send_swap`] takes the
//! sender's buffer itself and leaves a spare from the pool in its place, and
//! [`FaultLine::recv_swap`] hands that buffer to the receiver and keeps the receiver's
//! old one as the next spare, as a NIC's rings hand buffers between driver and device.
//! Ownership moves with each buffer, so a frame the receiver holds is never a spare the
//! sender writes into. A line with faults copies in `send_swap` (a duplicate needs a copy
//! of its own), with the same draws as `send`.
//!
//! **Determinism.** All randomness comes from a ChaCha8 generator per line. Every frame
//! that passes the MTU check draws the same number of random values whatever the
//! configuration, so for one seed the loss pattern does not change when, say, jitter is
//! turned on. Same seed and same calls (same frames at the same `now`s) give the same
//! deliveries, byte for byte. A line never reads a clock: every call takes `now`.
//!
//! # The relay
//!
//! [`Faulty`] wraps any [`Device`] and puts one line on each path: frames the stack sends
//! go through the *egress* line before the device gets them, frames the device receives
//! go through the *ingress* line before the stack sees them. Wrapped around the ustack side
//! of a TUN queue, it subjects the traffic in both directions between ustack and the Linux
//! kernel to the faults, in real time: delayed frames are held in memory and released when
//! their time comes, on the caller's clock (`now` of `recv`/`send`), and
//! [`Device::poll_at`] reports the next release, so a runtime's idle sleep ends for it
//! (the runtime's `Sleep` for `Faulty` sleeps no later than that).
//!
//! ```
//! use core::time::Duration;
//! use ustack_dev::fault::{FaultConfig, Faulty};
//! use ustack_dev::sim::{Side, SimLink, SimLinkConfig};
//! use ustack_dev::Device;
//! use ustack_obs::time::Instant;
//!
//! // A perfect sim link, and a relay on side A that delays what A sends by 5 ms.
//! let mut link = SimLink::new(SimLinkConfig::default());
//! let slow = FaultConfig { delay: Duration::from_millis(5), ..FaultConfig::default() };
//! let mut a = Faulty::new(link.port(Side::A), 1, slow, FaultConfig::default());
//! assert!(a.send(Instant::ZERO, &[0u8; 60]));
//! assert_eq!(a.egress().delayed, 1); // held by the relay
//! assert_eq!(a.poll_at(), Some(Instant::from_millis(5)));
//! a.recv(Instant::from_millis(5), &mut [0u8; 1514]); // any call at or after 5 ms releases it
//! assert_eq!(a.egress().delivered, 1);
//! drop(a);
//! assert_eq!(link.stats(Side::A).sent, 1); // now on the link
//! ```

use core::cmp::Ordering;
use core::time::Duration;
use std::collections::{BinaryHeap, VecDeque};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use ustack_obs::time::Instant;

use crate::{Device, DeviceCaps};

/// Conditions of one direction of a faulty wire. `FaultConfig::default()` is a perfect
/// wire: no faults, no delay, no rate limit.
///
/// Probabilities are in `0.0..=1.0`; values outside are clamped and NaN counts as 0.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
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
    /// link-layer header excluded. `None`: the link's. Frames over the smaller of the two
    /// (plus the link-layer header) are dropped as too big.
    pub mtu: Option<usize>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
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

/// Counters of one direction of a faulty wire. They always balance:
/// `sent + duplicated == delivered + lost + too_big + queue_dropped + in_flight`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames handed to `send` (including those refused as too big).
    pub sent: u64,
    /// Frame copies taken by the receiver.
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
    /// Frame copies that could not be delivered at once when sent (delay, jitter, a
    /// reordering hold, or the rate limiter's queue).
    pub delayed: u64,
}

/// What a faulty wire did to a frame, reported to an observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultEvent {
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
    /// One copy delivered (the whole frame, even if the receiver's buffer cut it).
    Delivered,
}

/// Random draws per frame: loss, duplicate, then per copy (2 copies at most) corrupt,
/// corrupted bit, reorder, jitter. Always all of them, so one fault's decisions do not
/// depend on which other faults are configured.
const DRAWS: usize = 2 + 2 * 4;

/// Spare frame buffers kept per line for reuse.
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

/// Two independent 32-byte seeds from one `u64`: one master generator seeds both
/// directions, so each direction's random stream depends only on the seed and on that
/// direction's own traffic.
pub fn split_seed(seed: u64) -> ([u8; 32], [u8; 32]) {
    let mut master = ChaCha8Rng::seed_from_u64(seed);
    let mut first = [0u8; 32];
    let mut second = [0u8; 32];
    master.fill_bytes(&mut first);
    master.fill_bytes(&mut second);
    (first, second)
}

/// One direction of a faulty wire on the caller's clock. See the [module docs](self).
#[derive(Debug)]
pub struct FaultLine {
    config: FaultConfig,
    rng: ChaCha8Rng,
    wire: BinaryHeap<InFlight>,
    /// Frames a clean line delivered at once (arrival time = send time), in (arrival time,
    /// sequence) order: the heap's fast lane (see the module docs).
    at_once: VecDeque<InFlight>,
    /// The configuration puts frames on the wire untouched and undelayed
    /// ([`FaultLine::is_clean`]), computed when it is set.
    clean: bool,
    /// When the rate limiter finishes serialising everything queued so far.
    busy_until: Instant,
    /// Sub-nanosecond remainder of serialisation times (in units of 1/rate ns), so that
    /// rounding does not accumulate over many frames.
    carry: u128,
    next_seq: u64,
    stats: FaultStats,
    pool: Vec<Vec<u8>>,
    /// Frames whose draws were skipped because no fault that draws was configured (a
    /// clean line's hot path): the generator moves past their draws before its next use,
    /// so every later draw is the one it would have been.
    skipped_frames: u64,
}

impl FaultLine {
    /// An empty line with `config`, its randomness from `seed`.
    pub fn new(config: FaultConfig, seed: [u8; 32]) -> Self {
        let config = normalise(config);
        FaultLine {
            clean: is_clean(&config),
            config,
            rng: ChaCha8Rng::from_seed(seed),
            wire: BinaryHeap::new(),
            at_once: VecDeque::new(),
            busy_until: Instant::ZERO,
            carry: 0,
            next_seq: 0,
            stats: FaultStats::default(),
            pool: Vec::new(),
            skipped_frames: 0,
        }
    }

    /// The conditions (probabilities as clamped).
    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Change the conditions from now on (frames already on the wire keep their arrival
    /// times).
    pub fn set_config(&mut self, config: FaultConfig) {
        self.config = normalise(config);
        self.clean = is_clean(&self.config);
    }

    /// The counters.
    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// When the next frame copy arrives (`None`: nothing on the wire).
    #[inline]
    pub fn next_arrival(&self) -> Option<Instant> {
        // An empty line (most calls): one test.
        if self.stats.in_flight == 0 {
            return None;
        }
        match (self.wire.peek(), self.at_once.front()) {
            (Some(a), Some(b)) => Some(a.arrive_at.min(b.arrive_at)),
            (a, b) => a.or(b).map(|f| f.arrive_at),
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

    /// Put `frame` on the wire at `now`. `caps` are the link's: a frame longer than its
    /// MTU (or the narrower [`FaultConfig::mtu`]) plus the link-layer header is refused.
    /// Returns false if the line refused the frame (too big, or tail-dropped by a full
    /// queue); a frame lost on the wire counts as sent (true). `observe` hears every
    /// [`FaultEvent`] but `Delivered`.
    pub fn send(
        &mut self,
        now: Instant,
        frame: &[u8],
        caps: DeviceCaps,
        observe: impl FnMut(FaultEvent, &[u8]),
    ) -> bool {
        self.send_by(now, &mut &*frame, caps, observe, |frame, mut buf| {
            buf.clear();
            buf.extend_from_slice(frame);
            buf
        })
    }

    /// [`send`](Self::send) of an owned buffer, which a clean line keeps instead of
    /// copying (the receiver gets this very buffer, see [`recv_swap`](Self::recv_swap)),
    /// leaving a spare one from its pool in `frame` (empty, without capacity, if the pool
    /// has none). A line with faults copies the frame as `send` does (a duplicate needs a
    /// copy of its own), and `frame` stays as it was.
    pub fn send_swap(
        &mut self,
        now: Instant,
        frame: &mut Vec<u8>,
        caps: DeviceCaps,
        observe: impl FnMut(FaultEvent, &[u8]),
    ) -> bool {
        self.send_by(now, frame, caps, observe, core::mem::replace)
    }

    /// `send` and `send_swap`: on a clean line, `put` turns a spare from the pool (or an
    /// empty buffer) into the buffer that goes on the wire, from `frame`. Inline in
    /// both (a sim link's every frame; the faults are out of line).
    #[inline(always)]
    fn send_by<F: AsRef<[u8]> + ?Sized>(
        &mut self,
        now: Instant,
        frame: &mut F,
        caps: DeviceCaps,
        mut observe: impl FnMut(FaultEvent, &[u8]),
        put: impl FnOnce(&mut F, Vec<u8>) -> Vec<u8>,
    ) -> bool {
        if !self.admit(frame.as_ref(), caps, &mut observe) {
            return false;
        }
        if self.takes_at_once(now) {
            let spare = self.pool.pop().unwrap_or_default();
            let buf = put(frame, spare);
            self.push_at_once(now, buf);
            return true;
        }
        self.send_faulty(now, frame.as_ref(), observe)
    }

    /// Count a frame sent and check it against the MTU: false (counted, observed) if it is
    /// too big.
    #[inline]
    fn admit(
        &mut self,
        frame: &[u8],
        caps: DeviceCaps,
        observe: &mut impl FnMut(FaultEvent, &[u8]),
    ) -> bool {
        self.stats.sent += 1;
        // Above the link's MTU or the line's own (tested in that order: a line without
        // one pays one test).
        let ip_len = frame.len().saturating_sub(caps.medium.header_len());
        if ip_len > caps.mtu || self.config.mtu.is_some_and(|m| ip_len > m) {
            self.stats.too_big += 1;
            observe(FaultEvent::TooBig, frame);
            return false;
        }
        true
    }

    /// Whether a frame sent at `now` arrives as it is sent: the line is clean, and the
    /// caller's clock did not go back (the FIFO stays in arrival order).
    #[inline]
    fn takes_at_once(&self, now: Instant) -> bool {
        self.clean && self.at_once.back().is_none_or(|f| f.arrive_at <= now)
    }

    /// Put a clean line's frame on the FIFO, arriving at `now`.
    #[inline]
    fn push_at_once(&mut self, now: Instant, frame: Vec<u8>) {
        self.skipped_frames += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.in_flight += 1;
        self.at_once.push_back(InFlight {
            arrive_at: now,
            seq,
            frame,
        });
    }

    /// [`send`](Self::send) past the MTU check on a line with faults (or a clean line
    /// whose caller's clock went back): the draws, then each copy through the faults.
    fn send_faulty(
        &mut self,
        now: Instant,
        frame: &[u8],
        mut observe: impl FnMut(FaultEvent, &[u8]),
    ) -> bool {
        let mut draws = [0u64; DRAWS];
        if draws_nothing(&self.config) {
            // Every decision below is "no" whatever the draws: skip them (a ChaCha block
            // costs more than the rest of the frame's way over a clean line).
            self.skipped_frames += 1;
        } else {
            if self.skipped_frames > 0 {
                // Two 32-bit words a draw.
                let skip = u128::from(self.skipped_frames) * DRAWS as u128 * 2;
                let at = self.rng.get_word_pos() + skip;
                self.rng.set_word_pos(at);
                self.skipped_frames = 0;
            }
            for d in &mut draws {
                *d = self.rng.next_u64();
            }
        }
        if chance(draws[0], self.config.loss) {
            self.stats.lost += 1;
            observe(FaultEvent::Lost, frame);
            return true;
        }
        let copies = if chance(draws[1], self.config.duplicate) {
            self.stats.duplicated += 1;
            observe(FaultEvent::Duplicated, frame);
            2
        } else {
            1
        };

        let mut accepted = true;
        for copy in 0..copies {
            let [r_corrupt, r_bit, r_reorder, r_jitter] =
                [0, 1, 2, 3].map(|i| draws[2 + 4 * copy + i]);

            // Rate limiter and its queue.
            let departs = match self.config.rate_bps {
                Some(rate) => {
                    if let Some(limit) = self.config.queue_limit_bytes
                        && self.backlog_bytes(now, rate) + frame.len() as u128 > limit as u128
                    {
                        self.stats.queue_dropped += 1;
                        observe(FaultEvent::QueueDropped, frame);
                        if copy == 0 {
                            accepted = false;
                        }
                        continue;
                    }
                    self.serialise(now, frame.len(), rate)
                }
                None => now,
            };

            let mut buf = self.pool.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(frame);

            if chance(r_corrupt, self.config.corrupt) && !buf.is_empty() {
                let bit = below(r_bit, buf.len() as u64 * 8);
                buf[(bit / 8) as usize] ^= 1 << (bit % 8);
                self.stats.corrupted += 1;
                observe(FaultEvent::Corrupted, &buf);
            }

            let jitter_ns = u64::try_from(self.config.jitter.as_nanos()).unwrap_or(u64::MAX);
            let jitter = Duration::from_nanos(below(r_jitter, jitter_ns.saturating_add(1)));
            let mut arrive_at = departs + self.config.delay + jitter;
            if chance(r_reorder, self.config.reorder) {
                arrive_at += self.config.reorder_delay;
                self.stats.reordered += 1;
                observe(FaultEvent::Reordered, &buf);
            }
            if arrive_at > now {
                self.stats.delayed += 1;
            }

            let seq = self.next_seq;
            self.next_seq += 1;
            self.stats.in_flight += 1;
            self.wire.push(InFlight {
                arrive_at,
                seq,
                frame: buf,
            });
        }
        accepted
    }

    /// The next frame copy that has arrived by `now`, taken off the wire (counted as
    /// delivered). Give the buffer back with [`recycle`](Self::recycle) when done.
    #[inline]
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        // The earlier head of the FIFO and the heap (`InFlight`'s order is reversed).
        let fifo = match (self.at_once.front(), self.wire.peek()) {
            (Some(a), Some(w)) => a > w,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let head = if fifo {
            self.at_once.front()
        } else {
            self.wire.peek()
        };
        if head?.arrive_at > now {
            return None;
        }
        let InFlight { frame, .. } = if fifo {
            self.at_once.pop_front()?
        } else {
            self.wire.pop()?
        };
        self.stats.in_flight -= 1;
        self.stats.delivered += 1;
        Some(frame)
    }

    /// Keep a frame buffer for the next frames (at most 64 are kept; a buffer without
    /// capacity is not worth keeping).
    #[inline]
    pub fn recycle(&mut self, frame: Vec<u8>) {
        if self.pool.len() < POOL_MAX && frame.capacity() > 0 {
            self.pool.push(frame);
        }
    }

    /// Spare frame buffers the line keeps for its next frames (at most 64).
    pub fn spare_buffers(&self) -> usize {
        self.pool.len()
    }

    /// Receive the next frame that has arrived by `now`: copies it into `buf` (cut to
    /// `buf.len()` if longer, counted in [`FaultStats::truncated`]) and returns the
    /// number of bytes copied. `observe` hears [`FaultEvent::Delivered`] with the whole
    /// frame.
    #[inline]
    pub fn recv(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        observe: impl FnOnce(FaultEvent, &[u8]),
    ) -> Option<usize> {
        // Nothing on the line (most polls of a busy loop): one test at the call, not a call.
        if self.stats.in_flight == 0 {
            return None;
        }
        self.recv_due(now, buf, observe)
    }

    /// [`recv`](Self::recv) by handing over the frame's buffer: on `Some(n)` `buf` holds
    /// the whole frame (`buf.len() == n`, never truncated) and the line keeps the buffer
    /// `buf` held before as a spare for later frames (a sender's
    /// [`send_swap`](Self::send_swap) takes it). `observe` hears
    /// [`FaultEvent::Delivered`] with the frame.
    #[inline]
    pub fn recv_swap(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        observe: impl FnOnce(FaultEvent, &[u8]),
    ) -> Option<usize> {
        // Nothing on the line (most polls of a busy loop): one test at the call, not a call.
        if self.stats.in_flight == 0 {
            return None;
        }
        self.recv_swap_due(now, buf, observe)
    }

    /// [`recv_swap`](Self::recv_swap) once a frame is on the line (due or not).
    #[inline(never)]
    fn recv_swap_due(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        observe: impl FnOnce(FaultEvent, &[u8]),
    ) -> Option<usize> {
        let frame = if self.wire.is_empty() {
            // A clean line's frame (nothing on the heap): the FIFO's head, without
            // comparing it with the heap's.
            if self.at_once.front()?.arrive_at > now {
                return None;
            }
            let InFlight { frame, .. } = self.at_once.pop_front()?;
            self.stats.in_flight -= 1;
            self.stats.delivered += 1;
            frame
        } else {
            self.pop_due(now)?
        };
        let n = frame.len();
        self.stats.bytes_delivered += n as u64;
        observe(FaultEvent::Delivered, &frame);
        let old = core::mem::replace(buf, frame);
        self.recycle(old);
        Some(n)
    }

    /// [`recv`](Self::recv) once a frame is on the line (due or not).
    #[inline(never)]
    fn recv_due(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        observe: impl FnOnce(FaultEvent, &[u8]),
    ) -> Option<usize> {
        let frame = self.pop_due(now)?;
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        self.stats.bytes_delivered += n as u64;
        if n < frame.len() {
            self.stats.truncated += 1;
        }
        observe(FaultEvent::Delivered, &frame);
        self.recycle(frame);
        Some(n)
    }
}

/// Whether `c` leaves every frame untouched and undelayed: no fault that draws (loss,
/// duplication, corruption, reordering, jitter), no delay, no rate limit. (A narrower MTU
/// still applies: it is checked before.)
fn is_clean(c: &FaultConfig) -> bool {
    draws_nothing(c) && c.delay.is_zero() && c.rate_bps.is_none()
}

/// Whether no fault in `c` uses a frame's draws (loss, duplication, corruption, reordering
/// and jitter all off).
fn draws_nothing(c: &FaultConfig) -> bool {
    c.loss <= 0.0
        && c.duplicate <= 0.0
        && c.corrupt <= 0.0
        && c.reorder <= 0.0
        && c.jitter.is_zero()
}

fn clamp_probability(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

fn normalise(mut c: FaultConfig) -> FaultConfig {
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

/// What the relay's egress line carries for a device: its frames up to the MTU, and, on a
/// device that cuts super-segments itself (a TUN queue with offloads,
/// [`DeviceCaps::gso_max_size`]), the super-segments TCP builds for it (TSO inside TCP):
/// the line stands for the wire between the stack and that device, which carries them
/// whole, as Linux's netem on a device with GSO queues a GSO packet whole. Only a frame
/// above both is refused, counted in the line's [`FaultStats::too_big`].
fn egress_caps(caps: DeviceCaps) -> DeviceCaps {
    DeviceCaps {
        mtu: caps.mtu.max(caps.gso_max_size),
        ..caps
    }
}

/// [`egress_caps`] for the ingress line: the super-segments a device hands over whole
/// ([`DeviceCaps::gro_max_size`]: a TUN queue with offloads receives up to 64 KiB).
fn ingress_caps(caps: DeviceCaps) -> DeviceCaps {
    DeviceCaps {
        mtu: caps.mtu.max(caps.gro_max_size),
        ..caps
    }
}

/// Frames [`Faulty::recv`] takes from the wrapped device in one call while none is due:
/// bounds the work of one call when every frame is being delayed.
const PULL_MAX: usize = 64;

/// The fault relay: a [`Device`] that wraps another and passes its traffic through a
/// [`FaultLine`] each way. See the [module docs](self#the-relay).
///
/// - **Egress** (stack -> device): [`send`](Device::send) puts the frame on the egress
///   line; frames due are handed to the device at once (in one batch, with the
///   `xmit_more` hint, when the caller sends a batch), delayed ones by a later call of
///   `send` or `recv` at or after their time. A frame the device then refuses is counted
///   in [`FaultyStats::device_refused`].
/// - **Ingress** (device -> stack): [`recv`](Device::recv) returns a frame due on the
///   ingress line; while there is none, it takes frames from the device (up to 64 a call)
///   and puts them on the line.
///
/// `poll_at` is the earliest of the device's own and the next release on either line.
#[derive(Debug)]
pub struct Faulty<D: Device> {
    device: D,
    egress: FaultLine,
    ingress: FaultLine,
    scratch: Vec<u8>,
    stats: FaultyStats,
}

/// The relay's own counters (each line has its [`FaultStats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultyStats {
    /// Frames released from the egress line that the device refused (its own counters say
    /// why).
    pub device_refused: u64,
}

impl<D: Device> Faulty<D> {
    /// Wrap `device`: frames it sends go through `egress`, frames it receives through
    /// `ingress`; both lines' randomness comes from `seed`.
    pub fn new(device: D, seed: u64, egress: FaultConfig, ingress: FaultConfig) -> Self {
        let (seed_out, seed_in) = split_seed(seed);
        let max = device.caps().max_rx_frame_len();
        Faulty {
            device,
            egress: FaultLine::new(egress, seed_out),
            ingress: FaultLine::new(ingress, seed_in),
            scratch: vec![0; max],
            stats: FaultyStats::default(),
        }
    }

    /// The same conditions both ways.
    pub fn symmetric(device: D, seed: u64, config: FaultConfig) -> Self {
        Faulty::new(device, seed, config.clone(), config)
    }

    /// Counters of the egress line (frames the stack sent towards the device).
    pub fn egress(&self) -> &FaultStats {
        self.egress.stats()
    }

    /// Counters of the ingress line (frames the device received, towards the stack).
    pub fn ingress(&self) -> &FaultStats {
        self.ingress.stats()
    }

    /// The relay's own counters.
    pub fn stats(&self) -> &FaultyStats {
        &self.stats
    }

    /// Change the conditions of the egress line from now on.
    pub fn set_egress(&mut self, config: FaultConfig) {
        self.egress.set_config(config);
    }

    /// Change the conditions of the ingress line from now on.
    pub fn set_ingress(&mut self, config: FaultConfig) {
        self.ingress.set_config(config);
    }

    /// The wrapped device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The wrapped device, mutably (frames moved through it directly bypass the faults).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Unwrap the device; frames still held on either line are dropped.
    pub fn into_inner(self) -> D {
        self.device
    }

    /// Hand every egress frame due at `now` to the device, as one batch.
    fn release(&mut self, now: Instant) {
        let mut next = self.egress.pop_due(now);
        while let Some(frame) = next {
            next = self.egress.pop_due(now);
            if !self.device.send_more(now, &frame, next.is_some()) {
                self.stats.device_refused += 1;
            }
            self.egress.recycle(frame);
        }
    }
}

impl<D: Device> Device for Faulty<D> {
    fn caps(&self) -> DeviceCaps {
        self.device.caps()
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.release(now);
        let caps = ingress_caps(self.device.caps());
        for _ in 0..PULL_MAX {
            if let Some(n) = self.ingress.recv(now, buf, |_, _| {}) {
                return Some(n);
            }
            let n = self.device.recv(now, &mut self.scratch)?;
            self.ingress.send(now, &self.scratch[..n], caps, |_, _| {});
        }
        self.ingress.recv(now, buf, |_, _| {})
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    /// Puts the frame on the egress line; with `more == false`, releases every frame due
    /// to the device as one batch (so the device's own batching is kept: it sees the hint
    /// on all but the last).
    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        let caps = egress_caps(self.device.caps());
        let accepted = self.egress.send(now, frame, caps, |_, _| {});
        if !more {
            self.release(now);
        }
        accepted
    }

    fn poll_at(&self) -> Option<Instant> {
        [
            self.device.poll_at(),
            self.ingress.next_arrival(),
            self.egress.next_arrival(),
        ]
        .into_iter()
        .flatten()
        .min()
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

    /// The frames a line with `seed` loses at a rate of one half, after `clean` frames
    /// sent with `first` (a config whose faults never fire).
    fn lost_after(first: FaultConfig, clean: u32) -> Vec<u32> {
        let mut line = FaultLine::new(first, [7; 32]);
        let caps = DeviceCaps {
            medium: crate::Medium::Ip,
            mtu: 1500,
            gro_max_size: 0,
            gso_max_size: 0,
        };
        for _ in 0..clean {
            assert!(line.send(Instant::ZERO, &[0; 60], caps, |_, _| {}));
        }
        line.set_config(FaultConfig {
            loss: 0.5,
            ..FaultConfig::default()
        });
        let mut lost = Vec::new();
        for i in 0..200 {
            line.send(Instant::ZERO, &[0; 60], caps, |ev, _| {
                if matches!(ev, FaultEvent::Lost) {
                    lost.push(i);
                }
            });
        }
        lost
    }

    /// A clean line skips its random draws, and the generator moves past them when a
    /// fault is configured: the losses after 1,000 clean frames are those of a line that
    /// drew for every one of them (its loss probability too small ever to fire).
    #[test]
    fn a_clean_line_skips_its_draws_without_changing_later_ones() {
        let drawing = FaultConfig {
            loss: f64::MIN_POSITIVE,
            ..FaultConfig::default()
        };
        let want = lost_after(drawing, 1000);
        assert!((60..140).contains(&want.len()), "{want:?}");
        assert_eq!(lost_after(FaultConfig::default(), 1000), want);
        assert_ne!(lost_after(FaultConfig::default(), 999), want);
    }

    #[test]
    fn serialisation_carry_is_exact() {
        let mut d = FaultLine::new(FaultConfig::default(), [0; 32]);
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
