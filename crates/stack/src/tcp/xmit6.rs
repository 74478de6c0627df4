//! An established connection's IPv6 segments written in one pass from a header template
//! (see [`super::xmit`] for what both families share and when a template is rebuilt).
//!
//! A [`HeaderTemplate6`] holds the first 8 bytes of the connection's IPv6 header as
//! [`Stack::ipv6_alloc`] writes it for the connection (traffic class 0; the flow label
//! the general path derives from the tuple, RFC 6437 §3, or 0 without
//! `auto_flowlabels`; Next Header TCP; the hop limit of `net.ipv6.conf.*.hop_limit` or a
//! Router Advertisement's) with Payload Length zero, the TCP pseudo-header's constant
//! part (addresses and Next Header, RFC 8200 §8.1), whether the next hop is a router and
//! the path MTU (Linux `ip6_mtu` on the socket's cached route) it was built under: 20
//! bytes, less than the IPv4 template, so that the template an
//! [`ActiveState`](super::tcb::ActiveState) holds does not grow its run of hot bytes. The
//! two addresses (32 bytes) and the next hop (16) are not in it: each segment copies the
//! addresses from the connection's interned ones (`Tcp::addrs`, two indexed reads of
//! entries the receive path's early demux has just read) and sends to the peer or to the
//! router ([`Stack::tx_gen`] moves when the router changes). Each segment
//! copies the 8 bytes and the addresses into the device's frame and patches Payload
//! Length; the TCP segment is written as [`super::xmit`] does for both families. Against
//! the general path ([`Stack::tcp_emit`] -> `ipv6_alloc`), a segment saves the source
//! selection, the route, the path-MTU lookup, the keyed hash of the flow label and the
//! header's serialization. A segment larger than the template's path MTU (a Packet Too
//! Big lowered it after the segment was sized: the general path fragments it) is left to
//! the general path; a Packet Too Big that lowers a path MTU moves [`Stack::tx_gen`], so
//! the next segments see the new one.

use core::net::SocketAddr;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::{IpProtocol, checksum, ipv6};

use super::output::Payload;
use super::tcb::FourTuple;
use super::xmit::{SegHead, tcp_checksum, write_tcp_segment};
use crate::Stack;

/// What every IPv6 segment of one connection repeats (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderTemplate6 {
    /// [`Stack::tx_gen`] when built.
    pub(crate) generation: u32,
    /// The path MTU when built (at most 65,535: a larger segment's Payload Length does
    /// not fit its field), larger segments take the general path.
    mtu: u16,
    /// The sum of the TCP pseudo-header without its length: addresses, Next Header.
    pseudo: u16,
    /// The IPv6 header's first 8 bytes (version, traffic class, flow label, Payload
    /// Length zero, Next Header, hop limit): the addresses follow from the tuple.
    head: [u8; 8],
    /// Where the frames go on the link: the router ([`Ip6State::router`](crate::ip::ipv6::Ip6State::router)) if set,
    /// else the peer. A change of router moves [`Stack::tx_gen`].
    via_router: bool,
}

impl Stack {
    /// A template for the TCP segments of the IPv6 connection `tuple` (see the module
    /// docs) at `now` (the path MTU then); `None` without a route, as
    /// [`Stack::ipv6_alloc`] would find.
    pub(crate) fn tcp_header_template6(
        &self,
        now: Instant,
        tuple: &FourTuple,
    ) -> Option<HeaderTemplate6> {
        let (SocketAddr::V6(local), SocketAddr::V6(remote)) = self.tcp.addrs(tuple) else {
            return None;
        };
        let (src, dst) = (*local.ip(), *remote.ip());
        let next_hop = self.ip6.route(dst)?;
        let via_router = next_hop != dst;
        let repr = ipv6::Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: 0,
            hop_limit: self.sysctl.ip6_hop_limit as u8,
            traffic_class: 0,
            flow_label: self.ip6_flow_label(
                src,
                dst,
                IpProtocol::Tcp,
                Some((local.port(), remote.port())),
            ),
        };
        let mut ip = [0u8; ipv6::HEADER_LEN];
        repr.emit(&mut ipv6::Packet::new_unchecked(&mut ip[..]));
        let mut head = [0u8; 8];
        head.copy_from_slice(&ip[..8]);
        Some(HeaderTemplate6 {
            generation: self.tx_gen,
            mtu: self.path_mtu6(now, dst).min(usize::from(u16::MAX)) as u16,
            pseudo: checksum::pseudo_header_v6(src, dst, IpProtocol::Tcp, 0),
            head,
            via_router,
        })
    }

    /// Write one segment of a connection from its IPv6 template into a frame and queue it
    /// (Linux `__tcp_transmit_skb` -> `inet6_csk_xmit` -> `ip6_xmit` for a connected
    /// socket): the header (the template's first 8 bytes, then `tuple`'s addresses), then
    /// `head`'s TCP header with its timestamp and SACK options, then `payload`, the
    /// checksum over the IPv6 pseudo-header (left zero under
    /// [`crate::Config::checksum_offload`], as the general path does). The frame is the
    /// one the general path writes, byte for byte, and counted as it counts it. `None`:
    /// larger than the template's path MTU, or `tuple` not an IPv6 one; nothing written
    /// or counted.
    pub(super) fn tcp_transmit6(
        &mut self,
        now: Instant,
        tpl: &HeaderTemplate6,
        tuple: &FourTuple,
        head: &SegHead,
        payload: Payload<'_>,
    ) -> Option<bool> {
        let tcp_len = head.len() + payload.len();
        let total = ipv6::HEADER_LEN + tcp_len;
        if total > usize::from(tpl.mtu) {
            return None;
        }
        let (&src, &dst) = self.tcp.intern6.ips(tuple)?;
        let next_hop = if tpl.via_router {
            self.ip6.router()?
        } else {
            dst
        };
        self.mib.inc(Counter::Ip6OutRequests);
        let l2 = self.l2_len();
        // A device that lends its transmit memory takes a long segment's payload from the
        // send buffer itself (`tx_lend`): only the headers go into the frame.
        let lent = self.tcp_tx_lend(&payload, head.seq);
        let (body, payload) = match lent {
            Some(p) => (total - p.len(), Payload::None),
            None => (total, payload),
        };
        // Every byte of the headers is written below and the payload's by `write_payload`.
        let mut frame = self.frame_overwritten(l2 + body);
        let (ip, seg) = frame[l2..].split_at_mut(ipv6::HEADER_LEN);
        ip[..8].copy_from_slice(&tpl.head);
        ip[8..24].copy_from_slice(&src.octets());
        ip[24..40].copy_from_slice(&dst.octets());
        ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        write_tcp_segment(&self.tcp, head, payload, seg);
        let sum = if self.checksum_offload {
            0
        } else {
            tcp_checksum(tpl.pseudo, seg)
        };
        seg[16..18].copy_from_slice(&sum.to_be_bytes());
        self.mib.inc(Counter::TcpOutSegs);
        Some(match lent {
            None => self.ip6_xmit(now, next_hop, frame, DropReason::DevQueueFull),
            Some(p) => self.ip6_xmit_lent(now, next_hop, frame, p),
        })
    }
}
