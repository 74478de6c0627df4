//! Receive-side scaling: which shard owns a flow.
//!
//! A flow belongs to the shard picked by the Toeplitz hash of its 4-tuple (IPv4 or IPv6), looked up in
//! an indirection table, exactly as a NIC with RSS picks a receive queue; the same function
//! run in software covers devices that have one queue. Outbound connections choose their
//! local port so that the replies hash back to the shard that opened them (Seastar's
//! approach, `include/seastar/net/toeplitz.hh` and `tcp.hh`'s `connect`).
//!
//! # The hash
//!
//! Microsoft's RSS specification, "RSS Hashing Functions"
//! (<https://learn.microsoft.com/windows-hardware/drivers/network/rss-hashing-functions>):
//!
//! ```text
//! ComputeHash(input[], n)
//! result = 0
//! For each bit b in input[] from left to right
//! {
//!   if (b == 1) result ^= (left-most 32 bits of K)
//!   shift K left 1 bit position
//! }
//! return result
//! ```
//!
//! with a 40-byte secret key `K`. The input for IPv4 with TCP (and, as Intel's controllers
//! define `UdpIPv4`, with UDP) is "SourceAddress, DestinationAddress, SourcePort,
//! DestinationPort ... preserving the order in which they occurred in the packet":
//! `Input[12] = @12-15, @16-19, @20-21, @22-23`. Without ports (other protocols, and every
//! fragment — "For fragmented IP packets, NDIS_HASH_IPV4 must be used. This includes the
//! first fragment which contains both IP and TCP headers", "RSS Hashing Types") it is the
//! two addresses, `Input[8]`.
//!
//! The hash is linear over XOR in its input: `hash(x ^ y) == hash(x) ^ hash(y)`. That is
//! what [`RssKey::SYMMETRIC`] relies on (a key with a 16-bit period gives swapped
//! addresses and swapped ports the same contribution, so both directions of a flow hash
//! alike: Woo and Park, "Scalable TCP Session Monitoring with Symmetric Receive-side
//! Scaling", 2012), and what [`pick_local_port`] uses to try a port in 16 steps instead of 96.
//!
//! # The indirection table
//!
//! "The RETA indirection table is a 128-entry structure, indexed by the seven LSB bits of
//! the hash function output" (Intel I210 datasheet §7.1.2.10.2; the 82599 and Linux's
//! `ethtool -X` are the same). [`Reta::new`] fills it round-robin as Linux's
//! `ethtool_rxfh_indir_default()` does (`index % n_rx_rings`).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::ops::RangeInclusive;

use ustack_dev::Medium;

/// Bytes in an RSS secret key (320 bits: enough for the 36-byte IPv6 4-tuple plus 4).
pub const KEY_LEN: usize = 40;

/// Entries in the indirection table (NIC RETA): indexed by the hash's 7 low bits.
pub const RETA_SIZE: usize = 128;

/// A Toeplitz hash key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RssKey(pub [u8; KEY_LEN]);

impl Default for RssKey {
    /// [`RssKey::MICROSOFT`].
    fn default() -> Self {
        RssKey::MICROSOFT
    }
}

impl RssKey {
    /// The key of Microsoft's RSS verification suite, also the default key of many NIC
    /// drivers (Intel's among them) and of DPDK's test suite.
    pub const MICROSOFT: RssKey = RssKey([
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ]);

    /// `0x6d5a` repeated: a key with a 16-bit period, so that
    /// `hash(a, b, pa, pb) == hash(b, a, pb, pa)` and both directions of a flow land on one
    /// shard. It keeps 16 bits of entropy per position instead of 32, which spreads flows
    /// well enough over a 128-entry table.
    pub const SYMMETRIC: RssKey = RssKey([
        0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d,
        0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
        0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    ]);

    /// The Toeplitz hash of `input` under this key (see [`toeplitz`]).
    pub fn hash(&self, input: &[u8]) -> u32 {
        toeplitz(&self.0, input)
    }

    /// The hash of an IPv4 4-tuple as a receiver sees it: `src` is the packet's source
    /// (the remote end, for a packet arriving at this host), `dst` its destination.
    pub fn hash_v4(&self, src: SocketAddrV4, dst: SocketAddrV4) -> u32 {
        self.hash(&tuple_v4(src, dst))
    }

