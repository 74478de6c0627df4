//! Neighbor Discovery messages ([RFC 4861](https://www.rfc-editor.org/rfc/rfc4861)): Neighbor
//! Solicitation (§4.3) and Neighbor Advertisement (§4.4) with their link-layer address
//! options (§4.6.1), for Ethernet links; Router Solicitation (§4.1, [`RouterSolicit`]) and
//! Router Advertisement (§4.2, [`RouterAdvert`]) with the Prefix Information (§4.6.2,
//! [`PrefixInfo`]) and MTU (§4.6.4) options, for stateless address autoconfiguration.
//! Redirect is not parsed.
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
    pub const PREFIX_INFO: u8 = 3;
    pub const MTU: u8 = 5;
}

/// Bytes of a Router Solicitation before its options (RFC 4861 §4.1): the ICMPv6 header
/// with its 4 reserved bytes.
pub const RS_BASE_LEN: usize = 8;
/// Bytes of a Router Advertisement before its options (§4.2): the ICMPv6 header (Cur Hop
/// Limit, M and O flags, Router Lifetime), Reachable Time and Retrans Timer.
pub const RA_BASE_LEN: usize = 16;
/// A Prefix Information option (§4.6.2): Length 4, 32 bytes.
pub const PREFIX_OPT_LEN: usize = 32;
/// An MTU option (§4.6.4): Length 1, 8 bytes.
pub const MTU_OPT_LEN: usize = 8;
/// A lifetime of all ones: infinity (RFC 4861 §4.6.2).
pub const INFINITE_LIFETIME: u32 = u32::MAX;

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

/// The options of an NDP message after its fixed part, checked as RFC 4861 §4.6 asks
/// ("Length ... The value 0 is invalid. Nodes MUST silently discard an ND packet that
/// contains an option with length zero"; an option running past the end is invalid too,
/// Linux `ndisc_parse_options`): each as (type, whole option bytes).
fn options(mut rest: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    core::iter::from_fn(move || {
        if rest.len() < 2 {
            return None;
        }
        let len = usize::from(rest[1]) * 8;
        if len == 0 || len > rest.len() {
            return None;
        }
        let (o, tail) = rest.split_at(len);
        rest = tail;
        Some((o[0], o))
    })
}

/// Whether `rest` is a well-formed option list (see [`options`]).
fn options_valid(rest: &[u8]) -> bool {
    options(rest).map(|(_, o)| o.len()).sum::<usize>() == rest.len()
}

/// A Router Solicitation (RFC 4861 §4.1), as a host sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouterSolicit {
    /// Source Link-Layer Address option: "MUST NOT be included when the source IP address
    /// is the unspecified address. Otherwise, it SHOULD be included on link layers that
    /// have addresses."
    pub source_lladdr: Option<EthernetAddress>,
}

impl RouterSolicit {
    /// Bytes [`RouterSolicit::emit`] writes: 8, plus 8 with the link-layer address.
    pub fn buffer_len(&self) -> usize {
        RS_BASE_LEN + self.source_lladdr.map_or(0, |_| LLADDR_OPT_LEN)
    }

    /// Write the message (exactly [`RouterSolicit::buffer_len`] bytes) with its checksum.
    ///
    /// # Panics
    /// If `buf` is shorter than [`RouterSolicit::buffer_len`].
    pub fn emit(&self, buf: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
        let buf = &mut buf[..self.buffer_len()];
        buf.fill(0);
        buf[0] = Message::RouterSolicit.into();
        if let Some(mac) = self.source_lladdr {
            buf[8] = opt::SOURCE_LLADDR;
            buf[9] = 1;
            buf[10..16].copy_from_slice(mac.as_bytes());
        }
        Packet::new_unchecked(buf).fill_checksum(src, dst);
    }
}

