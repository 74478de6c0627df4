//! The established table (Linux `inet_ehash`): every connection not in LISTEN or
//! TIME-WAIT, found by its 4-tuple, in 8 bytes a slot.
//!
//! Open addressing with linear probing. A slot holds the connection's slab index and 32
//! bits of its tuple's keyed hash ([`TupleHash`]: SipHash-1-3 under the OS secret, as the
//! SYN queue and TIME-WAIT share it), no key and no heap object: the tuple itself is read
//! from the TCB, and only when the 32 bits match, so a lookup reads the TCB it returns and
//! (but for one chance in 2^32 a probe) no other. A slot's home is the hash scaled to the
//! capacity (`hash * capacity >> 32`, any capacity, not only powers of two); removal
//! shifts the run that follows back (no tombstones in the live table).
//!
//! # Capacity
//! The table grows when an insertion would take it above 7/8 full, by a quarter of its
//! capacity (at least [`MIN_CAPACITY`] slots): after a growth it is 70% full, so at any
//! count it holds between 8 / 0.875 = 9.1 and 8 / 0.7 = 11.4 bytes a connection (a
//! doubling table would hold between 9.1 and 18.3). Growth is incremental, so that no
//! insertion pays for moving a million entries at once (Linux sizes its ehash once, at
//! boot, `thash_entries`): the new table takes the insertions while the old one is emptied
//! into it [`MIGRATE_STEP`] slots per insertion or removal, and lookups try both. The old
//! table is done long before the new one can fill (a quarter more slots needs 0.175 of
//! the old capacity in insertions to fill; emptying takes 1/16 of it), and is freed then.
//! The table never shrinks (neither does Linux's).

use super::tuple_hash::{TupleHash, TupleHasher};

use super::tcb::FourTuple;

/// The fewest slots a table has once it holds anything.
pub(crate) const MIN_CAPACITY: usize = 64;
/// Slots of the old table moved per insertion or removal while growing.
pub(crate) const MIGRATE_STEP: usize = 16;

/// A slot: 32 bits of the tuple's hash and the slab index plus one (0: empty; in the
/// table being emptied, [`GONE`]: removed or moved, keep probing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    tag: u32,
    index1: u32,
}

/// A slot of the old table whose entry was removed or moved to the new one.
const GONE: u32 = u32::MAX;

impl Slot {
    #[inline(always)]
    fn live(self) -> bool {
        self.index1 != 0 && self.index1 != GONE
    }
}

/// One open-addressed table.
#[derive(Debug, Default)]
struct Table {
    slots: Box<[Slot]>,
}

impl Table {
    fn with_capacity(cap: usize) -> Table {
        // Zeroed (empty) slots come from calloc: fresh pages, resident once written.
        Table {
            slots: vec![Slot::default(); cap].into_boxed_slice(),
        }
    }

    fn cap(&self) -> usize {
        self.slots.len()
    }

    /// Where a tag's probe starts.
    #[inline]
    fn home(&self, tag: u32) -> usize {
        ((u64::from(tag) * self.cap() as u64) >> 32) as usize
    }

    #[inline]
    fn next(&self, pos: usize) -> usize {
        if pos + 1 == self.cap() { 0 } else { pos + 1 }
    }

    /// The position of the first live slot with `tag` for which `is` holds.
    #[inline(always)]
    fn find(&self, tag: u32, mut is: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut pos = self.home(tag);
        loop {
            let s = *self.slots.get(pos)?;
            if s.tag == tag && s.live() && is(s.index1 - 1) {
                return Some(pos);
            }
            if s.index1 == 0 {
                return None;
            }
            pos = self.next(pos);
        }
    }

    /// Put a slot in the first empty place of its run (the table has room).
    fn put(&mut self, slot: Slot) {
        let mut pos = self.home(slot.tag);
        while self.slots[pos].index1 != 0 {
            pos = self.next(pos);
        }
        self.slots[pos] = slot;
    }

    /// Empty slot `hole` and shift back the entries after it that may move there (Knuth's
    /// Algorithm R, linear probing's deletion without tombstones).
    fn take(&mut self, mut hole: usize) {
        let mut pos = self.next(hole);
        loop {
            let s = self.slots[pos];
            if s.index1 == 0 {
                break;
            }
            // The entry stays if its home lies cyclically in (hole, pos].
            let home = self.home(s.tag);
            let from_hole = (home + self.cap() - hole) % self.cap();
            let to_pos = (pos + self.cap() - hole) % self.cap();
            if from_hole == 0 || from_hole > to_pos {
                self.slots[hole] = s;
                hole = pos;
            }
            pos = self.next(pos);
        }
        self.slots[hole] = Slot::default();
    }
}

