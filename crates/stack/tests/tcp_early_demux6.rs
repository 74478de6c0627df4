//! The IPv6 receive fast path (early demux, Linux `tcp_v6_early_demux` with
//! `tcp_rcv_established`'s header prediction): an established connection's common segment
//! over IPv6 is checked and demultiplexed in one pass over its bytes, and everything else
//! takes the general path (`ipv6_input`, `tcp6_input`). What a user checks: in-order data
//! takes the fast path and is delivered with exactly the counters and answers of the
//! general path (each script is run with early demux on and off and every counter and
//! frame compared); a segment of the fast path's shape but malformed (bad checksum,
//! truncated, data offset past the end), from a bad source or with an extension header
//! that must drop it is dropped with the general path's reason, never delivered; what the
//! fast path does not serve (extension headers, SACK blocks, FIN) is still delivered by
//! the general path; connections of both families interleaved each get their own data;
//! and the fast path is taken over Ethernet.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use ustack_obs::{Counter, DropReason, Instant};
use ustack_stack::{Config, Ipv4Cidr, Ipv6Cidr, Stack, TcpHandle};
use ustack_testkit::tcp::{
    LOCAL_IP, PEER, Seg, SegTest, all_counters, build, build6, ethernet6_exchange, parse, parse6,
};
use ustack_wire::tcp::{self, Flags};

/// The stack under test and its scripted peer (documentation prefix, RFC 3849).
const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const PEER_PORT: u16 = 40000;

/// An accepted IPv6 connection on port 80 and where its peer stands (handshake with
/// timestamps: peer ISN 1000, TSval 100 on the SYN).
struct Conn {
    /// Every frame the stack sent after the handshake.
    sent: Vec<Vec<u8>>,
    t: SegTest,
    h: TcpHandle,
    /// The peer's sequence number and acknowledgment for its next segment.
    seq: u32,
    ack: u32,
    /// The timestamp option of the peer's next segment (TSval, TSecr).
    tsval: u32,
    tsecr: u32,
}

/// A stack on an IP link with IPv4 and IPv6 addresses, early demux `on` or off, listening
/// on `[LOCAL6]:80` and on IPv4 port 80 (a dual-stack listener on `::`).
fn stack(on: bool) -> SegTest {
    let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24)).with_ipv6(Ipv6Cidr::new(LOCAL6, 64));
    c.seed = Some(42);
    c.gateway = Some(*PEER.ip());
    let mut t = SegTest {
        stack: Stack::new(c),
        now: Instant::from_secs(1),
        port: 80,
        listener: None,
    };
    t.stack.set_tcp_early_demux(on);
    let any = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0));
    t.listener = Some(t.stack.tcp_listen(any, 128).unwrap());
    t
}

