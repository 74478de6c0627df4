//! Listening sockets: the SYN queue of compact request records, the accept queue, SYN
//! cookies. Follows Linux's `tcp_conn_request` (`net/ipv4/tcp_input.c`) and
//! `tcp_check_req` (`net/ipv4/tcp_minisocks.c`); RFC 9293 §3.10.7.2 (LISTEN) and
//! §3.10.7.4 (SYN-RECEIVED) for what the RFC requires.
//!
//! Admission, in Linux's order (`tcp_conn_request`); every SYN dropped on the way counts
//! in ListenDrops, as Linux's `tcp_listendrop`:
//! 1. the SYN queue is over the backlog, or `tcp_syncookies` = 2: a cookie will answer
//!    (TCPReqQFullDoCookies) if cookies are on, else drop (TCPReqQFullDrop);
//! 2. the accept queue is full: drop the SYN (ListenOverflows);
//! 3. no route back for the SYN-ACK: drop (OutNoRoutes);
//! 4. a cookie SYN-ACK (no state kept; SyncookiesSent), or, without cookies, the last
//!    quarter of `tcp_max_syn_backlog` refused (ListenDrops alone);
//! 5. else keep a request record and send a SYN-ACK, retransmitted up to
//!    `tcp_synack_retries` times.
//!
//! The final ACK turns a request (or a valid cookie) into a full connection in the accept
//! queue, bounded by min(backlog, somaxconn); when that is full the ACK is dropped
//! (ListenOverflows, ListenDrops) and the request kept, or the request is reset if
//! `tcp_abort_on_overflow` is set.

use core::net::SocketAddr;
use core::time::Duration;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::{SeqNumber, tcp};

use super::syncookie::{CookieRequest, SynCookies};
use super::tcb::{FourTuple, TcbFlags};
use super::tuple_hash::{TupleHash, TupleHasher, TupleTable};
use crate::stack::Wake;
use core::mem::size_of;

use super::clock32::{DeadlineQueue, Ms32, NO_TICKET, Ticket};
use super::{AcceptQueue, ListenerHandle, State};
use crate::Stack;
use crate::slab::Slab;
use crate::socket::{Readiness, SocketKey};

/// A listening socket.
#[derive(Debug)]
pub(crate) struct Listener {
    pub local: SocketAddr,
    /// `IPV6_V6ONLY` on an IPv6 listener: no IPv4 connections (else a listener on `::`
    /// takes them, seen as `::ffff:a.b.c.d`; RFC 3493 §5.3, Linux `ipv6_only_sock`).
    pub v6only: bool,
    /// min(backlog, somaxconn): bounds both the accept queue and the SYN queue.
    pub backlog: u32,
    pub accept_queue: AcceptQueue,
    /// Requests (SYN-RECEIVED records) of this listener.
    pub syn_qlen: u32,
    /// Options its connections inherit (`TCP_KEEP*`, `TCP_MAXSEG`; see
    /// [`super::tcb::SockOpts`]).
    pub opts: super::tcb::SockOpts,
    /// SO_REUSEADDR (Linux `sk_reuse`), inherited by its connections
    /// ([`TcbFlags::REUSEADDR`]).
    pub reuseaddr: bool,
    /// When the SYN queue last overflowed into a cookie (Linux `tcp_synq_overflow`, kept
    /// in the listener's `rx_opt.ts_recent_stamp`): cookie ACKs are checked only within
    /// [`SYNCOOKIE_VALID`] of it.
    pub last_overflow: Option<Instant>,
}

/// How long after the last SYN-queue overflow an ACK to a listener is checked as a cookie
/// (Linux `TCP_SYNCOOKIE_VALID` = `MAX_SYNCOOKIE_AGE * TCP_SYNCOOKIE_PERIOD`, 2 minutes: no
/// cookie we sent can be older).
pub(crate) const SYNCOOKIE_VALID: Duration = Duration::from_secs(
    super::syncookie::SYNCOOKIE_PERIOD.as_secs() * super::syncookie::MAX_SYNCOOKIE_AGE as u64,
);

/// No listener in a [`PortSlots`] slot.
const NO_LISTENER: u32 = u32::MAX;

/// The listeners on one port: at most one IPv4 and one IPv6 (which Linux's bind conflict
/// rules leave possible only with `IPV6_V6ONLY`, or an IPv6 address that is not `::` or
/// v4-mapped beside an IPv4 one; see [`Listeners::conflicts`]). Slab indexes,
/// [`NO_LISTENER`] for none.
#[derive(Debug, Clone, Copy)]
struct PortSlots([u32; 2]);

impl PortSlots {
    fn family(local: SocketAddr) -> usize {
        usize::from(local.is_ipv6())
    }
}

/// The listeners of a stack, by port.
#[derive(Debug, Default)]
pub(crate) struct Listeners {
    slab: Slab<Listener>,
    by_port: HashMap<u16, PortSlots>,
}

