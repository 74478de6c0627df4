//! The run loop of one shard: a [`Runtime`] owns a [`Shard`] (a stack and its device),
//! the shard's [`Poller`] and a [`Clock`], and turns them into something an application
//! runs on (see [`crate::api`] for the sockets).
//!
//! # One round, and when the loop sleeps
//!
//! [`Runtime::run_once`] is one iteration of the loop, after Linux's `net_rx_action` plus
//! the idle path of `epoll_wait`:
//!
//! 1. **round**: [`Shard::poll_once`] with the budget of `net.core.netdev_budget` frames
//!    and `net.core.netdev_budget_usecs` measured on the runtime's clock: transmit what the
//!    application queued, receive within the budget, transmit, run due timers after the
//!    device is drained (each transmit step at most [`TX_QUOTA`](crate::shard::TX_QUOTA)
//!    frames; what is left makes the round report work left);
//! 2. **idle?** if the round did nothing (no frame in or out, no timer, budget not
//!    exhausted) and, in [`Runtime::poll`], the poller has nothing to report or pending
//!    ([`Poller::has_pending`]), the loop is idle until the earlier of the shard's next
//!    wake-up ([`Shard::next_wakeup`]: the stack's next timer, or a frame the device
//!    already has) and the caller's timeout;
//! 3. **busy poll** (`net.core.busy_poll`, [`RuntimeBuilder::busy_poll`]): on a real clock,
//!    first poll the device for up to that long without sleeping, which trades a core for
//!    the wake-up latency of a system call; a frame ends it. The spin is *adaptive* by
//!    default ([`RuntimeBuilder::busy_poll_adaptive`], below): it spins only while work
//!    keeps arriving within it;
//! 4. **sleep** on the device ([`Sleep`]): the shm port arms its doorbell and sleeps in
//!    `poll(2)` on its eventfd ([`ShmPort::wait`](ustack_dev::shm::ShmPort::wait)), a TUN queue sleeps in `poll(2)` on its
//!    file ([`TunQueue::wait`](ustack_dev::tun::TunQueue::wait)); on a [`VirtualClock`] the clock jumps
//!    to the wake-up instead (tests, simulations).
//!
//! [`Runtime::poll`] is the epoll-style wait on top: rounds, then [`Poller::wait`], then
//! idle, until an event or the timeout.
//!
//! # Adaptive busy polling
//!
//! A fixed busy-poll window spins after every burst of work whether or not the next one
//! comes within it. On a core of its own that only costs power; on a core shared with
//! other work (a CPU-bound process beside the server, as on any shared host) every empty
//! spin is CPU taken from that work, and from the peer the loop is waiting for, and a
//! loop that never sleeps is never the task the scheduler owes time to, so it is not
//! run first when its frame comes. Linux faces the same choice between polling and
//! interrupts: `napi_defer_hard_irqs` and `gro_flush_timeout` keep a NAPI instance
//! polling (its IRQ masked) for a number of empty polls or a time after the last packet,
//! and IRQ suspension (`irq_suspend_timeout`, Linux 6.13, `Documentation/networking/
//! napi.rst`, "IRQ suspension") keeps IRQs off only while the application's busy polls
//! keep finding events, falling back to interrupts as soon as one finds none.
//!
//! Here, with [`RuntimeBuilder::busy_poll_adaptive`] (on by default; it acts only when
//! [`busy_poll`](RuntimeBuilder::busy_poll) is set), the loop keeps a *spin window* of at
//! most `busy_poll`:
//! - an idle phase spins for the window; a spin that finds work (a frame, a timer, a
//!   socket event) resets the window to the whole `busy_poll`: work keeps arriving; but
//!   while the thread waits for its CPU more than a thirty-second of the time (the
//!   average below), to twice the longest recent wait such a spin needed (at least a
//!   sixteenth of `busy_poll`): on a shared core a spin that misses costs the peer CPU
//!   time, and one that lasts the whole window was the tail of a round trip;
//! - a spin that ends empty (the loop then sleeps) halves it; below a sixteenth of
//!   `busy_poll` it is zero, and the loop sleeps at once ([`RuntimeStats::spins_skipped`]);
//! - a sleep that a frame ends within `busy_poll` of the start of the idle phase (a spin
//!   that long would have caught it) grows the window to twice that wait, or twice the
//!   window, whichever is more (at least a sixteenth, at most `busy_poll`): one quick
//!   wake-up outweighs the empty spin before it, else two loops waiting on each other
//!   would settle on windows shorter than the round trip they have to span;
//! - before a sleep the loop reads how long its thread waited for a CPU since the last
//!   reading (`run_delay` in `/proc/thread-self/schedstat`, [`RunDelay`]; at most every
//!   [`DELAY_SAMPLE_EVERY`], 250 µs, the average standing in between); more than an eighth
//!   of the time (a moving average over readings, weight 1/2) means the core is shared with
//!   other runnable work: the window goes to zero, that sleep's wake-up does not grow it,
//!   and no probe runs until the average falls ([`RuntimeStats::contended_sleeps`]).
//!   Spinning there takes the CPU from the peer the loop waits for, and a thread that
//!   has slept is the one the scheduler runs first when its doorbell rings;
//! - while the window is zero, one idle phase in [`PROBE_EVERY`] (16) spins the whole
//!   `busy_poll` anyway (unless the last sleep found the thread waiting for its CPU):
//!   the wake-up that ends a sleep may itself take longer than
//!   `busy_poll` on a loaded machine, so a sleep's length alone would never say that
//!   spinning pays again. A probe that finds work makes the window whole.
//!
//! So a steady exchange whose replies come within the window spins as before, and a loop
//! whose waits outlast it (no traffic, a peer that lost its CPU) stops spinning within
//! five idle phases, but for the probes (at most one `busy_poll` in sixteen idle phases). The sleep is the device's, armed before the last look at the device
//! so that a frame posted meanwhile is not missed (the shm port's `prepare_sleep`: flag,
//! fence, re-check; a file's readiness for TUN, packet and xdp), and it never passes the
//! next stack or application timer. `RuntimeStats::spin_window_ns` reads the window.
//! The decisions are [`SpinPolicy`]'s, apart from the loop, tested on made-up sequences.
//!
//! # Application timers
//!
//! The runtime owns a [`TimerWheel`] for the application's own timers
//! ([`Runtime::add_timer`], [`Runtime::cancel_timer`], [`Runtime::rearm_timer`]); the
//! stack's protocol timers (RTO, delayed ACK, keepalive, TIME_WAIT, ARP, reassembly) are
//! not on it: the stack keeps its own per-connection timer queue, reached through
//! [`Stack::poll_timeout`] and run by the shard's round. Every round advances the wheel
//! (at most [`APP_TIMER_BUDGET`] timers per round; more count as work left, so the loop
//! runs another round before sleeping) and queues the tokens of the timers that fired;
//! [`Runtime::poll`] delivers them in [`Events::timers`], in firing order, and a fired
//! timer ends the wait like a ready socket. The idle sleep never passes the wheel's
//! [`TimerWheel::next_deadline`]: a shm runtime sleeping in `poll(2)` wakes for it, and a
//! virtual clock jumps to it. Precision is the wheel's: never before the deadline, less
//! than one granularity ([`RuntimeBuilder::timer_granularity`], 1 ms by default) after it.
//!
//! Everything is counted: the shard's [`ShardStats`] (`softnet_stat`: processed,
//! time_squeeze) and the loop's [`RuntimeStats`] (rounds, sleeps, wake-ups by a frame or
//! by the deadline, busy-poll rounds).
//!
//! # Clocks
//!
//! The stack is sans-I/O: every call takes `now`. The runtime reads it from a [`Clock`]:
//! [`MonotonicClock`] in production (`CLOCK_MONOTONIC` through `std::time::Instant`), or a
//! [`VirtualClock`] shared by the runtimes of a simulation. Runtimes sharing a virtual
//! clock publish when they next have work, and an idle one jumps the clock only as far as
//! the earliest of those (and of the frames on the sim link), so none skips over another's
//! timer: a small discrete-event simulator.
//!
//! # More shards
//!
//! A runtime is one shard and is used from one thread. [`crate::multi`] runs one
//! `Runtime` per thread (each with its own device queue, e.g. one `ShmPort` per queue
//! pair), a listener bound on each (like `SO_REUSEPORT`), and outbound connections from
//! ports picked by [`crate::rss::pick_local_port`] so that replies come back to the shard;
//! [`RuntimeBuilder::shard`] numbers the shard.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The sim port a runtime owns, and the pair of them on one link.
pub use ustack_dev::sim::{SimPort, sim_pair};
use ustack_dev::sleep::min_opt;
/// The clock and sleep traits are the device crate's (a device knows how to wait); the
/// runtime's clocks ([`MonotonicClock`], [`VirtualClock`]) implement [`Clock`].
pub use ustack_dev::sleep::{Clock, Idle, Sleep};
use ustack_dev::{Device, DeviceCaps, Medium};
use ustack_obs::profile::{self, Stage};
use ustack_stack::inspect::{MemoryKind, MemoryUsage};
use ustack_stack::{
    Config, EthernetAddress, Instant, Ipv4Cidr, Ipv6Cidr, Readiness, SocketKey, Stack,
};

