//! IPv6 stage 1 between two ustack stacks over the `sim` link: duplicate address
//! detection, neighbour discovery and its failure, ping6 both ways (link-local and global),
//! fragments under reordering, a reassembly flood inside its bound, and bad headers
//! counted and answered as RFC 8200 and Linux do. Stage 2: UDP over IPv6 (both ways under
//! faults with exact accounting, port unreachable, checksums, fragmented datagrams).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_obs::{Counter, DropReason};
use ustack_stack::neigh::NudState;
use ustack_stack::{AddrState, Config, Ipv4Cidr, Ipv6Cidr, Mib, Stack, UdpHandle};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC, Pair, faulty};
use ustack_wire::ipv6ext::FragRepr;
use ustack_wire::{IpProtocol, ethernet, icmpv6, ndisc, udp};

const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
/// A host on the prefix that does not exist.
const NOBODY: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x99);

fn configs(a6: Ipv6Addr, b6: Ipv6Addr, link: &SimLinkConfig) -> (Config, Config) {
    let mut a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(a6, 64));
    let mut b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(b6, 64));
    a.seed = Some(1);
    b.seed = Some(2);
    a.mtu = link.mtu;
    b.mtu = link.mtu;
    (a, b)
}

/// Two dual-stack stacks, past duplicate address detection (one solicitation, one
/// second: RFC 4862's defaults).
fn pair(link: SimLinkConfig) -> Pair {
    let (a, b) = configs(A6, B6, &link);
    let mut p = Pair::with_configs(link, a, b);
    p.run_for(Duration::from_millis(1100));
    for (s, addr) in [(&p.a, A6), (&p.b, B6)] {
        assert_eq!(
            s.ipv6_addr_state(addr),
            Some(AddrState::Preferred),
            "{addr}"
        );
    }
    p
}

#[test]
fn dad_then_ping6_both_ways_with_neighbour_discovery() {
    let mut p = pair(SimLinkConfig::default());
    // Before DAD finished nothing could use the addresses: each stack sent its one DAD
    // solicitation per address (link-local and global) and nothing else.
    assert_eq!(p.a.mib().get(Counter::Icmp6OutNeighborSolicits), 2);
    let payload: Vec<u8> = (0..56u8).collect();
    p.a.ping6(p.now, B6, 0x66, 1, &payload).unwrap();
    p.run_for(Duration::from_millis(5));
    let r = p.a.recv_echo_reply6().expect("B answered A's ping6");
    assert_eq!(
        (r.src, r.ident, r.seq_no, &r.data[..], r.hop_limit),
        (B6, 0x66, 1, &payload[..], 64)
    );
    // Resolution took one solicitation and one solicited advertisement; B learnt A from
    // the solicitation (STALE, RFC 4861 §7.2.3) and A has B REACHABLE.
    assert_eq!(p.a.mib().get(Counter::Icmp6OutNeighborSolicits), 3);
    assert_eq!(p.b.mib().get(Counter::Icmp6OutNeighborAdvertisements), 1);
    let sys = p.a.sysctl().clone();
    assert_eq!(p.a.neighbours().peek(B6), Some(B_MAC));
    assert_eq!(
        p.a.neighbours().state(p.now, B6, &sys),
        Some(NudState::Reachable)
    );
    // B used it for its advertisement and reply: Linux's DELAY, probed 5 s later.
    assert_eq!(
        p.b.neighbours().state(p.now, A6, &sys),
        Some(NudState::Delay)
    );
    assert_eq!(p.b.mib().get(Counter::Icmp6InEchos), 1);
    assert_eq!(p.b.mib().get(Counter::Icmp6OutEchoReplies), 1);
    assert_eq!(p.a.mib().get(Counter::Icmp6InEchoReplies), 1);
    // The other way, to A's link-local address, from B's link-local one (RFC 6724 rule 2).
    let a_ll = ndisc::link_local_from_mac(A_MAC);
    let b_ll = ndisc::link_local_from_mac(B_MAC);
    assert_eq!(p.a.ipv6_addrs()[0].addr, a_ll, "link-local first");
    p.b.ping6(p.now, a_ll, 7, 9, b"from b").unwrap();
    p.run_for(Duration::from_millis(5));
    let r =
        p.b.recv_echo_reply6()
            .expect("A answered on its link-local address");
    assert_eq!((r.src, r.seq_no, &r.data[..]), (a_ll, 9, &b"from b"[..]));
    assert_eq!(p.a.neighbours().peek(b_ll), Some(B_MAC));
    // Every IPv6 packet that reached IP was delivered. The only drops: the other side's
    // two DAD solicitations, to groups this side is not in (link-level OTHERHOST).
    for s in [&p.a, &p.b] {
        let m = s.mib();
        assert_eq!(m.get(Counter::Ip6InReceives), m.get(Counter::Ip6InDelivers));
        assert_eq!(m.drops(DropReason::Otherhost), 2, "{m:?}");
        assert_eq!(m.drops_total(), 2, "{m:?}");
    }
    // IPv4 still works beside it, through the same neighbour table.
    p.a.ping(p.now, B_IP, 1, 1, b"v4").unwrap();
    p.run_for(Duration::from_millis(5));
    assert!(p.a.recv_echo_reply().is_some());
    assert_eq!(p.a.neighbours().peek(B_IP), Some(B_MAC));
}

