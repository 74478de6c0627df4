//! Bad input is a counted drop, never a panic, and never a silent loss: each malformed
//! frame below is dropped exactly once, with the named reason, bumping exactly the MIB
//! counters that reason names (Linux `ip_rcv_core`, `__udp4_lib_rcv`, `icmp_rcv`). Edge
//! cases that Linux accepts (Ethernet padding, IP options, the reserved flag) are delivered.

use core::net::{Ipv4Addr, SocketAddrV4};

use ustack_obs::{Counter, DropReason};
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Stack};
use ustack_wire::{IpProtocol, checksum, ethernet, ipv4, udp};

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PORT: u16 = 7;

fn stack() -> (Stack, ustack_stack::UdpHandle) {
    let mut s = Stack::new(Config::ethernet(MAC, Ipv4Cidr::new(IP, 24)));
    let h = s.udp_bind(SocketAddrV4::new(IP, PORT)).unwrap();
    (s, h)
}

/// A correct Ethernet/IPv4/UDP frame from PEER:1000 to IP:`dst_port`.
fn udp_frame(dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + payload.len()];
    ethernet::Repr {
        src_addr: PEER_MAC,
        dst_addr: MAC,
        ethertype: ethernet::EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    ipv4::Repr {
        src_addr: PEER,
        dst_addr: IP,
        next_header: IpProtocol::Udp,
        payload_len: 8 + payload.len(),
        ttl: 64,
        tos: 0,
        ident: 1,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut f[14..]), true);
    udp::Repr {
        src_port: 1000,
        dst_port,
    }
    .emit(
        &mut udp::Packet::new_unchecked(&mut f[34..]),
        &PEER.into(),
        &IP.into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        true,
    );
    f
}

/// Recompute the IPv4 header checksum after editing the header.
fn fix_ip_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0xf) * 4;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Recompute the UDP checksum (payload after a 20-byte IP header).
fn fix_udp_checksum(f: &mut [u8]) {
    let mut p = udp::Packet::new_unchecked(&mut f[34..]);
    p.fill_checksum(&PEER.into(), &IP.into());
}

/// An ICMP message from PEER: type, code, rest-of-header and data, checksum correct.
fn icmp_frame(body: &[u8]) -> Vec<u8> {
    let mut f = udp_frame(PORT, &vec![0; body.len().saturating_sub(8)]);
    f.truncate(34);
    f.extend_from_slice(body);
    f[23] = 1; // protocol ICMP
    let total = (20 + body.len()) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    fix_ip_checksum(&mut f);
    if body.len() >= 4 {
        let c = checksum::checksum(&f[34..]);
        f[36..38].copy_from_slice(&c.to_be_bytes());
    }
    f
}

#[track_caller]
fn assert_dropped(frame: &[u8], reason: DropReason) {
    let (mut s, _) = stack();
    let before = s.mib().clone();
    s.receive(Instant::ZERO, frame);
    let m = s.mib();
    assert_eq!(
        m.drops(reason),
        1,
        "{reason} counted once:\n{}",
        m.render_drops()
    );
    assert_eq!(
        m.drops_total(),
        1,
        "nothing else dropped:\n{}",
        m.render_drops()
    );
    for &c in reason.counters() {
        assert_eq!(m.get(c), before.get(c) + 1, "{reason} bumps {c}");
    }
}

#[test]
fn link_layer_drops() {
    assert_dropped(&[0u8; 10], DropReason::MacHdr);
    let mut f = udp_frame(PORT, b"x");
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    assert_dropped(&f, DropReason::Otherhost);
    let mut f = udp_frame(PORT, b"x");
    f[12..14].copy_from_slice(&0x88ccu16.to_be_bytes()); // LLDP
    assert_dropped(&f, DropReason::UnhandledProto);
    let mut f = udp_frame(PORT, b"x");
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    f.truncate(14 + 20); // an ARP packet needs 28 bytes
    assert_dropped(&f, DropReason::ArpMalformed);
}

#[test]
fn ipv4_header_drops_in_linux_order() {
    assert_dropped(&udp_frame(PORT, b"x")[..14 + 19], DropReason::IpInhdr);
    let mut f = udp_frame(PORT, b"x");
    f[14] = 0x65; // version 6
    fix_ip_checksum(&mut f);
    assert_dropped(&f, DropReason::IpInhdr);
    let mut f = udp_frame(PORT, b"x");
    f[14] = 0x44; // IHL 4
    assert_dropped(&f, DropReason::IpInhdr);
    let mut f = udp_frame(PORT, b"x");
    f[22] ^= 0x01; // TTL changed, checksum not
    assert_dropped(&f, DropReason::IpCsum);
    let mut f = udp_frame(PORT, b"x");
    f[16..18].copy_from_slice(&200u16.to_be_bytes()); // total length past the frame
    fix_ip_checksum(&mut f);
    assert_dropped(&f, DropReason::IpTruncated);
    let mut f = udp_frame(PORT, b"x");
    f[16..18].copy_from_slice(&10u16.to_be_bytes()); // total length inside the header
    fix_ip_checksum(&mut f);
    assert_dropped(&f, DropReason::IpInhdr);
    let mut f = udp_frame(PORT, b"x");
    f[30..34].copy_from_slice(&[192, 0, 2, 77]); // not our address: we do not forward
    fix_ip_checksum(&mut f);
    fix_udp_checksum(&mut f);
    assert_dropped(&f, DropReason::IpInaddrErrors);
    let mut f = udp_frame(PORT, b"x");
    f[26..30].copy_from_slice(&[224, 0, 0, 1]); // multicast source: martian
    fix_ip_checksum(&mut f);
    assert_dropped(&f, DropReason::IpInvalidSource);
}