use crate::poller::{Event, Mode, Poller};
use crate::sched::{DELAY_SAMPLE_EVERY, RunDelay, SpinPolicy};
use crate::shard::{PollResult, Shard, ShardStats};
use crate::timer::{TimerId, TimerWheel};

/// The most application timers one round fires (like `netdev_budget` for frames): a round
/// that hits it leaves work, and the loop runs again before sleeping.
pub const APP_TIMER_BUDGET: usize = 1024;

// ---- clocks ---------------------------------------------------------------------------

/// The real monotonic clock (`CLOCK_MONOTONIC`), with its epoch at creation.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl MonotonicClock {
    /// A clock whose `now()` counts from this moment.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        let d = self.origin.elapsed();
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// No wake-up published.
const NONE: u64 = u64::MAX;

#[derive(Debug)]
struct VirtualInner {
    now: AtomicU64,
    /// Every participant's published wake-up, in nanoseconds ([`NONE`]: nothing).
    wakeups: Mutex<Vec<Arc<AtomicU64>>>,
}

/// A virtual clock: time stands still until a loop (or the test) moves it. Each handle is
/// one participant of a simulation: [`VirtualClock::participant`] makes another handle on
/// the same time for another runtime, and an idle runtime jumps the clock no further than
/// the earliest wake-up any other participant published.
#[derive(Debug)]
pub struct VirtualClock {
    inner: Arc<VirtualInner>,
    slot: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A virtual clock at `start`.
    pub fn new(start: Instant) -> VirtualClock {
        let inner = Arc::new(VirtualInner {
            now: AtomicU64::new(start.as_nanos()),
            wakeups: Mutex::new(Vec::new()),
        });
        VirtualClock::join(inner)
    }

    fn join(inner: Arc<VirtualInner>) -> VirtualClock {
        let slot = Arc::new(AtomicU64::new(NONE));
        inner
            .wakeups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot.clone());
        VirtualClock { inner, slot }
    }

    /// Another handle on the same time, as a new participant (for another runtime).
    pub fn participant(&self) -> VirtualClock {
        VirtualClock::join(self.inner.clone())
    }

    /// Move the clock to `t` (never backwards).
    pub fn set(&self, t: Instant) {
        self.inner.now.fetch_max(t.as_nanos(), Ordering::Relaxed);
    }

    /// Move the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.set(self.now() + d);
    }

    /// The earliest wake-up published by any participant but this one.
    fn others_wakeup(&self) -> Option<u64> {
        let slots = self.inner.wakeups.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .filter(|s| !Arc::ptr_eq(s, &self.slot))
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&w| w != NONE)
            .min()
    }
}

impl Drop for VirtualClock {
    fn drop(&mut self) {
        let mut slots = self.inner.wakeups.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|s| !Arc::ptr_eq(s, &self.slot));
    }
}

impl Clock for VirtualClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::from_nanos(self.inner.now.load(Ordering::Relaxed))
    }

    fn is_virtual(&self) -> bool {
        true
    }

    #[inline]
    fn publish_wakeup(&self, at: Option<Instant>) {
        self.slot
            .store(at.map_or(NONE, Instant::as_nanos), Ordering::Relaxed);
    }

    fn advance_idle(&self, until: Option<Instant>) -> Idle {
        let now = self.inner.now.load(Ordering::Relaxed);
        let target = match (until.map(Instant::as_nanos), self.others_wakeup()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return Idle::Stuck,
            },
        };
        if target <= now {
            return Idle::Stuck;
        }
        self.inner.now.fetch_max(target, Ordering::Relaxed);
        Idle::Advanced
    }
}

