//! Golden bytes for Neighbor Discovery messages and IPv6 extension headers: parse them,
//! emit the same bytes, and cross-check with etherparse. The checksums in the arrays were
//! computed by a separate script (Python, RFC 4443 §2.3 pseudo-header), not by this crate.

use core::net::Ipv6Addr;

use etherparse::{Icmpv6Slice, Icmpv6Type, IpNumber, Ipv6FragmentHeader, Ipv6RawExtHeader};
use ustack_wire::icmpv6::Packet;
use ustack_wire::ipv6ext::{ExtHeader, FragHeader, FragRepr};
use ustack_wire::ndisc::{self, NaFlags, Repr};
use ustack_wire::{Error, EthernetAddress, IpProtocol};

const LL_A: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
const B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 2);
const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

/// NS from fe80::ff:fe00:1 to ff02::1:ff00:2 for 2001:db8:5::2, SLLA 02:00:00:00:00:01.
const NS: [u8; 32] = [
    0x87, 0x00, 0x4c, 0x5a, 0x00, 0x00, 0x00, 0x00, // type 135, code 0, checksum, reserved
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // target 2001:db8:5::2
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source link-layer address option
];

/// NA from 2001:db8:5::2 to fe80::ff:fe00:1, S and O set, TLLA 02:00:00:00:00:02.
const NA: [u8; 32] = [
    0x88, 0x00, 0xba, 0x9f, 0x60, 0x00, 0x00, 0x00, // type 136, flags S|O
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x05, 0x00, 0x00, // target 2001:db8:5::2
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, //
    0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // target link-layer address option
];

#[test]
fn neighbor_solicitation_golden() {
    let sn = ndisc::solicited_node(B);
    assert_eq!(sn, "ff02::1:ff00:2".parse::<Ipv6Addr>().unwrap());
    let p = Packet::new_checked(&NS[..]).unwrap();
    assert!(p.verify_checksum(&LL_A, &sn));
    let repr = Repr::parse(&p).unwrap();
    assert_eq!(
        repr,
        Repr::Solicit {
            target: B,
            source_lladdr: Some(MAC_A)
        }
    );
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out, &LL_A, &sn);
    assert_eq!(out, NS);
    // etherparse reads the same type and target, and agrees on the checksum.
    let ep = Icmpv6Slice::from_slice(&NS).unwrap();
    assert_eq!(ep.icmp_type(), Icmpv6Type::NeighborSolicitation);
    assert_eq!(&ep.payload()[..16], &B.octets());
    assert_eq!(
        ep.icmp_type()
            .calc_checksum(LL_A.octets(), sn.octets(), ep.payload())
            .unwrap(),
        u16::from_be_bytes([NS[2], NS[3]])
    );
}

#[test]
fn neighbor_advertisement_golden() {
    let p = Packet::new_checked(&NA[..]).unwrap();
    assert!(p.verify_checksum(&B, &LL_A));
    let repr = Repr::parse(&p).unwrap();
    let flags = NaFlags {
        router: false,
        solicited: true,
        override_: true,
    };
    assert_eq!(
        repr,
        Repr::Advert {
            flags,
            target: B,
            target_lladdr: Some(MAC_B)
        }
    );
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut out, &B, &LL_A);
    assert_eq!(out, NA);
    let ep = Icmpv6Slice::from_slice(&NA).unwrap();
    let Icmpv6Type::NeighborAdvertisement(h) = ep.icmp_type() else {
        panic!("etherparse reads {:?}", ep.icmp_type());
    };
    assert!(h.solicited && h.r#override && !h.router);
}

#[test]
fn ndisc_rejects_what_rfc_4861_rejects() {
    let parse = |b: &[u8]| Repr::parse(&Packet::new_checked(b).unwrap());
    let mut zero_len = NS;
    zero_len[25] = 0; // an option of length 0 (§4.6)
    assert_eq!(parse(&zero_len), Err(Error::Malformed));
    let mut code = NS;
    code[1] = 1; // code must be 0 (§7.1.1)
    assert_eq!(parse(&code), Err(Error::Malformed));
    let mut mcast = NS;
    mcast[8] = 0xff; // multicast target (§7.1.1)
    assert_eq!(parse(&mcast), Err(Error::Malformed));
    assert_eq!(parse(&NS[..20]), Err(Error::Truncated));
    assert_eq!(
        parse(&NS[..30]),
        Err(Error::Malformed),
        "option past the end"
    );
    // No option at all is fine (a unicast NS may leave it out).
    assert_eq!(
        parse(&NS[..24]),
        Ok(Repr::Solicit {
            target: B,
            source_lladdr: None
        })
    );
}

