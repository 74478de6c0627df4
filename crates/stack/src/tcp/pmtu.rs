//! Path MTU discovery for TCP: ICMP "fragmentation needed" (RFC 1191) validated as RFC
//! 5927 asks and applied to the connection's MSS (Linux `tcp_v4_err`,
//! `tcp_v4_mtu_reduced`, `tcp_sync_mss`, `tcp_simple_retransmit`), and the black-hole
//! fallback of packetization-layer PMTUD (RFC 4821 §7.1 / RFC 8899; Linux
//! `tcp_mtu_probing` mode 1) for paths whose routers' ICMP never arrives.
//!
//! [`Stack::tcp_pmtu_event`] takes the connection's 4-tuple, the quoted sequence number
//! and the reported MTU, so that ICMPv6 "packet too big" (RFC 8201) can call it with its
//! own header length when IPv6 lands.

use ustack_obs::{Counter, Instant};
use ustack_wire::{SeqNumber, tcp};

use super::State;
use super::cc::CaState;
use super::sock::Sock;
use super::tcb::{FourTuple, Tcb, TcbFlags};
use crate::Stack;

/// Linux `TCP_MIN_SND_MSS` (the default of `tcp_min_snd_mss`): the smallest MSS a path
/// MTU can impose.
const MIN_SND_MSS: usize = 48;

impl Stack {
    /// A router reported that a datagram of the connection `tuple` whose TCP header
    /// quoted `seq` exceeded a hop's MTU, `mtu` bytes (0 when the router did not say, RFC
    /// 1191 §5), for IP headers of `ip_header` bytes. Linux `tcp_v4_err` for
    /// `ICMP_FRAG_NEEDED`, then `tcp_v4_mtu_reduced`. Whether the report was taken: false
    /// for no connection, a sequence number not in flight, or a listener (the caller then
    /// leaves the path's MTU alone, as Linux `tcp_v6_err` returns before
    /// `tcp_v6_mtu_reduced` updates the route).
    pub(crate) fn tcp_pmtu_event(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        seq: SeqNumber,
        mtu: u32,
        ip_header: usize,
    ) -> bool {
        let Some(index) = self.tcp.lookup(self.tcp.ehash.hash(&tuple), &tuple) else {
            // Linux: no socket for the quoted datagram, ICMP_MIB_INERRORS.
            self.mib.inc(Counter::IcmpInErrors);
            return false;
        };
        let h = self.tcp.handle_of(index);
        // The index comes from the connection table, so the handle is live.
        let Some(sk) = self.tcp_sock(h) else {
            return false;
        };
        let tcb = &mut *sk.tcb;
        // RFC 5927 §4.1: "TCP SHOULD check that the TCP sequence number contained in the
        // payload of the ICMP error message is within the range SND.UNA =< SEG.SEQ <
        // SND.NXT" (Linux: `between(seq, snd_una, snd_nxt)`, else OutOfWindowIcmps), so
        // that an off-path attacker must guess a sequence number in flight.
        if seq.before(tcb.snd.una) || seq.after(tcb.snd.nxt) {
            sk.mib.inc(Counter::TcpExtOutOfWindowIcmps);
            return false;
        }
        if matches!(tcb.state, State::Listen | State::Closed) {
            return false;
        }
        // Linux __ip_rt_update_pmtu: "if (mtu < ip_rt_min_pmtu) mtu = ip_rt_min_pmtu", so
        // that a forged tiny MTU cannot make the connection send 8-byte segments.
        let mtu = (mtu as usize).max(sk.sysctl.ip_min_pmtu as usize);
        if tcb.state == State::SynSent {
            // A connecting socket (Linux tcp_v4_err -> tcp_v4_mtu_reduced, which runs in
            // SYN-SENT: the MTU goes to the route and tcp_finish_connect's tcp_sync_mss
            // applies it). The only sequence number in flight is the ISS (RFC 5927 §4.1:
            // the SYN occupies SND.UNA = ISS, SND.NXT = ISS + 1 exclusive).
            if seq != tcb.snd.iss {
                sk.mib.inc(Counter::TcpExtOutOfWindowIcmps);
                return false;
            }
            // ustack has no route cache: the path's MSS (without options) caps the MSS
            // the SYN-ACK settles (`apply_syn_options` takes the smaller of the peer's and
            // this), so the first data segment already fits the hop.
            let mss = mtu
                .saturating_sub(ip_header + tcp::HEADER_LEN)
                .max(MIN_SND_MSS);
            tcb.adv_mss = tcb.adv_mss.min(mss.min(usize::from(u16::MAX)) as u16);
            return true;
        }
        let mss = tcp_mtu_to_mss(tcb, mtu, ip_header);
        if mss >= usize::from(tcb.mss) {
            // Not smaller than what we send: "let the usual retransmit timer handle it".
            return true;
        }
        tcp_sync_mss(tcb, mss);
        if tcp_simple_retransmit(tcb) {
            self.tcp_output(now, h);
        }
        true
    }
}

