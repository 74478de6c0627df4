//! Receive with the payload left on the device: a segment's bytes go from the link's
//! memory straight into the connection's receive queue, one copy instead of two
//! ([`Stack::receive_direct`]).
//!
//! A shm link's slot is shared with a peer the link does not trust, so the stack never
//! parses it in place: the device copies the frame's first bytes (its headers) into
//! private memory and keeps the slot. The stack checks from those headers alone that the
//! frame is a TCP segment of the kind that only appends to a receive queue: IPv4 without
//! options or fragments, or IPv6 without extension headers, to this host, on an established connection, starting at
//! `RCV.NXT`, with nothing out of order queued, flags ACK and PSH only, its checksum not
//! to be verified (both ends skip it, or the link vouched for it). Then the stack
//! processes the segment as any other: every check and every counter on the headers,
//! which are a copy the peer can no longer change. Where `tcp_data_queue` would copy the
//! payload into the receive queue, it only reserves the room and notes where each piece
//! goes ([`RxDirect::pieces`]); when the segment is done, [`Stack::receive_direct`] has the
//! device copy the payload from its slot into those pieces, before the application or
//! anything else can read them. A frame that fails the test is copied whole by the
//! caller and received as before, so nothing else in the stack ever sees a frame whose
//! payload is not in hand.
//!
//! A device that keeps frames (`Stack::set_lent_reader`) saves the copy into the receive
//! queue too: when the connection's queue has no copied byte waiting, the device keeps the
//! frame and the queue holds it, its payload copied once, into the application's buffer at
//! the read (see `buffer::lent`).
//!
//! Linux has nothing to compare: loopback hands the sender's skb over by reference, and
//! a NIC writes into the driver's buffers by DMA. What this saves is the copy into the
//! shard's receive buffer (copy 4 of the six in docs/bench.md, "shm stream").

use ustack_obs::Instant;
use ustack_wire::ethernet::EtherType;
use ustack_wire::{IpProtocol, Medium, ethernet, ipv4, ipv6, tcp};

use super::FourTuple;
use super::State;
use crate::Stack;
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

/// The piece of a segment that goes to one stretch of pool chunk: bytes
/// `from..from + len` of the frame, to `off..off + len` of chunk `chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) chunk: u32,
    pub(crate) off: u32,
    pub(crate) len: u32,
    pub(crate) from: u32,
}

/// The state of a direct receive (see the module docs): set for the length of one
/// [`Stack::receive_direct`] call.
#[derive(Debug, Default)]
pub(crate) struct RxDirect {
    /// A direct receive is under way: `tcp_data_queue` reserves instead of copying.
    pub(crate) on: bool,
    /// The address of the frame's first byte, to tell a payload's offset in the frame.
    pub(crate) base: usize,
    /// Where the payload goes, to be filled from the device.
    pub(crate) pieces: Vec<Piece>,
    /// The id of the frame the device keeps for a receive queue to hold (see
    /// [`super::buffer::lent`]); taken (`None`) when a queue holds it.
    pub(crate) hold: Option<u32>,
    /// Frames received this way.
    frames: u64,
}

impl RxDirect {
    /// Note that bytes `from + done..from + done + k` of the frame go to `chunk` at `off`.
    #[inline]
    pub(crate) fn note(&mut self, from: usize, (chunk, off, k): (u32, usize, usize), done: usize) {
        self.pieces.push(Piece {
            chunk,
            off: off as u32,
            len: k as u32,
            from: (from + done) as u32,
        });
    }
}

/// The device's side of a direct receive ([`Stack::receive_direct`]): the frame whose
/// payload it still has. A closure `FnMut(usize, &mut [u8])` is a source that only
/// copies.
pub trait DirectFrame {
    /// Copy the frame's bytes `from..from + dst.len()` into `dst`.
    fn read(&mut self, from: usize, dst: &mut [u8]);
    /// Keep the frame past this receive for a receive queue to hold (see
    /// `Device::keep_held`): its id, or `None` (it is copied). Provided: `None`.
    fn keep(&mut self) -> Option<u32> {
        None
    }
    /// Give back a frame [`keep`](Self::keep) kept that no queue took.
    fn release(&mut self, id: u32) {
        let _ = id;
    }
}

impl<F: FnMut(usize, &mut [u8])> DirectFrame for F {
    fn read(&mut self, from: usize, dst: &mut [u8]) {
        self(from, dst);
    }
}