#[test]
fn neighbour_discovery_failure_drops_the_queue_counted() {
    let mut p = pair(SimLinkConfig::default());
    for seq in 0..3 {
        p.a.ping6(p.now, NOBODY, 1, seq, b"anyone?").unwrap();
    }
    p.run_for(Duration::from_secs(5));
    let m = p.a.mib();
    // mcast_solicit (3) solicitations, then the three queued packets are dropped.
    assert_eq!(m.get(Counter::Icmp6OutNeighborSolicits), 2 + 3);
    assert_eq!(m.drops(DropReason::Ip6NeighFailed), 3);
    assert_eq!(m.get(Counter::Ip6OutDiscards), 3);
    assert_eq!(p.a.neighbours().peek(NOBODY), None);
    assert!(p.a.recv_echo_reply6().is_none());
}

#[test]
fn duplicate_addresses_are_detected_on_both_sides() {
    let link = SimLinkConfig::default();
    let (a, b) = configs(A6, A6, &link);
    let mut p = Pair::with_configs(link, a, b);
    p.run_for(Duration::from_secs(2));
    assert_eq!(p.a.ipv6_addr_state(A6), Some(AddrState::Duplicate));
    assert_eq!(p.b.ipv6_addr_state(A6), Some(AddrState::Duplicate));
    // Their link-local addresses differ and survive.
    let a_ll = ndisc::link_local_from_mac(A_MAC);
    assert_eq!(p.a.ipv6_addr_state(a_ll), Some(AddrState::Preferred));
}

#[test]
fn large_echoes_fragment_and_reassemble_under_reordering() {
    let mut p = pair(reordering_link(7));
    let mut replies = 0;
    for seq in 0..20u16 {
        let data = ustack_testkit::pattern(4000, u64::from(seq));
        p.a.ping6(p.now, B6, 9, seq, &data).unwrap();
        p.run_for(Duration::from_millis(20));
        while let Some(r) = p.a.recv_echo_reply6() {
            assert_eq!(r.data, ustack_testkit::pattern(4000, u64::from(r.seq_no)));
            replies += 1;
        }
    }
    assert_eq!(replies, 20, "every 4000-byte echo came back whole");
    // 4000 bytes + 8 of ICMPv6 header over 1500: 1448-byte pieces, three fragments.
    assert_fragmented_each_way(&p, 20);
}

/// Both directions of a link that holds back half the frames (reordering).
fn reordering_link(seed: u64) -> SimLinkConfig {
    let reordering = SimConfig {
        reorder: 0.5,
        delay: Duration::from_micros(50),
        reorder_delay: Duration::from_micros(400),
        ..SimConfig::default()
    };
    SimLinkConfig {
        seed,
        a_to_b: reordering.clone(),
        b_to_a: reordering,
        ..SimLinkConfig::default()
    }
}

/// Each stack sent `n` packets of three fragments and reassembled `n` such packets.
fn assert_fragmented_each_way(p: &Pair, n: u64) {
    for s in [&p.a, &p.b] {
        let m = s.mib();
        assert_eq!(m.get(Counter::Ip6FragOKs), n);
        assert_eq!(m.get(Counter::Ip6FragCreates), 3 * n);
        assert_eq!(m.get(Counter::Ip6ReasmOKs), n);
        assert_eq!(m.get(Counter::Ip6ReasmReqds), 3 * n);
        assert_eq!(m.get(Counter::Ip6ReasmFails), 0);
        assert_eq!(s.reassembly6_mem(), 0);
    }
}

/// An Ethernet frame from A to B carrying an IPv6 packet of `src` -> `dst` with the given
/// next header and payload (hop limit 64).
fn frame(src: Ipv6Addr, dst: Ipv6Addr, nh: u8, payload: &[u8]) -> Vec<u8> {
    ustack_testkit::ipv6_frame((A_MAC, B_MAC), src, dst, nh, payload)
}

/// An echo request from A6 to B6, as an ICMPv6 message with its checksum.
fn echo(data: &[u8]) -> Vec<u8> {
    let repr = icmpv6::Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data,
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut icmpv6::Packet::new_unchecked(&mut b[..]),
        &A6,
        &B6,
        true,
    );
    b
}

/// A fragment (Fragment header + data) of `ident` at `offset`.
fn frag(ident: u32, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + data.len()];
    FragRepr {
        next_header: IpProtocol::Icmpv6,
        offset,
        more_frags: more,
        ident,
    }
    .emit(&mut b);
    b[8..].copy_from_slice(data);
    b
}

