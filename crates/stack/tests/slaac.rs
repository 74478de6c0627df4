//! Router discovery and stateless address autoconfiguration over the `sim` link (issue
//! #15): with `net.ipv6.conf.default.accept_ra` A solicits routers once its link-local
//! address is usable (RFC 4861 §6.3.7), takes a default router and an address from a
//! router advertisement (RFC 4861 §6.3.4, RFC 4862 §5.5.3), reaches an off-link host
//! through the router with that address, and lets the address deprecate and expire
//! (§5.5.4); hostile advertisements (not hop limit 255, not from a link-local source,
//! too many routers or prefixes) are dropped and counted; without `accept_ra` (the
//! default) advertisements change nothing and no solicitation is sent.
//!
//! B plays the router: its link-local address sends the advertisements (injected into A),
//! and it holds 2001:db8:2::2 on another prefix, with A's link-local as its own gateway.

use core::net::Ipv6Addr;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_obs::{Counter, DropReason};
use ustack_stack::{AddrState, Config, Instant, Ipv4Cidr, Ipv6Cidr};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC, Pair};
use ustack_wire::ndisc::{self, PrefixInfo, Prefixes, RouterAdvert};
use ustack_wire::{EthernetAddress, ethernet};

const PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
/// B's address on another prefix: off-link for A.
const B_FAR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

fn ll(mac: EthernetAddress) -> Ipv6Addr {
    ndisc::link_local_from_mac(mac)
}

/// A's address from PREFIX: the prefix and the interface identifier of its link-local.
fn slaac_a() -> Ipv6Addr {
    let iid = u128::from(ll(A_MAC)) & u128::from(u64::MAX);
    Ipv6Addr::from(u128::from(PREFIX) | iid)
}

/// A with only its link-local address (none configured when `accept_ra` is on) and
/// `accept_ra` = `accept_ra`; B with B_FAR and A's link-local as its gateway. Not run
/// yet.
fn pair(accept_ra: u64) -> Pair {
    let mut a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24));
    // With accept_ra, IPv6 starts from the link-local address alone; without it, IPv6
    // needs an address configured.
    if accept_ra == 0 {
        a = a.with_ipv6(Ipv6Cidr::new(ll(A_MAC), 64));
    }
    a.sysctl
        .set("net.ipv6.conf.default.accept_ra", accept_ra)
        .unwrap();
    let mut b =
        Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_FAR, 64));
    b.gateway6 = Some(ll(A_MAC));
    a.seed = Some(1);
    b.seed = Some(2);
    Pair::with_configs(SimLinkConfig::default(), a, b)
}

/// A router advertisement from `src` (hop limit `hops`) to all-nodes, as an Ethernet frame
/// to A.
fn ra_frame(src: Ipv6Addr, hops: u8, router_lifetime: u16, prefixes: &[PrefixInfo]) -> Vec<u8> {
    let ra = RouterAdvert {
        cur_hop_limit: 0,
        managed: false,
        other: false,
        router_lifetime,
        reachable_time: 0,
        retrans_timer: 0,
        source_lladdr: Some(B_MAC),
        mtu: None,
        prefixes: Prefixes::List(prefixes),
    };
    let mut msg = vec![0u8; ra.buffer_len()];
    ra.emit(&mut msg, &src, &ALL_NODES);
    let mut f = ustack_testkit::ipv6_frame(
        (B_MAC, ndisc::multicast_mac(ALL_NODES)),
        src,
        ALL_NODES,
        58,
        &msg,
    );
    f[ethernet::HEADER_LEN + 7] = hops;
    f
}

fn prefix(p: Ipv6Addr, valid: u32, preferred: u32) -> PrefixInfo {
    PrefixInfo {
        prefix_len: 64,
        on_link: true,
        autonomous: true,
        valid_lifetime: valid,
        preferred_lifetime: preferred,
        prefix: p,
    }
}

/// A's address from PREFIX has valid and preferred lifetimes ending `secs` after `from`.
fn assert_lifetimes(p: &Pair, from: Instant, (valid, preferred): (u64, u64)) {
    let at = |s| Some(from + Duration::from_secs(s));
    assert_eq!(
        p.a.ipv6_addr_lifetimes(slaac_a()),
        Some((at(valid), at(preferred)))
    );
}

fn out_rs(p: &Pair) -> u64 {
    p.a.mib().get(Counter::Icmp6OutRouterSolicits)
}

