//! `ustack serve` over shm with the server in its own process: the test spawns
//! `ustack serve <proto>`, reads the `shm-offer <name>` line, attaches to the link as side
//! B, and runs 64 concurrent verifying clients on a ustack runtime in this process (every
//! echoed byte, every HTTP response checked). With `--shards 2` the link has two queue
//! pairs and the clients' runtime steers every frame to its shard's queue through an
//! `RssSplitter`, as a NIC with RSS would. Bounded in time; the child is killed by a guard
//! whatever happens.
//!
//! And over tun (root only; skipped otherwise unless `USTACK_REQUIRE_ROOT` is set): the
//! server creates its TUN interface in a namespace of the test's own, the test configures
//! the kernel's end, and a kernel client sends 1 MiB through the echo server.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;
use std::io::Read;

mod common;
use common::spawn_serve;

use ustack_apps::{Load, Protocol};
use ustack_stack::AddrState;
use ustack_testkit::netns::{
    NetNs, PY_ECHO_CLIENT, ServeOverTun, VETH_USTACK, python_argv, root_or_skip, tool_or_skip,
    veth_or_skip,
};

const CLIENTS: usize = 64;
/// The clients' IPv6 address when the server's is an IPv6 one.
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// Run `ustack serve <proto> --shards <shards>` and 64 clients of `per_conn` exchanges
/// against it. With `duration`, the server stops on its own after it and the run reads its
/// report; without, the server is killed once the clients are done. Asserts that every
/// client finished with every exchange verified; returns the server's report (the stdout
/// after the offer line; empty without `duration`).
fn serve_over_shm(
    proto: &str,
    port: u16,
    per_conn: u64,
    shards: usize,
    duration: Option<&str>,
) -> String {
    let addr = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), port);
    serve_over_shm_at(proto, addr.into(), per_conn, shards, duration)
}

/// [`serve_over_shm`] with the server at `addr`, of either family (an IPv6 one: the
/// clients' runtime gets 2001:db8::1/64 and connects once its address is usable).
fn serve_over_shm_at(
    proto: &str,
    addr: SocketAddr,
    per_conn: u64,
    shards: usize,
    duration: Option<&str>,
) -> String {
    let (addr_s, shards_s) = (addr.to_string(), shards.to_string());
    let mut guard = spawn_serve(&[
        proto,
        "--link",
        "shm",
        "--addr",
        &addr_s,
        "--duration",
        duration.unwrap_or("120s"),
        "--shards",
        &shards_s,
    ]);
    let mut rt = guard.attach_with(shards, |b| match addr {
        SocketAddr::V6(_) => b.ipv6(CLIENT6, 64),
        SocketAddr::V4(_) => b,
    });
    // Duplicate address detection (a second on this Ethernet link) before connecting.
    let dad = std::time::Instant::now() + Duration::from_secs(10);
    while matches!(
        rt.stack().ipv6_addr_state(CLIENT6),
        Some(AddrState::Tentative { .. })
    ) {
        assert!(std::time::Instant::now() < dad, "DAD did not end");
        rt.run_once(Some(Duration::from_millis(10)))
            .expect("client loop");
    }
    let stdout = &mut guard.stdout;
    let proto = Protocol::from_name(proto).expect("protocol");
    let mut load = Load::start(&mut rt, proto, addr, CLIENTS, per_conn).expect("clients");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !load.done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not done in 60 s: {load:?}"
        );
        load.step(&mut rt, Some(Duration::from_millis(10)))
            .expect("every reply verified");
    }
    let mut server_output = String::new();
    if duration.is_some() {
        // Let the closes finish while the server runs out its time, then read its report.
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while guard.child.try_wait().expect("child status").is_none() {
            assert!(std::time::Instant::now() < until, "the server did not stop");
            rt.run_once(Some(Duration::from_millis(10)))
                .expect("client loop");
        }
        stdout
            .read_to_string(&mut server_output)
            .expect("the server's report");
    } else {
        assert!(
            guard.child.try_wait().expect("child status").is_none(),
            "the server still runs"
        );
    }
    let s = *load.stats();
    assert_eq!(
        (s.finished, s.verified),
        (CLIENTS as u64, CLIENTS as u64 * per_conn),
        "every client done, every exchange verified"
    );
    server_output
}

