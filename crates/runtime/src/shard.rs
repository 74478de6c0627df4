//! One shard's budgeted poll loop, after Linux's NAPI and `net_rx_action`
//! (`net/core/dev.c`, `Documentation/networking/napi.rst`).
//!
//! A [`Shard`] owns a [`Stack`] and its device. Each call of [`Shard::poll_once`] is one
//! round of the loop:
//!
//! 1. **transmit** what the application queued since the last round (the stack's transmit
//!    queue, handed to the device in batches, in quotas of [`TX_QUOTA`] frames with a
//!    receive between quotas, see below);
//! 2. **receive** at most [`Budget::frames`] frames (`net.core.netdev_budget`, 300), and stop
//!    early once [`Budget::time`] (`net.core.netdev_budget_usecs`, 2000 µs) has passed on
//!    [`Budget::clock`], when one is given; from a device that leaves long frames'
//!    payloads in place (the shm port), at most [`RX_ROUND_BYTES`] of frames, which the
//!    application then reads while they are still cached. Running out of any with frames possibly
//!    left is a *time squeeze*, counted in [`ShardStats::time_squeeze`] as in the third
//!    column of `/proc/net/softnet_stat`, and reported as [`PollResult::work_left`]: the
//!    caller polls again before sleeping;
//! 3. **transmit** what the received frames produced, again in quotas.
//!    Transmission does not count against the receive budget (`napi.rst`: "the budget ...
//!    should not be consumed by Tx completion") but goes in quotas, as Linux's qdisc
//!    hands a device at most `dev_tx_weight` (64) packets per `__qdisc_run` and
//!    reschedules the rest (`__netif_schedule`), so that `net_rx_action` runs between
//!    them. Here the loop reads the device after each quota (within the receive budget)
//!    and goes on transmitting: the quota interleaves receive and transmit, it does not
//!    throttle a burst. A transmit step hands over at least one quota, and stops when the
//!    stack's queue is empty, the device has no room, the round's time is out, or its
//!    receive budget is (frames wait unread); what is left waits in the stack's transmit
//!    queue, and the round reports [`PollResult::work_left`];
//! 4. **timers**: if the stack's next deadline ([`Stack::poll_timeout`]) has come, first
//!    receive again within what is left of the budget (ACKs that came in while step 3
//!    transmitted), then run [`Stack::handle_timeout`] and transmit what it produced;
//!    unless frames are still waiting on the device (the receive ran out of budget, or
//!    the device reports more ready, [`Device::poll_at`], and the transmit queue has room
//!    to receive them): then the timers wait for a round that drains the device, for
//!    at most [`MAX_TIMER_DEFER`] (20 ms) from the first round that deferred them (see
//!    *Timers after receive* below).
//!
//! Between rounds the caller sleeps until [`Shard::next_wakeup`] (or, for a real device,
//! until it is readable), or jumps a virtual clock there.
//!
//! # Transmit batches and completion reclaim
//!
//! Each transmit step takes up to [`TX_BATCH`] frames from the stack
//! ([`Stack::poll_transmit`]) into a vector the shard keeps, hands them to the device in
//! one [`Device::send_swap`] call, and then gives every buffer back to the stack
//! ([`Stack::recycle`]); it repeats until the stack's queue is empty or the step has
//! handed over [`TX_QUOTA`] frames. The device copies each frame into its ring, or (the
//! sim link) keeps the frame's buffer and leaves a spare one in its place, so the
//! buffers in hand are free as soon as the call returns: the completion reclaim is
//! immediate and needs no budget (`napi.rst`: "the budget ... should not be consumed by
//! Tx completion"). Receive goes the same way: [`Device::recv_swap`] copies the frame
//! into the shard's buffer, or hands over the sim link's buffer holding it and keeps the
//! shard's for the sender's next frames, so a frame crosses the sim link without a copy.
//! A device that can leave a long frame's payload in place ([`Device::rx_head_len`], the
//! shm port) has only the headers copied into the shard's buffer; a TCP segment that
//! only appends to a receive queue then has its payload copied from the device straight
//! there ([`Stack::receive_direct`], counted in [`ShardStats::rx_direct`]), and any other
//! frame is copied whole after all.
//! A device with a costly publication step (the shm
//! port's index store, fence and doorbell) takes it once per batch, as a Linux driver
//! defers its doorbell while `netdev_xmit_more()` says more frames follow
//! (`dev_hard_start_xmit` / `xmit_one` in `net/core/dev.c`).
//!
//! A frame a socket send call queues alone does not wait for the round on a device that
//! asks for it ([`Device::tx_direct`]: sim, shm, tun, packet, xdp): the runtime hands it to the device as the
//! call returns (`Shard::transmit_lone`, Linux's qdisc bypass),
//! and the next round counts it and reports it in [`PollResult::tx`]. Everything else
//! (several frames, a full ring, frames made while receiving) goes as described here.
//!
//! A device that lends its transmit memory ([`Device::tx_lends`], the shm port's slots)
//! gets long TCP segments written straight into it: the shard sets
//! [`Stack::set_tx_lend`], TCP queues such a segment as its headers with the payload left
//! in the send buffer, and the transmit step (`send_lent`) has the device lend a
//! slot ([`Device::send_with`]) and writes the headers and then the payload from the send
//! buffer into it: one copy of the payload where building the frame and copying it into
//! the slot took two (Linux's scatter-gather transmit: the driver takes an skb's page
//! fragments from the socket's write queue). The frames go one by one, each with the
//! `xmit_more` hint while another follows, so the run is published once, as a batch is;
//! counted in [`ShardStats::tx_lent`].
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
//! [`Device::recv_swap`] straight into the shard's buffer (or as the sim link's own) and handed to the stack, which keeps
//! the budget checks per frame (below) exact. The shm port already returns receive
//! completions lazily (once per [`PUBLISH_EVERY`](ustack_dev::shm::PUBLISH_EVERY) frames
//! or when it catches up), so a receive batch would only add a copy.
//!
//! # Timers after receive
//!
//! In Linux every ACK is processed in softirq context soon after it arrives, whatever the
//! application is doing, so a retransmission or loss-probe timer (`tcp_write_timer`) only
//! misses ACKs that have not arrived. A shard runs the application and the stack on one
//! thread, so ACKs wait on the device while the loop does anything else, and the loop must
//! keep that wait short and bounded:
//!
//! - **Transmit in quotas** ([`TX_QUOTA`]), reading the device between them. A round that
//!   handed every queued frame to the device before reading (against a Linux client over
//!   TUN, up to 1,050 frames and 21 ms in a debug build) drew more ACKs than the device's
//!   queue holds (a TUN queue holds `txqueuelen`, 500, packets; the kernel drops the rest
//!   and counts them as the interface's TX drops): ACKs lost at the door, tail loss
//!   probes (RFC 8985 §7) and RTOs for data that had arrived, reported back as duplicate
//!   SACKs (`TCPDSACKRecv`). A loop that stopped at the quota instead (as this one did
//!   before) throttled bursts the application queued to 128 frames a round though
//!   nothing arrived, while TCP's retransmission timers ran from the moment each segment
//!   was queued.
//! - **Receive before timers.** Due timers run only after one more receive, for the ACKs
//!   that came in while the round transmitted.
//! - **Defer timers while frames wait.** A retransmission timer must not fire while the
//!   ACK that cancels it sits unread in the device's receive ring. A round that still
//!   leaves frames on the device (its receive budget ran out, or the device reports
//!   frames ready at `now`, [`Device::poll_at`]: one index load on the shm port) leaves
//!   its due timers to
//!   a round that drains the device, and counts [`ShardStats::timer_defers`]; the caller
//!   polls again at once (`work_left`). Linux gets the same by processing every ACK in
//!   softirq as it arrives, and NAPI keeps polling while packets are pending. The
//!   deferral is bounded in time, not in rounds: from the first round that deferred them,
//!   the timers wait at most [`MAX_TIMER_DEFER`] (20 ms, the ten 2 ms rounds Linux's
//!   `__do_softirq` runs before leaving the rest to ksoftirqd, `MAX_SOFTIRQ_RESTART`),
//!   measured on the rounds' `now`, so a flood that never lets the device drain delays
//!   them by that much however slow the rounds are (a debug build, a process that lost
//!   its CPU for longer than an RTO and comes back to a full ring: it reads the ring
//!   before its timers fire). A clock that stands still is caught by a bound in rounds,
//!   [`MAX_TIMER_DEFER_ROUNDS`].
//!
//!   Not while the receive stopped because the transmit queue has no room for replies
//!   (the device's transmit ring is full): no round could read them until the peer frees
//!   slots, so deferring would only spin the loop (`work_left`) and take the CPU the peer
//!   needs to free them. Tried: in `ustack bench c1m --conns 30000 --server ustack`
//!   (release, load 6.5-8) the server's spurious RTOs went from 40-752 (mean 399, 6 runs)
//!   to 551-1,575 (mean 1,037, runs alternated).
//!
//!   What this does not cover: an ACK that has not reached the ring. In
//!   `ustack bench c1m --conns 30000 --server ustack` (debug build) the server's spurious
//!   RTOs (all undone, `TCPLossUndo`) are its FINs in LAST-ACK, first expiry, RTO 250-300
//!   ms over an SRTT of 50-95 ms; logged at every one of them, the server's ring was
//!   empty and neither loop had stalled for 50 ms: the ACKs were late at the client, which
//!   works through the burst of 1,000 FINs a close window draws.
//!
//! Measured against `ustack serve http` over TUN, 50 kernel clients fetching a 100 KB file
//! 20 times each (debug build, 2 cores shared with other work; the kernel's default queue
//! of 500): before, 31-123 probes per run, 58-67 % of them reported as duplicates, and
//! 484-3,119 ACKs dropped at the TUN queue; after, no ACK dropped and 15-37 % of 19-64
//! probes duplicates. `tools/ustack/tests/kernel_load.rs` runs it with a queue of 150.
//! The probes left come from a loop that is simply late (a CPU-bound debug build): a PTO
//! is 2·SRTT, at least 10 ms, with no variance term.
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
use ustack_obs::profile::{self, Stage};
use ustack_stack::{DirectFrame, Instant, Stack, Sysctl, TxFrame};

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

