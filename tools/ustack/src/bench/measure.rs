//! What one server's run of one scenario needs ([`Run`]), when its measured phase ends
//! ([`Meter`]), and the progress bar that shows it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as WallClock};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ustack_dev::sim::SimLinkConfig;

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
    pub sim: SimLinkConfig,
    /// How long a message, an echo or a connection may take over sim before the run fails.
    pub patience: Duration,
    pub bar: Option<ProgressBar>,
    /// How the Linux side runs (its server and the client of it).
    pub linux_mode: LinuxMode,
    /// The machine's busy CPU time over the measured phase ([`Meter`] reads it).
    pub machine: MachineCpu,
    /// c1m: spoofed SYNs per second during the hold (`--syn-flood`).
    pub syn_flood: Option<u32>,
    /// c1m: bytes every connection sends at once to a server that stopped reading (`--send`).
    pub send: Option<usize>,
    /// c1m: the ustack server's tunables, `NAME=VALUE` each (`--server-sysctl`).
    pub server_sysctl: Vec<String>,
    /// c1m: connections running pingpong alone, then beside the idle ones (`--active`).
    pub active: Option<u32>,
    /// `--ipv6`: the run's addresses are IPv6 ones.
    pub ipv6: bool,
    /// `--ustack-poll`: how ustack's loops busy-poll (`adaptive`, `fixed` or `sleep`).
    pub ustack_poll: String,
    /// `--pin`: ustack's server shards and client over shm each pinned to a CPU.
    pub pin: bool,
}

impl Run {
    /// The address family's name, as the JSON's `family` says it.
    pub fn family(&self) -> &'static str {
        if self.ipv6 { "ipv6" } else { "ipv4" }
    }

    /// Linux's loopback address of the run's family: `::1` or 127.0.0.1.
    pub fn loopback(&self) -> std::net::IpAddr {
        if self.ipv6 {
            std::net::Ipv6Addr::LOCALHOST.into()
        } else {
            std::net::Ipv4Addr::LOCALHOST.into()
        }
    }

    /// The arguments that put a Linux peer on [`Run::loopback`].
    pub fn peer_addr_args(&self) -> Vec<String> {
        vec!["--addr".into(), self.loopback().to_string()]
    }

    /// The measured phase starts now.
    pub fn meter(&self) -> Meter {
        self.machine.start();
        Meter {
            start: WallClock::now(),
            until: self.until,
            bar: self.bar.clone(),
            drawn: Duration::ZERO,
            machine: self.machine.clone(),
        }
    }
}

/// How Linux's side of a run waits for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinuxMode {
    /// Server and client sleep in `epoll_wait` (as deployed), on whichever cores the
    /// scheduler picks.
    Epoll,
    /// Server and client spin on non-blocking sockets (`epoll_wait` with a zero timeout),
    /// each pinned to a core of its own.
    Busy,
    /// The server is one io_uring (multishot accept and receive into provided buffers),
    /// sleeping in `io_uring_enter`; the client sleeps in `epoll_wait`.
    IoUring,
}

impl LinuxMode {
    pub const ALL: [LinuxMode; 3] = [LinuxMode::Epoll, LinuxMode::Busy, LinuxMode::IoUring];

    /// Its name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            LinuxMode::Epoll => "epoll",
            LinuxMode::Busy => "busy",
            LinuxMode::IoUring => "io_uring",
        }
    }

    pub fn parse(s: &str) -> Option<LinuxMode> {
        LinuxMode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// What it means, in a few words (beside every ratio).
    pub fn describe(self) -> &'static str {
        match self {
            LinuxMode::Epoll => "server and client sleeping in epoll_wait",
            LinuxMode::Busy => "server and client spinning, pinned to a core each",
            LinuxMode::IoUring => "io_uring server sleeping in io_uring_enter, epoll client",
        }
    }

    /// The CPUs the server and the client are pinned to (busy only): different cores
    /// when the machine has two.
    pub fn cpus(self) -> Option<(usize, usize)> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        (self == LinuxMode::Busy).then_some((1 % n, 0))
    }
}

