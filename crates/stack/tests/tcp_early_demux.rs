//! The IPv4 receive fast path (early demux, Linux `tcp_v4_early_demux` with
//! `tcp_rcv_established`'s header prediction): an established connection's common segment
//! is checked and demultiplexed in one pass over its bytes, and everything else takes the
//! general path. What a user checks: in-order data takes the fast path and is delivered
//! with the counters of the general path; a segment the fast path would otherwise take but
//! that is malformed (bad checksum, truncated, data offset past the end) or unacceptable
//! (out of window, failing PAWS) is dropped, counted with the same reason as the general
//! path gives it, and never delivered; what the fast path does not serve (IP options, a
//! fragment, SACK blocks) is still delivered by the general path.

use core::net::IpAddr;

use ustack_obs::{Counter, DropReason};
use ustack_stack::TcpHandle;
use ustack_testkit::tcp::{LOCAL_IP, PEER, Seg, SegTest, build};
use ustack_wire::tcp::{self, Flags};
use ustack_wire::{checksum, ipv4};

/// An accepted connection on port 80 and where its peer stands (handshake with
/// timestamps: peer ISN 1000, TSval 100 on the SYN).
struct Conn {
    t: SegTest,
    h: TcpHandle,
    /// SND.NXT of the peer.
    seq: u32,
    /// What the peer acknowledges (our ISN + 1).
    ack: u32,
    /// The peer's next TSval, and our last TSval it echoes.
    tsval: u32,
    tsecr: u32,
}

fn established() -> Conn {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1460).ts(100, 0), 65_535);
    let (ours, _) = synack.ts.expect("timestamps negotiated");
    Conn {
        t,
        h,
        seq: 1001,
        ack: synack.seq.wrapping_add(1),
        tsval: 101,
        tsecr: ours,
    }
}

impl Conn {
    /// The packet of an in-order data segment with `data` (NOP NOP TS options).
    fn data_packet(&self, data: &[u8]) -> Vec<u8> {
        let mut seg = Seg::ack(self.seq, self.ack)
            .data(data)
            .ts(self.tsval, self.tsecr)
            .flags(Flags::ACK | Flags::PSH);
        (seg.src_port, seg.dst_port) = (PEER.port(), 80);
        build(&seg, *PEER.ip(), LOCAL_IP)
    }

    fn receive(&mut self, packet: &[u8]) {
        let now = self.t.now;
        self.t.stack.receive(now, packet);
    }

    fn hits(&self) -> u64 {
        self.t.stack.tcp_early_demux_hits()
    }

    fn drops(&self, reason: DropReason) -> u64 {
        self.t.stack.mib().drops(reason)
    }

    fn counter(&self, c: Counter) -> u64 {
        self.t.stack.mib().get(c)
    }

    /// Whatever the connection has to read now.
    fn read(&mut self) -> Vec<u8> {
        self.t.read(self.h).expect("not at end of stream")
    }
}

/// Recompute the TCP checksum of an IPv4 packet with a 20-byte header.
fn fix_tcp_checksum(p: &mut [u8]) {
    let (src, dst) = (IpAddr::V4(*PEER.ip()), IpAddr::V4(LOCAL_IP));
    tcp::Packet::new_unchecked(&mut p[20..]).fill_checksum(&src, &dst);
}

