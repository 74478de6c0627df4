//! Reno: [RFC 5681](https://www.rfc-editor.org/rfc/rfc5681) slow start and congestion
//! avoidance with a halving multiplicative decrease, as Linux's `tcp_reno_cong_avoid`,
//! `tcp_reno_ssthresh` and `tcp_reno_undo_cwnd` (`net/ipv4/tcp_cong.c`). Fast retransmit and
//! the recovery itself (NewReno, RFC 6582; SACK, RFC 6675; PRR, RFC 6937) belong to the core;
//! this is only the window arithmetic.
//!
//! # Where this differs from RFC 5681, following Linux
//! - ssthresh after a loss is `max(cwnd / 2, 2)`, where
//!   [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1) equation (4) says
//!   "ssthresh = max (FlightSize / 2, 2*SMSS)". The two agree when the sender is cwnd-limited,
//!   the only case in which Linux grows cwnd at all.
//! - Windows count segments, not bytes, and a stretch ACK counts every segment it covers (see
//!   [`slow_start`]).

#[cfg(test)]
use core::time::Duration;

use ustack_obs::Instant;

use super::{CaEvent, CaState, CcState, CongestionControl, cong_avoid_ai, init_window, slow_start};

/// Reno's per-connection state: only the cwnd to restore on undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reno {
    /// cwnd just before the last reduction (Linux `tp->prior_cwnd`).
    prior_cwnd: u32,
}

impl Reno {
    /// A Reno instance; call [`CongestionControl::init`] on a new connection.
    pub const fn new() -> Self {
        Reno { prior_cwnd: 0 }
    }
}

