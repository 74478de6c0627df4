//! TCP timers (Linux `net/ipv4/tcp_timer.c`) and TIME-WAIT (`tcp_minisocks.c`,
//! `inet_timewait_sock.c`).
//!
//! Each connection has a fixed table of deadlines (retransmit/probe, delayed ACK,
//! keepalive/FIN-WAIT-2) and one entry in the stack's timer wheel (`wheel`) for the
//! earliest, moved when a deadline comes before it and taken out when the connection ends
//! (see `Sock::arm`). TIME-WAIT records live 60 s from their last restart; each
//! has exactly one entry in an expiry heap, whatever the peer sends (see `TimeWaits`).

use core::net::SocketAddr;
use core::time::Duration;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::tcp::{Flags, TcpTimestamp};
use ustack_wire::{SeqNumber, tcp};

use super::cc::CaState;
use super::clock32::{Deadline, DeadlineQueue, Ms32};
use super::isn::ts_clock;
use super::output::Xmit;
use super::tcb::{FourTuple, TcbFlags};
use super::tuple_hash::{TupleHash, TupleHasher, TupleTable};
use super::{State, TcpHandle};
use crate::stack::Wake;
use crate::{Error, Stack};

/// 2*MSL as Linux has it (`TCP_TIMEWAIT_LEN`, 60 s); RFC 9293 §3.4.2 suggests MSL = 2 min.
pub(crate) const TIMEWAIT_LEN: Duration = Duration::from_secs(60);

/// A connection in TIME-WAIT, reduced to what answering its peer needs (Linux
/// `tcp_timewait_sock`): 28 bytes, its 12-byte key and a 16-byte expiry entry
/// ([`TIME_WAIT_BYTES`](super::TIME_WAIT_BYTES) in all).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeWait {
    pub snd_nxt: SeqNumber,
    pub rcv_nxt: SeqNumber,
    pub ts_recent: u32,
    pub ts_offset: u32,
    /// When the record ends: 2*MSL after it was made or last restarted.
    pub expires: Ms32,
    /// When the last out-of-window segment was answered, in ms of the stack clock (0:
    /// never); Linux `tw_last_oow_ack_time`, for `tcp_oow_rate_limited`.
    pub last_oow_ack: u32,
    pub rcv_wnd: u16,
    pub ts_ok: bool,
    /// The connection's SO_REUSEADDR (Linux `tw_reuse`, copied from `sk_reuse` by
    /// `inet_twsk_alloc`), for `Stack::tcp_bind_conflict`: in the record's padding byte.
    pub reuseaddr: bool,
}

/// An entry of the TIME-WAIT expiry queue: a deadline and the record's tuple.
pub(crate) type TimeWaitEntry = (Ms32, FourTuple);

/// All TIME-WAIT records of a stack.
///
/// Every record waits the same 2*MSL, so records come due in the order they were filed:
/// the expiry queue is a FIFO (a ring of 16-byte entries), and expiring takes the due
/// entries off its front, O(1) each, never scanning the records (Linux files each record
/// on its timer wheel, `inet_twsk_schedule`, to the same effect).
///
/// A peer can make a record restart its 2*MSL wait with every segment it sends (RFC 9293
/// §3.10.7.4 and Linux `tcp_timewait_state_process` restart it on a retransmitted FIN and
/// any ACK); that only moves the record's `expires`. When an entry comes up and its
/// record was restarted meanwhile, it is filed again, at the new deadline, in a heap of
/// such entries if the FIFO would lose its order ([`DeadlineQueue`]; Linux re-arms the
/// record's one timer instead, `inet_twsk_reschedule`): one entry per record still, so a
/// flood costs no memory, and only restarted records may pay a heap's O(log n). Records
/// are bounded by `tcp_max_tw_buckets`.
#[derive(Debug)]
pub(crate) struct TimeWaits {
    map: TupleTable<TimeWait>,
    /// (deadline, tuple), a FIFO in deadline order and a heap of restarted records'
    /// entries filed again when their first came up; an entry whose record was removed
    /// is dropped when it comes up.
    queue: DeadlineQueue<FourTuple>,
    /// The latest instant the queue was touched at, to read its deadlines back.
    seen: Instant,
}

