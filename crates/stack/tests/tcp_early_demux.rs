//! The receive fast path (early demux, Linux `tcp_v4_early_demux` and
//! `tcp_v6_early_demux` with `tcp_rcv_established`'s header prediction), each test run
//! for IPv4 and for IPv6 (`ipv4::NAME`, `ipv6::NAME`): an established connection's common
//! segment is checked and demultiplexed in one pass over its bytes, and everything else
//! takes the general path (`ipv4_input`/`ipv6_input`, `tcp_input`/`tcp6_input`). What a
//! user checks: in-order data takes the fast path and is delivered with exactly the
//! counters and answers of the general path (each script is run with early demux on and
//! off and every counter and frame compared); a segment of the fast path's shape but
//! malformed (bad checksum, truncated, data offset past the end), from a bad source, with
//! an IPv6 extension header that must drop it, or not TCP at all, is never taken by the
//! fast path and is dropped with the general path's reason, never delivered; what the
//! fast path does not serve (IPv4 options, IPv6 extension headers, SACK blocks, FIN) is
//! still delivered by the general path; connections interleaved (of both families over
//! IPv6) each get their own data; and over Ethernet the IPv6 fast path is taken.

use ustack_obs::{Counter, DropReason};
use ustack_stack::TcpHandle;
use ustack_testkit::for_both_families;
use ustack_testkit::tcp::{Family, LOCAL_IP, PEER, Seg, SegTest, all_counters, ethernet6_exchange};
use ustack_wire::checksum;
use ustack_wire::tcp::{self, Flags};

const PEER_PORT: u16 = PEER.port();

for_both_families!(
    in_order_data_takes_the_fast_path_with_the_general_paths_counters,
    malformed_segments_are_dropped_with_the_general_paths_reasons,
    a_packet_that_is_not_tcp_is_not_the_fast_paths,
    a_checksum_the_link_vouched_for_is_not_summed_on_the_fast_path,
    unacceptable_segments_are_refused_with_their_reasons,
    segments_the_fast_path_leaves_are_delivered_by_the_general_path,
    interleaved_connections_each_get_their_own_data,
    a_connection_that_left_the_table_is_not_found_again,
);

