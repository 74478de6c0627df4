//! stop() releases everything: threads joined, connections, listening sockets, epoll instances
//! and eventfds closed. The only test in its binary, so that no other test opens descriptors
//! while this one counts them.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use common::{TIMEOUT, connect, start, wait_stats};
use ustack_baseline::Proto;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn stop_releases_every_descriptor_and_thread() {
    let fds_before = open_fds();
    let threads_before = threads();
    for proto in [Proto::Echo, Proto::Discard, Proto::Http] {
        let server = start(proto, 3, None);
        let addr = server.local_addr();
        assert!(threads() >= threads_before + 3);
        // Connections still open when the server stops: the server's ends must close too.
        let mut conns: Vec<_> = (0..20).map(|_| connect(addr)).collect();
        if proto == Proto::Echo {
            for c in &mut conns {
                c.write_all(b"x").unwrap();
                let mut b = [0];
                c.read_exact(&mut b).unwrap();
            }
        }
        wait_stats(&server, "20 connections", |s| s.connections_accepted == 20);
        let t = Instant::now();
        server.stop().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "stop took {:?}",
            t.elapsed()
        );
        for c in &mut conns {
            c.set_read_timeout(Some(TIMEOUT)).unwrap();
            let mut b = [0u8; 16];
            // EOF or reset: either way the server's socket is gone.
            if let Ok(n) = c.read(&mut b) {
                assert_eq!(n, 0, "{proto}: data after stop");
            }
        }
        drop(conns);
        // The port is free again: no listening socket survived.
        drop(TcpListener::bind(addr).expect("the port is free after stop"));
    }
    {
        let server = start(Proto::UdpEcho, 2, None);
        let addr = server.local_addr();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(TIMEOUT)).unwrap();
        c.send_to(b"hi", addr).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(c.recv(&mut b).unwrap(), 2);
        server.stop().unwrap();
        drop(UdpSocket::bind(addr).expect("the UDP port is free after stop"));
    }
    {
        // Dropping without stop() releases everything too.
        let server = start(Proto::Http, 2, None);
        let _c = connect(server.local_addr());
        drop(server);
    }
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
    assert_eq!(threads(), threads_before, "threads left running");
}
