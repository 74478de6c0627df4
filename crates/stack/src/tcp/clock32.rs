//! 32-bit deadlines for records kept by the million: milliseconds of the stack clock,
//! wrapping (Linux keeps `tw_timer`, request timers and a connection's timers in 32-bit
//! jiffies likewise). A deadline is read back against a nearby instant, so it is
//! meaningful while it lies within ±24 days of that instant; the records that use it
//! (TIME-WAIT for 60 s, SYN-queue requests for at most a few minutes, a connection's
//! timers: the RTO at most 120 s, keepalive at most `tcp_keepalive_time`, hours) stay far
//! inside that.

use core::time::Duration;

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

    /// `t` rounded down to its millisecond: a stamp of when something happened.
    #[inline]
    pub(crate) fn floor(t: Instant) -> Ms32 {
        Ms32(t.as_millis() as u32)
    }

    /// Time from this stamp to `now` (a stamp taken at or before `now`, within 49 days;
    /// older stamps read modulo 2^32 ms, as Linux's 32-bit `lsndtime`).
    #[inline]
    pub(crate) fn elapsed(self, now: Instant) -> Duration {
        Duration::from_millis(u64::from(Ms32::floor(now).0.wrapping_sub(self.0)))
    }
}

/// A connection timer's deadline: a [`Ms32`] rounded up, or disarmed. 4 bytes: the value
/// 0 stands for "disarmed", and a deadline that falls on it is moved 1 ms later (never
/// early).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(u32);

impl Deadline {
    /// Disarmed.
    pub(crate) const OFF: Deadline = Deadline(0);

    /// Armed for `t`, rounded up to the millisecond.
    #[inline]
    pub(crate) fn at(t: Instant) -> Deadline {
        Deadline(Ms32::ceil(t).0.max(1))
    }

    #[inline]
    pub(crate) fn is_armed(self) -> bool {
        self.0 != 0
    }

    /// Armed and come at `now`.
    #[inline]
    pub(crate) fn due(self, now: Instant) -> bool {
        self.is_armed() && Ms32(self.0).due(now)
    }

    /// The instant of an armed deadline, read against `near` (within ±24 days).
    #[inline]
    pub(crate) fn instant(self, near: Instant) -> Option<Instant> {
        self.is_armed().then(|| Ms32(self.0).instant(near))
    }

    /// Whether this deadline comes before `other` (a disarmed one never comes): wrap-aware,
    /// as [`Ms32`]'s order.
    #[inline(always)]
    pub(crate) fn before(self, other: Deadline) -> bool {
        self.0 != 0 && (other.0 == 0 || (self.0.wrapping_sub(other.0) as i32) < 0)
    }

    /// The earlier of two deadlines.
    #[inline(always)]
    pub(crate) fn min(self, other: Deadline) -> Deadline {
        if other.before(self) { other } else { self }
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

    #[test]
    fn connection_deadlines_order_across_the_wrap_and_never_come_early() {
        let near = Instant::from_millis(u64::from(u32::MAX) - 5);
        let soon = Deadline::at(near + Duration::from_micros(2_500));
        let later = Deadline::at(near + Duration::from_secs(120));
        assert!(soon.before(later) && !later.before(soon));
        assert_eq!(soon.min(later), soon);
        assert_eq!(later.min(Deadline::OFF), later);
        assert!(later.before(Deadline::OFF) && !Deadline::OFF.before(later));
        assert_eq!(soon.instant(near), Some(near + Duration::from_millis(3)));
        assert!(!soon.due(near + Duration::from_millis(2)));
        assert!(soon.due(near + Duration::from_millis(3)));
        assert!(!Deadline::OFF.due(near) && Deadline::OFF.instant(near).is_none());
        // A deadline on the value that means "disarmed" comes 1 ms later, not never.
        let zero = Deadline::at(Instant::from_millis(1 << 32));
        assert!(zero.is_armed());
        assert_eq!(
            zero.instant(Instant::from_millis(1 << 32)),
            Some(Instant::from_millis((1 << 32) + 1))
        );
        let stamp = Ms32::floor(near);
        assert_eq!(
            stamp.elapsed(near + Duration::from_secs(7200)),
            Duration::from_secs(7200)
        );
    }
}
