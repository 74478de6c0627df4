//! The transfers every kernel-facing link carries (`tun.rs`, `packet.rs`, `xdp.rs`), generic
//! over the device: each takes the kernel's side ([`Peer`]: the namespace it runs in and
//! the address family, IPv4 for a bare `&NetNs`), the runtime builder and the device, runs
//! ustack on a thread over it, runs the kernel side with `nsenter`, and asserts what a user
//! would check (answers, byte counts, SHA-256 at both ends).
//!
//! Each run is captured on ustack's side ([`Pcap`]: the device wrapped in a `Capture`;
//! whole frames for ICMP and UDP, the headers of TCP's, the first [`MAX_FRAMES`](super::MAX_FRAMES)
//! frames of a run) and the capture read by tshark afterwards: no malformed packet or
//! expert error, and no more than a handful of retransmissions from either side
//! (`ustack_testkit::tshark::check_capture`). The transfers above 64 MiB each way
//! (1 GiB over tun, 256 MiB over packet) are checked on their first frames only: the
//! start of the upload, its slow start included.

use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};
use ustack_apps::{Protocol, Server};
use ustack_dev::Device;
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream, UdpSocket};
use ustack_runtime::multi::{ShardApp, ShardContext, ShardedBuilder};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{Interest, Runtime, RuntimeBuilder, Sleep};
use ustack_testkit::netns::{PY_ECHO_CLIENT, python_argv};
use ustack_testkit::snmp6;

use super::{
    Captured, Family, HEADERS, KernelServer, LIMIT, Pcap, Peer, Source, Ustack, accept_one, drive,
    hex, idle, python, read_into, would_block, write_from,
};

// ---- ICMP -------------------------------------------------------------------------------

/// The kernel pings ustack three times with 56 and three times with 4000 bytes (fragmented
/// both ways over a 1500-byte MTU); every echo is answered.
pub fn kernel_pings_ustack<'a, D: Device + Sleep + Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
) {
    let Peer { ns, family } = peer.into();
    let (device, pcap) = Pcap::wrap(test, device, 0);
    let builder = family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        idle(rt, stop)?;
        let mib = rt.stack().mib();
        Ok(match family {
            Family::V4 => (
                mib.get(Counter::IcmpInEchos),
                mib.get(Counter::IcmpOutEchoReps),
                mib.get(Counter::IpReasmOKs),
                mib.get(Counter::IpFragCreates),
            ),
            Family::V6 => (
                mib.get(Counter::Icmp6InEchos),
                mib.get(Counter::Icmp6OutEchoReplies),
                mib.get(Counter::Ip6ReasmOKs),
                mib.get(Counter::Ip6FragCreates),
            ),
        })
    });
    let ip = family.ustack().to_string();
    let v = if family == Family::V6 { "-6" } else { "-4" };
    for size in ["56", "4000"] {
        let out = ns
            .run(
                LIMIT,
                &[
                    "ping", v, "-c", "3", "-i", "0.2", "-W", "2", "-s", size, &ip,
                ],
            )
            .expect("ping answered");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("3 packets transmitted, 3 received"),
            "ping -s {size}: {text}"
        );
    }
    let (in_echos, out_reps, reasm, frags) = app.finish();
    assert_eq!((in_echos, out_reps), (6, 6));
    // 4000 bytes of ICMP over a 1500-byte MTU: three fragments each way, per echo (IPv6:
    // 1448 bytes of the 4008 in each of the first two).
    assert_eq!(reasm, 3, "echo requests reassembled");
    assert_eq!(frags, 9, "fragments of the echo replies");
    pcap.of(family).check();
}

