//! An established connection's IPv4 segments written in one pass from a header template
//! (see [`super::xmit`] for what both families share and when a template is rebuilt).
//!
//! A [`HeaderTemplate`] holds the connection's IPv4 header, its checksum sum and the TCP
//! pseudo-header's constant part (source, destination, protocol) in the header's
//! per-segment fields (total length, identification, checksum), and the next hop. Each
//! segment copies the template into the device's frame, patches length and ID, finishes
//! the IP checksum from the stored sum (RFC 1071 §2(B): sums of pieces add), then the TCP
//! segment is written as [`super::xmit`] does for both families. The template holds the
//! TTL (`ip_default_ttl`); the address, gateway and MTU are fixed for a stack's life.

use core::net::Ipv4Addr;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::{IpProtocol, checksum, ipv4};

use super::output::Payload;
use super::xmit::{SegHead, tcp_checksum, write_tcp_segment};
use crate::Stack;

/// What every IPv4 segment of one connection repeats (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeaderTemplate {
    /// [`Stack::tx_gen`] when built; 0: no template.
    pub(crate) generation: u32,
    /// Where the frames go on the link (the route's gateway, or the peer).
    next_hop: Ipv4Addr,
    /// The IPv4 header with the fields each segment writes (total length, identification,
    /// checksum) holding two sums instead (28 bytes in all, so that the template of
    /// either family and its tag take 32: see [`super::xmit::TxTemplate`]): in the
    /// checksum field ([`IP_SUM`]), the ones'-complement sum of the header with those
    /// fields zero; in the total length field ([`PSEUDO`]), the sum of the TCP
    /// pseudo-header without its length (source, destination, protocol). Native-endian.
    ip: [u8; ipv4::HEADER_LEN],
}

/// Where [`HeaderTemplate::ip`] keeps the header's sum: the checksum field.
const IP_SUM: core::ops::Range<usize> = 10..12;
/// Where [`HeaderTemplate::ip`] keeps the pseudo-header's sum: the total length field.
const PSEUDO: core::ops::Range<usize> = 2..4;

impl HeaderTemplate {
    /// No template: its generation never matches the stack's (which starts at 1).
    pub(crate) const NONE: HeaderTemplate = HeaderTemplate {
        generation: 0,
        next_hop: Ipv4Addr::UNSPECIFIED,
        ip: [0; ipv4::HEADER_LEN],
    };

    /// The destination address (in the header).
    fn dst(&self) -> Ipv4Addr {
        let d = &self.ip[16..20];
        Ipv4Addr::new(d[0], d[1], d[2], d[3])
    }

    /// A sum kept in a field of the header each segment overwrites.
    #[inline(always)]
    fn sum_at(&self, at: core::ops::Range<usize>) -> u16 {
        let mut b = [0u8; 2];
        b.copy_from_slice(&self.ip[at]);
        u16::from_ne_bytes(b)
    }
}

impl Stack {
    /// A template for TCP segments to `dst` (see the module docs), as
    /// [`Stack::ipv4_alloc`] would write their IPv4 header: our address, the default TTL,
    /// TOS 0, DF; `None` without a route.
    pub(crate) fn tcp_header_template(&self, dst: Ipv4Addr) -> Option<HeaderTemplate> {
        let next_hop = self.route(dst)?;
        let src = self.ipv4.addr;
        let mut ip = [0u8; ipv4::HEADER_LEN];
        ip[0] = 0x45; // version 4, IHL 5 words
        ip[6] = 0x40; // DF (RFC 791 §3.1 flags: bit 1)
        ip[8] = self.sysctl.ip_default_ttl as u8;
        ip[9] = u8::from(IpProtocol::Tcp);
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&dst.octets());
        let ip_sum = checksum::data(&ip);
        let pseudo = checksum::pseudo_header_v4(src, dst, IpProtocol::Tcp, 0);
        ip[IP_SUM].copy_from_slice(&ip_sum.to_ne_bytes());
        ip[PSEUDO].copy_from_slice(&pseudo.to_ne_bytes());
        Some(HeaderTemplate {
            generation: self.tx_gen,
            next_hop,
            ip,
        })
    }

    /// Write one segment of a connection from its template into a frame and queue it
    /// (Linux `__tcp_transmit_skb` -> `ip_queue_xmit` for a connected socket): `head`'s
    /// header with its timestamp and SACK options (the only ones a synchronized
    /// connection sends), then `payload`. The IPv4 identification comes from the same
    /// generator as [`Stack::ipv4_alloc`]'s, so the frame is the one the general path
    /// writes, byte for byte. `segs` above 1: a super-segment of that many MTU-sized segments
    /// ([`Stack::set_gso_max_size`]), up to the device's size, its TCP checksum left to
    /// the device.
    pub(super) fn tcp_transmit4(
        &mut self,
        now: Instant,
        tpl: &HeaderTemplate,
        head: &SegHead,
        payload: Payload<'_>,
        segs: usize,
    ) -> bool {
        self.mib.inc(Counter::IpOutRequests);
        let tcp_len = head.len() + payload.len();
        let total = ipv4::HEADER_LEN + tcp_len;
        // As ipv4_alloc: DF is set and TCP sizes segments to the MTU; a super-segment
        // (`gso`) is cut to the MTU by the device.
        let gso = segs > 1;
        if total > if gso { self.gso_max_size } else { self.mtu } {
            self.mib.drop(DropReason::PktTooBig);
            return false;
        }
        // Linux ip_select_ident_segs: a super-segment takes one ID per segment the device
        // cuts it into (tcp_gso_segment numbers them on from the first).
        let ident = self.ident.next(tpl.dst(), IpProtocol::Tcp, segs as u16);
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
        let (ip, seg) = frame[l2..].split_at_mut(ipv4::HEADER_LEN);
        ip.copy_from_slice(&tpl.ip);
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&ident.to_be_bytes());
        let ip_sum = checksum::combine(&[tpl.sum_at(IP_SUM), total as u16, ident]);
        ip[10..12].copy_from_slice(&checksum::finish(ip_sum).to_be_bytes());

        write_tcp_segment(&self.tcp, head, payload, seg);
        // A super-segment's checksum is the device's (virtio-net NEEDS_CSUM: it writes
        // the pseudo-header sum, the other end sums each piece).
        let sum = if self.checksum_offload || gso {
            0
        } else {
            tcp_checksum(tpl.sum_at(PSEUDO), seg)
        };
        seg[16..18].copy_from_slice(&sum.to_be_bytes());
        // Linux __tcp_transmit_skb: OutSegs counts tcp_skb_pcount segments.
        self.mib.add(Counter::TcpOutSegs, segs as u64);
        match lent {
            None => self.dev_queue_xmit_inline(tpl.next_hop, frame, DropReason::DevQueueFull, now),
            Some(p) => self.dev_queue_xmit_lent(tpl.next_hop, frame, p, now),
        }
    }
}
