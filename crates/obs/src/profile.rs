//! Where a shard's loop spends its time: a sampled, built-in profiler.
//!
//! Switched by one process-wide flag ([`set_enabled`]). While it is off, a shard loop
//! pays one relaxed load per iteration ([`Iteration::begin`]) and each stage boundary one
//! relaxed load too ([`enter`]). While it is on, every [`SAMPLE_EVERY`]th iteration of a
//! shard's loop is sampled: at each stage boundary the monotonic clock (the vDSO's
//! `clock_gettime`, via `std::time::Instant`) is read and the time since the last
//! boundary is charged to the stage that was running, so the stages of a sampled
//! iteration add up to its whole time by construction, and what no named stage claims
//! is `other`. Stages nest ([`enter`] returns a guard that gives the time back to the
//! stage it interrupted), and each stage's figure is its own (self) time. At the end of a
//! sampled iteration its figures are added to process-wide atomics (no allocation, no
//! lock); [`snapshot`] reads them.
//!
//! Sampling every Nth iteration is a systematic sample of the loop, so the sampled
//! time scaled by `iterations / sampled` estimates the loop's whole time. The caller may
//! give the thread's CPU clock at the start and end of a sampled iteration
//! ([`Iteration::end`]); the difference between wall time and CPU time is then shown as
//! `descheduled` (the thread was not running: another process had the core), and time
//! asleep (`sleep`) is kept apart too, so that the stages that are CPU can be set
//! against a CPU measurement.
//!
//! Instructions per stage would need hardware counters (`perf_event_open`); they are not
//! read here (see docs/bench.md, "Where the time goes").

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant as Clock;

/// By default, one sampled iteration of a shard's loop in this many ([`set_sample_every`]).
pub const SAMPLE_EVERY: u64 = 64;

/// A stage of a shard's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// Time in the loop no named stage claims (bookkeeping, the control channel).
    Other = 0,
    /// The device handing over a received frame (`Device::recv`).
    DeviceRx,
    /// Ethernet, ARP, IPv4/IPv6 input up to the transport's header.
    L2L3,
    /// TCP header checks and finding the segment's owner (the connection tables).
    Demux,
    /// TCP's input processing of a segment for a connection (state machine, ACK, RTT).
    TcpInput,
    /// Queueing received data on the socket and waking its readers.
    SocketQueue,
    /// The application's own code, including its socket reads.
    App,
    /// TCP building segments (after input, a write, or a timer).
    TcpOutput,
    /// Handing queued frames to the device (`Device::send_batch`).
    DeviceTx,
    /// Protocol and application timers.
    Timers,
    /// Busy polling with nothing to do.
    IdlePoll,
    /// Asleep on the device's doorbell (not CPU time).
    Sleep,
}

/// How many stages there are.
pub const STAGES: usize = 12;

impl Stage {
    /// Every stage, in the table's order.
    pub const ALL: [Stage; STAGES] = [
        Stage::DeviceRx,
        Stage::L2L3,
        Stage::Demux,
        Stage::TcpInput,
        Stage::SocketQueue,
        Stage::App,
        Stage::TcpOutput,
        Stage::DeviceTx,
        Stage::Timers,
        Stage::IdlePoll,
        Stage::Other,
        Stage::Sleep,
    ];

