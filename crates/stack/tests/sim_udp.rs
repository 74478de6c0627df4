//! UDP, IPv4 and ICMP between two ustack stacks over the `sim` link (issue #2 "Test").

use core::net::SocketAddrV4;
use core::time::Duration;
use std::collections::HashSet;

use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_obs::{Counter, DropReason};
use ustack_stack::{Instant, Mib, Stack};
use ustack_testkit::{A_IP, B_IP, Pair, faulty};

/// Resolve ARP both ways on a clean link (a ping each way), so later traffic is only
/// what the test sends.
fn warm_up(p: &mut Pair) {
    p.a.ping(p.now, B_IP, 1, 1, b"warm").unwrap();
    p.b.ping(p.now, A_IP, 2, 1, b"warm").unwrap();
    p.run_for(Duration::from_millis(10));
    assert!(
        p.a.recv_echo_reply().is_some() && p.b.recv_echo_reply().is_some(),
        "warm-up pings answered"
    );
}

/// Every drop the stack counted, summed over reasons.
fn drops(m: &Mib) -> u64 {
    DropReason::ALL.iter().map(|&r| m.drops(r)).sum()
}

#[test]
fn ping_both_ways() {
    let mut p = Pair::new(SimLinkConfig::default());
    let payload: Vec<u8> = (0..56u8).collect();
    p.a.ping(p.now, B_IP, 0x1234, 1, &payload).unwrap();
    p.run_for(Duration::from_millis(5));
    let r = p.a.recv_echo_reply().expect("A got an echo reply");
    assert_eq!(
        (r.src, r.ident, r.seq_no, &r.data[..]),
        (B_IP, 0x1234, 1, &payload[..])
    );
    assert_eq!(r.ttl, 64);

    p.b.ping(p.now, A_IP, 7, 9, b"from b").unwrap();
    p.run_for(Duration::from_millis(5));
    let r = p.b.recv_echo_reply().expect("B got an echo reply");
    assert_eq!(
        (r.src, r.ident, r.seq_no, &r.data[..]),
        (A_IP, 7, 9, &b"from b"[..])
    );

    for (m, name) in [(p.a.mib(), "A"), (p.b.mib(), "B")] {
        assert_eq!(
            m.get(Counter::IcmpInMsgs),
            2,
            "{name}: one request and one reply in"
        );
        assert_eq!(
            m.get(Counter::IcmpOutMsgs),
            2,
            "{name}: one request and one reply out"
        );
        assert_eq!(drops(m), 0, "{name}: nothing dropped");
    }
    // IcmpMsg counts by type, as Linux's /proc/net/snmp shows them.
    let snmp = p.a.mib().render_snmp();
    assert!(
        snmp.contains("IcmpMsg: InType0 InType8 OutType0 OutType8\nIcmpMsg: 1 1 1 1\n"),
        "{snmp}"
    );
}

