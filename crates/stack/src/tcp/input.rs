//! TCP input: [RFC 9293 §3.10.7 "SEGMENT ARRIVES"](https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7),
//! step by step, with RFC 5961's protections, RFC 7323's PAWS and RFC 5681/6582/6675's
//! loss detection; Linux's `tcp_v4_rcv`, `tcp_rcv_state_process`, `tcp_validate_incoming`,
//! `tcp_ack` and `tcp_data_queue` in `net/ipv4/tcp_ipv4.c` and `tcp_input.c`. Loss
//! recovery and undo, which `tcp_ack` calls, are in [`super::recovery`].
//!
//! A segment for a connection is processed in two halves. First the connection, as a
//! [`Sock`] (its TCB with the pools, counters, sysctls, timer queue and ready list, as
//! Linux passes `struct sock *sk`), runs RFC 9293's steps on its own state
//! ([`Sock::tcp_rcv_state_process`]); no step looks the connection up, so none can lose
//! it. Then the stack carries out the [`Verdict`] it returns: what reaches past the
//! connection, to the device (an ACK, a RST, the data now sendable) or to the tables
//! (TIME-WAIT, the end of the connection).
//!
//! The common segment is served by fast paths, each falling back to the general path
//! for anything unusual: early demux ([`super::early_demux`], Linux `tcp_v4_early_demux`
//! and `tcp_v6_early_demux`) checks the IP and TCP headers in one pass over the bytes and
//! finds the connection, whose header prediction ([`super::fast_path`], Linux
//! `tcp_rcv_established`'s fast path) processes a predicted ACK or in-order data segment
//! from the header's bytes without the walk below; in the walk, header prediction
//! ([`tcp_header_predicted`]) takes an in-sequence ACK/PSH segment straight to the ACK.

use core::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use ustack_obs::{Counter, DropReason, Instant, Mib};
use ustack_wire::tcp::{Flags, TcpTimestamp};
use ustack_wire::{SeqNumber, tcp};

use super::buffer::{InsertResult, MemAsk};
use super::cc::cubic::HystartExit;
use super::cc::{CaState, CongestionControl, TCP_INIT_CWND};
use super::clock32::{Deadline, Ms32};
use super::isn::ts_clock;
use super::output::DELACK;
use super::recovery::{DUP_THRESH, MAX_REORDERING};
use super::sock::Sock;
use super::tcb::{ActiveState, FourTuple, LossRecovery, Tcb, TcbFlags};
use super::{State, TcpHandle};
use crate::ip::Inbound;
use crate::ip::ipv6::Inbound6;
use crate::socket::{Readiness, SocketKey, sk_stream_is_writeable};
use crate::{Error, Stack};

/// RFC 7323 §5.5: a TS.Recent older than 24 days is invalid for PAWS.
const PAWS_24DAYS_SECS: u32 = 24 * 24 * 3600;

/// What one ACK did, for loss recovery and congestion control (Linux `tcp_ack`'s `flag`
/// bits and counts).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AckEvent {
    /// SND.UNA advanced (Linux `FLAG_SND_UNA_ADVANCED`).
    pub(crate) una_advanced: bool,
    /// Segments cumulatively acknowledged and freed (Linux `pkts_acked`; `FLAG_DATA_ACKED`).
    pub(crate) acked: u32,
    /// Segments newly delivered, cumulatively or by SACK, or (without SACK) by duplicate
    /// ACK: RFC 6937 `DeliveredData` in segments (Linux `delivered`).
    pub(crate) delivered: u32,
    /// The echoed timestamp, on our clock.
    pub(crate) tsecr: Option<u32>,
    /// The highest SACKed sequence before this ACK's SACK blocks (Linux `prior_fack`).
    pub(crate) prior_fack: Option<SeqNumber>,
    /// Segments newly SACKed (Linux `FLAG_DATA_SACKED` when > 0).
    pub(crate) sacked: u32,
    /// The D-SACK block, if the ACK carried a valid one.
    pub(crate) dsack: Option<(SeqNumber, SeqNumber)>,
    /// The retransmission timer is to be set again: TLP or RTO (Linux
    /// `FLAG_SET_XMIT_TIMER`).
    pub(crate) set_xmit_timer: bool,
    /// The ACK freed sent data (Linux `SOCK_QUEUE_SHRUNK`), and whether the writer could
    /// write before it: [`Sock::tcp_check_space`]'s work once the ACK is processed.
    pub(crate) shrunk_writeable: Option<bool>,
}

/// Whether an ACK that advances SND.UNA may take [`Sock::tcp_ack_pure`]: it carries no
/// SACK blocks, and the connection is in the Open state with nothing SACKed, marked lost
/// or retransmitted, no duplicate ACKs counted, no tail loss probe outstanding and no
/// retransmission found lost again. Any of these sends the ACK through the full path.
#[inline]
fn tcp_ack_is_pure(tcb: &Tcb, seg: &tcp::Repr) -> bool {
    seg.sack_ranges[0].is_none() && tcp_ack_state_clean(tcb)
}

/// The sender's side of [`tcp_ack_is_pure`]: the connection is in the Open state with
/// nothing SACKed, marked lost or retransmitted, no duplicate ACKs counted, no tail loss
/// probe outstanding and no retransmission found lost again (also a guard of the receive
/// fast path, [`super::fast_path`]).
#[inline(always)]
pub(super) fn tcp_ack_state_clean(tcb: &Tcb) -> bool {
    tcp_ack_state_clean_in(tcb.ca_state, &tcb.active)
}

/// [`tcp_ack_state_clean`] on the `ActiveState` already in hand (one look at the box:
/// each `tcb.active` is a load and a test of its pointer).
#[inline(always)]
pub(super) fn tcp_ack_state_clean_in(ca_state: CaState, a: &ActiveState) -> bool {
    ca_state == CaState::Open
        && a.dupacks == 0
        && a.recovery.tlp_high_seq.is_none()
        && a.recovery.lost_retrans == 0
        && a.rtx.is_clean()
}

/// The RTT sample of an ACK that moved SND.UNA (Linux `tcp_ack_update_rtt`), in integer
/// microseconds as Linux hands `tcp_rtt_estimator` its `mrtt_us`: from the echoed
/// timestamp `tsecr` (our clock, ms) when timestamps are on (RFC 7323 §4.1, no Karn
/// ambiguity), else `seq_rtt_us`, from a never-retransmitted segment (Karn, RFC 6298 §3).
/// Linux prefers the other way ("Prefer RTT measured from ACK's timing to TS-ECR"), with
/// the oldest newly acked segment's send time; measured on tcp_prop
/// `a_lossy_byte_at_a_time_transfer_completes` (20% loss) that order is slower, 38,990 s
/// against 14,420 s over IPv6: after a lost ACK that segment waited out the loss probe,
/// while the echo is of the probe. The estimate that case inflates comes from echoes that
/// span a retransmission timeout (a lost ACK for the segment that filled a hole, RFC 7323
/// §4.3 (C), then a fully old retransmission answered by a duplicate ACK carrying the same
/// echo), which Linux takes as well. Then the backoff and the retransmission count go.
/// The ACK of the one inline segment ([`Sock::tcp_ack_one`]) takes the send time's
/// sample alone, as Linux: that case cannot arise there.
#[inline]
fn tcp_ack_update_rtt(tcb: &mut Tcb, now: Instant, tsecr: Option<u32>, seq_rtt_us: Option<u32>) {
    let rtt_us = tsecr
        .map(|sent| ts_clock(now).wrapping_sub(sent))
        .filter(|ms| *ms < 600_000)
        .map(|ms| ms * 1000)
        .or(seq_rtt_us);
    if let Some(rtt_us) = rtt_us {
        tcb.rtt.sample_us(rtt_us);
        // Linux tcp_ack_update_rtt: "RFC6298: only reset backoff on valid RTT
        // measurement" (Karn: an ACK of a retransmitted segment keeps it).
        tcb.rtt.reset_backoff();
    }
    // Linux tcp_ack: "icsk->icsk_retransmits = 0" once SND.UNA advances.
    tcb.rtt.clear_retransmits();
}

/// RFC 8985 §6.2 step 2 (Linux `tcp_rack_advance`): RACK.xmit_ts and RACK.end_seq from the
/// newest delivered segment, `sent` (its send time; never retransmitted, so unambiguous),
/// acknowledged up to `ack`.
#[inline]
fn tcp_rack_advance(tcb: &mut Tcb, now: Instant, sent: Instant, ack: SeqNumber) {
    rack_advance(&mut tcb.active.recovery, now, sent, ack);
}

/// [`tcp_rack_advance`] on the recovery state in hand.
#[inline(always)]
fn rack_advance(rec: &mut LossRecovery, now: Instant, sent: Instant, ack: SeqNumber) {
    let sent = sent.min(now);
    if sent >= rec.rack_xmit_ts {
        rec.rack_xmit_ts = sent;
        rec.rack_end_seq = ack;
    }
}

/// Microseconds from `sent` to `now` (0 if `sent` is later), saturating at `u32::MAX`
/// (about 71 minutes): an RTT sample as Linux's `tcp_stamp_us_delta` gives it.
#[inline]
fn rtt_us_since(now: Instant, sent: Instant) -> u32 {
    let us = now.as_nanos().saturating_sub(sent.as_nanos()) / 1000;
    u32::try_from(us).unwrap_or(u32::MAX)
}

/// The sequence space a segment occupies: data plus one for SYN and one for FIN.
pub(crate) fn seg_len(seg: &tcp::Repr) -> usize {
    seg.payload.len()
        + usize::from(seg.flags.contains(Flags::SYN))
        + usize::from(seg.flags.contains(Flags::FIN))
}

/// What the stack does once a connection has processed a segment: the part that reaches
/// past the connection (Linux's `tcp_rcv_state_process` does these itself, through `sk`;
/// its return value asks its caller for the RST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Send what the segment made sendable: data, and the ACK it calls for (Linux
    /// `tcp_data_snd_check`, `tcp_ack_snd_check`).
    Output,
    /// Discard the segment, counted with the reason.
    Drop(DropReason),
    /// Discard it and answer with an ACK (RFC 9293 §3.10.7.4 "an acknowledgment should be
    /// sent in reply"; or a challenge ACK, RFC 5961, already counted).
    DropAndAck(DropReason),
    /// Discard it and answer with a RST (RFC 9293 §3.10.7.1 form, from the segment).
    DropAndReset(FourTuple, DropReason),
    /// The connection is over, with the error to report (Linux `tcp_done`).
    Done(Option<Error>),
    /// Answer with a RST, and the connection is over with `error`.
    ResetAndDone(FourTuple, Error),
    /// Enter TIME-WAIT; `ack_fin`: acknowledge the FIN that led there first.
    TimeWait { ack_fin: bool },
    /// A simultaneous open: send our SYN-ACK (RFC 9293 §3.10.7.3).
    SynAck,
}