/// RFC 4861 §6.3.7: A solicits once its link-local address has passed duplicate address
/// detection (1 s), then every `router_solicitation_interval` (4 s), three in all
/// (`router_solicitations`); an advertisement then gives A a default
/// router and, after its own duplicate address detection, an address on the advertised
/// prefix, with which A reaches B's off-link address through the router. A second
/// advertisement stops nothing that is not already done, and solicitation stays stopped.
#[test]
fn router_solicitation_then_an_advertisement_configures_address_and_router() {
    let mut p = pair(1);
    p.run_for(Duration::from_millis(900));
    assert_eq!(out_rs(&p), 0, "not before the link-local address is usable");
    p.run_for(Duration::from_millis(200));
    assert_eq!(out_rs(&p), 1, "at the end of duplicate address detection");
    p.run_for(Duration::from_secs(4));
    assert_eq!(out_rs(&p), 2);
    p.run_for(Duration::from_secs(20));
    assert_eq!(out_rs(&p), 3, "router_solicitations bounds them");
    // B, a host, is not in all-routers: its link layer drops them.
    assert_eq!(p.b.mib().get(Counter::Icmp6InRouterSolicits), 0);

    let now = p.now;
    p.a.receive(
        now,
        &ra_frame(ll(B_MAC), 255, 1800, &[prefix(PREFIX, 7200, 3600)]),
    );
    assert_eq!(p.a.mib().get(Counter::Icmp6InRouterAdvertisements), 1);
    assert_eq!(
        p.a.ipv6_default_routers(),
        vec![(ll(B_MAC), now + Duration::from_secs(1800))]
    );
    assert!(matches!(
        p.a.ipv6_addr_state(slaac_a()),
        Some(AddrState::Tentative { .. })
    ));
    assert_eq!(
        p.a.ipv6_addrs()
            .iter()
            .find(|c| c.addr == slaac_a())
            .map(|c| c.prefix_len),
        Some(64),
        "on-link: the L flag"
    );
    assert_lifetimes(&p, now, (7200, 3600));
    p.run_for(Duration::from_millis(1100));
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), Some(AddrState::Preferred));

    // Off-link through the router, from the new address.
    p.a.ping6(p.now, B_FAR, 7, 1, b"through the router")
        .unwrap();
    p.run_for(Duration::from_millis(50));
    let reply =
        p.a.recv_echo_reply6()
            .expect("B answered through the default router");
    assert_eq!(
        (reply.src, &reply.data[..]),
        (B_FAR, &b"through the router"[..])
    );
    assert_eq!(
        p.b.neighbours().peek(ll(A_MAC)),
        Some(A_MAC),
        "B reached A through its gateway, A's link-local"
    );
    assert_eq!(
        p.a.neighbours().peek(ll(B_MAC)),
        Some(B_MAC),
        "the advertisement's source link-layer address"
    );
    p.run_for(Duration::from_secs(30));
    assert_eq!(out_rs(&p), 3, "no solicitation after an advertisement");
}

/// RFC 4862 §5.5.4: deprecated at the preferred lifetime (still ours, a source only when
/// nothing else fits), removed at the valid one; a router goes at its lifetime. An
/// advertisement cannot cut a remaining valid lifetime of 3 hours below two hours
/// (§5.5.3 (e); Linux `addrconf_prefix_rcv_add_addr`: max(received, min(remaining,
/// 2 h))) but resets the preferred lifetime.
#[test]
fn lifetimes_deprecate_and_expire_addresses_and_routers() {
    let mut p = pair(1);
    p.run_for(Duration::from_millis(1100));
    let t0 = p.now;
    p.a.receive(
        t0,
        &ra_frame(ll(B_MAC), 255, 600, &[prefix(PREFIX, 10_800, 3600)]),
    );
    p.run_for(Duration::from_millis(1100));
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), Some(AddrState::Preferred));
    // Valid 60 s asked: two hours from now, not 60 s (nor the remaining ~3 h); preferred
    // 30 s from now.
    let t1 = p.now;
    p.a.receive(
        t1,
        &ra_frame(ll(B_MAC), 255, 600, &[prefix(PREFIX, 60, 30)]),
    );
    assert_lifetimes(&p, t1, (7200, 30));
    p.run_for(Duration::from_secs(31));
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), Some(AddrState::Deprecated));
    // Still ours: B's echo to it is answered.
    p.b.ping6(p.now, slaac_a(), 9, 1, b"deprecated").unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.b.recv_echo_reply6().map(|r| r.src), Some(slaac_a()));
    p.run_until(t1 + Duration::from_secs(601));
    assert_eq!(
        p.a.ipv6_default_routers(),
        vec![],
        "router lifetime 600 s from the last advertisement"
    );
    p.run_until(t1 + Duration::from_secs(7199));
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), Some(AddrState::Deprecated));
    p.run_until(t1 + Duration::from_secs(7201));
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), None, "valid lifetime over");
    assert_eq!(p.a.ipv6_addrs().len(), 1, "the link-local address stays");
}

