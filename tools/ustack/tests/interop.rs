//! Ordinary programs against `ustack serve --link tun`, each in a namespace of the test's
//! own, the kernel's side being the program: curl (a page, a 404, keep-alive over several
//! URLs, a 1 MiB file checked by SHA-256), wrk (50 connections for 2 s, no socket error,
//! no non-2xx answer; about 36,000 requests/s in a debug build), socat (echo of a small message and of 4 MiB, compared byte for
//! byte). Each run is captured by the server itself (`ustack capture` through its control
//! socket, from before the client starts to the server's end; wrk's, the first
//! [`WRK_PACKETS`] packets) and the capture read by tshark: no malformed packet or expert
//! error, no more than a handful of retransmissions either way. Root only (skipped
//! otherwise unless `USTACK_REQUIRE_ROOT`); a missing program skips its test unless
//! `USTACK_REQUIRE_TOOLS`, a missing tshark skips the check unless
//! `USTACK_REQUIRE_TSHARK`.

use core::time::Duration;
use std::path::{Path, PathBuf};

use ustack_testkit::netns::{
    NetNs, ServeOverTun, ToolCapture, USTACK_IP, root_or_skip, tool_or_skip,
};
use ustack_testkit::tshark::{CLEAN_RETRANSMISSIONS, check_capture};

const LIMIT: Duration = Duration::from_secs(30);
/// The packets of wrk's run that are captured, the first ones: its 50 connections opened
/// and their first 20,000 requests or so (the run makes tens of thousands more; the whole
/// would be some hundreds of thousands of packets, many seconds of tshark's time).
const WRK_PACKETS: &str = "60000";

fn ustack() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ustack"))
}

/// A namespace, if the test can run (root and `tool`).
fn setup(test: &str, tool: &str) -> Option<NetNs> {
    root_or_skip(test)?;
    if !tool_or_skip(test, tool) {
        return None;
    }
    Some(NetNs::new().expect("a namespace"))
}

/// The server's capture of the test's run, to a file in the temporary directory: on
/// when this returns, until the server ends (or as `args` say).
fn capture(test: &str, server: &ServeOverTun, args: &[&str]) -> (ToolCapture, PathBuf) {
    let pcap = std::env::temp_dir().join(format!("ustack-{test}-{}.pcap", std::process::id()));
    let capture = server
        .capture(ustack(), &pcap, args)
        .expect("ustack capture");
    (capture, pcap)
}

/// Once the capture has ended: tshark's check of a run without faults; the file is
/// removed if it passes.
fn check(test: &str, capture: ToolCapture, pcap: &Path) {
    let packets = capture.finish().expect("the capture");
    let bounds = (CLEAN_RETRANSMISSIONS, CLEAN_RETRANSMISSIONS);
    if let Some(report) = check_capture(test, pcap, USTACK_IP, bounds) {
        assert_eq!(report.packets, packets, "{test}: what ustack capture wrote");
    }
    let _ = std::fs::remove_file(pcap);
}

/// Runs `sh -c script` in the namespace; its stdout.
fn sh(ns: &NetNs, script: &str) -> String {
    let out = ns.run(LIMIT, &["sh", "-c", script]).expect("the script");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `key=` in a `served:` counters line.
fn counter(report: &str, key: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("served:"))
        .unwrap_or_else(|| panic!("no served: line in `{report}`"));
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in `{line}`"))
}

