//! The `packet` link: `AF_PACKET` sockets with `TPACKET_V3` rings on an Ethernet
//! interface (a veth end), whose other side is whatever the interface is wired to: the
//! Linux kernel on the veth's peer, say.
//!
//! [`Packet::open`] opens one socket per queue, each with its own receive and transmit
//! ring mapped into our memory, bound to the interface for every protocol, and, with more
//! than one queue, joined into one `PACKET_FANOUT` group in hash mode: the kernel hands
//! each received frame to one socket of the group by its flow hash (symmetric, so both
//! directions of a flow pick the same socket), which makes each socket a shard's queue
//! ([`PacketQueue`]). Frames are Ethernet II ([`Medium::Ethernet`](crate::Medium::Ethernet)): ARP works as on
//! any Ethernet link; give the stack the interface's MAC ([`Packet::mac`]).
//!
//! # ARP and neighbour discovery with several queues
//!
//! Each shard has a neighbour table of its own, but fanout hands an ARP reply (or an IPv6
//! neighbour advertisement) to one socket only, so a shard whose request was answered to
//! another shard would never learn its neighbour. So with more than one queue, each queue
//! has a second, ringless socket outside the group, and a classic BPF program on each
//! socket sorts the frames: the fanout sockets take everything but neighbour resolution,
//! the second sockets only that (ARP, and ICMPv6 types 133-137 right after the IPv6
//! header: RFC 4861's messages), so every shard sees every ARP and NDP frame (requests are
//! answered once per shard, with the same MAC). [`Device::recv`] reads it when the ring is
//! empty, one `recv(2)` per poll round; [`PacketQueue::wait`] polls both sockets. With
//! one queue, its ring socket takes every frame (`ETH_P_ALL`) and there is no second
//! socket.
//!
//! # Receive: a `TPACKET_V3` ring
//!
//! The receive ring is a run of blocks. The kernel fills the current block with frames
//! (each behind a `struct tpacket3_hdr`) and hands it to us, marking it `TP_STATUS_USER`,
//! when it is full or when it has held frames for the retire timeout
//! ([`PacketConfig::retire`], 1 ms by default); then it moves on to the next block. We
//! read the blocks in order, frame by frame ([`Device::recv`] copies one frame out), and
//! give each block back (`TP_STATUS_KERNEL`) once its last frame is read. The price of
//! batching by block is latency when traffic is light: a lone frame waits up to the retire
//! timeout. A full ring makes the kernel drop frames (`PACKET_STATISTICS`, in
//! [`PacketQueue::kernel_stats`]).
//!
//! # Transmit: a `TPACKET_V3` TX ring
//!
//! The transmit ring is an array of fixed-size frames (V3 transmit works frame by frame,
//! like V2: variable-size slots are refused). [`Device::send_more`] copies a frame into
//! the next free slot and marks it `TP_STATUS_SEND_REQUEST`; one zero-length `send(2)`
//! (the "kick") asks the kernel to transmit every marked slot, so a batch
//! ([`Device::send_batch`], or `send_more` with the `xmit_more` hint) costs one system
//! call. The kernel marks a slot available again when it is done with the frame. A slot
//! that is still in flight when we come round to it again means the ring is full: the
//! frame is dropped and counted ([`PacketStats::tx_ring_full`]).
//!
//! # Checksum offload and TSO on the peer
//!
//! A veth peer with transmit checksum offload (the default) hands over TCP and UDP
//! segments whose checksum is not filled in (`CHECKSUM_PARTIAL`; the ring marks them
//! `TP_STATUS_CSUMNOTREADY`), and with TSO (also the default) segments up to 64 KiB that
//! the ring truncates. The stack would drop both. So the peer's transmit offloads must be
//! off (`ethtool -K <peer> tx off`, which turns TSO off with it): the test rigs do that.
//! Frames that arrive marked anyway are counted ([`PacketStats::rx_csum_not_ready`],
//! [`PacketStats::rx_truncated`]) and passed on as they are. (The link does not use
//! `PACKET_VNET_HDR`, which would carry the offload metadata.)
//!
//! Frames that the interface transmits (ours, and the kernel's own on this interface) are
//! not received back (`PACKET_IGNORE_OUTGOING`); a malformed frame in the transmit ring
//! is skipped by the kernel rather than stalling the ring (`PACKET_LOSS`).
//!
//! # IPv6
//!
//! With one queue, IPv6 frames reach the ring like any other (`ETH_P_ALL`); the stack does
//! neighbour discovery over them (RFC 4861) in the table ARP uses. Its addresses are
//! solicited at their solicited-node groups (`33:33:ff:xx:xx:xx`), which a NIC's
//! multicast filter drops unless told otherwise, and the kernel does not know the stack's
//! addresses: so each queue's socket asks for every multicast frame
//! (`PACKET_MR_ALLMULTI`, the interface's allmulti count held while a queue is open). With
//! several queues, neighbour discovery reaches every queue (above).

