//! IPv4 packets on the wire: building the remote end's packets (checksums filled in) and
//! reading the stack's.
//!
//! Kept independent of the stack under test: only the checksum arithmetic comes from
//! `ustack-wire` (RFC 1071), so a packet-format bug in the stack cannot hide itself here.

use core::net::Ipv4Addr;

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

/// An IPv4 packet read from the stack (or built for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePacket {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
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
    /// ICMP: type and code.
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

/// Reads an IPv4 packet: header fields, the transport header, TCP options.
pub fn decode(pkt: &[u8]) -> Result<LivePacket, DecodeError> {
    if pkt.len() < 20 || pkt[0] >> 4 != 4 {
        return Err(format!("not an IPv4 packet ({} bytes)", pkt.len()));
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
    let l4 = &pkt[ihl..total];
    let body = match pkt[9] {
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
        1 => {
            if l4.len() < 4 {
                return Err("truncated ICMP header".to_owned());
            }
            LiveBody::Icmp {
                kind: l4[0],
                code: l4[1],
            }
        }
        p => LiveBody::Other(p),
    };
    Ok(LivePacket { src, dst, body })
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

/// An ICMP error (`kind`, `code`, the 32 bits after them, e.g. the next-hop MTU in the
/// low 16 for fragmentation needed, RFC 1191) quoting `quoted` (an IP packet: its header
/// and first 8 bytes of transport, RFC 792).
pub fn icmp_error(kind: u8, code: u8, rest: u32, quoted: &[u8]) -> Vec<u8> {
    let mut h = vec![kind, code, 0, 0];
    h.extend_from_slice(&rest.to_be_bytes());
    let ihl = quoted.first().map_or(20, |b| usize::from(b & 0x0f) * 4);
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
        assert_eq!(back.body, LiveBody::Tcp(t));
    }
}
