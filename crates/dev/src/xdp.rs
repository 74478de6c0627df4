//! The `xdp` link: an `AF_XDP` socket in copy mode on an Ethernet interface (a veth end),
//! fed by a small XDP program that redirects every frame of the interface to it.
//!
//! [`Xdp::open`] builds, in the interface's namespace:
//!
//! - an `XSKMAP` and the redirect program (six eBPF instructions written out in
//!   `crate::sys::xdp`: `bpf_redirect_map(xskmap, rx_queue_index, XDP_PASS)`),
//!   loaded with `bpf(BPF_PROG_LOAD)` and attached to the interface in generic (SKB) mode
//!   (the driver's with several queues) through a BPF link, which detaches it when the
//!   queue closes;
//! - the UMEM: an anonymous mapping of [`XdpConfig::frames`] 2 KiB chunks registered with
//!   the socket (`XDP_UMEM_REG`), half of them for receiving (lent to the kernel through
//!   the fill ring), half for transmitting;
//! - the four rings, each mapped at its offset: fill and completion (UMEM chunk
//!   addresses), receive and transmit (descriptors: address and length);
//! - the socket bound to a receive queue id of the interface with `XDP_COPY` (veth has no
//!   zero-copy mode) and put into the map at that index: queue 0, or one socket per queue
//!   (below).
//!
//! [`Device::recv`] takes one descriptor from the receive ring, copies the frame out of
//! its chunk and gives the chunk straight back to the fill ring. [`Device::send_more`]
//! reclaims finished chunks from the completion ring, copies the frame into a free chunk
//! and queues a descriptor; the ring's producer index is published once per batch, and the
//! kernel kicked with a zero-length `send(2)` only when it asks: the socket is bound with
//! `XDP_USE_NEED_WAKEUP`, and a batch is kicked only while the transmit ring's
//! `XDP_RING_NEED_WAKEUP` flag is set ([`XdpStats::tx_kicks_saved`] counts the others).
//! In copy mode the kernel transmits only inside that `send(2)` (`xsk_generic_xmit`), so
//! it keeps the flag set and every batch is kicked; where the kernel takes
//! `XDP_MAX_TX_SKB_BUDGET` (6.17+) one kick hands it the whole ring, not 32 descriptors
//! ([`XdpQueue::tx_budget`]). Frames are Ethernet II: ARP works as on
//! any link; give the stack the interface's MAC ([`Xdp::mac`]).
//!
//! As for the `packet` link, the peer's transmit checksum offload and TSO must be off
//! (`ethtool -K <peer> tx off`): generic XDP sees the frames the peer built.
//!
//! # Several queues
//!
//! With [`XdpConfig::queues`] above one, [`Xdp::open`] opens one socket per receive queue
//! id `0..queues` of the interface, each with its own UMEM and rings, all in the one
//! `XSKMAP` at the index of their queue: the program redirects each frame to the socket
//! of the queue it arrived on (`rx_queue_index`), so each socket is a shard's queue. An
//! interface with fewer queues is refused (the bind of the first queue past its count
//! fails; make a veth with `numrxqueues N numtxqueues N`). On a veth the receive queue
//! of a frame is the transmit queue the sender's kernel picked for it (by flow hash, or
//! XPS), so each flow keeps to one queue.
//!
//! With several queues the program is attached in the driver's mode
//! (`XDP_FLAGS_DRV_MODE`), not generic: generic XDP takes the queue from the `sk_buff`'s
//! recorded receive queue, which veth no longer records outside its NAPI path (Linux
//! 6.18: every frame showed as queue 0, all 16 test flows on one shard), while veth's own
//! XDP runs in the NAPI poll of the receive queue the frame was sent to, and its
//! `rx_queue_index` is that queue. The sockets stay in copy mode. One queue keeps generic
//! mode, and so do several where the driver refuses its own mode (a NIC's driver records
//! the receive queue, so generic XDP sees it).
//!
//! ARP and IPv6 neighbour discovery reach every queue: a reply arrives on one queue only,
//! and the shard that asked may own another. So the queue that receives an ARP frame or
//! an ICMPv6 neighbour discovery message (types 133 to 137 right after the IPv6 header,
//! RFC 4861 §4) hands a copy to each other queue of the link, through an in-process
//! mailbox per queue (at most [`MAILBOX_FRAMES`] frames waiting; more are counted in
//! [`XdpStats::neighbour_dropped`]) whose `eventfd` wakes its shard
//! ([`XdpQueue::wake_fd`]). Each shard then learns its neighbours itself and answers the
//! requests it sees (duplicate replies with the same MAC: harmless), as over the packet
//! link's several queues.
//!
//! The interface's own kernel stack sees nothing while the program is attached, since
//! every frame is redirected.
//!
//! IPv6 frames are redirected like any other; the stack does neighbour discovery over
//! them. Its addresses' solicited-node groups must pass the interface's multicast filter,
//! which the kernel fills only with its own groups: the queue holds an `AF_PACKET` socket
//! that receives nothing but asks for every multicast frame (`PACKET_MR_ALLMULTI`; the
//! interface shows `ALLMULTI` while the queue is open).