// ---- the builder --------------------------------------------------------------------------

/// A random MAC address from the OS's random source (`getrandom(2)`), made locally
/// administered and unicast (IEEE 802 first octet: the U/L bit 0x02 set, the I/G bit 0x01
/// clear), as Linux's `eth_random_addr` does for an interface without a burned-in address.
/// Should the OS refuse randomness, the bytes come from std's OS-seeded `RandomState`.
pub fn random_mac() -> EthernetAddress {
    let mut b = [0u8; 6];
    if getrandom::fill(&mut b).is_err() {
        use core::hash::BuildHasher;
        let r = std::collections::hash_map::RandomState::new().hash_one(0u8);
        b.copy_from_slice(&r.to_le_bytes()[..6]);
    }
    b[0] = (b[0] & 0xfe) | 0x02;
    EthernetAddress(b)
}

/// How to build a [`Runtime`]: the interface (address, prefix, gateway, MAC, medium,
/// MTU), sysctls by their Linux names, the seed, and the loop's busy-poll time.
///
/// ```
/// use core::net::Ipv4Addr;
/// use ustack_runtime::runtime::{RuntimeBuilder, VirtualClock, sim_pair};
/// use ustack_stack::Instant;
///
/// let (a, _b) = sim_pair(Default::default());
/// let rt = RuntimeBuilder::new()
///     .ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
///     .sysctl("net.core.somaxconn", 1024)
///     .build_with_clock(a, VirtualClock::new(Instant::ZERO))?;
/// assert_eq!(rt.stack().sysctl().somaxconn, 1024);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    ipv4: Option<Ipv4Cidr>,
    gateway: Option<Ipv4Addr>,
    gateway6: Option<Ipv6Addr>,
    ipv6: Vec<Ipv6Cidr>,
    mac: EthernetAddress,
    medium: Option<Medium>,
    mtu: Option<usize>,
    sysctls: Vec<(String, u64)>,
    seed: Option<u64>,
    busy_poll: Duration,
    busy_poll_adaptive: bool,
    checksum_offload: bool,
    tx_hold: bool,
    shard: usize,
    timer_granularity: Duration,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder::new()
    }
}

impl RuntimeBuilder {
    /// A builder with Linux's default tunables, no busy polling, a random MAC address
    /// ([`random_mac`], drawn once here: every runtime built from this builder or its
    /// clones, e.g. the shards of one interface, shares it), and the medium and MTU of the
    /// device.
    pub fn new() -> RuntimeBuilder {
        RuntimeBuilder {
            ipv4: None,
            gateway: None,
            gateway6: None,
            ipv6: Vec::new(),
            mac: random_mac(),
            medium: None,
            mtu: None,
            sysctls: Vec::new(),
            seed: None,
            busy_poll: Duration::ZERO,
            busy_poll_adaptive: true,
            checksum_offload: false,
            tx_hold: false,
            shard: 0,
            timer_granularity: Duration::from_millis(1),
        }
    }

    /// The interface's IPv4 address and prefix length (required). Panics if
    /// `prefix_len > 32`.
    pub fn ipv4(mut self, addr: Ipv4Addr, prefix_len: u8) -> Self {
        self.ipv4 = Some(Ipv4Cidr::new(addr, prefix_len));
        self
    }

    /// An IPv6 address and prefix length (repeatable; [`Config::with_ipv6`]): IPv6 is on
    /// with at least one, and an Ethernet interface adds its link-local address. Panics if
    /// `prefix_len > 128`.
    pub fn ipv6(mut self, addr: Ipv6Addr, prefix_len: u8) -> Self {
        self.ipv6.push(Ipv6Cidr::new(addr, prefix_len));
        self
    }

    /// The next hop for destinations off the subnet (the default route).
    pub fn gateway(mut self, gateway: Ipv4Addr) -> Self {
        self.gateway = Some(gateway);
        self
    }

    /// The next hop for IPv6 destinations off every configured prefix (the IPv6 default
    /// route, [`Config::gateway6`]; used on Ethernet, where the neighbour table resolves
    /// it).
    pub fn gateway6(mut self, gateway: Ipv6Addr) -> Self {
        self.gateway6 = Some(gateway);
        self
    }

    /// The interface's MAC address (Ethernet only; default: [`random_mac`]).
    pub fn mac(mut self, mac: EthernetAddress) -> Self {
        self.mac = mac;
        self
    }

    /// The medium; it must match the device's (checked at build). Default: the device's.
    pub fn medium(mut self, medium: Medium) -> Self {
        self.medium = Some(medium);
        self
    }

    /// The IP MTU; at most the device's. Default: the device's.
    pub fn mtu(mut self, mtu: usize) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Set a tunable by its Linux name, e.g. `("net.ipv4.tcp_sack", 0)`; unknown names and
    /// values out of range fail the build.
    pub fn sysctl(mut self, name: &str, value: u64) -> Self {
        self.sysctls.push((name.to_owned(), value));
        self
    }

    /// Derive the stack's secrets (hash keys, ISN and SYN-cookie keys, IP ids) from `seed`
    /// so that a run replays: for tests and simulation only ([`Config::seed`]). Without
    /// this call the secrets come from the OS random number generator.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Shard `k` of a sharded runtime: a seed asked for moves on by `k` (so that shards
    /// do not share secrets); without one each shard draws its own from the OS.
    pub(crate) fn shard_seed(mut self, k: usize) -> Self {
        self.seed = self.seed.map(|s| s.wrapping_add(k as u64));
        self
    }

    /// Skip TCP and UDP checksums ([`Config::checksum_offload`]): only over a link that
    /// cannot corrupt a frame whose other end is a ustack runtime set the same way (a shm
    /// link between two ustack processes), as Linux's loopback skips them.
    pub fn checksum_offload(mut self, on: bool) -> Self {
        self.checksum_offload = on;
        self
    }

    /// How long an idle loop polls the device before sleeping (`net.core.busy_poll`, in
    /// µs there; 0, the default, sleeps at once). Ignored on a virtual clock.
    pub fn busy_poll(mut self, busy_poll: Duration) -> Self {
        self.busy_poll = busy_poll;
        self
    }

