//! Several shards, one thread each: [`ShardedRuntime`].
//!
//! Each shard thread owns a whole [`Runtime`]: its stack (sockets, timers, counters), its
//! device queue (queue pair `k` of a shm link, say), its poller and its clock. Nothing is
//! shared on the packet path: the device steers every flow to the queue of its shard
//! (receive-side scaling, by a Toeplitz hash of the 4-tuple, see [`crate::rss`]), and
//! outbound connections pick a local port whose replies hash back to the shard that opened
//! them ([`ShardContext::connect`], after Seastar's `connect`). The application runs on
//! every shard as a [`ShardApp`], made on the shard's own thread, so it owns its sockets
//! with no locks either.
//!
//! Listening on a port means a listener on every shard, as `SO_REUSEPORT` gives each
//! Linux worker its own listener ([`ShardedBuilder::listen`]); RSS decides which shard
//! accepts a connection.
//!
//! What the threads do share is cold: a stop flag, and a snapshot slot per shard that the
//! shard fills with its counters when a reader asks ([`ShardedRuntime::mib`] sums them
//! with [`Mib::merge`], as Linux sums per-CPU counters when `/proc/net/snmp` is read).
//!
//! ```
//! use core::net::{Ipv4Addr, SocketAddrV4};
//! use core::time::Duration;
//! use ustack_dev::Medium;
//! use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
//! use ustack_obs::Counter;
//! use ustack_runtime::RuntimeBuilder;
//! use ustack_runtime::multi::{ShardApp, ShardContext, ShardedBuilder};
//! use ustack_runtime::rss::{Rss, RssKey};
//!
//! /// Counts the connections its shard accepts.
//! struct Accept(usize);
//!
//! impl ShardApp<ShmPort> for Accept {
//!     fn poll(&mut self, ctx: &mut ShardContext<'_, ShmPort>) -> std::io::Result<()> {
//!         while let Ok((_stream, _peer)) = ctx.listeners()[0].accept(ctx.rt) {
//!             self.0 += 1;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let addr = Ipv4Addr::new(10, 0, 0, 1);
//! let config = ShmConfig { queue_pairs: 2, medium: Medium::Ip, ..ShmConfig::default() };
//! let (queues, _far_end) = ShmLink::pair(&config)?;
//! let shards = RuntimeBuilder::new().ipv4(addr, 24);
//! let rt = ShardedBuilder::new(shards, Rss::new(RssKey::MICROSOFT, 2))
//!     .listen(SocketAddrV4::new(addr, 80), 128)
//!     .start(queues, |_shard| Accept(0))?;
//! assert_eq!(rt.mib(Duration::from_secs(5))?.get(Counter::TcpPassiveOpens), 0);
//! for app in rt.stop() {
//!     assert_eq!(app?.0, 0, "nobody connected");
//! }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # No cross-shard handoff
//!
//! No frame moves between shards: with the device steering by RSS and outbound ports
//! chosen to hash home, every segment of a TCP or UDP flow arrives on the shard that owns
//! it. The cases that would need a (bounded, counted) handoff queue are not handled and
//! are left to the device: IP fragments (hashed on the address pair only, so they may
//! reach a shard that does not own the flow), ICMP errors about a flow (hashed on their
//! own addresses), and, on an Ethernet medium, ARP: a NIC sends it to queue 0, so shards
//! other than 0 never see their neighbours' replies. Run sharded stacks on an IP medium (a
//! multi-queue TUN, or a shm link with [`Medium::Ip`]), or on an Ethernet link whose far
//! end copies the frames it cannot hash to every queue
//! ([`RssSplitter::replicate_unhashed`]), so that each shard keeps its own neighbour table.
//!
//! # The loop of one shard
//!
//! [`Runtime::run_once`] with a timeout of the tick ([`ShardedBuilder::tick`]), then
//! [`ShardApp::poll`], then the stop flag and snapshot requests; so a stop or a counter
//! read is served within a tick even when the shard sleeps on an idle device.

use core::net::SocketAddr;
use core::time::Duration;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ustack_dev::{Device, DeviceCaps, Medium};
use ustack_obs::Mib;
use ustack_obs::profile;
use ustack_stack::inspect::{MemoryKind, MemoryUsage};
use ustack_stack::{Instant, Stack, TcpHandle};

