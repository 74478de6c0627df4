//! The library as packetdrill loads it: `dlopen`, `packetdrill_interface_init`, then only
//! the callback table (through `ustack_conform::so::SoBackend`, which holds the table's
//! `unsafe` calls).

use std::path::{Path, PathBuf};

use ustack_conform::backend::Backend;
use ustack_conform::exec::{Config, IpVersion};
use ustack_conform::so::SoBackend;

/// The cdylib cargo built for this test run: beside the test binary in
/// target/<profile>/deps/ (`cargo test` puts the fresh one there; target/<profile>/ holds
/// the one the last `cargo build` made, which may be stale).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let lib = deps.join("libustack_packetdrill.so");
    assert!(lib.exists(), "{} was not built", lib.display());
    lib
}

fn scenario(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/conformance")
        .join(rel)
}

#[test]
fn every_callback_is_filled() {
    let b = SoBackend::open(&library(), "").expect("loading the library");
    let t = b.table();
    let filled = [
        t.free.is_some(),
        t.socket.is_some(),
        t.bind.is_some(),
        t.listen.is_some(),
        t.accept.is_some(),
        t.connect.is_some(),
        t.read.is_some(),
        t.readv.is_some(),
        t.recv.is_some(),
        t.recvfrom.is_some(),
        t.recvmsg.is_some(),
        t.write.is_some(),
        t.writev.is_some(),
        t.send.is_some(),
        t.sendto.is_some(),
        t.sendmsg.is_some(),
        t.fcntl.is_some(),
        t.ioctl.is_some(),
        t.close.is_some(),
        t.shutdown.is_some(),
        t.getsockopt.is_some(),
        t.setsockopt.is_some(),
        t.poll.is_some(),
        t.netdev_send.is_some(),
        t.netdev_receive.is_some(),
        t.usleep.is_some(),
        t.gettimeofday.is_some(),
        t.epoll_create.is_some(),
        t.epoll_ctl.is_some(),
        t.epoll_wait.is_some(),
        t.pipe.is_some(),
        t.splice.is_some(),
    ];
    assert!(filled.iter().all(|&f| f), "{filled:?}");
    assert!(!t.userdata.is_null());
}

/// Bad flags: the table is still full (packetdrill calls it without looking, `free`
/// included), and every call fails.
#[test]
fn bad_flags_make_every_call_fail() {
    let b = SoBackend::open(&library(), "not-a-flag").expect("loading the library");
    assert!(b.table().socket.is_some() && b.table().free.is_some());
    assert_eq!(
        b.socket(libc::AF_INET, libc::SOCK_STREAM, 0),
        Err(libc::EBADF)
    );
    let got = b
        .netdev_receive(std::time::Duration::from_secs(1))
        .expect("netdev_receive");
    assert!(got.is_none());
}

/// Calls through the table: errno comes back as Linux's value, the variadic fcntl takes
/// its argument (F_SETFL O_NONBLOCK, then F_GETFL reads O_RDWR|O_NONBLOCK), the virtual
/// clock moves only when told.
#[test]
fn calls_through_the_table_keep_linux_values() {
    let b = SoBackend::open(&library(), "receive_timeout_us=1000").expect("loading");
    let fd = b
        .socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP)
        .expect("socket") as i32;
    assert_eq!(b.fcntl(fd, libc::F_GETFL, 0), Ok(i64::from(libc::O_RDWR)));
    assert_eq!(
        b.fcntl(fd, libc::F_SETFL, i64::from(libc::O_NONBLOCK)),
        Ok(0)
    );
    assert_eq!(
        b.fcntl(fd, libc::F_GETFL, 0),
        Ok(i64::from(libc::O_RDWR | libc::O_NONBLOCK))
    );
    assert_eq!(b.read(fd, &mut [0; 10]), Err(libc::ENOTCONN));
    assert_eq!(b.close(fd + 100), Err(libc::EBADF));
    let t0 = b.now_us();
    b.usleep(250_000);
    assert_eq!(b.now_us(), t0 + 250_000);
    // Nothing to send: netdev_receive gives up after its deadline, on the virtual clock.
    let got = b
        .netdev_receive(std::time::Duration::from_millis(30))
        .expect("netdev_receive");
    assert!(got.is_none());
    assert_eq!(b.now_us(), t0 + 280_000);
    // TCP_INFO in Linux's layout: a listener's tcpi_state (the first byte) is
    // TCP_LISTEN (10), and the whole struct is written.
    let l = b
        .socket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP)
        .expect("socket") as i32;
    let addr: std::net::SocketAddr = "192.168.0.1:8080".parse().unwrap();
    assert_eq!(b.bind(l, addr), Ok(0));
    assert_eq!(b.listen(l, 4), Ok(0));
    let mut info = [0xffu8; 512];
    let n = b
        .getsockopt(l, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info)
        .expect("TCP_INFO");
    assert_eq!(info[0], 10, "tcpi_state");
    assert!(n >= 104, "struct tcp_info is {n} bytes");
    // SO_ERROR on a socket with nothing pending is 0.
    let mut e = [0xffu8; 4];
    assert_eq!(
        b.getsockopt(l, libc::SOL_SOCKET, libc::SO_ERROR, &mut e),
        Ok(4)
    );
    assert_eq!(i32::from_ne_bytes(e), 0);
    assert_eq!(b.close(l), Ok(0));
    assert_eq!(b.close(fd), Ok(0));
}

