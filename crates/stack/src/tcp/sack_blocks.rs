//! The receiver's side of SACK: which blocks to advertise
//! ([RFC 2018 §4](https://www.rfc-editor.org/rfc/rfc2018#section-4), D-SACK
//! [RFC 2883 §4](https://www.rfc-editor.org/rfc/rfc2883#section-4)). [`RxSack`] is what a
//! connection keeps, Linux's way (`tcp_sack_new_ofo_skb`, `tcp_sack_remove`,
//! `tcp_dsack_set`). The sender's side, the scoreboard the blocks update, is in
//! [`super::scoreboard`].

use ustack_wire::SeqNumber;

/// Most SACK blocks a receiver remembers (Linux `TCP_NUM_SACKS`).
pub const NUM_SACKS: usize = 4;

/// The receiver's SACK state: the out-of-order blocks to report, most recently changed
/// first, and a D-SACK block to send once (Linux `tcp_sock.selective_acks[]`,
/// `rx_opt.num_sacks`, `duplicate_sack[0]`, `rx_opt.dsack`).
///
/// [RFC 2018 §4](https://www.rfc-editor.org/rfc/rfc2018#section-4): "The first SACK block
/// ... MUST specify the contiguous block of data containing the segment which triggered
/// this ACK", and the others SHOULD repeat "the most recently reported SACK blocks". The
/// blocks are kept as Linux keeps them (`tcp_sack_new_ofo_skb`, `tcp_sack_remove`), by
/// watching each segment that lands in the out-of-order queue, so that choosing them costs
/// O(1) whatever the number of holes. Every block covers only bytes the queue holds: a
/// segment joins the blocks only when it was stored whole, and [`RxSack::retain_held`]
/// re-checks them when the receive buffer dropped or pruned data.
///
/// In a fixed order (`repr(C)`): the blocks first, the flags the sender tests per segment
/// (`Tcb::mss_now`) last, at [`RxSack::HOT_OFFSET`], next to the rest of what a message
/// touches in the connection's active state.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C)]
pub struct RxSack {
    blocks: [(SeqNumber, SeqNumber); NUM_SACKS],
    dsack: (SeqNumber, SeqNumber),
    len: u8,
    /// A D-SACK block is pending ([RFC 2883](https://www.rfc-editor.org/rfc/rfc2883)).
    has_dsack: bool,
}

impl RxSack {
    /// Where the fields read per segment begin.
    pub(crate) const HOT_OFFSET: usize = core::mem::offset_of!(RxSack, len);
}

/// Linux `tcp_sack_extend`: grow `block` to cover `[start, end)` if they overlap or touch.
fn sack_extend(block: &mut (SeqNumber, SeqNumber), start: SeqNumber, end: SeqNumber) -> bool {
    if !start.after(block.1) && !block.0.after(end) {
        if start.before(block.0) {
            block.0 = start;
        }
        if end.after(block.1) {
            block.1 = end;
        }
        return true;
    }
    false
}

impl RxSack {
    /// No block, no D-SACK (the [`Default`]).
    pub const EMPTY: RxSack = RxSack {
        blocks: [(SeqNumber(0), SeqNumber(0)); NUM_SACKS],
        len: 0,
        has_dsack: false,
        dsack: (SeqNumber(0), SeqNumber(0)),
    };

    /// The blocks, most recently changed first.
    pub fn blocks(&self) -> &[(SeqNumber, SeqNumber)] {
        &self.blocks[..usize::from(self.len)]
    }

    /// The pending D-SACK block, if any.
    pub fn dsack(&self) -> Option<(SeqNumber, SeqNumber)> {
        self.has_dsack.then_some(self.dsack)
    }

    /// Forget everything (the out-of-order queue is empty).
    pub fn clear_blocks(&mut self) {
        self.len = 0;
    }

    /// `[start, end)` was stored whole in the out-of-order queue (Linux
    /// `tcp_sack_new_ofo_skb`): the block it joins moves to the front, merging with any
    /// block it now touches (`tcp_sack_maybe_coalesce`); otherwise it becomes a new first
    /// block and, if all [`NUM_SACKS`] are in use, the oldest is forgotten.
    pub fn on_ofo(&mut self, start: SeqNumber, end: SeqNumber) {
        if !start.before(end) {
            return;
        }
        let n = usize::from(self.len);
        if let Some(i) = (0..n).find(|&i| sack_extend(&mut self.blocks[i], start, end)) {
            self.blocks[..=i].rotate_right(1);
            // tcp_sack_maybe_coalesce: the first block may now reach others.
            let mut k = 1;
            let mut n = n;
            while k < n {
                let (s, e) = self.blocks[k];
                if sack_extend(&mut self.blocks[0], s, e) {
                    self.blocks.copy_within(k + 1..n, k);
                    n -= 1;
                } else {
                    k += 1;
                }
            }
            self.len = n as u8;
            return;
        }
        let keep = n.min(NUM_SACKS - 1);
        self.blocks.copy_within(0..keep, 1);
        self.blocks[0] = (start, end);
        self.len = (keep + 1) as u8;
    }

