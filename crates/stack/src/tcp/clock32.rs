//! 32-bit deadlines for records kept by the million: milliseconds of the stack clock,
//! wrapping (Linux keeps `tw_timer` and request timers in 32-bit jiffies likewise). A
//! deadline is read back against a nearby instant, so it is meaningful while it lies
//! within ±24 days of that instant; the records that use it (TIME-WAIT for 60 s, SYN-queue
//! requests for at most a few minutes) stay far inside that.

use ustack_obs::Instant;

/// A deadline in milliseconds of the stack clock, modulo 2^32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ms32(u32);

impl Ms32 {
    /// `t` rounded up to the next millisecond, so that a deadline never comes early.
    #[inline]
    pub(crate) fn ceil(t: Instant) -> Ms32 {
        Ms32(t.as_nanos().div_ceil(1_000_000) as u32)
    }

    /// The instant this deadline stands for, read against `near` (within ±24 days).
    #[inline]
    pub(crate) fn instant(self, near: Instant) -> Instant {
        let base = near.as_millis();
        let delta = i64::from(self.0.wrapping_sub(base as u32) as i32);
        Instant::from_millis(base.saturating_add_signed(delta))
    }

    /// Whether the deadline has come at `now`.
    #[inline]
    pub(crate) fn due(self, now: Instant) -> bool {
        (Ms32::floor(now).0.wrapping_sub(self.0) as i32) >= 0
    }

    fn floor(t: Instant) -> Ms32 {
        Ms32(t.as_millis() as u32)
    }
}

/// Deadlines in order, wrap-aware: a total order among deadlines within ±24 days of
/// each other, which is all a queue of them ever holds.
impl Ord for Ms32 {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (self.0.wrapping_sub(other.0) as i32).cmp(&0)
    }
}

impl PartialOrd for Ms32 {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn deadlines_round_up_and_read_back_across_the_wrap() {
        let near = Instant::from_millis(u64::from(u32::MAX) - 10);
        let d = Ms32::ceil(near + Duration::from_micros(60_000_500));
        // 60,000.5 ms later, rounded up: past the 32-bit wrap.
        assert_eq!(d.instant(near), near + Duration::from_millis(60_001));
        assert!(!d.due(near + Duration::from_millis(60_000)));
        assert!(d.due(near + Duration::from_millis(60_001)));
        assert!(d.due(near + Duration::from_secs(3600)));
        assert!(Ms32::ceil(near) < d && d > Ms32::ceil(near));
    }
}