#[test]
fn unknown_protocol_is_dropped_and_answered_with_protocol_unreachable() {
    let mut f = udp_frame(PORT, b"x");
    f[23] = 47; // GRE
    fix_ip_checksum(&mut f);
    assert_dropped(&f, DropReason::IpNoproto);
    let (mut s, _) = stack();
    s.receive(Instant::ZERO, &f);
    // Unknown neighbour: the error waits for ARP. Resolve it and look at what goes out.
    let arp = s
        .poll_transmit(Instant::ZERO)
        .expect("ARP request for the peer");
    assert_eq!(&arp[12..14], &[0x08, 0x06]);
    let mut reply = arp.clone();
    reply[0..6].copy_from_slice(&MAC.0);
    reply[6..12].copy_from_slice(&PEER_MAC.0);
    reply[14 + 6..14 + 8].copy_from_slice(&2u16.to_be_bytes()); // ARP reply
    reply[14 + 8..14 + 14].copy_from_slice(&PEER_MAC.0);
    reply[14 + 14..14 + 18].copy_from_slice(&PEER.octets());
    reply[14 + 18..14 + 24].copy_from_slice(&MAC.0);
    reply[14 + 24..14 + 28].copy_from_slice(&IP.octets());
    s.receive(Instant::ZERO, &reply);
    let icmp = s
        .poll_transmit(Instant::ZERO)
        .expect("the ICMP error, released by the ARP reply");
    assert_eq!(&icmp[0..6], &PEER_MAC.0);
    assert_eq!(
        (icmp[23], icmp[34], icmp[35]),
        (1, 3, 2),
        "ICMP destination unreachable, protocol unreachable"
    );
    assert_eq!(
        &icmp[34 + 8..34 + 8 + 20],
        &f[14..34],
        "quotes the offending header"
    );
    assert_eq!(s.mib().get(Counter::IcmpOutDestUnreachs), 1);
}

#[test]
fn udp_drops() {
    let mut f = udp_frame(PORT, b"hello");
    f[42] ^= 0xff; // payload changed, checksum not
    assert_dropped(&f, DropReason::UdpCsum);
    let mut f = udp_frame(PORT, b"hello");
    f[38..40].copy_from_slice(&100u16.to_be_bytes()); // UDP length past the IP payload
    assert_dropped(&f, DropReason::UdpMalformed);
    let mut f = udp_frame(PORT, b"hello");
    f[38..40].copy_from_slice(&4u16.to_be_bytes()); // UDP length under the header
    assert_dropped(&f, DropReason::UdpMalformed);
    assert_dropped(&udp_frame(0, b"hello"), DropReason::UdpNoSocket);
    assert_dropped(&udp_frame(9, b"hello"), DropReason::UdpNoSocket);
}

#[test]
fn full_receive_queue_drops_with_rcvbuf_errors() {
    let (mut default, h) = stack();
    // rmem_default applies to sockets opened after it is set.
    let mut small = Stack::new({
        let mut c = Config::ethernet(MAC, Ipv4Cidr::new(IP, 24));
        c.sysctl.rmem_default = 4096;
        c
    });
    let sh = small.udp_bind(SocketAddrV4::new(IP, PORT)).unwrap();
    let f = udp_frame(PORT, &[0u8; 1000]);
    for _ in 0..10 {
        small.receive(Instant::ZERO, &f);
        default.receive(Instant::ZERO, &f);
    }
    // Charged 1000 + 64 each: four fit under 4096, the fifth is admitted because the
    // check is made before adding (as Linux's), the rest are dropped.
    assert_eq!(small.udp_rx_queued(sh).unwrap(), 4);
    assert_eq!(small.mib().drops(DropReason::SocketRcvbuff), 6);
    assert_eq!(small.mib().get(Counter::UdpRcvbufErrors), 6);
    assert_eq!(
        default.udp_rx_queued(h).unwrap(),
        10,
        "the default buffer holds them all"
    );
}

#[test]
fn icmp_drops() {
    let mut f = icmp_frame(&[8, 0, 0, 0, 0, 1, 0, 1, b'p', b'i', b'n', b'g']);
    f[40] ^= 1;
    assert_dropped(&f, DropReason::IcmpCsum);
    assert_dropped(&icmp_frame(&[8, 0, 0]), DropReason::IcmpMalformed);
}

#[test]
fn edge_cases_linux_accepts_are_delivered() {
    let deliver = |f: &[u8]| {
        let (mut s, h) = stack();
        s.receive(Instant::ZERO, f);
        let mut buf = [0u8; 64];
        let got = s
            .udp_recv_from(h, &mut buf)
            .map(|(n, from)| (buf[..n].to_vec(), from));
        assert_eq!(s.mib().drops_total(), 0, "{}", s.mib().render_drops());
        got.expect("delivered")
    };
    // Ethernet padding to the 60-byte minimum: trailing bytes past total length ignored.
    let mut f = udp_frame(PORT, b"hi");
    f.resize(60, 0);
    assert_eq!(deliver(&f), (b"hi".to_vec(), SocketAddrV4::new(PEER, 1000)));
    // The reserved flag (RFC 791 "must be zero"): Linux does not check it on receive.
    let mut f = udp_frame(PORT, b"hi");
    f[20] |= 0x80;
    fix_ip_checksum(&mut f);
    assert_eq!(deliver(&f).0, b"hi");
    // IP options (Router Alert, RFC 2113): skipped.
    let plain = udp_frame(PORT, b"hi");
    let mut f = plain[..34].to_vec();
    f.extend_from_slice(&[0x94, 0x04, 0x00, 0x00]);
    f.extend_from_slice(&plain[34..]);
    f[14] = 0x46;
    let total = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    fix_ip_checksum(&mut f);
    assert_eq!(deliver(&f).0, b"hi");
}
