//! The timer wheel against a `BinaryHeap` model, plus the edge cases and the 2-million-timer test.
//!
//! The guarantee under test (crates/runtime/src/timer.rs): a timer with deadline `d` fires in the
//! first `advance(now)` with `now >= ⌈d / g⌉ · g` — never before `d`, less than one granularity
//! `g` after it — whichever level holds it. The model computes exactly that with a heap ordered
//! by expiry tick, so every advance is checked for the exact set of timers that fire.
//!
//! `USTACK_TIMER_PROP_CASES` and `USTACK_TIMER_PROP_OPS` override the property test's size
//! (defaults: 16 cases of 50,000 operations in debug builds, 32 of 300,000 in release).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use proptest::prelude::*;
use ustack_obs::Instant;
use ustack_runtime::timer::{TimerId, TimerWheel};

const MS: u64 = 1_000_000;

fn ceil_div(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// The instant a deadline's timer fires at: `⌈d / g⌉ · g`, or `None` past the end of time.
fn fire_instant(d: u64, g: u64) -> Option<u64> {
    ceil_div(d, g).checked_mul(g)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// The model and the driver
// ---------------------------------------------------------------------------------------------

/// How an operation picks a deadline, relative to `now` when it runs.
#[derive(Clone, Copy, Debug)]
enum When {
    /// Up to 10 granularities in the past.
    Past(u64),
    /// Within 64 granularities (level 0).
    Near(u64),
    /// Within 64^3 granularities (levels 1-2).
    Mid(u64),
    /// Anywhere within 2^42 granularities (the coarse levels).
    Far(u64),
    /// Exactly on a tick boundary `k` ticks ahead, where `k` is 0, 1, 63, 64, 4096, ... ± 1.
    Boundary(u64),
    /// Within 1000 granularities of the end of time.
    End(u64),
    /// On one of the next two multiples of 64 (most often), 4096 or 262,144 ticks: timers armed from
    /// different distances meet there, some cascading into the tick while others wait in level 0.
    Aligned(u64),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Arm(When),
    /// Cancel the live timer picked by the number (modulo the live count).
    Cancel(u64),
    Rearm(u64, When),
    /// Cancel, re-arm and read a stale id (one that fired or was cancelled).
    Stale(u64, When),
    /// Check `deadline()` of a live timer.
    Deadline(u64),
    /// Move the clock forward by this many nanoseconds (0 = advance at the same instant).
    Advance(u64),
    /// Advance to the next boundary of level `n` (a multiple of 64^n ticks).
    AdvanceToBoundary(u32),
    /// Advance to `next_deadline()` as the poll loop does.
    AdvanceToNext,
    /// Move the clock backwards by this much (the wheel must treat it as "no time passed").
    AdvanceBack(u64),
    /// Advance with a budget.
    AdvanceBudget(u64, usize),
    /// Advance to `next_deadline()` with a budget (so budgets run out on the ticks that matter).
    AdvanceToNextBudget(usize),
}

struct Live {
    id: TimerId,
    deadline: u64,
    version: u64,
    /// Already due when armed or re-armed, or left over by a budget: fires before the rest.
    due_first: bool,
    pos: usize,
}

struct Harness {
    g: u64,
    wheel: TimerWheel<u64>,
    /// The clock: the latest `now` given to `advance` (never goes back).
    now: u64,
    /// `⌊now / g⌋` of the latest advance: the model's processed tick.
    tick: u64,
    /// (expiry tick, version, payload); stale entries are skipped when popped.
    heap: BinaryHeap<Reverse<(u64, u64, u64)>>,
    live: HashMap<u64, Live>,
    /// Live payloads, for picking one at random.
    order: Vec<u64>,
    stale: Vec<TimerId>,
    next_payload: u64,
    version: u64,
    fired_total: usize,
}

impl Harness {
    fn new(g: u64, start: u64) -> Self {
        Harness {
            g,
            wheel: TimerWheel::new(Instant::from_nanos(start), Duration::from_nanos(g)),
            now: start,
            tick: start / g,
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            order: Vec::new(),
            stale: Vec::new(),
            next_payload: 0,
            version: 0,
            fired_total: 0,
        }
    }

    fn resolve(&self, when: When) -> u64 {
        let g = self.g;
        let now = self.now;
        match when {
            When::Past(r) => now.saturating_sub(r % (10 * g + 1)),
            When::Near(r) => now.saturating_add(r % (64 * g)),
            When::Mid(r) => now.saturating_add(r % (g.saturating_mul(1 << 18))),
            When::Far(r) => now.saturating_add(r % g.saturating_mul(1 << 42).max(1)),
            When::Boundary(r) => {
                let ks = [
                    0u64,
                    1,
                    63,
                    64,
                    65,
                    4095,
                    4096,
                    4097,
                    1 << 18,
                    1 << 24,
                    1 << 30,
                ];
                let k = ks[(r % ks.len() as u64) as usize];
                let tick = (now / g).saturating_add(k);
                tick.saturating_mul(g)
            }
            When::End(r) => u64::MAX - r % g.saturating_mul(1000).max(1),
            When::Aligned(r) => {
                let span = 1u64 << (6 * (1 + (r % 4).saturating_sub(1)));
                let blocks = (now / g / span).saturating_add(1 + (r >> 8) % 2);
                blocks.saturating_mul(span).saturating_mul(g)
            }
        }
    }

    fn pick(&self, r: u64) -> Option<u64> {
        (!self.order.is_empty()).then(|| self.order[(r % self.order.len() as u64) as usize])
    }

    fn remove_live(&mut self, payload: u64) -> Live {
        let live = self.live.remove(&payload).expect("live");
        let last = self.order.pop().expect("order");
        if last != payload {
            self.order[live.pos] = last;
            self.live.get_mut(&last).expect("moved").pos = live.pos;
        }
        if self.stale.len() < 4096 {
            self.stale.push(live.id);
        } else {
            let k = (payload as usize * 7919) % self.stale.len();
            self.stale[k] = live.id;
        }
        live
    }

    fn schedule(&mut self, payload: u64, deadline: u64) -> bool {
        self.version += 1;
        let e = ceil_div(deadline, self.g);
        self.heap.push(Reverse((e, self.version, payload)));
        e <= self.tick
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Arm(when) => {
                let deadline = self.resolve(when);
                let payload = self.next_payload;
                self.next_payload += 1;
                let id = self.wheel.arm(Instant::from_nanos(deadline), payload);
                let due_first = self.schedule(payload, deadline);
                let pos = self.order.len();
                self.order.push(payload);
                let version = self.version;
                self.live.insert(
                    payload,
                    Live {
                        id,
                        deadline,
                        version,
                        due_first,
                        pos,
                    },
                );
            }
            Op::Cancel(r) => {
                if let Some(p) = self.pick(r) {
                    let id = self.live[&p].id;
                    assert_eq!(self.wheel.cancel(id), Some(p), "cancel of a live timer");
                    self.remove_live(p);
                    assert_eq!(self.wheel.cancel(id), None, "second cancel");
                }
            }
            Op::Rearm(r, when) => {
                if let Some(p) = self.pick(r) {
                    let deadline = self.resolve(when);
                    let id = self.live[&p].id;
                    assert!(self.wheel.rearm(id, Instant::from_nanos(deadline)));
                    let due_first = self.schedule(p, deadline);
                    let version = self.version;
                    let live = self.live.get_mut(&p).expect("live");
                    live.deadline = deadline;
                    live.version = version;
                    live.due_first = due_first;
                    assert_eq!(self.wheel.deadline(id), Some(Instant::from_nanos(deadline)));
                }
            }
            Op::Stale(r, when) => {
                if !self.stale.is_empty() {
                    let id = self.stale[(r % self.stale.len() as u64) as usize];
                    let deadline = self.resolve(when);
                    assert_eq!(self.wheel.deadline(id), None, "deadline of a stale id");
                    assert!(
                        !self.wheel.rearm(id, Instant::from_nanos(deadline)),
                        "stale rearm"
                    );
                    assert_eq!(self.wheel.cancel(id), None, "stale cancel");
                }
            }
            Op::Deadline(r) => {
                if let Some(p) = self.pick(r) {
                    let live = &self.live[&p];
                    assert_eq!(
                        self.wheel.deadline(live.id),
                        Some(Instant::from_nanos(live.deadline))
                    );
                }
            }
            Op::Advance(by) => self.advance(self.now.saturating_add(by), usize::MAX),
            Op::AdvanceToBoundary(level) => {
                let span = 1u64.checked_shl(6 * level).unwrap_or(u64::MAX);
                let tick = (self.now / self.g / span)
                    .saturating_add(1)
                    .saturating_mul(span);
                self.advance(tick.saturating_mul(self.g), usize::MAX);
            }
            Op::AdvanceToNext | Op::AdvanceToNextBudget(_) => {
                let to = self
                    .wheel
                    .next_deadline()
                    .map_or(self.now, |d| d.as_nanos());
                let budget = match op {
                    Op::AdvanceToNextBudget(n) => n,
                    _ => usize::MAX,
                };
                self.advance(to, budget);
            }
            Op::AdvanceBack(by) => self.advance(self.now.saturating_sub(by), usize::MAX),
            Op::AdvanceBudget(by, budget) => self.advance(self.now.saturating_add(by), budget),
        }
    }

    /// Advance both, and check the wheel fired exactly the model's set, none early, in order.
    fn advance(&mut self, to: u64, budget: usize) {
        let g = self.g;
        let mut fired: Vec<(TimerId, u64)> = Vec::new();
        let n = self
            .wheel
            .advance_budget(Instant::from_nanos(to), budget, |id, p| fired.push((id, p)));
        assert_eq!(n, fired.len(), "advance_budget's count");
        self.now = self.now.max(to);
        self.tick = self.now / g;

        // The model: every live timer whose expiry tick has been reached, exactly once.
        let mut expected: Vec<u64> = Vec::new();
        while let Some(&Reverse((e, version, p))) = self.heap.peek() {
            if e > self.tick {
                break;
            }
            self.heap.pop();
            if self.live.get(&p).is_some_and(|l| l.version == version) {
                expected.push(p);
            }
        }

        // Never early; within one advance, in expiry order (due-first timers aside).
        let mut last_e = 0u64;
        for &(id, p) in &fired {
            let live = self
                .live
                .get(&p)
                .unwrap_or_else(|| panic!("fired {p}: not live"));
            assert_eq!(live.id, id, "fired with another timer's id");
            assert!(
                live.deadline <= self.now,
                "fired early: deadline {} now {}",
                live.deadline,
                self.now
            );
            if !live.due_first {
                let e = ceil_div(live.deadline, g);
                assert!(e >= last_e, "out of order: tick {e} after {last_e}");
                last_e = e;
            }
        }

        let mut got: Vec<u64> = fired.iter().map(|&(_, p)| p).collect();
        got.sort_unstable();
        if n < budget {
            expected.sort_unstable();
            assert_eq!(got, expected, "the set fired at {to} (tick {})", self.tick);
        } else {
            // Budget exhausted: what fired is a subset of what is due; the rest stays due.
            assert_eq!(
                n,
                budget.min(expected.len()),
                "fired less than the budget allowed"
            );
            let mut due: Vec<u64> = expected.clone();
            due.sort_unstable();
            for p in &got {
                assert!(due.binary_search(p).is_ok(), "fired {p}, which is not due");
            }
            for p in expected {
                if got.binary_search(&p).is_err() {
                    let live = self.live.get_mut(&p).expect("live");
                    live.due_first = true;
                    let e = ceil_div(live.deadline, g);
                    self.heap.push(Reverse((e, live.version, p)));
                }
            }
        }
        for &(_, p) in &fired {
            self.remove_live(p);
        }
        self.fired_total += fired.len();

        assert_eq!(self.wheel.len(), self.live.len(), "len");
        assert_eq!(self.wheel.is_empty(), self.live.is_empty());
        self.check_not_late(n < budget);
    }

    /// No live timer is overdue by a whole granularity after a complete advance, and
    /// `next_deadline` is never later than the earliest timer's fire instant.
    fn check_not_late(&mut self, complete: bool) {
        let g = self.g;
        let earliest = loop {
            match self.heap.peek() {
                Some(&Reverse((_, version, p)))
                    if self.live.get(&p).is_none_or(|l| l.version != version) =>
                {
                    self.heap.pop();
                }
                Some(&Reverse((_, _, p))) => break Some(self.live[&p].deadline),
                None => break None,
            }
        };
        let next = self.wheel.next_deadline();
        match earliest {
            None => assert_eq!(next, None, "next_deadline of an empty wheel"),
            Some(d) => {
                if complete {
                    assert!(
                        (self.now as u128) < d as u128 + g as u128,
                        "a timer is late by a whole granularity: deadline {d} now {}",
                        self.now
                    );
                }
                let next = next.expect("next_deadline of a non-empty wheel").as_nanos();
                // An overdue timer fires at the next advance: "now" is then the bound.
                if let Some(at) = fire_instant(d, g) {
                    let at = at.max(self.now);
                    assert!(
                        next <= at,
                        "next_deadline {next} after the earliest firing {at}"
                    );
                }
            }
        }
    }
}

/// An operation drawn from a seeded generator, with weights that keep a growing population.
/// `crowded` piles timers onto a few ticks (multiples of 64, reached both by cascading and
/// directly in level 0) and walks the clock in small, often budgeted, steps.
fn random_op(rng: &mut u64, crowded: bool) -> Op {
    let r = splitmix(rng);
    let a = splitmix(rng);
    let b = splitmix(rng);
    if crowded {
        let when = |x: u64| match x % 8 {
            0 => When::Past(x >> 3),
            1 => When::Near(x >> 3),
            _ => When::Aligned((x >> 3) & !3),
        };
        return match r % 100 {
            0..=39 => Op::Arm(when(a)),
            40..=49 => Op::Cancel(a),
            50..=59 => Op::Rearm(a, when(b)),
            60..=74 => Op::Advance(b % 60),
            75..=84 => Op::AdvanceToNext,
            85..=92 => Op::AdvanceToNextBudget((a % 4) as usize),
            _ => Op::AdvanceBudget(b % 100, (a % 4) as usize),
        };
    }
    let when = |x: u64| match x % 24 {
        0 | 1 => When::Past(x >> 5),
        2..=6 => When::Near(x >> 5),
        7..=10 => When::Mid(x >> 5),
        11 | 12 => When::Far(x >> 5),
        13 | 14 => When::Boundary(x >> 5),
        15 => When::End(x >> 5),
        _ => When::Aligned(x >> 5),
    };
    match r % 100 {
        0..=32 => Op::Arm(when(a)),
        33..=43 => Op::Cancel(a),
        44..=60 => Op::Rearm(a, when(b)),
        61..=63 => Op::Stale(a, when(b)),
        64..=66 => Op::Deadline(a),
        67..=80 => Op::Advance(match a % 16 {
            0 | 1 => 0,
            2..=7 => b % 4,    // scaled by g below
            8..=12 => b % 100, // scaled
            13 | 14 => b % 300_000,
            _ => b % (1 << 40),
        }),
        81..=84 => Op::AdvanceToBoundary((a % 5) as u32),
        85..=88 => Op::AdvanceToNext,
        89 => Op::AdvanceBack(a % 1000),
        90..=94 => Op::AdvanceBudget(b % 300, (a % 8) as usize),
        _ => Op::AdvanceToNextBudget((a % 4) as usize),
    }
}

/// Scale an `Advance` step (drawn in granularities) to nanoseconds for this wheel.
fn scaled(op: Op, g: u64) -> Op {
    match op {
        Op::Advance(by) => Op::Advance(by.saturating_mul(g) / 3),
        Op::AdvanceBudget(by, n) => Op::AdvanceBudget(by.saturating_mul(g), n),
        Op::AdvanceBack(by) => Op::AdvanceBack(by.saturating_mul(g)),
        op => op,
    }
}

fn granularity() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1u64), Just(777), Just(1_000), Just(MS)]
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        0u64..(1 << 50),
        Just(u64::MAX - 10_000 * MS),
        Just((1u64 << 60) - 5)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        env_or("USTACK_TIMER_PROP_CASES", if cfg!(debug_assertions) { 16 } else { 32 }) as u32
    ))]

    /// Long random runs of arm/cancel/rearm/stale/advance against the heap model.
    #[test]
    fn matches_heap_model_long_runs(
        seed in any::<u64>(),
        g in granularity(),
        start in start(),
        crowded in any::<bool>(),
    ) {
        let ops = env_or("USTACK_TIMER_PROP_OPS", if cfg!(debug_assertions) { 50_000 } else { 300_000 });
        let mut rng = seed;
        let mut h = Harness::new(g, start);
        for _ in 0..ops {
            let op = scaled(random_op(&mut rng, crowded), g);
            h.apply(op);
        }
        // Drain: everything left fires by the end of time, except deadlines past it.
        h.advance(u64::MAX, usize::MAX);
        for live in h.live.values() {
            prop_assert!(fire_instant(live.deadline, g).is_none(), "left over: {}", live.deadline);
        }
        prop_assert!(h.fired_total > 0);
    }
}

