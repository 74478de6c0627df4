//! The send buffer: what the application wrote and the peer has not acknowledged.
//!
//! A FIFO chain of chunks: bytes start at `head_off` in the head chunk and are packed
//! through the chain. `write` appends, `peek(offset)` copies from `offset = seq - snd_una`
//! for (re)transmission, `consume` drops acknowledged bytes. A one-entry cursor (the last
//! chunk `peek` touched) makes the usual pattern of peeking at `snd_nxt - snd_una`, which
//! moves forward by one segment at a time, O(1) per call instead of a walk from the head.

use core::cell::Cell;

use super::held::{HeldQueue, Piece};
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

// Pieces in held transmit slots (see [`super::held`]), without a byte more in the TCB:
// while a buffer holds any, `head_off`'s bits from `HELD_SHIFT` up are the 1-based number
// of its piece queue in the pool (so that the head-chunk shortcuts of `peek` and
// `head_span` never apply), `len` counts the pieces' bytes too, the peek cursor is off
// (`NONE`) and `cursor_ord` holds the pieces' bytes.
const HELD_SHIFT: u32 = 12;
const HEAD_OFF_MASK: u32 = (1 << HELD_SHIFT) - 1;
const _: () = assert!(CHUNK <= HEAD_OFF_MASK as usize);

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
        if self.head_off > HEAD_OFF_MASK {
            return self.chain_view().mem_bytes();
        }
        (self.head_off as usize + self.len as usize).div_ceil(CHUNK)
            * CHUNK
            * usize::from(self.len > 0)
    }

    /// Bytes the tail chunk can still take without a new chunk.
    pub fn tail_room(&self) -> usize {
        if self.len == 0 {
            0
        } else if self.head_off > HEAD_OFF_MASK {
            self.chain_view().tail_room()
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
        if self.head_off > HEAD_OFF_MASK {
            return self.write_chain_held(pool, &data[..take]);
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
        if self.head_off > HEAD_OFF_MASK {
            return self.peek_held(pool, offset, &mut out[..n]);
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
        if self.head_off > HEAD_OFF_MASK {
            self.consume_held(pool, n);
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
    #[inline]
    ///
    /// Pieces in held slots are left to the pool's queue, which the stack then finds
    /// orphaned and releases (`Stack::tx_held_collect`): no test here on the path of
    /// every acknowledgement that empties the buffer.
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
        if self.head_off > HEAD_OFF_MASK {
            return self.peek_with_held(pool, offset, n, &mut put);
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

/// A stretch of a send buffer holding pieces: bytes in a held slot, or in the chunk chain.
enum Run {
    Slot { slot: u32, off: usize, len: usize },
    Chain { off: usize, len: usize },
}

/// Hands `f` the runs of bytes `offset..offset + n` of a buffer of `total` bytes whose
/// pieces are `q`, in order; false if `f` stopped.
fn runs(
    q: &HeldQueue,
    total: usize,
    offset: usize,
    n: usize,
    mut f: impl FnMut(Run) -> bool,
) -> bool {
    let start = q.base + offset as u64;
    let end = start + n as u64;
    let stop = q.base + total as u64;
    // `cur`: the stream position walked to; `coff`: the chain bytes before it.
    let (mut cur, mut coff) = (q.base, 0u64);
    let chain = |from: u64, to: u64, coff: u64, f: &mut dyn FnMut(Run) -> bool| {
        let (a, b) = (from.max(start), to.min(end));
        a >= b
            || f(Run::Chain {
                off: (coff + a - from) as usize,
                len: (b - a) as usize,
            })
    };
    for p in &q.pieces {
        if cur >= end {
            return true;
        }
        let (ps, pe) = (p.pos.max(q.base), p.pos + u64::from(p.len));
        if !chain(cur, ps, coff, &mut f) {
            return false;
        }
        coff += ps - cur;
        let (a, b) = (ps.max(start), pe.min(end));
        if a < b
            && !f(Run::Slot {
                slot: p.slot,
                off: (u64::from(p.room) + a - p.pos) as usize,
                len: (b - a) as usize,
            })
        {
            return false;
        }
        cur = pe;
    }
    chain(cur, stop, coff, &mut f)
}

/// Held transmit slots as the send buffer's storage (see [`super::held`]): the pieces sit
/// in sequence order among the chunk bytes; the chain keeps every byte not in a piece.
impl SendBuffer {
    /// The chunk chain alone, as a buffer without pieces (its cursor copied).
    fn chain_view(&self) -> SendBuffer {
        SendBuffer {
            head: self.head,
            tail: self.tail,
            head_off: self.head_off & HEAD_OFF_MASK,
            len: self.len - self.hlen(),
            cursor: Cell::new(NONE),
            cursor_ord: Cell::new(0),
        }
    }

    /// Takes back the chain of `v` (a [`chain_view`](Self::chain_view) changed); `len`
    /// follows the chain's change.
    fn chain_store(&mut self, v: &SendBuffer) {
        let chain_before = self.len - self.hlen();
        self.len = self.len - chain_before + v.len;
        let held = self.head_off & !HEAD_OFF_MASK;
        (self.head, self.tail, self.head_off) = (v.head, v.tail, v.head_off | held);
    }

    /// The number of this buffer's piece queue (0: none).
    fn held(&self) -> u32 {
        self.head_off >> HELD_SHIFT
    }

    /// Bytes in pieces.
    fn hlen(&self) -> u32 {
        if self.held() == 0 {
            0
        } else {
            self.cursor_ord.get()
        }
    }

    /// Whether some bytes are in held slots.
    pub fn holds_pieces(&self) -> bool {
        self.held() != 0
    }

    /// No piece left: back to a plain chain.
    fn leave_held(&mut self, pool: &mut BufferPool) {
        pool.held.free_queue(self.held());
        self.head_off &= HEAD_OFF_MASK;
        self.cursor.set(NONE);
        self.cursor_ord.set(0);
    }

    /// Appends up to `limit - len` bytes of `data` into held slots from the pool's
    /// reserve, after `room` bytes for the headers, at most `cap` bytes a slot (the
    /// segment size): the last piece filled first while none of it was sent (`sent`:
    /// the bytes already sent, from the head) and it is the buffer's last byte, then new
    /// pieces (for a write of at least `min_new` bytes) cut where the segments will be
    /// cut, every `cap` bytes from the first unsent byte. `Ok`: the bytes taken;
    /// `Err(k)`: none, the caller writes at most `k` bytes into chunks instead (the
    /// unsent bytes end `cap - k` into a segment: the next piece starts where that
    /// segment ends; a short write; no slot while the buffer is empty), or with `k` 0
    /// waits for an acknowledgement as a full buffer does (no slot in the reserve).
    pub fn write_held(
        &mut self,
        pool: &mut BufferPool,
        data: &[u8],
        limit: usize,
        (cap, room, sent, min_new): (usize, usize, usize, usize),
        owner: crate::tcp::TcpHandle,
    ) -> Result<usize, usize> {
        let avail = limit.min(MAX_SEND).saturating_sub(self.len as usize);
        let take = data.len().min(avail);
        let cap = cap.min(pool.held.slot_len.saturating_sub(room));
        if take == 0 || cap == 0 {
            return Err(usize::MAX);
        }
        if self.held() == 0 && !pool.held.ready() {
            return Err(self.wait_or(cap));
        }
        let fresh = self.held() == 0;
        if fresh {
            self.head_off |= pool.held.new_queue(owner) << HELD_SHIFT;
            self.cursor.set(NONE);
            self.cursor_ord.set(0);
        }
        let hs = &mut *pool.held;
        let q = &mut hs.queues[self.held() as usize - 1];
        let end_pos = q.base + u64::from(self.len);
        let mut done = 0;
        let tail = q.pieces.back_mut().filter(|p| {
            p.pos + u64::from(p.len) == end_pos
                && p.pos >= q.base + sent as u64
                && !p.sent
                && p.room as usize == room
        });
        if tail.is_none() {
            let lead = (cap - (self.len as usize).saturating_sub(sent) % cap) % cap;
            if lead > 0 || take < min_new {
                if fresh {
                    self.leave_held(pool);
                }
                return Err(if lead > 0 { lead } else { usize::MAX });
            }
        }
        if let Some(p) = tail
            && p.len < p.cap
        {
            let k = (p.cap - p.len).min(take as u32);
            let off = room + p.len as usize;
            if hs
                .writer
                .as_ref()
                .is_some_and(|w| w(p.slot, off, &data[..k as usize]))
            {
                p.len += k;
                done = k as usize;
            } else {
                hs.errors += 1;
            }
        }
        while done < take && (done > 0 || take >= min_new) {
            let Some(slot) = hs.reserve.pop() else { break };
            let k = cap.min(take - done);
            if !hs
                .writer
                .as_ref()
                .is_some_and(|w| w(slot, room, &data[done..done + k]))
            {
                hs.errors += 1;
                hs.released.push(slot);
                break;
            }
            q.pieces.push_back(Piece {
                pos: end_pos + done as u64,
                slot,
                room: room as u32,
                len: k as u32,
                cap: cap as u32,
                sent: false,
            });
            hs.written += 1;
            done += k;
        }
        self.len += done as u32;
        self.cursor_ord.set(self.hlen() + done as u32);
        if self.hlen() == 0 {
            self.leave_held(pool);
        }
        if done > 0 {
            Ok(done)
        } else if take >= min_new {
            Err(self.wait_or(cap))
        } else {
            Err(usize::MAX)
        }
    }

    /// No held slot for a long write: wait for the bytes held to be acknowledged
    /// (`Err(0)` from [`write_held`](Self::write_held): the slots come back with them)
    /// rather than fill the buffer with chunks that would keep every later write out of
    /// the slots; an empty buffer has nothing to wait for and takes one segment in chunks.
    fn wait_or(&self, cap: usize) -> usize {
        if self.len > 0 { 0 } else { cap }
    }

    /// [`write`](Self::write) of `data` (within the limit) after the pieces: into the chain.
    #[cold]
    #[inline(never)]
    fn write_chain_held(&mut self, pool: &mut BufferPool, data: &[u8]) -> usize {
        let mut v = self.chain_view();
        let n = v.write(pool, data, MAX_SEND);
        self.chain_store(&v);
        n
    }

    /// [`peek`](Self::peek) of a buffer with pieces (`out` within the buffer).
    #[cold]
    #[inline(never)]
    fn peek_held(&self, pool: &BufferPool, offset: usize, out: &mut [u8]) -> usize {
        let q = &pool.held.queues[self.held() as usize - 1];
        let v = self.chain_view();
        let mut done = 0;
        runs(q, self.len as usize, offset, out.len(), |r| {
            let ok = match r {
                Run::Slot { slot, off, len } => {
                    pool.held.read(slot, off, &mut out[done..done + len])
                }
                Run::Chain { off, len } => v.peek(pool, off, &mut out[done..done + len]) == len,
            };
            if ok {
                done += match r {
                    Run::Slot { len, .. } | Run::Chain { len, .. } => len,
                };
            }
            ok
        });
        done
    }

    /// [`peek_with`](Self::peek_with) of a buffer with pieces (the range within it): a
    /// piece's bytes are read through a bounce buffer.
    #[cold]
    #[inline(never)]
    fn peek_with_held(
        &self,
        pool: &BufferPool,
        offset: usize,
        n: usize,
        put: &mut dyn FnMut(&[u8]) -> bool,
    ) -> bool {
        let q = &pool.held.queues[self.held() as usize - 1];
        let v = self.chain_view();
        let mut bounce = [0u8; 4096];
        runs(q, self.len as usize, offset, n, |r| match r {
            Run::Slot { slot, off, len } => {
                let mut at = 0;
                while at < len {
                    let k = (len - at).min(bounce.len());
                    if !pool.held.read(slot, off + at, &mut bounce[..k]) || !put(&bounce[..k]) {
                        return false;
                    }
                    at += k;
                }
                true
            }
            Run::Chain { off, len } => v.peek_with(pool, off, len, &mut *put),
        })
    }

    /// [`consume`](Self::consume) of `n < len` bytes of a buffer with pieces: the pieces
    /// acknowledged to their end go back (their slots released), the chain bytes among
    /// the `n` are consumed.
    #[cold]
    #[inline(never)]
    fn consume_held(&mut self, pool: &mut BufferPool, n: usize) {
        let hs = &mut *pool.held;
        let q = &mut hs.queues[self.held() as usize - 1];
        let mut chain_n = 0;
        runs(q, self.len as usize, 0, n, |r| {
            if let Run::Chain { len, .. } = r {
                chain_n += len;
            }
            true
        });
        q.base += n as u64;
        while let Some(p) = q.pieces.front()
            && p.pos + u64::from(p.len) <= q.base
        {
            hs.released.push(p.slot);
            q.pieces.pop_front();
        }
        self.cursor_ord.set(self.hlen() - (n - chain_n) as u32);
        self.len -= (n - chain_n) as u32;
        if chain_n > 0 {
            let mut v = self.chain_view();
            v.consume(pool, chain_n);
            self.chain_store(&v);
        }
        if self.hlen() == 0 {
            self.leave_held(pool);
        }
    }

    /// The number of this buffer's piece queue in the pool (0: none), for
    /// `Stack::tx_held_collect` to tell a queue still in use from one left by
    /// [`clear`](Self::clear).
    pub fn held_queue(&self) -> u32 {
        self.held()
    }

    /// The held slot to send a segment of bytes `offset..offset + n` from in place: when
    /// they are exactly one whole piece after `room` bytes of headers, not sent in place
    /// before (then marked). Counts a segment over pieces that cannot go so.
    pub fn piece_for_send(
        &self,
        pool: &mut BufferPool,
        offset: usize,
        n: usize,
        room: usize,
    ) -> Option<u32> {
        if self.held() == 0 {
            return None;
        }
        let hs = &mut *pool.held;
        let q = &mut hs.queues[self.held() as usize - 1];
        let (start, end) = (q.base + offset as u64, q.base + (offset + n) as u64);
        let base = q.base;
        let mut overlaps = false;
        for p in q.pieces.iter_mut() {
            let pe = p.pos + u64::from(p.len);
            if pe <= start || p.pos >= end {
                continue;
            }
            if p.pos == start && pe == end && p.pos >= base && !p.sent && p.room as usize == room {
                p.sent = true;
                hs.sent_in_place += 1;
                return Some(p.slot);
            }
            overlaps = true;
            break;
        }
        hs.copied += u64::from(overlaps);
        None
    }
}
