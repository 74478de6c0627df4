//! TCP segments: header, options, checksum.
//!
//! Reading list:
//! - [RFC 9293 §3.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.1): header format,
//!   the pseudo-header checksum, options (EOL, NOP, MSS).
//! - [RFC 9293 §3.7.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.7.1) and
//!   [RFC 6691](https://www.rfc-editor.org/rfc/rfc6691): what the MSS option means.
//! - [RFC 7323 §2](https://www.rfc-editor.org/rfc/rfc7323#section-2) (window scale) and
//!   [§3](https://www.rfc-editor.org/rfc/rfc7323#section-3) (timestamps).
//! - [RFC 2018 §2-3](https://www.rfc-editor.org/rfc/rfc2018#section-2) (SACK-permitted, SACK).
//! - Linux `net/ipv4/tcp_output.c` (`tcp_options_write`, `tcp_established_options`): the
//!   option order and layout we emit; `net/ipv4/tcp_input.c` (`tcp_parse_options`).
//!
//! Call graph: the IP layer hands the TCP segment (exactly the IP payload) to
//! [`Packet::new_checked`], then [`Repr::parse`] (checksum with the pseudo-header, flags,
//! options) gives the stack a [`Repr`]. To send, the stack fills a [`Repr`], asks
//! [`Repr::buffer_len`], and calls [`Repr::emit`] (or [`Repr::emit_header`], writes the
//! payload itself, then [`Packet::fill_checksum`]).
//!
//! The checksum covers the whole buffer of the view: a `Packet` over a TCP segment must
//! span exactly that segment (TCP has no length field; the length comes from IP).

use core::fmt;
use core::iter::FusedIterator;
use core::net::{IpAddr, Ipv6Addr};
use core::ops::{BitAnd, BitOr, BitOrAssign};

use crate::checksum;
use crate::view::header_view;
use crate::{Error, IpProtocol, Result, SeqNumber};

/// Length of the TCP header without options (data offset 5).
pub const HEADER_LEN: usize = 20;

/// The most option bytes a header can carry: data offset 15 means 60 bytes of header
/// (RFC 9293 §3.1, "Data Offset (DOffset): 4 bits").
pub const MAX_OPTIONS_LEN: usize = 40;

/// Byte ranges of the fixed header (RFC 9293 §3.1, Figure 1).
mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (high nibble) and reserved bits (low nibble).
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// Option kinds (IANA "TCP Option Kind Numbers").
pub mod option_kind {
    /// End of Option List (RFC 9293 §3.1).
    pub const END_OF_LIST: u8 = 0;
    /// No-Operation (RFC 9293 §3.1).
    pub const NO_OPERATION: u8 = 1;
    /// Maximum Segment Size (RFC 9293 §3.1), length 4.
    pub const MAX_SEG_SIZE: u8 = 2;
    /// Window Scale (RFC 7323 §2.2), length 3.
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK-Permitted (RFC 2018 §2), length 2.
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK (RFC 2018 §3), length 2 + 8n.
    pub const SACK: u8 = 5;
    /// Timestamps (RFC 7323 §3.2), length 10.
    pub const TIMESTAMP: u8 = 8;
}

/// The largest window shift a receiver honours.
/// [RFC 7323 §2.3](https://www.rfc-editor.org/rfc/rfc7323#section-2.3): "If a Window Scale option is received with a shift.cnt value larger than 14, the TCP
/// SHOULD log the error but MUST use 14 instead of the specified value."
pub const MAX_WINDOW_SHIFT: u8 = 14;

/// The most SACK blocks an option can carry: 2 + 8 * 4 = 34 bytes; a fifth block would need
/// 42 bytes, more than the 40 bytes of option space (RFC 2018 §3).
pub const MAX_SACK_BLOCKS: usize = 4;

/// The TCP control bits (byte 13 of the header; RFC 9293 §3.1, RFC 3168 §6.1 for ECE/CWR).
///
/// The four reserved bits before them (byte 12, low nibble) are not part of `Flags`:
/// RFC 9293 §3.1, "Must be zero in generated segments and must be ignored in received
/// segments"; [`Repr::emit`] writes them as zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x02);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x04);
    /// Push function.
    pub const PSH: Flags = Flags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x20);
    /// ECN-Echo (RFC 3168 §6.1).
    pub const ECE: Flags = Flags(0x40);
    /// Congestion Window Reduced (RFC 3168 §6.1).
    pub const CWR: Flags = Flags(0x80);
    /// No bit set.
    pub const NONE: Flags = Flags(0);

    /// Every bit of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Any bit of `other` is set in `self`.
    #[inline]
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// No bit set.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Set the bits of `other`.
    #[inline]
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    /// Clear the bits of `other`.
    #[inline]
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }
}

