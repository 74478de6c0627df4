//! UDP: [RFC 768](https://www.rfc-editor.org/rfc/rfc768), over IPv4 and over IPv6
//! ([RFC 8200 §8.1](https://www.rfc-editor.org/rfc/rfc8200#section-8.1)).
//!
//! Reading list: RFC 768, RFC 1122 §4.1 (UDP requirements for hosts), RFC 8200 §8.1 (the
//! mandatory IPv6 checksum), Linux `net/ipv4/udp.c` (`__udp4_lib_rcv`: the order of the
//! checks and the counters).
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |   Source Port   |  Destination    |
//! |                 |     Port        |
//! +--------+--------+--------+--------+
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! |          data octets ...
//! +---------------- ...
//! ```
//!
//! The checksum covers a pseudo-header (addresses, protocol, UDP length; see
//! [`checksum::pseudo_header`]), the header and the data.

use core::fmt;
use core::net::IpAddr;

use crate::view::header_view;
use crate::{Error, IpProtocol, Result, checksum};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

header_view! {
    /// A zero-copy view of a UDP datagram.
    Packet;
    /// Wrap a received datagram (the IP payload) after the checks that make every
    /// accessor safe, in Linux `__udp4_lib_rcv`'s order (all counted as Udp InErrors
    /// there, `SKB_DROP_REASON_PKT_TOO_SMALL`):
    ///
    /// - buffer shorter than 8 bytes: `Truncated`;
    /// - length field larger than the buffer: `Truncated`;
    /// - length field below 8: `Malformed` (RFC 768: "the minimum value of the length is
    ///   eight").
    ///
    /// A buffer longer than the length field is allowed: the payload stops at the length.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length checks behind [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buffer_len = self.buffer.as_ref().len();
        if buffer_len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = self.len() as usize;
        if len > buffer_len {
            return Err(Error::Truncated);
        }
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// The source port (0: "not used", RFC 768).
    #[inline]
    pub fn src_port(&self) -> u16 {
        self.read_u16(field::SRC_PORT)
    }

    /// The destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        self.read_u16(field::DST_PORT)
    }

    /// The Length field: header plus data, in bytes.
    #[allow(clippy::len_without_is_empty)]
    #[inline]
    pub fn len(&self) -> u16 {
        self.read_u16(field::LENGTH)
    }

    /// The checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM)
    }

    /// The data: from the end of the header to the Length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }

    /// Whether the checksum verifies for a datagram from `src` to `dst`.
    ///
    /// Over IPv4 a zero checksum field means none was sent and verifies (RFC 768: "An all
    /// zero transmitted checksum value means that the transmitter generated no checksum").
    /// Over IPv6 it does not (RFC 8200 §8.1: "IPv6 receivers must discard UDP packets
    /// containing a zero checksum").
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let stored = self.checksum();
        if stored == 0 {
            return matches!((src, dst), (IpAddr::V4(_), IpAddr::V4(_)));
        }
        let len = self.len();
        let sum = checksum::combine(&[
            checksum::pseudo_header(src, dst, IpProtocol::Udp, len as u32),
            checksum::data(&self.buffer.as_ref()[..len as usize]),
        ]);
        sum == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        self.write_u16(field::SRC_PORT, value)
    }

    /// Set the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        self.write_u16(field::DST_PORT, value)
    }

    /// Set the Length field.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        self.write_u16(field::LENGTH, value)
    }

    /// Store a checksum value as is.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.write_u16(field::CHECKSUM, value)
    }

    /// The data (up to the Length field), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Compute and store the checksum over pseudo-header, header and data (up to the
    /// Length field). RFC 768: "If the computed checksum is zero, it is transmitted as all
    /// ones (the equivalent in one's complement arithmetic)", so 0 keeps meaning "none".
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let len = self.len();
        let sum = checksum::combine(&[
            checksum::pseudo_header(src, dst, IpProtocol::Udp, len as u32),
            checksum::data(&self.buffer.as_ref()[..len as usize]),
        ]);
        let value = match checksum::finish(sum) {
            0 => 0xffff,
            v => v,
        };
        self.set_checksum(value)
    }
}

/// The parsed form of a UDP header. The length lives in the view (`payload()`); the
/// checksum is verified by `parse` and written by `emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source port (0 when the sender expects no reply, RFC 768).
    pub src_port: u16,
    /// Destination port (never 0 after `parse`).
    pub dst_port: u16,
}

impl Repr {
    /// Parse a datagram from `src` to `dst`, after the length checks of
    /// [`Packet::new_checked`]:
    ///
    /// - checksum wrong (when `verify_checksum`): `Checksum` (Linux: Udp InCsumErrors and
    ///   InErrors). Over IPv6 a zero checksum is `Checksum` too (RFC 8200 §8.1). Pass
    ///   `false` only when the device verified it.
    /// - destination port 0 is accepted, as in Linux: no socket can be bound to it, so the
    ///   stack finds none and counts Udp NoPorts (and sends a port unreachable).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        src: &IpAddr,
        dst: &IpAddr,
        verify_checksum: bool,
    ) -> Result<Repr> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Header length: 8.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header bytes `emit` writes before the payload: 8 (as every module's `buffer_len`;
    /// the datagram is `header_len() + payload_len`).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write a datagram of `payload_len` bytes of data into `packet` (which must hold at
    /// least `8 + payload_len` bytes; `payload_len` at most 65527). `emit_payload` is
    /// handed exactly the `payload_len` data bytes to fill, before the checksum is
    /// computed over them. With `fill_checksum` false the checksum field is zero ("none"
    /// over IPv4; a device must fill it over IPv6).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        src: &IpAddr,
        dst: &IpAddr,
        payload_len: usize,
        emit_payload: impl FnOnce(&mut [u8]),
        fill_checksum: bool,
    ) {
        debug_assert!(
            payload_len <= u16::MAX as usize - HEADER_LEN,
            "UDP payload too long"
        );
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len((HEADER_LEN + payload_len) as u16);
        emit_payload(packet.payload_mut());
        if fill_checksum {
            packet.fill_checksum(src, dst);
        } else {
            packet.set_checksum(0);
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UDP {} > {}", self.src_port, self.dst_port)
    }
}
