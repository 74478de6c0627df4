//! Linux's side of `ustack bench`: the kernel's servers in processes of their own, so that
//! the server is measured alone (its CPU time, its memory), and the clients that `c1m`
//! spreads over processes to stay under the open-file limit.
//!
//! Each peer is this executable again, run as the hidden subcommand `ustack bench-peer
//! ROLE` ([`peer`]). It talks to the bench over pipes, one line at a time: it prints
//! `ready PORT` once listening, answers `stats` with `accepted N` (connections accepted so
//! far), and stops when its stdin closes. The servers are the baselines of
//! `tools/baseline` where one fits (`echo` and `udp-echo`: epoll, `SO_REUSEPORT`, backlog at
//! somaxconn, accept4), and two small checkers where the exchange needs one the baseline
//! does not have: `sink` (stream: reads one connection to its end, checking every byte)
//! and `reply-close` (cps: reads one request, sends it back, closes first).

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::OwnedFd;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use rustix::buffer::spare_capacity;
use rustix::event::{Timespec, epoll};
use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};
use ustack_baseline::{Proto, Server, ServerConfig, UringProto, UringServer};

use super::{fill_message, stream_chunk, stream_matches};

/// What a peer process does.
const ROLES: [&str; 8] = [
    "echo",
    "tokio-echo",
    "udp-echo",
    "sink",
    "reply-close",
    "c1m-client",
    "ustack-c1m",
    "hog",
];

/// `ustack bench-peer`: one Linux peer of a bench run (internal; the bench starts it).
#[derive(Debug, clap::Args)]
pub struct PeerArgs {
    /// echo, udp-echo (the baselines), tokio-echo (c1m's tokio server,
    /// [`super::c1m_tokio`]), sink, reply-close, c1m-client, or ustack-c1m (c1m's ustack
    /// server over shm, [`super::c1m_server`]), or hog (`--contend`'s CPU hog,
    /// [`super::contend`]).
    #[arg(value_parser = ROLES)]
    role: String,
    /// Servers: the port on `--addr` (0: an ephemeral one; the others of a
    /// SO_REUSEPORT group join it). c1m-client: the server's port.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// reply-close, c1m-client: bytes per message.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// c1m-client: connections to open; ustack-c1m: connections to listen for.
    #[arg(long, default_value_t = 1)]
    conns: u32,
    /// ustack-c1m: the seed of the stack's secrets.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// ustack-c1m: compute and verify checksums (`ustack bench --checksums`).
    #[arg(long)]
    checksums: bool,
    /// ustack-c1m: a tunable of its stack, NAME=VALUE (`ustack bench --server-sysctl`).
    #[arg(long)]
    sysctl: Vec<String>,
    /// ustack-c1m: what the server is written against (`ustack bench --api`): native
    /// (ustack's echo server) or tokio (a task per connection on ustack-tokio's LocalStack).
    #[arg(long, default_value = "native", value_parser = ["native", "tokio"])]
    api: String,
    /// c1m-client: handshakes (then exchanges) outstanding at once.
    #[arg(long, default_value_t = 100)]
    window: u32,
    /// c1m-client: the source address (anywhere in 127/8).
    #[arg(long, default_value_t = Ipv4Addr::new(127, 0, 0, 2))]
    src: Ipv4Addr,
    /// echo, udp-echo: worker threads, each with its own `SO_REUSEPORT` socket and epoll.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    workers: u16,
    /// Servers: the address to listen on (127.0.0.1, or ::1 for `ustack bench --ipv6`).
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    addr: IpAddr,
    /// echo, udp-echo, reply-close: how the server waits for work: epoll (sleeping in
    /// epoll_wait), busy (spinning on epoll_wait with a zero timeout) or io_uring.
    #[arg(long, default_value = "epoll", value_parser = ["epoll", "busy", "io_uring"])]
    mode: String,
    /// echo, udp-echo, reply-close: pin the server's threads to this CPU; hog: the core
    /// it spins on (`ustack bench --contend`).
    #[arg(long)]
    cpu: Option<usize>,
    /// Run in this network namespace (a /proc/PID/ns/net file), entered before anything
    /// else (`--link tun`: the Linux server behind a veth pair).
    #[arg(long)]
    netns: Option<std::path::PathBuf>,
}

/// The bench's handle on a peer process. Dropping it kills a peer still running.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    what: String,
}

/// How long a peer may take to answer a command that is not a phase of the run.
pub const ANSWER: Duration = Duration::from_secs(10);