impl TimeWaits {
    /// Every record with its 4-tuple.
    pub fn iter(&self) -> impl Iterator<Item = (&FourTuple, &TimeWait)> + '_ {
        self.map.iter()
    }

    /// The tuples of every record and expiry entry (for the IPv6 id sweep).
    pub fn tuples(&self) -> impl Iterator<Item = FourTuple> + '_ {
        self.map
            .iter()
            .map(|(t, _)| *t)
            .chain(self.queue.iter().map(|(_, t)| t))
    }

    /// Heap bytes: the table and the expiry queue.
    pub fn heap_bytes(&self) -> usize {
        self.map.allocation_size() + self.queue.capacity() * size_of::<TimeWaitEntry>()
    }

    /// Entries in the expiry queue: one per record, plus at most one per record removed
    /// early (a RST, a new SYN, a reused tuple) whose entry has not come up yet, and one
    /// more per record of a tuple so reused.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// `hasher` keyed with a secret: the 4-tuples are the peers' choice.
    pub fn new(hasher: TupleHasher) -> Self {
        TimeWaits {
            map: TupleTable::new(hasher),
            queue: DeadlineQueue::new(),
            seen: Instant::ZERO,
        }
    }
    /// The hash of `t` (the same in every 4-tuple table).
    #[cfg(test)]
    pub fn hash(&self, t: &FourTuple) -> TupleHash {
        self.map.hash(t)
    }
    pub fn contains(&self, hash: TupleHash, t: &FourTuple) -> bool {
        self.map.contains(hash, t)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// File a record made at `now` (its `expires` is `now` + 2*MSL), lowering the stack's
    /// next deadline `wake` to it.
    /// `hash` is `t`'s under the tables' shared key (the connection's, see `tuple_hash`).
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        hash: TupleHash,
        t: FourTuple,
        tw: TimeWait,
        wake: &mut Wake,
    ) {
        debug_assert!(hash == self.map.hash(&t), "the hash of another tuple");
        self.seen = self.seen.max(now);
        self.queue.push(tw.expires, t);
        wake.lower(tw.expires.instant(self.seen));
        // The connection held the tuple, so no record does (one tuple, one table).
        self.map.insert_new(hash, t, tw);
    }

    /// Restart the 2*MSL wait of `t` (no allocation: see [`TimeWaits`]).
    fn restart(&mut self, hash: TupleHash, t: &FourTuple, now: Instant) {
        if let Some(r) = self.map.get_mut(hash, t) {
            r.expires = Ms32::ceil(now + TIMEWAIT_LEN);
        }
    }

    /// Expire the records due at `now`; returns how many ended.
    pub(crate) fn expire(&mut self, now: Instant) -> u64 {
        self.seen = self.seen.max(now);
        let mut ended = 0;
        while let Some((_, tuple)) = self.queue.pop_due(now) {
            let hash = self.map.hash(&tuple);
            match self.map.remove_if(hash, &tuple, |r| r.expires.due(now)) {
                Some(Ok(_)) => ended += 1,
                // Restarted meanwhile (or a newer incarnation): filed again.
                Some(Err(r)) => {
                    self.queue.push(r.expires, tuple);
                }
                None => {} // removed early
            }
        }
        ended
    }

    /// The instant a record's deadline stands for.
    pub fn expires_at(&self, tw: &TimeWait) -> Instant {
        tw.expires.instant(self.seen)
    }
    /// The record of `t`, if any (for `tcp_tw_reuse`, Linux `tcp_twsk_unique`).
    pub fn get(&self, hash: TupleHash, t: &FourTuple) -> Option<&TimeWait> {
        self.map.get(hash, t)
    }
    /// Take the record of `t` away (its tuple is reused); its queue entry is skipped when
    /// it comes up.
    pub fn remove(&mut self, hash: TupleHash, t: &FourTuple) -> Option<TimeWait> {
        self.map.remove(hash, t)
    }
    #[inline]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.queue.front().map(|(d, _)| d.instant(self.seen))
    }
}

