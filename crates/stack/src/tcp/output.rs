//! TCP output (Linux `net/ipv4/tcp_output.c`): building segments, choosing what to send
//! (`tcp_write_xmit`: windows, congestion window, Nagle; `tcp_xmit_retransmit_queue`: lost
//! segments first), the receive window we advertise (`tcp_select_window`), SYN, SYN-ACK,
//! ACK and RST segments.

use core::net::{IpAddr, SocketAddr};
use core::time::Duration;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::tcp::{self, Flags, TcpTimestamp};
use ustack_wire::{IpProtocol, SeqNumber};

use super::buffer::CHUNK;
use super::buffer::{RecvBuffer, SendBuffer};
use super::cc::{CaState, Cc, CcState, CongestionControl};
use super::clock32::Deadline;
use super::isn::ts_clock;
use super::listen::{RequestSock, TIMEOUT_INIT};
use super::rtt::RttEstimator;
use super::scoreboard::SegFlags;
use super::sock::Sock;
use super::tcb::{FourTuple, RecvSeq, SendSeq, Tcb, TcbFlags, Timers};
use super::xmit::{SegHead, TxTemplate};
use super::{State, TcpHandle};
use crate::ip::ipv6::{Ip6Out, Outbound6};
use crate::{Stack, Sysctl};

/// The window a SYN or SYN-ACK offers: unscaled there, so at most 65,535
/// (RFC 7323 §2.2), rounded down to a multiple of the MSS we advertise, `adv_mss` (Linux
/// `tcp_select_initial_window`: "Quantize space offering to a multiple of mss if
/// possible", `space = rounddown(space, mss)`; 64,240 for an MSS of 1460).
pub(crate) fn initial_rcv_window(sysctl: &Sysctl, adv_mss: u16) -> u32 {
    let space = (sysctl.tcp_rmem_default.min(u64::from(u32::MAX)) as u32).min(65_535);
    let mss = u32::from(adv_mss);
    if mss > 0 && space > mss {
        space - space % mss
    } else {
        space
    }
}

/// Data leaves (Linux `tcp_event_data_sent`): "If it is a reply for ato after last
/// received packet, enter pingpong mode" (`inet_csk_enter_pingpong_mode`, with
/// `tcp_pingpong_thresh` 1): the connection is interactive, and the ACK of the peer's
/// next data is delayed (Linux `tcp_in_quickack_mode` is false in pingpong mode), since
/// our reply is likely to carry it. ustack keeps no `lrcvtime`: the reply counts when
/// in-order data arrived since our last data and the connection's last activity (that
/// arrival, or the ACK answering it) lies within the ATO. Pingpong mode is quick-ACK
/// mode ended: quick-ACK credit is never given back in ustack, so Linux's leaving
/// pingpong when a delayed ACK times out (`tcp_delack_timer_handler`) changes nothing.
fn tcp_event_data_sent(tcb: &mut Tcb, now: Instant) {
    if tcb.flags.has(TcbFlags::DATA_RCVD) && tcb.last_activity.elapsed(now) < DELACK {
        tcb.quick_acks = 0;
    }
    tcb.flags.clear(TcbFlags::DATA_RCVD);
}

/// Our window-scale shift: enough for the largest receive buffer (Linux
/// `tcp_select_initial_window`), at most 14 (RFC 7323 §2.3).
pub(crate) fn rcv_wscale(sysctl: &Sysctl) -> u8 {
    if sysctl.tcp_window_scaling == 0 {
        return 0;
    }
    let space = sysctl.tcp_rmem_max.max(sysctl.tcp_rmem_default);
    // The least shift with 65,535 << shift >= space: ceil(log2(ceil(space / 65,535))),
    // in closed form (a loop of up to 14 steps per SYN and SYN-ACK before).
    let blocks = space.div_ceil(65_535).max(1);
    blocks
        .checked_next_power_of_two()
        .map_or(14, |p| p.trailing_zeros().min(14)) as u8
}

/// Linux `TCP_DELACK_MIN`: the delayed-ACK timeout (ATO) ustack uses.
pub(crate) const DELACK: Duration = Duration::from_millis(40);
/// Linux `TCP_DELACK_MAX`: the longest a peer may delay an ACK, RFC 8985 §7.2's
/// "worst case delayed ACK timer" (WCDelAckT, "The RECOMMENDED value ... is 200ms").
pub(crate) const DELACK_MAX: Duration = Duration::from_millis(200);
/// The shortest loss-probe timeout: Linux's `tcp_schedule_loss_probe` floor
/// (`msecs_to_jiffies(10)`), so that a probe does not race an ACK a peer sends a few
/// milliseconds late on a fast path.
pub(crate) const TLP_MIN_TIMEOUT: Duration = Duration::from_millis(10);
/// Linux `TCP_MAX_QUICKACKS`: ACKs sent at once at the start of a connection.
const QUICK_ACKS: u8 = 16;
/// RFC 9293 §3.7.1: "If an MSS Option is not received at connection setup, TCP
/// implementations MUST assume a default send MSS of 536".
pub(crate) const DEFAULT_MSS: u16 = 536;

/// The send MSS assumed when the peer's SYN carries no MSS option: [`DEFAULT_MSS`] over
/// IPv4, 1220 over IPv6 (RFC 9293 section 3.7.1: "the default MSS is 536 for IPv4 or
/// 1220 for IPv6"; Linux `tcp_v6_conn_request`, `tcp_v6_connect`: `mss_clamp =
/// IPV6_MIN_MTU - sizeof(struct tcphdr) - sizeof(struct ipv6hdr)`).
pub(crate) fn default_mss(v6: bool) -> u16 {
    if v6 { 1280 - 60 } else { DEFAULT_MSS }
}

/// What [`Stack::tcp_send_segment`] sends: `len` bytes at `seq`, FIN, PSH, and above 0
/// the segment size of a super-segment.
#[derive(Clone, Copy)]
struct SegOut {
    seq: SeqNumber,
    len: usize,
    fin: bool,
    push: bool,
    gso: usize,
}

/// Where a segment's payload comes from.
#[derive(Clone, Copy)]
pub(super) enum Payload<'a> {
    None,
    /// The bytes of the write being sent (`Stack::tcp_send_one`): the same bytes the
    /// send buffer took for retransmission, copied into the frame from the caller's
    /// slice, still in cache, without finding them in the buffer's chunk.
    Bytes(&'a [u8]),
    /// `len` bytes of the connection's send buffer, `offset` bytes after its head;
    /// `span`: where they lie when all in the buffer's head chunk
    /// ([`SendBuffer::head_span`], taken while the TCB was at hand), copied from there
    /// without looking the connection up again.
    SendBuffer {
        h: TcpHandle,
        offset: usize,
        len: usize,
        span: Option<(u32, u32)>,
    },
}

impl Payload<'_> {
    /// The payload's length in bytes.
    pub(super) fn len(&self) -> usize {
        match *self {
            Payload::None => 0,
            Payload::Bytes(b) => b.len(),
            Payload::SendBuffer { len, .. } => len,
        }
    }

    /// Write `repr`'s header and then the payload into `seg` (header and payload long),
    /// the payload's bytes from the connection's send buffer in `tcp`.
    fn write_segment(&self, tcp: &super::Tcp, repr: &tcp::Repr, seg: &mut [u8]) {
        let header_len = repr.header_len();
        repr.emit_header(&mut tcp::Packet::new_unchecked(&mut seg[..]));
        self.write_payload(tcp, &mut seg[header_len..]);
    }

    /// Copy the payload into `out` (at least [`Payload::len`] bytes), once, from the
    /// connection's send buffer in `tcp`.
    #[inline(always)]
    pub(super) fn write_payload(&self, tcp: &super::Tcp, out: &mut [u8]) {
        match *self {
            Payload::None => {}
            Payload::Bytes(b) => out[..b.len()].copy_from_slice(b),
            Payload::SendBuffer { .. } => self.write_from_send_buffer(tcp, out),
        }
    }

    /// [`Payload::write_payload`] from the send buffer.
    #[inline(never)]
    fn write_from_send_buffer(&self, tcp: &super::Tcp, out: &mut [u8]) {
        if let Payload::SendBuffer {
            h,
            offset,
            len,
            span,
        } = *self
        {
            let out = &mut out[..len];
            if let Some(span) = span {
                SendBuffer::copy_span(&tcp.pool, span, out);
                return;
            }
            let copied = tcp
                .get(h)
                .map_or(0, |tcb| tcb.sndbuf.peek(&tcp.pool, offset, out));
            // A recycled frame holds an old frame's bytes: never let them through (a
            // buffer shorter than the payload; not on the path of a whole copy).
            if copied < len {
                zero_tail(&mut out[copied..]);
            }
        }
    }
}

/// Zero what the send buffer could not fill (see [`Payload::write_payload`]).
#[cold]
#[inline(never)]
fn zero_tail(out: &mut [u8]) {
    out.fill(0);
}

/// What [`Stack::tcp_write_xmit`] is sending for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Xmit {
    /// New data as cwnd, the window and Nagle allow (Linux `tcp_write_xmit`).
    Normal,
    /// A tail loss probe's one new segment regardless of cwnd and Nagle (Linux
    /// `tcp_write_xmit(.., TCP_NAGLE_OFF, push_one = 2)`), within the window.
    LossProbe,
    /// The probe timer's one segment (Linux `tcp_write_wakeup`): what waits, cut to the
    /// window when the window is shorter than a segment, regardless of cwnd, Nagle and
    /// the cork.
    Wakeup,
}

impl Stack {
    /// A fresh TCB for `tuple` with Linux's defaults; options come from the handshake.
    /// `adv_mss`: the MSS it announces ([`Stack::tcp_adv_mss`], or a listener's
    /// [`Stack::tcp_listener_adv_mss`]), which the caller has at hand.
    pub(crate) fn new_tcb(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        state: State,
        iss: SeqNumber,
        adv_mss: u16,
    ) -> Tcb {
        let mut congestion = CcState {
            cwnd: 10,
            ssthresh: u32::MAX,
            cwnd_cnt: 0,
            in_flight: 0,
            cwnd_clamp: u32::MAX,
        };
        let mut cc = if self.sysctl.tcp_congestion_control == 0 {
            Cc::by_name("reno")
        } else {
            Cc::by_name("cubic")
        }
        .expect("built-in congestion control");
        cc.init(&mut congestion);
        Tcb {
            state,
            tuple,
            snd: SendSeq {
                una: iss,
                nxt: iss,
                wnd: 0,
                wl1: SeqNumber(0),
                wl2: iss,
                iss,
                max_wnd: 0,
            },
            rcv: RecvSeq::default(),
            flags: TcbFlags::default(),
            rcv_wscale: 0,
            snd_wscale: 0,
            mss: DEFAULT_MSS,
            adv_mss,
            ts_recent: 0,
            ts_recent_stamp: 0,
            ts_offset: self.tcp.ts_offset(&tuple),
            rtt: RttEstimator::new(),
            active: super::tcb::Active::new(&cc),
            congestion: super::tcb::Cwnd {
                cwnd: congestion.cwnd,
                ssthresh: congestion.ssthresh,
            },
            ca_state: CaState::Open,
            probes: 0,
            quick_acks: QUICK_ACKS,
            sndbuf: SendBuffer::new(),
            rcvbuf: RecvBuffer::new(),
            sndbuf_limit: self.sysctl.tcp_wmem_default as u32,
            rcvbuf_limit: self.sysctl.tcp_rmem_default as u32,
            timers: Timers::NONE,
            last_activity: super::clock32::Ms32::floor(now),
            last_oow_ack: 0,
            error: None,
            snd_sml: iss,
        }
    }

