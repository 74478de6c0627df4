//! `Stack::receive_direct`: a segment that only appends to an established connection's
//! receive queue is received from its headers alone, and its payload is asked of the
//! device (`read`) straight into the receive queue, over IPv4 and IPv6 alike. Frames are
//! handed over as a shm link holds them: only the headers in hand, the rest of the buffer
//! garbage, so a payload read in place instead of through `read` shows in the stream.

use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ustack_obs::{Counter, DropReason};
use ustack_stack::{DirectFrame, Instant, Stack};
use ustack_testkit::{
    A_IP, A_IP6, A_MAC, B_IP, B_IP6, B_MAC, offload_stack, pattern, stream_by_hand,
};

/// A frame's Ethernet, IP and TCP (with timestamps) headers.
fn headers(v6: bool) -> usize {
    14 + if v6 { 40 } else { 20 } + 32
}

/// What B took: the stream it read, the frames it took direct, and its direct misses.
struct Taken {
    got: Vec<u8>,
    data: Vec<u8>,
    direct: u64,
    data_frames: u64,
    misses: u64,
}

/// B's address over IPv6 (`v6`) or IPv4.
fn dest(v6: bool) -> SocketAddr {
    if v6 {
        SocketAddrV6::new(B_IP6, 80, 0, 0).into()
    } else {
        SocketAddrV4::new(B_IP, 80).into()
    }
}

/// Carries A's frames to B: the handshake's with `receive`, each data frame to
/// `direct(b, held, frame)` with `held` the frame whose bytes past its `valid` bytes of
/// headers are garbage, and with `receive` if `direct` refuses it; with `swap_every`
/// `n`, every `n`th data frame goes after the one that follows it. The data frames.
fn carry_direct(
    (a, b): (&mut Stack, &mut Stack),
    now: Instant,
    valid: usize,
    swap_every: Option<u64>,
    mut direct: impl FnMut(&mut Stack, &[u8], &[u8]) -> bool,
) -> u64 {
    let mut deliver = |b: &mut Stack, f: &[u8]| {
        let mut held = f.to_vec();
        held[valid..].fill(0xee);
        if !direct(b, &held, f) {
            b.receive(now, f);
        }
    };
    let (mut data_frames, mut late) = (0, None);
    while let Some(f) = a.poll_transmit(now) {
        // The handshake's segments (the SYN's options make it longer than `valid`).
        if f.len() <= valid || f[valid - 32 + 13] & 0x02 != 0 {
            b.receive(now, &f);
            continue;
        }
        data_frames += 1;
        if late.is_none() && swap_every.is_some_and(|n| data_frames % n == 0) {
            late = Some(f);
            continue;
        }
        deliver(b, &f);
        if let Some(l) = late.take() {
            deliver(b, &l);
        }
    }
    if let Some(l) = late {
        deliver(b, &l);
    }
    data_frames
}

/// A streams 300 KB to B over IPv4 or IPv6; B receives each of A's frames longer than
/// its headers with `receive_direct`, the bytes past the headers replaced by garbage in
/// the frame it is given and supplied by `read` from the real frame, and any frame
/// `receive_direct` refuses whole with `receive`.
fn stream(v6: bool) -> Taken {
    let (mut a, mut b) = (
        offload_stack(A_MAC, A_IP, A_IP6, 1),
        offload_stack(B_MAC, B_IP, B_IP6, 2),
    );
    let data = pattern(300_000, 11);
    let valid = headers(v6);
    let (mut direct, mut data_frames) = (0, 0);
    let got = stream_by_hand(&mut a, &mut b, &data, dest(v6), |a, b, now| {
        data_frames += carry_direct((a, b), now, valid, None, |b, held, f| {
            let took = b.receive_direct(now, held, valid, false, |from, dst: &mut [u8]| {
                assert!(from >= valid, "asked for header bytes at {from}");
                dst.copy_from_slice(&f[from..from + dst.len()]);
            });
            direct += u64::from(took);
            took
        });
    });
    assert_eq!(direct, b.rx_direct_frames());
    Taken {
        got,
        data,
        direct,
        data_frames,
        misses: b.mib().drops(DropReason::TcpDirectMiss),
    }
}

fn direct_receive_takes_the_payload_through_read(v6: bool) {
    let t = stream(v6);
    assert!(
        t.got == t.data,
        "v6 {v6}: B read {} bytes, not the stream",
        t.got.len()
    );
    // Every data segment appends in order to an empty out-of-order queue: all go direct
    // but the first, which carries the ACK that completes the handshake (A sends no pure
    // ACK before its data): B has no established connection for it yet.
    assert!(
        t.direct + 1 >= t.data_frames && t.direct > 100,
        "v6 {v6}: {} of {} data frames direct",
        t.direct,
        t.data_frames
    );
    assert_eq!(t.misses, 0);
}

