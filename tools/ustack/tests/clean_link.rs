//! A clean link drops nothing: over the bench's shm link, pingpong at
//! 10,000 connections and c1m at CI scale finish with no drop of any reason on either
//! stack, no frame refused by either end of the link, and no retransmission timeout.
//! And c1m at 200,000 connections holds each in at most 300 bytes of the server
//! process's RSS (issue #12's CI-scale check).
//! Bursts far larger than the link's rings and the stacks' transmit queues
//! (`net.core.txqueuelen`, 1000) are held back (the device's `tx_space`, then the
//! connections' send buffers) instead of dropped.
//!
//! The release build runs them, as a user runs the bench: at 30,000 connections a debug
//! build's loop is slow enough (a round of 300 frames takes milliseconds) that the last
//! of a burst of 30,000 messages waits in its stack's transmit queue, drained in quotas
//! of 64 between receives, longer than the 200 ms minimum RTO, which then fires and is
//! undone (`TCPLossUndo`).

mod common;

use std::process::Command;

use serde_json::Value;

/// `ustack bench ARGS --server ustack --json` (the release build): its one run.
fn bench_ustack(args: &[&str]) -> Value {
    let o = Command::new(common::release_ustack())
        .arg("bench")
        .args(args)
        .args(["--server", "ustack", "--json"])
        .output()
        .expect("run ustack");
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array");
    assert_eq!(runs.len(), 1, "{v}");
    runs[0].clone()
}

/// Nothing lost anywhere: no drop of any reason on either stack, no frame the link
/// refused at either end, no retransmission (so no RTO either).
fn assert_nothing_lost(r: &Value) {
    for side in ["counters", "client_counters"] {
        let c = &r[side];
        assert_eq!(c["Drops"], serde_json::json!({}), "{side}: {c}");
        assert_eq!(c["TcpExt"]["TCPTimeouts"], 0, "{side}: {c}");
        assert_eq!(c["Tcp"]["RetransSegs"], 0, "{side}: {c}");
        assert_eq!(c["Ip"]["OutDiscards"], 0, "{side}: {c}");
    }
    for end in ["server", "client"] {
        let link = &r["link_stats"][end];
        assert!(link["tx_frames"].as_u64().unwrap() > 0, "{end}: {r}");
        for refused in ["tx_full", "tx_too_big", "tx_stopped", "bad_desc"] {
            assert_eq!(link[refused], 0, "{end} {refused}: {link}");
        }
    }
}

/// Neither end of the link refused a frame (no slot, too big, stopped), sent a bad
/// descriptor, or cut one short.
fn assert_link_refused_nothing(r: &Value) {
    for end in ["server", "client"] {
        let link = &r["link_stats"][end];
        for refused in [
            "tx_full",
            "tx_too_big",
            "tx_stopped",
            "bad_desc",
            "rx_truncated",
        ] {
            assert_eq!(link[refused], 0, "{end} {refused}: {link}");
        }
    }
}

#[test]
fn pingpong_over_shm_at_10000_connections_drops_nothing_and_never_times_out() {
    let r = bench_ustack(&["pingpong", "--conns", "10000", "--duration", "200ms"]);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["conns"], 10_000, "{r}");
    // Whole lock-step rounds, at least one: every connection echoed each message.
    let trips = r["round_trips"].as_u64().unwrap();
    assert!(trips >= 10_000 && trips.is_multiple_of(10_000), "{r}");
    assert_eq!(r["counters"]["Tcp"]["PassiveOpens"], 10_000, "{r}");
    assert_eq!(r["client_counters"]["Tcp"]["ActiveOpens"], 10_000, "{r}");
    assert_nothing_lost(&r);
}

#[test]
fn c1m_at_30000_connections_drops_nothing_and_never_times_out() {
    let r = bench_ustack(&["c1m", "--conns", "30000", "--duration", "10ms"]);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["connections"], 30_000, "{r}");
    assert_eq!(r["round_trips"], 30_000, "{r}");
    assert_eq!(r["counters"]["Tcp"]["PassiveOpens"], 30_000, "{r}");
    assert_nothing_lost(&r);
}

