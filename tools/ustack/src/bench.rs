//! `ustack bench`: the same workload against ustack and against Linux, side by side.
//!
//! Scenarios (docs/bench.md has the details):
//! - `udp-rr`: one flow of UDP request/response in lock-step, every echo checked;
//! - `pingpong`: N TCP connections each exchanging fixed-size messages in lock-step (the
//!   muduo experiment), every echo checked;
//! - `cps`: rounds of N short connections, the server closing first;
//! - `stream`: one TCP connection moving bytes one way as fast as it can (for `--duration`,
//!   or exactly `--bytes`), every byte checked against the pattern sent;
//! - `c1m` (only when named): N connections opened, held idle, one message each, closed.
//!
//! Links for ustack (`--link`):
//! - `shm` (default): the ustack server on its own thread and core over a shared-memory
//!   link, the ustack client on the bench thread ([`shm`]); the server's CPU time is
//!   measured alone;
//! - `sim`: both stacks in the bench thread over the in-process sim link on the real
//!   clock: the cost of the two stacks with no link and no second core; the only link
//!   that injects faults (`--loss`, `--dup`, `--reorder`, `--corrupt`, `--delay`);
//! - `tun`, `packet`, `xdp` (root, `stream` only so far): the ustack server over a TUN
//!   interface, or an `AF_PACKET` or `AF_XDP` socket on a veth end, in a namespace;
//!   Linux's behind a veth pair; the same kernel client for both ([`kernel_link`]).
//!
//! Linux runs the same exchange through the kernel over loopback, its server in a process
//! of its own so that its CPU time (and for `c1m` its memory) is measured alone
//! ([`linux`]); `c1m` ([`c1m`]) holds N connections on each server. `--plot` draws the
//! comparison ([`plot`]).

mod c1m;
mod kernel_link;
pub mod linux;
mod plot;
mod shm;

use std::io::{IsTerminal, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};
use ustack_dev::sim::{SimConfig, SimLinkConfig};
use ustack_stack::{Instant, ListenerHandle, TcpHandle};
use ustack_testkit::{A_IP, B_IP, Pair};

/// The default suite: every scenario but `c1m`, which takes minutes at its full size.
const SCENARIOS: [&str; 4] = ["udp-rr", "pingpong", "cps", "stream"];
/// What the scenario argument accepts.
const ALL_SCENARIOS: [&str; 5] = ["udp-rr", "pingpong", "cps", "stream", "c1m"];
/// Most `--conns` for pingpong and cps (c1m holds more).
pub const MAX_CONNS: u32 = 10_000;
/// c1m's `--conns` unless told.
const C1M_CONNS: u32 = 100_000;
/// What `--link` accepts: the links ustack runs over, and Linux's loopback.
const LINKS: [&str; 6] = ["shm", "sim", "loopback", "tun", "packet", "xdp"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run: udp-rr, pingpong, cps, stream or c1m (N connections opened, held
    /// idle, one message each, closed). Without one, the first four (the default suite).
    #[arg(value_parser = ALL_SCENARIOS)]
    scenario: Option<String>,
    /// Servers under test, comma-separated: ustack, linux, or both (side by side).
    #[arg(long, default_value = "ustack,linux", value_delimiter = ',', value_parser = ["ustack", "linux"])]
    server: Vec<String>,
    /// How long each server is measured per scenario, e.g. 500ms, 2s (default: 2s for one
    /// scenario, 1s each in the default suite); c1m: how long the connections are held
    /// idle.
    #[arg(long, value_parser = parse_run_duration)]
    duration: Option<Duration>,
    /// stream: move exactly this many bytes (every one checked) instead of running for
    /// --duration; K, M and G are powers of 1024 (64M is 67108864 bytes).
    #[arg(long, value_parser = parse_stream_bytes)]
    bytes: Option<u64>,
    /// Connections for pingpong (default 10, at most 10000); connections opened per round
    /// for cps (ditto); connections held for c1m (default 100000, at most 1000000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    conns: Option<u32>,
    /// Message size in bytes for udp-rr, pingpong and cps (8 to 1472: one unfragmented
    /// datagram; 1K is 1024).
    #[arg(long, default_value = "64", value_parser = parse_msg_size)]
    msg_size: u16,
    /// The link ustack runs over: shm (server and client on their own threads and cores),
    /// sim (both in one thread; injects faults), or tun, packet or xdp (root; stream only:
    /// ustack over a TUN interface, or an AF_PACKET or AF_XDP socket on a veth end, Linux
    /// over a veth pair, a kernel client for both). loopback is Linux's only (with
    /// --server linux).
    #[arg(long, default_value = "shm", value_parser = LINKS)]
    link: String,
    /// tun: without offloads (no virtio-net header on the TUN, TSO, GSO and GRO off on
    /// the veth pair): every segment MTU-sized on both links.
    #[arg(long)]
    no_offload: bool,
    /// Server shards: over shm, ustack's server on N threads with a queue pair and a stack
    /// each, the client steering flows to them by RSS (udp-rr, pingpong, cps, stream);
    /// Linux's baseline echo servers (udp-rr, pingpong) with N SO_REUSEPORT workers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    shards: u16,
    /// sim: percent of frames lost, each direction (0 to 100, e.g. 1 or 0.5).
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    loss: Option<f64>,
    /// sim: percent of frames delivered twice, each direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    dup: Option<f64>,
    /// sim: percent of frames held back 1 ms so that later ones overtake them, each
    /// direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    reorder: Option<f64>,
    /// sim: percent of frames with one bit flipped (TCP and UDP checksums drop them),
    /// each direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    corrupt: Option<f64>,
    /// sim: one-way delay added in each direction, e.g. 100us, 1ms (0 to 10s).
    #[arg(long, value_parser = parse_delay)]
    delay: Option<Duration>,
    /// Seed of the sim link's fault decisions and of the stacks' random numbers (ISNs,
    /// ports): the same seed draws the same faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// shm: compute and verify TCP and UDP checksums. By default both ustack ends of the
    /// shm link skip them, as Linux's loopback does (its device claims checksum offload, so
    /// none is ever computed).
    #[arg(long)]
    checksums: bool,
    /// Print one JSON array (one object per server and scenario) instead of the table.
    #[arg(long)]
    json: bool,
    /// Draw the comparison to FILE.png or FILE.svg: latency distributions for the echo
    /// scenarios, Gbit/s for stream, connections/s for cps.
    #[arg(long, value_name = "FILE.png|FILE.svg")]
    plot: Option<PathBuf>,
}

/// Parse a time: `100us`, `250ms`, `2s`, `1.5s`, `1m` (a bare number is seconds).
fn parse_time(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with a unit, like 500ms or 2s"))?;
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("{s:?}: unit must be us, ms, s or m")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?}: must be a non-negative time"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `--duration`: 10 ms to 1 h.
fn parse_run_duration(s: &str) -> Result<Duration, String> {
    let d = parse_time(s)?;
    if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&d) {
        return Err(format!("{s:?}: must be between 10ms and 1h"));
    }
    Ok(d)
}

