//! ICMPv4: [RFC 792](https://www.rfc-editor.org/rfc/rfc792), with the Next-Hop MTU of
//! [RFC 1191 §4](https://www.rfc-editor.org/rfc/rfc1191#section-4) and the host
//! requirements of [RFC 1122 §3.2.2](https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2).
//!
//! Reading list: RFC 792, RFC 1122 §3.2.2, RFC 1191 §4, RFC 1812 §5.2.7.1 (the codes
//! beyond RFC 792), Linux `net/ipv4/icmp.c` (`icmp_rcv`, `icmp_unreach`, `icmp_echo`).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  echo: Identifier             |  echo: Sequence Number        |
//! |  unreach: unused (0)          |  frag needed: Next-Hop MTU    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  data: echo payload, or the invoking IP header + leading bytes
//! +-+-+-+-+-+-+-+-+-
//! ```
//!
//! The view covers exactly the ICMP message (the IP payload): the checksum covers all of it.

use core::fmt;

use crate::view::header_view;
use crate::{Error, Result, checksum};

/// Length of the ICMP header: type, code, checksum and the 4-byte "rest of header".
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::{Range, RangeFrom};
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const UNUSED: Range<usize> = 4..6;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
    pub const MTU: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// The ICMP message type (IANA "ICMP Type Numbers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    /// 0, RFC 792.
    EchoReply,
    /// 3, RFC 792.
    DstUnreachable,
    /// 5, RFC 792.
    Redirect,
    /// 8, RFC 792.
    EchoRequest,
    /// 9, RFC 1256.
    RouterAdvert,
    /// 10, RFC 1256.
    RouterSolicit,
    /// 11, RFC 792.
    TimeExceeded,
    /// 12, RFC 792.
    ParamProblem,
    /// 13, RFC 792.
    Timestamp,
    /// 14, RFC 792.
    TimestampReply,
    /// Any other type (including the deprecated source quench, 4).
    Unknown(u8),
}

impl From<u8> for Message {
    fn from(value: u8) -> Self {
        match value {
            0 => Message::EchoReply,
            3 => Message::DstUnreachable,
            5 => Message::Redirect,
            8 => Message::EchoRequest,
            9 => Message::RouterAdvert,
            10 => Message::RouterSolicit,
            11 => Message::TimeExceeded,
            12 => Message::ParamProblem,
            13 => Message::Timestamp,
            14 => Message::TimestampReply,
            other => Message::Unknown(other),
        }
    }
}

impl From<Message> for u8 {
    fn from(value: Message) -> Self {
        match value {
            Message::EchoReply => 0,
            Message::DstUnreachable => 3,
            Message::Redirect => 5,
            Message::EchoRequest => 8,
            Message::RouterAdvert => 9,
            Message::RouterSolicit => 10,
            Message::TimeExceeded => 11,
            Message::ParamProblem => 12,
            Message::Timestamp => 13,
            Message::TimestampReply => 14,
            Message::Unknown(other) => other,
        }
    }
}

/// Codes of Destination Unreachable (type 3): RFC 792 (0-5), RFC 1122 §3.2.2.1 (6-12),
/// RFC 1812 §5.2.7.1 (13-15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DstUnreachable {
    /// 0: net unreachable.
    NetUnreachable,
    /// 1: host unreachable.
    HostUnreachable,
    /// 2: protocol unreachable.
    ProtoUnreachable,
    /// 3: port unreachable.
    PortUnreachable,
    /// 4: fragmentation needed and DF set (carries the next-hop MTU, RFC 1191 §4).
    FragRequired,
    /// 5: source route failed.
    SrcRouteFailed,
    /// 6: destination network unknown.
    DstNetUnknown,
    /// 7: destination host unknown.
    DstHostUnknown,
    /// 8: source host isolated.
    SrcHostIsolated,
    /// 9: communication with destination network administratively prohibited.
    NetProhibited,
    /// 10: communication with destination host administratively prohibited.
    HostProhibited,
    /// 11: network unreachable for type of service.
    NetUnreachToS,
    /// 12: host unreachable for type of service.
    HostUnreachToS,
    /// 13: communication administratively prohibited.
    CommProhibited,
    /// 14: host precedence violation.
    HostPrecedViol,
    /// 15: precedence cutoff in effect.
    PrecedCutoff,
    /// Any other code.
    Unknown(u8),
}

impl From<u8> for DstUnreachable {
    fn from(value: u8) -> Self {
        use DstUnreachable::*;
        match value {
            0 => NetUnreachable,
            1 => HostUnreachable,
            2 => ProtoUnreachable,
            3 => PortUnreachable,
            4 => FragRequired,
            5 => SrcRouteFailed,
            6 => DstNetUnknown,
            7 => DstHostUnknown,
            8 => SrcHostIsolated,
            9 => NetProhibited,
            10 => HostProhibited,
            11 => NetUnreachToS,
            12 => HostUnreachToS,
            13 => CommProhibited,
            14 => HostPrecedViol,
            15 => PrecedCutoff,
            other => Unknown(other),
        }
    }
}

