//! CUBIC with HyStart, after Linux `net/ipv4/tcp_cubic.c` (v2.3), checked against
//! [RFC 9438](https://www.rfc-editor.org/rfc/rfc9438).
//!
//! Reading list:
//! - RFC 9438 §4.2 (window increase function, Figures 1-3), §4.3 (Reno-friendly region,
//!   Figure 4), §4.6 (multiplicative decrease), §4.7 (fast convergence), §4.8 (timeout),
//!   §4.10 (slow start), §5.8 (application-limited flows).
//! - Linux `tcp_cubic.c`: `bictcp_update` (the window function and the Reno-friendly
//!   estimate), `cubictcp_cong_avoid`, `cubictcp_recalc_ssthresh`, `cubictcp_state`,
//!   `cubictcp_cwnd_event`, `cubictcp_acked`, `hystart_update`.
//! - S. Ha, I. Rhee, "Taming the Elephants: New TCP Slow Start" (Computer Networks, 2011):
//!   HyStart's ACK-train and delay-increase exits from slow start.
//!
//! The window function ([RFC 9438 §4.2](https://www.rfc-editor.org/rfc/rfc9438#section-4.2)):
//! ```text
//! W_cubic(t) = C * (t - K)^3 + W_max                 (Figure 1)
//! K = cubic_root((W_max - cwnd_epoch) / C)           (Figure 2)
//! ```
//! where `t` is the time since the congestion-avoidance epoch started and `cwnd_epoch` the
//! window then. Below `W_max` the curve is concave (fast, then slowing to a plateau at
//! `t = K`), above it convex (probing, slowly, then faster). Like Linux, time is fixed point
//! in units of 2^-10 s (`BICTCP_HZ`) and `C = 410 / 1024`; on every ACK the target
//! `W_cubic(t + RTT)` becomes `cnt`, the number of ACKed segments per one-segment increase
//! that [`cong_avoid_ai`] applies.
//!
//! Call graph:
//! ```text
//! pkts_acked  -> delay_min (min RTT) -> hystart_update (slow start only: may set ssthresh = cwnd)
//! cong_avoid  -> slow_start | update (W_cubic target, Reno-friendly estimate -> cnt) -> cong_avoid_ai
//! ssthresh    -> end the epoch, W_max with fast convergence, cwnd * beta
//! set_state(Loss) -> reset everything (the next epoch starts with K = 0)
//! cwnd_event(TxStart) -> shift the epoch by the idle time
//! ```
//!
//! # Where this differs from RFC 9438 (following Linux) and from Linux (and why)
//! Linux's module parameters are constants here, at Linux's defaults (`fast_convergence = 1`,
//! `beta = 717`, `bic_scale = 41`, `tcp_friendliness = 1`, `hystart = 1`, both HyStart
//! detectors, `hystart_low_window = 16`, `hystart_ack_delta_us = 2000`, no
//! `initial_ssthresh`). Following Linux, against the RFC:
//! - β = 717/1024 = 0.7002 and C = 410/1024 = 0.4004, where §4.6 and §5.1 say β_cubic and C
//!   "SHOULD be set to" 0.7 and 0.4.
//! - The target is `W_cubic(t + delay_min)`, the minimum RTT seen, where §4.2 uses the smoothed
//!   RTT. When the target is not above cwnd, Linux still grows by 1/(100·cwnd) per ACK where
//!   §4.2 sets target = cwnd (no growth); the 1.5·cwnd upper bound of §4.2 is Linux's `cnt >= 2`.
//! - Reno-friendly region (§4.3): Linux's estimate grows by one segment per
//!   `cwnd * 15 / 8` segments ACKed, α = 8/15 = 0.533 against the RFC's
//!   `3 * (1 - β) / (1 + β)` = 0.529, and never switches to α = 1 once `W_est >= cwnd_prior`
//!   (RFC: "SHOULD"). Instead of setting cwnd to `W_est` (RFC: "SHOULD"), Linux lowers `cnt`
//!   so that cwnd reaches the estimate within one window of ACKs.
//! - Linux recomputes `cnt`, Reno-friendly estimate included, at most once per clock tick and,
//!   while cwnd is unchanged, at most every HZ/32 (31 ms). At RTTs well below 31 ms cwnd
//!   therefore lags W_est (see the tests); a netdev series in 2024 ("tcp_cubic: fix to achieve
//!   at least the same throughput as Reno") proposed changing that, mainline has not.
//! - Before any loss (`W_max` = 0) Linux grows at least 5% per RTT (`cnt <= 20`).
//! - Multiplicative decrease (§4.6) uses cwnd, not the flight size; the minimum is 2 segments.
//! - §4.9 (spurious congestion events) would restore `W_max` and the epoch on undo; Linux's
//!   CUBIC undoes only cwnd (`tcp_reno_undo_cwnd`), and so do we.
//! - Slow start is HyStart (ACK train and delay increase), not HyStart++
//!   ([RFC 9406](https://www.rfc-editor.org/rfc/rfc9406)) that §4.10 recommends.
//!
//! Different from Linux:
//! - HyStart rounds: Linux ends a round when `snd_una` passes the `snd_nxt` recorded at the
//!   round's start; this module does not see sequence numbers, so it counts the segments that
//!   were in flight at the round's start and ends the round when one more than that has been
//!   ACKed. `init` and the Loss state cannot read the clock, so they make the next RTT sample
//!   start a round instead of starting one themselves.
//! - HyStart's ACK-train threshold is `delay_min / 2`: we do not pace, so Linux's pacing
//!   cushion (`hystart_ack_delay`) is 0 and the halving for unpaced flows applies.
//! - Idle time for `TxStart` is measured from the last ACK seen, not from the last send
//!   (`lsndtime`, which the algorithm does not see). The epoch moves by slightly less than in
//!   Linux (by about one RTT less); both keep §5.8's intent that idle time does not count.
//! - The clock is milliseconds (Linux's jiffies at HZ = 1000), except HyStart in microseconds
//!   (`tcp_mstamp`), both `u32` with wrapping arithmetic. `last_time`, only ever compared
//!   within 31 ms, is a `u16` to keep the state at 64 bytes.
//! - `K` uses an exact integer cube root (Newton-Raphson from above, a few iterations, once per
//!   epoch); Linux uses a 64-entry table and one Newton step (about 0.2% error).
//! - Arithmetic saturates instead of wrapping on absurd inputs (Linux documents its limits as
//!   cwnd < 1 million segments, RTT < 100 s), so no input can panic.

use core::num::NonZeroU32;
#[cfg(test)]
use core::time::Duration;

use ustack_obs::Instant;

use super::{CaEvent, CaState, CcState, CongestionControl, cong_avoid_ai, init_window, slow_start};

