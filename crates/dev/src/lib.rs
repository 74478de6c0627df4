//! Devices (links) for ustack.
//!
//! A device moves whole frames between the stack and a link: an Ethernet frame (without
//! FCS) for [`Medium::Ethernet`], or a bare IP packet for [`Medium::Ip`] (a TUN device).
//! The stack itself is sans-I/O; its poll loop (a test, or the runtime) moves frames
//! between [`Device::recv`]/[`Device::send`] and the stack's `receive`/`poll_transmit`.
//!
//! Devices here:
//! - [`sim::SimLink`]: two ports in one process on a virtual clock, with seeded faults
//!   (loss, duplication, reordering, corruption, delay, jitter, rate limit, queue limit,
//!   MTU). Deterministic: the same seed and inputs give the same deliveries.
//! - [`shm::ShmPort`]: one queue pair of a shared-memory link between two processes
//!   (memfd rings and eventfd doorbells, like DPDK memif); the benchmark link.
//! - [`tun::TunQueue`]: one queue of a multi-queue TUN interface (bare IP packets), whose
//!   other end is the Linux kernel; made by [`tun::Tun::open`], optionally inside a network
//!   namespace.
//! - [`capture::Capture`]: wraps any device and writes every frame in and out to pcap.
//!
//! This crate denies `unsafe` code; only its `sys` modules (shared memory and TUN now;
//! AF_PACKET, AF_XDP later) allow it, each block with a `// SAFETY:` line.

use ustack_obs::time::Instant;

pub mod capture;
pub mod shm;
pub mod sim;
mod sys;
pub mod tun;

/// What a device's frames carry, i.e. where the stack's input starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Ethernet II frames: 14-byte header (destination, source, EtherType), no FCS.
    Ethernet,
    /// Bare IP packets, no link-layer header (a TUN device).
    Ip,
}

impl Medium {
    /// Bytes of link-layer header in front of the IP packet: 14 for Ethernet, 0 for IP.
    pub const fn header_len(self) -> usize {
        match self {
            Medium::Ethernet => 14,
            Medium::Ip => 0,
        }
    }
}

/// What a device can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    /// The kind of frames the device carries.
    pub medium: Medium,
    /// The IP MTU, link-layer header excluded (Linux's `dev->mtu`): the largest frame the
    /// device carries is `mtu + medium.header_len()` bytes.
    pub mtu: usize,
}

impl DeviceCaps {
    /// The largest frame the device carries, link-layer header included.
    pub const fn max_frame_len(&self) -> usize {
        self.mtu + self.medium.header_len()
    }
}

/// A link as the stack's poll loop sees it: non-blocking, one frame at a time (batching
/// comes with the runtime).
///
/// Call order, one iteration of a poll loop at time `now` (from the caller's clock; a
/// device never reads a clock of its own):
/// 1. [`recv`](Device::recv) until it returns `None`, handing each frame to the stack;
/// 2. [`send`](Device::send) each frame the stack produces (`poll_transmit` until `None`);
/// 3. sleep, or with a virtual clock jump, until the earlier of the stack's next timer and
///    [`poll_at`](Device::poll_at) (or until the device is readable, for real devices).
///
/// `now` must not go backwards between calls on the same device.
pub trait Device {
    /// What the device carries: medium and MTU.
    fn caps(&self) -> DeviceCaps;
    /// Take the next received frame if one is ready at `now`: copies it into `buf`,
    /// returns its length. A frame longer than `buf` is truncated to `buf.len()`; size
    /// `buf` as [`DeviceCaps::max_frame_len`] to avoid that.
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// Queue one frame for transmission. Returns false if the device dropped it (queue
    /// full / too big); counted by the device.
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool;
    /// The earliest time at which `recv` may next return a frame (`None`: nothing in
    /// flight). Lets a virtual clock jump. A time at or before `now` means "now".
    fn poll_at(&self) -> Option<Instant>;
}

impl<D: Device + ?Sized> Device for &mut D {
    fn caps(&self) -> DeviceCaps {
        (**self).caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        (**self).recv(now, buf)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        (**self).send(now, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
}

impl<D: Device + ?Sized> Device for Box<D> {
    fn caps(&self) -> DeviceCaps {
        (**self).caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        (**self).recv(now, buf)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        (**self).send(now, frame)
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
}