/// `--delay`: 0 to 10 s.
fn parse_delay(s: &str) -> Result<Duration, String> {
    let d = parse_time(s)?;
    if d > Duration::from_secs(10) {
        return Err(format!("{s:?}: must be between 0 and 10s"));
    }
    Ok(d)
}

/// Parse a size in bytes: a whole number, optionally with K, M or G (powers of 1024,
/// either case): `1472`, `1K`, `64M`. Every size flag goes through here.
fn parse_size(s: &str) -> Result<u64, String> {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits.parse().map_err(|_| {
        format!("{s:?}: expected a whole number of bytes, optionally with K, M or G, like 64M")
    })?;
    let mult: u64 = match &s[digits.len()..] {
        "" => 1,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        _ => {
            return Err(format!(
                "{s:?}: the suffix must be K, M or G (powers of 1024)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too large"))
}

/// A size within `range`, said in the error as `lo..=hi`.
fn parse_size_in(s: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
    let n = parse_size(s)?;
    if !range.contains(&n) {
        return Err(format!(
            "{s:?} is {n} bytes, not in {}..={}",
            range.start(),
            range.end()
        ));
    }
    Ok(n)
}

/// `--msg-size`: 8 (the sequence number) to 1472 (one unfragmented datagram).
fn parse_msg_size(s: &str) -> Result<u16, String> {
    parse_size_in(s, 8..=1472).map(|n| n as u16)
}

/// `--bytes`: 1 byte to 1 TiB.
fn parse_stream_bytes(s: &str) -> Result<u64, String> {
    parse_size_in(s, 1..=1 << 40)
}

/// A fault's percentage: 0 to 100.
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?}: expected a percentage from 0 to 100, like 1 or 0.5"
        )),
    }
}

impl Args {
    /// The fault flags given, with their values in percent (delay in ms).
    fn faults(&self) -> Vec<(&'static str, f64)> {
        [
            ("--loss", self.loss),
            ("--dup", self.dup),
            ("--reorder", self.reorder),
            ("--corrupt", self.corrupt),
            ("--delay", self.delay.map(|d| d.as_secs_f64() * 1e3)),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.map(|v| (name, v)))
        .collect()
    }

    /// The sim link: loopback's MTU and the faults, the same in each direction.
    fn sim_link(&self) -> SimLinkConfig {
        let pct = |v: Option<f64>| v.unwrap_or(0.0) / 100.0;
        let dir = SimConfig {
            loss: pct(self.loss),
            duplicate: pct(self.dup),
            reorder: pct(self.reorder),
            corrupt: pct(self.corrupt),
            delay: self.delay.unwrap_or_default(),
            reorder_delay: REORDER_HOLD,
            ..SimConfig::default()
        };
        SimLinkConfig {
            seed: self.seed,
            a_to_b: dir.clone(),
            b_to_a: dir,
            // The MTU of Linux's loopback (65536; the largest IPv4 datagram is 65535), so
            // that every server moves segments of the same size.
            mtu: 65_535,
            ..SimLinkConfig::default()
        }
    }

    /// What the options ask that cannot be done, as a usage error (exit status 2).
    fn check(&self, scenarios: &[&str]) -> Result<(), String> {
        let link = self.link.as_str();
        if self.no_offload && link != "tun" {
            return Err(format!("--no-offload is for --link tun, not {link}"));
        }
        let kernel_link = kernel_link::LINKS.contains(&link);
        if kernel_link {
            if let Some(other) = scenarios.iter().find(|s| **s != "stream") {
                return Err(format!(
                    "--link {link}: {other}: not yet: only stream runs over {link} so far; \
                     run `ustack bench stream --link {link}`"
                ));
            }
            if !self.faults().is_empty() {
                return Err(format!(
                    "faults need --link sim: the {link} link cannot inject them"
                ));
            }
        }
        let ustack = self.server.iter().any(|s| s == "ustack");
        let linux = self.server.iter().any(|s| s == "linux");
        if link == "loopback" && ustack {
            return Err(
                "--link loopback is Linux's own: ustack cannot run over loopback; \
                        use --link shm or sim for ustack, or --server linux"
                    .into(),
            );
        }
        if self.shards != 1 {
            let n = self.shards;
            if scenarios.contains(&"c1m") {
                return Err(format!(
                    "--shards {n}: not yet for c1m (one server shard, one Linux worker per \
                     process); use --shards 1"
                ));
            }
            if ustack && link == "sim" {
                return Err(format!(
                    "--shards {n} is for --link shm: sim runs client and server in one \
                     thread"
                ));
            }
            if ustack && link != "shm" {
                return Err(format!(
                    "--shards {n}: not yet over {link}: the bench's ustack server runs one \
                     queue there; use --link shm"
                ));
            }
        }
        let faults = self.faults();
        if !faults.is_empty() {
            let names: Vec<&str> = faults.iter().map(|(n, _)| *n).collect();
            let names = names.join(", ");
            if link != "sim" {
                return Err(format!(
                    "faults ({names}) need --link sim: the {link} link cannot inject them"
                ));
            }
            if linux {
                return Err(format!(
                    "faults ({names}) need --server ustack: Linux runs over loopback, \
                     which cannot inject them"
                ));
            }
        }
        if let Some(n) = self.conns
            && n > MAX_CONNS
            && scenarios.iter().any(|s| *s != "c1m")
        {
            return Err(format!(
                "--conns {n}: at most {MAX_CONNS} for {}; only c1m holds more",
                scenarios.join(", ")
            ));
        }
        if scenarios.contains(&"c1m") && ustack && link != "shm" {
            return Err(format!(
                "c1m runs ustack over shm, not {link}: use --link shm, or --server linux"
            ));
        }
        if self.bytes.is_some() && !scenarios.contains(&"stream") {
            return Err(format!(
                "--bytes is for the stream scenario; {} runs for --duration",
                scenarios.join(", ")
            ));
        }
        if let Some(path) = &self.plot {
            plot::Format::of(path)?;
            // Found out before the runs, not after them.
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                return Err(format!(
                    "--plot {}: no such directory to write it in",
                    path.display()
                ));
            }
        }
        // Last: the other mistakes are found without root.
        if kernel_link && let Some(why) = kernel_link::unavailable(link, self.no_offload) {
            return Err(why);
        }
        Ok(())
    }
}

