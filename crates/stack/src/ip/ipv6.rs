//! IPv6 input and output: [RFC 8200](https://www.rfc-editor.org/rfc/rfc8200), with the
//! checks and their order from Linux's `ip6_rcv_core` and `ip6_protocol_deliver_rcu`
//! (`net/ipv6/ip6_input.c`), extension headers as `net/ipv6/exthdrs.c` walks them, and the
//! output path of `ip6_output.c` (`ip6_finish_output`, `ip6_fragment`). ustack is a host:
//! packets not for one of its addresses or groups are dropped (`Ip6InAddrErrors`), as
//! Linux does with `forwarding = 0`.
//!
//! Input, in order:
//!
//! 1. `Ip6InReceives`, `Ip6InOctets`; shorter than 40 bytes or version not 6:
//!    `IP6_INHDR`; the ECN counters.
//! 2. Addresses that must not be on a link (loopback, a multicast or v4-mapped source, a
//!    multicast destination of scope 0 or 1): `IP6_INVALID_ADDR`.
//! 3. Payload Length against what arrived: `IP6_PKT_TOO_SMALL`; a jumbogram (RFC 2675) is
//!    a header error (not supported).
//! 4. A Hop-by-Hop header first is processed (RFC 8200 §4.3).
//! 5. Not ours (no forwarding): `IP6_INADDRERRORS`; a group we are not in:
//!    `IP6_MCAST_NOT_JOINED`.
//! 6. The header chain (RFC 8200 §4.1's order is not enforced, as in Linux): Destination
//!    Options (§4.6) and Hop-by-Hop options (§4.2, the action bits of unknown options),
//!    Routing (§4.4: Segments Left 0 is skipped, anything else is a Parameter Problem: a
//!    host does not route), Fragment (§4.5: atomic fragments processed in place, RFC
//!    6946; others reassembled, [`super::reasm6`]), then ICMPv6, UDP (`udp6_input`),
//!    TCP (`tcp6_input`), No Next Header, or an unknown one: `IP6_NOPROTO` and a
//!    Parameter Problem code 1 pointing at the Next Header field (§4).
//!
//! Output: the source is picked from our addresses (RFC 6724's rules 1, 2 and 8 for a host
//! with a link-local and a few static addresses: the destination itself, same scope,
//! longest matching prefix), the next hop is the destination when it is on a configured
//! prefix or link-local, else `gateway6`; packets larger than the path MTU (the link's,
//! lowered by Packet Too Big, [`PmtuCache`]) are fragmented by the source as RFC 8200 §4.5
//! describes (IPv6 routers never fragment).

use core::hash::BuildHasher;
use core::net::{IpAddr, Ipv6Addr};
use core::time::Duration;
use std::collections::VecDeque;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::icmpv6::param_problem;
use ustack_wire::ipv6ext::{ExtHeader, FRAG_HEADER_LEN, FragHeader, FragRepr};
use ustack_wire::{EthernetAddress, IpProtocol, Medium, ipv6, ndisc};

use super::reasm6::{First, FragKey6, Outcome6, Reasm6Config, Reassembler6};
use crate::neigh::Resolution;
use crate::secret::{KeyedState, Secrets};
use crate::{Error, Ipv6Cidr, Stack, Sysctl};

/// The all-nodes multicast address (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Path MTUs remembered (destinations); when full, expired ones go, then all.
const PMTU_ENTRIES: usize = 4096;

/// Where an address is in duplicate address detection (RFC 4862 §5.4; Linux `IFA_F_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrState {
    /// Being checked: not used as a source, packets to it are not accepted.
    /// `sent` solicitations are out, the next check is at `next`.
    Tentative { sent: u64, next: Option<Instant> },
    /// Usable.
    Preferred,
    /// An autoconfigured address past its preferred lifetime (RFC 4862 §5.5.4): still
    /// ours, picked as a source only when no preferred address fits.
    Deprecated,
    /// Another node holds it (`IFA_F_DADFAILED`): never used.
    Duplicate,
}

/// One configured address.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr6 {
    pub cidr: Ipv6Cidr,
    pub state: AddrState,
    /// Autoconfigured (RFC 4862 §5.5.3): its lifetimes; `None` for a static address.
    pub lft: Option<super::addrconf::Lifetimes>,
}

/// Path MTUs learnt from Packet Too Big (RFC 8201 §4), per destination, each for
/// `net.ipv6.route.mtu_expires` (Linux keeps them on the route cache entry, as long).
#[derive(Debug)]
pub struct PmtuCache {
    map: HashMap<Ipv6Addr, (u32, Instant), KeyedState>,
}

impl PmtuCache {
    /// The path MTU to `dst` at `now`, if one was learnt and has not expired.
    pub fn get(&self, now: Instant, dst: Ipv6Addr) -> Option<u32> {
        self.map
            .get(&dst)
            .and_then(|&(mtu, until)| (now < until).then_some(mtu))
    }

    /// Remember `mtu` for `dst` until `until`, only if it lowers the estimate (RFC 8201 §4:
    /// "A node MUST NOT increase its estimate of the Path MTU in response to the contents
    /// of a Packet Too Big message").
    fn lower(&mut self, now: Instant, dst: Ipv6Addr, mtu: u32, until: Instant) -> bool {
        if self.get(now, dst).is_some_and(|m| m <= mtu) {
            return false;
        }
        if self.map.len() >= PMTU_ENTRIES && !self.map.contains_key(&dst) {
            self.map.retain(|_, (_, u)| now < *u);
            if self.map.len() >= PMTU_ENTRIES {
                self.map.clear();
            }
        }
        self.map.insert(dst, (mtu, until));
        true
    }
}