use core::time::Duration;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use ustack_obs::time::Instant;

use crate::netns::{EthernetInterface, ethernet_interface, invalid};
use crate::sleep::timespec;
use crate::sys::mapping::Mapping;
use crate::sys::packet as sys;
use crate::{Device, DeviceCaps};

/// The most sockets in one fanout group (the kernel's `PACKET_FANOUT_MAX`).
pub const MAX_QUEUES: usize = 256;

/// Bytes of `struct tpacket3_hdr`, aligned (`TPACKET_ALIGN`): where a transmit frame's
/// data starts in its slot.
const TX_DATA_OFFSET: usize = 48;
/// Offsets in `struct tpacket_block_desc` (the `tpacket_hdr_v1` after two `u32`s).
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
/// Offsets in `struct tpacket3_hdr`.
const HDR_NEXT_OFFSET: usize = 0;
const HDR_STATUS: usize = 20;
/// The first 28 bytes of `struct tpacket3_hdr`: next offset, sec, nsec, snaplen, len,
/// status, mac, net.
const HDR_READ: usize = 28;

/// How to open the packet link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketConfig {
    /// The interface to bind to (an existing Ethernet interface, a veth end say), in the
    /// namespace below.
    pub interface: String,
    /// How many sockets (queues) to open, 1 to [`MAX_QUEUES`]; more than one join a
    /// `PACKET_FANOUT` group in hash mode.
    pub queues: usize,
    /// The size of each receive block: a power of two from 4 KiB to 16 MiB, and at least
    /// the largest frame plus 64 bytes of headers.
    pub rx_block_size: usize,
    /// How many receive blocks per queue (1 to 65536).
    pub rx_blocks: usize,
    /// How long the kernel fills a receive block before handing it over with what it has
    /// (1 ms to 60 s, whole milliseconds).
    pub retire: Duration,
    /// How many transmit slots per queue (1 to 65536); each is the largest frame plus 48
    /// bytes, rounded up to a power of two.
    pub tx_frames: usize,
    /// Open in this network namespace (a `/proc/<pid>/ns/net` or `/run/netns/<name>`
    /// file) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl Default for PacketConfig {
    fn default() -> Self {
        PacketConfig {
            interface: "veth0".to_owned(),
            queues: 1,
            rx_block_size: 256 << 10,
            rx_blocks: 16,
            retire: Duration::from_millis(1),
            tx_frames: 512,
            netns: None,
        }
    }
}

impl PacketConfig {
    /// The configuration with its values checked: `InvalidInput` naming the bad field.
    pub fn validate(&self) -> io::Result<()> {
        crate::netns::check_interface("packet", &self.interface, self.queues, MAX_QUEUES)?;
        let bs = self.rx_block_size;
        if !bs.is_power_of_two() || !(4096..=16 << 20).contains(&bs) {
            return Err(invalid(format!(
                "packet: receive block size {bs}: a power of two from 4096 to 16 MiB"
            )));
        }
        if !(1..=65536).contains(&self.rx_blocks) {
            return Err(invalid(format!(
                "packet: {} receive blocks: 1 to 65536",
                self.rx_blocks
            )));
        }
        let ms = self.retire.as_millis();
        if !(1..=60_000).contains(&ms) || !self.retire.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(invalid(format!(
                "packet: retire timeout {:?}: 1 ms to 60 s, whole milliseconds",
                self.retire
            )));
        }
        if !(1..=65536).contains(&self.tx_frames) {
            return Err(invalid(format!(
                "packet: {} transmit frames: 1 to 65536",
                self.tx_frames
            )));
        }
        Ok(())
    }
}

