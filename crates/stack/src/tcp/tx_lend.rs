//! Data segments whose payload stays in the send buffer until the device takes them, for
//! a device that lends its transmit memory ([`Stack::set_tx_lend`]: the shm link's slots).
//!
//! A segment built into the stack's frame buffer and then copied into the device's slot
//! crosses memory twice; here TCP writes only its headers into the frame buffer (the
//! template path, [`super::xmit4`] and [`super::xmit6`]) and queues them with a
//! [`TxPayload`], the connection and sequence range of the payload. When the driver takes the frame
//! ([`Stack::poll_transmit_lent`]) and the device has a slot, the headers and then the
//! payload, straight from the send buffer's chunks ([`Stack::write_tx_payload`]), are
//! written into the slot: one copy of the payload between the send buffer and the link
//! instead of two. This is Linux's scatter-gather transmit: a TCP skb's payload is page
//! fragments of the socket's write queue (`tcp_sendmsg` fills them, `skb_clone` in
//! `__tcp_transmit_skb` shares them), only the headers are written at transmit, and a
//! driver with `NETIF_F_SG` takes the pieces from where they are. A device that cannot
//! (any other, or a frame that leaves through [`Stack::poll_transmit`]) gets the payload
//! copied after the headers when the frame is taken, today's copy in another place.
//!
//! Only segments whose checksum is left out ([`crate::Config::checksum_offload`]; a sum
//! would read the payload anyway) and at least [`LEND_MIN`] bytes long take this way: a
//! short segment costs less copied twice than queued as two pieces.
//!
//! The payload is referred to by sequence number, not held: Linux's clone keeps the pages
//! alive, but here an ACK frees the send buffer's bytes. A queued segment whose bytes were
//! acknowledged meanwhile (a retransmission queued behind the original, which the peer
//! then acknowledged), or whose connection went, has nothing left to send: it is dropped
//! and counted as `TCP_TX_STALE` when it is taken.

use std::collections::VecDeque;

use ustack_obs::{DropReason, Instant};
use ustack_wire::SeqNumber;

use super::TcpHandle;
use super::output::Payload;
use crate::Stack;

/// The shortest payload left in the send buffer (see the module docs): as the shm link's
/// receive side, which leaves only frames over 1 KiB in their slots.
pub const LEND_MIN: usize = 1024;

/// A queued segment's payload left in its connection's send buffer: `len` bytes from
/// sequence number `seq` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPayload {
    h: TcpHandle,
    seq: SeqNumber,
    len: u32,
}

impl TxPayload {
    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it is empty (never: only payloads of [`LEND_MIN`] bytes or more are left).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A frame for the device from [`Stack::poll_transmit_lent`].
#[derive(Debug)]
pub enum TxFrame {
    /// A whole frame, as [`Stack::poll_transmit`] gives it.
    Whole(Vec<u8>),
    /// A segment's headers (the link-layer header first) and its payload, left in the send
    /// buffer: the frame is `head.len() + payload.len()` bytes, the headers then the
    /// payload ([`Stack::write_tx_payload`]). Give `head` back with [`Stack::recycle`].
    Split {
        /// The frame's headers.
        head: Vec<u8>,
        /// Its payload.
        payload: TxPayload,
    },
}

/// The split segments in the stack's transmit queue: the queue position of each, counted
/// from the frame at the queue's front (`taken` is that frame's number). The count restarts
/// at 0 whenever the first split segment is queued into a queue without any, so it costs
/// a frame taken from the queue one test while none is queued.
#[derive(Debug, Default)]
pub(crate) struct TxSplits {
    queued: VecDeque<(u64, TxPayload)>,
    taken: u64,
}

impl TxSplits {
    /// Whether no split segment is queued.
    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// A split segment queued at position `queue_len` (the frames ahead of it).
    fn push(&mut self, queue_len: usize, payload: TxPayload) {
        if self.queued.is_empty() {
            self.taken = 0;
        }
        self.queued
            .push_back((self.taken + queue_len as u64, payload));
    }

