//! Path MTU discovery over IPv6 against the Linux kernel (RFC 8201): ustack on a TUN
//! interface in a router namespace of the test's own, a kernel peer in a second namespace
//! behind a 1280-byte veth link, the router forwarding between them
//! (`net.ipv6.conf.all.forwarding=1`):
//!
//! ```text
//! ustack 2001:db8:7::2 --tun0 (1500)-- router 2001:db8:7::1 | 2001:db8:8::1 --veth (1280)-- peer 2001:db8:8::2
//! ```
//!
//! The peer advertises an MSS of 1440 (its route back carries `advmss 1440`, as a host on
//! a 1500-byte link would), so ustack's TCP starts with 1500-byte packets; the router
//! cannot forward them over the 1280-byte link and answers each with an ICMPv6 Packet Too
//! Big (MTU 1280). ustack lowers the path MTU, shrinks its segments and the transfer (2 MiB
//! up, 64 KiB down) completes with SHA-256 checked at both ends. The capture on ustack's
//! side shows 1500-byte packets before the first Packet Too Big and none above 1280 after
//! it, and none fragmented; ustack counts the Packet Too Big (`Icmp6InPktTooBigs`), the
//! router counts what it sent (`Icmp6OutPktTooBigs`).
//!
//! The same with ustack on the packet link instead of TUN (a veth pair to the router):
//! there the router is ustack's IPv6 gateway (`RuntimeBuilder::gateway6`), resolved by
//! neighbour discovery.
//!
//! Root only: skipped with a note otherwise, unless `USTACK_REQUIRE_ROOT` is set. Every
//! command is bounded; both namespaces go away with the test, whatever happens.

use core::net::{IpAddr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::io;

use sha2::{Digest, Sha256};
use ustack_dev::Device;
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::Interest;
use ustack_runtime::runtime::{RuntimeBuilder, Sleep};
use ustack_stack::EthernetAddress;
use ustack_testkit::netns::{
    NetNs, PacketRig, TUN_NAME, TunRig, VETH_KERNEL, root_or_skip, veth_or_skip,
};
use ustack_testkit::snmp6;

mod kernel;

use kernel::{
    Family, HEADERS, KERNEL6, KernelServer, Pcap, USTACK6, Ustack, builder, hex, read_into, settle,
};

/// The peer's address, behind the router.
const PEER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 2);
/// The router's address on the 1280-byte link.
const ROUTER_FAR: &str = "2001:db8:8::1";
/// The narrow link's MTU: IPv6's minimum (RFC 8200 §5).
const NARROW: usize = 1280;
/// The bound on the transfer: a path MTU black hole (Packet Too Big ignored) never ends.
const TRANSFER_LIMIT: Duration = Duration::from_secs(20);