/// Scale of `BETA` (Linux `BICTCP_BETA_SCALE`).
const BETA_SCALE_DENOM: u64 = 1024;
/// β_cubic = 717/1024 (Linux `beta`). RFC 9438 §4.6: "The parameter β_cubic SHOULD be set to
/// 0.7".
const BETA: u64 = 717;
/// Time unit of the window function: 2^-10 s (Linux `BICTCP_HZ`).
const BICTCP_HZ: u32 = 10;
/// Linux's clock for CUBIC is jiffies; ours ticks in milliseconds, as jiffies at HZ = 1000.
const HZ: u32 = 1000;
/// C scaled by 1024, divided by 10 (Linux `bic_scale`): C = 41 * 10 / 1024 = 0.4004.
const BIC_SCALE: u64 = 41;
/// C * 1024 (Linux `cube_rtt_scale = bic_scale * 10`).
const CUBE_RTT_SCALE: u128 = (BIC_SCALE * 10) as u128;
/// 2^(3 * BICTCP_HZ + 10) / (C * 1024) (Linux `cube_factor`): `K = cbrt(CUBE_FACTOR * ΔW)` in
/// 2^-10 s units, RFC 9438 Figure 2.
const CUBE_FACTOR: u64 = (1u64 << (10 + 3 * BICTCP_HZ)) / (BIC_SCALE * 10);
/// Reno-friendly estimate: one segment per `cwnd * BETA_SCALE / 8` segments ACKed (Linux
/// `beta_scale = 8 * (1024 + beta) / 3 / (1024 - beta)` = 15). RFC 9438 §4.3 Figure 4 with
/// α_cubic = 3 * (1 - β) / (1 + β).
const BETA_SCALE: u64 = 8 * (BETA_SCALE_DENOM + BETA) / 3 / (BETA_SCALE_DENOM - BETA);
/// Linux `fast_convergence` module parameter.
const FAST_CONVERGENCE: bool = true;
/// Linux `tcp_friendliness` module parameter.
const TCP_FRIENDLINESS: bool = true;
/// Linux `hystart` module parameter.
const HYSTART: bool = true;
/// HyStart runs only from this cwnd up (Linux `hystart_low_window`).
const HYSTART_LOW_WINDOW: u32 = 16;
/// ACKs at most this far apart (µs) belong to one train (Linux `hystart_ack_delta_us`).
const HYSTART_ACK_DELTA_US: i32 = 2000;
/// RTT samples per round before the delay detector decides (Linux `HYSTART_MIN_SAMPLES`).
const HYSTART_MIN_SAMPLES: u8 = 8;
/// Bounds of the delay increase that ends slow start, µs (Linux `HYSTART_DELAY_MIN/MAX`).
const HYSTART_DELAY_MIN: u32 = 4000;
const HYSTART_DELAY_MAX: u32 = 16000;

/// How HyStart decided that slow start should end (Linux counts these in
/// `TcpExtTCPHystartTrainDetect` and `TcpExtTCPHystartDelayDetect`, and adds the cwnd at exit
/// to `...TrainCwnd` / `...DelayCwnd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HystartExit {
    /// A train of closely spaced ACKs lasted longer than half the minimum RTT: the pipe is
    /// about full.
    AckTrain,
    /// The round's minimum RTT rose above the connection's minimum by more than
    /// `clamp(delay_min / 8, 4 ms, 16 ms)`: a queue is building.
    Delay,
}

/// CUBIC's per-connection state (Linux `struct bictcp`, plus `prior_cwnd` and the last ACK
/// time). 64 bytes, `Copy`, no heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cubic {
    /// Increase cwnd by one segment per `cnt` segments ACKed (Linux `cnt`).
    cnt: u32,
    /// W_max: cwnd before the last reduction, lowered by fast convergence (`last_max_cwnd`).
    last_max_cwnd: u32,
    /// cwnd when `cnt` was last computed (`last_cwnd`).
    last_cwnd: u32,
    /// W_max of the current epoch, the curve's plateau (`bic_origin_point`).
    bic_origin_point: u32,
    /// K, in 2^-10 s (`bic_K`).
    bic_k: u32,
    /// Minimum RTT seen, µs; 0 = none yet (`delay_min`).
    delay_min: u32,
    /// Start of the congestion-avoidance epoch, ms clock; None between epochs (`epoch_start`,
    /// where Linux uses 0). A clock reading of 0 is stored as 1.
    epoch_start: Option<NonZeroU32>,
    /// Segments ACKed in this epoch not yet turned into Reno-friendly growth (`ack_cnt`).
    ack_cnt: u32,
    /// W_est, the Reno-friendly window estimate (`tcp_cwnd`).
    tcp_cwnd: u32,
    /// cwnd just before the last reduction (Linux `tp->prior_cwnd`), for undo.
    prior_cwnd: u32,
    /// ms clock of the last ACK seen: start of an idle period for `TxStart`.
    last_acked: u32,
    /// µs clock at the start of the HyStart round (`round_start`).
    round_start: u32,
    /// Segments still to be ACKed, plus one, before the round ends; 0 = start a new round at
    /// the next sample (stands in for Linux's `end_seq`).
    round_left: u32,
    /// µs clock of the last ACK of the current train (`last_ack`).
    last_ack: u32,
    /// Minimum RTT of the current round, µs (`curr_rtt`).
    curr_rtt: u32,
    /// Low 16 bits of the ms clock when `cnt` was last computed (`last_time`).
    last_time: u16,
    /// RTT samples taken this round, up to `HYSTART_MIN_SAMPLES` (`sample_cnt`).
    sample_cnt: u8,
    /// HyStart's verdict, once it has ended slow start (`found`).
    found: Option<HystartExit>,
}

impl Default for Cubic {
    fn default() -> Self {
        Cubic::new()
    }
}

/// Linux's `tcp_jiffies32` at HZ = 1000.
fn clock_ms(now: Instant) -> u32 {
    now.as_millis() as u32
}

/// Linux's `tcp_mstamp` truncated to 32 bits, as `bictcp_clock_us`.
fn clock_us(now: Instant) -> u32 {
    now.as_micros() as u32
}

/// Floor of the cube root of `a`: integer Newton-Raphson, `x' = (2x + a / x^2) / 3`, from an
/// estimate above the root, stopping when the sequence stops decreasing. (Linux `cubic_root`
/// gets within ~0.2% from a table and one step.)
fn cubic_root(a: u64) -> u32 {
    if a == 0 {
        return 0;
    }
    let bits = u64::BITS - a.leading_zeros();
    // 2^ceil(bits/3) > cbrt(a), and at most 2^22: x * x cannot overflow.
    let mut x: u64 = 1 << bits.div_ceil(3);
    loop {
        let next = (2 * x + a / (x * x)) / 3;
        if next >= x {
            return x as u32;
        }
        x = next;
    }
}

/// K in 2^-10 s for a window that must grow by `delta_w` segments back to W_max: RFC 9438
/// Figure 2, `K = cubic_root((W_max - cwnd_epoch) / C)`, in Linux's fixed point.
fn cubic_k(delta_w: u32) -> u32 {
    cubic_root(CUBE_FACTOR.saturating_mul(u64::from(delta_w)))
}

