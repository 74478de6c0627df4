//! RSS: the Toeplitz hash against the published verification vectors, the symmetric key,
//! the indirection table, and the local-port search that sends replies home.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
use std::cell::Cell;

use proptest::prelude::*;
use ustack_dev::Medium;
use ustack_runtime::rss::{
    self, HashType, RETA_SIZE, Reta, Rss, RssKey, hash_frame, hash_ipv4_packet, hash_ipv6_packet,
    pick_local_port, shard_of, toeplitz,
};

/// Microsoft's RSS verification suite for IPv4: "Verifying the RSS Hash Calculation",
/// <https://learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation>,
/// with the secret key [`RssKey::MICROSOFT`]. The same table is the "RSS Verification Suite"
/// of Intel's controller datasheets (I210 §7.1.2.10.3, 82599 §7.1.2.8.3, quoted by DPDK's
/// `app/test/test_thash.c`). Columns: destination, source, "IPv4 only" (address pair),
/// "IPv4 with TCP" (4-tuple).
///
/// The suite has no UDP column because the UDP input is the TCP input: "Hash for IPv4 with
/// UDP: Concatenate SourceAddress, DestinationAddress, SourcePort, DestinationPort into one
/// single byte-array ... Input[12] = @12-15, @16-19, @20-21, @22-23" (I210 §7.1.2.10.1.2,
/// word for word its TCP rule), so the 4-tuple column is checked against UDP packets too.
const SUITE: [(&str, &str, u32, u32); 5] = [
    (
        "161.142.100.80:1766",
        "66.9.149.187:2794",
        0x323e8fc2,
        0x51ccc178,
    ),
    (
        "65.69.140.83:4739",
        "199.92.111.2:14230",
        0xd718262a,
        0xc626b0ea,
    ),
    (
        "12.22.207.184:38024",
        "24.19.198.95:12898",
        0xd2d0a5de,
        0x5c2b394a,
    ),
    (
        "209.142.163.6:2217",
        "38.27.205.30:48228",
        0x82989176,
        0xafc7327f,
    ),
    (
        "202.188.127.2:1303",
        "153.39.163.191:44251",
        0x5d1809c5,
        0x10e828a2,
    ),
];

/// Microsoft's RSS verification suite for IPv6 (the same page, and DPDK's
/// `test_thash.c`), with [`RssKey::MICROSOFT`]. Columns: destination, source, "IPv6 only",
/// "IPv6 with TCP".
const SUITE6: [(&str, &str, u32, u32); 3] = [
    (
        "[3ffe:2501:200:3::1]:1766",
        "[3ffe:2501:200:1fff::7]:2794",
        0x2cc18cd5,
        0x40207d3d,
    ),
    (
        "[ff02::1]:4739",
        "[3ffe:501:8::260:97ff:fe40:efab]:14230",
        0x0f0c461c,
        0xdde51bbf,
    ),
    (
        "[fe80::200:f8ff:fe21:67cf]:38024",
        "[3ffe:1900:4545:3:200:f8ff:fe21:67cf]:44251",
        0x4b61e985,
        0x02d1feef,
    ),
];

/// The IPv6 suite, by the address and tuple functions and through received packets (TCP
/// and UDP after the fixed header: the 4-tuple; a Fragment header first: the addresses),
/// bare and in Ethernet frames.
#[test]
fn microsoft_verification_suite_ipv6() {
    let key = RssKey::MICROSOFT;
    for (dst, src, ipv6_only, ipv6_tcp) in SUITE6 {
        let (dst, src): (SocketAddrV6, SocketAddrV6) = (dst.parse().unwrap(), src.parse().unwrap());
        assert_eq!(
            key.hash_v6_addrs(*src.ip(), *dst.ip()),
            ipv6_only,
            "{src} -> {dst}"
        );
        assert_eq!(key.hash_v6(src, dst), ipv6_tcp, "{src} -> {dst}");
        let packet6 = |nh: u8| {
            let mut p = vec![0u8; 60];
            p[0] = 0x60;
            p[4..6].copy_from_slice(&20u16.to_be_bytes());
            p[6] = nh;
            p[7] = 64;
            p[8..24].copy_from_slice(&src.ip().octets());
            p[24..40].copy_from_slice(&dst.ip().octets());
            p[40..42].copy_from_slice(&src.port().to_be_bytes());
            p[42..44].copy_from_slice(&dst.port().to_be_bytes());
            p
        };
        assert_eq!(
            hash_ipv6_packet(&key, &packet6(6)),
            Some((ipv6_tcp, HashType::TcpIpv6))
        );
        assert_eq!(
            hash_ipv6_packet(&key, &packet6(17)),
            Some((ipv6_tcp, HashType::UdpIpv6))
        );
        assert_eq!(
            hash_ipv6_packet(&key, &packet6(44)),
            Some((ipv6_only, HashType::Ipv6))
        );
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x86, 0xdd]);
        frame.extend_from_slice(&packet6(6));
        assert_eq!(
            hash_frame(&key, &frame, Medium::Ethernet),
            Some((ipv6_tcp, HashType::TcpIpv6))
        );
        assert_eq!(
            hash_frame(&key, &packet6(6), Medium::Ip),
            Some((ipv6_tcp, HashType::TcpIpv6))
        );
    }
    assert_eq!(
        hash_ipv6_packet(&key, &[0x60; 39]),
        None,
        "shorter than a header"
    );
}