fn established(on: bool) -> Conn {
    let mut t = stack(on);
    let mut syn = Seg::syn(1000).mss(1440).ts(100, 0);
    (syn.src_port, syn.dst_port) = (PEER_PORT, 80);
    t.stack.receive(t.now, &build6(&syn, PEER6, LOCAL6));
    let synack = parse6(&t.stack.poll_transmit(t.now).expect("SYN-ACK")).expect("TCP/IPv6");
    assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
    let (ours, _) = synack.ts.expect("timestamps negotiated");
    let ack = synack.seq.wrapping_add(1);
    let mut seg = Seg::ack(1001, ack).ts(101, ours);
    (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
    t.stack.receive(t.now, &build6(&seg, PEER6, LOCAL6));
    let (h, peer) = t
        .stack
        .tcp_accept_addr(t.listener.unwrap())
        .expect("accepted");
    assert_eq!(
        peer,
        SocketAddr::V6(SocketAddrV6::new(PEER6, PEER_PORT, 0, 0))
    );
    Conn {
        t,
        h,
        seq: 1001,
        ack,
        tsval: 102,
        tsecr: ours,
        sent: Vec::new(),
    }
}

impl Conn {
    /// An in-order segment with `data` and `flags` (NOP NOP TS options).
    fn seg(&self, data: &[u8], flags: Flags) -> Seg {
        let mut seg = Seg::ack(self.seq, self.ack)
            .data(data)
            .ts(self.tsval, self.tsecr)
            .flags(flags);
        (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
        seg
    }

    /// The packet of an in-order data segment with `data` (ACK and PSH).
    fn data_packet(&self, data: &[u8]) -> Vec<u8> {
        build6(&self.seg(data, Flags::ACK | Flags::PSH), PEER6, LOCAL6)
    }

    /// Deliver `packet`, keeping what the stack sends in answer.
    fn receive(&mut self, packet: &[u8]) {
        let now = self.t.now;
        self.t.stack.receive(now, packet);
        while let Some(f) = self.t.stack.poll_transmit(now) {
            self.sent.push(f);
        }
    }

    /// Whatever the connection has to read now.
    fn read(&mut self) -> Vec<u8> {
        self.t.read(self.h).expect("not at end of stream")
    }

    /// Every counter, as `nstat` would show them.
    fn counters(&self) -> String {
        all_counters(self.t.stack.mib())
    }
}

/// Run `script` on a connection with early demux on and on one with it off: the same
/// counters (every one of them, drops by reason included) and the same frames sent, byte
/// for byte. Returns the fast path's hits in the run with it on.
fn same_both_ways(script: impl Fn(&mut Conn)) -> u64 {
    let (mut on, mut off) = (established(true), established(false));
    assert_eq!(on.counters(), off.counters(), "after the handshake");
    let hits = on.t.hits();
    script(&mut on);
    script(&mut off);
    assert_eq!(off.t.hits(), 0, "early demux off");
    assert_eq!(
        on.counters(),
        off.counters(),
        "the counters of the two paths"
    );
    assert_eq!(on.sent, off.sent, "the frames of the two paths");
    on.t.hits() - hits
}

/// Recompute the TCP checksum of an IPv6 packet without extension headers.
fn fix_tcp_checksum(p: &mut [u8]) {
    let end = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
    let end = end.min(p.len());
    tcp::Packet::new_unchecked(&mut p[40..end]).fill_checksum(&PEER6.into(), &LOCAL6.into());
}

/// Set the IPv6 Payload Length.
fn set_payload_len(p: &mut [u8], len: usize) {
    p[4..6].copy_from_slice(&(len as u16).to_be_bytes());
}

/// `p` with the extension header `ext` (its Next Header byte set to `p`'s) inserted after
/// the IPv6 header.
fn with_ext(p: &[u8], nh: u8, mut ext: Vec<u8>) -> Vec<u8> {
    ext[0] = p[6];
    let mut q = p[..40].to_vec();
    q[6] = nh;
    q.extend_from_slice(&ext);
    q.extend_from_slice(&p[40..]);
    let len = q.len() - 40;
    set_payload_len(&mut q, len);
    q
}

/// In-order data (with and without timestamps) takes the fast path, one hit per segment
/// with header prediction's TCPHPHits too, is delivered, and counts exactly what the
/// general path counts: Ip6InReceives, Ip6InOctets, the ECN class, Ip6InDelivers,
/// TcpInSegs, and the ACKs sent are the general path's bytes. Catches: a fast path never
/// taken, or one that skips, doubles or misattributes an IPv6 or TCP input counter.
#[test]
fn in_order_data_takes_the_fast_path_with_the_general_paths_counters() {
    let hits = same_both_ways(|c| {
        for i in 0..3u8 {
            let p = c.data_packet(&[i; 64]);
            c.receive(&p);
            c.seq += 64;
            c.tsval += 1;
            assert_eq!(c.read(), vec![i; 64], "segment {i}");
        }
        // No options at all (a 20-byte header), with an ECT(0) mark and a flow label.
        let mut seg = Seg::ack(c.seq, c.ack).data(b"no options");
        (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
        let mut p = build6(&seg, PEER6, LOCAL6);
        p[1] = 0x20 | 0x0a; // traffic class ECT(0), flow label 0xa_bcde
        p[2..4].copy_from_slice(&[0xbc, 0xde]);
        c.receive(&p);
        c.seq += 10;
        assert_eq!(c.read(), b"no options");
        // Ethernet-style padding past Payload Length is not data.
        let mut p = c.data_packet(b"padded");
        p.extend_from_slice(&[0xee; 6]);
        c.receive(&p);
        c.seq += 6;
        assert_eq!(c.read(), b"padded");
    });
    assert_eq!(hits, 5, "all five took the fast path");
    let c = {
        let mut c = established(true);
        let hp = c.t.counter(Counter::TcpExtTCPHPHits);
        let before = [
            Counter::Ip6InReceives,
            Counter::Ip6InDelivers,
            Counter::TcpInSegs,
        ]
        .map(|k| c.t.counter(k));
        let octets = c.t.counter(Counter::Ip6InOctets);
        let p = c.data_packet(&[9; 64]);
        c.receive(&p);
        assert_eq!(c.t.hits(), 1);
        assert_eq!(c.t.counter(Counter::TcpExtTCPHPHits) - hp, 1, "predicted");
        let after = [
            Counter::Ip6InReceives,
            Counter::Ip6InDelivers,
            Counter::TcpInSegs,
        ]
        .map(|k| c.t.counter(k));
        assert_eq!(after, before.map(|b| b + 1), "counted once each");
        assert_eq!(c.t.counter(Counter::Ip6InOctets) - octets, p.len() as u64);
        c
    };
    assert!(c.t.counter(Counter::Ip6InNoECTPkts) > 0);
}

/// A malformed or refused variant of a good packet: what it is, the general path's drop
/// reason, and how to make it.
type Spoil = (&'static str, DropReason, fn(&mut Vec<u8>));

/// Segments of the connection's tuple with the fast path's shape but malformed, from a
/// source the general path refuses, or with an extension header that drops them, are
/// dropped with the reason the general path gives (Linux `ip6_rcv_core`, `tcp_v6_rcv`,
/// `ip6_parse_tlv`), with every counter and answer as the general path's, never
/// delivered, never a panic; the fast path takes none of them. Catches: a fast path that
/// skips the TCP checksum, the Payload Length checks, the header-length bound, the
/// source checks or the Next Header check.
/// [`Stack::receive_with`] over IPv6: a segment whose TCP checksum the link vouched for
/// is taken by the fast path and delivered with a wrong checksum, not summed again; the
/// next frame, not vouched for, is verified and dropped. Catches: an IPv6 fast path that
/// verifies what the link vouched for (leaving it to the general path to sum twice).
#[test]
fn a_checksum_the_link_vouched_for_is_not_summed_on_the_fast_path() {
    let mut c = established(true);
    let hits = c.t.stack.tcp_early_demux_hits();
    let csum = c.t.stack.mib().drops(DropReason::TcpCsum);
    let mut p = c.data_packet(&[9; 100]);
    p[56] ^= 0x55;
    let now = c.t.now;
    c.t.stack.receive_with(now, &p, true);
    assert_eq!(
        c.t.stack.tcp_early_demux_hits() - hits,
        1,
        "the fast path's"
    );
    assert_eq!(c.read(), [9; 100], "and delivered");
    c.seq += 100;
    c.tsval += 1;
    let mut p = c.data_packet(&[8; 100]);
    p[56] ^= 0x55;
    c.t.stack.receive_with(now, &p, false);
    let dropped = c.t.stack.mib().drops(DropReason::TcpCsum) - csum;
    assert_eq!(dropped, 1, "unvouched: verified");
    assert_eq!(c.t.stack.tcp_early_demux_hits() - hits, 1);
    assert_eq!(c.read(), b"", "nothing delivered");
}

#[test]
fn malformed_segments_are_dropped_with_the_general_paths_reasons() {
    let cases: [Spoil; 8] = [
        ("bad TCP checksum", DropReason::TcpCsum, |p| p[56] ^= 0x55),
        (
            "Payload Length past the end",
            DropReason::Ip6Truncated,
            |p| {
                p.truncate(p.len() - 1);
            },
        ),
        (
            "data offset past the end (60 bytes)",
            DropReason::TcpHdr,
            |p| {
                p[52] = 0xf0;
                fix_tcp_checksum(p);
            },
        ),
        (
            "data offset past a short segment",
            DropReason::TcpHdr,
            |p| {
                // 8 words of header, 24 bytes of segment: the timestamp option's place cut.
                p.truncate(64);
                set_payload_len(p, 24);
                fix_tcp_checksum(p);
            },
        ),
        ("TCP header cut short", DropReason::TcpHdr, |p| {
            p.truncate(50);
            set_payload_len(p, 10);
        }),
        ("multicast source", DropReason::Ip6InvalidSource, |p| {
            p[8] = 0xff;
            fix_tcp_checksum(p);
        }),
        ("v4-mapped source", DropReason::Ip6InvalidSource, |p| {
            p[8..24].copy_from_slice(&LOCAL_IP.to_ipv6_mapped().octets());
        }),
        (
            "Hop-by-Hop option that must be discarded (type 01xxxxxx)",
            DropReason::Ip6Inhdr,
            |p| *p = with_ext(p, 0, vec![0, 0, 0x41, 4, 0, 0, 0, 0]),
        ),
    ];
    for (what, reason, spoil) in cases {
        for on in [true, false] {
            let mut c = established(on);
            let mut p = c.data_packet(&[7; 10]);
            spoil(&mut p);
            let (hits, drops) = (c.t.hits(), c.t.drops(reason));
            c.receive(&p);
            assert_eq!(
                c.t.drops(reason) - drops,
                1,
                "{what} ({on}): dropped as {reason:?}"
            );
            assert_eq!(c.t.hits(), hits, "{what}: not the fast path's");
            assert_eq!(c.read(), b"", "{what}: nothing delivered");
            // The connection is unharmed: the good segment is taken.
            let p = c.data_packet(&[7; 10]);
            c.receive(&p);
            assert_eq!(c.read(), [7; 10], "{what}: then the good segment");
        }
        let hits = same_both_ways(|c| {
            let mut p = c.data_packet(&[7; 10]);
            spoil(&mut p);
            c.receive(&p);
        });
        assert_eq!(hits, 0, "{what}");
    }
}

/// Well-formed segments that are not acceptable are the connection's to refuse, as on
/// the general path (RFC 9293 §3.10.7.4, RFC 7323 §5.3 PAWS): out of window and failing
/// PAWS, each dropped with its reason and answered with a duplicate ACK (the same bytes
/// either way), the data not delivered. Catches: a fast path that queues data without the
/// connection's sequence and PAWS checks.
#[test]
fn unacceptable_segments_are_refused_with_their_reasons() {
    let hits = same_both_ways(|c| {
        let saved = c.seq;
        c.seq = c.seq.wrapping_add(1 << 30);
        let p = c.data_packet(&[1; 10]);
        c.seq = saved;
        let drops = c.t.drops(DropReason::TcpInvalidSequence);
        c.receive(&p);
        assert_eq!(c.t.drops(DropReason::TcpInvalidSequence) - drops, 1);
        assert_eq!(c.read(), b"");
        let ack = parse6(c.sent.last().expect("a duplicate ACK")).unwrap();
        assert!(ack.has(Flags::ACK) && ack.ack == c.seq, "{ack:?}");
        c.tsval = 50;
        let p = c.data_packet(&[2; 10]);
        let drops = c.t.drops(DropReason::TcpPaws);
        c.receive(&p);
        assert_eq!(c.t.drops(DropReason::TcpPaws) - drops, 1, "PAWS");
        assert_eq!(c.read(), b"");
        c.tsval = 200;
        let p = c.data_packet(&[3; 10]);
        c.receive(&p);
        assert_eq!(c.read(), [3; 10], "then in-order data is taken");
    });
    assert_eq!(hits, 3, "the fast path found the connection each time");
}

/// What the fast path does not serve goes the general way and is delivered: a
/// Destination Options header (PadN only), an atomic fragment (RFC 8200 §4.5: offset 0,
/// M clear), a Hop-by-Hop header of padding, SACK blocks in the TCP options, a segment
/// with FIN. Catches: a fast path that takes such segments (the hit count) or drops them.
#[test]
fn segments_the_fast_path_leaves_are_delivered_by_the_general_path() {
    let hits = same_both_ways(|c| {
        let exts: [(&str, u8, Vec<u8>); 3] = [
            ("destination options", 60, vec![0, 0, 1, 4, 0, 0, 0, 0]),
            ("atomic fragment", 44, vec![0, 0, 0, 0, 0, 0, 0, 7]),
            ("hop-by-hop padding", 0, vec![0, 0, 1, 4, 0, 0, 0, 0]),
        ];
        for (what, nh, ext) in exts {
            let p = c.data_packet(what.as_bytes());
            c.receive(&with_ext(&p, nh, ext));
            c.seq += what.len() as u32;
            assert_eq!(c.read(), what.as_bytes(), "{what}");
        }
        let sack = c
            .seg(b"with sack", Flags::ACK)
            .sack(&[(c.ack.wrapping_sub(1), c.ack)]);
        c.receive(&build6(&sack, PEER6, LOCAL6));
        c.seq += 9;
        assert_eq!(c.read(), b"with sack");
        let fin = c.seg(b"last", Flags::ACK).fin();
        c.receive(&build6(&fin, PEER6, LOCAL6));
        assert_eq!(c.read(), b"last");
        assert_eq!(c.t.read(c.h), None, "end of stream");
    });
    assert_eq!(hits, 0, "none of them took the fast path");
}

/// Early demux remembers the last connection it found; an IPv6 connection and an IPv4
/// one of the same ports, and a second IPv6 one from another port, interleaved, each get
/// their own data, all by the fast path. Catches: a remembered connection used without
/// comparing its addresses (the IPv4 one has the same ports) or ports.
#[test]
fn interleaved_connections_of_both_families_each_get_their_own_data() {
    let mut c = established(true);
    // An IPv4 connection from the same port to the same port, and an IPv6 one from 40001.
    let open = |c: &mut Conn, v6: bool, port: u16| -> (TcpHandle, u32) {
        let mut syn = Seg::syn(7000).mss(1400).ts(100, 0);
        (syn.src_port, syn.dst_port) = (port, 80);
        let p = if v6 {
            build6(&syn, PEER6, LOCAL6)
        } else {
            build(&syn, *PEER.ip(), LOCAL_IP)
        };
        c.receive(&p);
        let f = c.sent.pop().expect("SYN-ACK");
        let synack = if v6 { parse6(&f) } else { parse(&f) }.unwrap();
        let mut ack = Seg::ack(7001, synack.seq.wrapping_add(1)).ts(101, synack.ts.unwrap().0);
        (ack.src_port, ack.dst_port) = (port, 80);
        let p = if v6 {
            build6(&ack, PEER6, LOCAL6)
        } else {
            build(&ack, *PEER.ip(), LOCAL_IP)
        };
        c.receive(&p);
        let (h, _) =
            c.t.stack
                .tcp_accept_addr(c.t.listener.unwrap())
                .expect("accepted");
        (h, synack.seq.wrapping_add(1))
    };
    let (h4, ack4) = open(&mut c, false, PEER_PORT);
    let (h6, ack6) = open(&mut c, true, 40001);
    let hits = c.t.hits();
    let seg = |seq: u32, ack: u32, port: u16, data: &[u8]| {
        let mut s = Seg::ack(seq, ack).data(data).ts(102, 0);
        (s.src_port, s.dst_port) = (port, 80);
        s
    };
    let (mut seq4, mut seq6) = (7001u32, 7001u32);
    for i in 0..4u8 {
        // The IPv4 connection's segment first: the next, of the IPv6 connection with the
        // same ports, must not be taken for it.
        let p = build(
            &seg(seq4, ack4, PEER_PORT, &[50 + i; 8]),
            *PEER.ip(),
            LOCAL_IP,
        );
        c.receive(&p);
        seq4 += 8;
        let p = build6(&seg(c.seq, c.ack, PEER_PORT, &[i; 8]), PEER6, LOCAL6);
        c.receive(&p);
        c.seq += 8;
        let p = build6(&seg(seq6, ack6, 40001, &[100 + i; 8]), PEER6, LOCAL6);
        c.receive(&p);
        seq6 += 8;
    }
    let want = |base: u8| (0..4u8).flat_map(|i| [base + i; 8]).collect::<Vec<u8>>();
    assert_eq!(c.read(), want(0), "the first IPv6 connection's bytes");
    assert_eq!(c.t.read(h4).unwrap(), want(50), "the IPv4 one's");
    assert_eq!(c.t.read(h6).unwrap(), want(100), "the second IPv6 one's");
    assert_eq!(c.t.hits() - hits, 12, "all by the fast path");
}

/// A connection that has left the established table (reset, its handle still held) is
/// not found by early demux however recently it was: a segment for its tuple goes the
/// general way, to the listener, whose answer to an ACK is a RST (RFC 9293 §3.10.7.2).
/// Catches: a remembered connection kept after it left the table.
#[test]
fn a_connection_that_left_the_table_is_not_found_again() {
    let mut c = established(true);
    let p = c.data_packet(b"one");
    c.receive(&p);
    c.seq += 3;
    assert_eq!(c.read(), b"one");
    let mut rst = Seg::rst(c.seq);
    (rst.src_port, rst.dst_port) = (PEER_PORT, 80);
    c.receive(&build6(&rst, PEER6, LOCAL6));
    assert!(
        c.t.stack.tcp_recv(c.t.now, c.h, &mut [0; 8]).is_err(),
        "reset"
    );
    let hits = c.t.hits();
    c.sent.clear();
    let p = c.data_packet(b"two");
    c.receive(&p);
    assert_eq!(c.t.hits(), hits, "not the fast path's");
    let reply = parse6(c.sent.first().expect("a RST answers it")).unwrap();
    assert!(reply.has(Flags::RST) && reply.seq == c.ack, "{reply:?}");
}

/// Over Ethernet (two stacks, frames carried by hand): a request/response exchange over
/// IPv6 takes the fast path on both ends, and every frame either side sends and every
/// counter is the same with early demux on and off. Catches: a fast path not reached
/// from Ethernet input, or one that changes what either end sends or counts.
#[test]
fn over_ethernet_the_fast_path_is_taken_and_changes_no_frame() {
    let on = ethernet6_exchange(true, true);
    let off = ethernet6_exchange(true, false);
    assert!(on.hits.0 >= 4 && on.hits.1 >= 4, "{:?}", on.hits);
    assert_eq!(off.hits, (0, 0));
    assert_eq!(on.frames, off.frames, "the frames of the two paths");
    assert_eq!(on.counters, off.counters, "the counters of the two paths");
}
