//! The `tun` link: a Linux TUN interface, whose other end is the kernel's own IP stack.
//!
//! [`Tun::open`] opens `/dev/net/tun` once per queue and attaches each file to one
//! interface with `TUNSETIFF` and `IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE`: bare IP packets
//! ([`Medium::Ip`], no link-layer header and no packet-information prefix), one file per
//! queue so that each shard can own one ([`TunQueue`]). The kernel spreads the packets it
//! sends over the queues by flow; a packet written on any queue enters the kernel's stack.
//! The files are non-blocking: [`Device::recv`] is one `read(2)` (`None` on `EAGAIN`),
//! [`Device::send`] one `write(2)`; the runtime sleeps in `poll(2)` on
//! [`TunQueue::fd`] until it is readable or its next timer ([`TunQueue::wait`]).
//!
//! # The interface
//!
//! The interface is created when the first queue attaches and disappears with the last
//! queue's file (it is not made persistent). It is created in the network namespace of
//! the thread that opens it: the caller's, or the one named by [`TunConfig::netns`]
//! (a `/proc/<pid>/ns/net` or `/run/netns/<name>` file), which [`Tun::open`] enters with
//! `setns(2)` on a short-lived thread of its own, so no other thread changes namespace and
//! no interface name is ever taken in the root namespace. The files keep working from any
//! thread and namespace afterwards. The kernel side (address, routes, `ip link set up`)
//! is configured by whoever owns the namespace, with `ip`.
//!
//! The MTU is set (if [`TunConfig::mtu`] says so) and read once, at open: it becomes the
//! queues' [`DeviceCaps::mtu`]. Changing it later with `ip link set mtu` is not seen;
//! the kernel would then drop our larger packets or send us larger ones, which
//! [`Device::recv`] truncates to the caller's buffer and counts ([`TunStats::rx_truncated`]).
//!
//! # Offloads: the virtio-net header
//!
//! With [`TunConfig::offload`] every queue is opened with `IFF_VNET_HDR` and the interface
//! takes `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6` (`TUNSETOFFLOAD`): the kernel then skips the
//! TCP checksum and segmentation of what it sends us, and hands over super-segments of up
//! to 64 KiB, one `read(2)` each, behind a 10-byte `struct virtio_net_hdr` (the kernel's
//! default header size). [`Device::recv`] reads the header and the packet with one
//! `readv(2)` and returns the IP packet, with the kernel's word on its TCP or UDP checksum
//! ([`Device::rx_csum_unnecessary`]: `VIRTIO_NET_HDR_F_NEEDS_CSUM`, a packet the kernel
//! made and left the checksum of to the device, or `VIRTIO_NET_HDR_F_DATA_VALID`, one it
//! verified), which the runtime passes to the stack so that it does not verify it again
//! (Linux's `skb_csum_unnecessary`). A partial checksum (`NEEDS_CSUM`: the field holds the
//! pseudo-header sum) is completed only for a caller that did not say it passes that word
//! on ([`Device::trust_rx_csum`]; a capture does not): the sum from `csum_start` goes in at
//! `csum_offset`, as Linux's `skb_checksum_help` does. The packet's total length may exceed the
//! MTU ([`DeviceCaps::gro_max_size`] is 65,535, so the runtime's receive buffer is that
//! large; IP input checks total length against the packet, not the MTU, as Linux does).
//! A header that does not fit the packet is counted ([`TunStats::rx_bad_vnet`]) and the
//! packet dropped.
//!
//! Transmit is GSO at the driver ([`crate::gso`]): [`Device::send_batch`] merges runs of
//! consecutive MSS-sized segments of one TCP flow into one super-segment of up to 64 KiB,
//! written with one `writev(2)` (the virtio-net header with `gso_type` TCPV4 or TCPV6,
//! `gso_size` the segment size, `NEEDS_CSUM`; the merged headers; each segment's payload
//! straight from the stack's buffer, no copy), which the kernel's TCP takes as one segment.
//! TCP builds MSS-sized segments as on any link, so nothing in it changes. Anything else,
//! and every frame sent with [`Device::send`] or [`Device::send_more`], goes out alone
//! behind a zero header (the stack's own checksum, no offload asked for).

use core::time::Duration;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use ustack_obs::time::Instant;

