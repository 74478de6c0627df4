//! An epoll-like poller over one stack's sockets.
//!
//! The stack keeps a ready list (see `ustack_stack::socket`): each place where a socket
//! can become more ready (data queued, a connection to accept, send space freed, any TCP
//! state change) puts the socket's key on it once, with the kind of wake-up, the way
//! Linux's socket callbacks reach `ep_poll_callback`. [`Poller::wait`] takes that list,
//! keeps the keys it has registrations for on its own ready list, asks each socket what
//! it is ready for *now* ([`Stack::socket_readiness`], Linux `tcp_poll`) and reports what
//! matches the registration's interest, applying the edge, level and one-shot rules of
//! Linux's `ep_send_events` (`fs/eventpoll.c`). No call scans all sockets or all
//! registrations: the work of a `wait` is proportional to the keys woken since the last
//! one plus the level-triggered registrations still ready.
//!
//! ```text
//!   stack hooks ──mark(key, wake)──► stack ready list ──take_ready──► Poller::wait
//!                                                                      │ registered? armed?
//!                                                                      │ wake ∩ (interest|ERR|HUP)?
//!                                                                      ▼
//!                                              poller ready list ──socket_readiness──► events
//!                                              (level-triggered items go back on it)
//! ```
//!
//! # Semantics next to epoll(7)
//!
//! | | epoll(7) | [`Poller`] |
//! |---|---|---|
//! | add, modify, remove | `epoll_ctl` `ADD`/`MOD`/`DEL`; `EEXIST`, `ENOENT` | [`register`](Poller::register), [`modify`](Poller::modify), [`deregister`](Poller::deregister); [`PollerError::AlreadyRegistered`], [`PollerError::NotRegistered`] (same errnos) |
//! | user data | `epoll_event.data` (64 bits) | `token: u64` (and the [`SocketKey`]) in each [`Event`] |
//! | events | `EPOLLIN`, `EPOLLOUT`, `EPOLLRDHUP`, `EPOLLERR`, `EPOLLHUP`, `EPOLLPRI` | [`Readiness`]: the same bits but `EPOLLPRI` (no urgent data in ustack) |
//! | `EPOLLERR`, `EPOLLHUP` | always reported, whatever the interest | the same |
//! | level-triggered | reported by every `epoll_wait` while the socket is ready | the same: the item stays on the ready list while ready |
//! | edge-triggered (`EPOLLET`) | reported when a wake-up queued the item (new data, new connection, send space, state change) and the socket is ready for the interest then; a partial read does not re-arm, new data does | the same; wake-ups are listed below |
//! | one-shot (`EPOLLONESHOT`) | after one event the item is disarmed (not even `EPOLLERR`/`EPOLLHUP`) until `EPOLL_CTL_MOD` | the same: until [`modify`](Poller::modify) |
//! | ready at `ADD`/`MOD` | `ep_insert`/`ep_modify` poll the file and queue it if ready | the same: `register`/`modify` queue a check, reported by the next `wait` if ready (in edge mode too) |
//! | `maxevents` | the rest stay queued, first in line next time; level items re-queued at the tail | the same (FIFO) |
//! | timeout | `epoll_wait` sleeps up to `timeout` ms | [`wait`](Poller::wait) never sleeps: it returns what is ready now. Sleeping (on the device fd, an eventfd, the next timer) belongs to the shard's loop, which must not sleep while [`Poller::has_pending`] |
//! | `maxevents <= 0` | `EINVAL` | `max == 0` reports nothing (the wake-ups stay queued) |
//! | close | closing the last reference removes the registration | closing marks the socket on the stack's ready list; the next `wait` drops its registration without an event (a TCP connection closed with `tcp_close` counts as closed though it finishes as an orphan). [`deregister`](Poller::deregister) first to free the registration at once |
//! | one socket in many sets | allowed | one poller per stack: [`Stack::take_ready`] drains the stack's list, so a second poller would steal wake-ups |
//! | threads, `EPOLLEXCLUSIVE`, `EPOLLWAKEUP`, nested epoll | supported | not applicable: a shard owns its stack and poller |
//! | writable mark (TCP) | `__sk_stream_is_writeable`: at least a third of the send buffer free | the same |
//! | `EPOLLOUT` wake-up (TCP) | `sk_write_space` on an ACK, if a writer saw the buffer full (`SOCK_NOSPACE`) | on an ACK that takes the buffer from below the writable mark to above it, whoever looked |
//! | reads and `SO_RCVLOWAT` | readable from one byte; `SO_RCVLOWAT` settable | readable from one byte; no `SO_RCVLOWAT` |
//!
//! The wake-ups (what re-arms an edge-triggered registration), after Linux's callbacks:
//! - TCP data becomes readable in order (`sk_data_ready`): READABLE;
//! - an ACK takes the send buffer past its writable mark (`sk_write_space`): WRITABLE;
//! - any TCP state change (`sk_state_change`, which wakes every waiter): connect done or
//!   refused, FIN received, reset, retransmission or keepalive timeout, TIME-WAIT
//!   reached, our FIN queued; and `tcp_shutdown` (Linux `inet_shutdown`): all kinds;
//! - a connection joins a listener's accept queue: READABLE on the listener;
//! - a datagram is queued on a UDP socket: READABLE.
//!
//! A wake-up reaches a registration only if its kind meets the interest (or is ERROR/HUP,
//! or a state change), as `ep_poll_callback` filters by the poll key: data arriving does
//! not wake a registration that only asked for WRITABLE.
//!
//! What each socket reports is documented at [`Stack::socket_readiness`] (Linux
//! `tcp_poll`): e.g. after a reset, `EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP |
//! EPOLLRDHUP` until the error is read, as on Linux.

