//! `Stack::receive_direct`: a segment that only appends to an established connection's
//! receive queue is received from its headers alone, and its payload is asked of the
//! device (`read`) straight into the receive queue, over IPv4 and IPv6 alike. Frames are
//! handed over as a shm link holds them: only the headers in hand, the rest of the buffer
//! garbage, so a payload read in place instead of through `read` shows in the stream.

use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

use ustack_obs::DropReason;
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
    let to: SocketAddr = if v6 {
        SocketAddrV6::new(B_IP6, 80, 0, 0).into()
    } else {
        SocketAddrV4::new(B_IP, 80).into()
    };
    let valid = headers(v6);
    let (mut direct, mut data_frames) = (0, 0);
    let got = stream_by_hand(&mut a, &mut b, &data, to, |a, b, now| {
        while let Some(f) = a.poll_transmit(now) {
            // The handshake's segments (the SYN's options make it longer than `valid`).
            if f.len() <= valid || f[valid - 32 + 13] & 0x02 != 0 {
                b.receive(now, &f);
                continue;
            }
            data_frames += 1;
            let mut held = f.clone();
            held[valid..].fill(0xee);
            let took = b.receive_direct(now, &held, valid, false, |from, dst| {
                assert!(from >= valid, "asked for header bytes at {from}");
                dst.copy_from_slice(&f[from..from + dst.len()]);
            });
            if took {
                direct += 1;
            } else {
                b.receive(now, &f);
            }
        }
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
