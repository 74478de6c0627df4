//! Generators shared by the TCP/IPv6 property and cross-check tests.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use ustack_wire::SeqNumber;
use ustack_wire::tcp::{self, Flags, TcpTimestamp};

/// TCP fields of a Repr, owned (the payload lives in the test).
#[derive(Debug, Clone)]
pub struct TcpFields {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub urgent: u16,
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack_permitted: bool,
    pub sacks: Vec<(u32, u32)>,
    pub timestamp: Option<(u32, u32)>,
    pub payload: Vec<u8>,
}

impl TcpFields {
    pub fn repr(&self) -> tcp::Repr<'_> {
        let mut sack_ranges = [None; 4];
        for (slot, &(l, r)) in sack_ranges.iter_mut().zip(&self.sacks) {
            *slot = Some((SeqNumber(l), SeqNumber(r)));
        }
        tcp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            seq_number: SeqNumber(self.seq),
            ack_number: SeqNumber(self.ack),
            flags: Flags(self.flags),
            window_len: self.window,
            urgent_pointer: self.urgent,
            max_seg_size: self.mss,
            window_scale: self.ws,
            sack_permitted: self.sack_permitted,
            sack_ranges,
            timestamp: self
                .timestamp
                .map(|(tsval, tsecr)| TcpTimestamp { tsval, tsecr }),
            payload: &self.payload,
        }
    }
}

/// Flags a parser accepts: SYN never with FIN or RST.
pub fn valid_flags() -> impl Strategy<Value = u8> {
    any::<u8>().prop_filter("SYN with FIN or RST is malformed", |f| {
        f & 0x02 == 0 || f & 0x05 == 0
    })
}

prop_compose! {
    /// Any valid segment: window scale up to `max_ws`, payload shorter than `max_payload`.
    pub fn tcp_fields(max_ws: u8, max_payload: usize)(
        src_port in any::<u16>(),
        dst_port in 1..=u16::MAX,
        seq in any::<u32>(),
        ack in any::<u32>(),
        flags in valid_flags(),
        window in any::<u16>(),
        urgent in any::<u16>(),
        mss in option::of(1..=u16::MAX),
        ws in option::of(0..=max_ws),
        sack_permitted in any::<bool>(),
        sacks in vec((any::<u32>(), any::<u32>()), 0..=4),
        timestamp in option::of((any::<u32>(), any::<u32>())),
        payload in vec(any::<u8>(), 0..max_payload),
    ) -> TcpFields {
        TcpFields { src_port, dst_port, seq, ack, flags, window, urgent, mss, ws, sack_permitted,
                    sacks, timestamp, payload }
    }
}

/// A source and destination of the same family, IPv4 or IPv6.
pub fn ip_pair() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<[u8; 16]>(), any::<[u8; 16]>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}
