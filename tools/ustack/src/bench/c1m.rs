//! `c1m`: open N connections at a bounded number of handshakes in flight, hold them idle,
//! have every one exchange one message, close them all. Measured: the establishment rate,
//! the server's memory growth per connection, the exchange latency and the server's CPU
//! time.
//!
//! - ustack: the echo server of `ustack_apps` on a thread of its own over shm
//!   (listeners on as many ports as the client's 64,512 ephemeral ports need), the ustack
//!   client on the bench thread. The server's memory is its stack's own accounting
//!   (`Stack::memory`), which it reads itself once it holds every connection; the bench
//!   process's RSS growth (client and server together) is reported beside it.
//! - Linux: the baseline echo server in as many processes (one `SO_REUSEPORT` group) as
//!   keep each under [`PER_PROCESS`] sockets, the client on kernel sockets spread the same
//!   way over processes of its own, each from its own source address in 127/8 (a full
//!   ephemeral range each). The server's memory is its processes' RSS growth plus half the
//!   kernel's slab growth: both ends of a loopback connection are kernel sockets of the
//!   same make, and the client's half is not the server's.

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::json;
use ustack_apps::{Protocol, Server};
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Events, Interest};
use ustack_stack::inspect::MemoryUsage;
use ustack_stack::tcp::State;

use super::linux::{self, Exchanges, Peer};
use super::shm::{self, CLIENT_IP, Rt, SERVER_IP};
use super::{Outcome, Run};

/// Handshakes (then exchanges) outstanding at once, in all: enough to keep both sides
/// busy, far from a SYN flood.
pub const WINDOW: usize = 1000;
/// Sockets per Linux process at most, under the 20,000 open files a process may have on
/// the test machines, with room for `SO_REUSEPORT`'s uneven spread.
pub const PER_PROCESS: usize = 15_000;
/// Connections per ustack server port: the client's range is 1024-65535 (64,512 ports).
const PER_PORT: usize = 60_000;
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
}

/// c1m's shm link: small frames (MTU 1500) in rings deep enough for a window of
/// handshakes or messages each way, so a window's burst passes in one hand-over. A
/// shallower ring would drop nothing either (frames wait for slots in the stack's
/// transmit queue, connections for room in that; see docs/bench.md, "A clean link drops
/// nothing"), but would take more round trips between the two threads.
fn link() -> std::io::Result<(ShmPort, ShmPort)> {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        ring_size: 4 * WINDOW.next_power_of_two(),
        ..ShmConfig::default()
    })?;
    Ok((a.remove(0), b.remove(0)))
}

/// What the ustack server thread shares with the bench thread.
#[derive(Default)]
struct Probe {
    stop: AtomicBool,
    /// Connections the server holds now.
    conns: AtomicUsize,
    /// Once the server holds this many connections (0: not asked yet) it reads its
    /// stack's memory into `mem`.
    target: AtomicUsize,
    mem: AtomicU64,
}

const NOT_YET: u64 = u64::MAX;

/// c1m on ustack over shm.
pub fn ustack(run: &Run, hold: Duration) -> anyhow::Result<Outcome> {
    let n = run.conns as usize;
    let addrs: Vec<SocketAddrV4> = (0..n.div_ceil(PER_PORT))
        .map(|i| SocketAddrV4::new(SERVER_IP, 5001 + i as u16))
        .collect();
    let (a, b) = link().context("creating the shm link")?;
    let probe = Arc::new(Probe {
        mem: AtomicU64::new(NOT_YET),
        ..Probe::default()
    });
    let (shared, server_addrs, seed) = (probe.clone(), addrs.clone(), run.seed.wrapping_add(1));
    let server_builder = shm::shm_builder(SERVER_IP, 1, seed, run);
    let server = std::thread::Builder::new()
        .name("ustack-server".into())
        .spawn(
            move || -> anyhow::Result<(Duration, u64, serde_json::Value, serde_json::Value, serde_json::Value)> {
                let mut rt = server_builder.build(a)?;
                let mut server = Server::bind_all(&mut rt, Protocol::Echo, &server_addrs, None)?;
                let mem0 = rt.stack().memory();
                let mut mem1 = None;
                let cpu0 = shm::thread_cpu();
                while !shared.stop.load(Ordering::Relaxed) {
                    server.step(&mut rt, shm::STOP_CHECK)?;
                    let held = server.connections();
                    shared.conns.store(held, Ordering::Relaxed);
                    let target = shared.target.load(Ordering::Relaxed);
                    if target > 0 && held >= target && mem1.is_none() {
                        let mem = rt.stack().memory();
                        shared.mem.store(mem.total() as u64, Ordering::Relaxed);
                        mem1 = Some(mem);
                    }
                }
                let mem1 = mem1.unwrap_or_else(|| mem0.clone());
                Ok((
                    shm::thread_cpu() - cpu0,
                    (mem1.total() as u64).saturating_sub(mem0.total() as u64),
                    kinds_growth(&mem0, &mem1),
                    rt.stack().mib().to_json(),
                    shm::shm_stats(rt.device()),
                ))
            },
        )
        .context("starting the server thread")?;
    let stop_server = || probe.stop.store(true, Ordering::Relaxed);
    let result = ustack_client(run, hold, b, &addrs, &probe);
    stop_server();
    let (cpu, stack_growth, kinds, counters, server_link) = match server.join() {
        Ok(r) => r.context("the ustack server")?,
        Err(_) => bail!("the ustack server thread panicked"),
    };
    let (mut o, rt, rss_growth) = result?;
    let c = o.c1m.as_mut().context("the c1m figures")?;
    c.mem_bytes = stack_growth;
    c.mem_detail = json!({
        "stack_bytes": stack_growth,
        "stack_kinds": kinds,
        "bench_process_rss_bytes": rss_growth,
    });
    o = o.with_counters(counters, rt.stack().mib().to_json());
    o.link_stats = json!({ "server": server_link, "client": shm::shm_stats(rt.device()) });
    o.server_cpu = Some(cpu);
    Ok(o)
}

