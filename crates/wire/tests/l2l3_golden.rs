//! Golden byte arrays for Ethernet, ARP, IPv4, ICMPv4 and UDP: real-world-shaped packets,
//! parsed into fields and `Repr`s, and emitted back from `Repr`s to the exact bytes.
//!
//! The arrays and every checksum in them were computed independently of this crate (a
//! 30-line Python RFC 1071 implementation), so a checksum bug here cannot agree with itself.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ustack_wire::ethernet::{self, EtherType, Frame};
use ustack_wire::icmpv4::{self, DstUnreachable, Message, TimeExceeded};
use ustack_wire::{Error, EthernetAddress, IpProtocol, arp, ipv4, udp};

// --- The packets ------------------------------------------------------------------------

/// Who-has 192.168.1.1 tell 192.168.1.100, broadcast, as Linux sends it (42 bytes) after
/// the NIC padded it to the 60-byte minimum frame.
const ARP_REQUEST_FRAME: [u8; 60] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0x00, 0x01,
    0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc0, 0xa8, 0x01, 0x64,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// 192.168.1.1 is-at 00:11:22:33:44:55, unicast back to the asker (unpadded).
const ARP_REPLY_FRAME: [u8; 42] = [
    0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x08, 0x06, 0x00, 0x01,
    0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0xc0, 0xa8, 0x01, 0x01,
    0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0xc0, 0xa8, 0x01, 0x64,
];

/// A DNS query for example.com/A: 192.168.1.100:53012 -> 8.8.8.8:53, DF, TTL 64, ident 0x1c46.
/// IPv4 checksum 0x4c52, UDP checksum 0xe302.
const DNS_QUERY_FRAME: [u8; 71] = [
    0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x39, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x4c, 0x52, 0xc0, 0xa8, 0x01, 0x64, 0x08, 0x08,
    0x08, 0x08, 0xcf, 0x14, 0x00, 0x35, 0x00, 0x25, 0xe3, 0x02, 0xab, 0xcd, 0x01, 0x00, 0x00, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63,
    0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00, 0x01,
];

/// `ping 10.0.0.2` from Linux: DF, 84 bytes, ident 0x04d2, seq 1, and iputils' 56 data
/// bytes: a `struct timeval` (tv_sec = 1700000000, tv_usec = 123456, little-endian u64s)
/// followed by the bytes 0x10..=0x37. ICMP checksum 0x9e21.
const PING_REQUEST_PACKET: [u8; 84] = [
    0x45, 0x00, 0x00, 0x54, 0xbe, 0xef, 0x40, 0x00, 0x40, 0x01, 0x67, 0xb7, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, 0x08, 0x00, 0x9e, 0x21, 0x04, 0xd2, 0x00, 0x01, 0x00, 0xf1, 0x53, 0x65,
    0x00, 0x00, 0x00, 0x00, 0x40, 0xe2, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13,
    0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23,
    0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
    0x34, 0x35, 0x36, 0x37,
];

/// Its reply: same ident, seq and data, type 0, no DF (Linux echoes with a fresh ident).
const PING_REPLY_PACKET: [u8; 84] = [
    0x45, 0x00, 0x00, 0x54, 0x3a, 0x5f, 0x00, 0x00, 0x40, 0x01, 0x2c, 0x48, 0x0a, 0x00, 0x00, 0x02,
    0x0a, 0x00, 0x00, 0x01, 0x00, 0x00, 0xa6, 0x21, 0x04, 0xd2, 0x00, 0x01, 0x00, 0xf1, 0x53, 0x65,
    0x00, 0x00, 0x00, 0x00, 0x40, 0xe2, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11, 0x12, 0x13,
    0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23,
    0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33,
    0x34, 0x35, 0x36, 0x37,
];

/// Port unreachable from 192.168.1.1 quoting the whole DNS query (TOS 0xc0, as Linux
/// sends ICMP errors).
const PORT_UNREACH_PACKET: [u8; 85] = [
    0x45, 0xc0, 0x00, 0x55, 0x5d, 0x21, 0x00, 0x00, 0x40, 0x01, 0x99, 0x11, 0xc0, 0xa8, 0x01, 0x01,
    0xc0, 0xa8, 0x01, 0x64, 0x03, 0x03, 0xcf, 0x4f, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x39,
    0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x4c, 0x52, 0xc0, 0xa8, 0x01, 0x64, 0x08, 0x08, 0x08, 0x08,
    0xcf, 0x14, 0x00, 0x35, 0x00, 0x25, 0xe3, 0x02, 0xab, 0xcd, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63, 0x6f, 0x6d,
    0x00, 0x00, 0x01, 0x00, 0x01,
];

