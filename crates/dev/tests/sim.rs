//! The `sim` link: determinism, each fault's rate and effect, timing on the virtual clock,
//! rate and queue limits, MTU, and that the counters always add up.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use ustack_dev::sim::{Side, SimConfig, SimEvent, SimLink, SimLinkConfig, SimStats};
use ustack_dev::{Device, Medium};
use ustack_obs::time::Instant;

const N: u32 = 20_000;

/// A frame carrying its index in the first 4 bytes, then a filler pattern.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(4)];
    f[..4].copy_from_slice(&i.to_be_bytes());
    for (k, b) in f[4..].iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    f
}

fn index(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[..4].try_into().unwrap())
}

/// A link whose A->B direction has `cfg` and B->A is perfect.
fn link(seed: u64, cfg: SimConfig) -> SimLink {
    SimLink::new(SimLinkConfig {
        seed,
        a_to_b: cfg,
        b_to_a: SimConfig::default(),
        medium: Medium::Ip,
        mtu: 1500,
    })
}

/// One delivered frame: when, to which side, the bytes.
type Delivery = (Instant, Side, Vec<u8>);

/// Take every frame deliverable at `now`, from both sides.
fn take_ready(link: &mut SimLink, now: Instant, out: &mut Vec<Delivery>) {
    let mut buf = [0u8; 2048];
    for side in [Side::A, Side::B] {
        while let Some(n) = link.recv(now, side, &mut buf) {
            out.push((now, side, buf[..n].to_vec()));
        }
    }
}

/// Jump the virtual clock from event to event until the link is empty.
fn drain(link: &mut SimLink, out: &mut Vec<Delivery>) -> Instant {
    let mut now = Instant::ZERO;
    while let Some(t) = link.next_event() {
        assert!(t >= now, "next_event went back in time");
        now = t;
        take_ready(link, now, out);
    }
    now
}

/// Send `n` frames A->B, one every `gap`, delivering whatever is due in between.
fn run(link: &mut SimLink, n: u32, len: usize, gap: Duration) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut now = Instant::ZERO;
    for i in 0..n {
        take_ready(link, now, &mut out);
        link.send(now, Side::A, &frame(i, len));
        now += gap;
    }
    // Deliver what remains, never going back before the last send.
    while let Some(t) = link.next_event() {
        now = now.max(t);
        take_ready(link, now, &mut out);
    }
    out
}

fn balanced(s: &SimStats) -> bool {
    s.sent + s.duplicated == s.delivered + s.lost + s.too_big + s.queue_dropped + s.in_flight
}

fn assert_rate(what: &str, count: u64, total: u64, p: f64) {
    let rate = count as f64 / total as f64;
    assert!(
        (rate - p).abs() <= 0.01,
        "{what}: {count}/{total} = {rate:.4}, expected {p} +- 0.01"
    );
}

fn all_faults() -> SimConfig {
    SimConfig {
        loss: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        corrupt: 0.05,
        delay: Duration::from_millis(3),
        jitter: Duration::from_micros(500),
        reorder_delay: Duration::from_millis(2),
        rate_bps: Some(50_000_000),
        queue_limit_bytes: Some(20_000),
        mtu: None,
    }
}

/// Every event an observer saw: what, the sending side, the frame.
type EventLog = Rc<RefCell<Vec<(SimEvent, Side, Vec<u8>)>>>;

/// Install an observer that records every event.
fn record_events(link: &mut SimLink) -> EventLog {
    let log = Rc::new(RefCell::new(Vec::new()));
    let sink = Rc::clone(&log);
    link.set_observer(Box::new(move |ev, from, bytes| {
        sink.borrow_mut().push((ev, from, bytes.to_vec()));
    }));
    log
}

#[test]
fn same_seed_same_deliveries_byte_for_byte() {
    let cfg = all_faults();
    let go = |seed| {
        let mut l = SimLink::new(SimLinkConfig {
            seed,
            a_to_b: cfg.clone(),
            b_to_a: cfg.clone(),
            medium: Medium::Ethernet,
            mtu: 1500,
        });
        let mut out = Vec::new();
        let mut now = Instant::ZERO;
        for i in 0..3000u32 {
            take_ready(&mut l, now, &mut out);
            let side = if i % 3 == 0 { Side::B } else { Side::A };
            l.send(now, side, &frame(i, 60 + (i as usize * 7) % 1400));
            now += Duration::from_micros(40 + u64::from(i % 50));
        }
        while let Some(t) = l.next_event() {
            now = now.max(t);
            take_ready(&mut l, now, &mut out);
        }
        (out, l.stats(Side::A).clone(), l.stats(Side::B).clone())
    };
    let first = go(7);
    let again = go(7);
    assert_eq!(first, again);
    let (out, ab, ba) = &first;
    assert!(ab.lost > 0 && ab.duplicated > 0 && ab.corrupted > 0 && ab.reordered > 0);
    assert!(ba.lost > 0 && ab.queue_dropped > 0);
    assert_eq!(out.len() as u64, ab.delivered + ba.delivered);
    let other = go(8);
    assert_ne!(
        first.0, other.0,
        "a different seed gives different deliveries"
    );
}

