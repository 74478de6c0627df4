//! Loss recovery and undo (Linux `net/ipv4/tcp_recovery.c` and the recovery
//! half of `tcp_input.c`: `tcp_fastretrans_alert`, `tcp_enter_recovery`,
//! `tcp_cwnd_reduction`, the `tcp_try_undo_*` family, `tcp_process_tlp_ack`, and
//! `tcp_enter_loss`, which the retransmission timer calls).
//!
//! The ACK path ([`super::input`]) updates the scoreboard and hands what the ACK did (an
//! [`AckEvent`]) to [`Sock::tcp_fastretrans_alert`], which marks lost segments (RFC 6675
//! §4 `IsLost`, RFC 8985 RACK), enters or leaves fast recovery (RFC 5681 §3.2, RFC 6582,
//! RFC 6675 §5), and undoes a reduction that proved needless (RFC 2883 §5 D-SACK, RFC 3522
//! Eifel detection). [`Sock::tcp_cwnd_reduction`] is RFC 6937 PRR. The lost segments are
//! sent by `tcp_output`.

use ustack_obs::{Counter, Instant};
use ustack_wire::SeqNumber;

use super::cc::{CaEvent, CaState, CongestionControl, TCP_INFINITE_SSTHRESH};
use super::input::AckEvent;
use super::scoreboard::SegFlags;
use super::sock::Sock;
use super::tcb::{Tcb, TcbFlags};

/// RFC 5681 §3.2: fast retransmit after three duplicate ACKs (DupThresh, RFC 6675 §2;
/// Linux `tcp_reordering`).
pub(crate) const DUP_THRESH: u32 = 3;
/// The largest DupThresh reordering may raise it to (Linux `tcp_max_reordering`).
pub(crate) const MAX_REORDERING: u32 = 300;

