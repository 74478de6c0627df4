//! Congestion control: the hooks Linux's `struct tcp_congestion_ops` offers, Reno and CUBIC
//! behind them, and the shared slow-start / additive-increase helpers.
//!
//! Reading list:
//! - [RFC 5681](https://www.rfc-editor.org/rfc/rfc5681) (TCP congestion control: slow start,
//!   congestion avoidance, fast retransmit / fast recovery) and
//!   [RFC 6928](https://www.rfc-editor.org/rfc/rfc6928) (initial window of 10 segments).
//! - [RFC 9438](https://www.rfc-editor.org/rfc/rfc9438) (CUBIC), see [`cubic`].
//! - Linux `include/net/tcp.h` (`struct tcp_congestion_ops`, `enum tcp_ca_state`,
//!   `enum tcp_ca_event`, `tcp_in_slow_start`, `tcp_is_cwnd_limited`) and
//!   `net/ipv4/tcp_cong.c` (`tcp_slow_start`, `tcp_cong_avoid_ai`, `tcp_reno_*`).
//!
//! Units are Linux's: `cwnd`, `ssthresh` and packets in flight count segments (`u32`), not
//! bytes. `cwnd_cnt` is Linux's `snd_cwnd_cnt`, the count of ACKed segments towards the next
//! additive increase.
//!
//! Call graph (the TCB core calls; names in brackets are the Linux callers):
//! ```text
//! connection established        -> init                 [tcp_init_congestion_control]
//! ACK that acknowledges data    -> pkts_acked(acked, rtt) [tcp_clean_rtx_queue]
//!                               -> cong_avoid(acked)     [tcp_cong_avoid, only in Open/Disorder,
//!                                                         i.e. not while reducing cwnd]
//! entering Recovery / Cwr / Loss -> ssthresh()           [tcp_init_cwnd_reduction, tcp_enter_loss]
//! every ca_state change          -> set_state(new)       [tcp_set_ca_state]
//! undoing a spurious reduction   -> undo_cwnd()          [tcp_undo_cwnd_reduction]
//! send with nothing in flight    -> cwnd_event(TxStart)  [tcp_event_data_sent]
//! restart after idle             -> cwnd_event(CwndRestart) [tcp_cwnd_restart]
//! ```
//! For one ACK, `pkts_acked` comes before `cong_avoid`, as in Linux's `tcp_ack`.
//!
//! Per-connection cost: the algorithm lives inline in the TCB as a [`Cc`] enum (no `Box`, no
//! vtable, no heap); see the size tests at the bottom of this file.
//!
//! # Where this differs from Linux, and why
//! - [`CcState::in_flight`] stands in for Linux's per-window `is_cwnd_limited` and
//!   `max_packets_out` (which need the send path); see [`CcState::is_cwnd_limited`].
//! - Linux keeps `prior_cwnd` in `tcp_sock`; here each algorithm records it in
//!   [`CongestionControl::ssthresh`], which Linux always calls right after setting
//!   `prior_cwnd = snd_cwnd`, and [`CongestionControl::undo_cwnd`] uses it.
//! - [`CongestionControl::init`] also sets the initial `cwnd` and `ssthresh` (Linux does that in
//!   `tcp_init_sock` / `tcp_init_transfer`), so a new connection needs one call.

#[cfg(test)]
use core::time::Duration;

use ustack_obs::Instant;

pub mod cubic;
pub mod reno;

pub use cubic::Cubic;
pub use reno::Reno;

/// Initial congestion window in segments: Linux `TCP_INIT_CWND`,
/// [RFC 6928 §2](https://www.rfc-editor.org/rfc/rfc6928#section-2) ("IW = min (10*MSS, max
/// (2*MSS, 14600))"). Linux uses 10 segments whatever the MSS; so do we.
pub const TCP_INIT_CWND: u32 = 10;