    /// Our window-scale shift (see [`rcv_wscale`]).
    pub(crate) fn tcp_rcv_wscale(&self) -> u8 {
        rcv_wscale(&self.sysctl)
    }

    /// The window a SYN-ACK offers (see [`initial_rcv_window`]); `ts_ok`: the request
    /// negotiated timestamps, whose option takes its room from the MSS the window is a
    /// multiple of (Linux `tcp_openreq_init_rwin`: "mss -= TCPOLEN_TSTAMP_ALIGNED";
    /// 65,160 = 45 x 1448).
    /// `listener`: the slab index of the request's listener, whose `TCP_MAXSEG` lowers
    /// the MSS (Linux `tcp_openreq_init_rwin`: `tcp_mss_clamp(tp, dst_metric_advmss)`).
    pub(crate) fn tcp_initial_rcv_window(
        &self,
        now: Instant,
        t: &FourTuple,
        ts_ok: bool,
        listener: u32,
    ) -> u32 {
        self.tcp_synack_rcv_window(self.tcp_listener_adv_mss(now, t, listener), ts_ok)
    }

    /// [`Stack::tcp_initial_rcv_window`] from the listener's MSS already computed
    /// (`adv_mss`, [`Stack::tcp_listener_adv_mss`]).
    pub(crate) fn tcp_synack_rcv_window(&self, adv_mss: u16, ts_ok: bool) -> u32 {
        let ts = ts_ok && self.sysctl.tcp_timestamps != 0;
        initial_rcv_window(
            &self.sysctl,
            adv_mss.saturating_sub(if ts { 12 } else { 0 }),
        )
    }

    /// The MSS our SYN and SYN-ACK advertise: the MTU less the IP and TCP headers; over
    /// IPv6 the path MTU (lowered by Packet Too Big, `Stack::path_mtu6`) less 60 (Linux
    /// `tcp_v6_connect`/`tcp_v6_syn_recv_sock`: `dst_metric_advmss`, the route's MTU
    /// less the IPv6 and TCP headers).
    #[inline]
    pub(crate) fn tcp_adv_mss(&self, now: Instant, t: &FourTuple) -> u16 {
        let mss = if t.is_v6() {
            match self.tcp.addrs(t).1 {
                SocketAddr::V6(r) => self.path_mtu6(now, *r.ip()) - 60,
                SocketAddr::V4(_) => self.mtu - 60,
            }
        } else {
            self.mtu - 40
        };
        mss.min(u16::MAX as usize) as u16
    }

    /// The MSS the connections of listener `index` advertise on `t`:
    /// [`Stack::tcp_adv_mss`] clamped by the listener's `TCP_MAXSEG` (Linux
    /// `tcp_mss_clamp`).
    pub(crate) fn tcp_listener_adv_mss(&self, now: Instant, t: &FourTuple, index: u32) -> u16 {
        let adv = self.tcp_adv_mss(now, t);
        match self.tcp.listeners.user_mss(index) {
            0 => adv,
            user => adv.min(user),
        }
    }

    /// Apply what the SYN exchange negotiated (RFC 7323 §2.2, RFC 2018 §2, RFC 9293 §3.7.1).
    pub(crate) fn apply_syn_options(
        sysctl: &Sysctl,
        tcb: &mut Tcb,
        peer_mss: u16,
        snd_wscale: Option<u8>,
        sack_ok: bool,
        ts_recent: Option<u32>,
        now: Instant,
    ) {
        // RFC 7323 §2.2: scaling is on only if both SYNs carried the option.
        match snd_wscale {
            Some(shift) if sysctl.tcp_window_scaling != 0 => {
                tcb.flags.set(TcbFlags::WSCALE_OK);
                tcb.snd_wscale = shift.min(14);
                tcb.rcv_wscale = rcv_wscale(sysctl);
            }
            _ => {
                tcb.snd_wscale = 0;
                tcb.rcv_wscale = 0;
            }
        }
        if sack_ok && sysctl.tcp_sack != 0 {
            tcb.flags.set(TcbFlags::SACK_OK);
        }
        // The peer's MSS has a floor (Linux `tcp_min_snd_mss`, 48 by default, applied in
        // `__tcp_mtu_to_mss` since CVE-2019-11479): a peer announcing a tiny MSS cannot
        // make us send, and queue, one record per few bytes. Not above our own MSS.
        let floor = (sysctl.tcp_min_snd_mss.min(u64::from(u16::MAX)) as u16).min(tcb.adv_mss);
        let mut mss = peer_mss.min(tcb.adv_mss).max(floor);
        if let Some(tsval) = ts_recent.filter(|_| sysctl.tcp_timestamps != 0) {
            tcb.flags.set(TcbFlags::TS_OK);
            tcb.ts_recent = tsval;
            tcb.ts_recent_stamp = (now.as_millis() / 1000) as u32;
            // Linux mss_cache: the MSS minus the aligned timestamp option on every segment.
            // (Linux lets the option take the floor down to 36; ustack keeps the payload at
            // the floor.)
            mss = mss.saturating_sub(12).max(floor);
        }
        tcb.mss = mss;
    }

    /// The options our SYN or SYN-ACK carries; `mss`: the MSS it announces.
    fn syn_options(
        &self,
        mss: u16,
        repr: &mut tcp::Repr,
        tsval: u32,
        tsecr: u32,
        peer: Option<(Option<u8>, bool, bool)>,
    ) {
        repr.max_seg_size = Some(mss);
        let (ws, sack, ts) = peer.unwrap_or((Some(0), true, true));
        if self.sysctl.tcp_window_scaling != 0 && ws.is_some() {
            repr.window_scale = Some(self.tcp_rcv_wscale());
        }
        repr.sack_permitted = self.sysctl.tcp_sack != 0 && sack;
        if self.sysctl.tcp_timestamps != 0 && ts {
            repr.timestamp = Some(TcpTimestamp { tsval, tsecr });
        }
    }

    /// Send the SYN of an active open (RFC 9293 §3.10.1) and arm its retransmission.
    pub(crate) fn tcp_send_syn(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get(h) else { return };
        let (tuple, iss, ts_offset) = (tcb.tuple, tcb.snd.iss, tcb.ts_offset);
        // The window as SYN-SENT records it on the SYN-ACK (RCV.WND, see
        // tcp_rcv_synsent_state_process).
        let window = initial_rcv_window(&self.sysctl, tcb.adv_mss);
        let adv_mss = tcb.adv_mss;
        let mut repr = self.bare_repr(tuple, iss, SeqNumber(0), Flags::SYN, window as u16);
        // The MSS this connection announces: the path's, or less (TCP_MAXSEG set
        // before connect, Linux tcp_advertise_mss; a path MTU from ICMP in SYN-SENT).
        self.syn_options(
            adv_mss,
            &mut repr,
            ts_clock(now).wrapping_add(ts_offset),
            0,
            None,
        );
        let retransmit = tcb.snd.nxt != iss;
        if !self.tcp_tx_throttle(h, false) {
            self.tcp_emit(now, tuple, &repr, Payload::None);
        }
        let Some((tcb, spare)) = self.tcp.get_with_spare(h) else {
            return;
        };
        if !retransmit {
            tcb.snd.nxt = iss + 1;
            tcb.rtx_push().push_reusing(iss, iss + 1, now, spare);
        }
        tcb.timers.retransmit = Deadline::at(now + tcb.rtt.rto().max(TIMEOUT_INIT));
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        self.tcp_arm(now, h);
    }

    /// Send a SYN-ACK for a request (RFC 9293 §3.10.7.2). `tsval` overrides our timestamp
    /// (SYN cookies carry options in it).
    pub(crate) fn tcp_send_synack(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        req: &RequestSock,
        tsval: Option<u32>,
    ) {
        // The listener's MSS, computed once for the window and the option.
        let adv_mss = self.tcp_listener_adv_mss(now, &tuple, req.listener);
        let mut repr = self.bare_repr(
            tuple,
            req.iss,
            req.irs + 1,
            Flags::SYN | Flags::ACK,
            self.tcp_synack_rcv_window(adv_mss, req.ts_ok) as u16,
        );
        let tsval = tsval.unwrap_or_else(|| ts_clock(now).wrapping_add(self.tcp.ts_offset(&tuple)));
        // A cookie SYN-ACK advertises the MSS the cookie encodes.
        let mss = if req.peer_mss < adv_mss && req.listener == u32::MAX {
            adv_mss.min(1460)
        } else {
            adv_mss
        };
        self.syn_options(
            mss,
            &mut repr,
            tsval,
            req.ts_recent,
            Some((req.snd_wscale, req.sack_ok, req.ts_ok)),
        );
        self.tcp_emit(now, tuple, &repr, Payload::None);
    }

    /// The SYN-ACK of a simultaneous open (RFC 9293 §3.10.7.3: `<SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>`).
    pub(crate) fn tcp_send_syn_ack_tcb(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get(h) else { return };
        let (tuple, iss, ack, tsval, tsecr) = (
            tcb.tuple,
            tcb.snd.iss,
            tcb.rcv.nxt,
            ts_clock(now).wrapping_add(tcb.ts_offset),
            tcb.ts_recent,
        );
        let mut repr = self.bare_repr(
            tuple,
            iss,
            ack,
            Flags::SYN | Flags::ACK,
            // The window of our SYN again (Linux tcp_send_synack on a simultaneous open
            // keeps the rcv_wnd tcp_connect_init chose).
            initial_rcv_window(&self.sysctl, tcb.adv_mss) as u16,
        );
        // The options of our SYN again, whatever the peer's SYN offered (Linux
        // tcp_send_synack retransmits the SYN with ACK set, and tcp_syn_options looks only
        // at the sysctls): RFC 7323 sections 2.2 and 3.2 allow WS and TS on a SYN-ACK only
        // in answer to a SYN that carried them, but in a simultaneous open our own SYN has
        // offered them already. What is in effect is what both SYNs carried.
        self.syn_options(self.tcp_adv_mss(now, &tuple), &mut repr, tsval, tsecr, None);
        self.tcp_emit(now, tuple, &repr, Payload::None);
    }

    /// A RST for `tuple` (RFC 9293 §3.10.7.1: `<SEQ=SEG.ACK><CTL=RST>` when the offending
    /// segment had ACK, else `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`).
    pub(crate) fn tcp_send_reset(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        seq: SeqNumber,
        ack: Option<SeqNumber>,
    ) {
        let flags = if ack.is_some() {
            Flags::RST | Flags::ACK
        } else {
            Flags::RST
        };
        let repr = self.bare_repr(tuple, seq, ack.unwrap_or(SeqNumber(0)), flags, 0);
        self.mib.inc(Counter::TcpOutRsts);
        self.tcp_emit(now, tuple, &repr, Payload::None);
    }

