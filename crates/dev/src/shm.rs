//! `shm`: a link over shared-memory rings between two processes, like DPDK's memif.
//!
//! No root and no kernel networking: the frames of both directions live in one memfd that
//! both processes map, and eventfd doorbells wake a peer that went to sleep. It is the
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
//!            +0    desc_head                      written by the sender
//!            +128  desc_tail, comp_head           written by the receiver
//!            +256  rx_need_wakeup                 written by the receiver (set to sleep)
//!            +384  tx_need_wakeup                 written by the sender (set to sleep)
//!          rings: per queue pair, per direction:
//!            desc ring  ring_size x u64 (slot index | length << 32): sender -> receiver
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
//! 1. The sender takes a free slot, copies the frame into it, writes the descriptor
//!    `(slot, len)` at `desc[desc_head]`, and publishes `desc_head + 1` (Release), batched:
//!    once per [`Device::send`], but once for a whole [`Device::send_batch`] (or run of
//!    [`Device::send_more`], Linux's `xmit_more`), counted in [`ShmStats::tx_publishes`].
//! 2. The receiver loads `desc_head` (Acquire), reads descriptors from its `desc_tail`,
//!    copies each frame out, and hands the slot back: `comp[comp_head] = slot`, then
//!    publishes `comp_head + 1` (Release), batched: at the end of a batch, when it has
//!    caught up with the `desc_head` it loaded, and at least every [`PUBLISH_EVERY`].
//! 3. The sender loads `comp_head` (Acquire) and puts the returned slots on its free list
//!    (LIFO, so the next frame goes into the slot whose cache lines are warmest).
//!
//! Slots circulate by index, never by copying between rings; the descriptor ring carries
//! which slot holds a frame and the completion ring carries which slots are free again, so
//! a receiver may return slots out of order (as a future zero-copy receive path would).
//! Since a direction has exactly `ring_size` slots, neither ring can overflow while both
//! sides follow the protocol: a sender with no free slot has nothing to post, and a
//! receiver returns each slot once. So a side never needs to read the other side's
//! consumer index (`desc_tail` is published for diagnostics only), which keeps one shared
//! line out of the fast path.
//!
//! **Memory ordering.** Release on a publishing store orders everything before it (the
//! frame bytes and the descriptor, or for a completion the receiver's reads of the slot)
//! before the new index becomes visible; Acquire on the other side's load of that index
//! orders its later reads of descriptors and frame bytes (or its reuse of the slot) after.
//! This is the whole synchronisation of the data path: the sender never writes a slot
//! between posting it and seeing it completed, and the receiver never reads a slot after
//! completing it. Entries themselves are written and read with Relaxed atomics, so a
//! descriptor is never torn.
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
//! # Distrust of the peer
//!
//! The other process may be buggy or hostile, and safe code here must stay sound whatever
//! it writes into the region, whenever it writes it:
//!
//! - Shared memory is reached only through `crate::sys::mapping` (the workspace's only
//!   `unsafe` code, with the argument written there): control words as atomics, frame
//!   bytes only by bounds-checked copies, reads volatile, so nothing is read twice.
//! - Each side keeps its own indices in private memory and only publishes them; it never
//!   reads back what it owns. It reads only the peer's producer indices, and an index more
//!   than `ring_size` ahead of its own stops that ring for good: [`ShmFault`],
//!   [`ShmStats::bad_index`].
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

use core::fmt;
use core::mem::MaybeUninit;
use core::sync::atomic::{Ordering, fence};
use core::time::Duration;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use ustack_obs::time::Instant;

use crate::sys::mapping::Mapping;
use crate::{Device, DeviceCaps, Medium};

/// Region magic: `"ustkshm\0"`.
const MAGIC: u64 = u64::from_le_bytes(*b"ustkshm\0");
/// Layout version; bumped on any change to the region layout or the protocol.
pub const VERSION: u32 = 1;
/// Size of a shared control line (two 64-byte cache lines; see the module docs).
pub const LINE: usize = 128;
/// Bytes reserved for the header at the start of the region.
pub const HEADER_LEN: usize = 4096;
/// Most queue pairs per link.
pub const MAX_QUEUE_PAIRS: usize = 64;
/// Largest ring (entries, and slots per direction).
pub const MAX_RING_SIZE: usize = 1 << 15;
/// Largest frame slot.
pub const MAX_SLOT_SIZE: usize = 1 << 20;
/// Largest region.
pub const MAX_REGION_LEN: usize = 1 << 36;
/// A receiver publishes returned slots at least this often (or every half ring, if that is
/// less), whenever it catches up with the sender, and at the end of each batch.
pub const PUBLISH_EVERY: u32 = 32;
/// A sender looks for returned slots at least this often (and whenever it has none).
const RECLAIM_EVERY: u32 = 32;

// Header fields (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_QUEUE_PAIRS: usize = 12;
const H_RING_SIZE: usize = 16;
const H_SLOT_SIZE: usize = 20;
const H_MEDIUM: usize = 24;
const H_MTU: usize = 28;
const H_REGION_LEN: usize = 32;
const H_LINK_ID: usize = 40;

// Control lines of one direction (byte offsets from its control block).
const C_DESC_HEAD: usize = 0;
const C_DESC_TAIL: usize = LINE;
const C_COMP_HEAD: usize = LINE + 4;
const C_RX_NEED_WAKEUP: usize = 2 * LINE;
const C_TX_NEED_WAKEUP: usize = 3 * LINE;
const CTRL_PER_DIR: usize = 4 * LINE;