impl Sock<'_> {
    /// Black-hole detection (RFC 4821 §7.1: "a black hole ... detected by ... repeated
    /// timeouts"; Linux `tcp_mtu_probing` from `tcp_write_timeout` once
    /// `retransmits_timed_out(tcp_retries1)`), with `tcp_mtu_probing` = 1: the first time,
    /// the MSS falls to `tcp_base_mss`; each later time it halves, down to
    /// `tcp_mtu_probe_floor`. The queue is re-cut to the new size, so the retransmission
    /// the timer sends next fits a smaller path. Called by the retransmission timer before
    /// it retransmits, with the count of timeouts so far.
    pub(crate) fn tcp_mtu_probing(&mut self, timeouts: u8) {
        if self.sysctl.tcp_mtu_probing == 0 || u64::from(timeouts) < self.sysctl.tcp_retries1 {
            return;
        }
        let (base, floor) = (
            self.sysctl.tcp_base_mss as usize,
            self.sysctl.tcp_mtu_probe_floor as usize,
        );
        let tcb = &mut *self.tcb;
        if !tcb.state.is_synchronized() {
            return;
        }
        let ts = if tcb.flags.has(TcbFlags::TS_OK) {
            12
        } else {
            0
        };
        let mss = if tcb.flags.has(TcbFlags::MTU_PROBING) {
            // Linux: "mss = tcp_mtu_to_mss(sk, search_low) >> 1; mss = min(base_mss, mss);
            // mss = max(mss, mtu_probe_floor); mss = max(mss, min_snd_mss)".
            ((usize::from(tcb.mss) + ts) / 2)
                .min(base)
                .max(floor)
                .max(MIN_SND_MSS)
        } else {
            // Linux: "icsk->icsk_mtup.enabled = 1" with search_low = tcp_base_mss's MTU.
            tcb.flags.set(TcbFlags::MTU_PROBING);
            base
        };
        let mss = mss.saturating_sub(ts).max(MIN_SND_MSS);
        tcp_sync_mss(tcb, mss);
        let mss = usize::from(tcb.mss);
        if let Some(q) = tcb.rtx_mut() {
            q.resegment(mss, false);
        }
    }
}

/// The MSS for a path MTU (Linux `tcp_mtu_to_mss`, less the timestamp option as
/// `mss_cache` is): the MTU less the IP and TCP headers and the options every segment
/// carries, at least [`MIN_SND_MSS`].
fn tcp_mtu_to_mss(tcb: &Tcb, mtu: usize, ip_header: usize) -> usize {
    let ts = tcb.flags.has(TcbFlags::TS_OK);
    mtu.saturating_sub(ip_header + tcp::HEADER_LEN + if ts { 12 } else { 0 })
        .max(MIN_SND_MSS)
}

/// Make `mss` the connection's segment size if it is smaller (Linux `tcp_sync_mss`).
fn tcp_sync_mss(tcb: &mut Tcb, mss: usize) {
    let mss = mss.min(usize::from(tcb.mss)) as u16;
    tcb.mss = mss;
}

/// Linux `tcp_simple_retransmit`: the segments too large for the new MSS were dropped by
/// the path, so they are split to the new size and marked lost, to be sent again now
/// (by the output the caller runs when this returns true), without waiting for a
/// timeout. "Don't muck with the congestion window here. Reason is that we do not
/// increase amount of _data_ in network, but units changed and effective cwnd/ssthresh
/// really reduced now": Loss state, ssthresh unreduced.
fn tcp_simple_retransmit(tcb: &mut Tcb) -> bool {
    let mss = usize::from(tcb.mss);
    if tcb.rtx_mut().map_or(0, |q| q.resegment(mss, true)) == 0 {
        return false;
    }
    if tcb.ca_state != CaState::Loss {
        tcb.active.high_seq = tcb.snd.nxt;
        tcb.congestion.ssthresh = tcb.current_ssthresh();
        tcb.active.recovery.prior_ssthresh = 0;
        tcb.active.recovery.undo_marker = None;
        tcb.set_ca_state(CaState::Loss);
    }
    true
}