impl BitOr for Flags {
    type Output = Flags;
    #[inline]
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    #[inline]
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Flags {
    type Output = Flags;
    #[inline]
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl fmt::Debug for Flags {
    /// tcpdump-like names joined by `|`, e.g. `SYN|ACK`; `-` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Flags, &str); 8] = [
            (Flags::FIN, "FIN"),
            (Flags::SYN, "SYN"),
            (Flags::RST, "RST"),
            (Flags::PSH, "PSH"),
            (Flags::ACK, "ACK"),
            (Flags::URG, "URG"),
            (Flags::ECE, "ECE"),
            (Flags::CWR, "CWR"),
        ];
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The sum of the TCP pseudo-header for a segment of `len` bytes between `src` and `dst`
/// (RFC 9293 §3.1 for IPv4, RFC 8200 §8.1 for IPv6). Mixed families cannot occur on the
/// wire; they are summed as IPv4-mapped IPv6 addresses so that nothing panics.
#[inline]
fn pseudo_header(src: &IpAddr, dst: &IpAddr, len: usize) -> u16 {
    fn v6(a: &IpAddr) -> Ipv6Addr {
        match a {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => *a,
        }
    }
    match (src, dst) {
        // An IPv4 datagram is at most 65535 bytes, so `len` fits the 16-bit field.
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            checksum::pseudo_header_v4(*s, *d, IpProtocol::Tcp, len as u16)
        }
        _ => checksum::pseudo_header_v6(v6(src), v6(dst), IpProtocol::Tcp, len as u32),
    }
}

header_view! {
    /// A zero-copy view of a TCP segment (header, options and payload).
    Packet;
    /// A view whose accessors cannot panic.
    ///
    /// - shorter than 20 bytes, or than the data offset says: [`Error::Truncated`];
    /// - data offset below 5: [`Error::Malformed`]. RFC 9293 §3.1: "The TCP header
    ///   (even one including options) is an integer multiple of 32 bits long"; the fixed
    ///   part alone is 5 words. Linux `tcp_v4_rcv` drops `th->doff < 5` as a bad packet
    ///   (`SKB_DROP_REASON_PKT_TOO_SMALL`, counted in `InErrs`), and a doff running past the
    ///   packet silently (`pskb_may_pull` fails).
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            Err(Error::Malformed)
        } else if header_len > len {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        self.read_u16(field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        self.read_u16(field::DST_PORT)
    }

    /// Sequence number of the first octet (of the SYN, if present).
    #[inline]
    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(self.read_u32(field::SEQ_NUM))
    }

