//! The built-in profiler: `ustack bench --profile` (its stages add up to the server's
//! measured CPU time per message) and `ustack profile on|off|show` against a running
//! `ustack serve` over its control socket.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::process::{Command, Output};

use serde_json::Value;
use ustack_apps::{Load, Protocol};

mod common;
use common::spawn_serve;

/// Every stage a profile names, in its order ("descheduled" follows when the CPU clock
/// was read).
const STAGES: [&str; 12] = [
    "device_rx",
    "l2_l3",
    "demux",
    "tcp_input",
    "socket_queue",
    "application",
    "tcp_output",
    "device_tx",
    "timers",
    "idle_poll",
    "other",
    "sleep",
];

/// The stages a request-response exchange must pass through (nonzero time in each): the
/// first eight.
const ON_THE_PATH: usize = 8;

fn ok(o: Output) -> Vec<u8> {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

fn stage_ns(p: &Value) -> Vec<(String, f64)> {
    p["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| {
            (
                s["stage"].as_str().unwrap().to_owned(),
                s["ns"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn check_shape(p: &Value) -> Vec<(String, f64)> {
    let stages = stage_ns(p);
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..STAGES.len()], STAGES, "{p:#}");
    for (name, ns) in &stages {
        if name == "descheduled" {
            assert!(*ns <= 0.0, "descheduled is taken off the stages: {p:#}");
        } else {
            assert!(*ns >= 0.0, "{name}: {ns}");
        }
    }
    for name in &STAGES[..ON_THE_PATH] {
        let ns = stages.iter().find(|(n, _)| n == name).unwrap().1;
        assert!(
            ns > 0.0,
            "{name} took no time: the stage is not timed\n{p:#}"
        );
    }
    stages
}

#[test]
fn bench_profile_stages_add_up_to_the_measured_cpu_per_message() {
    // Every loop iteration sampled: the check is of the accounting (every nanosecond of
    // the loop in some stage), not of a sample's luck.
    let o = Command::new("timeout")
        .args(["120", env!("CARGO_BIN_EXE_ustack")])
        .args([
            "bench",
            "pingpong",
            "--server",
            "ustack",
            "--duration",
            "300ms",
        ])
        .args(["--profile", "--profile-every", "1", "--json"])
        .output()
        .expect("run ustack bench");
    let v: Value = serde_json::from_slice(&ok(o)).expect("one JSON document");
    let run = &v[0];
    assert_eq!(run["verified"], true);
    let p = &run["profile"];
    assert_eq!(p["unit"], "message");
    let stages = check_shape(p);
    let cpu: f64 = stages
        .iter()
        .filter(|(n, _)| n != "sleep")
        .map(|(_, ns)| ns)
        .sum();
    assert!((cpu - p["cpu_ns"].as_f64().unwrap()).abs() < 1.0, "{p:#}");
    let measured = p["measured_cpu_ns"]
        .as_f64()
        .expect("the server's CPU per message");
    let off = (cpu - measured).abs() / measured;
    assert!(
        off <= 0.10,
        "the stages add up to {cpu:.0} ns/message, the server measured {measured:.0} \
         ({:.1}% off)\n{}",
        off * 100.0,
        p["table"].as_str().unwrap()
    );
    assert!(
        p["folded"]
            .as_str()
            .unwrap()
            .contains("loop;receive;tcp_input ")
    );
}

#[test]
fn profile_on_show_off_over_the_control_socket() {
    let mut served = spawn_serve(&["echo", "--link", "shm", "--duration", "60s"]);
    let mut rt = served.attach(1);
    let show = |served: &common::Served| -> Value {
        serde_json::from_slice(&ok(served.tool(&["profile", "show", "--json"]))).unwrap()
    };
    // Off to begin with: nothing sampled, and the table says so.
    let before = show(&served);
    assert_eq!(before["enabled"], false);
    assert_eq!(before["sampled"], 0);
    let text = String::from_utf8(ok(served.tool(&["profile"]))).unwrap();
    assert!(text.contains("nothing sampled"), "{text}");

    let on = String::from_utf8(ok(served.tool(&["profile", "on"]))).unwrap();
    assert_eq!(on.trim(), "profile: on");
    let addr = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 80);
    let mut load = Load::start(&mut rt, Protocol::Echo, addr, 4, u64::MAX).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let sampled = loop {
        for _ in 0..50 {
            load.step(&mut rt, Some(Duration::from_millis(2)))
                .expect("every echo verified");
        }
        let v = show(&served);
        if v["packets"].as_u64().unwrap_or(0) > 200 {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing sampled: {v:#}"
        );
    };
    assert_eq!(sampled["enabled"], true);
    assert_eq!(sampled["unit"], "packet");
    check_shape(&sampled);
    assert!(sampled["cpu_ns"].as_f64().unwrap() > 0.0);
    let text = String::from_utf8(ok(served.tool(&["profile", "show"]))).unwrap();
    assert!(
        text.contains("tcp_input") && text.contains("total (CPU)"),
        "{text}"
    );

    // Off: what was sampled stays, and no more is.
    let off = String::from_utf8(ok(served.tool(&["profile", "off"]))).unwrap();
    assert_eq!(off.trim(), "profile: off");
    let a = show(&served);
    for _ in 0..100 {
        load.step(&mut rt, Some(Duration::from_millis(2)))
            .expect("every echo verified");
    }
    let b = show(&served);
    assert_eq!(a["sampled"], b["sampled"]);
    assert_eq!(b["enabled"], false);
    assert!(b["sampled"].as_u64().unwrap() > 0);
    assert!(load.stats().verified > 0);
}
