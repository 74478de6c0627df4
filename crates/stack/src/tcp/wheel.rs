//! A hierarchical timer wheel for the connection timers (Varghese and Lauck's hierarchical
//! wheel, as Linux `kernel/time/timer.c` keeps every `timer_list`): at most one entry per
//! connection, filed and moved in O(1), taken out in O(1) when the connection ends, so that
//! no entry ever comes up for a connection that is gone.
//!
//! Entries are addressed by an id the caller chooses (a connection's slab index): the
//! wheel keeps one node per id, in a vector indexed by it, with its deadline and its links
//! in the list of its slot. Times are milliseconds of the stack clock.
//!
//! Levels of [`SLOTS`] slots: level `l` has slots of `64^l` ms, so level 0 holds the
//! milliseconds of the clock's current 64 ms, level 1 the 64 ms slots of its current 4.1 s,
//! level 2 the 4.1 s slots of its current 4.4 minutes, level 3 4.7 hours, and so on up to
//! [`LEVELS`], enough for any millisecond a 64-bit nanosecond clock can name. An entry
//! goes to the level of the highest 6-bit group in which its deadline differs from the
//! wheel's clock (the deadline's slot at that level is then ahead of the clock's), at the
//! slot its deadline names (hashed hierarchical wheels as tokio's `time::wheel` files
//! them).
//!
//! Linux's wheel since 4.8 (`calc_wheel_index`, `LVL_CLK_SHIFT` 3) never moves an entry
//! and lets it fire up to an eighth of its timeout late ("the timer wheel is not a precise
//! timer": its granularity grows with the level); this one cascades, as Linux's did before
//! 4.8 (`cascade()`): when the wheel runs a slot of level 1 or above, its entries go down to
//! the levels below, so every entry fires in the millisecond of its deadline, never
//! earlier and never later. A slot above level 0 is run at the earliest deadline filed in
//! it (kept per slot), not at its start, so the stack is woken at deadlines as it was by
//! the binary heap this replaced, never for a cascade alone (a run that passes a slot's
//! start cascades it on the way). An entry moves down at most once per level, and only if
//! it is still filed when its slot comes up: TCP's timers are nearly always moved or taken
//! out first (an RTO restarted by each ACK, a connection's entry taken out when it ends),
//! so the cascade is paid by the few that fire.
//!
//! The granularity is therefore the millisecond for every connection timer, the
//! resolution of their 32-bit [`Deadline`](super::clock32::Deadline)s, which round up:
//! the RTO (RFC 6298 §5: never early, and here not late either, where Linux may fire
//! a 200 ms RTO up to 8 ms late, its level-1 granularity at HZ=1000), the tail loss probe
//! and zero-window probe on the same timer, the delayed ACK (Linux `TCP_DELACK_MIN` 40 ms
//! to `TCP_DELACK_MAX` 200 ms, level 0 or 1, which Linux also fires at most 8 ms late), the
//! SYN's retransmission (1 s, RFC 6298 §2.1), keepalive (`tcp_keepalive_time`, 2 h:
//! Linux's level 6, up to 4.4 minutes late) and an orphan's FIN-WAIT-2 end
//! (`tcp_fin_timeout`). TIME-WAIT (60 s) and the SYN queue's SYN-ACK retransmissions keep
//! their own queues (`timer::TimeWaits`, `listen::Requests`), also exact to the
//! millisecond.
//!
//! Moving an entry within its slot (a later deadline in the same 64 ms slot of level 1,
//! say) only rewrites its deadline, as Linux's `__mod_timer` does when "the timer is
//! re-modified to ... end up in the same array bucket".
//!
//! The clock is the last millisecond the wheel ran. Level 0's slot of the clock's
//! millisecond holds the entries due by then: those armed for a past deadline, or come
//! up while [`Wheel::pop_due`] was taking them one by one.

/// Slots per level (Linux `LVL_SIZE`).
pub(crate) const SLOTS: usize = 64;
/// Bits of a slot index.
const SLOT_BITS: u32 = 6;
/// Levels: 8 x 6 bits cover 2^48 ms, more than a `u64` of nanoseconds holds (2^44 ms).
pub(crate) const LEVELS: usize = 8;
/// No node (end of a list).
const NIL: u32 = u32::MAX;
/// A node not filed in any slot.
const UNFILED: u16 = u16::MAX;

/// One id's entry: its deadline and its links in its slot's list.
#[derive(Debug, Clone, Copy)]
struct Node {
    next: u32,
    prev: u32,
    /// The deadline in ms, modulo 2^32 (read back against the wheel's clock: every
    /// deadline lies within ±24 days of it, see `clock32`).
    expires: u32,
    /// `level * SLOTS + slot`, or [`UNFILED`].
    slot: u16,
}

impl Node {
    const EMPTY: Node = Node {
        next: NIL,
        prev: NIL,
        expires: 0,
        slot: UNFILED,
    };
}