    /// An ACK without a TCB (for requests and TIME-WAIT records).
    pub(crate) fn tcp_send_ack_raw(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        seq: SeqNumber,
        ack: SeqNumber,
        window: u32,
        ts: Option<TcpTimestamp>,
    ) {
        let mut repr = self.bare_repr(tuple, seq, ack, Flags::ACK, window.min(65_535) as u16);
        repr.timestamp = ts;
        self.tcp_emit(now, tuple, &repr, Payload::None);
    }

    fn bare_repr(
        &self,
        tuple: FourTuple,
        seq: SeqNumber,
        ack: SeqNumber,
        flags: Flags,
        window: u16,
    ) -> tcp::Repr<'static> {
        tcp::Repr {
            src_port: tuple.local.port(),
            dst_port: tuple.remote.port(),
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: window,
            ..tcp::Repr::default()
        }
    }

    /// Build one segment into an IP datagram and queue it (Linux `__tcp_transmit_skb`).
    /// A synchronized connection's segments take its header template instead
    /// ([`super::xmit`]).
    pub(super) fn tcp_emit(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        repr: &tcp::Repr,
        payload: Payload<'_>,
    ) -> bool {
        if tuple.is_v6() {
            return self.tcp_emit6(now, tuple, repr, payload);
        }
        let Ok(mut f) = self.ipv4_alloc(
            *tuple.remote.ip(),
            IpProtocol::Tcp,
            repr.header_len() + payload.len(),
        ) else {
            return false;
        };
        let seg = &mut f.frame[f.l4..];
        payload.write_segment(&self.tcp, repr, seg);
        let mut packet = tcp::Packet::new_unchecked(&mut seg[..]);
        if self.checksum_offload {
            packet.set_checksum(0);
        } else {
            packet.fill_checksum(&f.src.into(), &f.dst.into());
        }
        self.mib.inc(Counter::TcpOutSegs);
        self.ipv4_send(now, f, DropReason::DevQueueFull)
    }

    /// [`Stack::tcp_emit`] over IPv6 (Linux `inet6_csk_xmit` -> `ip6_xmit`): the segment
    /// is written, from the connection's own address, into the frame
    /// [`Stack::ipv6_alloc`] gives, with its checksum over the IPv6 pseudo-header (RFC 8200
    /// §8.1; left zero under [`crate::Config::checksum_offload`], as over IPv4: both ends
    /// of a trusted link skip it, as Linux's loopback does for both families).
    #[cold]
    fn tcp_emit6(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        repr: &tcp::Repr,
        payload: Payload<'_>,
    ) -> bool {
        let (SocketAddr::V6(local), SocketAddr::V6(remote)) = self.tcp.addrs(&tuple) else {
            return false;
        };
        let out = Outbound6 {
            src: Some(*local.ip()),
            dst: *remote.ip(),
            next_header: IpProtocol::Tcp,
            payload_len: repr.header_len() + payload.len(),
            hop_limit: None,
            full_reason: DropReason::DevQueueFull,
            ports: Some((local.port(), remote.port())),
        };
        let (src, dst) = (IpAddr::V6(*local.ip()), IpAddr::V6(*remote.ip()));
        let fill = |conns: &super::Tcp, seg: &mut [u8], offload: bool| {
            payload.write_segment(conns, repr, seg);
            let mut packet = tcp::Packet::new_unchecked(seg);
            if offload {
                packet.set_checksum(0);
            } else {
                packet.fill_checksum(&src, &dst);
            }
        };
        // The segment is written into the frame from the pool, as over IPv4; only one
        // larger than the path MTU (Packet Too Big lowered it under data in flight) goes
        // through a buffer of its own to be fragmented.
        match self.ipv6_alloc(now, &out, false) {
            Ok(Ip6Out::Whole {
                mut frame,
                l4,
                next_hop,
                ..
            }) => {
                fill(&self.tcp, &mut frame[l4..], self.checksum_offload);
                self.mib.inc(Counter::TcpOutSegs);
                self.ip6_xmit(now, next_hop, frame, out.full_reason)
            }
            Ok(Ip6Out::Fragments(f)) => {
                let mut seg = vec![0u8; out.payload_len];
                fill(&self.tcp, &mut seg, self.checksum_offload);
                self.mib.inc(Counter::TcpOutSegs);
                self.ipv6_fragment(now, f, &seg, out.full_reason).is_ok()
            }
            Err(_) => false,
        }
    }

    /// The window to advertise now, scaled for the header, updating RCV.WND and RCV.WUP
    /// (Linux `tcp_select_window`): the free space of the receive buffer as
    /// [`Tcb::free_window`] computes it, except that the right edge already advertised
    /// never moves left (RFC 9293 §3.8.6.2.2 "the receiver MUST NOT shrink the window";
    /// Linux keeps `ALIGN(cur_win, 1 << rcv_wscale)` and counts TCPWantZeroWindowAdv when
    /// it wanted to close it). Counts TCPToZeroWindowAdv / TCPFromZeroWindowAdv as Linux.
    /// Under memory pressure, once less than half the buffer is free, `rcv_ssthresh` falls
    /// to four segments (Linux `__tcp_select_window` -> `tcp_adjust_rcv_ssthresh`), and
    /// the window never exceeds it.
    #[inline(always)]
    fn select_window(tcb: &mut Tcb, mib: &mut ustack_obs::Mib, pressure: bool) -> u16 {
        // A box whose `rcv_ssthresh` was never set (no segment grew it) reads RCV.WND in
        // its place: kept as it is now, before this window changes it, so that the
        // ceiling does not follow the window down while unread data takes room and stay
        // there after a read frees it (Linux keeps `rcv_ssthresh` from the handshake's
        // `rcv_wnd`; only `tcp_grow_window` and memory pressure move it).
        if tcb.active.is_held() && tcb.active.rcv_ssthresh == 0 {
            Self::pin_rcv_ssthresh(tcb);
        }
        let old_win = tcb.rcv.wnd;
        let cur_win = tcb.receive_window();
        if pressure {
            tcb.adjust_rcv_ssthresh();
        }
        let mut new_win = tcb.free_window(pressure);
        if new_win < cur_win {
            if new_win == 0 {
                mib.inc(Counter::TcpExtTCPWantZeroWindowAdv);
            }
            // RFC 7323 Appendix F: scaling cannot express every edge; rounding up keeps
            // it where it was (the data in it is accepted, see `tcp_data_queue`).
            new_win = cur_win.next_multiple_of(1 << tcb.rcv_wscale);
        }
        let new_win = new_win.min(65_535u32 << tcb.rcv_wscale);
        tcb.rcv.wnd = new_win;
        tcb.rcv.wup = tcb.rcv.nxt;
        let field = new_win >> tcb.rcv_wscale;
        if field == 0 && old_win != 0 {
            mib.inc(Counter::TcpExtTCPToZeroWindowAdv);
        } else if field != 0 && old_win == 0 {
            mib.inc(Counter::TcpExtTCPFromZeroWindowAdv);
        }
        field as u16
    }

    /// See [`Stack::select_window`].
    #[cold]
    #[inline(never)]
    fn pin_rcv_ssthresh(tcb: &mut Tcb) {
        tcb.active.rcv_ssthresh = tcb.rcv_ssthresh();
    }

    /// Whether a read should send an ACK now (Linux `tcp_cleanup_rbuf`): the one input
    /// left to the read ("Once-per-two-segments ACK was not sent by tcp_input.c": an ACK
    /// pending and more than one full frame unacknowledged), or a window update when the
    /// window still offered is at most half the largest one ("Send ACK now, if this read
    /// freed lots of space in our buffer ... "Lots" means "at least twice" here").
    /// `pressure`: whether the stack is under memory pressure. An associated function on
    /// the connection the read already holds (no second look-up).
    #[inline(always)]
    pub(crate) fn tcp_window_update_due(tcb: &Tcb, pressure: bool) -> bool {
        if !tcb.state.can_receive() {
            return false;
        }
        if tcb.flags.has(TcbFlags::ACK_PENDING) && tcb.rcv.nxt - tcb.rcv.wup > usize::from(tcb.mss)
        {
            return true;
        }
        let now_win = tcb.receive_window();
        if 2 * u64::from(now_win) > u64::from(tcb.full_window()) {
            return false;
        }
        // The new window is at most rcv_ssthresh rounded up to the scale's unit, or
        // unscaled the window last offered ([`Tcb::free_window`] keeps it): when that
        // ceiling is under twice the window still offered there is nothing to announce,
        // found without computing the window (Linux tcp_cleanup_rbuf: "Optimize,
        // __tcp_select_window() is not cheap"). A reader of small messages, whose window
        // never grows past rcv_ssthresh, takes this return on every read.
        let ceiling = if tcb.rcv_wscale > 0 {
            tcb.rcv_ssthresh().next_multiple_of(1 << tcb.rcv_wscale)
        } else {
            tcb.rcv_ssthresh().max(tcb.rcv.wnd)
        };
        if u64::from(ceiling) < 2 * u64::from(now_win) {
            debug_assert!(tcb.free_window(pressure) <= ceiling);
            return false;
        }
        let new_win = tcb.free_window(pressure);
        debug_assert!(new_win <= ceiling, "{new_win} over the ceiling {ceiling}");
        new_win != 0 && u64::from(new_win) >= 2 * u64::from(now_win)
    }

    /// Fill the options of a segment on an established connection: timestamps, SACK
    /// blocks (RFC 2018 §4: at most 3 next to the timestamp option, 4 without), a pending
    /// D-SACK first (RFC 2883 §4: "If a D-SACK block is reported, it MUST be the first
    /// block"), sent once (Linux `tcp_established_options`, `tcp_options_write`).
    #[inline(always)]
    fn data_options(tcb: &mut Tcb, head: &mut SegHead, now: Instant) {
        if tcb.flags.has(TcbFlags::TS_OK) {
            head.timestamp = Some(TcpTimestamp {
                tsval: ts_clock(now).wrapping_add(tcb.ts_offset),
                tsecr: tcb.ts_recent,
            });
        }
        if !tcb.flags.has(TcbFlags::SACK_OK) {
            return;
        }
        let dsack = tcb.active.rx_sack.dsack();
        if dsack.is_some() || tcb.rcvbuf.ooo_bytes() > 0 {
            Self::sack_options(tcb, head, dsack);
        }
    }

    /// The SACK blocks of [`Stack::data_options`], when there are any to send.
    #[cold]
    #[inline(never)]
    fn sack_options(tcb: &mut Tcb, head: &mut SegHead, dsack: Option<(SeqNumber, SeqNumber)>) {
        let max = if head.timestamp.is_some() { 3 } else { 4 };
        let mut n = 0;
        if let Some(d) = dsack {
            head.sacks[n] = d;
            n += 1;
            tcb.active.rx_sack.clear_dsack();
        }
        if tcb.rcvbuf.ooo_bytes() > 0 {
            for &b in tcb.active.rx_sack.blocks() {
                if n == max {
                    break;
                }
                head.sacks[n] = b;
                n += 1;
            }
        }
        head.n_sacks = n as u8;
    }

    /// Send one segment of the connection: `len` bytes of data at `seq`, plus FIN if
    /// asked; an ACK of everything received goes with it. Clears pending ACKs. `gso`
    /// above 0: `len` is several segments of `gso` bytes, sent as one super-segment for
    /// the device to cut (TSO, see [`Stack::tcp_tso_segs`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn tcp_send_segment(
        &mut self,
        now: Instant,
        h: TcpHandle,
        seq: SeqNumber,
        len: usize,
        fin: bool,
        push: bool,
        gso: usize,
    ) -> bool {
        let out = SegOut {
            seq,
            len,
            fin,
            push,
            gso,
        };
        self.tcp_send_segment_inline(now, h, out)
    }

    /// [`Stack::tcp_send_segment`] in its caller: the one-segment path's
    /// (`tcp_write_xmit_one`, which a write's `tcp_push_one` takes), one call fewer.
    #[inline(always)]
    fn tcp_send_segment_inline(&mut self, now: Instant, h: TcpHandle, out: SegOut) -> bool {
        let ack_only = out.len == 0 && !out.fin;
        if self.tcp_tx_throttle(h, ack_only) {
            // Held back, not lost: an ACK owed is sent when the connection is woken.
            if ack_only && let Some(tcb) = self.tcp.get_mut(h) {
                tcb.flags.set(TcbFlags::ACK_NOW);
            }
            return false;
        }
        let pressure = self.tcp.pool.under_pressure();
        let super::Tcp { conns, xopts, .. } = &mut self.tcp;
        let Some(tcb) = conns.get_mut(h.index, h.generation) else {
            return false;
        };
        // The send urgent pointer lives with the rarely set options (`Tcp::xopts`).
        let snd_up = if tcb.flags.has(TcbFlags::URG) && tcb.flags.has(TcbFlags::XOPTS) {
            xopts.get(&h.index).and_then(|o| o.snd_up)
        } else {
            None
        };
        let (head, payload) = Self::tcp_seg_head(tcb, &mut self.mib, pressure, h, snd_up, out, now);
        let (tuple, tpl) = (tcb.tuple, tcb.active.tx_template);
        self.tcp_seg_transmit(now, h, &tuple, tpl, &head, payload, out)
    }

    /// The header of connection `h`'s segment `out` (and where its payload lies), with
    /// what sending it changes in the connection: the window advertised (RCV.WND, RCV.WUP),
    /// pending ACKs cleared (the segment carries the ACK), the timestamps' and SACK
    /// blocks' state. `snd_up`: the send urgent pointer, if urgent mode is on.
    #[inline(always)]
    fn tcp_seg_head(
        tcb: &mut Tcb,
        mib: &mut ustack_obs::Mib,
        pressure: bool,
        h: TcpHandle,
        snd_up: Option<SeqNumber>,
        out: SegOut,
        now: Instant,
    ) -> (SegHead, Payload<'static>) {
        let head = Self::tcp_seg_header(tcb, mib, pressure, snd_up, out, now);
        (head, Self::tcp_seg_payload(tcb, h, out))
    }

    /// Where the payload of connection `h`'s segment `out` lies in its send buffer.
    #[inline(always)]
    fn tcp_seg_payload(tcb: &Tcb, h: TcpHandle, out: SegOut) -> Payload<'static> {
        let SegOut { seq, len, .. } = out;
        if len == 0 {
            return Payload::None;
        }
        let offset = seq.diff(tcb.data_start()).max(0) as usize;
        Payload::SendBuffer {
            h,
            offset,
            len,
            span: tcb.sndbuf.head_span(offset, len),
        }
    }

    /// [`Stack::tcp_seg_head`]'s header and what sending it changes, without the payload.
    #[inline(always)]
    fn tcp_seg_header(
        tcb: &mut Tcb,
        mib: &mut ustack_obs::Mib,
        pressure: bool,
        snd_up: Option<SeqNumber>,
        out: SegOut,
        now: Instant,
    ) -> SegHead {
        let SegOut {
            seq,
            len,
            fin,
            push,
            gso,
        } = out;
        let window = Self::select_window(tcb, mib, pressure);
        let mut flags = Flags::ACK;
        if fin {
            flags |= Flags::FIN;
        }
        if push && len > 0 {
            flags |= Flags::PSH;
        }
        // Urgent data (RFC 9293 §3.8.5; Linux tcp_transmit_skb): a segment starting before
        // snd_up carries URG and the offset of snd_up from its sequence number, or 0xFFFF
        // when that is too far and the segment is the last one sent; urgent mode ends
        // once the peer has acknowledged snd_up (Linux tcp_urg_mode: snd_una != snd_up).
        let mut urgent_pointer = 0;
        if let Some(up) = snd_up {
            if !tcb.snd.una.before(up) {
                tcb.flags.clear(TcbFlags::URG);
            } else if seq.before(up) {
                let off = up.diff(seq);
                if off < 0x10000 {
                    flags |= Flags::URG;
                    urgent_pointer = off as u16;
                } else if (seq + 0xFFFF).after(tcb.snd.nxt) {
                    flags |= Flags::URG;
                    urgent_pointer = 0xFFFF;
                }
            }
        }
        let tuple = tcb.tuple;
        let mut head = SegHead {
            src_port: tuple.local.port(),
            dst_port: tuple.remote.port(),
            seq,
            ack: tcb.rcv.nxt,
            flags,
            window,
            urgent: urgent_pointer,
            timestamp: None,
            n_sacks: 0,
            sacks: [(SeqNumber(0), SeqNumber(0)); 4],
        };
        tcb.flags.clear(TcbFlags::ACK_NOW | TcbFlags::ACK_PENDING);
        tcb.timers.delack = Deadline::OFF;
        tcb.quick_acks = tcb.quick_acks.saturating_sub(1);
        if len > 0 {
            tcp_event_data_sent(tcb, now);
        }
        tcb.last_activity = super::clock32::Ms32::floor(now);
        Self::data_options(tcb, &mut head, now);
        // A segment sized before SACK blocks were due (a retransmission) carries fewer
        // blocks rather than exceed the MSS (RFC 9293 §3.7.1; Linux splits the segment
        // instead, tcp_retransmit_skb -> tcp_fragment, which the queue does not do).
        if head.n_sacks > 0 {
            let room = usize::from(tcb.mss)
                + tcp::HEADER_LEN
                + if head.timestamp.is_some() { 12 } else { 0 };
            let seg_len = if gso > 0 { gso } else { len };
            while head.n_sacks > 0 && head.len() + seg_len > room {
                head.n_sacks -= 1;
            }
        }
        head
    }

    /// Send the segment `head` (with `payload`) of connection `h`: from its header
    /// template `tpl` when current (else a new one), or by the general path
    /// ([`Stack::tcp_emit`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn tcp_seg_transmit(
        &mut self,
        now: Instant,
        h: TcpHandle,
        tuple: &FourTuple,
        tpl: super::xmit::TxTemplate,
        head: &SegHead,
        payload: Payload<'_>,
        out: SegOut,
    ) -> bool {
        let gso = out.gso;
        let segs = if gso > 0 { out.len.div_ceil(gso) } else { 1 };
        if self.tcp_template_on
            && let Some(sent) = self.tcp_transmit_templated(now, h, tuple, tpl, head, payload, segs)
        {
            return sent;
        }
        if gso > 0 {
            // A super-segment goes only from the template (`tcp_tso_segs` checks it is
            // on); the general path sizes frames to the MTU.
            return false;
        }
        self.tcp_emit(now, *tuple, &head.repr(), payload)
    }

    /// A pure ACK now (RFC 9293 §3.10.7.4: `<SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>`).
    pub(crate) fn tcp_send_ack(&mut self, now: Instant, h: TcpHandle) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpOutput);
        let Some(tcb) = self.tcp.get(h) else { return };
        let seq = tcb.snd.nxt;
        self.tcp_send_segment(now, h, seq, 0, false, false, 0);
    }

    /// Queue our FIN after the data (RFC 9293 §3.10.4 CLOSE): ESTABLISHED goes to
    /// FIN-WAIT-1, CLOSE-WAIT to LAST-ACK, SYN-RECEIVED to FIN-WAIT-1.
    pub(crate) fn tcp_queue_fin(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.flags.has(TcbFlags::FIN_QUEUED) {
            return;
        }
        let next = match tcb.state {
            State::Established | State::SynReceived => State::FinWait1,
            State::CloseWait => State::LastAck,
            State::SynSent => {
                // Linux tcp_close_state: SYN-SENT goes straight to CLOSED; no FIN.
                self.tcp_done(h, None);
                return;
            }
            _ => return,
        };
        tcb.flags.set(TcbFlags::FIN_QUEUED);
        self.tcp_set_state(h, next);
        if !self.tcp_send_fin_alone(now, h) {
            self.tcp_output(now, h);
        }
    }

    /// The FIN of [`Stack::tcp_queue_fin`] when it is all there is to send: nothing
    /// unsent, nothing to retransmit, room in cwnd and the retransmission queue. What
    /// [`Stack::tcp_output`] -> [`Stack::tcp_write_xmit`] does in that case (a segment of
    /// no data with FIN, PSH, queued for retransmission, SND.NXT past it, then
    /// [`Stack::tcp_output_sent`]), without their tests for retransmissions, the
    /// one-segment path, TSO, Nagle and the cork, and the loop's second round. Linux's
    /// `tcp_send_fin` likewise queues the FIN skb and pushes it
    /// (`__tcp_push_pending_frames(.., TCP_NAGLE_OFF)`); RFC 9293 §3.10.4 CLOSE: "form a
    /// FIN segment and send it". False: not this case, nothing done.
    #[inline]
    fn tcp_send_fin_alone(&mut self, now: Instant, h: TcpHandle) -> bool {
        let Some(tcb) = self.tcp.get(h) else {
            return false;
        };
        let sent = tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize;
        if !(tcb.state.is_synchronized() || tcb.state == State::SynReceived)
            || tcb.flags.has(TcbFlags::FIN_SENT)
            || tcb.sndbuf.len() > sent
            || tcb.active.recovery.lost_retrans > 0
            || tcb.rtx().next_to_retransmit().is_some()
            || tcb.in_flight() >= tcb.congestion.cwnd
            || tcb.rtx().len() >= rtx_record_cap(tcb.sndbuf_limit)
        {
            return false;
        }
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpOutput);
        let seq = tcb.snd.nxt;
        if !self.tcp_send_segment(now, h, seq, 0, true, true, 0) {
            // Held back (the device's queue full): as tcp_write_xmit's loop, nothing sent.
            self.tcp_output_sent(now, h, 0);
            return true;
        }
        if let Some((tcb, spare)) = self.tcp.get_with_spare(h) {
            let end = seq + 1;
            tcb.rtx_push().push_reusing(seq, end, now, spare);
            tcb.snd.nxt = end;
            // Linux tcp_minshall_update: a FIN is a sub-MSS segment.
            tcb.snd_sml = end;
            if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
                tcb.active.recovery.prr_out += 1;
            }
            tcb.flags.set(TcbFlags::FIN_SENT);
        }
        self.tcp_output_sent(now, h, 1);
        true
    }

    /// Send what can be sent now (Linux `tcp_write_xmit` after `tcp_xmit_retransmit_queue`),
    /// then any ACK still owed. Everything is bounded by cwnd against the pipe (RFC 6675
    /// §5 step (C): "the TCP MUST NOT send data when cwnd - pipe < 1 SMSS"); in recovery
    /// cwnd is PRR's (RFC 6937).
    #[inline]
    pub(crate) fn tcp_output(&mut self, now: Instant, h: TcpHandle) {
        // Nothing to do (the common case after a segment that brought data and an ACK but
        // no room, and no reason, to send): one look at the TCB instead of the walk below.
        // Whether anything waits to be retransmitted is asked once: with nothing, the
        // loop below would stop at its first test.
        let (lost_retrans, rtx_due) = match self.tcp.get(h) {
            Some(t) => {
                let lost_retrans = t.active.recovery.lost_retrans > 0;
                let rtx_due = lost_retrans || t.rtx().next_to_retransmit().is_some();
                if !rtx_due && tcp_output_cannot_write(t) {
                    // Nothing to send but perhaps an ACK: what tcp_output_work would
                    // come to (tcp_write_xmit stops at its first test, then
                    // tcp_output_sent with nothing sent), without its walk.
                    if t.flags.has(TcbFlags::ACK_NOW) {
                        self.tcp_send_ack(now, h);
                    } else if t.flags.has(TcbFlags::ACK_PENDING) && !t.timers.delack.is_armed() {
                        self.tcp_output_sent(now, h, 0);
                    }
                    return;
                }
                (lost_retrans, rtx_due)
            }
            None => return,
        };
        self.tcp_output_work(now, h, lost_retrans, rtx_due);
    }

    /// [`Stack::tcp_output`] past its idle test, out of line: the test is taken in the
    /// caller (after every segment in, and mostly with nothing to send), without this
    /// function's frame.
    #[inline(never)]
    fn tcp_output_work(&mut self, now: Instant, h: TcpHandle, lost_retrans: bool, rtx_due: bool) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpOutput);
        // Retransmissions found lost again go first (see `tcp_find_lost_retrans`).
        if lost_retrans {
            self.tcp_resend_lost_retrans(now, h);
        }
        // Then lost segments (RFC 6675 §5 NextSeg rule 1; also after an RTO).
        if rtx_due {
            loop {
                let Some(tcb) = self.tcp.get(h) else { return };
                if tcb.in_flight() >= tcb.congestion.cwnd {
                    break;
                }
                let Some((start, end)) = tcb.rtx().next_to_retransmit() else {
                    break;
                };
                if !self.tcp_retransmit(now, h, start, end) {
                    break;
                }
            }
        }
        let sent = self.tcp_write_xmit(now, h, Xmit::Normal);
        self.tcp_output_sent(now, h, sent);
    }

    /// A write's one segment straight from [`Stack::tcp_send`] (Linux `tcp_push_one`, which
    /// `tcp_sendmsg` calls when the write is the send queue's only data): with nothing in
    /// flight (so an empty retransmission queue), [`Stack::tcp_output`]'s look for
    /// retransmissions and its idle test have nothing to find, and
    /// [`Stack::tcp_write_xmit`]'s one-segment case (its guards: see
    /// `tcp_write_xmit_one`) is the whole of it. (A count of retransmissions found lost
    /// again left from before the queue emptied finds nothing to resend either.) False:
    /// not this case, nothing done, [`Stack::tcp_output`]'s to run.
    /// The segment sent, [`Stack::tcp_output_sent`]'s work is done in
    /// `tcp_write_xmit_one` on the connection it already holds (see `ARM_SENT` there);
    /// only a segment held back (the device's queue full) leaves it to run here.
    #[inline]
    pub(crate) fn tcp_push_one(&mut self, now: Instant, h: TcpHandle) -> bool {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpOutput);
        let Some(sent) = self.tcp_write_xmit_one::<true>(now, h) else {
            return false;
        };
        self.tcp.push_one_hits += 1;
        if sent == 0 {
            self.tcp_output_sent(now, h, 0);
        }
        true
    }

    /// What [`Stack::tcp_output`] does once new data was sent (`sent` segments): the
    /// loss probe or the RTO armed, then any ACK still owed.
    #[inline]
    pub(crate) fn tcp_output_sent(&mut self, now: Instant, h: TcpHandle, sent: u32) {
        if sent > 0
            && let Some(tcb) = self.tcp.get_mut(h)
            && tcb.arm_after_send(now, false)
            && tcb.timers.earliest().before(tcb.timers.queued)
        {
            self.tcp_arm(now, h);
        }
        let Some(tcb) = self.tcp.get(h) else { return };
        if tcb.flags.has(TcbFlags::ACK_NOW) {
            self.tcp_send_ack(now, h);
        } else if tcb.flags.has(TcbFlags::ACK_PENDING) && !tcb.timers.delack.is_armed() {
            if let Some(t) = self.tcp.get_mut(h) {
                t.timers.delack = Deadline::at(now + DELACK);
            }
            self.tcp_arm(now, h);
        }
    }

    /// Send new data (Linux `tcp_write_xmit`): as much as cwnd against the pipe, the
    /// peer's window and Nagle allow; a probe ([`Xmit::LossProbe`], [`Xmit::Wakeup`]):
    /// one segment regardless of cwnd and Nagle. Returns the segments sent.
    pub(crate) fn tcp_write_xmit(&mut self, now: Instant, h: TcpHandle, mode: Xmit) -> u32 {
        let probe = mode != Xmit::Normal;
        if !probe && let Some(sent) = self.tcp_write_xmit_one::<false>(now, h) {
            return sent;
        }
        let mut sent_segs = 0;
        loop {
            let Some(tcb) = self.tcp.get(h) else {
                return sent_segs;
            };
            if probe && sent_segs > 0 {
                break;
            }
            if !(tcb.state.is_synchronized() || tcb.state == State::SynReceived)
                || tcb.flags.has(TcbFlags::FIN_SENT)
            {
                break;
            }
            let data_start = tcb.data_start();
            let sent = tcb.snd.nxt.diff(data_start).max(0) as usize;
            let unsent = tcb.sndbuf.len().saturating_sub(sent);
            let fin_pending = tcb.flags.has(TcbFlags::FIN_QUEUED);
            if unsent == 0 && !fin_pending {
                break;
            }
            if tcb.in_flight() >= tcb.congestion.cwnd && !probe {
                break;
            }
            if tcb.rtx().len() >= rtx_record_cap(tcb.sndbuf_limit) {
                // The retransmission queue holds its limit of records (see
                // rtx_record_cap); sending resumes as ACKs free some.
                self.mib.inc(Counter::TcpExtTCPWqueueTooBig);
                break;
            }
            let wnd_end = tcb.snd.una + tcb.snd.wnd as usize;
            let wnd_avail = wnd_end.diff(tcb.snd.nxt).max(0) as usize;
            // RFC 9293 §3.7.1: "Eff.snd.MSS = min(SendMSS+20, MMS_S) - TCPhdrsize -
            // IPoptionsize", TCPhdrsize counting the options actually sent: SACK blocks
            // take room from the payload (Linux tcp_current_mss).
            let mss_now = bound_to_half_wnd(tcb.mss_now(), tcb.snd.max_wnd, tcb.flags);
            if !probe && self.gso_max_size > self.mtu {
                let segs = self.tcp_tso_segs(tcb, mss_now, unsent, wnd_avail);
                if segs >= 2 {
                    let seq = tcb.snd.nxt;
                    let len = segs * mss_now;
                    let push = len == unsent;
                    if !self.tcp_send_segment(now, h, seq, len, false, push, mss_now) {
                        break;
                    }
                    sent_segs += segs as u32;
                    let Some((tcb, spare)) = self.tcp.get_with_spare(h) else {
                        return sent_segs;
                    };
                    // Linux tcp_skb_pcount: one record per segment, so that SACK, RACK,
                    // cwnd and retransmission see what the wire carries.
                    for i in 0..segs {
                        let start = seq + i * mss_now;
                        tcb.rtx_push()
                            .push_reusing(start, start + mss_now, now, spare);
                    }
                    tcb.snd.nxt = seq + len;
                    if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
                        tcb.active.recovery.prr_out += segs as u32;
                    }
                    if push && !fin_pending {
                        break;
                    }
                    continue;
                }
            }
            // A segment cut short by the peer's window goes as RFC 9293 §3.8.6.2.1's
            // sender silly window avoidance allows (the test below, after Nagle and the
            // cork): with nothing unacknowledged, or when it is at least half the largest
            // window the peer offered (Fs = 1/2). Linux's tcp_snd_wnd_test sends only a
            // whole MSS (or all that is unsent) that fits and otherwise waits for the
            // window or the probe timer; tried here (2026-11-27 noon), it halved the
            // download to a kernel client with 4 KB buffers (28 against 55 MB/s,
            // kernel_load::small_buffer_download_keeps_up_with_linux): that client's
            // window stays under two segments, so what fits with nothing in flight waited
            // for the probe timer. A zero window is the case where nothing fits (RFC
            // 9293 §3.8.6.1).
            let len = unsent.min(mss_now).min(wnd_avail);
            let fin = fin_pending
                && len == unsent
                && (unsent == 0 || wnd_avail > len || wnd_avail >= unsent);
            if len == 0 && !(fin && unsent == 0) {
                // The probe timer takes over when nothing in flight will bring an ACK
                // (Linux tcp_check_probe_timer: "!tp->packets_out && !icsk_pending").
                if tcb.rtx().is_empty() && !tcb.timers.retransmit.is_armed() {
                    let rto = tcb.rtt.rto();
                    if let Some(t) = self.tcp.get_mut(h) {
                        t.timers.retransmit = Deadline::at(now + rto);
                        t.flags.clear(TcbFlags::LOSS_PROBE);
                    }
                    self.tcp_arm(now, h);
                }
                break;
            }
            // Nagle (RFC 9293 §3.7.4) as Linux applies it, with Minshall's refinement
            // (draft-minshall-nagle; Linux tcp_nagle_check / tcp_minshall_check): the
            // sub-MSS tail of what the user wrote waits only while an earlier sub-MSS
            // segment is unacknowledged, so a bulk transfer's last bytes leave at once
            // instead of one round trip later. Not with TCP_NODELAY or a FIN.
            let partial = len < mss_now;
            let nodelay = tcb.flags.has(TcbFlags::NODELAY) || fin || probe;
            let small_outstanding =
                tcb.snd_sml.after(tcb.snd.una) && !tcb.snd_sml.after(tcb.snd.nxt);
            if partial && len == unsent && !nodelay && small_outstanding {
                break;
            }
            // TCP_CORK (Linux tcp_nagle_check: "partial && ((nonagle & TCP_NAGLE_CORK) ||
            // ..."): the partial tail waits for more data or the uncork. With nothing in
            // flight the probe timer is armed (Linux tcp_push_pending_frames ->
            // tcp_check_probe_timer, at tcp_probe0_base: the RTO, at least TCP_RTO_MIN),
            // whose expiry sends it anyway (tcp_write_wakeup; see tcp_probe_timer).
            if partial && len == unsent && !fin && !probe && tcb.flags.has(TcbFlags::CORK) {
                if tcb.rtx().is_empty() && !tcb.timers.retransmit.is_armed() {
                    let base = tcb.rtt.rto().max(super::rtt::TCP_RTO_MIN);
                    if let Some(t) = self.tcp.get_mut(h) {
                        t.timers.retransmit = Deadline::at(now + base);
                        t.flags.clear(TcbFlags::LOSS_PROBE);
                    }
                    self.tcp_arm(now, h);
                }
                break;
            }
            // A segment cut short by the peer's window: sent only with nothing
            // unacknowledged or when it is at least half the largest window the peer
            // offered (see above), or by the probe timer (`Xmit::Wakeup`).
            let unacked = tcb.snd.nxt != tcb.snd.una;
            if partial
                && len < unsent
                && !nodelay
                && unacked
                && len < (tcb.snd.max_wnd / 2) as usize
            {
                break;
            }
            let seq = tcb.snd.nxt;
            // Linux tcp_write_wakeup: a segment cut to the window carries PSH.
            let push = len == unsent || mode == Xmit::Wakeup;
            if !self.tcp_send_segment(now, h, seq, len, fin, push, 0) {
                break;
            }
            sent_segs += 1;
            let Some((tcb, spare)) = self.tcp.get_with_spare(h) else {
                return sent_segs;
            };
            let end = seq + len + usize::from(fin);
            tcb.rtx_push().push_reusing(seq, end, now, spare);
            tcb.snd.nxt = end;
            if partial {
                // Linux tcp_minshall_update.
                tcb.snd_sml = end;
            }
            if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
                // RFC 6937: "On any data transmission or retransmission: prr_out += ...".
                tcb.active.recovery.prr_out += 1;
            }
            if fin {
                tcb.flags.set(TcbFlags::FIN_SENT);
            }
            if len == unsent && !fin_pending {
                // Everything written has left and no FIN waits: the next round would
                // find nothing to send.
                break;
            }
        }
        sent_segs
    }

    /// [`Stack::tcp_write_xmit`]'s common case in one pass, as Linux `tcp_write_xmit`
    /// takes it without its loop's work for one skb: everything unsent fits one segment
    /// and the peer's window, and nothing is in flight, on an established (or
    /// CLOSE-WAIT) connection with no FIN queued and no cork. The loop's other tests then
    /// all pass and need no evaluation: cwnd against an empty pipe (cwnd at least 1),
    /// the retransmission queue's cap, TSO (below two segments), Nagle and Minshall
    /// (nothing unacknowledged), sender SWS avoidance (the segment takes all that is
    /// unsent). `None`: not this case, the loop decides.
    ///
    /// `ARM_SENT` (a write's [`Stack::tcp_push_one`]): once the segment is out, do what
    /// [`Stack::tcp_output_sent`] would, on the connection already at hand instead of
    /// looking it up twice more: the loss probe or the RTO armed (Linux
    /// `tcp_event_new_data_sent` -> `tcp_rearm_rto` only when none is pending;
    /// `tcp_schedule_loss_probe`). Its other half, the ACK still owed, has nothing to
    /// do: the segment carried the ACK and cleared both ACK flags.
    #[inline]
    fn tcp_write_xmit_one<const ARM_SENT: bool>(
        &mut self,
        now: Instant,
        h: TcpHandle,
    ) -> Option<u32> {
        let tcb = self.tcp.get(h)?;
        if !matches!(tcb.state, State::Established | State::CloseWait)
            || tcb
                .flags
                .has(TcbFlags::FIN_QUEUED | TcbFlags::FIN_SENT | TcbFlags::CORK)
            || tcb.snd.nxt != tcb.snd.una
            || !tcb.rtx().is_empty()
            || tcb.congestion.cwnd == 0
        {
            return None;
        }
        let seq = tcb.snd.nxt;
        let sent = seq.diff(tcb.data_start()).max(0) as usize;
        let unsent = tcb.sndbuf.len().saturating_sub(sent);
        let wnd_avail = (tcb.snd.una + tcb.snd.wnd as usize).diff(seq).max(0) as usize;
        let mss_now = bound_to_half_wnd(tcb.mss_now(), tcb.snd.max_wnd, tcb.flags);
        if unsent == 0 || unsent > mss_now || unsent > wnd_avail {
            return None;
        }
        let out = SegOut {
            seq,
            len: unsent,
            fin: false,
            push: true,
            gso: 0,
        };
        if !self.tcp_send_segment_inline(now, h, out) {
            return Some(0);
        }
        self.tcp_sent_one::<ARM_SENT>(now, h, seq, unsent, mss_now);
        Some(1)
    }

    /// What sending `len` new bytes at `seq` in one segment changes in connection `h`
    /// (Linux `tcp_event_new_data_sent`): queued for retransmission, SND.NXT past it,
    /// Minshall's sub-MSS mark, PRR's count. `ARM_SENT`: and the timer, as
    /// [`Stack::tcp_output_sent`] would arm it, on the connection already at hand (see
    /// `tcp_write_xmit_one`); the queue held nothing before this segment.
    #[inline(always)]
    fn tcp_sent_one<const ARM_SENT: bool>(
        &mut self,
        now: Instant,
        h: TcpHandle,
        seq: SeqNumber,
        len: usize,
        mss_now: usize,
    ) {
        let Some((tcb, spare)) = self.tcp.get_with_spare(h) else {
            return;
        };
        let end = seq + len;
        tcb.rtx_push().push_reusing(seq, end, now, spare);
        tcb.snd.nxt = end;
        if len < mss_now {
            // Linux tcp_minshall_update.
            tcb.snd_sml = end;
        }
        if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
            tcb.active.recovery.prr_out += 1;
        }
        if ARM_SENT {
            // tcp_output_sent(now, h, 1). The queue held nothing before this segment, so
            // it is the head, sent now: the probe's RTO bound counts from now
            // (`advancing`), as from the head's transmission.
            // The segment is the queue's only one: `packets_out` is 1.
            debug_assert_eq!(tcb.rtx().packets_out(), 1);
            let arm = tcb.arm_after_send_with(now, true, 1);
            debug_assert!(
                !tcb.flags.has(TcbFlags::ACK_NOW) && !tcb.flags.has(TcbFlags::ACK_PENDING),
                "the segment carried the ACK"
            );
            // As `Sock::arm` tests before touching the wheel.
            if arm && tcb.timers.earliest().before(tcb.timers.queued) {
                self.tcp_arm(now, h);
            }
        }
    }

    /// A write (`Stack::tcp_send`) into an empty send buffer that leaves whole at once
    /// in one segment, in one pass over the connection (Linux `tcp_sendmsg` ->
    /// `tcp_push_one` for a write that is the queue's only skb). The conditions of
    /// `tcp_send` (no pending error, a state that sends, no FIN queued, room in the send
    /// buffer, memory under `tcp_mem.low`: Linux `sk_wmem_schedule`'s first test) and of
    /// `tcp_write_xmit_one` (ESTABLISHED or CLOSE-WAIT, nothing in flight, no cork, the
    /// write within one segment and the peer's window) are
    /// tested together on the connection looked up once, with those of the segment's
    /// template path (no urgent mode, a current header template, room in the transmit
    /// queue). The bytes are copied once into the send buffer, which keeps them for
    /// retransmission, and from there once into the frame. `None`: not this case,
    /// nothing done, the general path's.
    #[inline(always)]
    pub(crate) fn tcp_send_one(
        &mut self,
        now: Instant,
        h: TcpHandle,
        data: &[u8],
    ) -> Option<usize> {
        if !self.tcp_template_on || self.tx_queue_full() {
            return None;
        }
        let tx_gen = self.tx_gen;
        let super::Tcp { conns, pool, .. } = &mut self.tcp;
        let tcb = conns.get_mut(h.index, h.generation)?;
        let n = data.len();
        let seq = tcb.snd.nxt;
        let tpl = tcb.active.tx_template;
        let tpl_current = match tpl {
            TxTemplate::V4(t) => t.generation == tx_gen,
            TxTemplate::V6(t) => t.generation == tx_gen,
        };
        if !tpl_current
            || tcb.error.is_some()
            || !matches!(tcb.state, State::Established | State::CloseWait)
            || tcb
                .flags
                .has(TcbFlags::FIN_QUEUED | TcbFlags::FIN_SENT | TcbFlags::CORK | TcbFlags::URG)
            || !tcb.sndbuf.is_empty()
            || seq != tcb.snd.una
            || seq != tcb.data_start()
            || !tcb.rtx().is_empty()
            || tcb.congestion.cwnd == 0
            || n == 0
            || n > CHUNK
            || n > tcb.sndbuf_limit as usize
            || n > tcb.snd.wnd as usize
            || !pool.fast_schedule(1)
        {
            return None;
        }
        let mss_now = bound_to_half_wnd(tcb.mss_now(), tcb.snd.max_wnd, tcb.flags);
        if n > mss_now || !tcb.sndbuf.write_first(pool, data) {
            return None;
        }
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpOutput);
        let out = SegOut {
            seq,
            len: n,
            fin: false,
            push: true,
            gso: 0,
        };
        // Not under memory pressure: `fast_schedule` said so.
        let head = Self::tcp_seg_header(tcb, &mut self.mib, false, None, out, now);
        // The frame's payload copied from the write's own bytes, which the send buffer
        // now holds too (Linux copies the user's bytes once into the skb and transmits a
        // clone; here the frame is its own memory, so the second copy is from the bytes
        // at hand rather than from the chunk). A payload the device may lend
        // (`tcp_tx_lend`) stays the send buffer's.
        let payload = if n < super::tx_lend::LEND_MIN || !self.tx_lend {
            Payload::Bytes(data)
        } else {
            Self::tcp_seg_payload(tcb, h, out)
        };
        let tuple = tcb.tuple;
        self.tcp.push_one_hits += 1;
        // The template was found current above: an IPv4 one is used as it is (as
        // `tcp_transmit_templated` would, without its second look).
        let sent = match tpl {
            TxTemplate::V4(t) => {
                self.tcp.template_hits += 1;
                self.tcp_transmit4(now, &t, &head, payload, 1)
            }
            TxTemplate::V6(_) => self.tcp_seg_transmit(now, h, &tuple, tpl, &head, payload, out),
        };
        if sent {
            self.tcp_sent_one::<true>(now, h, seq, n, mss_now);
        } else {
            // Held back (the device's queue): queued, sent by the output later.
            self.tcp_output_sent(now, h, 0);
        }
        Some(n)
    }

    /// How many full segments of `mss_now` bytes to send now as one super-segment (TSO
    /// inside TCP; Linux `tcp_write_xmit` with `tcp_tso_segs`, `tcp_cwnd_test`,
    /// `tcp_snd_wnd_test`); below 2: none, segments go one by one. The device must take
    /// it: an IPv4 connection on the header template, whose segments fill the MTU (the
    /// device reads the segment size from the headers, see [`Stack::set_gso_max_size`]).
    /// The count is Linux's `tcp_tso_autosize`: about 1 ms of data at the pacing rate
    /// (`sk_pacing_shift` 10: rate / 1024), the rate being `tcp_update_pacing_rate`'s
    /// cwnd x MSS / SRTT scaled by `tcp_pacing_ss_ratio` (200%) in slow start below half
    /// ssthresh, else `tcp_pacing_ca_ratio` (120%); at least `tcp_min_tso_segs` (2); at
    /// most the device's size; then bounded by the room cwnd leaves, the peer's window
    /// and the data unsent (a FIN pending stays for the last segment, sent alone), and by
    /// the retransmission queue's cap of records.
    fn tcp_tso_segs(&self, tcb: &Tcb, mss_now: usize, unsent: usize, wnd_avail: usize) -> usize {
        const MIN_TSO_SEGS: usize = 2;
        let ts = if tcb.flags.has(TcbFlags::TS_OK) {
            12
        } else {
            0
        };
        if tcb.tuple.is_v6()
            || !self.tcp_template_on
            || mss_now == 0
            || mss_now != tcb.mss_now()
            || usize::from(tcb.mss) + 40 + ts != self.mtu
            || tcb.flags.has(TcbFlags::URG)
        {
            return 0;
        }
        let hdr = self.mtu - mss_now;
        let dev_max = (self.gso_max_size.saturating_sub(hdr) / mss_now).min(64);
        let cwnd = tcb.congestion.cwnd;
        let autosize = match tcb.rtt.srtt_ns() {
            Some(srtt) => {
                let ratio: u128 = if cwnd < tcb.congestion.ssthresh / 2 {
                    200
                } else {
                    120
                };
                // Segments per 1/1024 s: ratio% x cwnd / SRTT x (1 s / 1024).
                let segs = ratio * u128::from(cwnd) * 1_000_000_000
                    / (100 * 1024 * u128::from(srtt.max(1)));
                (segs.min(dev_max as u128) as usize).max(MIN_TSO_SEGS)
            }
            None => dev_max,
        };
        let cwnd_room = cwnd.saturating_sub(tcb.in_flight()) as usize;
        let mut segs = autosize
            .min(dev_max)
            .min(cwnd_room)
            .min(wnd_avail / mss_now)
            .min(unsent / mss_now)
            .min(rtx_record_cap(tcb.sndbuf_limit).saturating_sub(tcb.rtx().len()));
        if tcb.flags.has(TcbFlags::FIN_QUEUED) && segs * mss_now == unsent {
            segs = segs.saturating_sub(1);
        }
        segs
    }

    /// The loss probe timer fired (RFC 8985 §7.3; Linux `tcp_send_loss_probe`): send one
    /// new segment if the window allows, else retransmit the last one, so that an ACK
    /// (with SACK) reveals a tail loss without waiting for the RTO; at most one probe
    /// per tail (TCPLossProbes). The RTO is armed from now.
    pub(crate) fn tcp_send_loss_probe(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get(h) else { return };
        let mut sent_probe = false;
        if tcb.active.recovery.tlp_high_seq.is_none() {
            let mut probed = self.tcp_write_xmit(now, h, Xmit::LossProbe) > 0;
            let mut retrans = false;
            if !probed {
                let Some(tcb) = self.tcp.get(h) else { return };
                if let Some(last) = tcb.rtx().iter().last().copied() {
                    let fin = tcb.flags.has(TcbFlags::FIN_SENT) && last.end == tcb.snd.nxt;
                    let len = last.seq_len() - usize::from(fin);
                    // Linux __tcp_retransmit_skb: sent again without the scoreboard's
                    // RETRANS mark.
                    if self.tcp_send_segment(now, h, last.start, len, fin, true, 0) {
                        self.mib.inc(Counter::TcpRetransSegs);
                        probed = true;
                        retrans = true;
                    }
                }
            }
            sent_probe = probed;
            if probed {
                self.mib.inc(Counter::TcpExtTCPLossProbes);
                if let Some(tcb) = self.tcp.get_mut(h) {
                    tcb.active.recovery.tlp_high_seq = Some(tcb.snd.nxt);
                    tcb.active.recovery.tlp_retrans = retrans;
                    tcb.active.recovery.tlp_sent_at = now;
                }
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if !tcb.rtx().is_empty() {
            // Linux tcp_send_loss_probe: after a probe the RTO restarts from now
            // ("icsk_pending = 0" before tcp_rearm_rto); without one (a probe still
            // outstanding, "goto rearm_timer") tcp_rearm_rto keeps the RTO of the earliest
            // segment in flight, tcp_rto_delta_us.
            let from = match tcb.rtx().front() {
                Some(s) if !sent_probe => s.sent_at,
                _ => now,
            };
            tcb.timers.retransmit = Deadline::at((from + tcb.rtt.rto()).max(now));
            tcb.flags.clear(TcbFlags::LOSS_PROBE);
            self.tcp_arm(now, h);
        }
    }

    /// Retransmit the segment `[start, end)` (Linux `tcp_retransmit_skb`), counted as
    /// Linux's `tcp_xmit_retransmit_queue` counts it: TCPFastRetrans in recovery,
    /// TCPSlowStartRetrans after a timeout.
    pub(crate) fn tcp_retransmit(
        &mut self,
        now: Instant,
        h: TcpHandle,
        start: SeqNumber,
        end: SeqNumber,
    ) -> bool {
        self.tcp_retransmit_skb(now, h, start, end, true)
    }

    /// Retransmit `[start, end)`; `by_queue`: sent from the retransmission queue walk (Linux
    /// `tcp_xmit_retransmit_queue`, which counts TCPFastRetrans / TCPSlowStartRetrans),
    /// not by the retransmission timer itself.
    pub(crate) fn tcp_retransmit_skb(
        &mut self,
        now: Instant,
        h: TcpHandle,
        start: SeqNumber,
        end: SeqNumber,
        by_queue: bool,
    ) -> bool {
        let Some(tcb) = self.tcp.get(h) else {
            return false;
        };
        // The SYN is resent as a SYN (or SYN-ACK) also after a shutdown in SYN-RECEIVED
        // (simultaneous open) took the connection to FIN-WAIT-1 before it was acknowledged
        // (Linux retransmits the SYN skb still at the head of its queue), never as a data
        // byte at ISS.
        let syn = start == tcb.snd.iss
            && (matches!(tcb.state, State::SynSent | State::SynReceived)
                || tcb.snd.una == tcb.snd.iss);
        let ok = if syn && tcb.state == State::SynSent {
            self.tcp_send_syn(now, h);
            true
        } else if syn {
            self.tcp_send_syn_ack_tcb(now, h);
            true
        } else {
            let fin =
                tcb.flags.has(TcbFlags::FIN_SENT) && end == tcb.snd.nxt && tcb.fin_seq() + 1 == end;
            let len = (end - start) - usize::from(fin);
            // Linux tcp_fragment: a piece cut from a longer segment for a smaller MSS
            // leaves PSH to the last piece.
            let push = tcb.rtx().push_on_retransmit(start);
            self.tcp_send_segment(now, h, start, len, fin, push, 0)
        };
        if !ok {
            return false;
        }
        self.mib.inc(Counter::TcpRetransSegs);
        let Some(tcb) = self.tcp.get_mut(h) else {
            return true;
        };
        if syn {
            // Linux tcp_retransmit_skb: "if (TCP_SKB_CB(skb)->tcp_flags & TCPHDR_SYN)".
            self.mib.inc(Counter::TcpExtTCPSynRetrans);
        } else if by_queue {
            self.mib.inc(if tcb.ca_state == CaState::Loss {
                Counter::TcpExtTCPSlowStartRetrans
            } else {
                Counter::TcpExtTCPFastRetrans
            });
        }
        if let Some(q) = tcb.rtx_mut() {
            q.mark_retransmitted(start, now);
        }
        let rec = &mut tcb.active.recovery;
        if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
            rec.prr_out += 1;
        }
        // Linux tcp_retransmit_skb: "Save stamp of the first (attempted) retransmit", and
        // count it for a D-SACK undo.
        if rec.retrans_stamp == 0 {
            rec.retrans_stamp = ts_clock(now).max(1);
        }
        rec.undo_retrans = rec.undo_retrans.max(0) + 1;
        rec.retrans_low = rec.retrans_low.min(now);
        // Linux tcp_xmit_retransmit_queue restarts the retransmission timer when it
        // resends the head, so that a timeout waits a full RTO for this copy.
        if start == tcb.snd.una && !matches!(tcb.state, State::SynSent | State::SynReceived) {
            tcb.timers.retransmit = Deadline::at(now + tcb.rtt.rto());
            tcb.flags.clear(TcbFlags::LOSS_PROBE);
            self.tcp_arm(now, h);
        }
        true
    }

    /// Send again the retransmissions found lost (Linux marks them lost and
    /// `tcp_xmit_retransmit_queue` resends them; TCPLostRetransmit). A lost copy is not in
    /// the pipe, so each one sent takes the place it held.
    fn tcp_resend_lost_retrans(&mut self, now: Instant, h: TcpHandle) {
        const BATCH: usize = 16;
        loop {
            let Some(tcb) = self.tcp.get(h) else { return };
            if tcb.in_flight() >= tcb.congestion.cwnd {
                return;
            }
            let mut batch = [(SeqNumber(0), SeqNumber(0)); BATCH];
            let mut n = 0;
            let mut found = 0u32;
            for s in tcb.rtx().iter() {
                if s.flags.contains(SegFlags::RETRANS)
                    && !s.flags.contains(SegFlags::SACKED)
                    && tcb.retrans_is_lost(now, s.sent_at, s.end)
                {
                    found += 1;
                    if n < BATCH {
                        batch[n] = (s.start, s.end);
                        n += 1;
                    }
                }
            }
            let mut sent = 0u32;
            for &(start, end) in &batch[..n] {
                let Some(tcb) = self.tcp.get_mut(h) else {
                    return;
                };
                tcb.active.recovery.lost_retrans = found - sent;
                if tcb.in_flight() >= tcb.congestion.cwnd
                    || !self.tcp_retransmit(now, h, start, end)
                {
                    return;
                }
                sent += 1;
            }
            let Some(tcb) = self.tcp.get_mut(h) else {
                return;
            };
            tcb.active.recovery.lost_retrans = found - sent;
            if n < BATCH {
                return;
            }
        }
    }

    /// If the transmit queue is full (`net.core.txqueuelen`), put the connection on the
    /// waiters' list (once) and return true: its segment is not built, so nothing is
    /// dropped; the data stays unsent in the send buffer (an ACK owed stays owed) until
    /// [`tcp_tx_wake`](Self::tcp_tx_wake) runs its output again. This is the end of the
    /// link's backpressure: a device without room (`ustack_dev::Device::tx_space`)
    /// leaves frames in the queue, a full queue holds the connections back, and a full
    /// send buffer makes `write` return `WouldBlock`. Linux's TCP Small Queues do the same
    /// per socket (`tcp_small_queue_check` sets `TSQ_THROTTLED`, the driver's completion
    /// runs `tcp_tsq_handler`); a qdisc drop there would cost a probe timer of an RTO.
    ///
    /// A connection held back for a pure ACK (`ack_only`) goes to the front of the list:
    /// the peer times its retransmissions by that ACK, and behind a burst of other
    /// connections' data it would come late enough to set off a spurious loss probe.
    #[inline(always)]
    pub(crate) fn tcp_tx_throttle(&mut self, h: TcpHandle, ack_only: bool) -> bool {
        self.tx_queue_full() && self.tcp_tx_hold(h, ack_only)
    }

    /// [`Stack::tcp_tx_throttle`] with the queue full: hold `h` back.
    #[cold]
    #[inline(never)]
    fn tcp_tx_hold(&mut self, h: TcpHandle, ack_only: bool) -> bool {
        if let Some(tcb) = self.tcp.get_mut(h)
            && !tcb.flags.has(TcbFlags::TX_THROTTLED)
        {
            tcb.flags.set(TcbFlags::TX_THROTTLED);
            if ack_only {
                self.tcp.tx_waiters.push_front(h);
            } else {
                self.tcp.tx_waiters.push_back(h);
            }
        }
        true
    }

    /// The transmit queue has room again: run the output of the connections it held
    /// back, oldest first, until it is full again (the rest keep waiting). A connection
    /// still opening sends its SYN; the others run [`tcp_output`](Self::tcp_output), which
    /// sends lost segments, new data and an owed ACK.
    ///
    /// At most once per round of the driver's loop (as Linux runs `tcp_tsq_handler` once
    /// per completion): a connection that refills the queue as fast as it drains is held
    /// to a queue's worth of frames per round instead of spinning. A round ends when the
    /// clock moves or when the driver has drained the queue to empty
    /// ([`Stack::poll_transmit`] gave `None`): a driver on a virtual clock runs several
    /// rounds at one instant, and its held-back connections must not wait for the clock.
    pub(crate) fn tcp_tx_wake(&mut self, now: Instant) {
        let round = (now, self.tx_drains);
        if self.tcp.tx_woken == Some(round) {
            return;
        }
        self.tcp.tx_woken = Some(round);
        while !self.tx_queue_full()
            && let Some(h) = self.tcp.tx_waiters.pop_front()
        {
            let Some(tcb) = self.tcp.get_mut(h) else {
                continue;
            };
            tcb.flags.clear(TcbFlags::TX_THROTTLED);
            if tcb.state == State::SynSent {
                if tcb.snd.una == tcb.snd.iss {
                    self.tcp_send_syn(now, h);
                }
            } else {
                self.tcp_output(now, h);
            }
        }
    }
}

