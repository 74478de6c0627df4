//! Golden byte arrays for TCP, IPv6 and ICMPv6: parse them, and emit the same bytes.
//!
//! Every array marked "Linux" was captured from a Linux 6.18 kernel through a TUN device
//! (198.51.100.1 / 2001:db8:5::1 on the kernel's side, 198.51.100.2 / 2001:db8:5::2 the
//! peer), with the default sysctls (timestamps, SACK and window scaling on). The TCP arrays
//! are the TCP segment alone (the IPv4 header stripped); the IPv6 arrays are whole
//! packets. Checksums are the kernel's, so they check our pseudo-header sums too.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ustack_wire::tcp::{self, Flags, TcpOption, TcpTimestamp};
use ustack_wire::{Error, IpProtocol, SeqNumber, icmpv6, ipv6};

const LINUX_V4: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
const PEER_V4: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2));
const LINUX_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 1);
const PEER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 2);

/// Linux active open: SYN from 198.51.100.1:45098 to 198.51.100.2:5001.
/// Options in tcp_options_write order: MSS 1460, SACKOK+TS, NOP WS 10.
const LINUX_SYN: [u8; 40] = [
    0xb0, 0x2a, 0x13, 0x89, // src port 45098, dst port 5001
    0x71, 0x93, 0xf7, 0xb0, // seq
    0x00, 0x00, 0x00, 0x00, // ack
    0xa0, 0x02, 0xfa, 0xf0, // doff 10, SYN, window 64240
    0x2e, 0x94, 0x00, 0x00, // checksum, urgent pointer
    0x02, 0x04, 0x05, 0xb4, // MSS 1460
    0x04, 0x02, 0x08, 0x0a, // SACK-permitted, Timestamps kind+len
    0x50, 0x07, 0x4d, 0x0e, // TSval
    0x00, 0x00, 0x00, 0x00, // TSecr
    0x01, 0x03, 0x03, 0x0a, // NOP, window scale 10
];

/// Linux passive open: SYN-ACK from 198.51.100.1:5002 to 198.51.100.2:40000, answering a
/// SYN with ISN 0x11223344 and TSval 7777.
const LINUX_SYNACK: [u8; 40] = [
    0x13, 0x8a, 0x9c, 0x40, // 5002 -> 40000
    0xe9, 0x76, 0xa2, 0x8c, // seq
    0x11, 0x22, 0x33, 0x45, // ack
    0xa0, 0x12, 0xfe, 0x88, // doff 10, SYN|ACK, window 65160
    0xb9, 0xea, 0x00, 0x00, // checksum, urgent pointer
    0x02, 0x04, 0x05, 0xb4, // MSS 1460
    0x04, 0x02, 0x08, 0x0a, // SACK-permitted, Timestamps kind+len
    0xec, 0xe3, 0xaf, 0x94, // TSval
    0x00, 0x00, 0x1e, 0x61, // TSecr 7777
    0x01, 0x03, 0x03, 0x0a, // NOP, window scale 10
];

/// Linux data segment after the handshake: PSH|ACK, NOP NOP TS, "hello".
const LINUX_DATA: [u8; 37] = [
    0xb0, 0x2a, 0x13, 0x89, // 45098 -> 5001
    0x71, 0x93, 0xf7, 0xb1, // seq = ISN + 1
    0x00, 0x00, 0x03, 0xe9, // ack 1001
    0x80, 0x18, 0x00, 0x3f, // doff 8, PSH|ACK, window 63 (scaled)
    0xfc, 0xb3, 0x00, 0x00, // checksum, urgent pointer
    0x01, 0x01, 0x08, 0x0a, // NOP NOP Timestamps
    0x50, 0x07, 0x4d, 0x0f, // TSval
    0x00, 0x00, 0x13, 0x88, // TSecr 5000
    b'h', b'e', b'l', b'l', b'o',
];

/// Linux duplicate ACK after a segment arrived out of order (bytes 1101..1201): one SACK block.
const LINUX_SACK1: [u8; 44] = [
    0xb0, 0x2a, 0x13, 0x89, 0x71, 0x93, 0xf7, 0xb6, // ports, seq
    0x00, 0x00, 0x03, 0xe9, 0xb0, 0x10, 0x00, 0x3f, // ack 1001, doff 11, ACK, window 63
    0x01, 0x79, 0x00, 0x00, // checksum, urgent pointer
    0x01, 0x01, 0x08, 0x0a, 0x50, 0x07, 0x4d, 0x0f, 0x00, 0x00, 0x13, 0x88, // NOP NOP TS
    0x01, 0x01, 0x05, 0x0a, // NOP NOP SACK len 10
    0x00, 0x00, 0x04, 0x4d, 0x00, 0x00, 0x04, 0xb1, // 1101..1201
];

/// The next duplicate ACK, after a second out-of-order segment (1301..1401): two blocks,
/// the most recent first (RFC 2018 §4).
const LINUX_SACK2: [u8; 52] = [
    0xb0, 0x2a, 0x13, 0x89, 0x71, 0x93, 0xf7, 0xb6, // ports, seq
    0x00, 0x00, 0x03, 0xe9, 0xd0, 0x10, 0x00, 0x3f, // ack 1001, doff 13, ACK, window 63
    0xd6, 0xda, 0x00, 0x00, // checksum, urgent pointer
    0x01, 0x01, 0x08, 0x0a, 0x50, 0x07, 0x4d, 0x0f, 0x00, 0x00, 0x13, 0x88, // NOP NOP TS
    0x01, 0x01, 0x05, 0x12, // NOP NOP SACK len 18
    0x00, 0x00, 0x05, 0x15, 0x00, 0x00, 0x05, 0x79, // 1301..1401
    0x00, 0x00, 0x04, 0x4d, 0x00, 0x00, 0x04, 0xb1, // 1101..1201
];