use crate::api::TcpListener;
use crate::profiling::thread_cpu_ns;
use crate::rss::Rss;
use crate::runtime::{Clock, MonotonicClock, Runtime, RuntimeBuilder, Sleep};
use crate::shard::ShardStats;
use ustack_dev::shm::ShmPort;

/// The application on one shard. Made on the shard's thread by the factory given to
/// [`ShardedBuilder::start`]; returned by [`ShardedRuntime::stop`] when the thread ends.
pub trait ShardApp<D: Device + Sleep>: Send + 'static {
    /// Called once on the shard's thread, after the listeners are bound and before the
    /// first round: open connections, register sockets.
    fn start(&mut self, ctx: &mut ShardContext<'_, D>) -> io::Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Called after every round of the loop (at least once per tick): accept, read,
    /// write. Must not block. An error stops this shard (and is returned by
    /// [`ShardedRuntime::stop`]).
    fn poll(&mut self, ctx: &mut ShardContext<'_, D>) -> io::Result<()>;

    /// The app's own heap memory by kind (e.g. its connection map), added to the shard's
    /// in [`ShardedRuntime::memory`]. None unless the app says.
    fn memory(&self) -> Vec<MemoryKind> {
        Vec::new()
    }
}

/// One shard's view, handed to its [`ShardApp`]: the runtime, the shard's number, the
/// flow-to-shard map and the shard's listeners.
pub struct ShardContext<'a, D: Device + Sleep> {
    /// This shard's runtime (stack, device, poller, clock).
    pub rt: &'a mut Runtime<D, MonotonicClock>,
    shard: usize,
    rss: &'a Rss,
    listeners: &'a [TcpListener],
    /// The shard's port-search offset (see [`Rss::pick_local_port`]).
    port_perturb: &'a mut u32,
}

impl<D: Device + Sleep> core::fmt::Debug for ShardContext<'_, D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ShardContext")
            .field("shard", &self.shard)
            .field("rss", &self.rss)
            .field("listeners", &self.listeners)
            .finish_non_exhaustive()
    }
}

impl<'a, D: Device + Sleep> ShardContext<'a, D> {
    /// This shard's number.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.rss.shards()
    }

    /// The flow-to-shard map.
    pub fn rss(&self) -> &'a Rss {
        self.rss
    }

    /// The listeners bound on this shard, in the order of [`ShardedBuilder::listen`].
    pub fn listeners(&self) -> &'a [TcpListener] {
        self.listeners
    }

    /// The current time on the shard's clock.
    pub fn now(&self) -> Instant {
        self.rt.now()
    }

    /// Open a connection to `remote` (IPv4 or IPv6) from a local port whose replies hash
    /// to this shard ([`Rss::pick_local_port`] over `net.ipv4.ip_local_port_range`, which
    /// Linux uses for both families, from the shard's moving offset so that a quick
    /// reconnect to the same peer does not reuse the tuple just closed, then
    /// [`ustack_stack::Stack::tcp_connect_from`]). The local address is the one the stack
    /// will put on the SYN: the interface's IPv4 address, or for IPv6 the source it selects
    /// for `remote` ([`Stack::ipv6_source_for`](ustack_stack::Stack::ipv6_source_for); `EADDRNOTAVAIL` without one, as Linux's
    /// `ip6_route_output` failing). A port the stack refuses (its 4-tuple in use, or a
    /// listener on it) is skipped and the search goes on; `EADDRNOTAVAIL` when no port of
    /// the range hashes here and is free (Linux's error for an exhausted range).
    pub fn connect(&mut self, remote: impl Into<SocketAddr>) -> io::Result<TcpHandle> {
        let remote = remote.into();
        let (stack, now) = self.rt.stack_now();
        let sysctl = stack.sysctl();
        let lo = u16::try_from(sysctl.ip_local_port_min).unwrap_or(u16::MAX);
        let hi = u16::try_from(sysctl.ip_local_port_max).unwrap_or(u16::MAX);
        let not_available = || io::Error::from_raw_os_error(99 /* EADDRNOTAVAIL */);
        let local_ip = stack.source_for(remote).ok_or_else(not_available)?;
        let mut refused: Vec<u16> = Vec::new();
        loop {
            let port = self
                .rss
                .pick_local_port(
                    local_ip,
                    remote,
                    self.shard,
                    lo..=hi,
                    self.port_perturb,
                    |p| refused.contains(&p),
                )
                .ok_or_else(not_available)?;
            match stack.tcp_connect_from(now, port, remote) {
                Ok(h) => return Ok(h),
                Err(ustack_stack::Error::AddrInUse) => refused.push(port),
                Err(e) => return Err(io::Error::from_raw_os_error(e.errno())),
            }
        }
    }
}

