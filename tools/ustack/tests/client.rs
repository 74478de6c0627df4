//! The tool as a user meets it, against the Linux kernel in a namespace of the test's own,
//! over TUN, and over a veth pair with `--link packet` and `--link xdp` (root only; skipped
//! otherwise unless `USTACK_REQUIRE_ROOT`, as is a missing `ethtool` for the veth pair;
//! python3 is the kernel's side, a missing one skips unless `USTACK_REQUIRE_TOOLS`):
//! - `ustack connect`: 1 MiB from stdin to a kernel server, which checks it and answers
//!   with 2 MiB of its own, compared with what `connect` wrote to stdout (SHA-256 both
//!   ways); over tun, packet and xdp;
//! - `ustack get`: a 3 MiB file from `python3`'s `http.server`, to `-o FILE` and to stdout,
//!   byte for byte, and the SHA-256 `get` prints; through `--gateway` to an address off
//!   ustack's subnet (without the gateway: network unreachable); over packet and xdp, to
//!   stdout;
//! - `ustack serve --sysctl`: the values visible through `ustack sysctl` on its control
//!   socket; SIGTERM: the server stops, prints its summary, exits 0.
//!
//! The TUN interface is made by the test (`ip tuntap add ... multi_queue`) and configured
//! before ustack attaches to it, as a user with an interface of their own would; so is the
//! veth pair (the kernel's end `veth0` with 192.0.2.1/24 and its transmit offloads off,
//! ustack's end `veth1` up without an address). Every `ustack` and `python3` run is
//! bounded by `timeout`, and the namespace goes with the test, failed or not.

use core::time::Duration;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};
use ustack_testkit::netns::{
    KERNEL_IP, NetNs, PY_BULK_SERVER, ServeOverTun, TUN_NAME, VETH_USTACK, python_argv,
    root_or_skip, tool_or_skip, veth_or_skip,
};

const LIMIT: Duration = Duration::from_secs(60);
/// An address off ustack's subnet, on the namespace's loopback: reached through the
/// gateway (the kernel's end of the TUN).
const OFF_SUBNET: &str = "198.51.100.1";

fn ustack() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ustack"))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A namespace with the interface [`TUN_NAME`] made and configured (kernel at
/// 192.0.2.1/24, up), if the test can run.
fn setup(test: &str) -> Option<NetNs> {
    root_or_skip(test)?;
    if !tool_or_skip(test, "python3") {
        return None;
    }
    let ns = NetNs::new().expect("a namespace");
    ns.add_tun(TUN_NAME).expect("a TUN interface, configured");
    Some(ns)
}

/// A namespace with the veth pair (kernel at 192.0.2.1/24 on `veth0`, `veth1` up for
/// ustack), if the test can run.
fn setup_veth(test: &str) -> Option<NetNs> {
    veth_or_skip(test)?;
    if !tool_or_skip(test, "python3") {
        return None;
    }
    let ns = NetNs::new().expect("a namespace");
    ns.veth_pair().expect("the veth pair");
    Some(ns)
}

/// The flags for ustack's link: the TUN interface [`TUN_NAME`].
const TUN: &[&str] = &["--tun", TUN_NAME];

