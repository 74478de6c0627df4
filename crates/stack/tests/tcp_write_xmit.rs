//! The guards of `tcp_write_xmit`'s one-segment fast path (issue #13 item 2): a write
//! that fits one segment and the window, with nothing in flight, leaves in one pass;
//! each case here breaks one of the path's conditions, and the segments must be those the
//! general loop sends (RFC 9293 §3.7.4 Nagle, §3.8.6 windows, §3.10.4 CLOSE; Linux
//! `tcp_write_xmit`, `TCP_CORK`). The test plays the peer ([`SegTest`]) on a virtual
//! clock.

use ustack_stack::{Shutdown, TcpHandle};
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_wire::tcp::Flags;

/// A passive open from peer ISN 1000 (MSS 1000, no other options) completed with a
/// 65535-byte window; returns (handle, our first data sequence number).
fn open(t: &mut SegTest) -> (TcpHandle, u32) {
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 65_535);
    (h, synack.seq.wrapping_add(1))
}

/// Each segment's sequence number and payload length.
fn spans(segs: &[Seg]) -> Vec<(u32, usize)> {
    segs.iter().map(|s| (s.seq, s.payload.len())).collect()
}

/// The common case itself: a small write with nothing in flight goes at once, one
/// segment with PSH and an ACK of everything received, and the next one after its ACK.
#[test]
fn a_small_write_with_nothing_in_flight_leaves_at_once() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    for (i, msg) in [&b"ping"[..], b"pong!"].into_iter().enumerate() {
        let seq = start.wrapping_add(4 * i as u32);
        t.write(h, msg);
        let s = t.recv_all();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].seq, &s[0].payload[..]), (seq, msg));
        assert!(s[0].has(Flags::PSH | Flags::ACK), "{:?}", s[0]);
        assert_eq!(s[0].ack, 1001);
        t.send(Seg::ack(1001, seq.wrapping_add(msg.len() as u32)));
    }
    assert_eq!(t.stack.tcp_info(h).unwrap().send_q, 0);
}

/// A write larger than the window the peer offers (but within one MSS) sends the window's
/// worth, not the write (RFC 9293 §3.8.6: "the sending TCP peer must not send data beyond
/// the right window edge"); the rest after the window opens.
#[test]
fn a_write_past_the_window_sends_only_the_window() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    // Linux tcp_may_update_window: a duplicate ACK may close the window or widen it,
    // not narrow it: closed first, then opened to 10 bytes.
    t.send(Seg::ack(1001, start).win(0));
    t.send(Seg::ack(1001, start).win(10));
    assert_eq!(t.write(h, &[b'x'; 20]), 20);
    let s = t.recv_all();
    assert_eq!(spans(&s), [(start, 10)], "the window's 10 bytes only");
    t.send(Seg::ack(1001, start.wrapping_add(10)).win(1000));
    let rest = t.recv_all();
    assert_eq!(spans(&rest), [(start.wrapping_add(10), 10)]);
}

/// The same on a connection that holds its header template (built by its first
/// writes), where a small write with nothing in flight takes the one-pass way
/// (`tcp_send_one`): the window is tested there too (the write goes the general way, cut
/// to the window), and a write that fits leaves by it.
#[test]
fn a_write_past_the_window_sends_only_the_window_on_the_one_pass_way_too() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    let at = |n: u32| start.wrapping_add(n);
    // Two exchanges: the first takes the active state, the second stores the template.
    t.write(h, b"ping");
    assert_eq!(spans(&t.recv_all()), [(start, 4)]);
    t.send(Seg::ack(1001, at(4)).win(1000));
    t.write(h, b"pong");
    assert_eq!(spans(&t.recv_all()), [(at(4), 4)]);
    // The ACK narrows the window to 10 bytes (it acknowledges new data, so it may).
    t.send(Seg::ack(1001, at(8)).win(10));
    assert_eq!(t.write(h, &[b'x'; 20]), 20);
    assert_eq!(
        spans(&t.recv_all()),
        [(at(8), 10)],
        "the window's 10 bytes only"
    );
    t.send(Seg::ack(1001, at(18)).win(1000));
    assert_eq!(spans(&t.recv_all()), [(at(18), 10)]);
    t.send(Seg::ack(1001, at(28)).win(1000));
    let hits_before = t.stack.tcp_push_one_hits();
    t.write(h, b"ping");
    assert_eq!(spans(&t.recv_all()), [(at(28), 4)]);
    assert_eq!(
        t.stack.tcp_push_one_hits(),
        hits_before + 1,
        "a write that fits: one pass"
    );
}

/// A write longer than the MSS is cut into MSS-sized segments (RFC 9293 §3.7.1), even
/// with nothing in flight.
#[test]
fn a_write_past_the_mss_is_cut_at_the_mss() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    assert_eq!(t.write(h, &[b'x'; 1500]), 1500);
    let s = t.recv_all();
    assert_eq!(spans(&s), [(start, 1000), (start.wrapping_add(1000), 500)]);
}

/// Data waiting on a closed window when the user closes goes with the FIN in one segment
/// once the window opens (RFC 9293 §3.10.4: the FIN follows the data; Linux
/// `tcp_write_xmit` sends the last skb with its FIN), not as data and a FIN apart.
#[test]
fn data_held_by_the_window_leaves_with_the_queued_fin() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    t.send(Seg::ack(1001, start).win(0));
    assert_eq!(t.write(h, b"abc"), 3);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    assert_eq!(t.recv_all(), vec![], "nothing fits a zero window");
    t.send(Seg::ack(1001, start).win(1000));
    let s = t.recv_all();
    assert_eq!(s.len(), 1, "data and FIN in one segment: {s:?}");
    assert_eq!((s[0].seq, &s[0].payload[..]), (start, &b"abc"[..]));
    assert!(s[0].has(Flags::FIN), "{:?}", s[0]);
}

/// TCP_CORK (Linux `tcp_nagle_check`): a write shorter than the MSS waits while corked,
/// even with nothing in flight, and leaves when the cork is pulled.
#[test]
fn a_corked_small_write_waits_for_the_uncork() {
    let mut t = SegTest::listening(80);
    let (h, start) = open(&mut t);
    let now = t.now;
    t.stack.tcp_set_cork(now, h, true).unwrap();
    t.write(h, b"held");
    assert_eq!(t.recv_all(), vec![], "corked");
    let now = t.now;
    t.stack.tcp_set_cork(now, h, false).unwrap();
    let s = t.recv_all();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].seq, &s[0].payload[..]), (start, &b"held"[..]));
}
