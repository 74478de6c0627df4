//! The out-of-order queue against a hostile or unusual peer: a FIN beyond a hole, data that
//! overlaps queued data, and a flood of one-byte out-of-order segments (CVE-2018-5390).
//! The test is the peer, segment by segment.

use ustack_obs::{Counter, DropReason};
use ustack_stack::tcp::State;
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_wire::tcp::Flags;

/// A passive open from peer ISN 1000 with SACK; returns (our ISN, the accepted handle,
/// the window our SYN-ACK offered).
fn established(t: &mut SegTest) -> (u32, ustack_stack::TcpHandle, u16) {
    let (h, synack) = t.accept_with(Seg::syn(1000).sack_perm(), 65535);
    (synack.seq, h, synack.window)
}

/// Linux queues a FIN that arrives beyond a hole with its segment and processes it when
/// the hole fills (tcp_data_queue_ofo, tcp_ofo_queue -> tcp_fin): the peer sends the FIN
/// once, and the segment that fills the hole is acknowledged up to and including the FIN.
#[test]
fn fin_beyond_a_hole_is_processed_when_the_hole_fills() {
    let mut t = SegTest::listening(80);
    let (iss, h, _) = established(&mut t);
    let ack = iss.wrapping_add(1);
    let mut peer_segments = 0;
    t.send(
        Seg::ack(1011, ack)
            .data(b"0123456789")
            .flags(Flags::FIN | Flags::ACK),
    );
    peer_segments += 1;
    let d = t.recv().expect("a duplicate ACK");
    assert_eq!((d.ack, d.sack.clone()), (1001, vec![(1011, 1021)]));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established), "FIN not yet");
    t.send(Seg::ack(1001, ack).data(b"abcdefghij"));
    peer_segments += 1;
    let a = t.recv().expect("an ACK");
    assert_eq!(a.ack, 1022, "data and the queued FIN acknowledged: {a:?}");
    assert_eq!(t.stack.tcp_state(h), Ok(State::CloseWait));
    assert_eq!(peer_segments, 2, "no retransmission of the FIN was needed");
    assert_eq!(t.read(h), Some(b"abcdefghij0123456789".to_vec()));
    assert_eq!(t.read(h), None, "end of stream after the data");
}

/// A bare FIN beyond a hole is queued too (Linux: its skb is not empty in sequence space).
#[test]
fn bare_fin_beyond_a_hole_is_queued() {
    let mut t = SegTest::listening(80);
    let (iss, h, _) = established(&mut t);
    let ack = iss.wrapping_add(1);
    t.send(Seg::ack(1006, ack).flags(Flags::FIN | Flags::ACK));
    assert_eq!(t.recv().map(|s| s.ack), Some(1001));
    t.send(Seg::ack(1001, ack).data(b"12345"));
    assert_eq!(t.recv().map(|s| s.ack), Some(1007));
    assert_eq!(t.stack.tcp_state(h), Ok(State::CloseWait));
}

/// Overlapping data, Linux's policy: in-order data wins over queued out-of-order bytes
/// (RFC 9293 §3.10.7.4 allows either; Linux's tcp_ofo_queue delivers the in-order skb and
/// trims the queued one). Old bytes sent out of order, then different newer bytes in order
/// covering them: the application reads the newer ones. An out-of-order segment inside a
/// queued one changes nothing ("All the bits are present", counted TCPOFOMerge).
#[test]
fn in_order_data_wins_over_queued_out_of_order_data() {
    let mut t = SegTest::listening(80);
    let (iss, h, _) = established(&mut t);
    let ack = iss.wrapping_add(1);
    t.send(Seg::ack(1011, ack).data(b"oldoldoldo"));
    t.send(Seg::ack(1013, ack).data(b"XYZ"));
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPOFOMerge), 1);
    assert_eq!(t.stack.mib().drops(DropReason::TcpOfoMerge), 1);
    t.send(Seg::ack(1001, ack).data(b"NEWNEWNEWNEWNEWNEWNEWNEW"));
    t.recv_all();
    assert_eq!(t.read(h), Some(b"NEWNEWNEWNEWNEWNEWNEWNEW".to_vec()));
}

/// CVE-2018-5390 through the stack: one-byte out-of-order segments in a scrambled order.
/// The connection's receive memory stays within its bound (twice the receive buffer, plus
/// two chunks), the queue is pruned from the highest sequence down (PruneCalled,
/// OfoPruned, a TCP_OFO_QUEUE_PRUNE drop per extent), and once the holes are filled the
/// application reads the stream.
#[test]
fn one_byte_segment_flood_stays_within_the_receive_buffer() {
    let mut t = SegTest::listening(80);
    let (iss, h, win) = established(&mut t);
    let ack = iss.wrapping_add(1);
    let n = u32::from(win) / 2 - 1;
    let p = 32_771; // a prime above n
    assert!(n < p);
    assert_eq!(t.stack.tcp_resources().buffer_bytes, 0, "nothing held yet");
    // Twice the receive buffer (Linux's sk_rcvbuf for a window's worth of payload at
    // tcp_adv_win_scale 1) plus two chunks.
    let bound = 2 * t.stack.tcp_recv_buffer(h).unwrap() + 2 * 2048;
    let mut most = 0;
    for k in 0..p {
        let i = (k * 7919) % p;
        if i >= n {
            continue;
        }
        let seq = 1001 + 2 * i + 1;
        t.send(Seg::ack(seq, ack).data(&[(seq % 251) as u8]));
        t.recv_all();
        most = most.max(t.stack.tcp_resources().buffer_bytes);
    }
    let mib = t.stack.mib();
    let (calls, ofo_pruned) = (
        mib.get(Counter::TcpExtPruneCalled),
        mib.get(Counter::TcpExtOfoPruned),
    );
    let pruned = mib.drops(DropReason::TcpOfoQueuePrune);
    assert!(calls > 10 && ofo_pruned > 10, "{calls} {ofo_pruned}");
    assert!(
        pruned > ofo_pruned,
        "{pruned} extents in {ofo_pruned} prunes"
    );
    assert!(most <= bound, "receive memory {most} over {bound}");
    assert!(most > bound / 2, "the queue filled ({most})");
    // Fill every hole: the stream arrives whole.
    let stream: Vec<u8> = (0..2 * n + 1).map(|i| ((1001 + i) % 251) as u8).collect();
    for (k, part) in stream.chunks(1400).enumerate() {
        t.send(Seg::ack(1001 + 1400 * k as u32, ack).data(part));
        t.recv_all();
    }
    assert_eq!(t.read(h), Some(stream));
}
