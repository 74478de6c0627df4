//! Flow control and path MTU against the Linux kernel over TUN (issue #10), each in
//! namespaces of the test's own, every kernel-side command bounded by `timeout`:
//!
//! - a kernel router namespace (the TUN rig's, forwarding on) with a 576-byte hop (a veth
//!   pair) to a second namespace where the kernel client runs: ustack's 1,500-byte DF
//!   segments draw ICMP "fragmentation needed" from the router, ustack lowers its MSS and
//!   the download completes (without path MTU discovery it black-holed);
//! - a kernel writer with SO_RCVBUF 4096 sending to a ustack reader that pauses: ustack
//!   closes its window instead of dropping in-window data, so the kernel probes the zero
//!   window and never has a retransmission timeout (its namespace's `TcpExt
//!   TCPTimeouts`), and ustack counts no TCPRcvQDrop.
//!
//! Without root or `/dev/net/tun` each test skips with a note, unless `USTACK_REQUIRE_ROOT`
//! is set (CI), which makes that a failure.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io;
use std::net::Shutdown;

use sha2::{Digest, Sha256};
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::Interest;
use ustack_testkit::netns::{KERNEL_IP, NetNs, TunRig, USTACK_IP, root_or_skip};

mod kernel;

use kernel::{Source, Ustack, accept_one, builder, drive, hex, idle, python, read_into};

/// The router's address on the small hop, and the client's behind it (TEST-NET-2).
const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// The small hop's MTU.
const HOP_MTU: u32 = 576;

/// A kernel client that reads the stream to its end: prints its SHA-256 and length.
const DOWNLOAD_CLIENT: &str = r#"
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=20)
digest, got = drain(s)
print(digest, got)
"#;

