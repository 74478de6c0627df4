//! Application timers driven by the run loop: `Runtime::add_timer`, `cancel_timer` and
//! `rearm_timer`, delivered by `Runtime::poll` in `Events::timers`. They fire in deadline
//! order, never early and less than one wheel tick late, on a virtual clock over sim; a
//! runtime idle on shm (real clock) sleeps until a timer and wakes for it; 100,000 timers
//! are all delivered; timers and socket events share one poll loop.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::collections::HashMap;

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::{SimConfig, SimLinkConfig};
use ustack_runtime::Mode;
use ustack_runtime::api::UdpSocket;
use ustack_runtime::runtime::{
    Events, Interest, Runtime, RuntimeBuilder, SimPort, VirtualClock, sim_pair,
};
use ustack_stack::{EthernetAddress, Instant, Readiness};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The wheel's default tick.
const TICK: Duration = Duration::from_millis(1);

fn builder(ip: Ipv4Addr, n: u8) -> RuntimeBuilder {
    RuntimeBuilder::new()
        .ipv4(ip, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, n]))
        .seed(u64::from(n))
}

/// One runtime alone on a sim link, on a virtual clock at `start` (the other end idle).
fn sim_runtime(start: Instant) -> (Runtime<SimPort, VirtualClock>, SimPort) {
    let (a, b) = sim_pair(SimLinkConfig::default());
    let rt = builder(SERVER_IP, 1)
        .build_with_clock(a, VirtualClock::new(start))
        .unwrap();
    (rt, b)
}

/// Tiny deterministic generator.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The wheel tick a deadline fires at: the first tick boundary at or after it.
fn expiry_tick(d: Instant) -> u64 {
    d.as_nanos().div_ceil(TICK.as_nanos() as u64)
}

/// Poll until nothing is left (the virtual clock cannot move), recording every fired
/// token with the time it was delivered.
fn drain(rt: &mut Runtime<SimPort, VirtualClock>, capacity: usize) -> Vec<(u64, Instant)> {
    let mut events = Events::with_capacity(capacity);
    let mut got = Vec::new();
    loop {
        let n = rt.poll(&mut events, None).unwrap();
        if n == 0 {
            assert!(events.timers().is_empty());
            return got;
        }
        assert!(events.is_empty(), "no socket is registered");
        assert_eq!(
            n,
            events.timers().len(),
            "poll counts the timers it reports"
        );
        assert!(n <= capacity, "at most the buffer's capacity");
        let now = rt.now();
        got.extend(events.timers().iter().map(|&t| (t, now)));
    }
}

/// Each token fired once, never before its deadline, less than one tick after it, and in
/// order of expiry tick.
fn check_delivery(got: &[(u64, Instant)], deadlines: &HashMap<u64, Instant>) {
    assert_eq!(got.len(), deadlines.len(), "every timer fires exactly once");
    let mut seen = std::collections::HashSet::new();
    let mut last_tick = 0;
    for &(token, at) in got {
        assert!(seen.insert(token), "timer {token} fired twice");
        let d = deadlines[&token];
        assert!(
            at >= d,
            "timer {token} fired early: at {at:?}, deadline {d:?}"
        );
        assert!(
            at < d + TICK,
            "timer {token} fired a tick late or more: at {at:?}, deadline {d:?}"
        );
        let tick = expiry_tick(d);
        assert!(tick >= last_tick, "timer {token} out of deadline order");
        last_tick = tick;
    }
}

#[test]
fn timers_fire_in_deadline_order_never_early_at_most_a_tick_late_over_sim() {
    let start = Instant::from_millis(1_000);
    let (mut rt, _peer) = sim_runtime(start);
    let mut rng = 42;
    let mut deadlines = HashMap::new();
    for token in 0..2_000u64 {
        // Deadlines at any nanosecond over the next 70 s (every level of the wheel up to
        // 2^18 ticks), a few already past.
        let offset = splitmix(&mut rng) % 70_000_000_000;
        let d = Instant::from_nanos((start.as_nanos() + offset).saturating_sub(5_000_000));
        rt.add_timer(d, token);
        deadlines.insert(token, d);
    }
    assert_eq!(rt.timers_armed(), 2_000);
    let got = drain(&mut rt, 64);
    check_delivery(&got, &deadlines);
    assert_eq!(rt.timers_armed(), 0);
    assert_eq!(rt.stats().timers_fired, 2_000);
    // The clock jumped from wake-up to wake-up: no 1 ms stepping over 70 s.
    assert!(
        rt.stats().rounds < 10_000,
        "rounds {} for 2000 timers",
        rt.stats().rounds
    );
}