    /// Whether the busy-poll window adapts (default: yes): spin only while work keeps
    /// arriving within it, shrink it after empty spins down to sleeping at once, grow it
    /// back when a sleep ends soon (see the [module docs](self), *Adaptive busy
    /// polling*). `false`: spin the whole [`busy_poll`](Self::busy_poll) after every
    /// burst of work, as Linux's `net.core.busy_poll` does.
    pub fn busy_poll_adaptive(mut self, adaptive: bool) -> Self {
        self.busy_poll_adaptive = adaptive;
        self
    }

    /// Whether long writes (1 KiB or more) go straight into transmit slots of the device
    /// that the stack holds until their bytes are acknowledged (default: no): over a shm
    /// link, a stream's bytes are then copied once on the sending side instead of twice.
    /// Opt-in, as Linux's `MSG_ZEROCOPY` is: held slots are the link's ring, shared by
    /// every connection, and a connection whose data is not acknowledged (its peer stopped
    /// reading) keeps its slots. For a few bulk senders, not for many connections.
    /// Devices that cannot lend slots ignore it.
    pub fn tx_hold(mut self, on: bool) -> Self {
        self.tx_hold = on;
        self
    }

    /// The shard's number (0 for a one-shard runtime).
    pub fn shard(mut self, shard: usize) -> Self {
        self.shard = shard;
        self
    }

    /// The tick of the application timer wheel (default 1 ms): a timer fires less than
    /// one tick after its deadline, never before it. Zero is taken as 1 ns.
    pub fn timer_granularity(mut self, granularity: Duration) -> Self {
        self.timer_granularity = granularity.max(Duration::from_nanos(1));
        self
    }

    /// The stack configuration this builder gives for a device with `caps`.
    /// `InvalidInput` if no address was given, an IPv6 address is unspecified or
    /// multicast, the medium does not match, the MTU is larger than the device's, or a
    /// sysctl is refused.
    pub fn stack_config(&self, caps: DeviceCaps) -> io::Result<Config> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let ipv4 = self
            .ipv4
            .ok_or_else(|| invalid("RuntimeBuilder: no IPv4 address".into()))?;
        if let Some(m) = self.medium
            && m != caps.medium
        {
            return Err(invalid(format!(
                "RuntimeBuilder: medium {m:?}, but the device carries {:?}",
                caps.medium
            )));
        }
        // Linux's ipv6_add_addr refuses the unspecified address and a multicast one
        // (EADDRNOTAVAIL; RFC 4291 §2.7: a multicast address is never a source).
        if let Some(bad) = self
            .ipv6
            .iter()
            .find(|c| c.addr.is_unspecified() || c.addr.is_multicast())
        {
            return Err(invalid(format!(
                "RuntimeBuilder: {} is not an interface address (unspecified or multicast)",
                bad.addr
            )));
        }
        let mtu = self.mtu.unwrap_or(caps.mtu);
        if mtu > caps.mtu || mtu < 68 {
            return Err(invalid(format!(
                "RuntimeBuilder: MTU {mtu} outside 68..={}",
                caps.mtu
            )));
        }
        let mut config = match caps.medium {
            Medium::Ethernet => Config::ethernet(self.mac, ipv4),
            Medium::Ip => Config::ip(ipv4),
        };
        config.gateway = self.gateway;
        config.gateway6 = self.gateway6;
        config.ipv6.clone_from(&self.ipv6);
        config.mtu = mtu;
        config.seed = self.seed;
        config.checksum_offload = self.checksum_offload;
        for (name, value) in &self.sysctls {
            config
                .sysctl
                .set(name, *value)
                .map_err(|e| invalid(e.to_string()))?;
        }
        Ok(config)
    }

    /// A runtime on `device`, on the real monotonic clock.
    pub fn build<D: Device + Sleep>(self, device: D) -> io::Result<Runtime<D, MonotonicClock>> {
        self.build_with_clock(device, MonotonicClock::new())
    }

    /// A runtime on `device`, reading time from `clock` (a [`VirtualClock`] in tests).
    pub fn build_with_clock<D: Device + Sleep, C: Clock>(
        self,
        device: D,
        clock: C,
    ) -> io::Result<Runtime<D, C>> {
        let caps = device.caps();
        let config = self.stack_config(caps)?;
        let mut stack = Stack::new(config);
        stack.set_gso_max_size(caps.gso_max_size);
        let timers = TimerWheel::new(clock.now(), self.timer_granularity);
        let mut shard = Shard::new(self.shard, stack, device);
        if self.tx_hold {
            shard.hold_tx_slots();
        }
        Ok(Runtime {
            shard,
            poller: Poller::new(),
            timers,
            fired: VecDeque::new(),
            clock,
            busy_poll: self.busy_poll,
            adaptive: self.busy_poll_adaptive,
            policy: SpinPolicy::new(self.busy_poll, self.busy_poll_adaptive),
            run_delay: None,
            stats: RuntimeStats {
                spin_window_ns: self.busy_poll.as_nanos() as u64,
                ..RuntimeStats::default()
            },
            dropped: Arc::new(DropQueue::default()),
        })
    }
}

// ---- the runtime --------------------------------------------------------------------------

/// The loop's own counters, cumulative (the shard's are in [`ShardStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RuntimeStats {
    /// Rounds run ([`Shard::poll_once`] calls, busy-poll rounds included).
    pub rounds: u64,
    /// Rounds that found nothing to do.
    pub empty_rounds: u64,
    /// Times the loop slept on the device (or, on a virtual clock, jumped the clock).
    pub sleeps: u64,
    /// Sleeps ended by the device (a frame, or the peer's doorbell).
    pub wakeups: u64,
    /// Sleeps ended by the deadline (a timer or the caller's timeout).
    pub timeouts: u64,
    /// Busy-poll phases started (idle with `busy_poll` set, on a real clock).
    pub busy_polls: u64,
    /// Busy-poll phases that found a frame (and so skipped the sleep).
    pub busy_poll_hits: u64,
    /// Idle phases that slept at once because the adaptive spin window had shrunk to zero
    /// (empty spins before them; see *Adaptive busy polling* in the module docs).
    pub spins_skipped: u64,
    /// The adaptive spin window now, in nanoseconds (`busy_poll` when not adaptive).
    pub spin_window_ns: u64,
    /// Sleeps before which the loop's thread had waited for a CPU more than an eighth of
    /// the time, on average (adaptive only): the window went to zero.
    pub contended_sleeps: u64,
    /// Readings of the thread's run-queue wait ([`RunDelay`], adaptive only): at most one
    /// per [`DELAY_SAMPLE_EVERY`], however often the loop
    /// sleeps.
    pub run_delay_reads: u64,
    /// Events reported by [`Runtime::poll`] (socket events and timers).
    pub events: u64,
    /// Application timers fired by the wheel ([`Runtime::add_timer`]).
    pub timers_fired: u64,
    /// Sockets closed because their handle was dropped without `close` (see
    /// [`crate::api`]).
    pub closed_on_drop: u64,
}

