//! The 4-tuple tables: the established table, the SYN queue and TIME-WAIT (Linux
//! `net/ipv4/inet_hashtables.c`, `inet_ehashfn`, and `inet_timewait_sock.c`, whose
//! records live in the same hash as the connections).
//!
//! A segment's 4-tuple is hashed once ([`TupleHasher::hash`]) and the hash is shared by
//! every table the segment is looked up in, as Linux's `__inet_lookup_established`
//! computes `inet_ehashfn` once for the one table that holds established, TIME-WAIT and
//! request sockets alike. The hash is SipHash-1-3 under a secret key (Linux keys its
//! `inet_ehashfn` jhash with `inet_ehash_secret`): the tuples are the peers' choice, and
//! without the key a peer cannot aim many of them at one bucket (HashDoS). One key serves
//! all three tables, as one secret serves Linux's one table.

use hashbrown::HashTable;
#[cfg(test)]
use hashbrown::hash_table::Entry;

use super::tcb::FourTuple;
use crate::secret::{SipKey, sip_u64_u32};

/// The keyed hash of one 4-tuple, computed by [`TupleHasher::hash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TupleHash(u64);

impl TupleHash {
    /// The hash's high 32 bits: what the established table keeps of it ([`super::ehash`]).
    #[inline]
    pub(crate) fn tag(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// The secret key of the 4-tuple tables. `Debug` does not print it.
#[derive(Clone)]
pub(crate) struct TupleHasher {
    key: SipKey,
}

impl core::fmt::Debug for TupleHasher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TupleHasher").finish_non_exhaustive()
    }
}

impl TupleHasher {
    pub(crate) fn new(key: SipKey) -> Self {
        TupleHasher { key }
    }

    /// SipHash-1-3 of the tuple's 12 bytes, written as [`FourTuple`]'s `Hash` writes them
    /// (the two addresses as one word, then the two ports), in one pass: the same value
    /// a `SipHasher13` fed that way gives, without its buffering.
    #[inline]
    pub(crate) fn hash(&self, t: &FourTuple) -> TupleHash {
        let addrs = (u64::from(t.local.ip().to_bits()) << 32) | u64::from(t.remote.ip().to_bits());
        let ports = (u32::from(t.local.port()) << 16) | u32::from(t.remote.port());
        TupleHash(sip13_u64_u32(self.key, addrs, ports))
    }
}

/// SipHash-1-3 (one compression round per 8-byte block, three finalisation rounds) of the
/// 12-byte message `a` (little-endian) then `b` (little-endian).
#[inline]
fn sip13_u64_u32(key: SipKey, a: u64, b: u32) -> u64 {
    sip_u64_u32::<1, 3>(key, a, b)
}

/// A table of `V` by 4-tuple, looked up by a precomputed [`TupleHash`]. Tables made with
/// hashers of the same key share hashes: one [`TupleTable::hash`] serves them all.
#[derive(Debug)]
pub(crate) struct TupleTable<V> {
    table: HashTable<(FourTuple, V)>,
    hasher: TupleHasher,
}

impl<V> TupleTable<V> {
    pub(crate) fn new(hasher: TupleHasher) -> Self {
        TupleTable {
            table: HashTable::new(),
            hasher,
        }
    }

    /// The hash of `t` under this table's key.
    #[inline]
    pub(crate) fn hash(&self, t: &FourTuple) -> TupleHash {
        self.hasher.hash(t)
    }

    #[inline]
    pub(crate) fn get(&self, hash: TupleHash, t: &FourTuple) -> Option<&V> {
        self.table.find(hash.0, |(k, _)| k == t).map(|(_, v)| v)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, hash: TupleHash, t: &FourTuple) -> Option<&mut V> {
        self.table.find_mut(hash.0, |(k, _)| k == t).map(|(_, v)| v)
    }

    #[inline]
    pub(crate) fn contains(&self, hash: TupleHash, t: &FourTuple) -> bool {
        self.get(hash, t).is_some()
    }

    /// Insert or replace the value of `t`; returns the value replaced.
    #[cfg(test)]
    pub(crate) fn insert(&mut self, hash: TupleHash, t: FourTuple, v: V) -> Option<V> {
        let hasher = &self.hasher;
        match self
            .table
            .entry(hash.0, |(k, _)| *k == t, |(k, _)| hasher.hash(k).0)
        {
            Entry::Occupied(mut old) => Some(core::mem::replace(&mut old.get_mut().1, v)),
            Entry::Vacant(slot) => {
                slot.insert((t, v));
                None
            }
        }
    }

