//! The receive buffer: in-order data waiting to be read, and the out-of-order queue.
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
//! - An extent is a `Extent` `{start, len, head, tail}` in the out-of-order queue, a
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
//!   [`EXTENT_TRUESIZE`] per extent (`RecvBuffer::truesize`, Linux's `sk_rmem_alloc` of
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

use core::ops::Bound;
use std::collections::BTreeMap;

use super::lent::LentSeg;
use super::pool::{BufferPool, CHUNK, NONE};
use crate::counted::{Key, work};

/// RFC 7323 §2.3: the largest receive window (2^30 bytes). Data further than this from
/// `rcv_nxt` is never acceptable, which also keeps wrapping position arithmetic exact.
const MAX_WINDOW: usize = 1 << 30;

/// A run of contiguous bytes at stream positions `[start, start + len)`, in a chain of
/// position-aligned chunks: the byte at position `p` is at offset `p % CHUNK` of its chunk.
/// `len == 0` iff `head == NONE`; the tail's link is always `NONE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    start: u32,
    len: u32,
    head: u32,
    tail: u32,
}

impl Extent {
    pub(super) const fn empty(start: u32) -> Self {
        Extent {
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
struct ChargedPool<'a> {
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

impl ChargedPool<'_> {
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
    fn append(&mut self, ch: &mut Extent, data: &[u8]) -> usize {
        self.append_with(ch, data.len(), |pool, piece, done| {
            let (c, off, k) = piece;
            pool.chunk_mut(c)[off..off + k].copy_from_slice(&data[done..done + k]);
        })
    }

    /// Append `len` bytes at `ch.end()`, each piece stored by `put(pool, (chunk, off, k),
    /// done)`: bytes `done..done + k` of the run go to `chunk` at `off`. Returns the
    /// bytes stored (fewer if allocation failed).
    #[inline]
    fn append_with(
        &mut self,
        ch: &mut Extent,
        len: usize,
        mut put: impl FnMut(&mut BufferPool, (u32, usize, usize), usize),
    ) -> usize {
        let mut done = 0;
        while done < len {
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
            let k = (CHUNK - off).min(len - done);
            put(self.pool, (c, off, k), done);
            done += k;
            ch.len += k as u32;
        }
        done
    }

    /// Copy `data` over the first `data.len()` (`<= ch.len`) bytes of `ch`. Costs the copy
    /// plus one link per chunk it touches.
    fn overwrite_head(&mut self, ch: &Extent, data: &[u8]) {
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
    fn concat(&mut self, a: &mut Extent, b: Extent) {
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
    fn free_chain(&mut self, ch: &Extent) -> u32 {
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
/// `Extent` (20 bytes) in nodes of 11 that are at least 5 full (232 bytes per leaf, 328
/// per internal node, one internal node per 6 or more leaves), plus the allocator's
/// header, rounded up. Checked against the real type sizes by a test.
pub const EXTENT_TRUESIZE: usize = 64;

/// The out-of-order queue (Linux `tp->out_of_order_queue`, an rbtree of skbs): extents
/// keyed by the distance of their start from `base`, sorted, disjoint and non-touching.
/// Boxed (so the buffer stays small), and freed when the buffer is drained (so an idle
/// buffer holds no heap; see `RecvBuffer::release_ofo`).
#[derive(Debug)]
pub(super) struct OfoQueue {
    map: BTreeMap<Key, Extent>,
    /// A position at or before `rcv_nxt` that keys count from. Every extent lies within
    /// `MAX_WINDOW` after `rcv_nxt`; keys stay ordered as long as `rcv_nxt - base` stays
    /// below `2^31` (re-based, O(extents), after every 2 GiB of stream, see `rebase`).
    base: u32,
}

impl OfoQueue {
    fn key(&self, pos: u32) -> Key {
        Key(pos.wrapping_sub(self.base))
    }

    /// The highest extent, if it starts at or after relative position `from` (`rcv` is
    /// `rcv_nxt`'s position).
    fn last_from(&self, rcv: u32, from: u32) -> Option<(Key, Extent)> {
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
    pub(super) inorder: Extent,
    /// The out-of-order queue; `None` when the buffer is drained.
    pub(super) ofo: Option<Box<OfoQueue>>,
    /// Out-of-order bytes held.
    ooo_bytes: u32,
    /// Chunks held.
    chunks: u32,
    /// Position of a FIN received beyond a hole (valid iff `fin_queued`).
    fin: u32,
    fin_queued: bool,
    /// In-order segments whose payload is still in a frame the device lent (see
    /// [`super::lent`]): the number of their queue in the pool (`LentFrames`), 0 when
    /// there are none. They come before every copied byte: `inorder` counts them (its
    /// `start` is the first of them, `len` includes them) and its chunks hold the bytes
    /// after them, so that `readable()` and the window stay one field's read.
    lent: u16,
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
            inorder: Extent::empty(0),
            ofo: None,
            ooo_bytes: 0,
            chunks: 0,
            fin: 0,
            fin_queued: false,
            lent: 0,
        }
    }

    /// In-order bytes the application can read.
    pub fn readable(&self) -> usize {
        self.inorder.len as usize
    }

    /// Whether an in-order segment may be held in the frame the device lent: nothing out
    /// of order and no copied byte waiting (lent segments come before every copied byte,
    /// so a segment after copied bytes is copied too).
    #[inline]
    pub fn can_hold_lent(&self) -> bool {
        self.inorder.head == NONE && self.ofo.is_none() && !self.fin_queued
    }

    /// [`insert`](Self::insert) of in-order data of `len` bytes left at `from` in lent
    /// frame `id` (the caller checked [`can_hold_lent`](Self::can_hold_lent)): the
    /// queue holds the frame instead of a copy, up to `limit` as `insert` stores (the
    /// rest dropped). Nothing stored (`stored == 0`): the frame is not held.
    pub fn append_lent(
        &mut self,
        pool: &mut BufferPool,
        (id, from): (u32, usize),
        len: usize,
        limit: usize,
    ) -> InsertResult {
        debug_assert!(self.can_hold_lent());
        let room = limit.min(MAX_WINDOW).saturating_sub(self.readable());
        let mut n = len.min(room);
        if self.lent == 0 && n > 0 {
            match pool.lent.new_queue() {
                Some(q) => self.lent = q,
                None => n = 0,
            }
        }
        if n > 0 {
            let q = pool.lent.queue(self.lent);
            q.segs.push_back(LentSeg {
                id,
                from: from as u32,
                len: n as u32,
            });
            q.bytes += n as u32;
            self.inorder.len += n as u32;
        }
        InsertResult {
            advanced: n,
            stored: n,
            dropped: len - n,
            ..InsertResult::default()
        }
    }

    /// Runs `f` on the buffer as it is without its lent segments (`inorder` as its
    /// chunks' bytes alone, `limit` less the lent bytes), then puts them back.
    #[inline(never)]
    fn without_lent<R>(
        &mut self,
        pool: &mut BufferPool,
        limit: usize,
        f: impl FnOnce(&mut Self, &mut BufferPool, usize) -> R,
    ) -> R {
        let q = self.lent;
        let l = pool.lent.bytes(q);
        self.lent = 0;
        self.inorder.start = self.inorder.start.wrapping_add(l);
        self.inorder.len -= l;
        let r = f(self, pool, limit.saturating_sub(l as usize));
        self.inorder.start = self.inorder.start.wrapping_sub(l);
        self.inorder.len += l;
        self.lent = q;
        r
    }

    /// [`read`](Self::read) with lent segments at the front: each copied once, from the
    /// device's frame into `out` ([`super::lent::LentFrames::read`]), its frame released
    /// when read to the end; then copied bytes, as `read` takes them.
    #[inline(never)]
    fn read_lent(&mut self, pool: &mut BufferPool, out: &mut [u8]) -> usize {
        let mut done = 0;
        while done < out.len() && self.lent != 0 {
            let q = pool.lent.queue(self.lent);
            let Some(seg) = q.segs.front_mut() else {
                pool.lent.free_queue(self.lent);
                self.lent = 0;
                break;
            };
            let (id, from) = (seg.id, seg.from as usize);
            let k = (seg.len as usize).min(out.len() - done);
            seg.from += k as u32;
            seg.len -= k as u32;
            let last = seg.len == 0;
            q.bytes -= k as u32;
            if last {
                q.segs.pop_front();
            }
            let empty = q.segs.is_empty();
            pool.lent.read(id, from, &mut out[done..done + k]);
            self.inorder.start = self.inorder.start.wrapping_add(k as u32);
            self.inorder.len -= k as u32;
            done += k;
            if last {
                pool.lent.release(id);
            }
            if empty {
                pool.lent.free_queue(self.lent);
                self.lent = 0;
            }
        }
        if done < out.len() && self.lent == 0 {
            done += self.read(pool, &mut out[done..]);
        } else if self.inorder.len == 0 {
            self.release_ofo();
        }
        done
    }

    /// [`peek`](Self::peek) of the lent segments at the front, then the copied bytes.
    #[inline(never)]
    fn peek_lent(&self, pool: &BufferPool, out: &mut [u8]) -> usize {
        let n = out.len().min(self.inorder.len as usize);
        let mut done = 0;
        for seg in pool.lent.segs(self.lent) {
            if done == n {
                return done;
            }
            let k = (seg.len as usize).min(n - done);
            if !pool
                .lent
                .read_only(seg.id, seg.from as usize, &mut out[done..done + k])
            {
                out[done..done + k].fill(0);
            }
            done += k;
        }
        let start = self.inorder.start.wrapping_add(pool.lent.bytes(self.lent));
        done + self.peek_from(pool, (self.inorder.head, start), &mut out[done..n])
    }

    /// Out-of-order bytes held.
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes as usize
    }

    /// Nothing out of order and no FIN queued beyond a hole: a segment at `rcv_nxt` only
    /// appends (the receive fast path's test, Linux's empty `out_of_order_queue`).
    #[inline]
    pub fn in_order_only(&self) -> bool {
        self.ofo.is_none() && !self.fin_queued
    }

    /// Number of out-of-order extents (holes after `rcv_nxt` = this many).
    pub fn ooo_extents(&self) -> usize {
        self.ofo.as_ref().map_or(0, |o| o.map.len())
    }

    /// Pool memory this buffer holds: its chunks * [`CHUNK`].
    pub fn mem_bytes(&self) -> usize {
        self.chunks as usize * CHUNK
    }

    /// The most chunks storing `len` bytes at `offset` after rcv_nxt can take: one per
    /// aligned block the bytes span (what Linux charges up front, the skb's truesize,
    /// before `tcp_data_queue` queues it).
    pub fn chunks_for(&self, offset: usize, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let start = self.inorder.end().wrapping_add(offset as u32) as usize % CHUNK;
        (start + len).div_ceil(CHUNK)
    }

    /// Discard every out-of-order extent that starts at or after `offset` bytes past
    /// rcv_nxt, highest first (Linux `tcp_prune_ofo_queue` under memory pressure, which
    /// does not stop at `sk_rcvbuf >> 3` while `tcp_under_memory_pressure`; "If incoming
    /// skb would land last in ofo queue, stop pruning"). Counts into `res`; returns the
    /// chunks freed.
    pub fn prune_ofo_from(
        &mut self,
        pool: &mut BufferPool,
        offset: usize,
        res: &mut InsertResult,
    ) -> usize {
        let rcv = self.inorder.end();
        let mut mem = ChargedPool {
            held: self.chunks,
            recs: self.ooo_extents() as u32,
            cap: usize::MAX,
            pool,
        };
        let before = mem.held;
        while let Some((k, x)) = self
            .ofo
            .as_deref()
            .and_then(|o| o.last_from(rcv, offset.min(MAX_WINDOW) as u32))
        {
            self.prune_one(&mut mem, k, x, res);
        }
        let freed = (before - mem.held) as usize;
        self.chunks = mem.held;
        self.release_ofo();
        freed
    }

    /// The memory this buffer is charged for (Linux `sk_rmem_alloc`): its chunks plus
    /// [`EXTENT_TRUESIZE`] per out-of-order extent. Out-of-order data is stored only while
    /// this stays within [`ooo_mem_bound`] of the limit.
    #[cfg(test)]
    pub fn truesize(&self) -> usize {
        truesize(self.chunks, self.ooo_extents() as u32)
    }

    /// True when nothing is held (and so no chunk).
    #[cfg(test)]
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
    #[inline]
    pub fn insert(
        &mut self,
        pool: &mut BufferPool,
        offset: usize,
        data: &[u8],
        limit: usize,
    ) -> InsertResult {
        if self.lent != 0 {
            return self.without_lent(pool, limit, |b, pool, limit| {
                b.insert(pool, offset, data, limit)
            });
        }
        if offset == 0 && self.ofo.is_none() {
            return self.append_in_order(pool, data, limit);
        }
        self.insert_walk(pool, (offset, data), limit)
    }

    /// [`RecvBuffer::insert`] of `(offset, data)` with an out-of-order queue or
    /// out-of-order data: the walk over the extents, out of line.
    #[inline(never)]
    fn insert_walk(
        &mut self,
        pool: &mut BufferPool,
        seg: (usize, &[u8]),
        limit: usize,
    ) -> InsertResult {
        let (offset, data) = seg;
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

        let mut mem = ChargedPool {
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
        let mut budget = lim.saturating_sub(self.readable() + self.ooo_bytes as usize);

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
        let ofo: &mut OfoQueue = self.ofo.get_or_insert_with(|| {
            Box::new(OfoQueue {
                map: BTreeMap::new(),
                base: rcv,
            })
        });

        let mut run: Option<Extent> = in_order.then_some(self.inorder);
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
    /// Returns the bytes copied. A read that ends within the head chunk (every read of
    /// data that arrived in small segments, see [`RecvBuffer::append_in_order`]) is one
    /// copy, inline; a longer one walks the chain out of line.
    #[inline]
    pub fn read(&mut self, pool: &mut BufferPool, out: &mut [u8]) -> usize {
        if self.lent != 0 {
            return self.read_lent(pool, out);
        }
        let n = out.len().min(self.inorder.len as usize);
        if n == 0 {
            return 0;
        }
        let off = self.inorder.start as usize % CHUNK;
        if n > CHUNK - off {
            return self.read_chunks(pool, &mut out[..n]);
        }
        out[..n].copy_from_slice(&pool.chunk(self.inorder.head)[off..off + n]);
        self.consume_head(pool, n);
        if self.inorder.len == 0 {
            self.release_ofo();
        }
        n
    }

    /// Take `k` bytes (all within the head chunk) off the front of the in-order chain,
    /// freeing the head chunk when they were its last.
    #[inline]
    fn consume_head(&mut self, pool: &mut BufferPool, k: usize) {
        let ch = &mut self.inorder;
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

    /// [`RecvBuffer::read`] of `out.len()` (`<=` readable) bytes spanning chunks.
    #[inline(never)]
    fn read_chunks(&mut self, pool: &mut BufferPool, out: &mut [u8]) -> usize {
        let n = out.len();
        let mut done = 0;
        while done < n {
            let off = self.inorder.start as usize % CHUNK;
            let k = (CHUNK - off).min(n - done);
            out[done..done + k].copy_from_slice(&pool.chunk(self.inorder.head)[off..off + k]);
            done += k;
            self.consume_head(pool, k);
        }
        self.release_ofo();
        n
    }

    /// [`RecvBuffer::insert`] of in-order data with no out-of-order queue (Linux
    /// `tcp_rcv_established`'s `tcp_queue_rcv`: the segment joins the receive queue's
    /// tail): the bytes under `limit` are copied once onto the in-order chain and the rest
    /// dropped, exactly as `insert` does for them (nothing to prune, no extent to merge),
    /// without its out-of-order walk. A segment that fits in the room left in the tail
    /// chunk is copied into it (Linux `tcp_try_coalesce`: a small segment joins the tail
    /// skb instead of being queued with its own buffer); one that fits in the rest of its
    /// aligned block takes one new chunk; only a segment crossing a block boundary walks
    /// the general append.
    #[inline]
    fn append_in_order(
        &mut self,
        pool: &mut BufferPool,
        data: &[u8],
        limit: usize,
    ) -> InsertResult {
        debug_assert_eq!(
            self.ooo_bytes, 0,
            "no out-of-order queue, no out-of-order bytes"
        );
        let room = limit.min(MAX_WINDOW).saturating_sub(self.readable());
        let take = &data[..data.len().min(room)];
        let off = self.inorder.end() as usize % CHUNK;
        let n = if take.is_empty() {
            0
        } else if take.len() <= CHUNK - off {
            self.append_in_block(pool, off, take)
        } else {
            self.append_blocks(pool, take)
        };
        // A buffer left empty (nothing fitted) holds no map: there is none to release.
        InsertResult {
            advanced: n,
            stored: n,
            dropped: data.len() - n,
            ..InsertResult::default()
        }
    }

    /// [`RecvBuffer::insert`] of in-order data (no out-of-order queue) that fits in the
    /// aligned block of `rcv_nxt` and under `limit`: copied into the tail chunk (Linux
    /// `tcp_try_coalesce`) or one new chunk, inline, with no [`InsertResult`] built.
    /// Returns the bytes stored: all of `data`, or 0 when the pool has no chunk (the
    /// segment dropped, as `insert` drops it). `None`: not such a segment, nothing done
    /// (the caller takes `insert`).
    #[inline(always)]
    pub fn append_small(
        &mut self,
        pool: &mut BufferPool,
        data: &[u8],
        limit: usize,
    ) -> Option<usize> {
        let off = self.inorder.end() as usize % CHUNK;
        if self.ofo.is_some()
            || self.lent != 0
            || data.is_empty()
            || data.len() > CHUNK - off
            || self.inorder.len as usize + data.len() > limit.min(MAX_WINDOW)
        {
            return None;
        }
        Some(self.append_in_block(pool, off, data))
    }

    /// In-order data of `len` bytes whose bytes are not in hand yet (the receive path
    /// that leaves a segment's payload on the device, see `Stack::receive_direct`):
    /// stores as [`insert`](Self::insert) of in-order data would, with the buffer's
    /// out-of-order queue empty (the caller checks: `ooo_extents() == 0`), and says where
    /// each piece goes: `put((chunk, off, k), done)` for bytes `done..done + k` of the
    /// segment, at `off` in pool chunk `chunk`; the caller fills them
    /// ([`BufferPool::chunk_mut`]) before anything reads the buffer.
    pub fn append_in_order_with(
        &mut self,
        pool: &mut BufferPool,
        len: usize,
        limit: usize,
        mut put: impl FnMut((u32, usize, usize), usize),
    ) -> InsertResult {
        if self.lent != 0 {
            return self.without_lent(pool, limit, |b, pool, limit| {
                b.append_in_order_with(pool, len, limit, put)
            });
        }
        // The map may stay, empty, while in-order data awaits the reader (`release_ofo`).
        debug_assert!(
            self.ooo_extents() == 0,
            "in-order append with an out-of-order queue"
        );
        let room = limit.min(MAX_WINDOW).saturating_sub(self.readable());
        let want = len.min(room);
        let n = if want == 0 {
            0
        } else {
            let mut mem = ChargedPool {
                held: self.chunks,
                recs: 0,
                cap: usize::MAX,
                pool,
            };
            let n = mem.append_with(&mut self.inorder, want, |_, piece, done| put(piece, done));
            self.chunks = mem.held;
            n
        };
        InsertResult {
            advanced: n,
            stored: n,
            dropped: len - n,
            ..InsertResult::default()
        }
    }

    /// Store `data` (non-empty, within the aligned block of `rcv_nxt`, which is at offset
    /// `off` of it) at the end of the in-order chain: into the tail chunk when the block's
    /// chunk is already there (coalescing), else into one new chunk. Returns the bytes
    /// stored (0 when the pool has no chunk).
    #[inline(always)]
    fn append_in_block(&mut self, pool: &mut BufferPool, off: usize, data: &[u8]) -> usize {
        let ch = &mut self.inorder;
        let c = if ch.len > 0 && off != 0 {
            ch.tail
        } else {
            let Some(c) = pool.alloc() else { return 0 };
            if ch.head == NONE {
                ch.head = c;
            } else {
                pool.set_next(ch.tail, c);
            }
            ch.tail = c;
            self.chunks += 1;
            c
        };
        pool.chunk_mut(c)[off..off + data.len()].copy_from_slice(data);
        ch.len += data.len() as u32;
        data.len()
    }

    /// Append `data` across aligned blocks (the general case of
    /// [`RecvBuffer::append_in_order`]), out of line.
    #[inline(never)]
    fn append_blocks(&mut self, pool: &mut BufferPool, data: &[u8]) -> usize {
        let mut mem = ChargedPool {
            held: self.chunks,
            recs: 0,
            cap: usize::MAX,
            pool,
        };
        let n = mem.append(&mut self.inorder, data);
        self.chunks = mem.held;
        n
    }

    /// Copy up to `out.len()` in-order bytes without taking them (`recv(MSG_PEEK)`;
    /// Linux `tcp_recvmsg_locked` with `MSG_PEEK` walks the queue without eating it).
    pub fn peek(&self, pool: &BufferPool, out: &mut [u8]) -> usize {
        if self.lent != 0 {
            return self.peek_lent(pool, out);
        }
        let n = out.len().min(self.inorder.len as usize);
        self.peek_from(pool, (self.inorder.head, self.inorder.start), &mut out[..n])
    }

    /// Copies all of `out` from the chunk chain starting at chunk `c`, position `start`.
    fn peek_from(
        &self,
        pool: &BufferPool,
        (mut c, mut start): (u32, u32),
        out: &mut [u8],
    ) -> usize {
        let (n, mut done) = (out.len(), 0);
        while done < n {
            let off = start as usize % CHUNK;
            let k = (CHUNK - off).min(n - done);
            out[done..done + k].copy_from_slice(&pool.chunk(c)[off..off + k]);
            done += k;
            start = start.wrapping_add(k as u32);
            if (start as usize).is_multiple_of(CHUNK) {
                c = pool.next(c);
            }
        }
        n
    }

    /// Free the out-of-order queue's map once the buffer holds nothing. While in-order
    /// data awaits the reader an empty map is kept (with its root node), so that a
    /// reordering per few segments does not cost an allocation each; a drained buffer
    /// holds no heap.
    /// (Inline: without a map, the common case of in-order data, there is nothing to do.)
    #[inline(always)]
    fn release_ofo(&mut self) {
        if self.ofo.is_some() {
            self.release_ofo_map();
        }
    }

    /// [`RecvBuffer::release_ofo`] with a map.
    #[inline(never)]
    fn release_ofo_map(&mut self) {
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
        let mut mem = ChargedPool {
            held: self.chunks,
            recs: 0,
            cap: usize::MAX,
            pool,
        };
        mem.free_chain(&self.inorder);
        if self.lent != 0 {
            mem.pool.lent.drop_queue(self.lent);
        }
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
    fn prune_one(
        &mut self,
        mem: &mut ChargedPool<'_>,
        k: Key,
        x: Extent,
        res: &mut InsertResult,
    ) -> usize {
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
    fn prune_for(
        &mut self,
        mem: &mut ChargedPool<'_>,
        lim: usize,
        s: u32,
        e: u32,
        res: &mut InsertResult,
    ) {
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
        let room = lim.saturating_sub(self.readable());
        let fits = |this: &Self, mem: &ChargedPool<'_>, new: usize| {
            let budget = lim.saturating_sub(this.readable() + this.ooo_bytes as usize);
            budget >= new && (new == 0 || mem.pool.available_chunks() >= blocks)
        };
        if fits(self, mem, ((e - s) as usize).min(room)) {
            return; // room for the whole segment, whatever it overlaps
        }
        let overlap_of = |x: &Extent| {
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
    fn prune_ofo(&mut self, mem: &mut ChargedPool<'_>, s: u32, e: u32, res: &mut InsertResult) {
        let rcv = self.inorder.end();
        // What the segment could need: a chunk per aligned block it spans and a record.
        let spanned = (rcv.wrapping_add(s) as usize % CHUNK + (e - s) as usize).div_ceil(CHUNK);
        let need = truesize(spanned as u32, 1);
        let fits = |mem: &ChargedPool<'_>| mem.truesize() + need <= mem.cap;
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
    mem: &mut ChargedPool<'_>,
    run: &mut Option<Extent>,
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
            let mut c = Extent::empty(rcv.wrapping_add(pos));
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
