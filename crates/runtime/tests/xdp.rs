//! The Linux kernel as the peer over the `xdp` link: the veth pair of the packet tests
//! (`ustack_testkit::netns::XdpRig`), ustack on its end through an `AF_XDP` socket in copy
//! mode, fed by the redirect program loaded with `bpf(2)` and attached in generic mode. The
//! same transfers as over TUN and packet (`kernel/scenarios.rs`): ping (ARP over the
//! link), 1 MiB and 16 MiB from a kernel client, 1 MiB through the echo server, ustack's
//! client 4 MiB and 64 MiB each way, UDP echo. The interop matrix runs over this link too
//! (`matrix.rs`: the relay around the xdp queue). Each run is captured on ustack's side
//! and read by tshark (`kernel/scenarios.rs`). The same over IPv6 (`*_ipv6`: neighbour
//! discovery over the link; `ping -6` both ways with 4000-byte echoes, TCP each way,
//! UDP echo).
//!
//! Without root (or `ethtool`) each test skips with a note, unless `USTACK_REQUIRE_ROOT`
//! is set (CI), which makes that a failure.

use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::xdp::{Xdp, XdpConfig};
use ustack_dev::{Device, Medium};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::{EthernetAddress, Instant};
use ustack_testkit::netns::{
    KERNEL_IP, NetNs, USTACK_IP, VETH_KERNEL, VETH_USTACK, XdpQueuesRig, XdpRig, tool_or_skip,
    veth_or_skip,
};

mod kernel;

use kernel::{LIMIT, Peer, USTACK6, allmulti, arp_reply, arp_request, builder, scenarios};

fn rig(test: &str) -> Option<(XdpRig, RuntimeBuilder)> {
    veth_or_skip(test)?;
    let rig = XdpRig::new().expect("setting up the veth rig with the xdp link");
    let b = builder().mac(EthernetAddress(rig.mac));
    Some((rig, b))
}

#[test]
fn kernel_pings_ustack_over_xdp() {
    let test = "kernel_pings_ustack_over_xdp";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    if !tool_or_skip(test, "ping") {
        return;
    }
    scenarios::kernel_pings_ustack(test, &rig.ns, b, rig.queue);
}

fn kernel_sends_to_ustack(test: &str, n: usize) {
    let Some((rig, b)) = rig(test) else {
        return;
    };
    scenarios::kernel_sends_to_ustack(test, &rig.ns, b, rig.queue, n, |_| ());
}

#[test]
fn kernel_client_sends_1mib_to_ustack_over_xdp() {
    kernel_sends_to_ustack("kernel_client_sends_1mib_to_ustack_over_xdp", 1 << 20);
}

#[test]
fn kernel_client_sends_16mib_to_ustack_over_xdp() {
    kernel_sends_to_ustack("kernel_client_sends_16mib_to_ustack_over_xdp", 16 << 20);
}

/// A short echo (one segment each way) over xdp: the echo's segment goes to the link by
/// the qdisc bypass (`Device::tx_direct`), as the write returns.
#[test]
fn a_lone_echo_segment_takes_the_qdisc_bypass_over_xdp() {
    let test = "a_lone_echo_segment_takes_the_qdisc_bypass_over_xdp";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    let direct = scenarios::kernel_client_through_echo(test, &rig.ns, b, rig.queue, 1000);
    assert!(direct >= 1, "the echo's segment did not go by the bypass");
}

#[test]
fn kernel_client_through_ustack_echo_server_over_xdp() {
    let test = "kernel_client_through_ustack_echo_server_over_xdp";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    scenarios::kernel_client_through_echo(test, &rig.ns, b, rig.queue, 1 << 20);
}

#[test]
fn ustack_client_bulk_both_ways_over_xdp() {
    let Some((rig, b)) = rig("ustack_client_bulk_both_ways_over_xdp") else {
        return;
    };
    let test = "ustack_client_bulk_both_ways_over_xdp";
    scenarios::ustack_client_bulk_both_ways(test, &rig.ns, b, rig.queue, 4 << 20, 4 << 20, |_| ());
}

#[test]
fn ustack_client_moves_64mib_each_way_over_xdp() {
    let test = "ustack_client_moves_64mib_each_way_over_xdp";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    scenarios::ustack_client_bulk_both_ways(
        test,
        &rig.ns,
        b,
        rig.queue,
        64 << 20,
        64 << 20,
        |_| (),
    );
}

