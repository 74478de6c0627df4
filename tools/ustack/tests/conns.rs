//! 15,000 concurrent kernel connections held and used against `ustack serve echo --link tun
//! --shards 2` (root only; skipped otherwise unless `USTACK_REQUIRE_ROOT`, and without
//! python3 unless `USTACK_REQUIRE_TOOLS`).
//!
//! Four Python client processes in the test's namespace, each from an address of its own on
//! the kernel's end of the interface (192.0.2.1, .3, .4, .5: no (source, destination) pair
//! needs more than 3,750 ephemeral ports), open 3,750 connections each, at most 256
//! connecting at a time, and hold them. While they hold them the test reads ustack's
//! counters until `Tcp CurrEstab` is 15,000 and takes its memory per connection
//! (`ustack stat --memory`); then the clients go on: each sends a line on every connection,
//! checks the echo byte for byte and closes it. At the end ustack holds no connection and
//! counted no listen overflow, drop or reset.
//!
//! The server captures the first [`CAPTURED`] packets of the run (`ustack capture -c`):
//! every handshake and about half of the echoes and closes. tshark reads the capture: no
//! malformed packet or expert error, no more than a handful of retransmissions either
//! way (none lost: see the queue length below).

use core::time::Duration;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::Instant;

use common::{memory_count, rss, tool_json};
use serde_json::Value;
use ustack_testkit::netns::{
    KERNEL_IP, NetNs, ServeOverTun, TUN_NAME, USTACK_IP, python_argv, root_or_skip, tool_or_skip,
};
use ustack_testkit::tshark::{CLEAN_RETRANSMISSIONS, check_capture};

mod common;

/// Every command and client process is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);
/// Client processes, and the kernel-side source address of each.
const SOURCES: [&str; 4] = ["192.0.2.1", "192.0.2.3", "192.0.2.4", "192.0.2.5"];
/// Connections per client process.
const PER_CLIENT: u64 = 3_750;
/// Connections each client has connecting (or echoing) at once.
const WINDOW: u64 = 256;
const TOTAL: u64 = PER_CLIENT * SOURCES.len() as u64;
/// ustack's counters, and its memory by kind.
const STAT: &[&str] = &["stat", "--json"];
const MEMORY: &[&str] = &["stat", "--memory", "--json"];
/// The packets captured, the first ones: the handshakes are 45,000, the echoes and closes
/// about 6 a connection more.
const CAPTURED: u64 = 90_000;

/// A client process, arguments `src host port n window limit_secs`: raises RLIMIT_NOFILE
/// to its hard limit, opens `n` non-blocking connections from `src` (bound with
/// IP_BIND_ADDRESS_NO_PORT, so the port is picked per destination at connect time), at
/// most `window` in progress at a time, and prints `held H failed F secs S`. Then it waits
/// for `go` on stdin, sends a line naming the connection on each (at most `window` waiting
/// for their echo at a time), reads the echo, checks it byte for byte and closes the
/// connection; prints `echoed E bad B unanswered U secs S`.
const PY_HOLDER: &str = r#"
import errno, resource, select
src, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
n, window, limit = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < n + 64:
    sys.exit(f"RLIMIT_NOFILE's hard limit {hard} is below {n + 64}")
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
ep = select.epoll()
socks, pending, held, opened, failed = {}, set(), [], 0, 0
t0 = time.monotonic()
while len(held) + failed < n and time.monotonic() < t0 + limit:
    while opened < n and len(pending) < window:
        opened += 1
        s = socket.socket()
        s.setblocking(False)
        s.setsockopt(socket.SOL_IP, NO_PORT, 1)
        s.bind((src, 0))
        if s.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
            failed += 1
            s.close()
            continue
        socks[s.fileno()] = s
        pending.add(s.fileno())
        ep.register(s.fileno(), select.EPOLLOUT)
    for fd, _ in ep.poll(0.5):
        ep.unregister(fd)
        pending.discard(fd)
        if socks[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            held.append(fd)
        else:
            failed += 1
            socks.pop(fd).close()
print("held", len(held), "failed", failed, "secs", "%.3f" % (time.monotonic() - t0),
      flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit("no go")
t1 = time.monotonic()
held.reverse()
want, echoed, bad = {}, 0, 0
while (held or want) and time.monotonic() < t1 + limit:
    while held and len(want) < window:
        fd = held.pop()
        msg = b"%s:%d says hello\n" % (src.encode(), socks[fd].getsockname()[1])
        want[fd] = [msg, b""]
        ep.register(fd, select.EPOLLIN)
        try:
            socks[fd].send(msg)
        except OSError:
            pass
    for fd, _ in ep.poll(0.5):
        w = want[fd]
        try:
            b = socks[fd].recv(256)
        except OSError:
            b = b""
        w[1] += b
        if b and len(w[1]) < len(w[0]):
            continue
        if w[1] == w[0]:
            echoed += 1
        else:
            bad += 1
        ep.unregister(fd)
        socks.pop(fd).close()
        del want[fd]
print("echoed", echoed, "bad", bad, "unanswered", len(held) + len(want),
      "secs", "%.3f" % (time.monotonic() - t1), flush=True)
"#;

fn ustack() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ustack"))
}

/// A client process (under `timeout ... nsenter`); on drop it is sent SIGTERM (which
/// `timeout` passes on to Python) and reaped.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    src: &'static str,
}

