//! A clean link drops nothing: over the bench's shm link, pingpong at
//! 10,000 connections and c1m at CI scale finish with no drop of any reason on either
//! stack, no frame refused by either end of the link, and no retransmission timeout.
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