/// How long a frame picked by `--reorder` is held back, so that later frames overtake it.
const REORDER_HOLD: Duration = Duration::from_millis(1);

/// When a measured run ends: after a time (every scenario) or, for stream with
/// `--bytes`, once that many bytes have moved.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    Time(Duration),
    Bytes(u64),
}

/// What one server's run of one scenario needs.
#[derive(Debug)]
pub struct Run {
    pub until: Until,
    /// `--shards`: ustack's server shards over shm; the Linux baseline echo servers'
    /// worker threads (`SO_REUSEPORT`).
    pub shards: usize,
    /// Connections (pingpong) or connections per round (cps).
    pub conns: u32,
    /// Bytes per message (udp-rr, pingpong, cps).
    pub size: usize,
    pub seed: u64,
    /// `--checksums`: compute TCP/UDP checksums over shm (off: skipped, as on loopback).
    pub checksums: bool,
    /// The sim link, with the faults (`--link sim`).
    sim: SimLinkConfig,
    /// How long a message, an echo or a connection may take over sim before the run fails.
    patience: Duration,
    bar: Option<ProgressBar>,
}

impl Run {
    /// The measured phase starts now.
    pub fn meter(&self) -> Meter {
        Meter {
            start: WallClock::now(),
            until: self.until,
            bar: self.bar.clone(),
            drawn: Duration::ZERO,
        }
    }
}

/// The measured phase of a run: when it started, when it ends, and its progress bar.
#[derive(Debug)]
pub struct Meter {
    start: WallClock,
    until: Until,
    bar: Option<ProgressBar>,
    /// When the bar is drawn next (since `start`).
    drawn: Duration,
}

/// How often a progress bar moves: often enough to look live, rarely enough to cost
/// nothing next to a round trip.
const DRAW_EVERY: Duration = Duration::from_millis(50);

impl Meter {
    /// Whether the run goes on, `moved` bytes having moved so far (what `--bytes` counts;
    /// a timed run ignores it).
    pub fn going(&mut self, moved: u64) -> bool {
        let t = self.start.elapsed();
        if let Some(bar) = &self.bar
            && t >= self.drawn
        {
            self.drawn = t + DRAW_EVERY;
            bar.set_position(match self.until {
                Until::Time(_) => t.as_millis() as u64,
                Until::Bytes(_) => moved,
            });
        }
        match self.until {
            Until::Time(d) => t < d,
            Until::Bytes(b) => moved < b,
        }
    }

