//! IPv4 and IPv6 packets on the wire: building the remote end's packets (checksums filled
//! in) and reading the stack's.
//!
//! Kept independent of the stack under test: only the checksum arithmetic comes from
//! `ustack-wire` (RFC 1071), so a packet-format bug in the stack cannot hide itself here.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ustack_wire::IpProtocol;
use ustack_wire::checksum;

use crate::script::{Flags, TcpOpt};

/// A TCP segment with live (absolute) numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveTcp {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: u32,
    /// Flags.
    pub flags: Flags,
    /// Window field (unscaled, as on the wire).
    pub win: u16,
    /// Options, in order.
    pub options: Vec<TcpOpt>,
    /// Payload length.
    pub len: u32,
}

/// An IPv4 or IPv6 packet read from the stack (or built for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePacket {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The transport.
    pub body: LiveBody,
}

/// The transport part of a [`LivePacket`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveBody {
    /// TCP.
    Tcp(LiveTcp),
    /// UDP: ports and payload length.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Payload length.
        len: u32,
    },
    /// ICMP (over IPv4) or ICMPv6 (over IPv6): type and code.
    Icmp {
        /// Type.
        kind: u8,
        /// Code.
        code: u8,
    },
    /// Any other protocol (by number).
    Other(u8),
}

/// Why a packet could not be read.
pub type DecodeError = String;

/// Reads an IPv4 or IPv6 packet: header fields, the transport header, TCP options. An IPv6
/// packet whose next header is none of TCP, UDP and ICMPv6 (an extension header: the
/// kernel's MLD reports start with hop-by-hop options) is `Other`, not an error.
pub fn decode(pkt: &[u8]) -> Result<LivePacket, DecodeError> {
    match pkt.first().map(|b| b >> 4) {
        Some(6) => decode6(pkt),
        _ => decode4(pkt),
    }
}

fn decode4(pkt: &[u8]) -> Result<LivePacket, DecodeError> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return Err(format!("not an IP packet ({} bytes)", pkt.len()));
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if ihl < 20 || total < ihl || total > pkt.len() {
        return Err(format!(
            "bad IPv4 header (ihl {ihl}, total length {total}, {} bytes)",
            pkt.len()
        ));
    }
    let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
    let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
    let body = decode_l4(pkt[9], 1, &pkt[ihl..total])?;
    Ok(LivePacket {
        src: src.into(),
        dst: dst.into(),
        body,
    })
}

/// RFC 8200 section 3: a 40-byte header, the payload length after it.
fn decode6(pkt: &[u8]) -> Result<LivePacket, DecodeError> {
    if pkt.len() < 40 {
        return Err(format!("truncated IPv6 header ({} bytes)", pkt.len()));
    }
    let total = 40 + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
    if total > pkt.len() {
        return Err(format!(
            "bad IPv6 header (payload length {}, {} bytes)",
            total - 40,
            pkt.len()
        ));
    }
    let addr = |at: usize| {
        let mut o = [0u8; 16];
        o.copy_from_slice(&pkt[at..at + 16]);
        Ipv6Addr::from(o)
    };
    let body = decode_l4(pkt[6], 58, &pkt[40..total])?;
    Ok(LivePacket {
        src: addr(8).into(),
        dst: addr(24).into(),
        body,
    })
}

/// The transport `l4` of protocol `proto` (`icmp`: the family's ICMP protocol number).
fn decode_l4(proto: u8, icmp: u8, l4: &[u8]) -> Result<LiveBody, DecodeError> {
    Ok(match proto {
        6 => {
            if l4.len() < 20 {
                return Err("truncated TCP header".to_owned());
            }
            let off = usize::from(l4[12] >> 4) * 4;
            if off < 20 || off > l4.len() {
                return Err(format!("bad TCP data offset {off}"));
            }
            LiveBody::Tcp(LiveTcp {
                src_port: u16::from_be_bytes([l4[0], l4[1]]),
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
                seq: u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]),
                ack: u32::from_be_bytes([l4[8], l4[9], l4[10], l4[11]]),
                flags: Flags(l4[13]),
                win: u16::from_be_bytes([l4[14], l4[15]]),
                options: decode_options(&l4[20..off])?,
                len: (l4.len() - off) as u32,
            })
        }
        17 => {
            if l4.len() < 8 {
                return Err("truncated UDP header".to_owned());
            }
            LiveBody::Udp {
                src_port: u16::from_be_bytes([l4[0], l4[1]]),
                dst_port: u16::from_be_bytes([l4[2], l4[3]]),
                len: (l4.len() - 8) as u32,
            }
        }
        p if p == icmp => {
            if l4.len() < 4 {
                return Err("truncated ICMP header".to_owned());
            }
            LiveBody::Icmp {
                kind: l4[0],
                code: l4[1],
            }
        }
        p => LiveBody::Other(p),
    })
}

