//! The `axum_hello` example's binary run as issue 16 runs it (not its application compiled
//! in, as `tun.rs` does): a process of its own, its readiness line read from its stdout.
//!
//! - `axum_hello --link tun --netns NS --addr 192.0.2.2:80 --root DIR` (and with `--local`,
//!   model (b)) in a namespace of the test's own: once it prints `tun-ready <interface>`
//!   the kernel's end is configured and curl in the namespace checks `GET /`
//!   ("Hello, World!"), `GET /files/NAME` (the file, byte for byte) and `POST /echo` (the
//!   JSON back). Root and curl: skips without, unless `USTACK_REQUIRE_ROOT` /
//!   `USTACK_REQUIRE_TOOLS` is set.
//! - `axum_hello --link shm`: once it prints `shm-offer <name>` this test attaches to the
//!   link as the client, with a stack of its own (`Net::shm`) and hyper's client over a
//!   ustack `TcpStream`, and checks the same three routes. No root needed.
//!
//! The binary is `target/<profile>/examples/axum_hello`, built by the test first (cargo
//! build, up to 10 minutes: a no-op when it is up to date). Every process runs under `timeout` and is
//! stopped on drop (on failure too); the namespace goes with its guard.

use core::time::Duration;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use ustack_runtime::RuntimeBuilder;
use ustack_testkit::netns::{KERNEL_IP, NetNs, USTACK_IP, root_or_skip, tool_or_skip};
use ustack_tokio::Net;

/// The bound on each command, and on the server process.
const LIMIT: Duration = Duration::from_secs(60);
/// The file `GET /files/NAME` serves: 3 MiB and an odd tail, so that it spans many
/// segments and reads of the server's file stream.
const FILE_LEN: usize = 3 * 1024 * 1024 + 1234;
/// The JSON `POST /echo` sends.
const JSON: &str = r#"{"issue":16,"list":[1,2,3],"nested":{"ok":true,"s":"ustack"}}"#;

/// The example binary `name` beside this test (`target/<profile>/examples/<name>`), the
/// examples `axum_hello` and `http_load` built first (once per process) by the cargo that
/// builds the tests: `cargo nextest run` builds
/// the test targets only, and a binary left by an earlier build would be stale.
fn example(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("the test's path");
            let profile = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>");
            let target = profile.parent().expect("the target directory");
            let mut build = Command::new("timeout");
            build
                .args([
                    "600",
                    env!("CARGO"),
                    "build",
                    "--quiet",
                    "--locked",
                    "-p",
                    "ustack-tokio",
                ])
                .args(["--example", "axum_hello", "--example", "http_load"])
                .env("CARGO_TARGET_DIR", target)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let status = build.status().expect("running cargo");
            assert!(status.success(), "building the examples: {status}");
            profile.join("examples")
        })
        .join(name)
}

#[path = "support/common.rs"]
mod common;
use common::{Kill, TempDir};

/// The example running under `timeout`, its first stdout line read; stopped and reaped on
/// drop: SIGTERM to `timeout`, which passes it on to the example.
struct Server {
    _child: Kill,
    /// Its readiness line.
    ready: String,
}

impl Server {
    /// Runs `axum_hello args...` and waits (up to 30 s) for its first line.
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new("timeout")
            .args(["-k", "1", &LIMIT.as_secs().to_string()])
            .arg(example("axum_hello"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning axum_hello");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Drain whatever else it prints, so that it never blocks on a full pipe.
            lines.for_each(drop);
        });
        let mut server = Server {
            _child: Kill(child),
            ready: String::new(),
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(Ok(line))) => server.ready = line,
            other => panic!("axum_hello {args:?} printed no readiness line: {other:?}"),
        }
        server
    }
}

/// `axum_hello --link tun --netns NS --addr 192.0.2.2:80 --root DIR [extra]`, then curl
/// from the namespace: the three routes.
fn curl_over_tun(test: &str, extra: &[&str]) {
    if root_or_skip(test).is_none() || !tool_or_skip(test, "curl") {
        return;
    }
    let root = TempDir::new(if extra.is_empty() {
        "bin-tun"
    } else {
        "bin-tun-local"
    });
    let data = ustack_testkit::pattern(FILE_LEN, 16);
    std::fs::write(root.0.join("data.bin"), &data).unwrap();
    let ns = NetNs::new().expect("a namespace");
    let ns_path = ns.path().to_string_lossy().into_owned();
    let addr = format!("{USTACK_IP}:80");
    let root_dir = root.0.to_string_lossy().into_owned();
    let mut args = vec![
        "--link", "tun", "--tun", "tun0", "--netns", &ns_path, "--addr", &addr, "--root", &root_dir,
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let iface = server
        .ready
        .strip_prefix("tun-ready ")
        .unwrap_or_else(|| panic!("`{}` instead of `tun-ready <interface>`", server.ready));
    assert_eq!(iface, "tun0");
    ns.configure_tun(iface)
        .expect("configuring the kernel's end");

    let base = format!("http://{USTACK_IP}:80");
    let curl = |args: &[&str]| {
        let mut argv = vec!["curl", "-sS", "--fail", "--max-time", "30"];
        argv.extend_from_slice(args);
        let out = ns.run(LIMIT, &argv).expect("curl in the namespace");
        out.stdout
    };
    assert_eq!(curl(&[&format!("{base}/")]), b"Hello, World!");

    let got = root.0.join("got.bin");
    curl(&[
        "-o",
        &got.to_string_lossy(),
        &format!("{base}/files/data.bin"),
    ]);
    let got = std::fs::read(&got).expect("curl wrote the file");
    assert_eq!(got.len(), data.len(), "GET /files/data.bin: length");
    assert!(got == data, "GET /files/data.bin: not the file's bytes");

    let echoed = curl(&[
        "-H",
        "content-type: application/json",
        "--data-binary",
        JSON,
        &format!("{base}/echo"),
    ]);
    assert_eq!(json(&echoed), json(JSON.as_bytes()), "POST /echo");
    drop(server);
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}", String::from_utf8_lossy(b));
    })
}