/// Runs `argv` in `ns`, bounded; panics with its error.
fn run(ns: &NetNs, argv: &[&str]) {
    ns.run(Duration::from_secs(5), argv)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The peer's namespace, joined to the `router` namespace (whose interface `near`, toward
/// ustack, gets [`KERNEL6`]) by the veth pair `narrow0` (router) - `narrow1` (peer) with
/// MTU [`NARROW`]; the router forwards.
fn narrow_link(router: &NetNs, near: &str) -> NetNs {
    Family::V6
        .configure(router, near)
        .expect("IPv6 on the router's near side");
    let peer = NetNs::new().expect("the peer's namespace");
    let pid = peer.holder_pid().to_string();
    let mtu = NARROW.to_string();
    let veth = ["ip", "link", "add", "narrow0", "mtu", &mtu, "type", "veth"];
    run(
        router,
        &[&veth[..], &["peer", "name", "narrow1", "mtu", &mtu]].concat(),
    );
    run(router, &["ip", "link", "set", "narrow1", "netns", &pid]);
    run(router, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    router
        .add_ipv6("narrow0", &format!("{ROUTER_FAR}/64"))
        .expect("the router's far address");
    run(router, &["ip", "link", "set", "narrow0", "up"]);
    peer.add_ipv6("narrow1", &format!("{PEER6}/64"))
        .expect("the peer's address");
    run(&peer, &["ip", "link", "set", "lo", "up"]);
    run(&peer, &["ip", "link", "set", "narrow1", "up"]);
    let net = format!("{}/64", KERNEL6);
    let route = ["ip", "-6", "route", "add", &net, "via", ROUTER_FAR];
    run(
        &peer,
        &[&route[..], &["dev", "narrow1", "advmss", "1440"]].concat(),
    );
    peer
}

/// One IPv6 packet of a capture.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// ustack sent it.
    from_us: bool,
    /// Its length on the wire.
    len: usize,
    /// An ICMPv6 Packet Too Big.
    too_big: bool,
    /// A fragment (next header 44).
    fragment: bool,
}

/// The IPv6 packets of a capture whose frames have `l2` bytes of link header before the
/// IPv6 header (0 for TUN, 14 for Ethernet).
fn packets(pcap: &[u8], l2: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let word = |i: usize| u32::from_le_bytes(pcap[i..i + 4].try_into().unwrap()) as usize;
        let (caplen, len) = (word(at + 8), word(at + 12));
        let frame = &pcap[at + 16..(at + 16 + caplen).min(pcap.len())];
        at += 16 + caplen;
        let Some(frame) = frame.get(l2..).filter(|f| f.len() > 40 && f[0] >> 4 == 6) else {
            continue;
        };
        let len = len - l2;
        out.push(Seen {
            from_us: frame[8..24] == USTACK6.octets(),
            len,
            // Next header 58 (ICMPv6), type 2 (Packet Too Big).
            too_big: frame[6] == 58 && frame[40] == 2,
            fragment: frame[6] == 44,
        });
    }
    out
}

#[test]
fn tcp_shrinks_its_segments_after_packet_too_big_from_a_kernel_router() {
    let test = "tcp_shrinks_its_segments_after_packet_too_big_from_a_kernel_router";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::new(1, None).expect("the router namespace with tun0");
    let peer = narrow_link(&rig.ns, TUN_NAME);
    let b = Family::V6.builder(builder());
    shrinks_after_packet_too_big(test, &rig.ns, &peer, rig.queues.remove(0), b, 0);
}

/// The same with ustack on the packet link (a veth pair to the router): the router, an
/// off-link next hop (`RuntimeBuilder::gateway6`), resolved by neighbour discovery.
#[test]
fn tcp_shrinks_its_segments_after_packet_too_big_over_packet() {
    let test = "tcp_shrinks_its_segments_after_packet_too_big_over_packet";
    if veth_or_skip(test).is_none() {
        return;
    }
    let mut rig = PacketRig::new(1).expect("the router namespace with the veth pair");
    let peer = narrow_link(&rig.ns, VETH_KERNEL);
    let b = Family::V6
        .builder(builder())
        .mac(EthernetAddress(rig.mac))
        .gateway6(KERNEL6);
    shrinks_after_packet_too_big(test, &rig.ns, &peer, rig.queues.remove(0), b, 14);
}