/// Linux IPv6 SYN, whole packet: 40-byte IPv6 header (automatic flow label), then TCP.
const LINUX_SYN_V6: [u8; 80] = [
    0x60, 0x02, 0x4a, 0x8d, // version 6, traffic class 0, flow label 0x24a8d
    0x00, 0x28, 0x06, 0x40, // payload length 40, next header TCP, hop limit 64
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // source 2001:db8:5::1
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // destination 2001:db8:5::2
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0xd2, 0x00, 0x13, 0x8b, 0x99, 0xe1, 0xf9, 0x53, // 53760 -> 5003, seq
    0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfd, 0x20, // ack, doff 10, SYN, window 64800
    0xc4, 0x38, 0x00, 0x00, 0x02, 0x04, 0x05, 0xa0, // checksum, urgent, MSS 1440
    0x04, 0x02, 0x08, 0x0a, 0x5b, 0xa9, 0x56, 0xce, // SACKOK TS, TSval
    0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a, // TSecr, NOP WS 10
];

/// Linux ICMPv6 Echo Request (sent on a raw socket: the kernel fills the checksum).
const LINUX_ECHO_REQUEST_V6: [u8; 59] = [
    0x60, 0x02, 0xdd, 0xe3, // version 6, traffic class 0, flow label 0x2dde3
    0x00, 0x13, 0x3a, 0x40, // payload length 19, next header ICMPv6, hop limit 64
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // source 2001:db8:5::1
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // destination 2001:db8:5::2
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x80, 0x00, 0xd3, 0xde, // type 128, code 0, checksum
    0x12, 0x34, 0x00, 0x01, // identifier 0x1234, sequence 1
    b'u', b's', b't', b'a', b'c', b'k', b' ', b'p', b'i', b'n', b'g',
];

/// Linux ICMPv6 Port Unreachable, answering a UDP datagram "probe" from
/// [2001:db8:5::2]:40001 to port 9.
const LINUX_PORT_UNREACHABLE_V6: [u8; 101] = [
    0x60, 0x0a, 0x01, 0x9d, 0x00, 0x3d, 0x3a, 0x40, // flow 0xa019d, length 61, ICMPv6, hop 64
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x01, 0x04, 0x31, 0xd6, 0x00, 0x00, 0x00, 0x00, // type 1, code 4, checksum, unused
    0x60, 0x00, 0x00, 0x00, 0x00, 0x0d, 0x11, 0x40, // invoking packet: IPv6 header ...
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x9c, 0x41, 0x00, 0x09, 0x00, 0x0d, 0xc3, 0x35, // ... UDP header ...
    b'p', b'r', b'o', b'b', b'e', // ... and data
];

/// Linux ICMPv6 Parameter Problem (code 1, unrecognized Next Header, pointer 6), answering
/// a packet with next header 253.
const LINUX_PARAM_PROBLEM_V6: [u8; 96] = [
    0x60, 0x0a, 0x0b, 0x1a, 0x00, 0x38, 0x3a, 0x40, // flow 0xa0b1a, length 56, ICMPv6, hop 64
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x04, 0x01, 0xe7, 0x3e, 0x00, 0x00, 0x00, 0x06, // type 4, code 1, checksum, pointer 6
    0x60, 0x00, 0x00, 0x00, 0x00, 0x08, 0xfd, 0x40, // invoking packet
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
];

/// Hand-built Packet Too Big (MTU 1280) from 2001:db8:5::1 to ::2 quoting the first 48
/// bytes of `LINUX_SYN_V6`; checksum computed independently (Python).
const PACKET_TOO_BIG: [u8; 56] = {
    let mut m = [0u8; 56];
    let head = [0x02, 0x00, 0x17, 0xd6, 0x00, 0x00, 0x05, 0x00];
    let mut i = 0;
    while i < 8 {
        m[i] = head[i];
        i += 1;
    }
    while i < 56 {
        m[i] = LINUX_SYN_V6[i - 8];
        i += 1;
    }
    m
};

// ---------------------------------------------------------------------------------------
// helpers

fn parse_tcp<'a>(packet: &'a tcp::Packet<&'a [u8]>, src: IpAddr, dst: IpAddr) -> tcp::Repr<'a> {
    assert!(
        packet.verify_checksum(&src, &dst),
        "checksum of a golden segment must verify"
    );
    tcp::Repr::parse(packet, &src, &dst, true).expect("golden segment parses")
}

fn emit_tcp(repr: &tcp::Repr, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut buf = vec![0xa5; repr.buffer_len()];
    repr.emit(
        &mut tcp::Packet::new_unchecked(&mut buf[..]),
        &src,
        &dst,
        true,
    );
    buf
}

fn sack(blocks: &[(u32, u32)]) -> [Option<(SeqNumber, SeqNumber)>; 4] {
    let mut out = [None; 4];
    for (slot, &(l, r)) in out.iter_mut().zip(blocks) {
        *slot = Some((SeqNumber(l), SeqNumber(r)));
    }
    out
}

/// The SYN's Repr, written by hand from the capture.
fn linux_syn_repr() -> tcp::Repr<'static> {
    tcp::Repr {
        src_port: 45098,
        dst_port: 5001,
        seq_number: SeqNumber(0x7193_f7b0),
        ack_number: SeqNumber(0),
        flags: Flags::SYN,
        window_len: 64240,
        urgent_pointer: 0,
        max_seg_size: Some(1460),
        window_scale: Some(10),
        sack_permitted: true,
        sack_ranges: [None; 4],
        timestamp: Some(TcpTimestamp {
            tsval: 0x5007_4d0e,
            tsecr: 0,
        }),
        payload: &[],
    }
}

