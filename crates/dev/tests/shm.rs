//! The `shm` link: frames round-trip in one process and between two processes, order and
//! integrity over a million frames, back-pressure, doorbells, and a peer that writes
//! garbage into the shared region (detected and counted, never a panic).
//!
//! Two-process tests spawn this test binary again, running only the ignored
//! `child_process` test with `USTACK_SHM_CHILD` set to the name of the link's offer. The
//! child dies with its parent (`PR_SET_PDEATHSIG`), gives up after a deadline, and is
//! killed by a guard if the parent's test fails first.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as WallClock};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use ustack_dev::shm::{
    DESC_LEN, FrameBatch, INLINE_MAX, INLINE_OFF, RX_HEAD, ShmConfig, ShmFault, ShmLayout, ShmLink,
    ShmPeer, ShmPort, ShmSide, desc_entry, desc_seq, wait_any,
};
use ustack_dev::{Device, Medium};
use ustack_obs::time::Instant;

const NOW: Instant = Instant::ZERO;
const CHILD_ENV: &str = "USTACK_SHM_CHILD";
const CHILD_QUEUES_ENV: &str = "USTACK_SHM_CHILD_QUEUES";
const QUIT: &[u8] = b"quit";

/// Length of frame `seq`: 16..=200 bytes, or up to 1514 with `big`.
fn frame_len(seq: u64, big: bool) -> usize {
    if big {
        16 + (seq * 7919 % 1499) as usize
    } else {
        16 + (seq % 185) as usize
    }
}

/// Writes frame `seq` into `buf`: its sequence number, then a pattern derived from it.
fn make_frame(seq: u64, big: bool, buf: &mut [u8]) -> usize {
    let len = frame_len(seq, big);
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf[8..len].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    len
}

fn frame(seq: u64, big: bool) -> Vec<u8> {
    let mut buf = vec![0u8; 1514];
    let n = make_frame(seq, big, &mut buf);
    buf.truncate(n);
    buf
}

/// Whether `f` is exactly frame `seq`.
fn is_frame(seq: u64, big: bool, f: &[u8]) -> bool {
    f.len() == frame_len(seq, big)
        && f[..8] == seq.to_le_bytes()
        && f[8..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (seq as u8).wrapping_mul(31).wrapping_add(i as u8))
}

fn one_queue(ring_size: usize) -> ShmConfig {
    ShmConfig {
        ring_size,
        ..ShmConfig::default()
    }
}

fn pair(config: &ShmConfig) -> (ShmPort, ShmPort) {
    let (mut a, mut b) = ShmLink::pair(config).expect("create and attach");
    (a.remove(0), b.remove(0))
}

fn recv_vec(port: &mut ShmPort) -> Option<Vec<u8>> {
    let mut buf = [0u8; 1514];
    port.recv(NOW, &mut buf).map(|n| buf[..n].to_vec())
}

// ---- one process ---------------------------------------------------------------------

#[test]
fn frames_round_trip_both_ways() {
    let (mut a, mut b) = pair(&ShmConfig::default());
    assert_eq!(a.side(), ShmSide::A);
    assert_eq!(b.side(), ShmSide::B);
    assert_eq!(a.caps().medium, Medium::Ethernet);
    assert_eq!(b.caps().max_frame_len(), 1514);
    assert_eq!(a.link_id(), b.link_id());
    assert_eq!(a.poll_at(), None);
    for len in [0, 1, 14, 60, 1000, 1514] {
        let f: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
        assert!(a.send(NOW, &f));
        assert_eq!(b.poll_at(), Some(Instant::ZERO));
        assert_eq!(recv_vec(&mut b).as_deref(), Some(&f[..]));
        assert!(b.send(NOW, &f));
        assert_eq!(recv_vec(&mut a).as_deref(), Some(&f[..]));
    }
    assert_eq!(recv_vec(&mut a), None);
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(a.stats().tx_frames, 6);
    assert_eq!(a.stats().tx_bytes, 1 + 14 + 60 + 1000 + 1514);
    assert_eq!(b.stats().rx_frames, 6);
    assert_eq!(b.stats().rx_bytes, a.stats().tx_bytes);
    assert_eq!(a.stats().doorbells + b.stats().doorbells, 0, "nobody slept");
    assert_eq!(a.fault(), None);
}

#[test]
fn ip_medium_and_caps_come_from_the_creator() {
    let cfg = ShmConfig {
        medium: Medium::Ip,
        mtu: 9000,
        slot_size: 9024,
        ..ShmConfig::default()
    };
    let (a, b) = pair(&cfg);
    for p in [&a, &b] {
        assert_eq!(p.caps().medium, Medium::Ip);
        assert_eq!(p.caps().mtu, 9000);
        assert_eq!(p.caps().max_frame_len(), 9000);
    }
}

#[test]
fn queue_pairs_are_independent() {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        queue_pairs: 4,
        ..ShmConfig::default()
    })
    .expect("link");
    assert_eq!(a.len(), 4);
    for (q, port) in a.iter_mut().enumerate() {
        assert_eq!(port.queue(), q);
        for k in 0..3u8 {
            assert!(port.send(NOW, &[q as u8, k]));
        }
    }
    for (q, port) in b.iter_mut().enumerate().rev() {
        for k in 0..3u8 {
            assert_eq!(recv_vec(port), Some(vec![q as u8, k]));
        }
        assert_eq!(recv_vec(port), None);
        assert!(port.send(NOW, &[0xb0 | q as u8]));
    }
    for (q, port) in a.iter_mut().enumerate() {
        assert_eq!(recv_vec(port), Some(vec![0xb0 | q as u8]));
        assert_eq!(recv_vec(port), None);
    }
}

#[test]
fn batches_round_trip() {
    let (mut a, mut b) = pair(&one_queue(64));
    let frames: Vec<Vec<u8>> = (0..50).map(|s| frame(s, true)).collect();
    assert_eq!(a.send_until_full(frames.iter().map(|f| &f[..])), 50);
    let mut batch = FrameBatch::new(32, 1514);
    assert_eq!(b.recv_batch(&mut batch), 32);
    assert_eq!(b.recv_batch(&mut batch), 0, "the batch is full");
    for (i, f) in batch.iter().enumerate() {
        assert!(is_frame(i as u64, true, f));
    }
    batch.clear();
    assert_eq!(b.recv_batch(&mut batch), 18);
    assert!((0..18).all(|i| is_frame(32 + i as u64, true, batch.get(i).unwrap())));
    assert_eq!(batch.get(18), None);
    // A batch with an oversized frame in the middle: taken, dropped, counted.
    let big = vec![0u8; 1515];
    let mixed = [&frames[0][..], &big[..], &frames[1][..]];
    assert_eq!(a.send_until_full(mixed), 3);
    assert_eq!(a.stats().tx_too_big, 1);
    batch.clear();
    assert_eq!(b.recv_batch(&mut batch), 2);
    assert_eq!(batch.get(1), Some(&frames[1][..]));
}