/// The `accepted=` count of the server's report line starting with `label`.
fn accepted(output: &str, label: &str) -> u64 {
    let line = output
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` line in {output:?}"));
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("accepted="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no accepted= in {line:?}"))
}

#[test]
fn echo_server_in_another_process_serves_64_clients_over_shm() {
    serve_over_shm("echo", 7, 10, 1, None);
}

#[test]
fn http_server_in_another_process_serves_64_keep_alive_clients_over_shm() {
    serve_over_shm("http", 80, 10, 1, None);
}

#[test]
fn sharded_echo_server_accepts_on_every_shard() {
    let report = serve_over_shm("echo", 7, 10, 2, Some("3s"));
    // RSS spread the 64 connections over both shards, and every one was accepted once.
    let (s0, s1) = (accepted(&report, "shard 0:"), accepted(&report, "shard 1:"));
    assert!(s0 > 0 && s1 > 0, "{}", report);
    assert_eq!(s0 + s1, CLIENTS as u64, "{}", report);
    assert_eq!(accepted(&report, "served:"), CLIENTS as u64);
}

/// IPv6 over shm, two shards: the server binds [2001:db8::2]:7 once duplicate address
/// detection has passed, RSS (the IPv6 4-tuple's hash; neighbour discovery copied to both
/// queues) spreads the 64 connections over both shards, every echo verified; the report
/// names the IPv6 address.
#[test]
fn sharded_echo_server_over_shm_speaks_ipv6() {
    let addr: SocketAddr = "[2001:db8::2]:7".parse().unwrap();
    let report = serve_over_shm_at("echo", addr, 10, 2, Some("4s"));
    let (s0, s1) = (accepted(&report, "shard 0:"), accepted(&report, "shard 1:"));
    assert!(s0 > 0 && s1 > 0, "{}", report);
    assert_eq!(s0 + s1, CLIENTS as u64, "{}", report);
}

/// `ustack connect` and `ustack get` attach to a `ustack serve --link shm` offer over
/// IPv6, each in a process of its own: the echo server (2 shards: the client steers by
/// the IPv6 4-tuple's hash) sends back what `connect` wrote, the HTTP server answers
/// `get` with 200; the server counts one connection each.
#[test]
fn connect_and_get_reach_a_served_ipv6_address_over_shm() {
    for (proto, shards, url) in [
        ("echo", "2", "[2001:db8::1]:7"),
        ("http", "1", "http://[2001:db8::1]:80/"),
    ] {
        let addr = if proto == "echo" {
            "[2001:db8::1]:7"
        } else {
            "[2001:db8::1]:80"
        };
        let mut guard = spawn_serve(&[
            proto,
            "--link",
            "shm",
            "--addr",
            addr,
            "--shards",
            shards,
            "--duration",
            "4s",
        ]);
        let line = guard.first_line();
        let name = line.strip_prefix("shm-offer ").expect("an offer line");
        let command = if proto == "echo" { "connect" } else { "get" };
        let mut client = std::process::Command::new(env!("CARGO_BIN_EXE_ustack"))
            .args([command, url, "--link", "shm", "--shm", name])
            .args(["--addr", "[2001:db8::2]", "--connect-timeout", "5s"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the client");
        {
            use std::io::Write;
            let mut stdin = client.stdin.take().expect("stdin");
            stdin.write_all(b"hello over IPv6\n").expect("write stdin");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while client.try_wait().expect("client status").is_none() {
            if std::time::Instant::now() > deadline {
                let _ = client.kill();
                panic!("ustack {command} did not finish in 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = client.wait_with_output().expect("client output");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{command}: {stderr}");
        if proto == "echo" {
            assert_eq!(stdout, "hello over IPv6\n", "{stderr}");
        } else {
            assert!(stderr.contains("ustack get: HTTP 200,"), "{stderr}");
        }
        let mut report = String::new();
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while guard.child.try_wait().expect("server status").is_none() {
            assert!(std::time::Instant::now() < until, "the server did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
        guard
            .stdout
            .read_to_string(&mut report)
            .expect("the report");
        assert_eq!(accepted(&report, "served:"), 1, "{report}");
    }
}

#[test]
fn echo_server_over_tun_serves_a_kernel_client() {
    if root_or_skip("echo_server_over_tun_serves_a_kernel_client").is_none() {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let server = ServeOverTun::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_ustack")),
        &ns,
        &["echo", "--addr", "192.0.2.2:7", "--duration", "5s"],
    )
    .expect("ustack serve over tun");
    let n = 1 << 20;
    let out = ns
        .run(
            Duration::from_secs(20),
            &python_argv(
                PY_ECHO_CLIENT,
                &[n.to_string(), "192.0.2.2".into(), "7".into()],
            ),
        )
        .expect("the kernel client");
    let out = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent, echoed, got] = fields[..] else {
        panic!("client printed `{out}`");
    };
    assert_eq!((echoed, got), (sent, n.to_string().as_str()), "the echo");
    // The server ends after --duration and prints its counters.
    let rest = server.finish().expect("ustack serve's counters");
    assert!(
        rest.contains(&format!(
            "accepted=1 closed=1 errors=0 bytes_in={n} bytes_out={n}"
        )),
        "{rest}"
    );
}

/// `ustack serve http --link packet` and `--link xdp` on two shards (root): the server
/// takes the ustack end of a veth pair with two queues a side in a namespace of the
/// test's own (an AF_PACKET socket per shard in one fanout group; an AF_XDP socket per
/// receive queue), says `<link>-ready veth1`, and answers 16 curl fetches from the
/// kernel's end, each a connection of its own; stopped by SIGTERM, it reports 16
/// accepted and answered, and both shards took some (the kernel spreads flows by their
/// hash: all 16 on one is a 1 in 32,768 chance).
#[test]
fn http_server_over_packet_and_xdp_answers_kernel_clients_on_two_shards() {
    let test = "http_server_over_packet_and_xdp_answers_kernel_clients_on_two_shards";
    if veth_or_skip(test).is_none() || !tool_or_skip(test, "curl") {
        return;
    }
    for link in ["packet", "xdp"] {
        let ns = NetNs::new().expect("a namespace");
        ns.veth_pair_queues(2)
            .expect("a veth pair of two queues a side");
        let server = ServeOverTun::start_on(
            std::path::Path::new(env!("CARGO_BIN_EXE_ustack")),
            &ns,
            &[
                "http",
                "--addr",
                "192.0.2.2:80",
                "--shards",
                "2",
                "--duration",
                "30s",
            ],
            &["--link", link, "--interface", VETH_USTACK],
            &format!("{link}-ready {VETH_USTACK}"),
        )
        .unwrap_or_else(|e| panic!("ustack serve over {link}: {e}"));
        let fetches = "for i in $(seq 16); do curl -s --max-time 5 http://192.0.2.2/ \
                       || echo FAILED; echo; done";
        let out = ns
            .run(Duration::from_secs(40), &["sh", "-c", fetches])
            .expect("the kernel's curl fetches");
        let out = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.matches("Hello, World!").count(), 16, "{link}: {out}");
        let report = server.terminate().expect("ustack serve's counters");
        assert_eq!(accepted(&report, "served:"), 16, "{link}: {report}");
        assert!(report.contains("http_200=16"), "{link}: {report}");
        for shard in ["shard 0:", "shard 1:"] {
            assert!(accepted(&report, shard) > 0, "{link}: {report}");
        }
    }
}
