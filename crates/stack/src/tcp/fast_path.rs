//! The receive fast path of an established connection (Linux `tcp_rcv_established`'s
//! "header prediction", Van Jacobson's): after early demux has found the connection
//! ([`super::early_demux`]), a segment the connection predicted is processed in one pass
//! over its header's bytes, with no [`ustack_wire::tcp::Repr`] built and no walk of RFC
//! 9293 §3.10.7.4's steps ([`Sock::tcp_rcv_state_process`]). Everything else goes to that
//! walk (the "slow path") exactly as before, with nothing changed or counted here.
//!
//! The prediction (Linux compares `pred_flags` with the header's data offset, flags and
//! window word, then `seq == rcv_nxt` and `!after(ack_seq, snd_nxt)`):
//!
//! - the connection is ESTABLISHED;
//! - the flags are ACK, with or without PSH (no SYN, FIN, RST, URG, ECE or CWR; the
//!   reserved bits are ignored, as both paths do): [`super::early_demux::fast_tcp_header`]
//!   checked it;
//! - the data offset is the one the connection expects: 8 words with timestamps (exactly
//!   `NOP NOP TS`, Linux `tcp_parse_aligned_timestamp`), 5 without; any other option
//!   (SACK blocks included) makes the header longer;
//! - the window field, scaled, is SND.WND: the segment changes no window;
//! - SEG.SEQ = RCV.NXT, and SND.UNA =< SEG.ACK =< SND.NXT;
//! - with timestamps, PAWS passes: SEG.TSval >= TS.Recent (RFC 7323 §5.3 R1; a segment
//!   older than that goes to the slow path, which applies the 24-day rule and answers);
//!
//! and the connection has nothing unusual in hand (Linux `tcp_fast_path_check` turns
//! `pred_flags` off for an out-of-order queue, a zero window, urgent data): nothing out of
//! order nor a FIN queued beyond a hole, the loss-recovery state clean
//! ([`super::input::tcp_ack_state_clean`]: Open, nothing SACKed, lost or retransmitted, no
//! probe out), no zero-window or cork probe timer running with nothing in flight, and
//! the payload within the window advertised. A pure ACK must advance SND.UNA (a
//! duplicate ACK or window probe goes to the slow path, which counts it).
//!
//! Why the skipped checks of RFC 9293 §3.10.7.4 are implied (the order of that section):
//!
//! - *first, check the sequence number*: SEG.SEQ = RCV.NXT with the payload within the
//!   window passes the acceptability test ("RCV.NXT =< SEG.SEQ < RCV.NXT+RCV.WND", and
//!   for a zero-length segment "SEG.SEQ = RCV.NXT"); PAWS (RFC 7323 §5.3) is checked;
//! - *second, the RST bit*; *fourth, the SYN bit*: neither is set;
//! - *third, security*: nothing to check (no IP security options, as the slow path);
//! - *fifth, the ACK field*: the ACK bit is on; SEG.ACK is neither beyond SND.NXT
//!   (RFC 5961 §5.2's upper bound) nor before SND.UNA (so not below its lower bound
//!   SND.UNA - MAX.SND.WND); the window update rule ("If SND.UNA =< SEG.ACK =< SND.NXT
//!   ... SND.WL1 < SEG.SEQ or ...") is applied as the slow path applies it, to SND.WL1
//!   and SND.WL2 only, SND.WND being unchanged by the prediction; an ACK that advances
//!   SND.UNA takes `tcp_ack`'s pure path as the slow path would (the recovery state
//!   being clean), and one that acknowledges nothing new clears what `tcp_ack` clears
//!   for it (its loss-recovery calls' early returns);
//! - *sixth, the URG bit*: not set;
//! - *seventh, process the segment text*: in order, nothing queued out of order: the
//!   payload is appended (or, for a direct receive, its room reserved) and acknowledged
//!   as the slow path does ([`Sock::tcp_data_queue`], delayed ACK included);
//! - *eighth, the FIN bit*: not set, and no FIN queued beyond a hole to reach.
//!
//! What the slow path then leaves to the stack (`conn_input`: `tcp_output`) is done only
//! when there is something to do: an ACK due now, unsent data, or a pending ACK without
//! its timer.