    /// Acknowledgment number (meaningful iff ACK is set).
    #[inline]
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(self.read_u32(field::ACK_NUM))
    }

    /// Data offset: header length in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] >> 4
    }

    /// Header length in bytes (data offset * 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.data_offset() as usize * 4
    }

    /// The four reserved bits between the data offset and the flags.
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] & 0x0f
    }

    /// The eight control bits.
    #[inline]
    pub fn flags(&self) -> Flags {
        Flags(self.buffer.as_ref()[field::FLAGS])
    }

    /// FIN bit.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags().contains(Flags::FIN)
    }

    /// SYN bit.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags().contains(Flags::SYN)
    }

    /// RST bit.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags().contains(Flags::RST)
    }

    /// PSH bit.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags().contains(Flags::PSH)
    }

    /// ACK bit.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags().contains(Flags::ACK)
    }

    /// URG bit.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags().contains(Flags::URG)
    }

    /// ECE bit (RFC 3168 §6.1).
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags().contains(Flags::ECE)
    }

    /// CWR bit (RFC 3168 §6.1).
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags().contains(Flags::CWR)
    }

    /// Window field, unscaled.
    #[inline]
    pub fn window_len(&self) -> u16 {
        self.read_u16(field::WIN_SIZE)
    }

    /// Checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM)
    }

    /// Urgent pointer field (meaningful iff URG is set).
    #[inline]
    pub fn urgent_pointer(&self) -> u16 {
        self.read_u16(field::URGENT)
    }

    /// The raw option bytes (between the fixed header and the data offset).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The options, one at a time (NOPs skipped, EOL ends the list). See [`TcpOptionsIter`].
    #[inline]
    pub fn options_iter(&self) -> TcpOptionsIter<'_> {
        TcpOptionsIter::new(self.options())
    }

    /// The data after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// Sequence space the segment occupies: payload length, plus one for SYN, plus one
    /// for FIN (RFC 9293 §3.4, SEG.LEN).
    #[inline]
    pub fn segment_len(&self) -> usize {
        self.payload().len() + self.syn() as usize + self.fin() as usize
    }

    /// Whether the checksum over pseudo-header, header and payload verifies
    /// (RFC 9293 §3.1). Addresses of different families never verify.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        if src.is_ipv4() != dst.is_ipv4() {
            return false;
        }
        let b = self.buffer.as_ref();
        checksum::combine(&[pseudo_header(src, dst, b.len()), checksum::data(b)]) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        self.write_u16(field::SRC_PORT, value);
    }

    /// Set the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        self.write_u16(field::DST_PORT, value);
    }

    /// Set the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, value: SeqNumber) {
        self.write_u32(field::SEQ_NUM, value.0);
    }

    /// Set the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, value: SeqNumber) {
        self.write_u32(field::ACK_NUM, value.0);
    }

    /// Set the header length in bytes (a multiple of 4, 20..=60) and clear the reserved bits.
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(
            len.is_multiple_of(4) && (HEADER_LEN..=HEADER_LEN + MAX_OPTIONS_LEN).contains(&len)
        );
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }

    /// Set the control bits.
    #[inline]
    pub fn set_flags(&mut self, flags: Flags) {
        self.buffer.as_mut()[field::FLAGS] = flags.0;
    }

    /// Set the window field (already scaled down by the sender).
    #[inline]
    pub fn set_window_len(&mut self, value: u16) {
        self.write_u16(field::WIN_SIZE, value);
    }

    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.write_u16(field::CHECKSUM, value);
    }

    /// Set the urgent pointer.
    #[inline]
    pub fn set_urgent_pointer(&mut self, value: u16) {
        self.write_u16(field::URGENT, value);
    }

    /// The option bytes, mutable (the data offset must be set first).
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..header_len]
    }

    /// The data after the header, mutable (the data offset must be set first).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let header_len = self.header_len();
        &mut self.buffer.as_mut()[header_len..]
    }

    /// Compute and store the checksum over pseudo-header, header and payload (the whole
    /// buffer is the segment).
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let sum = checksum::combine(&[pseudo_header(src, dst, b.len()), checksum::data(b)]);
        self.set_checksum(checksum::finish(sum));
    }
}

