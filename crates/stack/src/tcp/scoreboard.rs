//! The sender's retransmission queue with its SACK scoreboard. The receiver's side of
//! SACK, the blocks it advertises, is in [`super::sack_blocks`].
//!
//! # Reading list
//!
//! - [RFC 2018](https://www.rfc-editor.org/rfc/rfc2018): the SACK option; §4 what the
//!   receiver reports, §5 how the sender keeps its scoreboard.
//! - [RFC 2883](https://www.rfc-editor.org/rfc/rfc2883) §4: D-SACK, the report of a
//!   duplicate segment.
//! - [RFC 6675](https://www.rfc-editor.org/rfc/rfc6675) §4: `IsLost`, `SetPipe` and
//!   `NextSeg`; §5.1: SACK information across a retransmission timeout.
//! - Linux `net/ipv4/tcp_input.c`: `tcp_sacktag_write_queue`, `tcp_sacktag_walk`,
//!   `tcp_sacktag_one`, `tcp_check_dsack`, `tcp_is_sackblock_valid`, `tcp_mark_head_lost`,
//!   `tcp_mark_skb_lost`, `tcp_timeout_mark_lost`, `tcp_clean_rtx_queue`,
//!   `tcp_undo_cwnd_reduction`; `include/net/tcp.h`: `tcp_packets_in_flight`;
//!   `net/ipv4/tcp_output.c`: `tcp_xmit_retransmit_queue`, `tcp_sack_new_ofo_skb`.
//!
//! # How the core drives it (Linux `tcp_ack` order)
//!
//! ```text
//!   segment sent ─────────────► push(start, end, now)
//!   ACK arrives ──────────────► on_sack(blocks, ack, snd_nxt)   tag SACKed / D-SACKed segments
//!               ──────────────► on_ack(ack, now)                pop acked: RTT sample (Karn), delivered
//!               ──────────────► mark_lost(tp.reordering)        RFC 6675 IsLost
//!   cwnd allows (in_flight) ──► next_to_retransmit()            RFC 6675 NextSeg rule 1
//!               ──────────────► mark_retransmitted(start, now)
//!   RTO fires ────────────────► mark_all_lost()                 Linux tcp_enter_loss
//! ```
//!
//! # Model
//!
//! One [`TxSegment`] per sent segment, in sequence order, each counting as one packet (as
//! Linux's `tcp_skb_pcount` for a non-GSO skb). Four flags per segment, Linux's
//! `TCP_SKB_CB(skb)->sacked` bits: [`SegFlags::SACKED`], [`SegFlags::LOST`],
//! [`SegFlags::RETRANS`] (a retransmission is in flight) and [`SegFlags::EVER_RETRANS`].
//! SACKED and LOST never coexist. The counters are Linux's `packets_out`, `sacked_out`,
//! `lost_out` and `retrans_out`, so that [`RtxQueue::in_flight`] is
//! `tcp_packets_in_flight`, which is RFC 6675's `pipe` counted in segments.
//!
//! # Memory
//!
//! [`RtxQueue`] is 32 bytes: one [`TxSegment`] inline and a pointer,
//! `Option<Box<..>>`. It lives in the connection's `ActiveState` (`tcb.rs`), which a
//! connection holds only while it moves data, so an idle connection pays nothing for it.
//! One segment outstanding with no flag set (a request, a response, a SYN or a FIN, the
//! common case of a connection exchanging messages) is kept in the inline slot: no heap,
//! and an ACK of it touches no line but the slot's. A second segment, or anything that
//! sets a flag (a SACK, a loss, a retransmission), moves it to a board first (112 bytes:
//! counters, hints, SACK cache and the `VecDeque` header, and the deque's buffer); the ACK
//! that empties the board gives it to the stack's spares or frees it. Before the inline
//! slot, a board per busy period cost at 10,000 connections about 11 cache misses per
//! message in `malloc` and `free` and several more in the board's and the deque's lines
//! (docs/bench.md, "One segment inline").
//! [`TxSegment`] is 24 bytes. The deque shrinks when it is less than a quarter full.
//!
//! # Cost per operation
//!
//! Segments are only appended at the tail and popped at the head; we never split one in
//! the middle (Linux does, `tcp_fragment` for GSO skbs, which is one reason it keeps an
//! rb-tree). So a sorted `VecDeque` gives the same lookup bound as Linux's tree: binary
//! search, O(log n).
//! - `push`: O(1) amortized. `on_ack`: O(k) for k segments acked, O(1) otherwise.
//! - `on_sack`: per block (at most 4) one binary search, then only the segments the block
//!   newly covers: ranges the previous ACK already reported are jumped over with one binary
//!   search each (Linux `recv_sack_cache`). A whole recovery episode costs O(n log n), not
//!   O(n²) as re-walking every reported range on every ACK would.
//! - `mark_lost`: O(1) while fewer than DupThresh segments are SACKed; otherwise it resumes
//!   where it last stopped (Linux `lost_skb_hint` / `lost_cnt_hint`): O(n) per episode.
//! - `next_to_retransmit`: O(1) (a hint kept exact, Linux `retransmit_skb_hint`).
//!   `mark_retransmitted`: O(log n) plus the hint's advance, O(n) per episode.
//! - `mark_all_lost`, `unmark_lost`: O(n), as Linux (they run on RTO and undo only).
//!
//! # Where we differ from Linux
//!
//! - No GSO segments: a segment is never split, and a SACK block that covers only part of
//!   one tags nothing (as Linux for a one-packet skb, `tcp_match_skb_to_sack`).
//! - A partially acknowledged head is trimmed to `snd_una` (Linux keeps a one-packet skb
//!   whole until it is fully acked and trims it when retransmitting, `tcp_retransmit_skb`).
//! - A D-SACK block below `snd_una` is accepted if it lies within 2^30 (the largest
//!   window, RFC 7323 §2.3) below `snd_una`; Linux bounds it by `undo_marker`, which is the
//!   core's state. The block is returned in [`SackResult::dsack_range`] for the core's undo
//!   logic. [`SackResult::dsack`] is set only for a valid D-SACK block.
//! - On RTO ([`RtxQueue::mark_all_lost`]) every pending retransmission is presumed lost
//!   (RETRANS cleared on all segments); Linux clears it only on segments already LOST.
//! - No RACK (RFC 8985) and no reordering estimate here: the core passes its DupThresh
//!   (Linux `tp->reordering`) to [`RtxQueue::mark_lost`].

use core::fmt;
use core::ops::BitOr;
#[cfg(test)]
use core::time::Duration;
use std::collections::VecDeque;

use ustack_obs::Instant;
use ustack_wire::SeqNumber;

/// The most SACK blocks a TCP header carries: 4, or 3 next to the timestamp option
/// ([RFC 2018 §3](https://www.rfc-editor.org/rfc/rfc2018#section-3)).
pub const MAX_SACK_BLOCKS: usize = 4;

/// The largest window, 2^30 bytes
/// ([RFC 7323 §2.3](https://www.rfc-editor.org/rfc/rfc7323#section-2.3)): how far below
/// `snd_una` a D-SACK block may lie, and how long one may be.
const MAX_WINDOW: usize = 1 << 30;

/// A segment's scoreboard flags (Linux `TCP_SKB_CB(skb)->sacked`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SegFlags(u8);

impl SegFlags {
    /// No flag.
    pub const EMPTY: SegFlags = SegFlags(0);
    /// Selectively acknowledged by the receiver (Linux `TCPCB_SACKED_ACKED`).
    pub const SACKED: SegFlags = SegFlags(0x01);
    /// A retransmission of it is in flight (Linux `TCPCB_SACKED_RETRANS`).
    pub const RETRANS: SegFlags = SegFlags(0x02);
    /// Presumed lost (Linux `TCPCB_LOST`). Never together with SACKED.
    pub const LOST: SegFlags = SegFlags(0x04);
    /// A piece cut from the front of a longer segment ([`RtxQueue::resegment`]): sent
    /// again without PSH, which only the last piece keeps (Linux `tcp_fragment` moves the
    /// PSH and FIN flags to the new tail skb).
    pub const NO_PSH: SegFlags = SegFlags(0x08);
    /// Retransmitted at least once (Linux `TCPCB_EVER_RETRANS`): no RTT sample (Karn).
    pub const EVER_RETRANS: SegFlags = SegFlags(0x80);

    /// All of `other`'s flags are set.
    pub const fn contains(self, other: SegFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Any of `other`'s flags is set.
    pub const fn intersects(self, other: SegFlags) -> bool {
        self.0 & other.0 != 0
    }

    /// Set `other`'s flags.
    pub fn insert(&mut self, other: SegFlags) {
        self.0 |= other.0;
    }

    /// Clear `other`'s flags.
    pub fn remove(&mut self, other: SegFlags) {
        self.0 &= !other.0;
    }
}

impl BitOr for SegFlags {
    type Output = SegFlags;
    fn bitor(self, rhs: SegFlags) -> SegFlags {
        SegFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for SegFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(SegFlags, &str); 5] = [
            (SegFlags::SACKED, "SACKED"),
            (SegFlags::LOST, "LOST"),
            (SegFlags::RETRANS, "RETRANS"),
            (SegFlags::EVER_RETRANS, "EVER_RETRANS"),
            (SegFlags::NO_PSH, "NO_PSH"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// One sent, not yet cumulatively acknowledged segment: `[start, end)` in sequence space
/// (a SYN or FIN counts as one), when it was last (re)transmitted, and its flags.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TxSegment {
    pub start: SeqNumber,
    pub end: SeqNumber,
    pub sent_at: Instant,
    pub flags: SegFlags,
}

impl TxSegment {
    /// Sequence space it covers, `end - start`.
    pub fn seq_len(&self) -> usize {
        self.end.diff(self.start).max(0) as usize
    }

    /// NextSeg rule 1 candidate: LOST, no retransmission in flight (and so not SACKED).
    fn wants_retransmit(&self) -> bool {
        self.flags.0 & (SegFlags::SACKED.0 | SegFlags::LOST.0 | SegFlags::RETRANS.0)
            == SegFlags::LOST.0
    }

    /// `self` lies within `[start, end)`.
    fn within(&self, start: SeqNumber, end: SeqNumber) -> bool {
        !self.start.before(start) && !self.end.after(end)
    }
}

/// What a cumulative ACK did to the queue ([`RtxQueue::on_ack_reusing`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AckResult {
    /// Segments fully acknowledged and removed (Linux `pkts_acked`).
    pub acked_segments: u32,
    /// Sequence space acknowledged, partial head included: how far `snd_una` moved.
    pub acked_bytes: usize,
    /// The send time of the oldest newly acked segment that was neither SACKed before nor
    /// ever retransmitted (the RTT sample is `now` less it, Linux `first_ackt`); `None` if
    /// this ACK covers any retransmitted segment
    /// (Karn's rule, [RFC 6298 §3](https://www.rfc-editor.org/rfc/rfc6298#section-3);
    /// Linux `FLAG_RETRANS_DATA_ACKED`).
    pub rtt_sent_at: Option<Instant>,
    /// Some acked segment had been retransmitted (Linux `FLAG_RETRANS_DATA_ACKED`).
    pub newly_acked_retrans: bool,
    /// Acked segments no earlier SACK had counted (Linux `tcp_count_delivered` in
    /// `tcp_clean_rtx_queue`). Added to [`SackResult::newly_sacked`] this gives Linux's
    /// `delivered` for the ACK (PRR's newly acked-or-SACKed count).
    pub delivered: u32,
}

/// What the SACK blocks of one ACK did to the scoreboard ([`RtxQueue::on_sack`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SackResult {
    /// Segments SACKed by this ACK and not before (Linux `sack_delivered`).
    pub newly_sacked: u32,
    /// The first block is a valid D-SACK ([RFC 2883 §4](https://www.rfc-editor.org/rfc/rfc2883#section-4)).
    pub dsack: bool,
    /// Blocks ignored: malformed, beyond `snd_nxt`, not above `snd_una` (stale), or beyond
    /// the fourth (Linux `TCPSACKDiscard` / `TCPDSACKIgnoredOld`).
    pub invalid_blocks: u32,
    /// The D-SACK block, when `dsack`: for the core's undo (Linux `undo_retrans`).
    pub dsack_range: Option<(SeqNumber, SeqNumber)>,
    /// Queued segments inside the D-SACK block that had been retransmitted: each is a
    /// retransmission the receiver did not need (Linux `tcp_sacktag_one`, `undo_retrans`).
    pub dsack_retrans: u32,
    /// Send time of the first segment newly SACKed here that was never retransmitted, for
    /// an RTT sample when no cumulative ACK gives one (Linux `first_sackt`, Karn applied).
    pub first_sacked_sent_at: Option<Instant>,
}

/// The retransmission queue: sent, unacknowledged segments with their SACK scoreboard.
/// One segment outstanding and nothing to remember of it (no flag set) is kept inline;
/// anything more takes a board (see the module docs). Holds no heap while it has at most
/// one segment.
#[derive(Debug)]
pub struct RtxQueue {
    /// The only outstanding segment, while there is no board; `start == end`: none. Its
    /// flags are always empty: whatever sets one (SACK, loss, retransmission) moves it to
    /// a board first ([`RtxQueue::promote`]).
    one: TxSegment,
    board: Option<Box<Board>>,
}

impl Default for RtxQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// The inline slot holding nothing.
const NO_SEGMENT: TxSegment = TxSegment {
    start: SeqNumber(0),
    end: SeqNumber(0),
    sent_at: Instant::ZERO,
    flags: SegFlags::EMPTY,
};

impl RtxQueue {
    /// Heap bytes held (0 when empty), for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.board.as_deref().map_or(0, Board::heap_bytes)
    }
}