/// An open packet link: the interface's name, MTU, MAC and the queues. Take the queues
/// out with [`into_queues`](Self::into_queues) to give one to each shard.
#[derive(Debug)]
pub struct Packet {
    name: String,
    mtu: usize,
    mac: [u8; 6],
    queues: Vec<PacketQueue>,
}

/// Fanout group ids handed out by this process (the kernel's ids are per network
/// namespace; mixing in the process id keeps two processes in one namespace apart).
static NEXT_GROUP: AtomicU32 = AtomicU32::new(0);

impl Packet {
    /// Opens `config.queues` sockets on `config.interface`, in `config.netns` if given.
    /// Errors: `InvalidInput` for a bad config (or an interface that is not Ethernet, or
    /// whose MTU does not fit the receive blocks); the OS error otherwise, with what
    /// failed (`ENODEV` for an interface that does not exist, `EPERM` without
    /// `CAP_NET_RAW`).
    pub fn open(config: &PacketConfig) -> io::Result<Packet> {
        config.validate()?;
        crate::netns::in_netns("packet", config.netns.as_deref(), || {
            Packet::open_here(config)
        })
    }

    fn open_here(config: &PacketConfig) -> io::Result<Packet> {
        let name = config.interface.clone();
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("packet: {what} `{name}`: {e}"))
        };
        let EthernetInterface { ifindex, mac, caps } = ethernet_interface("packet", &name)?;
        let mtu = caps.mtu;
        let max_frame = caps.max_frame_len();
        // A V3 block holds its descriptor (48 bytes) and a frame behind its header.
        if max_frame + 64 + TX_DATA_OFFSET > config.rx_block_size {
            return Err(invalid(format!(
                "packet: receive block size {} too small for `{name}`'s MTU {mtu}",
                config.rx_block_size
            )));
        }
        let layout = Layout::new(config, max_frame);
        let group = (std::process::id() as u16)
            .wrapping_mul(251)
            .wrapping_add(NEXT_GROUP.fetch_add(1, Ordering::Relaxed) as u16);
        let queues = (0..config.queues)
            .map(|index| {
                let fanout = (config.queues > 1).then_some(group);
                PacketQueue::open(ifindex, &layout, fanout, index, &name, caps)
                    .map_err(|e| ctx("socket on", e))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Packet {
            name,
            mtu,
            mac,
            queues,
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface MTU read at open.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The interface's MAC address: the stack's, so that the kernel's stack on this
    /// interface and ours agree on who is who.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The queues, in order.
    pub fn queues(&self) -> &[PacketQueue] {
        &self.queues
    }

    /// The queues, to hand out (one per shard).
    pub fn into_queues(self) -> Vec<PacketQueue> {
        self.queues
    }
}

/// The rings' geometry, the same for every queue.
#[derive(Debug, Clone, Copy)]
struct Layout {
    rx: sys::RingReq,
    tx: sys::RingReq,
}

impl Layout {
    fn new(config: &PacketConfig, max_frame: usize) -> Layout {
        // Values were validated: everything fits in u32.
        let rx = sys::RingReq {
            block_size: config.rx_block_size as u32,
            block_nr: config.rx_blocks as u32,
            // Not used by V3 receive beyond a sanity check: frames pack into the blocks.
            frame_size: 2048.min(config.rx_block_size as u32),
            frame_nr: (config.rx_blocks * (config.rx_block_size / 2048.min(config.rx_block_size)))
                as u32,
            retire_blk_tov: config.retire.as_millis() as u32,
        };
        let frame_size = (TX_DATA_OFFSET + max_frame).next_power_of_two().max(2048);
        let block_size = frame_size.max(64 << 10);
        let per_block = block_size / frame_size;
        let block_nr = config.tx_frames.div_ceil(per_block);
        let tx = sys::RingReq {
            block_size: block_size as u32,
            block_nr: block_nr as u32,
            frame_size: frame_size as u32,
            frame_nr: (block_nr * per_block) as u32,
            retire_blk_tov: 0,
        };
        Layout { rx, tx }
    }

    fn rx_len(&self) -> usize {
        self.rx.block_size as usize * self.rx.block_nr as usize
    }

    fn tx_len(&self) -> usize {
        self.tx.block_size as usize * self.tx.block_nr as usize
    }
}

/// What a [`PacketQueue`] has done, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames received (copied out of the ring or the ARP socket).
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames cut short: longer than the ring's snap length or than the caller's buffer.
    pub rx_truncated: u64,
    /// Frames that came with their checksum not filled in (`TP_STATUS_CSUMNOTREADY`: the
    /// peer offloads transmit checksums).
    pub rx_csum_not_ready: u64,
    /// Of those, frames from the neighbour socket: ARP and IPv6 neighbour discovery
    /// (several queues only).
    pub rx_arp: u64,
    /// Blocks handed back to the kernel.
    pub rx_blocks: u64,
    /// Blocks whose descriptor made no sense (skipped whole).
    pub rx_bad_blocks: u64,
    /// Frames sent (handed to the kernel).
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames dropped because every transmit slot was in flight.
    pub tx_ring_full: u64,
    /// Frames refused: larger than the largest frame, or rejected by the kernel
    /// (`TP_STATUS_WRONG_FORMAT`), or a kick that failed.
    pub tx_errors: u64,
    /// Kicks (`send(2)` calls).
    pub tx_kicks: u64,
    /// Times [`PacketQueue::wait`] slept in `poll(2)`.
    pub sleeps: u64,
}

/// The kernel's counters for a socket (`PACKET_STATISTICS`), cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames the socket took in (including dropped ones).
    pub packets: u64,
    /// Frames dropped because the receive ring was full.
    pub drops: u64,
    /// Times the receive ring was found full (frozen).
    pub freezes: u64,
}

