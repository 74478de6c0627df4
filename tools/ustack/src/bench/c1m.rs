//! `c1m`: open N connections at a bounded number of handshakes in flight, hold them idle,
//! have every one exchange one message, close them all. Measured: the establishment rate,
//! the server's memory growth per connection, the exchange latency and the server's CPU
//! time.
//!
//! - ustack: the echo server of `ustack_apps` in a process of its own over shm
//!   ([`super::c1m_server`]; listeners on as many ports as the client's 64,512 ephemeral
//!   ports need), the ustack client on the bench thread. The server's memory is its
//!   process's RSS growth from listening to holding every connection (PSS beside it, from
//!   /proc/PID/smaps_rollup), and beside that its own accounting (the stack's kinds, as
//!   `ustack stat --memory` gives them, the runtime's and the echo server's).
//! - Linux: the baseline echo server in as many processes (one `SO_REUSEPORT` group) as
//!   keep each under [`PER_PROCESS`] sockets, the client on kernel sockets spread the same
//!   way over processes of its own, each from its own source address in 127/8 (a full
//!   ephemeral range each). The server's memory is its processes' RSS growth plus half the
//!   kernel's slab growth: both ends of a loopback connection are kernel sockets of the
//!   same make, and the client's half is not the server's.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::json;
use ustack_dev::shm::{ShmConfig, ShmPeer};
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Events, Interest};
use ustack_stack::tcp::State;

use super::c1m_active::Active;
use super::linux::{self, Exchanges, Peer};
use super::measure::cpu_between;
use super::shm::{self, CLIENT_IP, Rt, SERVER_IP};
use super::syn_flood::SynFlood;
use super::{Outcome, Run};

/// Handshakes (then exchanges) outstanding at once, in all: enough to keep both sides
/// busy, far from a SYN flood.
pub const WINDOW: usize = 1000;
/// Sockets per Linux process at most, under the 20,000 open files a process may have on
/// the test machines, with room for `SO_REUSEPORT`'s uneven spread.
pub const PER_PROCESS: usize = 15_000;
/// Connections per ustack server port: under half the client's range, 1024-65535 (64,512
/// ports). The client's search for a free port (Linux: `__inet_hash_connect`) takes
/// longer as the range fills: at 60,000 a port, 200,000 connections established at a
/// third of the rate they do at 30,000, the client's cost and not the server's.
const PER_PORT: usize = 30_000;
/// Every this many connections established, a line on stderr says how far it got (runs
/// of several millions take minutes).
const PROGRESS: usize = 1_000_000;
/// How long a phase may go without progress before the run fails.
const STALL: Duration = Duration::from_secs(10);

/// What a c1m run measured beyond an echo scenario's figures.
#[derive(Debug)]
pub struct C1m {
    pub establish: Duration,
    pub exchange: Duration,
    pub close: Duration,
    /// The server's memory growth over establishment, in bytes (see the module's doc).
    pub mem_bytes: u64,
    /// The parts it was made of.
    pub mem_detail: serde_json::Value,
    /// `--syn-flood`: what the flood sent and what the server did (see [`Flooded`]).
    pub syn_flood: serde_json::Value,
    /// `--send`: the surge into a server that stopped reading (see [`surge`]).
    pub surge: serde_json::Value,
    /// `--active N`: pingpong on N connections alone and beside the idle ones
    /// ([`super::c1m_active`]).
    pub active: serde_json::Value,
}

/// c1m's shm link: small frames (MTU 1500) in rings deep enough for a window of
/// handshakes or messages each way, so a window's burst passes in one hand-over. A
/// shallower ring would drop nothing either (frames wait for slots in the stack's
/// transmit queue, connections for room in that; see docs/bench.md, "A clean link drops
/// nothing"), but would take more round trips between the two processes.
pub fn link_config() -> ShmConfig {
    ShmConfig {
        ring_size: 4 * WINDOW.next_power_of_two(),
        ..ShmConfig::default()
    }
}

/// The ustack server's listening addresses for `conns` connections: one port per
/// [`PER_PORT`], from 5001.
pub fn server_addrs(conns: u32) -> Vec<SocketAddrV4> {
    (0..(conns as usize).div_ceil(PER_PORT))
        .map(|i| SocketAddrV4::new(SERVER_IP, 5001 + i as u16))
        .collect()
}

