//! The transmission control block: one connection's state, compact and inline (no heap
//! objects of its own: buffers are chains in the stack's pool, the retransmission queue
//! holds no heap when empty). Vocabulary of RFC 9293 §3.3.1 and Linux's `tcp_sock`.

use core::net::SocketAddrV4;

use ustack_obs::Instant;
use ustack_wire::SeqNumber;

use super::buffer::{RecvBuffer, SendBuffer};
use super::cc::{CaState, Cc, CcState};
use super::rtt::RttEstimator;
use super::sack::RtxQueue;
use super::state::State;

/// A connection's addresses: what the established table is keyed by (Linux `inet_ehash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FourTuple {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// [RFC 9293 §3.3.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.3.1) "Send Sequence
/// Variables".
#[derive(Debug, Clone, Copy, Default)]
pub struct SendSeq {
    /// SND.UNA: oldest unacknowledged sequence number.
    pub una: SeqNumber,
    /// SND.NXT: next sequence number to send.
    pub nxt: SeqNumber,
    /// SND.WND: the peer's receive window, scaled (bytes).
    pub wnd: u32,
    /// SND.WL1, SND.WL2: segment sequence and acknowledgment numbers used for the last
    /// window update (RFC 9293 §3.10.7.4 "fifth, check the ACK field").
    pub wl1: SeqNumber,
    pub wl2: SeqNumber,
    /// ISS: our initial sequence number.
    pub iss: SeqNumber,
    /// The largest window the peer has offered (Linux `max_window`).
    pub max_wnd: u32,
}

/// RFC 9293 §3.3.1 "Receive Sequence Variables".
#[derive(Debug, Clone, Copy, Default)]
pub struct RecvSeq {
    /// RCV.NXT: next sequence number expected.
    pub nxt: SeqNumber,
    /// RCV.WND as last advertised (bytes, scaled).
    pub wnd: u32,
    /// RCV.NXT when the window was last advertised (Linux `rcv_wup`): the right edge we
    /// promised is `wup + wnd`, and RFC 9293 §3.8.6.2.2 forbids moving it left.
    pub wup: SeqNumber,
    /// IRS: the peer's initial sequence number.
    pub irs: SeqNumber,
}

/// Options negotiated on the SYN exchange and socket flags, as bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcbFlags(pub u16);

impl TcbFlags {
    /// SACK permitted by both ends (RFC 2018 §2).
    pub const SACK_OK: u16 = 1 << 0;
    /// Timestamps in use (RFC 7323 §3.2).
    pub const TS_OK: u16 = 1 << 1;
    /// Window scaling in use (RFC 7323 §2.2: both SYNs carried the option).
    pub const WSCALE_OK: u16 = 1 << 2;
    /// TCP_NODELAY: Nagle off.
    pub const NODELAY: u16 = 1 << 3;
    /// SO_KEEPALIVE.
    pub const KEEPALIVE: u16 = 1 << 4;
    /// The user closed (or shut down writing): a FIN follows the queued data.
    pub const FIN_QUEUED: u16 = 1 << 5;
    /// An ACK must go out now (Linux `inet_csk_ack_scheduled` + ICSK_ACK_PUSHED).
    pub const ACK_NOW: u16 = 1 << 6;
    /// An ACK is owed, and may be delayed.
    pub const ACK_PENDING: u16 = 1 << 7;
    /// The user can no longer read (SHUT_RD or close): arriving data gets a RST.
    pub const RCV_SHUTDOWN: u16 = 1 << 8;
    /// The socket was closed by the user and is now an orphan (Linux `SOCK_DEAD`).
    pub const ORPHAN: u16 = 1 << 9;
    /// Connection reached through a listener: counted in PassiveOpens, not yet accepted.
    pub const PASSIVE: u16 = 1 << 10;
    /// Our FIN has been sent (it occupies `fin_seq()`).
    pub const FIN_SENT: u16 = 1 << 11;

