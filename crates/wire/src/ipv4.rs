//! IPv4: [RFC 791](https://www.rfc-editor.org/rfc/rfc791) §3.1, with the receive checks of
//! [RFC 1122 §3.2.1](https://www.rfc-editor.org/rfc/rfc1122#section-3.2.1) and the
//! DSCP/ECN split of the old TOS byte ([RFC 2474](https://www.rfc-editor.org/rfc/rfc2474),
//! [RFC 3168](https://www.rfc-editor.org/rfc/rfc3168)).
//!
//! Reading list: RFC 791 §3.1 (header) and §3.2 (fragmentation), RFC 1122 §3.2.1, RFC 6864
//! (the Identification field), Linux `net/ipv4/ip_input.c` (`ip_rcv_core`: the order of the
//! receive checks and which counter each bumps).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |    DSCP   |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |0|D|M|      Fragment Offset    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Options (IHL > 5)                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Receive: `Packet::new_checked(bytes)?` (lengths), `Repr::parse(&packet, true)?` (version,
//! checksum, flags), then `packet.payload()`. Which [`Error`] maps to which Linux counter is
//! spelled out on [`Packet::new_checked`] and [`Repr::parse`].

use core::fmt;
use core::net::Ipv4Addr;

use crate::view::header_view;
use crate::{Error, IpProtocol, Result, checksum};

/// Length of the header without options (IHL = 5).
pub const HEADER_LEN: usize = 20;

/// Longest header: IHL = 15, 40 bytes of options.
pub const MAX_HEADER_LEN: usize = 60;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// Flag bits of the 16-bit flags/fragment-offset word (Linux `include/net/ip.h` names
/// them `IP_CE`, `IP_DF`, `IP_MF`, `IP_OFFSET`).
const FLAG_RESERVED: u16 = 0x8000;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

