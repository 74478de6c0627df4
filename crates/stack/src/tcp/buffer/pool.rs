//! The chunk pool every TCP socket buffer of a stack takes its memory from.
//!
//! Chunks are allocated in slabs of 64 (128 KiB), each chunk aligned to a cache line
//! ([`Chunk`]), and are named by a `u32` index: slab `i >> 6`, slot `i & 63`. Each chunk has
//! one `next: u32` link (`u32::MAX` = none), kept in a dense array beside the data rather
//! than at the end of each 2 KiB block, so that walking a chain touches 4-byte links that
//! share cache lines instead of one line per chunk, and each chunk's data stays 2 KiB aligned
//! within its slab. The link is the only per-chunk overhead: 4 bytes per 2048 (0.2 %).
//! Free chunks form a LIFO list threaded through those links (the most recently freed
//! chunk, still warm in cache, is reused first). Allocation and free are O(1).
//!
//! The pool is bounded by a byte limit, the stack's hard budget (`net.ipv4.tcp_mem.budget`):
//! an allocation over it fails and the caller sees a short write or a drop. Below it,
//! Linux's `tcp_mem` thresholds (low / pressure / high, in pages) decide who may allocate
//! (see [`BufferPool::mem_schedule`], Linux `__sk_mem_raise_allocated`). Memory is never
//! returned to the operating system on the hot path: capacity only grows, up to the limit.
//! How capacity could shrink later, off the hot path: a `trim` run from a timer when usage
//! has stayed low would walk the free list once, count free chunks per slab, and release the
//! trailing slabs that are entirely free (rebuilding the free list without them); releasing
//! slabs in the middle would need moving live chunks, which means rewriting the chains that
//! name them, so it is better done by preferring low indices when allocating (an
//! address-ordered free list) so that high slabs drain naturally.

use core::fmt;

use ustack_obs::{Counter, Instant, Mib};

/// Bytes per chunk, the pool's unit of allocation.
pub const CHUNK: usize = 2048;

/// One chunk's bytes, aligned to a 64-byte cache line: a buffer's data starts at a line,
/// so 64 bytes written at a multiple of 64 touch one line, not two (the slab's heap
/// allocation is only 16-byte aligned; a 128 KiB one from `mmap` starts 16 bytes into a
/// page). At 10,000 connections every chunk a message touches is cold, and the straddle
/// cost a miss per copy: four copies a message (into the send buffer, out of it into the
/// frame, into the receive buffer, out of it to the reader).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; CHUNK]);
const _: () = assert!(size_of::<Chunk>() == CHUNK && align_of::<Chunk>() == 64);

/// Chunks per slab (one heap allocation when the pool grows).
const SLAB_CHUNKS: usize = 64;
/// `log2(SLAB_CHUNKS)`: chunk index `i` is slot `i & 63` of slab `i >> 6`.
const SLAB_SHIFT: u32 = 6;
/// "No chunk" in links and indices.
pub(super) const NONE: u32 = u32::MAX;
/// The largest number of chunks a pool may have, leaving room for `NONE`.
const MAX_POOL_CHUNKS: usize = (u32::MAX as usize) - SLAB_CHUNKS;

/// A per-stack (per-shard) pool of [`CHUNK`]-byte chunks, bounded by a byte limit.
pub struct BufferPool {
    /// Chunk data, `SLAB_CHUNKS` per slab (the last slab may be shorter when the limit cuts it).
    slabs: Vec<Box<[Chunk]>>,
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
    /// `tcp_mem` low / pressure / high, in chunks.
    tcp_mem: [usize; 3],
    /// `min(low, budget)` in chunks: below it, and not under pressure, any ask is granted
    /// at once (see [`BufferPool::fast_schedule`]).
    fast_limit: usize,
    /// When the stack entered memory pressure, while it is under it (Linux
    /// `tcp_memory_pressure`, which holds the jiffies it was entered at).
    pressure_since: Option<Instant>,
    /// Frames a device lent to receive queues (see [`super::lent`]).
    pub(crate) lent: Box<super::lent::LentFrames>,
    /// Transmit slots a device lets send buffers hold (see [`super::held`]).
    pub(crate) held: Box<super::held::HeldSlots>,
}

/// Bytes per `tcp_mem` page (Linux counts `tcp_mem` in pages of `PAGE_SIZE`).
pub const TCP_MEM_PAGE: usize = 4096;

