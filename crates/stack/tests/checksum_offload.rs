//! `Config::checksum_offload`: two stacks that both skip TCP and UDP checksums (a shm link
//! between two ustack processes, as Linux's loopback skips them) exchange data with zero
//! checksums on the wire; a stack that checks them drops such segments as corrupt, so
//! the setting is for both ends of a trusted link only.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_obs::DropReason;
use ustack_stack::{Config, Ipv4Cidr, Ipv6Cidr};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC, Pair, pattern};

const A_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xa);
const B_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xb);

fn pair(a_offload: bool, b_offload: bool) -> Pair {
    let a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24));
    let b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24));
    pair_of(a, b, a_offload, b_offload)
}

/// The same ends with IPv6 addresses too.
fn pair6(a_offload: bool, b_offload: bool) -> Pair {
    let a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A_IP6, 64));
    let b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_IP6, 64));
    let mut p = pair_of(a, b, a_offload, b_offload);
    // Duplicate address detection: a second before the addresses are usable.
    p.run_for(Duration::from_secs(2));
    p
}

fn pair_of(mut a: Config, mut b: Config, a_offload: bool, b_offload: bool) -> Pair {
    (a.seed, b.seed) = (Some(1), Some(2));
    a.checksum_offload = a_offload;
    b.checksum_offload = b_offload;
    Pair::with_configs(SimLinkConfig::default(), a, b)
}

/// A sends `data` to B over TCP; returns what B read.
fn transfer(p: &mut Pair, data: &[u8]) -> Vec<u8> {
    transfer_to(p, SocketAddrV4::new(B_IP, 80).into(), data)
}

/// A sends `data` to B's `to` over TCP; returns what B read.
fn transfer_to(p: &mut Pair, to: SocketAddr, data: &[u8]) -> Vec<u8> {
    let l = p.b.tcp_listen(to, 4).unwrap();
    let c = p.a.tcp_connect(p.now, to).unwrap();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut server = None;
    let mut buf = vec![0u8; 65536];
    p.run_until_cond(Duration::from_secs(30), |p| {
        if sent < data.len()
            && let Ok(n) = p.a.tcp_send(p.now, c, &data[sent..])
        {
            sent += n;
        }
        if server.is_none() {
            server = p.b.tcp_accept_addr(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = server {
            while let Ok(n @ 1..) = p.b.tcp_recv(p.now, s, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        got.len() == data.len()
    });
    got
}

#[test]
fn both_ends_offloaded_exchange_data_with_zero_checksums() {
    let mut p = pair(true, true);
    let data = pattern(256 * 1024, 3);
    assert_eq!(transfer(&mut p, &data), data);
    // UDP too: a zero UDP checksum is "none" (RFC 768) for every IPv4 receiver.
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let ub = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    p.a.udp_send_to(p.now, ua, b"query", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.settle();
    let mut buf = [0u8; 64];
    assert_eq!(p.b.udp_recv_from(ub, &mut buf).unwrap().0, 5);
    for side in [&p.a, &p.b] {
        assert_eq!(side.mib().drops(DropReason::TcpCsum), 0);
    }
}

#[test]
fn a_checking_receiver_drops_what_an_offloaded_sender_sends() {
    // A skips checksums, B checks them: A's SYN has a zero checksum and B drops it as
    // corrupt, every retransmission too; nothing is ever established.
    let mut p = pair(true, false);
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.run_for(Duration::from_secs(5));
    assert!(p.b.tcp_accept(l).is_err());
    assert!(
        p.b.mib().drops(DropReason::TcpCsum) >= 2,
        "the SYN and a retransmission"
    );
}

/// Over IPv6 the same: both ends offloaded exchange data (the segments' checksums zero),
/// and a checking receiver drops an offloaded sender's SYN as corrupt.
#[test]
fn ipv6_follows_the_same_setting() {
    let to = SocketAddr::from((B_IP6, 80));
    let mut p = pair6(true, true);
    let data = pattern(256 * 1024, 4);
    assert_eq!(transfer_to(&mut p, to, &data), data);
    for side in [&p.a, &p.b] {
        assert_eq!(side.mib().drops(DropReason::TcpCsum), 0);
    }
    let mut p = pair6(true, false);
    let l = p.b.tcp_listen(to, 4).unwrap();
    p.a.tcp_connect(p.now, to).unwrap();
    p.run_for(Duration::from_secs(5));
    assert!(p.b.tcp_accept_addr(l).is_err());
    assert!(
        p.b.mib().drops(DropReason::TcpCsum) >= 2,
        "the SYN and a retransmission"
    );
}

/// An IPv4 packet from 192.0.2.1 to `B_IP` carrying `l4` (protocol `proto`), with a
/// correct IP header checksum.
fn ipv4_packet(proto: u8, l4: &[u8]) -> Vec<u8> {
    let total = (20 + l4.len()) as u16;
    let mut p = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 1];
    p.extend_from_slice(&B_IP.octets());
    p[2..4].copy_from_slice(&total.to_be_bytes());
    let sum = ustack_wire::checksum::checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(l4);
    p
}

/// `Stack::receive_with`: a datagram and a SYN whose checksums are wrong are dropped as
/// corrupt when the link said nothing about them (a TUN without offloads), and taken when
/// the link vouched for them (a TUN queue's `DATA_VALID` or `NEEDS_CSUM`: not verified
/// again); the checking stack is the default, not offloaded.
#[test]
fn the_links_word_on_a_checksum_skips_verifying_it_and_only_then() {
    let mut b = ustack_stack::Stack::new(Config::ip(Ipv4Cidr::new(B_IP, 24)));
    let now = ustack_obs::Instant::ZERO;
    let ub = b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    // UDP: ports 4000 -> 53, length 13, checksum 0x1234 (wrong), "hello".
    let mut udp = vec![0x0f, 0xa0, 0, 53, 0, 13, 0x12, 0x34];
    udp.extend_from_slice(b"hello");
    let packet = ipv4_packet(17, &udp);
    let mut buf = [0u8; 64];
    b.receive(now, &packet);
    assert_eq!(
        b.mib().drops(DropReason::UdpCsum),
        1,
        "verified and dropped"
    );
    assert!(b.udp_recv_from(ub, &mut buf).is_err(), "nothing delivered");
    b.receive_with(now, &packet, true);
    assert_eq!(b.mib().drops(DropReason::UdpCsum), 1, "not verified");
    assert_eq!(b.udp_recv_from(ub, &mut buf).unwrap().0, 5);
    // The word is for one frame only.
    b.receive_with(now, &packet, false);
    assert_eq!(b.mib().drops(DropReason::UdpCsum), 2);

    // TCP: a SYN to a listener, checksum wrong.
    b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let mut syn = vec![
        0x0f, 0xa1, 0, 80, 0, 0, 0, 7, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff,
    ];
    syn.extend_from_slice(&[0xbe, 0xef, 0, 0]);
    let packet = ipv4_packet(6, &syn);
    b.receive(now, &packet);
    assert_eq!(
        b.mib().drops(DropReason::TcpCsum),
        1,
        "verified and dropped"
    );
    assert!(
        b.poll_transmit(now).is_none(),
        "no SYN-ACK for a corrupt SYN"
    );
    b.receive_with(now, &packet, true);
    assert_eq!(b.mib().drops(DropReason::TcpCsum), 1, "not verified");
    let synack = b
        .poll_transmit(now)
        .expect("a SYN-ACK for the vouched-for SYN");
    assert_eq!(synack[20 + 13] & 0x12, 0x12, "SYN and ACK set");
}
