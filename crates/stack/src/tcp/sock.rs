//! One connection borrowed together with the stack state its processing touches, as Linux
//! passes `struct sock *sk` to every step of `tcp_input.c`: [`Sock`].
//!
//! A [`Stack`] owns every connection, so a step written as a method of `Stack` taking a
//! [`TcpHandle`] must look the connection up again after each call that borrowed the
//! stack, with a silent return in case it vanished. A `Sock` is looked up once and holds
//! `&mut Tcb` beside mutable borrows of the other fields of the stack that TCP's
//! per-connection steps need (buffer pool, timer queue, counters, ready list, the
//! challenge-ACK allowance) and the sysctls, so each step takes the connection in hand and
//! cannot lose it. What reaches past these (sending a segment, which needs the device
//! queue and the neighbour table; entering TIME-WAIT or forgetting the connection, which
//! change the tables) stays a method of `Stack`, called once a step is done.

use ustack_obs::{Counter, Instant, Mib};

use super::buffer::BufferPool;
use super::clock32::Deadline;
use super::rx_direct::RxDirect;
use super::scoreboard::SpareBoard;
use super::tcb::{Tcb, TcbFlags};
use super::{ChallengeAckLimit, State, Tcp, TcpHandle};
use crate::secret::siphash32;
use crate::slab::Slab;
use crate::socket::{Readiness, ReadyList, SocketKey};
use crate::stack::Wake;
use crate::{Stack, Sysctl};

/// The stack's timer queue: one entry per connection, for its earliest deadline (see
/// [`Sock::arm`]).
pub(crate) type TimerQueue = super::wheel::Wheel;

/// A connection and what its processing may touch (see the module docs).
pub(crate) struct Sock<'a> {
    /// The connection's handle: its key in the timer queue and the ready list.
    pub(crate) h: TcpHandle,
    pub(crate) tcb: &'a mut Tcb,
    /// The chunks its send and receive buffers are made of.
    pub(crate) pool: &'a mut BufferPool,
    /// A receive that leaves the payload on the device, if one is under way.
    pub(crate) rx_direct: &'a mut RxDirect,
    /// The retransmission-queue board kept for reuse.
    pub(crate) spare_board: &'a mut SpareBoard,
    pub(crate) timers: &'a mut TimerQueue,
    /// The stack's next deadline, lowered with every entry filed in `timers`.
    pub(crate) wake: &'a mut Wake,
    pub(crate) challenge: &'a mut ChallengeAckLimit,
    pub(crate) mib: &'a mut Mib,
    pub(crate) sysctl: &'a Sysctl,
    /// Where readiness changes go (Linux `sk_data_ready`, `sk_write_space`,
    /// `sk_state_change`).
    pub(crate) ready: &'a mut ReadyList,
    /// Connections of the stack (Linux `sk_sockets_allocated`, for the fair share of
    /// buffer memory under pressure).
    pub(crate) sockets: usize,
}

