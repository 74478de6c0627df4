//! libustack_preload.so under real programs, with the kernel as the peer: a TUN interface
//! in a namespace of the test's own (made beforehand, `multi_queue`; the preload attaches
//! to it with `USTACK_TUN=tun0 USTACK_NETNS=<path>`), ustack at 192.0.2.2, the kernel at
//! 192.0.2.1. The programs run in the test's namespace; only their TUN is in the other.
//! Root and the tools: skips without, unless `USTACK_REQUIRE_ROOT` / `USTACK_REQUIRE_TOOLS`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ustack_testkit::netns::{NetNs, root_or_skip, tool_or_skip};

/// The libustack_preload.so of this build (target/<profile>, or its deps directory).
fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory");
    for dir in [deps, deps.parent().expect("profile directory")] {
        let p = dir.join("libustack_preload.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libustack_preload.so not found beside {}", exe.display());
}

/// A namespace with tun0 in it, the kernel's end configured.
fn rig() -> NetNs {
    let ns = NetNs::new().expect("a network namespace");
    ns.add_tun("tun0").expect("creating and configuring tun0");
    ns
}

/// `cmd` with the preload and the rig's configuration.
fn preloaded(cmd: &mut Command, ns: &NetNs) {
    cmd.env("LD_PRELOAD", preload_lib())
        .env("USTACK_TUN", "tun0")
        .env("USTACK_NETNS", ns.path())
        .env("USTACK_ADDR", "192.0.2.2/24")
        .env_remove("USTACK_FALLBACK");
}

