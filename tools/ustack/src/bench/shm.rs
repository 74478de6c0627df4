//! ustack over the shm link: the server on its own threads over side A of a
//! [`ShmLink::pair`] (one shard per queue pair, `--shards`: [`Servers`]), the client
//! runtime on the bench thread over side B (through an [`RssSplitter`] when there are
//! several queue pairs). Each loop busy-polls for [`BUSY_POLL`] (`net.core.busy_poll`)
//! before sleeping on its doorbell, so a round trip costs the two stacks and two
//! cache-line hand-offs between cores, and no wake-up while the exchange is steady.
//!
//! The server is measured alone: its shard threads' CPU time (`CLOCK_THREAD_CPUTIME_ID`,
//! read on each) from when they listen to the end, and its MIB (summed over the shards).
//! It runs the same servers as `ustack serve` where one fits (the echo server of
//! `ustack_apps` for pingpong); udp-rr has a UDP echo loop, cps a server that
//! replies and closes, and stream a sink that checks every byte against the pattern.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::any::Any;
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_apps::{Protocol, Server};
use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort, ShmStats};
use ustack_dev::xdp::XdpQueue;
use ustack_obs::Mib;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream, UdpSocket};
use ustack_runtime::multi::{RssSplitter, ShardApp, ShardContext, ShardedBuilder, ShardedRuntime};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{Events, Interest, MonotonicClock, Runtime, RuntimeBuilder, Sleep};
use ustack_stack::EthernetAddress;
use ustack_stack::tcp::State;

use super::linux::ClientPin;
use super::{
    Outcome, Run, fill_message, message_matches, stream_chunk, stream_matches, stream_next,
};

pub(super) const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 5001);
/// `--ipv6`: the server's and the client's IPv6 addresses (on 2001:db8::/64, RFC 3849's
/// documentation prefix), beside their IPv4 ones.
const SERVER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
/// How long an idle loop polls before it sleeps on its doorbell: Linux's suggested
/// `net.core.busy_poll` (Documentation/networking/napi.rst suggests 50 µs).
pub const BUSY_POLL: Duration = Duration::from_micros(50);
/// The longest the client's loop may go without an event (a reply, a connection
/// established) before the run fails. It bounds a stall, not a round: a round of 10,000
/// connections takes longer than one of 10 without anything being wrong.
const PATIENCE: Duration = Duration::from_secs(2);

pub(super) type Rt = Runtime<ShmPort, MonotonicClock>;

/// The link: Ethernet with loopback's MTU (65535, as `--link sim` and Linux's `lo`), so
/// that stream moves segments of the same size on every server. 64 slots of 64 KiB per
/// direction: 4 MiB in flight each way, more than the 4 MiB send buffer can fill. With
/// `queue_pairs` of them: side A's queues (the server's) and side B's. A burst of more
/// frames than slots (a pingpong round of 10,000 connections) is not dropped: the runtime
/// gives the port no more than its free slots (`Device::tx_space`), the rest waits in the
/// stack's transmit queue, and connections wait for room in that (docs/bench.md, "A
/// clean link drops nothing").
pub(super) fn link(queue_pairs: usize) -> io::Result<(Vec<ShmPort>, Vec<ShmPort>)> {
    link_with(queue_pairs, 64)
}

/// Slots per direction of stream's link: 16 of 64 KiB, 1 MiB in flight each way, the
/// size of the development machine's L2 cache per core. A stream keeps every slot full,
/// and the slots' bytes are written on one core and read on the other: with 64 (4 MiB)
/// they went through memory; with 16 a slot is written again while its lines are still
/// cached, and the run cost about a quarter less CPU per byte (docs/bench.md, "shm stream
/// and xdp"). The rest of the window waits in the stack's transmit queue, as
/// [`link`]'s bursts do (the runtime hands the port no more than its free slots).
pub const STREAM_RING_SIZE: usize = 16;

/// The link for scenario `name`: stream's with [`STREAM_RING_SIZE`] slots, the others'
/// with [`link`]'s 64.
fn link_for(name: &str, queue_pairs: usize) -> io::Result<(Vec<ShmPort>, Vec<ShmPort>)> {
    match name {
        "udp-rr" | "pingpong" | "cps" => link(queue_pairs),
        _ => link_with(queue_pairs, STREAM_RING_SIZE),
    }
}

fn link_with(queue_pairs: usize, ring_size: usize) -> io::Result<(Vec<ShmPort>, Vec<ShmPort>)> {
    ShmLink::pair(&ShmConfig {
        queue_pairs,
        ring_size,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    })
}

/// Both runtimes: TCP buffers the size Linux's autotuning reaches on loopback.
pub(super) fn builder(ip: Ipv4Addr, mac: u8, seed: u64) -> RuntimeBuilder {
    RuntimeBuilder::new()
        .ipv4(ip, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, mac]))
        .seed(seed)
        .busy_poll(BUSY_POLL)
        .sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
        .sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
}

