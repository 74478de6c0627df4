//! The shard's timer wheel: a hierarchical timing wheel with O(1) arm, cancel and re-arm, driven
//! by the poll loop (or a virtual clock in tests), holding millions of timers at 32 bytes each.
//!
//! It is sans-I/O like the stack: it never reads a clock. The owner calls
//! [`TimerWheel::advance`] with `now` and sleeps until [`TimerWheel::next_deadline`].
//!
//! # Design
//!
//! Time is cut into *ticks* of one `granularity` (e.g. 1 ms). A timer with deadline `d`
//! expires at tick `e = ⌈d / granularity⌉`, the first tick boundary at or after `d`. The wheel has
//! `levels` levels of 64 slots each (Linux's `LVL_BITS = 6`, `LVL_SIZE = 64`); a slot of level
//! `n` spans `64^n` ticks, so level 0 covers the next 64 ticks, level 1 the next 4096, and so on.
//! Enough levels are made to cover every tick an [`Instant`] can name (8 levels at 1 ms, 11 at
//! 1 ns), so no deadline is ever clamped to the wheel's horizon.
//!
//! A timer goes into the level whose range holds `e - tick` (`tick` being the last tick the wheel
//! has processed), at the slot `(e >> 6n) & 63` of that level: absolute indexing, as Linux's
//! `calc_index()` does. Each slot is a doubly linked list threaded through the timers themselves,
//! so arm, cancel and re-arm are O(1). One bit per slot (Linux's `pending_map`) marks non-empty
//! slots, and one bit per level marks non-empty levels, so the next event is found with a rotate
//! and a count of trailing zeros per non-empty level, and empty slots cost nothing: `advance` does
//! work proportional to the non-empty slots it passes plus the timers it moves or fires.
//!
//! ## Cascading (Varghese & Lauck), not Linux's non-cascading wheel: the trade-off
//!
//! Linux used this design, Varghese and Lauck's hierarchical wheel ("Hashed and Hierarchical
//! Timing Wheels", SOSP 1987, scheme 7), until 4.8: `internal_add_timer()` hashed a timer into
//! `tv1`..`tv5` and `cascade()` re-hashed the next level's slot downwards each time a lower level
//! wrapped, so every timer fired on its exact jiffy. Commit 500462a9de65 ("timers: Switch to a
//! non-cascading wheel", 2016, today's `kernel/time/timer.c`) dropped the cascade: a level's
//! buckets are 8^n jiffies wide (`LVL_CLK_SHIFT = 3`), a timer's expiry is rounded *up* to its
//! level's granularity when it is queued, and it never moves again. No cascade means no bursts of
//! re-hashing work, and most kernel timers (networking timeouts) are cancelled long before they
//! fire; the price is precision: a timer fires up to one bucket of its level late, about 12 % of
//! its timeout (a 200 ms RTO at `HZ=1000` sits in level 1 and may fire 7 ms late; a 60 s TIME_WAIT
//! in level 4, up to 4 s late), and a timer beyond the wheel's capacity is queued at the capacity
//! (`WHEEL_TIMEOUT_MAX`), i.e. fires early.
//!
//! ustack keeps the cascade, for two reasons. TCP wants the deadline it asked for: the RTO, the
//! delayed ACK and the probe timers of a connection, and the simulator's tests that check them,
//! should see one rule (fires within one granularity of the deadline, never before it), not one
//! that depends on how far away the timer was when armed. And the cascade's cost is small here:
//! a timer moves down at most `levels - 1` times in its whole life, only while it stays armed (a
//! cancelled or re-armed RTO never cascades again from its old slot), one shard owns the wheel so
//! the cascade holds no lock, and the bitmaps skip empty slots. Cascading is amortised O(levels)
//! per timer that survives to it; nothing is ever rounded.
//!
//! # Precision: the guarantee
//!
//! With `g` the granularity, a timer with deadline `d` (nanoseconds) fires during the first
//! `advance(now)` with `now >= ⌈d / g⌉ · g`. Since `d <= ⌈d / g⌉ · g < d + g`:
//! - **it never fires early**: `now >= d` whenever it fires;
//! - **it fires less than one granularity late**, at every level: if `advance` is called at
//!   `⌈d / g⌉ · g` (which is what sleeping until [`TimerWheel::next_deadline`] does), the timer
//!   fires at most `g - 1 ns` after `d`; after any `advance(now)`, every timer still armed has
//!   `now < d + g`.
//!
//! A deadline already reached when armed (`⌈d / g⌉ <= ⌊processed / g⌋`) fires on the very next
//! `advance`, whatever its `now`. A deadline within one granularity of [`Instant::FAR_FUTURE`]
//! whose `⌈d / g⌉ · g` exceeds it never fires (no `now` reaches it), which matches "never".
//!
//! # Order
//!
//! Within one `advance`, timers fire in order of their expiry tick (so in deadline order to
//! within one granularity); timers sharing a tick fire in an unspecified but deterministic order.
//! Timers that were already due when armed, and timers left over when a budget ran out (see
//! [`TimerWheel::advance_budget`]), fire first.
//!
//! # Memory
//!
//! Timers live in a slab of fixed-size pages (4096 entries), so growing never copies what is
//! there (no latency spike when the millionth timer arrives) and the slack is at most one page.
//! An entry holds the deadline, the payload, two `u32` links, a generation and the slot it is in:
//! [`TimerWheel::ENTRY_BYTES`] is 32 bytes for a payload of up to 8 bytes (a `TcpHandle`), 24 for
//! `()`. [`TimerWheel::memory_bytes`] counts the pages' capacity, the slot heads and bitmaps and
//! the struct itself. Freed entries are reused (LIFO); the slab never shrinks.
//!
//! # Cost
//!
//! `arm`, `cancel` and `rearm` touch the entry, its list neighbours and a slot head: O(1).
//! `advance` costs one bitmap scan per non-empty level for each tick at which a slot fires or
//! cascades, plus O(1) per timer fired or moved; a timer moves at most `levels - 1` times in its
//! life (7 at 1 ms). An `advance` with nothing due is a few nanoseconds. Measured with the
//! ignored `timing_report` test (release, 1 M timers over 10 minutes at 1 ms, 32-byte entries):
//! arm 10 ns (25 ns while the slab grows), cancel 29 ns, rearm 5 ns within a slot and 44 ns to
//! another, advance 6 ns per call with nothing due, and 150-230 ns per timer fired when the
//! timers' entries are scattered over a 32 MB slab (a cache miss per list step, one per cascade
//! as well; about 45 ns when they are in memory order).
//!
//! # Ids
//!
//! A [`TimerId`] is an index into the slab and a generation, bumped whenever the entry is freed
//! (fired or cancelled), so a stale id never cancels, re-arms or reads another timer (until the
//! same entry has been reused 2^32 times).

