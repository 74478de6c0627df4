//! `Stack::set_tx_lend`: long segments queued as their headers with the payload left in
//! the send buffer, written by the driver into the device (`poll_transmit_lent`,
//! `write_tx_payload`) or made whole when taken with `poll_transmit` (a device that does
//! not lend). Either way the frames on the wire are the very bytes the stack builds
//! without it; a split segment whose bytes were acknowledged before it left is counted
//! as `TCP_TX_STALE` and not sent.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_obs::DropReason;
use ustack_stack::{Config, Instant, Ipv4Cidr, LEND_MIN, Stack, TxFrame, TxPayload};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC, pattern};

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

fn stack(mac: ustack_stack::EthernetAddress, ip: core::net::Ipv4Addr, seed: u64) -> Stack {
    let mut c = Config::ethernet(mac, Ipv4Cidr::new(ip, 24));
    c.seed = Some(seed);
    c.checksum_offload = true;
    Stack::new(c)
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

/// A streams 300 KB to B (B reading as it comes), frames carried by hand; every frame A
/// sent, and the split segments it made.
fn stream(take: Take) -> (Vec<Vec<u8>>, usize) {
    let (mut a, mut b) = (stack(A_MAC, A_IP, 1), stack(B_MAC, B_IP, 2));
    a.set_tx_lend(take != Take::Plain);
    let data = pattern(300_000, 7);
    let to: core::net::SocketAddr = SocketAddrV4::new(B_IP, 80).into();
    let l = b.tcp_listen(to, 4).unwrap();
    let mut now = Instant::from_secs(1);
    let c = a.tcp_connect(now, to).unwrap();
    let (mut sent, mut got, mut server) = (0, Vec::new(), None);
    let (mut frames, mut splits) = (Vec::new(), 0);
    let mut buf = vec![0u8; 65536];
    for _ in 0..10_000 {
        now += Duration::from_micros(100);
        if sent < data.len()
            && let Ok(n) = a.tcp_send(now, c, &data[sent..])
        {
            sent += n;
        }
        while let Some(f) = next_frame(&mut a, now, take, &mut splits) {
            b.receive(now, &f);
            frames.push(f);
        }
        if server.is_none() {
            server = b.tcp_accept_addr(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = server {
            while let Ok(n @ 1..) = b.tcp_recv(now, s, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        while let Some(f) = b.poll_transmit(now) {
            a.receive(now, &f);
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert!(
        got == data,
        "{take:?}: B read {} bytes, not the stream",
        got.len()
    );
    assert_eq!(a.mib().drops(DropReason::TcpTxStale), 0);
    (frames, splits)
}

/// Split segments, written through `write_tx_payload` or made whole by `poll_transmit`,
/// are the frames the stack builds whole, byte for byte: every payload byte at its offset.
#[test]
fn split_segments_go_out_as_the_frames_built_whole() {
    let (plain, none) = stream(Take::Plain);
    assert_eq!(none, 0);
    let long = plain.iter().filter(|f| f.len() >= 66 + LEND_MIN).count();
    assert!(long >= 150, "{long} long segments");
    let (lent, splits) = stream(Take::Lent);
    // Every long segment was split (the handshake's, ARP's and ACKs are whole) but the
    // first: the neighbour's address was not at hand yet (no hot entry), so it went the
    // general way, made whole at once (`dev_queue_xmit_lent`).
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
    let (whole, _) = stream(Take::Whole);
    assert!(whole == plain, "made whole by poll_transmit");
}

/// A split segment whose bytes the peer acknowledged before the device took it has
/// nothing to send: `write_tx_payload` refuses it and counts `TCP_TX_STALE`.
#[test]
fn a_split_segment_acknowledged_before_it_left_is_counted_stale() {
    let (mut a, mut b) = (stack(A_MAC, A_IP, 1), stack(B_MAC, B_IP, 2));
    a.set_tx_lend(true);
    let to: core::net::SocketAddr = SocketAddrV4::new(B_IP, 80).into();
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
    b.tcp_accept_addr(l).unwrap();
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
