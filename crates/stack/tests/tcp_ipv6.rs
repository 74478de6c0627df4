//! TCP over IPv6 between two ustack stacks over the `sim` link (issue #15 stage 2): the
//! same TCP code as over IPv4, the tuple's IPv6 addresses interned beside it. A
//! connection both ways with its addresses, MSS and `ss` view; a dual-stack listener on
//! `::` taking both families (and `IPV6_V6ONLY` refusing IPv4); a closed port answered by
//! a RST; SYN cookies with Linux's IPv6 MSS table; a SYN flood from random IPv6 sources
//! interning a bounded set of addresses; Packet Too Big shrinking the segments of an
//! established connection; port unreachable refusing a connection being opened. (The fault property over IPv6 is in `tcp_prop.rs`.)

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_obs::Counter;
use ustack_stack::tcp::{State, TcpHandle};
use ustack_stack::{Config, Error, Ipv4Cidr, Ipv6Cidr, ListenerHandle};
use ustack_testkit::{A_IP, A_IP6, A_MAC, B_IP, B_IP6, B_MAC, Pair};
use ustack_wire::{ethernet, icmpv6};

fn v6(ip: Ipv6Addr, port: u16) -> SocketAddr {
    SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0))
}

/// Connect A to `to` and accept it on B's listener `l`; returns both handles and the
/// peer address B's accept gave.
fn open(p: &mut Pair, l: ListenerHandle, to: SocketAddr) -> (TcpHandle, TcpHandle, SocketAddr) {
    let a = p.a.tcp_connect(p.now, to).unwrap();
    let mut got = None;
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        got = got.or_else(|| p.b.tcp_accept_addr(l).ok());
        got.is_some() && p.a.tcp_state(a) == Ok(State::Established)
    }));
    let (b, peer) = got.unwrap();
    (a, b, peer)
}

