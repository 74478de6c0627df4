//! The Linux kernel as the peer, over a TUN interface in a namespace of the test's own
//! (`ustack_testkit::netns::TunRig`): ustack runs a runtime over the TUN queue on a thread
//! of this process (real clock), the kernel side runs `ping` and Python sockets inside the
//! namespace (`nsenter`, every command bounded by `timeout`).
//!
//! - ICMP: `ping` answered by ustack (also 4000-byte echoes: reassembly and fragmentation
//!   both ways);
//! - TCP, ustack as the server: a kernel client sends 1 MiB and 16 MiB, ustack hashes what
//!   it read and answers with the SHA-256, both ends compare; and 64 MiB over an interface
//!   with the kernel's offloads taken (super-segments, partial checksums); the echo server
//!   of `ustack_apps` returns 1 MiB that the client checks;
//! - TCP, ustack as the client: bulk to a kernel server and back, SHA-256 at both ends:
//!   4 MiB each way, and 1 GiB each way (about 13 s with a debug build), streamed at both
//!   ends without holding it in memory;
//! - UDP echo, datagrams from 1 byte to 8000 (fragmented).
//!
//! Each run is captured on ustack's side and read by tshark (`kernel/scenarios.rs`); the
//! 1 GiB transfer on its first 150,000 frames.
//!
//! Without root or `/dev/net/tun` each test skips with a note, unless `USTACK_REQUIRE_ROOT`
//! is set (CI), which makes that a failure.

use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::Device;
use ustack_dev::fault::{FaultConfig, Faulty};
use ustack_dev::tun::{Tun, TunConfig, TunStats};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::Instant;
use ustack_testkit::netns::{KERNEL_IP, TUN_NAME, TunRig, USTACK_IP, root_or_skip, tool_or_skip};
use ustack_wire::checksum::checksum;

mod kernel;

use kernel::{LIMIT, Peer, builder, scenarios};

fn rig(test: &str) -> Option<TunRig> {
    root_or_skip(test)?;
    Some(TunRig::new(1, None).expect("setting up the TUN rig"))
}

// ---- the transfers every link carries (kernel/scenarios.rs) --------------------------------

#[test]
fn kernel_pings_ustack() {
    let Some(mut rig) = rig("kernel_pings_ustack") else {
        return;
    };
    if !tool_or_skip("kernel_pings_ustack", "ping") {
        return;
    }
    scenarios::kernel_pings_ustack(
        "kernel_pings_ustack",
        &rig.ns,
        builder(),
        rig.queues.remove(0),
    );
}

/// A kernel client sends `n` bytes to ustack (over an interface with the kernel's
/// offloads taken if `offload`); the queue's counters at the end, if the test ran.
fn kernel_sends_to_ustack(test: &str, n: usize, offload: bool) -> Option<TunStats> {
    root_or_skip(test)?;
    let mut rig = if offload {
        TunRig::with_offload(1)
    } else {
        TunRig::new(1, None)
    }
    .expect("setting up the TUN rig");
    let q = rig.queues.remove(0);
    let stats = scenarios::kernel_sends_to_ustack(test, &rig.ns, builder(), q, n, |q| *q.stats());
    eprintln!(
        "{test}: {} packets read ({} super-segments)",
        stats.rx_packets, stats.rx_gso
    );
    Some(stats)
}

#[test]
fn kernel_client_sends_1mib_to_ustack() {
    kernel_sends_to_ustack("kernel_client_sends_1mib_to_ustack", 1 << 20, false);
}

#[test]
fn kernel_client_sends_16mib_to_ustack() {
    kernel_sends_to_ustack("kernel_client_sends_16mib_to_ustack", 16 << 20, false);
}

/// With the offloads taken, the kernel sends super-segments with partial checksums: the
/// queue completes each checksum and the stack takes segments far larger than the MTU.
#[test]
fn kernel_client_sends_64mib_to_ustack_in_super_segments() {
    let test = "kernel_client_sends_64mib_to_ustack_in_super_segments";
    let Some(s) = kernel_sends_to_ustack(test, 64 << 20, true) else {
        return;
    };
    assert!(s.rx_gso > 0, "no super-segment came: {s:?}");
    // Captured: the capture does not let the queue leave partial checksums unfinished.
    assert!(s.rx_csum_completed > 0, "no partial checksum came: {s:?}");
    assert!(s.rx_csum_trusted > 0, "no checksum vouched for: {s:?}");
    assert_eq!(
        (s.rx_bad_vnet, s.rx_truncated, s.rx_errors),
        (0, 0, 0),
        "{s:?}"
    );
    // Far fewer reads than 1500-byte packets would need.
    assert!(s.rx_packets < (64 << 20) / 1460 / 4, "{s:?}");
}