/// The established table: slab indexes of connections by 4-tuple (see the module docs).
#[derive(Debug)]
pub(crate) struct EHash {
    /// Where insertions go.
    cur: Table,
    /// The table being emptied into `cur` after a growth, and how far it is emptied.
    old: Option<(Table, usize)>,
    len: usize,
    hasher: TupleHasher,
}

impl EHash {
    pub(crate) fn new(hasher: TupleHasher) -> Self {
        EHash {
            cur: Table::default(),
            old: None,
            len: 0,
            hasher,
        }
    }

    /// The hash of `t` (shared with the SYN queue and TIME-WAIT, made with the same key).
    #[inline]
    pub(crate) fn hash(&self, t: &FourTuple) -> TupleHash {
        self.hasher.hash(t)
    }

    /// The slab index of the entry of `hash` for which `is` holds (the caller compares the
    /// tuple of the TCB at that index).
    #[inline(always)]
    pub(crate) fn get(&self, hash: TupleHash, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = hash.tag();
        if let Some(pos) = self.cur.find(tag, &mut is) {
            return Some(self.cur.slots[pos].index1 - 1);
        }
        let (old, _) = self.old.as_ref()?;
        let pos = old.find(tag, is)?;
        Some(old.slots[pos].index1 - 1)
    }

    /// File slab index `index` under `hash` (the caller has checked that the tuple is not
    /// in the table).
    #[inline]
    pub(crate) fn insert(&mut self, hash: TupleHash, index: u32) {
        assert!(
            index < GONE - 1,
            "slab index {index} out of the table's range"
        );
        if (self.len + 1) * 8 > self.cur.cap() * 7 {
            self.grow();
        }
        self.cur.put(Slot {
            tag: hash.tag(),
            index1: index + 1,
        });
        self.len += 1;
        self.migrate(MIGRATE_STEP);
    }

