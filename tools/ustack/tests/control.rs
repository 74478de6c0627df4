//! `ustack stat`, `ss`, `sysctl` and `capture` against a running `ustack serve` (another
//! process, over its control socket), while 8 clients on a ustack runtime in this process
//! keep echoing through it: what each command prints is checked against what the clients
//! know they did.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ustack_apps::{Load, Protocol};

mod common;
use common::{Served, spawn_serve};

const CLIENTS: usize = 8;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// A server with CLIENTS connections echoing through it from a thread of this process
/// until the returned flag is set.
fn busy_server() -> (Served, Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let mut served = spawn_serve(&["echo", "--link", "shm", "--duration", "60s"]);
    let mut rt = served.attach(1);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let addr = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 80);
    let pump = std::thread::spawn(move || {
        let mut load = Load::start(&mut rt, Protocol::Echo, addr, CLIENTS, u64::MAX).unwrap();
        while !flag.load(Ordering::Relaxed) {
            load.step(&mut rt, Some(Duration::from_millis(5)))
                .expect("every echo verified");
        }
        load.stats().verified
    });
    // Wait until every client is connected and echoing.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let o = served.tool(&["stat", "--json"]);
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["Tcp"]["CurrEstab"].as_u64() == Some(CLIENTS as u64)
                && v["Tcp"]["InSegs"].as_u64().unwrap_or(0) > 100
            {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "clients never settled"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (served, stop, pump)
}