impl Peer {
    /// Start `ustack bench-peer ROLE ARGS...`, wait for its `ready PORT` and return the
    /// port too.
    pub fn spawn(role: &str, args: &[String]) -> anyhow::Result<(Peer, u16)> {
        let (peer, words) = Peer::start(role, args)?;
        let port = words
            .first()
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("{} announced no port", peer.what))?;
        Ok((peer, port))
    }

    /// Start `ustack bench-peer ROLE ARGS...` and wait for its `ready ...` line; its words.
    pub fn start(role: &str, args: &[String]) -> anyhow::Result<(Peer, Vec<String>)> {
        let exe = std::env::current_exe().context("finding the ustack executable")?;
        let mut child = Command::new(exe)
            .arg("bench-peer")
            .arg(role)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting the bench-peer {role} process"))?;
        let stdout = child.stdout.take().context("the peer's stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new()
            .name(format!("peer-{role}"))
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
        let mut peer = Peer {
            stdin: child.stdin.take(),
            child,
            lines,
            what: format!("the bench-peer {role} process"),
        };
        let words = peer.expect("ready", ANSWER)?;
        Ok((peer, words))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send one command line.
    pub fn send(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("the peer was stopped")?;
        writeln!(stdin, "{line}").with_context(|| format!("writing to {}", self.what))?;
        stdin.flush()?;
        Ok(())
    }

    /// Wait for the line that starts with `word` (`error ...` is the peer's failure);
    /// its other words.
    pub fn expect(&mut self, word: &str, patience: Duration) -> anyhow::Result<Vec<String>> {
        let line = match self.lines.recv_timeout(patience) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                bail!("{} did not say {word:?} within {patience:?}", self.what)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                bail!("{} ended before saying {word:?}", self.what)
            }
        };
        self.words_after(word, &line)
    }

    /// The words of `line` after `word`, its first; any other line is the peer's failure.
    fn words_after(&self, word: &str, line: &str) -> anyhow::Result<Vec<String>> {
        let mut words = line.split_whitespace().map(str::to_owned);
        match words.next() {
            Some(w) if w == word => Ok(words.collect()),
            _ => bail!("{}: {line}", self.what),
        }
    }

    /// The line that starts with `word` if one has come (`error ...` is the peer's
    /// failure), without waiting; its other words.
    pub fn try_expect(&mut self, word: &str) -> anyhow::Result<Option<Vec<String>>> {
        match self.lines.try_recv() {
            Ok(line) => self.words_after(word, &line).map(Some),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => {
                bail!("{} ended before saying {word:?}", self.what)
            }
        }
    }

    /// `stats`: the connections the server has accepted so far.
    pub fn accepted(&mut self) -> anyhow::Result<u64> {
        self.send("stats")?;
        let words = self.expect("accepted", ANSWER)?;
        words
            .first()
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{}: a bad stats line", self.what))
    }

    /// `stats`: the server's counters after `accepted` (name-value pairs, as JSON).
    pub fn waits(&mut self) -> anyhow::Result<serde_json::Value> {
        self.send("stats")?;
        let words = self.expect("accepted", ANSWER)?;
        let mut map = serde_json::Map::new();
        for pair in words[1.min(words.len())..].chunks(2) {
            if let [name, value] = pair
                && let Ok(v) = value.parse::<u64>()
            {
                map.insert(name.clone(), v.into());
            }
        }
        Ok(map.into())
    }

    /// The process's CPU time so far, user and system, every thread (/proc/PID/stat).
    pub fn cpu(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let ticks = proc_stat_cpu_ticks(&stat)?;
        let per_s = rustix::param::clock_ticks_per_second().max(1);
        Some(Duration::from_secs_f64(ticks as f64 / per_s as f64))
    }

    /// The process's proportional set size now, without its share of mapped files
    /// ([`owned_pss`]), in bytes.
    pub fn pss(&self) -> Option<u64> {
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.pid())).ok()?;
        owned_pss(&rollup)
    }

    /// The process's resident memory now (VmRSS of /proc/PID/status), in bytes.
    pub fn rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        kb_field(&status, "VmRSS:")
    }

    /// Close its stdin (it stops and exits) and wait for it; kill it if it does not.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.stdin.take();
        let deadline = WallClock::now() + ANSWER;
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("{} failed ({status})", self.what);
                }
                return Ok(());
            }
            if WallClock::now() > deadline {
                bail!("{} did not stop within {ANSWER:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// utime + stime, in clock ticks, from the text of /proc/PID/stat (fields 14 and 15,
/// counted after the command name, which may hold spaces and parentheses).
fn proc_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The field `name` (e.g. `VmRSS:`, `Pss:`) of a /proc file that counts in kB
/// (/proc/PID/status, /proc/PID/smaps_rollup, /proc/meminfo), in bytes.
pub fn kb_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The proportional set size of a process's own memory, from its /proc/PID/smaps_rollup:
/// its anonymous pages and its share of shared memory (`Pss_Anon` + `Pss_Shmem`, the shm
/// link's pages split with the peer that maps them), in bytes. The file-backed share
/// (`Pss_File`: the binary and its libraries) is left out: it is no connection's memory,
/// and it shrinks whenever another process maps the same binary, so a growth measured
/// across it can come out negative (CI saw -185 KB over 2,000 connections while other
/// tests started `ustack` processes). Kernels before 5.6 have no `Pss_Anon`: `Pss` then.
pub fn owned_pss(rollup: &str) -> Option<u64> {
    match (
        kb_field(rollup, "Pss_Anon:"),
        kb_field(rollup, "Pss_Shmem:"),
    ) {
        (Some(anon), shmem) => Some(anon + shmem.unwrap_or(0)),
        (None, _) => kb_field(rollup, "Pss:"),
    }
}

/// The kernel's slab memory, in bytes, and where it was read: the sum of every cache's
/// slabs (objects allocated times object size) from /proc/slabinfo where readable (root),
/// else the `Slab:` line of /proc/meminfo. Machine-wide either way.
pub fn kernel_slab() -> Option<(u64, &'static str)> {
    if let Ok(s) = std::fs::read_to_string("/proc/slabinfo") {
        return Some((slabinfo_bytes(&s)?, "slabinfo"));
    }
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some((kb_field(&m, "Slab:")?, "meminfo"))
}

/// The sum of `num_objs * objsize` over the caches of /proc/slabinfo's text.
fn slabinfo_bytes(s: &str) -> Option<u64> {
    Some(slabinfo_caches(s)?.iter().map(|(_, b)| b).sum())
}

/// Each cache of /proc/slabinfo's text (version 2.1: `name active_objs num_objs objsize
/// ...` after two header lines) with its `num_objs * objsize` bytes.
fn slabinfo_caches(s: &str) -> Option<Vec<(String, u64)>> {
    let mut caches = Vec::new();
    for line in s
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("slabinfo"))
    {
        let f: Vec<&str> = line.split_whitespace().take(4).collect();
        if f.len() < 4 {
            return None;
        }
        let (objs, size): (u64, u64) = (f[2].parse().ok()?, f[3].parse().ok()?);
        caches.push((f[0].to_owned(), objs * size));
    }
    Some(caches)
}

/// The kernel's slab caches now, by name, in bytes (/proc/slabinfo; root only).
pub fn kernel_slab_caches() -> Option<std::collections::BTreeMap<String, u64>> {
    let s = std::fs::read_to_string("/proc/slabinfo").ok()?;
    Some(slabinfo_caches(&s)?.into_iter().collect())
}

/// The caches that grew by at least `min` bytes from `a` to `b`, largest first:
/// `[name, bytes]` pairs.
pub fn slab_growth(
    a: &std::collections::BTreeMap<String, u64>,
    b: &std::collections::BTreeMap<String, u64>,
    min: i64,
) -> Vec<(String, i64)> {
    let mut grew: Vec<(String, i64)> = b
        .iter()
        .map(|(name, &v)| {
            (
                name.clone(),
                v as i64 - a.get(name).copied().unwrap_or(0) as i64,
            )
        })
        .filter(|(_, d)| *d >= min)
        .collect();
    grew.sort_by_key(|(_, d)| -d);
    grew
}

/// The CLOCK_MONOTONIC reading, in nanoseconds: the same clock in every process, so a
/// peer's time stamps compare with the bench's.
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `ustack bench-peer`: run one peer until its stdin closes.
pub fn peer(args: &PeerArgs) -> anyhow::Result<ExitCode> {
    // Every socket is a file: take the whole of the hard limit.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let _ = rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    );
    if let Some(path) = &args.netns {
        // Before any other thread exists: every thread and socket after it is in there.
        let ns = std::fs::File::open(path)
            .with_context(|| format!("network namespace {}", path.display()))?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&ns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .with_context(|| format!("entering network namespace {}", path.display()))?;
    }
    let result = match args.role.as_str() {
        "echo" => baseline(Proto::Echo, args),
        "udp-echo" => baseline(Proto::UdpEcho, args),
        "sink" => sink(args.addr, args.conns),
        "reply-close" if args.mode == "io_uring" => {
            uring(UringProto::ReplyClose { size: args.size }, args)
        }
        "reply-close" => reply_close(args),
        "ustack-c1m" => super::c1m_server::serve(
            args.conns,
            args.seed,
            args.checksums,
            &args.sysctl,
            args.api == "tokio",
        ),
        "tokio-echo" => super::c1m_tokio::serve_linux(args.port),
        "hog" => super::contend::hog(args.cpu),
        _ => c1m_client(args),
    };
    if let Err(e) = &result {
        // The bench reads this as the peer's failure.
        println!("error {e:#}");
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// Answer `stats` on stdin until it closes: `accepted N`, then the server's own counters
/// as name-value pairs (how it waited: `empty_polls`, `uring_completions`).
fn commands<T: std::fmt::Display>(accepted: impl Fn() -> T) -> anyhow::Result<()> {
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "stats" => println!("accepted {}", accepted()),
            other => bail!("unknown command {other:?}"),
        }
    }
    Ok(())
}

/// A baseline server with `--workers` worker threads on `--addr`:`--port` (one
/// `SO_REUSEPORT` group with each other and with the other processes on that port),
/// sleeping in epoll or spinning (`--mode busy`); `--mode io_uring`: the io_uring server,
/// one thread.
fn baseline(proto: Proto, args: &PeerArgs) -> anyhow::Result<()> {
    if args.mode == "io_uring" {
        let p = if proto == Proto::Echo {
            UringProto::Echo
        } else {
            UringProto::UdpEcho
        };
        return uring(p, args);
    }
    let server = Server::start(ServerConfig {
        workers: usize::from(args.workers),
        busy_poll: args.mode == "busy",
        cpus: args.cpu.into_iter().collect(),
        ..ServerConfig::new(proto, SocketAddr::from((args.addr, args.port)))
    })
    .context("starting the baseline server")?;
    println!("ready {}", server.local_addr().port());
    commands(|| {
        let s = server.stats();
        format!("{} empty_polls {}", s.connections_accepted, s.empty_polls)
    })?;
    server.stop().context("the baseline server")?;
    Ok(())
}

/// The io_uring baseline server on `--addr`:`--port`.
fn uring(proto: UringProto, args: &PeerArgs) -> anyhow::Result<()> {
    let server = UringServer::start(proto, SocketAddr::from((args.addr, args.port)), args.cpu)
        .context("starting the io_uring server")?;
    println!("ready {}", server.local_addr().port());
    commands(|| {
        format!(
            "{} uring_completions {}",
            server.accepted(),
            server.completions()
        )
    })?;
    server.stop().context("the io_uring server")?;
    Ok(())
}

/// A listener on `addr` with an ephemeral port, announced.
fn listen(addr: IpAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind((addr, 0)).with_context(|| format!("bind on {addr}"))?;
    println!("ready {}", listener.local_addr()?.port());
    Ok(listener)
}

/// stream's server: accept `conns` connections and read each to its end on a thread of
/// its own, checking every byte (each connection carries the pattern from its start);
/// then `sink BYTES OK LAST_NS`: the bytes of all of them, OK 1 when every byte of every
/// one matched the pattern, LAST_NS the monotonic time of the last byte of any.
fn sink(addr: IpAddr, conns: u32) -> anyhow::Result<()> {
    let listener = listen(addr)?;
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || -> anyhow::Result<()> {
        let mut readers = Vec::new();
        for _ in 0..conns {
            let (s, _) = listener.accept()?;
            count.fetch_add(1, Ordering::Relaxed);
            readers.push(std::thread::spawn(move || sink_one(s)));
        }
        let (mut got, mut ok, mut last) = (0u64, true, 0u64);
        for r in readers {
            let (g, o, l) = r
                .join()
                .map_err(|_| anyhow::anyhow!("a sink thread panicked"))??;
            got += g;
            ok &= o;
            last = last.max(l);
        }
        println!("sink {got} {} {last}", u8::from(ok));
        Ok(())
    });
    commands(|| accepted.load(Ordering::Relaxed))
}

