//! The timer wheel against what a user of it checks: an entry fires in the millisecond of
//! its deadline, never before and never after (from any level: the cascade brings it
//! down), a moved entry fires only at its new deadline, a cancelled one never, one entry
//! per id whatever is done to it, and a loop that sleeps until `next_expiry` misses
//! nothing. A proptest runs random arms, moves, cancels and clock steps against a model
//! (a map of deadlines).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// Run the wheel up to `now`: the ids that came due, sorted.
fn run(w: &mut Wheel, now: u64) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(id) = w.pop_due(now) {
        out.push(id);
    }
    out.sort_unstable();
    out
}

/// A loop that sleeps until the wheel's next expiry (never past `end`): each id with the
/// millisecond it came out in.
fn sleep_until(w: &mut Wheel, now: &mut u64, end: u64) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    while let Some(t) = w.next_expiry().filter(|&t| t <= end) {
        *now = (*now).max(t);
        out.extend(run(w, *now).into_iter().map(|id| (*now, id)));
    }
    *now = end;
    run(w, end).into_iter().for_each(|id| out.push((end, id)));
    out
}

#[test]
fn an_entry_fires_in_the_millisecond_of_its_deadline() {
    let mut w = Wheel::new();
    // 1,000 and 1,020 ms are in the same 64 ms (960 to 1,023): level 0.
    w.arm(3, 1_020, 1_000);
    assert_eq!(w.len(), 1);
    assert_eq!(w.next_expiry(), Some(1_020), "level 0: exact");
    assert_eq!(
        run(&mut w, 1_019),
        Vec::<u32>::new(),
        "not a millisecond early"
    );
    assert_eq!(run(&mut w, 1_020), [3]);
    assert_eq!((w.len(), w.next_expiry(), w.is_armed(3)), (0, None, false));
}

#[test]
fn entries_far_ahead_cascade_down_and_fire_exactly() {
    // A delayed ACK (40 ms), an RTO (200 ms: level 1), a SYN's (1 s), a keepalive (7,200 s:
    // level 3), TIME-WAIT's length (60 s: level 2); and beside some of them later ones in
    // the same slot of their level (the first to come up must not take the others).
    let start = 5_000_007;
    let deadlines = [
        (1, start + 40),
        (2, start + 200),
        (3, start + 1_000),
        (4, start + 60_000),
        (5, start + 7_200_000),
        (6, start + 4_000),
        (7, start + 210),
        (8, start + 60_700),
        (9, start + 7_200_900),
    ];
    let mut w = Wheel::new();
    for &(id, at) in &deadlines {
        w.arm(id, at, start);
    }
    let mut now = start;
    let fired = sleep_until(&mut w, &mut now, start + 8_000_000);
    let mut want: Vec<(u64, u32)> = deadlines.iter().map(|&(id, at)| (at, id)).collect();
    want.sort_unstable();
    assert_eq!(fired, want, "each in its own millisecond, in order");
    assert_eq!(w.len(), 0);
}

/// A far entry's deadline is what the wheel reports (a loop sleeping until it is woken
/// at the deadline, never for a cascade alone); a run that passes the start of its slot
/// cascades it without firing it.
#[test]
fn the_next_expiry_of_a_far_entry_is_its_deadline() {
    let mut w = Wheel::new();
    w.arm(9, 10_000 + 3_000, 10_000);
    assert_eq!(w.next_expiry(), Some(13_000));
    // 12,288 ms starts the entry's slot of level 2 (4,096 ms slots), 12,992 its slot of
    // level 1 after that first cascade (64 ms slots): runs past each.
    assert_eq!(run(&mut w, 12_300), Vec::<u32>::new());
    assert!(w.is_armed(9));
    assert_eq!(w.next_expiry(), Some(13_000));
    assert_eq!(run(&mut w, 12_999), Vec::<u32>::new());
    assert_eq!(run(&mut w, 13_000), [9]);
}

#[test]
fn a_moved_entry_fires_only_at_its_new_deadline() {
    let mut w = Wheel::new();
    // Earlier: from 1 s to 200 ms (a SYN's timer, then a request's RTO).
    w.arm(1, 1_000, 0);
    w.arm(1, 200, 0);
    assert_eq!(w.len(), 1, "moved, not added");
    assert_eq!(run(&mut w, 199), Vec::<u32>::new());
    assert_eq!(run(&mut w, 200), [1]);
    // Later: from 300 to 900, then within its slot from 900 to 910.
    w.arm(1, 300, 200);
    w.arm(1, 900, 200);
    w.arm(1, 910, 200);
    assert_eq!(w.len(), 1);
    assert_eq!(w.expires(1), Some(910));
    assert_eq!(
        run(&mut w, 909),
        Vec::<u32>::new(),
        "not at the old deadlines"
    );
    assert_eq!(run(&mut w, 910), [1]);
}

#[test]
fn a_cancelled_entry_never_fires() {
    let mut w = Wheel::new();
    w.arm(1, 50, 0);
    w.arm(2, 5_000, 0);
    w.arm(3, 50, 0);
    assert!(w.cancel(1) && w.cancel(2));
    assert!(!w.cancel(2), "once");
    assert_eq!(w.len(), 1);
    assert_eq!(run(&mut w, 10_000), [3]);
    assert_eq!(w.next_expiry(), None);
}