/// Fragmentation needed, next-hop MTU 1400 (RFC 1191 §4), from a router at TTL 254,
/// quoting the IP header of a 1500-byte DF TCP segment and its first 8 bytes.
const FRAG_NEEDED_PACKET: [u8; 56] = [
    0x45, 0xc0, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x01, 0xa7, 0x06, 0x0a, 0x00, 0x00, 0xfe,
    0x0a, 0x00, 0x00, 0x01, 0x03, 0x04, 0x32, 0x77, 0x00, 0x00, 0x05, 0x78, 0x45, 0x00, 0x05, 0xdc,
    0x77, 0x77, 0x40, 0x00, 0x40, 0x06, 0x77, 0x9c, 0x0a, 0x00, 0x00, 0x01, 0xcb, 0x00, 0x71, 0x07,
    0xc3, 0x50, 0x01, 0xbb, 0x00, 0x00, 0x00, 0x01,
];

/// TTL exceeded in transit for the same segment.
const TTL_EXCEEDED_PACKET: [u8; 56] = [
    0x45, 0xc0, 0x00, 0x38, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x01, 0xa7, 0x06, 0x0a, 0x00, 0x00, 0xfe,
    0x0a, 0x00, 0x00, 0x01, 0x0b, 0x00, 0x2f, 0xf3, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x05, 0xdc,
    0x77, 0x77, 0x40, 0x00, 0x40, 0x06, 0x77, 0x9c, 0x0a, 0x00, 0x00, 0x01, 0xcb, 0x00, 0x71, 0x07,
    0xc3, 0x50, 0x01, 0xbb, 0x00, 0x00, 0x00, 0x01,
];

/// An IGMPv2 membership report for 239.255.255.250 with the Router Alert option
/// (RFC 2113): IHL 6, TTL 1. Exercises option skipping.
const IGMP_WITH_RA_PACKET: [u8; 32] = [
    0x46, 0xc0, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x32, 0x11, 0xc0, 0xa8, 0x01, 0x64,
    0xef, 0xff, 0xff, 0xfa, 0x94, 0x04, 0x00, 0x00, 0x16, 0x00, 0xfa, 0x04, 0xef, 0xff, 0xff, 0xfa,
];

/// A middle fragment: MF set, offset 1480 bytes (field 185), 24 bytes of payload.
const MIDDLE_FRAGMENT_PACKET: [u8; 44] = [
    0x45, 0x00, 0x00, 0x2c, 0x12, 0x34, 0x20, 0xb9, 0x40, 0x11, 0x33, 0xd2, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
    0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
];

/// A UDP datagram 2001:db8::1:5353 -> 2001:db8::2:5353, "hello ipv6", IPv6 pseudo-header
/// checksum 0x56ea.
const UDP6_DATAGRAM: [u8; 18] = [
    0x14, 0xe9, 0x14, 0xe9, 0x00, 0x12, 0x56, 0xea, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x20, 0x69, 0x70,
    0x76, 0x36,
];

// --- Helpers ----------------------------------------------------------------------------

const LINUX_MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
const ROUTER_MAC: EthernetAddress = EthernetAddress([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]);
const LINUX_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 100);
const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);
const DNS_PAYLOAD_OFFSET: usize = 14 + 20 + 8;

fn v4(a: Ipv4Addr) -> IpAddr {
    IpAddr::V4(a)
}

/// The IPv4 packet inside an Ethernet frame, checked.
fn ip_of(frame: &[u8]) -> ipv4::Packet<&[u8]> {
    let frame = Frame::new_checked(frame).unwrap();
    assert_eq!(frame.ethertype(), EtherType::Ipv4);
    ipv4::Packet::new_checked(&frame.into_inner()[ethernet::HEADER_LEN..]).unwrap()
}

/// Build an IPv4 packet of `repr` whose payload `fill` writes; returns the bytes.
fn build_ipv4(repr: &ipv4::Repr, fill: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
    let mut packet = ipv4::Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut packet, true);
    fill(packet.payload_mut());
    buf
}

fn build_icmp(repr: &icmpv4::Repr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut icmpv4::Packet::new_unchecked(&mut buf[..]), true);
    buf
}

// --- Ethernet and ARP -------------------------------------------------------------------

const ARP_REQUEST: arp::Repr = arp::Repr {
    operation: arp::Operation::Request,
    source_hardware_addr: LINUX_MAC,
    source_protocol_addr: LINUX_IP,
    target_hardware_addr: EthernetAddress([0; 6]),
    target_protocol_addr: ROUTER_IP,
};

const ARP_REPLY: arp::Repr = arp::Repr {
    operation: arp::Operation::Reply,
    source_hardware_addr: ROUTER_MAC,
    source_protocol_addr: ROUTER_IP,
    target_hardware_addr: LINUX_MAC,
    target_protocol_addr: LINUX_IP,
};

