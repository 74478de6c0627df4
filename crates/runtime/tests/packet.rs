//! The Linux kernel as the peer over the `packet` link: a veth pair in a namespace of the
//! test's own (`ustack_testkit::netns::PacketRig`), the kernel on one end with
//! 192.0.2.1/24, ustack on the other through `AF_PACKET` sockets with `TPACKET_V3` rings
//! (Ethernet: ARP resolves ustack's address to the veth end's MAC). The same transfers as
//! over TUN (`kernel/scenarios.rs`; the interop matrix runs over this link too, in
//! `matrix.rs`):
//!
//! - ICMP: `ping` answered by ustack (4000-byte echoes too), the kernel's neighbour entry
//!   for ustack learned by ARP over the link;
//! - TCP, ustack as the server: a kernel client sends 1 MiB and 16 MiB (SHA-256 at both
//!   ends), 1 MiB through ustack's echo server;
//! - TCP, ustack as the client: 4 MiB and 256 MiB each way with a kernel server (256 MiB:
//!   about 8 s with a debug build), streamed at both ends;
//! - UDP echo, 1 to 8000 bytes;
//! - two shards on two sockets of one fanout group serving 16 kernel connections;
//! - over IPv6 (`*_ipv6`, ustack `2001:db8:7::2`, the kernel `2001:db8:7::1` on the veth
//!   end): `ping -6` answered by ustack (4000 bytes too) with the kernel's neighbour entry
//!   learned by neighbour discovery over the link, ustack's ping of the kernel (4000-byte
//!   echoes fragmented both ways), 1 MiB from a kernel client and through the echo server,
//!   ustack's client 4 MiB each way, UDP echo (one queue: a fanout group carries IPv4).
//!
//! Each run is captured on ustack's side and read by tshark (`kernel/scenarios.rs`); the
//! 256 MiB transfer on its first 150,000 frames.
//!
//! Without root (or `ethtool`, which turns off the kernel end's transmit offloads) each
//! test skips with a note, unless `USTACK_REQUIRE_ROOT` is set (CI), which makes that a
//! failure.

use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::packet::{Packet, PacketConfig};
use ustack_dev::{Device, Medium};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::{EthernetAddress, Instant};
use ustack_testkit::netns::{
    KERNEL_IP, PacketRig, USTACK_IP, VETH_KERNEL, VETH_USTACK, tool_or_skip, veth_or_skip,
};

mod kernel;

use kernel::{KERNEL6, LIMIT, Peer, USTACK6, allmulti, arp_reply, arp_request, builder, scenarios};

/// A rig with `queues` sockets, or `None` (skipped).
fn rig(test: &str, queues: usize) -> Option<PacketRig> {
    veth_or_skip(test)?;
    Some(PacketRig::new(queues).expect("setting up the veth rig"))
}

/// The test builder with the veth end's MAC.
fn builder_for(rig: &PacketRig) -> RuntimeBuilder {
    builder().mac(EthernetAddress(rig.mac))
}

fn mac_text(mac: [u8; 6]) -> String {
    let hex: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    hex.join(":")
}

