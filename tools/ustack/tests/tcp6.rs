//! TCP over IPv6 against the Linux kernel over TUN, in a namespace of the test's own (root
//! only; skipped otherwise unless `USTACK_REQUIRE_ROOT`; a missing curl, socat or python3
//! skips unless `USTACK_REQUIRE_TOOLS`):
//! - `ustack serve http --addr [2001:db8:6::2]:80`: the kernel's `curl -6` fetches a file,
//!   checked by SHA-256;
//! - `ustack serve http --addr [::]:80`: one dual-stack listener serves the kernel's
//!   `curl -4` and `curl -6`, the file checked both times, and `ustack ss -a` shows
//!   two idle kernel connections, the IPv4 one v4-mapped;
//! - `ustack connect [2001:db8:6::1]:7` to a kernel `socat` echo server (1 MiB each way,
//!   SHA-256) and `ustack get http://[2001:db8:6::1]:8000/...` from `python3 -m
//!   http.server`.
//!
//! Every command is bounded in time; the namespace and the processes go away with the
//! test, whatever happens.

use core::time::Duration;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sha2::{Digest, Sha256};
use ustack_testkit::netns::{KERNEL_IP, NetNs, ServeOverTun, TUN_NAME, root_or_skip, tool_or_skip};

const KERNEL6: &str = "2001:db8:6::1";
const USTACK6: &str = "2001:db8:6::2";
const LIMIT: Duration = Duration::from_secs(30);

fn ustack() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ustack"))
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the test can run: root and the tools it names.
fn can_run(test: &str, tools: &[&str]) -> bool {
    root_or_skip(test).is_some() && tools.iter().all(|t| tool_or_skip(test, t))
}

/// IPv6 on the kernel's end of the TUN (the rig turns it off), with [`KERNEL6`]/64.
fn kernel_ipv6(ns: &NetNs) {
    let limit = Duration::from_secs(5);
    let sysctl = format!("net.ipv6.conf.{TUN_NAME}.disable_ipv6=0");
    ns.run(limit, &["sysctl", "-qw", &sysctl]).expect("sysctl");
    let addr = format!("{KERNEL6}/64");
    ns.run(
        limit,
        &["ip", "-6", "addr", "add", &addr, "dev", TUN_NAME, "nodad"],
    )
    .expect("ip -6 addr add");
}

/// A directory with a 2 MiB file `f.bin` of a fixed pattern, and its SHA-256.
struct Site {
    dir: PathBuf,
    digest: String,
}

