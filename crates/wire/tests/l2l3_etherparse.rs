//! Cross-check against etherparse 0.21, an independent implementation, on generated packets:
//! frames built with our `emit` are decoded by `etherparse::SlicedPacket::from_ethernet`
//! and every field compared; frames built with `etherparse::PacketBuilder` are parsed by us
//! and compared the same way. Checksums are compared with etherparse's own calculation.

use core::net::{IpAddr, Ipv4Addr};

use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, IcmpEchoHeader, Icmpv4Header, Icmpv4Type, IpDscp,
    IpEcn, IpHeaders, IpNumber, Ipv4Extensions, Ipv4Header, Ipv4Options, LinkSlice, NetSlice,
    PacketBuilder, SlicedPacket, TransportSlice, UdpHeader,
};
use proptest::prelude::*;
use ustack_wire::ethernet::{self, EtherType, Frame};
use ustack_wire::icmpv4::{self, DstUnreachable, TimeExceeded};
use ustack_wire::{EthernetAddress, IpProtocol, arp, ipv4, udp};

// --- Strategies -------------------------------------------------------------------------

fn mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn ip() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from)
}

/// An unfragmented IPv4 header (etherparse only hands fragments' payloads up raw).
#[derive(Debug, Clone)]
struct IpParams {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
    dscp: u8,
    ecn: u8,
    ident: u16,
    dont_frag: bool,
}

fn ip_params() -> impl Strategy<Value = IpParams> {
    (
        ip(),
        ip(),
        any::<u8>(),
        0u8..64,
        0u8..4,
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(src, dst, ttl, dscp, ecn, ident, dont_frag)| IpParams {
            src,
            dst,
            ttl,
            dscp,
            ecn,
            ident,
            dont_frag,
        })
}

impl IpParams {
    fn repr(&self, next_header: IpProtocol, payload_len: usize) -> ipv4::Repr {
        ipv4::Repr {
            src_addr: self.src,
            dst_addr: self.dst,
            next_header,
            payload_len,
            ttl: self.ttl,
            tos: self.dscp << 2 | self.ecn,
            ident: self.ident,
            dont_frag: self.dont_frag,
            more_frags: false,
            frag_offset: 0,
        }
    }

    fn etherparse(&self, options: &[u8]) -> Ipv4Header {
        let mut h = Ipv4Header::new(
            0,
            self.ttl,
            IpNumber::UDP,
            self.src.octets(),
            self.dst.octets(),
        )
        .unwrap();
        h.dscp = IpDscp::try_new(self.dscp).unwrap();
        h.ecn = IpEcn::try_new(self.ecn).unwrap();
        h.identification = self.ident;
        h.dont_fragment = self.dont_frag;
        h.options = Ipv4Options::try_from(options).unwrap();
        h
    }
}

/// IPv4 options: 0 to 40 bytes, a multiple of 4 (content is opaque to both parsers).
fn ip_options() -> impl Strategy<Value = Vec<u8>> {
    (0usize..=10).prop_flat_map(|words| proptest::collection::vec(any::<u8>(), words * 4))
}

/// What an ICMP message looks like to both libraries.
#[derive(Debug, Clone)]
enum Icmp {
    Echo {
        request: bool,
        ident: u16,
        seq_no: u16,
    },
    Unreach {
        code: u8,
        mtu: u16,
    },
    Exceeded {
        code: u8,
    },
}

fn icmp() -> impl Strategy<Value = (Icmp, Vec<u8>)> {
    let quoted =
        (5u8..16, proptest::collection::vec(any::<u8>(), 19..100)).prop_map(|(ihl, rest)| {
            let mut v = vec![0x40 | ihl];
            v.extend(rest);
            v
        });
    prop_oneof![
        (
            any::<bool>(),
            any::<u16>(),
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..100)
        )
            .prop_map(|(request, ident, seq_no, data)| (
                Icmp::Echo {
                    request,
                    ident,
                    seq_no
                },
                data
            )),
        (0u8..20, any::<u16>(), quoted.clone())
            .prop_map(|(code, mtu, data)| (Icmp::Unreach { code, mtu }, data)),
        (0u8..4, quoted).prop_map(|(code, data)| (Icmp::Exceeded { code }, data)),
    ]
}

