//! ICMPv6 messages ([RFC 4443](https://www.rfc-editor.org/rfc/rfc4443)): the error messages
//! (Destination Unreachable, Packet Too Big, Time Exceeded, Parameter Problem) and Echo.
//! Neighbor Discovery (RFC 4861) is not parsed here: its types are named in
//! [`Message`] but [`Repr::parse`] returns [`Error::Unsupported`] for them; solicitations
//! and advertisements are [`crate::ndisc`]'s.
//!
//! Reading list: RFC 4443 §2.1 (message format; error types 0..=127, informational
//! 128..=255), §2.3 (checksum over the IPv6 pseudo-header), §2.4 (processing rules),
//! §3 (error messages), §4 (echo). Linux: `net/ipv6/icmp.c` (`icmpv6_rcv`).
//!
//! Call graph: the IPv6 layer hands the upper-layer payload (exactly the ICMPv6 message)
//! to [`Packet::new_checked`] and [`Repr::parse`] with the packet's addresses; to send,
//! the stack fills a [`Repr`] and calls [`Repr::emit`] on a buffer of exactly
//! [`Repr::buffer_len`] bytes. The checksum covers the whole buffer of the view.

use core::net::Ipv6Addr;

use crate::checksum;
use crate::view::header_view;
use crate::{Error, IpProtocol, Result};

/// Length of the ICMPv6 header: type, code, checksum and the 4-byte type-specific field.
pub const HEADER_LEN: usize = 8;

/// Byte ranges of the header (RFC 4443 §2.1).
mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Unused (zero), MTU, pointer, or identifier + sequence number.
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQNO: Range<usize> = 6..8;
}

/// ICMPv6 message types (IANA "ICMPv6 Parameters").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    /// 1: Destination Unreachable (RFC 4443 §3.1).
    DstUnreachable,
    /// 2: Packet Too Big (RFC 4443 §3.2).
    PktTooBig,
    /// 3: Time Exceeded (RFC 4443 §3.3).
    TimeExceeded,
    /// 4: Parameter Problem (RFC 4443 §3.4).
    ParamProblem,
    /// 128: Echo Request (RFC 4443 §4.1).
    EchoRequest,
    /// 129: Echo Reply (RFC 4443 §4.2).
    EchoReply,
    /// 133: Router Solicitation (RFC 4861 §4.1).
    RouterSolicit,
    /// 134: Router Advertisement (RFC 4861 §4.2).
    RouterAdvert,
    /// 135: Neighbor Solicitation (RFC 4861 §4.3).
    NeighborSolicit,
    /// 136: Neighbor Advertisement (RFC 4861 §4.4).
    NeighborAdvert,
    /// 137: Redirect (RFC 4861 §4.5).
    Redirect,
    /// Any other type.
    Unknown(u8),
}

impl Message {
    /// An error message: types 0..=127 (RFC 4443 §2.1, "Error messages are identified as
    /// such by a zero in the high-order bit of their message Type field values").
    pub fn is_error(self) -> bool {
        u8::from(self) & 0x80 == 0
    }
}

impl From<u8> for Message {
    fn from(value: u8) -> Message {
        match value {
            1 => Message::DstUnreachable,
            2 => Message::PktTooBig,
            3 => Message::TimeExceeded,
            4 => Message::ParamProblem,
            128 => Message::EchoRequest,
            129 => Message::EchoReply,
            133 => Message::RouterSolicit,
            134 => Message::RouterAdvert,
            135 => Message::NeighborSolicit,
            136 => Message::NeighborAdvert,
            137 => Message::Redirect,
            other => Message::Unknown(other),
        }
    }
}

impl From<Message> for u8 {
    fn from(value: Message) -> u8 {
        match value {
            Message::DstUnreachable => 1,
            Message::PktTooBig => 2,
            Message::TimeExceeded => 3,
            Message::ParamProblem => 4,
            Message::EchoRequest => 128,
            Message::EchoReply => 129,
            Message::RouterSolicit => 133,
            Message::RouterAdvert => 134,
            Message::NeighborSolicit => 135,
            Message::NeighborAdvert => 136,
            Message::Redirect => 137,
            Message::Unknown(other) => other,
        }
    }
}

/// Destination Unreachable codes (RFC 4443 §3.1; 7 from RFC 6554 §5).
pub mod dst_unreachable {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication with destination administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond scope of source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDR_UNREACHABLE: u8 = 3;
    /// Port unreachable.
    pub const PORT_UNREACHABLE: u8 = 4;
    /// Source address failed ingress/egress policy.
    pub const FAILED_POLICY: u8 = 5;
    /// Reject route to destination.
    pub const REJECT_ROUTE: u8 = 6;
    /// Error in Source Routing Header (RFC 6554 §5).
    pub const SRC_ROUTING_HEADER: u8 = 7;
}