    /// The hash of the IPv4 address pair alone (the spec's "IPv4 without TCP").
    pub fn hash_v4_addrs(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u32 {
        let mut input = [0u8; 8];
        input[..4].copy_from_slice(&src.octets());
        input[4..].copy_from_slice(&dst.octets());
        self.hash(&input)
    }

    /// The hash of an IPv6 4-tuple as a receiver sees it (the spec's "IPv6 with TCP":
    /// "Concatenate SourceAddress, DestinationAddress, SourcePort, DestinationPort",
    /// `Input[36]`).
    pub fn hash_v6(&self, src: SocketAddrV6, dst: SocketAddrV6) -> u32 {
        let mut input = [0u8; 36];
        input[..16].copy_from_slice(&src.ip().octets());
        input[16..32].copy_from_slice(&dst.ip().octets());
        input[32..34].copy_from_slice(&src.port().to_be_bytes());
        input[34..].copy_from_slice(&dst.port().to_be_bytes());
        self.hash(&input)
    }

    /// The hash of the IPv6 address pair alone (the spec's "IPv6 only", `Input[32]`).
    pub fn hash_v6_addrs(&self, src: Ipv6Addr, dst: Ipv6Addr) -> u32 {
        let mut input = [0u8; 32];
        input[..16].copy_from_slice(&src.octets());
        input[16..].copy_from_slice(&dst.octets());
        self.hash(&input)
    }

    /// The hash of a 4-tuple of either family as a receiver sees it: [`RssKey::hash_v4`]
    /// when both ends are IPv4 (or IPv4-mapped IPv6, `::ffff:a.b.c.d`: such a connection
    /// goes over IPv4, Linux `tcp_v6_connect`), [`RssKey::hash_v6`] otherwise (an IPv4 end
    /// beside an IPv6 one is taken v4-mapped; no packet carries such a pair).
    pub fn hash_tuple(&self, src: SocketAddr, dst: SocketAddr) -> u32 {
        match (v4_of(src), v4_of(dst)) {
            (Some(s), Some(d)) => self.hash_v4(s, d),
            _ => self.hash_v6(v6_of(src), v6_of(dst)),
        }
    }

    /// What the destination port adds to the hash: input bits 80..96 of the IPv4 4-tuple,
    /// or 272..288 of the IPv6 one (`v6`).
    fn dst_port_term(&self, port: u16, v6: bool) -> u32 {
        let mut input = [0u8; 36];
        let at = if v6 { 34 } else { 10 };
        input[at..at + 2].copy_from_slice(&port.to_be_bytes());
        self.hash(&input[..at + 2])
    }
}

/// `a` as IPv4, if it is IPv4 or IPv4-mapped IPv6.
fn v4_of(a: SocketAddr) -> Option<SocketAddrV4> {
    match a {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

/// `a` as IPv6 (an IPv4 address v4-mapped).
fn v6_of(a: SocketAddr) -> SocketAddrV6 {
    match a {
        SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
        SocketAddr::V6(a) => a,
    }
}

/// The 12-byte hash input of an IPv4 4-tuple: source address, destination address, source
/// port, destination port, in network byte order.
fn tuple_v4(src: SocketAddrV4, dst: SocketAddrV4) -> [u8; 12] {
    let mut input = [0u8; 12];
    input[..4].copy_from_slice(&src.ip().octets());
    input[4..8].copy_from_slice(&dst.ip().octets());
    input[8..10].copy_from_slice(&src.port().to_be_bytes());
    input[10..].copy_from_slice(&dst.port().to_be_bytes());
    input
}

/// The Toeplitz hash of `input` under `key`, bit for bit as Microsoft's `ComputeHash`: for
/// each input bit from the most significant bit of `input[0]`, XOR in the 32 key bits that
/// start at that bit's position. Key bits past the end of `key` count as zero, so a key
/// should be at least `input.len() + 4` bytes (40 covers IPv6).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_byte = |i: usize| u64::from(key.get(i).copied().unwrap_or(0));
    let mut hash = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        // The 40 key bits starting at this byte's first bit: the window for bit `b`
        // (0 = most significant) is bits 39-b down to 8-b.
        let k = (key_byte(i) << 32)
            | (key_byte(i + 1) << 24)
            | (key_byte(i + 2) << 16)
            | (key_byte(i + 3) << 8)
            | key_byte(i + 4);
        for b in 0..8 {
            let bit = u32::from((byte >> (7 - b)) & 1);
            hash ^= ((k >> (8 - b)) as u32) & bit.wrapping_neg();
        }
    }
    hash
}

/// Which fields a packet's hash covered, as NDIS names the hash types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashType {
    /// `NDIS_HASH_IPV4`: the two addresses (fragments, and protocols without ports).
    Ipv4,
    /// `NDIS_HASH_TCP_IPV4`: addresses and TCP ports.
    TcpIpv4,
    /// `NDIS_HASH_UDP_IPV4`: addresses and UDP ports.
    UdpIpv4,
    /// `NDIS_HASH_IPV6`: the two addresses.
    Ipv6,
    /// `NDIS_HASH_TCP_IPV6`: addresses and TCP ports.
    TcpIpv6,
    /// `NDIS_HASH_UDP_IPV6`: addresses and UDP ports.
    UdpIpv6,
}