#[test]
fn loss_rate_and_exactly_the_lost_frames_are_missing() {
    let mut l = link(
        1,
        SimConfig {
            loss: 0.10,
            ..SimConfig::default()
        },
    );
    let events = record_events(&mut l);
    let out = run(&mut l, N, 100, Duration::from_micros(10));
    let s = l.stats(Side::A);
    assert_eq!(s.sent, u64::from(N));
    assert_rate("loss", s.lost, s.sent, 0.10);
    assert_eq!(s.delivered + s.lost, s.sent);
    // The observer names exactly the frames that never arrived.
    let lost: Vec<u32> = events
        .borrow()
        .iter()
        .filter(|(e, _, _)| *e == SimEvent::Lost)
        .map(|(_, from, f)| {
            assert_eq!(*from, Side::A);
            index(f)
        })
        .collect();
    let mut received: Vec<u32> = out.iter().map(|(_, _, f)| index(f)).collect();
    received.extend(&lost);
    received.sort_unstable();
    assert_eq!(received, (0..N).collect::<Vec<_>>());
    assert_eq!(lost.len() as u64, s.lost);
    // Nothing went the other way, and it is untouched.
    assert_eq!(l.stats(Side::B), &SimStats::default());
}

#[test]
fn duplicate_rate_and_each_duplicate_arrives_twice() {
    let mut l = link(
        2,
        SimConfig {
            duplicate: 0.10,
            ..SimConfig::default()
        },
    );
    let out = run(&mut l, N, 100, Duration::from_micros(10));
    let s = l.stats(Side::A).clone();
    assert_rate("duplicate", s.duplicated, s.sent, 0.10);
    assert_eq!(s.delivered, s.sent + s.duplicated);
    let mut count: HashMap<u32, u32> = HashMap::new();
    for (_, side, f) in &out {
        assert_eq!(*side, Side::B);
        assert_eq!(f, &frame(index(f), 100), "duplicates are exact copies");
        *count.entry(index(f)).or_default() += 1;
    }
    assert_eq!(count.len() as u32, N);
    let twice = count.values().filter(|&&c| c == 2).count() as u64;
    assert_eq!(twice, s.duplicated);
    assert!(count.values().all(|&c| c == 1 || c == 2));
}

#[test]
fn corrupt_rate_and_exactly_one_bit_flipped() {
    let mut l = link(
        3,
        SimConfig {
            corrupt: 0.10,
            ..SimConfig::default()
        },
    );
    let out = run(&mut l, N, 64, Duration::from_micros(10));
    let s = l.stats(Side::A);
    assert_rate("corrupt", s.corrupted, s.sent, 0.10);
    let mut differing = 0u64;
    let mut bits_hit = std::collections::HashSet::new();
    for (i, (_, _, f)) in out.iter().enumerate() {
        // No loss/reorder: frame i arrives i-th, whatever its (possibly corrupted) index says.
        let original = frame(i as u32, 64);
        assert_eq!(f.len(), original.len());
        let diff: u32 = f
            .iter()
            .zip(&original)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!(diff <= 1, "frame {i} differs in {diff} bits");
        if diff == 1 {
            differing += 1;
            let pos = f.iter().zip(&original).position(|(a, b)| a != b).unwrap();
            bits_hit.insert(pos * 8 + (f[pos] ^ original[pos]).trailing_zeros() as usize);
        }
    }
    assert_eq!(differing, s.corrupted);
    // The flipped bit is spread over the whole frame (512 bits), not always the same one.
    assert!(
        bits_hit.len() > 400,
        "only {} distinct bits flipped",
        bits_hit.len()
    );
}

