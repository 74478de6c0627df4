//! ARP: [RFC 826](https://www.rfc-editor.org/rfc/rfc826), for Ethernet and IPv4 only.
//!
//! Reading list: RFC 826 ("Packet format" and "Packet Reception"), RFC 5227 (address
//! conflict detection, which gives ARP probes and announcements their meaning), Linux
//! `net/ipv4/arp.c` (`arp_rcv`, `arp_process`).
//!
//! ```text
//!  0        2        4    5    6        8
//! +--------+--------+----+----+--------+-----------+-----------+-----------+-----------+
//! | ar$hrd | ar$pro |hln |pln | ar$op  | ar$sha    | ar$spa    | ar$tha    | ar$tpa    |
//! +--------+--------+----+----+--------+-----------+-----------+-----------+-----------+
//!                                        hln bytes   pln bytes   hln bytes   pln bytes
//! ```
//!
//! The view ([`Packet`]) reads any hardware/protocol address lengths; the parsed form
//! ([`Repr`]) is Ethernet/IPv4 only, the combination ustack speaks.

use core::fmt;
use core::net::Ipv4Addr;

use crate::ethernet::{EtherType, EthernetAddress};
use crate::view::header_view;
use crate::{Error, Result};

/// Length of the fixed part (hardware type to operation), before the addresses.
pub const HEADER_LEN: usize = 8;

/// Length of an Ethernet/IPv4 ARP packet: 8 + 2 * (6 + 4). The only size [`Repr`] emits.
pub const ETHERNET_IPV4_LEN: usize = 28;

/// `ar$hrd` for Ethernet (IANA "Hardware Types": 1).
pub const HARDWARE_ETHERNET: u16 = 1;

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;

    // The address fields move with hlen and plen.
    pub const fn sha(hlen: u8, _plen: u8) -> Range<usize> {
        super::HEADER_LEN..super::HEADER_LEN + hlen as usize
    }
    pub const fn spa(hlen: u8, plen: u8) -> Range<usize> {
        let start = sha(hlen, plen).end;
        start..start + plen as usize
    }
    pub const fn tha(hlen: u8, plen: u8) -> Range<usize> {
        let start = spa(hlen, plen).end;
        start..start + hlen as usize
    }
    pub const fn tpa(hlen: u8, plen: u8) -> Range<usize> {
        let start = tha(hlen, plen).end;
        start..start + plen as usize
    }
}