/// "Infinite" slow-start threshold: Linux `TCP_INFINITE_SSTHRESH`.
/// [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1): "The initial value of
/// ssthresh SHOULD be set arbitrarily high".
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// The congestion state of one connection shared by the core and the algorithm: the fields of
/// Linux's `struct tcp_sock` that `tcp_congestion_ops` hooks read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcState {
    /// Congestion window, in segments (`snd_cwnd`).
    pub cwnd: u32,
    /// Slow-start threshold, in segments (`snd_ssthresh`).
    pub ssthresh: u32,
    /// Segments ACKed towards the next additive increase (`snd_cwnd_cnt`).
    pub cwnd_cnt: u32,
    /// Segments in flight (Linux `tcp_packets_in_flight`) when the ACK being processed arrived,
    /// before it removed what it acknowledges (Linux's `prior_in_flight`). The core keeps it
    /// current before calling `pkts_acked` / `cong_avoid`.
    pub in_flight: u32,
    /// Upper bound for `cwnd` (`snd_cwnd_clamp`; Linux default `~0`).
    pub cwnd_clamp: u32,
}

impl CcState {
    /// The state of a new connection, as Linux's `tcp_init_sock`: `cwnd` = [`TCP_INIT_CWND`],
    /// `ssthresh` = [`TCP_INFINITE_SSTHRESH`], no clamp, nothing in flight.
    #[cfg(test)]
    pub const fn new() -> Self {
        CcState {
            cwnd: TCP_INIT_CWND,
            ssthresh: TCP_INFINITE_SSTHRESH,
            cwnd_cnt: 0,
            in_flight: 0,
            cwnd_clamp: u32::MAX,
        }
    }

    /// Linux `tcp_in_slow_start`: `cwnd < ssthresh`.
    /// [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1): "The slow start
    /// algorithm is used when cwnd < ssthresh ... When cwnd and ssthresh are equal, the sender
    /// may use either slow start or congestion avoidance." Linux (and we) use congestion
    /// avoidance at equality.
    #[inline]
    pub const fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// Linux `tcp_is_cwnd_limited`: may an ACK grow `cwnd`? Growing a window the sender does
    /// not use would only build a burst for later
    /// ([RFC 7661](https://www.rfc-editor.org/rfc/rfc7661), Linux's rationale in `tcp.h`).
    ///
    /// Linux: `is_cwnd_limited || (in slow start && cwnd < 2 * max_packets_out)`, both tracked
    /// per window on the send path. We use [`in_flight`](Self::in_flight) (the flight when the
    /// ACK arrived) for both: limited if it filled `cwnd`, or, in slow start, if it was more
    /// than half of `cwnd` ("ensure cwnd grows to twice what was ACKed").
    #[inline]
    pub const fn is_cwnd_limited(&self) -> bool {
        cwnd_limited(self.cwnd, self.ssthresh, self.in_flight)
    }
}

/// [`CcState::is_cwnd_limited`] from the three numbers it reads, for a caller that has not
/// built a [`CcState`] (the pure ACK's, `Tcb::cc_ack_open`).
#[inline]
pub const fn cwnd_limited(cwnd: u32, ssthresh: u32, in_flight: u32) -> bool {
    in_flight >= cwnd || (cwnd < ssthresh && cwnd < in_flight.saturating_mul(2))
}

/// Linux `enum tcp_ca_state`: where the sender is in loss recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CaState {
    /// Nothing suspicious (`TCP_CA_Open`).
    #[default]
    Open,
    /// Duplicate ACKs or SACKs seen, no loss inferred yet (`TCP_CA_Disorder`).
    Disorder,
    /// cwnd being reduced after an ECN congestion signal or local congestion (`TCP_CA_CWR`).
    Cwr,
    /// Fast recovery ([RFC 5681 §3.2](https://www.rfc-editor.org/rfc/rfc5681#section-3.2),
    /// [RFC 6675](https://www.rfc-editor.org/rfc/rfc6675)) (`TCP_CA_Recovery`).
    Recovery,
    /// Retransmission timeout recovery (`TCP_CA_Loss`).
    Loss,
}

/// Linux `enum tcp_ca_event`: events the core reports through
/// [`CongestionControl::cwnd_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaEvent {
    /// First transmission while nothing was in flight (`CA_EVENT_TX_START`).
    TxStart,
    /// cwnd restarted after an idle period (`CA_EVENT_CWND_RESTART`;
    /// [RFC 5681 §4.1](https://www.rfc-editor.org/rfc/rfc5681#section-4.1)).
    #[allow(
        dead_code,
        reason = "the core does not restart cwnd after idle; CUBIC handles the event"
    )]
    CwndRestart,
    /// The end of a CWR period (`CA_EVENT_COMPLETE_CWR`).
    CompleteCwr,
    /// A retransmission timeout entered Loss (`CA_EVENT_LOSS`).
    Loss,
}