impl Stack {
    /// Linux `tcp_v4_rcv`: validate, find the owner, dispatch.
    pub(crate) fn tcp_input(&mut self, now: Instant, inbound: &Inbound) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::Demux);
        // Linux counts InSegs before the checksum, so bad segments are in it too.
        self.mib.inc(Counter::TcpInSegs);
        if inbound.broadcast {
            // TCP is unicast only (RFC 9293 §3.9.1.3 "a TCP implementation MUST ... silently
            // discard" segments to broadcast or multicast addresses; Linux pkt_type check).
            return self.mib.drop(DropReason::TcpNoSocket);
        }
        let (src, dst) = (inbound.repr.src_addr.into(), inbound.repr.dst_addr.into());
        let Ok(packet) = tcp::Packet::new_checked(inbound.payload) else {
            return self.mib.drop(DropReason::TcpHdr);
        };
        if !self.l4_csum_trusted() && !packet.verify_checksum(&src, &dst) {
            return self.mib.drop(DropReason::TcpCsum);
        }
        let seg = match tcp::Repr::parse(&packet, &src, &dst, false) {
            Ok(seg) => seg,
            Err(_) => return self.mib.drop(DropReason::TcpHdr),
        };
        let tuple = FourTuple {
            local: SocketAddrV4::new(inbound.repr.dst_addr, seg.dst_port),
            remote: SocketAddrV4::new(inbound.repr.src_addr, seg.src_port),
        };
        self.tcp_dispatch(now, tuple, &seg);
    }

    /// Linux `tcp_v6_rcv`: the same as [`Stack::tcp_input`] over IPv6. The checksum over
    /// the IPv6 pseudo-header is checked (RFC 8200 §8.1) unless
    /// [`crate::Config::checksum_offload`] says the link's two ends skip it, as over IPv4. The tuple holds the addresses' ids (see [`super::intern6`]): a
    /// remote address not interned has no connection, request or TIME-WAIT record, and
    /// is interned only if a listener or a RST needs the tuple.
    pub(crate) fn tcp6_input(&mut self, now: Instant, inbound: &Inbound6) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::Demux);
        self.mib.inc(Counter::TcpInSegs);
        if inbound.multicast || inbound.dst.is_multicast() {
            return self.mib.drop(DropReason::TcpNoSocket);
        }
        let (src, dst) = (IpAddr::V6(inbound.src), IpAddr::V6(inbound.dst));
        let Ok(packet) = tcp::Packet::new_checked(inbound.payload) else {
            return self.mib.drop(DropReason::TcpHdr);
        };
        if !self.l4_csum_trusted() && !packet.verify_checksum(&src, &dst) {
            return self.mib.drop(DropReason::TcpCsum);
        }
        let seg = match tcp::Repr::parse(&packet, &src, &dst, false) {
            Ok(seg) => seg,
            Err(_) => return self.mib.drop(DropReason::TcpHdr),
        };
        let local = SocketAddrV6::new(inbound.dst, seg.dst_port, 0, 0);
        let remote = SocketAddrV6::new(inbound.src, seg.src_port, 0, 0);
        let tuple = match self.tcp.intern6.find(local, remote) {
            Some(t) => t,
            // Nothing holds this pair: a listener's, or a RST's (RFC 9293 §3.10.7.1).
            None if self.tcp.listeners.lookup(SocketAddr::V6(local)).is_some()
                || !seg.flags.contains(Flags::RST) =>
            {
                self.tcp.tuple6(local, remote)
            }
            None => return self.mib.drop(DropReason::TcpNoSocket),
        };
        self.tcp_dispatch(now, tuple, &seg);
    }

    /// Find the owner of a checked segment of `tuple` and hand it over.
    #[inline]
    fn tcp_dispatch(&mut self, now: Instant, tuple: FourTuple, seg: &tcp::Repr) {
        // One hash of the tuple serves every 4-tuple table (see `tuple_hash`).
        let hash = self.tcp.ehash.hash(&tuple);
        if let Some(index) = self.tcp.lookup(hash, &tuple) {
            let h = self.tcp.handle_of(index);
            return self.conn_input_with(now, h, seg, Some(hash));
        }
        // The record or request found is handed over, not looked up again.
        if let Some(tw) = self.tcp.timewait.get(hash, &tuple).copied() {
            return self.timewait_input(now, tuple, hash, tw, seg);
        }
        if let Some(req) = self.tcp.requests.get(hash, &tuple).copied() {
            return self.request_input(now, tuple, hash, req, seg);
        }
        if let Some(listener) = self.tcp_listener_for(&tuple) {
            return self.listen_input(now, listener, tuple, hash, seg);
        }
        // RFC 9293 §3.10.7.1 CLOSED: "An incoming segment containing a RST is discarded. An
        // incoming segment not containing a RST causes a RST to be sent in response."
        self.mib.drop(DropReason::TcpNoSocket);
        if !seg.flags.contains(Flags::RST) {
            self.reset_for(now, tuple, seg);
        }
    }

    /// The RST answering `seg` (RFC 9293 §3.10.7.1).
    pub(crate) fn reset_for(&mut self, now: Instant, tuple: FourTuple, seg: &tcp::Repr) {
        if seg.flags.contains(Flags::ACK) {
            self.tcp_send_reset(now, tuple, seg.ack_number, None);
        } else {
            self.tcp_send_reset(
                now,
                tuple,
                SeqNumber(0),
                Some(seg.seq_number + seg_len(seg)),
            );
        }
    }

    /// A segment for connection `h`: the connection processes it, then the stack carries
    /// out the verdict (see the module docs).
    pub(crate) fn conn_input(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        self.conn_input_with(now, h, seg, None);
    }

    /// [`Stack::conn_input`] with the hash of the connection's tuple when the caller has
    /// it (`known`, the segment's from the table lookup): a connection that ends here
    /// (CLOSED, TIME-WAIT) leaves the established table under it without a second hash.
    #[inline]
    pub(crate) fn conn_input_with(
        &mut self,
        now: Instant,
        h: TcpHandle,
        seg: &tcp::Repr,
        known: Option<super::tuple_hash::TupleHash>,
    ) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpInput);
        // The handle comes from the connection table, so it is live.
        let Some(mut sk) = self.tcp_sock(h) else {
            return;
        };
        let verdict = sk.tcp_rcv_state_process(now, seg);
        match verdict {
            Verdict::Output => self.tcp_output(now, h),
            Verdict::Drop(reason) => self.mib.drop(reason),
            Verdict::DropAndAck(reason) => {
                self.tcp_send_ack(now, h);
                self.mib.drop(reason);
            }
            Verdict::DropAndReset(tuple, reason) => {
                self.reset_for(now, tuple, seg);
                self.mib.drop(reason);
            }
            Verdict::Done(error) => self.tcp_done_with(h, error, known),
            Verdict::ResetAndDone(tuple, error) => {
                self.reset_for(now, tuple, seg);
                self.tcp_done_with(h, Some(error), known);
            }
            Verdict::TimeWait { ack_fin } => {
                if ack_fin {
                    self.tcp_send_ack(now, h);
                }
                self.tcp_time_wait(now, h, known);
            }
            Verdict::SynAck => self.tcp_send_syn_ack_tcb(now, h),
        }
        self.tcp_note_idle(now, h);
        // An ACK, a prune or a reset may have freed buffer memory.
        self.tcp_mem_freed(now);
    }

    /// The connection is over (Linux `tcp_done`): an orphan is forgotten; otherwise the
    /// user keeps a CLOSED socket with the error to report and any unread data.
    pub(crate) fn tcp_done(&mut self, h: TcpHandle, error: Option<Error>) {
        self.tcp_done_with(h, error, None);
    }

    /// [`Stack::tcp_done`] with the tuple's hash when the caller has it already (`known`:
    /// TIME-WAIT files its record under the same hash).
    pub(crate) fn tcp_done_with(
        &mut self,
        h: TcpHandle,
        error: Option<Error>,
        known: Option<super::tuple_hash::TupleHash>,
    ) {
        // Linux tcp_write_err: "sk->sk_err = READ_ONCE(sk->sk_err_soft) ? : ETIMEDOUT;":
        // a connection that times out after a soft ICMP error reports that error.
        let soft = match self.tcp.get(h) {
            Some(t) if error == Some(Error::TimedOut) && t.flags.has(TcbFlags::ERR_SOFT) => {
                self.tcp.xopts(h).err_soft
            }
            _ => None,
        };
        let Some(mut sk) = self.tcp_sock(h) else {
            return;
        };
        if matches!(sk.tcb.state, State::SynSent | State::SynReceived) {
            sk.mib.inc(Counter::TcpAttemptFails);
        }
        sk.set_state(State::Closed);
        if sk.tcb.flags.has(TcbFlags::ORPHAN) {
            self.tcp_destroy_with(h, known);
            return;
        }
        let tcb = &mut *sk.tcb;
        tcb.error = soft.or(error);
        tcb.sndbuf.clear(sk.pool);
        if let Some(q) = tcb.rtx_mut() {
            q.clear_reusing(sk.spare_board);
        }
        tcb.timers = super::tcb::Timers::NONE;
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        // Linux tcp_done -> tcp_clear_xmit_timers: the wheel's entry goes too.
        self.tcp.timers.cancel(h.index);
        self.tcp.unhash(h, known);
    }
}

