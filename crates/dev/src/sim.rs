//! `sim`: a simulated link between two ports, on a virtual clock, with seeded faults.
//!
//! A [`SimLink`] joins port [`Side::A`] and port [`Side::B`]. Each direction has its own
//! [`SimConfig`], so one direction can be lossy while the other is clean. The link never
//! reads the wall clock: every call takes `now` from the caller's (virtual) clock, and
//! [`SimLink::next_event`] / [`Device::poll_at`] say when to jump the clock to next.
//!
//! Each direction is a [`FaultLine`]: what happens to a frame (MTU,
//! loss, duplication, rate and queue, corruption, delay, jitter, reordering, in netem's
//! order) and how the randomness stays reproducible are described in [`crate::fault`],
//! which the fault relay for real links ([`Faulty`](crate::fault::Faulty)) shares. The
//! two directions' generators are both derived from [`SimLinkConfig::seed`]: same seed and
//! same calls (same frames at the same `now`s) give the same deliveries, byte for byte.
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

use core::cell::RefCell;
use core::fmt;
use std::rc::Rc;

use ustack_obs::time::Instant;

use crate::fault::{FaultLine, split_seed};
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

/// Conditions of one direction of a [`SimLink`] (the fault relay's too):
/// `SimConfig::default()` is a perfect link. See [`FaultConfig`](crate::fault::FaultConfig).
pub use crate::fault::FaultConfig as SimConfig;
/// What a [`SimLink`] did to a frame, reported to its observer. See [`FaultEvent`](crate::fault::FaultEvent).
pub use crate::fault::FaultEvent as SimEvent;
/// Counters of one direction of a [`SimLink`]. See [`FaultStats`](crate::fault::FaultStats).
pub use crate::fault::FaultStats as SimStats;

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

/// An observer of a [`SimLink`]: called with what happened, the side that sent the frame,
/// and the frame's bytes.
pub type SimObserver = Box<dyn FnMut(SimEvent, Side, &[u8])>;

/// A simulated link between two ports on a virtual clock. See the [module docs](self).
pub struct SimLink {
    medium: Medium,
    mtu: usize,
    a_to_b: FaultLine,
    b_to_a: FaultLine,
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
        let (seed_ab, seed_ba) = split_seed(config.seed);
        SimLink {
            medium: config.medium,
            mtu: config.mtu,
            a_to_b: FaultLine::new(config.a_to_b, seed_ab),
            b_to_a: FaultLine::new(config.b_to_a, seed_ba),
            observer: None,
        }
    }

    fn dir(&self, from: Side) -> &FaultLine {
        match from {
            Side::A => &self.a_to_b,
            Side::B => &self.b_to_a,
        }
    }

    /// The line of frames sent by `from`, and the observer's call for its events.
    #[inline]
    fn line(&mut self, from: Side) -> (&mut FaultLine, impl FnMut(SimEvent, &[u8]) + '_) {
        let line = match from {
            Side::A => &mut self.a_to_b,
            Side::B => &mut self.b_to_a,
        };
        let observer = &mut self.observer;
        (line, move |event, bytes: &[u8]| {
            if let Some(obs) = observer.as_mut() {
                obs(event, from, bytes);
            }
        })
    }

    fn dir_mut(&mut self, from: Side) -> &mut FaultLine {
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
            gro_max_size: 0,
            gso_max_size: 0,
        }
    }

    /// The conditions of frames sent by `from` (probabilities as clamped).
    pub fn config(&self, from: Side) -> &SimConfig {
        self.dir(from).config()
    }

    /// Change the conditions of frames sent by `from` from now on (frames already on the
    /// wire keep their arrival times). E.g. `loss: 1.0` for a partition, then heal it.
    pub fn set_config(&mut self, from: Side, config: SimConfig) {
        self.dir_mut(from).set_config(config);
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
        self.dir(from).stats()
    }

    /// A [`Device`] view of one port, borrowing the link.
    pub fn port(&mut self, side: Side) -> SimPort<&mut SimLink> {
        SimPort { link: self, side }
    }

    /// Send `frame` from port `from` at `now`. Returns false if the link refused it (too
    /// big for the MTU, or tail-dropped by a full queue); a frame lost on the wire counts
    /// as sent (true). See the [module docs](self) for what happens to it.
    pub fn send(&mut self, now: Instant, from: Side, frame: &[u8]) -> bool {
        let caps = self.caps();
        let (line, observe) = self.line(from);
        line.send(now, frame, caps, observe)
    }

    /// [`send`](Self::send) of an owned buffer: a clean direction keeps the buffer
    /// itself and hands it to the receiver ([`recv_swap`](Self::recv_swap)), leaving a
    /// spare one in `frame` (one the receiver gave back, or empty), as a ring hands
    /// descriptors; a direction with faults copies it, as `send` (see
    /// [`FaultLine::send_swap`]).
    #[inline(always)]
    pub fn send_swap(&mut self, now: Instant, from: Side, frame: &mut Vec<u8>) -> bool {
        let caps = self.caps();
        let (line, observe) = self.line(from);
        line.send_swap(now, frame, caps, observe)
    }

    /// [`recv`](Self::recv) by handing over the frame's buffer: on `Some(n)` `buf` holds
    /// the whole frame (`buf.len() == n`) and the link keeps the buffer `buf` held before
    /// for the sender's later frames (see [`FaultLine::recv_swap`]).
    #[inline]
    pub fn recv_swap(&mut self, now: Instant, to: Side, buf: &mut Vec<u8>) -> Option<usize> {
        let (line, observe) = self.line(to.peer());
        line.recv_swap(now, buf, observe)
    }

    /// Spare frame buffers the direction sent by `from` keeps (at most 64): the
    /// receiver's, given back by [`recv_swap`](Self::recv_swap) or
    /// [`recv`](Self::recv), for the sender's next frames.
    pub fn spare_buffers(&self, from: Side) -> usize {
        self.dir(from).spare_buffers()
    }

    /// Receive at port `to` the next frame that has arrived by `now`: copies it into `buf`
    /// (cut to `buf.len()` if longer, counted in [`SimStats::truncated`]) and returns the
    /// number of bytes copied.
    #[inline]
    pub fn recv(&mut self, now: Instant, to: Side, buf: &mut [u8]) -> Option<usize> {
        let (line, observe) = self.line(to.peer());
        line.recv(now, buf, observe)
    }

    /// When the next frame arrives at port `to` (`None`: nothing on the way to it).
    #[inline]
    pub fn poll_at(&self, to: Side) -> Option<Instant> {
        self.dir(to.peer()).next_arrival()
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

/// How a [`SimPort`] holds its link: borrowed (`&mut SimLink`, from [`SimLink::port`], for
/// a loop that owns the link) or shared by both ports ([`SharedSimLink`], from
/// [`sim_pair`], so that each of two runtimes in one thread can own its port).
pub trait SimLinkRef {
    /// Run `f` on the link.
    fn with<R>(&self, f: impl FnOnce(&SimLink) -> R) -> R;
    /// Run `f` on the link, mutably.
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut SimLink) -> R) -> R;
    /// [`SimLink::send_swap`] (without a closure, so that the compiler inlines it in the
    /// one-frame send of every request-response frame).
    fn send_swap(&mut self, now: Instant, from: Side, frame: &mut Vec<u8>) -> bool {
        self.with_mut(|l| l.send_swap(now, from, frame))
    }
}