/// Linux `tcp_bound_to_half_wnd` (applied by `tcp_sync_mss`): "When peer uses tiny
/// windows, there is no use in packetizing to sub-MSS pieces for the sake of SWS": against
/// a peer whose largest window is below two segments, segments are half that window (the
/// whole window when it is at most 536 bytes), at least 68 bytes of IP datagram, so that a
/// 1,536-byte window is filled by two 768-byte segments rather than 1,448 + 88 bytes
/// (sender silly window avoidance, RFC 9293 §3.8.6.2.1).
fn bound_to_half_wnd(mss: usize, max_wnd: u32, flags: TcbFlags) -> usize {
    let max_wnd = max_wnd as usize;
    let cutoff = if max_wnd > usize::from(DEFAULT_MSS) {
        max_wnd / 2
    } else {
        max_wnd
    };
    if cutoff > 0 && mss > cutoff {
        let header = tcp::HEADER_LEN + if flags.has(TcbFlags::TS_OK) { 12 } else { 0 };
        cutoff.max(68 - header)
    } else {
        mss
    }
}

impl Tcb {
    /// The sequence number of the first byte in the send buffer: after our SYN.
    pub(crate) fn data_start(&self) -> SeqNumber {
        if self.snd.una == self.snd.iss {
            self.snd.iss + 1
        } else {
            self.snd.una
        }
    }