    /// The stage's name in tables, JSON and folded stacks.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Other => "other",
            Stage::DeviceRx => "device_rx",
            Stage::L2L3 => "l2_l3",
            Stage::Demux => "demux",
            Stage::TcpInput => "tcp_input",
            Stage::SocketQueue => "socket_queue",
            Stage::App => "application",
            Stage::TcpOutput => "tcp_output",
            Stage::DeviceTx => "device_tx",
            Stage::Timers => "timers",
            Stage::IdlePoll => "idle_poll",
            Stage::Sleep => "sleep",
        }
    }

    /// The stage's frame in a flame graph: the path's group, then the stage.
    fn group(self) -> &'static str {
        match self {
            Stage::DeviceRx | Stage::L2L3 | Stage::Demux | Stage::TcpInput | Stage::SocketQueue => {
                "receive"
            }
            Stage::TcpOutput | Stage::DeviceTx => "transmit",
            Stage::App => "application",
            Stage::Timers => "timers",
            Stage::IdlePoll | Stage::Sleep => "idle",
            Stage::Other => "other",
        }
    }

    /// Whether the thread runs in this stage (everything but sleep).
    pub fn is_cpu(self) -> bool {
        self != Stage::Sleep
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static EVERY: AtomicU64 = AtomicU64::new(SAMPLE_EVERY);
static NS: [AtomicU64; STAGES] = [const { AtomicU64::new(0) }; STAGES];
static ITERATIONS: AtomicU64 = AtomicU64::new(0);
static SAMPLED: AtomicU64 = AtomicU64::new(0);
static PACKETS: AtomicU64 = AtomicU64::new(0);
static WALL_NS: AtomicU64 = AtomicU64::new(0);
static CPU_NS: AtomicU64 = AtomicU64::new(0);
static CPU_SAMPLED: AtomicU64 = AtomicU64::new(0);
/// The profiler's own time in the sampled iterations: one clock read a stage boundary.
static PROBE_NS: AtomicU64 = AtomicU64::new(0);
/// What one clock read costs, in picoseconds (measured once; 0: not yet).
static CLOCK_PS: AtomicU64 = AtomicU64::new(0);

/// The cost of one stage boundary's clock read, measured once: 256 reads in a row.
fn clock_ps() -> u64 {
    let known = CLOCK_PS.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    let t0 = Clock::now();
    let mut last = t0;
    for _ in 0..256 {
        last = std::hint::black_box(Clock::now());
    }
    let ps = (last.duration_since(t0).as_nanos() as u64 * 1000 / 256).max(1);
    CLOCK_PS.store(ps, Ordering::Relaxed);
    ps
}

/// Switch sampling on or off for every shard of the process.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Sample one iteration in `n` (at least 1; 1: every iteration, for a check of the
/// accounting rather than an estimate).
pub fn set_sample_every(n: u64) {
    EVERY.store(n.max(1), Ordering::Relaxed);
}

/// One iteration in how many is sampled.
pub fn sample_every() -> u64 {
    EVERY.load(Ordering::Relaxed)
}

/// Whether sampling is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Forget what was sampled so far.
pub fn reset() {
    for a in &NS {
        a.store(0, Ordering::Relaxed);
    }
    for a in [
        &ITERATIONS,
        &SAMPLED,
        &PACKETS,
        &WALL_NS,
        &CPU_NS,
        &CPU_SAMPLED,
        &PROBE_NS,
    ] {
        a.store(0, Ordering::Relaxed);
    }
}

/// The sampling state of one thread.
struct Sampler {
    active: Cell<bool>,
    stage: Cell<Stage>,
    last: Cell<Option<Clock>>,
    ns: [Cell<u64>; STAGES],
    /// The profiler's own time (picoseconds): a clock read's cost an interval.
    probe_ps: Cell<u64>,
    /// What a clock read costs (picoseconds), for this sampled iteration.
    clock_ps: Cell<u64>,
}

thread_local! {
    static SAMPLER: Sampler = const {
        Sampler {
            active: Cell::new(false),
            stage: Cell::new(Stage::Other),
            last: Cell::new(None),
            ns: [const { Cell::new(0) }; STAGES],
            probe_ps: Cell::new(0),
            clock_ps: Cell::new(0),
        }
    };
}

impl Sampler {
    /// Charge the time since the last boundary to the running stage, less one clock
    /// read (the profiler's own, kept apart); `next` runs now.
    fn switch(&self, next: Stage) -> Stage {
        let now = Clock::now();
        if let Some(last) = self.last.get() {
            let ps = now.duration_since(last).as_nanos() as u64 * 1000;
            let probe = ps.min(self.clock_ps.get());
            self.probe_ps.set(self.probe_ps.get() + probe);
            let cell = &self.ns[self.stage.get() as usize];
            cell.set(cell.get() + (ps - probe) / 1000);
        }
        self.last.set(Some(now));
        self.stage.replace(next)
    }
}

/// A stage entered by [`enter`]: dropping it gives the time back to the stage it
/// interrupted.
#[must_use = "the stage ends when the guard is dropped"]
#[derive(Debug)]
pub struct Scope(Option<Stage>);

impl Drop for Scope {
    #[inline]
    fn drop(&mut self) {
        if let Some(prev) = self.0 {
            leave(prev);
        }
    }
}

/// Give the time back to `prev` (a [`Scope`]'s end in a sampled iteration).
#[inline(never)]
fn leave(prev: Stage) {
    let _ = SAMPLER.try_with(|s| {
        if s.active.get() {
            s.switch(prev);
        }
    });
}

/// Enter `stage` until the guard drops. Off: one relaxed load; on, outside a sampled
/// iteration: a thread-local test too.
#[inline]
pub fn enter(stage: Stage) -> Scope {
    if !ENABLED.load(Ordering::Relaxed) {
        return Scope(None);
    }
    enter_enabled(stage)
}

#[inline(never)]
fn enter_enabled(stage: Stage) -> Scope {
    Scope(
        SAMPLER
            .try_with(|s| s.active.get().then(|| s.switch(stage)))
            .ok()
            .flatten(),
    )
}

/// The per-thread iteration counter of a shard's loop and its sampling decision.
#[derive(Debug, Default)]
pub struct Iteration {
    /// Iterations since the last sampled one.
    since: u64,
    /// The CPU clock and packet count at the start of the sampled iteration.
    start: Option<(Option<u64>, u64)>,
}

impl Iteration {
    /// A counter for one loop.
    pub const fn new() -> Iteration {
        Iteration {
            since: 0,
            start: None,
        }
    }

    /// The start of an iteration: whether it is sampled. Off: one relaxed load.
    /// `cpu_ns` (the thread's CPU clock) and `packets` (frames received so far) are
    /// called only for a sampled iteration.
    #[inline]
    pub fn begin(
        &mut self,
        cpu_ns: impl FnOnce() -> Option<u64>,
        packets: impl FnOnce() -> u64,
    ) -> bool {
        if !ENABLED.load(Ordering::Relaxed) {
            return false;
        }
        self.begin_enabled(cpu_ns, packets)
    }

    #[inline(never)]
    fn begin_enabled(
        &mut self,
        cpu_ns: impl FnOnce() -> Option<u64>,
        packets: impl FnOnce() -> u64,
    ) -> bool {
        self.since += 1;
        if self.since < EVERY.load(Ordering::Relaxed) {
            return false;
        }
        ITERATIONS.fetch_add(self.since, Ordering::Relaxed);
        self.since = 0;
        self.start = Some((cpu_ns(), packets()));
        let clock = clock_ps();
        SAMPLER.with(|s| {
            s.clock_ps.set(clock);
            s.active.set(true);
            s.stage.set(Stage::Other);
            s.last.set(Some(Clock::now()));
        });
        true
    }

    /// The end of a sampled iteration (nothing if it was not): its figures are added to
    /// the process's.
    pub fn end(&mut self, cpu_ns: impl FnOnce() -> Option<u64>, packets: impl FnOnce() -> u64) {
        let Some((cpu0, packets0)) = self.start.take() else {
            return;
        };
        let mut wall = 0;
        SAMPLER.with(|s| {
            s.switch(Stage::Other);
            s.active.set(false);
            s.last.set(None);
            for (cell, total) in s.ns.iter().zip(&NS) {
                let ns = cell.replace(0);
                wall += ns;
                total.fetch_add(ns, Ordering::Relaxed);
            }
            let probe = s.probe_ps.replace(0) / 1000;
            wall += probe;
            PROBE_NS.fetch_add(probe, Ordering::Relaxed);
        });
        SAMPLED.fetch_add(1, Ordering::Relaxed);
        WALL_NS.fetch_add(wall, Ordering::Relaxed);
        PACKETS.fetch_add(packets().saturating_sub(packets0), Ordering::Relaxed);
        if let (Some(c0), Some(c1)) = (cpu0, cpu_ns()) {
            CPU_NS.fetch_add(c1.saturating_sub(c0), Ordering::Relaxed);
            CPU_SAMPLED.fetch_add(wall, Ordering::Relaxed);
        }
    }
}

/// What was sampled, summed over the process's shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Nanoseconds (wall clock) each stage took in the sampled iterations, by `Stage as usize`.
    pub ns: [u64; STAGES],
    /// Loop iterations while sampling was on (up to the last sampled one).
    pub iterations: u64,
    /// Iterations sampled.
    pub sampled: u64,
    /// Frames received in the sampled iterations.
    pub packets: u64,
    /// The thread CPU time of the sampled iterations whose CPU clock was read.
    pub cpu_ns: u64,
    /// The wall time of those same iterations.
    pub cpu_wall_ns: u64,
    /// The profiler's own time in the sampled iterations (a clock read a stage boundary,
    /// taken off the stages).
    pub probe_ns: u64,
}