#[test]
fn arp_request_parses() {
    let frame = Frame::new_checked(&ARP_REQUEST_FRAME[..]).unwrap();
    assert_eq!(
        ethernet::Repr::parse(&frame).unwrap(),
        ethernet::Repr {
            src_addr: LINUX_MAC,
            dst_addr: EthernetAddress::BROADCAST,
            ethertype: EtherType::Arp
        }
    );
    assert!(frame.dst_addr().is_broadcast());
    assert_eq!(
        frame.payload().len(),
        46,
        "28 bytes of ARP and 18 of padding"
    );

    let packet = arp::Packet::new_checked(frame.payload()).unwrap();
    assert_eq!(packet.hardware_type(), 1);
    assert_eq!(packet.protocol_type(), EtherType::Ipv4);
    assert_eq!((packet.hardware_len(), packet.protocol_len()), (6, 4));
    assert_eq!(packet.operation(), arp::Operation::Request);
    assert_eq!(packet.source_hardware_addr(), &LINUX_MAC.0);
    assert_eq!(packet.source_protocol_addr(), &[192, 168, 1, 100]);
    assert_eq!(packet.target_hardware_addr(), &[0; 6]);
    assert_eq!(packet.target_protocol_addr(), &[192, 168, 1, 1]);
    assert_eq!(arp::Repr::parse(&packet), Ok(ARP_REQUEST));
}

#[test]
fn arp_request_emits_linux_bytes() {
    let eth = ethernet::Repr {
        src_addr: LINUX_MAC,
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EtherType::Arp,
    };
    let mut buf = vec![0u8; eth.buffer_len() + ARP_REQUEST.buffer_len()];
    assert_eq!(buf.len(), 42);
    let mut frame = Frame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    ARP_REQUEST.emit(&mut arp::Packet::new_unchecked(frame.payload_mut()));
    assert_eq!(buf[..], ARP_REQUEST_FRAME[..42]);
}

#[test]
fn arp_reply_round_trips() {
    let frame = Frame::new_checked(&ARP_REPLY_FRAME[..]).unwrap();
    let eth = ethernet::Repr::parse(&frame).unwrap();
    assert_eq!((eth.src_addr, eth.dst_addr), (ROUTER_MAC, LINUX_MAC));
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_checked(frame.payload()).unwrap()),
        Ok(ARP_REPLY)
    );

    let mut buf = [0u8; 42];
    let mut frame = Frame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    ARP_REPLY.emit(&mut arp::Packet::new_unchecked(frame.payload_mut()));
    assert_eq!(buf, ARP_REPLY_FRAME);
}

#[test]
fn arp_for_other_hardware_or_protocol_is_unsupported() {
    let arp_bytes = &ARP_REPLY_FRAME[14..];
    // IEEE 802 hardware type (6).
    let mut b = arp_bytes.to_vec();
    b[1] = 6;
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()),
        Err(Error::Unsupported)
    );
    // IPv6 as the protocol type.
    let mut b = arp_bytes.to_vec();
    b[2..4].copy_from_slice(&[0x86, 0xdd]);
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()),
        Err(Error::Unsupported)
    );
    // A protocol length of 3 (shorter packet, still self-consistent): unsupported.
    let mut b = arp_bytes.to_vec();
    b[5] = 3;
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()),
        Err(Error::Unsupported)
    );
    // A protocol length of 16 does not fit in 28 bytes: truncated, and no accessor ran off the end.
    let mut b = arp_bytes.to_vec();
    b[5] = 16;
    assert_eq!(
        arp::Packet::new_checked(&b[..]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        arp::Repr::parse(&arp::Packet::new_unchecked(&b[..])),
        Err(Error::Truncated)
    );
}