fn established_ack(seq: u32, payload: &'static [u8]) -> tcp::Repr<'static> {
    tcp::Repr {
        src_port: 45098,
        dst_port: 5001,
        seq_number: SeqNumber(seq),
        ack_number: SeqNumber(1001),
        flags: Flags::ACK,
        window_len: 63,
        timestamp: Some(TcpTimestamp {
            tsval: 0x5007_4d0f,
            tsecr: 5000,
        }),
        payload,
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------
// TCP: Linux captures

#[test]
fn linux_syn_view_fields() {
    let p = tcp::Packet::new_checked(&LINUX_SYN[..]).unwrap();
    assert_eq!((p.src_port(), p.dst_port()), (45098, 5001));
    assert_eq!(p.seq_number(), SeqNumber(0x7193_f7b0));
    assert_eq!(p.data_offset(), 10);
    assert_eq!(p.header_len(), 40);
    assert!(p.syn() && !p.ack() && !p.fin() && !p.rst() && !p.psh() && !p.urg());
    assert!(!p.ece() && !p.cwr());
    assert_eq!(p.flags(), Flags::SYN);
    assert_eq!(p.window_len(), 64240);
    assert_eq!(p.checksum(), 0x2e94);
    assert_eq!(p.urgent_pointer(), 0);
    assert_eq!(p.options(), &LINUX_SYN[20..]);
    assert_eq!(p.payload(), &[] as &[u8]);
    assert_eq!(p.segment_len(), 1, "a SYN occupies one sequence number");
    let options: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        options,
        [
            TcpOption::MaxSegmentSize(1460),
            TcpOption::SackPermitted,
            TcpOption::Timestamp {
                tsval: 0x5007_4d0e,
                tsecr: 0
            },
            TcpOption::WindowScale(10),
        ],
        "the NOP is skipped"
    );
}

#[test]
fn linux_syn_parse() {
    let p = tcp::Packet::new_checked(&LINUX_SYN[..]).unwrap();
    assert_eq!(parse_tcp(&p, LINUX_V4, PEER_V4), linux_syn_repr());
}

#[test]
fn linux_syn_emit_is_byte_identical() {
    let repr = linux_syn_repr();
    assert_eq!(repr.header_len(), 40);
    assert_eq!(repr.buffer_len(), 40);
    assert_eq!(emit_tcp(&repr, LINUX_V4, PEER_V4), LINUX_SYN);
}

#[test]
fn linux_syn_checksum_depends_on_the_pseudo_header() {
    let p = tcp::Packet::new_checked(&LINUX_SYN[..]).unwrap();
    let other = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 3));
    assert!(!p.verify_checksum(&LINUX_V4, &other));
    assert!(!p.verify_checksum(&other, &PEER_V4));
}

#[test]
fn linux_synack_parse_and_emit() {
    let p = tcp::Packet::new_checked(&LINUX_SYNACK[..]).unwrap();
    let repr = parse_tcp(&p, LINUX_V4, PEER_V4);
    let expected = tcp::Repr {
        src_port: 5002,
        dst_port: 40000,
        seq_number: SeqNumber(0xe976_a28c),
        ack_number: SeqNumber(0x1122_3345),
        flags: Flags::SYN | Flags::ACK,
        window_len: 65160,
        urgent_pointer: 0,
        max_seg_size: Some(1460),
        window_scale: Some(10),
        sack_permitted: true,
        sack_ranges: [None; 4],
        timestamp: Some(TcpTimestamp {
            tsval: 0xece3_af94,
            tsecr: 7777,
        }),
        payload: &[],
    };
    assert_eq!(repr, expected);
    assert_eq!(emit_tcp(&expected, LINUX_V4, PEER_V4), LINUX_SYNACK);
}

#[test]
fn linux_data_segment_parse_and_emit() {
    let p = tcp::Packet::new_checked(&LINUX_DATA[..]).unwrap();
    assert_eq!(p.header_len(), 32);
    assert_eq!(p.payload(), b"hello");
    assert_eq!(p.segment_len(), 5);
    let repr = parse_tcp(&p, LINUX_V4, PEER_V4);
    let mut expected = established_ack(0x7193_f7b1, b"hello");
    expected.flags |= Flags::PSH;
    assert_eq!(repr, expected);
    assert_eq!(expected.header_len(), 32, "NOP NOP TS is 12 bytes");
    assert_eq!(emit_tcp(&expected, LINUX_V4, PEER_V4), LINUX_DATA);
}

#[test]
fn linux_sack_one_block_parse_and_emit() {
    let p = tcp::Packet::new_checked(&LINUX_SACK1[..]).unwrap();
    let repr = parse_tcp(&p, LINUX_V4, PEER_V4);
    let mut expected = established_ack(0x7193_f7b6, &[]);
    expected.sack_ranges = sack(&[(1101, 1201)]);
    assert_eq!(repr, expected);
    assert_eq!(
        p.options_iter().last().unwrap().unwrap(),
        TcpOption::SackRange([Some((1101, 1201)), None, None, None])
    );
    assert_eq!(emit_tcp(&expected, LINUX_V4, PEER_V4), LINUX_SACK1);
}

#[test]
fn linux_sack_two_blocks_parse_and_emit() {
    let p = tcp::Packet::new_checked(&LINUX_SACK2[..]).unwrap();
    let repr = parse_tcp(&p, LINUX_V4, PEER_V4);
    let mut expected = established_ack(0x7193_f7b6, &[]);
    expected.sack_ranges = sack(&[(1301, 1401), (1101, 1201)]);
    assert_eq!(repr, expected);
    assert_eq!(expected.header_len(), 52);
    assert_eq!(emit_tcp(&expected, LINUX_V4, PEER_V4), LINUX_SACK2);
}