/// What was sampled so far.
pub fn snapshot() -> Snapshot {
    let mut ns = [0; STAGES];
    for (n, a) in ns.iter_mut().zip(&NS) {
        *n = a.load(Ordering::Relaxed);
    }
    Snapshot {
        ns,
        iterations: ITERATIONS.load(Ordering::Relaxed),
        sampled: SAMPLED.load(Ordering::Relaxed),
        packets: PACKETS.load(Ordering::Relaxed),
        cpu_ns: CPU_NS.load(Ordering::Relaxed),
        cpu_wall_ns: CPU_SAMPLED.load(Ordering::Relaxed),
        probe_ns: PROBE_NS.load(Ordering::Relaxed),
    }
}

/// One row of a profile: a stage and its nanoseconds per unit (message or packet).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The stage's name, or `descheduled`.
    pub name: &'static str,
    /// Nanoseconds per unit.
    pub ns: f64,
    /// Whether the row is CPU time of the loop (not sleep, not descheduled).
    pub cpu: bool,
}

impl Snapshot {
    /// The stage's sampled nanoseconds.
    pub fn stage_ns(&self, stage: Stage) -> u64 {
        self.ns[stage as usize]
    }

    /// The sampled wall time, in nanoseconds (the profiler's own included).
    pub fn wall_ns(&self) -> u64 {
        self.ns.iter().sum::<u64>() + self.probe_ns
    }

