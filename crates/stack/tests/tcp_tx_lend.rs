//! `Stack::set_tx_lend`: long segments queued as their headers with the payload left in
//! the send buffer, written by the driver into the device (`poll_transmit_lent`,
//! `write_tx_payload`) or made whole when taken with `poll_transmit` (a device that does
//! not lend). Either way the frames on the wire are the very bytes the stack builds
//! without it; a split segment whose bytes were acknowledged before it left is counted
//! as `TCP_TX_STALE` and not sent.

use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use ustack_obs::{Counter, DropReason};
use ustack_stack::{Instant, LEND_MIN, Stack, TcpHandle, TxFrame, TxPayload};
use ustack_testkit::{
    A_IP, A_IP6, A_MAC, B_IP, B_IP6, B_MAC, offload_stack, pattern, stream_by_hand,
};

/// How the sender's frames are taken.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Take {
    /// Lending off: whole frames from `poll_transmit`.
    Plain,
    /// Lending on, frames from `poll_transmit` (made whole there: the fallback).
    Whole,
    /// Lending on, frames from `poll_transmit_lent`, a split one put together from its
    /// headers and `write_tx_payload`'s pieces, as a device writes them into its slot.
    Lent,
}

/// B's listening address over IPv4 or IPv6.
fn b_addr(v6: bool) -> SocketAddr {
    if v6 {
        SocketAddrV6::new(B_IP6, 80, 0, 0).into()
    } else {
        SocketAddrV4::new(B_IP, 80).into()
    }
}

/// A frame's Ethernet, IP and TCP (with timestamps) headers.
fn headers(v6: bool) -> usize {
    14 + if v6 { 40 } else { 20 } + 32
}

/// The sender's next frame taken as `take` says; `splits` counts split segments.
fn next_frame(a: &mut Stack, now: Instant, take: Take, splits: &mut usize) -> Option<Vec<u8>> {
    if take != Take::Lent {
        return a.poll_transmit(now);
    }
    match a.poll_transmit_lent(now)? {
        TxFrame::Whole(f) => Some(f),
        TxFrame::Split { mut head, payload } => {
            *splits += 1;
            assert!(payload.len() >= LEND_MIN);
            let mut pieces = 0;
            assert!(a.write_tx_payload(&payload, |bytes| {
                head.extend_from_slice(bytes);
                pieces += 1;
                true
            }));
            assert!(pieces >= 1);
            Some(head)
        }
    }
}

/// A streams 300 KB to B over IPv4 or IPv6 (`v6`; B reading as it comes), frames carried
/// by hand; every frame A sent, the split segments it made, and A's IP counters as
/// `/proc/net/snmp{,6}` shows them (transmitted packets and octets).
fn stream(take: Take, v6: bool) -> (Vec<Vec<u8>>, usize, [u64; 3]) {
    let (mut a, mut b) = (
        offload_stack(A_MAC, A_IP, A_IP6, 1),
        offload_stack(B_MAC, B_IP, B_IP6, 2),
    );
    a.set_tx_lend(take != Take::Plain);
    let data = pattern(300_000, 7);
    let to = b_addr(v6);
    let (mut frames, mut splits) = (Vec::new(), 0);
    let got = stream_by_hand(&mut a, &mut b, &data, to, |a, b, now| {
        while let Some(f) = next_frame(a, now, take, &mut splits) {
            b.receive(now, &f);
            frames.push(f);
        }
    });
    assert!(
        got == data,
        "{take:?}: B read {} bytes, not the stream",
        got.len()
    );
    assert_eq!(a.mib().drops(DropReason::TcpTxStale), 0);
    let mib = a.mib();
    let ip = [
        mib.get(Counter::IpOutRequests),
        mib.get(Counter::Ip6OutTransmits),
        mib.get(Counter::Ip6OutOctets),
    ];
    (frames, splits, ip)
}

/// Split segments, written through `write_tx_payload` or made whole by `poll_transmit`,
/// are the frames the stack builds whole, byte for byte: every payload byte at its offset.
#[test]
fn split_segments_go_out_as_the_frames_built_whole() {
    split_segments_are_the_frames_built_whole(false);
}

/// The same over IPv6 (`xmit6`'s hook, `ip6_xmit_lent`).
#[test]
fn split_ipv6_segments_go_out_as_the_frames_built_whole() {
    split_segments_are_the_frames_built_whole(true);
}

fn split_segments_are_the_frames_built_whole(v6: bool) {
    let (plain, none, plain_ip) = stream(Take::Plain, v6);
    assert_eq!(none, 0);
    let long = plain
        .iter()
        .filter(|f| f.len() >= headers(v6) + LEND_MIN)
        .count();
    assert!(long >= 150, "{long} long segments");
    let (lent, splits, lent_ip) = stream(Take::Lent, v6);
    assert_eq!(lent_ip, plain_ip, "IP counters, lent against plain");
    // Every long segment was split (the handshake's, ARP's or NDP's and ACKs are whole)
    // but the first: the neighbour's address was not at hand yet (no hot entry), so it
    // went the general way, made whole at once (`dev_queue_xmit_lent`, `ip6_xmit_lent`).
    assert!(splits <= long && long - splits <= 1, "{splits} of {long}");
    assert_eq!(lent.len(), plain.len());
    for (i, (x, y)) in plain.iter().zip(&lent).enumerate() {
        assert!(
            x == y,
            "frame {i} differs ({} and {} bytes)",
            x.len(),
            y.len()
        );
    }
    let (whole, _, whole_ip) = stream(Take::Whole, v6);
    assert_eq!(whole_ip, plain_ip, "IP counters, made whole against plain");
    assert!(whole == plain, "made whole by poll_transmit");
}

