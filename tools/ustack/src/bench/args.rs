//! `ustack bench`'s command line: the options, their parsers, and the combinations it
//! refuses (as usage errors, before anything runs).

use std::path::PathBuf;
use std::time::Duration;

use ustack_dev::sim::{SimConfig, SimLinkConfig};

use super::measure::LinuxMode;
use super::{kernel_link, plot};

/// The default suite: every scenario but `c1m`, which takes minutes at its full size.
pub const SCENARIOS: [&str; 4] = ["udp-rr", "pingpong", "cps", "stream"];
/// What the scenario argument accepts.
pub const ALL_SCENARIOS: [&str; 5] = ["udp-rr", "pingpong", "cps", "stream", "c1m"];
/// Most `--conns` for pingpong and cps (c1m holds more).
pub const MAX_CONNS: u32 = 10_000;
/// Most `--conns` for stream (over tun, packet or xdp: a writer thread each).
pub const MAX_STREAM_CONNS: u32 = 64;
/// c1m's `--conns` unless told.
pub const C1M_CONNS: u32 = 100_000;
/// The scenarios Linux runs in each `--linux-mode` (stream and c1m run one way only).
pub const MODED_SCENARIOS: [&str; 3] = ["udp-rr", "pingpong", "cps"];
/// What `--link` accepts: the links ustack runs over, and Linux's loopback.
pub const LINKS: [&str; 6] = ["shm", "sim", "loopback", "tun", "packet", "xdp"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run: udp-rr, pingpong, cps, stream or c1m (N connections opened, held
    /// idle, one message each, closed). Without one, the first four (the default suite).
    #[arg(value_parser = ALL_SCENARIOS)]
    pub scenario: Option<String>,
    /// Servers under test, comma-separated: ustack, linux, or both (side by side).
    #[arg(long, default_value = "ustack,linux", value_delimiter = ',', value_parser = ["ustack", "linux"])]
    pub server: Vec<String>,
    /// How long each server is measured per scenario, e.g. 500ms, 2s (default: 2s for one
    /// scenario, 1s each in the default suite); c1m: how long the connections are held
    /// idle.
    #[arg(long, value_parser = parse_run_duration)]
    pub duration: Option<Duration>,
    /// stream: move exactly this many bytes (every one checked) instead of running for
    /// --duration; K, M and G are powers of 1024 (64M is 67108864 bytes).
    #[arg(long, value_parser = parse_stream_bytes)]
    pub bytes: Option<u64>,
    /// Connections for pingpong (default 10, at most 10000); connections opened per round
    /// for cps (ditto); connections held for c1m (default 100000, at most 10000000);
    /// stream over tun, packet or xdp: connections moving bytes at once, each from a
    /// writer thread of its own (default 1, at most 64; over shm and sim stream is one).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub conns: Option<u32>,
    /// Message size in bytes for udp-rr, pingpong and cps (8 to 1472: one unfragmented
    /// datagram; 1K is 1024).
    #[arg(long, default_value = "64", value_parser = parse_msg_size)]
    pub msg_size: u16,
    /// The link ustack runs over: shm (server and client on their own threads and cores),
    /// sim (both in one thread; injects faults), or tun, packet or xdp (root; stream only:
    /// ustack over a TUN interface, or an AF_PACKET or AF_XDP socket on a veth end, Linux
    /// over a veth pair, a kernel client for both). loopback is Linux's only (with
    /// --server linux).
    #[arg(long, default_value = "shm", value_parser = LINKS)]
    pub link: String,
    /// tun: without offloads (no virtio-net header on the TUN, TSO, GSO and GRO off on
    /// the veth pair): every segment MTU-sized on both links.
    #[arg(long)]
    pub no_offload: bool,
    /// Server shards: over shm, ustack's server on N threads with a queue pair and a stack
    /// each, the client steering flows to them by RSS (udp-rr, pingpong, cps, stream);
    /// Linux's baseline echo servers (udp-rr, pingpong) with N SO_REUSEPORT workers.
    /// Over tun, packet and xdp (stream): the interface with N queues (the veth pairs,
    /// Linux's too, with N receive and transmit queues a side), a server shard on each;
    /// the kernel spreads --conns over them by flow hash.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub shards: u16,
    /// sim: percent of frames lost, each direction (0 to 100, e.g. 1 or 0.5).
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    pub loss: Option<f64>,
    /// sim: percent of frames delivered twice, each direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    pub dup: Option<f64>,
    /// sim: percent of frames held back 1 ms so that later ones overtake them, each
    /// direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    pub reorder: Option<f64>,
    /// sim: percent of frames with one bit flipped (TCP and UDP checksums drop them),
    /// each direction.
    #[arg(long, value_parser = parse_percent, allow_negative_numbers = true)]
    pub corrupt: Option<f64>,
    /// sim: one-way delay added in each direction, e.g. 100us, 1ms (0 to 10s).
    #[arg(long, value_parser = parse_delay)]
    pub delay: Option<Duration>,
    /// Seed of the sim link's fault decisions and of the stacks' random numbers (ISNs,
    /// ports): the same seed draws the same faults.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// shm: compute and verify TCP and UDP checksums. By default both ustack ends of the
    /// shm link skip them, as Linux's loopback does (its device claims checksum offload, so
    /// none is ever computed).
    #[arg(long)]
    pub checksums: bool,
    /// How Linux runs udp-rr, pingpong and cps, comma-separated: epoll (server and client
    /// sleeping in epoll_wait, as deployed), busy (both spinning on non-blocking sockets,
    /// pinned to a core each), io_uring (an io_uring server: multishot accept and receive,
    /// provided buffers), or all (each in turn; the ratio is against the best). Without
    /// --duration each mode gets a share of the default time.
    #[arg(long, default_value = "all", value_delimiter = ',', value_parser = ["epoll", "busy", "io_uring", "all"])]
    pub linux_mode: Vec<String>,
    /// What pingpong's server and client are written against: native (ustack's event
    /// loop; Linux's sockets in each --linux-mode) or tokio (the same tokio code on both:
    /// on ustack through ustack-tokio's LocalStack over shm, the stack driven inside
    /// tokio; on Linux through tokio::net over loopback; server and client each a
    /// current-thread runtime on a thread of its own). c1m: the servers are tokio, a task
    /// per connection (ustack: a LocalStack in the server process over shm; Linux:
    /// tokio::net in SO_REUSEPORT processes).
    #[arg(long, default_value = "native", value_parser = ["native", "tokio"])]
    pub api: String,
    /// c1m with --server ustack: spoofed SYNs (random sources in 198.18.0.0/15) at RATE per
    /// second from the client side while the connections are held; the report says what
    /// the server's SYN queue, SYN cookies and RSS did (docs/c1m.md).
    #[arg(long, value_name = "RATE", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub syn_flood: Option<u32>,
    /// c1m with --server ustack: after the hold, the server stops reading and every
    /// connection sends BYTES (a size, at most 1M) at once; then the server reads again and
    /// every connection's bytes must come back intact (docs/c1m.md, "Memory pressure").
    #[arg(long, value_name = "BYTES", value_parser = parse_stream_bytes)]
    pub send: Option<u64>,
    /// c1m with --server ustack: N more connections run pingpong rounds for --duration
    /// alone, then again for --duration beside the --conns idle ones (flat scaling: the
    /// report gives both phases' messages/s and p99 round latency, and their ratio).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub active: Option<u32>,
    /// c1m with --server ustack: set a tunable of the server's stack, NAME=VALUE
    /// (repeatable), e.g. net.ipv4.tcp_mem.high=65536.
    #[arg(long, value_name = "NAME=VALUE")]
    pub server_sysctl: Vec<String>,
    /// Run over IPv6: ustack's ends at 2001:db8::1 (server) and ::2 (client) on the shm
    /// link, Linux's over ::1 on loopback (udp-rr, pingpong, cps, stream: the default
    /// suite).
    #[arg(long)]
    pub ipv6: bool,
    /// Shared cores: start one CPU hog per core (a CPU-bound process at nice 10, pinned
    /// to it) for the whole run, beside both stacks; killed at the end. The table and
    /// `--json` (`contend`) say how many, their pids and the CPU share they got.
    #[arg(long)]
    pub contend: bool,
    /// How ustack's loops busy-poll: adaptive (spin only while work keeps arriving within
    /// the 50 µs window, then sleep on the doorbell at once), fixed (spin the whole 50 µs
    /// after every burst of work, `net.core.busy_poll`) or sleep (no busy polling).
    #[arg(long, default_value = "adaptive", value_parser = ["adaptive", "fixed", "sleep"])]
    pub ustack_poll: String,
    /// Over shm, pin ustack's server shards and its client each to a CPU of its own (as
    /// Linux's busy mode pins its ends: server on one CPU, client on another), when the
    /// bench may use enough CPUs: on, off, or auto (the default: on for cps, off for the
    /// rest; `--pin` alone is on, `--pin=off` off). Unpinned, cps's wake-ups can put the client and the
    /// server on one CPU for the whole run (whole cps runs 40% slower); pinned, every
    /// wake-up is a cross-CPU one, which costs pingpong ~5% here and much more with
    /// `--profile-every 1` (docs/bench.md).
    #[arg(long, default_value = "auto", num_args = 0..=1, require_equals = true,
          default_missing_value = "on", value_parser = ["auto", "on", "off"])]
    pub pin: String,
    /// Print one JSON array (one object per server and scenario) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Draw the comparison to FILE.png or FILE.svg: latency distributions for the echo
    /// scenarios, Gbit/s for stream, connections/s for cps.
    #[arg(long, value_name = "FILE.png|FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Sample where the ustack server's loop spends its time (over shm): nanoseconds per
    /// message for each stage (device receive, L2/L3, demux, TCP input, socket queue,
    /// application, TCP output, device transmit, timers, idle polling, other), printed as
    /// a table after the comparison (and under "profile" in --json).
    #[arg(long)]
    pub profile: bool,
    /// With --profile: write the profile as folded stacks (`loop;group;stage ns` lines,
    /// the input of flamegraph.pl or inferno-flamegraph) to FILE.
    #[arg(long, value_name = "FILE", requires = "profile")]
    pub profile_folded: Option<PathBuf>,
    /// With --profile: sample one loop iteration in N (1: every one, exact but costlier).
    #[arg(long, value_name = "N", default_value_t = ustack_obs::profile::SAMPLE_EVERY, requires = "profile")]
    pub profile_every: u64,
}