fn sa(s: &str) -> SocketAddrV4 {
    s.parse().unwrap()
}

/// An IPv4 packet from `src` to `dst` of protocol `proto`, with `options` bytes of IP
/// options and the transport header's ports (the rest zero). `frag` is the flags/offset word.
fn packet(src: SocketAddrV4, dst: SocketAddrV4, proto: u8, options: usize, frag: u16) -> Vec<u8> {
    let ihl = 20 + options;
    let mut p = vec![0u8; ihl + 20];
    p[0] = 0x40 | (ihl / 4) as u8;
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = 64;
    p[9] = proto;
    p[12..16].copy_from_slice(&src.ip().octets());
    p[16..20].copy_from_slice(&dst.ip().octets());
    for b in &mut p[20..ihl] {
        *b = 1; // NOP options
    }
    p[ihl..ihl + 2].copy_from_slice(&src.port().to_be_bytes());
    p[ihl + 2..ihl + 4].copy_from_slice(&dst.port().to_be_bytes());
    p
}

fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn microsoft_verification_suite_ipv4() {
    let key = RssKey::MICROSOFT;
    for (dst, src, ipv4_only, ipv4_tcp) in SUITE {
        let (dst, src) = (sa(dst), sa(src));
        assert_eq!(
            key.hash_v4_addrs(*src.ip(), *dst.ip()),
            ipv4_only,
            "IPv4 only: {src} -> {dst}"
        );
        assert_eq!(
            key.hash_v4(src, dst),
            ipv4_tcp,
            "IPv4 with TCP: {src} -> {dst}"
        );
    }
    assert_eq!(RssKey::default(), RssKey::MICROSOFT);
}

#[test]
fn verification_suite_through_received_packets() {
    let key = RssKey::MICROSOFT;
    for (dst, src, ipv4_only, ipv4_tcp) in SUITE {
        let (dst, src) = (sa(dst), sa(src));
        let tcp = packet(src, dst, 6, 0, 0x4000); // DF set: not a fragment
        assert_eq!(
            hash_ipv4_packet(&key, &tcp),
            Some((ipv4_tcp, HashType::TcpIpv4))
        );
        let udp = packet(src, dst, 17, 0, 0);
        assert_eq!(
            hash_ipv4_packet(&key, &udp),
            Some((ipv4_tcp, HashType::UdpIpv4))
        );
        // IP options are skipped: the ports are found after them.
        let with_options = packet(src, dst, 6, 8, 0);
        assert_eq!(
            hash_ipv4_packet(&key, &with_options),
            Some((ipv4_tcp, HashType::TcpIpv4))
        );
        // "For fragmented IP packets, NDIS_HASH_IPV4 must be used. This includes the first
        // fragment which contains both IP and TCP headers." (RSS Hashing Types)
        let first_fragment = packet(src, dst, 6, 0, 0x2000); // MF, offset 0
        assert_eq!(
            hash_ipv4_packet(&key, &first_fragment),
            Some((ipv4_only, HashType::Ipv4))
        );
        let later_fragment = packet(src, dst, 17, 0, 185); // offset 1480
        assert_eq!(
            hash_ipv4_packet(&key, &later_fragment),
            Some((ipv4_only, HashType::Ipv4))
        );
        let icmp = packet(src, dst, 1, 0, 0);
        assert_eq!(
            hash_ipv4_packet(&key, &icmp),
            Some((ipv4_only, HashType::Ipv4))
        );
        // The same through an Ethernet frame and through an IP-medium device.
        assert_eq!(
            hash_frame(&key, &ethernet(0x0800, &tcp), Medium::Ethernet),
            Some((ipv4_tcp, HashType::TcpIpv4))
        );
        assert_eq!(
            hash_frame(&key, &udp, Medium::Ip),
            Some((ipv4_tcp, HashType::UdpIpv4))
        );
    }
}