impl Stack {
    /// [`receive_with`](Self::receive_with) of a frame of which only the first `valid`
    /// bytes are in `frame` (the rest of `frame`, up to its length, is the frame's length
    /// in bytes not yet copied, whatever they hold): if the frame is a TCP segment that
    /// only appends to a receive queue (see the module docs), the stack receives it and
    /// has `read(from, dst)` copy the frame's bytes `from..from + dst.len()` straight into
    /// the receive queue, and returns true. Otherwise it does nothing and returns false:
    /// the caller copies the rest of the frame and calls `receive_with`.
    ///
    /// `read` is called only after the segment was processed, for bytes at or past
    /// `valid`, and must fill `dst` (a device that copies from memory another process
    /// writes may fill it with whatever that process wrote: the bytes are payload only).
    ///
    /// With a reader of lent frames set ([`set_lent_reader`](Self::set_lent_reader)),
    /// the stack first asks the source to keep the frame ([`DirectFrame::keep`]); if it
    /// does and the connection's receive queue has no copied byte waiting, the queue holds
    /// the frame instead of a copy (see `tcp/buffer/lent.rs`): its payload is copied
    /// once, into the application's buffer at its read, and the frame given back through
    /// [`take_released_frames`](Self::take_released_frames) once read. A kept frame no
    /// queue took is given back at once ([`DirectFrame::release`]).
    pub fn receive_direct(
        &mut self,
        now: Instant,
        frame: &[u8],
        valid: usize,
        csum_ok: bool,
        mut src: impl DirectFrame,
    ) -> bool {
        let Some(can_hold) = self.direct_ok(frame, valid, csum_ok) else {
            return false;
        };
        // Kept only for a queue that can hold it (see `RecvBuffer::can_hold_lent`).
        let hold = if can_hold && self.tcp.pool.lent.on() {
            src.keep()
        } else {
            None
        };
        let d = &mut self.tcp.rx_direct;
        d.frames += 1;
        d.on = true;
        d.base = frame.as_ptr().addr();
        d.pieces.clear();
        d.hold = hold;
        self.receive_with(now, frame, csum_ok);
        let crate::tcp::Tcp {
            rx_direct, pool, ..
        } = &mut self.tcp;
        rx_direct.on = false;
        for p in rx_direct.pieces.drain(..) {
            src.read(
                p.from as usize,
                pool.piece_mut(p.chunk, p.off as usize, p.len as usize),
            );
        }
        if let Some(id) = rx_direct.hold.take() {
            src.release(id);
        }
        true
    }

    /// A device lends received frames to the receive queues (see
    /// `tcp/buffer/lent.rs`): `reader(id, off, dst)` copies bytes of a frame it kept.
    /// From now on [`receive_direct`](Self::receive_direct) asks its source to keep
    /// frames, and the caller hands [`take_released_frames`](Self::take_released_frames)
    /// back to the device.
    pub fn set_lent_reader(&mut self, reader: super::buffer::lent::LentReader) {
        self.tcp.pool.lent.set_reader(reader);
    }

    /// Whether lent frames read to their end (or dropped with their connection) wait to
    /// go back to the device.
    #[inline]
    pub fn has_released_frames(&self) -> bool {
        self.tcp.pool.lent.has_released()
    }

    /// Hands each lent frame no receive queue holds any more to `f` (the device's
    /// release), oldest first.
    pub fn take_released_frames(&mut self, mut f: impl FnMut(u32)) {
        self.tcp.pool.lent.take_released(&mut f);
    }

    /// Counters of lent frames: segments a receive queue held in a lent frame, frames
    /// released, and reads the device refused (zeros given).
    pub fn lent_frame_stats(&self) -> (u64, u64, u64) {
        let l = &self.tcp.pool.lent;
        (l.held, l.released_total, l.read_errors)
    }

    /// Frames [`receive_direct`](Self::receive_direct) took (their payload copied from
    /// the device into a receive queue).
    pub fn rx_direct_frames(&self) -> u64 {
        self.tcp.rx_direct.frames
    }

