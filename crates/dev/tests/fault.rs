//! The fault relay (`Faulty`) around a device: each fault on each path with its count,
//! holding and releasing by time with `poll_at`, the `xmit_more` hint passed on, frames
//! the device refuses counted, and the same seed giving the same faults.

use std::collections::VecDeque;
use std::time::Duration;

use ustack_dev::fault::{FaultConfig, Faulty};
use ustack_dev::{Device, DeviceCaps, Medium};
use ustack_obs::time::Instant;

/// A device that records what it is given (with the hint) and hands out queued frames;
/// it refuses frames starting with 0xff. With `offload`, it takes and hands over
/// super-segments of up to 64 KiB (a TUN queue with offloads).
#[derive(Debug, Default)]
struct Recorder {
    sent: Vec<(Vec<u8>, bool)>,
    inbox: VecDeque<Vec<u8>>,
    offload: bool,
}

impl Device for Recorder {
    fn caps(&self) -> DeviceCaps {
        let max = if self.offload { 65_535 } else { 0 };
        DeviceCaps {
            medium: Medium::Ip,
            mtu: 1500,
            gro_max_size: max,
            gso_max_size: max,
        }
    }
    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let f = self.inbox.pop_front()?;
        buf[..f.len()].copy_from_slice(&f);
        Some(f.len())
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }
    fn send_more(&mut self, _now: Instant, frame: &[u8], more: bool) -> bool {
        self.sent.push((frame.to_vec(), more));
        frame.first() != Some(&0xff)
    }
    fn poll_at(&self) -> Option<Instant> {
        None
    }
}

fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![0x45; 100];
    f[..4].copy_from_slice(&i.to_be_bytes());
    f
}

const N: u32 = 20_000;

fn assert_rate(what: &str, count: u64, p: f64) {
    let expect = p * f64::from(N);
    let sd = (expect * (1.0 - p)).sqrt();
    assert!(
        (count as f64 - expect).abs() < 5.0 * sd + 1.0,
        "{what}: {count} of {N}, expected about {expect:.0}"
    );
}

#[test]
fn egress_loss_and_duplication_at_their_rates_and_counted() {
    let cfg = FaultConfig {
        loss: 0.05,
        duplicate: 0.01,
        ..FaultConfig::default()
    };
    let mut d = Faulty::new(Recorder::default(), 1, cfg, FaultConfig::default());
    for i in 0..N {
        assert!(d.send(Instant::ZERO, &frame(i)));
    }
    let s = d.egress().clone();
    assert_rate("lost", s.lost, 0.05);
    assert_rate("duplicated", s.duplicated, 0.95 * 0.01);
    assert_eq!(s.sent, u64::from(N));
    assert_eq!(s.delivered, s.sent - s.lost + s.duplicated);
    assert_eq!(s.in_flight, 0, "nothing delayed: all released at once");
    assert_eq!(d.device().sent.len() as u64, s.delivered);
    assert_eq!(*d.ingress(), Default::default(), "the other path untouched");
}

#[test]
fn ingress_faults_apply_to_what_the_device_receives() {
    let cfg = FaultConfig {
        loss: 0.01,
        duplicate: 0.01,
        corrupt: 0.01,
        ..FaultConfig::default()
    };
    let mut dev = Recorder::default();
    dev.inbox.extend((0..N).map(frame));
    let mut d = Faulty::new(dev, 2, FaultConfig::default(), cfg);
    let mut buf = [0u8; 1500];
    let mut got = 0u64;
    let mut bad = 0u64;
    while let Some(n) = d.recv(Instant::ZERO, &mut buf) {
        got += 1;
        if buf[..n] != frame(u32::from_be_bytes(buf[..4].try_into().unwrap()))[..] {
            bad += 1;
        }
    }
    let s = d.ingress().clone();
    assert_eq!(s.sent, u64::from(N));
    assert_eq!(got, s.delivered);
    assert_eq!(got, s.sent - s.lost + s.duplicated);
    assert_rate("lost", s.lost, 0.01);
    assert_rate("corrupted", s.corrupted, 0.01);
    // A flipped bit in the index can still make a valid frame of another index: at most.
    assert!(
        bad <= s.corrupted && bad + 5 >= s.corrupted,
        "{bad} vs {s:?}"
    );
}

