//! UDP echo: every datagram comes back whole to its sender.

mod common;

use std::net::UdpSocket;

use common::{Rng, TIMEOUT, start, wait_stats};
use ustack_baseline::Proto;

#[test]
fn udp_datagrams_come_back_whole_to_their_sender() {
    let server = start(Proto::UdpEcho, 2, None);
    let mut rng = Rng::new(3);
    let clients: Vec<UdpSocket> = (0..4)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s.connect(server.local_addr()).unwrap();
            s
        })
        .collect();
    let mut total = 0u64;
    let mut buf = vec![0u8; 65536];
    for i in 0..400 {
        let c = &clients[i % clients.len()];
        // Sizes from empty to beyond one Ethernet MTU (loopback carries them unfragmented).
        let n = if i % 50 == 0 { 0 } else { rng.range(1, 9000) };
        let data = rng.bytes(n);
        c.send(&data).unwrap();
        let got = c.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], &data[..], "datagram {i}");
        total += n as u64;
    }
    let s = wait_stats(&server, "400 datagrams echoed", |s| s.requests == 400);
    assert_eq!((s.bytes_in, s.bytes_out), (total, total));
    assert_eq!(s.connections_accepted, 0);
    server.stop().unwrap();
}
