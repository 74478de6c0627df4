//! TCP discard: every byte read, none sent, all counted.

mod common;

use std::io::Write;
use std::net::Shutdown;

use common::{Rng, assert_eof, connect, start, wait_stats};
use ustack_baseline::Proto;

#[test]
fn discard_counts_every_byte_and_sends_none() {
    let server = start(Proto::Discard, 2, None);
    let mut rng = Rng::new(7);
    let mut conns: Vec<_> = (0..20).map(|_| connect(server.local_addr())).collect();
    let mut total = 0u64;
    for _ in 0..10 {
        for c in &mut conns {
            let n = rng.range(0, 100_000);
            c.write_all(&rng.bytes(n)).unwrap();
            total += n as u64;
        }
    }
    for c in &mut conns {
        c.shutdown(Shutdown::Write).unwrap();
        // Nothing comes back; the server closes once it has read everything.
        assert_eof(c);
    }
    let s = wait_stats(&server, "every byte counted", |s| {
        s.bytes_in == total && s.connections_closed == 20
    });
    assert_eq!(s.bytes_out, 0);
    assert_eq!(s.connections_accepted, 20);
    server.stop().unwrap();
}