#[test]
fn cancelled_and_rearmed_timers() {
    let (mut rt, _peer) = sim_runtime(Instant::ZERO);
    let a = rt.add_timer(Instant::from_millis(10), 1);
    let b = rt.add_timer(Instant::from_millis(20), 2);
    let c = rt.add_timer(Instant::from_millis(30), 3);
    let d = rt.add_timer(Instant::from_millis(40), 4);
    assert!(rt.cancel_timer(b));
    assert!(
        !rt.cancel_timer(b),
        "a cancelled timer cannot be cancelled again"
    );
    assert!(!rt.rearm_timer(b, Instant::from_millis(50)), "nor re-armed");
    assert!(rt.rearm_timer(c, Instant::from_millis(5)), "earlier");
    assert!(rt.rearm_timer(d, Instant::from_millis(100)), "later");
    assert!(
        rt.rearm_timer(d, Instant::from_millis(100)),
        "again, same deadline"
    );
    assert_eq!(rt.timers_armed(), 3);

    let mut events = Events::with_capacity(8);
    assert_eq!(rt.poll(&mut events, None).unwrap(), 1);
    assert_eq!(events.timers(), [3]);
    assert_eq!(rt.now(), Instant::from_millis(5));
    assert_eq!(rt.poll(&mut events, None).unwrap(), 1);
    assert_eq!(events.timers(), [1]);
    assert_eq!(rt.now(), Instant::from_millis(10));
    // A fired timer's id is stale.
    assert!(!rt.cancel_timer(a));
    assert!(!rt.rearm_timer(a, Instant::from_millis(200)));

    // A timeout earlier than the next timer returns empty at the timeout.
    assert_eq!(
        rt.poll(&mut events, Some(Duration::from_millis(30)))
            .unwrap(),
        0
    );
    assert!(events.timers().is_empty());
    assert_eq!(rt.now(), Instant::from_millis(40));

    // A deadline already past fires on the next poll, without the clock moving.
    rt.add_timer(Instant::from_millis(1), 7);
    assert_eq!(rt.poll(&mut events, None).unwrap(), 1);
    assert_eq!(events.timers(), [7]);
    assert_eq!(rt.now(), Instant::from_millis(40));

    assert_eq!(rt.poll(&mut events, None).unwrap(), 1);
    assert_eq!(events.timers(), [4]);
    assert_eq!(rt.now(), Instant::from_millis(100));
    // Nothing left: the virtual clock cannot move, poll returns empty.
    assert_eq!(rt.poll(&mut events, None).unwrap(), 0);
    assert_eq!(rt.stats().timers_fired, 4);
}

#[test]
fn a_burst_larger_than_the_round_budget_and_the_buffer() {
    let (mut rt, _peer) = sim_runtime(Instant::ZERO);
    let at = Instant::from_millis(7);
    let mut deadlines = HashMap::new();
    for token in 0..5_000u64 {
        rt.add_timer(at, token);
        deadlines.insert(token, at);
    }
    let got = drain(&mut rt, 100);
    check_delivery(&got, &deadlines);
    // All fired at their tick; the budget and the buffer spread them over polls, not time.
    assert!(got.iter().all(|&(_, t)| t == at));
}

#[test]
fn hundred_thousand_timers_all_delivered() {
    let (mut rt, _peer) = sim_runtime(Instant::ZERO);
    let mut rng = 7;
    let mut deadlines = HashMap::with_capacity(100_000);
    let mut ids = Vec::with_capacity(100_000);
    for token in 0..100_000u64 {
        let d = Instant::from_nanos(splitmix(&mut rng) % 10_000_000_000);
        ids.push(rt.add_timer(d, token));
        deadlines.insert(token, d);
    }
    assert_eq!(rt.timers_armed(), 100_000);
    let got = drain(&mut rt, 1024);
    check_delivery(&got, &deadlines);
    assert_eq!(rt.stats().timers_fired, 100_000);
    assert_eq!(rt.timers_armed(), 0);
    assert!(ids.iter().all(|&id| !rt.cancel_timer(id)), "all ids stale");
}

