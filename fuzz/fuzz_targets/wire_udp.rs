//! Any bytes as UDP over IPv4 and IPv6: no panic; a parsed header emits and re-parses,
//! checksum verified, to the same repr.
#![no_main]
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use libfuzzer_sys::fuzz_target;
use ustack_wire::udp::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let v4: (IpAddr, IpAddr) = (
        Ipv4Addr::new(192, 0, 2, 1).into(),
        Ipv4Addr::new(192, 0, 2, 2).into(),
    );
    let v6: (IpAddr, IpAddr) = (
        Ipv6Addr::LOCALHOST.into(),
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(),
    );
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.len(),
        p.checksum(),
        p.payload(),
    );
    for (src, dst) in [v4, v6] {
        let _ = p.verify_checksum(&src, &dst);
        let Ok(repr) = Repr::parse(&p, &src, &dst, false) else {
            continue;
        };
        let payload = p.payload();
        let mut out = vec![0u8; 8 + payload.len()];
        repr.emit(
            &mut Packet::new_unchecked(&mut out[..]),
            &src,
            &dst,
            payload.len(),
            |b| b.copy_from_slice(payload),
            true,
        );
        let again = Packet::new_checked(&out[..]).expect("emitted datagram is well-formed");
        assert_eq!(Repr::parse(&again, &src, &dst, true), Ok(repr));
        assert_eq!(again.payload(), payload);
    }
});