/// `Device::send_batch` publishes the ring index once and rings a sleeping peer once for
/// the whole batch, where `Device::send` publishes once per frame.
#[test]
fn device_send_batch_publishes_once_and_rings_once() {
    let (mut a, mut b) = pair(&one_queue(64));
    let frames: Vec<Vec<u8>> = (0..40).map(|s| frame(s, false)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();

    assert!(b.prepare_sleep(), "nothing to receive: b may sleep");
    assert_eq!(a.send_batch(NOW, &refs), 0, "nothing dropped");
    assert_eq!(a.stats().tx_frames, 40);
    assert_eq!(a.stats().tx_publishes, 1);
    assert_eq!(a.stats().doorbells, 1);
    assert!(b.wait(Some(Duration::ZERO)).unwrap(), "woken with work");
    for s in 0..40 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()), "frame {s}");
    }
    assert_eq!(recv_vec(&mut b), None);

    // The same frames one `send` at a time: one publication each.
    for f in &refs {
        assert!(a.send(NOW, f));
    }
    assert_eq!(a.stats().tx_publishes, 1 + 40);
    assert_eq!(a.stats().doorbells, 1, "b did not sleep again");
    for s in 0..40 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()), "frame {s}");
    }
}

/// A batch that fills the ring: each frame that finds no slot is dropped (not kept back, as
/// `send_until_full` would), an oversized one too, the frames after a drop are still
/// offered, and the return value and the port's counters agree exactly.
#[test]
fn device_send_batch_drops_exactly_what_does_not_fit() {
    let (mut a, mut b) = pair(&one_queue(8));
    let big = vec![0u8; 1515];
    let frames: Vec<Vec<u8>> = (0..11).map(|s| frame(s, false)).collect();
    // 5 frames, an oversized one, 6 more: 8 fit, the oversized and the last 3 are dropped.
    let mut refs: Vec<&[u8]> = frames[..5].iter().map(|f| &f[..]).collect();
    refs.push(&big);
    refs.extend(frames[5..].iter().map(|f| &f[..]));
    assert_eq!(a.send_batch(NOW, &refs), 4);
    let st = a.stats();
    assert_eq!((st.tx_frames, st.tx_too_big, st.tx_full), (8, 1, 3));
    assert_eq!(st.tx_publishes, 1);
    for s in 0..8 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()), "frame {s}");
    }
    assert_eq!(recv_vec(&mut b), None, "frames 8..11 were dropped");
    // The slots came back: the next batch fits whole.
    assert_eq!(a.send_batch(NOW, &refs[9..]), 0);
    for s in 8..11 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()), "frame {s}");
    }
}

/// `send_more` with `more == true` leaves the frame invisible to the peer until a call with
/// `more == false` (Linux's `xmit_more`), or until the port gets ready to sleep.
#[test]
fn send_more_defers_publication_until_the_last_frame() {
    let (mut a, mut b) = pair(&one_queue(64));
    assert!(a.send_more(NOW, &frame(0, false), true));
    assert!(a.send_more(NOW, &frame(1, false), true));
    assert_eq!(recv_vec(&mut b), None, "deferred");
    assert_eq!(a.stats().tx_publishes, 0);
    assert!(a.send_more(NOW, &frame(2, false), false));
    assert_eq!(a.stats().tx_publishes, 1);
    for s in 0..3 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()), "frame {s}");
    }
    // A run left open is published before the port sleeps.
    assert!(a.send_more(NOW, &frame(3, false), true));
    assert!(a.prepare_sleep());
    a.finish_sleep();
    assert!(is_frame(3, false, &recv_vec(&mut b).unwrap()));
    assert_eq!(a.stats().tx_publishes, 2);
}

/// An idle port writes into the free slot its next send will take (so that the slot's
/// lines are its core's again): never into a slot still in flight, whose frame the peer
/// has not read, nor into a slot the peer has not yet returned.
#[test]
fn idle_polls_between_sends_never_touch_a_frame_in_flight() {
    let (mut a, mut b) = pair(&one_queue(4));
    for round in 0..20u64 {
        // Frames in flight in up to every slot, the sender idle between sends.
        let mut sent = 0;
        while sent < 4 && a.send(NOW, &frame(round * 4 + sent, false)) {
            sent += 1;
            for _ in 0..3 {
                assert_eq!(recv_vec(&mut a), None);
            }
        }
        for s in 0..sent {
            let f = recv_vec(&mut b).expect("frame");
            assert!(
                is_frame(round * 4 + s, false, &f),
                "round {round} frame {s}"
            );
            // The receiver idles too, its slots returned: the sender takes them back.
            assert_eq!(recv_vec(&mut a), None);
        }
    }
}

#[test]
fn a_million_frames_arrive_in_order_and_intact() {
    const N: u64 = 1_000_000;
    let (mut a, mut b) = pair(&one_queue(256));
    let sender = std::thread::spawn(move || {
        let mut seq = 0;
        let mut batch = FrameBatch::new(16, 1514);
        let mut buf = [0u8; 1514];
        while seq < N {
            // Alternate the batch path and the Device path.
            let sent = if seq.is_multiple_of(2) {
                batch.clear();
                for s in seq..(seq + 16).min(N) {
                    let n = make_frame(s, false, &mut buf);
                    batch.push(&buf[..n]);
                }
                a.send_until_full(batch.iter()) as u64
            } else {
                let n = make_frame(seq, false, &mut buf);
                u64::from(a.send(NOW, &buf[..n]))
            };
            seq += sent;
            if sent == 0 {
                assert!(
                    a.wait(Some(Duration::from_secs(20))).unwrap(),
                    "slots never came back"
                );
            }
        }
        a
    });
    let mut next = 0u64;
    let mut batch = FrameBatch::new(32, 1514);
    let mut buf = [0u8; 1514];
    while next < N {
        let got = if next.is_multiple_of(3) {
            batch.clear();
            b.recv_batch(&mut batch);
            for f in batch.iter() {
                assert!(is_frame(next, false, f), "frame {next} wrong: {f:?}");
                next += 1;
            }
            batch.len()
        } else if let Some(n) = b.recv(NOW, &mut buf) {
            assert!(is_frame(next, false, &buf[..n]), "frame {next} wrong");
            next += 1;
            1
        } else {
            0
        };
        if got == 0 {
            assert!(
                b.wait(Some(Duration::from_secs(20))).unwrap(),
                "stalled at {next}"
            );
        }
    }
    let a = sender.join().unwrap();
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(a.stats().tx_frames, N);
    assert_eq!(b.stats().rx_frames, N);
    assert_eq!(b.stats().rx_bytes, a.stats().tx_bytes);
    assert_eq!(
        b.stats().bad_desc + a.stats().bad_comp + b.stats().bad_index,
        0
    );
}