/// A shard's counters as last published.
#[derive(Debug, Clone)]
struct Snapshot {
    generation: u64,
    mib: Mib,
    stats: ShardStats,
}

/// Work for one shard's thread, run between rounds: on its stack at its time, or on its
/// memory by kind (the runtime's and the app's, [`ShardedRuntime::memory`]).
enum Job {
    Stack(StackJob),
    Memory(Box<dyn FnOnce(MemoryUsage) + Send>),
}

/// A job on a shard's stack, at its time ([`ShardedRuntime::on_each_shard`]).
type StackJob = Box<dyn FnOnce(&mut Stack, Instant) + Send>;

/// What the threads share: cold, off the packet path.
struct Control {
    stop: AtomicBool,
    /// The latest snapshot generation asked for.
    requested: AtomicU64,
    slots: Vec<Mutex<Snapshot>>,
    /// Jobs waiting for each shard ([`ShardedRuntime::on_each_shard`]).
    jobs: Vec<Mutex<Vec<Job>>>,
    /// Bumped whenever jobs are posted: one load per round tells a shard to look.
    jobs_posted: AtomicU64,
}

impl core::fmt::Debug for Control {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Control")
            .field("stop", &self.stop)
            .field("requested", &self.requested)
            .field("jobs_posted", &self.jobs_posted)
            .finish_non_exhaustive()
    }
}

impl Control {
    fn publish(&self, shard: usize, generation: u64, mib: &Mib, stats: &ShardStats) {
        let mut slot = self.slots[shard].lock().unwrap_or_else(|e| e.into_inner());
        slot.generation = generation;
        slot.mib.clone_from(mib);
        slot.stats = *stats;
    }
}

/// How to start a [`ShardedRuntime`]: the per-shard [`RuntimeBuilder`] (every shard gets
/// the same address and tunables, its own shard number and seed), the flow-to-shard map,
/// the ports to listen on, the tick.
#[derive(Debug, Clone)]
pub struct ShardedBuilder {
    runtime: RuntimeBuilder,
    rss: Rss,
    listen: Vec<(SocketAddr, u32)>,
    tick: Duration,
    seed: Option<u64>,
}

impl ShardedBuilder {
    /// Shards configured by `runtime`, with flows mapped by `rss` (its shard count must be
    /// the number of devices given to [`start`](Self::start)).
    pub fn new(runtime: RuntimeBuilder, rss: Rss) -> ShardedBuilder {
        ShardedBuilder {
            runtime,
            rss,
            listen: Vec::new(),
            tick: Duration::from_millis(1),
            seed: None,
        }
    }

    /// Listen on `addr` (either family) with `backlog` on every shard (`SO_REUSEPORT`).
    pub fn listen(mut self, addr: impl Into<SocketAddr>, backlog: u32) -> Self {
        self.listen.push((addr.into(), backlog));
        self
    }