    #[inline]
    pub const fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
    #[inline]
    pub fn set(&mut self, bit: u16) {
        self.0 |= bit;
    }
    #[inline]
    pub fn clear(&mut self, bit: u16) {
        self.0 &= !bit;
    }
}

/// The connection's timers, one deadline per kind (Linux `tcp_timer.c`; EXAMPLES item 7).
/// `Instant::FAR_FUTURE` means disarmed. The stack's timer queue holds one entry per
/// connection, for the earliest of these, and cancels lazily.
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    /// Retransmission (RTO), SYN/SYN-ACK retransmission, or zero-window probe
    /// (Linux `icsk_retransmit_timer`, which also serves ICSK_TIME_PROBE0).
    pub retransmit: Instant,
    /// Delayed ACK (Linux `icsk_delack_timer`).
    pub delack: Instant,
    /// Keepalive, or the FIN-WAIT-2 timeout of an orphan (Linux `sk_timer`).
    pub keepalive: Instant,
    /// What the timer queue was armed for (its entry for this connection fires then).
    pub queued: Instant,
}

impl Timers {
    pub const NONE: Timers = Timers {
        retransmit: Instant::FAR_FUTURE,
        delack: Instant::FAR_FUTURE,
        keepalive: Instant::FAR_FUTURE,
        queued: Instant::FAR_FUTURE,
    };

    /// The earliest armed deadline.
    pub fn earliest(&self) -> Instant {
        self.retransmit.min(self.delack).min(self.keepalive)
    }
}

/// One TCP connection.
#[derive(Debug)]
pub struct Tcb {
    pub state: State,
    pub tuple: FourTuple,
    pub snd: SendSeq,
    pub rcv: RecvSeq,
    pub flags: TcbFlags,
    /// Shift counts (RFC 7323 §2.2): ours applies to windows we send, theirs to windows
    /// they send.
    pub rcv_wscale: u8,
    pub snd_wscale: u8,
    /// The MSS we send with (the peer's MSS option, capped by our MTU; Linux `mss_cache`).
    pub mss: u16,
    /// The MSS we advertised.
    pub adv_mss: u16,
    /// RFC 7323 §4.3 TS.Recent and the time it was recorded (seconds on our clock,
    /// for the 24-day PAWS rule of §5.5).
    pub ts_recent: u32,
    pub ts_recent_stamp: u32,
    /// Added to our timestamp clock in every TSval (Linux `tsoffset`, RFC 7323 §5.4).
    pub ts_offset: u32,
    pub rtt: RttEstimator,
    pub cc: Cc,
    pub cs: CcState,
    pub ca_state: CaState,
    /// Recovery point: snd_nxt when loss recovery began (RFC 6582 "recover", Linux `high_seq`).
    pub high_seq: SeqNumber,
    /// Duplicate ACKs counted while SACK is off (RFC 5681 §3.2).
    pub dupacks: u8,
    /// Zero-window probes sent without a reply (Linux `icsk_probes_out`), and keepalive
    /// probes likewise.
    pub probes: u8,
    /// Delayed-ACK state: ACKs still to send at once at the start (Linux quick-ACK mode,
    /// `icsk_ack.quick`).
    pub quick_acks: u8,
    pub rtx: RtxQueue,
    pub sndbuf: SendBuffer,
    pub rcvbuf: RecvBuffer,
    /// Socket buffer limits (SO_SNDBUF/SO_RCVBUF or tcp_wmem/tcp_rmem defaults), bytes.
    pub sndbuf_limit: u32,
    pub rcvbuf_limit: u32,
    pub timers: Timers,
    /// When the connection last sent or received anything (keepalive idle time).
    pub last_activity: Instant,
    /// An error to report to the user once (ECONNRESET, ETIMEDOUT, ECONNREFUSED).
    pub error: Option<crate::Error>,
    /// The out-of-order block the last arriving segment landed in: RFC 2018 §4 puts it
    /// first among the SACK blocks.
    pub last_ooo: Option<(SeqNumber, SeqNumber)>,
}