#[test]
fn linux_ipv6_syn_parse_and_emit() {
    let ip = ipv6::Packet::new_checked(&LINUX_SYN_V6[..]).unwrap();
    let ip_repr = ipv6::Repr::parse(&ip).unwrap();
    assert_eq!(
        ip_repr,
        ipv6::Repr {
            src_addr: LINUX_V6,
            dst_addr: PEER_V6,
            next_header: IpProtocol::Tcp,
            payload_len: 40,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0x24a8d,
        }
    );
    let (src, dst) = (IpAddr::V6(LINUX_V6), IpAddr::V6(PEER_V6));
    let seg = tcp::Packet::new_checked(ip.payload()).unwrap();
    let repr = parse_tcp(&seg, src, dst);
    let expected = tcp::Repr {
        src_port: 53760,
        dst_port: 5003,
        seq_number: SeqNumber(0x99e1_f953),
        flags: Flags::SYN,
        window_len: 64800,
        max_seg_size: Some(1440),
        window_scale: Some(10),
        sack_permitted: true,
        timestamp: Some(TcpTimestamp {
            tsval: 0x5ba9_56ce,
            tsecr: 0,
        }),
        ..Default::default()
    };
    assert_eq!(repr, expected);
    // The same segment does not verify as IPv4 with mapped-looking addresses.
    assert!(!seg.verify_checksum(&LINUX_V4, &PEER_V4));
    assert!(
        !seg.verify_checksum(&IpAddr::V6(LINUX_V6), &LINUX_V4),
        "mixed families never verify"
    );

    let mut buf = vec![0u8; ip_repr.buffer_len() + expected.buffer_len()];
    ip_repr.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
    expected.emit(
        &mut tcp::Packet::new_unchecked(&mut buf[40..]),
        &src,
        &dst,
        true,
    );
    assert_eq!(buf, LINUX_SYN_V6);
}

// ---------------------------------------------------------------------------------------
// TCP: validation and normalisation

/// A copy of the Linux SYN with `edit` applied and the checksum refilled.
fn edited_syn(edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = LINUX_SYN.to_vec();
    edit(&mut b);
    tcp::Packet::new_unchecked(&mut b[..]).fill_checksum(&LINUX_V4, &PEER_V4);
    b
}

fn parse_err(bytes: &[u8]) -> Error {
    let p = tcp::Packet::new_unchecked(bytes);
    tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap_err()
}

#[test]
fn fill_checksum_reproduces_linux() {
    let b = edited_syn(|_| {});
    assert_eq!(b, LINUX_SYN);
}

#[test]
fn bad_checksum_is_checksum_error_unless_not_verified() {
    let mut b = LINUX_SYN;
    b[17] ^= 0x01;
    assert_eq!(parse_err(&b), Error::Checksum);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, false).unwrap(),
        linux_syn_repr()
    );
    // A flipped payload/option bit is caught too.
    let mut b = LINUX_SYN;
    b[30] ^= 0x80;
    assert_eq!(parse_err(&b), Error::Checksum);
}

#[test]
fn syn_with_fin_or_rst_is_malformed() {
    assert_eq!(parse_err(&edited_syn(|b| b[13] = 0x03)), Error::Malformed);
    assert_eq!(parse_err(&edited_syn(|b| b[13] = 0x06)), Error::Malformed);
    assert_eq!(
        parse_err(&edited_syn(|b| b[13] = 0x12 | 0x01)),
        Error::Malformed
    );
    // RST with FIN, or no flag at all, is the TCP layer's business.
    let b = edited_syn(|b| b[13] = 0x05);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .flags,
        Flags::RST | Flags::FIN
    );
}

#[test]
fn ece_and_cwr_round_trip() {
    // A SYN asking for ECN carries ECE|CWR (RFC 3168 §6.1.1).
    let b = edited_syn(|b| b[13] = 0xc2);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert!(p.ece() && p.cwr() && p.syn());
    let repr = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
    assert_eq!(repr.flags, Flags::SYN | Flags::ECE | Flags::CWR);
    assert_eq!(emit_tcp(&repr, LINUX_V4, PEER_V4), b);
    assert_eq!(format!("{:?}", repr.flags), "SYN|ECE|CWR");
}

#[test]
fn reserved_bits_are_ignored_on_parse_and_zero_on_emit() {
    let b = edited_syn(|b| b[12] |= 0x0f);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(p.reserved(), 0x0f);
    let repr = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
    assert_eq!(repr, linux_syn_repr());
    assert_eq!(emit_tcp(&repr, LINUX_V4, PEER_V4), LINUX_SYN);
}

#[test]
fn window_scale_above_14_is_taken_as_14() {
    let b = edited_syn(|b| b[39] = 15);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        p.options_iter().nth(3).unwrap().unwrap(),
        TcpOption::WindowScale(15),
        "raw in the view"
    );
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .window_scale,
        Some(14)
    );
    let b = edited_syn(|b| b[39] = 255);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .window_scale,
        Some(14)
    );
}

#[test]
fn mss_zero_is_taken_as_absent() {
    let b = edited_syn(|b| b[22..24].copy_from_slice(&[0, 0]));
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .max_seg_size,
        None
    );
}

/// The usual SYN block (`MSS SACKOK TS NOP WS`) is read in one comparison
/// (`tcp::aligned_syn_options`): whatever its values (an MSS of 0, a shift above 14, any
/// timestamps), the segment parses as the same options laid out otherwise (`NOP WS` first,
/// `NOP NOP SACKOK`, `NOP NOP TS`: 24 bytes), which the full parse reads.
#[test]
fn the_usual_syn_options_parse_as_the_full_parse_reads_them() {
    for (mss, shift, tsval, tsecr) in [
        (1460u16, 10u8, 0x5007_4d0eu32, 0u32),
        (0, 0, 0, 0),
        (65_535, 14, u32::MAX, 1),
        (536, 15, 1, u32::MAX),
        (1, 255, 0x8000_0000, 0x7fff_ffff),
    ] {
        let [m0, m1] = mss.to_be_bytes();
        let ([v0, v1, v2, v3], [e0, e1, e2, e3]) = (tsval.to_be_bytes(), tsecr.to_be_bytes());
        let fast = edited_syn(|b| {
            b[22..24].copy_from_slice(&[m0, m1]);
            b[28..36].copy_from_slice(&[v0, v1, v2, v3, e0, e1, e2, e3]);
            b[39] = shift;
        });
        let p = tcp::Packet::new_checked(&fast[..]).unwrap();
        let opts: [u8; 20] = p.options().try_into().unwrap();
        assert!(tcp::aligned_syn_options(&opts).is_some(), "the fast layout");
        let fast_repr = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
        // The same options in another order, 4 bytes longer: doff 11.
        let mut slow = LINUX_SYN[..20].to_vec();
        slow[12] = 0xb0;
        slow.extend_from_slice(&[1, 3, 3, shift, 2, 4, m0, m1, 1, 1, 4, 2]);
        slow.extend_from_slice(&[1, 1, 8, 10, v0, v1, v2, v3, e0, e1, e2, e3]);
        tcp::Packet::new_unchecked(&mut slow[..]).fill_checksum(&LINUX_V4, &PEER_V4);
        let q = tcp::Packet::new_checked(&slow[..]).unwrap();
        assert!(tcp::aligned_syn_options(q.options()).is_none());
        let slow_repr = tcp::Repr::parse(&q, &LINUX_V4, &PEER_V4, true).unwrap();
        assert_eq!(fast_repr, slow_repr, "mss {mss} shift {shift}");
        assert!(fast_repr.sack_permitted && fast_repr.timestamp.is_some());
    }
}

