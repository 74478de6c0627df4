//! Any bytes as an Ethernet frame: no panic; a parsed header emits back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ustack_wire::ethernet::{Frame, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::new_checked(data) else {
        return;
    };
    let _ = (
        frame.dst_addr(),
        frame.src_addr(),
        frame.ethertype(),
        frame.payload(),
    );
    let Ok(repr) = Repr::parse(&frame) else {
        return;
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Frame::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..repr.buffer_len()]);
});
