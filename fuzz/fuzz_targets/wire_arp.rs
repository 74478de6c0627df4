//! Any bytes as ARP: no panic; a parsed packet emits and re-parses to the same repr.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ustack_wire::arp::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.hardware_type(),
        p.protocol_type(),
        p.hardware_len(),
        p.protocol_len(),
        p.operation(),
    );
    let _ = (
        p.source_hardware_addr(),
        p.source_protocol_addr(),
        p.target_hardware_addr(),
        p.target_protocol_addr(),
    );
    let Ok(repr) = Repr::parse(&p) else { return };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(
        Repr::parse(&Packet::new_checked(&out[..]).unwrap()),
        Ok(repr)
    );
});