#[test]
fn frames_that_are_not_sound_ipv4_get_no_hash() {
    let key = RssKey::MICROSOFT;
    let (src, dst) = (sa("10.0.0.1:1000"), sa("10.0.0.2:80"));
    let good = packet(src, dst, 6, 0, 0);
    assert_eq!(
        hash_frame(&key, &ethernet(0x0806, &[0; 28]), Medium::Ethernet),
        None,
        "ARP"
    );
    assert_eq!(
        hash_frame(&key, &ethernet(0x86dd, &good), Medium::Ethernet),
        None,
        "an IPv4 packet under the IPv6 type"
    );
    assert_eq!(
        hash_frame(&key, &good[..10], Medium::Ethernet),
        None,
        "short frame"
    );
    assert_eq!(hash_ipv4_packet(&key, &[]), None);
    assert_eq!(
        hash_ipv4_packet(&key, &good[..19]),
        None,
        "truncated header"
    );
    let mut v6 = good.clone();
    v6[0] = 0x65;
    assert_eq!(hash_ipv4_packet(&key, &v6), None, "version 6");
    let mut short_ihl = good.clone();
    short_ihl[0] = 0x44;
    assert_eq!(hash_ipv4_packet(&key, &short_ihl), None, "IHL below 5");
    // A TCP packet cut before its ports falls back to the address pair, like a NIC that
    // cannot parse the TCP header.
    assert_eq!(
        hash_ipv4_packet(&key, &good[..22]),
        Some((key.hash_v4_addrs(*src.ip(), *dst.ip()), HashType::Ipv4))
    );
}

#[test]
fn microsoft_key_is_not_symmetric_but_the_symmetric_key_is() {
    let (dst, src) = (sa(SUITE[0].0), sa(SUITE[0].1));
    let ms = RssKey::MICROSOFT;
    assert_ne!(ms.hash_v4(src, dst), ms.hash_v4(dst, src));
    let sym = RssKey::SYMMETRIC;
    assert_eq!(sym.hash_v4(src, dst), sym.hash_v4(dst, src));
    assert_eq!(&sym.0[..4], &[0x6d, 0x5a, 0x6d, 0x5a]);
    assert!(sym.0.chunks(2).all(|c| c == [0x6d, 0x5a]));
}

fn addr() -> impl Strategy<Value = SocketAddrV4> {
    (any::<u32>(), any::<u16>()).prop_map(|(ip, port)| SocketAddrV4::new(Ipv4Addr::from(ip), port))
}

fn key() -> impl Strategy<Value = RssKey> {
    prop_oneof![
        Just(RssKey::MICROSOFT),
        Just(RssKey::SYMMETRIC),
        any::<[u8; 40]>().prop_map(RssKey),
    ]
}