use std::collections::VecDeque;

use ustack_stack::{Readiness, SocketKey, Stack};

use crate::dense;
/// How a registration reports readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Level-triggered (epoll's default): every [`Poller::wait`] reports the socket while
    /// it is ready for the interest.
    Level,
    /// Edge-triggered (`EPOLLET`): reported once per wake-up (see the module docs); read
    /// or write until `WouldBlock` before waiting again.
    Edge,
}

/// One ready socket, as [`Poller::wait`] reports it (`struct epoll_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The token given at registration (`epoll_event.data`).
    pub token: u64,
    /// The socket.
    pub key: SocketKey,
    /// What it is ready for: its readiness within the interest, plus ERROR and HUP.
    pub readiness: Readiness,
}

/// Errors of the registration calls, with the errno `epoll_ctl` returns for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollerError {
    /// EEXIST: the socket is registered already.
    AlreadyRegistered,
    /// ENOENT: the socket is not registered.
    NotRegistered,
}

impl PollerError {
    /// The Linux errno value.
    pub fn errno(self) -> i32 {
        match self {
            PollerError::AlreadyRegistered => 17,
            PollerError::NotRegistered => 2,
        }
    }
}

impl core::fmt::Display for PollerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PollerError::AlreadyRegistered => "socket already registered (EEXIST)",
            PollerError::NotRegistered => "socket not registered (ENOENT)",
        })
    }
}

impl std::error::Error for PollerError {}

/// Reported whatever the interest (epoll adds `EPOLLERR | EPOLLHUP` to every item).
const ALWAYS: Readiness = Readiness::ERROR.union(Readiness::HUP);

/// `Registration::flags`: the slot holds a registration.
const PRESENT: u8 = 1 << 0;
/// Edge-triggered ([`Mode::Edge`]); level-triggered without it.
const EDGE: u8 = 1 << 1;
/// One-shot (`EPOLLONESHOT`).
const ONESHOT: u8 = 1 << 2;
/// Armed: cleared once a one-shot registration has fired, until `modify`.
const ARMED: u8 = 1 << 3;
/// The slot is on the poller's ready list (Linux: `rdllink` linked). It may stay set after
/// the registration is removed (its entry is still on the list); a registration made in
/// the slot before that entry is reached uses it instead of queuing a second one.
const QUEUED: u8 = 1 << 4;

