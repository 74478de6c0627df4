//! TCP, after Linux's `net/ipv4/tcp*.c`, checked against
//! [RFC 9293](https://www.rfc-editor.org/rfc/rfc9293) and its companions.
//!
//! Reading list: RFC 9293 (the protocol; §3.10 is the event processing this code follows
//! step by step), RFC 6298 (RTO), RFC 5681 and RFC 6582 (congestion control, NewReno),
//! RFC 2018 and RFC 6675 (SACK), RFC 7323 (window scale, timestamps, PAWS), RFC 5961
//! (blind in-window attacks), RFC 6528 (ISNs), RFC 9438 (CUBIC).
//!
//! What a user of the crate sees: the calls on [`Stack`] named `tcp_*` (listen, accept,
//! connect, send, recv, shutdown, close, socket options), the handles [`TcpHandle`] and
//! [`ListenerHandle`], [`State`], [`TcpInfo`] (`ss -i`), [`TcpResources`] (what TCP holds),
//! the constants [`BUFFER_CHUNK`] and [`TCB_BYTES`] for memory accounting, and the
//! counters in [`crate::Mib`]. Everything else here is the crate's own.
//!
//! Where the pieces are, after Linux's files:
//!
//! | module | Linux |
//! |---|---|
//! | `input` (segment arrival, per state; the ACK; data into the receive buffer) | `tcp_ipv4.c` `tcp_v4_rcv`, `tcp_input.c` `tcp_rcv_state_process`, `tcp_ack`, `tcp_data_queue` |
//! | `recovery` (loss detection, fast recovery, PRR, undo, tail loss probe outcome) | `tcp_recovery.c`, the recovery half of `tcp_input.c` (`tcp_fastretrans_alert`, `tcp_try_undo_*`) |
//! | `sock` (a connection borrowed with what its processing touches) | `struct sock *sk` |
//! | `output` (segments, windows, Nagle) | `tcp_output.c` |
//! | `listen` (SYN queue, accept queue, cookies) | `tcp_input.c` `tcp_conn_request`, `tcp_minisocks.c` `tcp_check_req` |
//! | `timer` (RTO, delayed ACK, keepalive, TIME-WAIT) | `tcp_timer.c`, `inet_timewait_sock.c` |
//! | `tcb`, `state` | `include/linux/tcp.h` `tcp_sock` |
//! | `scoreboard` (the sender's retransmission queue and SACK tags) | `tcp_input.c` `tcp_sacktag_write_queue`, `tcp_clean_rtx_queue` |
//! | `sack_blocks` (the receiver's SACK blocks) | `tcp_input.c` `tcp_sack_new_ofo_skb`, `tcp_dsack_set` |
//! | `buffer` (`pool`, `send`, `recv` with the out-of-order queue) | `sk_buff` queues, `tcp_data_queue_ofo`, `tcp_prune_queue`, `tcp_mem` |
//! | `rtt`, `cc`, `isn`, `syncookie`, `pmtu` | `tcp_input.c` `tcp_rtt_estimator`, `tcp_cong.c`/`tcp_cubic.c`, `secure_seq.c`, `syncookies.c`, `tcp_timer.c` `tcp_mtu_probing` |
//!
//! Call graph of one segment: `Stack::ip_local_deliver` -> `tcp_input` -> lookup
//! (established table, TIME-WAIT records, SYN queue, listeners) -> `conn_input` /
//! `timewait_input` / `request_input` / `listen_input` -> `tcp_output` for whatever the
//! segment made sendable (data, ACKs).

pub(crate) mod buffer;
pub(crate) mod cc;
pub(crate) mod clock32;
pub(crate) mod early_demux;
pub(crate) mod ehash;
pub(crate) mod fast_path;
pub(crate) mod input;
pub(crate) mod intern6;
pub(crate) mod isn;
pub(crate) mod listen;
pub(crate) mod output;
pub(crate) mod pmtu;
pub(crate) mod recovery;
pub(crate) mod rtt;
pub(crate) mod rx_direct;
pub(crate) mod sack_blocks;
pub(crate) mod scoreboard;
pub(crate) mod sock;
pub(crate) mod state;
pub(crate) mod syncookie;
pub(crate) mod tcb;
pub(crate) mod timer;
pub(crate) mod tuple_hash;
pub(crate) mod tx_lend;
pub(crate) mod wheel;
pub(crate) mod xmit;
pub(crate) mod xmit4;
pub(crate) mod xmit6;

use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::collections::VecDeque;

use ustack_obs::{Counter, Instant};
use ustack_wire::SeqNumber;

use crate::secret::Secrets;
use crate::slab::Slab;
use crate::socket::{Readiness, SocketKey};
use crate::sysctl::PortRange;
use crate::{Error, Stack, Sysctl};
pub use state::State;
pub(crate) use tcb::FourTuple;
use tcb::Tcb;
use tuple_hash::TupleHasher;

/// Bytes per chunk of a stack's socket-buffer pool: send and receive buffers take memory
/// in these units, so a buffer holding `n` bytes costs up to `n` rounded up to a chunk,
/// plus one chunk at each unaligned end.
pub const BUFFER_CHUNK: usize = buffer::CHUNK;

/// Bytes of one connection's record (its TCB) in a stack's connection slab, what
/// `inspect::MemoryUsage`'s `tcb` kind counts per connection (plus a slot's generation).
pub const TCB_BYTES: usize = core::mem::size_of::<Tcb>();

/// How long a connection stays idle before its [`tcb::ActiveState`] goes back to the pool.
pub(crate) const ACTIVE_IDLE_GRACE: core::time::Duration = core::time::Duration::from_secs(1);

/// Bytes of the state a connection holds only while it moves data (congestion control's
/// detail, loss recovery, SACK blocks), boxed beside its TCB and given back when it is
/// idle (the `tcb_active` kind of `inspect::MemoryUsage`).
pub const TCB_ACTIVE_BYTES: usize = core::mem::size_of::<tcb::ActiveState>();

/// Bytes of one TIME-WAIT record: its table entry (4-tuple and record) and its entry in
/// the expiry queue. The table's free slots come on top (see `docs/c1m.md`).
pub const TIME_WAIT_BYTES: usize = core::mem::size_of::<FourTuple>()
    + core::mem::size_of::<timer::TimeWait>()
    + core::mem::size_of::<timer::TimeWaitEntry>();

/// Bytes of one SYN-queue request: its table entry (4-tuple and record) and its entry in
/// the SYN-ACK retransmission queue. The table's free slots come on top.
pub const REQUEST_BYTES: usize = core::mem::size_of::<FourTuple>()
    + core::mem::size_of::<listen::RequestSock>()
    + core::mem::size_of::<listen::RequestEntry>();

/// A TCP connection's handle: slot index and generation, so a stale handle never reaches
/// a connection that reused the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TcpHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// A listening socket's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// A TCP socket option kept per socket beside the TCB ([`Stack::tcp_set_opt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOpt {
    /// `TCP_KEEPIDLE`: seconds idle before the first keepalive probe.
    KeepIdle,
    /// `TCP_KEEPINTVL`: seconds between keepalive probes.
    KeepIntvl,
    /// `TCP_KEEPCNT`: unanswered probes before the connection is dropped.
    KeepCnt,
    /// `TCP_MAXSEG`: a bound on the MSS announced and sent with (Linux `user_mss`).
    MaxSeg,
}

impl TcpOpt {
    /// Every one, in declaration order (the index of [`TcpOptValues`]).
    pub const ALL: [TcpOpt; 4] = [
        TcpOpt::KeepIdle,
        TcpOpt::KeepIntvl,
        TcpOpt::KeepCnt,
        TcpOpt::MaxSeg,
    ];

    /// The value if Linux's `do_tcp_setsockopt` takes it, else `EINVAL`
    /// (`MAX_TCP_KEEPIDLE`, `MAX_TCP_KEEPINTVL` 32767, `MAX_TCP_KEEPCNT` 127;
    /// `TCP_MAXSEG` 0 or `TCP_MIN_MSS` 88 to `MAX_TCP_WINDOW` 32767).
    pub fn check(self, val: i32) -> Result<u16, Error> {
        let ok = match self {
            TcpOpt::KeepIdle | TcpOpt::KeepIntvl => (1..=32767).contains(&val),
            TcpOpt::KeepCnt => (1..=127).contains(&val),
            TcpOpt::MaxSeg => val == 0 || (88..=32767).contains(&val),
        };
        if ok {
            Ok(val as u16)
        } else {
            Err(Error::InvalidArgument)
        }
    }

    fn store(self, o: &mut tcb::SockOpts, v: u16) {
        match self {
            TcpOpt::KeepIdle => o.keepidle = v,
            TcpOpt::KeepIntvl => o.keepintvl = v,
            TcpOpt::KeepCnt => o.keepcnt = v as u8,
            TcpOpt::MaxSeg => o.user_mss = v,
        }
    }
}

/// [`TcpOpt`] values set on a socket that has no connection yet (a C API's descriptor, a
/// listener's for its connections to come), to give it with [`Stack::tcp_set_opt`] when
/// it has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpOptValues([Option<i32>; 4]);

impl TcpOptValues {
    /// Record `v` for `o`.
    pub fn set(&mut self, o: TcpOpt, v: i32) {
        self.0[o as usize] = Some(v);
    }

    /// The value recorded for `o`, if any.
    pub fn get(&self, o: TcpOpt) -> Option<i32> {
        self.0[o as usize]
    }

    /// The options recorded, with their values.
    pub fn iter(&self) -> impl Iterator<Item = (TcpOpt, i32)> + '_ {
        TcpOpt::ALL
            .iter()
            .zip(self.0)
            .filter_map(|(&o, v)| Some((o, v?)))
    }
}

/// How to shut a connection down (`shutdown(2)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    Read,
    Write,
    Both,
}