#[test]
fn reorder_rate_and_held_frames_are_overtaken() {
    let delay = Duration::from_millis(1);
    let hold = Duration::from_millis(5);
    let gap = Duration::from_micros(100);
    let mut l = link(
        4,
        SimConfig {
            reorder: 0.10,
            delay,
            reorder_delay: hold,
            ..SimConfig::default()
        },
    );
    let events = record_events(&mut l);
    let out = run(&mut l, N, 100, gap);
    let s = l.stats(Side::A);
    assert_rate("reorder", s.reordered, s.sent, 0.10);
    assert_eq!(s.delivered, s.sent);
    let held: std::collections::HashSet<u32> = events
        .borrow()
        .iter()
        .filter(|(e, _, _)| *e == SimEvent::Reordered)
        .map(|(_, _, f)| index(f))
        .collect();
    assert_eq!(held.len() as u64, s.reordered);
    // Each frame arrives exactly delay (+ hold if picked) after it was sent; the run
    // delivers at event times, so arrival times are exact.
    let mut inversions = 0;
    let mut max_seen = None;
    for (at, _, f) in &out {
        let i = index(f);
        let sent_at = Instant::ZERO + gap * i;
        let expect = sent_at
            + delay
            + if held.contains(&i) {
                hold
            } else {
                Duration::ZERO
            };
        assert_eq!(*at, expect, "frame {i}");
        if max_seen.is_some_and(|m| i < m) {
            inversions += 1;
        }
        max_seen = max_seen.max(Some(i));
    }
    assert_eq!(
        inversions,
        held.len(),
        "every held frame is overtaken, no other"
    );
}

#[test]
fn delay_delays_exactly_and_poll_at_says_when() {
    let delay = Duration::from_millis(10);
    let mut l = link(
        5,
        SimConfig {
            delay,
            ..SimConfig::default()
        },
    );
    let mut buf = [0u8; 1500];
    let t0 = Instant::from_millis(100);
    assert!(l.port(Side::A).send(t0, &frame(1, 200)));
    assert_eq!(l.poll_at(Side::B), Some(t0 + delay));
    assert_eq!(l.port(Side::B).poll_at(), Some(t0 + delay));
    assert_eq!(l.poll_at(Side::A), None, "nothing travels towards A");
    assert_eq!(l.next_event(), Some(t0 + delay));
    let just_before = t0 + (delay - Duration::from_nanos(1));
    assert_eq!(l.port(Side::B).recv(just_before, &mut buf), None);
    assert_eq!(
        l.port(Side::A).recv(t0 + delay, &mut buf),
        None,
        "A receives nothing"
    );
    assert_eq!(l.port(Side::B).recv(t0 + delay, &mut buf), Some(200));
    assert_eq!(&buf[..200], &frame(1, 200)[..]);
    assert_eq!(l.next_event(), None);
    assert_eq!(l.stats(Side::A).bytes_delivered, 200);
}

#[test]
fn jitter_spreads_arrivals_uniformly_within_bounds() {
    let delay = Duration::from_millis(2);
    let jitter = Duration::from_millis(1);
    let mut l = link(
        6,
        SimConfig {
            delay,
            jitter,
            ..SimConfig::default()
        },
    );
    for i in 0..N {
        l.send(Instant::ZERO, Side::A, &frame(i, 50));
    }
    let mut out = Vec::new();
    drain(&mut l, &mut out);
    assert_eq!(out.len() as u32, N);
    let extra: Vec<u64> = out
        .iter()
        .map(|(t, _, _)| (*t - (Instant::ZERO + delay)).as_nanos() as u64)
        .collect();
    assert!(
        out.iter()
            .all(|(t, _, _)| *t >= Instant::ZERO + delay && *t <= Instant::ZERO + delay + jitter)
    );
    let mean = extra.iter().sum::<u64>() as f64 / extra.len() as f64;
    assert!(
        (mean - 500_000.0).abs() < 10_000.0,
        "mean extra delay {mean} ns"
    );
    let below_quarter = extra.iter().filter(|&&e| e < 250_000).count() as u64;
    assert_rate("jitter in first quarter", below_quarter, u64::from(N), 0.25);
    // Arrival times are non-decreasing (the heap order) and the frames are shuffled.
    assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
    assert!(out.windows(2).any(|w| index(&w[0].2) > index(&w[1].2)));
}