use core::time::Duration;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::sockopt;
use rustix::net::xdp::{
    SocketAddrXdp, SocketAddrXdpFlags, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XdpRingOffset, XdpUmemReg,
    XdpUmemRegFlags,
};
use ustack_obs::time::Instant;

use crate::netns::{EthernetInterface, ethernet_interface, invalid};
use crate::sleep::timespec;
use crate::sys::mapping::Mapping;
use crate::sys::packet::kick;
use crate::sys::xdp as sys;
use crate::{Device, DeviceCaps};

/// The size of a UMEM chunk: one frame each.
const CHUNK: usize = 2048;
/// Descriptors one copy-mode `sendto(2)` hands to the driver without
/// `XDP_MAX_TX_SKB_BUDGET` (the kernel's `MAX_PER_SOCKET_BUDGET`).
const DEFAULT_TX_BUDGET: u32 = 32;
/// The most queues one link opens.
pub const MAX_QUEUES: usize = 64;
/// The most neighbour frames (ARP, NDP) waiting in one queue's mailbox.
pub const MAILBOX_FRAMES: usize = 64;

/// How to open the xdp link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface (an existing Ethernet interface, a veth end say).
    pub interface: String,
    /// UMEM chunks, half for each direction: a power of two from 64 to 65536. Each ring
    /// has half as many entries.
    pub frames: usize,
    /// How many receive queues (sockets) to open, ids `0..queues`: 1 to [`MAX_QUEUES`],
    /// and no more than the interface has.
    pub queues: usize,
    /// Open in this network namespace (a `/proc/<pid>/ns/net` or `/run/netns/<name>`
    /// file) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            interface: "veth0".to_owned(),
            frames: 4096,
            queues: 1,
            netns: None,
        }
    }
}

impl XdpConfig {
    /// The configuration with its values checked: `InvalidInput` naming the bad field.
    pub fn validate(&self) -> io::Result<()> {
        crate::netns::check_interface("xdp", &self.interface, self.queues, MAX_QUEUES)?;
        if !self.frames.is_power_of_two() || !(64..=65536).contains(&self.frames) {
            return Err(invalid(format!(
                "xdp: {} frames: a power of two from 64 to 65536",
                self.frames
            )));
        }
        Ok(())
    }
}

/// One of the four rings: its mapping, where its indices and descriptors are, its size,
/// and our own index (the producer's for fill and transmit, the consumer's for receive
/// and completion).
#[derive(Debug)]
struct Ring {
    map: Mapping,
    producer: usize,
    consumer: usize,
    /// The ring's flags word (`XDP_RING_NEED_WAKEUP`), where the kernel has one (5.4+).
    flags: Option<usize>,
    desc: usize,
    mask: u32,
    ours: u32,
}

impl Ring {
    fn map(
        fd: BorrowedFd<'_>,
        off: &XdpRingOffset,
        entries: u32,
        desc_len: usize,
        pgoff: u64,
    ) -> io::Result<Ring> {
        let desc = off.desc as usize;
        let map = Mapping::map_socket(fd, desc + entries as usize * desc_len, pgoff)?;
        Ok(Ring {
            map,
            producer: off.producer as usize,
            consumer: off.consumer as usize,
            flags: off.flags.map(|f| f as usize),
            desc,
            mask: entries - 1,
            ours: 0,
        })
    }

    /// The kernel's index: the producer's for a ring we consume, the consumer's for one
    /// we produce.
    fn theirs(&self, of_producer: bool) -> u32 {
        let off = if of_producer {
            self.producer
        } else {
            self.consumer
        };
        self.map.u32_at(off).load(Ordering::Acquire)
    }

    /// Publishes our index (producer or consumer).
    fn publish(&self, as_producer: bool) {
        let off = if as_producer {
            self.producer
        } else {
            self.consumer
        };
        self.map.u32_at(off).store(self.ours, Ordering::Release);
    }