    /// The frame at the queue's front was taken: its payload, if it was a split segment.
    fn take(&mut self) -> Option<TxPayload> {
        let at = self.taken;
        self.taken += 1;
        match self.queued.front() {
            Some(&(pos, payload)) if pos == at => {
                self.queued.pop_front();
                Some(payload)
            }
            _ => None,
        }
    }
}

impl Stack {
    /// The device lends its transmit memory ([`TxFrame::Split`]; the shm link's slots, its
    /// `Device::tx_lends`): TCP leaves a data segment's payload of at least [`LEND_MIN`]
    /// bytes in the send buffer until the driver takes it with
    /// [`poll_transmit_lent`](Self::poll_transmit_lent) and writes it into the device (see
    /// `tcp::tx_lend`'s docs). Only with [`crate::Config::checksum_offload`]; without,
    /// nothing changes. [`poll_transmit`](Self::poll_transmit) still gives whole frames.
    pub fn set_tx_lend(&mut self, on: bool) {
        self.tx_lend = on && self.checksum_offload;
    }

    /// The hook where TCP takes a segment's frame ([`super::xmit4`], [`super::xmit6`]): the payload to leave
    /// in the send buffer, if the segment's may be (see [`set_tx_lend`](Self::set_tx_lend));
    /// then only the headers go into the frame.
    #[inline(always)]
    pub(super) fn tcp_tx_lend(&self, payload: &Payload<'_>, seq: SeqNumber) -> Option<TxPayload> {
        if !self.tx_lend {
            return None;
        }
        match *payload {
            Payload::SendBuffer { h, len, .. } if len >= LEND_MIN => Some(TxPayload {
                h,
                seq,
                len: len as u32,
            }),
            _ => None,
        }
    }

    /// [`Stack::dev_queue_xmit`] for an IPv4 segment's headers whose payload stays in the
    /// send buffer: queued as a split segment when the frame can go at once (an IP link,
    /// or a reachable neighbour on Ethernet); otherwise the payload is copied after the
    /// headers now and the frame takes the general way (it may wait in the neighbour
    /// table).
    #[inline(never)]
    pub(super) fn dev_queue_xmit_lent(
        &mut self,
        next_hop: core::net::Ipv4Addr,
        mut frame: Vec<u8>,
        payload: TxPayload,
        now: Instant,
    ) -> bool {
        if self.medium == crate::Medium::Ethernet {
            let Some(mac) = self
                .neigh
                .hot(now, core::net::IpAddr::V4(next_hop), &self.sysctl)
            else {
                return match self.tx_join(frame, payload) {
                    Some(frame) => {
                        self.dev_queue_xmit(next_hop, frame, DropReason::DevQueueFull, now)
                    }
                    None => false,
                };
            };
            self.eth_header_ipv4(&mut frame, mac);
        }
        self.tx_push_split(frame, payload)
    }

    /// [`Stack::ip6_xmit`] for an IPv6 segment's headers whose payload stays in the send
    /// buffer, as [`dev_queue_xmit_lent`](Self::dev_queue_xmit_lent) for IPv4: queued as a
    /// split segment when the frame can go at once (an IP link, or a reachable neighbour
    /// on Ethernet), counted as `ip6_xmit` counts the whole frame; otherwise made whole
    /// now and sent the general way.
    #[inline(never)]
    pub(super) fn ip6_xmit_lent(
        &mut self,
        now: Instant,
        next_hop: core::net::Ipv6Addr,
        mut frame: Vec<u8>,
        payload: TxPayload,
    ) -> bool {
        if self.medium == crate::Medium::Ethernet {
            let Some(mac) = self
                .neigh
                .hot(now, core::net::IpAddr::V6(next_hop), &self.sysctl)
            else {
                return match self.tx_join(frame, payload) {
                    Some(frame) => self.ip6_xmit(now, next_hop, frame, DropReason::DevQueueFull),
                    None => false,
                };
            };
            self.eth_fill(&mut frame, mac, ustack_wire::ethernet::EtherType::Ipv6);
        }
        let octets = frame.len() - self.l2_len() + payload.len();
        self.mib.inc(ustack_obs::Counter::Ip6OutTransmits);
        self.mib
            .add(ustack_obs::Counter::Ip6OutOctets, octets as u64);
        self.tx_push_split(frame, payload)
    }

    /// Queue a split segment: `frame` (its headers, ready for the link) in the transmit
    /// queue and `payload` matched to it in `tx_splits`.
    fn tx_push_split(&mut self, frame: Vec<u8>, payload: TxPayload) -> bool {
        let queued = self.tx_queue_len();
        if !self.tx_push(frame, DropReason::DevQueueFull) {
            return false;
        }
        self.tx_splits.push(queued, payload);
        true
    }

