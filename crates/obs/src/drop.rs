//! Why a packet was dropped.
//!
//! A bad or unwanted packet is not an error to propagate: the stack records a [`DropReason`]
//! with [`Mib::drop`](crate::Mib::drop) and moves on. Each reason has a Linux-style name
//! (Linux's `SKB_DROP_REASON_*` vocabulary, `include/net/dropreason-core.h`, more specific
//! where our counters need it) and names the MIB counters it bumps, so "which counter does
//! this drop show up in" is answered in one place, the table below.
//!
//! Counters that Linux bumps *before* the check that drops (Ip InReceives, Icmp InMsgs, Tcp
//! InSegs, ...) are the caller's, bumped on arrival, not part of a reason.

use core::fmt;

use crate::mib::Counter;

/// Declares every drop reason: `Variant = "NAME" => [Counter, ...]`. Generates the enum (with
/// the name and counters added to each variant's doc), `ALL`, `COUNT`, `name()` and
/// `counters()`.
macro_rules! drop_reasons {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $name:literal => [$($counter:ident),* $(,)?]
    ),+ $(,)?) => {
        /// Why a packet was dropped. Each reason documents when it happens, its Linux-style
        /// [`name`](DropReason::name), and the MIB counters [`Mib::drop`](crate::Mib::drop)
        /// bumps for it ([`counters`](DropReason::counters)).
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DropReason {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nName `", $name, "`; bumps: ", $("`", stringify!($counter), "` ",)* "(drop count only if none).")]
                $variant,
            )+
        }

        impl DropReason {
            /// Every reason, in declaration order (the order of [`render_drops`](crate::Mib::render_drops)).
            pub const ALL: &'static [DropReason] = &[$(DropReason::$variant,)+];
            /// Number of reasons.
            pub const COUNT: usize = DropReason::ALL.len();

            /// Linux-style name, e.g. `"IP_CSUM"` (Linux's `SKB_DROP_REASON_IP_CSUM`). Unique.
            pub const fn name(self) -> &'static str {
                match self {
                    $(DropReason::$variant => $name,)+
                }
            }

            /// The MIB counters one drop for this reason bumps (besides its own drop count).
            pub const fn counters(self) -> &'static [Counter] {
                match self {
                    $(DropReason::$variant => &[$(Counter::$counter,)*],)+
                }
            }
        }
    };
}