/// A round's receive budget as the loop checks it: the frames, and the time limit as the
/// instant on its clock by which receiving stops, so that the check after each frame is a
/// reading and a comparison. Made from a [`Budget`] ([`Shard::poll_once`]), or straight
/// from the sysctls for the runtime's rounds, with the runtime's clock (no `dyn` call).
struct Round<T> {
    /// Frames to receive at most.
    frames: usize,
    /// Bytes of frames left to receive from a device that leaves long frames' payloads in
    /// place, before the application reads them (see [`RX_ROUND_BYTES`]).
    bytes: usize,
    /// The clock, and when on it the round's receive time is out (`None`: no time limit,
    /// or one beyond the clock's range).
    limit: Option<(T, Instant)>,
}

impl<T: FnMut() -> Instant> Round<T> {
    /// A round of `frames` whose receive time started at `start` on `clock` and lasts
    /// `time_ns` nanoseconds.
    #[inline]
    fn new(frames: usize, clock: Option<T>, start: Instant, time_ns: Option<u64>) -> Round<T> {
        let until = time_ns.and_then(|t| start.as_nanos().checked_add(t));
        Round {
            frames,
            bytes: RX_ROUND_BYTES,
            limit: clock.zip(until.map(Instant::from_nanos)),
        }
    }