/// Where reading stands in the current receive block.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// Frames left to read in the block.
    left: u32,
    /// Offset of the next frame's header, from the block's start.
    off: usize,
}

/// One socket of a packet link: a receive ring and a transmit ring on the interface.
#[derive(Debug)]
pub struct PacketQueue {
    map: Mapping,
    fd: OwnedFd,
    /// With several queues: the socket that sees every ARP and NDP frame (see the module
    /// docs).
    arp: Option<OwnedFd>,
    layout: Layout,
    index: usize,
    name: String,
    caps: DeviceCaps,
    /// The receive block we read next, and where in it (if it is ours).
    rx_block: usize,
    cursor: Option<Cursor>,
    /// The transmit slot we fill next, and how many are marked but not kicked.
    tx_head: usize,
    tx_unkicked: usize,
    stats: PacketStats,
    kernel: KernelStats,
}

impl PacketQueue {
    fn open(
        ifindex: u32,
        layout: &Layout,
        fanout: Option<u16>,
        index: usize,
        name: &str,
        caps: DeviceCaps,
    ) -> io::Result<PacketQueue> {
        let fd = sys::socket()?;
        sys::set_v3(fd.as_fd())?;
        sys::set_int(fd.as_fd(), libc::PACKET_LOSS, 1)?;
        sys::set_int(fd.as_fd(), libc::PACKET_IGNORE_OUTGOING, 1)?;
        // IPv6: the solicited-node groups of the stack's addresses through the interface's
        // multicast filter (each queue's socket holds the interface's allmulti count).
        sys::all_multicast(fd.as_fd(), ifindex)?;
        sys::set_ring(fd.as_fd(), false, layout.rx)?;
        sys::set_ring(fd.as_fd(), true, layout.tx)?;
        let map = Mapping::map_socket(fd.as_fd(), layout.rx_len() + layout.tx_len(), 0)?;
        let arp = match fanout {
            None => {
                sys::bind(fd.as_fd(), ifindex, libc::ETH_P_ALL as u16)?;
                None
            }
            Some(group) => {
                sys::filter_neighbour(fd.as_fd(), false)?;
                sys::bind(fd.as_fd(), ifindex, libc::ETH_P_ALL as u16)?;
                let arg = u32::from(group) | (libc::PACKET_FANOUT_HASH << 16);
                sys::set_int(fd.as_fd(), libc::PACKET_FANOUT, arg as libc::c_int)?;
                let arp = sys::socket()?;
                sys::set_int(arp.as_fd(), libc::PACKET_IGNORE_OUTGOING, 1)?;
                sys::filter_neighbour(arp.as_fd(), true)?;
                sys::bind(arp.as_fd(), ifindex, libc::ETH_P_ALL as u16)?;
                Some(arp)
            }
        };
        Ok(PacketQueue {
            map,
            fd,
            arp,
            layout: *layout,
            index,
            name: name.to_owned(),
            caps,
            rx_block: 0,
            cursor: None,
            tx_head: 0,
            tx_unkicked: 0,
            stats: PacketStats::default(),
            kernel: KernelStats::default(),
        })
    }