/// Issue #2: "10,000 UDP datagrams under 10% loss, 5% reordering and 1% corruption, where
/// sent = received + dropped-by-reason holds exactly, per counter".
#[test]
fn udp_10k_datagrams_under_loss_reordering_corruption_balance_exactly() {
    let mut p = Pair::new(SimLinkConfig {
        seed: 2,
        ..SimLinkConfig::default()
    });
    warm_up(&mut p);
    let sender = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let receiver = p.b.udp_bind(SocketAddrV4::new(B_IP, 9000)).unwrap();
    let dst = SocketAddrV4::new(B_IP, 9000);
    // Faults from here on, both directions.
    p.link.set_config(Side::A, faulty(0.10, 0.05, 0.01));
    p.link.set_config(Side::B, faulty(0.10, 0.05, 0.01));
    let a0 = p.a.mib().clone();
    let b0 = p.b.mib().clone();
    let l0 = p.link.stats(Side::A).clone();

    const N: u32 = 10_000;
    let mut received = Vec::new();
    let mut buf = [0u8; 2048];
    let drain = |p: &mut Pair, received: &mut Vec<u32>, buf: &mut [u8]| {
        while let Ok((n, from)) = p.b.udp_recv_from(receiver, buf) {
            assert_eq!(from.ip(), &A_IP);
            // Payload: the sequence number, then 96 bytes derived from it. Any corruption
            // that got through would show here.
            assert_eq!(n, 100, "datagram length");
            let seq = u32::from_be_bytes(buf[..4].try_into().unwrap());
            assert!(seq < N, "sequence number {seq} intact");
            assert!(
                buf[4..n]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (seq as usize + i) as u8),
                "payload of {seq} intact"
            );
            received.push(seq);
        }
    };
    for seq in 0..N {
        let mut payload = [0u8; 100];
        payload[..4].copy_from_slice(&seq.to_be_bytes());
        for (i, b) in payload[4..].iter_mut().enumerate() {
            *b = (seq as usize + i) as u8;
        }
        p.a.udp_send_to(p.now, sender, &payload, dst).unwrap();
        if seq % 20 == 19 {
            p.run_for(Duration::from_micros(200));
            drain(&mut p, &mut received, &mut buf);
        }
    }
    p.run_for(Duration::from_secs(1));
    drain(&mut p, &mut received, &mut buf);

    let (a, b) = (p.a.mib(), p.b.mib());
    let delta = |m: &Mib, m0: &Mib, c: Counter| m.get(c) - m0.get(c);
    let l1 = p.link.stats(Side::A);
    let link = ustack_dev::sim::SimStats {
        sent: l1.sent - l0.sent,
        delivered: l1.delivered - l0.delivered,
        lost: l1.lost - l0.lost,
        corrupted: l1.corrupted - l0.corrupted,
        reordered: l1.reordered - l0.reordered,
        ..ustack_dev::sim::SimStats::default()
    };
    let b_drops = drops(b) - drops(&b0);
    let a_drops = drops(a) - drops(&a0);

    // Nothing arrives twice (the link does not duplicate here), and reordering happened.
    let unique: HashSet<_> = received.iter().collect();
    assert_eq!(unique.len(), received.len(), "no datagram delivered twice");
    assert!(
        received.windows(2).any(|w| w[0] > w[1]),
        "reordering reached the application"
    );
    assert!(
        link.lost > 500 && link.corrupted > 50 && link.reordered > 250,
        "faults happened: {link:?}"
    );

    // The whole identity: every datagram sent was read, lost on the wire, or dropped
    // with a reason by one of the stacks.
    assert_eq!(delta(a, &a0, Counter::UdpOutDatagrams), N as u64);
    assert_eq!(
        link.sent,
        N as u64 - a_drops,
        "every datagram A did not drop reached the link"
    );
    assert_eq!(
        N as u64,
        received.len() as u64 + link.lost + b_drops + a_drops,
        "sent = received + lost + dropped"
    );
    assert_eq!(
        delta(b, &b0, Counter::UdpInDatagrams),
        received.len() as u64
    );

    // Per layer, per counter: what entered each layer of B left it delivered or dropped
    // with a reason that bumped the matching MIB counter.
    let l2_drops = [
        DropReason::Otherhost,
        DropReason::UnhandledProto,
        DropReason::MacHdr,
    ]
    .iter()
    .map(|&r| b.drops(r) - b0.drops(r))
    .sum::<u64>();
    assert_eq!(
        delta(b, &b0, Counter::IpInReceives),
        link.delivered - l2_drops
    );
    let ip_drops = [
        DropReason::IpInhdr,
        DropReason::IpCsum,
        DropReason::IpTruncated,
        DropReason::IpInaddrErrors,
        DropReason::IpInvalidSource,
        DropReason::IpNoproto,
    ]
    .iter()
    .map(|&r| b.drops(r) - b0.drops(r))
    .sum::<u64>();
    assert_eq!(
        delta(b, &b0, Counter::IpInDelivers),
        delta(b, &b0, Counter::IpInReceives) - ip_drops
    );
    assert_eq!(
        delta(b, &b0, Counter::IpInHdrErrors),
        (b.drops(DropReason::IpInhdr) - b0.drops(DropReason::IpInhdr))
            + (b.drops(DropReason::IpCsum) - b0.drops(DropReason::IpCsum))
    );
    assert_eq!(
        delta(b, &b0, Counter::IpExtInCsumErrors),
        b.drops(DropReason::IpCsum) - b0.drops(DropReason::IpCsum)
    );
    assert_eq!(
        delta(b, &b0, Counter::UdpInCsumErrors),
        b.drops(DropReason::UdpCsum) - b0.drops(DropReason::UdpCsum)
    );
    assert_eq!(
        delta(b, &b0, Counter::UdpInErrors),
        [
            DropReason::UdpCsum,
            DropReason::UdpMalformed,
            DropReason::SocketRcvbuff
        ]
        .iter()
        .map(|&r| b.drops(r) - b0.drops(r))
        .sum::<u64>()
    );
    assert_eq!(
        delta(b, &b0, Counter::UdpNoPorts),
        b.drops(DropReason::UdpNoSocket) - b0.drops(DropReason::UdpNoSocket)
    );
    assert_eq!(
        delta(b, &b0, Counter::IpInDelivers),
        received.len() as u64
            + delta(b, &b0, Counter::UdpInErrors)
            + delta(b, &b0, Counter::UdpNoPorts)
            + (delta(b, &b0, Counter::IcmpInMsgs)),
        "every datagram IP delivered was read or dropped by UDP (or was ICMP)"
    );
    // Corruption was caught by checksums, not delivered.
    assert!(
        b_drops > 0 && b_drops <= link.corrupted,
        "drops {b_drops} vs corrupted {}",
        link.corrupted
    );
}

