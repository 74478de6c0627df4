//! One shard's budgeted poll loop, after Linux's NAPI and `net_rx_action`
//! (`net/core/dev.c`, `Documentation/networking/napi.rst`).
//!
//! A [`Shard`] owns a [`Stack`] and its device. Each call of [`Shard::poll_once`] is one
//! round of the loop:
//!
//! 1. **transmit** what the application queued since the last round (the stack's transmit
//!    queue, drained to the device in batches, see below);
//! 2. **receive** at most [`Budget::frames`] frames (`net.core.netdev_budget`, 300), and stop
//!    early once [`Budget::time`] (`net.core.netdev_budget_usecs`, 2000 µs) has passed on
//!    [`Budget::clock`], when one is given. Running out of either with frames possibly
//!    left is a *time squeeze*, counted in [`ShardStats::time_squeeze`] as in the third
//!    column of `/proc/net/softnet_stat`, and reported as [`PollResult::work_left`]: the
//!    caller polls again before sleeping;
//! 3. **transmit** everything the received frames produced. Transmission is not budgeted:
//!    in Linux the stack transmits synchronously from the receive path and TX completions
//!    do not count against the budget either (`napi.rst`: "the budget ... should not be
//!    consumed by Tx completion");
//! 4. **timers**: if the stack's next deadline ([`Stack::poll_timeout`]) has come, run
//!    [`Stack::handle_timeout`] and transmit what it produced.
//!
//! Between rounds the caller sleeps until [`Shard::next_wakeup`] (or, for a real device,
//! until it is readable), or jumps a virtual clock there.
//!
//! # Transmit batches and completion reclaim
//!
//! Each transmit step takes up to [`TX_BATCH`] frames from the stack
//! ([`Stack::poll_transmit`]) into a vector the shard keeps, hands them to the device in
//! one [`Device::send_batch`] call, and then gives every buffer back to the stack
//! ([`Stack::recycle`]); it repeats until the stack's queue is empty. The device copies
//! each frame into its ring, so the buffers are free as soon as the call returns: the
//! completion reclaim is immediate and needs no budget (`napi.rst`: "the budget ... should
//! not be consumed by Tx completion"). A device with a costly publication step (the shm
//! port's index store, fence and doorbell) takes it once per batch, as a Linux driver
//! defers its doorbell while `netdev_xmit_more()` says more frames follow
//! (`dev_hard_start_xmit` / `xmit_one` in `net/core/dev.c`).
//!
//! A device that knows how much room it has ([`Device::tx_space`], the shm port) gets no
//! more frames than fit: the rest stays in the stack's transmit queue, in order, until the
//! device has room again, as Linux's qdisc holds packets while a driver has stopped its
//! queue (`netif_tx_stop_queue`; the driver wakes it from its completion path). The
//! stack's queue is bounded by `net.core.txqueuelen` like the qdisc's. A round that ends
//! with frames held is counted in [`ShardStats::tx_held`]; the loop then sleeps until the
//! device wakes it (the shm port asks its peer to ring when it hands slots back). A device
//! that does not know drops and counts what it cannot take (`tx_dropped`).
//!
//! The chain goes back to the senders: TCP builds no segment once the queue holds
//! `txqueuelen` less a `netdev_budget` reserve (the connection waits and sends as the
//! queue drains, see `Stack::poll_transmit`), and a round receives no more frames than the
//! queue has room for ([`Stack::tx_room`]), so the replies that no connection can hold
//! back (a listener's SYN-ACK, a RST) always fit; unreceived frames wait in the device's
//! ring. On the shm link nothing is dropped however large the burst (docs/bench.md).
//!
//! Receive is not batched at the device: frames are taken one by one with
//! [`Device::recv`] straight into the shard's buffer and handed to the stack, which keeps
//! the budget checks per frame (below) exact. The shm port already returns receive
//! completions lazily (once per [`PUBLISH_EVERY`](ustack_dev::shm::PUBLISH_EVERY) frames
//! or when it catches up), so a receive batch would only add a copy.
//!
//! # Budget semantics against Linux
//!
//! `net_rx_action` polls NAPI instances, each for up to its weight (`dev_weight`, 64
//! frames), subtracts the work done from `netdev_budget`, and after each NAPI poll stops
//! with `time_squeeze++` if `budget <= 0 || time_after_eq(jiffies, time_limit)`. The same
//! here, with these differences:
//! - A shard has one device queue, so the checks run after every frame: a round never
//!   receives more than `netdev_budget` frames, where Linux can overshoot by up to
//!   `dev_weight - 1`.
//! - The time limit is measured on the caller's clock with the resolution it has (Linux's
//!   is in jiffies, 1-4 ms). `netdev_budget_usecs = 0` makes every round one frame long,
//!   as in Linux it makes every round one NAPI poll long.
//! - As in Linux, running out counts a squeeze even if the device happened to be empty at
//!   that moment: whether work is left is not known without taking another frame.
//!   `work_left` is the NAPI contract ("returning the whole budget means call me again").