#[test]
fn ipv4_segments_are_received_with_the_payload_read_from_the_device() {
    direct_receive_takes_the_payload_through_read(false);
}

#[test]
fn ipv6_segments_are_received_with_the_payload_read_from_the_device() {
    direct_receive_takes_the_payload_through_read(true);
}

/// Frames a fake device keeps for B's receive queues, by id: what a shm port's kept slots
/// are. A released frame is gone: reading it fails.
type Kept = Arc<Mutex<HashMap<u32, Vec<u8>>>>;

/// The frame being received, on a device that keeps frames (`DirectFrame::keep`).
struct Keeping<'a> {
    frame: &'a [u8],
    kept: &'a Kept,
    next: &'a mut u32,
}

impl DirectFrame for Keeping<'_> {
    fn read(&mut self, from: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.frame[from..from + dst.len()]);
    }
    fn keep(&mut self) -> Option<u32> {
        *self.next += 1;
        let id = *self.next;
        self.kept.lock().unwrap().insert(id, self.frame.to_vec());
        Some(id)
    }
    fn release(&mut self, id: u32) {
        assert!(self.kept.lock().unwrap().remove(&id).is_some(), "{id}");
    }
}

/// Gives back the frames B's receive queues let go of; how many.
fn release(b: &mut Stack, kept: &Kept) -> usize {
    let mut n = 0;
    b.take_released_frames(|id| {
        assert!(
            kept.lock().unwrap().remove(&id).is_some(),
            "{id} released twice"
        );
        n += 1;
    });
    n
}

/// With a device that keeps frames, B's receive queue holds each in-order segment's frame
/// instead of a copy, and the application's read copies from it: over IPv4 and IPv6 the
/// stream arrives whole, nearly every data segment is held, and every frame held
/// is given back once read (a frame read after it is given back reads as missing); and
/// with every seventh frame swapped with the next, out-of-order data queued behind held
/// segments and merged into the queue's copied part, the stream still whole.
#[test]
fn segments_held_in_kept_frames_are_read_from_them_and_given_back() {
    for (v6, swap) in [
        (false, None),
        (true, None),
        (false, Some(7)),
        (true, Some(7)),
    ] {
        let (mut a, mut b) = (
            offload_stack(A_MAC, A_IP, A_IP6, 1),
            offload_stack(B_MAC, B_IP, B_IP6, 2),
        );
        let kept: Kept = Arc::default();
        let frames = kept.clone();
        b.set_lent_reader(Box::new(move |id, off, dst| {
            let frames = frames.lock().unwrap();
            let Some(f) = frames.get(&id) else {
                return false;
            };
            dst.copy_from_slice(&f[off..off + dst.len()]);
            true
        }));
        let data = pattern(300_000, 12);
        let valid = headers(v6);
        let (mut next, mut data_frames, mut released) = (0, 0, 0);
        let got = stream_by_hand(&mut a, &mut b, &data, dest(v6), |a, b, now| {
            released += release(b, &kept);
            data_frames += carry_direct((a, b), now, valid, swap, |b, held, f| {
                let src = Keeping {
                    frame: f,
                    kept: &kept,
                    next: &mut next,
                };
                b.receive_direct(now, held, valid, false, src)
            });
        });
        released += release(&mut b, &kept);
        assert!(
            got == data,
            "v6 {v6}: B read {} bytes, not the stream",
            got.len()
        );
        let (held, given_back, refused) = b.lent_frame_stats();
        // All but the first few: the segment completing the handshake is copied, and so
        // is any behind it before the reader has emptied the queue.
        if swap.is_none() {
            assert!(
                held * 10 >= data_frames * 9 && held > 100,
                "v6 {v6}: {held} of {data_frames} data frames held"
            );
        } else {
            // Out of order data queued, and merged, behind held segments.
            assert!(b.mib().get(Counter::TcpExtTCPOFOQueue) > 10, "v6 {v6}");
            assert!(
                held > 50,
                "v6 {v6}: {held} of {data_frames} data frames held"
            );
        }
        assert_eq!((given_back, refused), (held, 0), "v6 {v6}");
        assert_eq!(released as u64, held, "v6 {v6}");
        // Kept frames no queue took were given back at once; none is left.
        assert!(kept.lock().unwrap().is_empty(), "v6 {v6}");
        assert_eq!(b.mib().drops(DropReason::TcpDirectMiss), 0);
    }
}