// The hand-over message sent with the descriptors.
const HANDOVER_MAGIC: u64 = u64::from_le_bytes(*b"ustkfds\0");
const HANDOVER_LEN: usize = 24;
const MAX_FDS: usize = 1 + 2 * MAX_QUEUE_PAIRS;

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
    pub ring_size: usize,
    /// Bytes per frame slot: a multiple of 64, at most [`MAX_SLOT_SIZE`], and at least
    /// the largest frame (`mtu + medium.header_len()`). 2048 for a 1500 MTU; e.g. 65600
    /// for 64 KiB super-segments.
    pub slot_size: usize,
    /// What the link carries.
    pub medium: Medium,
    /// IP MTU, link-layer header excluded (reported by [`Device::caps`]).
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

/// Byte offsets of everything in a shm region. Both sides compute it from the same
/// geometry; it is public so that tools (and tests playing a misbehaving peer) can find
/// the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLayout {
    queue_pairs: usize,
    ring_size: usize,
    slot_size: usize,
    rings_off: usize,
    desc_ring_len: usize,
    comp_ring_len: usize,
    frames_off: usize,
    len: usize,
}

impl ShmLayout {
    /// The layout for a geometry, or `InvalidInput` if it is outside the limits in
    /// [`ShmConfig`]'s field docs.
    pub fn new(queue_pairs: usize, ring_size: usize, slot_size: usize) -> io::Result<ShmLayout> {
        if !(1..=MAX_QUEUE_PAIRS).contains(&queue_pairs) {
            return Err(bad_input("shm: queue_pairs must be 1..=64"));
        }
        if !ring_size.is_power_of_two() || !(2..=MAX_RING_SIZE).contains(&ring_size) {
            return Err(bad_input(
                "shm: ring_size must be a power of two in 2..=32768",
            ));
        }
        if slot_size == 0 || !slot_size.is_multiple_of(64) || slot_size > MAX_SLOT_SIZE {
            return Err(bad_input(
                "shm: slot_size must be a multiple of 64 up to 1 MiB",
            ));
        }
        let dirs = 2 * queue_pairs;
        let desc_ring_len = round_up(ring_size * 8, LINE);
        let comp_ring_len = round_up(ring_size * 4, LINE);
        let rings_off = HEADER_LEN + dirs * CTRL_PER_DIR;
        let frames_off = round_up(rings_off + dirs * (desc_ring_len + comp_ring_len), 4096);
        // At most 128 * 2^15 * 2^20 bytes of frames: fits a u64, checked against usize.
        let frames_len = (dirs as u64) * (ring_size as u64) * (slot_size as u64);
        let len = (frames_off as u64)
            .checked_add(frames_len)
            .filter(|&l| l <= MAX_REGION_LEN as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| bad_input("shm: region larger than 64 GiB"))?;
        Ok(ShmLayout {
            queue_pairs,
            ring_size,
            slot_size,
            rings_off,
            desc_ring_len,
            comp_ring_len,
            frames_off,
            len,
        })
    }

    /// Queue pairs.
    pub const fn queue_pairs(&self) -> usize {
        self.queue_pairs
    }
    /// Entries per ring (and slots per direction).
    pub const fn ring_size(&self) -> usize {
        self.ring_size
    }
    /// Bytes per frame slot.
    pub const fn slot_size(&self) -> usize {
        self.slot_size
    }
    /// Total region length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }
    /// Whether the region is empty (never: a valid layout has a header).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the direction of queue pair `queue` sent by `from`.
    const fn dir(&self, queue: usize, from: ShmSide) -> usize {
        2 * queue
            + match from {
                ShmSide::A => 0,
                ShmSide::B => 1,
            }
    }
    const fn ctrl(&self, queue: usize, from: ShmSide) -> usize {
        HEADER_LEN + self.dir(queue, from) * CTRL_PER_DIR
    }
    /// Offset of `desc_head` (a `u32`) of queue pair `queue`, direction sent by `from`.
    pub const fn desc_head_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_DESC_HEAD
    }
    /// Offset of `desc_tail` (a `u32`, informational) of that direction.
    pub const fn desc_tail_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_DESC_TAIL
    }
    /// Offset of `comp_head` (a `u32`) of that direction.
    pub const fn comp_head_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_COMP_HEAD
    }
    /// Offset of the receiver's `rx_need_wakeup` flag (a `u32`) of that direction.
    pub const fn rx_need_wakeup_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_RX_NEED_WAKEUP
    }
    /// Offset of the sender's `tx_need_wakeup` flag (a `u32`) of that direction.
    pub const fn tx_need_wakeup_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_TX_NEED_WAKEUP
    }
    /// Offset of the descriptor ring (`ring_size` x `u64`: slot | len << 32).
    pub const fn desc_ring_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.rings_off + self.dir(queue, from) * (self.desc_ring_len + self.comp_ring_len)
    }
    /// Offset of the completion ring (`ring_size` x `u32` slot indices).
    pub const fn comp_ring_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.desc_ring_offset(queue, from) + self.desc_ring_len
    }
    /// Offset of the first frame slot of that direction.
    pub const fn frames_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.frames_off + self.dir(queue, from) * self.ring_size * self.slot_size
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
    /// Transmit ring publications: stores of `desc_head`, each followed by a SeqCst fence
    /// and a look at the peer's `rx_need_wakeup` flag. One per [`Device::send`], one per
    /// batch ([`Device::send_batch`], [`ShmPort::send_until_full`], or a run of
    /// [`Device::send_more`] ended by `more == false`) that placed a frame.
    pub tx_publishes: u64,
    /// Doorbells rung: eventfd writes to wake the sleeping peer.
    pub doorbells: u64,
    /// Times [`ShmPort::wait`] went to sleep in `poll(2)`.
    pub sleeps: u64,
    /// Descriptors from the peer with a slot index or length out of range (frame dropped).
    pub bad_desc: u64,
    /// Slots returned by the peer that were out of range or not in flight (ignored).
    pub bad_comp: u64,
    /// Peer ring indices more than a ring ahead of ours (the ring is stopped; [`ShmFault`]).
    pub bad_index: u64,
}