#[test]
fn same_time_frames_keep_fifo_order() {
    let mut l = link(
        7,
        SimConfig {
            delay: Duration::from_millis(1),
            ..SimConfig::default()
        },
    );
    for i in 0..100 {
        l.send(Instant::ZERO, Side::A, &frame(i, 20));
    }
    let mut out = Vec::new();
    drain(&mut l, &mut out);
    let order: Vec<u32> = out.iter().map(|(_, _, f)| index(f)).collect();
    assert_eq!(order, (0..100).collect::<Vec<_>>());
}

#[test]
fn rate_limit_gives_configured_throughput() {
    // 10 Mbit/s; 1250-byte frames take 1 ms each.
    let rate = 10_000_000;
    let mut l = link(
        8,
        SimConfig {
            rate_bps: Some(rate),
            ..SimConfig::default()
        },
    );
    // Back to back at t=0: the k-th frame arrives at k ms.
    for i in 0..5 {
        l.send(Instant::ZERO, Side::A, &frame(i, 1250));
    }
    let mut out = Vec::new();
    drain(&mut l, &mut out);
    let times: Vec<Instant> = out.iter().map(|(t, _, _)| *t).collect();
    assert_eq!(times, (1..=5).map(Instant::from_millis).collect::<Vec<_>>());

    // Offered load twice the rate, odd frame sizes, for about 2 s: goodput within 1%.
    let mut l = link(
        8,
        SimConfig {
            rate_bps: Some(rate),
            ..SimConfig::default()
        },
    );
    let mut now = Instant::ZERO;
    let mut out = Vec::new();
    let mut bytes_sent = 0u64;
    for i in 0..4000u32 {
        let len = 1000 + (i as usize * 37) % 500;
        bytes_sent += len as u64;
        l.send(now, Side::A, &frame(i, len));
        now += Duration::from_micros(500);
        take_ready(&mut l, now, &mut out);
    }
    let end = drain(&mut l, &mut out).max(now);
    let bytes: u64 = out.iter().map(|(_, _, f)| f.len() as u64).sum();
    assert_eq!(bytes, bytes_sent);
    assert_eq!(l.stats(Side::A).bytes_delivered, bytes_sent);
    let last = out.last().unwrap().0;
    let throughput = bytes as f64 * 8.0 / last.since_epoch().as_secs_f64();
    assert!(
        (throughput / rate as f64 - 1.0).abs() < 0.01,
        "throughput {throughput} bit/s vs {rate}"
    );
    assert!(end >= last);
}

#[test]
fn queue_limit_tail_drops_and_counts() {
    // 1 Mbit/s, queue of 10 frames of 1000 bytes.
    let mut l = link(
        9,
        SimConfig {
            rate_bps: Some(1_000_000),
            queue_limit_bytes: Some(10_000),
            ..SimConfig::default()
        },
    );
    let events = record_events(&mut l);
    let accepted: Vec<bool> = (0..100)
        .map(|i| l.send(Instant::ZERO, Side::A, &frame(i, 1000)))
        .collect();
    assert_eq!(accepted.iter().filter(|&&a| a).count(), 10);
    assert!(accepted[..10].iter().all(|&a| a), "the first ten fit");
    let s = l.stats(Side::A);
    assert_eq!(s.queue_dropped, 90);
    assert_eq!(s.in_flight, 10);
    assert!(balanced(s));
    let dropped = events
        .borrow()
        .iter()
        .filter(|(e, _, _)| *e == SimEvent::QueueDropped)
        .count();
    assert_eq!(dropped, 90);
    // Each frame takes 8 ms. After 8 ms one frame has left: room for exactly one more.
    let t = Instant::from_millis(8);
    assert!(l.send(t, Side::A, &frame(100, 1000)));
    assert!(!l.send(t, Side::A, &frame(101, 1000)));
    let mut out = Vec::new();
    drain(&mut l, &mut out);
    let got: Vec<u32> = out.iter().map(|(_, _, f)| index(f)).collect();
    assert_eq!(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100]);
    assert_eq!(out.last().unwrap().0, Instant::from_millis(88));
    let s = l.stats(Side::A);
    assert_eq!(
        (s.sent, s.delivered, s.queue_dropped, s.in_flight),
        (102, 11, 91, 0)
    );
}

