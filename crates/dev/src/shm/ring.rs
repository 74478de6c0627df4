//! The data path of one queue pair: the sender's slots and descriptor ring, the
//! receiver's completions, and the [`Device`] impl over them.

use core::fmt;
use core::sync::atomic::Ordering;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use ustack_obs::time::Instant;

use super::layout::{DESC_LEN, INLINE_MAX, INLINE_OFF, desc_entry, desc_fields, desc_seq};
use super::link::Shared;
use super::{ShmFault, ShmLayout, ShmSide, ShmStats};
use crate::sys::mapping::Mapping;
use crate::{Device, DeviceCaps, FrameWriter};

/// One of our transmit slots, lent to a [`Device::send_with`] caller: appends go into the
/// region through [`Mapping::write`] (no reference into the shared bytes is ever made:
/// the peer may write them at any moment, which can only garble what it receives), each
/// checked against the frame's length, which [`ShmPort::take_slot`] checked against the
/// slot's size.
struct SlotWriter<'a> {
    map: &'a Mapping,
    /// The slot's offset in the region.
    off: usize,
    /// The frame's length.
    len: usize,
    /// Bytes written.
    at: usize,
}

impl FrameWriter for SlotWriter<'_> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.len - self.at {
            return false;
        }
        if !self.map.write(self.off + self.at, bytes) {
            return false;
        }
        self.at += bytes.len();
        true
    }
    fn remaining(&self) -> usize {
        self.len - self.at
    }
}

/// A receiver publishes returned slots at least this often (or every half ring, if that is
/// less), whenever it catches up with the sender, and at the end of each batch.
pub const PUBLISH_EVERY: u32 = 32;
/// A sender looks for returned slots at least this often (and whenever it has none).
const RECLAIM_EVERY: u32 = 32;
/// [`Device::tx_space`] looks for returned slots whenever this few or fewer are free.
const RECLAIM_LOW: usize = 8;
/// Bytes of a frame [`Device::recv_head`] copies when it leaves the rest in the slot:
/// room for Ethernet, IPv4 or IPv6 and TCP headers with options (14 + 60 + 60 = 134), in
/// three cache lines.
pub const RX_HEAD: usize = 192;
/// Lines of the next transmit slot written while idle ([`ShmPort::own_next_slot`]): the
/// headers of a frame.
const OWN_LINES: usize = 3;
/// Frames up to this long are copied whole by [`Device::recv_head`]: for them a second
/// copy costs less than reading the slot twice.
const RX_SPLIT_MIN: usize = 1024;

/// The most slots a receiver keeps for its stack by default ([`ShmPort::set_rx_keep`]):
/// three quarters of the ring. The rest always turn over, so that frames of other
/// connections on the link, ACKs and FINs keep flowing while one reader leaves its data
/// unread (what it does not read then waits in the stack's receive queue, copied, up to
/// its window, as on any other link).
const fn default_keep_max(ring: u32) -> u32 {
    ring - if ring / 4 > 1 { ring / 4 } else { 1 }
}

/// Transmit state of one direction (this side sends), private to the port.
#[derive(Debug)]
pub(super) struct Tx {
    head_off: usize,
    ring_off: usize,
    frames_off: usize,
    pub(super) comp_head_off: usize,
    comp_ring_off: usize,
    /// The receiver's flag: ring its doorbell after posting if set (and the word it
    /// sleeps on in `FUTEX_WAIT`).
    pub(super) peer_need_wakeup_off: usize,
    /// Our flag: set while sleeping for free slots.
    pub(super) need_wakeup_off: usize,
    head: u32,
    /// `head` as last published: frames from here to `head` are placed, not yet visible.
    published: u32,
    /// The descriptors placed and not yet published, by ring position: written to the
    /// ring at publication, so a run of [`Device::send_more`] stays invisible until it
    /// ends (the receiver takes an entry as soon as its sequence is due).
    pending: Vec<u64>,
    pub(super) comp_tail: u32,
    /// Free slots, most recently returned last.
    pub(super) free: Vec<u32>,
    /// Slots posted and not yet returned.
    pub(super) in_flight: Vec<bool>,
    /// Slots the caller holds ([`Device::tx_hold`], `shm/hold.rs`): a returned one goes
    /// back on the free list only once the caller released it too.
    pub(super) held: Vec<bool>,
    since_reclaim: u32,
    /// The free slot whose first lines [`ShmPort::own_next_slot`] last wrote.
    owned: Option<u32>,
    /// The last frame sent was written into its slot (longer than [`INLINE_MAX`]).
    last_in_slot: bool,
    /// A send was refused for lack of slots since slots were last reclaimed.
    pub(super) starved: bool,
    pub(super) stopped: bool,
}