impl Stack {
    /// Enter TIME-WAIT (Linux `tcp_time_wait`): the TCB becomes a compact record for
    /// 2*MSL; the socket itself is done. With `tcp_max_tw_buckets` records already, the
    /// connection closes without TIME-WAIT, counted TCPTimeWaitOverflow (Linux:
    /// `inet_twsk_alloc` fails when `tw_refcount - 1 >= sysctl_max_tw_buckets`).
    /// `known`: the tuple's hash when the caller has it (the segment's, from the table
    /// lookup), else it is computed here.
    pub(crate) fn tcp_time_wait(&mut self, now: Instant, h: TcpHandle, known: Option<TupleHash>) {
        let Some(tcb) = self.tcp.get(h) else { return };
        if self.tcp.timewait.len() as u64 >= self.sysctl.tcp_max_tw_buckets {
            self.mib.inc(Counter::TcpExtTCPTimeWaitOverflow);
            return self.tcp_done(h, None);
        }
        let tw = TimeWait {
            snd_nxt: tcb.snd.nxt,
            rcv_nxt: tcb.rcv.nxt,
            ts_recent: tcb.ts_recent,
            ts_offset: tcb.ts_offset,
            rcv_wnd: (tcb.rcv.wnd >> tcb.rcv_wscale).min(65_535) as u16,
            ts_ok: tcb.flags.has(TcbFlags::TS_OK),
            reuseaddr: tcb.flags.has(TcbFlags::REUSEADDR),
            expires: Ms32::ceil(now + TIMEWAIT_LEN),
            last_oow_ack: 0,
        };
        let tuple = tcb.tuple;
        // One hash of the tuple takes the connection out of the established table and
        // files its record (the tables share a key, see `tuple_hash`).
        let hash = known.unwrap_or_else(|| self.tcp.ehash.hash(&tuple));
        self.tcp_done_with(h, None, Some(hash));
        self.tcp
            .timewait
            .insert(now, hash, tuple, tw, &mut self.wake);
    }

    /// A segment for a TIME-WAIT record (RFC 9293 §3.10.7.4 in TIME-WAIT; Linux
    /// `tcp_timewait_state_process`, followed case by case).
    pub(crate) fn timewait_input(
        &mut self,
        now: Instant,
        tuple: FourTuple,
        hash: TupleHash,
        tw: TimeWait,
        seg: &tcp::Repr,
    ) {
        let f = seg.flags;
        // PAWS (RFC 7323 §5.3) applies here too (Linux tcp_paws_reject on the record).
        let paws_reject = tw.ts_ok
            && !f.contains(Flags::RST)
            && seg
                .timestamp
                .is_some_and(|t| (t.tsval.wrapping_sub(tw.ts_recent) as i32) < 0);
        let seq_end = seg.seq_number + super::input::seg_len(seg);
        // Linux: "In window segment, it may be only reset or bare ack": exactly at
        // RCV.NXT, without data (or a RST).
        if !paws_reject
            && seg.seq_number == tw.rcv_nxt
            && (seg.seq_number == seq_end || f.contains(Flags::RST))
        {
            if f.contains(Flags::RST) {
                // "TIME_WAIT assassination": Linux with tcp_rfc1337 = 0 (its default)
                // kills the record; RFC 1337 would ignore the RST. ustack follows Linux.
                self.tcp.timewait.map.remove(hash, &tuple);
                return self.mib.drop(DropReason::TcpReset);
            }
            // A bare ACK: nothing to acknowledge (RFC 9293 acknowledges only
            // unacceptable segments and the retransmitted FIN), the 2*MSL wait restarts
            // (Linux inet_twsk_reschedule; no allocation here).
            self.tcp.timewait.restart(hash, &tuple, now);
            if let Some(r) = self.tcp.timewait.map.get_mut(hash, &tuple)
                && let Some(ts) = seg.timestamp.filter(|_| r.ts_ok)
            {
                r.ts_recent = ts.tsval;
            }
            return;
        }
        let newer_ts = tw.ts_ok
            && seg
                .timestamp
                .is_some_and(|t| (t.tsval.wrapping_sub(tw.ts_recent) as i32) > 0);
        // A new SYN: RFC 9293 §3.10.7.4 allows reopening from TIME-WAIT when the new SYN's
        // sequence number is above the old connection's (or, with timestamps, its TSval is
        // newer: RFC 6191). Linux TCP_TW_SYN.
        if f.contains(Flags::SYN)
            && !f.contains(Flags::RST)
            && !f.contains(Flags::ACK)
            && !paws_reject
            && (seg.seq_number.after(tw.rcv_nxt) || newer_ts)
        {
            self.tcp.timewait.map.remove(hash, &tuple);
            if let Some(listener) = self.tcp_listener_for(&tuple) {
                return self.listen_input(now, listener, tuple, hash, seg);
            }
            self.mib.drop(DropReason::TcpNoSocket);
            return self.reset_for(now, tuple, seg);
        }
        if paws_reject {
            self.mib.inc(Counter::TcpExtPAWSTimewait);
        }
        if f.contains(Flags::RST) {
            // An out-of-window RST is ignored.
            return self.mib.drop(DropReason::TcpReset);
        }
        // Out of window (a retransmitted FIN among them: "Acknowledge it, and restart the
        // 2 MSL timeout"): acknowledged, the wait restarted if it carries an ACK.
        if paws_reject || f.contains(Flags::ACK) {
            self.tcp.timewait.restart(hash, &tuple, now);
        }
        // Linux tcp_timewait_check_oow_rate_limit -> tcp_oow_rate_limited: at most one
        // answer per tcp_invalid_ratelimit per record, else TCPACKSkippedTimeWait ("Data
        // packets without SYNs are not likely part of an ACK loop": those are answered).
        let pure = seg.seq_number == seq_end || f.contains(Flags::SYN);
        if pure
            && let Some(r) = self.tcp.timewait.map.get_mut(hash, &tuple)
            && oow_rate_limited(&mut r.last_oow_ack, now, self.sysctl.tcp_invalid_ratelimit)
        {
            return self.mib.inc(Counter::TcpExtTCPACKSkippedTimeWait);
        }
        self.tw_ack(now, tuple, &tw);
    }

