//! RTT estimation and the retransmission timeout:
//! [RFC 6298](https://www.rfc-editor.org/rfc/rfc6298) ("Computing TCP's Retransmission
//! Timer") with Linux's constants and its placement of the minimum.
//!
//! Reading list:
//! - RFC 6298 §2 (the estimator and RTO), §3 (Karn's algorithm), §5 (managing the timer,
//!   exponential backoff, the 3 s fallback after a retransmitted SYN).
//! - Linux `net/ipv4/tcp_input.c`: `tcp_rtt_estimator` (Van Jacobson's fixed point: SRTT
//!   scaled by 8, the mean deviation by 4), `tcp_set_rto`, `tcp_ack_update_rtt`;
//!   `include/net/tcp.h`: `__tcp_set_rto`, `tcp_bound_rto`, `TCP_RTO_MIN`, `TCP_RTO_MAX`,
//!   `TCP_TIMEOUT_INIT`, `TCP_TIMEOUT_FALLBACK`; `include/net/inet_connection_sock.h`:
//!   `inet_csk_rto_backoff`; `net/ipv4/tcp_metrics.c`: `tcp_init_metrics` (RFC 6298 §5.7).
//!
//! Call graph (the caller is the TCP core; this module holds no clock):
//! ```text
//! ACK advances snd_una, segment never retransmitted (Karn)  -> RttEstimator::sample_us(now - sent_at, µs)
//!     (or any ACK with a TSecr, RFC 7323 §4)                   RttEstimator::reset_backoff()
//! arming the retransmission timer                           -> now + RttEstimator::rto()
//! retransmission timer fires (tcp_retransmit_timer)         -> RttEstimator::backoff()
//! handshake done without an RTT sample (tcp_init_metrics)   -> RttEstimator::use_fallback_rto()
//! ```
//!
//! # Karn's algorithm is the caller's job
//! RFC 6298 §3: "TCP MUST use Karn's algorithm \[KP87\] for taking RTT samples. That is, RTT
//! samples MUST NOT be made using segments that were retransmitted ... The only case when
//! TCP can safely take RTT samples from retransmitted segments is when the TCP timestamp
//! option \[JBB92\] is employed". [`RttEstimator::sample`] takes any duration it is given; the
//! caller (the retransmission queue knows which segments were retransmitted) filters.
//!
//! # Linux's choices, and where we differ from both
//! - **Fixed point as Linux.** SRTT is kept as `8 * SRTT` and the deviation as `4 * RTTVAR`,
//!   both in microseconds (`tp->srtt_us`, `tp->mdev_us`), so the updates are shifts and adds.
//!   The rounding differs from exact arithmetic by at most a few microseconds.
//! - **The floor sits on the variance term, not on the RTO.** RFC 6298 (2.4): "Whenever RTO
//!   is computed, if it is less than 1 second, then the RTO SHOULD be rounded up to 1
//!   second." Linux instead floors the *variance term* at `rto_min` (200 ms,
//!   `TCP_RTO_MIN`): `RTO = SRTT + max(4 * RTTVAR, rto_min)`, which also covers RFC 6298's
//!   clock granularity term `G` (`RTO <- SRTT + max (G, K*RTTVAR)`). We follow Linux.
//! - **Maximum 120 s** (`TCP_RTO_MAX`): RFC 6298 (2.5) "A maximum value MAY be placed on RTO
//!   provided it is at least 60 seconds."
//! - **No per-round `mdev_max` smoothing, no Eifel-like gain.** Linux lets `rttvar_us` rise at
//!   once but fall only once per round trip (tracked with `rtt_seq`/`snd_una`), and when the
//!   RTT drops it uses a gain of 1/32 instead of 1/4 for the deviation. Both need sequence
//!   numbers this block does not see; we apply RFC 6298 (2.3) exactly as written (alpha 1/8,
//!   beta 1/4). With one sample per ACK our RTTVAR therefore decays faster than Linux's, but
//!   the `rto_min` floor bounds how low the RTO can go (SRTT + 200 ms), so in practice the
//!   RTO differs only on paths with a large, then shrinking, variance.
//! - **Backoff is not reset by [`RttEstimator::sample`].** Linux's `tcp_ack_update_rtt`
//!   clears `icsk_backoff` after every valid sample ("RFC6298: only reset backoff on valid RTT
//!   measurement"); here the caller does it with [`RttEstimator::reset_backoff`], so the
//!   estimator stays a pure RFC 6298 §2 calculator.
//! - **`min_rtt` is the minimum over the connection's life.** Linux keeps a windowed minimum
//!   (`tcp_update_rtt_min`, `win_minmax` over `tcp_min_rtt_wlen` = 300 s), which needs a clock
//!   per sample; consumers that need a windowed minimum (BBR, RACK) keep their own.
//! - Samples above `MAX_SAMPLE` (about 536 s, where `8 * SRTT` in microseconds stops
//!   fitting in a `u32`, as in Linux) are clamped to it. Such an RTO is capped at `rto_max`
//!   anyway.