/// Boards kept by the stack for the next queues that fill, so that a connection that has
/// one segment outstanding per round trip does not allocate and free a board (and its
/// deque) each time. Up to [`SPARE_BOARDS`], each a small one: a burst of connections
/// sending at once (a pingpong round of N connections: N queues fill before any empties)
/// takes boards freed by the previous burst instead of `malloc`, whose free lists at
/// 10,000 connections cost cache misses too (docs/bench.md, "Flat with connections"),
/// while what a stack holds beyond its connections stays bounded (at most
/// `SPARE_BOARDS` * (`SPARE_MAX_SEGS` * 24 bytes + a board)), and an idle connection still
/// holds no heap.
#[derive(Debug, Default)]
#[expect(
    clippy::vec_box,
    reason = "a board moves between a queue and the spares as its box, not copied"
)]
pub(crate) struct SpareBoard(Vec<Box<Board>>);

impl SpareBoard {
    /// Heap bytes held by the kept boards (0 when there is none), for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.capacity() * size_of::<Box<Board>>()
            + self.0.iter().map(|b| Board::heap_bytes(b)).sum::<usize>()
    }
}

/// The largest deque (in segments) a spare board may keep: 64 * 24 bytes.
const SPARE_MAX_SEGS: usize = 64;
/// The most boards kept for reuse: a device batch's worth of connections (the shm ring's
/// 64 slots; Linux's NAPI weight is 64).
const SPARE_BOARDS: usize = 64;

/// The queue's state while anything is outstanding.
#[derive(Debug)]
struct Board {
    segs: VecDeque<TxSegment>,
    /// Linux `sacked_out`, `lost_out`, `retrans_out` (`packets_out` is `segs.len()`).
    sacked_out: u32,
    lost_out: u32,
    retrans_out: u32,
    /// End of the highest SACKed segment; meaningful while `sacked_out > 0`.
    highest_sacked: SeqNumber,
    /// Segments that [`TxSegment::wants_retransmit`].
    rtx_pending: u32,
    /// While `rtx_pending > 0`: the index of the lowest such segment (Linux
    /// `retransmit_skb_hint`, but always exact).
    rtx_hint: usize,
    /// Every segment below this index is SACKED or LOST (Linux `lost_skb_hint`).
    lost_hint: usize,
    /// SACKED segments below `lost_hint` (Linux `lost_cnt_hint`).
    lost_hint_sacked: u32,
    /// The previous ACK's in-window SACK blocks, sorted, clipped to the queue's end
    /// (Linux `recv_sack_cache`): every segment wholly inside one is SACKED.
    sack_cache: [(SeqNumber, SeqNumber); MAX_SACK_BLOCKS],
    sack_cache_len: u8,
    /// Segments visited by walks, to test the cost bounds above.
    #[cfg(test)]
    steps: u64,
}

impl Board {
    /// The board's heap bytes: the box and the deque's capacity.
    fn heap_bytes(&self) -> usize {
        size_of::<Board>() + self.segs.capacity() * size_of::<TxSegment>()
    }

    fn new() -> Board {
        Board {
            segs: VecDeque::new(),
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            highest_sacked: SeqNumber(0),
            rtx_pending: 0,
            rtx_hint: 0,
            lost_hint: 0,
            lost_hint_sacked: 0,
            sack_cache: [(SeqNumber(0), SeqNumber(0)); MAX_SACK_BLOCKS],
            sack_cache_len: 0,
            #[cfg(test)]
            steps: 0,
        }
    }

    /// Back to [`Board::new`]'s state, keeping the deque's allocation.
    fn reset(&mut self) {
        let mut segs = core::mem::take(&mut self.segs);
        segs.clear();
        *self = Board::new();
        self.segs = segs;
    }

    /// The head segment, popped, if `snd_una` acknowledges it whole (counted in `res`);
    /// else `None`, after trimming a head it acknowledges in part.
    #[inline]
    fn pop_acked(&mut self, snd_una: SeqNumber, res: &mut AckResult) -> Option<TxSegment> {
        let head = self.segs.front_mut()?;
        if head.end.after(snd_una) {
            if head.start.before(snd_una) {
                res.acked_bytes += snd_una - head.start;
                head.start = snd_una;
            }
            return None;
        }
        let seg = self.segs.pop_front()?;
        res.acked_segments += 1;
        res.acked_bytes += seg.seq_len();
        Some(seg)
    }

    /// After segments were popped: give back most of a deque that is mostly empty.
    #[inline]
    fn shrink_after_pop(&mut self) {
        let cap = self.segs.capacity();
        if cap > 64 && self.segs.len() * 4 < cap {
            self.segs.shrink_to((self.segs.len() * 2).max(16));
        }
    }

    #[inline]
    fn step(&mut self) {
        #[cfg(test)]
        {
            self.steps += 1;
        }
    }

    /// Index of the first segment ending after `seq` (the one holding `seq`, if any).
    fn first_ending_after(&self, seq: SeqNumber) -> usize {
        self.segs.partition_point(|s| !s.end.after(seq))
    }

    /// Move `rtx_hint` forward to the lowest segment that wants a retransmission, given
    /// that none lies below it.
    fn tighten_rtx_hint(&mut self) {
        if self.rtx_pending == 0 {
            self.rtx_hint = self.segs.len();
            return;
        }
        while let Some(seg) = self.segs.get(self.rtx_hint) {
            if seg.wants_retransmit() {
                return;
            }
            self.rtx_hint += 1;
            self.step();
        }
        debug_assert!(
            false,
            "rtx_pending > 0 but no segment wants a retransmission"
        );
    }

    /// A segment became a retransmission candidate at `idx`.
    fn note_rtx_candidate(&mut self, idx: usize) {
        if self.rtx_pending == 0 || idx < self.rtx_hint {
            self.rtx_hint = idx;
        }
        self.rtx_pending += 1;
    }

    /// Tag the segments wholly inside `[start, end)` (Linux `tcp_sacktag_walk`). For a
    /// normal block, segments wholly inside a block of `cache` are skipped: they were
    /// tagged when that block arrived.
    fn sacktag(
        &mut self,
        (start, end): (SeqNumber, SeqNumber),
        dsack: bool,
        snd_una: SeqNumber,
        cache: &[(SeqNumber, SeqNumber)],
        res: &mut SackResult,
    ) {
        let mut idx = self.first_ending_after(start);
        while let Some(&seg) = self.segs.get(idx) {
            self.step();
            if !seg.start.before(end) {
                break;
            }
            if let Some(&(_, cached_end)) = cache.iter().find(|&&(cs, ce)| seg.within(cs, ce)) {
                idx = self.first_ending_after(cached_end);
                continue;
            }
            if seg.within(start, end) {
                self.sacktag_one(idx, dsack, snd_una, res);
            }
            idx += 1;
        }
    }

    /// Linux `tcp_sacktag_one`: the segment at `idx` lies wholly inside a SACK block.
    fn sacktag_one(&mut self, idx: usize, dsack: bool, snd_una: SeqNumber, res: &mut SackResult) {
        let seg = &mut self.segs[idx];
        // RFC 2883 §4 / Linux: a D-SACK of retransmitted data means the retransmission
        // was not needed (Linux decrements `undo_retrans`).
        if dsack && seg.flags.contains(SegFlags::EVER_RETRANS) {
            res.dsack_retrans += 1;
        }
        // Linux: "Nothing to do; acked frame is about to be dropped (was ACKed)."
        if !seg.end.after(snd_una) {
            return;
        }
        if !seg.flags.contains(SegFlags::SACKED) {
            if seg.flags.contains(SegFlags::RETRANS) {
                // Linux: "If the segment is not tagged as lost, we do not clear RETRANS,
                // believing that retransmission is still in flight." If it was LOST, the
                // SACK is for the retransmission.
                if seg.flags.contains(SegFlags::LOST) {
                    seg.flags.remove(SegFlags::LOST | SegFlags::RETRANS);
                    self.lost_out -= 1;
                    self.retrans_out -= 1;
                }
            } else {
                if !seg.flags.contains(SegFlags::EVER_RETRANS) {
                    res.first_sacked_sent_at.get_or_insert(seg.sent_at);
                }
                if seg.flags.contains(SegFlags::LOST) {
                    seg.flags.remove(SegFlags::LOST);
                    self.lost_out -= 1;
                    self.rtx_pending -= 1;
                }
            }
            seg.flags.insert(SegFlags::SACKED);
            let seg_end = seg.end;
            if self.sacked_out == 0 || seg_end.after(self.highest_sacked) {
                self.highest_sacked = seg_end;
            }
            self.sacked_out += 1;
            res.newly_sacked += 1;
            if idx < self.lost_hint {
                self.lost_hint_sacked += 1;
            }
        }
        // Linux: "D-SACK. We can detect redundant retransmission in S|R and plain R frames
        // and clear it."
        let seg = &mut self.segs[idx];
        if dsack && seg.flags.contains(SegFlags::RETRANS) {
            seg.flags.remove(SegFlags::RETRANS);
            self.retrans_out -= 1;
        }
    }

    /// Remember this ACK's in-window blocks for the next one, clipped to the queue's end
    /// so that segments pushed later never fall inside a remembered block.
    fn remember_blocks(&mut self, blocks: &[(SeqNumber, SeqNumber)]) {
        let tail = self.segs.back().map_or(SeqNumber(0), |s| s.end);
        let mut n = 0;
        for &(start, end) in blocks {
            let end = end.min(tail);
            if start.before(end) {
                self.sack_cache[n] = (start, end);
                n += 1;
            }
        }
        self.sack_cache_len = n as u8;
    }
}

/// The SACK blocks of one ACK, sorted out ([`RtxQueue::on_sack`]).
struct SackBlocks {
    dsack: Option<(SeqNumber, SeqNumber)>,
    /// Valid blocks above `snd_una`, the D-SACK block excepted, sorted by start.
    blocks: [(SeqNumber, SeqNumber); MAX_SACK_BLOCKS],
    len: usize,
    invalid: u32,
}

/// RFC 2883 §4 and Linux `tcp_check_dsack`: the first block is a D-SACK if it lies below
/// the cumulative ACK, or within the second block. Linux `tcp_dsack_seen` also skips a
/// "dubious" one: empty, reversed or longer than the largest window.
fn first_block_is_dsack(blocks: &[(SeqNumber, SeqNumber)], ack: SeqNumber) -> bool {
    let Some(&(start, end)) = blocks.first() else {
        return false;
    };
    let reported = if start.before(ack) {
        true
    } else if let Some(&(start1, end1)) = blocks.get(1) {
        !end.after(end1) && !start.before(start1)
    } else {
        false
    };
    // `diff`, not `-`: a block exactly 2^31 long is "before" both ways round and would
    // make the subtraction panic (found by the CVE-2019-11477 reproduction).
    reported && (1..=MAX_WINDOW as i64).contains(&i64::from(end.diff(start)))
}

/// Linux `tcp_is_sackblock_valid`, its comments quoted. A D-SACK block below `snd_una` is
/// bounded by the largest window instead of Linux's `undo_marker` (module docs).
fn sack_block_valid(
    start: SeqNumber,
    end: SeqNumber,
    snd_una: SeqNumber,
    snd_nxt: SeqNumber,
    is_dsack: bool,
) -> bool {
    // "Too far in future, or reversed (interpretation is ambiguous)"
    if end.after(snd_nxt) || !start.before(end) {
        return false;
    }
    // "Nasty start_seq wrap-around check"
    if !start.before(snd_nxt) {
        return false;
    }
    // "In outstanding window? ...This is valid exit for D-SACKs too. start_seq == snd_una
    // is non-sensical"
    if start.after(snd_una) {
        return true;
    }
    if !is_dsack {
        return false;
    }
    // "...Then it's D-SACK, and must reside below snd_una completely"
    if end.after(snd_una) {
        return false;
    }
    (0..=MAX_WINDOW as i64).contains(&i64::from(snd_una.diff(start)))
}