use ustack_obs::{Counter, Instant};
use ustack_wire::SeqNumber;

use super::State;
use super::TcpHandle;
use super::clock32::Ms32;
use super::early_demux::FastHeader;
use super::input::tcp_ack_state_clean_in;
use super::sock::Sock;
use super::tcb::TcbFlags;
use crate::Stack;

impl Stack {
    /// Linux `tcp_rcv_established`'s fast path for the connection in slot `index` (one
    /// early demux found) and segment `seg` (the whole TCP segment, its header `hdr`
    /// checked by early demux): `None` if the segment was predicted and processed;
    /// `Some(h)`, the connection's handle, if nothing was done and the caller takes the
    /// slow path (see the module docs). The connection is looked up once, for both.
    #[inline(always)]
    pub(crate) fn tcp_rcv_established<const PROF: bool>(
        &mut self,
        now: Instant,
        index: u32,
        hdr: &FastHeader,
        seg: &[u8],
    ) -> Option<TcpHandle> {
        // `--profile` times the fast path as TCP input, as it does the slow path's
        // `conn_input`.
        let _stage = PROF.then(|| ustack_obs::profile::enter(ustack_obs::profile::Stage::TcpInput));
        let Some(mut sk) = self.tcp_sock_at(index) else {
            return Some(self.tcp.handle_of(index));
        };
        let h = sk.h;
        let Some(output) = sk.tcp_rcv_fast::<PROF>(now, hdr, seg) else {
            return Some(h);
        };
        // `tcp_note_idle`'s test, on the connection in hand (when there is no output to
        // change what it holds).
        let tcb = &*sk.tcb;
        let note_idle = tcb.active.is_held() && !tcb.flags.has(TcbFlags::IDLE_QUEUED);
        self.tcp.rcv_fast += 1;
        if output {
            self.tcp_output(now, h);
            self.tcp_note_idle(now, h);
        } else if note_idle {
            self.tcp_note_idle_held(now, h);
        }
        // An ACK may have freed buffer memory.
        self.tcp_mem_freed(now);
        None
    }

    /// Segments taken by the receive fast path ([`Stack::tcp_rcv_established`], Linux
    /// `tcp_rcv_established`'s header prediction; see docs/tcp.md): for tests that check
    /// the fast path was (or was not) taken, both paths doing the same. Linux counts the
    /// data segments among them as `TCPHPHits` (so does ustack); this counts pure ACKs too.
    #[doc(hidden)]
    pub fn tcp_rcv_fast_hits(&self) -> u64 {
        self.tcp.rcv_fast
    }
}