/// The RSS hash of a received IPv4 packet (starting at its IP header) and the fields it
/// covered; `None` if it is not an IPv4 packet with a sound header, which a NIC would not
/// hash either ("if the NIC cannot interpret the received data correctly, it must not
/// compute the hash value", "RSS Hashing Types") and sends to queue 0.
///
/// TCP and UDP use the 4-tuple unless the packet is a fragment (MF set or a non-zero
/// offset) or too short to hold the ports; everything else uses the address pair. IP
/// options are skipped by the header length.
pub fn hash_ipv4_packet(key: &RssKey, packet: &[u8]) -> Option<(u32, HashType)> {
    let (&vihl, _) = packet.split_first()?;
    let ihl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || ihl < 20 || packet.len() < ihl {
        return None;
    }
    let frag = u16::from_be_bytes([packet[6], packet[7]]);
    let fragment = frag & 0x3fff != 0; // MF or a fragment offset
    let kind = match packet[9] {
        6 => HashType::TcpIpv4,
        17 => HashType::UdpIpv4,
        _ => HashType::Ipv4,
    };
    let ports = packet.get(ihl..ihl + 4).filter(|_| !fragment);
    match (kind, ports) {
        (HashType::TcpIpv4 | HashType::UdpIpv4, Some(ports)) => {
            let mut input = [0u8; 12];
            input[..8].copy_from_slice(&packet[12..20]);
            input[8..].copy_from_slice(ports);
            Some((key.hash(&input), kind))
        }
        _ => Some((key.hash(&packet[12..20]), HashType::Ipv4)),
    }
}

/// The RSS hash of a received IPv6 packet (starting at its header) and the fields it
/// covered; `None` if it is not IPv6 or shorter than its header. TCP and UDP right after
/// the fixed header use the 4-tuple; any extension header first (a Fragment header among
/// them) and other protocols use the address pair ("RSS Hashing Types": the `_EX` types
/// that look past extension headers are not implemented, as a NIC may leave them out).
pub fn hash_ipv6_packet(key: &RssKey, packet: &[u8]) -> Option<(u32, HashType)> {
    if packet.len() < 40 || packet[0] >> 4 != 6 {
        return None;
    }
    let kind = match packet[6] {
        6 => HashType::TcpIpv6,
        17 => HashType::UdpIpv6,
        _ => HashType::Ipv6,
    };
    match (kind, packet.get(40..44)) {
        (HashType::TcpIpv6 | HashType::UdpIpv6, Some(ports)) => {
            let mut input = [0u8; 36];
            input[..32].copy_from_slice(&packet[8..40]);
            input[32..].copy_from_slice(ports);
            Some((key.hash(&input), kind))
        }
        _ => Some((key.hash(&packet[8..40]), HashType::Ipv6)),
    }
}

/// The RSS hash of a received frame: an Ethernet II frame carrying IPv4 or IPv6
/// (EtherType 0x0800 or 0x86dd, no VLAN tag) or a bare IP packet, per `medium`. See
/// [`hash_ipv4_packet`] and [`hash_ipv6_packet`].
pub fn hash_frame(key: &RssKey, frame: &[u8], medium: Medium) -> Option<(u32, HashType)> {
    match medium {
        Medium::Ip => match frame.first()? >> 4 {
            6 => hash_ipv6_packet(key, frame),
            _ => hash_ipv4_packet(key, frame),
        },
        Medium::Ethernet => match frame.get(12..14)? {
            [0x08, 0x00] => hash_ipv4_packet(key, &frame[14..]),
            [0x86, 0xdd] => hash_ipv6_packet(key, &frame[14..]),
            _ => None,
        },
    }
}