#[test]
fn addresses_from_the_mac() {
    // RFC 4291 Appendix A: the U/L bit inverted, ff:fe inserted.
    let mac = EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
    assert_eq!(
        ndisc::link_local_from_mac(mac),
        "fe80::5054:ff:fe12:3456".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(
        ndisc::multicast_mac("ff02::1:ff12:3456".parse().unwrap()),
        EthernetAddress([0x33, 0x33, 0xff, 0x12, 0x34, 0x56])
    );
}

/// A Destination Options header: next header UDP, PadN of 4, an unknown option 0x9e
/// (high bits 10: discard and send a parameter problem) of 0 bytes... as 8 bytes.
const DST_OPTS: [u8; 8] = [17, 0, 1, 2, 0, 0, 0x9e, 0];

#[test]
fn extension_header_options_golden() {
    let h = ExtHeader::new_checked(&DST_OPTS[..]).unwrap();
    assert_eq!(h.next_header(), IpProtocol::Udp);
    assert_eq!(h.header_len(), 8);
    let opts: Vec<_> = h.options().map(|o| o.unwrap()).collect();
    assert_eq!(opts.len(), 2);
    assert_eq!(
        (opts[0].kind, opts[0].data, opts[0].offset),
        (1, &[0u8, 0][..], 2)
    );
    assert_eq!(
        (opts[1].kind, opts[1].offset, opts[1].unknown_action()),
        (0x9e, 6, 2)
    );
    // etherparse reads the same chain link.
    let ep = Ipv6RawExtHeader::from_slice(&DST_OPTS).unwrap().0;
    assert_eq!(ep.next_header, IpNumber::UDP);
    assert_eq!(ep.header_len(), 8);
    // An option running past the header's end is an error, once.
    let bad = [17u8, 0, 1, 9, 0, 0, 0, 0];
    let h = ExtHeader::new_checked(&bad[..]).unwrap();
    let got: Vec<_> = h.options().collect();
    assert_eq!(got, vec![Err(Error::Malformed)]);
    // Hdr Ext Len 1 needs 16 bytes.
    assert_eq!(
        ExtHeader::new_checked(&[17u8, 1, 0, 0, 0, 0, 0, 0][..]),
        Err(Error::Truncated)
    );
}

/// A Fragment header: next header ICMPv6, offset 1448 (181 units), M set, ID 0x12345678.
const FRAG: [u8; 8] = [58, 0, 0x05, 0xa9, 0x12, 0x34, 0x56, 0x78];

#[test]
fn fragment_header_golden() {
    let repr = FragRepr::parse(&FragHeader::new_checked(&FRAG[..]).unwrap()).unwrap();
    assert_eq!(
        repr,
        FragRepr {
            next_header: IpProtocol::Icmpv6,
            offset: 1448,
            more_frags: true,
            ident: 0x1234_5678
        }
    );
    let mut out = [0u8; 8];
    repr.emit(&mut out);
    assert_eq!(out, FRAG);
    let ep = Ipv6FragmentHeader::from_slice(&FRAG).unwrap().0;
    assert_eq!(ep.fragment_offset.value(), 181);
    assert!(ep.more_fragments);
    assert_eq!(ep.identification, 0x1234_5678);
    assert_eq!(ep.next_header, IpNumber::IPV6_ICMP);
}

const LL_R: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// RS from fe80::ff:fe00:1 to ff02::2, SLLA 02:00:00:00:00:01 (RFC 4861 §4.1).
const RS: [u8; 16] = [
    0x85, 0x00, 0x7b, 0x2c, 0x00, 0x00, 0x00, 0x00, // type 133, code 0, checksum, reserved
    0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source link-layer address option
];

/// RA from fe80::1 to ff02::1 (RFC 4861 §4.2): hop limit 64, O set, router lifetime 1800 s,
/// SLLA 02:00:00:00:00:fe, MTU 1500, prefix 2001:db8:1::/64 with L and A, valid 86400 s,
/// preferred 14400 s.
const RA: [u8; 64] = [
    0x86, 0x00, 0x2a, 0x9b, 0x40, 0x40, 0x07, 0x08, // type 134, hop limit, M|O, lifetime
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // reachable time, retrans timer
    0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0xfe, // source link-layer address option
    0x05, 0x01, 0x00, 0x00, 0x00, 0x00, 0x05, 0xdc, // MTU option
    0x03, 0x04, 0x40, 0xc0, 0x00, 0x01, 0x51, 0x80, // prefix information: /64, L|A, valid
    0x00, 0x00, 0x38, 0x40, 0x00, 0x00, 0x00, 0x00, // preferred, reserved
    0x20, 0x01, 0x0d, 0xb8, 0x00, 0x01, 0x00, 0x00, // 2001:db8:1::
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
];

/// `out` is the golden message `want`, whose checksum over `src`/`dst` is right.
fn emitted_as(out: &[u8], want: &[u8], src: Ipv6Addr, dst: Ipv6Addr) {
    assert_eq!(out, want);
    assert!(
        Packet::new_checked(want)
            .unwrap()
            .verify_checksum(&src, &dst)
    );
}

#[test]
fn router_solicitation_golden() {
    let rs = ndisc::RouterSolicit {
        source_lladdr: Some(MAC_A),
    };
    let mut out = vec![0u8; rs.buffer_len()];
    rs.emit(&mut out, &LL_A, &ALL_ROUTERS);
    emitted_as(&out, &RS, LL_A, ALL_ROUTERS);
    let ep = Icmpv6Slice::from_slice(&RS).unwrap();
    assert_eq!(ep.icmp_type(), Icmpv6Type::RouterSolicitation);
    assert_eq!(
        ep.icmp_type()
            .calc_checksum(LL_A.octets(), ALL_ROUTERS.octets(), ep.payload())
            .unwrap(),
        u16::from_be_bytes([RS[2], RS[3]])
    );
    // Without the option (from the unspecified address, §4.1): 8 bytes.
    let bare = ndisc::RouterSolicit {
        source_lladdr: None,
    };
    assert_eq!(bare.buffer_len(), 8);
}

#[test]
fn router_advertisement_golden_and_etherparse() {
    let prefix = ndisc::PrefixInfo {
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: 86_400,
        preferred_lifetime: 14_400,
        prefix: Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0),
    };
    let list = [prefix];
    let ra = ndisc::RouterAdvert {
        cur_hop_limit: 64,
        managed: false,
        other: true,
        router_lifetime: 1800,
        reachable_time: 0,
        retrans_timer: 0,
        source_lladdr: Some(EthernetAddress([2, 0, 0, 0, 0, 0xfe])),
        mtu: Some(1500),
        prefixes: ndisc::Prefixes::List(&list),
    };
    let mut out = vec![0u8; ra.buffer_len()];
    ra.emit(&mut out, &LL_R, &ALL_NODES);
    emitted_as(&out, &RA, LL_R, ALL_NODES);
    let parsed = ndisc::RouterAdvert::parse(&RA).unwrap();
    assert_eq!(parsed.prefixes.iter().collect::<Vec<_>>(), list);
    assert_eq!(
        ndisc::RouterAdvert {
            prefixes: ra.prefixes,
            ..parsed
        },
        ra
    );

    // etherparse reads the same header, options and checksum.
    let ep = Icmpv6Slice::from_slice(&RA).unwrap();
    let Icmpv6Type::RouterAdvertisement(h) = ep.icmp_type() else {
        panic!("etherparse reads {:?}", ep.icmp_type());
    };
    assert_eq!(
        (
            h.cur_hop_limit,
            h.managed_address_config,
            h.other_config,
            h.router_lifetime
        ),
        (64, false, true, 1800)
    );
    assert_eq!(
        ep.icmp_type()
            .calc_checksum(LL_R.octets(), ALL_NODES.octets(), ep.payload())
            .unwrap(),
        u16::from_be_bytes([RA[2], RA[3]])
    );
    let payload =
        etherparse::icmpv6::RouterAdvertisementPayloadSlice::from_slice(ep.payload()).unwrap();
    let mut seen = (None, None, None);
    for o in payload.options_iterator() {
        match o.unwrap() {
            etherparse::icmpv6::NdpOptionSlice::SourceLinkLayerAddress(s) => {
                seen.0 = Some(s.link_layer_address().to_vec())
            }
            etherparse::icmpv6::NdpOptionSlice::Mtu(m) => seen.1 = Some(m.mtu()),
            etherparse::icmpv6::NdpOptionSlice::PrefixInformation(p) => {
                seen.2 = Some((
                    p.prefix_length(),
                    p.on_link(),
                    p.autonomous_address_configuration(),
                    p.valid_lifetime(),
                    p.preferred_lifetime(),
                    Ipv6Addr::from(p.prefix()),
                ))
            }
            other => panic!("unexpected option {other:?}"),
        }
    }
    assert_eq!(seen.0.as_deref(), Some(&[2u8, 0, 0, 0, 0, 0xfe][..]));
    assert_eq!(seen.1, Some(1500));
    assert_eq!(
        seen.2,
        Some((64, true, true, 86_400, 14_400, prefix.prefix))
    );
}

#[test]
fn router_advertisements_rfc_4861_rejects() {
    let parse = |b: &[u8]| ndisc::RouterAdvert::parse(b).map(|_| ());
    assert_eq!(parse(&RA[..15]), Err(Error::Truncated));
    let mut bad = RA;
    bad[1] = 1; // code
    assert_eq!(parse(&bad), Err(Error::Malformed));
    let mut bad = RA;
    bad[25] = 0; // MTU option of length 0
    assert_eq!(parse(&bad), Err(Error::Malformed));
    let mut bad = RA;
    bad[33] = 5; // prefix option running past the end
    assert_eq!(parse(&bad), Err(Error::Malformed));
    let mut bad = RA;
    bad[33] = 3; // prefix option of 24 bytes, then 8 bytes of an "option" of length 0
    assert_eq!(parse(&bad), Err(Error::Malformed));
    assert_eq!(parse(&RS), Err(Error::Unsupported));
    // An unknown option is skipped.
    let mut odd = RA.to_vec();
    odd.extend_from_slice(&[200, 1, 0, 0, 0, 0, 0, 0]);
    assert!(parse(&odd).is_ok());
}
