//! The transmission control block: one connection's state, compact and inline (no heap
//! objects of its own: buffers are chains in the stack's pool; the retransmission queue
//! is in the [`ActiveState`] box a connection holds while data moves, and keeps one
//! segment there without heap). Vocabulary of RFC 9293 §3.3.1 and Linux's `tcp_sock`.

use core::mem::size_of;
use core::net::SocketAddrV4;

use ustack_obs::Instant;
use ustack_wire::SeqNumber;

use super::buffer::{RecvBuffer, SendBuffer};
use super::cc::{CaState, Cc, CcState, CongestionControl};
use super::clock32::{Deadline, Ms32};
use super::rtt::RttEstimator;
use super::sack_blocks::RxSack;
use super::scoreboard::{RtxQueue, SegFlags};
use super::state::State;

/// A connection's addresses: what the established table is keyed by (Linux `inet_ehash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FourTuple {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

impl core::hash::Hash for FourTuple {
    /// The 12 bytes of the tuple as two words, so that the keyed SipHash of a table lookup
    /// compresses 12 bytes in two writes (the derived impl writes each field, the
    /// addresses with length prefixes; Linux `inet_ehashfn` hashes the same 12 bytes).
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(
            (u64::from(self.local.ip().to_bits()) << 32) | u64::from(self.remote.ip().to_bits()),
        );
        state.write_u32((u32::from(self.local.port()) << 16) | u32::from(self.remote.port()));
    }
}

/// [RFC 9293 §3.3.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.3.1) "Send Sequence
/// Variables".
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SendSeq {
    /// SND.UNA: oldest unacknowledged sequence number.
    pub(crate) una: SeqNumber,
    /// SND.NXT: next sequence number to send.
    pub(crate) nxt: SeqNumber,
    /// SND.WND: the peer's receive window, scaled (bytes).
    pub(crate) wnd: u32,
    /// SND.WL1, SND.WL2: segment sequence and acknowledgment numbers used for the last
    /// window update (RFC 9293 §3.10.7.4 "fifth, check the ACK field").
    pub(crate) wl1: SeqNumber,
    pub(crate) wl2: SeqNumber,
    /// ISS: our initial sequence number.
    pub(crate) iss: SeqNumber,
    /// The largest window the peer has offered (Linux `max_window`).
    pub(crate) max_wnd: u32,
}

/// RFC 9293 §3.3.1 "Receive Sequence Variables".
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecvSeq {
    /// RCV.NXT: next sequence number expected.
    pub(crate) nxt: SeqNumber,
    /// RCV.WND as last advertised (bytes, scaled).
    pub(crate) wnd: u32,
    /// RCV.NXT when the window was last advertised (Linux `rcv_wup`): the right edge we
    /// promised is `wup + wnd`, and RFC 9293 §3.8.6.2.2 forbids moving it left.
    pub(crate) wup: SeqNumber,
    /// IRS: the peer's initial sequence number.
    pub(crate) irs: SeqNumber,
}

/// Options negotiated on the SYN exchange and socket flags, as bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TcbFlags(pub(crate) u32);

impl TcbFlags {
    /// SACK permitted by both ends (RFC 2018 §2).
    pub(crate) const SACK_OK: u32 = 1 << 0;
    /// Timestamps in use (RFC 7323 §3.2).
    pub(crate) const TS_OK: u32 = 1 << 1;
    /// Window scaling in use (RFC 7323 §2.2: both SYNs carried the option).
    pub(crate) const WSCALE_OK: u32 = 1 << 2;
    /// TCP_NODELAY: Nagle off.
    pub(crate) const NODELAY: u32 = 1 << 3;
    /// SO_KEEPALIVE.
    pub(crate) const KEEPALIVE: u32 = 1 << 4;
    /// The user closed (or shut down writing): a FIN follows the queued data.
    pub(crate) const FIN_QUEUED: u32 = 1 << 5;
    /// An ACK must go out now (Linux `inet_csk_ack_scheduled` + ICSK_ACK_PUSHED).
    pub(crate) const ACK_NOW: u32 = 1 << 6;
    /// An ACK is owed, and may be delayed.
    pub(crate) const ACK_PENDING: u32 = 1 << 7;
    /// The user can no longer read (SHUT_RD or close): arriving data gets a RST.
    pub(crate) const RCV_SHUTDOWN: u32 = 1 << 8;
    /// The socket was closed by the user and is now an orphan (Linux `SOCK_DEAD`).
    pub(crate) const ORPHAN: u32 = 1 << 9;
    /// Connection reached through a listener: counted in PassiveOpens, not yet accepted.
    pub(crate) const PASSIVE: u32 = 1 << 10;
    /// Our FIN has been sent (it occupies `fin_seq()`).
    pub(crate) const FIN_SENT: u32 = 1 << 11;
    /// The user set SO_SNDBUF: the send buffer is no longer autotuned (Linux
    /// `SOCK_SNDBUF_LOCK` in `sk_userlocks`).
    pub(crate) const SNDBUF_LOCK: u32 = 1 << 12;
    /// The user set SO_RCVBUF: the receive buffer is no longer autotuned (Linux
    /// `SOCK_RCVBUF_LOCK`).
    pub(crate) const RCVBUF_LOCK: u32 = 1 << 13;
    /// SO_LINGER on with a zero time: close() resets the connection (Linux
    /// `sock_flag(sk, SOCK_LINGER) && !sk->sk_lingertime`).
    pub(crate) const LINGER_ABORT: u32 = 1 << 14;
    /// Black-hole detection lowered the MSS (Linux `icsk_mtup.enabled` under
    /// `tcp_mtu_probing` = 1): later timeouts halve it.
    pub(crate) const MTU_PROBING: u32 = 1 << 15;
    /// A segment could not be built because the stack's transmit queue was full
    /// (`net.core.txqueuelen`): the connection waits in `Tcp::tx_waiters` and sends when
    /// the queue drains (Linux's `TSQ_THROTTLED`, woken by `tcp_tsq_handler`).
    pub(crate) const TX_THROTTLED: u32 = 1 << 16;
    /// The connection is in `Tcp::idle_active`, waiting to give its [`ActiveState`] back.
    pub(crate) const IDLE_QUEUED: u32 = 1 << 17;
    /// In-order data arrived since we last sent data (for Linux's pingpong mode, see
    /// `Stack::tcp_event_data_sent`).
    pub(crate) const DATA_RCVD: u32 = 1 << 18;
    /// The retransmission timer is a tail loss probe, not the RTO (Linux
    /// `ICSK_TIME_LOSS_PROBE` on the same timer).
    pub(crate) const LOSS_PROBE: u32 = 1 << 19;
    /// A write was refused buffer memory (`tcp_mem`) and returned `WouldBlock` (Linux
    /// `SOCK_NOSPACE`): an ACK that frees part of the send buffer wakes the writer
    /// (Linux `tcp_check_space` -> `tcp_new_space` -> `sk_stream_write_space`), even when
    /// the send buffer was not full by its size.
    pub(crate) const NOSPACE: u32 = 1 << 20;
    /// The connection has an entry in `Tcp::xopts` (its [`SockOpts`]): rarely set
    /// options live there, keyed by slab index, so the TCB does not grow for them and a
    /// connection without any costs no lookup.
    pub(crate) const XOPTS: u32 = 1 << 21;
    /// TCP_CORK: partial segments wait until uncorked (Linux `TCP_NAGLE_CORK` in
    /// `tp->nonagle`). A bit here, not in [`SockOpts`]: the output path tests it on every
    /// segment.
    pub(crate) const CORK: u32 = 1 << 22;
    /// SO_REUSEADDR was set on the socket (Linux `sk->sk_reuse`, which an accepted
    /// connection inherits from its listener and a TIME-WAIT record from its connection):
    /// asked by `Stack::tcp_bind_conflict` of the old socket.
    pub(crate) const REUSEADDR: u32 = 1 << 23;
    /// A soft ICMP error waits in the connection's [`SockOpts::err_soft`] (Linux
    /// `sk_err_soft` non-zero). A bit here so that an acceptable ACK, which clears it
    /// (Linux `tcp_ack`: "We passed data and got it acked, remove any soft error log"),
    /// needs no table lookup.
    pub(crate) const ERR_SOFT: u32 = 1 << 24;
    /// Urgent mode (Linux `tcp_urg_mode`: `snd_up` ahead of `snd_una`): the urgent
    /// pointer is in [`SockOpts::snd_up`]; segments before it carry URG.
    pub(crate) const URG: u32 = 1 << 25;
    /// An IPv4 connection its user sees as IPv6, `::ffff:a.b.c.d` (accepted by a
    /// dual-stack listener, or connected to such an address).
    pub(crate) const V4_MAPPED: u32 = 1 << 27;

