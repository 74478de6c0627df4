//! The region's layout: the header's fields, the control lines, rings and frame slots of
//! each direction ([`ShmLayout`]), and the header as the creator writes it and the
//! attaching side checks it.

use core::sync::atomic::Ordering;
use std::io;

use super::{ShmSide, bad_data, bad_data_owned, bad_input};
use crate::sys::mapping::Mapping;
use crate::{DeviceCaps, Medium};

/// Region magic: `"ustkshm\0"`.
const MAGIC: u64 = u64::from_le_bytes(*b"ustkshm\0");
/// Layout version; bumped on any change to the region layout or the protocol. 2: each
/// descriptor carries a sequence number ([`desc_entry`]) and the receiver finds new
/// frames by it, not by `desc_head`.
/// 3: descriptors are [`DESC_LEN`] bytes, a frame of up to [`INLINE_MAX`] bytes carried
/// in its descriptor's lines, from [`INLINE_OFF`].
pub const VERSION: u32 = 3;
/// Bytes of a descriptor ring entry: the descriptor's word in a line of its own (the line
/// the receiver polls: a frame's bytes written there beside it would move it between the
/// cores twice), then three lines of room for a small frame.
pub const DESC_LEN: usize = 256;
/// Where a small frame starts in its ring entry.
pub const INLINE_OFF: usize = 64;
/// The longest frame carried in its descriptor's lines instead of its slot: a 64-byte
/// TCP message with timestamps over Ethernet is 130 bytes.
pub const INLINE_MAX: usize = DESC_LEN - INLINE_OFF;
/// Size of a shared control line (two 64-byte cache lines; see the module docs).
pub const LINE: usize = 128;
/// Bytes reserved for the header at the start of the region.
pub const HEADER_LEN: usize = 4096;
/// Most queue pairs per link.
pub const MAX_QUEUE_PAIRS: usize = 64;
/// Largest ring (entries, and slots per direction).
pub const MAX_RING_SIZE: usize = 1 << 15;
/// Largest frame slot.
pub const MAX_SLOT_SIZE: usize = 1 << 20;
/// Largest region.
pub const MAX_REGION_LEN: usize = 1 << 36;

// Header fields (byte offsets).
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_QUEUE_PAIRS: usize = 12;
const H_RING_SIZE: usize = 16;
const H_SLOT_SIZE: usize = 20;
const H_MEDIUM: usize = 24;
const H_MTU: usize = 28;
const H_REGION_LEN: usize = 32;
const H_LINK_ID: usize = 40;

// Control lines of one direction (byte offsets from its control block).
const C_DESC_HEAD: usize = 0;
const C_DESC_TAIL: usize = LINE;
const C_COMP_HEAD: usize = LINE + 4;
const C_RX_NEED_WAKEUP: usize = 2 * LINE;
const C_TX_NEED_WAKEUP: usize = 3 * LINE;
const CTRL_PER_DIR: usize = 4 * LINE;

/// Byte offsets of everything in a shm region. Both sides compute it from the same
/// geometry; it is public so that tools (and tests playing a misbehaving peer) can find
/// the fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmLayout {
    queue_pairs: usize,
    ring_size: usize,
    slot_size: usize,
    rings_off: usize,
    desc_ring_len: usize,
    comp_ring_len: usize,
    frames_off: usize,
    len: usize,
}