impl CongestionControl for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn init(&mut self, st: &mut CcState) {
        *self = Reno::new();
        init_window(st);
    }

    /// Linux `tcp_reno_ssthresh`: half the window, at least 2.
    /// [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1): "When a TCP sender
    /// detects segment loss using the retransmission timer and the given segment has not yet
    /// been resent by way of the retransmission timer, the value of ssthresh MUST be set to no
    /// more than the value given in equation (4)"; §3.2 step 2 sets the same value on fast
    /// retransmit.
    fn ssthresh(&mut self, st: &CcState) -> u32 {
        self.prior_cwnd = st.cwnd;
        (st.cwnd >> 1).max(2)
    }

    /// Linux `tcp_reno_cong_avoid` (Jacobson, SIGCOMM '88): slow start below ssthresh, then
    /// one segment per window of segments ACKed (`w = cwnd`, about one segment per RTT).
    fn cong_avoid(&mut self, st: &mut CcState, _now: Instant, acked: u32) {
        if !st.is_cwnd_limited() {
            return;
        }
        let mut acked = acked;
        // "In "safe" area, increase."
        if st.in_slow_start() {
            acked = slow_start(st, acked);
            if acked == 0 {
                return;
            }
        }
        // "In dangerous area, increase slowly."
        cong_avoid_ai(st, st.cwnd, acked);
    }

    fn set_state(&mut self, _st: &mut CcState, _new: CaState) {}

    fn cwnd_event(&mut self, _st: &mut CcState, _now: Instant, _ev: CaEvent) {}

    fn pkts_acked(&mut self, _st: &mut CcState, _now: Instant, _acked: u32, _rtt_us: Option<u32>) {}

    /// Linux `tcp_reno_undo_cwnd`: `max(cwnd, prior_cwnd)`.
    fn undo_cwnd(&mut self, st: &CcState) -> u32 {
        st.cwnd.max(self.prior_cwnd)
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{ack_clock, fast_recovery};
    use super::super::{TCP_INFINITE_SSTHRESH, TCP_INIT_CWND};
    use super::*;
    use proptest::prelude::*;

    const RTT: Duration = Duration::from_millis(50);

    fn fresh() -> (Reno, CcState, Instant) {
        let mut reno = Reno::new();
        let mut st = CcState::new();
        st.cwnd = 77; // init must overwrite this
        reno.init(&mut st);
        (reno, st, Instant::from_secs(1))
    }

    #[test]
    fn init_sets_initial_window() {
        let (_, st, _) = fresh();
        assert_eq!(st.cwnd, TCP_INIT_CWND);
        assert_eq!(st.ssthresh, TCP_INFINITE_SSTHRESH);
        assert_eq!(st.cwnd_cnt, 0);
    }

    #[test]
    fn slow_start_doubles_per_rtt() {
        let (mut reno, mut st, mut now) = fresh();
        let trace = ack_clock(&mut reno, &mut st, &mut now, RTT, 4);
        assert_eq!(trace, [20, 40, 80, 160]);
    }

    #[test]
    fn slow_start_hands_over_to_congestion_avoidance_at_ssthresh() {
        let (mut reno, mut st, mut now) = fresh();
        st.ssthresh = 30;
        let trace = ack_clock(&mut reno, &mut st, &mut now, RTT, 4);
        // 10 -> 20 -> 30 (capped; the 10 leftover ACKs count towards the next +1) -> 31 -> 32.
        assert_eq!(trace, [20, 30, 31, 32]);
        assert_eq!(st.cwnd_cnt, 10);
        assert!(!st.in_slow_start());
    }

    #[test]
    fn ssthresh_is_half_the_window_at_least_two() {
        let (mut reno, mut st, _) = fresh();
        for (cwnd, want) in [
            (100, 50),
            (101, 50),
            (10, 5),
            (4, 2),
            (3, 2),
            (2, 2),
            (1, 2),
        ] {
            st.cwnd = cwnd;
            assert_eq!(reno.ssthresh(&st), want, "cwnd {cwnd}");
        }
    }

    /// RFC 5681 §3.1: in congestion avoidance cwnd grows by about one segment per RTT.
    #[test]
    fn congestion_avoidance_adds_one_segment_per_rtt() {
        let (mut reno, mut st, mut now) = fresh();
        st.cwnd = 50;
        st.ssthresh = 50;
        let trace = ack_clock(&mut reno, &mut st, &mut now, RTT, 30);
        let mut prev = 50;
        for (round, &cwnd) in trace.iter().enumerate() {
            assert_eq!(cwnd, prev + 1, "round {round}: {trace:?}");
            prev = cwnd;
        }
    }

    /// AIMD: a loss halves the window, then it climbs back linearly.
    #[test]
    fn aimd_sawtooth() {
        let (mut reno, mut st, mut now) = fresh();
        st.cwnd = 80;
        st.ssthresh = 80;
        ack_clock(&mut reno, &mut st, &mut now, RTT, 20);
        assert_eq!(st.cwnd, 100);
        fast_recovery(&mut reno, &mut st);
        assert_eq!((st.cwnd, st.ssthresh), (50, 50));
        let trace = ack_clock(&mut reno, &mut st, &mut now, RTT, 50);
        assert_eq!(*trace.last().unwrap(), 100);
        // Undo after a spurious reduction restores the window from before it.
        assert_eq!(reno.undo_cwnd(&CcState { cwnd: 60, ..st }), 100);
        assert_eq!(reno.undo_cwnd(&CcState { cwnd: 120, ..st }), 120);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let (mut reno, mut st, now) = fresh();
        st.cwnd = 40;
        st.ssthresh = 20;
        st.in_flight = 39;
        for _ in 0..1000 {
            reno.cong_avoid(&mut st, now, 1);
        }
        assert_eq!(st.cwnd, 40);
        // In slow start, a flight of more than half the window is enough to grow.
        st.ssthresh = 100;
        st.in_flight = 21;
        reno.cong_avoid(&mut st, now, 1);
        assert_eq!(st.cwnd, 41);
        st.in_flight = 20;
        reno.cong_avoid(&mut st, now, 1);
        assert_eq!(st.cwnd, 41);
    }

    proptest! {
        /// Whatever the ACK pattern, cong_avoid never shrinks cwnd nor passes the clamp, and
        /// outside slow start it grows by at most one segment per cwnd segments ACKed (+1).
        #[test]
        fn growth_is_bounded(cwnd in 1u32..10_000, ssthresh in 2u32..20_000,
                             clamp in 1u32..30_000,
                             acks in proptest::collection::vec(0u32..64, 1..200)) {
            let mut reno = Reno::new();
            let mut st = CcState { cwnd: cwnd.min(clamp), ssthresh, cwnd_clamp: clamp,
                                   ..CcState::new() };
            for acked in acks {
                let before = st.cwnd;
                st.in_flight = st.cwnd;
                let was_slow_start = st.in_slow_start();
                reno.cong_avoid(&mut st, Instant::ZERO, acked);
                prop_assert!(st.cwnd >= before);
                prop_assert!(st.cwnd <= clamp.max(before));
                if was_slow_start {
                    prop_assert!(st.cwnd <= before + acked);
                } else {
                    prop_assert!(st.cwnd - before <= acked / before + 2);
                }
            }
        }
    }
}