/// A runtime of one end of the bench's shm link: both ends skip TCP/UDP checksums unless
/// `--checksums` (a shm link cannot corrupt a frame; Linux's loopback skips them too).
pub(super) fn shm_builder(ip: Ipv4Addr, mac: u8, seed: u64, run: &Run) -> RuntimeBuilder {
    ustack_poll(builder(ip, mac, seed), run).checksum_offload(!run.checksums)
}

/// `--ustack-poll`: adaptive (the runtime's default), fixed (the whole [`BUSY_POLL`]
/// after every burst) or sleep (no busy polling: sleep on the doorbell at once).
pub(super) fn ustack_poll(b: RuntimeBuilder, run: &Run) -> RuntimeBuilder {
    match run.ustack_poll.as_str() {
        "fixed" => b.busy_poll_adaptive(false),
        "sleep" => b.busy_poll(Duration::ZERO),
        _ => b,
    }
}

/// `--ipv6`: `builder` with the IPv6 address `ip6`/64 too. Without duplicate address
/// detection (`accept_dad` 0), as Linux's loopback, which the other side of the
/// comparison runs over, has none (addrconf skips it for `IFF_LOOPBACK` devices): the
/// link is two ends of one process's shared memory, and a run starts at once.
fn with_family(builder: RuntimeBuilder, ip6: Ipv6Addr, run: &Run) -> RuntimeBuilder {
    if run.ipv6 {
        builder
            .ipv6(ip6, 64)
            .sysctl("net.ipv6.conf.default.accept_dad", 0)
    } else {
        builder
    }
}

/// The server's address in the run's family.
fn server_addr(run: &Run) -> SocketAddr {
    if run.ipv6 {
        SocketAddr::new(SERVER_IP6.into(), SERVER.port())
    } else {
        SERVER.into()
    }
}

/// The JSON's `addresses` of a ustack connection, as its client sees them.
fn stream_addresses<D: Device + Sleep>(rt: &Runtime<D>, s: &TcpStream) -> Value {
    super::linux::addresses_json(
        s.local_addr(rt).ok().map(|a| a.to_string()),
        s.peer_addr(rt).ok().map(|a| a.to_string()),
    )
}

/// An shm port's counters as JSON (what `link_stats` reports for each end); a device
/// that is not one (or a splitter over several) gives their sum, an xdp queue its own
/// ([`super::kernel_link::xdp_stats`]), anything else null.
pub(super) fn shm_stats(device: &dyn Any) -> Value {
    if let Some(q) = device.downcast_ref::<XdpQueue>() {
        return super::kernel_link::xdp_stats(q);
    }
    shm_counters(device).map_or(Value::Null, |t| shm_json(&t))
}

/// The counters of an shm port, or the sum over a splitter's; `None` for any other
/// device. Plain numbers, cheap enough to take after every round (the server's shards
/// do, [`LinkCounters`]).
fn shm_counters(device: &dyn Any) -> Option<ShmStats> {
    let ports: &[ShmPort] = if let Some(p) = device.downcast_ref::<ShmPort>() {
        core::slice::from_ref(p)
    } else if let Some(s) = device.downcast_ref::<RssSplitter<ShmPort>>() {
        s.queues()
    } else {
        return None;
    };
    let mut t = ShmStats::default();
    for s in ports.iter().map(ShmPort::stats) {
        t.tx_frames += s.tx_frames;
        t.tx_full += s.tx_full;
        t.tx_too_big += s.tx_too_big;
        t.tx_stopped += s.tx_stopped;
        t.tx_lent += s.tx_lent;
        t.tx_unfilled += s.tx_unfilled;
        t.rx_frames += s.rx_frames;
        t.rx_truncated += s.rx_truncated;
        t.rx_held += s.rx_held;
        t.rx_kept += s.rx_kept;
        t.rx_kept_released += s.rx_kept_released;
        t.bad_release += s.bad_release;
        t.bad_desc += s.bad_desc;
        t.bad_comp += s.bad_comp;
        t.bad_index += s.bad_index;
        t.doorbells += s.doorbells;
        t.sleeps += s.sleeps;
    }
    Some(t)
}

fn shm_json(t: &ShmStats) -> Value {
    json!({
        "tx_frames": t.tx_frames,
        "tx_full": t.tx_full,
        "tx_too_big": t.tx_too_big,
        "tx_stopped": t.tx_stopped,
        "tx_lent": t.tx_lent,
        "tx_unfilled": t.tx_unfilled,
        "rx_frames": t.rx_frames,
        "rx_truncated": t.rx_truncated,
        "rx_held": t.rx_held,
        "rx_kept": t.rx_kept,
        "rx_kept_released": t.rx_kept_released,
        "bad_release": t.bad_release,
        "bad_desc": t.bad_desc,
        "bad_comp": t.bad_comp,
        "bad_index": t.bad_index,
        "doorbells": t.doorbells,
        "sleeps": t.sleeps,
    })
}

/// A shard's link counters as of its last poll: an shm port's numbers as they are (made
/// JSON only when the shard stops: building the JSON object after every round cost the
/// udp-rr server about a tenth of its CPU), any other device's [`shm_stats`].
#[derive(Default)]
enum LinkCounters {
    #[default]
    None,
    Shm(ShmStats),
    Other(Value),
}