/// The sockets whose handles were dropped without `close`: a handle's `Drop` queues its
/// key here (it cannot reach the stack, which the runtime owns), and the runtime's next
/// round closes them, as the kernel closes the file of a process that exits without
/// `close(2)`. A flag keeps the round's check to one load when nothing was dropped.
#[derive(Debug, Default)]
pub(crate) struct DropQueue {
    pending: AtomicBool,
    keys: Mutex<Vec<SocketKey>>,
}

impl DropQueue {
    /// Queue `key` for closing by the runtime's next round.
    pub(crate) fn push(&self, key: SocketKey) {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(key);
        self.pending.store(true, Ordering::Release);
    }

    /// Whether a key may be queued: one relaxed load, for the round's check.
    #[inline]
    fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    fn take(&self) -> Vec<SocketKey> {
        if !self.pending.load(Ordering::Relaxed) || !self.pending.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        core::mem::take(&mut *self.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A buffer of events for [`Runtime::poll`] (`struct epoll_event events[maxevents]`).
///
/// Two lists: socket events ([`iter`](Self::iter), [`len`](Self::len)), and the tokens of
/// application timers that fired ([`timers`](Self::timers), from [`Runtime::add_timer`]).
/// A poll fills each with up to the capacity; its return value counts both.
#[derive(Debug, Clone)]
pub struct Events {
    inner: Vec<Event>,
    timers: Vec<u64>,
    capacity: usize,
}

impl Events {
    /// Room for up to `capacity` events per [`Runtime::poll`] (at least 1).
    pub fn with_capacity(capacity: usize) -> Events {
        let capacity = capacity.max(1);
        Events {
            inner: Vec::with_capacity(capacity),
            timers: Vec::new(),
            capacity,
        }
    }

    /// The tokens of the application timers that fired, in firing order (deadline order
    /// to within one wheel tick). Each fired timer is reported once; its id is stale.
    pub fn timers(&self) -> &[u64] {
        &self.timers
    }

    /// The socket events of the last poll.
    pub fn iter(&self) -> core::slice::Iter<'_, Event> {
        self.inner.iter()
    }

    /// How many socket events (timers: [`timers`](Self::timers)).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// No socket event (there may be timers).
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Forget them (socket events and timers).
    pub fn clear(&mut self) {
        self.inner.clear();
        self.timers.clear();
    }
}

impl<'a> IntoIterator for &'a Events {
    type Item = &'a Event;
    type IntoIter = core::slice::Iter<'a, Event>;
    fn into_iter(self) -> Self::IntoIter {
        self.inner.iter()
    }
}

/// What a registration watches: readiness kinds, and whether it is one-shot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    readiness: Readiness,
    oneshot: bool,
}

impl Interest {
    /// `EPOLLIN`: data, end of stream, an error, or a connection to accept.
    pub const READABLE: Interest = Interest::new(Readiness::READABLE);
    /// `EPOLLOUT`: room to write (or a finished connect).
    pub const WRITABLE: Interest = Interest::new(Readiness::WRITABLE);
    /// `EPOLLRDHUP`: the peer closed its side.
    pub const RDHUP: Interest = Interest::new(Readiness::RDHUP);

    /// An interest in `readiness` (ERROR and HUP are always reported anyway).
    pub const fn new(readiness: Readiness) -> Interest {
        Interest {
            readiness,
            oneshot: false,
        }
    }

    /// The same, one-shot (`EPOLLONESHOT`): disarmed after one event until
    /// [`Runtime::reregister`].
    pub const fn oneshot(self) -> Interest {
        Interest {
            readiness: self.readiness,
            oneshot: true,
        }
    }

    /// The readiness kinds.
    pub const fn readiness(self) -> Readiness {
        self.readiness
    }

    /// Whether one-shot.
    pub const fn is_oneshot(self) -> bool {
        self.oneshot
    }
}

impl core::ops::BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest {
            readiness: self.readiness | rhs.readiness,
            oneshot: self.oneshot || rhs.oneshot,
        }
    }
}

/// Anything a poller can watch: the API's sockets.
pub trait Source {
    /// The socket's key in its stack.
    fn key(&self) -> SocketKey;
}

/// One shard's run loop and everything it owns: the stack, the device, the poller, the
/// clock. See the [module docs](self).
///
/// Sockets ([`crate::api`]) are small handles into this runtime's stack; every operation
/// takes `&mut Runtime`, because the stack is sans-I/O state with a single owner per shard
/// (no locks, no reference counting, no interior mutability on the packet path). A handle
/// borrows nothing, so an application keeps its sockets wherever it likes (a map by
/// token, say) and passes the runtime in for each call.
pub struct Runtime<D: Device, C: Clock = MonotonicClock> {
    shard: Shard<D>,
    poller: Poller,
    /// Application timers, carrying the user's token.
    timers: TimerWheel<u64>,
    /// Tokens of timers that fired and are not yet delivered by [`Runtime::poll`].
    fired: VecDeque<u64>,
    clock: C,
    busy_poll: Duration,
    /// Whether the busy-poll window adapts (module docs, *Adaptive busy polling*).
    adaptive: bool,
    /// The spin window's decisions ([`SpinPolicy`]).
    policy: SpinPolicy,
    /// The loop thread's run-queue wait (opened by the first sleep, on the loop's thread)
    /// and its reading at the last sleep, with the time then.
    run_delay: Option<(RunDelay, Instant, Duration)>,
    stats: RuntimeStats,
    /// Sockets whose handles were dropped without `close`, closed by the next round.
    dropped: Arc<DropQueue>,
}