    #[inline]
    pub(crate) const fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
    #[inline]
    pub(crate) fn set(&mut self, bit: u32) {
        self.0 |= bit;
    }
    #[inline]
    pub(crate) fn clear(&mut self, bit: u32) {
        self.0 &= !bit;
    }
}

/// The connection's timers, one deadline per kind (Linux `tcp_timer.c`), each a 32-bit
/// millisecond [`Deadline`] rounded up (Linux keeps them in 32-bit jiffies): 16 bytes for
/// four. The stack's timer wheel holds one entry per connection, for the earliest of
/// these (see `Sock::arm`). Whether `retransmit` is a tail loss probe is
/// [`TcbFlags::LOSS_PROBE`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timers {
    /// Retransmission (RTO), SYN/SYN-ACK retransmission, zero-window probe or tail loss
    /// probe (Linux `icsk_retransmit_timer`, which also serves ICSK_TIME_PROBE0 and
    /// ICSK_TIME_LOSS_PROBE).
    pub(crate) retransmit: Deadline,
    /// Delayed ACK (Linux `icsk_delack_timer`).
    pub(crate) delack: Deadline,
    /// Keepalive, or the FIN-WAIT-2 timeout of an orphan (Linux `sk_timer`).
    pub(crate) keepalive: Deadline,
    /// What the timer wheel's entry for this connection was filed for (it fires then);
    /// off when there is none.
    pub(crate) queued: Deadline,
}

impl Timers {
    pub(crate) const NONE: Timers = Timers {
        retransmit: Deadline::OFF,
        delack: Deadline::OFF,
        keepalive: Deadline::OFF,
        queued: Deadline::OFF,
    };

    /// The earliest armed deadline.
    #[inline(always)]
    pub(crate) fn earliest(&self) -> Deadline {
        self.retransmit.min(self.delack).min(self.keepalive)
    }
}

/// One TCP connection.
#[derive(Debug)]
pub(crate) struct Tcb {
    pub(crate) state: State,
    pub(crate) tuple: FourTuple,
    pub(crate) snd: SendSeq,
    pub(crate) rcv: RecvSeq,
    pub(crate) flags: TcbFlags,
    /// Shift counts (RFC 7323 §2.2): ours applies to windows we send, theirs to windows
    /// they send.
    pub(crate) rcv_wscale: u8,
    pub(crate) snd_wscale: u8,
    /// The MSS we send with (the peer's MSS option, capped by our MTU; Linux `mss_cache`).
    pub(crate) mss: u16,
    /// The MSS we advertised; in SYN-SENT, lowered to a path MTU reported by ICMP (`pmtu.rs`).
    pub(crate) adv_mss: u16,
    /// RFC 7323 §4.3 TS.Recent and the time it was recorded (seconds on our clock,
    /// for the 24-day PAWS rule of §5.5).
    pub(crate) ts_recent: u32,
    pub(crate) ts_recent_stamp: u32,
    /// Added to our timestamp clock in every TSval (Linux `tsoffset`, RFC 7323 §5.4).
    pub(crate) ts_offset: u32,
    pub(crate) rtt: RttEstimator,
    /// The congestion window and the slow-start threshold (Linux `snd_cwnd`,
    /// `snd_ssthresh`); what else the algorithm reads is in the [`ActiveState`] (see
    /// [`Tcb::with_cc`]).
    pub(crate) congestion: Cwnd,
    pub(crate) ca_state: CaState,
    /// What only a connection moving data needs, boxed while data flows and given back
    /// when the connection is idle (see [`Active`]).
    pub(crate) active: Active,
    /// Zero-window probes sent without a reply (Linux `icsk_probes_out`), and keepalive
    /// probes likewise.
    pub(crate) probes: u8,
    /// Delayed-ACK state: ACKs still to send at once at the start (Linux quick-ACK mode,
    /// `icsk_ack.quick`).
    pub(crate) quick_acks: u8,
    pub(crate) sndbuf: SendBuffer,
    pub(crate) rcvbuf: RecvBuffer,
    /// Socket buffer limits (SO_SNDBUF/SO_RCVBUF or tcp_wmem/tcp_rmem defaults), bytes.
    pub(crate) sndbuf_limit: u32,
    pub(crate) rcvbuf_limit: u32,
    pub(crate) timers: Timers,
    /// When the connection last sent or received anything (keepalive idle time), in
    /// milliseconds of the stack clock (Linux: `lsndtime`, `rcv_tstamp`, 32-bit jiffies).
    pub(crate) last_activity: Ms32,
    /// When the last challenge ACK was allowed, on the millisecond clock, wrapping; 0 for
    /// never (Linux `last_oow_ack_time`, in jiffies, 0 likewise), for the per-socket
    /// `tcp_invalid_ratelimit`. 32 bits as Linux's, to keep the TCB small.
    pub(crate) last_oow_ack: u32,
    /// An error to report to the user once (ECONNRESET, ETIMEDOUT, ECONNREFUSED).
    pub(crate) error: Option<crate::Error>,
    /// End of the last sub-MSS segment sent (Linux `snd_sml`), for Nagle's test.
    pub(crate) snd_sml: SeqNumber,
}