    /// Our FIN's sequence number (meaningful once FIN is queued).
    pub(crate) fn fin_seq(&self) -> SeqNumber {
        self.data_start() + self.sndbuf.len()
    }
}

/// Records (segments) the retransmission queue of a connection with send buffer `sndbuf`
/// may hold: one per 512 bytes of the buffer, at least 128. Each record costs 24 bytes, so
/// the queue's own memory stays under 5% of the buffer (plus 3 KB), however small the
/// peer makes our segments or however its SACK blocks fall: a record is never split
/// ([`super::scoreboard`]). Full-size segments (and the 536-byte default MSS) never reach the
/// cap, since the buffer bounds the bytes queued. Linux bounds the same thing by charging
/// each skb's truesize to `sk_wmem_queued` and by refusing `tcp_fragment` when the queue
/// is far over `sk_sndbuf` (CVE-2019-11478/11479, counted TCPWqueueTooBig, as here).
pub(crate) fn rtx_record_cap(sndbuf: u32) -> usize {
    const BYTES_PER_RECORD: usize = 512;
    const MIN_RECORDS: usize = 128;
    (sndbuf as usize / BYTES_PER_RECORD).max(MIN_RECORDS)
}

impl Sock<'_> {
    /// Arm a tail loss probe instead of the RTO, if one may be sent (see
    /// [`Tcb::schedule_loss_probe`]); returns whether it was armed.
    pub(crate) fn tcp_schedule_loss_probe(&mut self, now: Instant, advancing: bool) -> bool {
        if !self.tcb.schedule_loss_probe(now, advancing) {
            return false;
        }
        self.arm(now);
        true
    }
}