impl From<DstUnreachable> for u8 {
    fn from(value: DstUnreachable) -> Self {
        use DstUnreachable::*;
        match value {
            NetUnreachable => 0,
            HostUnreachable => 1,
            ProtoUnreachable => 2,
            PortUnreachable => 3,
            FragRequired => 4,
            SrcRouteFailed => 5,
            DstNetUnknown => 6,
            DstHostUnknown => 7,
            SrcHostIsolated => 8,
            NetProhibited => 9,
            HostProhibited => 10,
            NetUnreachToS => 11,
            HostUnreachToS => 12,
            CommProhibited => 13,
            HostPrecedViol => 14,
            PrecedCutoff => 15,
            Unknown(other) => other,
        }
    }
}

/// Codes of Time Exceeded (type 11), RFC 792.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeExceeded {
    /// 0: time to live exceeded in transit.
    TtlExpired,
    /// 1: fragment reassembly time exceeded.
    FragExpired,
    /// Any other code.
    Unknown(u8),
}

impl From<u8> for TimeExceeded {
    fn from(value: u8) -> Self {
        match value {
            0 => TimeExceeded::TtlExpired,
            1 => TimeExceeded::FragExpired,
            other => TimeExceeded::Unknown(other),
        }
    }
}

impl From<TimeExceeded> for u8 {
    fn from(value: TimeExceeded) -> Self {
        match value {
            TimeExceeded::TtlExpired => 0,
            TimeExceeded::FragExpired => 1,
            TimeExceeded::Unknown(other) => other,
        }
    }
}

header_view! {
    /// A zero-copy view of an ICMPv4 message.
    Packet;
    /// Wrap a received message: `Err(Truncated)` if shorter than the 8-byte header.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length check behind [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The message type.
    #[inline]
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The message code (meaning depends on the type).
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM)
    }

    /// Echo identifier (bytes 4-5; meaningful for echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        self.read_u16(field::ECHO_IDENT)
    }

    /// Echo sequence number (bytes 6-7; meaningful for echo request/reply).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        self.read_u16(field::ECHO_SEQNO)
    }

    /// Next-Hop MTU (bytes 6-7; meaningful for Destination Unreachable code 4, RFC 1191 §4;
    /// zero from routers that predate RFC 1191).
    #[inline]
    pub fn next_hop_mtu(&self) -> u16 {
        self.read_u16(field::MTU)
    }

    /// Everything after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// RFC 792: "The checksum is the 16-bit ones's complement of the one's complement sum
    /// of the ICMP message starting with the ICMP Type." A correct message sums to all ones.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Set the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Store a checksum value as is.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.write_u16(field::CHECKSUM, value)
    }

    /// Set the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        self.write_u16(field::ECHO_IDENT, value)
    }

    /// Set the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        self.write_u16(field::ECHO_SEQNO, value)
    }

    /// Set the Next-Hop MTU (and zero the unused half-word before it, RFC 1191 §4).
    #[inline]
    pub fn set_next_hop_mtu(&mut self, value: u16) {
        self.write_u16(field::UNUSED, 0);
        self.write_u16(field::MTU, value)
    }

    /// Set the whole 4-byte "rest of header" word at once.
    #[inline]
    pub fn set_rest_of_header(&mut self, value: u32) {
        self.buffer.as_mut()[4..8].copy_from_slice(&value.to_be_bytes());
    }

    /// Everything after the header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Compute and store the checksum over the whole buffer (RFC 792: "For computing the
    /// checksum, the checksum field should be zero").
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(checksum::finish(sum));
    }
}