header_view! {
    /// A zero-copy view of an IPv4 packet.
    Packet;
    /// Wrap a received buffer after the length checks that make every accessor safe:
    ///
    /// | condition                        | error       | Linux `ip_rcv_core` counts    |
    /// |----------------------------------|-------------|-------------------------------|
    /// | buffer shorter than 20 bytes     | `Truncated` | InHdrErrors (`pskb_may_pull`) |
    /// | IHL < 5                          | `Malformed` | InHdrErrors                   |
    /// | buffer shorter than IHL * 4      | `Truncated` | InHdrErrors (`pskb_may_pull`) |
    /// | total length > buffer            | `Truncated` | InTruncatedPkts               |
    /// | total length < IHL * 4           | `Malformed` | InHdrErrors                   |
    ///
    /// So `Truncated` means "shorter than a length field says": a caller that copies
    /// Linux's counters maps `Truncated` to InTruncatedPkts only when the buffer held the
    /// whole header (`len >= 20 && len >= header_len()`), to InHdrErrors otherwise. (Linux
    /// also verifies the header checksum before comparing the total length; a packet both
    /// truncated and corrupt is counted as truncated here.) Bytes beyond the total length
    /// (Ethernet padding) are allowed and ignored.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length checks behind [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < header_len {
            return Err(Error::Truncated);
        }
        let total_len = self.total_len() as usize;
        if total_len > len {
            return Err(Error::Truncated);
        }
        if total_len < header_len {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    #[inline]
    fn read_addr(&self, at: core::ops::Range<usize>) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[at];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The version field (4 for IPv4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL * 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) as usize * 4
    }

    /// The Differentiated Services code point (RFC 2474 §3): the top 6 bits of the old TOS.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// The ECN codepoint (RFC 3168 §5): the bottom 2 bits of the old TOS.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// The whole second byte, `dscp << 2 | ecn` (Linux `iph->tos`).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Total length of the datagram, header included.
    #[inline]
    pub fn total_len(&self) -> u16 {
        self.read_u16(field::LENGTH)
    }

    /// The Identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        self.read_u16(field::IDENT)
    }

    /// Flag bit 0, "reserved, must be zero" (RFC 791 §3.1).
    #[inline]
    pub fn reserved_flag(&self) -> bool {
        self.read_u16(field::FLG_OFF) & FLAG_RESERVED != 0
    }

    /// The Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.read_u16(field::FLG_OFF) & FLAG_DF != 0
    }

    /// The More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.read_u16(field::FLG_OFF) & FLAG_MF != 0
    }

    /// The fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.read_u16(field::FLG_OFF) & OFFSET_MASK) << 3
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The Protocol field: what the payload is.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// The header checksum as stored.
    #[inline]
    pub fn checksum(&self) -> u16 {
        self.read_u16(field::CHECKSUM)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        self.read_addr(field::SRC_ADDR)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        self.read_addr(field::DST_ADDR)
    }

    /// The options, raw (empty when IHL = 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: from the end of the header to the total length (not to the end of
    /// the buffer, which may carry link-layer padding).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }

    /// Whether the header checksum verifies: "The checksum field is the 16 bit one's
    /// complement of the one's complement sum of all 16 bit words in the header"
    /// (RFC 791 §3.1), so a correct header, options included, sums to all ones.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..self.header_len()]) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the version field.
    #[inline]
    pub fn set_version(&mut self, version: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (version << 4);
    }

    /// Set the header length in bytes (a multiple of 4, 20 to 60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        debug_assert!(len.is_multiple_of(4) && (HEADER_LEN..=MAX_HEADER_LEN).contains(&len));
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    /// Set the DSCP (6 bits).
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (dscp << 2);
    }

    /// Set the ECN codepoint (2 bits).
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (ecn & 0x03);
    }

    /// Set the whole DSCP/ECN byte.
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = tos;
    }

    /// Set the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        self.write_u16(field::LENGTH, len)
    }

    /// Set the Identification field.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        self.write_u16(field::IDENT, ident)
    }

    /// Set the flags and offset at once: `frag_offset` in bytes, a multiple of 8. The
    /// reserved bit is written as zero (RFC 791 §3.1: "must be zero").
    #[inline]
    pub fn set_flags_and_offset(&mut self, dont_frag: bool, more_frags: bool, frag_offset: u16) {
        debug_assert!(
            frag_offset.is_multiple_of(8),
            "fragment offset {frag_offset} is not a multiple of 8"
        );
        let mut word = frag_offset >> 3;
        if dont_frag {
            word |= FLAG_DF;
        }
        if more_frags {
            word |= FLAG_MF;
        }
        self.write_u16(field::FLG_OFF, word)
    }

    /// Set the Don't Fragment flag, leaving the other bits alone.
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        let w = self.read_u16(field::FLG_OFF);
        self.write_u16(
            field::FLG_OFF,
            if value { w | FLAG_DF } else { w & !FLAG_DF },
        )
    }

    /// Set the More Fragments flag, leaving the other bits alone.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        let w = self.read_u16(field::FLG_OFF);
        self.write_u16(
            field::FLG_OFF,
            if value { w | FLAG_MF } else { w & !FLAG_MF },
        )
    }

    /// Set the reserved flag bit (only tests have a reason to).
    #[inline]
    pub fn set_reserved_flag(&mut self, value: bool) {
        let w = self.read_u16(field::FLG_OFF);
        self.write_u16(
            field::FLG_OFF,
            if value {
                w | FLAG_RESERVED
            } else {
                w & !FLAG_RESERVED
            },
        )
    }

    /// Set the fragment offset in bytes (a multiple of 8), leaving the flags alone.
    #[inline]
    pub fn set_frag_offset(&mut self, offset: u16) {
        debug_assert!(
            offset.is_multiple_of(8),
            "fragment offset {offset} is not a multiple of 8"
        );
        let w = self.read_u16(field::FLG_OFF);
        self.write_u16(field::FLG_OFF, (w & !OFFSET_MASK) | (offset >> 3))
    }

    /// Set the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Set the Protocol field.
    #[inline]
    pub fn set_next_header(&mut self, protocol: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = protocol.into();
    }

    /// Store a checksum value as is.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        self.write_u16(field::CHECKSUM, value)
    }

    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The payload (up to the total length), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[start..end]
    }

    /// Compute and store the header checksum (RFC 791 §3.1: "For purposes of computing
    /// the checksum, the value of the checksum field is zero").
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(checksum::finish(sum));
    }
}

