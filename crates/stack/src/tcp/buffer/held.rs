//! Send buffers whose bytes are in a device's transmit slots (issue #13 item 6): the
//! stack's half of `Device::tx_hold`.
//!
//! A device that lets the stack hold its transmit slots (the shm link) gives the stack a
//! writer and a reader over them and keeps it a reserve of held slots
//! (`Stack::set_tx_held`, `Stack::give_held_slot`). A long write (`tcp_sendmsg`, at least
//! `LEND_MIN` bytes) then goes straight into reserve slots, one segment's payload each,
//! after room for exactly the data segment's headers: the application's bytes are copied
//! once on the sending side, and a segment that is exactly one such piece leaves from
//! where it is (the driver writes its headers in front and posts the slot). The send
//! buffer keeps the pieces, in sequence order among its chunk bytes, as its storage for
//! those bytes: a retransmission reads them back through the reader, and a piece's slot
//! is handed back to the device (`Stack::take_released_held`) when its last byte is
//! acknowledged or the connection goes. This is Linux's `tcp_sendmsg` filling an skb's
//! page fragments that the driver then sends in place (`NETIF_F_SG`), the pages freed
//! when `tcp_clean_rtx_queue` drops the acknowledged skb.

use std::collections::VecDeque;
use std::fmt;

use crate::tcp::TcpHandle;

/// Writes `src` into held slot `id` at `off`; false (nothing written) out of its range.
pub type HeldWriter = Box<dyn Fn(u32, usize, &[u8]) -> bool + Send>;
/// Reads held slot `id` at `off` into `dst`; false (nothing read) out of its range.
pub type HeldReader = Box<dyn Fn(u32, usize, &mut [u8]) -> bool + Send>;

/// One piece of a send buffer in a held slot: its bytes are stream positions
/// `pos..pos + len` (counted from the queue's start), at `room..room + len` in `slot`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    pub(super) pos: u64,
    pub(super) slot: u32,
    pub(super) room: u32,
    pub(super) len: u32,
    /// The most the piece may hold (the segment size it was cut for).
    pub(super) cap: u32,
    /// Sent in place once: later sends are copies (the slot may be with the peer).
    pub(super) sent: bool,
}

/// A send buffer's pieces (see [`super::send`]): `base` is the stream position of the
/// buffer's first byte.
#[derive(Debug, Default)]
pub(super) struct HeldQueue {
    pub(super) pieces: VecDeque<Piece>,
    pub(super) base: u64,
    /// The connection whose send buffer has it (`None` while free).
    owner: Option<TcpHandle>,
}

/// The stack's side of held transmit slots, in the buffer pool (which every send buffer
/// call already takes).
#[derive(Default)]
pub struct HeldSlots {
    pub(super) writer: Option<HeldWriter>,
    reader: Option<HeldReader>,
    /// The most a slot holds (a frame: headers and payload).
    pub(crate) slot_len: usize,
    /// Held slots not yet written, for the next writes.
    pub(super) reserve: Vec<u32>,
    /// Slots whose bytes were acknowledged (or whose connection went), for the device.
    pub(super) released: Vec<u32>,
    /// Send buffers' piece queues (1-based numbers in `SendBuffer::held`), and the free ones.
    pub(super) queues: Vec<HeldQueue>,
    pub(super) free: Vec<u32>,
    /// Writers told to wait for a slot (`tcp_sendmsg`), woken when the reserve is topped
    /// up (`Stack::tx_held_given`).
    pub(crate) waiters: Vec<crate::tcp::TcpHandle>,
    /// Pieces written at `send()`.
    pub written: u64,
    /// Segments sent in place from a piece.
    pub sent_in_place: u64,
    /// Segments over pieces that took the copying way (across pieces, part of one, a
    /// resend, or the device refused).
    pub copied: u64,
    /// Reads or writes the device refused (none with a device that keeps its slots).
    pub errors: u64,
}

impl fmt::Debug for HeldSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldSlots")
            .field("on", &self.writer.is_some())
            .field("slot_len", &self.slot_len)
            .field("reserve", &self.reserve)
            .field("released", &self.released)
            .field("queues", &(self.queues.len() - self.free.len()))
            .field("written", &self.written)
            .field("sent_in_place", &self.sent_in_place)
            .field("copied", &self.copied)
            .field("errors", &self.errors)
            .finish()
    }
}

impl HeldSlots {
    pub(crate) fn set(&mut self, writer: HeldWriter, reader: HeldReader, slot_len: usize) {
        (self.writer, self.reader, self.slot_len) = (Some(writer), Some(reader), slot_len);
    }

    /// Whether the device lets send buffers hold its slots.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.slot_len > 0
    }

    /// Whether a write may go into held slots now (a reserve slot is there).
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        !self.reserve.is_empty() && self.writer.is_some()
    }

    /// Writes through the writer (the driver's headers in front of a piece).
    pub(crate) fn write_head(&self, id: u32, src: &[u8]) -> bool {
        self.writer.as_ref().is_some_and(|w| w(id, 0, src))
    }

    pub(super) fn read(&self, id: u32, off: usize, dst: &mut [u8]) -> bool {
        self.reader.as_ref().is_some_and(|r| r(id, off, dst))
    }

    /// A new piece queue: its 1-based number.
    pub(super) fn new_queue(&mut self, owner: TcpHandle) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.queues.push(HeldQueue::default());
                self.queues.len() as u32
            }
        };
        let q = &mut self.queues[i as usize - 1];
        (q.base, q.owner) = (0, Some(owner));
        i
    }

    /// Releases the pieces of every queue in use whose owner no longer has it
    /// (`is_theirs(owner, number)` false: the buffer was cleared, or the connection
    /// went), and frees the queue.
    pub(crate) fn collect(&mut self, mut is_theirs: impl FnMut(TcpHandle, u32) -> bool) {
        for (k, q) in self.queues.iter_mut().enumerate() {
            let i = k as u32 + 1;
            let Some(owner) = q.owner else { continue };
            if !is_theirs(owner, i) {
                self.released.extend(q.pieces.drain(..).map(|p| p.slot));
                q.owner = None;
                self.free.push(i);
            }
        }
    }

    /// Queue `i` is empty: free for another buffer (its allocation kept).
    pub(super) fn free_queue(&mut self, i: u32) {
        let q = &mut self.queues[i as usize - 1];
        q.pieces.clear();
        q.owner = None;
        self.free.push(i);
    }

    /// A slot taken back into the reserve (the shard's top-up).
    pub(crate) fn give(&mut self, id: u32) {
        self.reserve.push(id);
    }

    /// Slots in the reserve.
    pub(crate) fn reserve_len(&self) -> usize {
        self.reserve.len()
    }

    /// Hands the released slots to `f`, oldest first.
    pub(crate) fn take_released(&mut self, f: &mut impl FnMut(u32)) {
        for id in self.released.drain(..) {
            f(id);
        }
    }
}