/// The wheel (see the module docs).
#[derive(Debug)]
pub(crate) struct Wheel {
    /// By id; an id never armed has none (or an unfiled one).
    nodes: Vec<Node>,
    /// The first node of each slot's list, `level * SLOTS + slot`.
    heads: Box<[u32; LEVELS * SLOTS]>,
    /// For the slots above level 0, a deadline not later than any in the slot, not
    /// before its start: the earliest filed there since it was last cascaded (an entry
    /// moved out or cancelled leaves it early, which costs at most a wake-up that finds
    /// nothing due). When the wheel next runs for the slot, so that the stack is woken
    /// at a deadline, never for a cascade alone.
    mins: Box<[u64; LEVELS * SLOTS]>,
    /// Per level, one bit per slot that holds entries (Linux `pending_map`).
    occupied: [u64; LEVELS],
    /// The last millisecond run (see the module docs).
    clk: u64,
    /// Entries filed.
    len: usize,
}

impl Default for Wheel {
    fn default() -> Self {
        Wheel::new()
    }
}

impl Wheel {
    pub(crate) fn new() -> Wheel {
        Wheel {
            nodes: Vec::new(),
            heads: Box::new([NIL; LEVELS * SLOTS]),
            mins: Box::new([0; LEVELS * SLOTS]),
            occupied: [0; LEVELS],
            clk: 0,
            len: 0,
        }
    }