    /// Whether the round's receive time is out (`clock() - start >= time`).
    #[inline]
    fn time_out(&mut self) -> bool {
        match &mut self.limit {
            Some((clock, until)) => clock() >= *until,
            None => false,
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
    /// The receive budget ran out (frames may be waiting; counted as a time squeeze), or
    /// a transmit step stopped at the budget with frames in the stack's queue: poll again
    /// before sleeping.
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
    /// Of those, frames whose payload went from the device straight into a receive queue
    /// ([`Device::recv_head`], [`Stack::receive_direct`]).
    pub rx_direct: u64,
    /// Rounds that ran out of frame or time budget (softnet_stat `time_squeeze`).
    pub time_squeeze: u64,
    /// Of those, rounds stopped by the time limit (`netdev_budget_usecs`) before the frame
    /// limit.
    pub time_limit_hits: u64,
    /// Of those, rounds stopped by the byte limit of a device that leaves long frames'
    /// payloads in place ([`RX_ROUND_BYTES`]).
    pub rx_bytes_limit_hits: u64,
    /// Frames handed to the device.
    pub transmitted: u64,
    /// Frames the device refused (queue full or too big; the device counts them too).
    pub tx_dropped: u64,
    /// Of the frames handed to the device, segments written straight into its transmit
    /// memory: the headers and then the payload from the send buffer, into a slot the
    /// device lent ([`Device::send_with`], [`Stack::poll_transmit_lent`]).
    pub tx_lent: u64,
    /// Data segments sent from the held slot their bytes were written into at `send()`
    /// (`Stack::set_tx_held`): no copy at transmit.
    pub tx_in_place: u64,
    /// Batches handed to the device ([`Device::send_batch`] calls; a frame sent alone is
    /// one).
    pub tx_batches: u64,
    /// Of the frames handed to the device, those a socket call queued alone and handed
    /// over at once, without the round's transmit step (`Shard::transmit_lone`; counted,
    /// with `transmitted` and `tx_batches`, by the round after).
    pub tx_direct: u64,
    /// Rounds that ended with frames held back because the device had no room
    /// ([`Device::tx_space`]): they wait in the stack's transmit queue, as Linux's qdisc
    /// holds packets while a driver's queue is stopped. That queue is bounded by
    /// `net.core.txqueuelen`: the stack drops what would go beyond, with the sender's drop
    /// reason (`DEV_QUEUE_FULL`, `UDP_SNDBUF`, ...).
    pub tx_held: u64,
    /// Rounds in which the stack's timers ran.
    pub timer_runs: u64,
    /// Rounds whose stack timers were due but waited, because the receive step ran out of
    /// budget with frames possibly left on the device (see the module docs, *Timers after
    /// receive*).
    pub timer_defers: u64,
}

/// How long due stack timers may wait for the device to drain, from the first round that
/// deferred them: the round after runs them regardless, frames waiting or not. It is
/// measured on the `now` the rounds are given, so it holds however many rounds that time
/// takes (a debug build, a process that lost its CPU). 20 ms: the ten rounds of
/// `netdev_budget_usecs` (2 ms) that Linux's `__do_softirq` runs before it leaves the rest
/// to ksoftirqd (`MAX_SOFTIRQ_RESTART`, 10), and a tenth of the smallest RTO (200 ms).
pub const MAX_TIMER_DEFER: Duration = Duration::from_millis(20);

/// The most rounds in a row that may defer due stack timers, whatever the time: a loop
/// whose `now` stands still (a virtual clock) against a device that never runs dry still
/// runs its timers.
pub const MAX_TIMER_DEFER_ROUNDS: u32 = 1000;

/// Most frames handed to the device in one [`Device::send_batch`] call (Linux's NAPI
/// weight, `dev_weight`, is the same 64).
pub const TX_BATCH: usize = 64;

/// Bytes of frames one round takes from a device that leaves long frames' payloads in
/// place (the shm port, whose stream frames are 64 KiB) before it ends with
/// [`PollResult::work_left`], so that the application reads them while they are still in
/// the core's cache (as Linux's loopback wakes the reader at each segment; a round of 16
/// such frames, the stream link's whole ring, left 1 MiB for the reader to fetch again).
/// A byte budget beside `netdev_budget`'s frames, counted in
/// [`ShardStats::rx_bytes_limit_hits`]. 256 KiB: with 128 KiB to 256 KiB a round, a
/// stream took about 15% less CPU per byte than with the ring's 1 MiB, 512 KiB about 10%
/// less (docs/bench.md, shm6).
pub const RX_ROUND_BYTES: usize = 256 << 10;

/// Frames handed to the device between two reads of it (Linux's `dev_tx_weight`, the
/// quota of one `__qdisc_run`: `dev_weight` 64 times `dev_weight_tx_bias` 1). See the
/// module docs, *Timers after receive*, for why: a loop that hands thousands of frames to
/// the device before it reads again lets the ACKs they draw overflow the device's receive
/// queue.
pub const TX_QUOTA: usize = 64;

/// Free transmit slots the driver leaves the device when it tops up the stack's reserve
/// of held ones (`Shard::held_slots`): for ACKs and the segments that are copied.
const HELD_SPARE: usize = 4;

/// How a transmit quota ended.
enum Quota {
    /// The stack's queue is empty, or the device has no room for more.
    Drained,
    /// [`TX_QUOTA`] frames went out and more may wait.
    Spent,
}

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
    /// Rounds in a row that deferred due timers (reset when the timers run).
    deferred: u32,
    /// When the rounds deferring due timers began (`None` when the timers last ran).
    defer_since: Option<Instant>,
    /// Whether a frame queued alone goes to the device as soon as the socket call that
    /// made it returns ([`transmit_lone`](Self::transmit_lone)): a device that asks for it
    /// ([`Device::tx_direct`]: the sim link, a shm port, the kernel links) and does not merge a batch's
    /// segments itself (GSO at the driver, `DeviceCaps::gso_max_size`).
    tx_direct: bool,
    /// Frames [`transmit_lone`](Self::transmit_lone) handed to the device since the last
    /// round: the round counts them and reports them in its [`PollResult::tx`].
    tx_since: usize,
    /// The stack holds transmit slots of the device (`Stack::set_tx_held`).
    tx_hold: bool,
}

impl<D: Device> Shard<D> {
    /// Long writes go straight into transmit slots the stack holds, if the device lets
    /// it (`Stack::set_tx_held`, the shm port): topped up and released each round
    /// (`held_slots`). Opt-in ([`RuntimeBuilder::tx_hold`](crate::RuntimeBuilder::tx_hold)),
    /// as Linux's `MSG_ZEROCOPY` is: a slot stays held until its bytes are acknowledged,
    /// so connections whose data is not acknowledged (a peer that stopped reading, under
    /// memory pressure) keep slots of the link's ring that other connections then lack.
    /// Not on a ring too small to spare them (fewer than 4 * HELD_SPARE slots free): there a
    /// writer would wait for slots that never come, and the lent path is as good. Whether
    /// it is on.
    pub fn hold_tx_slots(&mut self) -> bool {
        let Shard { stack, device, .. } = self;
        if !self.tx_hold
            && device.tx_lends()
            && device.tx_space().is_some_and(|n| n >= 4 * HELD_SPARE)
            && let (Some(w), Some(r)) = (device.tx_held_writer(), device.tx_held_reader())
        {
            stack.set_tx_held(w, r, device.caps().max_frame_len());
            self.tx_hold = true;
        }
        self.tx_hold
    }

