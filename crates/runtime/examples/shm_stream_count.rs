//! One TCP stream over a shm link, both ends' shards polled in turn on one thread with a
//! virtual clock: no spinning, no sleeping, no other thread, so callgrind counts the same
//! instructions on every run (the stream bench's threads busy-poll and sleep as the machine
//! lets them). For the instructions per byte of the shm stream path, both ends:
//!
//! ```text
//! valgrind --tool=callgrind target/release/examples/shm_stream_count 16      # MiB
//! valgrind --tool=callgrind target/release/examples/shm_stream_count 16 copy # no lent slots
//! valgrind --tool=callgrind target/release/examples/shm_stream_count 16 ipv6 # over IPv6
//! valgrind --tool=callgrind target/release/examples/shm_stream_count 16 4m   # bench's buffers
//! ```
//!
//! The difference between two sizes divided by the bytes between them cancels start-up.
//! `copy` turns the sender's lent slots off (`ShmPort::set_tx_lend(false)`): segments are
//! built whole in the stack's frame buffer and copied into the slot, as before. `ipv6` runs
//! the stream between IPv6 addresses (as `ustack bench stream --ipv6`); `4m` gives both
//! ends the bench's 4 MiB send and receive buffers (the default: 16 KiB and 128 KiB,
//! growing as the stack tunes them). The bench's link:
//! 64 KiB frames in 16 slots, checksums skipped at both ends.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_runtime::shard::Shard;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Ipv6Cidr, Stack};

/// Host `n`'s stack (10.0.0.n, and 2001:db8::n for an IPv6 run, without duplicate address
/// detection so that the run starts at once).
fn stack(n: u8, ipv6: bool, bufs: bool, mtu: usize) -> Stack {
    let ip = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, n), 24);
    let mut c = Config::ethernet(EthernetAddress([2, 0, 0, 0, 0, n]), ip);
    if ipv6 {
        c = c.with_ipv6(Ipv6Cidr::new(ip6(n), 64));
        c.sysctl
            .set("net.ipv6.conf.default.accept_dad", 0)
            .expect("a known sysctl");
    }
    if bufs {
        for name in ["net.ipv4.tcp_wmem.default", "net.ipv4.tcp_rmem.default"] {
            c.sysctl.set(name, 4 << 20).expect("a known sysctl");
        }
    }
    c.seed = Some(u64::from(n));
    c.mtu = mtu;
    c.checksum_offload = true;
    Stack::new(c)
}

fn ip6(n: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(n))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(16);
    let lend = !args.iter().any(|a| a == "copy");
    let ipv6 = args.iter().any(|a| a == "ipv6");
    let bufs = args.iter().any(|a| a == "4m");
    let bytes = mib << 20;
    let config = ShmConfig {
        ring_size: 16,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    };
    let (mut a, mut b) = ShmLink::pair(&config).expect("a shm link");
    let (a, mut b) = (a.remove(0), b.remove(0));
    b.set_tx_lend(lend);
    let mut server = Shard::new(0, stack(1, ipv6, bufs, config.mtu), a);
    let mut client = Shard::new(0, stack(2, ipv6, bufs, config.mtu), b);
    client.hold_tx_slots();
    let to = if ipv6 {
        SocketAddr::V6(SocketAddrV6::new(ip6(1), 5001, 0, 0))
    } else {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5001))
    };
    let l = server.stack_mut().tcp_listen(to, 4).expect("listen");
    let mut now = Instant::from_secs(1);
    let c = client.stack_mut().tcp_connect(now, to).expect("connect");
    let data: Vec<u8> = (0..256 << 10).map(|i| (i % 251) as u8).collect();
    let mut buf = vec![0u8; 256 << 10];
    let (mut sent, mut got, mut s) = (0, 0, None);
    let mut rounds = 0u64;
    while got < bytes {
        rounds += 1;
        assert!(rounds < 50_000_000, "stuck at {got} bytes");
        now += Duration::from_micros(5);
        while sent < bytes {
            let n = (bytes - sent).min(data.len());
            match client.stack_mut().tcp_send(now, c, &data[..n]) {
                Ok(k @ 1..) => sent += k,
                _ => break,
            }
        }
        let budget = client.budget();
        client.poll_once(now, budget);
        let budget = server.budget();
        server.poll_once(now, budget);
        if s.is_none() {
            s = server.stack_mut().tcp_accept_addr(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = s {
            while let Ok(n @ 1..) = server.stack_mut().tcp_recv(now, s, &mut buf) {
                got += n;
            }
        }
    }
    println!(
        "{got} bytes in {rounds} rounds; sender: {} frames, {} written in lent slots; \
         receiver: {} frames, {} taken from the slot",
        client.stats().transmitted,
        client.stats().tx_lent,
        server.stats().processed,
        server.stats().rx_direct
    );
    let (written, in_place, copied, errors) = client.stack().held_slot_stats();
    println!(
        "held slots: {written} pieces written at send(), {in_place} segments sent in place \
         ({} posted), {copied} over pieces copied, {errors} refused",
        client.stats().tx_in_place
    );
}
