//! GSO at the driver: consecutive MSS-sized TCP segments of one flow, handed to a device
//! in one transmit batch, merged into one super-segment that the device writes with a
//! virtio-net header asking the other end to segment it (`gso_type`, `gso_size`) and to
//! finish its checksum (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
//!
//! TCP itself never sees a super-segment: it builds MSS-sized segments as on any link,
//! so its sequence accounting, retransmission queue, SACK scoreboard, cwnd (in segments)
//! and RACK/TLP stay exactly as they are, and a retransmission is MSS-sized by
//! construction (Linux gets the same by splitting a TSO skb in `tcp_fragment`). The merge
//! is the inverse of Linux's GRO (`tcp_gro_receive` in `net/ipv4/tcp_offload.c`), with
//! its rules: the same addresses, ports, ACK number, window and options byte for byte;
//! each segment's sequence number right after the previous one's data; every segment but
//! the last exactly `gso_size` bytes of payload; flags ACK alone except on the last
//! segment, which may also carry PSH and FIN (as `tcp_gso_segment` puts PSH and FIN on
//! the last segment only); no SYN, RST, URG, ECE or CWR (no ECN bit in `gso_type`).
//!
//! The super-segment's headers are the first segment's with the lengths made whole (IPv4
//! total length and header checksum; IPv6 payload length), the last segment's flags, and
//! the TCP checksum field holding the pseudo-header sum for the whole length, not
//! complemented: Linux's `CHECKSUM_PARTIAL` convention (`__tcp_v4_send_check`), which the
//! header's `csum_start` (the TCP header) and `csum_offset` (16) point at. The kernel
//! takes such a packet from a TUN (`tun_get_user` -> `virtio_net_hdr_to_skb`) as one GSO
//! skb: delivered locally it is one large segment to its TCP (as if GRO had built it),
//! forwarded it is cut back into `gso_size` segments by `tcp_gso_segment`, which fixes the
//! checksum and IPv4 ID of each.

use ustack_wire::IpProtocol;
use ustack_wire::checksum;

