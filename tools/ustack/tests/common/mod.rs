//! `ustack serve` in a child process for the tool's tests: spawned with a control socket
//! of its own (so tests run in parallel), killed and reaped on drop, and a client runtime
//! attached to its shm link.

#![allow(dead_code)] // each test file uses what it needs

use core::net::Ipv4Addr;
use core::time::Duration;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use ustack_dev::shm::{ShmPeer, ShmPort};
use ustack_runtime::RssSplitter;
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{MonotonicClock, Runtime, RuntimeBuilder};
use ustack_stack::EthernetAddress;

/// A running `ustack serve`.
pub struct Served {
    pub child: Child,
    pub stdout: BufReader<ChildStdout>,
    /// Its control socket, in a directory of this test's own.
    pub control: PathBuf,
    dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Start `ustack serve ARGS --control <a fresh path>`.
pub fn spawn_serve(args: &[&str]) -> Served {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ustack-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let control = dir.join("serve.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ustack"))
        .arg("serve")
        .args(args)
        .arg("--control")
        .arg(&control)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ustack serve");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    Served {
        child,
        stdout,
        control,
        dir,
    }
}

impl Served {
    /// The first line of its output.
    pub fn first_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("a line from the server");
        line.trim().to_owned()
    }

    /// Read the `shm-offer <name>` line and attach to the link as side B: a client
    /// runtime at 192.0.2.1 steering frames to the server's shards by RSS.
    pub fn attach(&mut self, shards: usize) -> Runtime<RssSplitter<ShmPort>, MonotonicClock> {
        self.attach_with(shards, |b| b)
    }

    /// [`Served::attach`] with the client's runtime builder changed by `with` (an IPv6
    /// address added, say).
    pub fn attach_with(
        &mut self,
        shards: usize,
        with: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
    ) -> Runtime<RssSplitter<ShmPort>, MonotonicClock> {
        let line = self.first_line();
        let name = line
            .strip_prefix("shm-offer ")
            .unwrap_or_else(|| panic!("expected `shm-offer <name>`, got {line:?}"));
        let peer = ShmPeer::connect(name, Duration::from_secs(10)).expect("connect to the offer");
        let ports = peer.attach().expect("attach");
        assert_eq!(ports.len(), shards, "one queue pair per shard");
        let device =
            RssSplitter::new(ports, Rss::new(RssKey::MICROSOFT, shards)).replicate_unhashed(true);
        let builder = RuntimeBuilder::new()
            .ipv4(Ipv4Addr::new(192, 0, 2, 1), 24)
            .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
            .seed(7);
        with(builder).build(device).expect("client runtime")
    }

    /// Run `ustack ARGS --control <this server's socket>`.
    pub fn tool(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ustack"))
            .args(args)
            .arg("--control")
            .arg(&self.control)
            .output()
            .expect("run ustack")
    }
}