#[test]
fn bad_headers_are_counted_and_answered() {
    let mut p = pair(SimLinkConfig::default());
    // Resolve both ways first, so the answers below are all there is.
    p.a.ping6(p.now, B6, 1, 1, b"warm").unwrap();
    p.run_for(Duration::from_millis(5));
    p.a.recv_echo_reply6().unwrap();
    let base = p.b.mib().clone();
    let d = |p: &Pair, r: DropReason| p.b.mib().drops(r) - base.drops(r);
    let c = |p: &Pair, k: Counter| p.b.mib().get(k) - base.get(k);

    let mut f = frame(A6, B6, 58, &echo(b"x"));
    f[ethernet::HEADER_LEN] = 0x50; // version 5
    p.b.receive(p.now, &f);
    assert_eq!(d(&p, DropReason::Ip6Inhdr), 1);

    let f = frame(A6, B6, 58, &echo(b"truncated"));
    p.b.receive(p.now, &f[..f.len() - 4]);
    assert_eq!(d(&p, DropReason::Ip6Truncated), 1);
    assert_eq!(c(&p, Counter::Ip6InTruncatedPkts), 1);

    let mcast_src: Ipv6Addr = "ff02::1".parse().unwrap();
    p.b.receive(p.now, &frame(mcast_src, B6, 58, &echo(b"x")));
    assert_eq!(d(&p, DropReason::Ip6InvalidSource), 1);

    p.b.receive(p.now, &frame(A6, NOBODY, 58, &echo(b"x")));
    assert_eq!(d(&p, DropReason::Ip6InaddrErrors), 1);
    assert_eq!(c(&p, Counter::Ip6InAddrErrors), 1);
    // A group B is not in (another host's solicited-node group): no MIB count but
    // InMcastPkts, as Linux's ip6_mc_input.
    p.b.receive(
        p.now,
        &frame(A6, ndisc::solicited_node(NOBODY), 58, &echo(b"x")),
    );
    assert_eq!(d(&p, DropReason::Ip6McastNotJoined), 1);
    assert_eq!(c(&p, Counter::Ip6InMcastPkts), 1);
    assert_eq!(c(&p, Counter::Ip6InAddrErrors), 1);

    // A malformed TCP header over IPv6: TCP's drop (delivered to TCP), no answer.
    p.b.receive(p.now, &frame(A6, B6, 6, &[0u8; 20]));
    assert_eq!(c(&p, Counter::TcpInSegs), 1);
    assert_eq!(d(&p, DropReason::TcpHdr) + d(&p, DropReason::TcpCsum), 1);
    p.run_for(Duration::from_millis(5));
    assert_eq!(c(&p, Counter::Icmp6OutMsgs), 0, "no error for any of these");

    // An unknown next header: Parameter Problem code 1 pointing at Next Header (offset 6).
    p.b.receive(p.now, &frame(A6, B6, 253, &[0u8; 8]));
    p.run_for(Duration::from_millis(5));
    assert_eq!(d(&p, DropReason::Ip6Noproto), 1);
    assert_eq!(c(&p, Counter::Ip6InUnknownProtos), 1);
    assert_eq!(p.a.mib().get(Counter::Icmp6InParmProblems), 1);

    // Destination Options with an unknown option of action 10: code 2, pointer at it.
    let mut opts = vec![58u8, 0, 0x9e, 0, 1, 2, 0, 0];
    opts.extend_from_slice(&echo(b"x"));
    p.b.receive(p.now, &frame(A6, B6, 60, &opts));
    // A Routing header with Segments Left 1: code 0, pointer at the Routing Type.
    let mut rh = vec![58u8, 0, 4, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&echo(b"x"));
    p.b.receive(p.now, &frame(A6, B6, 43, &rh));
    // A non-last fragment whose length is not a multiple of 8: code 0 at Payload Length.
    p.b.receive(p.now, &frame(A6, B6, 44, &frag(5, 0, true, &echo(b"odd"))));
    p.run_for(Duration::from_millis(5));
    assert_eq!(d(&p, DropReason::Ip6Inhdr), 1 + 3);
    assert_eq!(c(&p, Counter::Ip6InHdrErrors), 1 + 1 + 3);
    // The per-host limit (one a second, bursts of six) let all four errors through.
    assert_eq!(c(&p, Counter::Icmp6OutParmProblems), 4);
    assert_eq!(p.a.mib().get(Counter::Icmp6InParmProblems), 4);
    assert_eq!(p.b.reassembly6_mem(), 0);
}