impl Client {
    fn spawn(ns: &NetNs, src: &'static str) -> Client {
        let args = [
            src.to_owned(),
            "192.0.2.2".to_owned(),
            "7".to_owned(),
            PER_CLIENT.to_string(),
            WINDOW.to_string(),
            (LIMIT.as_secs() - 5).to_string(),
        ];
        let mut child = ns
            .command(LIMIT, &python_argv(PY_HOLDER, &args))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a client process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Client {
            child,
            stdin,
            stdout,
            src,
        }
    }

    /// The numbers of the next line the client prints, named by `words` in turn
    /// (`held H failed F secs S` -> [H, F, S]).
    fn report(&mut self, words: &[&str]) -> Vec<f64> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("a line");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let ok = fields.len() == 2 * words.len()
            && fields.iter().step_by(2).zip(words).all(|(f, w)| f == w);
        assert!(
            ok,
            "client {}: `{}` instead of `{} ...`",
            self.src,
            line.trim(),
            words[0]
        );
        fields
            .iter()
            .skip(1)
            .step_by(2)
            .map(|v| v.parse().expect("a number"))
            .collect()
    }

    fn go(&mut self) {
        let mut stdin = self.stdin.take().expect("not told yet");
        writeln!(stdin, "go").expect("tell the client to go on");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = rustix::process::Pid::from_raw(self.child.id() as i32);
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let _ = self.child.wait();
    }
}