#[test]
fn too_big_frames_are_refused_and_counted() {
    for (medium, l2) in [(Medium::Ethernet, 14), (Medium::Ip, 0)] {
        let mut l = SimLink::new(SimLinkConfig {
            seed: 10,
            a_to_b: SimConfig::default(),
            b_to_a: SimConfig {
                mtu: Some(1280),
                ..SimConfig::default()
            },
            medium,
            mtu: 1500,
        });
        let caps = l.port(Side::A).caps();
        assert_eq!(
            (caps.medium, caps.mtu, caps.max_frame_len()),
            (medium, 1500, 1500 + l2)
        );
        assert!(l.send(Instant::ZERO, Side::A, &frame(0, 1500 + l2)));
        assert!(!l.send(Instant::ZERO, Side::A, &frame(1, 1501 + l2)));
        // The B->A path is narrower.
        assert!(l.send(Instant::ZERO, Side::B, &frame(2, 1280 + l2)));
        assert!(!l.send(Instant::ZERO, Side::B, &frame(3, 1281 + l2)));
        assert!(!l.send(Instant::ZERO, Side::B, &frame(4, 1500 + l2)));
        assert_eq!(l.stats(Side::A).too_big, 1);
        assert_eq!(l.stats(Side::B).too_big, 2);
        let mut out = Vec::new();
        drain(&mut l, &mut out);
        let got: Vec<(Side, u32)> = out.iter().map(|(_, s, f)| (*s, index(f))).collect();
        assert_eq!(got, [(Side::A, 2), (Side::B, 0)]);
        assert!(balanced(l.stats(Side::A)) && balanced(l.stats(Side::B)));
    }
}

#[test]
fn stats_balance_at_every_step_and_match_the_observer() {
    let mut cfg = all_faults();
    cfg.mtu = Some(1400);
    let mut l = SimLink::new(SimLinkConfig {
        seed: 11,
        a_to_b: cfg.clone(),
        b_to_a: cfg,
        medium: Medium::Ethernet,
        mtu: 1500,
    });
    let events = record_events(&mut l);
    let mut buf = [0u8; 1514];
    let mut now = Instant::ZERO;
    let mut received = [0u64; 2];
    let mut saw_in_flight = false;
    for i in 0..N {
        let from = if i % 2 == 0 { Side::A } else { Side::B };
        l.send(now, from, &frame(i, 40 + (i as usize * 13) % 1470));
        if i % 7 == 0 {
            for side in [Side::A, Side::B] {
                while l.recv(now, side, &mut buf).is_some() {
                    received[side.peer() as usize] += 1;
                }
            }
        }
        now += Duration::from_micros(20);
        for side in [Side::A, Side::B] {
            let s = l.stats(side);
            assert!(balanced(s), "{side:?} at frame {i}: {s:?}");
            saw_in_flight |= s.in_flight > 0;
        }
    }
    while let Some(t) = l.next_event() {
        now = now.max(t);
        for side in [Side::A, Side::B] {
            while l.recv(now, side, &mut buf).is_some() {
                received[side.peer() as usize] += 1;
            }
        }
    }
    assert!(saw_in_flight);
    let ev = events.borrow();
    for from in [Side::A, Side::B] {
        let s = l.stats(from);
        assert!(balanced(s));
        assert_eq!(s.in_flight, 0);
        assert_eq!(s.delivered, received[from as usize]);
        let count =
            |e: SimEvent| ev.iter().filter(|(x, f, _)| *x == e && *f == from).count() as u64;
        assert_eq!(count(SimEvent::Lost), s.lost);
        assert_eq!(count(SimEvent::Duplicated), s.duplicated);
        assert_eq!(count(SimEvent::Reordered), s.reordered);
        assert_eq!(count(SimEvent::Corrupted), s.corrupted);
        assert_eq!(count(SimEvent::TooBig), s.too_big);
        assert_eq!(count(SimEvent::QueueDropped), s.queue_dropped);
        assert_eq!(count(SimEvent::Delivered), s.delivered);
        // sent = received + dropped by reason - extra copies, exactly.
        assert_eq!(
            s.sent,
            received[from as usize] + s.lost + s.too_big + s.queue_dropped - s.duplicated
        );
        assert!(s.lost > 0 && s.too_big > 0 && s.queue_dropped > 0 && s.duplicated > 0);
    }
}

#[test]
fn loss_pattern_does_not_depend_on_other_faults() {
    let lost_frames = |cfg: SimConfig| {
        let mut l = link(12, cfg);
        let events = record_events(&mut l);
        run(&mut l, 2000, 100, Duration::from_micros(10));
        let v: Vec<u32> = events
            .borrow()
            .iter()
            .filter(|(e, _, _)| *e == SimEvent::Lost)
            .map(|(_, _, f)| index(f))
            .collect();
        v
    };
    let plain = lost_frames(SimConfig {
        loss: 0.1,
        ..SimConfig::default()
    });
    let busy = lost_frames(SimConfig {
        loss: 0.1,
        jitter: Duration::from_millis(1),
        corrupt: 0.3,
        reorder: 0.2,
        reorder_delay: Duration::from_millis(1),
        ..SimConfig::default()
    });
    assert!(!plain.is_empty());
    assert_eq!(plain, busy);
}