/// The indirection table (NIC RETA): 128 entries, each naming a shard, indexed by the low
/// 7 bits of the hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reta {
    entries: [u16; RETA_SIZE],
}

impl Reta {
    /// A table spreading `shards` round-robin (`entry[i] = i % shards`, Linux's
    /// `ethtool_rxfh_indir_default`). `shards` is clamped to `1..=128`: a table of 128
    /// entries cannot name more.
    pub fn new(shards: usize) -> Reta {
        let shards = shards.clamp(1, RETA_SIZE);
        Reta {
            entries: core::array::from_fn(|i| (i % shards) as u16),
        }
    }

    /// A table with the given entries (like `ethtool -X dev weight ...` computed by hand).
    pub fn from_entries(entries: [u16; RETA_SIZE]) -> Reta {
        Reta { entries }
    }

    /// The entries.
    pub fn entries(&self) -> &[u16; RETA_SIZE] {
        &self.entries
    }

    /// Point entry `index` (taken modulo 128) at `shard`.
    pub fn set(&mut self, index: usize, shard: u16) {
        self.entries[index % RETA_SIZE] = shard;
    }

    /// The shard of a hash: `entries[hash & 127]`.
    pub fn lookup(&self, hash: u32) -> usize {
        usize::from(self.entries[hash as usize % RETA_SIZE])
    }
}

/// The shard of `hash` among `shards` through the default indirection table
/// ([`Reta::new`]): `(hash & 127) % shards`. `shards` is clamped to `1..=128`.
pub fn shard_of(hash: u32, shards: usize) -> usize {
    (hash as usize % RETA_SIZE) % shards.clamp(1, RETA_SIZE)
}

/// An ephemeral local port for a connection from `local_ip` to `remote` whose replies hash
/// to `shard` of `shards` (default indirection table, see [`shard_of`]), or `None` when
/// every port of `port_range` that would do is taken. `in_use(port)` says whether a port is
/// unavailable (already bound, or its 4-tuple taken).
///
/// Either family: the replies' tuple is hashed as the NIC will hash it
/// ([`RssKey::hash_tuple`]: the 12-byte IPv4 input, or the 36-byte IPv6 one, whose
/// destination port sits at another offset and so adds other key bits). An IPv4-mapped
/// `remote` is hashed as IPv4, as its connection goes over IPv4.
///
/// The replies' tuple is (`remote`, `local_ip:port`): source and destination as the shard
/// receives them. Seastar's `connect` draws random ports until one hashes home; this search
/// is deterministic and bounded instead, in the manner of Linux's `__inet_hash_connect`: it
/// starts at an offset picked by the hash of (`remote`, `local_ip`) (RFC 6056's algorithm 3
/// uses a keyed hash of the same fields) and walks the range once, so it makes at most
/// `port_range.len()` cheap hash steps and calls `in_use` only for ports that hash to `shard`
/// (about one port in `shards`).
///
/// Whether every shard can be reached depends on the key: the port's 16 bits move the hash
/// through 16 windows of it, and a degenerate key (mostly zero bytes, say) can span fewer
/// than the indirection table's 7 index bits, leaving some shards no port. The standard
/// keys reach every shard (tested); a runtime with a key of its own should check.
pub fn pick_local_port(
    key: &RssKey,
    local_ip: impl Into<IpAddr>,
    remote: impl Into<SocketAddr>,
    shard: usize,
    shards: usize,
    port_range: RangeInclusive<u16>,
    in_use: impl Fn(u16) -> bool,
) -> Option<u16> {
    pick_port(
        key,
        SocketAddr::new(local_ip.into(), 0),
        remote.into(),
        port_range,
        &mut 0,
        |h| shard_of(h, shards) == shard,
        in_use,
    )
}

fn pick_port(
    key: &RssKey,
    local: SocketAddr,
    remote: SocketAddr,
    port_range: RangeInclusive<u16>,
    perturb: &mut u32,
    home: impl Fn(u32) -> bool,
    in_use: impl Fn(u16) -> bool,
) -> Option<u16> {
    let (lo, hi) = (*port_range.start(), *port_range.end());
    if lo > hi {
        return None;
    }
    // hash(remote -> local_ip:port) == base ^ term(port), by linearity.
    let base = key.hash_tuple(remote, local);
    let v6 = v4_of(remote).zip(v4_of(local)).is_none();
    // The contribution of each destination-port bit, most significant first.
    let terms: [u32; 16] = core::array::from_fn(|b| key.dst_port_term(0x8000 >> b, v6));
    let term = |port: u16| {
        (0..16)
            .filter(|b| port & (0x8000 >> b) != 0)
            .fold(0, |acc, b| acc ^ terms[b])
    };
    let span = u32::from(hi - lo) + 1;
    let start = base.rotate_right(16).wrapping_add(*perturb) % span;
    (0..span)
        .map(|i| (i, lo + ((start + i) % span) as u16))
        .find(|&(_, port)| home(base ^ term(port)) && !in_use(port))
        .map(|(i, port)| {
            // Linux __inet_hash_connect: "table_perturb[index] += i + 2" once a port is
            // found, so the next search for this peer starts past it.
            *perturb = perturb.wrapping_add(i + 2);
            port
        })
}