#[test]
fn kernel_pings_ustack_over_packet() {
    let test = "kernel_pings_ustack_over_packet";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    if !tool_or_skip(test, "ping") {
        return;
    }
    let b = builder_for(&rig);
    scenarios::kernel_pings_ustack(test, &rig.ns, b, rig.queues.remove(0));
    // The kernel learned ustack's address by ARP, over the link: the veth end's MAC.
    let out = rig
        .ns
        .run(
            LIMIT,
            &[
                "ip",
                "neigh",
                "show",
                &USTACK_IP.to_string(),
                "dev",
                VETH_KERNEL,
            ],
        )
        .expect("ip neigh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&mac_text(rig.mac)), "neighbour entry: {text}");
}

fn kernel_sends_to_ustack(test: &str, n: usize) {
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let b = builder_for(&rig);
    scenarios::kernel_sends_to_ustack(test, &rig.ns, b, rig.queues.remove(0), n, |_| ());
}

#[test]
fn kernel_client_sends_1mib_to_ustack_over_packet() {
    kernel_sends_to_ustack("kernel_client_sends_1mib_to_ustack_over_packet", 1 << 20);
}

#[test]
fn kernel_client_sends_16mib_to_ustack_over_packet() {
    kernel_sends_to_ustack("kernel_client_sends_16mib_to_ustack_over_packet", 16 << 20);
}

#[test]
fn kernel_client_through_ustack_echo_server_over_packet() {
    let test = "kernel_client_through_ustack_echo_server_over_packet";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let b = builder_for(&rig);
    scenarios::kernel_client_through_echo(test, &rig.ns, b, rig.queues.remove(0), 1 << 20);
}

/// A short echo (one segment each way) over packet: the echo's segment goes to the link
/// by the qdisc bypass (`Device::tx_direct`), as the write returns.
#[test]
fn a_lone_echo_segment_takes_the_qdisc_bypass_over_packet() {
    let test = "a_lone_echo_segment_takes_the_qdisc_bypass_over_packet";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let b = builder_for(&rig);
    let direct =
        scenarios::kernel_client_through_echo(test, &rig.ns, b, rig.queues.remove(0), 1000);
    assert!(direct >= 1, "the echo's segment did not go by the bypass");
}

#[test]
fn ustack_client_bulk_both_ways_over_packet() {
    let Some(mut rig) = rig("ustack_client_bulk_both_ways_over_packet", 1) else {
        return;
    };
    let b = builder_for(&rig);
    let q = rig.queues.remove(0);
    let test = "ustack_client_bulk_both_ways_over_packet";
    scenarios::ustack_client_bulk_both_ways(test, &rig.ns, b, q, 4 << 20, 4 << 20, |_| ());
}

#[test]
fn ustack_client_moves_256mib_each_way_over_packet() {
    let test = "ustack_client_moves_256mib_each_way_over_packet";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    scenarios::ustack_client_bulk_both_ways(test, &rig.ns, b, q, 256 << 20, 256 << 20, |_| ());
}

#[test]
fn kernel_udp_client_through_ustack_echo_over_packet() {
    let test = "kernel_udp_client_through_ustack_echo_over_packet";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let b = builder_for(&rig);
    scenarios::kernel_udp_client_through_echo(test, &rig.ns, b, rig.queues.remove(0));
}

#[test]
fn two_shards_on_a_fanout_group_serve_kernel_clients() {
    let test = "two_shards_on_a_fanout_group_serve_kernel_clients";
    let Some(rig) = rig(test, 2) else {
        return;
    };
    let b = RuntimeBuilder::new()
        .ipv4(USTACK_IP, 24)
        .mac(EthernetAddress(rig.mac));
    scenarios::two_shards_serve_kernel_clients(test, &rig.ns, b, rig.queues);
}

// ---- IPv6 ----------------------------------------------------------------------------------

/// The kernel's neighbour entry for `ip` on its veth end, as `ip neigh` prints it.
fn kernel_neighbour(rig: &PacketRig, ip: &str) -> String {
    let argv = ["ip", "neigh", "show", ip, "dev", VETH_KERNEL];
    let out = rig.ns.run(LIMIT, &argv).expect("ip neigh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn kernel_pings_ustack_over_packet_ipv6() {
    let test = "kernel_pings_ustack_over_packet_ipv6";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    if !tool_or_skip(test, "ping") {
        return;
    }
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    scenarios::kernel_pings_ustack(test, Peer::v6(&rig.ns, VETH_KERNEL), b, q);
    // The kernel learned ustack's address by neighbour discovery, over the link.
    let text = kernel_neighbour(&rig, &USTACK6.to_string());
    assert!(text.contains(&mac_text(rig.mac)), "neighbour entry: {text}");
}

#[test]
fn ustack_pings_kernel_over_packet_ipv6() {
    let Some(mut rig) = rig("ustack_pings_kernel_over_packet_ipv6", 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::ustack_pings_kernel6("ustack_pings_kernel_over_packet_ipv6", peer, b, q);
}

#[test]
fn kernel_client_sends_1mib_to_ustack_over_packet_ipv6() {
    let test = "kernel_client_sends_1mib_to_ustack_over_packet_ipv6";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_sends_to_ustack(test, peer, b, q, 1 << 20, |_| ());
}

#[test]
fn kernel_client_through_ustack_echo_server_over_packet_ipv6() {
    let test = "kernel_client_through_ustack_echo_server_over_packet_ipv6";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_client_through_echo(test, peer, b, q, 1 << 20);
}

#[test]
fn ustack_client_bulk_both_ways_over_packet_ipv6() {
    let test = "ustack_client_bulk_both_ways_over_packet_ipv6";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::ustack_client_bulk_both_ways(test, peer, b, q, 4 << 20, 4 << 20, |_| ());
}

#[test]
fn kernel_udp_client_through_ustack_echo_over_packet_ipv6() {
    let test = "kernel_udp_client_through_ustack_echo_over_packet_ipv6";
    let Some(mut rig) = rig(test, 1) else {
        return;
    };
    let (b, q) = (builder_for(&rig), rig.queues.remove(0));
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_udp_client_through_echo(test, peer, b, q);
}

/// A neighbour advertisement reaches every queue of a fanout group, as ARP does: ustack's
/// runtime on queue 0 pings the kernel over IPv6, its solicitation is answered by the
/// kernel's advertisement to the interface's MAC, which resolves the kernel on queue 0
/// and which queue 1 reads too.
#[test]
fn every_queue_of_a_fanout_group_sees_ndp() {
    let Some(mut rig) = rig("every_queue_of_a_fanout_group_sees_ndp", 2) else {
        return;
    };
    let _ = Peer::v6(&rig.ns, VETH_KERNEL);
    let mut q1 = rig.queues.remove(1);
    let q0 = rig.queues.remove(0);
    let mut rt = builder_for(&rig)
        .ipv6(USTACK6, 64)
        .sysctl("net.ipv6.conf.default.accept_dad", 0)
        .build(q0)
        .expect("a runtime on queue 0");
    let now = rt.now();
    rt.stack_mut()
        .ping6(now, KERNEL6, 1, 1, b"ndp")
        .expect("ping6 sent");
    // Queue 0's stack learns the kernel's MAC (the echo reply itself may go to either
    // queue: fanout hashes it).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rt.stack().neighbours().peek(KERNEL6).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "queue 0: not resolved in 5 s"
        );
        rt.run_once(Some(Duration::from_millis(10)))
            .expect("the loop");
    }
    // ICMPv6 (next header 58) of type 136, Neighbor Advertisement.
    let mut buf = vec![0; 1514];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    'seen: loop {
        assert!(
            std::time::Instant::now() < deadline,
            "queue 1: no advertisement"
        );
        q1.wait(Some(Duration::from_millis(100))).unwrap();
        while let Some(n) = q1.recv(Instant::ZERO, &mut buf) {
            let f = &buf[..n];
            if n > 54 && f[12..14] == [0x86, 0xdd] && f[20] == 58 && f[54] == 136 {
                break 'seen;
            }
        }
    }
    assert!(q1.stats().rx_arp >= 1, "{:?}", q1.stats());
}