    /// Shard number `id` running `stack` on `device`.
    pub fn new(id: usize, mut stack: Stack, mut device: D) -> Shard<D> {
        // Every frame goes to the stack with the device's word on its checksum.
        device.trust_rx_csum();
        // Long segments are written into the device's slots from the send buffer.
        if device.tx_lends() {
            stack.set_tx_lend(true);
        }
        // Long segments' payloads may stay in the device's memory, held by the receive
        // queues until read (`Stack::set_lent_reader`).
        if let Some(reader) = device.kept_reader() {
            stack.set_lent_reader(reader);
        }
        let rx_buf = vec![0; device.caps().max_rx_frame_len()];
        let tx_direct = device.tx_direct() && device.caps().gso_max_size == 0;
        Shard {
            id,
            stack,
            device,
            rx_buf,
            tx_batch: Vec::with_capacity(TX_BATCH),
            stats: ShardStats::default(),
            deferred: 0,
            defer_since: None,
            tx_direct,
            tx_since: 0,
            tx_hold: false,
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
    pub fn poll_once(&mut self, now: Instant, budget: Budget<'_>) -> PollResult {
        let mut clock = budget.clock;
        let start = clock.as_mut().map_or(Instant::ZERO, |clock| clock());
        let time_ns = u64::try_from(budget.time.as_nanos()).ok();
        self.poll_from(now, Round::new(budget.frames, clock, start, time_ns))
    }

    /// [`poll_once`](Self::poll_once) with the budget of the stack's sysctls
    /// ([`budget`](Self::budget)) measured on `clock`, for a caller whose `now` was just
    /// read on it (the runtime's round): the receive time starts at `now`. The sysctls are
    /// read as they are, each round (a write takes effect on the next), without a
    /// [`Budget`]'s `Duration` or its `dyn` clock. Inline in the runtime's round (one
    /// body a round, not a call).
    #[inline(always)]
    pub(crate) fn poll_clocked(
        &mut self,
        now: Instant,
        clock: impl FnMut() -> Instant,
    ) -> PollResult {
        let sysctl = self.stack.sysctl();
        let frames = usize::try_from(sysctl.netdev_budget).unwrap_or(usize::MAX);
        let time_ns = sysctl.netdev_budget_usecs.checked_mul(1_000);
        self.poll_from(now, Round::new(frames, Some(clock), now, time_ns))
    }

    /// A round within `budget`. Inline in its two callers: the runtime's round is one
    /// call, not two.
    #[inline(always)]
    fn poll_from<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        mut budget: Round<T>,
    ) -> PollResult {
        // Frames the socket calls handed to the device since the last round are this
        // round's (a loop that sees a round transmit does not sleep).
        let mut result = PollResult::default();
        if self.tx_since > 0 {
            self.transmitted_since(&mut result);
        }
        self.stats.polls += 1;
        let mut tx_left = self.transmit(now, &mut budget, &mut result);

        self.receive(now, &mut budget, &mut result);
        tx_left |= self.transmit(now, &mut budget, &mut result);
        // Timers due, or due timers deferred by the rounds before (most rounds: neither,
        // one comparison and one test): out of line.
        // (Exact when it has come: a kept deadline whose timer was cancelled is folded
        // again, not run.)
        let due = self.stack.timers_due(now);
        if due || self.defer_since.is_some() {
            return self.poll_timers(now, &mut budget, result, tx_left, due);
        }
        self.stats.processed += result.rx as u64;
        if result.work_left {
            self.stats.time_squeeze += 1;
        }
        result.work_left |= tx_left;
        self.finish(result)
    }

    /// The end of a round whose stack timers are due (or were deferred by the rounds
    /// before): first read what arrived while transmitting (ACKs for what was just sent),
    /// within what is left of the budget, then run the timers, unless frames still wait
    /// on the device (module docs, *Timers after receive*).
    #[inline(never)]
    fn poll_timers<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        budget: &mut Round<T>,
        mut result: PollResult,
        mut tx_left: bool,
        mut due: bool,
    ) -> PollResult {
        if due && !result.work_left {
            let before = result.rx;
            self.receive(now, budget, &mut result);
            if result.rx > before {
                tx_left |= self.transmit(now, budget, &mut result);
                // What arrived may have settled what the timers were waiting for.
                due = self.stack.timers_due(now);
            }
        }
        self.stats.processed += result.rx as u64;
        if result.work_left {
            self.stats.time_squeeze += 1;
        }
        // Frames wait on the device (the budget ran out, or they came in since and there
        // is room to receive them): they may be the ACKs that settle what the timers
        // would retransmit. The timers wait for a round that drains them, within a bound
        // in time (module docs, *Timers after receive*).
        if due
            && (result.work_left
                || (self.stack.tx_room() > 0 && self.device.poll_at().is_some_and(|at| at <= now)))
        {
            let since = *self.defer_since.get_or_insert(now);
            if now - since < MAX_TIMER_DEFER && self.deferred < MAX_TIMER_DEFER_ROUNDS {
                self.deferred += 1;
                self.stats.timer_defers += 1;
                result.work_left = true;
                return self.finish(result);
            }
        }
        self.defer_since = None;
        self.deferred = 0;
        if due {
            let _stage = profile::enter(Stage::Timers);
            self.stack.handle_timeout(now);
            result.timers = true;
            self.stats.timer_runs += 1;
            tx_left |= self.transmit(now, budget, &mut result);
        }
        result.work_left |= tx_left;
        self.finish(result)
    }