use core::fmt;
use core::num::NonZeroU16;
use core::time::Duration;

use ustack_obs::Instant;

/// Bits of slot index per level (Linux `LVL_BITS`).
const LVL_BITS: u32 = 6;
/// Slots per level (Linux `LVL_SIZE`).
const LVL_SIZE: usize = 1 << LVL_BITS;
/// Mask of a slot index.
const LVL_MASK: u64 = (LVL_SIZE as u64) - 1;
/// Levels needed to cover every `u64` tick (64^11 > 2^64).
const MAX_LEVELS: usize = 11;
/// Slab page size (entries per page), as a shift.
const PAGE_BITS: u32 = 12;
/// Entries per slab page.
const PAGE_SIZE: usize = 1 << PAGE_BITS;
/// The end of a list, an empty slot, an empty free list.
const NIL: u32 = u32::MAX;

/// A handle on an armed timer: a slab index and the entry's generation.
///
/// Ids are `Copy` and cheap; once the timer fires or is cancelled the id goes stale, and a stale
/// id never affects a timer armed later in the same entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

/// Which list an entry is on: `slot + 1` for slot lists (`level * 64 + index`), and one more for
/// the due list. Non-zero so that [`Entry`] has a niche and its two variants share 32 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct ListId(NonZeroU16);

impl ListId {
    /// The list at position `pos` of `heads` (`level * 64 + index`, or `levels * 64` for due).
    fn new(pos: usize) -> ListId {
        // pos <= MAX_LEVELS * 64 = 704, so pos + 1 fits a u16 and is never zero.
        ListId(NonZeroU16::new(pos as u16 + 1).unwrap_or(NonZeroU16::MIN))
    }

    /// Its position in `heads`.
    fn pos(self) -> usize {
        usize::from(self.0.get()) - 1
    }
}

/// One slab entry.
enum Entry<T> {
    /// An armed timer, linked into `list`. The head of a list keeps the list's tail in `prev`
    /// (a circular `prev` chain), so appending is O(1); `next` of the tail is `NIL`.
    Armed {
        deadline: u64,
        payload: T,
        next: u32,
        prev: u32,
        generation: u32,
        list: ListId,
    },
    /// A free entry on the free list.
    Vacant { next_free: u32, generation: u32 },
}