/// Two shards on a fanout group serve 16 kernel IPv6 connections: the fanout sockets
/// carry IPv6, every shard sees neighbour discovery (the kernel's solicitation of ustack's
/// address, which tells each shard the kernel's MAC). ustack takes its address without
/// DAD here (the shards start serving at once; DAD is tested above).
#[test]
fn two_shards_on_a_fanout_group_serve_kernel_ipv6_clients() {
    let test = "two_shards_on_a_fanout_group_serve_kernel_ipv6_clients";
    let Some(rig) = rig(test, 2) else {
        return;
    };
    let b = RuntimeBuilder::new()
        .ipv4(USTACK_IP, 24)
        .mac(EthernetAddress(rig.mac))
        .sysctl("net.ipv6.conf.default.accept_dad", 0);
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::two_shards_serve_kernel_clients(test, peer, b, rig.queues);
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let bad = [
        (
            PacketConfig {
                interface: String::new(),
                ..PacketConfig::default()
            },
            "interface name",
        ),
        (
            PacketConfig {
                interface: "a".repeat(16),
                ..PacketConfig::default()
            },
            "interface name",
        ),
        (
            PacketConfig {
                queues: 0,
                ..PacketConfig::default()
            },
            "queues",
        ),
        (
            PacketConfig {
                rx_block_size: 3000,
                ..PacketConfig::default()
            },
            "block size",
        ),
        (
            PacketConfig {
                rx_blocks: 0,
                ..PacketConfig::default()
            },
            "receive blocks",
        ),
        (
            PacketConfig {
                retire: Duration::from_micros(1500),
                ..PacketConfig::default()
            },
            "retire",
        ),
        (
            PacketConfig {
                tx_frames: 0,
                ..PacketConfig::default()
            },
            "transmit frames",
        ),
    ];
    for (config, what) in bad {
        let e = Packet::open(&config).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{config:?}");
        assert!(e.to_string().contains(what), "{config:?}: {e}");
    }
    // An interface that does not exist: the error names it (no root needed to find out).
    let e = Packet::open(&PacketConfig {
        interface: "nosuchif0".into(),
        ..PacketConfig::default()
    })
    .expect_err("no such interface");
    assert!(e.to_string().contains("nosuchif0"), "{e}");
    // A namespace file that does not exist.
    let e = Packet::open(&PacketConfig {
        netns: Some("/nonexistent/ns/net".into()),
        ..PacketConfig::default()
    })
    .expect_err("no such namespace");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("/nonexistent/ns/net"), "{e}");
}