/// IPv6 fragment identification (Linux `ipv6_select_ident`: a keyed hash of the addresses
/// picks a counter, so IDs are unpredictable per destination and reveal no total).
#[derive(Debug)]
struct Ident6 {
    buckets: Box<[u32; 256]>,
    hasher: KeyedState,
}

impl Ident6 {
    fn next(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> u32 {
        let h = self.hasher.hash_one((src, dst));
        let slot = &mut self.buckets[(h as usize) & 255];
        *slot = slot.wrapping_add(1);
        slot.wrapping_add((h >> 32) as u32)
    }
}

/// The IPv6 state of a stack.
#[derive(Debug)]
pub struct Ip6State {
    pub(crate) addrs: Vec<Addr6>,
    pub(crate) gateway: Option<Ipv6Addr>,
    pub(crate) reasm: Reassembler6,
    pub(crate) pmtu: PmtuCache,
    ident: Ident6,
    /// Key of the flow-label hash (Linux: the flow dissector's `hashrnd`).
    flowlabel: KeyedState,
    pub(crate) replies: VecDeque<crate::icmpv6::EchoReply6>,
    /// Neighbour discovery runs on this link (Ethernet); a TUN link has none.
    pub(crate) ndisc: bool,
    /// Router solicitation, default routers, autoconfigured addresses (`ip::addrconf`).
    pub(crate) addrconf: super::addrconf::Addrconf,
}

/// The state a new address starts in: tentative where duplicate address detection runs.
pub(crate) fn initial_state(ndisc: bool, sysctl: &Sysctl) -> AddrState {
    // RFC 4862 §5.4: "Duplicate Address Detection MUST be performed on all unicast
    // addresses prior to assigning them to an interface" (not on links without
    // neighbour discovery: Linux skips it for IFF_NOARP devices such as TUN).
    if ndisc && sysctl.ip6_accept_dad != 0 && sysctl.ip6_dad_transmits > 0 {
        AddrState::Tentative {
            sent: 0,
            next: None,
        }
    } else {
        AddrState::Preferred
    }
}

fn reasm6_config(sysctl: &Sysctl) -> Reasm6Config {
    Reasm6Config {
        high_thresh: sysctl.ip6frag_high_thresh as usize,
        timeout: Duration::from_secs(sysctl.ip6frag_time),
    }
}

impl Ip6State {
    pub(crate) fn new(
        medium: Medium,
        mac: EthernetAddress,
        mut cidrs: Vec<Ipv6Cidr>,
        gateway: Option<Ipv6Addr>,
        sysctl: &Sysctl,
        secrets: &Secrets,
    ) -> Ip6State {
        let ndisc = medium == Medium::Ethernet;
        // With accept_ra, a link-local address alone is enough to start from (SLAAC).
        if ndisc && (!cidrs.is_empty() || sysctl.ip6_accept_ra != 0) {
            // RFC 4862 §5.3: a link-local address for every interface, from the MAC.
            let ll = Ipv6Cidr::new(ndisc::link_local_from_mac(mac), 64);
            if !cidrs.iter().any(|c| c.addr == ll.addr) {
                cidrs.insert(0, ll);
            }
        }
        let state = initial_state(ndisc, sysctl);
        Ip6State {
            addrs: cidrs
                .into_iter()
                .map(|cidr| Addr6 {
                    cidr,
                    state,
                    lft: None,
                })
                .collect(),
            addrconf: super::addrconf::Addrconf::new(ndisc, sysctl, state),
            gateway,
            reasm: Reassembler6::new(reasm6_config(sysctl), secrets.hasher(b"ip6 reasm")),
            pmtu: PmtuCache {
                map: HashMap::with_hasher(secrets.hasher(b"ip6 pmtu")),
            },
            ident: Ident6 {
                buckets: Box::new([0; 256]),
                hasher: secrets.hasher(b"ip6 ident"),
            },
            flowlabel: secrets.hasher(b"ip6 flowlabel"),
            replies: VecDeque::new(),
            ndisc,
        }
    }

    pub(crate) fn set_sysctl(&mut self, sysctl: &Sysctl) {
        self.reasm.set_config(reasm6_config(sysctl));
        let ll_ready = self
            .addrs
            .iter()
            .any(|a| is_link_local(a.cidr.addr) && a.state == AddrState::Preferred);
        self.addrconf.sysctl_changed(self.ndisc, sysctl, ll_ready);
    }

    /// IPv6 is on (some address is configured).
    pub(crate) fn enabled(&self) -> bool {
        !self.addrs.is_empty()
    }

    /// Whether `ip` is one of our usable addresses.
    pub(crate) fn is_ours(&self, ip: Ipv6Addr) -> bool {
        self.addrs.iter().any(|a| {
            a.cidr.addr == ip && matches!(a.state, AddrState::Preferred | AddrState::Deprecated)
        })
    }

    /// Whether `ip` is one of our addresses in any state (tentative ones included).
    pub(crate) fn state_of(&self, ip: Ipv6Addr) -> Option<AddrState> {
        self.addrs
            .iter()
            .find(|a| a.cidr.addr == ip)
            .map(|a| a.state)
    }

    /// Whether we are in the multicast group `ip`: all-nodes, or the solicited-node group
    /// of one of our addresses (tentative ones too, RFC 4862 §5.4.2).
    pub(crate) fn listens(&self, ip: Ipv6Addr) -> bool {
        ip == ALL_NODES
            || self.addrs.iter().any(|a| {
                a.state != AddrState::Duplicate && ndisc::solicited_node(a.cidr.addr) == ip
            })
    }

    /// Whether an Ethernet frame to `mac` is for one of our groups (RFC 2464 §7).
    pub(crate) fn listens_mac(&self, mac: EthernetAddress) -> bool {
        self.ndisc
            && (mac == ndisc::multicast_mac(ALL_NODES)
                || self
                    .addrs
                    .iter()
                    .any(|a| ndisc::multicast_mac(ndisc::solicited_node(a.cidr.addr)) == mac))
    }