/// Per-socket options that are rarely set, and the soft error: what Linux keeps in
/// `tcp_sock` (`keepalive_time`, `keepalive_intvl`, `keepalive_probes`,
/// `rx_opt.user_mss`) and `sock` (`sk_err_soft`). A connection that has any of them has
/// an entry in `Tcp::xopts` keyed by its slab index ([`TcbFlags::XOPTS`]), removed with
/// the connection; a listener keeps its own for its connections to inherit (Linux
/// `sk_clone_lock` copies the listener's `tcp_sock`). Kept out of the TCB (216 bytes,
/// see `tcb_stays_small`): the idle connection of a million-connection server pays
/// nothing for them, and the lookups happen only on paths that are not per segment (the
/// keepalive timer, a timeout, ICMP errors, `getsockopt`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SockOpts {
    /// TCP_KEEPIDLE in seconds; 0: `net.ipv4.tcp_keepalive_time`.
    pub(crate) keepidle: u16,
    /// TCP_KEEPINTVL in seconds; 0: `net.ipv4.tcp_keepalive_intvl`.
    pub(crate) keepintvl: u16,
    /// TCP_KEEPCNT; 0: `net.ipv4.tcp_keepalive_probes`.
    pub(crate) keepcnt: u8,
    /// TCP_MAXSEG (Linux `rx_opt.user_mss`); 0: not set.
    pub(crate) user_mss: u16,
    /// A soft error from ICMP (Linux `sk_err_soft`): reported once by `SO_ERROR` when no
    /// hard error is pending, and as the error of a connection that times out.
    pub(crate) err_soft: Option<crate::Error>,
    /// The send urgent pointer (Linux `snd_up`): the sequence number after the last byte
    /// written with `MSG_OOB`, while [`TcbFlags::URG`].
    pub(crate) snd_up: Option<SeqNumber>,
}

impl SockOpts {
    /// Whether nothing is set (the entry can go).
    pub(crate) fn is_empty(&self) -> bool {
        *self == SockOpts::default()
    }
}

/// What every connection keeps of congestion control: cwnd and ssthresh, in segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cwnd {
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: u32,
}

/// The state only a connection moving data needs (issue #12 item 2): congestion control's
/// detail, loss recovery, receive-buffer autotuning and the receiver's SACK blocks. An
/// idle connection holds none of it: see [`Active`].
///
/// The fields are in a fixed order (`repr(C)`) so that what a message touches (the
/// pure-ACK test's and RACK's recovery fields, the congestion control's state and counts,
/// the retransmission queue, the header template, receive autotuning, the SACK flags
/// `mss_now` reads) is one contiguous run of at most four cache lines
/// ([`ACTIVE_HOT_BYTES`]), with the SACK blocks at the front and the undo and PRR fields at
/// the back, both read only with loss or reordering.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct ActiveState {
    /// The SACK blocks we report as a receiver, most recent first, and a pending D-SACK.
    pub(crate) rx_sack: RxSack,
    /// Duplicate ACKs counted while SACK is off (RFC 5681 §3.2): Linux's `sacked_out` for
    /// a Reno connection, each standing for one segment that left the network.
    pub(crate) dupacks: u32,
    /// ACKed segments towards the next additive increase (Linux `snd_cwnd_cnt`): a
    /// connection given back its box starts counting again.
    pub(crate) cwnd_cnt: u32,
    /// The segments in flight the core last told the algorithm ([`CcState::in_flight`]).
    pub(crate) cc_in_flight: u32,
    /// The most the window we offer may grow to now (Linux `rcv_ssthresh`), bytes; 0:
    /// not set, read as [`Tcb::rcv_ssthresh`] derives it (a box is filled with 0).
    pub(crate) rcv_ssthresh: u32,
    /// Recovery point: snd_nxt when loss recovery began (RFC 6582 "recover", Linux
    /// `high_seq`).
    pub(crate) high_seq: SeqNumber,
    /// The retransmission queue (Linux `tcp_rtx_queue`): here, not in the TCB, because
    /// only a connection with data (or a SYN or FIN) outstanding has anything in it, and
    /// one segment fits inline (see [`super::scoreboard`]). Empty while the box is absent:
    /// a connection keeps its box while anything is outstanding ([`Tcb::active_idle`]).
    pub(crate) rtx: RtxQueue,
    /// The IP and TCP header fields every segment repeats (Linux `inet_sk`,
    /// `sk_dst_cache`; see [`super::xmit`]): built by the first segment sent while the
    /// box is held, rebuilt when [`Stack::tx_gen`](crate::Stack) moves.
    pub(crate) tx_template: super::xmit::TxTemplate,
    /// The congestion control algorithm's private state (Linux `icsk_ca_priv`).
    pub(crate) cc: Cc,
    /// Receive-buffer autotuning's measurement (a receiver's RTT and what the reader took
    /// in it). A receiver keeps its box while data arrives: it goes back only after
    /// [`ACTIVE_IDLE_GRACE`](super::ACTIVE_IDLE_GRACE) without in-order data
    /// ([`RcvSpace::last_rcv`]); the grown buffer limit stays in the TCB.
    pub(crate) rcv_space: RcvSpace,
    /// Loss-recovery bookkeeping: PRR, undo, reordering, RACK, tail loss probes, lost
    /// retransmissions (see [`super::recovery`]).
    pub(crate) recovery: LossRecovery,
}

impl ActiveState {
    /// What an idle connection reads: a fresh algorithm, no recovery, nothing measured.
    const fn idle(reno: bool) -> Self {
        ActiveState {
            rtx: RtxQueue::new(),
            cc: if reno {
                Cc::Reno(super::cc::reno::Reno::new())
            } else {
                Cc::Cubic(super::cc::cubic::Cubic::new())
            },
            recovery: LossRecovery::new(),
            rx_sack: RxSack::EMPTY,
            high_seq: SeqNumber(0),
            dupacks: 0,
            cwnd_cnt: 0,
            cc_in_flight: 0,
            rcv_space: RcvSpace::new(),
            rcv_ssthresh: 0,
            tx_template: super::xmit::TxTemplate::NONE,
        }
    }

    /// The idle state after the algorithm's `init` (Linux `tcp_init_congestion_control`;
    /// CUBIC's starts HyStart's first round).
    const fn fresh(reno: bool) -> Self {
        let mut a = ActiveState::idle(reno);
        if !reno {
            a.cc = Cc::Cubic(super::cc::cubic::Cubic::initialized());
        }
        a
    }

