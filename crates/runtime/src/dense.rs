//! Tables indexed by a socket's slot ([`SocketKey::index`]), and how they grow.
//!
//! The stack's socket slots are small dense integers (a slab's indexes, freed ones reused
//! first), so per-socket state outside the stack (the poller's registrations, an
//! application's connections) lives best in a vector indexed by the slot: no hashing, no
//! per-entry heap object, one fixed-size entry a slot, found by one bounds check.
//!
//! # Capacity
//!
//! Such a vector grows with the highest slot in use, by [`GROWTH_DIVISOR`]: to at least an
//! eighth more than it held (and never below [`MIN_CAPACITY`] entries), not by doubling. So
//! at any count the allocated capacity is at most 12.5% (plus [`MIN_CAPACITY`]) above what
//! is used, where doubling leaves a table up to half empty just past a power of two (at
//! 1,000,000 connections, 2^20 or 2^21 entries). The cost of growing stays small: a large
//! vector is its own `mmap`, and glibc's `realloc` moves it with `mremap` (page tables, not
//! bytes), about 60 times from 1,024 entries to a million. A caller that knows the count
//! to expect can [`reserve`](Vec::reserve_exact) it at once.
//!
//! [`SocketKey::index`]: ustack_stack::SocketKey::index

/// A dense table grows by at least `1 / GROWTH_DIVISOR` of its capacity.
pub const GROWTH_DIVISOR: usize = 8;

/// The smallest capacity a dense table takes when it first grows.
pub const MIN_CAPACITY: usize = 1024;

/// Make `table[index]` exist: extend it with `fill` up to `index`, growing its capacity
/// by an eighth (see the [module docs](self)) when it is full.
#[inline]
pub fn ensure<T: Clone>(table: &mut Vec<T>, index: usize, fill: T) {
    if index < table.len() {
        return;
    }
    let need = index + 1;
    if need > table.capacity() {
        let cap = table.capacity();
        let target = need.max(cap + cap / GROWTH_DIVISOR).max(MIN_CAPACITY);
        table.reserve_exact(target - table.len());
    }
    table.resize(need, fill);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_stays_within_an_eighth_of_the_highest_index() {
        let mut t: Vec<u64> = Vec::new();
        for i in 0..1_000_000 {
            ensure(&mut t, i, 0);
            t[i] = i as u64;
            let used = i + 1;
            assert!(
                t.capacity() <= (used + used / GROWTH_DIVISOR + 1).max(MIN_CAPACITY),
                "{} entries allocated for {used} used",
                t.capacity()
            );
        }
        assert_eq!(t.len(), 1_000_000);
        assert_eq!(t[999_999], 999_999);
        ensure(&mut t, 10, 7);
        assert_eq!(t[10], 10, "an index in range is left alone");
    }
}