    /// Rows per unit of `units` (messages, or packets) over the whole loop: each stage's
    /// sampled time scaled up by `iterations / sampled`, divided by `units`; then
    /// `profiler`, the profiler's own time (not scaled: it is spent in the sampled
    /// iterations only). When the CPU clock was read, the wall time the thread was not
    /// running is a `descheduled` row (negative: it is in the stages' wall figures but
    /// was not CPU). Empty if nothing was sampled.
    pub fn rows(&self, units: f64) -> Vec<Row> {
        if self.sampled == 0 || units <= 0.0 {
            return Vec::new();
        }
        let scale = self.iterations as f64 / self.sampled as f64 / units;
        let mut rows: Vec<Row> = Stage::ALL
            .iter()
            .map(|&s| Row {
                name: s.name(),
                ns: self.stage_ns(s) as f64 * scale,
                cpu: s.is_cpu(),
            })
            .collect();
        rows.push(Row {
            name: "profiler",
            ns: self.probe_ns as f64 / units,
            cpu: true,
        });
        if self.cpu_wall_ns > 0 {
            // The sampled iterations' wall time less sleep, against their CPU time.
            let awake = self.cpu_wall_ns as f64 * (1.0 - self.sleep_share());
            let off = (awake - self.cpu_ns as f64).max(0.0);
            rows.push(Row {
                name: "descheduled",
                ns: -off * scale,
                cpu: true,
            });
        }
        rows
    }