use crate::gso::{self, VNET_F_DATA_VALID, VNET_F_NEEDS_CSUM, VNET_GSO_NONE};
use crate::netns::invalid;
use crate::sleep::timespec;
use crate::sys::netif;
use crate::sys::tun as sys;
use crate::{Device, DeviceCaps, Medium};

/// The most queues a TUN interface takes (the kernel's `MAX_TAP_QUEUES`).
pub const MAX_QUEUES: usize = 256;

/// How to open a TUN interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunConfig {
    /// The interface's name: up to 15 bytes, no `/`, whitespace or NUL. A `%d` in it is
    /// replaced by the kernel with the lowest free number (`ustack%d` -> `ustack0`).
    pub name: String,
    /// How many queues (files) to open, 1 to [`MAX_QUEUES`].
    pub queues: usize,
    /// Set the interface MTU to this (68 to 65535) at open; `None` keeps the kernel's
    /// (1500 for a new TUN interface).
    pub mtu: Option<u32>,
    /// Create the interface in this network namespace (a `/proc/<pid>/ns/net` or
    /// `/run/netns/<name>` file) instead of the caller's.
    pub netns: Option<PathBuf>,
    /// Take the kernel's offloads (`IFF_VNET_HDR`; `TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6`):
    /// receive super-segments up to 64 KiB with partial checksums, completed here, and
    /// send runs of TCP segments of a transmit batch as super-segments (GSO at the driver).
    pub offload: bool,
}

impl Default for TunConfig {
    fn default() -> Self {
        TunConfig {
            name: "ustack%d".to_owned(),
            queues: 1,
            mtu: None,
            netns: None,
            offload: false,
        }
    }
}

impl TunConfig {
    /// The configuration with its values checked: `InvalidInput` naming the bad field.
    pub fn validate(&self) -> io::Result<()> {
        crate::netns::check_interface("tun", &self.name, self.queues, MAX_QUEUES)?;
        if let Some(mtu) = self.mtu
            && !(68..=65535).contains(&mtu)
        {
            return Err(invalid(format!("tun: MTU {mtu}: 68 to 65535")));
        }
        Ok(())
    }
}

/// An open TUN interface: its name, MTU and queues. Take the queues out with
/// [`into_queues`](Self::into_queues) to give one to each shard; the interface lives as
/// long as any of them.
#[derive(Debug)]
pub struct Tun {
    name: String,
    mtu: usize,
    queues: Vec<TunQueue>,
}

impl Tun {
    /// Creates (or attaches to) the TUN interface `config.name` with `config.queues`
    /// queues, in `config.netns` if given. Errors: `InvalidInput` for a bad config; the OS
    /// error otherwise, with what failed (`ENOENT` without `/dev/net/tun`, `EPERM` without
    /// `CAP_NET_ADMIN`, `EINVAL` if an existing interface of that name is not a
    /// multi-queue TUN, `EBUSY` if its queues are all taken).
    pub fn open(config: &TunConfig) -> io::Result<Tun> {
        config.validate()?;
        crate::netns::in_netns("tun", config.netns.as_deref(), || Tun::open_here(config))
    }

    /// [`open`](Self::open) in the calling thread's namespace.
    fn open_here(config: &TunConfig) -> io::Result<Tun> {
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("tun: {what} `{}`: {e}", config.name))
        };
        let vnet = if config.offload {
            libc::IFF_VNET_HDR
        } else {
            0
        };
        let flags =
            (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE | vnet) as libc::c_short;
        let (first, name) =
            sys::open_queue(&config.name, flags).map_err(|e| ctx("TUNSETIFF", e))?;
        let mut fds = vec![first];
        // Further queues attach to the name the kernel gave the first (`%d` resolved).
        for _ in 1..config.queues {
            let (fd, _) = sys::open_queue(&name, flags).map_err(|e| ctx("TUNSETIFF", e))?;
            fds.push(fd);
        }
        if let Some(mtu) = config.mtu {
            netif::set_mtu(&name, mtu).map_err(|e| ctx("setting the MTU of", e))?;
        }
        let mtu = netif::mtu(&name).map_err(|e| ctx("reading the MTU of", e))?;
        if config.offload {
            let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
            sys::set_offload(&fds[0], offloads).map_err(|e| ctx("TUNSETOFFLOAD", e))?;
        }
        let caps = DeviceCaps {
            medium: Medium::Ip,
            mtu,
            gro_max_size: if config.offload { GSO_MAX_SIZE } else { 0 },
            gso_max_size: if config.offload { GSO_MAX_SIZE } else { 0 },
        };
        let queues = fds
            .into_iter()
            .enumerate()
            .map(|(index, fd)| TunQueue {
                fd,
                index,
                name: name.clone(),
                caps,
                vnet: config.offload,
                rx_csum_ok: false,
                trust_rx_csum: false,
                stats: TunStats::default(),
            })
            .collect();
        Ok(Tun { name, mtu, queues })
    }

    /// The interface's name, as the kernel made it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface MTU read at open.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The queues, in order.
    pub fn queues(&self) -> &[TunQueue] {
        &self.queues
    }

    /// The queues, to hand out (one per shard).
    pub fn into_queues(self) -> Vec<TunQueue> {
        self.queues
    }
}