/// The kernel's counters for the rig's TUN interface in the namespace `ns` (a
/// `/proc/<pid>/ns/net` path), read from `/proc/net/dev` inside it: packets it sent
/// ustack and sent packets it dropped (`tun_net_xmit` found the queue's ring full).
fn kernel_tx_counters(ns: &std::path::Path) -> (u64, u64) {
    let out = std::process::Command::new("timeout")
        .arg("5")
        .arg("nsenter")
        .arg(format!("--net={}", ns.display()))
        .args(["cat", "/proc/net/dev"])
        .output()
        .expect("reading /proc/net/dev in the namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{TUN_NAME}:")))
        .unwrap_or_else(|| panic!("no {TUN_NAME} in {text}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    // Receive: 8 columns; transmit: bytes, packets, errs, drop, ...
    (n[9], n[11])
}

/// With the offloads taken and nothing between the queue and the runtime, the kernel's
/// partial checksums are left as they came (`NEEDS_CSUM`: the packet never crossed a
/// wire) and the stack does not verify them: a stack that did would drop every segment
/// (the field holds only the pseudo-header sum) and the digest would never come. And at
/// the kernel's default `txqueuelen` of 500, the kernel never finds ustack's queue full:
/// 64 MiB in super-segments are at most a window's worth (a few dozen) in the ring.
#[test]
fn kernel_sends_64mib_in_super_segments_unverified_and_none_dropped_at_txqueuelen_500() {
    let test = "kernel_sends_64mib_in_super_segments_unverified_and_none_dropped_at_txqueuelen_500";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::with_offload(1).expect("setting up the TUN rig");
    rig.ns
        .run(LIMIT, &["ip", "link", "set", TUN_NAME, "txqueuelen", "500"])
        .expect("txqueuelen 500");
    let ns = rig.ns.path().to_owned();
    let q = rig.queues.remove(0);
    let (s, (sent, dropped)) =
        scenarios::kernel_sends_to_ustack_uncaptured(test, &rig.ns, builder(), q, 64 << 20, {
            move |q| (*q.stats(), kernel_tx_counters(&ns))
        });
    eprintln!(
        "{test}: {} packets read ({} super-segments, {} vouched for), kernel sent {sent} \
         and dropped {dropped}",
        s.rx_packets, s.rx_gso, s.rx_csum_trusted
    );
    assert!(s.rx_gso > 0, "no super-segment came: {s:?}");
    assert!(s.rx_csum_trusted > 0, "no checksum vouched for: {s:?}");
    assert_eq!(s.rx_csum_completed, 0, "partial checksums completed: {s:?}");
    assert_eq!((s.rx_bad_vnet, s.rx_truncated), (0, 0), "{s:?}");
    assert!(sent >= s.rx_packets, "the kernel sent what was read");
    assert_eq!(
        dropped, 0,
        "the kernel dropped packets for ustack at txqueuelen 500"
    );
}

/// A fault relay between a TUN queue without offloads and the stack flips bits in 1% of
/// what the kernel sends (seeded): the queue vouches for no checksum, the stack verifies
/// every segment, drops the corrupted ones (the kernel retransmits them) and reads
/// exactly what was sent (SHA-256). (The relay refuses frames over the MTU, so it cannot
/// sit on a queue with offloads; it does not pass on a queue's word on checksums either.)
#[test]
fn corrupted_segments_on_a_tun_without_offloads_are_dropped() {
    let test = "corrupted_segments_on_a_tun_without_offloads_are_dropped";
    let Some(mut rig) = rig(test) else {
        return;
    };
    let q = rig.queues.remove(0);
    let corrupt = FaultConfig {
        corrupt: 0.01,
        ..FaultConfig::default()
    };
    let faulty = Faulty::new(q, 7, FaultConfig::default(), corrupt);
    let (corrupted, s) = scenarios::kernel_sends_to_ustack_uncaptured(
        test,
        &rig.ns,
        builder(),
        faulty,
        4 << 20,
        |f| (f.ingress().corrupted, *f.device().stats()),
    );
    eprintln!("{test}: {corrupted} frames corrupted, {s:?}");
    assert!(corrupted > 0, "nothing corrupted");
    assert_eq!(
        s.rx_csum_trusted, 0,
        "a queue without offloads vouched: {s:?}"
    );
}

/// With the offloads taken, ustack's TCP sends runs of full segments as super-segments
/// itself (TSO inside TCP, `Stack::set_gso_max_size`), which the TUN queue writes whole
/// with a virtio-net GSO header: 64 MiB to a kernel server arrive intact (SHA-256 at both
/// ends), the stack makes far fewer frames than one per segment, and the queue writes
/// them without merging.
#[test]
fn ustack_sends_64mib_to_kernel_in_super_segments() {
    let test = "ustack_sends_64mib_to_kernel_in_super_segments";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::with_offload(1).expect("setting up the TUN rig");
    let q = rig.queues.remove(0);
    let up = 64 << 20;
    let s =
        scenarios::ustack_client_bulk_both_ways(test, &rig.ns, builder(), q, up, 1, |q| *q.stats());
    eprintln!(
        "{test}: {} packets in {} writes; TSO: {} super-segments of {} segments; \
         merged at the driver: {} of {} segments",
        s.tx_packets, s.tx_writes, s.tx_tso, s.tx_tso_segs, s.tx_gso, s.tx_gso_segs
    );
    assert!(s.tx_tso > 0, "no super-segment from TCP: {s:?}");
    assert_eq!((s.tx_errors, s.rx_bad_vnet), (0, 0), "{s:?}");
    // 64 MiB is about 46,000 segments of 1,448 bytes: most left TCP in super-segments,
    // so the stack made (and the queue wrote) far fewer frames than segments.
    let segments = up / 1448;
    assert!(s.tx_tso_segs > segments / 2, "{s:?}");
    assert!(s.tx_packets < segments / 4, "{s:?}");
    assert!(s.tx_writes < segments / 4, "{s:?}");
}

/// A short echo (one segment each way) over a TUN queue without offloads: the echo's
/// segment goes to the link by the qdisc bypass (`Device::tx_direct`), as the write
/// returns.
#[test]
fn a_lone_echo_segment_takes_the_qdisc_bypass_over_tun() {
    let test = "a_lone_echo_segment_takes_the_qdisc_bypass_over_tun";
    let Some(mut rig) = rig(test) else {
        return;
    };
    let q = rig.queues.remove(0);
    let direct = scenarios::kernel_client_through_echo(test, &rig.ns, builder(), q, 1000);
    assert!(direct >= 1, "the echo's segment did not go by the bypass");
}

#[test]
fn kernel_client_through_ustack_echo_server() {
    let test = "kernel_client_through_ustack_echo_server";
    let Some(mut rig) = rig(test) else {
        return;
    };
    let q = rig.queues.remove(0);
    scenarios::kernel_client_through_echo(test, &rig.ns, builder(), q, 1 << 20);
}

#[test]
fn ustack_client_bulk_both_ways_with_kernel_server() {
    let Some(mut rig) = rig("ustack_client_bulk_both_ways_with_kernel_server") else {
        return;
    };
    let q = rig.queues.remove(0);
    let test = "ustack_client_bulk_both_ways_with_kernel_server";
    scenarios::ustack_client_bulk_both_ways(test, &rig.ns, builder(), q, 4 << 20, 4 << 20, |_| ());
}

#[test]
fn ustack_client_moves_1gib_each_way_with_kernel_server() {
    let test = "ustack_client_moves_1gib_each_way_with_kernel_server";
    let Some(mut rig) = rig(test) else {
        return;
    };
    let q = rig.queues.remove(0);
    scenarios::ustack_client_bulk_both_ways(test, &rig.ns, builder(), q, 1 << 30, 1 << 30, |_| ());
}

#[test]
fn kernel_udp_client_through_ustack_echo() {
    let test = "kernel_udp_client_through_ustack_echo";
    let Some(mut rig) = rig(test) else {
        return;
    };
    scenarios::kernel_udp_client_through_echo(test, &rig.ns, builder(), rig.queues.remove(0));
}

#[test]
fn two_shards_on_two_queues_serve_kernel_clients() {
    let test = "two_shards_on_two_queues_serve_kernel_clients";
    let Some(()) = root_or_skip(test) else {
        return;
    };
    let rig = TunRig::new(2, None).expect("setting up the TUN rig");
    let builder = RuntimeBuilder::new().ipv4(USTACK_IP, 24);
    scenarios::two_shards_serve_kernel_clients(test, &rig.ns, builder, rig.queues);
}

/// The same over IPv6: the kernel picks the queue of each IPv6 flow, each shard's
/// listener on `[2001:db8:7::2]:9` serves what reaches its queue.
#[test]
fn two_shards_on_two_queues_serve_kernel_clients_over_ipv6() {
    let test = "two_shards_on_two_queues_serve_kernel_clients_over_ipv6";
    let Some(()) = root_or_skip(test) else {
        return;
    };
    let rig = TunRig::new(2, None).expect("setting up the TUN rig");
    let builder = RuntimeBuilder::new().ipv4(USTACK_IP, 24);
    let peer = Peer::v6(&rig.ns, TUN_NAME);
    scenarios::two_shards_serve_kernel_clients(test, peer, builder, rig.queues);
}

// ---- the device ---------------------------------------------------------------------------

#[test]
fn multi_queue_interface_has_every_queue() {
    let Some(()) = root_or_skip("multi_queue_interface_has_every_queue") else {
        return;
    };
    let rig = TunRig::new(3, Some(1400)).expect("setting up the TUN rig");
    assert_eq!(rig.mtu, 1400);
    let queues: Vec<usize> = rig.queues.iter().map(|q| q.queue()).collect();
    assert_eq!(queues, [0, 1, 2]);
    let out = rig
        .ns
        .run(LIMIT, &["ip", "-details", "link", "show", "tun0"])
        .expect("ip link show");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("mtu 1400"), "{text}");
    assert!(text.contains("multi_queue"), "{text}");
    assert!(text.contains("numqueues 3"), "{text}");
}