/// A flow-to-shard map: a key and an indirection table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rss {
    key: RssKey,
    reta: Reta,
    shards: usize,
}

impl Rss {
    /// `shards` shards (clamped to `1..=128`), the default round-robin table.
    pub fn new(key: RssKey, shards: usize) -> Rss {
        let shards = shards.clamp(1, RETA_SIZE);
        Rss {
            key,
            reta: Reta::new(shards),
            shards,
        }
    }

    /// The key.
    pub fn key(&self) -> &RssKey {
        &self.key
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The indirection table.
    pub fn reta(&self) -> &Reta {
        &self.reta
    }

    /// Replace the indirection table. Entries naming a shard `>= shards()` are read modulo
    /// the shard count.
    pub fn set_reta(&mut self, reta: Reta) {
        self.reta = reta;
    }

    /// The shard of a hash.
    pub fn shard_of_hash(&self, hash: u32) -> usize {
        self.reta.lookup(hash) % self.shards
    }

    /// The shard that receives packets from `src` to `dst` (4-tuple hash, either family:
    /// [`RssKey::hash_tuple`]).
    pub fn shard_of_tuple(&self, src: impl Into<SocketAddr>, dst: impl Into<SocketAddr>) -> usize {
        self.shard_of_hash(self.key.hash_tuple(src.into(), dst.into()))
    }

    /// The shard of a received frame, or `None` if it is neither IPv4 nor IPv6 (ARP, say): the
    /// caller decides, as a NIC sends such frames to queue 0.
    pub fn shard_of_frame(&self, frame: &[u8], medium: Medium) -> Option<usize> {
        hash_frame(&self.key, frame, medium).map(|(h, _)| self.shard_of_hash(h))
    }

    /// [`pick_local_port`] through this map's key and table, the walk starting `perturb`
    /// ports further on; a port found moves `perturb` past it (Linux
    /// `__inet_hash_connect`'s `table_perturb`, RFC 6056 §3.3.4 algorithm 4), so that
    /// connecting to the same peer again does not pick the tuple just closed, which the
    /// peer may still hold in TIME-WAIT with a newer sequence number and timestamp than
    /// the new SYN's (the peer then answers the SYN with an ACK, the client resets it, and
    /// the connection waits a second for its SYN's retransmission).
    pub fn pick_local_port(
        &self,
        local_ip: impl Into<IpAddr>,
        remote: impl Into<SocketAddr>,
        shard: usize,
        port_range: RangeInclusive<u16>,
        perturb: &mut u32,
        in_use: impl Fn(u16) -> bool,
    ) -> Option<u16> {
        pick_port(
            &self.key,
            SocketAddr::new(local_ip.into(), 0),
            remote.into(),
            port_range,
            perturb,
            |h| self.shard_of_hash(h) == shard,
            in_use,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_terms_add_up_to_the_full_hash() {
        let key = RssKey::MICROSOFT;
        let remote = SocketAddrV4::new(Ipv4Addr::new(66, 9, 149, 187), 2794);
        let local = Ipv4Addr::new(161, 142, 100, 80);
        let base = key.hash_v4(remote, SocketAddrV4::new(local, 0));
        assert_eq!(
            base ^ key.dst_port_term(1766, false),
            0x51cc_c178,
            "linearity: the verification suite's first tuple"
        );
    }

    #[test]
    fn reta_round_robin() {
        let r = Reta::new(3);
        assert_eq!(&r.entries()[..5], &[0, 1, 2, 0, 1]);
        assert_eq!(r.lookup(0x1234_5601), 1);
        assert_eq!(r.lookup(130), r.lookup(2), "only the low 7 bits index");
        assert_eq!(Reta::new(0), Reta::new(1));
    }
}