impl LinkCounters {
    fn take(device: &dyn Any) -> LinkCounters {
        match shm_counters(device) {
            Some(t) => LinkCounters::Shm(t),
            None => LinkCounters::Other(shm_stats(device)),
        }
    }

    fn json(&self) -> Value {
        match self {
            LinkCounters::None => Value::Null,
            LinkCounters::Shm(t) => shm_json(t),
            LinkCounters::Other(v) => v.clone(),
        }
    }
}

/// The calling thread's CPU time.
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What a sink read on one connection: the bytes received and checked, whether all
/// matched the pattern, and when the last one arrived.
pub(super) type SinkReport = (u64, bool, WallClock);

/// stream's record, shared by the server's shards: each connection accepted (its peer's
/// port and the shard that took it, in order) and each read to its end (its peer's port
/// and what it read).
#[derive(Debug, Default, Clone)]
pub(super) struct SinkBook {
    pub(super) accepted: Vec<(u16, usize)>,
    pub(super) done: Vec<(u16, SinkReport)>,
}

impl SinkBook {
    /// The shard that took the connection from peer port `port`, once it has.
    pub(super) fn shard_of(&self, port: u16) -> Option<usize> {
        // The latest: a port the kernel used again is its latest connection's.
        self.accepted
            .iter()
            .rev()
            .find_map(|&(p, k)| (p == port).then_some(k))
    }

    /// What the connection from peer port `port` read, once it reached its end.
    pub(super) fn read(&self, port: u16) -> Option<SinkReport> {
        self.done
            .iter()
            .rev()
            .find_map(|&(p, r)| (p == port).then_some(r))
    }
}

/// What the server's shards measured, from when they all listened to the end.
pub(super) struct ServerReport {
    /// The shard threads' CPU time, summed.
    pub(super) cpu: Duration,
    /// The shards' counters, summed.
    pub(super) counters: Value,
    /// TIME-WAIT records at the end, summed.
    time_wait: usize,
    /// stream: what the sinks accepted and read.
    pub(super) sink: SinkBook,
    /// With more than one shard, per shard: its thread's CPU time and its counters
    /// (null with one).
    pub(super) per_shard: Value,
    /// The server's end of the link ([`shm_stats`]), summed over the shards.
    pub(super) link: Value,
}

/// The server's part of a scenario.
#[derive(Clone, Copy)]
pub(super) enum Serve {
    UdpEcho,
    TcpEcho,
    /// cps: read one request of this many bytes, send it back, close.
    ReplyAndClose(usize),
    Sink,
}

/// How long the shards may take to answer the bench (a CPU reading, the counters).
const ANSWER: Duration = Duration::from_secs(5);

/// The ustack server: one shard per device queue, each a thread with its own stack and
/// the scenario's server ([`ShardServe`]) on it (`ustack_runtime::multi`), so that one
/// shard or N run the same code. The shards' CPU time is read on each shard's own thread
/// (`CLOCK_THREAD_CPUTIME_ID`) when they all listen and again at the end.
pub(super) struct Servers {
    rt: ShardedRuntime<ShardServe>,
    cpu0: Vec<Duration>,
    sink: Arc<Mutex<SinkBook>>,
}