    /// The longest a shard sleeps before checking for a stop or a counter request (default
    /// 1 ms). Frames wake it at once regardless.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick.max(Duration::from_micros(1));
        self
    }

    /// Base seed, for tests and simulation: shard `k` seeds its stack with `seed + k` (as
    /// does a seed given to the runtime builder). Without one every shard draws its
    /// secrets from the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Start one thread per device, shard `k` on `devices[k]`, each running the app that
    /// `app(k)` makes on that thread. `InvalidInput` if the number of devices is not the
    /// map's shard count; a shard that fails to build (a bad address, a listener refused)
    /// fails the start, after the others are stopped.
    pub fn start<D, A, F>(self, devices: Vec<D>, app: F) -> io::Result<ShardedRuntime<A>>
    where
        D: Device + Sleep + Send + 'static,
        A: ShardApp<D>,
        F: Fn(usize) -> A + Send + Sync + 'static,
    {
        let shards = devices.len();
        if shards == 0 || shards != self.rss.shards() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "ShardedBuilder: {shards} devices for {} shards",
                    self.rss.shards()
                ),
            ));
        }
        let control = Arc::new(Control {
            stop: AtomicBool::new(false),
            requested: AtomicU64::new(0),
            slots: (0..shards)
                .map(|_| {
                    Mutex::new(Snapshot {
                        generation: 0,
                        mib: Mib::new(),
                        stats: ShardStats::default(),
                    })
                })
                .collect(),
            jobs: (0..shards).map(|_| Mutex::new(Vec::new())).collect(),
            jobs_posted: AtomicU64::new(0),
        });
        let app = Arc::new(app);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let mut threads = Vec::with_capacity(shards);
        for (k, device) in devices.into_iter().enumerate() {
            let mut builder = self.runtime.clone().shard(k);
            if let Some(seed) = self.seed {
                builder = builder.seed(seed);
            }
            let builder = builder.shard_seed(k);
            let ctl = control.clone();
            let rss = self.rss.clone();
            let listen = self.listen.clone();
            let tick = self.tick;
            let app = app.clone();
            let ready = ready_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ustack-shard-{k}"))
                .spawn(move || {
                    shard_main(k, builder, device, &rss, &listen, tick, &ctl, &*app, ready)
                });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    drop(ShardedRuntime {
                        threads,
                        control,
                        rss: self.rss,
                    });
                    return Err(e);
                }
            }
        }
        drop(ready_tx);
        let mut rt = ShardedRuntime {
            threads,
            control,
            rss: self.rss,
        };
        for _ in 0..shards {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    rt.shutdown();
                    return Err(e);
                }
                Err(_) => {
                    rt.shutdown();
                    return Err(io::Error::other("ShardedBuilder: a shard thread died"));
                }
            }
        }
        Ok(rt)
    }
}

/// The body of shard `k`'s thread.
#[allow(clippy::too_many_arguments)]
fn shard_main<D, A, F>(
    k: usize,
    builder: RuntimeBuilder,
    device: D,
    rss: &Rss,
    listen: &[(SocketAddr, u32)],
    tick: Duration,
    ctl: &Control,
    make: &F,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
) -> io::Result<A>
where
    D: Device + Sleep,
    A: ShardApp<D>,
    F: Fn(usize) -> A,
{
    let mut port_perturb = 0u32;
    let setup = || -> io::Result<(Runtime<D, MonotonicClock>, Vec<TcpListener>, A)> {
        let mut rt = builder.build(device)?;
        let listeners = listen
            .iter()
            .map(|&(addr, backlog)| TcpListener::bind(&mut rt, addr, backlog))
            .collect::<io::Result<Vec<_>>>()?;
        let mut app = make(k);
        app.start(&mut ShardContext {
            rt: &mut rt,
            shard: k,
            rss,
            listeners: &listeners,
            port_perturb: &mut port_perturb,
        })?;
        Ok((rt, listeners, app))
    };
    let (mut rt, listeners, mut app) = match setup() {
        Ok(s) => {
            // The receiver is gone only if the starter gave up; run on regardless.
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let copy = io::Error::new(e.kind(), format!("shard {k}: {e}"));
            let _ = ready.send(Err(copy));
            return Err(e);
        }
    };
    drop(ready);
    let (mut served, mut jobs_seen) = (0, 0);
    let mut sampling = profile::Iteration::new();
    let result = loop {
        // The profiler's sample covers the whole iteration (docs/bench.md, "Where the
        // time goes"); off, this is one relaxed load.
        sampling.end(thread_cpu_ns, || rt.shard_stats().processed);
        if ctl.stop.load(Ordering::Acquire) {
            break Ok(());
        }
        sampling.begin(thread_cpu_ns, || rt.shard_stats().processed);
        if let Err(e) = rt.run_once(Some(tick)) {
            break Err(e);
        }
        let mut ctx = ShardContext {
            rt: &mut rt,
            shard: k,
            rss,
            listeners: &listeners,
            port_perturb: &mut port_perturb,
        };
        let app_stage = profile::enter(profile::Stage::App);
        if let Err(e) = app.poll(&mut ctx) {
            break Err(e);
        }
        drop(app_stage);
        let posted = ctl.jobs_posted.load(Ordering::Acquire);
        if posted != jobs_seen {
            jobs_seen = posted;
            let jobs = core::mem::take(&mut *ctl.jobs[k].lock().unwrap_or_else(|e| e.into_inner()));
            let now = rt.now();
            for job in jobs {
                match job {
                    Job::Stack(f) => f(rt.stack_mut(), now),
                    Job::Memory(f) => {
                        let mut m = rt.memory();
                        m.kinds.extend(app.memory());
                        f(m);
                    }
                }
            }
        }
        let wanted = ctl.requested.load(Ordering::Acquire);
        if wanted != served {
            ctl.publish(k, wanted, rt.stack().mib(), rt.shard_stats());
            served = wanted;
        }
    };
    // The final counters, whatever ended the loop; jobs left are dropped unrun, so that
    // whoever waits for them learns the shard is gone.
    ctl.publish(k, u64::MAX, rt.stack().mib(), rt.shard_stats());
    ctl.jobs[k]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    result.map(|()| app)
}