/// A protocol violation by the peer that stopped a ring of a [`ShmPort`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShmFault {
    /// The peer's `desc_head` claimed more than a ring of frames ahead of our `desc_tail`:
    /// receiving stopped.
    DescHead {
        /// The peer's index.
        head: u32,
        /// Ours.
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
            ShmFault::DescHead { head, tail } => {
                write!(
                    f,
                    "peer desc_head {head} is more than a ring past desc_tail {tail}"
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

/// What both sides' ports share: the mapping and the doorbells.
#[derive(Debug)]
struct Shared {
    map: Mapping,
    /// Doorbell of (queue `q`, side s) at `2q + (s == B)`.
    bells: Vec<OwnedFd>,
    layout: ShmLayout,
    caps: DeviceCaps,
    link_id: u64,
}

/// Creates shm links.
#[derive(Debug)]
pub struct ShmLink;

impl ShmLink {
    /// Creates a link: the region, side A's ports (one per queue pair, in queue order) and
    /// the [`ShmPeer`] descriptor side B attaches with. Errors: `InvalidInput` for a bad
    /// config; OS errors from `memfd_create`, `ftruncate`, `mmap`, `eventfd`.
    pub fn create(config: &ShmConfig) -> io::Result<(Vec<ShmPort>, ShmPeer)> {
        let layout = ShmLayout::new(config.queue_pairs, config.ring_size, config.slot_size)?;
        let caps = validate_caps(config.medium, config.mtu, layout.slot_size)?;
        let link_id = random_u64();
        let memfd = rustix::fs::memfd_create(
            format!("ustack-shm-{link_id:016x}"),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&memfd, layout.len as u64)?;
        rustix::fs::fcntl_add_seals(
            &memfd,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )?;
        let map = Mapping::map(memfd.as_fd(), Some(layout.len))?;
        let h32 = |off, v: usize| map.u32_at(off).store(v as u32, Ordering::Relaxed);
        h32(H_VERSION, VERSION as usize);
        h32(H_QUEUE_PAIRS, layout.queue_pairs);
        h32(H_RING_SIZE, layout.ring_size);
        h32(H_SLOT_SIZE, layout.slot_size);
        h32(H_MEDIUM, medium_code(caps.medium) as usize);
        h32(H_MTU, caps.mtu);
        map.u64_at(H_REGION_LEN)
            .store(layout.len as u64, Ordering::Relaxed);
        map.u64_at(H_LINK_ID).store(link_id, Ordering::Relaxed);
        map.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
        let mut bells = Vec::with_capacity(2 * layout.queue_pairs);
        for _ in 0..2 * layout.queue_pairs {
            bells.push(rustix::event::eventfd(
                0,
                EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
            )?);
        }
        let peer = ShmPeer {
            memfd,
            bells: bells
                .iter()
                .map(|b| b.try_clone())
                .collect::<io::Result<_>>()?,
            link_id,
        };
        let shared = Arc::new(Shared {
            map,
            bells,
            layout,
            caps,
            link_id,
        });
        Ok((ShmPort::all(&shared, ShmSide::A), peer))
    }

    /// Both ends in this process: side A's and side B's ports (tests, benchmarks).
    pub fn pair(config: &ShmConfig) -> io::Result<(Vec<ShmPort>, Vec<ShmPort>)> {
        let (a, peer) = ShmLink::create(config)?;
        Ok((a, peer.attach()?))
    }
}

/// Side B's share of a link, not yet mapped: the memfd and the doorbell eventfds. Attach
/// in this process with [`attach`](Self::attach), or pass to another process with
/// [`send`](Self::send) or [`offer`](Self::offer).
#[derive(Debug)]
pub struct ShmPeer {
    memfd: OwnedFd,
    bells: Vec<OwnedFd>,
    link_id: u64,
}

impl ShmPeer {
    /// The link's id (random, also in the memfd's name `ustack-shm-<id as 16 hex digits>`).
    pub const fn link_id(&self) -> u64 {
        self.link_id
    }

    /// The region's memfd.
    pub fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// Maps the region and returns side B's ports, one per queue pair in queue order.
    ///
    /// Trusts nothing the creator wrote: checks the seals, magic, version and geometry
    /// (limits, and that the layout it implies is exactly the memfd's size) and the number
    /// of doorbells. Errors: `InvalidData` for any mismatch; OS errors from `mmap`.
    pub fn attach(self) -> io::Result<Vec<ShmPort>> {
        let map = Mapping::map(self.memfd.as_fd(), None)?;
        if map.len() < HEADER_LEN {
            return Err(bad_data("shm: region shorter than its header"));
        }
        let h32 = |off| map.u32_at(off).load(Ordering::Relaxed) as usize;
        if map.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(bad_data("shm: bad magic"));
        }
        if h32(H_VERSION) != VERSION as usize {
            return Err(bad_data("shm: unsupported version"));
        }
        let layout = ShmLayout::new(h32(H_QUEUE_PAIRS), h32(H_RING_SIZE), h32(H_SLOT_SIZE))
            .map_err(|e| bad_data_owned(e.to_string()))?;
        let region_len = map.u64_at(H_REGION_LEN).load(Ordering::Relaxed);
        if layout.len != map.len() || region_len != map.len() as u64 {
            return Err(bad_data("shm: geometry does not match the region size"));
        }
        if map.u64_at(H_LINK_ID).load(Ordering::Relaxed) != self.link_id {
            return Err(bad_data("shm: link id does not match"));
        }
        let medium = medium_from_code(h32(H_MEDIUM) as u32)?;
        let caps = validate_caps(medium, h32(H_MTU), layout.slot_size)
            .map_err(|e| bad_data_owned(e.to_string()))?;
        if self.bells.len() != 2 * layout.queue_pairs {
            return Err(bad_data("shm: wrong number of doorbells"));
        }
        for bell in &self.bells {
            // Ours to read without blocking whatever the sender set (O_NONBLOCK is on the
            // shared file description; the creator sets it too).
            rustix::io::ioctl_fionbio(bell, true)?;
        }
        let shared = Arc::new(Shared {
            map,
            bells: self.bells,
            layout,
            caps,
            link_id: self.link_id,
        });
        Ok(ShmPort::all(&shared, ShmSide::B))
    }

    /// Sends the descriptors over a connected Unix stream socket (`SCM_RIGHTS`), for
    /// [`ShmPeer::recv`] at the other end. This side's copies stay open until `self` drops.
    pub fn send<S: AsFd>(&self, socket: S) -> io::Result<()> {
        let mut msg = [0u8; HANDOVER_LEN];
        msg[0..8].copy_from_slice(&HANDOVER_MAGIC.to_le_bytes());
        msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
        msg[12..16].copy_from_slice(&(1 + self.bells.len() as u32).to_le_bytes());
        msg[16..24].copy_from_slice(&self.link_id.to_le_bytes());
        let fds: Vec<BorrowedFd<'_>> = core::iter::once(self.memfd.as_fd())
            .chain(self.bells.iter().map(|b| b.as_fd()))
            .collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(bad_input("shm: too many descriptors for one message"));
        }
        let sent = rustix::net::sendmsg(
            socket,
            &[IoSlice::new(&msg)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        if sent != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "shm: short hand-over send",
            ));
        }
        Ok(())
    }

    /// Receives a [`ShmPeer`] sent with [`ShmPeer::send`] on a connected Unix stream
    /// socket (blocking, or failing with `WouldBlock` on a socket's read timeout).
    /// Errors: `InvalidData` for anything but one well-formed hand-over message.
    pub fn recv<S: AsFd>(socket: S) -> io::Result<ShmPeer> {
        let mut msg = [0u8; HANDOVER_LEN];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut msg)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )?;
        // Take ownership of whatever arrived first, so it is closed on any error below.
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        let word = |r: core::ops::Range<usize>| -> u64 {
            msg[r]
                .iter()
                .rev()
                .fold(0u64, |acc, &b| acc << 8 | u64::from(b))
        };
        if got.flags.contains(ReturnFlags::CTRUNC)
            || got.bytes != HANDOVER_LEN
            || word(0..8) != HANDOVER_MAGIC
            || word(8..12) != u64::from(VERSION)
            || word(12..16) != fds.len() as u64
            || fds.len() < 3
            || fds.len() % 2 != 1
        {
            return Err(bad_data("shm: malformed hand-over message"));
        }
        let memfd = fds.remove(0);
        Ok(ShmPeer {
            memfd,
            bells: fds,
            link_id: word(16..24),
        })
    }

    /// Offers the descriptors on an abstract Unix socket with a fresh random name (see
    /// [`ShmOffer`]).
    pub fn offer(self) -> io::Result<ShmOffer> {
        let name = format!("ustack-shm-{:016x}-{:016x}", self.link_id, random_u64());
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        Ok(ShmOffer {
            listener,
            name,
            peer: self,
        })
    }

    /// Connects to an [`ShmOffer`] by name and receives its descriptors; gives up with
    /// `TimedOut` after `timeout`. Retries while the name is not bound yet.
    pub fn connect(name: &str, timeout: Duration) -> io::Result<ShmPeer> {
        let deadline = std::time::Instant::now() + timeout;
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let stream = loop {
            match UnixStream::connect_addr(&addr) {
                Ok(s) => break s,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    if std::time::Instant::now() >= deadline {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "shm: no offer"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        ShmPeer::recv(&stream)
    }
}

/// A [`ShmPeer`] waiting on an abstract Unix socket for the process that will be side B.
/// Give that process [`name`](Self::name) (e.g. in its argv or environment); it calls
/// [`ShmPeer::connect`], and [`hand_over`](Self::hand_over) accepts it.
#[derive(Debug)]
pub struct ShmOffer {
    listener: UnixListener,
    name: String,
    peer: ShmPeer,
}

impl ShmOffer {
    /// The abstract socket name to connect to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `timeout` for one connection from a process of the same user (checked
    /// with `SO_PEERCRED`; others are turned away and the wait goes on), sends it the
    /// descriptors, and closes the socket. Errors: `TimedOut`, or the OS error.
    pub fn hand_over(self, timeout: Duration) -> io::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        let me = rustix::process::geteuid();
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    if rustix::net::sockopt::socket_peercred(&stream)?.uid != me {
                        continue;
                    }
                    return self.peer.send(&stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "shm: no taker"));
                    }
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    match rustix::event::poll(&mut fds, Some(&timespec(left))) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Transmit state of one direction (this side sends), private to the port.
#[derive(Debug)]
struct Tx {
    head_off: usize,
    ring_off: usize,
    frames_off: usize,
    comp_head_off: usize,
    comp_ring_off: usize,
    /// The receiver's flag: ring its doorbell after posting if set.
    peer_need_wakeup_off: usize,
    /// Our flag: set while sleeping for free slots.
    need_wakeup_off: usize,
    head: u32,
    /// `head` as last published: frames from here to `head` are placed, not yet visible.
    published: u32,
    comp_tail: u32,
    /// Free slots, most recently returned last.
    free: Vec<u32>,
    /// Slots posted and not yet returned.
    in_flight: Vec<bool>,
    since_reclaim: u32,
    /// A send was refused for lack of slots since slots were last reclaimed.
    starved: bool,
    stopped: bool,
}

/// Receive state of one direction (the peer sends), private to the port.
#[derive(Debug)]
struct Rx {
    head_off: usize,
    tail_off: usize,
    ring_off: usize,
    frames_off: usize,
    comp_head_off: usize,
    comp_ring_off: usize,
    /// Our flag: set while sleeping for frames.
    need_wakeup_off: usize,
    /// The sender's flag: ring its doorbell after returning slots if set.
    peer_need_wakeup_off: usize,
    tail: u32,
    /// The peer's `desc_head` as last loaded and validated.
    head: u32,
    comp_head: u32,
    unpublished: u32,
    stopped: bool,
}

/// One queue pair of one side of a shm link: a [`Device`] with batch methods and a
/// doorbell to sleep on. `Send`, so each shard's thread owns its port.
pub struct ShmPort {
    shared: Arc<Shared>,
    side: ShmSide,
    queue: usize,
    max_frame: usize,
    slot_size: usize,
    ring_size: u32,
    mask: u32,
    publish_every: u32,
    bell: usize,
    peer_bell: usize,
    tx: Tx,
    rx: Rx,
    stats: ShmStats,
    fault: Option<ShmFault>,
}

impl fmt::Debug for ShmPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShmPort")
            .field("link_id", &format_args!("{:016x}", self.shared.link_id))
            .field("side", &self.side)
            .field("queue", &self.queue)
            .field("caps", &self.shared.caps)
            .field("tx_head", &self.tx.head)
            .field("tx_free", &self.tx.free.len())
            .field("rx_tail", &self.rx.tail)
            .field("stats", &self.stats)
            .field("fault", &self.fault)
            .finish_non_exhaustive()
    }
}

