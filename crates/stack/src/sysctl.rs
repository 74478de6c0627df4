//! Tunables named after Linux sysctls, one table with default, range and unit per entry,
//! validated when set. Names, defaults and meanings follow
//! [Documentation/networking/ip-sysctl.rst](https://docs.kernel.org/networking/ip-sysctl.html)
//! and `net/ipv4/sysctl_net_ipv4.c` (`net/ipv6/sysctl_net_ipv6.c` for `net.ipv6.*`);
//! docs/sysctl.md lists them for users. The `net.ipv4.neigh.default.*` tunables apply to
//! the one neighbour table, so to IPv6 neighbours too (Linux's `net.ipv6.neigh.default.*`
//! have the same defaults).
//!
//! Values are integers (booleans are 0/1), as `sysctl -w` takes them. A field is read by
//! the stack directly (`stack.sysctl().ip_default_ttl`); [`Sysctl::set`] is the one way
//! in from outside, and it refuses values out of range.

use core::fmt;

/// What one tunable is: its Linux name, default, allowed range and unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysctlInfo {
    /// The full Linux name, e.g. `net.ipv4.ip_default_ttl`.
    pub name: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
    /// Unit of the value: "bytes", "ms", "s", "packets", "bool", ...
    pub unit: &'static str,
    /// One line on what it does.
    pub doc: &'static str,
}

/// A refused `set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysctlError {
    /// No tunable has that name.
    UnknownName(String),
    /// The value is outside the tunable's range.
    OutOfRange {
        name: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
}

impl fmt::Display for SysctlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SysctlError::UnknownName(n) => write!(f, "unknown sysctl {n:?}"),
            SysctlError::OutOfRange {
                name,
                value,
                min,
                max,
            } => {
                write!(f, "{name} = {value} is out of range [{min}, {max}]")
            }
        }
    }
}

impl std::error::Error for SysctlError {}

macro_rules! sysctls {
    ($( $(#[doc = $doc:literal])+ $field:ident: $name:literal = $default:expr, [$min:expr, $max:expr], $unit:literal; )*) => {
        /// The stack's tunables. `Sysctl::default()` holds Linux's defaults.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Sysctl {
            $( $(#[doc = $doc])+ pub $field: u64, )*
        }

        impl Default for Sysctl {
            fn default() -> Self {
                Sysctl { $( $field: $default, )* }
            }
        }

        impl Sysctl {
            /// Every tunable, in documentation order.
            pub const TABLE: &'static [SysctlInfo] = &[
                $( SysctlInfo { name: $name, default: $default, min: $min, max: $max, unit: $unit,
                                doc: concat!($($doc),+) }, )*
            ];

            /// The value of the tunable called `name` (its full Linux name).
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $( $name => Some(self.$field), )*
                    _ => None,
                }
            }

            /// Set the tunable called `name`, refusing unknown names and values out of range.
            pub fn set(&mut self, name: &str, value: u64) -> Result<(), SysctlError> {
                let info = Self::info(name).ok_or_else(|| SysctlError::UnknownName(name.to_owned()))?;
                if value < info.min || value > info.max {
                    return Err(SysctlError::OutOfRange { name: info.name, value, min: info.min, max: info.max });
                }
                match name {
                    $( $name => self.$field = value, )*
                    _ => unreachable!("name was found in TABLE"),
                }
                Ok(())
            }
        }
    };
}

