//! Pooled TCP send and receive buffers, and the out-of-order queue.
//!
//! The mission's rule "an idle connection holds no buffer memory" lives here. Every byte a
//! TCP socket buffers sits in a fixed-size [`CHUNK`] of one per-stack [`BufferPool`]; a
//! [`SendBuffer`] or [`RecvBuffer`] is a handful of inline `u32`s (chunk indices and
//! counters) and holds no chunk and no heap when empty. Chunks go back to the pool as soon
//! as the bytes in them are acknowledged (send side) or read (receive side).
//!
//! # The pool
//!
//! Chunks are allocated in slabs of 64 (128 KiB), zeroed lazily by the allocator
//! (`calloc`), and are named by a `u32` index: slab `i >> 6`, slot `i & 63`. Each chunk has
//! one `next: u32` link (`u32::MAX` = none), kept in a dense array beside the data rather
//! than at the end of each 2 KiB block, so that walking a chain touches 4-byte links that
//! share cache lines instead of one line per chunk, and each chunk's data stays 2 KiB aligned
//! within its slab. The link is the only per-chunk overhead: 4 bytes per 2048 (0.2 %).
//! Free chunks form a LIFO list threaded through those links (the most recently freed
//! chunk, still warm in cache, is reused first). Allocation and free are O(1).
//!
//! The pool is bounded by a byte limit, like Linux's `tcp_mem` (but a hard limit: an
//! allocation over it fails and the caller sees a short write or a drop). Memory is never
//! returned to the operating system on the hot path: capacity only grows, up to the limit.
//! How capacity could shrink later, off the hot path: a `trim` run from a timer when usage
//! has stayed low would walk the free list once, count free chunks per slab, and release the
//! trailing slabs that are entirely free (rebuilding the free list without them); releasing
//! slabs in the middle would need moving live chunks, which means rewriting the chains that
//! name them, so it is better done by preferring low indices when allocating (an
//! address-ordered free list) so that high slabs drain naturally.
//!
//! # Send buffer
//!
//! A FIFO chain of chunks: bytes start at `head_off` in the head chunk and are packed
//! through the chain. `write` appends, `peek(offset)` copies from `offset = seq - snd_una`
//! for (re)transmission, `consume` drops acknowledged bytes. A one-entry cursor (the last
//! chunk `peek` touched) makes the usual pattern of peeking at `snd_nxt - snd_una`, which
//! moves forward by one segment at a time, O(1) per call instead of a walk from the head.
//!
//! # Receive buffer and the out-of-order queue
//!
//! RFC 9293 §3.10.7.4 (<https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4>):
//! "Segments with higher beginning sequence numbers SHOULD be held for later processing
//! (SHLD-31)." Linux holds them in an rbtree of skbs (`tcp_data_queue_ofo` in
//! `net/ipv4/tcp_input.c`), coalescing neighbours. Here:
//!
//! - Bytes are placed by position. Every byte of the stream has a position (a wrapping
//!   `u32` counter, like a sequence number, with an arbitrary origin); the byte at position
//!   `p` is stored at offset `p % CHUNK` of whichever chunk holds `p`'s aligned 2 KiB block.
//!   The in-order data and each out-of-order extent are chains of such aligned chunks.
//!   Alignment is what makes merging cheap: two chains that meet at `p` share at most one
//!   aligned block, so joining them copies at most one partial chunk (< 2 KiB) and relinks,
//!   whatever their lengths. (`2^32` is a multiple of `CHUNK`, so alignment survives
//!   wrap-around.)
//! - An extent is a `Chain` `{start, len, head, tail}` in the out-of-order queue, a
//!   `BTreeMap` keyed by the extent's start (Linux keeps skbs in an rbtree for the same
//!   reason: CVE-2018-5390, "SegmentSmack", made a linear queue cost O(n) per segment under
//!   a flood of tiny out-of-order segments). Extents are kept disjoint and non-touching
//!   (extents that touch are merged). The map is boxed, created with the first extent and
//!   freed when the buffer is drained, so an idle buffer holds no heap.
//! - `insert` finds the extent before the segment in O(log n), then walks the extents the
//!   segment overlaps or touches, filling the gaps between them with the segment's new
//!   bytes (lowest first) and absorbing each extent into one growing chain; bytes already
//!   held are counted as duplicates (and replaced or kept as the overlap policy on
//!   [`RecvBuffer::insert`] says, which is Linux's). The run becomes one record (or, for
//!   data at `rcv_nxt`, moves into the in-order chain, which is Linux's `tcp_ofo_queue`).
//!   Cost: O(log n) per extent touched or created, plus the copy of the new bytes, plus
//!   < 2 KiB per extent merged. Any order, duplication or overlap of retransmissions gives
//!   the same stream.
//! - Limits. Bytes held (in-order + out-of-order) never exceed `limit` (the socket's
//!   rcvbuf). Memory is bounded too: the buffer is charged its chunks plus
//!   [`EXTENT_TRUESIZE`] per extent ([`RecvBuffer::truesize`], Linux's `sk_rmem_alloc` of
//!   skb truesizes: a one-byte segment costs a whole chunk), and out-of-order data is
//!   stored only while that stays within [`ooo_mem_bound`] (twice the limit plus two
//!   chunks; Linux's `sk_rcvbuf`). When a segment would not fit, out-of-order extents are
//!   discarded from the highest sequence down, as Linux's `tcp_prune_queue` /
//!   `tcp_prune_ofo_queue` do ("reneging", RFC 2018 §8: "the data receiver is permitted to
//!   discard data in its queue that has not been acknowledged to the data sender, even if
//!   the data has already been reported in a SACK option. Such discarding of SACKed
//!   packets is discouraged, but may be used if the receiver runs out of buffer space."):
//!   for in-order data always (it is never refused for want of room while out-of-order
//!   data could go), for out-of-order data only extents that start at or above it, an
//!   eighth of the bound at a time. The caller learns of it through
//!   [`InsertResult::prune_called`] and [`InsertResult::pruned`] (Linux counts
//!   `PruneCalled` and `OfoPruned`).
//! - A FIN beyond a hole is remembered with the queue ([`RecvBuffer::queue_fin`]) and
//!   reported when `rcv_nxt` reaches it ([`RecvBuffer::take_fin`]), as Linux queues the
//!   FIN's skb out of order.
//!
//! Buffers are deliberately neither `Copy` nor `Clone`: a copy would own the same chunks
//! twice. A buffer must be emptied with `clear` (or drained) before it is dropped, or its
//! chunks stay counted in [`BufferPool::in_use_bytes`] (which is how a leak shows).
//! A buffer must always be used with the pool it took its chunks from.

use core::cell::Cell;
use core::fmt;
use core::ops::Bound;
use std::collections::BTreeMap;

use crate::counted::{Key, work};

/// Bytes per chunk, the pool's unit of allocation.
pub const CHUNK: usize = 2048;

/// Chunks per slab (one heap allocation when the pool grows).
const SLAB_CHUNKS: usize = 64;
/// `log2(SLAB_CHUNKS)`: chunk index `i` is slot `i & 63` of slab `i >> 6`.
const SLAB_SHIFT: u32 = 6;
/// "No chunk" in links and indices.
const NONE: u32 = u32::MAX;
/// The largest number of chunks a pool may have, leaving room for `NONE`.
const MAX_POOL_CHUNKS: usize = (u32::MAX as usize) - SLAB_CHUNKS;
/// RFC 7323 §2.3: the largest receive window (2^30 bytes). Data further than this from
/// `rcv_nxt` is never acceptable, which also keeps wrapping position arithmetic exact.
const MAX_WINDOW: usize = 1 << 30;
/// The largest send buffer, keeping `head_off + len` within `u32`.
const MAX_SEND: usize = (u32::MAX as usize) - CHUNK;

/// A per-stack (per-shard) pool of [`CHUNK`]-byte chunks, bounded by a byte limit.
pub struct BufferPool {
    /// Chunk data, `SLAB_CHUNKS` per slab (the last slab may be shorter when the limit cuts it).
    slabs: Vec<Box<[[u8; CHUNK]]>>,
    /// `next[i]`: the chunk after `i` in its chain or in the free list; `NONE` ends a chain.
    /// `SLAB_CHUNKS` entries per slab.
    next: Vec<u32>,
    /// Head of the free list.
    free: u32,
    /// Chunks in all slabs.
    capacity: usize,
    /// Chunks handed out.
    in_use: usize,
    /// The limit in whole chunks.
    limit_chunks: usize,
    limit_bytes: usize,
    alloc_failures: u64,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("in_use_bytes", &self.in_use_bytes())
            .field("capacity_bytes", &self.capacity_bytes())
            .field("limit_bytes", &self.limit_bytes)
            .field("slabs", &self.slabs.len())
            .field("alloc_failures", &self.alloc_failures)
            .finish()
    }
}

impl BufferPool {
    /// An empty pool (no memory allocated) that will hand out at most `limit_bytes` of
    /// chunks (rounded down to whole chunks).
    pub fn new(limit_bytes: usize) -> Self {
        BufferPool {
            slabs: Vec::new(),
            next: Vec::new(),
            free: NONE,
            capacity: 0,
            in_use: 0,
            limit_chunks: (limit_bytes / CHUNK).min(MAX_POOL_CHUNKS),
            limit_bytes,
            alloc_failures: 0,
        }
    }

    /// Bytes in chunks handed out to buffers (chunks in use * [`CHUNK`]).
    pub fn in_use_bytes(&self) -> usize {
        self.in_use * CHUNK
    }