#[inline]
fn read_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One TCP option as it appears on the wire (values raw: a window scale of 15 stays 15
/// here; [`Repr::parse`] normalises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Kind 0: end of the option list; the rest of the option space is padding.
    EndOfList,
    /// Kind 1: padding between options.
    NoOperation,
    /// Kind 2, length 4: the largest segment the sender can receive (RFC 9293 §3.7.1).
    MaxSegmentSize(u16),
    /// Kind 3, length 3: the sender's receive window shift count (RFC 7323 §2.2).
    WindowScale(u8),
    /// Kind 4, length 2: the sender can receive SACK options (RFC 2018 §2).
    SackPermitted,
    /// Kind 5, length 2 + 8n: up to four (left edge, right edge) blocks of received,
    /// not yet cumulatively acknowledged data (RFC 2018 §3). Present blocks come first.
    SackRange([Option<(u32, u32)>; MAX_SACK_BLOCKS]),
    /// Kind 8, length 10: TSval and TSecr (RFC 7323 §3.2).
    Timestamp {
        /// The sender's timestamp clock.
        tsval: u32,
        /// The TSval echoed back (meaningful iff ACK is set).
        tsecr: u32,
    },
    /// Any other kind; `data` excludes the kind and length bytes.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data after the kind and length bytes.
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Parse the option at the start of `buffer`; returns it and the bytes after it.
    ///
    /// [RFC 9293 §3.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.1): an option is a
    /// single kind byte (EOL, NOP), or kind, length (counting kind and length) and data.
    /// - EOL returns an empty rest: "The end of the option list ... used at the end of all
    ///   options"; the bytes after it are padding.
    /// - The options ustack knows are understood only with their exact lengths (MSS 4, WS
    ///   3, SACK-permitted 2, SACK 2 + 8n with n in 1..=4, timestamps 10); with any other
    ///   (sane) length they are returned as [`TcpOption::Unknown`], i.e. ignored, as Linux
    ///   `tcp_parse_options` ignores them (`if (opsize == TCPOLEN_MSS && ...)`, then skips
    ///   `opsize` bytes and parses on).
    /// - A length below 2, or one running past the buffer, is [`Error::Malformed`]. RFC 9293
    ///   §3.2: "TCP implementations MUST be prepared to handle an illegal option length
    ///   (e.g., zero)" (MUST-7). [`Repr::parse`] then stops parsing options and keeps the
    ///   segment, as Linux does ("silly options" / "don't parse partial options").
    /// - Other kinds with a sane length are returned as [`TcpOption::Unknown`]:
    ///   RFC 9293 §3.1-3.2, "A TCP implementation MUST be able to receive a TCP option in any
    ///   segment" (MUST-4) and "MUST ignore without error any TCP option it does not
    ///   implement, assuming that the option has a length field" (MUST-6).
    ///
    /// An empty buffer is [`Error::Truncated`].
    pub fn parse(buffer: &'a [u8]) -> Result<(TcpOption<'a>, &'a [u8])> {
        let (&kind, after_kind) = buffer.split_first().ok_or(Error::Truncated)?;
        match kind {
            option_kind::END_OF_LIST => return Ok((TcpOption::EndOfList, &[])),
            option_kind::NO_OPERATION => return Ok((TcpOption::NoOperation, after_kind)),
            _ => {}
        }
        let len = *after_kind.first().ok_or(Error::Malformed)? as usize;
        if len < 2 || len > buffer.len() {
            return Err(Error::Malformed);
        }
        let data = &buffer[2..len];
        let rest = &buffer[len..];
        let option = match (kind, len) {
            (option_kind::MAX_SEG_SIZE, 4) => {
                TcpOption::MaxSegmentSize(u16::from_be_bytes([data[0], data[1]]))
            }
            (option_kind::WINDOW_SCALE, 3) => TcpOption::WindowScale(data[0]),
            (option_kind::SACK_PERMITTED, 2) => TcpOption::SackPermitted,
            (option_kind::SACK, 10 | 18 | 26 | 34) => {
                let mut blocks = [None; MAX_SACK_BLOCKS];
                for (slot, block) in blocks.iter_mut().zip(data.chunks_exact(8)) {
                    *slot = Some((read_u32(&block[..4]), read_u32(&block[4..])));
                }
                TcpOption::SackRange(blocks)
            }
            (option_kind::TIMESTAMP, 10) => TcpOption::Timestamp {
                tsval: read_u32(&data[..4]),
                tsecr: read_u32(&data[4..]),
            },
            // A known kind with the wrong length, or an unknown kind: ignored (see above).
            (kind, _) => TcpOption::Unknown { kind, data },
        };
        Ok((option, rest))
    }

    /// Bytes [`TcpOption::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(blocks) => 2 + 8 * blocks.iter().flatten().count(),
            TcpOption::Timestamp { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Write the option at the start of `buffer`; returns the bytes after it. Absent SACK
    /// blocks are skipped (a `SackRange` with none writes a malformed, block-less option).
    /// Used to build test segments with any option layout; the stack emits options through
    /// [`Repr::emit`].
    ///
    /// # Panics
    /// If `buffer` is shorter than [`TcpOption::buffer_len`], or an unknown option's data
    /// is longer than 253 bytes.
    pub fn emit<'b>(&self, buffer: &'b mut [u8]) -> &'b mut [u8] {
        let len = self.buffer_len();
        let (head, rest) = buffer.split_at_mut(len);
        match *self {
            TcpOption::EndOfList => head[0] = option_kind::END_OF_LIST,
            TcpOption::NoOperation => head[0] = option_kind::NO_OPERATION,
            TcpOption::MaxSegmentSize(mss) => {
                head[..2].copy_from_slice(&[option_kind::MAX_SEG_SIZE, 4]);
                head[2..].copy_from_slice(&mss.to_be_bytes());
            }
            TcpOption::WindowScale(shift) => {
                head.copy_from_slice(&[option_kind::WINDOW_SCALE, 3, shift]);
            }
            TcpOption::SackPermitted => head.copy_from_slice(&[option_kind::SACK_PERMITTED, 2]),
            TcpOption::SackRange(blocks) => {
                head[..2].copy_from_slice(&[option_kind::SACK, len as u8]);
                for (chunk, (left, right)) in
                    head[2..].chunks_exact_mut(8).zip(blocks.iter().flatten())
                {
                    chunk[..4].copy_from_slice(&left.to_be_bytes());
                    chunk[4..].copy_from_slice(&right.to_be_bytes());
                }
            }
            TcpOption::Timestamp { tsval, tsecr } => {
                head[..2].copy_from_slice(&[option_kind::TIMESTAMP, 10]);
                head[2..6].copy_from_slice(&tsval.to_be_bytes());
                head[6..].copy_from_slice(&tsecr.to_be_bytes());
            }
            TcpOption::Unknown { kind, data } => {
                assert!(len <= 255, "TCP option data too long");
                head[..2].copy_from_slice(&[kind, len as u8]);
                head[2..].copy_from_slice(data);
            }
        }
        rest
    }
}