impl Listeners {
    /// Every listener.
    pub fn iter(&self) -> impl Iterator<Item = &Listener> + '_ {
        self.slab.iter().map(|(_, l)| l)
    }

    /// Heap bytes: the slab, each accept queue, the port map.
    pub fn heap_bytes(&self) -> usize {
        self.slab.heap_bytes()
            + self
                .iter()
                .map(|l| l.accept_queue.capacity() * size_of::<super::TcpHandle>())
                .sum::<usize>()
            + self.by_port.allocation_size()
    }

    pub fn bound(&self, port: u16) -> bool {
        self.by_port.contains_key(&port)
    }

    /// Whether a listener on `local` (with `v6only`, for IPv6) conflicts with one already
    /// on its port (Linux `inet_csk_bind_conflict` through `inet_rcv_saddr_equal`, no
    /// `SO_REUSEPORT`): any of the same family (one listener a port and family: two on
    /// distinct addresses of one family are refused too, where Linux allows them), and an
    /// IPv4 one beside an IPv6 one on `::` (or on a v4-mapped address) without
    /// `IPV6_V6ONLY` (Linux `ipv6_rcv_saddr_equal`: the dual-stack wildcard covers every
    /// IPv4 address). An IPv6 listener with `IPV6_V6ONLY`, or on an IPv6 address, and an
    /// IPv4 one coexist.
    pub fn conflicts(&self, local: SocketAddr, v6only: bool) -> bool {
        let Some(slots) = self.by_port.get(&local.port()) else {
            return false;
        };
        let fam = PortSlots::family(local);
        if slots.0[fam] != NO_LISTENER {
            return true;
        }
        let other = slots.0[1 - fam];
        let Some(other) = self.slab.by_index(other) else {
            return false;
        };
        let (v6, v6only) = match (local, other.local) {
            (SocketAddr::V6(a), _) => (a, v6only),
            (_, SocketAddr::V6(b)) => (b, other.v6only),
            _ => return true,
        };
        !v6only && (v6.ip().is_unspecified() || v6.ip().to_ipv4_mapped().is_some())
    }

    /// Whether the IPv6 listener in slot `index` may drop `IPV6_V6ONLY` (no IPv4 listener
    /// on its port it would then conflict with, see [`Listeners::conflicts`]).
    pub fn may_be_dual(&self, index: u32) -> bool {
        let Some(l) = self.slab.by_index(index) else {
            return false;
        };
        let SocketAddr::V6(a) = l.local else {
            return true;
        };
        !(a.ip().is_unspecified() || a.ip().to_ipv4_mapped().is_some())
            || self
                .by_port
                .get(&l.local.port())
                .is_none_or(|s| s.0[0] == NO_LISTENER)
    }

    pub fn add(&mut self, local: SocketAddr, backlog: u32, v6only: bool) -> (u32, u32) {
        let listener = Listener {
            local,
            v6only,
            backlog,
            accept_queue: AcceptQueue::new(),
            syn_qlen: 0,
            opts: super::tcb::SockOpts::default(),
            reuseaddr: false,
            last_overflow: None,
        };
        let (index, generation) = self.slab.insert(listener);
        self.by_port
            .entry(local.port())
            .or_insert(PortSlots([NO_LISTENER; 2]))
            .0[PortSlots::family(local)] = index;
        (index, generation)
    }

    pub fn get(&self, index: u32, generation: u32) -> Option<&Listener> {
        self.slab.get(index, generation)
    }

    pub fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut Listener> {
        self.slab.get_mut(index, generation)
    }

    /// The `TCP_MAXSEG` of the listener in slot `index` (0: unset, or none, as for a
    /// cookie's `u32::MAX`).
    pub(crate) fn user_mss(&self, index: u32) -> u16 {
        self.slab.by_index(index).map_or(0, |l| l.opts.user_mss)
    }

    /// The listener in slot `index` (requests and lookups hold bare indexes; a closed
    /// listener's requests are removed with it).
    fn by_index(&mut self, index: u32) -> Option<&mut Listener> {
        self.slab.by_index_mut(index)
    }

    /// The handle of the listener in slot `index`.
    fn handle(&self, index: u32) -> ListenerHandle {
        ListenerHandle {
            index,
            generation: self.slab.generation(index).unwrap_or(0),
        }
    }

    pub fn remove(&mut self, index: u32, generation: u32) -> Option<Listener> {
        let listener = self.slab.remove(index, generation)?;
        let port = listener.local.port();
        if let Some(slots) = self.by_port.get_mut(&port) {
            slots.0[PortSlots::family(listener.local)] = NO_LISTENER;
            if slots.0 == [NO_LISTENER; 2] {
                self.by_port.remove(&port);
            }
        }
        Some(listener)
    }

    /// The listener for a segment to `local`, if any: one of the segment's family bound
    /// to its address or the wildcard, or for IPv4 an IPv6 listener on `::` (or on
    /// `::ffff:a.b.c.d`) without `IPV6_V6ONLY` (Linux `inet_lookup_listener` finds the
    /// dual-stack socket through `ipv6_only_sock`/`ipv6_addr_v4mapped` in
    /// `inet_rcv_saddr_equal`'s rules).
    pub fn lookup(&self, local: SocketAddr) -> Option<u32> {
        let slots = self.by_port.get(&local.port())?;
        // An IPv4 segment: the IPv4 listener, else the IPv6 one if dual-stack.
        let index = match slots.0 {
            [v4, _] if local.is_ipv4() && v4 != NO_LISTENER => v4,
            [_, v6] => v6,
        };
        let l = self.slab.by_index(index)?;
        let takes = match (l.local, local) {
            (SocketAddr::V4(a), SocketAddr::V4(b)) => a.ip().is_unspecified() || a.ip() == b.ip(),
            (SocketAddr::V6(a), SocketAddr::V6(b)) => a.ip().is_unspecified() || a.ip() == b.ip(),
            (SocketAddr::V6(a), SocketAddr::V4(b)) => {
                !l.v6only && (a.ip().is_unspecified() || a.ip().to_ipv4_mapped() == Some(*b.ip()))
            }
            (SocketAddr::V4(_), SocketAddr::V6(_)) => false,
        };
        takes.then_some(index)
    }
}