    fn tw_ack(&mut self, now: Instant, tuple: FourTuple, tw: &TimeWait) {
        let ts = tw.ts_ok.then(|| TcpTimestamp {
            tsval: ts_clock(now).wrapping_add(tw.ts_offset),
            tsecr: tw.ts_recent,
        });
        self.tcp_send_ack_raw(
            now,
            tuple,
            tw.snd_nxt,
            tw.rcv_nxt,
            u32::from(tw.rcv_wnd),
            ts,
        );
    }

    /// When TCP next needs [`Stack::tcp_handle_timeout`].
    #[inline]
    pub(crate) fn tcp_poll_timeout(&self) -> Option<Instant> {
        let conn = self.tcp.timers.next_expiry().map(Instant::from_millis);
        let conn = crate::stack::earliest(conn, self.tcp.requests.next_deadline());
        let conn = crate::stack::earliest(conn, self.tcp_idle_deadline());
        crate::stack::earliest(conn, self.tcp.timewait.next_deadline())
    }

    /// Run every TCP timer due at `now`.
    pub(crate) fn tcp_handle_timeout(&mut self, now: Instant) {
        // Linux counts TW when a record's timer ends it (tw_timer_handler).
        let ended = self.tcp.timewait.expire(now);
        self.mib.add(Counter::TcpExtTW, ended);
        self.tcp_release_idle(now);
        while let Some(tuple) = self.tcp.requests.pop_due(now) {
            self.request_timer(now, tuple);
        }
        // The wheel's entries are live connections' (taken out when one ends), one each,
        // for the deadline its `queued` names.
        while let Some(index) = self.tcp.timers.pop_due(now.as_millis()) {
            let h = self.tcp.handle_of(index);
            let Some(tcb) = self.tcp.get_mut(h) else {
                debug_assert!(false, "a timer entry of a connection that is gone");
                continue;
            };
            debug_assert!(tcb.timers.queued.due(now), "a timer entry came up early");
            tcb.timers.queued = Deadline::OFF;
            self.tcp_timer(now, h);
            self.tcp_arm(now, h);
            self.tcp_note_idle(now, h);
        }
        // A connection aborted by its timer (retries out, an orphan's end) freed its buffers.
        self.tcp_mem_freed(now);
    }