    /// Receive within what is left of `budget`:
    /// until the device is empty, the transmit queue has no room for replies, or the budget
    /// runs out (then `work_left`).
    ///
    /// The first look at the device is made here, inline: a round that finds nothing (half
    /// the rounds of a request-response, each of which receives or transmits) pays one
    /// test, not a call and the loop's setup (NAPI's poll returns at once with nothing to
    /// do). The frames go to [`receive_frames`](Self::receive_frames), or, from a device
    /// that leaves long frames' payloads in place, to
    /// [`receive_split_frames`](Self::receive_split_frames).
    #[inline]
    fn receive<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) {
        if self.device.rx_head_len() > 0 {
            return self.receive_split_frames(now, budget, result);
        }
        if !self.room_to_receive(budget, result) {
            return;
        }
        // A device that swaps buffers (the sim link) hands over its own, holding the
        // frame, and keeps this one: no copy (`Device::recv_swap`).
        let Some(len) = self.device.recv_swap(now, &mut self.rx_buf) else {
            return;
        };
        self.receive_frames(len, now, budget, result);
    }

    /// Whether another frame may be received: the budget has frames left (else
    /// `work_left`), and the transmit queue room for the replies (`Stack::tx_room`: the
    /// rest waits in the device's ring, not dropped for want of room to reply).
    #[inline]
    fn room_to_receive<T>(&mut self, budget: &Round<T>, result: &mut PollResult) -> bool {
        if result.rx >= budget.frames {
            result.work_left = true;
            return false;
        }
        self.stack.tx_room() > 0
    }

    /// After a frame: counts it, and says whether the round's time is out (then
    /// `work_left`, and a `time_limit_hits` if the frames were not).
    #[inline]
    fn received_one<T: FnMut() -> Instant>(
        &mut self,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) -> bool {
        result.rx += 1;
        if budget.time_out() {
            result.work_left = true;
            if result.rx < budget.frames {
                self.stats.time_limit_hits += 1;
            }
            return true;
        }
        false
    }

    /// [`receive`](Self::receive) once the device gave a frame of `len` bytes (in
    /// `rx_buf`): hand it to the stack, and the next ones, within the budget.
    #[inline(never)]
    fn receive_frames<T: FnMut() -> Instant>(
        &mut self,
        mut len: usize,
        now: Instant,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) {
        // The device's part of receiving: this loop less the stack's input (one stage
        // boundary a call, not a frame; the first look at the device is outside it).
        let _stage = profile::enter(Stage::DeviceRx);
        loop {
            let csum_ok = self.device.rx_csum_unnecessary();
            self.stack.receive_with(now, &self.rx_buf[..len], csum_ok);
            if self.received_one(budget, result) || !self.room_to_receive(budget, result) {
                return;
            }
            let Some(next) = self.device.recv_swap(now, &mut self.rx_buf) else {
                return;
            };
            len = next;
        }
    }