#[test]
fn kernel_udp_client_through_ustack_echo_over_xdp() {
    let test = "kernel_udp_client_through_ustack_echo_over_xdp";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    scenarios::kernel_udp_client_through_echo(test, &rig.ns, b, rig.queue);
}

// ---- IPv6 ----------------------------------------------------------------------------------

#[test]
fn kernel_pings_ustack_over_xdp_ipv6() {
    let test = "kernel_pings_ustack_over_xdp_ipv6";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    if !tool_or_skip(test, "ping") {
        return;
    }
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_pings_ustack(test, peer, b, rig.queue);
    // The kernel learned ustack's address by neighbour discovery, over the link.
    let ip = USTACK6.to_string();
    let argv = ["ip", "neigh", "show", &ip, "dev", VETH_KERNEL];
    let out = rig.ns.run(LIMIT, &argv).expect("ip neigh");
    let text = String::from_utf8_lossy(&out.stdout);
    let mac: Vec<String> = rig.mac.iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&mac.join(":")), "neighbour entry: {text}");
}

#[test]
fn ustack_pings_kernel_over_xdp_ipv6() {
    let Some((rig, b)) = rig("ustack_pings_kernel_over_xdp_ipv6") else {
        return;
    };
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::ustack_pings_kernel6("ustack_pings_kernel_over_xdp_ipv6", peer, b, rig.queue);
}

#[test]
fn kernel_client_sends_1mib_to_ustack_over_xdp_ipv6() {
    let test = "kernel_client_sends_1mib_to_ustack_over_xdp_ipv6";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_sends_to_ustack(test, peer, b, rig.queue, 1 << 20, |_| ());
}

#[test]
fn kernel_client_through_ustack_echo_server_over_xdp_ipv6() {
    let test = "kernel_client_through_ustack_echo_server_over_xdp_ipv6";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_client_through_echo(test, peer, b, rig.queue, 1 << 20);
}

#[test]
fn ustack_client_bulk_both_ways_over_xdp_ipv6() {
    let test = "ustack_client_bulk_both_ways_over_xdp_ipv6";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::ustack_client_bulk_both_ways(test, peer, b, rig.queue, 4 << 20, 4 << 20, |_| ());
}

#[test]
fn kernel_udp_client_through_ustack_echo_over_xdp_ipv6() {
    let test = "kernel_udp_client_through_ustack_echo_over_xdp_ipv6";
    let Some((rig, b)) = rig(test) else {
        return;
    };
    let peer = Peer::v6(&rig.ns, VETH_KERNEL);
    scenarios::kernel_udp_client_through_echo(test, peer, b, rig.queue);
}

/// Two shards, each on its own AF_XDP socket bound to one receive queue of a 2-queue veth,
/// serve 16 kernel connections (over IPv6 with `ipv6`); the kernel spread them over both
/// queues, and each shard resolved the kernel's address although ARP (or neighbour
/// discovery) crossed one queue only.
fn two_shards_on_two_queues(test: &str, ipv6: bool) {
    if veth_or_skip(test).is_none() {
        return;
    }
    let rig = XdpQueuesRig::new(2).expect("setting up the 2-queue veth rig with the xdp link");
    assert_eq!(
        rig.queues.iter().map(|q| q.queue_id()).collect::<Vec<_>>(),
        [0, 1]
    );
    // Attached in veth's own (driver) mode: generic XDP sees every frame as queue 0.
    let out = rig.ns.run(LIMIT, &["ip", "link", "show", VETH_USTACK]);
    let text = String::from_utf8_lossy(&out.expect("ip link show").stdout).into_owned();
    assert!(
        text.contains("prog/xdp") && !text.contains("xdpgeneric"),
        "{text}"
    );
    let frames = rig.queues[0].queue_frames();
    let mut b = RuntimeBuilder::new().ipv4(USTACK_IP, 24);
    let peer = if ipv6 {
        // Without DAD: the shards serve at once.
        b = b.sysctl("net.ipv6.conf.default.accept_dad", 0);
        Peer::v6(&rig.ns, VETH_KERNEL)
    } else {
        Peer::from(&rig.ns)
    };
    let b = b.mac(EthernetAddress(rig.mac));
    scenarios::two_shards_serve_kernel_clients(test, peer, b, rig.queues);
    let per_queue = frames.get();
    eprintln!("{test}: frames per receive queue {per_queue:?}");
    assert!(per_queue.iter().all(|&n| n > 0), "{per_queue:?}");
}

#[test]
fn two_shards_on_two_xdp_queues_serve_kernel_clients() {
    two_shards_on_two_queues("two_shards_on_two_xdp_queues_serve_kernel_clients", false);
}