    /// Nothing here the connection would miss if it were reset to [`ActiveState::idle`],
    /// once it has been idle for [`ACTIVE_IDLE_GRACE`](super::ACTIVE_IDLE_GRACE) with
    /// everything acknowledged: no tail loss probe, no duplicate ACK counted, no lost
    /// retransmission, no SACK block to report, and no reordering learned (a connection
    /// that raised its DupThresh keeps its state). The last episode's undo information
    /// (`undo_marker`, `retrans_stamp`) goes: a D-SACK that arrives a second after
    /// everything was acknowledged no longer undoes the reduction.
    fn forgettable(&self) -> bool {
        let r = &self.recovery;
        self.dupacks == 0
            && r.tlp_high_seq.is_none()
            && r.lost_retrans == 0
            && !r.reord_seen
            && r.reordering == LossRecovery::new().reordering
            && self.rx_sack.blocks().is_empty()
            && self.rx_sack.dsack().is_none()
    }
}

/// The parts of an [`ActiveState`] a message touches, as (offset, bytes): the SACK flags
/// (not the blocks), the congestion counts, the retransmission queue, the header
/// template, the algorithm's state, receive autotuning, and the loss-recovery fields
/// before `tlp_sent_at` (RACK, the loss probe, lost retransmissions, DupThresh).
const ACTIVE_HOT_FIELDS: [(usize, usize); 10] = {
    use core::mem::offset_of;
    let rec = offset_of!(ActiveState, recovery);
    [
        (offset_of!(ActiveState, rx_sack) + RxSack::HOT_OFFSET, 2),
        (offset_of!(ActiveState, dupacks), 4),
        (offset_of!(ActiveState, cwnd_cnt), 4),
        (offset_of!(ActiveState, cc_in_flight), 4),
        (offset_of!(ActiveState, rcv_ssthresh), 4),
        (offset_of!(ActiveState, rtx), size_of::<RtxQueue>()),
        (
            offset_of!(ActiveState, tx_template),
            size_of::<super::xmit::TxTemplate>(),
        ),
        (offset_of!(ActiveState, cc), size_of::<Cc>()),
        (offset_of!(ActiveState, rcv_space), size_of::<RcvSpace>()),
        (rec, offset_of!(LossRecovery, tlp_sent_at)),
    ]
};

/// The span from the first to the last byte of `fields`.
const fn span(fields: &[(usize, usize)]) -> usize {
    let (mut lo, mut hi, mut i) = (usize::MAX, 0, 0);
    while i < fields.len() {
        let (off, len) = fields[i];
        if off < lo {
            lo = off;
        }
        if off + len > hi {
            hi = off + len;
        }
        i += 1;
    }
    hi - lo
}

/// Bytes from the first to the last byte a message touches in an [`ActiveState`]: at
/// most four cache lines (checked at compile time), so that a message misses at most five
/// of the box's lines wherever `malloc` put it, against six for fields spread over its
/// 320 bytes. The header template of either family takes 32 bytes with its tag (the IPv6
/// one keeps its addresses and next hop out: [`super::xmit6`]), so IPv6 costs an IPv4
/// connection no byte here.
pub(crate) const ACTIVE_HOT_BYTES: usize = span(&ACTIVE_HOT_FIELDS);
const _: () = assert!(ACTIVE_HOT_BYTES <= 4 * 64 && size_of::<ActiveState>() <= 320);

/// What an idle connection reads.
static IDLE_CUBIC: ActiveState = ActiveState::idle(false);
/// What a box is filled with when taken: the idle state after the algorithm's `init`.
const FRESH_CUBIC: ActiveState = ActiveState::fresh(false);
const FRESH_RENO: ActiveState = ActiveState::fresh(true);

/// The most free [`ActiveState`] boxes a thread keeps for reuse (20 KiB at 320 bytes).
const ACTIVE_FREE_MAX: usize = 64;

std::thread_local! {
    /// Boxes given back by idle connections, for the next connection that moves data: an
    /// echo round trip takes one and gives it back without calling the allocator.
    #[allow(clippy::vec_box, reason = "the boxes themselves are what is reused")]
    static ACTIVE_FREE: core::cell::RefCell<Vec<Box<ActiveState>>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// A connection's [`ActiveState`]: boxed while the connection moves data, absent while it
/// is idle (an 8-byte pointer in the TCB instead of the state).
///
/// Reading it while absent sees [`ActiveState::idle`]; the first write takes a box from
/// the thread's free list (or the allocator) filled with the idle state (Linux `init` of
/// the algorithm). It goes back once the connection has been idle for
/// [`ACTIVE_IDLE_GRACE`](super::ACTIVE_IDLE_GRACE) ([`Tcb::active_idle`]): nothing
/// outstanding (empty retransmission queue), nothing queued to send, no out-of-order data,
/// congestion state Open, and nothing in it worth keeping ([`ActiveState::forgettable`]).
/// The stack checks after each segment a connection processes and after its timers run;
/// a connection found idle is filed once in a FIFO and released when its entry comes up
/// and it is still idle, so a connection exchanging a message every few milliseconds
/// keeps its box instead of taking and giving it back each round trip. What an idle
/// connection forgets: CUBIC's W_max and HyStart verdict and the additive-increase count
/// (cwnd and ssthresh stay in the TCB), RACK's newest delivery time and the
/// receive-autotuning measurement with the receiver's RTT estimate (the grown buffer limit
/// stays).
#[derive(Debug)]
pub(crate) struct Active {
    state: Option<Box<ActiveState>>,
}

impl Active {
    /// No state yet, for algorithm `cc`. A Reno connection (`tcp_congestion_control` = 0)
    /// takes its box at once and keeps it: the idle state read while absent is CUBIC's,
    /// the default, so that the TCB needs no byte for the algorithm's kind.
    pub(crate) fn new(cc: &Cc) -> Self {
        Active {
            state: matches!(cc, Cc::Reno(_)).then(|| Box::new(FRESH_RENO)),
        }
    }

    /// The bytes of one box.
    pub(crate) const BOX_BYTES: usize = size_of::<ActiveState>();

    /// Whether a box is held.
    pub(crate) fn is_held(&self) -> bool {
        self.state.is_some()
    }

    /// Heap bytes held (0 when idle), for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        if self.state.is_some() {
            size_of::<ActiveState>()
        } else {
            0
        }
    }

    /// Bytes in this thread's free list, for memory accounting.
    pub(crate) fn free_bytes() -> usize {
        ACTIVE_FREE.with(|f| f.borrow().len()) * size_of::<ActiveState>()
    }

    /// The state to change, if the box is held: without it there is nothing to change
    /// that [`ActiveState::idle`] does not already say (an empty retransmission queue).
    #[inline]
    pub(crate) fn held_mut(&mut self) -> Option<&mut ActiveState> {
        self.state.as_deref_mut()
    }

    /// Whether the box may go back: the connection's algorithm is CUBIC (see
    /// [`Active::new`]) and nothing in it is worth keeping.
    fn releasable(&self) -> bool {
        self.state
            .as_deref()
            .is_some_and(|a| matches!(a.cc, Cc::Cubic(_)) && a.forgettable())
    }

    /// Whether in-order data arrived within the grace before `now` (the receive side's
    /// rule: a receiver whose reader keeps up is idle between segments, and autotuning's
    /// measurement spans them).
    pub(crate) fn receiving(&self, now: Instant) -> bool {
        self.state.as_deref().is_some_and(|a| {
            a.rcv_space.last_rcv != Instant::ZERO
                && now.saturating_duration_since(a.rcv_space.last_rcv) < super::ACTIVE_IDLE_GRACE
        })
    }
}