/// Whether a send placed the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placed {
    Yes,
    TooBig,
    NoSlot,
}

impl ShmPort {
    fn all(shared: &Arc<Shared>, side: ShmSide) -> Vec<ShmPort> {
        (0..shared.layout.queue_pairs)
            .map(|q| ShmPort::new(shared.clone(), side, q))
            .collect()
    }

    fn new(shared: Arc<Shared>, side: ShmSide, queue: usize) -> ShmPort {
        let l = shared.layout;
        let (me, peer) = (side, side.peer());
        let ring = l.ring_size as u32;
        let tx = Tx {
            head_off: l.desc_head_offset(queue, me),
            ring_off: l.desc_ring_offset(queue, me),
            frames_off: l.frames_offset(queue, me),
            comp_head_off: l.comp_head_offset(queue, me),
            comp_ring_off: l.comp_ring_offset(queue, me),
            peer_need_wakeup_off: l.rx_need_wakeup_offset(queue, me),
            need_wakeup_off: l.tx_need_wakeup_offset(queue, me),
            head: 0,
            published: 0,
            comp_tail: 0,
            free: (0..ring).rev().collect(),
            in_flight: vec![false; l.ring_size],
            since_reclaim: 0,
            starved: false,
            stopped: false,
        };
        let rx = Rx {
            head_off: l.desc_head_offset(queue, peer),
            tail_off: l.desc_tail_offset(queue, peer),
            ring_off: l.desc_ring_offset(queue, peer),
            frames_off: l.frames_offset(queue, peer),
            comp_head_off: l.comp_head_offset(queue, peer),
            comp_ring_off: l.comp_ring_offset(queue, peer),
            need_wakeup_off: l.rx_need_wakeup_offset(queue, peer),
            peer_need_wakeup_off: l.tx_need_wakeup_offset(queue, peer),
            tail: 0,
            head: 0,
            comp_head: 0,
            unpublished: 0,
            stopped: false,
        };
        ShmPort {
            max_frame: shared.caps.max_frame_len(),
            slot_size: l.slot_size,
            ring_size: ring,
            mask: ring - 1,
            publish_every: PUBLISH_EVERY.min(ring / 2),
            bell: l.dir(queue, me),
            peer_bell: l.dir(queue, peer),
            side,
            queue,
            tx,
            rx,
            stats: ShmStats::default(),
            fault: None,
            shared,
        }
    }

