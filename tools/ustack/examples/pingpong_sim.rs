//! pingpong's per-message cost at N connections, deterministically: the bench's shm
//! pingpong (the `ustack_apps` echo server, a client writing one message on every
//! connection, then reading every echo: lock-step rounds) with both runtimes on one
//! thread over a `sim` link on a virtual clock, so that callgrind and cachegrind count
//! the same work every run.
//!
//! ```text
//! cargo build --release -p ustack --example pingpong_sim
//! for r in 20 40; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$r \
//!     target/release/examples/pingpong_sim --conns 10000 --rounds $r; done
//! ```
//!
//! The difference of two runs' instructions over the difference in messages is the cost of
//! a message (both ends) at that many connections, set-up left out (docs/bench.md, "Flat
//! with connections"). `--cps`: new connections every round (each closed by the client
//! after its echo): the cost of a connection.
//!
//! With `--cps` the virtual clock moves `--round-ms` (default 100) at the start of every
//! round, so that TIME-WAIT records (60 s, Linux `TCP_TIMEWAIT_LEN`) expire 600 rounds
//! after they are made and the timer entries a connection leaves behind come due: past
//! 600 rounds as many records expire as are made and the tables stop growing (measure
//! with rounds 700 and 900). 100 ms is below every deadline the previous round's
//! connections (alive at the move, idle, every byte acknowledged) have armed (the
//! minimum RTO is 200 ms), so no live connection's timer runs: each entry comes up after
//! its connection is gone, as it does at the bench's rate (about 40 us a round).
//! `--round-ms 0`: the clock never moves (records and timer entries pile up).

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io::{self, ErrorKind};

use ustack_apps::{Protocol, Server};
use ustack_dev::sim::SimLinkConfig;
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Clock, Events, Interest, RuntimeBuilder, VirtualClock, sim_pair};
use ustack_stack::{EthernetAddress, Instant};

const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5001);
const MSG: usize = 64;

type Rt = ustack_runtime::runtime::Runtime<ustack_dev::sim::SimPort, VirtualClock>;

/// A runtime as the bench's (4 MiB buffers, checksums offloaded).
fn builder(ip: Ipv4Addr, mac: u8, seed: u64) -> RuntimeBuilder {
    RuntimeBuilder::new()
        .ipv4(ip, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, mac]))
        .seed(seed)
        .sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
        .sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
        .checksum_offload(true)
}

fn fill(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let (conns, rounds) = (value("--conns", 10) as usize, value("--rounds", 100));
    // --cps: every round on new connections, each closed by the client after its echo
    // (the server closes when it reads the end of stream), TIME-WAIT at the client.
    let cps = args.iter().any(|a| a == "--cps");
    let round_ms = value("--round-ms", 100);
    let (a, b) = sim_pair(SimLinkConfig::default());
    let clock = VirtualClock::new(Instant::ZERO);
    let mut srt = builder(*SERVER.ip(), 1, 1).build_with_clock(a, clock.participant())?;
    let mut crt =
        builder(Ipv4Addr::new(10, 0, 0, 2), 2, 2).build_with_clock(b, clock.participant())?;
    // Time moves only when neither end moved a frame (a timer is what is left to wait for).
    let mut moved = 0;
    let mut idle = |srt: &Rt, crt: &Rt| {
        let now = srt.shard_stats().processed + crt.shard_stats().processed;
        if now == moved {
            clock.advance(Duration::from_millis(1));
        }
        moved = now;
    };
    let mut server = Server::bind(&mut srt, Protocol::Echo, SERVER, None)?;
    let mut events = Events::with_capacity(1024);
    let mut streams = Vec::with_capacity(conns);
    for i in 0..conns {
        let s = TcpStream::connect(&mut crt, SERVER)?;
        s.set_nodelay(&mut crt, true)?;
        crt.register(&s, i as u64, Interest::READABLE, Mode::Edge)?;
        streams.push(s);
        if i == 0 {
            while server.connections() == 0 {
                crt.run_once(Some(Duration::ZERO))?;
                server.step(&mut srt, Some(Duration::ZERO))?;
                idle(&srt, &crt);
            }
        }
    }
    while server.connections() < conns {
        crt.run_once(Some(Duration::ZERO))?;
        server.step(&mut srt, Some(Duration::ZERO))?;
        idle(&srt, &crt);
    }
    let (mut msg, mut buf) = ([0u8; MSG], [0u8; 4096]);
    let mut got = vec![0usize; conns];
    let mut bad = 0u64;
    let mut next_token = conns as u64;
    for r in 0..rounds {
        let seq0 = r * conns as u64;
        if cps && r > 0 {
            // See the module docs.
            clock.advance(Duration::from_millis(round_ms));
            for s in streams.drain(..) {
                s.close(&mut crt)?;
            }
            for _ in 0..conns {
                let s = TcpStream::connect(&mut crt, SERVER)?;
                s.set_nodelay(&mut crt, true)?;
                crt.register(&s, next_token, Interest::READABLE, Mode::Edge)?;
                next_token += 1;
                streams.push(s);
            }
        }
        let first = next_token - conns as u64;
        for (i, s) in streams.iter().enumerate() {
            fill(&mut msg, seq0 + i as u64);
            got[i] = 0;
            // A new connection: written once established (a write before fails).
            while s.write(&mut crt, &msg).unwrap_or(0) != MSG {
                crt.run_once(Some(Duration::ZERO))?;
                server.step(&mut srt, Some(Duration::ZERO))?;
                srt.run_once(Some(Duration::ZERO))?;
                idle(&srt, &crt);
            }
        }
        let mut left = conns;
        while left > 0 {
            crt.run_once(Some(Duration::ZERO))?;
            server.step(&mut srt, Some(Duration::ZERO))?;
            srt.run_once(Some(Duration::ZERO))?;
            crt.poll(&mut events, Some(Duration::ZERO))?;
            idle(&srt, &crt);
            for e in &events {
                let Some(i) = e.token.checked_sub(first).map(|i| i as usize) else {
                    continue;
                };
                if i >= conns {
                    continue;
                }
                loop {
                    match streams[i].read(&mut crt, &mut buf) {
                        Ok(0) => panic!("closed"),
                        Ok(n) => {
                            fill(&mut msg, seq0 + i as u64);
                            bad += u64::from(buf[..n] != msg[got[i]..got[i] + n]);
                            got[i] += n;
                            if got[i] == MSG {
                                left -= 1;
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    println!(
        "{conns} conns x {rounds} rounds = {} messages, {bad} bad, {:?} virtual; server {:?}; \
         client {:?}",
        conns as u64 * rounds,
        clock.now(),
        srt.shard_stats(),
        crt.shard_stats()
    );
    // What the clock's moves did: TIME-WAIT records ended (and are left), and no
    // timeout or retransmission came of them (nothing is outstanding at a move).
    let mut timed_out = 0;
    for (end, rt) in [("server", &srt), ("client", &crt)] {
        let mib = rt.stack().mib();
        let t = [Counter::TcpExtTCPTimeouts, Counter::TcpRetransSegs].map(|c| mib.get(c));
        timed_out += t.iter().sum::<u64>();
        println!(
            "{end}: TIME-WAIT records ended {}, left {}; timeouts, retransmitted segments {t:?}",
            mib.get(Counter::TcpExtTW),
            rt.stack().tcp_resources().timewait
        );
    }
    if cps {
        assert_eq!(timed_out, 0, "a timeout or a retransmission in --cps");
    }
    Ok(())
}