/// The path MTU a Packet Too Big reports is stored per destination and used to fragment.
#[test]
fn packet_too_big_lowers_the_path_mtu() {
    let mut p = pair(SimLinkConfig::default());
    assert_eq!(p.b.path_mtu6(p.now, A6), 1500);
    // A router between says B's packets to A need 1280 (B's quote: a packet B sent).
    let mut quoted = frame(B6, A6, 58, &echo(b"big"))[ethernet::HEADER_LEN..].to_vec();
    quoted.truncate(48);
    let ptb = icmpv6::Repr::PacketTooBig {
        mtu: 1000, // below the minimum: raised to 1280 (RFC 8201 §4)
        data: &quoted,
    };
    let mut msg = vec![0u8; ptb.buffer_len()];
    ptb.emit(
        &mut icmpv6::Packet::new_unchecked(&mut msg[..]),
        &A6,
        &B6,
        true,
    );
    p.b.receive(p.now, &frame(A6, B6, 58, &msg));
    assert_eq!(p.b.mib().get(Counter::Icmp6InPktTooBigs), 1);
    assert_eq!(p.b.path_mtu6(p.now, A6), 1280);
    // B's reply to a 2000-byte echo now leaves in 1280-byte fragments.
    p.a.ping6(p.now, B6, 1, 1, &[7u8; 2000]).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.recv_echo_reply6().map(|r| r.data.len()), Some(2000));
    assert_eq!(p.b.mib().get(Counter::Ip6FragCreates), 2);
    // It expires after net.ipv6.route.mtu_expires.
    p.run_for(Duration::from_secs(601));
    assert_eq!(p.b.path_mtu6(p.now, A6), 1500);
}

#[test]
fn reassembly_flood_stays_inside_its_bound() {
    let mut p = pair(SimLinkConfig::default());
    let high = 256 * 1024;
    p.b.set_sysctl("net.ipv6.ip6frag_high_thresh", high)
        .unwrap();
    // 2,000 first fragments of packets that never complete, 1,024 bytes each: 2 MB.
    // Each looks like the start of an echo request (type 128), so that a Time Exceeded
    // may quote it (an ICMPv6 error may not be answered, RFC 4443 §2.4 (e.1)).
    let mut piece = [0x5au8; 1024];
    piece[0] = 128;
    for ident in 0..2000u32 {
        p.b.receive(p.now, &frame(A6, B6, 44, &frag(ident, 0, true, &piece)));
        assert!(p.b.reassembly6_mem() <= high as usize);
    }
    let m = p.b.mib();
    let refused = m.drops(DropReason::Ip6FragMemLimit);
    assert!(refused > 1500, "{refused} refused");
    assert_eq!(m.get(Counter::Ip6ReasmReqds), 2000);
    let held = 2000 - refused;
    // ip6frag_time (60 s) later every queue has expired; each first fragment gets a Time
    // Exceeded, as far as the rate limits allow.
    p.run_for(Duration::from_secs(61));
    let m = p.b.mib();
    assert_eq!(p.b.reassembly6_mem(), 0);
    assert_eq!(m.get(Counter::Ip6ReasmTimeout), held, "{m:?}");
    assert_eq!(m.drops(DropReason::Ip6FragTimeout), held);
    assert_eq!(m.get(Counter::Ip6ReasmFails), held + refused);
    let sent = m.get(Counter::Icmp6OutTimeExcds);
    let limited = m.get(Counter::Icmp6OutRateLimitHost) + m.get(Counter::IcmpOutRateLimitGlobal);
    assert_eq!(sent + limited, held);
    assert!(
        (1..=6).contains(&sent),
        "{sent} sent: a burst of six per host"
    );
}

/// A TUN-like link (no Ethernet): no neighbour discovery, no DAD, addresses usable at once.
#[test]
fn ip_link_needs_no_neighbour_discovery() {
    let link = SimLinkConfig {
        medium: ustack_stack::Medium::Ip,
        ..SimLinkConfig::default()
    };
    let mut a = Config::ip(Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A6, 64));
    let mut b = Config::ip(Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B6, 64));
    a.seed = Some(1);
    b.seed = Some(2);
    let mut p = Pair::with_configs(link, a, b);
    assert_eq!(p.a.ipv6_addrs().len(), 1, "no link-local on an IP link");
    p.a.ping6(p.now, B6, 1, 1, &[1u8; 3000]).unwrap();
    p.run_for(Duration::from_millis(5));
    assert_eq!(p.a.recv_echo_reply6().map(|r| r.data.len()), Some(3000));
    assert_eq!(
        p.a.mib().get(Counter::Icmp6OutMsgs),
        1,
        "only the echo: no NDP"
    );
}

