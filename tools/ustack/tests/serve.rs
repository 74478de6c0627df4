//! `ustack serve` over shm with the server in its own process: the test spawns
//! `ustack serve <proto>`, reads the `shm-offer <name>` line, attaches to the link as side
//! B, and runs 64 concurrent verifying clients on a ustack runtime in this process (every
//! echoed byte, every HTTP response checked). Bounded in time; the child is killed by a
//! guard whatever happens.
//!
//! And over tun (root only; skipped otherwise unless `USTACK_REQUIRE_ROOT` is set): the
//! server creates its TUN interface in a namespace of the test's own, the test configures
//! the kernel's end, and a kernel client sends 1 MiB through the echo server.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use ustack_dev::shm::ShmPeer;
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_runtime::servers::{Load, Protocol};
use ustack_stack::EthernetAddress;
use ustack_testkit::netns::{NetNs, PY_ECHO_CLIENT, python_argv, root_or_skip};

const CLIENTS: usize = 64;

/// Kills and reaps the server on drop (a failed assertion included).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve_over_shm(proto: &str, port: u16, per_conn: u64) -> (u64, u64) {
    let addr = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), port);
    let child = Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(["serve", proto, "--link", "shm", "--addr", &addr.to_string()])
        .args(["--duration", "120s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ustack serve");
    let mut guard = Guard(child);
    let stdout = guard.0.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the offer line");
    let name = line
        .strip_prefix("shm-offer ")
        .unwrap_or_else(|| panic!("expected `shm-offer <name>`, got {line:?}"))
        .trim();
    let peer = ShmPeer::connect(name, Duration::from_secs(10)).expect("connect to the offer");
    let port = peer.attach().expect("attach").remove(0);
    let mut rt = RuntimeBuilder::new()
        .ipv4(Ipv4Addr::new(192, 0, 2, 1), 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
        .seed(7)
        .build(port)
        .expect("client runtime");
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
    assert!(
        guard.0.try_wait().expect("child status").is_none(),
        "the server still runs"
    );
    let s = *load.stats();
    (s.finished, s.verified)
}

#[test]
fn echo_server_in_another_process_serves_64_clients_over_shm() {
    let (finished, verified) = serve_over_shm("echo", 7, 10);
    assert_eq!((finished, verified), (CLIENTS as u64, CLIENTS as u64 * 10));
}

#[test]
fn http_server_in_another_process_serves_64_keep_alive_clients_over_shm() {
    let (finished, verified) = serve_over_shm("http", 80, 10);
    assert_eq!((finished, verified), (CLIENTS as u64, CLIENTS as u64 * 10));
}

#[test]
fn echo_server_over_tun_serves_a_kernel_client() {
    if root_or_skip("echo_server_over_tun_serves_a_kernel_client").is_none() {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let netns = ns.path().display().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(["serve", "echo", "--link", "tun", "--tun", "tun0"])
        .args([
            "--netns",
            &netns,
            "--addr",
            "192.0.2.2:7",
            "--duration",
            "5s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ustack serve");
    let mut guard = Guard(child);
    let mut stdout = BufReader::new(guard.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("the ready line");
    assert_eq!(line.trim(), "tun-ready tun0");
    ns.configure_tun("tun0").expect("the kernel's end");
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
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("the counters");
    assert!(guard.0.wait().expect("exit").success());
    assert!(
        rest.contains(&format!(
            "accepted=1 closed=1 errors=0 bytes_in={n} bytes_out={n}"
        )),
        "{rest}"
    );
}
