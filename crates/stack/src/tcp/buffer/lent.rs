//! Received payload left in the device's memory: a receive queue that holds a frame the
//! device lent instead of a copy of its bytes, and the stack's way back to the device.
//!
//! Linux's receive queue holds skbs, and an skb's payload may be page frags it never
//! copied (a NIC's receive pages, a loopback sender's pages): `tcp_recvmsg` copies them
//! into the application's buffer (`skb_copy_datagram_iter`) and the pages go back when
//! the skb is freed. Here a shm link's receive slot plays the page frag: the stack checks
//! a segment from a private copy of its headers (`Stack::receive_direct`), and when the
//! receive queue has no copied bytes waiting, the segment's payload stays in the slot, the
//! queue holding the frame's id, where its payload starts and how long it is
//! ([`LentSeg`]). The application's read copies it once, from the slot into its buffer
//! (through the device's reader, [`LentFrames::read`]), and when every byte of it has
//! been read the frame's id is queued for the device ([`LentFrames::release`]; the
//! runtime hands them back each round), which returns the slot to the sender.
//!
//! The stack knows nothing of shm: a device that lends frames gives it a reader
//! (`Stack::set_lent_reader`) and takes released ids back (`Stack::take_released_frames`).
//!
//! Bytes held this way are receive-queue bytes like any other: `RecvBuffer::readable`
//! counts them, so the window advertised stays what the receive buffer has room for.
//! They are not pool memory (`tcp_mem` does not see them): the device bounds them, a shm
//! port by the slots it lets the stack keep (a share of its ring).

use std::collections::VecDeque;
use std::fmt;

/// Reads a frame the device lent: `read(id, off, dst)` copies bytes `off..off + dst.len()`
/// of frame `id` into `dst`; false (nothing copied) when the range is not in its memory.
pub type LentReader = Box<dyn Fn(u32, usize, &mut [u8]) -> bool + Send>;

/// The stack's side of lent frames (in the buffer pool, which every receive buffer's
/// calls already take): the device's reader, and the ids of frames read to their end,
/// waiting to be given back.
#[derive(Default)]
pub struct LentFrames {
    reader: Option<LentReader>,
    released: Vec<u32>,
    /// The receive queues' lent segments, one [`LentQueue`] per receive buffer holding
    /// any (its `lent`, 1-based: the buffer keeps two bytes, not a pointer), and the
    /// numbers free (their queues empty, allocations kept).
    queues: Vec<LentQueue>,
    free: Vec<u16>,
    /// Segments whose payload a receive queue held in a lent frame.
    pub(crate) held: u64,
    /// Lent frames released (read to their end, or dropped with their queue).
    pub(crate) released_total: u64,
    /// Reads the device refused (the bytes given as zeros): none with a device that keeps
    /// the frames it lends.
    pub(crate) read_errors: u64,
}

impl fmt::Debug for LentFrames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LentFrames")
            .field("reader", &self.reader.is_some())
            .field("released", &self.released)
            .field("queues", &(self.queues.len() - self.free.len()))
            .field("held", &self.held)
            .field("released_total", &self.released_total)
            .field("read_errors", &self.read_errors)
            .finish()
    }
}

impl LentFrames {
    /// Whether a device lends frames (a reader is set).
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.reader.is_some()
    }

    pub(crate) fn set_reader(&mut self, reader: LentReader) {
        self.reader = Some(reader);
    }

    /// Copies bytes `off..off + dst.len()` of lent frame `id` into `dst`. A read the
    /// device refuses leaves zeros and is counted (it cannot happen for a range the stack
    /// took from the frame's own length, on a device that keeps what it lent).
    pub(crate) fn read(&mut self, id: u32, off: usize, dst: &mut [u8]) {
        let ok = self.reader.as_ref().is_some_and(|r| r(id, off, dst));
        if !ok {
            dst.fill(0);
            self.read_errors += 1;
        }
    }

    /// [`read`](Self::read) without counting (a peek): false when the device refused.
    pub(crate) fn read_only(&self, id: u32, off: usize, dst: &mut [u8]) -> bool {
        self.reader.as_ref().is_some_and(|r| r(id, off, dst))
    }

    /// Frame `id` is no longer held: queued for the device.
    pub(crate) fn release(&mut self, id: u32) {
        self.released.push(id);
        self.released_total += 1;
    }

    /// A queue for a receive buffer's lent segments: its number (1-based), or `None` when
    /// all 65,535 are taken (the segment is copied).
    pub(super) fn new_queue(&mut self) -> Option<u16> {
        if let Some(q) = self.free.pop() {
            return Some(q);
        }
        let q = u16::try_from(self.queues.len() + 1).ok()?;
        self.queues.push(LentQueue::default());
        Some(q)
    }

    /// Queue `q` (1-based, from [`new_queue`](Self::new_queue)).
    pub(super) fn queue(&mut self, q: u16) -> &mut LentQueue {
        &mut self.queues[usize::from(q) - 1]
    }

    /// The bytes queue `q` holds.
    pub(super) fn bytes(&self, q: u16) -> u32 {
        self.queues[usize::from(q) - 1].bytes
    }

    /// The segments of queue `q`, in order.
    pub(super) fn segs(&self, q: u16) -> impl Iterator<Item = &LentSeg> {
        self.queues[usize::from(q) - 1].segs.iter()
    }

    /// Queue `q` is empty and no buffer refers to it.
    pub(super) fn free_queue(&mut self, q: u16) {
        debug_assert!(self.queue(q).segs.is_empty());
        self.queue(q).bytes = 0;
        self.free.push(q);
    }

    /// Releases every frame of queue `q` and frees it (its connection's receive queue
    /// is dropped).
    pub(super) fn drop_queue(&mut self, q: u16) {
        let i = usize::from(q) - 1;
        while let Some(seg) = self.queues[i].segs.pop_front() {
            self.release(seg.id);
        }
        self.free_queue(q);
    }

    /// Whether released ids wait for the device.
    #[inline]
    pub(crate) fn has_released(&self) -> bool {
        !self.released.is_empty()
    }

    /// Hands each released id to `f`, oldest first.
    pub(crate) fn take_released(&mut self, f: &mut impl FnMut(u32)) {
        for id in self.released.drain(..) {
            f(id);
        }
    }
}

/// The payload of one segment left in a lent frame: `len` bytes from `from` in frame `id`
/// (what the reader has not taken yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LentSeg {
    pub(super) id: u32,
    pub(super) from: u32,
    pub(super) len: u32,
}

/// The lent segments at the front of a receive queue, in order, and their bytes.
#[derive(Debug, Default)]
pub(super) struct LentQueue {
    pub(super) segs: VecDeque<LentSeg>,
    pub(super) bytes: u32,
}