use core::time::Duration;

/// RFC 6298 (2.1) "the sender SHOULD set RTO <- 1 second" until an RTT sample exists
/// (Linux `TCP_TIMEOUT_INIT`).
pub const TCP_TIMEOUT_INIT: Duration = Duration::from_secs(1);

/// RFC 6298 (5.7): the RTO "MUST be re-initialized to 3 seconds when data transmission
/// begins" if the SYN's timer expired (Linux `TCP_TIMEOUT_FALLBACK`).
pub const TCP_TIMEOUT_FALLBACK: Duration = Duration::from_secs(3);

/// Linux's default floor on the variance term (`TCP_RTO_MIN`, HZ/5; the `RtoMin` of
/// `/proc/net/snmp`, in ms).
pub const TCP_RTO_MIN: Duration = Duration::from_millis(200);

/// Linux's cap on the RTO, backoff included (`TCP_RTO_MAX`; `RtoMax` in `/proc/net/snmp`).
pub const TCP_RTO_MAX: Duration = Duration::from_secs(120);

/// The largest RTT sample used; longer samples are clamped to it (`8 * SRTT` in
/// microseconds must fit in 32 bits, as Linux's `srtt_us`).
#[cfg(test)]
pub const MAX_SAMPLE: Duration = Duration::from_micros(MAX_SAMPLE_US as u64);

const MAX_SAMPLE_US: u32 = u32::MAX >> 3;

/// `min_rtt_us` before any sample.
const NO_MIN_RTT: u32 = u32::MAX;

/// Microseconds in `d`, saturating at `u32::MAX` (about 71 minutes).
pub(crate) const fn micros_u32(d: Duration) -> u32 {
    // In u64 (`Duration::as_micros` is a u128: a per-ACK cost).
    let us = d
        .as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(d.subsec_micros() as u64);
    if us > u32::MAX as u64 {
        u32::MAX
    } else {
        us as u32
    }
}

/// The bounds of the RTO: where they come from is the caller's (Linux reads `rto_min`
/// from the route, `tcp_rto_min_us()`, and `rto_max` from `tcp_rto_max()`), so that the
/// per-connection [`RttEstimator`] does not carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtoBounds {
    /// Floor on the variance term, microseconds.
    min_us: u32,
    /// Cap on the RTO, backoff included, microseconds.
    max_us: u32,
}

impl RtoBounds {
    /// Linux's defaults: [`TCP_RTO_MIN`] and [`TCP_RTO_MAX`].
    pub const LINUX: RtoBounds = RtoBounds::new(TCP_RTO_MIN, TCP_RTO_MAX);

    /// `rto_min` floors the variance term (a route's `rto_min`), `rto_max` caps every RTO;
    /// both kept in microseconds, saturating at about 71 minutes.
    pub const fn new(rto_min: Duration, rto_max: Duration) -> Self {
        RtoBounds {
            min_us: micros_u32(rto_min),
            max_us: micros_u32(rto_max),
        }
    }
}

