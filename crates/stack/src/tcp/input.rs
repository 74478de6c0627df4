//! TCP input: [RFC 9293 §3.10.7 "SEGMENT ARRIVES"](https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7),
//! step by step, with RFC 5961's protections, RFC 7323's PAWS and RFC 5681/6582/6675's
//! loss detection; Linux's `tcp_v4_rcv`, `tcp_rcv_state_process`, `tcp_validate_incoming`,
//! `tcp_ack` and `tcp_data_queue` in `net/ipv4/tcp_ipv4.c` and `tcp_input.c`.
//!
//! There is no header-prediction fast path yet: every segment takes the full path below.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::tcp::Flags;
use ustack_wire::{SeqNumber, tcp};

use super::cc::{CaEvent, CaState, CongestionControl};
use super::isn::ts_clock;
use super::output::DELACK;
use super::tcb::{FourTuple, Tcb, TcbFlags};
use super::{State, TcpHandle};
use crate::ip::Inbound;
use crate::{Error, Stack};

/// RFC 7323 §5.5: a TS.Recent older than 24 days is invalid for PAWS.
const PAWS_24DAYS_SECS: u32 = 24 * 24 * 3600;
/// RFC 5681 §3.2: fast retransmit after three duplicate ACKs (DupThresh, RFC 6675 §2).
const DUP_THRESH: u32 = 3;

/// The sequence space a segment occupies: data plus one for SYN and one for FIN.
pub(crate) fn seg_len(seg: &tcp::Repr) -> usize {
    seg.payload.len()
        + usize::from(seg.flags.contains(Flags::SYN))
        + usize::from(seg.flags.contains(Flags::FIN))
}