/// A connection request in SYN-RECEIVED: what the final ACK needs, nothing more (Linux
/// `tcp_request_sock`): 36 bytes, its 12-byte key and a 16-byte expiry entry
/// ([`REQUEST_BYTES`](super::REQUEST_BYTES) in all).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestSock {
    pub listener: u32,
    pub iss: SeqNumber,
    pub irs: SeqNumber,
    /// The peer's MSS option (536 if absent, RFC 9293 §3.7.1).
    pub peer_mss: u16,
    /// The peer's window-scale shift, if it sent the option (and we scale).
    pub snd_wscale: Option<u8>,
    pub sack_ok: bool,
    pub ts_ok: bool,
    pub ts_recent: u32,
    /// Where its SYN-ACK deadline is filed ([`Requests::file`]), so that completing
    /// the handshake takes the entry out in O(1). (The timestamp offset is not kept: a
    /// function of the address pair, [`super::Tcp::ts_offset`] gives it back.)
    pub ticket: Ticket,
    pub retransmits: u8,
    /// When the SYN-ACK is sent again (or, for a cookie request, nothing: never filed).
    pub expires: Ms32,
    /// When the first SYN-ACK went out, in µs of the stack clock modulo 2^32, for an RTT
    /// sample from the handshake (Linux `snt_synack`, also µs); 0 once a SYN-ACK was sent
    /// again (Karn: which copy the ACK answers is unknown) and for cookie requests.
    pub synack_us: u32,
}

impl RequestSock {
    /// The first SYN-ACK's send time, as [`RequestSock::synack_us`] keeps it.
    pub(crate) fn synack_stamp(now: Instant) -> u32 {
        (now.as_micros() as u32).max(1)
    }
}

/// An entry of the SYN-queue expiry queue: a deadline and the request's tuple.
pub(crate) type RequestEntry = (Ms32, FourTuple);

/// The key of a cancelled expiry entry: no request has it (port 0 is no connection's,
/// RFC 9293 §3.1, and 0.0.0.0 no local address).
const CANCELLED: FourTuple = FourTuple {
    local: core::net::SocketAddrV4::new(core::net::Ipv4Addr::UNSPECIFIED, 0),
    remote: core::net::SocketAddrV4::new(core::net::Ipv4Addr::UNSPECIFIED, 0),
};

/// Entries of the expiry queue beyond twice the live requests that start a compaction
/// ([`Requests::compact`]).
const COMPACT_MIN: usize = 1024;

/// All SYN-RECEIVED requests of a stack, by 4-tuple (looked up by the segment's
/// [`TupleHash`], shared with the other 4-tuple tables).
#[derive(Debug)]
pub(crate) struct Requests {
    map: TupleTable<RequestSock>,
    /// SYN-ACK retransmission deadlines (one entry per request and retransmission; a
    /// request that goes takes its entry out through its [`RequestSock::ticket`] while
    /// that is in the FIFO, O(1); any other entry whose request is gone or was re-filed
    /// later is dropped when it comes up):
    /// the requests' own, so that an entry is 16 bytes. Every first SYN-ACK waits the
    /// same `TIMEOUT_INIT` from its SYN, so they come in the order filed: a FIFO, O(1)
    /// each way, as TIME-WAIT's; a retransmission's backed-off deadline, earlier than
    /// first ones filed since, goes to the heap beside it ([`DeadlineQueue`]).
    queue: DeadlineQueue<FourTuple>,
    /// The latest instant the queue was touched at, to read its deadlines back.
    seen: Instant,
}

impl Requests {
    /// Heap bytes of the request table.
    pub fn heap_bytes(&self) -> usize {
        self.map.allocation_size() + self.queue.capacity() * size_of::<RequestEntry>()
    }

    /// `hasher` keyed with a secret: the 4-tuples are the peers' choice.
    pub fn new(hasher: TupleHasher) -> Self {
        Requests {
            map: TupleTable::new(hasher),
            queue: DeadlineQueue::new(),
            seen: Instant::ZERO,
        }
    }
    /// The hash of `t` (the same in every 4-tuple table).
    pub fn hash(&self, t: &FourTuple) -> TupleHash {
        self.map.hash(t)
    }
    pub fn contains(&self, hash: TupleHash, t: &FourTuple) -> bool {
        self.map.contains(hash, t)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn get(&self, hash: TupleHash, t: &FourTuple) -> Option<&RequestSock> {
        self.map.get(hash, t)
    }
    /// Take the request of `t` away, and its SYN-ACK deadline's entry with it when that
    /// is still in the FIFO (a handshake that completes within its first second, the
    /// common case): the entry no longer comes up a second later to find nothing.
    pub fn remove(&mut self, hash: TupleHash, t: &FourTuple) -> Option<RequestSock> {
        let r = self.map.remove(hash, t)?;
        if r.ticket != NO_TICKET {
            self.queue.cancel(r.ticket, t, CANCELLED);
        }
        Some(r)
    }
    /// File the request of `t`, which has none (a SYN reaches the listener only when no
    /// connection, request or TIME-WAIT record holds its tuple: [`Stack::tcp_dispatch`]).
    pub fn insert(&mut self, hash: TupleHash, t: FourTuple, r: RequestSock) {
        self.map.insert_new(hash, t, r);
    }
    pub fn get_mut(&mut self, hash: TupleHash, t: &FourTuple) -> Option<&mut RequestSock> {
        self.map.get_mut(hash, t)
    }
    /// Wake `t` at its request's `expires` (filed at `now`), lowering the stack's next
    /// deadline `wake` to it. Returns the entry's ticket, for the request's
    /// [`RequestSock::ticket`].
    pub fn file(&mut self, now: Instant, t: FourTuple, expires: Ms32, wake: &mut Wake) -> Ticket {
        self.seen = self.seen.max(now);
        if self.queue.len() >= 2 * self.map.len() + COMPACT_MIN {
            self.compact();
        }
        let ticket = self.queue.push(expires, t);
        wake.lower(expires.instant(self.seen));
        ticket
    }

    /// Keep only the entries of live requests, and give the room back. A request that
    /// goes cancels its entry ([`Requests::remove`]), but one cancelled behind live
    /// entries stays in the FIFO until it comes up, and one filed in the heap (a
    /// retransmission's) is cancelled only lazily: at a high connection rate with
    /// handshakes completing out of order that could be an entry for every handshake of
    /// the last second (16 bytes each, 4 MiB of heap for 200,000 connections established
    /// in a second, and kept as capacity after). Done when the stale entries outnumber the
    /// live ones, so each costs O(1) amortised.
    #[cold]
    fn compact(&mut self) {
        let map = &self.map;
        self.queue.retain(
            |d, t| map.get(map.hash(t), t).is_some_and(|r| r.expires == d),
            COMPACT_MIN,
        );
    }
    /// When the earliest entry comes up.
    #[inline]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.front().map(|(d, _)| d.instant(self.seen))
    }
    /// The tuple of an entry due at `now`, taken off the queue.
    pub fn pop_due(&mut self, now: Instant) -> Option<FourTuple> {
        self.seen = self.seen.max(now);
        loop {
            let (_, t) = self.queue.pop_due(now)?;
            if t != CANCELLED {
                return Some(t);
            }
        }
    }
    /// The tuples of every request and expiry entry (for the IPv6 id sweep).
    pub fn tuples(&self) -> impl Iterator<Item = FourTuple> + '_ {
        self.map.iter().map(|(t, _)| *t).chain(
            self.queue
                .iter()
                .map(|(_, t)| t)
                .filter(|t| *t != CANCELLED),
        )
    }
    /// Drop every request of a listener that is going away.
    pub fn remove_listener(&mut self, listener: u32) {
        self.map.retain(|_, r| r.listener != listener);
    }
}

