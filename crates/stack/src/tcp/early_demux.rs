//! Early demux: an established connection's common segment checked and handed to its
//! connection in one pass over the datagram's bytes, before the general input path
//! (Linux `ip_rcv_finish` -> `tcp_v4_early_demux`, `ip6_rcv_finish` ->
//! `tcp_v6_early_demux`, which find the established socket by one ehash lookup before
//! routing and set `skb->sk`).
//!
//! Each family checks its own IP header ([`Stack::tcp_v4_early_demux`],
//! [`Stack::tcp_v6_early_demux`]); what follows is shared ([`fast_tcp_header`],
//! [`Stack::early_demux_deliver`]): the TCP header's shape (only ACK and PSH; no options
//! or exactly `NOP NOP TS`, Linux `tcp_parse_aligned_timestamp`), the connection's lookup
//! (the last one found first, see `Tcp::demux_last`), the counters of a delivered segment
//! and the hand-over to [`Stack::conn_input`] with no `Repr` of the IP header or
//! [`crate::ip::Inbound`] built and the TCP header read once.
//!
//! The TCP checksum is verified unless the link vouched for it or both ends skip it
//! ([`Stack::l4_csum_trusted`], as the general path decides: a TUN queue's
//! `NEEDS_CSUM` or `DATA_VALID` super-segment is not summed on either path).
//! Anything else (a bad checksum or length included) makes the fast path return false
//! having changed and counted nothing, and the caller takes the general path, which
//! counts and drops it or handles it as before: the fast path never decides a drop. The
//! connection then predicts the segment ([`super::fast_path`], Linux
//! `tcp_rcv_established`'s fast path) and, if the prediction fails, runs every RFC 9293
//! step as before ([`Sock::tcp_rcv_state_process`]: header prediction, PAWS, window
//! acceptability, RFC 5961).
//!
//! [`Sock::tcp_rcv_state_process`]: super::sock::Sock

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use ustack_obs::{Counter, Instant};
use ustack_wire::tcp::{Flags, TcpTimestamp};
use ustack_wire::{IpProtocol, SeqNumber, checksum, ipv4, ipv6, tcp};

use super::tcb::FourTuple;
use crate::Stack;

/// The fields of a TCP header the fast path takes (see [`fast_tcp_header`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastHeader {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) flags: Flags,
    /// The data offset in bytes: 20 or 32.
    pub(crate) header_len: usize,
    pub(crate) timestamp: Option<TcpTimestamp>,
}

/// The TCP header of `seg` (the whole segment, at least [`tcp::HEADER_LEN`] bytes) if it
/// has the fast path's shape: only ACK and PSH set (no SYN, FIN, RST, URG, ECE or CWR:
/// Linux `tcp_rcv_established`'s `pred_flags` leave those to the slow path too), no
/// options or exactly `NOP NOP TS` within the segment, a destination port other than 0.
/// The checksum is the caller's to check (its pseudo-header is the family's).
#[inline(always)]
pub(crate) fn fast_tcp_header(seg: &[u8]) -> Option<FastHeader> {
    let flags = Flags(seg[13]);
    if flags.0 & !Flags::PSH.0 != Flags::ACK.0 {
        return None;
    }
    let header_len = usize::from(seg[12] >> 4) * 4;
    let timestamp = match header_len {
        tcp::HEADER_LEN => None,
        32 if seg.len() >= 32 => Some(tcp::aligned_timestamp(&seg[tcp::HEADER_LEN..32])?),
        _ => return None,
    };
    let dst_port = u16::from_be_bytes([seg[2], seg[3]]);
    if dst_port == 0 {
        return None;
    }
    Some(FastHeader {
        src_port: u16::from_be_bytes([seg[0], seg[1]]),
        dst_port,
        flags,
        header_len,
        timestamp,
    })
}