/// Reads TCP options (RFC 9293 section 3.1; RFC 7323; RFC 2018).
fn decode_options(mut b: &[u8]) -> Result<Vec<TcpOpt>, DecodeError> {
    let mut out = Vec::new();
    while let Some(&kind) = b.first() {
        match kind {
            0 => {
                out.push(TcpOpt::Eol);
                // Everything after EOL is padding.
                return Ok(out);
            }
            1 => {
                out.push(TcpOpt::Nop);
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        let len = usize::from(*b.get(1).ok_or("TCP option without a length")?);
        if len < 2 || len > b.len() {
            return Err(format!("TCP option {kind} with bad length {len}"));
        }
        let v = &b[2..len];
        out.push(match (kind, v.len()) {
            (2, 2) => TcpOpt::Mss(u16::from_be_bytes([v[0], v[1]])),
            (3, 1) => TcpOpt::Wscale(v[0]),
            (4, 0) => TcpOpt::SackOk,
            (5, n) if n % 8 == 0 && n > 0 => TcpOpt::Sack(
                v.chunks_exact(8)
                    .map(|c| {
                        (
                            u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                            u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                        )
                    })
                    .collect(),
            ),
            (8, 8) => TcpOpt::Ts {
                val: u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
                ecr: u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
            },
            _ => {
                return Err(format!(
                    "TCP option {kind} of length {len} is not understood"
                ));
            }
        });
        b = &b[len..];
    }
    Ok(out)
}

/// Encodes TCP options, padded with zeros (EOL) to a multiple of 4 bytes.
pub fn encode_options(opts: &[TcpOpt]) -> Vec<u8> {
    let mut b = Vec::new();
    for o in opts {
        match o {
            TcpOpt::Nop => b.push(1),
            TcpOpt::Eol => b.push(0),
            TcpOpt::Mss(v) => {
                b.extend_from_slice(&[2, 4]);
                b.extend_from_slice(&v.to_be_bytes());
            }
            TcpOpt::Wscale(v) => b.extend_from_slice(&[3, 3, *v]),
            TcpOpt::SackOk => b.extend_from_slice(&[4, 2]),
            TcpOpt::Sack(blocks) => {
                b.extend_from_slice(&[5, (2 + 8 * blocks.len()) as u8]);
                for (s, e) in blocks {
                    b.extend_from_slice(&s.to_be_bytes());
                    b.extend_from_slice(&e.to_be_bytes());
                }
            }
            TcpOpt::Ts { val, ecr } => {
                b.extend_from_slice(&[8, 10]);
                b.extend_from_slice(&val.to_be_bytes());
                b.extend_from_slice(&ecr.to_be_bytes());
            }
        }
    }
    while b.len() % 4 != 0 {
        b.push(0);
    }
    b
}

/// An IPv4 packet around `l4` (protocol `proto`), both checksums filled in (the
/// transport's over the pseudo-header, RFC 9293 section 3.1 / RFC 768 / RFC 792).
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, mut l4: Vec<u8>) -> Vec<u8> {
    let total = 20 + l4.len();
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]); // ID 0, DF, TTL 64
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let hc = checksum::checksum(&p);
    p[10..12].copy_from_slice(&hc.to_be_bytes());
    let at = match proto {
        6 => Some(16),
        17 => Some(6),
        1 => Some(2),
        _ => None,
    };
    if let Some(at) = at {
        let sum = if proto == 1 {
            checksum::checksum(&l4)
        } else {
            let ph = checksum::pseudo_header_v4(src, dst, IpProtocol::from(proto), l4.len() as u16);
            checksum::finish(checksum::combine(&[ph, checksum::data(&l4)]))
        };
        // A UDP checksum of zero means "none": it is sent as all ones (RFC 768).
        let sum = if proto == 17 && sum == 0 { 0xffff } else { sum };
        l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    p.extend_from_slice(&l4);
    p
}