    /// Run the due timers of one connection.
    fn tcp_timer(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.timers.delack.due(now) {
            tcb.timers.delack = Deadline::OFF;
            if tcb.flags.has(TcbFlags::ACK_PENDING) {
                self.mib.inc(Counter::TcpExtDelayedACKs);
                self.tcp_send_ack(now, h);
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.timers.retransmit.due(now) {
            tcb.timers.retransmit = Deadline::OFF;
            let loss_probe = tcb.flags.has(TcbFlags::LOSS_PROBE);
            tcb.flags.clear(TcbFlags::LOSS_PROBE);
            if tcb.rtx().is_empty() {
                self.tcp_probe_timer(now, h);
            } else if loss_probe {
                self.tcp_send_loss_probe(now, h);
            } else {
                self.tcp_retransmit_timer(now, h);
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.timers.keepalive.due(now) {
            tcb.timers.keepalive = Deadline::OFF;
            self.tcp_keepalive_timer(now, h);
        }
    }

    /// The retransmission timer (RFC 6298 §5.4-5.7; Linux `tcp_retransmit_timer`).
    fn tcp_retransmit_timer(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        // Linux tcp_write_timeout: an orphan's retransmission timer checks
        // tcp_out_of_resources first.
        if tcb.flags.has(TcbFlags::ORPHAN) && self.tcp_orphan_check_oom(now, h, 0) {
            return;
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        let linear = self.sysctl.tcp_syn_linear_timeouts;
        let limit = match tcb.state {
            State::SynSent | State::SynReceived => self.sysctl.tcp_syn_retries,
            _ if tcb.flags.has(TcbFlags::ORPHAN) => match self.sysctl.tcp_orphan_retries {
                0 => 8,
                n => n,
            },
            _ => self.sysctl.tcp_retries2,
        };
        // Linux 6.x tcp_retransmit_timer counts every expiry, the last one included:
        // "__NET_INC_STATS(sock_net(sk), LINUX_MIB_TCPTIMEOUTS); if (tcp_write_timeout(sk))
        // goto out;".
        self.mib.inc(Counter::TcpExtTCPTimeouts);
        let expired = if tcb.state == State::SynSent {
            // Linux tcp_write_timeout -> retransmits_timed_out(sk, tcp_syn_retries, 0): a
            // connect gives up once the time since its first SYN (`retrans_stamp`; here
            // `last_activity`, which nothing moves in SYN-SENT) reaches what that many
            // retries backed off from the initial timeout would take (tcp_model_timeout),
            // whatever the SYNs' actual spacing (tcp_syn_linear_timeouts).
            tcb.rtt.retransmits() > 0
                && tcb.last_activity.elapsed(now)
                    >= model_timeout(limit, super::listen::TIMEOUT_INIT)
        } else {
            u64::from(tcb.rtt.retransmits()) >= limit
        };
        if expired {
            // Linux tcp_write_err: ETIMEDOUT, TCPAbortOnTimeout.
            self.mib.inc(Counter::TcpExtTCPAbortOnTimeout);
            return self.tcp_done(h, Some(Error::TimedOut));
        }
        // The first timeout of an episode is also counted by what it interrupted
        // ("if (icsk->icsk_retransmits == 0)"); an expiry in the Open state counts only
        // TCPTimeouts.
        if tcb.rtt.retransmits() == 0 {
            let sack = tcb.flags.has(TcbFlags::SACK_OK);
            let failure = match tcb.ca_state {
                CaState::Recovery if sack => Counter::TcpExtTCPSackRecoveryFail,
                CaState::Recovery => Counter::TcpExtTCPRenoRecoveryFail,
                CaState::Loss => Counter::TcpExtTCPLossFailures,
                CaState::Disorder if sack => Counter::TcpExtTCPSackFailures,
                CaState::Disorder => Counter::TcpExtTCPRenoFailures,
                _ if tcb.rtx().sacked_out() > 0 => Counter::TcpExtTCPSackFailures,
                _ => Counter::TcpExtTCPTimeouts,
            };
            if failure != Counter::TcpExtTCPTimeouts {
                self.mib.inc(failure);
            }
        }
        let timeouts = tcb.rtt.retransmits();
        let Some(mut sk) = self.tcp_sock(h) else {
            return;
        };
        sk.tcp_mtu_probing(timeouts);
        sk.tcp_enter_loss(now);
        let tcb = sk.tcb;
        // RFC 6298 §5.5 "back off the timer", §5.6 restart it; but not for the first
        // tcp_syn_linear_timeouts expiries of a SYN (Linux 6.18 tcp_retransmit_timer:
        // backoff only "if (sk->sk_state != TCP_SYN_SENT || tp->total_rto >
        // sysctl_tcp_syn_linear_timeouts)", total_rto counting this expiry).
        let expiry = u64::from(tcb.rtt.retransmits()) + 1;
        if tcb.state != State::SynSent || expiry > linear {
            tcb.rtt.backoff();
        }
        tcb.rtt.count_retransmit();
        let rto = tcb.rtt.rto();
        tcb.timers.retransmit = Deadline::at(now + rto);
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        if tcb.state == State::SynSent {
            // RFC 6298 §5.7: the SYN's retransmission keeps RTO >= 1 s (TIMEOUT_INIT
            // doubled by the backoff already applied).
            tcb.timers.retransmit = Deadline::at(now + rto.max(super::listen::TIMEOUT_INIT));
        }
        // RFC 6298 §5.4 "Retransmit the earliest segment that has not been acknowledged";
        // more follow as ACKs open cwnd (RFC 5681 §3.1 slow start after a timeout).
        if let Some((start, end)) = tcb.rtx().next_to_retransmit() {
            self.tcp_retransmit_skb(now, h, start, end, false);
        }
        self.tcp_output(now, h);
    }

    /// The zero-window probe (RFC 9293 §3.8.6.1 "the sending TCP ... MUST regularly
    /// transmit at least one octet of new data ... or retransmit to the receiver";
    /// Linux `tcp_probe_timer`, `tcp_send_probe0`).
    fn tcp_probe_timer(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        let sent = tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize;
        if tcb.sndbuf.len() > sent && tcb.snd.wnd > 0 {
            // Data waited a probe timeout with nothing in flight and a window open:
            // corked, or a segment the window would cut short (see `tcp_write_xmit`'s
            // silly-window test). Linux tcp_probe_timer -> tcp_send_probe0 ->
            // tcp_write_wakeup sends one segment of it, cut to the window, whatever the
            // cork, and tcp_event_new_data_sent arms the RTO for it.
            let sent = self.tcp_write_xmit(now, h, Xmit::Wakeup);
            self.tcp_output_sent(now, h, sent);
            return self.tcp_output(now, h);
        }
        if tcb.sndbuf.len() <= sent {
            // Nothing waits on the window any more.
            return self.tcp_output(now, h);
        }
        // RFC 9293 §3.8.6.1 keeps probing as long as the peer answers (Linux: ACKs reset
        // icsk_probes_out), but an orphan has no user waiting: Linux tcp_probe_timer "if
        // the socket is orphaned ... we kill the socket when the retry count and the time
        // exceeds the corresponding system limit". The backoff (icsk_backoff) is cleared
        // only by an ACK that opens the window (tcp_ack_probe) or acknowledges data, so
        // a peer answering every probe with window 0 still runs it up.
        let mut max_probes = self.sysctl.tcp_retries2;
        if tcb.flags.has(TcbFlags::ORPHAN) {
            let alive = tcb.rtt.rto() < super::rtt::TCP_RTO_MAX;
            max_probes = orphan_retries(self.sysctl.tcp_orphan_retries, alive);
            if !alive && u64::from(tcb.rtt.backoffs()) >= max_probes {
                self.mib.inc(Counter::TcpExtTCPAbortOnTimeout);
                return self.tcp_done(h, Some(Error::TimedOut));
            }
            // Linux tcp_out_of_resources(sk, true) with shift 0 (ustack keeps no
            // lsndtime for the "peer does not open window for long time" penalty).
            if self.tcp_orphan_check_oom(now, h, 0) {
                return;
            }
        }
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if u64::from(tcb.probes) >= max_probes {
            self.mib.inc(Counter::TcpExtTCPAbortOnTimeout);
            return self.tcp_done(h, Some(Error::TimedOut));
        }
        tcb.probes += 1;
        tcb.rtt.backoff();
        let rto = tcb.rtt.rto();
        tcb.timers.retransmit = Deadline::at(now + rto);
        tcb.flags.clear(TcbFlags::LOSS_PROBE);
        let seq = tcb.snd.una - 1;
        self.mib.inc(Counter::TcpExtTCPWinProbe);
        // Linux tcp_xmit_probe_skb: an old sequence number, so the peer answers with an
        // ACK carrying its current window.
        self.tcp_send_probe(now, h, seq);
    }

    /// Too many orphans, or out of buffer memory (Linux `tcp_check_oom` ->
    /// `tcp_too_many_orphans`: `orphans << shift > tcp_max_orphans`; `tcp_out_of_memory`:
    /// the orphan holds more than `SOCK_MIN_SNDBUF` of send buffer while the stack is over
    /// `tcp_mem.high`): the orphan `h` is reset and forgotten, counted TCPAbortOnMemory
    /// (Linux `tcp_out_of_resources`, and `__tcp_close` with shift 0). Returns whether it
    /// was.
    pub(crate) fn tcp_orphan_check_oom(&mut self, now: Instant, h: TcpHandle, shift: u32) -> bool {
        let Some(tcb) = self.tcp.get(h) else {
            return false;
        };
        let out_of_memory =
            tcb.sndbuf.mem_bytes() > super::SOCK_MIN_SNDBUF && self.tcp.pool.above_high();
        if !tcb.flags.has(TcbFlags::ORPHAN)
            || tcb.state == State::Closed
            || ((self.tcp.orphans as u64) << shift <= self.sysctl.tcp_max_orphans && !out_of_memory)
        {
            return false;
        }
        let (tuple, seq, ack) = (tcb.tuple, tcb.snd.nxt, tcb.rcv.nxt);
        self.tcp_send_reset(now, tuple, seq, Some(ack));
        self.mib.inc(Counter::TcpExtTCPAbortOnMemory);
        self.tcp_done(h, None);
        true
    }

    /// Keepalive, or the end of an orphan's FIN-WAIT-2 (Linux `tcp_keepalive_timer`).
    fn tcp_keepalive_timer(&mut self, now: Instant, h: TcpHandle) {
        // The socket's TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT or the sysctls (Linux
        // keepalive_time_when, keepalive_intvl_when, keepalive_probes).
        let (time, intvl, max_probes) = self.tcp_keepalive_params(h);
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if tcb.state == State::FinWait2 && tcb.flags.has(TcbFlags::ORPHAN) {
            // tcp_fin_timeout ran out. Linux hands such an orphan to a FIN-WAIT-2
            // timewait socket (tcp_close / tcp_keepalive_timer: tcp_time_wait(sk,
            // TCP_FIN_WAIT2, tmo)) that expires silently; a peer sending data after it
            // gets a RST from the closed port.
            return self.tcp_done(h, None);
        }
        if !tcb.flags.has(TcbFlags::KEEPALIVE) || !tcb.state.counts_as_established() {
            return;
        }
        let idle = tcb.last_activity.elapsed(now);
        if idle < time {
            tcb.probes = 0;
            tcb.timers.keepalive = Deadline::at(now + (time - idle));
            return;
        }
        // RFC 9293 §3.8.4 keep-alives, Linux's counts: tcp_keepalive_probes unanswered probes.
        if u64::from(tcb.probes) >= max_probes {
            // Linux tcp_keepalive_timer: tcp_send_active_reset, then tcp_write_err
            // (ETIMEDOUT, TCPAbortOnTimeout): a peer that is only silent learns that the
            // connection is over.
            let (tuple, seq, ack) = (tcb.tuple, tcb.snd.nxt, tcb.rcv.nxt);
            self.tcp_send_reset(now, tuple, seq, Some(ack));
            self.mib.inc(Counter::TcpExtTCPAbortOnTimeout);
            return self.tcp_done(h, Some(Error::TimedOut));
        }
        tcb.probes += 1;
        tcb.timers.keepalive = Deadline::at(now + intvl);
        let seq = tcb.snd.una - 1;
        self.mib.inc(Counter::TcpExtTCPKeepAlive);
        self.tcp_send_probe(now, h, seq);
    }

    /// A segment with an old sequence number and no data, to elicit an ACK.
    fn tcp_send_probe(&mut self, now: Instant, h: TcpHandle, seq: SeqNumber) {
        let Some(tcb) = self.tcp.get(h) else { return };
        let (tuple, ack, ts_ok, ts_offset, ts_recent) = (
            tcb.tuple,
            tcb.rcv.nxt,
            tcb.flags.has(TcbFlags::TS_OK),
            tcb.ts_offset,
            tcb.ts_recent,
        );
        let wnd = tcb.rcv.wnd >> tcb.rcv_wscale;
        let ts = ts_ok.then(|| TcpTimestamp {
            tsval: ts_clock(now).wrapping_add(ts_offset),
            tsecr: ts_recent,
        });
        self.tcp_send_ack_raw(now, tuple, seq, ack, wnd, ts);
    }

    /// TIME-WAIT records of both families (for views and tests): local and remote
    /// address (an IPv6 record's resolved from its interned ids) and deadline.
    pub fn tcp_timewait_list(&self) -> Vec<(SocketAddr, SocketAddr, Instant)> {
        self.tcp
            .timewait
            .map
            .iter()
            .map(|(t, tw)| {
                let (local, remote) = self.tcp.addrs(t);
                (local, remote, self.tcp.timewait.expires_at(tw))
            })
            .collect()
    }
}

/// Linux `tcp_orphan_retries`: the retry bound of an orphan; 0 (the default) means 8 while
/// the connection is alive (its backed-off RTO below `TCP_RTO_MAX`), else 0. (Linux also
/// gives 0 after a soft error from ICMP; ustack keeps none.)
pub(crate) fn orphan_retries(sysctl: u64, alive: bool) -> u64 {
    match sysctl {
        0 if alive => 8,
        n => n,
    }
}

/// Linux `__tcp_oow_rate_limited`: true if an answer to an out-of-window segment went out
/// less than `ratelimit_ms` ago (0: never limited); otherwise records `now` and allows one.
pub(crate) fn oow_rate_limited(last: &mut u32, now: Instant, ratelimit_ms: u64) -> bool {
    let ms = now.as_millis() as u32;
    if *last != 0 {
        let elapsed = ms.wrapping_sub(*last) as i32;
        if elapsed >= 0 && (elapsed as u64) < ratelimit_ms {
            return true;
        }
    }
    // 0 means "never": a clock reading of 0 ms is stored as 1.
    *last = ms.max(1);
    false
}

/// How long `boundary` retransmissions take when each timeout doubles from `rto_base`
/// up to `TCP_RTO_MAX` (Linux `tcp_model_timeout`): `(2^(boundary+1) - 1) * rto_base`
/// while the doubling stays under the cap, then `TCP_RTO_MAX` a retry.
fn model_timeout(boundary: u64, rto_base: Duration) -> Duration {
    let max = super::rtt::TCP_RTO_MAX;
    // ilog2(TCP_RTO_MAX / rto_base)
    let ratio = (max.as_millis() / rto_base.as_millis().max(1)).max(1) as u64;
    let thresh = u64::from(ratio.ilog2());
    if boundary <= thresh {
        rto_base * ((2u32 << boundary) - 1)
    } else {
        rto_base * ((2u32 << thresh) - 1) + max * (boundary - thresh) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, SocketAddrV4};

    fn tuple(i: u32) -> FourTuple {
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(0x0b00_0000 | (i >> 16)), i as u16),
        }
    }

    fn record(expires: Ms32) -> TimeWait {
        TimeWait {
            snd_nxt: SeqNumber(1),
            rcv_nxt: SeqNumber(2),
            ts_recent: 0,
            ts_offset: 0,
            expires,
            last_oow_ack: 0,
            rcv_wnd: 100,
            ts_ok: false,
            reuseaddr: false,
        }
    }

    /// Issue #12 item 3: a million TIME-WAIT records, made 1,000 a millisecond over one
    /// second of the sim clock, 1% of them restarted by a segment 30 s in, and 1,000 more
    /// made 30.5 s in (which a restarted record's re-filed entry must not wait behind),
    /// end exactly when their 2*MSL is up: at each millisecond from 59 s to 92 s the
    /// records ended so far are exactly those whose deadline has passed (none early, none
    /// late), the next deadline the stack would sleep until is the earliest record's, and
    /// the expiry queues hold one entry per live record (none is scanned again).
    #[test]
    fn a_million_time_wait_records_expire_on_time() {
        const PER_MS: u32 = 1_000;
        const MS: u32 = 1_000;
        let restarted = |i: u32| i % 100 == 7;
        let mut tw = TimeWaits::new(TupleHasher::new((3, 5)));
        let at = |ms: u64| Instant::from_micros(ms * 1_000 + 500);
        let mut wake = Wake::NONE;
        for k in 0..MS {
            let now = at(u64::from(k));
            for j in 0..PER_MS {
                let t = tuple(k * PER_MS + j);
                tw.insert(
                    now,
                    tw.hash(&t),
                    t,
                    record(Ms32::ceil(now + TIMEWAIT_LEN)),
                    &mut wake,
                );
            }
        }
        assert_eq!(tw.len(), 1_000_000);
        // The stack's next deadline was lowered to the first record's.
        assert_eq!(Some(wake), tw.next_deadline().map(|d| Wake::from(Some(d))));
        for k in 0..MS {
            let now = at(u64::from(k) + 30_000);
            for j in (0..PER_MS).filter(|&j| restarted(k * PER_MS + j)) {
                let t = tuple(k * PER_MS + j);
                tw.restart(tw.hash(&t), &t, now);
            }
        }
        let late = at(30_500);
        for j in 0..PER_MS {
            let t = tuple(MS * PER_MS + j);
            tw.insert(
                late,
                tw.hash(&t),
                t,
                record(Ms32::ceil(late + TIMEWAIT_LEN)),
                &mut wake,
            );
        }
        let restarted_per_ms = (0..PER_MS).filter(|&j| restarted(j)).count() as u64;
        // Made at k ms + 0.5: due at k + 60,001 ms, or k + 90,001 if restarted; the late
        // ones at 90,501.
        let due_by = |m: u64| {
            let upto = |first: u64| (m + 1).saturating_sub(first).min(u64::from(MS));
            let late = if m >= 90_501 { u64::from(PER_MS) } else { 0 };
            upto(60_001) * (u64::from(PER_MS) - restarted_per_ms)
                + upto(90_001) * restarted_per_ms
                + late
        };
        let mut ended = 0;
        for m in 59_000..92_100u64 {
            let now = Instant::from_millis(m);
            ended += tw.expire(now);
            assert_eq!(ended, due_by(m), "at {m} ms");
            assert_eq!(tw.len() as u64, 1_001_000 - ended, "at {m} ms");
            assert_eq!(tw.queue_len(), tw.len(), "one entry per record at {m} ms");
            if let Some(next) = tw.next_deadline() {
                let next = next.as_millis();
                assert!(next > m, "a due record left at {m} ms");
                assert!(
                    due_by(next) > due_by(next - 1),
                    "woken for nothing at {next}"
                );
            }
        }
        assert_eq!(ended, 1_001_000);
        assert_eq!(tw.next_deadline(), None);
    }
}
