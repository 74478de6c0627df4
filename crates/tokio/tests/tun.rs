//! The ecosystem on ustack over a TUN interface, the Linux kernel as the peer, in a
//! namespace of the test's own:
//!
//! - the `axum_hello` example's application (compiled in) on `axum::serve` with a ustack
//!   listener serves curl in the namespace: `GET /`, `POST /echo` with a JSON body, a 10 MiB file compared by
//!   SHA-256, and two requests on one keep-alive connection;
//! - wrk in the namespace loads the same application (50 connections, 2 s): no socket
//!   error, no non-2xx answer;
//! - 2,000 idle keep-alive connections to the same application, each served one request:
//!   the server's RSS growth per connection is bounded (the test's own process: nextest
//!   runs each test in one);
//! - model (b), a `LocalStack` on the test's current-thread runtime, echoes 1 MiB for a
//!   kernel client, and serves the application to curl as the example's `--local` does;
//! - a hyper client on ustack fetches a file from `python3 -m http.server` in the
//!   namespace, compared by SHA-256.
//!
//! Without root, `/dev/net/tun` or the tools each test skips with a note, unless
//! `USTACK_REQUIRE_ROOT` (`USTACK_REQUIRE_TOOLS` for curl, wrk and python3) is set, as in CI,
//! which makes that a failure. Every command is bounded by `timeout`; the namespace and
//! the processes go when their guards drop, on failure too.

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};
use ustack_runtime::RuntimeBuilder;
use ustack_testkit::netns::{KERNEL_IP, NetNs, TunRig, USTACK_IP, root_or_skip, tool_or_skip};
use ustack_tokio::Net;

const LIMIT: Duration = Duration::from_secs(60);
const BIG: usize = 10 * 1024 * 1024;

#[path = "support/common.rs"]
mod common;
use common::{Kill, TempDir};

