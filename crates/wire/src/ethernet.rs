//! Ethernet II frames (IEEE 802.3 with an EtherType; no FCS: devices strip it).
//! TO BE WRITTEN by the wire helper; EthernetAddress is part of the fixed contract.

use core::fmt;

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    pub fn from_bytes(b: &[u8]) -> EthernetAddress {
        let mut a = [0u8; 6];
        a.copy_from_slice(&b[..6]);
        EthernetAddress(a)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }
    /// The group bit (I/G) of the first octet: multicast or broadcast.
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
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