/// Send `data` from `from` on `h` to `to` on `g`, reading it all.
fn transfer(p: &mut Pair, a_to_b: bool, h: TcpHandle, g: TcpHandle, data: &[u8]) -> Vec<u8> {
    let (mut sent, mut got) = (0, Vec::new());
    let mut buf = vec![0u8; 65_536];
    let done = p.run_until_cond(Duration::from_secs(30), |p| {
        let (tx, rx) = if a_to_b {
            (&mut p.a, &mut p.b)
        } else {
            (&mut p.b, &mut p.a)
        };
        if sent < data.len()
            && let Ok(n) = tx.tcp_send(p.now, h, &data[sent..])
        {
            sent += n;
        }
        while let Ok(n) = rx.tcp_recv(p.now, g, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    });
    assert!(done, "{} of {} bytes", got.len(), data.len());
    got
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A and B talk TCP over IPv6 both ways: the addresses each side sees, the MSS of a
/// 1500-byte link less IPv6's 40 bytes (1440, less 12 for timestamps), every segment over
/// IPv6 and none over IPv4, `ss` showing the IPv6 addresses, and a close that leaves
/// nothing held once TIME-WAIT ends.
#[test]
fn a_connection_over_ipv6_moves_data_both_ways_and_closes_clean() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let l = p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    let v4_before = p.a.mib().get(Counter::IpOutRequests);
    let (a, b, peer) = open(&mut p, l, v6(B_IP6, 80));
    let a_local = p.a.tcp_local_addr(a).unwrap();
    assert_eq!(a_local.ip(), A_IP6);
    assert_eq!(peer, a_local, "B sees A's address and port");
    assert_eq!(p.a.tcp_peer_addr(a).unwrap(), v6(B_IP6, 80));
    assert_eq!(p.b.tcp_local_addr(b).unwrap(), v6(B_IP6, 80));
    let info = p.a.tcp_info(a).unwrap();
    assert_eq!((info.local, info.remote), (a_local, v6(B_IP6, 80)));
    assert_eq!(
        info.mss,
        1500 - 40 - 20 - 12,
        "IPv6 header, TCP header, timestamps"
    );
    assert!(info.timestamps && info.sack);

    let up = pattern(300_000, 1);
    assert_eq!(transfer(&mut p, true, a, b, &up), up);
    let down = pattern(100_000, 7);
    assert_eq!(transfer(&mut p, false, b, a, &down), down);
    assert_eq!(
        p.a.mib().get(Counter::IpOutRequests),
        v4_before,
        "nothing over IPv4"
    );
    assert!(p.a.mib().get(Counter::Ip6OutRequests) > 200);
    assert_eq!(p.a.mib().get(Counter::TcpExtTCPTimeouts), 0);

    let views = p.b.sockets(p.now);
    let estab = views.iter().find(|v| v.state == "ESTAB").unwrap();
    assert_eq!((estab.local, estab.remote), (v6(B_IP6, 80), Some(a_local)));

    p.a.tcp_close(p.now, a).unwrap();
    p.run_for(Duration::from_millis(50));
    p.b.tcp_close(p.now, b).unwrap();
    p.run_for(Duration::from_millis(50));
    let tw = p.a.sockets(p.now);
    let tw = tw
        .iter()
        .find(|v| v.state == "TIME-WAIT")
        .expect("A in TIME-WAIT");
    assert_eq!(
        tw.remote,
        Some(v6(B_IP6, 80)),
        "the record resolves its addresses"
    );
    let list = p.a.tcp_timewait_list();
    assert_eq!(list.len(), 1, "tcp_timewait_list has the IPv6 record");
    assert_eq!((list[0].0, list[0].1), (a_local, v6(B_IP6, 80)));
    assert!(list[0].2 > p.now);
    p.run_for(Duration::from_secs(120));
    for s in [&p.a, &p.b] {
        let r = s.tcp_resources();
        assert_eq!(
            (r.connections, r.timewait, r.requests, r.buffer_bytes),
            (0, 0, 0, 0)
        );
    }
}

/// A listener on `::` takes IPv4 and IPv6 connections, the IPv4 peer seen as
/// `::ffff:192.0.2.1` (RFC 3493 §3.7, Linux's default); the IPv4-only `tcp_accept`
/// refuses to hand out what it cannot name. With `IPV6_V6ONLY` an IPv4 SYN finds no
/// socket and is reset; an IPv4 listener does not take IPv6.
#[test]
fn a_dual_stack_listener_takes_both_families_unless_v6only() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let l = p.b.tcp_listen(v6(Ipv6Addr::UNSPECIFIED, 80), 8).unwrap();
    let (a4, b4, peer4) = open(&mut p, l, SocketAddr::V4(SocketAddrV4::new(B_IP, 80)));
    let a4_port = p.a.tcp_local_addr(a4).unwrap().port();
    assert_eq!(
        peer4,
        v6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped(), a4_port)
    );
    assert_eq!(
        p.b.tcp_local_addr(b4).unwrap(),
        v6(B_IP.to_ipv6_mapped(), 80)
    );
    assert_eq!(
        p.a.tcp_local_addr(a4).unwrap(),
        SocketAddr::V4(SocketAddrV4::new(A_IP, a4_port)),
        "A connected over IPv4 and sees IPv4"
    );
    let (a6, b6, peer6) = open(&mut p, l, v6(B_IP6, 80));
    assert_eq!(peer6.ip(), A_IP6);
    assert_eq!(transfer(&mut p, true, a4, b4, b"over four"), b"over four");
    assert_eq!(transfer(&mut p, true, a6, b6, b"over six"), b"over six");

    // The IPv4 accept call cannot name a peer of an IPv6 listener.
    let _a = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.b.tcp_accept(l).err(), Some(Error::AddrFamily));
    assert!(
        p.b.tcp_accept_addr(l).is_ok(),
        "still queued for tcp_accept_addr"
    );

    // IPV6_V6ONLY: IPv4 is refused, IPv6 still taken.
    let only6 = p.b.tcp_listen(v6(Ipv6Addr::UNSPECIFIED, 81), 8).unwrap();
    p.b.tcp_listener_set_v6only(only6, true).unwrap();
    let refused = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 81)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_state(refused), Ok(State::Closed));
    assert_eq!(
        p.a.tcp_take_error(refused),
        Ok(Some(Error::ConnectionRefused))
    );
    let _ = open(&mut p, only6, v6(B_IP6, 81));

    // An IPv4 listener does not take IPv6, nor a V6ONLY flag.
    let only4 =
        p.b.tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 82), 8)
            .unwrap();
    assert_eq!(
        p.b.tcp_listener_set_v6only(only4, true),
        Err(Error::AddrFamily)
    );
    let refused6 = p.a.tcp_connect(p.now, v6(B_IP6, 82)).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        p.a.tcp_take_error(refused6),
        Ok(Some(Error::ConnectionRefused))
    );
    // A dual-stack `::` listener and an IPv4 one conflict.
    assert_eq!(
        p.b.tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80), 8)
            .err(),
        Some(Error::AddrInUse)
    );
}

