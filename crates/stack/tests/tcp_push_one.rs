//! The send side of an established connection in one pass (issue #13 item 2): a write
//! with nothing in flight that fits one segment and the peer's window leaves straight from
//! `tcp_send` (Linux `tcp_push_one`), its header written from the connection's template
//! straight into the frame. Each test here is what a user (or the peer) checks, for IPv4
//! and IPv6: the segment on the wire, that a lost one is sent again, and the checksums a
//! receiver verifies, with the path's counters
//! (`tcp_push_one_hits`, `tcp_header_template_hits`) showing which path was taken.

use core::time::Duration;

use ustack_stack::{Stack, TcpHandle};
use ustack_testkit::for_both_families;
use ustack_testkit::tcp::{Family, PEER, Seg, SegTest};
use ustack_wire::tcp::Flags;

const PEER_ISN: u32 = 1000;

for_both_families!(
    a_lone_write_leaves_straight_with_the_ack,
    a_lost_pushed_write_is_sent_again,
    a_write_behind_data_in_flight_waits_for_its_ack,
    a_pushed_write_advertises_the_space_a_read_freed,
);

/// Deliver the peer's segment `seg` (its ports filled in).
fn send(fam: Family, t: &mut SegTest, mut seg: Seg) {
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    let now = t.now;
    t.stack.receive(now, &fam.build(&seg));
}

/// Every segment the stack has to send now, parsed as the peer would (checksums
/// verified).
fn drain(fam: Family, t: &mut SegTest) -> Vec<Seg> {
    core::iter::from_fn(|| t.stack.poll_transmit(t.now))
        .map(|f| {
            fam.parse(&f)
                .expect("a well-formed segment, checksums right")
        })
        .collect()
}

/// A passive open over `fam` from a peer offering SACK and timestamps (MSS 1000,
/// window 65,535); returns the handle, our next sequence number and our timestamp.
fn open(fam: Family) -> (SegTest, TcpHandle, u32, u32) {
    open_with(fam, |_| {})
}

/// [`open`] on a stack `setup` configured first.
fn open_with(fam: Family, setup: impl FnOnce(&mut Stack)) -> (SegTest, TcpHandle, u32, u32) {
    let mut t = fam.listening(fam.config(), 80);
    setup(&mut t.stack);
    send(
        fam,
        &mut t,
        Seg::syn(PEER_ISN)
            .mss(1000)
            .wscale(7)
            .sack_perm()
            .ts(100, 0),
    );
    let synack = drain(fam, &mut t).pop().expect("SYN-ACK");
    let our_ts = synack.ts.map_or(0, |ts| ts.0);
    let start = synack.seq.wrapping_add(1);
    send(
        fam,
        &mut t,
        Seg::ack(PEER_ISN + 1, start).ts(101, our_ts).win(65_535),
    );
    let (h, _) = t
        .stack
        .tcp_accept_addr(t.listener.unwrap())
        .expect("accepted");
    (t, h, start, our_ts)
}

fn hits(s: &Stack) -> (u64, u64) {
    (s.tcp_push_one_hits(), s.tcp_header_template_hits())
}

/// The common case: the write leaves at once as one segment with PSH and the ACK of
/// everything received, from the template, by the direct path; after its ACK, the next
/// one does too.
fn a_lone_write_leaves_straight_with_the_ack(fam: Family) {
    let (mut t, h, start, our_ts) = open(fam);
    let mut seq = start;
    for (i, msg) in [&b"ping"[..], b"pong!", b"odd-length message"]
        .into_iter()
        .enumerate()
    {
        let before = hits(&t.stack);
        t.now += Duration::from_millis(1);
        assert_eq!(t.write(h, msg), msg.len());
        let s = drain(fam, &mut t);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].seq, &s[0].payload[..]), (seq, msg));
        assert!(s[0].has(Flags::PSH | Flags::ACK), "{:?}", s[0]);
        assert_eq!(s[0].ack, PEER_ISN + 1);
        assert!(s[0].ts.is_some(), "timestamps on every segment: {:?}", s[0]);
        let after = hits(&t.stack);
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (1, 1),
            "write {i}: the direct path and the template"
        );
        seq = seq.wrapping_add(msg.len() as u32);
        send(fam, &mut t, Seg::ack(PEER_ISN + 1, seq).ts(102, our_ts));
    }
    assert_eq!(t.stack.tcp_info(h).unwrap().send_q, 0);
}