    /// RCV.NXT moved to `rcv_nxt` (Linux `tcp_sack_remove`): blocks it reached are gone.
    pub fn on_rcv_nxt(&mut self, rcv_nxt: SeqNumber) {
        let mut n = usize::from(self.len);
        let mut k = 0;
        while k < n {
            if !rcv_nxt.before(self.blocks[k].0) {
                self.blocks.copy_within(k + 1..n, k);
                n -= 1;
            } else {
                k += 1;
            }
        }
        self.len = n as u8;
    }

    /// Keep only what the out-of-order queue really holds, given its lowest extents (sorted,
    /// absolute sequence numbers): each block is cut to the extent it overlaps first, or
    /// dropped (also when it lies beyond the extents listed). For the rare cases where the
    /// buffer refused part of a segment or pruned out-of-order data (RFC 2018 §8 reneging).
    pub fn retain_held(&mut self, held: &[(SeqNumber, SeqNumber)]) {
        let mut n = usize::from(self.len);
        let mut k = 0;
        while k < n {
            let (s, e) = self.blocks[k];
            let idx = held.partition_point(|&(_, he)| !he.after(s));
            match held.get(idx) {
                Some(&(hs, he)) if hs.before(e) => {
                    let start = if hs.after(s) { hs } else { s };
                    let end = if he.before(e) { he } else { e };
                    self.blocks[k] = (start, end);
                    k += 1;
                }
                _ => {
                    self.blocks.copy_within(k + 1..n, k);
                    n -= 1;
                }
            }
        }
        self.len = n as u8;
    }

    /// A duplicate `[start, end)` arrived: report it once as a D-SACK (Linux
    /// `tcp_dsack_set`; a second duplicate before the ACK extends the block when they
    /// touch, `tcp_dsack_extend`, or replaces it).
    pub fn set_dsack(&mut self, start: SeqNumber, end: SeqNumber) {
        if !start.before(end) {
            return;
        }
        if !(self.has_dsack && sack_extend(&mut self.dsack, start, end)) {
            self.dsack = (start, end);
        }
        self.has_dsack = true;
    }

    /// The D-SACK block went out (Linux clears `rx_opt.dsack` in `tcp_options_write`).
    pub fn clear_dsack(&mut self) {
        self.has_dsack = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: u32, e: u32) -> (SeqNumber, SeqNumber) {
        (SeqNumber(s), SeqNumber(e))
    }

    #[test]
    fn newest_block_first_and_oldest_forgotten() {
        let mut r = RxSack::default();
        for i in 0..6u32 {
            r.on_ofo(SeqNumber(100 * i + 10), SeqNumber(100 * i + 20));
        }
        // RFC 2018 §4: the block holding the latest segment first, then the most recent.
        assert_eq!(
            r.blocks(),
            &[b(510, 520), b(410, 420), b(310, 320), b(210, 220)]
        );
    }

    #[test]
    fn extending_a_block_moves_it_first_and_coalesces() {
        let mut r = RxSack::default();
        r.on_ofo(SeqNumber(10), SeqNumber(20));
        r.on_ofo(SeqNumber(30), SeqNumber(40));
        r.on_ofo(SeqNumber(50), SeqNumber(60));
        r.on_ofo(SeqNumber(20), SeqNumber(30));
        // [10,20) grew to [10,30) then merged [30,40): one block, first.
        assert_eq!(r.blocks(), &[b(10, 40), b(50, 60)]);
        r.on_ofo(SeqNumber(40), SeqNumber(50));
        assert_eq!(r.blocks(), &[b(10, 60)]);
    }

    #[test]
    fn advancing_rcv_nxt_removes_reached_blocks() {
        let mut r = RxSack::default();
        r.on_ofo(SeqNumber(10), SeqNumber(20));
        r.on_ofo(SeqNumber(30), SeqNumber(40));
        r.on_rcv_nxt(SeqNumber(20));
        assert_eq!(r.blocks(), &[b(30, 40)]);
    }

    #[test]
    fn blocks_keep_only_held_bytes() {
        let mut r = RxSack::default();
        r.on_ofo(SeqNumber(10), SeqNumber(20));
        r.on_ofo(SeqNumber(30), SeqNumber(40));
        r.on_ofo(SeqNumber(50), SeqNumber(60));
        r.retain_held(&[b(10, 20), b(30, 35)]);
        assert_eq!(r.blocks(), &[b(30, 35), b(10, 20)]);
        r.retain_held(&[b(10, 20)]);
        assert_eq!(r.blocks(), &[b(10, 20)]);
    }

    #[test]
    fn dsack_is_pending_once_and_extends() {
        let mut r = RxSack::default();
        assert_eq!(r.dsack(), None);
        r.set_dsack(SeqNumber(10), SeqNumber(20));
        r.set_dsack(SeqNumber(20), SeqNumber(30));
        assert_eq!(r.dsack(), Some(b(10, 30)));
        r.set_dsack(SeqNumber(50), SeqNumber(60));
        assert_eq!(r.dsack(), Some(b(50, 60)));
        r.clear_dsack();
        assert_eq!(r.dsack(), None);
    }

    #[test]
    fn sequence_wrap_is_handled() {
        let mut r = RxSack::default();
        r.on_ofo(SeqNumber(u32::MAX - 9), SeqNumber(0));
        r.on_ofo(SeqNumber(0), SeqNumber(10));
        assert_eq!(r.blocks(), &[b(u32::MAX - 9, 10)]);
        r.on_rcv_nxt(SeqNumber(10));
        assert!(r.blocks().is_empty());
    }
}
