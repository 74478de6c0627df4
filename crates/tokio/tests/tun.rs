//! The ecosystem on ustack over a TUN interface, the Linux kernel as the peer, in a
//! namespace of the test's own:
//!
//! - the `axum_hello` example's application (compiled in) on `axum::serve` with a ustack
//!   listener serves curl in the namespace: `GET /`, `POST /echo` with a JSON body, a 10 MiB file compared by
//!   SHA-256, and two requests on one keep-alive connection;
//! - a hyper client on ustack fetches a file from `python3 -m http.server` in the
//!   namespace, compared by SHA-256.
//!
//! Without root, `/dev/net/tun` or the tools each test skips with a note, unless
//! `USTACK_REQUIRE_ROOT` (`USTACK_REQUIRE_TOOLS` for curl and python3) is set, as in CI,
//! which makes that a failure. Every command is bounded by `timeout`; the namespace and
//! the processes go when their guards drop, on failure too.

use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use sha2::{Digest, Sha256};
use ustack_runtime::RuntimeBuilder;
use ustack_testkit::netns::{KERNEL_IP, NetNs, TunRig, USTACK_IP, root_or_skip, tool_or_skip};
use ustack_tokio::{Net, TcpStream};

const LIMIT: Duration = Duration::from_secs(60);
const BIG: usize = 10 * 1024 * 1024;

/// A `timeout ...` child, stopped and reaped on drop: SIGTERM, which `timeout` passes on
/// to the command it runs (a SIGKILL would leave that command behind, orphaned).
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// A directory of the test's own under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("ustack-tokio-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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

/// Runs `argv` in the namespace, bounded; its stdout.
fn run(ns: &NetNs, argv: &[&str]) -> String {
    let out = ns.run(LIMIT, argv).expect("command in the namespace");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn axum_hello_serves_curl_over_tun() {
    let test = "axum_hello_serves_curl_over_tun";
    let Some(()) = root_or_skip(test) else {
        return;
    };
    if !tool_or_skip(test, "curl") {
        return;
    }
    let root = TempDir::new("axum");
    let want = big_file(&root.0.join("big.bin"), BIG, 5);
    let mut rig = TunRig::new(1, None).expect("TUN rig");
    let queues = core::mem::take(&mut rig.queues);
    let net = Net::tun(RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(8), queues).unwrap();
    let listener = ustack_tokio::TcpListener::bind(&net, (USTACK_IP, 80)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The example's application, served as the example serves it.
    rt.spawn(axum::serve(listener, axum_hello::app(root.0.clone())).into_future());
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

/// A hyper client on ustack fetching from a kernel HTTP server in the namespace.
#[test]
fn hyper_client_fetches_from_a_kernel_http_server_over_tun() {
    let test = "hyper_client_fetches_from_a_kernel_http_server_over_tun";
    let Some(()) = root_or_skip(test) else {
        return;
    };
    if !tool_or_skip(test, "python3") {
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
    let stream = loop {
        match TcpStream::connect(net, (KERNEL_IP, 8000)).await {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("connect: {e}"),
        }
    };
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
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