use core::fmt;
use core::time::Duration;

use ustack_dev::Device;
use ustack_stack::{Instant, Stack, Sysctl};

/// How much one [`Shard::poll_once`] round may receive.
pub struct Budget<'c> {
    /// Frames to receive at most (`net.core.netdev_budget`).
    pub frames: usize,
    /// Time to spend receiving at most (`net.core.netdev_budget_usecs`), measured on
    /// [`clock`](Self::clock).
    pub time: Duration,
    /// The clock that measures [`time`](Self::time): read once when receiving starts and
    /// after every frame. `None`: no time limit (sans-I/O tests without a clock). Tests
    /// pass a virtual clock; the runtime passes the monotonic clock.
    pub clock: Option<&'c mut dyn FnMut() -> Instant>,
}

impl fmt::Debug for Budget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("frames", &self.frames)
            .field("time", &self.time)
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl Budget<'static> {
    /// A budget of `frames` and `time`, without a clock (so without a time limit).
    pub fn new(frames: usize, time: Duration) -> Budget<'static> {
        Budget {
            frames,
            time,
            clock: None,
        }
    }

    /// The budget the sysctls `net.core.netdev_budget` and `net.core.netdev_budget_usecs`
    /// give, without a clock.
    pub fn from_sysctl(sysctl: &Sysctl) -> Budget<'static> {
        Budget::new(
            usize::try_from(sysctl.netdev_budget).unwrap_or(usize::MAX),
            Duration::from_micros(sysctl.netdev_budget_usecs),
        )
    }
}

impl<'c> Budget<'c> {
    /// The same budget, with its time limit measured on `clock`.
    pub fn with_clock<'d>(self, clock: &'d mut dyn FnMut() -> Instant) -> Budget<'d> {
        Budget {
            frames: self.frames,
            time: self.time,
            clock: Some(clock),
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PollResult {
    /// Frames received from the device and handed to the stack.
    pub rx: usize,
    /// Frames handed to the device (including any it refused; see [`ShardStats::tx_dropped`]).
    pub tx: usize,
    /// Whether the stack's timers were due and ran.
    pub timers: bool,
    /// The budget ran out: frames may be waiting, poll again before sleeping. Counted as
    /// a time squeeze.
    pub work_left: bool,
}

/// A shard's loop counters, cumulative. `processed` and `time_squeeze` are the first and
/// third columns of Linux's `/proc/net/softnet_stat` (per CPU there, per shard here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardStats {
    /// Rounds run ([`Shard::poll_once`] calls).
    pub polls: u64,
    /// Frames received and handed to the stack (softnet_stat `processed`).
    pub processed: u64,
    /// Rounds that ran out of frame or time budget (softnet_stat `time_squeeze`).
    pub time_squeeze: u64,
    /// Of those, rounds stopped by the time limit (`netdev_budget_usecs`) before the frame
    /// limit.
    pub time_limit_hits: u64,
    /// Frames handed to the device.
    pub transmitted: u64,
    /// Frames the device refused (queue full or too big; the device counts them too).
    pub tx_dropped: u64,
    /// Batches handed to the device ([`Device::send_batch`] calls).
    pub tx_batches: u64,
    /// Rounds that ended with frames held back because the device had no room
    /// ([`Device::tx_space`]): they wait in the stack's transmit queue, as Linux's qdisc
    /// holds packets while a driver's queue is stopped. That queue is bounded by
    /// `net.core.txqueuelen`: the stack drops what would go beyond, with the sender's drop
    /// reason (`DEV_QUEUE_FULL`, `UDP_SNDBUF`, ...).
    pub tx_held: u64,
    /// Rounds in which the stack's timers ran.
    pub timer_runs: u64,
}

/// Most frames handed to the device in one [`Device::send_batch`] call (Linux's NAPI
/// weight, `dev_weight`, is the same 64).
pub const TX_BATCH: usize = 64;

/// One shard: a stack, its device, and the loop between them.
#[derive(Debug)]
pub struct Shard<D: Device> {
    id: usize,
    stack: Stack,
    device: D,
    rx_buf: Vec<u8>,
    /// The transmit batch being gathered (empty between calls; its memory is kept).
    tx_batch: Vec<Vec<u8>>,
    stats: ShardStats,
}