impl Icmp {
    fn repr<'a>(&self, data: &'a [u8]) -> icmpv4::Repr<'a> {
        match *self {
            Icmp::Echo {
                request: true,
                ident,
                seq_no,
            } => icmpv4::Repr::EchoRequest {
                ident,
                seq_no,
                data,
            },
            Icmp::Echo {
                request: false,
                ident,
                seq_no,
            } => icmpv4::Repr::EchoReply {
                ident,
                seq_no,
                data,
            },
            Icmp::Unreach { code, mtu } => icmpv4::Repr::DstUnreachable {
                reason: DstUnreachable::from(code),
                next_hop_mtu: if code == 4 { mtu } else { 0 },
                data,
            },
            Icmp::Exceeded { code } => icmpv4::Repr::TimeExceeded {
                reason: TimeExceeded::from(code),
                data,
            },
        }
    }

    /// etherparse's view of the same message.
    fn etherparse(&self) -> Icmpv4Type {
        match *self {
            Icmp::Echo {
                request: true,
                ident,
                seq_no,
            } => Icmpv4Type::EchoRequest(IcmpEchoHeader {
                id: ident,
                seq: seq_no,
            }),
            Icmp::Echo {
                request: false,
                ident,
                seq_no,
            } => Icmpv4Type::EchoReply(IcmpEchoHeader {
                id: ident,
                seq: seq_no,
            }),
            Icmp::Unreach { code, mtu } => match DestUnreachableHeader::from_values(code, mtu) {
                Some(h) => Icmpv4Type::DestinationUnreachable(h),
                None => Icmpv4Type::Unknown {
                    type_u8: 3,
                    code_u8: code,
                    bytes5to8: [0; 4],
                },
            },
            Icmp::Exceeded { code } => match TimeExceededCode::from_u8(code) {
                Some(c) => Icmpv4Type::TimeExceeded(c),
                None => Icmpv4Type::Unknown {
                    type_u8: 11,
                    code_u8: code,
                    bytes5to8: [0; 4],
                },
            },
        }
    }
}

// --- Helpers ----------------------------------------------------------------------------

/// Emit Ethernet + IPv4 with our code; `fill` writes the IP payload.
fn emit_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    ip: &ipv4::Repr,
    fill: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let eth = ethernet::Repr {
        src_addr: EthernetAddress(src_mac),
        dst_addr: EthernetAddress(dst_mac),
        ethertype: EtherType::Ipv4,
    };
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
    let mut frame = Frame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = ipv4::Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet, true);
    fill(packet.payload_mut());
    buf
}

/// Compare etherparse's decoding of the link and IPv4 layers with what we emitted.
fn check_link_and_ip(
    sliced: &SlicedPacket<'_>,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    ip: &ipv4::Repr,
) -> Result<(), TestCaseError> {
    let Some(LinkSlice::Ethernet2(eth)) = &sliced.link else {
        return Err(TestCaseError::fail("no Ethernet"));
    };
    prop_assert_eq!((eth.source(), eth.destination()), (src_mac, dst_mac));
    prop_assert_eq!(eth.ether_type(), etherparse::EtherType::IPV4);
    let Some(NetSlice::Ipv4(v4)) = &sliced.net else {
        return Err(TestCaseError::fail("no IPv4"));
    };
    let h = v4.header();
    prop_assert_eq!(h.ihl(), 5);
    prop_assert_eq!(h.dcp().value(), ip.tos >> 2);
    prop_assert_eq!(h.ecn().value(), ip.tos & 3);
    prop_assert_eq!(h.total_len() as usize, 20 + ip.payload_len);
    prop_assert_eq!(h.identification(), ip.ident);
    prop_assert_eq!(h.dont_fragment(), ip.dont_frag);
    prop_assert_eq!(h.more_fragments(), ip.more_frags);
    prop_assert_eq!(h.fragments_offset().byte_offset(), ip.frag_offset);
    prop_assert_eq!(h.ttl(), ip.ttl);
    prop_assert_eq!(h.protocol().0, u8::from(ip.next_header));
    prop_assert_eq!(h.source_addr(), ip.src_addr);
    prop_assert_eq!(h.destination_addr(), ip.dst_addr);
    prop_assert_eq!(
        h.header_checksum(),
        h.to_header().calc_header_checksum(),
        "our IPv4 checksum"
    );
    Ok(())
}