    /// Bytes in chunks allocated from the system (in use or free), never more than the
    /// limit (rounded up to a chunk) unless the limit was lowered after they were allocated.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity * CHUNK
    }

    /// The byte limit given to [`BufferPool::new`] or [`BufferPool::set_limit_bytes`].
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    /// Change the limit (a `tcp_mem`-like sysctl write). Lowering it below what is in use
    /// frees nothing; allocations fail until usage drops below the new limit.
    pub fn set_limit_bytes(&mut self, limit_bytes: usize) {
        self.limit_bytes = limit_bytes;
        self.limit_chunks = (limit_bytes / CHUNK).min(MAX_POOL_CHUNKS);
    }

    /// Heap bytes the pool itself occupies: chunk slabs plus the link array and slab table.
    /// `capacity_bytes` plus the per-chunk overhead, for honest memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.capacity * CHUNK
            + self.next.capacity() * size_of::<u32>()
            + self.slabs.capacity() * size_of::<Box<[[u8; CHUNK]]>>()
    }

    /// Chunk allocations refused because the pool was at its limit.
    pub fn alloc_failures(&self) -> u64 {
        self.alloc_failures
    }

    /// Chunks that can still be handed out before the limit is reached.
    fn available_chunks(&self) -> usize {
        self.limit_chunks.saturating_sub(self.in_use)
    }

    /// Take a chunk (its link set to `NONE`), or `None` at the limit.
    fn alloc(&mut self) -> Option<u32> {
        if self.in_use >= self.limit_chunks {
            self.alloc_failures += 1;
            return None;
        }
        if self.free == NONE {
            self.grow();
        }
        let c = self.free;
        self.free = self.next[c as usize];
        self.next[c as usize] = NONE;
        self.in_use += 1;
        Some(c)
    }

    /// Add one slab (the free list is empty, so every chunk is in use and
    /// `capacity == in_use < limit_chunks`).
    #[cold]
    fn grow(&mut self) {
        let base = self.slabs.len() * SLAB_CHUNKS;
        let n = SLAB_CHUNKS.min(self.limit_chunks - self.capacity);
        // `vec![zeroed; n]` allocates zeroed memory (calloc): pages are touched on first use.
        self.slabs.push(vec![[0u8; CHUNK]; n].into_boxed_slice());
        self.next.resize(base + SLAB_CHUNKS, NONE);
        for i in (base..base + n).rev() {
            self.next[i] = self.free;
            self.free = i as u32;
        }
        self.capacity += n;
    }

    /// Return a chunk to the free list.
    fn free(&mut self, c: u32) {
        self.next[c as usize] = self.free;
        self.free = c;
        self.in_use -= 1;
    }

    #[inline]
    fn chunk(&self, c: u32) -> &[u8; CHUNK] {
        &self.slabs[(c >> SLAB_SHIFT) as usize][c as usize & (SLAB_CHUNKS - 1)]
    }

    #[inline]
    fn chunk_mut(&mut self, c: u32) -> &mut [u8; CHUNK] {
        &mut self.slabs[(c >> SLAB_SHIFT) as usize][c as usize & (SLAB_CHUNKS - 1)]
    }

    #[inline]
    fn next(&self, c: u32) -> u32 {
        self.next[c as usize]
    }

    #[inline]
    fn set_next(&mut self, c: u32, n: u32) {
        self.next[c as usize] = n;
    }

    /// Copy `src[range]` into `dst[range]` (two different chunks).
    fn copy_between(&mut self, src: u32, dst: u32, range: core::ops::Range<usize>) {
        let (ss, si) = (
            (src >> SLAB_SHIFT) as usize,
            src as usize & (SLAB_CHUNKS - 1),
        );
        let (ds, di) = (
            (dst >> SLAB_SHIFT) as usize,
            dst as usize & (SLAB_CHUNKS - 1),
        );
        if ss == ds {
            let slab = &mut self.slabs[ss];
            if si < di {
                let (lo, hi) = slab.split_at_mut(di);
                hi[0][range.clone()].copy_from_slice(&lo[si][range]);
            } else {
                let (lo, hi) = slab.split_at_mut(si);
                lo[di][range.clone()].copy_from_slice(&hi[0][range]);
            }
        } else if ss < ds {
            let (lo, hi) = self.slabs.split_at_mut(ds);
            hi[0][di][range.clone()].copy_from_slice(&lo[ss][si][range]);
        } else {
            let (lo, hi) = self.slabs.split_at_mut(ss);
            lo[ds][di][range.clone()].copy_from_slice(&hi[0][si][range]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Send buffer
// ---------------------------------------------------------------------------------------

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
    head_off: u32,
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

    /// Append up to `limit - len` bytes of `data` (limit = the socket's sndbuf); returns bytes
    /// taken (0 when full or the pool is exhausted: the caller reports EAGAIN / counts).
    /// When the pool runs out part way, what fit is kept and its length returned.
    pub fn write(&mut self, pool: &mut BufferPool, data: &[u8], limit: usize) -> usize {
        let room = limit.min(MAX_SEND).saturating_sub(self.len as usize);
        let take = data.len().min(room);
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

    /// Copy `out.len()` bytes starting `offset` bytes after the head (offset = seq - snd_una)
    /// into `out`. Returns the bytes copied: fewer than `out.len()` (the rest of `out`
    /// untouched) when the range runs past the end of the buffer, 0 if `offset >= len`.
    ///
    /// O(1) per call when successive peeks move forward (the cursor remembers the last
    /// chunk); otherwise a walk from the head.
    pub fn peek(&self, pool: &BufferPool, offset: usize, out: &mut [u8]) -> usize {
        let len = self.len as usize;
        if offset >= len || out.is_empty() {
            return 0;
        }
        let n = out.len().min(len - offset);
        let abs = self.head_off as usize + offset;
        let want = (abs / CHUNK) as u32;
        let (mut c, mut ord) = match self.cursor.get() {
            cur if cur != NONE && self.cursor_ord.get() <= want => (cur, self.cursor_ord.get()),
            _ => (self.head, 0),
        };
        while ord < want {
            c = pool.next(c);
            ord += 1;
        }
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

    /// Drop `n` acknowledged bytes from the head (all of them if `n >= len`), returning
    /// freed chunks to the pool. A drained buffer holds no chunk.
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
}

// ---------------------------------------------------------------------------------------
// Receive buffer
// ---------------------------------------------------------------------------------------

/// A run of contiguous bytes at stream positions `[start, start + len)`, in a chain of
/// position-aligned chunks: the byte at position `p` is at offset `p % CHUNK` of its chunk.
/// `len == 0` iff `head == NONE`; the tail's link is always `NONE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chain {
    start: u32,
    len: u32,
    head: u32,
    tail: u32,
}

impl Chain {
    const fn empty(start: u32) -> Self {
        Chain {
            start,
            len: 0,
            head: NONE,
            tail: NONE,
        }
    }

    fn end(&self) -> u32 {
        self.start.wrapping_add(self.len)
    }
}

/// The pool, seen through one receive buffer: counts the chunks and extent records the
/// buffer holds and refuses allocations that would take its memory charge past a cap.
struct Mem<'a> {
    pool: &'a mut BufferPool,
    /// Chunks held.
    held: u32,
    /// Out-of-order extent records held (or reserved for the run being built).
    recs: u32,
    /// The most [`truesize`] may reach by allocating.
    cap: usize,
}

/// The memory a receive buffer is charged for (Linux `sk_rmem_alloc`, which sums each
/// skb's `truesize`): its pool chunks, plus [`EXTENT_TRUESIZE`] per out-of-order extent.
/// A one-byte out-of-order extent is charged a whole chunk and a record, as a one-byte
/// skb costs Linux its whole buffer.
const fn truesize(chunks: u32, recs: u32) -> usize {
    chunks as usize * CHUNK + recs as usize * EXTENT_TRUESIZE
}

impl Mem<'_> {
    fn truesize(&self) -> usize {
        truesize(self.held, self.recs)
    }

    fn alloc(&mut self) -> Option<u32> {
        if truesize(self.held + 1, self.recs) > self.cap {
            return None;
        }
        let c = self.pool.alloc()?;
        self.held += 1;
        Some(c)
    }

    fn free(&mut self, c: u32) {
        self.pool.free(c);
        self.held -= 1;
    }

    /// Append `data` at `ch.end()`. Returns the bytes stored (fewer if allocation failed).
    fn append(&mut self, ch: &mut Chain, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let off = ch.end() as usize % CHUNK;
            let c = if ch.len > 0 && off != 0 {
                ch.tail
            } else {
                let Some(c) = self.alloc() else { break };
                if ch.head == NONE {
                    ch.head = c;
                } else {
                    self.pool.set_next(ch.tail, c);
                }
                ch.tail = c;
                c
            };
            let k = (CHUNK - off).min(data.len() - done);
            self.pool.chunk_mut(c)[off..off + k].copy_from_slice(&data[done..done + k]);
            done += k;
            ch.len += k as u32;
        }
        done
    }

    /// Copy `data` over the first `data.len()` (`<= ch.len`) bytes of `ch`. Costs the copy
    /// plus one link per chunk it touches.
    fn overwrite_head(&mut self, ch: &Chain, data: &[u8]) {
        let (mut c, mut off, mut done) = (ch.head, ch.start as usize % CHUNK, 0);
        while done < data.len() {
            let k = (CHUNK - off).min(data.len() - done);
            self.pool.chunk_mut(c)[off..off + k].copy_from_slice(&data[done..done + k]);
            done += k;
            c = self.pool.next(c);
            off = 0;
        }
    }

    /// Join `b` onto the end of `a` (`a.end() == b.start`, both non-empty). When they meet
    /// inside an aligned block, `b`'s first chunk is copied into `a`'s last and freed.
    fn concat(&mut self, a: &mut Chain, b: Chain) {
        let off = b.start as usize % CHUNK;
        if off != 0 {
            let n = (CHUNK - off).min(b.len as usize);
            self.pool.copy_between(b.head, a.tail, off..off + n);
            let rest = self.pool.next(b.head);
            self.free(b.head);
            if b.tail != b.head {
                self.pool.set_next(a.tail, rest);
                a.tail = b.tail;
            }
        } else {
            self.pool.set_next(a.tail, b.head);
            a.tail = b.tail;
        }
        a.len += b.len;
    }

    /// Free every chunk of a chain; returns how many.
    fn free_chain(&mut self, ch: &Chain) -> u32 {
        let (mut c, mut n) = (ch.head, 0);
        while c != NONE {
            let next = self.pool.next(c);
            self.free(c);
            c = next;
            n += 1;
        }
        n
    }
}