/// `TcpExt` counters of the namespace `ns` (its `/proc/net/netstat`), by name.
fn kernel_tcpext(ns: &NetNs, name: &str) -> u64 {
    let out = ns
        .run(Duration::from_secs(5), &["cat", "/proc/net/netstat"])
        .expect("reading /proc/net/netstat in the namespace");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TcpExt:")).collect();
    let [names, values] = lines[..] else {
        panic!("no TcpExt table: {text}");
    };
    let i = names
        .split_whitespace()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no TcpExt {name}"));
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// ustack's side of a download: accept one connection on `port`, send `n` bytes of the
/// pattern and close; returns the SHA-256 of what it sent and some counters.
fn ustack_source(
    rt: &mut ustack_runtime::runtime::Runtime<ustack_dev::tun::TunQueue>,
    stop: &std::sync::atomic::AtomicBool,
    port: u16,
    n: u64,
) -> io::Result<(String, [u64; 4])> {
    let listener = TcpListener::bind(rt, SocketAddrV4::new(USTACK_IP, port), 4)?;
    rt.register(&listener, 0, Interest::READABLE, Mode::Level)?;
    let mut conn: Option<TcpStream> = None;
    let mut source = Some(Source::new(n, 3));
    let mut mss = 0;
    let digest = drive(rt, stop, |rt| {
        if conn.is_none() {
            let Some(s) = accept_one(rt, &listener)? else {
                return Ok(None);
            };
            conn = Some(s);
        }
        let s = conn.as_ref().expect("accepted");
        if let Ok(info) = rt.stack().tcp_info(s.handle()) {
            mss = info.mss;
        }
        if !source.as_mut().expect("until done").write(rt, s)? {
            return Ok(None);
        }
        s.shutdown(rt, Shutdown::Write)?;
        Ok(Some(source.take().expect("once").digest()))
    })?
    .ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
    idle(rt, stop)?;
    let mib = rt.stack().mib();
    Ok((
        digest,
        [
            mib.get(Counter::IcmpInDestUnreachs),
            mib.get(Counter::TcpExtOutOfWindowIcmps),
            mib.get(Counter::TcpExtTCPTimeouts),
            u64::from(mss),
        ],
    ))
}

/// RFC 1191 path MTU discovery through a real kernel router: the client sits behind a
/// 576-byte hop, and advertises MSS 1460 (its own link is 1,500 bytes), so ustack's first
/// segments are too big for the hop; the router answers each with ICMP "fragmentation
/// needed" (MTU 576), ustack lowers its MSS to 524 (576 - 40 - 12 bytes of timestamp) and
/// resends at once. 4 MiB arrive intact (SHA-256 at both ends).
#[test]
fn download_through_a_576_byte_router_hop() {
    let test = "download_through_a_576_byte_router_hop";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::new(1, None).expect("setting up the TUN rig");
    let router = &rig.ns;
    let client = NetNs::new().expect("the client's namespace");
    let t = Duration::from_secs(5);
    let peer = client.holder_pid().to_string();
    let (vr, vc) = ("vr0", "vc0");
    router
        .run(
            t,
            &[
                "ip", "link", "add", vr, "type", "veth", "peer", "name", vc, "netns", &peer,
            ],
        )
        .expect("the veth pair");
    let hop = HOP_MTU.to_string();
    let router_cidr = format!("{ROUTER_IP}/24");
    let client_cidr = format!("{CLIENT_IP}/24");
    let gw = ROUTER_IP.to_string();
    for argv in [
        &["ip", "addr", "add", &router_cidr, "dev", vr][..],
        &["ip", "link", "set", vr, "mtu", &hop, "up"],
        &["sysctl", "-qw", "net.ipv4.ip_forward=1"],
    ] {
        router.run(t, argv).expect("configuring the router");
    }
    for argv in [
        &["ip", "addr", "add", &client_cidr, "dev", vc][..],
        &["ip", "link", "set", "lo", "up"],
        &["ip", "link", "set", vc, "up"],
        &["ip", "route", "add", "default", "via", &gw],
    ] {
        client.run(t, argv).expect("configuring the client");
    }
    let n: u64 = 4 << 20;
    let port = 9;
    let q = rig.queues.remove(0);
    let app = Ustack::start(builder().gateway(KERNEL_IP), q, move |rt, stop| {
        ustack_source(rt, stop, port, n)
    });
    let out = python(
        &client,
        DOWNLOAD_CLIENT,
        &[USTACK_IP.to_string(), port.to_string()],
    );
    let (sent_digest, [unreach, out_of_window, timeouts, mss]) = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [got_digest, got] = fields[..] else {
        panic!("client printed `{out}`");
    };
    eprintln!(
        "{test}: {got} bytes; ustack got {unreach} ICMP unreachables, MSS {mss}, \
         {timeouts} RTO timeouts, {out_of_window} out-of-window ICMPs"
    );
    assert_eq!(got, n.to_string(), "bytes the client read");
    assert_eq!(
        got_digest, sent_digest,
        "SHA-256: the client read what was sent"
    );
    assert!(unreach >= 1, "the router's ICMP reached ustack");
    assert_eq!(mss, 524, "MSS = 576 - 40 - 12 (timestamps)");
    assert_eq!(out_of_window, 0);
    assert_eq!(timeouts, 0, "recovered by the ICMP, not by a timeout");
}

/// A kernel writer with SO_RCVBUF 4096 (issue #10's reproduction), `n host port`: sends
/// `n` pseudo-random bytes, half-closes, and prints their SHA-256 and the server's answer.
const SMALL_RCVBUF_WRITER: &str = r#"
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.settimeout(30)
s.connect((host, port))
sent = stream(s, n, n)
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    reply += b
print(sent, reply.decode())
"#;

/// The receive window against a real sender: ustack's reader pauses 3 s after the first
/// bytes while a kernel writer sends 4 MiB. ustack closes the window (no in-window data
/// dropped: TCPRcvQDrop 0), the kernel probes the zero window (its probe timer, which
/// never counts as a timeout) and goes on the moment the reader drains: no RTO in the
/// kernel's namespace (TcpExt TCPTimeouts 0).
#[test]
fn a_pausing_reader_makes_the_kernel_probe_not_time_out() {
    let test = "a_pausing_reader_makes_the_kernel_probe_not_time_out";
    if root_or_skip(test).is_none() {
        return;
    }
    let mut rig = TunRig::new(1, None).expect("setting up the TUN rig");
    let n: usize = 4 << 20;
    let port = 9;
    let q = rig.queues.remove(0);
    let app = Ustack::start(builder(), q, move |rt, stop| {
        let listener = TcpListener::bind(rt, SocketAddrV4::new(USTACK_IP, port), 4)?;
        rt.register(&listener, 0, Interest::READABLE, Mode::Level)?;
        let mut conn: Option<(TcpStream, std::time::Instant)> = None;
        let mut hasher = Sha256::new();
        let (mut total, mut paused) = (0u64, false);
        let mut buf = vec![0; 64 * 1024];
        let mut zero_adv = 0;
        let mut reply: Option<String> = None;
        let mut off = 0;
        let digest = drive(rt, stop, |rt| {
            if conn.is_none() {
                let Some(s) = accept_one(rt, &listener)? else {
                    return Ok(None);
                };
                conn = Some((s, std::time::Instant::now()));
            }
            let (s, at) = conn.as_ref().expect("accepted");
            // Read the first bytes, then nothing for 3 s (the buffer fills), then all.
            if total > 0 && at.elapsed() < Duration::from_secs(3) {
                paused = true;
                zero_adv = rt.stack().mib().get(Counter::TcpExtTCPToZeroWindowAdv);
                return Ok(None);
            }
            if reply.is_none() {
                let (k, fin) = read_into(rt, s, &mut buf, &mut hasher)?;
                total += k;
                if !fin {
                    return Ok(None);
                }
                reply = Some(hex(&core::mem::take(&mut hasher).finalize()));
            }
            let digest = reply.clone().expect("set above");
            if !kernel::write_from(rt, s, digest.as_bytes(), &mut off)? {
                return Ok(None);
            }
            s.shutdown(rt, Shutdown::Write)?;
            Ok(Some(digest))
        })?
        .ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
        idle(rt, stop)?;
        let mib = rt.stack().mib();
        Ok((
            digest,
            total,
            paused,
            zero_adv,
            mib.get(Counter::TcpExtTCPRcvQDrop),
        ))
    });
    let timeouts_before = kernel_tcpext(&rig.ns, "TCPTimeouts");
    let out = python(
        &rig.ns,
        SMALL_RCVBUF_WRITER,
        &[n.to_string(), USTACK_IP.to_string(), port.to_string()],
    );
    let kernel_timeouts = kernel_tcpext(&rig.ns, "TCPTimeouts") - timeouts_before;
    let probes = kernel_tcpext(&rig.ns, "TCPWinProbe");
    let (digest, total, paused, zero_adv, rcvq_drop) = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent, answer] = fields[..] else {
        panic!("writer printed `{out}`");
    };
    eprintln!(
        "{test}: {total} bytes; kernel: {kernel_timeouts} RTO timeouts, {probes} window \
         probes; ustack: {zero_adv} zero-window advertisements, {rcvq_drop} TCPRcvQDrop"
    );
    assert!(paused, "the reader paused");
    assert_eq!(total, n as u64);
    assert_eq!(
        (digest.as_str(), answer),
        (sent, sent),
        "SHA-256 at both ends"
    );
    assert!(zero_adv >= 1, "ustack advertised a zero window");
    assert_eq!(rcvq_drop, 0, "no in-window data dropped");
    assert_eq!(kernel_timeouts, 0, "the kernel never timed out");
}