    /// Insert `t`, which the table does not hold (the caller knows: the segment that
    /// creates it found none), in one probe where [`TupleTable::insert`] takes two (a
    /// find, then the insert). Linux's `inet_ehash_insert` adds a socket to its chain
    /// without a lookup either when the caller vouches for its uniqueness.
    #[inline]
    pub(crate) fn insert_new(&mut self, hash: TupleHash, t: FourTuple, v: V) {
        debug_assert!(self.get(hash, &t).is_none(), "tuple already held");
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash.0, (t, v), |(k, _)| hasher.hash(k).0);
    }

    /// The entry of `t` if `take` says so given its value (else the value's copy, to
    /// look at), in one probe: [`TupleTable::get`] then [`TupleTable::remove`] take two.
    #[inline]
    pub(crate) fn remove_if(
        &mut self,
        hash: TupleHash,
        t: &FourTuple,
        take: impl FnOnce(&V) -> bool,
    ) -> Option<Result<V, V>>
    where
        V: Copy,
    {
        match self.table.find_entry(hash.0, |(k, _)| k == t) {
            Ok(entry) if take(&entry.get().1) => Some(Ok(entry.remove().0.1)),
            Ok(entry) => Some(Err(entry.get().1)),
            Err(_) => None,
        }
    }

    pub(crate) fn remove(&mut self, hash: TupleHash, t: &FourTuple) -> Option<V> {
        match self.table.find_entry(hash.0, |(k, _)| k == t) {
            Ok(entry) => Some(entry.remove().0.1),
            Err(_) => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Heap bytes of the table.
    pub(crate) fn allocation_size(&self) -> usize {
        self.table.allocation_size()
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&FourTuple, &V)> + '_ {
        self.table.iter().map(|(k, v)| (k, v))
    }

    /// Keep only the entries for which `keep` is true.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&FourTuple, &mut V) -> bool) {
        self.table.retain(|(k, v)| keep(k, v));
    }
}

#[cfg(test)]
mod tests {
    use core::hash::{BuildHasher, Hasher};
    use core::net::{Ipv4Addr, SocketAddrV4};

    use siphasher::sip::SipHasher13;

    use super::*;

    fn tuple(i: u32) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::from_bits(0xc000_0201), 80),
            remote: SocketAddrV4::new(
                Ipv4Addr::from_bits(0xc633_6400 ^ i),
                (i.wrapping_mul(2_654_435_761) >> 16) as u16,
            ),
        }
    }

    /// The one-pass hash is SipHash-1-3 as the `siphasher` crate computes it over the bytes
    /// `FourTuple`'s `Hash` writes, under the same key: same function, same strength.
    #[test]
    fn the_tuple_hash_is_siphash13_of_the_tuple() {
        for (i, key) in [(0u64, 0u64), (1, 2), (u64::MAX, 0x0123_4567_89ab_cdef)]
            .into_iter()
            .enumerate()
        {
            let h = TupleHasher::new(key);
            for j in 0..200u32 {
                let t = tuple(j ^ ((i as u32) << 20));
                let mut s = SipHasher13::new_with_keys(key.0, key.1);
                core::hash::Hash::hash(&t, &mut s);
                assert_eq!(h.hash(&t).0, s.finish(), "key {key:?}, tuple {t:?}");
                let keyed = crate::secret::KeyedState::with_key(key);
                assert_eq!(h.hash(&t).0, keyed.hash_one(t));
            }
        }
    }

    #[test]
    fn a_table_finds_what_it_holds_through_growth_and_removal() {
        let h = TupleHasher::new((7, 9));
        let mut table = TupleTable::new(h.clone());
        for i in 0..1000u32 {
            let t = tuple(i);
            assert_eq!(table.insert(h.hash(&t), t, i), None);
        }
        let t5 = tuple(5);
        assert_eq!(table.insert(table.hash(&t5), t5, 55), Some(5), "replaced");
        assert_eq!(table.len(), 1000);
        for i in (0..1000u32).step_by(2) {
            let t = tuple(i);
            assert!(table.remove(h.hash(&t), &t).is_some());
        }
        for i in 0..1000u32 {
            let t = tuple(i);
            let want = (i % 2 == 1).then_some(if i == 5 { 55 } else { i });
            assert_eq!(table.get(h.hash(&t), &t).copied(), want, "tuple {i}");
        }
        table.retain(|_, v| *v < 500);
        assert_eq!(table.len(), 250);
        assert_eq!(table.iter().count(), 250);
    }
}