/// Recompute the IPv4 header checksum.
fn fix_ip_checksum(p: &mut [u8]) {
    let ihl = usize::from(p[0] & 0xf) * 4;
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// In-order data takes the fast path (one hit per segment, header prediction's
/// TCPHPHits too), is delivered, and counts what the general path counts for a delivered
/// segment: IpInReceives, IpInDelivers and TcpInSegs once each. Catches: a fast path
/// never taken, or one that skips or doubles the IP/TCP input counters.
#[test]
fn in_order_data_takes_the_fast_path_with_the_general_paths_counters() {
    let mut c = established();
    let (hits, hp) = (c.hits(), c.counter(Counter::TcpExtTCPHPHits));
    let before = [
        Counter::IpInReceives,
        Counter::IpInDelivers,
        Counter::TcpInSegs,
    ]
    .map(|k| c.counter(k));
    for i in 0..3u8 {
        let p = c.data_packet(&[i; 64]);
        c.receive(&p);
        c.seq += 64;
        c.tsval += 1;
        assert_eq!(c.read(), vec![i; 64], "segment {i}");
    }
    assert_eq!(c.hits() - hits, 3, "all three took the fast path");
    assert_eq!(
        c.counter(Counter::TcpExtTCPHPHits) - hp,
        3,
        "and were predicted"
    );
    let after = [
        Counter::IpInReceives,
        Counter::IpInDelivers,
        Counter::TcpInSegs,
    ]
    .map(|k| c.counter(k));
    assert_eq!(after, before.map(|b| b + 3), "counted once each");
    // No options at all (a 20-byte header) is the fast path's too.
    let mut seg = Seg::ack(c.seq, c.ack).data(b"no options");
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    let p = build(&seg, *PEER.ip(), LOCAL_IP);
    c.receive(&p);
    assert_eq!(c.hits() - hits, 4);
    assert_eq!(c.read(), b"no options");
}

/// A segment whose TCP checksum the link vouched for (`Stack::receive_with(.., true)`: a
/// TUN queue's `NEEDS_CSUM` or `DATA_VALID` super-segment) is not summed again: a wrong
/// checksum in it is taken by the fast path and delivered, as the general path would
/// take it (Linux `skb_csum_unnecessary`); the word holds for that frame only, the next
/// one with a wrong checksum is dropped. Catches: a fast path that verifies what the
/// link vouched for (it then leaves the segment to the general path, which sums it a
/// second time: the TUN stream's server spent 15% of its time there), or one that trusts
/// every frame after one vouched for.
#[test]
fn a_checksum_the_link_vouched_for_is_not_summed_on_the_fast_path() {
    let mut c = established();
    let (hits, csum) = (c.hits(), c.drops(DropReason::TcpCsum));
    let mut p = c.data_packet(&[9; 100]);
    p[36] ^= 0x55;
    let now = c.t.now;
    c.t.stack.receive_with(now, &p, true);
    assert_eq!(c.hits() - hits, 1, "taken by the fast path");
    assert_eq!(c.read(), [9; 100], "and delivered");
    c.seq += 100;
    c.tsval += 1;
    let mut p = c.data_packet(&[8; 100]);
    p[36] ^= 0x55;
    c.t.stack.receive_with(now, &p, false);
    assert_eq!(
        c.drops(DropReason::TcpCsum) - csum,
        1,
        "unvouched: verified"
    );
    assert_eq!(c.hits() - hits, 1, "and not the fast path's");
    assert_eq!(c.read(), b"", "nothing delivered");
}

/// A malformed variant of a good packet: what it is, the general path's drop reason, and
/// how to make it.
type Spoil = (&'static str, DropReason, fn(&mut Vec<u8>));

/// Segments of the connection's tuple with the fast path's shape but malformed are
/// dropped with the reason the general path gives (Linux `ip_rcv_core`, `tcp_v4_rcv`),
/// never delivered, never a panic; the fast path takes none of them. Catches: a fast path
/// that skips the IP or TCP checksum, the total-length check, or the header-length bound.
#[test]
fn malformed_segments_are_dropped_with_the_general_paths_reasons() {
    let cases: [Spoil; 6] = [
        ("bad TCP checksum", DropReason::TcpCsum, |p| p[36] ^= 0x55),
        ("bad IP checksum", DropReason::IpCsum, |p| p[10] ^= 0x55),
        ("total length past the end", DropReason::IpTruncated, |p| {
            p.truncate(p.len() - 1);
        }),
        (
            "data offset past the end (60 bytes)",
            DropReason::TcpHdr,
            |p| {
                p[32] = 0xf0;
                fix_tcp_checksum(p);
            },
        ),
        (
            "data offset past a short segment",
            DropReason::TcpHdr,
            |p| {
                // 8 words of header, 24 bytes of segment: the timestamp option's place cut.
                p.truncate(44);
                p[2..4].copy_from_slice(&44u16.to_be_bytes());
                fix_ip_checksum(p);
                fix_tcp_checksum(p);
            },
        ),
        ("TCP header cut short", DropReason::TcpHdr, |p| {
            p.truncate(30);
            p[2..4].copy_from_slice(&30u16.to_be_bytes());
            fix_ip_checksum(p);
        }),
    ];
    for (what, reason, spoil) in cases {
        let mut c = established();
        let mut p = c.data_packet(&[7; 10]);
        spoil(&mut p);
        let (hits, drops) = (c.hits(), c.drops(reason));
        c.receive(&p);
        assert_eq!(c.drops(reason) - drops, 1, "{what}: dropped as {reason:?}");
        assert_eq!(c.hits(), hits, "{what}: not the fast path's");
        assert_eq!(c.read(), b"", "{what}: nothing delivered");
        // The connection is unharmed: the good segment is taken.
        let p = c.data_packet(&[7; 10]);
        c.receive(&p);
        assert_eq!(c.read(), [7; 10], "{what}: then the good segment");
    }
}

/// Well-formed segments that are not acceptable are the connection's to refuse, as on
/// the general path (RFC 9293 §3.10.7.4, RFC 7323 §5.3 PAWS): out of window and failing
/// PAWS, each dropped with its reason and answered with a duplicate ACK, the data not
/// delivered. Catches: a fast path that queues data without the connection's sequence
/// and PAWS checks.
#[test]
fn unacceptable_segments_are_refused_with_their_reasons() {
    let mut c = established();
    c.t.recv_all();
    // Beyond the window's right edge.
    let saved = c.seq;
    c.seq = c.seq.wrapping_add(1 << 30);
    let p = c.data_packet(&[1; 10]);
    c.seq = saved;
    let drops = c.drops(DropReason::TcpInvalidSequence);
    c.receive(&p);
    assert_eq!(
        c.drops(DropReason::TcpInvalidSequence) - drops,
        1,
        "out of window"
    );
    assert_eq!(c.read(), b"");
    let ack = c.t.recv().expect("a duplicate ACK answers it");
    assert!(ack.has(Flags::ACK) && ack.ack == c.seq, "{ack:?}");

    // An old timestamp (PAWS), in window.
    c.tsval = 50;
    let p = c.data_packet(&[2; 10]);
    let drops = c.drops(DropReason::TcpPaws);
    c.receive(&p);
    assert_eq!(c.drops(DropReason::TcpPaws) - drops, 1, "PAWS");
    assert_eq!(c.read(), b"");
    assert!(c.t.recv().is_some_and(|s| s.ack == c.seq), "answered");

    c.tsval = 200;
    let p = c.data_packet(&[3; 10]);
    c.receive(&p);
    assert_eq!(c.read(), [3; 10], "then in-order data is taken");
}

/// What the fast path does not serve goes the general way and is delivered: IP options
/// (IHL 6, a NOP option padded), SACK blocks in the TCP options, and a segment with FIN.
/// Catches: a fast path that takes such segments (the hit count) or drops them.
#[test]
fn segments_the_fast_path_leaves_are_delivered_by_the_general_path() {
    let mut c = established();
    let hits = c.hits();

    // IPv4 with 4 bytes of options (four NOPs: RFC 791 §3.1 option type 1).
    let p = c.data_packet(b"ip options");
    let mut q = p[..20].to_vec();
    q.extend_from_slice(&[1, 1, 1, 1]);
    q.extend_from_slice(&p[20..]);
    q[0] = 0x46;
    let total = q.len() as u16;
    q[2..4].copy_from_slice(&total.to_be_bytes());
    fix_ip_checksum(&mut q);
    assert_eq!(ipv4::Packet::new_unchecked(&q[..]).header_len(), 24);
    c.receive(&q);
    c.seq += 10;
    assert_eq!(c.read(), b"ip options");

    // SACK blocks (a D-SACK of old data): options other than NOP NOP TS.
    let mut seg = Seg::ack(c.seq, c.ack)
        .data(b"with sack")
        .ts(c.tsval, c.tsecr)
        .sack(&[(c.ack.wrapping_sub(1), c.ack)]);
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    c.receive(&build(&seg, *PEER.ip(), LOCAL_IP));
    c.seq += 9;
    assert_eq!(c.read(), b"with sack");

    // FIN with the data.
    let mut seg = Seg::ack(c.seq, c.ack)
        .data(b"last")
        .ts(c.tsval, c.tsecr)
        .fin();
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    c.receive(&build(&seg, *PEER.ip(), LOCAL_IP));
    assert_eq!(c.read(), b"last");
    assert_eq!(c.t.read(c.h), None, "end of stream");

    assert_eq!(c.hits(), hits, "none of them took the fast path");
}

/// A segment from the peer's port `port` (the connection's other fields as `c`'s).
fn from_port(c: &Conn, port: u16, seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    let mut seg = Seg::ack(seq, ack).data(data).ts(c.tsval, c.tsecr);
    (seg.src_port, seg.dst_port) = (port, 80);
    build(&seg, *PEER.ip(), LOCAL_IP)
}

/// Early demux remembers the last connection it found, so a run of segments skips the
/// table; segments of two connections interleaved each reach their own, all by the fast
/// path. Catches: a remembered connection used without comparing the tuple.
#[test]
fn interleaved_connections_each_get_their_own_data() {
    let mut c = established();
    // A second connection from port 40001, by hand (the fixture's peer is port 40000).
    let mut syn = Seg::syn(7000).mss(1460).ts(100, 0);
    (syn.src_port, syn.dst_port) = (40001, 80);
    c.receive(&build(&syn, *PEER.ip(), LOCAL_IP));
    let synack = c.t.recv().expect("SYN-ACK");
    let ack2 = synack.seq.wrapping_add(1);
    let p = from_port(&c, 40001, 7001, ack2, b"");
    c.receive(&p);
    let (h2, _) =
        c.t.stack
            .tcp_accept(c.t.listener.unwrap())
            .expect("accepted");
    let hits = c.hits();
    let (mut seq2, ack1) = (7001u32, c.ack);
    for i in 0..4u8 {
        let p = from_port(&c, PEER.port(), c.seq, ack1, &[i; 8]);
        c.receive(&p);
        c.seq += 8;
        let p = from_port(&c, 40001, seq2, ack2, &[100 + i; 8]);
        c.receive(&p);
        seq2 += 8;
    }
    let want = |base: u8| (0..4u8).flat_map(|i| [base + i; 8]).collect::<Vec<u8>>();
    assert_eq!(c.read(), want(0), "the first connection's bytes");
    assert_eq!(c.t.read(h2).unwrap(), want(100), "the second's");
    assert_eq!(c.hits() - hits, 8, "all by the fast path");
}

/// A connection that has left the established table (reset, its handle still held) is
/// not found by early demux however recently it was: a segment for its tuple goes the
/// general way, to the listener, whose answer to an ACK is a RST (RFC 9293 §3.10.7.2
/// "any acknowledgment is bad ... form a reset"). Catches: a remembered connection kept
/// after it left the table (the segment would reach the closed connection, unanswered).
#[test]
fn a_connection_that_left_the_table_is_not_found_again() {
    let mut c = established();
    let p = c.data_packet(b"one");
    c.receive(&p);
    c.seq += 3;
    assert_eq!(c.read(), b"one");
    c.t.recv_all();
    // An acceptable RST (at RCV.NXT) ends it: the user still holds the handle.
    let mut rst = Seg::rst(c.seq);
    (rst.src_port, rst.dst_port) = (PEER.port(), 80);
    c.receive(&build(&rst, *PEER.ip(), LOCAL_IP));
    assert!(
        c.t.stack.tcp_recv(c.t.now, c.h, &mut [0; 8]).is_err(),
        "reset"
    );
    let hits = c.hits();
    let p = c.data_packet(b"two");
    c.receive(&p);
    assert_eq!(c.hits(), hits, "not the fast path's");
    let reply = c.t.recv().expect("a RST answers it");
    assert!(reply.has(Flags::RST) && reply.seq == c.ack, "{reply:?}");
}