fn when_strategy() -> impl Strategy<Value = When> {
    prop_oneof![
        any::<u64>().prop_map(When::Past),
        any::<u64>().prop_map(When::Near),
        any::<u64>().prop_map(When::Mid),
        any::<u64>().prop_map(When::Far),
        any::<u64>().prop_map(When::Boundary),
        any::<u64>().prop_map(When::End),
        any::<u64>().prop_map(When::Aligned),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => when_strategy().prop_map(Op::Arm),
        1 => any::<u64>().prop_map(Op::Cancel),
        2 => (any::<u64>(), when_strategy()).prop_map(|(a, w)| Op::Rearm(a, w)),
        1 => (any::<u64>(), when_strategy()).prop_map(|(a, w)| Op::Stale(a, w)),
        2 => (0u64..5_000).prop_map(Op::Advance),
        1 => (0u32..5).prop_map(Op::AdvanceToBoundary),
        1 => Just(Op::AdvanceToNext),
        1 => (0u64..100, 0usize..4).prop_map(|(a, b)| Op::AdvanceBudget(a, b)),
        1 => (0usize..4).prop_map(Op::AdvanceToNextBudget),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Short sequences, which proptest can shrink to a minimal failing one.
    #[test]
    fn matches_heap_model_short_sequences(
        g in granularity(),
        start in start(),
        ops in prop::collection::vec(op_strategy(), 1..80),
    ) {
        let mut h = Harness::new(g, start);
        for op in ops {
            h.apply(scaled(op, g));
        }
        h.advance(u64::MAX, usize::MAX);
    }
}

// ---------------------------------------------------------------------------------------------
// Edge cases
// ---------------------------------------------------------------------------------------------

fn fire_all<T>(w: &mut TimerWheel<T>, now: Instant) -> Vec<T> {
    let mut out = Vec::new();
    w.advance(now, |_, p| out.push(p));
    out
}

#[test]
fn a_past_deadline_fires_on_the_next_advance_even_at_the_same_instant() {
    let now = Instant::from_millis(1000);
    let mut w = TimerWheel::new(now, Duration::from_millis(1));
    w.arm(Instant::from_millis(995), "past");
    w.arm(now, "now");
    w.arm(Instant::ZERO, "epoch");
    w.arm(now + Duration::from_nanos(1), "just after");
    assert_eq!(
        w.next_deadline(),
        Some(now),
        "due timers make next_deadline 'now'"
    );
    assert_eq!(fire_all(&mut w, now), ["past", "now", "epoch"]);
    assert_eq!(w.len(), 1);
    // 1000 ms + 1 ns rounds up to the 1001 ms tick.
    assert_eq!(w.next_deadline(), Some(Instant::from_millis(1001)));
    assert!(fire_all(&mut w, Instant::from_nanos(1001 * MS - 1)).is_empty());
    assert_eq!(fire_all(&mut w, Instant::from_millis(1001)), ["just after"]);
    assert!(w.is_empty());
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn deadlines_on_slot_and_level_boundaries_fire_exactly_there() {
    let g = Duration::from_millis(1);
    // Level 0 ends at 64 ticks, level 1 at 4096, level 2 at 262,144, level 3 at 2^24.
    for ticks in [
        1u64,
        63,
        64,
        65,
        4095,
        4096,
        4097,
        1 << 18,
        (1 << 18) + 1,
        1 << 24,
    ] {
        for offset in [0, 1] {
            let mut w = TimerWheel::new(Instant::ZERO, g);
            let d = Instant::from_nanos(ticks * MS - offset);
            let id = w.arm(d, ticks);
            assert!(
                fire_all(&mut w, Instant::from_nanos(ticks * MS - 1)).is_empty(),
                "{ticks} ms - {offset} ns fired before {ticks} ms"
            );
            assert_eq!(w.deadline(id), Some(d));
            assert_eq!(w.next_deadline(), Some(Instant::from_millis(ticks)));
            assert_eq!(fire_all(&mut w, Instant::from_millis(ticks)), [ticks]);
        }
        // A nanosecond past the boundary waits for the next tick: late by g - 1 ns, not early.
        let mut w = TimerWheel::new(Instant::ZERO, g);
        w.arm(Instant::from_nanos(ticks * MS + 1), ticks);
        assert!(fire_all(&mut w, Instant::from_millis(ticks)).is_empty());
        assert!(fire_all(&mut w, Instant::from_nanos((ticks + 1) * MS - 1)).is_empty());
        assert_eq!(fire_all(&mut w, Instant::from_millis(ticks + 1)), [ticks]);
    }
}

#[test]
fn far_timers_are_as_precise_as_near_ones() {
    // A 2-hour keepalive armed at 0.5 ms fires within 1 ms of its deadline, as a near one does
    // (Linux's non-cascading wheel puts it in level 6 at HZ=1000: up to 262 s late).
    let mut w = TimerWheel::new(Instant::from_micros(500), Duration::from_millis(1));
    let d = Instant::from_micros(500) + Duration::from_secs(7200);
    w.arm(d, ());
    let mut now = Instant::from_micros(500);
    let mut wakeups = 0;
    while let Some(next) = w.next_deadline() {
        wakeups += 1;
        now = next;
        if !fire_all(&mut w, now).is_empty() {
            break;
        }
    }
    assert!(w.is_empty());
    assert!(
        now >= d && now - d < Duration::from_millis(1),
        "fired at {now} for {d}"
    );
    assert_eq!(now, Instant::from_millis(7_200_001));
    assert!(wakeups <= 8, "{wakeups} wake-ups: at most one per level");
}

#[test]
fn the_top_level_and_the_end_of_time() {
    // At 1 ns ticks the wheel has 11 levels; level 10's slots span 2^60 ticks, so these
    // deadlines straddle the top level's slots, up to its last tick (u64::MAX).
    let g = Duration::from_nanos(1);
    let start = (1u64 << 60) - 5;
    let mut w = TimerWheel::new(Instant::from_nanos(start), g);
    let deadlines = [
        start + 4,
        1 << 60,
        (1 << 60) + 1,
        (2 << 60) - 1,
        2 << 60,
        (3 << 60) + 12345,
        u64::MAX - 1,
        u64::MAX,
    ];
    for &d in deadlines.iter().rev() {
        w.arm(Instant::from_nanos(d), d);
    }
    for &d in &deadlines {
        assert!(
            fire_all(&mut w, Instant::from_nanos(d - 1)).is_empty(),
            "{d} fired at {}",
            d - 1
        );
        assert!(w.next_deadline().is_some_and(|n| n.as_nanos() <= d));
        assert_eq!(fire_all(&mut w, Instant::from_nanos(d)), [d]);
    }
    assert!(w.is_empty());

    // At 1 ms, a deadline in the last partial millisecond of time can never be reached: it
    // never fires, rather than fire early; FAR_FUTURE itself is such a deadline.
    let g = Duration::from_millis(1);
    let start = Instant::from_millis(u64::MAX / MS - 10_000);
    let mut w = TimerWheel::new(start, g);
    let last_tick = u64::MAX / MS * MS;
    w.arm(Instant::FAR_FUTURE, "never");
    w.arm(Instant::from_nanos(last_tick + 1), "never either");
    w.arm(Instant::from_nanos(last_tick), "last tick");
    w.arm(start + Duration::from_secs(5), "in 5 s");
    assert_eq!(fire_all(&mut w, start + Duration::from_secs(5)), ["in 5 s"]);
    assert_eq!(fire_all(&mut w, Instant::FAR_FUTURE), ["last tick"]);
    assert_eq!(w.len(), 2);
    assert!(fire_all(&mut w, Instant::FAR_FUTURE).is_empty());
}

#[test]
fn now_jumping_far_ahead_fires_everything_once_in_order() {
    let g = MS;
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_nanos(g));
    let mut rng = 42u64;
    let mut deadlines = Vec::new();
    for i in 0..20_000u64 {
        // Spread over every level: 2^(0..48) ns.
        let d = splitmix(&mut rng) >> (16 + splitmix(&mut rng) % 48);
        deadlines.push(d);
        w.arm(Instant::from_nanos(d), i);
    }
    let mut fired = Vec::new();
    w.advance(Instant::from_secs(1 << 20), |_, i| fired.push(i));
    assert_eq!(fired.len(), deadlines.len());
    let ticks: Vec<u64> = fired
        .iter()
        .map(|&i| ceil_div(deadlines[i as usize], g))
        .collect();
    assert!(
        ticks.windows(2).all(|t| t[0] <= t[1]),
        "fired out of tick order"
    );
    let mut sorted = fired.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), deadlines.len(), "a timer fired twice");
    assert!(w.is_empty());
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn stale_ids_never_touch_a_later_timer() {
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    let a = w.arm(Instant::from_millis(10), 'a');
    assert_eq!(w.cancel(a), Some('a'));
    let b = w.arm(Instant::from_millis(20), 'b'); // reuses a's entry
    assert_ne!(a, b);
    assert_eq!(w.cancel(a), None);
    assert!(!w.rearm(a, Instant::from_millis(1)));
    assert_eq!(w.deadline(a), None);
    assert_eq!(w.deadline(b), Some(Instant::from_millis(20)));
    let mut ids = Vec::new();
    w.advance(Instant::from_millis(20), |id, p| ids.push((id, p)));
    assert_eq!(ids, [(b, 'b')]);
    let c = w.arm(Instant::from_millis(30), 'c'); // reuses the entry again
    assert_eq!(w.cancel(b), None, "an id that fired is stale");
    assert!(!w.rearm(b, Instant::from_millis(21)));
    assert_eq!(w.deadline(c), Some(Instant::from_millis(30)));
    assert_eq!(w.len(), 1);
}