/// A pushed segment arms what `tcp_output` arms after sending new data (a loss probe or
/// the RTO): lost, it is sent again without anything else from the peer.
fn a_lost_pushed_write_is_sent_again(fam: Family) {
    let (mut t, h, start, _) = open(fam);
    t.write(h, b"lost on the way");
    let first = drain(fam, &mut t);
    assert_eq!(first.len(), 1);
    assert_eq!(t.stack.tcp_push_one_hits(), 1);
    let end = t.now + Duration::from_secs(5);
    let mut again = None;
    while let Some(at) = t.stack.poll_timeout().filter(|at| *at <= end) {
        t.now = t.now.max(at);
        t.stack.handle_timeout(t.now);
        if let Some(s) = drain(fam, &mut t).pop() {
            again = Some(s);
            break;
        }
    }
    let again = again.expect("the lost segment sent again by a timer");
    assert_eq!(
        (again.seq, &again.payload[..]),
        (start, &b"lost on the way"[..])
    );
}

/// With data in flight a write is not the direct path's (Nagle with Minshall's rule
/// holds a second small segment while the first is unacknowledged, RFC 9293 §3.7.4):
/// it leaves when the first is acknowledged.
fn a_write_behind_data_in_flight_waits_for_its_ack(fam: Family) {
    let (mut t, h, start, our_ts) = open(fam);
    t.write(h, b"first");
    assert_eq!(drain(fam, &mut t).len(), 1);
    let pushed = t.stack.tcp_push_one_hits();
    t.write(h, b"second");
    assert_eq!(
        drain(fam, &mut t),
        vec![],
        "held while the first is in flight"
    );
    assert_eq!(t.stack.tcp_push_one_hits(), pushed, "not the direct path");
    send(
        fam,
        &mut t,
        Seg::ack(PEER_ISN + 1, start + 5).ts(102, our_ts),
    );
    let s = drain(fam, &mut t);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].seq, &s[0].payload[..]), (start + 5, &b"second"[..]));
}

/// The window a pushed write advertises is the receive buffer's free space now (RFC 9293
/// §3.8.6.2.2; Linux `tcp_select_window` on every segment): with bytes received and not
/// read it offers less, and once a read has freed them the next write offers the space
/// again, without any window update in between (the reads are small: none is due).
fn a_pushed_write_advertises_the_space_a_read_freed(fam: Family) {
    const BUF: u32 = 16_384;
    let (mut t, h, start, our_ts) = open_with(fam, |s| {
        s.set_sysctl("net.ipv4.tcp_rmem.default", u64::from(BUF))
            .unwrap();
    });
    // Our shift with tcp_rmem.max 6 MiB: 7 (a unit of 128 bytes).
    let unit = 128u32;
    let mut peer_seq = PEER_ISN + 1;
    let mut seq = start;
    // The peer's timestamps go up with each segment (PAWS, RFC 7323 §5).
    let mut tsval = 200;
    let write = |t: &mut SegTest, seq: &mut u32, peer_seq: u32, tsval: &mut u32| {
        t.now += Duration::from_millis(1);
        assert_eq!(t.write(h, b"ping"), 4);
        let s = drain(fam, t);
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].seq, s[0].ack), (*seq, peer_seq));
        *seq = seq.wrapping_add(4);
        *tsval += 1;
        send(fam, t, Seg::ack(peer_seq, *seq).ts(*tsval, our_ts));
        u32::from(s[0].window) * unit
    };
    let open_win = write(&mut t, &mut seq, peer_seq, &mut tsval);
    // Data the reader leaves in the buffer for now: 8,000 bytes.
    for _ in 0..8 {
        send(
            fam,
            &mut t,
            Seg::ack(peer_seq, seq).ts(tsval, our_ts).data(&[7u8; 1000]),
        );
        peer_seq += 1000;
        tsval += 1;
    }
    drain(fam, &mut t);
    let held = write(&mut t, &mut seq, peer_seq, &mut tsval);
    // Less by about what is unread (the edge already offered does not move left, so
    // not exactly the free space: the ACKs of the data offered more than is free now).
    assert!(
        held + 4_000 <= open_win,
        "{held}: 8,000 bytes unread in a {BUF}-byte buffer (offered {open_win} before)"
    );
    assert_eq!(t.read(h).map(|d| d.len()), Some(8_000));
    drain(fam, &mut t);
    let freed = write(&mut t, &mut seq, peer_seq, &mut tsval);
    assert!(
        freed >= held + 4_000,
        "{freed}: the read freed 8,000 bytes (offered {held} before it)"
    );
    assert!(
        t.stack.tcp_push_one_hits() >= 3,
        "the direct path each time"
    );
}