/// A socket's standing when it asks for buffer memory (see [`BufferPool::mem_schedule`]).
#[derive(Debug, Clone, Copy)]
/// (Linux `SK_MEM_RECV` or `SK_MEM_SEND`: the caller fills in the fields of its kind.)
pub struct MemAsk {
    /// Chunks wanted.
    pub chunks: usize,
    /// Bytes of that kind the socket holds now (`sk_rmem_alloc` / `sk_wmem_queued`).
    pub held_kind: usize,
    /// Bytes the socket holds in both buffers (for the fair share).
    pub held_total: usize,
    /// The guaranteed minimum of that kind (`tcp_rmem.min` / `tcp_wmem.min`).
    pub min: usize,
    /// Sockets of the stack (Linux `sk_sockets_allocated_read_positive`).
    pub sockets: usize,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("in_use_bytes", &self.in_use_bytes())
            .field("capacity_bytes", &self.capacity_bytes())
            .field("limit_bytes", &self.limit_bytes)
            .field("slabs", &self.slabs.len())
            .field("alloc_failures", &self.alloc_failures)
            .field("tcp_mem", &self.tcp_mem)
            .field("pressure_since", &self.pressure_since)
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
            tcp_mem: [usize::MAX; 3],
            fast_limit: 0,
            pressure_since: None,
            lent: Box::default(),
            held: Box::default(),
        }
    }

    /// Set the hard budget and the `tcp_mem` thresholds, all in pages of
    /// [`TCP_MEM_PAGE`] bytes (from the stack's sysctls). A budget lowered below what is
    /// in use refuses every allocation until enough is freed; nothing is taken back.
    pub fn set_limits(&mut self, low: u64, pressure: u64, high: u64, budget: u64) {
        let chunks = |pages: u64| {
            usize::try_from(pages)
                .unwrap_or(usize::MAX)
                .saturating_mul(TCP_MEM_PAGE / CHUNK)
        };
        self.tcp_mem = [chunks(low), chunks(pressure), chunks(high)];
        self.limit_bytes = chunks(budget).saturating_mul(CHUNK);
        self.limit_chunks = chunks(budget).min(MAX_POOL_CHUNKS);
        self.fast_limit = self.tcp_mem[0].min(self.limit_chunks);
    }

    /// The common case of [`mem_schedule`](Self::mem_schedule), inline: not under
    /// pressure, and `chunks` more stay at or under `tcp_mem.low` and the budget (Linux's
    /// first test in `__sk_mem_raise_allocated`, "Under limit."). False means: ask
    /// `mem_schedule`.
    #[inline]
    pub fn fast_schedule(&self, chunks: usize) -> bool {
        self.pressure_since.is_none() && self.in_use + chunks <= self.fast_limit
    }

    /// Whether the stack is under memory pressure (Linux `tcp_under_memory_pressure`).
    #[inline]
    pub fn under_pressure(&self) -> bool {
        self.pressure_since.is_some()
    }

    /// Whether the pool holds at least `tcp_mem.low` (Linux `tcp_should_expand_sndbuf`:
    /// "If we are under soft global TCP memory pressure, do not expand").
    #[inline]
    pub fn above_low(&self) -> bool {
        self.in_use >= self.tcp_mem[0]
    }

    /// Whether the pool holds more than `tcp_mem.high` (Linux `tcp_out_of_memory`).
    pub fn above_high(&self) -> bool {
        self.in_use > self.tcp_mem[2]
    }

    fn enter_pressure(&mut self, now: Instant, mib: &mut Mib) {
        if self.pressure_since.is_none() {
            // Linux tcp_enter_memory_pressure.
            self.pressure_since = Some(now);
            mib.inc(Counter::TcpExtTCPMemoryPressures);
        }
    }

    /// Leave memory pressure once the pool is below `tcp_mem.low` (Linux
    /// `sk_leave_memory_pressure` -> `tcp_leave_memory_pressure`, which adds the time spent
    /// under it to TCPMemoryPressuresChrono, in ms). Returns whether it left.
    pub fn reclaim(&mut self, now: Instant, mib: &mut Mib) -> bool {
        match self.pressure_since {
            Some(since) if self.in_use < self.tcp_mem[0] => {
                self.pressure_since = None;
                let ms = (now - since).as_millis().min(u128::from(u64::MAX)) as u64;
                mib.add(Counter::TcpExtTCPMemoryPressuresChrono, ms);
                true
            }
            _ => false,
        }
    }

    /// May a socket take `ask.chunks` more chunks? Linux `__sk_mem_raise_allocated`:
    /// at or under `tcp_mem.low` always (and memory pressure ends); above `pressure` the
    /// stack enters memory pressure; above `high` never; in between, a socket below its
    /// guaranteed minimum (`tcp_rmem.min` / `tcp_wmem.min`) may, and under pressure a
    /// socket holding less than its fair share (`high / sockets`) may ("Try to be fair
    /// among all the sockets under global pressure by allowing the ones that below average
    /// usage to raise"). Nothing is taken here: the buffers allocate afterwards, and the
    /// budget is enforced by [`alloc`](Self::alloc). Callers try
    /// [`fast_schedule`](Self::fast_schedule) first.
    #[inline(never)]
    pub fn mem_schedule(&mut self, now: Instant, mib: &mut Mib, ask: MemAsk) -> bool {
        let after = self.in_use.saturating_add(ask.chunks);
        let [low, pressure, high] = self.tcp_mem;
        if after <= low {
            self.reclaim(now, mib);
            return after <= self.limit_chunks;
        }
        if after > pressure {
            self.enter_pressure(now, mib);
        }
        if after > high || after > self.limit_chunks {
            return false;
        }
        if ask.held_kind < ask.min {
            return true;
        }
        if !self.under_pressure() {
            return true;
        }
        let pages = ask.held_total.div_ceil(TCP_MEM_PAGE);
        (high / (TCP_MEM_PAGE / CHUNK)) > ask.sockets.max(1).saturating_mul(pages)
    }

    /// Take memory without asking (Linux `sk_forced_mem_schedule`): whether the budget
    /// has `chunks` left. Used for the one segment an empty receive queue always takes.
    pub fn forced_schedule(&self, chunks: usize) -> bool {
        self.in_use.saturating_add(chunks) <= self.limit_chunks
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

    /// The byte limit given to [`BufferPool::new`].
    #[cfg(test)]
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }

    /// Heap bytes the pool itself occupies: chunk slabs plus the link array and slab table.
    /// `capacity_bytes` plus the per-chunk overhead, for honest memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.capacity * CHUNK
            + self.next.capacity() * size_of::<u32>()
            + self.slabs.capacity() * size_of::<Box<[Chunk]>>()
    }

    /// Chunk allocations refused because the pool was at its limit.
    #[cfg(test)]
    pub fn alloc_failures(&self) -> u64 {
        self.alloc_failures
    }

    /// Whether a chunk can still be handed out before the budget is reached.
    #[inline]
    pub fn has_room(&self) -> bool {
        self.in_use < self.limit_chunks
    }

    /// Chunks that can still be handed out before the limit is reached.
    pub(super) fn available_chunks(&self) -> usize {
        self.limit_chunks.saturating_sub(self.in_use)
    }

    /// Take a chunk (its link set to `NONE`), or `None` at the limit.
    #[inline(always)]
    pub(super) fn alloc(&mut self) -> Option<u32> {
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
    #[inline(never)]
    fn grow(&mut self) {
        let base = self.slabs.len() * SLAB_CHUNKS;
        let n = SLAB_CHUNKS.min(self.limit_chunks - self.capacity);
        // Zeroed as it is allocated (an aligned allocation is not `calloc`'s): the pages
        // are touched here rather than on first use, at most one slab (128 KiB) early.
        self.slabs
            .push(vec![Chunk([0u8; CHUNK]); n].into_boxed_slice());
        self.next.resize(base + SLAB_CHUNKS, NONE);
        for i in (base..base + n).rev() {
            self.next[i] = self.free;
            self.free = i as u32;
        }
        self.capacity += n;
    }

    /// Return a chunk to the free list.
    pub(super) fn free(&mut self, c: u32) {
        self.next[c as usize] = self.free;
        self.free = c;
        self.in_use -= 1;
    }

    #[inline]
    pub(super) fn chunk(&self, c: u32) -> &[u8; CHUNK] {
        &self.slabs[(c >> SLAB_SHIFT) as usize][c as usize & (SLAB_CHUNKS - 1)].0
    }

    #[inline(always)]
    pub(super) fn chunk_mut(&mut self, c: u32) -> &mut [u8; CHUNK] {
        &mut self.slabs[(c >> SLAB_SHIFT) as usize][c as usize & (SLAB_CHUNKS - 1)].0
    }

    /// Bytes `off..off + len` of chunk `c`, to fill a stretch a receive buffer reserved
    /// (`RecvBuffer::append_in_order_with`).
    #[inline]
    pub(crate) fn piece_mut(&mut self, c: u32, off: usize, len: usize) -> &mut [u8] {
        &mut self.chunk_mut(c)[off..off + len]
    }

    #[inline]
    pub(super) fn next(&self, c: u32) -> u32 {
        self.next[c as usize]
    }

    #[inline]
    pub(super) fn set_next(&mut self, c: u32, n: u32) {
        self.next[c as usize] = n;
    }

    /// Copy `src[range]` into `dst[range]` (two different chunks).
    pub(super) fn copy_between(&mut self, src: u32, dst: u32, range: core::ops::Range<usize>) {
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
                hi[0].0[range.clone()].copy_from_slice(&lo[si].0[range]);
            } else {
                let (lo, hi) = slab.split_at_mut(si);
                lo[di].0[range.clone()].copy_from_slice(&hi[0].0[range]);
            }
        } else if ss < ds {
            let (lo, hi) = self.slabs.split_at_mut(ds);
            hi[0][di].0[range.clone()].copy_from_slice(&lo[ss][si].0[range]);
        } else {
            let (lo, hi) = self.slabs.split_at_mut(ss);
            lo[ds][di].0[range.clone()].copy_from_slice(&hi[0][si].0[range]);
        }
    }
}