/// Hop-by-Hop options as Linux takes them, an atomic fragment processed as a whole packet
/// (RFC 6946), and the echo sysctl.
#[test]
fn hop_by_hop_atomic_fragments_and_echo_ignore() {
    let mut p = pair(SimLinkConfig::default());
    p.a.ping6(p.now, B6, 1, 1, b"warm").unwrap();
    p.run_for(Duration::from_millis(5));
    let replies = |p: &Pair| p.b.mib().get(Counter::Icmp6OutEchoReplies);
    assert_eq!(replies(&p), 1);
    // Hop-by-Hop with Router Alert (RFC 2711) and PadN: fine, the echo is answered.
    let mut hbh = vec![58u8, 0, 5, 2, 0, 0, 1, 0];
    hbh.extend_from_slice(&echo(b"ra"));
    p.b.receive(p.now, &frame(A6, B6, 0, &hbh));
    p.run_for(Duration::from_millis(5));
    assert_eq!(replies(&p), 2);
    // Eight bytes of padding in a row: Linux refuses more than seven.
    let mut pad = vec![58u8, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    pad.extend_from_slice(&echo(b"pad"));
    p.b.receive(p.now, &frame(A6, B6, 0, &pad));
    p.run_for(Duration::from_millis(5));
    assert_eq!(replies(&p), 2);
    assert_eq!(p.b.mib().drops(DropReason::Ip6Inhdr), 1);
    // Hop-by-Hop anywhere but first: an unknown next header (RFC 8200 §4.3), pointer at
    // the Destination Options header's Next Header field (offset 40).
    let mut late = vec![0u8, 0, 1, 4, 0, 0, 0, 0];
    late.extend_from_slice(&hbh);
    p.b.receive(p.now, &frame(A6, B6, 60, &late));
    p.run_for(Duration::from_millis(5));
    assert_eq!(p.b.mib().drops(DropReason::Ip6Noproto), 1);
    assert_eq!(p.a.mib().get(Counter::Icmp6InParmProblems), 1);
    // An atomic fragment (offset 0, M clear): processed in place, never mixed with a
    // held fragment of the same Identification (RFC 6946 §4), which stays queued.
    p.b.receive(
        p.now,
        &frame(A6, B6, 44, &frag(9, 0, true, &echo(b"held it!"))),
    );
    assert!(p.b.reassembly6_mem() > 0);
    let before = p.b.mib().get(Counter::Ip6ReasmOKs);
    p.b.receive(
        p.now,
        &frame(A6, B6, 44, &frag(9, 0, false, &echo(b"atomic"))),
    );
    p.run_for(Duration::from_millis(5));
    assert_eq!(replies(&p), 3);
    assert_eq!(p.b.mib().get(Counter::Ip6ReasmOKs), before + 1);
    assert!(p.b.reassembly6_mem() > 0, "the held fragment is still held");
    assert_eq!(p.b.mib().get(Counter::Ip6ReasmFails), 0);
    // net.ipv6.icmp.echo_ignore_all: requests counted, not answered.
    p.b.set_sysctl("net.ipv6.icmp.echo_ignore_all", 1).unwrap();
    p.a.ping6(p.now, B6, 1, 2, b"ignored").unwrap();
    p.run_for(Duration::from_millis(5));
    assert_eq!(replies(&p), 3);
    assert_eq!(
        p.b.mib().get(Counter::Icmp6InEchos),
        4,
        "warm, ra, atomic, ignored"
    );
}

// ---- UDP over IPv6 (stage 2) ------------------------------------------------------------

/// Ping6 both ways so that neighbour discovery is done and later traffic is only UDP.
fn warm_up6(p: &mut Pair) {
    p.a.ping6(p.now, B6, 1, 1, b"warm").unwrap();
    p.b.ping6(p.now, A6, 2, 1, b"warm").unwrap();
    p.run_for(Duration::from_millis(10));
    assert!(p.a.recv_echo_reply6().is_some() && p.b.recv_echo_reply6().is_some());
}

/// Datagram `seq` of the accounting test: its number, then 96 bytes derived from it.
fn numbered(seq: u32) -> [u8; 100] {
    let mut d = [0u8; 100];
    d[..4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in d[4..].iter_mut().enumerate() {
        *b = (seq as usize + i) as u8;
    }
    d
}

/// Read every datagram waiting on `h`, checking each is intact and from `peer`.
fn drain6(s: &mut Stack, h: UdpHandle, peer: Ipv6Addr, got: &mut Vec<u32>) {
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = s.udp_recv_from_addr(h, &mut buf) {
        assert_eq!(from.ip(), IpAddr::V6(peer));
        assert_eq!(n, 100, "datagram length");
        let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
        assert_eq!(buf[..n], numbered(seq), "datagram {seq} intact");
        got.push(seq);
    }
}

fn all_drops(m: &Mib) -> u64 {
    DropReason::ALL.iter().map(|&r| m.drops(r)).sum()
}

/// One direction's identity: `sent` datagrams left the sender's UDP; each was read by the
/// receiver, lost on the wire, or dropped with a reason by one of the two stacks.
fn balance(sent: u64, read: u64, lost: u64, drops: u64) {
    assert_eq!(sent, read + lost + drops, "sent = read + lost + dropped");
}

/// Issue 15: 10,000 UDP datagrams over IPv6 both ways (A to B, then B echoing each back
/// from `[::]:9000`) under loss, reordering and corruption, with sent = read + lost +
/// dropped exactly in each direction, the Udp6 counters matching, and none of it in Udp.
#[test]
fn udp6_both_ways_under_faults_balance_exactly() {
    let mut p = pair(SimLinkConfig {
        seed: 3,
        ..SimLinkConfig::default()
    });
    warm_up6(&mut p);
    let a = p.a.udp_bind(SocketAddrV6::new(A6, 0, 0, 0)).unwrap();
    let b =
        p.b.udp_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 9000, 0, 0))
            .unwrap();
    let a_local = p.a.udp_local_sockaddr(a).unwrap();
    assert!(a_local.is_ipv6() && a_local.port() != 0, "{a_local}");
    p.link.set_config(Side::A, faulty(0.05, 0.05, 0.01));
    p.link.set_config(Side::B, faulty(0.05, 0.05, 0.01));
    const N: u32 = 10_000;

    // A to B.
    let (a0, b0, l0) = (
        p.a.mib().clone(),
        p.b.mib().clone(),
        p.link.stats(Side::A).clone(),
    );
    let mut at_b = Vec::new();
    for seq in 0..N {
        p.a.udp_send_to(p.now, a, &numbered(seq), SocketAddrV6::new(B6, 9000, 0, 0))
            .unwrap();
        if seq % 20 == 19 {
            p.run_for(Duration::from_micros(200));
            drain6(&mut p.b, b, A6, &mut at_b);
        }
    }
    p.run_for(Duration::from_secs(1));
    drain6(&mut p.b, b, A6, &mut at_b);
    let (ma, mb, l1) = (p.a.mib(), p.b.mib(), p.link.stats(Side::A));
    let d = |m: &Mib, m0: &Mib, c: Counter| m.get(c) - m0.get(c);
    let lost = l1.lost - l0.lost;
    assert!(
        lost > 250 && l1.corrupted - l0.corrupted > 50,
        "faults happened"
    );
    // Per layer: every frame B took reached IPv6 or was dropped at the link layer.
    let l2_drops: u64 = [
        DropReason::Otherhost,
        DropReason::UnhandledProto,
        DropReason::MacHdr,
    ]
    .iter()
    .map(|&r| mb.drops(r) - b0.drops(r))
    .sum();
    assert_eq!(
        d(mb, &b0, Counter::Ip6InReceives),
        (l1.delivered - l0.delivered) - l2_drops
    );
    let drops = all_drops(ma) - all_drops(&a0) + all_drops(mb) - all_drops(&b0);
    assert_eq!(d(ma, &a0, Counter::Udp6OutDatagrams), u64::from(N));
    balance(u64::from(N), at_b.len() as u64, lost, drops);
    assert_eq!(d(mb, &b0, Counter::Udp6InDatagrams), at_b.len() as u64);
    // Corrupted datagrams that reached UDP failed the pseudo-header checksum.
    assert_eq!(
        d(mb, &b0, Counter::Udp6InCsumErrors),
        mb.drops(DropReason::Udp6Csum) - b0.drops(DropReason::Udp6Csum)
    );
    let unique: std::collections::HashSet<_> = at_b.iter().collect();
    assert_eq!(unique.len(), at_b.len(), "none twice");
    assert!(
        at_b.windows(2).any(|w| w[0] > w[1]),
        "reordering reached UDP"
    );

    // B echoes each one back to the sender's address and port.
    let (a0, b0, l0) = (
        p.a.mib().clone(),
        p.b.mib().clone(),
        p.link.stats(Side::B).clone(),
    );
    let mut at_a = Vec::new();
    for (i, &seq) in at_b.iter().enumerate() {
        p.b.udp_send_to(p.now, b, &numbered(seq), a_local).unwrap();
        if i % 20 == 19 {
            p.run_for(Duration::from_micros(200));
            drain6(&mut p.a, a, B6, &mut at_a);
        }
    }
    p.run_for(Duration::from_secs(1));
    drain6(&mut p.a, a, B6, &mut at_a);
    let (ma, mb, l1) = (p.a.mib(), p.b.mib(), p.link.stats(Side::B));
    let drops = all_drops(ma) - all_drops(&a0) + all_drops(mb) - all_drops(&b0);
    assert_eq!(d(mb, &b0, Counter::Udp6OutDatagrams), at_b.len() as u64);
    balance(
        at_b.len() as u64,
        at_a.len() as u64,
        l1.lost - l0.lost,
        drops,
    );
    assert_eq!(d(ma, &a0, Counter::Udp6InDatagrams), at_a.len() as u64);
    assert!(at_a.len() as u64 > u64::from(N) * 8 / 10, "most came back");
    // Nothing of it is IPv4's.
    for m in [p.a.mib(), p.b.mib()] {
        for c in [Counter::UdpInDatagrams, Counter::UdpOutDatagrams] {
            assert_eq!(m.get(c), 0, "{c:?}");
        }
    }
    // /proc/net/snmp6's Udp6 lines, after Icmp6's, as Linux prints them.
    let snmp6 = p.a.mib().render_snmp6();
    let line = format!("{:<32}\t{}\n", "Udp6OutDatagrams", N);
    assert!(snmp6.contains(&line), "{snmp6}");
    assert!(snmp6.find("Icmp6OutMLDv2Reports") < snmp6.find("Udp6InDatagrams"));
}

