//! `shm`: a link over shared-memory rings between two processes, like DPDK's memif.
//!
//! No root and no kernel networking: the frames of both directions live in one memfd that
//! both processes map, and doorbells (a futex, or an eventfd) wake a peer that went to
//! sleep. It is the
//! default link of `ustack bench`, so it is built to cost little per frame: one copy in,
//! one copy out, no system call while both sides are busy, and a few cache lines shared per
//! batch. The crate's `examples/shm_pps.rs` measures it (packets/s per core).
//!
//! # Region layout
//!
//! One memfd (`memfd_create(2)`, named `ustack-shm-<link id>`), its size fixed by seals
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`, so neither side can make the other's
//! mapping fault with SIGBUS), mapped `MAP_SHARED` by both sides:
//!
//! ```text
//! 0        header (one page): magic, version, queue_pairs, ring_size, slot_size,
//!          medium, mtu, region length, link id           -- written once by the creator
//! 4096     control: per queue pair, per direction (A->B, B->A), four 128-byte lines:
//!            +0    desc_head                      written by the sender (for tools)
//!            +128  desc_tail, comp_head           written by the receiver
//!            +256  rx_need_wakeup                 written by the receiver (set to sleep)
//!            +384  tx_need_wakeup                 written by the sender (set to sleep)
//!          rings: per queue pair, per direction:
//!            desc ring  ring_size x 256 bytes ([`DESC_LEN`]): a u64 (slot | length << 16
//!                       | sequence << 40, [`desc_entry`]) alone in its line, then three
//!                       lines for a frame of up to 192 bytes ([`INLINE_OFF`],
//!                       [`INLINE_MAX`]): sender -> receiver
//!            comp ring  ring_size x u32 (slot index): receiver -> sender (free slots)
//! (page)   frames: per queue pair, per direction, ring_size slots of slot_size bytes
//! ```
//!
//! [`ShmLayout`] computes every offset; both sides compute it from the same four numbers.
//! Lines are 128 bytes, not 64, because Intel's adjacent-line prefetcher pulls lines in
//! pairs: a counter written by one side must not share a 128-byte block with one written
//! by the other, or the two cores steal the block from each other on every update.
//!
//! # Rings and slots
//!
//! Each direction of each queue pair has its own `ring_size` frame slots, owned by its
//! sender, and two single-producer single-consumer rings of `ring_size` entries with
//! free-running `u32` indices (masked by `ring_size - 1`; a power of two):
//!
//! 1. The sender takes a free slot, copies the frame into it (or, through
//!    [`Device::send_with`](crate::Device::send_with), lends the slot to its caller, who
//!    writes the frame there in pieces; a slot not filled is never posted); a frame of at
//!    most [`INLINE_MAX`] bytes goes into the lines of the ring entry it will be posted
//!    at instead, its slot taken all the same (unwritten: slots count what is in flight,
//!    so the rings cannot overflow, and the receiver returns it as any). It writes the
//!    descriptor `(slot, len, sequence)` at `desc[desc_head]` (Release), and counts
//!    `desc_head + 1`, batched: the descriptors are written once per [`Device::send`], but
//!    for a whole [`Device::send_batch`] (or run of [`Device::send_more`], Linux's
//!    `xmit_more`) together at its end, counted in [`ShmStats::tx_publishes`]; `desc_head`
//!    is stored after them for tools.
//! 2. The receiver loads the descriptor at its `desc_tail` (Acquire): a new frame when
//!    its sequence is [`desc_seq`]`(desc_tail)`, nothing yet when it is the sequence of a
//!    lap before. It copies each frame out and hands the slot back:
//!    `comp[comp_head] = slot`, then publishes `comp_head + 1` (Release), batched: at the
//!    end of a batch, when the next descriptor is not yet due, and at least every
//!    [`PUBLISH_EVERY`].
//! 3. The sender loads `comp_head` (Acquire) and puts the returned slots on its free list
//!    (LIFO, so the next frame goes into the slot whose cache lines are warmest).
//!
//! [`Device::recv_head`](crate::Device::recv_head) takes a frame over 1 KiB in two parts:
//! its first [`RX_HEAD`] bytes (the headers, for the stack to check on a private copy) at
//! once, the rest through [`Device::read_held`](crate::Device::read_held) straight to
//! where it belongs (a TCP receive queue); the slot is returned at the next receive call
//! or before sleeping, never while the receiver may still read it.
//!
//! A sender may also hold a slot as its own memory ([`Device::tx_hold`](crate::Device::tx_hold),
//! `hold.rs`): written ahead of sending, sent from where it is (and sent again once the
//! receiver returned it), and back on the free list only when the sender released it and
//! the receiver returned its last frame, in either order. The stack writes long writes
//! straight into held slots at `send()` and sends a segment that is one such piece in
//! place (`ustack_stack`'s `tcp/buffer/held.rs`, the shard's `held_slots`).
//!
//! Slots circulate by index, never by copying between rings; the descriptor ring carries
//! which slot holds a frame and the completion ring carries which slots are free again, so
//! a receiver may return slots out of order (one that holds some frames longer than
//! others, say).
//! Since a direction has exactly `ring_size` slots, neither ring can overflow while both
//! sides follow the protocol: a sender with no free slot has nothing to post, and a
//! receiver returns each slot once. So a side never needs to read the other side's
//! consumer index (`desc_tail` is published for diagnostics only), which keeps one shared
//! line out of the fast path.
//!
//! The receiver does not read the sender's producer index either: it reads the descriptor
//! it will take next, whose line it must fetch anyway, and the sequence in it says whether
//! it is new (as virtio 1.1's packed ring and ixgbe's DD bit do). A small frame crossing
//! an idle link then moves the descriptor's line and the three after it, fetched at once
//! (their addresses known): not `desc_head`'s line, then the descriptor's, then the
//! slot's lines named in it, one after another. And an idle port writes a byte into each
//! line of the entry and the slot its next send will take (`own_next_slot`): lines the
//! peer read last, which a send would otherwise have to take back from the peer's cache
//! before its descriptor could become visible (x86 stores become visible in order).
//!
//! What each step did to a round trip, `cargo run --release -p ustack-dev --example
//! shm_ping` (the fastest batch of 1,000; 2 vCPUs of an Intel Xeon, model 207, under KVM,
//! loaded by other builds, so runs of one binary vary by up to a fifth; two cache lines'
//! round trip there, one line each way, is 204-277 ns): a 130-byte frame (a 64-byte TCP
//! message) 1,003-1,045 ns with `desc_head` polled; 699-714 with the sequence polled;
//! 558-564 with the next slot taken while idle (649-663 in a later, slower spell); in the
//! descriptor's lines 500-516 (interleaved with the last, same spell). One TCP connection
//! over the link, `cargo run --release -p ustack-runtime --example shm_ping_tcp`, three
//! interleaved runs: 1,592-1,630 ns before, 1,003-1,063 after.
//!
//! **Memory ordering.** Release on a publishing store orders everything before it (the
//! frame bytes and the descriptor, or for a completion the receiver's reads of the slot)
//! before the new index becomes visible; Acquire on the other side's load of that index
//! orders its later reads of descriptors and frame bytes (or its reuse of the slot) after.
//! A descriptor is its own publishing store: written with Release after its frame's
//! bytes, loaded with Acquire before them.
//! This is the whole synchronisation of the data path: the sender never writes a slot
//! between posting it and seeing it completed, and the receiver never reads a slot after
//! completing it. Entries are written and read as atomics, so a descriptor is never torn.
//!
//! # Doorbells (notification suppression)
//!
//! Each side of each queue pair has an eventfd it sleeps on. A side that finds nothing to
//! do sets its `rx_need_wakeup` flag (and `tx_need_wakeup` if it is waiting for free
//! slots) before sleeping; the other side writes the eventfd only when it sees the flag,
//! so while both sides are busy there are no system calls at all (virtio's
//! `VRING_USED_F_NO_NOTIFY` / memif's interrupt mode, and AF_XDP's `need_wakeup`).
//!
//! The protocol is race-free because it is Dekker's: the sleeper does
//! `flag = 1; fence(SeqCst); check ring; sleep if empty`, the waker does
//! `publish head; fence(SeqCst); if flag { flag = 0; write eventfd }`. By the SeqCst
//! fence rule, in any interleaving at least one side sees the other's store: either the
//! sleeper sees the new frame and does not sleep, or the waker sees the flag and rings.
//! An eventfd is a counter, so a ring that lands between the check and `poll(2)` is not
//! lost: `poll` returns at once. The waker clears the flag as it rings (one system call
//! per sleep, not one per frame); the sleeper clears it and drains the eventfd on waking.
//! A stale ring costs one spurious wakeup, after which [`ShmPort::wait`] checks again.
//!
//! The flag's value says how the sleeper is to be woken: 1, on its eventfd (a sleep in
//! `poll(2)`, epoll or tokio on [`ShmPort::fd`], or [`wait_any`]); 2, by `FUTEX_WAKE` on
//! its own `rx_need_wakeup` word ([`ShmPort::wait`], the runtime's sleep): the waker then
//! zeroes that word and wakes it, one system call, and the sleeper has nothing to drain.
//! `FUTEX_WAIT` sleeps only while the word still holds 2, so a ring between the check and
//! the wait is not lost either. Any other nonzero value (a hostile peer's) is rung both
//! ways.
//!
//! # Distrust of the peer
//!
//! The other process may be buggy or hostile, and safe code here must stay sound whatever
//! it writes into the region, whenever it writes it:
//!
//! - Shared memory is reached only through `crate::sys::mapping` (the workspace's only
//!   `unsafe` code, with the argument written there): control words as atomics, frame
//!   bytes only by bounds-checked copies, reads volatile, so nothing is read twice.
//! - Each side keeps its own indices in private memory and only publishes them; it never
//!   reads back what it owns. It reads only the peer's `comp_head`, and the sequences of
//!   the peer's descriptors: an index more than `ring_size` ahead of its own, or a
//!   descriptor whose sequence is neither due nor a lap old, stops that ring for good:
//!   [`ShmFault`], [`ShmStats::bad_index`].
//! - Every descriptor is checked: slot index below `ring_size`, length at most the largest
//!   frame. A bad one is dropped and counted ([`ShmStats::bad_desc`]).
//! - Every returned slot is checked: in range, and actually in flight (a private bitmap),
//!   so a slot returned twice or never sent is ignored and counted
//!   ([`ShmStats::bad_comp`]); the free list can never exceed `ring_size`.
//! - The geometry is read once, at attach, validated against the mapped size, and kept
//!   privately; later changes to the header are ignored.
//!
//! A hostile peer can garble or drop the frames sent to it or by it, or stop the link; it
//! cannot make this side read or write outside the region, panic, or hang (waits take a
//! timeout).
//!
//! # Endpoints and handing the link over
//!
//! [`ShmLink::create`] makes the region and returns side A's ports (one [`ShmPort`] per
//! queue pair, to be moved to its shard's thread) and a [`ShmPeer`]: side B's file
//! descriptors, not yet mapped. Side B gets it one of three ways:
//!
//! - the same process: [`ShmPeer::attach`] (tests, threads);
//! - over a connected Unix socket: [`ShmPeer::send`] / [`ShmPeer::recv`] (`SCM_RIGHTS`);
//! - by name: [`ShmPeer::offer`] binds an abstract Unix socket with a random name, the
//!   other process (a child given the name in argv or the environment, or any process of
//!   the same user) calls [`ShmPeer::connect`], and [`ShmOffer::hand_over`] accepts it,
//!   checks `SO_PEERCRED` is the same user, and sends the descriptors.
//!
//! Passing descriptors with `SCM_RIGHTS` rather than by inheritance across `exec` means
//! the receiving side gets them as owned descriptors from the kernel, with no guessing
//! from numbers in the environment and no descriptors leaked into unrelated children; an
//! abstract socket needs no file to clean up.
//!
//! # Cost
//!
//! `cargo run --release -p ustack-dev --example shm_pps` measures nanoseconds per frame
//! (and so frames per second per core) with frames numbered and checked on arrival. On the
//! development machine (2 vCPUs of an AMD EPYC, Zen 5, under KVM, 1 MiB L2 per core,
//! shared with other builds, so the two-process figures vary by about a third):
//!
//! | case (ring 256, 2 KiB slots) | 64 B | 1500 B |
//! |---|---|---|
//! | one core, both ends, `send_until_full`/`recv_batch` of 32 | 15 ns (67 Mpps) | 63 ns (16 Mpps) |
//! | one core, both ends, `Device::send`/`recv` | 20 ns (50 Mpps) | 57 ns (17 Mpps) |
//! | two processes, each side, batches of 32 | 20-25 ns (40 Mpps/core) | 100-130 ns (8 Mpps/core) |
//! | two processes, each side, `Device` | 45-65 ns (16 Mpps/core) | 125-165 ns (7 Mpps/core) |
//!
//! Between processes the cost is mostly the frame's cache lines moving from the sender's
//! core to the receiver's, and, one frame at a time, the sender's fence after each index
//! publication waiting for the line the receiver polls; batches pay that once per batch.
//!
//! ```
//! use ustack_dev::Device;
//! use ustack_dev::shm::{ShmConfig, ShmLink};
//! use ustack_obs::time::Instant;
//!
//! let (mut a, peer) = ShmLink::create(&ShmConfig::default())?;
//! let mut b = peer.attach()?; // in another process: peer.offer() / ShmPeer::connect(name)
//! assert!(a[0].send(Instant::ZERO, b"hello"));
//! let mut buf = [0u8; 1514];
//! assert_eq!(b[0].recv(Instant::ZERO, &mut buf), Some(5));
//! assert_eq!(&buf[..5], b"hello");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! [`Device::send`]: crate::Device::send
//! [`Device::send_batch`]: crate::Device::send_batch
//! [`Device::send_more`]: crate::Device::send_more