// --- Ours -> etherparse -----------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn our_udp_decodes_in_etherparse(
        (src_mac, dst_mac) in (mac(), mac()),
        params in ip_params(),
        (src_port, dst_port) in (any::<u16>(), 1u16..),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let ip = params.repr(IpProtocol::Udp, 8 + payload.len());
        let (src, dst) = (IpAddr::V4(ip.src_addr), IpAddr::V4(ip.dst_addr));
        let frame = emit_frame(src_mac, dst_mac, &ip, |b| {
            udp::Repr { src_port, dst_port }.emit(&mut udp::Packet::new_unchecked(b), &src, &dst, payload.len(), |p| p.copy_from_slice(&payload), true)
        });
        let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
        check_link_and_ip(&sliced, src_mac, dst_mac, &ip)?;
        let Some(TransportSlice::Udp(u)) = &sliced.transport else { return Err(TestCaseError::fail("no UDP")) };
        prop_assert_eq!((u.source_port(), u.destination_port()), (src_port, dst_port));
        prop_assert_eq!(u.length() as usize, 8 + payload.len());
        prop_assert_eq!(u.payload(), &payload[..]);
        let expected = u.to_header().calc_checksum_ipv4_raw(ip.src_addr.octets(), ip.dst_addr.octets(), &payload).unwrap();
        prop_assert_eq!(u.checksum(), expected, "our UDP checksum");
    }

    #[test]
    fn our_icmp_decodes_in_etherparse(
        (src_mac, dst_mac) in (mac(), mac()),
        params in ip_params(),
        (msg, data) in icmp(),
    ) {
        let repr = msg.repr(&data);
        let ip = params.repr(IpProtocol::Icmp, repr.buffer_len());
        let frame = emit_frame(src_mac, dst_mac, &ip, |b| repr.emit(&mut icmpv4::Packet::new_unchecked(b), true));
        let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
        check_link_and_ip(&sliced, src_mac, dst_mac, &ip)?;
        let Some(TransportSlice::Icmpv4(i)) = &sliced.transport else { return Err(TestCaseError::fail("no ICMP")) };
        prop_assert_eq!(i.icmp_type(), msg.etherparse());
        prop_assert_eq!(i.payload(), &data[..]);
        prop_assert_eq!(i.checksum(), Icmpv4Header::with_checksum(msg.etherparse(), &data).checksum, "our ICMP checksum");
    }

    #[test]
    fn our_fragment_decodes_in_etherparse(
        (src_mac, dst_mac) in (mac(), mac()),
        params in ip_params(),
        more_frags: bool,
        offset_units in 1u16..8192,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let ip = ipv4::Repr { more_frags, frag_offset: offset_units * 8, dont_frag: false, ..params.repr(IpProtocol::Udp, payload.len()) };
        let frame = emit_frame(src_mac, dst_mac, &ip, |b| b.copy_from_slice(&payload));
        let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
        check_link_and_ip(&sliced, src_mac, dst_mac, &ip)?;
        let Some(NetSlice::Ipv4(v4)) = &sliced.net else { unreachable!() };
        prop_assert!(v4.is_payload_fragmented());
        prop_assert_eq!(v4.payload().payload, &payload[..]);
        prop_assert!(sliced.transport.is_none(), "a fragment is not decoded as UDP");
    }

    #[test]
    fn our_arp_decodes_in_etherparse(
        (src_mac, dst_mac) in (mac(), mac()),
        op in 1u16..3,
        (sha, spa, tha, tpa) in (mac(), ip(), mac(), ip()),
    ) {
        let repr = arp::Repr {
            operation: arp::Operation::from(op),
            source_hardware_addr: EthernetAddress(sha),
            source_protocol_addr: spa,
            target_hardware_addr: EthernetAddress(tha),
            target_protocol_addr: tpa,
        };
        let eth = ethernet::Repr { src_addr: EthernetAddress(src_mac), dst_addr: EthernetAddress(dst_mac), ethertype: EtherType::Arp };
        let mut frame = vec![0u8; 14 + repr.buffer_len()];
        let mut f = Frame::new_unchecked(&mut frame[..]);
        eth.emit(&mut f);
        repr.emit(&mut arp::Packet::new_unchecked(f.payload_mut()));

        let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(NetSlice::Arp(a)) = &sliced.net else { return Err(TestCaseError::fail("no ARP")) };
        let eth_ipv4 = a.to_packet().try_eth_ipv4().unwrap();
        prop_assert_eq!(eth_ipv4.operation, ArpOperation(op));
        prop_assert_eq!((eth_ipv4.sender_mac, eth_ipv4.sender_ipv4_addr()), (sha, spa));
        prop_assert_eq!((eth_ipv4.target_mac, eth_ipv4.target_ipv4_addr()), (tha, tpa));
    }
}