/// An accepted connection on port 80 and where its peer stands (handshake with
/// timestamps: peer ISN 1000, TSval 100 on the SYN).
struct Conn {
    fam: Family,
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

/// A connection of family `fam` on a stack with early demux `on` or off: IPv4 on an
/// IPv4-only stack listening on its address, IPv6 on a dual-stack one listening on `::`.
fn established(fam: Family, on: bool) -> Conn {
    let mut t = fam.listening(fam.config(), 80);
    t.stack.set_tcp_early_demux(on);
    let mss = match fam {
        Family::V4 => 1460,
        Family::V6 => 1440,
    };
    let mut syn = Seg::syn(1000).mss(mss).ts(100, 0);
    (syn.src_port, syn.dst_port) = (PEER_PORT, 80);
    let (h, synack) = fam.accept(&mut t, &syn, 65_535);
    Conn {
        ack: synack.seq.wrapping_add(1),
        tsecr: synack.ts.expect("timestamps negotiated").0,
        seq: 1001,
        tsval: 102,
        fam,
        t,
        h,
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
        self.fam.build(&self.seg(data, Flags::ACK | Flags::PSH))
    }

    /// Deliver `packet`, keeping what the stack sends in answer.
    fn receive(&mut self, packet: &[u8]) {
        let now = self.t.now;
        self.t.stack.receive(now, packet);
        while let Some(f) = self.t.stack.poll_transmit(now) {
            self.sent.push(f);
        }
    }

    /// The last segment the stack sent.
    fn last_sent(&self) -> Option<Seg> {
        self.fam.parse(self.sent.last()?)
    }

    /// Whatever the connection has to read now.
    fn read(&mut self) -> Vec<u8> {
        self.t.read(self.h).expect("not at end of stream")
    }

    fn counters(&self) -> String {
        all_counters(self.t.stack.mib())
    }
}

/// Run `script` on a connection of `fam` with early demux on and on one with it off: the
/// same counters (every one of them, drops by reason included) and the same frames sent,
/// byte for byte. Returns the fast path's hits in the run with it on.
fn same_both_ways(fam: Family, script: impl Fn(&mut Conn)) -> u64 {
    let (mut on, mut off) = (established(fam, true), established(fam, false));
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

/// Recompute the TCP checksum of a packet without IPv4 options or IPv6 extension
/// headers (over what its IP length says, or what there is if less).
fn fix_tcp_checksum(fam: Family, p: &mut [u8]) {
    let h = fam.header_len();
    let end = match fam {
        Family::V4 => usize::from(u16::from_be_bytes([p[2], p[3]])),
        Family::V6 => h + usize::from(u16::from_be_bytes([p[4], p[5]])),
    };
    let end = end.min(p.len());
    tcp::Packet::new_unchecked(&mut p[h..end]).fill_checksum(&fam.peer(), &fam.local());
}

/// Recompute the IPv4 header checksum.
fn fix_ip_checksum(p: &mut [u8]) {
    let ihl = usize::from(p[0] & 0xf) * 4;
    p[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// Set the IP length of `p` to its IP header and `tcp_len` bytes of TCP: the IPv4 Total
/// Length (the header checksum fixed) or the IPv6 Payload Length.
fn set_tcp_len(fam: Family, p: &mut [u8], tcp_len: usize) {
    match fam {
        Family::V4 => {
            p[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            fix_ip_checksum(p);
        }
        Family::V6 => p[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes()),
    }
}

/// `p` (IPv6) with the extension header `ext` (its Next Header byte set to `p`'s)
/// inserted after the IPv6 header.
fn with_ext(p: &[u8], nh: u8, mut ext: Vec<u8>) -> Vec<u8> {
    ext[0] = p[6];
    let mut q = p[..40].to_vec();
    q[6] = nh;
    q.extend_from_slice(&ext);
    q.extend_from_slice(&p[40..]);
    let len = q.len() - 40;
    set_tcp_len(Family::V6, &mut q, len);
    q
}

/// The counters of IP input for a delivered packet, and TCP's.
fn input_counters(fam: Family) -> [Counter; 3] {
    match fam {
        Family::V4 => [
            Counter::IpInReceives,
            Counter::IpInDelivers,
            Counter::TcpInSegs,
        ],
        Family::V6 => [
            Counter::Ip6InReceives,
            Counter::Ip6InDelivers,
            Counter::TcpInSegs,
        ],
    }
}

/// In-order data (with and without timestamps, IPv6 also with an ECN mark and a flow
/// label, and with link padding past the IP length) takes the fast path, one hit per
/// segment with header prediction's TCPHPHits too, is delivered, and counts exactly what
/// the general path counts: IpInReceives/Ip6InReceives, Ip6InOctets and the ECN class,
/// IpInDelivers/Ip6InDelivers, TcpInSegs, and the ACKs sent are the general path's bytes.
/// Catches: a fast path never taken, or one that skips, doubles or misattributes an IP or
/// TCP input counter.
fn in_order_data_takes_the_fast_path_with_the_general_paths_counters(fam: Family) {
    let hits = same_both_ways(fam, |c| {
        for i in 0..3u8 {
            let p = c.data_packet(&[i; 64]);
            c.receive(&p);
            c.seq += 64;
            c.tsval += 1;
            assert_eq!(c.read(), vec![i; 64], "segment {i}");
        }
        // No options at all (a 20-byte header); over IPv6 with an ECT(0) mark and a flow
        // label.
        let mut seg = Seg::ack(c.seq, c.ack).data(b"no options");
        (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
        let mut p = c.fam.build(&seg);
        if c.fam == Family::V6 {
            p[1] = 0x20 | 0x0a; // traffic class ECT(0), flow label 0xa_bcde
            p[2..4].copy_from_slice(&[0xbc, 0xde]);
        }
        c.receive(&p);
        c.seq += 10;
        assert_eq!(c.read(), b"no options");
        // Ethernet-style padding past the IP length is not data.
        let mut p = c.data_packet(b"padded");
        p.extend_from_slice(&[0xee; 6]);
        c.receive(&p);
        c.seq += 6;
        assert_eq!(c.read(), b"padded");
    });
    assert_eq!(hits, 5, "all five took the fast path");

    let mut c = established(fam, true);
    assert_eq!(c.t.hits(), 0, "the handshake is not the fast path's");
    let hp = c.t.counter(Counter::TcpExtTCPHPHits);
    let before = input_counters(fam).map(|k| c.t.counter(k));
    let octets = c.t.counter(Counter::Ip6InOctets);
    let mut bytes = 0;
    for i in 0..3u8 {
        let p = c.data_packet(&[i; 64]);
        c.receive(&p);
        bytes += p.len() as u64;
        c.seq += 64;
        c.tsval += 1;
        assert_eq!(c.read(), vec![i; 64], "segment {i}");
    }
    assert_eq!(c.t.hits(), 3, "all three took the fast path");
    assert_eq!(
        c.t.counter(Counter::TcpExtTCPHPHits) - hp,
        3,
        "and were predicted"
    );
    let after = input_counters(fam).map(|k| c.t.counter(k));
    assert_eq!(after, before.map(|b| b + 3), "counted once each");
    if fam == Family::V6 {
        assert_eq!(c.t.counter(Counter::Ip6InOctets) - octets, bytes);
        assert!(c.t.counter(Counter::Ip6InNoECTPkts) > 0);
    }
    // No options at all (a 20-byte header) is the fast path's too.
    let mut seg = Seg::ack(c.seq, c.ack).data(b"no options");
    (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
    let p = fam.build(&seg);
    c.receive(&p);
    assert_eq!(c.t.hits(), 4);
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
fn a_checksum_the_link_vouched_for_is_not_summed_on_the_fast_path(fam: Family) {
    let mut c = established(fam, true);
    let hits = c.t.stack.tcp_early_demux_hits();
    let csum = c.t.stack.mib().drops(DropReason::TcpCsum);
    let spoil = |p: &mut Vec<u8>| p[fam.header_len() + 16] ^= 0x55;
    let mut p = c.data_packet(&[9; 100]);
    spoil(&mut p);
    let now = c.t.now;
    c.t.stack.receive_with(now, &p, true);
    let taken = c.t.stack.tcp_early_demux_hits() - hits;
    assert_eq!(taken, 1, "taken by the fast path");
    assert_eq!(c.read(), [9; 100], "and delivered");
    c.seq += 100;
    c.tsval += 1;
    let mut p = c.data_packet(&[8; 100]);
    spoil(&mut p);
    c.t.stack.receive_with(now, &p, false);
    let dropped = c.t.stack.mib().drops(DropReason::TcpCsum) - csum;
    assert_eq!(dropped, 1, "unvouched: verified");
    let taken = c.t.stack.tcp_early_demux_hits() - hits;
    assert_eq!(taken, 1, "and not the fast path's");
    assert_eq!(c.read(), b"", "nothing delivered");
}

/// A malformed or refused variant of a good packet: what it is, the general path's drop
/// reason, and how to make it.
type Spoil = (&'static str, DropReason, fn(Family, &mut Vec<u8>));

/// The malformed variants of a good packet of `fam`: those of both families' shape, then
/// the family's own.
fn spoils(fam: Family) -> Vec<Spoil> {
    let truncated = match fam {
        Family::V4 => DropReason::IpTruncated,
        Family::V6 => DropReason::Ip6Truncated,
    };
    let mut cases: Vec<Spoil> = vec![
        ("bad TCP checksum", DropReason::TcpCsum, |f, p| {
            p[f.header_len() + 16] ^= 0x55;
        }),
        ("IP length past the end", truncated, |_, p| {
            p.truncate(p.len() - 1);
        }),
        (
            "data offset past the end (60 bytes)",
            DropReason::TcpHdr,
            |f, p| {
                p[f.header_len() + 12] = 0xf0;
                fix_tcp_checksum(f, p);
            },
        ),
        (
            "data offset past a short segment",
            DropReason::TcpHdr,
            |f, p| {
                // 8 words of header, 24 bytes of segment: the timestamp option's place cut.
                p.truncate(f.header_len() + 24);
                set_tcp_len(f, p, 24);
                fix_tcp_checksum(f, p);
            },
        ),
        ("TCP header cut short", DropReason::TcpHdr, |f, p| {
            p.truncate(f.header_len() + 10);
            set_tcp_len(f, p, 10);
        }),
    ];
    match fam {
        Family::V4 => cases.push(("bad IP checksum", DropReason::IpCsum, |_, p| {
            p[10] ^= 0x55;
        })),
        Family::V6 => cases.extend::<[Spoil; 3]>([
            ("multicast source", DropReason::Ip6InvalidSource, |f, p| {
                p[8] = 0xff;
                fix_tcp_checksum(f, p);
            }),
            ("v4-mapped source", DropReason::Ip6InvalidSource, |_, p| {
                p[8..24].copy_from_slice(&LOCAL_IP.to_ipv6_mapped().octets());
            }),
            (
                "Hop-by-Hop option that must be discarded (type 01xxxxxx)",
                DropReason::Ip6Inhdr,
                |_, p| *p = with_ext(p, 0, vec![0, 0, 0x41, 4, 0, 0, 0, 0]),
            ),
        ]),
    }
    cases
}

/// Segments of the connection's tuple with the fast path's shape but malformed, from a
/// source the general path refuses, or with an extension header that drops them, are
/// dropped with the reason the general path gives (Linux `ip_rcv_core`, `tcp_v4_rcv`;
/// `ip6_rcv_core`, `tcp_v6_rcv`, `ip6_parse_tlv`), with every counter and answer as the
/// general path's, never delivered, never a panic; the fast path takes none of them.
/// Catches: a fast path that skips the IP or TCP checksum, the IP length checks, the
/// header-length bound, the source checks or the Next Header check.
fn malformed_segments_are_dropped_with_the_general_paths_reasons(fam: Family) {
    for (what, reason, spoil) in spoils(fam) {
        for on in [true, false] {
            let mut c = established(fam, on);
            let mut p = c.data_packet(&[7; 10]);
            spoil(fam, &mut p);
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
        let hits = same_both_ways(fam, |c| {
            let mut p = c.data_packet(&[7; 10]);
            spoil(fam, &mut p);
            c.receive(&p);
        });
        assert_eq!(hits, 0, "{what}");
    }
}

/// A packet whose IPv4 Protocol or IPv6 Next Header is not TCP (UDP here) carrying the
/// bytes of the connection's in-order segment, its TCP checksum right (the pseudo-header
/// with TCP's number), is not TCP's: the fast path does not take it and the connection
/// gets nothing from it (the general path hands it to UDP), with the same counters and
/// answers either way. Catches: a fast path that does not check the Protocol/Next Header
/// field (it would deliver the bytes as the connection's data).
fn a_packet_that_is_not_tcp_is_not_the_fast_paths(fam: Family) {
    let hits = same_both_ways(fam, |c| {
        let mut p = c.data_packet(b"not tcp");
        match c.fam {
            Family::V4 => {
                p[9] = 17;
                fix_ip_checksum(&mut p);
            }
            Family::V6 => p[6] = 17,
        }
        c.receive(&p);
        assert_eq!(c.read(), b"", "nothing delivered");
        // The connection is unharmed: the good segment is taken.
        let p = c.data_packet(b"tcp");
        c.receive(&p);
        assert_eq!(c.read(), b"tcp", "then the good segment");
    });
    assert_eq!(hits, 1, "only the TCP segment took the fast path");
}

/// Well-formed segments that are not acceptable are the connection's to refuse, as on
/// the general path (RFC 9293 §3.10.7.4, RFC 7323 §5.3 PAWS): out of window and failing
/// PAWS, each dropped with its reason and answered with a duplicate ACK (the same bytes
/// either way), the data not delivered. Catches: a fast path that queues data without the
/// connection's sequence and PAWS checks.
fn unacceptable_segments_are_refused_with_their_reasons(fam: Family) {
    let hits = same_both_ways(fam, |c| {
        // Beyond the window's right edge.
        let saved = c.seq;
        c.seq = c.seq.wrapping_add(1 << 30);
        let p = c.data_packet(&[1; 10]);
        c.seq = saved;
        let drops = c.t.drops(DropReason::TcpInvalidSequence);
        c.receive(&p);
        assert_eq!(
            c.t.drops(DropReason::TcpInvalidSequence) - drops,
            1,
            "out of window"
        );
        assert_eq!(c.read(), b"");
        let ack = c.last_sent().expect("a duplicate ACK answers it");
        assert!(ack.has(Flags::ACK) && ack.ack == c.seq, "{ack:?}");
        // An old timestamp (PAWS), in window.
        c.tsval = 50;
        let p = c.data_packet(&[2; 10]);
        let (drops, sent) = (c.t.drops(DropReason::TcpPaws), c.sent.len());
        c.receive(&p);
        assert_eq!(c.t.drops(DropReason::TcpPaws) - drops, 1, "PAWS");
        assert_eq!(c.read(), b"");
        assert!(c.sent.len() > sent, "answered");
        assert!(c.last_sent().is_some_and(|s| s.ack == c.seq), "answered");
        c.tsval = 200;
        let p = c.data_packet(&[3; 10]);
        c.receive(&p);
        assert_eq!(c.read(), [3; 10], "then in-order data is taken");
    });
    assert_eq!(hits, 3, "the fast path found the connection each time");
}

/// What the fast path does not serve goes the general way and is delivered: over IPv4 IP
/// options (IHL 6, four NOPs); over IPv6 a Destination Options header (PadN only), an
/// atomic fragment (RFC 8200 §4.5: offset 0, M clear), a Hop-by-Hop header of padding;
/// SACK blocks in the TCP options; a segment with FIN. Catches: a fast path that takes
/// such segments (the hit count) or drops them.
fn segments_the_fast_path_leaves_are_delivered_by_the_general_path(fam: Family) {
    let hits = same_both_ways(fam, |c| {
        match c.fam {
            Family::V4 => {
                // IPv4 with 4 bytes of options (four NOPs: RFC 791 §3.1 option type 1).
                let p = c.data_packet(b"ip options");
                let mut q = p[..20].to_vec();
                q.extend_from_slice(&[1, 1, 1, 1]);
                q.extend_from_slice(&p[20..]);
                q[0] = 0x46;
                let total = q.len() as u16;
                q[2..4].copy_from_slice(&total.to_be_bytes());
                fix_ip_checksum(&mut q);
                assert_eq!(
                    ustack_wire::ipv4::Packet::new_unchecked(&q[..]).header_len(),
                    24
                );
                c.receive(&q);
                c.seq += 10;
                assert_eq!(c.read(), b"ip options");
            }
            Family::V6 => {
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
            }
        }
        // SACK blocks (a D-SACK of old data): options other than NOP NOP TS.
        let sack = c
            .seg(b"with sack", Flags::ACK)
            .sack(&[(c.ack.wrapping_sub(1), c.ack)]);
        c.receive(&c.fam.build(&sack));
        c.seq += 9;
        assert_eq!(c.read(), b"with sack");
        // FIN with the data.
        let fin = c.seg(b"last", Flags::ACK).fin();
        c.receive(&c.fam.build(&fin));
        assert_eq!(c.read(), b"last");
        assert_eq!(c.t.read(c.h), None, "end of stream");
    });
    assert_eq!(hits, 0, "none of them took the fast path");
}

/// Early demux remembers the last connection it found, so a run of segments skips the
/// table; a second connection of the family from port 40001 and (over IPv6, on the
/// dual-stack stack) an IPv4 one of the same ports as the first, interleaved with it,
/// each get their own data, all by the fast path. Catches: a remembered connection used
/// without comparing its addresses (the IPv4 one has the same ports) or ports.
fn interleaved_connections_each_get_their_own_data(fam: Family) {
    let mut c = established(fam, true);
    // Open a connection of family `f` from `port`: its handle and our ISN + 1.
    let open = |c: &mut Conn, f: Family, port: u16| -> (TcpHandle, u32) {
        let mut syn = Seg::syn(7000).mss(1400).ts(100, 0);
        (syn.src_port, syn.dst_port) = (port, 80);
        c.receive(&f.build(&syn));
        let synack = f.parse(&c.sent.pop().expect("SYN-ACK")).unwrap();
        let mut ack = Seg::ack(7001, synack.seq.wrapping_add(1)).ts(101, synack.ts.unwrap().0);
        (ack.src_port, ack.dst_port) = (port, 80);
        c.receive(&f.build(&ack));
        let (h, _) =
            c.t.stack
                .tcp_accept_addr(c.t.listener.unwrap())
                .expect("accepted");
        (h, synack.seq.wrapping_add(1))
    };
    // The others: family, port, handle, our ISN + 1, the peer's next sequence number,
    // the first byte of their data.
    let mut others = Vec::new();
    if fam == Family::V6 {
        let (h, ack) = open(&mut c, Family::V4, PEER_PORT);
        others.push((Family::V4, PEER_PORT, h, ack, 7001u32, 50u8));
    }
    let (h, ack) = open(&mut c, fam, 40001);
    others.push((fam, 40001, h, ack, 7001, 100));
    let hits = c.t.hits();
    let seg = |seq: u32, ack: u32, port: u16, data: &[u8]| {
        let mut s = Seg::ack(seq, ack).data(data).ts(102, 0);
        (s.src_port, s.dst_port) = (port, 80);
        s
    };
    for i in 0..4u8 {
        // Over IPv6, the IPv4 connection's segment first: the next, of the IPv6
        // connection with the same ports, must not be taken for it.
        if let Some((f, port, _, ack, seq, base)) = others.first_mut()
            && *f != fam
        {
            c.receive(&f.build(&seg(*seq, *ack, *port, &[*base + i; 8])));
            *seq += 8;
        }
        let p = fam.build(&seg(c.seq, c.ack, PEER_PORT, &[i; 8]));
        c.receive(&p);
        c.seq += 8;
        let (f, port, _, ack, seq, base) = others.last_mut().unwrap();
        c.receive(&f.build(&seg(*seq, *ack, *port, &[*base + i; 8])));
        *seq += 8;
    }
    let want = |base: u8| (0..4u8).flat_map(|i| [base + i; 8]).collect::<Vec<u8>>();
    assert_eq!(c.read(), want(0), "the first connection's bytes");
    for (f, port, h, _, _, base) in &others {
        assert_eq!(
            c.t.read(*h).unwrap(),
            want(*base),
            "the {f:?} one's from {port}"
        );
    }
    assert_eq!(
        c.t.hits() - hits,
        4 * (1 + others.len() as u64),
        "all by the fast path"
    );
}

/// A connection that has left the established table (reset, its handle still held) is
/// not found by early demux however recently it was: a segment for its tuple goes the
/// general way, to the listener, whose answer to an ACK is a RST (RFC 9293 §3.10.7.2
/// "any acknowledgment is bad ... form a reset"). Catches: a remembered connection kept
/// after it left the table (the segment would reach the closed connection, unanswered).
fn a_connection_that_left_the_table_is_not_found_again(fam: Family) {
    let mut c = established(fam, true);
    let p = c.data_packet(b"one");
    c.receive(&p);
    c.seq += 3;
    assert_eq!(c.read(), b"one");
    // An acceptable RST (at RCV.NXT) ends it: the user still holds the handle.
    let mut rst = Seg::rst(c.seq);
    (rst.src_port, rst.dst_port) = (PEER_PORT, 80);
    c.receive(&fam.build(&rst));
    assert!(
        c.t.stack.tcp_recv(c.t.now, c.h, &mut [0; 8]).is_err(),
        "reset"
    );
    let hits = c.t.hits();
    c.sent.clear();
    let p = c.data_packet(b"two");
    c.receive(&p);
    assert_eq!(c.t.hits(), hits, "not the fast path's");
    let reply = fam
        .parse(c.sent.first().expect("a RST answers it"))
        .unwrap();
    assert!(reply.has(Flags::RST) && reply.seq == c.ack, "{reply:?}");
}

/// Over Ethernet (two stacks, frames carried by hand): a request/response exchange over
/// IPv6 takes the fast path on both ends, and every frame either side sends and every
/// counter is the same with early demux on and off. Catches: a fast path not reached
/// from Ethernet input, or one that changes what either end sends or counts.
#[test]
fn ipv6_over_ethernet_the_fast_path_is_taken_and_changes_no_frame() {
    let on = ethernet6_exchange(true, true);
    let off = ethernet6_exchange(true, false);
    assert!(on.hits.0 >= 4 && on.hits.1 >= 4, "{:?}", on.hits);
    assert_eq!(off.hits, (0, 0));
    assert_eq!(on.frames, off.frames, "the frames of the two paths");
    assert_eq!(on.counters, off.counters, "the counters of the two paths");
}