/// Scenarios end to end through the table: a blocking accept (a call on its own
/// thread, completed by a packet), the SYN-ACK's retransmission timer (the clock moved
/// to the stack's next timer by netdev_receive), and scripts that set sysctls (handed to
/// the library as its flags) and open several connections.
#[test]
fn scenarios_run_end_to_end_through_the_table() {
    for rel in [
        "handshake/blocking-accept.pkt",
        "handshake/blocking-connect.pkt",
        "handshake/syn-ack-retransmitted-after-1s.pkt",
        "data/fast-retransmit-3-dupacks.pkt",
        // Sysctl lines (passed as the library's flags) and several connections.
        "listen/syn-queue-full-drops-syn.pkt",
        "listen/syncookie-without-timestamps-v4.pkt",
    ] {
        let path = scenario(rel);
        let report = ustack_conform::run_so(&library(), "", &path, &Config::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(report.packets_matched >= 1, "{rel}: {report:?}");
    }
}

/// Over IPv6 through the table (`ip_version=ipv6` in the flags, as `--so_flags` would
/// carry it): `AF_INET6` sockets on the stack's IPv6 address, and scenarios whose packets
/// are IPv6: a handshake, data and fast retransmission, and an ICMPv6 packet too big that
/// makes the stack re-send in 1220-byte pieces (IPv6's minimum MTU less its headers).
#[test]
fn scenarios_run_over_ipv6_through_the_table() {
    let b = SoBackend::open(&library(), "ip_version=ipv6").expect("loading the library");
    let fd = b
        .socket(libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_TCP)
        .expect("an AF_INET6 socket") as i32;
    let v4: std::net::SocketAddr = "192.168.0.1:8080".parse().unwrap();
    assert_eq!(
        b.bind(fd, v4),
        Err(libc::EINVAL),
        "an IPv4 address on AF_INET6"
    );
    let other: std::net::SocketAddr = "[2001:db8::9]:8080".parse().unwrap();
    assert_eq!(
        b.bind(fd, other),
        Err(libc::EADDRNOTAVAIL),
        "not the stack's"
    );
    let ours: std::net::SocketAddr = "[fd3d:fa7b:d17d::1]:8080".parse().unwrap();
    assert_eq!(b.bind(fd, ours), Ok(0));
    assert_eq!(b.close(fd), Ok(0));
    b.free();

    let cfg = Config {
        ip_version: IpVersion::Ipv6,
        ..Config::default()
    };
    for (rel, matched) in [
        ("data/fast-retransmit-3-dupacks.pkt", 6),
        ("icmp/packet-too-big-lowers-mss-v6.pkt", 4),
    ] {
        let report = ustack_conform::run_so(&library(), "ip_version=ipv6", &scenario(rel), &cfg)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.packets_matched, matched, "{rel}: {report:?}");
    }
}

/// The runner is no rubber stamp through the library either: a wrong expectation fails.
#[test]
fn a_wrong_expectation_fails_through_the_table() {
    let text = std::fs::read_to_string(scenario("handshake/syn-ack-retransmitted-after-1s.pkt"))
        .expect("reading");
    let dir = std::env::temp_dir().join(format!("ustack-pdlib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("mutated.pkt");
    // The retransmitted SYN-ACK must not be accepted a second early.
    let mutated = text.replacen("1.1~1.18 > S.", "0.6~0.68 > S.", 1);
    assert_ne!(mutated, text, "the scenario no longer has `1.1~1.18 > S.`");
    std::fs::write(&bad, mutated).expect("writing");
    let r = ustack_conform::run_so(&library(), "", &bad, &Config::default());
    let _ = std::fs::remove_dir_all(&dir);
    let e = r.expect_err("the mutant passed");
    assert!(e.contains("timing error"), "{e}");
}

/// Huge waits are bounded, never a panic (which would abort the caller across the FFI).
#[test]
fn huge_timeouts_are_clamped() {
    let b =
        SoBackend::open(&library(), &format!("receive_timeout_us={}", u64::MAX)).expect("loading");
    let t0 = b.now_us();
    let got = b
        .netdev_receive(std::time::Duration::MAX)
        .expect("netdev_receive");
    assert!(got.is_none());
    assert_eq!(b.now_us(), t0 + 86_400_000_000);
    b.usleep(u64::MAX);
    assert!(b.now_us() > t0);
}