#[test]
fn data_offset_checks() {
    // doff 4: below the fixed header.
    let b = edited_syn(|b| b[12] = 0x40);
    assert_eq!(
        tcp::Packet::new_checked(&b[..]).unwrap_err(),
        Error::Malformed
    );
    assert_eq!(parse_err(&b), Error::Malformed);
    // doff 0.
    let b = edited_syn(|b| b[12] = 0x00);
    assert_eq!(
        tcp::Packet::new_checked(&b[..]).unwrap_err(),
        Error::Malformed
    );
    // doff 15 (60 bytes) but only 40 bytes.
    let b = edited_syn(|b| b[12] = 0xf0);
    assert_eq!(
        tcp::Packet::new_checked(&b[..]).unwrap_err(),
        Error::Truncated
    );
    assert_eq!(parse_err(&b), Error::Truncated);
    // Shorter than the fixed header.
    assert_eq!(
        tcp::Packet::new_checked(&LINUX_SYN[..19]).unwrap_err(),
        Error::Truncated
    );
    // doff 5: the options become payload.
    let b = edited_syn(|b| b[12] = 0x50);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    let repr = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
    assert_eq!((repr.max_seg_size, repr.payload), (None, &LINUX_SYN[20..]));
}

#[test]
fn port_zero() {
    // Destination port 0: no socket can own it.
    assert_eq!(
        parse_err(&edited_syn(|b| b[2..4].copy_from_slice(&[0, 0]))),
        Error::Malformed
    );
    // Source port 0 is accepted, as Linux does.
    let b = edited_syn(|b| b[0..2].copy_from_slice(&[0, 0]));
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .src_port,
        0
    );
}

/// A 20-byte header (ports 1 -> 2, ACK) followed by `options`, padded with EOL to a
/// multiple of 4, checksum filled.
fn with_options(options: &[u8]) -> Vec<u8> {
    let opt_len = options.len().div_ceil(4) * 4;
    let mut b = vec![0u8; 20 + opt_len];
    b[..4].copy_from_slice(&[0, 1, 0, 2]);
    b[12] = (((20 + opt_len) / 4) as u8) << 4;
    b[13] = 0x10;
    b[20..20 + options.len()].copy_from_slice(options);
    tcp::Packet::new_unchecked(&mut b[..]).fill_checksum(&LINUX_V4, &PEER_V4);
    b
}

fn parse_options(options: &[u8]) -> Result<tcp::Repr<'static>, Error> {
    let b: &'static [u8] = Box::leak(with_options(options).into_boxed_slice());
    let p: &'static tcp::Packet<&'static [u8]> = Box::leak(Box::new(tcp::Packet::new_checked(b)?));
    tcp::Repr::parse(p, &LINUX_V4, &PEER_V4, true)
}

/// As Linux `tcp_parse_options`: a known option of the wrong length is ignored (not
/// understood, not an error) and parsing goes on to the options after it.
#[test]
fn known_options_of_the_wrong_length_are_ignored() {
    for bad in [
        &[2, 3, 5][..],                         // MSS len 3
        &[2, 5, 5, 0xb4, 0],                    // MSS len 5
        &[3, 2],                                // WS len 2
        &[3, 4, 7, 0],                          // WS len 4
        &[4, 3, 0],                             // SACKOK len 3
        &[5, 2],                                // SACK with no block
        &[5, 6, 0, 0, 0, 1],                    // SACK, half a block
        &[5, 12, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0], // SACK len 12
        &[8, 8, 0, 0, 0, 1, 0, 0],              // TS len 8
    ] {
        // The bad option, then a good MSS after it.
        let mut opts = bad.to_vec();
        opts.extend_from_slice(&[2, 4, 0x05, 0xb4]);
        let repr = parse_options(&opts).unwrap_or_else(|e| panic!("{bad:?}: {e:?}"));
        assert_eq!(repr.max_seg_size, Some(1460), "{bad:?}: parsing goes on");
        assert_eq!(repr.window_scale, None, "{bad:?}");
        assert!(!repr.sack_permitted, "{bad:?}");
        assert_eq!(repr.sack_ranges, [None; 4], "{bad:?}");
        assert_eq!(repr.timestamp, None, "{bad:?}");
    }
}

/// RFC 9293 §3.2 MUST-7, the Linux way: an illegal length ends option parsing and the
/// segment is kept with the options before it.
#[test]
fn option_length_below_two_or_past_the_header_ends_the_options() {
    for bad in [
        &[30, 0, 0, 0][..],
        &[30, 1, 0, 0],
        &[30, 5, 0, 0], // runs past the header
        &[1, 1, 1, 2],  // MSS kind without length
    ] {
        let mut opts = vec![3, 3, 7, 1]; // WS 7, NOP
        opts.extend_from_slice(bad);
        opts.extend_from_slice(&[2, 4, 0x05, 0xb4]);
        let repr = parse_options(&opts).unwrap_or_else(|e| panic!("{bad:?}: {e:?}"));
        assert_eq!(
            repr.window_scale,
            Some(7),
            "{bad:?}: options before are kept"
        );
        assert_eq!(
            repr.max_seg_size, None,
            "{bad:?}: options after are not read"
        );
    }
    // The iterator yields the error once, then stops.
    let b = with_options(&[2, 4, 5, 0xb4, 30, 9, 0, 0]);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    let items: Vec<_> = p.options_iter().collect();
    assert_eq!(
        items,
        [Ok(TcpOption::MaxSegmentSize(1460)), Err(Error::Malformed)]
    );
}