    /// When the measured phase started.
    pub fn start(&self) -> WallClock {
        self.start
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// `Some(n)` when the run moves exactly `n` bytes.
    pub fn bytes(&self) -> Option<u64> {
        match self.until {
            Until::Bytes(n) => Some(n),
            Until::Time(_) => None,
        }
    }
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
    /// The server's CPU time, where it runs alone (ustack: its shard threads, summed).
    server_cpu: Option<Duration>,
    /// Server shards (ustack) or worker threads (Linux).
    shards: usize,
    /// ustack with several shards: each shard's CPU time and counters (null otherwise).
    per_shard: Value,
    /// cps: TIME-WAIT entries on the server's side at the end of the run (ustack: the
    /// server stack's records; Linux: the machine's, from /proc/net/sockstat).
    time_wait: Option<u64>,
    /// The sim link's faults and what they did (null without faults).
    faults: Value,
    /// Over shm: each end's link counters (`ShmStats`: frames sent, refused for want of
    /// a slot, ...), `{"server": .., "client": ..}`; null on other links.
    link_stats: Value,
    /// c1m: its phases and the server's memory growth.
    c1m: Option<c1m::C1m>,
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
            shards: 1,
            per_shard: Value::Null,
            time_wait: None,
            faults: Value::Null,
            link_stats: Value::Null,
            c1m: None,
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

    /// The MIB snapshots of a sim pair's server (B) and client (A), and its link's faults.
    fn with_pair(mut self, p: &Pair) -> Outcome {
        self.faults = sim_faults(p);
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

    /// Messages echoed per second (c1m: over its exchange phase).
    fn msgs_per_s(&self) -> Option<f64> {
        if let Some(c) = &self.c1m {
            return Some(self.count as f64 / c.exchange.as_secs_f64());
        }
        matches!(self.scenario, "udp-rr" | "pingpong")
            .then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    /// Connections per second (c1m: established, over its establishment phase).
    fn conns_per_s(&self) -> Option<f64> {
        if let Some(c) = &self.c1m {
            return Some(self.count as f64 / c.establish.as_secs_f64());
        }
        (self.scenario == "cps").then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    /// c1m: the server's memory growth per connection, in bytes.
    fn mem_per_conn(&self) -> Option<f64> {
        let c = self.c1m.as_ref()?;
        Some(c.mem_bytes as f64 / f64::from(self.conns))
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
            "shards": self.shards,
            "verified": self.verified,
            "conns": self.conns,
            "msg_size": if self.scenario == "stream" { Value::Null } else { json!(self.msg_size) },
            "duration_s": self.elapsed.as_secs_f64(),
            "round_trips": if self.msgs_per_s().is_some() { json!(self.count) } else { Value::Null },
            "connections": if matches!(self.scenario, "cps" | "c1m") { json!(self.count) } else { Value::Null },
            "bytes": self.bytes,
            "throughput_gbps": self.gbps(),
            "msgs_per_s": self.msgs_per_s(),
            "conns_per_s": self.conns_per_s(),
            "latency_us": latency,
            "server_cpu_s": self.server_cpu.map(|d| d.as_secs_f64()),
            "server_time_wait": self.time_wait,
            "server_mem_bytes": self.c1m.as_ref().map(|c| c.mem_bytes),
            "server_mem_per_conn_bytes": self.mem_per_conn(),
            "server_mem": self.c1m.as_ref().map_or(Value::Null, |c| c.mem_detail.clone()),
            "phases_s": self.c1m.as_ref().map_or(Value::Null, |c| json!({
                "establish": c.establish.as_secs_f64(),
                "exchange": c.exchange.as_secs_f64(),
                "close": c.close.as_secs_f64(),
            })),
            "counters": self.counters.clone().unwrap_or(Value::Null),
            "per_shard": self.per_shard.clone(),
            "client_counters": self.client_counters.clone().unwrap_or(Value::Null),
            "faults": self.faults,
            "link_stats": self.link_stats,
        })
    }
}

/// The faults of a sim pair's link (the same each way) and what they did to the frames
/// of each direction (A, the client, to B, the server, and back); null for a clean link.
fn sim_faults(p: &Pair) -> Value {
    use ustack_dev::sim::Side;
    let c = p.link.config(Side::A);
    if c.loss == 0.0
        && c.duplicate == 0.0
        && c.reorder == 0.0
        && c.corrupt == 0.0
        && c.delay.is_zero()
    {
        return Value::Null;
    }
    let frames = |from: Side| {
        let s = p.link.stats(from);
        json!({
            "sent": s.sent,
            "lost": s.lost,
            "duplicated": s.duplicated,
            "reordered": s.reordered,
            "corrupted": s.corrupted,
        })
    };
    json!({
        "loss_pct": c.loss * 100.0,
        "dup_pct": c.duplicate * 100.0,
        "reorder_pct": c.reorder * 100.0,
        "corrupt_pct": c.corrupt * 100.0,
        "delay_ms": c.delay.as_secs_f64() * 1e3,
        "to_server": frames(Side::A),
        "to_client": frames(Side::B),
    })
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

/// The next piece of the stream pattern to write after `sent` bytes, at most up to `limit`
/// bytes in all (empty once there): `chunk` is a whole number of the pattern's periods,
/// so writes continue it.
fn stream_next(chunk: &[u8], sent: u64, limit: Option<u64>) -> &[u8] {
    let off = (sent % chunk.len() as u64) as usize;
    let left = limit.map_or(u64::MAX, |l| l.saturating_sub(sent));
    let n = (chunk.len() - off).min(usize::try_from(left).unwrap_or(usize::MAX));
    &chunk[off..off + n]
}

/// How long connecting may take over sim: a lost SYN is sent again after 1 s, then 3 s.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Two ustack stacks over the sim link (the run's faults, loopback's MTU) on the real
/// clock, with TCP buffers the size Linux's autotuning reaches on loopback.
struct Sim {
    p: Pair,
    /// Time zero of the pair's clock.
    start: WallClock,
    /// How long a message or an echo may take before the run fails.
    patience: Duration,
}

impl Sim {
    fn new(run: &Run) -> Sim {
        let mut p = Pair::new(run.sim.clone());
        for s in [&mut p.a, &mut p.b] {
            s.set_sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
                .expect("valid sysctl");
            s.set_sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
                .expect("valid sysctl");
        }
        Sim {
            p,
            start: WallClock::now(),
            patience: run.patience,
        }
    }

    /// Move the pair's clock to the wall clock's present.
    fn tick(&mut self) {
        self.p.now = Instant::from_nanos(self.start.elapsed().as_nanos() as u64).max(self.p.now);
    }

    /// Run the pair on the real clock until `step` yields, failing after `patience`:
    /// `what` says what did not happen.
    fn until<T>(
        &mut self,
        patience: Duration,
        what: &str,
        mut step: impl FnMut(&mut Pair) -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        let deadline = WallClock::now() + patience;
        loop {
            if let Some(v) = step(&mut self.p)? {
                return Ok(v);
            }
            if WallClock::now() > deadline {
                bail!("ustack over sim: {what} within {patience:?}");
            }
            self.tick();
            self.p.settle();
        }
    }

    /// B's listener for the TCP scenarios, with room for `n` connections at once.
    fn listener(&mut self, n: u32) -> anyhow::Result<ListenerHandle> {
        Ok(self.p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), n)?)
    }

    /// Open `n` connections A -> B's `listener`; returns (client handles, server
    /// handles), paired by index.
    fn connections(
        &mut self,
        listener: ListenerHandle,
        n: u32,
    ) -> anyhow::Result<(Vec<TcpHandle>, Vec<TcpHandle>)> {
        let mut clients = Vec::new();
        for _ in 0..n {
            self.tick();
            let p = &mut self.p;
            clients.push(p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))?);
        }
        let mut by_port = std::collections::HashMap::new();
        self.until(
            CONNECT_PATIENCE,
            "not every connection was established",
            |p| {
                while let Ok((h, peer)) = p.b.tcp_accept(listener) {
                    by_port.insert(peer.port(), h);
                }
                Ok((by_port.len() == n as usize).then_some(()))
            },
        )?;
        let mut servers = Vec::new();
        self.tick();
        let p = &mut self.p;
        for &c in &clients {
            let port = p.a.tcp_info(c)?.local.port();
            servers.push(by_port[&port]);
            p.a.tcp_set_nodelay(p.now, c, true)?;
            p.b.tcp_set_nodelay(p.now, by_port[&port], true)?;
        }
        Ok((clients, servers))
    }

    /// Read exactly `buf.len()` bytes from `h` on side A (`client`) or B.
    fn read_exact(&mut self, client: bool, h: TcpHandle, buf: &mut [u8]) -> anyhow::Result<()> {
        let mut got = 0;
        self.until(self.patience, "a message did not arrive", |p| {
            let now = p.now;
            let stack = if client { &mut p.a } else { &mut p.b };
            loop {
                match stack.tcp_recv(now, h, &mut buf[got..]) {
                    Ok(0) => bail!("ustack: connection closed mid-message"),
                    Ok(n) => got += n,
                    Err(ustack_stack::Error::WouldBlock) => return Ok(None),
                    Err(e) => bail!("ustack: {e}"),
                }
                if got == buf.len() {
                    return Ok(Some(()));
                }
            }
        })
    }

    /// Wait for the end of stream on client `h`; whether nothing came before it.
    fn read_eof(&mut self, h: TcpHandle) -> anyhow::Result<bool> {
        let mut byte = [0u8; 1];
        self.until(
            self.patience,
            "the server's FIN did not arrive",
            |p| match p.a.tcp_recv(p.now, h, &mut byte) {
                Ok(0) => Ok(Some(true)),
                Ok(_) => Ok(Some(false)),
                Err(ustack_stack::Error::WouldBlock) => Ok(None),
                Err(e) => bail!("ustack: {e}"),
            },
        )
    }

    /// One lock-step round: every client sends one `size`-byte message (message
    /// `seq0 + i` on connection `i`), the server echoes each (and, with `close`, closes
    /// after its reply), every client reads its echo (and, with `close`, the end of
    /// stream, then closes). Whether every echo was right.
    fn round(
        &mut self,
        (clients, servers): (&[TcpHandle], &[TcpHandle]),
        seq0: u64,
        size: usize,
        close: bool,
    ) -> anyhow::Result<bool> {
        let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
        self.tick();
        for (i, &c) in clients.iter().enumerate() {
            fill_message(&mut msg, seq0 + i as u64);
            if self.p.a.tcp_send(self.p.now, c, &msg)? != size {
                bail!("ustack: a {size}-byte message did not fit the send buffer");
            }
        }
        self.p.settle();
        for &s in servers {
            self.read_exact(false, s, &mut buf)?;
            let p = &mut self.p;
            p.b.tcp_send(p.now, s, &buf)?;
            if close {
                p.b.tcp_close(p.now, s)?;
            }
        }
        self.p.settle();
        let mut verified = true;
        for (i, &c) in clients.iter().enumerate() {
            self.read_exact(true, c, &mut buf)?;
            fill_message(&mut msg, seq0 + i as u64);
            verified &= buf == msg;
            if close {
                // The server's FIN follows its reply: end of stream, then our close.
                verified &= self.read_eof(c)?;
                self.p.a.tcp_close(self.p.now, c)?;
            }
        }
        if close {
            self.p.settle();
        }
        Ok(verified)
    }
}

