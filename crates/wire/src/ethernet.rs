//! Ethernet II frames: destination MAC, source MAC, EtherType, payload. No FCS: devices
//! strip it on receive and append it on transmit.
//!
//! Reading list: [RFC 894](https://www.rfc-editor.org/rfc/rfc894) (IP over Ethernet),
//! IEEE 802.3 clause 3.2 (frame format), the IANA EtherType registry. Linux:
//! `net/ethernet/eth.c` (`eth_type_trans`).
//!
//! ```text
//!  0                   6                  12       14
//! +-------------------+-------------------+--------+----------------
//! | destination (6)   | source (6)        | type   | payload ...
//! +-------------------+-------------------+--------+----------------
//! ```
//!
//! Receive path: `Frame::new_checked(bytes)?` then `Repr::parse(&frame)` and
//! `frame.payload()`; transmit: `Repr::emit(&mut Frame::new_unchecked(buf))`, then write
//! the payload through `payload_mut()`.

use core::fmt;

use crate::view::header_view;
use crate::{Error, Result};

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    #[inline]
    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// The group bit (I/G) of the first octet: multicast or broadcast.
    #[inline]
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The Ethernet header length: two addresses and the EtherType.
pub const HEADER_LEN: usize = 14;

/// Byte ranges of the header fields.
mod field {
    use core::ops::{Range, RangeFrom};
    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// The EtherType of the payload (IANA "IEEE 802 Numbers" registry).
///
/// Values below 0x0600 are IEEE 802.3 length fields, not types (IEEE 802.3 clause
/// 3.2.6); they come out as `Unknown` and the stack drops them as an unhandled protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800, [RFC 894](https://www.rfc-editor.org/rfc/rfc894).
    Ipv4,
    /// 0x0806, [RFC 826](https://www.rfc-editor.org/rfc/rfc826).
    Arp,
    /// 0x86DD, [RFC 2464](https://www.rfc-editor.org/rfc/rfc2464).
    Ipv6,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(value: u16) -> Self {
        match value {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(value: EtherType) -> Self {
        match value {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Unknown(t) => write!(f, "0x{t:04x}"),
        }
    }
}

header_view! {
    /// A zero-copy view of an Ethernet II frame.
    Frame;
    /// Wrap a received buffer: `Err(Truncated)` if it cannot hold the 14-byte header.
    /// No accessor panics on the view this returns.
    new_checked
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// The length check behind [`Frame::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Length of a frame carrying `payload_len` bytes of payload.
    pub const fn buffer_len(payload_len: usize) -> usize {
        HEADER_LEN + payload_len
    }

    /// The destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::DESTINATION])
    }

    /// The source MAC address.
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(&self.buffer.as_ref()[field::SOURCE])
    }

    /// The EtherType.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        let b = &self.buffer.as_ref()[field::ETHERTYPE];
        EtherType::from(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Everything after the header, including any padding up to the 60-byte minimum frame
    /// (the network layer trims it by its own length field).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&addr.0);
    }

    /// Set the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&addr.0);
    }

    /// Set the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: EtherType) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&u16::from(ethertype).to_be_bytes());
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The parsed form of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source MAC address.
    pub src_addr: EthernetAddress,
    /// Destination MAC address.
    pub dst_addr: EthernetAddress,
    /// Type of the payload.
    pub ethertype: EtherType,
}

impl Repr {
    /// Read the header of a checked frame. Every 14-byte header is well-formed at this
    /// layer: whether the frame is for us (destination) and whether we speak its
    /// EtherType is the stack's decision, counted there (OTHERHOST, UNHANDLED_PROTO).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr> {
        if frame.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Header bytes `emit` writes: 14.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into `frame` (which must hold at least 14 bytes; the payload is
    /// left untouched).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut Frame<&mut T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} > {} type {}",
            self.src_addr, self.dst_addr, self.ethertype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(Frame::new_checked(&[0u8; 13][..]), Err(Error::Truncated));
        assert!(
            Frame::new_checked(&[0u8; 14][..])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn ethertype_round_trips() {
        for v in [0x0800u16, 0x0806, 0x86dd, 0x8100, 0x05dc] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x8100), EtherType::Unknown(0x8100));
    }
}