/// One listener a port across both families as Linux's `inet_csk_bind_conflict`: an IPv4
/// listener and a dual-stack `::` one conflict either way round (EADDRINUSE, also for a
/// specific IPv4 address), a V6ONLY `::` and `0.0.0.0` coexist, each taking its own
/// family, and the V6ONLY one cannot turn dual-stack while the IPv4 one is there; an
/// IPv6 listener on a specific IPv6 address and `0.0.0.0` coexist.
#[test]
fn listeners_conflict_across_families_as_linux() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let any4 = |port| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
    let any6 = |port| SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0);
    let l4 = p.b.tcp_listen(any4(80), 8).unwrap();
    assert_eq!(p.b.tcp_listen(any6(80), 8).err(), Some(Error::AddrInUse));
    assert_eq!(
        p.b.tcp_listen(v6(B_IP.to_ipv6_mapped(), 80), 8).err(),
        Some(Error::AddrInUse),
        "a v4-mapped address is IPv4"
    );
    let l6 = p.b.tcp_listen_v6only(any6(80), 8).unwrap();
    assert_eq!(
        p.b.tcp_listener_set_v6only(l6, false),
        Err(Error::AddrInUse)
    );
    assert_eq!(
        p.b.tcp_listen_v6only(any6(80), 8).err(),
        Some(Error::AddrInUse)
    );
    let (_, _, peer4) = open(&mut p, l4, SocketAddr::V4(SocketAddrV4::new(B_IP, 80)));
    assert_eq!(peer4.ip(), A_IP, "IPv4 reaches the IPv4 listener");
    let (_, _, peer6) = open(&mut p, l6, v6(B_IP6, 80));
    assert_eq!(peer6.ip(), A_IP6, "IPv6 reaches the IPv6 listener");
    // With the IPv4 listener gone, the IPv6 one may take IPv4 too.
    p.b.tcp_close_listener(p.now, l4).unwrap();
    p.b.tcp_listener_set_v6only(l6, false).unwrap();
    let (_, _, mapped) = open(&mut p, l6, SocketAddr::V4(SocketAddrV4::new(B_IP, 80)));
    assert_eq!(mapped.ip(), A_IP.to_ipv6_mapped());

    // The other way round: a dual-stack `::` first.
    p.b.tcp_listen(any6(81), 8).unwrap();
    assert_eq!(p.b.tcp_listen(any4(81), 8).err(), Some(Error::AddrInUse));
    assert_eq!(
        p.b.tcp_listen(SocketAddrV4::new(B_IP, 81), 8).err(),
        Some(Error::AddrInUse)
    );
    // A specific IPv6 address does not cover IPv4, V6ONLY or not.
    let l82 = p.b.tcp_listen(v6(B_IP6, 82), 8).unwrap();
    p.b.tcp_listen(any4(82), 8).unwrap();
    p.b.tcp_listener_set_v6only(l82, true).unwrap();
    p.b.tcp_listener_set_v6only(l82, false).unwrap();
}

/// A client connecting to `::ffff:a.b.c.d` connects over IPv4 and sees its addresses
/// v4-mapped (Linux `tcp_v6_connect` handing it to `tcp_v4_connect`).
#[test]
fn connecting_to_a_v4_mapped_address_goes_over_ipv4() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 8).unwrap();
    let v6_before = p.a.mib().get(Counter::Ip6OutRequests);
    let (a, b, peer) = open(&mut p, l, v6(B_IP.to_ipv6_mapped(), 80));
    assert_eq!(peer.ip(), A_IP, "B is an IPv4 listener");
    assert_eq!(p.a.tcp_peer_addr(a).unwrap(), v6(B_IP.to_ipv6_mapped(), 80));
    assert_eq!(p.a.tcp_local_addr(a).unwrap().ip(), A_IP.to_ipv6_mapped());
    assert_eq!(transfer(&mut p, false, b, a, b"mapped"), b"mapped");
    assert_eq!(p.a.mib().get(Counter::Ip6OutRequests), v6_before);
}