impl Site {
    fn new(tag: &str) -> Site {
        let dir = std::env::temp_dir().join(format!("ustack-tcp6-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let file: Vec<u8> = (0..2u32 << 20).map(|i| (i * 7 + i / 1013) as u8).collect();
        std::fs::write(dir.join("f.bin"), &file).expect("the file");
        Site {
            digest: hex(&Sha256::digest(&file)),
            dir,
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `curl` in the namespace for `url` (`family`: `-4` or `-6`); the body's SHA-256.
fn curl(ns: &NetNs, family: &str, url: &str) -> String {
    let out = ns
        .run(
            LIMIT,
            &["curl", family, "-sS", "--fail", "--max-time", "20", url],
        )
        .unwrap_or_else(|e| panic!("curl {family} {url}: {e}"));
    hex(&Sha256::digest(&out.stdout))
}

fn serve_http(ns: &NetNs, site: &Site, addr: &str, more: &[&str]) -> ServeOverTun {
    let root = site.dir.to_str().expect("utf-8");
    let mut args = vec!["http", "--root", root, "--addr", addr, "--duration", "8s"];
    args.extend_from_slice(more);
    let server = ServeOverTun::start(ustack(), ns, &args).expect("ustack serve over tun");
    kernel_ipv6(ns);
    server
}

#[test]
fn kernel_curl_over_ipv6_fetches_a_file_from_ustack_serve_http() {
    if !can_run("kernel_curl_over_ipv6", &["curl"]) {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let site = Site::new("curl6");
    let server = serve_http(&ns, &site, &format!("[{USTACK6}]:80"), &[]);
    let url = format!("http://[{USTACK6}]/f.bin");
    assert_eq!(curl(&ns, "-6", &url), site.digest);
    server.finish().expect("ustack serve ends cleanly");
}

#[test]
fn a_dual_stack_listener_serves_kernel_clients_of_both_families() {
    if !can_run("dual_stack_listener_over_tun", &["curl", "socat"]) {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let site = Site::new("dual");
    let addr6 = format!("{USTACK6}/64");
    let server = serve_http(&ns, &site, "[::]:80", &["--addr6", &addr6]);
    // The interface keeps 192.0.2.2/24 beside an IPv6 --addr.
    assert_eq!(curl(&ns, "-4", "http://192.0.2.2/f.bin"), site.digest);
    assert_eq!(
        curl(&ns, "-6", &format!("http://[{USTACK6}]/f.bin")),
        site.digest
    );
    // Two idle kernel connections, one of each family, while `ustack ss -a` looks.
    let idle = |to: &str| {
        ns.command(Duration::from_secs(4), &["socat", "-u", "EXEC:sleep 3", to])
            .spawn()
            .expect("socat")
    };
    let mut clients = [
        idle("TCP4:192.0.2.2:80"),
        idle(&format!("TCP6:[{USTACK6}]:80")),
    ];
    let (mapped, six) = (format!("[::ffff:{KERNEL_IP}]"), format!("[{KERNEL6}]"));
    let mut ss = String::new();
    for _ in 0..30 {
        let out = Command::new(ustack())
            .args(["ss", "-a", "--control"])
            .arg(server.control())
            .output()
            .expect("ustack ss");
        ss = String::from_utf8_lossy(&out.stdout).into_owned();
        if ss.contains(&mapped) && ss.contains(&six) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for c in &mut clients {
        let _ = c.wait();
    }
    assert!(ss.contains("[::]:80"), "the listener: {ss}");
    assert!(ss.contains(&mapped), "the IPv4 client, v4-mapped: {ss}");
    assert!(ss.contains(&six), "the IPv6 client: {ss}");
    server.finish().expect("ustack serve ends cleanly");
}

/// `ustack <args> --tun tun0 --netns <ns>`, with `stdin` fed in, to its end.
fn run_client(ns: &NetNs, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new("timeout")
        .arg(format!("{}", LIMIT.as_secs()))
        .arg(ustack())
        .args(args)
        .args(["--tun", TUN_NAME, "--netns"])
        .arg(ns.path())
        .args(["--addr6", &format!("{USTACK6}/64")])
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

/// A kernel-side process (under `timeout`) that gets SIGTERM when the test ends, passed
/// on by `timeout` (a SIGKILL would leave the process holding the namespace).
struct Bg(std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(pid) = i32::try_from(self.0.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.0.wait();
    }
}

/// Wait (bounded) until something in `ns` listens on TCP `port`.
fn wait_listening(ns: &NetNs, port: u16) {
    let want = format!(":{port} ");
    for _ in 0..50 {
        let out = ns
            .run(Duration::from_secs(5), &["ss", "-ltnH"])
            .expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(&want) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on port {port}");
}

#[test]
fn ustack_connect_and_get_reach_kernel_servers_over_ipv6() {
    if !can_run("ustack_clients_over_ipv6", &["socat", "python3"]) {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    ns.add_tun(TUN_NAME).expect("a TUN interface, configured");
    kernel_ipv6(&ns);

    // A kernel echo server on IPv6 only.
    let listen = format!("TCP6-LISTEN:7,bind=[{KERNEL6}],reuseaddr");
    let echo = Bg(ns
        .command(LIMIT, &["socat", &listen, "EXEC:cat"])
        .spawn()
        .expect("socat"));
    wait_listening(&ns, 7);
    let sent: Vec<u8> = (0..1u32 << 20).map(|i| (i * 13 + i / 511) as u8).collect();
    let out = run_client(&ns, &["connect", &format!("[{KERNEL6}]:7")], &sent);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ustack connect: {}: {stderr}",
        out.status
    );
    assert_eq!(out.stdout.len(), sent.len(), "{stderr}");
    assert_eq!(
        hex(&Sha256::digest(&out.stdout)),
        hex(&Sha256::digest(&sent))
    );
    drop(echo);

    // A kernel HTTP server on IPv6.
    let site = Site::new("get6");
    let dir = site.dir.to_str().expect("utf-8");
    let http = Bg(ns
        .command(
            LIMIT,
            &[
                "python3",
                "-m",
                "http.server",
                "--bind",
                KERNEL6,
                "--directory",
                dir,
                "8000",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3"));
    wait_listening(&ns, 8000);
    let url = format!("http://[{KERNEL6}]:8000/f.bin");
    let out = run_client(&ns, &["get", &url], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    drop(http);
    assert!(out.status.success(), "ustack get: {}: {stderr}", out.status);
    assert_eq!(hex(&Sha256::digest(&out.stdout)), site.digest, "{stderr}");
    assert!(
        stderr.contains(&format!("sha256 {}", site.digest)),
        "{stderr}"
    );
}