    /// The share of the sampled wall time spent asleep.
    fn sleep_share(&self) -> f64 {
        let wall = self.wall_ns();
        if wall == 0 {
            0.0
        } else {
            self.stage_ns(Stage::Sleep) as f64 / wall as f64
        }
    }

    /// The loop's CPU time per unit: the CPU rows summed (stages, less `descheduled`).
    pub fn cpu_per(&self, units: f64) -> f64 {
        self.rows(units)
            .iter()
            .filter(|r| r.cpu)
            .map(|r| r.ns)
            .sum()
    }

    /// A table: stage, nanoseconds per `unit`, share of the CPU total; instructions are
    /// "n/a" (no hardware counters read).
    pub fn render(&self, units: f64, unit: &str) -> String {
        let rows = self.rows(units);
        if rows.is_empty() {
            return "profile: nothing sampled (is it on, and is the loop running?)\n".into();
        }
        let total = self.cpu_per(units);
        let mut out = format!(
            "{:<14} {:>12} {:>7} {:>8}\n",
            "stage",
            format!("ns/{unit}"),
            "share",
            "instr"
        );
        for r in &rows {
            let share = if r.cpu && total > 0.0 {
                format!("{:.1}%", 100.0 * r.ns / total)
            } else {
                "-".into()
            };
            out += &format!("{:<14} {:>12.1} {:>7} {:>8}\n", r.name, r.ns, share, "n/a");
        }
        out += &format!(
            "{:<14} {:>12.1} {:>7} {:>8}\n",
            "total (CPU)", total, "100%", "n/a"
        );
        out += &format!(
            "({} of {} loop iterations sampled, {} packets in them)\n",
            self.sampled, self.iterations, self.packets
        );
        out
    }

    /// Folded stacks (Brendan Gregg's `flamegraph.pl` input): one line per stage,
    /// `loop;group;stage nanoseconds` (sampled wall time, sleep left out).
    pub fn folded(&self) -> String {
        let mut out = String::new();
        for s in Stage::ALL {
            let ns = self.stage_ns(s);
            if s.is_cpu() && ns > 0 {
                out += &format!("loop;{};{} {ns}\n", s.group(), s.name());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_iteration_charges_each_stage_and_nothing_when_off() {
        reset();
        set_enabled(false);
        let mut it = Iteration::new();
        assert!(!it.begin(|| None, || 0));
        {
            let _s = enter(Stage::App);
        }
        assert_eq!(snapshot(), Snapshot::default());
        set_enabled(true);
        let mut sampled = 0;
        for _ in 0..SAMPLE_EVERY * 2 {
            if it.begin(|| Some(0), || 0) {
                sampled += 1;
                let _rx = enter(Stage::DeviceRx);
                std::thread::sleep(std::time::Duration::from_millis(1));
                {
                    let _o = enter(Stage::TcpOutput);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            it.end(|| Some(1), || 3);
        }
        set_enabled(false);
        let snap = snapshot();
        assert_eq!(sampled, 2);
        assert_eq!((snap.sampled, snap.iterations, snap.packets), (2, 128, 6));
        assert!(snap.stage_ns(Stage::DeviceRx) >= 2_000_000);
        assert!(snap.stage_ns(Stage::TcpOutput) >= 2_000_000);
        assert_eq!(snap.stage_ns(Stage::App), 0);
        let rows = snap.rows(1.0);
        assert!(rows.iter().any(|r| r.name == "descheduled"));
        assert!(snap.folded().contains("loop;transmit;tcp_output "));
        reset();
    }
}