mod batch;
mod doorbell;
mod hold;
mod layout;
mod link;
mod ring;

use core::fmt;
use core::sync::atomic::Ordering;
use std::io;

pub use batch::FrameBatch;
pub use doorbell::wait_any;
pub use layout::{
    DESC_LEN, HEADER_LEN, INLINE_MAX, INLINE_OFF, LINE, MAX_QUEUE_PAIRS, MAX_REGION_LEN,
    MAX_RING_SIZE, MAX_SLOT_SIZE, ShmLayout, VERSION, desc_entry, desc_seq,
};
pub use link::{ShmLink, ShmOffer, ShmPeer};
pub use ring::{PUBLISH_EVERY, RX_HEAD, ShmPort};

use crate::Medium;

/// One end of a shm link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ShmSide {
    /// The side that created the link ([`ShmLink::create`]).
    A,
    /// The side that attached to it ([`ShmPeer::attach`]).
    B,
}

impl ShmSide {
    /// The other end.
    pub const fn peer(self) -> ShmSide {
        match self {
            ShmSide::A => ShmSide::B,
            ShmSide::B => ShmSide::A,
        }
    }
}

/// Shape of a shm link. `ShmConfig::default()`: one queue pair, 256-entry rings, 2048-byte
/// slots, Ethernet, MTU 1500.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConfig {
    /// Queue pairs, one per shard (`1..=`[`MAX_QUEUE_PAIRS`]).
    pub queue_pairs: usize,
    /// Entries per ring, and frame slots per direction of each queue pair: a power of two
    /// in `2..=`[`MAX_RING_SIZE`]. The most frames in flight one way.
    ///
    /// Bigger is not faster: when the receiver falls behind, every slot is in flight and
    /// `ring_size * slot_size` bytes per direction circulate between the two cores. The
    /// default, 256 x 2 KiB = 512 KiB, stays inside a 1 MiB L2 cache; at 512 the 1500-byte
    /// frame rate between two processes fell about fourfold on the development machine.
    /// The descriptor ring adds [`DESC_LEN`] (256) bytes an entry, 64 KiB at 256, where
    /// frames of up to [`INLINE_MAX`] bytes travel (their slots are not written).
    pub ring_size: usize,
    /// Bytes per frame slot: a multiple of 64, at most [`MAX_SLOT_SIZE`], and at least
    /// the largest frame (`mtu + medium.header_len()`). 2048 for a 1500 MTU; e.g. 65600
    /// for 64 KiB super-segments.
    pub slot_size: usize,
    /// What the link carries.
    pub medium: Medium,
    /// IP MTU, link-layer header excluded (reported by [`Device::caps`]).
    ///
    /// [`Device::caps`]: crate::Device::caps
    pub mtu: usize,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            queue_pairs: 1,
            ring_size: 256,
            slot_size: 2048,
            medium: Medium::Ethernet,
            mtu: 1500,
        }
    }
}