/// Shards on their threads. See the [module docs](self). Dropping it stops and joins the
/// threads, as [`stop`](Self::stop) does.
pub struct ShardedRuntime<A> {
    threads: Vec<JoinHandle<io::Result<A>>>,
    control: Arc<Control>,
    rss: Rss,
}

impl<A> core::fmt::Debug for ShardedRuntime<A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ShardedRuntime")
            .field("shards", &self.shards())
            .field(
                "running",
                &self.threads.iter().filter(|t| !t.is_finished()).count(),
            )
            .field("rss", &self.rss)
            .finish_non_exhaustive()
    }
}

impl<A> ShardedRuntime<A> {
    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.control.slots.len()
    }

    /// The flow-to-shard map.
    pub fn rss(&self) -> &Rss {
        &self.rss
    }

    /// Every shard's counters and `softnet_stat`, fresh: asks each shard for a snapshot
    /// and waits (at most `timeout`) until each has published one. A shard that has
    /// stopped gives its final counters. `TimedOut` if a shard did not answer in time.
    pub fn shard_counters(&self, timeout: Duration) -> io::Result<Vec<(Mib, ShardStats)>> {
        let generation = self.control.requested.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(self.shards());
        for (k, slot) in self.control.slots.iter().enumerate() {
            loop {
                {
                    let s = slot.lock().unwrap_or_else(|e| e.into_inner());
                    if s.generation >= generation || self.threads[k].is_finished() {
                        out.push((s.mib.clone(), s.stats));
                        break;
                    }
                }
                if std::time::Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("shard {k} did not publish its counters"),
                    ));
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(out)
    }

    /// Run `f` on every shard's thread, between two rounds of its loop, with its stack and
    /// its time, and return what each gave, in shard order: how `ustack ss`, `stat
    /// --memory` and `sysctl` reach the stacks without a lock on the packet path. A shard
    /// picks its job up within a tick ([`ShardedBuilder::tick`]). `TimedOut` if a shard did
    /// not answer within `timeout`, `BrokenPipe` if one has stopped.
    pub fn on_each_shard<T, F>(&self, f: F, timeout: Duration) -> io::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(usize, &mut Stack, Instant) -> T + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        self.post_and_collect(timeout, |k, tx| {
            let f = f.clone();
            Job::Stack(Box::new(move |stack, now| {
                let _ = tx.send((k, f(k, stack, now)));
            }))
        })
    }

    /// Every shard's heap memory by kind, in shard order: its runtime's
    /// ([`Runtime::memory`]: the stack's kinds, the poller's, the app timers') and its
    /// app's ([`ShardApp::memory`]), read on the shard's thread between two rounds, as
    /// [`on_each_shard`](Self::on_each_shard) reads the stack. Errors as that.
    pub fn memory(&self, timeout: Duration) -> io::Result<Vec<MemoryUsage>> {
        self.post_and_collect(timeout, |k, tx| {
            Job::Memory(Box::new(move |m| {
                let _ = tx.send((k, m));
            }))
        })
    }

    /// Post the job `make` gives for each shard (with the channel it answers on) and
    /// collect the answers, in shard order.
    fn post_and_collect<T: Send + 'static>(
        &self,
        timeout: Duration,
        make: impl Fn(usize, std::sync::mpsc::Sender<(usize, T)>) -> Job,
    ) -> io::Result<Vec<T>> {
        if let Some(k) = self.threads.iter().position(|t| t.is_finished()) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("shard {k} has stopped"),
            ));
        }
        let (tx, rx) = std::sync::mpsc::channel();
        for (k, queue) in self.control.jobs.iter().enumerate() {
            let job = make(k, tx.clone());
            queue.lock().unwrap_or_else(|e| e.into_inner()).push(job);
        }
        drop(tx);
        self.control.jobs_posted.fetch_add(1, Ordering::AcqRel);
        let deadline = std::time::Instant::now() + timeout;
        let mut out: Vec<Option<T>> = (0..self.shards()).map(|_| None).collect();
        for _ in 0..self.shards() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((k, v)) => out[k] = Some(v),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "a shard did not answer in time",
                    ));
                }
                // Every sender gone with answers missing: a shard stopped with its job.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "a shard has stopped",
                    ));
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The counters of every shard, summed ([`Mib::merge`]).
    pub fn mib(&self, timeout: Duration) -> io::Result<Mib> {
        let per_shard = self.shard_counters(timeout)?;
        let mut sum = Mib::new();
        for (mib, _) in &per_shard {
            sum.merge(mib);
        }
        Ok(sum)
    }

    /// Stop every shard and join its thread; each shard's app (or the error that stopped
    /// the shard), in shard order.
    pub fn stop(mut self) -> Vec<io::Result<A>> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Vec<io::Result<A>> {
        self.control.stop.store(true, Ordering::Release);
        self.threads
            .drain(..)
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(io::Error::other("shard thread panicked")))
            })
            .collect()
    }
}