/// What a [`TunQueue`] has done, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunStats {
    /// Packets read.
    pub rx_packets: u64,
    /// Bytes read.
    pub rx_bytes: u64,
    /// Packets longer than the caller's buffer (truncated).
    pub rx_truncated: u64,
    /// Reads that failed with an error other than `EAGAIN`/`EINTR`.
    pub rx_errors: u64,
    /// Packets written (each segment of a super-segment counts).
    pub tx_packets: u64,
    /// Bytes written (IP packets as the stack made them).
    pub tx_bytes: u64,
    /// `write(2)`/`writev(2)` calls that succeeded: `tx_packets` without offloads, far
    /// fewer with them.
    pub tx_writes: u64,
    /// Writes refused: the packet is larger than the MTU, or the kernel said no (`EIO`
    /// while the interface is down, `EINVAL` for a packet that is not IP, `EAGAIN`).
    pub tx_errors: u64,
    /// Times [`TunQueue::wait`] slept in `poll(2)`.
    pub sleeps: u64,
    /// With offloads: super-segments read (a `gso_type` other than none).
    pub rx_gso: u64,
    /// With offloads: partial checksums completed (`VIRTIO_NET_HDR_F_NEEDS_CSUM`), for a
    /// caller that did not ask to leave them ([`Device::trust_rx_csum`]).
    pub rx_csum_completed: u64,
    /// With offloads: packets whose TCP or UDP checksum the kernel vouched for
    /// (`VIRTIO_NET_HDR_F_NEEDS_CSUM` or `VIRTIO_NET_HDR_F_DATA_VALID`), handed over with
    /// [`Device::rx_csum_unnecessary`] true: the stack does not verify them.
    pub rx_csum_trusted: u64,
    /// With offloads: packets dropped for a virtio-net header that does not fit them
    /// (shorter than the header, or a checksum position outside the packet).
    pub rx_bad_vnet: u64,
    /// With offloads: super-segments written (GSO at the driver).
    pub tx_gso: u64,
    /// With offloads: segments merged into those super-segments.
    pub tx_gso_segs: u64,
    /// With offloads: super-segments TCP built itself (TSO inside TCP, frames longer
    /// than the MTU), written as they came, without a merge.
    pub tx_tso: u64,
    /// With offloads: the MTU-sized segments those stand for.
    pub tx_tso_segs: u64,
}

/// One queue of a TUN interface: a non-blocking file that carries bare IP packets.
#[derive(Debug)]
pub struct TunQueue {
    fd: OwnedFd,
    index: usize,
    name: String,
    caps: DeviceCaps,
    /// Every read and write carries a [`VNET_HDR_LEN`]-byte virtio-net header first.
    vnet: bool,
    /// The last packet read came with the kernel's word for its checksum.
    rx_csum_ok: bool,
    /// The caller honours `rx_csum_ok` ([`Device::trust_rx_csum`]): partial checksums
    /// are left unfinished.
    trust_rx_csum: bool,
    stats: TunStats,
}

/// The largest IP packet with offloads (Linux's `GSO_MAX_SIZE` for IPv4).
pub const GSO_MAX_SIZE: usize = 65_535;
pub use crate::gso::VNET_HDR_LEN;

