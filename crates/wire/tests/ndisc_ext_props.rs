//! Property tests for the IPv6 extension headers and Neighbor Discovery messages: no input
//! makes a parser panic, every option yielded lies inside its header, and emit then parse
//! is the identity on valid representations.

use core::net::Ipv6Addr;

use proptest::collection::vec;
use proptest::prelude::*;
use ustack_wire::icmpv6::Packet;
use ustack_wire::ipv6ext::{ExtHeader, FragHeader, FragRepr};
use ustack_wire::ndisc::{NaFlags, Repr};
use ustack_wire::{EthernetAddress, IpProtocol};

fn unicast() -> impl Strategy<Value = Ipv6Addr> {
    any::<u128>().prop_map(|a| Ipv6Addr::from(a & !(0xff << 120)))
}

fn ndisc_repr() -> impl Strategy<Value = Repr> {
    let mac = proptest::option::of(any::<[u8; 6]>().prop_map(EthernetAddress));
    prop_oneof![
        (unicast(), mac.clone()).prop_map(|(target, source_lladdr)| Repr::Solicit {
            target,
            source_lladdr
        }),
        (any::<[bool; 3]>(), unicast(), mac).prop_map(|(f, target, target_lladdr)| {
            Repr::Advert {
                flags: NaFlags {
                    router: f[0],
                    solicited: f[1],
                    override_: f[2],
                },
                target,
                target_lladdr,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn extension_headers_never_panic_and_options_stay_inside(bytes in vec(any::<u8>(), 0..300)) {
        if let Ok(h) = ExtHeader::new_checked(&bytes[..]) {
            let len = h.header_len();
            prop_assert!(len <= bytes.len() && len % 8 == 0);
            let _ = (h.next_header(), h.routing_type(), h.segments_left());
            let mut errors = 0;
            for opt in h.options() {
                match opt {
                    Ok(o) => prop_assert!(o.offset + o.data.len() < len),
                    Err(_) => errors += 1,
                }
            }
            prop_assert!(errors <= 1, "an error ends the walk");
        }
        if let Ok(f) = FragHeader::new_checked(&bytes[..]) {
            let repr = FragRepr::parse(&f).unwrap();
            prop_assert_eq!(repr.offset % 8, 0);
        }
    }

    #[test]
    fn fragment_header_emit_then_parse(nh in any::<u8>(), off in any::<u16>(), more: bool, ident: u32) {
        let repr = FragRepr { next_header: IpProtocol::from(nh), offset: off & !7, more_frags: more, ident };
        let mut b = [0u8; 8];
        repr.emit(&mut b);
        prop_assert_eq!(FragRepr::parse(&FragHeader::new_checked(&b[..]).unwrap()).unwrap(), repr);
    }

    #[test]
    fn ndisc_never_panics(bytes in vec(any::<u8>(), 0..100)) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = Repr::parse(&p);
        }
    }

    #[test]
    fn ndisc_emit_then_parse_is_identity(repr in ndisc_repr(), src in unicast(), dst in unicast()) {
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(&mut b, &src, &dst);
        let p = Packet::new_checked(&b[..]).unwrap();
        prop_assert!(p.verify_checksum(&src, &dst));
        prop_assert_eq!(Repr::parse(&p).unwrap(), repr);
    }
}