/// Counters of one [`ShmPort`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShmStats {
    /// Frames sent (posted to the ring).
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames refused because every slot was in flight: back-pressure for
    /// [`ShmPort::send_until_full`], whose caller still holds the frame; a drop for
    /// [`Device::send`] and [`Device::send_batch`].
    ///
    /// [`Device::send`]: crate::Device::send
    /// [`Device::send_batch`]: crate::Device::send_batch
    pub tx_full: u64,
    /// Frames refused for exceeding the MTU plus the link-layer header.
    pub tx_too_big: u64,
    /// Frames refused because the transmit ring was stopped by a [`ShmFault`].
    pub tx_stopped: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received (as copied: after truncation).
    pub rx_bytes: u64,
    /// Received frames longer than the receiver's buffer (cut to fit).
    pub rx_truncated: u64,
    /// Received frames left in their slot past their headers by
    /// [`Device::recv_head`](crate::Device::recv_head), for the stack to copy the payload
    /// from the slot straight into a receive queue ([`ShmPort::set_rx_head`]).
    pub rx_held: u64,
    /// Of those, frames kept for the stack past the receive call
    /// ([`Device::keep_held`](crate::Device::keep_held)): their payload read from the slot
    /// straight into the application's buffer.
    pub rx_kept: u64,
    /// Kept slots given back ([`Device::release_kept`](crate::Device::release_kept)).
    pub rx_kept_released: u64,
    /// Releases of a slot that was not kept (ignored).
    pub bad_release: u64,
    /// Frames written in place, in a slot lent to the caller ([`Device::send_with`]),
    /// instead of copied in from the caller's buffer (of [`tx_frames`](Self::tx_frames)).
    ///
    /// [`Device::send_with`]: crate::Device::send_with
    pub tx_lent: u64,
    /// Slots lent by [`Device::send_with`] that the caller did not fill: given back
    /// unposted, the frame not sent.
    ///
    /// [`Device::send_with`]: crate::Device::send_with
    pub tx_unfilled: u64,
    /// Slots taken for the caller to hold ([`Device::tx_hold`]).
    ///
    /// [`Device::tx_hold`]: crate::Device::tx_hold
    pub tx_held: u64,
    /// Frames sent from held slots ([`Device::tx_hold_send`], of
    /// [`tx_frames`](Self::tx_frames)).
    ///
    /// [`Device::tx_hold_send`]: crate::Device::tx_hold_send
    pub tx_held_sent: u64,
    /// Held slots released by the caller ([`Device::tx_hold_release`]).
    ///
    /// [`Device::tx_hold_release`]: crate::Device::tx_hold_release
    pub tx_held_released: u64,
    /// Sends from, or releases of, slots not held (or, for a send, still with the peer,
    /// too long, or on a stopped ring): refused, nothing sent or freed.
    pub tx_held_refused: u64,
    /// Transmit ring publications: the placed descriptors written to the ring and
    /// `desc_head` stored, followed by a SeqCst fence
    /// and a look at the peer's `rx_need_wakeup` flag. One per [`Device::send`], one per
    /// batch ([`Device::send_batch`], [`ShmPort::send_until_full`], or a run of
    /// [`Device::send_more`] ended by `more == false`) that placed a frame.
    ///
    /// [`Device::send`]: crate::Device::send
    /// [`Device::send_batch`]: crate::Device::send_batch
    /// [`Device::send_more`]: crate::Device::send_more
    pub tx_publishes: u64,
    /// Doorbells rung: eventfd writes or `FUTEX_WAKE`s to wake the sleeping peer.
    pub doorbells: u64,
    /// Times [`ShmPort::wait`] (in `FUTEX_WAIT`) or [`wait_any`] (in `poll(2)`) went to
    /// sleep.
    pub sleeps: u64,
    /// Times the need-wakeup flags were raised before a sleep: each sleep, and each
    /// sleep given up because work came after the flag went up (the peer may have rung
    /// for that one too, so [`doorbells`](Self::doorbells) are bounded by the peer's
    /// arms, not its sleeps).
    pub arms: u64,
    /// Descriptors from the peer with a slot index or length out of range (frame dropped).
    pub bad_desc: u64,
    /// Slots returned by the peer that were out of range or not in flight (ignored).
    pub bad_comp: u64,
    /// Peer `comp_head`s more than a ring ahead of ours, or descriptor sequences neither
    /// due nor a lap old (the ring is stopped; [`ShmFault`]).
    pub bad_index: u64,
}

