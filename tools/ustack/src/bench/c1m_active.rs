//! `ustack bench c1m --active N` (issue #12 item 6, flat scaling): do idle connections
//! slow the busy ones down?
//!
//! N connections of their own (besides c1m's `--conns` idle ones) run pingpong rounds on
//! the same server twice, each time for `--duration`: first alone, before any idle
//! connection is opened ([`Active::alone`]), then in the hold phase, with every idle
//! connection established and registered on both sides ([`Active::beside_idle`]). A
//! round is one message on each of the N connections and all N echoes back (pingpong's
//! round, [`super::shm::round`]); its time is the latency sample. The report carries both
//! phases' messages/s and round latency percentiles, and their ratios (idle / alone),
//! against the target: at least 90% of the messages/s and at most 110% of the
//! p99 of N alone.
//!
//! The active connections are opened before the server's first memory reading, so its
//! growth is still the idle connections' alone. Between the phases they are taken out of
//! the client's poller (their tokens would otherwise reach the idle phases' loops), and
//! they are closed before the idle connections' exchange.

use std::time::{Duration, Instant as WallClock};

use serde_json::{Value, json};
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Events, Interest};

use super::measure::cpu_between;
use super::shm::{self, Rt};

/// The targets: the active connections beside the idle ones keep at least this
/// share of the messages/s they get alone ...
pub const MSGS_TARGET: f64 = 0.90;
/// ... and a p99 round latency of at most this many times theirs alone.
pub const P99_TARGET: f64 = 1.10;

/// One pingpong phase: its rounds' times and what they moved.
#[derive(Debug, Default)]
pub struct Phase {
    pub rounds: u64,
    /// Each round's time in nanoseconds, sorted.
    pub rtt_ns: Vec<u64>,
    pub elapsed: Duration,
    /// Whether every echo of every round was right.
    pub verified: bool,
    /// The client thread's CPU time over the phase.
    pub client_cpu: Duration,
    /// The server process's CPU time over the phase (set by the caller, who has it).
    pub server_cpu: Option<Duration>,
}