/// One connection's RTT estimator and retransmission timeout (RFC 6298 with Linux's
/// constants; see the [module docs](self) for the differences). `Copy`, 16 bytes, no heap;
/// the RTO's bounds are the caller's ([`RtoBounds`]).
///
/// ```text
/// first sample R:        SRTT = R,  RTTVAR = R/2                          (RFC 6298 2.2)
/// later sample R':       RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'|, then
///                        SRTT   = 7/8 SRTT   + 1/8 R'                     (RFC 6298 2.3)
/// RTO (Linux):           min((SRTT + max(4 RTTVAR, rto_min)) << backoffs, rto_max)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttEstimator {
    /// `8 * SRTT` in microseconds; 0 until the first sample (Linux `tp->srtt_us`).
    srtt8_us: u32,
    /// `4 * RTTVAR` in microseconds (Linux `tp->mdev_us`).
    mdev4_us: u32,
    /// Smallest sample seen, microseconds; `NO_MIN_RTT` before any.
    min_rtt_us: u32,
    /// Consecutive timeouts (Linux `icsk_backoff`), saturating.
    backoffs: u8,
    /// Retransmission timeouts since SND.UNA last advanced (Linux `icsk_retransmits`),
    /// saturating: what gives up on a connection, where `backoffs` times the RTO.
    retransmits: u8,
    /// No sample from the handshake and it was retransmitted: RTO 3 s until the first sample.
    fallback: bool,
}

impl RttEstimator {
    /// A new estimator: RTO 1 s until the first sample (RFC 6298 (2.1), Linux
    /// `TCP_TIMEOUT_INIT`).
    pub const fn new() -> Self {
        RttEstimator {
            srtt8_us: 0,
            mdev4_us: 0,
            min_rtt_us: NO_MIN_RTT,
            backoffs: 0,
            retransmits: 0,
            fallback: false,
        }
    }

    /// Feed one RTT measurement (RFC 6298 §2.2 for the first, §2.3 after). The caller
    /// applies Karn's algorithm (no samples from retransmitted segments unless timed by
    /// TSecr). Durations below a microsecond count as 0; above `MAX_SAMPLE` as that.
    pub fn sample(&mut self, rtt: Duration) {
        self.sample_us(micros_u32(rtt));
    }

    /// [`sample`](Self::sample) from a measurement in microseconds (Linux
    /// `tcp_rtt_estimator`'s `mrtt_us`, a `long` of microseconds): what the ACK path
    /// measures, with no `Duration` arithmetic on the way. Above `MAX_SAMPLE` counts as
    /// that.
    #[inline]
    pub fn sample_us(&mut self, rtt_us: u32) {
        let m = rtt_us.min(MAX_SAMPLE_US);
        self.min_rtt_us = self.min_rtt_us.min(m);
        if self.srtt8_us == 0 {
            // RFC 6298 (2.2): "When the first RTT measurement R is made, the host MUST set
            //   SRTT <- R, RTTVAR <- R/2".
            // Linux tcp_rtt_estimator, "no previous measure": srtt = m << 3, mdev = m << 1.
            self.srtt8_us = m << 3;
            self.mdev4_us = m << 1;
        } else {
            // RFC 6298 (2.3): "RTTVAR <- (1 - beta) * RTTVAR + beta * |SRTT - R'|;
            //   SRTT <- (1 - alpha) * SRTT + alpha * R' ... The value of SRTT used in the
            //   update to RTTVAR is its value before updating SRTT itself ... updating RTTVAR
            //   and SRTT MUST be computed in the above order." alpha = 1/8, beta = 1/4.
            // In Linux's scaled form: err = R' - SRTT; 4V += |err| - 4V/4; 8S += err.
            let err = i64::from(m) - i64::from(self.srtt8_us >> 3);
            // Bounded: 4V stays below 4 * MAX_SAMPLE_US and 8S below 8 * MAX_SAMPLE_US.
            self.mdev4_us = self.mdev4_us - (self.mdev4_us >> 2) + err.unsigned_abs() as u32;
            self.srtt8_us = (i64::from(self.srtt8_us) + err) as u32;
        }
        // Linux: `tp->srtt_us = max(1U, srtt)`, so a zero RTT (same-instant delivery in a
        // simulator, loopback) still counts as "measured".
        self.srtt8_us = self.srtt8_us.max(1);
    }

    /// The retransmission timeout to arm now within Linux's default bounds
    /// ([`RtoBounds::LINUX`]; see [`rto_within`](Self::rto_within)).
    pub fn rto(&self) -> Duration {
        self.rto_within(RtoBounds::LINUX)
    }

