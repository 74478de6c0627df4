//! Wire formats for ustack.
//!
//! Every header comes as two types (the smoltcp pattern):
//! - `Packet<T: AsRef<[u8]>>`, a zero-copy *view* over a buffer with one-line field
//!   accessors (and setters when `T: AsMut<[u8]>`). `Packet::new_checked` verifies that the
//!   buffer is long enough for every accessor, so accessors never panic on a checked view.
//! - `Repr`, the *parsed form*: validated, normalised, and what protocol code works with.
//!   `Repr::parse` reads a checked view, `Repr::buffer_len` says how many bytes `emit`
//!   writes, `Repr::emit` writes the header into a view.
//!
//! Parsers return [`Error`], a small enum with no payload: the caller turns it into a
//! counted drop reason (see `ustack-obs`). No parser panics on any input; property tests
//! and fuzz targets check that.
//!
//! Reading list: RFC 791 (IPv4), RFC 826 (ARP), RFC 792 (ICMPv4), RFC 768 (UDP),
//! RFC 9293 (TCP), RFC 7323 (window scale, timestamps), RFC 2018 (SACK), RFC 8200 (IPv6),
//! RFC 4443 (ICMPv6), RFC 4861 (Neighbor Discovery), RFC 1071 and RFC 1624 (checksums).
//! Where to start: each protocol's module ([`tcp`], [`udp`], [`ipv4`], [`ethernet`], ...)
//! has its `Packet` view and `Repr`; [`checksum`] and [`SeqNumber`] are shared by all.
//! Reading a TCP SYN from bytes, as the stack does:
//!
//! ```
//! use core::net::{IpAddr, Ipv4Addr};
//! use ustack_wire::tcp::{Flags, Packet, Repr};
//!
//! let syn = [
//!     0xc0, 0x00, 0x00, 0x50, // source port 49152, destination port 80
//!     0, 0, 0, 1, 0, 0, 0, 0, // sequence number 1, acknowledgment number 0
//!     0x60, 0x02, 0xff, 0xff, // data offset 6 words, SYN, window 65535
//!     0, 0, 0, 0, // checksum (not verified here), urgent pointer
//!     2, 4, 0x05, 0xb4, // MSS option: 1460
//! ];
//! let packet = Packet::new_checked(&syn[..]).expect("long enough");
//! let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
//! let repr = Repr::parse(&packet, &ip, &ip, false).expect("a valid segment");
//! assert_eq!((repr.src_port, repr.dst_port), (49152, 80));
//! assert!(repr.flags.contains(Flags::SYN));
//! assert_eq!(repr.max_seg_size, Some(1460));
//! // Bad input is an error, never a panic.
//! assert!(Packet::new_checked(&syn[..10]).is_err());
//! ```

mod view;

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6ext;
pub mod ndisc;
pub mod seq;
pub mod tcp;
pub mod udp;

mod error;

pub use error::{Error, Result};
pub use ethernet::EthernetAddress;
pub use seq::SeqNumber;

/// What a link's frames carry, i.e. where the stack's input starts: Ethernet frames (sim,
/// shm, AF_PACKET, AF_XDP) or bare IP packets (TUN). Shared by the stack and the devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Ethernet II frames: 14-byte header (destination, source, EtherType), no FCS.
    Ethernet,
    /// Bare IP packets, no link-layer header (a TUN device).
    Ip,
}

impl Medium {
    /// Bytes of link-layer header in front of the IP packet: 14 for Ethernet, 0 for IP.
    pub const fn header_len(self) -> usize {
        match self {
            Medium::Ethernet => ethernet::HEADER_LEN,
            Medium::Ip => 0,
        }
    }
}

/// IP protocol numbers (the IANA "Protocol Numbers" registry) that ustack knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    HopByHop,
    Icmp,
    Tcp,
    Udp,
    Ipv6Route,
    Ipv6Frag,
    Icmpv6,
    Ipv6NoNxt,
    Ipv6Opts,
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(value: u8) -> Self {
        match value {
            0 => IpProtocol::HopByHop,
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            43 => IpProtocol::Ipv6Route,
            44 => IpProtocol::Ipv6Frag,
            58 => IpProtocol::Icmpv6,
            59 => IpProtocol::Ipv6NoNxt,
            60 => IpProtocol::Ipv6Opts,
            other => IpProtocol::Unknown(other),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(value: IpProtocol) -> Self {
        match value {
            IpProtocol::HopByHop => 0,
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Ipv6Route => 43,
            IpProtocol::Ipv6Frag => 44,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Ipv6NoNxt => 59,
            IpProtocol::Ipv6Opts => 60,
            IpProtocol::Unknown(other) => other,
        }
    }
}