/// The initial retransmission timeout for SYNs and SYN-ACKs (RFC 6298 §2.1: 1 s; Linux
/// `TCP_TIMEOUT_INIT`).
pub(crate) const TIMEOUT_INIT: Duration = Duration::from_secs(1);

impl Stack {
    /// A segment for a listening socket (RFC 9293 §3.10.7.2; Linux `tcp_v4_do_rcv` on a
    /// listener, `tcp_conn_request`).
    pub(crate) fn listen_input(
        &mut self,
        now: Instant,
        listener: u32,
        tuple: FourTuple,
        hash: TupleHash,
        seg: &tcp::Repr,
    ) {
        let f = seg.flags;
        // "first, check for a RST: An incoming RST should be ignored." (Linux 6.x counts it
        // SKB_DROP_REASON_TCP_RESET.)
        if f.contains(tcp::Flags::RST) {
            return self.mib.drop(DropReason::TcpReset);
        }
        // "second, check for an ACK: Any acknowledgment is bad if it arrives on a
        // connection still in the LISTEN state. An acceptable reset segment should be
        // formed for any arriving ACK-bearing segment." Unless it carries a valid SYN
        // cookie (Linux cookie_v4_check), which is looked for only if this listener sent
        // cookies recently: "if (tcp_synq_no_recent_overflow(sk)) goto out;". Otherwise a
        // bare ACK is not a cookie, whatever its numbers, and is answered with a RST: one
        // forged ACK cannot open a connection unless the listener is under a SYN flood.
        if f.contains(tcp::Flags::ACK) {
            let recent_overflow = self
                .tcp
                .listeners
                .by_index(listener)
                .and_then(|l| l.last_overflow)
                .is_some_and(|t| now.saturating_duration_since(t) <= SYNCOOKIE_VALID);
            if !f.contains(tcp::Flags::SYN)
                && self.sysctl.tcp_syncookies != 0
                && recent_overflow
                && self.cookie_ack(now, listener, tuple, hash, seg)
            {
                return;
            }
            self.tcp_send_reset(now, tuple, seg.ack_number, None);
            return self.mib.drop(DropReason::TcpFlags);
        }
        // "third, check for a SYN". Linux tcp_rcv_state_process (TCP_LISTEN) discards a
        // SYN that also carries FIN ("if (th->fin) { SKB_DR_SET(reason, TCP_FLAGS); goto
        // discard; }"), before tcp_conn_request: not a listen drop.
        if !f.contains(tcp::Flags::SYN) || f.contains(tcp::Flags::FIN) {
            return self.mib.drop(DropReason::TcpFlags);
        }
        let Some(l) = self.tcp.listeners.by_index(listener) else {
            return;
        };
        let (backlog, syn_qlen, accept_len) = (l.backlog, l.syn_qlen, l.accept_queue.len() as u32);
        // From here on this is Linux's tcp_conn_request, in its order, and every SYN it
        // drops is counted in ListenDrops (`tcp_listendrop` at its "drop" label), whatever
        // the reason.
        //
        // 1. The SYN queue: "if ((syncookies == 2 || inet_csk_reqsk_queue_is_full(sk)) &&
        //    !isn) { want_cookie = tcp_syn_flood_action(..); if (!want_cookie) goto drop; }"
        //    with inet_csk_reqsk_queue_is_full = qlen > sk_max_ack_backlog (Linux 6.14+,
        //    "tcp/dccp: allow a connection when sk_max_ack_backlog is zero").
        //    tcp_syn_flood_action counts TCPReqQFullDoCookies whenever cookies are on, so
        //    with tcp_syncookies = 2 every SYN counts there; with them off,
        //    TCPReqQFullDrop (the drop reason's counters include ListenDrops).
        let syncookies = self.sysctl.tcp_syncookies;
        let want_cookie = if syncookies == 2 || syn_qlen > backlog {
            if syncookies == 0 {
                return self.mib.drop(DropReason::TcpReqQFullDrop);
            }
            self.mib.inc(Counter::TcpExtTCPReqQFullDoCookies);
            true
        } else {
            false
        };
        // 2. The accept queue: "if (sk_acceptq_is_full(sk)) { NET_INC_STATS(..,
        //    LINUX_MIB_LISTENOVERFLOWS); goto drop; }", full meaning more than the backlog
        //    (`sk_ack_backlog > sk_max_ack_backlog`): a backlog of N holds N + 1
        //    connections, as in Linux. The reason counts ListenOverflows and ListenDrops.
        if accept_len > backlog {
            return self.mib.drop(DropReason::TcpListenOverflow);
        }
        // 3. A route for the SYN-ACK: "dst = af_ops->route_req(..); if (!dst) goto
        //    drop_and_free;" (inet_csk_route_req counts OutNoRoutes).
        if !self.tcp_route_ok(&tuple) {
            self.mib.drop(DropReason::IpNoRoute);
            self.mib.inc(Counter::TcpExtListenDrops);
            return;
        }
        if want_cookie {
            // Linux cookie_init_sequence: tcp_synq_overflow(sk), then the cookie.
            if let Some(l) = self.tcp.listeners.by_index(listener) {
                l.last_overflow = Some(now);
            }
            return self.send_cookie_synack(now, tuple, seg);
        }
        // 4. Without cookies the last quarter of tcp_max_syn_backlog is kept for peers
        //    proven by TIME-WAIT history ("if (!syncookies && (max_syn_backlog -
        //    inet_csk_reqsk_queue_len(sk) < (max_syn_backlog >> 2)) &&
        //    !tcp_peer_is_proven(req, dst)) goto drop_and_release;"; ustack keeps no such
        //    history, so no peer is proven). Linux bumps only ListenDrops here
        //    (TCPReqQFullDrop belongs to tcp_syn_flood_action), and so does this reason.
        let max = self.sysctl.tcp_max_syn_backlog as u32;
        if syncookies == 0 && max - syn_qlen.min(max) < max >> 2 {
            return self.mib.drop(DropReason::TcpSynBacklogDrop);
        }
        let ts = seg.timestamp.filter(|_| self.sysctl.tcp_timestamps != 0);
        let expires = Ms32::ceil(now + TIMEOUT_INIT);
        let ticket = self.tcp.requests.file(now, tuple, expires, &mut self.wake);
        let req = RequestSock {
            listener,
            iss: self.tcp.isn_of(now, &tuple),
            irs: seg.seq_number,
            peer_mss: seg
                .max_seg_size
                .unwrap_or(super::output::default_mss(tuple.is_v6())),
            snd_wscale: seg
                .window_scale
                .filter(|_| self.sysctl.tcp_window_scaling != 0),
            sack_ok: seg.sack_permitted && self.sysctl.tcp_sack != 0,
            ts_ok: ts.is_some(),
            ts_recent: ts.map_or(0, |t| t.tsval),
            ticket,
            retransmits: 0,
            expires,
            synack_us: RequestSock::synack_stamp(now),
        };
        self.tcp.requests.insert(hash, tuple, req);
        if let Some(l) = self.tcp.listeners.by_index(listener) {
            l.syn_qlen += 1;
        }
        self.tcp_send_synack(now, tuple, &req, None);
    }