    /// [`receive`](Self::receive) from a device that leaves long frames' payloads in
    /// place ([`receive_split`](Self::receive_split) a frame), within the budget.
    #[inline(never)]
    fn receive_split_frames<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) {
        let _stage = profile::enter(Stage::DeviceRx);
        // Frames the application read to their end since the last round go back to the
        // device first (which returns their slots to the sender): every round comes here,
        // the last before the loop sleeps too, whether or not there is room to receive.
        if self.stack.has_released_frames() {
            self.release_frames();
        }
        if self.tx_hold {
            self.held_slots();
        }
        if !self.room_to_receive(budget, result) {
            return;
        }
        while let Some(len) = self.receive_split(now) {
            if self.received_one(budget, result) || !self.room_to_receive(budget, result) {
                return;
            }
            budget.bytes = budget.bytes.saturating_sub(len);
            if budget.bytes == 0 {
                // The application reads these bytes before more come (see
                // `RX_ROUND_BYTES`): the round ends as when its frames run out.
                self.stats.rx_bytes_limit_hits += 1;
                result.work_left = true;
                return;
            }
        }
    }

    /// Receive one frame from a device that can leave a long frame's payload where it is
    /// ([`Device::recv_head`], the shm port): its headers come into the shard's buffer,
    /// and if the stack finds it a segment that only appends to a receive queue, the
    /// payload goes from the device straight there ([`Stack::receive_direct`]): one copy
    /// where receiving the whole frame into the buffer first takes two. Otherwise the
    /// rest of the frame is copied after the headers and received as usual. The frame's
    /// length, or `None` when the device had no frame.
    fn receive_split(&mut self, now: Instant) -> Option<usize> {
        let (len, copied) = self.device.recv_head(now, &mut self.rx_buf)?;
        let csum_ok = self.device.rx_csum_unnecessary();
        if copied < len {
            let Shard {
                stack,
                device,
                rx_buf,
                stats,
                ..
            } = self;
            let frame = &rx_buf[..len];
            if stack.receive_direct(now, frame, copied, csum_ok, HeldFrame(device)) {
                stats.rx_direct += 1;
                return Some(len);
            }
            // The frame length was checked against the buffer by the device: the read
            // is in range.
            self.device.read_held(copied, &mut self.rx_buf[copied..len]);
        }
        self.stack.receive_with(now, &self.rx_buf[..len], csum_ok);
        Some(len)
    }

    /// Hands the frames the stack's receive queues no longer hold back to the device.
    #[inline(never)]
    fn release_frames(&mut self) {
        let Shard { stack, device, .. } = self;
        stack.take_released_frames(|id| device.release_kept(id));
    }

    /// The stack's held transmit slots (`Stack::set_tx_held`): those whose bytes were
    /// acknowledged go back to the device, and the reserve is topped up while the device
    /// has more than [`HELD_SPARE`] slots free (as a NIC driver refills its receive ring).
    #[inline(never)]
    fn held_slots(&mut self) {
        let Shard { stack, device, .. } = self;
        stack.tx_held_collect();
        stack.take_released_held(|id| device.tx_hold_release(id));
        while stack.tx_held_wants() && device.tx_space().is_some_and(|n| n > HELD_SPARE) {
            let Some(id) = device.tx_hold() else { break };
            stack.give_held_slot(id);
        }
        stack.tx_held_given();
    }

    /// The end of a round: count a transmit queue left held.
    fn finish(&mut self, result: PollResult) -> PollResult {
        if self.stack.tx_queue_len() > 0 {
            self.stats.tx_held += 1;
        }
        result
    }

    /// One transmit step: hand the frames the stack has queued to the device in quotas of
    /// [`TX_QUOTA`], reading the device between quotas (within what is left of `budget`)
    /// so that the ACKs a burst draws are taken as they come instead of piling up in the
    /// device's receive queue. Every step hands over at least one quota (so transmit is
    /// never starved by a receive backlog, as each `net_tx_action` runs its qdisc's
    /// quota), and goes on until the stack's queue is empty or the device has no room
    /// (then it returns false), or the round's budget is out: its time on
    /// `budget.clock`, or its frames (frames wait unread, and what they answer would pile
    /// up behind them). It returns true when frames are left.
    /// (Linux: `__qdisc_run` hands over `dev_tx_weight` packets, then reschedules itself
    /// with `__netif_schedule` and `net_tx_action` runs again beside `net_rx_action`;
    /// the quota interleaves receive and transmit, it does not throttle a queue the
    /// receive side leaves alone.)
    #[inline]
    fn transmit<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) -> bool {
        // Nothing queued (most calls of a request-response round): one test, no call.
        if !self.stack.tx_pending() {
            return false;
        }
        // One frame queued and no connection waiting to queue more (the rest of a
        // request-response's rounds): to the device without the quota loop's setup.
        if self.stack.tx_queue_len() == 1
            && !self.stack.tx_waiting()
            && self.transmit_one(now, result)
        {
            return false;
        }
        self.transmit_steps(now, budget, result)
    }

    /// The one frame the stack has queued (no connection waits to queue more), straight
    /// to the device and its buffer back to the stack; false when the device has no room
    /// for it (it stays queued, and the quota step holds it back as it would).
    #[inline(never)]
    fn transmit_one(&mut self, now: Instant, result: &mut PollResult) -> bool {
        if self.device.tx_space() == Some(0) {
            return false;
        }
        let _stage = profile::enter(Stage::DeviceTx);
        if self.device.tx_lends() {
            return self.send_lent(now, 1, result) > 0;
        }
        let Some(frame) = self.stack.poll_transmit(now) else {
            return false;
        };
        self.send_one(now, frame, result);
        true
    }

    /// One frame to the device, its buffer back to the stack: the frame's own if the
    /// device copied it, else the spare it left (worth keeping only with capacity).
    #[inline(always)]
    fn send_one(&mut self, now: Instant, mut frame: Vec<u8>, result: &mut PollResult) {
        let dropped = !self.device.send_one(now, &mut frame);
        self.count_batch(1, usize::from(dropped), result);
        if frame.capacity() > 0 {
            self.stack.recycle(frame);
        }
    }

    /// Hand the frame a socket call just queued to the device at once, when it is the
    /// only frame queued and the device has room ([`Stack::poll_transmit_lone`]; Linux's
    /// `__dev_xmit_skb` bypassing an empty qdisc to `sch_direct_xmit`, in the sender's
    /// context): one move from the stack's output to the link ([`Device::send_one`]: the
    /// sim link keeps the buffer, a copying device publishes it at once, as a driver
    /// rings its doorbell for a packet sent alone), without the round's
    /// transmit step. Anything else (several
    /// frames, a full ring, a segment whose payload stays in the send buffer, a
    /// connection waiting for room in the queue, a device that merges segments itself)
    /// waits in the stack's queue for the round, as before. The next round counts it as
    /// its transmit step counts a frame (a refused one at once, in
    /// [`ShardStats::tx_dropped`]), and in [`ShardStats::tx_direct`], and reports it in its
    /// [`PollResult::tx`].
    #[inline]
    pub(crate) fn transmit_lone(&mut self, now: Instant) {
        // Inline in the socket call: one test when it queued nothing or more than one.
        if self.tx_direct && self.stack.tx_queue_len() == 1 {
            self.transmit_lone_now(now);
        }
    }

    /// [`transmit_lone`](Self::transmit_lone) once one frame is queued.
    #[inline(never)]
    fn transmit_lone_now(&mut self, now: Instant) {
        if self.device.tx_space() == Some(0) {
            return;
        }
        let Some(mut frame) = self.stack.poll_transmit_lone() else {
            return;
        };
        let _stage = profile::enter(Stage::DeviceTx);
        if !self.device.send_one(now, &mut frame) {
            self.stats.tx_dropped += 1;
        }
        self.tx_since += 1;
        if frame.capacity() > 0 {
            self.stack.recycle(frame);
        }
    }

    /// The start of a round after [`transmit_lone`](Self::transmit_lone) handed frames
    /// over: they are counted as the transmit step counts a frame (a batch each), and
    /// reported in the round's [`PollResult::tx`].
    #[inline]
    fn transmitted_since(&mut self, result: &mut PollResult) {
        let n = core::mem::take(&mut self.tx_since);
        result.tx = n;
        self.stats.transmitted += n as u64;
        self.stats.tx_batches += n as u64;
        self.stats.tx_direct += n as u64;
    }

    /// [`transmit`](Self::transmit)'s quotas, with receive steps between them.
    #[inline(never)]
    fn transmit_steps<T: FnMut() -> Instant>(
        &mut self,
        now: Instant,
        budget: &mut Round<T>,
        result: &mut PollResult,
    ) -> bool {
        loop {
            match self.transmit_quota(now, result) {
                Quota::Drained => return false,
                Quota::Spent => {}
            }
            // Frames are waiting unread (the receive budget ran out): no more quotas in
            // this step, or what they answer would pile up behind them.
            if result.work_left {
                return true;
            }
            if budget.time_out() {
                return true;
            }
            self.receive(now, budget, result);
        }
    }

    /// Hand at most [`TX_QUOTA`] of the frames the stack has queued to the device, in
    /// batches of up to [`TX_BATCH`]; the device copies them (or keeps them and leaves
    /// spares), so the buffers in hand go back to the stack for its next frames
    /// (completion reclaim).
    fn transmit_quota(&mut self, now: Instant, result: &mut PollResult) -> Quota {
        if !self.stack.tx_pending() {
            return Quota::Drained;
        }
        let _stage = profile::enter(Stage::DeviceTx);
        if self.device.tx_lends() {
            return self.transmit_quota_lent(now, result);
        }
        // One frame queued (a request-response's usual round): straight to the device and
        // back to the stack, without the batch vector.
        if self.stack.tx_queue_len() == 1
            && self.device.tx_space().is_none_or(|n| n > 0)
            && let Some(frame) = self.stack.poll_transmit(now)
        {
            if !self.stack.tx_pending() {
                self.send_one(now, frame, result);
                return Quota::Drained;
            }
            // Taking it let waiting connections queue more: batch them all.
            self.tx_batch.push(frame);
        }
        let mut sent = 0;
        loop {
            if sent >= TX_QUOTA {
                return Quota::Spent;
            }
            let want = self.tx_want(sent);
            while self.tx_batch.len() < want
                && let Some(frame) = self.stack.poll_transmit(now)
            {
                self.tx_batch.push(frame);
            }
            let n = self.tx_batch.len();
            if n == 0 {
                return Quota::Drained;
            }
            sent += n;
            let dropped = self.device.send_swap(now, &mut self.tx_batch);
            self.count_batch(n, dropped, result);
            for frame in self.tx_batch.drain(..) {
                if frame.capacity() > 0 {
                    self.stack.recycle(frame);
                }
            }
            if n < want {
                return Quota::Drained;
            }
        }
    }

    /// How many frames the next batch of a quota that has handed over `sent` may take: a
    /// device that knows its room gets no more than fits; the rest waits in the stack's
    /// queue (Linux: the qdisc, while the driver's queue is stopped).
    #[inline]
    fn tx_want(&mut self, sent: usize) -> usize {
        self.device
            .tx_space()
            .map_or(TX_BATCH, |n| n.min(TX_BATCH))
            .min(TX_QUOTA - sent)
    }

    /// [`transmit_quota`](Self::transmit_quota) to a device that lends its transmit memory
    /// ([`Device::tx_lends`]): the frames go one by one through
    /// [`send_lent`](Self::send_lent), in batches of what the device has room for.
    fn transmit_quota_lent(&mut self, now: Instant, result: &mut PollResult) -> Quota {
        let mut sent = 0;
        loop {
            if sent >= TX_QUOTA {
                return Quota::Spent;
            }
            let want = self.tx_want(sent);
            let n = self.send_lent(now, want, result);
            sent += n;
            if n == 0 || n < want {
                return Quota::Drained;
            }
        }
    }

    /// Up to `want` frames from the stack to a device that lends its transmit memory: a
    /// data segment left split ([`Stack::poll_transmit_lent`]) is written into a slot the
    /// device lends ([`Device::send_with`]), its headers and then its payload straight
    /// from the send buffer (one copy where building the frame and copying it in take
    /// two); a whole frame is copied in ([`Device::send_more`]). Each goes with the
    /// `xmit_more` hint while another follows (one frame taken ahead, as Linux's
    /// `dev_hard_start_xmit` knows from the skb list whether more follow), so the device
    /// publishes the run once. The frames handed over.
    fn send_lent(&mut self, now: Instant, want: usize, result: &mut PollResult) -> usize {
        let (mut n, mut dropped, mut lent, mut held) = (0, 0, 0, 0);
        let mut next = if want > 0 {
            self.stack.poll_transmit_lent(now)
        } else {
            None
        };
        while let Some(frame) = next.take() {
            n += 1;
            if n < want {
                next = self.stack.poll_transmit_lent(now);
            }
            let more = next.is_some();
            let Shard { stack, device, .. } = self;
            let (sent, buf) = match frame {
                TxFrame::Whole(frame) => (device.send_more(now, &frame, more), frame),
                TxFrame::Split { head, payload }
                    if self.tx_hold
                        && let Some(id) = stack.tx_held_piece(&payload, head.len()) =>
                {
                    // Exactly one piece written at `send()` into a held slot: its
                    // headers in front, and the slot posted as it is.
                    let len = head.len() + payload.len();
                    let mut sent =
                        stack.write_held_head(id, &head) && device.tx_hold_send(now, id, len, more);
                    if !sent {
                        sent = device.send_with(now, len, more, &mut |w| {
                            w.put(&head) && stack.write_tx_payload(&payload, |bytes| w.put(bytes))
                        });
                    }
                    held += u64::from(sent);
                    (sent, head)
                }
                TxFrame::Split { head, payload } => {
                    let len = head.len() + payload.len();
                    let sent = device.send_with(now, len, more, &mut |w| {
                        w.put(&head) && stack.write_tx_payload(&payload, |bytes| w.put(bytes))
                    });
                    lent += u64::from(sent);
                    (sent, head)
                }
            };
            dropped += usize::from(!sent);
            self.stack.recycle(buf);
        }
        if n > 0 {
            self.stats.tx_lent += lent;
            self.stats.tx_in_place += held;
            self.count_batch(n, dropped, result);
        }
        n
    }

    /// Count a batch of `n` frames handed to the device, `dropped` of them refused.
    #[inline]
    fn count_batch(&mut self, n: usize, dropped: usize, result: &mut PollResult) {
        result.tx += n;
        self.stats.transmitted += n as u64;
        self.stats.tx_dropped += dropped as u64;
        self.stats.tx_batches += 1;
    }

    /// When the next round has work without new input from outside: the earlier of the
    /// stack's next timer and the device's next arrival ([`Device::poll_at`]); `None` if
    /// neither has anything scheduled. After a round that returned
    /// [`work_left`](PollResult::work_left), poll again at once instead.
    pub fn next_wakeup(&self) -> Option<Instant> {
        // The stack keeps its next deadline as timers are armed: one load.
        match (self.stack.poll_timeout(), self.device.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The frame a device left in its memory, for [`Stack::receive_direct`]: its bytes read
/// from there, and the frame kept for a receive queue to hold if the device keeps frames.
struct HeldFrame<'a, D>(&'a mut D);

impl<D: Device> DirectFrame for HeldFrame<'_, D> {
    #[inline]
    fn read(&mut self, from: usize, dst: &mut [u8]) {
        self.0.read_held(from, dst);
    }
    #[inline]
    fn keep(&mut self) -> Option<u32> {
        self.0.keep_held()
    }
    fn release(&mut self, id: u32) {
        self.0.release_kept(id);
    }
}