/// An ICMP echo request from `src` to `dst`, as bytes on a TUN queue (a bare IPv4 packet).
fn echo_request(src: core::net::Ipv4Addr, dst: core::net::Ipv4Addr, id: u16) -> Vec<u8> {
    let mut p = vec![0u8; 28 + 8];
    p[..12].copy_from_slice(&[0x45, 0, 0, 36, 0, 1, 0x40, 0, 64, 1, 0, 0]);
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let sum = checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p[20] = 8; // echo request
    p[24..26].copy_from_slice(&id.to_be_bytes());
    p[28..].copy_from_slice(b"ustack!!");
    let sum = checksum(&p[20..]);
    p[22..24].copy_from_slice(&sum.to_be_bytes());
    p
}

#[test]
fn device_moves_packets_and_counts_what_it_refuses() {
    let Some(mut rig) = rig("device_moves_packets_and_counts_what_it_refuses") else {
        return;
    };
    let mut q = rig.queues.remove(0);
    let now = Instant::ZERO;
    let mut buf = vec![0; q.caps().max_frame_len()];
    assert_eq!(q.caps().max_frame_len(), 1500, "IP medium: no link header");
    while q.recv(now, &mut buf).is_some() {}
    assert!(!q.wait(Some(Duration::ZERO)).unwrap(), "nothing waiting");

    // Refused: larger than the MTU (by us), not an IP packet (by the kernel).
    assert!(!q.send(now, &vec![0x45; 1501]));
    assert!(!q.send(now, &[0xff; 40]));
    assert_eq!(q.stats().tx_errors, 2);

    // The kernel answers a hand-made echo request on the same queue.
    let req = echo_request(USTACK_IP, KERNEL_IP, 0x7573);
    assert!(q.send(now, &req));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let reply = loop {
        assert!(std::time::Instant::now() < deadline, "no echo reply");
        q.wait(Some(Duration::from_millis(100))).unwrap();
        if let Some(n) = q.recv(now, &mut buf) {
            let p = &buf[..n];
            // Skip anything else the kernel sends; the reply is ICMP type 0 to us.
            if n == req.len() && p[9] == 1 && p[20] == 0 {
                break p.to_vec();
            }
        }
    };
    assert_eq!(&reply[12..16], &KERNEL_IP.octets(), "from the kernel");
    assert_eq!(&reply[16..20], &USTACK_IP.octets(), "to us");
    assert_eq!(&reply[24..26], &0x7573u16.to_be_bytes(), "our identifier");
    assert_eq!(&reply[28..], b"ustack!!", "our payload");
    let s = *q.stats();
    assert_eq!((s.tx_packets, s.tx_bytes), (1, req.len() as u64));
    assert!(s.rx_packets >= 1 && s.rx_bytes >= req.len() as u64);
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let bad = [
        (
            TunConfig {
                name: String::new(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a".repeat(16),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a/b".into(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                name: "a b".into(),
                ..TunConfig::default()
            },
            "interface name",
        ),
        (
            TunConfig {
                queues: 0,
                ..TunConfig::default()
            },
            "queues",
        ),
        (
            TunConfig {
                queues: 257,
                ..TunConfig::default()
            },
            "queues",
        ),
        (
            TunConfig {
                mtu: Some(67),
                ..TunConfig::default()
            },
            "MTU",
        ),
        (
            TunConfig {
                mtu: Some(65536),
                ..TunConfig::default()
            },
            "MTU",
        ),
    ];
    for (config, what) in bad {
        let e = Tun::open(&config).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{config:?}");
        assert!(e.to_string().contains(what), "{config:?}: {e}");
    }
    // A namespace file that does not exist: the error names it (before any root check).
    let config = TunConfig {
        netns: Some("/nonexistent/ns/net".into()),
        ..TunConfig::default()
    };
    let e = Tun::open(&config).expect_err("no such namespace");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("/nonexistent/ns/net"), "{e}");
    // 15 bytes is the longest name; `%d` is the kernel's to fill.
    for name in ["a".repeat(15), "ustack%d".to_owned()] {
        TunConfig {
            name,
            ..TunConfig::default()
        }
        .validate()
        .expect("valid");
    }
}