impl Sock<'_> {
    /// The prediction and, if it holds, the segment's processing (see the module docs).
    /// `None`: not predicted, nothing changed. `Some(output)`: processed; `output` if the
    /// stack's output has something to do (an ACK now, data to send, an ACK pending
    /// without its timer).
    #[inline(always)]
    fn tcp_rcv_fast<const PROF: bool>(
        &mut self,
        now: Instant,
        hdr: &FastHeader,
        seg: &[u8],
    ) -> Option<bool> {
        let tcb = &*self.tcb;
        let seq = SeqNumber(u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]));
        let ack = SeqNumber(u32::from_be_bytes([seg[8], seg[9], seg[10], seg[11]]));
        let window = u32::from(u16::from_be_bytes([seg[14], seg[15]]));
        let ts_ok = tcb.flags.has(TcbFlags::TS_OK);
        // The header prediction (Linux `pred_flags`, seq and ack tests).
        if tcb.state != State::Established
            || hdr.timestamp.is_some() != ts_ok
            || window << tcb.snd_wscale != tcb.snd.wnd
            || seq != tcb.rcv.nxt
            || ack.after(tcb.snd.nxt)
            || ack.before(tcb.snd.una)
        {
            return None;
        }
        // RFC 7323 §5.3 PAWS: "If SEG.TSval < TS.Recent ... not acceptable": the slow path.
        if let Some(ts) = hdr.timestamp
            && (ts.tsval.wrapping_sub(tcb.ts_recent) as i32) < 0
        {
            return None;
        }
        let payload = &seg[hdr.header_len..];
        let advances = ack.after(tcb.snd.una);
        let a = &*tcb.active;
        if !tcp_ack_state_clean_in(tcb.ca_state, a)
            // A zero-window (or cork) probe timer with nothing in flight: the slow path's
            // tcp_ack decides whether this segment ends it.
            || (a.rtx.is_empty() && tcb.timers.retransmit.is_armed())
        {
            return None;
        }
        if payload.is_empty() {
            // A duplicate ACK or a window probe: the slow path counts it.
            if !advances {
                return None;
            }
        } else if !tcb.rcvbuf.in_order_only() || payload.len() > tcb.receive_window() as usize {
            return None;
        }

        // Predicted: from here on the segment is this path's.
        let tcb = &mut *self.tcb;
        tcb.last_activity = Ms32::floor(now);
        // RFC 9293 §3.10.7.4 fifth (as `tcp_ack` applies it): SND.WND is the segment's
        // already; SND.WL1 and SND.WL2 follow the segment when the rule says so.
        if advances
            || tcb.snd.wl1.before(seq)
            || (tcb.snd.wl1 == seq && !ack.before(tcb.snd.wl2) && tcb.snd.wnd == 0)
        {
            tcb.snd.wl1 = seq;
            tcb.snd.wl2 = ack;
            tcb.snd.max_wnd = tcb.snd.max_wnd.max(tcb.snd.wnd);
        }
        // Linux tcp_ack: an acceptable ACK ends the probes' count and the soft error.
        tcb.probes = 0;
        tcb.flags.clear(TcbFlags::ERR_SOFT);
        // The echoed timestamp as it came (0: none), our clock's offset taken off only by
        // the queue's walk that uses it (`tcp_ack_pure`).
        let mut echo = 0;
        if let Some(ts) = hdr.timestamp {
            // RFC 7323 §4.3: TS.Recent from a segment that covers the last ACK we sent
            // (SEG.SEQ = RCV.NXT, so: if RCV.NXT = RCV.WUP; Linux tcp_store_ts_recent
            // under "tp->rcv_nxt == tp->rcv_wup"); PAWS passed above.
            if seq == tcb.rcv.wup {
                tcb.ts_recent = ts.tsval;
                tcb.ts_recent_stamp = (now.as_millis() / 1000) as u32;
            }
            echo = ts.tsecr;
        }
        if advances {
            self.tcp_ack_pure(now, ack, echo);
        } else {
            // Data acknowledging nothing new: what the slow path's `tcp_ack` does for it
            // with the recovery state clean (the guard above): `tcp_fastretrans_alert`'s
            // early return for an Open connection and `tcp_find_lost_retrans` with
            // nothing retransmitted; the congestion control and the timers have nothing
            // to do (nothing acknowledged or delivered).
            let rec = &mut self.tcb.active.recovery;
            rec.retrans_stamp = 0;
            rec.retrans_low = Instant::FAR_FUTURE;
        }
        if !payload.is_empty() {
            // Linux counts the data segments its fast path takes.
            self.mib.inc(Counter::TcpExtTCPHPHits);
            self.tcp_data_queue_in_order::<PROF>(now, payload, hdr.timestamp);
        }
        // What `tcp_output` would do something for (ESTABLISHED: no FIN queued or sent).
        let tcb = &*self.tcb;
        let unsent = tcb.sndbuf.len() > tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize;
        Some(
            tcb.flags.has(TcbFlags::ACK_NOW)
                || unsent
                || (tcb.flags.has(TcbFlags::ACK_PENDING) && !tcb.timers.delack.is_armed()),
        )
    }
}