    /// Which side of the link this port is on.
    pub const fn side(&self) -> ShmSide {
        self.side
    }
    /// The queue pair this port serves.
    pub const fn queue(&self) -> usize {
        self.queue
    }
    /// The link's id (the memfd is named `ustack-shm-<id as 16 hex digits>`).
    pub fn link_id(&self) -> u64 {
        self.shared.link_id
    }
    /// The region's layout.
    pub fn layout(&self) -> ShmLayout {
        self.shared.layout
    }
    /// This port's counters.
    pub const fn stats(&self) -> &ShmStats {
        &self.stats
    }
    /// The first protocol violation by the peer, if any (it stopped a ring).
    pub const fn fault(&self) -> Option<ShmFault> {
        self.fault
    }
    /// The doorbell eventfd this port sleeps on, for an event loop: call
    /// [`prepare_sleep`](Self::prepare_sleep) before waiting on it and
    /// [`finish_sleep`](Self::finish_sleep) after.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.shared.bells[self.bell].as_fd()
    }

    // ---- transmit ----------------------------------------------------------------

    /// Puts returned slots back on the free list.
    fn reclaim(&mut self) {
        self.tx.since_reclaim = 0;
        if self.tx.stopped {
            return;
        }
        let m = &self.shared.map;
        let head = m.u32_at(self.tx.comp_head_off).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tx.comp_tail);
        if avail == 0 {
            return;
        }
        if avail > self.ring_size {
            self.stop_tx(head);
            return;
        }
        for _ in 0..avail {
            let at = self.tx.comp_ring_off + 4 * (self.tx.comp_tail & self.mask) as usize;
            let slot = m.u32_at(at).load(Ordering::Relaxed);
            self.tx.comp_tail = self.tx.comp_tail.wrapping_add(1);
            match self.tx.in_flight.get_mut(slot as usize) {
                Some(f) if *f => {
                    *f = false;
                    self.tx.free.push(slot);
                }
                _ => self.stats.bad_comp += 1,
            }
        }
        self.tx.starved = false;
    }

    fn stop_tx(&mut self, head: u32) {
        self.tx.stopped = true;
        self.stats.bad_index += 1;
        self.fault.get_or_insert(ShmFault::CompHead {
            head,
            tail: self.tx.comp_tail,
        });
    }

    /// Copies one frame into a free slot and writes its descriptor, without publishing.
    fn place(&mut self, frame: &[u8]) -> Placed {
        if frame.len() > self.max_frame {
            self.stats.tx_too_big += 1;
            return Placed::TooBig;
        }
        if self.tx.free.is_empty() || self.tx.since_reclaim >= RECLAIM_EVERY {
            self.reclaim();
        }
        if self.tx.stopped {
            self.stats.tx_stopped += 1;
            return Placed::NoSlot;
        }
        let Some(slot) = self.tx.free.pop() else {
            self.tx.starved = true;
            self.stats.tx_full += 1;
            return Placed::NoSlot;
        };
        self.tx.since_reclaim += 1;
        let m = &self.shared.map;
        // In bounds by construction (slot < ring_size, len <= max_frame <= slot_size).
        m.write(self.tx.frames_off + slot as usize * self.slot_size, frame);
        let at = self.tx.ring_off + 8 * (self.tx.head & self.mask) as usize;
        m.u64_at(at).store(
            u64::from(slot) | (frame.len() as u64) << 32,
            Ordering::Relaxed,
        );
        self.tx.in_flight[slot as usize] = true;
        self.tx.head = self.tx.head.wrapping_add(1);
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += frame.len() as u64;
        Placed::Yes
    }

    /// Publishes placed descriptors, if any, and rings the peer if it sleeps.
    fn publish_tx(&mut self) {
        if self.tx.published == self.tx.head {
            return;
        }
        self.tx.published = self.tx.head;
        self.stats.tx_publishes += 1;
        let m = &self.shared.map;
        m.u32_at(self.tx.head_off)
            .store(self.tx.head, Ordering::Release);
        // Dekker with the receiver's `prepare_sleep`: head store, fence, flag load.
        fence(Ordering::SeqCst);
        let flag = m.u32_at(self.tx.peer_need_wakeup_off);
        if flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0 {
            self.ring_peer();
        }
    }

    fn ring_peer(&mut self) {
        self.stats.doorbells += 1;
        // EAGAIN (counter at its maximum) means the peer has a wakeup pending anyway.
        let _ = rustix::io::write(&self.shared.bells[self.peer_bell], &1u64.to_ne_bytes());
    }

    /// Sends frames until the ring is full: returns how many were taken from `frames`.
    /// Frames too big for the link are taken and dropped (counted in
    /// [`ShmStats::tx_too_big`]); a frame that finds no free slot is not taken, so the
    /// caller keeps it and everything after it (counted once in [`ShmStats::tx_full`]).
    /// One index publication and at most one doorbell for the whole batch.
    ///
    /// Unlike [`Device::send_batch`], which drops a frame that finds no slot (as `send`
    /// does) and goes on with the next, this keeps back-pressure with the caller: for a
    /// sender that can hold frames back, like a benchmark.
    pub fn send_until_full<'a, I>(&mut self, frames: I) -> usize
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut frames = frames.into_iter().peekable();
        let mut taken = 0;
        while let Some(frame) = frames.peek() {
            if self.place(frame) == Placed::NoSlot {
                break;
            }
            frames.next();
            taken += 1;
        }
        self.publish_tx();
        taken
    }

    // ---- receive -----------------------------------------------------------------

    /// Loads and validates the peer's `desc_head`; true if frames are waiting.
    fn refresh_rx(&mut self) -> bool {
        if self.rx.stopped {
            return false;
        }
        let head = self
            .shared
            .map
            .u32_at(self.rx.head_off)
            .load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.rx.tail);
        if avail > self.ring_size {
            self.rx.stopped = true;
            self.stats.bad_index += 1;
            self.fault.get_or_insert(ShmFault::DescHead {
                head,
                tail: self.rx.tail,
            });
            return false;
        }
        self.rx.head = head;
        avail != 0
    }

    /// Hands a consumed slot back (published later, in a batch).
    fn complete(&mut self, slot: u32) {
        let at = self.rx.comp_ring_off + 4 * (self.rx.comp_head & self.mask) as usize;
        self.shared.map.u32_at(at).store(slot, Ordering::Relaxed);
        self.rx.comp_head = self.rx.comp_head.wrapping_add(1);
        self.rx.unpublished += 1;
        if self.rx.unpublished >= self.publish_every {
            self.publish_rx();
        }
    }

    /// Publishes returned slots (and our tail) and rings the peer if it sleeps for them.
    fn publish_rx(&mut self) {
        if self.rx.unpublished == 0 {
            return;
        }
        self.rx.unpublished = 0;
        let m = &self.shared.map;
        m.u32_at(self.rx.tail_off)
            .store(self.rx.tail, Ordering::Relaxed);
        // Release: our reads of the returned slots happen before the sender may reuse them.
        m.u32_at(self.rx.comp_head_off)
            .store(self.rx.comp_head, Ordering::Release);
        fence(Ordering::SeqCst);
        let flag = m.u32_at(self.rx.peer_need_wakeup_off);
        if flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0 {
            self.ring_peer();
        }
    }

    /// Takes the next frame into `buf` (cut to `buf.len()`); `None` when the ring is dry.
    fn take(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            if self.rx.tail == self.rx.head && !self.refresh_rx() {
                self.publish_rx();
                return None;
            }
            let m = &self.shared.map;
            let at = self.rx.ring_off + 8 * (self.rx.tail & self.mask) as usize;
            let desc = m.u64_at(at).load(Ordering::Relaxed);
            self.rx.tail = self.rx.tail.wrapping_add(1);
            let slot = desc as u32;
            let len = (desc >> 32) as usize;
            if slot >= self.ring_size {
                self.stats.bad_desc += 1;
                continue;
            }
            if len > self.max_frame {
                self.stats.bad_desc += 1;
                self.complete(slot);
                continue;
            }
            let n = len.min(buf.len());
            m.read(
                self.rx.frames_off + slot as usize * self.slot_size,
                &mut buf[..n],
            );
            self.complete(slot);
            if self.rx.tail == self.rx.head {
                // Caught up with what the peer had posted: hand the slots back now, so a
                // caller that stops before seeing `None` does not starve the sender.
                self.publish_rx();
            }
            if n < len {
                self.stats.rx_truncated += 1;
            }
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += n as u64;
            return Some(n);
        }
    }

    /// Receives frames into `batch` until it is full or the ring is dry; returns how many
    /// were added. Returned slots are published once, at the end.
    pub fn recv_batch(&mut self, batch: &mut FrameBatch) -> usize {
        let mut added = 0;
        while batch.len() < batch.capacity() {
            let buf = batch.spare();
            match self.take(buf) {
                Some(n) => {
                    batch.commit(n);
                    added += 1;
                }
                None => return added,
            }
        }
        self.publish_rx();
        added
    }

    /// Whether frames are waiting (loads the peer's index; does not consume).
    pub fn rx_ready(&mut self) -> bool {
        self.rx.tail != self.rx.head || self.refresh_rx()
    }

    // ---- sleeping ----------------------------------------------------------------

    /// Arms the doorbell before sleeping on [`fd`](Self::fd): returns false, without
    /// arming, if there is work (frames to receive, or returned slots when a send was
    /// refused for lack of them), so the caller must not sleep; true if it may sleep,
    /// and then the peer will ring when it posts a frame (or returns slots we wait for).
    /// Call [`finish_sleep`](Self::finish_sleep) after waking either way.
    pub fn prepare_sleep(&mut self) -> bool {
        // Nothing placed stays invisible while we sleep (a `send_more` run left open).
        self.publish_tx();
        self.publish_rx();
        if self.rx_ready() {
            return false;
        }
        let want_tx = self.tx.starved && !self.tx.stopped;
        let m = &self.shared.map;
        m.u32_at(self.rx.need_wakeup_off)
            .store(1, Ordering::Relaxed);
        if want_tx {
            m.u32_at(self.tx.need_wakeup_off)
                .store(1, Ordering::Relaxed);
        }
        // Dekker with the peer's publish: flag store, fence, index load.
        fence(Ordering::SeqCst);
        let tx_ready = want_tx && self.tx_reclaimable();
        if self.rx_ready() || tx_ready {
            self.clear_wakeup_flags();
            return false;
        }
        true
    }

    fn tx_reclaimable(&self) -> bool {
        let head = self
            .shared
            .map
            .u32_at(self.tx.comp_head_off)
            .load(Ordering::Acquire);
        head != self.tx.comp_tail
    }

    fn clear_wakeup_flags(&self) {
        let m = &self.shared.map;
        m.u32_at(self.rx.need_wakeup_off)
            .store(0, Ordering::Relaxed);
        m.u32_at(self.tx.need_wakeup_off)
            .store(0, Ordering::Relaxed);
    }

    /// Disarms the doorbell after a sleep on [`fd`](Self::fd) and drains the eventfd.
    pub fn finish_sleep(&mut self) {
        self.clear_wakeup_flags();
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.shared.bells[self.bell], &mut count);
    }

    /// Sleeps until frames arrive (or, after a send was refused for lack of slots, until
    /// slots come back), or until `timeout` passes (`None`: no limit). Returns whether
    /// there is work. Returns at once if there already is; never sleeps when the peer has
    /// already posted. Wakeups that find nothing (a stale ring, a signal) sleep again.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if !self.prepare_sleep() {
                return Ok(true);
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                self.clear_wakeup_flags();
                return Ok(false);
            }
            self.stats.sleeps += 1;
            let ts = left.map(timespec);
            let mut fds = [PollFd::new(&self.shared.bells[self.bell], PollFlags::IN)];
            let res = rustix::event::poll(&mut fds, ts.as_ref());
            self.finish_sleep();
            match res {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// [`ShmPort::wait`] over several ports (the queues of one multi-queue link, say): sleeps
/// until any of them has work or `timeout` passes, and returns whether one has. Each port
/// arms its doorbell as in `wait`; all are disarmed on waking. With no ports, returns
/// `Ok(false)` at once.
pub fn wait_any(ports: &mut [ShmPort], timeout: Option<Duration>) -> io::Result<bool> {
    if ports.is_empty() {
        return Ok(false);
    }
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        for i in 0..ports.len() {
            if !ports[i].prepare_sleep() {
                for p in &ports[..i] {
                    p.clear_wakeup_flags();
                }
                return Ok(true);
            }
        }
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            for p in ports.iter() {
                p.clear_wakeup_flags();
            }
            return Ok(false);
        }
        let ts = left.map(timespec);
        let mut fds: Vec<PollFd<'_>> = ports
            .iter()
            .map(|p| PollFd::new(&p.shared.bells[p.bell], PollFlags::IN))
            .collect();
        let res = rustix::event::poll(&mut fds, ts.as_ref());
        drop(fds);
        for p in ports.iter_mut() {
            p.stats.sleeps += 1;
            p.finish_sleep();
        }
        match res {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

impl Device for ShmPort {
    fn caps(&self) -> DeviceCaps {
        self.shared.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.take(buf)
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    /// Places the frame in a slot; publishes `desc_head` (and rings the peer if it
    /// sleeps) only when `more` is false, for this frame and those placed before it.
    fn send_more(&mut self, _now: Instant, frame: &[u8], more: bool) -> bool {
        let placed = self.place(frame);
        if !more {
            self.publish_tx();
        }
        placed == Placed::Yes
    }

    /// Places each frame in a slot (a frame that finds none, or is too big, is dropped
    /// and counted in [`ShmStats::tx_full`] / [`ShmStats::tx_too_big`] /
    /// [`ShmStats::tx_stopped`], and the next one is tried), then publishes `desc_head`
    /// once and rings the peer at most once for the batch.
    fn send_batch(&mut self, _now: Instant, frames: &[&[u8]]) -> usize {
        let mut dropped = 0;
        for frame in frames {
            if self.place(frame) != Placed::Yes {
                dropped += 1;
            }
        }
        self.publish_tx();
        dropped
    }

    /// The free slots after taking back what the peer returned. None left: the port
    /// marks itself starved, so that [`prepare_sleep`](ShmPort::prepare_sleep) asks the
    /// peer to ring when it returns slots. A stopped port (the peer misbehaved) says
    /// `None`: its frames are dropped and counted, not held for ever.
    fn tx_space(&mut self) -> Option<usize> {
        if self.tx.stopped {
            return None;
        }
        if self.tx.free.is_empty() || self.tx.since_reclaim >= RECLAIM_EVERY {
            self.reclaim();
        }
        let n = self.tx.free.len();
        if n == 0 {
            self.tx.starved = true;
        }
        Some(n)
    }

    /// `Some(Instant::ZERO)` ("now") if a frame is waiting, else `None`: frames on a real
    /// link arrive on their own time, signalled on [`ShmPort::fd`].
    fn poll_at(&self) -> Option<Instant> {
        if self.rx.stopped {
            return None;
        }
        let head = self
            .shared
            .map
            .u32_at(self.rx.head_off)
            .load(Ordering::Acquire);
        (self.rx.tail != self.rx.head || head != self.rx.tail).then_some(Instant::ZERO)
    }
}

impl Drop for ShmPort {
    fn drop(&mut self) {
        // Return what we consumed, so a sender that outlives us is not left short.
        self.publish_rx();
    }
}

/// A reusable buffer for a batch of frames: up to `capacity` frames of up to `frame_cap`
/// bytes each, in one allocation. Filled by [`ShmPort::recv_batch`] (or
/// [`push`](Self::push)), read with [`iter`](Self::iter) or [`get`](Self::get).
#[derive(Debug, Clone)]
pub struct FrameBatch {
    buf: Vec<u8>,
    lens: Vec<usize>,
    frame_cap: usize,
    capacity: usize,
}

impl FrameBatch {
    /// An empty batch for `capacity` frames of up to `frame_cap` bytes each (size
    /// `frame_cap` as [`DeviceCaps::max_frame_len`]).
    pub fn new(capacity: usize, frame_cap: usize) -> FrameBatch {
        FrameBatch {
            buf: vec![0; capacity * frame_cap],
            lens: Vec::with_capacity(capacity),
            frame_cap,
            capacity,
        }
    }
    /// Frames in the batch.
    pub fn len(&self) -> usize {
        self.lens.len()
    }
    /// Whether the batch holds no frames.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
    /// Most frames the batch holds.
    pub const fn capacity(&self) -> usize {
        self.capacity
    }
    /// Largest frame the batch holds.
    pub const fn frame_cap(&self) -> usize {
        self.frame_cap
    }
    /// Empties the batch (keeps the memory).
    pub fn clear(&mut self) {
        self.lens.clear();
    }
    /// Frame `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let len = *self.lens.get(i)?;
        self.buf.get(i * self.frame_cap..i * self.frame_cap + len)
    }
    /// The frames, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.lens
            .iter()
            .enumerate()
            .map(|(i, &len)| &self.buf[i * self.frame_cap..i * self.frame_cap + len])
    }
    /// Appends a copy of `frame`; false if the batch is full or the frame too long.
    pub fn push(&mut self, frame: &[u8]) -> bool {
        if self.len() == self.capacity || frame.len() > self.frame_cap {
            return false;
        }
        self.spare()[..frame.len()].copy_from_slice(frame);
        self.commit(frame.len());
        true
    }
    /// The next frame's buffer (the batch must not be full).
    fn spare(&mut self) -> &mut [u8] {
        let at = self.lens.len() * self.frame_cap;
        &mut self.buf[at..at + self.frame_cap]
    }
    fn commit(&mut self, len: usize) {
        self.lens.push(len);
    }
}

fn validate_caps(medium: Medium, mtu: usize, slot_size: usize) -> io::Result<DeviceCaps> {
    let caps = DeviceCaps {
        medium,
        mtu,
        gro_max_size: 0,
    };
    if mtu == 0 || caps.max_frame_len() > slot_size {
        return Err(bad_input(
            "shm: mtu must be non-zero and the largest frame fit a slot",
        ));
    }
    Ok(caps)
}

const fn medium_code(medium: Medium) -> u32 {
    match medium {
        Medium::Ethernet => 1,
        Medium::Ip => 2,
    }
}

fn medium_from_code(code: u32) -> io::Result<Medium> {
    match code {
        1 => Ok(Medium::Ethernet),
        2 => Ok(Medium::Ip),
        _ => Err(bad_data("shm: unknown medium")),
    }
}

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

pub(crate) fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
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