    /// The frame just taken from the front of the transmit queue, as it is to go: a split
    /// segment's headers and payload, or a whole frame.
    #[inline]
    pub(crate) fn tx_split_of(&mut self, frame: Vec<u8>) -> TxFrame {
        match self.tx_splits.take() {
            Some(payload) => TxFrame::Split {
                head: frame,
                payload,
            },
            None => TxFrame::Whole(frame),
        }
    }

    /// A split segment made whole: `payload` copied from the send buffer after the headers
    /// in `head` (the fallback for a device that does not lend). `None`, counted, if the
    /// payload is no longer there (see the module docs).
    pub(crate) fn tx_join(&mut self, mut head: Vec<u8>, payload: TxPayload) -> Option<Vec<u8>> {
        head.reserve(payload.len());
        if self.write_tx_payload(&payload, |bytes| {
            head.extend_from_slice(bytes);
            true
        }) {
            return Some(head);
        }
        self.recycle(head);
        None
    }

    /// Hand `payload`'s bytes to `put` from the connection's send buffer, a chunk's piece
    /// at a time, in order (the driver writes them into the device's slot after the
    /// headers of [`TxFrame::Split`]). False if they are no longer all there (acknowledged
    /// since, or the connection gone: counted as `TCP_TX_STALE`, nothing handed over) or
    /// `put` refused a piece.
    pub fn write_tx_payload(
        &mut self,
        payload: &TxPayload,
        put: impl FnMut(&[u8]) -> bool,
    ) -> bool {
        let tcp = &self.tcp;
        let there = tcp.get(payload.h).and_then(|tcb| {
            let offset = usize::try_from(payload.seq.diff(tcb.data_start())).ok()?;
            let n = payload.len();
            (offset + n <= tcb.sndbuf.len()).then_some((tcb, offset, n))
        });
        let Some((tcb, offset, n)) = there else {
            self.mib.drop(DropReason::TcpTxStale);
            return false;
        };
        tcb.sndbuf.peek_with(&tcp.pool, offset, n, put)
    }
}

/// Held slots the stack asks its driver to keep in reserve (`Stack::tx_held_wants`), as
/// many as the device has free beyond its spare ones: a 512 KiB write's worth of 64 KiB
/// segments.
pub const HELD_RESERVE: usize = 8;

/// Held transmit slots as send buffer storage (see `tcp::buffer::held`).
impl Stack {
    /// The device lets the stack hold its transmit slots (`Device::tx_hold`): `writer`
    /// and `reader` reach them, `slot_len` bytes each. From now on writes of at least
    /// [`LEND_MIN`] bytes go into held slots while the reserve
    /// ([`give_held_slot`](Self::give_held_slot)) has any, and the driver hands
    /// [`take_released_held`](Self::take_released_held) back. Only with
    /// [`set_tx_lend`](Self::set_tx_lend) on (the segments over pieces leave split).
    pub fn set_tx_held(
        &mut self,
        writer: super::buffer::held::HeldWriter,
        reader: super::buffer::held::HeldReader,
        slot_len: usize,
    ) {
        if self.tx_lend {
            self.tcp.pool.held.set(writer, reader, slot_len);
        }
    }

    /// Whether the reserve of held slots is below `HELD_RESERVE` (8) (with held slots on).
    #[inline]
    pub fn tx_held_wants(&self) -> bool {
        self.tcp.pool.held.slot_len > 0 && self.tcp.pool.held.reserve_len() < HELD_RESERVE
    }

    /// A slot the device let the driver hold, for the reserve.
    pub fn give_held_slot(&mut self, id: u32) {
        self.tcp.pool.held.give(id);
    }

    /// The driver topped the reserve up: the writers that waited for a slot are marked
    /// writable.
    pub fn tx_held_given(&mut self) {
        if self.tcp.pool.held.waiters.is_empty() || !self.tcp.pool.held.ready() {
            return;
        }
        for h in core::mem::take(&mut self.tcp.pool.held.waiters) {
            if self.tcp.get(h).is_some() {
                self.ready.mark(
                    crate::socket::SocketKey::Tcp(h),
                    crate::socket::Readiness::WRITABLE,
                );
            }
        }
    }