    /// Remove the entry of slab index `index` filed under `hash`; whether there was one.
    #[inline]
    pub(crate) fn remove(&mut self, hash: TupleHash, index: u32) -> bool {
        let tag = hash.tag();
        let found = if let Some(pos) = self.cur.find(tag, |i| i == index) {
            self.cur.take(pos);
            true
        } else if let Some((old, _)) = self.old.as_mut()
            && let Some(pos) = old.find(tag, |i| i == index)
        {
            old.slots[pos].index1 = GONE;
            true
        } else {
            false
        };
        if found {
            self.len -= 1;
            self.migrate(MIGRATE_STEP);
        }
        found
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated, in both tables while growing.
    pub(crate) fn capacity(&self) -> usize {
        self.cur.cap() + self.old.as_ref().map_or(0, |(t, _)| t.cap())
    }

    /// Heap bytes of the table (both while growing).
    pub(crate) fn allocation_size(&self) -> usize {
        self.capacity() * size_of::<Slot>()
    }

    /// Start a growth: a table a quarter larger takes the insertions, the current one is
    /// emptied into it from now on (one left over from the last growth is finished first).
    #[cold]
    fn grow(&mut self) {
        self.migrate(usize::MAX);
        let cap = self.cur.cap();
        let new = Table::with_capacity(cap + (cap / 4).max(MIN_CAPACITY));
        let old = core::mem::replace(&mut self.cur, new);
        if self.len > 0 {
            self.old = Some((old, 0));
        }
    }

    /// Move up to `step` slots of the old table into the current one.
    #[inline]
    fn migrate(&mut self, step: usize) {
        let Some((old, done)) = self.old.as_mut() else {
            return;
        };
        let end = done.saturating_add(step).min(old.cap());
        for pos in *done..end {
            let s = old.slots[pos];
            if s.live() {
                self.cur.put(s);
                // Moved: lookups that reach it in the old table keep probing.
                old.slots[pos].index1 = GONE;
            }
        }
        *done = end;
        if end == old.cap() {
            self.old = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, SocketAddrV4};

    use super::*;

    fn tuple(i: u32) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(0x0a00_0000 | (i >> 16)), i as u16),
        }
    }

    /// A table with a slab of tuples beside it, as `Tcp` keeps them.
    struct Model {
        table: EHash,
        slab: Vec<Option<FourTuple>>,
    }

    impl Model {
        fn new() -> Self {
            Model {
                table: EHash::new(TupleHasher::new((3, 4))),
                slab: Vec::new(),
            }
        }

        fn get(&self, t: &FourTuple) -> Option<u32> {
            let slab = &self.slab;
            self.table
                .get(self.table.hash(t), |i| slab[i as usize] == Some(*t))
        }

        fn insert(&mut self, index: u32, t: FourTuple) {
            if self.slab.len() <= index as usize {
                self.slab.resize(index as usize + 1, None);
            }
            self.slab[index as usize] = Some(t);
            self.table.insert(self.table.hash(&t), index);
        }

        fn remove(&mut self, index: u32) -> bool {
            let t = self.slab[index as usize].take().expect("held");
            self.table.remove(self.table.hash(&t), index)
        }
    }

    #[test]
    fn a_million_entries_are_found_through_incremental_growth_and_removal() {
        let mut m = Model::new();
        let n = 1_000_000u32;
        let mut worst = 0.0f64;
        for i in 0..n {
            m.insert(i, tuple(i));
            let (len, cap) = (m.table.len(), m.table.cur.cap());
            assert!(len * 8 <= cap * 7, "{len} entries in {cap} slots");
            if m.table.old.is_none() && len > 1000 {
                worst = worst.max(cap as f64 / len as f64);
            }
        }
        assert_eq!(m.table.len(), n as usize);
        // Growth by a quarter: never more than 1.25 / 0.875 slots an entry once settled,
        // and at a million between 9.1 and 11.5 bytes an entry.
        assert!(worst <= 1.25 / 0.875 + 0.01, "{worst} slots an entry");
        let bytes = m.table.allocation_size() as f64 / f64::from(n);
        assert!(
            (9.1..=11.5).contains(&bytes),
            "{bytes} bytes an entry at a million"
        );
        for i in (0..n).step_by(7) {
            assert_eq!(m.get(&tuple(i)), Some(i), "entry {i}");
        }
        assert_eq!(m.get(&tuple(n + 5)), None);
        // Remove two in three, then check every entry.
        for i in 0..n {
            if i % 3 != 0 {
                assert!(m.remove(i), "entry {i} removed");
            }
        }
        assert!(!m.table.remove(m.table.hash(&tuple(1)), 1), "removed once");
        for i in 0..n {
            let want = (i % 3 == 0).then_some(i);
            assert_eq!(m.get(&tuple(i)), want, "entry {i} after removals");
        }
        assert_eq!(m.table.len(), n.div_ceil(3) as usize);
    }

    #[test]
    fn entries_removed_and_refiled_while_the_old_table_empties_are_found_once() {
        let mut m = Model::new();
        // Fill past 10,000 entries, up to the insertion that starts a growth.
        let mut i = 0u32;
        while i < 10_000
            || m.table
                .old
                .as_ref()
                .is_none_or(|(_, done)| *done > MIGRATE_STEP)
        {
            m.insert(i, tuple(i));
            i += 1;
        }
        let old_cap = m.table.old.as_ref().map(|(t, _)| t.cap()).unwrap();
        // Remove entries (some still in the old table, some moved) and file their tuples
        // again under new indexes (a connection closed and its tuple reused); remove
        // others for good.
        for j in 0..100 {
            assert!(m.remove(j), "entry {j} removed while growing");
            m.insert(i + j, tuple(j));
        }
        for j in (100..600).step_by(2) {
            assert!(m.remove(j), "entry {j} removed while growing");
        }
        let (_, done) = m.table.old.as_ref().expect("still growing");
        assert!(
            *done > MIGRATE_STEP && *done < old_cap,
            "the old table is half emptied"
        );
        for j in 0..i {
            let want = match j {
                0..100 => Some(i + j),
                100..600 if j % 2 == 0 => None,
                _ => Some(j),
            };
            assert_eq!(m.get(&tuple(j)), want, "tuple {j}");
        }
        // Run the growth to its end: the old table goes, nothing is lost or doubled.
        while m.table.old.is_some() {
            m.table.migrate(MIGRATE_STEP);
        }
        let len = i as usize - 250;
        assert_eq!(m.table.len(), len);
        let live = m.table.cur.slots.iter().filter(|s| s.live()).count();
        assert_eq!(live, len, "each entry in one slot");
        for j in 100..600 {
            assert_eq!(
                m.get(&tuple(j)),
                (j % 2 == 1).then_some(j),
                "tuple {j} at the end"
            );
        }
    }
}
