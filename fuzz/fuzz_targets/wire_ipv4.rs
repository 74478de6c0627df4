//! Any bytes as IPv4: no panic; a parsed header emits (checksum filled) and re-parses,
//! checksum verified, to the same repr.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ustack_wire::ipv4::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.header_len(),
        p.tos(),
        p.total_len(),
        p.ident(),
        p.dont_frag(),
        p.more_frags(),
    );
    let _ = (
        p.frag_offset(),
        p.ttl(),
        p.next_header(),
        p.src_addr(),
        p.dst_addr(),
        p.options(),
        p.payload(),
    );
    let _ = p.verify_checksum();
    let Ok(repr) = Repr::parse(&p, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len() + repr.payload_len];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), true);
    let again = Packet::new_checked(&out[..]).expect("emitted header is well-formed");
    assert_eq!(Repr::parse(&again, true), Ok(repr));
});