/// Linux `tcp_sacktag_write_queue`'s first half: find the D-SACK, drop invalid and stale
/// blocks, sort the rest by start.
fn sort_out_blocks(
    blocks: &[(SeqNumber, SeqNumber)],
    snd_una: SeqNumber,
    snd_nxt: SeqNumber,
) -> SackBlocks {
    let mut out = SackBlocks {
        dsack: None,
        blocks: [(SeqNumber(0), SeqNumber(0)); MAX_SACK_BLOCKS],
        len: 0,
        invalid: blocks.len().saturating_sub(MAX_SACK_BLOCKS) as u32,
    };
    let blocks = &blocks[..blocks.len().min(MAX_SACK_BLOCKS)];
    let first_is_dsack = first_block_is_dsack(blocks, snd_una);
    for (i, &(start, end)) in blocks.iter().enumerate() {
        let is_dsack = i == 0 && first_is_dsack;
        if !sack_block_valid(start, end, snd_una, snd_nxt, is_dsack) {
            out.invalid += 1;
        } else if is_dsack {
            out.dsack = Some((start, end));
        } else {
            out.blocks[out.len] = (start, end);
            out.len += 1;
        }
    }
    // "order SACK blocks to allow in order walk of the retrans queue"
    out.blocks[..out.len].sort_unstable_by_key(|&(start, _)| start.diff(snd_una));
    out
}

impl RtxQueue {
    /// An empty queue (no heap).
    pub const fn new() -> RtxQueue {
        RtxQueue {
            one: NO_SEGMENT,
            board: None,
        }
    }

    /// The inline segment, if the queue holds one there.
    #[inline]
    fn one(&self) -> Option<&TxSegment> {
        (self.one.start != self.one.end).then_some(&self.one)
    }

    /// Move the inline segment, if any, to a board (`spare`'s or a new one), so that the
    /// board's code handles what follows: a second segment, a SACK, a loss, a
    /// retransmission. Rare but for the second segment: a connection with one segment
    /// in flight per round trip never gets here.
    #[cold]
    fn promote(&mut self, spare: Option<&mut SpareBoard>) {
        let Some(&seg) = self.one() else {
            return;
        };
        debug_assert!(self.board.is_none(), "an inline segment beside a board");
        self.one = NO_SEGMENT;
        let mut board = spare
            .and_then(|s| s.0.pop())
            .unwrap_or_else(|| Box::new(Board::new()));
        board.segs.push_back(seg);
        self.board = Some(board);
    }

    /// A new segment `[start, end)` was sent at `now` (`end` after `start`; a SYN or FIN
    /// counts as one). It must start where the previous one ended; anything else is a
    /// caller bug (asserted in debug builds, ignored in release if it would overlap).
    #[cfg(test)]
    pub fn push(&mut self, start: SeqNumber, end: SeqNumber, now: Instant) {
        self.push_reusing(start, end, now, &mut SpareBoard::default());
    }

    /// [`push`](Self::push), taking the stack's `spare` board if the queue needs one.
    /// Inline, its common case first: the first segment into an empty queue (a small
    /// message's, nothing in flight) goes to the inline slot.
    #[inline(always)]
    pub(crate) fn push_reusing(
        &mut self,
        start: SeqNumber,
        end: SeqNumber,
        now: Instant,
        spare: &mut SpareBoard,
    ) {
        if self.board.is_none() && self.one().is_none() && start.before(end) {
            self.one = TxSegment {
                start,
                end,
                sent_at: now,
                flags: SegFlags::EMPTY,
            };
            return;
        }
        self.push_general(start, end, now, spare);
    }

    /// [`push_reusing`](Self::push_reusing) past its common case.
    #[inline(never)]
    fn push_general(
        &mut self,
        start: SeqNumber,
        end: SeqNumber,
        now: Instant,
        spare: &mut SpareBoard,
    ) {
        debug_assert!(
            start.before(end),
            "empty or reversed segment {start}..{end}"
        );
        if !start.before(end) {
            return;
        }
        let last = match &self.board {
            Some(b) => b.segs.back(),
            None => self.one(),
        };
        if let Some(last) = last {
            debug_assert!(
                last.end == start,
                "segment {start} does not follow {}",
                last.end
            );
            if start.before(last.end) {
                return;
            }
        }
        // An empty queue's segment took the inline slot in `push_reusing`: without a
        // board, the slot holds one, moved to a board for this second segment.
        if self.board.is_none() {
            debug_assert!(self.one().is_some(), "push_reusing fills the empty queue");
            self.promote(Some(spare));
        }
        let board = self
            .board
            .get_or_insert_with(|| spare.0.pop().unwrap_or_else(|| Box::new(Board::new())));
        board.segs.push_back(TxSegment {
            start,
            end,
            sent_at: now,
            flags: SegFlags::EMPTY,
        });
    }

    /// [`on_ack_reusing`](Self::on_ack_reusing) without a spare board: the queue's heap is
    /// freed when it empties. `_now`: when the ACK came, on the tests' timeline (the queue
    /// keeps send times; the caller takes the RTT sample).
    #[cfg(test)]
    pub fn on_ack(&mut self, snd_una: SeqNumber, _now: Instant) -> AckResult {
        self.on_ack_reusing::<false>(snd_una, &mut SpareBoard::default())
    }

    /// A cumulative ACK moved the left edge to `snd_una`: drop fully acknowledged segments
    /// and trim a partially acknowledged head (Linux `tcp_clean_rtx_queue`;
    /// [RFC 2018 §5](https://www.rfc-editor.org/rfc/rfc2018#section-5): "A segment will not
    /// be dequeued and its buffer freed until the left window edge is advanced over it").
    /// When the queue empties it holds no heap: its board goes to the stack's `spare` if
    /// that is free and the board small, else is freed.
    ///
    /// `CLEAN`: the caller found the queue [clean](Self::is_clean) (the pure ACK of
    /// `tcp_ack_pure`): no segment is SACKED, LOST or RETRANS, so there are no counts to
    /// keep and no hint to move but the retransmission hint (at the end: nothing waits).
    /// The result is the same.
    #[inline]
    pub(crate) fn on_ack_reusing<const CLEAN: bool>(
        &mut self,
        snd_una: SeqNumber,
        spare: &mut SpareBoard,
    ) -> AckResult {
        let mut res = AckResult::default();
        let Some(b) = self.board.as_deref_mut() else {
            self.on_ack_one(snd_una, &mut res);
            return res;
        };
        debug_assert!(!CLEAN || b.sacked_out | b.lost_out | b.retrans_out | b.rtx_pending == 0);
        let mut first_acked_sent_at = None;
        let mut popped = 0usize;
        let mut popped_sacked_below_hint = 0u32;
        while let Some(seg) = b.pop_acked(snd_una, &mut res) {
            let f = seg.flags;
            if !CLEAN && f.contains(SegFlags::SACKED) {
                b.sacked_out -= 1;
                if popped < b.lost_hint {
                    popped_sacked_below_hint += 1;
                }
            } else {
                res.delivered += 1;
            }
            if !CLEAN {
                if f.contains(SegFlags::LOST) {
                    b.lost_out -= 1;
                }
                if f.contains(SegFlags::RETRANS) {
                    b.retrans_out -= 1;
                }
                if seg.wants_retransmit() {
                    b.rtx_pending -= 1;
                }
            }
            if f.contains(SegFlags::EVER_RETRANS) {
                res.newly_acked_retrans = true;
            } else if !f.contains(SegFlags::SACKED) && first_acked_sent_at.is_none() {
                first_acked_sent_at = Some(seg.sent_at);
            }
            popped += 1;
        }
        // Karn: no sample if any retransmitted segment is acked (Linux seq_rtt_us only
        // without FLAG_RETRANS_DATA_ACKED).
        if !res.newly_acked_retrans {
            res.rtt_sent_at = first_acked_sent_at;
        }
        if b.segs.is_empty() {
            if CLEAN {
                // The counts are zero and the loss hints at 0 already (nothing is SACKED
                // or LOST below them); the rest as a new board has it.
                self.release_board(spare, |board| {
                    debug_assert!(board.lost_hint == 0 && board.lost_hint_sacked == 0);
                    board.rtx_hint = 0;
                    board.highest_sacked = SeqNumber(0);
                    board.sack_cache_len = 0;
                });
            } else {
                self.release_board(spare, Board::reset);
            }
            return res;
        }
        if CLEAN {
            b.rtx_hint = b.segs.len();
        } else if popped > 0 {
            b.lost_hint_sacked -= popped_sacked_below_hint;
            b.lost_hint = b.lost_hint.saturating_sub(popped);
            b.rtx_hint = b.rtx_hint.saturating_sub(popped);
            b.tighten_rtx_hint();
        }
        b.shrink_after_pop();
        res
    }

    /// The one-segment queue's cumulative ACK (the inline segment, no board; see the
    /// module docs): if `snd_una` acknowledges all of it, it goes (the queue is empty) and
    /// its send time is returned; the ACK's result is then [`on_ack_reusing`]'s for it
    /// (one segment acked and delivered, never retransmitted, so timed). `None`, and
    /// nothing changed, for any other queue or a partial ACK.
    ///
    /// [`on_ack_reusing`]: Self::on_ack_reusing
    #[inline]
    pub(crate) fn take_one_acked(&mut self, snd_una: SeqNumber) -> Option<Instant> {
        if self.board.is_some() || self.one.start == self.one.end || self.one.end.after(snd_una) {
            return None;
        }
        let sent = self.one.sent_at;
        self.one = NO_SEGMENT;
        Some(sent)
    }

    /// [`on_ack_reusing`](Self::on_ack_reusing) for the inline segment (no flag set: never
    /// SACKed, lost or retransmitted, so its RTT is a sample and it counts as delivered).
    #[inline]
    fn on_ack_one(&mut self, snd_una: SeqNumber, res: &mut AckResult) {
        let Some(&seg) = self.one() else {
            return;
        };
        if seg.end.after(snd_una) {
            if seg.start.before(snd_una) {
                res.acked_bytes = snd_una - seg.start;
                self.one.start = snd_una;
            }
            return;
        }
        self.one = NO_SEGMENT;
        *res = AckResult {
            acked_segments: 1,
            acked_bytes: seg.seq_len(),
            rtt_sent_at: Some(seg.sent_at),
            newly_acked_retrans: false,
            delivered: 1,
        };
    }

    /// Empty the queue (its connection is closed or gone): the inline segment goes, and
    /// the board goes to `spare` as [`on_ack_reusing`](Self::on_ack_reusing) gives back an
    /// emptied one (reset to a new board's state, if there is room and it is small), else
    /// is freed.
    pub(crate) fn clear_reusing(&mut self, spare: &mut SpareBoard) {
        self.one = NO_SEGMENT;
        self.release_board(spare, Board::reset);
    }

    /// The queue emptied: its board goes to `spare` (tidied by `tidy` to a new board's
    /// state) if that is free and the board small, else is freed.
    #[inline]
    fn release_board(&mut self, spare: &mut SpareBoard, tidy: impl FnOnce(&mut Board)) {
        if let Some(mut board) = self.board.take()
            && spare.0.len() < SPARE_BOARDS
            && board.segs.capacity() <= SPARE_MAX_SEGS
        {
            tidy(&mut board);
            spare.0.push(board);
        }
    }

    /// Process the SACK blocks of one ACK, in the order they came
    /// ([RFC 2018 §5](https://www.rfc-editor.org/rfc/rfc2018#section-5): "the data sender
    /// MUST ... turn on the SACKed bits for segments that have been selectively
    /// acknowledged"). `snd_una` is the ACK's acknowledgment number (call this before
    /// [`on_ack_reusing`](Self::on_ack_reusing) for the same ACK, as Linux `tcp_ack` does, so that a D-SACK
    /// of a segment this ACK also acknowledges is still counted). Invalid and stale blocks
    /// are ignored (Linux `tcp_is_sackblock_valid`); a D-SACK first block (RFC 2883) is
    /// reported. A segment is SACKed only when a block covers it whole.
    pub fn on_sack(
        &mut self,
        blocks: &[(SeqNumber, SeqNumber)],
        snd_una: SeqNumber,
        snd_nxt: SeqNumber,
    ) -> SackResult {
        let sorted = sort_out_blocks(blocks, snd_una, snd_nxt);
        let mut res = SackResult {
            dsack: sorted.dsack.is_some(),
            dsack_range: sorted.dsack,
            invalid_blocks: sorted.invalid,
            ..SackResult::default()
        };
        if sorted.dsack.is_some() || sorted.len > 0 {
            self.promote(None);
        }
        let Some(b) = self.board.as_deref_mut() else {
            return res;
        };
        // Linux: with nothing SACKed the cache is stale ("It's already past").
        let cache = b.sack_cache;
        let cache = if b.sacked_out > 0 {
            &cache[..usize::from(b.sack_cache_len)]
        } else {
            &[]
        };
        if let Some(dsack) = sorted.dsack {
            b.sacktag(dsack, true, snd_una, &[], &mut res);
        }
        for &block in &sorted.blocks[..sorted.len] {
            b.sacktag(block, false, snd_una, cache, &mut res);
        }
        b.remember_blocks(&sorted.blocks[..sorted.len]);
        b.tighten_rtx_hint();
        res
    }