    fn slot(&self, index: u32, len: usize) -> usize {
        self.desc + (index & self.mask) as usize * len
    }

    /// Whether the kernel asks to be woken for this ring (`XDP_RING_NEED_WAKEUP` in its
    /// flags word); true for a ring without one (a kernel before 5.4 always needs it).
    fn needs_wakeup(&self) -> bool {
        self.flags.is_none_or(|off| {
            self.map.u32_at(off).load(Ordering::Acquire) & XDP_RING_NEED_WAKEUP != 0
        })
    }
}

/// `XDP_RING_NEED_WAKEUP` (`linux/if_xdp.h`): the ring's flag that the kernel sets when it
/// needs a system call (`sendto(2)` for transmit, `recvfrom(2)`/`poll(2)` for fill) to
/// go on with the ring.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// What an [`XdpQueue`] has done, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames longer than the caller's buffer (truncated), or with a descriptor outside
    /// the UMEM (dropped).
    pub rx_bad: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames dropped: no free chunk or no room in the transmit ring.
    pub tx_ring_full: u64,
    /// Frames refused: larger than a chunk or than the largest frame.
    pub tx_errors: u64,
    /// Kicks (`send(2)` calls).
    pub tx_kicks: u64,
    /// Kicks not made: a batch was published while the kernel had `XDP_RING_NEED_WAKEUP`
    /// clear on the transmit ring (it was already working on the ring; the socket is bound
    /// with `XDP_USE_NEED_WAKEUP`).
    pub tx_kicks_saved: u64,
    /// Times [`XdpQueue::wait`] slept in `poll(2)`.
    pub sleeps: u64,
    /// Of the frames received, those taken from the mailbox: ARP and NDP frames another
    /// queue of the link received (several queues only).
    pub neighbour_in: u64,
    /// ARP and NDP frames not handed to another queue: its mailbox was full.
    pub neighbour_dropped: u64,
}

/// What the queues of one link share: the program, its map and its attachment (dropped
/// with the last queue), each queue's neighbour mailbox, and each queue's count of frames
/// taken from its receive ring.
#[derive(Debug)]
struct Shared {
    /// The BPF link (the attachment: dropping it detaches the program) and the program,
    /// set once every socket is in the map; dropped before the map.
    attached: OnceLock<(OwnedFd, OwnedFd)>,
    map: OwnedFd,
    mailboxes: Vec<Mailbox>,
    ring_frames: Arc<[AtomicU64]>,
}

/// One queue's ARP and NDP frames from the other queues, and the `eventfd` that wakes it.
#[derive(Debug)]
struct Mailbox {
    frames: Mutex<VecDeque<Vec<u8>>>,
    pending: AtomicUsize,
    wake: OwnedFd,
}

impl Mailbox {
    fn new() -> io::Result<Mailbox> {
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        Ok(Mailbox {
            frames: Mutex::new(VecDeque::new()),
            pending: AtomicUsize::new(0),
            wake,
        })
    }

    /// Queues a copy of `frame`; false if the mailbox is full.
    fn post(&self, frame: &[u8]) -> bool {
        {
            let mut frames = self.frames.lock().unwrap_or_else(|e| e.into_inner());
            if frames.len() >= MAILBOX_FRAMES {
                return false;
            }
            frames.push_back(frame.to_vec());
        }
        self.pending.fetch_add(1, Ordering::Release);
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        true
    }

    /// Takes the oldest frame into `buf` (truncated to it): its length.
    fn take(&self, buf: &mut [u8]) -> Option<usize> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        // Cleared before taking: a frame posted after this writes the eventfd again.
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.wake, &mut count);
        let frame = self
            .frames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()?;
        self.pending.fetch_sub(1, Ordering::AcqRel);
        let n = frame.len().min(buf.len());
        buf[..n].copy_from_slice(&frame[..n]);
        Some(n)
    }
}

/// Whether `frame` (Ethernet II) is ARP or an IPv6 neighbour discovery message: ICMPv6
/// (next header 58 right after the fixed header) of type 133 to 137 (RFC 4861 §4).
fn is_neighbour(frame: &[u8]) -> bool {
    match frame.get(12..14) {
        Some([0x08, 0x06]) => true,
        Some([0x86, 0xdd]) => {
            frame.get(14 + 6) == Some(&58)
                && frame.get(14 + 40).is_some_and(|t| (133..=137).contains(t))
        }
        _ => false,
    }
}