proptest! {
    #[test]
    fn symmetric_key_hashes_both_directions_alike(a in addr(), b in addr()) {
        let sym = RssKey::SYMMETRIC;
        prop_assert_eq!(sym.hash_v4(a, b), sym.hash_v4(b, a));
        prop_assert_eq!(sym.hash_v4_addrs(*a.ip(), *b.ip()), sym.hash_v4_addrs(*b.ip(), *a.ip()));
        let rss = Rss::new(sym, 7);
        prop_assert_eq!(rss.shard_of_tuple(a, b), rss.shard_of_tuple(b, a));
    }

    /// Toeplitz is linear over XOR, which the port search relies on.
    #[test]
    fn toeplitz_is_linear(k in any::<[u8; 40]>(), x in any::<[u8; 12]>(), y in any::<[u8; 12]>()) {
        let xy: Vec<u8> = x.iter().zip(&y).map(|(a, b)| a ^ b).collect();
        prop_assert_eq!(toeplitz(&k, &xy), toeplitz(&k, &x) ^ toeplitz(&k, &y));
    }

    #[test]
    fn shard_of_is_the_default_table(hash in any::<u32>(), shards in 1usize..=128) {
        let s = shard_of(hash, shards);
        prop_assert!(s < shards);
        prop_assert_eq!(s, Reta::new(shards).lookup(hash));
        prop_assert_eq!(s, Rss::new(RssKey::MICROSOFT, shards).shard_of_hash(hash));
    }

    /// The chosen port is in range, free, and its replies hash to the shard; `None` only when
    /// no port would do; and the search asks `in_use` about no more ports than the range holds.
    #[test]
    fn picked_port_hashes_home(
        key in key(),
        local_ip in any::<u32>().prop_map(Ipv4Addr::from),
        remote in addr(),
        shards in 1usize..=16,
        shard_seed in any::<usize>(),
        lo in 1024u16..60000,
        span in 1u16..3000,
        taken_seed in any::<u64>(),
        density in 0u32..=100,
    ) {
        let shard = shard_seed % shards;
        let hi = lo.saturating_add(span - 1);
        // A pseudo-random `density`% of the ports are taken.
        let taken = |p: u16| {
            let x = (u64::from(p) ^ taken_seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            ((x >> 32) % 100) < u64::from(density)
        };
        let calls = Cell::new(0u32);
        let in_use = |p: u16| {
            calls.set(calls.get() + 1);
            taken(p)
        };
        let home = |p: u16| shard_of(key.hash_v4(remote, SocketAddrV4::new(local_ip, p)), shards) == shard;
        let got = pick_local_port(&key, local_ip, remote, shard, shards, lo..=hi, in_use);
        match got {
            Some(p) => {
                prop_assert!((lo..=hi).contains(&p));
                prop_assert!(!taken(p));
                prop_assert!(home(p), "port {p} hashes to another shard");
            }
            None => prop_assert!(
                !(lo..=hi).any(|p| home(p) && !taken(p)),
                "a free port hashing home exists but none was found"
            ),
        }
        let homes = (lo..=hi).filter(|&p| home(p)).count() as u32;
        prop_assert!(calls.get() <= homes, "in_use asked {} times for {homes} candidate ports", calls.get());
        prop_assert!(calls.get() <= u32::from(hi - lo) + 1);
    }

    /// With Linux's default ip_local_port_range every shard gets a port (the port bits reach
    /// every entry of the indirection table), for the standard keys. Not for every key: the
    /// port's 16 bits reach the table through 16 windows of the key, and a degenerate key
    /// (say, mostly zero bytes) spans fewer than the table's 7 index bits, leaving shards no
    /// port can reach; a runtime with a key of its own must check this at start.
    #[test]
    fn every_shard_is_reachable(
        key in prop_oneof![Just(RssKey::MICROSOFT), Just(RssKey::SYMMETRIC)],
        local_ip in any::<u32>().prop_map(Ipv4Addr::from),
        remote in addr(),
        shards in 1usize..=32,
    ) {
        for shard in 0..shards {
            let p = pick_local_port(&key, local_ip, remote, shard, shards, 32768..=60999, |_| false);
            prop_assert!(p.is_some(), "shard {shard} of {shards} unreachable");
        }
    }

    /// IPv6: the port found makes the IPv6 4-tuple of the replies (36 bytes of hash input,
    /// the port at bytes 34-35) hash to the shard, every shard reachable with the
    /// standard keys; a v4-mapped peer is hashed as the IPv4 tuple its packets carry.
    #[test]
    fn picked_ipv6_port_hashes_home(
        key in prop_oneof![Just(RssKey::MICROSOFT), Just(RssKey::SYMMETRIC)],
        local_ip in any::<u128>().prop_map(Ipv6Addr::from),
        remote_ip in any::<u128>().prop_map(Ipv6Addr::from),
        remote_port in any::<u16>(),
        shards in 1usize..=16,
        v4 in addr(),
    ) {
        let remote = SocketAddrV6::new(remote_ip, remote_port, 0, 0);
        for shard in 0..shards {
            let p = pick_local_port(&key, local_ip, remote, shard, shards, 32768..=60999, |_| false);
            let Some(p) = p else {
                return Err(TestCaseError::fail(format!("shard {shard} of {shards} unreachable")));
            };
            let local = SocketAddrV6::new(local_ip, p, 0, 0);
            prop_assert_eq!(shard_of(key.hash_v6(remote, local), shards), shard);
            prop_assert_eq!(Rss::new(key, shards).shard_of_tuple(remote, local), shard);
        }
        let mapped = SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0);
        let local4 = Ipv4Addr::new(10, 0, 0, 1);
        let p = pick_local_port(&key, local4.to_ipv6_mapped(), mapped, 0, shards, 32768..=60999, |_| false);
        let p = p.expect("shard 0 reachable");
        prop_assert_eq!(shard_of(key.hash_v4(v4, SocketAddrV4::new(local4, p)), shards), 0);
    }
}

