//! Socket readiness and the stack's ready list: the sans-I/O half of an epoll-like poller.
//!
//! Linux tells epoll about a socket through the socket's wake-up callbacks
//! (`sk_data_ready`, `sk_write_space`, `sk_state_change`, `sk_error_report` in
//! `net/core/sock.c`), which reach `ep_poll_callback` (`fs/eventpoll.c`): the waiting item
//! goes onto the epoll instance's ready list, and `epoll_wait` later asks the socket what
//! it is ready for (`tcp_poll`, `datagram_poll`) and reports that. Nothing scans the
//! sockets.
//!
//! ustack keeps the same split:
//! - **Hooks.** Every place in the stack where a socket can become *more* ready calls
//!   `ReadyList::mark` with the socket's [`SocketKey`] and the kind of wake-up (Linux's
//!   poll key): data queued ([`Readiness::READABLE`]), send-buffer space freed past the
//!   writable mark ([`Readiness::WRITABLE`]), a connection added to a listener's accept
//!   queue (READABLE on the listener), and every TCP state change, which covers connect
//!   completing, FIN, reset, timeouts and shutdown ([`Readiness::ALL`], as Linux's
//!   `sock_def_wakeup` wakes with no key); closing a socket marks it too, so that a poller
//!   drops its registration (Linux's close removes the epoll items). A mark is O(1): one
//!   load and compare of the socket's ready-list slot, and one push the first time only. A
//!   socket is in the list at most once (an entry of a closed socket whose slot was reused
//!   before the harvest is skipped), so the list is bounded by the number of sockets
//!   marked since the last harvest.
//! - **Harvest.** [`Stack::take_ready`] hands the marked keys and their accumulated wake-up
//!   kinds to the poller, which applies its registrations (interest, edge or level,
//!   one-shot). Readiness itself is never stored: [`Stack::readiness`] computes it from the
//!   socket's state on demand, as `tcp_poll` does, so it cannot go stale.
//!
//! The poller (`ustack_runtime::poller`) documents the user-visible semantics against
//! epoll(7).

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign};

use crate::tcp::tcb::{Tcb, TcbFlags};
use crate::tcp::{ListenerHandle, State, TcpHandle};
use crate::udp::UdpHandle;
use crate::{Error, Stack};

/// Any socket of a stack: what a poller registers and the ready list carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocketKey {
    /// A TCP connection (from `tcp_connect` or `tcp_accept`).
    Tcp(TcpHandle),
    /// A listening TCP socket.
    Listener(ListenerHandle),
    /// A UDP socket.
    Udp(UdpHandle),
}

impl From<TcpHandle> for SocketKey {
    fn from(h: TcpHandle) -> Self {
        SocketKey::Tcp(h)
    }
}

impl From<ListenerHandle> for SocketKey {
    fn from(h: ListenerHandle) -> Self {
        SocketKey::Listener(h)
    }
}

impl From<UdpHandle> for SocketKey {
    fn from(h: UdpHandle) -> Self {
        SocketKey::Udp(h)
    }
}

impl SocketKey {
    /// Which slab and slot the socket lives in, and its generation.
    #[inline]
    fn parts(self) -> (usize, u32, u32) {
        match self {
            SocketKey::Tcp(h) => (0, h.index, h.generation),
            SocketKey::Listener(h) => (1, h.index, h.generation),
            SocketKey::Udp(h) => (2, h.index, h.generation),
        }
    }

    /// Which of the stack's socket tables holds it: 0 TCP connections, 1 listeners, 2 UDP
    /// sockets (fewer than [`SocketKey::TABLES`]).
    #[inline]
    pub fn table(self) -> usize {
        self.parts().0
    }

    /// The number of socket tables ([`SocketKey::table`]).
    pub const TABLES: usize = 3;