    /// Answer a SYN with a cookie SYN-ACK: no state kept (Linux `cookie_v4_init_sequence`,
    /// `cookie_init_timestamp`).
    fn send_cookie_synack(&mut self, now: Instant, tuple: FourTuple, seg: &tcp::Repr) {
        let (local, remote) = self.tcp.addrs(&tuple);
        let (iss, mss) = self.tcp.cookies.generate(
            now,
            local,
            remote,
            seg.seq_number,
            seg.max_seg_size
                .unwrap_or(super::output::default_mss(tuple.is_v6())),
        );
        let ts = seg.timestamp.filter(|_| self.sysctl.tcp_timestamps != 0);
        let creq = CookieRequest {
            mss,
            wscale: seg
                .window_scale
                .filter(|_| self.sysctl.tcp_window_scaling != 0),
            sack_ok: seg.sack_permitted && self.sysctl.tcp_sack != 0,
            ecn_ok: false,
        };
        let ts_offset = self.tcp.ts_offset(&tuple);
        let req = RequestSock {
            listener: u32::MAX,
            iss,
            irs: seg.seq_number,
            peer_mss: mss,
            // Without timestamps the cookie cannot carry the options: RFC-less Linux
            // behaviour, the connection goes on without window scaling and SACK.
            snd_wscale: if ts.is_some() { creq.wscale } else { None },
            sack_ok: ts.is_some() && creq.sack_ok,
            ts_ok: ts.is_some(),
            ts_recent: ts.map_or(0, |t| t.tsval),
            ticket: NO_TICKET,
            retransmits: 0,
            expires: Ms32::ceil(now),
            synack_us: 0,
        };
        // The options go in the low bits of our clock; the per-peer offset is added after
        // and taken off again before decoding.
        let tsval = ts.map(|_| {
            SynCookies::encode_timestamp(super::isn::ts_clock(now), &creq).wrapping_add(ts_offset)
        });
        self.mib.inc(Counter::TcpExtSyncookiesSent);
        self.tcp_send_synack(now, tuple, &req, tsval);
    }

    /// An ACK to a listener with no request: is it the answer to a cookie? If so, build
    /// the connection (Linux `cookie_v4_check`). Returns whether it was consumed.
    fn cookie_ack(
        &mut self,
        now: Instant,
        listener: u32,
        tuple: FourTuple,
        hash: TupleHash,
        seg: &tcp::Repr,
    ) -> bool {
        let (local, remote) = self.tcp.addrs(&tuple);
        let Some(mss) =
            self.tcp
                .cookies
                .check(now, local, remote, seg.seq_number - 1, seg.ack_number - 1)
        else {
            self.mib.inc(Counter::TcpExtSyncookiesFailed);
            return false;
        };
        let (snd_wscale, sack_ok, ts_ok, ts_recent) = match seg.timestamp {
            Some(t) => {
                match SynCookies::decode_timestamp(t.tsecr.wrapping_sub(self.tcp.ts_offset(&tuple)))
                {
                    Some((ws, sack, _ecn)) => (ws, sack, true, t.tsval),
                    None => {
                        self.mib.inc(Counter::TcpExtSyncookiesFailed);
                        return false;
                    }
                }
            }
            None => (None, false, false, 0),
        };
        self.mib.inc(Counter::TcpExtSyncookiesRecv);
        let req = RequestSock {
            listener,
            iss: seg.ack_number - 1,
            irs: seg.seq_number - 1,
            peer_mss: mss,
            snd_wscale,
            sack_ok,
            ts_ok,
            ts_recent,
            ticket: NO_TICKET,
            retransmits: 0,
            expires: Ms32::ceil(now),
            synack_us: 0,
        };
        self.request_complete(now, tuple, hash, req, seg, true);
        true
    }