#[test]
fn short_buffer_truncates_and_counts() {
    let mut l = link(13, SimConfig::default());
    l.send(Instant::ZERO, Side::A, &frame(0, 100));
    let mut small = [0u8; 10];
    assert_eq!(l.recv(Instant::ZERO, Side::B, &mut small), Some(10));
    assert_eq!(&small[..], &frame(0, 100)[..10]);
    let s = l.stats(Side::A);
    assert_eq!((s.delivered, s.truncated, s.bytes_delivered), (1, 1, 10));
}

#[test]
fn set_config_partitions_and_heals() {
    let mut l = link(14, SimConfig::default());
    let mut buf = [0u8; 64];
    l.set_config(
        Side::A,
        SimConfig {
            loss: 1.0,
            ..SimConfig::default()
        },
    );
    assert!(
        l.send(Instant::ZERO, Side::A, &frame(0, 20)),
        "lost on the wire, not refused"
    );
    assert_eq!(l.recv(Instant::ZERO, Side::B, &mut buf), None);
    l.set_config(
        Side::A,
        SimConfig {
            loss: 7.0,
            ..SimConfig::default()
        },
    );
    assert_eq!(l.config(Side::A).loss, 1.0, "probabilities are clamped");
    l.set_config(Side::A, SimConfig::default());
    l.send(Instant::ZERO, Side::A, &frame(1, 20));
    assert_eq!(l.recv(Instant::ZERO, Side::B, &mut buf), Some(20));
    assert_eq!(index(&buf), 1);
    assert_eq!(l.stats(Side::A).lost, 1);
}

/// A clean line delivers at once through its FIFO, beside the heap of delayed frames: the
/// receiver still gets every frame in (arrival time, send order), whichever lane it took,
/// and a clock that goes back does not break the order.
#[test]
fn clean_and_delayed_frames_arrive_in_time_order() {
    let slow = SimConfig {
        delay: Duration::from_millis(1),
        ..SimConfig::default()
    };
    let ms = |n: u64| Instant::from_micros(n * 1000);
    let mut l = link(15, slow.clone());
    // Delayed 0, 1 (arrive at 1 ms); then clean 2, 3 at 0 and 4 at 0.5 ms: these overtake.
    l.send(ms(0), Side::A, &frame(0, 20));
    l.send(ms(0), Side::A, &frame(1, 20));
    l.set_config(Side::A, SimConfig::default());
    l.send(ms(0), Side::A, &frame(2, 20));
    l.send(ms(0), Side::A, &frame(3, 20));
    l.send(Instant::from_micros(500), Side::A, &frame(4, 20));
    assert_eq!(l.poll_at(Side::B), Some(ms(0)));
    // Delayed 5 (arrives at 3 ms), then clean 6, 7 sent at 3 ms: 5 was sent first.
    l.set_config(
        Side::A,
        SimConfig {
            delay: Duration::from_millis(2),
            ..slow
        },
    );
    l.send(ms(1), Side::A, &frame(5, 20));
    l.set_config(Side::A, SimConfig::default());
    l.send(ms(3), Side::A, &frame(6, 20));
    l.send(ms(3), Side::A, &frame(7, 20));
    // The caller's clock goes back: 8, sent at 2 ms, arrives before 6 and 7.
    l.send(ms(2), Side::A, &frame(8, 20));
    let mut out = Vec::new();
    take_ready(&mut l, ms(3), &mut out);
    let order: Vec<u32> = out.iter().map(|(_, _, f)| index(f)).collect();
    assert_eq!(order, [2, 3, 4, 0, 1, 8, 5, 6, 7]);
    assert_eq!(l.poll_at(Side::B), None);
    let s = l.stats(Side::A);
    assert!(balanced(s), "{s:?}");
    assert_eq!((s.delivered, s.in_flight, s.delayed), (9, 0, 3));
}