impl<A> Drop for ShardedRuntime<A> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A software RSS splitter over the queues of a multi-queue device, as one [`Device`]: it
/// sends each frame on the queue the receiver's RSS would pick for it
/// ([`Rss::shard_of_frame`]) and receives from every queue in turn. It is the far end of a
/// sharded link: the client side of a shm link whose other end is a [`ShardedRuntime`],
/// so that each shard's queue carries exactly its own flows (a NIC with RSS does this
/// steering in hardware).
///
/// Frames it cannot hash (ARP, say) go to queue 0, as a NIC sends them, or, with
/// [`replicate_unhashed`](Self::replicate_unhashed), to every queue: then each shard of an
/// Ethernet link sees the ARP requests and replies and resolves its neighbours itself
/// (every shard answers a request, with the same address: duplicate replies, harmless).
/// IPv6's neighbour discovery (ICMPv6 types 133 to 137, RFC 4861 §4) is IPv6's ARP and is
/// treated alike when replicating: a NIC would hash it on the address pair to one queue,
/// and the shards whose flows share those addresses would never resolve their neighbour.
///
/// A [`Device::send_batch`] reaches each queue as a batch of its own frames: a frame goes
/// with the `xmit_more` hint ([`Device::send_more`]) when a later frame of the batch goes
/// to the same queue, as Linux computes `more` per transmit queue. A lone
/// [`Device::send_more`] cannot know where the next frame goes, so it sends without the
/// hint.
#[derive(Debug)]
pub struct RssSplitter<D> {
    queues: Vec<D>,
    rss: Rss,
    medium: Medium,
    next_rx: usize,
    sent: Vec<u64>,
    unhashed: u64,
    replicate: bool,
    /// Per frame of the batch being sent: its queue (`None`: unhashed).
    routes: Vec<Option<usize>>,
    /// Per queue: the index in the batch being sent of the last frame for it.
    last: Vec<usize>,
}

impl<D: Device> RssSplitter<D> {
    /// A splitter over `queues` (queue `k` reaches shard `k`), steering by `rss`. Panics
    /// if there are no queues.
    pub fn new(queues: Vec<D>, rss: Rss) -> RssSplitter<D> {
        assert!(!queues.is_empty(), "RssSplitter: no queues");
        let medium = queues[0].caps().medium;
        let sent = vec![0; queues.len()];
        RssSplitter {
            queues,
            rss,
            medium,
            next_rx: 0,
            sent,
            unhashed: 0,
            replicate: false,
            routes: Vec::new(),
            last: Vec::new(),
        }
    }

    /// Send frames that cannot be hashed on every queue instead of queue 0.
    pub fn replicate_unhashed(mut self, on: bool) -> Self {
        self.replicate = on;
        self
    }

    /// Frames steered by their hash to each queue.
    pub fn sent_per_queue(&self) -> &[u64] {
        &self.sent
    }