/// ustack pings the kernel over IPv6 (`Stack::ping6`: the kernel's address resolved by
/// neighbour discovery on an Ethernet link) twice with 56 bytes and three times with 4000
/// (ustack fragments the requests, the kernel the replies, each reassembling the other's);
/// every echo comes back whole with the kernel's hop limit, and both sides count the
/// fragments.
pub fn ustack_pings_kernel6<D: Device + Sleep + Send + 'static>(
    test: &str,
    peer: Peer<'_>,
    builder: RuntimeBuilder,
    device: D,
) {
    let IpAddr::V6(kernel) = peer.family.kernel() else {
        panic!("{test}: an IPv6 peer");
    };
    let (device, pcap) = Pcap::wrap(test, device, 0);
    let builder = peer.family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        let mut answered = Vec::new();
        for (seq, size) in [(1u16, 56usize), (2, 56), (3, 4000), (4, 4000), (5, 4000)] {
            let data = ustack_testkit::pattern(size, u64::from(seq));
            let now = rt.now();
            rt.stack_mut()
                .ping6(now, kernel, 0x77, seq, &data)
                .map_err(|e| io::Error::other(format!("ping6 {seq}: {e:?}")))?;
            // Each echo within 5 s (neighbour discovery and reassembly included).
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let r = loop {
                rt.run_once(Some(Duration::from_millis(10)))?;
                if let Some(r) = rt.stack_mut().recv_echo_reply6() {
                    break r;
                }
                if std::time::Instant::now() >= deadline || stop.load(Ordering::Relaxed) {
                    return Ok(Err(format!("no answer to echo {seq} in 5 s")));
                }
            };
            // The kernel's default hop limit, 64.
            let ok = (r.src, r.ident, r.seq_no, r.hop_limit) == (kernel, 0x77, seq, 64)
                && r.data == data;
            answered.push((seq, ok));
        }
        let m = rt.stack().mib();
        let counts = [
            m.get(Counter::Ip6FragOKs),
            m.get(Counter::Ip6FragCreates),
            m.get(Counter::Ip6ReasmOKs),
            m.get(Counter::Icmp6InEchoReplies),
        ];
        Ok(Ok((answered, counts)))
    });
    let kernel_counters = || {
        let argv = ["cat", "/proc/net/snmp6", "/proc/net/snmp"];
        let out = peer.ns.run(LIMIT, &argv).expect("the kernel's counters");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (answered, counts) = app
        .join()
        .unwrap_or_else(|e| panic!("{test}: {e}; the kernel's counters: {}", kernel_counters()));
    let all: Vec<(u16, bool)> = (1..=5).map(|s| (s, true)).collect();
    assert_eq!(answered, all, "each echo came back whole, from the kernel");
    // Three large requests of three fragments each; three large replies reassembled.
    assert_eq!(
        counts,
        [3, 9, 3, 5],
        "FragOKs, FragCreates, ReasmOKs, InEchoReplies"
    );
    let kernel = kernel_counters();
    assert_eq!(snmp6(&kernel, "Ip6ReasmOKs"), 3, "{kernel}");
    assert_eq!(snmp6(&kernel, "Icmp6InEchos"), 5, "{kernel}");
    pcap.of(peer.family).check();
}

// ---- TCP: ustack as the server ------------------------------------------------------------

/// The kernel client of [`ustack_sink`]: sends `n` bytes, half-closes, prints the
/// SHA-256 of what it sent and the server's answer.
const SINK_CLIENT: &str = r#"
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
t = time.monotonic()
s = socket.create_connection((host, port), timeout=20)
sent = stream(s, n, n)
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    reply += b
t = time.monotonic() - t
print(sent, reply.decode(), f"{t:.6f}")
"#;

/// ustack's side: accept one connection on `port`, read to its end hashing, answer with
/// the SHA-256 in hex and close. Returns the bytes read and the digest.
fn ustack_sink<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    at: SocketAddr,
) -> io::Result<(u64, String)> {
    let listener = TcpListener::bind(rt, at, 16)?;
    rt.register(&listener, 0, Interest::READABLE, Mode::Level)?;
    let mut conn: Option<TcpStream> = None;
    let mut hasher = Sha256::new();
    let mut total = 0;
    let mut reply: Option<String> = None;
    let mut off = 0;
    let mut buf = vec![0; 64 * 1024];
    let done = drive(rt, stop, |rt| {
        if conn.is_none() {
            let Some(s) = accept_one(rt, &listener)? else {
                return Ok(None);
            };
            conn = Some(s);
        }
        let s = conn.as_ref().expect("accepted");
        if reply.is_none() {
            let (n, fin) = read_into(rt, s, &mut buf, &mut hasher)?;
            total += n;
            if !fin {
                return Ok(None);
            }
            reply = Some(hex(&core::mem::take(&mut hasher).finalize()));
        }
        let digest = reply.as_ref().expect("set above");
        if !write_from(rt, s, digest.as_bytes(), &mut off)? {
            return Ok(None);
        }
        s.shutdown(rt, Shutdown::Write)?;
        Ok(Some((total, digest.clone())))
    })?;
    let done = done.ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
    // Stay up for the client's last ACKs and its FIN.
    idle(rt, stop)?;
    Ok(done)
}