/// The ustack server process's memory at one moment: what the kernel says (VmRSS, its
/// anonymous and shared parts, and the PSS of its own memory: [`linux::owned_pss`]) and what its own accounting says.
struct ServerMem {
    rss: u64,
    rss_anon: u64,
    rss_shmem: u64,
    pss: u64,
    /// `{"total": bytes, "kinds": {kind: {"count", "bytes"}}}` ([`super::c1m_server`]).
    accounted: serde_json::Value,
}

impl ServerMem {
    /// Ask the server for its accounting (running the client meanwhile), then read its
    /// /proc files.
    fn read(server: &mut Peer, rt: &mut Rt) -> anyhow::Result<ServerMem> {
        let words = ask(server, rt, "memory")?;
        let accounted: serde_json::Value =
            serde_json::from_str(&words.join(" ")).context("the ustack server's memory line")?;
        let pid = server.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .context("reading the ustack server's /proc/PID/status")?;
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .context("reading the ustack server's /proc/PID/smaps_rollup")?;
        let field = |text: &str, name: &str| {
            linux::kb_field(text, name)
                .with_context(|| format!("no {name} in the ustack server's /proc files"))
        };
        Ok(ServerMem {
            rss: field(&status, "VmRSS:")?,
            rss_anon: field(&status, "RssAnon:")?,
            rss_shmem: field(&status, "RssShmem:")?,
            pss: linux::owned_pss(&rollup)
                .context("no Pss in the ustack server's /proc/PID/smaps_rollup")?,
            accounted,
        })
    }

    fn total(&self) -> i64 {
        self.accounted["total"].as_i64().unwrap_or(0)
    }
}

/// c1m on ustack over shm: the server in a process of its own ([`super::c1m_server`]),
/// the client on the bench thread.
///
/// `tokio` (`--api tokio`): the server is c1m's tokio server ([`super::c1m_tokio`]), a
/// task per connection on ustack-tokio's `LocalStack`; the client is the same.
pub fn ustack(run: &Run, hold: Duration, tokio: bool) -> anyhow::Result<Outcome> {
    let mut args = vec![
        "--conns".to_owned(),
        run.conns.to_string(),
        "--seed".to_owned(),
        run.seed.wrapping_add(1).to_string(),
    ];
    if run.checksums {
        args.push("--checksums".to_owned());
    }
    for s in &run.server_sysctl {
        args.extend(["--sysctl".to_owned(), s.clone()]);
    }
    if tokio {
        args.extend(["--api".to_owned(), "tokio".to_owned()]);
    }
    let (mut server, words) = Peer::start("ustack-c1m", &args)?;
    let name = words
        .get(1)
        .context("the ustack server offered no shm link")?;
    let port = ShmPeer::connect(name, linux::ANSWER)
        .and_then(ShmPeer::attach)
        .context("attaching to the ustack server's shm link")?
        .pop()
        .context("the shm link's queue")?;
    server.expect("listening", linux::ANSWER)?;
    let mut client = shm::shm_builder(CLIENT_IP, 2, run.seed.wrapping_add(2), run)
        .sysctl("net.ipv4.ip_local_port_range.min", 1024)
        .sysctl("net.ipv4.ip_local_port_range.max", 65535);
    if run.send.is_some() {
        // The load generator is not the stack under test: its tcp_mem never refuses.
        for name in ["low", "pressure", "high", "budget"] {
            client = client.sysctl(&format!("net.ipv4.tcp_mem.{name}"), 1 << 31);
        }
    }
    let mut rt = client.build(port).context("building the client runtime")?;
    // `--active N`: the N connections' pingpong alone, before any idle one is opened (and
    // before the first memory reading, so that the growth is the idle connections').
    let mut active = match run.active {
        Some(k) => Some(Active::alone(
            &mut rt,
            (k, u64::from(run.conns), run.size),
            hold,
            &|| server.cpu(),
        )?),
        None => None,
    };
    let before = ServerMem::read(&mut server, &mut rt)?;
    let cpu0 = server.cpu();
    let (mut o, held) = ustack_client(run, hold, &mut rt, &mut server, &mut active)?;
    let cpu = cpu_between(cpu0, server.cpu());
    let report: serde_json::Value =
        serde_json::from_str(&ask(&mut server, &mut rt, "report")?.join(" "))
            .context("the ustack server's report line")?;
    let pid = server.pid();
    server.stop()?;
    let grew = |f: fn(&ServerMem) -> u64| f(&held) as i64 - f(&before) as i64;
    let rss = grew(|m| m.rss);
    let stack = held.total() - before.total();
    let c = o.c1m.as_mut().context("the c1m figures")?;
    c.mem_bytes = rss.max(0) as u64;
    c.mem_detail = json!({
        "server_rss_bytes": rss,
        "server_rss_anon_bytes": grew(|m| m.rss_anon),
        "server_rss_shmem_bytes": grew(|m| m.rss_shmem),
        "server_pss_bytes": grew(|m| m.pss),
        "stack_bytes": stack,
        "stack_kinds": kinds_growth(&before.accounted, &held.accounted),
        "held_accounting": stat_memory(&held),
        "pid": pid,
    });
    o = o.with_counters(report["counters"].clone(), rt.stack().mib().to_json());
    o.link_stats = json!({ "server": report["link"], "client": shm::shm_stats(rt.device()) });
    o.server_cpu = cpu;
    if tokio {
        (o.api, o.mode) = ("tokio", "tokio");
    }
    Ok(o)
}