#[test]
fn stat_ss_sysctl_and_capture_see_the_running_instance() {
    let (served, stop, pump) = busy_server();

    // stat: /proc/net/snmp then /proc/net/netstat, header and value lines in pairs.
    let text = ok(served.tool(&["stat"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Ip: Forwarding DefaultTTL"), "{text}");
    let tcp = lines
        .iter()
        .position(|l| l.starts_with("Tcp: RtoAlgorithm"))
        .unwrap();
    let names: Vec<&str> = lines[tcp].split_whitespace().collect();
    let values: Vec<&str> = lines[tcp + 1].split_whitespace().collect();
    assert_eq!(names.len(), values.len());
    let estab = names.iter().position(|n| *n == "CurrEstab").unwrap();
    assert_eq!(values[estab], CLIENTS.to_string());
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("TcpExt: SyncookiesSent")),
        "{text}"
    );

    // stat --delta: the first shows everything since start, the next only what moved
    // (segments keep flowing; the passive opens do not).
    let first = ok(served.tool(&["stat", "--delta"]));
    assert!(first.starts_with("#ustack\n"), "{first}");
    assert!(
        first.contains(&format!("TcpPassiveOpens                 {CLIENTS} ")),
        "{first}"
    );
    std::thread::sleep(Duration::from_millis(100));
    let second = ok(served.tool(&["stat", "--delta"]));
    assert!(
        second.lines().any(|l| l.starts_with("TcpInSegs ")),
        "{second}"
    );
    assert!(!second.contains("TcpPassiveOpens"), "{second}");

    // stat --memory: one TCB per connection, and a per-connection figure.
    let mem = ok(served.tool(&["stat", "--memory"]));
    let tcb: Vec<&str> = mem
        .lines()
        .find(|l| l.starts_with("tcb "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(tcb[1], CLIENTS.to_string(), "{mem}");
    assert!(mem.contains("per connection: "), "{mem}");
    // A table: every row as wide as the header, whatever the longest kind's name.
    let rows: Vec<&str> = mem.lines().take_while(|l| !l.starts_with("per ")).collect();
    assert!(
        rows.len() > 3 && rows.iter().all(|r| r.len() == rows[0].len()),
        "{mem}"
    );
    // It says what it counts: the stack's, the runtime's and the server's memory in the
    // table (a poller registration and a server entry per connection), and the process's
    // RSS (everything), at least the table's total.
    // (The poller also holds the listener's registration.)
    for (kind, n) in [("poller ", CLIENTS + 1), ("app_conns ", CLIENTS)] {
        let line = mem.lines().find(|l| l.starts_with(kind));
        let count = line.and_then(|l| l.split_whitespace().nth(1));
        assert_eq!(count, Some(n.to_string().as_str()), "{kind}: {mem}");
    }
    let total: u64 = mem
        .lines()
        .find_map(|l| l.strip_prefix("total "))
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total in {mem}"));
    let rss: u64 = mem
        .lines()
        .find_map(|l| l.strip_prefix("process RSS: "))
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no process RSS in {mem}"));
    assert!(rss > total, "{mem}");
    assert!(
        mem.contains(
            "the table counts the stack, the runtime's poller and timers and the \
                      server's connections"
        ),
        "{mem}"
    );

    // ss: the established connections (not the listener), with -l only the listener.
    let ss = ok(served.tool(&["ss"]));
    let estab: Vec<&str> = ss.lines().filter(|l| l.starts_with("ESTAB ")).collect();
    assert_eq!(estab.len(), CLIENTS, "{ss}");
    assert!(
        estab
            .iter()
            .all(|l| l.contains("192.0.2.2:80") && l.contains("192.0.2.1:"))
    );
    assert!(!ss.contains("LISTEN"), "{ss}");
    let listen = ok(served.tool(&["ss", "-l"]));
    assert_eq!(
        listen.lines().filter(|l| l.starts_with("LISTEN ")).count(),
        1,
        "{listen}"
    );
    let detail = ok(served.tool(&["ss", "-tmi"]));
    assert_eq!(detail.matches("skmem:(r").count(), CLIENTS, "{detail}");
    assert_eq!(detail.matches(" rto:").count(), CLIENTS, "{detail}");
    assert!(
        detail.contains("sack") && detail.contains("wscale:"),
        "{detail}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(served.tool(&["ss", "--json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), CLIENTS);

    // sysctl: read, set (validated by the stacks), read back; a bad value changes nothing.
    let all = ok(served.tool(&["sysctl"]));
    assert!(
        all.contains("net.ipv4.tcp_keepalive_time = 7200\n"),
        "{all}"
    );
    assert_eq!(
        ok(served.tool(&["sysctl", "net.ipv4.tcp_keepalive_time=600"])),
        "net.ipv4.tcp_keepalive_time = 600\n"
    );
    assert_eq!(
        ok(served.tool(&["sysctl", "net.ipv4.tcp_keepalive_time"])),
        "net.ipv4.tcp_keepalive_time = 600\n"
    );
    let bad = served.tool(&["sysctl", "net.ipv4.tcp_keepalive_time=0"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("out of range"), "{}", stderr(&bad));
    assert_eq!(
        ok(served.tool(&["sysctl", "net.ipv4.tcp_keepalive_time"])),
        "net.ipv4.tcp_keepalive_time = 600\n"
    );

    // capture: 50 packets of the echo traffic, a pcap file whose frames are Ethernet
    // carrying TCP to or from the server's port.
    let file = served.control.with_file_name("cap.pcap");
    let o = served.tool(&["capture", "-w", file.to_str().unwrap(), "-c", "50"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("50 packets captured"), "{}", stderr(&o));
    let pcap = std::fs::read(&file).unwrap();
    assert_eq!(&pcap[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "pcap magic");
    assert_eq!(
        u32::from_le_bytes(pcap[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let (mut at, mut frames) = (24, 0);
    while at < pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..at + 16 + len];
        assert_eq!(&frame[12..14], &[0x08, 0x00], "IPv4");
        assert_eq!(frame[23], 6, "TCP");
        let (sport, dport) = (
            u16::from_be_bytes([frame[34], frame[35]]),
            u16::from_be_bytes([frame[36], frame[37]]),
        );
        assert!(sport == 80 || dport == 80, "{sport} -> {dport}");
        at += 16 + len;
        frames += 1;
    }
    assert_eq!(frames, 50);

    stop.store(true, Ordering::Relaxed);
    assert!(pump.join().unwrap() > 0);
}

#[test]
fn commands_without_a_running_instance_say_what_to_do() {
    let dir = std::env::temp_dir().join(format!("ustack-none-{}", std::process::id()));
    let sock = dir.join("nobody.sock");
    for cmd in [
        &["stat"][..],
        &["ss"],
        &["sysctl"],
        &["capture", "-w", "/dev/null"],
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ustack"))
            .args(cmd)
            .arg("--control")
            .arg(&sock)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{cmd:?}");
        assert!(
            stderr(&o).contains("no running `ustack serve` answers on")
                && stderr(&o).contains("--control"),
            "{cmd:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_second_server_on_the_same_control_socket_is_refused() {
    let first = spawn_serve(&["echo", "--link", "shm", "--duration", "30s"]);
    // The socket is bound before the offer is made.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !first.control.exists() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ustack"))
        .args(["serve", "echo", "--link", "shm", "--control"])
        .arg(&first.control)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("another ustack serve is running there"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_second_server_without_control_takes_a_socket_of_its_own() {
    // Both on the default path ($XDG_RUNTIME_DIR/ustack/serve.sock), in a directory of the
    // test's own; shm servers bind their socket before they wait for a client.
    let dir = std::env::temp_dir().join(format!("ustack-xdg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_ustack"))
            .args(["serve", "echo", "--link", "shm", "--duration", "30s"])
            .env("XDG_RUNTIME_DIR", &dir)
            .env_remove("USTACK_CONTROL")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    /// Kills and reaps its server, whatever happens.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let control_line = |child: &mut std::process::Child| {
        use std::io::BufRead;
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut said = Vec::new();
        let mut lines = stderr.lines();
        while let Some(line) = lines.next() {
            let line = line.unwrap();
            said.push(line.clone());
            if let Some(path) = line.strip_prefix("ustack serve: control socket ") {
                // Keep reading what the server says: a closed pipe would end it at its next
                // line, and the next server would find its socket stale.
                std::thread::spawn(move || lines.for_each(drop));
                return (path.to_owned(), said.join("\n"));
            }
        }
        panic!("no control socket line in {said:?}");
    };
    let mut first = Reap(spawn());
    let (first_path, _) = control_line(&mut first.0);
    let default = dir.join("ustack").join("serve.sock");
    assert_eq!(first_path, default.display().to_string());
    let mut second = Reap(spawn());
    let (second_path, said) = control_line(&mut second.0);
    let own = dir
        .join("ustack")
        .join(format!("serve-{}.sock", second.0.id()));
    assert_eq!(second_path, own.display().to_string(), "{said}");
    assert!(
        said.contains("belongs to another running ustack serve"),
        "{said}"
    );
    assert!(own.exists() && default.exists());
    drop((first, second));
    let _ = std::fs::remove_dir_all(&dir);
}