drop_reasons! {
    // ---- Link layer ----
    /// An Ethernet frame whose destination MAC is neither ours nor broadcast (nor a multicast
    /// group we joined). Linux drops such `PACKET_OTHERHOST` frames in `ip_rcv_core`.
    Otherhost = "OTHERHOST" => [],
    /// An Ethernet frame shorter than its 14-byte header.
    MacHdr = "DEV_HDR" => [],
    /// A frame whose EtherType we do not handle (neither IPv4 nor ARP, nor IPv6 when the
    /// stack has an IPv6 address), or an IPv6 packet on an IP link without one. Linux: no
    /// `packet_type` matched in `__netif_receive_skb_core`.
    UnhandledProto = "UNHANDLED_PROTO" => [],
    /// An ARP packet that is truncated, not Ethernet/IPv4 (htype, ptype, hlen, plen), or has an
    /// unknown operation. ustack-specific name: Linux's `arp_rcv` drops these unnamed.
    ArpMalformed = "ARP_MALFORMED" => [],
    /// A packet waiting for ARP resolution when resolution gave up (no reply after
    /// `mcast_solicit` requests). Linux counts it only in the neighbour table's statistics;
    /// ustack also counts Ip OutDiscards, so that every datagram handed to IP
    /// (OutRequests) ends up transmitted or counted as discarded.
    NeighFailed = "NEIGH_FAILED" => [IpOutDiscards],
    /// A packet that would exceed the queue of packets waiting for resolution of one neighbour
    /// (`unres_qlen`); Linux drops the oldest queued packet. Counted in Ip OutDiscards (see
    /// [`NeighFailed`](DropReason::NeighFailed)).
    NeighQueueFull = "NEIGH_QUEUEFULL" => [IpOutDiscards],
    /// A frame the device could not queue for transmission (TX ring full).
    DevQueueFull = "FULL_RING" => [],

    // ---- IPv4 input (Linux ip_rcv_core, ip_rcv_finish, ip_local_deliver) ----
    /// An IPv4 header that is wrong: version not 4, IHL < 5, total length smaller than the
    /// header.
    IpInhdr = "IP_INHDR" => [IpInHdrErrors],
    /// An IPv4 header checksum that does not verify. Linux counts both, `csum_error` falling
    /// through to `inhdr_error` in `ip_rcv_core`.
    IpCsum = "IP_CSUM" => [IpInHdrErrors, IpExtInCsumErrors],
    /// A datagram shorter than its IPv4 total length (Linux `ip_rcv_core`, `PKT_TOO_SMALL`).
    IpTruncated = "PKT_TOO_SMALL" => [IpExtInTruncatedPkts],
    /// A datagram whose destination is not one of our addresses (nor broadcast): ustack does not
    /// forward, so Linux's `ip_error` path with forwarding off.
    IpInaddrErrors = "IP_INADDRERRORS" => [IpInAddrErrors],
    /// A datagram whose source address is invalid: multicast, limited broadcast, or zero
    /// (Linux `ip_route_input_slow`, martian source). No MIB counter, as in Linux.
    IpInvalidSource = "IP_INVALID_SOURCE" => [],
    /// A datagram for us with a protocol we do not handle (an ICMP protocol-unreachable is
    /// sent). Linux `ip_protocol_deliver_rcu`.
    IpNoproto = "IP_NOPROTO" => [IpInUnknownProtos],

    // ---- IPv4 output ----
    /// An outgoing datagram with no route to its destination.
    IpNoRoute = "IP_OUTNOROUTES" => [IpOutNoRoutes],
    /// An outgoing datagram larger than the MTU with DF set (cannot be fragmented; an ICMP
    /// fragmentation-needed goes back when it came from outside). Linux `ip_fragment`.
    PktTooBig = "PKT_TOO_BIG" => [IpFragFails],

    // ---- IPv4 reassembly (Linux net/ipv4/ip_fragment.c) ----
    /// A fragment freed because its datagram's reassembly timed out (`ipfrag_time`). Counted
    /// per fragment; the stack bumps Ip ReasmTimeout once per datagram itself. (Linux bumps
    /// ReasmFails once per datagram in `ip_expire`.)
    FragReasmTimeout = "FRAG_REASM_TIMEOUT" => [IpReasmFails],
    /// A fragment too far behind the datagram's others (`ipfrag_max_dist`).
    FragTooFar = "FRAG_TOO_FAR" => [IpReasmFails],
    /// A fragment that duplicates one already queued. (Linux frees it without a MIB count.)
    DupFrag = "DUP_FRAG" => [IpReasmFails],
    /// A fragment that overlaps one already queued: the whole datagram is abandoned, as Linux
    /// does since 2018 (RFC 5722's rule, applied to IPv4). Linux counts IpExt ReasmOverlaps too.
    /// ustack-specific name.
    FragOverlap = "FRAG_OVERLAP" => [IpReasmFails, IpExtReasmOverlaps],
    /// A fragment refused because reassembly memory is over `ipfrag_high_thresh`.
    /// ustack-specific name (Linux: `ip_find` fails, unnamed).
    FragMemLimit = "IPFRAG_MEM" => [IpReasmFails],
    /// A fragment that cannot be part of a valid datagram: it ends past 65535, a non-last
    /// fragment's length is not a multiple of 8, or it contradicts the known end.
    /// ustack-specific name.
    FragInvalid = "FRAG_INVALID" => [IpReasmFails],
    /// A fragment that would make its datagram need more than 1,365 fragments (the most a
    /// 65,535-byte datagram takes over a 68-byte MTU): the whole datagram is discarded
    /// (FragmentSmack, CVE-2018-5391). ustack-specific name and rule.
    FragTooMany = "FRAG_TOO_MANY" => [IpReasmFails],

    // ---- ICMP (Linux icmp_rcv) ----
    /// An ICMP message whose checksum does not verify (Linux `csum_error` then `error`).
    IcmpCsum = "ICMP_CSUM" => [IcmpInCsumErrors, IcmpInErrors],
    /// An ICMP message too short for its type. ustack-specific name.
    IcmpMalformed = "ICMP_MALFORMED" => [IcmpInErrors],
    /// An ICMP message we generated (echo reply, unreachable) that could not be queued for
    /// transmission (TX queue full). Linux counts Icmp OutErrors when `icmp_push_reply`
    /// fails. ustack-specific name.
    IcmpOutQueueFull = "ICMP_OUT_QUEUEFULL" => [IcmpOutErrors],
    /// An echo reply dropped because the queue of replies waiting for the application
    /// (`recv_echo_reply`) is full: the oldest is dropped. Linux's ping socket drops it with
    /// its receive buffer full and no MIB counter. ustack-specific name.
    IcmpReplyQueueFull = "ICMP_REPLY_QUEUEFULL" => [],

    // ---- IPv6 input (Linux ip6_rcv_core, ip6_protocol_deliver_rcu, exthdrs.c) ----
    /// An IPv6 packet with a bad header: version not 6, shorter than 40 bytes, a
    /// jumbogram, a malformed or misplaced extension header, a hop-by-hop or destination
    /// option that says "discard" (RFC 8200 §4.2). Linux `SKB_DROP_REASON_IP_INHDR` in
    /// `ip6_rcv_core` and `ipv6_parse_hopopts`; prefixed so that names stay unique.
    Ip6Inhdr = "IP6_INHDR" => [Ip6InHdrErrors],
    /// An IPv6 packet shorter than its Payload Length (Linux `ip6_rcv_core`, `PKT_TOO_SMALL`).
    Ip6Truncated = "IP6_PKT_TOO_SMALL" => [Ip6InTruncatedPkts],
    /// An IPv6 packet whose destination is not one of our addresses (nor one still being
    /// checked by duplicate address detection): ustack does not forward, so Linux's
    /// `ip6_forward` error path with forwarding off.
    Ip6InaddrErrors = "IP6_INADDRERRORS" => [Ip6InAddrErrors],
    /// An IPv6 packet to a multicast group we are not in (we are in all-nodes and our
    /// solicited-node groups). Linux `ip6_mc_input` frees it without a MIB count (after
    /// counting InMcastPkts, as ustack does). ustack-specific name.
    Ip6McastNotJoined = "IP6_MCAST_NOT_JOINED" => [],
    /// An IPv6 packet with addresses that must not appear on a link: a loopback source or
    /// destination, a multicast or v4-mapped source, a multicast destination of scope 0 or
    /// 1 (RFC 4291 §2.5.3, §2.7). Linux `ip6_rcv_core` counts all of them InHdrErrors.
    /// ustack-specific name.
    Ip6InvalidSource = "IP6_INVALID_ADDR" => [Ip6InHdrErrors],
    /// An IPv6 packet whose next header we do not handle (ICMPv6 parameter problem code 1
    /// is sent, RFC 8200 §4). Linux `ip6_protocol_deliver_rcu`, `IP_NOPROTO`.
    Ip6Noproto = "IP6_NOPROTO" => [Ip6InUnknownProtos],
    /// An IPv6 packet that must not be sent: no source address of the destination's scope
    /// (no route). Linux `ip6_route_output` failing, `IPSTATS_MIB_OUTNOROUTES`.
    Ip6NoRoute = "IP6_OUTNOROUTES" => [Ip6OutNoRoutes],
    /// An outgoing IPv6 packet waiting for neighbour discovery when discovery gave up (no
    /// advertisement after `mcast_solicit` solicitations), or refused by a full table.
    /// The IPv6 twin of `NEIGH_FAILED`.
    Ip6NeighFailed = "IP6_NEIGH_FAILED" => [Ip6OutDiscards],
    /// An outgoing IPv6 packet pushed out of the queue of one unresolved neighbour
    /// (`unres_qlen`). The IPv6 twin of `NEIGH_QUEUEFULL`.
    Ip6NeighQueueFull = "IP6_NEIGH_QUEUEFULL" => [Ip6OutDiscards],
    /// An outgoing IPv6 packet larger than the path MTU that may not be fragmented (it is
    /// not ours to fragment, or the path is below the minimum). Linux `ip6_fragment`.
    Ip6PktTooBig = "IP6_PKT_TOO_BIG" => [Ip6FragFails],

    // ---- IPv6 reassembly (Linux net/ipv6/reassembly.c) ----
    /// A fragment freed because its packet's reassembly timed out (`ip6frag_time`). Counted
    /// per fragment; Ip6 ReasmTimeout and ReasmFails count once per packet, as Linux's
    /// `ip6_frag_expire`.
    Ip6FragTimeout = "IP6_FRAG_REASM_TIMEOUT" => [],
    /// A fragment overlapping another of its packet, and each fragment held for that packet:
    /// the whole packet is discarded (RFC 5722 §4). Ip6 ReasmFails counts once per packet,
    /// as Linux's `ip6_frag_queue` (whose ReasmOverlaps is not in `/proc/net/snmp6`).
    Ip6FragOverlap = "IP6_FRAG_OVERLAP" => [],
    /// A fragment with the same offset and length as one already held: dropped alone, the
    /// packet kept (RFC 5722 §4 allows it). Linux `DUP_FRAG`, without a MIB count.
    Ip6FragDup = "IP6_DUP_FRAG" => [],
    /// A fragment refused because IPv6 reassembly memory is over `ip6frag_high_thresh`.
    Ip6FragMemLimit = "IP6_FRAG_MEM" => [Ip6ReasmFails],
    /// A fragment that cannot be part of a valid packet, and each fragment held for it: it
    /// contradicts the known end, or its packet would need more than 1,024 fragments
    /// (FragmentSmack; ustack's bound). Ip6 ReasmFails counts once per packet. (A non-last
    /// fragment whose length is not a multiple of 8, or one ending past 65,535, is an
    /// `IP6_INHDR`, answered with a Parameter Problem as RFC 8200 §4.5 says.)
    Ip6FragInvalid = "IP6_FRAG_INVALID" => [],

    // ---- ICMPv6 and Neighbour Discovery (Linux icmpv6_rcv, ndisc.c) ----
    /// An ICMPv6 message whose checksum does not verify.
    Icmp6Csum = "ICMP6_CSUM" => [Icmp6InCsumErrors, Icmp6InErrors],
    /// An ICMPv6 message too short for its type. ustack-specific name.
    Icmp6Malformed = "ICMP6_MALFORMED" => [Icmp6InErrors],
    /// A Neighbor Discovery message failing RFC 4861's validity checks (hop limit not 255,
    /// code not 0, a multicast target, a source link-layer option from the unspecified
    /// address, a bad option length, a router advertisement from a source that is not
    /// link-local). Linux `ndisc_rcv` drops them as
    /// `SKB_DROP_REASON_IPV6_NDISC_*`, without a MIB count; ustack-specific name.
    NdiscInvalid = "IPV6_NDISC_INVALID" => [],
    /// A router advertisement's prefix not turned into an address: the interface holds
    /// `net.ipv6.conf.default.max_addresses` already (Linux `ipv6_add_addr`: ENOBUFS,
    /// without a count). ustack-specific name.
    Ip6RaAddrLimit = "IPV6_RA_ADDR_LIMIT" => [],
    /// A router advertisement's router not made a default router: ustack keeps at most 8
    /// (Linux has no bound of its own). ustack-specific name.
    Ip6RaRouterLimit = "IPV6_RA_ROUTER_LIMIT" => [],
    /// An ICMPv6 message we generated that could not be queued or routed.
    Icmp6OutFailed = "ICMP6_OUT_FAILED" => [Icmp6OutErrors],

    // ---- UDP (Linux __udp4_lib_rcv, __udp_queue_rcv_skb, udp_send_skb) ----
    /// A UDP datagram whose checksum does not verify.
    UdpCsum = "UDP_CSUM" => [UdpInCsumErrors, UdpInErrors],
    /// A UDP header that is truncated or whose length field is out of range (Linux reports
    /// these as `PKT_TOO_SMALL`; renamed so that names stay unique).
    UdpMalformed = "UDP_MALFORMED" => [UdpInErrors],
    /// A UDP datagram for a port with no socket (an ICMP port-unreachable is sent).
    UdpNoSocket = "NO_SOCKET" => [UdpNoPorts],
    /// A UDP datagram dropped because the socket's receive buffer is full.
    SocketRcvbuff = "SOCKET_RCVBUFF" => [UdpRcvbufErrors, UdpInErrors],
    /// A UDP datagram not sent for lack of send buffer (Linux counts SndbufErrors on ENOBUFS
    /// in `udp_send_skb`). Name mirrors `SOCKET_RCVBUFF`.
    UdpSndbuf = "SOCKET_SNDBUFF" => [UdpSndbufErrors],
    /// A UDP datagram over IPv6 whose checksum does not verify or is zero (RFC 8200 §8.1:
    /// the checksum is mandatory over IPv6; Linux `udp6_csum_init`). Prefixed so that names
    /// stay unique.
    Udp6Csum = "UDP6_CSUM" => [Udp6InCsumErrors, Udp6InErrors],
    /// A UDP header over IPv6 that is truncated or whose length is out of range.
    Udp6Malformed = "UDP6_MALFORMED" => [Udp6InErrors],
    /// A UDP datagram over IPv6 for a port with no socket (an ICMPv6 port unreachable is
    /// sent). Linux `NO_SOCKET` in `__udp6_lib_rcv`; prefixed so that names stay unique.
    Udp6NoSocket = "UDP6_NO_SOCKET" => [Udp6NoPorts],
    /// A UDP datagram over IPv6 dropped because the socket's receive buffer is full.
    Udp6Rcvbuf = "UDP6_SOCKET_RCVBUFF" => [Udp6RcvbufErrors, Udp6InErrors],
    /// A UDP datagram over IPv6 not sent for lack of device queue space.
    Udp6Sndbuf = "UDP6_SOCKET_SNDBUFF" => [Udp6SndbufErrors],

    // ---- TCP (Linux tcp_v4_rcv, tcp_validate_incoming, tcp_data_queue, tcp_conn_request) ----
    /// A TCP segment whose checksum does not verify (Linux `csum_error` then `bad_packet`).
    TcpCsum = "TCP_CSUM" => [TcpInCsumErrors, TcpInErrs],
    /// A TCP header that is truncated or has a data offset below 5 (Linux `bad_packet`).
    TcpHdr = "TCP_HDR" => [TcpInErrs],
    /// A TCP segment for no socket (a RST is sent unless it carries RST; that RST counts
    /// OutRsts when sent). Linux `NO_SOCKET`; prefixed so that names stay unique.
    TcpNoSocket = "TCP_NO_SOCKET" => [],
    /// A TCP segment with flags invalid for the state (e.g. no ACK in a synchronized state).
    TcpFlags = "TCP_FLAGS" => [],
    /// A TCP segment outside the receive window (RFC 9293 section 3.10.7.4 "first, check
    /// sequence number"): an ACK is sent and the segment dropped.
    TcpInvalidSequence = "TCP_INVALID_SEQUENCE" => [],
    /// A TCP segment whose data was all received before (a retransmission: our ACK was
    /// probably lost; an immediate ACK with D-SACK is sent).
    TcpOldData = "TCP_OLD_DATA" => [TcpExtDelayedACKLost],
    /// A TCP segment whose data starts beyond the right edge of the receive window.
    TcpOverWindow = "TCP_OVERWINDOW" => [],
    /// A TCP segment with data while our receive window is zero.
    TcpZeroWindow = "TCP_ZEROWINDOW" => [TcpExtTCPZeroWindowDrop],
    /// A TCP segment that fails the PAWS check (RFC 7323 section 5.3): its timestamp is older
    /// than the last one accepted.
    TcpPaws = "TCP_RFC7323_PAWS" => [TcpExtPAWSEstab],
    /// A RST that is not acceptable (RFC 5961 section 3: outside the window, or in the window
    /// but not exactly rcv_nxt, which gets a challenge ACK).
    TcpReset = "TCP_RESET" => [],
    /// A SYN in a synchronized state (RFC 5961 section 4): a challenge ACK is sent.
    TcpInvalidSyn = "TCP_INVALID_SYN" => [TcpExtTCPSYNChallenge],
    /// An ACK for data we have not sent yet (ack > snd_nxt, RFC 9293 section 3.10.7.4): an
    /// ACK is sent and the segment dropped.
    TcpAckUnsentData = "TCP_ACK_UNSENT_DATA" => [],
    /// An ACK older than the window of acceptable ACKs (RFC 5961 section 5).
    TcpTooOldAck = "TCP_TOO_OLD_ACK" => [],
    /// A TCP segment for a socket in CLOSED state.
    TcpClose = "TCP_CLOSE" => [],
    /// A connection request dropped because the listener's accept queue is full. Linux
    /// `tcp_conn_request`: ListenOverflows, then `tcp_listendrop`. ustack-specific name.
    TcpListenOverflow = "TCP_LISTEN_OVERFLOW" => [TcpExtListenOverflows, TcpExtListenDrops],
    /// A SYN dropped because the SYN queue is full and SYN cookies are off. Linux
    /// `tcp_syn_flood_action` then `tcp_listendrop`. ustack-specific name.
    TcpReqQFullDrop = "TCP_REQQ_FULL_DROP" => [TcpExtTCPReqQFullDrop, TcpExtListenDrops],
    /// A SYN dropped without SYN cookies because the SYN queue is in the last quarter of
    /// `tcp_max_syn_backlog` (Linux `tcp_conn_request`: "Kill the following clause, if you
    /// dislike this way", then `drop_and_release` -> `tcp_listendrop`). ustack-specific name.
    TcpSynBacklogDrop = "TCP_SYN_BACKLOG" => [TcpExtListenDrops],
    /// An out-of-order extent discarded to make room in the receive buffer, from the
    /// highest sequence down (Linux `tcp_prune_ofo_queue`; counted per extent, as Linux
    /// counts per skb; the prune itself counts TcpExt OfoPruned once).
    TcpOfoQueuePrune = "TCP_OFO_QUEUE_PRUNE" => [],
    /// An out-of-order segment whose bytes were all queued already ("All the bits are
    /// present", Linux `tcp_data_queue_ofo`).
    TcpOfoMerge = "TCP_OFOMERGE" => [TcpExtTCPOFOMerge],
    /// A TCP segment whose data found no buffer memory: the stack's `tcp_mem` refused it
    /// (over `tcp_mem.high`, or under memory pressure over the socket's fair share) and
    /// pruning the socket's out-of-order queue did not make room (Linux `tcp_data_queue` /
    /// `tcp_data_queue_ofo` after `tcp_try_rmem_schedule` fails; the stack also counts
    /// TcpExt TCPRcvQDrop for in-order data, TCPOFODrop for out-of-order data).
    ProtoMem = "PROTO_MEM" => [],
    /// A segment received with its payload left on the device (a shm link's direct
    /// receive, `Stack::receive_direct`) that turned out not to start at `RCV.NXT` of an
    /// empty out-of-order queue, which the stack checked before taking it: its data is
    /// not queued (the peer sends it again). ustack-specific; not expected to count.
    TcpDirectMiss = "TCP_DIRECT_MISS" => [],
    /// A data segment queued for the device with its payload left in the send buffer (a
    /// device that lends its transmit slots, `Stack::poll_transmit_lent`) whose bytes
    /// were acknowledged, or whose connection went, before the device took it: nothing is
    /// left to send (the peer has those bytes). ustack-specific; Linux's queued skb holds
    /// its own reference to the payload's pages and goes out anyway.
    TcpTxStale = "TCP_TX_STALE" => [],
}

impl DropReason {
    /// The reason called `name` ([`name`](DropReason::name)), e.g. `"IP_CSUM"`.
    pub fn from_name(name: &str) -> Option<DropReason> {
        DropReason::ALL.iter().copied().find(|r| r.name() == name)
    }
}

impl fmt::Display for DropReason {
    /// The Linux-style name, e.g. `IP_CSUM`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
