//! The send buffer: what the application wrote and the peer has not acknowledged.
//!
//! A FIFO chain of chunks: bytes start at `head_off` in the head chunk and are packed
//! through the chain. `write` appends, `peek(offset)` copies from `offset = seq - snd_una`
//! for (re)transmission, `consume` drops acknowledged bytes. A one-entry cursor (the last
//! chunk `peek` touched) makes the usual pattern of peeking at `snd_nxt - snd_una`, which
//! moves forward by one segment at a time, O(1) per call instead of a walk from the head.

use core::cell::Cell;

use super::pool::{BufferPool, CHUNK, NONE};

/// The largest send buffer, keeping `head_off + len` within `u32`.
const MAX_SEND: usize = (u32::MAX as usize) - CHUNK;

/// Bytes written by the application and not yet acknowledged: `snd_una` is the head.
///
/// 24 bytes inline; no chunk and no heap when empty. Not `Copy`/`Clone` (a copy would own
/// the same chunks twice). Call [`SendBuffer::clear`] before dropping a non-empty buffer.
#[derive(Debug)]
pub struct SendBuffer {
    /// First chunk (`NONE` iff `len == 0`).
    head: u32,
    /// Last chunk.
    tail: u32,
    /// Offset of the first byte in `head` (`< CHUNK`).
    pub(super) head_off: u32,
    /// Bytes held.
    len: u32,
    /// Peek cursor: a chunk of the chain (`NONE` = unset) ...
    cursor: Cell<u32>,
    /// ... and its ordinal in the chain (0 = `head`).
    cursor_ord: Cell<u32>,
}

impl Default for SendBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBuffer {
    /// An empty buffer (holds nothing).
    pub const fn new() -> Self {
        SendBuffer {
            head: NONE,
            tail: NONE,
            head_off: 0,
            len: 0,
            cursor: Cell::new(NONE),
            cursor_ord: Cell::new(0),
        }
    }

    /// Bytes held (written and not yet consumed).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when nothing is held (and so no chunk).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pool memory this buffer holds: its chunks * [`CHUNK`] (Linux `sk_wmem_queued` in spirit).
    pub fn mem_bytes(&self) -> usize {
        (self.head_off as usize + self.len as usize).div_ceil(CHUNK)
            * CHUNK
            * usize::from(self.len > 0)
    }

    /// Bytes the tail chunk can still take without a new chunk.
    pub fn tail_room(&self) -> usize {
        if self.len == 0 {
            0
        } else {
            (CHUNK - (self.head_off as usize + self.len as usize) % CHUNK) % CHUNK
        }
    }

    /// Chunks that appending `n` bytes would take from the pool (the tail chunk's free
    /// room first).
    pub fn chunks_for(&self, n: usize) -> usize {
        n.saturating_sub(self.tail_room()).div_ceil(CHUNK)
    }

    /// Append up to `limit - len` bytes of `data` (limit = the socket's sndbuf); returns bytes
    /// taken (0 when full or the pool is exhausted: the caller reports EAGAIN / counts).
    /// When the pool runs out part way, what fit is kept and its length returned.
    #[inline]
    pub fn write(&mut self, pool: &mut BufferPool, data: &[u8], limit: usize) -> usize {
        let room = limit.min(MAX_SEND).saturating_sub(self.len as usize);
        let take = data.len().min(room);
        if self.len == 0 && take <= CHUNK && take > 0 {
            // Into an empty buffer, one chunk's worth (a small message): no loop.
            return if self.write_first(pool, &data[..take]) {
                take
            } else {
                0
            };
        }
        let mut done = 0;
        while done < take {
            let end = self.head_off as usize + self.len as usize;
            let off = end % CHUNK;
            let c = if self.len > 0 && off != 0 {
                self.tail
            } else {
                let Some(c) = pool.alloc() else { break };
                if self.len == 0 {
                    self.head = c;
                    self.head_off = 0;
                } else {
                    pool.set_next(self.tail, c);
                }
                self.tail = c;
                c
            };
            let k = (CHUNK - off).min(take - done);
            pool.chunk_mut(c)[off..off + k].copy_from_slice(&data[done..done + k]);
            done += k;
            self.len += k as u32;
        }
        done
    }

    /// Append `data` (1 to [`CHUNK`] bytes) to this empty buffer: one chunk from the
    /// pool, the bytes copied into it once ([`write`](Self::write)'s first case, for a
    /// write that leaves at once, `Stack::tcp_send_one`). False (nothing taken) if the
    /// buffer is not empty, `data` does not fit a chunk, or the pool has none.
    #[inline(always)]
    pub fn write_first(&mut self, pool: &mut BufferPool, data: &[u8]) -> bool {
        let n = data.len();
        if self.len != 0 || n == 0 || n > CHUNK {
            return false;
        }
        let Some(c) = pool.alloc() else { return false };
        pool.chunk_mut(c)[..n].copy_from_slice(data);
        (self.head, self.tail, self.head_off, self.len) = (c, c, 0, n as u32);
        true
    }