#[test]
fn shm_runtime_idle_sleeps_until_a_50ms_timer_and_wakes_for_it() {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig::default()).unwrap();
    let (a, _peer) = (a.remove(0), b.remove(0));
    let mut rt = builder(SERVER_IP, 1).build(a).unwrap();
    let mut events = Events::with_capacity(8);
    let deadline = rt.now() + Duration::from_millis(50);
    rt.add_timer(deadline, 99);
    let before = *rt.stats();
    let t0 = std::time::Instant::now();
    // The caller's timeout is far away: only the timer can end this poll early.
    let n = rt.poll(&mut events, Some(Duration::from_secs(5))).unwrap();
    let elapsed = t0.elapsed();
    let after = *rt.stats();
    assert_eq!(n, 1);
    assert_eq!(events.timers(), [99]);
    assert!(rt.now() >= deadline, "never early");
    assert!(elapsed >= Duration::from_millis(49), "slept {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(1),
        "woke for the timer: {elapsed:?}"
    );
    // It slept until the deadline (a deadline wake-up, not a frame), and did not spin.
    assert!(after.sleeps > before.sleeps, "it slept");
    assert!(after.timeouts > before.timeouts, "woken by the deadline");
    assert_eq!(after.wakeups, before.wakeups, "not by the device");
    assert_eq!(after.busy_polls, before.busy_polls);
    assert!(
        after.rounds - before.rounds <= 5,
        "a spinning loop runs thousands of rounds in 50 ms: {}",
        after.rounds - before.rounds
    );
}