/// Each queue's count of frames taken from its receive ring (the kernel's choice of
/// queue), readable while the queues run in their shards.
#[derive(Debug, Clone)]
pub struct QueueFrames(Arc<[AtomicU64]>);

impl QueueFrames {
    /// Frames received on each queue id, in order.
    pub fn get(&self) -> Vec<u64> {
        self.0.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }
}

/// An open xdp link: its queues, the interface's MAC and MTU.
#[derive(Debug)]
pub struct Xdp {
    mac: [u8; 6],
    queues: Vec<XdpQueue>,
}

impl Xdp {
    /// Opens the link on `config.interface`, in `config.netns` if given. Errors:
    /// `InvalidInput` for a bad config or an interface that is not Ethernet; the OS error
    /// otherwise, with what failed (`EPERM` without `CAP_NET_ADMIN`/`CAP_BPF`, the
    /// verifier's log if the program is refused).
    pub fn open(config: &XdpConfig) -> io::Result<Xdp> {
        config.validate()?;
        crate::netns::in_netns("xdp", config.netns.as_deref(), || Xdp::open_here(config))
    }

    fn open_here(config: &XdpConfig) -> io::Result<Xdp> {
        let name = &config.interface;
        let EthernetInterface { ifindex, mac, caps } = ethernet_interface("xdp", name)?;
        let mtu = caps.mtu;
        if caps.max_frame_len() > CHUNK {
            return Err(invalid(format!(
                "xdp: `{name}`'s MTU {mtu} does not fit a {CHUNK}-byte frame"
            )));
        }
        let n = config.queues;
        let what = |e: io::Error| io::Error::new(e.kind(), format!("xdp: on `{name}`: {e}"));
        let mailboxes = (0..n)
            .map(|_| Mailbox::new())
            .collect::<io::Result<Vec<_>>>()
            .map_err(what)?;
        let shared = Arc::new(Shared {
            attached: OnceLock::new(),
            map: sys::create_xskmap(n as u32).map_err(what)?,
            mailboxes,
            ring_frames: (0..n).map(|_| AtomicU64::new(0)).collect(),
        });
        let mut queues = Vec::with_capacity(n);
        for id in 0..n {
            let at = (name.as_str(), ifindex);
            let q = XdpQueue::open(at, id, config.frames, shared.clone(), caps).map_err(|e| {
                let more = if id > 0 && e.raw_os_error() == Some(libc::EINVAL) {
                    format!(
                        " (`{name}` has {id} receive queue(s), {n} asked: make a veth with \
                         `numrxqueues {n} numtxqueues {n}`)"
                    )
                } else {
                    String::new()
                };
                io::Error::new(
                    e.kind(),
                    format!("xdp: socket on queue {id} of `{name}`: {e}{more}"),
                )
            })?;
            queues.push(q);
        }
        let prog = sys::load_redirect(shared.map.as_fd()).map_err(what)?;
        // Several queues: the driver's mode (see the module docs on why not generic), or
        // generic where the driver has no XDP of its own (a NIC's driver records the
        // receive queue in the `sk_buff`, which generic XDP reads).
        let link = match (n > 1).then(|| sys::attach_xdp(prog.as_fd(), ifindex, true)) {
            Some(Ok(link)) => link,
            _ => sys::attach_xdp(prog.as_fd(), ifindex, false).map_err(what)?,
        };
        let _ = shared.attached.set((link, prog));
        Ok(Xdp { mac, queues })
    }

    /// The interface's MAC address: the stack's.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface MTU read at open.
    pub fn mtu(&self) -> usize {
        self.queues[0].caps.mtu
    }

    /// The first queue (id 0), to give to a runtime; the others close.
    pub fn into_queue(self) -> XdpQueue {
        self.queues.into_iter().next().expect("at least one queue")
    }

    /// The queues in order of their queue id, one per shard.
    pub fn into_queues(self) -> Vec<XdpQueue> {
        self.queues
    }
}

/// One queue of the link: its `AF_XDP` socket with its UMEM and rings; the program stays
/// attached while a queue of the link lives.
#[derive(Debug)]
pub struct XdpQueue {
    umem: Mapping,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    /// Transmit chunks not in flight.
    free: Vec<u64>,
    /// Our transmit producer index as last published.
    tx_published: u32,
    /// Bound with `XDP_USE_NEED_WAKEUP`: kick only when the transmit ring's flag asks.
    need_wakeup: bool,
    /// Descriptors one kick may hand to the driver (`XDP_MAX_TX_SKB_BUDGET`; 32 without).
    tx_budget: u32,
    caps: DeviceCaps,
    name: String,
    stats: XdpStats,
    /// The receive queue id the socket is bound to.
    id: usize,
    /// The program and what the link's queues share; with several queues, the mailboxes.
    shared: Arc<Shared>,
    fd: OwnedFd,
    /// An unbound `AF_PACKET` socket holding the interface's allmulti count (IPv6's
    /// solicited-node groups through its multicast filter); receives nothing.
    _allmulti: OwnedFd,
}