/// Iterator over the options of a header, one [`TcpOption::parse`] at a time: NOPs are
/// skipped, EOL (or the end of the option space) ends the list, and the first malformed
/// option yields one `Err` and ends the iteration.
#[derive(Debug, Clone)]
pub struct TcpOptionsIter<'a> {
    rest: &'a [u8],
}

impl<'a> TcpOptionsIter<'a> {
    /// Iterate over raw option bytes (as [`Packet::options`] returns them).
    pub fn new(options: &'a [u8]) -> TcpOptionsIter<'a> {
        TcpOptionsIter { rest: options }
    }
}

impl<'a> Iterator for TcpOptionsIter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Result<TcpOption<'a>>> {
        while !self.rest.is_empty() {
            match TcpOption::parse(self.rest) {
                Err(e) => {
                    self.rest = &[];
                    return Some(Err(e));
                }
                Ok((TcpOption::EndOfList, _)) => self.rest = &[],
                Ok((TcpOption::NoOperation, rest)) => self.rest = rest,
                Ok((option, rest)) => {
                    self.rest = rest;
                    return Some(Ok(option));
                }
            }
        }
        None
    }
}

impl FusedIterator for TcpOptionsIter<'_> {}

/// The Timestamps option's two values (RFC 7323 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpTimestamp {
    /// TSval: the sender's timestamp clock when it sent the segment.
    pub tsval: u32,
    /// TSecr: the most recent TSval received (meaningful iff ACK is set).
    pub tsecr: u32,
}

/// The timestamps of an option block that is exactly `NOP NOP TS` (12 bytes), the usual
/// options of an established connection's segment, read in one comparison (Linux
/// `tcp_parse_aligned_timestamp`, which `tcp_fast_parse_options` tries first). `None` for
/// any other block, which the full parse ([`Repr::parse`]) reads; for this one the full
/// parse gives the same result.
#[inline]
pub fn aligned_timestamp(options: &[u8]) -> Option<TcpTimestamp> {
    // The four leading bytes read as one word.
    const HEAD: u32 = u32::from_be_bytes([
        option_kind::NO_OPERATION,
        option_kind::NO_OPERATION,
        option_kind::TIMESTAMP,
        10,
    ]);
    let block: &[u8; 12] = options.try_into().ok()?;
    let word = |i: usize| u32::from_be_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
    (word(0) == HEAD).then(|| TcpTimestamp {
        tsval: word(4),
        tsecr: word(8),
    })
}

/// The options of a SYN or SYN-ACK whose block is exactly Linux's (and ustack's) usual
/// one, `MSS SACKOK TS NOP WS` (20 bytes, `tcp_options_write`'s order with SACK and
/// timestamps on): MSS (`None` for 0, as the full parse), TSval/TSecr and the window-scale
/// shift (clamped to [`MAX_WINDOW_SHIFT`]), read in one comparison; SACK-permitted is
/// implied. `None` for any other block, which the full parse ([`Repr::parse`]) reads; for
/// this one the full parse gives the same result. Linux parses every SYN with the full
/// loop (`tcp_parse_options`); a connection's two SYNs are where that loop's cost is.
#[inline]
pub fn aligned_syn_options(options: &[u8]) -> Option<(Option<u16>, TcpTimestamp, u8)> {
    use option_kind::*;
    let o: &[u8; 20] = options.try_into().ok()?;
    if o[..2] != [MAX_SEG_SIZE, 4]
        || o[4..8] != [SACK_PERMITTED, 2, TIMESTAMP, 10]
        || o[16..19] != [NO_OPERATION, WINDOW_SCALE, 3]
    {
        return None;
    }
    let word = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
    Some((
        Some(u16::from_be_bytes([o[2], o[3]])).filter(|&m| m != 0),
        TcpTimestamp {
            tsval: word(8),
            tsecr: word(12),
        },
        o[19].min(MAX_WINDOW_SHIFT),
    ))
}