/// A kernel client sends `n` bytes to ustack, which answers with the SHA-256 of what it
/// read; both digests must be the sender's. Prints the rate; returns what `stats` reads
/// off the device at the end (its counters, say).
pub fn kernel_sends_to_ustack<'a, D: Device + Sleep + Send + 'static, S: Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
    n: usize,
    stats: fn(&D) -> S,
) -> S {
    let peer = peer.into();
    let (device, pcap) = Pcap::wrap(test, device, HEADERS);
    let s = sink_from_kernel(test, peer, builder, device, n, move |d: &Captured<D>| {
        stats(d.device())
    });
    pcap.of(peer.family).check();
    s
}

/// [`kernel_sends_to_ustack`] without a capture: the device as a runtime has it alone
/// (a TUN queue with offloads then leaves the kernel's partial checksums unfinished,
/// which a capture would show as bad). `stats` runs on ustack's thread while the device
/// is still open.
pub fn kernel_sends_to_ustack_uncaptured<'a, D: Device + Sleep + Send + 'static, S>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
    n: usize,
    stats: impl FnOnce(&D) -> S + Send + 'static,
) -> S
where
    S: Send + 'static,
{
    sink_from_kernel(test, peer.into(), builder, device, n, stats)
}

/// The run of both: ustack's sink over `device`, the kernel client, the digests checked.
fn sink_from_kernel<D: Device + Sleep + Send + 'static, S: Send + 'static>(
    test: &str,
    peer: Peer<'_>,
    builder: RuntimeBuilder,
    device: D,
    n: usize,
    stats: impl FnOnce(&D) -> S + Send + 'static,
) -> S {
    let at = peer.ustack_at(9);
    let builder = peer.family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        let done = ustack_sink(rt, stop, at)?;
        Ok((done, stats(rt.device())))
    });
    let out = python(
        peer.ns,
        SINK_CLIENT,
        &[n.to_string(), at.ip().to_string(), at.port().to_string()],
    );
    let ((bytes, ustack_digest), device_stats) = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent_digest, answer, secs] = fields[..] else {
        panic!("client printed `{out}`");
    };
    assert_eq!(bytes, n as u64, "bytes ustack read");
    assert_eq!(
        ustack_digest, sent_digest,
        "SHA-256: ustack read what was sent"
    );
    assert_eq!(answer, sent_digest, "the client got ustack's digest back");
    let secs: f64 = secs.parse().expect("seconds");
    eprintln!(
        "{test}: {n} bytes kernel -> ustack in {secs:.3} s ({:.1} MB/s)",
        n as f64 / secs / 1e6
    );
    device_stats
}

/// A kernel client sends `n` bytes through ustack's echo server and checks the echo.
/// Returns how many frames the server handed to the link by the qdisc bypass
/// (`ShardStats::tx_direct`: a write that queued one frame alone).
pub fn kernel_client_through_echo<'a, D: Device + Sleep + Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
    n: usize,
) -> u64 {
    let peer = peer.into();
    let at = peer.ustack_at(7);
    let (device, pcap) = Pcap::wrap(test, device, HEADERS);
    let builder = peer.family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        let mut server = Server::bind(rt, Protocol::Echo, at, None)?;
        while !stop.load(Ordering::Relaxed) {
            server.step(rt, Some(Duration::from_millis(10)))?;
        }
        Ok((*server.stats(), rt.shard_stats().tx_direct))
    });
    let out = python(
        peer.ns,
        PY_ECHO_CLIENT,
        &[n.to_string(), at.ip().to_string(), "7".to_owned()],
    );
    let (stats, direct) = app.finish();
    let fields: Vec<&str> = out.split_whitespace().collect();
    let [sent, echoed, got] = fields[..] else {
        panic!("client printed `{out}`");
    };
    assert_eq!(got, n.to_string(), "bytes echoed back");
    assert_eq!(echoed, sent, "SHA-256 of the echo");
    assert_eq!((stats.accepted, stats.bytes_in), (1, n as u64));
    assert_eq!(stats.errors, 0);
    pcap.of(peer.family).check();
    direct
}

// ---- TCP: ustack as the client ------------------------------------------------------------