/// With `tcp_syncookies` = 2 every SYN is answered with a cookie; over IPv6 the cookie
/// carries an index into Linux's IPv6 table (1220, 1420, 1440, 8940): a client whose MSS
/// is 1340 (an MTU of 1400) gets 1220, where the IPv4 table would give 1300.
#[test]
fn syn_cookies_over_ipv6_use_the_ipv6_mss_table() {
    let link = SimLinkConfig::default();
    let mut a =
        Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A_IP6, 64));
    let mut b =
        Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_IP6, 64));
    (a.mtu, b.mtu) = (1400, 1500);
    (a.seed, b.seed) = (Some(3), Some(4));
    let mut p = Pair::with_configs(link, a, b);
    p.run_for(Duration::from_millis(1100));
    p.b.set_sysctl("net.ipv4.tcp_syncookies", 2).unwrap();
    let l = p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    let (a, b, _) = open(&mut p, l, v6(B_IP6, 80));
    let m = p.b.mib();
    assert_eq!(m.get(Counter::TcpExtSyncookiesSent), 1);
    assert_eq!(m.get(Counter::TcpExtSyncookiesRecv), 1);
    assert_eq!(m.get(Counter::TcpExtSyncookiesFailed), 0);
    assert_eq!(p.a.tcp_info(a).unwrap().mss, 1340 - 12);
    assert_eq!(p.b.tcp_info(b).unwrap().mss, 1220 - 12, "the cookie's MSS");
    let data = pattern(50_000, 3);
    assert_eq!(transfer(&mut p, false, b, a, &data), data);
}

/// An ICMPv6 Packet Too Big from a router (MTU 1280) quoting a data segment in flight
/// (RFC 8201 §4; RFC 5927 §4.1: its sequence number within SND.UNA..SND.NXT) lowers the
/// connection's MSS to 1280 - 60 - 12 and the segments too large are sent again at once
/// in pieces that fit, without a timeout (Linux `tcp_v6_mtu_reduced`); the transfer
/// completes with every later segment within 1280 bytes.
#[test]
fn packet_too_big_shrinks_the_segments_of_an_established_connection() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let l = p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    let (a, b, _) = open(&mut p, l, v6(B_IP6, 80));
    assert_eq!(p.a.tcp_info(a).unwrap().mss, 1428);
    let data = pattern(200_000, 9);
    let sent = p.a.tcp_send(p.now, a, &data).unwrap();
    // The router drops what A just sent (full-sized segments) and says why.
    let mut dropped = Vec::new();
    while let Some(f) = p.a.poll_transmit(p.now) {
        dropped.push(f);
    }
    let big = dropped
        .iter()
        .find(|f| f.len() == ethernet::HEADER_LEN + 1500)
        .expect("a full-sized segment");
    let ptb = packet_too_big(1280, &big[ethernet::HEADER_LEN..]);
    p.a.receive(p.now, &ptb);
    assert_eq!(p.a.tcp_info(a).unwrap().mss, 1280 - 60 - 12);
    assert_eq!(p.a.path_mtu6(p.now, B_IP6), 1280);
    // The retransmissions and everything after fit the path: A's frames go to B through
    // a router whose next link is 1280 bytes (larger ones are lost there), B's straight
    // back, with no delay.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let (mut offset, mut largest, mut now) = (sent, 0, p.now);
    let deadline = now + Duration::from_secs(30);
    let mut done = false;
    while now < deadline && !done {
        for s in [&mut p.a, &mut p.b] {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
            }
        }
        let mut moved = false;
        while let Some(f) = p.a.poll_transmit(now) {
            moved = true;
            let ip_len = f.len() - ethernet::HEADER_LEN;
            largest = largest.max(ip_len);
            if ip_len <= 1280 {
                p.b.receive(now, &f);
            }
        }
        while let Some(f) = p.b.poll_transmit(now) {
            moved = true;
            p.a.receive(now, &f);
        }
        if offset < data.len()
            && let Ok(n) = p.a.tcp_send(now, a, &data[offset..])
        {
            offset += n;
        }
        while let Ok(n) = p.b.tcp_recv(now, b, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        done = got.len() == data.len();
        if !moved {
            now = [p.a.poll_timeout(), p.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(deadline)
                .max(now + Duration::from_micros(1));
        }
    }
    assert!(done, "{} of {} bytes", got.len(), data.len());
    assert_eq!(got, data);
    assert!(largest <= 1280, "A sent a {largest}-byte IPv6 packet");
    assert_eq!(
        p.a.mib().get(Counter::TcpExtTCPTimeouts),
        0,
        "no RTO needed"
    );
    assert_eq!(p.a.mib().get(Counter::TcpExtOutOfWindowIcmps), 0);
}