#[test]
fn arp_short_and_unknown_operation() {
    assert_eq!(
        arp::Packet::new_checked(&ARP_REPLY_FRAME[14..41]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        arp::Packet::new_checked(&ARP_REPLY_FRAME[14..21]).err(),
        Some(Error::Truncated)
    );
    let mut b = ARP_REPLY_FRAME[14..].to_vec();
    b[7] = 3; // RARP request
    let repr = arp::Repr::parse(&arp::Packet::new_checked(&b[..]).unwrap()).unwrap();
    assert_eq!(repr.operation, arp::Operation::Unknown(3));
}

#[test]
fn ethernet_short_frame_is_truncated() {
    assert_eq!(
        Frame::new_checked(&ARP_REPLY_FRAME[..13]).err(),
        Some(Error::Truncated)
    );
    assert_eq!(
        ethernet::Repr::parse(&Frame::new_unchecked(&ARP_REPLY_FRAME[..13])),
        Err(Error::Truncated)
    );
}

// --- IPv4 and UDP -----------------------------------------------------------------------

const DNS_IP: ipv4::Repr = ipv4::Repr {
    src_addr: LINUX_IP,
    dst_addr: Ipv4Addr::new(8, 8, 8, 8),
    next_header: IpProtocol::Udp,
    payload_len: 37,
    ttl: 64,
    tos: 0,
    ident: 0x1c46,
    dont_frag: true,
    more_frags: false,
    frag_offset: 0,
};

const DNS_UDP: udp::Repr = udp::Repr {
    src_port: 53012,
    dst_port: 53,
};

#[test]
fn dns_query_parses() {
    let frame = Frame::new_checked(&DNS_QUERY_FRAME[..]).unwrap();
    assert_eq!(
        ethernet::Repr::parse(&frame).unwrap().ethertype,
        EtherType::Ipv4
    );
    let ip = ip_of(&DNS_QUERY_FRAME);
    assert_eq!(ip.version(), 4);
    assert_eq!(ip.header_len(), 20);
    assert_eq!((ip.dscp(), ip.ecn()), (0, 0));
    assert_eq!(ip.total_len(), 57);
    assert_eq!(ip.ident(), 0x1c46);
    assert!(ip.dont_frag() && !ip.more_frags() && !ip.reserved_flag());
    assert_eq!(ip.frag_offset(), 0);
    assert_eq!(ip.ttl(), 64);
    assert_eq!(ip.next_header(), IpProtocol::Udp);
    assert_eq!(ip.checksum(), 0x4c52);
    assert!(ip.verify_checksum());
    assert!(ip.options().is_empty());
    assert_eq!(ipv4::Repr::parse(&ip, true), Ok(DNS_IP));

    let (src, dst) = (v4(DNS_IP.src_addr), v4(DNS_IP.dst_addr));
    let udp = udp::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        (udp.src_port(), udp.dst_port(), udp.len(), udp.checksum()),
        (53012, 53, 37, 0xe302)
    );
    assert!(udp.verify_checksum(&src, &dst));
    assert_eq!(udp::Repr::parse(&udp, &src, &dst, true), Ok(DNS_UDP));
    assert_eq!(udp.payload(), &DNS_QUERY_FRAME[DNS_PAYLOAD_OFFSET..]);
    assert_eq!(&udp.payload()[12..25], b"\x07example\x03com\x00");
}

#[test]
fn dns_query_emits_exact_bytes() {
    let dns = &DNS_QUERY_FRAME[DNS_PAYLOAD_OFFSET..];
    let eth = ethernet::Repr {
        src_addr: LINUX_MAC,
        dst_addr: ROUTER_MAC,
        ethertype: EtherType::Ipv4,
    };
    let mut buf =
        vec![0u8; eth.buffer_len() + DNS_IP.buffer_len() + DNS_UDP.header_len() + dns.len()];
    let mut frame = Frame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut ip = ipv4::Packet::new_unchecked(frame.payload_mut());
    DNS_IP.emit(&mut ip, true);
    let (src, dst) = (v4(DNS_IP.src_addr), v4(DNS_IP.dst_addr));
    DNS_UDP.emit(
        &mut udp::Packet::new_unchecked(ip.payload_mut()),
        &src,
        &dst,
        dns.len(),
        |payload| payload.copy_from_slice(dns),
        true,
    );
    assert_eq!(buf, DNS_QUERY_FRAME);
}

#[test]
fn ethernet_padding_after_ip_total_length_is_ignored() {
    let mut padded = DNS_QUERY_FRAME[14..].to_vec();
    padded.extend_from_slice(&[0xee; 9]);
    let ip = ipv4::Packet::new_checked(&padded[..]).unwrap();
    assert_eq!(ipv4::Repr::parse(&ip, true), Ok(DNS_IP));
    assert_eq!(ip.payload().len(), 37);
    // Same at the UDP layer: a buffer longer than the UDP length.
    let mut udp_padded = DNS_QUERY_FRAME[34..].to_vec();
    udp_padded.extend_from_slice(&[0xee; 3]);
    let udp = udp::Packet::new_checked(&udp_padded[..]).unwrap();
    assert_eq!(udp.payload().len(), 29);
    assert!(udp.verify_checksum(&v4(DNS_IP.src_addr), &v4(DNS_IP.dst_addr)));
}