#[test]
fn rearm_moves_a_timer_earlier_later_and_into_the_past() {
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    let rto = w.arm(Instant::from_millis(200), "rto");
    let other = w.arm(Instant::from_millis(150), "other");
    // An RTO pushed back by every ACK.
    for ms in 1..100 {
        assert!(fire_all(&mut w, Instant::from_millis(ms)).is_empty());
        assert!(w.rearm(rto, Instant::from_millis(ms + 200)));
    }
    assert_eq!(w.deadline(rto), Some(Instant::from_millis(299)));
    assert!(w.rearm(rto, Instant::from_millis(120))); // earlier
    assert_eq!(fire_all(&mut w, Instant::from_millis(120)), ["rto"]);
    assert!(!w.rearm(rto, Instant::from_millis(500)), "it fired");
    assert!(w.rearm(other, Instant::from_millis(5))); // into the past: due now
    assert_eq!(fire_all(&mut w, Instant::from_millis(120)), ["other"]);
    assert!(w.is_empty());
}

#[test]
fn a_budget_limits_each_call_and_the_rest_fire_first_next_time() {
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    for i in 0..100u32 {
        w.arm(Instant::from_millis(u64::from(i % 10) + 1), i);
    }
    let mut fired = Vec::new();
    let now = Instant::from_millis(50);
    // 25 fire: all of 1 and 2 ms, half of 3 ms; the other half stays due.
    assert_eq!(w.advance_budget(now, 25, |_, i| fired.push(i)), 25);
    assert_eq!(
        w.next_deadline(),
        Some(Instant::from_millis(3)),
        "leftovers are due"
    );
    // A timer armed meanwhile for 7 ms fires in its place, after what is already due.
    w.arm(Instant::from_millis(7), 1000);
    for _ in 0..3 {
        assert_eq!(w.advance_budget(now, 25, |_, i| fired.push(i)), 25);
    }
    assert_eq!(w.advance_budget(now, 25, |_, i| fired.push(i)), 1);
    assert_eq!(w.advance_budget(now, 25, |_, i| fired.push(i)), 0);
    assert_eq!(fired.len(), 101);
    let ms: Vec<u32> = fired
        .iter()
        .map(|&i| if i == 1000 { 6 } else { i % 10 })
        .collect();
    assert!(
        ms.windows(2).all(|m| m[0] <= m[1]),
        "order across budgeted calls: {ms:?}"
    );
    assert_eq!(w.advance_budget(now, 0, |_, _| {}), 0);
}