/// ustack (on `device`, its frames `l2` bytes of link header before IPv6) sends 2 MiB to
/// the kernel peer behind the router and reads 64 KiB back; see the module docs for what
/// is checked.
fn shrinks_after_packet_too_big<D: Device + Sleep + Send + 'static>(
    test: &str,
    router: &NetNs,
    peer: &NetNs,
    device: D,
    builder: RuntimeBuilder,
    l2: usize,
) {
    let (up, down) = (2u64 << 20, 64u64 << 10);
    let server = KernelServer::start_on(peer, IpAddr::V6(PEER6), down as usize, 5001, None);
    let (device, pcap) = Pcap::wrap(test, device, HEADERS);
    let pcap = pcap.of(Family::V6);
    let to = SocketAddr::new(PEER6.into(), 5001);
    let app = Ustack::start(builder, device, move |rt, _stop| {
        settle(rt)?;
        let s = TcpStream::connect(rt, to)?;
        rt.register(&s, 1, Interest::READABLE | Interest::WRITABLE, Mode::Edge)?;
        let mut source = kernel::Source::new(up, 9);
        let (mut shut, mut got) = (false, 0);
        let mut hasher = Sha256::new();
        let mut buf = vec![0; 64 * 1024];
        let deadline = std::time::Instant::now() + TRANSFER_LIMIT;
        loop {
            if std::time::Instant::now() >= deadline {
                let m = rt.stack().mib();
                return Err(io::Error::other(format!(
                    "the transfer did not end in {TRANSFER_LIMIT:?}: {} of {up} bytes queued, \
                     {got} read; PktTooBigs {}, retransmitted {}",
                    source.sent(),
                    m.get(Counter::Icmp6InPktTooBigs),
                    m.get(Counter::TcpRetransSegs),
                )));
            }
            rt.run_once(Some(Duration::from_millis(5)))?;
            if !shut && source.write(rt, &s)? {
                s.shutdown(rt, std::net::Shutdown::Write)?;
                shut = true;
            }
            let (n, fin) = read_into(rt, &s, &mut buf, &mut hasher)?;
            got += n;
            if fin {
                break;
            }
        }
        let digest = hex(&hasher.finalize());
        s.close(rt)?;
        for _ in 0..20 {
            rt.run_once(Some(Duration::from_millis(2)))?;
        }
        let m = rt.stack().mib();
        let counts = (
            m.get(Counter::Icmp6InPktTooBigs),
            m.get(Counter::TcpRetransSegs),
        );
        Ok((got, digest, source.digest(), counts))
    });
    let (got, got_digest, sent_digest, (too_big, retrans)) = app.join();
    let kernel = server.finish();
    assert_eq!(kernel.read, up, "bytes the peer read");
    assert_eq!(
        kernel.read_digest, sent_digest,
        "SHA-256: the peer read what ustack sent"
    );
    assert_eq!(
        (got, got_digest),
        (down, kernel.sent_digest),
        "what ustack read"
    );

    let out = router
        .run(Duration::from_secs(5), &["cat", "/proc/net/snmp6"])
        .expect("the router's snmp6");
    let router = String::from_utf8_lossy(&out.stdout);
    let sent_too_big = snmp6(&router, "Icmp6OutPktTooBigs");
    assert!(too_big >= 1, "ustack counted no Packet Too Big");
    assert!(
        (1..=sent_too_big).contains(&too_big),
        "ustack counted {too_big} Packet Too Big, the router sent {sent_too_big}"
    );

    let frames = packets(&std::fs::read(pcap.path()).expect("the capture"), l2);
    let first = frames
        .iter()
        .position(|f| f.too_big)
        .expect("a Packet Too Big in the capture");
    let largest = |fs: &[Seen]| fs.iter().filter(|f| f.from_us).map(|f| f.len).max();
    let (before, after) = frames.split_at(first);
    let sent_after = after.iter().filter(|f| f.from_us).count();
    let fragments = frames.iter().filter(|f| f.from_us && f.fragment).count();
    eprintln!(
        "{test}: {} packets captured; ustack's largest {:?} before the first Packet Too Big, \
         {:?} in the {sent_after} after it; Packet Too Big: router sent {sent_too_big}, ustack \
         counted {too_big}; ustack retransmitted {retrans}",
        frames.len(),
        largest(before),
        largest(after),
    );
    assert_eq!(
        largest(before),
        Some(1500),
        "ustack started at the link's MTU"
    );
    assert!(sent_after > 1000, "most of the transfer came after it");
    // TCP's segments shrink to the path (Linux `tcp_mtu_to_mss`: 1280 less the headers),
    // rather than IPv6 fragmenting segments still made for 1500 bytes.
    assert_eq!(fragments, 0, "ustack fragmented TCP segments");
    assert!(
        largest(after).is_some_and(|l| (1200..=NARROW).contains(&l)),
        "ustack's largest packet after the Packet Too Big: {:?} (not over {NARROW})",
        largest(after)
    );
    // Every segment in flight when the Packet Too Big came is resent smaller (Linux
    // `tcp_simple_retransmit`): a window's worth, not a storm.
    pcap.check_with((64, 8));
}