    /// A segment for a request in SYN-RECEIVED, `req` (Linux `tcp_check_req`; RFC 9293
    /// §3.10.7.4 for SYN-RECEIVED).
    pub(crate) fn request_input(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        hash: TupleHash,
        req: RequestSock,
        seg: &tcp::Repr,
    ) {
        let f = seg.flags;
        // A retransmitted SYN: answer with the SYN-ACK again (Linux: "Retransmitted SYN").
        if f.contains(tcp::Flags::SYN) && !f.contains(tcp::Flags::ACK) && seg.seq_number == req.irs
        {
            self.mib.inc(Counter::TcpRetransSegs);
            self.mib.inc(Counter::TcpExtTCPSynRetrans);
            if let Some(r) = self.tcp.requests.get_mut(hash, &tuple) {
                r.synack_us = 0;
            }
            self.tcp_send_synack(now, tuple, &req, None);
            return;
        }
        let rcv_nxt = req.irs + 1;
        // "first, check sequence number": the window we offered on the SYN-ACK.
        let wnd = self.tcp_initial_rcv_window(now, &tuple, req.ts_ok, req.listener) as usize;
        let acceptable =
            seg.seq_number.in_range(rcv_nxt, rcv_nxt + wnd.max(1)) || seg.seq_number == rcv_nxt;
        if !acceptable {
            if !f.contains(tcp::Flags::RST) {
                self.tcp_send_ack_raw(now, tuple, req.iss + 1, rcv_nxt, wnd as u32, None);
            }
            return self.mib.drop(DropReason::TcpInvalidSequence);
        }
        // "second, check the RST bit": in SYN-RECEIVED from a passive open, the request
        // goes away (RFC 9293: "return this connection to LISTEN state"). Linux
        // tcp_check_req counts the failed attempt ("if (flg & (TCP_FLAG_RST|TCP_FLAG_SYN))
        // { TCP_INC_STATS(.., TCP_MIB_ATTEMPTFAILS); goto embryonic_reset; }") and, the
        // request unlinked, EmbryonicRsts.
        // RFC 5961 section 3.2 here too: only a RST exactly at RCV.NXT resets; one elsewhere
        // in the window draws a challenge ACK and the request stays (Linux 6.18
        // tcp_check_req, as the conformance scenario
        // handshake/rst-to-request-in-window-challenged shows).
        if f.contains(tcp::Flags::RST) && seg.seq_number != rcv_nxt {
            self.tcp_send_ack_raw(now, tuple, req.iss + 1, rcv_nxt, wnd as u32, None);
            return self.mib.drop(DropReason::TcpReset);
        }
        if f.contains(tcp::Flags::RST) {
            self.request_drop(hash, &tuple);
            self.mib.inc(Counter::TcpAttemptFails);
            self.mib.inc(Counter::TcpExtEmbryonicRsts);
            return self.mib.drop(DropReason::TcpReset);
        }
        // "fourth, check the SYN bit" (RFC 5961 §4): a SYN here is answered, not obeyed.
        if f.contains(tcp::Flags::SYN) {
            self.tcp_send_ack_raw(now, tuple, req.iss + 1, rcv_nxt, wnd as u32, None);
            return self.mib.drop(DropReason::TcpInvalidSyn);
        }
        // "fifth, check the ACK field": "if the ACK bit is off drop the segment".
        if !f.contains(tcp::Flags::ACK) {
            return self.mib.drop(DropReason::TcpFlags);
        }
        // "If SND.UNA < SEG.ACK =< SND.NXT, then enter ESTABLISHED state ... If the
        // segment acknowledgment is not acceptable, form a reset segment".
        if seg.ack_number != req.iss + 1 {
            self.tcp_send_reset(now, tuple, seg.ack_number, None);
            return self.mib.drop(DropReason::TcpAckUnsentData);
        }
        self.request_complete(now, tuple, hash, req, seg, false);
    }