    /// The retransmission timeout to arm now: the base (`base_rto`) doubled once per
    /// [backoff](Self::backoff), capped at `rto_max` (Linux `inet_csk_rto_backoff`).
    pub fn rto_within(&self, bounds: RtoBounds) -> Duration {
        Duration::from_micros(self.rto_within_us(bounds))
    }

    /// [`rto`](Self::rto) in microseconds (for arithmetic on the per-segment path).
    #[inline]
    pub fn rto_us(&self) -> u64 {
        self.rto_within_us(RtoBounds::LINUX)
    }

    #[inline(always)]
    fn rto_within_us(&self, bounds: RtoBounds) -> u64 {
        let base = self.base_rto_us(bounds);
        if self.backoffs == 0 {
            // The common case (every segment sent arms a timer from it): no doubling,
            // and `base_rto_us` is already within `max_us`.
            return base;
        }
        let rto = if self.backoffs >= 64 {
            u64::MAX
        } else {
            base.saturating_mul(1u64 << self.backoffs)
        };
        rto.min(u64::from(bounds.max_us))
    }

    /// The RTO without backoff (Linux `icsk_rto` as `tcp_set_rto` leaves it):
    /// `SRTT + max(4 * RTTVAR, rto_min)` capped at `rto_max`; before any sample 1 s, or 3 s
    /// after [`use_fallback_rto`](Self::use_fallback_rto).
    #[cfg(test)]
    pub fn base_rto(&self) -> Duration {
        Duration::from_micros(self.base_rto_us(RtoBounds::LINUX))
    }

    fn base_rto_us(&self, bounds: RtoBounds) -> u64 {
        let rto = if self.srtt8_us == 0 {
            let init = if self.fallback {
                TCP_TIMEOUT_FALLBACK
            } else {
                TCP_TIMEOUT_INIT
            };
            init.as_micros() as u64
        } else {
            // Linux __tcp_set_rto: (srtt_us >> 3) + rttvar_us, where rttvar_us is at least
            // tcp_rto_min_us(sk). RFC 6298 (2.3): "RTO <- SRTT + max (G, K*RTTVAR)", K = 4.
            u64::from(self.srtt8_us >> 3) + u64::from(self.mdev4_us.max(bounds.min_us))
        };
        // Linux tcp_bound_rto.
        rto.min(u64::from(bounds.max_us))
    }

    /// The retransmission timer expired: RFC 6298 (5.5) "The host MUST set RTO <- RTO * 2
    /// ("back off the timer"). The maximum value discussed in (2.5) above may be used to
    /// provide an upper bound to this doubling operation." The count saturates at 255; the
    /// RTO stops at `rto_max` long before (7 doublings from 1 s reach 120 s).
    pub fn backoff(&mut self) {
        self.backoffs = self.backoffs.saturating_add(1);
    }

    /// Forget the backoff: call when an ACK brings a valid RTT sample (Linux
    /// `tcp_ack_update_rtt`: "RFC6298: only reset backoff on valid RTT measurement"), not
    /// for an ACK without one: Karn's algorithm keeps the backed-off RTO until then (RFC
    /// 6298 §5: a new measurement "may result in "collapsing" RTO back down after it has
    /// been subject to exponential back off (rule 5.5)").
    pub fn reset_backoff(&mut self) {
        self.backoffs = 0;
    }

    /// The retransmission timer expired and the earliest segment went again: one more
    /// retransmission (Linux `icsk_retransmits++` in `tcp_retransmit_timer`; the backoff
    /// is [`backoff`](Self::backoff)).
    pub fn count_retransmit(&mut self) {
        self.retransmits = self.retransmits.saturating_add(1);
    }

    /// SND.UNA advanced (Linux `tcp_ack`: "icsk->icsk_retransmits = 0"), or a timeout
    /// proved spurious (`tcp_try_undo_loss`).
    pub fn clear_retransmits(&mut self) {
        self.retransmits = 0;
    }

    /// Retransmission timeouts since SND.UNA last advanced (Linux `icsk_retransmits`); the
    /// caller compares it with `tcp_retries1`/`tcp_retries2`.
    pub fn retransmits(&self) -> u8 {
        self.retransmits
    }