/// The sequence number an echo carries (its first 8 bytes).
fn message_seq(msg: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(msg.get(..8)?.try_into().ok()?))
}

/// udp-rr over sim. A lost request or echo never comes back by itself, so the client
/// sends the request again when its echo is late (twice the one-way delay and reorder
/// hold, plus 10 ms); echoes of earlier requests (resent or duplicated) are skipped.
fn ustack_udp_rr(run: &Run) -> anyhow::Result<Outcome> {
    let size = run.size;
    let mut sim = Sim::new(run);
    let p = &mut sim.p;
    let client = p.a.udp_bind(SocketAddrV4::new(A_IP, 0))?;
    let server = p.b.udp_bind(SocketAddrV4::new(B_IP, 7))?;
    let server_addr = SocketAddrV4::new(B_IP, 7);
    let resend_after = 2 * (run.sim.a_to_b.delay + REORDER_HOLD) + Duration::from_millis(10);
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        sim.tick();
        sim.p.a.udp_send_to(sim.p.now, client, &req, server_addr)?;
        sim.p.settle();
        let mut sent_at = t0;
        verified &= sim.until(sim.patience, "no UDP echo came back", |p| {
            while let Ok((n, from)) = p.b.udp_recv_from(server, &mut srv_buf) {
                p.b.udp_send_to(p.now, server, &srv_buf[..n], from)?;
            }
            p.settle();
            while let Ok((n, _)) = p.a.udp_recv_from(client, &mut resp) {
                match message_seq(&resp[..n]) {
                    Some(s) if s < seq => continue,
                    Some(s) if s == seq => return Ok(Some(resp[..n] == req[..])),
                    _ => return Ok(Some(false)),
                }
            }
            if sent_at.elapsed() > resend_after {
                p.a.udp_send_to(p.now, client, &req, server_addr)?;
                sent_at = WallClock::now();
            }
            Ok(None)
        })?;
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
        m.elapsed(),
        verified,
        rtt_ns,
    )
    .with_pair(&sim.p))
}

