//! IPv4 input and output: [RFC 791](https://www.rfc-editor.org/rfc/rfc791), with the checks
//! and their order from Linux's `ip_rcv_core` (`net/ipv4/ip_input.c`) and the output
//! path of `ip_output.c` / `ip_fragment` (fragmentation on output when DF is clear).
//! ustack is a host, never a router: datagrams not addressed to us are dropped
//! (`IP_INADDRERRORS`), as Linux does with `ip_forward = 0`.

pub mod addrconf;
pub mod ipv6;
pub mod reasm6;
pub mod reassembly;

use core::hash::BuildHasher;
use core::net::Ipv4Addr;

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::{IpProtocol, ipv4};

use crate::Stack;
use crate::ip::reassembly::{FragKey, Outcome};
use crate::secret::KeyedState;

/// A datagram delivered locally, as the transport layers see it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound<'a> {
    pub repr: ipv4::Repr,
    /// The IP header as received (options included): ICMP errors quote it.
    pub header: &'a [u8],
    /// The transport payload (after reassembly, if it was fragmented).
    pub payload: &'a [u8],
    /// Sent to a broadcast address (link or IP): no ICMP errors in reply (RFC 1122 §3.2.2).
    pub broadcast: bool,
}

/// IP identification generator: a counter per bucket of destinations, the buckets picked
/// by a keyed hash of (destination, protocol), like Linux's `ip_idents_reserve`
/// (`net/ipv4/route.c`, siphash under the secret `ip_id_key`), so IDs do not reveal the
/// host's total traffic, and start at a secret offset per destination.
#[derive(Debug)]
pub struct IdentGen {
    buckets: Box<[u16; 2048]>,
    hasher: KeyedState,
    /// The last (destination, protocol) and its hash: a run of datagrams to one peer
    /// hashes once (the hash is a function of the key, so this changes no identifier).
    last: Option<((u32, u8), u64)>,
}

impl IdentGen {
    /// `hasher` keyed with a secret (the stack's).
    pub fn new(hasher: KeyedState) -> Self {
        IdentGen {
            buckets: Box::new([0; 2048]),
            hasher,
            last: None,
        }
    }

    /// Reserve `n` consecutive identifiers for `dst`/`protocol`; returns the first.
    #[inline]
    pub fn next(&mut self, dst: Ipv4Addr, protocol: IpProtocol, n: u16) -> u16 {
        let key = (u32::from(dst), u8::from(protocol));
        let h = match self.last {
            Some((k, h)) if k == key => h,
            _ => {
                let h = self.hasher.hash_one(key);
                self.last = Some((key, h));
                h
            }
        };
        let slot = &mut self.buckets[(h as usize) & 2047];
        let id = slot.wrapping_add((h >> 32) as u16);
        *slot = slot.wrapping_add(n);
        id
    }
}

/// A datagram being built: header written, transport payload at `frame[l4..]`.
#[derive(Debug)]
pub(crate) struct IpFrame {
    pub frame: Vec<u8>,
    pub l4: usize,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    next_hop: Ipv4Addr,
}

/// What an upper layer asks of IP output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outbound {
    pub dst: Ipv4Addr,
    pub protocol: IpProtocol,
    pub payload_len: usize,
    /// Set DF. When false, a datagram larger than the MTU is fragmented.
    pub dont_frag: bool,
    /// What to count if the device queue is full.
    pub full_reason: DropReason,
}