/// Bytes charged per out-of-order extent for its record in the queue's B-tree: a key and a
/// `Chain` (20 bytes) in nodes of 11 that are at least 5 full (232 bytes per leaf, 328
/// per internal node, one internal node per 6 or more leaves), plus the allocator's
/// header, rounded up. Checked against the real type sizes by a test.
pub const EXTENT_TRUESIZE: usize = 64;

/// The out-of-order queue (Linux `tp->out_of_order_queue`, an rbtree of skbs): extents
/// keyed by the distance of their start from `base`, sorted, disjoint and non-touching.
/// Boxed (so the buffer stays small), and freed when the buffer is drained (so an idle
/// buffer holds no heap; see `RecvBuffer::release_ofo`).
#[derive(Debug)]
struct Ofo {
    map: BTreeMap<Key, Chain>,
    /// A position at or before `rcv_nxt` that keys count from. Every extent lies within
    /// `MAX_WINDOW` after `rcv_nxt`; keys stay ordered as long as `rcv_nxt - base` stays
    /// below `2^31` (re-based, O(extents), after every 2 GiB of stream, see `rebase`).
    base: u32,
}

impl Ofo {
    fn key(&self, pos: u32) -> Key {
        Key(pos.wrapping_sub(self.base))
    }

    /// The highest extent, if it starts at or after relative position `from` (`rcv` is
    /// `rcv_nxt`'s position).
    fn last_from(&self, rcv: u32, from: u32) -> Option<(Key, Chain)> {
        let (&k, &x) = self.map.last_key_value()?;
        (x.start.wrapping_sub(rcv) >= from).then_some((k, x))
    }

    /// Re-key every extent from `rcv` once `rcv_nxt` is 2 GiB past `base` (at once when
    /// there is none).
    fn rebase(&mut self, rcv: u32) {
        if self.map.is_empty() {
            self.base = rcv;
            return;
        }
        if rcv.wrapping_sub(self.base) < 1 << 31 {
            return;
        }
        self.base = rcv;
        let old = core::mem::take(&mut self.map);
        self.map = old.into_values().map(|x| (self.key(x.start), x)).collect();
    }
}

/// The most a receive buffer may be charged (`truesize`) when it takes out-of-order data:
/// twice its byte limit (rcvbuf) plus two chunks for the aligned ends. The byte limit is
/// the window's worth of payload; Linux's `sk_rcvbuf` is the memory budget for that payload
/// at `tcp_adv_win_scale` = 1 (half of it overhead), hence the factor 2.
pub fn ooo_mem_bound(limit: usize) -> usize {
    2 * limit.min(MAX_WINDOW) + 2 * CHUNK
}

/// What [`RecvBuffer::insert`] did with a segment's bytes.
/// `stored + dropped + duplicate` is the segment's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InsertResult {
    /// How far `rcv_nxt` advances: in-order bytes that became readable, including
    /// out-of-order data this segment joined up.
    pub advanced: usize,
    /// New bytes stored (in order or out of order).
    pub stored: usize,
    /// Bytes refused: beyond `limit` from `rcv_nxt`, over the byte limit, over the memory
    /// cap, or pool exhausted.
    pub dropped: usize,
    /// Bytes already held (a retransmission or overlap).
    pub duplicate: usize,
    /// Out-of-order bytes discarded (reneged, RFC 2018 §8) to make room for this segment,
    /// highest first (Linux `tcp_prune_ofo_queue`, counter `OfoPruned`).
    pub pruned: usize,
    /// Out-of-order extents discarded (each a drop `TCP_OFO_QUEUE_PRUNE`).
    pub pruned_extents: u32,
    /// The buffer was over its memory or byte budget for this segment and tried to make
    /// room (Linux `tcp_prune_queue`, counter `PruneCalled`).
    pub prune_called: bool,
}

/// Received bytes: in-order data not yet read by the application (`rcv_nxt` is its end),
/// plus the out-of-order queue. 40 bytes inline; no chunk and no heap when empty.
///
/// Not `Copy`/`Clone` (a copy would own the same chunks twice). Call
/// [`RecvBuffer::clear`] before dropping a non-empty buffer.
#[derive(Debug)]
pub struct RecvBuffer {
    /// In-order data; `inorder.end()` is the position of `rcv_nxt`.
    inorder: Chain,
    /// The out-of-order queue; `None` when the buffer is drained.
    ofo: Option<Box<Ofo>>,
    /// Out-of-order bytes held.
    ooo_bytes: u32,
    /// Chunks held.
    chunks: u32,
    /// Position of a FIN received beyond a hole (valid iff `fin_queued`).
    fin: u32,
    fin_queued: bool,
}

impl Default for RecvBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBuffer {
    /// An empty buffer (holds nothing).
    pub const fn new() -> Self {
        RecvBuffer {
            inorder: Chain::empty(0),
            ofo: None,
            ooo_bytes: 0,
            chunks: 0,
            fin: 0,
            fin_queued: false,
        }
    }

    /// In-order bytes the application can read.
    pub fn readable(&self) -> usize {
        self.inorder.len as usize
    }