    /// Entries filed (one per id at most).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes: the nodes (one per id up to the highest armed) and the slot heads.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>()
            + size_of::<[u32; LEVELS * SLOTS]>()
            + size_of::<[u64; LEVELS * SLOTS]>()
    }

    /// Whether `id` has an entry.
    #[inline]
    pub(crate) fn is_armed(&self, id: u32) -> bool {
        self.nodes
            .get(id as usize)
            .is_some_and(|n| n.slot != UNFILED)
    }

    /// The deadline of `id`'s entry, if it has one.
    #[cfg(test)]
    pub(crate) fn expires(&self, id: u32) -> Option<u64> {
        let n = self.nodes.get(id as usize)?;
        (n.slot != UNFILED).then(|| self.read(n.expires))
    }

    /// File `id` to fire at `expires` (ms), moving its entry if it has one (Linux
    /// `mod_timer`). `now` is the caller's clock: a wheel with no entries takes it as its
    /// own, so that a first entry is filed near the level it will fire from. Returns when
    /// the wheel must run for this entry: `expires`, or the wheel's clock if that is
    /// later (due at once); a caller that keeps its next deadline
    /// ([`crate::stack::Wake`]) lowers it to this, and [`Wheel::next_expiry`] is then
    /// never earlier than what it keeps.
    #[inline]
    pub(crate) fn arm(&mut self, id: u32, expires: u64, now: u64) -> u64 {
        if self.len == 0 && now > self.clk {
            self.clk = now;
        }
        let i = id as usize;
        if i >= self.nodes.len() {
            self.grow(i);
        }
        let slot = self.slot_for(expires);
        let node = &mut self.nodes[i];
        if node.slot == slot {
            // The same slot: only the deadline moves (Linux __mod_timer's "same array
            // bucket" case). In level 0 a slot is one millisecond, so this is the same
            // deadline; above it, the cascade files the entry by its new deadline.
            node.expires = expires as u32;
            let min = &mut self.mins[slot as usize];
            *min = (*min).min(expires);
        } else {
            if node.slot != UNFILED {
                self.unlink(id);
            }
            self.link(id, slot, expires);
        }
        expires.max(self.clk)
    }

    /// Take `id`'s entry out (Linux `del_timer`); whether it had one.
    #[inline]
    pub(crate) fn cancel(&mut self, id: u32) -> bool {
        if !self.is_armed(id) {
            return false;
        }
        self.unlink(id);
        true
    }

    /// When the next entry is due, in ms: exact if it is in level 0, else the earliest
    /// deadline filed in the slot holding the earliest entries (exact unless that entry
    /// was moved or cancelled since: then earlier, never later). The clock's own
    /// millisecond when entries are due already. O(levels).
    #[inline]
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.next_event().map(|(_, t)| t)
    }

    /// Take one entry due at `now` (ms) out and return its id, running the wheel up to
    /// `now` as it goes (cascading the slots of the levels above 0 it reaches); `None`
    /// when no entry is due. Entries come out in deadline order, those of one
    /// millisecond in no particular order. An entry armed meanwhile for a deadline not
    /// after `now` comes out of the same run of calls.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<u32> {
        loop {
            let cur = (self.clk & (SLOTS as u64 - 1)) as usize;
            if self.occupied[0] & (1 << cur) != 0 {
                let id = self.heads[cur];
                self.unlink(id);
                return Some(id);
            }
            if now <= self.clk {
                return None;
            }
            match self.next_slot() {
                Some(index) if self.slot_time(index) <= now => {
                    // Every slot before this one is empty: the clock jumps to its start
                    // (a slot of level 0 is then the clock's own, taken on the next turn;
                    // one above is cascaded, its deadlines possibly still ahead).
                    self.clk = self.slot_time(index);
                    if index >= SLOTS {
                        self.cascade(index);
                    }
                }
                _ => {
                    self.clk = now;
                    return None;
                }
            }
        }
    }

    /// The slot holding the earliest entries. Every occupied slot of level `l` lies
    /// ahead of the clock within the clock's current slot of level `l + 1` (an entry is
    /// filed where its deadline first differs from the clock, and the clock never passes
    /// the start of an occupied slot without running it), so the lowest occupied level
    /// holds the earliest, at its lowest occupied slot.
    #[inline]
    fn next_slot(&self) -> Option<usize> {
        let level = self.occupied.iter().position(|&bits| bits != 0)?;
        Some(level * SLOTS + self.occupied[level].trailing_zeros() as usize)
    }

    /// [`Wheel::next_slot`] and when its first entry is due (level 0: its millisecond;
    /// above: its `mins`).
    #[inline]
    fn next_event(&self) -> Option<(usize, u64)> {
        let index = self.next_slot()?;
        let t = if index < SLOTS {
            self.slot_time(index)
        } else {
            self.mins[index]
        };
        Some((index, t))
    }

    /// When slot `index` (`level * SLOTS + slot`) comes up: the clock's current slot of
    /// the level above, at this slot of this level (the clock itself for the clock's own
    /// slot of level 0).
    #[inline]
    fn slot_time(&self, index: usize) -> u64 {
        let shift = SLOT_BITS * (index / SLOTS) as u32;
        let above = shift + SLOT_BITS;
        ((self.clk >> above) << above) | (((index % SLOTS) as u64) << shift)
    }

    /// The slot for a deadline of `expires` ms, from the clock: the level of the highest
    /// 6-bit group in which they differ, the slot the deadline names there. A deadline
    /// not after the clock goes to the clock's own slot of level 0 (due at once).
    #[inline]
    fn slot_for(&self, expires: u64) -> u16 {
        let e = expires.max(self.clk);
        let differ = e ^ self.clk;
        let level = if differ < SLOTS as u64 {
            0
        } else {
            (63 - differ.leading_zeros()) / SLOT_BITS
        };
        debug_assert!((level as usize) < LEVELS, "a deadline past 2^48 ms");
        let slot = (e >> (SLOT_BITS * level)) & (SLOTS as u64 - 1);
        (level as usize * SLOTS + slot as usize) as u16
    }

    /// A 32-bit deadline read back against the clock (within ±24 days of it).
    #[inline]
    fn read(&self, expires: u32) -> u64 {
        let delta = i64::from(expires.wrapping_sub(self.clk as u32) as i32);
        self.clk.saturating_add_signed(delta)
    }

    /// The clock has come to the start of `index` (a slot of level 1 or above): file its
    /// entries again, from the clock, in the levels below (or the clock's slot of level
    /// 0, those due now). Linux before 4.8: `cascade()`.
    #[cold]
    fn cascade(&mut self, index: usize) {
        let mut id = self.heads[index];
        self.heads[index] = NIL;
        self.occupied[index / SLOTS] &= !(1 << (index % SLOTS));
        while id != NIL {
            let node = self.nodes[id as usize];
            self.len -= 1;
            let expires = self.read(node.expires);
            let slot = self.slot_for(expires);
            debug_assert!(
                (slot as usize) / SLOTS < index / SLOTS,
                "an entry cascaded to its own level"
            );
            self.link(id, slot, expires);
            id = node.next;
        }
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        let len = (i + 1).max(self.nodes.len() * 9 / 8).max(16);
        self.nodes.resize(len, Node::EMPTY);
    }

    /// Put `id` at the head of slot `slot`, for `expires`.
    #[inline]
    fn link(&mut self, id: u32, slot: u16, expires: u64) {
        let index = slot as usize;
        let head = self.heads[index];
        if head != NIL {
            self.nodes[head as usize].prev = id;
            let min = &mut self.mins[index];
            *min = (*min).min(expires);
        } else {
            self.mins[index] = expires;
        }
        self.nodes[id as usize] = Node {
            next: head,
            prev: NIL,
            expires: expires as u32,
            slot,
        };
        self.heads[index] = id;
        self.occupied[index / SLOTS] |= 1 << (index % SLOTS);
        self.len += 1;
    }

    /// Take filed `id` out of its slot's list.
    #[inline]
    fn unlink(&mut self, id: u32) {
        let Node {
            next, prev, slot, ..
        } = self.nodes[id as usize];
        let index = slot as usize;
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.heads[index] = next;
            if next == NIL {
                self.occupied[index / SLOTS] &= !(1 << (index % SLOTS));
            }
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
        self.nodes[id as usize].slot = UNFILED;
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests;
