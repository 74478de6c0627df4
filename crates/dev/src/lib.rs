//! Devices (links) for ustack.
//!
//! A device moves whole frames between the stack and a link: an Ethernet frame (without
//! FCS) for [`Medium::Ethernet`], or a bare IP packet for [`Medium::Ip`] (a TUN device).
//! The stack itself is sans-I/O; its poll loop (a test, or the runtime) moves frames
//! between [`Device::recv`]/[`Device::send`] (or [`Device::send_batch`]) and the stack's
//! `receive`/`poll_transmit`.
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
//! - [`packet::PacketQueue`]: one socket of an `AF_PACKET` link (`TPACKET_V3` receive
//!   and transmit rings) on an Ethernet interface such as a veth end, several joined in a
//!   fanout group; made by [`packet::Packet::open`].
//! - [`xdp::XdpQueue`]: an `AF_XDP` socket in copy mode on an Ethernet interface (a veth
//!   end), with its UMEM, its four rings and the XDP program that redirects the
//!   interface's frames to it; made by [`xdp::Xdp::open`].
//! - [`gso`]: GSO at the driver, runs of TCP segments merged into super-segments for a
//!   device with the virtio-net header (the TUN queue with offloads).
//! - [`capture::Capture`]: wraps any device and writes every frame in and out to pcap.
//! - [`fault::Faulty`]: the fault relay: wraps any device (a TUN queue, say) and puts
//!   seeded faults on both paths, on the caller's clock, with the sim link's fault logic
//!   ([`fault::FaultLine`]).
//!
//! This crate denies `unsafe` code; only its `sys` modules (shared memory, TUN,
//! AF_PACKET, AF_XDP and bpf(2)) allow it, each block with a `// SAFETY:` line.
//! Where to start: the [`Device`] trait, and [`sim::SimLink`] to try things in a test. A
//! frame sent on one port of a sim link arrives at the other once the virtual clock reaches
//! its arrival time:
//!
//! ```
//! use ustack_dev::sim::{Side, SimLink, SimLinkConfig};
//! use ustack_obs::Instant;
//!
//! let mut link = SimLink::new(SimLinkConfig::default());
//! let frame = [0xffu8; 60]; // any bytes up to the link's MTU
//! assert!(link.send(Instant::ZERO, Side::A, &frame));
//! let arrival = link.poll_at(Side::B).expect("a frame on its way to B");
//! let mut buf = [0u8; 1514];
//! let n = link.recv(arrival, Side::B, &mut buf).expect("arrived");
//! assert_eq!(&buf[..n], &frame[..]);
//! assert_eq!(link.recv(arrival, Side::B, &mut buf), None, "one frame, delivered once");
//! ```

use ustack_obs::time::Instant;

pub mod capture;
pub mod fault;
pub mod gso;
mod netns;
pub mod packet;
pub mod shm;
pub mod sim;
pub mod sleep;
mod sys;
pub mod tun;
pub mod xdp;

pub use netns::in_netns;
pub use sleep::{Clock, Idle, Sleep};

/// What a device's frames carry (the wire crate's, which the stack shares).
pub use ustack_wire::Medium;

/// What a device can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceCaps {
    /// The kind of frames the device carries.
    pub medium: Medium,
    /// The IP MTU, link-layer header excluded (Linux's `dev->mtu`): the largest frame the
    /// device carries is `mtu + medium.header_len()` bytes.
    pub mtu: usize,
    /// The largest IP packet [`Device::recv`] may hand over when that is more than `mtu`:
    /// a device that receives super-segments (a TUN with offloads, up to 65,535 bytes;
    /// Linux's `gro_max_size`). 0: none larger than `mtu`.
    pub gro_max_size: usize,
    /// The largest IP packet [`Device::send`] takes when that is more than `mtu`: a
    /// device that segments TCP super-segments itself (a TUN with offloads writes them
    /// with a virtio-net GSO header, see [`gso::tso_frame`]; Linux's `gso_max_size`).
    /// TCP then builds one frame for a run of full segments (TSO inside TCP). 0: none.
    pub gso_max_size: usize,
}

impl DeviceCaps {
    /// The largest frame the device carries, link-layer header included.
    pub const fn max_frame_len(&self) -> usize {
        self.mtu + self.medium.header_len()
    }

