//! The `xdp` link: an `AF_XDP` socket in copy mode on an Ethernet interface (a veth end),
//! fed by a small XDP program that redirects every frame of the interface to it.
//!
//! [`Xdp::open`] builds, in the interface's namespace:
//!
//! - an `XSKMAP` and the redirect program (six eBPF instructions written out in
//!   `crate::sys::xdp`: `bpf_redirect_map(xskmap, rx_queue_index, XDP_PASS)`),
//!   loaded with `bpf(BPF_PROG_LOAD)` and attached to the interface in generic (SKB) mode
//!   through a BPF link, which detaches it when the queue closes;
//! - the UMEM: an anonymous mapping of [`XdpConfig::frames`] 2 KiB chunks registered with
//!   the socket (`XDP_UMEM_REG`), half of them for receiving (lent to the kernel through
//!   the fill ring), half for transmitting;
//! - the four rings, each mapped at its offset: fill and completion (UMEM chunk
//!   addresses), receive and transmit (descriptors: address and length);
//! - the socket bound to queue 0 of the interface with `XDP_COPY` (veth has no zero-copy
//!   mode) and put into the map at index 0.
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
//! One queue only (veth has one receive queue unless made with more); the interface's own
//! kernel stack sees nothing while the program is attached, since every frame is
//! redirected.
//!
//! IPv6 frames are redirected like any other; the stack does neighbour discovery over
//! them. Its addresses' solicited-node groups must pass the interface's multicast filter,
//! which the kernel fills only with its own groups: the queue holds an `AF_PACKET` socket
//! that receives nothing but asks for every multicast frame (`PACKET_MR_ALLMULTI`; the
//! interface shows `ALLMULTI` while the queue is open).

use core::time::Duration;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;

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

/// How to open the xdp link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface (an existing Ethernet interface, a veth end say).
    pub interface: String,
    /// UMEM chunks, half for each direction: a power of two from 64 to 65536. Each ring
    /// has half as many entries.
    pub frames: usize,
    /// Open in this network namespace (a `/proc/<pid>/ns/net` or `/run/netns/<name>`
    /// file) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            interface: "veth0".to_owned(),
            frames: 4096,
            netns: None,
        }
    }
}

impl XdpConfig {
    /// The configuration with its values checked: `InvalidInput` naming the bad field.
    pub fn validate(&self) -> io::Result<()> {
        crate::netns::check_interface("xdp", &self.interface, 1, 1)?;
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
}

/// An open xdp link: its one queue, the interface's MAC and MTU.
#[derive(Debug)]
pub struct Xdp {
    mac: [u8; 6],
    queue: XdpQueue,
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
        let queue = XdpQueue::open(ifindex, config.frames, name, caps)
            .map_err(|e| io::Error::new(e.kind(), format!("xdp: socket on `{name}`: {e}")))?;
        Ok(Xdp { mac, queue })
    }

    /// The interface's MAC address: the stack's.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface MTU read at open.
    pub fn mtu(&self) -> usize {
        self.queue.caps.mtu
    }

    /// The queue, to give to a runtime.
    pub fn into_queue(self) -> XdpQueue {
        self.queue
    }
}

/// The `AF_XDP` socket with its UMEM and rings; the program stays attached while it lives.
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
    /// Dropped in this order: the link (detaches the program), the program, the map, then
    /// the socket.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    fd: OwnedFd,
    /// An unbound `AF_PACKET` socket holding the interface's allmulti count (IPv6's
    /// solicited-node groups through its multicast filter); receives nothing.
    _allmulti: OwnedFd,
}

impl XdpQueue {
    fn open(ifindex: u32, frames: usize, name: &str, caps: DeviceCaps) -> io::Result<XdpQueue> {
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
            &SocketAddrXdp::new(copy | SocketAddrXdpFlags::XDP_USE_NEED_WAKEUP, ifindex, 0),
        ) {
            Ok(()) => true,
            Err(Errno::INVAL) => {
                rustix::net::bind(&fd, &SocketAddrXdp::new(copy, ifindex, 0))?;
                false
            }
            Err(e) => return Err(e.into()),
        };
        // One kick hands the driver a whole ring instead of 32 descriptors (6.17+).
        let tx_budget = match sys::set_tx_budget(fd.as_fd(), half) {
            Ok(()) => half,
            Err(_) => DEFAULT_TX_BUDGET,
        };
        let map = sys::create_xskmap(1)?;
        sys::xskmap_insert(map.as_fd(), 0, fd.as_fd())?;
        let prog = sys::load_redirect(map.as_fd())?;
        let link = sys::attach_xdp(prog.as_fd(), ifindex)?;
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
            _link: link,
            _prog: prog,
            _map: map,
            fd,
            _allmulti: allmulti,
        })
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
        if self.rx.theirs(true) != self.rx.ours {
            return Ok(true);
        }
        let ts = timeout.map(timespec);
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        self.stats.sleeps += 1;
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(_) => Ok(self.rx.theirs(true) != self.rx.ours),
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
            _link: fd(),
            _prog: fd(),
            _map: fd(),
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