/// Issue #2: "IPv4 fragments reassembled under reordering".
#[test]
fn fragmented_datagrams_reassemble_under_reordering() {
    let mut p = Pair::new(SimLinkConfig {
        seed: 3,
        ..SimLinkConfig::default()
    });
    warm_up(&mut p);
    let cfg = SimConfig {
        reorder: 0.3,
        reorder_delay: Duration::from_micros(500),
        jitter: Duration::from_micros(200),
        ..SimConfig::default()
    };
    p.link.set_config(Side::A, cfg);
    let sender = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let receiver = p.b.udp_bind(SocketAddrV4::new(B_IP, 7)).unwrap();
    let sizes: Vec<usize> = (0..200)
        .map(|i| 1473 + (i * 337) % 20_000)
        .chain([65_507])
        .collect();
    let mut fragments = 0;
    let mut got = 0;
    let mut buf = vec![0u8; 70_000];
    // Read as we go: the receive buffer (rmem_default, 208 KiB) holds only ~30 of these.
    let drain = |p: &mut Pair, got: &mut usize, buf: &mut [u8]| {
        while let Ok((n, _)) = p.b.udp_recv_from(receiver, buf) {
            let i = (0..sizes.len()).find(|&i| {
                sizes[i] == n
                    && buf[..n]
                        .iter()
                        .enumerate()
                        .all(|(j, &b)| b == (i * 7 + j * 13) as u8)
            });
            assert!(i.is_some(), "datagram of {n} bytes matches what was sent");
            *got += 1;
        }
    };
    for (i, &len) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|j| (i * 7 + j * 13) as u8).collect();
        p.a.udp_send_to(p.now, sender, &data, SocketAddrV4::new(B_IP, 7))
            .unwrap();
        fragments += (len + 8).div_ceil(1480);
        p.run_for(Duration::from_micros(100));
        drain(&mut p, &mut got, &mut buf);
    }
    p.run_for(Duration::from_millis(50));
    drain(&mut p, &mut got, &mut buf);
    assert_eq!(got, sizes.len(), "every datagram reassembled and delivered");
    assert!(
        p.link.stats(Side::A).reordered > 100,
        "fragments were reordered"
    );
    let (a, b) = (p.a.mib(), p.b.mib());
    assert_eq!(a.get(Counter::IpFragOKs), sizes.len() as u64);
    assert_eq!(a.get(Counter::IpFragCreates), fragments as u64);
    assert_eq!(b.get(Counter::IpReasmReqds), fragments as u64);
    assert_eq!(b.get(Counter::IpReasmOKs), sizes.len() as u64);
    assert_eq!(b.get(Counter::IpReasmFails), 0);
    assert_eq!(
        p.b.reassembly_mem(),
        0,
        "reassembly holds nothing afterwards"
    );
}