/// The parsed form of an IPv4 header. Options are not represented: parse skips them,
/// emit never writes any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub next_header: IpProtocol,
    /// Payload length: total length minus header length.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// The DSCP/ECN byte, `dscp << 2 | ecn`.
    pub tos: u8,
    /// Identification (RFC 791 §3.1; RFC 6864 §4 for its use on atomic datagrams).
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// More Fragments.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8, at most 65528).
    pub frag_offset: u16,
}

impl Repr {
    /// The header of an atomic datagram (RFC 6864 §4: DF set, not a fragment,
    /// identification 0) with TTL 64 and TOS 0: what a test or a traffic generator sends.
    pub const fn atomic(
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        next_header: IpProtocol,
        payload_len: usize,
    ) -> Repr {
        Repr {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
        }
    }

    /// Parse a header, after the same length checks as [`Packet::new_checked`].
    ///
    /// - Version not 4: `Malformed`. RFC 1122 §3.2.1.1: "A datagram whose version number
    ///   is not 4 MUST be silently discarded." (Linux: InHdrErrors.)
    /// - Checksum wrong (when `verify_checksum`): `Checksum`. RFC 1122 §3.2.1.2: "A host
    ///   MUST verify the IP header checksum on every received datagram and silently
    ///   discard every datagram that has a bad checksum." (Linux: InCsumErrors and
    ///   InHdrErrors.) Pass `false` only when the device verified it.
    /// - Reserved flag set: accepted. RFC 791 §3.1 makes it "must be zero" for senders
    ///   and RFC 1122 does not ask receivers to drop it; Linux names the bit `IP_CE`
    ///   (`include/net/ip.h`) but never tests it on receive (`ip_rcv_core` and
    ///   `ip_frag_queue` only look at `IP_MF | IP_OFFSET`), and ustack does the same.
    /// - Options are skipped, not rejected: the header length accounts for them and the
    ///   payload starts after them (Linux parses them in `ip_options_compile`; we act on
    ///   none).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&T>,
        verify_checksum: bool,
    ) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        if verify_checksum && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.total_len() as usize - packet.header_len(),
            ttl: packet.ttl(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            frag_offset: packet.frag_offset(),
        })
    }

    /// Header bytes `emit` writes: always 20 (no options).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Whether this header describes a fragment rather than a whole datagram (Linux
    /// `ip_is_fragment`: MF set or a non-zero offset).
    pub const fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Write the 20-byte header into `packet` (which must hold at least 20 bytes; the
    /// payload is left untouched). `payload_len` must be at most 65515 and `frag_offset`
    /// a multiple of 8. With `fill_checksum` false the checksum field is zeroed, for a
    /// device that computes it.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        fill_checksum: bool,
    ) {
        debug_assert!(
            self.payload_len <= u16::MAX as usize - HEADER_LEN,
            "IPv4 payload too long"
        );
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN);
        packet.set_tos(self.tos);
        packet.set_total_len((HEADER_LEN + self.payload_len) as u16);
        packet.set_ident(self.ident);
        packet.set_flags_and_offset(self.dont_frag, self.more_frags, self.frag_offset);
        packet.set_ttl(self.ttl);
        packet.set_next_header(self.next_header);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        if fill_checksum {
            packet.fill_checksum();
        } else {
            packet.set_checksum(0);
        }
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv4 {} > {} proto {} len {} ttl {} id {}",
            self.src_addr,
            self.dst_addr,
            u8::from(self.next_header),
            self.payload_len,
            self.ttl,
            self.ident
        )?;
        if self.dont_frag {
            f.write_str(" DF")?;
        }
        if self.is_fragment() {
            write!(
                f,
                " frag {}{}",
                self.frag_offset,
                if self.more_frags { "+" } else { "" }
            )?;
        }
        Ok(())
    }
}