#[test]
fn two_shards_on_two_xdp_queues_serve_kernel_ipv6_clients() {
    two_shards_on_two_queues(
        "two_shards_on_two_xdp_queues_serve_kernel_ipv6_clients",
        true,
    );
}

/// Asking for more queues than the interface has is refused, naming the queue and how to
/// make a veth with more.
#[test]
fn more_queues_than_the_interface_has_are_refused() {
    if veth_or_skip("more_queues_than_the_interface_has_are_refused").is_none() {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    ns.veth_pair().expect("a 1-queue veth pair");
    let e = Xdp::open(&XdpConfig {
        interface: VETH_USTACK.to_owned(),
        netns: Some(ns.path().to_owned()),
        queues: 2,
        ..XdpConfig::default()
    })
    .expect_err("a 1-queue veth has no queue 1");
    let text = e.to_string();
    assert!(text.contains("queue 1"), "{text}");
    assert!(text.contains("numrxqueues 2"), "{text}");
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    for (config, what) in [
        (
            XdpConfig {
                interface: "a/b".into(),
                ..XdpConfig::default()
            },
            "interface name",
        ),
        (
            XdpConfig {
                frames: 100,
                ..XdpConfig::default()
            },
            "frames",
        ),
        (
            XdpConfig {
                frames: 32,
                ..XdpConfig::default()
            },
            "frames",
        ),
        (
            XdpConfig {
                queues: 0,
                ..XdpConfig::default()
            },
            "queues",
        ),
    ] {
        let e = Xdp::open(&config).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{config:?}");
        assert!(e.to_string().contains(what), "{config:?}: {e}");
    }
    let e = Xdp::open(&XdpConfig {
        interface: "nosuchif0".into(),
        ..XdpConfig::default()
    })
    .expect_err("no such interface");
    assert!(e.to_string().contains("nosuchif0"), "{e}");
}

#[test]
fn device_moves_frames_while_its_program_is_attached() {
    let Some((rig, _)) = rig("device_moves_frames_while_its_program_is_attached") else {
        return;
    };
    let XdpRig { mut queue, mac, ns } = rig;
    let show = |ns: &NetNs| {
        let out = ns
            .run(LIMIT, &["ip", "link", "show", VETH_USTACK])
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = show(&ns);
    assert!(text.contains("xdpgeneric"), "program attached: {text}");
    // IPv6's solicited-node groups pass the interface's multicast filter.
    assert_eq!(
        allmulti(&ns, VETH_USTACK),
        1,
        "every multicast frame asked for"
    );
    let caps = queue.caps();
    assert_eq!(
        (caps.medium, caps.max_frame_len()),
        (Medium::Ethernet, 1514)
    );

    // Refused by us: larger than the largest frame.
    assert!(!queue.send(Instant::ZERO, &vec![0; 1515]));
    assert_eq!(queue.stats().tx_errors, 1);
    // The kernel answers a hand-made ARP request, sent in a batch of three (one kick).
    let req = arp_request(mac);
    assert_eq!(queue.send_batch(Instant::ZERO, &[&req, &req, &req]), 0);
    let reply = arp_reply(&mut queue, mac, |q| {
        q.wait(Some(Duration::from_millis(100))).unwrap();
    });
    assert_eq!(&reply[28..32], &KERNEL_IP.octets(), "sender: the kernel");
    let s = *queue.stats();
    // Bound with XDP_USE_NEED_WAKEUP (Linux 5.4+); in copy mode the kernel transmits only
    // inside sendto(2), so its flag asks for the kick: one for the batch, none saved.
    assert!(queue.need_wakeup(), "bound with XDP_USE_NEED_WAKEUP");
    assert_eq!((s.tx_packets, s.tx_kicks, s.rx_bad), (3, 1, 0), "{s:?}");
    assert_eq!(s.tx_kicks_saved, 0, "{s:?}");
    // One kick may hand the driver the whole transmit ring (XDP_MAX_TX_SKB_BUDGET, 6.17+:
    // half of the 4096 chunks), or the kernel's fixed 32 before.
    assert!(
        [32, 2048].contains(&queue.tx_budget()),
        "{}",
        queue.tx_budget()
    );
    assert!(s.rx_packets >= 1, "{s:?}");

    // Closing the queue detaches the program.
    drop(queue);
    let text = show(&ns);
    assert!(!text.contains("xdp"), "program detached: {text}");
    assert_eq!(allmulti(&ns, VETH_USTACK), 0, "allmulti given back");
}