impl Tcb {
    /// The timer after new data went out: a tail loss probe if one may be sent (Linux
    /// tcp_write_xmit: "Send one loss probe per tail loss episode"), else the RTO if none
    /// runs (RFC 6298 §5.1). Whether it set one (the caller tells the timer queue);
    /// `advancing` as for [`Tcb::schedule_loss_probe`].
    #[inline(always)]
    fn arm_after_send(&mut self, now: Instant, advancing: bool) -> bool {
        let packets_out = self.rtx().packets_out();
        self.arm_after_send_with(now, advancing, packets_out)
    }

    /// [`Tcb::arm_after_send`] with the retransmission queue's `packets_out` known (1 for
    /// a segment sent alone into an empty queue, the one-pass ways), so that the queue is
    /// not asked.
    #[inline(always)]
    fn arm_after_send_with(&mut self, now: Instant, advancing: bool, packets_out: u32) -> bool {
        if self.schedule_loss_probe_with(now, advancing, packets_out) {
            return true;
        }
        if self.timers.retransmit.is_armed() {
            return false;
        }
        self.timers.retransmit = Deadline::at(now + self.rtt.rto());
        self.flags.clear(TcbFlags::LOSS_PROBE);
        true
    }

    /// Set the retransmission timer to a tail loss probe instead of the RTO (RFC 8985
    /// §7.2; Linux `tcp_schedule_loss_probe`): for a SACK connection in Open with data outstanding,
    /// "PTO = 2 * SRTT"; "If FlightSize is equal to one segment ... PTO += WCDelAckT"
    /// (the peer may hold its ACK for a delayed-ACK timeout: Linux adds `TCP_DELACK_MAX`,
    /// 200 ms, the RFC's recommended WCDelAckT), else + 2 ms (Linux `TCP_TIMEOUT_MIN`);
    /// at least [`TLP_MIN_TIMEOUT`]; 1 s without an RTT sample; and never later than the
    /// RTO would fire ("PTO = min(PTO, RTO)"; `advancing`: a full RTO from now, else from
    /// the head's transmission).
    /// The timer queue is left to the caller; returns whether it was set.
    #[inline(always)]
    fn schedule_loss_probe(&mut self, now: Instant, advancing: bool) -> bool {
        let packets_out = self.rtx().packets_out();
        self.schedule_loss_probe_with(now, advancing, packets_out)
    }