#[test]
fn a_full_ring_pushes_back_and_loses_nothing() {
    let (mut a, mut b) = pair(&one_queue(8));
    let mut sent = 0;
    while a.send(NOW, &frame(sent, true)) {
        sent += 1;
        assert!(sent <= 8, "more frames accepted than slots");
    }
    assert_eq!(sent, 8);
    assert_eq!(a.stats().tx_full, 1);
    let more: Vec<Vec<u8>> = (8..100).map(|s| frame(s, true)).collect();
    assert_eq!(
        a.send_until_full(more.iter().map(|f| &f[..])),
        0,
        "nothing taken when full"
    );
    assert_eq!(a.stats().tx_full, 2);
    // The receiver takes 5 (two cut short by small buffers); at most those 5 slots can
    // have come back (returned slots are published in batches).
    for s in 0..3 {
        assert!(is_frame(s, true, &recv_vec(&mut b).unwrap()));
    }
    assert_eq!(
        b.recv(NOW, &mut []),
        Some(0),
        "frame 3 cut to an empty buffer"
    );
    let mut one = [0u8; 1];
    assert_eq!(b.recv(NOW, &mut one), Some(1));
    assert_eq!(one[0], frame(4, true)[0]);
    assert_eq!(b.stats().rx_truncated, 2);
    let mut offered = 8;
    let k = a.send_until_full(more[offered - 8..].iter().map(|f| &f[..]));
    assert!(k <= 5, "{k} slots came back, only 5 were freed");
    offered += k;
    // Drain: everything sent so far arrives, in order; then the whole ring is free again.
    let mut seen = 5;
    while let Some(f) = recv_vec(&mut b) {
        assert!(is_frame(seen, true, &f), "frame {seen}");
        seen += 1;
    }
    assert_eq!(seen, offered as u64);
    let k = a.send_until_full(more[offered - 8..].iter().map(|f| &f[..]));
    assert_eq!(k, 8, "all slots are back once the receiver ran dry");
    offered += k;
    while let Some(f) = recv_vec(&mut b) {
        assert!(is_frame(seen, true, &f), "frame {seen}");
        seen += 1;
    }
    assert_eq!(seen, offered as u64);
    assert_eq!(b.stats().rx_frames, seen);
    assert_eq!(a.stats().tx_frames, seen);
}

#[test]
fn oversized_frames_are_refused_and_counted() {
    let (mut a, mut b) = pair(&ShmConfig::default());
    assert!(!a.send(NOW, &[0u8; 1515]));
    assert_eq!(a.stats().tx_too_big, 1);
    assert_eq!(a.stats().tx_frames, 0);
    assert!(a.send(NOW, &[7u8; 1514]));
    let mut small = [0u8; 100];
    assert_eq!(b.recv(NOW, &mut small), Some(100));
    assert_eq!(small, [7u8; 100]);
    assert_eq!(b.stats().rx_truncated, 1);
}

#[test]
fn super_segment_slots_carry_64k_frames() {
    let cfg = ShmConfig {
        slot_size: 65600,
        mtu: 65535,
        ring_size: 16,
        ..ShmConfig::default()
    };
    let (mut a, mut b) = pair(&cfg);
    let f: Vec<u8> = (0..65549u32).map(|i| (i % 251) as u8).collect();
    for _ in 0..40 {
        assert!(a.send(NOW, &f));
        let mut buf = vec![0u8; 65549];
        assert_eq!(b.recv(NOW, &mut buf), Some(65549));
        assert!(buf == f);
    }
}

/// `Device::recv_head`: a long frame's headers are copied, the rest stays in its slot for
/// `read_held` (only inside the frame), and the slot goes back to the sender at the next
/// receive call or before sleeping, not before; short frames, and every frame with
/// `set_rx_head(0)`, are copied whole.
#[test]
fn recv_head_leaves_a_long_frame_in_its_slot_until_the_next_receive() {
    let (mut a, mut b) = pair(&one_queue(2));
    let long: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8 ^ 0x5a).collect();
    let short = frame(7, false);
    assert!(a.send(NOW, &long));
    assert!(a.send(NOW, &short));
    assert_eq!(a.tx_space(), Some(0));
    let mut buf = [0u8; 1514];
    assert_eq!(b.rx_head_len(), RX_HEAD);
    assert_eq!(b.recv_head(NOW, &mut buf), Some((1500, RX_HEAD)));
    assert_eq!(buf[..RX_HEAD], long[..RX_HEAD]);
    assert_eq!(b.stats().rx_held, 1);
    let mut rest = vec![0u8; 1500 - RX_HEAD];
    assert!(b.read_held(RX_HEAD, &mut rest));
    assert_eq!(rest, long[RX_HEAD..]);
    let mut piece = [0u8; 100];
    assert!(b.read_held(1400, &mut piece));
    assert_eq!(piece[..], long[1400..]);
    assert!(!b.read_held(1401, &mut piece), "past the frame's end");
    assert!(!b.read_held(usize::MAX, &mut piece), "offset overflow");
    // The slot is still the receiver's: the sender has none back.
    assert_eq!(a.tx_space(), Some(0));
    // The next receive returns it (and the short frame's, copied whole).
    let mut small = [0u8; 1514];
    assert_eq!(
        b.recv_head(NOW, &mut small),
        Some((short.len(), short.len()))
    );
    assert_eq!(small[..short.len()], short[..]);
    assert!(!b.read_held(0, &mut piece), "no frame held");
    assert_eq!(a.tx_space(), Some(2));
    assert_eq!(b.recv_head(NOW, &mut small), None);
    // Arming the doorbell to sleep returns a held slot too.
    assert!(a.send(NOW, &long));
    assert_eq!(b.recv_head(NOW, &mut buf), Some((1500, RX_HEAD)));
    assert_eq!(a.tx_space(), Some(1));
    assert!(b.prepare_sleep());
    b.finish_sleep();
    assert!(a.send(NOW, &short));
    assert!(a.send(NOW, &short), "the held slot came back");
    for _ in 0..2 {
        assert_eq!(
            b.recv_head(NOW, &mut small),
            Some((short.len(), short.len()))
        );
    }
    // Turned off: copied whole.
    b.set_rx_head(0);
    assert_eq!(b.rx_head_len(), 0);
    assert!(a.send(NOW, &long));
    buf.fill(0);
    assert_eq!(b.recv_head(NOW, &mut buf), Some((1500, 1500)));
    assert_eq!(buf[..1500], long[..]);
    assert_eq!(b.stats().rx_held, 2);
}