#[test]
fn ipv4_bad_headers_are_rejected() {
    let good = DNS_QUERY_FRAME[14..].to_vec();
    let parse = |b: &[u8]| ipv4::Packet::new_checked(b).and_then(|p| ipv4::Repr::parse(&p, true));

    // Version 6 in an IPv4 packet (checksum fixed up so only the version is wrong).
    let mut b = good.clone();
    b[0] = 0x65;
    ipv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(parse(&b), Err(Error::Malformed));
    // IHL 4: shorter than the fixed header.
    let mut b = good.clone();
    b[0] = 0x44;
    assert_eq!(parse(&b), Err(Error::Malformed));
    // IHL 15 in a 64-byte (padded) buffer whose total length says 57: header longer
    // than the datagram.
    let mut b = good.clone();
    b[0] = 0x4f;
    b.resize(64, 0);
    assert_eq!(parse(&b), Err(Error::Malformed));
    b.truncate(57);
    assert_eq!(
        parse(&b),
        Err(Error::Truncated),
        "and the header runs past the buffer"
    );
    // IHL 15 in a 40-byte buffer: header runs past the buffer.
    assert_eq!(
        parse(&{
            let mut b = good[..40].to_vec();
            b[0] = 0x4f;
            b
        }),
        Err(Error::Truncated)
    );
    // Total length beyond the buffer (a cut-off packet).
    assert_eq!(parse(&good[..56]), Err(Error::Truncated));
    // Total length below the header length.
    let mut b = good.clone();
    b[2..4].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(parse(&b), Err(Error::Malformed));
    // Shorter than a header.
    assert_eq!(parse(&good[..19]), Err(Error::Truncated));
    assert_eq!(parse(&[]), Err(Error::Truncated));
    // One bit flipped in the TTL: bad checksum; accepted when verification is off.
    let mut b = good.clone();
    b[8] ^= 1;
    assert_eq!(parse(&b), Err(Error::Checksum));
    assert_eq!(
        ipv4::Repr::parse(&ipv4::Packet::new_checked(&b[..]).unwrap(), false).map(|r| r.ttl),
        Ok(65)
    );
    // Reserved flag set, with a correct checksum.
    let mut b = good.clone();
    let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
    p.set_reserved_flag(true);
    p.fill_checksum();
    assert_eq!(b[6], 0xc0);
    assert_eq!(
        parse(&b).map(|r| r.ttl),
        Ok(64),
        "reserved flag accepted, as Linux does"
    );
}

#[test]
fn ipv4_options_are_skipped() {
    let ip = ipv4::Packet::new_checked(&IGMP_WITH_RA_PACKET[..]).unwrap();
    assert_eq!(ip.header_len(), 24);
    assert_eq!(ip.options(), &[0x94, 0x04, 0x00, 0x00], "Router Alert");
    assert!(ip.verify_checksum(), "the checksum covers the options");
    assert_eq!(ip.payload(), &IGMP_WITH_RA_PACKET[24..]);
    assert_eq!((ip.dscp(), ip.ecn(), ip.tos()), (0x30, 0, 0xc0));
    let repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert_eq!(
        repr,
        ipv4::Repr {
            src_addr: LINUX_IP,
            dst_addr: Ipv4Addr::new(239, 255, 255, 250),
            next_header: IpProtocol::Unknown(2),
            payload_len: 8,
            ttl: 1,
            tos: 0xc0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    );
    // Emitting the Repr drops the options: 20-byte header, same payload, valid checksum.
    let out = build_ipv4(&repr, |p| p.copy_from_slice(&IGMP_WITH_RA_PACKET[24..]));
    assert_eq!(out.len(), 28);
    assert_eq!(out[0], 0x45);
    assert_eq!(
        ipv4::Repr::parse(&ipv4::Packet::new_checked(&out[..]).unwrap(), true),
        Ok(repr)
    );
}

#[test]
fn ipv4_middle_fragment() {
    let ip = ipv4::Packet::new_checked(&MIDDLE_FRAGMENT_PACKET[..]).unwrap();
    let repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert_eq!(
        (
            repr.ident,
            repr.dont_frag,
            repr.more_frags,
            repr.frag_offset
        ),
        (0x1234, false, true, 1480)
    );
    assert!(repr.is_fragment());
    assert!(!DNS_IP.is_fragment());
    assert_eq!(
        build_ipv4(&repr, |p| p.copy_from_slice(&MIDDLE_FRAGMENT_PACKET[20..])),
        MIDDLE_FRAGMENT_PACKET
    );
    // The last fragment at the highest offset the field can hold (8191 * 8).
    let mut b = MIDDLE_FRAGMENT_PACKET;
    let mut p = ipv4::Packet::new_unchecked(&mut b[..]);
    p.set_flags_and_offset(false, false, 65528);
    p.fill_checksum();
    assert_eq!(&b[6..8], &[0x1f, 0xff]);
    let repr = ipv4::Repr::parse(&ipv4::Packet::new_checked(&b[..]).unwrap(), true).unwrap();
    assert_eq!((repr.more_frags, repr.frag_offset), (false, 65528));
}

#[test]
fn ipv4_emit_without_checksum_leaves_it_zero() {
    let mut buf = [0xffu8; 20];
    DNS_IP.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..]), false);
    assert_eq!(&buf[10..12], &[0, 0]);
    assert_eq!(buf[..10], DNS_QUERY_FRAME[14..24]);
    assert_eq!(buf[12..], DNS_QUERY_FRAME[26..34]);
}