    /// [RFC 6675 §4](https://www.rfc-editor.org/rfc/rfc6675#section-4) `IsLost`: mark LOST
    /// every un-SACKed segment with at least `dup_thresh` SACKed segments above it; returns
    /// how many were newly marked. The RFC also counts a sequence number lost when "more
    /// than (DupThresh - 1) * SMSS bytes with sequence numbers greater than 'SeqNum' have
    /// been SACKed"; as no segment here exceeds SMSS, that test can only hold when the
    /// segment count does. Linux `tcp_update_scoreboard` / `tcp_mark_head_lost` (with
    /// `dup_thresh` = `tp->reordering`), resuming where the last call stopped.
    pub fn mark_lost(&mut self, dup_thresh: u32) -> u32 {
        let Some(b) = self.board.as_deref_mut() else {
            return 0;
        };
        let dup_thresh = dup_thresh.max(1);
        if b.sacked_out < dup_thresh {
            return 0;
        }
        let mut idx = b.lost_hint;
        let mut sacked_below = b.lost_hint_sacked;
        let mut newly = 0;
        while let Some(seg) = b.segs.get_mut(idx) {
            if seg.flags.contains(SegFlags::SACKED) {
                sacked_below += 1;
            } else if !seg.flags.contains(SegFlags::LOST) {
                // SACKed segments above this one: all but those below it.
                if b.sacked_out - sacked_below < dup_thresh {
                    break;
                }
                seg.flags.insert(SegFlags::LOST);
                let candidate = !seg.flags.contains(SegFlags::RETRANS);
                b.lost_out += 1;
                newly += 1;
                if candidate {
                    b.note_rtx_candidate(idx);
                }
            }
            idx += 1;
            b.step();
        }
        b.lost_hint = idx;
        b.lost_hint_sacked = sacked_below;
        newly
    }

    /// Mark the head LOST if it is neither SACKED nor LOST already; returns whether it was
    /// marked. For entering fast recovery on duplicate ACKs before DupThresh segments are
    /// SACKed: [RFC 6675 §5](https://www.rfc-editor.org/rfc/rfc6675#section-5) step (4.3)
    /// "Retransmit the first data segment presumed dropped" (Linux
    /// `tcp_mark_head_lost(sk, 1, 1)`).
    pub fn mark_head_lost(&mut self) -> bool {
        self.promote(None);
        let Some(b) = self.board.as_deref_mut() else {
            return false;
        };
        let Some(head) = b.segs.front_mut() else {
            return false;
        };
        if head.flags.intersects(SegFlags::SACKED | SegFlags::LOST) {
            return false;
        }
        head.flags.insert(SegFlags::LOST);
        let candidate = !head.flags.contains(SegFlags::RETRANS);
        b.lost_out += 1;
        if candidate {
            b.note_rtx_candidate(0);
        }
        true
    }

    /// The retransmission timer fired (Linux `tcp_timeout_mark_lost`): every un-SACKed
    /// segment is LOST and every retransmission in flight presumed lost too, so
    /// `in_flight()` drops to 0 and [`next_to_retransmit`](Self::next_to_retransmit) walks
    /// the holes from the left edge. SACK information is kept
    /// ([RFC 6675 §5.1](https://www.rfc-editor.org/rfc/rfc6675#section-5.1): "a SACK TCP
    /// sender SHOULD utilize all SACK information made available during the loss recovery
    /// following an RTO") unless the head is SACKED, which means the receiver reneged (it
    /// acknowledged up to a segment it had SACKed without covering it): then all SACKED
    /// bits are cleared ([RFC 2018 §5](https://www.rfc-editor.org/rfc/rfc2018#section-5):
    /// "After a retransmit timeout the data sender SHOULD turn off all of the SACKed bits,
    /// since the timeout might indicate that the data receiver has reneged"). Returns
    /// whether it reneged (Linux `TCPSACKReneging`).
    pub fn mark_all_lost(&mut self) -> bool {
        self.promote(None);
        let Some(b) = self.board.as_deref_mut() else {
            return false;
        };
        let reneged = b
            .segs
            .front()
            .is_some_and(|s| s.flags.contains(SegFlags::SACKED));
        let (mut sacked, mut lost, mut first_lost) = (0, 0, None);
        for (idx, seg) in b.segs.iter_mut().enumerate() {
            seg.flags.remove(SegFlags::RETRANS);
            if reneged {
                seg.flags.remove(SegFlags::SACKED);
            }
            if seg.flags.contains(SegFlags::SACKED) {
                sacked += 1;
            } else {
                seg.flags.insert(SegFlags::LOST);
                lost += 1;
                first_lost.get_or_insert(idx);
            }
        }
        b.sacked_out = sacked;
        b.lost_out = lost;
        b.retrans_out = 0;
        b.rtx_pending = lost;
        b.rtx_hint = first_lost.unwrap_or(b.segs.len());
        b.lost_hint = b.segs.len();
        b.lost_hint_sacked = sacked;
        if reneged {
            b.sack_cache_len = 0;
        }
        reneged
    }

    /// Clear every LOST mark (Linux `tcp_undo_cwnd_reduction` with `unmark_loss`, when the
    /// core finds a loss recovery was spurious). RETRANS marks stay.
    pub fn unmark_lost(&mut self) {
        let Some(b) = self.board.as_deref_mut() else {
            return;
        };
        for seg in &mut b.segs {
            seg.flags.remove(SegFlags::LOST);
        }
        b.lost_out = 0;
        b.rtx_pending = 0;
        b.rtx_hint = b.segs.len();
        b.lost_hint = 0;
        b.lost_hint_sacked = 0;
    }

    /// [RFC 6675 §4](https://www.rfc-editor.org/rfc/rfc6675#section-4) `NextSeg` rule 1:
    /// the lowest segment presumed lost (1.c) and not retransmitted since (1.a, "greater
    /// than HighRxt"); rule 1.b holds because [`mark_lost`](Self::mark_lost) marks only
    /// segments below SACKed ones. Rules 2-4 (new data, rescue) are the core's. As Linux
    /// `tcp_xmit_retransmit_queue`: LOST, neither SACKED nor RETRANS.
    pub fn next_to_retransmit(&self) -> Option<(SeqNumber, SeqNumber)> {
        let b = self.board.as_deref()?;
        if b.rtx_pending == 0 {
            return None;
        }
        b.segs.get(b.rtx_hint).map(|s| (s.start, s.end))
    }

    /// Whether a retransmission of the segment starting at `start` carries PSH: not for
    /// a piece cut from the front of a longer one ([`SegFlags::NO_PSH`]).
    pub fn push_on_retransmit(&self, start: SeqNumber) -> bool {
        let Some(b) = self.board.as_deref() else {
            return true;
        };
        b.segs
            .get(b.first_ending_after(start))
            .is_none_or(|s| start.before(s.start) || !s.flags.contains(SegFlags::NO_PSH))
    }

    /// The segment holding `start` was retransmitted at `now`: RETRANS and EVER_RETRANS
    /// set, send time updated. Ignored for a SACKED segment (never retransmitted, RFC 2018
    /// §5: "the data sender will skip that segment during any later retransmission") or
    /// when no segment holds `start`.
    pub fn mark_retransmitted(&mut self, start: SeqNumber, now: Instant) {
        self.promote(None);
        let Some(b) = self.board.as_deref_mut() else {
            return;
        };
        let idx = b.first_ending_after(start);
        let Some(seg) = b.segs.get_mut(idx) else {
            return;
        };
        if start.before(seg.start) || seg.flags.contains(SegFlags::SACKED) {
            return;
        }
        let was_candidate = seg.wants_retransmit();
        if !seg.flags.contains(SegFlags::RETRANS) {
            b.retrans_out += 1;
        }
        seg.flags.insert(SegFlags::RETRANS | SegFlags::EVER_RETRANS);
        seg.sent_at = now;
        if was_candidate {
            b.rtx_pending -= 1;
            if idx == b.rtx_hint || b.rtx_pending == 0 {
                b.tighten_rtx_hint();
            }
        }
    }

    /// The path's MSS fell to `mss` (path MTU discovery, RFC 1191 / RFC 8201): split every
    /// segment longer than `mss` that is not SACKed into `mss`-sized pieces (Linux
    /// `tcp_fragment`, which `tcp_retransmit_skb` applies to a segment larger than the
    /// current MSS), so that a retransmission fits the path. With `mark_lost`, those
    /// pieces are marked LOST and wait for retransmission (Linux `tcp_simple_retransmit`:
    /// "it's clear that the old packet has been dropped"). Counters and hints are
    /// recomputed. Returns the pieces marked lost.
    pub fn resegment(&mut self, mss: usize, mark_lost: bool) -> u32 {
        if self.one().is_some_and(|s| s.seq_len() > mss.max(1)) {
            self.promote(None);
        }
        let Some(b) = self.board.as_deref_mut() else {
            return 0;
        };
        let mss = mss.max(1);
        if b.segs
            .iter()
            .all(|s| s.seq_len() <= mss || s.flags.contains(SegFlags::SACKED))
        {
            return 0;
        }
        let mut out = VecDeque::with_capacity(b.segs.len());
        let mut marked = 0;
        for seg in b.segs.drain(..) {
            if seg.seq_len() <= mss || seg.flags.contains(SegFlags::SACKED) {
                out.push_back(seg);
                continue;
            }
            let mut start = seg.start;
            while start != seg.end {
                let end = if seg.end.diff(start) > mss as i32 {
                    start + mss
                } else {
                    seg.end
                };
                let mut piece = TxSegment { start, end, ..seg };
                if end != seg.end {
                    // Linux tcp_fragment: PSH (and FIN) stay with the tail only.
                    piece.flags.insert(SegFlags::NO_PSH);
                }
                if mark_lost {
                    piece.flags.remove(SegFlags::RETRANS);
                    piece.flags.insert(SegFlags::LOST);
                    marked += 1;
                }
                out.push_back(piece);
                start = end;
            }
        }
        b.segs = out;
        let count = |f: SegFlags| b.segs.iter().filter(|s| s.flags.contains(f)).count() as u32;
        b.sacked_out = count(SegFlags::SACKED);
        b.lost_out = count(SegFlags::LOST);
        b.retrans_out = count(SegFlags::RETRANS);
        b.rtx_pending = b.segs.iter().filter(|s| s.wants_retransmit()).count() as u32;
        b.rtx_hint = b
            .segs
            .iter()
            .position(TxSegment::wants_retransmit)
            .unwrap_or(b.segs.len());
        b.lost_hint = 0;
        b.lost_hint_sacked = 0;
        marked
    }

    /// Segments in the queue (Linux `packets_out`).
    pub fn packets_out(&self) -> u32 {
        self.len() as u32
    }

    /// SACKED segments (Linux `sacked_out`).
    pub fn sacked_out(&self) -> u32 {
        self.board.as_ref().map_or(0, |b| b.sacked_out)
    }

    /// LOST segments (Linux `lost_out`).
    pub fn lost_out(&self) -> u32 {
        self.board.as_ref().map_or(0, |b| b.lost_out)
    }

    /// Segments with a retransmission in flight (Linux `retrans_out`).
    pub fn retrans_out(&self) -> u32 {
        self.board.as_ref().map_or(0, |b| b.retrans_out)
    }

    /// Segments in the network: Linux `tcp_packets_in_flight`, `packets_out - (sacked_out +
    /// lost_out) + retrans_out`. This is
    /// [RFC 6675 §4](https://www.rfc-editor.org/rfc/rfc6675#section-4) `SetPipe` counted in
    /// segments: each un-SACKed segment counts once unless lost, and once more while a
    /// retransmission of it is in flight.
    pub fn in_flight(&self) -> u32 {
        self.board.as_ref().map_or(self.len() as u32, |b| {
            (b.segs.len() as u32).saturating_sub(b.sacked_out + b.lost_out) + b.retrans_out
        })
    }

