//! `ustack bench --linux-mode`: every scenario that Linux runs in several modes (udp-rr,
//! pingpong, cps) in each mode, short, verified, with the JSON that says which mode ran and
//! the server's own evidence of how it waited: a sleeping epoll server never polls empty,
//! a busy one does, an io_uring one reaps completions from its ring. A kernel without
//! io_uring skips those tests unless `USTACK_REQUIRE_IO_URING` is set.

use std::process::{Command, Output};

use serde_json::Value;

fn ustack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(args)
        .output()
        .expect("run ustack")
}

/// Run `scenario` on Linux alone in `mode` for 100 ms; its one JSON object (None: the
/// kernel has no io_uring and the test is skipped).
fn linux_run(scenario: &str, mode: &str) -> Option<Value> {
    let o = ustack(&[
        "bench",
        scenario,
        "--server",
        "linux",
        "--linux-mode",
        mode,
        "--duration",
        "100ms",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    if mode == "io_uring" && o.status.code() == Some(2) && err.contains("does not offer it") {
        assert!(
            std::env::var_os("USTACK_REQUIRE_IO_URING").is_none(),
            "USTACK_REQUIRE_IO_URING is set: {err}"
        );
        eprintln!("skipped: {err}");
        return None;
    }
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array");
    assert_eq!(runs.len(), 1, "one object for Linux: {v}");
    Some(runs[0].clone())
}

/// What every mode's object must hold: verified, the mode named at the top and in its
/// one `linux_modes` entry, a rate, latency, and the machine's CPU per message.
fn check(scenario: &str, mode: &str) -> Option<Value> {
    let r = linux_run(scenario, mode)?;
    assert_eq!(r["scenario"], scenario, "{r}");
    assert_eq!(r["server"], "linux", "{r}");
    assert_eq!(r["verified"], true, "{r}");
    assert_eq!(r["mode"], mode, "{r}");
    assert_eq!(r["linux_best_mode"], mode, "{r}");
    let modes = r["linux_modes"]
        .as_array()
        .expect("linux_modes is an array");
    assert_eq!(modes.len(), 1, "{r}");
    let m = &modes[0];
    assert_eq!(m["mode"], mode, "{r}");
    assert_eq!(m["available"], true, "{r}");
    assert_eq!(m["verified"], true, "{r}");
    let rate = if scenario == "cps" {
        "conns_per_s"
    } else {
        "msgs_per_s"
    };
    assert!(r[rate].as_f64().is_some_and(|x| x > 0.0), "{r}");
    assert_eq!(m[rate], r[rate], "the entry is the run: {r}");
    assert!(m["p50"].as_f64().is_some_and(|x| x > 0.0), "{r}");
    assert!(r["latency_of"].is_string(), "{r}");
    // /proc/stat counts in 10 ms ticks: a 100 ms run on a machine doing it reads some.
    let cpu = r["machine_cpu_s"]
        .as_f64()
        .expect("machine_cpu_s is a number");
    assert!(cpu > 0.0, "{r}");
    let per = r["cpu_per_msg_ns"]
        .as_f64()
        .expect("cpu_per_msg_ns is a number");
    let units = r[if scenario == "cps" {
        "connections"
    } else {
        "round_trips"
    }]
    .as_f64()
    .unwrap();
    assert!((per - cpu * 1e9 / units).abs() <= per * 1e-6, "{r}");
    // The run's own processes: the client (the bench) and the server.
    let own = r["process_cpu_per_msg_ns"]
        .as_f64()
        .expect("process_cpu_per_msg_ns");
    assert!(own > 0.0, "{r}");
    assert_eq!(
        m["process_cpu_per_msg_ns"], r["process_cpu_per_msg_ns"],
        "{r}"
    );
    let waits = &m["server_waits"];
    match mode {
        "epoll" => {
            assert_eq!(
                waits["empty_polls"], 0,
                "a sleeping server never polls empty: {r}"
            );
            assert!(waits["uring_completions"].is_null(), "{r}");
        }
        "busy" => assert!(
            waits["empty_polls"].as_u64().is_some_and(|n| n > 0),
            "a spinning server polls empty between messages: {r}"
        ),
        _ => {
            let n = waits["uring_completions"]
                .as_u64()
                .expect("uring_completions");
            // A receive and a send completion for each message at least.
            let msgs = r[if scenario == "cps" {
                "connections"
            } else {
                "round_trips"
            }]
            .as_u64()
            .unwrap();
            assert!(n >= 2 * msgs, "{n} completions for {msgs} messages: {r}");
            assert!(waits["empty_polls"].is_null(), "{r}");
        }
    }
    Some(r)
}

#[test]
fn udp_rr_epoll() {
    check("udp-rr", "epoll");
}

#[test]
fn udp_rr_busy() {
    check("udp-rr", "busy");
}

#[test]
fn udp_rr_io_uring() {
    check("udp-rr", "io_uring");
}

#[test]
fn pingpong_epoll() {
    check("pingpong", "epoll");
}

#[test]
fn pingpong_busy() {
    check("pingpong", "busy");
}

#[test]
fn pingpong_io_uring() {
    check("pingpong", "io_uring");
}

#[test]
fn cps_epoll() {
    let r = check("cps", "epoll");
    // The server closes first: its side holds TIME-WAIT.
    assert!(r.unwrap()["server_time_wait"].as_u64().is_some());
}

#[test]
fn cps_busy() {
    check("cps", "busy");
}

#[test]
fn cps_io_uring() {
    check("cps", "io_uring");
}

/// All modes by default: every one in `linux_modes`, the top-level figures the best's,
/// and the table naming each mode and the mode each ratio is against.
#[test]
fn all_modes_run_by_default_and_the_ratio_is_against_the_best() {
    let o = ustack(&["bench", "pingpong", "--duration", "150ms", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v.as_array().unwrap();
    let servers: Vec<&str> = runs.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["ustack", "linux"], "one object per server");
    let (u, l) = (&runs[0], &runs[1]);
    assert_eq!(u["mode"], "adaptive", "{u}");
    assert!(u["linux_modes"].is_null(), "{u}");
    assert!(u["cpu_per_msg_ns"].as_f64().is_some_and(|x| x > 0.0), "{u}");
    assert!(
        u["process_cpu_per_msg_ns"]
            .as_f64()
            .is_some_and(|x| x > 0.0),
        "{u}"
    );
    let modes = l["linux_modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["epoll", "busy", "io_uring"], "{l}");
    let best = modes
        .iter()
        .filter(|m| m["available"] == true)
        .max_by(|a, b| {
            a["msgs_per_s"]
                .as_f64()
                .partial_cmp(&b["msgs_per_s"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(l["linux_best_mode"], best["mode"], "{l}");
    assert_eq!(l["mode"], best["mode"], "{l}");
    assert_eq!(l["msgs_per_s"], best["msgs_per_s"], "{l}");

    let o = ustack(&["bench", "pingpong", "--duration", "150ms"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    for mode in ["epoll", "busy"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("pingpong  linux   loopback  ") && l.contains(mode)),
            "{out}"
        );
    }
    let ratio = out
        .lines()
        .find(|l| l.starts_with("pingpong: ustack/linux "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(ratio.contains("x p50 round latency"), "{ratio}");
    assert!(ratio.contains("the best of"), "{ratio}");
    assert!(ratio.contains("against each: epoll "), "{ratio}");
}

/// `--api tokio`: pingpong on tokio on both servers (ustack through ustack-tokio's
/// LocalStack over shm, Linux through tokio::net over loopback), 10 connections for
/// 200 ms: both verified, named `"api": "tokio"` and `"mode": "tokio"`, with round trips,
/// latency and the bench process's CPU per message. Other scenarios are refused as usage.
#[test]
fn pingpong_runs_on_tokio_on_both_servers() {
    let o = ustack(&[
        "bench",
        "pingpong",
        "--api",
        "tokio",
        "--duration",
        "200ms",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array");
    assert_eq!(runs.len(), 2, "ustack and linux: {v}");
    for (r, server, link) in [(&runs[0], "ustack", "shm"), (&runs[1], "linux", "loopback")] {
        assert_eq!(r["server"], server, "{r}");
        assert_eq!(r["link"], link, "{r}");
        assert_eq!(r["api"], "tokio", "{r}");
        assert_eq!(r["mode"], "tokio", "{r}");
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["conns"], 10, "{r}");
        assert!(r["round_trips"].as_u64().is_some_and(|n| n >= 10), "{r}");
        assert!(
            r["latency_us"]["p50"].as_f64().is_some_and(|x| x > 0.0),
            "{r}"
        );
        assert!(r["process_cpu_per_msg_ns"].as_f64().is_some(), "{r}");
    }
    let o = ustack(&["bench", "udp-rr", "--api", "tokio", "--duration", "100ms"]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("only pingpong and c1m run on tokio"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
