//! libustack_preload.so's links and shards, with the kernel as the peer in a namespace of
//! the test's own: `USTACK_LINK=packet|xdp` on a veth pair (ustack on `veth1`, the kernel
//! on `veth0` at 192.0.2.1), `USTACK_SHARDS=2` over a two-queue TUN, idle keep-alive
//! connections held, and `ustack capture` through `USTACK_CONTROL`. Root and the tools:
//! skips without, unless `USTACK_REQUIRE_ROOT` / `USTACK_REQUIRE_TOOLS`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ustack_testkit::netns::{NetNs, VETH_USTACK, root_or_skip, tool_or_skip};

/// The libustack_preload.so of this build (target/<profile>, or its deps directory).
fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    [deps, deps.parent().expect("profile directory")]
        .iter()
        .map(|d| d.join("libustack_preload.so"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libustack_preload.so not found beside {}", exe.display()))
}

fn root_and_tools(test: &str, tools: &[&str]) -> bool {
    root_or_skip(test).is_some() && tools.iter().all(|t| tool_or_skip(test, t))
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A program under the preload, killed (with its process group: it runs under `timeout`)
/// when dropped; its stderr lines arrive on `lines` (and are kept in `log`).
struct Preloaded {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Preloaded {
    /// `argv` under the preload with `env`, bounded by `secs`.
    fn start(argv: &[&str], env: &[(&str, &str)], secs: u32) -> Preloaded {
        let mut child = Command::new("timeout")
            .args(["-k", "1", &secs.to_string()])
            .args(argv)
            .env("LD_PRELOAD", preload_lib())
            .env_remove("USTACK_FALLBACK")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {argv:?} under the preload: {e}"));
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Preloaded {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Wait (up to 20 s) for a stderr line containing `want`.
    fn wait_for(&mut self, want: &str) {
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(want);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("no line with {want:?} on stderr:\n{}", self.log.join("\n"));
    }
}

impl Drop for Preloaded {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            self.log.extend(self.lines.try_iter());
            eprintln!("the preloaded program's stderr:\n{}", self.log.join("\n"));
        }
    }
}

/// socat's transfer buffer for an echo through its `PIPE` address: at most `PIPE_BUF`
/// (4096), so that the echo cannot stall itself. socat moves the socket's bytes into a pipe
/// that only it reads, with a blocking write of up to its buffer (8192 by default) once
/// `poll` says the pipe is writable, which Linux says with one free page (`pipe_poll`); a
/// write of 8192 bytes into a pipe with one page free blocks for a reader that is socat
/// itself, for good. It happens whenever the socket's bytes come faster than socat can
/// send them back (the socket not writable for a while) until the pipe is nearly full:
/// with the kernel's own TCP on both ends (loopback in a namespace, 32 MiB echoed, four
/// `nice -n 19` CPU hogs) in 5 of 8 runs, and in 0 of 10 with `-b 4096`; it was the
/// packet link's "stall" of the noon session (socat found blocked in `anon_pipe_write`,
/// ustack's connection idle with everything acknowledged). A write of at most
/// `PIPE_BUF` bytes fits in the free page `poll` promised.
const SOCAT_PIPE_BUF: &str = "4096";

/// `socat TCP-LISTEN:7000 PIPE` under the preload on a veth pair, over `USTACK_LINK=packet`
/// and then `xdp` (ustack takes veth1 and its MAC in the namespace; the kernel is
/// 192.0.2.1 on veth0): a kernel client sends 256 KiB of a pattern and gets every byte
/// back.
#[test]
fn socat_serves_over_packet_and_xdp_on_a_veth_pair() {
    let test = "socat_serves_over_packet_and_xdp_on_a_veth_pair";
    if !root_and_tools(test, &["socat", "ethtool"]) {
        return;
    }
    let data: Vec<u8> = (0..256usize << 10)
        .map(|i| ((i * 7 + i / 251) & 0xff) as u8)
        .collect();
    let input = tmp("links-socat-in");
    std::fs::write(&input, &data).expect("the input");
    for link in ["packet", "xdp"] {
        let ns = NetNs::new().expect("a namespace");
        ns.veth_pair().expect("the veth pair");
        let netns = ns.path().to_str().expect("a UTF-8 path").to_owned();
        let mut server = Preloaded::start(
            // `-t 30`: after the client's EOF the echo goes on until done (socat's 0.5 s
            // by default could cut it short on a loaded machine). `-b 4096`: see
            // `SOCAT_PIPE_BUF`.
            &[
                "socat",
                "-d",
                "-d",
                "-t",
                "30",
                "-b",
                SOCAT_PIPE_BUF,
                "TCP-LISTEN:7000,reuseaddr",
                "PIPE",
            ],
            &[
                ("USTACK_LINK", link),
                ("USTACK_IFACE", VETH_USTACK),
                ("USTACK_NETNS", &netns),
                ("USTACK_ADDR", "192.0.2.2/24"),
            ],
            60,
        );
        server.wait_for("listening on");
        let output = tmp(&format!("links-socat-out-{link}"));
        let out = ns
            .command(
                Duration::from_secs(40),
                &["socat", "-t", "30", "-", "TCP:192.0.2.2:7000"],
            )
            .stdin(std::fs::File::open(&input).expect("the input"))
            .stdout(std::fs::File::create(&output).expect("the output"))
            .stderr(Stdio::piped())
            .output()
            .expect("the kernel's client");
        let got = std::fs::read(&output).expect("the echo");
        assert!(
            got == data,
            "{link}: {} of {} bytes echoed ({}); client: {}",
            got.len(),
            data.len(),
            if got.len() == data.len() {
                "different"
            } else {
                "short"
            },
            String::from_utf8_lossy(&out.stderr)
        );
        server.wait_for("accepting connection from AF=2 192.0.2.1:");
    }
}

/// nginx under the preload on `ns`'s tun0 (ustack 192.0.2.2), serving `dir`/html (an
/// `index.html` of "nginx on ustack") on port 8080 with `sendfile on`: `main` and `http`
/// are the configuration's lines of their own there, `env` the preload's variables beside
/// the link's, `listen` the port's `listen` directive. `dir` is made anew, readable by everyone (nginx's workers run as `nobody`).
fn start_nginx(
    dir: &Path,
    ns: &NetNs,
    main: &str,
    http: &str,
    listen: &str,
    env: &[(&str, &str)],
) -> Preloaded {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("html")).expect("nginx's directory");
    std::fs::write(dir.join("html/index.html"), "nginx on ustack\n").expect("index");
    let d = dir.display();
    let temp: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
        .iter()
        .map(|t| format!("  {t}_temp_path {d}/{t};\n"))
        .collect();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off;\n{main}\nerror_log stderr notice;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 1024; use epoll; }}\n\
             http {{\n  {http}\n  sendfile on;\n{temp}\
             server {{ listen {listen}; root {d}/html; }}\n}}\n"
        ),
    )
    .expect("nginx.conf");
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(dir).status();
    let netns = ns.path().to_str().expect("a UTF-8 path").to_owned();
    let mut all = vec![
        ("USTACK_TUN", "tun0"),
        ("USTACK_NETNS", netns.as_str()),
        ("USTACK_ADDR", "192.0.2.2/24"),
    ];
    all.extend_from_slice(env);
    let prefix = d.to_string();
    Preloaded::start(
        &["nginx", "-c", conf.to_str().expect("UTF-8"), "-p", &prefix],
        &all,
        90,
    )
}