    /// Copy `out.len()` bytes starting `offset` bytes after the head (offset = seq - snd_una)
    /// into `out`. Returns the bytes copied: fewer than `out.len()` (the rest of `out`
    /// untouched) when the range runs past the end of the buffer, 0 if `offset >= len`.
    ///
    /// O(1) per call when successive peeks move forward (the cursor remembers the last
    /// chunk); otherwise a walk from the head.
    #[inline]
    pub fn peek(&self, pool: &BufferPool, offset: usize, out: &mut [u8]) -> usize {
        let len = self.len as usize;
        if offset >= len || out.is_empty() {
            return 0;
        }
        let n = out.len().min(len - offset);
        let abs = self.head_off as usize + offset;
        if abs + n <= CHUNK {
            // All in the head chunk (a small message's segment): no walk.
            out[..n].copy_from_slice(&pool.chunk(self.head)[abs..abs + n]);
            self.cursor.set(self.head);
            self.cursor_ord.set(0);
            return n;
        }
        let (mut c, mut ord) = self.chunk_at((abs / CHUNK) as u32, pool);
        let mut off = abs % CHUNK;
        let mut done = 0;
        loop {
            let k = (CHUNK - off).min(n - done);
            out[done..done + k].copy_from_slice(&pool.chunk(c)[off..off + k]);
            done += k;
            if done == n {
                break;
            }
            c = pool.next(c);
            ord += 1;
            off = 0;
        }
        self.cursor.set(c);
        self.cursor_ord.set(ord);
        n
    }

    /// Where `len` bytes (at least one) at `offset` lie when they are all in the head
    /// chunk (a small message's segment): the chunk and the bytes' start in it, for
    /// [`SendBuffer::copy_span`] to copy without this buffer at hand; `None` otherwise.
    #[inline]
    pub fn head_span(&self, offset: usize, len: usize) -> Option<(u32, u32)> {
        let abs = self.head_off as usize + offset;
        (len > 0 && offset + len <= self.len as usize && abs + len <= CHUNK)
            .then_some((self.head, abs as u32))
    }

    /// Copy `out.len()` bytes of a [`SendBuffer::head_span`] into `out`: as
    /// [`peek`](Self::peek) would, while nothing was consumed since the span was taken
    /// (the chunk is still the buffer's). The peek cursor is not moved: it stays valid
    /// (see [`SendBuffer::consume`]), only a hint for the next walk.
    #[inline]
    pub fn copy_span(pool: &BufferPool, (chunk, at): (u32, u32), out: &mut [u8]) {
        let at = at as usize;
        out.copy_from_slice(&pool.chunk(chunk)[at..at + out.len()]);
    }

    /// Drop `n` acknowledged bytes from the head (all of them if `n >= len`), returning
    /// freed chunks to the pool. A drained buffer holds no chunk.
    #[inline]
    pub fn consume(&mut self, pool: &mut BufferPool, n: usize) {
        if n >= self.len as usize {
            self.clear(pool);
            return;
        }
        let abs = self.head_off as usize + n;
        let freed = (abs / CHUNK) as u32;
        for _ in 0..freed {
            let c = self.head;
            self.head = pool.next(c);
            pool.free(c);
        }
        self.head_off = (abs % CHUNK) as u32;
        self.len -= n as u32;
        let cur = self.cursor_ord.get();
        if cur >= freed {
            self.cursor_ord.set(cur - freed);
        } else {
            self.cursor.set(NONE);
        }
    }

    /// Drop everything, returning every chunk to the pool.
    pub fn clear(&mut self, pool: &mut BufferPool) {
        let mut c = self.head;
        while c != NONE {
            let next = pool.next(c);
            pool.free(c);
            c = next;
        }
        *self = SendBuffer::new();
    }

    /// Bytes `offset..offset + n` (offset = seq - snd_una) handed to `put` a chunk's
    /// piece at a time, in order, instead of copied into one slice ([`peek`](Self::peek)
    /// for a device that writes them into its own memory, `Stack::write_tx_payload`).
    /// False if the range is not all in the buffer (nothing handed over) or `put`
    /// refused a piece (then the pieces before it were handed over). Moves the cursor as
    /// `peek` does.
    pub fn peek_with(
        &self,
        pool: &BufferPool,
        offset: usize,
        n: usize,
        mut put: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        if offset
            .checked_add(n)
            .is_none_or(|end| end > self.len as usize)
        {
            return false;
        }
        if n == 0 {
            return true;
        }
        let abs = self.head_off as usize + offset;
        let (mut c, mut ord) = self.chunk_at((abs / CHUNK) as u32, pool);
        let (mut off, mut done) = (abs % CHUNK, 0);
        while done < n {
            if off == CHUNK {
                c = pool.next(c);
                ord += 1;
                off = 0;
            }
            let k = (CHUNK - off).min(n - done);
            if !put(&pool.chunk(c)[off..off + k]) {
                return false;
            }
            done += k;
            off += k;
        }
        self.cursor.set(c);
        self.cursor_ord.set(ord);
        true
    }

    /// Chunk number `want` of the chain and its ordinal, walked from the cursor when it is
    /// not past `want`, else from the head.
    #[inline(always)]
    fn chunk_at(&self, want: u32, pool: &BufferPool) -> (u32, u32) {
        let (mut c, mut ord) = match self.cursor.get() {
            cur if cur != NONE && self.cursor_ord.get() <= want => (cur, self.cursor_ord.get()),
            _ => (self.head, 0),
        };
        while ord < want {
            c = pool.next(c);
            ord += 1;
        }
        (c, ord)
    }
}