    /// The final ACK of a handshake: the request becomes a connection in the accept
    /// queue, unless that is full (Linux `tcp_v4_syn_recv_sock` / `inet_csk_complete_hashdance`).
    fn request_complete(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        hash: TupleHash,
        req: RequestSock,
        seg: &tcp::Repr,
        cookie: bool,
    ) {
        let Some(l) = self.tcp.listeners.by_index(req.listener) else {
            self.request_drop(hash, &tuple);
            return;
        };
        if l.accept_queue.len() as u32 > l.backlog {
            self.mib.drop(DropReason::TcpListenOverflow);
            if self.sysctl.tcp_abort_on_overflow != 0 {
                self.request_drop(hash, &tuple);
                self.tcp_send_reset(now, tuple, seg.ack_number, None);
            }
            return;
        }
        let (inherited, reuseaddr) = (l.opts, l.reuseaddr);
        if !cookie {
            self.request_drop(hash, &tuple);
        }
        // TCP_MAXSEG of the listener (Linux `tcp_openreq_init_rwin`, and the child's
        // `mss_clamp` from the request's): what the SYN-ACK announced, and the most it
        // sends with.
        let adv_mss = match inherited.user_mss {
            0 => self.tcp_adv_mss(now, &tuple),
            user => self.tcp_adv_mss(now, &tuple).min(user),
        };
        let mut tcb = self.new_tcb(now, tuple, State::SynReceived, req.iss, adv_mss);
        if reuseaddr {
            tcb.flags.set(TcbFlags::REUSEADDR);
        }
        tcb.rcv.irs = req.irs;
        tcb.rcv.nxt = req.irs + 1;
        tcb.rcv.wup = tcb.rcv.nxt;
        // RCV.WND: what our SYN-ACK offered (unscaled there, RFC 7323 §2.2).
        tcb.rcv.wnd = self.tcp_synack_rcv_window(adv_mss, req.ts_ok);
        tcb.snd.una = req.iss + 1;
        tcb.snd.nxt = req.iss + 1;
        // RFC 9293 §3.10.7.4 SYN-RECEIVED -> ESTABLISHED: "set SND.WND <- SEG.WND, set
        // SND.WL1 <- SEG.SEQ, and set SND.WL2 <- SEG.ACK" (the ACK's window is scaled).
        Stack::apply_syn_options(
            &self.sysctl,
            &mut tcb,
            req.peer_mss,
            req.snd_wscale,
            req.sack_ok,
            req.ts_ok.then_some(req.ts_recent),
            now,
        );
        tcb.snd.wnd = u32::from(seg.window_len) << tcb.snd_wscale;
        tcb.snd.max_wnd = tcb.snd.wnd;
        tcb.snd.wl1 = seg.seq_number;
        tcb.snd.wl2 = seg.ack_number;
        tcb.flags.set(TcbFlags::PASSIVE);
        // Linux tcp_synack_rtt_meas: the handshake's round trip is the first RTT sample
        // (RFC 6298 §2.2), so that the first RTO follows the path (about 200 ms on a fast
        // one) instead of the 1 s initial RTO (RFC 6298 §2.1). Measured from the SYN-ACK's
        // send time when it was sent once (Karn's algorithm, RFC 6298 §3); after a
        // retransmission, by the echoed TSval of our SYN-ACK as Linux falls back to
        // (`tcp_ack_update_rtt`, RFC 7323 §4.1). A cookie's TSval encodes options, not a
        // time.
        if req.synack_us != 0 && req.retransmits == 0 {
            let us = RequestSock::synack_stamp(now).wrapping_sub(req.synack_us);
            tcb.rtt.sample(Duration::from_micros(u64::from(us)));
        } else if !cookie
            && req.ts_ok
            && let Some(ts) = seg.timestamp
            && ts.tsecr != 0
        {
            let ms = super::isn::ts_clock(now).wrapping_sub(ts.tsecr.wrapping_sub(tcb.ts_offset));
            if ms < 600_000 {
                tcb.rtt.sample(Duration::from_millis(u64::from(ms)));
            }
        }
        // RFC 6298 §5.7: no sample (the SYN-ACK was retransmitted, no timestamps; or a
        // cookie) means RTO 3 s (Linux tcp_init_transfer -> tcp_init_metrics: "We've
        // failed to get a valid RTT sample from 3WHS ... Reset the RTO back to 3secs").
        tcb.rtt.use_fallback_rto();
        super::input::tcp_init_buffer_space(&mut tcb, self.sysctl.tcp_wmem_max);
        let h = self.tcp.insert_hashed(hash, tcb);
        // The listener's TCP_KEEP* and TCP_MAXSEG (Linux `sk_clone_lock`).
        if !inherited.is_empty() {
            self.tcp.xopts_update(h, |o| *o = inherited);
        }
        self.tcp_set_state(h, State::Established);
        self.mib.inc(Counter::TcpPassiveOpens);
        if let Some(l) = self.tcp.listeners.by_index(req.listener) {
            l.accept_queue.push_back(h);
            let key = SocketKey::Listener(self.tcp.listeners.handle(req.listener));
            self.ready.mark(key, Readiness::READABLE); // sk_data_ready on the listener
        }
        // The ACK may carry data or a FIN, and its window is the first scaled one: the
        // rest is ordinary ESTABLISHED processing.
        self.conn_input_with(now, h, seg, Some(hash));
    }

    fn request_drop(&mut self, hash: TupleHash, tuple: &FourTuple) {
        if let Some(req) = self.tcp.requests.remove(hash, tuple)
            && let Some(l) = self.tcp.listeners.by_index(req.listener)
        {
            l.syn_qlen = l.syn_qlen.saturating_sub(1);
        }
    }

    /// The SYN-ACK retransmission timer of a request (Linux `reqsk_timer_handler`).
    pub(crate) fn request_timer(&mut self, now: Instant, tuple: FourTuple) {
        let limit = self.sysctl.tcp_synack_retries as u8;
        let hash = self.tcp.requests.hash(&tuple);
        let Some(req) = self.tcp.requests.get_mut(hash, &tuple) else {
            return;
        };
        if !req.expires.due(now) {
            return;
        }
        // Linux reqsk_timer_handler calls tcp_syn_ack_timeout on every expiry, the last
        // one included: TCPTimeouts.
        self.mib.inc(Counter::TcpExtTCPTimeouts);
        if req.retransmits >= limit {
            self.request_drop(hash, &tuple);
            return;
        }
        req.retransmits += 1;
        req.synack_us = 0;
        req.expires = Ms32::ceil(now + TIMEOUT_INIT * (1 << req.retransmits.min(10)));
        let req = *req;
        self.mib.inc(Counter::TcpRetransSegs);
        self.mib.inc(Counter::TcpExtTCPSynRetrans);
        self.tcp_send_synack(now, tuple, &req, None);
        let ticket = self
            .tcp
            .requests
            .file(now, tuple, req.expires, &mut self.wake);
        if let Some(r) = self.tcp.requests.get_mut(hash, &tuple) {
            r.ticket = ticket;
        }
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, SocketAddrV4};

    use super::*;