#[test]
fn a_budget_running_out_on_cascaded_timers_leaves_nothing_behind() {
    // Two timers reach tick 128 by cascading from level 1, a third waits there in level 0;
    // the budget runs out among the cascaded ones. The level-0 one must still fire by 150 ms,
    // not one level-0 rotation (64 ms) late.
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    w.arm(Instant::from_millis(128), "cascaded 1");
    w.arm(Instant::from_millis(128), "cascaded 2");
    assert!(fire_all(&mut w, Instant::from_millis(100)).is_empty());
    w.arm(Instant::from_millis(128), "level 0");
    let mut fired = Vec::new();
    let now = Instant::from_millis(150);
    assert_eq!(w.advance_budget(now, 1, |_, p| fired.push(p)), 1);
    assert_eq!(w.next_deadline(), Some(Instant::from_millis(128)));
    w.advance(now, |_, p| fired.push(p));
    assert_eq!(fired, ["cascaded 1", "cascaded 2", "level 0"]);
}

#[test]
fn the_poll_loop_sleeping_until_next_deadline_fires_each_timer_within_a_granularity() {
    let g = 1000u64;
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_nanos(g));
    let mut rng = 7u64;
    let mut deadlines = Vec::new();
    for i in 0..5000u64 {
        let d = splitmix(&mut rng) % (1 << (10 + i % 30));
        deadlines.push(d);
        w.arm(Instant::from_nanos(d), i);
    }
    let mut wakeups = 0usize;
    let mut idle_wakeups = 0usize;
    let mut last = None;
    while let Some(next) = w.next_deadline() {
        assert!(Some(next) > last, "next_deadline did not move on");
        last = Some(next);
        wakeups += 1;
        let mut n = 0;
        w.advance(next, |_, i| {
            n += 1;
            let d = deadlines[i as usize];
            assert!(d <= next.as_nanos(), "early");
            assert!(next.as_nanos() - d < g, "late by a granularity or more");
        });
        if n == 0 {
            idle_wakeups += 1;
        }
    }
    // The wake-ups are exactly the ticks at which a timer fires or a slot holding one
    // cascades: replay each timer's path down the levels (placed by `e - tick` into level
    // ⌊log64⌋, cascaded when its slot's span starts) and count the distinct ticks.
    let level = |delta: u64| (63 - delta.leading_zeros()) / 6;
    let mut fires = std::collections::BTreeSet::new();
    let mut cascades = std::collections::BTreeSet::new();
    for &d in &deadlines {
        let e = ceil_div(d, g);
        fires.insert(e);
        let mut tick = 0u64;
        while e > tick && level(e - tick) > 0 {
            let shift = 6 * level(e - tick);
            tick = (e >> shift) << shift;
            cascades.insert(tick);
        }
    }
    let idle: Vec<&u64> = cascades.difference(&fires).collect();
    assert_eq!(wakeups, fires.union(&cascades).count(), "wake-ups");
    assert_eq!(idle_wakeups, idle.len(), "wake-ups that only cascade");
}