/// A SYN flood from 5,000 distinct IPv6 sources against a listener answering with SYN
/// cookies (`tcp_syncookies` = 2): every SYN is answered, and the table of interned IPv6
/// addresses stays bounded by its sweep (at most 1,024 entries with nothing else held),
/// not one entry per source (docs/stack.md, "how the tuple holds IPv6").
#[test]
fn a_syn_flood_from_random_ipv6_sources_interns_a_bounded_set() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    p.b.set_sysctl("net.ipv4.tcp_syncookies", 2).unwrap();
    let _l = p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    for i in 0..5_000u32 {
        let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 1, (i >> 16) as u16, i as u16);
        let now = p.now;
        p.b.receive(now, &syn6(src, 1024 + (i % 60_000) as u16));
    }
    let m = p.b.mib();
    assert_eq!(m.get(Counter::TcpExtSyncookiesSent), 5_000);
    let mem = p.b.memory();
    let interned = mem.get("tcp_addr6").expect("the kind").count;
    assert!(interned <= 1024, "{interned} addresses interned");
    assert_eq!(p.b.tcp_resources().requests, 0, "cookies keep no state");
}

/// A TCP SYN from `src`:`port` to B's port 80, in an Ethernet frame to B.
fn syn6(src: Ipv6Addr, port: u16) -> Vec<u8> {
    let repr = ustack_wire::tcp::Repr {
        src_port: port,
        dst_port: 80,
        seq_number: ustack_wire::SeqNumber(7),
        flags: ustack_wire::tcp::Flags::SYN,
        window_len: 65_535,
        max_seg_size: Some(1440),
        ..ustack_wire::tcp::Repr::default()
    };
    let mut seg = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut ustack_wire::tcp::Packet::new_unchecked(&mut seg[..]),
        &src.into(),
        &B_IP6.into(),
        true,
    );
    ustack_testkit::ipv6_frame((A_MAC, B_MAC), src, B_IP6, 6, &seg)
}

/// An ICMPv6 Packet Too Big from a router (2001:db8::fe) to A quoting `packet`, in an
/// Ethernet frame to A.
fn packet_too_big(mtu: u32, packet: &[u8]) -> Vec<u8> {
    let quote = &packet[..packet.len().min(1280 - 48)];
    router_to_a(icmpv6::Repr::PacketTooBig { mtu, data: quote })
}

/// An ICMPv6 message from a router (2001:db8::fe) to A, in an Ethernet frame to A.
fn router_to_a(repr: icmpv6::Repr) -> Vec<u8> {
    let router = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe);
    let mut icmp = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut icmpv6::Packet::new_unchecked(&mut icmp[..]),
        &router,
        &A_IP6,
        true,
    );
    ustack_testkit::ipv6_frame((B_MAC, A_MAC), router, A_IP6, 58, &icmp)
}

/// A Destination Unreachable, port unreachable (RFC 4443 §3.1 code 4), quoting A's SYN
/// fails the connection with ECONNREFUSED (Linux `tcp_v6_err`, `icmpv6_err_convert`);
/// one quoting a sequence number not in flight is ignored (RFC 5927 §4.1).
#[test]
fn port_unreachable_refuses_a_connection_being_opened() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    // B's link address known first, so that the SYN goes out at once.
    p.a.ping6(p.now, B_IP6, 1, 1, b"hello").unwrap();
    p.run_for(Duration::from_millis(5));
    let a = p.a.tcp_connect(p.now, v6(B_IP6, 80)).unwrap();
    let syn = p.a.poll_transmit(p.now).expect("the SYN");
    let ip = &syn[ethernet::HEADER_LEN..];
    assert_eq!(ip[6], 6, "a TCP segment");
    let unreach = |data: &[u8]| {
        router_to_a(icmpv6::Repr::DstUnreachable {
            code: icmpv6::dst_unreachable::PORT_UNREACHABLE,
            data,
        })
    };
    let mut forged = ip.to_vec();
    forged[44] ^= 0x80; // the quoted sequence number, far from the ISS
    p.a.receive(p.now, &unreach(&forged));
    assert_eq!(p.a.tcp_state(a), Ok(State::SynSent));
    assert_eq!(p.a.mib().get(Counter::TcpExtOutOfWindowIcmps), 1);
    p.a.receive(p.now, &unreach(ip));
    assert_eq!(p.a.tcp_state(a), Ok(State::Closed));
    assert_eq!(p.a.tcp_take_error(a), Ok(Some(Error::ConnectionRefused)));
}