impl core::ops::Deref for Active {
    type Target = ActiveState;
    #[inline]
    fn deref(&self) -> &ActiveState {
        match &self.state {
            Some(b) => b,
            None => &IDLE_CUBIC,
        }
    }
}

impl core::ops::DerefMut for Active {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut ActiveState {
        if self.state.is_none() {
            self.fill();
        }
        match &mut self.state {
            Some(b) => b,
            None => unreachable!("filled above"),
        }
    }
}

impl Active {
    /// Take a box for a connection that starts moving data: from the thread's free list
    /// if it has one, filled with the idle state (a copy).
    #[cold]
    #[inline(never)]
    fn fill(&mut self) {
        let b = match ACTIVE_FREE.with(|f| f.borrow_mut().pop()) {
            Some(mut b) => {
                *b = FRESH_CUBIC;
                b
            }
            None => Box::new(FRESH_CUBIC),
        };
        self.state = Some(b);
    }
}

impl Tcb {
    /// The retransmission queue ([`ActiveState::rtx`]; empty while the box is absent).
    #[inline]
    pub(crate) fn rtx(&self) -> &RtxQueue {
        &self.active.rtx
    }

    /// The retransmission queue to change, if it may hold anything: `None` while the box
    /// is absent (the queue is then empty; a change that only acts on segments has
    /// nothing to do). [`Tcb::rtx_push`] takes the box to queue a segment.
    #[inline]
    pub(crate) fn rtx_mut(&mut self) -> Option<&mut RtxQueue> {
        self.active.held_mut().map(|a| &mut a.rtx)
    }

    /// The retransmission queue to queue a segment on: takes the box if absent.
    #[inline]
    pub(crate) fn rtx_push(&mut self) -> &mut RtxQueue {
        &mut self.active.rtx
    }

    /// Whether the connection is idle (see [`Active`]): its [`ActiveState`] may go back.
    #[inline]
    pub(crate) fn active_idle(&self) -> bool {
        self.rtx().is_empty()
            && self.sndbuf.is_empty()
            && self.rcvbuf.ooo_bytes() == 0
            && self.ca_state == CaState::Open
            && self.active.releasable()
    }

    /// Give the [`ActiveState`] back to the thread's free list.
    pub(crate) fn release_active(&mut self) {
        if let Some(b) = self.active.state.take() {
            ACTIVE_FREE.with(|f| {
                let mut f = f.borrow_mut();
                if f.len() < ACTIVE_FREE_MAX {
                    f.push(b);
                }
            });
        }
    }
}

/// What loss recovery keeps beyond [`Tcb::ca_state`] and [`ActiveState::high_seq`]: Linux
/// `tcp_sock`'s PRR, undo and reordering fields, and what ustack needs to find lost
/// retransmissions.
///
/// In a fixed order (`repr(C)`): first what every ACK may read (RACK, the loss probe, lost
/// retransmissions, DupThresh), then what only a recovery episode uses (see
/// [`ACTIVE_HOT_BYTES`]).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct LossRecovery {
    /// The latest send time of a segment known delivered (RFC 8985 `RACK.xmit_ts`,
    /// from segments never retransmitted).
    pub(crate) rack_xmit_ts: Instant,
    /// A lower bound of the send times of retransmissions in flight: no lost retransmission
    /// can be found before `rack_xmit_ts` passes it.
    pub(crate) retrans_low: Instant,
    /// SND.NXT when the outstanding tail loss probe was sent (RFC 8985 §7.3
    /// `TLP.end_seq`, Linux `tlp_high_seq`); `None`: no probe outstanding.
    pub(crate) tlp_high_seq: Option<SeqNumber>,
    /// The end of the segment of `rack_xmit_ts` (RFC 8985 `RACK.end_seq`), to order
    /// segments sent at the same instant.
    pub(crate) rack_end_seq: SeqNumber,
    /// Retransmissions found lost (a segment sent after them was delivered) and not yet
    /// sent again (Linux `TCPLostRetransmit`).
    pub(crate) lost_retrans: u32,
    /// DupThresh ([RFC 6675 §2](https://www.rfc-editor.org/rfc/rfc6675#section-2)), raised
    /// when reordering is seen (Linux `tp->reordering`, from `tcp_reordering`).
    pub(crate) reordering: u32,
    /// Reordering was seen on this connection (Linux `reord_seen`).
    pub(crate) reord_seen: bool,
    /// The outstanding tail loss probe was a retransmission (Linux `tlp_retrans`), not
    /// new data.
    pub(crate) tlp_retrans: bool,
    /// When the probe was sent: the scoreboard keeps the probed segment's first send
    /// time, so RACK takes the probe's from here once it is SACKed.
    pub(crate) tlp_sent_at: Instant,
    /// snd_una when the episode that may be undone began (Linux `undo_marker`).
    pub(crate) undo_marker: Option<SeqNumber>,
    /// [RFC 6937](https://www.rfc-editor.org/rfc/rfc6937) `RecoverFS`: cwnd when the
    /// reduction began (Linux `prior_cwnd`).
    pub(crate) prior_cwnd: u32,
    /// RFC 6937 `prr_delivered`: segments delivered (ACKed or SACKed) since recovery began.
    pub(crate) prr_delivered: u32,
    /// RFC 6937 `prr_out`: segments sent since recovery began.
    pub(crate) prr_out: u32,
    /// ssthresh before the reduction, restored by an undo (Linux `prior_ssthresh`; 0: no
    /// undo of ssthresh).
    pub(crate) prior_ssthresh: u32,
    /// Retransmissions of the episode not yet reported needless by a D-SACK (Linux
    /// `undo_retrans`; -1: none sent yet). At 0 every retransmission was needless.
    pub(crate) undo_retrans: i32,
    /// Our timestamp clock (ms) when the episode's first retransmission went out (Linux
    /// `retrans_stamp`; 0: none).
    pub(crate) retrans_stamp: u32,
}