/// Issue #12's CI-scale check: c1m at 200,000 connections, the ustack server in a process
/// of its own (`bench-peer ustack-c1m`), holds every connection in at most 300 bytes of
/// that process's RSS (272 to 283 on the 2-core VM when this was written: docs/c1m.md),
/// loses none (each held, then exchanges its message) and the link refuses no frame at
/// either end. Retransmissions are not counted here: on a loaded machine the 200,000
/// echoes of the exchange can queue past the minimum RTO (issue #12 item 4).
#[test]
fn c1m_at_200000_connections_costs_at_most_300_bytes_of_server_rss_each() {
    const N: u64 = 200_000;
    let r = bench_ustack(&["c1m", "--conns", "200000", "--duration", "10ms"]);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["connections"], N, "{r}");
    assert_eq!(
        r["round_trips"], N,
        "every connection exchanged its message: {r}"
    );
    assert_eq!(r["counters"]["Tcp"]["PassiveOpens"], N, "{r}");
    assert_eq!(r["client_counters"]["Tcp"]["ActiveOpens"], N, "{r}");
    for side in ["counters", "client_counters"] {
        assert_eq!(r[side]["Ip"]["OutDiscards"], 0, "{side}: {r}");
    }
    for end in ["server", "client"] {
        let link = &r["link_stats"][end];
        assert!(link["tx_frames"].as_u64().unwrap() >= N, "{end}: {r}");
    }
    assert_link_refused_nothing(&r);
    // The reading is the server's own process, holding every connection's record.
    let mem = &r["server_mem"];
    assert_ne!(
        mem["pid"].as_u64(),
        Some(u64::from(std::process::id())),
        "{mem}"
    );
    let record = ustack_stack::tcp::TCB_BYTES as u64;
    assert!(
        mem["server_rss_bytes"].as_u64().unwrap() >= N * record,
        "{mem}"
    );
    let per_conn = r["server_mem_per_conn_bytes"].as_f64().unwrap();
    assert!(
        per_conn <= 300.0,
        "the server's RSS grew {per_conn:.0} bytes per connection (at most 300): {mem}"
    );
}

/// Issue #12's SYN-flood scenario at CI scale: 100,000 connections held through 10 s of
/// spoofed SYNs at 20,000 a second (see [`common::check_syn_flood`]).
#[test]
fn c1m_at_100000_connections_through_a_10s_syn_flood_keeps_state_bounded() {
    let r = bench_ustack(&[
        "c1m",
        "--conns",
        "100000",
        "--duration",
        "10s",
        "--syn-flood",
        "20000",
    ]);
    common::check_syn_flood(&r, 100_000, 10.0);
}

/// Issue #12's memory-pressure scenario at CI scale: 100,000 connections each send 4 KiB
/// (400 MB asked) to a server that does not read, within a 64 MiB budget (`tcp_mem`
/// 4,096 / 6,144 / 8,192 pages, budget 16,384; see [`common::check_surge`]).
#[test]
fn c1m_at_100000_connections_surging_into_a_server_that_does_not_read_stays_in_budget() {
    let r = bench_ustack(&[
        "c1m",
        "--conns",
        "100000",
        "--duration",
        "10ms",
        "--send",
        "4096",
        "--server-sysctl",
        "net.ipv4.tcp_mem.low=4096",
        "--server-sysctl",
        "net.ipv4.tcp_mem.pressure=6144",
        "--server-sysctl",
        "net.ipv4.tcp_mem.high=8192",
        "--server-sysctl",
        "net.ipv4.tcp_mem.budget=16384",
    ]);
    common::check_surge(&r, 100_000, 16_384);
}

/// stream over shm moves its bytes in loopback-sized frames (the link's MTU is 65535, as
/// Linux's `lo`): exactly the bytes asked, every one checked, no frame refused by either
/// end of the link of 16 slots per direction, and in at most a tenth of the frames a
/// 1500-byte MTU would need (an MSS of 1448 bytes: one frame per 1448 bytes sent).
/// Retransmissions are not counted: on a loaded machine a tail loss probe fires now and
/// then while the server's thread waits for a core (seen with 64 slots as with 16: one
/// probe, the server counting the duplicate as `TCP_OLD_DATA`).
#[test]
fn stream_over_shm_moves_its_bytes_in_64k_frames_and_drops_nothing() {
    const N: u64 = 64 << 20;
    let r = bench_ustack(&["stream", "--bytes", "64M"]);
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["bytes"], N, "{r}");
    assert_link_refused_nothing(&r);
    let frames = r["link_stats"]["client"]["tx_frames"].as_u64().unwrap();
    let mss_sized = N / 1448;
    assert!(
        frames * 10 <= mss_sized,
        "the client sent {frames} frames for {N} bytes; 1448-byte segments would be \
         {mss_sized}: {r}"
    );
    // And most segments are the link's size: over 32 KiB on average (one run sent 1,079
    // frames for 64 MiB, 1,025 of 64 KiB's worth; the rest are the handshake, the FIN
    // and the pieces left at the ends of writes).
    assert!(frames <= N / 32_768, "{frames} frames: {r}");
}