/// A protocol violation by the peer that stopped a ring of a [`ShmPort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShmFault {
    /// The descriptor at our `desc_tail` carried a sequence that is neither the one due
    /// there ([`desc_seq`]`(tail)`: a new frame) nor the one of a lap before (not yet
    /// written): receiving stopped.
    DescSeq {
        /// The sequence found.
        seq: u32,
        /// Our `desc_tail`.
        tail: u32,
    },
    /// The peer's `comp_head` claimed more than a ring of returned slots ahead of ours:
    /// sending stopped.
    CompHead {
        /// The peer's index.
        head: u32,
        /// Ours.
        tail: u32,
    },
}

impl fmt::Display for ShmFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShmFault::DescSeq { seq, tail } => {
                write!(
                    f,
                    "peer descriptor at desc_tail {tail} has sequence {seq:#x}, due {:#x}",
                    desc_seq(*tail)
                )
            }
            ShmFault::CompHead { head, tail } => {
                write!(
                    f,
                    "peer comp_head {head} is more than a ring past ours {tail}"
                )
            }
        }
    }
}

/// 64 unpredictable bits: SipHash keyed from the OS's randomness (std's `RandomState`)
/// over the time, the pid and a counter.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    h.write_u128(now.map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

fn bad_input(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn bad_data(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn bad_data_owned(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