/// The ARP operation (`ar$op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// `ares_op$REQUEST` = 1.
    Request,
    /// `ares_op$REPLY` = 2.
    Reply,
    /// Anything else (RARP's 3 and 4, InARP's 8 and 9, ...).
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(value: u16) -> Self {
        match value {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => Operation::Unknown(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(value: Operation) -> Self {
        match value {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(other) => other,
        }
    }
}

header_view! {
    /// A zero-copy view of an ARP packet.
    Packet;
    /// Wrap a received buffer, checking that it holds the fixed part and all four
    /// addresses at the lengths `ar$hln`/`ar$pln` give (`Err(Truncated)` otherwise).
    /// Trailing bytes (Ethernet padding to 60 bytes) are allowed and ignored.
    new_checked
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The length check behind [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b.len() < field::tpa(self.hardware_len(), self.protocol_len()).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// `ar$hrd`: the hardware type (1 for Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        self.read_u16(field::HTYPE)
    }

    /// `ar$pro`: the protocol type, an EtherType (0x0800 for IPv4).
    #[inline]
    pub fn protocol_type(&self) -> EtherType {
        EtherType::from(self.read_u16(field::PTYPE))
    }

    /// `ar$hln`: hardware address length in bytes.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// `ar$pln`: protocol address length in bytes.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// `ar$op`.
    #[inline]
    pub fn operation(&self) -> Operation {
        Operation::from(self.read_u16(field::OPER))
    }

    /// `ar$sha`: sender hardware address (`hardware_len()` bytes).
    #[inline]
    pub fn source_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[field::sha(self.hardware_len(), self.protocol_len())]
    }

    /// `ar$spa`: sender protocol address (`protocol_len()` bytes).
    #[inline]
    pub fn source_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[field::spa(self.hardware_len(), self.protocol_len())]
    }

    /// `ar$tha`: target hardware address (`hardware_len()` bytes).
    #[inline]
    pub fn target_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[field::tha(self.hardware_len(), self.protocol_len())]
    }

    /// `ar$tpa`: target protocol address (`protocol_len()` bytes).
    #[inline]
    pub fn target_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[field::tpa(self.hardware_len(), self.protocol_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set `ar$hrd`.
    #[inline]
    pub fn set_hardware_type(&mut self, value: u16) {
        self.buffer.as_mut()[field::HTYPE].copy_from_slice(&value.to_be_bytes());
    }

    /// Set `ar$pro`.
    #[inline]
    pub fn set_protocol_type(&mut self, value: EtherType) {
        self.buffer.as_mut()[field::PTYPE].copy_from_slice(&u16::from(value).to_be_bytes());
    }

    /// Set `ar$hln`. Set the lengths before the addresses: they place the address fields.
    #[inline]
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Set `ar$pln`.
    #[inline]
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Set `ar$op`.
    #[inline]
    pub fn set_operation(&mut self, value: Operation) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&u16::from(value).to_be_bytes());
    }

    /// Set `ar$sha`; `addr` must be `hardware_len()` bytes long.
    #[inline]
    pub fn set_source_hardware_addr(&mut self, addr: &[u8]) {
        let r = field::sha(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Set `ar$spa`; `addr` must be `protocol_len()` bytes long.
    #[inline]
    pub fn set_source_protocol_addr(&mut self, addr: &[u8]) {
        let r = field::spa(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Set `ar$tha`; `addr` must be `hardware_len()` bytes long.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, addr: &[u8]) {
        let r = field::tha(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }

    /// Set `ar$tpa`; `addr` must be `protocol_len()` bytes long.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, addr: &[u8]) {
        let r = field::tpa(self.hardware_len(), self.protocol_len());
        self.buffer.as_mut()[r].copy_from_slice(addr);
    }
}

/// The parsed form of an Ethernet/IPv4 ARP packet.
///
/// What a packet *means* (request for our address, gratuitous ARP, RFC 5227 probe with a
/// zero sender address) is for the neighbour code to decide; so is dropping requests for
/// loopback or multicast targets (Linux `arp_process` does that, not `arp_rcv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// `ar$op`.
    pub operation: Operation,
    /// `ar$sha`.
    pub source_hardware_addr: EthernetAddress,
    /// `ar$spa`.
    pub source_protocol_addr: Ipv4Addr,
    /// `ar$tha` (all zeros in a request: RFC 826 leaves it "don't care").
    pub target_hardware_addr: EthernetAddress,
    /// `ar$tpa`.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Parse an Ethernet/IPv4 ARP packet.
    ///
    /// RFC 826, "Packet Reception": "?Do I have the hardware type in ar$hrd? Yes: (almost
    /// definitely) [optionally check the hardware length ar$hln] ?Do I speak the protocol
    /// in ar$pro? Yes: [optionally check the protocol length ar$pln]". We do check both
    /// lengths, as Linux `arp_rcv` does (`arp->ar_hln != dev->addr_len || arp->ar_pln != 4`
    /// drops): any other hardware type, protocol type or length gives `Err(Unsupported)`.
    /// An unknown operation parses (as `Operation::Unknown`); Linux `arp_process` drops
    /// anything but request and reply, and so should the caller.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != EtherType::Ipv4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        let ipv4 = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
        Ok(Repr {
            operation: packet.operation(),
            source_hardware_addr: EthernetAddress::from_bytes(packet.source_hardware_addr()),
            source_protocol_addr: ipv4(packet.source_protocol_addr()),
            target_hardware_addr: EthernetAddress::from_bytes(packet.target_hardware_addr()),
            target_protocol_addr: ipv4(packet.target_protocol_addr()),
        })
    }

    /// Bytes `emit` writes: 28.
    pub const fn buffer_len(&self) -> usize {
        ETHERNET_IPV4_LEN
    }

    /// Write the packet into `packet`, which must hold at least 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_hardware_type(HARDWARE_ETHERNET);
        packet.set_protocol_type(EtherType::Ipv4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(&self.source_hardware_addr.0);
        packet.set_source_protocol_addr(&self.source_protocol_addr.octets());
        packet.set_target_hardware_addr(&self.target_hardware_addr.0);
        packet.set_target_protocol_addr(&self.target_protocol_addr.octets());
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operation {
            Operation::Request => write!(
                f,
                "ARP who-has {} tell {} ({})",
                self.target_protocol_addr, self.source_protocol_addr, self.source_hardware_addr
            ),
            Operation::Reply => write!(
                f,
                "ARP reply {} is-at {}",
                self.source_protocol_addr, self.source_hardware_addr
            ),
            Operation::Unknown(op) => write!(
                f,
                "ARP op {op} {} ({}) -> {} ({})",
                self.source_protocol_addr,
                self.source_hardware_addr,
                self.target_protocol_addr,
                self.target_hardware_addr
            ),
        }
    }
}