/// The server's accounting once it held every connection, whole (not its growth), in the
/// shape of the control socket's `memory` answer, which `ustack stat --memory` prints.
fn stat_memory(m: &ServerMem) -> serde_json::Value {
    let kinds: Vec<serde_json::Value> = m.accounted["kinds"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, k)| json!({ "kind": name, "count": k["count"], "bytes": k["bytes"] }))
        .collect();
    json!({
        "shards": 1,
        "kinds": kinds,
        "total_bytes": m.accounted["total"],
        "process_rss_bytes": m.rss,
    })
}

/// What each kind of the server's accounting grew by from `a` to `b` (each
/// `{"kinds": {kind: {"count", "bytes"}}}`): the same shape, signed.
fn kinds_growth(a: &serde_json::Value, b: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (name, k) in b["kinds"].as_object().into_iter().flatten() {
        let was = &a["kinds"][name];
        let diff = |f: &str| k[f].as_i64().unwrap_or(0) - was[f].as_i64().unwrap_or(0);
        out.insert(
            name.clone(),
            json!({ "count": diff("count"), "bytes": diff("bytes") }),
        );
    }
    out.into()
}

/// Send the server `cmd` and run the client until the answer (the line starting with
/// `cmd`) comes, failing after [`STALL`]; its words.
fn ask(server: &mut Peer, rt: &mut Rt, cmd: &str) -> anyhow::Result<Vec<String>> {
    server.send(cmd)?;
    let start = WallClock::now();
    loop {
        if let Some(words) = server.try_expect(cmd)? {
            return Ok(words);
        }
        if start.elapsed() > STALL {
            bail!("ustack c1m: the server did not answer {cmd:?} within {STALL:?}");
        }
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
}

/// Run the client until the connections the server holds satisfy `done`, failing when
/// that takes longer than [`STALL`].
fn until_held(
    server: &mut Peer,
    rt: &mut Rt,
    what: &str,
    done: impl Fn(usize) -> bool,
) -> anyhow::Result<()> {
    let start = WallClock::now();
    loop {
        let words = ask(server, rt, "held")?;
        let held: usize = words
            .first()
            .and_then(|w| w.parse().ok())
            .context("ustack c1m: a bad `held` line")?;
        if done(held) {
            return Ok(());
        }
        if start.elapsed() > STALL {
            bail!("ustack c1m: {what} within {STALL:?} (the server holds {held})");
        }
    }
}

/// The client's part of ustack's c1m: the outcome (without the server's figures), and
/// the server's memory once it held every connection.
fn ustack_client(
    run: &Run,
    hold: Duration,
    rt: &mut Rt,
    server: &mut Peer,
    active: &mut Option<Active>,
) -> anyhow::Result<(Outcome, ServerMem)> {
    let (n, size) = (run.conns as usize, run.size);
    // The server holds the active connections too, beside the idle ones.
    let extra = active.as_ref().map_or(0, Active::len);
    let addrs = server_addrs(run.conns);
    let mut events = Events::with_capacity(1024);
    let meter = run.meter();

    // Establish, WINDOW handshakes at a time.
    let t = WallClock::now();
    let mut streams: Vec<TcpStream> = Vec::with_capacity(n);
    let (mut pending, mut done, mut progress) = (0usize, 0usize, WallClock::now());
    let mut established = vec![false; n];
    while done < n {
        // One connection alone first: its SYN resolves the server's address (ARP), which
        // a burst would overflow the neighbour queue waiting for (NEIGH_QUEUEFULL).
        let window = if done == 0 { 1 } else { WINDOW };
        while pending < window && streams.len() < n {
            let i = streams.len();
            let s = TcpStream::connect(rt, addrs[i % addrs.len()])?;
            s.set_nodelay(rt, true)?;
            rt.register(&s, i as u64, Interest::WRITABLE, Mode::Edge)?;
            streams.push(s);
            pending += 1;
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token as usize;
            match streams[i].state(rt)? {
                State::Established if !established[i] => {
                    established[i] = true;
                    pending -= 1;
                    done += 1;
                    progress = WallClock::now();
                    if done % PROGRESS == 0 && n > PROGRESS {
                        eprintln!(
                            "ustack c1m: {done} of {n} established in {:.1} s",
                            t.elapsed().as_secs_f64()
                        );
                    }
                }
                State::Closed => bail!("ustack c1m: connection {i} failed to connect"),
                _ => {}
            }
        }
        if progress.elapsed() > STALL {
            bail!("ustack c1m: {done} of {n} connections established, then none for {STALL:?}");
        }
    }
    let establish = t.elapsed();
    // The server's memory, once it has accepted every connection.
    until_held(server, rt, "the server accepted every connection", |held| {
        held >= n + extra
    })?;
    let mem = ServerMem::read(server, rt)?;

    // Hold them idle (under a SYN flood if asked; `--active`: while the active connections
    // run their pingpong beside them, then close).
    let busy = match active.take() {
        Some(mut a) => {
            a.beside_idle(rt, hold, &|| server.cpu())?;
            let report = a.json(run.conns);
            a.close(rt)?;
            until_held(
                server,
                rt,
                "the server closed the active connections",
                |held| held <= n,
            )?;
            Some(report)
        }
        None => None,
    };
    let flooded = match run.syn_flood {
        _ if busy.is_some() => None,
        Some(rate) => Some(hold_flooded(
            run,
            rate,
            hold,
            rt,
            server,
            &mem,
            addrs[0].port(),
        )?),
        None => {
            let t = WallClock::now();
            while t.elapsed() < hold {
                rt.run_once(Some(Duration::from_millis(10)))?;
            }
            None
        }
    };

    // Every connection sends `--send` bytes at once to a server that stopped reading.
    let surged = match run.send {
        Some(bytes) => Some(surge(bytes, rt, server, &streams, &mem)?),
        None => None,
    };

    // One message each, WINDOW at a time.
    for (i, s) in streams.iter().enumerate() {
        rt.reregister(s, i as u64, Interest::READABLE, Mode::Edge)?;
    }
    let t = WallClock::now();
    let mut x = Exchanges::new(size, n);
    let mut buf = vec![0u8; size];
    progress = WallClock::now();
    while x.lat.len() < n {
        while x.room(WINDOW, n) {
            let (i, msg) = x.start();
            if streams[i].write(rt, msg)? != size {
                bail!("ustack c1m: a {size}-byte message did not fit the send buffer");
            }
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token as usize;
            while let Some(want) = x.wanted(i) {
                match streams[i].read(rt, &mut buf[..want]) {
                    Ok(0) => bail!("ustack c1m: the server closed connection {i}"),
                    Ok(k) => {
                        if x.arrived(i, &buf[..k]) {
                            progress = WallClock::now();
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if progress.elapsed() > STALL {
            bail!(
                "ustack c1m: {} of {n} exchanges done, then none for {STALL:?}",
                x.lat.len()
            );
        }
    }
    let exchange = t.elapsed();

    // Close them all, a window at a time; the server closes its side on our FIN.
    let t = WallClock::now();
    let mut closed = 0;
    let mut streams = streams.into_iter().peekable();
    while streams.peek().is_some() {
        for s in streams.by_ref().take(WINDOW) {
            s.close(rt)?;
            closed += 1;
        }
        // Then wait for the server's side of these, so that no more than a window of
        // FINs is ever in flight.
        let open = n - closed;
        until_held(server, rt, "the server closed the connections", |held| {
            held <= open
        })?;
    }
    let close = t.elapsed();

    let mut o = Outcome::echo(
        "c1m",
        "ustack",
        "shm",
        run.conns,
        size,
        n as u64,
        meter.elapsed(),
        // Every echo right, the active connections' too.
        x.ok && busy.as_ref().is_none_or(|b| b["verified"] == true),
        x.lat,
    );
    o.c1m = Some(C1m {
        establish,
        exchange,
        close,
        mem_bytes: 0,
        mem_detail: serde_json::Value::Null,
        syn_flood: flooded.map_or(serde_json::Value::Null, |f| f.json()),
        surge: surged.unwrap_or(serde_json::Value::Null),
        active: busy.unwrap_or(serde_json::Value::Null),
    });
    Ok((o, mem))
}

/// What `--syn-flood` sent during the hold and what the server did meanwhile.
#[derive(Debug)]
struct Flooded {
    rate: u32,
    sent: u64,
    deferred: u64,
    seconds: f64,
    /// The most SYN-queue requests the server held at a sample (every [`FLOOD_SAMPLE`]).
    requests_peak: i64,
    samples: u32,
    /// The server's TcpExt counters' growth over the flood.
    cookies: i64,
    overflows: i64,
    drops: i64,
    /// The server's RSS when the flood started (every connection held) and when it ended.
    rss_before: u64,
    rss_after: u64,
}

/// How often the server's memory is sampled during a flood.
const FLOOD_SAMPLE: Duration = Duration::from_millis(100);
/// A listener's SYN queue holds at most its backlog + 1 requests (`net.core.somaxconn`,
/// 4096, as `Server::bind_all` listens; Linux `inet_csk_reqsk_queue_is_full`: `qlen >
/// sk_max_ack_backlog`), then SYN cookies answer.
const SYN_QUEUE_BOUND: i64 = 4097;

impl Flooded {
    fn json(&self) -> serde_json::Value {
        let growth = self.rss_after as i64 - self.rss_before as i64;
        json!({
            "rate_per_s": self.rate,
            "syns_sent": self.sent,
            "syns_deferred": self.deferred,
            "flood_s": self.seconds,
            "sent_per_s": self.sent as f64 / self.seconds.max(1e-9),
            "server_syn_queue_peak": self.requests_peak,
            "server_syn_queue_bound": SYN_QUEUE_BOUND,
            "server_syn_queue_samples": self.samples,
            "server_syncookies_sent": self.cookies,
            "server_listen_overflows": self.overflows,
            "server_listen_drops": self.drops,
            "server_rss_before_bytes": self.rss_before,
            "server_rss_after_bytes": self.rss_after,
            "server_rss_growth_bytes": growth,
            "server_rss_growth_pct": 100.0 * growth as f64 / (self.rss_before.max(1) as f64),
        })
    }
}

/// Hold the connections for `hold` while [`SynFlood`] sends `rate` spoofed SYNs a second
/// at the server's first port, sampling the server's SYN queue; its RSS and counters are
/// read before (`before`: every connection held) and after.
fn hold_flooded(
    run: &Run,
    rate: u32,
    hold: Duration,
    rt: &mut Rt,
    server: &mut Peer,
    before: &ServerMem,
    port: u16,
) -> anyhow::Result<Flooded> {
    let counters = |server: &mut Peer, rt: &mut Rt| -> anyhow::Result<serde_json::Value> {
        let r: serde_json::Value = serde_json::from_str(&ask(server, rt, "report")?.join(" "))
            .context("the ustack server's report line")?;
        Ok(r["counters"]["TcpExt"].clone())
    };
    let c0 = counters(server, rt)?;
    let mut flood = SynFlood::new(rate, port, run.seed ^ 0x5f1f_100d);
    let (mut peak, mut samples) = (0i64, 0u32);
    let t = WallClock::now();
    let mut next_sample = FLOOD_SAMPLE;
    while t.elapsed() < hold {
        flood.send_due(rt, t.elapsed());
        rt.run_once(Some(Duration::from_millis(1)))?;
        if t.elapsed() >= next_sample {
            next_sample += FLOOD_SAMPLE;
            let m = ServerMem::read(server, rt)?;
            peak = peak.max(
                m.accounted["kinds"]["requests"]["count"]
                    .as_i64()
                    .unwrap_or(0),
            );
            samples += 1;
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    let after = ServerMem::read(server, rt)?;
    peak = peak.max(
        after.accounted["kinds"]["requests"]["count"]
            .as_i64()
            .unwrap_or(0),
    );
    let c1 = counters(server, rt)?;
    let grew = |name: &str| c1[name].as_i64().unwrap_or(0) - c0[name].as_i64().unwrap_or(0);
    Ok(Flooded {
        rate,
        sent: flood.sent,
        deferred: flood.deferred,
        seconds,
        requests_peak: peak,
        samples: samples + 1,
        cookies: grew("SyncookiesSent"),
        overflows: grew("ListenOverflows"),
        drops: grew("ListenDrops"),
        rss_before: before.rss,
        rss_after: after.rss,
    })
}

/// How long the server holds the surge unread once every connection has written it: at
/// least [`SURGE_HOLD`], then until its buffers have not grown for [`SURGE_SETTLE`] (the
/// surge has arrived, or been refused), at most [`SURGE_HOLD_MAX`].
const SURGE_HOLD: Duration = Duration::from_secs(2);
const SURGE_SETTLE: Duration = Duration::from_secs(1);
const SURGE_HOLD_MAX: Duration = Duration::from_secs(120);
/// How long the drain may go without a connection completing before the run fails: the
/// senders retransmit what the server refused with their RTO, backed off meanwhile.
const SURGE_STALL: Duration = Duration::from_secs(120);

/// Byte `k` of connection `conn`'s surge: every byte differs by connection and position.
fn surge_byte(conn: usize, k: usize) -> u8 {
    (conn.wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503) ^ (k >> 7)) as u8
}

/// `--send BYTES` (issue #12 item 8): the server stops reading (`pause`); every connection
/// writes `bytes` at once; while it holds them unread (see [`SURGE_HOLD`]) the server's
/// memory is sampled every [`FLOOD_SAMPLE`] (its `buffers` kind and RSS), and how long its
/// control line takes to answer; then its counters, and it reads again (`resume`): every
/// connection's bytes must come back (echoed) intact. What happened, as JSON.
fn surge(
    bytes: usize,
    rt: &mut Rt,
    server: &mut Peer,
    streams: &[TcpStream],
    held: &ServerMem,
) -> anyhow::Result<serde_json::Value> {
    let n = streams.len();
    ask(server, rt, "pause")?;
    for (i, s) in streams.iter().enumerate() {
        rt.reregister(s, i as u64, Interest::READABLE, Mode::Edge)?;
    }
    let data: Vec<Vec<u8>> = (0..n)
        .map(|i| (0..bytes).map(|k| surge_byte(i, k)).collect())
        .collect();
    let t = WallClock::now();
    let mut sent = vec![0usize; n];
    let mut left = n;
    while left > 0 {
        for (i, s) in streams.iter().enumerate() {
            if sent[i] == bytes {
                continue;
            }
            match s.write(rt, &data[i][sent[i]..]) {
                Ok(k) => sent[i] += k,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            left -= usize::from(sent[i] == bytes);
        }
        rt.run_once(Some(Duration::from_millis(1)))?;
        if left > 0 && t.elapsed() > SURGE_STALL {
            bail!("ustack c1m --send: {left} connections could not write within {SURGE_STALL:?}");
        }
    }
    let written = t.elapsed();
    let (mut buffers_peak, mut rss_peak, mut answer_max, mut samples) = (0i64, 0u64, 0f64, 0);
    let t = WallClock::now();
    let mut grew = WallClock::now();
    while t.elapsed() < SURGE_HOLD
        || (grew.elapsed() < SURGE_SETTLE && t.elapsed() < SURGE_HOLD_MAX)
    {
        let asked = WallClock::now();
        let m = ServerMem::read(server, rt)?;
        answer_max = f64::max(answer_max, asked.elapsed().as_secs_f64() * 1e3);
        let buffers = m.accounted["kinds"]["buffers"]["bytes"]
            .as_i64()
            .unwrap_or(0);
        if buffers > buffers_peak {
            grew = WallClock::now();
        }
        buffers_peak = buffers_peak.max(buffers);
        rss_peak = rss_peak.max(m.rss);
        samples += 1;
        let next = asked + FLOOD_SAMPLE;
        while WallClock::now() < next {
            rt.run_once(Some(Duration::from_millis(1)))?;
        }
    }
    let unread = t.elapsed();
    // Echoed back before the server reads again: nothing, if it did not read.
    let echoed: usize = streams
        .iter()
        .map(|s| rt.stack().tcp_info(s.handle()).map_or(0, |i| i.recv_q))
        .sum();
    let report: serde_json::Value = serde_json::from_str(&ask(server, rt, "report")?.join(" "))
        .context("the ustack server's report line")?;
    let ext = &report["counters"]["TcpExt"];
    let c = |name: &str| ext[name].as_u64().unwrap_or(0);
    let pressured = json!({
        "TCPMemoryPressures": c("TCPMemoryPressures"),
        "PruneCalled": c("PruneCalled"),
        "OfoPruned": c("OfoPruned"),
        "RcvPruned": c("RcvPruned"),
        "TCPRcvQDrop": c("TCPRcvQDrop"),
        "TCPOFODrop": c("TCPOFODrop"),
        "TCPAbortOnMemory": c("TCPAbortOnMemory"),
        "PROTO_MEM": report["counters"]["Drops"]["PROTO_MEM"].as_u64().unwrap_or(0),
    });

    // The server reads again: every connection's bytes come back, echoed.
    ask(server, rt, "resume")?;
    let t = WallClock::now();
    let mut got = vec![0usize; n];
    let (mut complete, mut intact, mut aborted) = (0usize, 0usize, 0usize);
    let mut ok = vec![true; n];
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 65536];
    let mut progress = WallClock::now();
    while complete + aborted < n {
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token as usize;
            while got[i] < bytes {
                match streams[i].read(rt, &mut buf[..bytes - got[i]]) {
                    Ok(0) => {
                        aborted += 1;
                        got[i] = usize::MAX;
                        break;
                    }
                    Ok(k) => {
                        ok[i] &= buf[..k] == data[i][got[i]..got[i] + k];
                        got[i] += k;
                        if got[i] == bytes {
                            complete += 1;
                            intact += usize::from(ok[i]);
                            progress = WallClock::now();
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        aborted += 1;
                        got[i] = usize::MAX;
                        break;
                    }
                }
            }
        }
        if progress.elapsed() > SURGE_STALL {
            bail!(
                "ustack c1m --send: {complete} of {n} connections drained, then none for \
                 {SURGE_STALL:?}"
            );
        }
    }
    let drained = t.elapsed();
    Ok(json!({
        "bytes_per_conn": bytes,
        "demand_bytes": bytes as u64 * n as u64,
        "write_s": written.as_secs_f64(),
        "unread_hold_s": unread.as_secs_f64(),
        "server_buffers_peak_bytes": buffers_peak,
        "server_rss_held_bytes": held.rss,
        "server_rss_peak_bytes": rss_peak,
        "server_counters": pressured,
        "control_samples": samples,
        "control_answer_max_ms": answer_max,
        "echoed_while_unread_bytes": echoed,
        "drain_s": drained.as_secs_f64(),
        "completed": complete,
        "intact": intact,
        "aborted": aborted,
    }))
}

/// The sum of a figure over peers (None if any could not be read).
fn sum(peers: &[Peer], f: impl Fn(&Peer) -> Option<u64>) -> Option<u64> {
    peers.iter().map(f).sum()
}

/// How long a Linux c1m phase may take in all (the peers fail sooner if stalled).
const PHASE: Duration = Duration::from_secs(600);

/// c1m on Linux over loopback, servers and clients in processes of their own. `tokio`
/// (`--api tokio`): the servers are c1m's tokio server on tokio's sockets
/// ([`super::c1m_tokio::serve_linux`]), a task per connection.
pub fn linux(run: &Run, hold: Duration, tokio: bool) -> anyhow::Result<Outcome> {
    let (n, size) = (run.conns as usize, run.size);
    let procs = n.div_ceil(PER_PROCESS);
    let role = if tokio { "tokio-echo" } else { "echo" };
    let (first, port) = Peer::spawn(role, &[])?;
    let mut servers = vec![first];
    for _ in 1..procs {
        servers.push(Peer::spawn(role, &["--port".into(), port.to_string()])?.0);
    }
    // Each client process from its own source address, distinct per bench run.
    let pid = std::process::id();
    let window = WINDOW.div_ceil(procs);
    let mut clients = Vec::with_capacity(procs);
    for i in 0..procs {
        let share = n / procs + usize::from(i < n % procs);
        let src = Ipv4Addr::new(127, (pid >> 8) as u8, pid as u8, 2 + i as u8);
        let args = [
            "--port".into(),
            port.to_string(),
            "--conns".into(),
            share.to_string(),
            "--window".into(),
            window.to_string(),
            "--size".into(),
            size.to_string(),
            "--src".into(),
            src.to_string(),
        ];
        clients.push(Peer::spawn("c1m-client", &args)?.0);
    }
    let all =
        |clients: &mut Vec<Peer>, cmd: &str, reply: &str| -> anyhow::Result<Vec<Vec<String>>> {
            for c in clients.iter_mut() {
                c.send(cmd)?;
            }
            clients.iter_mut().map(|c| c.expect(reply, PHASE)).collect()
        };
    let (rss0, pss0) = (sum(&servers, Peer::rss), sum(&servers, Peer::pss));
    let slab0 = linux::kernel_slab();
    let caches0 = linux::kernel_slab_caches();
    let cpu0 = sum(&servers, |p| p.cpu().map(|d| d.as_nanos() as u64));
    let meter = run.meter();

    let t = WallClock::now();
    all(&mut clients, "connect", "connected")?;
    let establish = t.elapsed();
    // Every connection accepted (out of the accept queues) before memory is read.
    let t = WallClock::now();
    loop {
        let mut accepted = 0;
        for s in &mut servers {
            accepted += s.accepted()?;
        }
        if accepted >= n as u64 {
            break;
        }
        if t.elapsed() > STALL {
            bail!("Linux c1m: the servers accepted {accepted} of {n} connections");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (rss1, pss1) = (sum(&servers, Peer::rss), sum(&servers, Peer::pss));
    let slab1 = linux::kernel_slab();
    let caches1 = linux::kernel_slab_caches();

    std::thread::sleep(hold);

    let t = WallClock::now();
    let replies = all(&mut clients, "exchange", "exchanged")?;
    let exchange = t.elapsed();
    let (mut verified, mut lat) = (true, Vec::with_capacity(n));
    for words in &replies {
        verified &= words.first().is_some_and(|w| w == "1");
        for w in words.iter().skip(1) {
            lat.push(w.parse::<u64>().context("Linux c1m: a bad latency")?);
        }
    }
    verified &= lat.len() == n;

    let t = WallClock::now();
    all(&mut clients, "close", "closed")?;
    let close = t.elapsed();
    let elapsed = meter.elapsed();
    let cpu = match (
        cpu0,
        sum(&servers, |p| p.cpu().map(|d| d.as_nanos() as u64)),
    ) {
        (Some(a), Some(b)) => Some(Duration::from_nanos(b.saturating_sub(a))),
        _ => None,
    };
    let pids: Vec<u32> = servers.iter().map(Peer::pid).collect();
    for p in clients.into_iter().chain(servers) {
        p.stop()?;
    }

    let rss = match (rss0, rss1) {
        (Some(a), Some(b)) => b as i64 - a as i64,
        _ => bail!("Linux c1m: the servers' RSS could not be read"),
    };
    let (slab, source) = match (slab0, slab1) {
        (Some((a, src)), Some((b, _))) => (b as i64 - a as i64, src),
        _ => (0, "none"),
    };
    // The slab's growth by cache (what grew by at least a byte a connection), both ends'.
    let by_cache: serde_json::Map<String, serde_json::Value> = match (&caches0, &caches1) {
        (Some(a), Some(b)) => linux::slab_growth(a, b, n as i64)
            .into_iter()
            .map(|(name, d)| (name, json!(d)))
            .collect(),
        _ => serde_json::Map::new(),
    };
    let pss = match (pss0, pss1) {
        (Some(a), Some(b)) => Some(b as i64 - a as i64),
        _ => None,
    };
    // The kernel is Linux's stack: the server's half of its slab growth (the client's
    // sockets are the other half).
    let mem = (rss + slab / 2).max(0) as u64;
    let mut o = Outcome::echo(
        "c1m", "linux", "loopback", run.conns, size, n as u64, elapsed, verified, lat,
    );
    o.server_cpu = cpu;
    if tokio {
        (o.api, o.mode) = ("tokio", "tokio");
    }
    o.c1m = Some(C1m {
        establish,
        exchange,
        close,
        syn_flood: serde_json::Value::Null,
        surge: serde_json::Value::Null,
        active: serde_json::Value::Null,
        mem_bytes: mem,
        mem_detail: json!({
            "server_rss_bytes": rss,
            "server_pss_bytes": pss,
            "stack_bytes": slab / 2,
            "kernel_slab_bytes": slab,
            "kernel_slab_source": source,
            "kernel_slab_by_cache": by_cache,
            "processes": procs,
            "pids": pids,
        }),
    });
    Ok(o)
}