impl Sock<'_> {
    /// RFC 9293 §3.10.7.3-4 for a connection (Linux `tcp_rcv_state_process`): the
    /// sequence, RST and SYN checks, then the ACK, the segment text and the FIN, in the
    /// RFC's order.
    pub(crate) fn tcp_rcv_state_process(&mut self, now: Instant, seg: &tcp::Repr) -> Verdict {
        match self.tcb.state {
            State::SynSent => return self.tcp_rcv_synsent_state_process(now, seg),
            State::Closed | State::Listen | State::TimeWait => {
                return Verdict::Drop(DropReason::TcpClose);
            }
            _ => {}
        }
        self.tcb.last_activity = Ms32::floor(now);
        let f = seg.flags;
        if tcp_header_predicted(self.tcb, seg) {
            // Linux tcp_rcv_established's fast path ("header prediction"): the segment
            // passes every check of the first five steps, so go straight to the ACK.
            // Linux counts the data segments taken this way (TCPHPHits).
            if !seg.payload.is_empty() {
                self.mib.inc(Counter::TcpExtTCPHPHits);
            }
            self.tcp_ack(now, seg, false);
        } else if let Some(verdict) = self.tcp_rcv_slow_checks(now, seg) {
            return verdict;
        }

        // ---- sixth, check the URG bit ------------------------------------------------
        // Urgent data is not supported (RFC 6093 §6 advises new applications not to use
        // it); the urgent pointer is ignored and the data delivered in line.

        // ---- seventh, process the segment text --------------------------------------
        let tcb = &mut *self.tcb;
        if !seg.payload.is_empty() {
            if !tcb.state.can_receive() {
                // After the peer's FIN: "This should not occur ... Ignore the segment text."
                self.mib.drop(DropReason::TcpOldData);
            } else if tcb.flags.has(TcbFlags::RCV_SHUTDOWN)
                && matches!(tcb.state, State::FinWait1 | State::FinWait2)
                && (seg.seq_number + seg.payload.len()).after(tcb.rcv.nxt)
            {
                // Linux tcp_rcv_state_process: "RFC 793 says to queue data in these
                // states, RFC 1122 says we MUST send a reset. BSD 4.4 also does reset."
                // New data for a socket that can no longer be read resets it
                // (TCPAbortOnData), the RST answering the segment (Linux
                // tcp_v4_send_reset: <SEQ=SEG.ACK><CTL=RST>, RFC 9293 §3.10.7.1), so that
                // a peer that has not seen our FIN takes it (RFC 5961 §3.2).
                self.mib.inc(Counter::TcpExtTCPAbortOnData);
                return Verdict::ResetAndDone(tcb.tuple, Error::ConnectionReset);
            } else {
                self.tcp_data_queue(now, seg.seq_number, seg.payload, seg.timestamp);
            }
        }

        // ---- eighth, check the FIN bit ------------------------------------------------
        let tcb = &mut *self.tcb;
        // A FIN queued beyond a hole counts once the hole has filled (Linux tcp_ofo_queue
        // calls tcp_fin when it reaches the FIN's skb).
        let fin_end = seg.seq_number + seg.payload.len();
        let queued_fin = tcb.rcvbuf.take_fin();
        if (queued_fin || f.contains(Flags::FIN) && fin_end == tcb.rcv.nxt)
            && !tcb.state.fin_received()
        {
            // "advance RCV.NXT over the FIN, and send an acknowledgment for the FIN".
            tcb.rcv.nxt += 1;
            let fin_acked = tcb.flags.has(TcbFlags::FIN_SENT) && tcb.snd.una == tcb.snd.nxt;
            match tcb.state {
                State::SynReceived | State::Established => {
                    self.tcp_fin_delay_ack(now);
                    self.set_state(State::CloseWait);
                }
                State::FinWait1 if fin_acked => return Verdict::TimeWait { ack_fin: true },
                State::FinWait1 => {
                    tcb.flags.set(TcbFlags::ACK_NOW);
                    self.set_state(State::Closing);
                }
                State::FinWait2 => return Verdict::TimeWait { ack_fin: true },
                _ => tcb.flags.set(TcbFlags::ACK_NOW),
            }
        } else if f.contains(Flags::FIN) {
            // A FIN ahead of missing data: Linux queues it with its segment
            // (tcp_data_queue_ofo) and processes it when the hole fills, so the peer need
            // not retransmit it. Acknowledge what we have.
            if tcb.state.can_receive() && fin_end.after(tcb.rcv.nxt) {
                let data_from = if seg.seq_number.after(tcb.rcv.nxt) {
                    seg.seq_number - tcb.rcv.nxt
                } else {
                    0
                };
                let at = fin_end - tcb.rcv.nxt;
                tcb.rcvbuf.queue_fin(at, data_from);
            }
            tcb.flags.set(TcbFlags::ACK_NOW);
        }
        Verdict::Output
    }

    /// The first five steps of RFC 9293 §3.10.7.4 for a segment that header prediction
    /// did not pass ([`tcp_header_predicted`]): validation, the ACK field's tests, the ACK
    /// and its state changes. `Some` holds what to do with a segment that goes no further.
    fn tcp_rcv_slow_checks(&mut self, now: Instant, seg: &tcp::Repr) -> Option<Verdict> {
        let f = seg.flags;
        // First to fourth: sequence number, RST, security, SYN.
        if let Err(verdict) = self.tcp_validate_incoming(now, seg) {
            return Some(verdict);
        }

        // ---- fifth, check the ACK field --------------------------------------------
        // "if the ACK bit is off, drop the segment and return".
        if !f.contains(Flags::ACK) {
            return Some(Verdict::Drop(DropReason::TcpFlags));
        }
        let tcb = &mut *self.tcb;
        if tcb.state == State::SynReceived {
            // "If SND.UNA < SEG.ACK =< SND.NXT, then enter ESTABLISHED state ... If the
            // segment acknowledgment is not acceptable, form a reset segment".
            if seg.ack_number.after(tcb.snd.una) && !seg.ack_number.after(tcb.snd.nxt) {
                tcb.snd.wnd = u32::from(seg.window_len) << tcb.snd_wscale;
                tcb.snd.wl1 = seg.seq_number;
                tcb.snd.wl2 = seg.ack_number;
                // RFC 6298 §5.7, Linux tcp_init_transfer (see the SYN-SENT case).
                tcb.rtt.use_fallback_rto();
                tcp_init_buffer_space(tcb, self.sysctl.tcp_wmem_max);
                if f.contains(Flags::SYN) {
                    // The simultaneous open's SYN-ACK (let through above) repeats a
                    // sequence number already received: Linux tcp_data_queue acknowledges
                    // such a retransmission at once ("A retransmit ... Force an immediate
                    // ack").
                    tcb.flags.set(TcbFlags::ACK_NOW);
                }
                self.set_state(State::Established);
            } else {
                return Some(Verdict::DropAndReset(
                    tcb.tuple,
                    DropReason::TcpAckUnsentData,
                ));
            }
        }
        let tcb = &mut *self.tcb;
        // RFC 5961 §5.2: acceptable iff (SND.UNA - MAX.SND.WND) =< SEG.ACK =< SND.NXT;
        // otherwise "the ACK value is considered ... invalid ... discard ... send an ACK".
        if seg.ack_number.after(tcb.snd.nxt) {
            return Some(Verdict::DropAndAck(DropReason::TcpAckUnsentData));
        }
        if seg
            .ack_number
            .before(tcb.snd.una - (tcb.snd.max_wnd as usize).min(1 << 30))
        {
            return Some(Verdict::DropAndAck(DropReason::TcpTooOldAck));
        }
        self.tcp_ack(now, seg, true);
        let tcb = &mut *self.tcb;
        let fin_acked = tcb.flags.has(TcbFlags::FIN_SENT) && tcb.snd.una == tcb.snd.nxt;
        match tcb.state {
            // "In addition to the processing for the ESTABLISHED state, if the FIN segment
            // is now acknowledged, then enter FIN-WAIT-2".
            State::FinWait1 if fin_acked => {
                let orphan = tcb.flags.has(TcbFlags::ORPHAN);
                self.set_state(State::FinWait2);
                if orphan {
                    // An orphan does not wait forever for the peer's FIN (tcp_fin_timeout).
                    let timeout = Duration::from_secs(self.sysctl.tcp_fin_timeout);
                    self.tcb.timers.keepalive = Deadline::at(now + timeout);
                    self.arm(now);
                }
            }
            // "if the ACK acknowledges our FIN, then enter the TIME-WAIT state".
            State::Closing if fin_acked => return Some(Verdict::TimeWait { ack_fin: false }),
            // "The only thing that can arrive in this state is an acknowledgment of our
            // FIN. If our FIN is now acknowledged, delete the TCB, enter the CLOSED state".
            State::LastAck if fin_acked => return Some(Verdict::Done(None)),
            _ => {}
        }

        None
    }

    /// The first four steps of RFC 9293 §3.10.7.4 (Linux `tcp_validate_incoming`): PAWS
    /// and the sequence number, the RST bit, security, the SYN bit. `Err` holds what to
    /// do with a segment that goes no further.
    fn tcp_validate_incoming(&mut self, now: Instant, seg: &tcp::Repr) -> Result<(), Verdict> {
        let tcb = &mut *self.tcb;
        let f = seg.flags;
        let len = seg_len(seg);

        // ---- first, check the sequence number --------------------------------------
        // RFC 7323 §5.3 PAWS, before the window test: "If SEG.TSval < TS.Recent and if
        // TS.Recent is valid, then treat the arriving segment as not acceptable".
        let paws_reject = tcb.flags.has(TcbFlags::TS_OK)
            && !f.contains(Flags::RST)
            && seg
                .timestamp
                .is_some_and(|ts| (ts.tsval.wrapping_sub(tcb.ts_recent) as i32) < 0)
            && ((now.as_millis() / 1000) as u32).wrapping_sub(tcb.ts_recent_stamp)
                < PAWS_24DAYS_SECS;
        if paws_reject {
            // Linux tcp_validate_incoming: "if (unlikely(th->syn)) goto syn_challenge;".
            if f.contains(Flags::SYN) {
                return Err(self.tcp_challenge_ack(now, DropReason::TcpInvalidSyn));
            }
            return Err(self.tcp_oow_dupack(
                now,
                len,
                Counter::TcpExtTCPACKSkippedPAWS,
                DropReason::TcpPaws,
            ));
        }
        // Acceptability (RFC 9293 §3.10.7.4 table), in Linux's `tcp_sequence` form: the
        // segment must not end before RCV.WUP (what we last acknowledged) nor start after
        // the right edge of the window we advertised. A zero-length segment at RCV.NXT is
        // always acceptable.
        let wnd_end = tcb.rcv.wup + tcb.rcv.wnd as usize;
        let end = seg.seq_number + len;
        let acceptable =
            !end.before(tcb.rcv.wup) && !seg.seq_number.after(wnd_end.max(tcb.rcv.nxt));
        if !acceptable {
            let reason = if end.before(tcb.rcv.wup) {
                DropReason::TcpOldData
            } else {
                DropReason::TcpInvalidSequence
            };
            // A SYN out of window is a SYN all the same (RFC 5961 §4.2: "irrespective of
            // the sequence number"): Linux tcp_validate_incoming "if (th->syn) goto
            // syn_challenge;" counts TCPSYNChallenge and sends a challenge ACK.
            if f.contains(Flags::SYN) {
                return Err(self.tcp_challenge_ack(now, DropReason::TcpInvalidSyn));
            }
            // "If an incoming segment is not acceptable, an acknowledgment should be sent
            // in reply (unless the RST bit is set, if so drop the segment and return)".
            if f.contains(Flags::RST) {
                return Err(Verdict::Drop(reason));
            }
            return Err(self.tcp_oow_dupack(now, len, Counter::TcpExtTCPACKSkippedSeq, reason));
        }

        // ---- second, check the RST bit (RFC 5961 §3.2) -----------------------------
        if f.contains(Flags::RST) {
            // "If the RST bit is set and the sequence number exactly matches the next
            // expected sequence value, the TCP endpoint MUST reset the connection ...
            // Otherwise ... MUST send an ACK (challenge ACK)".
            if seg.seq_number == tcb.rcv.nxt {
                return Err(Verdict::Done(match tcb.state {
                    State::SynReceived => Some(Error::ConnectionRefused),
                    State::Closing | State::LastAck => None,
                    // Linux tcp_reset: "case TCP_CLOSE_WAIT: sk_err = EPIPE".
                    State::CloseWait => Some(Error::BrokenPipe),
                    _ => Some(Error::ConnectionReset),
                }));
            }
            return Err(self.tcp_challenge_ack(now, DropReason::TcpReset));
        }

        // ---- third, security (no IP security options: nothing to check) --------------

        // ---- fourth, check the SYN bit (RFC 5961 §4) -------------------------------
        // "If the SYN bit is set, irrespective of the sequence number, TCP endpoints MUST
        // send a 'challenge ACK' to the remote peer". Except, in a simultaneous open, the
        // peer's SYN-ACK that repeats its SYN and acknowledges ours (Linux
        // tcp_validate_incoming: "if (sk->sk_state == TCP_SYN_RECV && sk->sk_socket &&
        // th->ack && seq + 1 == end_seq && seq + 1 == tp->rcv_nxt && ack_seq ==
        // tp->snd_nxt) goto pass;"): it completes the handshake.
        // (Tested only for a SYN: the common segment pays one flag test.)
        if !f.contains(Flags::SYN) {
            return Ok(());
        }
        let tcb = &*self.tcb;
        let simultaneous_synack = tcb.state == State::SynReceived
            && f.contains(Flags::ACK)
            && len == 1
            && seg.seq_number + 1 == tcb.rcv.nxt
            && seg.ack_number == tcb.snd.nxt;
        if !simultaneous_synack {
            return Err(self.tcp_challenge_ack(now, DropReason::TcpInvalidSyn));
        }
        Ok(())
    }

    /// Drop an unacceptable (out-of-window or PAWS-failing) segment of sequence length
    /// `len` (no SYN) with `reason`, answering with a duplicate ACK unless one went out
    /// less than `tcp_invalid_ratelimit` ago, which counts `skipped` instead (Linux
    /// `tcp_oow_rate_limited` on `last_oow_ack_time`, shared with challenge ACKs). As
    /// there, segments carrying data are always answered: "Data packets without SYNs are
    /// not likely part of an ACK loop" (a lost ACK must not stall the peer's retransmission).
    fn tcp_oow_dupack(
        &mut self,
        now: Instant,
        len: usize,
        skipped: Counter,
        reason: DropReason,
    ) -> Verdict {
        if len != 0 {
            return Verdict::DropAndAck(reason);
        }
        let ratelimit = self.sysctl.tcp_invalid_ratelimit;
        if super::timer::oow_rate_limited(&mut self.tcb.last_oow_ack, now, ratelimit) {
            self.mib.inc(skipped);
            return Verdict::Drop(reason);
        }
        Verdict::DropAndAck(reason)
    }

    /// Drop the segment with `reason` and answer with a challenge ACK if the limits allow
    /// one (Linux `tcp_send_challenge_ack`; see [`Sock::challenge_ack_allowed`]).
    fn tcp_challenge_ack(&mut self, now: Instant, reason: DropReason) -> Verdict {
        if self.challenge_ack_allowed(now) {
            Verdict::DropAndAck(reason)
        } else {
            Verdict::Drop(reason)
        }
    }

    /// RFC 9293 §3.10.7.3 SYN-SENT (Linux `tcp_rcv_synsent_state_process`).
    fn tcp_rcv_synsent_state_process(&mut self, now: Instant, seg: &tcp::Repr) -> Verdict {
        let tcb = &mut *self.tcb;
        let f = seg.flags;
        // "first, check the ACK bit: If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset
        // (unless the RST bit is set, if so drop the segment and return)".
        let ack_ok = f.contains(Flags::ACK)
            && seg.ack_number.after(tcb.snd.iss)
            && !seg.ack_number.after(tcb.snd.nxt);
        if f.contains(Flags::ACK) && !ack_ok {
            // Linux tcp_rcv_synsent_state_process: "Previous FIN/ACK or RST/ACK might be
            // ignored": the peer may hold an old connection on these ports, so before any
            // retransmission the SYN's timer is cut to TCP_TIMEOUT_MIN (2 ms) and the SYN
            // goes again at once (after the RST below clears the old one).
            if tcb.rtt.retransmits() == 0 {
                tcb.timers.retransmit = Deadline::at(now + Duration::from_millis(2));
                self.arm(now);
            }
            let tcb = &*self.tcb;
            if !f.contains(Flags::RST) {
                return Verdict::DropAndReset(tcb.tuple, DropReason::TcpAckUnsentData);
            }
            return Verdict::Drop(DropReason::TcpAckUnsentData);
        }
        // "second, check the RST bit: If the ACK was acceptable, then signal to the user
        // 'error: connection reset', drop the segment, enter CLOSED state".
        if f.contains(Flags::RST) {
            if ack_ok {
                return Verdict::Done(Some(Error::ConnectionRefused));
            }
            return Verdict::Drop(DropReason::TcpReset);
        }
        // "fourth, check the SYN bit".
        if !f.contains(Flags::SYN) {
            return Verdict::Drop(DropReason::TcpFlags);
        }
        tcb.rcv.irs = seg.seq_number;
        tcb.rcv.nxt = seg.seq_number + 1;
        tcb.rcv.wup = tcb.rcv.nxt;
        // RCV.WND: what our SYN offered (unscaled there, RFC 7323 §2.2).
        tcb.rcv.wnd = super::output::initial_rcv_window(self.sysctl, tcb.adv_mss);
        Stack::apply_syn_options(
            self.sysctl,
            tcb,
            seg.max_seg_size
                .unwrap_or(super::output::default_mss(tcb.tuple.is_v6())),
            seg.window_scale,
            seg.sack_permitted,
            seg.timestamp.map(|ts| ts.tsval),
            now,
        );
        // RFC 7323 §2.2: "The window field in a SYN (i.e., a <SYN> or <SYN,ACK>) segment
        // itself is never scaled."
        tcb.snd.wnd = u32::from(seg.window_len);
        tcb.snd.max_wnd = tcb.snd.wnd;
        tcb.snd.wl1 = seg.seq_number;
        tcb.snd.wl2 = seg.ack_number;
        if !ack_ok {
            // Simultaneous open: "Otherwise, enter SYN-RECEIVED, form a SYN,ACK segment".
            self.set_state(State::SynReceived);
            return Verdict::SynAck;
        }
        // "If SND.UNA > ISS (our SYN has been ACKed), change the connection state to
        // ESTABLISHED, form an ACK segment ... and send it."
        let mut ev = AckEvent::default();
        self.tcp_clean_rtx_queue::<false>(now, seg.ack_number, &mut ev);
        // RFC 6298 §5.7 (Linux tcp_init_transfer -> tcp_init_metrics): no RTT sample
        // from the handshake (the SYN was retransmitted: Karn) means RTO 3 s.
        self.tcb.rtt.use_fallback_rto();
        tcp_init_buffer_space(self.tcb, self.sysctl.tcp_wmem_max);
        self.tcp_set_xmit_timer(now);
        self.set_state(State::Established);
        self.tcb.flags.set(TcbFlags::ACK_NOW);
        Verdict::Output
    }
    /// Process the acknowledgment of a segment (Linux `tcp_ack`): window update, SACK
    /// scoreboard, newly acknowledged data, then loss recovery (`tcp_fastretrans_alert`)
    /// and congestion control (`tcp_cong_control`), in Linux's order. `slowpath`: the
    /// segment came through the slow path's checks, not header prediction (Linux
    /// `FLAG_SLOWPATH`), which decides how the ACK is counted.
    pub(crate) fn tcp_ack(&mut self, now: Instant, seg: &tcp::Repr, slowpath: bool) {
        let tcb = &mut *self.tcb;
        let advances = seg.ack_number.after(tcb.snd.una);
        // Linux tcp_ack: "if (!(flag & FLAG_SLOWPATH) && after(ack, prior_snd_una))" the
        // ACK is header prediction's, counted TCPHPAcks; otherwise one that occupies no
        // sequence space (no data, SYN or FIN: "ack_seq == end_seq") is TCPPureAcks.
        if advances && !slowpath {
            self.mib.inc(Counter::TcpExtTCPHPAcks);
        } else if seg_len(seg) == 0 {
            self.mib.inc(Counter::TcpExtTCPPureAcks);
        }
        // RFC 9293 §3.10.7.4: "If SND.UNA =< SEG.ACK =< SND.NXT, the send window should be
        // updated. If (SND.WL1 < SEG.SEQ or (SND.WL1 = SEG.SEQ and SND.WL2 =< SEG.ACK)),
        // set SND.WND <- SEG.WND, set SND.WL1 <- SEG.SEQ, and set SND.WL2 <- SEG.ACK."
        // Linux narrows the last case (tcp_may_update_window: "after(ack, tp->snd_una) ||
        // after(ack_seq, tp->snd_wl1) || (ack_seq == tp->snd_wl1 && (nwin > tp->snd_wnd ||
        // !nwin))"): a segment that acknowledges nothing new may grow or close the window,
        // not shrink it (a reordered older ACK would shrink it wrongly).
        let window = u32::from(seg.window_len) << tcb.snd_wscale;
        let window_changed = window != tcb.snd.wnd;
        if seg.ack_number.after(tcb.snd.una)
            || tcb.snd.wl1.before(seg.seq_number)
            || (tcb.snd.wl1 == seg.seq_number
                && !seg.ack_number.before(tcb.snd.wl2)
                && (window > tcb.snd.wnd || window == 0))
        {
            tcb.snd.wnd = window;
            tcb.snd.wl1 = seg.seq_number;
            tcb.snd.wl2 = seg.ack_number;
            tcb.snd.max_wnd = tcb.snd.max_wnd.max(window);
        }
        // Linux tcp_ack: "icsk->icsk_probes_out = 0" on every acceptable ACK: probes
        // that are answered never time out (RFC 9293 §3.8.6.1: "MUST NOT close the
        // connection as long as the receiving TCP continues to send acknowledgments").
        tcb.probes = 0;
        // Linux tcp_ack: "We passed data and got it acked, remove any soft error log.
        // Something worked..." (sk_err_soft = 0).
        tcb.flags.clear(TcbFlags::ERR_SOFT);
        // Linux tcp_ack_probe: "If this ack opens up a zero window, clear backoff. It was
        // being used to time the probes, and is probably far higher than it needs to be
        // for normal retransmission." The data goes out with a fresh RTO.
        if tcb.rtx().is_empty() && tcb.timers.retransmit.is_armed() {
            let unsent = tcb
                .sndbuf
                .len()
                .saturating_sub(tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize);
            let wnd_avail = (tcb.snd.una + tcb.snd.wnd as usize)
                .diff(tcb.snd.nxt)
                .max(0) as usize;
            if unsent > 0 && wnd_avail >= unsent.min(usize::from(tcb.mss)) {
                tcb.rtt.reset_backoff();
                tcb.timers.retransmit = Deadline::OFF;
                tcb.flags.clear(TcbFlags::LOSS_PROBE);
            }
        }
        // RFC 7323 §4.3: remember the peer's timestamp when the segment covers the last
        // ACK we sent (Linux tcp_replace_ts_recent: !after(seq, rcv_wup)).
        if tcb.flags.has(TcbFlags::TS_OK)
            && let Some(ts) = seg.timestamp
            && !seg.seq_number.after(tcb.rcv.wup)
            && (ts.tsval.wrapping_sub(tcb.ts_recent) as i32) >= 0
        {
            tcb.ts_recent = ts.tsval;
            tcb.ts_recent_stamp = (now.as_millis() / 1000) as u32;
        }
        let sack = tcb.flags.has(TcbFlags::SACK_OK);
        let mut ev = AckEvent {
            // The echoed timestamp on our clock (Linux subtracts `tsoffset` from
            // rcv_tsecr), for undo (RFC 3522 Eifel detection, Linux tcp_packet_delayed).
            tsecr: tcb
                .flags
                .has(TcbFlags::TS_OK)
                .then_some(seg.timestamp)
                .flatten()
                .filter(|t| t.tsecr != 0)
                .map(|t| t.tsecr.wrapping_sub(tcb.ts_offset)),
            ..AckEvent::default()
        };
        if advances && tcp_ack_is_pure(tcb, seg) {
            return self.tcp_ack_advance(now, seg.ack_number, ev);
        }
        // Congestion control judges by what was in flight before this ACK (Linux
        // `prior_in_flight` in tcp_ack).
        let prior_in_flight = tcb.in_flight();
        ev.prior_fack = tcb.rtx().highest_sacked();
        // SACK information, on any ACK (RFC 6675 §5 "update the scoreboard"; Linux
        // tcp_sacktag_write_queue before tcp_clean_rtx_queue).
        if sack && seg.sack_ranges[0].is_some() {
            let mut blocks = [(SeqNumber(0), SeqNumber(0)); 4];
            let mut n = 0;
            for (start, end) in seg.sack_ranges.iter().flatten() {
                blocks[n] = (*start, *end);
                n += 1;
            }
            let (una, nxt) = (seg.ack_number, tcb.snd.nxt);
            let r = match tcb.rtx_mut() {
                Some(q) => q.on_sack(&blocks[..n], una, nxt),
                None => super::scoreboard::RtxQueue::new().on_sack(&blocks[..n], una, nxt),
            };
            ev.delivered += r.newly_sacked;
            ev.sacked = r.newly_sacked;
            ev.dsack = r.dsack_range.filter(|_| r.dsack);
            if let Some(sent) = r.first_sacked_sent_at
                && sent >= tcb.active.recovery.rack_xmit_ts
            {
                // RFC 8985 §6.2 step 2 (RACK.xmit_ts, RACK.end_seq), from a newly SACKed
                // segment never retransmitted; its end is taken as the highest SACKed
                // (they coincide for data sent in order).
                tcb.active.recovery.rack_xmit_ts = sent;
                tcb.active.recovery.rack_end_seq = tcb.rtx().highest_sacked().unwrap_or(una);
            }
            // A retransmitted loss probe of the last segment is SACKed, not reported as a
            // duplicate: the probe got through, and it went out after everything below
            // it (RACK.xmit_ts is the probe's; Linux's scoreboard holds the probe's send
            // time, ours the first transmission's).
            if let Some(high) = tcb.active.recovery.tlp_high_seq
                && tcb.active.recovery.tlp_retrans
                && r.newly_sacked > 0
                && !r.dsack
                && tcb.rtx().highest_sacked() == Some(high)
                && tcb.active.recovery.tlp_sent_at > tcb.active.recovery.rack_xmit_ts
            {
                tcb.active.recovery.rack_xmit_ts = tcb.active.recovery.tlp_sent_at;
                tcb.active.recovery.rack_end_seq = high;
            }
            if r.dsack {
                self.mib.inc(Counter::TcpExtTCPDSACKRecv);
                // Linux tcp_sacktag_one: "D-SACK ... undo_retrans" -- each retransmission
                // the receiver reports as a duplicate was not needed.
                if tcb.active.recovery.undo_marker.is_some() && tcb.active.recovery.undo_retrans > 0
                {
                    tcb.active.recovery.undo_retrans =
                        (tcb.active.recovery.undo_retrans - r.dsack_retrans as i32).max(0);
                }
            }
        }
        if seg.ack_number.after(tcb.snd.una) {
            self.tcp_clean_rtx_queue::<false>(now, seg.ack_number, &mut ev);
        } else if seg.ack_number == tcb.snd.una
            && seg.payload.is_empty()
            && !seg.flags.intersects(Flags::SYN | Flags::FIN)
            && !window_changed
            && !tcb.rtx().is_empty()
        {
            // RFC 5681 §2 "DUPLICATE ACKNOWLEDGMENT" (all five conditions). Without SACK
            // each one stands for a segment that left the network (Linux
            // tcp_add_reno_sack: sacked_out, and one segment delivered).
            if !sack {
                tcb.active.dupacks =
                    (tcb.active.dupacks + 1).min(tcb.rtx().packets_out().saturating_sub(1));
                ev.delivered += 1;
            }
        }
        self.tcp_process_tlp_ack(now, seg.ack_number, &ev);
        self.tcp_fastretrans_alert(now, &ev);
        if ev.set_xmit_timer {
            self.tcp_set_xmit_timer(now);
        }
        self.tcp_cong_control(now, &ev, prior_in_flight);
        self.tcp_find_lost_retrans(now);
        if let Some(was_writeable) = ev.shrunk_writeable {
            let in_flight = self.tcb.in_flight();
            self.tcp_check_space(was_writeable, in_flight);
        }
    }

    /// A cumulative ACK that [`tcp_ack_is_pure`] passed: Linux's `tcp_ack` with only
    /// `FLAG_SND_UNA_ADVANCED` (its fast path, "if (!(flag & FLAG_SLOWPATH) &&
    /// after(ack, prior_snd_una))") and not `tcp_ack_is_dubious`: free what it acknowledged,
    /// take the RTT sample, restart the timer, grow cwnd. Nothing is SACKed, lost or being
    /// retransmitted and no probe is out, so the SACK scoreboard, the tail loss probe's
    /// and the recovery state machine have nothing to do; what they would do for this ACK
    /// (the tail of `tcp_fastretrans_alert`'s early return and of `tcp_find_lost_retrans`
    /// with nothing retransmitted) is done here. The receive fast path's (header
    /// prediction), so counted `TCPHPAcks` as Linux's `tcp_ack` counts it. Out of line:
    /// the receive path is as cheap without it inlined (echo 7,329 per round trip, 7,335
    /// inlined), and the profile shows the ACK's cost whole.
    ///
    /// `echo`: the segment's TSecr as it came, 0 for none (no timestamp, or a zero echo,
    /// taken as none as Linux takes `rx_opt.rcv_tsecr` 0). The ACK of the one segment
    /// outstanding (the request/response case) is done here in one pass
    /// ([`tcp_ack_one`](Self::tcp_ack_one), which does not use the echo); a longer
    /// queue's walk is out of line, with the echo on our clock ([`AckEvent::tsecr`]).
    #[inline(never)]
    pub(super) fn tcp_ack_pure(&mut self, now: Instant, ack: SeqNumber, echo: u32) {
        // Linux tcp_ack counts header prediction's ACKs that advance SND.UNA.
        self.mib.inc(Counter::TcpExtTCPHPAcks);
        if let Some(sent) = self.tcb.rtx_mut().and_then(|q| q.take_one_acked(ack)) {
            return self.tcp_ack_one(now, ack, sent);
        }
        let ev = AckEvent {
            tsecr: (echo != 0).then(|| echo.wrapping_sub(self.tcb.ts_offset)),
            ..AckEvent::default()
        };
        self.tcp_ack_queue(now, ack, ev);
    }

    /// [`tcp_ack_pure`](Self::tcp_ack_pure) less its count, for [`tcp_ack`](Self::tcp_ack)
    /// (which counts the ACK as its path calls for).
    #[inline]
    fn tcp_ack_advance(&mut self, now: Instant, ack: SeqNumber, ev: AckEvent) {
        if let Some(sent) = self.tcb.rtx_mut().and_then(|q| q.take_one_acked(ack)) {
            return self.tcp_ack_one(now, ack, sent);
        }
        self.tcp_ack_queue(now, ack, ev);
    }

    /// [`tcp_ack_advance`](Self::tcp_ack_advance) for a queue other than one inline
    /// segment wholly acknowledged: the queue's walk ([`tcp_clean_rtx_queue`]), the timer
    /// and the congestion control.
    ///
    /// [`tcp_clean_rtx_queue`]: Self::tcp_clean_rtx_queue
    #[inline(never)]
    fn tcp_ack_queue(&mut self, now: Instant, ack: SeqNumber, mut ev: AckEvent) {
        // Nothing SACKed, lost or retransmitted: every queued segment is in flight.
        let prior_in_flight = self.tcb.rtx().len() as u32;
        let rtt = self.tcp_clean_rtx_queue::<true>(now, ack, &mut ev);
        let rec = &mut self.tcb.active.recovery;
        rec.retrans_stamp = 0;
        rec.retrans_low = Instant::FAR_FUTURE;
        self.tcp_set_xmit_timer(now);
        // The congestion control's pkts_acked (Linux tcp_clean_rtx_queue) and cong_avoid
        // (tcp_cong_control: Open, and every acked segment delivered, so
        // tcp_may_raise_cwnd holds whenever something was acked), in that order, in one
        // pass over its state: the timer between them does not touch it.
        if ev.acked > 0 {
            self.tcp_cc_ack_open(now, ev.acked, ev.delivered, rtt, prior_in_flight);
        }
        if let Some(was_writeable) = ev.shrunk_writeable {
            let in_flight = self.tcb.rtx().len() as u32;
            self.tcp_check_space(was_writeable, in_flight);
        }
    }

    /// [`tcp_ack_pure`](Self::tcp_ack_pure) when the ACK acknowledged the only segment
    /// outstanding, the retransmission queue's inline one (sent at `sent`, already taken
    /// off the queue; docs/bench.md, tcbsplit): what [`tcp_clean_rtx_queue`] and the rest
    /// of `tcp_ack_pure` do for it, without the queue's general walk. The sent data is
    /// freed (one `SendBuffer::consume`), the RTT sampled (the segment was never
    /// retransmitted: Karn allows it), RACK advanced, the retransmission timer stopped
    /// (RFC 6298 §5.2: all outstanding data acknowledged, and no loss probe with nothing
    /// outstanding), the congestion control told of one segment acknowledged and
    /// delivered, with one in flight before the ACK.
    ///
    /// [`tcp_clean_rtx_queue`]: Self::tcp_clean_rtx_queue
    #[inline]
    fn tcp_ack_one(&mut self, now: Instant, ack: SeqNumber, sent: Instant) {
        let tcb = &mut *self.tcb;
        let data_acked = (ack.diff(tcb.data_start()).max(0) as usize).min(tcb.sndbuf.len());
        let was_writeable = sk_stream_is_writeable(tcb);
        tcb.sndbuf.consume(self.pool, data_acked);
        tcb.snd.una = ack;
        tcb.probes = 0;
        // The RTT from the segment's send time alone, not the echoed timestamp: Linux
        // tcp_ack_update_rtt ("Prefer RTT measured from ACK's timing to TS-ECR"). The
        // general path prefers the echo (see `tcp_ack_update_rtt` for the lossy case
        // that made it so); that case does not reach here: the one segment was never
        // retransmitted and no loss probe is outstanding (a probe's retransmission
        // moves the segment out of the inline slot), so the sample is unambiguous (Karn,
        // RFC 6298 §3) and in microseconds, where the echo counts whole milliseconds.
        let seq_rtt_us = rtt_us_since(now, sent);
        tcb.rtt.sample_us(seq_rtt_us);
        // "RFC6298: only reset backoff on valid RTT measurement"; Linux tcp_ack:
        // "icsk->icsk_retransmits = 0" once SND.UNA advances.
        tcb.rtt.reset_backoff();
        tcb.rtt.clear_retransmits();
        // RACK and the recovery stamps on one look at the box (held: the queue was in it).
        let rec = &mut tcb.active.recovery;
        rack_advance(rec, now, sent, ack);
        rec.retrans_stamp = 0;
        rec.retrans_low = Instant::FAR_FUTURE;
        // tcp_set_xmit_timer with the queue empty.
        tcb.timers.retransmit = Deadline::OFF;
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        debug_assert!(!tcb.timers.earliest().before(tcb.timers.queued));
        self.tcp_cc_ack_open(now, 1, 1, Some(seq_rtt_us), 1);
        self.tcp_check_space(was_writeable, 0);
    }

    /// [`Tcb::cc_ack_open`], HyStart's exit counted if it ended slow start: it sets
    /// ssthresh (to cwnd, below the old one), the only change to it these hooks make, so
    /// the counters are looked at then only.
    #[inline(always)]
    fn tcp_cc_ack_open(
        &mut self,
        now: Instant,
        acked: u32,
        delivered: u32,
        rtt_us: Option<u32>,
        prior_in_flight: u32,
    ) {
        let tcb = &mut *self.tcb;
        let prior_ssthresh = tcb.congestion.ssthresh;
        tcb.cc_ack_open(now, acked, delivered, rtt_us, prior_in_flight);
        if tcb.congestion.ssthresh != prior_ssthresh {
            self.tcp_count_hystart_exit(None);
        }
    }

    /// Count CUBIC's HyStart ending slow start on this ACK, if it did and had not before
    /// (`before`; Linux hystart_update counts these).
    fn tcp_count_hystart_exit(&mut self, before: Option<HystartExit>) {
        if before.is_none()
            && let Some(exit) = self.tcb.hystart_exit()
        {
            let (detect, cwnd) = match exit {
                HystartExit::AckTrain => (
                    Counter::TcpExtTCPHystartTrainDetect,
                    Counter::TcpExtTCPHystartTrainCwnd,
                ),
                HystartExit::Delay => (
                    Counter::TcpExtTCPHystartDelayDetect,
                    Counter::TcpExtTCPHystartDelayCwnd,
                ),
            };
            let w = u64::from(self.tcb.congestion.cwnd);
            self.mib.inc(detect);
            self.mib.add(cwnd, w);
        }
    }

    /// After an ACK that acknowledged data (Linux `tcp_set_xmit_timer`): a tail loss probe
    /// if one may be sent, else the RTO restarted (RFC 6298 §5.3 "When an ACK is
    /// received that acknowledges new data, restart the retransmission timer"), or off
    /// when nothing is outstanding (§5.2).
    #[inline]
    fn tcp_set_xmit_timer(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        if tcb.rtx().is_empty() {
            // RFC 6298 §5.2: "When all outstanding data has been acknowledged, turn off the
            // retransmission timer." (No probe without data outstanding either.) A timer
            // turned off needs no earlier entry in the timer queue: [`Sock::arm`] keeps
            // the queued entry no later than every armed deadline, so there is nothing to
            // arm (the request/response case: every ACK empties the queue).
            tcb.timers.retransmit = Deadline::OFF;
            tcb.flags.clear(TcbFlags::LOSS_PROBE);
            debug_assert!(!tcb.timers.earliest().before(tcb.timers.queued));
            return;
        }
        if self.tcp_schedule_loss_probe(now, true) {
            return;
        }
        let tcb = &mut *self.tcb;
        let d = Deadline::at(now + tcb.rtt.rto());
        tcb.timers.retransmit = d;
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        self.arm_one(now, d);
    }

    /// The ACK moved SND.UNA (Linux `tcp_clean_rtx_queue` and the SND.UNA part of
    /// `tcp_ack`): free the acknowledged bytes, take an RTT sample, tell the congestion
    /// control, restart the retransmission timer (RFC 6298 §5.2-5.3). `PURE`: for
    /// [`tcp_ack_pure`](Self::tcp_ack_pure), the queue clean
    /// and no SACK block in the ACK: the congestion control's `pkts_acked` is left to the
    /// caller. Returns the RTT sample of the segments acknowledged (Karn's rule).
    fn tcp_clean_rtx_queue<const PURE: bool>(
        &mut self,
        now: Instant,
        ack: SeqNumber,
        ev: &mut AckEvent,
    ) -> Option<u32> {
        let tcb = &mut *self.tcb;
        let prior_una = tcb.snd.una;
        let prior_fack = ev.prior_fack;
        let prior_in_flight = if PURE {
            tcb.rtx().len() as u32
        } else {
            tcb.in_flight()
        };
        let data_start = tcb.data_start();
        let data_acked = (ack.diff(data_start).max(0) as usize).min(tcb.sndbuf.len());
        let was_writeable = sk_stream_is_writeable(tcb);
        tcb.sndbuf.consume(self.pool, data_acked);
        let result = tcb
            .rtx_mut()
            .map(|q| q.on_ack_reusing::<PURE>(ack, self.spare_board))
            .unwrap_or_default();
        tcb.snd.una = ack;
        tcb.probes = 0;
        ev.una_advanced = true;
        ev.acked = result.acked_segments;
        let seq_rtt_us = result.rtt_sent_at.map(|sent| rtt_us_since(now, sent));
        tcp_ack_update_rtt(tcb, now, ev.tsecr, seq_rtt_us);
        if let Some(sent) = result.rtt_sent_at {
            tcp_rack_advance(tcb, now, sent, ack);
        }
        if PURE {
            // Nothing was SACKed and no duplicate ACK counted: each acked segment is
            // delivered now, with or without SACK.
            ev.delivered += result.delivered;
        } else if tcb.flags.has(TcbFlags::SACK_OK) {
            ev.delivered += result.delivered;
            // Linux tcp_clean_rtx_queue -> tcp_check_sack_reordering: segments that were
            // never retransmitted, arriving after a segment above them was SACKed, were
            // reordered, not lost. Raise DupThresh to the distance seen (capped like
            // tcp_max_reordering) so that reordering this deep is not taken for loss.
            if let Some(fack) = prior_fack
                && fack.after(prior_una)
                && result.delivered > 0
                && !result.newly_acked_retrans
            {
                let mss = usize::from(tcb.mss).max(1);
                let metric = (fack - prior_una).div_ceil(mss) as u32;
                if metric > tcb.active.recovery.reordering {
                    tcb.active.recovery.reordering = metric.min(MAX_REORDERING);
                }
                tcb.active.recovery.reord_seen = true;
                self.mib.inc(Counter::TcpExtTCPSACKReorder);
            }
        } else {
            // Linux tcp_remove_reno_sacks: "One ACK acked hole. The rest eat duplicate
            // ACKs."
            let acked = result.acked_segments;
            if acked > 0 {
                ev.delivered += acked.saturating_sub(tcb.active.dupacks).max(1);
                tcb.active.dupacks = tcb.active.dupacks.saturating_sub(acked - 1);
            }
        }
        // Linux tcp_clean_rtx_queue calls the congestion control's pkts_acked in every
        // state (CUBIC keeps its delay minimum and HyStart there).
        // (The pure path calls it from tcp_ack_pure, with cong_avoid.)
        if !PURE && result.acked_segments > 0 {
            let hystart_before = tcb.hystart_exit();
            tcb.with_cc(|cc, st| {
                st.in_flight = prior_in_flight;
                cc.pkts_acked(st, now, result.acked_segments, seq_rtt_us);
            });
            self.tcp_count_hystart_exit(hystart_before);
        }
        // RFC 6298 §5.2-5.3: the timer is set again once the ACK is processed
        // (`tcp_set_xmit_timer`).
        ev.set_xmit_timer = true;
        ev.shrunk_writeable = Some(was_writeable);
        seq_rtt_us
    }

    /// After an ACK freed sent data and was processed, the congestion control's growth
    /// included (Linux `tcp_check_space`, from `tcp_data_snd_check` after `tcp_ack`, so
    /// the send buffer grows to the new cwnd's two windows): a writer that found the
    /// queue full (`was_writeable` false) or was refused memory (`SOCK_NOSPACE`) gets
    /// [`tcp_new_space`](Self::tcp_new_space). As in Linux, a connection whose writer
    /// never ran out of room (a request/response exchange) costs the test only.
    #[inline(always)]
    fn tcp_check_space(&mut self, was_writeable: bool, in_flight: u32) {
        if !was_writeable || self.tcb.flags.has(TcbFlags::NOSPACE) {
            self.tcp_new_space(in_flight);
        }
    }

    /// Linux `tcp_new_space`: the send buffer grows if it should
    /// (`tcp_should_expand_sndbuf`: not under memory pressure, "If we are under global
    /// TCP memory pressure, do not expand" ... "If we are under soft global TCP memory
    /// pressure, do not expand", tcp_mem.low; `in_flight` after the ACK), then the writer
    /// is woken if it may write now (`sk_stream_write_space`).
    #[inline(never)]
    fn tcp_new_space(&mut self, in_flight: u32) {
        let tcb = &mut *self.tcb;
        if !self.pool.above_low() {
            tcp_sndbuf_expand(tcb, self.sysctl.tcp_wmem_max, in_flight);
        }
        if sk_stream_is_writeable(tcb) {
            tcb.flags.clear(TcbFlags::NOSPACE);
            self.ready.mark(SocketKey::Tcp(self.h), Readiness::WRITABLE); // sk_write_space
        }
    }

    /// Congestion control for one ACK (Linux `tcp_cong_control`): PRR while reducing,
    /// otherwise grow cwnd by what was delivered, if the ACK acknowledged data (Linux
    /// `tcp_may_raise_cwnd`).
    fn tcp_cong_control(&mut self, now: Instant, ev: &AckEvent, prior_in_flight: u32) {
        let tcb = &mut *self.tcb;
        if matches!(tcb.ca_state, CaState::Recovery | CaState::Cwr) {
            return self.tcp_cwnd_reduction(ev.delivered);
        }
        let may_raise = if tcb.active.recovery.reordering > DUP_THRESH {
            ev.delivered > 0
        } else {
            ev.acked > 0
        };
        if may_raise {
            tcb.with_cc(|cc, st| {
                st.in_flight = prior_in_flight;
                cc.cong_avoid(st, now, ev.delivered);
            });
        }
    }

    /// Put the data of a segment into the receive buffer (Linux `tcp_data_queue`) and
    /// decide how to acknowledge it (delayed ACK, RFC 9293 §3.8.6.3; Linux quick-ACK mode).
    /// `seq`, `data`, `ts`: the segment's sequence number, payload and timestamp option.
    pub(super) fn tcp_data_queue(
        &mut self,
        now: Instant,
        mut seq: SeqNumber,
        mut data: &[u8],
        ts: Option<TcpTimestamp>,
    ) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::SocketQueue);
        let tcb = &mut *self.tcb;
        let sack = tcb.flags.has(TcbFlags::SACK_OK);
        // Trim what we already have (a retransmission overlapping RCV.NXT).
        if seq.before(tcb.rcv.nxt) {
            let dup = (tcb.rcv.nxt - seq).min(data.len());
            // RFC 2883 §4 (Linux tcp_send_dupack / "Partial packet" in tcp_data_queue):
            // report the duplicate bytes in a D-SACK block, so that the sender can tell a
            // needless retransmission.
            if sack {
                tcb.active.rx_sack.set_dsack(seq, seq + dup);
                self.mib.inc(Counter::TcpExtTCPDSACKOldSent);
            }
            data = &data[dup..];
            seq += dup;
            if data.is_empty() {
                // All old: ACK at once (the peer probably lost our ACK), and (Linux
                // tcp_send_dupack) count it as DelayedACKLost.
                tcb.flags.set(TcbFlags::ACK_NOW);
                return self.mib.drop(DropReason::TcpOldData);
            }
        }
        let offset = seq - tcb.rcv.nxt;
        if offset == 0 {
            // Linux tcp_event_data_recv: sample the receiver's RTT (the receive buffer is
            // sized to what the application reads when it reads: `tcp_rcv_space_adjust`).
            tcp_rcv_rtt_measure(tcb, now, ts, data.len());
        }
        let promised = tcb.receive_window() as usize;
        if offset == 0 && promised == 0 {
            // Linux tcp_data_queue: in-sequence data into a zero window is dropped
            // (TCPZeroWindowDrop) and acknowledged, telling the sender the window again.
            tcb.flags.set(TcbFlags::ACK_NOW);
            return self.mib.drop(DropReason::TcpZeroWindow);
        }
        // What we advertised is a promise: data inside the right edge is kept even when
        // the edge, rounded to the window scale, lies a little past the buffer (RFC 7323
        // Appendix F; Linux lets sk_rcvbuf grow for it), so that a sender that respects
        // the window never has data dropped (TCPRcvQDrop).
        let chunks = tcb.rcvbuf.chunks_for(offset, data.len());
        if !self.pool.fast_schedule(chunks) && !self.tcp_rmem_schedule(now, offset, data.len()) {
            return;
        }
        let tcb = &mut *self.tcb;
        let held = tcb.rcvbuf.readable() + tcb.rcvbuf.ooo_bytes();
        let limit = (tcb.rcvbuf_limit as usize).max(held + promised);
        let Some(r) = self.tcp_rcv_queue(offset, data, limit) else {
            return;
        };
        let tcb = &mut *self.tcb;
        // Linux tcp_event_data_recv (in-order data of 128 bytes or more) and
        // tcp_data_queue_ofo (out-of-order data queued, only with SACK: "For non sack
        // flows, do not grow window to force DUPACK"): the window may grow.
        if r.dropped == 0
            && r.duplicate < data.len()
            && (if offset == 0 { data.len() >= 128 } else { sack })
        {
            tcb.grow_window(data.len(), self.pool.under_pressure());
        }
        if r.dropped > 0 {
            // Linux counts TCPRcvQDrop for in-order data it has no room for
            // (tcp_data_queue) and TCPOFODrop for out-of-order data (tcp_data_queue_ofo).
            self.mib.inc(if offset == 0 {
                Counter::TcpExtTCPRcvQDrop
            } else {
                Counter::TcpExtTCPOFODrop
            });
        }
        if offset > 0 && r.duplicate == data.len() {
            // Every byte was already queued: "All the bits are present. Drop."
            // (tcp_data_queue_ofo, TCPOFOMerge).
            self.mib.drop(DropReason::TcpOfoMerge);
        }
        // The receiver's SACK blocks (RFC 2018 §4; Linux tcp_data_queue_ofo,
        // tcp_sack_new_ofo_skb, tcp_sack_remove).
        if sack {
            let end = seq + data.len();
            if offset > 0 && r.duplicate == data.len() {
                // Everything was already queued: a D-SACK of it (RFC 2883 §4; Linux
                // tcp_data_queue_ofo counts TCPDSACKOfoSent).
                tcb.active.rx_sack.set_dsack(seq, end);
                self.mib.inc(Counter::TcpExtTCPDSACKOfoSent);
            } else if offset > 0 && r.dropped == 0 {
                tcb.active.rx_sack.on_ofo(seq, end);
            }
            if tcb.rcvbuf.ooo_bytes() == 0 {
                tcb.active.rx_sack.clear_blocks();
            } else {
                if r.advanced > 0 {
                    let rcv_nxt = tcb.rcv.nxt;
                    tcb.active.rx_sack.on_rcv_nxt(rcv_nxt);
                }
                if r.dropped > 0 || r.pruned > 0 {
                    self.tcp_sack_retain_held();
                }
            }
        }
        let tcb = &mut *self.tcb;
        if offset > 0 {
            // Out of order: RFC 5681 §4.2 "A TCP receiver SHOULD send an immediate duplicate
            // ACK when an out-of-order segment arrives", with SACK blocks.
            tcb.flags.set(TcbFlags::ACK_NOW);
            self.mib.inc(Counter::TcpExtTCPOFOQueue);
            return;
        }
        if tcb.rcvbuf.ooo_bytes() > 0 || r.advanced > data.len() {
            // Filling a hole: ACK at once (RFC 5681 §4.2 "an immediate ACK SHOULD be sent
            // when the incoming segment fills in all or part of a gap").
            tcb.flags.set(TcbFlags::ACK_NOW);
            return;
        }
        self.tcp_event_data_in_order(now);
    }

    /// The in-order segment of the receive fast path ([`super::fast_path`]): what
    /// [`Sock::tcp_data_queue`] does for data at RCV.NXT (`data` non-empty, within the
    /// window advertised) with nothing out of order queued, in one pass: no trimming, no
    /// out-of-order queue, SACK blocks or hole to fill.
    #[inline(always)]
    pub(super) fn tcp_data_queue_in_order<const PROF: bool>(
        &mut self,
        now: Instant,
        data: &[u8],
        ts: Option<TcpTimestamp>,
    ) {
        let _stage =
            PROF.then(|| ustack_obs::profile::enter(ustack_obs::profile::Stage::SocketQueue));
        let tcb = &mut *self.tcb;
        debug_assert!(tcb.rcvbuf.in_order_only() && !data.is_empty());
        tcp_rcv_rtt_measure(tcb, now, ts, data.len());
        // Not zero: the fast path takes only data within the window (tcp_data_queue's
        // zero-window drop is the slow path's).
        let promised = tcb.receive_window() as usize;
        let chunks = tcb.rcvbuf.chunks_for(0, data.len());
        if !self.pool.fast_schedule(chunks) && !self.tcp_rmem_schedule(now, 0, data.len()) {
            return;
        }
        let tcb = &mut *self.tcb;
        let limit = (tcb.rcvbuf_limit as usize).max(tcb.rcvbuf.readable() + promised);
        // A segment that fits its aligned block (every small one): one copy, inline
        // (nothing to prune or merge; `tcp_rcv_queue` does the rest).
        let stored = if self.rx_direct.on {
            None
        } else {
            tcb.rcvbuf.append_small(self.pool, data, limit)
        };
        let dropped = if let Some(n) = stored {
            tcb.rcv.nxt += n;
            if n > 0 {
                self.ready.mark(SocketKey::Tcp(self.h), Readiness::READABLE); // sk_data_ready
            }
            data.len() - n
        } else {
            let Some(r) = self.tcp_rcv_queue(0, data, limit) else {
                return;
            };
            r.dropped
        };
        let tcb = &mut *self.tcb;
        if dropped > 0 {
            self.mib.inc(Counter::TcpExtTCPRcvQDrop);
        } else if data.len() >= 128 {
            tcb.grow_window(data.len(), self.pool.under_pressure());
        }
        // Nothing out of order: no SACK block to report (tcp_data_queue clears them).
        if tcb.flags.has(TcbFlags::SACK_OK) && !tcb.active.rx_sack.blocks().is_empty() {
            tcb.active.rx_sack.clear_blocks();
        }
        self.tcp_event_data_in_order(now);
    }

    /// Store data at `offset` past RCV.NXT under `limit` (see
    /// [`super::buffer::RecvBuffer::insert`]), or for a direct receive reserve its room
    /// ([`super::rx_direct`]); advance RCV.NXT and wake the reader (Linux
    /// `sk_data_ready`) over what became readable, and count any pruning.
    /// `None`: the segment was dropped (a direct receive that cannot take it).
    #[inline(always)]
    fn tcp_rcv_queue(&mut self, offset: usize, data: &[u8], limit: usize) -> Option<InsertResult> {
        let tcb = &mut *self.tcb;
        let r = if self.rx_direct.on {
            // The payload is still on the device (`Stack::receive_direct`, which let only
            // in-order data into an empty out-of-order queue through): reserve its room
            // and note where each piece goes, for the device to fill.
            if offset != 0 || tcb.rcvbuf.ooo_extents() != 0 {
                self.mib.drop(DropReason::TcpDirectMiss);
                return None;
            }
            let from = data.as_ptr().addr() - self.rx_direct.base;
            let d = &mut *self.rx_direct;
            // The frame lent (the device keeps it) and no copied byte waiting: the queue
            // holds the frame, its payload copied once, at the read (`buffer::lent`).
            if let Some(id) = d.hold
                && tcb.rcvbuf.can_hold_lent()
            {
                let r = tcb
                    .rcvbuf
                    .append_lent(self.pool, (id, from), data.len(), limit);
                if r.stored > 0 {
                    d.hold = None;
                    self.pool.lent.held += 1;
                }
                r
            } else {
                tcb.rcvbuf
                    .append_in_order_with(self.pool, data.len(), limit, |piece, done| {
                        d.note(from, piece, done)
                    })
            }
        } else {
            tcb.rcvbuf.insert(self.pool, offset, data, limit)
        };
        tcb.rcv.nxt += r.advanced;
        if r.advanced > 0 {
            self.ready.mark(SocketKey::Tcp(self.h), Readiness::READABLE); // sk_data_ready
        }
        tcp_count_prune(self.mib, &r);
        Some(r)
    }

    /// In-order data was queued with no hole filled: acknowledge it now or arm the
    /// delayed ACK (the end of Linux `tcp_data_queue` -> `tcp_event_data_recv` and
    /// `__tcp_ack_snd_check`), by comparisons only.
    #[inline(always)]
    fn tcp_event_data_in_order(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        // RFC 9293 §3.8.6.3: "an ACK SHOULD be generated for at least every second
        // full-sized segment"; Linux also ACKs at once in quick-ACK mode (start of a
        // connection) and otherwise delays up to the ATO.
        // Linux tcp_event_data_recv (icsk_ack.lrcvtime): data that a reply may follow.
        tcb.flags.set(TcbFlags::DATA_RCVD);
        let unacked = tcb.rcv.nxt - tcb.rcv.wup;
        // Linux __tcp_ack_snd_check: "... and right edge of window advances far enough.
        // (tcp_recvmsg() will send ACK otherwise)": a segment the window cannot grow past
        // waits for the read (`tcp_recv`), which acknowledges everything come since (a
        // bulk receiver then ACKs per read, not per 64 KiB super-segment). Not Linux:
        // only while the peer has half the window last offered left to send into, so
        // that a reader that pauses still gets an ACK each time what is left halves (not
        // only the delayed-ACK timer's), and the segment that closes the window is
        // acknowledged at once.
        let full_frames = unacked >= 2 * usize::from(tcb.mss)
            || tcb.flags.has(TcbFlags::ACK_PENDING) && unacked > usize::from(tcb.mss);
        let ack_now = tcb.quick_acks > 0
            || if full_frames {
                let left = tcb.receive_window();
                let left_to_read = tcb.free_window(self.pool.under_pressure()) < tcb.rcv.wnd
                    && 2 * u64::from(left) >= u64::from(tcb.rcv.wnd);
                !left_to_read
            } else {
                tcb.receive_window() == 0
            };
        if ack_now {
            tcb.flags.set(TcbFlags::ACK_NOW);
        } else {
            tcb.flags.set(TcbFlags::ACK_PENDING);
            if !tcb.timers.delack.is_armed() {
                let d = Deadline::at(now + DELACK);
                tcb.timers.delack = d;
                self.arm_one(now, d);
            }
        }
    }

    /// The ACK of a FIN that takes ESTABLISHED (or SYN-RECEIVED) to CLOSE-WAIT, delayed as
    /// Linux delays it once data has come in: `tcp_fin` only schedules it
    /// (`inet_csk_schedule_ack`) and enters pingpong mode (`inet_csk_enter_pingpong_mode`),
    /// so `__tcp_ack_snd_check`, no longer in quick-ACK mode, leaves it to
    /// `tcp_send_delayed_ack` at the ATO (40 ms, set by the first data,
    /// `tcp_event_data_recv`; [`DELACK`] here). The application's close, which usually
    /// follows at once, sends our FIN with it: three segments end the connection instead
    /// of four (Linux's loopback: FIN, FIN-ACK, ACK). A connection that has received no
    /// data has an ATO of 0 on Linux, so its delayed ACK is due at the next jiffy: that
    /// one is sent at once here (tests/conformance/close/passive-close.pkt). RFC 9293
    /// §3.10.7.4 "send an acknowledgment for the FIN", with §3.8.6.3's delayed ACK (RFC
    /// 1122 §4.2.3.2: under 0.5 s). The other states' FIN is acknowledged at once (Linux
    /// `tcp_fin`: FIN-WAIT-1 and FIN-WAIT-2 call `tcp_send_ack`). An immediate ACK the
    /// segment's data already asked for (out of order, a hole filled, quick-ACK mode)
    /// stands: ustack does not tell those apart (Linux, evaluating quick-ACK mode after
    /// `tcp_fin`, delays the last of them).
    #[inline]
    fn tcp_fin_delay_ack(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        // RCV.NXT is past the FIN: more than SYN and FIN between it and IRS is data.
        let had_data = tcb.rcv.nxt.0.wrapping_sub(tcb.rcv.irs.0) > 2;
        if !had_data || tcb.flags.has(TcbFlags::ACK_NOW) {
            tcb.flags.set(TcbFlags::ACK_NOW);
            return;
        }
        tcb.quick_acks = 0;
        tcb.flags.set(TcbFlags::ACK_PENDING);
        if !tcb.timers.delack.is_armed() {
            tcb.timers.delack = Deadline::at(now + DELACK);
            self.arm(now);
        }
    }

    /// Ask the stack's `tcp_mem` for the memory of `len` bytes at `offset` past RCV.NXT
    /// before queueing them (Linux `tcp_try_rmem_schedule` -> `sk_rmem_schedule`). When
    /// refused: PruneCalled, the socket's out-of-order extents at or above the segment are
    /// discarded (Linux `tcp_prune_ofo_queue`: OfoPruned, a `TCP_OFO_QUEUE_PRUNE` drop per
    /// extent) and the memory asked again; an in-order segment for an empty receive queue
    /// is then taken anyway within the stack's budget (Linux `sk_forced_mem_schedule`: a
    /// reader waiting on this socket always gets data); otherwise the segment is dropped
    /// (`PROTO_MEM`, RcvPruned, and TCPRcvQDrop or TCPOFODrop) and acknowledged at once,
    /// so that the sender learns where the receiver stands. Returns whether to queue it.
    /// (The caller tries the pool's inline fast path first.)
    #[cold]
    #[inline(never)]
    fn tcp_rmem_schedule(&mut self, now: Instant, offset: usize, len: usize) -> bool {
        let tcb = &mut *self.tcb;
        let chunks = tcb.rcvbuf.chunks_for(offset, len);
        let ask = |tcb: &Tcb| MemAsk {
            chunks,
            held_kind: tcb.rcvbuf.mem_bytes(),
            held_total: tcb.rcvbuf.mem_bytes() + tcb.sndbuf.mem_bytes(),
            min: self.sysctl.tcp_rmem_min as usize,
            sockets: self.sockets,
        };
        if chunks == 0 || self.pool.mem_schedule(now, self.mib, ask(tcb)) {
            return true;
        }
        let mut res = InsertResult {
            prune_called: true,
            ..InsertResult::default()
        };
        tcb.rcvbuf.prune_ofo_from(self.pool, offset, &mut res);
        let ok = (res.pruned > 0 && self.pool.mem_schedule(now, self.mib, ask(tcb)))
            || (offset == 0 && tcb.rcvbuf.readable() == 0 && self.pool.forced_schedule(chunks));
        if !ok {
            res.dropped = len;
            self.mib.drop(DropReason::ProtoMem);
            self.mib.inc(if offset == 0 {
                Counter::TcpExtTCPRcvQDrop
            } else {
                Counter::TcpExtTCPOFODrop
            });
            tcb.flags.set(TcbFlags::ACK_NOW);
            if tcb.rcvbuf.readable() > 0 {
                // Linux: sk->sk_data_ready(sk) before the drop, to get the reader going.
                self.ready.mark(SocketKey::Tcp(self.h), Readiness::READABLE);
            }
        }
        tcp_count_prune(self.mib, &res);
        if res.pruned > 0 && tcb.flags.has(TcbFlags::SACK_OK) {
            if tcb.rcvbuf.ooo_bytes() == 0 {
                tcb.active.rx_sack.clear_blocks();
            } else {
                self.tcp_sack_retain_held();
            }
        }
        ok
    }

    /// Cut the receiver's SACK blocks to what the out-of-order queue holds, after the
    /// buffer refused or pruned data (see [`super::sack_blocks::RxSack::retain_held`]).
    fn tcp_sack_retain_held(&mut self) {
        /// Extents looked at: blocks beyond the 64th hole are dropped, never invented.
        const MAX_EXTENTS: usize = 64;
        let tcb = &mut *self.tcb;
        let mut ranges = [(0usize, 0usize); MAX_EXTENTS];
        let n = tcb.rcvbuf.ooo_ranges(self.pool, &mut ranges);
        let mut held = [(SeqNumber(0), SeqNumber(0)); MAX_EXTENTS];
        for (o, r) in held.iter_mut().zip(&ranges[..n]) {
            *o = (tcb.rcv.nxt + r.0, tcb.rcv.nxt + r.1);
        }
        tcb.active.rx_sack.retain_held(&held[..n]);
    }
}