// ---- the device ---------------------------------------------------------------------------

#[test]
fn device_moves_frames_and_counts_what_it_refuses() {
    let Some(mut rig) = rig("device_moves_frames_and_counts_what_it_refuses", 1) else {
        return;
    };
    let mut q = rig.queues.remove(0);
    let caps = q.caps();
    assert_eq!((caps.medium, caps.mtu), (Medium::Ethernet, 1500));
    assert_eq!(caps.max_frame_len(), 1514);
    let now = Instant::ZERO;

    // Refused by us: larger than the largest frame; counted, nothing sent.
    assert!(!q.send(now, &vec![0; 1515]));
    assert_eq!((q.stats().tx_errors, q.stats().tx_packets), (1, 0));

    // The kernel answers a hand-made ARP request, sent in a batch of three (one kick).
    let req = arp_request(rig.mac);
    assert_eq!(q.send_batch(now, &[&req, &req, &req]), 0);
    assert_eq!((q.stats().tx_packets, q.stats().tx_kicks), (3, 1));
    let reply = arp_reply(&mut q, rig.mac, |q| {
        q.wait(Some(Duration::from_millis(100))).unwrap();
    });
    assert_eq!(&reply[28..32], &KERNEL_IP.octets(), "sender: the kernel");
    assert_eq!(&reply[38..42], &USTACK_IP.octets(), "target: us");
    let s = *q.stats();
    assert!(s.rx_packets >= 1 && s.rx_bytes >= 42, "{s:?}");
    assert_eq!(
        (s.rx_csum_not_ready, s.rx_truncated, s.rx_bad_blocks),
        (0, 0, 0)
    );
    assert_eq!(q.kernel_stats().unwrap().drops, 0);
}

/// The interface passes every multicast frame while a queue is open (the stack's IPv6
/// solicited-node groups, which the kernel never puts in its filter), and stops once the
/// last queue closes.
#[test]
fn queues_ask_for_every_multicast_frame_while_open() {
    let Some(mut rig) = rig("queues_ask_for_every_multicast_frame_while_open", 2) else {
        return;
    };
    let allmulti = |rig: &PacketRig| allmulti(&rig.ns, VETH_USTACK);
    assert_eq!(allmulti(&rig), 2, "two queues open");
    drop(rig.queues.remove(0));
    assert_eq!(allmulti(&rig), 1, "one queue open");
    rig.queues.clear();
    assert_eq!(allmulti(&rig), 0, "none open");
}

#[test]
fn every_queue_of_a_fanout_group_sees_arp() {
    let Some(mut rig) = rig("every_queue_of_a_fanout_group_sees_arp", 2) else {
        return;
    };
    let mut q1 = rig.queues.remove(1);
    let mut q0 = rig.queues.remove(0);
    assert!(q0.send(Instant::ZERO, &arp_request(rig.mac)));
    // The reply reaches both shards, so each learns the neighbour.
    for q in [&mut q0, &mut q1] {
        arp_reply(q, rig.mac, |q| {
            q.wait(Some(Duration::from_millis(100))).unwrap();
        });
        assert!(q.stats().rx_arp >= 1, "{:?}", q.stats());
    }
}