impl<D: Device + fmt::Debug, C: Clock + fmt::Debug> fmt::Debug for Runtime<D, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("shard", &self.shard)
            .field("clock", &self.clock)
            .field("busy_poll", &self.busy_poll)
            .field("stats", &self.stats)
            .field("timers", &self.timers)
            .field("fired", &self.fired.len())
            .finish_non_exhaustive()
    }
}

pub use crate::sched::PROBE_EVERY;

/// With no registration in the poller, the stack's wake-ups are dropped once in this
/// many rounds instead of every round (see `Runtime::harvest`).
const UNWATCHED_DRAIN_EVERY: u64 = 64;

/// A round of the shard, its budget's time limit on the runtime's clock.
#[inline]
fn round(shard: &mut Shard<impl Device>, clock: &impl Clock) -> PollResult {
    shard.poll_clocked(clock.now(), || clock.now())
}

/// `entered + timeout`: out of line, so that the sum is made only on the way to idle (the
/// compiler would hoist it out of `poll`'s loop, to be made by every call).
#[inline(never)]
fn deadline_from(entered: Instant, timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| entered + t)
}

#[inline]
fn did_work(r: &PollResult) -> bool {
    r.rx > 0 || r.tx > 0 || r.timers || r.work_left
}

impl<D: Device + Sleep, C: Clock> Runtime<D, C> {
    /// The current time on the runtime's clock.
    #[inline]
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The stack (counters, sysctls, socket state).
    pub fn stack(&self) -> &Stack {
        self.shard.stack()
    }

    /// Heap memory by kind: the stack's ([`Stack::memory`]), then the runtime's own,
    /// `poller` (one registration a registered socket, [`Poller::heap_bytes`]) and
    /// `app_timers` (the application timer wheel).
    pub fn memory(&self) -> MemoryUsage {
        let mut m = self.stack().memory();
        m.kinds.push(MemoryKind {
            name: "poller",
            count: self.poller.len(),
            bytes: self.poller.heap_bytes(),
        });
        m.kinds.push(MemoryKind {
            name: "app_timers",
            count: self.timers.len(),
            bytes: self.timers.memory_bytes(),
        });
        m
    }

    /// The stack, mutably: for calls the API does not wrap. Socket calls made here are
    /// transmitted by the next round.
    pub fn stack_mut(&mut self) -> &mut Stack {
        self.touch();
        self.shard.stack_mut()
    }

    /// The shard (stack and device).
    pub fn shard(&self) -> &Shard<D> {
        &self.shard
    }

    /// The device.
    pub fn device(&self) -> &D {
        self.shard.device()
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        self.shard.device_mut()
    }

    /// The shard's counters (`softnet_stat`).
    pub fn shard_stats(&self) -> &ShardStats {
        self.shard.stats()
    }

    /// The loop's counters.
    pub fn stats(&self) -> &RuntimeStats {
        &self.stats
    }

    /// The poller.
    pub fn poller(&self) -> &Poller {
        &self.poller
    }

    /// How long an idle loop polls before sleeping ([`RuntimeBuilder::busy_poll`]): for a
    /// loop of another crate that sleeps on its own (ustack-net's loop thread).
    pub fn busy_poll_time(&self) -> Duration {
        self.busy_poll
    }

    /// Whether that busy polling adapts ([`RuntimeBuilder::busy_poll_adaptive`]): for a
    /// loop of another crate that keeps its own [`SpinPolicy`].
    pub fn busy_poll_adapts(&self) -> bool {
        self.adaptive
    }

    /// The application changed socket state: this loop has work now (other runtimes on a
    /// shared virtual clock must not jump past it).
    #[inline]
    pub(crate) fn touch(&self) {
        self.clock.publish_wakeup(Some(Instant::ZERO));
    }

    /// The stack and `now`, for one socket call.
    #[inline]
    pub(crate) fn stack_now(&mut self) -> (&mut Stack, Instant) {
        self.touch();
        let now = self.clock.now();
        (self.shard.stack_mut(), now)
    }

    /// After a socket call that sends: the frame it queued, if it is the only one, to
    /// the device at once (`Shard::transmit_lone`).
    #[inline]
    pub(crate) fn transmit_now(&mut self, now: Instant) {
        self.shard.transmit_lone(now);
    }

    /// The queue a socket handle's `Drop` puts its key on (see [`DropQueue`]).
    pub(crate) fn drop_queue(&self) -> Arc<DropQueue> {
        self.dropped.clone()
    }

    /// Close the sockets whose handles were dropped: a stream as `close(2)` (a FIN, or a
    /// RST with unread data), a listener with its accept queue, a UDP socket. A key gone
    /// stale meanwhile is skipped.
    #[inline]
    fn close_dropped(&mut self) {
        // Nothing dropped (every round but a handful): one load, no call.
        if self.dropped.pending() {
            self.close_dropped_now();
        }
    }

    /// [`close_dropped`](Self::close_dropped) once a handle was dropped.
    #[inline(never)]
    fn close_dropped_now(&mut self) {
        let keys = self.dropped.take();
        if keys.is_empty() {
            return;
        }
        let now = self.clock.now();
        let stack = self.shard.stack_mut();
        for key in keys {
            let closed = match key {
                SocketKey::Tcp(h) => stack.tcp_close(now, h),
                SocketKey::Listener(h) => stack.tcp_close_listener(now, h),
                SocketKey::Udp(h) => stack.udp_close(h),
            };
            if closed.is_ok() {
                self.stats.closed_on_drop += 1;
            }
        }
    }

    /// One round of the shard's loop (budgeted), without sleeping, then the application
    /// timers due (at most [`APP_TIMER_BUDGET`]; the rest leave work). Fired timers count
    /// as `timers` work in the result. Sockets dropped without `close` are closed first.
    /// Inline in its callers (`run_once`, `poll`, the busy poll): a round is not a call
    /// of its own.
    #[inline(always)]
    fn round(&mut self) -> PollResult {
        self.close_dropped();
        let mut r = round(&mut self.shard, &self.clock);
        // Timers armed (only then: an empty wheel is not advanced).
        if !self.timers.is_empty() {
            let (fired, left) = self.app_timers();
            r.timers |= fired;
            r.work_left |= left;
        }
        self.stats.rounds += 1;
        if !did_work(&r) {
            self.stats.empty_rounds += 1;
        }
        r
    }