/// Receive state of one direction (the peer sends), private to the port.
#[derive(Debug)]
pub(super) struct Rx {
    tail_off: usize,
    ring_off: usize,
    frames_off: usize,
    comp_head_off: usize,
    comp_ring_off: usize,
    /// Our flag: set while sleeping for frames.
    pub(super) need_wakeup_off: usize,
    /// The sender's flag: ring its doorbell after returning slots if set.
    peer_need_wakeup_off: usize,
    tail: u32,
    comp_head: u32,
    unpublished: u32,
    stopped: bool,
    /// The frame [`ShmPort::take_head`] left in its slot: (slot, length). Its slot is
    /// returned at the next receive call or before sleeping, unless it is kept.
    held: Option<(u32, u32)>,
    /// Slots kept for the stack ([`Device::keep_held`]), returned by
    /// [`Device::release_kept`].
    kept: Vec<bool>,
    /// How many of `kept` are set.
    kept_now: u32,
    /// The most slots kept at once ([`ShmPort::set_rx_keep`]).
    keep_max: u32,
}

/// One queue pair of one side of a shm link: a [`Device`] with batch methods and a
/// doorbell to sleep on. `Send`, so each shard's thread owns its port.
pub struct ShmPort {
    pub(super) shared: Arc<Shared>,
    side: ShmSide,
    queue: usize,
    pub(super) max_frame: usize,
    pub(super) slot_size: usize,
    pub(super) ring_size: u32,
    mask: u32,
    publish_every: u32,
    /// Bytes [`Device::recv_head`] copies of a frame it leaves in its slot; 0: off.
    rx_head: usize,
    /// [`Device::tx_lends`] ([`ShmPort::set_tx_lend`]).
    tx_lend: bool,
    pub(super) bell: usize,
    pub(super) peer_bell: usize,
    pub(super) tx: Tx,
    pub(super) rx: Rx,
    pub(super) stats: ShmStats,
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
pub(super) enum Placed {
    Yes,
    TooBig,
    NoSlot,
}

impl ShmPort {
    pub(super) fn all(shared: &Arc<Shared>, side: ShmSide) -> Vec<ShmPort> {
        (0..shared.layout.queue_pairs())
            .map(|q| ShmPort::new(shared.clone(), side, q))
            .collect()
    }