sysctls! {
    /// TTL of outgoing IPv4 datagrams.
    ip_default_ttl: "net.ipv4.ip_default_ttl" = 64, [1, 255], "hops";
    /// Lowest local port picked for an unbound socket (first half of ip_local_port_range).
    ip_local_port_min: "net.ipv4.ip_local_port_range.min" = 32768, [1, 65535], "port";
    /// Highest local port picked for an unbound socket (second half of ip_local_port_range).
    ip_local_port_max: "net.ipv4.ip_local_port_range.max" = 60999, [1, 65535], "port";
    /// Memory that IPv4 reassembly may hold; fragments beyond it are refused.
    ipfrag_high_thresh: "net.ipv4.ipfrag_high_thresh" = 4 * 1024 * 1024, [0, (1 << 31)], "bytes";
    /// Kept for Linux compatibility: Linux >= 4.17 no longer evicts down to it.
    ipfrag_low_thresh: "net.ipv4.ipfrag_low_thresh" = 3 * 1024 * 1024, [0, (1 << 31)], "bytes";
    /// How long an incomplete datagram's fragments are kept.
    ipfrag_time: "net.ipv4.ipfrag_time" = 30, [1, 3600], "s";
    /// Largest gap in arrivals from one source tolerated within a reassembly queue (0 off).
    ipfrag_max_dist: "net.ipv4.ipfrag_max_dist" = 64, [0, 65535], "fragments";
    /// Minimum interval between ICMP errors to one destination (token bucket per host).
    icmp_ratelimit: "net.ipv4.icmp_ratelimit" = 1000, [0, 60_000], "ms";
    /// Bit mask of ICMP types that are rate limited (default: unreachable, source quench, time exceeded, parameter problem).
    icmp_ratemask: "net.ipv4.icmp_ratemask" = 6168, [0, u32::MAX as u64], "mask";
    /// Global limit on ICMP errors sent per second.
    icmp_msgs_per_sec: "net.ipv4.icmp_msgs_per_sec" = 1000, [0, 1_000_000], "packets/s";
    /// Burst allowed above icmp_msgs_per_sec.
    icmp_msgs_burst: "net.ipv4.icmp_msgs_burst" = 50, [0, 1_000_000], "packets";
    /// Ignore every ICMP echo request.
    icmp_echo_ignore_all: "net.ipv4.icmp_echo_ignore_all" = 0, [0, 1], "bool";
    /// Ignore ICMP echo requests sent to a broadcast address.
    icmp_echo_ignore_broadcasts: "net.ipv4.icmp_echo_ignore_broadcasts" = 1, [0, 1], "bool";
    /// Default receive buffer of a socket (UDP receive queue bound).
    rmem_default: "net.core.rmem_default" = 212_992, [256, (1 << 30)], "bytes";
    /// Default send buffer of a socket.
    wmem_default: "net.core.wmem_default" = 212_992, [256, (1 << 30)], "bytes";
    /// How long a resolved neighbour stays REACHABLE without confirmation.
    neigh_base_reachable_time_ms: "net.ipv4.neigh.default.base_reachable_time_ms" = 30_000, [1, 3_600_000], "ms";
    /// Interval between ARP requests while resolving.
    neigh_retrans_time_ms: "net.ipv4.neigh.default.retrans_time_ms" = 1000, [1, 3_600_000], "ms";
    /// ARP requests (broadcast) sent before resolution fails.
    neigh_mcast_solicit: "net.ipv4.neigh.default.mcast_solicit" = 3, [1, 255], "probes";
    /// Packets queued per neighbour while it resolves (Linux's unres_qlen).
    neigh_unres_qlen: "net.ipv4.neigh.default.unres_qlen" = 101, [0, 65_535], "packets";
    /// Unused neighbour entries older than this are removed.
    neigh_gc_stale_time: "net.ipv4.neigh.default.gc_stale_time" = 60, [1, 86_400], "s";
    /// Hard limit on neighbour entries (Linux's gc_thresh3).
    neigh_gc_thresh3: "net.ipv4.neigh.default.gc_thresh3" = 1024, [1, 1_000_000], "entries";
    /// Frames the device transmit queue holds before it drops (the interface's txqueuelen).
    txqueuelen: "net.core.txqueuelen" = 1000, [1, 1_000_000], "packets";
    /// Frames one round of a shard's poll loop receives before it yields (a round that runs out counts a time_squeeze).
    netdev_budget: "net.core.netdev_budget" = 300, [1, i32::MAX as u64], "packets";
    /// Time one round of a shard's poll loop may spend receiving before it yields (Linux: 2 jiffies, 2000 at HZ=1000).
    netdev_budget_usecs: "net.core.netdev_budget_usecs" = 2000, [0, i32::MAX as u64], "us";
    /// Upper bound on a listener's accept queue (listen backlog is clamped to it).
    somaxconn: "net.core.somaxconn" = 4096, [1, 1 << 20], "connections";
    /// SYN queue bound when SYN cookies are off (Linux: a quarter is kept for proven peers).
    tcp_max_syn_backlog: "net.ipv4.tcp_max_syn_backlog" = 4096, [1, 1 << 24], "requests";
    /// SYN cookies: 0 off, 1 when the SYN queue overflows, 2 always.
    tcp_syncookies: "net.ipv4.tcp_syncookies" = 1, [0, 2], "mode";
    /// Reset (instead of dropping) the final ACK when the accept queue is full.
    tcp_abort_on_overflow: "net.ipv4.tcp_abort_on_overflow" = 0, [0, 1], "bool";
    /// SYN retransmissions of an active open before giving up.
    tcp_syn_retries: "net.ipv4.tcp_syn_retries" = 6, [1, 127], "retries";
    /// SYN retransmissions of an active open whose timeout stays the initial one, not
    /// backed off (Linux 6.18 `tcp_retransmit_timer`); the give-up time is unchanged.
    tcp_syn_linear_timeouts: "net.ipv4.tcp_syn_linear_timeouts" = 4, [0, 127], "retries";
    /// SYN-ACK retransmissions of a passive open before the request is dropped.
    tcp_synack_retries: "net.ipv4.tcp_synack_retries" = 5, [0, 255], "retries";
    /// Retransmissions after which the route is doubted (reported only; no routing cache).
    tcp_retries1: "net.ipv4.tcp_retries1" = 3, [0, 255], "retries";
    /// Retransmissions of data before the connection is aborted (ETIMEDOUT).
    tcp_retries2: "net.ipv4.tcp_retries2" = 15, [0, 255], "retries";
    /// Retransmissions of an orphaned connection (closed by the user) before it is aborted; 0 means 8.
    tcp_orphan_retries: "net.ipv4.tcp_orphan_retries" = 0, [0, 255], "retries";
    /// Orphaned connections (closed, still sending) a stack keeps; beyond it they are reset (TCPAbortOnMemory). Linux: ehash size / 2, 262144 with 512k buckets.
    tcp_max_orphans: "net.ipv4.tcp_max_orphans" = 262_144, [0, i32::MAX as u64], "sockets";
    /// How long an orphaned connection stays in FIN-WAIT-2.
    tcp_fin_timeout: "net.ipv4.tcp_fin_timeout" = 60, [1, 3600], "s";
    /// TIME-WAIT records a stack keeps; beyond it a closing connection skips TIME-WAIT (TCPTimeWaitOverflow). Linux: ehash size / 2, 262144 with 512k buckets.
    tcp_max_tw_buckets: "net.ipv4.tcp_max_tw_buckets" = 262_144, [0, i32::MAX as u64], "records";
    /// Minimum interval between ACKs answering out-of-window segments, and between challenge ACKs (CVE-2016-5696), per connection or TIME-WAIT record.
    tcp_invalid_ratelimit: "net.ipv4.tcp_invalid_ratelimit" = 500, [0, i32::MAX as u64], "ms";
    /// RFC 7323 timestamps on connections this stack opens or accepts.
    tcp_timestamps: "net.ipv4.tcp_timestamps" = 1, [0, 1], "bool";
    /// RFC 7323 window scaling.
    tcp_window_scaling: "net.ipv4.tcp_window_scaling" = 1, [0, 1], "bool";
    /// RFC 2018 selective acknowledgments.
    tcp_sack: "net.ipv4.tcp_sack" = 1, [0, 1], "bool";
    /// Floor on the MSS a peer can impose (its MSS option): segments never carry less payload.
    tcp_min_snd_mss: "net.ipv4.tcp_min_snd_mss" = 48, [48, 65_535], "bytes";
    /// Smallest receive buffer of a TCP socket (first of tcp_rmem).
    tcp_rmem_min: "net.ipv4.tcp_rmem.min" = 4096, [1, 1 << 30], "bytes";
    /// Initial receive buffer of a TCP socket (second of tcp_rmem).
    tcp_rmem_default: "net.ipv4.tcp_rmem.default" = 131_072, [1, 1 << 30], "bytes";
    /// Largest receive buffer, the bound on receive-window growth (third of tcp_rmem).
    tcp_rmem_max: "net.ipv4.tcp_rmem.max" = 6_291_456, [1, 1 << 30], "bytes";
    /// Smallest send buffer of a TCP socket (first of tcp_wmem).
    tcp_wmem_min: "net.ipv4.tcp_wmem.min" = 4096, [1, 1 << 30], "bytes";
    /// Initial send buffer of a TCP socket (second of tcp_wmem).
    tcp_wmem_default: "net.ipv4.tcp_wmem.default" = 16_384, [1, 1 << 30], "bytes";
    /// Largest send buffer (third of tcp_wmem).
    tcp_wmem_max: "net.ipv4.tcp_wmem.max" = 4_194_304, [1, 1 << 30], "bytes";
    /// Stack-wide TCP buffer memory (pages of 4096 B) below which a stack under memory pressure leaves it (first of tcp_mem; Linux: 3/4 of tcp_mem.pressure, its tcp_init_mem with 16 GiB).
    tcp_mem_low: "net.ipv4.tcp_mem.low" = 196_608, [1, 1 << 31], "pages";
    /// TCP buffer memory (pages) above which a stack enters memory pressure (TCPMemoryPressures): windows stop growing, each socket gets only a fair share, out-of-order queues are pruned (second of tcp_mem).
    tcp_mem_pressure: "net.ipv4.tcp_mem.pressure" = 262_144, [1, 1 << 31], "pages";
    /// TCP buffer memory (pages) above which allocations fail: data in is dropped (PROTO_MEM), sends get EAGAIN, orphans are aborted (TCPAbortOnMemory); a socket with an empty receive queue may still take one segment (third of tcp_mem).
    tcp_mem_high: "net.ipv4.tcp_mem.high" = 393_216, [1, 1 << 31], "pages";
    /// Hard budget (pages) of a stack's TCP buffer pool, never exceeded, not even by the one segment an empty receive queue may take past tcp_mem.high (ustack only; default twice tcp_mem.high).
    tcp_mem_budget: "net.ipv4.tcp_mem.budget" = 786_432, [1, 1 << 31], "pages";
    /// Idle time before the first keepalive probe.
    tcp_keepalive_time: "net.ipv4.tcp_keepalive_time" = 7200, [1, 32_767], "s";
    /// Interval between keepalive probes.
    tcp_keepalive_intvl: "net.ipv4.tcp_keepalive_intvl" = 75, [1, 32_767], "s";
    /// Unanswered keepalive probes before the connection is aborted.
    tcp_keepalive_probes: "net.ipv4.tcp_keepalive_probes" = 9, [1, 127], "probes";
    /// Challenge ACKs (RFC 5961) sent per second, stack-wide, randomised each second to limit/2 + random(limit); 2147483647 (INT_MAX, Linux 6.0+) means no stack-wide limit.
    tcp_challenge_ack_limit: "net.ipv4.tcp_challenge_ack_limit" = i32::MAX as u64, [0, i32::MAX as u64], "packets/s";
    /// Reuse TIME-WAIT ports for outgoing connections: 0 off, 1 on, 2 loopback only.
    tcp_tw_reuse: "net.ipv4.tcp_tw_reuse" = 2, [0, 2], "mode";
    /// Congestion control of new connections: 0 reno, 1 cubic (Linux names it by string).
    tcp_congestion_control: "net.ipv4.tcp_congestion_control" = 1, [0, 1], "0=reno,1=cubic";
    /// Black-hole detection (RFC 4821): 0 off, 1 after repeated RTOs lower the MSS to tcp_base_mss, then halve it.
    tcp_mtu_probing: "net.ipv4.tcp_mtu_probing" = 0, [0, 1], "mode";
    /// The MSS that tcp_mtu_probing falls back to first when it suspects a black hole.
    tcp_base_mss: "net.ipv4.tcp_base_mss" = 1024, [48, 65_535], "bytes";
    /// Lowest MSS that tcp_mtu_probing's halving reaches.
    tcp_mtu_probe_floor: "net.ipv4.tcp_mtu_probe_floor" = 48, [48, 65_535], "bytes";
    /// Lowest path MTU an ICMP fragmentation-needed may set; smaller values are raised to it.
    ip_min_pmtu: "net.ipv4.route.min_pmtu" = 552, [68, 65_535], "bytes";
    /// Hop limit of outgoing IPv6 packets (NDP messages always carry 255, RFC 4861 §4).
    ip6_hop_limit: "net.ipv6.conf.default.hop_limit" = 64, [1, 255], "hops";
    /// Memory that IPv6 reassembly may hold; fragments beyond it are refused.
    ip6frag_high_thresh: "net.ipv6.ip6frag_high_thresh" = 4 * 1024 * 1024, [0, (1 << 31)], "bytes";
    /// Kept for Linux compatibility: Linux >= 4.17 no longer evicts down to it.
    ip6frag_low_thresh: "net.ipv6.ip6frag_low_thresh" = 3 * 1024 * 1024, [0, (1 << 31)], "bytes";
    /// How long an incomplete IPv6 packet's fragments are kept (RFC 8200 §4.5: 60 seconds).
    ip6frag_time: "net.ipv6.ip6frag_time" = 60, [1, 3600], "s";
    /// Minimum interval between ICMPv6 errors to one destination (token bucket per host; Packet Too Big is exempt, as Linux's ratemask 0-1,3-127).
    icmp6_ratelimit: "net.ipv6.icmp.ratelimit" = 1000, [0, 60_000], "ms";
    /// Ignore every ICMPv6 echo request.
    icmp6_echo_ignore_all: "net.ipv6.icmp.echo_ignore_all" = 0, [0, 1], "bool";
    /// Ignore ICMPv6 echo requests sent to a multicast address.
    icmp6_echo_ignore_multicast: "net.ipv6.icmp.echo_ignore_multicast" = 0, [0, 1], "bool";
    /// How long a path MTU learnt from an ICMPv6 Packet Too Big is kept.
    ip6_mtu_expires: "net.ipv6.route.mtu_expires" = 600, [1, 86_400], "s";
    /// Most options (padding not counted) a Destination Options header may carry; more is a header error.
    ip6_max_dst_opts_number: "net.ipv6.max_dst_opts_number" = 8, [0, 255], "options";
    /// Most options (padding not counted) a Hop-by-Hop Options header may carry; more is a header error.
    ip6_max_hbh_opts_number: "net.ipv6.max_hbh_opts_number" = 8, [0, 255], "options";
    /// Duplicate address detection (RFC 4862 §5.4) for the stack's IPv6 addresses on Ethernet links.
    ip6_accept_dad: "net.ipv6.conf.default.accept_dad" = 1, [0, 1], "bool";
    /// Neighbour solicitations sent per address by duplicate address detection (0: none, the address is usable at once).
    ip6_dad_transmits: "net.ipv6.conf.default.dad_transmits" = 1, [0, 255], "probes";
    /// Router advertisements (RFC 4861 §6.3.4): 0 ignored (ustack's default; Linux's is 1), 1 or 2 processed (a host: Linux's 2 only matters with forwarding on): default routers, prefixes, autoconfigured addresses, router solicitations at start; IPv6 then runs on an Ethernet interface with no address configured, from its link-local one.
    ip6_accept_ra: "net.ipv6.conf.default.accept_ra" = 0, [0, 2], "mode";
    /// Take default routers from router advertisements (with accept_ra).
    ip6_accept_ra_defrtr: "net.ipv6.conf.default.accept_ra_defrtr" = 1, [0, 1], "bool";
    /// Take the prefix information of router advertisements (with accept_ra).
    ip6_accept_ra_pinfo: "net.ipv6.conf.default.accept_ra_pinfo" = 1, [0, 1], "bool";
    /// Stateless address autoconfiguration (RFC 4862 §5.5.3) from prefixes with the A flag (with accept_ra and accept_ra_pinfo).
    ip6_autoconf: "net.ipv6.conf.default.autoconf" = 1, [0, 1], "bool";
    /// Most IPv6 addresses of the interface, link-local and static ones included; autoconfigured addresses beyond it are refused (Linux: 0 means no limit; ustack always bounds).
    ip6_max_addresses: "net.ipv6.conf.default.max_addresses" = 16, [1, 1024], "addresses";
    /// Router solicitations sent when the link-local address becomes usable, until an advertisement arrives (Linux: -1 is no limit; ustack always bounds).
    ip6_router_solicitations: "net.ipv6.conf.default.router_solicitations" = 3, [0, 255], "probes";
    /// Interval between router solicitations (Linux backs it off, RFC 7559; ustack keeps it).
    ip6_router_solicitation_interval: "net.ipv6.conf.default.router_solicitation_interval" = 4, [1, 3600], "s";
    /// Flow labels on the IPv6 packets of TCP connections and UDP sockets, hashed from the addresses, ports and a secret (Linux `ip6_make_flowlabel`): 0 off, 1 on (ustack's default), as Linux's auto_flowlabels 0 and 1 (Linux's default 1 means "on unless the socket opts out"; ustack has no opt-out).
    ip6_auto_flowlabels: "net.ipv6.auto_flowlabels" = 1, [0, 1], "mode";
}