/// The send buffer sized as the connection becomes established (Linux
/// `tcp_init_transfer` -> `tcp_init_buffer_space`: "if (!(sk->sk_userlocks &
/// SOCK_SNDBUF_LOCK)) tcp_sndbuf_expand(sk)"): room for two initial windows before the
/// first write, whether or not an ACK ever finds the writer out of room.
pub(super) fn tcp_init_buffer_space(tcb: &mut Tcb, wmem_max: u64) {
    let in_flight = tcb.in_flight();
    tcp_sndbuf_expand(tcb, wmem_max, in_flight);
}

/// Send-buffer autotuning (Linux `tcp_new_space` -> `tcp_should_expand_sndbuf` ->
/// `tcp_sndbuf_expand`): when an ACK frees space and the sender is not cwnd-limited,
/// let the send buffer hold two congestion windows ("Worst case is non GSO/TSO:
/// each frame consumes one skb ... sndmem = 2 * nr_segs * per_mss"), at least the
/// initial window's worth and never more than `tcp_wmem.max`. Linux counts the skb
/// overhead in `sk_sndbuf`; ustack's limit counts payload bytes.
/// `in_flight`: [`Tcb::in_flight`], which the caller may know more cheaply.
fn tcp_sndbuf_expand(tcb: &mut Tcb, wmem_max: u64, in_flight: u32) {
    // Linux tcp_should_expand_sndbuf: "If the user specified a specific send buffer
    // setting, do not modify it." (SOCK_SNDBUF_LOCK)
    if tcb.flags.has(TcbFlags::SNDBUF_LOCK) || in_flight >= tcb.congestion.cwnd {
        // Linux: "If we filled the congestion window, do not expand."
        return;
    }
    let nr_segs = u64::from(
        tcb.congestion
            .cwnd
            .max(TCP_INIT_CWND)
            .max(tcb.active.recovery.reordering + 1),
    );
    let sndmem = (2 * nr_segs * u64::from(tcb.mss)).min(wmem_max);
    if sndmem > u64::from(tcb.sndbuf_limit) {
        tcb.sndbuf_limit = sndmem.min(u64::from(u32::MAX)) as u32;
    }
}

