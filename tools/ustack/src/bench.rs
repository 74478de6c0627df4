//! `ustack bench`: the same workload against ustack and against Linux, side by side.
//!
//! Scenarios today (docs/bench.md has the details):
//! - `udp-rr`: one flow of UDP request/response in lock-step, every echo checked;
//! - `pingpong`: N TCP connections each exchanging fixed-size messages in lock-step (the
//!   muduo experiment), every echo checked;
//! - `stream`: one TCP connection moving bytes one way as fast as it can, every byte
//!   checked against the pattern sent.
//!
//! Links for ustack (`--link`):
//! - `shm` (default): the ustack server on its own thread and core over a shared-memory
//!   link, the ustack client on the bench thread ([`shm`]); the server's CPU time is
//!   measured alone;
//! - `sim`: both stacks in the bench thread over the in-process sim link on the real
//!   clock, no faults: the cost of the two stacks with no link and no second core.
//!
//! Linux runs the same exchange through the kernel over loopback, client and server in one
//! thread on one core (no cross-core wake-up: the kernel's best case for lock-step
//! exchanges). `cps`/`c1m`, other links and Linux servers in their own processes come with
//! the tool issue.

mod shm;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_dev::sim::SimLinkConfig;
use ustack_stack::{Instant, ListenerHandle, TcpHandle};
use ustack_testkit::{A_IP, B_IP, Pair};

