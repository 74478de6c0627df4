//! IPv6 extension headers ([RFC 8200 §4](https://www.rfc-editor.org/rfc/rfc8200#section-4)):
//! the generic shape of Hop-by-Hop Options, Routing and Destination Options (§4.3-§4.6:
//! Next Header, Hdr Ext Len in 8-octet units not counting the first 8), their TLV options
//! (§4.2), and the Fragment header (§4.5).
//!
//! Reading list: RFC 8200 §4 (order, "MUST be processed strictly in the order they appear"),
//! §4.2 (option types: the two high bits say what to do with an unknown one), §4.4
//! (Routing: Segments Left), §4.5 (Fragment), RFC 6946 (atomic fragments), RFC 7112 (the
//! first fragment carries the whole header chain). Linux: `net/ipv6/exthdrs.c`
//! (`ip6_parse_tlv`, `ipv6_rthdr_rcv`), `net/ipv6/reassembly.c` (`ipv6_frag_rcv`).
//!
//! Call graph: the stack walks the chain from the fixed header's Next Header, viewing each
//! header with [`ExtHeader::new_checked`] (or [`FragHeader::new_checked`]), checking its
//! options with [`ExtHeader::options`], and moving on by [`ExtHeader::header_len`].

use crate::view::header_view;
use crate::{Error, IpProtocol, Result};

/// Length of the Fragment header (RFC 8200 §4.5).
pub const FRAG_HEADER_LEN: usize = 8;

header_view! {
    /// A zero-copy view of a Hop-by-Hop Options, Routing or Destination Options header
    /// (and of any header of the RFC 6564 uniform format).
    ExtHeader;
    /// A view whose accessors cannot panic: [`Error::Truncated`] if the buffer is shorter
    /// than 2 bytes or than the header's own length, `(Hdr Ext Len + 1) * 8`.
    new_checked
}

impl<T: AsRef<[u8]>> ExtHeader<T> {
    /// The length checks of [`ExtHeader::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        at_least(b, 2)?;
        at_least(b, (usize::from(b[1]) + 1) * 8)
    }

    /// Next Header: the header after this one.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        first_byte_protocol(self.buffer.as_ref())
    }

    /// Length of this header in bytes, `(Hdr Ext Len + 1) * 8`.
    #[inline]
    pub fn header_len(&self) -> usize {
        (usize::from(self.buffer.as_ref()[1]) + 1) * 8
    }

    /// Routing Type (Routing header only, byte 2).
    #[inline]
    pub fn routing_type(&self) -> u8 {
        self.buffer.as_ref()[2]
    }

    /// Segments Left (Routing header only, byte 3).
    #[inline]
    pub fn segments_left(&self) -> u8 {
        self.buffer.as_ref()[3]
    }

    /// The TLV-encoded options of a Hop-by-Hop or Destination Options header (RFC 8200
    /// §4.2), after the two fixed bytes.
    pub fn options(&self) -> Options<'_> {
        Options {
            data: &self.buffer.as_ref()[2..self.header_len()],
            at: 2,
        }
    }
}

/// `Err(Truncated)` if `b` is shorter than `n` bytes.
fn at_least(b: &[u8], n: usize) -> Result<()> {
    if b.len() < n {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

/// Every extension header starts with its Next Header byte.
#[inline]
fn first_byte_protocol(b: &[u8]) -> IpProtocol {
    IpProtocol::from(b[0])
}

/// One TLV option (RFC 8200 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt<'a> {
    /// Option Type; Pad1 (0) and PadN (1) are yielded too.
    pub kind: u8,
    /// Option Data.
    pub data: &'a [u8],
    /// Offset of the option's type byte from the start of its extension header (for a
    /// Parameter Problem's pointer).
    pub offset: usize,
}

impl Opt<'_> {
    /// What RFC 8200 §4.2 says to do with an option of this type the node does not
    /// recognise, from its two high-order bits: 0 skip, 1 discard, 2 discard and send a
    /// Parameter Problem code 2, 3 the same unless the destination was multicast.
    pub const fn unknown_action(&self) -> u8 {
        self.kind >> 6
    }
}

/// Iterator over the options of an extension header; yields `Err(Malformed)` once (and
/// then stops) if an option runs past the end of the header.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<Opt<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, rest) = self.data.split_first()?;
        let offset = self.at;
        if kind == 0 {
            // Pad1: "a single octet of padding", no length or data.
            self.data = rest;
            self.at += 1;
            return Some(Ok(Opt {
                kind,
                data: &[],
                offset,
            }));
        }
        let Some((&len, rest)) = rest.split_first() else {
            self.data = &[];
            return Some(Err(Error::Malformed));
        };
        let len = usize::from(len);
        if rest.len() < len {
            self.data = &[];
            return Some(Err(Error::Malformed));
        }
        let (data, rest) = rest.split_at(len);
        self.data = rest;
        self.at += 2 + len;
        Some(Ok(Opt { kind, data, offset }))
    }
}

header_view! {
    /// A zero-copy view of a Fragment header (RFC 8200 §4.5).
    FragHeader;
    /// A view whose accessors cannot panic: [`Error::Truncated`] if shorter than 8 bytes.
    new_checked
}

impl<T: AsRef<[u8]>> FragHeader<T> {
    /// The length check of [`FragHeader::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        at_least(self.buffer.as_ref(), FRAG_HEADER_LEN)
    }

    /// Next Header of the fragmentable part.
    #[inline]
    pub fn next_header(&self) -> IpProtocol {
        first_byte_protocol(self.buffer.as_ref())
    }

    /// Fragment Offset, in bytes (the field counts 8-octet units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.read_u16(2..4) & !7
    }

    /// The M flag: more fragments follow.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[3] & 1 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        self.read_u32(4..8)
    }
}

/// A parsed Fragment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragRepr {
    /// Next Header of the fragmentable part.
    pub next_header: IpProtocol,
    /// Offset of this fragment's data, in bytes (a multiple of 8).
    pub offset: u16,
    /// M flag.
    pub more_frags: bool,
    /// Identification.
    pub ident: u32,
}

impl FragRepr {
    /// Parse a Fragment header. The reserved fields are ignored, as RFC 8200 §4.5 says
    /// ("ignored on reception").
    pub fn parse<T: AsRef<[u8]> + ?Sized>(h: &FragHeader<&T>) -> Result<FragRepr> {
        h.check_len()?;
        Ok(FragRepr {
            next_header: h.next_header(),
            offset: h.frag_offset(),
            more_frags: h.more_frags(),
            ident: h.ident(),
        })
    }

    /// Bytes [`FragRepr::emit`] writes: 8.
    pub const fn buffer_len(&self) -> usize {
        FRAG_HEADER_LEN
    }

    /// Write the header into the first 8 bytes of `buf` (reserved fields zero). `offset`
    /// must be a multiple of 8 (its low 3 bits are dropped).
    ///
    /// # Panics
    /// If `buf` is shorter than 8 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        buf[0] = self.next_header.into();
        buf[1] = 0;
        let off = (self.offset & !7) | u16::from(self.more_frags);
        buf[2..4].copy_from_slice(&off.to_be_bytes());
        buf[4..8].copy_from_slice(&self.ident.to_be_bytes());
    }
}