    /// Entries come up in deadline order whichever queue holds them: first SYN-ACKs in
    /// the order filed (the FIFO), a retransmission's backed-off deadline filed after a
    /// later first one (the heap) between them, at its own deadline.
    #[test]
    fn syn_ack_deadlines_come_up_in_order_from_the_fifo_and_the_heap() {
        let mut r = Requests::new(TupleHasher::new((5, 6)));
        let tuple = |i: u8| FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
            remote: SocketAddrV4::new(Ipv4Addr::new(10, 1, 0, i), 4000),
        };
        let at = |ms: u64| Instant::from_millis(ms);
        let mut wake = Wake::NONE;
        // (filed at, deadline, tuple): A's first SYN-ACK, B's, A's retransmission (3 s,
        // after B's in the FIFO), C's first (2.2 s: before A's retransmission, so the heap).
        let filings = [
            (0, 1_000, 1),
            (500, 1_500, 2),
            (1_000, 3_000, 1),
            (1_200, 2_200, 3),
        ];
        for (now, d, i) in filings {
            r.file(at(now), tuple(i), Ms32::ceil(at(d)), &mut wake);
        }
        assert_eq!(wake, Wake::from(Some(at(1_000))), "lowered to the earliest");
        assert_eq!(
            r.queue.out_of_order(),
            1,
            "C's out-of-order entry in the heap"
        );
        let mut got = Vec::new();
        for ms in (1_000..=3_000).step_by(100) {
            while let Some(t) = r.pop_due(at(ms)) {
                got.push((ms, t));
            }
            if let Some(next) = r.next_deadline() {
                assert!(next > at(ms), "a due entry left at {ms}");
            }
        }
        assert_eq!(
            got,
            [
                (1_000, tuple(1)),
                (1_500, tuple(2)),
                (2_200, tuple(3)),
                (3_000, tuple(1))
            ]
        );
    }

    /// The tuple of the `i`th request: a peer port and address each.
    fn tuple(i: u32) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(0x0a01_0000 | (i >> 16)), i as u16),
        }
    }

    /// A request of listener 0 whose SYN-ACK is due at `expires`, filed without a ticket.
    fn request(expires: Ms32) -> RequestSock {
        RequestSock {
            listener: 0,
            iss: SeqNumber(1),
            irs: SeqNumber(2),
            peer_mss: 1460,
            snd_wscale: None,
            sack_ok: true,
            ts_ok: true,
            ts_recent: 0,
            ticket: NO_TICKET,
            retransmits: 0,
            expires,
            synack_us: 1,
        }
    }

    /// A request that completes takes its SYN-ACK deadline's entry with it (Linux deletes
    /// the request's timer): in order, the queue holds no more entries than requests in
    /// flight; out of order, a cancelled entry never comes up as a request's.
    #[test]
    fn completed_requests_take_their_syn_ack_entries_with_them() {
        let mut r = Requests::new(TupleHasher::new((5, 6)));
        let mut wake = Wake::NONE;
        let mut open = |r: &mut Requests, ms: u64, t: FourTuple| {
            let now = Instant::from_millis(ms);
            let expires = Ms32::ceil(now + TIMEOUT_INIT);
            let ticket = r.file(now, t, expires, &mut wake);
            r.insert(
                r.hash(&t),
                t,
                RequestSock {
                    ticket,
                    ..request(expires)
                },
            );
        };
        // 10,000 handshakes, 100 in flight, each completing in the order it came.
        for i in 0..10_000u32 {
            open(&mut r, u64::from(i / 50), tuple(i));
            if i >= 100 {
                let done = tuple(i - 100);
                assert!(r.remove(r.hash(&done), &done).is_some());
            }
            assert!(r.queue.len() <= 101, "{} entries", r.queue.len());
        }
        for i in 9_900..10_000 {
            let done = tuple(i);
            assert!(r.remove(r.hash(&done), &done).is_some());
        }
        assert_eq!(r.queue.len(), 0, "every entry went with its request");
        // Out of order: B completes first, then A; only C comes up.
        let (a, b, c) = (tuple(1), tuple(2), tuple(3));
        for t in [a, b, c] {
            open(&mut r, 20_000, t);
        }
        assert!(r.remove(r.hash(&b), &b).is_some());
        assert_eq!(r.queue.len(), 3, "B's entry cancelled in place");
        assert!(r.remove(r.hash(&a), &a).is_some());
        assert_eq!(r.queue.len(), 1, "A's and B's entries gone from the front");
        let due = Instant::from_millis(21_000);
        assert_eq!(r.pop_due(due), Some(c));
        assert_eq!(r.pop_due(due), None);
        // C's ticket is stale now (its entry came up): removing C changes nothing else.
        open(&mut r, 21_000, tuple(4));
        assert!(r.remove(r.hash(&c), &c).is_some());
        assert_eq!(r.pop_due(Instant::from_millis(22_000)), Some(tuple(4)));
    }

    /// Handshakes that complete within their first second leave no heap behind them: the
    /// expiry heap stays within twice the live requests (plus [`COMPACT_MIN`]) at any
    /// count, where it held an entry for every handshake of the last second.
    #[test]
    fn completed_requests_do_not_pile_up_in_the_expiry_heap() {
        let mut r = Requests::new(TupleHasher::new((5, 6)));
        let now = Instant::from_secs(1);
        let expires = Ms32::ceil(now + TIMEOUT_INIT);
        let req = request(expires);
        let mut wake = Wake::NONE;
        // 200,000 handshakes in the same millisecond, 100 in flight at a time.
        for i in 0..200_000u32 {
            let t = tuple(i);
            r.insert(r.hash(&t), t, req);
            r.file(now, t, expires, &mut wake);
            if i >= 100 {
                let done = tuple(i - 100);
                assert!(r.remove(r.hash(&done), &done).is_some());
            }
            assert!(
                r.queue.len() <= 2 * 101 + COMPACT_MIN + 1,
                "{} entries",
                r.queue.len()
            );
        }
        assert!(
            r.queue.capacity() <= 4 * (2 * 101 + COMPACT_MIN),
            "{} entries of heap for 100 requests",
            r.queue.capacity()
        );
        // The live requests still come up, each once.
        let mut due = 0;
        while r.pop_due(now + TIMEOUT_INIT).is_some() {
            due += 1;
        }
        assert!(
            (100..=2 * 100 + COMPACT_MIN).contains(&due),
            "{due} entries due"
        );
    }
}