/// udp-rr against the baseline UDP echo server in a process of its own, the client on a
/// kernel socket in the bench process.
fn linux_udp_rr(run: &Run) -> anyhow::Result<Outcome> {
    let size = run.size;
    let (server, port) = linux::Peer::spawn("udp-echo", &workers(run))?;
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("bind the Linux client socket on loopback")?;
    client.connect((Ipv4Addr::LOCALHOST, port))?;
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    let (mut req, mut resp) = (vec![0u8; size], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let cpu0 = server.cpu();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        client.send(&req)?;
        let n = client
            .recv(&mut resp)
            .context("Linux udp-rr: the client got no echo")?;
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = m.elapsed();
    let cpu = cpu_between(cpu0, server.cpu());
    server.stop()?;
    let mut o = Outcome::echo(
        "udp-rr", "linux", "loopback", 1, size, seq, elapsed, verified, rtt_ns,
    );
    o.server_cpu = cpu;
    o.shards = run.shards;
    Ok(o)
}

/// The `bench-peer` arguments that give a Linux baseline server one worker thread per
/// `--shards`, each with its own `SO_REUSEPORT` socket.
fn workers(run: &Run) -> Vec<String> {
    vec!["--workers".into(), run.shards.to_string()]
}

/// The CPU time between two readings of a peer's.
fn cpu_between(before: Option<Duration>, after: Option<Duration>) -> Option<Duration> {
    Some(after?.saturating_sub(before?))
}

/// pingpong (`cps` false: `conns` connections kept for the run) or cps (a new set of
/// connections every round, closed by the server after its reply) over sim, in lock-step
/// rounds ([`Sim::round`]).
fn ustack_lockstep(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let mut sim = Sim::new(run);
    let listener = sim.listener(conns)?;
    let mut kept = if cps {
        None
    } else {
        Some(sim.connections(listener, conns)?)
    };
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let (clients, servers) = match &kept {
            Some(pairs) => pairs.clone(),
            None => sim.connections(listener, conns)?,
        };
        let seq0 = rounds * u64::from(conns);
        verified &= sim.round((&clients, &servers), seq0, size, cps)?;
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
        m.elapsed(),
        verified,
        rtt_ns,
    );
    let o = if cps {
        o.with_time_wait(sim.p.b.tcp_resources().timewait)
    } else {
        o
    };
    Ok(o.with_pair(&sim.p))
}

/// `n` kernel connections to the Linux server on 127.0.0.1:`port` (nodelay, reads time
/// out after 1 s).
fn linux_connections(port: u16, n: u32) -> anyhow::Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .context("Linux: connect over loopback")?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(Duration::from_secs(1)))?;
        conns.push(c);
    }
    Ok(conns)
}

/// pingpong or cps against a Linux server in a process of its own (the baseline echo
/// server; for cps, one that replies and closes first), in the same lock-step rounds as
/// ustack's ([`Sim::round`]), the client on kernel sockets in the bench process: with
/// `cps`, new connections every round, the client reading the end of stream and closing.
fn linux_lockstep(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let (server, port) = if cps {
        linux::Peer::spawn("reply-close", &["--size".into(), size.to_string()])?
    } else {
        linux::Peer::spawn("echo", &workers(run))?
    };
    let mut kept = if cps {
        Vec::new()
    } else {
        linux_connections(port, conns)?
    };
    let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let cpu0 = server.cpu();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let mut fresh = if cps {
            linux_connections(port, conns)?
        } else {
            Vec::new()
        };
        let streams = if cps { &mut fresh } else { &mut kept };
        let seq0 = rounds * u64::from(conns);
        for (i, c) in streams.iter_mut().enumerate() {
            fill_message(&mut msg, seq0 + i as u64);
            c.write_all(&msg)?;
        }
        for (i, c) in streams.iter_mut().enumerate() {
            c.read_exact(&mut buf)
                .context("Linux: the client got no echo")?;
            fill_message(&mut msg, seq0 + i as u64);
            verified &= buf == msg;
            if cps {
                verified &= matches!(c.read(&mut buf), Ok(0));
            }
        }
        // cps: the client's sockets close here, after the server's FIN.
        drop(fresh);
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let elapsed = m.elapsed();
    let cpu = cpu_between(cpu0, server.cpu());
    drop(kept);
    server.stop()?;
    let count = rounds * u64::from(conns);
    let mut o = Outcome::echo(
        if cps { "cps" } else { "pingpong" },
        "linux",
        "loopback",
        conns,
        size,
        count,
        elapsed,
        verified,
        rtt_ns,
    );
    o.server_cpu = cpu;
    if cps {
        // The reply-and-close checker has one thread: --shards does not apply.
        return Ok(o.with_linux_time_wait());
    }
    o.shards = run.shards;
    Ok(o)
}

/// stream over sim: for `--duration`, or until exactly `--bytes` have arrived.
fn ustack_stream(run: &Run) -> anyhow::Result<Outcome> {
    let mut sim = Sim::new(run);
    let listener = sim.listener(1)?;
    let (clients, servers) = sim.connections(listener, 1)?;
    let (c, s) = (clients[0], servers[0]);
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut sent, mut got, mut verified) = (0u64, 0u64, true);
    let mut m = run.meter();
    let limit = m.bytes();
    let mut last_byte = WallClock::now();
    while m.going(got) {
        sim.tick();
        let p = &mut sim.p;
        loop {
            let piece = stream_next(&chunk, sent, limit);
            if piece.is_empty() {
                break;
            }
            match p.a.tcp_send(p.now, c, piece) {
                Ok(n) => {
                    sent += n as u64;
                    if n < piece.len() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        p.settle();
        let (now, before) = (p.now, got);
        while let Ok(n) = p.b.tcp_recv(now, s, &mut buf) {
            if n == 0 {
                break;
            }
            verified &= stream_matches(&chunk, got, &buf[..n]);
            got += n as u64;
        }
        if got > before {
            last_byte = WallClock::now();
        } else if last_byte.elapsed() > sim.patience {
            bail!(
                "ustack stream over sim: no data arrived within {:?} (at byte {got})",
                sim.patience
            );
        }
    }
    verified &= limit.is_none_or(|l| got == l);
    Ok(Outcome::stream("ustack", "sim", got, m.elapsed(), verified).with_pair(&sim.p))
}

/// stream through the kernel over loopback: the client writes from the bench process, a
/// sink in a process of its own reads and checks every byte and says when the last one
/// came (on the monotonic clock both processes share).
fn linux_stream(run: &Run) -> anyhow::Result<Outcome> {
    linux_stream_with(run, "loopback", &[], |port| {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port))
    })
}

