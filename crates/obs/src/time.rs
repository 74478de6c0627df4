//! Time as the stack sees it: an [`Instant`] on a clock the caller owns.
//!
//! The stack never reads a clock itself (sans-I/O): every entry point takes `now`. Tests
//! drive a virtual clock; the runtime passes a monotonic clock's reading. The epoch is
//! arbitrary (the runtime's start, or zero in tests), so an `Instant` is only meaningful
//! relative to other `Instant`s of the same clock. It lives in `ustack-obs` because that
//! crate depends on nothing and every other crate (stack, devices, pcap) needs it.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since the clock's epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The clock's epoch.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// Later than any real reading: "never" for deadlines.
    pub const FAR_FUTURE: Instant = Instant { nanos: u64::MAX };

    #[inline]
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant { nanos }
    }
    #[inline]
    pub const fn from_micros(micros: u64) -> Instant {
        Instant {
            nanos: micros.saturating_mul(1_000),
        }
    }
    #[inline]
    pub const fn from_millis(millis: u64) -> Instant {
        Instant {
            nanos: millis.saturating_mul(1_000_000),
        }
    }
    #[inline]
    pub const fn from_secs(secs: u64) -> Instant {
        Instant {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.nanos / 1_000
    }
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.nanos / 1_000_000
    }
    /// Time since the epoch, as a `Duration` (for pcap timestamps and display).
    #[inline]
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.nanos)
    }
    /// `self - earlier`, or zero if `earlier` is later.
    #[inline]
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }
    #[inline]
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        let d = u64::try_from(d.as_nanos()).ok()?;
        self.nanos.checked_add(d).map(Instant::from_nanos)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at [`Instant::FAR_FUTURE`] rather than overflowing.
    #[inline]
    fn add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::FAR_FUTURE)
    }
}

impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    #[inline]
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.nanos / 1_000_000_000,
            self.nanos % 1_000_000_000
        )
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let t = Instant::from_millis(1500);
        assert_eq!(t.as_micros(), 1_500_000);
        assert_eq!(t + Duration::from_millis(500), Instant::from_secs(2));
        assert_eq!(Instant::from_secs(2) - t, Duration::from_millis(500));
        assert_eq!(t - Instant::from_secs(2), Duration::ZERO);
        assert_eq!(
            Instant::FAR_FUTURE + Duration::from_secs(1),
            Instant::FAR_FUTURE
        );
        assert_eq!(format!("{t}"), "1.500000000s");
    }
}