/// A (lending) connected to B over IPv4, frames carried by hand at 1 s: both stacks, A's
/// connection, B's accepted one and the instant.
fn connected_lending() -> (Stack, Stack, TcpHandle, TcpHandle, Instant) {
    let (mut a, mut b) = (
        offload_stack(A_MAC, A_IP, A_IP6, 1),
        offload_stack(B_MAC, B_IP, B_IP6, 2),
    );
    a.set_tx_lend(true);
    let to = b_addr(false);
    let l = b.tcp_listen(to, 4).unwrap();
    let now = Instant::from_secs(1);
    let c = a.tcp_connect(now, to).unwrap();
    for _ in 0..8 {
        while let Some(f) = a.poll_transmit(now) {
            b.receive(now, &f);
        }
        while let Some(f) = b.poll_transmit(now) {
            a.receive(now, &f);
        }
    }
    let s = b.tcp_accept_addr(l).unwrap().0;
    (a, b, c, s, now)
}

/// A split segment whose bytes the peer acknowledged before the device took it has
/// nothing to send: `write_tx_payload` refuses it and counts `TCP_TX_STALE`.
#[test]
fn a_split_segment_acknowledged_before_it_left_is_counted_stale() {
    let (mut a, mut b, c, _, now) = connected_lending();
    a.tcp_send(now, c, &pattern(4000, 1)).unwrap();
    // The segments go to B whole; the first one's payload is kept for later.
    let mut first: Option<TxPayload> = None;
    while let Some(frame) = a.poll_transmit_lent(now) {
        let TxFrame::Split { mut head, payload } = frame else {
            panic!("a whole frame");
        };
        first.get_or_insert(payload);
        assert!(a.write_tx_payload(&payload, |bytes| {
            head.extend_from_slice(bytes);
            true
        }));
        b.receive(now, &head);
    }
    let first = first.expect("a split segment");
    assert!(a.write_tx_payload(&first, |_| true), "not acknowledged yet");
    // B's ACK frees those bytes.
    let later = now + Duration::from_millis(300);
    b.handle_timeout(later);
    while let Some(f) = b.poll_transmit(later) {
        a.receive(later, &f);
    }
    let mut called = false;
    assert!(!a.write_tx_payload(&first, |_| {
        called = true;
        true
    }));
    assert!(!called, "nothing handed over");
    assert_eq!(a.mib().drops(DropReason::TcpTxStale), 1);
}

/// A lone write long enough to lend, into an empty send buffer with nothing in flight,
/// takes the write's one-pass way (`tcp_send_one`, Linux `tcp_push_one`) and is still
/// lent: its payload stays in the send buffer for the device, not copied into the frame
/// from the caller's bytes (which that way uses for shorter writes).
#[test]
fn a_lone_write_long_enough_to_lend_is_lent_on_the_one_pass_way() {
    let (mut a, mut b, c, s, now) = connected_lending();
    let mut got = vec![0; 4096];
    // A short exchange each way first, as a request and its answer: A's connection
    // holds its active state with a current header template (the one-pass way sends
    // from one only).
    for _ in 0..2 {
        assert_eq!(a.tcp_send(now, c, b"hello").unwrap(), 5);
        while let Some(f) = a.poll_transmit(now) {
            b.receive(now, &f);
        }
        assert_eq!(b.tcp_recv(now, s, &mut got).unwrap(), 5);
        assert_eq!(b.tcp_send(now, s, b"world").unwrap(), 5);
        while let Some(f) = b.poll_transmit(now) {
            a.receive(now, &f);
        }
        assert_eq!(a.tcp_recv(now, c, &mut got).unwrap(), 5);
    }
    assert_eq!(a.tcp_info(c).unwrap().unacked, 0, "acknowledged");
    let data = pattern(LEND_MIN + 176, 3);
    let (pushed, templated) = (a.tcp_push_one_hits(), a.tcp_header_template_hits());
    assert_eq!(a.tcp_send(now, c, &data).unwrap(), data.len());
    assert_eq!(a.tcp_push_one_hits(), pushed + 1, "the one-pass way");
    assert_eq!(
        a.tcp_header_template_hits(),
        templated + 1,
        "from the template"
    );
    let Some(TxFrame::Split { mut head, payload }) = a.poll_transmit_lent(now) else {
        panic!("not a split segment");
    };
    assert_eq!(payload.len(), data.len());
    assert!(a.write_tx_payload(&payload, |bytes| {
        head.extend_from_slice(bytes);
        true
    }));
    assert!(a.poll_transmit_lent(now).is_none(), "one segment");
    b.receive(now, &head);
    assert_eq!(b.tcp_recv(now, s, &mut got).unwrap(), data.len());
    assert_eq!(&got[..data.len()], &data[..]);
}