/// Completes a partial checksum as the virtio-net header asks (`csum_start` and
/// `csum_offset`, little-endian at bytes 6 and 8): the field holds the pseudo-header sum;
/// the sum of everything from `csum_start` goes in its place. False if the positions do not
/// fit the packet.
fn complete_csum(hdr: &[u8; VNET_HDR_LEN], packet: &mut [u8]) -> bool {
    let Some((start, field)) = csum_position(hdr, packet.len()) else {
        return false;
    };
    let sum = ustack_wire::checksum::checksum(&packet[start..]);
    packet[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

/// Where a partial checksum starts and where its field is (`csum_start`, `csum_start +
/// csum_offset`), if they fit a packet of `len` bytes.
fn csum_position(hdr: &[u8; VNET_HDR_LEN], len: usize) -> Option<(usize, usize)> {
    let start = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
    let field = start + usize::from(u16::from_le_bytes([hdr[8], hdr[9]]));
    (field + 2 <= len).then_some((start, field))
}

/// Attach or detach the TUN queue whose file (or a `dup` of it) is `fd`, without closing
/// it (`TUNSETQUEUE`): a detached queue gets no packets, the kernel spreads flows over the
/// queues still attached; writing on it is refused (`EINVAL`) until it is attached again.
/// The LD_PRELOAD library detaches a parent's queue after `fork` (docs/preload.md).
pub fn set_queue_attached(fd: BorrowedFd<'_>, attached: bool) -> io::Result<()> {
    sys::set_queue(fd, attached)
}

impl TunQueue {
    /// The queue's file, for an event loop (readable: a packet is waiting).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Which queue of the interface this is (0-based, in opening order).
    pub fn queue(&self) -> usize {
        self.index
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters.
    pub fn stats(&self) -> &TunStats {
        &self.stats
    }

    /// Sleeps in `poll(2)` until a packet is waiting or `timeout` passes (`None`: no
    /// limit). Returns whether a packet is waiting. A signal ends the sleep early
    /// (returns `false`).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let ts = timeout.map(timespec);
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        self.stats.sleeps += 1;
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) => Ok(n > 0 && fds[0].revents().contains(PollFlags::IN)),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl TunQueue {
    /// One `writev(2)` of `iov`, again after a signal.
    fn write(&self, iov: &[IoSlice<'_>]) -> rustix::io::Result<usize> {
        loop {
            match rustix::io::writev(&self.fd, iov) {
                Err(Errno::INTR) => {}
                r => return r,
            }
        }
    }

    /// A frame longer than the MTU: with offloads, a super-segment TCP built itself
    /// ([`gso::tso_frame`], TSO inside TCP) written whole with its virtio-net header
    /// (no merge); anything else is refused.
    fn send_tso(&mut self, frame: &[u8]) -> bool {
        let Some(sup) = self
            .vnet
            .then(|| gso::tso_frame(frame, self.caps.mtu))
            .flatten()
        else {
            self.stats.tx_errors += 1;
            return false;
        };
        let iov = [
            IoSlice::new(&sup.vnet),
            IoSlice::new(sup.headers()),
            IoSlice::new(&frame[sup.hdr_len()..]),
        ];
        let written = self.write(&iov);
        if self.count_tx(written, 1, frame.len()) {
            self.stats.tx_tso += 1;
            self.stats.tx_tso_segs += sup.segs as u64;
            true
        } else {
            false
        }
    }

    /// Counts a write of `packets` packets (`bytes` as the stack made them); whether it
    /// went out.
    fn count_tx(
        &mut self,
        written: rustix::io::Result<usize>,
        packets: usize,
        bytes: usize,
    ) -> bool {
        if written.is_err() {
            self.stats.tx_errors += packets as u64;
            return false;
        }
        self.stats.tx_writes += 1;
        self.stats.tx_packets += packets as u64;
        self.stats.tx_bytes += bytes as u64;
        true
    }

    /// What the virtio-net header `hdr` says about `packet`: the kernel's word for its
    /// checksum, a partial checksum to complete (unless the caller trusts the word),
    /// a super-segment to count. False (counted) if the header does not fit the packet.
    fn take_vnet(&mut self, hdr: &[u8; VNET_HDR_LEN], packet: &mut [u8]) -> bool {
        if hdr[0] & VNET_F_NEEDS_CSUM != 0 {
            let fits = if self.trust_rx_csum {
                csum_position(hdr, packet.len()).is_some()
            } else {
                complete_csum(hdr, packet)
            };
            if !fits {
                self.stats.rx_bad_vnet += 1;
                return false;
            }
            if !self.trust_rx_csum {
                self.stats.rx_csum_completed += 1;
            }
        }
        // Linux `virtio_net_hdr_from_skb`: NEEDS_CSUM for a CHECKSUM_PARTIAL skb (made
        // on this host), DATA_VALID for a CHECKSUM_UNNECESSARY one (verified already).
        self.rx_csum_ok = hdr[0] & (VNET_F_NEEDS_CSUM | VNET_F_DATA_VALID) != 0;
        if self.rx_csum_ok {
            self.stats.rx_csum_trusted += 1;
        }
        if hdr[1] != VNET_GSO_NONE {
            self.stats.rx_gso += 1;
        }
        true
    }
}

impl Device for TunQueue {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.rx_csum_ok = false;
        let mut hdr = [0u8; VNET_HDR_LEN];
        let hdr_len = if self.vnet { VNET_HDR_LEN } else { 0 };
        loop {
            let read = if self.vnet {
                let mut iov = [IoSliceMut::new(&mut hdr), IoSliceMut::new(&mut *buf)];
                rustix::io::readv(&self.fd, &mut iov)
            } else {
                rustix::io::read(&self.fd, &mut *buf)
            };
            match read {
                Ok(n) if n < hdr_len => {
                    self.stats.rx_bad_vnet += 1;
                    return None;
                }
                Ok(n) => {
                    let n = n - hdr_len;
                    // Should the kernel report more than it copied (a packet longer than
                    // `buf`: the MTU changed behind our back), count it as truncated.
                    if n > buf.len() {
                        self.stats.rx_truncated += 1;
                    }
                    let n = n.min(buf.len());
                    if self.vnet && !self.take_vnet(&hdr, &mut buf[..n]) {
                        return None;
                    }
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += n as u64;
                    return Some(n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return None,
                Err(_) => {
                    self.stats.rx_errors += 1;
                    return None;
                }
            }
        }
    }

    fn send(&mut self, _now: Instant, frame: &[u8]) -> bool {
        if frame.len() > self.caps.mtu {
            return self.send_tso(frame);
        }
        // With offloads, a zero header first: no checksum or segmentation asked for.
        let hdr = [0u8; VNET_HDR_LEN];
        let written = if self.vnet {
            self.write(&[IoSlice::new(&hdr), IoSlice::new(frame)])
        } else {
            self.write(&[IoSlice::new(frame)])
        };
        self.count_tx(written, 1, frame.len())
    }

    /// With offloads, runs of TCP segments go out as super-segments (GSO at the driver,
    /// [`crate::gso`]); everything else frame by frame.
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        if !self.vnet {
            return crate::send_each(self, now, frames);
        }
        let mut dropped = 0;
        let mut rest = frames;
        while let Some(&frame) = rest.first() {
            if frame.len() > self.caps.mtu {
                dropped += usize::from(!self.send_tso(frame));
                rest = &rest[1..];
                continue;
            }
            let Some(sup) = gso::coalesce(rest, self.caps.mtu) else {
                dropped += usize::from(!self.send(now, frame));
                rest = &rest[1..];
                continue;
            };
            let (run, after) = rest.split_at(sup.segs);
            let mut iov = [IoSlice::new(&[]); gso::MAX_SEGS + 2];
            iov[0] = IoSlice::new(&sup.vnet);
            iov[1] = IoSlice::new(sup.headers());
            for (slot, seg) in iov[2..].iter_mut().zip(run) {
                *slot = IoSlice::new(&seg[sup.hdr_len()..]);
            }
            let bytes = run.iter().map(|f| f.len()).sum();
            let written = self.write(&iov[..2 + run.len()]);
            if self.count_tx(written, run.len(), bytes) {
                self.stats.tx_gso += 1;
                self.stats.tx_gso_segs += run.len() as u64;
            } else {
                dropped += run.len();
            }
            rest = after;
        }
        dropped
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }

    /// Every frame is its own `write(2)` whether it goes alone or in the round's batch, so
    /// the runtime's qdisc bypass costs no system call more. (A queue with offloads merges
    /// a batch's segments itself: the runtime keeps the round for it, see
    /// `DeviceCaps::gso_max_size`.)
    fn tx_direct(&self) -> bool {
        true
    }

    fn rx_csum_unnecessary(&self) -> bool {
        self.rx_csum_ok
    }

    fn trust_rx_csum(&mut self) {
        self.trust_rx_csum = true;
    }
}