/// Linux `struct tcp_congestion_ops`: the hooks a congestion control algorithm implements.
///
/// Every hook takes the connection's [`CcState`]; hooks that need a clock take `now` (the
/// caller's clock, as everywhere in the stack). `acked` counts segments.
pub trait CongestionControl {
    /// The algorithm's name as Linux spells it (`tcp_congestion_control` sysctl values).
    #[allow(
        dead_code,
        reason = "for tests and debugging; the core selects by sysctl"
    )]
    fn name(&self) -> &'static str;

    /// Start on a new connection: reset the algorithm's state and set `st.cwnd` to
    /// [`TCP_INIT_CWND`] (capped by `cwnd_clamp`), `st.ssthresh` to [`TCP_INFINITE_SSTHRESH`]
    /// and `st.cwnd_cnt` to 0. [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1)
    /// also requires a 1-segment initial window if the SYN or SYN-ACK was lost (Linux
    /// `tcp_init_transfer`); the core applies that after `init`.
    fn init(&mut self, st: &mut CcState);

    /// The new slow-start threshold on entering Recovery, Cwr or Loss (Linux `.ssthresh`). The
    /// core stores it in `st.ssthresh`; the current `st.cwnd` is the window before the
    /// reduction (recorded as `prior_cwnd` for [`undo_cwnd`](Self::undo_cwnd)).
    fn ssthresh(&mut self, st: &CcState) -> u32;

    /// Grow `st.cwnd` for an ACK that newly delivered `acked` segments (cumulatively or by
    /// SACK: Linux `acked_sacked`) while not reducing cwnd (Linux `.cong_avoid`).
    fn cong_avoid(&mut self, st: &mut CcState, now: Instant, acked: u32);

    /// The connection's [`CaState`] changes to `new` (Linux `.set_state`).
    fn set_state(&mut self, st: &mut CcState, new: CaState);

    /// An event from the core (Linux `.cwnd_event`).
    fn cwnd_event(&mut self, st: &mut CcState, now: Instant, ev: CaEvent);

    /// An ACK acknowledged `acked` segments cumulatively; `rtt_us` is the round-trip time it
    /// measured in microseconds, if any (Karn's rule is the caller's: `None` when only
    /// retransmitted segments were acknowledged) (Linux `.pkts_acked` with `struct
    /// ack_sample`, whose `rtt_us` is microseconds, negative for none).
    fn pkts_acked(&mut self, st: &mut CcState, now: Instant, acked: u32, rtt_us: Option<u32>);

    /// The cwnd to restore when a reduction proves spurious (Linux `.undo_cwnd`).
    fn undo_cwnd(&mut self, st: &CcState) -> u32;
}

/// The algorithm of one connection, stored inline in the TCB: enum dispatch instead of
/// Linux's `icsk_ca_ops` pointer plus `icsk_ca_priv` bytes, so a connection costs no
/// allocation and calls are direct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cc {
    /// Reno / NewReno window arithmetic ([`reno`]).
    Reno(Reno),
    /// CUBIC with HyStart ([`cubic`]); Linux's default.
    Cubic(Cubic),
}

impl Cc {
    /// Names accepted by [`Cc::by_name`], as Linux lists them in
    /// `tcp_available_congestion_control`.
    #[cfg(test)]
    pub const AVAILABLE: &'static [&'static str] = &["reno", "cubic"];

    /// The algorithm called `name` (the `tcp_congestion_control` sysctl's values), freshly
    /// constructed; call [`CongestionControl::init`] before use. `None` for unknown names.
    pub fn by_name(name: &str) -> Option<Cc> {
        match name {
            "reno" => Some(Cc::Reno(Reno::new())),
            "cubic" => Some(Cc::Cubic(Cubic::new())),
            _ => None,
        }
    }
}

impl Default for Cc {
    /// CUBIC, Linux's default `tcp_congestion_control`.
    fn default() -> Self {
        Cc::Cubic(Cubic::new())
    }
}