/// All of one stack's TCP state.
#[derive(Debug)]
pub(crate) struct Tcp {
    /// The connections: TCBs inline in a slab (no per-connection box).
    pub(crate) conns: Slab<Tcb>,
    /// Every connection not in LISTEN or TIME-WAIT, by 4-tuple (Linux `inet_ehash`): slab
    /// indexes, 8 bytes a slot (see [`ehash`]).
    pub(crate) ehash: ehash::EHash,
    pub(crate) listeners: listen::Listeners,
    pub(crate) requests: listen::Requests,
    pub(crate) timewait: timer::TimeWaits,
    /// Connections found idle while holding their [`tcb::ActiveState`], in the order found,
    /// with when to give it back (see [`tcb::Active`]): one entry per connection at most
    /// ([`tcb::TcbFlags::IDLE_QUEUED`]).
    pub(crate) idle_active: VecDeque<(Instant, TcpHandle)>,
    /// The connections' timers: one entry per connection, by slab index, for its
    /// earliest deadline (see [`wheel`] and [`sock::Sock::arm`]); taken out when the
    /// connection ends ([`Tcp::remove`], `tcp_done`).
    pub(crate) timers: wheel::Wheel,
    pub(crate) pool: buffer::BufferPool,
    /// A receive that leaves the payload on the device (see [`rx_direct`]).
    pub(crate) rx_direct: rx_direct::RxDirect,
    /// A retransmission-queue board kept for reuse (see [`scoreboard::SpareBoard`]).
    pub(crate) spare_board: scoreboard::SpareBoard,
    pub(crate) isn: isn::IsnGenerator,
    /// The last IPv4 address pair asked for and its timestamp offset (see
    /// [`Tcp::ts_offset`]).
    ts_offset_last: core::cell::Cell<Option<(u64, u32)>>,
    pub(crate) cookies: syncookie::SynCookies,
    /// The stack-wide allowance of challenge ACKs (see [`sock::Sock::challenge_ack_allowed`]).
    pub(crate) challenge: ChallengeAckLimit,
    /// Connections closed by the user and still alive (Linux `tcp_orphan_count`).
    pub(crate) orphans: usize,
    port_hint: u16,
    /// Connections with output held back by a full transmit queue, in the order they
    /// found it full ([`tcb::TcbFlags::TX_THROTTLED`]; see `Stack::tcp_tx_wake`).
    pub(crate) tx_waiters: std::collections::VecDeque<TcpHandle>,
    /// When the waiters were last woken, as the instant and the count of drains
    /// (`Stack::tx_drains`) then: at most once per round (see `tcp_tx_wake`).
    pub(crate) tx_woken: Option<(Instant, u64)>,
    /// Connections whose send found no buffer memory (`tcp_mem`): marked writable when
    /// the stack leaves memory pressure (see `Stack::tcp_mem_wake`).
    pub(crate) mem_waiters: std::collections::BTreeSet<TcpHandle>,
    /// The rarely set per-socket options of the connections that have any, by slab index
    /// ([`tcb::TcbFlags::XOPTS`]; see [`tcb::SockOpts`]).
    pub(crate) xopts: hashbrown::HashMap<u32, tcb::SockOpts>,
    /// The IPv6 addresses of IPv6 tuples (see [`intern6`]).
    pub(crate) intern6: intern6::Intern6,
    /// Segments that early demux handed straight to their connection, both families
    /// (see [`early_demux`] and [`crate::Stack::tcp_early_demux_hits`]).
    pub(crate) early_demux: u64,
    /// Segments the receive fast path took (see [`fast_path`] and
    /// [`crate::Stack::tcp_rcv_fast_hits`]).
    pub(crate) rcv_fast: u64,
    /// Segments written from a connection's header template, both families (see
    /// [`crate::Stack::tcp_header_template_hits`]).
    pub(crate) template_hits: u64,
    /// Writes sent by [`Stack::tcp_push_one`] (see
    /// [`crate::Stack::tcp_push_one_hits`]).
    pub(crate) push_one_hits: u64,
    /// Early demux is off ([`crate::Stack::set_tcp_early_demux`]): every segment takes
    /// the general path.
    pub(crate) early_demux_off: bool,
    /// The slab index of the connection early demux last found in the established table
    /// ([`DEMUX_NONE`] if none): a run of segments of one connection skips the keyed hash
    /// and the probe (as `neigh`'s hot entry does for a run of frames to one next hop).
    /// It is reset whenever a connection leaves the table ([`Tcp::unhash`]), so while
    /// set it names a connection in the table, and a segment whose tuple is that
    /// connection's finds the same connection the table would.
    pub(crate) demux_last: u32,
}

/// No connection cached for early demux (see `Tcp::demux_last`).
pub(crate) const DEMUX_NONE: u32 = u32::MAX;

/// The challenge ACKs a stack may still send this second (RFC 5961 §7, when
/// `tcp_challenge_ack_limit` is below INT_MAX; Linux `tcp_challenge_timestamp` and
/// `tcp_challenge_count`).
#[derive(Debug)]
pub(crate) struct ChallengeAckLimit {
    /// The second (of the stack's clock) the allowance was drawn for.
    pub(crate) second: u64,
    /// Challenge ACKs still allowed in that second.
    pub(crate) left: u32,
    /// Key of the per-second randomisation of the allowance (Linux
    /// `get_random_u32_inclusive`).
    pub(crate) key: crate::secret::SipKey,
}

impl Tcp {
    /// Every key from the stack's `secrets`. The tables a peer fills by 4-tuple
    /// (connections, SYN queue, TIME-WAIT) share one SipHash key, so that a segment's
    /// tuple is hashed once for all of them (Linux keys its one `inet_ehashfn` table with
    /// `inet_ehash_secret`; see [`tuple_hash`]).
    pub(crate) fn new(secrets: &Secrets, sysctl: &Sysctl) -> Tcp {
        let tuples = TupleHasher::new(secrets.key(b"tcp ehash"));
        Tcp {
            conns: Slab::new(),
            ehash: ehash::EHash::new(tuples.clone()),
            listeners: listen::Listeners::default(),
            requests: listen::Requests::new(tuples.clone()),
            timewait: timer::TimeWaits::new(tuples),
            idle_active: VecDeque::new(),
            timers: wheel::Wheel::new(),
            pool: Self::pool(sysctl),
            rx_direct: rx_direct::RxDirect::default(),
            spare_board: scoreboard::SpareBoard::default(),
            isn: isn::IsnGenerator::from_secrets(secrets),
            ts_offset_last: core::cell::Cell::new(None),
            cookies: syncookie::SynCookies::from_secrets(secrets),
            challenge: ChallengeAckLimit {
                second: u64::MAX,
                left: 0,
                key: secrets.key(b"tcp challenge ack"),
            },
            orphans: 0,
            port_hint: PortRange::first_hint(sysctl, secrets.u64(b"tcp port hint")),
            tx_waiters: std::collections::VecDeque::new(),
            tx_woken: None,
            mem_waiters: std::collections::BTreeSet::new(),
            xopts: hashbrown::HashMap::new(),
            intern6: intern6::Intern6::new(secrets.hasher(b"tcp intern6")),
            early_demux: 0,
            rcv_fast: 0,
            template_hits: 0,
            push_one_hits: 0,
            early_demux_off: false,
            demux_last: DEMUX_NONE,
        }
    }

    /// The rarely set options of connection `h` (all unset if it has none).
    pub(crate) fn xopts(&self, h: TcpHandle) -> tcb::SockOpts {
        match self.get(h) {
            Some(t) if t.flags.has(tcb::TcbFlags::XOPTS) => {
                self.xopts.get(&h.index).copied().unwrap_or_default()
            }
            _ => tcb::SockOpts::default(),
        }
    }

    /// Change the rarely set options of connection `h` with `f`; the entry is made, or
    /// dropped when nothing is left set. `None` if there is no such connection.
    pub(crate) fn xopts_update<T>(
        &mut self,
        h: TcpHandle,
        f: impl FnOnce(&mut tcb::SockOpts) -> T,
    ) -> Option<T> {
        let mut o = self.xopts(h);
        let r = f(&mut o);
        let tcb = self.conns.get_mut(h.index, h.generation)?;
        if o.is_empty() {
            if tcb.flags.has(tcb::TcbFlags::XOPTS) {
                self.xopts.remove(&h.index);
            }
            tcb.flags.clear(tcb::TcbFlags::XOPTS);
        } else {
            tcb.flags.set(tcb::TcbFlags::XOPTS);
            self.xopts.insert(h.index, o);
        }
        Some(r)
    }

    /// The tuple of an IPv6 connection from `local` to `remote`, its addresses interned
    /// (see [`intern6`]); a sweep of unused ids first when one is due.
    pub(crate) fn tuple6(&mut self, local: SocketAddrV6, remote: SocketAddrV6) -> FourTuple {
        let tuples = self.conns.len() + self.requests.len() + self.timewait.len();
        if self.intern6.needs_sweep(tuples) {
            self.intern6_sweep(tuples);
        }
        self.intern6.tuple(local, remote)
    }

    /// Free the remote ids no connection, request, TIME-WAIT record or queue entry names.
    #[cold]
    fn intern6_sweep(&mut self, tuples: usize) {
        let live = self
            .conns
            .iter()
            .map(|(_, t)| t.tuple)
            .chain(self.requests.tuples())
            .chain(self.timewait.tuples())
            .filter(FourTuple::is_v6)
            .map(|t| t.remote_id());
        self.intern6.sweep(live, tuples);
    }

    /// The ISN of a new connection of `t` (see [`isn::IsnGenerator::isn`]).
    pub(crate) fn isn_of(&self, now: Instant, t: &FourTuple) -> SeqNumber {
        if !t.is_v6() {
            return self.isn.isn4(now, t.local, t.remote);
        }
        let (l, r) = self.addrs(t);
        self.isn.isn(now, l, r)
    }

    /// The timestamp offset of `t`'s address pair (see [`isn::IsnGenerator::ts_offset`]).
    /// The last IPv4 pair's offset is kept: both ends of a handshake ask for it (the SYN's
    /// request and its connection, or `connect` and its SYN), and a server's connections
    /// mostly come from few peers, so a keyed hash per connection is saved (the offset is
    /// a function of the pair, so the cache changes no value).
    pub(crate) fn ts_offset(&self, t: &FourTuple) -> u32 {
        if t.is_v6() {
            let (l, r) = self.addrs(t);
            return self.isn.ts_offset(l.ip(), r.ip());
        }
        let pair = (u64::from(t.local.ip().to_bits()) << 32) | u64::from(t.remote.ip().to_bits());
        match self.ts_offset_last.get() {
            Some((p, off)) if p == pair => off,
            _ => {
                let off = self.isn.ts_offset(*t.local.ip(), *t.remote.ip());
                self.ts_offset_last.set(Some((pair, off)));
                off
            }
        }
    }

    /// The addresses of a tuple (see [`intern6::Intern6::addrs`]).
    #[inline]
    pub(crate) fn addrs(&self, t: &FourTuple) -> (SocketAddr, SocketAddr) {
        self.intern6.addrs(t)
    }

    /// A buffer pool bounded by the stack's `tcp_mem` sysctls.
    fn pool(sysctl: &Sysctl) -> buffer::BufferPool {
        let mut pool = buffer::BufferPool::new(0);
        Self::apply_tcp_mem(&mut pool, sysctl);
        pool
    }

    /// Give the pool the `tcp_mem` thresholds and budget in force.
    pub(crate) fn apply_tcp_mem(pool: &mut buffer::BufferPool, sysctl: &Sysctl) {
        pool.set_limits(
            sysctl.tcp_mem_low,
            sysctl.tcp_mem_pressure,
            sysctl.tcp_mem_high,
            sysctl.tcp_mem_budget,
        );
    }

    /// Connections in the table (not counting TIME-WAIT records or requests).
    pub(crate) fn len(&self) -> usize {
        self.ehash.len()
    }

    pub(crate) fn get(&self, h: TcpHandle) -> Option<&Tcb> {
        self.conns.get(h.index, h.generation)
    }

    pub(crate) fn get_mut(&mut self, h: TcpHandle) -> Option<&mut Tcb> {
        self.conns.get_mut(h.index, h.generation)
    }

    /// A connection and the spare retransmission-queue board, borrowed together.
    pub(crate) fn get_with_spare(
        &mut self,
        h: TcpHandle,
    ) -> Option<(&mut Tcb, &mut scoreboard::SpareBoard)> {
        let Tcp {
            conns, spare_board, ..
        } = self;
        Some((conns.get_mut(h.index, h.generation)?, spare_board))
    }

    /// A connection and the buffer pool, borrowed together.
    pub(crate) fn split(&mut self, h: TcpHandle) -> Option<(&mut Tcb, &mut buffer::BufferPool)> {
        let Tcp { conns, pool, .. } = self;
        Some((conns.get_mut(h.index, h.generation)?, pool))
    }

    pub(crate) fn handle_of(&self, index: u32) -> TcpHandle {
        TcpHandle {
            index,
            generation: self.conns.generation(index).unwrap_or(0),
        }
    }

    /// The slab index of the connection of `tuple` (hashed to `hash`) in the established
    /// table.
    #[inline]
    pub(crate) fn lookup(&self, hash: tuple_hash::TupleHash, tuple: &FourTuple) -> Option<u32> {
        let conns = &self.conns;
        self.ehash.get(hash, |i| {
            conns.by_index(i).is_some_and(|t| t.tuple == *tuple)
        })
    }

    /// Put a new connection in the slab and the established table, under the hash of its
    /// tuple the caller has already (the segment's that completed the handshake, or the
    /// one the port search computed): a connection's tuple is hashed once to file it.
    pub(crate) fn insert_hashed(&mut self, hash: tuple_hash::TupleHash, tcb: Tcb) -> TcpHandle {
        debug_assert!(
            hash == self.ehash.hash(&tcb.tuple),
            "the hash of another tuple"
        );
        debug_assert!(
            self.lookup(hash, &tcb.tuple).is_none(),
            "tuple already held"
        );
        let (index, generation) = self.conns.insert(tcb);
        self.ehash.insert(hash, index);
        TcpHandle { index, generation }
    }