    /// The socket, for an event loop (readable: a receive block is ours).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Which queue of the link this is (0-based, in opening order).
    pub fn queue(&self) -> usize {
        self.index
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters.
    pub fn stats(&self) -> &PacketStats {
        &self.stats
    }

    /// The kernel's counters for this socket (frames taken in, dropped on a full ring),
    /// cumulative since open. One `getsockopt(2)`.
    pub fn kernel_stats(&mut self) -> io::Result<KernelStats> {
        let (packets, drops, freezes) = sys::take_stats(self.fd.as_fd())?;
        self.kernel.packets += u64::from(packets);
        self.kernel.drops += u64::from(drops);
        self.kernel.freezes += u64::from(freezes);
        Ok(self.kernel)
    }

    /// Sleeps in `poll(2)` until a receive block is ours or `timeout` passes (`None`: no
    /// limit). Returns whether frames are waiting; at once if some are already. A signal
    /// ends the sleep early (returns `false`).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.rx_ready() {
            return Ok(true);
        }
        let ts = timeout.map(timespec);
        let mut fds = vec![PollFd::new(&self.fd, PollFlags::IN)];
        if let Some(arp) = &self.arp {
            fds.push(PollFd::new(arp, PollFlags::IN));
        }
        self.stats.sleeps += 1;
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) => {
                let arp = fds
                    .get(1)
                    .is_some_and(|f| f.revents().contains(PollFlags::IN));
                Ok(arp || self.rx_ready())
            }
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether a frame is ready to read: we are inside a block, or the next is ours.
    fn rx_ready(&self) -> bool {
        self.cursor.is_some() || self.block_status(self.rx_block) & libc::TP_STATUS_USER != 0
    }

    fn block_base(&self, block: usize) -> usize {
        block * self.layout.rx.block_size as usize
    }

    fn block_status(&self, block: usize) -> u32 {
        self.map
            .u32_at(self.block_base(block) + BLOCK_STATUS)
            .load(Ordering::Acquire)
    }

    /// Gives the current block back to the kernel and moves to the next.
    fn release_block(&mut self) {
        self.map
            .u32_at(self.block_base(self.rx_block) + BLOCK_STATUS)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.stats.rx_blocks += 1;
        self.cursor = None;
        self.rx_block = (self.rx_block + 1) % self.layout.rx.block_nr as usize;
    }

    /// Opens the next block if it is ours: its frame count and first frame.
    fn open_block(&mut self) -> Option<Cursor> {
        if self.block_status(self.rx_block) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let base = self.block_base(self.rx_block);
        let left = self
            .map
            .u32_at(base + BLOCK_NUM_PKTS)
            .load(Ordering::Relaxed);
        let off = self
            .map
            .u32_at(base + BLOCK_FIRST_PKT)
            .load(Ordering::Relaxed) as usize;
        Some(Cursor { left, off })
    }

    /// A frame from the ARP socket, if there is one and a frame is waiting.
    fn recv_arp(&mut self, buf: &mut [u8]) -> Option<usize> {
        let n = sys::recv(self.arp.as_ref()?.as_fd(), buf)?;
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += n as u64;
        self.stats.rx_arp += 1;
        Some(n)
    }

    /// The transmit slot `i`'s offset in the mapping.
    fn tx_slot(&self, i: usize) -> usize {
        self.layout.rx_len() + i * self.layout.tx.frame_size as usize
    }

    fn kick(&mut self) -> bool {
        self.tx_unkicked = 0;
        self.stats.tx_kicks += 1;
        if sys::kick(self.fd.as_fd()).is_err() {
            self.stats.tx_errors += 1;
            return false;
        }
        true
    }
}

/// How many times a full transmit ring kicks the kernel before it drops a frame.
const TX_CATCH_UP_KICKS: usize = 4;

