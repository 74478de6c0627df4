//! Neighbor Discovery messages ([RFC 4861](https://www.rfc-editor.org/rfc/rfc4861)): Neighbor
//! Solicitation (§4.3) and Neighbor Advertisement (§4.4) with their link-layer address
//! options (§4.6.1), for Ethernet links. Router Solicitation/Advertisement and Redirect are
//! not parsed (a host with static addresses ignores them).
//!
//! Reading list: RFC 4861 §4.3, §4.4, §4.6 (options: "Length ... in units of 8 octets. The
//! value 0 is invalid"), §7.1.1 and §7.1.2 (validity checks; the ones about the IP header
//! are the stack's), RFC 4291 §2.7.1 (solicited-node multicast address), RFC 2464 §7
//! (the Ethernet link-layer address option). Linux: `net/ipv6/ndisc.c`
//! (`ndisc_recv_ns`, `ndisc_recv_na`, `ndisc_parse_options`).
//!
//! Call graph: the ICMPv6 layer sees type 135 or 136 and hands the whole ICMPv6 message to
//! [`Repr::parse`] (checksum already verified); to send, fill a [`Repr`], allocate
//! [`Repr::buffer_len`] bytes and call [`Repr::emit`], which also fills the checksum.

use core::net::Ipv6Addr;

use crate::icmpv6::{Message, Packet};
use crate::{Error, EthernetAddress, Result};

/// Bytes of a Neighbor Solicitation or Advertisement before its options: the ICMPv6
/// header (type, code, checksum, reserved or flags) and the 16-byte target address.
pub const BASE_LEN: usize = 24;
/// A link-layer address option for Ethernet: type, length (1, in units of 8), 6-byte MAC.
pub const LLADDR_OPT_LEN: usize = 8;

/// Option types (RFC 4861 §4.6).
mod opt {
    pub const SOURCE_LLADDR: u8 = 1;
    pub const TARGET_LLADDR: u8 = 2;
}

/// Neighbor Advertisement flags (RFC 4861 §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct NaFlags {
    /// R: the sender is a router.
    pub router: bool,
    /// S: sent in response to a Neighbor Solicitation.
    pub solicited: bool,
    /// O: override an existing cache entry.
    pub override_: bool,
}

/// A parsed Neighbor Solicitation or Advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr {
    /// Neighbor Solicitation (type 135).
    Solicit {
        /// The address whose link-layer address is sought.
        target: Ipv6Addr,
        /// Source Link-Layer Address option, if present.
        source_lladdr: Option<EthernetAddress>,
    },
    /// Neighbor Advertisement (type 136).
    Advert {
        /// R, S, O flags.
        flags: NaFlags,
        /// The address advertised.
        target: Ipv6Addr,
        /// Target Link-Layer Address option, if present.
        target_lladdr: Option<EthernetAddress>,
    },
}