/// The receiver's RTT estimate (Linux `tcp_rcv_rtt_measure_ts`, from the timestamp a
/// full-sized segment echoes; without timestamps `tcp_rcv_rtt_measure`, the time
/// until a window's worth of data arrived). Inline, the timestamp's common case: an echo
/// already seen (or none), or a segment shorter than the MSS, which only notes the echo.
/// Also notes the segment's arrival (`RcvSpace::last_rcv`, Linux `icsk_ack.lrcvtime`) on
/// the same look at the box (neither measure reads it).
#[inline(always)]
fn tcp_rcv_rtt_measure(tcb: &mut Tcb, now: Instant, ts: Option<TcpTimestamp>, len: usize) {
    let (ts_ok, mss, ts_offset) = (tcb.flags.has(TcbFlags::TS_OK), tcb.mss, tcb.ts_offset);
    let rcv_space = &mut tcb.active.rcv_space;
    rcv_space.last_rcv = now;
    if !ts_ok {
        return tcp_rcv_rtt_measure_win(tcb, now);
    }
    let Some(ts) = ts.filter(|t| t.tsecr != 0) else {
        return;
    };
    if ts.tsecr == rcv_space.last_tsecr {
        return;
    }
    rcv_space.last_tsecr = ts.tsecr;
    if len >= usize::from(mss) {
        let delta_ms = ts_clock(now).wrapping_sub(ts.tsecr.wrapping_sub(ts_offset));
        if (delta_ms as i32) >= 0 {
            rcv_space.rtt_update(delta_ms.saturating_mul(1000), false);
        }
    }
}