/// A raw IPv4 fragment from 198.51.100.x to B, as an Ethernet frame.
fn fragment_frame(
    src_host: u8,
    ident: u16,
    offset: u16,
    more: bool,
    payload_len: usize,
) -> Vec<u8> {
    use ustack_wire::{EthernetAddress, IpProtocol, ethernet, ipv4};
    let mut f = vec![0u8; 14 + 20 + payload_len];
    ethernet::Repr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 0x99]),
        dst_addr: ustack_testkit::B_MAC,
        ethertype: ethernet::EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    ipv4::Repr {
        src_addr: core::net::Ipv4Addr::new(192, 0, 2, src_host),
        dst_addr: B_IP,
        next_header: IpProtocol::Udp,
        payload_len,
        ttl: 64,
        tos: 0,
        ident,
        dont_frag: false,
        more_frags: more,
        frag_offset: offset,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut f[14..]), true);
    f
}

/// Issue #2: "a reassembly flood stays inside its memory bound".
#[test]
fn reassembly_flood_stays_inside_memory_bound() {
    let mut b = Stack::new({
        let mut c = ustack_stack::Config::ethernet(
            ustack_testkit::B_MAC,
            ustack_stack::Ipv4Cidr::new(B_IP, 24),
        );
        c.seed = Some(5);
        c
    });
    let bound = b.sysctl().ipfrag_high_thresh as usize;
    let mut now = Instant::ZERO;
    // 20,000 first fragments of datagrams that never complete: 29 MB offered against 4 MiB.
    for i in 0..20_000u32 {
        b.receive(
            now,
            &fragment_frame(10 + (i % 200) as u8, i as u16, 0, true, 1480),
        );
        assert!(
            b.reassembly_mem() <= bound,
            "reassembly memory {} over bound {bound}",
            b.reassembly_mem()
        );
        now += Duration::from_micros(10);
    }
    let m = b.mib();
    assert!(
        m.drops(DropReason::FragMemLimit) > 15_000,
        "fragments over the bound were refused and counted"
    );
    assert_eq!(m.get(Counter::IpReasmReqds), 20_000);
    // A real fragmented datagram still gets through once memory frees up (after ipfrag_time).
    let later = now + Duration::from_secs(b.sysctl().ipfrag_time + 1);
    b.handle_timeout(later);
    assert_eq!(b.reassembly_mem(), 0, "everything expired and was freed");
    assert!(b.mib().get(Counter::IpReasmTimeout) > 0);
    let sock = b.udp_bind(SocketAddrV4::new(B_IP, 7)).unwrap();
    let mut whole = vec![0u8; 8 + 2000];
    ustack_wire::udp::Repr {
        src_port: 1000,
        dst_port: 7,
    }
    .emit(
        &mut ustack_wire::udp::Packet::new_unchecked(&mut whole[..]),
        &core::net::Ipv4Addr::new(192, 0, 2, 77).into(),
        &B_IP.into(),
        2000,
        |p| p.fill(0xab),
        true,
    );
    let mut f1 = fragment_frame(77, 4242, 0, true, 1480);
    f1[34..].copy_from_slice(&whole[..1480]);
    let mut f2 = fragment_frame(77, 4242, 1480, false, whole.len() - 1480);
    f2[34..].copy_from_slice(&whole[1480..]);
    // Fix the IP checksums after rewriting the payload? Payload is not covered: no need.
    b.receive(later, &f2);
    b.receive(later, &f1);
    let mut buf = vec![0u8; 4096];
    let (n, from) = b
        .udp_recv_from(sock, &mut buf)
        .expect("datagram reassembled after the flood");
    assert_eq!((n, from.port()), (2000, 1000));
    assert!(buf[..n].iter().all(|&x| x == 0xab));
}