/// An ICMPv6 error of type `ty` (1, 3 or 4) and `code` quoting `data`, from the router
/// to A.
fn icmp6_error(ty: u8, code: u8, data: &[u8]) -> Vec<u8> {
    router_to_a(match ty {
        1 => icmpv6::Repr::DstUnreachable { code, data },
        3 => icmpv6::Repr::TimeExceeded { code, data },
        _ => icmpv6::Repr::ParamProblem {
            code,
            pointer: 0,
            data,
        },
    })
}

/// A connected A with B's link address known, and A's SYN to B port 80 taken off the
/// link (its IPv6 packet): what an ICMPv6 error about it quotes.
fn syn_in_flight(p: &mut Pair) -> (TcpHandle, Vec<u8>) {
    p.a.ping6(p.now, B_IP6, 1, 1, b"hello").unwrap();
    p.run_for(Duration::from_millis(5));
    let a = p.a.tcp_connect(p.now, v6(B_IP6, 80)).unwrap();
    let syn = p.a.poll_transmit(p.now).expect("the SYN");
    (a, syn[ethernet::HEADER_LEN..].to_vec())
}

/// Every ICMPv6 error about a SYN fails the connection with the errno Linux's
/// `icmpv6_err_convert` gives (`tcp_v6_err`: "sk->sk_err = err; tcp_done(sk)" in
/// SYN-SENT, whatever the code): no route ENETUNREACH, administratively prohibited
/// EACCES, address unreachable EHOSTUNREACH, an unknown code EPROTO, Time Exceeded
/// EHOSTUNREACH, Parameter Problem EPROTO.
#[test]
fn icmpv6_errors_fail_a_connection_being_opened_with_linux_errnos() {
    let cases = [
        (1, 0, Error::NetUnreachable, 101),
        (1, 1, Error::PermissionDenied, 13),
        (1, 3, Error::HostUnreachable, 113),
        (1, 9, Error::Protocol, 71),
        (3, 0, Error::HostUnreachable, 113),
        (4, 0, Error::Protocol, 71),
    ];
    for (ty, code, want, errno) in cases {
        let mut p = Pair::dual_stack(SimLinkConfig::default());
        let (a, syn) = syn_in_flight(&mut p);
        p.a.receive(p.now, &icmp6_error(ty, code, &syn));
        assert_eq!(p.a.tcp_state(a), Ok(State::Closed), "type {ty} code {code}");
        let got = p.a.tcp_take_error(a).unwrap();
        assert_eq!(got, Some(want), "type {ty} code {code}");
        assert_eq!(want.errno(), errno);
    }
}

/// On an established connection the soft errors (address unreachable, Time Exceeded) are
/// kept, not fatal: the connection stays, `SO_ERROR` reports the error once (Linux
/// `tcp_v6_err` without `IPV6_RECVERR`: `sk_err_soft`); a quote of another connection's
/// segment counts as Icmp6InErrors and changes nothing.
#[test]
fn icmpv6_soft_errors_leave_an_established_connection_up() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    let l = p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    let (a, _b, _) = open(&mut p, l, v6(B_IP6, 80));
    p.a.tcp_send(p.now, a, b"in flight").unwrap();
    let seg = p.a.poll_transmit(p.now).expect("the data segment");
    let seg = seg[ethernet::HEADER_LEN..].to_vec();
    let mut other = seg.clone();
    other[40] ^= 0x01; // another local port: no connection
    let errors = p.a.mib().get(Counter::Icmp6InErrors);
    p.a.receive(p.now, &icmp6_error(1, 3, &other));
    assert_eq!(p.a.mib().get(Counter::Icmp6InErrors), errors + 1);
    assert_eq!(p.a.tcp_take_error(a), Ok(None));
    for (ty, code) in [(1, 3), (3, 0)] {
        p.a.receive(p.now, &icmp6_error(ty, code, &seg));
        assert_eq!(p.a.tcp_state(a), Ok(State::Established));
        assert_eq!(p.a.tcp_take_error(a), Ok(Some(Error::HostUnreachable)));
        assert_eq!(p.a.tcp_take_error(a), Ok(None), "reported once");
    }
}