/// `ustack <args> --control <server's socket>`, which must succeed; its stdout as JSON.
pub fn tool_json(server: &ustack_testkit::netns::ServeOverTun, args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(args)
        .arg("--control")
        .arg(server.control())
        .stdin(Stdio::null())
        .output()
        .expect("run ustack");
    assert!(
        out.status.success(),
        "ustack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The count of one kind in `ustack stat --memory --json`.
pub fn memory_count(memory: &serde_json::Value, kind: &str) -> u64 {
    memory["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|k| k["kind"] == kind)
        .and_then(|k| k["count"].as_u64())
        .unwrap_or_else(|| panic!("no {kind} in {memory}"))
}

/// The resident set of a process, in bytes.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// The release build of `ustack` beside this test's debug one (`target/release/ustack`),
/// built first if it is missing or stale (`cargo build --release --locked -p ustack`, a
/// no-op in CI, whose test script builds it before the tests; bounded by `timeout`).
pub fn release_ustack() -> std::path::PathBuf {
    let debug = std::path::Path::new(env!("CARGO_BIN_EXE_ustack"));
    let target = debug
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the target directory");
    let out = std::process::Command::new("timeout")
        .arg("1200")
        .arg(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "ustack",
            "--target-dir",
        ])
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .expect("running cargo build --release");
    assert!(
        out.status.success(),
        "cargo build --release -p ustack: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release").join("ustack")
}

/// What a user checks of `ustack bench c1m --syn-flood RATE` with `n` connections held
/// for at least `hold_s` (issue #12 item 5): many times more SYNs went out than the SYN
/// queue holds (the rate itself is the bench's input, not a check: a loaded machine sends
/// fewer); the server's SYN queue never held more than its bound (backlog + 1) and SYN
/// cookies answered the rest (its own TcpExtSyncookiesSent); every held connection still
/// exchanged its message afterwards; the server's RSS grew by at most 5% over the flood.
pub fn check_syn_flood(r: &serde_json::Value, n: u64, hold_s: f64) {
    assert_eq!(r["connections"], n, "{r}");
    assert_eq!(r["round_trips"], n, "{r}");
    let f = &r["syn_flood"];
    let num = |k: &str| {
        f[k].as_f64()
            .unwrap_or_else(|| panic!("syn_flood.{k}: {f}"))
    };
    let sent = num("syns_sent");
    assert!(num("flood_s") >= hold_s, "{f}");
    // Half-open state stays bounded: the SYN queue at most backlog + 1, cookies beyond.
    let (peak, bound) = (num("server_syn_queue_peak"), num("server_syn_queue_bound"));
    assert_eq!(bound, 4097.0, "{f}");
    assert!(sent >= 3.0 * bound, "a flood, not a trickle: {f}");
    assert!(
        0.0 < peak && peak <= bound,
        "SYN queue peak {peak} of {bound}: {f}"
    );
    let cookies = num("server_syncookies_sent");
    assert!(cookies + peak <= sent, "{f}");
    assert!(
        cookies >= sent - bound - 0.1 * sent,
        "cookies answered the rest: {f}"
    );
    // The server's own counter at the end of the run: the flood's cookies, and those for
    // SYNs still on the link when the flood's figures were read; every SYN sent got a
    // queue slot or a cookie.
    let total = r["counters"]["TcpExt"]["SyncookiesSent"].as_f64().unwrap();
    assert!(cookies <= total && total + peak <= sent, "{total}: {f}");
    for k in ["server_listen_overflows", "server_listen_drops"] {
        assert!(num(k) >= 0.0, "{k}: {f}");
    }
    let pct = num("server_rss_growth_pct");
    assert!(
        pct <= 5.0,
        "server RSS grew {pct:.2}% during the flood: {f}"
    );
    assert!(num("server_rss_before_bytes") > 0.0, "{f}");
}

/// What a user checks of `ustack bench c1m --send 4096` with `n` connections against a
/// server whose `tcp_mem` budget is `budget_pages` (issue #12 item 8): the server went
/// under memory pressure and refused data with counted reasons; its buffers never held
/// more than the budget; its control line kept answering while it did; once it read
/// again, every connection's 4 KiB came back intact, none was aborted, and every
/// connection's one-message exchange completed.
pub fn check_surge(r: &serde_json::Value, n: u64, budget_pages: u64) {
    assert_eq!(r["round_trips"], n, "{r}");
    let s = &r["surge"];
    assert_eq!(s["demand_bytes"], 4096 * n, "{s}");
    assert_eq!(
        s["echoed_while_unread_bytes"], 0,
        "the server did not read: {s}"
    );
    let c = &s["server_counters"];
    assert!(c["TCPMemoryPressures"].as_u64() >= Some(1), "{s}");
    let refused = c["PROTO_MEM"].as_u64().unwrap();
    assert!(refused > 0, "data refused for memory: {s}");
    assert_eq!(
        c["TCPRcvQDrop"].as_u64().unwrap() + c["TCPOFODrop"].as_u64().unwrap(),
        refused,
        "{s}"
    );
    let peak = s["server_buffers_peak_bytes"].as_u64().unwrap();
    assert!(
        0 < peak && peak <= budget_pages * 4096,
        "buffers {peak} B within the budget: {s}"
    );
    assert!(
        s["control_samples"].as_u64() >= Some(3),
        "the control line answered: {s}"
    );
    assert_eq!(s["completed"], n, "{s}");
    assert_eq!(s["intact"], n, "{s}");
    assert_eq!(s["aborted"], 0, "{s}");
    assert_eq!(c["TCPAbortOnMemory"], 0, "{s}");
}