/// A Prefix Information option (RFC 4861 §4.6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixInfo {
    pub prefix_len: u8,
    /// L: the prefix is on-link.
    pub on_link: bool,
    /// A: the prefix may be used for stateless address autoconfiguration (RFC 4862).
    pub autonomous: bool,
    /// Seconds; [`INFINITE_LIFETIME`] is infinity.
    pub valid_lifetime: u32,
    /// Seconds; [`INFINITE_LIFETIME`] is infinity.
    pub preferred_lifetime: u32,
    /// The prefix (bits past `prefix_len` are the sender's business: "The bits in the
    /// prefix after the prefix length are reserved and MUST be initialized to zero by
    /// the sender and ignored by the receiver").
    pub prefix: Ipv6Addr,
}

impl PrefixInfo {
    fn parse(o: &[u8]) -> PrefixInfo {
        let u32_at = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&o[16..32]);
        PrefixInfo {
            prefix_len: o[2],
            on_link: o[3] & 0x80 != 0,
            autonomous: o[3] & 0x40 != 0,
            valid_lifetime: u32_at(4),
            preferred_lifetime: u32_at(8),
            prefix: Ipv6Addr::from(prefix),
        }
    }

    fn emit(&self, o: &mut [u8]) {
        o[0] = opt::PREFIX_INFO;
        o[1] = (PREFIX_OPT_LEN / 8) as u8;
        o[2] = self.prefix_len;
        o[3] = (u8::from(self.on_link) << 7) | (u8::from(self.autonomous) << 6);
        o[4..8].copy_from_slice(&self.valid_lifetime.to_be_bytes());
        o[8..12].copy_from_slice(&self.preferred_lifetime.to_be_bytes());
        o[12..16].fill(0);
        o[16..32].copy_from_slice(&self.prefix.octets());
    }
}

/// The Prefix Information options of a [`RouterAdvert`]: read from a received message's
/// options, or given by a sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prefixes<'a> {
    /// The option bytes of a parsed message (checked by [`RouterAdvert::parse`]).
    Wire(&'a [u8]),
    /// The prefixes to send.
    List(&'a [PrefixInfo]),
}

impl<'a> Prefixes<'a> {
    /// Every prefix, in order.
    pub fn iter(&self) -> impl Iterator<Item = PrefixInfo> + 'a {
        let (wire, list): (&'a [u8], &'a [PrefixInfo]) = match *self {
            Prefixes::Wire(w) => (w, &[]),
            Prefixes::List(l) => (&[], l),
        };
        options(wire)
            .filter(|(t, _)| *t == opt::PREFIX_INFO)
            .map(|(_, o)| PrefixInfo::parse(o))
            .chain(list.iter().copied())
    }
}

/// A Router Advertisement (RFC 4861 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouterAdvert<'a> {
    /// Hop limit the router suggests (0: unspecified).
    pub cur_hop_limit: u8,
    /// M: addresses are available by DHCPv6.
    pub managed: bool,
    /// O: other configuration is available by DHCPv6.
    pub other: bool,
    /// Seconds the router is a default router for (0: it is not one).
    pub router_lifetime: u16,
    /// Milliseconds (0: unspecified).
    pub reachable_time: u32,
    /// Milliseconds (0: unspecified).
    pub retrans_timer: u32,
    /// Source Link-Layer Address option.
    pub source_lladdr: Option<EthernetAddress>,
    /// MTU option.
    pub mtu: Option<u32>,
    pub prefixes: Prefixes<'a>,
}