#[test]
fn udp_bad_datagrams_are_rejected() {
    let good = DNS_QUERY_FRAME[34..].to_vec();
    let (src, dst) = (v4(DNS_IP.src_addr), v4(DNS_IP.dst_addr));
    let parse =
        |b: &[u8]| udp::Packet::new_checked(b).and_then(|p| udp::Repr::parse(&p, &src, &dst, true));
    assert_eq!(parse(&good), Ok(DNS_UDP));
    assert_eq!(parse(&good[..7]), Err(Error::Truncated));
    assert_eq!(
        parse(&good[..36]),
        Err(Error::Truncated),
        "length 37 in 36 bytes"
    );
    let mut b = good.clone();
    b[4..6].copy_from_slice(&7u16.to_be_bytes());
    assert_eq!(parse(&b), Err(Error::Malformed), "length below 8");
    // Corrupt a payload byte.
    let mut b = good.clone();
    b[20] ^= 0x40;
    assert_eq!(parse(&b), Err(Error::Checksum));
    // The same datagram from another source address fails too: the pseudo-header counts.
    let other = v4(Ipv4Addr::new(192, 168, 1, 101));
    assert_eq!(
        udp::Repr::parse(
            &udp::Packet::new_checked(&good[..]).unwrap(),
            &other,
            &dst,
            true
        ),
        Err(Error::Checksum)
    );
    // Destination port 0, checksum valid: parsed (the stack finds no socket, like Linux).
    let mut b = good.clone();
    let mut p = udp::Packet::new_unchecked(&mut b[..]);
    p.set_dst_port(0);
    p.fill_checksum(&src, &dst);
    assert_eq!(parse(&b).map(|r| r.dst_port), Ok(0));
}

#[test]
fn udp_zero_checksum_means_none_over_ipv4_only() {
    let (src, dst) = (v4(DNS_IP.src_addr), v4(DNS_IP.dst_addr));
    let mut b = DNS_QUERY_FRAME[34..].to_vec();
    b[6..8].copy_from_slice(&[0, 0]);
    let p = udp::Packet::new_checked(&b[..]).unwrap();
    assert!(p.verify_checksum(&src, &dst));
    assert_eq!(udp::Repr::parse(&p, &src, &dst, true), Ok(DNS_UDP));

    let (src6, dst6) = (
        IpAddr::V6("2001:db8::1".parse().unwrap()),
        IpAddr::V6("2001:db8::2".parse().unwrap()),
    );
    let mut b = UDP6_DATAGRAM.to_vec();
    b[6..8].copy_from_slice(&[0, 0]);
    let p = udp::Packet::new_checked(&b[..]).unwrap();
    assert!(!p.verify_checksum(&src6, &dst6));
    assert_eq!(
        udp::Repr::parse(&p, &src6, &dst6, true),
        Err(Error::Checksum)
    );
}

#[test]
fn udp_computed_zero_checksum_is_sent_as_all_ones() {
    // Payload e0 1f makes the checksum of 10.0.0.1:1000 -> 10.0.0.2:2000 compute to 0.
    let (src, dst) = (
        v4(Ipv4Addr::new(10, 0, 0, 1)),
        v4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let mut buf = [0u8; 10];
    let repr = udp::Repr {
        src_port: 1000,
        dst_port: 2000,
    };
    repr.emit(
        &mut udp::Packet::new_unchecked(&mut buf[..]),
        &src,
        &dst,
        2,
        |p| p.copy_from_slice(&[0xe0, 0x1f]),
        true,
    );
    assert_eq!(
        buf,
        [0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0a, 0xff, 0xff, 0xe0, 0x1f]
    );
    let p = udp::Packet::new_checked(&buf[..]).unwrap();
    assert!(p.verify_checksum(&src, &dst));
}

#[test]
fn udp_over_ipv6() {
    let src = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let dst = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let p = udp::Packet::new_checked(&UDP6_DATAGRAM[..]).unwrap();
    assert_eq!(p.checksum(), 0x56ea);
    assert!(p.verify_checksum(&src, &dst));
    assert!(!p.verify_checksum(&dst, &IpAddr::V6(Ipv6Addr::LOCALHOST)));
    let repr = udp::Repr::parse(&p, &src, &dst, true).unwrap();
    assert_eq!(
        repr,
        udp::Repr {
            src_port: 5353,
            dst_port: 5353
        }
    );
    assert_eq!(p.payload(), b"hello ipv6");

    let mut buf = [0u8; 18];
    repr.emit(
        &mut udp::Packet::new_unchecked(&mut buf[..]),
        &src,
        &dst,
        10,
        |b| b.copy_from_slice(b"hello ipv6"),
        true,
    );
    assert_eq!(buf, UDP6_DATAGRAM);
}

#[test]
fn udp_emit_without_checksum() {
    let mut buf = [0xaau8; 12];
    let repr = udp::Repr {
        src_port: 7,
        dst_port: 9,
    };
    let any = v4(Ipv4Addr::UNSPECIFIED);
    repr.emit(
        &mut udp::Packet::new_unchecked(&mut buf[..]),
        &any,
        &any,
        4,
        |p| p.fill(1),
        false,
    );
    assert_eq!(buf, [0, 7, 0, 9, 0, 12, 0, 0, 1, 1, 1, 1]);
}

// --- ICMPv4 -----------------------------------------------------------------------------

#[test]
fn ping_request_parses_and_emits() {
    let ip = ipv4::Packet::new_checked(&PING_REQUEST_PACKET[..]).unwrap();
    let ip_repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert_eq!(
        ip_repr,
        ipv4::Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            next_header: IpProtocol::Icmp,
            payload_len: 64,
            ttl: 64,
            tos: 0,
            ident: 0xbeef,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    );
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        (icmp.msg_type(), icmp.msg_code(), icmp.checksum()),
        (Message::EchoRequest, 0, 0x9e21)
    );
    assert_eq!((icmp.echo_ident(), icmp.echo_seq_no()), (0x04d2, 1));
    assert!(icmp.verify_checksum());
    let data = icmp.data();
    assert_eq!(data.len(), 56);
    assert_eq!(
        u64::from_le_bytes(data[..8].try_into().unwrap()),
        1_700_000_000,
        "tv_sec"
    );
    assert_eq!(
        u64::from_le_bytes(data[8..16].try_into().unwrap()),
        123_456,
        "tv_usec"
    );
    assert!(data[16..].iter().zip(0x10u8..).all(|(&b, i)| b == i));
    let repr = icmpv4::Repr::parse(&icmp, true).unwrap();
    assert_eq!(
        repr,
        icmpv4::Repr::EchoRequest {
            ident: 0x04d2,
            seq_no: 1,
            data: &PING_REQUEST_PACKET[28..]
        }
    );

    let out = build_ipv4(&ip_repr, |p| {
        repr.emit(&mut icmpv4::Packet::new_unchecked(p), true)
    });
    assert_eq!(out, PING_REQUEST_PACKET);
}

