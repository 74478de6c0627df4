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
    /// Advance by `rhs` bytes. Panics in debug builds if `rhs` exceeds 2^31 - 1, which no
    /// window or segment can.
    #[inline]
    fn add(self, rhs: usize) -> SeqNumber {
        debug_assert!(
            rhs <= i32::MAX as usize,
            "sequence advance {rhs} out of range"
        );
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
    #[inline]
    fn sub(self, rhs: usize) -> SeqNumber {
        debug_assert!(
            rhs <= i32::MAX as usize,
            "sequence retreat {rhs} out of range"
        );
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
    /// Bytes from `rhs` up to `self`. Panics if `self` is before `rhs`: a caller that
    /// subtracts sequence numbers must know their order (use [`SeqNumber::diff`] if not).
    #[inline]
    fn sub(self, rhs: SeqNumber) -> usize {
        let d = self.diff(rhs);
        assert!(d >= 0, "sequence subtraction underflow: {self} - {rhs}");
        d as usize
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
    #[should_panic(expected = "underflow")]
    fn subtraction_in_wrong_order_panics() {
        let _ = SeqNumber(5) - SeqNumber(6);
    }

    proptest::proptest! {
        #[test]
        fn order_matches_offset(base: u32, off in 1u32..(1 << 31)) {
            let a = SeqNumber(base);
            let b = a + off as usize;
            proptest::prop_assert!(a.before(b) && b.after(a) && !b.before(a));
            proptest::prop_assert_eq!(b - a, off as usize);
        }
    }
}
