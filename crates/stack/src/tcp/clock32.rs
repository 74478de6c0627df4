//! 32-bit deadlines for records kept by the million: milliseconds of the stack clock,
//! wrapping (Linux keeps `tw_timer`, request timers and a connection's timers in 32-bit
//! jiffies likewise). A deadline is read back against a nearby instant, so it is
//! meaningful while it lies within ±24 days of that instant; the records that use it
//! (TIME-WAIT for 60 s, SYN-queue requests for at most a few minutes, a connection's
//! timers: the RTO at most 120 s, keepalive at most `tcp_keepalive_time`, hours) stay far
//! inside that.

use core::cmp::Reverse;
use core::time::Duration;
use std::collections::{BinaryHeap, VecDeque};

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

/// Deadlines filed nearly always in order, with a key each: a FIFO for those filed in
/// order (O(1) each way), a heap beside it for the few that would break its order, the
/// earlier of the two fronts first. For the records whose first deadline is always the
/// same wait from when they are made (TIME-WAIT's 2*MSL, a request's first SYN-ACK
/// timeout), re-filed at a later deadline now and then (a restarted record, a
/// retransmission's backoff). Deadlines read wrap-aware ([`Ms32`]'s order).
#[derive(Debug)]
pub(crate) struct DeadlineQueue<K> {
    fifo: VecDeque<(Ms32, K)>,
    heap: BinaryHeap<Reverse<(Ms32, K)>>,
    /// Entries taken off the FIFO's front so far (wrapping): with it a FIFO entry's
    /// [`Ticket`] gives its position, for [`DeadlineQueue::cancel`].
    popped: u32,
}

/// Where [`DeadlineQueue::push`] filed an entry in the FIFO (its position plus the
/// entries popped before it, wrapping), so that it can be cancelled in O(1); only a hint,
/// checked against the entry's key ([`DeadlineQueue::cancel`]). [`NO_TICKET`] for an
/// entry filed in the heap.
pub(crate) type Ticket = u32;

/// The [`Ticket`] of an entry not in the FIFO.
pub(crate) const NO_TICKET: Ticket = u32::MAX;

impl<K: Ord + Copy> DeadlineQueue<K> {
    pub(crate) fn new() -> Self {
        DeadlineQueue {
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            popped: 0,
        }
    }

    /// Entries filed.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Entries room is held for.
    pub(crate) fn capacity(&self) -> usize {
        self.fifo.capacity() + self.heap.capacity()
    }

    /// File `key` at `deadline`: at the FIFO's back if that keeps its order, else in the
    /// heap. Returns the entry's [`Ticket`].
    #[inline]
    pub(crate) fn push(&mut self, deadline: Ms32, key: K) -> Ticket {
        if self.fifo.back().is_none_or(|&(last, _)| last <= deadline) {
            let ticket = self.popped.wrapping_add(self.fifo.len() as u32);
            self.fifo.push_back((deadline, key));
            ticket
        } else {
            self.heap.push(Reverse((deadline, key)));
            NO_TICKET
        }
    }

    /// Cancel the FIFO entry of `ticket` if it is still `key`'s, in O(1): its key becomes
    /// `dead` (which the owner skips when it comes up), and dead entries at the front go
    /// at once, so that the next deadline is a live one's as far as the front goes (Linux
    /// deletes a request's timer when the handshake completes, `inet_csk_reqsk_queue_drop`
    /// -> `reqsk_queue_unlink` -> `timer_delete`). A ticket the queue no longer holds (the
    /// entry came up, or a [`DeadlineQueue::retain`] moved it) changes nothing: that
    /// entry stays, cancelled lazily by its owner's check as before.
    #[inline]
    pub(crate) fn cancel(&mut self, ticket: Ticket, key: &K, dead: K) {
        let pos = ticket.wrapping_sub(self.popped) as usize;
        let Some(e) = self.fifo.get_mut(pos) else {
            return;
        };
        if e.1 != *key {
            return;
        }
        if pos != 0 {
            e.1 = dead;
            return;
        }
        // At the front (the oldest request completes first): taken off, with the
        // cancelled ones behind it.
        self.fifo.pop_front();
        self.popped = self.popped.wrapping_add(1);
        while self.fifo.front().is_some_and(|e| e.1 == dead) {
            self.fifo.pop_front();
            self.popped = self.popped.wrapping_add(1);
        }
    }