/// [`tcp_rcv_rtt_measure`] without timestamps (Linux `tcp_rcv_rtt_measure`): the time
/// a window's worth of data took to arrive.
#[inline(never)]
fn tcp_rcv_rtt_measure_win(tcb: &mut Tcb, now: Instant) {
    let (nxt, wnd) = (tcb.rcv.nxt, tcb.rcv.wnd);
    let rcv_space = &mut tcb.active.rcv_space;
    if rcv_space.rtt_time != Instant::ZERO {
        if nxt.before(rcv_space.rtt_seq) {
            return;
        }
        let us = (now - rcv_space.rtt_time)
            .as_micros()
            .min(u128::from(u32::MAX)) as u32;
        rcv_space.rtt_update(us, true);
    }
    rcv_space.rtt_seq = nxt + wnd as usize;
    rcv_space.rtt_time = now;
}

/// Receive-buffer autotuning (Linux `tcp_rcv_space_adjust`, "dynamic right-sizing"):
/// once per receiver RTT, if the application read more than in the RTT before, raise
/// the receive buffer limit to twice what it read plus 16 segments, more while the
/// rate is growing ("To cope with packet losses, we need a 2x factor. To cope with slow
/// start ... a 4x factor"), never above `tcp_rmem.max`. The window offered follows the
/// limit (RFC 7323 §2.3 window scaling makes room for it).
///
/// Called when the application has read (`Stack::tcp_recv`), as Linux calls it from
/// `tcp_recvmsg`, not per segment received. Inline, the common case: a measurement under
/// way whose RTT has not passed (or with no RTT estimate yet: Linux "if
/// (unlikely(!tp->rcv_rtt_est.rtt_us)) return;"), or a connection holding no active
/// state (its measurement was forgotten with it), returns at once.
#[inline(always)]
pub(super) fn tcp_rcv_space_adjust(tcb: &mut Tcb, now: Instant, rmem_max: u64) {
    let Some(a) = tcb.active.held_mut() else {
        return;
    };
    let rs = &a.rcv_space;
    if rs.space != 0
        && (rs.rtt_us8 == 0
            || now.as_nanos().saturating_sub(rs.time.as_nanos()) / 1000
                < u64::from(rs.rtt_us8 >> 3))
    {
        return;
    }
    tcp_rcv_space_measure(tcb, now, rmem_max);
}