/// Send `frames` A->B with `send_swap`, taking every frame due with `recv_swap` between
/// sends and after; the deliveries, and the buffers the sender got back in place of its
/// frames.
fn run_swapped(l: &mut SimLink, frames: &[Vec<u8>], gap: Duration) -> (Vec<Delivery>, usize) {
    let mut out = Vec::new();
    let mut rx = vec![0u8; 2048];
    let mut spares_with_capacity = 0;
    let mut now = Instant::ZERO;
    let mut take = |l: &mut SimLink, now: Instant, out: &mut Vec<Delivery>| {
        while let Some(n) = l.recv_swap(now, Side::B, &mut rx) {
            assert_eq!(rx.len(), n, "recv_swap hands over exactly the frame");
            out.push((now, Side::B, rx.clone()));
        }
    };
    for f in frames {
        take(l, now, &mut out);
        let mut buf = f.clone();
        l.send_swap(now, Side::A, &mut buf);
        if buf.capacity() > 0 {
            spares_with_capacity += 1;
        }
        // The sender writes its next frame over whatever it got back.
        buf.iter_mut().for_each(|b| *b = 0xee);
        now += gap;
    }
    while let Some(t) = l.next_event() {
        now = now.max(t);
        take(l, now, &mut out);
    }
    (out, spares_with_capacity)
}

/// On a clean line a frame's buffer moves from sender to receiver, and the receiver's
/// old buffer becomes the sender's spare (as a ring hands descriptors): every frame still
/// arrives once, in order, byte for byte, whatever the sender writes into the spares it
/// gets, and after the first frame the sender gets buffers back instead of allocating.
#[test]
fn swapped_buffers_deliver_frames_in_order_byte_exact() {
    let frames: Vec<Vec<u8>> = (0..500u32)
        .map(|i| frame(i, 20 + (i as usize * 37) % 1400))
        .collect();
    let mut l = link(3, SimConfig::default());
    let (out, spares) = run_swapped(&mut l, &frames, Duration::from_micros(10));
    let got: Vec<&Vec<u8>> = out.iter().map(|(_, _, f)| f).collect();
    assert_eq!(got, frames.iter().collect::<Vec<_>>());
    // Frame i's send finds the buffer that receiving frame i-1 gave back.
    assert_eq!(spares, frames.len() - 1);
    let s = l.stats(Side::A);
    assert!(balanced(s), "{s:?}");
    assert_eq!((s.delivered, s.in_flight, s.truncated), (500, 0, 0));
    let bytes: usize = frames.iter().map(Vec::len).sum();
    assert_eq!(s.bytes_delivered, bytes as u64);
}

/// A buffer the receiver holds is its own: frames sent while it holds one never land in
/// it, however many spares the sender gets and scribbles over, and no spare the sender
/// gets is the buffer the receiver holds.
#[test]
fn a_frame_the_receiver_holds_is_never_reused_by_the_sender() {
    let mut l = link(4, SimConfig::default());
    // Prime the pool: the receiver's buffers come back to the sender.
    let mut rx = vec![0u8; 2048];
    for i in 0..8 {
        let mut f = frame(i, 100);
        l.send_swap(Instant::ZERO, Side::A, &mut f);
        l.recv_swap(Instant::ZERO, Side::B, &mut rx)
            .expect("clean line");
    }
    let want = frame(1000, 300);
    let mut f = want.clone();
    l.send_swap(Instant::ZERO, Side::A, &mut f);
    let mut held = Vec::new();
    assert_eq!(l.recv_swap(Instant::ZERO, Side::B, &mut held), Some(300));
    let held_at = held.as_ptr();
    for i in 0..200 {
        let mut f = frame(i, 1400);
        l.send_swap(Instant::ZERO, Side::A, &mut f);
        assert!(
            f.capacity() == 0 || f.as_ptr() != held_at,
            "spare {i} is the held frame"
        );
        f.iter_mut().for_each(|b| *b = 0xee);
        let mut other = vec![0u8; 64];
        assert_eq!(l.recv_swap(Instant::ZERO, Side::B, &mut other), Some(1400));
        assert_eq!(other, frame(i, 1400));
        assert_ne!(other.as_ptr(), held_at);
    }
    assert_eq!(held, want, "the held frame is as it arrived");
}

