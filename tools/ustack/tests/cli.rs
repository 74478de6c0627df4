//! The command-line tool as a user meets it: help, errors, exit codes.

use std::process::{Command, Output};

fn ustack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(args)
        .output()
        .expect("run ustack")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_describes_the_tool_and_every_subcommand() {
    let o = ustack(&["--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    assert!(
        help.contains("TCP/IP stack that runs inside a user process"),
        "{help}"
    );
    for sub in ["bench", "serve", "stat", "ss", "sysctl", "capture"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(sub)),
            "--help lists `{sub}`:\n{help}"
        );
    }
}

#[test]
fn unknown_subcommand_and_bad_flag_are_clear_errors() {
    let o = ustack(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unrecognized subcommand 'frobnicate'"),
        "{}",
        stderr(&o)
    );
    let o = ustack(&["bench", "--no-such-flag"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--no-such-flag"), "{}", stderr(&o));
}

#[test]
fn inspection_commands_refuse_bad_arguments_clearly() {
    for (args, says) in [
        (&["capture"][..], "--write <FILE>"),
        (&["capture", "-w", "x.pcap", "-c", "0"], "0 is not in 1.."),
        (
            &["capture", "-w", "x.pcap", "--duration", "soon"],
            "not a duration",
        ),
        (&["stat", "--delta", "--memory"], "cannot be used with"),
        (&["stat", "-z"], "--delta"),
        (&["ss", "-l", "-a"], "cannot be used with"),
        (
            &["sysctl", "--defaults", "--control", "x"],
            "cannot be used with",
        ),
    ] {
        let o = ustack(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn serve_refuses_bad_arguments_clearly() {
    for (args, says) in [
        (&["serve"][..], "<PROTO>"),
        (&["serve", "gopher"], "invalid value 'gopher'"),
        (&["serve", "echo", "--link", "tap"], "invalid value 'tap'"),
        (
            &["serve", "echo", "--addr", "nowhere"],
            "invalid value 'nowhere'",
        ),
        (&["serve", "echo", "--duration", "ten"], "not a duration"),
        (&["serve", "echo", "--duration", "5y"], "unknown unit"),
        (&["serve", "echo", "--shards", "0"], "0 is not in 1..=64"),
    ] {
        let o = ustack(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    for (args, says) in [
        (
            &["serve", "echo", "--root", "."][..],
            "--root is for the http server only",
        ),
        (
            &["serve", "http", "--root", "/nonexistent/ustack"],
            "not a directory",
        ),
        (
            &["serve", "http", "--addr", "192.0.2.2:0"],
            "port other than 0",
        ),
        (
            &["serve", "echo", "--link", "sim", "--shards", "2"],
            "--shards is for --link shm or tun",
        ),
        (
            &["serve", "echo", "--netns", "x"],
            "--netns and --mtu are for --link tun only",
        ),
        (
            &["serve", "echo", "--link", "tun", "--tun", "a/b"],
            "interface name `a/b`",
        ),
        (&["serve", "echo", "--link", "tun", "--mtu", "10"], "MTU 10"),
        (
            &[
                "serve",
                "echo",
                "--link",
                "tun",
                "--netns",
                "/nonexistent/ns",
            ],
            "netns /nonexistent/ns",
        ),
    ] {
        let o = ustack(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
    let o = ustack(&["serve", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("shm-offer <name>"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("tun-ready <interface>"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn serve_over_sim_runs_verifying_clients() {
    let o = ustack(&[
        "serve",
        "http",
        "--link",
        "sim",
        "--clients",
        "20",
        "--requests",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("sim: 20 clients, 60 exchanges verified"),
        "{out}"
    );
    assert!(out.contains("http_200=60"), "{out}");
}

#[test]
fn sysctl_lists_validates_and_refuses() {
    let o = ustack(&["sysctl", "--defaults"]);
    assert!(o.status.success());
    let all = stdout(&o);
    assert!(all.contains("net.ipv4.ip_default_ttl = 64\n"), "{all}");
    assert!(
        all.contains("net.ipv4.ipfrag_high_thresh = 4194304\n"),
        "{all}"
    );

    let o = ustack(&["sysctl", "--defaults", "-v", "net.ipv4.icmp_ratelimit"]);
    assert!(o.status.success());
    assert!(
        stdout(&o).starts_with("net.ipv4.icmp_ratelimit = 1000\t[0..=60000] ms"),
        "{}",
        stdout(&o)
    );

    let o = ustack(&["sysctl", "--defaults", "net.ipv4.ip_default_ttl=128"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "net.ipv4.ip_default_ttl = 128\n");

    let o = ustack(&["sysctl", "--defaults", "net.ipv4.ip_default_ttl=0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("out of range [1, 255]"),
        "{}",
        stderr(&o)
    );

    let o = ustack(&["sysctl", "--defaults", "net.ipv4.tcp_nope"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unknown sysctl"), "{}", stderr(&o));

    let o = ustack(&["sysctl", "--defaults", "net.ipv4.ip_default_ttl=lots"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a non-negative integer"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_json_has_one_verified_object_per_server() {
    let o = ustack(&["bench", "udp-rr", "--duration", "100ms", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array");
    let servers: Vec<&str> = runs.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["ustack", "linux"]);
    for r in runs {
        for field in [
            "scenario",
            "server",
            "link",
            "shards",
            "verified",
            "conns",
            "duration_s",
            "throughput_gbps",
            "msgs_per_s",
            "conns_per_s",
            "latency_us",
            "server_cpu_s",
            "server_time_wait",
            "server_mem_bytes",
            "server_mem_per_conn_bytes",
            "counters",
            "client_counters",
        ] {
            assert!(r.get(field).is_some(), "field {field} present in {r}");
        }
        assert_eq!(r["verified"], true);
        assert!(r["msgs_per_s"].as_f64().unwrap() > 100.0, "{r}");
        let (p50, p99) = (
            r["latency_us"]["p50"].as_f64().unwrap(),
            r["latency_us"]["p99"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99, "{r}");
    }
    // The ustack server's counters use Linux's names, and saw every request.
    let ustack = &runs[0];
    let round_trips = ustack["round_trips"].as_u64().unwrap();
    assert_eq!(
        ustack["counters"]["Udp"]["InDatagrams"].as_u64(),
        Some(round_trips)
    );
    assert_eq!(
        ustack["client_counters"]["Udp"]["OutDatagrams"].as_u64(),
        Some(round_trips)
    );
}

#[test]
fn bench_default_suite_runs_every_scenario_on_both_servers_verified() {
    let o = ustack(&["bench", "--duration", "100ms", "--conns", "3", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["verified"], true, "{r}");
            (
                r["scenario"].as_str().unwrap().to_owned(),
                r["server"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = ["udp-rr", "pingpong", "cps", "stream"]
        .iter()
        .flat_map(|s| ["ustack", "linux"].map(|srv| (s.to_string(), srv.to_string())))
        .collect();
    assert_eq!(runs, want);
    let all = v.as_array().unwrap();
    let pingpong = all
        .iter()
        .find(|r| r["scenario"] == "pingpong" && r["server"] == "ustack")
        .unwrap();
    assert_eq!(pingpong["conns"], 3);
    // Every message the ustack server echoed went through its TCP: the counters agree.
    assert_eq!(pingpong["counters"]["Tcp"]["PassiveOpens"], 3);
    let stream = all
        .iter()
        .find(|r| r["scenario"] == "stream" && r["server"] == "ustack")
        .unwrap();
    assert!(stream["bytes"].as_u64().unwrap() > 1_000_000, "{stream}");
    assert!(stream["throughput_gbps"].as_f64().unwrap() > 0.0);
    // ustack runs over shm by default, its server on a thread of its own: its CPU time is
    // measured, and cannot exceed the run's wall time by more than scheduling slack.
    for r in all.iter().filter(|r| r["server"] == "ustack") {
        assert_eq!(r["link"], "shm", "{r}");
        let cpu = r["server_cpu_s"]
            .as_f64()
            .expect("server_cpu_s is a number");
        assert!(
            cpu > 0.0 && cpu < r["duration_s"].as_f64().unwrap() + 0.5,
            "{r}"
        );
    }
    // cps: every connection the client counted was a passive open on the server, which
    // closed first and so holds one TIME-WAIT record per connection (60 s outlast the run).
    let cps = all
        .iter()
        .find(|r| r["scenario"] == "cps" && r["server"] == "ustack")
        .unwrap();
    let n = cps["connections"].as_u64().unwrap();
    assert!(n >= 3, "{cps}");
    assert!(cps["conns_per_s"].as_f64().unwrap() > 0.0, "{cps}");
    assert_eq!(cps["counters"]["Tcp"]["PassiveOpens"].as_u64(), Some(n));
    assert_eq!(
        cps["client_counters"]["Tcp"]["ActiveOpens"].as_u64(),
        Some(n)
    );
    assert_eq!(cps["server_time_wait"].as_u64(), Some(n), "{cps}");
    assert!(cps["msgs_per_s"].is_null(), "{cps}");
    // The server read every byte of the stream: its InSegs carried them.
    assert!(
        stream["counters"]["Tcp"]["InSegs"].as_u64().unwrap() > 10,
        "{stream}"
    );
}

#[test]
fn bench_runs_every_scenario_over_sim_too() {
    let o = ustack(&[
        "bench",
        "--link",
        "sim",
        "--server",
        "ustack",
        "--duration",
        "100ms",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().unwrap();
    let scenarios: Vec<&str> = runs
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(scenarios, ["udp-rr", "pingpong", "cps", "stream"]);
    for r in runs {
        assert_eq!(r["server"], "ustack", "{r}");
        assert_eq!(r["link"], "sim", "{r}");
        assert_eq!(r["verified"], true, "{r}");
        // One thread runs both stacks: the server's CPU time is not separable.
        assert!(r["server_cpu_s"].is_null(), "{r}");
    }
}

#[test]
fn bench_table_shows_both_servers_and_the_ratio() {
    let o = ustack(&["bench", "pingpong", "--duration", "100ms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("pingpong  ustack ") && l.contains(" shm ")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("pingpong  linux ") && l.contains(" loopback ")),
        "{out}"
    );
    assert!(out.contains("pingpong: ustack/linux "), "{out}");
}

#[test]
fn bench_rejects_bad_values_with_what_is_allowed() {
    let o = ustack(&["bench", "--duration", "fast"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expected a number with a unit"),
        "{}",
        stderr(&o)
    );
    let o = ustack(&["bench", "--msg-size", "4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("8..=1472"), "{}", stderr(&o));
    let o = ustack(&["bench", "--link", "tun"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[possible values: shm, sim]"),
        "{}",
        stderr(&o)
    );
    let o = ustack(&["bench", "--server", "bsd"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[possible values: ustack, linux]"),
        "{}",
        stderr(&o)
    );
}