#[test]
fn timers_and_socket_events_in_one_poll_loop() {
    const PORT: u16 = 53;
    const SOCKET: u64 = 5;
    const SEND: u64 = 1_000;
    const SENDS: u64 = 20;
    let dir = SimConfig {
        delay: Duration::from_micros(300),
        ..SimConfig::default()
    };
    let (a, b) = sim_pair(SimLinkConfig {
        a_to_b: dir.clone(),
        b_to_a: dir,
        ..SimLinkConfig::default()
    });
    let clock = VirtualClock::new(Instant::ZERO);
    let mut srt = builder(SERVER_IP, 1)
        .build_with_clock(a, clock.participant())
        .unwrap();
    let mut crt = builder(CLIENT_IP, 2)
        .build_with_clock(b, clock.participant())
        .unwrap();
    let server = UdpSocket::bind(&mut srt, SocketAddrV4::new(SERVER_IP, PORT)).unwrap();
    let client = UdpSocket::bind(&mut crt, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    srt.register(&server, SOCKET, Interest::READABLE, Mode::Edge)
        .unwrap();

    // The client sends a datagram on each of its timers, every 10 ms, re-arming from the
    // deadline; the server has timers of its own in the same loop as its socket.
    let mut next_send = Instant::from_millis(10);
    crt.add_timer(next_send, SEND);
    let server_deadlines: HashMap<u64, Instant> = [(1, 55), (2, 105), (3, 150)]
        .into_iter()
        .map(|(t, ms)| (t, Instant::from_millis(ms)))
        .collect();
    for (&t, &d) in &server_deadlines {
        srt.add_timer(d, t);
    }

    let mut cev = Events::with_capacity(8);
    let mut sev = Events::with_capacity(8);
    let mut sent = Vec::new();
    let mut received = Vec::new();
    let mut server_fired = Vec::new();
    while (received.len() as u64) < SENDS || server_fired.len() < server_deadlines.len() {
        assert!(crt.now() < Instant::from_secs(2), "stuck");
        crt.poll(&mut cev, Some(Duration::from_millis(1))).unwrap();
        assert!(cev.is_empty());
        for &t in cev.timers() {
            assert_eq!(t, SEND);
            let now = crt.now();
            assert!(
                now >= next_send && now < next_send + TICK,
                "client timer on time"
            );
            let i = sent.len() as u64;
            let payload = i.to_be_bytes();
            client
                .send_to(&mut crt, &payload, SocketAddrV4::new(SERVER_IP, PORT))
                .unwrap();
            sent.push(now);
            if i + 1 < SENDS {
                next_send += Duration::from_millis(10);
                crt.add_timer(next_send, SEND);
            }
        }
        srt.poll(&mut sev, Some(Duration::from_millis(1))).unwrap();
        for e in sev.iter() {
            assert_eq!(e.token, SOCKET);
            assert!(e.readiness.contains(Readiness::READABLE));
            let mut buf = [0u8; 16];
            while let Ok((n, _)) = server.recv_from(&mut srt, &mut buf) {
                assert_eq!(n, 8);
                let i = u64::from_be_bytes(buf[..8].try_into().unwrap());
                received.push((i, srt.now()));
            }
        }
        for &t in sev.timers() {
            server_fired.push((t, srt.now()));
        }
    }
    assert_eq!(sent.len() as u64, SENDS);
    for (k, &(i, at)) in received.iter().enumerate() {
        assert_eq!(i, k as u64, "datagrams in order");
        assert!(
            at >= sent[k] + Duration::from_micros(300),
            "after the link delay"
        );
    }
    assert_eq!(
        server_fired.iter().map(|&(t, _)| t).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for &(t, at) in &server_fired {
        let d = server_deadlines[&t];
        assert!(at >= d && at < d + TICK, "server timer {t} at {at:?}");
    }
}

/// A runtime's rounds leave an empty wheel alone: timers armed after a long idle stretch
/// still fire in order, never early and less than one tick late, a deadline already past
/// at once, and the wheel walks from where it was left.
#[test]
fn timers_armed_after_a_long_idle_stretch_fire_on_time() {
    let (mut rt, _peer) = sim_runtime(Instant::ZERO);
    for _ in 0..10 {
        rt.run_once(Some(Duration::ZERO)).unwrap();
    }
    rt.clock().set(Instant::from_millis(100_000));
    rt.run_once(Some(Duration::ZERO)).unwrap();
    let start = rt.now();
    let deadlines: HashMap<u64, Instant> = [
        (1, start + Duration::from_millis(5)),
        (2, start + Duration::from_secs(3)),
        (3, start + Duration::from_nanos(1)),
        (5, start + Duration::from_secs(300)),
    ]
    .into_iter()
    .collect();
    for (&token, &d) in &deadlines {
        rt.add_timer(d, token);
    }
    // Already past: fires on the first round.
    rt.add_timer(Instant::from_millis(50_000), 4);
    let mut events = Events::with_capacity(8);
    assert_eq!(rt.poll(&mut events, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(events.timers(), [4]);
    assert_eq!(rt.now(), start);
    let mut got = Vec::new();
    for _ in 0..50 {
        if got.len() == deadlines.len() {
            break;
        }
        rt.poll(&mut events, Some(Duration::from_secs(400)))
            .unwrap();
        let now = rt.now();
        got.extend(events.timers().iter().map(|&t| (t, now)));
    }
    assert_eq!(got.len(), deadlines.len(), "{got:?}");
    check_delivery(&got, &deadlines);
}

/// `run_once` reports the application timers its round fired (`timers`, counted as work,
/// so the loop does not idle) and, when more were due than a round fires
/// (`APP_TIMER_BUDGET`), leaves work (`work_left`) for the next round.
#[test]
fn run_once_reports_the_timers_it_fired_and_those_it_left_due() {
    let (mut rt, _peer) = sim_runtime(Instant::ZERO);
    let at = Instant::from_millis(5);
    let budget = ustack_runtime::runtime::APP_TIMER_BUDGET;
    for token in 0..(budget + 1) as u64 {
        rt.add_timer(at, token);
    }
    let r = rt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(!r.timers && !r.work_left, "none due yet: {r:?}");
    rt.clock().set(at);
    let r = rt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(r.timers, "a budget's worth fired: {r:?}");
    assert!(r.work_left, "one more was due: {r:?}");
    assert_eq!(rt.stats().timers_fired, budget as u64);
    let r = rt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(r.timers && !r.work_left, "the last one: {r:?}");
    assert_eq!(rt.stats().timers_fired, budget as u64 + 1);
    let r = rt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(!r.timers && !r.work_left, "none left: {r:?}");
}