    /// Source address for `dst` (RFC 6724 §5, the rules that matter for a host with
    /// static and autoconfigured addresses: 1 prefer the destination itself, 2 prefer the
    /// same scope, 3 avoid deprecated addresses, 8 prefer the longest matching prefix);
    /// `None` if no usable address fits.
    pub(crate) fn select_source(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        let link_scope = is_link_local(dst) || (dst.is_multicast() && dst.octets()[1] & 0x0f <= 2);
        self.addrs
            .iter()
            .filter(|a| matches!(a.state, AddrState::Preferred | AddrState::Deprecated))
            .map(|a| (a.cidr.addr, a.state == AddrState::Preferred))
            .filter(|(a, _)| !link_scope || is_link_local(*a) || !self.ndisc)
            .max_by_key(|&(a, preferred)| {
                let same = a == dst;
                let scope_match = is_link_local(a) == link_scope;
                let common = (u128::from(a) ^ u128::from(dst)).leading_zeros();
                (same, scope_match, preferred, common)
            })
            .map(|(a, _)| a)
    }

    /// The next hop for `dst`: itself when on-link (a configured prefix, link-local,
    /// multicast, the prefix of an autoconfigured address whose advertisement had the L
    /// flag), else the gateway, else a default router learnt from advertisements (the
    /// first: RFC 4861 §6.3.6's preference for reachable routers is not followed).
    pub(crate) fn route(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        if dst.is_multicast()
            || is_link_local(dst)
            || !self.ndisc
            || self.addrs.iter().any(|a| a.cidr.contains(dst))
        {
            Some(dst)
        } else {
            self.router()
        }
    }

    /// The next hop of a destination not on-link: the gateway, else the first default
    /// router learnt (see [`Ip6State::route`]).
    #[inline]
    pub(crate) fn router(&self) -> Option<Ipv6Addr> {
        self.gateway.or_else(|| self.addrconf.default_router())
    }

    /// The flow label of the packets `src` -> `dst` of a transport flow (RFC 6437 §3:
    /// "a stateless ... hash function ... so that ... the Flow Label value ... [is]
    /// uniformly distributed", with a secret so that it reveals nothing of the tuple;
    /// Linux `ip6_make_flowlabel`: the keyed flow hash of addresses, protocol and ports,
    /// rotated by 16 bits, its low 20 bits). Derived from the tuple each time, so that a
    /// connection keeps no state for it and its SYN-ACK, data and RST carry one label.
    pub(crate) fn flow_label(
        &self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        proto: IpProtocol,
        (sport, dport): (u16, u16),
    ) -> u32 {
        let h = self
            .flowlabel
            .hash_one((src, dst, u8::from(proto), sport, dport)) as u32;
        h.rotate_left(16) & 0x000f_ffff
    }

    /// The earliest IPv6 deadline: reassembly, duplicate address detection, router
    /// solicitation and the lifetimes of routers and autoconfigured addresses.
    #[inline]
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        let dad = self
            .addrs
            .iter()
            .filter_map(|a| match a.state {
                AddrState::Tentative { next, .. } => Some(next.unwrap_or(Instant::ZERO)),
                _ => None,
            })
            .min();
        crate::stack::earliest(
            crate::stack::earliest(self.reasm.poll_at(), dad),
            self.addrconf.next,
        )
    }
}

/// `fe80::/10` (RFC 4291 §2.5.6).
pub(crate) fn is_link_local(ip: Ipv6Addr) -> bool {
    ip.segments()[0] & 0xffc0 == 0xfe80
}

/// A packet delivered locally, as the upper layers see it.
#[derive(Debug, Clone, Copy)]
pub struct Inbound6<'a> {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub hop_limit: u8,
    /// The packet from its IPv6 header (reassembled if it was fragmented): errors quote it.
    pub packet: &'a [u8],
    /// The upper-layer payload.
    pub payload: &'a [u8],
    /// Sent to a multicast address, or in a link-layer multicast frame.
    pub multicast: bool,
}

/// Where the walk of a packet's header chain stands.
#[derive(Debug, Clone, Copy)]
struct Walk {
    /// The header at `off` is of type `nh`.
    nh: IpProtocol,
    off: usize,
    /// Offset of the Next Header field that named it (for Parameter Problem code 1).
    nh_field: usize,
    /// A Fragment header was reassembled already: another one is an error.
    reassembled: bool,
}

/// What an upper layer asks of IPv6 output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outbound6 {
    /// The source, if the caller must use one (a reply from the address asked); else
    /// picked by [`Ip6State::select_source`].
    pub src: Option<Ipv6Addr>,
    pub dst: Ipv6Addr,
    pub next_header: IpProtocol,
    pub payload_len: usize,
    /// `None`: `net.ipv6.conf.default.hop_limit`.
    pub hop_limit: Option<u8>,
    pub full_reason: DropReason,
    /// The transport's (source, destination) ports: the packets of the flow get a flow
    /// label ([`Ip6State::flow_label`]); `None`: label 0 (ICMPv6, Neighbor Discovery).
    pub ports: Option<(u16, u16)>,
}

/// One IPv6 datagram routed, its header built ([`Stack::ipv6_alloc`]).
pub(crate) enum Ip6Out {
    /// Within the path MTU: the frame (L2 headroom, the IPv6 header written), the
    /// upper-layer payload to write at `frame[l4..]`, then [`Stack::ip6_xmit`] to
    /// `next_hop`.
    Whole {
        frame: Vec<u8>,
        l4: usize,
        src: Ipv6Addr,
        next_hop: Ipv6Addr,
    },
    /// Larger than the path MTU: for [`Stack::ipv6_fragment`].
    Fragments(Ip6Frags),
}