/// (next header, flow label) of each IPv6 TCP or UDP packet a stack sent.
type Labels = Vec<(u8, u32)>;

/// The flow labels of the IPv6 TCP and UDP packets each stack sends while the two
/// exchange frames until quiet: (from A, from B).
fn shuttle_labels(p: &mut Pair) -> (Labels, Labels) {
    let mut seen = (Vec::new(), Vec::new());
    let label = |f: &[u8]| {
        let ip = &f[ethernet::HEADER_LEN..];
        let flow = u32::from_be_bytes([ip[0], ip[1], ip[2], ip[3]]) & 0xf_ffff;
        (ip[6], flow)
    };
    for _ in 0..20 {
        let mut moved = false;
        while let Some(f) = p.a.poll_transmit(p.now) {
            if f[12..14] == [0x86, 0xdd] && f[ethernet::HEADER_LEN + 6] != 58 {
                seen.0.push(label(&f));
            }
            p.b.receive(p.now, &f);
            moved = true;
        }
        while let Some(f) = p.b.poll_transmit(p.now) {
            if f[12..14] == [0x86, 0xdd] && f[ethernet::HEADER_LEN + 6] != 58 {
                seen.1.push(label(&f));
            }
            p.a.receive(p.now, &f);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    seen
}

/// The label every packet in `seen` carries, checking they all carry one.
fn one_label(seen: &[(u8, u32)]) -> u32 {
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|s| *s == seen[0]), "{seen:?}");
    seen[0].1
}

/// A UDP datagram from A port 5000 to B port 53 on a fresh pair with link seed `seed` and
/// `auto_flowlabels`: its flow label.
fn udp_label(seed: u64, auto: u64) -> u32 {
    let mut p = Pair::dual_stack(SimLinkConfig {
        seed,
        ..SimLinkConfig::default()
    });
    p.a.set_sysctl("net.ipv6.auto_flowlabels", auto).unwrap();
    p.b.udp_bind(v6(Ipv6Addr::UNSPECIFIED, 53)).unwrap();
    let u = p.a.udp_bind(v6(A_IP6, 5000)).unwrap();
    for _ in 0..2 {
        p.a.udp_send_to(p.now, u, b"q", v6(B_IP6, 53)).unwrap();
    }
    let (from_a, _) = shuttle_labels(&mut p);
    assert_eq!(from_a.len(), 2);
    one_label(&from_a)
}

/// Flow labels (RFC 6437, Linux `auto_flowlabels` / `ip6_make_flowlabel`): every packet
/// of a TCP connection, SYN to FIN, carries one label per direction, not zero; another
/// connection another label; two datagrams of one UDP flow one label; another stack
/// (another secret) gives the same tuple another label; `net.ipv6.auto_flowlabels` = 0
/// sends zero.
#[test]
fn flow_labels_are_per_flow_keyed_and_off_with_the_sysctl() {
    let mut p = Pair::dual_stack(SimLinkConfig::default());
    p.b.tcp_listen(v6(B_IP6, 80), 8).unwrap();
    let conn = |p: &mut Pair| {
        let a = p.a.tcp_connect(p.now, v6(B_IP6, 80)).unwrap();
        let (mut from_a, mut from_b) = shuttle_labels(p);
        p.a.tcp_send(p.now, a, b"data").unwrap();
        p.a.tcp_close(p.now, a).unwrap();
        let more = shuttle_labels(p);
        from_a.extend(more.0);
        from_b.extend(more.1);
        assert!(
            from_a.len() >= 3 && from_b.len() >= 2,
            "{from_a:?} {from_b:?}"
        );
        (one_label(&from_a), one_label(&from_b))
    };
    let (a1, b1) = conn(&mut p);
    let (a2, b2) = conn(&mut p);
    assert!(a1 != 0 && b1 != 0);
    assert!(a1 != a2 && b1 != b2, "another connection, another label");

    let u = udp_label(1, 1);
    assert_ne!(u, 0);
    assert_eq!(udp_label(1, 1), u, "one secret, one label");
    assert_ne!(udp_label(2, 1), u, "another secret, another label");
    assert_eq!(udp_label(1, 0), 0, "auto_flowlabels = 0");

    p.a.set_sysctl("net.ipv6.auto_flowlabels", 0).unwrap();
    p.b.set_sysctl("net.ipv6.auto_flowlabels", 0).unwrap();
    assert_eq!(conn(&mut p), (0, 0));
}