impl Stack {
    /// Linux `tcp_v4_rcv`: validate, find the owner, dispatch.
    pub(crate) fn tcp_input(&mut self, now: Instant, inbound: &Inbound) {
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
        if !packet.verify_checksum(&src, &dst) {
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
        if let Some(&index) = self.tcp.ehash.get(&tuple) {
            let h = self.tcp.handle_of(index);
            return self.conn_input(now, h, &seg);
        }
        if self.tcp.timewait.contains(&tuple) {
            return self.timewait_input(now, tuple, &seg);
        }
        if self.tcp.requests.contains(&tuple) {
            return self.request_input(now, tuple, &seg);
        }
        if let Some(listener) = self.tcp.listeners.lookup(tuple.local) {
            return self.listen_input(now, listener, tuple, &seg);
        }
        // RFC 9293 §3.10.7.1 CLOSED: "An incoming segment containing a RST is discarded. An
        // incoming segment not containing a RST causes a RST to be sent in response."
        self.mib.drop(DropReason::TcpNoSocket);
        if !seg.flags.contains(Flags::RST) {
            self.reset_for(now, tuple, &seg);
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

    /// A segment for a connection in the table.
    pub(crate) fn conn_input(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        match tcb.state {
            State::SynSent => return self.syn_sent_input(now, h, seg),
            State::Closed | State::Listen | State::TimeWait => {
                return self.mib.drop(DropReason::TcpClose);
            }
            _ => {}
        }
        tcb.last_activity = now;
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
            self.tcp_send_ack(now, h);
            return self.mib.drop(DropReason::TcpPaws);
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
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
            // "If an incoming segment is not acceptable, an acknowledgment should be sent
            // in reply (unless the RST bit is set, if so drop the segment and return)".
            if !f.contains(Flags::RST) {
                self.tcp_send_ack(now, h);
            }
            return self.mib.drop(reason);
        }

        // ---- second, check the RST bit (RFC 5961 §3.2) -----------------------------
        if f.contains(Flags::RST) {
            // "If the RST bit is set and the sequence number exactly matches the next
            // expected sequence value, the TCP endpoint MUST reset the connection ...
            // Otherwise ... MUST send an ACK (challenge ACK)".
            if seg.seq_number == tcb.rcv.nxt {
                let error = match tcb.state {
                    State::SynReceived => Error::ConnectionRefused,
                    State::Closing | State::LastAck => return self.tcp_done(h, None),
                    _ => Error::ConnectionReset,
                };
                return self.tcp_done(h, Some(error));
            }
            self.tcp_challenge_ack(now, h);
            return self.mib.drop(DropReason::TcpReset);
        }

        // ---- third, security (no IP security options: nothing to check) --------------

        // ---- fourth, check the SYN bit (RFC 5961 §4) -------------------------------
        // "If the SYN bit is set, irrespective of the sequence number, TCP endpoints MUST
        // send a 'challenge ACK' to the remote peer".
        if f.contains(Flags::SYN) {
            self.tcp_challenge_ack(now, h);
            return self.mib.drop(DropReason::TcpInvalidSyn);
        }

        // ---- fifth, check the ACK field --------------------------------------------
        // "if the ACK bit is off, drop the segment and return".
        if !f.contains(Flags::ACK) {
            return self.mib.drop(DropReason::TcpFlags);
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.state == State::SynReceived {
            // "If SND.UNA < SEG.ACK =< SND.NXT, then enter ESTABLISHED state ... If the
            // segment acknowledgment is not acceptable, form a reset segment".
            if seg.ack_number.after(tcb.snd.una) && !seg.ack_number.after(tcb.snd.nxt) {
                tcb.snd.wnd = u32::from(seg.window_len) << tcb.snd_wscale;
                tcb.snd.wl1 = seg.seq_number;
                tcb.snd.wl2 = seg.ack_number;
                self.tcp_set_state(h, State::Established);
            } else {
                let tuple = tcb.tuple;
                self.tcp_send_reset(now, tuple, seg.ack_number, None);
                return self.mib.drop(DropReason::TcpAckUnsentData);
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        // RFC 5961 §5.2: acceptable iff (SND.UNA - MAX.SND.WND) =< SEG.ACK =< SND.NXT;
        // otherwise "the ACK value is considered ... invalid ... discard ... send an ACK".
        if seg.ack_number.after(tcb.snd.nxt) {
            self.tcp_send_ack(now, h);
            return self.mib.drop(DropReason::TcpAckUnsentData);
        }
        if seg
            .ack_number
            .before(tcb.snd.una - (tcb.snd.max_wnd as usize).min(1 << 30))
        {
            self.tcp_send_ack(now, h);
            return self.mib.drop(DropReason::TcpTooOldAck);
        }
        self.tcp_ack(now, h, seg);
        let Some(tcb) = self.tcp.get(h) else { return };
        let fin_acked = tcb.flags.has(TcbFlags::FIN_SENT) && tcb.snd.una == tcb.snd.nxt;
        match tcb.state {
            // "In addition to the processing for the ESTABLISHED state, if the FIN segment
            // is now acknowledged, then enter FIN-WAIT-2".
            State::FinWait1 if fin_acked => {
                let orphan = tcb.flags.has(TcbFlags::ORPHAN);
                self.tcp_set_state(h, State::FinWait2);
                if orphan {
                    // An orphan does not wait forever for the peer's FIN (tcp_fin_timeout).
                    let timeout = Duration::from_secs(self.sysctl.tcp_fin_timeout);
                    if let Some(t) = self.tcp.get_mut(h) {
                        t.timers.keepalive = now + timeout;
                    }
                    self.tcp_arm(h);
                }
            }
            // "if the ACK acknowledges our FIN, then enter the TIME-WAIT state".
            State::Closing if fin_acked => return self.tcp_time_wait(now, h),
            // "The only thing that can arrive in this state is an acknowledgment of our
            // FIN. If our FIN is now acknowledged, delete the TCB, enter the CLOSED state".
            State::LastAck if fin_acked => return self.tcp_done(h, None),
            _ => {}
        }

        // ---- sixth, check the URG bit ------------------------------------------------
        // Urgent data is not supported (RFC 6093 §6 advises new applications not to use
        // it); the urgent pointer is ignored and the data delivered in line.

        // ---- seventh, process the segment text --------------------------------------
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if !seg.payload.is_empty() {
            if !tcb.state.can_receive() {
                // After the peer's FIN: "This should not occur ... Ignore the segment text."
                self.mib.drop(DropReason::TcpOldData);
            } else if tcb.flags.has(TcbFlags::RCV_SHUTDOWN) && tcb.flags.has(TcbFlags::ORPHAN) {
                // Linux tcp_rcv_state_process: data for a closed socket resets it
                // (TCPAbortOnData; RFC 9293 §3.10.4 lets a closed receiver abort).
                self.mib.inc(Counter::TcpExtTCPAbortOnData);
                let (tuple, seq) = (tcb.tuple, tcb.snd.nxt);
                self.tcp_send_reset(now, tuple, seq, None);
                return self.tcp_done(h, None);
            } else {
                self.tcp_data_queue(now, h, seg);
            }
        }

        // ---- eighth, check the FIN bit ------------------------------------------------
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if f.contains(Flags::FIN)
            && seg.seq_number + seg.payload.len() == tcb.rcv.nxt
            && !tcb.state.fin_received()
        {
            // "advance RCV.NXT over the FIN, and send an acknowledgment for the FIN".
            tcb.rcv.nxt += 1;
            tcb.flags.set(TcbFlags::ACK_NOW);
            let fin_acked = tcb.flags.has(TcbFlags::FIN_SENT) && tcb.snd.una == tcb.snd.nxt;
            match tcb.state {
                State::SynReceived | State::Established => self.tcp_set_state(h, State::CloseWait),
                State::FinWait1 if fin_acked => {
                    self.tcp_send_ack(now, h);
                    return self.tcp_time_wait(now, h);
                }
                State::FinWait1 => self.tcp_set_state(h, State::Closing),
                State::FinWait2 => {
                    self.tcp_send_ack(now, h);
                    return self.tcp_time_wait(now, h);
                }
                _ => {}
            }
        } else if f.contains(Flags::FIN) {
            // A FIN ahead of missing data: acknowledge what we have; the peer retransmits.
            tcb.flags.set(TcbFlags::ACK_NOW);
        }
        self.tcp_output(now, h);
    }

    /// RFC 9293 §3.10.7.3 SYN-SENT.
    fn syn_sent_input(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        let f = seg.flags;
        // "first, check the ACK bit: If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset
        // (unless the RST bit is set, if so drop the segment and return)".
        let ack_ok = f.contains(Flags::ACK)
            && seg.ack_number.after(tcb.snd.iss)
            && !seg.ack_number.after(tcb.snd.nxt);
        if f.contains(Flags::ACK) && !ack_ok {
            if !f.contains(Flags::RST) {
                let tuple = tcb.tuple;
                self.tcp_send_reset(now, tuple, seg.ack_number, None);
            }
            return self.mib.drop(DropReason::TcpAckUnsentData);
        }
        // "second, check the RST bit: If the ACK was acceptable, then signal to the user
        // 'error: connection reset', drop the segment, enter CLOSED state".
        if f.contains(Flags::RST) {
            if ack_ok {
                return self.tcp_done(h, Some(Error::ConnectionRefused));
            }
            return self.mib.drop(DropReason::TcpReset);
        }
        // "fourth, check the SYN bit".
        if !f.contains(Flags::SYN) {
            return self.mib.drop(DropReason::TcpFlags);
        }
        tcb.rcv.irs = seg.seq_number;
        tcb.rcv.nxt = seg.seq_number + 1;
        tcb.rcv.wup = tcb.rcv.nxt;
        // RCV.WND: what our SYN offered (unscaled there, RFC 7323 §2.2).
        tcb.rcv.wnd = (self.sysctl.tcp_rmem_default as u32).min(65_535);
        Stack::apply_syn_options(
            &self.sysctl,
            tcb,
            seg.max_seg_size.unwrap_or(super::output::DEFAULT_MSS),
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
        if ack_ok {
            // "If SND.UNA > ISS (our SYN has been ACKed), change the connection state to
            // ESTABLISHED, form an ACK segment ... and send it."
            self.tcp_ack_advance(now, h, seg);
            self.tcp_set_state(h, State::Established);
            if let Some(tcb) = self.tcp.get_mut(h) {
                tcb.flags.set(TcbFlags::ACK_NOW);
            }
        } else {
            // Simultaneous open: "Otherwise, enter SYN-RECEIVED, form a SYN,ACK segment".
            self.tcp_set_state(h, State::SynReceived);
            self.tcp_send_syn_ack_tcb(now, h);
            return;
        }
        self.tcp_output(now, h);
    }

    /// Process the acknowledgment of a segment (Linux `tcp_ack`): window update, newly
    /// acknowledged data, SACK, duplicate-ACK and loss detection, congestion control.
    fn tcp_ack(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        // RFC 9293 §3.10.7.4: "If SND.UNA =< SEG.ACK =< SND.NXT, the send window should be
        // updated. If (SND.WL1 < SEG.SEQ or (SND.WL1 = SEG.SEQ and SND.WL2 =< SEG.ACK)),
        // set SND.WND <- SEG.WND, set SND.WL1 <- SEG.SEQ, and set SND.WL2 <- SEG.ACK."
        let window = u32::from(seg.window_len) << tcb.snd_wscale;
        let window_changed = window != tcb.snd.wnd;
        if tcb.snd.wl1.before(seg.seq_number)
            || (tcb.snd.wl1 == seg.seq_number && !seg.ack_number.before(tcb.snd.wl2))
        {
            tcb.snd.wnd = window;
            tcb.snd.wl1 = seg.seq_number;
            tcb.snd.wl2 = seg.ack_number;
            tcb.snd.max_wnd = tcb.snd.max_wnd.max(window);
            if window > 0 {
                tcb.probes = 0;
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
        // SACK information, on any ACK (RFC 6675 §5 "update the scoreboard").
        let sacked = if tcb.flags.has(TcbFlags::SACK_OK) && seg.sack_ranges[0].is_some() {
            let mut blocks = [(SeqNumber(0), SeqNumber(0)); 4];
            let mut n = 0;
            for (start, end) in seg.sack_ranges.iter().flatten() {
                blocks[n] = (*start, *end);
                n += 1;
            }
            let (una, nxt) = (tcb.snd.una, tcb.snd.nxt);
            let r = tcb.rtx.on_sack(&blocks[..n], una, nxt);
            if r.dsack {
                self.mib.inc(Counter::TcpExtTCPDSACKRecv);
            }
            r.newly_sacked
        } else {
            0
        };
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if seg.ack_number.after(tcb.snd.una) {
            self.tcp_ack_advance(now, h, seg);
        } else if seg.ack_number == tcb.snd.una
            && seg.payload.is_empty()
            && !seg.flags.intersects(Flags::SYN | Flags::FIN)
            && !window_changed
            && !tcb.rtx.is_empty()
        {
            // RFC 5681 §2 "DUPLICATE ACKNOWLEDGMENT" (all five conditions).
            tcb.dupacks = tcb.dupacks.saturating_add(1);
            self.tcp_dupack(now, h, sacked);
        } else if sacked > 0 {
            self.tcp_dupack(now, h, sacked);
        }
    }

    /// New data acknowledged: free it, take an RTT sample, grow cwnd or leave recovery,
    /// restart the retransmission timer (RFC 6298 §5.2-5.3).
    fn tcp_ack_advance(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        let Some((tcb, pool)) = self.tcp.split(h) else {
            return;
        };
        let ack = seg.ack_number;
        let data_start = tcb.data_start();
        let data_acked = (ack.diff(data_start).max(0) as usize).min(tcb.sndbuf.len());
        tcb.sndbuf.consume(pool, data_acked);
        // Congestion control judges by what was in flight before this ACK (Linux
        // `prior_in_flight` in tcp_ack).
        let prior_in_flight = tcb.rtx.in_flight();
        let result = tcb.rtx.on_ack(ack, now);
        tcb.snd.una = ack;
        tcb.dupacks = 0;
        tcb.probes = 0;
        // RTT: from the echoed timestamp when timestamps are on (RFC 7323 §4.1, no Karn
        // ambiguity), else from a never-retransmitted segment (Karn, RFC 6298 §3).
        let ts_rtt = tcb
            .flags
            .has(TcbFlags::TS_OK)
            .then_some(seg.timestamp)
            .flatten()
            .filter(|t| t.tsecr != 0)
            .map(|t| {
                let sent = t.tsecr.wrapping_sub(tcb.ts_offset);
                Duration::from_millis(u64::from(ts_clock(now).wrapping_sub(sent)))
            });
        if let Some(rtt) = ts_rtt
            .filter(|d| *d < Duration::from_secs(600))
            .or(result.rtt_sample)
        {
            tcb.rtt.sample(rtt);
        }
        tcb.rtt.reset_backoff();
        // Congestion control (Linux tcp_cong_control / tcp_fastretrans_alert on a new ACK).
        let acked = result.acked_segments;
        tcb.cs.in_flight = prior_in_flight;
        match tcb.ca_state {
            CaState::Recovery | CaState::Loss if !ack.before(tcb.high_seq) => {
                // Recovery ends when everything outstanding at its start is acknowledged
                // (RFC 6582 §3.2 step 3 "full acknowledgment": cwnd = ssthresh).
                tcb.cs.cwnd = tcb.cs.ssthresh.max(2).min(tcb.cs.cwnd.max(tcb.cs.ssthresh));
                tcb.ca_state = CaState::Open;
                tcb.cc.set_state(&mut tcb.cs, CaState::Open);
                tcb.cc.cwnd_event(&mut tcb.cs, now, CaEvent::CompleteCwr);
            }
            CaState::Recovery if !tcb.flags.has(TcbFlags::SACK_OK) => {
                // NewReno partial ACK (RFC 6582 §3.2 step 4): the next segment is lost too.
                tcb.rtx.mark_head_lost();
            }
            CaState::Loss => {
                // After an RTO, slow start toward ssthresh while retransmitting (RFC 5681 §3.1).
                tcb.cc
                    .pkts_acked(&mut tcb.cs, now, acked, result.rtt_sample);
                tcb.cc.cong_avoid(&mut tcb.cs, now, acked);
            }
            CaState::Recovery => {}
            _ => {
                tcb.cc
                    .pkts_acked(&mut tcb.cs, now, acked, result.rtt_sample);
                tcb.cc.cong_avoid(&mut tcb.cs, now, acked);
            }
        }
        // RFC 6298 §5.2: "When all outstanding data has been acknowledged, turn off the
        // retransmission timer." §5.3: "When an ACK is received that acknowledges new
        // data, restart the retransmission timer".
        tcb.timers.retransmit = if tcb.rtx.is_empty() {
            Instant::FAR_FUTURE
        } else {
            now + tcb.rtt.rto()
        };
        self.tcp_arm(h);
    }

    /// A duplicate ACK or new SACK information: detect loss and enter fast recovery
    /// (RFC 5681 §3.2, RFC 6582, RFC 6675 §5).
    fn tcp_dupack(&mut self, now: Instant, h: TcpHandle, _newly_sacked: u32) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        let sack = tcb.flags.has(TcbFlags::SACK_OK);
        let lost = if sack {
            tcb.rtx.mark_lost(DUP_THRESH)
        } else {
            0
        };
        let enter = match tcb.ca_state {
            CaState::Open | CaState::Disorder => {
                if sack {
                    lost > 0
                } else {
                    u32::from(tcb.dupacks) >= DUP_THRESH
                }
            }
            _ => false,
        };
        if !enter {
            if tcb.ca_state == CaState::Open && (tcb.dupacks > 0 || tcb.rtx.sacked_out() > 0) {
                tcb.ca_state = CaState::Disorder;
            }
            return;
        }
        // RFC 6675 §5 step (4.2)/RFC 5681 §3.2 step 2: ssthresh = cc's choice; RecoveryPoint
        // = HighData; cwnd = ssthresh (Linux uses PRR here; ustack the RFC's rule).
        if !sack {
            tcb.rtx.mark_head_lost();
            self.mib.inc(Counter::TcpExtTCPRenoRecovery);
        } else {
            self.mib.inc(Counter::TcpExtTCPSackRecovery);
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        tcb.high_seq = tcb.snd.nxt;
        tcb.cs.in_flight = tcb.rtx.in_flight();
        tcb.cs.ssthresh = tcb.cc.ssthresh(&tcb.cs);
        tcb.cs.cwnd = tcb.cs.ssthresh.max(2);
        tcb.ca_state = CaState::Recovery;
        tcb.cc.set_state(&mut tcb.cs, CaState::Recovery);
        self.mib.inc(Counter::TcpExtTCPFastRetrans);
        let _ = now;
    }

    /// Put the data of a segment into the receive buffer (Linux `tcp_data_queue`) and
    /// decide how to acknowledge it (delayed ACK, RFC 9293 §3.8.6.3; Linux quick-ACK mode).
    fn tcp_data_queue(&mut self, now: Instant, h: TcpHandle, seg: &tcp::Repr) {
        let Some((tcb, pool)) = self.tcp.split(h) else {
            return;
        };
        let mut data = seg.payload;
        let mut seq = seg.seq_number;
        let sack = tcb.flags.has(TcbFlags::SACK_OK);
        // Trim what we already have (a retransmission overlapping RCV.NXT).
        if seq.before(tcb.rcv.nxt) {
            let dup = (tcb.rcv.nxt - seq).min(data.len());
            // RFC 2883 §4 (Linux tcp_send_dupack / "Partial packet" in tcp_data_queue):
            // report the duplicate bytes in a D-SACK block, so that the sender can tell a
            // needless retransmission.
            if sack {
                tcb.rx_sack.set_dsack(seq, seq + dup);
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
            // Linux tcp_event_data_recv: sample the receiver's RTT, and (Linux does it
            // when the application reads, tcp_recvmsg) size the receive buffer to what
            // the application has been reading.
            Self::tcp_rcv_rtt_measure(tcb, now, seg);
            Self::tcp_rcv_space_adjust(tcb, now, self.sysctl.tcp_rmem_max);
        }
        let limit = tcb.rcvbuf_limit as usize;
        let r = tcb.rcvbuf.insert(pool, offset, data, limit);
        tcb.rcv.nxt += r.advanced;
        if r.dropped > 0 {
            self.mib.inc(Counter::TcpExtTCPRcvQDrop);
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        // The receiver's SACK blocks (RFC 2018 §4; Linux tcp_data_queue_ofo,
        // tcp_sack_new_ofo_skb, tcp_sack_remove).
        if sack {
            let end = seq + data.len();
            if offset > 0 && r.duplicate == data.len() {
                // Everything was already queued: a D-SACK of it (RFC 2883 §4; Linux
                // tcp_data_queue_ofo counts TCPOFOMerge and TCPDSACKOfoSent).
                tcb.rx_sack.set_dsack(seq, end);
                self.mib.inc(Counter::TcpExtTCPOFOMerge);
                self.mib.inc(Counter::TcpExtTCPDSACKOfoSent);
            } else if offset > 0 && r.dropped == 0 {
                tcb.rx_sack.on_ofo(seq, end);
            }
            if tcb.rcvbuf.ooo_bytes() == 0 {
                tcb.rx_sack.clear_blocks();
            } else {
                if r.advanced > 0 {
                    let rcv_nxt = tcb.rcv.nxt;
                    tcb.rx_sack.on_rcv_nxt(rcv_nxt);
                }
                if r.dropped > 0 || r.pruned > 0 {
                    self.tcp_sack_retain_held(h);
                }
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
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
        // RFC 9293 §3.8.6.3: "an ACK SHOULD be generated for at least every second
        // full-sized segment"; Linux also ACKs at once in quick-ACK mode (start of a
        // connection) and otherwise delays up to the ATO.
        let unacked = tcb.rcv.nxt - tcb.rcv.wup;
        if tcb.quick_acks > 0
            || unacked >= 2 * usize::from(tcb.mss)
            || tcb.flags.has(TcbFlags::ACK_PENDING) && unacked > usize::from(tcb.mss)
        {
            tcb.flags.set(TcbFlags::ACK_NOW);
        } else {
            tcb.flags.set(TcbFlags::ACK_PENDING);
            if tcb.timers.delack == Instant::FAR_FUTURE {
                tcb.timers.delack = now + DELACK;
                self.tcp_arm(h);
            }
        }
    }

    /// The receiver's RTT estimate (Linux `tcp_rcv_rtt_measure_ts`, from the timestamp a
    /// full-sized segment echoes; without timestamps `tcp_rcv_rtt_measure`, the time
    /// until a window's worth of data arrived).
    fn tcp_rcv_rtt_measure(tcb: &mut Tcb, now: Instant, seg: &tcp::Repr) {
        let rs = &mut tcb.rcv_space;
        if tcb.flags.has(TcbFlags::TS_OK) {
            let Some(ts) = seg.timestamp.filter(|t| t.tsecr != 0) else {
                return;
            };
            if ts.tsecr == rs.last_tsecr {
                return;
            }
            rs.last_tsecr = ts.tsecr;
            if seg.payload.len() >= usize::from(tcb.mss) {
                let delta_ms = ts_clock(now).wrapping_sub(ts.tsecr.wrapping_sub(tcb.ts_offset));
                if (delta_ms as i32) >= 0 {
                    rs.rtt_update(delta_ms.saturating_mul(1000), false);
                }
            }
            return;
        }
        if rs.rtt_time != Instant::ZERO {
            if tcb.rcv.nxt.before(rs.rtt_seq) {
                return;
            }
            let us = (now - rs.rtt_time).as_micros().min(u128::from(u32::MAX)) as u32;
            rs.rtt_update(us, true);
        }
        rs.rtt_seq = tcb.rcv.nxt + tcb.rcv.wnd as usize;
        rs.rtt_time = now;
    }

    /// Receive-buffer autotuning (Linux `tcp_rcv_space_adjust`, "dynamic right-sizing"):
    /// once per receiver RTT, if the application read more than in the RTT before, raise
    /// the receive buffer limit to twice what it read plus 16 segments, more while the
    /// rate is growing ("To cope with packet losses, we need a 2x factor. To cope with slow
    /// start ... a 4x factor"), never above `tcp_rmem.max`. The window offered follows the
    /// limit (RFC 7323 §2.3 window scaling makes room for it).
    fn tcp_rcv_space_adjust(tcb: &mut Tcb, now: Instant, rmem_max: u64) {
        let copied_seq = tcb.rcv.nxt - tcb.rcvbuf.readable();
        let advmss = u64::from(tcb.adv_mss);
        let rs = &mut tcb.rcv_space;
        if rs.time == Instant::ZERO {
            // Linux tcp_init_buffer_space: "rcvq_space.space = min3(rcv_ssthresh, rcv_wnd,
            // TCP_INIT_CWND * advmss)".
            rs.space = (u64::from(tcb.rcv.wnd).min(10 * advmss) as u32).max(1);
            rs.seq = copied_seq;
            rs.time = now;
            return;
        }
        if rs.rtt_us8 == 0 || ((now - rs.time).as_micros() as u64) < u64::from(rs.rtt_us8 >> 3) {
            return;
        }
        let copied = copied_seq.diff(rs.seq).max(0) as u64;
        if copied > u64::from(rs.space) {
            let space = u64::from(rs.space).max(1);
            let mut rcvwin = 2 * copied + 16 * advmss;
            let grow = rcvwin * (copied - space) / space;
            rcvwin += 2 * grow;
            let rcvbuf = rcvwin.min(rmem_max).min(u64::from(u32::MAX)) as u32;
            if rcvbuf > tcb.rcvbuf_limit {
                tcb.rcvbuf_limit = rcvbuf;
            }
            rs.space = copied.min(u64::from(u32::MAX)) as u32;
        }
        rs.seq = copied_seq;
        rs.time = now;
    }

    /// Cut the receiver's SACK blocks to what the out-of-order queue holds, after the
    /// buffer refused or pruned data (see [`super::tcb::RxSack::retain_held`]).
    fn tcp_sack_retain_held(&mut self, h: TcpHandle) {
        /// Extents looked at: blocks beyond the 64th hole are dropped, never invented.
        const MAX_EXTENTS: usize = 64;
        let Some((tcb, pool)) = self.tcp.split(h) else {
            return;
        };
        let mut ranges = [(0usize, 0usize); MAX_EXTENTS];
        let n = tcb.rcvbuf.ooo_ranges(pool, &mut ranges);
        let mut held = [(SeqNumber(0), SeqNumber(0)); MAX_EXTENTS];
        for (o, r) in held.iter_mut().zip(&ranges[..n]) {
            *o = (tcb.rcv.nxt + r.0, tcb.rcv.nxt + r.1);
        }
        tcb.rx_sack.retain_held(&held[..n]);
    }

    /// A challenge ACK (RFC 5961 §3.2, §4.2), within `tcp_challenge_ack_limit` per second
    /// stack-wide (RFC 5961 §7; Linux `tcp_send_challenge_ack`).
    fn tcp_challenge_ack(&mut self, now: Instant, h: TcpHandle) {
        let second = now.as_millis() / 1000;
        if self.tcp.challenge.0 != second {
            self.tcp.challenge = (second, 0);
        }
        if u64::from(self.tcp.challenge.1) >= self.sysctl.tcp_challenge_ack_limit {
            return;
        }
        self.tcp.challenge.1 += 1;
        self.mib.inc(Counter::TcpExtTCPChallengeACK);
        self.tcp_send_ack(now, h);
    }

    /// The connection is over (Linux `tcp_done`): an orphan is forgotten; otherwise the
    /// user keeps a CLOSED socket with the error to report and any unread data.
    pub(crate) fn tcp_done(&mut self, h: TcpHandle, error: Option<Error>) {
        let Some(tcb) = self.tcp.get(h) else { return };
        if matches!(tcb.state, State::SynSent | State::SynReceived) {
            self.mib.inc(Counter::TcpAttemptFails);
        }
        let orphan = tcb.flags.has(TcbFlags::ORPHAN);
        self.tcp_set_state(h, State::Closed);
        if orphan {
            self.tcp_destroy(h);
            return;
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        tcb.error = error;
        let Some((tcb, pool)) = self.tcp.split(h) else {
            return;
        };
        tcb.sndbuf.clear(pool);
        tcb.rtx = super::sack::RtxQueue::new();
        tcb.timers = super::tcb::Timers::NONE;
        let tuple = tcb.tuple;
        self.tcp.ehash.remove(&tuple);
    }
}