/// Time Exceeded codes (RFC 4443 §3.3).
pub mod time_exceeded {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const FRAG_REASSEMBLY: u8 = 1;
}

/// Parameter Problem codes (RFC 4443 §3.4).
pub mod param_problem {
    /// Erroneous header field encountered.
    pub const HEADER_FIELD: u8 = 0;
    /// Unrecognized Next Header type encountered.
    pub const NEXT_HEADER: u8 = 1;
    /// Unrecognized IPv6 option encountered.
    pub const OPTION: u8 = 2;
}

header_view! {
    /// A zero-copy view of an ICMPv6 message.
    Packet;
    /// A view whose accessors cannot panic: [`Error::Truncated`] if shorter than 8 bytes.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length check of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Message {
        Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code.
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM)
    }

    /// Echo identifier (echo messages).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        self.read_u16(field::ECHO_IDENT)
    }

    /// Echo sequence number (echo messages).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        self.read_u16(field::ECHO_SEQNO)
    }

    /// The 32-bit type-specific field (bytes 4..8), as a number.
    #[inline]
    fn rest(&self) -> u32 {
        self.read_u32(field::REST)
    }

    /// MTU of the next-hop link (Packet Too Big).
    #[inline]
    pub fn pkt_too_big_mtu(&self) -> u32 {
        self.rest()
    }

    /// Offset of the erroneous octet in the invoking packet (Parameter Problem).
    #[inline]
    pub fn param_problem_ptr(&self) -> u32 {
        self.rest()
    }

    /// The message body after the 8-byte header: echo data, or as much of the invoking
    /// packet as fit (error messages).
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// Whether the checksum over the IPv6 pseudo-header and the whole message verifies
    /// (RFC 4443 §2.3).
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header_v6(*src, *dst, IpProtocol::Icmpv6, b.len() as u32);
        checksum::combine(&[pseudo, checksum::data(b)]) == 0xffff
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

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.write_u16(field::CHECKSUM, value);
    }

    /// Set the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        self.write_u16(field::ECHO_IDENT, value);
    }

    /// Set the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        self.write_u16(field::ECHO_SEQNO, value);
    }

    /// Set the Packet Too Big MTU.
    #[inline]
    pub fn set_pkt_too_big_mtu(&mut self, value: u32) {
        self.write_u32(field::REST, value);
    }

    /// Set the Parameter Problem pointer.
    #[inline]
    pub fn set_param_problem_ptr(&mut self, value: u32) {
        self.write_u32(field::REST, value);
    }

    /// Zero the type-specific field (the "Unused" field of Destination Unreachable and
    /// Time Exceeded: "must be initialized to zero by the originator").
    #[inline]
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::REST].fill(0);
    }

    /// The message body after the header, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Compute and store the checksum over the IPv6 pseudo-header and the whole buffer
    /// (RFC 4443 §2.3).
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let pseudo = checksum::pseudo_header_v6(*src, *dst, IpProtocol::Icmpv6, b.len() as u32);
        let sum = checksum::combine(&[pseudo, checksum::data(b)]);
        self.set_checksum(checksum::finish(sum));
    }
}