/// stream's kernel client: writes the pattern on `c` for the run (for `--duration`, or
/// exactly `--bytes`), then half-closes; the bytes written and the run's meter.
fn kernel_stream_client(run: &Run, c: &mut TcpStream) -> anyhow::Result<(u64, Meter)> {
    let chunk = stream_chunk();
    let mut sent = 0u64;
    let mut m = run.meter();
    let limit = m.bytes();
    while m.going(sent) {
        let piece = stream_next(&chunk, sent, limit);
        if piece.is_empty() {
            break;
        }
        sent += c.write(piece)? as u64;
    }
    c.shutdown(std::net::Shutdown::Write)?;
    Ok((sent, m))
}

/// stream to the Linux sink (a `bench-peer` process started with `peer_args`), over
/// `link`, from the kernel client `connect` opens to the sink's port.
fn linux_stream_with(
    run: &Run,
    link: &'static str,
    peer_args: &[String],
    connect: impl FnOnce(u16) -> std::io::Result<TcpStream>,
) -> anyhow::Result<Outcome> {
    let (mut server, port) = linux::Peer::spawn("sink", peer_args)?;
    let mut c = connect(port).with_context(|| format!("Linux: connect over {link}"))?;
    let cpu0 = server.cpu();
    let start_ns = linux::monotonic_ns();
    let (sent, m) = kernel_stream_client(run, &mut c)?;
    let limit = m.bytes();
    let words = server.expect("sink", linux::ANSWER)?;
    let cpu = cpu_between(cpu0, server.cpu());
    server.stop()?;
    let field = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    let (Some(got), Some(matched), Some(last_ns)) = (field(0), field(1), field(2)) else {
        bail!("Linux stream: the sink reported {words:?}");
    };
    let mut o = Outcome::stream(
        "linux",
        link,
        got,
        Duration::from_nanos(last_ns.saturating_sub(start_ns)),
        matched == 1 && got == sent && limit.is_none_or(|l| got == l),
    );
    o.server_cpu = cpu;
    Ok(o)
}