impl Phase {
    /// Messages echoed per second over the phase, for `n` connections.
    pub fn msgs_per_s(&self, n: usize) -> f64 {
        (self.rounds * n as u64) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p` quantile of the round times, in microseconds (0 without rounds).
    pub fn percentile_us(&self, p: f64) -> f64 {
        let n = self.rtt_ns.len();
        if n == 0 {
            return 0.0;
        }
        let i = ((n as f64 * p).ceil() as usize).clamp(1, n) - 1;
        self.rtt_ns[i] as f64 / 1e3
    }

    fn json(&self, n: usize) -> Value {
        let msgs = (self.rounds * n as u64).max(1) as f64;
        let per_msg = |d: Duration| d.as_secs_f64() * 1e9 / msgs;
        json!({
            "rounds": self.rounds,
            "round_trips": self.rounds * n as u64,
            "duration_s": self.elapsed.as_secs_f64(),
            "msgs_per_s": self.msgs_per_s(n),
            "round_latency_us": {
                "p50": self.percentile_us(0.5),
                "p99": self.percentile_us(0.99),
                "p999": self.percentile_us(0.999),
            },
            "verified": self.verified,
            // CPU time per message: less swayed than the rates by other work on a shared
            // machine (but both loops busy-poll 50 µs before sleeping, which it counts).
            "client_cpu_ns_per_msg": per_msg(self.client_cpu),
            "server_cpu_ns_per_msg": self.server_cpu.map(per_msg),
        })
    }
}

/// The active connections and what they measured so far.
pub struct Active {
    streams: Vec<TcpStream>,
    /// Their poller tokens are `base..base + N` (above every idle connection's index).
    base: u64,
    size: usize,
    /// Messages sent so far (each message's sequence number is unique in the run).
    sent: u64,
    /// What a round reads, kept from round to round.
    echoes: shm::Echoes,
    pub alone: Phase,
    pub beside_idle: Phase,
}

impl Active {
    /// Open `n` connections to the server's first port (tokens from `base`), run pingpong
    /// rounds on them for `time` with nothing else open, and take them out of the poller.
    /// `server_cpu` reads the server process's CPU time.
    pub fn alone(
        rt: &mut Rt,
        (n, base, size): (u32, u64, usize),
        time: Duration,
        server_cpu: &dyn Fn() -> Option<Duration>,
    ) -> anyhow::Result<Active> {
        let mut events = Events::with_capacity(1024);
        let streams = shm::connect(rt, &mut events, n, Interest::READABLE, base)?;
        let mut a = Active {
            streams,
            base,
            size,
            sent: 0,
            echoes: shm::Echoes::default(),
            alone: Phase::default(),
            beside_idle: Phase::default(),
        };
        a.alone = a.rounds(rt, &mut events, time, server_cpu)?;
        a.leave_poller(rt)?;
        Ok(a)
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Run pingpong rounds again for `time`, now beside the idle connections, and take
    /// them out of the poller again.
    pub fn beside_idle(
        &mut self,
        rt: &mut Rt,
        time: Duration,
        server_cpu: &dyn Fn() -> Option<Duration>,
    ) -> anyhow::Result<()> {
        for (i, s) in self.streams.iter().enumerate() {
            rt.register(s, self.base + i as u64, Interest::READABLE, Mode::Edge)?;
        }
        let mut events = Events::with_capacity(1024);
        self.beside_idle = self.rounds(rt, &mut events, time, server_cpu)?;
        self.leave_poller(rt)
    }

    /// Close them (the server closes its side on our FIN).
    pub fn close(self, rt: &mut Rt) -> anyhow::Result<()> {
        for s in self.streams {
            s.close(rt)?;
        }
        Ok(())
    }

    /// One warm-up round (not counted: it allocates the buffers the rest reuse), then
    /// rounds until `time` has passed.
    fn rounds(
        &mut self,
        rt: &mut Rt,
        events: &mut Events,
        time: Duration,
        server_cpu: &dyn Fn() -> Option<Duration>,
    ) -> anyhow::Result<Phase> {
        let mut p = Phase {
            verified: self.round(rt, events)?,
            ..Phase::default()
        };
        let server0 = server_cpu();
        let (t, cpu) = (WallClock::now(), shm::thread_cpu());
        while t.elapsed() < time {
            let t0 = WallClock::now();
            p.verified &= self.round(rt, events)?;
            p.rtt_ns.push(t0.elapsed().as_nanos() as u64);
            p.rounds += 1;
        }
        p.elapsed = t.elapsed();
        p.client_cpu = shm::thread_cpu().saturating_sub(cpu);
        p.server_cpu = cpu_between(server0, server_cpu());
        p.rtt_ns.sort_unstable();
        Ok(p)
    }

    fn round(&mut self, rt: &mut Rt, events: &mut Events) -> anyhow::Result<bool> {
        let seq0 = self.sent;
        self.sent += self.streams.len() as u64;
        shm::round(
            rt,
            (events, &mut self.echoes),
            (&self.streams, self.base),
            seq0,
            self.size,
            false,
        )
    }

    fn leave_poller(&self, rt: &mut Rt) -> anyhow::Result<()> {
        for s in &self.streams {
            rt.deregister(s)?;
        }
        Ok(())
    }

    /// What both phases measured, beside `idle` idle connections, with the ratios
    /// (beside the idle ones over alone) and whether the targets were met.
    pub fn json(&self, idle: u32) -> Value {
        let n = self.len();
        let msgs = self.beside_idle.msgs_per_s(n) / self.alone.msgs_per_s(n).max(1e-9);
        let p99 = self.beside_idle.percentile_us(0.99) / self.alone.percentile_us(0.99).max(1e-9);
        json!({
            "conns": n,
            "idle_conns": idle,
            "alone": self.alone.json(n),
            "beside_idle": self.beside_idle.json(n),
            "msgs_per_s_ratio": msgs,
            "p99_ratio": p99,
            "target": { "msgs_per_s_ratio_min": MSGS_TARGET, "p99_ratio_max": P99_TARGET },
            "target_met": msgs >= MSGS_TARGET && p99 <= P99_TARGET,
            "verified": self.alone.verified && self.beside_idle.verified,
        })
    }
}