    /// Releases the pieces of send buffers cleared (all acknowledged) or gone with their
    /// connection: `SendBuffer::clear` leaves them to be found here, so that the
    /// acknowledgement that empties a buffer costs no test for them. Before
    /// [`take_released_held`](Self::take_released_held), each round.
    pub fn tx_held_collect(&mut self) {
        let (conns, held) = (&self.tcp.conns, &mut self.tcp.pool.held);
        held.collect(|h, i| {
            conns
                .get(h.index, h.generation)
                .is_some_and(|t| t.sndbuf.held_queue() == i)
        });
    }

    /// Hands each held slot whose bytes were acknowledged (or whose connection went) to
    /// `f` (the device's `tx_hold_release`), oldest first.
    pub fn take_released_held(&mut self, mut f: impl FnMut(u32)) {
        self.tcp.pool.held.take_released(&mut f);
    }

    /// Counters of held slots: pieces written at `send()`, segments sent in place,
    /// segments over pieces copied instead, device reads or writes refused.
    pub fn held_slot_stats(&self) -> (u64, u64, u64, u64) {
        let h = &self.tcp.pool.held;
        (h.written, h.sent_in_place, h.copied, h.errors)
    }

    /// Held slots in the reserve (given, not yet written).
    pub fn tx_held_reserve(&self) -> usize {
        self.tcp.pool.held.reserve_len()
    }

    /// The held slot a split segment goes from in place: its payload exactly one piece
    /// of its connection's send buffer, after `head_len` bytes of headers, not sent in
    /// place before. The driver writes the headers at the slot's start
    /// ([`write_held_head`](Self::write_held_head)) and posts the slot. `None`: the
    /// payload is copied as for any split segment (counted when it is over pieces).
    pub fn tx_held_piece(&mut self, payload: &TxPayload, head_len: usize) -> Option<u32> {
        let (tcb, pool) = self.tcp.split(payload.h)?;
        if !tcb.sndbuf.holds_pieces() {
            return None;
        }
        let offset = usize::try_from(payload.seq.diff(tcb.data_start())).ok()?;
        tcb.sndbuf
            .piece_for_send(pool, offset, payload.len(), head_len)
    }

    /// Writes a segment's headers at the start of held slot `id` (see
    /// [`tx_held_piece`](Self::tx_held_piece)).
    pub fn write_held_head(&self, id: u32, head: &[u8]) -> bool {
        self.tcp.pool.held.write_head(id, head)
    }

    /// `tcp_sendmsg`'s write into held slots (`SendBuffer::write_held`): `Ok`, the bytes
    /// taken, pushed out as `tcp_sendmsg` pushes; `Err(k)`: none, the caller writes at
    /// most `k` into chunks.
    pub(super) fn tcp_sendmsg_held(
        &mut self,
        now: Instant,
        h: TcpHandle,
        data: &[u8],
    ) -> Result<usize, usize> {
        let Some(tcb) = self.tcp.get(h) else {
            return Err(usize::MAX);
        };
        let (cap, room, sent) = self.held_geometry(tcb);
        let Some((tcb, pool)) = self.tcp.split(h) else {
            return Err(usize::MAX);
        };
        let limit = tcb.sndbuf_limit as usize;
        let n = tcb
            .sndbuf
            .write_held(pool, data, limit, (cap, room, sent, LEND_MIN), h)?;
        if tcb.state.can_send() && !self.tcp_push_one(now, h) {
            self.tcp_output(now, h);
        }
        Ok(n)
    }

    /// How a write of this connection is cut into held slots: the segment size, the
    /// data segment's header bytes in front (link, IP, TCP with timestamps), and the
    /// bytes already sent from the send buffer's head.
    pub(super) fn held_geometry(&self, tcb: &super::Tcb) -> (usize, usize, usize) {
        let ip = if tcb.tuple.is_v6() { 40 } else { 20 };
        let ts = if tcb.flags.has(super::tcb::TcbFlags::TS_OK) {
            12
        } else {
            0
        };
        let room = self.l2_len() + ip + ustack_wire::tcp::HEADER_LEN + ts;
        let sent = tcb.snd.nxt.diff(tcb.data_start()).max(0) as usize;
        (tcb.mss_now(), room, sent)
    }
}