#[test]
fn delay_holds_frames_until_their_time_and_poll_at_says_when() {
    let cfg = FaultConfig {
        delay: Duration::from_millis(10),
        ..FaultConfig::default()
    };
    let mut dev = Recorder::default();
    dev.inbox.push_back(frame(7));
    let mut d = Faulty::symmetric(dev, 3, cfg);
    let t0 = Instant::from_millis(1);
    assert!(d.send(t0, &frame(1)));
    let mut buf = [0u8; 1500];
    assert_eq!(d.recv(t0, &mut buf), None, "the received frame is held too");
    assert_eq!(d.device().sent.len(), 0, "the sent frame is held");
    assert_eq!((d.egress().delayed, d.ingress().delayed), (1, 1));
    let at = Instant::from_millis(11);
    assert_eq!(d.poll_at(), Some(at));
    assert_eq!(d.recv(Instant::from_millis(10), &mut buf), None);
    assert_eq!(d.recv(at, &mut buf), Some(100));
    assert_eq!(buf[..100], frame(7)[..]);
    assert_eq!(
        d.device().sent,
        [(frame(1), false)],
        "released by the same call"
    );
    assert_eq!(d.poll_at(), None);
}

#[test]
fn reordering_lets_later_frames_overtake() {
    let cfg = FaultConfig {
        reorder: 0.1,
        reorder_delay: Duration::from_millis(1),
        ..FaultConfig::default()
    };
    let mut d = Faulty::new(Recorder::default(), 4, cfg, FaultConfig::default());
    for i in 0..N {
        // One frame every 10 µs: a held frame is overtaken by about 100 others.
        let now = Instant::from_micros(u64::from(i) * 10);
        d.send(now, &frame(i));
    }
    d.recv(Instant::from_secs(1), &mut [0; 1500]);
    let order: Vec<u32> = d
        .device()
        .sent
        .iter()
        .map(|(f, _)| u32::from_be_bytes(f[..4].try_into().unwrap()))
        .collect();
    assert_eq!(order.len() as u32, N, "nothing lost");
    let late = order.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    assert_rate("reordered", d.egress().reordered, 0.1);
    assert!(late > 0 && late <= d.egress().reordered, "{late}");
}

#[test]
fn batches_keep_the_xmit_more_hint_and_refusals_are_counted() {
    let mut d = Faulty::new(
        Recorder::default(),
        5,
        FaultConfig::default(),
        FaultConfig::default(),
    );
    let refused = [0xffu8; 60];
    let batch: [&[u8]; 4] = [&frame(1), &frame(2), &refused, &frame(3)];
    assert_eq!(d.send_batch(Instant::ZERO, &batch), 0, "the relay took all");
    let hints: Vec<bool> = d.device().sent.iter().map(|(_, more)| *more).collect();
    assert_eq!(hints, [true, true, true, false]);
    assert_eq!(d.stats().device_refused, 1);
    // Too big for the device's MTU: refused by the relay itself.
    assert!(!d.send(Instant::ZERO, &[0x45; 1501]));
    assert_eq!(d.egress().too_big, 1);
}

#[test]
fn same_seed_same_faults() {
    let cfg = FaultConfig {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.1,
        reorder_delay: Duration::from_micros(50),
        jitter: Duration::from_micros(20),
        ..FaultConfig::default()
    };
    let run = |seed| {
        let mut d = Faulty::symmetric(Recorder::default(), seed, cfg.clone());
        for i in 0..2000 {
            d.send(Instant::from_micros(i * 10), &frame(i as u32));
        }
        d.recv(Instant::from_secs(1), &mut [0; 1500]);
        d.into_inner().sent
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10));
}

/// Around a device with offloads, the relay carries super-segments both ways (TCP builds
/// them for the device, the device hands over what the kernel sent whole): the wire it
/// stands for carries them. Only a frame above the device's limit is refused, counted in
/// the line's `too_big`; without offloads, one above the MTU is.
#[test]
fn super_segments_pass_a_relay_around_a_device_with_offloads() {
    let big = vec![0x45; 40_000];
    let mut relay = Faulty::symmetric(
        Recorder {
            offload: true,
            ..Recorder::default()
        },
        1,
        FaultConfig::default(),
    );
    assert!(relay.send(Instant::ZERO, &big), "a super-segment goes out");
    assert_eq!(relay.device().sent.len(), 1);
    assert_eq!(relay.device().sent[0].0, big);
    relay.device_mut().inbox.push_back(big.clone());
    let mut buf = vec![0u8; 65_535];
    assert_eq!(
        relay.recv(Instant::ZERO, &mut buf),
        Some(big.len()),
        "and comes in"
    );
    assert_eq!(&buf[..big.len()], &big[..]);
    assert!(
        !relay.send(Instant::ZERO, &vec![0x45; 65_536]),
        "above gso_max_size"
    );
    assert_eq!(relay.egress().too_big, 1);
    assert_eq!(relay.ingress().too_big, 0);

    let mut plain = Faulty::symmetric(Recorder::default(), 1, FaultConfig::default());
    assert!(
        !plain.send(Instant::ZERO, &big),
        "above the MTU without offloads"
    );
    assert_eq!(plain.egress().too_big, 1);
    assert!(plain.device().sent.is_empty());
}