/// RFC 4443 §3.1: a datagram to a port without a socket is answered with Destination
/// Unreachable code 4 (port unreachable), counted Udp6NoPorts, and the answers are
/// rate-limited per host (`net.ipv6.icmp.ratelimit`: a burst of six). An IPv4 socket does
/// not take IPv6 datagrams.
#[test]
fn closed_port_answered_with_port_unreachable_counted_and_limited() {
    let mut p = pair(SimLinkConfig::default());
    warm_up6(&mut p);
    let a = p.a.udp_bind(SocketAddrV6::new(A6, 5000, 0, 0)).unwrap();
    p.b.udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 4445))
        .unwrap();
    let base = p.b.mib().clone();
    p.a.udp_send_to(p.now, a, b"anyone?", SocketAddrV6::new(B6, 4444, 0, 0))
        .unwrap();
    p.run_for(Duration::from_millis(5));
    let (ma, mb) = (p.a.mib(), p.b.mib());
    assert_eq!(mb.get(Counter::Udp6NoPorts), 1);
    assert_eq!(mb.drops(DropReason::Udp6NoSocket), 1);
    assert_eq!(mb.get(Counter::UdpNoPorts), 0, "IPv4's counter untouched");
    assert_eq!(mb.get(Counter::Icmp6OutDestUnreachs), 1);
    assert_eq!(ma.get(Counter::Icmp6InDestUnreachs), 1);
    // The IPv4 socket on 0.0.0.0:4445 does not take an IPv6 datagram (sockets are of one
    // family: no dual-stack yet).
    p.a.udp_send_to(p.now, a, b"v4 socket?", SocketAddrV6::new(B6, 4445, 0, 0))
        .unwrap();
    // Then eight more: the burst allows six answers in all, the rest are limited.
    for _ in 0..8 {
        p.a.udp_send_to(p.now, a, b"again", SocketAddrV6::new(B6, 4444, 0, 0))
            .unwrap();
    }
    p.run_for(Duration::from_millis(5));
    let mb = p.b.mib();
    assert_eq!(
        mb.get(Counter::Udp6NoPorts) - base.get(Counter::Udp6NoPorts),
        10
    );
    assert_eq!(mb.get(Counter::Icmp6OutDestUnreachs), 6);
    assert_eq!(mb.get(Counter::Icmp6OutRateLimitHost), 4);
    assert_eq!(p.a.mib().get(Counter::Icmp6InDestUnreachs), 6);
}

