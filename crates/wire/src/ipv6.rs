//! The IPv6 fixed header ([RFC 8200 §3](https://www.rfc-editor.org/rfc/rfc8200#section-3)).
//!
//! Reading list: RFC 8200 §3 (header format), §4 (extension headers: not parsed here;
//! `next_header` names the first one), RFC 2474 §3 and RFC 3168 §5 (the traffic class as
//! DSCP and ECN), RFC 6437 (flow label), RFC 2675 (jumbograms, which ustack does not
//! support). Linux: `net/ipv6/ip6_input.c` (`ip6_rcv_core`).
//!
//! Call graph: the link layer hands the frame's payload to [`Packet::new_checked`];
//! [`Repr::parse`] gives the stack a [`Repr`]; the stack dispatches on `next_header` with
//! [`Packet::payload`], which is bounded by the Payload Length field. To send, fill a
//! [`Repr`] and call [`Repr::emit`] on a buffer of at least [`Repr::buffer_len`] bytes.
//! Address checks (multicast source, loopback, ...) are the stack's, not the parser's.

use core::net::Ipv6Addr;

use crate::view::header_view;
use crate::{Error, IpProtocol, Result};

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// The minimum link MTU for IPv6 (RFC 8200 §5): "IPv6 requires that every link in the
/// Internet have an MTU of 1280 octets or greater".
pub const MIN_MTU: usize = 1280;

/// Byte ranges of the fixed header (RFC 8200 §3).
mod field {
    use core::ops::Range;
    /// Version (4 bits), Traffic Class (8 bits), Flow Label (20 bits).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

header_view! {
    /// A zero-copy view of an IPv6 packet.
    Packet;
    /// A view whose accessors cannot panic: [`Error::Truncated`] if the buffer is shorter
    /// than 40 bytes or than 40 + Payload Length. Trailing bytes after the payload
    /// (Ethernet padding) are allowed and ignored, as in Linux `ip6_rcv_core`, which trims
    /// the skb to the payload length and counts a shorter one in `InTruncatedPkts`.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn ver_tc_flow(&self) -> u32 {
        self.read_u32(field::VER_TC_FLOW)
    }

    /// Version (6 for IPv6).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.ver_tc_flow() >> 28) as u8
    }

    /// Traffic Class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.ver_tc_flow() >> 20) as u8
    }

    /// Differentiated Services Code Point: the high six bits of the traffic class (RFC 2474 §3).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Explicit Congestion Notification: the low two bits of the traffic class (RFC 3168 §5).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow Label (20 bits, RFC 6437).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.ver_tc_flow() & 0x000f_ffff
    }

    /// Payload Length: bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        self.read_u16(field::PAYLOAD_LEN)
    }

    /// Next Header: the first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// Hop Limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        read_addr(&self.buffer.as_ref()[field::SRC_ADDR])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        read_addr(&self.buffer.as_ref()[field::DST_ADDR])
    }

    /// The payload, bounded by Payload Length (padding after it is excluded).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &self.buffer.as_ref()[HEADER_LEN..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn set_ver_tc_flow(&mut self, value: u32) {
        self.write_u32(field::VER_TC_FLOW, value);
    }

    /// Set the version (4 bits).
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let v = self.ver_tc_flow() & 0x0fff_ffff | ((version as u32 & 0x0f) << 28);
        self.set_ver_tc_flow(v);
    }

    /// Set the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let v = self.ver_tc_flow() & 0xf00f_ffff | ((tc as u32) << 20);
        self.set_ver_tc_flow(v);
    }

    /// Set the flow label (only the low 20 bits are used).
    #[inline]
    pub fn set_flow_label(&mut self, label: u32) {
        let v = self.ver_tc_flow() & 0xfff0_0000 | (label & 0x000f_ffff);
        self.set_ver_tc_flow(v);
    }

    /// Set the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        self.write_u16(field::PAYLOAD_LEN, len);
    }

    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, next_header: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = next_header.into();
    }

    /// Set the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The payload, mutable, bounded by Payload Length (set it first).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

#[inline]
fn read_addr(b: &[u8]) -> Ipv6Addr {
    let mut octets = [0u8; 16];
    octets.copy_from_slice(b);
    Ipv6Addr::from(octets)
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// The first extension header or the upper-layer protocol.
    pub next_header: IpProtocol,
    /// Bytes after the fixed header (extension headers included), at most 65535.
    pub payload_len: usize,
    /// Hop Limit.
    pub hop_limit: u8,
    /// Traffic Class (DSCP << 2 | ECN).
    pub traffic_class: u8,
    /// Flow Label, 20 bits (RFC 6437).
    pub flow_label: u32,
}

impl Repr {
    /// Parse the fixed header of a packet.
    ///
    /// - [`Error::Truncated`]: shorter than 40 + Payload Length (see [`Packet::new_checked`]).
    /// - [`Error::Malformed`]: version is not 6 (RFC 8200 §3, "Version: 4-bit Internet
    ///   Protocol version number = 6"; Linux `ip6_rcv_core` counts it in `InHdrErrors`).
    /// - [`Error::Unsupported`]: Payload Length 0 with a Hop-by-Hop header next, the mark of
    ///   a jumbogram ([RFC 2675 §3](https://www.rfc-editor.org/rfc/rfc2675#section-3)),
    ///   which ustack does not implement.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Malformed);
        }
        if packet.payload_len() == 0 && packet.next_header() == IpProtocol::HopByHop {
            return Err(Error::Unsupported);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len() as usize,
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        })
    }

    /// Bytes [`Repr::emit`] writes: the 40-byte fixed header.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the fixed header (version 6; only the low 20 bits of `flow_label`).
    ///
    /// # Panics
    /// If the buffer is shorter than 40 bytes. `payload_len` must be at most 65535
    /// (checked in debug builds; jumbograms are not supported).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        debug_assert!(
            self.payload_len <= u16::MAX as usize,
            "IPv6 payload too long"
        );
        packet.set_ver_tc_flow(
            (6 << 28) | ((self.traffic_class as u32) << 20) | (self.flow_label & 0x000f_ffff),
        );
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}
