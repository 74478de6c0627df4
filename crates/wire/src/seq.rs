//! TCP sequence numbers: 32-bit values compared modulo 2^32.
//!
//! [RFC 9293 §3.4](https://www.rfc-editor.org/rfc/rfc9293#section-3.4): "the sequence
//! number space ranges from 0 to 2^32 - 1 ... all arithmetic dealing with sequence numbers
//! must be performed modulo 2^32". Comparison is by the sign of the 32-bit difference, as
//! Linux's `before()`/`after()` in `include/net/tcp.h`: `a < b` iff `(a - b) as i32 < 0`.
//! Two numbers exactly 2^31 apart compare as "before" both ways round, as in Linux; callers
//! never compare numbers that far apart (windows are at most 2^30).

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, AddAssign, Sub, SubAssign};

/// A TCP sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance from `other` to `self` (positive when `self` is after `other`).
    #[inline]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self` strictly before `other` (Linux `before()`).
    #[inline]
    pub fn before(self, other: SeqNumber) -> bool {
        self.diff(other) < 0
    }

    /// `self` strictly after `other` (Linux `after()`).
    #[inline]
    pub fn after(self, other: SeqNumber) -> bool {
        other.diff(self) < 0
    }

    /// `lo <= self < hi`, modulo 2^32 (an empty range when `lo == hi`).
    #[inline]
    pub fn in_range(self, lo: SeqNumber, hi: SeqNumber) -> bool {
        self.0.wrapping_sub(lo.0) < hi.0.wrapping_sub(lo.0)
    }

    /// The later of two sequence numbers.
    #[inline]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self.after(other) { self } else { other }
    }

    /// The earlier of two sequence numbers.
    #[inline]
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        if self.before(other) { self } else { other }
    }
}

impl PartialOrd for SeqNumber {
    /// Wrapping order. Not a total order over all of u32 (see the module docs), which is
    /// why `SeqNumber` is not `Ord`.
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    /// Advance by `rhs` bytes, modulo 2^32 (RFC 9293 §3.4): never panics, in debug or
    /// release builds; an `rhs` of 2^32 or more wraps like any other sequence arithmetic
    /// (no window or segment is that large).
    #[inline]
    fn add(self, rhs: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl AddAssign<usize> for SeqNumber {
    #[inline]
    fn add_assign(&mut self, rhs: usize) {
        *self = *self + rhs;
    }
}

impl Sub<usize> for SeqNumber {
    type Output = SeqNumber;
    /// Move back by `rhs` bytes, modulo 2^32; never panics.
    #[inline]
    fn sub(self, rhs: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(rhs as u32))
    }
}

impl SubAssign<usize> for SeqNumber {
    #[inline]
    fn sub_assign(&mut self, rhs: usize) {
        *self = *self - rhs;
    }
}

impl Sub for SeqNumber {
    type Output = usize;
    /// Bytes from `rhs` up to `self`, or 0 if `self` is before `rhs`. Never panics, in
    /// debug or release builds: every caller orders its operands, but a missed ordering on
    /// a path a peer drives must not let the peer panic a shard. Saturating at 0 (rather
    /// than wrapping to ~2^32) keeps a misordered result harmless to lengths and loops;
    /// use [`SeqNumber::diff`] for a signed distance.
    #[inline]
    fn sub(self, rhs: SeqNumber) -> usize {
        self.diff(rhs).max(0) as usize
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seq({})", self.0)
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around() {
        let a = SeqNumber(u32::MAX - 1);
        let b = a + 4;
        assert_eq!(b, SeqNumber(2));
        assert!(a.before(b));
        assert!(b.after(a));
        assert!(a < b);
        assert_eq!(b - a, 4);
        assert_eq!(a.diff(b), -4);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }

    #[test]
    fn in_range_across_wrap() {
        let lo = SeqNumber(u32::MAX - 10);
        let hi = lo + 20;
        assert!(lo.in_range(lo, hi));
        assert!(SeqNumber(0).in_range(lo, hi));
        assert!(!hi.in_range(lo, hi));
        assert!(!SeqNumber(100).in_range(lo, hi));
        assert!(!lo.in_range(lo, lo));
    }

    #[test]
    fn misordered_arithmetic_does_not_panic() {
        assert_eq!(SeqNumber(5) - SeqNumber(6), 0);
        assert_eq!(SeqNumber(0) - SeqNumber(u32::MAX), 1, "across the wrap");
        assert_eq!(SeqNumber(u32::MAX) - SeqNumber(0), 0);
        assert_eq!(SeqNumber(1) + usize::MAX, SeqNumber(0));
        assert_eq!(SeqNumber(1) - usize::MAX, SeqNumber(2));
        let mut s = SeqNumber(7);
        s += 1 << 40;
        s -= u32::MAX as usize;
        assert_eq!(s, SeqNumber(8));
    }

    proptest::proptest! {
        #[test]
        fn order_matches_offset(base: u32, off in 1u32..(1 << 31)) {
            let a = SeqNumber(base);
            let b = a + off as usize;
            proptest::prop_assert!(a.before(b) && b.after(a) && !b.before(a));
            proptest::prop_assert_eq!(b - a, off as usize);
            proptest::prop_assert_eq!(a - b, 0);
        }
    }
}
