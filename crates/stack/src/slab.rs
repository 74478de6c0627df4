//! A slab of values addressed by (index, generation): the socket tables' storage.
//!
//! Values live inline in one vector (no per-value allocation: a TCP connection's TCB sits
//! in its slot), freed slots are reused, and each slot's generation goes up when its value
//! is removed, so a handle that outlived its socket never reaches the one that reused the
//! slot.

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// A full slab grows by `1 / GROWTH_DIVISOR` of its slots.
const GROWTH_DIVISOR: usize = 8;
/// The fewest slots a slab grows by.
const MIN_GROWTH: usize = 16;

/// Values addressed by `(index, generation)`.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::new()
    }
}

impl<T> Slab<T> {
    /// Bytes one slot takes: the value inline plus its generation.
    pub const SLOT_BYTES: usize = core::mem::size_of::<Slot<T>>();

    pub const fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The values held, with their slot indexes.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as u32, s.value.as_ref()?)))
    }

    /// Heap bytes the slab occupies: every slot allocated (held or free) and the free list.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * Self::SLOT_BYTES + self.free.capacity() * size_of::<u32>()
    }

    /// Store `value` in a free slot; returns its (index, generation).
    pub fn insert(&mut self, value: T) -> (u32, u32) {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() == self.slots.capacity() {
                    // Grow by an eighth (at least MIN_GROWTH slots), not by doubling, so
                    // that the slab is never more than about 11% empty: doubled just past
                    // a power of two, a TCB slab holding 131,073 connections would reserve
                    // 262,144 slots (512 bytes each). A large slab is its own mapping, and
                    // glibc moves it with `mremap`, not by copying.
                    let cap = self.slots.capacity();
                    self.slots
                        .reserve_exact((cap / GROWTH_DIVISOR).max(MIN_GROWTH));
                }
                self.slots.push(Slot {
                    generation: 0,
                    value: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        self.len += 1;
        (index, slot.generation)
    }

    pub fn get(&self, index: u32, generation: u32) -> Option<&T> {
        let slot = self.slots.get(index as usize)?;
        (slot.generation == generation).then_some(slot.value.as_ref()?)
    }

    pub fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        let slot = self.slots.get_mut(index as usize)?;
        if slot.generation != generation {
            return None;
        }
        slot.value.as_mut()
    }

    /// The value in slot `index`, whatever its generation (for tables that index slots
    /// themselves, like the port maps).
    pub fn by_index(&self, index: u32) -> Option<&T> {
        self.slots.get(index as usize)?.value.as_ref()
    }

    pub fn by_index_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots.get_mut(index as usize)?.value.as_mut()
    }

    /// The value in slot `index` with the slot's generation (the handle a live value
    /// answers to), in one look at the slot.
    #[inline]
    pub fn by_index_mut_gen(&mut self, index: u32) -> Option<(u32, &mut T)> {
        let slot = self.slots.get_mut(index as usize)?;
        Some((slot.generation, slot.value.as_mut()?))
    }

    /// The current generation of slot `index` (the one a live handle to it carries).
    pub fn generation(&self, index: u32) -> Option<u32> {
        Some(self.slots.get(index as usize)?.generation)
    }

    /// Drop the value in its slot (not moved out first, as [`Slab::remove`] does);
    /// whether there was one. The slot's generation moves on and the slot is reused later.
    pub fn discard(&mut self, index: u32, generation: u32) -> bool {
        let Some(slot) = self
            .slots
            .get_mut(index as usize)
            .filter(|s| s.generation == generation && s.value.is_some())
        else {
            return false;
        };
        slot.value = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        true
    }

    /// Take the value out; the slot's generation moves on and the slot is reused later.
    pub fn remove(&mut self, index: u32, generation: u32) -> Option<T> {
        let slot = self
            .slots
            .get_mut(index as usize)
            .filter(|s| s.generation == generation)?;
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_slab_grows_by_an_eighth_not_by_doubling() {
        let mut s = Slab::new();
        for i in 0..200_000u32 {
            s.insert(i);
            let used = s.len();
            assert!(
                s.slots.capacity() <= used + used / GROWTH_DIVISOR + MIN_GROWTH,
                "{} slots for {used} values",
                s.slots.capacity()
            );
        }
    }

    #[test]
    fn stale_handles_never_reach_a_reused_slot() {
        let mut s = Slab::new();
        let (i, g) = s.insert("a");
        assert_eq!(s.get(i, g), Some(&"a"));
        assert_eq!(s.remove(i, g), Some("a"));
        assert_eq!(s.remove(i, g), None, "removed once");
        let (j, h) = s.insert("b");
        assert_eq!(
            (j, h),
            (i, g + 1),
            "the slot is reused with the next generation"
        );
        assert_eq!(s.get(i, g), None, "the old handle is stale");
        assert_eq!(s.get_mut(i, g), None);
        assert_eq!(s.get(j, h), Some(&"b"));
        assert_eq!(s.by_index(j), Some(&"b"));
        assert_eq!(s.generation(j), Some(h));
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(99, 0), None);
    }
}