#[test]
fn unknown_options_are_skipped_and_eol_ends_the_list() {
    // Unknown kind 30 (MPTCP) with 2 data bytes, then MSS, then EOL, then garbage that
    // would be malformed if it were parsed.
    let b = with_options(&[30, 4, 0xaa, 0xbb, 2, 4, 0x05, 0xb4, 0, 2, 9, 9]);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    let items: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        items,
        [
            TcpOption::Unknown {
                kind: 30,
                data: &[0xaa, 0xbb]
            },
            TcpOption::MaxSegmentSize(1460)
        ]
    );
    let repr = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
    assert_eq!(repr.max_seg_size, Some(1460));
    // A single option parse, NOP and EOL included.
    assert_eq!(
        TcpOption::parse(&[1, 0]).unwrap(),
        (TcpOption::NoOperation, &[0u8][..])
    );
    assert_eq!(
        TcpOption::parse(&[0, 7, 7]).unwrap(),
        (TcpOption::EndOfList, &[][..])
    );
    assert_eq!(TcpOption::parse(&[]).unwrap_err(), Error::Truncated);
}

#[test]
fn options_in_any_order_and_a_later_duplicate_wins() {
    let repr = parse_options(&[
        3, 3, 2, // WS 2 (unaligned)
        8, 10, 0, 0, 0, 9, 0, 0, 0, 8, // TS 9, 8
        4, 2, // SACKOK
        2, 4, 0x02, 0x18, // MSS 536
        2, 4, 0x05, 0xb4, // MSS 1460 again
    ])
    .unwrap();
    assert_eq!(repr.window_scale, Some(2));
    assert_eq!(repr.timestamp, Some(TcpTimestamp { tsval: 9, tsecr: 8 }));
    assert!(repr.sack_permitted);
    assert_eq!(repr.max_seg_size, Some(1460));
}

#[test]
fn four_sack_blocks_parse() {
    let mut opts = vec![1, 1, 5, 34];
    for i in 1..=8u32 {
        opts.extend_from_slice(&(i * 100).to_be_bytes());
    }
    let repr = parse_options(&opts).unwrap();
    assert_eq!(
        repr.sack_ranges,
        sack(&[(100, 200), (300, 400), (500, 600), (700, 800)])
    );
    assert_eq!(repr.header_len(), 56);
}

// ---------------------------------------------------------------------------------------
// TCP: emit layout (Linux tcp_options_write) and the 40-byte limit

#[test]
fn emit_nop_nop_sackok_without_timestamps() {
    let repr = tcp::Repr {
        src_port: 1,
        dst_port: 2,
        flags: Flags::SYN,
        max_seg_size: Some(536),
        sack_permitted: true,
        window_scale: Some(0),
        ..Default::default()
    };
    let b = emit_tcp(&repr, LINUX_V4, PEER_V4);
    assert_eq!(&b[20..], &[2, 4, 0x02, 0x18, 1, 1, 4, 2, 1, 3, 3, 0]);
    assert_eq!(b[12], 8 << 4);
}

#[test]
fn emit_no_options_is_twenty_bytes() {
    let repr = tcp::Repr {
        src_port: 1,
        dst_port: 2,
        flags: Flags::RST,
        ..Default::default()
    };
    assert_eq!(repr.header_len(), 20);
    let b = emit_tcp(&repr, LINUX_V4, PEER_V4);
    assert_eq!(b.len(), 20);
    assert_eq!(b[12], 5 << 4);
}

#[test]
fn sack_blocks_that_do_not_fit_are_dropped_from_the_end() {
    let four = sack(&[(1, 2), (3, 4), (5, 6), (7, 8)]);
    let ts = Some(TcpTimestamp { tsval: 1, tsecr: 2 });
    // No other option: all four fit (4 + 32 = 36 bytes).
    let r = tcp::Repr {
        src_port: 1,
        dst_port: 2,
        flags: Flags::ACK,
        sack_ranges: four,
        ..Default::default()
    };
    assert_eq!((r.sack_blocks_emitted(), r.header_len()), (4, 56));
    // Timestamps: three fit (12 + 4 + 24 = 40), as in Linux.
    let r = tcp::Repr { timestamp: ts, ..r };
    assert_eq!((r.sack_blocks_emitted(), r.header_len()), (3, 60));
    let b = emit_tcp(&r, LINUX_V4, PEER_V4);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    let parsed = tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true).unwrap();
    assert_eq!(
        parsed.sack_ranges,
        sack(&[(1, 2), (3, 4), (5, 6)]),
        "the last block is dropped"
    );
    // Everything (MSS, SACKOK+TS, WS: 20 bytes): two fit.
    let r = tcp::Repr {
        max_seg_size: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        ..r
    };
    assert_eq!((r.sack_blocks_emitted(), r.header_len()), (2, 60));
    let b = emit_tcp(&r, LINUX_V4, PEER_V4);
    assert_eq!(
        &b[20..],
        &[
            2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 3, 3, 7, 1, 1, 5, 18, //
            0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4,
        ]
    );
    // Absent slots in the middle are skipped, present blocks keep their order.
    let r = tcp::Repr {
        src_port: 1,
        dst_port: 2,
        flags: Flags::ACK,
        sack_ranges: [
            None,
            Some((SeqNumber(9), SeqNumber(10))),
            None,
            Some((SeqNumber(11), SeqNumber(12))),
        ],
        ..Default::default()
    };
    let b = emit_tcp(&r, LINUX_V4, PEER_V4);
    let p = tcp::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(
        tcp::Repr::parse(&p, &LINUX_V4, &PEER_V4, true)
            .unwrap()
            .sack_ranges,
        sack(&[(9, 10), (11, 12)])
    );
}