    /// Its slot in its table: a small dense integer (a slab index; freed slots are reused
    /// first), so a caller can keep per-socket state in a vector indexed by it, as a
    /// process indexes its state by file descriptor. The generation tells the sockets
    /// that used the slot apart.
    #[inline]
    pub fn index(self) -> u32 {
        self.parts().1
    }

    /// The slot's generation when the socket was made: a later socket in the same slot has
    /// another.
    #[inline]
    pub fn generation(self) -> u32 {
        self.parts().2
    }

    /// The key of the same table and slot with another generation.
    #[inline]
    pub fn with_generation(self, generation: u32) -> SocketKey {
        match self {
            SocketKey::Tcp(h) => SocketKey::Tcp(TcpHandle {
                index: h.index,
                generation,
            }),
            SocketKey::Listener(h) => SocketKey::Listener(ListenerHandle {
                index: h.index,
                generation,
            }),
            SocketKey::Udp(h) => SocketKey::Udp(UdpHandle {
                index: h.index,
                generation,
            }),
        }
    }
}

impl TcpHandle {
    /// The connection's slot in the stack's TCB slab: a small dense integer (see
    /// [`SocketKey::index`]).
    #[inline]
    pub fn index(self) -> u32 {
        self.index
    }

    /// The slot's generation (see [`SocketKey::generation`]).
    #[inline]
    pub fn generation(self) -> u32 {
        self.generation
    }

    /// The handle of slot `index` at `generation`, as [`TcpHandle::index`] and
    /// [`TcpHandle::generation`] gave them: for an application that keeps the two apart
    /// (e.g. the slot as a vector index, the generation in the entry). A handle that
    /// names no live connection fails every call with `EBADF`, never reaches another.
    #[inline]
    pub fn from_parts(index: u32, generation: u32) -> TcpHandle {
        TcpHandle { index, generation }
    }
}

/// What a socket is ready for: a small bit set whose members are Linux's `EPOLL*` events.
/// [`Readiness::to_epoll`] and [`Readiness::from_epoll`] convert to and from Linux's bit
/// values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Readiness(u8);

impl Readiness {
    /// Nothing.
    pub const EMPTY: Readiness = Readiness(0);
    /// `EPOLLIN`: a read would not block: data to read, end of stream (the peer's FIN),
    /// a pending error, or (listener) a connection to accept.
    pub const READABLE: Readiness = Readiness(1 << 0);
    /// `EPOLLOUT`: a write would not block: the send buffer is below its writable mark,
    /// or writing is shut down (the write then fails at once with EPIPE).
    pub const WRITABLE: Readiness = Readiness(1 << 1);
    /// `EPOLLRDHUP`: the peer closed its side (FIN received), or reading was shut down.
    pub const RDHUP: Readiness = Readiness(1 << 2);
    /// `EPOLLHUP`: both directions are shut down, or the connection is closed (reset,
    /// timed out, or finished through TIME-WAIT).
    pub const HUP: Readiness = Readiness(1 << 3);
    /// `EPOLLERR`: an error is pending (ECONNRESET, ECONNREFUSED, ETIMEDOUT); the next
    /// read or write returns it once.
    pub const ERROR: Readiness = Readiness(1 << 4);
    /// Every kind: the wake-up of a state change, which may change anything.
    pub const ALL: Readiness = Readiness(0x1f);

