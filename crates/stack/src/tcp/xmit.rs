//! An established connection's segments written in one pass from a per-connection header
//! template, both families: what they share. Linux keeps what every segment of a
//! connection repeats in the socket (`inet_sk` / `ipv6_pinfo`: addresses, ports, TTL or
//! hop limit, TOS or traffic class, flow label; `sk_dst_cache`: the route) and
//! `__tcp_transmit_skb` -> `ip_queue_xmit` / `inet6_csk_xmit` only fills in what changes.
//! The IP header's template and how it is finished are the family's ([`super::xmit4`],
//! [`super::xmit6`]); the TCP header and its options (`NOP NOP TS`, SACK blocks) are
//! written straight into the frame here ([`write_tcp_segment`]), the payload copied from
//! the send buffer once, and the TCP checksum summed from the template's stored
//! pseudo-header part ([`tcp_checksum`], RFC 1071 §2(B): sums of pieces add): no `Repr`
//! is serialized, and no byte is written twice.
//!
//! A connection's template ([`TxTemplate`]) is kept in its
//! [`ActiveState`](super::tcb::ActiveState) (held while data flows; an idle connection's
//! pure ACK builds one on the stack and drops it). It records the [`Stack::tx_gen`] it
//! was built under: everything it holds that can change bumps that generation (any
//! sysctl, `ip_default_ttl` and the IPv6 hop limit and `auto_flowlabels` among them; a
//! Router Advertisement, which can change the hop limit and the default router; an
//! expired router or address; a Packet Too Big that lowers an IPv6 path MTU), so a stale
//! template is never used. What varies per connection and per segment (MSS and so
//! segment sizes, window scale, timestamps on or off, SACK blocks) is not in it. Segments
//! that need more (SYN options, no route, an IPv6 segment larger than the path MTU the
//! template was built under) take the general path, [`Stack::tcp_emit`].

use ustack_wire::tcp::{self, Flags, TcpTimestamp, option_kind};
use ustack_wire::{SeqNumber, checksum};

use super::output::Payload;
use super::tcb::FourTuple;
use super::xmit4::HeaderTemplate;
use super::xmit6::HeaderTemplate6;
use super::{Tcp, TcpHandle};
use crate::Stack;
use ustack_obs::Instant;

/// A connection's header template, of its family: 32 bytes with the tag (checked at
/// compile time), so that [`ActiveState`](super::tcb::ActiveState)'s run of hot bytes
/// stays within four cache lines. The IPv4 one keeps two sums in its header's
/// per-segment fields ([`super::xmit4`]); the IPv6 one keeps neither addresses nor next
/// hop ([`super::xmit6`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum TxTemplate {
    V4(HeaderTemplate),
    V6(HeaderTemplate6),
}
const _: () = assert!(size_of::<TxTemplate>() <= 32);

impl TxTemplate {
    /// No template: its generation never matches the stack's (which starts at 1).
    pub(crate) const NONE: TxTemplate = TxTemplate::V4(HeaderTemplate::NONE);
}

/// The TCP header of a synchronized connection's segment, as `tcp_send_segment` decides
/// it: the fields, the timestamps and up to four SACK blocks (RFC 7323 §3, RFC 2018 §3;
/// no SYN options). Not a `tcp::Repr`: only what such a segment can carry, written
/// straight into the frame ([`write_tcp_segment`]); the general path builds a `Repr`
/// from it ([`SegHead::repr`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct SegHead {
    pub(super) src_port: u16,
    pub(super) dst_port: u16,
    pub(super) seq: SeqNumber,
    pub(super) ack: SeqNumber,
    pub(super) flags: Flags,
    /// The window field (scaled).
    pub(super) window: u16,
    pub(super) urgent: u16,
    pub(super) timestamp: Option<TcpTimestamp>,
    /// SACK blocks in `sacks[..n_sacks]`.
    pub(super) n_sacks: u8,
    pub(super) sacks: [(SeqNumber, SeqNumber); 4],
}

impl SegHead {
    /// The header's length with its options, each after two NOPs as Linux
    /// `tcp_options_write` lays them out.
    #[inline]
    pub(super) fn len(&self) -> usize {
        let sacks = usize::from(self.n_sacks);
        tcp::HEADER_LEN
            + if self.timestamp.is_some() { 12 } else { 0 }
            + if sacks > 0 { 4 + 8 * sacks } else { 0 }
    }

    /// The same header as a `tcp::Repr`, for the general path.
    #[cold]
    pub(super) fn repr(&self) -> tcp::Repr<'static> {
        let mut sack_ranges = [None; tcp::MAX_SACK_BLOCKS];
        for (to, b) in sack_ranges
            .iter_mut()
            .zip(&self.sacks[..usize::from(self.n_sacks)])
        {
            *to = Some(*b);
        }
        tcp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            seq_number: self.seq,
            ack_number: self.ack,
            flags: self.flags,
            window_len: self.window,
            urgent_pointer: self.urgent,
            timestamp: self.timestamp,
            sack_ranges,
            ..tcp::Repr::default()
        }
    }
}