/// RFC 9438 Figure 1, `W_cubic(t) = C * (t - K)^3 + W_max`, with `t` and `K` in 2^-10 s and
/// `origin` = W_max, in Linux's fixed point (`bictcp_update`), saturating.
fn w_cubic(origin: u32, k: u32, t: u64) -> u32 {
    let k = u64::from(k);
    let offs = u128::from(t.abs_diff(k));
    // C * offs^3, C = CUBE_RTT_SCALE / 2^10 and offs in 2^-10 s: shift by 10 + 3 * 10.
    let delta = (CUBE_RTT_SCALE * offs * offs * offs) >> (10 + 3 * BICTCP_HZ);
    let delta = u32::try_from(delta).unwrap_or(u32::MAX);
    if t < k {
        origin.saturating_sub(delta)
    } else {
        origin.saturating_add(delta)
    }
}

impl Cubic {
    /// A CUBIC instance; call [`CongestionControl::init`] on a new connection.
    pub const fn new() -> Self {
        Cubic {
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            bic_origin_point: 0,
            bic_k: 0,
            delay_min: 0,
            epoch_start: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            prior_cwnd: 0,
            last_acked: 0,
            round_start: 0,
            round_left: 0,
            last_ack: 0,
            curr_rtt: u32::MAX,
            last_time: 0,
            sample_cnt: 0,
            found: None,
        }
    }

    /// W_max: the window before the last reduction, as fast convergence left it (Linux
    /// `last_max_cwnd`; 0 before the first loss and after a timeout).
    #[cfg(test)]
    pub const fn last_max_cwnd(&self) -> u32 {
        self.last_max_cwnd
    }

    /// Whether and how HyStart ended slow start (reset by a timeout). The core can compare
    /// this before and after `pkts_acked` to count Linux's `TCPHystart*` counters.
    pub const fn hystart_exit(&self) -> Option<HystartExit> {
        self.found
    }

    /// The minimum RTT seen (Linux `delay_min`), if any.
    #[cfg(test)]
    pub fn delay_min(&self) -> Option<Duration> {
        (self.delay_min != 0).then(|| Duration::from_micros(u64::from(self.delay_min)))
    }

    /// Linux `bictcp_reset`: forget the window history (a new connection or a timeout).
    fn reset(&mut self) {
        self.cnt = 0;
        self.last_max_cwnd = 0;
        self.last_cwnd = 0;
        self.last_time = 0;
        self.bic_origin_point = 0;
        self.bic_k = 0;
        self.delay_min = 0;
        self.epoch_start = None;
        self.ack_cnt = 0;
        self.tcp_cwnd = 0;
        self.found = None;
    }