    const EPOLL: [(Readiness, u32, &'static str); 5] = [
        (Readiness::READABLE, 0x001, "EPOLLIN"),
        (Readiness::WRITABLE, 0x004, "EPOLLOUT"),
        (Readiness::ERROR, 0x008, "EPOLLERR"),
        (Readiness::HUP, 0x010, "EPOLLHUP"),
        (Readiness::RDHUP, 0x2000, "EPOLLRDHUP"),
    ];

    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every member of `other` is set.
    #[inline]
    pub const fn contains(self, other: Readiness) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any member of `other` is set.
    #[inline]
    pub const fn intersects(self, other: Readiness) -> bool {
        self.0 & other.0 != 0
    }

    /// The members of either (`|`, usable in constants).
    #[inline]
    pub const fn union(self, other: Readiness) -> Readiness {
        Readiness(self.0 | other.0)
    }

    /// The members of `self` that are not in `other`.
    #[inline]
    pub const fn without(self, other: Readiness) -> Readiness {
        Readiness(self.0 & !other.0)
    }

    /// Linux's `EPOLL*` bits (`EPOLLIN` 0x001, `EPOLLOUT` 0x004, `EPOLLERR` 0x008,
    /// `EPOLLHUP` 0x010, `EPOLLRDHUP` 0x2000).
    pub fn to_epoll(self) -> u32 {
        Self::EPOLL
            .iter()
            .filter(|(r, ..)| self.contains(*r))
            .fold(0, |acc, (_, bit, _)| acc | bit)
    }

    /// From Linux's `EPOLL*` bits; bits ustack has no member for (`EPOLLPRI`,
    /// `EPOLLRDNORM`, `EPOLLET`, ...) are ignored.
    pub fn from_epoll(bits: u32) -> Readiness {
        Self::EPOLL
            .iter()
            .filter(|(_, bit, _)| bits & bit != 0)
            .fold(Readiness::EMPTY, |acc, (r, ..)| acc | *r)
    }
}

impl BitOr for Readiness {
    type Output = Readiness;
    #[inline]
    fn bitor(self, rhs: Readiness) -> Readiness {
        Readiness(self.0 | rhs.0)
    }
}

impl BitOrAssign for Readiness {
    #[inline]
    fn bitor_assign(&mut self, rhs: Readiness) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Readiness {
    type Output = Readiness;
    #[inline]
    fn bitand(self, rhs: Readiness) -> Readiness {
        Readiness(self.0 & rhs.0)
    }
}

impl BitAndAssign for Readiness {
    #[inline]
    fn bitand_assign(&mut self, rhs: Readiness) {
        self.0 &= rhs.0;
    }
}

impl fmt::Debug for Readiness {
    /// `EPOLLIN | EPOLLOUT`, or `0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("0");
        }
        let mut first = true;
        for (r, _, name) in Self::EPOLL {
            if self.contains(r) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// Linux `__sk_stream_is_writeable` (`include/net/sock.h`) with `tcp_notsent_lowat` at its
/// default (no limit): the send buffer is not full, and its free space is at least half of
/// what it holds (`sk_stream_wspace(sk) >= sk_stream_min_wspace(sk)`), i.e. at least a
/// third of it is free. Below that mark a writer is not woken for every freed byte.
#[inline]
pub(crate) fn sk_stream_is_writeable(tcb: &Tcb) -> bool {
    let queued = tcb.sndbuf.len();
    let limit = tcb.sndbuf_limit as usize;
    queued < limit && limit - queued >= queued / 2
}

/// A socket's place in the ready list: the low byte holds [`QUEUED`] and the wake-up kinds
/// gathered since the last harvest, the upper 24 bits the low bits of the generation of
/// the socket the byte belongs to (so that a queued key of a socket that was closed, and
/// whose slot was reused before the harvest, is told apart from its successor's).
type SlotState = u32;
/// The socket's key is in the queue.
const QUEUED: u32 = 0x80;
/// The wake-up kinds (a [`Readiness`]).
const WAKE_MASK: u32 = Readiness::ALL.0 as u32;

#[inline]
fn gen_tag(generation: u32) -> u32 {
    generation << 8
}

/// The stack's ready list (Linux `eventpoll.rdllist`, fed by `ep_poll_callback`): the keys
/// of sockets whose readiness may have grown since the last [`Stack::take_ready`], each at
/// most once, in the order they were first marked.
#[derive(Debug, Default)]
pub(crate) struct ReadyList {
    queue: Vec<SocketKey>,
    /// Per socket slot, by kind (TCP connections, listeners, UDP): 4 bytes per slot,
    /// grown on the first mark of a slot.
    slots: [Vec<SlotState>; 3],
}

impl ReadyList {
    /// A wake-up: `key`'s readiness may have grown in the ways `wake` names. O(1): the
    /// socket's slot is checked, and the key is pushed only if it is not queued already.
    /// A socket already queued (every segment after the first of a batch the reader has
    /// not harvested yet) is one masked compare and an OR, inline; so is the first mark
    /// after a harvest (the slot known, the queue with room: one store and one push, the
    /// request/response case); the rest (a new slot, a queue to grow) out of line.
    #[inline(always)]
    pub(crate) fn mark(&mut self, key: SocketKey, wake: Readiness) {
        let (kind, index, generation) = key.parts();
        if let Some(slot) = self.slots[kind].get_mut(index as usize) {
            if *slot & !(QUEUED - 1) == gen_tag(generation) | QUEUED {
                *slot |= u32::from(wake.0);
                return;
            }
            if self.queue.len() < self.queue.capacity() {
                *slot = gen_tag(generation) | QUEUED | u32::from(wake.0);
                self.queue.push(key);
                return;
            }
        }
        self.mark_queue(key, wake);
    }

    /// [`ReadyList::mark`] of a socket not queued (or queued for an earlier socket in its
    /// slot, whose entry will be skipped at harvest): queue this one.
    #[inline(never)]
    fn mark_queue(&mut self, key: SocketKey, wake: Readiness) {
        let (kind, index, generation) = key.parts();
        let slots = &mut self.slots[kind];
        let index = index as usize;
        if index >= slots.len() {
            slots.resize(index + 1, 0);
        }
        slots[index] = gen_tag(generation) | QUEUED | u32::from(wake.0);
        self.queue.push(key);
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The one queued key with its wake-up kinds, taking it, when the list holds exactly
    /// one (`None`, the list untouched, otherwise). A lone key is its slot's current one:
    /// a mark for a later socket in the slot would have queued a second key.
    #[inline]
    fn take_single(&mut self) -> Option<(SocketKey, Readiness)> {
        let [key] = self.queue[..] else {
            return None;
        };
        self.queue.clear();
        let (kind, index, _) = key.parts();
        let slot = &mut self.slots[kind][index as usize];
        let wake = Readiness((*slot & WAKE_MASK) as u8);
        *slot &= !0xff;
        Some((key, wake))
    }

    /// Move every queued key with its wake-up kinds to `out`, leaving the list empty.
    fn drain_into(&mut self, out: &mut Vec<(SocketKey, Readiness)>) {
        for key in self.queue.drain(..) {
            let (kind, index, generation) = key.parts();
            let Some(slot) = self.slots[kind].get_mut(index as usize) else {
                continue;
            };
            if *slot & !0xff != gen_tag(generation) || *slot & QUEUED == 0 {
                continue; // superseded by a later socket in the same slot
            }
            out.push((key, Readiness((*slot & WAKE_MASK) as u8)));
            *slot &= !0xff;
        }
    }
}

impl Stack {
    /// What the socket is ready for now, computed from its state (Linux `tcp_poll`,
    /// `inet_csk_listen_poll`, `udp_poll`). [`Readiness::EMPTY`] for a handle that names no
    /// socket; see [`Stack::socket_readiness`] to tell the two apart.
    pub fn readiness(&self, key: SocketKey) -> Readiness {
        self.socket_readiness(key).unwrap_or(Readiness::EMPTY)
    }

    /// Like [`Stack::readiness`], but `BadHandle` for a handle the user no longer holds: a
    /// closed UDP socket or listener, or a TCP connection closed with `tcp_close` (still
    /// finishing as an orphan) or gone.
    ///
    /// TCP follows Linux `tcp_poll` (`net/ipv4/tcp.c`), with Linux's `sk_shutdown` bits
    /// read off ustack's state: receive shut down (`RCV_SHUTDOWN`) once the peer's FIN
    /// arrived, after `shutdown(Read)`, or when the connection is CLOSED; send shut down
    /// (`SEND_SHUTDOWN`) once our FIN is queued, or when CLOSED (Linux `tcp_done` sets
    /// both).
    /// - HUP when both are shut down or the state is CLOSED;
    /// - READABLE and RDHUP when receive is shut down;
    /// - outside SYN-SENT and SYN-RECEIVED: READABLE when bytes can be read; WRITABLE when
    ///   send is shut down, or the send buffer is below its writable mark (at least a
    ///   third free, Linux `__sk_stream_is_writeable`);
    /// - ERROR while an error is pending (until a read or write returns it).
    ///
    /// A listener is READABLE while its accept queue holds a connection. A UDP socket is
    /// READABLE while a datagram is queued, and always WRITABLE (a datagram goes straight
    /// to the device queue; ustack keeps no UDP send buffer).
    pub fn socket_readiness(&self, key: SocketKey) -> Result<Readiness, Error> {
        match key {
            SocketKey::Tcp(h) => {
                let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
                if tcb.flags.has(TcbFlags::ORPHAN) {
                    return Err(Error::BadHandle);
                }
                Ok(tcp_poll(tcb))
            }
            SocketKey::Listener(l) => Ok(if self.tcp_accept_queue_len(l)? > 0 {
                Readiness::READABLE
            } else {
                Readiness::EMPTY
            }),
            SocketKey::Udp(u) => {
                let mut r = Readiness::WRITABLE;
                if self.udp_rx_queued(u)? > 0 {
                    r |= Readiness::READABLE;
                }
                // Linux datagram_poll: EPOLLERR while sk_err is set.
                if self.udp_error_pending(u)? {
                    r |= Readiness::ERROR;
                }
                Ok(r)
            }
        }
    }

    /// Move the ready list to `out` (appended): each socket whose readiness may have grown
    /// since the last call, once, with the kinds of wake-up it had (Linux's poll keys:
    /// READABLE for data or a connection to accept, WRITABLE for send space, [`Readiness::ALL`]
    /// for a state change). Keys of sockets since closed may appear; a poller checks each
    /// key's [`Stack::socket_readiness`] before reporting it. O(keys moved).
    #[inline]
    pub fn take_ready(&mut self, out: &mut Vec<(SocketKey, Readiness)>) {
        if self.ready.is_empty() {
            return;
        }
        self.ready.drain_into(out);
    }

    /// [`take_ready`](Stack::take_ready) for a list of one (a request-response's usual
    /// wake-up): that key with its wake-up kinds, without an output vector. `None` when
    /// the list does not hold exactly one key (it is left as it was: use `take_ready`).
    #[inline]
    pub fn take_ready_single(&mut self) -> Option<(SocketKey, Readiness)> {
        self.ready.take_single()
    }

    /// Whether the ready list holds anything for [`Stack::take_ready`].
    #[inline]
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }
}

/// Linux `tcp_poll`, for one connection (see [`Stack::socket_readiness`]).
fn tcp_poll(tcb: &Tcb) -> Readiness {
    let closed = tcb.state == State::Closed;
    let rcv_shutdown = closed || tcb.state.fin_received() || tcb.flags.has(TcbFlags::RCV_SHUTDOWN);
    let send_shutdown = closed || tcb.flags.has(TcbFlags::FIN_QUEUED);
    let mut r = Readiness::EMPTY;
    if closed || (rcv_shutdown && send_shutdown) {
        r |= Readiness::HUP;
    }
    if rcv_shutdown {
        r |= Readiness::READABLE | Readiness::RDHUP;
    }
    if !matches!(tcb.state, State::SynSent | State::SynReceived) {
        if tcb.rcvbuf.readable() > 0 {
            r |= Readiness::READABLE;
        }
        if send_shutdown || sk_stream_is_writeable(tcb) {
            r |= Readiness::WRITABLE;
        }
    }
    if tcb.error.is_some() {
        r |= Readiness::ERROR;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(index: u32, generation: u32) -> SocketKey {
        SocketKey::Tcp(TcpHandle { index, generation })
    }

    #[test]
    fn readiness_maps_to_linux_epoll_bits() {
        let r = Readiness::READABLE | Readiness::RDHUP | Readiness::ERROR;
        assert_eq!(r.to_epoll(), 0x001 | 0x2000 | 0x008);
        assert_eq!(Readiness::from_epoll(0x001 | 0x004 | 0x010 | 0x002), {
            Readiness::READABLE | Readiness::WRITABLE | Readiness::HUP
        });
        assert_eq!(
            Readiness::from_epoll(Readiness::ALL.to_epoll()),
            Readiness::ALL
        );
        assert_eq!(format!("{r:?}"), "EPOLLIN | EPOLLERR | EPOLLRDHUP");
        assert_eq!(format!("{:?}", Readiness::EMPTY), "0");
        assert!(r.contains(Readiness::READABLE | Readiness::ERROR));
        assert!(!r.contains(Readiness::READABLE | Readiness::WRITABLE));
        assert!(r.intersects(Readiness::READABLE | Readiness::WRITABLE));
        assert_eq!(
            r.without(Readiness::ERROR),
            Readiness::READABLE | Readiness::RDHUP
        );
    }

    #[test]
    fn a_socket_is_queued_once_with_its_wake_ups_gathered() {
        let mut list = ReadyList::default();
        let (a, b) = (
            tcp(3, 0),
            SocketKey::Udp(UdpHandle {
                index: 3,
                generation: 0,
            }),
        );
        list.mark(a, Readiness::READABLE);
        list.mark(b, Readiness::READABLE);
        list.mark(a, Readiness::WRITABLE);
        list.mark(a, Readiness::READABLE);
        let mut out = Vec::new();
        list.drain_into(&mut out);
        assert_eq!(
            out,
            [
                (a, Readiness::READABLE | Readiness::WRITABLE),
                (b, Readiness::READABLE)
            ]
        );
        assert!(list.is_empty());
        // Harvested: the next mark queues it again.
        list.mark(a, Readiness::HUP);
        out.clear();
        list.drain_into(&mut out);
        assert_eq!(out, [(a, Readiness::HUP)]);
    }

    #[test]
    fn a_lone_key_is_taken_with_its_wake_ups_and_two_are_left_in_place() {
        let mut list = ReadyList::default();
        let (a, b) = (tcp(3, 0), tcp(5, 1));
        assert_eq!(list.take_single(), None);
        list.mark(a, Readiness::READABLE);
        list.mark(a, Readiness::WRITABLE);
        assert_eq!(
            list.take_single(),
            Some((a, Readiness::READABLE | Readiness::WRITABLE))
        );
        assert!(list.is_empty());
        // Taken: the next mark queues it again, with only its own wake-up.
        list.mark(a, Readiness::HUP);
        list.mark(b, Readiness::READABLE);
        assert_eq!(list.take_single(), None, "two keys: for drain_into");
        let mut out = Vec::new();
        list.drain_into(&mut out);
        assert_eq!(out, [(a, Readiness::HUP), (b, Readiness::READABLE)]);
    }

    #[test]
    fn a_reused_slot_does_not_hide_the_new_socket() {
        let mut list = ReadyList::default();
        let (old, new) = (tcp(0, 7), tcp(0, 8));
        list.mark(old, Readiness::READABLE);
        // The old socket closed and its slot went to a new one before the harvest.
        list.mark(new, Readiness::WRITABLE);
        list.mark(new, Readiness::READABLE);
        let mut out = Vec::new();
        list.drain_into(&mut out);
        assert_eq!(out, [(new, Readiness::READABLE | Readiness::WRITABLE)]);
    }
}
