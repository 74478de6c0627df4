//! c1m's ustack server in a process of its own (`ustack bench-peer ustack-c1m`), so that
//! its RSS and PSS are its own, as the Linux server's are.
//!
//! It creates the shm link and offers it (`ready 0 NAME`: the bench attaches with
//! `ShmPeer::connect(NAME)`), then runs the echo server of `ustack_apps` on listeners for
//! `--conns` connections ([`super::c1m::server_addrs`]) and says `listening`. Between
//! rounds of its loop it answers the bench on stdin, one line each:
//!
//! - `held` -> `held N`: the connections the echo server holds;
//! - `memory` -> `memory JSON`: its accounting, `{"total": bytes, "kinds": {kind: {"count",
//!   "bytes"}}}`: the stack's kinds ([`ustack_stack::Stack::memory`]), the runtime's
//!   (`poller`, `app_timers`) and the echo server's (`app_conns`);
//! - `report` -> `report JSON`: `{"counters": the stack's MIB, "link": the shm port's
//!   counters}`;
//! - `pause` -> `pause`: the echo server stops reading (and accepting) until `resume` ->
//!   `resume`; the stack goes on receiving into its buffers meanwhile (`--send`'s surge
//!   into a server that does not read). Readiness gathered meanwhile is reported when it
//!   resumes.
//!
//! It stops when its stdin closes.

use std::io::BufRead;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_apps::{Protocol, Server};
use ustack_dev::shm::ShmLink;
use ustack_stack::inspect::MemoryUsage;

use super::c1m::{link_config, server_addrs};
use super::shm::{self, CLIENT_IP, Rt, SERVER_IP};

/// How long the server waits for the bench to attach to its link.
const ATTACH: Duration = Duration::from_secs(10);
/// The longest the loop sleeps without looking at stdin: a command's answer takes at most
/// this plus a round.
const COMMAND_CHECK: Option<Duration> = Some(Duration::from_millis(1));

/// Serve c1m's `conns` connections until stdin closes (see the module's doc), with the
/// stack's tunables `sysctls` (`NAME=VALUE` each) set.
/// `tokio`: the server is c1m's tokio server instead ([`super::c1m_tokio::serve_ustack`]),
/// on the same link and stack.
pub fn serve(
    conns: u32,
    seed: u64,
    checksums: bool,
    sysctls: &[String],
    tokio: bool,
) -> anyhow::Result<()> {
    let (mut ports, peer) = ShmLink::create(&link_config()).context("creating the shm link")?;
    let offer = peer.offer().context("offering the shm link")?;
    println!("ready 0 {}", offer.name());
    offer
        .hand_over(ATTACH)
        .context("waiting for the bench to attach")?;
    let port = ports.pop().context("the link's queue")?;
    // Its gateway is the client: replies to addresses off the link (the spoofed sources of
    // `--syn-flood`) leave over it, as a server's go to its router.
    let mut builder = shm::builder(SERVER_IP, 1, seed)
        .gateway(CLIENT_IP)
        .checksum_offload(!checksums);
    for s in sysctls {
        let (name, value) = s
            .split_once('=')
            .and_then(|(n, v)| Some((n, v.parse::<u64>().ok()?)))
            .with_context(|| format!("--sysctl {s:?}: expected NAME=VALUE"))?;
        builder = builder.sysctl(name, value);
    }
    if tokio {
        return super::c1m_tokio::serve_ustack(builder, port, &server_addrs(conns));
    }
    let mut rt = builder.build(port).context("building the server runtime")?;
    let mut server = Server::bind_all(&mut rt, Protocol::Echo, &server_addrs(conns), None)?;
    let commands = stdin_lines()?;
    println!("listening");
    let mut paused = false;
    loop {
        if paused {
            rt.run_once(COMMAND_CHECK)?;
        } else {
            server.step(&mut rt, COMMAND_CHECK)?;
        }
        loop {
            match commands.try_recv() {
                Ok(cmd) if matches!(cmd.trim(), "pause" | "resume") => {
                    paused = cmd.trim() == "pause";
                    println!("{}", cmd.trim());
                }
                Ok(cmd) => println!("{}", answer(cmd.trim(), &rt, &server)?),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
            }
        }
    }
}

/// The lines of stdin, read on a thread of their own; the channel closes with stdin.
fn stdin_lines() -> anyhow::Result<mpsc::Receiver<String>> {
    let (tx, rx) = mpsc::channel();
    read_stdin(move |line| tx.send(line).is_ok())?;
    Ok(rx)
}

/// Give each line of stdin to `send`, on a thread of its own, until stdin closes or
/// `send` says no (returns false).
pub(super) fn read_stdin(
    mut send: impl FnMut(String) -> bool + Send + 'static,
) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("commands".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                if !send(line) {
                    break;
                }
            }
        })
        .context("starting the command reader")?;
    Ok(())
}

/// The answer line to one command.
fn answer(cmd: &str, rt: &Rt, server: &Server) -> anyhow::Result<String> {
    Ok(match cmd {
        "held" => format!("held {}", server.connections()),
        "memory" => format!("memory {}", memory(rt, server)),
        "report" => format!(
            "report {}",
            json!({
                "counters": rt.stack().mib().to_json(),
                "link": shm::shm_stats(rt.device()),
            })
        ),
        other => bail!("unknown command {other:?} (held, memory, report, pause, resume)"),
    })
}

/// The process's accounting: the runtime's kinds (the stack's among them) and the echo
/// server's.
fn memory(rt: &Rt, server: &Server) -> Value {
    let mut m = rt.memory();
    m.kinds.push(server.memory());
    memory_json(&m)
}

/// Accounting as the `memory` line gives it: `{"total": bytes, "kinds": {kind: {"count",
/// "bytes"}}}`.
pub(super) fn memory_json(m: &MemoryUsage) -> Value {
    let kinds: serde_json::Map<String, Value> = m
        .kinds
        .iter()
        .map(|k| {
            (
                k.name.to_owned(),
                json!({ "count": k.count, "bytes": k.bytes }),
            )
        })
        .collect();
    json!({ "total": m.total(), "kinds": kinds })
}
