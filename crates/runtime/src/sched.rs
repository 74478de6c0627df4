//! How long the calling thread has waited for a CPU: the second field of
//! `/proc/thread-self/schedstat` (`struct sched_info`'s `run_delay`, nanoseconds spent
//! runnable on a run queue but not running; Documentation/scheduler/sched-stats.rst). The
//! runtime's adaptive busy polling reads it before it sleeps: a loop that waited for its
//! CPU shares its core with other work, and spinning there takes the CPU from that work
//! and from the peer it waits for.

use core::time::Duration;

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};

/// The thread's run-queue wait, read through a file kept open (one `pread(2)` a read).
#[derive(Debug)]
pub struct RunDelay {
    file: Option<OwnedFd>,
}

impl RunDelay {
    /// For the calling thread (`/proc/thread-self/schedstat`); without the file (no
    /// procfs, a kernel without schedstats) every read is `None`.
    pub fn open() -> RunDelay {
        let file = rustix::fs::open(
            "/proc/thread-self/schedstat",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
        RunDelay { file }
    }

    /// The time the thread has spent waiting for a CPU since it started.
    pub fn read(&self) -> Option<Duration> {
        let file = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = rustix::io::pread(file, &mut buf, 0).ok()?;
        parse(&buf[..n])
    }
}

/// The share of time the calling thread waited for a CPU, sampled at most every
/// [`DELAY_SAMPLE_EVERY`]: what [`SpinPolicy::before_sleep`] is fed by a loop of its own
/// on the real clock (ustack-net's loop thread; the runtime keeps the same reckoning on
/// its clock).
#[derive(Debug, Default)]
pub struct DelaySampler {
    last: Option<(RunDelay, std::time::Instant, Duration)>,
}

impl DelaySampler {
    /// The share of the time since the last sample that this thread waited for a CPU
    /// (`None`: the first call, no schedstat file, or within [`DELAY_SAMPLE_EVERY`] of
    /// the last sample).
    pub fn sample(&mut self) -> Option<f64> {
        let now = std::time::Instant::now();
        let Some((file, at, delay)) = &mut self.last else {
            let file = RunDelay::open();
            if let Some(d) = file.read() {
                self.last = Some((file, now, d));
            }
            return None;
        };
        let wall = now - *at;
        if wall < DELAY_SAMPLE_EVERY {
            return None;
        }
        let d = file.read()?;
        let waited = d.saturating_sub(*delay);
        (*at, *delay) = (now, d);
        Some(waited.as_secs_f64() / wall.as_secs_f64().max(1e-9))
    }
}

/// The second of the three numbers of a schedstat line.
fn parse(text: &[u8]) -> Option<Duration> {
    let text = core::str::from_utf8(text).ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// With the adaptive spin window shrunk to zero, one idle phase in this many spins the
/// whole `busy_poll` anyway (a probe): if work comes within it, the window is whole again
/// (the runtime's module docs, *Adaptive busy polling*).
pub const PROBE_EVERY: u32 = 16;

/// The share of time waiting for a CPU (moving average) above which the loop's core is
/// taken to be shared: the window goes to zero before each sleep.
const CONTENDED: f64 = 1.0 / 8.0;

/// How often the loop reads its run-queue wait at most (before a sleep): a read is a
/// `pread(2)` of procfs, a microsecond or two, and a loop that sleeps every round trip
/// would pay it on each; in between the average stands.
pub const DELAY_SAMPLE_EVERY: Duration = Duration::from_micros(250);

/// The weight of a new reading in the moving average: each covers at least
/// [`DELAY_SAMPLE_EVERY`], a dozen round trips or more, so the average follows the last
/// half millisecond or so, and a core taken by other work stops the spins within that.
const SAMPLE_WEIGHT: f64 = 0.5;

/// The share above which the core is shared *some* of the time: no spin (after a hit, a
/// quick wake-up or as a probe) lasts longer than twice the longest recent wait a spin
/// needed to find work ([`SpinPolicy::cap`]), so that a spin that misses ends soon rather
/// than after the whole `busy_poll`.
const SHARED: f64 = 1.0 / 32.0;

/// The adaptive busy-poll window's decisions (the runtime's module docs, *Adaptive busy
/// polling*), apart from the loop that carries them out: fed what the loop saw (a spin
/// that found work and how soon, an empty spin, the share of time its thread waited for a
/// CPU before a sleep, a wake-up and how soon), it says how long the next idle phase
/// spins. No clock and no system call of its own, so it is tested on made-up sequences.
#[derive(Debug, Clone)]
pub struct SpinPolicy {
    busy_poll: Duration,
    adaptive: bool,
    /// The current spin window: `busy_poll`, or less while spins find nothing.
    spin: Duration,
    /// Idle phases with a zero window, for the probes ([`PROBE_EVERY`]).
    idle_phases: u32,
    /// The last sleep found the thread waiting for its CPU: no probes until one does not.
    contended_last: bool,
    /// Moving average of the share of time the thread waited for its CPU (a reading's
    /// weight: a half).
    delay_share: f64,
    /// The longest wait a spin needed to find work, recently (decays by an eighth a hit).
    hit_wait: Duration,
}

impl SpinPolicy {
    /// A loop that busy-polls for up to `busy_poll`, adapting when `adaptive` (else
    /// always the whole `busy_poll`).
    pub fn new(busy_poll: Duration, adaptive: bool) -> SpinPolicy {
        SpinPolicy {
            busy_poll,
            adaptive,
            spin: busy_poll,
            idle_phases: 0,
            contended_last: false,
            delay_share: 0.0,
            // Until a spin has found work, the cap (on a shared core) is a sixteenth.
            hit_wait: busy_poll / 32,
        }
    }

    /// The longest a spin may last: `busy_poll`, or on a core shared some of the time
    /// (the thread waited for its CPU more than a thirty-second of the time, on average)
    /// twice the longest recent wait a spin needed to find work, at least a sixteenth of
    /// `busy_poll`.
    pub fn cap(&self) -> Duration {
        if self.delay_share > SHARED {
            (self.hit_wait * 2).clamp(self.busy_poll / 16, self.busy_poll)
        } else {
            self.busy_poll
        }
    }

    /// The spin window now (`busy_poll` when not adaptive).
    pub fn window(&self) -> Duration {
        self.spin
    }

    /// The share of time the thread waited for its CPU, on average over sleeps.
    pub fn delay_share(&self) -> f64 {
        self.delay_share
    }

    /// How long this idle phase spins: the window, or with the window at zero the whole
    /// `busy_poll` one phase in [`PROBE_EVERY`] (a probe; none while the last sleep found
    /// the thread waiting for its CPU).
    pub fn idle_window(&mut self) -> Duration {
        if !self.adaptive {
            return self.busy_poll;
        }
        if !self.spin.is_zero() {
            return self.spin;
        }
        self.idle_phases = self.idle_phases.wrapping_add(1);
        if !self.contended_last && self.idle_phases.is_multiple_of(PROBE_EVERY) {
            self.cap()
        } else {
            Duration::ZERO
        }
    }

    /// A spin found work `waited` after the idle phase began. Work keeps arriving: the
    /// whole window again, [`cap`](Self::cap) (on a shared core a spin is CPU the peer may
    /// need, and one that misses should not last the whole `busy_poll`). The longest
    /// recent wait decays by an eighth a hit.
    pub fn hit(&mut self, waited: Duration) {
        self.hit_wait = waited.max(self.hit_wait - self.hit_wait / 8);
        self.set(self.cap());
    }

    /// A spin of `window` ended empty: half the window next time, none below a
    /// sixteenth of `busy_poll` (an empty probe leaves it at none).
    pub fn empty(&mut self, window: Duration) {
        let half = if self.spin.is_zero() {
            Duration::ZERO
        } else {
            window / 2
        };
        self.set(if half < self.busy_poll / 16 {
            Duration::ZERO
        } else {
            half
        });
    }

    /// Before a sleep: the share of the time since the last sample that the thread
    /// waited for its CPU (`None`: no new sample, the average stands). Whether the core is
    /// contended (the average over an eighth): then the window goes to zero and no probe
    /// runs until it is not.
    pub fn before_sleep(&mut self, sample: Option<f64>) -> bool {
        if let Some(x) = sample {
            self.delay_share += (x.clamp(0.0, 1.0) - self.delay_share) * SAMPLE_WEIGHT;
        }
        let contended = self.delay_share > CONTENDED;
        self.contended_last = contended;
        if contended {
            self.set(Duration::ZERO);
        }
        contended
    }

    /// A sleep the device ended `waited` after the idle phase began (not contended: see
    /// [`before_sleep`](Self::before_sleep)). Within `busy_poll` a spin would have caught
    /// it: twice the wait (at least twice the window, a sixteenth of `busy_poll`, at most
    /// [`cap`](Self::cap)), or the window would stay below the gap it has to span.
    pub fn woken(&mut self, waited: Duration) {
        if !self.contended_last && waited < self.busy_poll {
            let grown = (self.spin * 2).max(waited * 2).max(self.busy_poll / 16);
            self.set(grown.min(self.cap()));
        }
    }

    fn set(&mut self, window: Duration) {
        if self.adaptive {
            self.spin = window;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_micros(50);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn empty_spins_halve_the_window_to_zero_and_probes_come_back() {
        let mut p = SpinPolicy::new(POLL, true);
        let mut windows = Vec::new();
        for _ in 0..5 {
            let w = p.idle_window();
            windows.push(w.as_micros());
            p.empty(w);
            assert!(!p.before_sleep(Some(0.0)));
        }
        // 50, 25, 12, 6, 3 (3.125 halved is below a sixteenth: zero).
        assert_eq!(windows, [50, 25, 12, 6, 3]);
        assert_eq!(p.window(), Duration::ZERO);
        // Then one idle phase in PROBE_EVERY spins the whole window.
        let probes = (0..PROBE_EVERY * 3)
            .filter(|_| {
                let w = p.idle_window();
                p.empty(w);
                !w.is_zero()
            })
            .count();
        assert_eq!(probes, 3);
        assert_eq!(p.window(), Duration::ZERO, "an empty probe leaves none");
    }

    #[test]
    fn a_quiet_core_spins_the_whole_window_after_a_hit() {
        let mut p = SpinPolicy::new(POLL, true);
        for _ in 0..100 {
            assert!(!p.before_sleep(Some(0.001)));
            p.hit(us(2));
            assert_eq!(p.idle_window(), POLL);
        }
    }

    #[test]
    fn a_shared_core_spins_twice_the_recent_wait_after_a_hit() {
        let mut p = SpinPolicy::new(POLL, true);
        // The thread waited for its CPU a tenth of the time: below "contended" (an
        // eighth), above "shared".
        for _ in 0..40 {
            assert!(!p.before_sleep(Some(0.1)));
        }
        // No hit yet: the cap is a sixteenth of the window.
        assert_eq!(p.cap(), POLL / 16);
        p.hit(us(5));
        assert_eq!(
            p.idle_window(),
            us(10),
            "twice the wait, not the whole 50 µs"
        );
        // A longer wait raises it at once; a shorter one lets it decay by an eighth.
        p.hit(us(12));
        assert_eq!(p.idle_window(), us(24));
        p.hit(us(1));
        assert_eq!(p.idle_window(), us(21));
        // Never below a sixteenth of busy_poll, never above it.
        for _ in 0..100 {
            p.hit(Duration::ZERO);
        }
        assert_eq!(p.idle_window(), POLL / 16);
        p.hit(us(400));
        assert_eq!(p.idle_window(), POLL);
        // Probes and quick wake-ups are capped too.
        for _ in 0..100 {
            p.hit(us(4));
        }
        assert_eq!(p.cap(), us(8));
        for _ in 0..5 {
            let w = p.idle_window();
            p.empty(w);
        }
        assert_eq!(p.window(), Duration::ZERO);
        let probe = (0..PROBE_EVERY).map(|_| p.idle_window()).max();
        assert_eq!(
            probe,
            Some(us(8)),
            "a probe spins the cap, not the whole window"
        );
        p.woken(us(30));
        assert_eq!(p.window(), us(8), "a quick wake-up grows it to the cap");
    }

    #[test]
    fn a_contended_core_sleeps_at_once_without_probes_until_the_wait_falls() {
        let mut p = SpinPolicy::new(POLL, true);
        // The thread waited for its CPU a fifth of the time: the average (a reading's
        // weight a half) passes an eighth at the second reading.
        assert!(!p.before_sleep(Some(0.2)));
        assert!(p.before_sleep(Some(0.2)));
        assert_eq!(p.window(), Duration::ZERO);
        // A quick wake-up does not grow it back, and no probe runs.
        p.woken(us(3));
        for _ in 0..PROBE_EVERY * 2 {
            assert_eq!(p.idle_window(), Duration::ZERO);
            assert!(p.before_sleep(Some(0.5)));
        }
        // The wait falls: once the average is below an eighth, a quick wake-up grows
        // the window again (twice the wait, at least a sixteenth).
        let mut sleeps = 0;
        while p.before_sleep(Some(0.0)) {
            sleeps += 1;
            assert!(sleeps < 100);
        }
        // Still shared some of the time: no spin has found work, so at most a sixteenth.
        p.woken(us(4));
        assert_eq!(p.idle_window(), POLL / 16);
        // Quiet (below a thirty-second): twice the wait.
        while p.delay_share() > 1.0 / 32.0 {
            assert!(!p.before_sleep(Some(0.0)));
        }
        p.woken(us(4));
        assert_eq!(p.idle_window(), us(8));
        // A wake-up later than busy_poll does not.
        let mut q = SpinPolicy::new(POLL, true);
        q.empty(POLL);
        q.empty(us(25));
        q.empty(us(12));
        q.empty(us(6));
        q.empty(us(3));
        assert_eq!(q.window(), Duration::ZERO);
        q.woken(us(80));
        assert_eq!(q.window(), Duration::ZERO);
    }

    #[test]
    fn without_a_new_sample_the_average_and_its_decision_stand() {
        let mut p = SpinPolicy::new(POLL, true);
        assert!(!p.before_sleep(None), "no sample ever: not contended");
        for _ in 0..3 {
            p.before_sleep(Some(0.5));
        }
        let share = p.delay_share();
        for _ in 0..10 {
            assert!(p.before_sleep(None), "still contended between samples");
            assert_eq!(p.idle_window(), Duration::ZERO);
        }
        assert_eq!(p.delay_share(), share);
    }

    #[test]
    fn a_fixed_window_never_adapts() {
        let mut p = SpinPolicy::new(POLL, false);
        p.empty(POLL);
        for _ in 0..4 {
            p.before_sleep(Some(1.0));
        }
        p.hit(us(1));
        p.woken(us(1));
        assert_eq!(p.idle_window(), POLL);
        assert_eq!(p.window(), POLL);
    }

    #[test]
    fn the_sampler_reads_at_most_every_sample_period_and_gives_a_share() {
        let mut d = DelaySampler::default();
        assert_eq!(d.sample(), None, "the first call only starts the reckoning");
        assert_eq!(
            d.sample(),
            None,
            "within DELAY_SAMPLE_EVERY: no new reading"
        );
        std::thread::sleep(DELAY_SAMPLE_EVERY * 2);
        let share = d.sample().expect("a reading after the period");
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert_eq!(d.sample(), None);
    }

    #[test]
    fn parses_the_run_delay_and_reads_this_thread() {
        assert_eq!(
            parse(b"123 456789 3\n"),
            Some(Duration::from_nanos(456_789))
        );
        assert_eq!(parse(b"123"), None);
        assert_eq!(parse(b"1 x 2"), None);
        // This thread's: present on Linux with procfs, and never going back.
        let d = RunDelay::open();
        let (a, b) = (d.read().unwrap(), d.read().unwrap());
        assert!(b >= a);
    }
}