    /// [`Tcb::schedule_loss_probe`] with the queue's `packets_out` known.
    #[inline(always)]
    fn schedule_loss_probe_with(
        &mut self,
        now: Instant,
        advancing: bool,
        packets_out: u32,
    ) -> bool {
        let tcb = self;
        if packets_out == 0
            || !tcb.flags.has(TcbFlags::SACK_OK)
            || !matches!(tcb.ca_state, CaState::Open | CaState::Cwr)
            || !matches!(tcb.state, State::Established | State::CloseWait)
        {
            return false;
        }
        // In nanoseconds (`Duration`'s arithmetic costs a hundred instructions a segment);
        // saturating as `Instant + Duration` does.
        const DELACK_MAX_NS: u64 = DELACK_MAX.as_nanos() as u64;
        const TIMEOUT_INIT_NS: u64 = TIMEOUT_INIT.as_nanos() as u64;
        const TLP_MIN_NS: u64 = TLP_MIN_TIMEOUT.as_nanos() as u64;
        let pto = match tcb.rtt.srtt_ns() {
            Some(srtt) if packets_out == 1 => 2 * srtt + DELACK_MAX_NS,
            Some(srtt) => 2 * srtt + 2_000_000,
            None => TIMEOUT_INIT_NS,
        }
        .max(TLP_MIN_NS);
        let from = if advancing {
            now
        } else {
            tcb.rtx().front().map_or(now, |s| s.sent_at)
        };
        let rto_at = from
            .as_nanos()
            .saturating_add(tcb.rtt.rto_us().saturating_mul(1000));
        let at = now.as_nanos().saturating_add(pto).min(rto_at);
        tcb.timers.retransmit = Deadline::at(Instant::from_nanos(at).max(now));
        tcb.flags.set(TcbFlags::LOSS_PROBE);
        true
    }
}