/// The line keeps at most 64 spare buffers, however many receivers give back.
#[test]
fn spare_buffer_pool_is_bounded() {
    let mut l = link(5, SimConfig::default());
    for i in 0..300 {
        let mut f = frame(i, 200);
        assert!(l.send_swap(Instant::ZERO, Side::A, &mut f));
        assert_eq!(f.capacity(), 0, "nothing to give back yet");
    }
    assert_eq!(l.spare_buffers(Side::A), 0);
    for i in 0..300 {
        let mut rx = Vec::with_capacity(2048);
        assert_eq!(l.recv_swap(Instant::ZERO, Side::B, &mut rx), Some(200));
        assert_eq!(rx, frame(i, 200));
        assert!(l.spare_buffers(Side::A) <= 64);
    }
    assert_eq!(l.spare_buffers(Side::A), 64);
    // Plain receives give buffers back too, within the same bound.
    for i in 0..100 {
        l.send(Instant::ZERO, Side::A, &frame(i, 200));
    }
    let mut buf = [0u8; 2048];
    while l.recv(Instant::ZERO, Side::B, &mut buf).is_some() {}
    assert_eq!(l.spare_buffers(Side::A), 64);
}

/// With faults the swapping calls copy, and the same seed gives exactly what the copying
/// calls give: loss, duplication, reordering, corruption, delay, jitter, rate and queue
/// limit all still apply, draw for draw.
#[test]
fn swapping_calls_keep_every_fault_and_the_seeded_replay() {
    let frames: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| frame(i, 60 + (i as usize * 7) % 1400))
        .collect();
    let gap = Duration::from_micros(40);
    let mut copying = link(9, all_faults());
    let mut want = Vec::new();
    let mut now = Instant::ZERO;
    for f in &frames {
        take_ready(&mut copying, now, &mut want);
        copying.send(now, Side::A, f);
        now += gap;
    }
    while let Some(t) = copying.next_event() {
        now = now.max(t);
        take_ready(&mut copying, now, &mut want);
    }
    let mut swapping = link(9, all_faults());
    let (got, _) = run_swapped(&mut swapping, &frames, gap);
    assert_eq!(got, want);
    let s = swapping.stats(Side::A);
    assert_eq!(s, copying.stats(Side::A));
    assert!(s.lost > 0 && s.duplicated > 0 && s.corrupted > 0 && s.reordered > 0);
    assert!(s.queue_dropped > 0 && s.delayed > 0);
}

/// A line switched from clean to faulty and back mid-run, all at one instant and with
/// frames still on the wire across each switch, delivers every frame once and in the
/// order sent: a clean line's frames (its fast FIFO) and a faulty line's (the arrival
/// heap) that arrive at the same instant come out in send order, whichever way the line
/// switched, and whether taken by swapping or by copying.
#[test]
fn switching_clean_and_faulty_mid_run_keeps_every_frame_in_order() {
    // A fault that never fires (so every frame arrives at once) but takes the faulty path.
    let faulty = SimConfig {
        loss: 1e-15,
        ..SimConfig::default()
    };
    let mut l = link(11, SimConfig::default());
    let at = Instant::ZERO + Duration::from_millis(1);
    let mut sent = Vec::new();
    let mut got = Vec::new();
    let mut rx = vec![0u8; 2048];
    let mut copy = [0u8; 2048];
    for i in 0..600u32 {
        // Clean, faulty, clean, ... in runs of 40 frames.
        let clean = (i / 40) % 2 == 0;
        if i % 40 == 0 {
            l.set_config(
                Side::A,
                if clean {
                    SimConfig::default()
                } else {
                    faulty.clone()
                },
            );
        }
        let f = frame(i, 60 + (i as usize * 13) % 1000);
        sent.push(f.clone());
        if i % 2 == 0 {
            let mut f = f;
            assert!(l.send_swap(at, Side::A, &mut f));
        } else {
            assert!(l.send(at, Side::A, &f));
        }
        // Take one frame now and then, so frames stay on the wire across each switch.
        if i % 3 == 0 {
            let n = l.recv_swap(at, Side::B, &mut rx).expect("a frame is due");
            got.push(rx[..n].to_vec());
        }
    }
    let mut k = 0;
    loop {
        k += 1;
        if k % 2 == 0 {
            let Some(n) = l.recv_swap(at, Side::B, &mut rx) else {
                break;
            };
            got.push(rx[..n].to_vec());
        } else {
            let Some(n) = l.recv(at, Side::B, &mut copy) else {
                break;
            };
            got.push(copy[..n].to_vec());
        }
    }
    assert_eq!(got.len(), sent.len(), "every frame delivered once");
    for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(g, s, "frame {i} out of order");
    }
    let s = l.stats(Side::A);
    assert!(balanced(s), "{s:?}");
    assert_eq!(
        (s.sent, s.delivered, s.lost, s.in_flight, s.delayed),
        (600, 600, 0, 0, 0)
    );
}