/// RFC 4861 §6.1.2 and ustack's bounds: an advertisement with hop limit 64 or from a
/// global source is dropped (IPV6_NDISC_INVALID) and teaches nothing; a lifetime-0
/// advertisement removes its router; of 12 routers 8 are kept (4 IPV6_RA_ROUTER_LIMIT);
/// of 20 prefixes only max_addresses (16) addresses are made, the link-local counting.
/// A prefix with a preferred lifetime above its valid one, a /48 or a link-local prefix
/// makes no address.
#[test]
fn hostile_advertisements_are_dropped_and_bounded() {
    let mut p = pair(1);
    p.run_for(Duration::from_millis(1100));
    let now = p.now;
    let pi = [prefix(PREFIX, 7200, 3600)];
    p.a.receive(now, &ra_frame(ll(B_MAC), 64, 1800, &pi));
    p.a.receive(now, &ra_frame(B_FAR, 255, 1800, &pi));
    assert_eq!(p.a.mib().drops(DropReason::NdiscInvalid), 2);
    assert_eq!(p.a.ipv6_default_routers(), vec![]);
    assert_eq!(p.a.ipv6_addr_state(slaac_a()), None);

    let odd = [
        PrefixInfo {
            preferred_lifetime: 7201,
            ..pi[0]
        },
        PrefixInfo {
            prefix_len: 48,
            ..pi[0]
        },
        prefix(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 7200, 3600),
    ];
    p.a.receive(now, &ra_frame(ll(B_MAC), 255, 0, &odd));
    assert_eq!(p.a.ipv6_addrs().len(), 1, "none of them made an address");

    let router = |i: u16| Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x100 + i);
    for i in 0..12 {
        p.a.receive(now, &ra_frame(router(i), 255, 1800, &[]));
    }
    assert_eq!(p.a.ipv6_default_routers().len(), 8);
    assert_eq!(p.a.mib().drops(DropReason::Ip6RaRouterLimit), 4);
    p.a.receive(now, &ra_frame(router(0), 255, 0, &[]));
    assert_eq!(p.a.ipv6_default_routers().len(), 7, "lifetime 0 removes it");

    let many: Vec<PrefixInfo> = (0..20u16)
        .map(|i| {
            prefix(
                Ipv6Addr::new(0x2001, 0xdb8, 0x100 + i, 0, 0, 0, 0, 0),
                7200,
                3600,
            )
        })
        .collect();
    p.a.receive(now, &ra_frame(ll(B_MAC), 255, 0, &many));
    assert_eq!(p.a.ipv6_addrs().len(), 16);
    assert_eq!(p.a.mib().drops(DropReason::Ip6RaAddrLimit), 5);
}

/// Without `accept_ra` (ustack's default) no solicitation goes out and an advertisement
/// is counted by type and changes nothing; setting it later starts solicitation, which
/// an advertisement stops.
#[test]
fn accept_ra_off_by_default_ignores_advertisements() {
    let mut p = pair(0);
    p.run_for(Duration::from_secs(10));
    assert_eq!(out_rs(&p), 0);
    let now = p.now;
    p.a.receive(
        now,
        &ra_frame(ll(B_MAC), 255, 1800, &[prefix(PREFIX, 7200, 3600)]),
    );
    assert_eq!(p.a.mib().get(Counter::Icmp6InRouterAdvertisements), 1);
    assert_eq!(p.a.ipv6_default_routers(), vec![]);
    assert_eq!(p.a.ipv6_addrs().len(), 1);
    p.a.set_sysctl("net.ipv6.conf.default.accept_ra", 1)
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(out_rs(&p), 1, "solicitation starts when accept_ra is set");
    // An advertisement stops it (Linux `addrconf_rs_timer`: IF_RA_RCVD).
    let now = p.now;
    p.a.receive(now, &ra_frame(ll(B_MAC), 255, 1800, &[]));
    p.run_for(Duration::from_secs(20));
    assert_eq!(out_rs(&p), 1, "no solicitation after an advertisement");
    assert_eq!(p.a.ipv6_default_routers().len(), 1);
}