/// An IPv6 packet around `l4` (next header `proto`: 6, 17 or 58, ICMPv6), the transport's
/// checksum filled in over the IPv6 pseudo-header (RFC 8200 section 8.1; mandatory for
/// UDP there, and for ICMPv6, RFC 4443 section 2.3). Hop limit 64, no flow label.
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, mut l4: Vec<u8>) -> Vec<u8> {
    let at = match proto {
        6 => Some(16),
        17 => Some(6),
        58 => Some(2),
        _ => None,
    };
    if let Some(at) = at {
        let ph = checksum::pseudo_header_v6(src, dst, IpProtocol::from(proto), l4.len() as u32);
        let sum = checksum::finish(checksum::combine(&[ph, checksum::data(&l4)]));
        let sum = if proto == 17 && sum == 0 { 0xffff } else { sum };
        l4[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    let mut p = Vec::with_capacity(40 + l4.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.extend_from_slice(&[proto, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&l4);
    p
}

/// A packet of `src`'s family around `l4`: [`ipv4`] or [`ipv6`]. `proto` 1 (ICMP) is
/// ICMPv6 (58) over IPv6. `src` and `dst` are of one family (a mixed pair is built over
/// IPv4 with `dst` as its IPv4-mapped address, if it is one, else unspecified).
pub fn ip(src: IpAddr, dst: IpAddr, proto: u8, l4: Vec<u8>) -> Vec<u8> {
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => a.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
    };
    match (src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6(s, d, if proto == 1 { 58 } else { proto }, l4),
        _ => ipv4(v4(src), v4(dst), proto, l4),
    }
}

/// The length of the IP header at the start of `quoted` (IPv4's IHL, or IPv6's 40 bytes).
fn ip_header_len(quoted: &[u8]) -> usize {
    match quoted.first() {
        Some(b) if b >> 4 == 6 => 40,
        Some(b) => usize::from(b & 0x0f) * 4,
        None => 20,
    }
}

/// A TCP header with `options` and `len` zero bytes of payload.
pub fn tcp(t: &LiveTcp) -> Vec<u8> {
    let opts = encode_options(&t.options);
    let off = 20 + opts.len();
    let mut h = Vec::with_capacity(off + t.len as usize);
    h.extend_from_slice(&t.src_port.to_be_bytes());
    h.extend_from_slice(&t.dst_port.to_be_bytes());
    h.extend_from_slice(&t.seq.to_be_bytes());
    h.extend_from_slice(&t.ack.to_be_bytes());
    h.push(((off / 4) as u8) << 4);
    h.push(t.flags.0);
    h.extend_from_slice(&t.win.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    h.extend_from_slice(&opts);
    h.resize(off + t.len as usize, 0);
    h
}

/// A UDP header and `len` zero bytes of payload.
pub fn udp(src_port: u16, dst_port: u16, len: u32) -> Vec<u8> {
    let total = 8 + len as usize;
    let mut h = Vec::with_capacity(total);
    h.extend_from_slice(&src_port.to_be_bytes());
    h.extend_from_slice(&dst_port.to_be_bytes());
    h.extend_from_slice(&(total as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.resize(total, 0);
    h
}

/// An ICMP or ICMPv6 error (`kind`, `code`, the 32 bits after them, e.g. the next-hop MTU
/// in the low 16 for fragmentation needed, RFC 1191, or the MTU of a packet too big, RFC
/// 4443 section 3.2) quoting `quoted` (an IP packet: its header and first 8 bytes of
/// transport, RFC 792, as packetdrill quotes over both families).
pub fn icmp_error(kind: u8, code: u8, rest: u32, quoted: &[u8]) -> Vec<u8> {
    let mut h = vec![kind, code, 0, 0];
    h.extend_from_slice(&rest.to_be_bytes());
    let ihl = ip_header_len(quoted);
    h.extend_from_slice(&quoted[..quoted.len().min(ihl + 8)]);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_segment_reads_back_with_valid_checksums() {
        let t = LiveTcp {
            src_port: 1,
            dst_port: 2,
            seq: 3,
            ack: 4,
            flags: Flags(Flags::SYN | Flags::ACK),
            win: 5,
            options: vec![
                TcpOpt::Mss(1460),
                TcpOpt::SackOk,
                TcpOpt::Ts { val: 7, ecr: 8 },
                TcpOpt::Nop,
                TcpOpt::Wscale(7),
            ],
            len: 3,
        };
        let (a, b) = (Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 168, 0, 1));
        let p = ipv4(a, b, 6, tcp(&t));
        assert_eq!(checksum::checksum(&p[..20]), 0, "IPv4 header checksum");
        let ph = checksum::pseudo_header_v4(a, b, IpProtocol::Tcp, (p.len() - 20) as u16);
        assert_eq!(
            checksum::finish(checksum::combine(&[ph, checksum::data(&p[20..])])),
            0,
            "TCP checksum"
        );
        let back = decode(&p).unwrap();
        assert_eq!(back.body, LiveBody::Tcp(t.clone()));

        let (a, b): (Ipv6Addr, Ipv6Addr) = (
            "2001:db8::1".parse().unwrap(),
            "fd3d:fa7b:d17d::1".parse().unwrap(),
        );
        let p = ip(a.into(), b.into(), 6, tcp(&t));
        assert_eq!(p[0] >> 4, 6, "an IPv6 packet");
        let ph = checksum::pseudo_header_v6(a, b, IpProtocol::Tcp, (p.len() - 40) as u32);
        assert_eq!(
            checksum::finish(checksum::combine(&[ph, checksum::data(&p[40..])])),
            0,
            "TCP checksum over the IPv6 pseudo-header"
        );
        let back = decode(&p).unwrap();
        assert_eq!((back.src, back.dst), (IpAddr::V6(a), IpAddr::V6(b)));
        assert_eq!(back.body, LiveBody::Tcp(t));
        // ICMP is ICMPv6 (58) over IPv6, its checksum over the pseudo-header too.
        let p = ip(a.into(), b.into(), 1, icmp_error(1, 4, 0, &p));
        assert_eq!(p[6], 58);
        let ph = checksum::pseudo_header_v6(a, b, IpProtocol::from(58), (p.len() - 40) as u32);
        assert_eq!(
            checksum::finish(checksum::combine(&[ph, checksum::data(&p[40..])])),
            0,
            "ICMPv6 checksum"
        );
        assert_eq!(
            p.len(),
            40 + 8 + 40 + 8,
            "the quote: IPv6 header and 8 bytes"
        );
        assert_eq!(
            decode(&p).unwrap().body,
            LiveBody::Icmp { kind: 1, code: 4 }
        );
    }
}