impl CongestionControl for Cc {
    #[inline]
    fn name(&self) -> &'static str {
        match self {
            Cc::Reno(a) => a.name(),
            Cc::Cubic(a) => a.name(),
        }
    }
    #[inline]
    fn init(&mut self, st: &mut CcState) {
        match self {
            Cc::Reno(a) => a.init(st),
            Cc::Cubic(a) => a.init(st),
        }
    }
    #[inline]
    fn ssthresh(&mut self, st: &CcState) -> u32 {
        match self {
            Cc::Reno(a) => a.ssthresh(st),
            Cc::Cubic(a) => a.ssthresh(st),
        }
    }
    #[inline]
    fn cong_avoid(&mut self, st: &mut CcState, now: Instant, acked: u32) {
        match self {
            Cc::Reno(a) => a.cong_avoid(st, now, acked),
            Cc::Cubic(a) => a.cong_avoid(st, now, acked),
        }
    }
    #[inline]
    fn set_state(&mut self, st: &mut CcState, new: CaState) {
        match self {
            Cc::Reno(a) => a.set_state(st, new),
            Cc::Cubic(a) => a.set_state(st, new),
        }
    }
    #[inline]
    fn cwnd_event(&mut self, st: &mut CcState, now: Instant, ev: CaEvent) {
        match self {
            Cc::Reno(a) => a.cwnd_event(st, now, ev),
            Cc::Cubic(a) => a.cwnd_event(st, now, ev),
        }
    }
    #[inline]
    fn pkts_acked(&mut self, st: &mut CcState, now: Instant, acked: u32, rtt_us: Option<u32>) {
        match self {
            Cc::Reno(a) => a.pkts_acked(st, now, acked, rtt_us),
            Cc::Cubic(a) => a.pkts_acked(st, now, acked, rtt_us),
        }
    }
    #[inline]
    fn undo_cwnd(&mut self, st: &CcState) -> u32 {
        match self {
            Cc::Reno(a) => a.undo_cwnd(st),
            Cc::Cubic(a) => a.undo_cwnd(st),
        }
    }
}

/// Set `st` up for a new connection (the part of [`CongestionControl::init`] common to every
/// algorithm): Linux `tcp_init_sock` and `tcp_init_transfer`.
pub(crate) fn init_window(st: &mut CcState) {
    st.cwnd = TCP_INIT_CWND.min(st.cwnd_clamp);
    st.ssthresh = TCP_INFINITE_SSTHRESH;
    st.cwnd_cnt = 0;
}

/// Slow start: Linux `tcp_slow_start`. Grows `cwnd` by one segment per segment ACKed, up to
/// `ssthresh` (and `cwnd_clamp`), and returns the ACKed segments left over once `ssthresh` is
/// reached, for the caller to spend in congestion avoidance.
///
/// [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1): "During slow start, a
/// TCP increments cwnd by at most SMSS bytes for each ACK received that cumulatively
/// acknowledges new data." Linux (and we) count a stretch ACK of N segments as N ACKs, as
/// [RFC 3465](https://www.rfc-editor.org/rfc/rfc3465) byte counting does but without its L = 2
/// SMSS cap: a segment counts only when ACKed whole, which defends against ACK division.
///
/// Called outside slow start (`cwnd >= ssthresh`) it changes nothing and returns `acked`
/// (Linux would lower `cwnd` to `ssthresh`; no caller does that).
pub fn slow_start(st: &mut CcState, acked: u32) -> u32 {
    if !st.in_slow_start() {
        return acked;
    }
    let cwnd = st.cwnd.saturating_add(acked).min(st.ssthresh);
    let leftover = acked - (cwnd - st.cwnd);
    st.cwnd = cwnd.min(st.cwnd_clamp);
    leftover
}

/// Additive increase: Linux `tcp_cong_avoid_ai`. In theory `cwnd += 1/w` per segment ACKed:
/// `cwnd_cnt` collects ACKed segments and every `w` of them add one segment to `cwnd`.
///
/// With `w = cwnd` this is Reno's congestion avoidance,
/// [RFC 5681 §3.1](https://www.rfc-editor.org/rfc/rfc5681#section-3.1): "During congestion
/// avoidance, cwnd is incremented by roughly 1 full-sized segment per round-trip time (RTT)",
/// the segment-counting form of its equation (3) `cwnd += SMSS*SMSS/cwnd`. CUBIC passes its
/// `cnt`. Credits collected at a larger `w` are applied first, gently (one segment).
/// `w = 0` is treated as 1.
pub fn cong_avoid_ai(st: &mut CcState, w: u32, acked: u32) {
    let w = w.max(1);
    // "If credits accumulated at a higher w, apply them gently now."
    if st.cwnd_cnt >= w {
        st.cwnd_cnt = 0;
        st.cwnd = st.cwnd.saturating_add(1);
    }
    st.cwnd_cnt = st.cwnd_cnt.saturating_add(acked);
    if st.cwnd_cnt >= w {
        let delta = st.cwnd_cnt / w;
        st.cwnd_cnt -= delta * w;
        st.cwnd = st.cwnd.saturating_add(delta);
    }
    st.cwnd = st.cwnd.min(st.cwnd_clamp);
}

