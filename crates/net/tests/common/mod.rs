//! What the ustack-net tests share.

use std::io::{Read, Write};

use ustack_net::TcpStream;

/// Echo what `s` reads back to it until EOF; the byte count.
pub fn echo_to_eof(mut s: TcpStream) -> usize {
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).expect("server read");
        if n == 0 {
            return total;
        }
        s.write_all(&buf[..n]).expect("server write");
        total += n;
    }
}