impl Sock<'_> {
    /// What became of an outstanding tail loss probe (RFC 8985 §7.4; Linux
    /// `tcp_process_tlp_ack`): a probe of new data, or a retransmission the receiver
    /// reports as a duplicate, found no loss; an ACK beyond the probe's SND.NXT after a
    /// retransmitted probe means the probe repaired a loss, and cwnd is reduced once
    /// (TCPLossProbeRecovery).
    pub(crate) fn tcp_process_tlp_ack(&mut self, now: Instant, ack: SeqNumber, ev: &AckEvent) {
        let tcb = &mut *self.tcb;
        let Some(high) = tcb.active.recovery.tlp_high_seq else {
            return;
        };
        if ack.before(high) {
            return;
        }
        if !tcb.active.recovery.tlp_retrans || ev.dsack.is_some_and(|(_, e)| !e.after(high)) {
            tcb.active.recovery.tlp_high_seq = None;
        } else if ack.after(high) {
            // Linux: tcp_init_cwnd_reduction, CWR, tcp_end_cwnd_reduction.
            tcb.active.recovery.tlp_high_seq = None;
            tcb.active.recovery.prior_cwnd = tcb.congestion.cwnd;
            let in_flight = tcb.in_flight();
            tcb.with_cc(|cc, st| {
                st.in_flight = in_flight;
                st.ssthresh = cc.ssthresh(st);
                st.cwnd = st.ssthresh.max(2);
                st.cwnd_cnt = 0;
                cc.cwnd_event(st, now, CaEvent::CompleteCwr);
            });
            self.mib.inc(Counter::TcpExtTCPLossProbeRecovery);
        } else if !ev.una_advanced && ev.sacked == 0 {
            // A pure duplicate ACK: the original and the probe both arrived.
            tcb.active.recovery.tlp_high_seq = None;
        }
    }

    /// Loss detection and the recovery state machine (Linux `tcp_fastretrans_alert`):
    /// mark lost segments (RFC 6675 §4 `IsLost`), leave a recovery that is complete
    /// (RFC 6582 §3.2 step 3), undo a reduction that proved needless, enter fast recovery
    /// (RFC 6675 §5 / RFC 5681 §3.2).
    pub(crate) fn tcp_fastretrans_alert(&mut self, now: Instant, ev: &AckEvent) {
        let tcb = &mut *self.tcb;
        let sack = tcb.flags.has(TcbFlags::SACK_OK);
        if tcb.ca_state == CaState::Open && tcb.rtx().sacked_out() == 0 && tcb.active.dupacks == 0 {
            // Nothing suspicious: Linux takes tcp_fastretrans_alert only for "dubious" ACKs.
            tcb.active.recovery.retrans_stamp = 0;
            return;
        }
        if sack {
            // RFC 6675 §4 IsLost with DupThresh = tp->reordering. In recovery, once no
            // reordering was seen, every hole below a SACKed segment is lost: RFC 8985's
            // RACK with its reordering window at zero during recovery (§6.2 step 4, Linux
            // tcp_rack_reo_wnd "be aggressive during the recovery").
            let thresh = if matches!(tcb.ca_state, CaState::Recovery | CaState::Loss)
                && !tcb.active.recovery.reord_seen
            {
                1
            } else {
                tcb.active.recovery.reordering
            };
            if let Some(q) = tcb.rtx_mut() {
                q.mark_lost(thresh);
            }
        }
        // D. Exit conditions: the recovery point (RFC 6582 "recover", Linux high_seq) is
        // acknowledged.
        if tcb.ca_state == CaState::Recovery && !tcb.snd.una.before(tcb.active.high_seq) {
            if !sack {
                tcb.active.dupacks = 0;
            }
            if self.tcp_try_undo_recovery(ev) {
                return;
            }
            self.tcp_end_cwnd_reduction(now);
        }
        // E. Process the state.
        match self.tcb.ca_state {
            CaState::Recovery => {
                if ev.una_advanced && !sack {
                    // RFC 6582 §3.2 step 4, partial acknowledgment: "retransmit the first
                    // unacknowledged segment" (Linux tcp_update_scoreboard for Reno).
                    if let Some(q) = self.tcb.rtx_mut() {
                        q.mark_head_lost();
                    }
                }
                if self.tcp_try_undo_dsack() {
                    self.tcp_try_to_open();
                }
            }
            CaState::Loss => {
                // Linux tcp_process_loss.
                if ev.una_advanced && self.tcp_try_undo_loss(ev) {
                    return;
                }
                if !self.tcb.snd.una.before(self.tcb.active.high_seq) {
                    self.tcp_try_undo_recovery(ev);
                }
            }
            _ => {
                if !sack && ev.una_advanced {
                    self.tcb.active.dupacks = 0;
                }
                if matches!(self.tcb.ca_state, CaState::Open | CaState::Disorder) {
                    self.tcp_try_undo_dsack();
                }
                let tcb = &mut *self.tcb;
                // RFC 8985 §6.2 (Linux tcp_rack_detect_loss): the first hole is lost once
                // a segment sent sufficiently after it was delivered, whatever the number
                // of SACKed segments; a tail loss probe's SACK shows this within about two
                // round trips instead of a timeout.
                if sack
                    && tcb.rtx().sacked_out() > 0
                    && tcb.rack_head_lost()
                    && let Some(q) = tcb.rtx_mut()
                {
                    q.mark_head_lost();
                }
                // Linux tcp_time_to_recover: a segment is lost, or DupThresh segments
                // left the network above the first hole (RFC 5681 §3.2 three duplicate
                // ACKs; RFC 6675 §5 "DupThresh ... SACKed").
                let left = if sack {
                    tcb.rtx().sacked_out()
                } else {
                    tcb.active.dupacks
                };
                if tcb.rtx().lost_out() == 0 && left < tcb.active.recovery.reordering {
                    self.tcp_try_to_open();
                    return;
                }
                self.tcp_enter_recovery();
                let tcb = &mut *self.tcb;
                if sack
                    && !tcb.active.recovery.reord_seen
                    && let Some(q) = tcb.rtx_mut()
                {
                    q.mark_lost(1);
                }
                // RFC 6675 §5 (4.3) / RFC 5681 §3.2 step 2: "retransmit the first data
                // segment presumed dropped" (Linux tcp_update_scoreboard with fast_rexmit).
                if tcb.rtx().lost_out() == 0
                    && let Some(q) = tcb.rtx_mut()
                {
                    q.mark_head_lost();
                }
            }
        }
    }

    /// Enter fast recovery (Linux `tcp_enter_recovery`, `tcp_init_cwnd_reduction`):
    /// RecoveryPoint = HighData (RFC 6675 §5 (4.1)), ssthresh from the congestion control
    /// (RFC 5681 §3.2 eq. (4); RFC 9438 §4.6), and PRR's counters (RFC 6937 §3
    /// "Initialization on entering recovery").
    fn tcp_enter_recovery(&mut self) {
        let tcb = &mut *self.tcb;
        self.mib.inc(if tcb.flags.has(TcbFlags::SACK_OK) {
            Counter::TcpExtTCPSackRecovery
        } else {
            Counter::TcpExtTCPRenoRecovery
        });
        // Linux tcp_init_undo.
        tcb.active.recovery.prior_ssthresh = 0;
        tcb.active.recovery.undo_marker = Some(tcb.snd.una);
        tcb.active.recovery.undo_retrans = match tcb.rtx().retrans_out() {
            0 => -1,
            n => n as i32,
        };
        if !matches!(tcb.ca_state, CaState::Cwr | CaState::Recovery) {
            tcb.active.recovery.prior_ssthresh = tcb.current_ssthresh();
            tcb.active.high_seq = tcb.snd.nxt;
            tcb.active.recovery.tlp_high_seq = None;
            tcb.active.cwnd_cnt = 0;
            tcb.active.recovery.prior_cwnd = tcb.congestion.cwnd;
            tcb.active.recovery.prr_delivered = 0;
            tcb.active.recovery.prr_out = 0;
            let in_flight = tcb.in_flight();
            tcb.with_cc(|cc, st| {
                st.in_flight = in_flight;
                st.ssthresh = cc.ssthresh(st);
            });
        }
        tcb.set_ca_state(CaState::Recovery);
    }

    /// RFC 6937 PRR, on every ACK in recovery (Linux `tcp_cwnd_reduction`): send in
    /// proportion to what is delivered while the pipe is above ssthresh, then (PRR-SSRB)
    /// catch up to ssthresh no faster than slow start. cwnd is set to pipe + sndcnt.
    pub(crate) fn tcp_cwnd_reduction(&mut self, delivered: u32) {
        let tcb = &mut *self.tcb;
        if delivered == 0 || tcb.active.recovery.prior_cwnd == 0 {
            return;
        }
        tcb.active.recovery.prr_delivered += delivered;
        let pipe = tcb.in_flight();
        let rec = &tcb.active.recovery;
        let ssthresh = tcb.congestion.ssthresh;
        let mut sndcnt: i64 = if pipe > ssthresh {
            // "sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out"
            let target = (u64::from(rec.prr_delivered) * u64::from(ssthresh))
                .div_ceil(u64::from(rec.prior_cwnd));
            target as i64 - i64::from(rec.prr_out)
        } else {
            // PRR-SSRB: "limit = MAX(prr_delivered - prr_out, DeliveredData) + MSS;
            // sndcnt = MIN(ssthresh - pipe, limit)"
            let limit = (i64::from(rec.prr_delivered) - i64::from(rec.prr_out))
                .max(i64::from(delivered))
                + 1;
            limit.min(i64::from(ssthresh - pipe))
        };
        // Linux: "Force a fast retransmit upon entering fast recovery".
        if rec.prr_out == 0 {
            sndcnt = sndcnt.max(1);
        }
        tcb.congestion.cwnd = pipe + sndcnt.max(0) as u32;
    }

    /// Leave a reduction (Linux `tcp_end_cwnd_reduction`): cwnd = ssthresh (RFC 6582 §3.2
    /// step 3 "full acknowledgment", option 2; RFC 6937 §3 ends the same way), and Open.
    fn tcp_end_cwnd_reduction(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        if tcb.congestion.ssthresh < TCP_INFINITE_SSTHRESH
            && (tcb.ca_state == CaState::Cwr || tcb.active.recovery.undo_marker.is_some())
        {
            tcb.congestion.cwnd = tcb.congestion.ssthresh.max(2);
        }
        tcb.with_cc(|cc, st| cc.cwnd_event(st, now, CaEvent::CompleteCwr));
        self.tcp_try_to_open();
    }

    /// Open, or Disorder while SACKed, lost or retransmitted segments remain (Linux
    /// `tcp_try_to_open` / `tcp_try_keep_open`).
    fn tcp_try_to_open(&mut self) {
        let tcb = &mut *self.tcb;
        if tcb.rtx().retrans_out() == 0
            && tcb
                .rtx()
                .front()
                .is_none_or(|s| !s.flags.contains(SegFlags::EVER_RETRANS))
        {
            tcb.active.recovery.retrans_stamp = 0;
        }
        let left_out = tcb.rtx().sacked_out() + tcb.rtx().lost_out() + tcb.active.dupacks;
        let state = if left_out > 0 || tcb.rtx().retrans_out() > 0 {
            CaState::Disorder
        } else {
            CaState::Open
        };
        if tcb.ca_state != state {
            tcb.set_ca_state(state);
            tcb.active.high_seq = tcb.snd.nxt;
        }
    }

    /// Recovery (or Loss) ended (Linux `tcp_try_undo_recovery`): undo if it proved
    /// needless (TCPFullUndo, TCPLossUndo). A connection without SACK holds Recovery until
    /// something above the recovery point is acknowledged (RFC 6582 §3.2 step 1 guards
    /// against a second, false fast retransmit); returns true then.
    fn tcp_try_undo_recovery(&mut self, ev: &AckEvent) -> bool {
        let tcb = &mut *self.tcb;
        if tcp_may_undo(tcb, ev) {
            let counter = if tcb.ca_state == CaState::Loss {
                Counter::TcpExtTCPLossUndo
            } else {
                Counter::TcpExtTCPFullUndo
            };
            tcp_undo_cwnd_reduction(tcb, false);
            self.mib.inc(counter);
        }
        if tcb.snd.una == tcb.active.high_seq && !tcb.flags.has(TcbFlags::SACK_OK) {
            if tcb.rtx().retrans_out() == 0 {
                tcb.active.recovery.retrans_stamp = 0;
            }
            return true;
        }
        tcb.set_ca_state(CaState::Open);
        false
    }

    /// D-SACKs reported every retransmission of the episode as needless: undo (Linux
    /// `tcp_try_undo_dsack`, TCPDSACKUndo; RFC 2883 §5).
    fn tcp_try_undo_dsack(&mut self) -> bool {
        let tcb = &mut *self.tcb;
        if tcb.active.recovery.undo_marker.is_some() && tcb.active.recovery.undo_retrans == 0 {
            tcp_undo_cwnd_reduction(tcb, false);
            self.mib.inc(Counter::TcpExtTCPDSACKUndo);
            return true;
        }
        false
    }

    /// A timeout proved spurious (the ACK echoes a timestamp from before the first
    /// retransmission): restore cwnd, forget the lost marks, leave Loss (Linux
    /// `tcp_try_undo_loss`, TCPLossUndo; RFC 3522 §3.2, RFC 4015 §3).
    fn tcp_try_undo_loss(&mut self, ev: &AckEvent) -> bool {
        let tcb = &mut *self.tcb;
        if !tcp_may_undo(tcb, ev) {
            return false;
        }
        tcp_undo_cwnd_reduction(tcb, true);
        // Linux tcp_try_undo_loss: "inet_csk(sk)->icsk_retransmits = 0".
        tcb.rtt.clear_retransmits();
        if tcb.flags.has(TcbFlags::SACK_OK) {
            tcb.set_ca_state(CaState::Open);
        }
        self.mib.inc(Counter::TcpExtTCPLossUndo);
        true
    }

    /// Enter Loss after a timeout (Linux `tcp_enter_loss`): every segment not SACKed is
    /// presumed lost (RFC 6675 §5.1 keeps the SACK information), cwnd is the loss window
    /// (RFC 5681 §3.1 "LW ... one full-sized segment") and ssthresh is reduced unless
    /// this window's recovery already reduced it (RFC 5681 §3.1 eq. (4); Linux "Reduce
    /// ssthresh if it has not yet been made inside this window").
    pub(crate) fn tcp_enter_loss(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        let prior_state = tcb.ca_state;
        let prior_in_flight = tcb.in_flight();
        // Linux tcp_timeout_mark_lost -> tcp_mark_skb_lost: "Account for retransmits that
        // are lost again".
        let lost_again = tcb.rtx().retrans_out();
        if lost_again > 0 {
            self.mib
                .add(Counter::TcpExtTCPLostRetransmit, u64::from(lost_again));
        }
        if tcb.rtx_mut().is_some_and(|q| q.mark_all_lost()) {
            self.mib.inc(Counter::TcpExtTCPSACKReneging);
        }
        tcb.active.recovery.lost_retrans = 0;
        tcb.active.recovery.retrans_low = Instant::FAR_FUTURE;
        if matches!(prior_state, CaState::Open | CaState::Disorder)
            || !tcb.active.high_seq.after(tcb.snd.una)
            || (prior_state == CaState::Loss && tcb.rtt.retransmits() == 0)
        {
            tcb.active.recovery.prior_ssthresh = tcb.current_ssthresh();
            tcb.active.recovery.prior_cwnd = tcb.congestion.cwnd;
            tcb.with_cc(|cc, st| {
                st.in_flight = prior_in_flight;
                st.ssthresh = cc.ssthresh(st);
                cc.cwnd_event(st, now, CaEvent::Loss);
            });
            // Linux tcp_init_undo.
            tcb.active.recovery.undo_marker = Some(tcb.snd.una);
            tcb.active.recovery.undo_retrans = match tcb.rtx().retrans_out() {
                0 => -1,
                n => n as i32,
            };
        }
        tcb.congestion.cwnd = tcb.in_flight() + 1;
        tcb.active.cwnd_cnt = 0;
        // Linux: "Timeout in disordered state after receiving substantial DUPACKs suggests
        // that the degree of reordering is over-estimated."
        if matches!(prior_state, CaState::Open | CaState::Disorder)
            && tcb.rtx().sacked_out() >= DUP_THRESH
        {
            tcb.active.recovery.reordering = tcb.active.recovery.reordering.min(DUP_THRESH);
        }
        tcb.set_ca_state(CaState::Loss);
        tcb.active.high_seq = tcb.snd.nxt;
        tcb.active.dupacks = 0;
        tcb.active.recovery.tlp_high_seq = None;
    }

    /// Find retransmissions that were lost again: a retransmission sent before a segment
    /// that has since been delivered should have arrived first (RFC 8985 §6.2's rule,
    /// applied to retransmissions in flight; Linux counts TCPLostRetransmit). Without
    /// this, a lost retransmission holds up SND.UNA until the retransmission timer.
    /// They are sent again by `tcp_output`; until then they do not count in the pipe.
    pub(crate) fn tcp_find_lost_retrans(&mut self, now: Instant) {
        let tcb = &mut *self.tcb;
        if tcb.rtx().retrans_out() == 0 {
            tcb.active.recovery.retrans_low = Instant::FAR_FUTURE;
            tcb.active.recovery.lost_retrans = 0;
            return;
        }
        if !tcb.flags.has(TcbFlags::SACK_OK) {
            return;
        }
        let horizon = tcb.lost_retrans_horizon();
        if tcb.active.recovery.lost_retrans == 0 && tcb.active.recovery.retrans_low > horizon {
            return;
        }
        let (mut lost, mut low) = (0u32, Instant::FAR_FUTURE);
        for s in tcb.rtx().iter() {
            if s.flags.contains(SegFlags::RETRANS) && !s.flags.contains(SegFlags::SACKED) {
                if tcb.retrans_is_lost(now, s.sent_at, s.end) {
                    lost += 1;
                } else {
                    low = low.min(s.sent_at);
                }
            }
        }
        if lost > tcb.active.recovery.lost_retrans {
            self.mib.add(
                Counter::TcpExtTCPLostRetransmit,
                u64::from(lost - tcb.active.recovery.lost_retrans),
            );
        }
        tcb.active.recovery.lost_retrans = lost;
        tcb.active.recovery.retrans_low = low;
    }
}