impl Stack {
    /// IPv4 early demux (Linux `tcp_v4_early_demux`; see the module docs): one pass over
    /// the datagram's bytes that makes every check of the general path
    /// ([`Stack::ipv4_input`], [`Stack::tcp_input`]) for the common segment.
    ///
    /// Taken only by an unfragmented datagram without IP options (RFC 791 §3.1: IHL 5),
    /// to our unicast address from a valid source, carrying a TCP segment of the fast
    /// path's shape ([`fast_tcp_header`]), whose checksums verify (RFC 1122 §3.2.1.2 for
    /// the IP header; RFC 9293 §3.1 for TCP, unless offloaded), for a connection in the
    /// established table.
    #[inline(always)]
    pub(crate) fn tcp_v4_early_demux<const PROF: bool>(
        &mut self,
        now: Instant,
        bytes: &[u8],
    ) -> bool {
        let Some(ip) = bytes.first_chunk::<{ ipv4::HEADER_LEN }>() else {
            return false;
        };
        if self.tcp.early_demux_off {
            return false;
        }
        // Version 4 and IHL 5, protocol TCP (RFC 791 §3.1).
        if ip[0] != 0x45 || ip[9] != u8::from(IpProtocol::Tcp) {
            return false;
        }
        // Not a fragment: MF clear and offset 0 (Linux `ip_is_fragment`). A total length
        // past what arrived is `ip_rcv_core`'s IpTruncated; one without a whole TCP header
        // is the general path's to drop.
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0
            || total > bytes.len()
            || total < ipv4::HEADER_LEN + tcp::HEADER_LEN
        {
            return false;
        }
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        // To our unicast address (not a broadcast: RFC 9293 §3.9.1.3), from a source that
        // is not a martian (RFC 1812 §5.3.7), as `ipv4_input` checks.
        if dst != self.ipv4.addr
            || self.ipv4_addr_is_broadcast
            || src.is_broadcast()
            || src.is_multicast()
            || src == self.ipv4.addr
        {
            return false;
        }
        // RFC 1122 §3.2.1.2: the header checksum.
        if checksum::data20(ip) != 0xffff {
            return false;
        }
        let seg = &bytes[ipv4::HEADER_LEN..total];
        let Some(hdr) = fast_tcp_header(seg) else {
            return false;
        };
        if !self.l4_csum_trusted() && checksum::segment_sum_v4(ip, IpProtocol::Tcp, seg) != 0xffff {
            // RFC 9293 §3.1: over the pseudo-header (the IP header's addresses, the
            // protocol, the TCP length) and the segment.
            return false;
        }
        let tuple = FourTuple {
            local: SocketAddrV4::new(dst, hdr.dst_port),
            remote: SocketAddrV4::new(src, hdr.src_port),
        };
        // The connection of the last segment, if this one is its (see `Tcp::demux_last`),
        // else one lookup in the established table (Linux `__inet_lookup_established`).
        let last = self.tcp.demux_last;
        let index = match self.tcp.conns.by_index(last) {
            Some(tcb) if tcb.tuple == tuple => last,
            _ => match self.early_demux_lookup(&tuple) {
                Some(index) => index,
                None => return false,
            },
        };
        // Committed: count what the general path counts for a delivered segment.
        self.mib.inc(Counter::IpInReceives);
        self.mib.inc(Counter::IpInDelivers);
        self.early_demux_deliver::<PROF>(now, index, &hdr, seg);
        true
    }