    /// The largest frame [`Device::recv`] may return: [`max_frame_len`](Self::max_frame_len),
    /// or a super-segment of [`gro_max_size`](Self::gro_max_size).
    pub const fn max_rx_frame_len(&self) -> usize {
        let ip = if self.gro_max_size > self.mtu {
            self.gro_max_size
        } else {
            self.mtu
        };
        ip + self.medium.header_len()
    }
}

/// Reads a frame a device keeps ([`Device::kept_reader`]): `read(id, off, dst)` copies
/// bytes `off..off + dst.len()` of kept frame `id` into `dst`; false when the range is not
/// in the frame's memory (nothing copied).
pub type KeptReader = Box<dyn Fn(u32, usize, &mut [u8]) -> bool + Send>;

/// Writes into a transmit slot the caller holds ([`Device::tx_held_writer`]):
/// `write(id, off, src)` copies `src` to bytes `off..off + src.len()` of held slot `id`;
/// false when the range is not in the slot (nothing copied).
pub type HeldWriter = Box<dyn Fn(u32, usize, &[u8]) -> bool + Send>;

/// A link as the stack's poll loop sees it: non-blocking; frames are received one at a
/// time and transmitted one at a time or in batches.
///
/// Call order, one iteration of a poll loop at time `now` (from the caller's clock; a
/// device never reads a clock of its own):
/// 1. [`recv`](Device::recv) until it returns `None`, handing each frame to the stack;
/// 2. [`send_batch`](Device::send_batch) (or [`send`](Device::send) one by one) the frames
///    the stack produces (`poll_transmit` until `None`);
/// 3. sleep, or with a virtual clock jump, until the earlier of the stack's next timer and
///    [`poll_at`](Device::poll_at) (or until the device is readable, for real devices).
///
/// `now` must not go backwards between calls on the same device.
///
/// # Transmit batches
///
/// A device whose link learns of new frames by a costly step (a ring index published with
/// a fence, a doorbell system call) can take that step once per batch instead of once per
/// frame, as Linux drivers do with the `xmit_more` hint (`netdev_xmit_more()`; the qdisc
/// layer's `dev_hard_start_xmit` passes `more` to `xmit_one` for every frame of a list but
/// the last, and a driver defers its doorbell while it is set). Here the hint is
/// [`send_more`](Device::send_more), and [`send_batch`](Device::send_batch) is a list
/// sent with it. Both are provided, so every device takes batches; one that ignores the
/// hint just sends frame by frame. A wrapper forwards `send_more` (and `send_batch`, if
/// it has nothing to do per frame) so the wrapped device's batching is not lost.
///
/// Receive has no batch method: a device can already defer its per-frame bookkeeping on
/// the receive side by itself (the shm port publishes returned slots lazily, see
/// [`shm`]), and a batch would only add a copy through an intermediate buffer.
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
    /// [`send`](Device::send) with Linux's `xmit_more` hint: `more == true` says the
    /// caller sends another frame at once, so the device may defer making this one visible
    /// to the link (publishing a ring index, ringing a doorbell) until that later call. A
    /// caller that passes `true` must make another `send_more`, `send` or `send_batch`
    /// call on this device before it sleeps; the frame is only sure to leave after a call
    /// with `more == false` (`send` and `send_batch` end with one). Returns and counts
    /// exactly as `send`: false if the device dropped the frame.
    ///
    /// Provided: `send`, ignoring the hint.
    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        let _ = more;
        self.send(now, frame)
    }
    /// Queue `frames` for transmission, in order, with the drop semantics of
    /// [`send`](Device::send) for each: a frame the device refuses (queue full, too big) is
    /// dropped and counted by the device, and the frames after it are still offered.
    /// Returns how many frames were dropped, so `frames.len()` minus that were accepted.
    /// Every accepted frame is visible to the link when the call returns; the device may
    /// make them so in one step (one ring publication, at most one doorbell).
    ///
    /// Provided: [`send_more`](Device::send_more) on each frame, with `more` on all but
    /// the last.
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        send_each(self, now, frames)
    }
    /// [`send_batch`](Device::send_batch) of owned frame buffers, which the device may
    /// keep instead of copying, as a driver's transmit ring holds the buffers it was
    /// handed: in the place of each buffer it keeps it leaves a spare one (from the
    /// frames it delivered, or empty, without capacity), which the caller reuses or drops.
    /// A buffer the device keeps is the device's alone from then on; one it copies stays
    /// as it was. Drops and counts as `send_batch`, and returns how many frames were
    /// dropped.
    ///
    /// Provided: [`send_batch`](Device::send_batch) on the frames' bytes (every buffer
    /// left to the caller).
    fn send_swap(&mut self, now: Instant, frames: &mut [Vec<u8>]) -> usize {
        send_swap_by_copy(self, now, frames)
    }
    /// [`send_swap`](Device::send_swap) of one frame buffer, as a driver takes a packet
    /// sent alone (Linux's qdisc bypass: `sch_direct_xmit`, `xmit_more` false): the
    /// device may keep the buffer and leave a spare in `frame`, and publishes the frame.
    /// Returns and counts as [`send`](Device::send): false if the device dropped it.
    ///
    /// Provided: `send_swap` of the one buffer.
    fn send_one(&mut self, now: Instant, frame: &mut Vec<u8>) -> bool {
        self.send_swap(now, core::slice::from_mut(frame)) == 0
    }
    /// [`recv`](Device::recv) that may hand over the frame's own buffer instead of
    /// copying it, as a NIC's receive ring hands the driver a filled buffer and takes an
    /// empty one in its place. On `Some(n)` the frame is `buf[..n]`. A device that swaps
    /// puts its buffer holding the frame in `buf` (then `buf.len() == n`) and keeps the
    /// caller's for later frames; a device that copies writes into `buf` as `recv` does,
    /// so the caller passes a buffer as long as `recv` wants
    /// ([`DeviceCaps::max_rx_frame_len`]) and gets it back at that length. A device does
    /// one or the other, always: a caller that keeps passing the buffer it got back from
    /// the same device needs to size it once.
    ///
    /// Provided: [`recv`](Device::recv) into `buf`.
    fn recv_swap(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        self.recv(now, buf)
    }
    /// How many leading bytes of a frame [`recv_head`](Device::recv_head) copies when it
    /// leaves the rest on the device: 0 (the provided value) for a device that always
    /// copies whole frames. A caller that sees 0 need not call `recv_head`.
    fn rx_head_len(&self) -> usize {
        0
    }
    /// [`recv`](Device::recv) that may copy only the frame's first
    /// [`rx_head_len`](Device::rx_head_len) bytes into `buf` (its headers, for the
    /// stack to check on private memory) and keep the rest on the device until the next
    /// receive call, for [`read_held`](Device::read_held) to copy straight where it
    /// belongs. Returns the frame's length and how many bytes of it are in `buf`
    /// (`(len, len)`: all of it).
    ///
    /// Provided: `recv` into `buf`, whole.
    fn recv_head(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, usize)> {
        self.recv(now, buf).map(|n| (n, n))
    }
    /// Copy bytes `off..off + dst.len()` of the frame the last
    /// [`recv_head`](Device::recv_head) left on the device into `dst`. False (nothing
    /// copied) if there is no such frame or the range is not inside it.
    ///
    /// Provided: false (a device that copies whole frames holds none).
    fn read_held(&mut self, off: usize, dst: &mut [u8]) -> bool {
        let _ = (off, dst);
        false
    }
    /// Keep the frame the last [`recv_head`](Device::recv_head) left on the device past
    /// the next receive call, until [`release_kept`](Device::release_kept): the stack
    /// holds its payload in a receive queue and copies it into the application's buffer
    /// at its read, through [`kept_reader`](Device::kept_reader) (Linux's receive queue
    /// holds an skb's page frags the same way). Returns the frame's id, or `None`: no
    /// such frame, or the device keeps as many as it may (the caller copies it), or
    /// (provided) it keeps none. [`read_held`](Device::read_held) still reads the frame
    /// until the next receive call.
    fn keep_held(&mut self) -> Option<u32> {
        None
    }
    /// Give back a frame [`keep_held`](Device::keep_held) kept: its memory returns to the
    /// link. An id not kept is ignored (counted by a device that counts).
    fn release_kept(&mut self, id: u32) {
        let _ = id;
    }
    /// A reader of the frames [`keep_held`](Device::keep_held) keeps, for the stack's
    /// receive queues: `read(id, off, dst)` copies bytes `off..off + dst.len()` of kept
    /// frame `id` into `dst`, false (nothing copied) when the range is outside the
    /// frame's memory. `None` (provided): the device keeps no frames.
    fn kept_reader(&self) -> Option<KeptReader> {
        None
    }
    /// Take a transmit slot for the caller to hold as its own memory: it writes a
    /// frame's bytes there ahead of sending ([`tx_held_writer`](Device::tx_held_writer)),
    /// sends it ([`tx_hold_send`](Device::tx_hold_send)), possibly again, reads it back
    /// ([`tx_held_reader`](Device::tx_held_reader)), and gives it back with
    /// [`tx_hold_release`](Device::tx_hold_release). Meant for a TCP send buffer whose
    /// storage is the link's slots: the application's bytes written once, into the slot,
    /// at `send()`, the slot kept as the retransmission copy until they are acknowledged
    /// (Linux's `MSG_ZEROCOPY` keeps the user's pages the same way, until the
    /// acknowledgement; here the memory is the link's own). Returns the slot's id, or
    /// `None` (provided: the device has no such memory) when none is free.
    fn tx_hold(&mut self) -> Option<u32> {
        None
    }
    /// Send the first `len` bytes of held slot `id` as a frame (written there before
    /// through the [`tx_held_writer`](Device::tx_held_writer)); the slot stays held.
    /// `more` and the result are [`send_more`](Device::send_more)'s. False (nothing sent,
    /// counted by a device that counts) if the slot is not held, `len` is more than a
    /// frame, or the slot's last frame is still with the peer (sent again once the peer
    /// gave it back: a retransmission from the same memory). Provided: false.
    fn tx_hold_send(&mut self, now: Instant, id: u32, len: usize, more: bool) -> bool {
        let _ = (now, id, len, more);
        false
    }
    /// Give back held slot `id`: it becomes free once the peer has also given back the
    /// last frame sent from it (both, in either order: a peer may drop a frame and give
    /// its slot back before the bytes are acknowledged). An id not held is ignored
    /// (counted by a device that counts).
    fn tx_hold_release(&mut self, id: u32) {
        let _ = id;
    }
    /// A writer into held slots (see [`tx_hold`](Device::tx_hold)), for the stack to fill
    /// them while it does not have the device at hand. `None` (provided): no such slots.
    fn tx_held_writer(&self) -> Option<HeldWriter> {
        None
    }
    /// A reader of held slots (as [`kept_reader`](Device::kept_reader) reads kept ones):
    /// a retransmission's bytes read back. `None` (provided): no such slots.
    fn tx_held_reader(&self) -> Option<KeptReader> {
        None
    }
    /// Whether [`send_with`](Device::send_with) has the frame written straight into the
    /// device's own transmit memory (a slot of the shm link's ring): a caller that builds
    /// frames there saves the copy from its buffer. False (the provided value): `send_with`
    /// only writes into a buffer and copies it as [`send`](Device::send) does, so a caller
    /// gains nothing from it and sends whole frames.
    fn tx_lends(&self) -> bool {
        false
    }
    /// Transmit one frame of `len` bytes that `fill` writes in place, front to back,
    /// through a bounds-checked [`FrameWriter`] over the device's transmit memory (a lent
    /// slot; Linux's scatter-gather transmit, where the driver takes the headers and the
    /// payload's pages of an skb from where they are instead of a linear copy). The frame
    /// is sent only if `fill` returns true having written all `len` bytes; otherwise
    /// nothing is sent, the room goes back to the device, and false is returned (a slot
    /// lent but not filled is never published). `more` is [`send_more`](Device::send_more)'s
    /// hint, and the result and the drops counted are `send_more`'s: false if the device
    /// had no room, the frame was too big, or it was not filled.
    ///
    /// Provided: `fill` writes into a buffer of `len` bytes and `send_more` copies it
    /// (today's copy, for every device that does not lend).
    fn send_with(
        &mut self,
        now: Instant,
        len: usize,
        more: bool,
        fill: &mut dyn FnMut(&mut dyn FrameWriter) -> bool,
    ) -> bool {
        let mut buf = Vec::with_capacity(len);
        let filled = fill(&mut VecWriter { buf: &mut buf, len }) && buf.len() == len;
        if filled {
            return self.send_more(now, &buf, more);
        }
        if !more {
            // Frames sent before with `more` must still leave.
            self.send_batch(now, &[]);
        }
        false
    }
    /// How many frames the device would take now without dropping one for lack of room,
    /// if it knows (a driver's transmit queue being stopped, `netif_tx_queue_stopped`);
    /// `None`: it does not, and frames it cannot take are dropped and counted. A caller
    /// that gets `Some(0)` holds its frames back (Linux's qdisc holds them while the
    /// driver's queue is stopped) and may sleep: a device that says 0 wakes a sleeper when
    /// room comes back.
    ///
    /// Provided: `None`.
    fn tx_space(&mut self) -> Option<usize> {
        None
    }
    /// The earliest time at which `recv` may next return a frame (`None`: nothing in
    /// flight). Lets a virtual clock jump. A time at or before `now` means "now".
    fn poll_at(&self) -> Option<Instant>;
    /// Whether the link vouched for the transport (TCP, UDP) checksum of the frame
    /// [`recv`](Device::recv) last returned, so that the stack need not verify it
    /// (`ustack_stack::Stack::receive_with`): the kernel verified it (virtio-net
    /// `DATA_VALID`, Linux's `CHECKSUM_UNNECESSARY`) or made the packet itself and left
    /// the checksum to the device (`NEEDS_CSUM`, `CHECKSUM_PARTIAL`: it crossed no wire;
    /// Linux's `skb_csum_unnecessary` trusts both). A wrapper that may change a frame's
    /// bytes (a fault injector) must not forward it.
    ///
    /// Provided: false.
    fn rx_csum_unnecessary(&self) -> bool {
        false
    }
    /// The caller passes [`rx_csum_unnecessary`](Device::rx_csum_unnecessary) on to the
    /// stack with every frame, so the device may leave a checksum it vouches for
    /// unfinished (a TUN queue with offloads then skips completing the kernel's partial
    /// checksums, a pass over each super-segment; the frame's checksum field keeps the
    /// pseudo-header sum, as in a capture on Linux with offloads). A caller that does not
    /// say so gets every frame with its checksum complete. A wrapper that forwards it must
    /// forward `rx_csum_unnecessary` too.
    ///
    /// Provided: nothing (the device always completes its checksums).
    fn trust_rx_csum(&mut self) {}
    /// Whether a frame a socket call queues alone may be handed to this device at once,
    /// from inside the call (the runtime's qdisc bypass, `Shard::transmit_lone`): a device
    /// whose send does not block and publishes the frame at once (the sim link, a shm
    /// port, and the kernel links: tun, packet, xdp, a system call each, as the round's
    /// would be for a frame alone). Provided: false: the frame waits for the loop's
    /// round (a wrapper that does not forward it, such as the fault relay, whose lines
    /// hold frames). (The packet link's "stall" with the bypass, which had it turned off
    /// for the kernel links, was the test's socat blocking itself on its own pipe, with
    /// the kernel's TCP too: docs/bench.md, "(2026-11-27 afternoon, odds)".)
    fn tx_direct(&self) -> bool {
        false
    }
}