/// One request to a control socket (a line of JSON each way); for `capture`, the stream.
fn control(path: &Path, req: &str) -> std::os::unix::net::UnixStream {
    let mut s = std::os::unix::net::UnixStream::connect(path)
        .unwrap_or_else(|e| panic!("the control socket {}: {e}", path.display()));
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("a read timeout");
    writeln!(s, "{req}").expect("the request");
    s
}

fn control_json(path: &Path, cmd: &str) -> serde_json::Value {
    let mut line = String::new();
    BufReader::new(control(path, &format!("{{\"cmd\":\"{cmd}\"}}")))
        .read_line(&mut line)
        .expect("the answer");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{cmd}: {e}: {line}"))
}

/// The records of a pcap stream (after its 24-byte header): each record's bytes.
fn pcap_records(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let len = u32::from_le_bytes(data[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        let end = (at + 16 + len).min(data.len());
        out.push(&data[at + 16..end]);
        at = end;
    }
    out
}

/// A bare IPv4 TCP packet's source, destination, source port, destination port, flags.
type Tcp = ([u8; 4], [u8; 4], u16, u16, u8);

fn tcp_of(p: &[u8]) -> Option<Tcp> {
    if p.len() < 40 || p[0] >> 4 != 4 || p[9] != 6 {
        return None;
    }
    let t = &p[usize::from(p[0] & 15) * 4..];
    Some((
        p[12..16].try_into().ok()?,
        p[16..20].try_into().ok()?,
        u16::from_be_bytes([t[0], t[1]]),
        u16::from_be_bytes([t[2], t[3]]),
        t[13],
    ))
}

/// nginx (`master_process off`) under the preload with `USTACK_SHARDS=2` over a two-queue
/// TUN and `USTACK_CONTROL`: 64 idle keep-alive connections from a kernel client
/// (tests/py/idle_clients.py) are held, land on both shards (`ss`: 64 established on port
/// 8080, each shard some) and all answer again after being idle; a `capture` on the
/// control socket during a curl shows that connection's packets both ways (SYN in, SYN-ACK
/// out, on port 8080).
#[test]
fn nginx_on_two_shards_holds_idle_connections_and_shows_its_frames_to_capture() {
    let test = "nginx_on_two_shards_holds_idle_connections_and_shows_its_frames_to_capture";
    if !root_and_tools(test, &["nginx", "curl", "python3"]) {
        return;
    }
    let dir = tmp("links-nginx");
    let ns = NetNs::new().expect("a namespace");
    ns.add_tun("tun0").expect("tun0");
    let ctl = tmp("links-nginx-control.sock");
    let mut nginx = start_nginx(
        &dir,
        &ns,
        "master_process off;\nworker_processes 1;",
        "access_log off;\n  keepalive_timeout 120s;",
        "8080",
        &[
            ("USTACK_SHARDS", "2"),
            ("USTACK_CONTROL", ctl.to_str().expect("UTF-8")),
        ],
    );
    nginx.wait_for("control socket");
    let curl = |what: &str| {
        ns.command(
            Duration::from_secs(10),
            &["curl", "-sS", "--max-time", "5", "http://192.0.2.2:8080/"],
        )
        .output()
        .unwrap_or_else(|e| panic!("curl ({what}): {e}"))
    };
    let mut ready = false;
    for _ in 0..100 {
        if curl("until nginx answers").stdout == b"nginx on ustack\n" {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ready, "nginx never answered");

    // The capture: on once its header is read; a curl's packets; then hung up.
    let mut cap = control(&ctl, r#"{"cmd":"capture","seconds":3}"#);
    let mut pcap = vec![0u8; 24];
    cap.read_exact(&mut pcap).expect("the pcap header");
    assert_eq!(
        u32::from_le_bytes(pcap[20..24].try_into().expect("4 bytes")),
        101,
        "LINKTYPE_RAW (TUN)"
    );
    let out = curl("captured");
    assert_eq!(out.stdout, b"nginx on ustack\n", "the captured curl");
    cap.read_to_end(&mut pcap).expect("the capture");
    let tcp: Vec<_> = pcap_records(&pcap).into_iter().filter_map(tcp_of).collect();
    let (kernel, ustack) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    assert!(
        tcp.iter()
            .any(|&(s, d, _, dp, f)| s == kernel && d == ustack && dp == 8080 && f & 0x12 == 0x02),
        "no SYN to port 8080 in the capture: {tcp:?}"
    );
    assert!(
        tcp.iter()
            .any(|&(s, d, sp, _, f)| s == ustack && d == kernel && sp == 8080 && f & 0x12 == 0x12),
        "no SYN-ACK from port 8080 in the capture: {tcp:?}"
    );

    // 64 idle keep-alive connections, on both shards.
    let n = 64;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/idle_clients.py");
    let mut clients = ns
        .command(
            Duration::from_secs(60),
            &[
                "python3",
                script.to_str().expect("UTF-8"),
                "192.0.2.2",
                "8080",
                &n.to_string(),
            ],
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the idle clients");
    let mut said = BufReader::new(clients.stdout.take().expect("stdout"));
    let mut line = String::new();
    said.read_line(&mut line).expect("the clients' line");
    assert_eq!(line.trim(), format!("held {n}"), "idle connections held");
    let ss = control_json(&ctl, "ss");
    let established: Vec<u64> = ss["sockets"]
        .as_array()
        .expect("ss: sockets")
        .iter()
        .filter(|s| {
            s["state"] == "ESTAB" && s["local"].as_str().is_some_and(|l| l.ends_with(":8080"))
        })
        .filter_map(|s| s["shard"].as_u64())
        .collect();
    assert_eq!(established.len(), n, "established on port 8080: {ss}");
    for shard in [0, 1] {
        assert!(
            established.contains(&shard),
            "no connection on shard {shard}: {ss}"
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    writeln!(clients.stdin.take().expect("stdin")).expect("asking again");
    line.clear();
    said.read_line(&mut line).expect("the clients' last line");
    let status = clients.wait().expect("the clients");
    let mut err = String::new();
    let _ = clients
        .stderr
        .take()
        .map(|mut e| e.read_to_string(&mut err));
    assert_eq!(line.trim(), format!("answered {n}"), "clients: {err}");
    assert!(status.success(), "clients: {err}");
}

/// nginx with its master process and `worker_processes 2` (workers running as `nobody`)
/// under the preload over TUN, with one listener (both workers inherit it) and then with
/// `reuseport` (one per worker, made by the master, each worker keeping its own): each
/// worker gets a stack of its own on a TUN queue of its own after `fork`, re-making the
/// listener it uses; the master, which only listens, stops taking flows. From the
/// kernel's side curl fetches a 10 MiB file (byte for byte), wrk drives 20 connections
/// for 3 s with only 200s, and nginx's access log shows both workers' process ids
/// answering.
#[test]
fn nginx_with_two_worker_processes_serves_from_both() {
    let test = "nginx_with_two_worker_processes_serves_from_both";
    if !root_and_tools(test, &["nginx", "curl", "wrk"]) {
        return;
    }
    two_workers("8080");
    two_workers("8080 reuseport");
}

fn two_workers(listen: &str) {
    // Under /tmp: the workers (`nobody`) must read it.
    let dir = std::env::temp_dir().join(format!("ustack-preload-fork-{}", std::process::id()));
    let big: Vec<u8> = (0..10usize << 20)
        .map(|i| ((i * 131 + i / 4093) & 0xff) as u8)
        .collect();
    let ns = NetNs::new().expect("a namespace");
    ns.add_tun("tun0").expect("tun0");
    let mut nginx = start_nginx(
        &dir,
        &ns,
        "worker_processes 2;",
        &format!(
            "log_format w '$pid $status';\n  access_log {}/access.log w;",
            dir.display()
        ),
        listen,
        &[],
    );
    std::fs::write(dir.join("html/big.bin"), &big).expect("the 10 MiB file");
    nginx.wait_for("start worker process");
    nginx.wait_for("start worker process");
    let run = |argv: &[&str], secs: u64| {
        let out = ns
            .command(Duration::from_secs(secs), argv)
            .output()
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.success(),
        )
    };
    let url = "http://192.0.2.2:8080";
    let index = format!("{url}/");
    let mut ready = false;
    for _ in 0..100 {
        if run(&["curl", "-sS", "--max-time", "2", &index], 5).0 == "nginx on ustack\n" {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(ready, "nginx never answered");
    // Ten pages on ten connections: each lands on either worker, none on the master.
    for i in 0..10 {
        let (body, err, _) = run(&["curl", "-sS", "--max-time", "5", &index], 8);
        assert_eq!(body, "nginx on ustack\n", "page {i}: {err}");
    }
    let got = dir.join("got.bin");
    let file_url = format!("{url}/big.bin");
    let (_, err, ok) = run(
        &[
            "curl",
            "-sS",
            "--max-time",
            "25",
            "-o",
            got.to_str().expect("UTF-8"),
            &file_url,
        ],
        30,
    );
    assert!(ok, "curl big.bin: {err}");
    let back = std::fs::read(&got).expect("curl's copy");
    assert!(
        back == big,
        "big.bin: {} bytes back of {}, {}",
        back.len(),
        big.len(),
        if back.len() == big.len() {
            "different"
        } else {
            "short"
        }
    );
    let (wrk, err, ok) = run(&["wrk", "-t2", "-c20", "-d3s", &index], 20);
    assert!(ok, "wrk: {err}");
    assert!(
        !wrk.contains("Non-2xx") && !wrk.contains("Socket errors"),
        "{wrk}"
    );
    let requests: u64 = wrk
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0);
    assert!(requests > 100, "wrk: {wrk}");
    // Both workers answered (the access log's `$pid $status`).
    let log = std::fs::read_to_string(dir.join("access.log")).expect("the access log");
    let mut pids: Vec<&str> = log.lines().filter_map(|l| l.strip_suffix(" 200")).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(
        pids.len(),
        2,
        "listen {listen}: worker pids that answered 200: {pids:?}"
    );
    nginx.log.extend(nginx.lines.try_iter());
    let bad: Vec<&String> = nginx
        .log
        .iter()
        .filter(|l| {
            ["[alert]", "[crit]", "[emerg]"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    assert!(bad.is_empty(), "nginx: {bad:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A listener shared down a chain of forks (tests/py/fork_chain.py under the preload):
/// the parent only listens and waits, its child accepts one connection, the grandchild
/// six. Each process that only listens when it forks stops taking flows, so every
/// connection reaches the process accepting (none hangs in a waiting parent's queue),
/// and each answers from its own stack; the grandchild's last answer (4 MiB) arrives
/// whole though it exits right after writing it.
#[test]
fn a_listener_is_served_down_a_chain_of_forks() {
    let test = "a_listener_is_served_down_a_chain_of_forks";
    if !root_and_tools(test, &["python3", "socat"]) {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    ns.add_tun("tun0").expect("tun0");
    let netns = ns.path().to_str().expect("a UTF-8 path").to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/fork_chain.py");
    let mut chain = Preloaded::start(
        &["python3", script.to_str().expect("UTF-8"), "7100", "6"],
        &[
            ("USTACK_TUN", "tun0"),
            ("USTACK_NETNS", &netns),
            ("USTACK_ADDR", "192.0.2.2/24"),
        ],
        60,
    );
    let ask = |what: &str| {
        let line = format!("echo {what} | socat -t 3 - TCP:192.0.2.2:7100");
        let out = ns
            .command(Duration::from_secs(8), &["sh", "-c", &line])
            .output()
            .expect("the kernel's client");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The first answer, retried until the stack is up and the child accepts.
    let mut first = (String::new(), String::new());
    for _ in 0..50 {
        first = ask("hi0");
        if !first.0.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(first.0, "child:hi0\n", "the child's answer: {}", first.1);
    for i in 1..=6 {
        let (out, err) = ask(&format!("hi{i}"));
        let want = format!("grandchild:hi{i}\n");
        if i < 6 {
            assert_eq!(out, want, "connection {i}: {err}");
        } else {
            // The last answer, 4 MiB behind it, written just before the grandchild
            // exits: its exit waits until ustack has it all delivered.
            let tail = out
                .strip_prefix(&want)
                .unwrap_or_else(|| panic!("last: {err}"));
            assert!(
                tail.len() == 4 << 20 && tail.bytes().all(|b| b == b'x'),
                "the last answer: {} of {} bytes behind it; {err}",
                tail.len(),
                4 << 20
            );
        }
    }
    chain.wait_for("done");
}
