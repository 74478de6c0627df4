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
//!
//! The files: [`args`] (the command line and what it refuses), [`measure`] (a run, its
//! meter and progress bar), [`outcome`] (what a run measured), [`output`] (the table and
//! `--json`), [`pattern`] (the bytes sent and checked), [`sim`] (the sim harness), and one
//! file a scenario: [`udp_rr`], [`lockstep`] (pingpong and cps), [`stream`], [`c1m`] (its ustack
//! server process, [`c1m_server`]); over
//! links of their own, [`shm`] and [`kernel_link`]; Linux's side, [`linux`]; `--plot`,
//! [`plot`].

mod args;
mod c1m;
mod c1m_active;
mod c1m_server;
mod c1m_tokio;
mod contend;
mod kernel_link;
pub mod linux;
mod lockstep;
mod measure;
mod outcome;
mod output;
mod pattern;
mod plot;
mod profile;
mod shm;
mod sim;
mod stream;
mod syn_flood;
mod tokio_api;
mod udp_rr;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

pub use args::Args;
use args::{C1M_CONNS, MODED_SCENARIOS, SCENARIOS};
use measure::{LinuxMode, Run, Until, progress_bar};
use outcome::Outcome;
use output::Skipped;
use pattern::{fill_message, message_matches, stream_chunk, stream_matches, stream_next};
use stream::{kernel_stream_clients, linux_stream_with};

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

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let scenarios: Vec<&'static str> = match &args.scenario {
        Some(s) => vec![
            args::ALL_SCENARIOS
                .into_iter()
                .find(|n| n == s)
                .context("an unknown scenario")?,
        ],
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
    let mut skipped = Vec::new();
    let modes = args.linux_modes();
    // io_uring is looked for once: a kernel may not offer it, and then it is said, not run.
    let uring = ustack_baseline::uring_available();
    // `--contend`: the hogs run for the whole bench and die with `hogs` (on errors too).
    let hogs = args.contend.then(contend::Hogs::start).transpose()?;
    for scenario in scenarios {
        for server in &args.server {
            let linux = server == "linux";
            let moded = linux
                && args.api == "native"
                && MODED_SCENARIOS.contains(&scenario)
                && !kernel_link::LINKS.contains(&args.link.as_str());
            let runs: Vec<LinuxMode> = if moded {
                modes.clone()
            } else {
                vec![LinuxMode::Epoll]
            };
            // Without --duration the modes share the default time, so that the suite
            // takes about as long with all of them.
            let until = match args.bytes {
                Some(n) if scenario == "stream" => Until::Bytes(n),
                _ if args.duration.is_none() && runs.len() > 1 => {
                    Until::Time(duration / runs.len() as u32)
                }
                _ => Until::Time(duration),
            };
            for mode in runs {
                if moded
                    && mode == LinuxMode::IoUring
                    && let Err(reason) = &uring
                {
                    if !args.json {
                        eprintln!(
                            "ustack bench: {scenario} on linux in io_uring mode: not run: {reason}"
                        );
                    }
                    skipped.push(Skipped {
                        scenario,
                        mode: mode.name(),
                        reason: reason.clone(),
                    });
                    continue;
                }
                let label = if moded {
                    format!("{scenario} on linux ({})", mode.name())
                } else {
                    format!("{scenario} on {server}")
                };
                let mark = hogs.as_ref().map(contend::Hogs::mark);
                let mut outcome = run_one(
                    args,
                    scenario,
                    server,
                    mode,
                    until,
                    &label,
                    (duration, sim.clone(), patience, bars),
                )?;
                if let (Some(h), Some(m)) = (&hogs, mark) {
                    outcome.contend = h.report(m);
                }
                outcomes.push(outcome);
            }
        }
    }
    drop(hogs);
    output::print(&outcomes, &skipped, args)?;
    if !args.json
        && let Some(o) = outcomes.iter().find(|o| !o.contend.is_null())
    {
        println!("{}", contend::Hogs::describe(&o.contend));
    }
    profile::report(&outcomes, args)?;
    if let Some(path) = &args.plot {
        // One run per server and scenario: Linux's best mode.
        let best: Vec<&Outcome> = output::representatives(&outcomes);
        plot::draw(path, &best).with_context(|| format!("--plot {}", path.display()))?;
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

/// The run's settings shared by every server: the base duration, the sim link, the
/// patience over it, and whether progress bars are drawn.
type Common = (Duration, ustack_dev::sim::SimLinkConfig, Duration, bool);

/// One server's run of one scenario (Linux's in `mode`), its outcome with the machine's
/// CPU time over the measured phase and the mode it ran in.
fn run_one(
    args: &Args,
    scenario: &'static str,
    server: &str,
    mode: LinuxMode,
    until: Until,
    label: &str,
    (duration, sim, patience, bars): Common,
) -> anyhow::Result<Outcome> {
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
        eprintln!("ustack bench: {label} for {what} ...");
    }
    let run = Run {
        until,
        shards: usize::from(args.shards),
        conns: match scenario {
            "c1m" => args.conns.unwrap_or(C1M_CONNS),
            "stream" if kernel_link::LINKS.contains(&args.link.as_str()) => args.conns.unwrap_or(1),
            "stream" => 1,
            _ => args.conns.unwrap_or(10),
        },
        size: usize::from(args.msg_size),
        seed: args.seed,
        checksums: args.checksums,
        sim,
        patience,
        // c1m runs in phases, not against the clock: its line says what it does.
        bar: (bars && !c1m).then(|| progress_bar(label.to_owned(), until)),
        linux_mode: mode,
        machine: Default::default(),
        syn_flood: args.syn_flood,
        send: args.send.map(|n| n as usize),
        server_sysctl: args.server_sysctl.clone(),
        active: args.active,
        ipv6: args.ipv6,
        ustack_poll: args.ustack_poll.clone(),
        // cps pins by default: its client and server take turns, and a wake-up that puts
        // them on one CPU keeps them there for the run; Linux's busy mode is pinned too
        // (docs/bench.md, "cps placed as Linux's busy mode").
        pin: match args.pin.as_str() {
            "on" => true,
            "off" => false,
            _ => scenario == "cps",
        },
    };
    let shm = args.link == "shm";
    let link = args.link.as_str();
    let over_kernel_link = kernel_link::LINKS.contains(&link);
    let mut outcome = match (scenario, server) {
        ("pingpong", "ustack") if args.api == "tokio" => tokio_api::ustack(&run)?,
        ("pingpong", _) if args.api == "tokio" => tokio_api::linux(&run)?,
        ("stream", "ustack") if over_kernel_link => {
            kernel_link::ustack_stream(&run, link, args.no_offload)?
        }
        ("stream", _) if over_kernel_link => {
            kernel_link::linux_stream(&run, link, args.no_offload)?
        }
        (_, "ustack") if shm && !c1m => {
            profile::around(args.profile.then_some(args.profile_every), || {
                shm::scenario(scenario, &run, usize::from(args.shards))
            })?
        }
        ("udp-rr", "ustack") => udp_rr::ustack(&run)?,
        ("pingpong", "ustack") => lockstep::ustack(&run, false)?,
        ("cps", "ustack") => lockstep::ustack(&run, true)?,
        ("stream", "ustack") => stream::ustack(&run)?,
        ("c1m", "ustack") => c1m::ustack(&run, duration, args.api == "tokio")?,
        ("c1m", _) => c1m::linux(&run, duration, args.api == "tokio")?,
        ("udp-rr", _) => udp_rr::linux(&run)?,
        ("pingpong", _) => lockstep::linux(&run, false)?,
        ("cps", _) => lockstep::linux(&run, true)?,
        _ => stream::linux(&run)?,
    };
    if let Some(bar) = &run.bar {
        bar.set_position(bar.length().unwrap_or(0));
        bar.finish();
    }
    if let Some((machine, own)) = run.machine.busy() {
        outcome.machine_cpu = Some(machine);
        // The bench process, plus the server when it is a process of its own (Linux's
        // peers; ustack's c1m server): their CPU, whatever else the machine runs.
        let apart = (server == "linux" && args.api == "native") || c1m;
        outcome.process_cpu = match outcome.server_cpu {
            Some(s) if apart => Some(own + s),
            _ if apart => None,
            _ => Some(own),
        };
    }
    outcome.family = run.family();
    if outcome.mode.is_empty() {
        outcome.mode = match (server, link) {
            ("ustack", "sim") => "inline",
            ("ustack", _) if args.ustack_poll == "fixed" => "busy-poll",
            ("ustack", _) if args.ustack_poll == "sleep" => "sleep",
            ("ustack", _) => "adaptive",
            // c1m's Linux clients and servers sleep in epoll; stream's sink blocks in read.
            (_, _) if c1m => "epoll",
            _ => "blocking",
        };
    }
    Ok(outcome)
}