/// A frame being written in place, front to back ([`Device::send_with`]): every write
/// is checked against the frame's length, and the device sends the frame only if all of
/// it was written, so no byte of an older frame in the same memory goes out.
pub trait FrameWriter {
    /// Append `bytes` after what was written. False, writing nothing, if they would go
    /// past the frame's end.
    fn put(&mut self, bytes: &[u8]) -> bool;
    /// Bytes still to write.
    fn remaining(&self) -> usize;
}

/// [`Device::send_with`]'s provided writer: a private buffer of at most `len` bytes.
struct VecWriter<'a> {
    buf: &'a mut Vec<u8>,
    len: usize,
}

impl FrameWriter for VecWriter<'_> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.remaining() {
            return false;
        }
        self.buf.extend_from_slice(bytes);
        true
    }
    fn remaining(&self) -> usize {
        self.len - self.buf.len()
    }
}

/// [`Device::send_batch`] frame by frame: [`Device::send_more`] on each, with the hint on
/// all but the last; how many were dropped. The trait's provided batch, for wrappers that
/// override `send_batch` and sometimes need it.
pub fn send_each<D: Device + ?Sized>(device: &mut D, now: Instant, frames: &[&[u8]]) -> usize {
    let last = frames.len().saturating_sub(1);
    frames
        .iter()
        .enumerate()
        .filter(|&(i, frame)| !device.send_more(now, frame, i < last))
        .count()
}