impl<'a> RouterAdvert<'a> {
    /// Parse a Router Advertisement (the whole ICMPv6 message, checksum verified by the
    /// caller; the IP-level checks of §6.1.2, hop limit 255 and a link-local source, are
    /// the stack's).
    ///
    /// - [`Error::Truncated`]: shorter than 16 bytes (§6.1.2: "ICMP length ... is 16 or
    ///   more octets").
    /// - [`Error::Malformed`]: code not 0; an option of length 0 or running past the end
    ///   (§6.1.2: "All included options have a length that is greater than zero"); a
    ///   link-layer address option not of 8 bytes (not Ethernet), an MTU option not of 8,
    ///   a Prefix Information option not of 32 (Linux `addrconf_prefix_rcv`: "prefix option
    ///   too short").
    /// - [`Error::Unsupported`]: another ICMPv6 type.
    ///
    /// Unknown options are skipped (§4.6).
    pub fn parse(msg: &'a [u8]) -> Result<RouterAdvert<'a>> {
        if msg.len() < RA_BASE_LEN {
            return Err(Error::Truncated);
        }
        if Message::from(msg[0]) != Message::RouterAdvert {
            return Err(Error::Unsupported);
        }
        let rest = &msg[RA_BASE_LEN..];
        if msg[1] != 0 || !options_valid(rest) {
            return Err(Error::Malformed);
        }
        let (mut source_lladdr, mut mtu) = (None, None);
        for (ty, o) in options(rest) {
            match ty {
                opt::SOURCE_LLADDR if o.len() == LLADDR_OPT_LEN => {
                    source_lladdr = Some(EthernetAddress::from_bytes(&o[2..8]));
                }
                opt::MTU if o.len() == MTU_OPT_LEN => {
                    mtu = Some(u32::from_be_bytes([o[4], o[5], o[6], o[7]]));
                }
                opt::PREFIX_INFO if o.len() == PREFIX_OPT_LEN => {}
                opt::SOURCE_LLADDR | opt::MTU | opt::PREFIX_INFO => return Err(Error::Malformed),
                _ => {}
            }
        }
        let u32_at = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
        Ok(RouterAdvert {
            cur_hop_limit: msg[4],
            managed: msg[5] & 0x80 != 0,
            other: msg[5] & 0x40 != 0,
            router_lifetime: u16::from_be_bytes([msg[6], msg[7]]),
            reachable_time: u32_at(8),
            retrans_timer: u32_at(12),
            source_lladdr,
            mtu,
            prefixes: Prefixes::Wire(rest),
        })
    }

    /// Bytes [`RouterAdvert::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        RA_BASE_LEN
            + self.source_lladdr.map_or(0, |_| LLADDR_OPT_LEN)
            + self.mtu.map_or(0, |_| MTU_OPT_LEN)
            + self.prefixes.iter().count() * PREFIX_OPT_LEN
    }

    /// Write the message (exactly [`RouterAdvert::buffer_len`] bytes: the source
    /// link-layer address, MTU and prefix options in that order) with its checksum.
    ///
    /// # Panics
    /// If `buf` is shorter than [`RouterAdvert::buffer_len`].
    pub fn emit(&self, buf: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
        let buf = &mut buf[..self.buffer_len()];
        buf.fill(0);
        buf[0] = Message::RouterAdvert.into();
        buf[4] = self.cur_hop_limit;
        buf[5] = (u8::from(self.managed) << 7) | (u8::from(self.other) << 6);
        buf[6..8].copy_from_slice(&self.router_lifetime.to_be_bytes());
        buf[8..12].copy_from_slice(&self.reachable_time.to_be_bytes());
        buf[12..16].copy_from_slice(&self.retrans_timer.to_be_bytes());
        let mut at = RA_BASE_LEN;
        if let Some(mac) = self.source_lladdr {
            buf[at] = opt::SOURCE_LLADDR;
            buf[at + 1] = 1;
            buf[at + 2..at + 8].copy_from_slice(mac.as_bytes());
            at += LLADDR_OPT_LEN;
        }
        if let Some(mtu) = self.mtu {
            buf[at] = opt::MTU;
            buf[at + 1] = 1;
            buf[at + 4..at + 8].copy_from_slice(&mtu.to_be_bytes());
            at += MTU_OPT_LEN;
        }
        for p in self.prefixes.iter() {
            p.emit(&mut buf[at..at + PREFIX_OPT_LEN]);
            at += PREFIX_OPT_LEN;
        }
        Packet::new_unchecked(buf).fill_checksum(src, dst);
    }
}