    fn new(shared: Arc<Shared>, side: ShmSide, queue: usize) -> ShmPort {
        let l = shared.layout;
        let (me, peer) = (side, side.peer());
        let ring = l.ring_size() as u32;
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
            pending: vec![0; l.ring_size()],
            comp_tail: 0,
            free: (0..ring).rev().collect(),
            in_flight: vec![false; l.ring_size()],
            held: vec![false; l.ring_size()],
            since_reclaim: 0,
            owned: None,
            last_in_slot: false,
            starved: false,
            stopped: false,
        };
        let rx = Rx {
            tail_off: l.desc_tail_offset(queue, peer),
            ring_off: l.desc_ring_offset(queue, peer),
            frames_off: l.frames_offset(queue, peer),
            comp_head_off: l.comp_head_offset(queue, peer),
            comp_ring_off: l.comp_ring_offset(queue, peer),
            need_wakeup_off: l.rx_need_wakeup_offset(queue, peer),
            peer_need_wakeup_off: l.tx_need_wakeup_offset(queue, peer),
            tail: 0,
            comp_head: 0,
            unpublished: 0,
            stopped: false,
            held: None,
            kept: vec![false; l.ring_size()],
            kept_now: 0,
            keep_max: default_keep_max(ring),
        };
        ShmPort {
            max_frame: shared.caps.max_frame_len(),
            slot_size: l.slot_size(),
            ring_size: ring,
            mask: ring - 1,
            publish_every: PUBLISH_EVERY.min(ring / 2),
            rx_head: RX_HEAD,
            tx_lend: true,
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

    /// The `u32` control word at `off`, loaded with Acquire (a peer's published index).
    pub(super) fn load_acquire(&self, off: usize) -> u32 {
        self.shared.map.u32_at(off).load(Ordering::Acquire)
    }

    // ---- transmit ----------------------------------------------------------------

    /// Puts returned slots back on the free list.
    pub(super) fn reclaim(&mut self) {
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
                    if !self.tx.held[slot as usize] {
                        self.tx.free.push(slot);
                    }
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
    pub(super) fn place(&mut self, frame: &[u8]) -> Placed {
        let slot = match self.take_slot(frame.len()) {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        // In bounds by construction (slot < ring_size, len <= max_frame <= slot_size).
        self.shared
            .map
            .write(self.tx_frame_off(slot, frame.len()), frame);
        self.post(slot, frame.len());
        Placed::Yes
    }

    /// A free slot for a frame of `len` bytes, taken off the free list (reclaiming
    /// returned ones first when due), or why not, counted.
    #[inline]
    pub(super) fn take_slot(&mut self, len: usize) -> Result<u32, Placed> {
        if len > self.max_frame {
            self.stats.tx_too_big += 1;
            return Err(Placed::TooBig);
        }
        if self.tx.free.is_empty() || self.tx.since_reclaim >= RECLAIM_EVERY {
            self.reclaim();
        }
        if self.tx.stopped {
            self.stats.tx_stopped += 1;
            return Err(Placed::NoSlot);
        }
        let Some(slot) = self.tx.free.pop() else {
            self.tx.starved = true;
            self.stats.tx_full += 1;
            return Err(Placed::NoSlot);
        };
        self.tx.since_reclaim += 1;
        self.tx.owned = None;
        self.tx.last_in_slot = len > INLINE_MAX;
        Ok(slot)
    }

    /// While idle (a receive found nothing): writes a byte in each of the first
    /// [`OWN_LINES`] lines of the slot the next send will take (if the last frame went
    /// into its slot) and in the frame lines of its ring entry, once per slot, so that
    /// those lines, which the peer read last, are this core's again before a frame is
    /// written there. A send to a peer that read the slot last must otherwise wait for the
    /// peer's copies of the lines to be invalidated before its descriptor can become
    /// visible (x86 stores become visible in order): one more line transfer on the
    /// frame's way.
    fn own_next_slot(&mut self) {
        let Some(&slot) = self.tx.free.last() else {
            return;
        };
        if self.tx.owned == Some(slot) {
            return;
        }
        self.tx.owned = Some(slot);
        // The slot only while frames go into slots: a link of small frames never writes
        // its slots (the memory stays untouched).
        if self.tx.last_in_slot {
            let off = self.tx_slot_off(slot);
            for line in 0..OWN_LINES.min(self.slot_size / 64) {
                self.shared.map.write(off + 64 * line, &[0]);
            }
        }
        // The next descriptor's last three lines, where a small frame goes (its
        // first line is the one the peer polls: taking it now would only take it back).
        // The peer is done with the entry: with a slot free, fewer than a ring of
        // descriptors are unread or unreturned, and it returns a small frame's slot
        // after copying the frame out.
        let entry = self.tx.ring_off + DESC_LEN * (self.tx.head & self.mask) as usize;
        for line in 1..DESC_LEN / 64 {
            self.shared.map.write(entry + 64 * line, &[0]);
        }
    }

    /// The region offset of our transmit slot `slot`.
    pub(super) fn tx_slot_off(&self, slot: u32) -> usize {
        self.tx.frames_off + slot as usize * self.slot_size
    }

    /// Where the next frame, `len` bytes in `slot`, is written: after the descriptor's
    /// word's line in the ring entry it will be posted at if it is at most [`INLINE_MAX`] bytes,
    /// else in the slot.
    #[inline]
    pub(super) fn tx_frame_off(&self, slot: u32, len: usize) -> usize {
        if len <= INLINE_MAX {
            self.tx.ring_off + DESC_LEN * (self.tx.head & self.mask) as usize + INLINE_OFF
        } else {
            self.tx_slot_off(slot)
        }
    }

    /// Writes the descriptor of the frame of `len` bytes in `slot` (taken by
    /// [`take_slot`](Self::take_slot) and filled), without publishing it.
    #[inline]
    pub(super) fn post(&mut self, slot: u32, len: usize) {
        // `len <= max_frame <= slot_size <= 2^20` and `slot < ring_size <= 2^15`: the
        // descriptor's fields hold them.
        self.tx.pending[(self.tx.head & self.mask) as usize] =
            desc_entry(self.tx.head, slot, len as u32);
        self.tx.in_flight[slot as usize] = true;
        self.tx.head = self.tx.head.wrapping_add(1);
        self.stats.tx_frames += 1;
        self.stats.tx_bytes += len as u64;
    }

    /// [`Device::send_with`]: a free slot lent to `fill` as a [`SlotWriter`]; posted if
    /// `fill` wrote all `len` bytes, else back on the free list, unposted.
    fn place_with(
        &mut self,
        len: usize,
        fill: &mut dyn FnMut(&mut dyn FrameWriter) -> bool,
    ) -> Placed {
        let slot = match self.take_slot(len) {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        let mut writer = SlotWriter {
            map: &self.shared.map,
            off: self.tx_frame_off(slot, len),
            len,
            at: 0,
        };
        if fill(&mut writer) && writer.at == len {
            self.post(slot, len);
            self.stats.tx_lent += 1;
            return Placed::Yes;
        }
        // Never posted: the slot was ours all along, whatever `fill` wrote into it.
        self.tx.free.push(slot);
        self.stats.tx_unfilled += 1;
        Placed::NoSlot
    }

    /// Whether [`Device::send_with`] writes frames into the slots (the default), or, off,
    /// says the port does not lend ([`Device::tx_lends`] false: its callers send whole
    /// frames, copied in as by [`Device::send`]).
    pub fn set_tx_lend(&mut self, on: bool) {
        self.tx_lend = on;
    }

    /// Publishes placed descriptors, if any, and rings the peer if it sleeps: writes each
    /// into the ring (Release: the frame's bytes before it), in order, then `desc_head`
    /// for tools (the receiver does not read it).
    pub(super) fn publish_tx(&mut self) {
        if self.tx.published == self.tx.head {
            return;
        }
        let m = &self.shared.map;
        while self.tx.published != self.tx.head {
            let pos = (self.tx.published & self.mask) as usize;
            m.u64_at(self.tx.ring_off + DESC_LEN * pos)
                .store(self.tx.pending[pos], Ordering::Release);
            self.tx.published = self.tx.published.wrapping_add(1);
        }
        self.stats.tx_publishes += 1;
        m.u32_at(self.tx.head_off)
            .store(self.tx.head, Ordering::Relaxed);
        self.wake_peer_if_asleep(self.tx.peer_need_wakeup_off);
    }

    // ---- receive -----------------------------------------------------------------

    /// The descriptor at `desc_tail`, loaded with Acquire (the frame's bytes after it).
    #[inline]
    fn tail_desc(&self) -> u64 {
        let at = self.rx.ring_off + DESC_LEN * (self.rx.tail & self.mask) as usize;
        self.shared.map.u64_at(at).load(Ordering::Acquire)
    }

    /// Whether the descriptor at `desc_tail` is a new frame (its sequence is due there);
    /// a sequence that is neither that nor the one of a lap before (or a never-written
    /// zero) stops receiving for good ([`ShmFault::DescSeq`], [`ShmStats::bad_index`]).
    fn desc_due(&mut self, desc: u64) -> bool {
        let (seq, _, _) = desc_fields(desc);
        if seq == desc_seq(self.rx.tail) {
            return true;
        }
        if desc != 0 && seq != desc_seq(self.rx.tail.wrapping_sub(self.ring_size)) {
            self.rx.stopped = true;
            self.stats.bad_index += 1;
            self.fault.get_or_insert(ShmFault::DescSeq {
                seq,
                tail: self.rx.tail,
            });
        }
        false
    }

    /// Whether a frame is waiting at `desc_tail` (loads its descriptor; does not consume).
    fn refresh_rx(&mut self) -> bool {
        if self.rx.stopped {
            return false;
        }
        let desc = self.tail_desc();
        self.desc_due(desc)
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
    pub(super) fn publish_rx(&mut self) {
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
        self.wake_peer_if_asleep(self.rx.peer_need_wakeup_off);
    }

    /// The next frame's descriptor, checked: `(slot, len, the region offset of its
    /// bytes)`; `None` when the ring is dry (returned slots are published then).
    fn next_desc(&mut self) -> Option<(u32, usize, usize)> {
        loop {
            let desc = if self.rx.stopped { 0 } else { self.tail_desc() };
            if self.rx.stopped || !self.desc_due(desc) {
                self.publish_rx();
                self.own_next_slot();
                return None;
            }
            let entry = self.rx.ring_off + DESC_LEN * (self.rx.tail & self.mask) as usize;
            self.rx.tail = self.rx.tail.wrapping_add(1);
            let (_, slot, len) = desc_fields(desc);
            if slot >= self.ring_size {
                self.stats.bad_desc += 1;
                continue;
            }
            if len > self.max_frame {
                self.stats.bad_desc += 1;
                self.complete(slot);
                continue;
            }
            let off = if len <= INLINE_MAX {
                entry + INLINE_OFF
            } else {
                self.rx_slot_off(slot)
            };
            return Some((slot, len, off));
        }
    }

    /// The region offset of slot `slot`'s frame.
    fn rx_slot_off(&self, slot: u32) -> usize {
        self.rx.frames_off + slot as usize * self.slot_size
    }

    /// Hands a read slot back.
    fn done_with(&mut self, slot: u32) {
        self.complete(slot);
        if !self.rx_ready() {
            // Caught up with what the peer had posted: hand the slots back now, so a
            // caller that stops before seeing `None` does not starve the sender.
            self.publish_rx();
        }
    }

    /// Hands back the slot of the frame [`take_head`](Self::take_head) left there, if any
    /// (unless it is kept: [`Device::release_kept`] returns it).
    pub(super) fn release_held(&mut self) {
        if let Some((slot, _)) = self.rx.held.take()
            && !self.rx.kept[slot as usize]
        {
            self.done_with(slot);
        }
    }

    /// The most slots [`Device::keep_held`] keeps at once (by default three quarters of
    /// the ring); 0 keeps none. Cut to the ring's size.
    pub fn set_rx_keep(&mut self, max: usize) {
        self.rx.keep_max = max.min(self.ring_size as usize) as u32;
    }

    /// Slots kept for the stack now ([`Device::keep_held`], not yet released).
    pub fn rx_kept_now(&self) -> usize {
        self.rx.kept_now as usize
    }

    /// Takes the next frame into `buf` (cut to `buf.len()`); `None` when the ring is dry.
    pub(super) fn take(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.release_held();
        let (slot, len, off) = self.next_desc()?;
        Some(self.copy_out(slot, len, off, buf))
    }

    /// Copies the frame of `len` bytes at `off` (in `slot` or its descriptor) into `buf`
    /// (cut to `buf.len()`), hands the slot back and counts it; the bytes copied.
    fn copy_out(&mut self, slot: u32, len: usize, off: usize, buf: &mut [u8]) -> usize {
        let n = len.min(buf.len());
        self.shared.map.read(off, &mut buf[..n]);
        self.done_with(slot);
        if n < len {
            self.stats.rx_truncated += 1;
        }
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += n as u64;
        n
    }

    /// [`Device::recv_head`]: the next frame, its first [`RX_HEAD`] bytes copied into
    /// `buf` and the rest left in its slot (held until the next receive call) when it is
    /// longer than [`RX_SPLIT_MIN`] and fits `buf`; else copied whole as by
    /// [`take`](Self::take). Returns the frame's length and the bytes copied.
    fn take_head(&mut self, buf: &mut [u8]) -> Option<(usize, usize)> {
        self.release_held();
        let (slot, len, off) = self.next_desc()?;
        let head = self.rx_head;
        if head == 0 || len <= RX_SPLIT_MIN.max(head) || len > buf.len() {
            let n = self.copy_out(slot, len, off, buf);
            return Some((n, n));
        }
        self.shared
            .map
            .read(self.rx_slot_off(slot), &mut buf[..head]);
        self.rx.held = Some((slot, len as u32));
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += len as u64;
        self.stats.rx_held += 1;
        Some((len, head))
    }

    /// How many bytes of a long frame [`Device::recv_head`] copies, leaving the rest in
    /// its slot: [`RX_HEAD`] by default; 0 turns it off (frames are copied whole, as by
    /// [`Device::recv`]). Values under [`RX_HEAD`] are raised to it: the headers must fit.
    pub fn set_rx_head(&mut self, head: usize) {
        self.rx_head = if head == 0 { 0 } else { head.max(RX_HEAD) };
    }

    /// Whether a frame is waiting (loads the descriptor at `desc_tail`; does not consume).
    pub fn rx_ready(&mut self) -> bool {
        self.refresh_rx()
    }
}

impl Device for ShmPort {
    fn caps(&self) -> DeviceCaps {
        self.shared.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.take(buf)
    }

    /// [`RX_HEAD`] (unless [`ShmPort::set_rx_head`] changed it).
    fn rx_head_len(&self) -> usize {
        self.rx_head
    }

    /// A frame longer than 1,024 bytes (that fits `buf`) has its first
    /// [`rx_head_len`](Device::rx_head_len) bytes copied and the rest left in its slot
    /// for [`read_held`](Device::read_held), the slot returned to the peer at the next
    /// receive call or before sleeping; counted in [`ShmStats::rx_held`]. Shorter frames
    /// are copied whole.
    fn recv_head(&mut self, _now: Instant, buf: &mut [u8]) -> Option<(usize, usize)> {
        self.take_head(buf)
    }

    /// Copies from the held slot, with the same single volatile read of every shared byte
    /// as a receive (the bytes are a snapshot the peer can no longer change).
    fn read_held(&mut self, off: usize, dst: &mut [u8]) -> bool {
        let Some((slot, len)) = self.rx.held else {
            return false;
        };
        if off
            .checked_add(dst.len())
            .is_none_or(|end| end > len as usize)
        {
            return false;
        }
        self.shared.map.read(self.rx_slot_off(slot) + off, dst)
    }

    /// Keeps the slot of the frame [`recv_head`](Device::recv_head) left there (while
    /// fewer than [`ShmPort::set_rx_keep`]'s slots are kept), counted in
    /// [`ShmStats::rx_kept`]; its id is the slot's number. The sender cannot reuse the slot
    /// until [`release_kept`](Device::release_kept): when every slot it has is kept or in
    /// flight, it stops, as on a full ring, and nothing is lost.
    fn keep_held(&mut self) -> Option<u32> {
        let (slot, _) = self.rx.held?;
        if self.rx.kept_now >= self.rx.keep_max {
            return None;
        }
        self.rx.kept[slot as usize] = true;
        self.rx.kept_now += 1;
        self.stats.rx_kept += 1;
        Some(slot)
    }

    /// Returns a kept slot to the sender (at once if it is not the frame still held for
    /// [`read_held`](Device::read_held); published as any returned slot); counted in
    /// [`ShmStats::rx_kept_released`]. An id not kept is counted in
    /// [`ShmStats::bad_release`] and ignored.
    fn release_kept(&mut self, id: u32) {
        match self.rx.kept.get_mut(id as usize) {
            Some(k) if *k => *k = false,
            _ => {
                self.stats.bad_release += 1;
                return;
            }
        }
        self.rx.kept_now -= 1;
        self.stats.rx_kept_released += 1;
        if self.rx.held.is_some_and(|(slot, _)| slot == id) {
            // Still the frame of the current receive: returned at the next one.
            return;
        }
        self.done_with(id);
    }

    /// Reads kept slots with the same single volatile read of every shared byte as a
    /// receive, bounds checked against the slot. An honest sender does not write a slot
    /// until it is returned; a dishonest one can only change payload bytes the stack
    /// never parses.
    fn kept_reader(&self) -> Option<crate::KeptReader> {
        let shared = self.shared.clone();
        let (base, slot_size, ring) = (self.rx.frames_off, self.slot_size, self.ring_size);
        Some(Box::new(move |id: u32, off: usize, dst: &mut [u8]| {
            id < ring
                && off
                    .checked_add(dst.len())
                    .is_some_and(|end| end <= slot_size)
                && shared.map.read(base + id as usize * slot_size + off, dst)
        }))
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

    /// See `shm/hold.rs`.
    fn tx_hold(&mut self) -> Option<u32> {
        self.hold()
    }
    fn tx_hold_send(&mut self, _now: Instant, id: u32, len: usize, more: bool) -> bool {
        self.hold_send(id, len, more)
    }
    fn tx_hold_release(&mut self, id: u32) {
        self.hold_release(id);
    }
    fn tx_held_writer(&self) -> Option<crate::HeldWriter> {
        Some(self.held_writer())
    }
    fn tx_held_reader(&self) -> Option<crate::KeptReader> {
        Some(self.held_reader())
    }

    /// [`ShmPort::set_tx_lend`]: true unless turned off.
    fn tx_lends(&self) -> bool {
        self.tx_lend
    }

    /// Lends a free slot to `fill` (a [`FrameWriter`] over it), posts the frame if `fill`
    /// wrote all of it (counted in [`ShmStats::tx_lent`]; else the slot goes back unposted,
    /// counted in [`ShmStats::tx_unfilled`]), and publishes as
    /// [`send_more`](Device::send_more) does. No free slot, or too big: counted and
    /// false, as `send_more`.
    fn send_with(
        &mut self,
        _now: Instant,
        len: usize,
        more: bool,
        fill: &mut dyn FnMut(&mut dyn FrameWriter) -> bool,
    ) -> bool {
        let placed = self.place_with(len, fill);
        if !more {
            self.publish_tx();
        }
        placed == Placed::Yes
    }

    /// A send is a copy into a slot and a release store of the ring's index.
    fn tx_direct(&self) -> bool {
        true
    }

    /// The free slots after taking back what the peer returned. With `RECLAIM_LOW` (8) or
    /// fewer left, the port looks for returned slots now and marks itself starved, so
    /// that [`prepare_sleep`](ShmPort::prepare_sleep) asks the peer to ring when it
    /// returns slots: a caller deciding by the answer (the shard topping up the stack's
    /// held reserve only above a spare few) may send nothing until it grows, and then
    /// neither a send nor a frame would come to take them back. A stopped port (the peer
    /// misbehaved) says `None`: its frames are dropped and counted, not held for ever.
    fn tx_space(&mut self) -> Option<usize> {
        if self.tx.stopped {
            return None;
        }
        if self.tx.free.len() <= RECLAIM_LOW || self.tx.since_reclaim >= RECLAIM_EVERY {
            self.reclaim();
        }
        let n = self.tx.free.len();
        if n <= RECLAIM_LOW {
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
        // A stale or garbled sequence is not a frame: the next receive call says which.
        let (seq, _, _) = desc_fields(self.tail_desc());
        (seq == desc_seq(self.rx.tail)).then_some(Instant::ZERO)
    }
}

impl Drop for ShmPort {
    fn drop(&mut self) {
        // Return what we consumed, so a sender that outlives us is not left short.
        self.release_held();
        for slot in 0..self.ring_size {
            if self.rx.kept[slot as usize] {
                self.rx.kept[slot as usize] = false;
                self.complete(slot);
            }
        }
        self.publish_rx();
    }
}