impl Stack {
    /// IPv4 input (Linux `ip_rcv_core`, then `ip_local_deliver`). `l2_broadcast`: the
    /// frame was sent to the link broadcast address.
    /// `PROF`: whether `--profile` is on for this packet (read once a packet, by
    /// [`Stack::receive_with`]): off, the early demux's stage guards are compiled out.
    #[inline(always)]
    pub(crate) fn ipv4_input<const PROF: bool>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        l2_broadcast: bool,
    ) {
        // An established connection's common segment goes straight to it (Linux
        // `tcp_v4_early_demux`); the fast path makes the checks below itself, and leaves
        // everything else, counted and changed nothing, to the general path.
        if !l2_broadcast && self.tcp_v4_early_demux::<PROF>(now, bytes) {
            return;
        }
        self.ipv4_rcv(now, bytes, l2_broadcast);
    }

    /// [`ipv4_input`](Self::ipv4_input) past the early demux.
    fn ipv4_rcv(&mut self, now: Instant, bytes: &[u8], l2_broadcast: bool) {
        self.mib.inc(Counter::IpInReceives);
        // RFC 1122 §3.2.1.1-3.2.1.2, in Linux's order: header present, version and IHL,
        // checksum, then total length against what arrived.
        if bytes.len() < ipv4::HEADER_LEN {
            return self.mib.drop(DropReason::IpInhdr);
        }
        let view = ipv4::Packet::new_unchecked(bytes);
        let ihl = view.header_len();
        if view.version() != 4 || ihl < ipv4::HEADER_LEN || bytes.len() < ihl {
            return self.mib.drop(DropReason::IpInhdr);
        }
        // "MUST verify the IP header checksum ... silently discard a datagram that has a
        // bad checksum" (RFC 1122 §3.2.1.2).
        if ustack_wire::checksum::data(&bytes[..ihl]) != 0xffff {
            return self.mib.drop(DropReason::IpCsum);
        }
        let total = view.total_len() as usize;
        if bytes.len() < total {
            return self.mib.drop(DropReason::IpTruncated);
        }
        if total < ihl {
            return self.mib.drop(DropReason::IpInhdr);
        }
        // Trailing bytes past total_len (Ethernet padding) are trimmed by new_checked.
        let Ok(packet) = ipv4::Packet::new_checked(&bytes[..total]) else {
            return self.mib.drop(DropReason::IpInhdr);
        };
        let Ok(repr) = ipv4::Repr::parse(&packet, false) else {
            return self.mib.drop(DropReason::IpInhdr);
        };
        // Martian sources (RFC 1812 §5.3.7; Linux `ip_route_input_slow`): never valid.
        if repr.src_addr.is_broadcast()
            || repr.src_addr.is_multicast()
            || repr.src_addr == self.ipv4.addr
        {
            return self.mib.drop(DropReason::IpInvalidSource);
        }
        let broadcast = l2_broadcast
            || repr.dst_addr.is_broadcast()
            || Some(repr.dst_addr) == self.ipv4.broadcast();
        if repr.dst_addr != self.ipv4.addr
            && !repr.dst_addr.is_broadcast()
            && Some(repr.dst_addr) != self.ipv4.broadcast()
        {
            // We do not forward (RFC 1122 §3.3.1: a host "MUST NOT" forward by default).
            return self.mib.drop(DropReason::IpInaddrErrors);
        }
        let header = &bytes[..ihl];
        if repr.more_frags || repr.frag_offset != 0 {
            let key = FragKey {
                src: repr.src_addr,
                dst: repr.dst_addr,
                ident: repr.ident,
                protocol: u8::from(repr.next_header),
            };
            let outcome = self.reasm.add(
                now,
                key,
                repr.frag_offset,
                repr.more_frags,
                header,
                packet.payload(),
                &mut self.mib,
            );
            // A new datagram's timer, or datagrams expired to make room (their ICMP wait
            // for `handle_timeout`).
            self.wake.lower_opt(self.reasm.poll_at());
            match outcome {
                Outcome::Pending | Outcome::Dropped(_) => {}
                Outcome::Complete(done) => {
                    // Earlier fragments came without the link's word on the checksum.
                    self.rx_csum_ok = false;
                    let mut repr = repr;
                    repr.payload_len = done.payload.len();
                    repr.more_frags = false;
                    repr.frag_offset = 0;
                    let inbound = Inbound {
                        repr,
                        header: &done.header,
                        payload: &done.payload,
                        broadcast,
                    };
                    self.ip_local_deliver(now, &inbound);
                }
            }
            return;
        }
        let inbound = Inbound {
            repr,
            header,
            payload: packet.payload(),
            broadcast,
        };
        self.ip_local_deliver(now, &inbound);
    }

    /// Hand a whole datagram to its protocol (Linux `ip_protocol_deliver_rcu`).
    fn ip_local_deliver(&mut self, now: Instant, inbound: &Inbound) {
        match inbound.repr.next_header {
            IpProtocol::Icmp => {
                self.mib.inc(Counter::IpInDelivers);
                self.icmp_input(now, inbound);
            }
            IpProtocol::Udp => {
                self.mib.inc(Counter::IpInDelivers);
                self.udp_input(now, inbound);
            }
            IpProtocol::Tcp => {
                self.mib.inc(Counter::IpInDelivers);
                self.tcp_input(now, inbound);
            }
            _ => {
                // No handler: "protocol unreachable" (RFC 1122 §3.2.2.1).
                self.mib.drop(DropReason::IpNoproto);
                self.icmp_send_unreach(
                    now,
                    inbound,
                    ustack_wire::icmpv4::DstUnreachable::ProtoUnreachable,
                );
            }
        }
    }

    /// The next hop for `dst`, or `None` if there is no route.
    pub(crate) fn route(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if dst.is_broadcast() || self.ipv4.contains(dst) {
            Some(dst)
        } else {
            self.gateway
        }
    }

    /// Route and allocate one unfragmented datagram with DF set (TCP's path: segments
    /// are sized to the MTU), header written; the caller fills the transport payload at
    /// `frame[l4..]` and hands it to [`Stack::ipv4_send`].
    pub(crate) fn ipv4_alloc(
        &mut self,
        dst: Ipv4Addr,
        protocol: IpProtocol,
        payload_len: usize,
    ) -> Result<IpFrame, crate::Error> {
        self.mib.inc(Counter::IpOutRequests);
        // DF is set and TCP sizes segments to the MTU; a datagram over it is a bug upstream,
        // dropped and counted here rather than put on the wire (Linux ip_fragment: FragFails).
        if ipv4::HEADER_LEN + payload_len > self.mtu {
            self.mib.drop(DropReason::PktTooBig);
            return Err(crate::Error::MessageTooLong);
        }
        let Some(next_hop) = self.route(dst) else {
            self.mib.drop(DropReason::IpNoRoute);
            return Err(crate::Error::NetUnreachable);
        };
        let l2 = self.l2_len();
        let repr = ipv4::Repr {
            src_addr: self.ipv4.addr,
            dst_addr: dst,
            next_header: protocol,
            payload_len,
            ttl: self.sysctl.ip_default_ttl as u8,
            tos: 0,
            ident: self.ident.next(dst, protocol, 1),
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        };
        let l4 = l2 + repr.buffer_len();
        let mut frame = self.frame_for(l4 + payload_len, l4 + payload_len.min(60));
        repr.emit(&mut ipv4::Packet::new_unchecked(&mut frame[l2..]), true);
        Ok(IpFrame {
            frame,
            l4,
            src: self.ipv4.addr,
            dst,
            next_hop,
        })
    }

    /// Queue a datagram made by [`Stack::ipv4_alloc`].
    pub(crate) fn ipv4_send(&mut self, now: Instant, f: IpFrame, full_reason: DropReason) -> bool {
        self.dev_queue_xmit(f.next_hop, f.frame, full_reason, now)
    }

    /// IPv4 output (Linux `ip_queue_xmit` / `ip_finish_output`): route, build the header,
    /// fragment when larger than the MTU and DF is clear, and queue for the device.
    /// `fill` writes the transport payload (exactly `out.payload_len` bytes) given
    /// (source, destination). Returns the error the socket call reports, if any.
    pub(crate) fn ipv4_output(
        &mut self,
        now: Instant,
        out: Outbound,
        fill: impl FnOnce(&mut [u8], Ipv4Addr, Ipv4Addr),
    ) -> Result<(), crate::Error> {
        self.mib.inc(Counter::IpOutRequests);
        let Some(next_hop) = self.route(out.dst) else {
            self.mib.drop(DropReason::IpNoRoute);
            return Err(crate::Error::NetUnreachable);
        };
        let src = self.ipv4.addr;
        let l2 = self.l2_len();
        let mut repr = ipv4::Repr {
            src_addr: src,
            dst_addr: out.dst,
            next_header: out.protocol,
            payload_len: out.payload_len,
            ttl: self.sysctl.ip_default_ttl as u8,
            tos: 0,
            ident: 0,
            dont_frag: out.dont_frag,
            more_frags: false,
            frag_offset: 0,
        };
        let hlen = repr.buffer_len();
        if hlen + out.payload_len <= self.mtu {
            // RFC 6864 §4.1: the ID field is meaningful only for fragmentable datagrams,
            // but Linux fills it anyway; so do we.
            repr.ident = self.ident.next(out.dst, out.protocol, 1);
            let mut frame = vec![0u8; l2 + hlen + out.payload_len];
            fill(&mut frame[l2 + hlen..], src, out.dst);
            repr.emit(&mut ipv4::Packet::new_unchecked(&mut frame[l2..]), true);
            self.dev_queue_xmit(next_hop, frame, out.full_reason, now);
            return Ok(());
        }
        if out.dont_frag || self.mtu < hlen + 8 {
            self.mib.drop(DropReason::PktTooBig);
            return Err(crate::Error::MessageTooLong);
        }
        // RFC 791 §3.2 "Fragmentation": every fragment but the last carries a multiple of
        // 8 payload bytes; all carry the same ID; offsets count in units of 8.
        let mut payload = vec![0u8; out.payload_len];
        fill(&mut payload, src, out.dst);
        let per_frag = (self.mtu - hlen) & !7;
        let count = out.payload_len.div_ceil(per_frag);
        repr.ident = self.ident.next(out.dst, out.protocol, 1);
        for (i, chunk) in payload.chunks(per_frag).enumerate() {
            let mut frag = repr;
            frag.payload_len = chunk.len();
            frag.frag_offset = (i * per_frag) as u16;
            frag.more_frags = i + 1 < count;
            let mut frame = vec![0u8; l2 + hlen + chunk.len()];
            frame[l2 + hlen..].copy_from_slice(chunk);
            frag.emit(&mut ipv4::Packet::new_unchecked(&mut frame[l2..]), true);
            self.mib.inc(Counter::IpFragCreates);
            self.dev_queue_xmit(next_hop, frame, out.full_reason, now);
        }
        self.mib.inc(Counter::IpFragOKs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_per_destination_do_not_depend_on_other_traffic() {
        let (a, b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2));
        let fresh = |dst, proto| IdentGen::new(KeyedState::from_seed(3)).next(dst, proto, 1);
        let bucket =
            |dst: Ipv4Addr| KeyedState::from_seed(3).hash_one((u32::from(dst), 6u8)) & 2047;
        assert_ne!(bucket(a), bucket(b), "the test wants two buckets");
        let mut g = IdentGen::new(KeyedState::from_seed(3));
        let first_a = g.next(a, IpProtocol::Tcp, 1);
        assert_eq!(first_a, fresh(a, IpProtocol::Tcp));
        assert_eq!(
            g.next(b, IpProtocol::Tcp, 1),
            fresh(b, IpProtocol::Tcp),
            "b's own"
        );
        assert_eq!(
            g.next(a, IpProtocol::Tcp, 1),
            first_a.wrapping_add(1),
            "a's next"
        );
        assert_eq!(
            g.next(a, IpProtocol::Udp, 1),
            fresh(a, IpProtocol::Udp),
            "per protocol"
        );
    }
}