#[test]
fn a_deadline_already_past_fires_on_the_next_run() {
    let mut w = Wheel::new();
    w.arm(1, 100, 100);
    assert_eq!(run(&mut w, 100), [1]);
    // The wheel has run 100: a deadline of 90 or 100 is due at once, in this run.
    w.arm(2, 90, 100);
    w.arm(3, 100, 100);
    assert_eq!(w.next_expiry(), Some(100));
    assert_eq!(run(&mut w, 100), [2, 3]);
}

/// An entry armed while the due ones are being taken, for a deadline already come,
/// comes out of the same run (a timer that re-arms at once).
#[test]
fn an_entry_armed_during_a_run_for_now_comes_out_of_it() {
    let mut w = Wheel::new();
    w.arm(1, 70, 0);
    assert_eq!(w.pop_due(80), Some(1));
    w.arm(1, 75, 80);
    w.arm(2, 81, 80);
    assert_eq!(w.pop_due(80), Some(1));
    assert_eq!(w.pop_due(80), None);
    assert_eq!(run(&mut w, 81), [2]);
}

#[test]
fn deadlines_read_across_the_32_bit_wrap_of_milliseconds() {
    let start = u64::from(u32::MAX) - 30;
    let mut w = Wheel::new();
    w.arm(1, start + 100, start);
    w.arm(2, start + 90_000, start);
    let mut now = start;
    let fired = sleep_until(&mut w, &mut now, start + 100_000);
    assert_eq!(fired, [(start + 100, 1), (start + 90_000, 2)]);
}

/// A thousand entries per id slot reused: one node per id, and `len` counts entries.
#[test]
fn one_entry_per_id_whatever_is_done_to_it() {
    let mut w = Wheel::new();
    for round in 0..1_000u64 {
        for id in 0..8 {
            w.arm(id, 1_000 + (round * 37 + u64::from(id) * 101) % 9_000, 0);
        }
        assert_eq!(w.len(), 8);
    }
    w.cancel(3);
    assert_eq!(w.len(), 7);
    assert_eq!(run(&mut w, 20_000).len(), 7);
}

#[derive(Debug, Clone)]
enum Op {
    /// Arm id at now + delay.
    Arm(u32, u64),
    Cancel(u32),
    /// Move the clock on and run the wheel.
    Step(u64),
    /// Sleep until the wheel's next expiry and run it.
    Sleep,
}

fn op() -> impl Strategy<Value = Op> {
    let delay = prop_oneof![
        0..70u64,
        0..5_000u64,
        0..300_000u64,
        0..20_000_000u64,
        Just(0u64),
    ];
    prop_oneof![
        4 => (0..24u32, delay).prop_map(|(id, d)| Op::Arm(id, d)),
        1 => (0..24u32).prop_map(Op::Cancel),
        2 => prop_oneof![0..3u64, 0..100u64, 0..10_000u64, 0..3_000_000u64].prop_map(Op::Step),
        2 => Just(Op::Sleep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Against a model (id -> deadline): every run gives exactly the entries whose
    /// deadline has come (none early, none kept past its millisecond: each deadline
    /// after the previous run's clock), `next_expiry` is never later than the earliest
    /// deadline and never before the clock, and `len` is the model's.
    #[test]
    fn the_wheel_fires_what_a_model_says_when_it_says(
        start in prop_oneof![Just(0u64), 0..1u64 << 40, Just(u64::from(u32::MAX) - 500)],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let mut w = Wheel::new();
        let mut model: BTreeMap<u32, u64> = BTreeMap::new();
        let mut now = start;
        let mut last_run = start;
        // The next deadline a stack keeps: lowered by every arm, folded after each run.
        let mut kept = u64::MAX;
        for op in ops {
            let run_to = match op {
                Op::Arm(id, d) => {
                    let run_at = w.arm(id, now + d, now);
                    prop_assert!(run_at <= (now + d).max(now), "run at {} for {}", run_at, now + d);
                    kept = kept.min(run_at);
                    model.insert(id, now + d);
                    None
                }
                Op::Cancel(id) => {
                    prop_assert_eq!(w.cancel(id), model.remove(&id).is_some());
                    None
                }
                Op::Step(d) => Some(now + d),
                Op::Sleep => w.next_expiry().map(|t| t.max(now)),
            };
            if let Some(t) = w.next_expiry() {
                prop_assert!(kept <= t, "kept {} later than the wheel's next run {}", kept, t);
                let earliest = model.values().min().copied();
                prop_assert!(earliest.is_some_and(|e| t <= e.max(last_run)), "next {} after the earliest {:?}", t, earliest);
            }
            if let Some(to) = run_to {
                now = to;
                let got = run(&mut w, now);
                let mut want: Vec<u32> = model.iter().filter(|&(_, &e)| e <= now).map(|(&id, _)| id).collect();
                want.sort_unstable();
                for id in &want {
                    model.remove(id);
                }
                // Exactly the entries due: none early, and none kept past the first run
                // at or after its deadline (late).
                prop_assert_eq!(got, want, "at {}", now);
                last_run = now;
                kept = w.next_expiry().unwrap_or(u64::MAX);
            }
            prop_assert_eq!(w.len(), model.len());
        }
    }
}
