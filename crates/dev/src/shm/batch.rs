//! Batches: sending until the ring is full and receiving into a [`FrameBatch`], one index
//! publication per batch.

use super::ShmPort;
use super::ring::Placed;

impl ShmPort {
    /// Sends frames until the ring is full: returns how many were taken from `frames`.
    /// Frames too big for the link are taken and dropped (counted in
    /// [`ShmStats::tx_too_big`]); a frame that finds no free slot is not taken, so the
    /// caller keeps it and everything after it (counted once in [`ShmStats::tx_full`]).
    /// One index publication and at most one doorbell for the whole batch.
    ///
    /// Unlike [`Device::send_batch`], which drops a frame that finds no slot (as `send`
    /// does) and goes on with the next, this keeps back-pressure with the caller: for a
    /// sender that can hold frames back, like a benchmark.
    ///
    /// [`ShmStats::tx_too_big`]: super::ShmStats::tx_too_big
    /// [`ShmStats::tx_full`]: super::ShmStats::tx_full
    /// [`Device::send_batch`]: crate::Device::send_batch
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
    ///
    /// [`DeviceCaps::max_frame_len`]: crate::DeviceCaps::max_frame_len
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
