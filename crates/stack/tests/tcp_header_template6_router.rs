//! An IPv6 connection to an off-link peer, through a default router learnt from a Router
//! Advertisement, whose router changes under it: its header template (`tcp::xmit6`)
//! keeps only whether the next hop is the router, so every segment must go to the
//! router of the moment, as the general path's route does. The same exchange runs with
//! the template on and off and every frame A sends is compared; the segments after the
//! change must be addressed to the new router's link-layer address.
//!
//! B holds 2001:db8:2::2 (off-link for A) and plays the first router (its link-local
//! address advertises); the second router is a link-local address with another MAC,
//! which B's link layer does not take.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use core::time::Duration;

use ustack_stack::{Config, Instant, Ipv4Cidr, Ipv6Cidr, Stack};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC};
use ustack_wire::ndisc::{self, Prefixes, RouterAdvert};
use ustack_wire::{EthernetAddress, ethernet};

const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const B_FAR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const R2_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x99]);

/// A Router Advertisement from `router` (link-layer address `mac`) with lifetime
/// `lifetime` seconds, as an Ethernet frame to all nodes.
fn ra(router: Ipv6Addr, mac: EthernetAddress, lifetime: u16) -> Vec<u8> {
    let ra = RouterAdvert {
        cur_hop_limit: 0,
        managed: false,
        other: false,
        router_lifetime: lifetime,
        reachable_time: 0,
        retrans_timer: 0,
        source_lladdr: Some(mac),
        mtu: None,
        prefixes: Prefixes::List(&[]),
    };
    let mut msg = vec![0u8; ra.buffer_len()];
    ra.emit(&mut msg, &router, &ALL_NODES);
    let mut f = ustack_testkit::ipv6_frame(
        (mac, ndisc::multicast_mac(ALL_NODES)),
        router,
        ALL_NODES,
        58,
        &msg,
    );
    f[ethernet::HEADER_LEN + 7] = 255;
    f
}

/// Frames between A and B until both are quiet: B takes A's frames to its MAC (or to a
/// multicast group), A takes all of B's; A's are appended to `sent`.
fn shuttle(a: &mut Stack, b: &mut Stack, now: Instant, sent: &mut Vec<Vec<u8>>) {
    for _ in 0..16 {
        let out: Vec<_> = core::iter::from_fn(|| a.poll_transmit(now)).collect();
        for f in out.iter().filter(|f| f[0..6] == B_MAC.0 || f[0] & 1 == 1) {
            b.receive(now, f);
        }
        let back: Vec<_> = core::iter::from_fn(|| b.poll_transmit(now)).collect();
        back.iter().for_each(|f| a.receive(now, f));
        let quiet = out.is_empty() && back.is_empty();
        sent.extend(out);
        if quiet {
            return;
        }
    }
}

/// Every frame A sends (B takes those to its MAC) and how many were sent before the
/// router changed.
fn run(template: bool) -> (Vec<Vec<u8>>, usize) {
    let mut ca = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A6, 64));
    let mut cb =
        Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_FAR, 64));
    for c in [&mut ca, &mut cb] {
        c.sysctl
            .set("net.ipv6.conf.default.accept_dad", 0)
            .expect("a sysctl");
    }
    ca.sysctl
        .set("net.ipv6.conf.default.accept_ra", 1)
        .expect("a sysctl");
    cb.gateway6 = Some(ndisc::link_local_from_mac(A_MAC));
    ca.seed = Some(1);
    cb.seed = Some(2);
    let (mut a, mut b) = (Stack::new(ca), Stack::new(cb));
    a.set_tcp_header_template(template);
    let mut now = Instant::from_secs(1);
    let mut sent = Vec::new();
    let r1 = ndisc::link_local_from_mac(B_MAC);
    a.receive(now, &ra(r1, B_MAC, 1800));
    let server = SocketAddr::V6(SocketAddrV6::new(B_FAR, 80, 0, 0));
    let l = b.tcp_listen(server, 4).expect("listen");
    let c = a.tcp_connect(now, server).expect("connect");
    shuttle(&mut a, &mut b, now, &mut sent);
    let (s, _) = b
        .tcp_accept_addr(l)
        .expect("accepted through the first router");
    let mut buf = [0u8; 256];
    for round in 0..2u8 {
        now += Duration::from_millis(1);
        a.tcp_send(now, c, &[round; 64]).expect("send");
        shuttle(&mut a, &mut b, now, &mut sent);
        assert_eq!(b.tcp_recv(now, s, &mut buf).expect("recv"), 64);
    }
    // The first router leaves (lifetime 0, RFC 4861 §6.3.4) and a second one arrives.
    let before = sent.len();
    now += Duration::from_millis(1);
    a.receive(
        now,
        &ra(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99), R2_MAC, 1800),
    );
    a.receive(now, &ra(r1, B_MAC, 0));
    a.tcp_send(now, c, b"through the second router")
        .expect("send");
    shuttle(&mut a, &mut b, now, &mut sent);
    (sent, before)
}

#[test]
fn segments_follow_a_change_of_default_router_as_the_general_paths() {
    let (on, before) = run(true);
    let (off, _) = run(false);
    assert!(
        on[..before].iter().filter(|f| f[0..6] == B_MAC.0).count() >= 4,
        "the handshake and data went to the first router"
    );
    let to_r2: Vec<_> = on[before..]
        .iter()
        .filter(|f| f.ends_with(b"through the second router"))
        .collect();
    assert!(!to_r2.is_empty(), "the data after the change was sent");
    assert!(
        to_r2.iter().all(|f| f[0..6] == R2_MAC.0),
        "to the second router's link-layer address"
    );
    assert_eq!(on.len(), off.len(), "frames with the template on and off");
    for (i, (x, y)) in on.iter().zip(&off).enumerate() {
        assert_eq!(x, y, "frame {i}");
    }
}
