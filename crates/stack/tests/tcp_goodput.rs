//! Issue #3: "A throughput/loss table from a seeded simulation kept as a snapshot, so a
//! change that slows recovery is seen."
//!
//! One bulk transfer per row over a `sim` link of 100 Mbit/s each way, 10 ms one-way
//! delay (20 ms RTT, so a 250 KB bandwidth-delay product) and a 256 KB drop-tail queue,
//! at several loss rates (both directions), each with three seeds. The simulation runs on
//! a virtual clock and seeded faults, so the table is exact and repeatable: any change in
//! it means TCP's behaviour changed. If the change is intended, regenerate the snapshot
//! with `USTACK_UPDATE_SNAPSHOTS=1 cargo test -p ustack-stack --test tcp_goodput` and
//! commit it with the change that caused it.

use core::net::SocketAddrV4;
use core::time::Duration;
use std::fmt::Write as _;

use ustack_dev::sim::{SimConfig, SimLinkConfig};
use ustack_obs::Counter;
use ustack_stack::tcp::State;
use ustack_testkit::{B_IP, Pair};

const RATE_BPS: u64 = 100_000_000;
const BYTES: usize = 4 << 20;

/// Transfer BYTES from A to B; returns (virtual seconds, retransmitted segments, RTO timeouts).
fn run(seed: u64, loss: f64, cc: u64) -> (f64, u64, u64) {
    let link = SimConfig {
        loss,
        delay: Duration::from_millis(10),
        rate_bps: Some(RATE_BPS),
        queue_limit_bytes: Some(256 * 1024),
        ..SimConfig::default()
    };
    let mut p = Pair::new(SimLinkConfig {
        seed,
        a_to_b: link.clone(),
        b_to_a: link,
        ..SimLinkConfig::default()
    });
    for s in [&mut p.a, &mut p.b] {
        s.set_sysctl("net.ipv4.tcp_congestion_control", cc).unwrap();
        s.set_sysctl("net.ipv4.tcp_wmem.default", 4 << 20).unwrap();
        s.set_sysctl("net.ipv4.tcp_rmem.default", 4 << 20).unwrap();
    }
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), 8).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))
            .unwrap();
    let mut b = None;
    let data: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();
    let (mut sent, mut got) = (0usize, 0usize);
    let mut buf = vec![0u8; 1 << 16];
    let mut start = None;
    let deadline = p.now + Duration::from_secs(3600);
    while got < BYTES {
        let now = p.now;
        if b.is_none() {
            b = p.b.tcp_accept(l).ok().map(|(h, _)| h);
        }
        if p.a.tcp_state(a) == Ok(State::Established) {
            start.get_or_insert(now);
            if sent < BYTES
                && let Ok(n) = p.a.tcp_send(now, a, &data[sent..])
            {
                sent += n;
            }
        }
        if let Some(bh) = b {
            while let Ok(n) = p.b.tcp_recv(now, bh, &mut buf) {
                if n == 0 {
                    break;
                }
                assert!(
                    buf[..n]
                        .iter()
                        .enumerate()
                        .all(|(k, &x)| x == ((got + k) % 251) as u8),
                    "intact"
                );
                got += n;
            }
        }
        p.settle();
        match p.next_event() {
            Some(t) if t <= deadline => p.now = t,
            _ => panic!("stalled at {got} of {BYTES} bytes (seed {seed}, loss {loss})"),
        }
    }
    let secs = (p.now - start.unwrap()).as_secs_f64();
    let m = p.a.mib();
    (
        secs,
        m.get(Counter::TcpRetransSegs),
        m.get(Counter::TcpExtTCPTimeouts),
    )
}

fn table() -> String {
    let mut out = String::new();
    writeln!(out, "# ustack TCP goodput over sim: {} Mbit/s each way, 20 ms RTT, 256 KB queue, {} MiB per run", RATE_BPS / 1_000_000, BYTES >> 20).unwrap();
    writeln!(
        out,
        "# cc     loss  seed  goodput_mbps  of_link  retrans_segs  rto_timeouts"
    )
    .unwrap();
    for (cc, name) in [(1, "cubic"), (0, "reno")] {
        for loss in [0.0, 0.01, 0.05] {
            for seed in 1..=3 {
                let (secs, retrans, rtos) = run(seed, loss, cc);
                let mbps = BYTES as f64 * 8.0 / secs / 1e6;
                writeln!(
                    out,
                    "{name:<6} {:>5.2} {seed:>5} {mbps:>13.2} {:>7.1}% {retrans:>13} {rtos:>13}",
                    loss,
                    100.0 * mbps * 1e6 / RATE_BPS as f64
                )
                .unwrap();
            }
        }
    }
    out
}

#[test]
fn goodput_table_matches_snapshot() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/snapshots/tcp_goodput.txt"
    );
    let now = table();
    if std::env::var_os("USTACK_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    let saved = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        saved == now,
        "TCP goodput changed; if intended, regenerate with USTACK_UPDATE_SNAPSHOTS=1.\n--- saved\n{saved}\n--- now\n{now}"
    );
}