#[test]
fn payloads_are_returned_or_dropped_never_leaked() {
    let token = Rc::new(RefCell::new(0));
    {
        let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
        let ids: Vec<TimerId> = (0..100)
            .map(|i| w.arm(Instant::from_millis(i * 100), Rc::clone(&token)))
            .collect();
        assert_eq!(Rc::strong_count(&token), 101);
        for id in &ids[..10] {
            let p = w.cancel(*id).expect("live");
            *p.borrow_mut() += 1;
        }
        assert_eq!(Rc::strong_count(&token), 91);
        w.advance(Instant::from_millis(5000), |_, p| *p.borrow_mut() += 1);
        assert_eq!(Rc::strong_count(&token), 50);
    }
    assert_eq!(
        Rc::strong_count(&token),
        1,
        "dropping the wheel drops the payloads"
    );
    assert_eq!(*token.borrow(), 10 + 41);
}

#[test]
fn memory_accounting_is_page_by_page() {
    let mut w = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    let empty = w.memory_bytes();
    assert!(empty < 4096, "an empty wheel costs {empty} bytes");
    let page = 4096 * TimerWheel::<u64>::ENTRY_BYTES;
    let ids: Vec<TimerId> = (0..4096)
        .map(|i| w.arm(Instant::from_millis(i), i))
        .collect();
    let grown = w.memory_bytes() - empty;
    assert!(
        (page..page + 1024).contains(&grown),
        "one page costs {grown} bytes"
    );
    let one_page = w.memory_bytes();
    w.arm(Instant::ZERO, 0);
    assert!(w.memory_bytes() >= one_page + page);
    let two_pages = w.memory_bytes();
    // Freed entries are reused: cancel and re-arm 4096 timers, no growth.
    for id in ids {
        w.cancel(id);
    }
    for i in 0..4096 {
        w.arm(Instant::from_millis(i), i);
    }
    assert_eq!(w.memory_bytes(), two_pages);
}