    /// Out-of-order bytes held.
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes as usize
    }

    /// Number of out-of-order extents (holes after `rcv_nxt` = this many).
    pub fn ooo_extents(&self) -> usize {
        self.ofo.as_ref().map_or(0, |o| o.map.len())
    }

    /// Pool memory this buffer holds: its chunks * [`CHUNK`].
    pub fn mem_bytes(&self) -> usize {
        self.chunks as usize * CHUNK
    }

    /// The memory this buffer is charged for (Linux `sk_rmem_alloc`): its chunks plus
    /// [`EXTENT_TRUESIZE`] per out-of-order extent. Out-of-order data is stored only while
    /// this stays within [`ooo_mem_bound`] of the limit.
    pub fn truesize(&self) -> usize {
        truesize(self.chunks, self.ooo_extents() as u32)
    }

    /// True when nothing is held (and so no chunk).
    pub fn is_empty(&self) -> bool {
        self.inorder.len == 0 && self.ooo_extents() == 0
    }

    /// Data at `offset` bytes after rcv_nxt (0 = in order). Stores what fits under `limit`
    /// (rcvbuf, counting in-order and out-of-order bytes); out-of-order ranges are merged.
    /// Returns how far rcv_nxt advances (in-order bytes now readable, including any
    /// out-of-order data it joined).
    ///
    /// Bytes before rcv_nxt are the caller's to trim (RFC 9293 §3.10.7.4: "If a segment's
    /// contents straddle the boundary between old and new, only the new parts are
    /// processed."). Bytes at `limit` or more after rcv_nxt are dropped (no receiver with
    /// this rcvbuf offers such a window). When not everything fits, the lowest bytes are
    /// kept.
    ///
    /// Overlap policy (RFC 9293 §3.10.7.4 lets a receiver keep either copy; this is
    /// Linux's): newer data wins over queued out-of-order data that it covers from the
    /// start. In-order data replaces every queued byte it overlaps (Linux `tcp_ofo_queue`
    /// delivers the in-order skb and trims or drops the queued ones behind `rcv_nxt`); an
    /// out-of-order segment replaces the bytes of every extent that starts inside it, or
    /// at its start when it covers that extent (Linux `tcp_data_queue_ofo` replaces the
    /// skbs it covers, and a queued skb it overlaps at the head is trimmed on delivery),
    /// but not the bytes of an extent that starts before it (Linux keeps the lower
    /// sequence's bytes for a partial overlap, and drops a segment that lies within a
    /// queued one: "All the bits are present").
    ///
    /// Cost: O(log extents) to find the place, plus O(log extents) per extent the segment
    /// overlaps or touches (each is merged away, or is a byte the segment carries) or that
    /// is pruned (each was stored by an earlier segment), plus the copy of the segment's
    /// bytes and < 2 KiB per extent merged.
    pub fn insert(
        &mut self,
        pool: &mut BufferPool,
        offset: usize,
        data: &[u8],
        limit: usize,
    ) -> InsertResult {
        let mut res = InsertResult::default();
        let lim = limit.min(MAX_WINDOW);
        if offset >= lim || data.is_empty() {
            res.dropped = data.len();
            return res;
        }
        let seg_end = offset.saturating_add(data.len()).min(lim);
        res.dropped = data.len() - (seg_end - offset);
        // Positions relative to rcv_nxt; all fit in u32 (< 2^30).
        let (s, e) = (offset as u32, seg_end as u32);
        let in_order = s == 0;
        let rcv = self.inorder.end();
        let rel = |p: u32| p.wrapping_sub(rcv);

        let mut mem = Mem {
            held: self.chunks,
            recs: self.ooo_extents() as u32,
            cap: if in_order {
                usize::MAX
            } else {
                ooo_mem_bound(lim)
            },
            pool,
        };
        if in_order {
            self.prune_for(&mut mem, lim, s, e, &mut res);
        } else {
            self.prune_ofo(&mut mem, s, e, &mut res);
        }
        let mut budget = lim.saturating_sub(self.inorder.len as usize + self.ooo_bytes as usize);

        if in_order && self.ooo_extents() == 0 {
            // No out-of-order data: append (the common case).
            let n = mem.append(&mut self.inorder, &data[..(e as usize).min(budget)]);
            res.stored = n;
            res.advanced = n;
            res.dropped += (e as usize) - n;
            self.chunks = mem.held;
            self.release_ofo();
            return res;
        }
        let ofo: &mut Ofo = self.ofo.get_or_insert_with(|| {
            Box::new(Ofo {
                map: BTreeMap::new(),
                base: rcv,
            })
        });

        let mut run: Option<Chain> = in_order.then_some(self.inorder);
        let mut pos = s;
        let mut stopped = false;
        let mut absorbed: u32 = 0;
        // The extent that starts before the segment and reaches it (touching counts): the
        // run grows from it. Its bytes are kept (it starts before the segment).
        if !in_order
            && let Some((&k, &x)) = ofo.map.range(..ofo.key(rcv.wrapping_add(s))).next_back()
            && rel(x.end()) >= s
        {
            res.duplicate += e.min(rel(x.end())).saturating_sub(s) as usize;
            ofo.map.remove(&k);
            pos = pos.max(rel(x.end()));
            run = Some(x);
        }
        // Every extent that starts within [s, e]: fill the gap before it with the
        // segment's bytes, replace its overlapped bytes (the overlap policy above) and
        // merge it into the run.
        let hi = ofo.key(rcv.wrapping_add(e));
        let mut lo = Bound::Included(ofo.key(rcv.wrapping_add(s)));
        while let Some((&k, &x)) = ofo.map.range((lo, Bound::Included(hi))).next() {
            work::add(1);
            lo = Bound::Excluded(k);
            let (xs, xe) = (rel(x.start), rel(x.end()));
            let overlap_end = e.min(xe);
            res.duplicate += overlap_end.saturating_sub(xs) as usize;
            if overlap_end > xs && (xs > s || xe <= e) {
                mem.overwrite_head(&x, &data[(xs - s) as usize..(overlap_end - s) as usize]);
            }
            if stopped {
                continue;
            }
            if pos < xs {
                let want = (xs - pos) as usize;
                let n = fill(
                    &mut mem,
                    &mut run,
                    rcv,
                    pos,
                    &data[(pos - s) as usize..],
                    want.min(budget),
                );
                budget -= n;
                res.stored += n;
                pos += n as u32;
                if n < want {
                    stopped = true;
                    continue;
                }
            }
            ofo.map.remove(&k);
            match run.as_mut() {
                None => run = Some(x),
                Some(r) => {
                    mem.concat(r, x);
                    mem.recs -= 1;
                }
            }
            absorbed += x.len;
            pos = pos.max(xe);
        }
        if !stopped && pos < e {
            let want = (e - pos) as usize;
            let n = fill(
                &mut mem,
                &mut run,
                rcv,
                pos,
                &data[(pos - s) as usize..],
                want.min(budget),
            );
            res.stored += n;
        }
        res.dropped += (e - s) as usize - res.stored - res.duplicate;

        if in_order {
            let r = run.unwrap_or(self.inorder);
            res.advanced = (r.len - self.inorder.len) as usize;
            self.inorder = r;
            self.ooo_bytes -= absorbed;
        } else {
            self.ooo_bytes += res.stored as u32;
            if let Some(r) = run {
                ofo.map.insert(ofo.key(r.start), r);
            }
        }
        debug_assert_eq!(mem.recs as usize, ofo.map.len());
        ofo.rebase(self.inorder.end());
        self.chunks = mem.held;
        self.release_ofo();
        res
    }

    /// Copy up to `out.len()` in-order bytes into `out`, freeing chunks as they empty.
    /// Returns the bytes copied.
    pub fn read(&mut self, pool: &mut BufferPool, out: &mut [u8]) -> usize {
        let n = out.len().min(self.inorder.len as usize);
        let mut done = 0;
        while done < n {
            let ch = &mut self.inorder;
            let off = ch.start as usize % CHUNK;
            let k = (CHUNK - off).min(n - done);
            out[done..done + k].copy_from_slice(&pool.chunk(ch.head)[off..off + k]);
            done += k;
            ch.start = ch.start.wrapping_add(k as u32);
            ch.len -= k as u32;
            if ch.len == 0 || (ch.start as usize).is_multiple_of(CHUNK) {
                let c = ch.head;
                ch.head = pool.next(c);
                if ch.head == NONE {
                    ch.tail = NONE;
                }
                pool.free(c);
                self.chunks -= 1;
            }
        }
        self.release_ofo();
        n
    }

    /// Free the out-of-order queue's map once the buffer holds nothing. While in-order
    /// data awaits the reader an empty map is kept (with its root node), so that a
    /// reordering per few segments does not cost an allocation each; a drained buffer
    /// holds no heap.
    fn release_ofo(&mut self) {
        if self.inorder.len == 0 && self.ooo_extents() == 0 {
            self.ofo = None;
        }
    }

    /// Out-of-order ranges as `(start, end)` offsets from rcv_nxt (half-open, sorted,
    /// disjoint), for SACK blocks. Writes at most `out.len()` (the lowest) and returns how
    /// many were written.
    pub fn ooo_ranges(&self, _pool: &BufferPool, out: &mut [(usize, usize)]) -> usize {
        let Some(ofo) = self.ofo.as_deref() else {
            return 0;
        };
        let rcv = self.inorder.end();
        let mut n = 0;
        for (slot, x) in out.iter_mut().zip(ofo.map.values()) {
            let s = x.start.wrapping_sub(rcv) as usize;
            *slot = (s, s + x.len as usize);
            n += 1;
        }
        n
    }

    /// Note a FIN at `offset` bytes after rcv_nxt (> 0: beyond a hole), carried by a
    /// segment whose data started at offset `data_from` (`<= offset`). Linux queues the
    /// FIN with its skb in the out-of-order queue (`tcp_data_queue_ofo`) and processes it
    /// when `tcp_ofo_queue` reaches it; here the FIN is remembered if the segment's bytes
    /// are all held (a segment whose data was dropped loses its FIN too, as Linux drops
    /// the whole skb), and [`take_fin`](RecvBuffer::take_fin) reports it once rcv_nxt gets
    /// there. Pruning forgets it (the FIN is the highest sequence, which Linux's
    /// `tcp_prune_ofo_queue` drops first). Returns whether it was queued.
    pub fn queue_fin(&mut self, offset: usize, data_from: usize) -> bool {
        if offset == 0 || offset >= MAX_WINDOW || data_from > offset {
            return false;
        }
        let rcv = self.inorder.end();
        if data_from < offset {
            let Some(ofo) = self.ofo.as_deref() else {
                return false;
            };
            let from = rcv.wrapping_add(data_from as u32);
            let held = ofo
                .map
                .range(..=ofo.key(from))
                .next_back()
                .is_some_and(|(_, x)| x.end().wrapping_sub(rcv) as usize >= offset);
            if !held {
                return false;
            }
        }
        if !self.fin_queued {
            self.fin = rcv.wrapping_add(offset as u32);
            self.fin_queued = true;
        }
        true
    }

    /// True (once) when rcv_nxt has reached a FIN queued by
    /// [`queue_fin`](RecvBuffer::queue_fin): the caller processes it now.
    pub fn take_fin(&mut self) -> bool {
        if !self.fin_queued {
            return false;
        }
        let rel = self.fin.wrapping_sub(self.inorder.end());
        if rel == 0 || rel as usize >= MAX_WINDOW {
            // Reached, or passed (data beyond the FIN filled in: the FIN is stale).
            self.fin_queued = false;
        }
        rel == 0
    }

    /// Drop everything (in-order and out-of-order), returning every chunk to the pool.
    pub fn clear(&mut self, pool: &mut BufferPool) {
        let mut mem = Mem {
            held: self.chunks,
            recs: 0,
            cap: usize::MAX,
            pool,
        };
        mem.free_chain(&self.inorder);
        if let Some(ofo) = self.ofo.take() {
            for x in ofo.map.values() {
                mem.free_chain(x);
            }
        }
        debug_assert_eq!(mem.held, 0);
        *self = RecvBuffer::new();
    }

    /// Discard the highest extent (Linux `tcp_prune_ofo_queue`'s step): frees its chunks
    /// and record, forgets a queued FIN, and counts it in `res`. Returns the memory freed.
    fn prune_one(&mut self, mem: &mut Mem<'_>, k: Key, x: Chain, res: &mut InsertResult) -> usize {
        work::add(1);
        if let Some(ofo) = self.ofo.as_deref_mut() {
            ofo.map.remove(&k);
        }
        let chunks = mem.free_chain(&x);
        mem.recs -= 1;
        self.ooo_bytes -= x.len;
        self.fin_queued = false;
        res.pruned += x.len as usize;
        res.pruned_extents += 1;
        truesize(chunks, 1)
    }

    /// Renege out-of-order extents, highest first, while the new bytes of the in-order
    /// segment `[s, e)` would not fit under the byte budget or in the pool (Linux
    /// `tcp_prune_queue` then `tcp_prune_ofo_queue`, which also drops from the right end).
    /// Extents beyond the segment go first; an extent the segment overlaps goes only if the
    /// pool is still short (the segment brings the overlapped bytes again).
    fn prune_for(&mut self, mem: &mut Mem<'_>, lim: usize, s: u32, e: u32, res: &mut InsertResult) {
        let Some(ofo) = self.ofo.as_deref() else {
            return;
        };
        let rcv = self.inorder.end();
        // Upper bound on the chunks the in-order chain may need to take: the aligned blocks
        // the segment spans, less the block the chain's tail already holds.
        let spanned = (rcv.wrapping_add(s) as usize % CHUNK + (e - s) as usize).div_ceil(CHUNK);
        let tail_room = self.inorder.len > 0 && !(rcv as usize).is_multiple_of(CHUNK);
        let blocks = spanned - usize::from(tail_room);
        // The most in-order data the buffer could take at all.
        let room = lim.saturating_sub(self.inorder.len as usize);
        let fits = |this: &Self, mem: &Mem<'_>, new: usize| {
            let budget = lim.saturating_sub(this.inorder.len as usize + this.ooo_bytes as usize);
            budget >= new && (new == 0 || mem.pool.available_chunks() >= blocks)
        };
        if fits(self, mem, ((e - s) as usize).min(room)) {
            return; // room for the whole segment, whatever it overlaps
        }
        let overlap_of = |x: &Chain| {
            let (xs, xe) = (x.start.wrapping_sub(rcv), x.end().wrapping_sub(rcv));
            e.min(xe).saturating_sub(s.max(xs)) as usize
        };
        // Bytes of the segment already held out of order (extents starting within it).
        let mut overlap: usize = ofo
            .map
            .range(..=ofo.key(rcv.wrapping_add(e)))
            .map(|(_, x)| {
                work::add(1);
                overlap_of(x)
            })
            .sum();
        loop {
            if fits(self, mem, ((e - s) as usize - overlap).min(room)) {
                break;
            }
            res.prune_called = true;
            let Some((k, x)) = self.ofo.as_deref().and_then(|o| o.last_from(rcv, 0)) else {
                break;
            };
            overlap -= overlap_of(&x);
            self.prune_one(mem, k, x, res);
        }
    }

    /// Make room for the out-of-order segment `[s, e)` (Linux `tcp_data_queue_ofo` ->
    /// `tcp_try_rmem_schedule` -> `tcp_prune_queue` -> `tcp_prune_ofo_queue`): if storing
    /// it could take the buffer over its memory bound, discard extents from
    /// the highest sequence down, but none that starts before the segment ("If incoming skb
    /// would land last in ofo queue, stop pruning"), at least an eighth of the memory bound
    /// at a time (Linux's goal of `sk_rcvbuf >> 3`) so that a flood pays for pruning in
    /// batches, and until the segment fits.
    fn prune_ofo(&mut self, mem: &mut Mem<'_>, s: u32, e: u32, res: &mut InsertResult) {
        let rcv = self.inorder.end();
        // What the segment could need: a chunk per aligned block it spans and a record.
        let spanned = (rcv.wrapping_add(s) as usize % CHUNK + (e - s) as usize).div_ceil(CHUNK);
        let need = truesize(spanned as u32, 1);
        let fits = |mem: &Mem<'_>| mem.truesize() + need <= mem.cap;
        if fits(mem) {
            return;
        }
        res.prune_called = true;
        let goal = mem.cap / 8;
        let mut freed = 0;
        while let Some((k, x)) = self.ofo.as_deref().and_then(|o| o.last_from(rcv, s)) {
            freed += self.prune_one(mem, k, x, res);
            if freed >= goal && fits(mem) {
                break;
            }
        }
    }
}