    /// Take connection `h` out of the established table (it stays in the slab until its
    /// handle is closed); whether it was there. `known` is the tuple's hash when the
    /// caller has it already (TIME-WAIT files its record under the same one).
    pub(crate) fn unhash(&mut self, h: TcpHandle, known: Option<tuple_hash::TupleHash>) -> bool {
        // Early demux's cached entry may be this one: forget it (rare; see `demux_last`).
        self.demux_last = DEMUX_NONE;
        let Some(tcb) = self.conns.get(h.index, h.generation) else {
            return false;
        };
        debug_assert!(known.is_none_or(|k| k == self.ehash.hash(&tcb.tuple)));
        let hash = known.unwrap_or_else(|| self.ehash.hash(&tcb.tuple));
        self.ehash.remove(hash, h.index)
    }

    /// Remove a connection: its buffers go back to the pool, its retransmission board
    /// and [`tcb::ActiveState`] box to their bounded free lists (the spare boards, the
    /// thread's boxes), its slot to the slab's free list; the TCB itself is dropped in
    /// place, not moved out. Returns the state it was in. `known`: as in [`Tcp::unhash`].
    pub(crate) fn remove(
        &mut self,
        h: TcpHandle,
        known: Option<tuple_hash::TupleHash>,
    ) -> Option<State> {
        self.unhash(h, known);
        let Tcp {
            conns,
            pool,
            spare_board,
            ..
        } = self;
        let tcb = conns.get_mut(h.index, h.generation)?;
        // Its timers go with it (Linux inet_csk_clear_xmit_timers): no entry ever comes
        // up for a connection that is gone, nor for the one that reuses its slot.
        self.timers.cancel(h.index);
        let (state, flags) = (tcb.state, tcb.flags);
        tcb.sndbuf.clear(pool);
        tcb.rcvbuf.clear(pool);
        if let Some(q) = tcb.rtx_mut() {
            q.clear_reusing(spare_board);
        }
        tcb.release_active();
        conns.discard(h.index, h.generation);
        if flags.has(tcb::TcbFlags::XOPTS) {
            self.xopts.remove(&h.index);
        }
        if flags.has(tcb::TcbFlags::ORPHAN) {
            debug_assert!(self.orphans > 0, "orphan count out of step");
            self.orphans = self.orphans.saturating_sub(1);
        }
        Some(state)
    }

    /// Whether `tuple` names a connection, a request or a TIME-WAIT record.
    fn tuple_in_use(&self, hash: tuple_hash::TupleHash, tuple: &FourTuple) -> bool {
        self.lookup(hash, tuple).is_some()
            || self.requests.contains(hash, tuple)
            || self.timewait.contains(hash, tuple)
    }

    /// An ephemeral local port for a connection to `remote` (Linux
    /// `__inet_hash_connect`: search from a moving offset for a port whose 4-tuple is
    /// free, `__inet_check_established`). A tuple held by a TIME-WAIT record counts as
    /// free if `tcp_tw_reuse` allows taking it over ([`tw_reusable`]); the record comes
    /// back with the port, for the caller to retire.
    /// `local`'s port is not read (for IPv6, `local` and `remote` hold ids).
    fn connect_port(
        &mut self,
        now: Instant,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        sysctl: &Sysctl,
    ) -> Option<(u16, Option<timer::TimeWait>, tuple_hash::TupleHash)> {
        let range = PortRange::of(sysctl)?;
        for port in range.from(self.port_hint) {
            let tuple = FourTuple {
                local: SocketAddrV4::new(*local.ip(), port),
                remote,
            };
            let hash = self.ehash.hash(&tuple);
            if self.listeners.bound(port)
                || self.lookup(hash, &tuple).is_some()
                || self.requests.contains(hash, &tuple)
            {
                continue;
            }
            let reused = if let Some(tw) = self.timewait.get(hash, &tuple) {
                match Some(*tw).filter(|tw| tw_reusable(sysctl, tw, now)) {
                    Some(tw) => Some(tw),
                    None => continue,
                }
            } else {
                None
            };
            self.port_hint = range.after(port);
            return Some((port, reused, hash));
        }
        None
    }
}

/// `net.ipv4.tcp_tw_reuse` (Linux `tcp_twsk_unique`, `net/ipv4/tcp_ipv4.c`): may a new
/// outgoing connection take over the 4-tuple of this TIME-WAIT record now?
///
/// - Mode 1 only. Mode 2 is "loopback only" in Linux (either address in 127/8, or bound
///   to `lo`); ustack has no loopback device, so 2 (the default) is off, like 0.
/// - Only if the old connection used timestamps (Linux: `tw_ts_recent_stamp != 0`): then
///   RFC 7323 §5 PAWS lets the peer tell an old duplicate from the new incarnation, whose
///   TSvals are newer (same per-address-pair offset, RFC 7323 §5.4, on a monotonic clock).
/// - Only once the record is older than `tcp_tw_reuse_delay`, 1 s in Linux (6.13+:
///   `time_after32(tcp_clock_ms(), tw_entry_stamp + sysctl_tcp_tw_reuse_delay)`; earlier
///   kernels compared `tw_ts_recent_stamp` in seconds). ustack's record has no entry
///   stamp; its deadline less 2*MSL is the entry time, or later if a retransmitted FIN
///   re-armed it, which only errs on the safe side.
pub(crate) fn tw_reusable(sysctl: &Sysctl, tw: &timer::TimeWait, now: Instant) -> bool {
    const TW_REUSE_DELAY: core::time::Duration = core::time::Duration::from_secs(1);
    // now > entered + delay, with entered = expires - 2*MSL.
    sysctl.tcp_tw_reuse == 1
        && tw.ts_ok
        && now + timer::TIMEWAIT_LEN > tw.expires.instant(now) + TW_REUSE_DELAY
}

/// The ISS of a connection that reuses a TIME-WAIT tuple: ahead of everything the old
/// incarnation sent, by more than a maximal unscaled window (Linux `tcp_twsk_unique`:
/// "u32 seq = tcptw->tw_snd_nxt + 65535 + 2; if (!seq) seq = 1;").
pub(crate) fn tw_reuse_iss(tw: &timer::TimeWait) -> SeqNumber {
    match tw.snd_nxt + (65_535 + 2) {
        SeqNumber(0) => SeqNumber(1),
        seq => seq,
    }
}

/// A snapshot of one connection, like `ss -tmi` shows it (Linux `struct tcp_info`), from
/// [`Stack::tcp_info`].
#[derive(Debug, Clone, PartialEq)]
pub struct TcpInfo {
    /// The RFC 9293 state.
    pub state: State,
    /// Our address and port (as [`Stack::tcp_local_addr`]).
    pub local: SocketAddr,
    /// The peer's address and port (as [`Stack::tcp_peer_addr`]).
    pub remote: SocketAddr,
    /// Bytes received and not yet read (ss Recv-Q).
    pub recv_q: usize,
    /// Bytes written and not yet acknowledged (ss Send-Q).
    pub send_q: usize,
    /// The payload bytes a segment carries (Linux `tcpi_snd_mss`: the peer's MSS option,
    /// capped by our MTU, less the timestamp option when in use).
    pub mss: u16,
    /// The congestion window, in segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// The slow-start threshold, in segments (`tcpi_snd_ssthresh`; `u32::MAX` until the
    /// first loss).
    pub ssthresh: u32,
    /// The smoothed round-trip time (RFC 6298 SRTT; `None` before the first sample).
    pub srtt: Option<core::time::Duration>,
    /// The retransmission timeout now, backoff included (`tcpi_rto`).
    pub rto: core::time::Duration,
    /// The peer's window, scaled, in bytes (SND.WND).
    pub snd_wnd: u32,
    /// The window we last advertised, scaled, in bytes (RCV.WND).
    pub rcv_wnd: u32,
    /// Consecutive retransmission timeouts without progress (`tcpi_retransmits`).
    pub retransmits: u8,
    /// Segments sent and not yet acknowledged, i.e. retransmission-queue records (Linux
    /// `tcpi_unacked`, `packets_out`).
    pub unacked: u32,
    /// SACK is in use (both SYNs carried SACK-permitted, RFC 2018 §2).
    pub sack: bool,
    /// Timestamps are in use (RFC 7323 §3.2).
    pub timestamps: bool,
    /// Window scaling, if in use: `(theirs, ours)`, the shifts applied to the windows the
    /// peer sends and to those we send (RFC 7323 §2.2; `ss`'s `wscale:snd,rcv`).
    pub wscale: Option<(u8, u8)>,
}

impl Stack {
    /// Listen on `local` (address unspecified or ours, of either family) with a backlog,
    /// clamped to `somaxconn` (Linux `__sys_listen`). An IPv6 listener on `::` also takes
    /// IPv4 connections, their peers seen as `::ffff:a.b.c.d`, unless
    /// [`Stack::tcp_listener_set_v6only`] (Linux's default `net.ipv6.bindv6only = 0`).
    /// One listener a port and family; across families as Linux's bind conflicts
    /// (`inet_csk_bind_conflict`): a dual-stack `::` and an IPv4 listener conflict
    /// (EADDRINUSE), a V6ONLY `::` ([`Stack::tcp_listen_v6only`]) and `0.0.0.0` coexist
    /// (see `Listeners::conflicts`).
    pub fn tcp_listen(
        &mut self,
        local: impl Into<SocketAddr>,
        backlog: u32,
    ) -> Result<ListenerHandle, Error> {
        self.tcp_listen_with(local.into(), backlog, false)
    }

    /// Listen on the IPv6 `local` with `IPV6_V6ONLY` set first (as a program sets it
    /// before `bind`): no IPv4 connections, and an IPv4 listener on the same port may
    /// exist beside it.
    pub fn tcp_listen_v6only(
        &mut self,
        local: SocketAddrV6,
        backlog: u32,
    ) -> Result<ListenerHandle, Error> {
        if local.ip().to_ipv4_mapped().is_some() {
            // Linux `__inet6_bind`: a v4-mapped address on a V6ONLY socket is EINVAL.
            return Err(Error::InvalidArgument);
        }
        self.tcp_listen_with(SocketAddr::V6(local), backlog, true)
    }

    fn tcp_listen_with(
        &mut self,
        local: SocketAddr,
        backlog: u32,
        v6only: bool,
    ) -> Result<ListenerHandle, Error> {
        let ours = match local {
            SocketAddr::V4(a) => a.ip().is_unspecified() || *a.ip() == self.ipv4.addr,
            SocketAddr::V6(a) => {
                a.ip().is_unspecified()
                    || self.ip6.is_ours(*a.ip())
                    || a.ip().to_ipv4_mapped() == Some(self.ipv4.addr)
            }
        };
        if !ours {
            return Err(Error::AddrNotAvailable);
        }
        if local.port() == 0 {
            return Err(Error::InvalidArgument);
        }
        if self.tcp.listeners.conflicts(local, v6only) {
            return Err(Error::AddrInUse);
        }
        let backlog = backlog.min(self.sysctl.somaxconn as u32);
        let (index, generation) = self.tcp.listeners.add(local, backlog, v6only);
        Ok(ListenerHandle { index, generation })
    }

    /// `SO_REUSEADDR` on a listener (Linux `sk_reuse`): its connections inherit it, and
    /// [`Stack::tcp_bind_conflict`] asks it of them.
    pub fn tcp_listener_set_reuseaddr(&mut self, l: ListenerHandle, on: bool) -> Result<(), Error> {
        self.tcp
            .listeners
            .get_mut(l.index, l.generation)
            .ok_or(Error::BadHandle)?
            .reuseaddr = on;
        Ok(())
    }