/// One registered socket (Linux `struct epitem`), in the slot of its socket: 16 bytes
/// (the token as two halves, so that the entry aligns on 4).
#[derive(Debug, Clone, Copy, Default)]
struct Registration {
    /// The caller's token (`epoll_event.data`), low and high halves.
    token: [u32; 2],
    /// The socket's generation: a wake-up or call for another socket of the slot is not
    /// this registration's.
    generation: u32,
    interest: Readiness,
    /// [`PRESENT`], [`EDGE`], [`ONESHOT`], [`ARMED`], [`QUEUED`].
    flags: u8,
}

impl Registration {
    #[inline]
    fn token(&self) -> u64 {
        u64::from(self.token[0]) | (u64::from(self.token[1]) << 32)
    }

    #[inline]
    fn set(&mut self, token: u64, interest: Readiness, mode: Mode, oneshot: bool) {
        self.token = [token as u32, (token >> 32) as u32];
        self.interest = interest;
        let mut flags = PRESENT | ARMED | (self.flags & QUEUED);
        if mode == Mode::Edge {
            flags |= EDGE;
        }
        if oneshot {
            flags |= ONESHOT;
        }
        self.flags = flags;
    }

    /// Whether it is the registration of `key` (whose slot it sits in).
    #[inline]
    fn is(&self, key: SocketKey) -> bool {
        self.flags & PRESENT != 0 && self.generation == key.generation()
    }
}

/// An epoll-like poller over one [`Stack`]'s sockets. See the module docs for the
/// semantics and how they compare with epoll(7).
///
/// Registrations live in one vector per socket table, indexed by the socket's slot
/// ([`SocketKey::index`]): 16 bytes a slot, no hashing, grown as the [`dense`] tables are
/// (by an eighth, not by doubling).
#[derive(Debug, Default)]
pub struct Poller {
    registrations: [Vec<Registration>; SocketKey::TABLES],
    /// Registrations held.
    len: usize,
    /// Slots to look at in the next `wait` (Linux `eventpoll.rdllist`), each at most once
    /// (the ones with [`QUEUED`]); the key's generation may be that of a registration
    /// since removed (the slot's current one is looked at).
    ready: VecDeque<SocketKey>,
    /// Scratch for the stack's ready list.
    harvest: Vec<(SocketKey, Readiness)>,
}

impl Poller {
    /// An empty poller (`epoll_create1`).
    pub fn new() -> Poller {
        Poller::default()
    }

    /// Registrations held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No registrations.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Make room for registrations of TCP connections in slots below `connections`, at
    /// once (a server that knows how many to expect; otherwise the table grows by an
    /// eighth at a time).
    pub fn reserve(&mut self, connections: usize) {
        // Table 0: TCP connections (see `SocketKey::table`).
        let table = &mut self.registrations[0];
        table.reserve_exact(connections.saturating_sub(table.len()));
    }

    /// Heap bytes held: the registration tables (allocated capacity), the ready list and
    /// the harvest scratch (Linux: an `epitem` per registration, in its own slab).
    pub fn heap_bytes(&self) -> usize {
        self.registrations
            .iter()
            .map(|t| t.capacity() * size_of::<Registration>())
            .sum::<usize>()
            + self.ready.capacity() * size_of::<SocketKey>()
            + self.harvest.capacity() * size_of::<(SocketKey, Readiness)>()
    }

    #[inline]
    fn slot(&self, key: SocketKey) -> Option<&Registration> {
        self.registrations[key.table()].get(key.index() as usize)
    }

    #[inline]
    fn slot_mut(&mut self, key: SocketKey) -> Option<&mut Registration> {
        self.registrations[key.table()].get_mut(key.index() as usize)
    }

