//! Any bytes as ICMPv4: no panic; a parsed message emits and re-parses to the same repr.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ustack_wire::icmpv4::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.msg_type(),
        p.msg_code(),
        p.echo_ident(),
        p.echo_seq_no(),
        p.next_hop_mtu(),
        p.data(),
    );
    let _ = p.verify_checksum();
    let Ok(repr) = Repr::parse(&p, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), true);
    let again = Packet::new_checked(&out[..]).expect("emitted message is well-formed");
    assert_eq!(Repr::parse(&again, true), Ok(repr));
});