    /// `SO_REUSEADDR` on a connection (Linux `sk_reuse`): its TIME-WAIT record keeps it,
    /// and [`Stack::tcp_bind_conflict`] asks it of both.
    pub fn tcp_set_reuseaddr(&mut self, h: TcpHandle, on: bool) -> Result<(), Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if on {
            tcb.flags.set(tcb::TcbFlags::REUSEADDR);
        } else {
            tcb.flags.clear(tcb::TcbFlags::REUSEADDR);
        }
        Ok(())
    }

    /// `IPV6_V6ONLY` on an IPv6 listener: IPv4 connections no longer reach it (they find
    /// no socket and are reset). `EAFNOSUPPORT` for an IPv4 listener; `EADDRINUSE` to turn
    /// it off while an IPv4 listener shares the port (Linux refuses the option on a bound
    /// socket altogether, EINVAL).
    pub fn tcp_listener_set_v6only(&mut self, l: ListenerHandle, on: bool) -> Result<(), Error> {
        if !on
            && self.tcp.listeners.get(l.index, l.generation).is_some()
            && !self.tcp.listeners.may_be_dual(l.index)
        {
            return Err(Error::AddrInUse);
        }
        let listener = self
            .tcp
            .listeners
            .get_mut(l.index, l.generation)
            .ok_or(Error::BadHandle)?;
        if listener.local.is_ipv4() {
            return Err(Error::AddrFamily);
        }
        listener.v6only = on;
        Ok(())
    }

    /// The address a listener is bound to.
    pub fn tcp_listener_addr(&self, l: ListenerHandle) -> Result<SocketAddr, Error> {
        self.tcp
            .listeners
            .get(l.index, l.generation)
            .map(|l| l.local)
            .ok_or(Error::BadHandle)
    }

    /// Whether there is a route for the segments of `t`.
    pub(crate) fn tcp_route_ok(&self, t: &FourTuple) -> bool {
        match self.tcp.addrs(t).1 {
            SocketAddr::V4(r) => self.route(*r.ip()).is_some(),
            SocketAddr::V6(r) => self.ip6.route(*r.ip()).is_some(),
        }
    }

    /// The listener for a segment of `t`, if any.
    #[inline]
    pub(crate) fn tcp_listener_for(&self, t: &FourTuple) -> Option<u32> {
        if t.is_v6() {
            return self.tcp.listeners.lookup(self.tcp.addrs(t).0);
        }
        self.tcp.listeners.lookup(SocketAddr::V4(t.local))
    }

    /// A connection's addresses as its user sees them (`getsockname`, `getpeername`):
    /// an IPv4 connection of a dual-stack IPv6 socket as `::ffff:a.b.c.d`.
    fn tcp_user_addrs(&self, tcb: &Tcb) -> (SocketAddr, SocketAddr) {
        let (l, r) = self.tcp.addrs(&tcb.tuple);
        if !tcb.flags.has(tcb::TcbFlags::V4_MAPPED) {
            return (l, r);
        }
        let mapped = |a: SocketAddr| match a {
            SocketAddr::V4(a) => {
                SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
            }
            a => a,
        };
        (mapped(l), mapped(r))
    }

    /// The local address of a connection (`getsockname`), as [`Stack::tcp_info`] has it.
    pub fn tcp_local_addr(&self, h: TcpHandle) -> Result<SocketAddr, Error> {
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        Ok(self.tcp_user_addrs(tcb).0)
    }

    /// The peer's address of a connection (`getpeername`).
    pub fn tcp_peer_addr(&self, h: TcpHandle) -> Result<SocketAddr, Error> {
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        Ok(self.tcp_user_addrs(tcb).1)
    }

    /// Whether `bind(2)` of TCP port `port` conflicts with what the stack holds (Linux
    /// `inet_csk_get_port` -> `inet_csk_bind_conflict`): a listener on the port always
    /// does; a connection on it in any state, orphans included, and a TIME-WAIT record do
    /// unless both the new socket (`reuseaddr`) and the old one set SO_REUSEADDR (Linux:
    /// "if (reuse && sk2->sk_reuse && sk2->sk_state != TCP_LISTEN)"; an accepted
    /// connection inherits `sk_reuse` from its listener, a TIME-WAIT record from its
    /// connection: `TcbFlags::REUSEADDR`, `TimeWait::reuseaddr`). The
    /// stack's own bookkeeping of bound but not yet listening or connected sockets is the
    /// caller's (a C API's descriptors). Linux finds the port's sockets in its bind hash;
    /// this walks the connections and the TIME-WAIT records, which is fine for `bind`
    /// (not for every connect).
    pub fn tcp_bind_conflict(&self, port: u16, reuseaddr: bool) -> bool {
        if self.tcp.listeners.bound(port) {
            return true;
        }
        self.tcp.conns.iter().any(|(_, t)| {
            t.tuple.local.port() == port && !(reuseaddr && t.flags.has(tcb::TcbFlags::REUSEADDR))
        }) || self
            .tcp
            .timewait
            .iter()
            .any(|(t, tw)| t.local.port() == port && !(reuseaddr && tw.reuseaddr))
    }

    /// `listen()` again on a listener: only the backlog changes, clamped to `somaxconn`
    /// as at first (Linux `inet_listen`: "WRITE_ONCE(sk->sk_max_ack_backlog, backlog)"
    /// when the socket is already listening).
    pub fn tcp_listen_backlog(&mut self, l: ListenerHandle, backlog: u32) -> Result<(), Error> {
        let somaxconn = self.sysctl.somaxconn as u32;
        let listener = self
            .tcp
            .listeners
            .get_mut(l.index, l.generation)
            .ok_or(Error::BadHandle)?;
        listener.backlog = backlog.min(somaxconn);
        Ok(())
    }

    /// Take an established connection from a listener's accept queue, with its peer's
    /// IPv4 address. `EAFNOSUPPORT` (the connection stays queued) when the next one is
    /// an IPv6 connection or was accepted by a dual-stack listener: take those with
    /// [`Stack::tcp_accept_addr`].
    pub fn tcp_accept(&mut self, l: ListenerHandle) -> Result<(TcpHandle, SocketAddrV4), Error> {
        loop {
            let listener = self
                .tcp
                .listeners
                .get(l.index, l.generation)
                .ok_or(Error::BadHandle)?;
            let &h = listener.accept_queue.front().ok_or(Error::WouldBlock)?;
            match self.tcp.get(h) {
                Some(tcb) if tcb.tuple.is_v6() || listener.local.is_ipv6() => {
                    return Err(Error::AddrFamily);
                }
                _ => {}
            }
            let (h, peer) = self.tcp_accept_addr(l)?;
            if let SocketAddr::V4(peer) = peer {
                return Ok((h, peer));
            }
        }
    }

    /// Take an established connection from a listener's accept queue, with its peer's
    /// address as the listener's family has it (an IPv4 peer of an IPv6 listener as
    /// `::ffff:a.b.c.d`).
    pub fn tcp_accept_addr(&mut self, l: ListenerHandle) -> Result<(TcpHandle, SocketAddr), Error> {
        loop {
            let listener = self
                .tcp
                .listeners
                .get_mut(l.index, l.generation)
                .ok_or(Error::BadHandle)?;
            let mapped = listener.local.is_ipv6();
            let h = listener.accept_queue.pop_front().ok_or(Error::WouldBlock)?;
            // A connection reset while queued is skipped, as Linux's inet_csk_accept would
            // hand it over and fail its first call; we drop it here.
            if let Some(tcb) = self.tcp.get_mut(h) {
                tcb.flags.clear(tcb::TcbFlags::PASSIVE);
                if mapped && !tcb.tuple.is_v6() {
                    tcb.flags.set(tcb::TcbFlags::V4_MAPPED);
                }
                return self.tcp_peer_addr(h).map(|peer| (h, peer));
            }
        }
    }

    /// Connections waiting in a listener's accept queue.
    pub fn tcp_accept_queue_len(&self, l: ListenerHandle) -> Result<usize, Error> {
        self.tcp
            .listeners
            .get(l.index, l.generation)
            .map(|l| l.accept_queue.len())
            .ok_or(Error::BadHandle)
    }

    /// Stop listening. Connections still in the accept queue are reset, requests dropped
    /// (Linux `inet_csk_listen_stop`).
    pub fn tcp_close_listener(&mut self, now: Instant, l: ListenerHandle) -> Result<(), Error> {
        let listener = self
            .tcp
            .listeners
            .remove(l.index, l.generation)
            .ok_or(Error::BadHandle)?;
        self.tcp.requests.remove_listener(l.index);
        for h in listener.accept_queue {
            self.tcp_abort(now, h).ok();
        }
        // Readiness: a poller drops the registration of a closed socket when it sees it.
        self.ready.mark(SocketKey::Listener(l), Readiness::ALL);
        Ok(())
    }

    /// Open a connection to `remote` (active open, RFC 9293 §3.10.1): a SYN goes out now.
    /// An IPv6 `remote` of the form `::ffff:a.b.c.d` connects over IPv4, the connection's
    /// addresses then seen v4-mapped (Linux `tcp_v6_connect` handing it to
    /// `tcp_v4_connect`).
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: impl Into<SocketAddr>,
    ) -> Result<TcpHandle, Error> {
        self.tcp_connect_with(now, remote, None, &TcpOptValues::default())
    }

    /// Open a connection to `remote` from a chosen local port (`bind(2)` then
    /// `connect(2)`): for a runtime that picks ports whose 4-tuple hashes back to its own
    /// shard (RSS). EADDRINUSE if the 4-tuple is taken (by a connection, a request or a
    /// TIME-WAIT record) or a listener holds the port.
    pub fn tcp_connect_from(
        &mut self,
        now: Instant,
        local_port: u16,
        remote: impl Into<SocketAddr>,
    ) -> Result<TcpHandle, Error> {
        self.tcp_connect_with(now, remote, Some(local_port), &TcpOptValues::default())
    }

    /// [`Stack::tcp_connect`] (`local_port` `None`) or [`Stack::tcp_connect_from`] for a
    /// socket that set [`TcpOpt`]s before `connect(2)`: they hold from the SYN on, so a
    /// `TCP_MAXSEG` lowers the MSS the SYN announces and the window it offers (Linux
    /// `tcp_connect_init`: "tp->advmss = tcp_mss_clamp(tp, dst_metric_advmss(dst))").
    /// A value out of Linux's bounds is `EINVAL` and nothing is sent.
    pub fn tcp_connect_with(
        &mut self,
        now: Instant,
        remote: impl Into<SocketAddr>,
        local_port: Option<u16>,
        opts: &TcpOptValues,
    ) -> Result<TcpHandle, Error> {
        for (o, v) in opts.iter() {
            o.check(v)?;
        }
        if local_port == Some(0) {
            return Err(Error::InvalidArgument);
        }
        match remote.into() {
            SocketAddr::V4(r) => self.tcp_connect4(now, r, local_port, opts),
            SocketAddr::V6(r) => match r.ip().to_ipv4_mapped() {
                Some(ip) => {
                    let r = SocketAddrV4::new(ip, r.port());
                    let h = self.tcp_connect4(now, r, local_port, opts)?;
                    if let Some(tcb) = self.tcp.get_mut(h) {
                        tcb.flags.set(tcb::TcbFlags::V4_MAPPED);
                    }
                    Ok(h)
                }
                None => self.tcp_connect6(now, r, local_port, opts),
            },
        }
    }

    /// An active open over IPv4 (Linux `tcp_v4_connect`).
    fn tcp_connect4(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        local_port: Option<u16>,
        opts: &TcpOptValues,
    ) -> Result<TcpHandle, Error> {
        if remote.port() == 0
            || remote.ip().is_unspecified()
            || remote.ip().is_broadcast()
            || remote.ip().is_multicast()
        {
            return Err(Error::InvalidArgument);
        }
        if self.route(*remote.ip()).is_none() {
            self.mib.drop(ustack_obs::DropReason::IpNoRoute);
            return Err(Error::NetUnreachable);
        }
        let local_ip = self.ipv4.addr;
        let (port, reused, hash) = match local_port {
            Some(port) => {
                let tuple = FourTuple {
                    local: SocketAddrV4::new(local_ip, port),
                    remote,
                };
                let hash = self.tcp.ehash.hash(&tuple);
                if self.tcp.listeners.bound(port) || self.tcp.tuple_in_use(hash, &tuple) {
                    return Err(Error::AddrInUse);
                }
                (port, None, hash)
            }
            None => self
                .tcp
                .connect_port(now, SocketAddrV4::new(local_ip, 0), remote, &self.sysctl)
                .ok_or(Error::AddrNotAvailable)?,
        };
        let tuple = FourTuple {
            local: SocketAddrV4::new(local_ip, port),
            remote,
        };
        self.tcp_connect_tuple(now, tuple, hash, reused, opts)
    }

    /// An active open over IPv6 (Linux `tcp_v6_connect`): the source by RFC 6724's rules,
    /// an ephemeral port whose tuple is free as for IPv4.
    fn tcp_connect6(
        &mut self,
        now: Instant,
        remote: SocketAddrV6,
        local_port: Option<u16>,
        opts: &TcpOptValues,
    ) -> Result<TcpHandle, Error> {
        let ip = *remote.ip();
        if remote.port() == 0 || ip.is_unspecified() || ip.is_multicast() {
            return Err(Error::InvalidArgument);
        }
        let (Some(src), Some(_)) = (self.ip6.select_source(ip), self.ip6.route(ip)) else {
            self.mib.drop(ustack_obs::DropReason::Ip6NoRoute);
            return Err(Error::NetUnreachable);
        };
        let remote = SocketAddrV6::new(ip, remote.port(), 0, 0);
        // The ids of the two addresses, once: the port goes in below.
        let ids = self.tcp.tuple6(SocketAddrV6::new(src, 0, 0, 0), remote);
        let tuple_at = |port: u16| FourTuple {
            local: SocketAddrV4::new(*ids.local.ip(), port),
            remote: ids.remote,
        };
        let (port, reused, hash) = match local_port {
            Some(port) => {
                let hash = self.tcp.ehash.hash(&tuple_at(port));
                if self.tcp.listeners.bound(port) || self.tcp.tuple_in_use(hash, &tuple_at(port)) {
                    return Err(Error::AddrInUse);
                }
                (port, None, hash)
            }
            None => self
                .tcp
                .connect_port(now, ids.local, ids.remote, &self.sysctl)
                .ok_or(Error::AddrNotAvailable)?,
        };
        let tuple = tuple_at(port);
        self.tcp_connect_tuple(now, tuple, hash, reused, opts)
    }

    /// The active open of `tuple`, its port chosen (`reused`: the TIME-WAIT record
    /// `tcp_tw_reuse` lets it take over).
    fn tcp_connect_tuple(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        hash: tuple_hash::TupleHash,
        reused: Option<timer::TimeWait>,
        opts: &TcpOptValues,
    ) -> Result<TcpHandle, Error> {
        let iss = match reused {
            // tcp_tw_reuse (Linux __inet_check_established): the record goes, counted
            // TWRecycled; the new incarnation starts past the old one's sequence space and
            // remembers its TS.Recent (Linux copies tw_ts_recent and its stamp).
            Some(tw) => {
                self.tcp.timewait.remove(hash, &tuple);
                self.mib.inc(Counter::TcpExtTWRecycled);
                tw_reuse_iss(&tw)
            }
            None => self.tcp.isn_of(now, &tuple),
        };
        // The MSS it announces: the path's, or TCP_MAXSEG's when lower (Linux
        // tcp_advertise_mss / tcp_mss_clamp).
        let adv_mss = match opts.get(TcpOpt::MaxSeg).filter(|&m| m > 0) {
            Some(user) => self.tcp_adv_mss(now, &tuple).min(user as u16),
            None => self.tcp_adv_mss(now, &tuple),
        };
        let mut tcb = self.new_tcb(now, tuple, State::SynSent, iss, adv_mss);
        if let Some(tw) = reused {
            // For PAWS on the SYN-ACK (Linux tcp_rcv_synsent_state_process); recorded, at
            // the latest, when the record was made.
            tcb.ts_recent = tw.ts_recent;
            tcb.ts_recent_stamp = ((tw.expires.instant(now).as_millis() / 1000) as u32)
                .saturating_sub(timer::TIMEWAIT_LEN.as_secs() as u32);
        }
        // The port search's hash of the tuple files it (Linux __inet_hash_connect hands
        // inet_ehash_insert the hash it checked the port with).
        let h = self.tcp.insert_hashed(hash, tcb);
        for (o, v) in opts.iter() {
            let v = o.check(v)?;
            self.tcp.xopts_update(h, |x| o.store(x, v));
        }
        self.mib.inc(Counter::TcpActiveOpens);
        self.tcp_send_syn(now, h);
        Ok(h)
    }

    /// Queue bytes for sending; returns how many were taken (at most the free send
    /// buffer). `WouldBlock` when none fit; `NotConnected`-like errors map to EPIPE.
    pub fn tcp_send(&mut self, now: Instant, h: TcpHandle, data: &[u8]) -> Result<usize, Error> {
        // A small write with nothing in flight leaves whole, in one pass.
        if let Some(n) = self.tcp_send_one(now, h, data) {
            return Ok(n);
        }
        self.tcp_sendmsg(now, h, data)
    }

    /// [`Stack::tcp_send`] past its one-pass case (Linux `tcp_sendmsg_locked`): out of
    /// line, so that the common case's frame stays small.
    #[inline(never)]
    fn tcp_sendmsg(&mut self, now: Instant, h: TcpHandle, data: &[u8]) -> Result<usize, Error> {
        let sockets = self.tcp.conns.len();
        let (mut tcb, mut pool) = self.tcp.split(h).ok_or(Error::BadHandle)?;
        if let Some(e) = tcb.error.take() {
            return Err(e);
        }
        if tcb.flags.has(tcb::TcbFlags::FIN_QUEUED)
            || !(tcb.state.can_send()
                || tcb.state == State::SynSent
                || tcb.state == State::SynReceived)
        {
            return Err(Error::BrokenPipe);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let limit = tcb.sndbuf_limit as usize;
        // A long write into the device's held transmit slots, when it lends them
        // (tx_lend.rs's held slots: no pool memory, no copy into chunks).
        let mut most = usize::MAX;
        if tcb.sndbuf.holds_pieces() || (data.len() >= tx_lend::LEND_MIN && pool.held.on()) {
            match self.tcp_sendmsg_held(now, h, data) {
                Ok(n) => return Ok(n),
                Err(k) => most = k,
            }
            let (t, p) = self.tcp.split(h).ok_or(Error::BadHandle)?;
            (tcb, pool) = (t, p);
            if most == 0 {
                // No held slot: woken by the ACK that frees some (as for a full buffer),
                // or when the driver tops the reserve up (`Stack::tx_held_given`).
                tcb.flags.set(tcb::TcbFlags::NOSPACE);
                if !pool.held.waiters.contains(&h) {
                    pool.held.waiters.push(h);
                }
                return Err(Error::WouldBlock);
            }
        }
        // Linux tcp_sendmsg -> sk_wmem_schedule -> __sk_mem_raise_allocated (SK_MEM_SEND):
        // the chunks this write would take, asked of the stack's tcp_mem.
        let mut take = data
            .len()
            .min(limit.saturating_sub(tcb.sndbuf.len()))
            .min(most);
        let chunks = tcb.sndbuf.chunks_for(take);
        if !pool.fast_schedule(chunks) {
            let mut ask = buffer::MemAsk {
                chunks,
                held_kind: tcb.sndbuf.mem_bytes(),
                held_total: tcb.sndbuf.mem_bytes() + tcb.rcvbuf.mem_bytes(),
                min: self.sysctl.tcp_wmem_min as usize,
                sockets,
            };
            if ask.chunks > 1 && !pool.mem_schedule(now, &mut self.mib, ask) {
                // Linux charges a write skb by skb: a write larger than what is left may
                // still queue one piece (the tail chunk's room and one chunk more).
                take = take.min(tcb.sndbuf.tail_room() + buffer::CHUNK);
                ask.chunks = 1;
            }
            if ask.chunks > 0 && !pool.mem_schedule(now, &mut self.mib, ask) {
                // Linux sk_stream_moderate_sndbuf: the send buffer shrinks to half of what it
                // holds (at least SOCK_MIN_SNDBUF) unless the user set it; the writer is told
                // EAGAIN and woken when the stack leaves memory pressure.
                if !tcb.flags.has(tcb::TcbFlags::SNDBUF_LOCK) {
                    let moderated = (tcb.sndbuf.len() / 2).max(SOCK_MIN_SNDBUF);
                    tcb.sndbuf_limit = tcb.sndbuf_limit.min(moderated as u32);
                }
                // Woken by its own ACK if it has data in flight (see `NOSPACE`), else,
                // with nothing in flight to bring one, when memory frees
                // (`Stack::tcp_mem_freed`).
                tcb.flags.set(tcb::TcbFlags::NOSPACE);
                self.tcp.mem_waiters.insert(h);
                return Err(Error::WouldBlock);
            }
        }
        let n = tcb.sndbuf.write(pool, &data[..take], limit);
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        // Linux tcp_sendmsg -> tcp_push: the write's one segment straight out when nothing
        // is in flight and it fits (tcp_push_one), else the general output.
        if tcb.state.can_send() && !self.tcp_push_one(now, h) {
            self.tcp_output(now, h);
        }
        Ok(n)
    }

    /// `send(MSG_OOB)` (Linux `tcp_sendmsg` with `MSG_OOB`, `tcp_mark_urg`): queue `data`
    /// as [`Stack::tcp_send`] does and set the send urgent pointer after its last byte
    /// taken, so that the segments before it carry URG (RFC 9293 §3.8.5; the pointer is
    /// "one past the urgent byte", as BSD and Linux set it, RFC 6093 §3). ustack's
    /// receive side has no out-of-band byte: an inbound urgent byte is read in line (as
    /// Linux's `SO_OOBINLINE`), and there is no `recv(MSG_OOB)`.
    pub fn tcp_send_urgent(
        &mut self,
        now: Instant,
        h: TcpHandle,
        data: &[u8],
    ) -> Result<usize, Error> {
        // Marked before the data goes out, as tcp_push marks it before pushing, and moved
        // to where the write ended after.
        let end = |t: &Tcb| t.data_start() + t.sndbuf.len();
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        let planned = end(tcb) + data.len();
        self.tcp_set_snd_up(h, planned);
        let r = self.tcp_send(now, h, data);
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        let written = end(tcb);
        if written != planned {
            self.tcp_set_snd_up(h, written);
        }
        r
    }

    /// Urgent mode up to `up` (see [`Stack::tcp_send_urgent`]).
    fn tcp_set_snd_up(&mut self, h: TcpHandle, up: SeqNumber) {
        if self.tcp.xopts_update(h, |o| o.snd_up = Some(up)).is_some()
            && let Some(t) = self.tcp.get_mut(h)
        {
            t.flags.set(tcb::TcbFlags::URG);
        }
    }

    /// Read received bytes. `Ok(0)` is end of stream (the peer sent FIN and everything
    /// before it was read); `WouldBlock` when nothing is there yet.
    ///
    /// One look-up of the connection for the whole read (the copy, the autotuning, the
    /// window check, and with nothing to read the error, end-of-stream and `EAGAIN`
    /// tests), as Linux's `tcp_recvmsg` works on the socket it was given: a small in-order
    /// message is one copy out of the head chunk and a few tests.
    pub fn tcp_recv(&mut self, now: Instant, h: TcpHandle, buf: &mut [u8]) -> Result<usize, Error> {
        let rmem_max = self.sysctl.tcp_rmem_max;
        let Tcp {
            conns,
            pool,
            mem_waiters,
            ..
        } = &mut self.tcp;
        let tcb = conns
            .get_mut(h.index, h.generation)
            .ok_or(Error::BadHandle)?;
        let n = tcb.rcvbuf.read(pool, buf);
        if n == 0 {
            return tcp_recv_nothing(tcb);
        }
        // Under memory pressure, or with writers waiting for memory, the read's freed
        // chunks matter to others: the general path.
        if pool.under_pressure() || !mem_waiters.is_empty() {
            return Ok(self.tcp_recv_freed(now, h, n));
        }
        // Receive-buffer autotuning, per read as Linux tcp_recvmsg does it (not under
        // memory pressure, where the window stops growing: Linux tcp_grow_window only
        // "!tcp_under_memory_pressure(sk)").
        input::tcp_rcv_space_adjust(tcb, now, rmem_max);
        // Reading may open the window enough to be worth announcing, or an ACK input
        // left to the read goes now (see `Stack::tcp_window_update_due`).
        if Self::tcp_window_update_due(tcb, false) {
            tcb.flags.set(tcb::TcbFlags::ACK_NOW);
            self.tcp_output(now, h);
        }
        Ok(n)
    }

    /// [`Stack::tcp_recv`] once `n` bytes were read while the stack is under memory
    /// pressure or writers wait for memory.
    #[cold]
    #[inline(never)]
    fn tcp_recv_freed(&mut self, now: Instant, h: TcpHandle, n: usize) -> usize {
        if !self.tcp.pool.under_pressure()
            && let Some(tcb) = self.tcp.get_mut(h)
        {
            input::tcp_rcv_space_adjust(tcb, now, self.sysctl.tcp_rmem_max);
        }
        // Reading freed chunks (Linux tcp_recvmsg -> sk_mem_reclaim ->
        // __sk_mem_reduce_allocated: below tcp_mem.low the stack leaves memory
        // pressure), and writers refused memory may go on.
        self.tcp_mem_freed(now);
        let pressure = self.tcp.pool.under_pressure();
        if let Some(tcb) = self.tcp.get_mut(h)
            && Self::tcp_window_update_due(tcb, pressure)
        {
            tcb.flags.set(tcb::TcbFlags::ACK_NOW);
            self.tcp_output(now, h);
        }
        n
    }

    /// `recv(MSG_PEEK)`: copy received bytes without taking them (Linux `tcp_recvmsg`
    /// with `MSG_PEEK`): the next read returns them again. With nothing to read, what
    /// [`Stack::tcp_recv`] says (end of stream, the pending error, `WouldBlock`).
    pub fn tcp_peek(&mut self, now: Instant, h: TcpHandle, buf: &mut [u8]) -> Result<usize, Error> {
        let Tcp { conns, pool, .. } = &self.tcp;
        let tcb = conns.get(h.index, h.generation).ok_or(Error::BadHandle)?;
        if tcb.rcvbuf.readable() > 0 || buf.is_empty() {
            return Ok(tcb.rcvbuf.peek(pool, buf));
        }
        self.tcp_recv(now, h, buf)
    }

    /// `shutdown(2)`: stop reading, writing (a FIN follows the queued data), or both.
    pub fn tcp_shutdown(&mut self, now: Instant, h: TcpHandle, how: Shutdown) -> Result<(), Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            tcb.flags.set(tcb::TcbFlags::RCV_SHUTDOWN);
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            self.tcp_queue_fin(now, h);
        }
        // Readiness: Linux inet_shutdown ends with sk_state_change.
        self.ready.mark(SocketKey::Tcp(h), Readiness::ALL);
        Ok(())
    }

    /// `close(2)`: the handle is released; the connection finishes on its own (FIN after
    /// the queued data, then FIN-WAIT and TIME-WAIT) as an orphan. Unread received data
    /// makes it a reset instead (RFC 9293 §3.10.4 allows it; Linux does it and counts
    /// TCPAbortOnClose), and so does `SO_LINGER` with zero time ([`Stack::tcp_set_linger`],
    /// TCPAbortOnData). Never waits: there is no blocking close.
    pub fn tcp_close(&mut self, now: Instant, h: TcpHandle) -> Result<(), Error> {
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        if !tcb.flags.has(tcb::TcbFlags::ORPHAN) {
            self.tcp.orphans += 1;
        }
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        tcb.flags
            .set(tcb::TcbFlags::ORPHAN | tcb::TcbFlags::RCV_SHUTDOWN);
        match tcb.state {
            State::Closed | State::Listen | State::SynSent => {
                self.tcp_destroy(h);
            }
            _ if tcb.rcvbuf.readable() > 0 => {
                self.mib.inc(Counter::TcpExtTCPAbortOnClose);
                self.tcp_abort(now, h)?;
            }
            // SO_LINGER with zero time (Linux __tcp_close, net/ipv4/tcp.c: "} else if
            // (sock_flag(sk, SOCK_LINGER) && !sk->sk_lingertime) { /* Check zero linger
            // _after_ checking for unread data. */ sk->sk_prot->disconnect(sk, 0);
            // NET_INC_STATS(..., LINUX_MIB_TCPABORTONDATA);"): RFC 9293 §3.10.5 ABORT,
            // queued data is discarded and a RST goes out. Linux counts it TCPAbortOnData
            // (TCPAbortOnLinger is the FIN-WAIT-2 reset of TCP_LINGER2 < 0).
            _ if tcb.flags.has(tcb::TcbFlags::LINGER_ABORT) => {
                self.mib.inc(Counter::TcpExtTCPAbortOnData);
                self.tcp_abort(now, h)?;
            }
            // Already in FIN-WAIT-2 (shutdown, the FIN acknowledged, then close): the
            // orphan waits for the peer's FIN only tcp_fin_timeout, as one closed in
            // FIN-WAIT-1 does (Linux __tcp_close: "if (sk->sk_state == TCP_FIN_WAIT2) {
            // ... inet_csk_reset_keepalive_timer(sk, tmo - TCP_TIMEWAIT_LEN)"; or
            // tcp_time_wait(sk, TCP_FIN_WAIT2, tmo)). Without it nothing ever frees it.
            State::FinWait2 => {
                tcb.timers.keepalive = clock32::Deadline::at(
                    now + core::time::Duration::from_secs(self.sysctl.tcp_fin_timeout),
                );
                self.tcp_arm(now, h);
            }
            _ => {
                self.tcp_queue_fin(now, h);
                self.tcp_orphan_check_oom(now, h, 0);
            }
        }
        // Readiness: a poller drops the registration of a closed socket when it sees it.
        self.ready.mark(SocketKey::Tcp(h), Readiness::ALL);
        Ok(())
    }

    /// Abort: send a RST (in synchronized states) and forget the connection
    /// (RFC 9293 §3.10.5 ABORT; `SO_LINGER` with zero time).
    pub fn tcp_abort(&mut self, now: Instant, h: TcpHandle) -> Result<(), Error> {
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        let (state, tuple, seq, ack) = (tcb.state, tcb.tuple, tcb.snd.nxt, tcb.rcv.nxt);
        if state.is_synchronized() || state == State::SynReceived {
            // RST|ACK with RCV.NXT, as Linux sends it (tcp_send_active_reset:
            // "TCPHDR_ACK | TCPHDR_RST"), so that ustack and Linux look alike on the
            // wire. RFC 9293 §3.10.5 shows `<SEQ=SND.NXT><CTL=RST>`; the ACK bit is
            // allowed: the peer checks a RST by its sequence number (§3.10.7.4).
            self.tcp_send_reset(now, tuple, seq, Some(ack));
        }
        self.tcp_set_state(h, State::Closed);
        self.tcp_destroy(h);
        self.tcp_mem_freed(now);
        Ok(())
    }

    /// The connection's state (`Closed` once it is gone but the handle was not yet
    /// closed, e.g. after a reset).
    pub fn tcp_state(&self, h: TcpHandle) -> Result<State, Error> {
        self.tcp.get(h).map(|t| t.state).ok_or(Error::BadHandle)
    }

    /// `getsockopt(SO_ERROR)`: the connection's pending error (`ECONNREFUSED`,
    /// `ETIMEDOUT`, `ECONNRESET`), taken once, as Linux's `sock_error` clears `sk_err`;
    /// with none, the soft error an ICMP message left (`EHOSTUNREACH`, `ENETUNREACH`,
    /// `ECONNREFUSED` on a synchronized connection), taken once too (Linux
    /// `sk_getsockopt`: "if (v.val == 0) v.val = xchg(&sk->sk_err_soft, 0);").
    pub fn tcp_take_error(&mut self, h: TcpHandle) -> Result<Option<Error>, Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if let Some(e) = tcb.error.take() {
            return Ok(Some(e));
        }
        if !tcb.flags.has(tcb::TcbFlags::ERR_SOFT) {
            return Ok(None);
        }
        tcb.flags.clear(tcb::TcbFlags::ERR_SOFT);
        Ok(self.tcp.xopts_update(h, |o| o.err_soft.take()).flatten())
    }

    /// Record a soft error on connection `h` (Linux `tcp_v4_err` on a synchronized
    /// connection without `IP_RECVERR`: "WRITE_ONCE(sk->sk_err_soft, err)").
    pub(crate) fn tcp_set_err_soft(&mut self, h: TcpHandle, err: Error) {
        if self
            .tcp
            .xopts_update(h, |o| o.err_soft = Some(err))
            .is_some()
            && let Some(tcb) = self.tcp.get_mut(h)
        {
            tcb.flags.set(tcb::TcbFlags::ERR_SOFT);
        }
    }

    /// `TCP_NODELAY`: turn Nagle's algorithm off (true) or on.
    pub fn tcp_set_nodelay(&mut self, now: Instant, h: TcpHandle, on: bool) -> Result<(), Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if on {
            tcb.flags.set(tcb::TcbFlags::NODELAY);
        } else {
            tcb.flags.clear(tcb::TcbFlags::NODELAY);
        }
        self.tcp_output(now, h);
        Ok(())
    }

    /// `SO_KEEPALIVE`: the first probe after the idle time (`TCP_KEEPIDLE`, or
    /// `net.ipv4.tcp_keepalive_time`; Linux `keepalive_time_when`).
    pub fn tcp_set_keepalive(&mut self, now: Instant, h: TcpHandle, on: bool) -> Result<(), Error> {
        let (idle, _, _) = self.tcp_keepalive_params(h);
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if on {
            tcb.flags.set(tcb::TcbFlags::KEEPALIVE);
            tcb.timers.keepalive = clock32::Deadline::at(now + idle);
        } else {
            tcb.flags.clear(tcb::TcbFlags::KEEPALIVE);
            tcb.timers.keepalive = clock32::Deadline::OFF;
        }
        self.tcp_arm(now, h);
        Ok(())
    }

    /// `SO_SNDBUF` (Linux `sock_setsockopt`, net/core/sock.c): the request is capped at
    /// the maximum, then doubled ("We double it on the way in to account for 'struct
    /// sk_buff' etc. overhead"), and raised to at least `SOCK_MIN_SNDBUF`; the send
    /// buffer is then no longer autotuned (`SOCK_SNDBUF_LOCK`, see
    /// `tcp_should_expand_sndbuf`). Linux caps at `net.core.wmem_max`; ustack has no
    /// such sysctl and caps at `net.ipv4.tcp_wmem.max`, the bound autotuning uses too,
    /// so a set size can reach twice it, as Linux's can reach twice `wmem_max`.
    /// ustack's limit counts payload bytes only, so the doubled value is all usable:
    /// [`Stack::tcp_send`] takes up to [`Stack::tcp_send_buffer`] bytes.
    pub fn tcp_set_send_buffer(&mut self, h: TcpHandle, bytes: usize) -> Result<(), Error> {
        let limit = sockbuf_size(bytes, self.sysctl.tcp_wmem_max, SOCK_MIN_SNDBUF);
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        let grew = limit > tcb.sndbuf_limit;
        tcb.sndbuf_limit = limit;
        tcb.flags.set(tcb::TcbFlags::SNDBUF_LOCK);
        // Linux: "Wake up sending tasks if we upped the value." (sk_write_space)
        if grew && crate::socket::sk_stream_is_writeable(tcb) {
            self.ready.mark(SocketKey::Tcp(h), Readiness::WRITABLE);
        }
        Ok(())
    }

    /// `SO_RCVBUF` (Linux `__sock_set_rcvbuf`): capped at `net.ipv4.tcp_rmem.max` (Linux:
    /// `net.core.rmem_max`, which ustack does not have), doubled, at least
    /// `SOCK_MIN_RCVBUF`; receive-buffer autotuning (`tcp_rcv_space_adjust`) then leaves
    /// it alone (`SOCK_RCVBUF_LOCK`). The window we offer follows it; a window already
    /// promised is never withdrawn (RFC 9293 §3.8.6.2.2 "the receiver MUST NOT shrink
    /// the window"), so a smaller buffer shows as the window closing while data arrives.
    pub fn tcp_set_recv_buffer(&mut self, h: TcpHandle, bytes: usize) -> Result<(), Error> {
        let limit = sockbuf_size(bytes, self.sysctl.tcp_rmem_max, SOCK_MIN_RCVBUF);
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        tcb.rcvbuf_limit = limit;
        tcb.flags.set(tcb::TcbFlags::RCVBUF_LOCK);
        Ok(())
    }

    /// The send buffer size in bytes (`getsockopt(SO_SNDBUF)`: the doubled value, or
    /// what autotuning made of `tcp_wmem.default`).
    pub fn tcp_send_buffer(&self, h: TcpHandle) -> Result<usize, Error> {
        self.tcp
            .get(h)
            .map(|t| t.sndbuf_limit as usize)
            .ok_or(Error::BadHandle)
    }

    /// The receive buffer size in bytes (`getsockopt(SO_RCVBUF)`).
    pub fn tcp_recv_buffer(&self, h: TcpHandle) -> Result<usize, Error> {
        self.tcp
            .get(h)
            .map(|t| t.rcvbuf_limit as usize)
            .ok_or(Error::BadHandle)
    }

    /// `SO_LINGER`. `Some(Duration::ZERO)`: [`Stack::tcp_close`] aborts the connection
    /// with a RST instead of a FIN (RFC 9293 §3.10.5 ABORT; Linux `__tcp_close`), counted
    /// TCPAbortOnData. The time is whole seconds, as `struct linger`'s `l_linger` (and
    /// `std::net::TcpStream::set_linger`, which passes `as_secs()`): under one second is
    /// zero. A non-zero time changes nothing: ustack has no blocking close, and Linux's
    /// close of a non-blocking socket with linger on does not wait either (its timeout
    /// is 0 when `O_NONBLOCK`), finishing with a FIN as an orphan. `None` turns it off.
    pub fn tcp_set_linger(
        &mut self,
        h: TcpHandle,
        linger: Option<core::time::Duration>,
    ) -> Result<(), Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        match linger {
            Some(t) if t.as_secs() == 0 => tcb.flags.set(tcb::TcbFlags::LINGER_ABORT),
            _ => tcb.flags.clear(tcb::TcbFlags::LINGER_ABORT),
        }
        Ok(())
    }

    /// The keepalive idle time, probe interval and probe count of connection `h`: its
    /// own (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`) or the sysctls' (Linux
    /// `keepalive_time_when`, `keepalive_intvl_when`, `keepalive_probes`).
    pub(crate) fn tcp_keepalive_params(
        &self,
        h: TcpHandle,
    ) -> (core::time::Duration, core::time::Duration, u64) {
        let o = self.tcp.xopts(h);
        let secs = |own: u16, sysctl: u64| {
            core::time::Duration::from_secs(if own != 0 { u64::from(own) } else { sysctl })
        };
        (
            secs(o.keepidle, self.sysctl.tcp_keepalive_time),
            secs(o.keepintvl, self.sysctl.tcp_keepalive_intvl),
            if o.keepcnt != 0 {
                u64::from(o.keepcnt)
            } else {
                self.sysctl.tcp_keepalive_probes
            },
        )
    }

    /// `setsockopt(IPPROTO_TCP, opt)` for one of the options kept beside the TCB (Linux
    /// `do_tcp_setsockopt`), with Linux's bounds (`EINVAL` outside them): `TCP_KEEPIDLE`
    /// and `TCP_KEEPINTVL` 1 to 32767 seconds, `TCP_KEEPCNT` 1 to 127, `TCP_MAXSEG` 0 (off)
    /// or 88 to 32767. A new idle time re-arms a running keepalive timer for what is left
    /// of it (Linux `tcp_sock_set_keepidle_locked`). `TCP_MAXSEG` on a connection clamps
    /// the MSS it sends with from then on (Linux `tcp_sync_mss` bounds `mss_cache` by
    /// `user_mss`); on a connection still in SYN-SENT the SYN has already announced the
    /// interface's MSS (ustack opens the connection at `connect`, Linux takes the option
    /// set before it), so only what it sends is clamped.
    pub fn tcp_set_opt(
        &mut self,
        now: Instant,
        h: TcpHandle,
        opt: TcpOpt,
        val: i32,
    ) -> Result<(), Error> {
        let v = opt.check(val)?;
        self.tcp
            .xopts_update(h, |o| opt.store(o, v))
            .ok_or(Error::BadHandle)?;
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        match opt {
            TcpOpt::KeepIdle
                if tcb.flags.has(tcb::TcbFlags::KEEPALIVE) && tcb.state != State::Closed =>
            {
                let elapsed = tcb.last_activity.elapsed(now);
                let idle = core::time::Duration::from_secs(u64::from(v));
                tcb.timers.keepalive = clock32::Deadline::at(now + idle.saturating_sub(elapsed));
                self.tcp_arm(now, h);
            }
            TcpOpt::MaxSeg if v != 0 && tcb.state != State::SynSent => {
                tcb.mss = tcb.mss.min(v);
            }
            _ => {}
        }
        Ok(())
    }

    /// `getsockopt(IPPROTO_TCP, opt)` (Linux `do_tcp_getsockopt`): the keepalive values in
    /// force (the socket's or the sysctls'); `TCP_MAXSEG` the MSS the connection sends
    /// with (`mss_cache`).
    pub fn tcp_opt(&self, h: TcpHandle, opt: TcpOpt) -> Result<i32, Error> {
        let tcb = self.tcp.get(h).ok_or(Error::BadHandle)?;
        let (idle, intvl, cnt) = self.tcp_keepalive_params(h);
        let sat = |n: u64| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(match opt {
            TcpOpt::KeepIdle => sat(idle.as_secs()),
            TcpOpt::KeepIntvl => sat(intvl.as_secs()),
            TcpOpt::KeepCnt => sat(cnt),
            TcpOpt::MaxSeg => i32::from(tcb.mss),
        })
    }

    /// [`Stack::tcp_set_opt`] on a listener: its connections inherit the value (Linux
    /// `sk_clone_lock` copies the listener's `tcp_sock`); `TCP_MAXSEG` also lowers the
    /// MSS its SYN-ACKs announce (Linux `tcp_openreq_init_rwin`, `tcp_mss_clamp`).
    pub fn tcp_listener_set_opt(
        &mut self,
        l: ListenerHandle,
        opt: TcpOpt,
        val: i32,
    ) -> Result<(), Error> {
        let v = opt.check(val)?;
        let listener = self
            .tcp
            .listeners
            .get_mut(l.index, l.generation)
            .ok_or(Error::BadHandle)?;
        opt.store(&mut listener.opts, v);
        Ok(())
    }

    /// [`Stack::tcp_opt`] of a listener: `TCP_MAXSEG` is the value set, or the default
    /// MSS (Linux: `user_mss` in LISTEN, else `mss_cache`, `TCP_MSS_DEFAULT`).
    pub fn tcp_listener_opt(&self, l: ListenerHandle, opt: TcpOpt) -> Result<i32, Error> {
        let o = self
            .tcp
            .listeners
            .get(l.index, l.generation)
            .ok_or(Error::BadHandle)?
            .opts;
        let or = |own: u64, sysctl: u64| {
            i32::try_from(if own != 0 { own } else { sysctl }).unwrap_or(i32::MAX)
        };
        Ok(match opt {
            TcpOpt::KeepIdle => or(o.keepidle.into(), self.sysctl.tcp_keepalive_time),
            TcpOpt::KeepIntvl => or(o.keepintvl.into(), self.sysctl.tcp_keepalive_intvl),
            TcpOpt::KeepCnt => or(o.keepcnt.into(), self.sysctl.tcp_keepalive_probes),
            TcpOpt::MaxSeg => or(o.user_mss.into(), u64::from(output::DEFAULT_MSS)),
        })
    }

    /// `TCP_CORK` (Linux `__tcp_sock_set_cork`): while on, segments shorter than the MSS
    /// wait for more data (`tcp_nagle_check` with `TCP_NAGLE_CORK`); full segments and a
    /// FIN still go. Turning it off sends what waits, under Nagle's rule unless
    /// `TCP_NODELAY` (`tcp_push_pending_frames`). What waits corked with nothing in flight
    /// leaves by itself after a retransmission timeout (Linux arms the probe timer,
    /// `tcp_check_probe_timer`, and `tcp_write_wakeup` sends it: the man page's "200 ms
    /// ceiling").
    pub fn tcp_set_cork(&mut self, now: Instant, h: TcpHandle, on: bool) -> Result<(), Error> {
        let tcb = self.tcp.get_mut(h).ok_or(Error::BadHandle)?;
        if on {
            tcb.flags.set(tcb::TcbFlags::CORK);
        } else {
            tcb.flags.clear(tcb::TcbFlags::CORK);
            self.tcp_output(now, h);
        }
        Ok(())
    }

    /// Whether `TCP_CORK` is on.
    pub fn tcp_cork(&self, h: TcpHandle) -> Result<bool, Error> {
        Ok(self
            .tcp
            .get(h)
            .ok_or(Error::BadHandle)?
            .flags
            .has(tcb::TcbFlags::CORK))
    }

    /// What `ss -tmi` would show for this connection.
    pub fn tcp_info(&self, h: TcpHandle) -> Result<TcpInfo, Error> {
        let t = self.tcp.get(h).ok_or(Error::BadHandle)?;
        let (local, remote) = self.tcp_user_addrs(t);
        Ok(TcpInfo {
            state: t.state,
            local,
            remote,
            recv_q: t.rcvbuf.readable(),
            send_q: t.sndbuf.len(),
            mss: t.mss,
            cwnd: t.congestion.cwnd,
            ssthresh: t.congestion.ssthresh,
            srtt: t.rtt.srtt(),
            rto: t.rtt.rto(),
            snd_wnd: t.snd.wnd,
            rcv_wnd: t.rcv.wnd,
            retransmits: t.rtt.retransmits(),
            unacked: t.rtx().len() as u32,
            sack: t.flags.has(tcb::TcbFlags::SACK_OK),
            timestamps: t.flags.has(tcb::TcbFlags::TS_OK),
            wscale: t
                .flags
                .has(tcb::TcbFlags::WSCALE_OK)
                .then_some((t.snd_wscale, t.rcv_wscale)),
        })
    }

    /// Connections (any state but LISTEN and TIME-WAIT), TIME-WAIT records, SYN-queue
    /// requests, and buffer bytes in use: what a leak check looks at.
    pub fn tcp_resources(&self) -> TcpResources {
        TcpResources {
            connections: self.tcp.len(),
            timewait: self.tcp.timewait.len(),
            requests: self.tcp.requests.len(),
            buffer_bytes: self.tcp.pool.in_use_bytes(),
            timers: self.tcp.timers.len(),
            timewait_queue: self.tcp.timewait.queue_len(),
            orphans: self.tcp.orphans,
        }
    }

    /// Segments, IPv4 and IPv6, that early demux took from the IP header straight to
    /// their connection, one pass over the bytes (Linux `tcp_v4_early_demux`,
    /// `tcp_v6_early_demux`; see docs/tcp.md, "receive fast path"). A ustack figure:
    /// Linux counts no such thing. Every other segment takes the general path
    /// (`ip_rcv_core`, `tcp_v4_rcv`; `ip6_rcv_core`, `tcp_v6_rcv`) with the same checks
    /// and counters.
    pub fn tcp_early_demux_hits(&self) -> u64 {
        self.tcp.early_demux
    }

    /// Segments (a super-segment counts once) written from a connection's header
    /// template (`tcp::xmit4`, `tcp::xmit6`) rather than through the general path that
    /// builds every header: for tests that check the template path was taken, since both
    /// give the same bytes. Linux counts no such thing.
    #[doc(hidden)]
    pub fn tcp_header_template_hits(&self) -> u64 {
        self.tcp.template_hits
    }

    /// Writes whose one segment [`Stack::tcp_send`] sent straight (Linux `tcp_push_one`:
    /// nothing in flight, the write fits one segment and the window) rather than through
    /// `tcp_output`: for tests that check which path a write took, since both send the
    /// same segment. Linux counts no such thing.
    #[doc(hidden)]
    pub fn tcp_push_one_hits(&self) -> u64 {
        self.tcp.push_one_hits
    }

    /// Whether early demux serves the segments it can (on by default) or every segment
    /// takes the general path. Both give the same connections' state, answers and
    /// counters (but [`Stack::tcp_early_demux_hits`]): tests compare them.
    #[doc(hidden)]
    pub fn set_tcp_early_demux(&mut self, on: bool) {
        self.tcp.early_demux_off = !on;
    }

    /// Whether the stack is under TCP memory pressure (above `tcp_mem.pressure` and not
    /// yet back under `tcp_mem.low`; Linux `tcp_under_memory_pressure`).
    pub fn tcp_memory_pressure(&self) -> bool {
        self.tcp.pool.under_pressure()
    }

    /// Buffer memory may have been freed (data acknowledged or read, a connection gone):
    /// while under memory pressure or with writers waiting for memory, see
    /// [`Stack::tcp_mem_wake`]. Called where memory is freed (segment input, timers,
    /// reads, aborts), not from the transmit path, which a driver skips when it has
    /// nothing to send: a writer refused memory must be woken on an idle link too.
    #[inline]
    pub(crate) fn tcp_mem_freed(&mut self, now: Instant) {
        if self.tcp.pool.under_pressure() || !self.tcp.mem_waiters.is_empty() {
            self.tcp_mem_wake(now);
        }
    }

    /// Leave pressure when the pool is below `tcp_mem.low` (Linux `sk_mem_uncharge` ->
    /// `__sk_mem_reduce_allocated` -> `sk_leave_memory_pressure`), and then, if the pool
    /// has room, mark the writers that were refused memory writable again (Linux wakes
    /// them through `sk_stream_write_space` as memory frees; here when pressure ends).
    #[cold]
    #[inline(never)]
    fn tcp_mem_wake(&mut self, now: Instant) {
        self.tcp.pool.reclaim(now, &mut self.mib);
        if self.tcp.pool.under_pressure() || !self.tcp.pool.has_room() {
            return;
        }
        for h in core::mem::take(&mut self.tcp.mem_waiters) {
            if self.tcp.get(h).is_some() {
                self.ready.mark(SocketKey::Tcp(h), Readiness::WRITABLE);
            }
        }
    }

    /// Forget a connection entirely (after CLOSED, or on abort).
    pub(crate) fn tcp_destroy(&mut self, h: TcpHandle) {
        self.tcp_destroy_with(h, None);
    }

    /// [`Stack::tcp_destroy`] with the tuple's hash when the caller has it (`known`).
    pub(crate) fn tcp_destroy_with(&mut self, h: TcpHandle, known: Option<tuple_hash::TupleHash>) {
        if let Some(state) = self.tcp.remove(h, known)
            && state.counts_as_established()
        {
            self.mib.dec(Counter::TcpCurrEstab);
        }
    }
}