impl XdpQueue {
    /// Opens the socket for receive queue `id` of the interface and puts it into the
    /// link's map at `id`.
    fn open(
        (name, ifindex): (&str, u32),
        id: usize,
        frames: usize,
        shared: Arc<Shared>,
        caps: DeviceCaps,
    ) -> io::Result<XdpQueue> {
        let half = (frames / 2) as u32;
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::XDP,
            rustix::net::SocketType::RAW,
            rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            None,
        )?;
        let umem = Mapping::map_anonymous(frames * CHUNK)?;
        sockopt::set_xdp_umem_reg(
            &fd,
            XdpUmemReg {
                addr: umem.addr(),
                len: umem.len() as u64,
                chunk_size: CHUNK as u32,
                headroom: 0,
                flags: XdpUmemRegFlags::empty(),
                tx_metadata_len: 0,
            },
        )?;
        sockopt::set_xdp_umem_fill_ring_size(&fd, half)?;
        sockopt::set_xdp_umem_completion_ring_size(&fd, half)?;
        sockopt::set_xdp_rx_ring_size(&fd, half)?;
        sockopt::set_xdp_tx_ring_size(&fd, half)?;
        let off = sockopt::xdp_mmap_offsets(&fd)?;
        let fdb = fd.as_fd();
        let rx = Ring::map(fdb, &off.rx, half, 16, XDP_PGOFF_RX_RING)?;
        let tx = Ring::map(fdb, &off.tx, half, 16, XDP_PGOFF_TX_RING)?;
        let mut fill = Ring::map(fdb, &off.fr, half, 8, XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = Ring::map(fdb, &off.cr, half, 8, XDP_UMEM_PGOFF_COMPLETION_RING)?;
        // The first half of the chunks go to the kernel for receiving.
        for i in 0..half {
            let at = fill.slot(fill.ours, 8);
            fill.map
                .write(at, &(u64::from(i) * CHUNK as u64).to_ne_bytes());
            fill.ours = fill.ours.wrapping_add(1);
        }
        fill.publish(true);
        let free = (half..2 * half)
            .map(|i| u64::from(i) * CHUNK as u64)
            .collect();
        // Kick only when the kernel asks (5.4+; a kernel without the flag refuses the bind
        // with EINVAL, and then every batch is kicked).
        let copy = SocketAddrXdpFlags::XDP_COPY;
        let need_wakeup = match rustix::net::bind(
            &fd,
            &SocketAddrXdp::new(
                copy | SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP,
                ifindex,
                id as u32,
            ),
        ) {
            Ok(()) => true,
            Err(Errno::INVAL) => {
                rustix::net::bind(&fd, &SocketAddrXdp::new(copy, ifindex, id as u32))?;
                false
            }
            Err(e) => return Err(e.into()),
        };
        // One kick hands the driver a whole ring instead of 32 descriptors (6.17+).
        let tx_budget = match sys::set_tx_budget(fd.as_fd(), half) {
            Ok(()) => half,
            Err(_) => DEFAULT_TX_BUDGET,
        };
        sys::xskmap_insert(shared.map.as_fd(), id as u32, fd.as_fd())?;
        let allmulti = crate::sys::packet::socket()?;
        crate::sys::packet::all_multicast(allmulti.as_fd(), ifindex)?;
        Ok(XdpQueue {
            umem,
            rx,
            tx,
            fill,
            comp,
            free,
            tx_published: 0,
            need_wakeup,
            tx_budget,
            caps,
            name: name.to_owned(),
            stats: XdpStats::default(),
            id,
            shared,
            fd,
            _allmulti: allmulti,
        })
    }

    /// The receive queue id of the interface this queue's socket is bound to.
    pub fn queue_id(&self) -> usize {
        self.id
    }

    /// Each queue's count of frames from its receive ring, for the link's every queue.
    pub fn queue_frames(&self) -> QueueFrames {
        QueueFrames(self.shared.ring_frames.clone())
    }