/// Write `head` (the checksum field zero) and then `payload` into `seg` (exactly header
/// and payload long), as `tcp::Repr::emit_header` and the general path write them.
#[inline(always)]
pub(super) fn write_tcp_segment(tcp: &Tcp, head: &SegHead, payload: Payload<'_>, seg: &mut [u8]) {
    let tcp_hlen = head.len();
    let (h, rest) = seg.split_at_mut(tcp::HEADER_LEN);
    h[0..2].copy_from_slice(&head.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&head.dst_port.to_be_bytes());
    h[4..8].copy_from_slice(&head.seq.0.to_be_bytes());
    h[8..12].copy_from_slice(&head.ack.0.to_be_bytes());
    h[12] = ((tcp_hlen / 4) as u8) << 4;
    h[13] = head.flags.0;
    h[14..16].copy_from_slice(&head.window.to_be_bytes());
    h[16..18].fill(0);
    h[18..20].copy_from_slice(&head.urgent.to_be_bytes());
    let (opts, data) = rest.split_at_mut(tcp_hlen - tcp::HEADER_LEN);
    let mut at = 0;
    if let Some(ts) = head.timestamp {
        // Linux tcp_options_write: NOP NOP TS without SACK-permitted.
        opts[0..4].copy_from_slice(&[
            option_kind::NO_OPERATION,
            option_kind::NO_OPERATION,
            option_kind::TIMESTAMP,
            10,
        ]);
        opts[4..8].copy_from_slice(&ts.tsval.to_be_bytes());
        opts[8..12].copy_from_slice(&ts.tsecr.to_be_bytes());
        at = 12;
    }
    if head.n_sacks > 0 {
        write_sack_blocks(head, &mut opts[at..]);
    }
    payload.write_payload(tcp, data);
}

/// The TCP checksum field of `seg` (header and payload, checksum field zero) given the
/// sum of its pseudo-header without the length, `pseudo` (RFC 9293 §3.1, RFC 8200 §8.1:
/// the upper-layer length of a segment within one IP datagram fits 16 bits).
#[inline]
pub(super) fn tcp_checksum(pseudo: u16, seg: &[u8]) -> u16 {
    checksum::finish(checksum::segment_sum(pseudo, seg))
}

/// `NOP NOP SACK` and `head`'s blocks (RFC 2018 §3), as `tcp::Repr::emit_header` lays
/// them out.
#[cold]
fn write_sack_blocks(head: &SegHead, out: &mut [u8]) {
    let sacks = usize::from(head.n_sacks);
    out[0..4].copy_from_slice(&[
        option_kind::NO_OPERATION,
        option_kind::NO_OPERATION,
        option_kind::SACK,
        (2 + 8 * sacks) as u8,
    ]);
    for (i, (left, right)) in head.sacks[..sacks].iter().enumerate() {
        out[4 + 8 * i..8 + 8 * i].copy_from_slice(&left.0.to_be_bytes());
        out[8 + 8 * i..12 + 8 * i].copy_from_slice(&right.0.to_be_bytes());
    }
}

impl Stack {
    /// Send one segment of connection `h` (of `tuple`) from its header template (`held`,
    /// the one its active state holds, if still current, else a new one):
    /// [`Stack::tcp_transmit4`] or [`Stack::tcp_transmit6`]. `segs` above 1: an IPv4
    /// super-segment. `None`: no template fits (no route; an IPv6 segment larger than
    /// the template's path MTU), nothing sent or counted: the general path's to send.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tcp_transmit_templated(
        &mut self,
        now: Instant,
        h: TcpHandle,
        tuple: &FourTuple,
        held: TxTemplate,
        head: &SegHead,
        payload: Payload<'_>,
        segs: usize,
    ) -> Option<bool> {
        let gen_ok = |g: u32| g == self.tx_gen;
        let tpl = match held {
            TxTemplate::V4(t) if gen_ok(t.generation) => held,
            TxTemplate::V6(t) if gen_ok(t.generation) => held,
            _ => self.tcp_template_refresh(now, h, tuple)?,
        };
        let sent = match tpl {
            TxTemplate::V4(tpl) => Some(self.tcp_transmit4(now, &tpl, head, payload, segs)),
            TxTemplate::V6(tpl) => self.tcp_transmit6(now, &tpl, tuple, head, payload),
        };
        self.tcp.template_hits += u64::from(sent.is_some());
        sent
    }

    /// A new template for `tuple`, kept in connection `h`'s active state when it holds
    /// one.
    #[cold]
    #[inline(never)]
    fn tcp_template_refresh(
        &mut self,
        now: Instant,
        h: TcpHandle,
        tuple: &FourTuple,
    ) -> Option<TxTemplate> {
        let tpl = if tuple.is_v6() {
            TxTemplate::V6(self.tcp_header_template6(now, tuple)?)
        } else {
            TxTemplate::V4(self.tcp_header_template(*tuple.remote.ip())?)
        };
        if let Some(tcb) = self.tcp.get_mut(h)
            && tcb.active.is_held()
        {
            tcb.active.tx_template = tpl;
        }
        Some(tpl)
    }
}
