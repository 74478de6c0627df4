//! How a device waits: [`Sleep`], implemented here for every device of this crate, so that
//! a new device brings its own way of sleeping (the runtime's idle loop only calls it).
//!
//! A sleep is measured on a [`Clock`]: the real monotonic clock, or a virtual one that a
//! simulation moves (the runtime's `MonotonicClock` and `VirtualClock`); on a virtual clock
//! sleeping is a jump of the clock ([`Clock::advance_idle`]) instead of a wait.

use core::time::Duration;
use std::io;

use rustix::event::Timespec;

use ustack_obs::time::Instant;

use crate::Device;
use crate::capture::{Capture, Tap};
use crate::fault::Faulty;
use crate::packet::PacketQueue;
use crate::shm::ShmPort;
use crate::sim::{SimLinkRef, SimPort};
use crate::tun::TunQueue;
use crate::xdp::XdpQueue;

/// What an idle loop did with a virtual clock (see [`Clock::advance_idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// A real clock: time passes on its own; the loop must sleep.
    Real,
    /// The virtual clock jumped forward.
    Advanced,
    /// The virtual clock could not move: another participant has work now, or nothing is
    /// scheduled anywhere (the simulation is quiescent).
    Stuck,
}

/// Where the loop's `now` comes from.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Instant;

    /// Whether time is virtual (moved by the loop, not by itself). Busy polling is off on
    /// a virtual clock: no time would pass.
    fn is_virtual(&self) -> bool {
        false
    }

    /// Tell the clock when this loop next has work (`Some(Instant::ZERO)`: now; `None`:
    /// nothing scheduled). Runtimes sharing a virtual clock read each other's.
    fn publish_wakeup(&self, _at: Option<Instant>) {}

    /// Pass idle time up to `until` without waiting, if the clock is virtual: jump to the
    /// earliest of `until` and every other participant's published wake-up.
    fn advance_idle(&self, _until: Option<Instant>) -> Idle {
        Idle::Real
    }
}

/// A device the loop can sleep on when idle.
pub trait Sleep {
    /// Wait until the device may have a frame to receive, or `deadline` (on `clock`)
    /// passes (`None`: no limit). Returns whether the device woke the caller (`false`: the
    /// deadline passed, or a virtual clock moved). Returns at once if a frame is waiting.
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool>;
}

/// The earlier of two optional instants (`None`: no limit).
#[inline]
pub fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The time from `clock`'s now to `deadline`, for a device's `wait(timeout)`.
fn timeout(clock: &dyn Clock, deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d - clock.now())
}

/// The shm port sleeps on its doorbell, a futex in the shared region ([`ShmPort::wait`]:
/// arm the need-wakeup flag, `FUTEX_WAIT`, disarm, race-free against the peer's publish). A TUN queue sleeps in
/// `poll(2)` on its file until a packet is waiting or the deadline ([`TunQueue::wait`]).
/// Nothing arms or drains: readability is the kernel's queue itself, so a packet that lands
/// before the sleep wakes it at once. A packet socket sleeps the same way on its socket
/// until a receive block is handed over ([`PacketQueue::wait`]), an `AF_XDP` socket until
/// its receive ring has a frame ([`XdpQueue::wait`]).
macro_rules! sleep_in_wait {
    ($($device:ty),*) => {$(
        impl Sleep for $device {
            fn sleep_until(
                &mut self,
                clock: &dyn Clock,
                deadline: Option<Instant>,
            ) -> io::Result<bool> {
                self.wait(timeout(clock, deadline))
            }
        }
    )*};
}

sleep_in_wait!(ShmPort, TunQueue, PacketQueue, XdpQueue);

/// A tapped device sleeps as the device does.
impl<D: Device + Sleep> Sleep for Tap<D> {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        self.device_mut().sleep_until(clock, deadline)
    }
}

/// A capturing device sleeps on the device it wraps.
impl<D: Device + Sleep, W: std::io::Write> Sleep for Capture<D, W> {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        self.device_mut().sleep_until(clock, deadline)
    }
}

/// The fault relay sleeps on the device it wraps, but no later than the next frame it
/// holds on either path ([`Device::poll_at`]: a delayed frame is released by the round
/// after the wake-up); it returns at once if one is due already.
impl<D: Device + Sleep> Sleep for Faulty<D> {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        let held = self.poll_at();
        if held.is_some_and(|at| at <= clock.now()) {
            return Ok(true);
        }
        let woken = self
            .device_mut()
            .sleep_until(clock, min_opt(deadline, held))?;
        Ok(woken || self.poll_at().is_some_and(|at| at <= clock.now()))
    }
}

/// On a virtual clock, sleeping is a jump of the clock: to the deadline, but no further
/// than the next frame on the link in either direction (one to the peer must reach it in
/// time) or another participant's wake-up. On a real clock (a sim link driven in real
/// time), a thread sleep until the deadline or the next arrival; with neither, it returns
/// at once (nothing in this thread can change that, so a caller waiting without a timeout
/// would spin: use a virtual clock with sim).
impl<L: SimLinkRef> Sleep for SimPort<L> {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        let target = min_opt(deadline, self.next_event());
        match clock.advance_idle(target) {
            Idle::Real => {
                if let Some(t) = target {
                    std::thread::sleep(t - clock.now());
                }
            }
            Idle::Advanced | Idle::Stuck => {}
        }
        Ok(self.poll_at().is_some_and(|at| at <= clock.now()))
    }
}

/// A `Duration` as the kernel's `timespec`, for `poll(2)` (saturating at `i64::MAX`
/// seconds).
pub(crate) fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}