#[test]
fn closed_port_gets_port_unreachable_rate_limited_per_host() {
    let mut p = Pair::new(SimLinkConfig::default());
    warm_up(&mut p);
    let s = p.a.udp_bind(SocketAddrV4::new(A_IP, 5555)).unwrap();
    for _ in 0..100 {
        p.a.udp_send_to(p.now, s, b"anyone?", SocketAddrV4::new(B_IP, 9))
            .unwrap();
    }
    p.run_for(Duration::from_millis(10));
    let b = p.b.mib();
    assert_eq!(b.get(Counter::UdpNoPorts), 100);
    // Linux: a burst of XRLIM_BURST_FACTOR (6) errors per host, then one per icmp_ratelimit.
    assert_eq!(b.get(Counter::IcmpOutRateLimitHost), 94);
    assert_eq!(p.a.mib().get(Counter::IcmpInDestUnreachs), 6);
    // One more after icmp_ratelimit (1 s) has refilled a token.
    p.run_for(Duration::from_millis(1000));
    p.a.udp_send_to(p.now, s, b"anyone?", SocketAddrV4::new(B_IP, 9))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.mib().get(Counter::IcmpInDestUnreachs), 7);
}

#[test]
fn arp_retries_under_loss_then_delivers_queued_in_order() {
    let mut p = Pair::new(SimLinkConfig::default());
    // A's first ARP request is lost; the retransmit one second later gets through.
    p.link.set_config(
        Side::A,
        SimConfig {
            loss: 1.0,
            ..SimConfig::default()
        },
    );
    let s = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let r = p.b.udp_bind(SocketAddrV4::new(B_IP, 9)).unwrap();
    for i in 0..5u8 {
        p.a.udp_send_to(p.now, s, &[i], SocketAddrV4::new(B_IP, 9))
            .unwrap();
    }
    p.run_for(Duration::from_millis(500));
    p.link.set_config(Side::A, SimConfig::default());
    p.run_for(Duration::from_millis(1000));
    let mut buf = [0u8; 8];
    let got: Vec<u8> =
        std::iter::from_fn(|| p.b.udp_recv_from(r, &mut buf).ok().map(|_| buf[0])).collect();
    assert_eq!(
        got,
        vec![0, 1, 2, 3, 4],
        "queued datagrams sent in order once resolved"
    );
    assert_eq!(p.a.neighbours().peek(B_IP), Some(ustack_testkit::B_MAC));
}

#[test]
fn arp_failure_drops_queue_with_reason() {
    let mut p = Pair::new(SimLinkConfig::default());
    p.link.set_config(
        Side::A,
        SimConfig {
            loss: 1.0,
            ..SimConfig::default()
        },
    );
    let s = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    for _ in 0..3 {
        p.a.udp_send_to(p.now, s, b"x", SocketAddrV4::new(B_IP, 9))
            .unwrap();
    }
    p.run_for(Duration::from_secs(5));
    assert_eq!(p.a.mib().drops(DropReason::NeighFailed), 3);
    assert_eq!(
        p.link.stats(Side::A).sent,
        3,
        "mcast_solicit = 3 ARP requests, then give up"
    );
    assert_eq!(p.a.neighbours().len(), 0);
}

#[test]
fn send_errors_map_to_errno() {
    let mut p = Pair::new(SimLinkConfig::default());
    let s = p.a.udp_bind(SocketAddrV4::new(A_IP, 4000)).unwrap();
    assert_eq!(
        p.a.udp_bind(SocketAddrV4::new(A_IP, 4000))
            .unwrap_err()
            .errno(),
        98
    );
    assert_eq!(
        p.a.udp_bind(SocketAddrV4::new(B_IP, 1))
            .unwrap_err()
            .errno(),
        99
    );
    let big = vec![0u8; 65_508];
    assert_eq!(
        p.a.udp_send_to(p.now, s, &big, SocketAddrV4::new(B_IP, 9))
            .unwrap_err()
            .errno(),
        90
    );
    let off_link = SocketAddrV4::new(core::net::Ipv4Addr::new(198, 51, 100, 1), 9);
    assert_eq!(
        p.a.udp_send_to(p.now, s, b"x", off_link)
            .unwrap_err()
            .errno(),
        101
    );
    assert_eq!(p.a.mib().get(Counter::IpOutNoRoutes), 1);
    p.a.udp_close(s).unwrap();
    assert_eq!(
        p.a.udp_send_to(p.now, s, b"x", SocketAddrV4::new(B_IP, 9))
            .unwrap_err()
            .errno(),
        9
    );
    assert!(p.a.udp_close(s).is_err(), "a closed handle stays closed");
    let mut buf = [0u8; 4];
    assert_eq!(p.a.udp_recv_from(s, &mut buf).unwrap_err().errno(), 9);
}