/// The parsed form of the ICMPv4 messages ustack handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr<'a> {
    /// Echo request (type 8).
    EchoRequest {
        /// "If code = 0, an identifier to aid in matching echos and replies, may be zero."
        ident: u16,
        /// Sequence number, likewise.
        seq_no: u16,
        /// The echo data, returned unchanged in the reply.
        data: &'a [u8],
    },
    /// Echo reply (type 0).
    EchoReply {
        /// Identifier, copied from the request.
        ident: u16,
        /// Sequence number, copied from the request.
        seq_no: u16,
        /// Data, copied from the request.
        data: &'a [u8],
    },
    /// Destination unreachable (type 3).
    DstUnreachable {
        /// The code.
        reason: DstUnreachable,
        /// Next-Hop MTU, RFC 1191 §4; 0 unless `reason` is `FragRequired`.
        next_hop_mtu: u16,
        /// The invoking datagram: its IP header and leading payload, raw.
        data: &'a [u8],
    },
    /// Time exceeded (type 11).
    TimeExceeded {
        /// The code.
        reason: TimeExceeded,
        /// The invoking datagram: its IP header and leading payload, raw.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Parse a message.
    ///
    /// - Checksum wrong (when `verify_checksum`): `Checksum`. RFC 1122 §3.2.2 has no MUST
    ///   here, but Linux `icmp_rcv` verifies it always (InCsumErrors and InErrors).
    /// - Echo request/reply: the code is ignored. RFC 792 says "Code 0"; Linux
    ///   `icmp_echo` does not look at it, nor do we.
    /// - Destination Unreachable / Time Exceeded: the data must start with the invoking
    ///   datagram's IP header ("Internet Header + 64 bits of Original Data Datagram",
    ///   RFC 792), since the stack needs it to find the socket (RFC 1122 §3.2.2: "MUST
    ///   extract the protocol ID from the passed header"). As Linux `icmp_unreach`: fewer
    ///   than 20 bytes of data is `Truncated`, an inner IHL below 5 is `Malformed` (Linux:
    ///   InErrors for both). The next-hop MTU is read only for code 4 (RFC 1191 §4); for
    ///   other codes that half-word is unused and parses as 0.
    /// - Any other type: `Unsupported` (redirects, timestamps, parameter problems,
    ///   router discovery: Linux handles some of these, ustack does not yet).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &'a Packet<&'a T>,
        verify_checksum: bool,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let data: &'a [u8] = &packet.buffer.as_ref()[field::DATA];
        let invoking_header = || {
            if data.len() < crate::ipv4::HEADER_LEN {
                Err(Error::Truncated)
            } else if (data[0] & 0x0f) < 5 {
                Err(Error::Malformed)
            } else {
                Ok(())
            }
        };
        match packet.msg_type() {
            Message::EchoRequest => Ok(Repr::EchoRequest {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::EchoReply => Ok(Repr::EchoReply {
                ident: packet.echo_ident(),
                seq_no: packet.echo_seq_no(),
                data,
            }),
            Message::DstUnreachable => {
                invoking_header()?;
                let reason = DstUnreachable::from(packet.msg_code());
                let next_hop_mtu = if reason == DstUnreachable::FragRequired {
                    packet.next_hop_mtu()
                } else {
                    0
                };
                Ok(Repr::DstUnreachable {
                    reason,
                    next_hop_mtu,
                    data,
                })
            }
            Message::TimeExceeded => {
                invoking_header()?;
                Ok(Repr::TimeExceeded {
                    reason: TimeExceeded::from(packet.msg_code()),
                    data,
                })
            }
            _ => Err(Error::Unsupported),
        }
    }

    /// Bytes `emit` writes: the 8-byte header plus the data.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::TimeExceeded { data, .. } => HEADER_LEN + data.len(),
        }
    }

    /// The message type this represents.
    pub const fn msg_type(&self) -> Message {
        match self {
            Repr::EchoRequest { .. } => Message::EchoRequest,
            Repr::EchoReply { .. } => Message::EchoReply,
            Repr::DstUnreachable { .. } => Message::DstUnreachable,
            Repr::TimeExceeded { .. } => Message::TimeExceeded,
        }
    }

    /// Write the message into `packet`. The buffer must be exactly [`Repr::buffer_len`]
    /// bytes: the checksum covers the whole buffer, as on receive. With `fill_checksum`
    /// false the checksum field is zeroed. The next-hop MTU is written only for
    /// `FragRequired`; the unused words of error messages are zero, as RFC 792 asks.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        fill_checksum: bool,
    ) {
        packet.set_msg_type(self.msg_type());
        let data = match *self {
            Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }
            | Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
                data
            }
            Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                data,
            } => {
                packet.set_msg_code(reason.into());
                let mtu = if reason == DstUnreachable::FragRequired {
                    next_hop_mtu
                } else {
                    0
                };
                packet.set_rest_of_header(mtu as u32);
                data
            }
            Repr::TimeExceeded { reason, data } => {
                packet.set_msg_code(reason.into());
                packet.set_rest_of_header(0);
                data
            }
        };
        packet.data_mut()[..data.len()].copy_from_slice(data);
        if fill_checksum {
            packet.fill_checksum();
        } else {
            packet.set_checksum(0);
        }
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                write!(
                    f,
                    "ICMP echo request id {ident} seq {seq_no} len {}",
                    data.len()
                )
            }
            Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                write!(
                    f,
                    "ICMP echo reply id {ident} seq {seq_no} len {}",
                    data.len()
                )
            }
            Repr::DstUnreachable {
                reason,
                next_hop_mtu,
                ..
            } => {
                write!(f, "ICMP unreachable {reason:?}")?;
                if *reason == DstUnreachable::FragRequired {
                    write!(f, " mtu {next_hop_mtu}")?;
                }
                Ok(())
            }
            Repr::TimeExceeded { reason, .. } => write!(f, "ICMP time exceeded {reason:?}"),
        }
    }
}