/// Issue 16's command: the example over TUN, model (a), curl from the namespace.
#[test]
fn axum_hello_binary_over_tun_serves_curl() {
    curl_over_tun("axum_hello_binary_over_tun_serves_curl", &[]);
}

/// The same with `--local`: model (b), one current-thread runtime.
#[test]
fn axum_hello_binary_over_tun_local_serves_curl() {
    curl_over_tun("axum_hello_binary_over_tun_local_serves_curl", &["--local"]);
}

/// `axum_hello --link shm`: this test attaches to its offer as a ustack client (a stack of
/// its own, at the kernel rig's address) and checks the three routes with hyper's client,
/// the file byte for byte, all on one keep-alive connection.
#[test]
fn axum_hello_binary_over_shm_serves_a_ustack_client() {
    shm_client("shm", &[]);
}

/// The same with `--local`: the server in model (b).
#[test]
fn axum_hello_binary_over_shm_local_serves_a_ustack_client() {
    shm_client("shm-local", &["--local"]);
}

fn shm_client(tag: &str, extra: &[&str]) {
    use http_body_util::{BodyExt, Full};
    let root = TempDir::new(&format!("bin-{tag}"));
    let data = ustack_testkit::pattern(FILE_LEN, 17);
    std::fs::write(root.0.join("data.bin"), &data).unwrap();
    let addr = format!("{USTACK_IP}:80");
    let root_dir = root.0.to_string_lossy().into_owned();
    let mut args = vec!["--link", "shm", "--addr", &addr, "--root", &root_dir];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let name = server
        .ready
        .strip_prefix("shm-offer ")
        .unwrap_or_else(|| panic!("`{}` instead of `shm-offer <name>`", server.ready));
    let ports = ustack_dev::shm::ShmPeer::connect(name, Duration::from_secs(10))
        .expect("connecting to the offer")
        .attach()
        .expect("attaching to the link");
    let net = Net::shm(RuntimeBuilder::new().ipv4(KERNEL_IP, 24).seed(16), ports).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let answers = rt.block_on(async {
        tokio::time::timeout(LIMIT, async {
            // The server binds its listener after the hand-over: retried while refused.
            let mut send = common::hyper_client(&net, (USTACK_IP, 80).into()).await;
            let mut answers = Vec::new();
            for (method, path, body) in [
                ("GET", "/", ""),
                ("GET", "/files/data.bin", ""),
                ("POST", "/echo", JSON),
            ] {
                let req = hyper::Request::builder()
                    .method(method)
                    .uri(path)
                    .header("host", &addr)
                    .header("content-type", "application/json")
                    .body(Full::new(hyper::body::Bytes::from(body)))
                    .unwrap();
                send.ready().await.expect("the connection takes a request");
                let resp = send.send_request(req).await.expect("an answer");
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.expect("a body").to_bytes();
                answers.push((status, body.to_vec()));
            }
            answers
        })
        .await
        .expect("the three requests in time")
    });
    assert_eq!(answers[0], (200, b"Hello, World!".to_vec()), "GET /");
    assert_eq!(answers[1].0, 200, "GET /files/data.bin");
    assert_eq!(
        answers[1].1.len(),
        data.len(),
        "GET /files/data.bin: length"
    );
    assert!(
        answers[1].1 == data,
        "GET /files/data.bin: not the file's bytes"
    );
    assert_eq!(answers[2].0, 200, "POST /echo");
    assert_eq!(json(&answers[2].1), json(JSON.as_bytes()), "POST /echo");
    drop(rt);
    drop(net);
    drop(server);
}

/// The `http_load` example (the docs' load figure over shm) against `axum_hello --link shm`
/// for 1 s with 4 connections: it answers its line with requests made, all of them 200s,
/// no error, and exits 0.
#[test]
fn http_load_loads_axum_hello_over_shm() {
    let server = Server::start(&["--link", "shm", "--addr", "192.0.2.2:80", "--workers", "1"]);
    let name = server
        .ready
        .strip_prefix("shm-offer ")
        .unwrap_or_else(|| panic!("`{}` instead of `shm-offer <name>`", server.ready));
    let out = Command::new("timeout")
        .args(["-k", "1", "30"])
        .arg(example("http_load"))
        .args(["--link", "shm", "--offer", name, "--addr", "192.0.2.2:80"])
        .args(["--conns", "4", "--secs", "1"])
        .output()
        .expect("running http_load");
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "http_load: {}: {line}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |k: &str| -> u64 {
        let mut words = line.split_whitespace();
        words.find(|w| *w == k);
        words
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no `{k} N` in `{line}`"))
    };
    assert!(field("requests") > 0, "{line}");
    assert_eq!(field("ok"), field("requests"), "{line}");
    assert_eq!(field("other"), 0, "{line}");
    assert_eq!(field("errors"), 0, "{line}");
}
