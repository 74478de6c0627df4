//! The command-line tool as a user meets it: help, errors, exit codes.

mod common;

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

/// Runs each `(args, says)` case: ustack exits with `code` (2: a usage error the argument
/// parser finds, 1: one found after it) and says `says` on stderr.
fn assert_refused(code: i32, cases: &[(&[&str], &str)]) {
    for (args, says) in cases {
        let o = ustack(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
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
    // The bench's own helper processes are not a user's command.
    assert!(!help.contains("bench-peer"), "{help}");
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
    assert_refused(
        2,
        &[
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
        ],
    );
}

#[test]
fn connect_and_get_refuse_bad_link_arguments_clearly() {
    assert_refused(
        2,
        &[(
            &["connect", "192.0.2.1:7", "--link", "tap"],
            "invalid value 'tap'",
        )],
    );
    assert_refused(
        1,
        &[
            (
                &["connect", "192.0.2.1:7", "--link", "packet"][..],
                "--link packet needs --interface NAME",
            ),
            (
                &["get", "http://192.0.2.1/", "--link", "xdp"],
                "--link xdp needs --interface NAME",
            ),
            (
                &["connect", "192.0.2.1:7", "--interface", "veth1"],
                "--interface is for --link packet or xdp",
            ),
            (
                &[
                    "get",
                    "http://192.0.2.1/",
                    "--link",
                    "packet",
                    "--interface",
                    "veth1",
                    "--mtu",
                    "1400",
                ],
                "--mtu is for --link tun",
            ),
            (
                &[
                    "connect",
                    "192.0.2.1:7",
                    "--link",
                    "xdp",
                    "--interface",
                    "veth1",
                    "--no-offload",
                ],
                "--no-offload is for --link tun",
            ),
            (
                &[
                    "connect",
                    "192.0.2.1:7",
                    "--link",
                    "packet",
                    "--interface",
                    "nonexistent0",
                ],
                "opening an AF_PACKET socket on `nonexistent0`",
            ),
        ],
    );
}

#[test]
fn serve_refuses_bad_arguments_clearly() {
    assert_refused(
        2,
        &[
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
            (
                &["serve", "echo", "--sysctl", "net.ipv4.tcp_sack=7"],
                "net.ipv4.tcp_sack = 7 is out of range [0, 1]",
            ),
            (
                &["serve", "echo", "--sysctl", "net.ipv4.tcp_nope=1"],
                "unknown sysctl \"net.ipv4.tcp_nope\"",
            ),
            (
                &["serve", "echo", "--sysctl", "net.ipv4.tcp_sack"],
                "expected NAME=VALUE",
            ),
            (
                &["serve", "echo", "--addr", "192.0.2.2/33:7"],
                "the prefix length must be 1 to 32",
            ),
        ],
    );
    assert_refused(
        1,
        &[
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
                "--shards is for --link shm, tun, packet or xdp",
            ),
            (
                &["serve", "echo", "--netns", "x"],
                "--netns is for --link tun, packet or xdp",
            ),
            (
                &["serve", "echo", "--no-offload"],
                "--mtu and --no-offload are for --link tun only",
            ),
            (
                &["serve", "echo", "--link", "xdp"],
                "--interface NAME goes with --link packet or xdp (and they need it",
            ),
            (
                &["serve", "echo", "--link", "tun", "--interface", "veth1"],
                "--interface NAME goes with --link packet or xdp",
            ),
            (
                &[
                    "serve",
                    "echo",
                    "--link",
                    "packet",
                    "--interface",
                    "veth1",
                    "--mtu",
                    "1400",
                ],
                "--mtu and --no-offload are for --link tun only",
            ),
            (
                &[
                    "serve",
                    "echo",
                    "--link",
                    "xdp",
                    "--interface",
                    "nonexistent0",
                    "--control",
                    "/tmp/ustack-cli-test-xdp-nonexistent.sock",
                ],
                "opening AF_XDP sockets on `nonexistent0`",
            ),
            (
                &["serve", "echo", "--link", "sim", "--gateway", "10.0.0.1"],
                "--gateway 10.0.0.1 is not another address on --addr's subnet 192.0.2.2/24",
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
        ],
    );
    let o = ustack(&["serve", "--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("shm-offer <name>"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("tun-ready <interface>"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("packet-ready <interface>    (or xdp-ready <interface>)"),
        "{}",
        stdout(&o)
    );
}

/// `ustack serve PROTO --link sim` with 20 clients of 3 exchanges (and `extra` flags),
/// which must all verify; its stdout.
fn serve_over_sim(proto: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "serve",
        proto,
        "--link",
        "sim",
        "--clients",
        "20",
        "--requests",
        "3",
    ];
    args.extend_from_slice(extra);
    let o = ustack(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("sim: 20 clients, 60 exchanges verified"),
        "{out}"
    );
    out
}

#[test]
fn serve_over_sim_runs_verifying_clients() {
    let out = serve_over_sim("http", &[]);
    assert!(out.contains("http_200=60"), "{out}");
}

/// `--link sim` with an IPv6 `--addr`: the clients connect to it over IPv6 once both
/// ends' addresses have passed duplicate address detection, and the server saw only IPv6
/// packets.
#[test]
fn serve_over_sim_speaks_ipv6() {
    let out = serve_over_sim("echo", &["--addr", "[2001:db8::1]:7"]);
    assert!(
        out.contains(
            "sim: the clients connected to [2001:db8::1]:7; the server received 0 IPv4 and "
        ),
        "{out}"
    );
    assert!(!out.contains("and 0 IPv6 packets"), "{out}");
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

/// `--contend`: a CPU hog per core at nice 10 beside both servers, reported in the JSON
/// with pids the kernel had at nice 10 and a share of the CPU they really got; gone once
/// the bench exits. `--ustack-poll fixed` is ustack's fixed window (mode busy-poll).
#[test]
fn bench_contend_runs_a_hog_per_core_and_kills_them() {
    let args =
        "bench udp-rr --duration 300ms --linux-mode epoll --contend --ustack-poll fixed --json";
    let o = ustack(&args.split(' ').collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["mode"], "busy-poll", "{}", runs[0]);
    assert_eq!(runs[1]["mode"], "epoll", "{}", runs[1]);
    let cores = rustix::thread::sched_getaffinity(None).unwrap().count() as usize;
    let mut pids = Vec::new();
    for r in runs {
        assert_eq!(r["verified"], true, "{r}");
        let c = &r["contend"];
        assert_eq!(c["hogs"], cores, "one hog per core: {c}");
        assert_eq!(c["nice"], 10, "{c}");
        assert_eq!(c["nice_seen"], serde_json::json!(vec![10; cores]), "{c}");
        // Spinning hogs get CPU even at nice 10 beside the bench (a few percent at
        // least, on a machine busy with other work).
        let share = c["hog_cpu_share"].as_f64().unwrap();
        assert!(
            share > 0.02 && share <= 1.05,
            "hogs' CPU share {share}: {c}"
        );
        pids = c["pids"].as_array().unwrap().clone();
    }
    assert_eq!(pids.len(), cores);
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "hog {pid} still running after the bench"
        );
    }
    // Without --contend: null.
    let args = "bench udp-rr --duration 100ms --server ustack --json";
    let o = ustack(&args.split(' ').collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v[0]["contend"].is_null(), "{}", v[0]);
    assert_eq!(v[0]["mode"], "adaptive", "{}", v[0]);
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
    // ustack runs over shm by default, its server on a thread of its own, and Linux's
    // server runs in a process of its own: both servers' CPU time is measured, and cannot
    // exceed the run's wall time by more than scheduling slack. (Linux's is counted in
    // clock ticks, so a short run may read 0.)
    let mut linux_cpu = 0.0;
    for r in all {
        let cpu = r["server_cpu_s"]
            .as_f64()
            .unwrap_or_else(|| panic!("server_cpu_s is a number: {r}"));
        assert!(
            cpu >= 0.0 && cpu < r["duration_s"].as_f64().unwrap() + 0.5,
            "{r}"
        );
        if r["server"] == "ustack" {
            assert_eq!(r["link"], "shm", "{r}");
            assert!(cpu > 0.0, "{r}");
        } else {
            linux_cpu += cpu;
        }
    }
    assert!(linux_cpu > 0.0, "the Linux servers did some work");
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

/// `--ipv6`: the default suite over IPv6 on both servers, verified: every run says
/// `"family": "ipv6"`, and the addresses its client's connection (or UDP flow) really had
/// are IPv6 ones: ustack's 2001:db8::2 to [2001:db8::1]:5001 over shm, Linux's ::1 to ::1
/// (in every Linux mode); the ustack server's packets all came in over IPv6. The table
/// says IPv6 with those addresses.
#[test]
fn bench_ipv6_runs_the_default_suite_over_ipv6_on_both_servers() {
    let o = ustack(&[
        "bench",
        "--ipv6",
        "--duration",
        "100ms",
        "--conns",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let all = v.as_array().unwrap();
    assert_eq!(all.len(), 8, "four scenarios, two servers");
    let ip = |r: &serde_json::Value, end: &str| -> std::net::SocketAddr {
        let a = r["addresses"][end].as_str();
        a.and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("addresses.{end} is a socket address: {r}"))
    };
    for r in all {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["family"], "ipv6", "{r}");
        let (local, peer) = (ip(r, "local"), ip(r, "peer"));
        if r["server"] == "ustack" {
            assert_eq!(local.ip().to_string(), "2001:db8::2", "{r}");
            assert_eq!(peer.to_string(), "[2001:db8::1]:5001", "{r}");
            let ip4 = r["counters"]["Ip"]["InReceives"].as_u64();
            let ip6 = r["counters"]["Ip6"]["InReceives"].as_u64();
            assert_eq!(ip4, Some(0), "no IPv4 packet reached the server: {r}");
            assert!(ip6 > Some(2), "{r}");
        } else {
            assert_eq!(local.ip().to_string(), "::1", "{r}");
            assert_eq!(peer.ip().to_string(), "::1", "{r}");
            let modes = r["linux_modes"].as_array().unwrap().len();
            assert!(modes >= 2 || r["scenario"] == "stream", "{r}");
        }
    }
    // The table says so.
    let o = ustack(&[
        "bench",
        "udp-rr",
        "--ipv6",
        "--duration",
        "50ms",
        "--linux-mode",
        "epoll",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().find(|l| l.starts_with("IPv6: "));
    let line = line.unwrap_or_else(|| panic!("no IPv6 line: {out}"));
    assert!(line.contains("ustack [2001:db8::2]:"), "{line}");
    assert!(
        line.contains(" -> [2001:db8::1]:5001; linux [::1]:"),
        "{line}"
    );
    // What does not run over IPv6 yet is refused, not run over IPv4.
    for (args, says) in [
        (&["c1m", "--ipv6"][..], "--ipv6: c1m: not yet"),
        (&["--ipv6", "--link", "sim"][..], "--ipv6: not yet"),
    ] {
        let o = ustack(&[&["bench"][..], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    }
}

/// Over shm both ustack ends skip TCP/UDP checksums by default (as Linux's loopback);
/// `--checksums` computes and verifies them, and the transfer still verifies.
#[test]
fn bench_stream_over_shm_with_checksums_verifies() {
    let o = ustack(&[
        "bench",
        "stream",
        "--server",
        "ustack",
        "--duration",
        "100ms",
        "--checksums",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let r = &v[0];
    assert_eq!(
        (r["link"].as_str(), r["verified"].as_bool()),
        (Some("shm"), Some(true))
    );
    assert!(r["bytes"].as_u64().unwrap() > 1_000_000, "{r}");
    assert_eq!(r["counters"]["Tcp"]["InErrs"].as_u64(), Some(0), "{r}");
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
    let o = ustack(&["bench", "--link", "tap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[possible values: shm, sim, loopback, tun, packet, xdp]"),
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

/// Options that parse but cannot be honoured, or do not go together: exit status 2 and a
/// message that says what is allowed instead, before anything runs.
#[test]
fn bench_refuses_what_it_cannot_do_with_what_is_allowed() {
    for (args, says) in [
        (&["--msg-size", "2K"][..], "is 2048 bytes, not in 8..=1472"),
        (&["--bytes", "64X"], "the suffix must be K, M or G"),
        (&["--bytes", "0"], "not in 1..="),
        (&["--bytes", "lots"], "expected a whole number of bytes"),
        (&["--loss", "101"], "a percentage from 0 to 100"),
        (&["--dup", "-1"], "a percentage from 0 to 100"),
        (&["--delay", "11s"], "between 0 and 10s"),
        (&["--delay", "1h"], "unit must be us, ms, s or m"),
        (&["--shards", "0"], "0 is not in 1..=64"),
        (
            &["--loss", "1"],
            "faults (--loss) need --link sim: the shm link cannot inject them",
        ),
        (
            &["--link", "sim", "--corrupt", "1", "--delay", "1ms"],
            "faults (--corrupt, --delay) need --server ustack: Linux runs over loopback",
        ),
        (
            &["--link", "loopback"],
            "ustack cannot run over loopback; use --link shm or sim for ustack, or --server linux",
        ),
        (&["--link", "xdp"], "--link xdp: udp-rr: not yet"),
        (
            &["cps", "--link", "packet"],
            "--link packet: cps: not yet: only stream runs over packet so far",
        ),
        (
            &["stream", "--link", "xdp", "--loss", "1"],
            "faults need --link sim: the xdp link cannot inject them",
        ),
        (
            &["stream", "--link", "packet", "--no-offload"],
            "--no-offload is for --link tun, not packet",
        ),
        (
            &["pingpong", "--link", "tun"],
            "--link tun: pingpong: not yet: only stream runs over tun so far",
        ),
        (&["--link", "tun"], "--link tun: udp-rr: not yet"),
        (
            &["stream", "--no-offload"],
            "--no-offload is for --link tun, not shm",
        ),
        (
            &["--shards", "2", "--link", "sim"],
            "--shards 2 is for --link shm",
        ),
        (
            &["stream", "--conns", "2"],
            "--conns 2: stream over shm is one connection",
        ),
        (
            &["stream", "--conns", "65", "--link", "xdp"],
            "--conns 65: at most 64 for stream",
        ),
        (&["c1m", "--shards", "2"], "--shards 2: not yet for c1m"),
        (
            &["udp-rr", "--bytes", "1M"],
            "--bytes is for the stream scenario",
        ),
        (
            &["--plot", "out.jpg"],
            "--plot out.jpg: the file must end in .png or .svg",
        ),
        (
            &["--plot", "/nonexistent/ustack/out.png"],
            "no such directory to write it in",
        ),
    ] {
        let o = ustack(&[&["bench"][..], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: nothing ran");
    }
    // Linux over its own loopback is what Linux always does.
    let o = ustack(&[
        "bench",
        "udp-rr",
        "--server",
        "linux",
        "--link",
        "loopback",
        "--duration",
        "50ms",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o)
            .lines()
            .any(|l| l.starts_with("udp-rr    linux   loopback ")),
        "{}",
        stdout(&o)
    );
}

/// `ustack bench c1m`: every connection made, held and exchanged on both servers. The
/// ustack server's memory per connection is its own process's RSS growth; its accounting,
/// beside it, is checked against the size of the record a connection lives in (`Tcb`,
/// inline in a slab slot): all 2,000 connections held when it was read, no buffer memory
/// held by an idle connection, and per connection the record plus the tables' share, not
/// a vague window; and the RSS against the accounting. Each server is measured alone: the
/// CPU time of each is positive, and each ran in processes of its own, which the test
/// sees as children of the bench (`bench-peer ustack-c1m`, `bench-peer echo`) while it
/// runs.
#[test]
fn bench_c1m_holds_every_connection_and_measures_each_server_alone() {
    const N: u64 = 2000;
    let (runs, children) = bench_json_watching_children("c1m --conns 2000 --duration 50ms");
    let servers: Vec<&str> = runs.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["ustack", "linux"]);
    for r in &runs {
        assert_eq!(r["scenario"], "c1m", "{r}");
        assert_eq!(r["conns"], N, "{r}");
        // Every connection was made and exchanged its one message.
        assert_eq!(r["connections"], N, "{r}");
        assert_eq!(r["round_trips"], N, "{r}");
        assert!(r["conns_per_s"].as_f64().unwrap() > 100.0, "{r}");
        assert!(r["msgs_per_s"].as_f64().unwrap() > 100.0, "{r}");
        let (p50, p999) = (
            r["latency_us"]["p50"].as_f64().unwrap(),
            r["latency_us"]["p999"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p999, "{r}");
        for phase in ["establish", "exchange", "close"] {
            assert!(r["phases_s"][phase].as_f64().unwrap() > 0.0, "{phase}: {r}");
        }
        let mem = r["server_mem_bytes"].as_u64().unwrap();
        let per_conn = r["server_mem_per_conn_bytes"].as_f64().unwrap();
        assert!((per_conn * N as f64 - mem as f64).abs() < 1.0, "{r}");
        // The server did the work of 2,000 handshakes, exchanges and closes.
        let cpu = r["server_cpu_s"].as_f64().unwrap();
        assert!(cpu > 0.0, "{} server CPU time {cpu}", r["server"]);
    }

    let ustack = &runs[0];
    assert_eq!(ustack["link"], "shm");
    assert_eq!(ustack["counters"]["Tcp"]["PassiveOpens"], N);
    assert_eq!(ustack["client_counters"]["Tcp"]["ActiveOpens"], N);
    // The server's memory is its own process's RSS growth, PSS beside it.
    let mem = ustack["server_mem_bytes"].as_u64().unwrap();
    let detail = &ustack["server_mem"];
    assert_eq!(detail["server_rss_bytes"].as_u64(), Some(mem), "{detail}");
    assert!(detail["server_pss_bytes"].as_i64().unwrap() > 0, "{detail}");
    let kind = |name: &str| {
        let k = &detail["stack_kinds"][name];
        (k["count"].as_i64().unwrap(), k["bytes"].as_i64().unwrap())
    };
    let kinds = detail["stack_kinds"].as_object().expect("stack_kinds");
    let accounted = detail["stack_bytes"].as_i64().unwrap();
    let sum: i64 = kinds.values().map(|k| k["bytes"].as_i64().unwrap()).sum();
    assert_eq!(sum, accounted, "the total is the kinds' sum: {detail}");
    // Read once every connection was held, each in a slab slot of one record, a poller
    // registration and an entry of the echo server's map.
    let record = ustack_stack::tcp::TCB_BYTES as f64;
    let (tcbs, tcb_bytes) = kind("tcb");
    assert_eq!(
        tcbs, N as i64,
        "memory read with every connection held: {detail}"
    );
    assert_eq!(kind("poller").0, N as i64, "{detail}");
    assert_eq!(kind("app_conns").0, N as i64, "{detail}");
    let per_tcb = tcb_bytes as f64 / N as f64;
    // The slab grows by an eighth (at least 16 slots): at most 2,266 slots for 2,000
    // (2,113 in fact), each the record and its generation.
    let n = N as f64;
    assert!(
        record <= per_tcb && per_tcb <= (record + 16.0) * (n + n / 8.0 + 16.0) / n,
        "{per_tcb} bytes of slab per connection, the record is {record}: {detail}"
    );
    // Outside the stack an idle connection is an entry in two tables indexed by its slot,
    // grown by an eighth from 1,024 entries (2,075 for 2,000): the poller's registration,
    // 16 bytes, and the echo server's slot, 8 bytes (no `Conn` while idle). The poller's
    // ready list and scratch, sized by the accept bursts, add a few bytes (7 when this was
    // written: 23.7 in all). A hash map of either (as before: 84 and 297 bytes a
    // connection at 2,000) or a `Conn` kept per idle connection (115) breaks these.
    let per = |k: &str| kind(k).1 as f64 / n;
    assert!(
        per("app_conns") <= 8.0 * 2075.0 / n + 1.0,
        "the echo server holds {} bytes per idle connection: {detail}",
        per("app_conns")
    );
    assert!(
        per("poller") <= 16.0 * 2075.0 / n + 24.0,
        "the poller holds {} bytes per connection: {detail}",
        per("poller")
    );
    // Idle connections hold no buffer memory nor retransmission board, and nothing is in
    // TIME-WAIT yet.
    assert_eq!(kind("buffers").1, 0, "{detail}");
    assert_eq!(kind("rtx_queue"), (0, 0), "{detail}");
    assert_eq!(kind("time_wait"), (0, 0), "{detail}");
    // The stack's tables (the established hash, the timer heap; the SYN queue's, sized by
    // the 1,000 handshakes in flight) add at most a few words per connection.
    let stack_only: i64 = [
        "tcb",
        "tables",
        "requests",
        "time_wait",
        "buffers",
        "rtx_queue",
        "rtx_spare",
    ]
    .iter()
    .map(|k| kind(k).1)
    .sum();
    let per_conn = stack_only as f64 / N as f64;
    assert!(
        record < per_conn && per_conn < record + 256.0,
        "{per_conn} bytes of the stack per connection, the record is {record}: {detail}"
    );
    // The process's RSS and its accounting tell the same story: RSS grew by at least
    // half what was accounted (capacity a table reserved and has not touched yet is not
    // resident) and by at most twice it plus 1 MiB (allocator slack, the loop's scratch).
    let rss = mem as f64;
    assert!(
        rss >= accounted as f64 / 2.0 && rss <= 2.0 * accounted as f64 + f64::from(1 << 20),
        "RSS grew {rss} bytes, the accounting says {accounted}: {detail}"
    );
    // Alone: the ustack server is the bench's `bench-peer ustack-c1m` child.
    let pid = detail["pid"].as_u64().expect("the ustack server's pid") as u32;
    assert_child(&children, pid, "bench-peer ustack-c1m");

    let linux = &runs[1];
    assert_eq!(linux["link"], "loopback");
    assert!(linux["server_mem"]["server_rss_bytes"].is_i64(), "{linux}");
    assert!(linux["server_mem"]["kernel_slab_bytes"].is_i64(), "{linux}");
    let per_conn = linux["server_mem_per_conn_bytes"].as_f64().unwrap();
    assert!((100.0..100_000.0).contains(&per_conn), "{linux}");
    assert_eq!(linux["server_mem"]["processes"], 1, "{linux}");
    // Alone: the server whose memory and CPU time were read ran in a process of its own,
    // the `bench-peer echo` child the test saw, not the bench process.
    let pids: Vec<u32> = linux["server_mem"]["pids"]
        .as_array()
        .expect("the Linux server's pids")
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pids.len(), 1, "{linux}");
    let echo_children: Vec<u32> = children
        .iter()
        .filter(|(_, cmd)| cmd.contains("bench-peer echo"))
        .map(|(pid, _)| *pid)
        .collect();
    assert!(
        pids.iter().all(|p| echo_children.contains(p)),
        "the Linux server {pids:?} is one of the bench's `bench-peer echo` children \
         {echo_children:?} (all children: {children:?})"
    );
}

/// `ustack bench c1m --api tokio` (issue #16's memory per idle connection with a tokio
/// task per connection): on both servers a tokio server spawns a task for every
/// connection; all 4,000 are made, held and exchanged. ustack's figure is its server
/// process's RSS growth (the `bench-peer ustack-c1m --api tokio` child), read with every
/// task alive (its `tasks` kind counts them, beside a TCB each); the kernel's is its
/// tokio servers' RSS plus half the slab growth (`bench-peer tokio-echo` children).
///
/// The bound: an idle connection (its task's future, tokio's task header, the
/// `LocalStack`'s waker entry, the stack's record) in at most 1,500 bytes of the server's
/// RSS (945 at 5,000 and 898 at 100,000 in release builds when this was written). A task
/// that held a buffer while idle (a 4 KiB read buffer in its future, or one allocated
/// per task) breaks it.
#[test]
fn bench_c1m_api_tokio_holds_a_task_per_connection_in_bounded_memory() {
    const N: u64 = 4000;
    let (runs, children) =
        bench_json_watching_children("c1m --api tokio --conns 4000 --duration 50ms");
    let servers: Vec<&str> = runs.iter().map(|r| r["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["ustack", "linux"]);
    for r in &runs {
        assert_eq!(r["scenario"], "c1m", "{r}");
        assert_eq!(r["api"], "tokio", "{r}");
        assert_eq!(r["mode"], "tokio", "{r}");
        assert_eq!(r["connections"], N, "{r}");
        assert_eq!(r["round_trips"], N, "{r}");
        assert!(r["server_cpu_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    let ustack = &runs[0];
    let detail = &ustack["server_mem"];
    let kind = |name: &str| {
        let k = &detail["stack_kinds"][name];
        (k["count"].as_i64().unwrap(), k["bytes"].as_i64().unwrap())
    };
    // Read with every connection held by a live task.
    assert_eq!(kind("tasks").0, N as i64, "{detail}");
    assert_eq!(kind("tcb").0, N as i64, "{detail}");
    assert_eq!(
        kind("buffers").1,
        0,
        "idle connections hold no buffer: {detail}"
    );
    let future = kind("tasks").1 as f64 / N as f64;
    assert!(
        (16.0..=1024.0).contains(&future),
        "a task's future is {future} bytes: {detail}"
    );
    let per_conn = ustack["server_mem_per_conn_bytes"].as_f64().unwrap();
    assert_eq!(
        detail["server_rss_bytes"].as_u64(),
        ustack["server_mem_bytes"].as_u64(),
        "{detail}"
    );
    assert!(
        per_conn <= 1500.0,
        "{per_conn} bytes of the tokio server's RSS per idle connection: {detail}"
    );
    // At least what it accounted for (the record and the future are resident).
    assert!(
        per_conn * N as f64 >= detail["stack_bytes"].as_f64().unwrap() / 2.0,
        "{detail}"
    );
    let pid = detail["pid"].as_u64().expect("the ustack server's pid") as u32;
    assert_child(&children, pid, "bench-peer ustack-c1m");
    assert_child(&children, pid, "--api tokio");

    let linux = &runs[1];
    let per_conn = linux["server_mem_per_conn_bytes"].as_f64().unwrap();
    assert!((100.0..100_000.0).contains(&per_conn), "{linux}");
    assert!(linux["server_mem"]["kernel_slab_bytes"].is_i64(), "{linux}");
    let pids = linux["server_mem"]["pids"].as_array().expect("pids");
    assert_eq!(pids.len(), 1, "{linux}");
    assert_child(
        &children,
        pids[0].as_u64().unwrap() as u32,
        "bench-peer tokio-echo",
    );
}

/// `pid` is one of the bench's `children`, its command line holding `cmd`.
fn assert_child(children: &[(u32, String)], pid: u32, cmd: &str) {
    assert!(
        children.iter().any(|(p, c)| *p == pid && c.contains(cmd)),
        "the server {pid} is the bench's `{cmd}` child (all children: {children:?})"
    );
}

/// Run `ustack bench ARGS --json`, watching /proc while it runs for the processes it
/// starts: its runs (all verified), and each child's pid and command line (NULs as
/// spaces).
fn bench_json_watching_children(args: &str) -> (Vec<serde_json::Value>, Vec<(u32, String)>) {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ustack"))
        .arg("bench")
        .args(args.split_whitespace())
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ustack");
    let bench = child.id();
    // The bench's own command line, as /proc shows it (NULs as spaces).
    let bench_cmd = format!(
        "{} bench {} --json",
        env!("CARGO_BIN_EXE_ustack"),
        args.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    let mut pipes = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        use std::io::Read;
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let err = std::thread::spawn(move || pipes.1.read_to_end(&mut e).map(|_| e));
        pipes.0.read_to_end(&mut o).expect("the bench's stdout");
        (o, err.join().unwrap().expect("the bench's stderr"))
    });
    let mut seen: Vec<(u32, String)> = Vec::new();
    let status = loop {
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if seen.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The parent is the second field after the parenthesised command name.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(bench) {
                let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                // A child forked but not yet exec'd still shows the bench's own command
                // line, and one in the middle of `execve` (its old memory gone, the new
                // not yet set up) an empty one: read it again on the next pass. (Seen in
                // CI: the Linux echo server first read with an empty command line.)
                if cmd.trim() == bench_cmd || cmd.trim().is_empty() {
                    continue;
                }
                seen.push((pid, cmd.trim().to_owned()));
            }
        }
        if let Some(status) = child.try_wait().expect("waiting for the bench") {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let (stdout, stderr) = out.join().unwrap();
    assert!(
        status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&stderr)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array").clone();
    for r in &runs {
        assert_eq!(r["verified"], true, "{r}");
    }
    (runs, seen)
}

#[test]
fn bench_c1m_refuses_what_it_cannot_do() {
    for (args, says) in [
        (
            &["pingpong", "--conns", "20000"][..],
            "--conns 20000: at most 10000 for pingpong; only c1m holds more",
        ),
        (
            &["c1m", "--link", "sim"],
            "c1m runs ustack over shm, not sim",
        ),
        (&["c1m", "--conns", "0"], "0 is not in 1..=10000000"),
        (
            &["c1m", "--conns", "20000000"],
            "20000000 is not in 1..=10000000",
        ),
        (
            &["c1m", "--active", "100"],
            "--active 100: for c1m with --server ustack only",
        ),
        (
            &[
                "c1m", "--server", "ustack", "--active", "100", "--send", "4096",
            ],
            "--active 100: for c1m with --server ustack only, without --syn-flood or --send",
        ),
        (
            &["c1m", "--bytes", "1M"],
            "--bytes is for the stream scenario",
        ),
        (
            &["c1m", "--syn-flood", "1000"],
            "--syn-flood 1000: for c1m with --server ustack only",
        ),
        (
            &["pingpong", "--server", "ustack", "--syn-flood", "1000"],
            "--syn-flood 1000: for c1m with --server ustack only",
        ),
        (
            &["c1m", "--api", "tokio", "--send", "4096"],
            "--send: not with --api tokio",
        ),
        (
            &["c1m", "--send", "4096"],
            "--send and --server-sysctl: for c1m with --server ustack only",
        ),
        (
            &["c1m", "--server", "ustack", "--send", "2M"],
            "--send 2097152: at most 1M bytes per connection",
        ),
        (
            &[
                "c1m",
                "--server",
                "ustack",
                "--server-sysctl",
                "net.ipv4.tcp_mem.high=0",
            ],
            "--server-sysctl net.ipv4.tcp_mem.high=0: net.ipv4.tcp_mem.high = 0 is out of range",
        ),
    ] {
        let o = ustack(&[&["bench"][..], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: nothing ran");
    }
}

/// `ustack bench c1m --syn-flood RATE` (issue #12 item 5) in a debug build: 3,000
/// connections held for 1 s while the client side sends 20,000 spoofed SYNs a second
/// (what a user checks: [`common::check_syn_flood`]). clean_link.rs runs the CI-scale one
/// in the release build: 100,000 held through 10 s of flood.
#[test]
fn bench_c1m_syn_flood_keeps_the_syn_queue_bounded_and_every_connection_served() {
    let runs = bench_json("c1m --server ustack --conns 3000 --duration 1s --syn-flood 20000");
    common::check_syn_flood(&runs[0], 3000, 1.0);
}

/// `ustack bench c1m --active N` (issue #12 item 6, flat scaling) at CI scale: 20,000 idle
/// connections and 100 active ones. What a user checks: the 100 ran pingpong rounds alone
/// and again beside the 20,000 idle ones, every echo of both phases right; both phases'
/// messages/s and p99 round latency are reported, with their ratios (the speed target
/// itself is a benchmark's, not a test's); the idle connections were all held and
/// exchanged their message; the server's memory growth is the idle connections' alone
/// (the active ones were open before its first reading).
#[test]
fn bench_c1m_active_reports_pingpong_alone_and_beside_the_idle_connections() {
    let runs = bench_json("c1m --server ustack --conns 20000 --active 100 --duration 500ms");
    let r = &runs[0];
    assert_eq!(r["connections"], 20_000, "{r}");
    assert_eq!(r["round_trips"], 20_000, "{r}");
    let a = &r["active"];
    assert_eq!(a["conns"], 100, "{a}");
    assert_eq!(a["idle_conns"], 20_000, "{a}");
    assert_eq!(a["verified"], true, "{a}");
    let mut msgs = [0.0; 2];
    for (k, phase) in ["alone", "beside_idle"].into_iter().enumerate() {
        let p = &a[phase];
        assert_eq!(p["verified"], true, "{phase}: {a}");
        let rounds = p["rounds"].as_u64().unwrap();
        assert!(rounds >= 1, "{phase}: {a}");
        assert_eq!(
            p["round_trips"].as_u64(),
            Some(rounds * 100),
            "{phase}: {a}"
        );
        assert!(p["duration_s"].as_f64().unwrap() >= 0.5, "{phase}: {a}");
        msgs[k] = p["msgs_per_s"].as_f64().unwrap();
        let lat = &p["round_latency_us"];
        let (p50, p99) = (lat["p50"].as_f64().unwrap(), lat["p99"].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99, "{phase}: {a}");
        assert!(
            (msgs[k] - (rounds * 100) as f64 / p["duration_s"].as_f64().unwrap()).abs() < 1.0,
            "{phase}: {a}"
        );
    }
    let ratio = a["msgs_per_s_ratio"].as_f64().unwrap();
    assert!((ratio - msgs[1] / msgs[0]).abs() < 1e-6, "{a}");
    assert!(a["p99_ratio"].as_f64().unwrap() > 0.0, "{a}");
    assert!(a["target_met"].is_boolean(), "{a}");
    // The server's memory growth is the 20,000 idle connections'.
    assert_eq!(
        r["server_mem"]["stack_kinds"]["tcb"]["count"], 20_000,
        "{}",
        r["server_mem"]
    );
}

/// `ustack bench c1m --send 4096` (issue #12 item 8) in a debug build: 2,000 held
/// connections each send 4 KiB at once to a server that stopped reading, whose `tcp_mem`
/// allows 1 MiB (high) within a 2 MiB budget, against 8 MB asked (what a user checks:
/// [`common::check_surge`]). clean_link.rs runs the CI-scale one in the release build:
/// 100,000 connections, 400 MB asked of a 64 MiB budget.
/// After the drain every connection's one-message exchange completes: an echo write refused
/// memory while the surge's echoes were unacknowledged is woken when their ACKs free it
/// (a lost wake-up used to stall 1,601 to 1,975 of 2,000 exchanges for more than 10 s).
#[test]
fn bench_c1m_send_into_a_server_that_does_not_read_stays_in_budget_and_completes() {
    let runs = bench_json(
        "c1m --server ustack --conns 2000 --duration 10ms --send 4096 \
         --server-sysctl net.ipv4.tcp_mem.low=128 --server-sysctl net.ipv4.tcp_mem.pressure=192 \
         --server-sysctl net.ipv4.tcp_mem.high=256 --server-sysctl net.ipv4.tcp_mem.budget=512",
    );
    common::check_surge(&runs[0], 2000, 512);
}

/// Run `ustack bench ARGS --json` (`args` split at spaces) and return its array of
/// runs, all verified.
fn bench_json(args: &str) -> Vec<serde_json::Value> {
    let o = ustack(
        &[
            &["bench"][..],
            &args.split_whitespace().collect::<Vec<_>>(),
            &["--json"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let runs = v.as_array().expect("a JSON array").clone();
    for r in &runs {
        assert_eq!(r["verified"], true, "{r}");
    }
    runs
}

#[test]
fn bench_stream_moves_exactly_the_bytes_asked_on_every_server_and_link() {
    // 3M is 3 * 1024 * 1024 bytes, and an odd count is moved as exactly.
    // The rate is checked against the test's own clock: both runs happened while the
    // command ran, one after the other, so their durations add up to less than the
    // command's wall time, and each rate is at least the bytes over that wall time.
    for (bytes, want) in [("3M", 3 << 20), ("1000001", 1_000_001)] {
        for link in ["shm", "sim"] {
            let started = std::time::Instant::now();
            let runs = bench_json(&format!("stream --bytes {bytes} --link {link}"));
            let wall = started.elapsed().as_secs_f64();
            assert_eq!(runs.len(), 2);
            let mut secs_sum = 0.0;
            for r in &runs {
                assert_eq!(r["bytes"].as_u64(), Some(want), "{r}");
                let (secs, gbps) = (
                    r["duration_s"].as_f64().unwrap(),
                    r["throughput_gbps"].as_f64().unwrap(),
                );
                secs_sum += secs;
                let floor = want as f64 * 8.0 / wall / 1e9;
                assert!(
                    secs > 0.0 && gbps >= floor,
                    "{} over {link}: {gbps} Gbit/s in {secs} s, but {want} bytes moved within \
                     the command's {wall} s make at least {floor}",
                    r["server"]
                );
                // Bits over seconds: the units agree with the bytes moved.
                assert!(
                    (gbps * secs * 1e9 / 8.0 - want as f64).abs() < 1e-6 * want as f64,
                    "{r}"
                );
            }
            assert!(
                secs_sum < wall,
                "{link}: the runs took {secs_sum} s by their account, within a command that \
                 ran {wall} s"
            );
            // The ustack server read them all (in segments of at most loopback's MSS).
            let ustack = &runs[0];
            assert_eq!(ustack["link"], link);
            let in_segs = ustack["counters"]["Tcp"]["InSegs"].as_u64().unwrap();
            assert!(in_segs >= want / 65_483, "{ustack}");
        }
    }
}

/// `--shards 2` over shm: the ustack server on two shards, the client steering each flow
/// to its shard by RSS. Both shards accept and serve, every connection is accepted once
/// (the per-shard counts add up to the connections made), and the server's CPU time is
/// the shards' summed; Linux's epoll pingpong server runs two workers, its cps checker one
/// (Linux in epoll mode only: the io_uring server is one thread, and which mode is best
/// varies from run to run).
#[test]
fn bench_shards_spread_pingpong_and_cps_over_both_shards_verified() {
    for (scenario, linux_shards) in [("pingpong", 2), ("cps", 1)] {
        let runs = bench_json(&format!(
            "{scenario} --shards 2 --conns 8 --duration 200ms --linux-mode epoll"
        ));
        let (ustack, linux) = (&runs[0], &runs[1]);
        assert_eq!(ustack["shards"], 2, "{ustack}");
        assert_eq!(linux["shards"], linux_shards, "{linux}");
        let shards = ustack["per_shard"].as_array().expect("per_shard");
        assert_eq!(shards.len(), 2, "{ustack}");
        let opens: Vec<u64> = shards
            .iter()
            .map(|s| s["counters"]["Tcp"]["PassiveOpens"].as_u64().unwrap())
            .collect();
        assert!(
            opens.iter().all(|&n| n > 0),
            "both shards accepted: {opens:?}"
        );
        let made = if scenario == "cps" {
            ustack["connections"].as_u64().unwrap()
        } else {
            8
        };
        assert_eq!(opens.iter().sum::<u64>(), made, "{opens:?}");
        assert_eq!(ustack["counters"]["Tcp"]["PassiveOpens"], made);
        let cpu: f64 = shards
            .iter()
            .map(|s| s["server_cpu_s"].as_f64().unwrap())
            .sum();
        let total = ustack["server_cpu_s"].as_f64().unwrap();
        assert!(cpu > 0.0 && (cpu - total).abs() < 1e-6, "{cpu} vs {total}");
    }
}

/// Frames the sim link did `what` to, both directions.
fn frames(run: &serde_json::Value, what: &str) -> u64 {
    let f = &run["faults"];
    f["to_server"][what].as_u64().unwrap() + f["to_client"][what].as_u64().unwrap()
}

#[test]
fn bench_over_sim_runs_every_scenario_through_loss_verified() {
    let runs = bench_json("--link sim --server ustack --loss 1 --duration 100ms --conns 3");
    let scenarios: Vec<&str> = runs
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    assert_eq!(scenarios, ["udp-rr", "pingpong", "cps", "stream"]);
    for r in &runs {
        assert_eq!(r["faults"]["loss_pct"].as_f64(), Some(1.0), "{r}");
        assert!(frames(r, "sent") > 0, "{r}");
    }
    // Without faults, the field is null.
    let clean = bench_json("udp-rr --link sim --server ustack --duration 50ms");
    assert!(clean[0]["faults"].is_null(), "{}", clean[0]);
}

#[test]
fn bench_stream_through_loss_retransmits_and_delivers_every_byte() {
    // Every byte must arrive: a data segment the link lost on its way to the server was
    // sent again, and the client counted it. (The seed fixes which frames are lost.)
    let runs = bench_json("stream --link sim --server ustack --loss 1 --seed 1 --bytes 16M");
    let r = &runs[0];
    assert_eq!(r["bytes"].as_u64(), Some(16 << 20), "{r}");
    assert!(
        r["faults"]["to_server"]["lost"].as_u64().unwrap() > 0,
        "{r}"
    );
    assert!(
        r["client_counters"]["Tcp"]["RetransSegs"].as_u64().unwrap() > 0,
        "{r}"
    );
}

#[test]
fn bench_udp_rr_through_loss_resends_requests() {
    // A lost request or echo never comes back: the client sends the request again, so it
    // sent more datagrams than rounds completed, and the server echoed each it got.
    let runs = bench_json("udp-rr --link sim --server ustack --loss 5 --seed 1 --duration 100ms");
    let r = &runs[0];
    assert!(frames(r, "lost") > 0, "{r}");
    let rounds = r["round_trips"].as_u64().unwrap();
    let sent = r["client_counters"]["Udp"]["OutDatagrams"]
        .as_u64()
        .unwrap();
    assert!(sent > rounds, "{sent} requests for {rounds} rounds: {r}");
    assert_eq!(
        r["counters"]["Udp"]["OutDatagrams"], r["counters"]["Udp"]["InDatagrams"],
        "{r}"
    );
}

#[test]
fn bench_over_sim_survives_every_fault_at_once() {
    // The stream moves a byte count, not a time: on a loaded machine 150 ms moved too few
    // 64 KiB frames for a 1% fault to hit one. 64 MiB is about 1,000 data frames and as
    // many ACKs each way.
    let runs = bench_json(
        "--link sim --server ustack --loss 1 --dup 2 --reorder 2 --corrupt 1 --delay 100us \
         --duration 150ms --conns 2 --bytes 64M",
    );
    assert_eq!(runs.len(), 4);
    let stream = &runs[3];
    for fault in ["duplicated", "reordered", "corrupted"] {
        assert!(frames(stream, fault) > 0, "{fault}: {stream}");
    }
    // Corrupted frames fail their checksums at the receiver, which counts them: TCP's, or
    // IP's when the flipped bit is in the IP header (most of a pure ACK's bytes are
    // headers).
    let csum = |side: &str| {
        stream[side]["Tcp"]["InCsumErrors"].as_u64().unwrap()
            + stream[side]["IpExt"]["InCsumErrors"].as_u64().unwrap()
    };
    assert!(csum("counters") + csum("client_counters") > 0, "{stream}");
}

/// A temporary directory of this test's own, removed at the end.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ustack-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run `ustack bench ARGS --plot FILE` (`args` split at spaces), which must succeed;
/// its stdout.
fn bench_plot(args: &str, file: &std::path::Path) -> String {
    let file = file.to_str().expect("a UTF-8 temp path");
    let o = ustack(
        &[
            &["bench"][..],
            &args.split_whitespace().collect::<Vec<_>>(),
            &["--plot", file],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{args}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn bench_plot_writes_a_png_that_decodes_and_an_svg() {
    let dir = TempDir::new("plot");
    let png = dir.0.join("udp-rr.png");
    let out = bench_plot("udp-rr --duration 100ms", &png);
    assert!(out.contains("plot: "), "{out}");
    let bytes = std::fs::read(&png).expect("the PNG was written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "PNG signature");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a frame size")];
    let frame = reader.next_frame(&mut pixels).expect("the image decodes");
    assert!(frame.width > 0 && frame.height > 0);
    // Not a blank page: something other than the background is drawn.
    let first = &pixels[..3];
    assert!(
        pixels.chunks(3).any(|p| p != first),
        "the image has something drawn on it"
    );

    // The default suite, one panel per scenario, as SVG with its text in it.
    let svg = dir.0.join("suite.svg");
    let out = bench_plot("--link sim --duration 50ms --conns 2 --json", &svg);
    // --json keeps stdout one JSON document: the plot's path is not printed there.
    serde_json::from_str::<serde_json::Value>(&out).expect("stdout is one JSON document");
    let text = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{text:.200}"
    );
    assert!(text.trim_end().ends_with("</svg>"), "the SVG is complete");
    for title in [
        "udp-rr: round-trip time",
        "pingpong: round time",
        "cps: connections per second",
        "stream: throughput, Gbit/s",
        "ustack (sim)",
        "linux (loopback)",
    ] {
        assert!(text.contains(title), "{title} in the SVG");
    }
}

#[test]
fn bench_without_a_terminal_says_what_runs_and_draws_no_progress_bar() {
    let args: Vec<&str> = "bench udp-rr --server ustack --duration 50ms"
        .split(' ')
        .collect();
    let o = ustack(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("ustack bench: udp-rr on ustack for 50ms ..."),
        "{err}"
    );
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
}

/// `--link tun`, `packet` and `xdp` need root, and say so (which command, and why)
/// instead of failing half-way: run as `nobody` when the tests run as root.
#[test]
fn bench_over_kernel_links_without_root_says_it_needs_root_and_why() {
    let test = "bench_over_kernel_links_without_root_says_it_needs_root_and_why";
    let root = rustix::process::geteuid().is_root();
    // As root the test drops root with util-linux's setpriv: without it the test skips,
    // or fails under USTACK_REQUIRE_TOOLS (`.ci/run` installs util-linux).
    if root && !ustack_testkit::netns::tool_or_skip(test, "setpriv") {
        return;
    }
    for (link, why) in [
        ("tun", "creates a TUN interface, network namespaces"),
        ("packet", "opens AF_PACKET sockets"),
        ("xdp", "loads an XDP program"),
    ] {
        let args = ["bench", "stream", "--link", link];
        let o = if root {
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_ustack"))
                .args(&args[..])
                .output()
                .expect("run setpriv")
        } else {
            ustack(&args)
        };
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(&format!("--link {link} needs root")), "{e}");
        assert!(e.contains(why), "{e}");
        assert!(o.stdout.is_empty());
    }
}

/// `ustack bench stream --link tun` (root): ustack over a TUN interface with offloads and
/// Linux over a veth pair, the same kernel client; exactly the bytes asked, verified, the
/// ustack server's segments larger than the MTU (super-segments); and again without
/// offloads.
#[test]
fn bench_stream_over_tun_compares_ustack_and_linux_verified() {
    let test = "bench_stream_over_tun_compares_ustack_and_linux_verified";
    if ustack_testkit::netns::root_or_skip(test).is_none() {
        return;
    }
    for offload in [true, false] {
        let flags = if offload { "" } else { " --no-offload" };
        if !offload && !ustack_testkit::netns::tool_or_skip(test, "ethtool") {
            continue;
        }
        let in_segs = stream_over_kernel_link("tun", 32 << 20, flags);
        // With offloads the kernel sent super-segments: far fewer than 1,448-byte ones.
        let mss_segs = (32u64 << 20) / 1448;
        if offload {
            assert!(in_segs < mss_segs / 4, "{in_segs} segments");
        } else {
            assert!(in_segs >= mss_segs, "{in_segs} segments");
        }
    }
}

/// `ustack bench stream --link packet` and `--link xdp` (root): ustack on an `AF_PACKET`
/// or `AF_XDP` socket on a veth end, Linux over a veth pair, the same kernel client;
/// exactly the bytes asked, verified on both, the ustack server's segments MTU-sized (the
/// kernel end's transmit offloads are off) and its CPU time measured.
#[test]
fn bench_stream_over_packet_and_xdp_compares_ustack_and_linux_verified() {
    let test = "bench_stream_over_packet_and_xdp_compares_ustack_and_linux_verified";
    if ustack_testkit::netns::veth_or_skip(test).is_none() {
        return;
    }
    for link in ["packet", "xdp"] {
        let in_segs = stream_over_kernel_link(link, 8 << 20, "");
        assert!(in_segs >= (8u64 << 20) / 1448, "{in_segs} segments");
    }
}

/// `ustack bench stream --link packet|xdp --conns 2 --shards 2` (root): two kernel
/// connections over a veth pair of two queues a side, one on each ustack server shard
/// (the bench balances them), Linux over veth with as many; an odd byte count split
/// over the two and moved exactly, verified on both; each shard received segments and
/// spent CPU; the JSON's ratio is ustack's rate over Linux's, with what Linux ran as.
#[test]
fn bench_stream_over_packet_and_xdp_spreads_two_connections_over_two_queues() {
    let test = "bench_stream_over_packet_and_xdp_spreads_two_connections_over_two_queues";
    if ustack_testkit::netns::veth_or_skip(test).is_none() {
        return;
    }
    let bytes = 8_000_001u64;
    for link in ["packet", "xdp"] {
        let runs = bench_json(&format!(
            "stream --link {link} --bytes {bytes} --conns 2 --shards 2"
        ));
        assert_eq!(runs.len(), 2);
        let (ustack, linux) = (&runs[0], &runs[1]);
        for r in &runs {
            assert_eq!(r["bytes"].as_u64(), Some(bytes), "{r}");
            assert_eq!(
                (r["conns"].as_u64(), r["shards"].as_u64()),
                (Some(2), Some(2))
            );
        }
        let stats = &ustack["link_stats"];
        assert_eq!(
            stats["flows_per_shard"],
            serde_json::json!([1, 1]),
            "{stats}"
        );
        let shards = ustack["per_shard"].as_array().expect("per_shard");
        assert_eq!(shards.len(), 2, "{ustack}");
        for s in shards {
            let in_segs = s["counters"]["Tcp"]["InSegs"].as_u64().unwrap_or(0);
            // Each shard took one connection's half, in MTU-sized segments.
            assert!(in_segs >= bytes / 2 / 1448, "{s}");
            assert!(s["server_cpu_s"].as_f64().unwrap() > 0.0, "{s}");
        }
        let vs = &ustack["vs_linux"];
        let ratio = ustack["throughput_gbps"].as_f64().unwrap()
            / linux["throughput_gbps"].as_f64().unwrap();
        assert!((vs["ratio"].as_f64().unwrap() - ratio).abs() < 1e-9, "{vs}");
        assert_eq!(
            (
                &vs["of"],
                &vs["linux_link"],
                &vs["linux_conns"],
                &vs["linux_mode"]
            ),
            (
                &"Gbit/s".into(),
                &"veth".into(),
                &2.into(),
                &"blocking".into()
            ),
            "{vs}"
        );
    }
}

/// `ustack bench stream --link LINK --bytes BYTES FLAGS`: ustack over `link` and Linux
/// over veth, each moving exactly `bytes`, verified, the ustack server's CPU time
/// measured; the segments the ustack server received.
fn stream_over_kernel_link(link: &str, bytes: u64, flags: &str) -> u64 {
    let runs = bench_json(&format!("stream --link {link} --bytes {bytes}{flags}"));
    assert_eq!(runs.len(), 2);
    let (ustack, linux) = (&runs[0], &runs[1]);
    assert_eq!(
        (&ustack["server"], &ustack["link"]),
        (&"ustack".into(), &link.into())
    );
    assert_eq!(
        (&linux["server"], &linux["link"]),
        (&"linux".into(), &"veth".into())
    );
    for r in &runs {
        assert_eq!(r["bytes"].as_u64(), Some(bytes), "{r}");
        assert!(r["throughput_gbps"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(ustack["server_cpu_s"].as_f64().unwrap() > 0.0, "{ustack}");
    if link == "xdp" {
        // The queue's counters in the JSON: bound with need_wakeup, at most one kick
        // (sendto(2)) per packet it sent, and one kick's budget of at least the kernel's
        // fixed 32 descriptors.
        let x = &ustack["link_stats"]["server"];
        let n = |k: &str| x[k].as_u64().unwrap_or_else(|| panic!("{k}: {x}"));
        assert_eq!(x["need_wakeup"], true, "{x}");
        assert!(n("tx_packets") > 0 && n("tx_kicks") > 0, "{x}");
        assert!(n("tx_kicks") <= n("tx_packets"), "{x}");
        assert!(n("tx_budget") >= 32, "{x}");
    }
    let in_segs = ustack["counters"]["Tcp"]["InSegs"].as_u64().unwrap();
    if link == "tun" {
        // The kernel end's counters: every segment ustack took, it sent; its queue's
        // drops and length are there.
        let k = &ustack["link_stats"]["kernel"];
        assert!(k["tx_packets"].as_u64().unwrap() >= in_segs, "{k}");
        assert!(
            k["tx_dropped"].is_u64() && k["rx_packets"].as_u64() > Some(0),
            "{k}"
        );
        assert_eq!(k["txqueuelen"].as_u64(), Some(4096), "{k}");
    }
    in_segs
}

/// With `--pin`, over shm, ustack's server shard and its client each run pinned to a CPU
/// of its own (as Linux's busy mode pins its server and client), and the JSON says which;
/// with more shards than the CPUs allow, or with `--pin=off`, nothing is pinned and `cpus`
/// is null. cps is pinned by default, pingpong is not.
#[test]
fn bench_over_shm_pins_the_server_and_the_client_to_cpus_of_their_own() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    for shards in ["1", "2"] {
        let o = ustack(&[
            "bench",
            "cps",
            "--server",
            "ustack",
            "--pin",
            "--shards",
            shards,
            "--duration",
            "200ms",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let r = &v[0];
        assert_eq!(r["server"], "ustack", "{r}");
        assert_eq!(r["verified"], true, "{r}");
        let shards: usize = shards.parse().unwrap();
        if n < shards + 1 {
            assert!(r["cpus"].is_null(), "{r}");
            continue;
        }
        let server: Vec<u64> = r["cpus"]["server"]
            .as_array()
            .unwrap_or_else(|| panic!("cpus.server in {r}"))
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        let client = r["cpus"]["client"].as_u64().unwrap();
        assert_eq!(server.len(), shards, "{r}");
        assert!(!server.contains(&client), "{r}");
        assert!(server.iter().all(|&c| (c as usize) < n), "{r}");
    }
    // With `--pin=off` they are left to the scheduler.
    let cpus = |args: &[&str]| {
        let o = ustack(args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v[0]["cpus"].clone()
    };
    let off = cpus(&[
        "bench",
        "cps",
        "--server",
        "ustack",
        "--pin=off",
        "--duration",
        "200ms",
        "--json",
    ]);
    assert!(off.is_null(), "{off}");
    // By default cps is pinned as Linux's busy mode is (client and server each on a CPU
    // of its own), and pingpong is not.
    let cps = cpus(&[
        "bench",
        "cps",
        "--server",
        "ustack",
        "--duration",
        "200ms",
        "--json",
    ]);
    if n >= 2 {
        let client = cps["client"]
            .as_u64()
            .unwrap_or_else(|| panic!("cpus in {cps}"));
        assert_eq!(cps["server"].as_array().map(Vec::len), Some(1), "{cps}");
        assert_ne!(cps["server"][0].as_u64(), Some(client), "{cps}");
    } else {
        assert!(cps.is_null(), "{cps}");
    }
    let pingpong = cpus(&[
        "bench",
        "pingpong",
        "--server",
        "ustack",
        "--duration",
        "200ms",
        "--json",
    ]);
    assert!(pingpong.is_null(), "{pingpong}");
}