/// Runs `ustack <args>` until `done` holds for what it prints (or panics after `LIMIT`).
fn wait_for(
    server: &ServeOverTun,
    args: &[&str],
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let v = tool_json(server, args);
        if done(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not after {LIMIT:?}: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn fifteen_thousand_kernel_connections_held_then_each_used_once() {
    const TEST: &str = "fifteen_thousand_kernel_connections";
    if root_or_skip(TEST).is_none() || !tool_or_skip(TEST, "python3") {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let server = ServeOverTun::start(
        ustack(),
        &ns,
        &[
            "echo",
            "--addr",
            "192.0.2.2:7",
            "--shards",
            "2",
            "--duration",
            "120s",
        ],
    )
    .expect("ustack serve echo over tun");
    // The kernel's other source addresses, and a queue to ustack deep enough for the
    // clients' windows (the default 500 drops frames when all four burst at once).
    assert_eq!(SOURCES[0], KERNEL_IP.to_string());
    for src in &SOURCES[1..] {
        let addr = format!("{src}/24");
        ns.run(LIMIT, &["ip", "addr", "add", &addr, "dev", TUN_NAME])
            .expect("another kernel address");
    }
    ns.run(
        LIMIT,
        &["ip", "link", "set", TUN_NAME, "txqueuelen", "4096"],
    )
    .expect("txqueuelen");
    let rss_before = rss(server.pid());
    let pcap = std::env::temp_dir().join(format!("ustack-{TEST}-{}.pcap", std::process::id()));
    let capture = server
        .capture(ustack(), &pcap, &["-c", &CAPTURED.to_string()])
        .expect("ustack capture");

    let start = Instant::now();
    let mut clients: Vec<Client> = SOURCES.iter().map(|s| Client::spawn(&ns, s)).collect();
    for c in &mut clients {
        let r = c.report(&["held", "failed", "secs"]);
        eprintln!(
            "client {}: {} connections held, {} failed, in {:.2} s",
            c.src, r[0], r[1], r[2]
        );
        assert_eq!((r[0], r[1]), (PER_CLIENT as f64, 0.0), "client {}", c.src);
    }
    // Every connection is established on ustack's side too (the last ACKs may still be on
    // their way when the clients see their SYN-ACKs).
    let held = wait_for(&server, STAT, "15,000 established", |c| {
        c["Tcp"]["CurrEstab"].as_u64() == Some(TOTAL)
    });
    let connect_secs = start.elapsed().as_secs_f64();
    let memory = tool_json(&server, MEMORY);
    let rss_held = rss(server.pid());
    let total_bytes = memory["total_bytes"].as_u64().expect("total_bytes");
    assert_eq!(memory_count(&memory, "tcb"), TOTAL, "{memory}");
    let per_conn = total_bytes / TOTAL;
    eprintln!(
        "{TOTAL} connections established in {connect_secs:.2} s; ustack's memory: \
         {total_bytes} bytes, {per_conn} bytes per connection, everything counted \
         ({memory}); the process's RSS grew by {} bytes ({} per connection)",
        rss_held.saturating_sub(rss_before),
        rss_held.saturating_sub(rss_before) / TOTAL
    );
    // About 430 bytes per idle connection, everything the server allocated counted (the
    // stack's TCB slot, 328 with the split TCB, and tables; the poller's registration, 16
    // bytes, and the echo server's slot, 8, in tables indexed by the connection's slot:
    // 427 when this was written; 631 to 637 with the 504-byte TCB, 1,033 to 1,047 with the
    // hash maps before that; Linux: about 4 KB). The bound breaks if the TCB loses its
    // split (+184), an idle connection keeps a server `Conn` (+150) or the maps come back.
    assert!(per_conn < 500, "{per_conn} bytes per connection");
    // And by the process's RSS (the above as far as it is touched, allocator slack, the
    // earlier generations of tables that grew, the capture's queue): 544 to 579 bytes per
    // connection with the 320-byte TCB, 704 to 723 with the 504-byte one; 420 to 454 with
    // the 224-byte TCB. The bound, 700, breaks if an idle connection holds a 128-byte
    // buffer or a table is touched twice over; the growth holds at least every
    // connection's record, which a broken reading would not.
    let rss_growth = rss_held.saturating_sub(rss_before);
    let rss_per_conn = rss_growth / TOTAL;
    let record = ustack_stack::tcp::TCB_BYTES as u64;
    assert!(
        (record..700).contains(&rss_per_conn),
        "the server's RSS grew {rss_per_conn} bytes per connection (the record is {record})"
    );
    // RSS against the accounting: at least 3/4 of it (the slab's and tables' tails are
    // counted but not yet touched), and at most 4 MiB beyond it in all. That fixed part
    // is what no connection owns: the capture's queue of copied frames (up to
    // `TAP_QUEUE` between two 10 ms drains, so larger when the capture client is slow),
    // tables' earlier generations that malloc keeps resident, the shards' arenas: 2.2 to
    // 2.4 MB on a quiet machine (579 against 431 and 454 against 293 bytes per
    // connection), 3.2 MB in a CI run with other tests beside it (508 against 294). It
    // does not grow with the connections: an unaccounted 192 bytes per connection
    // (2.9 MB here) breaks it (seen twice with `tcb` counted 192 bytes short; 128 bytes
    // short passed once: the fixed part varies by 1 MB); at a million the two agree
    // within 8% (docs/c1m.md).
    assert!(
        rss_growth * 4 >= total_bytes * 3 && rss_growth <= total_bytes + (4 << 20),
        "RSS grew {rss_growth} bytes against the accounting's {total_bytes} ({rss_per_conn} \
         against {per_conn} per connection)"
    );
    assert_eq!(held["Tcp"]["PassiveOpens"].as_u64(), Some(TOTAL), "{held}");

    // Each used once, then closed.
    let used = Instant::now();
    for c in &mut clients {
        c.go();
    }
    for c in &mut clients {
        let r = c.report(&["echoed", "bad", "unanswered", "secs"]);
        eprintln!(
            "client {}: {} echoes checked, {} bad, {} unanswered, in {:.2} s",
            c.src, r[0], r[1], r[2], r[3]
        );
        assert_eq!(
            (r[0], r[1], r[2]),
            (PER_CLIENT as f64, 0.0, 0.0),
            "client {}",
            c.src
        );
    }
    // The clients closed first: ustack's ends go through LAST-ACK and are gone.
    wait_for(&server, MEMORY, "every connection freed", |m| {
        memory_count(m, "tcb") == 0
    });
    let end = tool_json(&server, STAT);
    assert_eq!(end["Tcp"]["CurrEstab"].as_u64(), Some(0), "{end}");
    eprintln!(
        "used and closed in {:.2} s; the whole run {:.2} s; ustack retransmitted {} segments",
        used.elapsed().as_secs_f64(),
        start.elapsed().as_secs_f64(),
        end["Tcp"]["RetransSegs"]
    );
    for (table, name) in [
        ("TcpExt", "ListenOverflows"),
        ("TcpExt", "ListenDrops"),
        ("TcpExt", "SyncookiesSent"),
        ("Tcp", "AttemptFails"),
        ("Tcp", "EstabResets"),
        ("Tcp", "OutRsts"),
        ("Tcp", "InErrs"),
    ] {
        assert_eq!(end[table][name].as_u64(), Some(0), "{table} {name}: {end}");
    }
    assert_eq!(end["Tcp"]["PassiveOpens"].as_u64(), Some(TOTAL), "{end}");

    // The capture ended at its count, halfway through the echoes.
    assert_eq!(capture.finish().expect("the capture"), CAPTURED);
    let bounds = (CLEAN_RETRANSMISSIONS, CLEAN_RETRANSMISSIONS);
    if let Some(report) = check_capture(TEST, &pcap, USTACK_IP, bounds) {
        assert_eq!(report.tcp, CAPTURED, "{TEST}: nothing but TCP");
    }
    let _ = std::fs::remove_file(&pcap);
}