/// A parsed, validated TCP segment.
///
/// Option fields hold what the segment carried, whatever its flags. RFC 7323 §2.2 sends the
/// Window Scale option only in `SYN` segments (and has receivers ignore it elsewhere), RFC
/// 2018 §2 the same for SACK-permitted and RFC 9293 §3.2 for MSS; acting on that is the TCP
/// layer's job (Linux `tcp_parse_options` honours MSS, window scale and SACK-permitted only
/// when `th->syn` is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port (never 0 in a parsed segment).
    pub dst_port: u16,
    /// SEG.SEQ.
    pub seq_number: SeqNumber,
    /// SEG.ACK, meaningful iff `flags` has ACK (parse keeps the raw field either way).
    pub ack_number: SeqNumber,
    /// Control bits; never SYN with FIN or RST in a parsed segment.
    pub flags: Flags,
    /// The raw (unscaled) window field, SEG.WND before the shift.
    pub window_len: u16,
    /// Urgent pointer, meaningful iff `flags` has URG (parse keeps the raw field).
    pub urgent_pointer: u16,
    /// MSS option. A received MSS of 0 is taken as absent, as Linux `tcp_parse_options`
    /// does (`if (in_mss) ...`).
    pub max_seg_size: Option<u16>,
    /// Window Scale option shift count; a received value above 14 is parsed as 14
    /// ([`MAX_WINDOW_SHIFT`]).
    pub window_scale: Option<u8>,
    /// SACK-Permitted option present.
    pub sack_permitted: bool,
    /// SACK blocks (left edge, right edge); present blocks first. On emit, blocks that do
    /// not fit the 40-byte option space are dropped from the end (see [`Repr::header_len`]).
    pub sack_ranges: [Option<(SeqNumber, SeqNumber)>; MAX_SACK_BLOCKS],
    /// Timestamps option.
    pub timestamp: Option<TcpTimestamp>,
    /// The data.
    pub payload: &'a [u8],
}

/// Option bytes of the Linux layout (all are multiples of 4, so no padding is ever needed):
/// `MSS` 4; `SACKOK TS` / `NOP NOP TS` 12; `NOP NOP SACKOK` 4; `NOP WS` 4; `NOP NOP SACK`
/// 4 + 8 per block.
const MSS_ALIGNED: usize = 4;
const TS_ALIGNED: usize = 12;
const SACKOK_ALIGNED: usize = 4;
const WS_ALIGNED: usize = 4;
const SACK_BASE_ALIGNED: usize = 4;
const SACK_PER_BLOCK: usize = 8;

impl<'a> Repr<'a> {
    /// Parse and validate a segment. `src` and `dst` are the IP addresses for the
    /// pseudo-header; the packet's buffer must be exactly the segment.
    ///
    /// Errors, in this order:
    /// - [`Error::Checksum`] if `verify_checksum` and the checksum is wrong (RFC 9293
    ///   §3.1; MUST-2/MUST-3: the checksum MUST be generated and checked);
    /// - [`Error::Malformed`] if the destination port is 0 (no socket can own port 0;
    ///   OpenBSD `tcp_input` drops it at once, smoltcp rejects it). A source port of 0 is
    ///   accepted: Linux `tcp_v4_rcv` has no port check and looks the segment up as any
    ///   other, and RFC 9293 does not forbid it;
    /// - [`Error::Malformed`] for SYN with FIN (Linux `tcp_rcv_state_process` discards it in
    ///   LISTEN with `SKB_DROP_REASON_TCP_FLAGS`) or SYN with RST (contradictory: no rule of
    ///   RFC 9293 sends both; smoltcp rejects it too. Linux drops it in LISTEN but would act
    ///   on the RST in synchronized states: this is a deliberate difference);
    ///
    /// Options are read as Linux `tcp_parse_options` reads them: a malformed option (length
    /// 0 or 1, or running past the header) ends option parsing, and the segment is kept with
    /// the options before it; a known option of the wrong length is ignored. RFC 9293 §3.2
    /// (MUST-7) asks only that an illegal length be handled.
    ///
    /// A later option of a kind seen before replaces it, as in Linux `tcp_parse_options`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &'a Packet<&'a T>,
        src: &IpAddr,
        dst: &IpAddr,
        verify_checksum: bool,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if verify_checksum && !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        if packet.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        let flags = packet.flags();
        if flags.contains(Flags::SYN) && flags.intersects(Flags::FIN | Flags::RST) {
            return Err(Error::Malformed);
        }