impl LossRecovery {
    /// Linux's initial values (`tcp_init_sock`: `reordering = tcp_reordering` = 3).
    pub(crate) const fn new() -> Self {
        LossRecovery {
            prior_cwnd: 0,
            prr_delivered: 0,
            prr_out: 0,
            prior_ssthresh: 0,
            undo_marker: None,
            undo_retrans: -1,
            retrans_stamp: 0,
            reordering: 3,
            reord_seen: false,
            rack_xmit_ts: Instant::ZERO,
            rack_end_seq: SeqNumber(0),
            retrans_low: Instant::FAR_FUTURE,
            lost_retrans: 0,
            tlp_high_seq: None,
            tlp_retrans: false,
            tlp_sent_at: Instant::ZERO,
        }
    }
}

impl Default for LossRecovery {
    fn default() -> Self {
        Self::new()
    }
}

impl Tcb {
    /// Segments in the network: RFC 6675 `pipe` (Linux `tcp_packets_in_flight`), less the
    /// duplicate ACKs of a connection without SACK (Linux counts those in `sacked_out`)
    /// and retransmissions found lost.
    pub(crate) fn in_flight(&self) -> u32 {
        let reno_sacked = if self.flags.has(TcbFlags::SACK_OK) {
            0
        } else {
            self.active
                .dupacks
                .min(self.rtx().packets_out().saturating_sub(1))
        };
        self.rtx()
            .in_flight()
            .saturating_sub(reno_sacked + self.active.recovery.lost_retrans)
    }

    /// How CUBIC's HyStart ended slow start, if it did (None for Reno).
    pub(crate) fn hystart_exit(&self) -> Option<super::cc::cubic::HystartExit> {
        match &self.active.cc {
            Cc::Cubic(c) => c.hystart_exit(),
            Cc::Reno(_) => None,
        }
    }

    /// What is left of the window last advertised: its right edge less RCV.NXT, never
    /// negative (Linux `tcp_receive_window`).
    #[inline]
    pub(crate) fn receive_window(&self) -> u32 {
        let edge = self.rcv.wup + self.rcv.wnd as usize;
        edge.diff(self.rcv.nxt).max(0) as u32
    }

    /// The largest window this connection may offer (Linux `tcp_full_space` against
    /// `window_clamp`): the receive buffer, at most what the window field can carry
    /// (65,535 << our shift, RFC 7323 §2.3).
    #[inline]
    pub(crate) fn full_window(&self) -> u32 {
        self.rcvbuf_limit.min(65_535u32 << self.rcv_wscale)
    }

    /// The free space of the receive buffer, at most [`Tcb::full_window`] (Linux
    /// `tcp_space`).
    #[inline]
    pub(crate) fn free_space(&self) -> u32 {
        let used = self.rcvbuf.readable() + self.rcvbuf.ooo_bytes();
        (self.rcvbuf_limit as usize)
            .saturating_sub(used)
            .min(self.full_window() as usize) as u32
    }

    /// How far the window we offer may open now (Linux `rcv_ssthresh`): it starts at the
    /// window of the SYN exchange (Linux `tcp_connect_init`, `tcp_create_openreq_child`:
    /// `rcv_ssthresh = rcv_wnd`, at most `window_clamp`, `tcp_init_buffer_space`) and
    /// grows as data arrives ([`Tcb::grow_window`]). It is kept in the [`ActiveState`],
    /// which a connection holds while data flows. Without it (a connection that has not
    /// received data yet, or has been idle long enough to give its box back) the value is
    /// the window last advertised, RCV.WND (at first the SYN exchange's, exactly Linux's
    /// start), and at least four segments (the floor Linux keeps under memory pressure,
    /// `tcp_adjust_rcv_ssthresh`, so that a connection that went idle behind a zero window
    /// opens again), so an idle connection offers what it last offered. Unlike Linux, a
    /// connection that goes idle with a window advertised below its grown `rcv_ssthresh`
    /// (a reader that had not caught up) starts growing again from there when data comes
    /// back.
    #[inline(always)]
    pub(crate) fn rcv_ssthresh(&self) -> u32 {
        let s = self.active.rcv_ssthresh;
        let s = if s != 0 {
            s
        } else {
            self.rcv.wnd.max(4 * u32::from(self.adv_mss))
        };
        s.min(self.full_window())
    }

    /// The `rcv_ssthresh` [`Tcb::free_window`] applies: under memory pressure, once less
    /// than half the buffer is free, at most four segments (Linux
    /// `tcp_adjust_rcv_ssthresh`: `min(rcv_ssthresh, 4U * tp->advmss)`).
    fn rcv_ssthresh_now(&self, pressure: bool, free: u32, full: u32) -> u32 {
        let s = self.rcv_ssthresh();
        if pressure && free < full / 2 {
            s.min(4 * u32::from(self.adv_mss))
        } else {
            s
        }
    }

    /// Lower `rcv_ssthresh` under memory pressure (Linux `tcp_adjust_rcv_ssthresh`), as
    /// [`Tcb::free_window`] reads it then. Only a connection holding its box keeps the
    /// lowered value (one without keeps no `rcv_ssthresh`, and taking a box under memory
    /// pressure would cost more than it saves): it grows again from there.
    pub(crate) fn adjust_rcv_ssthresh(&mut self) {
        let (free, full) = (self.free_space(), self.full_window());
        if self.active.is_held() {
            let s = self.rcv_ssthresh_now(true, free, full);
            if s < self.rcv_ssthresh() {
                self.active.rcv_ssthresh = s;
            }
        }
    }

    /// Data of `len` bytes was queued: let the window grow (Linux `tcp_grow_window`). The
    /// room is what the buffer has free, at most the largest window, above
    /// `rcv_ssthresh`; each segment adds twice the larger of its length and our MSS
    /// ("incr = max_t(int, incr, 2 * skb->len)"). Linux first asks whether the segment's
    /// memory (`truesize`, with the skb's overhead) would fit the window it stands for;
    /// ustack's buffer costs a segment its length, so the test always passes. Under memory
    /// pressure it is lowered instead ([`Tcb::adjust_rcv_ssthresh`]).
    pub(crate) fn grow_window(&mut self, len: usize, pressure: bool) {
        let s = self.rcv_ssthresh();
        let room = self.free_space().min(self.full_window()).saturating_sub(s);
        if room == 0 {
            return;
        }
        if pressure {
            // Linux: under pressure tcp_adjust_rcv_ssthresh, whatever the free space.
            self.active.rcv_ssthresh = s.min(4 * u32::from(self.adv_mss));
            return;
        }
        let incr = (2 * u32::from(self.adv_mss)).max(2 * len.min(1 << 20) as u32);
        self.active.rcv_ssthresh = s + incr.min(room);
    }