impl ShmLayout {
    /// The layout for a geometry, or `InvalidInput` if it is outside the limits in
    /// [`ShmConfig`]'s field docs.
    ///
    /// [`ShmConfig`]: super::ShmConfig
    pub fn new(queue_pairs: usize, ring_size: usize, slot_size: usize) -> io::Result<ShmLayout> {
        if !(1..=MAX_QUEUE_PAIRS).contains(&queue_pairs) {
            return Err(bad_input("shm: queue_pairs must be 1..=64"));
        }
        if !ring_size.is_power_of_two() || !(2..=MAX_RING_SIZE).contains(&ring_size) {
            return Err(bad_input(
                "shm: ring_size must be a power of two in 2..=32768",
            ));
        }
        if slot_size == 0 || !slot_size.is_multiple_of(64) || slot_size > MAX_SLOT_SIZE {
            return Err(bad_input(
                "shm: slot_size must be a multiple of 64 up to 1 MiB",
            ));
        }
        let dirs = 2 * queue_pairs;
        let desc_ring_len = round_up(ring_size * DESC_LEN, LINE);
        let comp_ring_len = round_up(ring_size * 4, LINE);
        let rings_off = HEADER_LEN + dirs * CTRL_PER_DIR;
        let frames_off = round_up(rings_off + dirs * (desc_ring_len + comp_ring_len), 4096);
        // At most 128 * 2^15 * 2^20 bytes of frames: fits a u64, checked against usize.
        let frames_len = (dirs as u64) * (ring_size as u64) * (slot_size as u64);
        let len = (frames_off as u64)
            .checked_add(frames_len)
            .filter(|&l| l <= MAX_REGION_LEN as u64)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| bad_input("shm: region larger than 64 GiB"))?;
        Ok(ShmLayout {
            queue_pairs,
            ring_size,
            slot_size,
            rings_off,
            desc_ring_len,
            comp_ring_len,
            frames_off,
            len,
        })
    }

    /// Queue pairs.
    pub const fn queue_pairs(&self) -> usize {
        self.queue_pairs
    }
    /// Entries per ring (and slots per direction).
    pub const fn ring_size(&self) -> usize {
        self.ring_size
    }
    /// Bytes per frame slot.
    pub const fn slot_size(&self) -> usize {
        self.slot_size
    }
    /// Total region length in bytes.
    pub const fn len(&self) -> usize {
        self.len
    }
    /// Whether the region is empty (never: a valid layout has a header).
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the direction of queue pair `queue` sent by `from`.
    pub(super) const fn dir(&self, queue: usize, from: ShmSide) -> usize {
        2 * queue
            + match from {
                ShmSide::A => 0,
                ShmSide::B => 1,
            }
    }
    const fn ctrl(&self, queue: usize, from: ShmSide) -> usize {
        HEADER_LEN + self.dir(queue, from) * CTRL_PER_DIR
    }
    /// Offset of `desc_head` (a `u32`) of queue pair `queue`, direction sent by `from`.
    pub const fn desc_head_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_DESC_HEAD
    }
    /// Offset of `desc_tail` (a `u32`, informational) of that direction.
    pub const fn desc_tail_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_DESC_TAIL
    }
    /// Offset of `comp_head` (a `u32`) of that direction.
    pub const fn comp_head_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_COMP_HEAD
    }
    /// Offset of the receiver's `rx_need_wakeup` flag (a `u32`) of that direction.
    pub const fn rx_need_wakeup_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_RX_NEED_WAKEUP
    }
    /// Offset of the sender's `tx_need_wakeup` flag (a `u32`) of that direction.
    pub const fn tx_need_wakeup_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.ctrl(queue, from) + C_TX_NEED_WAKEUP
    }
    /// Offset of the descriptor ring (`ring_size` entries of [`DESC_LEN`] bytes: the `u64`
    /// [`desc_entry`] writes, then from [`INLINE_OFF`] a frame of up to [`INLINE_MAX`]
    /// bytes).
    pub const fn desc_ring_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.rings_off + self.dir(queue, from) * (self.desc_ring_len + self.comp_ring_len)
    }
    /// Offset of the completion ring (`ring_size` x `u32` slot indices).
    pub const fn comp_ring_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.desc_ring_offset(queue, from) + self.desc_ring_len
    }
    /// Offset of the first frame slot of that direction.
    pub const fn frames_offset(&self, queue: usize, from: ShmSide) -> usize {
        self.frames_off + self.dir(queue, from) * self.ring_size * self.slot_size
    }
}

/// The descriptor of the frame posted as number `index` (the sender's free-running
/// `desc_head` before it is counted) in slot `slot`, `len` bytes long (a frame of at most
/// [`INLINE_MAX`] bytes is at [`INLINE_OFF`] in the entry, its slot taken but not written, to
/// count what is in flight as for any frame): bits 0-15 the slot,
/// 16-39 the length, 40-63 [`desc_seq`]`(index)`. Written at ring position
/// `index % ring_size`; the receiver takes the entry at its `desc_tail` as a new frame when
/// its sequence is `desc_seq(desc_tail)`, so it reads the descriptor's own line and never
/// the sender's index (virtio 1.1's packed ring marks its descriptors the same way, with
/// an AVAIL/USED wrap bit; ixgbe's receive descriptors with a DD bit).
pub const fn desc_entry(index: u32, slot: u32, len: u32) -> u64 {
    (slot as u64 & 0xffff) | (len as u64 & 0xff_ffff) << 16 | (desc_seq(index) as u64) << 40
}

