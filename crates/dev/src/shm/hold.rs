//! Transmit slots the caller holds ([`Device::tx_hold`]): a slot taken off the free list
//! for the caller to keep as its own memory, written ahead of sending, sent (and sent
//! again) from where it is, and freed only when both the caller has released it and the
//! peer has given back the last frame sent from it.
//!
//! This is the link's half of a TCP send buffer whose storage is the slots (issue #13
//! item 6): the application's bytes written into a slot once, at `send()`, the slot the
//! retransmission copy until they are acknowledged. Of a slot's two owners, the peer may
//! give a frame back before its bytes are acknowledged (it dropped the frame, its receive
//! queue full) and the acknowledgement may come before the peer gives the frame back (the
//! receiver acknowledges a frame it still holds for the reader, `Device::keep_held`), so
//! the slot is free only when both are done, in either order: `Tx::held` says whether the
//! caller still holds it, `Tx::in_flight` whether the peer does (`ShmPort::reclaim` frees a
//! returned slot only if it is not held).
//!
//! The writer and reader are closures over the mapping, bounded to our transmit slots: a
//! caller that writes a slot it does not hold can only garble a frame it sends, and the
//! peer, which can write our slots at any time, only the frames it receives.

use super::ShmPort;
use super::layout::INLINE_MAX;
#[cfg(doc)]
use crate::Device;
use crate::{HeldWriter, KeptReader};

impl ShmPort {
    /// [`Device::tx_hold`]: a free slot (returned ones reclaimed first when due), held;
    /// counted in [`ShmStats::tx_held`](super::ShmStats::tx_held). None free: `None`,
    /// counted as a refused send is ([`ShmStats::tx_full`](super::ShmStats::tx_full)).
    pub(super) fn hold(&mut self) -> Option<u32> {
        let slot = self.take_slot(0).ok()?;
        self.tx.held[slot as usize] = true;
        self.stats.tx_held += 1;
        Some(slot)
    }

    /// [`Device::tx_hold_send`]: posts the first `len` bytes of held slot `id`, publishing
    /// unless `more`; refused (counted in
    /// [`ShmStats::tx_held_refused`](super::ShmStats::tx_held_refused)) if the slot is not
    /// held, is still with the peer, or `len` is over a frame, or the ring is stopped.
    pub(super) fn hold_send(&mut self, id: u32, len: usize, more: bool) -> bool {
        let i = id as usize;
        if self.tx.in_flight.get(i).copied().unwrap_or(false) {
            // Given back since we last looked? (A resend of a frame the peer dropped.)
            self.reclaim();
        }
        let ok = !self.tx.stopped
            && len <= self.max_frame
            && self.tx.held.get(i).copied().unwrap_or(false)
            && !self.tx.in_flight[i];
        if ok {
            if len <= INLINE_MAX {
                // The receiver reads a frame this short from its ring entry's lines, not
                // from the slot (layout v3): put a copy there; the slot keeps the bytes.
                let mut frame = [0u8; INLINE_MAX];
                let entry = self.tx_frame_off(id, len);
                self.shared
                    .map
                    .read(self.tx_slot_off(id), &mut frame[..len]);
                self.shared.map.write(entry, &frame[..len]);
            }
            self.post(id, len);
            self.stats.tx_held_sent += 1;
        } else {
            self.stats.tx_held_refused += 1;
        }
        if !more {
            // Frames placed before with `more` must still leave.
            self.publish_tx();
        }
        ok
    }

    /// [`Device::tx_hold_release`]: the caller is done with `id`; free now if the peer has
    /// given it back, else when it does. An id not held is counted in
    /// [`ShmStats::tx_held_refused`](super::ShmStats::tx_held_refused) and ignored.
    pub(super) fn hold_release(&mut self, id: u32) {
        let i = id as usize;
        if !self.tx.held.get(i).copied().unwrap_or(false) {
            self.stats.tx_held_refused += 1;
            return;
        }
        self.tx.held[i] = false;
        self.stats.tx_held_released += 1;
        if self.tx.in_flight[i] {
            // Given back since we last looked? Then it is freed there.
            self.reclaim();
        } else {
            self.tx.free.push(id);
        }
    }

    /// Slots the caller holds now.
    pub fn tx_held_now(&self) -> usize {
        self.tx.held.iter().filter(|&&h| h).count()
    }

    /// [`Device::tx_held_writer`]: writes within one of our transmit slots.
    pub(super) fn held_writer(&self) -> HeldWriter {
        let shared = self.shared.clone();
        let (base, slot_size, ring) = (self.tx_slot_off(0), self.slot_size, self.ring_size);
        Box::new(move |id: u32, off: usize, src: &[u8]| {
            id < ring
                && off
                    .checked_add(src.len())
                    .is_some_and(|end| end <= slot_size)
                && shared.map.write(base + id as usize * slot_size + off, src)
        })
    }

    /// [`Device::tx_held_reader`]: reads within one of our transmit slots, each shared
    /// byte loaded once, as a receive reads.
    pub(super) fn held_reader(&self) -> KeptReader {
        let shared = self.shared.clone();
        let (base, slot_size, ring) = (self.tx_slot_off(0), self.slot_size, self.ring_size);
        Box::new(move |id: u32, off: usize, dst: &mut [u8]| {
            id < ring
                && off
                    .checked_add(dst.len())
                    .is_some_and(|end| end <= slot_size)
                && shared.map.read(base + id as usize * slot_size + off, dst)
        })
    }
}