/// Writes `n` bytes of a pattern to `path`; their SHA-256 in hex.
fn big_file(path: &Path, n: usize, salt: u64) -> String {
    let data = ustack_testkit::pattern(n, salt);
    std::fs::write(path, &data).unwrap();
    hex(&Sha256::digest(&data))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The `axum_hello` example's application (its `app`), compiled into this test.
#[path = "../examples/axum_hello.rs"]
#[allow(dead_code)]
mod axum_hello;

/// Root (for the TUN) and `tool` on the PATH, or a skip with a note (a failure under
/// `USTACK_REQUIRE_ROOT` / `USTACK_REQUIRE_TOOLS`).
fn root_and(test: &str, tool: &str) -> bool {
    root_or_skip(test).is_some() && tool_or_skip(test, tool)
}

/// Runs `argv` in the namespace, bounded; its stdout.
fn run(ns: &NetNs, argv: &[&str]) -> String {
    let out = ns.run(LIMIT, argv).expect("command in the namespace");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `axum_hello` example's application served as the example serves it, on a ustack
/// listener at [`USTACK_IP`]:80 over a new TUN rig, on a 2-worker tokio runtime (kept
/// alive by the caller).
fn axum_over_tun(root: &Path, seed: u64) -> (TunRig, tokio::runtime::Runtime) {
    let (rig, rt, _net) = axum_over_tun_net(root, seed);
    (rig, rt)
}

/// [`axum_over_tun`], and the stack's [`Net`].
fn axum_over_tun_net(root: &Path, seed: u64) -> (TunRig, tokio::runtime::Runtime, Net) {
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let queues = core::mem::take(&mut rig.queues);
    let net = Net::tun(RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(seed), queues).unwrap();
    let listener = ustack_tokio::TcpListener::bind(&net, (USTACK_IP, 80)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.spawn(axum::serve(listener, axum_hello::app(root.to_owned())).into_future());
    (rig, rt, net)
}

/// wrk from the kernel's side against axum on ustack (50 connections for 2 s, as
/// `ustack serve http` is loaded in tools/ustack/tests/interop.rs): requests answered, no
/// socket error (connect, read, write, timeout) and no non-2xx answer.
#[test]
fn wrk_loads_axum_over_tun_without_errors() {
    if !root_and("wrk_loads_axum_over_tun_without_errors", "wrk") {
        return;
    }
    let root = TempDir::new("wrk");
    let (rig, _rt) = axum_over_tun(&root.0, 10);
    let out = run(
        &rig.ns,
        &[
            "wrk",
            "-t2",
            "-c50",
            "-d2s",
            "--timeout",
            "2s",
            &format!("http://{USTACK_IP}:80/"),
        ],
    );
    eprintln!("wrk -t2 -c50 -d2s against axum on ustack over tun:\n{out}");
    let requests: u64 = out
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no request count in `{out}`"));
    assert!(requests > 100, "{out}");
    assert!(!out.contains("Socket errors"), "{out}");
    assert!(!out.contains("Non-2xx"), "{out}");
}

#[test]
fn axum_hello_serves_curl_over_tun() {
    if !root_and("axum_hello_serves_curl_over_tun", "curl") {
        return;
    }
    let root = TempDir::new("axum");
    let want = big_file(&root.0.join("big.bin"), BIG, 5);
    let (rig, _rt) = axum_over_tun(&root.0, 8);
    let ns = &rig.ns;
    let base = format!("http://{USTACK_IP}:80");
    let curl = |args: &[&str]| {
        let mut argv = vec!["curl", "-sS", "--fail", "--max-time", "30"];
        argv.extend_from_slice(args);
        run(ns, &argv)
    };

    assert_eq!(curl(&[&format!("{base}/")]), "Hello, World!");

    let json = r#"{"name":"ustack","list":[1,2,3],"nested":{"ok":true}}"#;
    let echoed = curl(&[
        "-H",
        "content-type: application/json",
        "--data-binary",
        json,
        &format!("{base}/echo"),
    ]);
    let parsed: serde_json::Value = serde_json::from_str(&echoed).expect("JSON back");
    assert_eq!(
        parsed,
        serde_json::from_str::<serde_json::Value>(json).unwrap()
    );

    let got = run(
        ns,
        &[
            "sh",
            "-c",
            &format!("curl -sS --fail --max-time 30 {base}/files/big.bin | sha256sum"),
        ],
    );
    assert_eq!(
        got.split_whitespace().next(),
        Some(want.as_str()),
        "10 MiB file"
    );

    assert!(
        run(
            ns,
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &format!("{base}/files/nope")
            ]
        ) == "404"
    );

    // Two requests in one curl: the second on the first's connection (no new connect).
    let conns = curl(&[
        "-o",
        "/dev/null",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}:%{num_connects} ",
        &format!("{base}/"),
        &format!("{base}/files/big.bin"),
    ]);
    assert_eq!(conns.trim(), "200:1 200:0", "keep-alive reuse");
}

/// The idle-connection holder (`support/idle_holder.py`): arguments `HOST PORT N GET`.
const IDLE_HOLDER: &str = include_str!("support/idle_holder.py");
/// Connections [`idle_axum_connections_cost_a_few_kilobytes_each`] holds.
const IDLE_CONNS: usize = 2_000;
/// Its bound on the server's RSS growth per idle connection (the stack, ustack-net,
/// ustack-tokio, axum's task with hyper's buffers): 20.3 KB measured, debug and release
/// alike, of which the stack's accounting is about 0.9 KB and hyper and axum about
/// 19 KB, as on the kernel's sockets (docs/api.md). Zeroing hyper's 8 KiB read buffer on
/// every read (tokio's `ReadBuf::initialize_unfilled`) made it 28.4 KB.
const IDLE_BYTES_PER_CONN: u64 = 24 * 1024;

/// This process's resident set, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// The stack's TCP connections in `state` (ss's name: `ESTAB`, `CLOSE-WAIT`, ...), or in
/// any state but LISTEN for `None`.
fn connections(net: &Net, state: Option<&'static str>) -> usize {
    net.on_each_shard(move |rt| {
        let now = rt.now();
        rt.stack()
            .sockets(now)
            .iter()
            .filter(|s| match state {
                Some(want) => s.state == want,
                None => s.state != "LISTEN" && s.state != "UNCONN",
            })
            .count()
    })
    .unwrap()
    .iter()
    .sum()
}

/// [`IDLE_CONNS`] kernel connections to axum on ustack, each served one `GET /` and then
/// held idle (axum's task per connection waiting in hyper for the next request): all are
/// established and answered, and the test process's RSS grows by less than
/// [`IDLE_BYTES_PER_CONN`] each; once the client closes them the stack holds none.
#[test]
fn idle_axum_connections_cost_a_few_kilobytes_each() {
    if !root_and("idle_axum_connections_cost_a_few_kilobytes_each", "python3") {
        return;
    }
    let root = TempDir::new("idle");
    let (rig, _rt, net) = axum_over_tun_net(&root.0, 11);
    let holder = |n: usize| {
        let n = n.to_string();
        let port = "80".to_string();
        let ip = USTACK_IP.to_string();
        let child = rig
            .ns
            .command(
                Duration::from_secs(120),
                &["python3", "-c", IDLE_HOLDER, &ip, &port, &n, "1"],
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 holder");
        let mut child = Kill(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.0.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        (child, line.trim().to_owned())
    };
    // Warm up: a few connections served and closed, so that the runtime's workers, the
    // allocator's arenas and the code paths are in place before the baseline.
    let (warm, line) = holder(20);
    assert_eq!(line, "held 20 ok 20 failed 0");
    drop(warm);
    wait_until(|| connections(&net, None) == 0);
    let before = rss();
    let (mut conns, line) = holder(IDLE_CONNS);
    assert_eq!(
        line,
        format!("held {IDLE_CONNS} ok {IDLE_CONNS} failed 0"),
        "every connection answered and held"
    );
    assert_eq!(connections(&net, Some("ESTAB")), IDLE_CONNS);
    let per_conn = rss().saturating_sub(before) / IDLE_CONNS as u64;
    let stack: Vec<(&str, usize)> = net
        .on_each_shard(|rt| rt.memory())
        .unwrap()
        .iter()
        .flat_map(|m| m.kinds.iter().map(|k| (k.name, k.bytes / IDLE_CONNS)))
        .filter(|(_, b)| *b > 0)
        .collect();
    eprintln!(
        "{IDLE_CONNS} idle axum connections on ustack: {per_conn} B of RSS each; \
         the stack's accounting per connection: {stack:?}"
    );
    assert!(
        per_conn < IDLE_BYTES_PER_CONN,
        "{per_conn} B per idle connection, bound {IDLE_BYTES_PER_CONN}"
    );
    // The client closes them all: the stack keeps none (axum's tasks end, their streams
    // drop and close).
    drop(conns.0.stdin.take());
    drop(conns);
    wait_until(|| connections(&net, None) == 0);
}

/// Waits (up to 20 s) for `f`; panics if it never holds.
fn wait_until(f: impl Fn() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < end, "timed out waiting");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A kernel client: sends 1 MiB of random bytes to HOST:PORT from one thread while
/// reading the echo on another, compares, prints `echoed N`.
const PY_ECHO_1M: &str = r#"
import os, socket, sys, threading
data = os.urandom(1 << 20)
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR))).start()
got = bytearray()
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
print("echoed", len(got) if bytes(got) == data else -1)
"#;