// ---------------------------------------------------------------------------------------------
// Millions of timers
// ---------------------------------------------------------------------------------------------

#[test]
fn two_million_timers() {
    const N: usize = 2_000_000;
    let g = MS;
    let mut w: TimerWheel<u32> = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    let mut rng = 2024u64;
    // Deadlines: most within 10 minutes (RTOs, delayed ACKs, TIME_WAIT), some hours away.
    let deadlines: Vec<u64> = (0..N)
        .map(|i| {
            let r = splitmix(&mut rng);
            if i % 16 == 0 {
                r % (7200 * 1000 * MS)
            } else {
                r % (600 * 1000 * MS)
            }
        })
        .collect();
    let ids: Vec<TimerId> = deadlines
        .iter()
        .enumerate()
        .map(|(i, &d)| w.arm(Instant::from_nanos(d), i as u32))
        .collect();
    assert_eq!(w.len(), N);

    let bytes = w.memory_bytes();
    let per_timer = bytes as f64 / N as f64;
    println!("{N} timers: {bytes} bytes, {per_timer:.2} bytes per timer");
    assert_eq!(TimerWheel::<u32>::ENTRY_BYTES, 32);
    assert!(bytes >= N * 32, "memory_bytes undercounts");
    assert!(per_timer < 32.2, "{per_timer:.2} bytes per timer");

    // Cancel every third; the rest must fire exactly once, never early, within 1 ms.
    let mut state = vec![0u8; N]; // 0 armed, 1 cancelled, 2 fired
    for i in (0..N).step_by(3) {
        assert_eq!(w.cancel(ids[i]), Some(i as u32));
        state[i] = 1;
    }
    let armed = N - N.div_ceil(3);
    assert_eq!(w.len(), armed);

    // Walk the clock in uneven steps (a busy loop's pattern), through two hours.
    let mut now = 0u64;
    let mut prev = 0u64;
    let mut fired = 0usize;
    let end = 7200 * 1000 * MS + MS;
    let mut step = 0u64;
    while now < end {
        step += 1;
        now += match step % 4 {
            0 => 3 * MS + 17,
            1 => MS / 2,
            2 => 40 * MS,
            _ => 1,
        } * if now > 600 * 1000 * MS { 1000 } else { 1 };
        w.advance(Instant::from_nanos(now), |_, i| {
            let i = i as usize;
            assert_eq!(state[i], 0, "timer {i} fired twice or after cancel");
            state[i] = 2;
            let d = deadlines[i];
            assert!(d <= now, "timer {i} early: {d} > {now}");
            // It was not yet due at the previous advance.
            assert!(ceil_div(d, g) * g > prev, "timer {i} late: due at {prev}");
            fired += 1;
        });
        prev = now;
    }
    assert_eq!(fired, armed);
    assert!(w.is_empty());
    assert_eq!(w.memory_bytes(), bytes, "the slab keeps its pages");
}