/// Parse a time: `100us`, `250ms`, `2s`, `1.5s`, `1m` (a bare number is seconds).
pub fn parse_time(s: &str) -> Result<Duration, String> {
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
pub fn parse_run_duration(s: &str) -> Result<Duration, String> {
    let d = parse_time(s)?;
    if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&d) {
        return Err(format!("{s:?}: must be between 10ms and 1h"));
    }
    Ok(d)
}

/// `--delay`: 0 to 10 s.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    let d = parse_time(s)?;
    if d > Duration::from_secs(10) {
        return Err(format!("{s:?}: must be between 0 and 10s"));
    }
    Ok(d)
}

/// Parse a size in bytes: a whole number, optionally with K, M or G (powers of 1024,
/// either case): `1472`, `1K`, `64M`. Every size flag goes through here.
pub fn parse_size(s: &str) -> Result<u64, String> {
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
pub fn parse_size_in(s: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
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
pub fn parse_msg_size(s: &str) -> Result<u16, String> {
    parse_size_in(s, 8..=1472).map(|n| n as u16)
}

/// `--bytes`: 1 byte to 1 TiB.
pub fn parse_stream_bytes(s: &str) -> Result<u64, String> {
    parse_size_in(s, 1..=1 << 40)
}

/// A fault's percentage: 0 to 100.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?}: expected a percentage from 0 to 100, like 1 or 0.5"
        )),
    }
}

