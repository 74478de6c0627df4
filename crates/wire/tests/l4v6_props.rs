//! Property tests for TCP, IPv6 and ICMPv6: emit then parse is the identity on valid
//! representations; parse is idempotent through emit; no input makes a parser panic; the
//! checksum catches every single-bit error.

use core::net::{IpAddr, Ipv6Addr};

use proptest::collection::vec;
use proptest::prelude::*;
use ustack_wire::tcp::{self, TcpOption};
use ustack_wire::{Error, IpProtocol, icmpv6, ipv6};

mod common;
use common::{ip_pair, tcp_fields};

fn emit_tcp(repr: &tcp::Repr, src: &IpAddr, dst: &IpAddr) -> Vec<u8> {
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(
        &mut tcp::Packet::new_unchecked(&mut buf[..]),
        src,
        dst,
        true,
    );
    buf
}

/// `repr` with the SACK blocks emit would drop removed.
fn as_emitted<'a>(repr: &tcp::Repr<'a>) -> tcp::Repr<'a> {
    let keep = repr.sack_blocks_emitted();
    let mut out = *repr;
    let mut present = repr.sack_ranges.into_iter().flatten();
    out.sack_ranges = [None; 4];
    for slot in out.sack_ranges.iter_mut().take(keep) {
        *slot = present.next();
    }
    out
}