    /// Linux `bictcp_hystart_reset`: a new HyStart round starts now, ending once the
    /// `outstanding` segments now in flight have been ACKed.
    fn hystart_reset(&mut self, now_us: u32, outstanding: u32) {
        self.round_start = now_us;
        self.last_ack = now_us;
        self.round_left = outstanding.saturating_add(1);
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// `bictcp_hystart_reset` where no clock is at hand (`init`, entering Loss): the next RTT
    /// sample starts the round.
    /// The state [`CongestionControl::init`] leaves (a constant, for connections that take
    /// their state from a pool).
    pub const fn initialized() -> Self {
        let mut c = Cubic::new();
        if HYSTART {
            c.round_left = 0;
            c.curr_rtt = u32::MAX;
            c.sample_cnt = 0;
        }
        c
    }

    fn hystart_restart(&mut self) {
        self.round_left = 0;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// Linux `bictcp_update`: compute `cnt` for a cwnd-limited ACK of `acked` segments in
    /// congestion avoidance.
    fn update(&mut self, cwnd: u32, acked: u32, now: Instant) {
        let now_ms = clock_ms(now);
        let now16 = now_ms as u16;
        self.ack_cnt = self.ack_cnt.saturating_add(acked);

        // Recompute at most every HZ/32 (31 ms) while cwnd is unchanged...
        if self.last_cwnd == cwnd && now16.wrapping_sub(self.last_time) <= (HZ / 32) as u16 {
            return;
        }
        // ... and at most once per clock tick: "On all cwnd reduction events, ca->epoch_start is
        // set to 0, which will force a recalculation of ca->cnt."
        if self.epoch_start.is_none() || now16 != self.last_time {
            self.last_cwnd = cwnd;
            self.last_time = now16;
            self.update_cubic_cnt(cwnd, acked, now_ms);
        }
        if TCP_FRIENDLINESS {
            self.reno_friendly(cwnd);
        }
        // RFC 9438 §4.2: the target is at most 1.5 * cwnd ("less than the increase rate of
        // slow start"); Linux: "The maximum rate of cwnd increase CUBIC allows is 1 packet per
        // 2 packets ACKed, meaning cwnd grows at 1.5x per RTT."
        self.cnt = self.cnt.max(2);
    }

    /// The cubic part of `bictcp_update`: RFC 9438 §4.2.
    fn update_cubic_cnt(&mut self, cwnd: u32, acked: u32, now_ms: u32) {
        let epoch_start = match self.epoch_start {
            Some(e) => e.get(),
            None => {
                // A new epoch: RFC 9438 §4.2, t = 0 now, cwnd_epoch = cwnd; W_est = cwnd_epoch
                // (§4.3: "W_est is set equal to cwnd_epoch at the start of the congestion
                // avoidance stage").
                self.epoch_start = Some(NonZeroU32::new(now_ms).unwrap_or(NonZeroU32::MIN));
                self.ack_cnt = acked;
                self.tcp_cwnd = cwnd;
                if self.last_max_cwnd <= cwnd {
                    // Above the last W_max (or none known, e.g. after slow start or a
                    // timeout, §4.8): K = 0, the curve's plateau is here.
                    self.bic_k = 0;
                    self.bic_origin_point = cwnd;
                } else {
                    self.bic_k = cubic_k(self.last_max_cwnd - cwnd);
                    self.bic_origin_point = self.last_max_cwnd;
                }
                now_ms
            }
        };

        // t + RTT in 2^-10 s: RFC 9438 §4.2 targets W_cubic(t + RTT) "after the next RTT";
        // Linux uses the minimum RTT, rounded up to a clock tick (`usecs_to_jiffies`).
        let elapsed_ms = u64::from(now_ms.wrapping_sub(epoch_start));
        let rtt_ms = u64::from(self.delay_min.div_ceil(1_000_000 / HZ));
        let t = ((elapsed_ms + rtt_ms) << BICTCP_HZ) / u64::from(HZ);
        let target = w_cubic(self.bic_origin_point, self.bic_k, t);

        // RFC 9438 §4.2: cwnd grows by (target - cwnd) / cwnd per ACK, i.e. one segment per
        // cwnd / (target - cwnd) ACKs.
        self.cnt = if target > cwnd {
            cwnd / (target - cwnd)
        } else {
            // "very small increment" (Linux; the RFC's target = cwnd would not grow at all).
            cwnd.saturating_mul(100)
        };
        // "The initial growth of cubic function may be too conservative when the available
        // bandwidth is still unknown": at least 5% per RTT before the first loss (Linux only).
        if self.last_max_cwnd == 0 && self.cnt > 20 {
            self.cnt = 20;
        }
    }

    /// The Reno-friendly region: RFC 9438 §4.3, Linux's `tcp_friendliness` block of
    /// `bictcp_update`. "CUBIC checks whether W_cubic(t) is less than W_est. If so, CUBIC is in
    /// the Reno-friendly region and cwnd SHOULD be set to W_est at each reception of a new ACK."
    fn reno_friendly(&mut self, cwnd: u32) {
        // Figure 4, W_est += α_cubic * segments_acked / cwnd: one segment per
        // cwnd * 15 / 8 segments ACKed (α = 8/15).
        let per_segment = ((u64::from(cwnd) * BETA_SCALE) >> 3).max(1);
        let ack_cnt = u64::from(self.ack_cnt);
        if ack_cnt > per_segment {
            // Linux: `while (ack_cnt > delta) { ack_cnt -= delta; tcp_cwnd++; }`
            let n = (ack_cnt - 1) / per_segment;
            self.ack_cnt = (ack_cnt - n * per_segment) as u32;
            self.tcp_cwnd = self
                .tcp_cwnd
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
        // "if bic is slower than tcp": reach W_est within one window of ACKs.
        if self.tcp_cwnd > cwnd {
            let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
            self.cnt = self.cnt.min(max_cnt);
        }
    }

    /// The part of Linux `cubictcp_acked` that reads no shared state: the clock of the last
    /// ACK, the HyStart round's count, the minimum delay. Returns the delay sample (µs, at
    /// least 1) if it is one HyStart may use (Linux returns before `hystart_update`
    /// otherwise).
    #[inline]
    fn acked_sample(&mut self, now: Instant, acked: u32, rtt_us: Option<u32>) -> Option<u32> {
        let now_ms = clock_ms(now);
        self.last_acked = now_ms;
        self.round_left = self.round_left.saturating_sub(acked);
        // "Some calls are for duplicates without timetamps"
        let rtt_us = rtt_us?;
        // "Discard delay samples right after fast recovery" (the first second of an epoch).
        if let Some(epoch) = self.epoch_start
            && (now_ms.wrapping_sub(epoch.get()) as i32) < HZ as i32
        {
            return None;
        }
        let delay = rtt_us.max(1);
        // "first time call or link delay decreases"
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        Some(delay)
    }

    /// Linux `cubictcp_acked` on the values it reads (`cwnd`, `ssthresh`, the flight when
    /// the ACK came), not on a [`CcState`]: the delay minimum, then HyStart while in slow
    /// start (`!ca->found && tcp_in_slow_start(tp)`). Returns the new ssthresh (cwnd) when
    /// HyStart ends slow start, the one change to the shared state it makes.
    #[inline]
    pub(crate) fn acked(
        &mut self,
        now: Instant,
        acked: u32,
        rtt_us: Option<u32>,
        cwnd: u32,
        ssthresh: u32,
        in_flight: u32,
    ) -> Option<u32> {
        let delay = self.acked_sample(now, acked, rtt_us)?;
        (HYSTART
            && self.found.is_none()
            && cwnd < ssthresh
            && self.hystart_update(cwnd, in_flight, now, acked, delay))
        .then_some(cwnd)
    }

    /// Linux `hystart_update`: look for the end of slow start in this RTT sample (`delay`, µs)
    /// of an ACK for `acked` segments.
    fn hystart_update(
        &mut self,
        cwnd: u32,
        in_flight: u32,
        now: Instant,
        acked: u32,
        delay: u32,
    ) -> bool {
        let now_us = clock_us(now);
        // Linux: `if (after(tp->snd_una, ca->end_seq)) bictcp_hystart_reset(sk);`
        if self.round_left == 0 {
            self.hystart_reset(now_us, in_flight.saturating_sub(acked));
        }
        // "hystart triggers when cwnd is larger than some threshold"
        if cwnd < HYSTART_LOW_WINDOW {
            return false;
        }
        let mut exit = false;

        // "first detection parameter - ack-train detection"
        if (now_us.wrapping_sub(self.last_ack) as i32) <= HYSTART_ACK_DELTA_US {
            self.last_ack = now_us;
            // Linux: threshold = delay_min + hystart_ack_delay(sk), halved when not pacing:
            // "Hystart ack train triggers if we get ack past ca->delay_min/2". We never pace,
            // so the TSO/pacing cushion is 0 and the halving applies.
            let threshold = self.delay_min >> 1;
            if now_us.wrapping_sub(self.round_start) > threshold {
                self.found = Some(HystartExit::AckTrain);
                exit = true;
            }
        }

        // Delay increase: "obtain the minimum delay of more than sampling packets"
        self.curr_rtt = self.curr_rtt.min(delay);
        if self.sample_cnt < HYSTART_MIN_SAMPLES {
            self.sample_cnt += 1;
        } else {
            let margin = (self.delay_min >> 3).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if self.curr_rtt > self.delay_min.saturating_add(margin) {
                self.found.get_or_insert(HystartExit::Delay);
                exit = true;
            }
        }
        exit
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    /// Linux `cubictcp_init` (`bictcp_reset` and `bictcp_hystart_reset`; no
    /// `initial_ssthresh`, so ssthresh stays "infinite"), plus the initial window.
    fn init(&mut self, st: &mut CcState) {
        *self = Cubic::new();
        if HYSTART {
            self.hystart_restart();
        }
        init_window(st);
    }

    /// Linux `cubictcp_recalc_ssthresh`: end the epoch, remember W_max (with fast
    /// convergence), and return `max(cwnd * β, 2)`.
    fn ssthresh(&mut self, st: &CcState) -> u32 {
        let cwnd = u64::from(st.cwnd);
        self.prior_cwnd = st.cwnd;
        // "end of epoch"
        self.epoch_start = None;
        // RFC 9438 §4.7, fast convergence: "if (cwnd < W_max and fast convergence enabled)
        // { W_max = cwnd * (1 + β_cubic) / 2 } else { W_max = cwnd }": a flow whose saturation
        // point dropped releases bandwidth for new flows.
        self.last_max_cwnd = if FAST_CONVERGENCE && st.cwnd < self.last_max_cwnd {
            (cwnd * (BETA_SCALE_DENOM + BETA) / (2 * BETA_SCALE_DENOM)) as u32
        } else {
            st.cwnd
        };
        // RFC 9438 §4.6: "ssthresh = flight_size * β_cubic" and at least 2 segments; Linux
        // uses cwnd.
        ((cwnd * BETA / BETA_SCALE_DENOM) as u32).max(2)
    }

    /// Linux `cubictcp_cong_avoid`.
    fn cong_avoid(&mut self, st: &mut CcState, now: Instant, acked: u32) {
        if !st.is_cwnd_limited() {
            return;
        }
        let mut acked = acked;
        if st.in_slow_start() {
            acked = slow_start(st, acked);
            if acked == 0 {
                return;
            }
        }
        self.update(st.cwnd, acked, now);
        cong_avoid_ai(st, self.cnt, acked);
    }

    /// Linux `cubictcp_state`: a timeout forgets everything, so the next epoch starts with
    /// K = 0 and W_max = cwnd (RFC 9438 §4.8: "During the first congestion avoidance stage
    /// after a timeout, CUBIC increases its congestion window size using Figure 1, where t is
    /// the elapsed time since the beginning of the current congestion avoidance stage, K is set
    /// to 0, and W_max is set to the congestion window size at the beginning of the current
    /// congestion avoidance stage.")
    fn set_state(&mut self, _st: &mut CcState, new: CaState) {
        if new == CaState::Loss {
            self.reset();
            self.hystart_restart();
        }
    }

    /// Linux `cubictcp_cwnd_event`: after an idle period (a send with nothing in flight), move
    /// the epoch forward by the idle time, so that idle time does not count as growth time
    /// (RFC 9438 §5.8: the elapsed time must exclude periods in which cwnd was not updated
    /// because the flow was application-limited). Linux: "We were application limited (idle)
    /// for a while. Shift epoch_start to keep cwnd growth to cubic curve."
    fn cwnd_event(&mut self, _st: &mut CcState, now: Instant, ev: CaEvent) {
        if ev != CaEvent::TxStart {
            return;
        }
        let now_ms = clock_ms(now);
        let idle = now_ms.wrapping_sub(self.last_acked) as i32;
        if let Some(epoch) = self.epoch_start
            && idle > 0
        {
            let mut epoch = epoch.get().wrapping_add(idle as u32);
            // Never in the future (Linux: `if (after(ca->epoch_start, now))`).
            if (epoch.wrapping_sub(now_ms) as i32) > 0 {
                epoch = now_ms;
            }
            self.epoch_start = Some(NonZeroU32::new(epoch).unwrap_or(NonZeroU32::MIN));
        }
    }

    /// Linux `cubictcp_acked`: track the minimum RTT and run HyStart in slow start.
    fn pkts_acked(&mut self, st: &mut CcState, now: Instant, acked: u32, rtt_us: Option<u32>) {
        if let Some(ssthresh) = self.acked(now, acked, rtt_us, st.cwnd, st.ssthresh, st.in_flight) {
            st.ssthresh = ssthresh;
        }
    }

    /// Linux CUBIC uses `tcp_reno_undo_cwnd`: `max(cwnd, prior_cwnd)`.
    fn undo_cwnd(&mut self, st: &CcState) -> u32 {
        st.cwnd.max(self.prior_cwnd)
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim::{ack_clock, fast_recovery};
    use super::super::{TCP_INFINITE_SSTHRESH, TCP_INIT_CWND};
    use super::*;
    use crate::tcp::rtt::micros_u32;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// RFC 9438's constants, in floating point.
    const C_RFC: f64 = 0.4;
    const BETA_RFC: f64 = 0.7;

    /// RFC 9438 Figures 1 and 2 in floating point: W_cubic(t) for an epoch that started at
    /// `cwnd_epoch` below `w_max`.
    fn rfc_w_cubic(t_secs: f64, w_max: f64, cwnd_epoch: f64) -> f64 {
        let k = ((w_max - cwnd_epoch) / C_RFC).cbrt();
        C_RFC * (t_secs - k).powi(3) + w_max
    }

    fn fresh() -> (Cubic, CcState, Instant) {
        let mut cubic = Cubic::new();
        let mut st = CcState::new();
        cubic.init(&mut st);
        (cubic, st, Instant::from_secs(100))
    }

    /// A connection in congestion avoidance that just lost at `w_max` after a long enough
    /// run that RTT samples were taken; returns the time.
    fn after_loss_at(
        cubic: &mut Cubic,
        st: &mut CcState,
        now: &mut Instant,
        w_max: u32,
        rtt: Duration,
    ) {
        st.cwnd = w_max;
        st.ssthresh = w_max;
        // A few rounds to learn delay_min and to have an epoch going.
        ack_clock(cubic, st, now, rtt, 3);
        st.cwnd = w_max;
        fast_recovery(cubic, st);
    }

    #[test]
    fn constants_match_linux() {
        assert_eq!(BETA_SCALE, 15);
        assert_eq!(CUBE_RTT_SCALE, 410);
        assert_eq!(CUBE_FACTOR, 2_681_735_677);
    }

    #[test]
    fn cubic_root_is_exact_floor() {
        for a in (0..100_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63, (1 << 60) - 1]) {
            let r = u128::from(cubic_root(a));
            assert!(r * r * r <= u128::from(a), "cbrt({a}) = {r} too big");
            assert!((r + 1).pow(3) > u128::from(a), "cbrt({a}) = {r} too small");
        }
        for r in [1u64, 2, 3, 10, 1000, 2_642_245] {
            assert_eq!(cubic_root(r * r * r), r as u32);
            assert_eq!(cubic_root(r * r * r - 1), r as u32 - 1);
        }
    }

    /// The fixed-point window function against RFC 9438 Figures 1 and 2 in floating point,
    /// over W_max from 20 to a million segments and t from 0 to 2.5 K.
    #[test]
    fn w_cubic_matches_rfc_formula() {
        for w_max in [20u32, 100, 1_000, 10_000, 100_000, 1_000_000] {
            let cwnd_epoch = (u64::from(w_max) * BETA / BETA_SCALE_DENOM) as u32;
            let k = cubic_k(w_max - cwnd_epoch);
            let k_secs = f64::from(k) / 1024.0;
            let k_rfc = ((f64::from(w_max) * (1.0 - BETA_RFC)) / C_RFC).cbrt();
            assert!(
                (k_secs - k_rfc).abs() / k_rfc < 0.002,
                "W_max {w_max}: K {k_secs} vs {k_rfc}"
            );
            for step in 0..=100 {
                let t_secs = k_rfc * 2.5 * f64::from(step) / 100.0;
                let t = (t_secs * 1024.0) as u64;
                let ours = f64::from(w_cubic(w_max, k, t));
                let rfc = rfc_w_cubic(t_secs, f64::from(w_max), f64::from(cwnd_epoch));
                // C differs by 0.1% (410/1024), K and t are rounded to 1/1024 s.
                let tolerance = 0.002 * rfc.max(f64::from(w_max)) + 2.0;
                assert!(
                    (ours - rfc).abs() <= tolerance,
                    "W_max {w_max}, t {t_secs:.3}s: ours {ours} RFC {rfc:.1}"
                );
            }
        }
    }

    #[test]
    fn init_sets_initial_window_and_forgets_history() {
        let (mut cubic, mut st, mut now) = fresh();
        assert_eq!(
            (st.cwnd, st.ssthresh),
            (TCP_INIT_CWND, TCP_INFINITE_SSTHRESH)
        );
        after_loss_at(
            &mut cubic,
            &mut st,
            &mut now,
            500,
            Duration::from_millis(50),
        );
        assert_eq!(cubic.last_max_cwnd(), 500);
        cubic.init(&mut st);
        assert_eq!(cubic, Cubic::new());
        assert_eq!(cubic, Cubic::initialized());
        assert_eq!(
            (st.cwnd, st.ssthresh),
            (TCP_INIT_CWND, TCP_INFINITE_SSTHRESH)
        );
    }

    /// RFC 9438 §4.6: ssthresh = cwnd * β_cubic (717/1024 in Linux), at least 2; W_max = cwnd.
    #[test]
    fn ssthresh_after_loss_is_beta_times_cwnd() {
        for cwnd in [1u32, 2, 3, 10, 100, 1000, 12_345, 1_000_000, u32::MAX] {
            let mut cubic = Cubic::new();
            let st = CcState {
                cwnd,
                ..CcState::new()
            };
            let ssthresh = cubic.ssthresh(&st);
            assert_eq!(
                ssthresh,
                ((u64::from(cwnd) * 717 / 1024) as u32).max(2),
                "cwnd {cwnd}"
            );
            if cwnd >= 1000 {
                let ratio = f64::from(ssthresh) / f64::from(cwnd);
                assert!((ratio - BETA_RFC).abs() < 0.002, "cwnd {cwnd}: {ratio}");
            }
            assert_eq!(cubic.last_max_cwnd(), cwnd);
            assert_eq!(cubic.epoch_start, None);
        }
    }

    /// RFC 9438 §4.7: a loss below the previous W_max lowers W_max to cwnd * (1 + β) / 2.
    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut cubic = Cubic::new();
        let mut st = CcState {
            cwnd: 1000,
            ..CcState::new()
        };
        cubic.ssthresh(&st);
        assert_eq!(cubic.last_max_cwnd(), 1000);
        // Second loss at 800 < 1000: the saturation point dropped, release bandwidth.
        st.cwnd = 800;
        cubic.ssthresh(&st);
        assert_eq!(cubic.last_max_cwnd(), 800 * (1024 + 717) / 2048);
        assert!(cubic.last_max_cwnd() < 800);
        // A loss above W_max sets W_max = cwnd.
        st.cwnd = 900;
        cubic.ssthresh(&st);
        assert_eq!(cubic.last_max_cwnd(), 900);
    }

    /// Fast convergence seen in the window: after a second, lower loss the window plateaus at
    /// the lowered W_max, not at the cwnd of the loss.
    #[test]
    fn fast_convergence_plateau_is_lower() {
        let rtt = Duration::from_millis(100);
        let (mut cubic, mut st, mut now) = fresh();
        after_loss_at(&mut cubic, &mut st, &mut now, 1000, rtt);
        ack_clock(&mut cubic, &mut st, &mut now, rtt, 30);
        st.cwnd = 800;
        fast_recovery(&mut cubic, &mut st);
        let w_max = cubic.last_max_cwnd();
        assert_eq!(w_max, 680);
        // K for 680 - 560 = 120 segments: cbrt(120 / 0.4) = 6.7 s = 67 RTTs.
        let trace = ack_clock(&mut cubic, &mut st, &mut now, rtt, 67);
        let at_k = *trace.last().unwrap();
        assert!(at_k.abs_diff(w_max) <= 7, "cwnd at K {at_k}, W_max {w_max}");
    }

    /// In a steady ACK stream after a loss at W_max = 1000 (RTT 100 ms, so CUBIC, not the
    /// Reno-friendly estimate, drives), cwnd follows W_cubic: concave up to the plateau at
    /// t = K, convex beyond.
    #[test]
    fn concave_then_convex_around_w_max() {
        let rtt = Duration::from_millis(100);
        let (mut cubic, mut st, mut now) = fresh();
        after_loss_at(&mut cubic, &mut st, &mut now, 1000, rtt);
        let cwnd_epoch = st.cwnd;
        assert_eq!(cwnd_epoch, 700);
        let trace = ack_clock(&mut cubic, &mut st, &mut now, rtt, 185);
        let k_rounds = ((1000.0 - f64::from(cwnd_epoch)) / C_RFC).cbrt() / 0.1; // 90.9
        let k = k_rounds.round() as usize;

        // Per-ACK growth reproduces the RFC curve (t = end of the round) within 3 segments.
        for (i, &cwnd) in trace.iter().enumerate() {
            let t = (i + 1) as f64 * 0.1;
            let rfc = rfc_w_cubic(t, 1000.0, f64::from(cwnd_epoch));
            assert!(
                (f64::from(cwnd) - rfc).abs() <= 3.0,
                "round {i}: cwnd {cwnd} RFC {rfc:.1}"
            );
        }
        // Plateau: at t = K within 1% of W_max, and never above W_max + 1% before.
        assert!(
            trace[k - 1].abs_diff(1000) <= 10,
            "cwnd at K: {}",
            trace[k - 1]
        );
        assert!(trace[..k].iter().all(|&w| w <= 1010));
        // Concave: growth per third of [0, K) shrinks. Convex: growth per 30 rounds after K grows.
        let growth = |from: usize, to: usize| trace[to] - trace[from];
        let third = k / 3;
        let (g1, g2, g3) = (
            growth(0, third),
            growth(third, 2 * third),
            growth(2 * third, k - 1),
        );
        assert!(g1 > g2 && g2 > g3, "concave: {g1} {g2} {g3}");
        let (h1, h2, h3) = (
            growth(k, k + 30),
            growth(k + 30, k + 60),
            growth(k + 60, k + 90),
        );
        assert!(h1 < h2 && h2 < h3, "convex: {h1} {h2} {h3}");
    }

    /// RFC 9438 §4.3: with a small W_max the cubic curve is slower than Reno, and CUBIC grows
    /// like the Reno-friendly estimate W_est, α_cubic = 3 (1 - β) / (1 + β) = 0.529 segment
    /// per RTT (Linux: 8/15 = 0.533).
    #[test]
    fn reno_friendly_region_dominates_at_small_window() {
        let rtt = Duration::from_millis(40);
        let (mut cubic, mut st, mut now) = fresh();
        after_loss_at(&mut cubic, &mut st, &mut now, 20, rtt);
        assert_eq!(st.cwnd, 14);
        let trace = ack_clock(&mut cubic, &mut st, &mut now, rtt, 50);
        let cwnd = f64::from(*trace.last().unwrap());
        // W_cubic after 2 s is still below W_max = 20 (K = 2.47 s) ...
        let cubic_only = rfc_w_cubic(2.0, 20.0, 14.0);
        assert!(cubic_only < 20.0);
        // ... while W_est = 14 + α * 50 RTTs.
        let alpha = 3.0 * (1.0 - BETA_RFC) / (1.0 + BETA_RFC);
        let w_est = 14.0 + alpha * 50.0;
        assert!(
            (cwnd - w_est).abs() <= 0.1 * w_est,
            "cwnd {cwnd}, W_est {w_est:.1}"
        );
        // And slower than Reno's one segment per RTT.
        assert!(cwnd < 14.0 + 50.0 * 0.8, "cwnd {cwnd}");
    }

    /// At RTTs far below 31 ms Linux falls short of W_est: `bictcp_update` skips the whole
    /// computation, Reno-friendly part included, while cwnd is unchanged for less than HZ/32.
    /// The Reno-friendly region still dominates the cubic curve.
    #[test]
    fn reno_friendly_region_at_tiny_rtt_follows_linux_throttle() {
        let rtt = Duration::from_millis(1);
        let (mut cubic, mut st, mut now) = fresh();
        after_loss_at(&mut cubic, &mut st, &mut now, 20, rtt);
        let trace = ack_clock(&mut cubic, &mut st, &mut now, rtt, 100);
        let cwnd = f64::from(*trace.last().unwrap());
        let cubic_only = rfc_w_cubic(0.1, 20.0, 14.0);
        let w_est = 14.0 + 3.0 * (1.0 - BETA_RFC) / (1.0 + BETA_RFC) * 100.0;
        assert!(
            cwnd > cubic_only + 20.0,
            "cwnd {cwnd}, W_cubic {cubic_only:.1}"
        );
        assert!(cwnd <= w_est, "cwnd {cwnd}, W_est {w_est:.1}");
    }

    /// Before any loss, Linux's CUBIC grows at least 5% per RTT in congestion avoidance.
    #[test]
    fn congestion_avoidance_without_history_grows_five_percent() {
        let rtt = Duration::from_millis(100);
        let (mut cubic, mut st, mut now) = fresh();
        st.cwnd = 200;
        st.ssthresh = 200;
        let trace = ack_clock(&mut cubic, &mut st, &mut now, rtt, 10);
        let mut prev = 200;
        for &cwnd in &trace {
            assert!(cwnd >= prev + prev / 20, "{trace:?}");
            prev = cwnd;
        }
    }

    /// Slow start doubles cwnd per RTT while HyStart sees no signal (sparse ACKs, flat RTT).
    #[test]
    fn slow_start_doubles_without_hystart_signal() {
        let (mut cubic, mut st, mut now) = fresh();
        // 1 s RTT: ACKs at least 2.5 ms apart up to cwnd 400, no ACK train; no queue.
        let trace = ack_clock(&mut cubic, &mut st, &mut now, Duration::from_secs(1), 5);
        assert_eq!(trace, [20, 40, 80, 160, 320]);
        assert_eq!(cubic.hystart_exit(), None);
        assert_eq!(st.ssthresh, TCP_INFINITE_SSTHRESH);
    }

    /// Slow start into a bottleneck with an unbounded FIFO queue, sender always filling its
    /// window; the queue adds delay as soon as cwnd passes the bandwidth-delay product.
    struct Bottleneck {
        base_rtt: Duration,
        service: Duration,
        link_free: Instant,
        /// (sent at, ACK arrives at), FIFO.
        flight: VecDeque<(Instant, Instant)>,
    }

    impl Bottleneck {
        fn new(base_rtt: Duration, service: Duration, now: Instant) -> Self {
            Bottleneck {
                base_rtt,
                service,
                link_free: now,
                flight: VecDeque::new(),
            }
        }

        /// Runs `acks` ACKs; returns the cwnd at each.
        fn run(
            &mut self,
            cubic: &mut Cubic,
            st: &mut CcState,
            now: &mut Instant,
            acks: usize,
        ) -> Vec<u32> {
            let mut trace = Vec::new();
            for _ in 0..acks {
                while self.flight.len() < st.cwnd as usize {
                    let depart = self.link_free.max(*now) + self.service;
                    self.link_free = depart;
                    self.flight.push_back((*now, depart + self.base_rtt));
                }
                let (sent, ack_at) = self.flight.pop_front().unwrap();
                *now = ack_at;
                st.in_flight = self.flight.len() as u32 + 1;
                cubic.pkts_acked(st, *now, 1, Some(micros_u32(*now - sent)));
                cubic.cong_avoid(st, *now, 1);
                trace.push(st.cwnd);
            }
            trace
        }
    }

    /// HyStart delay detection: ACKs 2.5 ms apart (no ACK train), 200 ms base RTT (BDP 80
    /// segments), unbounded queue. Slow start ends as soon as the first RTT samples of a round
    /// rise 16 ms above the minimum. That is one RTT after the window that built the standing
    /// queue (2 x BDP) was sent, so at up to 4 x BDP; without HyStart it would double forever.
    #[test]
    fn hystart_delay_increase_ends_slow_start() {
        let (base, service, bdp) = (Duration::from_millis(200), Duration::from_micros(2500), 80);
        let (mut cubic, mut st, mut now) = fresh();
        let mut path = Bottleneck::new(base, service, now);
        let trace = path.run(&mut cubic, &mut st, &mut now, 2000);
        assert_eq!(cubic.hystart_exit(), Some(HystartExit::Delay));
        assert!(
            (2 * bdp..=4 * bdp + 16).contains(&st.ssthresh),
            "ssthresh {}",
            st.ssthresh
        );
        // After the exit, congestion avoidance: far below doubling per round.
        let exit = trace.iter().position(|&w| w == st.ssthresh).unwrap();
        let later = trace[exit + 2 * st.ssthresh as usize];
        assert!(
            later < st.ssthresh + st.ssthresh / 4,
            "cwnd {later} after exit at {}",
            st.ssthresh
        );

        // The same path with HyStart's verdicts ignored (Reno's slow start) keeps doubling.
        let mut reno = super::super::Reno::new();
        let (mut st, mut now) = (CcState::new(), Instant::from_secs(100));
        reno.init(&mut st);
        let mut flight: VecDeque<(Instant, Instant)> = VecDeque::new();
        let mut link_free = now;
        for _ in 0..2000 {
            while flight.len() < st.cwnd as usize {
                link_free = link_free.max(now) + service;
                flight.push_back((now, link_free + base));
            }
            now = flight.pop_front().unwrap().1;
            st.in_flight = flight.len() as u32 + 1;
            reno.cong_avoid(&mut st, now, 1);
        }
        assert!(st.cwnd > 1500, "reno cwnd {}", st.cwnd);
    }

    /// HyStart ACK-train detection: ACKs 0.1 ms apart over a 40 ms path (BDP 400 segments).
    /// A train of closely spaced ACKs longer than delay_min / 2 means the pipe is nearly full.
    #[test]
    fn hystart_ack_train_ends_slow_start() {
        let (mut cubic, mut st, mut now) = fresh();
        let mut path = Bottleneck::new(Duration::from_millis(40), Duration::from_micros(100), now);
        path.run(&mut cubic, &mut st, &mut now, 3000);
        assert_eq!(cubic.hystart_exit(), Some(HystartExit::AckTrain));
        assert!(
            (200..=800).contains(&st.ssthresh),
            "ssthresh {}",
            st.ssthresh
        );
    }

    /// HyStart stays out below hystart_low_window (16).
    #[test]
    fn hystart_ignores_small_windows() {
        let (mut cubic, mut st, mut now) = fresh();
        st.cwnd_clamp = 15;
        let mut path = Bottleneck::new(Duration::from_millis(40), Duration::from_micros(100), now);
        path.run(&mut cubic, &mut st, &mut now, 500);
        assert_eq!(cubic.hystart_exit(), None);
        assert_eq!(st.ssthresh, TCP_INFINITE_SSTHRESH);
    }

    /// A timeout (Loss) forgets W_max and HyStart's verdict: RFC 9438 §4.8, K = 0 next.
    #[test]
    fn timeout_resets_history() {
        let rtt = Duration::from_millis(100);
        let (mut cubic, mut st, mut now) = fresh();
        let mut path = Bottleneck::new(Duration::from_millis(40), Duration::from_micros(100), now);
        path.run(&mut cubic, &mut st, &mut now, 3000);
        assert!(cubic.hystart_exit().is_some());
        after_loss_at(&mut cubic, &mut st, &mut now, 1000, rtt);
        st.ssthresh = cubic.ssthresh(&st);
        cubic.set_state(&mut st, CaState::Loss);
        st.cwnd = 1;
        assert_eq!(cubic.last_max_cwnd(), 0);
        assert_eq!(cubic.hystart_exit(), None);
        assert_eq!(cubic.delay_min(), None);
        // The prior window survives for undo.
        assert_eq!(cubic.undo_cwnd(&st), 700);
    }

    #[test]
    fn undo_restores_prior_cwnd() {
        let (mut cubic, mut st, mut now) = fresh();
        after_loss_at(
            &mut cubic,
            &mut st,
            &mut now,
            300,
            Duration::from_millis(20),
        );
        assert_eq!(st.cwnd, 210);
        assert_eq!(cubic.undo_cwnd(&st), 300);
        assert_eq!(cubic.undo_cwnd(&CcState { cwnd: 400, ..st }), 400);
    }

    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let (mut cubic, mut st, now) = fresh();
        st.cwnd = 100;
        st.ssthresh = 50;
        st.in_flight = 60;
        for i in 0..1000u64 {
            cubic.cong_avoid(&mut st, now + Duration::from_millis(i), 1);
        }
        assert_eq!(st.cwnd, 100);
    }

    /// RFC 9438 §5.8 / Linux `cubictcp_cwnd_event`: idle time does not count as growth time.
    #[test]
    fn idle_period_does_not_count_towards_growth() {
        let rtt = Duration::from_millis(100);
        let (mut a, mut st_a, mut now) = fresh();
        after_loss_at(&mut a, &mut st_a, &mut now, 1000, rtt);
        ack_clock(&mut a, &mut st_a, &mut now, rtt, 20);
        let (mut b, mut st_b) = (a, st_a);
        let before = st_a.cwnd;
        // 10 s idle (longer than K = 9 s), then the application sends again.
        let mut later = now + Duration::from_secs(10);
        let mut later_b = later;
        a.cwnd_event(&mut st_a, later, CaEvent::TxStart);
        ack_clock(&mut a, &mut st_a, &mut later, rtt, 1);
        // Without the event, t would include the idle time and jump to the convex region.
        ack_clock(&mut b, &mut st_b, &mut later_b, rtt, 1);
        let grown_a = st_a.cwnd - before;
        let grown_b = st_b.cwnd - before;
        assert!(grown_a <= 10, "with TxStart: +{grown_a}");
        assert!(
            grown_b > 50 && grown_b > 5 * grown_a,
            "without TxStart: +{grown_b}"
        );
    }

    #[derive(Debug, Clone)]
    enum Ev {
        Ack {
            acked: u32,
            rtt_us: Option<u32>,
            advance_us: u32,
            in_flight: u32,
        },
        FastRecovery,
        Timeout,
        TxStart {
            idle_ms: u32,
        },
        Undo,
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            8 => (0u32..64, proptest::option::of(1u32..2_000_000), 0u32..200_000, 0u32..100_000)
                .prop_map(|(acked, rtt_us, advance_us, in_flight)| Ev::Ack { acked, rtt_us, advance_us, in_flight }),
            1 => Just(Ev::FastRecovery),
            1 => Just(Ev::Timeout),
            1 => (0u32..100_000).prop_map(|idle_ms| Ev::TxStart { idle_ms }),
            1 => Just(Ev::Undo),
        ]
    }

    proptest! {
        /// Any sequence of ACKs, losses, timeouts, idle periods and undos: no panic, cwnd
        /// stays within [1, clamp], ssthresh >= 2 after a loss, and in congestion avoidance one
        /// ACK never grows cwnd faster than 1.5x per RTT allows (cnt >= 2: +1 per 2 segments).
        #[test]
        fn any_event_sequence_is_sane(events in proptest::collection::vec(ev(), 1..300),
                                      clamp in 1u32..5_000) {
            let mut cubic = Cubic::new();
            let mut st = CcState { cwnd_clamp: clamp, ..CcState::new() };
            cubic.init(&mut st);
            let mut now = Instant::from_secs(1);
            for e in events {
                match e {
                    Ev::Ack { acked, rtt_us, advance_us, in_flight } => {
                        now += Duration::from_micros(u64::from(advance_us));
                        st.in_flight = in_flight;
                        cubic.pkts_acked(&mut st, now, acked, rtt_us);
                        let (before, ca) = (st.cwnd, !st.in_slow_start());
                        cubic.cong_avoid(&mut st, now, acked);
                        prop_assert!(st.cwnd >= before);
                        if ca {
                            prop_assert!(st.cwnd - before <= acked / 2 + 1,
                                         "+{} for {} acked", st.cwnd - before, acked);
                        }
                    }
                    Ev::FastRecovery => {
                        fast_recovery(&mut cubic, &mut st);
                        prop_assert!(st.ssthresh >= 2);
                    }
                    Ev::Timeout => {
                        st.ssthresh = cubic.ssthresh(&st);
                        cubic.set_state(&mut st, CaState::Loss);
                        cubic.cwnd_event(&mut st, now, CaEvent::Loss);
                        st.cwnd = 1;
                        prop_assert!(st.ssthresh >= 2);
                    }
                    Ev::TxStart { idle_ms } => {
                        now += Duration::from_millis(u64::from(idle_ms));
                        cubic.cwnd_event(&mut st, now, CaEvent::TxStart);
                        if let Some(epoch) = cubic.epoch_start {
                            prop_assert!((clock_ms(now).wrapping_sub(epoch.get()) as i32) >= 0);
                        }
                    }
                    Ev::Undo => {
                        let undo = cubic.undo_cwnd(&st);
                        prop_assert!(undo >= st.cwnd);
                        st.cwnd = undo.min(st.cwnd_clamp);
                    }
                }
                prop_assert!(st.cwnd >= 1 && st.cwnd <= clamp, "cwnd {} clamp {}", st.cwnd, clamp);
            }
        }

        /// The cube root is the exact floor everywhere.
        #[test]
        fn cubic_root_floor(a in any::<u64>()) {
            let r = u128::from(cubic_root(a));
            prop_assert!(r * r * r <= u128::from(a) && (r + 1).pow(3) > u128::from(a));
        }
    }
}