/// The sequence a descriptor posted as number `index` carries: its low 23 bits with bit 23
/// set, so never zero (a ring entry never written is zero) and, for rings of at most 2^15
/// entries, different from the sequence the entry held a lap before.
pub const fn desc_seq(index: u32) -> u32 {
    index & 0x7f_ffff | 0x80_0000
}

/// A descriptor's fields: (sequence, slot, length).
pub(super) const fn desc_fields(desc: u64) -> (u32, u32, usize) {
    (
        (desc >> 40) as u32,
        (desc & 0xffff) as u32,
        ((desc >> 16) & 0xff_ffff) as usize,
    )
}

/// The device's caps for a medium and MTU, if its largest frame fits a slot.
pub(super) fn validate_caps(
    medium: Medium,
    mtu: usize,
    slot_size: usize,
) -> io::Result<DeviceCaps> {
    let caps = DeviceCaps {
        medium,
        mtu,
        gro_max_size: 0,
        gso_max_size: 0,
    };
    if mtu == 0 || caps.max_frame_len() > slot_size {
        return Err(bad_input(
            "shm: mtu must be non-zero and the largest frame fit a slot",
        ));
    }
    Ok(caps)
}

const fn medium_code(medium: Medium) -> u32 {
    match medium {
        Medium::Ethernet => 1,
        Medium::Ip => 2,
    }
}

fn medium_from_code(code: u32) -> io::Result<Medium> {
    match code {
        1 => Ok(Medium::Ethernet),
        2 => Ok(Medium::Ip),
        _ => Err(bad_data("shm: unknown medium")),
    }
}

const fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Writes the header of a fresh region (the creator, once): the geometry, the medium and
/// MTU, the region's length and the link id, and last the magic (Release), which makes
/// the rest visible to a side that loads it with Acquire.
pub(super) fn write_header(map: &Mapping, layout: &ShmLayout, caps: &DeviceCaps, link_id: u64) {
    let h32 = |off, v: usize| map.u32_at(off).store(v as u32, Ordering::Relaxed);
    h32(H_VERSION, VERSION as usize);
    h32(H_QUEUE_PAIRS, layout.queue_pairs);
    h32(H_RING_SIZE, layout.ring_size);
    h32(H_SLOT_SIZE, layout.slot_size);
    h32(H_MEDIUM, medium_code(caps.medium) as usize);
    h32(H_MTU, caps.mtu);
    map.u64_at(H_REGION_LEN)
        .store(layout.len as u64, Ordering::Relaxed);
    map.u64_at(H_LINK_ID).store(link_id, Ordering::Relaxed);
    map.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
}

/// Reads and checks the header of a mapped region (the attaching side, once): magic,
/// version, geometry (limits, and that the layout it implies is exactly the mapping's
/// size), link id, medium and MTU. Errors: `InvalidData` for any mismatch.
pub(super) fn read_header(map: &Mapping, link_id: u64) -> io::Result<(ShmLayout, DeviceCaps)> {
    if map.len() < HEADER_LEN {
        return Err(bad_data("shm: region shorter than its header"));
    }
    let h32 = |off| map.u32_at(off).load(Ordering::Relaxed) as usize;
    if map.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC {
        return Err(bad_data("shm: bad magic"));
    }
    if h32(H_VERSION) != VERSION as usize {
        return Err(bad_data("shm: unsupported version"));
    }
    let layout = ShmLayout::new(h32(H_QUEUE_PAIRS), h32(H_RING_SIZE), h32(H_SLOT_SIZE))
        .map_err(|e| bad_data_owned(e.to_string()))?;
    let region_len = map.u64_at(H_REGION_LEN).load(Ordering::Relaxed);
    if layout.len != map.len() || region_len != map.len() as u64 {
        return Err(bad_data("shm: geometry does not match the region size"));
    }
    if map.u64_at(H_LINK_ID).load(Ordering::Relaxed) != link_id {
        return Err(bad_data("shm: link id does not match"));
    }
    let medium = medium_from_code(h32(H_MEDIUM) as u32)?;
    let caps = validate_caps(medium, h32(H_MTU), layout.slot_size)
        .map_err(|e| bad_data_owned(e.to_string()))?;
    Ok((layout, caps))
}