/// Linux `SOCK_MIN_SNDBUF` (`include/net/sock.h`: `TCP_SKB_MIN_TRUESIZE * 2`, with
/// `TCP_SKB_MIN_TRUESIZE = 2048 + SKB_DATA_ALIGN(sizeof(struct sk_buff))`, 2304 on x86-64).
pub const SOCK_MIN_SNDBUF: usize = 4608;
/// Linux `SOCK_MIN_RCVBUF` (`TCP_SKB_MIN_TRUESIZE`).
pub const SOCK_MIN_RCVBUF: usize = 2304;

/// The buffer size `SO_SNDBUF`/`SO_RCVBUF` sets for a request of `bytes` (Linux
/// `sock_setsockopt`: `min(val, max)`, then `max(val * 2, min_size)`).
fn sockbuf_size(bytes: usize, max: u64, min_size: usize) -> u32 {
    let val = (bytes as u64).min(max).min(i32::MAX as u64 / 2);
    (val * 2).max(min_size as u64) as u32
}

/// What TCP holds, for leak checks and `ustack stat --memory`, from
/// [`Stack::tcp_resources`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpResources {
    /// Connections in any state but LISTEN and TIME-WAIT.
    pub connections: usize,
    /// TIME-WAIT records.
    pub timewait: usize,
    /// SYN-queue requests (half-open connections of listeners).
    pub requests: usize,
    /// Socket-buffer bytes in use, in whole chunks of [`BUFFER_CHUNK`].
    pub buffer_bytes: usize,
    /// Entries in the connection timer wheel: at most one per connection (an entry left
    /// early by a deadline moved later or turned off stays until it comes up; none for a
    /// connection that has ended).
    pub timers: usize,
    /// Entries in the TIME-WAIT expiry queue (one per record, plus records removed early).
    pub timewait_queue: usize,
    /// Connections closed by the user and still alive (bounded by `tcp_max_orphans`).
    pub orphans: usize,
}