impl Device for PacketQueue {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let block_size = self.layout.rx.block_size as usize;
        loop {
            let mut cur = match self.cursor {
                Some(c) => c,
                None => match self.open_block() {
                    Some(c) => c,
                    None => return self.recv_arp(buf),
                },
            };
            if cur.left == 0 {
                self.release_block();
                continue;
            }
            let base = self.block_base(self.rx_block);
            // The frame header, then the frame, both inside this block.
            let mut hdr = [0u8; HDR_READ];
            if cur.off + HDR_READ > block_size || !self.map.read(base + cur.off, &mut hdr) {
                self.stats.rx_bad_blocks += 1;
                self.release_block();
                continue;
            }
            let word = |o: usize| u32::from_ne_bytes([hdr[o], hdr[o + 1], hdr[o + 2], hdr[o + 3]]);
            let next = word(HDR_NEXT_OFFSET) as usize;
            let snaplen = word(12) as usize;
            let len = word(16) as usize;
            let status = word(HDR_STATUS);
            let mac = usize::from(u16::from_ne_bytes([hdr[24], hdr[25]]));
            let start = cur.off + mac;
            let n = snaplen.min(buf.len());
            if start + snaplen > block_size || !self.map.read(base + start, &mut buf[..n]) {
                self.stats.rx_bad_blocks += 1;
                self.release_block();
                continue;
            }
            if snaplen < len || n < snaplen {
                self.stats.rx_truncated += 1;
            }
            if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                self.stats.rx_csum_not_ready += 1;
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += n as u64;
            cur.left -= 1;
            cur.off += next;
            if cur.left == 0 {
                self.release_block();
            } else if next == 0 {
                // More frames announced but no way to them: give the block up.
                self.stats.rx_bad_blocks += 1;
                self.release_block();
            } else {
                self.cursor = Some(cur);
            }
            return Some(n);
        }
    }

    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.send_more(now, frame, false)
    }

    fn send_more(&mut self, _now: Instant, frame: &[u8], more: bool) -> bool {
        let slot_len = self.layout.tx.frame_size as usize - TX_DATA_OFFSET;
        if frame.len() > self.caps.max_frame_len() || frame.len() > slot_len {
            self.stats.tx_errors += 1;
            if !more && self.tx_unkicked > 0 {
                self.kick();
            }
            return false;
        }
        let slot = self.tx_slot(self.tx_head);
        let status = |q: &Self| q.map.u32_at(slot + HDR_STATUS).load(Ordering::Acquire);
        let busy = |st: u32| st & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0;
        let mut st = status(self);
        // The ring came round to a slot still queued: let the kernel catch up. It may have
        // stopped early (tpacket_snd gives up when the socket's send buffer is full and
        // the call says MSG_DONTWAIT), so kick again, a few times, before dropping.
        for _ in 0..TX_CATCH_UP_KICKS {
            if !busy(st) {
                break;
            }
            self.kick();
            st = status(self);
        }
        if busy(st) {
            self.stats.tx_ring_full += 1;
            return false;
        }
        if st & libc::TP_STATUS_WRONG_FORMAT != 0 {
            // The kernel refused the frame that was in this slot (and skipped it).
            self.stats.tx_errors += 1;
        }
        // Header: no next offset (fixed slots), the length; then the frame.
        let len = frame.len() as u32;
        let mut hdr = [0u8; HDR_STATUS];
        hdr[12..16].copy_from_slice(&len.to_ne_bytes()); // tp_snaplen
        hdr[16..20].copy_from_slice(&len.to_ne_bytes()); // tp_len
        self.map.write(slot, &hdr);
        self.map.write(slot + TX_DATA_OFFSET, frame);
        // Publish: the kernel reads the frame only after it sees this status.
        self.map
            .u32_at(slot + HDR_STATUS)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head = (self.tx_head + 1) % self.layout.tx.frame_nr as usize;
        self.tx_unkicked += 1;
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += frame.len() as u64;
        if !more {
            return self.kick();
        }
        true
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// A frame sent alone is copied into the next transmit slot and kicked (one `send(2)`)
    /// at once: the runtime's qdisc bypass, as a driver rings its doorbell for a packet
    /// sent alone. The round would kick for it alone too; the bypass saves the wait for
    /// the round.
    fn tx_direct(&self) -> bool {
        true
    }
}