    /// Frames that could not be hashed (sent on queue 0, or on every queue).
    pub fn unhashed(&self) -> u64 {
        self.unhashed
    }

    /// The queues.
    pub fn queues(&self) -> &[D] {
        &self.queues
    }

    /// The queues, mutably (to sleep on them, say).
    pub fn queues_mut(&mut self) -> &mut [D] {
        &mut self.queues
    }

    /// The queue RSS picks for `frame`, `None` if it cannot be hashed (or, replicating,
    /// if it is neighbour discovery).
    fn route(&self, frame: &[u8]) -> Option<usize> {
        if self.replicate && is_ndisc(frame, self.medium) {
            return None;
        }
        let q = self.rss.shard_of_frame(frame, self.medium)?;
        Some(q.min(self.queues.len() - 1))
    }

    /// Sends `frame` on the queue `route` names (unhashed: queue 0, or every queue), with
    /// the `xmit_more` hint for queue `q` as `more(q)` says.
    fn send_routed(
        &mut self,
        now: Instant,
        frame: &[u8],
        route: Option<usize>,
        more: impl Fn(usize) -> bool,
    ) -> bool {
        match route {
            Some(q) => {
                let ok = self.queues[q].send_more(now, frame, more(q));
                if ok {
                    self.sent[q] += 1;
                }
                ok
            }
            None => {
                self.unhashed += 1;
                if self.replicate {
                    let mut any = false;
                    for (q, dev) in self.queues.iter_mut().enumerate() {
                        any |= dev.send_more(now, frame, more(q));
                    }
                    any
                } else {
                    self.queues[0].send_more(now, frame, more(0))
                }
            }
        }
    }
}

/// Whether `frame` is an IPv6 neighbour discovery message: ICMPv6 (next header 58, right
/// after the fixed header, as RFC 4861 §4 messages are sent) of type 133 to 137.
fn is_ndisc(frame: &[u8], medium: Medium) -> bool {
    let packet = match medium {
        Medium::Ethernet if frame.get(12..14) == Some(&[0x86, 0xdd]) => &frame[14..],
        Medium::Ip => frame,
        Medium::Ethernet => return false,
    };
    packet.len() > 40 && packet[0] >> 4 == 6 && packet[6] == 58 && (133..=137).contains(&packet[40])
}

impl<D: Device> Device for RssSplitter<D> {
    fn caps(&self) -> DeviceCaps {
        self.queues[0].caps()
    }

    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let n = self.queues.len();
        for i in 0..n {
            let q = (self.next_rx + i) % n;
            if let Some(len) = self.queues[q].recv(now, buf) {
                self.next_rx = (q + 1) % n;
                return Some(len);
            }
        }
        None
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        let route = self.route(frame);
        self.send_routed(now, frame, route, |_| false)
    }

    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        let mut routes = core::mem::take(&mut self.routes);
        let mut last = core::mem::take(&mut self.last);
        routes.clear();
        routes.extend(frames.iter().map(|f| self.route(f)));
        last.clear();
        last.resize(self.queues.len(), 0);
        for (i, route) in routes.iter().enumerate() {
            match route {
                Some(q) => last[*q] = i,
                None if self.replicate => last.fill(i),
                None => last[0] = i,
            }
        }
        let mut dropped = 0;
        for (i, (frame, route)) in frames.iter().zip(&routes).enumerate() {
            if !self.send_routed(now, frame, *route, |q| i < last[q]) {
                dropped += 1;
            }
        }
        self.routes = routes;
        self.last = last;
        dropped
    }

    /// The least room of any queue (a frame may go to any of them), if every queue knows.
    fn tx_space(&mut self) -> Option<usize> {
        self.queues
            .iter_mut()
            .map(Device::tx_space)
            .try_fold(usize::MAX, |least, q| q.map(|n| least.min(n)))
    }

    fn poll_at(&self) -> Option<Instant> {
        self.queues.iter().filter_map(Device::poll_at).min()
    }
}

/// The far end of a sharded shm link sleeps on every queue's doorbell at once
/// ([`ustack_dev::shm::wait_any`]).
impl Sleep for RssSplitter<ShmPort> {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        let timeout = deadline.map(|d| d - clock.now());
        ustack_dev::shm::wait_any(self.queues_mut(), timeout)
    }
}