impl<D: Device> Shard<D> {
    /// Shard number `id` running `stack` on `device`.
    pub fn new(id: usize, stack: Stack, device: D) -> Shard<D> {
        let rx_buf = vec![0; device.caps().max_rx_frame_len()];
        Shard {
            id,
            stack,
            device,
            rx_buf,
            tx_batch: Vec::with_capacity(TX_BATCH),
            stats: ShardStats::default(),
        }
    }

    /// The shard's number.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The stack.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// The stack, for socket calls between rounds.
    pub fn stack_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The loop's counters.
    pub fn stats(&self) -> &ShardStats {
        &self.stats
    }

    /// The budget the stack's sysctls give (`net.core.netdev_budget`,
    /// `net.core.netdev_budget_usecs`), without a clock.
    pub fn budget(&self) -> Budget<'static> {
        Budget::from_sysctl(self.stack.sysctl())
    }

    /// One round of the loop at `now`: transmit, receive within `budget`, transmit, run due
    /// timers, transmit (see the module docs). `now` is the time given to the stack and the
    /// device; `budget.clock`, if any, only measures the receive time limit.
    pub fn poll_once(&mut self, now: Instant, mut budget: Budget<'_>) -> PollResult {
        let mut result = PollResult::default();
        self.stats.polls += 1;
        self.transmit(now, &mut result);

        let start = budget.clock.as_mut().map(|clock| clock());
        loop {
            if result.rx >= budget.frames {
                result.work_left = true;
                break;
            }
            // Receive no more than the transmit queue can answer (`Stack::tx_room`): the
            // rest waits in the device's ring, not dropped for want of room to reply.
            if self.stack.tx_room() == 0 {
                break;
            }
            let Some(len) = self.device.recv(now, &mut self.rx_buf) else {
                break;
            };
            self.stack.receive(now, &self.rx_buf[..len]);
            result.rx += 1;
            if let (Some(clock), Some(start)) = (budget.clock.as_mut(), start)
                && clock() - start >= budget.time
            {
                result.work_left = true;
                if result.rx < budget.frames {
                    self.stats.time_limit_hits += 1;
                }
                break;
            }
        }
        self.stats.processed += result.rx as u64;
        if result.work_left {
            self.stats.time_squeeze += 1;
        }

        self.transmit(now, &mut result);
        if self.stack.poll_timeout().is_some_and(|at| at <= now) {
            self.stack.handle_timeout(now);
            result.timers = true;
            self.stats.timer_runs += 1;
            self.transmit(now, &mut result);
        }
        if self.stack.tx_queue_len() > 0 {
            self.stats.tx_held += 1;
        }
        result
    }

    /// Hand every frame the stack has queued to the device, in batches of up to
    /// [`TX_BATCH`]; the device copies them, so the buffers go back to the stack for its
    /// next frames (completion reclaim).
    fn transmit(&mut self, now: Instant, result: &mut PollResult) {
        loop {
            // A device that knows its room gets no more than fits; the rest waits in the
            // stack's queue (Linux: the qdisc, while the driver's queue is stopped).
            let want = self.device.tx_space().map_or(TX_BATCH, |n| n.min(TX_BATCH));
            while self.tx_batch.len() < want
                && let Some(frame) = self.stack.poll_transmit(now)
            {
                self.tx_batch.push(frame);
            }
            let n = self.tx_batch.len();
            if n == 0 {
                break;
            }
            let mut frames: [&[u8]; TX_BATCH] = [&[]; TX_BATCH];
            for (slot, frame) in frames.iter_mut().zip(&self.tx_batch) {
                *slot = frame;
            }
            let dropped = self.device.send_batch(now, &frames[..n]);
            result.tx += n;
            self.stats.transmitted += n as u64;
            self.stats.tx_dropped += dropped as u64;
            self.stats.tx_batches += 1;
            for frame in self.tx_batch.drain(..) {
                self.stack.recycle(frame);
            }
            if n < TX_BATCH {
                break;
            }
        }
    }

    /// When the next round has work without new input from outside: the earlier of the
    /// stack's next timer and the device's next arrival ([`Device::poll_at`]); `None` if
    /// neither has anything scheduled. After a round that returned
    /// [`work_left`](PollResult::work_left), poll again at once instead.
    pub fn next_wakeup(&self) -> Option<Instant> {
        match (self.stack.poll_timeout(), self.device.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
