//! Property tests for Ethernet, ARP, IPv4, ICMPv4 and UDP:
//! - emit then parse gives back the same `Repr` (and the same payload), for arbitrary `Repr`s;
//! - no `new_checked`, accessor on a checked view, or `parse` panics on arbitrary bytes,
//!   whether random or mutated from a valid packet (which reaches the deeper checks).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use ustack_wire::ethernet::{self, EtherType, Frame};
use ustack_wire::icmpv4::{self, DstUnreachable, TimeExceeded};
use ustack_wire::{EthernetAddress, IpProtocol, arp, ipv4, udp};

// --- Strategies -------------------------------------------------------------------------

fn mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn ipv4_addr() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

/// A matching pair of addresses: both IPv4 or both IPv6.
fn addr_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (ipv4_addr(), ipv4_addr()).prop_map(|(a, b)| (IpAddr::V4(a), IpAddr::V4(b))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

fn ethernet_repr() -> impl Strategy<Value = ethernet::Repr> {
    (mac(), mac(), any::<u16>()).prop_map(|(src_addr, dst_addr, t)| ethernet::Repr {
        src_addr,
        dst_addr,
        ethertype: EtherType::from(t),
    })
}

fn arp_repr() -> impl Strategy<Value = arp::Repr> {
    (any::<u16>(), mac(), ipv4_addr(), mac(), ipv4_addr()).prop_map(|(op, sha, spa, tha, tpa)| {
        arp::Repr {
            operation: arp::Operation::from(op),
            source_hardware_addr: sha,
            source_protocol_addr: spa,
            target_hardware_addr: tha,
            target_protocol_addr: tpa,
        }
    })
}

fn ipv4_repr() -> impl Strategy<Value = ipv4::Repr> {
    (
        (ipv4_addr(), ipv4_addr(), any::<u8>()),
        prop_oneof![0usize..1600, 0usize..=(65535 - 20)],
        (any::<u8>(), any::<u8>(), any::<u16>()),
        (any::<bool>(), any::<bool>(), 0u16..8192),
    )
        .prop_map(
            |((src, dst, proto), payload_len, (ttl, tos, ident), (df, mf, off))| ipv4::Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::from(proto),
                payload_len,
                ttl,
                tos,
                ident,
                dont_frag: df,
                more_frags: mf,
                frag_offset: off * 8,
            },
        )
}

/// Data quoted by an ICMP error: at least an IPv4 header with IHL >= 5.
fn quoted_datagram() -> impl Strategy<Value = Vec<u8>> {
    (5u8..16, proptest::collection::vec(any::<u8>(), 19..120)).prop_map(|(ihl, rest)| {
        let mut v = vec![0x40 | ihl];
        v.extend(rest);
        v
    })
}

#[derive(Debug, Clone)]
enum IcmpCase {
    Echo {
        request: bool,
        ident: u16,
        seq_no: u16,
        data: Vec<u8>,
    },
    Unreach {
        code: u8,
        mtu: u16,
        data: Vec<u8>,
    },
    Exceeded {
        code: u8,
        data: Vec<u8>,
    },
}

impl IcmpCase {
    fn repr(&self) -> icmpv4::Repr<'_> {
        match self {
            IcmpCase::Echo {
                request: true,
                ident,
                seq_no,
                data,
            } => icmpv4::Repr::EchoRequest {
                ident: *ident,
                seq_no: *seq_no,
                data,
            },
            IcmpCase::Echo {
                request: false,
                ident,
                seq_no,
                data,
            } => icmpv4::Repr::EchoReply {
                ident: *ident,
                seq_no: *seq_no,
                data,
            },
            IcmpCase::Unreach { code, mtu, data } => {
                let reason = DstUnreachable::from(*code);
                let next_hop_mtu = if reason == DstUnreachable::FragRequired {
                    *mtu
                } else {
                    0
                };
                icmpv4::Repr::DstUnreachable {
                    reason,
                    next_hop_mtu,
                    data,
                }
            }
            IcmpCase::Exceeded { code, data } => icmpv4::Repr::TimeExceeded {
                reason: TimeExceeded::from(*code),
                data,
            },
        }
    }
}

fn icmp_case() -> impl Strategy<Value = IcmpCase> {
    prop_oneof![
        (
            any::<bool>(),
            any::<u16>(),
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(request, ident, seq_no, data)| IcmpCase::Echo {
                request,
                ident,
                seq_no,
                data
            }),
        (
            prop_oneof![Just(4u8), any::<u8>()],
            any::<u16>(),
            quoted_datagram()
        )
            .prop_map(|(code, mtu, data)| IcmpCase::Unreach { code, mtu, data }),
        (any::<u8>(), quoted_datagram()).prop_map(|(code, data)| IcmpCase::Exceeded { code, data }),
    ]
}