impl Args {
    /// The fault flags given, with their values in percent (delay in ms).
    pub fn faults(&self) -> Vec<(&'static str, f64)> {
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
    pub fn sim_link(&self) -> SimLinkConfig {
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

    /// `--ipv6`: what does not run over IPv6 yet.
    fn check_family(&self, scenarios: &[&str]) -> Result<(), String> {
        if !self.ipv6 {
            return Ok(());
        }
        if let Some(other) = scenarios.iter().find(|s| !SCENARIOS.contains(s)) {
            return Err(format!(
                "--ipv6: {other}: not yet: the default suite ({}) runs over IPv6",
                SCENARIOS.join(", ")
            ));
        }
        if self.api != "native" || !matches!(self.link.as_str(), "shm" | "loopback") {
            return Err(
                "--ipv6: not yet: ustack over --link shm (Linux over loopback), --api native"
                    .into(),
            );
        }
        Ok(())
    }

    /// The Linux modes asked for, in the order run.
    pub fn linux_modes(&self) -> Vec<LinuxMode> {
        if self.linux_mode.iter().any(|m| m == "all") {
            return LinuxMode::ALL.to_vec();
        }
        let mut modes: Vec<LinuxMode> = Vec::new();
        for m in self.linux_mode.iter().filter_map(|m| LinuxMode::parse(m)) {
            if !modes.contains(&m) {
                modes.push(m);
            }
        }
        modes
    }

    /// What the options ask that cannot be done, as a usage error (exit status 2).
    pub fn check(&self, scenarios: &[&str]) -> Result<(), String> {
        self.check_family(scenarios)?;
        let link = self.link.as_str();
        if self.profile && (link != "shm" || self.api != "native") {
            return Err(
                "--profile samples the ustack server's shard loop: use --link shm (and --api native)"
                    .into(),
            );
        }
        if self.api == "tokio" {
            if let Some(other) = scenarios
                .iter()
                .find(|s| !matches!(**s, "pingpong" | "c1m"))
            {
                return Err(format!(
                    "--api tokio: {other}: not yet: only pingpong and c1m run on tokio so far; \
                     run `ustack bench pingpong --api tokio`"
                ));
            }
            if self.send.is_some() {
                return Err("--send: not with --api tokio (its tokio server has no pause)".into());
            }
            if !matches!(link, "shm" | "loopback") || self.shards != 1 {
                return Err(
                    "--api tokio runs ustack over shm with one shard (Linux over loopback): \
                     use --link shm and --shards 1"
                        .into(),
                );
            }
        }
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
            if ustack && link != "shm" && !kernel_link {
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
            && n > 1
            && scenarios == ["stream"]
            && !kernel_link
        {
            return Err(format!(
                "--conns {n}: stream over {link} is one connection; several run over --link \
                 tun, packet or xdp (`ustack bench stream --link xdp --conns {n} --shards {n}`)"
            ));
        }
        if let Some(n) = self.conns
            && n > MAX_STREAM_CONNS
            && scenarios.contains(&"stream")
        {
            return Err(format!(
                "--conns {n}: at most {MAX_STREAM_CONNS} for stream (a writer thread each)"
            ));
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
        if let Some(rate) = self.syn_flood
            && (scenarios != ["c1m"] || linux)
        {
            return Err(format!(
                "--syn-flood {rate}: for c1m with --server ustack only (the flood is written \
                 onto ustack's shm link)"
            ));
        }
        if (self.send.is_some() || !self.server_sysctl.is_empty())
            && (scenarios != ["c1m"] || linux)
        {
            return Err(
                "--send and --server-sysctl: for c1m with --server ustack only (its server \
                 process takes them)"
                    .into(),
            );
        }
        if let Some(n) = self.active
            && (scenarios != ["c1m"] || linux || self.syn_flood.is_some() || self.send.is_some())
        {
            return Err(format!(
                "--active {n}: for c1m with --server ustack only, without --syn-flood or --send \
                 (the active connections run during the hold)"
            ));
        }
        if let Some(n) = self.send
            && n > 1 << 20
        {
            return Err(format!("--send {n}: at most 1M bytes per connection"));
        }
        for s in &self.server_sysctl {
            let (name, value) = s
                .split_once('=')
                .and_then(|(n, v)| Some((n, v.parse::<u64>().ok()?)))
                .ok_or_else(|| format!("--server-sysctl {s:?}: expected NAME=VALUE"))?;
            ustack_stack::Sysctl::default()
                .set(name, value)
                .map_err(|e| format!("--server-sysctl {s}: {e}"))?;
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
        let explicit_uring = !self.linux_mode.iter().any(|m| m == "all")
            && self.linux_modes().contains(&LinuxMode::IoUring);
        if linux
            && explicit_uring
            && scenarios.iter().any(|s| MODED_SCENARIOS.contains(s))
            && let Err(why) = ustack_baseline::uring_available()
        {
            return Err(format!(
                "--linux-mode io_uring: this kernel does not offer it ({why}); use epoll or busy"
            ));
        }
        // Last: the other mistakes are found without root.
        if kernel_link && let Some(why) = kernel_link::unavailable(link, self.no_offload) {
            return Err(why);
        }
        Ok(())
    }
}

/// How long a frame picked by `--reorder` is held back, so that later frames overtake it.
pub const REORDER_HOLD: Duration = Duration::from_millis(1);

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
}