    /// No segment SACKed, marked lost or with a retransmission in flight: the state in
    /// which a cumulative ACK only pops segments (Linux: `sacked_out`, `lost_out` and
    /// `retrans_out` all zero, so `tcp_ack_is_dubious` can only come from the ACK itself).
    #[inline]
    pub fn is_clean(&self) -> bool {
        self.board
            .as_ref()
            .is_none_or(|b| b.sacked_out | b.lost_out | b.retrans_out | b.rtx_pending == 0)
    }

    /// Nothing outstanding.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.board.is_none() && self.one().is_none()
    }

    /// Segments in the queue.
    #[inline]
    pub fn len(&self) -> usize {
        self.board
            .as_ref()
            .map_or(usize::from(self.one().is_some()), |b| b.segs.len())
    }

    /// The end of the highest SACKed segment (RFC 6675's "highest octet covered by any
    /// received SACK", plus one; Linux `tcp_highest_sack_seq`), if any is SACKed.
    pub fn highest_sacked(&self) -> Option<SeqNumber> {
        let b = self.board.as_deref()?;
        (b.sacked_out > 0).then_some(b.highest_sacked)
    }

    /// The oldest outstanding segment (Linux `tcp_rtx_queue_head`).
    pub fn front(&self) -> Option<&TxSegment> {
        match &self.board {
            Some(b) => b.segs.front(),
            None => self.one(),
        }
    }

    /// The outstanding segments, lowest first.
    pub fn iter(&self) -> impl Iterator<Item = &TxSegment> + '_ {
        self.board
            .iter()
            .flat_map(|b| b.segs.iter())
            .chain(self.one())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MSS: u32 = 100;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Segment `i`'s range in a queue of MSS-sized segments from `base`.
    fn seg(base: u32, i: u32) -> (SeqNumber, SeqNumber) {
        let start = SeqNumber(base.wrapping_add(i * MSS));
        (start, start + MSS as usize)
    }

    /// Segments `i..j` as one SACK block.
    fn block(base: u32, i: u32, j: u32) -> (SeqNumber, SeqNumber) {
        (seg(base, i).0, seg(base, j - 1).1)
    }

    /// `n` MSS-sized segments from `base`, segment `i` sent at `i` ms.
    fn queue(base: u32, n: u32) -> RtxQueue {
        let mut q = RtxQueue::new();
        for i in 0..n {
            let (s, e) = seg(base, i);
            q.push(s, e, t(u64::from(i)));
        }
        q
    }

    fn flags(q: &RtxQueue) -> Vec<SegFlags> {
        q.iter().map(|s| s.flags).collect()
    }

    /// A queue that empties gives its board to the stack's spare and the next queue to
    /// fill takes it, as good as new: no counter, hint or remembered SACK block of the old
    /// queue survives (a stale SACK cache would skip a block the new queue never saw).
    /// A board grown large is freed instead of kept.
    #[test]
    fn an_emptied_board_is_reused_as_new() {
        let base = 1000;
        let mut spare = SpareBoard::default();
        let mut q = RtxQueue::new();
        for i in 0..6 {
            let (s, e) = seg(base, i);
            q.push_reusing(s, e, t(u64::from(i)), &mut spare);
        }
        q.on_sack(&[block(base, 3, 5)], SeqNumber(base), seg(base, 6).0);
        assert_eq!(q.sacked_out(), 2);
        q.on_ack_reusing::<false>(seg(base, 6).0, &mut spare);
        assert!(
            q.is_empty() && q.heap_bytes() == 0,
            "an empty queue holds no heap"
        );
        let kept = spare.0.last().expect("the board went to the spare");
        assert_eq!(
            (kept.sack_cache_len, kept.highest_sacked, kept.segs.len()),
            (0, SeqNumber(0), 0),
            "the spare is reset to a new board's state"
        );

        let mut q = RtxQueue::new();
        for i in 0..6 {
            let (s, e) = seg(base, i);
            q.push_reusing(s, e, t(20 + u64::from(i)), &mut spare);
        }
        assert!(spare.0.is_empty(), "the new queue took the spare");
        assert_eq!((q.sacked_out(), q.highest_sacked()), (0, None));
        let r = q.on_sack(&[block(base, 3, 5)], SeqNumber(base), seg(base, 6).0);
        assert_eq!(r.newly_sacked, 2, "the same block, new to this queue");
        q.check_invariants();

        let mut big = RtxQueue::new();
        for i in 0..(SPARE_MAX_SEGS as u32 + 1) {
            let (s, e) = seg(base, i);
            big.push_reusing(s, e, t(0), &mut spare);
        }
        big.on_ack_reusing::<false>(seg(base, SPARE_MAX_SEGS as u32).1, &mut spare);
        assert!(
            big.is_empty() && spare.0.is_empty(),
            "a large board is freed"
        );
    }

    /// One segment in flight (a message and its echo, a SYN, a FIN) stays inline: no
    /// heap, no spare board taken, and its ACKs give what a board's would: a partial ACK
    /// trims it, the full ACK pops it with an RTT sample, counted delivered.
    #[test]
    fn a_lone_segment_stays_inline_and_is_acked_as_on_a_board() {
        let base = 1000;
        let mut spare = SpareBoard::default();
        spare.0.push(Box::new(Board::new()));
        let (s, e) = seg(base, 0);
        let mut q = RtxQueue::new();
        q.push_reusing(s, e, t(5), &mut spare);
        assert_eq!((q.len(), q.in_flight(), q.heap_bytes()), (1, 1, 0));
        assert_eq!(spare.0.len(), 1, "no board taken");
        assert!(q.is_clean() && q.next_to_retransmit().is_none());
        let head = TxSegment {
            start: s,
            end: e,
            sent_at: t(5),
            flags: SegFlags::EMPTY,
        };
        assert_eq!(q.front(), Some(&head));
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![head]);
        // The same ACKs on a board holding the same segment (a second pushed and acked
        // first would not do: push a pair and ack the first, then compare the second).
        let mut b = RtxQueue::new();
        b.push(SeqNumber(base - 50), s, t(0));
        b.push(s, e, t(5));
        b.on_ack(s, t(5));
        assert!(b.heap_bytes() > 0, "the comparison queue has a board");
        for ack in [s + 40usize, e] {
            let inline = q.on_ack_reusing::<true>(ack, &mut spare);
            let board = b.on_ack_reusing::<false>(ack, &mut SpareBoard::default());
            assert_eq!(inline, board, "ack {ack}");
            assert_eq!(q.front(), b.front());
            q.check_invariants();
        }
        assert!(q.is_empty() && q.heap_bytes() == 0 && spare.0.len() == 1);
    }

    /// Whatever would set a flag on the inline segment moves it to a board first, where
    /// the counters see it: a timeout marks it lost and it is the one to resend, its
    /// retransmission's ACK gives no RTT sample (Karn); a second segment joins it on a
    /// board, which SACKs then tag.
    #[test]
    fn a_lone_segment_moves_to_a_board_when_lost_or_joined() {
        let base = 7000;
        let (s, e) = seg(base, 0);
        let mut q = RtxQueue::new();
        q.push(s, e, t(1));
        assert!(!q.mark_all_lost(), "no reneging");
        assert_eq!((q.lost_out(), q.in_flight()), (1, 0));
        assert_eq!(q.next_to_retransmit(), Some((s, e)));
        assert!(q.heap_bytes() > 0, "on a board now");
        q.check_invariants();
        q.mark_retransmitted(s, t(300));
        assert_eq!((q.retrans_out(), q.in_flight()), (1, 1));
        let r = q.on_ack(e, t(310));
        assert_eq!((r.acked_segments, r.rtt_sent_at), (1, None), "Karn: {r:?}");
        assert!(r.newly_acked_retrans && q.is_empty());

        let mut q = RtxQueue::new();
        for i in 0..4 {
            let (s, e) = seg(base, i);
            q.push(s, e, t(u64::from(i)));
        }
        assert_eq!(q.len(), 4);
        assert_eq!(
            q.iter().map(|x| x.start).collect::<Vec<_>>(),
            (0..4).map(|i| seg(base, i).0).collect::<Vec<_>>(),
            "the inline segment heads the board"
        );
        let r = q.on_sack(&[block(base, 1, 4)], s, seg(base, 4).0);
        assert_eq!((r.newly_sacked, q.sacked_out()), (3, 3));
        assert_eq!(q.mark_lost(3), 1, "the first segment, below three SACKed");
        assert_eq!(q.next_to_retransmit(), Some((s, e)));
        q.check_invariants();
    }

    /// A burst of queues filling at once (a pingpong round over many connections) takes
    /// the boards the previous burst emptied, up to [`SPARE_BOARDS`] (no more are kept).
    #[test]
    fn a_burst_of_queues_reuses_the_previous_bursts_boards_up_to_the_bound() {
        let base = 1000;
        let mut spare = SpareBoard::default();
        let n = SPARE_BOARDS + 10;
        let mut qs: Vec<RtxQueue> = (0..n).map(|_| RtxQueue::new()).collect();
        let fill = |qs: &mut Vec<RtxQueue>, spare: &mut SpareBoard| {
            // Two segments each: one alone stays inline and takes no board.
            for q in qs.iter_mut() {
                for i in 0..2 {
                    let (s, e) = seg(base, i);
                    q.push_reusing(s, e, t(0), spare);
                }
            }
        };
        fill(&mut qs, &mut spare);
        for q in &mut qs {
            q.on_ack_reusing::<true>(seg(base, 1).1, &mut spare);
        }
        assert_eq!(spare.0.len(), SPARE_BOARDS, "kept up to the bound");
        fill(&mut qs, &mut spare);
        assert!(
            spare.0.is_empty(),
            "the kept boards were taken again, not new ones allocated"
        );
    }

    /// Path MTU discovery re-cuts the queue: segments longer than the new MSS that are
    /// not SACKed become MSS-sized pieces, marked LOST when asked (Linux
    /// tcp_simple_retransmit), SACKed ones stay whole, and every counter and hint stays
    /// exact (a recount that forgot one would trip `check_invariants`).
    #[test]
    fn resegment_splits_unsacked_segments_and_keeps_counters_exact() {
        let base = 5000;
        let mut q = queue(base, 4);
        q.on_sack(&[block(base, 2, 3)], SeqNumber(base), seg(base, 4).0);
        q.mark_retransmitted(seg(base, 0).0, t(9));
        assert_eq!(
            q.resegment(40, true),
            9,
            "three 100-byte segments in 40+40+20"
        );
        q.check_invariants();
        let lens: Vec<usize> = q.iter().map(TxSegment::seq_len).collect();
        assert_eq!(lens, [40, 40, 20, 40, 40, 20, 100, 40, 40, 20]);
        assert_eq!(q.lost_out(), 9);
        assert_eq!(q.retrans_out(), 0, "the retransmitted copy was too big too");
        assert_eq!(q.sacked_out(), 1);
        assert_eq!(
            q.next_to_retransmit(),
            Some((seg(base, 0).0, seg(base, 0).0 + 40))
        );
        // Nothing longer than the MSS left: nothing to do.
        assert_eq!(q.resegment(40, true), 0);
        q.check_invariants();
    }

    fn indices_with(q: &RtxQueue, f: SegFlags) -> Vec<usize> {
        q.iter()
            .enumerate()
            .filter(|(_, s)| s.flags.contains(f))
            .map(|(i, _)| i)
            .collect()
    }

    impl RtxQueue {
        /// Recount every counter from the flags and check the hints' invariants.
        fn check_invariants(&self) {
            let Some(b) = self.board.as_deref() else {
                assert_eq!(
                    self.one.flags,
                    SegFlags::EMPTY,
                    "a flag on the inline segment"
                );
                return;
            };
            assert!(self.one().is_none(), "an inline segment beside a board");
            assert!(!b.segs.is_empty(), "an empty queue must free its board");
            let count = |f: SegFlags| b.segs.iter().filter(|s| s.flags.contains(f)).count() as u32;
            assert_eq!(b.sacked_out, count(SegFlags::SACKED), "sacked_out");
            assert_eq!(b.lost_out, count(SegFlags::LOST), "lost_out");
            assert_eq!(b.retrans_out, count(SegFlags::RETRANS), "retrans_out");
            for s in &b.segs {
                assert!(
                    !s.flags.contains(SegFlags::SACKED | SegFlags::LOST),
                    "{s:?}"
                );
                assert!(
                    !s.flags.contains(SegFlags::RETRANS)
                        || s.flags.contains(SegFlags::EVER_RETRANS)
                );
                assert!(s.start.before(s.end));
            }
            for w in b.segs.iter().zip(b.segs.iter().skip(1)) {
                assert_eq!(w.0.end, w.1.start, "segments are contiguous");
            }
            let pending = b.segs.iter().filter(|s| s.wants_retransmit()).count() as u32;
            assert_eq!(b.rtx_pending, pending, "rtx_pending");
            if pending > 0 {
                let first = b.segs.iter().position(|s| s.wants_retransmit());
                assert_eq!(Some(b.rtx_hint), first, "rtx_hint is exact");
            }
            assert!(b.lost_hint <= b.segs.len());
            let below = b.segs.iter().take(b.lost_hint);
            assert!(
                below
                    .clone()
                    .all(|s| s.flags.intersects(SegFlags::SACKED | SegFlags::LOST)),
                "below lost_hint all SACKED or LOST"
            );
            let sacked_below = below.filter(|s| s.flags.contains(SegFlags::SACKED)).count() as u32;
            assert_eq!(b.lost_hint_sacked, sacked_below, "lost_hint_sacked");
            if b.sacked_out > 0 {
                let highest = b
                    .segs
                    .iter()
                    .rev()
                    .find(|s| s.flags.contains(SegFlags::SACKED))
                    .map(|s| s.end);
                assert_eq!(Some(b.highest_sacked), highest, "highest_sacked");
            }
        }
    }

    /// The queue is one inline segment and a pointer (32 bytes, in the connection's
    /// `ActiveState`), and an empty one holds no heap.
    #[test]
    fn idle_queue_is_a_segment_and_a_pointer_and_holds_no_heap() {
        const { assert!(size_of::<RtxQueue>() == 32) };
        assert!(size_of::<TxSegment>() <= 24, "{}", size_of::<TxSegment>());
        let mut q = RtxQueue::new();
        assert_eq!(q.heap_bytes(), 0);
        assert!(q.is_empty());
        for i in 0..100 {
            let (s, e) = seg(7, i);
            q.push(s, e, t(0));
        }
        assert!(q.heap_bytes() >= 100 * size_of::<TxSegment>());
        let r = q.on_ack(seg(7, 50).0, t(10));
        assert_eq!(r.acked_segments, 50);
        assert!(q.heap_bytes() > 0);
        q.on_ack(seg(7, 99).1, t(10));
        assert!(q.is_empty());
        assert!(q.board.is_none());
        assert_eq!(q.heap_bytes(), 0);
        assert_eq!(q.len(), 0);
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn deque_shrinks_after_a_burst() {
        let mut q = queue(0, 10_000);
        let big = q.heap_bytes();
        q.on_ack(seg(0, 9_990).0, t(1));
        assert_eq!(q.len(), 10);
        assert!(q.heap_bytes() * 10 < big, "{} vs {big}", q.heap_bytes());
    }

    #[test]
    fn ack_pops_whole_segments_and_trims_a_partial_head() {
        let mut q = queue(1000, 3);
        let r = q.on_ack(SeqNumber(1150), t(20));
        assert_eq!((r.acked_segments, r.acked_bytes, r.delivered), (1, 150, 1));
        assert_eq!(
            q.front().map(|s| (s.start, s.end)),
            Some((SeqNumber(1150), SeqNumber(1200)))
        );
        assert_eq!(q.packets_out(), 2);
        // An old or duplicate ACK changes nothing.
        assert_eq!(q.on_ack(SeqNumber(1100), t(21)), AckResult::default());
        let r = q.on_ack(SeqNumber(1300), t(22));
        assert_eq!((r.acked_segments, r.acked_bytes), (2, 150));
        assert!(q.is_empty());
    }

    #[test]
    fn rtt_sample_follows_karns_rule() {
        // Segment i sent at i ms. Acking 0..2 at 50 ms samples the oldest: 50 ms.
        let mut q = queue(0, 7);
        let r = q.on_ack(seg(0, 1).1, t(50));
        assert_eq!(r.rtt_sent_at, Some(t(0)), "sent at 0, acked at 50 ms");
        assert!(!r.newly_acked_retrans);

        // Segment 2 retransmitted: an ACK covering it gives no sample, even though it
        // also covers segment 3, never retransmitted (Linux FLAG_RETRANS_DATA_ACKED).
        q.mark_retransmitted(seg(0, 2).0, t(60));
        let r = q.on_ack(seg(0, 3).1, t(70));
        assert_eq!(r.acked_segments, 2);
        assert_eq!(r.rtt_sent_at, None);
        assert!(r.newly_acked_retrans);

        // Segment 5 SACKed while 4 is outstanding. An ACK of both samples 4 only.
        let s = q.on_sack(&[seg(0, 5)], seg(0, 4).0, seg(0, 7).1);
        assert_eq!(s.newly_sacked, 1);
        assert_eq!(s.first_sacked_sent_at, Some(t(5)));
        let r = q.on_ack(seg(0, 5).0, t(80));
        assert_eq!((r.rtt_sent_at, r.delivered), (Some(t(4)), 1));
        // An ACK of the SACKed segment alone gives no second sample, delivers nothing new.
        let r = q.on_ack(seg(0, 5).1, t(85));
        assert_eq!((r.acked_segments, r.rtt_sent_at, r.delivered), (1, None, 0));
        let r = q.on_ack(seg(0, 6).1, t(90));
        assert_eq!((r.rtt_sent_at, r.delivered), (Some(t(6)), 1));
    }

    #[test]
    fn sack_of_retransmitted_segment_gives_no_rtt_source() {
        let mut q = queue(0, 4);
        q.mark_head_lost();
        q.mark_retransmitted(seg(0, 0).0, t(30));
        q.mark_retransmitted(seg(0, 2).0, t(30));
        let s = q.on_sack(&[block(0, 2, 4)], seg(0, 0).0, seg(0, 3).1);
        assert_eq!(s.newly_sacked, 2);
        assert_eq!(
            s.first_sacked_sent_at,
            Some(t(3)),
            "segment 2 was retransmitted"
        );
        // After an RTO the retransmissions are presumed lost (RETRANS cleared) but
        // EVER_RETRANS stays: a SACK of segment 1, retransmitted before, is no RTT source.
        let mut q = queue(0, 4);
        q.mark_retransmitted(seg(0, 1).0, t(30));
        q.mark_all_lost();
        let s = q.on_sack(&[seg(0, 1), seg(0, 3)], seg(0, 0).0, seg(0, 3).1);
        assert_eq!(s.newly_sacked, 2);
        assert_eq!(s.first_sacked_sent_at, Some(t(3)));
    }

    /// RFC 6675 §4 IsLost with DupThresh 3: a hole is lost once three segments above it
    /// are SACKed, not before.
    #[test]
    fn islost_needs_dupthresh_sacked_segments_above() {
        let mut q = queue(0, 10);
        let una = seg(0, 0).0;
        let nxt = seg(0, 9).1;
        for k in 2..=3 {
            q.on_sack(&[block(0, 1, k)], una, nxt);
            assert_eq!(q.mark_lost(3), 0, "{} SACKed above", k - 1);
            assert_eq!(q.next_to_retransmit(), None);
        }
        q.on_sack(&[block(0, 1, 4)], una, nxt);
        assert_eq!(q.sacked_out(), 3);
        assert_eq!(q.mark_lost(3), 1);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0]);
        assert_eq!(q.next_to_retransmit(), Some(seg(0, 0)));
        assert_eq!(q.highest_sacked(), Some(seg(0, 3).1));
        // Segments above the highest SACK are not lost (RFC 6675 NextSeg 1.b).
        assert_eq!(q.mark_lost(3), 0);
        q.check_invariants();
    }

    /// IsLost counts SACKed segments above, wherever they are: with holes at 0, 2 and 4
    /// and SACKs of 1, 3, 5, only 0 has three above; SACKing 6 makes 2 lost too.
    #[test]
    fn islost_counts_discontiguous_sacks() {
        let mut q = queue(0, 10);
        let (una, nxt) = (seg(0, 0).0, seg(0, 9).1);
        let s = q.on_sack(&[seg(0, 5), seg(0, 3), seg(0, 1)], una, nxt);
        assert_eq!((s.newly_sacked, s.invalid_blocks, s.dsack), (3, 0, false));
        assert_eq!(q.mark_lost(3), 1);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0]);
        q.on_sack(&[seg(0, 6), seg(0, 5), seg(0, 3)], una, nxt);
        assert_eq!(q.mark_lost(3), 1);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0, 2]);
        // With DupThresh 1 (heavy reordering disabled), every hole below a SACK is lost.
        assert_eq!(q.mark_lost(1), 1);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0, 2, 4]);
        q.check_invariants();
    }

    /// RFC 6675 NextSeg rule 1 walks the lost segments lowest first, skipping those
    /// already retransmitted (HighRxt), then stops.
    #[test]
    fn nextseg_lowest_lost_not_yet_retransmitted() {
        let mut q = queue(0, 10);
        let (una, nxt) = (seg(0, 0).0, seg(0, 9).1);
        q.on_sack(&[block(0, 3, 6), block(0, 7, 10)], una, nxt);
        assert_eq!(q.mark_lost(3), 4, "0, 1, 2 and 6 have >= 3 SACKed above");
        let mut order = Vec::new();
        while let Some((s, e)) = q.next_to_retransmit() {
            order.push((s, e));
            q.mark_retransmitted(s, t(100));
            q.check_invariants();
        }
        assert_eq!(order, vec![seg(0, 0), seg(0, 1), seg(0, 2), seg(0, 6)]);
        assert_eq!((q.lost_out(), q.retrans_out()), (4, 4));
        // The retransmission of 6 is SACKed: LOST and RETRANS both clear.
        q.on_sack(&[block(0, 3, 10)], una, nxt);
        assert_eq!(
            q.iter().nth(6).map(|s| s.flags),
            Some(SegFlags::SACKED | SegFlags::EVER_RETRANS)
        );
        assert_eq!((q.lost_out(), q.retrans_out()), (3, 3));
        q.check_invariants();
    }

    /// RFC 6675 SetPipe, octet by octet over [HighACK, HighData), counted in segments:
    /// +1 for each un-SACKed segment not IsLost, +1 more if it was retransmitted. Linux's
    /// packets_out - (sacked_out + lost_out) + retrans_out must agree.
    #[test]
    fn in_flight_is_rfc6675_pipe() {
        let mut q = queue(0, 10);
        let (una, nxt) = (seg(0, 0).0, seg(0, 9).1);
        assert_eq!(q.in_flight(), 10);
        q.on_sack(&[block(0, 2, 5), seg(0, 8)], una, nxt);
        assert_eq!(q.in_flight(), 6, "4 SACKed");
        q.mark_lost(3);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0, 1]);
        assert_eq!(q.in_flight(), 4, "2 lost");
        q.mark_retransmitted(seg(0, 0).0, t(1));
        assert_eq!(q.in_flight(), 5, "a retransmission in flight");
        // A rescue retransmission of a segment not presumed lost (RFC 6675 NextSeg rule
        // 4) counts twice: the original may still arrive.
        q.mark_retransmitted(seg(0, 9).0, t(1));
        assert_eq!(q.in_flight(), 6);

        let sacked: Vec<usize> = indices_with(&q, SegFlags::SACKED);
        let rfc_pipe: u32 = (0..10)
            .filter(|i| !sacked.contains(i))
            .map(|i| {
                let above = sacked.iter().filter(|&&j| j > i).count();
                let is_lost = above >= 3;
                let rexmitted = q.iter().nth(i).unwrap().flags.contains(SegFlags::RETRANS);
                u32::from(!is_lost) + u32::from(rexmitted)
            })
            .sum();
        assert_eq!(q.in_flight(), rfc_pipe);
        q.check_invariants();
    }

    /// RFC 2883 §4: a first block below the cumulative ACK is a D-SACK. It tags nothing
    /// and is not counted invalid.
    #[test]
    fn dsack_below_cumulative_ack() {
        let mut q = queue(0, 6);
        q.on_ack(seg(0, 3).0, t(10));
        let ack = seg(0, 3).0;
        let s = q.on_sack(&[seg(0, 1), seg(0, 4)], ack, seg(0, 5).1);
        assert!(s.dsack);
        assert_eq!(s.dsack_range, Some(seg(0, 1)));
        assert_eq!(
            (s.newly_sacked, s.invalid_blocks, s.dsack_retrans),
            (1, 0, 0)
        );
        assert_eq!(
            indices_with(&q, SegFlags::SACKED),
            vec![1],
            "segment 4 only"
        );
        // A normal first block is not a D-SACK.
        let s = q.on_sack(&[seg(0, 5)], ack, seg(0, 5).1);
        assert!(!s.dsack);
        assert_eq!(s.dsack_range, None);
    }

    /// A retransmission that both copies of reach the receiver: the ACK covers segment 0
    /// and D-SACKs it. With on_sack first (Linux order) the segment is still queued and
    /// the unneeded retransmission is counted.
    #[test]
    fn dsack_reports_a_spurious_retransmission() {
        let mut q = queue(0, 4);
        q.mark_all_lost();
        q.mark_retransmitted(seg(0, 0).0, t(200));
        assert_eq!(q.in_flight(), 1);
        let ack = seg(0, 0).1;
        let s = q.on_sack(&[seg(0, 0)], ack, seg(0, 3).1);
        assert!(s.dsack);
        assert_eq!((s.dsack_retrans, s.newly_sacked), (1, 0));
        let r = q.on_ack(ack, t(210));
        assert!(r.newly_acked_retrans);
        assert_eq!(r.rtt_sent_at, None);
    }

    /// RFC 2883 §4: a first block inside the second block is a D-SACK even above the
    /// cumulative ACK. A D-SACK of a retransmitted (not lost) segment clears its RETRANS:
    /// that retransmission is no longer in flight.
    #[test]
    fn dsack_inside_second_block() {
        let mut q = queue(0, 8);
        let (una, nxt) = (seg(0, 0).0, seg(0, 7).1);
        q.on_sack(&[block(0, 3, 6)], una, nxt);
        // Rescue-retransmit segment 4 although it is SACKed? Ignored: SACKed segments are
        // never retransmitted. Retransmit 6 (not lost) instead.
        q.mark_retransmitted(seg(0, 4).0, t(5));
        assert_eq!(q.retrans_out(), 0);
        q.mark_retransmitted(seg(0, 6).0, t(5));
        assert_eq!((q.retrans_out(), q.in_flight()), (1, 6));
        let s = q.on_sack(&[seg(0, 6), block(0, 3, 7)], una, nxt);
        assert!(s.dsack);
        assert_eq!(s.dsack_range, Some(seg(0, 6)));
        assert_eq!(
            (s.newly_sacked, s.dsack_retrans, s.invalid_blocks),
            (1, 1, 0)
        );
        assert_eq!(q.retrans_out(), 0);
        assert_eq!(
            q.iter().nth(6).map(|s| s.flags),
            Some(SegFlags::SACKED | SegFlags::EVER_RETRANS)
        );
        // Not a subset of the second block: an ordinary block.
        let s = q.on_sack(&[seg(0, 7), block(0, 3, 7)], una, nxt);
        assert!(!s.dsack);
        assert_eq!(s.newly_sacked, 1);
        q.check_invariants();
    }

    /// Linux tcp_is_sackblock_valid: each kind of bad block is ignored and counted.
    #[test]
    fn invalid_and_stale_blocks_are_ignored() {
        let base = 5000;
        let fresh = || {
            let mut q = queue(base, 6);
            q.on_ack(seg(base, 1).0, t(1));
            q
        };
        let una = seg(base, 1).0;
        let nxt = seg(base, 5).1;
        let cases: [(&str, Vec<(SeqNumber, SeqNumber)>); 9] = [
            ("beyond snd_nxt", vec![(seg(base, 5).0, nxt + 1)]),
            ("entirely beyond snd_nxt", vec![(nxt + 100, nxt + 200)]),
            ("reversed", vec![(seg(base, 3).1, seg(base, 3).0)]),
            ("empty", vec![(seg(base, 3).0, seg(base, 3).0)]),
            // The valid block comes second in the first case and first in the second, so
            // that neither pair reads as a D-SACK (RFC 2883 §4).
            (
                "starts at snd_una",
                vec![(una, seg(base, 2).1), seg(base, 3)],
            ),
            ("stale, below snd_una", vec![seg(base, 3), seg(base, 0)]),
            (
                "D-SACK across snd_una",
                vec![(seg(base, 0).0, seg(base, 1).1)],
            ),
            (
                "D-SACK too far below",
                vec![(una - (MAX_WINDOW + 100), una - (MAX_WINDOW + 1))],
            ),
            (
                "half the sequence space away",
                vec![(
                    SeqNumber(una.0 ^ (1 << 31)),
                    SeqNumber(una.0 ^ (1 << 31)) + 100,
                )],
            ),
        ];
        for (what, blocks) in cases {
            let mut q = fresh();
            let before = flags(&q);
            let s = q.on_sack(&blocks, una, nxt);
            let expect_valid = u32::from(blocks.len() == 2);
            assert_eq!(s.invalid_blocks, 1, "{what}");
            assert_eq!(s.newly_sacked, expect_valid, "{what}");
            assert!(!s.dsack, "{what}");
            if expect_valid == 0 {
                assert_eq!(flags(&q), before, "{what}");
            }
            q.check_invariants();
        }
        // More than four blocks: the fifth is ignored.
        let mut q = queue(0, 12);
        let five: Vec<_> = (1..6).map(|i| seg(0, 2 * i)).collect();
        let s = q.on_sack(&five, seg(0, 0).0, seg(0, 11).1);
        assert_eq!((s.newly_sacked, s.invalid_blocks), (4, 1));
        // Partial coverage tags nothing (one-packet segment, Linux tcp_match_skb_to_sack).
        let (s2, e2) = seg(0, 1);
        let s = q.on_sack(&[(s2 + 1, e2)], seg(0, 0).0, seg(0, 11).1);
        assert_eq!((s.newly_sacked, s.invalid_blocks), (0, 0));
        q.check_invariants();
    }

    /// The same loss episode run at a base far from the wrap and across it gives the same
    /// results, segment for segment.
    #[test]
    fn sequence_numbers_wrap() {
        fn episode(base: u32) -> Vec<String> {
            let mut q = queue(base, 10);
            let (una, nxt) = (seg(base, 0).0, seg(base, 9).1);
            let mut log = Vec::new();
            log.push(format!(
                "{:?}",
                q.on_sack(&[block(base, 2, 6), seg(base, 8)], una, nxt)
            ));
            log.push(format!("{}", q.mark_lost(3)));
            while let Some((s, e)) = q.next_to_retransmit() {
                log.push(format!("{}", e.diff(SeqNumber(base))));
                q.mark_retransmitted(s, t(50));
            }
            log.push(format!("{}", q.in_flight()));
            let r = q.on_ack(seg(base, 6).0, t(60));
            log.push(format!(
                "{} {} {}",
                r.acked_segments, r.acked_bytes, r.delivered
            ));
            log.push(format!("{:?}", flags(&q)));
            q.check_invariants();
            log
        }
        let plain = episode(1000);
        // Segment 2 straddles 0.
        let wrapped = episode(u32::MAX - 250);
        assert_eq!(
            plain
                .iter()
                .filter(|l| !l.contains("Seq"))
                .collect::<Vec<_>>(),
            wrapped
                .iter()
                .filter(|l| !l.contains("Seq"))
                .collect::<Vec<_>>()
        );
        assert_eq!(plain[1], "2");
        assert_eq!(SeqNumber(u32::MAX - 250) + 1000, SeqNumber(749));
    }

    /// RTO (RFC 6675 §5.1): SACK information is kept, everything else is lost, the
    /// retransmissions in flight are presumed lost; in_flight drops to 0.
    #[test]
    fn rto_keeps_sacks_and_marks_the_rest_lost() {
        let mut q = queue(0, 6);
        let (una, nxt) = (seg(0, 0).0, seg(0, 5).1);
        q.on_sack(&[seg(0, 2), seg(0, 4)], una, nxt);
        q.mark_head_lost();
        q.mark_retransmitted(seg(0, 0).0, t(10));
        assert!(!q.mark_all_lost());
        assert_eq!(indices_with(&q, SegFlags::SACKED), vec![2, 4]);
        assert_eq!(indices_with(&q, SegFlags::LOST), vec![0, 1, 3, 5]);
        assert_eq!((q.retrans_out(), q.in_flight()), (0, 0));
        assert_eq!(q.next_to_retransmit(), Some(seg(0, 0)));
        q.check_invariants();
    }

    /// Reneging: the receiver acknowledges up to a segment it SACKed without covering it.
    /// At the next RTO every SACKED bit is cleared (RFC 2018 §5, Linux
    /// tcp_timeout_mark_lost).
    #[test]
    fn rto_after_reneging_forgets_sacks() {
        let mut q = queue(0, 6);
        let nxt = seg(0, 5).1;
        q.on_sack(&[block(0, 1, 3)], seg(0, 0).0, nxt);
        q.on_ack(seg(0, 1).0, t(5));
        assert!(q.front().unwrap().flags.contains(SegFlags::SACKED));
        assert!(q.mark_all_lost());
        assert_eq!(q.sacked_out(), 0);
        assert_eq!(q.highest_sacked(), None);
        assert_eq!(q.lost_out(), 5);
        assert_eq!(q.next_to_retransmit(), Some(seg(0, 1)));
        // The cache is gone too: the same block tags the segments again.
        let s = q.on_sack(&[block(0, 2, 4)], seg(0, 1).0, nxt);
        assert_eq!(s.newly_sacked, 2);
        q.check_invariants();
    }

    #[test]
    fn head_lost_and_unmark() {
        let mut q = queue(0, 4);
        assert!(q.mark_head_lost());
        assert!(!q.mark_head_lost(), "already lost");
        assert_eq!(q.next_to_retransmit(), Some(seg(0, 0)));
        q.mark_retransmitted(seg(0, 0).0, t(3));
        assert_eq!(q.next_to_retransmit(), None);
        q.unmark_lost();
        assert_eq!((q.lost_out(), q.retrans_out()), (0, 1));
        assert_eq!(q.in_flight(), 5);
        q.check_invariants();
        let mut empty = RtxQueue::new();
        assert!(!empty.mark_head_lost());
        assert_eq!(empty.mark_lost(3), 0);
        assert!(!empty.mark_all_lost());
        empty.mark_retransmitted(SeqNumber(0), t(0));
        let s = empty.on_sack(&[(SeqNumber(5), SeqNumber(1))], SeqNumber(0), SeqNumber(10));
        assert_eq!(s.invalid_blocks, 1);
        assert!(empty.is_empty());
    }

    /// A whole recovery with one hole and a SACK block growing by one segment per ACK:
    /// the SACK cache and the lost hint keep the total walk linear (re-walking each block
    /// would visit n²/2 = 12.5 million segments).
    #[test]
    fn recovery_walk_is_linear() {
        let n = 5_000;
        let mut q = queue(0, n);
        let (una, nxt) = (seg(0, 0).0, seg(0, n - 1).1);
        for k in 2..=n {
            let s = q.on_sack(&[block(0, 1, k)], una, nxt);
            assert_eq!(s.newly_sacked, 1);
            q.mark_lost(3);
            if let Some((s, _)) = q.next_to_retransmit() {
                q.mark_retransmitted(s, t(1));
            }
        }
        assert_eq!(
            (q.sacked_out(), q.lost_out(), q.retrans_out()),
            (n - 1, 1, 1)
        );
        let steps = q.board.as_ref().unwrap().steps;
        assert!(steps < 10 * u64::from(n), "{steps} steps");
        q.check_invariants();
    }

    /// CVE-2019-11477's lesson, found by the reproduction in tests/tcp_hostile.rs: a SACK
    /// block exactly 2^31 long is `before` both ways round, so `end - start` panicked (in
    /// release too) when the block came first (the D-SACK check) or lay below SND.UNA.
    #[test]
    fn sack_blocks_of_half_the_sequence_space_do_not_panic() {
        let mut q = queue(0, 10);
        let (una, nxt) = (SeqNumber(0), seg(0, 9).1);
        let half = |s: SeqNumber, d: u32| SeqNumber(s.0.wrapping_add((1 << 31) + d));
        for (start, end) in [
            (una, half(una, 0)),
            (una + 500, half(una, 500)),
            (nxt, half(nxt, 0)),
            (half(una, 0), una),
            (half(una, 1), una),
            (SeqNumber(u32::MAX), half(SeqNumber(u32::MAX), 0)),
        ] {
            for blocks in [
                vec![(start, end)],
                vec![(start, end), block(0, 2, 4)],
                vec![block(0, 2, 4), (start, end)],
            ] {
                q.on_sack(&blocks, una, nxt);
                assert_eq!(q.len(), 10);
                q.check_invariants();
            }
        }
    }

    /// CVE-2019-11478 (SACK slowness: blocks that cut Linux's skbs into one fragment per
    /// hole): 4 blocks per ACK, each starting and ending mid-segment with holes between
    /// them, moving every ACK so the previous ACK's cache never covers them. No record is
    /// ever split (the queue keeps its length), and an ACK's walk visits only the segments
    /// its blocks cover, found by binary search: a few steps per block, not a walk from
    /// the head (which would cost up to n per block).
    #[test]
    fn fragmenting_sack_blocks_neither_split_records_nor_walk_the_queue() {
        let n = 4096;
        let mut q = queue(0, n);
        let (una, nxt) = (seg(0, 0).0, seg(0, n - 1).1);
        let mut prev = 0;
        for k in 0..2_000u32 {
            let at = |i: u32| SeqNumber((((k * 37 + i * 997) % (n - 3)) + 1) * MSS + MSS / 2);
            let blocks: Vec<_> = (0..4)
                .map(|i| (at(i), at(i) + (2 * MSS + MSS / 3) as usize))
                .collect();
            q.on_sack(&blocks, una, nxt);
            assert_eq!(q.len(), n as usize, "no record split");
            let steps = q.board.as_ref().unwrap().steps;
            assert!(steps - prev <= 4 * 4 + 4, "ACK {k}: {} steps", steps - prev);
            prev = steps;
        }
        q.check_invariants();
    }

    // ---- the reference model: every rule applied naively, O(n) per step ----

    #[derive(Debug, Clone, Default)]
    struct Model {
        segs: Vec<TxSegment>,
    }

    impl Model {
        fn count(&self, f: SegFlags) -> u32 {
            self.segs.iter().filter(|s| s.flags.contains(f)).count() as u32
        }

        fn in_flight(&self) -> u32 {
            self.segs.len() as u32 - self.count(SegFlags::SACKED) - self.count(SegFlags::LOST)
                + self.count(SegFlags::RETRANS)
        }

        fn highest_sacked(&self) -> Option<SeqNumber> {
            self.segs
                .iter()
                .rev()
                .find(|s| s.flags.contains(SegFlags::SACKED))
                .map(|s| s.end)
        }

        fn next(&self) -> Option<(SeqNumber, SeqNumber)> {
            self.segs
                .iter()
                .find(|s| {
                    s.flags.contains(SegFlags::LOST)
                        && !s.flags.intersects(SegFlags::RETRANS | SegFlags::SACKED)
                })
                .map(|s| (s.start, s.end))
        }

        fn on_ack(&mut self, una: SeqNumber, _now: Instant) -> AckResult {
            let mut res = AckResult::default();
            let mut first = None;
            while let Some(s) = self.segs.first_mut() {
                if s.end.after(una) {
                    if s.start.before(una) {
                        res.acked_bytes += una - s.start;
                        s.start = una;
                    }
                    break;
                }
                let s = self.segs.remove(0);
                res.acked_segments += 1;
                res.acked_bytes += s.seq_len();
                if !s.flags.contains(SegFlags::SACKED) {
                    res.delivered += 1;
                }
                if s.flags.contains(SegFlags::EVER_RETRANS) {
                    res.newly_acked_retrans = true;
                } else if !s.flags.contains(SegFlags::SACKED) && first.is_none() {
                    first = Some(s.sent_at);
                }
            }
            if !res.newly_acked_retrans {
                res.rtt_sent_at = first;
            }
            res
        }

        fn tag(&mut self, i: usize, dsack: bool, una: SeqNumber, res: &mut SackResult) {
            let s = &mut self.segs[i];
            if dsack && s.flags.contains(SegFlags::EVER_RETRANS) {
                res.dsack_retrans += 1;
            }
            if !s.end.after(una) {
                return;
            }
            if !s.flags.contains(SegFlags::SACKED) {
                if s.flags.contains(SegFlags::RETRANS) {
                    if s.flags.contains(SegFlags::LOST) {
                        s.flags.remove(SegFlags::LOST | SegFlags::RETRANS);
                    }
                } else {
                    if !s.flags.contains(SegFlags::EVER_RETRANS)
                        && res.first_sacked_sent_at.is_none()
                    {
                        res.first_sacked_sent_at = Some(s.sent_at);
                    }
                    s.flags.remove(SegFlags::LOST);
                }
                s.flags.insert(SegFlags::SACKED);
                res.newly_sacked += 1;
            }
            if dsack {
                s.flags.remove(SegFlags::RETRANS);
            }
        }

        fn on_sack(
            &mut self,
            blocks: &[(SeqNumber, SeqNumber)],
            una: SeqNumber,
            nxt: SeqNumber,
        ) -> SackResult {
            let sorted = sort_out_blocks(blocks, una, nxt);
            let mut res = SackResult {
                dsack: sorted.dsack.is_some(),
                dsack_range: sorted.dsack,
                invalid_blocks: sorted.invalid,
                ..SackResult::default()
            };
            let all = sorted
                .dsack
                .map(|b| (b, true))
                .into_iter()
                .chain(sorted.blocks[..sorted.len].iter().map(|&b| (b, false)));
            for ((start, end), dsack) in all {
                for i in 0..self.segs.len() {
                    if self.segs[i].within(start, end) {
                        self.tag(i, dsack, una, &mut res);
                    }
                }
            }
            res
        }

        fn mark_lost(&mut self, d: u32) -> u32 {
            let d = d.max(1);
            let total = self.count(SegFlags::SACKED);
            let mut below = 0;
            let mut newly = 0;
            for s in &mut self.segs {
                if s.flags.contains(SegFlags::SACKED) {
                    below += 1;
                } else if !s.flags.contains(SegFlags::LOST) && total - below >= d {
                    s.flags.insert(SegFlags::LOST);
                    newly += 1;
                }
            }
            newly
        }

        fn mark_head_lost(&mut self) -> bool {
            match self.segs.first_mut() {
                Some(s) if !s.flags.intersects(SegFlags::SACKED | SegFlags::LOST) => {
                    s.flags.insert(SegFlags::LOST);
                    true
                }
                _ => false,
            }
        }

        fn mark_all_lost(&mut self) -> bool {
            let reneged = self
                .segs
                .first()
                .is_some_and(|s| s.flags.contains(SegFlags::SACKED));
            for s in &mut self.segs {
                s.flags.remove(SegFlags::RETRANS);
                if reneged {
                    s.flags.remove(SegFlags::SACKED);
                }
                if !s.flags.contains(SegFlags::SACKED) {
                    s.flags.insert(SegFlags::LOST);
                }
            }
            reneged
        }

        fn unmark_lost(&mut self) {
            for s in &mut self.segs {
                s.flags.remove(SegFlags::LOST);
            }
        }

        fn mark_retransmitted(&mut self, start: SeqNumber, now: Instant) {
            if let Some(s) = self
                .segs
                .iter_mut()
                .find(|s| !start.before(s.start) && start.before(s.end))
                .filter(|s| !s.flags.contains(SegFlags::SACKED))
            {
                s.flags.insert(SegFlags::RETRANS | SegFlags::EVER_RETRANS);
                s.sent_at = now;
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u16),
        Ack(u16),
        Sack(Vec<(u16, u16)>, Option<u16>),
        MarkLost(u8),
        MarkHeadLost,
        MarkAllLost,
        RetransmitNext,
        Retransmit(u16),
        UnmarkLost,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u16..1500).prop_map(Op::Push),
            2 => any::<u16>().prop_map(Op::Ack),
            5 => (proptest::collection::vec(any::<(u16, u16)>(), 1..6), proptest::option::of(any::<u16>()))
                .prop_map(|(b, a)| Op::Sack(b, a)),
            2 => (0u8..5).prop_map(Op::MarkLost),
            1 => Just(Op::MarkHeadLost),
            1 => Just(Op::MarkAllLost),
            3 => Just(Op::RetransmitNext),
            1 => any::<u16>().prop_map(Op::Retransmit),
            1 => Just(Op::UnmarkLost),
        ]
    }

    /// State shared by the queue and the model while a proptest runs.
    struct Run {
        q: RtxQueue,
        m: Model,
        una: SeqNumber,
        nxt: SeqNumber,
        now: Instant,
    }

    impl Run {
        /// A sequence number chosen by `pick`: mostly segment boundaries in [una, nxt],
        /// sometimes mid-segment, below una or beyond nxt.
        fn point(&self, pick: u16) -> SeqNumber {
            let bounds: Vec<SeqNumber> = core::iter::once(self.una)
                .chain(self.m.segs.iter().map(|s| s.end))
                .collect();
            let p = usize::from(pick);
            let at = bounds[(p >> 3) % bounds.len()];
            match p & 7 {
                0 => at + 1,
                1 => at - (1 + (p >> 3) % 300),
                2 => self.nxt + (p >> 3) % 3,
                _ => at,
            }
        }

        /// Like `point`, but never outside [una, nxt].
        fn point_in_window(&self, pick: u16) -> SeqNumber {
            let p = self.point(pick);
            if p.before(self.una) {
                self.una
            } else if p.after(self.nxt) {
                self.nxt
            } else {
                p
            }
        }

        fn check(&self) -> Result<(), TestCaseError> {
            self.q.check_invariants();
            let segs: Vec<TxSegment> = self.q.iter().copied().collect();
            prop_assert_eq!(&segs, &self.m.segs);
            prop_assert_eq!(self.q.packets_out(), self.m.segs.len() as u32);
            prop_assert_eq!(self.q.sacked_out(), self.m.count(SegFlags::SACKED));
            prop_assert_eq!(self.q.lost_out(), self.m.count(SegFlags::LOST));
            prop_assert_eq!(self.q.retrans_out(), self.m.count(SegFlags::RETRANS));
            prop_assert_eq!(self.q.in_flight(), self.m.in_flight());
            prop_assert_eq!(self.q.next_to_retransmit(), self.m.next());
            prop_assert_eq!(self.q.highest_sacked(), self.m.highest_sacked());
            prop_assert_eq!(self.q.is_empty(), self.m.segs.is_empty());
            let flagged = SegFlags::SACKED | SegFlags::LOST | SegFlags::RETRANS;
            prop_assert_eq!(
                self.q.is_clean(),
                self.m.segs.iter().all(|s| !s.flags.intersects(flagged))
            );
            if self.q.is_empty() {
                prop_assert_eq!(self.q.heap_bytes(), 0);
            }
            Ok(())
        }

        fn apply(&mut self, op: Op) -> Result<(), TestCaseError> {
            self.now += Duration::from_millis(1);
            let now = self.now;
            match op {
                Op::Push(len) => {
                    let end = self.nxt + usize::from(len);
                    self.q.push(self.nxt, end, now);
                    self.m.segs.push(TxSegment {
                        start: self.nxt,
                        end,
                        sent_at: now,
                        flags: SegFlags::EMPTY,
                    });
                    self.nxt = end;
                }
                Op::Ack(pick) => {
                    let ack = self.point_in_window(pick);
                    // A clean queue takes the pure ACK's pop (`tcp_ack_pure`): the same.
                    let got = if self.q.is_clean() {
                        self.q
                            .on_ack_reusing::<true>(ack, &mut SpareBoard::default())
                    } else {
                        self.q.on_ack(ack, now)
                    };
                    prop_assert_eq!(got, self.m.on_ack(ack, now));
                    self.una = ack;
                }
                Op::Sack(picks, ack) => {
                    let ack = ack.map_or(self.una, |a| self.point_in_window(a));
                    let blocks: Vec<_> = picks
                        .iter()
                        .map(|&(a, b)| (self.point(a), self.point(b)))
                        .collect();
                    prop_assert_eq!(
                        self.q.on_sack(&blocks, ack, self.nxt),
                        self.m.on_sack(&blocks, ack, self.nxt)
                    );
                    if ack != self.una {
                        prop_assert_eq!(self.q.on_ack(ack, now), self.m.on_ack(ack, now));
                        self.una = ack;
                    }
                }
                Op::MarkLost(d) => prop_assert_eq!(
                    self.q.mark_lost(u32::from(d)),
                    self.m.mark_lost(u32::from(d))
                ),
                Op::MarkHeadLost => {
                    prop_assert_eq!(self.q.mark_head_lost(), self.m.mark_head_lost())
                }
                Op::MarkAllLost => prop_assert_eq!(self.q.mark_all_lost(), self.m.mark_all_lost()),
                Op::RetransmitNext => {
                    if let Some((s, _)) = self.q.next_to_retransmit() {
                        self.q.mark_retransmitted(s, now);
                        self.m.mark_retransmitted(s, now);
                    }
                }
                Op::Retransmit(pick) => {
                    let s = self.point(pick);
                    self.q.mark_retransmitted(s, now);
                    self.m.mark_retransmitted(s, now);
                }
                Op::UnmarkLost => {
                    self.q.unmark_lost();
                    self.m.unmark_lost();
                }
            }
            self.check()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Any sequence of operations leaves the queue equal to the naive model, its
        /// counters equal to a recount of the flags, its hints exact, and an emptied
        /// queue without heap. Bases near 2^32 put the wrap inside the queue.
        #[test]
        fn queue_matches_naive_model(
            base in prop_oneof![any::<u32>(), (0u32..20_000).prop_map(|d| u32::MAX - d)],
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let mut run = Run {
                q: RtxQueue::new(),
                m: Model::default(),
                una: SeqNumber(base),
                nxt: SeqNumber(base),
                now: Instant::ZERO,
            };
            for op in ops {
                run.apply(op)?;
            }
        }
    }
}