#[test]
fn ping_reply_parses_and_emits() {
    let ip = ipv4::Packet::new_checked(&PING_REPLY_PACKET[..]).unwrap();
    let ip_repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert!(!ip_repr.dont_frag);
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    let repr = icmpv4::Repr::parse(&icmp, true).unwrap();
    // The reply carries the request's ident, sequence number and data.
    assert_eq!(
        repr,
        icmpv4::Repr::EchoReply {
            ident: 0x04d2,
            seq_no: 1,
            data: &PING_REQUEST_PACKET[28..]
        }
    );
    assert_eq!(
        build_ipv4(&ip_repr, |p| repr
            .emit(&mut icmpv4::Packet::new_unchecked(p), true)),
        PING_REPLY_PACKET
    );
}

#[test]
fn port_unreachable_quotes_the_datagram() {
    let ip = ipv4::Packet::new_checked(&PORT_UNREACH_PACKET[..]).unwrap();
    let ip_repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert_eq!(
        (ip_repr.src_addr, ip_repr.dst_addr, ip_repr.tos),
        (ROUTER_IP, LINUX_IP, 0xc0)
    );
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    let repr = icmpv4::Repr::parse(&icmp, true).unwrap();
    let quoted = &DNS_QUERY_FRAME[14..];
    assert_eq!(
        repr,
        icmpv4::Repr::DstUnreachable {
            reason: DstUnreachable::PortUnreachable,
            next_hop_mtu: 0,
            data: quoted
        }
    );

    // What the stack does with it: find the socket from the quoted headers.
    let icmpv4::Repr::DstUnreachable { data, .. } = repr else {
        unreachable!()
    };
    let inner = ipv4::Packet::new_checked(data).unwrap();
    assert_eq!(ipv4::Repr::parse(&inner, true), Ok(DNS_IP));
    let inner_udp = udp::Packet::new_checked(inner.payload()).unwrap();
    assert_eq!((inner_udp.src_port(), inner_udp.dst_port()), (53012, 53));

    assert_eq!(
        build_ipv4(&ip_repr, |p| repr
            .emit(&mut icmpv4::Packet::new_unchecked(p), true)),
        PORT_UNREACH_PACKET
    );
}