/// A hierarchical timing wheel of timers carrying a payload `T` (for instance a connection
/// handle). See the [module documentation](self) for the design and the precision guarantee.
pub struct TimerWheel<T> {
    /// Nanoseconds per tick, at least 1.
    granularity: u64,
    /// The last tick processed: every timer with expiry tick `<= tick` is on the due list.
    tick: u64,
    /// The latest tick `advance` was asked to reach (`>= tick`; more only when a budget ran out).
    clock: u64,
    /// The latest `now` (nanoseconds) `advance` was given while the wheel was empty, not yet
    /// folded into `clock`: an empty wheel's advance (every round of a loop without
    /// application timers) only keeps the maximum, and the next `arm` divides it into ticks.
    idle_now: u64,
    /// Number of levels in use (enough for the largest tick an `Instant` can name).
    levels: usize,
    /// Head of each slot's list (`level * 64 + index`), then the due list; `NIL` when empty.
    heads: Box<[u32]>,
    /// Per level, one bit per non-empty slot (Linux `pending_map`).
    occupied: Box<[u64]>,
    /// One bit per level with a non-empty slot.
    level_mask: u32,
    /// The slab, in pages of `PAGE_SIZE` entries.
    pages: Vec<Vec<Entry<T>>>,
    /// Entries ever created (the slab's high-water mark).
    allocated: u32,
    /// Head of the free list.
    free_head: u32,
    /// Armed timers.
    len: usize,
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("granularity_ns", &self.granularity)
            .field("tick", &self.tick)
            .field("levels", &self.levels)
            .field("len", &self.len)
            .field("allocated", &self.allocated)
            .finish_non_exhaustive()
    }
}

impl<T> TimerWheel<T> {
    /// Bytes of one slab entry (one armed timer), payload included.
    pub const ENTRY_BYTES: usize = core::mem::size_of::<Entry<T>>();

    /// An empty wheel whose clock starts at `now`, with ticks of `granularity` (e.g. 1 ms).
    ///
    /// # Panics
    /// If `granularity` is zero. A granularity above `u64::MAX` nanoseconds is taken as that.
    pub fn new(now: Instant, granularity: Duration) -> Self {
        let granularity = u64::try_from(granularity.as_nanos()).unwrap_or(u64::MAX);
        assert!(granularity > 0, "timer wheel granularity must be non-zero");
        let max_tick = ceil_div(u64::MAX, granularity);
        let bits = u64::BITS - max_tick.leading_zeros();
        let levels = ((bits.max(1) - 1) / LVL_BITS + 1) as usize;
        debug_assert!(levels <= MAX_LEVELS);
        TimerWheel {
            granularity,
            tick: now.as_nanos() / granularity,
            clock: now.as_nanos() / granularity,
            idle_now: 0,
            levels,
            heads: vec![NIL; levels * LVL_SIZE + 1].into_boxed_slice(),
            occupied: vec![0; levels].into_boxed_slice(),
            level_mask: 0,
            pages: Vec::new(),
            allocated: 0,
            free_head: NIL,
            len: 0,
        }
    }

    /// The tick length.
    pub fn granularity(&self) -> Duration {
        Duration::from_nanos(self.granularity)
    }

    /// Arm a timer for `deadline` carrying `payload`. O(1).
    ///
    /// A deadline already reached fires on the next [`advance`](Self::advance).
    ///
    /// # Panics
    /// If `u32::MAX - 1` timers are already armed.
    pub fn arm(&mut self, deadline: Instant, payload: T) -> TimerId {
        if self.len == 0 {
            // What the empty wheel's advances left to do: move the clock to the latest
            // `now`, with nothing left to walk.
            self.clock = self.clock.max(self.idle_now / self.granularity);
            self.tick = self.clock;
        }
        let deadline = deadline.as_nanos();
        let list = self.list_for(self.expiry_tick(deadline));
        let id = self.alloc(deadline, payload, list);
        self.push_back(list, id.index);
        self.len += 1;
        id
    }