    /// The registration of `key`, if it has one.
    #[inline]
    fn get_mut(&mut self, key: SocketKey) -> Option<&mut Registration> {
        self.slot_mut(key).filter(|r| r.is(key))
    }

    /// Watch `key` for `interest` (`EPOLL_CTL_ADD`). ERROR and HUP are always reported.
    /// If the socket is already ready, the next [`wait`](Poller::wait) reports it, in
    /// either mode.
    pub fn register(
        &mut self,
        key: SocketKey,
        token: u64,
        interest: Readiness,
        mode: Mode,
        oneshot: bool,
    ) -> Result<(), PollerError> {
        if self.slot(key).is_some_and(|r| r.is(key)) {
            return Err(PollerError::AlreadyRegistered);
        }
        let table = &mut self.registrations[key.table()];
        dense::ensure(table, key.index() as usize, Registration::default());
        let reg = &mut table[key.index() as usize];
        if reg.flags & PRESENT == 0 {
            self.len += 1;
        }
        // Else the registration of a socket that was closed and whose slot the stack gave
        // to `key`: it is gone with its socket (the next `wait` would have dropped it).
        reg.generation = key.generation();
        reg.set(token, interest, mode, oneshot);
        if reg.flags & QUEUED == 0 {
            reg.flags |= QUEUED;
            self.ready.push_back(key);
        }
        Ok(())
    }

    /// Change a registration (`EPOLL_CTL_MOD`): new token, interest and mode, and re-arm
    /// a one-shot registration. If the socket is ready for the new interest, the next
    /// [`wait`](Poller::wait) reports it, in either mode.
    pub fn modify(
        &mut self,
        key: SocketKey,
        token: u64,
        interest: Readiness,
        mode: Mode,
        oneshot: bool,
    ) -> Result<(), PollerError> {
        let reg = self.get_mut(key).ok_or(PollerError::NotRegistered)?;
        reg.set(token, interest, mode, oneshot);
        if reg.flags & QUEUED == 0 {
            reg.flags |= QUEUED;
            self.ready.push_back(key);
        }
        Ok(())
    }

    /// Stop watching `key` (`EPOLL_CTL_DEL`). Closing a socket without it is fine: the
    /// next [`wait`](Poller::wait) drops the registration.
    pub fn deregister(&mut self, key: SocketKey) -> Result<(), PollerError> {
        let reg = self.get_mut(key).ok_or(PollerError::NotRegistered)?;
        reg.flags &= QUEUED;
        self.len -= 1;
        Ok(())
    }

    /// Whether a [`wait`](Poller::wait) now may report something: the stack has
    /// wake-ups to hand over, or registrations are queued for a look (level-triggered
    /// ones that were still ready, new or modified ones). The shard's loop must not sleep
    /// while this holds.
    pub fn has_pending(&self, stack: &Stack) -> bool {
        // Wake-ups with no registration to reach report nothing.
        !self.ready.is_empty() || (self.len > 0 && stack.has_ready())
    }