#[test]
fn emit_header_then_payload_then_checksum_matches_emit() {
    let repr = established_ack(0x7193_f7b1, b"hello");
    let mut buf = vec![0u8; repr.buffer_len()];
    let mut p = tcp::Packet::new_unchecked(&mut buf[..]);
    repr.emit_header(&mut p);
    p.payload_mut().copy_from_slice(b"hello");
    p.fill_checksum(&LINUX_V4, &PEER_V4);
    let mut expected = LINUX_DATA;
    expected[13] = 0x10; // without PSH
    tcp::Packet::new_unchecked(&mut expected[..]).fill_checksum(&LINUX_V4, &PEER_V4);
    assert_eq!(buf, expected);
}

#[test]
fn tcp_option_emit_writes_what_parse_reads() {
    let options = [
        TcpOption::MaxSegmentSize(1460),
        TcpOption::WindowScale(7),
        TcpOption::SackPermitted,
        TcpOption::SackRange([Some((1, 2)), Some((3, 4)), None, None]),
        TcpOption::Timestamp { tsval: 5, tsecr: 6 },
        TcpOption::Unknown {
            kind: 254,
            data: &[1, 2, 3],
        },
        TcpOption::NoOperation,
        TcpOption::EndOfList,
    ];
    let mut buf = [0u8; 64];
    let mut rest = &mut buf[..];
    for o in &options {
        rest = o.emit(rest);
    }
    let used = 64 - rest.len();
    assert_eq!(
        used,
        options.iter().map(TcpOption::buffer_len).sum::<usize>()
    );
    let mut input = &buf[..used];
    for o in &options {
        let (parsed, r) = TcpOption::parse(input).unwrap();
        assert_eq!(&parsed, o);
        input = r;
    }
}

// ---------------------------------------------------------------------------------------
// IPv6

#[test]
fn ipv6_view_fields() {
    let p = ipv6::Packet::new_checked(&LINUX_ECHO_REQUEST_V6[..]).unwrap();
    assert_eq!(p.version(), 6);
    assert_eq!(p.traffic_class(), 0);
    assert_eq!((p.dscp(), p.ecn()), (0, 0));
    assert_eq!(p.flow_label(), 0x2dde3);
    assert_eq!(p.payload_len(), 19);
    assert_eq!(p.next_header(), IpProtocol::Icmpv6);
    assert_eq!(p.hop_limit(), 64);
    assert_eq!(p.src_addr(), LINUX_V6);
    assert_eq!(p.dst_addr(), PEER_V6);
    assert_eq!(p.payload(), &LINUX_ECHO_REQUEST_V6[40..]);
}

#[test]
fn ipv6_setters_and_traffic_class() {
    let mut b = [0u8; 40];
    let mut p = ipv6::Packet::new_unchecked(&mut b[..]);
    p.set_version(6);
    p.set_traffic_class(0xb9); // DSCP 46 (EF), ECN 1 (ECT(1))
    p.set_flow_label(0xfffff);
    assert_eq!(
        (p.version(), p.dscp(), p.ecn(), p.flow_label()),
        (6, 46, 1, 0xfffff)
    );
    p.set_flow_label(0x12_3456);
    assert_eq!(
        (p.version(), p.traffic_class(), p.flow_label()),
        (6, 0xb9, 0x23456),
        "only 20 bits"
    );
    assert_eq!(&b[..4], &[0x6b, 0x92, 0x34, 0x56]);
}

#[test]
fn ipv6_emit_is_byte_identical() {
    let repr = ipv6::Repr {
        src_addr: LINUX_V6,
        dst_addr: PEER_V6,
        next_header: IpProtocol::Icmpv6,
        payload_len: 19,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0x2dde3,
    };
    let p = ipv6::Packet::new_checked(&LINUX_ECHO_REQUEST_V6[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&p).unwrap(), repr);
    let mut b = [0u8; 40];
    repr.emit(&mut ipv6::Packet::new_unchecked(&mut b[..]));
    assert_eq!(b, LINUX_ECHO_REQUEST_V6[..40]);
}

#[test]
fn ipv6_length_and_version_checks() {
    assert_eq!(
        ipv6::Packet::new_checked(&LINUX_SYN_V6[..39]).unwrap_err(),
        Error::Truncated
    );
    assert_eq!(
        ipv6::Packet::new_checked(&LINUX_SYN_V6[..79]).unwrap_err(),
        Error::Truncated
    );
    // Trailing bytes (link padding) are not payload.
    let mut padded = LINUX_ECHO_REQUEST_V6.to_vec();
    padded.extend_from_slice(&[0; 5]);
    let p = ipv6::Packet::new_checked(&padded[..]).unwrap();
    assert_eq!(p.payload(), &LINUX_ECHO_REQUEST_V6[40..]);
    // Version 4 in an IPv6 packet.
    let mut b = LINUX_SYN_V6;
    b[0] = 0x40 | (b[0] & 0x0f);
    let p = ipv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&p).unwrap_err(), Error::Malformed);
    // A jumbogram (payload length 0, Hop-by-Hop next): unsupported.
    let mut b = [0u8; 48];
    b[..40].copy_from_slice(&LINUX_SYN_V6[..40]);
    b[4..6].copy_from_slice(&[0, 0]);
    b[6] = 0;
    let p = ipv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&p).unwrap_err(), Error::Unsupported);
    // Payload length 0 with another next header is just an empty packet.
    b[6] = 59;
    let p = ipv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&p).unwrap().payload_len, 0);
}

// ---------------------------------------------------------------------------------------
// ICMPv6

fn icmp_parse<'a>(packet: &'a icmpv6::Packet<&'a [u8]>) -> Result<icmpv6::Repr<'a>, Error> {
    icmpv6::Repr::parse(packet, &LINUX_V6, &PEER_V6, true)
}

fn icmp_emit(repr: &icmpv6::Repr) -> Vec<u8> {
    let mut b = vec![0xa5; repr.buffer_len()];
    repr.emit(
        &mut icmpv6::Packet::new_unchecked(&mut b[..]),
        &LINUX_V6,
        &PEER_V6,
        true,
    );
    b
}