    /// Disarm a timer, returning its payload; `None` if `id` is stale (fired or cancelled). O(1).
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let (_, list) = self.lookup(id)?;
        self.unlink(list, id.index);
        self.len -= 1;
        self.free(id.index)
    }

    /// Move an armed timer to a new `deadline` (earlier or later), keeping its id and payload;
    /// `false` if `id` is stale. O(1), and when the new deadline falls in the slot the timer is
    /// already in (an RTO pushed back a little by each ACK), only the deadline is written.
    pub fn rearm(&mut self, id: TimerId, deadline: Instant) -> bool {
        let Some((_, old)) = self.lookup(id) else {
            return false;
        };
        let deadline = deadline.as_nanos();
        let new = self.list_for(self.expiry_tick(deadline));
        if new != old {
            self.unlink(old, id.index);
            self.push_back(new, id.index);
        }
        if let Entry::Armed {
            deadline: d, list, ..
        } = self.entry_mut(id.index)
        {
            *d = deadline;
            *list = new;
        }
        true
    }

    /// The deadline a timer was armed (or last re-armed) with; `None` if `id` is stale.
    pub fn deadline(&self, id: TimerId) -> Option<Instant> {
        self.lookup(id).map(|(d, _)| Instant::from_nanos(d))
    }

    /// Expire every timer due at `now`, calling `f` with each one's id and payload, in expiry
    /// order (see the module documentation for the order and the precision guarantee).
    ///
    /// The wheel's clock never goes back: a `now` earlier than a previous one counts as that one.
    pub fn advance(&mut self, now: Instant, f: impl FnMut(TimerId, T)) {
        self.advance_budget(now, usize::MAX, f);
    }

    /// Like [`advance`](Self::advance), but fire at most `budget` timers (Linux's `netdev_budget`
    /// pattern) and return how many fired. A return of `budget` means "call me again": the timers
    /// left over stay due and fire first in the next call, whatever its `now`, and the wheel
    /// carries on from where it stopped up to the latest `now` it was given.
    #[inline]
    pub fn advance_budget(
        &mut self,
        now: Instant,
        budget: usize,
        f: impl FnMut(TimerId, T),
    ) -> usize {
        if self.len == 0 {
            // Nothing armed (the due list is empty too): only the latest `now` is kept, for
            // the next `arm` to move the clock to (no division a round).
            self.idle_now = self.idle_now.max(now.as_nanos());
            return 0;
        }
        self.clock = self.clock.max(now.as_nanos() / self.granularity);
        self.advance_walk(budget, f)
    }

    /// [`advance_budget`](Self::advance_budget)'s walk up to the wheel's clock.
    fn advance_walk(&mut self, budget: usize, mut f: impl FnMut(TimerId, T)) -> usize {
        let target = self.clock;
        let mut fired = 0;
        let due = self.due_list();
        if !self.fire_list(due, budget, &mut fired, &mut f) {
            return fired;
        }
        while let Some(t) = self.next_event() {
            if t > target {
                break;
            }
            if fired == budget {
                // Stop between ticks: everything up to `self.tick` has been handled.
                return fired;
            }
            debug_assert!(t > self.tick, "the wheel must move forward");
            self.tick = t;
            // Cascade each level whose current slot starts at `t` (Linux pre-4.8 `cascade()`,
            // run when the level below wraps). A slot of level n starts on a multiple of 64^n.
            for level in 1..self.levels {
                let shift = LVL_BITS * level as u32;
                if t & ((1u64 << shift) - 1) != 0 {
                    break;
                }
                let index = ((t >> shift) & LVL_MASK) as usize;
                if self.occupied[level] & (1u64 << index) != 0 {
                    self.cascade(ListId::new(level * LVL_SIZE + index));
                }
            }
            // Cascaded timers expiring at `t` itself went to the due list; then level 0's slot.
            let index = (t & LVL_MASK) as usize;
            if !self.fire_list(due, budget, &mut fired, &mut f) {
                // Out of budget: level 0's slot for `t` is due too, and must not stay behind
                // the wheel (it would read as 64 ticks ahead).
                let head = self.take_list(ListId::new(index));
                self.requeue_due(head);
                return fired;
            }
            if self.occupied[0] & (1u64 << index) != 0
                && !self.fire_list(ListId::new(index), budget, &mut fired, &mut f)
            {
                return fired;
            }
        }
        self.tick = target;
        fired
    }

    /// The instant of the wheel's next event, for the poll loop's sleep: `None` when empty.
    ///
    /// It is never later than the instant at which the earliest timer fires (which is less than
    /// one granularity after its deadline), and `advance` at it always does work: it fires a
    /// timer, or (when the earliest timer is still in a coarse level) cascades a slot, after
    /// which `next_deadline` moves on. A loop that sleeps until `next_deadline` therefore never
    /// spins, and wakes early at most once per non-empty coarse slot. When timers are already
    /// due it returns the wheel's processed time (in the past): "now".
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        if self.heads[self.due_list().pos()] != NIL {
            return Some(self.tick_instant(self.tick));
        }
        self.next_event().map(|t| self.tick_instant(t))
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes this wheel holds: the struct, the slot heads and bitmaps, the page table and the
    /// pages' full capacity (free entries included). Memory a payload owns on the heap is not
    /// counted.
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + self.heads.len() * core::mem::size_of::<u32>()
            + self.occupied.len() * core::mem::size_of::<u64>()
            + self.pages.capacity() * core::mem::size_of::<Vec<Entry<T>>>()
            + self
                .pages
                .iter()
                .map(|p| p.capacity() * Self::ENTRY_BYTES)
                .sum::<usize>()
    }

    // ----- ticks -----

    /// `⌈deadline / granularity⌉`: the first tick boundary at or after the deadline.
    fn expiry_tick(&self, deadline: u64) -> u64 {
        ceil_div(deadline, self.granularity)
    }

    /// The instant a tick starts, saturating at `FAR_FUTURE`.
    fn tick_instant(&self, tick: u64) -> Instant {
        Instant::from_nanos(tick.saturating_mul(self.granularity))
    }

    /// The list a timer expiring at tick `e` belongs on, given the processed tick.
    fn list_for(&self, e: u64) -> ListId {
        if e <= self.tick {
            return self.due_list();
        }
        let delta = e - self.tick;
        // The level whose range [64^n, 64^(n+1)) holds delta (level 0 holds 1..64).
        let level = ((u64::BITS - 1 - delta.leading_zeros()) / LVL_BITS) as usize;
        debug_assert!(level < self.levels);
        let index = ((e >> (LVL_BITS * level as u32)) & LVL_MASK) as usize;
        ListId::new(level * LVL_SIZE + index)
    }

    fn due_list(&self) -> ListId {
        ListId::new(self.levels * LVL_SIZE)
    }

    /// The earliest tick after `self.tick` at which a non-empty slot fires (level 0) or cascades
    /// (coarser levels). A non-empty slot of level n holds the first block of 64^n ticks after
    /// the current one whose index matches, so rotating the level's bitmap to start just after
    /// the current block makes the count of trailing zeros the distance in blocks (Linux
    /// `next_pending_bucket()`).
    fn next_event(&self) -> Option<u64> {
        let mut best: Option<u128> = None;
        let mut mask = self.level_mask;
        while mask != 0 {
            let level = mask.trailing_zeros();
            mask &= mask - 1;
            let shift = LVL_BITS * level;
            let current = u128::from(self.tick >> shift);
            let start = ((current + 1) as u64 & LVL_MASK) as u32;
            let ahead = self.occupied[level as usize]
                .rotate_right(start)
                .trailing_zeros();
            let at = (current + 1 + u128::from(ahead)) << shift;
            best = Some(best.map_or(at, |b| b.min(at)));
        }
        // Occupied slots only ever hold ticks that fit a u64.
        best.map(|b| u64::try_from(b).unwrap_or(u64::MAX))
    }

    // ----- the cascade and firing -----

    /// Re-hash every timer of a slot into the levels below (or the due list).
    fn cascade(&mut self, list: ListId) {
        let mut i = self.take_list(list);
        while i != NIL {
            let (next, deadline) = match self.entry(i) {
                Entry::Armed { next, deadline, .. } => (*next, *deadline),
                Entry::Vacant { .. } => break,
            };
            let to = self.list_for(self.expiry_tick(deadline));
            debug_assert!(to.pos() < list.pos() || to == self.due_list());
            if let Entry::Armed { list, .. } = self.entry_mut(i) {
                *list = to;
            }
            self.push_back(to, i);
            i = next;
        }
    }

    /// Fire a whole list, in order, within the budget; `false` if the budget ran out, in which
    /// case the timers not fired are put (in order) on the due list.
    fn fire_list(
        &mut self,
        list: ListId,
        budget: usize,
        fired: &mut usize,
        f: &mut impl FnMut(TimerId, T),
    ) -> bool {
        let mut i = self.take_list(list);
        while i != NIL {
            if *fired == budget {
                self.requeue_due(i);
                return false;
            }
            let (next, generation) = match self.entry(i) {
                Entry::Armed {
                    next, generation, ..
                } => (*next, *generation),
                Entry::Vacant { .. } => break,
            };
            self.len -= 1;
            if let Some(payload) = self.free(i) {
                *fired += 1;
                f(
                    TimerId {
                        index: i,
                        generation,
                    },
                    payload,
                );
            }
            i = next;
        }
        true
    }

    /// Put a detached chain starting at `i` on the due list.
    fn requeue_due(&mut self, mut i: u32) {
        let due = self.due_list();
        while i != NIL {
            let next = match self.entry_mut(i) {
                Entry::Armed { next, list, .. } => {
                    *list = due;
                    *next
                }
                Entry::Vacant { .. } => break,
            };
            self.push_back(due, i);
            i = next;
        }
    }

    // ----- lists -----

    /// Append entry `i` to `list`. The entry's `list` field is the caller's to set.
    fn push_back(&mut self, list: ListId, i: u32) {
        let pos = list.pos();
        let head = self.heads[pos];
        if head == NIL {
            self.heads[pos] = i;
            self.set_links(i, NIL, i);
            self.mark_occupied(pos);
        } else {
            let tail = self.prev_of(head);
            self.set_next(tail, i);
            self.set_links(i, NIL, tail);
            self.set_prev(head, i);
        }
    }

    /// Remove entry `i` from `list`.
    fn unlink(&mut self, list: ListId, i: u32) {
        let pos = list.pos();
        let head = self.heads[pos];
        let (next, prev) = self.links_of(i);
        if i == head {
            if next == NIL {
                self.heads[pos] = NIL;
                self.mark_empty(pos);
            } else {
                self.heads[pos] = next;
                self.set_prev(next, prev); // the tail
            }
        } else {
            self.set_next(prev, next);
            if next == NIL {
                self.set_prev(head, prev); // new tail
            } else {
                self.set_prev(next, prev);
            }
        }
    }

    /// Detach a whole list, returning its head.
    fn take_list(&mut self, list: ListId) -> u32 {
        let pos = list.pos();
        let head = core::mem::replace(&mut self.heads[pos], NIL);
        if head != NIL {
            self.mark_empty(pos);
        }
        head
    }

    fn mark_occupied(&mut self, pos: usize) {
        let level = pos / LVL_SIZE;
        if level < self.levels {
            self.occupied[level] |= 1u64 << (pos % LVL_SIZE);
            self.level_mask |= 1 << level;
        }
    }

    fn mark_empty(&mut self, pos: usize) {
        let level = pos / LVL_SIZE;
        if level < self.levels {
            self.occupied[level] &= !(1u64 << (pos % LVL_SIZE));
            if self.occupied[level] == 0 {
                self.level_mask &= !(1 << level);
            }
        }
    }

    // ----- the slab -----

    fn entry(&self, i: u32) -> &Entry<T> {
        &self.pages[(i >> PAGE_BITS) as usize][i as usize & (PAGE_SIZE - 1)]
    }

    fn entry_mut(&mut self, i: u32) -> &mut Entry<T> {
        &mut self.pages[(i >> PAGE_BITS) as usize][i as usize & (PAGE_SIZE - 1)]
    }

    /// The deadline and list of a live id.
    fn lookup(&self, id: TimerId) -> Option<(u64, ListId)> {
        if id.index >= self.allocated {
            return None;
        }
        match self.entry(id.index) {
            Entry::Armed {
                deadline,
                generation,
                list,
                ..
            } if *generation == id.generation => Some((*deadline, *list)),
            _ => None,
        }
    }

    fn alloc(&mut self, deadline: u64, payload: T, list: ListId) -> TimerId {
        if self.free_head != NIL {
            let index = self.free_head;
            let entry = self.entry_mut(index);
            let (next_free, generation) = match entry {
                Entry::Vacant {
                    next_free,
                    generation,
                } => (*next_free, *generation),
                // The free list only holds vacant entries.
                Entry::Armed { generation, .. } => (NIL, generation.wrapping_add(1)),
            };
            *entry = Entry::Armed {
                deadline,
                payload,
                next: NIL,
                prev: NIL,
                generation,
                list,
            };
            self.free_head = next_free;
            return TimerId { index, generation };
        }
        let index = self.allocated;
        assert!(index < NIL, "timer wheel full: u32::MAX - 1 timers armed");
        if index as usize & (PAGE_SIZE - 1) == 0 {
            self.pages.push(Vec::with_capacity(PAGE_SIZE));
        }
        let entry = Entry::Armed {
            deadline,
            payload,
            next: NIL,
            prev: NIL,
            generation: 0,
            list,
        };
        if let Some(page) = self.pages.last_mut() {
            page.push(entry);
        }
        self.allocated += 1;
        TimerId {
            index,
            generation: 0,
        }
    }

    /// Free entry `i` (already unlinked), bumping its generation, and return its payload.
    fn free(&mut self, i: u32) -> Option<T> {
        let free_head = self.free_head;
        let entry = self.entry_mut(i);
        let generation = match entry {
            Entry::Armed { generation, .. } => *generation,
            Entry::Vacant { .. } => return None,
        };
        let old = core::mem::replace(
            entry,
            Entry::Vacant {
                next_free: free_head,
                generation: generation.wrapping_add(1),
            },
        );
        self.free_head = i;
        match old {
            Entry::Armed { payload, .. } => Some(payload),
            Entry::Vacant { .. } => None,
        }
    }

    fn links_of(&self, i: u32) -> (u32, u32) {
        match self.entry(i) {
            Entry::Armed { next, prev, .. } => (*next, *prev),
            Entry::Vacant { .. } => (NIL, NIL),
        }
    }

    fn prev_of(&self, i: u32) -> u32 {
        self.links_of(i).1
    }

    fn set_links(&mut self, i: u32, new_next: u32, new_prev: u32) {
        if let Entry::Armed { next, prev, .. } = self.entry_mut(i) {
            *next = new_next;
            *prev = new_prev;
        }
    }

    fn set_next(&mut self, i: u32, new_next: u32) {
        if let Entry::Armed { next, .. } = self.entry_mut(i) {
            *next = new_next;
        }
    }

    fn set_prev(&mut self, i: u32, new_prev: u32) {
        if let Entry::Armed { prev, .. } = self.entry_mut(i) {
            *prev = new_prev;
        }
    }
}