/// A parsed ICMPv6 message of a type ustack handles.
///
/// For error messages, `data` is the raw invoking packet (its IPv6 header first), as much
/// as the sender included; the stack parses it to find the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr<'a> {
    /// Echo Request (RFC 4443 §4.1).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data, returned unchanged in the reply.
        data: &'a [u8],
    },
    /// Echo Reply (RFC 4443 §4.2).
    EchoReply {
        /// Identifier from the request.
        ident: u16,
        /// Sequence number from the request.
        seq_no: u16,
        /// Data from the request.
        data: &'a [u8],
    },
    /// Destination Unreachable (RFC 4443 §3.1); codes in [`dst_unreachable`].
    DstUnreachable {
        /// Code (unknown codes kept raw).
        code: u8,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Packet Too Big (RFC 4443 §3.2).
    PacketTooBig {
        /// MTU of the next-hop link.
        mtu: u32,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Time Exceeded (RFC 4443 §3.3); codes in [`time_exceeded`].
    TimeExceeded {
        /// Code (unknown codes kept raw).
        code: u8,
        /// The invoking packet.
        data: &'a [u8],
    },
    /// Parameter Problem (RFC 4443 §3.4); codes in [`param_problem`].
    ParamProblem {
        /// Code (unknown codes kept raw).
        code: u8,
        /// Offset in the invoking packet of the octet where the error was detected.
        pointer: u32,
        /// The invoking packet.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Parse a message; `src` and `dst` are the IPv6 packet's addresses.
    ///
    /// - [`Error::Truncated`]: shorter than 8 bytes.
    /// - [`Error::Checksum`]: `verify_checksum` and the checksum is wrong. Unlike ICMPv4's,
    ///   the checksum covers a pseudo-header and is mandatory (RFC 4443 §2.3); Linux
    ///   `icmpv6_rcv` counts a bad one in `Icmp6InCsumErrors`.
    /// - [`Error::Unsupported`]: any type other than the six above (Neighbor Discovery
    ///   included: its types are named, its messages not parsed). RFC 4443 §2.4 (a)/(b): an unknown *error* message "MUST be
    ///   passed to the upper-layer process that originated the packet that caused the
    ///   error", an unknown *informational* one "MUST be silently discarded"; the stack
    ///   looks at [`Packet::msg_type`] and [`Message::is_error`] to tell which.
    ///
    /// Codes are not checked: RFC 4443 §3.2 says the Packet Too Big code is "Set to 0 by
    /// the originator and ignored by the receiver", and Linux ignores the echo code too;
    /// the unused field of Destination Unreachable and Time Exceeded is "ignored by the
    /// receiver" (§3.1, §3.3).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &'a Packet<&'a T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        verify_checksum: bool,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let data = packet.data();
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
            Message::DstUnreachable => Ok(Repr::DstUnreachable {
                code: packet.msg_code(),
                data,
            }),
            Message::PktTooBig => Ok(Repr::PacketTooBig {
                mtu: packet.pkt_too_big_mtu(),
                data,
            }),
            Message::TimeExceeded => Ok(Repr::TimeExceeded {
                code: packet.msg_code(),
                data,
            }),
            Message::ParamProblem => Ok(Repr::ParamProblem {
                code: packet.msg_code(),
                pointer: packet.param_problem_ptr(),
                data,
            }),
            _ => Err(Error::Unsupported),
        }
    }

    /// The message body (echo data or invoking packet).
    pub const fn data(&self) -> &'a [u8] {
        match *self {
            Repr::EchoRequest { data, .. }
            | Repr::EchoReply { data, .. }
            | Repr::DstUnreachable { data, .. }
            | Repr::PacketTooBig { data, .. }
            | Repr::TimeExceeded { data, .. }
            | Repr::ParamProblem { data, .. } => data,
        }
    }

    /// Bytes [`Repr::emit`] writes: 8 + data.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.data().len()
    }

    /// Write the message and, if `fill_checksum`, its checksum over the `src`/`dst`
    /// pseudo-header. Error messages get the data as given: keeping the whole ICMPv6
    /// packet within the minimum MTU (RFC 4443 §2.4 (c): "as much of invoking packet as
    /// possible without the ICMPv6 packet exceeding the minimum IPv6 MTU") is the
    /// caller's job.
    ///
    /// The buffer must be exactly [`Repr::buffer_len`] bytes (the checksum covers it all).
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        src: &Ipv6Addr,
        dst: &Ipv6Addr,
        fill_checksum: bool,
    ) {
        debug_assert_eq!(packet.buffer.as_ref().len(), self.buffer_len());
        match *self {
            Repr::EchoRequest { ident, seq_no, .. } | Repr::EchoReply { ident, seq_no, .. } => {
                let ty = match self {
                    Repr::EchoRequest { .. } => Message::EchoRequest,
                    _ => Message::EchoReply,
                };
                packet.set_msg_type(ty);
                packet.set_msg_code(0);
                packet.set_echo_ident(ident);
                packet.set_echo_seq_no(seq_no);
            }
            Repr::DstUnreachable { code, .. } => {
                packet.set_msg_type(Message::DstUnreachable);
                packet.set_msg_code(code);
                packet.clear_reserved();
            }
            Repr::PacketTooBig { mtu, .. } => {
                packet.set_msg_type(Message::PktTooBig);
                packet.set_msg_code(0);
                packet.set_pkt_too_big_mtu(mtu);
            }
            Repr::TimeExceeded { code, .. } => {
                packet.set_msg_type(Message::TimeExceeded);
                packet.set_msg_code(code);
                packet.clear_reserved();
            }
            Repr::ParamProblem { code, pointer, .. } => {
                packet.set_msg_type(Message::ParamProblem);
                packet.set_msg_code(code);
                packet.set_param_problem_ptr(pointer);
            }
        }
        let data = self.data();
        packet.data_mut()[..data.len()].copy_from_slice(data);
        packet.set_checksum(0);
        if fill_checksum {
            packet.fill_checksum(src, dst);
        }
    }
}