/// `sizeof(struct virtio_net_hdr)`, the header size of a TUN queue with `IFF_VNET_HDR`.
pub const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
pub const VNET_F_NEEDS_CSUM: u8 = 1;
/// `VIRTIO_NET_HDR_F_DATA_VALID`: the kernel verified the packet's checksum.
pub const VNET_F_DATA_VALID: u8 = 2;
/// `VIRTIO_NET_HDR_GSO_NONE`.
pub const VNET_GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const VNET_GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_TCPV6`.
pub const VNET_GSO_TCPV6: u8 = 4;
/// The most segments merged into one super-segment.
pub const MAX_SEGS: usize = 64;
/// The largest super-segment: 65,535 bytes of IPv4 total length (Linux's
/// `GSO_MAX_SIZE` for IPv4; IPv6 without jumbograms has the same bound on its payload).
pub const MAX_LEN: usize = 65_535;
/// The longest headers: IPv4 with options (60) and TCP with options (60).
const MAX_HDR: usize = 120;

/// TCP flags (RFC 9293 §3.1).
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// One TCP segment as the merge sees it.
#[derive(Debug, Clone, Copy)]
struct Segment {
    v6: bool,
    /// IP header bytes (TCP starts here).
    ip_len: usize,
    /// IP and TCP header bytes (the payload starts here).
    hdr_len: usize,
    seq: u32,
    flags: u8,
    payload: usize,
}

impl Segment {
    /// `frame` as a TCP segment that may take part in a merge: IPv4 (not a fragment) or
    /// IPv6 (TCP straight after the fixed header), lengths consistent, some payload, and
    /// ACK with at most PSH and FIN besides.
    fn parse(frame: &[u8]) -> Option<Segment> {
        let (v6, ip_len, ip_total) = match frame.first()? >> 4 {
            4 => {
                let ihl = usize::from(frame[0] & 0x0f) * 4;
                if frame.len() < 20 || ihl < 20 || frame[9] != u8::from(IpProtocol::Tcp) {
                    return None;
                }
                // MF clear and offset zero: not a fragment.
                if u16::from_be_bytes([frame[6], frame[7]]) & 0x3fff != 0 {
                    return None;
                }
                (
                    false,
                    ihl,
                    usize::from(u16::from_be_bytes([frame[2], frame[3]])),
                )
            }
            6 => {
                if frame.len() < 40 || frame[6] != u8::from(IpProtocol::Tcp) {
                    return None;
                }
                let payload = usize::from(u16::from_be_bytes([frame[4], frame[5]]));
                (true, 40, 40 + payload)
            }
            _ => return None,
        };
        if ip_total != frame.len() || frame.len() < ip_len + 20 {
            return None;
        }
        let tcp = &frame[ip_len..];
        let thl = usize::from(tcp[12] >> 4) * 4;
        let flags = tcp[13];
        if thl < 20 || ip_len + thl >= frame.len() || flags & !(FIN | PSH) != ACK {
            return None;
        }
        Some(Segment {
            v6,
            ip_len,
            hdr_len: ip_len + thl,
            seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
            flags,
            payload: frame.len() - ip_len - thl,
        })
    }

    /// Whether `b` (this segment's `frame`'s follower `next`) is of the same flow with
    /// the same headers but for lengths, IDs, checksums, sequence number and flags.
    fn same_flow(&self, frame: &[u8], b: &Segment, next: &[u8]) -> bool {
        if b.v6 != self.v6 || b.ip_len != self.ip_len || b.hdr_len != self.hdr_len {
            return false;
        }
        let ip_same = if self.v6 {
            // Version, class, flow label; next header, hop limit; addresses.
            frame[..4] == next[..4] && frame[6..40] == next[6..40]
        } else {
            // Version, IHL, TOS; DF; TTL, protocol; addresses; options.
            frame[..2] == next[..2]
                && frame[6] & 0x40 == next[6] & 0x40
                && frame[8..10] == next[8..10]
                && frame[12..self.ip_len] == next[12..self.ip_len]
        };
        let (t, u) = (&frame[self.ip_len..], &next[self.ip_len..]);
        let thl = self.hdr_len - self.ip_len;
        // Ports; ACK number; data offset; window; urgent pointer; options.
        ip_same
            && t[..4] == u[..4]
            && t[8..13] == u[8..13]
            && t[14..16] == u[14..16]
            && t[18..thl] == u[18..thl]
    }
}

/// A super-segment to write: how many of the frames it takes, and what goes in front of
/// their payloads.
#[derive(Debug, Clone)]
pub struct Super {
    /// Segments it stands for (at least 2): the frames merged, or for a [`tso_frame`]
    /// the `gso_size` pieces the other end cuts it into.
    pub segs: usize,
    /// The virtio-net header.
    pub vnet: [u8; VNET_HDR_LEN],
    headers: [u8; MAX_HDR],
    hdr_len: usize,
    /// Bytes of the whole IP packet.
    pub len: usize,
}

impl Super {
    /// The super-segment's IP and TCP headers; each merged frame's payload follows, from
    /// byte [`hdr_len`](Self::hdr_len) of the frame.
    pub fn headers(&self) -> &[u8] {
        &self.headers[..self.hdr_len]
    }

    /// Where each merged frame's payload starts.
    pub fn hdr_len(&self) -> usize {
        self.hdr_len
    }
}

/// The super-segment the first frames of `frames` make, each no longer than `mtu`:
/// `None` when fewer than two merge (send `frames[0]` as it is).
pub fn coalesce(frames: &[&[u8]], mtu: usize) -> Option<Super> {
    let first_frame = *frames.first()?;
    if first_frame.len() > mtu {
        return None;
    }
    let first = Segment::parse(first_frame)?;
    let mss = first.payload;
    let (mut segs, mut len, mut next_seq, mut last) = (
        1,
        first_frame.len(),
        first.seq.wrapping_add(mss as u32),
        first,
    );
    // A segment with PSH or FIN ends a merge (as it flushes GRO).
    let ends = |s: &Segment| s.flags != ACK || s.payload < mss;
    if ends(&first) {
        return None;
    }
    for &frame in &frames[1..frames.len().min(MAX_SEGS)] {
        let Some(seg) = Segment::parse(frame) else {
            break;
        };
        if frame.len() > mtu
            || seg.seq != next_seq
            || seg.payload > mss
            || len + seg.payload > MAX_LEN
            || !first.same_flow(first_frame, &seg, frame)
        {
            break;
        }
        segs += 1;
        len += seg.payload;
        next_seq = next_seq.wrapping_add(seg.payload as u32);
        last = seg;
        if ends(&seg) {
            break;
        }
    }
    if segs < 2 {
        return None;
    }
    Some(Super::build(
        first_frame,
        &first,
        len,
        last.flags,
        mss,
        segs,
    ))
}

/// A super-segment TCP built itself (TSO inside TCP, Linux `tcp_tso_autosize` /
/// `tcp_write_xmit`): one TCP/IPv4 or TCP/IPv6 `frame` longer than `mtu`, its headers
/// those of the first of the MTU-sized segments it stands for, its lengths whole. The
/// segment size (`gso_size`) is what fills the MTU under these headers, `mtu` less the
/// headers, the contract with the stack's TSO (`Stack::set_gso_max_size`): TCP
/// builds such a frame only from full segments of that size. `None` for anything else
/// (not TCP, flags other than ACK/PSH/FIN, no more payload than one segment): the caller
/// refuses it as too big.
pub fn tso_frame(frame: &[u8], mtu: usize) -> Option<Super> {
    if frame.len() <= mtu || frame.len() > MAX_LEN {
        return None;
    }
    let seg = Segment::parse(frame)?;
    let gso_size = mtu.checked_sub(seg.hdr_len).filter(|&s| s > 0)?;
    if seg.payload <= gso_size {
        return None;
    }
    Some(Super::build(
        frame,
        &seg,
        frame.len(),
        seg.flags,
        gso_size,
        seg.payload.div_ceil(gso_size),
    ))
}

impl Super {
    /// The super-segment of `segs` segments of `gso_size` bytes of payload whose first
    /// frame is `first_frame` (parsed as `first`): `len` bytes of IP packet in all, the
    /// last segment's `flags`. Its headers are the first frame's with the lengths made
    /// whole, and the TCP checksum field the pseudo-header sum (`CHECKSUM_PARTIAL`).
    fn build(
        first_frame: &[u8],
        first: &Segment,
        len: usize,
        flags: u8,
        gso_size: usize,
        segs: usize,
    ) -> Super {
        let hdr_len = first.hdr_len;
        let mut headers = [0u8; MAX_HDR];
        headers[..hdr_len].copy_from_slice(&first_frame[..hdr_len]);
        let tcp_len = len - first.ip_len;
        let (ip, tcp) = headers.split_at_mut(first.ip_len);
        let pseudo = if first.v6 {
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            let addr =
                |b: &[u8]| core::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default());
            checksum::pseudo_header_v6(
                addr(&ip[8..24]),
                addr(&ip[24..40]),
                IpProtocol::Tcp,
                tcp_len as u32,
            )
        } else {
            ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            ip[10..12].fill(0);
            let sum = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            let addr = |b: &[u8]| core::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            checksum::pseudo_header_v4(
                addr(&ip[12..16]),
                addr(&ip[16..20]),
                IpProtocol::Tcp,
                tcp_len as u16,
            )
        };
        tcp[13] = flags;
        tcp[16..18].copy_from_slice(&pseudo.to_be_bytes());
        let mut vnet = [0u8; VNET_HDR_LEN];
        vnet[0] = VNET_F_NEEDS_CSUM;
        vnet[1] = if first.v6 {
            VNET_GSO_TCPV6
        } else {
            VNET_GSO_TCPV4
        };
        vnet[2..4].copy_from_slice(&(hdr_len as u16).to_le_bytes());
        vnet[4..6].copy_from_slice(&(gso_size as u16).to_le_bytes());
        vnet[6..8].copy_from_slice(&(first.ip_len as u16).to_le_bytes());
        vnet[8..10].copy_from_slice(&16u16.to_le_bytes());
        Super {
            segs,
            vnet,
            headers,
            hdr_len,
            len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1448;

    /// An IPv4 TCP segment with timestamps: `payload` bytes of `fill` at `seq`, `flags`,
    /// checksums right.
    fn segment(seq: u32, payload: usize, flags: u8, id: u16) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 32 + payload];
        let len = p.len() as u16;
        p[0] = 0x45;
        p[2..4].copy_from_slice(&len.to_be_bytes());
        p[4..6].copy_from_slice(&id.to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = 6;
        p[12..16].copy_from_slice(&[192, 0, 2, 2]);
        p[16..20].copy_from_slice(&[192, 0, 2, 1]);
        let sum = checksum::checksum(&p[..20]);
        p[10..12].copy_from_slice(&sum.to_be_bytes());
        let t = &mut p[20..];
        t[..4].copy_from_slice(&[0x13, 0x89, 0xc0, 0x00]);
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&7u32.to_be_bytes());
        t[12] = 8 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&512u16.to_be_bytes());
        t[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3]);
        for (i, b) in t[32..].iter_mut().enumerate() {
            *b = (seq as usize + i) as u8;
        }
        let tcp_len = t.len();
        let ph = checksum::pseudo_header_v4(
            [192, 0, 2, 2].into(),
            [192, 0, 2, 1].into(),
            IpProtocol::Tcp,
            tcp_len as u16,
        );
        let sum = checksum::finish(checksum::combine(&[ph, checksum::data(t)]));
        t[16..18].copy_from_slice(&sum.to_be_bytes());
        p
    }

    fn run(n: usize, last: usize, last_flags: u8) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let seq = 1000 + (i * MSS) as u32;
                if i + 1 == n {
                    segment(seq, last, last_flags, i as u16)
                } else {
                    segment(seq, MSS, ACK, i as u16)
                }
            })
            .collect()
    }

    fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
        v.iter().map(Vec::as_slice).collect()
    }

    /// What the kernel does with the super-segment delivered locally: the packet is
    /// the headers and the payloads; completing the checksum gives a valid segment.
    fn assemble(s: &Super, frames: &[&[u8]]) -> Vec<u8> {
        let mut p = s.headers().to_vec();
        for f in &frames[..s.segs] {
            p.extend_from_slice(&f[s.hdr_len()..]);
        }
        p
    }

    #[test]
    fn a_run_of_full_segments_becomes_one_super_segment_a_kernel_accepts() {
        let frames = run(10, 700, ACK | PSH);
        let s = coalesce(&refs(&frames), 1500).expect("merged");
        assert_eq!(s.segs, 10);
        assert_eq!(s.len, 52 + 9 * MSS + 700);
        assert_eq!(s.vnet[0], VNET_F_NEEDS_CSUM);
        assert_eq!(s.vnet[1], VNET_GSO_TCPV4);
        assert_eq!(u16::from_le_bytes([s.vnet[2], s.vnet[3]]), 52, "hdr_len");
        assert_eq!(u16::from_le_bytes([s.vnet[4], s.vnet[5]]) as usize, MSS);
        assert_eq!(u16::from_le_bytes([s.vnet[6], s.vnet[7]]), 20, "csum_start");
        assert_eq!(
            u16::from_le_bytes([s.vnet[8], s.vnet[9]]),
            16,
            "csum_offset"
        );
        let mut p = assemble(&s, &refs(&frames));
        assert_eq!(p.len(), s.len);
        // IPv4: total length whole, header checksum right.
        assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
        assert_eq!(checksum::data(&p[..20]), 0xffff);
        // The last segment's PSH is on the super-segment.
        assert_eq!(p[33], ACK | PSH);
        // Complete the partial checksum as the kernel would (skb_checksum_help): the
        // segment then verifies against the pseudo-header.
        let sum = checksum::checksum(&p[20..]);
        p[36..38].copy_from_slice(&sum.to_be_bytes());
        let ph = checksum::pseudo_header_v4(
            [192, 0, 2, 2].into(),
            [192, 0, 2, 1].into(),
            IpProtocol::Tcp,
            (p.len() - 20) as u16,
        );
        assert_eq!(checksum::combine(&[ph, checksum::data(&p[20..])]), 0xffff);
        // The payload is every segment's, in order.
        let payload: Vec<u8> = frames.iter().flat_map(|f| f[52..].to_vec()).collect();
        assert_eq!(&p[52..], &payload[..]);
    }

    #[test]
    fn a_super_segment_from_tcp_gets_the_header_a_merge_would() {
        // Ten full segments, the last pushed: TCP's one frame (the first segment's
        // headers, the whole length, the last one's flags) and the driver's merge of the
        // ten frames ask the kernel for the same thing.
        let frames = run(10, MSS, ACK | PSH);
        let merged = coalesce(&refs(&frames), 1500).expect("merged");
        let mut one = frames[0][..52].to_vec();
        for f in &frames {
            one.extend_from_slice(&f[52..]);
        }
        let len = one.len() as u16;
        one[2..4].copy_from_slice(&len.to_be_bytes());
        one[33] = ACK | PSH;
        let tso = tso_frame(&one, 1500).expect("a super-segment");
        assert_eq!(tso.segs, 10);
        assert_eq!(
            tso.vnet, merged.vnet,
            "gso_size from the MTU less the headers"
        );
        assert_eq!(tso.headers(), merged.headers());
        assert_eq!(tso.len, merged.len);
        // Not larger than the MTU, not TCP, or one segment's worth: not a super-segment.
        assert!(tso_frame(&frames[0], 1500).is_none());
        let mut udp = one.clone();
        udp[9] = 17;
        assert!(tso_frame(&udp, 1500).is_none());
        assert!(tso_frame(&one[..1600], 1600).is_none());
        for n in 0..60 {
            assert!(tso_frame(&one[..n], 10).is_none());
        }
    }

    #[test]
    fn merges_stop_where_the_rules_say() {
        // A lone segment, or a pushed first one: sent as it is.
        assert!(coalesce(&refs(&run(1, MSS, ACK)), 1500).is_none());
        assert!(
            coalesce(
                &refs(&[segment(1, MSS, ACK | PSH, 0), segment(1449, 100, ACK, 1)]),
                1500
            )
            .is_none()
        );
        // A gap in sequence numbers ends the run.
        let mut frames = run(5, MSS, ACK);
        frames[3] = segment(1000 + 3 * MSS as u32 + 1, MSS, ACK, 3);
        assert_eq!(coalesce(&refs(&frames), 1500).map(|s| s.segs), Some(3));
        // The first segment's payload is the segment size, whatever it is.
        let s = coalesce(
            &refs(&[segment(1, 100, ACK, 0), segment(101, 100, ACK, 1)]),
            1500,
        );
        assert_eq!(s.map(|s| (s.segs, s.vnet[4])), Some((2, 100)));
        // A short segment is the last one.
        let mut frames = run(3, 100, ACK);
        frames.push(segment(1000 + 2 * MSS as u32 + 100, MSS, ACK, 9));
        assert_eq!(coalesce(&refs(&frames), 1500).map(|s| s.segs), Some(3));
        // Another ACK number, window or timestamp: another segment.
        for (at, v) in [(28, 8u8), (35, 1), (48, 4)] {
            let mut frames = run(4, MSS, ACK);
            frames[2][at] ^= v;
            assert_eq!(
                coalesce(&refs(&frames), 1500).map(|s| s.segs),
                Some(2),
                "byte {at}"
            );
        }
        // SYN, RST, URG, ECE, CWR never merge.
        for flag in [0x02, 0x04, 0x20, 0x40, 0x80] {
            let mut frames = run(3, MSS, ACK);
            frames[1][33] |= flag;
            assert!(coalesce(&refs(&frames), 1500).is_none(), "flag {flag:#x}");
        }
        // A FIN ends the run and is carried.
        let frames = run(4, 10, ACK | FIN);
        let s = coalesce(&refs(&frames), 1500).expect("merged");
        assert_eq!((s.segs, s.headers()[33]), (4, ACK | FIN));
        // Never more than 65,535 bytes or MAX_SEGS segments.
        let frames = run(60, MSS, ACK);
        let s = coalesce(&refs(&frames), 1500).expect("merged");
        assert!(
            s.len <= MAX_LEN && s.segs == (MAX_LEN - 52) / MSS,
            "{}",
            s.segs
        );
        let small: Vec<Vec<u8>> = (0..100)
            .map(|i| segment(1 + i * 10, 10, ACK, i as u16))
            .collect();
        assert_eq!(
            coalesce(&refs(&small), 1500).map(|s| s.segs),
            Some(MAX_SEGS)
        );
        // Larger than the MTU: not ours to merge.
        assert!(coalesce(&refs(&run(3, MSS, ACK)), 1000).is_none());
        // Not TCP, a fragment, a truncated packet: sent as they are, no panic.
        let mut frames = run(3, MSS, ACK);
        frames[0][9] = 17;
        assert!(coalesce(&refs(&frames), 1500).is_none());
        let mut frames = run(3, MSS, ACK);
        frames[0][6] |= 0x20;
        assert!(coalesce(&refs(&frames), 1500).is_none());
        for n in 0..60 {
            let f = &segment(1, MSS, ACK, 0)[..n];
            assert!(coalesce(&[f, f], 1500).is_none());
        }
        assert!(coalesce(&[], 1500).is_none());
    }
}