/// A UDP datagram from A6:1000 to B6:9000 with its checksum, as bytes.
fn udp6(payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + payload.len()];
    udp::Repr {
        src_port: 1000,
        dst_port: 9000,
    }
    .emit(
        &mut udp::Packet::new_unchecked(&mut b[..]),
        &IpAddr::V6(A6),
        &IpAddr::V6(B6),
        payload.len(),
        |p| p.copy_from_slice(payload),
        true,
    );
    b
}

/// RFC 8200 §8.1: the checksum is mandatory over IPv6. A wrong one and a zero one are
/// both dropped and counted (Udp6InCsumErrors, Udp6InErrors, `UDP6_CSUM`), without an
/// ICMPv6 answer; a good one is delivered.
#[test]
fn bad_and_zero_checksums_are_dropped_and_counted() {
    let mut p = pair(SimLinkConfig::default());
    warm_up6(&mut p);
    let b = p.b.udp_bind(SocketAddrV6::new(B6, 9000, 0, 0)).unwrap();
    let base = p.b.mib().clone();
    let c = |p: &Pair, k: Counter| p.b.mib().get(k) - base.get(k);
    p.b.receive(p.now, &frame(A6, B6, 17, &udp6(b"good")));
    let mut bad = udp6(b"bad!");
    bad[9] ^= 0x20;
    p.b.receive(p.now, &frame(A6, B6, 17, &bad));
    let mut zero = udp6(b"zero");
    zero[6..8].copy_from_slice(&[0, 0]);
    p.b.receive(p.now, &frame(A6, B6, 17, &zero));
    p.run_for(Duration::from_millis(5));
    let mut buf = [0u8; 16];
    let (n, from) = p.b.udp_recv_from_addr(b, &mut buf).unwrap();
    assert_eq!(
        (&buf[..n], from),
        (&b"good"[..], "[2001:db8::1]:1000".parse().unwrap())
    );
    assert!(
        p.b.udp_recv_from_addr(b, &mut buf).is_err(),
        "only the good one"
    );
    assert_eq!(c(&p, Counter::Udp6InCsumErrors), 2);
    assert_eq!(c(&p, Counter::Udp6InErrors), 2);
    assert_eq!(c(&p, Counter::Udp6InDatagrams), 1);
    assert_eq!(p.b.mib().drops(DropReason::Udp6Csum), 2);
    assert_eq!(
        c(&p, Counter::Icmp6OutMsgs),
        0,
        "no answer to a corrupt datagram"
    );
    // The IPv4-only calls refuse an IPv6 socket (EAFNOSUPPORT) and take nothing.
    p.b.receive(p.now, &frame(A6, B6, 17, &udp6(b"kept")));
    assert_eq!(p.b.udp_recv_from(b, &mut buf).unwrap_err().errno(), 97);
    assert_eq!(p.b.udp_local_addr(b).unwrap_err().errno(), 97);
    assert_eq!(p.b.udp_rx_queued(b), Ok(1));
    let v4 = SocketAddrV4::new(A_IP, 9);
    assert_eq!(p.b.udp_send_to(p.now, b, b"x", v4).unwrap_err().errno(), 97);
    // Binding: an address not ours is refused; the port table is shared by both families.
    assert_eq!(
        p.b.udp_bind(SocketAddrV6::new(NOBODY, 0, 0, 0))
            .unwrap_err()
            .errno(),
        99
    );
    assert_eq!(
        p.b.udp_bind(SocketAddrV4::new(B_IP, 9000))
            .unwrap_err()
            .errno(),
        98
    );
}

