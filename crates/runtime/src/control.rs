//! The control socket (feature `control`): how `ustack stat`, `ss`, `sysctl` and
//! `capture` reach a running instance, `ustack serve` or a program under
//! libustack_preload.so (`USTACK_CONTROL`). The server's end; the tool has the client's.
//!
//! A Unix stream socket, by default `$XDG_RUNTIME_DIR/ustack/serve.sock`, or
//! `/tmp/ustack-<uid>/serve.sock` (a directory only its owner may enter, as tmux does).
//! Each connection carries one request, a line of JSON such as `{"cmd":"stat"}`, and its
//! answer: a line of JSON (`{"error": "..."}` on failure), or for `capture` a pcap stream.
//! The server reaches the shards through [`Inspect`] ([`ShardedRuntime::on_each_shard`],
//! or ustack-net's `Net::on_each_shard`: a job between two rounds of each shard's loop),
//! so inspecting never locks the packet path.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_dev::capture::TapSwitch;
use ustack_obs::pcap::{DEFAULT_SNAPLEN, LinkType, PcapWriter};
use ustack_obs::{Mib, profile};
use ustack_stack::inspect::{MemoryUsage, Protocol, SocketView};
use ustack_stack::{Instant, Stack, Sysctl};

use crate::multi::ShardedRuntime;

/// How long a request waits for every shard to answer.
pub const SHARD_TIMEOUT: Duration = Duration::from_secs(5);

/// What the control socket needs of a running stack: its shards' counters, memory and
/// stacks, each read on the shard's own thread between two rounds.
pub trait Inspect: Sync {
    /// The number of shards.
    fn shards(&self) -> usize;
    /// The counters of every shard, summed.
    fn mib(&self, timeout: Duration) -> std::io::Result<Mib>;
    /// Every shard's heap memory by kind, in shard order.
    fn memory(&self, timeout: Duration) -> std::io::Result<Vec<MemoryUsage>>;
    /// `f` run on every shard with its index, stack and time; the results in shard order.
    fn on_each_stack<T, F>(&self, f: F, timeout: Duration) -> std::io::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &mut Stack, Instant) -> T + Send + Sync + 'static;
}

impl<A> Inspect for ShardedRuntime<A>
where
    ShardedRuntime<A>: Sync,
{
    fn shards(&self) -> usize {
        ShardedRuntime::shards(self)
    }
    fn mib(&self, timeout: Duration) -> std::io::Result<Mib> {
        ShardedRuntime::mib(self, timeout)
    }
    fn memory(&self, timeout: Duration) -> std::io::Result<Vec<MemoryUsage>> {
        ShardedRuntime::memory(self, timeout)
    }
    fn on_each_stack<T, F>(&self, f: F, timeout: Duration) -> std::io::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &mut Stack, Instant) -> T + Send + Sync + 'static,
    {
        ShardedRuntime::on_each_shard(self, f, timeout)
    }
}
/// The most frames a capture queues between two drains (every 10 ms).
pub const TAP_QUEUE: usize = 65_536;

/// The server process's resident memory (`/proc/self/statm`'s resident pages): all of it,
/// the stack's and the application's buffers, code and libraries; `None` if unreadable.
fn process_rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// The control socket of a second instance when the default one is taken:
/// `serve-<pid>.sock` beside it.
pub fn path_for_pid(default: &Path, pid: u32) -> PathBuf {
    default.with_file_name(format!("serve-{pid}.sock"))
}

/// The control socket's path: `--control`, else `$USTACK_CONTROL`, else the default.
pub fn path(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("USTACK_CONTROL") {
        return PathBuf::from(p);
    }
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("ustack"),
        None => PathBuf::from(format!(
            "/tmp/ustack-{}",
            rustix::process::getuid().as_raw()
        )),
    };
    dir.join("serve.sock")
}