// --- etherparse -> ours -----------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn etherparse_udp_parses_in_ours(
        (src_mac, dst_mac) in (mac(), mac()),
        params in ip_params(),
        options in ip_options(),
        (src_port, dst_port) in (any::<u16>(), 1u16..),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(src_mac, dst_mac)
            .ip(IpHeaders::Ipv4(params.etherparse(&options), Ipv4Extensions::default()))
            .udp(src_port, dst_port)
            .write(&mut frame, &payload)
            .unwrap();

        let f = Frame::new_checked(&frame[..]).unwrap();
        prop_assert_eq!(
            ethernet::Repr::parse(&f),
            Ok(ethernet::Repr { src_addr: EthernetAddress(src_mac), dst_addr: EthernetAddress(dst_mac), ethertype: EtherType::Ipv4 })
        );
        let packet = ipv4::Packet::new_checked(f.payload()).unwrap();
        prop_assert_eq!(packet.options(), &options[..]);
        prop_assert_eq!(ipv4::Repr::parse(&packet, true), Ok(params.repr(IpProtocol::Udp, 8 + payload.len())));
        let (src, dst) = (IpAddr::V4(params.src), IpAddr::V4(params.dst));
        let u = udp::Packet::new_checked(packet.payload()).unwrap();
        prop_assert_eq!(udp::Repr::parse(&u, &src, &dst, true), Ok(udp::Repr { src_port, dst_port }));
        prop_assert_eq!(u.payload(), &payload[..]);
    }

    #[test]
    fn etherparse_icmp_parses_in_ours(
        (src_mac, dst_mac) in (mac(), mac()),
        params in ip_params(),
        (msg, data) in icmp(),
    ) {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(src_mac, dst_mac)
            .ip(IpHeaders::Ipv4(params.etherparse(&[]), Ipv4Extensions::default()))
            .icmpv4(msg.etherparse())
            .write(&mut frame, &data)
            .unwrap();

        let f = Frame::new_checked(&frame[..]).unwrap();
        let packet = ipv4::Packet::new_checked(f.payload()).unwrap();
        let expected = msg.repr(&data);
        prop_assert_eq!(ipv4::Repr::parse(&packet, true), Ok(params.repr(IpProtocol::Icmp, expected.buffer_len())));
        let i = icmpv4::Packet::new_checked(packet.payload()).unwrap();
        prop_assert_eq!(icmpv4::Repr::parse(&i, true), Ok(expected));
    }

    #[test]
    fn etherparse_arp_parses_in_ours(
        (src_mac, dst_mac) in (mac(), mac()),
        op in any::<u16>(),
        (sha, spa, tha, tpa) in (mac(), ip(), mac(), ip()),
    ) {
        let packet = ArpPacket::new(
            ArpHardwareId::ETHERNET,
            etherparse::EtherType::IPV4,
            ArpOperation(op),
            &sha,
            &spa.octets(),
            &tha,
            &tpa.octets(),
        )
        .unwrap();
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(src_mac, dst_mac).arp(packet).write(&mut frame).unwrap();

        let f = Frame::new_checked(&frame[..]).unwrap();
        prop_assert_eq!(f.ethertype(), EtherType::Arp);
        let a = arp::Packet::new_checked(f.payload()).unwrap();
        prop_assert_eq!(
            arp::Repr::parse(&a),
            Ok(arp::Repr {
                operation: arp::Operation::from(op),
                source_hardware_addr: EthernetAddress(sha),
                source_protocol_addr: spa,
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: tpa,
            })
        );
    }

    #[test]
    fn etherparse_udp_checksum_matches_ours(
        params in ip_params(),
        (src_port, dst_port) in (any::<u16>(), 1u16..),
        payload in proptest::collection::vec(any::<u8>(), 0..2000),
    ) {
        // The checksum alone, over longer payloads: etherparse's header vs. our fill_checksum.
        let theirs = UdpHeader::with_ipv4_checksum(src_port, dst_port, &params.etherparse(&[]), &payload).unwrap();
        let (src, dst) = (IpAddr::V4(params.src), IpAddr::V4(params.dst));
        let mut buf = vec![0u8; 8 + payload.len()];
        udp::Repr { src_port, dst_port }.emit(&mut udp::Packet::new_unchecked(&mut buf[..]), &src, &dst, payload.len(), |p| p.copy_from_slice(&payload), true);
        prop_assert_eq!(udp::Packet::new_checked(&buf[..]).unwrap().checksum(), theirs.checksum);
    }
}