    /// Consecutive backoffs since the last reset (Linux `icsk_backoff`).
    pub fn backoffs(&self) -> u8 {
        self.backoffs
    }

    /// RFC 6298 (5.7): "If the timer expires awaiting the ACK of a SYN segment and the TCP
    /// implementation is using an RTO less than 3 seconds, the RTO MUST be re-initialized to
    /// 3 seconds when data transmission begins (i.e., after the three-way handshake
    /// completes)." As Linux's `tcp_init_metrics`, this applies only while no RTT sample
    /// exists (a retransmitted SYN gives none, by Karn); it does nothing otherwise. The
    /// fallback is the RTO itself, not backed off further (Linux sets `icsk_rto` to
    /// `TCP_TIMEOUT_FALLBACK`).
    pub fn use_fallback_rto(&mut self) {
        if self.srtt8_us == 0 {
            self.fallback = true;
            self.backoffs = 0;
        }
    }

    /// The smoothed RTT, SRTT (`None` before the first sample).
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_ns().map(Duration::from_nanos)
    }

    /// [`srtt`](Self::srtt) in nanoseconds.
    #[inline]
    pub fn srtt_ns(&self) -> Option<u64> {
        // srtt8_us is in units of 1/8 µs = 125 ns.
        (self.srtt8_us != 0).then(|| u64::from(self.srtt8_us) * 125)
    }

    /// The RTT variation, RTTVAR (zero before the first sample). The RTO uses
    /// `max(4 * RTTVAR, rto_min)`.
    #[cfg(test)]
    pub fn rttvar(&self) -> Duration {
        // mdev4_us is 4 * RTTVAR in µs: units of 250 ns.
        Duration::from_nanos(u64::from(self.mdev4_us) * 250)
    }

    /// The smallest RTT sample seen on this connection (`None` before the first).
    pub fn min_rtt(&self) -> Option<Duration> {
        (self.min_rtt_us != NO_MIN_RTT).then(|| Duration::from_micros(u64::from(self.min_rtt_us)))
    }
}

