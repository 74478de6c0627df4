//! TCP echo: integrity under many concurrent connections, partial writes, half-close.

mod common;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{Rng, assert_eof, connect, echo_round, start, wait_stats};
use ustack_baseline::Proto;

#[test]
fn two_hundred_concurrent_connections_get_every_byte_back() {
    const THREADS: usize = 10;
    const CONNS_PER_THREAD: usize = 20;
    const ROUNDS: usize = 5;
    let server = start(Proto::Echo, 2, None);
    let addr = server.local_addr();
    // All 200 connections are open before any of them sends.
    let barrier = Arc::new(Barrier::new(THREADS));
    let clients: Vec<_> = (0..THREADS)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut rng = Rng::new(t as u64 + 1);
                let mut conns: Vec<_> = (0..CONNS_PER_THREAD).map(|_| connect(addr)).collect();
                barrier.wait();
                let mut total = 0u64;
                for _ in 0..ROUNDS {
                    // Random-sized writes on every connection, then read each one back.
                    total += echo_round(&mut conns, &mut rng);
                }
                total
            })
        })
        .collect();
    let total: u64 = clients.into_iter().map(|h| h.join().unwrap()).sum();
    let s = wait_stats(
        &server,
        "all bytes counted and all connections closed",
        |s| s.bytes_in == total && s.bytes_out == total && s.connections_closed == 200,
    );
    assert_eq!(s.connections_accepted, 200);
    assert_eq!(s.requests, 0);
    server.stop().unwrap();
}

#[test]
fn a_slow_reader_gets_everything_after_partial_writes_and_half_close() {
    const TOTAL: usize = 16 * 1024 * 1024;
    let server = start(Proto::Echo, 1, None);
    let mut client = connect(server.local_addr());
    let mut writer = client.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut rng = Rng::new(99);
        let mut sent = 0;
        while sent < TOTAL {
            let n = rng.range(1, 256 * 1024).min(TOTAL - sent);
            let chunk: Vec<u8> = (sent..sent + n).map(|i| (i % 251) as u8).collect();
            writer.write_all(&chunk).unwrap();
            sent += n;
        }
        // Half-close: the server must still send back everything before closing.
        writer.shutdown(Shutdown::Write).unwrap();
    });
    // Not reading for a while fills the server's send buffer: its sends come back short or
    // with EAGAIN, and the rest waits for EPOLLOUT.
    std::thread::sleep(Duration::from_millis(300));
    let mut received = 0usize;
    let mut buf = vec![0u8; 100_000];
    loop {
        let n = client.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (k, &b) in buf[..n].iter().enumerate() {
            assert_eq!(b, ((received + k) % 251) as u8, "byte {}", received + k);
        }
        received += n;
    }
    sender.join().unwrap();
    assert_eq!(received, TOTAL);
    let s = wait_stats(&server, "the connection closed", |s| {
        s.connections_closed == 1
    });
    assert_eq!((s.bytes_in, s.bytes_out), (TOTAL as u64, TOTAL as u64));
    assert!(
        s.writes_blocked > 0,
        "the slow reader never blocked the server: {s:?}"
    );
    server.stop().unwrap();
}

#[test]
fn the_server_closes_after_the_client_does() {
    let server = start(Proto::Echo, 1, None);
    let mut c = connect(server.local_addr());
    c.write_all(b"ping").unwrap();
    let mut back = [0; 4];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
    c.shutdown(Shutdown::Write).unwrap();
    assert_eof(&mut c);
    wait_stats(&server, "one closed connection", |s| {
        s.connections_closed == 1
    });
    server.stop().unwrap();
}