        let mut repr = Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags,
            window_len: packet.window_len(),
            urgent_pointer: packet.urgent_pointer(),
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: packet.payload(),
        };
        // Linux tcp_fast_parse_options / tcp_parse_aligned_timestamp: the usual options
        // of an established connection's segment are exactly NOP NOP TS, read in one
        // comparison; anything else goes through the full parse below (which gives the
        // same result for this layout).
        let options = packet.options();
        if let Some(ts) = aligned_timestamp(options) {
            repr.timestamp = Some(ts);
            return Ok(repr);
        }
        // The usual SYN's and SYN-ACK's block, likewise (see `aligned_syn_options`).
        if flags.contains(Flags::SYN)
            && let Some((mss, ts, shift)) = aligned_syn_options(options)
        {
            repr.max_seg_size = mss;
            repr.sack_permitted = true;
            repr.timestamp = Some(ts);
            repr.window_scale = Some(shift);
            return Ok(repr);
        }
        for option in TcpOptionsIter::new(options) {
            // Linux tcp_parse_options: "silly options" and "don't parse partial options"
            // return, keeping what was parsed; so does the end of the iteration here.
            let Ok(option) = option else { break };
            match option {
                TcpOption::MaxSegmentSize(0) => repr.max_seg_size = None,
                TcpOption::MaxSegmentSize(mss) => repr.max_seg_size = Some(mss),
                // RFC 7323 §2.3: "If a Window Scale option is received with a shift.cnt
                // value larger than 14, the TCP SHOULD log the error but MUST use 14
                // instead of the specified value." (Linux: tcp_parse_options, same clamp.)
                TcpOption::WindowScale(shift) => {
                    repr.window_scale = Some(shift.min(MAX_WINDOW_SHIFT))
                }
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(blocks) => {
                    repr.sack_ranges = blocks.map(|b| b.map(|(l, r)| (SeqNumber(l), SeqNumber(r))));
                }
                TcpOption::Timestamp { tsval, tsecr } => {
                    repr.timestamp = Some(TcpTimestamp { tsval, tsecr })
                }
                // The iterator never yields these two; unknown kinds are ignored (MUST-6).
                TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
            }
        }
        Ok(repr)
    }

    /// Number of SACK blocks [`Repr::emit`] writes: the present blocks of `sack_ranges`,
    /// in order, as many as fit in the option space left by the other options. As Linux
    /// `tcp_established_options` (net/ipv4/tcp_output.c): with `remaining` option bytes,
    /// none if `remaining < 4 + 8`, else `min(blocks, (remaining - 4) / 8)`, keeping the
    /// first ones (the most recent, RFC 2018 §4: "The first SACK block ... MUST specify the
    /// contiguous block of data containing the segment which triggered this ACK").
    #[inline]
    pub const fn sack_blocks_emitted(&self) -> usize {
        let mut present = 0;
        let mut i = 0;
        while i < MAX_SACK_BLOCKS {
            if self.sack_ranges[i].is_some() {
                present += 1;
            }
            i += 1;
        }
        if present == 0 {
            return 0;
        }
        let remaining = MAX_OPTIONS_LEN - self.options_len_without_sack();
        if remaining < SACK_BASE_ALIGNED + SACK_PER_BLOCK {
            return 0;
        }
        let fit = (remaining - SACK_BASE_ALIGNED) / SACK_PER_BLOCK;
        if present < fit { present } else { fit }
    }

    /// Option bytes of everything but SACK blocks (at most 24).
    #[inline]
    const fn options_len_without_sack(&self) -> usize {
        let mut len = 0;
        if self.max_seg_size.is_some() {
            len += MSS_ALIGNED;
        }
        if self.timestamp.is_some() {
            // SACK-permitted rides in the timestamp's two padding bytes.
            len += TS_ALIGNED;
        } else if self.sack_permitted {
            len += SACKOK_ALIGNED;
        }
        if self.window_scale.is_some() {
            len += WS_ALIGNED;
        }
        len
    }

    /// Header bytes [`Repr::emit`] writes: 20 plus the options in Linux's layout, always a
    /// multiple of 4 and at most 60 (SACK blocks that would not fit are dropped).
    #[inline]
    pub const fn header_len(&self) -> usize {
        let sacks = self.sack_blocks_emitted();
        let sack_len = if sacks > 0 {
            SACK_BASE_ALIGNED + SACK_PER_BLOCK * sacks
        } else {
            0
        };
        HEADER_LEN + self.options_len_without_sack() + sack_len
    }

    /// Bytes of the whole segment: [`Repr::header_len`] plus the payload.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Sequence space the segment occupies: payload, plus one for SYN, plus one for FIN
    /// (RFC 9293 §3.4, SEG.LEN).
    pub const fn segment_len(&self) -> usize {
        self.payload.len()
            + self.flags.contains(Flags::SYN) as usize
            + self.flags.contains(Flags::FIN) as usize
    }

    /// Write the whole segment (header, options, payload) and, if `fill_checksum`, the
    /// checksum over the `src`/`dst` pseudo-header.
    ///
    /// The packet's buffer must be exactly [`Repr::buffer_len`] bytes (the checksum covers
    /// the whole buffer).
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        src: &IpAddr,
        dst: &IpAddr,
        fill_checksum: bool,
    ) {
        debug_assert_eq!(packet.buffer.as_ref().len(), self.buffer_len());
        self.emit_header(packet);
        packet.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        if fill_checksum {
            packet.fill_checksum(src, dst);
        }
    }

    /// Write the header and options only, with a zero checksum; `self.payload` is not
    /// looked at. For callers that write the payload in place (from a ring buffer, say),
    /// then call [`Packet::fill_checksum`] over a buffer of exactly the segment.
    ///
    /// Options are written in the order and layout of Linux `tcp_options_write`
    /// (net/ipv4/tcp_output.c), so that captures look like Linux's:
    /// `MSS`, then `SACKOK TS` (or `NOP NOP TS` without SACK-permitted, or
    /// `NOP NOP SACKOK` without timestamps), then `NOP WS`, then `NOP NOP SACK`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::header_len`].
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        use option_kind::*;
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len(self.header_len());
        packet.set_flags(self.flags);
        packet.set_window_len(self.window_len);
        packet.set_checksum(0);
        packet.set_urgent_pointer(self.urgent_pointer);

        let sacks = self.sack_blocks_emitted();
        let mut opts: &mut [u8] = packet.options_mut();
        let mut put = |bytes: &[u8]| {
            let (head, rest) = core::mem::take(&mut opts).split_at_mut(bytes.len());
            head.copy_from_slice(bytes);
            opts = rest;
        };
        if let Some(mss) = self.max_seg_size {
            let [hi, lo] = mss.to_be_bytes();
            put(&[MAX_SEG_SIZE, 4, hi, lo]);
        }
        if let Some(ts) = self.timestamp {
            if self.sack_permitted {
                put(&[SACK_PERMITTED, 2, TIMESTAMP, 10]);
            } else {
                put(&[NO_OPERATION, NO_OPERATION, TIMESTAMP, 10]);
            }
            put(&ts.tsval.to_be_bytes());
            put(&ts.tsecr.to_be_bytes());
        } else if self.sack_permitted {
            put(&[NO_OPERATION, NO_OPERATION, SACK_PERMITTED, 2]);
        }
        if let Some(shift) = self.window_scale {
            put(&[NO_OPERATION, WINDOW_SCALE, 3, shift]);
        }
        if sacks > 0 {
            put(&[
                NO_OPERATION,
                NO_OPERATION,
                SACK,
                (2 + SACK_PER_BLOCK * sacks) as u8,
            ]);
            for (left, right) in self.sack_ranges.iter().flatten().take(sacks) {
                put(&left.0.to_be_bytes());
                put(&right.0.to_be_bytes());
            }
        }
    }
}