/// [`tcp_rcv_space_adjust`] once the RTT has passed (or to begin the measurement).
#[inline(never)]
fn tcp_rcv_space_measure(tcb: &mut Tcb, now: Instant, rmem_max: u64) {
    let copied_seq = tcb.rcv.nxt - tcb.rcvbuf.readable();
    let advmss = u64::from(tcb.adv_mss);
    let rcv_space = &mut tcb.active.rcv_space;
    if rcv_space.space == 0 {
        // Linux tcp_init_buffer_space: "rcvq_space.space = min3(rcv_ssthresh, rcv_wnd,
        // TCP_INIT_CWND * advmss)".
        rcv_space.space = (u64::from(tcb.rcv.wnd).min(10 * advmss) as u32).max(1);
        rcv_space.seq = copied_seq;
        rcv_space.time = now;
        return;
    }
    let copied = copied_seq.diff(rcv_space.seq).max(0) as u64;
    if copied > u64::from(rcv_space.space) {
        let space = u64::from(rcv_space.space).max(1);
        let mut rcvwin = 2 * copied + 16 * advmss;
        let grow = rcvwin * (copied - space) / space;
        rcvwin += 2 * grow;
        let rcvbuf = rcvwin.min(rmem_max).min(u64::from(u32::MAX)) as u32;
        // Linux: only "if (... sysctl_tcp_moderate_rcvbuf && !(sk->sk_userlocks &
        // SOCK_RCVBUF_LOCK))": a size the user set with SO_RCVBUF stays.
        if rcvbuf > tcb.rcvbuf_limit && !tcb.flags.has(TcbFlags::RCVBUF_LOCK) {
            tcb.rcvbuf_limit = rcvbuf;
        }
        rcv_space.space = copied.min(u64::from(u32::MAX)) as u32;
    }
    rcv_space.seq = copied_seq;
    rcv_space.time = now;
}