impl Repr {
    /// Parse an NS or NA message (the whole ICMPv6 message, checksum verified by the
    /// caller).
    ///
    /// - [`Error::Truncated`]: shorter than 24 bytes.
    /// - [`Error::Malformed`]: code not 0 (§7.1.1: "ICMP Code is 0"), a multicast target
    ///   (§7.1.1, §7.1.2), an option of length 0 or running past the end (§4.6), a
    ///   link-layer address option that is not 8 bytes (not Ethernet).
    /// - [`Error::Unsupported`]: another ICMPv6 type.
    ///
    /// Unknown options are skipped (§4.6: "Receivers MUST silently ignore any options they
    /// do not recognize").
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        let b = packet.as_ref();
        if b.len() < BASE_LEN {
            return Err(Error::Truncated);
        }
        let ty = packet.msg_type();
        if !matches!(ty, Message::NeighborSolicit | Message::NeighborAdvert) {
            return Err(Error::Unsupported);
        }
        if packet.msg_code() != 0 {
            return Err(Error::Malformed);
        }
        let mut t = [0u8; 16];
        t.copy_from_slice(&b[8..24]);
        let target = Ipv6Addr::from(t);
        if target.is_multicast() {
            return Err(Error::Malformed);
        }
        let wanted = match ty {
            Message::NeighborSolicit => opt::SOURCE_LLADDR,
            _ => opt::TARGET_LLADDR,
        };
        let mut lladdr = None;
        let mut rest = &b[BASE_LEN..];
        while !rest.is_empty() {
            if rest.len() < 2 {
                return Err(Error::Malformed);
            }
            let len = usize::from(rest[1]) * 8;
            if len == 0 || len > rest.len() {
                return Err(Error::Malformed);
            }
            if rest[0] == wanted {
                if len != LLADDR_OPT_LEN {
                    return Err(Error::Malformed);
                }
                lladdr = Some(EthernetAddress::from_bytes(&rest[2..8]));
            }
            rest = &rest[len..];
        }
        Ok(match ty {
            Message::NeighborSolicit => Repr::Solicit {
                target,
                source_lladdr: lladdr,
            },
            _ => {
                let f = b[4];
                Repr::Advert {
                    flags: NaFlags {
                        router: f & 0x80 != 0,
                        solicited: f & 0x40 != 0,
                        override_: f & 0x20 != 0,
                    },
                    target,
                    target_lladdr: lladdr,
                }
            }
        })
    }

    fn lladdr(&self) -> Option<EthernetAddress> {
        match *self {
            Repr::Solicit { source_lladdr, .. } => source_lladdr,
            Repr::Advert { target_lladdr, .. } => target_lladdr,
        }
    }

    /// Bytes [`Repr::emit`] writes: 24, plus 8 with a link-layer address option.
    pub fn buffer_len(&self) -> usize {
        BASE_LEN
            + if self.lladdr().is_some() {
                LLADDR_OPT_LEN
            } else {
                0
            }
    }

    /// Write the message into `buf` (exactly [`Repr::buffer_len`] bytes) with its checksum
    /// over the `src`/`dst` pseudo-header.
    ///
    /// # Panics
    /// If `buf` is shorter than [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        buf.fill(0);
        let (ty, target, opt_type) = match *self {
            Repr::Solicit { target, .. } => (Message::NeighborSolicit, target, opt::SOURCE_LLADDR),
            Repr::Advert { flags, target, .. } => {
                buf[4] = (u8::from(flags.router) << 7)
                    | (u8::from(flags.solicited) << 6)
                    | (u8::from(flags.override_) << 5);
                (Message::NeighborAdvert, target, opt::TARGET_LLADDR)
            }
        };
        buf[0] = ty.into();
        buf[8..24].copy_from_slice(&target.octets());
        if let Some(mac) = self.lladdr() {
            buf[24] = opt_type;
            buf[25] = 1;
            buf[26..32].copy_from_slice(mac.as_bytes());
        }
        Packet::new_unchecked(buf).fill_checksum(src, dst);
    }
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1):
/// `ff02::1:ff00:0/104` with the low 24 bits of `addr`.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet address an IPv6 multicast address maps to (RFC 2464 §7): `33:33` and the
/// address's low 32 bits.
pub fn multicast_mac(addr: Ipv6Addr) -> EthernetAddress {
    let o = addr.octets();
    EthernetAddress([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// The link-local address of an Ethernet interface (RFC 4291 §2.5.1 and Appendix A, RFC
/// 2464 §4-§5): `fe80::/64` with the modified EUI-64 interface identifier, the MAC with
/// `ff:fe` inserted in the middle and the universal/local bit inverted.
pub fn link_local_from_mac(mac: EthernetAddress) -> Ipv6Addr {
    let m = mac.0;
    let mut o = [0u8; 16];
    o[0] = 0xfe;
    o[1] = 0x80;
    o[8] = m[0] ^ 0x02;
    o[9] = m[1];
    o[10] = m[2];
    o[11] = 0xff;
    o[12] = 0xfe;
    o[13] = m[3];
    o[14] = m[4];
    o[15] = m[5];
    Ipv6Addr::from(o)
}