/// A 4000-byte datagram each way is fragmented by IPv6 (three fragments over 1500 bytes)
/// and reassembled, under reordering.
#[test]
fn datagram_of_4000_bytes_fragments_and_reassembles() {
    let mut p = pair(reordering_link(11));
    warm_up6(&mut p);
    let a = p.a.udp_bind(SocketAddrV6::new(A6, 7000, 0, 0)).unwrap();
    let b = p.b.udp_bind(SocketAddrV6::new(B6, 7000, 0, 0)).unwrap();
    let mut buf = vec![0u8; 8192];
    for round in 0..5u64 {
        let data = ustack_testkit::pattern(4000, round);
        p.a.udp_send_to(p.now, a, &data, SocketAddrV6::new(B6, 7000, 0, 0))
            .unwrap();
        p.run_for(Duration::from_millis(10));
        let (n, from) = p.b.udp_recv_from_addr(b, &mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from.port()),
            (&data[..], 7000),
            "A to B, {round}"
        );
        p.b.udp_send_to(p.now, b, &buf[..n], from).unwrap();
        p.run_for(Duration::from_millis(10));
        let (n, _) = p.a.udp_recv_from_addr(a, &mut buf).unwrap();
        assert_eq!(&buf[..n], &data[..], "B to A, {round}");
    }
    // 4008 bytes of UDP over 1500: 1448-byte pieces, three fragments each.
    assert_fragmented_each_way(&p, 5);
    for s in [&p.a, &p.b] {
        assert_eq!(s.mib().get(Counter::Udp6InDatagrams), 5);
        assert_eq!(s.mib().get(Counter::Udp6OutDatagrams), 5);
    }
}

/// Dual-stack as Linux's default (`bindv6only = 0`): a socket on `[::]` takes an IPv4
/// datagram, its sender seen as `::ffff:a.b.c.d`, answers it over IPv4, and both count in
/// `Udp`; with `IPV6_V6ONLY` set the IPv4 datagram finds no socket (`NO_SOCKET`, an ICMP
/// port unreachable) and a v4-mapped destination is refused with ENETUNREACH.
#[test]
fn dual_stack_socket_takes_ipv4_as_v4_mapped_unless_v6only() {
    let mut p = pair(SimLinkConfig::default());
    warm_up6(&mut p);
    let a = p.a.udp_bind(SocketAddrV4::new(A_IP, 5300)).unwrap();
    let b =
        p.b.udp_bind(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 53, 0, 0))
            .unwrap();
    p.a.udp_send_to(p.now, a, b"over v4", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.run_for(Duration::from_millis(5));
    let mut buf = [0u8; 64];
    let (n, from) = p.b.udp_recv_from_addr(b, &mut buf).unwrap();
    let mapped = SocketAddrV6::new(A_IP.to_ipv6_mapped(), 5300, 0, 0);
    assert_eq!((&buf[..n], from), (&b"over v4"[..], mapped.into()));
    p.b.udp_send_to(p.now, b, b"back", from).unwrap();
    p.run_for(Duration::from_millis(5));
    let (n, from) = p.a.udp_recv_from(a, &mut buf).unwrap();
    assert_eq!(
        (&buf[..n], from),
        (&b"back"[..], SocketAddrV4::new(B_IP, 53))
    );
    let mb = p.b.mib();
    assert_eq!(mb.get(Counter::UdpInDatagrams), 1);
    assert_eq!(mb.get(Counter::UdpOutDatagrams), 1);
    assert_eq!(
        mb.get(Counter::Udp6InDatagrams) + mb.get(Counter::Udp6OutDatagrams),
        0
    );
    // IPV6_V6ONLY: IPv6 only.
    p.b.udp_set_v6only(b, true).unwrap();
    p.a.udp_send_to(p.now, a, b"again", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.run_for(Duration::from_millis(5));
    assert!(p.b.udp_recv_from_addr(b, &mut buf).is_err());
    assert_eq!(p.b.mib().get(Counter::UdpNoPorts), 1);
    assert_eq!(p.b.mib().drops(DropReason::UdpNoSocket), 1);
    assert_eq!(p.a.mib().get(Counter::IcmpInDestUnreachs), 1);
    assert_eq!(
        p.b.udp_send_to(p.now, b, b"x", mapped).unwrap_err().errno(),
        101
    );
    // An IPv4 socket has no such option.
    assert_eq!(p.a.udp_set_v6only(a, true).unwrap_err().errno(), 97);
}