const SCENARIOS: [&str; 4] = ["udp-rr", "pingpong", "cps", "stream"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run: udp-rr, pingpong, cps or stream. Without one, all four (the default
    /// suite).
    #[arg(value_parser = SCENARIOS)]
    scenario: Option<String>,
    /// Servers under test, comma-separated: ustack, linux, or both (side by side).
    #[arg(long, default_value = "ustack,linux", value_delimiter = ',', value_parser = ["ustack", "linux"])]
    server: Vec<String>,
    /// How long each server is measured per scenario, e.g. 500ms, 2s (default: 2s for one
    /// scenario, 1s each in the default suite).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Connections for pingpong; connections opened per round for cps.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    conns: u32,
    /// Message size in bytes for udp-rr, pingpong and cps (8 to 1472: one unfragmented
    /// datagram).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(8..=1472))]
    msg_size: u16,
    /// The link ustack runs over: shm (server and client on their own threads and cores)
    /// or sim (both in one thread). Linux always runs over loopback.
    #[arg(long, default_value = "shm", value_parser = ["shm", "sim"])]
    link: String,
    /// Print one JSON array (one object per server and scenario) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Parse `250ms`, `2s`, `1.5s`, `1m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with a unit, like 500ms or 2s"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    if !(0.01..=3600.0).contains(&secs) {
        return Err(format!("{s:?}: must be between 10ms and 1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What one server's run of one scenario measured.
struct Outcome {
    scenario: &'static str,
    server: &'static str,
    link: &'static str,
    conns: u32,
    msg_size: u16,
    /// Round trips (udp-rr, pingpong: messages echoed) or bytes (stream).
    count: u64,
    bytes: u64,
    elapsed: Duration,
    verified: bool,
    /// Round-trip times in nanoseconds, sorted (empty for stream).
    rtt_ns: Vec<u64>,
    counters: Option<Value>,
    client_counters: Option<Value>,
    /// The server's CPU time, where it runs alone (shm: its thread).
    server_cpu: Option<Duration>,
    /// cps: TIME-WAIT entries on the server's side at the end of the run (ustack: the
    /// server stack's records; Linux: the machine's, from /proc/net/sockstat).
    time_wait: Option<u64>,
}

impl Outcome {
    /// An echo scenario's result: `count` messages of `msg_size` bytes echoed over `conns`
    /// connections (or flows) in `elapsed`, with the round times `rtt_ns`.
    #[allow(clippy::too_many_arguments)]
    fn echo(
        scenario: &'static str,
        server: &'static str,
        link: &'static str,
        conns: u32,
        msg_size: usize,
        count: u64,
        elapsed: Duration,
        verified: bool,
        mut rtt_ns: Vec<u64>,
    ) -> Outcome {
        rtt_ns.sort_unstable();
        Outcome {
            scenario,
            server,
            link,
            conns,
            msg_size: msg_size as u16,
            count,
            bytes: count * 2 * msg_size as u64,
            elapsed,
            verified,
            rtt_ns,
            counters: None,
            client_counters: None,
            server_cpu: None,
            time_wait: None,
        }
    }

    /// A stream's result: `bytes` moved one way on one connection in `elapsed`.
    fn stream(
        server: &'static str,
        link: &'static str,
        bytes: u64,
        elapsed: Duration,
        verified: bool,
    ) -> Outcome {
        // `count` is the bytes too: the one figure a stream has.
        let mut o = Outcome::echo(
            "stream",
            server,
            link,
            1,
            0,
            bytes,
            elapsed,
            verified,
            vec![],
        );
        o.bytes = bytes;
        o
    }

    /// The MIB snapshots of a sim pair's server (B) and client (A).
    fn with_pair(self, p: &Pair) -> Outcome {
        self.with_counters(p.b.mib().to_json(), p.a.mib().to_json())
    }

    fn with_time_wait(mut self, records: usize) -> Outcome {
        self.time_wait = Some(records as u64);
        self
    }

    /// Linux's TIME-WAIT sockets now (the `tw` of /proc/net/sockstat: the whole machine's,
    /// the bench's own on a quiet one).
    fn with_linux_time_wait(mut self) -> Outcome {
        self.time_wait = std::fs::read_to_string("/proc/net/sockstat")
            .ok()
            .and_then(|s| sockstat_tw(&s));
        self
    }

    fn with_counters(mut self, server: Value, client: Value) -> Outcome {
        self.counters = Some(server);
        self.client_counters = Some(client);
        self
    }

    fn msgs_per_s(&self) -> Option<f64> {
        matches!(self.scenario, "udp-rr" | "pingpong")
            .then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    fn conns_per_s(&self) -> Option<f64> {
        (self.scenario == "cps").then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }
    fn percentile_us(&self, p: f64) -> Option<f64> {
        if self.rtt_ns.is_empty() {
            return None;
        }
        let i = ((self.rtt_ns.len() as f64 * p).ceil() as usize).clamp(1, self.rtt_ns.len()) - 1;
        Some(self.rtt_ns[i] as f64 / 1000.0)
    }
    fn to_json(&self) -> Value {
        let latency = match (
            self.percentile_us(0.5),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
        ) {
            (Some(p50), Some(p99), Some(p999)) => json!({ "p50": p50, "p99": p99, "p999": p999 }),
            _ => Value::Null,
        };
        json!({
            "scenario": self.scenario,
            "server": self.server,
            "link": self.link,
            "shards": 1,
            "verified": self.verified,
            "conns": self.conns,
            "msg_size": if self.scenario == "stream" { Value::Null } else { json!(self.msg_size) },
            "duration_s": self.elapsed.as_secs_f64(),
            "round_trips": if self.msgs_per_s().is_some() { json!(self.count) } else { Value::Null },
            "connections": if self.scenario == "cps" { json!(self.count) } else { Value::Null },
            "bytes": self.bytes,
            "throughput_gbps": self.gbps(),
            "msgs_per_s": self.msgs_per_s(),
            "conns_per_s": self.conns_per_s(),
            "latency_us": latency,
            "server_cpu_s": self.server_cpu.map(|d| d.as_secs_f64()),
            "server_time_wait": self.time_wait,
            "server_mem_bytes": Value::Null,
            "server_mem_per_conn_bytes": Value::Null,
            "counters": self.counters.clone().unwrap_or(Value::Null),
            "client_counters": self.client_counters.clone().unwrap_or(Value::Null),
        })
    }
}

/// The `tw` count of the `TCP:` line of /proc/net/sockstat.
fn sockstat_tw(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "tw")?;
    words.next()?.parse().ok()
}

/// The message for round trip `seq`: the sequence number, then bytes derived from it.
fn fill_message(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
}

/// One period block of the stream pattern: 256 periods of 251 bytes.
fn stream_chunk() -> Vec<u8> {
    (0..251 * 256).map(|i| stream_byte(i as u64)).collect()
}

/// Byte `pos` of the stream scenario's pattern.
fn stream_byte(pos: u64) -> u8 {
    (pos % 251) as u8
}

/// Whether `got` is the stream pattern starting at stream offset `pos`, compared slice by
/// slice against one precomputed period block (`chunk`, a whole number of periods), so
/// that checking costs a `memcmp`, not a modulo per byte: the checker must not be what
/// the benchmark measures.
fn stream_matches(chunk: &[u8], mut pos: u64, mut got: &[u8]) -> bool {
    while !got.is_empty() {
        let off = (pos % chunk.len() as u64) as usize;
        let n = got.len().min(chunk.len() - off);
        if got[..n] != chunk[off..off + n] {
            return false;
        }
        got = &got[n..];
        pos += n as u64;
    }
    true
}

/// A sim pair on the real clock, with loopback's MTU and TCP buffers the size Linux's
/// autotuning reaches on loopback.
fn real_clock_pair() -> (Pair, WallClock) {
    // The MTU of Linux's loopback (65536; the largest IPv4 datagram is 65535), so that
    // both sides move segments of the same size.
    let mut p = Pair::new(SimLinkConfig {
        mtu: 65_535,
        ..SimLinkConfig::default()
    });
    for s in [&mut p.a, &mut p.b] {
        s.set_sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
            .expect("valid sysctl");
        s.set_sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
            .expect("valid sysctl");
    }
    (p, WallClock::now())
}

fn tick(p: &mut Pair, start: WallClock) {
    p.now = Instant::from_nanos(start.elapsed().as_nanos() as u64).max(p.now);
}

fn ustack_udp_rr(duration: Duration, size: usize) -> anyhow::Result<Outcome> {
    let (mut p, start) = real_clock_pair();
    let client = p.a.udp_bind(SocketAddrV4::new(A_IP, 0))?;
    let server = p.b.udp_bind(SocketAddrV4::new(B_IP, 7))?;
    let server_addr = SocketAddrV4::new(B_IP, 7);
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let run_start = WallClock::now();
    while run_start.elapsed() < duration {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        tick(&mut p, start);
        p.a.udp_send_to(p.now, client, &req, server_addr)?;
        p.settle();
        while let Ok((n, from)) = p.b.udp_recv_from(server, &mut srv_buf) {
            p.b.udp_send_to(p.now, server, &srv_buf[..n], from)?;
        }
        p.settle();
        match p.a.udp_recv_from(client, &mut resp) {
            Ok((n, _)) => verified &= resp[..n] == req[..],
            Err(e) => bail!("ustack udp-rr: round trip {seq} got no echo ({e})"),
        }
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    Ok(Outcome::echo(
        "udp-rr",
        "ustack",
        "sim",
        1,
        size,
        seq,
        run_start.elapsed(),
        verified,
        rtt_ns,
    )
    .with_pair(&p))
}

fn linux_udp_rr(duration: Duration, size: usize) -> anyhow::Result<Outcome> {
    let server = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("bind the Linux server socket on loopback")?;
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("bind the Linux client socket on loopback")?;
    client.connect(server.local_addr()?)?;
    for s in [&server, &client] {
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
    }
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let start = WallClock::now();
    while start.elapsed() < duration {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        client.send(&req)?;
        let (n, from) = server
            .recv_from(&mut srv_buf)
            .context("Linux udp-rr: the server got no request")?;
        server.send_to(&srv_buf[..n], from)?;
        let n = client
            .recv(&mut resp)
            .context("Linux udp-rr: the client got no echo")?;
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    Ok(Outcome::echo(
        "udp-rr",
        "linux",
        "loopback",
        1,
        size,
        seq,
        start.elapsed(),
        verified,
        rtt_ns,
    ))
}

/// B's listener for the TCP scenarios, with room for `n` connections at once.
fn ustack_listener(p: &mut Pair, n: u32) -> anyhow::Result<ListenerHandle> {
    Ok(p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), n)?)
}

/// Open `n` connections A -> B's `listener` over the pair; returns (client handles,
/// server handles), paired by index.
fn ustack_connections(
    p: &mut Pair,
    start: WallClock,
    listener: ListenerHandle,
    n: u32,
) -> anyhow::Result<(Vec<TcpHandle>, Vec<TcpHandle>)> {
    let mut clients = Vec::new();
    for _ in 0..n {
        tick(p, start);
        clients.push(p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))?);
    }
    let mut by_port = std::collections::HashMap::new();
    let deadline = WallClock::now() + Duration::from_secs(10);
    while by_port.len() < n as usize {
        tick(p, start);
        p.settle();
        while let Ok((h, peer)) = p.b.tcp_accept(listener) {
            by_port.insert(peer.port(), h);
        }
        if WallClock::now() > deadline {
            bail!(
                "ustack: only {} of {n} connections established",
                by_port.len()
            );
        }
    }
    let mut servers = Vec::new();
    for &c in &clients {
        let port = p.a.tcp_info(c)?.local.port();
        servers.push(by_port[&port]);
        tick(p, start);
        p.a.tcp_set_nodelay(p.now, c, true)?;
        p.b.tcp_set_nodelay(p.now, by_port[&port], true)?;
    }
    Ok((clients, servers))
}

/// One lock-step round over the sim pair: every client sends one `size`-byte message
/// (message `seq0 + i` on connection `i`), the server echoes each (and, with `close`,
/// closes after its reply), every client reads its echo (and, with `close`, the end of
/// stream, then closes). Whether every echo was right.
fn ustack_round(
    p: &mut Pair,
    start: WallClock,
    (clients, servers): (&[TcpHandle], &[TcpHandle]),
    seq0: u64,
    size: usize,
    close: bool,
) -> anyhow::Result<bool> {
    let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
    tick(p, start);
    for (i, &c) in clients.iter().enumerate() {
        fill_message(&mut msg, seq0 + i as u64);
        if p.a.tcp_send(p.now, c, &msg)? != size {
            bail!("ustack: a {size}-byte message did not fit the send buffer");
        }
    }
    p.settle();
    for &s in servers {
        let n = read_exact(p, start, false, s, &mut buf)?;
        p.b.tcp_send(p.now, s, &buf[..n])?;
        if close {
            p.b.tcp_close(p.now, s)?;
        }
    }
    p.settle();
    let mut verified = true;
    for (i, &c) in clients.iter().enumerate() {
        read_exact(p, start, true, c, &mut buf)?;
        fill_message(&mut msg, seq0 + i as u64);
        verified &= buf == msg;
        if close {
            // The server's FIN follows its reply: end of stream, then our close.
            verified &= matches!(p.a.tcp_recv(p.now, c, &mut buf), Ok(0));
            p.a.tcp_close(p.now, c)?;
        }
    }
    if close {
        p.settle();
    }
    Ok(verified)
}

/// pingpong (`cps` false: `conns` connections kept for the run) or cps (a new set of
/// connections every round, closed by the server after its reply) over sim, in lock-step
/// rounds ([`ustack_round`]).
fn ustack_lockstep(
    duration: Duration,
    conns: u32,
    size: usize,
    cps: bool,
) -> anyhow::Result<Outcome> {
    let (mut p, start) = real_clock_pair();
    let listener = ustack_listener(&mut p, conns)?;
    let mut kept = if cps {
        None
    } else {
        Some(ustack_connections(&mut p, start, listener, conns)?)
    };
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let run_start = WallClock::now();
    while run_start.elapsed() < duration {
        let t0 = WallClock::now();
        let (clients, servers) = match &kept {
            Some(pairs) => pairs.clone(),
            None => ustack_connections(&mut p, start, listener, conns)?,
        };
        let seq0 = rounds * u64::from(conns);
        verified &= ustack_round(&mut p, start, (&clients, &servers), seq0, size, cps)?;
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    kept.take();
    let count = rounds * u64::from(conns);
    let scenario = if cps { "cps" } else { "pingpong" };
    let o = Outcome::echo(
        scenario,
        "ustack",
        "sim",
        conns,
        size,
        count,
        run_start.elapsed(),
        verified,
        rtt_ns,
    );
    let o = if cps {
        o.with_time_wait(p.b.tcp_resources().timewait)
    } else {
        o
    };
    Ok(o.with_pair(&p))
}

/// Read exactly `buf.len()` bytes from `h` on side A (`client`) or B, settling the pair as
/// needed (bounded: a message that does not arrive within a second is an error).
fn read_exact(
    p: &mut Pair,
    start: WallClock,
    client: bool,
    h: TcpHandle,
    buf: &mut [u8],
) -> anyhow::Result<usize> {
    let mut got = 0;
    let deadline = WallClock::now() + Duration::from_secs(1);
    while got < buf.len() {
        let now = p.now;
        let stack = if client { &mut p.a } else { &mut p.b };
        match stack.tcp_recv(now, h, &mut buf[got..]) {
            Ok(0) => bail!("ustack: connection closed mid-message"),
            Ok(n) => got += n,
            Err(ustack_stack::Error::WouldBlock) => {
                if WallClock::now() > deadline {
                    bail!("ustack: a message did not arrive within 1 s");
                }
                tick(p, start);
                p.settle();
            }
            Err(e) => bail!("ustack: {e}"),
        }
    }
    Ok(got)
}

/// `n` kernel connections to `listener` over loopback, each accepted as soon as it is
/// made (the accept queue never holds more than one): (client, server) pairs.
fn linux_connections(
    listener: &TcpListener,
    n: u32,
) -> anyhow::Result<Vec<(TcpStream, TcpStream)>> {
    let addr = listener.local_addr()?;
    let mut pairs = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let c = TcpStream::connect(addr).context("Linux: connect over loopback")?;
        let (s, _) = listener.accept()?;
        for x in [&c, &s] {
            x.set_nodelay(true)?;
            x.set_read_timeout(Some(Duration::from_secs(1)))?;
        }
        pairs.push((c, s));
    }
    Ok(pairs)
}

/// pingpong or cps through the kernel over loopback, in the same lock-step rounds as
/// ustack's ([`ustack_round`]): with `cps`, new connections every round, the server
/// replying and closing first, the client reading the end of stream and closing.
fn linux_lockstep(
    duration: Duration,
    conns: u32,
    size: usize,
    cps: bool,
) -> anyhow::Result<Outcome> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind a Linux listener on loopback")?;
    let mut kept = if cps {
        Vec::new()
    } else {
        linux_connections(&listener, conns)?
    };
    let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let start = WallClock::now();
    while start.elapsed() < duration {
        let t0 = WallClock::now();
        let mut fresh = if cps {
            linux_connections(&listener, conns)?
        } else {
            Vec::new()
        };
        let pairs = if cps { &mut fresh } else { &mut kept };
        let seq0 = rounds * u64::from(conns);
        for (i, (c, _)) in pairs.iter_mut().enumerate() {
            fill_message(&mut msg, seq0 + i as u64);
            c.write_all(&msg)?;
        }
        for (_, s) in pairs.iter_mut() {
            s.read_exact(&mut buf)
                .context("Linux: the server got no message")?;
            s.write_all(&buf)?;
            if cps {
                s.shutdown(std::net::Shutdown::Both)?;
            }
        }
        for (i, (c, _)) in pairs.iter_mut().enumerate() {
            c.read_exact(&mut buf)
                .context("Linux: the client got no echo")?;
            fill_message(&mut msg, seq0 + i as u64);
            verified &= buf == msg;
            if cps {
                verified &= matches!(c.read(&mut buf), Ok(0));
            }
        }
        // cps: both sockets close here (the server's FIN went out at its shutdown).
        drop(fresh);
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let count = rounds * u64::from(conns);
    let o = Outcome::echo(
        if cps { "cps" } else { "pingpong" },
        "linux",
        "loopback",
        conns,
        size,
        count,
        start.elapsed(),
        verified,
        rtt_ns,
    );
    Ok(if cps { o.with_linux_time_wait() } else { o })
}

fn ustack_stream(duration: Duration) -> anyhow::Result<Outcome> {
    let (mut p, start) = real_clock_pair();
    let listener = ustack_listener(&mut p, 1)?;
    let (clients, servers) = ustack_connections(&mut p, start, listener, 1)?;
    let (c, s) = (clients[0], servers[0]);
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut sent, mut got, mut verified) = (0u64, 0u64, true);
    let run_start = WallClock::now();
    while run_start.elapsed() < duration {
        tick(&mut p, start);
        // Writes continue the pattern: `chunk` is a whole number of its periods.
        loop {
            let off = (sent % chunk.len() as u64) as usize;
            match p.a.tcp_send(p.now, c, &chunk[off..]) {
                Ok(n) => {
                    sent += n as u64;
                    if n < chunk.len() - off {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        p.settle();
        let now = p.now;
        while let Ok(n) = p.b.tcp_recv(now, s, &mut buf) {
            if n == 0 {
                break;
            }
            verified &= stream_matches(&chunk, got, &buf[..n]);
            got += n as u64;
        }
    }
    Ok(Outcome::stream("ustack", "sim", got, run_start.elapsed(), verified).with_pair(&p))
}

fn linux_stream(duration: Duration) -> anyhow::Result<Outcome> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind a Linux listener on loopback")?;
    let mut c = TcpStream::connect(listener.local_addr()?)?;
    let (mut s, _) = listener.accept()?;
    c.set_nonblocking(true)?;
    s.set_nonblocking(true)?;
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut sent, mut got, mut verified) = (0u64, 0u64, true);
    let start = WallClock::now();
    while start.elapsed() < duration {
        loop {
            let off = (sent % chunk.len() as u64) as usize;
            match c.write(&chunk[off..]) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        loop {
            match s.read(&mut buf) {
                Ok(0) => bail!("Linux stream: closed early"),
                Ok(n) => {
                    verified &= stream_matches(&chunk, got, &buf[..n]);
                    got += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Outcome::stream(
        "linux",
        "loopback",
        got,
        start.elapsed(),
        verified,
    ))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let scenarios: Vec<&str> = match &args.scenario {
        Some(s) => vec![s.as_str()],
        None => SCENARIOS.to_vec(),
    };
    let duration = args.duration.unwrap_or(if scenarios.len() > 1 {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(2)
    });
    let size = usize::from(args.msg_size);
    let mut outcomes = Vec::new();
    for scenario in scenarios {
        for server in &args.server {
            if !args.json {
                eprintln!("ustack bench: {scenario} on {server} for {duration:?} ...");
            }
            let shm = args.link == "shm";
            outcomes.push(match (scenario, server.as_str()) {
                ("udp-rr", "ustack") if shm => shm::udp_rr(duration, size)?,
                ("pingpong", "ustack") if shm => shm::pingpong(duration, args.conns, size)?,
                ("stream", "ustack") if shm => shm::stream(duration)?,
                ("udp-rr", "ustack") => ustack_udp_rr(duration, size)?,
                ("udp-rr", _) => linux_udp_rr(duration, size)?,
                ("cps", "ustack") if shm => shm::cps(duration, args.conns, size)?,
                ("pingpong", "ustack") => ustack_lockstep(duration, args.conns, size, false)?,
                ("cps", "ustack") => ustack_lockstep(duration, args.conns, size, true)?,
                ("cps", _) => linux_lockstep(duration, args.conns, size, true)?,
                ("pingpong", _) => linux_lockstep(duration, args.conns, size, false)?,
                ("stream", "ustack") => ustack_stream(duration)?,
                _ => linux_stream(duration)?,
            });
        }
    }
    if args.json {
        let all: Vec<Value> = outcomes.iter().map(Outcome::to_json).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_table(&outcomes, &args.link);
    }
    if outcomes.iter().all(|o| o.verified) {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("ustack bench: a run did not verify what it moved (\"verified\": false)");
        Ok(ExitCode::FAILURE)
    }
}

fn print_table(outcomes: &[Outcome], link: &str) {
    println!();
    if link == "shm" {
        println!(
            "ustack over shm (server and client on their own threads, busy-polling {} µs); \
             Linux over loopback (client and server in one thread)",
            shm::BUSY_POLL.as_micros()
        );
    } else {
        println!(
            "ustack over sim and Linux over loopback; client and server in one thread on one core"
        );
    }
    println!(
        "{:<9} {:<7} {:<9} {:>5} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "scenario",
        "server",
        "link",
        "conns",
        "msgs/s",
        "conns/s",
        "Gbit/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "verified"
    );
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_owned(), |v| format!("{v:.prec$}"));
    for o in outcomes {
        println!(
            "{:<9} {:<7} {:<9} {:>5} {:>12} {:>10} {:>9.2} {:>9} {:>9} {:>9} {:>8}",
            o.scenario,
            o.server,
            o.link,
            o.conns,
            opt(o.msgs_per_s(), 0),
            opt(o.conns_per_s(), 0),
            o.gbps(),
            opt(o.percentile_us(0.50), 2),
            opt(o.percentile_us(0.99), 2),
            opt(o.percentile_us(0.999), 2),
            if o.verified { "yes" } else { "NO" }
        );
    }
    for scenario in SCENARIOS {
        let find = |s: &str| {
            outcomes
                .iter()
                .find(|o| o.scenario == scenario && o.server == s)
        };
        if let (Some(u), Some(l)) = (find("ustack"), find("linux")) {
            if let (Some(uc), Some(lc)) = (u.conns_per_s(), l.conns_per_s()) {
                println!(
                    "{scenario}: ustack/linux {:.2}x conns/s, {:.2}x p50 latency",
                    uc / lc,
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0)
                );
                continue;
            }
            match (u.msgs_per_s(), l.msgs_per_s()) {
                (Some(um), Some(lm)) => println!(
                    "{scenario}: ustack/linux {:.2}x msgs/s, {:.2}x p50 latency",
                    um / lm,
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0)
                ),
                _ => println!(
                    "{scenario}: ustack/linux {:.2}x Gbit/s",
                    u.gbps() / l.gbps()
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockstat_tw_is_read_from_the_tcp_line() {
        let s =
            "sockets: used 9\nTCP: inuse 1 orphan 0 tw 10790 alloc 1 mem 194\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tw(s), Some(10790));
        assert_eq!(sockstat_tw("TCP: inuse 1 orphan 0\n"), None);
        assert_eq!(sockstat_tw("UDP: tw 5\n"), None);
    }
}