/// Test helpers shared by the algorithm tests.
#[cfg(test)]
pub(crate) mod sim {
    use super::*;

    /// A sender that always fills its window, over a path with a fixed `rtt` and no queue:
    /// each round, the `cwnd` segments sent are ACKed one by one, evenly spread over the next
    /// RTT ("a steady ACK clock"). Returns the cwnd at the end of each round; `now` advances
    /// by `rounds * rtt`.
    pub(crate) fn ack_clock<C: CongestionControl>(
        cc: &mut C,
        st: &mut CcState,
        now: &mut Instant,
        rtt: Duration,
        rounds: usize,
    ) -> Vec<u32> {
        let mut trace = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let n = st.cwnd.max(1);
            let start = *now;
            for i in 0..n {
                let t = start + rtt * i / n;
                // The sender refilled the window after every ACK: the flight was cwnd.
                st.in_flight = st.cwnd;
                cc.pkts_acked(st, t, 1, Some(crate::tcp::rtt::micros_u32(rtt)));
                cc.cong_avoid(st, t, 1);
            }
            *now = start + rtt;
            trace.push(st.cwnd);
        }
        trace
    }

    /// A loss detected by duplicate ACKs and repaired: Recovery is entered with the new
    /// ssthresh and left with `cwnd = ssthresh`, as PRR ends (RFC 6937).
    pub(crate) fn fast_recovery<C: CongestionControl>(cc: &mut C, st: &mut CcState) {
        st.ssthresh = cc.ssthresh(st);
        cc.set_state(st, CaState::Recovery);
        st.cwnd = st.ssthresh.min(st.cwnd_clamp);
        st.cwnd_cnt = 0;
        cc.set_state(st, CaState::Open);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn st(cwnd: u32, ssthresh: u32) -> CcState {
        CcState {
            cwnd,
            ssthresh,
            in_flight: cwnd,
            ..CcState::new()
        }
    }

    #[test]
    fn new_state_is_linux_defaults() {
        let s = CcState::new();
        assert_eq!(s.cwnd, 10);
        assert_eq!(s.ssthresh, 0x7fff_ffff);
        assert_eq!(s.cwnd_clamp, u32::MAX);
        assert!(s.in_slow_start());
    }

    #[test]
    fn slow_start_grows_by_acked_and_returns_leftover_at_ssthresh() {
        let mut s = st(10, 100);
        assert_eq!(slow_start(&mut s, 5), 0);
        assert_eq!(s.cwnd, 15);
        // 15 + 90 would pass ssthresh 100: stop there, 5 left for congestion avoidance.
        assert_eq!(slow_start(&mut s, 90), 5);
        assert_eq!(s.cwnd, 100);
        assert!(!s.in_slow_start());
        // Outside slow start: untouched.
        assert_eq!(slow_start(&mut s, 7), 7);
        assert_eq!(s.cwnd, 100);
    }

    #[test]
    fn slow_start_respects_clamp() {
        let mut s = st(10, 1000);
        s.cwnd_clamp = 12;
        slow_start(&mut s, 50);
        assert_eq!(s.cwnd, 12);
    }

    #[test]
    fn cong_avoid_ai_adds_one_per_w_acked() {
        let mut s = st(10, 5);
        for i in 1..=9 {
            cong_avoid_ai(&mut s, 10, 1);
            assert_eq!((s.cwnd, s.cwnd_cnt), (10, i));
        }
        cong_avoid_ai(&mut s, 10, 1);
        assert_eq!((s.cwnd, s.cwnd_cnt), (11, 0));
        // A stretch ACK of 25 with w = 10: +2, 5 credits kept.
        cong_avoid_ai(&mut s, 10, 25);
        assert_eq!((s.cwnd, s.cwnd_cnt), (13, 5));
        // Credits above a smaller w are applied gently: +1 and reset, then count this ACK.
        cong_avoid_ai(&mut s, 4, 1);
        assert_eq!((s.cwnd, s.cwnd_cnt), (14, 1));
    }

    #[test]
    fn cong_avoid_ai_respects_clamp_and_zero_w() {
        let mut s = st(10, 5);
        s.cwnd_clamp = 10;
        cong_avoid_ai(&mut s, 1, 100);
        assert_eq!(s.cwnd, 10);
        let mut s = st(10, 5);
        cong_avoid_ai(&mut s, 0, 3);
        assert_eq!(s.cwnd, 13);
    }

    #[test]
    fn cwnd_limited_follows_linux_rule() {
        // Congestion avoidance: only a full window counts.
        let mut s = st(20, 10);
        s.in_flight = 20;
        assert!(s.is_cwnd_limited());
        s.in_flight = 19;
        assert!(!s.is_cwnd_limited());
        // Slow start: more than half the window in flight is enough.
        let mut s = st(20, 100);
        s.in_flight = 11;
        assert!(s.is_cwnd_limited());
        s.in_flight = 10;
        assert!(!s.is_cwnd_limited());
    }

    #[test]
    fn by_name_knows_linux_names() {
        for &name in Cc::AVAILABLE {
            let cc = Cc::by_name(name).expect(name);
            assert_eq!(cc.name(), name);
        }
        assert!(Cc::by_name("bbr").is_none());
        assert!(Cc::by_name("Cubic").is_none());
        assert!(Cc::by_name("").is_none());
        assert_eq!(Cc::default().name(), "cubic");
    }

    #[test]
    fn cc_delegates_to_the_algorithm() {
        let mut reno = Cc::by_name("reno").unwrap();
        let mut cubic = Cc::by_name("cubic").unwrap();
        let mut s = CcState::new();
        reno.init(&mut s);
        assert_eq!(s.cwnd, TCP_INIT_CWND);
        s.cwnd = 100;
        assert_eq!(reno.ssthresh(&s), 50);
        assert_eq!(cubic.ssthresh(&s), 100 * 717 / 1024);
        // Undo restores the cwnd from before the reduction.
        s.cwnd = 50;
        assert_eq!(reno.undo_cwnd(&s), 100);
        assert_eq!(cubic.undo_cwnd(&s), 100);
    }

    #[test]
    fn per_connection_state_is_small_and_inline() {
        use core::mem::size_of;
        assert_eq!(size_of::<CcState>(), 20);
        assert!(
            size_of::<Reno>() <= 8,
            "Reno is {} bytes",
            size_of::<Reno>()
        );
        assert!(
            size_of::<Cubic>() <= 64,
            "Cubic is {} bytes",
            size_of::<Cubic>()
        );
        // The enum's tag hides in a niche of Cubic: no extra word per connection.
        assert_eq!(size_of::<Cc>(), size_of::<Cubic>());
    }

    proptest! {
        /// Slow start never passes ssthresh or the clamp, and accounts for every ACKed
        /// segment: growth + leftover == acked.
        #[test]
        fn slow_start_conserves_acked(cwnd in 1u32..100_000, ssthresh in 2u32..200_000,
                                      clamp in 1u32..300_000, acked in 0u32..100_000) {
            let mut s = st(cwnd.min(clamp), ssthresh);
            s.cwnd_clamp = clamp;
            let before = s;
            let left = slow_start(&mut s, acked);
            if before.in_slow_start() {
                prop_assert!(s.cwnd <= before.ssthresh.min(clamp));
                prop_assert!(s.cwnd >= before.cwnd);
                if s.cwnd < clamp {
                    prop_assert_eq!((s.cwnd - before.cwnd) + left, acked);
                }
            } else {
                prop_assert_eq!(s, before);
                prop_assert_eq!(left, acked);
            }
        }

        /// Additive increase never shrinks cwnd, never passes the clamp, and adds at most
        /// one segment per `w` ACKed plus the one gentle credit.
        #[test]
        fn cong_avoid_ai_bounded(cwnd in 1u32..1_000_000, cnt in 0u32..1_000_000,
                                 w in 1u32..100_000, acked in 0u32..100_000) {
            let mut s = st(cwnd, 1);
            s.cwnd_cnt = cnt;
            cong_avoid_ai(&mut s, w, acked);
            prop_assert!(s.cwnd >= cwnd);
            prop_assert!(s.cwnd - cwnd <= 1 + acked / w + 1);
            prop_assert!(s.cwnd_cnt < w);
        }
    }
}