impl Stack {
    /// Connection `h` with what its processing touches, if the handle is live.
    #[inline]
    pub(crate) fn tcp_sock(&mut self, h: TcpHandle) -> Option<Sock<'_>> {
        self.tcp_sock_found(|conns| Some((h, conns.get_mut(h.index, h.generation)?)))
    }

    /// The connection in slot `index` (one an established-table lookup just found) with
    /// what its processing touches, its handle read off the slot: one look at the slab.
    #[inline(always)]
    pub(crate) fn tcp_sock_at(&mut self, index: u32) -> Option<Sock<'_>> {
        self.tcp_sock_found(|conns| {
            let (generation, tcb) = conns.by_index_mut_gen(index)?;
            Some((TcpHandle { index, generation }, tcb))
        })
    }

    /// The [`Sock`] of the connection `find` picks out of the slab.
    #[inline(always)]
    fn tcp_sock_found(
        &mut self,
        find: impl FnOnce(&mut Slab<Tcb>) -> Option<(TcpHandle, &mut Tcb)>,
    ) -> Option<Sock<'_>> {
        let Stack {
            tcp,
            mib,
            sysctl,
            ready,
            wake,
            ..
        } = self;
        let Tcp {
            conns,
            pool,
            rx_direct,
            spare_board,
            timers,
            challenge,
            ..
        } = tcp;
        let sockets = conns.len();
        let (h, tcb) = find(conns)?;
        Some(Sock {
            h,
            sockets,
            tcb,
            pool,
            rx_direct,
            spare_board,
            timers,
            wake,
            challenge,
            mib,
            sysctl,
            ready,
        })
    }

    /// Move a connection to `new` (see [`Sock::set_state`]).
    pub(crate) fn tcp_set_state(&mut self, h: TcpHandle, new: State) {
        if let Some(mut sk) = self.tcp_sock(h) {
            sk.set_state(new);
        }
    }

    /// File connection `h` to give its [`super::tcb::ActiveState`] back if it is idle
    /// (see [`super::tcb::Active`]): once, at `now` + [`super::ACTIVE_IDLE_GRACE`]; at
    /// once if it has moved no data yet.
    /// Called after every segment a connection takes: the common cases (nothing held, or
    /// already filed) are decided here, inline, the rest out of line.
    #[inline(always)]
    pub(crate) fn tcp_note_idle(&mut self, now: Instant, h: TcpHandle) {
        if let Some(tcb) = self.tcp.get(h)
            && tcb.active.is_held()
            && !tcb.flags.has(TcbFlags::IDLE_QUEUED)
        {
            self.tcp_note_idle_held(now, h);
        }
    }

    /// [`Stack::tcp_note_idle`] for a connection that holds its active state and is not
    /// filed: file it if it is idle.
    #[inline(never)]
    pub(crate) fn tcp_note_idle_held(&mut self, now: Instant, h: TcpHandle) {
        let Some(tcb) = self.tcp.get_mut(h) else {
            return;
        };
        if !tcb.active_idle() {
            return;
        }
        // A connection that has moved no data yet (only the SYNs are acknowledged: the
        // handshake's ACK took the box to record RACK's and the algorithm's first sample)
        // gives it back at once, so that an idle established connection never holds one.
        let syn_only = tcb.snd.una.0.wrapping_sub(tcb.snd.iss.0) <= 1
            && tcb.rcv.nxt.0.wrapping_sub(tcb.rcv.irs.0) <= 1;
        if syn_only {
            tcb.release_active();
            return;
        }
        tcb.flags.set(TcbFlags::IDLE_QUEUED);
        self.tcp_file_idle(now, h);
    }

    /// Give back the [`super::tcb::ActiveState`] of the connections filed by
    /// [`Stack::tcp_note_idle`] whose grace is up, if they are still idle (a connection
    /// that moved data meanwhile is filed again when next found idle). An idle receiver
    /// that took in-order data within the grace is filed again at once: no later segment
    /// might come to file it.
    pub(crate) fn tcp_release_idle(&mut self, now: Instant) {
        while let Some(&(at, h)) = self.tcp.idle_active.front() {
            if at > now {
                break;
            }
            self.tcp.idle_active.pop_front();
            let Some(tcb) = self.tcp.get_mut(h) else {
                continue;
            };
            if !tcb.active_idle() {
                tcb.flags.clear(TcbFlags::IDLE_QUEUED);
            } else if tcb.active.receiving(now) {
                self.tcp_file_idle(now, h);
            } else {
                tcb.flags.clear(TcbFlags::IDLE_QUEUED);
                tcb.release_active();
            }
        }
    }

    /// File connection `h` to be looked at by [`Stack::tcp_release_idle`] after the grace.
    #[inline]
    fn tcp_file_idle(&mut self, now: Instant, h: TcpHandle) {
        let at = now + super::ACTIVE_IDLE_GRACE;
        self.tcp.idle_active.push_back((at, h));
        self.wake.lower(at);
    }

    /// When [`Stack::tcp_release_idle`] next has work.
    #[inline]
    pub(crate) fn tcp_idle_deadline(&self) -> Option<Instant> {
        self.tcp.idle_active.front().map(|&(at, _)| at)
    }

    /// Make sure the timer queue wakes connection `h` at its earliest deadline (see
    /// [`Sock::arm`]).
    pub(crate) fn tcp_arm(&mut self, now: Instant, h: TcpHandle) {
        if let Some(mut sk) = self.tcp_sock(h) {
            sk.arm(now);
        }
    }
}