/// What fragmenting a datagram takes: its header (source chosen), next hop and path MTU.
pub(crate) struct Ip6Frags {
    pub repr: ipv6::Repr,
    next_hop: Ipv6Addr,
    mtu: usize,
}

impl Stack {
    /// IPv6 input (Linux `ipv6_rcv` -> `ip6_rcv_core`, `ip6_input_finish`). `l2_multicast`:
    /// the frame came to a link-layer group address.
    /// `PROF`: whether `--profile` is on for this packet (read once a packet, by
    /// [`Stack::receive_with`]): off, the early demux's stage guards are compiled out.
    #[inline(always)]
    pub(crate) fn ipv6_input<const PROF: bool>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        l2_multicast: bool,
    ) {
        // An established connection's common segment goes straight to it (Linux
        // `tcp_v6_early_demux`); the fast path makes the checks below itself, and leaves
        // everything else, counted and changed nothing, to the general path.
        if self.tcp_v6_early_demux::<PROF>(now, bytes, l2_multicast) {
            return;
        }
        self.ipv6_rcv(now, bytes, l2_multicast);
    }

    /// [`ipv6_input`](Self::ipv6_input) past the early demux.
    fn ipv6_rcv(&mut self, now: Instant, bytes: &[u8], l2_multicast: bool) {
        self.mib.inc(Counter::Ip6InReceives);
        self.mib.add(Counter::Ip6InOctets, bytes.len() as u64);
        if bytes.len() < ipv6::HEADER_LEN {
            return self.mib.drop(DropReason::Ip6Inhdr);
        }
        let view = ipv6::Packet::new_unchecked(bytes);
        if view.version() != 6 {
            return self.mib.drop(DropReason::Ip6Inhdr);
        }
        let ecn = match view.ecn() {
            0 => Counter::Ip6InNoECTPkts,
            1 => Counter::Ip6InECT1Pkts,
            2 => Counter::Ip6InECT0Pkts,
            _ => Counter::Ip6InCEPkts,
        };
        self.mib.inc(ecn);
        let (src, dst) = (view.src_addr(), view.dst_addr());
        // RFC 4291 §2.5.3 (loopback never on a link), §2.7 (multicast scope 0 reserved,
        // scope 1 interface-local, never a multicast source); v4-mapped addresses, which
        // Linux refuses in `ip6_rcv_core` ("draft-itojun-v6ops-v4mapped-harmful").
        let mc_scope = dst.octets()[1] & 0x0f;
        if src.is_loopback()
            || dst.is_loopback()
            || src.is_multicast()
            || src.to_ipv4_mapped().is_some()
            || (dst.is_multicast() && mc_scope <= 1)
        {
            return self.mib.drop(DropReason::Ip6InvalidSource);
        }
        let payload_len = usize::from(view.payload_len());
        if payload_len == 0 && view.next_header() == IpProtocol::HopByHop {
            // A jumbogram (RFC 2675), which ustack does not implement.
            return self.mib.drop(DropReason::Ip6Inhdr);
        }
        if bytes.len() < ipv6::HEADER_LEN + payload_len {
            return self.mib.drop(DropReason::Ip6Truncated);
        }
        // Ethernet padding past Payload Length is trimmed (Linux pskb_trim_rcsum).
        let packet = &bytes[..ipv6::HEADER_LEN + payload_len];
        let multicast = dst.is_multicast();
        if multicast {
            self.mib.inc(Counter::Ip6InMcastPkts);
            self.mib.add(Counter::Ip6InMcastOctets, packet.len() as u64);
        }
        let mut walk = Walk {
            nh: view.next_header(),
            off: ipv6::HEADER_LEN,
            nh_field: 6,
            reassembled: false,
        };
        // RFC 8200 §4.3: Hop-by-Hop Options, "when present, MUST immediately follow the
        // IPv6 header", is examined by every node, before the destination is looked at.
        if walk.nh == IpProtocol::HopByHop {
            match self.ip6_options(now, packet, walk.off, multicast, true) {
                Some(next) => walk = next,
                None => return,
            }
        }
        if multicast && !self.ip6.listens(dst) {
            // Linux ip6_mc_input: not a group of ours.
            return self.mib.drop(DropReason::Ip6McastNotJoined);
        }
        if !multicast && !self.ip6.is_ours(dst) {
            // We do not forward (RFC 8200 §1 hosts; Linux ip6_forward with forwarding=0).
            return self.mib.drop(DropReason::Ip6InaddrErrors);
        }
        self.ip6_walk(now, packet, walk, multicast || l2_multicast);
    }

    /// Process the TLV options of the Hop-by-Hop or Destination Options header at `off`
    /// (Linux `ip6_parse_tlv`); the walk's next position, or `None` when the packet was
    /// dropped (and answered, if RFC 8200 §4.2 says so).
    fn ip6_options(
        &mut self,
        now: Instant,
        packet: &[u8],
        off: usize,
        multicast: bool,
        hop_by_hop: bool,
    ) -> Option<Walk> {
        let Ok(h) = ExtHeader::new_checked(&packet[off..]) else {
            self.mib.drop(DropReason::Ip6Inhdr);
            return None;
        };
        let max = if hop_by_hop {
            self.sysctl.ip6_max_hbh_opts_number
        } else {
            self.sysctl.ip6_max_dst_opts_number
        };
        let (mut count, mut pad) = (0u64, 0usize);
        for opt in h.options() {
            let Ok(opt) = opt else {
                self.mib.drop(DropReason::Ip6Inhdr);
                return None;
            };
            match opt.kind {
                // Pad1 and PadN: Linux refuses more than 7 bytes of padding in a row (RFC
                // 8200 §4.2 needs no more) and PadN with non-zero content.
                0 | 1 => {
                    pad += 1 + if opt.kind == 1 { 1 + opt.data.len() } else { 0 };
                    if pad > 7 || opt.data.iter().any(|&b| b != 0) {
                        self.mib.drop(DropReason::Ip6Inhdr);
                        return None;
                    }
                    continue;
                }
                // Router Alert (RFC 2711) in Hop-by-Hop: nothing for a host to do.
                5 if hop_by_hop => {}
                _ => match opt.unknown_action() {
                    0 => {}
                    action => {
                        // RFC 8200 §4.2: 01 discard; 10 discard and send Parameter Problem
                        // code 2; 11 the same, unless the destination was multicast.
                        self.mib.drop(DropReason::Ip6Inhdr);
                        if action == 2 || (action == 3 && !multicast) {
                            self.icmp6_param_problem(
                                now,
                                packet,
                                param_problem::OPTION,
                                off + opt.offset,
                                action == 2,
                            );
                        }
                        return None;
                    }
                },
            }
            pad = 0;
            count += 1;
            if count > max {
                self.mib.drop(DropReason::Ip6Inhdr);
                return None;
            }
        }
        Some(Walk {
            nh: h.next_header(),
            nh_field: off,
            off: off + h.header_len(),
            reassembled: false,
        })
    }

    /// Walk the header chain from `walk` to the upper layer (Linux
    /// `ip6_protocol_deliver_rcu`, one registered handler per header type).
    fn ip6_walk(&mut self, now: Instant, packet: &[u8], mut walk: Walk, multicast: bool) {
        loop {
            match walk.nh {
                IpProtocol::Ipv6Opts => {
                    let reassembled = walk.reassembled;
                    match self.ip6_options(now, packet, walk.off, multicast, false) {
                        Some(next) => {
                            walk = Walk {
                                reassembled,
                                ..next
                            }
                        }
                        None => return,
                    }
                }
                IpProtocol::Ipv6Route => {
                    let Ok(h) = ExtHeader::new_checked(&packet[walk.off..]) else {
                        return self.mib.drop(DropReason::Ip6Inhdr);
                    };
                    if h.segments_left() != 0 {
                        // RFC 8200 §4.4: a routing type we do not process with Segments
                        // Left > 0: Parameter Problem code 0 at the Routing Type. A host
                        // forwards nothing, so every type is one it does not process.
                        self.mib.drop(DropReason::Ip6Inhdr);
                        return self.icmp6_param_problem(
                            now,
                            packet,
                            param_problem::HEADER_FIELD,
                            walk.off + 2,
                            false,
                        );
                    }
                    walk.nh_field = walk.off;
                    walk.nh = h.next_header();
                    walk.off += h.header_len();
                }
                IpProtocol::Ipv6Frag => match self.ip6_fragment(now, packet, walk, multicast) {
                    Some(next) => walk = next,
                    None => return,
                },
                IpProtocol::Icmpv6 => {
                    self.mib.inc(Counter::Ip6InDelivers);
                    let inbound = self.inbound6(packet, walk.off, multicast);
                    return self.icmpv6_input(now, &inbound);
                }
                IpProtocol::Udp => {
                    self.mib.inc(Counter::Ip6InDelivers);
                    let inbound = self.inbound6(packet, walk.off, multicast);
                    return self.udp6_input(now, &inbound);
                }
                IpProtocol::Tcp => {
                    self.mib.inc(Counter::Ip6InDelivers);
                    let inbound = self.inbound6(packet, walk.off, multicast);
                    return self.tcp6_input(now, &inbound);
                }
                IpProtocol::Ipv6NoNxt => {
                    // RFC 8200 §4.7: nothing follows; Linux delivers it to a handler that
                    // frees it.
                    return self.mib.inc(Counter::Ip6InDelivers);
                }
                _ => {
                    // Hop-by-Hop anywhere but first, or a protocol we do not handle: RFC
                    // 8200 §4, "discard the packet and send an ICMP Parameter Problem
                    // message ... ICMP Code value of 1 ("unrecognized Next Header type
                    // encountered") and the ICMP Pointer field containing the offset of
                    // the unrecognized value within the original packet".
                    self.mib.drop(DropReason::Ip6Noproto);
                    return self.icmp6_param_problem(
                        now,
                        packet,
                        param_problem::NEXT_HEADER,
                        walk.nh_field,
                        false,
                    );
                }
            }
            if walk.off > packet.len() {
                return self.mib.drop(DropReason::Ip6Inhdr);
            }
        }
    }

    fn inbound6<'a>(&self, packet: &'a [u8], off: usize, multicast: bool) -> Inbound6<'a> {
        let view = ipv6::Packet::new_unchecked(packet);
        Inbound6 {
            src: view.src_addr(),
            dst: view.dst_addr(),
            hop_limit: view.hop_limit(),
            packet,
            payload: &packet[off..],
            multicast,
        }
    }

    /// The Fragment header at `walk.off` (Linux `ipv6_frag_rcv`): atomic fragments go on
    /// in place; others are queued, and the walk goes on in the reassembled packet.
    fn ip6_fragment(
        &mut self,
        now: Instant,
        packet: &[u8],
        walk: Walk,
        multicast: bool,
    ) -> Option<Walk> {
        let off = walk.off;
        let Ok(frag) = FragHeader::new_checked(&packet[off..]).and_then(|h| FragRepr::parse(&h))
        else {
            self.mib.drop(DropReason::Ip6Inhdr);
            return None;
        };
        self.mib.inc(Counter::Ip6ReasmReqds);
        let data_off = off + FRAG_HEADER_LEN;
        let next = Walk {
            nh: frag.next_header,
            off: data_off,
            nh_field: off,
            reassembled: true,
        };
        if frag.offset == 0 && !frag.more_frags {
            // RFC 6946 §4: an atomic fragment "MUST be processed as a fully assembled
            // packet", never mixed with other fragments of the same Identification.
            self.mib.inc(Counter::Ip6ReasmOKs);
            return Some(next);
        }
        if walk.reassembled {
            // A Fragment header inside a reassembled packet: Linux would reassemble again;
            // nesting is never sent, and refusing it bounds the work.
            self.mib.drop(DropReason::Ip6Inhdr);
            return None;
        }
        let data = &packet[data_off..];
        // RFC 8200 §4.5: "If the length of a fragment, as derived from the fragment packet's
        // Payload Length field, is not a multiple of 8 octets and the M flag of that
        // fragment is 1, then that fragment must be discarded and an ICMP Parameter
        // Problem, Code 0, message should be sent ... pointing to the Payload Length field".
        if frag.more_frags && !data.len().is_multiple_of(8) {
            self.mib.drop(DropReason::Ip6Inhdr);
            self.icmp6_param_problem(now, packet, param_problem::HEADER_FIELD, 4, false);
            return None;
        }
        // "If the length and offset of a fragment are such that the Payload Length of the
        // packet reassembled from that fragment would exceed 65,535 octets, then that
        // fragment must be discarded and an ICMP Parameter Problem, Code 0, message should
        // be sent ... pointing to the Fragment Offset field".
        if (data_off - ipv6::HEADER_LEN) + usize::from(frag.offset) + data.len() > 65_535 {
            self.mib.drop(DropReason::Ip6Inhdr);
            self.icmp6_param_problem(now, packet, param_problem::HEADER_FIELD, off + 2, false);
            return None;
        }
        // RFC 8200 §4.5 (RFC 7112): a first fragment without the whole upper-layer header
        // is discarded with a Parameter Problem code 3, pointer 0 (Linux
        // `ipv6frag_thdr_truncated`).
        let upper = match frag.next_header {
            IpProtocol::Tcp => 20,
            IpProtocol::Udp | IpProtocol::Icmpv6 => 8,
            _ => 0,
        };
        if frag.offset == 0 && data.len() < upper {
            self.mib.drop(DropReason::Ip6Inhdr);
            self.icmp6_param_problem(now, packet, 3, 0, false);
            return None;
        }
        let view = ipv6::Packet::new_unchecked(packet);
        let key = FragKey6 {
            src: view.src_addr(),
            dst: view.dst_addr(),
            ident: frag.ident,
        };
        let first = First {
            head: &packet[..data_off],
            nh_field: walk.nh_field,
            packet,
        };
        let outcome = self
            .ip6
            .reasm
            .add(now, key, frag, data, first, &mut self.mib);
        // A new packet's reassembly timer.
        self.wake.lower_opt(self.ip6.reasm.poll_at());
        match outcome {
            Outcome6::Pending | Outcome6::Dropped => None,
            Outcome6::Complete(done) => {
                self.mib.inc(Counter::Ip6ReasmOKs);
                // Earlier fragments came without the link's word on the checksum.
                self.rx_csum_ok = false;
                // The reassembled packet: the first fragment's headers, the Fragment
                // header taken out (its Next Header moved to the field that named it),
                // Payload Length fixed, then the whole fragmentable part.
                let first_off = done.head.len() - FRAG_HEADER_LEN;
                let mut whole = Vec::with_capacity(first_off + done.payload.len());
                whole.extend_from_slice(&done.head[..first_off]);
                whole.extend_from_slice(&done.payload);
                // The first fragment's Next Header is the packet's (RFC 8200 §4.5).
                let nh = done.head[first_off];
                whole[done.nh_field] = nh;
                let Ok(plen) = u16::try_from(whole.len() - ipv6::HEADER_LEN) else {
                    self.mib.drop(DropReason::Ip6Inhdr);
                    return None;
                };
                whole[4..6].copy_from_slice(&plen.to_be_bytes());
                let next = Walk {
                    nh: IpProtocol::from(nh),
                    off: first_off,
                    nh_field: done.nh_field,
                    reassembled: true,
                };
                self.ip6_walk(now, &whole, next, multicast);
                None
            }
        }
    }

    /// The path MTU towards `dst`: the link's MTU, lowered by a Packet Too Big that has
    /// not expired. TCP reads it for its MSS (Linux `ip6_mtu` on the route).
    pub fn path_mtu6(&self, now: Instant, dst: Ipv6Addr) -> usize {
        let learnt = self
            .ip6
            .pmtu
            .get(now, dst)
            .map_or(usize::MAX, |m| m as usize);
        self.mtu.min(learnt)
    }

    /// A Packet Too Big reported `mtu` for `dst` (RFC 8201 §4): raised to the IPv6 minimum
    /// (RFC 8200 §5: no link is smaller; RFC 8021 deprecates the atomic fragments an
    /// older rule asked for), remembered for `net.ipv6.route.mtu_expires` if it lowers the
    /// estimate. Returns whether it did.
    pub(crate) fn ip6_pmtu_update(&mut self, now: Instant, dst: Ipv6Addr, mtu: u32) -> bool {
        let mtu = mtu.max(ipv6::MIN_MTU as u32);
        if mtu as usize >= self.mtu {
            return false;
        }
        let until = now + Duration::from_secs(self.sysctl.ip6_mtu_expires);
        let lowered = self.ip6.pmtu.lower(now, dst, mtu, until);
        if lowered {
            // The IPv6 header templates hold the path MTU (`tcp::xmit6`).
            self.invalidate_tx_templates();
        }
        lowered
    }

    /// The flow label of a packet `src` -> `dst` of a transport flow with `ports`
    /// ([`Ip6State::flow_label`]) under `auto_flowlabels`; 0 without ports (ICMPv6,
    /// Neighbor Discovery) or with the sysctl off.
    pub(crate) fn ip6_flow_label(
        &self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        next_header: IpProtocol,
        ports: Option<(u16, u16)>,
    ) -> u32 {
        match ports {
            Some(ports) if self.sysctl.ip6_auto_flowlabels != 0 => {
                self.ip6.flow_label(src, dst, next_header, ports)
            }
            _ => 0,
        }
    }

    /// IPv6 output (Linux `ip6_xmit`, `ip6_finish_output`, `ip6_fragment`): source, route,
    /// header, fragments when larger than the path MTU, and the device queue. `fill` writes
    /// the upper-layer payload (exactly `out.payload_len` bytes) given (source,
    /// destination).
    pub(crate) fn ipv6_output(
        &mut self,
        now: Instant,
        out: Outbound6,
        fill: impl FnOnce(&mut [u8], Ipv6Addr, Ipv6Addr),
    ) -> Result<(), Error> {
        match self.ipv6_alloc(now, &out, true)? {
            Ip6Out::Whole {
                mut frame,
                l4,
                src,
                next_hop,
            } => {
                fill(&mut frame[l4..], src, out.dst);
                self.ip6_xmit(now, next_hop, frame, out.full_reason);
                Ok(())
            }
            Ip6Out::Fragments(f) => {
                let mut payload = vec![0u8; out.payload_len];
                fill(&mut payload, f.repr.src_addr, out.dst);
                self.ipv6_fragment(now, f, &payload, out.full_reason)
            }
        }
    }

    /// Source, route and header of one IPv6 datagram (the first half of
    /// [`Stack::ipv6_output`], for a caller that writes its payload in place, as TCP
    /// does): within the path MTU, a frame from the pool with the header written, the
    /// payload to go at `frame[l4..]` (its first bytes zeroed, all of them if `zero_all`),
    /// then [`Stack::ip6_xmit`]; larger, what [`Stack::ipv6_fragment`] needs.
    pub(crate) fn ipv6_alloc(
        &mut self,
        now: Instant,
        out: &Outbound6,
        zero_all: bool,
    ) -> Result<Ip6Out, Error> {
        self.mib.inc(Counter::Ip6OutRequests);
        let src = out.src.or_else(|| self.ip6.select_source(out.dst));
        let (Some(src), Some(next_hop)) = (src, self.ip6.route(out.dst)) else {
            self.mib.drop(DropReason::Ip6NoRoute);
            return Err(Error::NetUnreachable);
        };
        let mtu = self.path_mtu6(now, out.dst);
        let l2 = self.l2_len();
        let hop_limit = out.hop_limit.unwrap_or(self.sysctl.ip6_hop_limit as u8);
        let repr = ipv6::Repr {
            src_addr: src,
            dst_addr: out.dst,
            next_header: out.next_header,
            payload_len: out.payload_len,
            hop_limit,
            traffic_class: 0,
            flow_label: self.ip6_flow_label(src, out.dst, out.next_header, out.ports),
        };
        if ipv6::HEADER_LEN + out.payload_len > mtu {
            return Ok(Ip6Out::Fragments(Ip6Frags {
                repr,
                next_hop,
                mtu,
            }));
        }
        let l4 = l2 + ipv6::HEADER_LEN;
        let len = l4 + out.payload_len;
        let zeroed = if zero_all {
            len
        } else {
            l4 + out.payload_len.min(60)
        };
        let mut frame = self.frame_for(len, zeroed);
        repr.emit(&mut ipv6::Packet::new_unchecked(&mut frame[l2..]));
        Ok(Ip6Out::Whole {
            frame,
            l4,
            src,
            next_hop,
        })
    }

    /// RFC 8200 §4.5: `payload` in fragments of at most the path MTU, each but the last
    /// carrying a multiple of 8 bytes of the fragmentable part (here: the upper-layer
    /// payload; ustack adds no extension headers of its own).
    pub(crate) fn ipv6_fragment(
        &mut self,
        now: Instant,
        f: Ip6Frags,
        payload: &[u8],
        full_reason: DropReason,
    ) -> Result<(), Error> {
        let Ip6Frags {
            mut repr,
            next_hop,
            mtu,
        } = f;
        let per = (mtu - ipv6::HEADER_LEN - FRAG_HEADER_LEN) & !7;
        if payload.len() > 65_535 - FRAG_HEADER_LEN || per == 0 {
            self.mib.drop(DropReason::Ip6PktTooBig);
            return Err(Error::MessageTooLong);
        }
        let l2 = self.l2_len();
        let next_header = repr.next_header;
        let ident = self.ip6.ident.next(repr.src_addr, repr.dst_addr);
        let count = payload.len().div_ceil(per);
        repr.next_header = IpProtocol::Ipv6Frag;
        for (i, chunk) in payload.chunks(per).enumerate() {
            let hdr = l2 + ipv6::HEADER_LEN;
            let mut frame = vec![0u8; hdr + FRAG_HEADER_LEN + chunk.len()];
            repr.payload_len = FRAG_HEADER_LEN + chunk.len();
            repr.emit(&mut ipv6::Packet::new_unchecked(&mut frame[l2..]));
            FragRepr {
                next_header,
                offset: (i * per) as u16,
                more_frags: i + 1 < count,
                ident,
            }
            .emit(&mut frame[hdr..]);
            frame[hdr + FRAG_HEADER_LEN..].copy_from_slice(chunk);
            self.mib.inc(Counter::Ip6FragCreates);
            self.ip6_xmit(now, next_hop, frame, full_reason);
        }
        self.mib.inc(Counter::Ip6FragOKs);
        Ok(())
    }

    /// Hand an IPv6 frame (with L2 headroom) to the link (Linux `ip6_finish_output2`):
    /// multicast to its group MAC, unicast through neighbour discovery.
    pub(crate) fn ip6_xmit(
        &mut self,
        now: Instant,
        next_hop: Ipv6Addr,
        frame: Vec<u8>,
        full_reason: DropReason,
    ) -> bool {
        let l2 = self.l2_len();
        self.mib.inc(Counter::Ip6OutTransmits);
        self.mib
            .add(Counter::Ip6OutOctets, (frame.len() - l2) as u64);
        if next_hop.is_multicast() {
            self.mib.inc(Counter::Ip6OutMcastPkts);
            self.mib
                .add(Counter::Ip6OutMcastOctets, (frame.len() - l2) as u64);
        }
        if self.medium == Medium::Ip {
            return self.tx_push(frame, full_reason);
        }
        if next_hop.is_multicast() {
            return self.eth_fill_and_push(frame, ndisc::multicast_mac(next_hop), full_reason);
        }
        // A reachable neighbour (the common case): its address from the table's last
        // answer, as `dev_queue_xmit` asks for IPv4.
        if let Some(mac) = self.neigh.hot(now, IpAddr::V6(next_hop), &self.sysctl) {
            return self.eth_fill_and_push(frame, mac, full_reason);
        }
        let mut packet = Some(frame);
        let resolution = self.neigh.resolve(
            now,
            IpAddr::V6(next_hop),
            &mut packet,
            &self.sysctl,
            &mut self.mib,
        );
        // A new entry arms its solicitation's retransmission and the garbage collection.
        self.wake.lower_opt(self.neigh.poll_at());
        match resolution {
            Resolution::Send { mac, probe } => {
                if probe {
                    self.ndisc_solicit(now, next_hop, Some(mac));
                }
                let frame = packet.expect("resolve hands the packet back on Send");
                self.eth_fill_and_push(frame, mac, full_reason)
            }
            Resolution::Queued { request } => {
                if request {
                    self.ndisc_solicit(now, next_hop, None);
                }
                true
            }
            Resolution::Refused => false,
        }
    }

    /// The IPv6 timers: reassembly expiry (with Time Exceeded, RFC 8200 §4.5) and
    /// duplicate address detection.
    pub(crate) fn ipv6_handle_timeout(&mut self, now: Instant) {
        for expired in self.ip6.reasm.expire(now, &mut self.mib) {
            if let Some(first) = expired.first {
                self.icmp6_time_exceeded_reasm(now, &first);
            }
        }
        self.dad_timeout(now);
        if self.ip6.addrconf.next.is_some_and(|t| t <= now) {
            self.addrconf_timeout(now);
        }
    }

    /// Duplicate address detection (RFC 4862 §5.4.2-§5.4.3): `dad_transmits` solicitations
    /// from the unspecified address, `retrans_time_ms` apart; an address nobody claimed
    /// by then becomes usable. (Linux first waits a random delay of up to a second, RFC
    /// 4862 §5.4.2's MAX_RTR_SOLICITATION_DELAY; ustack starts at once, and joins its
    /// groups without MLD reports: links that snoop MLD may not forward them.)
    fn dad_timeout(&mut self, now: Instant) {
        let retrans = Duration::from_millis(self.sysctl.neigh_retrans_time_ms);
        for i in 0..self.ip6.addrs.len() {
            let AddrState::Tentative { sent, next } = self.ip6.addrs[i].state else {
                continue;
            };
            if next.is_some_and(|n| n > now) {
                continue;
            }
            let addr = self.ip6.addrs[i].cidr.addr;
            if sent >= self.sysctl.ip6_dad_transmits {
                self.ip6.addrs[i].state = AddrState::Preferred;
                if is_link_local(addr) {
                    // Linux `addrconf_dad_completed`: router solicitation may start.
                    self.ip6.addrconf.link_local_ready(now);
                }
                continue;
            }
            self.ip6.addrs[i].state = AddrState::Tentative {
                sent: sent + 1,
                next: Some(now + retrans),
            };
            self.ndisc_send(
                now,
                Ipv6Addr::UNSPECIFIED,
                ndisc::solicited_node(addr),
                &ndisc::Repr::Solicit {
                    target: addr,
                    source_lladdr: None,
                },
            );
        }
    }

    /// The state of our IPv6 address `addr` (duplicate address detection), if it is ours.
    pub fn ipv6_addr_state(&self, addr: Ipv6Addr) -> Option<AddrState> {
        self.ip6.state_of(addr)
    }

    /// The source address a packet to `dst` would carry (the RFC 6724 subset of
    /// [`Stack::tcp_connect`]'s choice), if one of our addresses is usable: for a runtime
    /// that must know a connection's local address before it opens it (RSS port choice).
    pub fn ipv6_source_for(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        self.ip6.select_source(dst)
    }

    /// The local address a connection to `remote` would have: the interface's IPv4
    /// address for an IPv4 (or `::ffff:a.b.c.d`) peer, [`Stack::ipv6_source_for`] for an
    /// IPv6 one (`None` without a usable IPv6 address).
    pub fn source_for(&self, remote: core::net::SocketAddr) -> Option<IpAddr> {
        match remote {
            core::net::SocketAddr::V6(r) if r.ip().to_ipv4_mapped().is_none() => {
                self.ipv6_source_for(*r.ip()).map(IpAddr::V6)
            }
            _ => Some(IpAddr::V4(self.ipv4().addr)),
        }
    }

    /// Our IPv6 addresses (link-local first on Ethernet), in every state.
    pub fn ipv6_addrs(&self) -> Vec<Ipv6Cidr> {
        self.ip6.addrs.iter().map(|a| a.cidr).collect()
    }

    /// Bytes held by IPv6 reassembly.
    pub fn reassembly6_mem(&self) -> usize {
        self.ip6.reasm.mem()
    }
}