/// Deque of accepted connections (kept small: one entry per established, unaccepted
/// connection).
pub(crate) type AcceptQueue = VecDeque<TcpHandle>;

/// [`Stack::tcp_recv`] with nothing to read: the pending error, end of stream, or
/// `WouldBlock`.
#[inline]
fn tcp_recv_nothing(tcb: &mut Tcb) -> Result<usize, Error> {
    // A RST after the peer's FIN (in CLOSE-WAIT: EPIPE, see the RST check in
    // tcp_validate_incoming): the stream had ended, and Linux tcp_recvmsg says so
    // ("if (sock_flag(sk, SOCK_DONE)) break;", before the pending error), leaving the
    // error for the next write.
    if tcb.error == Some(Error::BrokenPipe) {
        return Ok(0);
    }
    if let Some(e) = tcb.error.take() {
        return Err(e);
    }
    // End of stream: the peer's FIN, or receive shut down here (Linux tcp_recvmsg:
    // "if (sk->sk_shutdown & RCV_SHUTDOWN) break;", after the pending error).
    if tcb.state.fin_received()
        || tcb.state == State::Closed
        || tcb.flags.has(tcb::TcbFlags::RCV_SHUTDOWN)
    {
        return Ok(0);
    }
    Err(Error::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn record(entered: Instant, ts_ok: bool, snd_nxt: u32) -> timer::TimeWait {
        timer::TimeWait {
            snd_nxt: SeqNumber(snd_nxt),
            rcv_nxt: SeqNumber(1),
            ts_recent: 77,
            ts_offset: 0,
            rcv_wnd: 100,
            ts_ok,
            reuseaddr: false,
            expires: clock32::Ms32::ceil(entered + timer::TIMEWAIT_LEN),
            last_oow_ack: 0,
        }
    }

    /// Linux tcp_twsk_unique: mode 1 only (2 is loopback-only, and ustack has no
    /// loopback), timestamps required, and only after tcp_tw_reuse_delay (1 s).
    #[test]
    fn tw_reuse_policy_follows_tcp_twsk_unique() {
        let mut sysctl = Sysctl::default();
        let entered = Instant::from_secs(100);
        let tw = record(entered, true, 5);
        let at = |ms: u64| entered + Duration::from_millis(ms);
        for mode in [0, 2] {
            sysctl.tcp_tw_reuse = mode;
            assert!(!tw_reusable(&sysctl, &tw, at(30_000)), "mode {mode} is off");
        }
        sysctl.tcp_tw_reuse = 1;
        assert!(!tw_reusable(&sysctl, &tw, at(0)));
        assert!(
            !tw_reusable(&sysctl, &tw, at(1000)),
            "time_after32: strictly later"
        );
        assert!(tw_reusable(&sysctl, &tw, at(1001)));
        assert!(tw_reusable(&sysctl, &tw, at(59_999)));
        let no_ts = record(entered, false, 5);
        assert!(
            !tw_reusable(&sysctl, &no_ts, at(30_000)),
            "no PAWS, no reuse"
        );
    }

    /// "u32 seq = tcptw->tw_snd_nxt + 65535 + 2; if (!seq) seq = 1;"
    #[test]
    fn tw_reuse_iss_is_past_the_old_sequence_space() {
        let e = Instant::from_secs(1);
        assert_eq!(
            tw_reuse_iss(&record(e, true, 1000)),
            SeqNumber(1000 + 65_537)
        );
        assert_eq!(
            tw_reuse_iss(&record(e, true, u32::MAX - 100)),
            SeqNumber(65_436)
        );
        assert_eq!(
            tw_reuse_iss(&record(e, true, 0u32.wrapping_sub(65_537))),
            SeqNumber(1)
        );
    }
}

#[cfg(test)]
mod memory {
    use core::mem::size_of;

    /// What an idle connection, a TIME-WAIT record and a SYN-queue request cost, everything
    /// counted (the slab slot or table entry, the key, the hash table's control byte at its
    /// 7/8 load factor, and the timer entries they hold). A regression guard: an idle
    /// connection costs a few hundred bytes (Linux: about 4.1 KB).
    /// `cargo test -p ustack-stack --lib tcp::memory -- --nocapture` prints the figures.
    #[test]
    fn per_connection_memory_stays_within_bounds() {
        let hash_entry = |kv: usize| (kv as f64 + 1.0) / 0.875;
        let tcb = super::TCB_BYTES;
        let slot = crate::slab::Slab::<super::tcb::Tcb>::SLOT_BYTES;
        // The established table: an 8-byte slot, at worst 70% full (just after a growth).
        let ehash = 8.0 / 0.7;
        let idle = slot as f64 + ehash;
        let tw =
            hash_entry(size_of::<super::tcb::FourTuple>() + size_of::<super::timer::TimeWait>())
                + size_of::<super::timer::TimeWaitEntry>() as f64;
        let req = hash_entry(
            size_of::<super::tcb::FourTuple>() + size_of::<super::listen::RequestSock>(),
        ) + size_of::<super::listen::RequestEntry>() as f64;
        eprintln!(
            "TCB {tcb} B (active part {} B, boxed while data moves, {} B of it touched per \
             message); idle established connection {idle:.0} B (slot {slot} + table {ehash:.0}); TIME-WAIT record {} B \
             ({tw:.0} B at 7/8 load); SYN-queue request {} B ({req:.0} B at 7/8 load)",
            super::TCB_ACTIVE_BYTES,
            super::tcb::ACTIVE_HOT_BYTES,
            super::TIME_WAIT_BYTES,
            super::REQUEST_BYTES,
        );
        assert!(tcb <= 216, "TCB grew to {tcb} bytes");
        assert!(slot <= 224, "a slab slot is {slot} bytes");
        assert!(idle <= 236.0, "an idle connection costs {idle:.0} bytes");
        // Issue #12 item 3: at most 64 bytes a record, table entry and expiry entry.
        let (tw_bytes, req_bytes) = (super::TIME_WAIT_BYTES, super::REQUEST_BYTES);
        assert!(tw_bytes <= 64, "a TIME-WAIT record is {tw_bytes} bytes");
        assert!(req_bytes <= 64, "a SYN-queue request is {req_bytes} bytes");
        assert!(tw <= 64.0, "a TIME-WAIT record costs {tw:.0} bytes");
        assert!(req <= 72.0, "a SYN-queue request costs {req:.0} bytes");
    }
}