/// Bytes mutated from a valid packet: a few bytes overwritten, maybe cut short or extended.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    (
        proptest::collection::vec((0..len, any::<u8>()), 0..4),
        0..=len + 8,
        proptest::collection::vec(any::<u8>(), 8),
    )
        .prop_map(move |(edits, cut, tail)| {
            let mut v = base.clone();
            for (i, b) in edits {
                v[i] = b;
            }
            v.extend_from_slice(&tail);
            v.truncate(cut);
            v
        })
}

/// A valid Ethernet/IPv4/UDP frame, and one of Ethernet/IPv4/ICMP, and one of ARP.
fn valid_frames() -> Vec<Vec<u8>> {
    let eth = ethernet::Repr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EtherType::Ipv4,
    };
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let mut frames = Vec::new();
    for proto in [IpProtocol::Udp, IpProtocol::Icmp] {
        let payload = 8 + 28;
        let ip = ipv4::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: proto,
            payload_len: payload,
            ttl: 64,
            tos: 0,
            ident: 1,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        };
        let mut buf = vec![0u8; 14 + 20 + payload];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        let mut ip_packet = ipv4::Packet::new_unchecked(frame.payload_mut());
        ip.emit(&mut ip_packet, true);
        let body = ip_packet.payload_mut();
        if proto == IpProtocol::Udp {
            udp::Repr {
                src_port: 1,
                dst_port: 2,
            }
            .emit(
                &mut udp::Packet::new_unchecked(body),
                &IpAddr::V4(src),
                &IpAddr::V4(dst),
                28,
                |p| p.fill(7),
                true,
            );
        } else {
            let quoted = [0x45u8; 28];
            icmpv4::Repr::DstUnreachable {
                reason: DstUnreachable::FragRequired,
                next_hop_mtu: 1280,
                data: &quoted,
            }
            .emit(&mut icmpv4::Packet::new_unchecked(body), true);
        }
        frames.push(buf);
    }
    let mut arp_frame = vec![0u8; 42];
    let mut frame = Frame::new_unchecked(&mut arp_frame[..]);
    ethernet::Repr {
        ethertype: EtherType::Arp,
        ..eth
    }
    .emit(&mut frame);
    arp::Repr {
        operation: arp::Operation::Request,
        source_hardware_addr: eth.src_addr,
        source_protocol_addr: src,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: dst,
    }
    .emit(&mut arp::Packet::new_unchecked(frame.payload_mut()));
    frames.push(arp_frame);
    frames
}

fn frame_bytes() -> impl Strategy<Value = Vec<u8>> {
    let v = valid_frames();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..120),
        mutated(v[0].clone()),
        mutated(v[1].clone()),
        mutated(v[2].clone()),
    ]
}

fn assert_same_bytes(a: &[u8], b: &[u8]) {
    assert_eq!(a, b);
}

// --- Exercising every accessor ------------------------------------------------------------