/// [`Device::send_swap`] by copying: [`Device::send_batch`] on the buffers' bytes, in
/// chunks of up to 64 frames (one call for a batch the runtime hands over), every buffer
/// left to the caller. The trait's provided method, for wrappers that override
/// `send_swap` and sometimes need it.
pub fn send_swap_by_copy<D: Device + ?Sized>(
    device: &mut D,
    now: Instant,
    frames: &mut [Vec<u8>],
) -> usize {
    const CHUNK: usize = 64;
    if let [frame] = frames {
        return device.send_batch(now, &[frame]);
    }
    let mut dropped = 0;
    for chunk in frames.chunks(CHUNK) {
        let mut slices: [&[u8]; CHUNK] = [&[]; CHUNK];
        for (slot, frame) in slices.iter_mut().zip(chunk) {
            *slot = frame;
        }
        dropped += device.send_batch(now, &slices[..chunk.len()]);
    }
    dropped
}

/// The [`Device`] methods of a pointer to a device, each forwarded to the device (for
/// `&mut D` and `Box<D>`: a method added to the trait is added here once).
macro_rules! forward_device {
    () => {
        fn caps(&self) -> DeviceCaps {
            (**self).caps()
        }
        fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
            (**self).recv(now, buf)
        }
        fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
            (**self).send(now, frame)
        }
        fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
            (**self).send_more(now, frame, more)
        }
        fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
            (**self).send_batch(now, frames)
        }
        fn send_swap(&mut self, now: Instant, frames: &mut [Vec<u8>]) -> usize {
            (**self).send_swap(now, frames)
        }
        fn send_one(&mut self, now: Instant, frame: &mut Vec<u8>) -> bool {
            (**self).send_one(now, frame)
        }
        fn recv_swap(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
            (**self).recv_swap(now, buf)
        }
        fn tx_space(&mut self) -> Option<usize> {
            (**self).tx_space()
        }
        fn tx_lends(&self) -> bool {
            (**self).tx_lends()
        }
        fn send_with(
            &mut self,
            now: Instant,
            len: usize,
            more: bool,
            fill: &mut dyn FnMut(&mut dyn FrameWriter) -> bool,
        ) -> bool {
            (**self).send_with(now, len, more, fill)
        }
        fn rx_head_len(&self) -> usize {
            (**self).rx_head_len()
        }
        fn recv_head(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, usize)> {
            (**self).recv_head(now, buf)
        }
        fn read_held(&mut self, off: usize, dst: &mut [u8]) -> bool {
            (**self).read_held(off, dst)
        }
        fn keep_held(&mut self) -> Option<u32> {
            (**self).keep_held()
        }
        fn release_kept(&mut self, id: u32) {
            (**self).release_kept(id)
        }
        fn kept_reader(&self) -> Option<KeptReader> {
            (**self).kept_reader()
        }
        fn tx_hold(&mut self) -> Option<u32> {
            (**self).tx_hold()
        }
        fn tx_hold_send(&mut self, now: Instant, id: u32, len: usize, more: bool) -> bool {
            (**self).tx_hold_send(now, id, len, more)
        }
        fn tx_hold_release(&mut self, id: u32) {
            (**self).tx_hold_release(id)
        }
        fn tx_held_writer(&self) -> Option<HeldWriter> {
            (**self).tx_held_writer()
        }
        fn tx_held_reader(&self) -> Option<KeptReader> {
            (**self).tx_held_reader()
        }
        fn poll_at(&self) -> Option<Instant> {
            (**self).poll_at()
        }
        fn rx_csum_unnecessary(&self) -> bool {
            (**self).rx_csum_unnecessary()
        }
        fn trust_rx_csum(&mut self) {
            (**self).trust_rx_csum()
        }
        fn tx_direct(&self) -> bool {
            (**self).tx_direct()
        }
    };
}

impl<D: Device + ?Sized> Device for &mut D {
    forward_device!();
}

impl<D: Device + ?Sized> Device for Box<D> {
    forward_device!();
}