    /// With several queues, the `eventfd` that becomes readable when another queue hands
    /// this one an ARP or NDP frame: poll it with [`fd`](Self::fd).
    pub fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        (self.shared.mailboxes.len() > 1).then(|| self.shared.mailboxes[self.id].wake.as_fd())
    }

    /// Whether a frame waits: in the receive ring, or in the mailbox.
    pub fn ready(&self) -> bool {
        self.rx.theirs(true) != self.rx.ours || self.mailbox_pending()
    }

    fn mailbox_pending(&self) -> bool {
        self.shared.mailboxes.len() > 1
            && self.shared.mailboxes[self.id]
                .pending
                .load(Ordering::Acquire)
                > 0
    }

    /// Hands a copy of a neighbour frame to every other queue of the link.
    fn share_neighbour(&mut self, frame: &[u8]) {
        for (i, mailbox) in self.shared.mailboxes.iter().enumerate() {
            if i != self.id && !mailbox.post(frame) {
                self.stats.neighbour_dropped += 1;
            }
        }
    }

    /// The socket, for an event loop (readable: a frame is in the receive ring).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters.
    pub fn stats(&self) -> &XdpStats {
        &self.stats
    }

    /// Whether the socket is bound with `XDP_USE_NEED_WAKEUP` (kicks only when the
    /// transmit ring's flag asks; [`XdpStats::tx_kicks_saved`] counts those not made).
    pub fn need_wakeup(&self) -> bool {
        self.need_wakeup
    }

    /// Descriptors one kick hands to the driver: the transmit ring's size where the
    /// kernel takes `XDP_MAX_TX_SKB_BUDGET` (6.17+), else its fixed 32.
    pub fn tx_budget(&self) -> u32 {
        self.tx_budget
    }

    /// Sleeps in `poll(2)` until a frame is in the receive ring or `timeout` passes
    /// (`None`: no limit). Returns whether one is; at once if one is already.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.ready() {
            return Ok(true);
        }
        let ts = timeout.map(timespec);
        let wake = &self.shared.mailboxes[self.id].wake;
        let mut fds = [
            PollFd::new(&self.fd, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        // One queue: its mailbox never receives, and its eventfd is never readable.
        self.stats.sleeps += 1;
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) => Ok(self.ready()),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes finished transmit chunks back from the completion ring.
    fn reclaim(&mut self) {
        let end = self.comp.theirs(true);
        if end == self.comp.ours {
            return;
        }
        while self.comp.ours != end {
            let mut addr = [0u8; 8];
            self.comp
                .map
                .read(self.comp.slot(self.comp.ours, 8), &mut addr);
            self.free.push(u64::from_ne_bytes(addr));
            self.comp.ours = self.comp.ours.wrapping_add(1);
        }
        self.comp.publish(false);
    }

    fn kick(&mut self) {
        self.tx.publish(true);
        self.tx_published = self.tx.ours;
        // In copy mode one kick sends at most a budget of descriptors (the kernel's
        // `xsk_generic_xmit`, `max_tx_budget`: 32, or the ring with
        // `XDP_MAX_TX_SKB_BUDGET`): kick until the kernel has taken everything queued, or
        // stops taking, so that a batch larger than the budget does not pile up in the
        // ring until frames find no room and are dropped. Bound with
        // `XDP_USE_NEED_WAKEUP`, only while the ring's flag asks for it (libxdp's
        // `xsk_ring_prod__needs_wakeup`): a kernel already working on the ring takes the
        // new descriptors without a system call.
        loop {
            if self.need_wakeup && !self.tx.needs_wakeup() {
                self.stats.tx_kicks_saved += 1;
                break;
            }
            let before = self.tx.theirs(false);
            self.stats.tx_kicks += 1;
            let _ = kick(self.fd.as_fd());
            let after = self.tx.theirs(false);
            if after == self.tx.ours || after == before {
                break;
            }
        }
    }
}

