//! Any bytes as IPv6: no panic; a parsed header emits and re-parses to the same repr.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ustack_wire::ipv6::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.traffic_class(),
        p.flow_label(),
        p.payload_len(),
        p.next_header(),
        p.hop_limit(),
    );
    let _ = (p.src_addr(), p.dst_addr(), p.payload());
    let Ok(repr) = Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len() + repr.payload_len];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
});
