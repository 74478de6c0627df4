//! What one server's run of one scenario needs ([`Run`]), when its measured phase ends
//! ([`Meter`]), and the progress bar that shows it.

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