/// Any one option, values raw.
fn tcp_option() -> impl Strategy<Value = (u8, Vec<u8>)> {
    // (kind, data) pairs; emitted as kind, len, data.
    prop_oneof![
        any::<u16>().prop_map(|m| (2u8, m.to_be_bytes().to_vec())),
        any::<u8>().prop_map(|s| (3u8, vec![s])),
        Just((4u8, vec![])),
        vec(any::<u8>(), 1..=4)
            .prop_flat_map(|n| vec(any::<u8>(), n.len() * 8).prop_map(|d| (5u8, d))),
        vec(any::<u8>(), 8).prop_map(|d| (8u8, d)),
        (prop_oneof![6u8..=7, 9u8..=255], vec(any::<u8>(), 0..6)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn tcp_emit_then_parse_is_identity(fields in tcp_fields(14, 300), (src, dst) in ip_pair()) {
        let repr = fields.repr();
        let bytes = emit_tcp(&repr, &src, &dst);
        prop_assert_eq!(bytes.len(), repr.buffer_len());
        prop_assert!(repr.header_len() <= 60 && repr.header_len().is_multiple_of(4));
        let packet = tcp::Packet::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(packet.header_len(), repr.header_len());
        prop_assert!(packet.verify_checksum(&src, &dst));
        let parsed = tcp::Repr::parse(&packet, &src, &dst, true).unwrap();
        prop_assert_eq!(parsed, as_emitted(&repr));
        if fields.sacks.len() == repr.sack_blocks_emitted() {
            prop_assert_eq!(parsed, repr);
        }
    }

    #[test]
    fn tcp_single_bit_errors_fail_the_checksum(fields in tcp_fields(14, 300), (src, dst) in ip_pair(),
                                               bit in any::<prop::sample::Index>()) {
        let repr = fields.repr();
        let mut bytes = emit_tcp(&repr, &src, &dst);
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        let packet = tcp::Packet::new_unchecked(&bytes[..]);
        prop_assert!(!packet.verify_checksum(&src, &dst));
        if packet.check_len().is_ok() {
            prop_assert_eq!(tcp::Repr::parse(&packet, &src, &dst, true).unwrap_err(), Error::Checksum);
        }
    }

    /// Options written in any order, with NOPs between, read back as written.
    #[test]
    fn tcp_options_any_order(options in vec(tcp_option(), 0..5), nops in vec(0usize..3, 5)) {
        let mut raw = Vec::new();
        for ((kind, data), n) in options.iter().zip(&nops) {
            raw.extend(std::iter::repeat_n(1u8, *n));
            raw.push(*kind);
            raw.push(2 + data.len() as u8);
            raw.extend_from_slice(data);
        }
        prop_assume!(raw.len() <= 40);
        let items: Vec<TcpOption> = tcp::TcpOptionsIter::new(&raw).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(items.len(), options.len());
        for (item, (kind, data)) in items.iter().zip(&options) {
            let mut buf = vec![0u8; item.buffer_len()];
            item.emit(&mut buf);
            let mut expected = vec![*kind, 2 + data.len() as u8];
            expected.extend_from_slice(data);
            prop_assert_eq!(buf, expected);
        }
    }

    /// Whatever parses, re-emitted, parses to the same thing (up to SACK blocks that our
    /// aligned layout has no room for).
    #[test]
    fn tcp_parse_emit_parse_is_stable(mut header in vec(any::<u8>(), 20),
                                      options in vec(tcp_option(), 0..5),
                                      payload in vec(any::<u8>(), 0..40),
                                      (src, dst) in ip_pair()) {
        let mut raw = Vec::new();
        for (kind, data) in &options {
            raw.push(*kind);
            raw.push(2 + data.len() as u8);
            raw.extend_from_slice(data);
        }
        prop_assume!(raw.len() <= 40);
        raw.resize(raw.len().div_ceil(4) * 4, 0);
        header[12] = (((20 + raw.len()) / 4) as u8) << 4;
        let mut bytes = header;
        bytes.extend_from_slice(&raw);
        bytes.extend_from_slice(&payload);
        tcp::Packet::new_unchecked(&mut bytes[..]).fill_checksum(&src, &dst);
        let packet = tcp::Packet::new_checked(&bytes[..]).unwrap();
        if let Ok(first) = tcp::Repr::parse(&packet, &src, &dst, true) {
            prop_assert!(first.window_scale.is_none_or(|s| s <= 14));
            prop_assert_ne!(first.max_seg_size, Some(0));
            let again = emit_tcp(&first, &src, &dst);
            let packet2 = tcp::Packet::new_checked(&again[..]).unwrap();
            let second = tcp::Repr::parse(&packet2, &src, &dst, true).unwrap();
            prop_assert_eq!(second, as_emitted(&first));
        } else {
            prop_assert!(packet.dst_port() == 0
                || (packet.syn() && (packet.fin() || packet.rst()))
                || packet.options_iter().any(|o| o.is_err()));
        }
    }

    #[test]
    fn tcp_no_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..100), (src, dst) in ip_pair(),
                                       verify in any::<bool>()) {
        let unchecked = tcp::Packet::new_unchecked(&bytes[..]);
        let _ = tcp::Repr::parse(&unchecked, &src, &dst, verify);
        if let Ok(p) = tcp::Packet::new_checked(&bytes[..]) {
            let _ = (p.src_port(), p.dst_port(), p.seq_number(), p.ack_number(), p.data_offset(),
                     p.header_len(), p.reserved(), p.flags(), p.window_len(), p.checksum(),
                     p.urgent_pointer(), p.options(), p.payload(), p.segment_len(),
                     p.verify_checksum(&src, &dst));
            for o in p.options_iter() {
                let _ = o;
            }
            if let Ok(r) = tcp::Repr::parse(&p, &src, &dst, verify) {
                prop_assert_eq!(r.payload, p.payload());
                let _ = (r.header_len(), r.buffer_len(), r.segment_len());
            }
        }
        // Single options from any offset.
        for start in 0..bytes.len() {
            if let Ok((o, rest)) = TcpOption::parse(&bytes[start..]) {
                prop_assert!(rest.len() < bytes.len() - start);
                let _ = o.buffer_len();
            }
        }
    }

    #[test]
    fn ipv6_emit_then_parse_is_identity(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
                                        next_header in any::<u8>(), payload_len in 1..=600usize,
                                        hop_limit in any::<u8>(), traffic_class in any::<u8>(),
                                        flow_label in 0..=0xf_ffffu32) {
        let repr = ipv6::Repr {
            src_addr: Ipv6Addr::from(src),
            dst_addr: Ipv6Addr::from(dst),
            next_header: IpProtocol::from(next_header),
            payload_len,
            hop_limit,
            traffic_class,
            flow_label,
        };
        let mut buf = vec![0u8; repr.buffer_len() + payload_len];
        repr.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..]));
        let packet = ipv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(packet.version(), 6);
        prop_assert_eq!(packet.payload().len(), payload_len);
        prop_assert_eq!(ipv6::Repr::parse(&packet).unwrap(), repr);
        // One byte short of the payload length: truncated.
        prop_assert_eq!(ipv6::Packet::new_checked(&buf[..buf.len() - 1]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn ipv6_no_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..120)) {
        let _ = ipv6::Repr::parse(&ipv6::Packet::new_unchecked(&bytes[..]));
        if let Ok(p) = ipv6::Packet::new_checked(&bytes[..]) {
            let _ = (p.version(), p.traffic_class(), p.dscp(), p.ecn(), p.flow_label(),
                     p.payload_len(), p.next_header(), p.hop_limit(), p.src_addr(), p.dst_addr(),
                     p.payload());
            if let Ok(r) = ipv6::Repr::parse(&p) {
                prop_assert_eq!(r.payload_len, p.payload().len());
            }
        }
    }

    #[test]
    fn icmpv6_emit_then_parse_is_identity(kind in 0..6u8, code in any::<u8>(), a in any::<u16>(),
                                          b in any::<u16>(), word in any::<u32>(),
                                          data in vec(any::<u8>(), 0..200),
                                          src in any::<[u8; 16]>(), dst in any::<[u8; 16]>()) {
        let repr = match kind {
            0 => icmpv6::Repr::EchoRequest { ident: a, seq_no: b, data: &data },
            1 => icmpv6::Repr::EchoReply { ident: a, seq_no: b, data: &data },
            2 => icmpv6::Repr::DstUnreachable { code, data: &data },
            3 => icmpv6::Repr::PacketTooBig { mtu: word, data: &data },
            4 => icmpv6::Repr::TimeExceeded { code, data: &data },
            _ => icmpv6::Repr::ParamProblem { code, pointer: word, data: &data },
        };
        let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut icmpv6::Packet::new_unchecked(&mut buf[..]), &src, &dst, true);
        let packet = icmpv6::Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(packet.verify_checksum(&src, &dst));
        prop_assert_eq!(icmpv6::Repr::parse(&packet, &src, &dst, true).unwrap(), repr);
    }

    #[test]
    fn icmpv6_no_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..64), src in any::<[u8; 16]>(),
                                          dst in any::<[u8; 16]>(), verify in any::<bool>()) {
        let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
        let unchecked = icmpv6::Packet::new_unchecked(&bytes[..]);
        let _ = icmpv6::Repr::parse(&unchecked, &src, &dst, verify);
        if let Ok(p) = icmpv6::Packet::new_checked(&bytes[..]) {
            let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident(), p.echo_seq_no(),
                     p.pkt_too_big_mtu(), p.param_problem_ptr(), p.data(), p.verify_checksum(&src, &dst));
            if let Ok(r) = icmpv6::Repr::parse(&p, &src, &dst, verify) {
                prop_assert_eq!(r.data(), p.data());
                prop_assert_eq!(r.buffer_len(), bytes.len());
            }
        }
    }
}