    /// The window the free space of the receive buffer allows now, before the rule that
    /// the right edge never moves left (Linux `__tcp_select_window`). Receiver silly
    /// window avoidance (RFC 9293 §3.8.6.2.2) as Linux does it: once less than half the
    /// buffer is free, the space is rounded down to the scale's unit and offered only if
    /// it is at least one MSS and 1/16 of the buffer, else the window is zero; then it is
    /// at most `rcv_ssthresh` ([`Tcb::rcv_ssthresh`]; `pressure`: `tcp_mem` is under
    /// pressure, see [`Tcb::adjust_rcv_ssthresh`]); without window scaling the offer is a
    /// multiple of the MSS, kept as it is while within one MSS of the free space.
    ///
    /// Inline, its common case first (every segment asks, `select_window`): window
    /// scaling on and at least half the buffer free, where neither the SWS rounding nor
    /// the MSS enter (nor memory pressure: its lower `rcv_ssthresh` applies only below
    /// half).
    #[inline(always)]
    pub(crate) fn free_window(&self, pressure: bool) -> u32 {
        let full = self.full_window();
        let free = self.free_space();
        if self.rcv_wscale > 0 && free >= full / 2 {
            return free
                .min(self.rcv_ssthresh())
                .next_multiple_of(1 << self.rcv_wscale);
        }
        self.free_window_general(pressure, full, free)
    }

    /// [`Tcb::free_window`] past its common case.
    #[inline(never)]
    fn free_window_general(&self, pressure: bool, full: u32, mut free: u32) -> u32 {
        // Linux uses rcv_mss, its estimate of the peer's segment size.
        let mss = u32::from(self.mss.min(self.adv_mss)).min(full).max(1);
        let unit = 1u32 << self.rcv_wscale;
        let ssthresh = self.rcv_ssthresh_now(pressure, free, full);
        if free < full / 2 {
            free -= free % unit;
            if free < full / 16 || free < mss {
                return 0;
            }
        }
        free = free.min(ssthresh);
        if self.rcv_wscale > 0 {
            // "Advertise enough space so that it won't get scaled away."
            return free.next_multiple_of(unit);
        }
        let window = self.rcv.wnd;
        if window + mss <= free || window > free {
            free - free % mss
        } else if mss == full && free > window + full / 2 {
            free
        } else {
            window
        }
    }

    /// The payload a new segment may carry now (Linux `tcp_current_mss`): the MSS less
    /// the SACK option the segment will carry (4 + 8 bytes per block, Linux's layout;
    /// RFC 2018 §3: at most 3 blocks next to timestamps, 4 without).
    #[inline(always)]
    pub(crate) fn mss_now(&self) -> usize {
        let mss = usize::from(self.mss);
        if !self.flags.has(TcbFlags::SACK_OK) {
            return mss;
        }
        let max = if self.flags.has(TcbFlags::TS_OK) {
            3
        } else {
            4
        };
        let ooo = if self.rcvbuf.ooo_bytes() > 0 {
            self.active.rx_sack.blocks().len()
        } else {
            0
        };
        let n = (usize::from(self.active.rx_sack.dsack().is_some()) + ooo).min(max);
        if n == 0 {
            mss
        } else {
            mss.saturating_sub(4 + 8 * n).max(1)
        }
    }

    /// Change the loss-recovery state, telling the congestion control (Linux
    /// `tcp_set_ca_state`).
    pub(crate) fn set_ca_state(&mut self, new: CaState) {
        self.with_cc(|cc, st| cc.set_state(st, new));
        self.ca_state = new;
    }

    /// Run a hook of the connection's congestion control (taking its [`ActiveState`]) on
    /// the state Linux's hooks read in `tcp_sock`: cwnd and ssthresh from the TCB, the
    /// additive-increase count and the segments in flight from the box, no clamp (Linux
    /// `snd_cwnd_clamp` is ~0 unless a route locks it, which ustack has no way to do).
    #[inline]
    pub(crate) fn with_cc<R>(&mut self, f: impl FnOnce(&mut Cc, &mut CcState) -> R) -> R {
        let a = &mut *self.active;
        let mut st = CcState {
            cwnd: self.congestion.cwnd,
            ssthresh: self.congestion.ssthresh,
            cwnd_cnt: a.cwnd_cnt,
            in_flight: a.cc_in_flight,
            cwnd_clamp: u32::MAX,
        };
        let r = f(&mut a.cc, &mut st);
        self.congestion = Cwnd {
            cwnd: st.cwnd,
            ssthresh: st.ssthresh,
        };
        a.cwnd_cnt = st.cwnd_cnt;
        a.cc_in_flight = st.in_flight;
        r
    }

    /// The congestion control's hooks for an ACK of `acked` segments (`delivered` of them
    /// delivered) in the Open state with the queue clean: `pkts_acked` (Linux
    /// `tcp_clean_rtx_queue`) then `cong_avoid` (`tcp_cong_control`; every acked segment
    /// is delivered, so `tcp_may_raise_cwnd` holds). `prior_in_flight`: the flight when
    /// the ACK came. `pkts_acked` works on the fields in place (`Cubic::acked`); `cong_avoid`
    /// is called only when the flight filled the window (Linux `tcp_is_cwnd_limited`, the
    /// first test of both algorithms' `cong_avoid`, so an application-limited ACK skips
    /// it whole).
    #[inline(always)]
    pub(crate) fn cc_ack_open(
        &mut self,
        now: Instant,
        acked: u32,
        delivered: u32,
        rtt_us: Option<u32>,
        prior_in_flight: u32,
    ) {
        let Cwnd { cwnd, ssthresh } = self.congestion;
        let a = &mut *self.active;
        a.cc_in_flight = prior_in_flight;
        // Reno has no `pkts_acked` (Linux `tcp_reno` sets no `.pkts_acked`).
        if let Cc::Cubic(c) = &mut a.cc
            && let Some(ssthresh) = c.acked(now, acked, rtt_us, cwnd, ssthresh, prior_in_flight)
        {
            self.congestion.ssthresh = ssthresh;
        }
        if super::cc::cwnd_limited(cwnd, self.congestion.ssthresh, prior_in_flight) {
            self.with_cc(|cc, st| cc.cong_avoid(st, now, delivered));
        }
    }

    /// Linux `tcp_current_ssthresh`: the ssthresh an undo may restore; outside a
    /// reduction at least 3/4 of cwnd.
    pub(crate) fn current_ssthresh(&self) -> u32 {
        if matches!(self.ca_state, CaState::Cwr | CaState::Recovery) {
            self.congestion.ssthresh
        } else {
            self.congestion
                .ssthresh
                .max((self.congestion.cwnd >> 1) + (self.congestion.cwnd >> 2))
        }
    }