    /// The round's application timers: those due fire, at most [`APP_TIMER_BUDGET`].
    /// Whether any fired, and whether the budget left some due (the round's `timers` and
    /// `work_left`; returned, not written through a reference, so that the round's result
    /// need not be in memory).
    #[inline(never)]
    fn app_timers(&mut self) -> (bool, bool) {
        let fired = &mut self.fired;
        let _timers = profile::enter(Stage::Timers);
        let n = self
            .timers
            .advance_budget(self.clock.now(), APP_TIMER_BUDGET, |_, token| {
                fired.push_back(token)
            });
        self.stats.timers_fired += n as u64;
        (n > 0, n == APP_TIMER_BUDGET)
    }

    /// Move the stack's wake-ups onto the poller's ready list (reporting nothing: they
    /// wait for the next [`poll`](Self::poll)); whether the poller then has anything
    /// pending. Wake-ups of sockets nobody registered are dropped here (with no
    /// registration at all, every 64th round), so they do not keep the loop awake.
    fn harvest(&mut self) -> bool {
        // With the stack's ready list empty, a `wait` that reports nothing does nothing.
        // With no registration, the wake-ups reach nobody (Linux calls no
        // `ep_poll_callback` for a socket in no epoll set): they stay on the stack's list,
        // where a socket already queued is marked again for one OR, and are dropped every
        // `UNWATCHED_DRAIN_EVERY` rounds, so that sockets closed and replaced meanwhile do
        // not grow the list.
        if self.shard.stack().has_ready()
            && (!self.poller.is_empty() || self.stats.rounds.is_multiple_of(UNWATCHED_DRAIN_EVERY))
        {
            let mut none = Vec::new();
            self.poller.wait(self.shard.stack_mut(), &mut none, 0);
        }
        self.poller.has_pending(self.shard.stack())
    }

    /// When an idle loop wakes up on its own: the shard's next wake-up, bounded by
    /// `deadline`.
    fn wake_target(&self, deadline: Option<Instant>) -> Option<Instant> {
        min_opt(self.next_wakeup(), deadline)
    }

    /// The loop's next wake-up on its own: the shard's (stack timers, a frame the device
    /// has) or the application timer wheel's next deadline, whichever is first.
    #[inline]
    fn next_wakeup(&self) -> Option<Instant> {
        // The three as nanoseconds, `None` as the largest: two `min`s, not the matches of
        // `Option`s (three wake-ups published a round trip on a virtual clock).
        let ns = |t: Option<Instant>| t.map_or(u64::MAX, Instant::as_nanos);
        let at = ns(self.shard.stack().poll_timeout())
            .min(ns(self.shard.device().poll_at()))
            .min(ns(self.timers.next_deadline()));
        (at != u64::MAX).then_some(Instant::from_nanos(at))
    }

    /// The idle path: busy poll (real clock), then sleep on the device (or jump a virtual
    /// clock) until the next wake-up or `deadline`. Returns whether time passed or a frame
    /// came (false: a virtual clock could not move).
    fn idle(&mut self, deadline: Option<Instant>) -> io::Result<bool> {
        let target = self.wake_target(deadline);
        self.clock.publish_wakeup(target);
        let now = self.clock.now();
        if target.is_some_and(|t| t <= now) {
            return Ok(true);
        }
        let spinning = !self.busy_poll.is_zero() && !self.clock.is_virtual();
        let window = self.policy.idle_window();
        if spinning && !window.is_zero() {
            self.stats.busy_polls += 1;
            let until = now + window;
            let _idle = profile::enter(Stage::IdlePoll);
            loop {
                let r = self.round();
                if did_work(&r) || self.harvest() {
                    self.stats.busy_poll_hits += 1;
                    // Work keeps arriving: spin again next time.
                    self.policy.hit(self.clock.now() - now);
                    self.sync_window();
                    self.clock.publish_wakeup(Some(Instant::ZERO));
                    return Ok(true);
                }
                let t = self.clock.now();
                if t >= until || target.is_some_and(|d| t >= d) {
                    break;
                }
                core::hint::spin_loop();
            }
            if target.is_some_and(|d| self.clock.now() >= d) {
                return Ok(true);
            }
            self.policy.empty(window);
        } else if spinning {
            self.stats.spins_skipped += 1;
        }
        // Waiting for a CPU: no spinning until a probe finds work again.
        let contended = spinning && self.adaptive && {
            let sample = self.delay_sample(now);
            self.policy.before_sleep(sample)
        };
        if contended {
            self.stats.contended_sleeps += 1;
        }
        self.sync_window();
        let before = self.clock.now();
        self.stats.sleeps += 1;
        let asleep = profile::enter(Stage::Sleep);
        let woken = self.shard.device_mut().sleep_until(&self.clock, target)?;
        drop(asleep);
        if woken {
            self.stats.wakeups += 1;
            if spinning && !contended {
                self.policy.woken(self.clock.now() - now);
                self.sync_window();
            }
        } else {
            self.stats.timeouts += 1;
        }
        let moved = woken || self.clock.now() > before;
        if moved {
            // A round follows at once.
            self.clock.publish_wakeup(Some(Instant::ZERO));
        }
        Ok(moved)
    }

    /// The share of the time since the last sample that the loop's thread waited for a
    /// CPU (run-queue wait, [`RunDelay`]); `None` at the first sleep, without the file, or
    /// within [`DELAY_SAMPLE_EVERY`] of the last sample (the read is a system call).
    fn delay_sample(&mut self, now: Instant) -> Option<f64> {
        let Some((file, at, delay)) = &mut self.run_delay else {
            let file = RunDelay::open();
            if let Some(d) = file.read() {
                self.run_delay = Some((file, now, d));
            }
            return None;
        };
        if now - *at < DELAY_SAMPLE_EVERY {
            return None;
        }
        self.stats.run_delay_reads += 1;
        let d = file.read()?;
        let (waited, wall) = (d.saturating_sub(*delay), now - *at);
        (*at, *delay) = (now, d);
        Some(waited.as_secs_f64() / wall.as_secs_f64().max(1e-9))
    }

    /// `RuntimeStats::spin_window_ns` from the policy's window.
    fn sync_window(&mut self) {
        self.stats.spin_window_ns = self.policy.window().as_nanos() as u64;
    }