impl Sock<'_> {
    /// Make sure the stack's timer wheel will wake this connection at its earliest
    /// deadline: its one entry is moved earlier if a deadline comes before it (Linux
    /// `sk_reset_timer`). A deadline moved later or turned off leaves the entry where it
    /// is: it comes up, finds nothing due and is filed again at the connection's
    /// earliest deadline then, or not at all (as Linux leaves a cleared retransmission
    /// timer to fire and find `icsk_pending` clear: `inet_csk_clear_xmit_timer` without
    /// `INET_CSK_CLEAR_TIMERS`). `now` reads the 32-bit deadlines back as instants.
    /// (The test is inline: most calls find the wheel's entry early enough.)
    #[inline(always)]
    pub(crate) fn arm(&mut self, now: Instant) {
        let earliest = self.tcb.timers.earliest();
        if earliest.before(self.tcb.timers.queued) {
            self.arm_queue(now, earliest);
        }
    }

    /// [`Sock::arm`] after one timer was set to `d` and none moved earlier otherwise: `d`
    /// is then the only deadline that can come before the wheel's entry (which is no
    /// later than every other armed deadline, the invariant `arm` keeps), so the test is
    /// against `d` alone, without the minimum over every timer.
    #[inline(always)]
    pub(crate) fn arm_one(&mut self, now: Instant, d: Deadline) {
        debug_assert!(
            !self.tcb.timers.earliest().before(self.tcb.timers.queued)
                || d.before(self.tcb.timers.queued),
            "a timer other than the one set comes before the wheel's entry"
        );
        if d.before(self.tcb.timers.queued) {
            self.arm(now);
        }
    }

    /// [`Sock::arm`] when the wheel's entry is later than `earliest` (or there is none):
    /// move it there, O(1).
    #[inline(never)]
    fn arm_queue(&mut self, now: Instant, earliest: Deadline) {
        if let Some(at) = earliest.instant(now) {
            self.tcb.timers.queued = earliest;
            // When the wheel must run for it: `at` (at once if the wheel has run past it).
            let run = self
                .timers
                .arm(self.h.index, at.as_millis(), now.as_millis());
            self.wake.lower(Instant::from_millis(run));
        }
    }

    /// Move the connection to `new` (Linux `tcp_set_state`), keeping CurrEstab right
    /// (RFC 4022: ESTABLISHED and CLOSE-WAIT count).
    pub(crate) fn set_state(&mut self, new: State) {
        let old = self.tcb.state;
        self.tcb.state = new;
        match (old.counts_as_established(), new.counts_as_established()) {
            (false, true) => self.mib.inc(Counter::TcpCurrEstab),
            (true, false) => self.mib.dec(Counter::TcpCurrEstab),
            _ => {}
        }
        // Linux tcp_set_state: "case TCP_CLOSE: if (oldstate == TCP_CLOSE_WAIT ||
        // oldstate == TCP_ESTABLISHED) TCP_INC_STATS(net, TCP_MIB_ESTABRESETS)" (RFC 1213
        // tcpEstabResets: direct transitions to CLOSED from ESTABLISHED or CLOSE-WAIT).
        if new == State::Closed && old.counts_as_established() {
            self.mib.inc(Counter::TcpEstabResets);
        }
        // Readiness: a state change may change anything (Linux sk_state_change). Not for
        // an orphan: its handle is released and `tcp_close` queued its last wake-up (Linux:
        // sock_orphan clears sk_wq, so sk_state_change wakes no one after close).
        if !self.tcb.flags.has(TcbFlags::ORPHAN) {
            self.ready.mark(SocketKey::Tcp(self.h), Readiness::ALL);
        }
    }

    /// Whether a challenge ACK (RFC 5961 §3.2, §4.2) may be sent now, counting it
    /// (TCPChallengeACK) or its suppression; limited as Linux 6.x
    /// `tcp_send_challenge_ack` does (RFC 5961 §7 asks for a limit). CVE-2016-5696: one
    /// stack-wide count of fixed size per second is a side channel (an off-path attacker
    /// who exhausts it and counts the challenge ACKs it gets itself learns whether its
    /// guessed 4-tuple and sequence numbers drew one). So:
    /// 1. per connection, at most one per `tcp_invalid_ratelimit` (Linux
    ///    `__tcp_oow_rate_limited` on `last_oow_ack_time`; TCPACKSkippedChallenge);
    /// 2. stack-wide, only if `tcp_challenge_ack_limit` is below INT_MAX (Linux 6.0+'s
    ///    default, commit "tcp: make global challenge ack rate limitation per net-ns and
    ///    default disabled"):
    ///    each second the allowance is drawn at random from [limit/2, limit/2 + limit)
    ///    (Linux `get_random_u32_inclusive(half, ack_limit + half - 1)`), from a secret
    ///    key. A limit of 0 allows none (Linux would draw from the whole u32 range).
    pub(crate) fn challenge_ack_allowed(&mut self, now: Instant) -> bool {
        let ratelimit = self.sysctl.tcp_invalid_ratelimit;
        if super::timer::oow_rate_limited(&mut self.tcb.last_oow_ack, now, ratelimit) {
            self.mib.inc(Counter::TcpExtTCPACKSkippedChallenge);
            return false;
        }
        let limit = self.sysctl.tcp_challenge_ack_limit;
        if limit < i32::MAX as u64 {
            let c = &mut *self.challenge;
            let second = now.as_millis() / 1000;
            if c.second != second {
                let half = (limit + 1) >> 1;
                let r = u64::from(siphash32(c.key, &second.to_le_bytes()));
                let count = if limit == 0 { 0 } else { half + r % limit };
                c.second = second;
                c.left = count as u32;
            }
            if c.left == 0 {
                return false;
            }
            c.left -= 1;
        }
        self.mib.inc(Counter::TcpExtTCPChallengeACK);
        true
    }
}