/// Runs `argv` in the namespace at `ns` (bounded: 60 s) on a thread of its own, awaited
/// without blocking the test's current-thread runtime, which serves it meanwhile.
async fn run_beside(ns: &Path, argv: Vec<String>) -> std::process::Output {
    let ns = ns.to_owned();
    let t = std::thread::spawn(move || {
        std::process::Command::new("timeout")
            .args(["60", "nsenter", &format!("--net={}", ns.display())])
            .args(argv)
            .output()
            .expect("a command in the namespace")
    });
    while !t.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t.join().unwrap()
}

/// `f` on a `LocalStack` (seeded `seed`) over a new TUN rig, inside a current-thread
/// runtime's `LocalSet`; `f` gets the namespace's path for [`run_beside`].
fn on_local_stack<T, F: core::future::Future<Output = T>>(
    seed: u64,
    f: impl FnOnce(ustack_tokio::local::LocalStack, PathBuf) -> F,
) -> T {
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let queue = rig.queues.pop().expect("one queue");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ns = rig.ns.path().to_owned();
    tokio::task::LocalSet::new().block_on(&rt, async {
        let builder = RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(seed);
        let stack = ustack_tokio::local::LocalStack::new(builder, queue).unwrap();
        f(stack, ns).await
    })
}

/// Model (b) over a TUN interface: a `LocalStack` on the test's current-thread runtime
/// (the TUN queue's file on tokio's reactor) echoes 1 MiB for a kernel client in the
/// namespace, compared byte for byte by the client.
#[test]
fn local_stack_echoes_a_kernel_client_over_tun() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use ustack_tokio::local::LocalTcpListener;
    if !root_and("local_stack_echoes_a_kernel_client_over_tun", "python3") {
        return;
    }
    let out = on_local_stack(12, |stack, ns| async move {
        let listener = LocalTcpListener::bind(&stack, (USTACK_IP, 7).into()).unwrap();
        tokio::task::spawn_local(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match s.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => s.write_all(&buf[..n]).await.unwrap(),
                }
            }
        });
        let argv = ["python3", "-c", PY_ECHO_1M, &USTACK_IP.to_string(), "7"];
        run_beside(&ns, argv.map(String::from).to_vec()).await
    });
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "echoed 1048576",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `axum_hello` application on model (b) as the example's `--local` serves it (hyper's
/// HTTP/1 server per connection on the `LocalSet`): curl's `GET /`, `POST /echo` with JSON,
/// and two requests on one keep-alive connection.
#[test]
fn axum_on_a_local_stack_serves_curl_over_tun() {
    use ustack_tokio::local::LocalTcpListener;
    if !root_and("axum_on_a_local_stack_serves_curl_over_tun", "curl") {
        return;
    }
    let root = TempDir::new("axum-local");
    let base = format!("http://{USTACK_IP}:80");
    let json = r#"{"model":"b","n":[1,2]}"#;
    let got = on_local_stack(13, |stack, ns| async move {
        let listener = LocalTcpListener::bind(&stack, (USTACK_IP, 80).into()).unwrap();
        tokio::task::spawn_local(axum_hello::serve_local(
            listener,
            axum_hello::app(root.0.clone()),
        ));
        let mut got = Vec::new();
        let requests = [
            vec![format!("{base}/")],
            vec![
                "-H".into(),
                "content-type: application/json".into(),
                "--data-binary".into(),
                json.into(),
                format!("{base}/echo"),
            ],
            vec![
                "-o".into(),
                "/dev/null".into(),
                "-o".into(),
                "/dev/null".into(),
                "-w".into(),
                "%{http_code}:%{num_connects} ".into(),
                format!("{base}/"),
                format!("{base}/"),
            ],
        ];
        for args in requests {
            let mut argv: Vec<String> = ["curl", "-sS", "--fail", "--max-time", "20"]
                .map(String::from)
                .to_vec();
            argv.extend(args);
            let out = run_beside(&ns, argv).await;
            got.push(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        got
    });
    assert_eq!(got[0], "Hello, World!");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&got[1]).expect("JSON back"),
        serde_json::from_str::<serde_json::Value>(json).unwrap()
    );
    assert_eq!(got[2].trim(), "200:1 200:0", "keep-alive reuse");
}