#[test]
fn port_search_skips_taken_ports_and_gives_up_when_all_are_taken() {
    let key = RssKey::MICROSOFT;
    let local = Ipv4Addr::new(10, 0, 0, 1);
    let remote = sa("10.0.0.2:80");
    let first = pick_local_port(&key, local, remote, 1, 4, 32768..=60999, |_| false).unwrap();
    let second = pick_local_port(&key, local, remote, 1, 4, 32768..=60999, |p| p == first).unwrap();
    assert_ne!(first, second);
    for p in [first, second] {
        assert_eq!(
            shard_of(key.hash_v4(remote, SocketAddrV4::new(local, p)), 4),
            1
        );
    }
    assert_eq!(
        pick_local_port(&key, local, remote, 1, 4, 32768..=60999, |_| true),
        None
    );
    // An empty range.
    #[allow(clippy::reversed_empty_ranges)]
    let empty = 5000..=4000;
    assert_eq!(
        pick_local_port(&key, local, remote, 0, 1, empty, |_| false),
        None
    );
    // One shard: the first free port of the walk, any port hashes home.
    assert!(pick_local_port(&key, local, remote, 0, 1, 7..=7, |_| false) == Some(7));
}

#[test]
fn custom_indirection_table_steers_and_picks() {
    let key = RssKey::MICROSOFT;
    let mut rss = Rss::new(key, 2);
    assert_eq!(rss.shards(), 2);
    assert_eq!(rss.reta(), &Reta::new(2));
    // Everything to shard 1.
    rss.set_reta(Reta::from_entries([1; RETA_SIZE]));
    let local = Ipv4Addr::new(10, 0, 0, 1);
    let remote = sa("10.0.0.2:80");
    assert_eq!(
        rss.pick_local_port(local, remote, 0, 1024..=65535, &mut 0, |_| false),
        None
    );
    let p = rss
        .pick_local_port(local, remote, 1, 1024..=65535, &mut 0, |_| false)
        .unwrap();
    assert_eq!(rss.shard_of_tuple(remote, SocketAddrV4::new(local, p)), 1);
    // One entry back to shard 0: exactly the hashes with those 7 low bits go there.
    let mut reta = Reta::from_entries([1; RETA_SIZE]);
    reta.set(5, 0);
    rss.set_reta(reta);
    for h in [5u32, 5 + 128, 0xffff_ff85] {
        assert_eq!(rss.shard_of_hash(h), 0, "{h:#x}");
    }
    assert_eq!(rss.shard_of_hash(6), 1);
    let p = rss
        .pick_local_port(local, remote, 0, 1024..=65535, &mut 0, |_| false)
        .unwrap();
    assert_eq!(key.hash_v4(remote, SocketAddrV4::new(local, p)) & 127, 5);
}

#[test]
fn flows_spread_evenly_over_shards() {
    // 4 shards, 8000 client flows to one server port: each shard within 20% of its share.
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        let rss = Rss::new(key, 4);
        let server = sa("192.0.2.1:80");
        let mut counts = [0u32; 4];
        for i in 0..8000u32 {
            let client = SocketAddrV4::new(
                Ipv4Addr::from(0xc633_6400 + (i % 200)),
                (32768 + i * 7 % 28000) as u16,
            );
            counts[rss.shard_of_tuple(client, server)] += 1;
        }
        for c in counts {
            assert!((1600..=2400).contains(&c), "{key:?}: {counts:?}");
        }
    }
    // The round-robin table gives 128 / 3 entries per shard, one extra to the first two.
    let reta = Reta::new(3);
    let per: Vec<usize> = (0..3)
        .map(|s| {
            reta.entries()
                .iter()
                .filter(|&&e| usize::from(e) == s)
                .count()
        })
        .collect();
    assert_eq!(per, [43, 43, 42]);
    // Key bytes past the end count as zero.
    assert_eq!(toeplitz(&[], &[0xff; 12]), 0);
    assert_eq!(rss::KEY_LEN, 40);
}

/// The reported reconnect bug: the sharded runtime's port search returned the same port
/// for the same peer every time, so a quick reconnect reused the 4-tuple just closed, which
/// the peer may still hold in TIME-WAIT. As Linux's `__inet_hash_connect`
/// (`table_perturb`), each port found moves the search's start past it: ten connections
/// in a row to one peer get ten different ports, all hashing home. Catches: the offset
/// unused, or not moved past the port found.
#[test]
fn successive_searches_for_one_peer_move_on() {
    let rss = Rss::new(RssKey::MICROSOFT, 4);
    let local = Ipv4Addr::new(10, 0, 0, 1);
    let remote = sa("10.0.0.2:80");
    let mut perturb = 0u32;
    let mut ports = Vec::new();
    for _ in 0..10 {
        let p = rss
            .pick_local_port(local, remote, 2, 32768..=60999, &mut perturb, |_| false)
            .unwrap();
        assert_eq!(rss.shard_of_tuple(remote, SocketAddrV4::new(local, p)), 2);
        ports.push(p);
    }
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 10, "{ports:?}");
}