impl Servers {
    /// The server of `serve` on `addr`, one shard per device, runtimes from `builder`
    /// (shard `k` seeded with `seed + k`), flows spread over the shards by Toeplitz RSS.
    pub(super) fn start<D: Device + Sleep + Send + 'static>(
        serve: Serve,
        builder: RuntimeBuilder,
        seed: u64,
        devices: Vec<D>,
        addr: SocketAddr,
    ) -> anyhow::Result<Servers> {
        let sink = Arc::new(Mutex::new(SinkBook::default()));
        let slot = sink.clone();
        let rt = ShardedBuilder::new(builder, Rss::new(RssKey::MICROSOFT, devices.len()))
            .seed(seed)
            .start(devices, move |shard| ShardServe {
                serve,
                shard,
                addr,
                sink: slot.clone(),
                state: None,
                link: LinkCounters::None,
            })
            .context("starting the ustack server")?;
        let cpu0 = rt
            .on_each_shard(|_, _, _| thread_cpu(), ANSWER)
            .context("reading the server shards' CPU time")?;
        Ok(Servers { rt, cpu0, sink })
    }

    /// Pin each server shard and the calling thread (the client) to a CPU of its own, as
    /// Linux's busy mode pins its server and client (`LinuxMode::cpus`: the client on the
    /// first CPU, the server on the next), when the bench may use enough CPUs; the client's
    /// affinity comes back when the returned guard is dropped (`bench --pin`). Unpinned,
    /// the scheduler sometimes kept both threads on one core and a woken one waited for
    /// the other's tick: whole cps runs at 107,000-117,000 conns/s with p99 1.18 ms against
    /// 180,000-190,000 and p99 ~100 µs; pinned, every wake-up crosses CPUs, which costs
    /// pingpong here (docs/bench.md, "Pinned threads").
    pub(super) fn pin(&self) -> anyhow::Result<Option<(ClientPin, Value)>> {
        let allowed = ustack_baseline::current_affinity().context("the bench's CPUs")?;
        let cpus: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| allowed.is_set(c))
            .collect();
        let shards = self.rt.shards();
        if cpus.len() < shards + 1 {
            return Ok(None);
        }
        let shard_cpus = cpus[1..=shards].to_vec();
        let report = json!({ "server": shard_cpus, "client": cpus[0] });
        let pinned = self
            .rt
            .on_each_shard(
                move |k, _, _| ustack_baseline::pin_current_thread(shard_cpus[k]),
                ANSWER,
            )
            .context("pinning the server's shards")?;
        for r in pinned {
            r.context("pinning a server shard")?;
        }
        Ok(Some((ClientPin::new(Some(cpus[0]))?, report)))
    }

    /// Whether the sink has read a stream to its end.
    pub(super) fn sunk(&self) -> bool {
        self.sink.lock().is_ok_and(|s| !s.done.is_empty())
    }

    /// What the sinks have accepted and read so far.
    pub(super) fn book(&self) -> SinkBook {
        self.sink.lock().map(|b| b.clone()).unwrap_or_default()
    }

    /// Stop the shards; what they measured.
    pub(super) fn finish(self) -> anyhow::Result<ServerReport> {
        let read = self.rt.on_each_shard(
            |_, stack, _| {
                let timewait = stack.tcp_resources().timewait;
                (thread_cpu(), stack.mib().clone(), timewait)
            },
            ANSWER,
        );
        let shards = self.rt.shards();
        let sink = self.book();
        let mut link = Value::Null;
        for (k, app) in self.rt.stop().into_iter().enumerate() {
            let app = app.with_context(|| format!("the ustack server (shard {k})"))?;
            link = add_stats(link, app.link.json());
        }
        let read = read.context("reading the server shards' counters")?;
        let (mut cpu, mut mib, mut time_wait) = (Duration::ZERO, Mib::new(), 0);
        let mut per_shard = Vec::new();
        for ((cpu1, m, tw), cpu0) in read.into_iter().zip(self.cpu0) {
            let used = cpu1.saturating_sub(cpu0);
            cpu += used;
            mib.merge(&m);
            time_wait += tw;
            per_shard.push(json!({ "server_cpu_s": used.as_secs_f64(), "counters": m.to_json() }));
        }
        Ok(ServerReport {
            cpu,
            counters: mib.to_json(),
            time_wait,
            sink,
            per_shard: if shards > 1 {
                Value::Array(per_shard)
            } else {
                Value::Null
            },
            link,
        })
    }
}

/// One shard's server, made and bound on the shard's thread; the shard's loop runs the
/// stack, then [`ShardApp::poll`] serves what came without waiting.
pub(super) struct ShardServe {
    serve: Serve,
    /// The shard's index.
    shard: usize,
    addr: SocketAddr,
    /// Where the sink notes what it accepted and read (every shard's).
    sink: Arc<Mutex<SinkBook>>,
    state: Option<Serving>,
    /// The shard's link counters as of its last poll (read after the shard stops).
    link: LinkCounters,
}

/// What a shard serves, once bound.
enum Serving {
    Udp(UdpSocket, Vec<u8>),
    Echo(Server),
    ReplyClose(ReplyClose),
    Sink(Sink),
}