/// A hyper client on ustack fetching from a kernel HTTP server in the namespace.
#[test]
fn hyper_client_fetches_from_a_kernel_http_server_over_tun() {
    if !root_and(
        "hyper_client_fetches_from_a_kernel_http_server_over_tun",
        "python3",
    ) {
        return;
    }
    let dir = TempDir::new("hyper");
    let want = big_file(&dir.0.join("data.bin"), 4 * 1024 * 1024, 6);
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let queues = core::mem::take(&mut rig.queues);
    let net = Net::tun(RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(9), queues).unwrap();
    let server = rig
        .ns
        .command(
            Duration::from_secs(120),
            &[
                "python3",
                "-m",
                "http.server",
                "8000",
                "--bind",
                &KERNEL_IP.to_string(),
                "--directory",
                &dir.0.to_string_lossy(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 -m http.server");
    let _server = Kill(server);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        tokio::time::timeout(LIMIT, fetch(&net, "/data.bin"))
            .await
            .expect("in time")
    });
    assert_eq!(got.0, 200);
    assert_eq!(got.1, 4 * 1024 * 1024, "length");
    assert_eq!(got.2, want, "SHA-256 of the body");
}

/// GET `path` from the kernel's server with hyper over a ustack stream (retrying the
/// connect while the server starts): status, length and SHA-256 of the body.
async fn fetch(net: &Net, path: &str) -> (u16, usize, String) {
    use http_body_util::{BodyExt, Empty};
    let mut send = common::hyper_client(net, (KERNEL_IP, 8000).into()).await;
    let req = hyper::Request::get(path)
        .header("host", format!("{KERNEL_IP}:8000"))
        .body(Empty::<hyper::body::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.expect("request");
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut hash = Sha256::new();
    let mut len = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body").into_data() {
            len += data.len();
            hash.update(&data);
        }
    }
    (status, len, hex(&hash.finalize()))
}
