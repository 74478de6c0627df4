//! Any bytes as ICMPv6: no panic; a parsed message emits and re-parses, checksum
//! verified, to the same repr.
#![no_main]
use core::net::Ipv6Addr;
use libfuzzer_sys::fuzz_target;
use ustack_wire::icmpv6::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let (src, dst) = (
        Ipv6Addr::LOCALHOST,
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
    );
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.echo_ident(),
        p.echo_seq_no(),
        p.pkt_too_big_mtu(),
        p.param_problem_ptr(),
        p.data(),
    );
    let _ = p.verify_checksum(&src, &dst);
    let Ok(repr) = Repr::parse(&p, &src, &dst, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), &src, &dst, true);
    let again = Packet::new_checked(&out[..]).expect("emitted message is well-formed");
    assert_eq!(Repr::parse(&again, &src, &dst, true), Ok(repr));
});