/// One connection of [`sink`] read to its end: its bytes, whether all matched the
/// pattern, and the monotonic time of the last.
fn sink_one(mut s: std::net::TcpStream) -> std::io::Result<(u64, bool, u64)> {
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut got, mut ok, mut last) = (0u64, true, monotonic_ns());
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok((got, ok, last)),
            Ok(n) => {
                ok &= stream_matches(&chunk, got, &buf[..n]);
                got += n as u64;
                last = monotonic_ns();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// cps's server: one thread, non-blocking: accept every connection waiting, read one
/// `--size`-byte request on each, send it back, close (first, as an HTTP/1.0 server
/// does); no other system call per connection. It sleeps in `epoll_wait`, or spins on it
/// with a zero timeout with `--mode busy` (pinned to `--cpu`).
fn reply_close(args: &PeerArgs) -> anyhow::Result<()> {
    let listener = listen(args.addr)?;
    listener.set_nonblocking(true)?;
    let accepted = Arc::new(AtomicU64::new(0));
    let empty = Arc::new(AtomicU64::new(0));
    let (count, polls) = (accepted.clone(), empty.clone());
    let (size, spin, cpu) = (args.size, args.mode == "busy", args.cpu);
    std::thread::spawn(move || -> anyhow::Result<()> {
        if let Some(cpu) = cpu {
            ustack_baseline::pin_current_thread(cpu)?;
        }
        reply_close_loop(&OwnedFd::from(listener), size, spin, (&count, &polls))
    });
    commands(|| {
        format!(
            "{} empty_polls {}",
            accepted.load(Ordering::Relaxed),
            empty.load(Ordering::Relaxed)
        )
    })
}

/// The loop of [`reply_close`]'s thread.
fn reply_close_loop(
    listener: &OwnedFd,
    size: usize,
    spin: bool,
    (accepted, empty): (&AtomicU64, &AtomicU64),
) -> anyhow::Result<()> {
    const LISTENER: u64 = u64::MAX;
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(
        &epoll,
        listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN,
    )?;
    // Connections by slot: the socket and the request's bytes so far.
    let mut conns: Vec<Option<(OwnedFd, Vec<u8>)>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Vec::with_capacity(256);
    let mut buf = vec![0u8; size.max(1)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        events.clear();
        match epoll::wait(&epoll, spare_capacity(&mut events), spin.then_some(&zero)) {
            Ok(_) if events.is_empty() => {
                empty.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        for e in &events {
            let key = e.data.u64();
            if key == LISTENER {
                loop {
                    match rustix::net::accept_with(
                        listener,
                        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                    ) {
                        Ok(fd) => {
                            accepted.fetch_add(1, Ordering::Relaxed);
                            let slot = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            epoll::add(
                                &epoll,
                                &fd,
                                epoll::EventData::new_u64(slot as u64),
                                epoll::EventFlags::IN,
                            )?;
                            conns[slot] = Some((fd, Vec::with_capacity(size)));
                        }
                        Err(Errno::AGAIN | Errno::INTR) => break,
                        // Out of descriptors or memory: the next event tries again.
                        Err(_) => break,
                    }
                }
                continue;
            }
            let slot = key as usize;
            let Some((fd, got)) = conns.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let want = size - got.len();
            let close = match rustix::net::recv(&*fd, &mut buf[..want], RecvFlags::DONTWAIT) {
                Ok((0, _)) => true,
                Ok((n, _)) => {
                    got.extend_from_slice(&buf[..n]);
                    let whole = got.len() == size;
                    if whole {
                        // A client that went away costs its connection, not the server.
                        let _ = rustix::net::send(&*fd, got, SendFlags::NOSIGNAL);
                    }
                    whole
                }
                Err(Errno::AGAIN | Errno::INTR) => false,
                Err(_) => true,
            };
            if close {
                // Closing the socket takes it out of the epoll set too.
                conns[slot] = None;
                free.push(slot);
            }
        }
    }
}

/// The bench's side of a Linux run: an epoll set of the client's non-blocking sockets,
/// waited on by sleeping in `epoll_wait` or, in busy mode, by spinning on it with a zero
/// timeout (the client then runs pinned to its core, [`ClientPin`]).
pub struct Waiter {
    pub epoll: OwnedFd,
    spin: bool,
    events: Vec<epoll::Event>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter").field("spin", &self.spin).finish()
    }
}

impl Waiter {
    pub fn new(spin: bool) -> anyhow::Result<Waiter> {
        Ok(Waiter {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            spin,
            events: Vec::with_capacity(1024),
        })
    }

    /// Add `fd` for `flags`, known by `key`.
    pub fn add(&self, fd: &OwnedFd, key: u64, flags: epoll::EventFlags) -> anyhow::Result<()> {
        epoll::add(&self.epoll, fd, epoll::EventData::new_u64(key), flags)?;
        Ok(())
    }

    /// Wait for events, at most `patience`: each one's key and flags (an error if none came).
    pub fn wait(
        &mut self,
        patience: Duration,
        what: &str,
    ) -> anyhow::Result<Vec<(u64, epoll::EventFlags)>> {
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let sleep = Timespec {
            tv_sec: patience.as_secs() as i64,
            tv_nsec: i64::from(patience.subsec_nanos()),
        };
        let deadline = WallClock::now() + patience;
        loop {
            self.events.clear();
            let timeout = if self.spin { &zero } else { &sleep };
            match epoll::wait(&self.epoll, spare_capacity(&mut self.events), Some(timeout)) {
                Ok(_) if !self.events.is_empty() => {
                    // `Event` is packed on x86-64: copy the fields out.
                    return Ok(self
                        .events
                        .iter()
                        .map(|e| {
                            let (data, flags) = (e.data, e.flags);
                            (data.u64(), flags)
                        })
                        .collect());
                }
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if WallClock::now() > deadline {
                bail!("Linux: {what}: nothing within {patience:?}");
            }
        }
    }
}

/// The bench thread pinned to the client's core for a busy run; the affinity it had comes
/// back when this is dropped.
#[derive(Debug)]
pub struct ClientPin(Option<rustix::thread::CpuSet>);

impl ClientPin {
    pub fn new(cpu: Option<usize>) -> anyhow::Result<ClientPin> {
        let Some(cpu) = cpu else {
            return Ok(ClientPin(None));
        };
        let before = ustack_baseline::current_affinity()?;
        ustack_baseline::pin_current_thread(cpu).context("pinning the client")?;
        Ok(ClientPin(Some(before)))
    }
}

impl Drop for ClientPin {
    fn drop(&mut self) {
        if let Some(set) = &self.0 {
            let _ = ustack_baseline::restore_affinity(set);
        }
    }
}

/// The `bench-peer` arguments of a server in `mode` (its CPU when busy).
pub fn mode_args(mode: super::measure::LinuxMode) -> Vec<String> {
    let mut args = vec!["--mode".to_owned(), mode.name().to_owned()];
    if let Some((server, _)) = mode.cpus() {
        args.extend(["--cpu".to_owned(), server.to_string()]);
    }
    args
}

/// How long a c1m client waits for any progress before it gives up.
const C1M_PATIENCE: Duration = Duration::from_secs(10);

/// c1m's client, one of several processes: `--conns` connections from `--src` to
/// 127.0.0.1:`--port`, `--window` at a time. Commands: `connect` (answered `connected`),
/// `exchange` (one `--size` message on each, its echo checked: `exchanged OK LAT_NS...`,
/// every exchange's time), `close` (`closed`).
fn c1m_client(args: &PeerArgs) -> anyhow::Result<()> {
    let dst = SocketAddrV4::new(Ipv4Addr::LOCALHOST, args.port);
    let window = args.window.max(1) as usize;
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    let mut socks: Vec<OwnedFd> = Vec::new();
    let mut ports = PortCursor::new(args.src)?;
    println!("ready {}", args.port);
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "connect" => {
                socks = connect_all(&epoll, &mut ports, dst, args.conns as usize, window)?;
                println!("connected {}", socks.len());
            }
            "exchange" => {
                let (ok, lat) = exchange_all(&epoll, &socks, args.size, window)?;
                let lat: Vec<String> = lat.iter().map(u64::to_string).collect();
                println!("exchanged {} {}", u8::from(ok), lat.join(" "));
            }
            "close" => {
                socks.clear();
                println!("closed");
            }
            other => bail!("unknown command {other:?}"),
        }
    }
    Ok(())
}

/// Source ports on one address, taken in turn from the machine's ephemeral range and
/// bound explicitly (a port another socket holds is skipped): up to the whole range per
/// source address, with no search inside the kernel.
struct PortCursor {
    src: Ipv4Addr,
    lo: u16,
    span: u32,
    next: u32,
}

impl PortCursor {
    fn new(src: Ipv4Addr) -> anyhow::Result<PortCursor> {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .unwrap_or_else(|_| "32768 60999".into());
        let mut it = range
            .split_whitespace()
            .filter_map(|p| p.parse::<u16>().ok());
        let (lo, hi) = (it.next().unwrap_or(32768), it.next().unwrap_or(60999));
        if hi < lo {
            bail!("ip_local_port_range {lo} {hi} is empty");
        }
        Ok(PortCursor {
            src,
            lo,
            span: u32::from(hi - lo) + 1,
            next: std::process::id() % (u32::from(hi - lo) + 1),
        })
    }

    /// Bind `fd` to the next free port.
    fn bind(&mut self, fd: &OwnedFd) -> anyhow::Result<()> {
        for _ in 0..self.span {
            let port = self.lo + (self.next % self.span) as u16;
            self.next = self.next.wrapping_add(1);
            match rustix::net::bind(fd, &SocketAddrV4::new(self.src, port)) {
                Ok(()) => return Ok(()),
                Err(Errno::ADDRINUSE) => continue,
                Err(e) => return Err(e).with_context(|| format!("bind {}:{port}", self.src)),
            }
        }
        bail!("no free port left on {}", self.src)
    }
}

/// Wait for events (up to [`C1M_PATIENCE`]); an error if none came.
fn wait(epoll: &OwnedFd, events: &mut Vec<epoll::Event>, what: &str) -> anyhow::Result<()> {
    let patience = Timespec {
        tv_sec: C1M_PATIENCE.as_secs() as i64,
        tv_nsec: 0,
    };
    loop {
        events.clear();
        match epoll::wait(epoll, spare_capacity(&mut *events), Some(&patience)) {
            Ok(_) if events.is_empty() => bail!("{what}: nothing within {C1M_PATIENCE:?}"),
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Open `n` non-blocking connections to `dst`, `window` handshakes at a time.
fn connect_all(
    epoll: &OwnedFd,
    ports: &mut PortCursor,
    dst: SocketAddrV4,
    n: usize,
    window: usize,
) -> anyhow::Result<Vec<OwnedFd>> {
    let mut socks = Vec::with_capacity(n);
    let (mut pending, mut done) = (0usize, 0usize);
    let mut events = Vec::with_capacity(1024);
    while done < n {
        while pending < window && socks.len() < n {
            let fd = rustix::net::socket_with(
                AddressFamily::INET,
                SocketType::STREAM,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                None,
            )
            .context("socket")?;
            ports.bind(&fd)?;
            match rustix::net::connect(&fd, &dst) {
                Ok(()) | Err(Errno::INPROGRESS) => {}
                Err(e) => return Err(e).with_context(|| format!("connect to {dst}")),
            }
            sockopt::set_tcp_nodelay(&fd, true)?;
            epoll::add(
                epoll,
                &fd,
                epoll::EventData::new_u64(socks.len() as u64),
                epoll::EventFlags::OUT,
            )?;
            socks.push(fd);
            pending += 1;
        }
        wait(epoll, &mut events, "connecting")?;
        for e in &events {
            // `Event` is packed on x86-64: copy the field out rather than borrow it.
            let data = e.data;
            let fd = &socks[data.u64() as usize];
            if let Err(err) = sockopt::socket_error(fd)? {
                bail!("connect to {dst}: {err}");
            }
            // Established: from now on, input only.
            epoll::modify(epoll, fd, data, epoll::EventFlags::IN)?;
            pending -= 1;
            done += 1;
        }
    }
    Ok(socks)
}

/// c1m's exchange phase, on either client: one `size`-byte message per connection
/// (message `i` on connection `i`), a window of them in flight, each echo checked and
/// timed.
#[derive(Debug)]
pub struct Exchanges {
    size: usize,
    /// Connections whose echo is awaited: what came of it so far, and when the message went.
    flight: std::collections::HashMap<usize, (Vec<u8>, WallClock)>,
    msg: Vec<u8>,
    /// The next connection to send on.
    pub next: usize,
    /// Each finished exchange's time, in nanoseconds.
    pub lat: Vec<u64>,
    /// Whether every echo so far was right.
    pub ok: bool,
}

impl Exchanges {
    pub fn new(size: usize, n: usize) -> Exchanges {
        Exchanges {
            size,
            flight: Default::default(),
            msg: vec![0; size],
            next: 0,
            lat: Vec::with_capacity(n),
            ok: true,
        }
    }

    /// Whether another message may go out now, with `window` in flight at most and
    /// `n` in all.
    pub fn room(&self, window: usize, n: usize) -> bool {
        self.flight.len() < window && self.next < n
    }

    /// The message for the next connection, timed from now; which connection it is.
    pub fn start(&mut self) -> (usize, &[u8]) {
        let i = self.next;
        self.next += 1;
        fill_message(&mut self.msg, i as u64);
        self.flight
            .insert(i, (Vec::with_capacity(self.size), WallClock::now()));
        (i, &self.msg)
    }

    /// How many bytes of its echo connection `i` still awaits (None: none in flight).
    pub fn wanted(&self, i: usize) -> Option<usize> {
        let (got, _) = self.flight.get(&i)?;
        Some(self.size - got.len())
    }

    /// Bytes of connection `i`'s echo arrived; true once it is whole (then checked).
    pub fn arrived(&mut self, i: usize, bytes: &[u8]) -> bool {
        let Some((got, t0)) = self.flight.get_mut(&i) else {
            return false;
        };
        got.extend_from_slice(bytes);
        if got.len() < self.size {
            return false;
        }
        self.lat.push(t0.elapsed().as_nanos() as u64);
        fill_message(&mut self.msg, i as u64);
        self.ok &= *got == self.msg;
        self.flight.remove(&i);
        true
    }
}

/// One `size`-byte message on every connection, `window` at a time, each echo checked:
/// whether all matched, and each exchange's time in nanoseconds.
fn exchange_all(
    epoll: &OwnedFd,
    socks: &[OwnedFd],
    size: usize,
    window: usize,
) -> anyhow::Result<(bool, Vec<u64>)> {
    let mut x = Exchanges::new(size, socks.len());
    let mut buf = vec![0u8; size];
    let mut events = Vec::with_capacity(1024);
    while x.lat.len() < socks.len() {
        while x.room(window, socks.len()) {
            let (i, msg) = x.start();
            if rustix::net::send(&socks[i], msg, SendFlags::NOSIGNAL)? != size {
                bail!("a {size}-byte message did not fit the send buffer");
            }
        }
        wait(epoll, &mut events, "exchanging")?;
        for e in &events {
            let data = e.data;
            let i = data.u64() as usize;
            let Some(want) = x.wanted(i) else {
                continue;
            };
            match rustix::net::recv(&socks[i], &mut buf[..want], RecvFlags::DONTWAIT) {
                Ok((0, _)) => bail!("the server closed a connection"),
                Ok((n, _)) => {
                    x.arrived(i, &buf[..n]);
                }
                Err(Errno::AGAIN | Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok((x.ok, x.lat))
}

/// The JSON's `addresses`: a run's client connection's two ends as its client sees them
/// (`local`, `peer`), as socket addresses (`[::1]:5001`), null where unknown.
pub fn addresses_json(local: Option<String>, peer: Option<String>) -> serde_json::Value {
    serde_json::json!({ "local": local, "peer": peer })
}

/// [`addresses_json`] of a kernel TCP connection.
pub fn stream_addresses(s: &std::net::TcpStream) -> serde_json::Value {
    addresses_json(
        s.local_addr().ok().map(|a| a.to_string()),
        s.peer_addr().ok().map(|a| a.to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 120 35 0 0 20 0 3 0";
        assert_eq!(proc_stat_cpu_ticks(stat), Some(155));
        assert_eq!(proc_stat_cpu_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn rss_and_slab_are_read_in_bytes() {
        assert_eq!(
            kb_field("Name:\tx\nVmRSS:\t    1200 kB\nVmSwap: 0 kB\n", "VmRSS:"),
            Some(1200 * 1024)
        );
        assert_eq!(
            kb_field("Rss:  800 kB\nPss:  500 kB\nPss_Anon:  400 kB\n", "Pss:"),
            Some(500 * 1024)
        );
        let rollup = "Rss: 800 kB\nPss: 500 kB\nPss_Anon: 400 kB\nPss_File: 90 kB\n\
                      Pss_Shmem: 10 kB\n";
        assert_eq!(owned_pss(rollup), Some(410 * 1024));
        assert_eq!(owned_pss("Rss: 800 kB\nPss: 500 kB\n"), Some(500 * 1024));
        let slab = "slabinfo - version: 2.1\n# name <active_objs> <num_objs> <objsize> ...\n\
                    TCP 10 12 2304 14 8 : tunables 0 0 0\nfilp 5 8 256 16 1 : x\n";
        assert_eq!(slabinfo_bytes(slab), Some(12 * 2304 + 8 * 256));
        // By cache: what grew, largest first, down to the floor given.
        let a: std::collections::BTreeMap<String, u64> =
            slabinfo_caches(slab).unwrap().into_iter().collect();
        let later = "slabinfo - version: 2.1\n# name ...\n\
                     TCP 20 24 2304 14 8 : x\nfilp 5 8 256 16 1 : x\nsock_inode 4 4 1000 1 1 : x\n";
        let b = slabinfo_caches(later).unwrap().into_iter().collect();
        assert_eq!(
            slab_growth(&a, &b, 1),
            vec![
                ("TCP".to_owned(), 12 * 2304),
                ("sock_inode".to_owned(), 4000)
            ]
        );
        assert_eq!(
            slab_growth(&a, &b, 5000),
            vec![("TCP".to_owned(), 12 * 2304)]
        );
    }
}
