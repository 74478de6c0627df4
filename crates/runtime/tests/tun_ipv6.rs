//! ustack pings the Linux kernel over IPv6 through a TUN interface in a namespace of the
//! test's own (`TunRig`): small echoes and 4000-byte ones, which ustack fragments on the
//! way out and the kernel fragments on the way back, each reassembling the other's (the
//! scenario of `kernel/scenarios.rs` that packet and xdp run too). (The other direction, the kernel's `ping -6` to `ustack serve --addr6`, is
//! tools/ustack/tests/ipv6.rs.) A kernel UDP client (python3, `AF_INET6`) sends
//! datagrams of up to 4000 bytes to a UDP echo over the runtime's API and gets each back,
//! and a datagram to a closed port is refused (ICMPv6 port unreachable). Without root each test skips with a note, unless
//! `USTACK_REQUIRE_ROOT` is set, which makes that a failure. Every wait is bounded.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use core::time::Duration;

use ustack_obs::Counter;
use ustack_runtime::api::UdpSocket;
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::AddrState;
use ustack_testkit::netns::{TUN_NAME, TunRig, USTACK_IP, python_argv, root_or_skip, tool_or_skip};
use ustack_testkit::snmp6;

mod kernel;

use kernel::{Peer, builder, scenarios};

const KERNEL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 1);
const USTACK6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 2);

/// A TUN rig whose kernel end has IPv6 on and `KERNEL6`.
fn rig6() -> TunRig {
    let rig = TunRig::new(1, None).expect("setting up the TUN rig");
    rig.ns
        .add_ipv6(TUN_NAME, &format!("{KERNEL6}/64"))
        .expect("IPv6 on the kernel's end");
    rig
}

/// Small echoes and 4000-byte ones from ustack to the kernel (`kernel/scenarios.rs`, as
/// over packet and xdp).
#[test]
fn ustack_pings_the_kernel_over_ipv6_with_fragments() {
    let test = "ustack_pings_the_kernel_over_ipv6_with_fragments";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::new(1, None).expect("setting up the TUN rig");
    let peer = Peer::v6(&rig.ns, TUN_NAME);
    scenarios::ustack_pings_kernel6(test, peer, builder(), rig.queues.remove(0));
}

/// The kernel's UDP client: lock-step, every echo checked; then a connected socket to a
/// closed port, which the kernel reports as ECONNREFUSED once ICMPv6 port unreachable
/// arrives; between them one IPv4 datagram to the same (dual-stack) port. Prints the number of echoes and "refused".
const UDP6_CLIENT: &str = r#"
import socket, sys
host, port, closed, n, host4 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
s.settimeout(3)
ok = 0
for i in range(n):
    size = [1, 100, 1400, 4000][i % 4]
    d = bytes((i + j) % 251 for j in range(size))
    s.sendto(d, (host, port))
    r, a = s.recvfrom(65536)
    assert r == d, f"echo {i} differs"
    assert (a[0], a[1]) == (host, port), a
    ok += 1
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s4.settimeout(3)
s4.sendto(b"over v4", (host4, port))
r, a = s4.recvfrom(100)
assert (r, a) == (b"over v4", (host4, port)), (r, a)
c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
c.settimeout(3)
c.connect((host, closed))
c.send(b"anyone?")
try:
    c.recv(100)
    refused = "answered"
except ConnectionRefusedError:
    refused = "refused"
print(ok, refused, flush=True)
"#;

/// A kernel UDP client over IPv6 and ustack's UDP echo on `[::]:7007` (the runtime's API):
/// every datagram (1 to 4000 bytes: the large ones fragmented both ways) comes back, and
/// both sides count exactly what was exchanged in `Udp6`; an IPv4 datagram to the same
/// socket (dual-stack) is echoed over IPv4 and counted in `Udp`; a datagram to a closed
/// port gets an ICMPv6 port unreachable the kernel turns into ECONNREFUSED.
#[test]
fn kernel_udp6_client_gets_every_datagram_echoed() {
    const TEST: &str = "kernel_udp6_client_gets_every_datagram_echoed";
    if root_or_skip(TEST).is_none() || !tool_or_skip(TEST, "python3") {
        return;
    }
    let mut rig = rig6();
    let mut rt = RuntimeBuilder::new()
        .ipv4(USTACK_IP, 24)
        .ipv6(USTACK6, 64)
        .seed(8)
        .build(rig.queues.remove(0))
        .expect("a runtime over the TUN queue");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rt.stack().ipv6_addr_state(USTACK6) != Some(AddrState::Preferred) {
        rt.run_once(Some(Duration::from_millis(10)))
            .expect("the loop");
        assert!(std::time::Instant::now() < deadline, "DAD did not finish");
    }
    let any = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 7007, 0, 0);
    let echo = UdpSocket::bind(&mut rt, any).expect("bind [::]:7007");
    assert_eq!(
        echo.local_sockaddr(&rt).unwrap(),
        SocketAddr::V6(any),
        "bound where asked"
    );
    const N: u64 = 40;
    let args = [
        USTACK6.to_string(),
        "7007".into(),
        "7008".into(),
        N.to_string(),
        USTACK_IP.to_string(),
    ];
    let mut client = rig
        .ns
        .command(Duration::from_secs(30), &python_argv(UDP6_CLIENT, &args))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the namespace");
    let mut buf = vec![0u8; 65536];
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let status = loop {
        rt.run_once(Some(Duration::from_millis(5)))
            .expect("the loop");
        while let Ok((n, from)) = echo.recv_from_addr(&mut rt, &mut buf) {
            echo.send_to(&mut rt, &buf[..n], from).expect("echo sent");
        }
        if let Some(status) = client.try_wait().expect("wait for python3") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "the client hung");
    };
    let out = client.wait_with_output().expect("client output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success(),
        "client failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        format!("{N} refused"),
        "every echo, then refused"
    );
    let m = rt.stack().mib();
    assert_eq!(m.get(Counter::Udp6InDatagrams), N);
    assert_eq!(m.get(Counter::Udp6OutDatagrams), N);
    assert_eq!(m.get(Counter::Udp6NoPorts), 1);
    assert_eq!(
        m.get(Counter::UdpInDatagrams),
        1,
        "the IPv4 one, as v4-mapped"
    );
    assert_eq!(m.get(Counter::UdpOutDatagrams), 1);
    assert_eq!(m.get(Counter::Udp6InCsumErrors), 0);
    assert_eq!(m.get(Counter::Icmp6OutDestUnreachs), 1);
    // A quarter of them were 4000 bytes: fragmented by the kernel and by ustack.
    assert_eq!(m.get(Counter::Ip6ReasmOKs), N / 4);
    assert_eq!(m.get(Counter::Ip6FragOKs), N / 4);
    let limit = Duration::from_secs(5);
    let kernel = rig.ns.run(limit, &["cat", "/proc/net/snmp6"]).expect("cat");
    let kernel = String::from_utf8_lossy(&kernel.stdout);
    assert_eq!(snmp6(&kernel, "Udp6OutDatagrams"), N + 1, "{kernel}");
    assert_eq!(snmp6(&kernel, "Udp6InDatagrams"), N, "{kernel}");
    assert_eq!(snmp6(&kernel, "Icmp6InDestUnreachs"), 1, "{kernel}");
}