/// `Device::send_with`: a slot is lent as a writer, the frame written in pieces arrives
/// byte for byte; a write past the frame's end is refused; a slot lent but not filled
/// (or filled in part) is not published and goes back to the free list; with the ring
/// full, nothing is lent and the refusal is counted as `send` counts it; a port that
/// does not lend says so.
#[test]
fn send_with_writes_a_frame_into_a_lent_slot_and_publishes_only_a_filled_one() {
    let (mut a, mut b) = pair(&one_queue(2));
    assert!(a.tx_lends());
    let long: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8 ^ 0x3c).collect();
    // In three pieces, as the stack writes headers, then payload chunk by chunk.
    assert!(a.send_with(NOW, long.len(), false, &mut |w| {
        assert_eq!(w.remaining(), 1500);
        w.put(&long[..66]) && w.put(&long[66..1000]) && w.put(&long[1000..])
    }));
    assert_eq!(a.stats().tx_lent, 1);
    let mut buf = [0u8; 1514];
    assert_eq!(b.recv(NOW, &mut buf), Some(1500));
    assert_eq!(buf[..1500], long[..]);

    // Not filled: refused by the writer past the end, or given up part way, or `fill`
    // says no: nothing published, the slot back.
    let free = a.tx_space();
    assert!(!a.send_with(NOW, 100, false, &mut |w| {
        assert!(!w.put(&long[..101]), "past the frame's end");
        w.put(&long[..99])
    }));
    assert!(!a.send_with(NOW, 100, false, &mut |w| {
        w.put(&long[..100]);
        false
    }));
    assert_eq!(a.stats().tx_unfilled, 2);
    assert_eq!(a.stats().tx_frames, 1);
    assert_eq!(b.recv(NOW, &mut buf), None, "nothing published");
    assert_eq!(a.tx_space(), free, "the slot is back");

    // The ring full (both slots free: none was kept): no slot lent, `fill` not called,
    // counted as a full ring.
    assert!(a.send(NOW, &long));
    assert!(a.send(NOW, &long));
    assert!(!a.send_with(NOW, 1500, false, &mut |_| panic!("no slot to lend")));
    assert_eq!(a.stats().tx_full, 1);
    for _ in 0..2 {
        assert_eq!(b.recv(NOW, &mut buf), Some(1500));
    }
    // Too big for a slot: refused and counted before any slot is lent.
    assert!(!a.send_with(NOW, 1515, false, &mut |_| panic!("too big")));
    assert_eq!(a.stats().tx_too_big, 1);

    // With `more`, publication waits for the run's last frame, as `send_more`.
    for i in 0..2u8 {
        assert!(a.send_with(NOW, 1200, i == 0, &mut |w| w.put(&[i; 1200])));
        if i == 0 {
            assert_eq!(b.recv(NOW, &mut buf), None, "not yet published");
        }
    }
    for i in 0..2u8 {
        assert_eq!(b.recv(NOW, &mut buf), Some(1200));
        assert!(buf[..1200].iter().all(|&x| x == i));
    }
    assert_eq!(a.stats().tx_lent, 3);

    a.set_tx_lend(false);
    assert!(!a.tx_lends());
}