/// Wait for `child` up to `limit`, killing it then: its output (stdout, stderr, read
/// while it runs: a full pipe would stall it) and whether it was killed.
fn finish(mut child: Child, limit: Duration, what: &str) -> (Output, bool) {
    fn drain<R: std::io::Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    }
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting") {
            break st;
        }
        if Instant::now() > deadline {
            // `timeout` (every command here runs under one) passes a TERM on to its
            // process group, the grandchildren holding our pipes included.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_millis(500));
            let _ = child.kill();
            timed_out = true;
            eprintln!("{what}: killed after {limit:?}");
            break child.wait().expect("waiting");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // What it left behind in its process group (`timeout` makes one: forked children, a
    // child stuck in its exit) still holds the pipes: killed, so the readers end.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
    let output = Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    (output, timed_out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Compile tests/c/NAME.c into the test's temporary directory.
fn compile(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = dir.join("tests/c").join(format!("{name}.c"));
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("preload-{name}"));
    ustack_testkit::cc::compile_c::<&str>(&src, &exe, &[]);
    exe
}

/// tests/c/calls.c under the preload: every interposed call on ustack sockets beside
/// kernel files (a pipe, a Unix socket pair, an IPv6 socket), against the kernel's TCP
/// echo (socat) and a kernel client (socat) of its server.
#[test]
fn a_c_program_on_ustack_by_ld_preload() {
    let test = "a_c_program_on_ustack_by_ld_preload";
    if !root_and_tools(test, &["socat"]) {
        return;
    }
    let exe = compile("calls");
    let ns = rig();
    let echo = ns
        .command(
            Duration::from_secs(90),
            &[
                "socat",
                "TCP-LISTEN:7,bind=192.0.2.1,reuseaddr,fork",
                "PIPE",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the kernel's echo");
    // The kernel's UDP echo (recvmmsg/sendmmsg on a ustack datagram socket).
    let udp_echo = ns
        .command(
            Duration::from_secs(90),
            &["socat", "UDP-RECVFROM:7,bind=192.0.2.1,fork", "PIPE"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the kernel's UDP echo");
    // The kernel's client of the program's server: retried until the program listens.
    let client = ns
        .command(
            Duration::from_secs(60),
            &[
                "sh",
                "-c",
                "for i in $(seq 300); do \
                   printf 'hello from the kernel\\n' | socat -t 5 - TCP:192.0.2.2:8000 2>/dev/null \
                   && exit 0; sleep 0.1; done; exit 1",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the kernel's client");
    let mut cmd = Command::new(&exe);
    preloaded(&mut cmd, &ns);
    let prog = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the C program");
    let (out, timed_out) = finish(prog, Duration::from_secs(60), "calls");
    let (cout, _) = finish(client, Duration::from_secs(30), "the kernel's client");
    // TERM to its `timeout`, which passes it to socat and the children it forked.
    let _ = finish(echo, Duration::ZERO, "the kernel's echo");
    let _ = finish(udp_echo, Duration::ZERO, "the kernel's UDP echo");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && !timed_out,
        "calls failed ({}):\n{stdout}{}",
        out.status,
        text(&out.stderr)
    );
    assert!(stdout.contains("every call checked"), "{stdout}");
    assert_eq!(
        text(&cout.stdout),
        "ack:hello from the kernel\n",
        "the kernel's client: {}",
        text(&cout.stderr)
    );
}

/// socat, unmodified, as a TCP echo server on ustack (`TCP-LISTEN:7000 PIPE` under the
/// preload); a kernel client sends 1 MiB of a known pattern and gets every byte back.
#[test]
fn socat_serves_an_echo_over_ustack() {
    let test = "socat_serves_an_echo_over_ustack";
    if !root_and_tools(test, &["socat"]) {
        return;
    }
    let ns = rig();
    let data: Vec<u8> = (0..1usize << 20)
        .map(|i| ((i * 13 + i / 509) & 0xff) as u8)
        .collect();
    let input = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-socat-in");
    std::fs::write(&input, &data).expect("writing the input");
    let mut cmd = bounded(60);
    // `-b 4096`: at most PIPE_BUF a write into the pipe only socat reads, or the echo can
    // block itself for good once that pipe is nearly full (tests/links.rs,
    // `SOCAT_PIPE_BUF`: it happens with the kernel's TCP too).
    cmd.args([
        "socat",
        "-d",
        "-d",
        "-b",
        "4096",
        "TCP-LISTEN:7000,reuseaddr",
        "PIPE",
    ]);
    preloaded(&mut cmd, &ns);
    let server = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting socat under the preload");
    // Retry until the server listens: a refused connect exits socat at once.
    // The echo goes to a file: a pipe nobody reads while the client runs would fill and
    // stall the transfer.
    let output = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-socat-out");
    let mut got = Vec::new();
    let mut last_err = String::new();
    for _ in 0..100 {
        let client = ns
            .command(
                Duration::from_secs(30),
                &["socat", "-t", "10", "-", "TCP:192.0.2.2:7000"],
            )
            .stdin(std::fs::File::open(&input).expect("the input"))
            .stdout(std::fs::File::create(&output).expect("the output"))
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the kernel's client");
        let (out, _) = finish(client, Duration::from_secs(35), "the kernel's client");
        if out.status.success() {
            got = std::fs::read(&output).expect("reading the output");
            break;
        }
        last_err = text(&out.stderr);
        if !last_err.contains("Connection refused") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (sout, _) = finish(server, Duration::from_secs(30), "socat on ustack");
    let mut serr = text(&sout.stderr);
    if serr.len() > 4000 {
        serr = serr[serr.len() - 4000..].to_owned();
    }
    assert_eq!(
        got.len(),
        data.len(),
        "bytes echoed; client: {last_err}\nserver: {serr}"
    );
    assert!(got == data, "the echo differs from what was sent");
    assert!(
        serr.contains("accepting connection from AF=2 192.0.2.1:"),
        "socat's log: {serr}"
    );
    // A blocking write takes every byte, as Linux's does (socat warns of a short one).
    assert!(!serr.contains("only wrote"), "socat's log: {serr}");
}

/// IPv6 through the preload: with `USTACK_ADDR6`, socat's `TCP6-LISTEN` (an `AF_INET6`
/// socket on `[::]`) is ustack's. A kernel client over IPv6 gets 229 KB echoed (SHA-256
/// checked) and socat logs its peer as an `AF=10` address; a kernel client over IPv4
/// reaches the same kind of dual-stack listener, its address `[::ffff:192.0.2.1]` as
/// Linux gives it. (socat serves one connection a run: a server per client.)
#[test]
fn an_ipv6_server_on_ustack_serves_kernel_clients_of_both_families() {
    let test = "an_ipv6_server_on_ustack_serves_kernel_clients_of_both_families";
    if !root_and_tools(test, &["socat", "sha256sum"]) {
        return;
    }
    let ns = rig();
    // The rig turns IPv6 off on the kernel's end of tun0: on again, 2001:db8::1/64.
    for argv in [
        &["sysctl", "-qw", "net.ipv6.conf.tun0.disable_ipv6=0"][..],
        &[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8::1/64",
            "dev",
            "tun0",
            "nodad",
        ],
    ] {
        let out = ns.run(Duration::from_secs(5), argv).expect("ip -6");
        assert!(out.status.success(), "{argv:?}: {out:?}");
    }
    let seq = "seq 1 40000";
    let want = Command::new("sh")
        .args(["-c", &format!("{seq} | sha256sum")])
        .output()
        .expect("sha256sum");
    let want = text(&want.stdout);
    let clients = [
        (
            format!("{seq} | socat -t 5 - TCP6:[2001:db8::2]:7006 | sha256sum"),
            want.as_str(),
            [
                "accepting connection from AF=10 [2001:0db8:0000:0000:0000:0000:0000:0001]:",
                " on AF=10 [2001:0db8:0000:0000:0000:0000:0000:0002]:7006",
            ],
        ),
        (
            "printf hello4 | socat -t 3 - TCP4:192.0.2.2:7006".to_owned(),
            "hello4",
            // ::ffff:192.0.2.1 and, getsockname's, ::ffff:192.0.2.2.
            [
                "accepting connection from AF=10 [0000:0000:0000:0000:0000:ffff:c000:0201]:",
                " on AF=10 [0000:0000:0000:0000:0000:ffff:c000:0202]:7006",
            ],
        ),
    ];
    for (client, answer, logged) in clients {
        let mut cmd = bounded(40);
        cmd.args(["socat", "-d", "-d", "TCP6-LISTEN:7006,reuseaddr", "PIPE"]);
        cmd.env("USTACK_ADDR6", "2001:db8::2/64");
        let server = start_preloaded(cmd, &ns, "socat on [::]");
        let result =
            std::panic::catch_unwind(|| until_answers(&ns, &["sh", "-c", &client], answer));
        let log = stop_server(server, "socat on [::]", result);
        for l in logged {
            assert!(log.contains(l), "{client}: socat's log: {log}");
        }
    }
}

/// Without a configuration, an `AF_INET` socket fails with a message on stderr that says
/// what is missing; with `USTACK_FALLBACK=kernel` the program runs on the kernel (socat
/// sends a line to a kernel listener of the test's own, on loopback). No root needed.
#[test]
fn a_bad_configuration_fails_clearly_or_falls_back_to_the_kernel() {
    let test = "a_bad_configuration_fails_clearly_or_falls_back_to_the_kernel";
    if !tool_or_skip(test, "socat") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a kernel listener");
    let port = listener.local_addr().expect("its port").port();
    let target = format!("TCP:127.0.0.1:{port}");
    let run = |env: &[(&str, &str)]| {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "1", "20", "socat", "-u", "OPEN:/dev/null", &target])
            .env("LD_PRELOAD", preload_lib())
            .env_remove("USTACK_FALLBACK")
            .env_remove("USTACK_ADDR")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().expect("socat");
        finish(child, Duration::from_secs(25), "socat").0
    };
    let out = run(&[]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("ustack preload: USTACK_ADDR is not set")
            && err.contains("USTACK_FALLBACK=kernel runs them on the kernel"),
        "{err}"
    );
    let out = run(&[("USTACK_ADDR", "192.0.2.2/24"), ("USTACK_LINK", "xdp")]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("USTACK_LINK=xdp needs USTACK_IFACE"), "{err}");

    let out = run(&[("USTACK_FALLBACK", "kernel")]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("USTACK_FALLBACK=kernel: AF_INET sockets go to the kernel"),
        "{err}"
    );
    // The connection the fallback made, on the kernel (the refused ones never came).
    listener.set_nonblocking(true).expect("non-blocking");
    assert!(
        listener.accept().is_ok(),
        "no connection reached the kernel"
    );
}

/// Root and every one of `tools`, or skip (a failure under `USTACK_REQUIRE_*`).
fn root_and_tools(test: &str, tools: &[&str]) -> bool {
    root_or_skip(test).is_some() && tools.iter().all(|t| tool_or_skip(test, t))
}

/// Stop a server the test started (TERM, then its output): its stderr. If the test's
/// checks (`result`) failed, its log is printed and the failure goes on.
fn stop_server(server: Child, what: &str, result: std::thread::Result<()>) -> String {
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let (out, _) = finish(server, Duration::from_secs(10), what);
    let log = text(&out.stderr);
    if let Err(e) = result {
        eprintln!("{what}'s log:\n{}{log}", text(&out.stdout));
        std::panic::resume_unwind(e);
    }
    log
}

/// `cmd` (a `timeout ... PROGRAM ...` command) under the preload on the rig: started,
/// its output piped.
fn start_preloaded(mut cmd: Command, ns: &NetNs, what: &str) -> Child {
    preloaded(&mut cmd, ns);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what} under the preload: {e}"))
}

/// Run `argv` in the namespace every 100 ms (up to 10 s) until its stdout is `want`.
fn until_answers(ns: &NetNs, argv: &[&str], want: &str) {
    for _ in 0..100 {
        let out = ns
            .command(Duration::from_secs(5), argv)
            .output()
            .expect("a command in the namespace");
        if text(&out.stdout) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("`{}` never answered {want:?}", argv.join(" "));
}

/// A command bounded in time: `timeout -k 1 SECS ...` (its process group is the
/// program's, which `finish` kills at the end).
fn bounded(secs: u32) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "1", &secs.to_string()]);
    cmd
}

/// One request to a control socket (`ustack stat`'s protocol: a line of JSON each way).
fn control(path: &Path, cmd: &str) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let mut s = std::os::unix::net::UnixStream::connect(path)
        .unwrap_or_else(|e| panic!("the control socket {}: {e}", path.display()));
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("a read timeout");
    writeln!(s, "{{\"cmd\":\"{cmd}\"}}").expect("the request");
    let mut line = String::new();
    std::io::BufReader::new(s)
        .read_line(&mut line)
        .expect("the answer");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{cmd}: {e}: {line}"))
}

/// A counter of `/proc/net/snmp`'s text (`table`: `Tcp`, `Udp` ...).
fn snmp_counter(snmp: &str, table: &str, name: &str) -> Option<u64> {
    let prefix = format!("{table}:");
    let mut rows = snmp.lines().filter(|l| l.starts_with(&prefix));
    let names = rows.next()?.split_whitespace();
    let values = rows.next()?.split_whitespace();
    names
        .zip(values)
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
}

/// Run `argv` in the namespace, bounded; its output, checked for success.
fn in_ns(ns: &NetNs, limit: Duration, argv: &[&str]) -> Output {
    let child = ns
        .command(limit, argv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a command in the namespace");
    let (out, _) = finish(child, limit + Duration::from_secs(5), argv[0]);
    assert!(
        out.status.success(),
        "`{}` failed ({}): {:.2000}{:.2000}",
        argv.join(" ").chars().take(200).collect::<String>(),
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// redis-server, unmodified, on ustack: redis-cli from the kernel's side stores a 100 KB
/// value and reads it back whole, and redis-benchmark drives 50 clients through SET and
/// GET, unpipelined and 16 deep; redis's own count of commands proves they all reached it.
/// Its control socket (`USTACK_CONTROL`) answers `ss` (the listener) and `stat` (the
/// connections it accepted), as `ustack ss` and `ustack stat` ask.
#[test]
fn redis_serves_redis_benchmark_over_ustack() {
    let test = "redis_serves_redis_benchmark_over_ustack";
    if !root_and_tools(test, &["redis-server", "redis-cli", "redis-benchmark"]) {
        return;
    }
    let ns = rig();
    let mut cmd = bounded(120);
    cmd.args([
        "redis-server",
        "--port",
        "6379",
        "--bind",
        "0.0.0.0",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--dir",
        env!("CARGO_TARGET_TMPDIR"),
    ]);
    let ctl = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-redis-control.sock");
    cmd.env("USTACK_CONTROL", &ctl);
    let server = start_preloaded(cmd, &ns, "redis-server");
    let limit = Duration::from_secs(60);
    let result = std::panic::catch_unwind(|| {
        until_answers(&ns, &["redis-cli", "-h", "192.0.2.2", "ping"], "PONG\n");
        let value: String = (0..100_000usize)
            .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
            .collect();
        let set = in_ns(
            &ns,
            limit,
            &["redis-cli", "-h", "192.0.2.2", "set", "big", &value],
        );
        assert_eq!(text(&set.stdout).trim(), "OK");
        let got = in_ns(
            &ns,
            limit,
            &["redis-cli", "-h", "192.0.2.2", "--raw", "get", "big"],
        );
        assert!(text(&got.stdout).trim_end() == value, "GET big differs");
        let n = 20_000;
        for pipeline in ["1", "16"] {
            let out = in_ns(
                &ns,
                limit,
                &[
                    "redis-benchmark",
                    "-h",
                    "192.0.2.2",
                    "-t",
                    "set,get",
                    "-n",
                    &n.to_string(),
                    "-c",
                    "50",
                    "-P",
                    pipeline,
                    "-q",
                ],
            );
            let o = text(&out.stdout);
            assert!(
                o.contains("SET: ") && o.contains("GET: ") && o.contains("requests per second"),
                "redis-benchmark -P {pipeline}: {o}{}",
                text(&out.stderr)
            );
        }
        let info = in_ns(
            &ns,
            limit,
            &["redis-cli", "-h", "192.0.2.2", "info", "stats"],
        );
        let info = text(&info.stdout);
        let done: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total_commands_processed in {info}"));
        assert!(
            done >= 4 * n,
            "redis processed {done} commands, want >= {}",
            4 * n
        );
        // The control socket: redis's listener in `ss`, its accepted connections in
        // `stat` (4 runs of 50 clients, and redis-cli's).
        let ss = control(&ctl, "ss");
        let socks = ss["sockets"].as_array().expect("ss: sockets");
        assert!(
            socks
                .iter()
                .any(|s| s["local"] == "0.0.0.0:6379" && s["state"] == "LISTEN"),
            "ss: {ss}"
        );
        let stat = control(&ctl, "stat");
        let snmp = stat["snmp"].as_str().expect("stat: snmp");
        let opens = snmp_counter(snmp, "Tcp", "PassiveOpens").expect("Tcp PassiveOpens");
        assert!(opens >= 200, "PassiveOpens {opens}:\n{snmp}");
    });
    stop_server(server, "redis-server", result);
}

/// nginx, unmodified (one process: `master_process off`, as a forked worker could not use
/// the parent's ustack sockets, docs/preload.md), serving static files on ustack with
/// `sendfile on` (the preload's sendfile), epoll and accept4: curl from the kernel's side
/// fetches a 10 MiB file whole (compared byte for byte) and several pages over one
/// keep-alive connection; wrk drives 50 connections for 3 s with every answer a 200.
#[test]
fn nginx_serves_curl_and_wrk_over_ustack() {
    let test = "nginx_serves_curl_and_wrk_over_ustack";
    if !root_and_tools(test, &["nginx", "curl", "wrk"]) {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-nginx");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("html")).expect("nginx's directory");
    let big: Vec<u8> = (0..10usize << 20)
        .map(|i| ((i * 131 + i / 4093) & 0xff) as u8)
        .collect();
    std::fs::write(dir.join("html/big.bin"), &big).expect("the 10 MiB file");
    std::fs::write(dir.join("html/index.html"), "hello from nginx on ustack\n").expect("index");
    let conf = dir.join("nginx.conf");
    let d = dir.display();
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\nerror_log stderr info;\n\
             pid {d}/nginx.pid;\nevents {{ worker_connections 1024; use epoll; }}\n\
             http {{\n  access_log off;\n  sendfile on;\n  keepalive_requests 100000;\n\
             client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             server {{ listen 8080; root {d}/html; }}\n}}\n"
        ),
    )
    .expect("nginx.conf");
    let ns = rig();
    let mut cmd = bounded(120);
    cmd.args(["nginx", "-c"]).arg(&conf).arg("-p").arg(&dir);
    let server = start_preloaded(cmd, &ns, "nginx");
    let limit = Duration::from_secs(30);
    let url = "http://192.0.2.2:8080";
    let result = std::panic::catch_unwind(|| {
        let index = format!("{url}/");
        until_answers(
            &ns,
            &["curl", "-sS", "--max-time", "2", &index],
            "hello from nginx on ustack\n",
        );
        // The 10 MiB file, whole.
        let got = dir.join("got.bin");
        let file_url = format!("{url}/big.bin");
        in_ns(
            &ns,
            limit,
            &[
                "curl",
                "-sS",
                "--max-time",
                "25",
                "-o",
                got.to_str().expect("a UTF-8 path"),
                &file_url,
            ],
        );
        let back = std::fs::read(&got).expect("curl's copy");
        assert_eq!(back.len(), big.len(), "bytes of big.bin");
        assert!(back == big, "big.bin differs from what nginx served");
        // Five requests over one keep-alive connection.
        let out = in_ns(
            &ns,
            limit,
            &[
                "curl",
                "-sS",
                "-v",
                "--max-time",
                "10",
                &index,
                &index,
                &index,
                &index,
                &index,
            ],
        );
        assert_eq!(
            text(&out.stdout),
            "hello from nginx on ustack\n".repeat(5),
            "five pages"
        );
        let verbose = text(&out.stderr);
        assert_eq!(
            verbose.matches("Re-using existing connection").count(),
            4,
            "keep-alive: {verbose}"
        );
        // wrk: 50 connections, 3 s, every answer a 200.
        let out = in_ns(
            &ns,
            limit,
            &["wrk", "-t1", "-c50", "-d3s", "--latency", &index],
        );
        let o = text(&out.stdout);
        let done: u64 = o
            .lines()
            .find_map(|l| l.trim().split_once(" requests in "))
            .and_then(|(n, _)| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no request count from wrk: {o}"));
        assert!(done >= 100, "wrk made {done} requests: {o}");
        assert!(
            !o.contains("Non-2xx") && !o.contains("Socket errors"),
            "wrk saw errors: {o}"
        );
    });
    let log = stop_server(server, "nginx", result);
    for bad in ["[alert]", "[crit]", "[emerg]", "ustack preload:"] {
        assert!(!log.contains(bad), "nginx's log has {bad}:\n{log}");
    }
}

/// A server that forks per connection (`socat TCP-LISTEN:...,fork`) is refused clearly, as
/// docs/preload.md says: the child's calls on the connection it inherited fail with
/// `EBADFD` (its `poll`: `POLLNVAL`) and a line on stderr naming the cause, the client gets
/// no echo but a closed connection (the parent's close), and the server goes on accepting.
#[test]
fn a_server_forking_per_connection_is_refused_clearly() {
    let test = "a_server_forking_per_connection_is_refused_clearly";
    if !root_and_tools(test, &["socat"]) {
        return;
    }
    let ns = rig();
    let mut cmd = bounded(60);
    cmd.args(["socat", "TCP-LISTEN:7001,reuseaddr,fork", "PIPE"]);
    let server = start_preloaded(cmd, &ns, "socat");
    let result = std::panic::catch_unwind(|| {
        for round in 0..2 {
            // Retried until the server listens (a refused connect fails socat at once) on
            // an interface that is up.
            let mut out = None;
            for _ in 0..100 {
                let o = ns
                    .command(
                        Duration::from_secs(10),
                        &["sh", "-c", "echo hello | socat -t 3 - TCP:192.0.2.2:7001"],
                    )
                    .output()
                    .expect("the kernel's client");
                // Refused: not listening yet; unreachable: the TUN is not up yet.
                let err = text(&o.stderr);
                if !["Connection refused", "unreachable", "No route to host"]
                    .iter()
                    .any(|e| err.contains(e))
                {
                    out = Some(o);
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let out = out.expect("the server never listened");
            assert_eq!(
                text(&out.stdout),
                "",
                "round {round}: an echo came back from a forked child: {}",
                text(&out.stderr)
            );
        }
    });
    let log = stop_server(server, "socat", result);
    // One line from each forked child (its poll of the inherited socket fails).
    let refusals = log
        .matches(
            "is a ustack connection of the parent process: after fork only listening (and \
             unconnected) sockets are carried into the child",
        )
        .count();
    assert!(refusals >= 2, "socat's log: {log}");
}

/// A program that writes, closes and exits at once (python3, unmodified, as a client)
/// has its bytes delivered, as on the kernel, whose sockets outlive their process: the
/// preload's exit waits until they are acknowledged. The writer's 512 KiB fit its 1 MiB
/// send buffer, so `sendall` returns at once; the kernel's receiver, with a 64 KiB
/// receive buffer, starts reading only after a second: when the program exits, most of
/// its bytes are still in ustack.
#[test]
fn a_program_that_exits_right_after_writing_has_every_byte_delivered() {
    let test = "a_program_that_exits_right_after_writing_has_every_byte_delivered";
    if !root_and_tools(test, &["python3"]) {
        return;
    }
    const LEN: usize = 512 << 10;
    let ns = rig();
    let receiver = ns
        .command(
            Duration::from_secs(60),
            &[
                "python3",
                "-c",
                "import socket, time\n\
                 l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                 l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)\n\
                 l.bind(('192.0.2.1', 7003)); l.listen(1); print('listening', flush=True)\n\
                 c, _ = l.accept(); c.settimeout(5); time.sleep(1); n = 0\n\
                 while True:\n    try: b = c.recv(65536)\n    except socket.timeout: break\n    if not b: break\n    n += len(b)\n\
                 print(n)",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the kernel's receiver");
    std::thread::sleep(Duration::from_millis(500));
    let mut cmd = bounded(30);
    cmd.args([
        "python3",
        "-c",
        &format!(
            "import socket\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)\n\
             s.connect(('192.0.2.1', 7003))\n\
             s.sendall(b'x' * {LEN}); s.close()"
        ),
    ]);
    preloaded(&mut cmd, &ns);
    let out = cmd.output().expect("the preloaded writer");
    assert!(out.status.success(), "the writer: {}", text(&out.stderr));
    let (rout, _) = finish(receiver, Duration::from_secs(40), "the kernel's receiver");
    let printed = text(&rout.stdout);
    assert_eq!(
        printed.lines().last(),
        Some(LEN.to_string().as_str()),
        "bytes received; receiver: {printed} {}; writer: {}",
        text(&rout.stderr),
        text(&out.stderr)
    );
}

// ---- clients under the preload against kernel servers; memcached (issue 17, pcalls) ------

/// A kernel server in the rig's namespace, on 192.0.2.1 (`argv`, bounded): started.
fn kernel_server(ns: &NetNs, argv: &[&str]) -> Child {
    ns.command(Duration::from_secs(60), argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting the kernel's {}: {e}", argv[0]))
}

/// A program under the preload, bounded (`secs`), its stdin from `input` and its stdout
/// to `output`: retried every 100 ms (up to 10 s) while the kernel's server does not
/// listen yet (`Connection refused` on its stderr). Its output and stderr at the end.
fn client_until_served(
    ns: &NetNs,
    argv: &[&str],
    input: Option<&Path>,
    output: &Path,
    secs: u32,
) -> (Output, String) {
    let mut last = String::new();
    for _ in 0..100 {
        let mut cmd = bounded(secs);
        cmd.args(argv);
        preloaded(&mut cmd, ns);
        let stdin = match input {
            Some(p) => Stdio::from(std::fs::File::open(p).expect("the input")),
            None => Stdio::null(),
        };
        let child = cmd
            .stdin(stdin)
            .stdout(std::fs::File::create(output).expect("the output"))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} under the preload: {e}", argv[0]));
        let (out, _) = finish(child, Duration::from_secs(u64::from(secs) + 5), argv[0]);
        last = text(&out.stderr);
        if out.status.success() || !last.to_lowercase().contains("refused") {
            return (out, last);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "`{}` never got past `Connection refused`: {last}",
        argv.join(" ")
    );
}

/// curl and socat, unmodified, as clients on ustack of kernel servers over TUN: curl
/// fetches a 4 MiB file from the kernel's HTTP server (socat answering with a prepared
/// response) and gets it byte for byte; socat sends 1 MiB to the kernel's echo and gets
/// every byte back, and a datagram to the kernel's UDP echo and its answer.
#[test]
fn curl_and_socat_as_clients_over_ustack() {
    let test = "curl_and_socat_as_clients_over_ustack";
    if !root_and_tools(test, &["curl", "socat"]) {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-clients");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the test's directory");
    let body: Vec<u8> = (0..4usize << 20)
        .map(|i| ((i * 89 + i / 1021) & 0xff) as u8)
        .collect();
    let mut response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(&body);
    let resp = dir.join("response");
    std::fs::write(&resp, &response).expect("the HTTP response");
    let ns = rig();
    let serve = format!("SYSTEM:cat {}", resp.display());
    let http = kernel_server(
        &ns,
        &[
            "socat",
            "TCP-LISTEN:8081,bind=192.0.2.1,reuseaddr,fork",
            &serve,
        ],
    );
    let echo = kernel_server(
        &ns,
        &[
            "socat",
            "TCP-LISTEN:7,bind=192.0.2.1,reuseaddr,fork",
            "PIPE",
        ],
    );
    let udp_echo = kernel_server(
        &ns,
        &["socat", "UDP-RECVFROM:7,bind=192.0.2.1,fork", "PIPE"],
    );
    let result = std::panic::catch_unwind(|| {
        // A datagram to the kernel's UDP echo and its answer.
        let line = dir.join("udp.in");
        std::fs::write(&line, "a datagram\n").expect("the datagram");
        let output = dir.join("udp.out");
        // UDP promises nothing: a datagram or its echo lost (the kernel's echo not yet
        // bound, an answer later than socat's wait on a loaded machine) is sent again,
        // as a user would; five silent tries in a row fail the test.
        let udp = ["socat", "-t", "2", "-", "UDP:192.0.2.1:7"];
        let mut tries = Vec::new();
        let back = loop {
            let (out, err) = client_until_served(&ns, &udp, Some(&line), &output, 10);
            assert!(
                out.status.success(),
                "socat (UDP) failed ({}): {err}",
                out.status
            );
            let back = std::fs::read_to_string(&output).expect("socat's output");
            if !back.is_empty() || tries.len() == 4 {
                break back;
            }
            tries.push(err);
        };
        assert_eq!(
            back, "a datagram\n",
            "the UDP echo (silent tries: {tries:?})"
        );

        let got = dir.join("got.bin");
        let g = got.to_str().expect("a UTF-8 path");
        let url = "http://192.0.2.1:8081/big.bin";
        let curl = ["curl", "-sS", "-m", "25", "-o", g, url];
        let (out, err) = client_until_served(&ns, &curl, None, &dir.join("curl.out"), 30);
        assert!(out.status.success(), "curl failed ({}): {err}", out.status);
        let back = std::fs::read(&got).expect("curl's copy");
        assert_eq!(back.len(), body.len(), "bytes curl got");
        assert!(
            back == body,
            "curl's copy differs from what the kernel served"
        );

        let data: Vec<u8> = (0..1usize << 20)
            .map(|i| ((i * 7 + i / 331) & 0xff) as u8)
            .collect();
        let input = dir.join("echo.in");
        std::fs::write(&input, &data).expect("the input");
        let output = dir.join("echo.out");
        let (out, err) = client_until_served(
            &ns,
            &["socat", "-t", "10", "-", "TCP:192.0.2.1:7"],
            Some(&input),
            &output,
            30,
        );
        assert!(out.status.success(), "socat failed ({}): {err}", out.status);
        let back = std::fs::read(&output).expect("socat's output");
        assert_eq!(back.len(), data.len(), "bytes echoed: {err}");
        assert!(back == data, "the echo differs from what socat sent");
    });
    let _ = finish(http, Duration::ZERO, "the kernel's HTTP server");
    let _ = finish(echo, Duration::ZERO, "the kernel's echo");
    let _ = finish(udp_echo, Duration::ZERO, "the kernel's UDP echo");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A counter of memcached's `stats` (`STAT name value` lines).
fn memcached_stat(stats: &str, name: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some("STAT") && w.next() == Some(name))
            .then(|| w.next()?.parse().ok())
            .flatten()
    })
}

/// memcached, unmodified, on ustack: from the kernel's side memccp stores a 100 KB value
/// and memccat reads it back byte for byte, then memcslap sets and gets 4 x 2,000 keys
/// from 4 threads; memcached's own counters show every set and get reached it (and
/// every get hit).
#[test]
fn memcached_serves_memcslap_over_ustack() {
    let test = "memcached_serves_memcslap_over_ustack";
    if !root_and_tools(
        test,
        &["memcached", "memccp", "memccat", "memcslap", "socat"],
    ) {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("preload-memcached");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the test's directory");
    let value: Vec<u8> = (0..100_000usize)
        .map(|i| ((i * 37 + i / 253) & 0xff) as u8)
        .collect();
    let key = dir.join("value100k");
    std::fs::write(&key, &value).expect("the value");
    let ns = rig();
    let mut cmd = bounded(90);
    // One worker thread; `-u root`: memcached refuses root without -u (it stays root,
    // which the TUN needs).
    cmd.args("memcached -u root -l 0.0.0.0 -p 11211 -t 1 -U 0".split(' '));
    let server = start_preloaded(cmd, &ns, "memcached");
    let servers = "--servers=192.0.2.2:11211";
    let stats = || -> String {
        let out = in_ns(
            &ns,
            Duration::from_secs(10),
            &[
                "sh",
                "-c",
                "printf 'stats\\r\\nquit\\r\\n' | socat -t 5 - TCP:192.0.2.2:11211",
            ],
        );
        text(&out.stdout)
    };
    let result = std::panic::catch_unwind(|| {
        until_answers(
            &ns,
            &[
                "sh",
                "-c",
                "printf 'version\\r\\nquit\\r\\n' | socat -t 2 - TCP:192.0.2.2:11211 | cut -c1-8",
            ],
            "VERSION \n",
        );
        in_ns(
            &ns,
            Duration::from_secs(20),
            &["memccp", servers, key.to_str().expect("UTF-8")],
        );
        let back = dir.join("back");
        let file = format!("--file={}", back.display());
        in_ns(
            &ns,
            Duration::from_secs(20),
            &["memccat", servers, &file, "value100k"],
        );
        let got = std::fs::read(&back).expect("memccat's copy");
        assert_eq!(got.len(), value.len(), "bytes of the value read back");
        assert!(got == value, "the value read back differs");
        let before = stats();
        for t in ["set", "get"] {
            in_ns(
                &ns,
                Duration::from_secs(60),
                &[
                    "memcslap",
                    servers,
                    "--test",
                    t,
                    "--concurrency=4",
                    "--execute-number=2000",
                ],
            );
        }
        let after = stats();
        let diff = |name: &str| {
            let a = memcached_stat(&after, name).unwrap_or_else(|| panic!("{name}: {after}"));
            let b = memcached_stat(&before, name).unwrap_or_else(|| panic!("{name}: {before}"));
            a - b
        };
        // The set run: 4 x 2,000 sets; the get run loads its 2,000 keys, then 4 x 2,000 gets.
        assert!(diff("cmd_set") >= 10_000, "sets: {}", diff("cmd_set"));
        assert!(diff("cmd_get") >= 8_000, "gets: {}", diff("cmd_get"));
        assert_eq!(diff("get_hits"), diff("cmd_get"), "every get hits");
    });
    stop_server(server, "memcached", result);
}