#[test]
fn linux_echo_request_parse_and_emit() {
    let ip = ipv6::Packet::new_checked(&LINUX_ECHO_REQUEST_V6[..]).unwrap();
    let p = icmpv6::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(p.msg_type(), icmpv6::Message::EchoRequest);
    assert_eq!((p.msg_code(), p.checksum()), (0, 0xd3de));
    assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 1));
    assert!(p.verify_checksum(&LINUX_V6, &PEER_V6));
    assert!(!p.verify_checksum(&PEER_V6, &Ipv6Addr::LOCALHOST));
    let repr = icmp_parse(&p).unwrap();
    let expected = icmpv6::Repr::EchoRequest {
        ident: 0x1234,
        seq_no: 1,
        data: b"ustack ping",
    };
    assert_eq!(repr, expected);
    assert_eq!(icmp_emit(&expected), &LINUX_ECHO_REQUEST_V6[40..]);
}

#[test]
fn echo_reply_round_trip() {
    let reply = icmpv6::Repr::EchoReply {
        ident: 0x1234,
        seq_no: 1,
        data: b"ustack ping",
    };
    let b = icmp_emit(&reply);
    assert_eq!(&b[..2], &[129, 0]);
    let p = icmpv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(icmp_parse(&p).unwrap(), reply);
}

#[test]
fn linux_port_unreachable_parse_and_emit() {
    let ip = ipv6::Packet::new_checked(&LINUX_PORT_UNREACHABLE_V6[..]).unwrap();
    assert_eq!(ipv6::Repr::parse(&ip).unwrap().flow_label, 0xa019d);
    let p = icmpv6::Packet::new_checked(ip.payload()).unwrap();
    let expected = icmpv6::Repr::DstUnreachable {
        code: icmpv6::dst_unreachable::PORT_UNREACHABLE,
        data: &LINUX_PORT_UNREACHABLE_V6[48..],
    };
    assert_eq!(icmp_parse(&p).unwrap(), expected);
    // The invoking packet is the UDP datagram we sent.
    let inner = ipv6::Packet::new_checked(expected.data()).unwrap();
    assert_eq!(
        (inner.src_addr(), inner.next_header()),
        (PEER_V6, IpProtocol::Udp)
    );
    assert_eq!(icmp_emit(&expected), &LINUX_PORT_UNREACHABLE_V6[40..]);
}

#[test]
fn linux_param_problem_parse_and_emit() {
    let ip = ipv6::Packet::new_checked(&LINUX_PARAM_PROBLEM_V6[..]).unwrap();
    let p = icmpv6::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(p.param_problem_ptr(), 6);
    let expected = icmpv6::Repr::ParamProblem {
        code: icmpv6::param_problem::NEXT_HEADER,
        pointer: 6,
        data: &LINUX_PARAM_PROBLEM_V6[48..],
    };
    assert_eq!(icmp_parse(&p).unwrap(), expected);
    assert_eq!(icmp_emit(&expected), &LINUX_PARAM_PROBLEM_V6[40..]);
}

#[test]
fn packet_too_big_parse_and_emit() {
    let p = icmpv6::Packet::new_checked(&PACKET_TOO_BIG[..]).unwrap();
    assert_eq!(p.pkt_too_big_mtu(), 1280);
    let expected = icmpv6::Repr::PacketTooBig {
        mtu: 1280,
        data: &LINUX_SYN_V6[..48],
    };
    assert_eq!(icmp_parse(&p).unwrap(), expected);
    assert_eq!(icmp_emit(&expected), PACKET_TOO_BIG);
}

#[test]
fn time_exceeded_round_trip_zeroes_unused() {
    let repr = icmpv6::Repr::TimeExceeded {
        code: icmpv6::time_exceeded::HOP_LIMIT,
        data: &LINUX_SYN_V6[..48],
    };
    let b = icmp_emit(&repr);
    assert_eq!(&b[..2], &[3, 0]);
    assert_eq!(&b[4..8], &[0, 0, 0, 0], "unused field must be zero");
    let p = icmpv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(icmp_parse(&p).unwrap(), repr);
}

#[test]
fn icmpv6_errors() {
    // Too short for the header.
    assert_eq!(
        icmpv6::Packet::new_checked(&PACKET_TOO_BIG[..7]).unwrap_err(),
        Error::Truncated
    );
    // Bad checksum, and the same bytes with verification off.
    let mut b = PACKET_TOO_BIG;
    b[20] ^= 1;
    let p = icmpv6::Packet::new_checked(&b[..]).unwrap();
    assert_eq!(icmp_parse(&p).unwrap_err(), Error::Checksum);
    assert!(icmpv6::Repr::parse(&p, &LINUX_V6, &PEER_V6, false).is_ok());
    // Unknown types and Neighbor Discovery (named, not parsed): unsupported,
    // whatever the class.
    for ty in [135u8, 136, 200, 100] {
        let mut b = vec![ty, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4];
        icmpv6::Packet::new_unchecked(&mut b[..]).fill_checksum(&LINUX_V6, &PEER_V6);
        let p = icmpv6::Packet::new_checked(&b[..]).unwrap();
        assert_eq!(icmp_parse(&p).unwrap_err(), Error::Unsupported, "type {ty}");
        assert_eq!(p.msg_type().is_error(), ty < 128);
    }
}

#[test]
fn icmpv6_message_numbers() {
    use icmpv6::Message;
    for (m, n) in [
        (Message::DstUnreachable, 1u8),
        (Message::PktTooBig, 2),
        (Message::TimeExceeded, 3),
        (Message::ParamProblem, 4),
        (Message::EchoRequest, 128),
        (Message::EchoReply, 129),
        (Message::RouterSolicit, 133),
        (Message::RouterAdvert, 134),
        (Message::NeighborSolicit, 135),
        (Message::NeighborAdvert, 136),
        (Message::Redirect, 137),
        (Message::Unknown(77), 77),
    ] {
        assert_eq!(u8::from(m), n);
        assert_eq!(Message::from(n), m);
    }
}