    /// RFC 8985 §6.2 step 1 for a retransmission in flight, `seg` (sent at `sent_at`,
    /// ending at `end`): lost if a segment sent after it was delivered, by more than the
    /// reordering window; segments sent at the same instant are ordered by sequence
    /// ("RACK.xmit_ts >= Segment.xmit_ts AND (RACK.xmit_ts, RACK.end_seq) >
    /// (Segment.xmit_ts, Segment.end_seq)"), and only once "RACK.rtt + RACK.reo_wnd -
    /// (Now - Segment.xmit_ts) <= 0" from the retransmission's own send time (Linux
    /// `tcp_rack_skb_timeout`). RACK.rtt (the newest delivered segment's RTT, now -
    /// RACK.xmit_ts) is floored at the path's minimum RTT: a SACK sooner than that after
    /// a segment left is not physically possible (Linux `tcp_rack_advance` applies the
    /// same min_rtt test to retransmitted segments), so crafted SACKs of data sent just
    /// after the retransmission cannot have it resent more than once per RTT, and never
    /// at the instant it left.
    pub(crate) fn retrans_is_lost(&self, now: Instant, sent_at: Instant, end: SeqNumber) -> bool {
        let wait = self.rtt.min_rtt().unwrap_or_default() + self.rack_reo_wnd();
        now > sent_at
            && now - sent_at >= wait
            && self.rack_sent_before(sent_at, end, self.lost_retrans_horizon())
    }

    /// Whether a segment sent at `sent_at`, ending at `end`, went out before the newest
    /// delivered one by at least the reordering window that gives `horizon` (RFC 8985
    /// §6.2 step 5, ties ordered by sequence).
    fn rack_sent_before(&self, sent_at: Instant, end: SeqNumber, horizon: Instant) -> bool {
        sent_at < horizon
            || (sent_at == horizon
                && horizon == self.active.recovery.rack_xmit_ts
                && end.before(self.active.recovery.rack_end_seq))
    }

    /// RFC 8985 §6.2 outside recovery: the first unacknowledged segment (never
    /// retransmitted) is lost once a segment sent at least `reo_wnd` after it was
    /// delivered; `reo_wnd` is min_rtt / 4 (RACK's default), the smoothed RTT once
    /// reordering was seen (Linux `tcp_rack_reo_wnd`, bounded by srtt).
    pub(crate) fn rack_head_lost(&self) -> bool {
        let Some(head) = self.rtx().front() else {
            return false;
        };
        if head
            .flags
            .intersects(SegFlags::SACKED | SegFlags::LOST | SegFlags::EVER_RETRANS)
            || self.active.recovery.rack_xmit_ts == Instant::ZERO
        {
            return false;
        }
        let reo_wnd = if self.active.recovery.reord_seen {
            self.rtt.srtt()
        } else {
            self.rtt.min_rtt().map(|r| r / 4)
        }
        .unwrap_or_default();
        let horizon = Instant::from_nanos(
            self.active
                .recovery
                .rack_xmit_ts
                .as_nanos()
                .saturating_sub(reo_wnd.as_nanos() as u64),
        );
        self.rack_sent_before(head.sent_at, head.end, horizon)
    }

    /// A retransmission sent before this instant is lost once anything sent after it was
    /// delivered: `RACK.xmit_ts` less the reordering window (RFC 8985 §6.2: `reo_wnd` is
    /// 0 while no reordering was seen, else min_rtt / 4).
    pub(crate) fn lost_retrans_horizon(&self) -> Instant {
        let reo_wnd = self.rack_reo_wnd();
        if self.active.recovery.rack_xmit_ts == Instant::ZERO {
            return Instant::ZERO;
        }
        Instant::from_nanos(
            self.active
                .recovery
                .rack_xmit_ts
                .as_nanos()
                .saturating_sub(reo_wnd.as_nanos() as u64),
        )
    }

    /// The reordering window for retransmissions (RFC 8985 §6.2): 0 while no reordering
    /// was seen, else min_rtt / 4.
    fn rack_reo_wnd(&self) -> core::time::Duration {
        if self.active.recovery.reord_seen {
            self.rtt.min_rtt().unwrap_or_default() / 4
        } else {
            core::time::Duration::ZERO
        }
    }
}

/// Receive-buffer autotuning, Linux's "dynamic right-sizing" (`tcp_rcv_space_adjust`,
/// `tcp_rcv_rtt_measure`; the fields of `rcvq_space` and `rcv_rtt_est`): once per
/// receiver-estimated RTT, if the application read more than in the previous RTT, the
/// receive buffer limit (and so the window we offer) grows toward `tcp_rmem.max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RcvSpace {
    /// Bytes the application read in the last measured RTT (Linux `rcvq_space.space`);
    /// 0: the measurement has not begun (it begins at least 1).
    pub(crate) space: u32,
    /// The application's read position when this measurement began (`rcvq_space.seq`,
    /// a `copied_seq`).
    pub(crate) seq: SeqNumber,
    /// When this measurement began (`rcvq_space.time`).
    pub(crate) time: Instant,
    /// The receiver's RTT estimate in µs, times 8 (`rcv_rtt_est.rtt_us`); 0: none yet.
    pub(crate) rtt_us8: u32,
    /// Without timestamps: RCV.NXT that ends the current RTT sample, and when it began
    /// (`rcv_rtt_est.seq`, `rcv_rtt_est.time`).
    pub(crate) rtt_seq: SeqNumber,
    pub(crate) rtt_time: Instant,
    /// The last TSecr sampled (`rcv_rtt_last_tsecr`).
    pub(crate) last_tsecr: u32,
    /// When in-order data last arrived (`Instant::ZERO`: never), for the box's receive-side
    /// idle rule ([`Active::receiving`]).
    pub(crate) last_rcv: Instant,
}

impl RcvSpace {
    /// Nothing measured yet.
    pub(crate) const fn new() -> Self {
        RcvSpace {
            space: 0,
            seq: SeqNumber(0),
            time: Instant::ZERO,
            rtt_us8: 0,
            rtt_seq: SeqNumber(0),
            rtt_time: Instant::ZERO,
            last_tsecr: 0,
            last_rcv: Instant::ZERO,
        }
    }

    /// Linux `tcp_rcv_rtt_update`: with `win_dep` (a whole window's worth, without
    /// timestamps) keep the minimum, else a moving average with gain 1/8.
    pub(crate) fn rtt_update(&mut self, sample_us: u32, win_dep: bool) {
        let m = sample_us.max(1);
        self.rtt_us8 = if self.rtt_us8 == 0 {
            m.saturating_mul(8)
        } else if !win_dep {
            // new = old + (m - old/8), in units of 1/8.
            (self.rtt_us8 - (self.rtt_us8 >> 3)).saturating_add(m)
        } else {
            self.rtt_us8.min(m.saturating_mul(8))
        };
    }
}

impl Default for RcvSpace {
    fn default() -> Self {
        Self::new()
    }
}