/// A usage error found after parsing (an option this build cannot honour, or options
/// that do not go together): printed like clap's own, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A progress bar on stderr for one server's run of one scenario: elapsed time against
/// `--duration`, or bytes against `--bytes`.
fn progress_bar(label: String, until: Until) -> ProgressBar {
    let (len, template) = match until {
        Until::Time(d) => (
            d.as_millis() as u64,
            "{prefix:<18} [{bar:40}] {pos:>6}/{len} ms",
        ),
        Until::Bytes(n) => (n, "{prefix:<18} [{bar:40}] {bytes:>10}/{total_bytes}"),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(label);
    bar
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let scenarios: Vec<&str> = match &args.scenario {
        Some(s) => vec![s.as_str()],
        None => SCENARIOS.to_vec(),
    };
    args.check(&scenarios).map_err(UsageError)?;
    let duration = args.duration.unwrap_or(if scenarios.len() > 1 {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(2)
    });
    let sim = args.sim_link();
    // Over a faulty link TCP's retransmission timer backs off (200 ms, 400 ms, 800 ms,
    // 1.6 s): a message may then take seconds, not a round trip.
    let faulty = !args.faults().is_empty();
    let patience = Duration::from_secs(if faulty { 5 } else { 1 });
    // Progress bars only where someone watches: stderr a terminal, and not under --json.
    let bars = !args.json && std::io::stderr().is_terminal();
    let mut outcomes = Vec::new();
    for scenario in scenarios {
        for server in &args.server {
            let until = match args.bytes {
                Some(n) if scenario == "stream" => Until::Bytes(n),
                _ => Until::Time(duration),
            };
            let what = match until {
                Until::Time(d) => format!("{d:?}"),
                Until::Bytes(n) => format!("{n} bytes"),
            };
            let c1m = scenario == "c1m";
            if !args.json && c1m {
                eprintln!(
                    "ustack bench: c1m on {server}: {} connections, held idle {what} ...",
                    args.conns.unwrap_or(C1M_CONNS)
                );
            } else if !args.json && !bars {
                eprintln!("ustack bench: {scenario} on {server} for {what} ...");
            }
            let run = Run {
                until,
                shards: usize::from(args.shards),
                conns: args.conns.unwrap_or(if c1m { C1M_CONNS } else { 10 }),
                size: usize::from(args.msg_size),
                seed: args.seed,
                checksums: args.checksums,
                sim: sim.clone(),
                patience,
                // c1m runs in phases, not against the clock: its line says what it does.
                bar: (bars && !c1m).then(|| progress_bar(format!("{scenario} on {server}"), until)),
            };
            let shm = args.link == "shm";
            let link = args.link.as_str();
            let over_kernel_link = kernel_link::LINKS.contains(&link);
            let outcome = match (scenario, server.as_str()) {
                ("stream", "ustack") if over_kernel_link => {
                    kernel_link::ustack_stream(&run, link, args.no_offload)?
                }
                ("stream", _) if over_kernel_link => {
                    kernel_link::linux_stream(&run, link, args.no_offload)?
                }
                (_, "ustack") if shm && !c1m => {
                    shm::scenario(scenario, &run, usize::from(args.shards))?
                }
                ("udp-rr", "ustack") => ustack_udp_rr(&run)?,
                ("pingpong", "ustack") => ustack_lockstep(&run, false)?,
                ("cps", "ustack") => ustack_lockstep(&run, true)?,
                ("stream", "ustack") => ustack_stream(&run)?,
                ("c1m", "ustack") => c1m::ustack(&run, duration)?,
                ("c1m", _) => c1m::linux(&run, duration)?,
                ("udp-rr", _) => linux_udp_rr(&run)?,
                ("pingpong", _) => linux_lockstep(&run, false)?,
                ("cps", _) => linux_lockstep(&run, true)?,
                _ => linux_stream(&run)?,
            };
            if let Some(bar) = &run.bar {
                bar.set_position(bar.length().unwrap_or(0));
                bar.finish();
            }
            outcomes.push(outcome);
        }
    }
    if args.json {
        let all: Vec<Value> = outcomes.iter().map(Outcome::to_json).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_table(&outcomes, args);
    }
    if let Some(path) = &args.plot {
        plot::draw(path, &outcomes).with_context(|| format!("--plot {}", path.display()))?;
        if !args.json {
            println!("plot: {}", path.display());
        }
    }
    if outcomes.iter().all(|o| o.verified) {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("ustack bench: a run did not verify what it moved (\"verified\": false)");
        Ok(ExitCode::FAILURE)
    }
}

fn print_table(outcomes: &[Outcome], args: &Args) {
    println!();
    let linux = "Linux over loopback (the server in processes of its own)";
    if args.link == "tun" {
        let offloads = if args.no_offload {
            "without offloads"
        } else {
            "with offloads"
        };
        println!(
            "ustack over TUN, Linux over veth ({offloads}; the server in a namespace, a \
             kernel client in another, its socket written from the bench process)"
        );
    } else if matches!(args.link.as_str(), "packet" | "xdp") {
        let how = if args.link == "packet" {
            "an AF_PACKET socket with TPACKET_V3 rings"
        } else {
            "an AF_XDP socket in copy mode"
        };
        println!(
            "ustack over {} ({how} on a veth end), Linux over veth (the kernel client's end \
             without transmit offloads on both; the server in a namespace, its socket \
             written from the bench process)",
            args.link
        );
    } else if !args.server.iter().any(|s| s == "ustack") {
        println!("{linux}");
    } else if args.link == "shm" && args.shards > 1 {
        println!(
            "ustack over shm, the server on {} shards (a thread, a queue pair and a stack \
             each; the client steers flows to them by RSS), all busy-polling {} µs; Linux \
             over loopback, the udp-rr and pingpong servers with {} SO_REUSEPORT workers",
            args.shards,
            shm::BUSY_POLL.as_micros(),
            args.shards
        );
    } else if args.link == "shm" {
        println!(
            "ustack over shm (server and client on their own threads, busy-polling {} µs); \
             {linux}",
            shm::BUSY_POLL.as_micros()
        );
    } else {
        println!("ustack over sim (client and server in one thread on one core); {linux}");
    }
    let faults = args.faults();
    if !faults.is_empty() {
        let said: Vec<String> = faults
            .iter()
            .map(|(name, v)| match *name {
                "--delay" => format!("delay {v} ms"),
                _ => format!("{} {v}%", &name[2..]),
            })
            .collect();
        println!(
            "sim faults, each direction: {} (seed {})",
            said.join(", "),
            args.seed
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
    print_c1m(outcomes);
    for scenario in ALL_SCENARIOS {
        let find = |s: &str| {
            outcomes
                .iter()
                .find(|o| o.scenario == scenario && o.server == s)
        };
        if let (Some(u), Some(l)) = (find("ustack"), find("linux")) {
            if let (Some(um), Some(lm)) = (u.mem_per_conn(), l.mem_per_conn()) {
                println!(
                    "{scenario}: ustack/linux {:.2}x conns/s, {:.2}x p50 latency, {:.2}x memory per connection",
                    u.conns_per_s().unwrap_or(0.0) / l.conns_per_s().unwrap_or(1.0),
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0),
                    um / lm.max(1.0),
                );
                continue;
            }
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

/// c1m's own figures under the table: the phases, the server's memory and CPU time.
fn print_c1m(outcomes: &[Outcome]) {
    let c1m: Vec<(&Outcome, &c1m::C1m)> = outcomes
        .iter()
        .filter_map(|o| Some((o, o.c1m.as_ref()?)))
        .collect();
    if c1m.is_empty() {
        return;
    }
    println!(
        "{:<9} {:<7} {:>8} {:>12} {:>11} {:>8} {:>14} {:>10} {:>11}",
        "c1m",
        "server",
        "conns",
        "establish s",
        "exchange s",
        "close s",
        "server mem MiB",
        "B/conn",
        "server cpu s"
    );
    for (o, c) in c1m {
        println!(
            "{:<9} {:<7} {:>8} {:>12.3} {:>11.3} {:>8.3} {:>14.1} {:>10.0} {:>11}",
            "",
            o.server,
            o.conns,
            c.establish.as_secs_f64(),
            c.exchange.as_secs_f64(),
            c.close.as_secs_f64(),
            c.mem_bytes as f64 / f64::from(1u32 << 20),
            o.mem_per_conn().unwrap_or(0.0),
            o.server_cpu
                .map_or("-".to_owned(), |d| format!("{:.3}", d.as_secs_f64())),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_powers_of_1024_and_plain_numbers() {
        assert_eq!(parse_size("1472"), Ok(1472));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("1.5M").unwrap_err().contains("whole number"));
        assert!(parse_size("64MB").unwrap_err().contains("K, M or G"));
        assert!(
            parse_size("99999999999G")
                .unwrap_err()
                .contains("too large")
        );
        assert_eq!(parse_msg_size("1K"), Ok(1024));
        assert!(parse_msg_size("7").unwrap_err().contains("8..=1472"));
    }

    #[test]
    fn stream_writes_stop_at_the_byte_count_and_continue_the_pattern() {
        let chunk = stream_chunk();
        // Unlimited: the rest of the block from the offset.
        assert_eq!(stream_next(&chunk, 10, None), &chunk[10..]);
        // Limited: never past the count, and empty once there.
        assert_eq!(stream_next(&chunk, 10, Some(15)), &chunk[10..15]);
        assert!(stream_next(&chunk, 15, Some(15)).is_empty());
        let pos = chunk.len() as u64 + 3;
        assert!(stream_matches(
            &chunk,
            pos,
            stream_next(&chunk, pos, Some(pos + 100))
        ));
    }

    #[test]
    fn times_take_units_from_us_to_minutes() {
        assert_eq!(parse_time("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_time("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert!(
            parse_run_duration("5ms")
                .unwrap_err()
                .contains("10ms and 1h")
        );
        assert_eq!(parse_delay("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn sockstat_tw_is_read_from_the_tcp_line() {
        let s =
            "sockets: used 9\nTCP: inuse 1 orphan 0 tw 10790 alloc 1 mem 194\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tw(s), Some(10790));
        assert_eq!(sockstat_tw("TCP: inuse 1 orphan 0\n"), None);
        assert_eq!(sockstat_tw("UDP: tw 5\n"), None);
    }
}