#[test]
fn frag_needed_carries_next_hop_mtu() {
    let ip = ipv4::Packet::new_checked(&FRAG_NEEDED_PACKET[..]).unwrap();
    let ip_repr = ipv4::Repr::parse(&ip, true).unwrap();
    assert_eq!(ip_repr.ttl, 254);
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(
        (icmp.msg_type(), icmp.msg_code(), icmp.next_hop_mtu()),
        (Message::DstUnreachable, 4, 1400)
    );
    let repr = icmpv4::Repr::parse(&icmp, true).unwrap();
    let quoted = &FRAG_NEEDED_PACKET[28..];
    assert_eq!(
        repr,
        icmpv4::Repr::DstUnreachable {
            reason: DstUnreachable::FragRequired,
            next_hop_mtu: 1400,
            data: quoted
        }
    );

    // The quoted header claims 1500 bytes of which 28 are here: read it unchecked (its fixed
    // 20 bytes are guaranteed by the ICMP parse), not with new_checked.
    assert_eq!(
        ipv4::Packet::new_checked(quoted).err(),
        Some(Error::Truncated)
    );
    let inner = ipv4::Packet::new_unchecked(quoted);
    assert_eq!(
        (inner.total_len(), inner.dont_frag(), inner.next_header()),
        (1500, true, IpProtocol::Tcp)
    );
    assert_eq!(inner.dst_addr(), Ipv4Addr::new(203, 0, 113, 7));

    assert_eq!(
        build_ipv4(&ip_repr, |p| repr
            .emit(&mut icmpv4::Packet::new_unchecked(p), true)),
        FRAG_NEEDED_PACKET
    );
}

#[test]
fn ttl_exceeded_parses_and_emits() {
    let ip = ipv4::Packet::new_checked(&TTL_EXCEEDED_PACKET[..]).unwrap();
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    let repr = icmpv4::Repr::parse(&icmp, true).unwrap();
    assert_eq!(
        repr,
        icmpv4::Repr::TimeExceeded {
            reason: TimeExceeded::TtlExpired,
            data: &TTL_EXCEEDED_PACKET[28..]
        }
    );
    assert_eq!(build_icmp(&repr), TTL_EXCEEDED_PACKET[20..]);
}

#[test]
fn icmp_bad_and_unsupported_messages() {
    let echo = PING_REQUEST_PACKET[20..].to_vec();
    let parse = |b: &[u8]| {
        icmpv4::Packet::new_checked(b)
            .and_then(|p| icmpv4::Repr::parse(&p, true).map(|r| r.msg_type()))
    };
    assert_eq!(parse(&echo), Ok(Message::EchoRequest));
    assert_eq!(parse(&echo[..7]), Err(Error::Truncated));
    let mut b = echo.clone();
    b[30] ^= 0xff;
    assert_eq!(parse(&b), Err(Error::Checksum));

    // Other types are well-formed but unsupported: timestamp (13), redirect (5),
    // parameter problem (12), source quench (4).
    for ty in [13u8, 5, 12, 4] {
        let mut b = echo.clone();
        b[0] = ty;
        icmpv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
        assert_eq!(parse(&b), Err(Error::Unsupported), "type {ty}");
    }
    // An echo request with a non-zero code is still an echo request (as Linux).
    let mut b = echo.clone();
    b[1] = 1;
    icmpv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(parse(&b), Ok(Message::EchoRequest));

    // Errors must quote at least an IP header, with a sane IHL.
    let unreach = PORT_UNREACH_PACKET[20..].to_vec();
    let mut short = unreach[..8 + 19].to_vec();
    icmpv4::Packet::new_unchecked(&mut short[..]).fill_checksum();
    assert_eq!(parse(&short), Err(Error::Truncated));
    let mut b = unreach.clone();
    b[8] = 0x44;
    icmpv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(parse(&b), Err(Error::Malformed));
    let mut b = TTL_EXCEEDED_PACKET[20..40].to_vec();
    icmpv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(parse(&b), Err(Error::Truncated));

    // A port unreachable with junk in the unused word: the MTU is only read for code 4.
    let mut b = unreach.clone();
    b[4..8].copy_from_slice(&[1, 2, 3, 4]);
    icmpv4::Packet::new_unchecked(&mut b[..]).fill_checksum();
    let p = icmpv4::Packet::new_checked(&b[..]).unwrap();
    assert!(matches!(
        icmpv4::Repr::parse(&p, true),
        Ok(icmpv4::Repr::DstUnreachable {
            next_hop_mtu: 0,
            ..
        })
    ));
}

#[test]
fn icmp_codes_round_trip() {
    for code in 0..=255u8 {
        assert_eq!(u8::from(DstUnreachable::from(code)), code);
        assert_eq!(u8::from(TimeExceeded::from(code)), code);
        assert_eq!(u8::from(Message::from(code)), code);
    }
    assert_eq!(DstUnreachable::from(4), DstUnreachable::FragRequired);
    assert_eq!(TimeExceeded::from(1), TimeExceeded::FragExpired);
}

#[test]
fn icmp_emit_zeroes_unused_words() {
    // A Repr with a stray MTU on a non-FragRequired code emits zeros there.
    let data = &FRAG_NEEDED_PACKET[28..];
    let repr = icmpv4::Repr::DstUnreachable {
        reason: DstUnreachable::HostUnreachable,
        next_hop_mtu: 1400,
        data,
    };
    let mut buf = vec![0xffu8; repr.buffer_len()];
    repr.emit(&mut icmpv4::Packet::new_unchecked(&mut buf[..]), false);
    assert_eq!(&buf[..8], &[3, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&buf[8..], data);
}