    /// Whether the frame, from its first `valid` bytes, is a segment that only appends to
    /// an established connection's receive queue (see the module docs): `None` if not,
    /// else whether that queue could hold the frame instead of a copy.
    fn direct_ok(&self, frame: &[u8], valid: usize, csum_ok: bool) -> Option<bool> {
        if !self.l4_csum_trusted() && !csum_ok {
            return None;
        }
        let (ip, v6) = match self.medium {
            Medium::Ethernet => {
                let Ok(eth) = ethernet::Frame::new_checked(frame) else {
                    return None;
                };
                if eth.dst_addr() != self.mac {
                    return None;
                }
                match eth.ethertype() {
                    EtherType::Ipv4 => (ethernet::HEADER_LEN, false),
                    EtherType::Ipv6 => (ethernet::HEADER_LEN, true),
                    _ => return None,
                }
            }
            Medium::Ip => (0, frame.first().is_some_and(|b| b >> 4 == 6)),
        };
        let found = if v6 {
            self.direct_ip6(&frame[ip..])
        } else {
            self.direct_ip4(&frame[ip..])
        };
        let (l4, end, addrs) = found?;
        let (l4, end) = (ip + l4, ip + end);
        let Ok(seg) = tcp::Packet::new_checked(&frame[l4..end]) else {
            return None;
        };
        let hdr = seg.header_len();
        let payload = seg.payload().len();
        // The headers in hand, a payload to leave on the device, and only ACK (and PSH).
        if l4 + hdr > valid
            || payload == 0
            || !seg.ack()
            || seg.syn()
            || seg.fin()
            || seg.rst()
            || seg.urg()
        {
            return None;
        }
        let tuple = match addrs {
            Addrs::V4 { local, remote } => FourTuple {
                local: SocketAddrV4::new(local, seg.dst_port()),
                remote: SocketAddrV4::new(remote, seg.src_port()),
            },
            // An IPv6 tuple holds the addresses' ids (see `intern6`): a pair not interned
            // has no connection.
            Addrs::V6 { local, remote } => self.tcp.intern6.find(
                SocketAddrV6::new(local, seg.dst_port(), 0, 0),
                SocketAddrV6::new(remote, seg.src_port(), 0, 0),
            )?,
        };
        let hash = self.tcp.ehash.hash(&tuple);
        let index = self.tcp.lookup(hash, &tuple)?;
        let tcb = self.tcp.get(self.tcp.handle_of(index))?;
        (tcb.state == State::Established
            && seg.seq_number() == tcb.rcv.nxt
            && tcb.rcvbuf.ooo_extents() == 0)
            .then(|| tcb.rcvbuf.can_hold_lent())
    }

    /// An IPv4 packet without options or fragments, TCP, to this host: where its segment
    /// starts and ends in `packet`, and its addresses.
    fn direct_ip4(&self, packet: &[u8]) -> Option<(usize, usize, Addrs)> {
        let packet = ipv4::Packet::new_checked(packet).ok()?;
        let ip_len = packet.header_len();
        if packet.version() != 4
            || ip_len != ipv4::HEADER_LEN
            || packet.more_frags()
            || packet.frag_offset() != 0
            || packet.next_header() != IpProtocol::Tcp
            || packet.dst_addr() != self.ipv4.addr
        {
            return None;
        }
        let addrs = Addrs::V4 {
            local: packet.dst_addr(),
            remote: packet.src_addr(),
        };
        Some((ip_len, usize::from(packet.total_len()), addrs))
    }

    /// An IPv6 packet with no extension header (so no fragment: RFC 8200 §4.5), TCP, to
    /// one of our unicast addresses from a source `ipv6_input` would take (RFC 4291
    /// §2.5.3, §2.7, no v4-mapped source): where its segment starts and ends in `packet`,
    /// and its addresses.
    fn direct_ip6(&self, packet: &[u8]) -> Option<(usize, usize, Addrs)> {
        let packet = ipv6::Packet::new_checked(packet).ok()?;
        let (src, dst) = (packet.src_addr(), packet.dst_addr());
        if packet.version() != 6
            || packet.next_header() != IpProtocol::Tcp
            || src.is_multicast()
            || src.is_loopback()
            || src.to_ipv4_mapped().is_some()
            || !self.ip6.is_ours(dst)
        {
            return None;
        }
        let end = ipv6::HEADER_LEN + usize::from(packet.payload_len());
        let addrs = Addrs::V6 {
            local: dst,
            remote: src,
        };
        Some((ipv6::HEADER_LEN, end, addrs))
    }
}

/// A segment's addresses, ours and the peer's.
enum Addrs {
    V4 { local: Ipv4Addr, remote: Ipv4Addr },
    V6 { local: Ipv6Addr, remote: Ipv6Addr },
}