    /// The earliest entry (the FIFO's on a tie).
    #[inline]
    pub(crate) fn front(&self) -> Option<(Ms32, K)> {
        self.first().map(|(e, _)| e)
    }

    /// [`DeadlineQueue::front`], and whether it is the FIFO's.
    #[inline(always)]
    fn first(&self) -> Option<((Ms32, K), bool)> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) if b.0 < a.0 => Some((*b, false)),
            (Some(a), _) => Some((*a, true)),
            (None, b) => b.map(|r| (r.0, false)),
        }
    }

    /// Take the earliest entry off, if it is due at `now`.
    #[inline(always)]
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Ms32, K)> {
        let (e, fifo) = self.first()?;
        if !e.0.due(now) {
            return None;
        }
        if fifo {
            self.fifo.pop_front();
            self.popped = self.popped.wrapping_add(1);
        } else {
            self.heap.pop();
        }
        Some(e)
    }

    /// Keep only the entries `keep` holds to, and give the room of the rest back (down
    /// to `spare` entries beyond those kept).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(Ms32, &K) -> bool, spare: usize) {
        self.fifo.retain(|(d, k)| keep(*d, k));
        self.heap.retain(|Reverse((d, k))| keep(*d, k));
        self.fifo.shrink_to(2 * self.fifo.len() + spare);
        self.heap.shrink_to(2 * self.heap.len());
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Ms32, K)> + '_ {
        self.fifo
            .iter()
            .copied()
            .chain(self.heap.iter().map(|r| r.0))
    }

    /// Entries in the heap (the ones filed out of order).
    #[cfg(test)]
    pub(crate) fn out_of_order(&self) -> usize {
        self.heap.len()
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

    /// A ticket cancels its own entry only: one whose entry came up, or that names
    /// another key, changes nothing; a cancelled entry at the front goes at once.
    #[test]
    fn a_ticket_cancels_its_own_entry_only() {
        const DEAD: u32 = 0;
        let mut q = DeadlineQueue::<u32>::new();
        let d = |ms: u64| Ms32::ceil(Instant::from_millis(ms));
        let t1 = q.push(d(10), 1);
        let t2 = q.push(d(20), 2);
        let t3 = q.push(d(30), 3);
        assert_eq!(q.push(d(5), 9), NO_TICKET, "out of order: the heap");
        q.cancel(t2, &7, DEAD);
        assert!(q.iter().any(|(_, k)| k == 2), "another key: kept");
        q.cancel(t2, &2, DEAD);
        assert_eq!(q.len(), 4, "cancelled in place");
        assert_eq!(q.pop_due(Instant::from_millis(10)).map(|e| e.1), Some(9));
        q.cancel(t1, &1, DEAD);
        assert_eq!(q.len(), 1, "the front and the cancelled one behind it");
        assert_eq!(q.front(), Some((d(30), 3)));
        assert_eq!(q.pop_due(Instant::from_millis(30)), Some((d(30), 3)));
        q.cancel(t3, &3, DEAD);
        let t4 = q.push(d(40), 4);
        q.cancel(t3, &4, DEAD);
        assert_eq!(q.len(), 1, "a ticket whose entry came up names nothing");
        q.cancel(t4, &3, DEAD);
        assert_eq!(q.front(), Some((d(40), 4)), "its place, another key: kept");
        q.cancel(t4, &4, DEAD);
        assert_eq!(q.len(), 0);
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