/// The machine's busy CPU time (every core: user, nice, system, irq, softirq, steal of
/// /proc/stat's `cpu` line) between the start of a measured phase and its end, in clock
/// ticks of 1/`CLK_TCK` s (10 ms at the usual 100 Hz).
/// Beside it, the bench process's own CPU time (`CLOCK_PROCESS_CPUTIME_ID`, every thread:
/// the client, and ustack's server threads over shm) over the same phase, exact.
#[derive(Debug, Clone, Default)]
pub struct MachineCpu(Arc<Mutex<[Option<CpuReading>; 2]>>);

/// The machine's busy ticks and this process's CPU time at one moment.
type CpuReading = (u64, Duration);

/// The machine's busy ticks and this process's CPU time, now.
fn cpu_now() -> Option<CpuReading> {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let own = Duration::new(t.tv_sec as u64, t.tv_nsec as u32);
    Some((machine_busy_ticks()?, own))
}

impl MachineCpu {
    fn start(&self) {
        if let Ok(mut g) = self.0.lock() {
            *g = [cpu_now(), None];
        }
    }

    /// The measured phase ends now (a second call keeps the first end).
    pub fn stop(&self) {
        if let Ok(mut g) = self.0.lock()
            && g[1].is_none()
        {
            g[1] = cpu_now();
        }
    }

    /// The machine's busy CPU time over the measured phase, every core summed, and the
    /// bench process's own.
    pub fn busy(&self) -> Option<(Duration, Duration)> {
        self.stop();
        let [a, b] = *self.0.lock().ok()?;
        let ((t0, own0), (t1, own1)) = (a?, b?);
        let ticks = t1.checked_sub(t0)?;
        let per_s = rustix::param::clock_ticks_per_second().max(1);
        Some((
            Duration::from_secs_f64(ticks as f64 / per_s as f64),
            own1.saturating_sub(own0),
        ))
    }
}

/// The busy ticks of /proc/stat's first line, every core.
fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_ticks(stat.lines().next()?)
}

/// user + nice + system + irq + softirq + steal of a `cpu ...` line (not idle, not
/// iowait; guest time is already in user).
fn busy_ticks(line: &str) -> Option<u64> {
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(8).map(|x| x.parse().ok()).collect::<Option<_>>()?;
    if v.len() < 8 {
        return None;
    }
    Some(v[0] + v[1] + v[2] + v[5] + v[6] + v[7])
}

/// The measured phase of a run: when it started, when it ends, and its progress bar.
#[derive(Debug)]
pub struct Meter {
    start: WallClock,
    until: Until,
    bar: Option<ProgressBar>,
    /// When the bar is drawn next (since `start`).
    drawn: Duration,
    machine: MachineCpu,
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
        let going = match self.until {
            Until::Time(d) => t < d,
            Until::Bytes(b) => moved < b,
        };
        if !going {
            self.machine.stop();
        }
        going
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

/// A progress bar on stderr for one server's run of one scenario: elapsed time against
/// `--duration`, or bytes against `--bytes`.
pub fn progress_bar(label: String, until: Until) -> ProgressBar {
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

/// `--shards`, each with its own `SO_REUSEPORT` socket.
pub fn workers(run: &Run) -> Vec<String> {
    vec!["--workers".into(), run.shards.to_string()]
}

/// The CPU time between two readings of a peer's.
pub fn cpu_between(before: Option<Duration>, after: Option<Duration>) -> Option<Duration> {
    Some(after?.saturating_sub(before?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_ticks_leave_out_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let line = "cpu  100 2 30 5000 70 4 5 6 0 0";
        assert_eq!(busy_ticks(line), Some(100 + 2 + 30 + 4 + 5 + 6));
        assert_eq!(busy_ticks("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(busy_ticks("cpu 1 2"), None);
    }
}