/// Make the socket's directory (mode 0700) if it is missing; refuse one that belongs to
/// someone else or that others may write to.
fn prepare_dir(path: &Path) -> anyhow::Result<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    let uid = rustix::process::getuid().as_raw();
    let mode = meta.permissions().mode();
    if meta.uid() != uid && mode & 0o1000 == 0 && mode & 0o022 != 0 {
        bail!(
            "{}: owned by uid {} and writable by others; choose another --control path",
            dir.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// The server's end: the listening socket, removed when dropped.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ControlServer {
    /// Listen on `path`. A socket file nobody answers on is a leftover and is replaced; one
    /// that answers belongs to a running instance, and that is an error.
    pub fn bind(path: &Path) -> anyhow::Result<ControlServer> {
        prepare_dir(path)?;
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!(
                    "{}: another ustack serve is running there (pass --control PATH)",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing the stale socket {}", path.display()))?;
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding the control socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        Ok(ControlServer {
            listener,
            path: path.to_owned(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answer requests until `until` (`None`: forever), each connection on a thread of its
    /// own so that a long capture does not hold the others up.
    /// Also ends (within 100 ms) once `stop` is set (SIGTERM, SIGINT).
    /// Without a `tap` (a stack whose device is not wrapped in one), `capture` answers an
    /// error.
    pub fn serve_until<R: Inspect>(
        &self,
        rt: &R,
        tap: Option<&Arc<TapSwitch>>,
        link: LinkType,
        until: Option<WallClock>,
        stop: &AtomicBool,
    ) {
        std::thread::scope(|scope| {
            loop {
                if stop.load(Ordering::Relaxed) {
                    if let Some(t) = tap {
                        t.set(false);
                    }
                    break;
                }
                let wait = match until {
                    Some(u) => {
                        let left = u.saturating_duration_since(WallClock::now());
                        if left.is_zero() {
                            if let Some(t) = tap {
                                t.set(false); // ends a capture in progress
                            }
                            break;
                        }
                        left.min(Duration::from_millis(100))
                    }
                    None => Duration::from_millis(100),
                };
                let mut fds = [rustix::event::PollFd::new(
                    &self.listener,
                    rustix::event::PollFlags::IN,
                )];
                let ts = rustix::event::Timespec {
                    tv_sec: wait.as_secs() as i64,
                    tv_nsec: i64::from(wait.subsec_nanos()),
                };
                if !matches!(rustix::event::poll(&mut fds, Some(&ts)), Ok(n) if n > 0) {
                    continue;
                }
                while let Ok((stream, _)) = self.listener.accept() {
                    scope.spawn(move || {
                        let _ = stream.set_nonblocking(false);
                        if let Err(e) = handle(stream, rt, tap, link, until) {
                            eprintln!("ustack: control request failed: {e:#}");
                        }
                    });
                }
            }
        });
    }
}

/// One connection: read the request line, answer it.
fn handle<R: Inspect>(
    stream: UnixStream,
    rt: &R,
    tap: Option<&Arc<TapSwitch>>,
    link: LinkType,
    until: Option<WallClock>,
) -> anyhow::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .take(64 * 1024)
        .read_line(&mut line)?;
    let mut out = stream;
    let req: Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(e) => return reply(&mut out, &json!({ "error": format!("bad request: {e}") })),
    };
    if req["cmd"] == "capture" {
        let Some(tap) = tap else {
            return reply(
                &mut out,
                &json!({ "error": "capture is not available for this program (a preloaded one)" }),
            );
        };
        return capture(&mut out, &req, tap, link, until);
    }
    let answer = answer(&req, rt).unwrap_or_else(|e| json!({ "error": format!("{e:#}") }));
    reply(&mut out, &answer)
}

fn reply(out: &mut UnixStream, v: &Value) -> anyhow::Result<()> {
    let mut text = serde_json::to_string(v)?;
    text.push('\n');
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// The JSON answer to every request but `capture`.
fn answer<R: Inspect>(req: &Value, rt: &R) -> anyhow::Result<Value> {
    match req["cmd"].as_str().unwrap_or_default() {
        "stat" => {
            let mib = rt.mib(SHARD_TIMEOUT)?;
            Ok(json!({
                "shards": rt.shards(),
                "snmp": mib.render_snmp(),
                "netstat": mib.render_netstat(),
                "snmp6": mib.render_snmp6(),
                "counters": mib.to_json(),
            }))
        }
        "memory" => {
            let per_shard = rt.memory(SHARD_TIMEOUT)?;
            let mut total = MemoryUsage { kinds: Vec::new() };
            for m in &per_shard {
                total.merge(m);
            }
            let kinds: Vec<Value> = total
                .kinds
                .iter()
                .map(|k| json!({ "kind": k.name, "count": k.count, "bytes": k.bytes }))
                .collect();
            Ok(json!({
                "shards": rt.shards(),
                "kinds": kinds,
                "total_bytes": total.total(),
                "process_rss_bytes": process_rss(),
            }))
        }
        "ss" => {
            let per_shard =
                rt.on_each_stack(|k, stack, now| (k, stack.sockets(now)), SHARD_TIMEOUT)?;
            let sockets: Vec<Value> = per_shard
                .iter()
                .flat_map(|(k, socks)| socks.iter().map(move |s| socket_json(*k, s)))
                .collect();
            Ok(json!({ "sockets": sockets }))
        }
        "sysctl" => sysctl(req, rt),
        "profile" => profile_request(req),
        other => bail!("unknown request {other:?} (stat, memory, ss, sysctl, profile, capture)"),
    }
}

fn socket_json(shard: usize, s: &SocketView) -> Value {
    let info = s.info.as_ref().map(|i| {
        json!({
            "mss": i.mss,
            "cwnd": i.cwnd,
            "ssthresh": i.ssthresh,
            "rtt_us": i.srtt.map(|d| d.as_micros() as u64),
            "rto_ms": i.rto.as_millis() as u64,
            "snd_wnd": i.snd_wnd,
            "rcv_wnd": i.rcv_wnd,
            "retransmits": i.retransmits,
            "sack": i.sack,
            "timestamps": i.timestamps,
            "wscale": i.wscale.map(|(s, r)| json!([s, r])),
        })
    });
    json!({
        "shard": shard,
        "proto": match s.protocol { Protocol::Tcp => "tcp", Protocol::Udp => "udp" },
        "state": s.state,
        "local": s.local.to_string(),
        "peer": s.remote.map(|r| r.to_string()),
        "recv_q": s.recv_q,
        "send_q": s.send_q,
        "info": info,
        "skmem": s.mem.map(|(r, rb, w, tb)| json!({ "r": r, "rb": rb, "w": w, "tb": tb })),
        "timewait_ms": s.timewait_left.map(|d| d.as_millis() as u64),
    })
}

/// `{"cmd":"sysctl"}`: every tunable's value; with `"name"`, one; with `"value"` too, set it
/// on every shard (validated by each stack) and answer the value now in force.
fn sysctl<R: Inspect>(req: &Value, rt: &R) -> anyhow::Result<Value> {
    let Some(name) = req["name"].as_str().map(str::to_owned) else {
        let values = rt.on_each_stack(
            |_, stack, _| {
                Sysctl::TABLE
                    .iter()
                    .map(|i| (i.name, stack.sysctl().get(i.name).unwrap_or(i.default)))
                    .collect::<Vec<_>>()
            },
            SHARD_TIMEOUT,
        )?;
        let first = values.into_iter().next().unwrap_or_default();
        let list: Vec<Value> = first.iter().map(|(n, v)| json!([n, v])).collect();
        return Ok(json!({ "sysctls": list }));
    };
    if Sysctl::info(&name).is_none() {
        bail!("unknown sysctl {name:?} (see `ustack sysctl`)");
    }
    if let Some(value) = req["value"].as_u64() {
        let n = name.clone();
        let results = rt.on_each_stack(
            move |_, stack, _| stack.set_sysctl(&n, value).map_err(|e| e.to_string()),
            SHARD_TIMEOUT,
        )?;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            bail!("{e}");
        }
    }
    let n = name.clone();
    let values = rt.on_each_stack(move |_, stack, _| stack.sysctl().get(&n), SHARD_TIMEOUT)?;
    Ok(json!({ "name": name, "value": values.first().copied().flatten() }))
}

/// `{"cmd":"capture","count":N,"seconds":S}`: a pcap stream of every frame in and out of
/// every shard, until `count` frames, `seconds`, the client hangs up, or the server stops.
fn capture(
    out: &mut UnixStream,
    req: &Value,
    tap: &Arc<TapSwitch>,
    link: LinkType,
    until: Option<WallClock>,
) -> anyhow::Result<()> {
    if tap.is_on() {
        return reply(out, &json!({ "error": "a capture is already running" }));
    }
    let count = req["count"].as_u64().unwrap_or(u64::MAX);
    let end = req["seconds"]
        .as_f64()
        .map(|s| WallClock::now() + Duration::from_secs_f64(s.clamp(0.0, 1e7)));
    let end = match (end, until) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    // On before the file header goes out: a client that has read the header knows every
    // frame from then on is captured.
    tap.set(true);
    let dropped_before = tap.dropped();
    let mut pcap = match PcapWriter::new(out.try_clone()?, link, DEFAULT_SNAPLEN) {
        Ok(pcap) => pcap,
        Err(e) => {
            tap.set(false);
            return Err(e.into());
        }
    };
    let result = (|| -> anyhow::Result<()> {
        while pcap.packets() < count && end.is_none_or(|e| WallClock::now() < e) {
            std::thread::sleep(Duration::from_millis(10));
            for (at, frame) in tap.take() {
                if pcap.packets() >= count {
                    break;
                }
                pcap.write_packet(at, &frame)?;
            }
            pcap.flush()?;
        }
        Ok(())
    })();
    tap.set(false);
    let dropped = tap.dropped() - dropped_before;
    if dropped > 0 {
        eprintln!("ustack: capture: {dropped} frames dropped (the reader fell behind)");
    }
    // A reader that hung up ends the capture; that is not the server's failure.
    match result {
        Err(e) if e.downcast_ref::<std::io::Error>().is_some() => Ok(()),
        other => other,
    }
}

/// `{"cmd":"profile","action":"on"|"off"|"show"}`: switch the sampled profiler of every
/// shard on (forgetting what an earlier run sampled) or off, or show what it sampled, per
/// packet received ([`profile_json`]). `on` and `off` answer with the state.
fn profile_request(req: &Value) -> anyhow::Result<Value> {
    match req["action"].as_str().unwrap_or("show") {
        "on" => {
            if !profile::enabled() {
                profile::reset();
            }
            profile::set_enabled(true);
        }
        "off" => profile::set_enabled(false),
        "show" => {
            let snap = profile::snapshot();
            let mut v = profile_json(&snap, snap.packets as f64, "packet");
            v["enabled"] = json!(profile::enabled());
            return Ok(v);
        }
        other => bail!("unknown profile action {other:?} (on, off, show)"),
    }
    Ok(json!({ "enabled": profile::enabled() }))
}

/// A profile as JSON: each stage's nanoseconds per `unit` (`units` of them: messages, or
/// packets), the CPU total they add up to, the table, and folded stacks for a flame graph.
/// Instructions are `null`: no hardware counters are read.
pub fn profile_json(snap: &profile::Snapshot, units: f64, unit: &str) -> Value {
    let stages: Vec<Value> = snap
        .rows(units)
        .iter()
        .map(|r| json!({ "stage": r.name, "ns": r.ns, "cpu": r.cpu, "instructions": null }))
        .collect();
    json!({
        "unit": unit,
        "stages": stages,
        "cpu_ns": snap.cpu_per(units),
        "sample_every": profile::sample_every(),
        "iterations": snap.iterations,
        "sampled": snap.sampled,
        "packets": snap.packets,
        "table": snap.render(units, unit),
        "folded": snap.folded(),
    })
}