/// ustack connects to a kernel bulk server ([`KernelServer`]), sends `up` bytes and
/// half-closes; the server reads them to the end, sends `down` bytes and closes. SHA-256
/// compared at both ends, both ways, streamed (neither side holds the bytes); prints the
/// rate of each direction (the kernel starts sending only once it has read everything, so
/// ustack's first byte read ends the upload). Returns what `stats` reads off the device at
/// the end (its counters, say).
pub fn ustack_client_bulk_both_ways<'a, D: Device + Sleep + Send + 'static, S: Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
    up: u64,
    down: u64,
    stats: fn(&D) -> S,
) -> S {
    let peer = peer.into();
    let to = peer.kernel_at(5001);
    let server = KernelServer::start(peer, down as usize, to.port(), None);
    let (device, pcap) = Pcap::wrap(test, device, HEADERS);
    let builder = peer.family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        let start = std::time::Instant::now();
        let s = TcpStream::connect(rt, to)?;
        rt.register(&s, 1, Interest::READABLE | Interest::WRITABLE, Mode::Edge)?;
        let mut source = Source::new(up, 5);
        let mut shut = false;
        let mut hasher = Sha256::new();
        let (mut got, mut first) = (0, None);
        let mut buf = vec![0; 64 * 1024];
        let done = drive(rt, stop, |rt| {
            if !shut && source.write(rt, &s)? {
                s.shutdown(rt, Shutdown::Write)?;
                shut = true;
            }
            let (n, fin) = read_into(rt, &s, &mut buf, &mut hasher)?;
            got += n;
            if got > 0 && first.is_none() {
                first = Some(start.elapsed());
            }
            Ok(fin.then(|| (got, hex(&core::mem::take(&mut hasher).finalize()))))
        })?;
        let (got, digest) =
            done.ok_or_else(|| io::Error::other("stopped before the transfer ended"))?;
        let (all, first) = (start.elapsed(), first.unwrap_or_default());
        s.close(rt)?;
        let stats = stats(rt.device().device());
        Ok((got, digest, source.digest(), first, all - first, stats))
    });
    // The kernel server ends once it has sent everything and closed.
    let kernel = server.finish();
    // ustack's side ends by itself once it has read the kernel's FIN.
    let (got, got_digest, sent_digest, up_time, down_time, stats) = app.join();
    assert_eq!(kernel.read, up, "bytes the kernel read");
    assert_eq!(
        kernel.read_digest, sent_digest,
        "SHA-256: the kernel read what ustack sent"
    );
    assert_eq!(got, down, "bytes ustack read");
    assert_eq!(
        got_digest, kernel.sent_digest,
        "SHA-256: ustack read what the kernel sent"
    );
    let rate = |n: u64, t: Duration| n as f64 / t.as_secs_f64() / 1e6;
    eprintln!(
        "{test}: {up} bytes ustack -> kernel in {:.3} s ({:.1} MB/s), {down} bytes kernel -> \
         ustack in {:.3} s ({:.1} MB/s)",
        up_time.as_secs_f64(),
        rate(up, up_time),
        down_time.as_secs_f64(),
        rate(down, down_time)
    );
    pcap.of(peer.family).check();
    stats
}

// ---- UDP ----------------------------------------------------------------------------------

/// The kernel client: datagrams of many sizes (the largest fragmented both ways), each
/// echo compared byte for byte and by source; prints `ok <count>`.
const UDP_CLIENT: &str = r#"
host, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
sizes = [1, 2, 64, 100, 512, 1000, 1472, 1473, 3000, 8000] + list(range(1400, 1500, 7))
for i, n in enumerate(sizes):
    d = bytes((i * 31 + j) % 251 for j in range(n))
    s.sendto(d, (host, port))
    r, a = s.recvfrom(65536)
    if r != d or a[:2] != (host, port):
        sys.exit(f"datagram {i} ({n} bytes): got {len(r)} bytes from {a}")
print("ok", len(sizes))
"#;

/// A kernel UDP client sends 25 datagrams (1 to 8000 bytes) to ustack's echo socket and
/// checks each echo.
pub fn kernel_udp_client_through_echo<'a, D: Device + Sleep + Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    device: D,
) {
    let peer = peer.into();
    let at = peer.ustack_at(7);
    let (device, pcap) = Pcap::wrap(test, device, 0);
    let builder = peer.family.builder(builder);
    let app = Ustack::start(builder, device, move |rt, stop| {
        let sock = UdpSocket::bind(rt, at)?;
        rt.register(&sock, 1, Interest::READABLE, Mode::Level)?;
        let mut buf = vec![0; 65536];
        let mut echoed = 0u64;
        drive(rt, stop, |rt| {
            loop {
                match sock.recv_from_addr(rt, &mut buf) {
                    Ok((n, from)) => {
                        sock.send_to(rt, &buf[..n], from)?;
                        echoed += 1;
                    }
                    Err(e) if would_block(&e) => return Ok(None::<()>),
                    Err(e) => return Err(e),
                }
            }
        })?;
        Ok(echoed)
    });
    let out = python(peer.ns, UDP_CLIENT, &[at.ip().to_string(), "7".to_owned()]);
    let echoed = app.finish();
    assert_eq!(out.trim(), "ok 25");
    assert_eq!(echoed, 25);
    pcap.of(peer.family).check();
}