/// Store `bytes[..take]` at relative position `pos` into the run being built (appending to
/// it, or starting a new extent there when there is none and memory allows its record).
fn fill(
    mem: &mut Mem<'_>,
    run: &mut Option<Chain>,
    rcv: u32,
    pos: u32,
    bytes: &[u8],
    take: usize,
) -> usize {
    let bytes = &bytes[..take];
    match run {
        Some(r) => mem.append(r, bytes),
        None => {
            if take == 0 {
                return 0;
            }
            mem.recs += 1;
            let mut c = Chain::empty(rcv.wrapping_add(pos));
            let n = mem.append(&mut c, bytes);
            if n > 0 {
                *run = Some(c);
            } else {
                mem.recs -= 1;
            }
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    /// A recognisable byte stream: position `i` holds a value that differs from its
    /// neighbours and does not repeat with any power-of-two period.
    fn stream(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| ((i * 7 + i / 251) as u8) ^ seed).collect()
    }

    impl RecvBuffer {
        /// An empty buffer whose stream positions start at `origin` (to exercise wrap-around).
        fn with_origin(origin: u32) -> Self {
            let mut b = RecvBuffer::new();
            b.inorder = Chain::empty(origin);
            b
        }
    }

    /// Check the out-of-order ranges against the model (`have[i]`: stream byte `i` is held,
    /// for `i >= rcv`), and return them.
    fn check_ranges(buf: &RecvBuffer, pool: &BufferPool, have: &[bool], rcv: usize) {
        let mut got = vec![(0, 0); buf.ooo_extents() + 1];
        let n = buf.ooo_ranges(pool, &mut got);
        assert_eq!(n, buf.ooo_extents());
        got.truncate(n);
        let mut want = Vec::new();
        let mut i = rcv;
        while i < have.len() {
            if have[i] {
                let a = i;
                while i < have.len() && have[i] {
                    i += 1;
                }
                want.push((a - rcv, i - rcv));
            } else {
                i += 1;
            }
        }
        assert_eq!(got, want, "out-of-order ranges");
        assert_eq!(
            buf.ooo_bytes(),
            want.iter().map(|(a, b)| b - a).sum::<usize>()
        );
    }

    #[test]
    fn sizes() {
        assert!(
            size_of::<SendBuffer>() <= 24,
            "SendBuffer is {} bytes",
            size_of::<SendBuffer>()
        );
        assert!(
            size_of::<RecvBuffer>() <= 40,
            "RecvBuffer is {} bytes",
            size_of::<RecvBuffer>()
        );
        assert!(size_of::<InsertResult>() <= 6 * size_of::<usize>());
    }

    #[test]
    fn empty_buffers_hold_nothing() {
        let mut pool = BufferPool::new(1 << 20);
        let (mut s, mut r) = (SendBuffer::new(), RecvBuffer::new());
        assert_eq!(
            (
                s.mem_bytes(),
                r.mem_bytes(),
                pool.capacity_bytes(),
                pool.heap_bytes()
            ),
            (0, 0, 0, 0)
        );
        assert_eq!(s.write(&mut pool, &[1; 5000], 1 << 20), 5000);
        assert_eq!(s.mem_bytes(), 3 * CHUNK);
        assert_eq!(r.insert(&mut pool, 10, &[2; 100], 1 << 20).stored, 100);
        assert_eq!(pool.in_use_bytes(), 4 * CHUNK);
        s.consume(&mut pool, 5000);
        assert_eq!(r.insert(&mut pool, 0, &[2; 10], 1 << 20).advanced, 110);
        let mut out = [0; 200];
        assert!(r.ofo.is_some(), "kept while in-order data waits");
        assert_eq!(r.read(&mut pool, &mut out), 110);
        assert!(s.is_empty() && r.is_empty());
        assert!(r.ofo.is_none(), "a drained buffer holds no heap");
        assert_eq!(
            (s.mem_bytes(), r.mem_bytes(), pool.in_use_bytes()),
            (0, 0, 0)
        );
        // Capacity stays (a slab of 64 chunks), ready for reuse.
        assert_eq!(pool.capacity_bytes(), 64 * CHUNK);
    }

    #[test]
    fn send_pool_exhaustion_keeps_what_fit() {
        let mut pool = BufferPool::new(3 * CHUNK + 100);
        let mut s = SendBuffer::new();
        let data = stream(10_000, 1);
        assert_eq!(s.write(&mut pool, &data, usize::MAX), 3 * CHUNK);
        assert_eq!(s.write(&mut pool, &data[3 * CHUNK..], usize::MAX), 0);
        assert_eq!(pool.alloc_failures(), 2);
        assert_eq!(
            pool.capacity_bytes(),
            3 * CHUNK,
            "the last slab is cut at the limit"
        );
        s.consume(&mut pool, CHUNK + 10);
        assert_eq!(s.write(&mut pool, &data[3 * CHUNK..], usize::MAX), CHUNK);
        let mut out = vec![0; s.len()];
        assert_eq!(s.peek(&pool, 0, &mut out), 3 * CHUNK - 10);
        assert_eq!(out, &data[CHUNK + 10..4 * CHUNK]);
        s.clear(&mut pool);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    #[test]
    fn send_limit_and_peek_past_end() {
        let mut pool = BufferPool::new(1 << 20);
        let mut s = SendBuffer::new();
        let data = stream(5000, 2);
        assert_eq!(s.write(&mut pool, &data, 3000), 3000);
        assert_eq!(s.write(&mut pool, &data[3000..], 3000), 0);
        let mut out = [0xaa; 100];
        assert_eq!(s.peek(&pool, 2950, &mut out), 50);
        assert_eq!(&out[..50], &data[2950..3000]);
        assert_eq!(out[50..], [0xaa; 50], "bytes past the end are untouched");
        assert_eq!(s.peek(&pool, 3000, &mut out), 0);
        s.consume(&mut pool, usize::MAX);
        assert!(s.is_empty());
        assert_eq!(pool.in_use_bytes(), 0);
    }

    #[test]
    fn recv_pool_exhaustion_reports_dropped() {
        let mut pool = BufferPool::new(2 * CHUNK);
        let mut r = RecvBuffer::new();
        let data = stream(10_000, 3);
        // Out of order at 100: positions 100..5100 span blocks 0..=2; two chunks hold 100..4096.
        let res = r.insert(&mut pool, 100, &data[100..5100], 1 << 20);
        assert_eq!(
            (res.stored, res.dropped, res.duplicate, res.advanced),
            (3996, 1004, 0, 0)
        );
        // In order: the pool is empty, so the out-of-order extent is reneged to make room,
        // and the segment itself brings the overlapped bytes again.
        let res = r.insert(&mut pool, 0, &data[..1000], 1 << 20);
        assert_eq!(res.pruned, 3996);
        assert_eq!(
            (res.stored, res.dropped, res.duplicate, res.advanced),
            (1000, 0, 0, 1000)
        );
        let res = r.insert(&mut pool, 0, &data[1000..10_000], 1 << 20);
        assert_eq!((res.stored, res.dropped, res.advanced), (3096, 5904, 3096));
        let mut out = vec![0; 10_000];
        assert_eq!(r.read(&mut pool, &mut out), 4096);
        assert_eq!(out[..4096], data[..4096]);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    #[test]
    fn recv_limits_and_pruning() {
        let mut pool = BufferPool::new(1 << 20);
        let mut r = RecvBuffer::new();
        let data = stream(10_000, 4);
        let lim = 3000;
        assert_eq!(r.insert(&mut pool, 0, &data[..1000], lim).advanced, 1000);
        // Offsets are from rcv_nxt (1000). At or past the limit: dropped.
        let res = r.insert(&mut pool, 2900, &data[3900..4100], lim);
        assert_eq!((res.stored, res.dropped), (100, 100));
        let res = r.insert(&mut pool, 3000, &data[4000..4100], lim);
        assert_eq!((res.stored, res.dropped), (0, 100));
        // OOO at [2500, 3000) from rcv_nxt: total 1000 + 100 + 500 <= 3000.
        let res = r.insert(&mut pool, 2500, &data[3500..4000], lim);
        assert_eq!(
            (res.stored, res.dropped, res.duplicate),
            (400, 0, 100),
            "touching extents merge"
        );
        assert_eq!(r.ooo_extents(), 1);
        assert_eq!(r.readable() + r.ooo_bytes(), 1500);
        // In-order 1800 bytes: only 1500 fit beside the held data; the extent beyond is
        // reneged so the in-order data (up to the room left by unread data, 2000) fits.
        let res = r.insert(&mut pool, 0, &data[1000..2800], lim);
        assert_eq!(
            (res.stored, res.pruned, res.advanced, res.dropped),
            (1800, 500, 1800, 0)
        );
        assert_eq!((r.readable(), r.ooo_bytes(), r.ooo_extents()), (2800, 0, 0));
        // Full: nothing more is stored, in order or not.
        let res = r.insert(&mut pool, 0, &data[2800..3300], lim);
        assert_eq!((res.stored, res.dropped, res.advanced), (200, 300, 200));
        let res = r.insert(&mut pool, 10, &data[3010..3020], lim);
        assert_eq!((res.stored, res.dropped), (0, 10));
        let mut out = vec![0; 5000];
        assert_eq!(r.read(&mut pool, &mut out), 3000);
        assert_eq!(out[..3000], data[..3000]);
        assert!(r.is_empty());
        assert_eq!(pool.in_use_bytes(), 0);
    }

    #[test]
    fn recv_duplicates_and_overlaps_counted() {
        let mut pool = BufferPool::new(1 << 20);
        let mut r = RecvBuffer::new();
        let d = stream(20_000, 5);
        let lim = 1 << 16;
        assert_eq!(r.insert(&mut pool, 1000, &d[1000..2000], lim).stored, 1000);
        let res = r.insert(&mut pool, 1000, &d[1000..2000], lim);
        assert_eq!((res.stored, res.duplicate), (0, 1000));
        assert_eq!(r.insert(&mut pool, 3000, &d[3000..4000], lim).stored, 1000);
        // One segment over both extents and the gaps around them.
        let res = r.insert(&mut pool, 500, &d[500..4500], lim);
        assert_eq!((res.stored, res.duplicate, res.advanced), (2000, 2000, 0));
        let mut ranges = [(0, 0); 4];
        assert_eq!(r.ooo_ranges(&pool, &mut ranges), 1);
        assert_eq!(ranges[0], (500, 4500));
        let res = r.insert(&mut pool, 0, &d[..600], lim);
        assert_eq!((res.stored, res.duplicate, res.advanced), (500, 100, 4500));
        let mut out = vec![0; 5000];
        assert_eq!(r.read(&mut pool, &mut out), 4500);
        assert_eq!(out[..4500], d[..4500]);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    #[test]
    fn recv_budget_applies_to_every_gap() {
        let mut pool = BufferPool::new(1 << 20);
        let mut r = RecvBuffer::new();
        let d = stream(4000, 7);
        let lim = 3000;
        assert_eq!(r.insert(&mut pool, 0, &d[..2500], lim).advanced, 2500);
        assert_eq!(r.insert(&mut pool, 500, &d[3000..3100], lim).stored, 100);
        // 400 bytes of budget left. Segment [50, 700) from rcv_nxt: the gap before the
        // extent takes all of it ([50, 450)), the rest is dropped or duplicate.
        let res = r.insert(&mut pool, 50, &d[2550..3200], lim);
        assert_eq!((res.stored, res.duplicate, res.dropped), (400, 100, 150));
        assert_eq!(r.readable() + r.ooo_bytes(), lim);
        let mut ranges = [(0, 0); 4];
        assert_eq!(r.ooo_ranges(&pool, &mut ranges), 2);
        assert_eq!(ranges[..2], [(50, 450), (500, 600)]);
        r.clear(&mut pool);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    /// Tiny out-of-order segments each take a chunk of their own; the buffer stops taking
    /// them at the memory bound (2 * limit + 2 chunks, charged chunks plus a record each),
    /// and in-order data still flows.
    #[test]
    fn recv_memory_cap_bounds_tiny_segments() {
        let mut pool = BufferPool::new(1 << 20);
        let mut r = RecvBuffer::new();
        let d = stream(4096, 8);
        let lim = 4096;
        let mut stored = 0;
        for i in 0..100 {
            // Ascending: each lands last in the queue, so nothing is pruned for it.
            let res = r.insert(&mut pool, 2 * i + 1, &d[2 * i + 1..2 * i + 2], lim);
            stored += res.stored;
            assert_eq!(res.stored + res.dropped, 1);
            assert_eq!(res.pruned, 0);
            assert!(r.truesize() <= ooo_mem_bound(lim));
        }
        assert_eq!(ooo_mem_bound(lim), 6 * CHUNK);
        assert_eq!(
            stored, 5,
            "five one-byte extents, one chunk and a record each"
        );
        assert_eq!(r.mem_bytes(), 5 * CHUNK);
        assert_eq!(r.truesize(), 5 * (CHUNK + EXTENT_TRUESIZE));
        assert_eq!(r.ooo_extents(), 5);
        let res = r.insert(&mut pool, 0, &d, lim);
        assert_eq!((res.stored, res.duplicate, res.advanced), (4091, 5, 4096));
        let mut out = vec![0; 4096];
        assert_eq!(r.read(&mut pool, &mut out), 4096);
        assert_eq!(out, d);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    /// Hundreds of holes fill back in any order.
    #[test]
    fn recv_many_extents_fill_in_any_order() {
        let mut pool = BufferPool::new(64 << 20);
        let mut r = RecvBuffer::with_origin(u32::MAX - 700);
        let n = 1000;
        let d = stream(2 * n, 6);
        // Room for every one-byte extent (a chunk and a record each) under the bound.
        let lim = 4 << 20;
        for i in (0..n - 1).rev() {
            // Odd bytes first, highest first (each insert goes to the front of the table).
            assert_eq!(
                r.insert(&mut pool, 2 * i + 1, &d[2 * i + 1..2 * i + 2], lim)
                    .stored,
                1
            );
        }
        assert_eq!(r.ooo_extents(), n - 1);
        let mut have = vec![false; 2 * n];
        for i in 0..n - 1 {
            have[2 * i + 1] = true;
        }
        check_ranges(&r, &pool, &have, 0);
        // Even bytes in a scrambled order (a multiplicative permutation mod a prime).
        let p = 1009;
        let mut rcv = 0;
        let mut out = vec![0; 2 * n];
        let mut read = 0;
        for k in 0..p {
            let i = (k * 389) % p;
            if i >= n {
                continue;
            }
            let pos = 2 * i;
            if pos < rcv {
                continue;
            }
            let res = r.insert(&mut pool, pos - rcv, &d[pos..pos + 1], lim);
            assert_eq!(res.stored, 1);
            have[pos] = true;
            let mut adv = 0;
            while rcv + adv < 2 * n && have[rcv + adv] {
                adv += 1;
            }
            assert_eq!(res.advanced, adv);
            rcv += adv;
            if k % 50 == 0 {
                check_ranges(&r, &pool, &have, rcv);
                read += r.read(&mut pool, &mut out[read..]);
            }
        }
        read += r.read(&mut pool, &mut out[read..]);
        assert_eq!(read, 2 * n - 1, "byte 2n-1 was never sent");
        assert_eq!(out[..read], d[..read]);
        assert_eq!(r.ooo_extents(), 0);
        assert_eq!(pool.in_use_bytes(), 0);
    }

    /// CVE-2018-5390 (SegmentSmack): 100,000 one-byte out-of-order segments, in a scrambled
    /// order, cost O(n log n) work (key comparisons and extents visited, counted, not
    /// timed), the buffer's charged memory never leaves its bound, and pruning (from the
    /// highest sequence down, in batches) makes room for lower segments. The stream still
    /// arrives whole once the holes are filled.
    #[test]
    fn ofo_flood_costs_n_log_n_and_stays_bounded() {
        let n: usize = 100_000;
        let lim = 6 << 20; // tcp_rmem max
        let bound = ooo_mem_bound(lim);
        let mut pool = BufferPool::new(64 << 20);
        let mut r = RecvBuffer::with_origin(u32::MAX - 5000);
        let d = stream(2 * n + 1, 12);
        let p = 100_003; // prime: k -> k * 7919 mod p permutes 0..p
        let (mut prune_calls, mut pruned_extents, mut stored, mut dropped) = (0, 0u64, 0, 0);
        let mut most = 0;
        work::take();
        for k in 0..p {
            let i = (k * 7919) % p;
            if i >= n {
                continue;
            }
            let at = 2 * i + 1;
            let res = r.insert(&mut pool, at, &d[at..at + 1], lim);
            assert!(r.truesize() <= bound, "{} over {bound}", r.truesize());
            prune_calls += usize::from(res.prune_called);
            pruned_extents += u64::from(res.pruned_extents);
            stored += res.stored;
            dropped += res.dropped;
            most = most.max(r.ooo_extents());
        }
        let work = work::take();
        let nlogn = n as f64 * (n as f64).log2();
        assert!(
            (work as f64) < 12.0 * nlogn,
            "work {work} for n log n = {nlogn:.0}"
        );
        assert_eq!(stored + dropped, n);
        // Each one-byte extent is charged a chunk and a record: the bound holds ~5,950,
        // and the queue filled up to it.
        let per = CHUNK + EXTENT_TRUESIZE;
        assert_eq!(most, bound / per);
        assert!(prune_calls > 50, "prune calls {prune_calls}");
        eprintln!(
            "flood: work {work} ({:.2} n log2 n), {prune_calls} prune calls, \
             {pruned_extents} extents pruned, {dropped} refused, {} held",
            work as f64 / nlogn,
            r.ooo_extents()
        );
        // Pruning goes in batches (an eighth of the bound, unless it reaches the segment).
        assert!(pruned_extents > 20 * prune_calls as u64);
        assert_eq!(stored as u64 - pruned_extents, r.ooo_extents() as u64);
        // Fill every hole in order: the whole stream reads back.
        let res = r.insert(&mut pool, 0, &d[..2 * n + 1], lim);
        assert_eq!(res.advanced, 2 * n + 1);
        let mut out = vec![0; 2 * n + 1];
        assert_eq!(r.read(&mut pool, &mut out), 2 * n + 1);
        assert_eq!(out, d);
        assert!(r.is_empty());
        assert_eq!(pool.in_use_bytes(), 0);
    }

    /// The overlap policy (Linux's): in-order data replaces queued out-of-order bytes it
    /// covers; an out-of-order segment replaces an extent that starts inside it or that it
    /// covers from its start, and keeps the bytes of one that starts before it.
    #[test]
    fn overlap_newer_data_wins_as_linux() {
        let mut pool = BufferPool::new(1 << 20);
        let lim = 1 << 16;
        let read_all = |r: &mut RecvBuffer, pool: &mut BufferPool| {
            let mut out = vec![0; 100];
            let n = r.read(pool, &mut out);
            out.truncate(n);
            out
        };
        // In-order data over queued bytes: the in-order bytes are read.
        let mut r = RecvBuffer::new();
        assert_eq!(r.insert(&mut pool, 10, b"oooooooooo", lim).stored, 10);
        let res = r.insert(&mut pool, 0, b"NNNNNNNNNNNNNNNNNNNNNNNNN", lim);
        assert_eq!((res.stored, res.duplicate, res.advanced), (15, 10, 25));
        assert_eq!(read_all(&mut r, &mut pool), b"NNNNNNNNNNNNNNNNNNNNNNNNN");
        // In-order data that reaches into a queued extent: the overlap is the new bytes,
        // the extent's tail beyond it stays.
        assert_eq!(r.insert(&mut pool, 5, b"oooooooooo", lim).stored, 10);
        let res = r.insert(&mut pool, 0, b"NNNNNNNN", lim);
        assert_eq!((res.duplicate, res.advanced), (3, 15));
        assert_eq!(read_all(&mut r, &mut pool), b"NNNNNNNNooooooo");
        // Out of order, at 10..20 'a'. A segment 5..25 covering it replaces it; one inside
        // it (12..15) does not; one starting inside it (15..30) keeps the queued 15..25;
        // one at the same start that covers it (5..26) replaces it again.
        assert_eq!(r.insert(&mut pool, 10, &[b'a'; 10], lim).stored, 10);
        assert_eq!(r.insert(&mut pool, 5, &[b'c'; 20], lim).duplicate, 10);
        assert_eq!(r.insert(&mut pool, 12, &[b'd'; 3], lim).duplicate, 3);
        assert_eq!(r.insert(&mut pool, 15, &[b'e'; 15], lim).stored, 5);
        assert_eq!(r.insert(&mut pool, 0, b"xxxxx", lim).advanced, 30);
        let mut want = b"xxxxx".to_vec();
        want.extend([b'c'; 20]);
        want.extend([b'e'; 5]);
        assert_eq!(read_all(&mut r, &mut pool), want);
        assert_eq!(r.insert(&mut pool, 5, &[b'f'; 5], lim).stored, 5);
        assert_eq!(r.insert(&mut pool, 5, &[b'g'; 6], lim).duplicate, 5);
        assert_eq!(r.insert(&mut pool, 0, b"yyyyy", lim).advanced, 11);
        assert_eq!(read_all(&mut r, &mut pool), b"yyyyygggggg");
        assert_eq!(pool.in_use_bytes(), 0);
    }

    /// A FIN beyond a hole is remembered while its segment's bytes are held, reported once
    /// rcv_nxt reaches it, and forgotten when pruning discards the data before it.
    #[test]
    fn fin_beyond_a_hole_is_queued() {
        let mut pool = BufferPool::new(1 << 20);
        let lim = 1 << 16;
        let mut r = RecvBuffer::new();
        assert!(!r.queue_fin(20, 10), "the segment's data is not held");
        assert_eq!(r.insert(&mut pool, 10, &[1; 10], lim).stored, 10);
        assert!(r.queue_fin(20, 10));
        assert!(!r.take_fin(), "not reached");
        assert_eq!(r.insert(&mut pool, 0, &[2; 5], lim).advanced, 5);
        assert!(!r.take_fin(), "a hole remains");
        assert_eq!(r.insert(&mut pool, 0, &[3; 5], lim).advanced, 15);
        assert!(r.take_fin(), "the hole filled up to the FIN");
        assert!(!r.take_fin(), "reported once");
        r.clear(&mut pool);
        // A bare FIN (no data) beyond a hole.
        assert!(r.queue_fin(7, 7));
        assert_eq!(r.insert(&mut pool, 0, &[4; 7], lim).advanced, 7);
        assert!(r.take_fin());
        r.clear(&mut pool);
        // Pruned: in-order data that needs the room discards the extent and its FIN.
        let mut tiny = BufferPool::new(2 * CHUNK);
        assert_eq!(r.insert(&mut tiny, 3000, &[5; 100], lim).stored, 100);
        assert!(r.queue_fin(3100, 3000));
        let res = r.insert(&mut tiny, 0, &[6; 4000], lim);
        assert!(res.prune_called && res.pruned == 100, "{res:?}");
        r.clear(&mut tiny);
        assert_eq!(r.insert(&mut tiny, 0, &[6; 3100], lim).advanced, 3100);
        assert!(!r.take_fin(), "the FIN went with its data");
        r.clear(&mut tiny);
    }

    /// The per-extent charge covers a B-tree leaf of `Key -> Chain` at its minimum
    /// occupancy (5 of 11) with an allocator header, plus the share of an internal node
    /// (12 more edges) over at least 6 such leaves.
    #[test]
    fn extent_truesize_covers_the_tree() {
        let header = 16;
        let leaf = 2 * size_of::<usize>() + 11 * (size_of::<Key>() + size_of::<Chain>());
        let internal = leaf + 12 * size_of::<usize>();
        let per_extent = (leaf + header).div_ceil(5) + (internal + header).div_ceil(6 * 5);
        assert!(EXTENT_TRUESIZE >= per_extent, "{per_extent}");
    }

    #[derive(Debug, Clone)]
    enum SendOp {
        Write(usize, usize),
        Peek(usize, usize),
        Consume(usize),
        Clear,
    }

    fn send_op() -> impl Strategy<Value = SendOp> {
        prop_oneof![
            4 => (0usize..9000, 0usize..40_000).prop_map(|(n, l)| SendOp::Write(n, l)),
            4 => (0usize..40_000, 0usize..6000).prop_map(|(o, n)| SendOp::Peek(o, n)),
            3 => (0usize..9000).prop_map(SendOp::Consume),
            1 => Just(SendOp::Clear),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any sequence of writes, peeks and consumes behaves like a byte queue, holds exactly
        /// the chunks its bytes need, and returns them all.
        #[test]
        fn send_matches_model(pool_chunks in prop_oneof![2usize..12, Just(1000)],
                              ops in proptest::collection::vec(send_op(), 1..60)) {
            let mut pool = BufferPool::new(pool_chunks * CHUNK);
            let mut s = SendBuffer::new();
            let mut model: VecDeque<u8> = VecDeque::new();
            let mut next_byte = 0usize;
            for op in ops {
                match op {
                    SendOp::Write(n, limit) => {
                        let data: Vec<u8> = (next_byte..next_byte + n).map(|i| (i * 13 + i / 256) as u8).collect();
                        let fits = n.min(limit.saturating_sub(model.len()));
                        let took = s.write(&mut pool, &data, limit);
                        prop_assert!(took <= fits);
                        if took < fits {
                            // Short only because the pool ran dry, after filling the tail.
                            prop_assert_eq!(pool.available_chunks(), 0);
                            prop_assert_eq!((s.head_off as usize + s.len()) % CHUNK, 0);
                        }
                        model.extend(&data[..took]);
                        next_byte += took;
                    }
                    SendOp::Peek(off, n) => {
                        let mut out = vec![0xee; n];
                        let got = s.peek(&pool, off, &mut out);
                        let want: Vec<u8> = model.iter().skip(off).take(n).copied().collect();
                        prop_assert_eq!(got, want.len());
                        prop_assert_eq!(&out[..got], &want[..]);
                        prop_assert!(out[got..].iter().all(|&b| b == 0xee));
                    }
                    SendOp::Consume(n) => {
                        s.consume(&mut pool, n);
                        model.drain(..n.min(model.len()));
                    }
                    SendOp::Clear => {
                        s.clear(&mut pool);
                        model.clear();
                    }
                }
                prop_assert_eq!(s.len(), model.len());
                prop_assert_eq!(pool.in_use_bytes(), s.mem_bytes());
                prop_assert!(pool.in_use_bytes() <= pool.limit_bytes());
                let chunks = (s.head_off as usize + s.len()).div_ceil(CHUNK);
                prop_assert_eq!(s.mem_bytes(), if s.is_empty() { 0 } else { chunks * CHUNK });
            }
            let mut all = vec![0; model.len()];
            prop_assert_eq!(s.peek(&pool, 0, &mut all), model.len());
            prop_assert!(all.iter().eq(model.iter()));
            s.consume(&mut pool, model.len());
            prop_assert!(s.is_empty());
            prop_assert_eq!(pool.in_use_bytes(), 0, "leak");
        }
    }

    /// Segments of a stream: a cover (cut at random points, so every byte is sent at least
    /// once) plus random extra ranges (retransmissions overlapping arbitrarily), shuffled.
    fn segments(max_len: usize) -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
        (1usize..max_len).prop_flat_map(|len| {
            let cuts = proptest::collection::vec(0..len, 0..24);
            let extra = proptest::collection::vec((0..len, 1usize..3000), 0..12);
            (Just(len), cuts, extra).prop_flat_map(|(len, mut cuts, extra)| {
                cuts.push(0);
                cuts.push(len);
                cuts.sort_unstable();
                cuts.dedup();
                let mut segs: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
                segs.extend(extra.into_iter().map(|(a, n)| (a, (a + n).min(len))));
                (Just(len), Just(segs).prop_shuffle())
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Without memory pressure: any order, duplication and overlap of a stream's
        /// segments reads back exactly the stream, and every insert's accounting and the
        /// out-of-order ranges match a byte-exact model.
        #[test]
        fn recv_reassembles_any_order((len, segs) in segments(16_000),
                                      origin in prop_oneof![Just(0u32), any::<u32>(), (u32::MAX - 20_000)..=u32::MAX],
                                      reads in proptest::collection::vec(0usize..5000, 64)) {
            let d = stream(len, 9);
            let lim = 1 << 20;
            let mut pool = BufferPool::new(64 << 20);
            let mut r = RecvBuffer::with_origin(origin);
            let mut have = vec![false; len];
            let (mut rcv, mut read) = (0usize, 0usize);
            let mut out = vec![0u8; len];
            for (n, &(a, b)) in segs.iter().enumerate() {
                if b <= rcv {
                    continue; // wholly old: the caller drops it before the buffer
                }
                let a = a.max(rcv); // the caller trims the old part
                let res = r.insert(&mut pool, a - rcv, &d[a..b], lim);
                let new = have[a..b].iter().filter(|&&h| !h).count();
                prop_assert_eq!(res.stored, new);
                prop_assert_eq!(res.duplicate, b - a - new);
                prop_assert_eq!((res.dropped, res.pruned), (0, 0));
                have[a..b].iter_mut().for_each(|h| *h = true);
                let mut adv = 0;
                while rcv + adv < len && have[rcv + adv] {
                    adv += 1;
                }
                prop_assert_eq!(res.advanced, adv);
                rcv += adv;
                prop_assert_eq!(r.readable(), rcv - read);
                check_ranges(&r, &pool, &have, rcv);
                prop_assert_eq!(pool.in_use_bytes(), r.mem_bytes());
                let got = r.read(&mut pool, &mut out[read..read + reads[n % reads.len()].min(len - read)]);
                read += got;
                prop_assert_eq!(&out[..read], &d[..read]);
            }
            read += r.read(&mut pool, &mut out[read..]);
            prop_assert_eq!(read, len);
            prop_assert_eq!(&out, &d);
            prop_assert!(r.is_empty());
            prop_assert_eq!(pool.in_use_bytes(), 0, "leak");
        }

        /// Under a tight byte limit and a tiny pool: the limit holds after every insert,
        /// accounting adds up, ranges stay sorted and disjoint within the window, what is read
        /// is always a prefix of the stream, and retransmitting rounds deliver all of it.
        #[test]
        fn recv_under_pressure((len, segs) in segments(12_000),
                               lim in 1usize..9000,
                               pool_chunks in 4usize..12,
                               origin in any::<u32>(),
                               reads in proptest::collection::vec(0usize..3000, 64),
                               abandon in any::<bool>()) {
            let d = stream(len, 10);
            let mut pool = BufferPool::new(pool_chunks * CHUNK);
            let mut r = RecvBuffer::with_origin(origin);
            let (mut rcv, mut read) = (0usize, 0usize);
            let mut out = vec![0u8; len];
            let mut ranges = vec![(0, 0); 4096];
            let mut rounds = 0;
            let mut n = 0;
            while read < len {
                rounds += 1;
                let rcv_before = rcv;
                for &(a, b) in &segs {
                    if b <= rcv {
                        continue;
                    }
                    let a = a.max(rcv);
                    let before = r.readable() + r.ooo_bytes();
                    let res = r.insert(&mut pool, a - rcv, &d[a..b], lim);
                    prop_assert_eq!(res.stored + res.dropped + res.duplicate, b - a);
                    prop_assert_eq!(r.readable() + r.ooo_bytes(), before + res.stored - res.pruned);
                    prop_assert!(r.readable() + r.ooo_bytes() <= lim, "limit exceeded");
                    // Out-of-order data stays under the bound; in-order data needs at most
                    // one chunk per aligned block it spans.
                    let inorder_chunks = r.readable().div_ceil(CHUNK) + 1;
                    prop_assert!(r.truesize() <= ooo_mem_bound(lim) + inorder_chunks * CHUNK,
                                 "memory {} for limit {}", r.truesize(), lim);
                    prop_assert_eq!(pool.in_use_bytes(), r.mem_bytes());
                    rcv += res.advanced;
                    prop_assert_eq!(r.readable(), rcv - read);
                    let k = r.ooo_ranges(&pool, &mut ranges);
                    let mut prev_end = 0;
                    for &(s, e) in &ranges[..k] {
                        prop_assert!(s > prev_end && s < e && e <= lim, "bad ranges {:?}", &ranges[..k]);
                        prev_end = e;
                    }
                    prop_assert_eq!(ranges[..k].iter().map(|(s, e)| e - s).sum::<usize>(), r.ooo_bytes());
                    n += 1;
                    let got = r.read(&mut pool, &mut out[read..read + reads[n % reads.len()].min(len - read)]);
                    read += got;
                    prop_assert_eq!(&out[..read], &d[..read]);
                }
                // Every round makes progress: at its start nothing is unread, and the
                // segment at rcv_nxt always finds room (pruning out-of-order data if need be).
                prop_assert!(rcv > rcv_before, "no progress in round {}: rcv {} of {}", rounds, rcv, len);
                if abandon && rounds == 2 {
                    break;
                }
                read += r.read(&mut pool, &mut out[read..]);
                prop_assert_eq!(&out[..read], &d[..read]);
            }
            r.clear(&mut pool);
            prop_assert_eq!((r.readable(), r.ooo_bytes(), r.mem_bytes()), (0, 0, 0));
            prop_assert_eq!(pool.in_use_bytes(), 0, "leak");
        }
    }

    /// Throughput of the send path's steady state: write 64 KiB, peek it in 1448-byte
    /// segments, consume it, over 64 MiB. Run with
    /// `cargo test --release -p ustack-stack --lib tcp::buffer -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn throughput_64mib() {
        let mut pool = BufferPool::new(80 << 20);
        let mut s = SendBuffer::new();
        let mut r = RecvBuffer::new();
        let block = stream(64 << 10, 11);
        let mut seg = vec![0u8; 1448];
        let total = 64usize << 20;
        let t = std::time::Instant::now();
        let mut moved = 0;
        while moved < total {
            assert_eq!(s.write(&mut pool, &block, 1 << 20), block.len());
            let mut off = 0;
            while off < block.len() {
                off += s.peek(&pool, off, &mut seg);
                std::hint::black_box(&seg);
            }
            s.consume(&mut pool, block.len());
            moved += block.len();
        }
        let send = t.elapsed();
        // The same bytes with a 64 MiB working set: write it all, peek it all, consume it
        // all (memory-bound rather than cache-resident). The first pass grows the pool
        // (first-touch page faults on fresh slabs); the second reuses its chunks.
        let mut send_big = [std::time::Duration::ZERO; 2];
        for time in &mut send_big {
            let t = std::time::Instant::now();
            for _ in 0..total / block.len() {
                assert_eq!(s.write(&mut pool, &block, total), block.len());
            }
            let mut off = 0;
            while off < total {
                off += s.peek(&pool, off, &mut seg);
                std::hint::black_box(&seg);
            }
            s.consume(&mut pool, total);
            *time = t.elapsed();
        }
        // Receive: 1448-byte segments, in order, then with each pair swapped (every other
        // segment arrives out of order and is joined by the next).
        let mut out = vec![0u8; 64 << 10];
        let mut recv = [std::time::Duration::ZERO; 2];
        for (swapped, time) in recv.iter_mut().enumerate() {
            let t = std::time::Instant::now();
            let mut moved = 0;
            while moved < total {
                let mut off = 0;
                while off < block.len() {
                    let mid = (off + 1448).min(block.len());
                    let end = (mid + 1448).min(block.len());
                    if swapped == 1 && mid < end {
                        let res = r.insert(&mut pool, mid - off, &block[mid..end], 1 << 20);
                        assert_eq!((res.stored, res.advanced), (end - mid, 0));
                    }
                    let res = r.insert(&mut pool, 0, &block[off..mid], 1 << 20);
                    if swapped == 0 && mid < end {
                        assert_eq!(
                            r.insert(&mut pool, 0, &block[mid..end], 1 << 20).advanced,
                            end - mid
                        );
                    }
                    assert!(res.advanced >= mid - off);
                    off = end;
                }
                assert_eq!(r.read(&mut pool, &mut out), block.len());
                moved += block.len();
            }
            *time = t.elapsed();
            assert_eq!(out, block);
        }
        assert_eq!(pool.in_use_bytes(), 0);
        let gbps = |d: std::time::Duration| total as f64 / d.as_secs_f64() / 1e9;
        println!(
            "64 MiB: send write+peek+consume, 64 KiB at a time {:.2} GB/s ({:?}), all at once \
             {:.2} GB/s cold ({:?}), {:.2} GB/s warm ({:?}); recv in-order insert+read {:.2} GB/s ({:?}); \
             recv pairs swapped {:.2} GB/s ({:?})",
            gbps(send),
            send,
            gbps(send_big[0]),
            send_big[0],
            gbps(send_big[1]),
            send_big[1],
            gbps(recv[0]),
            recv[0],
            gbps(recv[1]),
            recv[1],
        );
    }
}