/// Count what the receive buffer did to make room (Linux `tcp_prune_queue`:
/// PruneCalled; `tcp_prune_ofo_queue`: OfoPruned once and a `TCP_OFO_QUEUE_PRUNE` drop
/// per extent discarded; RcvPruned when it could not make enough room).
fn tcp_count_prune(mib: &mut Mib, r: &InsertResult) {
    if !r.prune_called {
        return;
    }
    mib.inc(Counter::TcpExtPruneCalled);
    if r.pruned_extents > 0 {
        mib.inc(Counter::TcpExtOfoPruned);
        for _ in 0..r.pruned_extents {
            mib.drop(DropReason::TcpOfoQueuePrune);
        }
    }
    if r.dropped > 0 {
        mib.inc(Counter::TcpExtRcvPruned);
    }
}

/// Linux `tcp_rcv_established`'s header prediction (its `pred_flags` test, RFC 9293's
/// checks made once): an ESTABLISHED connection's segment with only ACK (and PSH) set,
/// starting at RCV.NXT, acknowledging nothing beyond SND.NXT nor before SND.UNA, and
/// passing PAWS (its timestamp not older than TS.Recent). Such a segment passes every test
/// of [`Sock::tcp_validate_incoming`] (in window: it starts at RCV.NXT; no RST, no SYN)
/// and of the ACK field (RFC 5961 §5.2), and changes no state there, so the caller goes
/// straight to the ACK. Anything else takes the full walk.
#[inline]
fn tcp_header_predicted(tcb: &Tcb, seg: &tcp::Repr) -> bool {
    tcb.state == State::Established
        && seg.flags.0 & !Flags::PSH.0 == Flags::ACK.0
        && seg.seq_number == tcb.rcv.nxt
        && !seg.ack_number.after(tcb.snd.nxt)
        && !seg.ack_number.before(tcb.snd.una)
        && (!tcb.flags.has(TcbFlags::TS_OK)
            || seg
                .timestamp
                .is_none_or(|ts| (ts.tsval.wrapping_sub(tcb.ts_recent) as i32) >= 0))
}