// ---------------------------------------------------------------------------------------------
// Timing (release: cargo test --release -p ustack-runtime --test timer_wheel -- --ignored --nocapture)
// ---------------------------------------------------------------------------------------------

#[test]
#[ignore = "timing report; run in release with --ignored --nocapture"]
fn timing_report() {
    use std::hint::black_box;
    use std::time::Instant as Clock;

    const N: usize = 1_000_000;
    let g = Duration::from_millis(1);
    let mut rng = 99u64;
    let deadlines: Vec<Instant> = (0..N)
        .map(|_| Instant::from_nanos(splitmix(&mut rng) % (600 * 1000 * MS)))
        .collect();
    let per = |t: Duration, n: usize| t.as_nanos() as f64 / n as f64;

    let mut w: TimerWheel<u64> = TimerWheel::new(Instant::ZERO, g);
    let t = Clock::now();
    let ids: Vec<TimerId> = deadlines
        .iter()
        .enumerate()
        .map(|(i, &d)| w.arm(d, i as u64))
        .collect();
    let arm_cold = per(t.elapsed(), N);

    // Re-arm within the same slot (RTO pushed back by 1 µs), then to a new random slot.
    let t = Clock::now();
    for (id, d) in ids.iter().zip(&deadlines) {
        w.rearm(*id, *d + Duration::from_micros(1));
    }
    let rearm_same = per(t.elapsed(), N);
    let t = Clock::now();
    for (k, id) in ids.iter().enumerate() {
        w.rearm(*id, deadlines[(k * 7919) % N]);
    }
    let rearm_moved = per(t.elapsed(), N);

    let t = Clock::now();
    for id in &ids {
        black_box(w.cancel(*id));
    }
    let cancel = per(t.elapsed(), N);

    // Warm arm (slab pages exist, free list reused).
    let t = Clock::now();
    for (i, &d) in deadlines.iter().enumerate() {
        black_box(w.arm(d, i as u64));
    }
    let arm_warm = per(t.elapsed(), N);

    // Advance 1 ms at a time through 10 minutes: 600,000 calls firing 1,000,000 timers.
    let t = Clock::now();
    let mut fired = 0usize;
    let mut now = Instant::ZERO;
    while !w.is_empty() {
        now += Duration::from_millis(1);
        w.advance(now, |_, p| {
            black_box(p);
            fired += 1;
        });
    }
    let advance_total = t.elapsed();
    assert_eq!(fired, N);

    // Empty advances: the cost of a poll-loop tick with nothing due.
    let mut w2: TimerWheel<u64> = TimerWheel::new(Instant::ZERO, g);
    w2.arm(Instant::from_secs(3600), 0);
    let t = Clock::now();
    let calls = 1_000_000u64;
    for ms in 1..=calls {
        w2.advance(Instant::from_millis(ms), |_, _| {});
    }
    let idle = per(t.elapsed(), calls as usize);

    println!(
        "timer wheel, {N} timers, 1 ms granularity, entry {} bytes:",
        TimerWheel::<u64>::ENTRY_BYTES
    );
    println!("  arm (growing slab)   {arm_cold:7.1} ns");
    println!("  arm (reused entries) {arm_warm:7.1} ns");
    println!("  rearm, same slot     {rearm_same:7.1} ns");
    println!("  rearm, other slot    {rearm_moved:7.1} ns");
    println!("  cancel               {cancel:7.1} ns");
    println!(
        "  advance              {:7.1} ns per timer fired ({} calls, cascades included)",
        per(advance_total, N),
        now.as_millis()
    );
    println!("  advance, nothing due {idle:7.1} ns per call");
}