impl Device for XdpQueue {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        if self.mailbox_pending()
            && let Some(n) = self.shared.mailboxes[self.id].take(buf)
        {
            self.stats.neighbour_in += 1;
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += n as u64;
            return Some(n);
        }
        if self.rx.theirs(true) == self.rx.ours {
            return None;
        }
        let mut desc = [0u8; 16];
        self.rx.map.read(self.rx.slot(self.rx.ours, 16), &mut desc);
        self.rx.ours = self.rx.ours.wrapping_add(1);
        self.rx.publish(false);
        let addr = u64::from_ne_bytes(desc[..8].try_into().expect("8 bytes"));
        let len = u32::from_ne_bytes(desc[8..12].try_into().expect("4 bytes")) as usize;
        let n = len.min(buf.len()).min(CHUNK);
        let ok = usize::try_from(addr).is_ok_and(|a| self.umem.read(a, &mut buf[..n]));
        // The chunk goes straight back to the kernel (its base: copy mode may offset the
        // frame inside it).
        let chunk = addr & !(CHUNK as u64 - 1);
        let at = self.fill.slot(self.fill.ours, 8);
        self.fill.map.write(at, &chunk.to_ne_bytes());
        self.fill.ours = self.fill.ours.wrapping_add(1);
        self.fill.publish(true);
        if !ok || n < len {
            self.stats.rx_bad += 1;
            if !ok {
                return self.recv(_now, buf);
            }
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += n as u64;
        self.shared.ring_frames[self.id].fetch_add(1, Ordering::Relaxed);
        if self.shared.mailboxes.len() > 1 && is_neighbour(&buf[..n]) {
            self.share_neighbour(&buf[..n]);
        }
        Some(n)
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    fn send_more(&mut self, _now: Instant, frame: &[u8], more: bool) -> bool {
        let sent = self.queue_frame(frame);
        // The end of a batch: publish and kick, if anything is waiting to go.
        if !more && self.tx.ours != self.tx_published {
            self.kick();
        }
        sent
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// A frame sent alone is copied into a free chunk, published and kicked (unless the
    /// ring's need_wakeup flag says the kernel is already at it): the runtime's qdisc
    /// bypass, as [`PacketQueue`](crate::packet::PacketQueue)'s.
    fn tx_direct(&self) -> bool {
        true
    }
}

impl XdpQueue {
    /// Copies `frame` into a free chunk and queues its descriptor (not yet published).
    fn queue_frame(&mut self, frame: &[u8]) -> bool {
        if frame.len() > self.caps.max_frame_len() {
            self.stats.tx_errors += 1;
            return false;
        }
        self.reclaim();
        let room = self.tx.ours.wrapping_sub(self.tx.theirs(false)) <= self.tx.mask;
        let addr = if room { self.free.pop() } else { None };
        let Some(addr) = addr else {
            self.stats.tx_ring_full += 1;
            return false;
        };
        self.umem.write(addr as usize, frame);
        let mut desc = [0u8; 16];
        desc[..8].copy_from_slice(&addr.to_ne_bytes());
        desc[8..12].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        self.tx.map.write(self.tx.slot(self.tx.ours, 16), &desc);
        self.tx.ours = self.tx.ours.wrapping_add(1);
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += frame.len() as u64;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets of a ring in the fake queue's mappings, as the kernel lays them out.
    const OFF: XdpRingOffset = XdpRingOffset {
        producer: 0,
        consumer: 64,
        desc: 192,
        flags: Some(128),
    };

    fn fake_ring(entries: u32, desc_len: usize) -> Ring {
        let len = OFF.desc as usize + entries as usize * desc_len;
        Ring {
            map: Mapping::map_anonymous(len.next_multiple_of(4096)).expect("mapping"),
            producer: OFF.producer as usize,
            consumer: OFF.consumer as usize,
            flags: OFF.flags.map(|f| f as usize),
            desc: OFF.desc as usize,
            mask: entries - 1,
            ours: 0,
        }
    }

    /// A queue whose rings are plain memory that the test writes as the kernel would, and
    /// whose socket is not an `AF_XDP` one (a UDP socket: a kick is still a `send(2)`,
    /// counted, that fails and is ignored).
    fn fake_queue(need_wakeup: bool) -> XdpQueue {
        let fd = || {
            rustix::net::socket(
                rustix::net::AddressFamily::INET,
                rustix::net::SocketType::DGRAM,
                None,
            )
            .expect("socket")
        };
        let entries = 32;
        XdpQueue {
            umem: Mapping::map_anonymous(2 * entries as usize * CHUNK).expect("umem"),
            rx: fake_ring(entries, 16),
            tx: fake_ring(entries, 16),
            fill: fake_ring(entries, 8),
            comp: fake_ring(entries, 8),
            free: (0..u64::from(entries)).map(|i| i * CHUNK as u64).collect(),
            tx_published: 0,
            need_wakeup,
            tx_budget: DEFAULT_TX_BUDGET,
            caps: DeviceCaps {
                medium: crate::Medium::Ethernet,
                mtu: 1500,
                gro_max_size: 0,
                gso_max_size: 0,
            },
            name: "fake".into(),
            stats: XdpStats::default(),
            id: 0,
            shared: Arc::new(Shared {
                attached: OnceLock::new(),
                map: fd(),
                mailboxes: vec![Mailbox::new().expect("eventfd")],
                ring_frames: Arc::new([AtomicU64::new(0)]),
            }),
            fd: fd(),
            _allmulti: fd(),
        }
    }

    fn set_tx_flag(q: &XdpQueue, on: bool) {
        let off = q.tx.flags.expect("flags word");
        q.tx.map
            .u32_at(off)
            .store(u32::from(on) * XDP_RING_NEED_WAKEUP, Ordering::Release);
    }

    /// Frames sent, kicks made, kicks saved.
    fn kicks(q: &XdpQueue) -> (u64, u64, u64) {
        let s = q.stats();
        (s.tx_packets, s.tx_kicks, s.tx_kicks_saved)
    }

    #[test]
    fn need_wakeup_kicks_only_when_the_kernel_asks() {
        let mut q = fake_queue(true);
        let frame = [0u8; 60];
        // The kernel's flag clear: the batch is published, with no system call.
        set_tx_flag(&q, false);
        assert_eq!(q.send_batch(Instant::ZERO, &[&frame, &frame, &frame]), 0);
        assert_eq!(kicks(&q), (3, 0, 1), "{:?}", q.stats());
        assert_eq!(q.tx.theirs(true), 3, "the producer index is published");
        // The flag set: one kick for the next batch (the fake kernel takes nothing, so the
        // loop stops after it).
        set_tx_flag(&q, true);
        assert!(q.send(Instant::ZERO, &frame));
        assert_eq!(kicks(&q), (4, 1, 1), "{:?}", q.stats());
        assert_eq!(q.tx.theirs(true), 4);
    }

    /// An Ethernet II frame of `ethertype` with `payload` after the header.
    fn frame(ethertype: [u8; 2], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(payload);
        f
    }

    /// An IPv6 frame whose next header is `next` and whose payload starts with `first`.
    fn ipv6(next: u8, first: u8) -> Vec<u8> {
        let mut ip = vec![0u8; 48];
        ip[0] = 0x60;
        ip[6] = next;
        ip[40] = first;
        frame([0x86, 0xdd], &ip)
    }

    #[test]
    fn neighbour_frames_are_arp_and_ndp_only() {
        assert!(is_neighbour(&frame([0x08, 0x06], &[0; 28])));
        for t in 133..=137 {
            assert!(is_neighbour(&ipv6(58, t)), "ICMPv6 type {t}");
        }
        assert!(!is_neighbour(&ipv6(58, 128)), "echo request");
        assert!(!is_neighbour(&ipv6(58, 138)));
        assert!(!is_neighbour(&ipv6(6, 135)), "TCP, not ICMPv6");
        assert!(!is_neighbour(&frame([0x08, 0x00], &[0; 40])), "IPv4");
        assert!(!is_neighbour(&frame(
            [0x86, 0xdd],
            &[0x60, 0, 0, 0, 0, 0, 58]
        )));
        assert!(!is_neighbour(&[0x08]), "runt");
    }

    #[test]
    fn a_mailbox_hands_frames_over_in_order_and_wakes_its_queue() {
        let m = Mailbox::new().expect("eventfd");
        let mut buf = [0u8; 64];
        assert_eq!(m.take(&mut buf), None);
        assert!(m.post(&[1, 2, 3]));
        assert!(m.post(&[4]));
        let mut fds = [PollFd::new(&m.wake, PollFlags::IN)];
        let ready = rustix::event::poll(&mut fds, Some(&timespec(Duration::ZERO)));
        assert_eq!(ready.expect("poll"), 1, "the eventfd is readable");
        assert_eq!(m.take(&mut buf), Some(3));
        assert_eq!(buf[..3], [1, 2, 3]);
        assert_eq!(m.take(&mut buf), Some(1));
        assert_eq!(m.take(&mut buf), None);
        for i in 0..MAILBOX_FRAMES {
            assert!(m.post(&[i as u8]), "frame {i}");
        }
        assert!(!m.post(&[0]), "a full mailbox refuses");
    }

    #[test]
    fn without_need_wakeup_every_batch_is_kicked() {
        let mut q = fake_queue(false);
        set_tx_flag(&q, false);
        let frame = [0u8; 60];
        assert_eq!(q.send_batch(Instant::ZERO, &[&frame, &frame]), 0);
        assert!(q.send(Instant::ZERO, &frame));
        assert_eq!(kicks(&q), (3, 2, 0), "{:?}", q.stats());
    }
}