impl Sysctl {
    /// The table entry for `name`.
    pub fn info(name: &str) -> Option<&'static SysctlInfo> {
        Self::TABLE.iter().find(|i| i.name == name)
    }
}

/// `net.ipv4.ip_local_port_range` as the ephemeral-port searches walk it (TCP's connect,
/// UDP's bind): every port once, from a moving hint round the range, as Linux's
/// `__inet_hash_connect` and `udp_lib_get_port` search from an offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PortRange {
    lo: u16,
    hi: u16,
}

impl PortRange {
    /// The range the sysctls give; `None` if it is empty (min above max).
    pub(crate) fn of(sysctl: &Sysctl) -> Option<PortRange> {
        let (lo, hi) = (
            sysctl.ip_local_port_min as u16,
            sysctl.ip_local_port_max as u16,
        );
        (lo <= hi).then_some(PortRange { lo, hi })
    }

    /// A stack's first hint, from a seed (so that stacks spread their ports); the range's
    /// first port if the range is empty.
    pub(crate) fn first_hint(sysctl: &Sysctl, seed: u64) -> u16 {
        PortRange::of(sysctl).map_or(sysctl.ip_local_port_min as u16, |r| {
            r.lo + (seed % (u64::from(r.hi - r.lo) + 1)) as u16
        })
    }