#[test]
fn bad_configs_are_refused() {
    let bad = [
        ShmConfig {
            queue_pairs: 0,
            ..ShmConfig::default()
        },
        ShmConfig {
            queue_pairs: 65,
            ..ShmConfig::default()
        },
        ShmConfig {
            ring_size: 100,
            ..ShmConfig::default()
        },
        ShmConfig {
            ring_size: 1,
            ..ShmConfig::default()
        },
        ShmConfig {
            ring_size: 1 << 16,
            ..ShmConfig::default()
        },
        ShmConfig {
            slot_size: 2000,
            ..ShmConfig::default()
        },
        ShmConfig {
            slot_size: 1472,
            ..ShmConfig::default()
        }, // 1514-byte frames don't fit
        ShmConfig {
            mtu: 0,
            ..ShmConfig::default()
        },
        ShmConfig {
            slot_size: 2 << 20,
            mtu: 1500,
            ..ShmConfig::default()
        },
        ShmConfig {
            queue_pairs: 64,
            ring_size: 1 << 15,
            slot_size: 1 << 20,
            mtu: 1500,
            ..ShmConfig::default()
        },
    ];
    for cfg in bad {
        let err = ShmLink::create(&cfg).map(|_| ()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{cfg:?}");
    }
}

// ---- doorbells -----------------------------------------------------------------------

#[test]
fn a_sleeping_receiver_is_woken_by_the_doorbell() {
    let (mut a, mut b) = pair(&ShmConfig::default());
    let sleeper = std::thread::spawn(move || {
        let started = WallClock::now();
        let ready = b.wait(Some(Duration::from_secs(20))).unwrap();
        (ready, started.elapsed(), recv_vec(&mut b), b)
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(a.send(NOW, b"wake up"));
    let (ready, slept, got, b) = sleeper.join().unwrap();
    assert!(ready);
    assert!(
        slept >= Duration::from_millis(150),
        "woke before the frame: {slept:?}"
    );
    assert!(
        slept < Duration::from_secs(10),
        "the doorbell did not wake it: {slept:?}"
    );
    assert_eq!(got.as_deref(), Some(&b"wake up"[..]));
    assert_eq!(a.stats().doorbells, 1);
    assert!(b.stats().sleeps >= 1);
    // Awake receiver: no more doorbells, however many frames.
    for _ in 0..100 {
        assert!(a.send(NOW, b"x"));
    }
    assert_eq!(a.stats().doorbells, 1);
}

#[test]
fn wait_returns_at_once_when_frames_are_waiting_and_times_out_otherwise() {
    let (mut a, mut b) = pair(&ShmConfig::default());
    let t = WallClock::now();
    assert!(!b.wait(Some(Duration::from_millis(100))).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert!(a.send(NOW, b"ready"));
    let t = WallClock::now();
    assert!(b.wait(Some(Duration::from_secs(10))).unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!b.prepare_sleep(), "frames waiting: must not sleep");
    assert_eq!(b.stats().sleeps, 1, "only the empty wait slept");
    assert_eq!(
        a.stats().doorbells,
        0,
        "the receiver was awake when the frame came"
    );
    // An armed, empty port may sleep; a frame posted after arming rings the doorbell.
    recv_vec(&mut b).unwrap();
    assert!(b.prepare_sleep());
    assert!(a.send(NOW, b"after arming"));
    assert_eq!(a.stats().doorbells, 1);
    b.finish_sleep();
    assert_eq!(recv_vec(&mut b).as_deref(), Some(&b"after arming"[..]));
}

#[test]
fn wait_any_sleeps_on_every_queue_and_wakes_for_the_one_that_gets_a_frame() {
    let config = ShmConfig {
        queue_pairs: 3,
        ..ShmConfig::default()
    };
    let (mut a, b) = ShmLink::pair(&config).unwrap();
    let t = WallClock::now();
    let mut b = b;
    assert!(!wait_any(&mut b, Some(Duration::from_millis(100))).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(100));
    let sleeper = std::thread::spawn(move || {
        let started = WallClock::now();
        let ready = wait_any(&mut b, Some(Duration::from_secs(20))).unwrap();
        (ready, started.elapsed(), b)
    });
    std::thread::sleep(Duration::from_millis(200));
    // A frame on the last queue only: its doorbell must wake the sleeper.
    assert!(a[2].send(NOW, b"queue 2"));
    let (ready, slept, mut b) = sleeper.join().unwrap();
    assert!(ready);
    assert!(slept >= Duration::from_millis(150), "woke early: {slept:?}");
    assert!(slept < Duration::from_secs(10), "not woken: {slept:?}");
    assert_eq!(a[2].stats().doorbells, 1);
    assert_eq!(recv_vec(&mut b[2]).as_deref(), Some(&b"queue 2"[..]));
    // Awake again (every doorbell disarmed): frames on any queue ring nothing.
    for q in &mut a {
        assert!(q.send(NOW, b"x"));
    }
    assert_eq!(a.iter().map(|q| q.stats().doorbells).sum::<u64>(), 1);
    // A frame already waiting: wait_any returns at once, without sleeping.
    let t = WallClock::now();
    assert!(wait_any(&mut b, Some(Duration::from_secs(10))).unwrap());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        wait_any(&mut [], Some(Duration::from_secs(10)))
            .map(|r| !r)
            .unwrap()
    );
}

/// Two threads in lock-step, each sleeping in `wait` (on its futex) until the other's
/// frame comes: every one of thousands of wake-ups arrives, so no race between arming the
/// flag and `FUTEX_WAIT` on one side and publishing and ringing on the other loses one (a
/// lost one leaves both asleep: the 10 s bound makes `wait` return false and the test
/// fail, never hang). The doorbells rung are at most the peer's armings of its flag (one
/// ring per arming: a sleep, or a sleep given up when the frame came just after the flag
/// went up, which the ringer cannot tell apart), and a side that rang slept at least once
/// or gave one up.
#[test]
fn lock_step_over_futex_doorbells_never_loses_a_wake_up() {
    const ROUNDS: u32 = 5_000;
    const BOUND: Duration = Duration::from_secs(10);
    let (mut a, mut b) = pair(&ShmConfig::default());
    let echo = std::thread::spawn(move || {
        for i in 0..ROUNDS {
            let got = loop {
                if let Some(f) = recv_vec(&mut b) {
                    break f;
                }
                assert!(b.wait(Some(BOUND)).unwrap(), "echo: wake-up {i} lost");
            };
            assert!(b.send(NOW, &got));
        }
        b
    });
    for i in 0..ROUNDS {
        assert!(a.send(NOW, &i.to_le_bytes()));
        let got = loop {
            if let Some(f) = recv_vec(&mut a) {
                break f;
            }
            assert!(a.wait(Some(BOUND)).unwrap(), "client: wake-up {i} lost");
        };
        assert_eq!(got, i.to_le_bytes());
    }
    let b = echo.join().unwrap();
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.sleeps + sb.sleeps > 0,
        "nobody slept: nothing was tested"
    );
    assert!(
        sb.sleeps <= sb.arms && sa.sleeps <= sa.arms,
        "{sa:?} {sb:?}"
    );
    assert!(
        sa.doorbells <= sb.arms && sb.doorbells <= sa.arms,
        "one ring per arming: {sa:?} {sb:?}"
    );
}

#[test]
fn a_sender_waiting_for_slots_is_woken_when_they_return() {
    let (mut a, mut b) = pair(&one_queue(4));
    while a.send(NOW, b"fill") {}
    let waiter = std::thread::spawn(move || {
        let t = WallClock::now();
        let ready = a.wait(Some(Duration::from_secs(20))).unwrap();
        let slept = t.elapsed();
        let sent = a.send(NOW, b"more");
        (ready, slept, sent, a)
    });
    std::thread::sleep(Duration::from_millis(200));
    // Take the 4 queued frames (not more: the woken sender may already be sending).
    let t = WallClock::now();
    let mut taken = 0;
    while taken < 4 {
        assert!(t.elapsed() < Duration::from_secs(10));
        if let Some(f) = recv_vec(&mut b) {
            assert_eq!(f, b"fill");
            taken += 1;
        }
    }
    let (ready, slept, sent, a) = waiter.join().unwrap();
    assert!(ready && sent);
    assert!(
        slept >= Duration::from_millis(150) && slept < Duration::from_secs(10),
        "{slept:?}"
    );
    assert_eq!(b.stats().doorbells, 1);
    assert!(a.stats().sleeps >= 1);
    assert_eq!(recv_vec(&mut b).as_deref(), Some(&b"more"[..]));
}

// ---- hand-over -----------------------------------------------------------------------

#[test]
fn the_peer_is_handed_over_a_unix_socket() {
    let (mut a, peer) = ShmLink::create(&ShmConfig {
        queue_pairs: 2,
        ..ShmConfig::default()
    })
    .expect("link");
    let (s1, s2) = UnixStream::pair().unwrap();
    peer.send(&s1).unwrap();
    drop(peer);
    let mut b = ShmPeer::recv(&s2).unwrap().attach().unwrap();
    assert!(a[1].send(NOW, b"over the socket"));
    assert_eq!(
        recv_vec(&mut b[1]).as_deref(),
        Some(&b"over the socket"[..])
    );
    // Anything else on the socket is refused.
    use std::io::Write;
    (&s1).write_all(&[0u8; 24]).unwrap();
    let err = ShmPeer::recv(&s2).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
}

#[test]
fn the_peer_is_offered_by_name() {
    let (mut a, peer) = ShmLink::create(&ShmConfig::default()).unwrap();
    let offer = peer.offer().unwrap();
    let name = offer.name().to_owned();
    let taker = std::thread::spawn(move || ShmPeer::connect(&name, Duration::from_secs(10)));
    offer.hand_over(Duration::from_secs(10)).unwrap();
    let mut b = taker.join().unwrap().unwrap().attach().unwrap();
    assert!(b[0].send(NOW, b"by name"));
    assert_eq!(recv_vec(&mut a[0]).as_deref(), Some(&b"by name"[..]));
    let err = ShmPeer::connect("ustack-shm-nobody", Duration::from_millis(50)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
}

// ---- a misbehaving peer --------------------------------------------------------------

/// A link whose region the test can also write through the memfd, as a buggy peer would.
fn scribbled(config: &ShmConfig) -> (ShmPort, ShmPort, File, ShmLayout) {
    let (mut a, peer) = ShmLink::create(config).unwrap();
    let file = File::from(peer.memfd().try_clone_to_owned().unwrap());
    let mut b = peer.attach().unwrap();
    let layout = a[0].layout();
    (a.remove(0), b.remove(0), file, layout)
}

fn poke32(file: &File, off: usize, v: u32) {
    file.write_all_at(&v.to_le_bytes(), off as u64).unwrap();
}
fn poke64(file: &File, off: usize, v: u64) {
    file.write_all_at(&v.to_le_bytes(), off as u64).unwrap();
}
fn peek32(file: &File, off: usize) -> u32 {
    let mut b = [0u8; 4];
    file.read_exact_at(&mut b, off as u64).unwrap();
    u32::from_le_bytes(b)
}

fn peek(file: &File, off: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    file.read_exact_at(&mut b, off as u64).unwrap();
    b
}

/// A frame of at most `INLINE_MAX` bytes travels in its descriptor's lines (after the
/// line of the descriptor's word), its slot untouched; a longer one in its slot.
#[test]
fn small_frames_travel_in_the_descriptor_and_long_ones_in_slots() {
    let (mut a, mut b, file, l) = scribbled(&one_queue(16));
    let ring = l.desc_ring_offset(0, ShmSide::A);
    let slots = l.frames_offset(0, ShmSide::A);
    let small: Vec<u8> = (0..INLINE_MAX).map(|i| (i * 7 + 1) as u8).collect();
    let long: Vec<u8> = (0..=INLINE_MAX).map(|i| (i * 5 + 3) as u8).collect();
    assert!(a.send(NOW, &small));
    assert!(a.send(NOW, &long));
    assert_eq!(peek(&file, ring + INLINE_OFF, INLINE_MAX), small);
    assert_ne!(peek(&file, slots, 64), small[..64], "slot 0 not written");
    assert_eq!(peek(&file, slots + l.slot_size(), long.len()), long);
    assert_eq!(recv_vec(&mut b), Some(small));
    assert_eq!(recv_vec(&mut b), Some(long));
}

#[test]
fn bad_descriptors_are_dropped_and_counted() {
    let (mut a, mut b, file, l) = scribbled(&one_queue(16));
    for s in 0..4 {
        assert!(a.send(NOW, &frame(s, true)));
    }
    let ring = l.desc_ring_offset(0, ShmSide::A);
    // Each with the sequence due at its position, so taken as a frame, and refused.
    poke64(&file, ring + DESC_LEN, desc_entry(1, 16, 64)); // slot 16 of 16
    poke64(&file, ring + 2 * DESC_LEN, desc_entry(2, 3, 1515)); // longer than the largest frame
    poke64(&file, ring + 3 * DESC_LEN, desc_entry(3, 0xffff, 0xff_ffff));
    assert!(is_frame(0, true, &recv_vec(&mut b).unwrap()));
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(b.stats().bad_desc, 3);
    assert_eq!(b.stats().rx_frames, 1);
    assert_eq!(b.fault(), None, "bad descriptors do not stop the ring");
    assert!(a.send(NOW, &frame(9, true)));
    assert!(is_frame(9, true, &recv_vec(&mut b).unwrap()));
}

/// The receiver finds frames by the descriptors' sequences: the sender's `desc_head` is
/// not read (garbage there changes nothing), and a descriptor whose sequence is neither due
/// nor a lap old stops receiving.
#[test]
fn a_garbled_descriptor_sequence_stops_receiving_and_nothing_else() {
    let (mut a, mut b, file, l) = scribbled(&one_queue(16));
    assert!(a.send(NOW, b"before"));
    poke32(&file, l.desc_head_offset(0, ShmSide::A), 0x8000_0000);
    assert_eq!(recv_vec(&mut b).as_deref(), Some(&b"before"[..]));
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(b.fault(), None, "desc_head is not read");
    // A lap old: not yet a frame, not a fault.
    let ring = l.desc_ring_offset(0, ShmSide::A);
    poke64(
        &file,
        ring + DESC_LEN,
        desc_entry(1u32.wrapping_sub(16), 2, 64),
    );
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(b.poll_at(), None);
    assert_eq!(b.fault(), None, "a lap-old sequence is no fault");
    // Five laps ahead: garbage.
    poke64(&file, ring + DESC_LEN, desc_entry(1 + 5 * 16, 2, 64));
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(
        b.fault(),
        Some(ShmFault::DescSeq {
            seq: desc_seq(81),
            tail: 1
        })
    );
    assert_eq!(b.stats().bad_index, 1);
    // Stopped for good, counted once, and the port can still sleep with a timeout.
    poke64(&file, ring + DESC_LEN, desc_entry(1, 2, 64));
    assert_eq!(recv_vec(&mut b), None);
    assert_eq!(b.poll_at(), None);
    assert!(!b.wait(Some(Duration::from_millis(10))).unwrap());
    assert_eq!(b.stats().bad_index, 1);
    // The other direction is unaffected.
    assert!(b.send(NOW, b"still here"));
    assert_eq!(recv_vec(&mut a).as_deref(), Some(&b"still here"[..]));
}

#[test]
fn bogus_returned_slots_are_ignored_and_counted() {
    let (mut a, mut b, file, l) = scribbled(&one_queue(8));
    for s in 0..2 {
        assert!(a.send(NOW, &frame(s, false)));
    }
    while recv_vec(&mut b).is_some() {} // returns slots 0 and 1
    let comp = l.comp_ring_offset(0, ShmSide::A);
    let head = l.comp_head_offset(0, ShmSide::A);
    assert_eq!(peek32(&file, head), 2);
    poke32(&file, comp + 8, 0); // returned twice
    poke32(&file, comp + 12, 1); // returned twice
    poke32(&file, comp + 16, 1_000_000); // no such slot
    poke32(&file, head, 5);
    // Exactly 8 frames fit: the bogus returns did not invent slots.
    let mut sent = 0;
    while a.send(NOW, &frame(sent, false)) {
        sent += 1;
    }
    assert_eq!(sent, 8);
    assert_eq!(a.stats().bad_comp, 3);
    assert_eq!(a.fault(), None);
    for s in 0..8 {
        assert!(is_frame(s, false, &recv_vec(&mut b).unwrap()));
    }
}

#[test]
fn a_runaway_comp_head_stops_sending() {
    let (mut a, b, file, l) = scribbled(&one_queue(8));
    poke32(&file, l.comp_head_offset(0, ShmSide::A), 9);
    // The free list is full at first; the head is looked at on the periodic reclaim.
    let mut sent = 0;
    while a.send(NOW, b"x") {
        sent += 1;
    }
    assert!(sent <= 8);
    assert_eq!(a.fault(), Some(ShmFault::CompHead { head: 9, tail: 0 }));
    assert!(!a.send(NOW, b"x"));
    assert!(a.stats().tx_stopped >= 1);
    assert_eq!(a.stats().bad_index, 1);
    drop(b);
}

#[test]
fn a_garbled_header_is_refused_at_attach() {
    type Garble = fn(&File, &ShmLayout);
    let cases: [(&str, Garble); 6] = [
        ("magic", |f, _| poke64(f, 0, 0)),
        ("version", |f, _| poke32(f, 8, 1)),
        ("queue pairs", |f, _| poke32(f, 12, 2)),
        ("ring size", |f, _| poke32(f, 16, 100)),
        ("mtu too big for the slots", |f, _| poke32(f, 28, 2035)),
        ("region length", |f, l| poke64(f, 32, l.len() as u64 + 4096)),
    ];
    for (what, garble) in cases {
        let (a, peer) = ShmLink::create(&ShmConfig::default()).unwrap();
        let file = File::from(peer.memfd().try_clone_to_owned().unwrap());
        garble(&file, &a[0].layout());
        let err = peer.attach().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{what}");
    }
}

#[test]
fn random_scribbling_never_panics_and_is_noticed() {
    let cfg = ShmConfig {
        queue_pairs: 2,
        ring_size: 16,
        ..ShmConfig::default()
    };
    for seed in 0..8u64 {
        let (mut a, peer) = ShmLink::create(&cfg).unwrap();
        let file = File::from(peer.memfd().try_clone_to_owned().unwrap());
        let mut b = peer.attach().unwrap();
        let l = a[0].layout();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut buf = [0u8; 1514];
        let mut noticed = 0;
        for round in 0..400u64 {
            // Garbage: mostly control words and ring entries, some frame bytes.
            for _ in 0..4 {
                let off = match rng.next_u32() % 4 {
                    0 | 1 => {
                        4096 + (rng.next_u32() as usize % (l.frames_offset(0, ShmSide::A) - 4096))
                    }
                    2 => l.comp_head_offset((rng.next_u32() % 2) as usize, ShmSide::A),
                    _ => rng.next_u32() as usize % l.len(),
                } & !3;
                let v = match rng.next_u32() % 3 {
                    0 => rng.next_u32(),
                    1 => rng.next_u32() % 40,
                    _ => peek32(&file, off).wrapping_add(rng.next_u32() % 5),
                };
                poke32(&file, off, v);
            }
            for q in 0..2 {
                for port in [&mut a[q], &mut b[q]] {
                    for k in 0..3 {
                        let f = frame(round * 3 + k, true);
                        port.send(NOW, &f);
                    }
                    let mut batch = FrameBatch::new(8, 1514);
                    port.recv_batch(&mut batch);
                    assert!(batch.iter().all(|f| f.len() <= 1514));
                    while let Some(n) = port.recv(NOW, &mut buf) {
                        assert!(n <= 1514);
                    }
                    let _ = port.poll_at();
                    if port.prepare_sleep() {
                        port.finish_sleep();
                    }
                }
            }
        }
        for port in a.iter().chain(b.iter()) {
            let s = port.stats();
            noticed += s.bad_desc + s.bad_comp + s.bad_index;
        }
        assert!(noticed > 0, "seed {seed}: garbage went unnoticed");
    }
}

// ---- two processes -------------------------------------------------------------------

/// Kills the child if the test ends early (a failed assertion unwinds through here).
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn spawn(offer_name: &str, queues: usize) -> ChildGuard {
        let exe = std::env::current_exe().unwrap();
        let child = Command::new(exe)
            .args([
                "child_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, offer_name)
            .env(CHILD_QUEUES_ENV, queues.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the test binary as the peer");
        ChildGuard(Some(child))
    }

    /// Waits up to `timeout` for a clean exit.
    fn finish(mut self, timeout: Duration) {
        let mut child = self.0.take().unwrap();
        let deadline = WallClock::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "child failed: {status}");
                return;
            }
            if WallClock::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child did not exit in time");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The child: side B of every queue pair, echoing each frame back on its queue until it
/// receives `QUIT` on every queue; then it reports how often it slept. Sleeps on all its
/// doorbells at once (poll) when idle. Gives up after 60 seconds.
#[test]
#[ignore = "the peer process of the two-process tests; they spawn it"]
fn child_process() {
    let Ok(name) = std::env::var(CHILD_ENV) else {
        return;
    };
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)).unwrap();
    let queues: usize = std::env::var(CHILD_QUEUES_ENV).unwrap().parse().unwrap();
    let deadline = WallClock::now() + Duration::from_secs(60);
    let mut ports = ShmPeer::connect(&name, Duration::from_secs(10))
        .unwrap()
        .attach()
        .unwrap();
    assert_eq!(ports.len(), queues);
    let mut done = vec![false; queues];
    let mut slept = 0u64;
    let mut batch = FrameBatch::new(32, 1514);
    let mut pending: Vec<Vec<Vec<u8>>> = vec![Vec::new(); queues];
    while !(done.iter().all(|&d| d) && pending.iter().all(|p| p.is_empty())) {
        assert!(WallClock::now() < deadline, "child: deadline passed");
        let mut busy = false;
        for (q, port) in ports.iter_mut().enumerate() {
            if pending[q].is_empty() {
                batch.clear();
                if port.recv_batch(&mut batch) > 0 {
                    busy = true;
                    for f in batch.iter() {
                        done[q] |= f == QUIT;
                        pending[q].push(f.to_vec());
                    }
                }
            }
            if !pending[q].is_empty() {
                let n = port.send_until_full(pending[q].iter().map(|f| &f[..]));
                pending[q].drain(..n);
                busy |= n > 0;
            }
        }
        if !busy {
            // Sleep on every doorbell at once; the parent rings the queue it posts on.
            let armed: Vec<bool> = ports.iter_mut().map(|p| p.prepare_sleep()).collect();
            if armed.iter().all(|&a| a) {
                let mut fds: Vec<_> = ports
                    .iter()
                    .map(|p| {
                        rustix::event::PollFd::from_borrowed_fd(
                            p.fd(),
                            rustix::event::PollFlags::IN,
                        )
                    })
                    .collect();
                let ts = rustix::event::Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
                slept += 1;
            }
            for p in &mut ports {
                p.finish_sleep();
            }
        }
    }
    let received: u64 = ports.iter().map(|p| p.stats().rx_frames).sum();
    let report = format!("rx {received} slept {slept}");
    let t = WallClock::now();
    while !ports[0].send(NOW, report.as_bytes()) {
        assert!(t.elapsed() < Duration::from_secs(10));
        ports[0].wait(Some(Duration::from_millis(10))).unwrap();
    }
}

/// Sends `n` frames per queue through the child and checks every echo, in order.
fn echo_through_child(queues: usize, n: u64, pause_every: u64) {
    let cfg = ShmConfig {
        queue_pairs: queues,
        ring_size: 256,
        ..ShmConfig::default()
    };
    let (mut ports, peer) = ShmLink::create(&cfg).unwrap();
    let offer = peer.offer().unwrap();
    let child = ChildGuard::spawn(offer.name(), queues);
    offer.hand_over(Duration::from_secs(30)).unwrap();
    let deadline = WallClock::now() + Duration::from_secs(120);
    let mut next_send = vec![0u64; queues];
    let mut next_echo = vec![0u64; queues];
    let mut buf = [0u8; 1514];
    while next_echo.iter().any(|&e| e < n) {
        assert!(WallClock::now() < deadline, "echo stalled at {next_echo:?}");
        for (q, port) in ports.iter_mut().enumerate() {
            // Keep at most 200 frames in flight per queue (the child's ring holds 256).
            while next_send[q] < n && next_send[q] - next_echo[q] < 200 {
                let len = make_frame(next_send[q] + q as u64, true, &mut buf);
                if !port.send(NOW, &buf[..len]) {
                    break;
                }
                next_send[q] += 1;
                if pause_every > 0 && next_send[q].is_multiple_of(pause_every) {
                    // Let the child run dry and go to sleep, so the doorbell must wake it.
                    std::thread::sleep(Duration::from_millis(30));
                }
            }
            while let Some(len) = port.recv(NOW, &mut buf) {
                let seq = next_echo[q];
                assert!(
                    is_frame(seq + q as u64, true, &buf[..len]),
                    "q{q} echo {seq} wrong"
                );
                next_echo[q] += 1;
            }
        }
        if next_send.iter().zip(&next_echo).all(|(s, e)| s == e) {
            continue;
        }
        ports[0].wait(Some(Duration::from_millis(1))).unwrap();
    }
    for port in &mut ports {
        assert!(port.send(NOW, QUIT));
    }
    // Each queue echoes QUIT; queue 0 then carries the child's report.
    let t = WallClock::now();
    let mut report = None;
    let mut quits = 0;
    while report.is_none() || quits < queues {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no report from the child"
        );
        for port in &mut ports {
            while let Some(f) = recv_vec(port) {
                if f == QUIT {
                    quits += 1;
                } else {
                    report = Some(String::from_utf8(f).unwrap());
                }
            }
        }
        ports[0].wait(Some(Duration::from_millis(5))).unwrap();
    }
    let report = report.unwrap();
    let (rx, slept) = report
        .strip_prefix("rx ")
        .and_then(|r| r.split_once(" slept "))
        .map(|(rx, slept)| (rx.parse::<u64>().unwrap(), slept.parse::<u64>().unwrap()))
        .expect("child report");
    assert_eq!(rx, (n + 1) * queues as u64, "frames the child received");
    child.finish(Duration::from_secs(30));
    if pause_every > 0 {
        let rung: u64 = ports.iter().map(|p| p.stats().doorbells).sum();
        assert!(slept >= 1, "the child never went to sleep");
        assert!(rung >= 1, "the sleeping child was never rung");
    }
    for port in &ports {
        assert_eq!(port.fault(), None);
        assert_eq!(port.stats().bad_comp, 0);
    }
}

#[test]
fn frames_round_trip_between_two_processes() {
    echo_through_child(1, 100_000, 20_000);
}

#[test]
fn queue_pairs_work_between_two_processes() {
    echo_through_child(3, 20_000, 0);
}

/// A slot held by the sender ([`Device::tx_hold`]): written ahead of sending (the payload
/// first, the headers later in front of it), sent from where it is, sent again from the
/// same bytes once the peer gave it back (a frame the peer dropped), and free again only
/// when both the holder released it and the peer gave it back, in either order; ordinary
/// sends never take it meanwhile.
#[test]
fn held_slots_are_sent_in_place_and_freed_only_when_released_and_given_back() {
    let (mut a, mut b) = pair(&one_queue(2));
    let slot_size = a.layout().slot_size();
    let payload: Vec<u8> = (0..1400u32).map(|i| (i % 251) as u8).collect();
    let head = [0xabu8; 66];
    let write = a.tx_held_writer().expect("a shm port holds slots");
    let read = a.tx_held_reader().expect("and reads them back");
    let id = a.tx_hold().expect("a free slot");
    assert_eq!(a.tx_space(), Some(1));
    assert!(write(id, 66, &payload) && write(id, 0, &head));
    assert!(!write(id, slot_size - 10, &payload), "past the slot's end");
    assert!(!write(2, 0, &head), "not one of our slots");
    let mut back = vec![0u8; payload.len()];
    assert!(read(id, 66, &mut back));
    assert_eq!(back, payload);
    assert!(!read(id, slot_size - 10, &mut back), "past the slot's end");

    let frame = [&head[..], &payload[..]].concat();
    let mut buf = [0u8; 1514];
    assert!(a.tx_hold_send(NOW, id, frame.len(), false));
    assert!(
        !a.tx_hold_send(NOW, id, frame.len(), false),
        "still with the peer"
    );
    assert_eq!(b.recv(NOW, &mut buf), Some(frame.len()));
    assert_eq!(buf[..frame.len()], frame[..]);
    assert_eq!(b.recv(NOW, &mut buf), None, "and the slot given back");
    // Given back, still held: sent again from the same bytes, never on the free list.
    assert!(a.tx_hold_send(NOW, id, frame.len(), false), "a resend");
    assert_eq!(a.tx_space(), Some(1), "the held slot is not free");
    assert_eq!(b.recv(NOW, &mut buf), Some(frame.len()));
    assert_eq!(buf[..frame.len()], frame[..]);
    assert_eq!(b.recv(NOW, &mut buf), None);
    // Ordinary sends use the other slot only, and leave the held bytes alone.
    for _ in 0..3 {
        assert!(a.send(NOW, &[0x11; 1500]));
        assert_eq!(b.recv(NOW, &mut buf), Some(1500));
        assert_eq!(b.recv(NOW, &mut buf), None);
    }
    assert!(read(id, 0, &mut buf[..frame.len()]));
    assert_eq!(
        buf[..frame.len()],
        frame[..],
        "the held slot kept its bytes"
    );

    // Released while the peer has its frame: free only once the peer gives it back.
    assert!(a.tx_hold_send(NOW, id, frame.len(), false));
    a.tx_hold_release(id);
    assert!(a.send(NOW, &[0x22; 100]));
    assert_eq!(
        a.tx_space(),
        Some(0),
        "the released slot is still with the peer"
    );
    assert!(!a.send(NOW, &[0x33; 100]));
    assert_eq!(b.recv(NOW, &mut buf), Some(frame.len()));
    assert_eq!(b.recv(NOW, &mut buf), Some(100));
    assert_eq!(b.recv(NOW, &mut buf), None);
    assert_eq!(a.tx_space(), Some(2), "both free");

    // Released after the peer gave it back: free at once.
    // (66 bytes: short enough to travel in the descriptor's lines, layout v3, where the
    // receiver reads it: the held slot's bytes must be what arrives.)
    let id = a.tx_hold().expect("a free slot");
    let short: Vec<u8> = (0..66u8).map(|i| i ^ 0x5a).collect();
    assert!(write(id, 0, &short));
    assert!(a.tx_hold_send(NOW, id, 66, false));
    assert_eq!(b.recv(NOW, &mut buf), Some(66));
    assert_eq!(buf[..66], short[..], "a short frame from a held slot");
    assert_eq!(b.recv(NOW, &mut buf), None);
    assert!(a.tx_hold_send(NOW, id, 66, false), "reclaimed, still held");
    assert_eq!(b.recv(NOW, &mut buf), Some(66));
    assert_eq!(buf[..66], short[..], "and again when sent again");
    assert_eq!(b.recv(NOW, &mut buf), None);
    assert!(a.tx_hold_send(NOW, id, 66, true));
    assert!(
        !a.tx_hold_send(NOW, id, 0, false),
        "its frame is posted (and published by this call)"
    );
    assert_eq!(b.recv(NOW, &mut buf), Some(66));
    assert_eq!(b.recv(NOW, &mut buf), None);
    a.tx_hold_release(id);
    assert_eq!(a.tx_space(), Some(2));

    // Not held, too long: refused and counted; every slot held: none for a send.
    assert!(!a.tx_hold_send(NOW, id, 66, false));
    a.tx_hold_release(id);
    let ids = [a.tx_hold().unwrap(), a.tx_hold().unwrap()];
    assert!(
        !a.tx_hold_send(NOW, ids[0], slot_size + 1, false),
        "longer than a frame"
    );
    assert_eq!(a.tx_hold(), None);
    assert!(!a.send(NOW, &[0x44; 100]));
    for id in ids {
        a.tx_hold_release(id);
    }
    assert_eq!(a.tx_space(), Some(2));
    let s = a.stats();
    assert_eq!((s.tx_held, s.tx_held_released), (4, 4), "{s:?}");
    assert_eq!((s.tx_held_sent, s.tx_held_refused), (6, 5), "{s:?}");
    assert_eq!(a.tx_held_now(), 0);
}

/// A sender whose free slots ran low while it holds others (the stack's held reserve,
/// topped up only above a spare few) asks, when it goes to sleep, to be rung when slots
/// come back: without it, a writer waiting for a held slot slept until something else
/// woke it (the stream over shm fell from ~65 to ~5 Gbit/s in every other run).
#[test]
fn a_sender_low_on_free_slots_is_rung_when_the_peer_returns_them() {
    let (mut a, mut b) = pair(&one_queue(16));
    let held: Vec<u32> = (0..10).map(|_| a.tx_hold().expect("a free slot")).collect();
    assert!(a.send(NOW, &[0x44; 1500]) && a.send(NOW, &[0x55; 1500]));
    assert_eq!(a.tx_space(), Some(4), "16 slots: 10 held, 2 with the peer");
    assert!(a.prepare_sleep(), "nothing to receive: it may sleep");
    let rung = b.stats().doorbells;
    while recv_vec(&mut b).is_some() {}
    assert_eq!(
        b.stats().doorbells,
        rung + 1,
        "the peer rang as it gave the two slots back"
    );
    a.finish_sleep();
    assert_eq!(a.tx_space(), Some(6));
    for id in held {
        a.tx_hold_release(id);
    }
    assert_eq!(a.tx_space(), Some(16));
}