// ---- shards: one device queue each --------------------------------------------------------

/// Kernel clients, arguments `conns n host port`: `conns` connections at once, each sends
/// `n` bytes and half-closes, then reads to the end; prints `ok <conns>`.
const MANY_CLIENTS: &str = r#"
conns, n, host, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
socks = [socket.create_connection((host, port), timeout=20) for _ in range(conns)]
def one(s, i):
    s.sendall(random.Random(i).randbytes(n))
    s.shutdown(socket.SHUT_WR)
    drain(s)
ts = [threading.Thread(target=one, args=(s, i)) for i, s in enumerate(socks)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("ok", conns)
"#;

/// One shard's sink: accepts on its listener, reads every connection to its end, closes.
#[derive(Default)]
struct ShardSink {
    conns: Vec<TcpStream>,
    accepted: u64,
    bytes: u64,
    buf: Vec<u8>,
}

impl<D: Device + Sleep> ShardApp<D> for ShardSink {
    fn poll(&mut self, ctx: &mut ShardContext<'_, D>) -> io::Result<()> {
        while let Ok((s, _)) = ctx.listeners()[0].accept(ctx.rt) {
            self.accepted += 1;
            self.conns.push(s);
        }
        self.buf.resize(64 * 1024, 0);
        let mut open = Vec::new();
        for s in self.conns.drain(..) {
            let mut eof = false;
            loop {
                match s.read(ctx.rt, &mut self.buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(k) => self.bytes += k as u64,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            if eof {
                s.close(ctx.rt)?;
            } else {
                open.push(s);
            }
        }
        self.conns = open;
        Ok(())
    }
}

/// Two shards, one device queue each (the kernel picks the queue of each flow), serve 16
/// kernel connections of 256 KiB: every byte counted, both shards used.
pub fn two_shards_serve_kernel_clients<'a, D: Device + Sleep + Send + 'static>(
    test: &str,
    peer: impl Into<Peer<'a>>,
    builder: RuntimeBuilder,
    queues: Vec<D>,
) {
    let peer = peer.into();
    let at = peer.ustack_at(9);
    let builder = peer.family.builder(builder);
    let (conns, n) = (16u64, 256 * 1024u64);
    // A capture per queue: each flow keeps to one queue both ways, so each file holds
    // whole flows.
    let (queues, pcaps): (Vec<_>, Vec<_>) = queues
        .into_iter()
        .enumerate()
        .map(|(i, q)| Pcap::wrap(&format!("{test}-queue{i}"), q, HEADERS))
        .unzip();
    let rt = ShardedBuilder::new(builder, Rss::new(RssKey::MICROSOFT, 2))
        .listen(at, 128)
        .start(queues, |_| ShardSink::default())
        .expect("two shards");
    let argv = python_argv(
        MANY_CLIENTS,
        &[
            conns.to_string(),
            n.to_string(),
            at.ip().to_string(),
            "9".to_owned(),
        ],
    );
    let out = peer.ns.run(LIMIT, &argv).expect("the kernel clients");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 16");
    let shards: Vec<(u64, u64)> = rt
        .stop()
        .into_iter()
        .map(|r| r.map(|s| (s.accepted, s.bytes)).expect("a shard failed"))
        .collect();
    eprintln!("{test}: (accepted, bytes) per shard {shards:?}");
    let accepted: u64 = shards.iter().map(|s| s.0).sum();
    let bytes: u64 = shards.iter().map(|s| s.1).sum();
    assert_eq!((accepted, bytes), (conns, conns * n));
    // The kernel spreads flows over the queues (by flow hash): with 16 flows, both shards
    // get some (all on one would be a 1 in 32,768 chance).
    assert!(shards.iter().all(|s| s.0 > 0), "{shards:?}");
    for pcap in pcaps {
        pcap.of(peer.family).check();
    }
}