/// Linux `tcp_may_undo`: the episode may be undone if every retransmission was
/// reported needless by a D-SACK (RFC 2883 §5), or the ACK echoes a timestamp older
/// than the first retransmission, so the original got through (RFC 3522 §3.2 Eifel
/// detection; Linux `tcp_packet_delayed`).
fn tcp_may_undo(tcb: &Tcb, ev: &AckEvent) -> bool {
    let rec = &tcb.active.recovery;
    rec.undo_marker.is_some()
        && (rec.undo_retrans == 0
            || rec.retrans_stamp == 0
            || ev
                .tsecr
                .is_some_and(|ecr| (ecr.wrapping_sub(rec.retrans_stamp) as i32) < 0))
}

/// Restore cwnd and ssthresh from before the reduction (Linux
/// `tcp_undo_cwnd_reduction`); `unmark_loss` also forgets which segments were
/// presumed lost (after a spurious timeout).
fn tcp_undo_cwnd_reduction(tcb: &mut Tcb, unmark_loss: bool) {
    if unmark_loss {
        if let Some(q) = tcb.rtx_mut() {
            q.unmark_lost();
        }
        tcb.active.recovery.lost_retrans = 0;
    }
    if tcb.active.recovery.prior_ssthresh > 0 {
        tcb.congestion.cwnd = tcb.with_cc(|cc, st| cc.undo_cwnd(st));
        tcb.congestion.ssthresh = tcb
            .congestion
            .ssthresh
            .max(tcb.active.recovery.prior_ssthresh);
    }
    tcb.active.recovery.undo_marker = None;
}
