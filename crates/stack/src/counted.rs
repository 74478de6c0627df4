//! A `u32` map key whose comparisons are counted in test builds, so that tests can assert
//! the cost of an operation in comparisons (work done) rather than in time: the out-of-order
//! queue of a TCP receive buffer and the fragments of an IPv4 reassembly queue are keyed by
//! it, and their flood tests check that `n` inserts cost O(n log n) comparisons.

use core::cmp::Ordering;

/// An ordered `u32` key. Its `Ord` counts one unit of [`work`] per comparison under
/// `cfg(test)` and is a plain `u32` comparison otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key(pub u32);

impl Ord for Key {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        work::add(1);
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Key {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A per-thread count of work units (key comparisons, records visited): counted only in
/// test builds, a no-op otherwise.
pub(crate) mod work {
    #[cfg(test)]
    std::thread_local! {
        static UNITS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    }

    /// Count `n` units of work.
    #[inline]
    pub(crate) fn add(n: u64) {
        #[cfg(test)]
        UNITS.with(|u| u.set(u.get() + n));
        #[cfg(not(test))]
        let _ = n;
    }

    /// The units counted on this thread since the last call (and reset the count).
    #[cfg(test)]
    pub(crate) fn take() -> u64 {
        UNITS.with(|u| u.replace(0))
    }
}
