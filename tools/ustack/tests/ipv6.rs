//! IPv6 against the Linux kernel over TUN (root only; skipped otherwise unless
//! `USTACK_REQUIRE_ROOT` is set): `ustack serve --addr6` in a namespace of the test's own,
//! the kernel's `ping -6` to it with small echoes and with 4000-byte ones (fragmented by
//! the kernel on the way in and by ustack on the way back, reassembled by each), and the
//! counters on both sides. Every command is bounded in time; the namespace and the server
//! go away with the test, whatever happens.

use core::time::Duration;

use ustack_testkit::netns::{NetNs, ServeOverTun, TUN_NAME, root_or_skip};
use ustack_testkit::snmp6;

const KERNEL6: &str = "2001:db8:5::1";
const USTACK6: &str = "2001:db8:5::2";

/// Three echoes of `size` bytes from the kernel; on a loss, the failure shows ustack's
/// counters too.
fn ping(ns: &NetNs, size: &str, bin: &std::path::Path, server: &ServeOverTun) -> String {
    let out = ns
        .run(
            Duration::from_secs(15),
            &[
                "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "-s", size, USTACK6,
            ],
        )
        .expect("ping -6 ran");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !text.contains("3 received") {
        let stat = std::process::Command::new(bin)
            .args(["stat", "--json", "--control"])
            .arg(server.control())
            .output()
            .expect("ustack stat");
        let stat = String::from_utf8_lossy(&stat.stdout);
        let stat: String = stat.split_whitespace().collect();
        panic!("ping -6 -s {size}: {text}\nustack's counters: {stat}");
    }
    text
}

#[test]
fn kernel_pings_ustack_over_ipv6_with_fragments() {
    if root_or_skip("kernel_pings_ustack_over_ipv6_with_fragments").is_none() {
        return;
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_ustack"));
    let ns = NetNs::new().expect("a namespace");
    let server = ServeOverTun::start(
        bin,
        &ns,
        &[
            "echo",
            "--addr",
            "192.0.2.2:7",
            "--addr6",
            &format!("{USTACK6}/64"),
            "--duration",
            "8s",
        ],
    )
    .expect("ustack serve over tun");
    // The rig turned IPv6 off on the kernel's end; this test turns it back on.
    let limit = Duration::from_secs(5);
    let sysctl = format!("net.ipv6.conf.{TUN_NAME}.disable_ipv6=0");
    ns.run(limit, &["sysctl", "-qw", &sysctl]).expect("sysctl");
    let addr = format!("{KERNEL6}/64");
    let out = ns
        .run(
            limit,
            &["ip", "-6", "addr", "add", &addr, "dev", TUN_NAME, "nodad"],
        )
        .expect("ip -6 addr add");
    assert!(out.status.success(), "{out:?}");

    // The kernel's new address may take a moment to be usable: one echo answered first
    // (at most three tries, each bounded), then every echo must be.
    let answered = (0..3).any(|_| {
        ns.run(limit, &["ping", "-6", "-c", "1", "-W", "1", USTACK6])
            .is_ok_and(|o| o.status.success())
    });
    assert!(answered, "no answer to a first ping -6");
    ping(&ns, "56", bin, &server);
    // 4000 bytes of data: 4048-byte packets, three fragments each way over MTU 1500.
    ping(&ns, "4000", bin, &server);

    let kernel = ns
        .run(limit, &["cat", "/proc/net/snmp6"])
        .expect("the kernel's counters");
    let kernel = String::from_utf8_lossy(&kernel.stdout);
    // The kernel fragmented its three large requests and reassembled ustack's replies.
    assert!(snmp6(&kernel, "Ip6FragOKs") >= 3, "{kernel}");
    assert!(snmp6(&kernel, "Ip6ReasmOKs") >= 3, "{kernel}");
    assert!(snmp6(&kernel, "Icmp6InEchoReplies") >= 6, "{kernel}");

    let stat = std::process::Command::new(bin)
        .args(["stat", "--snmp6", "--control"])
        .arg(server.control())
        .output()
        .expect("ustack stat --snmp6");
    let ours = String::from_utf8_lossy(&stat.stdout);
    assert!(stat.status.success(), "{ours}");
    let echoes = snmp6(&ours, "Icmp6InEchos");
    assert!((7..=9).contains(&echoes), "{ours}");
    assert_eq!(snmp6(&ours, "Icmp6OutEchoReplies"), echoes, "{ours}");
    assert_eq!(snmp6(&ours, "Ip6ReasmOKs"), 3, "{ours}");
    assert_eq!(snmp6(&ours, "Ip6FragOKs"), 3, "{ours}");
    assert_eq!(snmp6(&ours, "Ip6ReasmFails"), 0, "{ours}");
    assert_eq!(snmp6(&ours, "Ip6InHdrErrors"), 0, "{ours}");
    server.finish().expect("ustack serve ends cleanly");
}