    /// IPv6 early demux (Linux `tcp_v6_early_demux`; see the module docs): one pass over
    /// the packet's bytes that makes every check of the general path
    /// ([`Stack::ipv6_input`], [`Stack::tcp6_input`]) for the common segment.
    /// `l2_multicast`: the frame came to a link-layer group address (never the fast
    /// path's: TCP is unicast only, RFC 9293 §3.9.1.3).
    ///
    /// Taken only by a packet of version 6 whose Next Header is TCP (RFC 8200 §3: any
    /// extension header, Hop-by-Hop and Fragment included, and a jumbogram take the
    /// general path), whose Payload Length holds a TCP header and fits what arrived, to
    /// one of our unicast addresses from a source that is not multicast, loopback or
    /// IPv4-mapped (`ip6_rcv_core`'s checks), carrying a TCP segment of the fast path's
    /// shape ([`fast_tcp_header`]) whose checksum over the IPv6 pseudo-header verifies
    /// (RFC 8200 §8.1, unless offloaded), for a connection in the established table.
    /// Neither path reads the Hop Limit (a host's TCP has no minimum, Linux checks one
    /// only with `IPV6_MINHOPCOUNT`) or the Flow Label (RFC 6437 §4: a receiver does not
    /// depend on it); the traffic class's ECN field is counted as `ipv6_input` counts it.
    #[inline(always)]
    pub(crate) fn tcp_v6_early_demux<const PROF: bool>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        l2_multicast: bool,
    ) -> bool {
        let Some(ip) = bytes.first_chunk::<{ ipv6::HEADER_LEN }>() else {
            return false;
        };
        if l2_multicast
            || self.tcp.early_demux_off
            || ip[0] >> 4 != 6
            || ip[6] != u8::from(IpProtocol::Tcp)
        {
            return false;
        }
        // Ethernet padding past Payload Length is left out, as `ipv6_input` trims it.
        let payload_len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
        if payload_len < tcp::HEADER_LEN || bytes.len() < ipv6::HEADER_LEN + payload_len {
            return false;
        }
        let src = Ipv6Addr::from(*ip[8..24].first_chunk::<16>().expect("40 bytes"));
        let dst = Ipv6Addr::from(*ip[24..40].first_chunk::<16>().expect("40 bytes"));
        // RFC 4291 §2.5.3, §2.7 and v4-mapped sources, as `ipv6_input` refuses them; a
        // multicast destination is not TCP's; the destination one of our addresses.
        if src.is_multicast()
            || src.is_loopback()
            || src.to_ipv4_mapped().is_some()
            || dst.is_multicast()
            || dst.is_loopback()
            || !self.ip6.is_ours(dst)
        {
            return false;
        }
        let seg = &bytes[ipv6::HEADER_LEN..ipv6::HEADER_LEN + payload_len];
        let Some(hdr) = fast_tcp_header(seg) else {
            return false;
        };
        if !self.l4_csum_trusted() && checksum::segment_sum_v6(ip, IpProtocol::Tcp, seg) != 0xffff {
            return false;
        }
        // The connection of the last segment if this one is its (its addresses compared
        // through their ids, see `intern6`), else the interned tuple and one lookup.
        let last = self.tcp.demux_last;
        let index = match self.tcp.conns.by_index(last) {
            Some(tcb)
                if tcb.tuple.local.port() == hdr.dst_port
                    && tcb.tuple.remote.port() == hdr.src_port
                    && self.tcp.intern6.names(&tcb.tuple, dst, src) =>
            {
                last
            }
            _ => {
                let local = SocketAddrV6::new(dst, hdr.dst_port, 0, 0);
                let remote = SocketAddrV6::new(src, hdr.src_port, 0, 0);
                let Some(tuple) = self.tcp.intern6.find(local, remote) else {
                    return false;
                };
                match self.early_demux_lookup(&tuple) {
                    Some(index) => index,
                    None => return false,
                }
            }
        };
        // Committed: count what `ipv6_input` counts for a delivered unicast packet.
        self.mib.inc(Counter::Ip6InReceives);
        self.mib.add(Counter::Ip6InOctets, bytes.len() as u64);
        self.mib.inc(match (ip[1] >> 4) & 3 {
            0 => Counter::Ip6InNoECTPkts,
            1 => Counter::Ip6InECT1Pkts,
            2 => Counter::Ip6InECT0Pkts,
            _ => Counter::Ip6InCEPkts,
        });
        self.mib.inc(Counter::Ip6InDelivers);
        self.early_demux_deliver::<PROF>(now, index, &hdr, seg);
        true
    }

    /// The slab index of `tuple`'s connection in the established table (Linux
    /// `__inet_lookup_established`), remembered for the next segment.
    #[inline]
    fn early_demux_lookup(&mut self, tuple: &FourTuple) -> Option<u32> {
        let hash = self.tcp.ehash.hash(tuple);
        let index = self.tcp.lookup(hash, tuple)?;
        self.tcp.demux_last = index;
        Some(index)
    }

    /// Hand `seg` (header `hdr`, checked) to the connection in slot `index`, counting what
    /// TCP input counts for it.
    #[inline(always)]
    fn early_demux_deliver<const PROF: bool>(
        &mut self,
        now: Instant,
        index: u32,
        hdr: &FastHeader,
        seg: &[u8],
    ) {
        let _stage = PROF.then(|| ustack_obs::profile::enter(ustack_obs::profile::Stage::Demux));
        self.mib.inc(Counter::TcpInSegs);
        self.tcp.early_demux += 1;
        // The connection's header prediction first (see `fast_path`); what it does not
        // predict walks RFC 9293's steps.
        let Some(h) = self.tcp_rcv_established::<PROF>(now, index, hdr, seg) else {
            return;
        };
        let repr = tcp::Repr {
            src_port: hdr.src_port,
            dst_port: hdr.dst_port,
            seq_number: SeqNumber(u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]])),
            ack_number: SeqNumber(u32::from_be_bytes([seg[8], seg[9], seg[10], seg[11]])),
            flags: hdr.flags,
            window_len: u16::from_be_bytes([seg[14], seg[15]]),
            urgent_pointer: u16::from_be_bytes([seg[18], seg[19]]),
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            sack_ranges: [None; tcp::MAX_SACK_BLOCKS],
            timestamp: hdr.timestamp,
            payload: &seg[hdr.header_len..],
        };
        self.conn_input(now, h, &repr);
    }
}