impl SimLinkRef for &mut SimLink {
    fn with<R>(&self, f: impl FnOnce(&SimLink) -> R) -> R {
        f(self)
    }
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut SimLink) -> R) -> R {
        f(self)
    }
    #[inline(always)]
    fn send_swap(&mut self, now: Instant, from: Side, frame: &mut Vec<u8>) -> bool {
        SimLink::send_swap(self, now, from, frame)
    }
}

/// A link both ports of a [`sim_pair`] share (one thread).
pub type SharedSimLink = Rc<RefCell<SimLink>>;

impl SimLinkRef for SharedSimLink {
    fn with<R>(&self, f: impl FnOnce(&SimLink) -> R) -> R {
        f(&self.borrow())
    }
    fn with_mut<R>(&mut self, f: impl FnOnce(&mut SimLink) -> R) -> R {
        f(&mut self.borrow_mut())
    }
    #[inline(always)]
    fn send_swap(&mut self, now: Instant, from: Side, frame: &mut Vec<u8>) -> bool {
        self.borrow_mut().send_swap(now, from, frame)
    }
}

/// One port of a [`SimLink`] as a [`Device`]: borrowed with [`SimLink::port`], or owned
/// (the link shared with the other port) from [`sim_pair`].
#[derive(Debug, Clone)]
pub struct SimPort<L: SimLinkRef = SharedSimLink> {
    link: L,
    side: Side,
}

/// Both ends of a new sim link, each a port a runtime can own: side A's and side B's.
pub fn sim_pair(config: SimLinkConfig) -> (SimPort, SimPort) {
    let link = Rc::new(RefCell::new(SimLink::new(config)));
    (
        SimPort {
            link: link.clone(),
            side: Side::A,
        },
        SimPort {
            link,
            side: Side::B,
        },
    )
}

impl<L: SimLinkRef> SimPort<L> {
    /// Which end of the link this port is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The earliest arrival at either port ([`SimLink::next_event`]).
    pub fn next_event(&self) -> Option<Instant> {
        self.link.with(SimLink::next_event)
    }
}

impl SimPort<SharedSimLink> {
    /// The link, for its statistics and conditions.
    pub fn link(&self) -> &SharedSimLink {
        &self.link
    }
}

impl<L: SimLinkRef> Device for SimPort<L> {
    fn caps(&self) -> DeviceCaps {
        self.link.with(|l| l.caps())
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let side = self.side;
        self.link.with_mut(|l| l.recv(now, side, buf))
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        let side = self.side;
        self.link.with_mut(|l| l.send(now, side, frame))
    }
    /// Keeps each buffer (a clean direction) and leaves a spare in its place, see
    /// [`SimLink::send_swap`].
    fn send_swap(&mut self, now: Instant, frames: &mut [Vec<u8>]) -> usize {
        let side = self.side;
        self.link.with_mut(|l| {
            let mut dropped = 0;
            for frame in frames {
                dropped += usize::from(!l.send_swap(now, side, frame));
            }
            dropped
        })
    }
    /// Keeps the buffer (a clean direction), see [`SimLink::send_swap`]. Inline: a
    /// request-response's every frame.
    #[inline(always)]
    fn send_one(&mut self, now: Instant, frame: &mut Vec<u8>) -> bool {
        self.link.send_swap(now, self.side, frame)
    }
    /// A send is a move into the line's queue.
    fn tx_direct(&self) -> bool {
        true
    }
    /// Always swaps, see [`SimLink::recv_swap`].
    fn recv_swap(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        let side = self.side;
        self.link.with_mut(|l| l.recv_swap(now, side, buf))
    }
    fn poll_at(&self) -> Option<Instant> {
        self.link.with(|l| l.poll_at(self.side))
    }
}
