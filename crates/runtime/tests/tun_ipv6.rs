//! ustack pings the Linux kernel over IPv6 through a TUN interface in a namespace of the
//! test's own (`TunRig`): small echoes and 4000-byte ones, which ustack fragments on the
//! way out and the kernel fragments on the way back, each reassembling the other's.
//! (The other direction, the kernel's `ping -6` to `ustack serve --addr6`, is
//! tools/ustack/tests/ipv6.rs.) Without root each test skips with a note, unless
//! `USTACK_REQUIRE_ROOT` is set, which makes that a failure. Every wait is bounded.

use core::net::Ipv6Addr;
use core::time::Duration;

use ustack_obs::Counter;
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_testkit::netns::{TUN_NAME, TunRig, USTACK_IP, root_or_skip};

const KERNEL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 1);
const USTACK6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 2);

/// A `/proc/net/snmp6` counter.
fn snmp6(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(name)).then(|| it.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[test]
fn ustack_pings_the_kernel_over_ipv6_with_fragments() {
    if root_or_skip("ustack_pings_the_kernel_over_ipv6_with_fragments").is_none() {
        return;
    }
    let mut rig = TunRig::new(1, None).expect("setting up the TUN rig");
    // The rig turns IPv6 off on the kernel's end; this test turns it back on.
    let limit = Duration::from_secs(5);
    let sysctl = format!("net.ipv6.conf.{TUN_NAME}.disable_ipv6=0");
    let out = rig
        .ns
        .run(limit, &["sysctl", "-qw", &sysctl])
        .expect("sysctl");
    assert!(out.status.success(), "{out:?}");
    let addr = format!("{KERNEL6}/64");
    let out = rig
        .ns
        .run(
            limit,
            &["ip", "-6", "addr", "add", &addr, "dev", TUN_NAME, "nodad"],
        )
        .expect("ip -6 addr add");
    assert!(out.status.success(), "{out:?}");
    let mut rt = RuntimeBuilder::new()
        .ipv4(USTACK_IP, 24)
        .ipv6(USTACK6, 64)
        .seed(7)
        .build(rig.queues.remove(0))
        .expect("a runtime over the TUN queue");
    let mut answered = Vec::new();
    for (seq, size) in [(1u16, 56usize), (2, 56), (3, 4000), (4, 4000), (5, 4000)] {
        let data = ustack_testkit::pattern(size, u64::from(seq));
        let now = rt.now();
        rt.stack_mut()
            .ping6(now, KERNEL6, 0x77, seq, &data)
            .expect("ping6 sent");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let reply = loop {
            rt.run_once(Some(Duration::from_millis(10)))
                .expect("the loop");
            if let Some(r) = rt.stack_mut().recv_echo_reply6() {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no reply to echo {seq} ({size} bytes) in 5 s: {:?}",
                rt.stack().mib()
            );
        };
        assert_eq!((reply.src, reply.ident, reply.seq_no), (KERNEL6, 0x77, seq));
        assert_eq!(reply.data, data, "echo {seq} came back whole");
        assert_eq!(reply.hop_limit, 64, "the kernel's default hop limit");
        answered.push(seq);
    }
    assert_eq!(answered, [1, 2, 3, 4, 5]);
    let m = rt.stack().mib();
    // ustack fragmented its three large requests (three fragments each over 1500) and
    // reassembled the kernel's three large replies.
    assert_eq!(m.get(Counter::Ip6FragOKs), 3);
    assert_eq!(m.get(Counter::Ip6FragCreates), 9);
    assert_eq!(m.get(Counter::Ip6ReasmOKs), 3);
    assert_eq!(m.get(Counter::Icmp6InEchoReplies), 5);
    let kernel = rig.ns.run(limit, &["cat", "/proc/net/snmp6"]).expect("cat");
    let kernel = String::from_utf8_lossy(&kernel.stdout);
    assert_eq!(snmp6(&kernel, "Ip6ReasmOKs"), 3, "{kernel}");
    assert_eq!(snmp6(&kernel, "Icmp6InEchos"), 5, "{kernel}");
}