    /// Publish when this loop next has work, on leaving it: now if the poller or the
    /// budget left something (`work_left`: the caller's round left work, or the poller
    /// has something pending, as the caller found it), or an application timer fired and
    /// is not delivered, else the shard's next wake-up. Inline in `run_once` and `poll`
    /// (four calls a round trip of the echo on a virtual clock; one test and a return on
    /// the real clock).
    #[inline]
    fn publish_on_leave(&self, work_left: bool) {
        if !self.clock.is_virtual() {
            return;
        }
        let at = if work_left || !self.fired.is_empty() {
            Some(Instant::ZERO)
        } else {
            self.next_wakeup()
        };
        self.clock.publish_wakeup(at);
    }

    /// One iteration of the loop: a budgeted round, the harvest of the stack's wake-ups
    /// into the poller, then, if the round did nothing (no frame in or out, no timer,
    /// budget not exhausted), busy poll and sleep until the next wake-up or `timeout`
    /// (`None`: until the device or a timer wakes it). Returns what the round did.
    ///
    /// `run_once` does not report socket events, and events waiting in the poller do not
    /// keep it awake: an application that waits for sockets calls [`poll`](Self::poll),
    /// which does not sleep while one is ready.
    pub fn run_once(&mut self, timeout: Option<Duration>) -> io::Result<PollResult> {
        // The deadline counts from here; its sum is made only by a loop that goes idle.
        let entered = self.clock.now();
        let r = self.round();
        let mut pending = self.harvest();
        if !did_work(&r) {
            self.idle(timeout.map(|t| entered + t))?;
            pending = self.poller.has_pending(self.shard.stack());
        }
        self.publish_on_leave(r.work_left || pending);
        Ok(r)
    }

    /// Run the loop until a registered socket is ready, an application timer fires, or
    /// `timeout` passes (`None`: no limit), and put the events (up to the buffer's
    /// capacity of socket events, and up to as many fired timers in [`Events::timers`]) in
    /// `events`; returns how many of both (`epoll_wait`). Each iteration is a budgeted
    /// round (which advances the timer wheel), then the poller's harvest and the fired
    /// timers, then, if nothing was reported and the round exhausted no budget, the idle
    /// path, which sleeps no later than the wheel's next deadline. Timers beyond the
    /// capacity stay queued for the next poll, which returns them at once.
    ///
    /// On a [`VirtualClock`] it also returns (with 0) when the clock cannot move: another
    /// runtime on the clock has work now (run it, then poll again), or nothing is
    /// scheduled anywhere.
    pub fn poll(&mut self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        events.clear();
        // The deadline counts from here; its sum is made only once nothing was reported.
        let entered = self.clock.now();
        loop {
            let r = self.round();
            let mut n =
                self.poller
                    .wait(self.shard.stack_mut(), &mut events.inner, events.capacity);
            // No timer fired (most polls): one test, not an empty drain.
            if !self.fired.is_empty() {
                let take = self.fired.len().min(events.capacity);
                events.timers.extend(self.fired.drain(..take));
                n += take;
            }
            if n > 0 {
                self.stats.events += n as u64;
                self.publish_on_leave(r.work_left || self.poller.has_pending(self.shard.stack()));
                return Ok(n);
            }
            let deadline = deadline_from(entered, timeout);
            if deadline.is_some_and(|d| self.clock.now() >= d) {
                self.publish_on_leave(r.work_left || self.poller.has_pending(self.shard.stack()));
                return Ok(0);
            }
            if r.work_left || !self.fired.is_empty() || self.poller.has_pending(self.shard.stack())
            {
                continue;
            }
            if !self.idle(deadline)? {
                self.publish_on_leave(self.poller.has_pending(self.shard.stack()));
                return Ok(0);
            }
        }
    }

    /// Arm an application timer for `deadline`, carrying `token`: once it fires, the
    /// token is reported once in [`Events::timers`] by [`poll`](Self::poll). O(1). It
    /// never fires before `deadline`, and less than one wheel tick
    /// ([`RuntimeBuilder::timer_granularity`]) after it when the loop is polling; a
    /// deadline already past fires on the next round. These are the application's timers:
    /// the stack's own protocol timers are kept by the stack, not here.
    pub fn add_timer(&mut self, deadline: Instant, token: u64) -> TimerId {
        self.touch();
        // Rounds do not advance an empty wheel, so its clock may be old: the wheel walks
        // up to the next round's `now` then, and fires nothing early (the timer's slot is
        // cascaded down on the way).
        self.timers.arm(deadline, token)
    }

    /// Disarm a timer; `false` if it already fired (its token delivered or queued for the
    /// next poll) or was cancelled. O(1).
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id).is_some()
    }

    /// Move an armed timer to a new `deadline` (earlier or later), keeping its id and
    /// token; `false` if it already fired or was cancelled (then arm a new one). O(1).
    pub fn rearm_timer(&mut self, id: TimerId, deadline: Instant) -> bool {
        self.touch();
        self.timers.rearm(id, deadline)
    }

    /// Application timers armed (not yet fired or cancelled).
    pub fn timers_armed(&self) -> usize {
        self.timers.len()
    }

    /// Watch `source` for `interest` with a user `token` (`EPOLL_CTL_ADD`). A socket that
    /// is ready already is reported by the next poll, in either mode. `EEXIST` if it is
    /// registered.
    pub fn register(
        &mut self,
        source: &impl Source,
        token: u64,
        interest: Interest,
        mode: Mode,
    ) -> io::Result<()> {
        self.touch();
        self.poller
            .register(
                source.key(),
                token,
                interest.readiness,
                mode,
                interest.oneshot,
            )
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }

    /// Change a registration and re-arm it if one-shot (`EPOLL_CTL_MOD`). `ENOENT` if it
    /// is not registered.
    pub fn reregister(
        &mut self,
        source: &impl Source,
        token: u64,
        interest: Interest,
        mode: Mode,
    ) -> io::Result<()> {
        self.touch();
        self.poller
            .modify(
                source.key(),
                token,
                interest.readiness,
                mode,
                interest.oneshot,
            )
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }

    /// Stop watching `source` (`EPOLL_CTL_DEL`). `ENOENT` if it is not registered.
    /// Closing a socket drops its registration by itself.
    pub fn deregister(&mut self, source: &impl Source) -> io::Result<()> {
        self.poller
            .deregister(source.key())
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }
}
