use super::recv::Extent;
use super::*;
use crate::counted::{Key, work};
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
        b.inorder = Extent::empty(origin);
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

/// Nothing written takes nothing: an empty write, or one into a buffer at its limit,
/// leaves an empty send buffer without a chunk (the one-chunk path for a write into an
/// empty buffer must not take one first).
#[test]
fn an_empty_write_takes_no_chunk() {
    let mut pool = BufferPool::new(1 << 20);
    let mut s = SendBuffer::new();
    assert_eq!(s.write(&mut pool, &[], 1 << 20), 0);
    assert_eq!(s.write(&mut pool, &[1; 10], 0), 0);
    assert_eq!((s.len(), s.mem_bytes(), pool.in_use_bytes()), (0, 0, 0));
    // And the buffer works as a fresh one after.
    assert_eq!(s.write(&mut pool, b"abc", 1 << 20), 3);
    let mut out = [0; 3];
    assert_eq!(s.peek(&pool, 0, &mut out), 3);
    assert_eq!(&out, b"abc");
    assert_eq!(pool.in_use_bytes(), CHUNK);
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

/// Every chunk's data starts at a cache line (64 bytes), in every slab: a 64-byte
/// message written at a multiple of 64 into a buffer touches one line, not two (docs/bench.md,
/// "Cache misses at 10,000 connections").
#[test]
fn chunks_start_at_a_cache_line() {
    let mut pool = BufferPool::new(200 * CHUNK);
    let mut taken = Vec::new();
    while let Some(c) = pool.alloc() {
        assert_eq!(pool.chunk(c).as_ptr() as usize % 64, 0, "chunk {c}");
        taken.push(c);
    }
    assert_eq!(taken.len(), 200, "more than one slab (64 chunks) checked");
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

/// In-order data into a buffer with no out-of-order queue (the fast append, Linux
/// `tcp_queue_rcv`) keeps what `limit` and the pool allow and drops the rest, as the
/// general path does: the bytes kept are the stream's, read back in order, and a buffer
/// read empty holds no chunk. Catches: an append that ignores the limit or the pool.
#[test]
fn recv_in_order_append_keeps_to_the_limit_and_the_pool() {
    let data = stream(6000, 9);
    let mut pool = BufferPool::new(1 << 20);
    let mut r = RecvBuffer::with_origin(u32::MAX - 100);
    let res = r.insert(&mut pool, 0, &data[..1000], 1500);
    assert_eq!((res.stored, res.dropped, res.advanced), (1000, 0, 1000));
    // 1000 held: 500 more fit under the limit.
    let res = r.insert(&mut pool, 0, &data[1000..2000], 1500);
    assert_eq!((res.stored, res.dropped, res.advanced), (500, 500, 500));
    let res = r.insert(&mut pool, 0, &data[1500..1600], 1500);
    assert_eq!((res.stored, res.dropped, res.advanced), (0, 100, 0), "full");
    let mut out = vec![0; 6000];
    assert_eq!(r.read(&mut pool, &mut out), 1500);
    assert_eq!(out[..1500], data[..1500]);
    assert_eq!(pool.in_use_bytes(), 0, "read empty, no chunk held");

    // A pool of two chunks: what they hold from the aligned position, the rest dropped.
    let mut pool = BufferPool::new(2 * CHUNK);
    let mut r = RecvBuffer::new();
    let res = r.insert(&mut pool, 0, &data, 1 << 20);
    assert_eq!(
        (res.stored, res.dropped, res.advanced),
        (2 * CHUNK, 6000 - 2 * CHUNK, 2 * CHUNK)
    );
    assert_eq!(r.read(&mut pool, &mut out), 2 * CHUNK);
    assert_eq!(out[..2 * CHUNK], data[..2 * CHUNK]);
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

/// The per-extent charge covers a B-tree leaf of `Key -> Extent` at its minimum
/// occupancy (5 of 11) with an allocator header, plus the share of an internal node
/// (12 more edges) over at least 6 such leaves.
#[test]
fn extent_truesize_covers_the_tree() {
    let header = 16;
    let leaf = 2 * size_of::<usize>() + 11 * (size_of::<Key>() + size_of::<Extent>());
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

/// Lent segments at the front of the queue (their bytes in frames a device lent: here a
/// frame is the stream itself, its id the segment's start), then copied bytes and an
/// out-of-order extent joined behind them: `peek` shows the stream without taking it,
/// reads in pieces of every size take it in order, each frame goes back once read to its
/// end, and `clear` gives back the frames of a queue dropped unread. Positions start near
/// the wrap.
#[test]
fn lent_segments_are_read_and_peeked_before_copied_bytes_and_given_back() {
    let data = stream(10_000, 5);
    let frames = data.clone();
    let mut pool = BufferPool::new(1 << 20);
    pool.lent.set_reader(Box::new(move |id, off, dst| {
        let from = id as usize + off;
        dst.copy_from_slice(&frames[from..from + dst.len()]);
        true
    }));
    let mut b = RecvBuffer::with_origin(u32::MAX - 3000);
    // Three lent segments (bytes 0..6000), each frame holding its own bytes from offset 0.
    for (at, len) in [(0, 1000), (1000, 3000), (4000, 2000)] {
        assert!(b.can_hold_lent());
        let r = b.append_lent(&mut pool, (at as u32, 0), len, 1 << 20);
        assert_eq!((r.advanced, r.dropped), (len, 0));
    }
    // Bytes 8000..9000 out of order, then 6000..8000 in order: copied, joined.
    let r = b.insert(&mut pool, 2000, &data[8000..9000], 1 << 20);
    assert_eq!(r.advanced, 0);
    assert!(!b.can_hold_lent());
    let r = b.insert(&mut pool, 0, &data[6000..8000], 1 << 20);
    assert_eq!(r.advanced, 3000);
    assert_eq!(b.readable(), 9000);
    // A segment after copied bytes is not held.
    assert!(!b.can_hold_lent());
    let mut all = vec![0; 9000];
    assert_eq!(b.peek(&pool, &mut all), 9000);
    assert!(all == data[..9000]);
    let mut got = Vec::new();
    for want in [1, 998, 2, 2999, 1500, 9000] {
        let mut out = vec![0; want];
        let n = b.read(&mut pool, &mut out);
        got.extend_from_slice(&out[..n]);
        let mut rest = vec![0; 9000];
        let m = b.peek(&pool, &mut rest);
        assert!(
            rest[..m] == data[got.len()..9000],
            "after {} bytes",
            got.len()
        );
    }
    assert!(got == data[..9000]);
    let mut released = Vec::new();
    pool.lent.take_released(&mut |id| released.push(id));
    assert_eq!(released, [0, 1000, 4000]);
    assert!(b.is_empty() && b.can_hold_lent());
    // Held again, dropped unread: the frames go back.
    b.append_lent(&mut pool, (9000, 0), 1000, 1 << 20);
    b.clear(&mut pool);
    pool.lent.take_released(&mut |id| released.push(id));
    assert_eq!(released, [0, 1000, 4000, 9000]);
    assert_eq!(pool.lent.read_errors, 0);
}