    /// Report up to `max` ready sockets, appended to `events`; returns how many.
    ///
    /// Never blocks (unlike `epoll_wait`, there is no timeout here: the caller's loop
    /// sleeps). Takes the stack's ready list, queues the registrations its wake-ups reach,
    /// then, in order, asks each queued socket its readiness: one that is ready for its
    /// interest (or has ERROR/HUP) is reported; a one-shot registration is then disarmed,
    /// a level-triggered one goes back to the end of the list for the next `wait`, an
    /// edge-triggered one waits for its next wake-up. One not ready any more leaves the
    /// list. Registrations left over by `max` come first next time.
    pub fn wait(&mut self, stack: &mut Stack, events: &mut Vec<Event>, max: usize) -> usize {
        // One wake-up and nothing queued from before (a request-response's usual wait):
        // its key goes from the stack's list to the look straight, through neither the
        // harvest vector nor the ready list. Not with anything queued (it comes first), nor
        // with `max == 0` (the wake-up stays queued).
        if self.ready.is_empty()
            && max > 0
            && let Some((key, wake)) = stack.take_ready_single()
        {
            return self.wait_single(stack, key, wake, events);
        }
        // ep_poll_callback, for the wake-ups the stack gathered since the last call.
        stack.take_ready(&mut self.harvest);
        for (key, wake) in self.harvest.drain(..) {
            let Some(reg) = self.registrations[key.table()]
                .get_mut(key.index() as usize)
                .filter(|r| r.is(key))
            else {
                continue;
            };
            if reg.flags & (QUEUED | ARMED) != ARMED || !wake.intersects(reg.interest | ALWAYS) {
                continue;
            }
            reg.flags |= QUEUED;
            self.ready.push_back(key);
        }
        // ep_send_events: look only at what was queued before this pass, so that level
        // items put back are not reported twice in one call.
        let mut reported = 0;
        let mut to_look_at = self.ready.len();
        while reported < max && to_look_at > 0 {
            to_look_at -= 1;
            let Some(queued) = self.ready.pop_front() else {
                break;
            };
            let Some(reg) = self.registrations[queued.table()].get_mut(queued.index() as usize)
            else {
                continue;
            };
            reg.flags &= !QUEUED;
            if look(reg, &mut self.len, &mut self.ready, stack, queued, events) {
                reported += 1;
            }
        }
        reported
    }

    /// [`wait`](Self::wait) for the one wake-up of `key` with an empty ready list: what
    /// the harvest and the look at the list would do for it, in one step.
    #[inline]
    fn wait_single(
        &mut self,
        stack: &Stack,
        key: SocketKey,
        wake: Readiness,
        events: &mut Vec<Event>,
    ) -> usize {
        let Some(reg) = self.registrations[key.table()]
            .get_mut(key.index() as usize)
            .filter(|r| r.is(key))
        else {
            return 0;
        };
        // (QUEUED is clear: the ready list is empty. ARMED is the look's to test.)
        if !wake.intersects(reg.interest | ALWAYS) {
            return 0;
        }
        usize::from(look(
            reg,
            &mut self.len,
            &mut self.ready,
            stack,
            key,
            events,
        ))
    }
}

/// `ep_send_events` for one registration taken off the ready list (its [`QUEUED`] flag
/// clear; `queued` is the key it was queued with): reports it in `events` if its socket is
/// ready for the interest (or has ERROR/HUP), then disarms a one-shot registration or puts
/// a level-triggered one back on `ready`; drops a registration whose socket was closed
/// (`len` counts one less). Whether it reported.
#[inline]
fn look(
    reg: &mut Registration,
    len: &mut usize,
    ready: &mut VecDeque<SocketKey>,
    stack: &Stack,
    queued: SocketKey,
    events: &mut Vec<Event>,
) -> bool {
    if reg.flags & (PRESENT | ARMED) != PRESENT | ARMED {
        return false;
    }
    // The slot's registration now (made after the one that queued it, perhaps).
    let key = queued.with_generation(reg.generation);
    let readiness = match stack.socket_readiness(key) {
        Ok(r) => r & (reg.interest | ALWAYS),
        Err(_) => {
            // Closed behind the poller's back: drop it, as a close drops an epitem.
            reg.flags = 0;
            *len -= 1;
            return false;
        }
    };
    if readiness.is_empty() {
        return false;
    }
    events.push(Event {
        token: reg.token(),
        key,
        readiness,
    });
    if reg.flags & ONESHOT != 0 {
        reg.flags &= !ARMED;
    } else if reg.flags & EDGE == 0 {
        reg.flags |= QUEUED;
        ready.push_back(key);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_takes_16_bytes() {
        assert_eq!(size_of::<Registration>(), 16);
    }
}