/// `⌈a / b⌉` without overflow (`b > 0`).
fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl<T> TimerWheel<T> {
        /// Check every structural invariant; panics with a description on the first violation.
        fn check_invariants(&self) {
            assert!(self.tick <= self.clock, "processed past the clock");
            let mut seen = 0usize;
            let due = self.due_list().pos();
            for pos in 0..self.heads.len() {
                let head = self.heads[pos];
                if pos < due {
                    let (level, index) = (pos / LVL_SIZE, pos % LVL_SIZE);
                    let bit = self.occupied[level] & (1u64 << index) != 0;
                    assert_eq!(bit, head != NIL, "occupancy bit of slot {level}/{index}");
                }
                if head == NIL {
                    continue;
                }
                let mut prev = NIL;
                let mut i = head;
                while i != NIL {
                    seen += 1;
                    let Entry::Armed {
                        deadline,
                        next,
                        prev: p,
                        list,
                        ..
                    } = self.entry(i)
                    else {
                        panic!("vacant entry {i} on list {pos}");
                    };
                    assert_eq!(list.pos(), pos, "entry {i} records the wrong list");
                    if i != head {
                        assert_eq!(*p, prev, "prev link of entry {i}");
                    }
                    let e = self.expiry_tick(*deadline);
                    if pos == due {
                        assert!(
                            e <= self.tick,
                            "due entry not due: e {e} tick {}",
                            self.tick
                        );
                    } else {
                        let level = pos / LVL_SIZE;
                        let shift = LVL_BITS * level as u32;
                        let block = e >> shift;
                        let current = self.tick >> shift;
                        assert_eq!(block & LVL_MASK, (pos % LVL_SIZE) as u64, "slot index");
                        assert!(
                            block > current,
                            "entry {i} behind the wheel at level {level}"
                        );
                        assert!(
                            block <= current + 64,
                            "entry {i} beyond level {level}'s reach"
                        );
                    }
                    prev = i;
                    i = *next;
                }
                assert_eq!(
                    self.prev_of(head),
                    prev,
                    "head of list {pos} must point at its tail"
                );
            }
            for level in 0..self.levels {
                assert_eq!(
                    self.level_mask & (1 << level) != 0,
                    self.occupied[level] != 0,
                    "level mask bit {level}"
                );
            }
            assert_eq!(seen, self.len, "len");
            let mut free = 0usize;
            let mut i = self.free_head;
            while i != NIL {
                let Entry::Vacant { next_free, .. } = self.entry(i) else {
                    panic!("armed entry {i} on the free list");
                };
                free += 1;
                i = *next_free;
            }
            assert_eq!(free + self.len, self.allocated as usize, "slab accounting");
        }
    }

    #[derive(Clone, Copy)]
    #[allow(dead_code)]
    struct Handle {
        index: u32,
        generation: u32,
    }

    #[test]
    fn entry_is_32_bytes_for_handles() {
        assert_eq!(TimerWheel::<u32>::ENTRY_BYTES, 32);
        assert_eq!(TimerWheel::<u64>::ENTRY_BYTES, 32);
        assert_eq!(TimerWheel::<Handle>::ENTRY_BYTES, 32);
        assert_eq!(TimerWheel::<()>::ENTRY_BYTES, 24);
    }

    #[test]
    fn levels_cover_every_instant() {
        let levels = |g| TimerWheel::<()>::new(Instant::ZERO, g).levels;
        // 1 ms: ticks up to 1.8e13 < 2^45 = 64^7.5, so 8 levels; 1 ns: 2^64 ticks, 11 levels.
        assert_eq!(levels(Duration::from_millis(1)), 8);
        assert_eq!(levels(Duration::from_nanos(1)), 11);
        assert_eq!(levels(Duration::from_secs(1)), 6);
        assert_eq!(levels(Duration::from_nanos(u64::MAX)), 1);
    }

    #[test]
    #[should_panic(expected = "non-zero")]
    fn zero_granularity_is_refused() {
        let _ = TimerWheel::<()>::new(Instant::ZERO, Duration::ZERO);
    }

    #[test]
    fn a_timer_armed_after_a_long_empty_spell_fires_on_time() {
        let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
        let mut fired = Vec::new();
        w.advance(Instant::from_secs(10), |_, p: u32| fired.push(p));
        w.arm(Instant::from_millis(10_005), 7);
        w.check_invariants();
        assert_eq!(w.next_deadline(), Some(Instant::from_millis(10_005)));
        w.advance(Instant::from_millis(10_004), |_, p| fired.push(p));
        assert!(fired.is_empty(), "not yet");
        w.advance(Instant::from_millis(10_006), |_, p| fired.push(p));
        assert_eq!(fired, [7]);
    }

    #[test]
    fn rearm_within_the_same_slot_moves_nothing() {
        let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
        let a = w.arm(Instant::from_millis(200), 1u32);
        let b = w.arm(Instant::from_millis(201), 2u32);
        let list = w.lookup(a).map(|(_, l)| l);
        // Level 1 slots span 64 ms: 200 ms and 230 ms (ticks 192..255) share one.
        assert!(w.rearm(a, Instant::from_millis(230)));
        assert_eq!(w.lookup(a).map(|(_, l)| l), list);
        assert_eq!(w.heads[list.map_or(0, ListId::pos)], a.index, "order kept");
        assert!(w.rearm(a, Instant::from_millis(300)));
        assert_ne!(w.lookup(a).map(|(_, l)| l), list);
        w.check_invariants();
        let mut fired = Vec::new();
        w.advance(Instant::from_secs(1), |_, p| fired.push(p));
        assert_eq!(fired, [2, 1]);
        let _ = b;
    }

    /// Tiny deterministic generator for the invariant test.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Random operations, with every structural invariant checked after each one.
        #[test]
        fn invariants_hold_under_random_operations(
            seed in any::<u64>(),
            granularity in prop_oneof![Just(1u64), Just(1_000), Just(777), Just(1_000_000)],
            start in prop_oneof![Just(0u64), any::<u64>(), Just(u64::MAX - 1_000_000_000)],
            crowded in any::<bool>(),
        ) {
            let mut rng = seed;
            let mut now = start;
            let mut w = TimerWheel::new(Instant::from_nanos(now), Duration::from_nanos(granularity));
            let mut ids = Vec::new();
            let g = granularity;
            for _ in 0..600 {
                let r = splitmix(&mut rng);
                let span = match r % 5 {
                    _ if crowded => 60 * g,
                    0 => 70 * g,
                    1 => 5_000 * g,
                    2 => 300_000 * g,
                    3 => u64::MAX,
                    _ => 2 * g,
                };
                let deadline = if crowded {
                    // One of the next two multiples of 64 ticks: reached by cascade and directly.
                    let block = (now / g / 64).saturating_add(1 + splitmix(&mut rng) % 2);
                    block.saturating_mul(64).saturating_mul(g)
                } else {
                    now.saturating_add(splitmix(&mut rng) % span).saturating_sub(g)
                };
                match (r >> 8) % 8 {
                    0..=2 => ids.push(w.arm(Instant::from_nanos(deadline), ())),
                    3 => {
                        if !ids.is_empty() {
                            let k = ids.swap_remove(splitmix(&mut rng) as usize % ids.len());
                            w.cancel(k);
                        }
                    }
                    4 | 5 => {
                        if !ids.is_empty() {
                            let k = ids[splitmix(&mut rng) as usize % ids.len()];
                            w.rearm(k, Instant::from_nanos(deadline));
                        }
                    }
                    6 => {
                        now = now.saturating_add(splitmix(&mut rng) % span.min(u64::MAX / 2));
                        let budget = (splitmix(&mut rng) % 4) as usize * if crowded { 1 } else { 7 };
                        w.advance_budget(Instant::from_nanos(now), budget, |_, ()| {});
                    }
                    _ => {
                        now = now.saturating_add(splitmix(&mut rng) % span.min(u64::MAX / 2));
                        w.advance(Instant::from_nanos(now), |_, ()| {});
                    }
                }
                w.check_invariants();
            }
        }
    }
}
