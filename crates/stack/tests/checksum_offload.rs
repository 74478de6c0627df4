//! `Config::checksum_offload`: two stacks that both skip TCP and UDP checksums (a shm link
//! between two ustack processes, as Linux's loopback skips them) exchange data with zero
//! checksums on the wire; a stack that checks them drops such segments as corrupt, so
//! the setting is for both ends of a trusted link only.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_obs::DropReason;
use ustack_stack::{Config, Ipv4Cidr};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC, Pair, pattern};

fn pair(a_offload: bool, b_offload: bool) -> Pair {
    let mut a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24));
    let mut b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24));
    (a.seed, b.seed) = (Some(1), Some(2));
    a.checksum_offload = a_offload;
    b.checksum_offload = b_offload;
    Pair::with_configs(SimLinkConfig::default(), a, b)
}

/// A sends `data` to B over TCP; returns what B read.
fn transfer(p: &mut Pair, data: &[u8]) -> Vec<u8> {
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let c = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut sent = 0;
    let mut got = Vec::new();
    let mut server = None;
    let mut buf = vec![0u8; 65536];
    p.run_until_cond(Duration::from_secs(30), |p| {
        if sent < data.len()
            && let Ok(n) = p.a.tcp_send(p.now, c, &data[sent..])
        {
            sent += n;
        }
        if server.is_none() {
            server = p.b.tcp_accept(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = server {
            while let Ok(n @ 1..) = p.b.tcp_recv(p.now, s, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        got.len() == data.len()
    });
    got
}

#[test]
fn both_ends_offloaded_exchange_data_with_zero_checksums() {
    let mut p = pair(true, true);
    let data = pattern(256 * 1024, 3);
    assert_eq!(transfer(&mut p, &data), data);
    // UDP too: a zero UDP checksum is "none" (RFC 768) for every IPv4 receiver.
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let ub = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    p.a.udp_send_to(p.now, ua, b"query", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.settle();
    let mut buf = [0u8; 64];
    assert_eq!(p.b.udp_recv_from(ub, &mut buf).unwrap().0, 5);
    for side in [&p.a, &p.b] {
        assert_eq!(side.mib().drops(DropReason::TcpCsum), 0);
    }
}

#[test]
fn a_checking_receiver_drops_what_an_offloaded_sender_sends() {
    // A skips checksums, B checks them: A's SYN has a zero checksum and B drops it as
    // corrupt, every retransmission too; nothing is ever established.
    let mut p = pair(true, false);
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.run_for(Duration::from_secs(5));
    assert!(p.b.tcp_accept(l).is_err());
    assert!(
        p.b.mib().drops(DropReason::TcpCsum) >= 2,
        "the SYN and a retransmission"
    );
}