/// What each kind of the stack's memory accounting (`Stack::memory`) grew by from `a` to
/// `b`: `{kind: {"count": objects, "bytes": heap bytes}}`, signed.
fn kinds_growth(a: &MemoryUsage, b: &MemoryUsage) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for k in &b.kinds {
        let (count, bytes) = a.get(k.name).map_or((0, 0), |k| (k.count, k.bytes));
        out.insert(
            k.name.to_owned(),
            json!({
                "count": k.count as i64 - count as i64,
                "bytes": k.bytes as i64 - bytes as i64,
            }),
        );
    }
    out.into()
}

/// The bench process's resident memory (client and ustack server together).
fn own_rss() -> Option<u64> {
    linux::status_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// Poll the client until `done`, failing when nothing changes for [`STALL`].
fn client_until(rt: &mut Rt, what: &str, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let start = WallClock::now();
    while !done() {
        if start.elapsed() > STALL {
            bail!("ustack c1m: {what} within {STALL:?}");
        }
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    Ok(())
}

/// The client's part of ustack's c1m: the outcome (without the server's figures), its
/// runtime, and the bench process's RSS growth over establishment.
fn ustack_client(
    run: &Run,
    hold: Duration,
    port: ShmPort,
    addrs: &[SocketAddrV4],
    probe: &Probe,
) -> anyhow::Result<(Outcome, Rt, i64)> {
    let (n, size) = (run.conns as usize, run.size);
    let mut rt = shm::shm_builder(CLIENT_IP, 2, run.seed.wrapping_add(2), run)
        .sysctl("net.ipv4.ip_local_port_range.min", 1024)
        .sysctl("net.ipv4.ip_local_port_range.max", 65535)
        .build(port)
        .context("building the client runtime")?;
    let rss0 = own_rss();
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
            let s = TcpStream::connect(&mut rt, addrs[i % addrs.len()])?;
            s.set_nodelay(&mut rt, true)?;
            rt.register(&s, i as u64, Interest::WRITABLE, Mode::Edge)?;
            streams.push(s);
            pending += 1;
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token as usize;
            match streams[i].state(&rt)? {
                State::Established if !established[i] => {
                    established[i] = true;
                    pending -= 1;
                    done += 1;
                    progress = WallClock::now();
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
    // The server reads its memory once it has accepted every connection.
    probe.target.store(n, Ordering::Relaxed);
    client_until(&mut rt, "the server accepted every connection", || {
        probe.mem.load(Ordering::Relaxed) != NOT_YET
    })?;
    let rss_growth = match (rss0, own_rss()) {
        (Some(a), Some(b)) => b as i64 - a as i64,
        _ => 0,
    };

    // Hold them idle.
    let t = WallClock::now();
    while t.elapsed() < hold {
        rt.run_once(Some(Duration::from_millis(10)))?;
    }

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
            if streams[i].write(&mut rt, msg)? != size {
                bail!("ustack c1m: a {size}-byte message did not fit the send buffer");
            }
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token as usize;
            while let Some(want) = x.wanted(i) {
                match streams[i].read(&mut rt, &mut buf[..want]) {
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
            s.close(&mut rt)?;
            closed += 1;
        }
        // Then wait for the server's side of these, so that no more than a window of
        // FINs is ever in flight.
        let open = n - closed;
        client_until(&mut rt, "the server closed the connections", || {
            probe.conns.load(Ordering::Relaxed) <= open
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
        x.ok,
        x.lat,
    );
    o.c1m = Some(C1m {
        establish,
        exchange,
        close,
        mem_bytes: 0,
        mem_detail: serde_json::Value::Null,
    });
    Ok((o, rt, rss_growth))
}

/// The sum of a figure over peers (None if any could not be read).
fn sum(peers: &[Peer], f: impl Fn(&Peer) -> Option<u64>) -> Option<u64> {
    peers.iter().map(f).sum()
}

/// How long a Linux c1m phase may take in all (the peers fail sooner if stalled).
const PHASE: Duration = Duration::from_secs(600);

/// c1m on Linux over loopback, servers and clients in processes of their own.
pub fn linux(run: &Run, hold: Duration) -> anyhow::Result<Outcome> {
    let (n, size) = (run.conns as usize, run.size);
    let procs = n.div_ceil(PER_PROCESS);
    let (first, port) = Peer::spawn("echo", &[])?;
    let mut servers = vec![first];
    for _ in 1..procs {
        servers.push(Peer::spawn("echo", &["--port".into(), port.to_string()])?.0);
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
    let rss0 = sum(&servers, Peer::rss);
    let slab0 = linux::kernel_slab();
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
    let rss1 = sum(&servers, Peer::rss);
    let slab1 = linux::kernel_slab();

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
    let mem = (rss + slab / 2).max(0) as u64;
    let mut o = Outcome::echo(
        "c1m", "linux", "loopback", run.conns, size, n as u64, elapsed, verified, lat,
    );
    o.server_cpu = cpu;
    o.c1m = Some(C1m {
        establish,
        exchange,
        close,
        mem_bytes: mem,
        mem_detail: json!({
            "rss_bytes": rss,
            "kernel_slab_bytes": slab,
            "kernel_slab_source": source,
            "processes": procs,
            "pids": pids,
        }),
    });
    Ok(o)
}