impl<D: Device + Sleep + 'static> ShardApp<D> for ShardServe {
    fn start(&mut self, ctx: &mut ShardContext<'_, D>) -> io::Result<()> {
        let (rt, addr) = (&mut *ctx.rt, self.addr);
        self.state = Some(match self.serve {
            Serve::UdpEcho => Serving::Udp(UdpSocket::bind(rt, addr)?, vec![0u8; 65_536]),
            Serve::TcpEcho => Serving::Echo(Server::bind(rt, Protocol::Echo, addr, None)?),
            Serve::ReplyAndClose(size) => Serving::ReplyClose(ReplyClose::bind(rt, addr, size)?),
            Serve::Sink => Serving::Sink(Sink::bind(rt, addr)?),
        });
        Ok(())
    }

    fn poll(&mut self, ctx: &mut ShardContext<'_, D>) -> io::Result<()> {
        let rt = &mut *ctx.rt;
        self.link = LinkCounters::take(rt.device());
        match &mut self.state {
            Some(Serving::Udp(sock, buf)) => loop {
                match sock.recv_from_addr(rt, buf) {
                    Ok((n, from)) => {
                        sock.send_to(rt, &buf[..n], from)?;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
            },
            Some(Serving::Echo(server)) => server.step(rt, Some(Duration::ZERO)).map(drop),
            Some(Serving::ReplyClose(r)) => r.step(rt),
            Some(Serving::Sink(sink)) => sink.step(rt, self.shard, &self.sink),
            None => Ok(()),
        }
    }
}

/// cps's server: accept, read a `size`-byte request, send it back and close (the server
/// closes first, as an HTTP/1.0 server does, so TIME-WAIT stays here).
struct ReplyClose {
    listener: TcpListener,
    size: usize,
    events: Events,
    conns: HashMap<u64, (TcpStream, Vec<u8>)>,
    next: u64,
    buf: Vec<u8>,
}

/// The listener's token.
const LISTENER: u64 = u64::MAX;

impl ReplyClose {
    fn bind<D: Device + Sleep>(
        rt: &mut Runtime<D>,
        addr: SocketAddr,
        size: usize,
    ) -> io::Result<ReplyClose> {
        let backlog = u32::try_from(rt.stack().sysctl().somaxconn).unwrap_or(u32::MAX);
        let listener = TcpListener::bind(rt, addr, backlog)?;
        rt.register(&listener, LISTENER, Interest::READABLE, Mode::Edge)?;
        Ok(ReplyClose {
            listener,
            size,
            events: Events::with_capacity(256),
            conns: HashMap::new(),
            next: 0,
            buf: vec![0u8; 4096],
        })
    }

    /// Serve what is ready, without waiting.
    fn step<D: Device + Sleep>(&mut self, rt: &mut Runtime<D>) -> io::Result<()> {
        rt.poll(&mut self.events, Some(Duration::ZERO))?;
        for e in &self.events {
            if e.token == LISTENER {
                loop {
                    match self.listener.accept(rt) {
                        Ok((s, _)) => {
                            s.set_nodelay(rt, true)?;
                            rt.register(&s, self.next, Interest::READABLE, Mode::Edge)?;
                            self.conns
                                .insert(self.next, (s, Vec::with_capacity(self.size)));
                            self.next += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            let Some((s, got)) = self.conns.get_mut(&e.token) else {
                continue;
            };
            let done = loop {
                match s.read(rt, &mut self.buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        got.extend_from_slice(&self.buf[..n]);
                        if got.len() >= self.size {
                            s.write(rt, got)?;
                            break true;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if done && let Some((s, _)) = self.conns.remove(&e.token) {
                s.close(rt)?;
            }
        }
        Ok(())
    }
}

/// stream's server: accept connections and read each to its end, checking every byte
/// (each carries the pattern from its start).
struct Sink {
    listener: TcpListener,
    /// The connections being read: the stream, its peer's port, and what it read so far.
    conns: Vec<(TcpStream, u16, SinkReport)>,
    chunk: Vec<u8>,
    buf: Vec<u8>,
}

impl Sink {
    fn bind<D: Device + Sleep>(rt: &mut Runtime<D>, addr: SocketAddr) -> io::Result<Sink> {
        Ok(Sink {
            listener: TcpListener::bind(rt, addr, 16)?,
            conns: Vec::new(),
            chunk: stream_chunk(),
            buf: vec![0u8; 1 << 16],
        })
    }

    /// Accept and read what has come, without waiting; each connection accepted, and each
    /// that reached its end, noted in `book` (as shard `shard`'s).
    fn step<D: Device + Sleep>(
        &mut self,
        rt: &mut Runtime<D>,
        shard: usize,
        book: &Mutex<SinkBook>,
    ) -> io::Result<()> {
        let poisoned = || io::Error::other("the sink's book is poisoned");
        loop {
            match self.listener.accept(rt) {
                Ok((s, peer)) => {
                    let mut b = book.lock().map_err(|_| poisoned())?;
                    b.accepted.push((peer.port(), shard));
                    self.conns
                        .push((s, peer.port(), (0, true, WallClock::now())));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        let mut k = 0;
        while k < self.conns.len() {
            let (stream, _, (got, verified, last)) = &mut self.conns[k];
            let ended = loop {
                match stream.read(rt, &mut self.buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        *verified &= stream_matches(&self.chunk, *got, &self.buf[..n]);
                        *got += n as u64;
                        *last = WallClock::now();
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                    Err(e) => return Err(e),
                }
            };
            if ended {
                let (s, port, report) = self.conns.swap_remove(k);
                s.close(rt)?;
                book.lock()
                    .map_err(|_| poisoned())?
                    .done
                    .push((port, report));
            } else {
                k += 1;
            }
        }
        Ok(())
    }
}

/// The scenario `name` (udp-rr, pingpong, cps or stream) over an shm link with `shards`
/// queue pairs: the server on one shard per queue pair, the client on the bench thread
/// over the other side (with several shards, through an [`RssSplitter`] that steers each
/// frame to its flow's shard, as a NIC with RSS would). The stacks' seeds from `--seed`
/// (server shard `k`: seed + 1 + k, client: seed + 2).
pub fn scenario(name: &str, run: &Run, shards: usize) -> anyhow::Result<Outcome> {
    let serve = match name {
        "udp-rr" => Serve::UdpEcho,
        "pingpong" => Serve::TcpEcho,
        "cps" => Serve::ReplyAndClose(run.size),
        _ => Serve::Sink,
    };
    let (a, mut b) = link_for(name, shards).context("creating the shm link")?;
    let server = Servers::start(
        serve,
        with_family(shm_builder(SERVER_IP, 1, 0, run), SERVER_IP6, run),
        run.seed.wrapping_add(1),
        a,
        server_addr(run),
    )?;
    let (_pin, cpus) = if run.pin { server.pin()? } else { None }.unzip();
    // The stream's sender writes its bytes straight into transmit slots it holds until
    // they are acknowledged (`RuntimeBuilder::tx_hold`, opt-in as Linux's `MSG_ZEROCOPY`
    // is: fit for one bulk sender, not for many connections sharing the ring).
    let client = with_family(
        shm_builder(CLIENT_IP, 2, run.seed.wrapping_add(2), run).tx_hold(name == "stream"),
        CLIENT_IP6,
        run,
    );
    let mut o = if shards == 1 {
        let rt = client.build(b.remove(0));
        drive(
            name,
            run,
            rt.context("building the client runtime")?,
            server,
        )
    } else {
        let splitter = RssSplitter::new(b, Rss::new(RssKey::MICROSOFT, shards));
        let rt = client.build(splitter.replicate_unhashed(true));
        drive(
            name,
            run,
            rt.context("building the client runtime")?,
            server,
        )
    }?;
    o.shards = shards;
    o.cpus = cpus.unwrap_or_default();
    Ok(o)
}

/// The client's part of scenario `name`, on `rt`, against `server`.
fn drive<D: Device + Sleep + 'static>(
    name: &str,
    run: &Run,
    rt: Runtime<D>,
    server: Servers,
) -> anyhow::Result<Outcome> {
    match name {
        "udp-rr" => udp_rr(run, rt, server),
        "pingpong" => lockstep(run, rt, server, false),
        "cps" => lockstep(run, rt, server, true),
        _ => stream(run, rt, server),
    }
}

/// Run the client's loop until `done` holds, failing after [`PATIENCE`] without an event;
/// `done` sees the events of the last poll (none the first time).
fn until<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    events: &mut Events,
    what: &str,
    mut done: impl FnMut(&mut Runtime<D>, &Events) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let mut deadline = WallClock::now() + PATIENCE;
    events.clear();
    while !done(rt, events)? {
        if WallClock::now() > deadline {
            bail!("ustack over shm: {what} (nothing came for {PATIENCE:?})");
        }
        if rt.poll(events, Some(PATIENCE))? > 0 {
            deadline = WallClock::now() + PATIENCE;
        }
    }
    Ok(())
}

/// The outcome with the server's and the client's counters and the server's CPU time.
fn finish<D: Device + Sleep + 'static>(
    rt: &Runtime<D>,
    server: ServerReport,
    o: Outcome,
) -> Outcome {
    let mut o = o.with_counters(server.counters, rt.stack().mib().to_json());
    o.server_cpu = Some(server.cpu);
    o.per_shard = server.per_shard;
    o.link_stats = json!({ "server": server.link, "client": shm_stats(rt.device()) });
    o
}

/// Two [`shm_stats`] objects added field by field (null is nothing).
fn add_stats(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, v) in b {
                let merged = match (a.get(&k), &v) {
                    // A setting every queue has (xdp's `need_wakeup`): true if all have it.
                    (Some(Value::Bool(x)), Value::Bool(y)) => json!(*x && *y),
                    // A queue's own size, not a count: the same on every queue.
                    (Some(x), _) if k == "tx_budget" => x.clone(),
                    (x, v) => {
                        json!(x.and_then(Value::as_u64).unwrap_or(0) + v.as_u64().unwrap_or(0))
                    }
                };
                a.insert(k, merged);
            }
            Value::Object(a)
        }
        (Value::Null, b) => b,
        (a, _) => a,
    }
}

fn udp_rr<D: Device + Sleep + 'static>(
    run: &Run,
    mut rt: Runtime<D>,
    server: Servers,
) -> anyhow::Result<Outcome> {
    let size = run.size;
    let server_at = server_addr(run);
    let client_ip = if run.ipv6 {
        CLIENT_IP6.into()
    } else {
        CLIENT_IP.into()
    };
    let sock = UdpSocket::bind(&mut rt, SocketAddr::new(client_ip, 0))?;
    let mut peer = None;
    rt.register(&sock, 0, Interest::READABLE, Mode::Edge)?;
    let mut events = Events::with_capacity(4);
    let (mut req, mut resp) = (vec![0u8; size], vec![0u8; 65_536]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        sock.send_to(&mut rt, &req, server_at)?;
        let mut n = 0;
        until(
            &mut rt,
            &mut events,
            "a UDP echo came back",
            |rt, _| match sock.recv_from_addr(rt, &mut resp) {
                Ok((len, from)) => {
                    n = len;
                    peer = Some(from);
                    Ok(true)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(e.into()),
            },
        )?;
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = m.elapsed();
    let report = server.finish()?;
    let mut o = Outcome::echo(
        "udp-rr", "ustack", "shm", 1, size, seq, elapsed, verified, rtt_ns,
    );
    o.addresses = super::linux::addresses_json(
        sock.local_sockaddr(&rt).ok().map(|a| a.to_string()),
        peer.map(|a| a.to_string()),
    );
    Ok(finish(&rt, report, o))
}

/// Open `n` connections to the server and wait until all are established (writable);
/// then each is registered for `interest`, with `base` plus its index as the token
/// (events of other tokens are not theirs, and are passed over).
pub(super) fn connect<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    events: &mut Events,
    n: u32,
    interest: Interest,
    base: u64,
) -> anyhow::Result<Vec<TcpStream>> {
    connect_to(rt, events, SERVER.into(), n, (interest, base))
}

/// [`connect`] to `server`.
fn connect_to<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    events: &mut Events,
    server: SocketAddr,
    n: u32,
    (interest, base): (Interest, u64),
) -> anyhow::Result<Vec<TcpStream>> {
    let mut streams = Vec::new();
    let mut established = vec![false; n as usize];
    let mut left = n as usize;
    for i in 0..n {
        let s = TcpStream::connect(rt, server)?;
        s.set_nodelay(rt, true)?;
        rt.register(&s, base + u64::from(i), Interest::WRITABLE, Mode::Edge)?;
        streams.push(s);
        if i == 0 {
            // One connection alone first: its SYN resolves the server's address (ARP),
            // which a burst would overflow the queue of packets waiting for
            // (`unres_qlen`, NEIGH_QUEUEFULL), costing the rest a 1 s SYN timeout.
            let first = &streams[0];
            until(rt, events, "the first connection established", |rt, _| {
                Ok(first.state(rt)? == State::Established)
            })?;
            established[0] = true;
            left -= 1;
        }
    }
    // Counted from the events (each stream becomes writable once, when established), not
    // by asking every stream after every poll, which costs O(n^2) at 10,000 connections.
    until(rt, events, "every connection established", |rt, events| {
        for e in events {
            let Some(i) = ours(e.token, base, &streams) else {
                continue;
            };
            match streams[i].state(rt)? {
                State::Established if !established[i] => {
                    established[i] = true;
                    left -= 1;
                }
                State::Closed => bail!("ustack over shm: connection {i} failed to connect"),
                _ => {}
            }
        }
        Ok(left == 0)
    })?;
    for (i, s) in streams.iter().enumerate() {
        rt.reregister(s, base + i as u64, interest, Mode::Edge)?;
    }
    Ok(streams)
}

/// The index in `streams` of the event token `token`, if it is one of theirs (tokens
/// `base..base + len`).
fn ours(token: u64, base: u64, streams: &[TcpStream]) -> Option<usize> {
    let i = usize::try_from(token.checked_sub(base)?).ok()?;
    (i < streams.len()).then_some(i)
}

fn close_all<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    streams: Vec<TcpStream>,
) -> anyhow::Result<()> {
    for s in streams {
        s.close(rt)?;
    }
    // Let the FINs go out and be answered before the server stops.
    let end = WallClock::now() + Duration::from_millis(5);
    while WallClock::now() < end {
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    Ok(())
}

/// What a lock-step round reads, kept from round to round so that a round allocates
/// nothing per message (a fresh `Vec` per echo cost a `malloc`, and a table of them per
/// round 240 KiB to zero, at 10,000 connections): per stream, how many bytes of its echo
/// came (each piece checked as it comes, [`message_matches`]) and whether it is done.
#[derive(Default)]
pub(super) struct Echoes {
    got: Vec<usize>,
    ended: Vec<bool>,
    msg: Vec<u8>,
    buf: Vec<u8>,
}

impl Echoes {
    /// Ready for a round of `n` streams and `size`-byte messages.
    fn reset(&mut self, n: usize, size: usize) {
        self.got.clear();
        self.got.resize(n, 0);
        self.ended.clear();
        self.ended.resize(n, false);
        self.msg.resize(size, 0);
        self.buf.resize(4096, 0);
    }
}

/// One lock-step round: every stream sends one `size`-byte message (message `seq0 + i` on
/// stream `i`, registered with token `base + i`) and reads its echo; with `to_fin`, also
/// the server's FIN after it. Whether every echo was right.
pub(super) fn round<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    (events, e): (&mut Events, &mut Echoes),
    (streams, base): (&[TcpStream], u64),
    seq0: u64,
    size: usize,
    to_fin: bool,
) -> anyhow::Result<bool> {
    e.reset(streams.len(), size);
    for (i, s) in streams.iter().enumerate() {
        fill_message(&mut e.msg, seq0 + i as u64);
        if s.write(rt, &e.msg)? != size {
            bail!("ustack: a {size}-byte message did not fit the send buffer");
        }
    }
    let (mut left, mut verified) = (streams.len(), true);
    until(
        rt,
        events,
        "every echo of a round came back",
        |rt, events| {
            for ev in events {
                let Some(i) = ours(ev.token, base, streams) else {
                    continue;
                };
                while !e.ended[i] {
                    match streams[i].read(rt, &mut e.buf) {
                        Ok(0) if to_fin => e.ended[i] = true,
                        Ok(0) => bail!("ustack: the server closed a connection"),
                        Ok(n) => {
                            let seq = seq0 + i as u64;
                            verified &=
                                e.got[i] + n <= size && message_matches(seq, e.got[i], &e.buf[..n]);
                            e.got[i] += n;
                            e.ended[i] = !to_fin && e.got[i] >= size;
                        }
                        Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                        Err(err) => return Err(err.into()),
                    }
                    if e.ended[i] {
                        left -= 1;
                    }
                }
            }
            Ok(left == 0)
        },
    )?;
    Ok(verified && e.got.iter().all(|&g| g == size))
}

/// pingpong (`cps` false): `conns` connections kept for the run, one message each per
/// round; cps: rounds of `conns` short connections, each: connect, one `size`-byte
/// request, its echo, the server's FIN, our close. A round's time is the latency recorded.
fn lockstep<D: Device + Sleep + 'static>(
    run: &Run,
    mut rt: Runtime<D>,
    server: Servers,
    cps: bool,
) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let mut events = Events::with_capacity(1024);
    let server_at = server_addr(run);
    let reading = (Interest::READABLE, 0);
    let kept = if cps {
        Vec::new()
    } else {
        connect_to(&mut rt, &mut events, server_at, conns, reading)?
    };
    let mut addresses = kept.first().map(|s| stream_addresses(&rt, s));
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let mut echoes = Echoes::default();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let seq0 = rounds * u64::from(conns);
        if cps {
            let fresh = connect_to(&mut rt, &mut events, server_at, conns, reading)?;
            if addresses.is_none() {
                addresses = fresh.first().map(|s| stream_addresses(&rt, s));
            }
            let ev = (&mut events, &mut echoes);
            verified &= round(&mut rt, ev, (&fresh, 0), seq0, size, true)?;
            for s in fresh {
                s.close(&mut rt)?;
            }
        } else {
            let ev = (&mut events, &mut echoes);
            verified &= round(&mut rt, ev, (&kept, 0), seq0, size, false)?;
        }
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let elapsed = m.elapsed();
    close_all(&mut rt, kept)?;
    let report = server.finish()?;
    let count = rounds * u64::from(conns);
    let time_wait = report.time_wait;
    let scenario = if cps { "cps" } else { "pingpong" };
    let mut o = Outcome::echo(
        scenario, "ustack", "shm", conns, size, count, elapsed, verified, rtt_ns,
    );
    o.addresses = addresses.unwrap_or_default();
    let o = finish(&rt, report, o);
    Ok(if cps { o.with_time_wait(time_wait) } else { o })
}

/// stream: for `--duration`, or until exactly `--bytes` are sent; the rate is the bytes
/// the server read over the time to the last of them.
fn stream<D: Device + Sleep + 'static>(
    run: &Run,
    mut rt: Runtime<D>,
    server: Servers,
) -> anyhow::Result<Outcome> {
    let mut events = Events::with_capacity(4);
    let writing = (Interest::WRITABLE, 0);
    let s = connect_to(&mut rt, &mut events, server_addr(run), 1, writing)?.remove(0);
    let addresses = stream_addresses(&rt, &s);
    let chunk = stream_chunk();
    let mut sent = 0u64;
    let mut m = run.meter();
    let limit = m.bytes();
    while m.going(sent) {
        loop {
            let piece = stream_next(&chunk, sent, limit);
            if piece.is_empty() {
                break;
            }
            match s.write(&mut rt, piece) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
    }
    // The sender's FIN: the server reads to it and notes when it came.
    s.shutdown(&mut rt, Shutdown::Write)?;
    let deadline = WallClock::now() + PATIENCE;
    while !server.sunk() {
        if WallClock::now() > deadline {
            bail!("ustack stream over shm: the server did not read to the end");
        }
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    let report = server.finish()?;
    let Some(&(_, (got, matched, last_byte))) = report.sink.done.first() else {
        bail!("ustack stream over shm: the server reported no transfer");
    };
    close_all(&mut rt, vec![s])?;
    let mut o = Outcome::stream(
        "ustack",
        "shm",
        got,
        last_byte.saturating_duration_since(m.start()),
        matched && got == sent && limit.is_none_or(|l| got == l),
    );
    o.addresses = addresses;
    Ok(finish(&rt, report, o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two xdp queues' counters: the counts add up, `need_wakeup` holds only if every
    /// queue has it, and `tx_budget` (a queue's own size) is not summed.
    #[test]
    fn queue_counters_add_up_but_settings_do_not() {
        let q = |wakeup: bool, packets: u64| json!({ "need_wakeup": wakeup, "tx_budget": 2048, "tx_packets": packets });
        let both = add_stats(add_stats(Value::Null, q(true, 3)), q(true, 4));
        assert_eq!(
            both,
            json!({ "need_wakeup": true, "tx_budget": 2048, "tx_packets": 7 })
        );
        assert_eq!(add_stats(q(true, 1), q(false, 1))["need_wakeup"], false);
    }

    /// The sink's book finds a connection's shard and report by its peer's port, the
    /// latest when the kernel used a port again.
    #[test]
    fn the_sink_book_answers_by_port_and_the_latest_wins() {
        let t = WallClock::now();
        let book = SinkBook {
            accepted: vec![(40000, 0), (40001, 1), (40000, 1)],
            done: vec![(40000, (0, true, t)), (40000, (5, true, t))],
        };
        assert_eq!(book.shard_of(40001), Some(1));
        assert_eq!(book.shard_of(40000), Some(1));
        assert_eq!(book.shard_of(40002), None);
        assert_eq!(book.read(40000).map(|r| r.0), Some(5));
        assert_eq!(book.read(40001), None);
    }
}