/// Whether [`Stack::tcp_write_xmit`] could send nothing for `tcb` (its first iteration
/// stops at once: not synchronized, FIN sent, or nothing unsent and no FIN queued). With no
/// retransmission found lost again or waiting (the caller's test), [`Stack::tcp_output`]
/// then has at most an ACK to send now or a delayed ACK to arm, which it does itself. The
/// same tests as the full path, in one place.
#[inline]
fn tcp_output_cannot_write(tcb: &Tcb) -> bool {
    !(tcb.state.is_synchronized() || tcb.state == State::SynReceived)
        || tcb.flags.has(TcbFlags::FIN_SENT)
        || (!tcb.flags.has(TcbFlags::FIN_QUEUED)
            && tcb.sndbuf.len() <= tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed form gives the least shift that lets a window of the receive buffer's
    /// size be announced (Linux `tcp_select_initial_window`'s loop), at most 14, for
    /// every buffer size around each shift's boundary and at the extremes.
    #[test]
    fn window_scale_is_the_least_shift_covering_the_buffer() {
        let mut sysctl = Sysctl::default();
        let looped = |space: u64| {
            let mut shift = 0u8;
            while (65_535u64 << shift) < space && shift < 14 {
                shift += 1;
            }
            shift
        };
        let mut sizes = vec![0, 1, u64::MAX / 2, u64::MAX];
        for s in 0..20 {
            let edge = 65_535u64 << s;
            sizes.extend([edge - 1, edge, edge + 1]);
        }
        for space in sizes {
            sysctl.tcp_rmem_max = space;
            sysctl.tcp_rmem_default = 0;
            assert_eq!(rcv_wscale(&sysctl), looped(space), "{space} bytes");
        }
        sysctl.tcp_window_scaling = 0;
        assert_eq!(rcv_wscale(&sysctl), 0);
    }
}