/// Read every field of every view that `new_checked` accepts, at every layer, and run
/// every parser, on checked and unchecked views. Panics are the failure.
fn exercise(bytes: &[u8]) {
    let any_v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let any_v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let _ = ethernet::Repr::parse(&Frame::new_unchecked(bytes));
    let _ = arp::Repr::parse(&arp::Packet::new_unchecked(bytes));
    let _ = ipv4::Repr::parse(&ipv4::Packet::new_unchecked(bytes), true);
    let _ = icmpv4::Repr::parse(&icmpv4::Packet::new_unchecked(bytes), true);
    let _ = udp::Repr::parse(&udp::Packet::new_unchecked(bytes), &any_v4, &any_v4, true);

    let mut layers = vec![bytes];
    if let Ok(frame) = Frame::new_checked(bytes) {
        let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype());
        let _ = ethernet::Repr::parse(&frame).unwrap();
        assert_same_bytes(frame.payload(), &bytes[ethernet::HEADER_LEN..]);
        layers.push(&bytes[ethernet::HEADER_LEN..]);
    }
    for &layer in &layers {
        if let Ok(p) = arp::Packet::new_checked(layer) {
            let _ = (
                p.hardware_type(),
                p.protocol_type(),
                p.hardware_len(),
                p.protocol_len(),
                p.operation(),
            );
            let _ = (p.source_hardware_addr(), p.source_protocol_addr());
            let _ = (p.target_hardware_addr(), p.target_protocol_addr());
            let _ = arp::Repr::parse(&p);
        }
        let mut transport = vec![layer];
        if let Ok(p) = ipv4::Packet::new_checked(layer) {
            let _ = (
                p.version(),
                p.header_len(),
                p.dscp(),
                p.ecn(),
                p.tos(),
                p.total_len(),
                p.ident(),
            );
            let _ = (
                p.reserved_flag(),
                p.dont_frag(),
                p.more_frags(),
                p.frag_offset(),
                p.ttl(),
                p.next_header(),
            );
            let _ = (
                p.checksum(),
                p.src_addr(),
                p.dst_addr(),
                p.options(),
                p.verify_checksum(),
            );
            let _ = ipv4::Repr::parse(&p, true);
            let _ = ipv4::Repr::parse(&p, false);
            let payload = &layer[p.header_len()..p.total_len() as usize];
            assert_same_bytes(p.payload(), payload);
            transport.push(payload);
        }
        for &t in &transport {
            if let Ok(p) = icmpv4::Packet::new_checked(t) {
                let _ = (
                    p.msg_type(),
                    p.msg_code(),
                    p.checksum(),
                    p.echo_ident(),
                    p.echo_seq_no(),
                );
                let _ = (p.next_hop_mtu(), p.data(), p.verify_checksum());
                let _ = icmpv4::Repr::parse(&p, true);
                let _ = icmpv4::Repr::parse(&p, false);
            }
            if let Ok(p) = udp::Packet::new_checked(t) {
                let _ = (
                    p.src_port(),
                    p.dst_port(),
                    p.len(),
                    p.checksum(),
                    p.payload(),
                );
                for (s, d) in [(&any_v4, &any_v4), (&any_v6, &any_v6), (&any_v4, &any_v6)] {
                    let _ = p.verify_checksum(s, d);
                    let _ = udp::Repr::parse(&p, s, d, true);
                    let _ = udp::Repr::parse(&p, s, d, false);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_panic_on_any_bytes(bytes in frame_bytes()) {
        exercise(&bytes);
    }

    #[test]
    fn no_panic_on_any_ip_packet(bytes in proptest::collection::vec(any::<u8>(), 0..100), first in 0x40u8..0x50) {
        // Random bytes that at least look like IPv4 (version 4, any IHL).
        let mut b = bytes;
        if !b.is_empty() {
            b[0] = first;
        }
        exercise(&b);
    }
}

// --- Identity: emit then parse ------------------------------------------------------------

proptest! {
    #[test]
    fn ethernet_round_trips(repr in ethernet_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(&payload);
        let frame = Frame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ethernet::Repr::parse(&frame), Ok(repr));
        prop_assert_eq!(frame.payload(), &payload[..]);
    }

    #[test]
    fn arp_round_trips(repr in arp_repr(), padding in 0usize..32) {
        let mut buf = vec![0u8; repr.buffer_len() + padding];
        repr.emit(&mut arp::Packet::new_unchecked(&mut buf[..]));
        prop_assert_eq!(arp::Repr::parse(&arp::Packet::new_checked(&buf[..]).unwrap()), Ok(repr));
    }

    #[test]
    fn ipv4_round_trips(repr in ipv4_repr(), padding in 0usize..8) {
        let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len + padding];
        let mut packet = ipv4::Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut packet, true);
        packet.payload_mut().fill(0xa5);
        let packet = ipv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(packet.verify_checksum());
        prop_assert_eq!(ipv4::Repr::parse(&packet, true), Ok(repr));
        prop_assert_eq!(packet.payload().len(), repr.payload_len);
    }

    #[test]
    fn icmpv4_round_trips(case in icmp_case()) {
        let repr = case.repr();
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut icmpv4::Packet::new_unchecked(&mut buf[..]), true);
        let packet = icmpv4::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(packet.verify_checksum());
        prop_assert_eq!(icmpv4::Repr::parse(&packet, true), Ok(repr));
    }

    #[test]
    fn udp_round_trips(
        src_port: u16,
        dst_port in 1u16..,
        (src, dst) in addr_pair(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let repr = udp::Repr { src_port, dst_port };
        let mut buf = vec![0u8; repr.header_len() + payload.len()];
        repr.emit(&mut udp::Packet::new_unchecked(&mut buf[..]), &src, &dst, payload.len(), |p| p.copy_from_slice(&payload), true);
        let packet = udp::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_ne!(packet.checksum(), 0, "a computed checksum is never sent as zero");
        prop_assert!(packet.verify_checksum(&src, &dst));
        prop_assert_eq!(udp::Repr::parse(&packet, &src, &dst, true), Ok(repr));
        prop_assert_eq!(packet.payload(), &payload[..]);
    }

    #[test]
    fn udp_single_bit_errors_are_caught(
        (src, dst) in addr_pair(),
        payload in proptest::collection::vec(any::<u8>(), 1..100),
        bit in any::<prop::sample::Index>(),
    ) {
        let repr = udp::Repr { src_port: 4000, dst_port: 53 };
        let mut buf = vec![0u8; 8 + payload.len()];
        repr.emit(&mut udp::Packet::new_unchecked(&mut buf[..]), &src, &dst, payload.len(), |p| p.copy_from_slice(&payload), true);
        // Flip one bit anywhere but the length field (which new_checked would catch first).
        let mut i = bit.index(buf.len() * 8);
        if (32..48).contains(&i) {
            i += 16;
        }
        buf[i / 8] ^= 1 << (i % 8);
        let packet = udp::Packet::new_checked(&buf[..]).unwrap();
        // A flip that zeroes the checksum field turns it into "no checksum" over IPv4.
        prop_assume!(packet.checksum() != 0);
        // One flipped bit moves the sum by 2^k, never a multiple of 0xffff: the sum can no
        // longer be all ones (nor its other zero, 0x0000).
        prop_assert!(!packet.verify_checksum(&src, &dst));
    }
}