#[test]
fn curl_gets_pages_a_404_and_a_file_with_keep_alive() {
    let Some(ns) = setup("curl_gets_pages", "curl") else {
        return;
    };
    let root = std::env::temp_dir().join(format!("ustack-curl-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("the web root");
    let file: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(root.join("big.bin"), &file).expect("a file to serve");
    let server = ServeOverTun::start(
        ustack(),
        &ns,
        &[
            "http",
            "--addr",
            "192.0.2.2:80",
            "--root",
            root.to_str().expect("utf-8 path"),
            "--duration",
            "6s",
        ],
    )
    .expect("ustack serve http over tun");
    let (cap, pcap) = capture("curl_gets_pages", &server, &[]);

    // Three URLs in one invocation: curl keeps the connection (one connect, then none).
    let out = sh(
        &ns,
        "curl -sS --max-time 10 -w '|%{http_code} %{num_connects}|' \
         http://192.0.2.2/ http://192.0.2.2/missing http://192.0.2.2/",
    );
    // body|code connects|body|code connects|body|code connects|
    let parts: Vec<&str> = out.split('|').collect();
    assert_eq!(parts.len(), 7, "{out}");
    assert!(parts[0].starts_with("Hello"), "{out}");
    assert_eq!(parts[1], "200 1", "first: a new connection: {out}");
    assert!(parts[2].contains("404"), "{out}");
    assert_eq!(
        parts[3], "404 0",
        "second: 404 on the same connection: {out}"
    );
    assert_eq!(parts[4], parts[0], "{out}");
    assert_eq!(parts[5], "200 0", "third: the same connection: {out}");

    // A 1 MiB file, byte for byte.
    let out = ns
        .run(
            LIMIT,
            &[
                "curl",
                "-sS",
                "--max-time",
                "20",
                "http://192.0.2.2/big.bin",
            ],
        )
        .expect("curl the file");
    assert!(
        out.stdout == file,
        "the file: {} bytes differ",
        out.stdout.len()
    );

    let report = server.finish().expect("the server's counters");
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(counter(&report, "accepted"), 2, "{report}");
    assert_eq!(counter(&report, "http_200"), 3, "{report}");
    assert_eq!(counter(&report, "http_404"), 1, "{report}");
    assert_eq!(counter(&report, "errors"), 0, "{report}");
    check("curl_gets_pages", cap, &pcap);
}

#[test]
fn wrk_loads_the_http_server_without_errors() {
    let Some(ns) = setup("wrk_loads_the_http_server", "wrk") else {
        return;
    };
    let server = ServeOverTun::start(
        ustack(),
        &ns,
        &["http", "--addr", "192.0.2.2:80", "--duration", "5s"],
    )
    .expect("ustack serve http over tun");
    let (cap, pcap) = capture("wrk_loads_the_http_server", &server, &["-c", WRK_PACKETS]);
    let out = sh(&ns, "wrk -t2 -c50 -d2s --timeout 2s http://192.0.2.2/");
    let requests: u64 = out
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no request count in `{out}`"));
    eprintln!("wrk -t2 -c50 -d2s against ustack serve http over tun:\n{out}");
    assert!(requests > 100, "{out}");
    assert!(!out.contains("Socket errors"), "{out}");
    assert!(!out.contains("Non-2xx"), "{out}");
    let report = server.finish().expect("the server's counters");
    // wrk's 50 connections and the one it opens first to check the address.
    let accepted = counter(&report, "accepted");
    assert!((50..=52).contains(&accepted), "{report}");
    // When the time is up wrk closes its connections with requests in flight: the server
    // may count a reset on each of them, never more.
    assert!(counter(&report, "errors") <= accepted, "{report}");
    assert!(counter(&report, "http_200") >= requests, "{report}");
    check("wrk_loads_the_http_server", cap, &pcap);
}

#[test]
fn socat_echo_and_bulk_through_the_echo_server() {
    let Some(ns) = setup("socat_echo_and_bulk", "socat") else {
        return;
    };
    let server = ServeOverTun::start(
        ustack(),
        &ns,
        &["echo", "--addr", "192.0.2.2:7", "--duration", "6s"],
    )
    .expect("ustack serve echo over tun");
    let (cap, pcap) = capture("socat_echo_and_bulk", &server, &[]);
    let out = sh(
        &ns,
        "echo 'hello, ustack' | socat -t 5 -T 10 - TCP:192.0.2.2:7",
    );
    assert_eq!(out, "hello, ustack\n");
    // 4 MiB both ways at once; socat half-closes after its input and waits for the end.
    let dir = std::env::temp_dir().join(format!("ustack-socat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let d = dir.display();
    let out = sh(
        &ns,
        &format!(
            "head -c 4194304 /dev/urandom > {d}/in && \
             socat -t 10 -T 10 - TCP:192.0.2.2:7 < {d}/in > {d}/out && \
             cmp {d}/in {d}/out && wc -c < {d}/out"
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.trim(), "4194304");
    let report = server.finish().expect("the server's counters");
    assert_eq!(counter(&report, "accepted"), 2, "{report}");
    assert_eq!(counter(&report, "bytes_in"), 14 + 4194304, "{report}");
    assert_eq!(counter(&report, "errors"), 0, "{report}");
    check("socat_echo_and_bulk", cap, &pcap);
}