/// An empty wheel still keeps time while it is advanced (a loop's rounds with no
/// application timer armed), though it defers the clock's arithmetic to the next arm: a
/// timer armed after a long idle stretch fires by the latest `now` the wheel was given,
/// even when the caller's `now` then goes back, and no earlier than its deadline.
#[test]
fn an_idle_wheel_keeps_time_for_the_next_arm() {
    let mut w: TimerWheel<&str> = TimerWheel::new(Instant::ZERO, Duration::from_millis(1));
    for ms in 1..=1000 {
        assert_eq!(
            w.advance_budget(Instant::from_nanos(ms * MS), 64, |_, _| {}),
            0
        );
    }
    // The caller's clock goes back to 500 ms: the wheel's stays at 1 s.
    w.advance(Instant::from_nanos(500 * MS), |_, _| {});
    w.arm(Instant::from_nanos(800 * MS), "past");
    assert_eq!(w.next_deadline(), Some(Instant::from_nanos(1000 * MS)));
    assert_eq!(fire_all(&mut w, Instant::from_nanos(600 * MS)), ["past"]);
    for ms in 1001..=2000 {
        w.advance(Instant::from_nanos(ms * MS), |_, _| {});
    }
    w.arm(Instant::from_nanos(2005 * MS), "ahead");
    assert_eq!(w.next_deadline(), Some(Instant::from_nanos(2005 * MS)));
    assert!(fire_all(&mut w, Instant::from_nanos(2004 * MS)).is_empty());
    assert_eq!(fire_all(&mut w, Instant::from_nanos(2005 * MS)), ["ahead"]);
}
