//! `ustack bench --contend`: shared cores. One CPU hog per core, each an ordinary
//! CPU-bound process at nice 10 pinned to its core (`ustack bench-peer hog`), runs for the
//! whole bench, beside both stacks, as on a shared host where the server is not alone on
//! its cores. The hogs are killed when the bench ends, on an error too ([`Hogs`] kills
//! them when dropped; each also dies with the bench, `PR_SET_PDEATHSIG`).
//!
//! Every outcome then carries `contend` in `--json`: the hogs' pids, their nice value (as
//! set, `nice`, and as the kernel reports it, `nice_seen`), and the share of the machine's
//! CPU time they got over that run (their CPU time over the run's wall time times the
//! cores), so a run that reports contention shows it had some.

use std::time::{Duration, Instant as WallClock};

use anyhow::Context;
use serde_json::{Value, json};

use super::linux::Peer;

/// The hogs' nice value: below the bench's (0), as a batch job beside a server.
pub const NICE: i32 = 10;

/// The running hogs, one per core; dropping this kills them.
#[derive(Debug)]
pub struct Hogs {
    peers: Vec<Peer>,
}

impl Hogs {
    /// One hog per core this process may run on, each pinned to its core.
    pub fn start() -> anyhow::Result<Hogs> {
        let cores = ustack_baseline::current_affinity().context("the bench's CPUs")?;
        let mut peers = Vec::new();
        for cpu in (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| cores.is_set(c)) {
            let (peer, _) = Peer::start("hog", &["--cpu".to_owned(), cpu.to_string()])
                .with_context(|| format!("starting the CPU hog on CPU {cpu}"))?;
            peers.push(peer);
        }
        Ok(Hogs { peers })
    }

    /// The hogs' CPU time so far, summed (/proc/PID/stat).
    fn cpu(&self) -> Duration {
        self.peers.iter().filter_map(Peer::cpu).sum()
    }

    /// A mark to measure one run's share from.
    pub fn mark(&self) -> (WallClock, Duration) {
        (WallClock::now(), self.cpu())
    }

    /// What `--json` says of the contention over the run since `mark`.
    pub fn report(&self, (start, cpu0): (WallClock, Duration)) -> Value {
        let wall = start.elapsed().as_secs_f64() * self.peers.len().max(1) as f64;
        let share = (self.cpu() - cpu0).as_secs_f64() / wall.max(1e-9);
        json!({
            "hogs": self.peers.len(),
            "nice": NICE,
            "pids": self.peers.iter().map(Peer::pid).collect::<Vec<_>>(),
            // As the kernel has them: each hog's nice value (/proc/PID/stat, field 19).
            "nice_seen": self.peers.iter().map(|p| nice_of(p.pid())).collect::<Vec<_>>(),
            "hog_cpu_share": share,
        })
    }

    /// The table's line about the contention.
    pub fn describe(report: &Value) -> String {
        format!(
            "contention (--contend): {} CPU hogs at nice {}, one pinned to each core (pids \
             {}); they got {:.0}% of the machine's CPU over the run",
            report["hogs"],
            report["nice"],
            report["pids"]
                .as_array()
                .map(|p| p.iter().map(Value::to_string).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
            report["hog_cpu_share"].as_f64().unwrap_or(0.0) * 100.0
        )
    }
}

/// A process's nice value from /proc/PID/stat (field 19, counted after the command name,
/// which may hold spaces); `None` if it is gone.
fn nice_of(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(16)?
        .parse()
        .ok()
}

/// `ustack bench-peer hog --cpu N`: pinned to CPU N at nice [`NICE`], dies with its parent,
/// says `ready` and spins until killed.
pub fn hog(cpu: Option<usize>) -> anyhow::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .context("PR_SET_PDEATHSIG")?;
    rustix::process::setpriority_process(None, NICE).context("nice")?;
    if let Some(cpu) = cpu {
        ustack_baseline::pin_current_thread(cpu).context("pinning the hog")?;
    }
    println!("ready");
    let mut x = 0u64;
    loop {
        x = core::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}