    /// Every port of the range once, from `hint` (clamped into the range) round to just
    /// before it.
    pub(crate) fn from(self, hint: u16) -> impl Iterator<Item = u16> {
        let span = u32::from(self.hi - self.lo) + 1;
        let start = u32::from(hint.clamp(self.lo, self.hi) - self.lo);
        (0..span).map(move |i| self.lo + ((start + i) % span) as u16)
    }

    /// The hint after `port` was taken: the next port, wrapping.
    pub(crate) fn after(self, port: u16) -> u16 {
        if port >= self.hi { self.lo } else { port + 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_in_range_and_match_table() {
        let s = Sysctl::default();
        for info in Sysctl::TABLE {
            let v = s.get(info.name).unwrap();
            assert_eq!(v, info.default, "{}", info.name);
            assert!(
                info.min <= v && v <= info.max,
                "{} default out of range",
                info.name
            );
        }
        assert_eq!(s.ip_default_ttl, 64);
    }

    #[test]
    fn set_validates() {
        let mut s = Sysctl::default();
        s.set("net.ipv4.ip_default_ttl", 128).unwrap();
        assert_eq!(s.ip_default_ttl, 128);
        assert_eq!(
            s.set("net.ipv4.ip_default_ttl", 0),
            Err(SysctlError::OutOfRange {
                name: "net.ipv4.ip_default_ttl",
                value: 0,
                min: 1,
                max: 255
            })
        );
        assert!(matches!(
            s.set("net.ipv4.nope", 1),
            Err(SysctlError::UnknownName(_))
        ));
        assert_eq!(s.ip_default_ttl, 128, "a refused set changes nothing");
    }
}