impl Default for RttEstimator {
    fn default() -> Self {
        RttEstimator::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn before_any_sample_rto_is_one_second() {
        let e = RttEstimator::default();
        assert_eq!(e.rto(), Duration::from_secs(1));
        assert_eq!(e.srtt(), None);
        assert_eq!(e.rttvar(), Duration::ZERO);
        assert_eq!(e.min_rtt(), None);
        assert_eq!(e.backoffs(), 0);
    }

    #[test]
    fn per_connection_state_is_small() {
        assert!(core::mem::size_of::<RttEstimator>() <= 16);
    }

    #[test]
    fn first_sample_sets_srtt_to_r_and_rttvar_to_half_r() {
        // R = 300 ms: SRTT 300, RTTVAR 150, RTO = 300 + 4 * 150 = 900 ms (4*RTTVAR > 200 ms).
        let mut e = RttEstimator::default();
        e.sample(ms(300));
        assert_eq!(e.srtt(), Some(ms(300)));
        assert_eq!(e.rttvar(), ms(150));
        assert_eq!(e.rto(), ms(900));
        // Where RFC 6298 (2.4) would round 900 ms up to 1 s, Linux does not.
        assert!(e.rto() < Duration::from_secs(1));
    }

    #[test]
    fn subsequent_samples_follow_rfc6298_step_by_step() {
        let mut e = RttEstimator::default();
        e.sample(ms(100));
        assert_eq!(e.srtt(), Some(ms(100)));
        assert_eq!(e.rttvar(), ms(50));
        assert_eq!(e.rto(), ms(300)); // 100 + max(200, 200)

        // R' = 200 ms: RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 62.5 ms (old SRTT used first),
        // SRTT = 7/8 * 100 + 1/8 * 200 = 112.5 ms, RTO = 112.5 + 4 * 62.5 = 362.5 ms.
        e.sample(ms(200));
        assert_eq!(e.rttvar(), us(62_500));
        assert_eq!(e.srtt(), Some(us(112_500)));
        assert_eq!(e.rto(), us(362_500));

        // R' = 50 ms: RTTVAR = 3/4 * 62.5 + 1/4 * |112.5 - 50| = 62.5 ms,
        // SRTT = 7/8 * 112.5 + 1/8 * 50 = 104.6875 ms, RTO = 104.6875 + 250 = 354.6875 ms.
        e.sample(ms(50));
        assert_eq!(e.rttvar(), us(62_500));
        assert_eq!(e.srtt(), Some(Duration::from_nanos(104_687_500)));
        // The RTO is computed in whole microseconds (Linux: srtt_us >> 3).
        assert!(e.rto().abs_diff(Duration::from_nanos(354_687_500)) < us(1));
    }

    #[test]
    fn rttvar_is_updated_with_the_old_srtt() {
        // If SRTT were updated first, RTTVAR would use |112.5 - 200| = 87.5 instead of 100.
        let mut e = RttEstimator::default();
        e.sample(ms(100));
        e.sample(ms(200));
        assert_eq!(e.rttvar(), us(62_500));
        assert_ne!(e.rttvar(), us(37_500 + 21_875));
    }

    #[test]
    fn rto_floor_is_rto_min_above_srtt() {
        // A steady 1 ms path: RTTVAR decays towards 0, the RTO settles at SRTT + 200 ms.
        let mut e = RttEstimator::default();
        for _ in 0..200 {
            e.sample(ms(1));
        }
        assert_eq!(e.srtt(), Some(ms(1)));
        assert!(e.rttvar() < us(10));
        assert_eq!(e.rto(), ms(201));

        // A variable path: 4 * RTTVAR above the floor is used as is.
        let mut v = RttEstimator::default();
        v.sample(ms(400));
        assert_eq!(v.rto(), ms(400 + 800));
    }

    #[test]
    fn a_route_rto_min_is_honoured() {
        // `ip route ... rto_min 5ms`: a 1 ms path gets RTO 6 ms.
        let mut e = RttEstimator::new();
        for _ in 0..200 {
            e.sample(ms(1));
        }
        assert_eq!(e.rto_within(RtoBounds::new(ms(5), TCP_RTO_MAX)), ms(6));
        assert_eq!(e.rto(), ms(201));
    }

    #[test]
    fn zero_rtt_sample_counts_as_measured() {
        let mut e = RttEstimator::default();
        e.sample(Duration::ZERO);
        assert!(e.srtt().is_some());
        assert_eq!(e.min_rtt(), Some(Duration::ZERO));
        assert_eq!(e.rto(), ms(200));
        e.sample(Duration::ZERO);
        assert!(e.srtt().is_some());
    }

    #[test]
    fn backoff_doubles_and_caps_at_120_seconds() {
        let mut e = RttEstimator::default();
        let expect = [2, 4, 8, 16, 32, 64, 120, 120, 120];
        for (i, secs) in expect.into_iter().enumerate() {
            e.backoff();
            assert_eq!(e.backoffs() as usize, i + 1);
            assert_eq!(
                e.rto(),
                Duration::from_secs(secs),
                "after {} backoffs",
                i + 1
            );
        }
        assert_eq!(e.base_rto(), Duration::from_secs(1));
        e.reset_backoff();
        assert_eq!(e.backoffs(), 0);
        assert_eq!(e.rto(), Duration::from_secs(1));
    }

    #[test]
    fn backoff_applies_to_the_measured_rto() {
        let mut e = RttEstimator::default();
        e.sample(ms(100)); // RTO 300 ms
        e.backoff();
        assert_eq!(e.rto(), ms(600));
        e.backoff();
        assert_eq!(e.rto(), ms(1200));
        // A new sample alone does not clear the backoff; the caller resets it.
        e.sample(ms(100));
        assert_eq!(e.backoffs(), 2);
        e.reset_backoff();
        assert!(e.rto() < ms(400));
    }

    #[test]
    fn backoff_count_saturates_without_overflow() {
        let mut e = RttEstimator::default();
        e.sample(MAX_SAMPLE);
        for _ in 0..1000 {
            e.backoff();
        }
        assert_eq!(e.backoffs(), u8::MAX);
        assert_eq!(e.rto(), TCP_RTO_MAX);
    }

    #[test]
    fn huge_samples_are_clamped_and_rto_capped() {
        let mut e = RttEstimator::default();
        e.sample(Duration::from_secs(3600));
        assert_eq!(e.srtt(), Some(MAX_SAMPLE));
        assert_eq!(e.rto(), TCP_RTO_MAX);
        e.sample(Duration::MAX);
        e.sample(Duration::ZERO);
        assert_eq!(e.rto(), TCP_RTO_MAX);
        // A configured maximum above u32 microseconds saturates rather than wrapping.
        let big = RtoBounds::new(TCP_RTO_MIN, Duration::from_secs(1 << 40));
        assert_eq!(RttEstimator::new().rto_within(big), Duration::from_secs(1));
    }

    #[test]
    fn min_rtt_is_the_smallest_sample() {
        let mut e = RttEstimator::default();
        for r in [30, 10, 50, 20] {
            e.sample(ms(r));
        }
        assert_eq!(e.min_rtt(), Some(ms(10)));
    }

    #[test]
    fn fallback_rto_is_three_seconds_until_the_first_sample() {
        let mut e = RttEstimator::default();
        e.use_fallback_rto();
        assert_eq!(e.rto(), Duration::from_secs(3));
        e.backoff();
        assert_eq!(e.rto(), Duration::from_secs(6));
        e.reset_backoff();
        e.sample(ms(100));
        assert_eq!(e.rto(), ms(300));

        // With a sample from the handshake, the fallback does not apply.
        let mut s = RttEstimator::default();
        s.sample(ms(100));
        s.use_fallback_rto();
        assert_eq!(s.rto(), ms(300));
    }

    #[test]
    fn rto_max_below_initial_rto_caps_everything() {
        let e = RttEstimator::new();
        assert_eq!(e.rto_within(RtoBounds::new(TCP_RTO_MIN, ms(500))), ms(500));
    }

    /// RFC 6298 §2 in floating point, the reference the fixed-point code must track.
    fn reference(samples: &[u64]) -> (f64, f64) {
        let (mut srtt, mut rttvar) = (samples[0] as f64, samples[0] as f64 / 2.0);
        for &r in &samples[1..] {
            let r = r as f64;
            rttvar = 0.75 * rttvar + 0.25 * (srtt - r).abs();
            srtt = 0.875 * srtt + 0.125 * r;
        }
        (srtt, rttvar)
    }

    proptest! {
        #[test]
        fn tracks_the_rfc_formulas(samples in prop::collection::vec(0u64..10_000_000, 1..200)) {
            let mut e = RttEstimator::default();
            for &s in &samples {
                e.sample(us(s));
            }
            let (srtt, rttvar) = reference(&samples);
            let got_srtt = e.srtt().unwrap().as_nanos() as f64 / 1000.0;
            let got_rttvar = e.rttvar().as_nanos() as f64 / 1000.0;
            // Fixed-point rounding (whole microseconds, as Linux) stays within a few µs.
            prop_assert!((got_srtt - srtt).abs() <= 1.0, "srtt {got_srtt} vs {srtt}");
            prop_assert!((got_rttvar - rttvar).abs() <= 1.5, "rttvar {got_rttvar} vs {rttvar}");
            let rto = (srtt + (4.0 * rttvar).max(200_000.0)).min(120e6);
            let got_rto = e.rto().as_micros() as f64;
            prop_assert!((got_rto - rto).abs() <= 6.0, "rto {got_rto} vs {rto}");
        }

        #[test]
        fn rto_stays_between_srtt_plus_floor_and_the_cap(
            samples in prop::collection::vec(0u64..1_000_000_000, 1..50),
            backoffs in 0u32..300,
        ) {
            let mut e = RttEstimator::default();
            for &s in &samples {
                e.sample(us(s));
            }
            let floor = (e.srtt().unwrap() + TCP_RTO_MIN).min(TCP_RTO_MAX);
            prop_assert!(e.rto() + us(1) >= floor);
            for _ in 0..backoffs {
                let before = e.rto();
                e.backoff();
                prop_assert!(e.rto() >= before);
                prop_assert!(e.rto() <= TCP_RTO_MAX);
            }
        }
    }
}