/// `ustack <args> <link> --netns <ns>`, with `stdin` fed in, run to its end.
fn run_client(ns: &NetNs, link: &[&str], args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new("timeout")
        .arg(format!("{}", LIMIT.as_secs()))
        .arg(ustack())
        .args(args)
        .args(link)
        .arg("--netns")
        .arg(ns.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ustack");
    let mut input = child.stdin.take().expect("piped");
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("ustack's output");
    feeder.join().expect("the feeder");
    out
}

/// A kernel-side python script started in the namespace, its first line (`ready`) read.
struct Kernel {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Kernel {
    fn start(ns: &NetNs, script: &str, args: &[String]) -> Kernel {
        let mut child = ns
            .command(LIMIT, &python_argv(script, args))
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("its first line");
        assert_eq!(line.trim(), "ready", "the kernel's server");
        Kernel { child, stdout }
    }

    /// The rest of its output, once it ends.
    fn finish(mut self) -> String {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).expect("its output");
        let status = self.child.wait().expect("its end");
        assert!(status.success(), "the kernel's server: {status}: {rest}");
        rest
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // SIGTERM to `timeout`, which passes it on to the script (a SIGKILL would leave
        // the script running, and holding the namespace, until its time runs out).
        if let Some(pid) = i32::try_from(self.child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
    }
}

/// `ustack connect` over `link` to a kernel server in `ns`: 1 MiB in, 2 MiB back, both
/// checked by SHA-256, and the byte counts `connect` reports.
fn connect_both_ways(ns: &NetNs, link: &[&str]) {
    let sent: Vec<u8> = (0..1u32 << 20).map(|i| (i * 31 + i / 977) as u8).collect();
    let answer = 2u64 << 20;
    let server = Kernel::start(
        ns,
        PY_BULK_SERVER,
        &[answer.to_string(), KERNEL_IP.to_string(), "5001".into()],
    );
    let out = run_client(
        ns,
        link,
        &[
            "connect",
            &format!("{KERNEL_IP}:5001"),
            "--addr",
            "192.0.2.2/24",
        ],
        &sent,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ustack connect: {}: {stderr}",
        out.status
    );
    // The server's report: bytes read, their SHA-256, the SHA-256 of what it sent.
    let report = server.finish();
    let fields: Vec<&str> = report.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{report}");
    assert_eq!(fields[0], sent.len().to_string(), "what the kernel read");
    assert_eq!(
        fields[1],
        hex(&Sha256::digest(&sent)),
        "what the kernel read"
    );
    assert_eq!(out.stdout.len() as u64, answer, "{stderr}");
    assert_eq!(
        hex(&Sha256::digest(&out.stdout)),
        fields[2],
        "what came back"
    );
    assert!(
        stderr.contains(&format!(
            "{} bytes sent, {answer} bytes received",
            sent.len()
        )),
        "{stderr}"
    );
}

#[test]
fn connect_carries_stdin_to_a_kernel_server_and_its_answer_to_stdout() {
    let Some(ns) = setup("connect_carries_stdin") else {
        return;
    };
    connect_both_ways(&ns, TUN);
}

/// Serves `dir` with python's http.server on `addr:8000` for `requests` requests.
const PY_HTTP: &str = r#"
import functools, http.server
d, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
s = http.server.HTTPServer((host, 8000), functools.partial(H, directory=d))
s.timeout = 20
print("ready", flush=True)
for _ in range(n):
    s.handle_request()
"#;

/// A temporary directory with `big.bin` (3 MiB of patterned bytes) to serve with
/// [`PY_HTTP`]; removed on drop, whether the test failed or not.
struct Site {
    dir: std::path::PathBuf,
    file: Vec<u8>,
    /// The file's SHA-256 (hex).
    digest: String,
}

impl Site {
    fn new(tag: &str) -> Site {
        let dir = std::env::temp_dir().join(format!("ustack-get-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let file: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + i / 4093) as u8).collect();
        std::fs::write(dir.join("big.bin"), &file).expect("the file");
        let digest = hex(&Sha256::digest(&file));
        Site { dir, file, digest }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn get_fetches_a_file_from_a_kernel_http_server_also_through_a_gateway() {
    let Some(ns) = setup("get_fetches_a_file") else {
        return;
    };
    ns.run(
        Duration::from_secs(5),
        &[
            "ip",
            "addr",
            "add",
            &format!("{OFF_SUBNET}/32"),
            "dev",
            "lo",
        ],
    )
    .expect("an address off the subnet");
    let site = Site::new("tun");
    let (dir, file, digest) = (&site.dir, &site.file, &site.digest);
    let server = Kernel::start(
        &ns,
        PY_HTTP,
        &[dir.display().to_string(), "0.0.0.0".into(), "2".into()],
    );

    // On the subnet, to a file.
    let saved = dir.join("saved.bin");
    let url = format!("http://{KERNEL_IP}:8000/big.bin");
    let out = run_client(
        &ns,
        TUN,
        &["get", &url, "-o", saved.to_str().expect("utf-8")],
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ustack get: {}: {stderr}", out.status);
    assert!(out.stdout.is_empty());
    assert_eq!(&std::fs::read(&saved).expect("the saved file"), file);
    assert!(
        stderr.contains(&format!("HTTP 200, {} bytes, sha256 {digest}", file.len())),
        "{stderr}"
    );

    // Off the subnet: unreachable without a gateway (nothing sent), then through it, to
    // stdout.
    let url = format!("http://{OFF_SUBNET}:8000/big.bin");
    let out = run_client(&ns, TUN, &["get", &url, "--connect-timeout", "2s"], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("unreachable"), "{stderr}");
    let out = run_client(
        &ns,
        TUN,
        &["get", &url, "--gateway", &KERNEL_IP.to_string()],
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ustack get via the gateway: {stderr}");
    assert_eq!(&hex(&Sha256::digest(&out.stdout)), digest);
    server.finish();
}

/// `ustack connect` and `ustack get` over `--link <link> --interface veth1`: the connect
/// round trip of [`connect_both_ways`], then a 3 MiB file from `http.server` to stdout,
/// byte for byte, with the SHA-256 `get` prints.
fn connect_and_get_over_veth(test: &str, link: &str) {
    let Some(ns) = setup_veth(test) else {
        return;
    };
    let flags = ["--link", link, "--interface", VETH_USTACK];
    connect_both_ways(&ns, &flags);

    let site = Site::new(link);
    let (file, digest) = (&site.file, &site.digest);
    let server = Kernel::start(
        &ns,
        PY_HTTP,
        &[
            site.dir.display().to_string(),
            KERNEL_IP.to_string(),
            "1".into(),
        ],
    );
    let url = format!("http://{KERNEL_IP}:8000/big.bin");
    let out = run_client(&ns, &flags, &["get", &url], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ustack get: {}: {stderr}", out.status);
    assert!(
        stderr.contains(&format!("over {link} on `{VETH_USTACK}`")),
        "{stderr}"
    );
    assert_eq!(out.stdout.len(), file.len(), "{stderr}");
    assert_eq!(&hex(&Sha256::digest(&out.stdout)), digest, "what get wrote");
    assert!(
        stderr.contains(&format!("HTTP 200, {} bytes, sha256 {digest}", file.len())),
        "{stderr}"
    );
    server.finish();
}

#[test]
fn connect_and_get_over_packet_on_a_veth_end() {
    connect_and_get_over_veth("connect_and_get_over_packet", "packet");
}

#[test]
fn connect_and_get_over_xdp_on_a_veth_end() {
    connect_and_get_over_veth("connect_and_get_over_xdp", "xdp");
}

#[test]
fn serve_takes_sysctls_at_start_and_stops_on_sigterm_with_its_summary() {
    let Some(ns) = setup("serve_takes_sysctls") else {
        return;
    };
    // ServeOverTun creates the interface itself: drop the test's.
    ns.run(Duration::from_secs(5), &["ip", "link", "del", TUN_NAME])
        .expect("removing the test's interface");
    let server = ServeOverTun::start(
        ustack(),
        &ns,
        &[
            "echo",
            "--addr",
            "192.0.2.2/24:7",
            "--sysctl",
            "net.core.somaxconn=77",
            "--sysctl",
            "net.ipv4.tcp_sack=0",
        ],
    )
    .expect("ustack serve");
    let sysctl = |name: &str| {
        let out = Command::new(ustack())
            .args(["sysctl", name, "--control"])
            .arg(server.control())
            .output()
            .expect("ustack sysctl");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(sysctl("net.core.somaxconn"), "net.core.somaxconn = 77");
    assert_eq!(sysctl("net.ipv4.tcp_sack"), "net.ipv4.tcp_sack = 0");
    // One connection, so the summary has something to count.
    ns.run(
        Duration::from_secs(10),
        &[
            "python3",
            "-c",
            "import socket; s = socket.create_connection(('192.0.2.2', 7), 5); \
             s.sendall(b'hi'); assert s.recv(2) == b'hi'; s.close()",
        ],
    )
    .expect("a kernel client");
    let pid = i32::try_from(server.pid())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    // finish() fails unless the exit status is 0.
    let report = server.finish().expect("a clean stop");
    let served = report
        .lines()
        .find(|l| l.starts_with("served:"))
        .unwrap_or_else(|| panic!("no summary in `{report}`"));
    assert!(served.contains("accepted=1 "), "{served}");
    assert!(served.contains("bytes_in=2 "), "{served}");
}
