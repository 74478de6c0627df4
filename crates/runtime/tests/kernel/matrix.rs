//! The interop matrix: the Linux kernel as the peer over a link (TUN, packet, xdp), bulk
//! transfers both ways with ustack as the server and as the client, across the kernel's
//! per-namespace TCP sysctls (SACK, timestamps, window scaling on/off; congestion control
//! reno/cubic/bbr), then the same under faults from the relay (`ustack_dev::fault::Faulty`
//! on ustack's side of the link's queue: loss 1% and 5%, duplication, reordering with delay
//! and jitter). `matrix.rs` runs it over each link.
//!
//! A [`Link`] opens a fresh namespace with the link in it for each cell. A cell:
//! 1. sets the kernel's sysctls in the namespace (written to `/proc/sys`, read back), and
//!    its congestion control on each of its sockets (see [`Sysctls::apply`]);
//! 2. runs ustack's runtime over `Capture<Faulty<queue>>`, so that the capture is what
//!    ustack sent (before the faults) and received (after them);
//! 3. runs two transfers at once: a kernel client sends [`CELL_BYTES`] through ustack's
//!    echo server and compares the SHA-256 of what came back with what it sent; ustack's
//!    client sends [`CELL_BYTES`] to a kernel server, which then sends as many back; each
//!    end hashes what it read, and the hashes are compared;
//! 4. checks each transfer finished within [`CELL_LIMIT`], that under loss both ends
//!    retransmitted (ustack's `Tcp RetransSegs`, the namespace's from `/proc/net/snmp`),
//!    and reads the capture with tshark: no malformed packet or expert error, and no
//!    retransmission storm (each end's retransmissions bounded by what the relay did; a
//!    handful at most without faults).
//!
//! Needs root (skips otherwise, unless `USTACK_REQUIRE_ROOT`); tshark's check needs tshark
//! (skipped with a note, unless `USTACK_REQUIRE_TSHARK`). `bbr` cells run when the kernel
//! offers bbr (`tcp_available_congestion_control`, after `modprobe tcp_bbr`); otherwise
//! they are skipped with a note, or fail under `USTACK_REQUIRE_ROOT`. A matrix test that
//! ran none of its cells fails. On an Ethernet link (packet, xdp) the relay's faults hit
//! ARP too (neighbour discovery over IPv6): a lost request or reply costs a retry. The
//! IPv6 links ([`TUN6`], [`PACKET6`], [`XDP6`]) run the same cells between `2001:db8:7::2`
//! and `2001:db8:7::1`.

use core::net::SocketAddr;
use core::time::Duration;
use std::fs::File;
use std::io::{self, BufWriter};
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};
use ustack_apps::{Protocol, Server, ServerStats};
use ustack_dev::Device;
use ustack_dev::capture::Capture;
use ustack_dev::fault::{FaultConfig, FaultStats, Faulty};
use ustack_dev::packet::PacketQueue;
use ustack_dev::tun::TunQueue;
use ustack_dev::xdp::XdpQueue;
use ustack_obs::Counter;
use ustack_runtime::Mode;
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Interest, Runtime, RuntimeBuilder, Sleep};
use ustack_stack::EthernetAddress;
use ustack_testkit::netns::{
    NetNs, PY_CC_ENV, PY_ECHO_CLIENT, PacketRig, TUN_NAME, TunRig, VETH_KERNEL, XdpRig,
    kernel_cc_or_skip, python_argv, root_or_skip, veth_or_skip,
};
use ustack_testkit::pattern;
use ustack_testkit::tshark::{CLEAN_RETRANSMISSIONS, check_capture};

use super::{
    Family, KernelServer, LIMIT, Peer, Ustack, builder, hex, read_into, sha256_hex, write_from,
};

/// Bytes each transfer of a cell moves, each way.
const CELL_BYTES: usize = 1 << 20;
/// The bound on one cell, both transfers.
const CELL_LIMIT: Duration = Duration::from_secs(20);

/// ustack's device in a cell: the link's queue behind the relay, captured on the stack's
/// side of it.
type Dev<D> = Capture<Faulty<D>, BufWriter<File>>;

/// A link the matrix runs over.
pub struct Link<D> {
    /// Its name: the prefix of the test names in messages.
    pub name: &'static str,
    /// The address family the cells speak over it.
    pub family: Family,
    /// Whether the link can be used here (root, tools): `None` after printing why not.
    pub usable: fn(&str) -> Option<()>,
    /// A fresh namespace with the link in it, the kernel's end configured for
    /// [`family`](Self::family), ustack's queue on it and the runtime builder for that
    /// queue (with ustack's address of that family).
    pub open: fn() -> io::Result<(NetNs, D, RuntimeBuilder)>,
}

/// The TUN link: `tun0` in the namespace, one queue.
pub const TUN: Link<TunQueue> = Link {
    name: "tun",
    family: Family::V4,
    usable: root_or_skip,
    open: || {
        let TunRig { mut queues, ns, .. } = TunRig::new(1, None)?;
        Ok((ns, queues.remove(0), builder()))
    },
};

/// The packet link: a veth pair in the namespace, one `AF_PACKET` socket on ustack's end.
pub const PACKET: Link<PacketQueue> = Link {
    name: "packet",
    family: Family::V4,
    usable: veth_or_skip,
    open: || {
        let PacketRig {
            mut queues,
            mac,
            ns,
            ..
        } = PacketRig::new(1)?;
        Ok((ns, queues.remove(0), builder().mac(EthernetAddress(mac))))
    },
};

/// The xdp link: the same veth pair, an `AF_XDP` socket on ustack's end.
pub const XDP: Link<XdpQueue> = Link {
    name: "xdp",
    family: Family::V4,
    usable: veth_or_skip,
    open: || {
        let XdpRig { queue, mac, ns } = XdpRig::new()?;
        Ok((ns, queue, builder().mac(EthernetAddress(mac))))
    },
};

/// The runtime builder of a cell over IPv6: ustack's IPv6 address, which it takes without
/// duplicate address detection (a second of each cell; the link tests run it).
fn builder6(b: RuntimeBuilder) -> RuntimeBuilder {
    Family::V6
        .builder(b)
        .sysctl("net.ipv6.conf.default.accept_dad", 0)
}

/// [`TUN`] over IPv6.
pub const TUN6: Link<TunQueue> = Link {
    name: "tun6",
    family: Family::V6,
    usable: root_or_skip,
    open: || {
        let (ns, q, b) = (TUN.open)()?;
        Family::V6.configure(&ns, TUN_NAME)?;
        Ok((ns, q, builder6(b)))
    },
};

/// [`PACKET`] over IPv6 (neighbour discovery over the veth pair).
pub const PACKET6: Link<PacketQueue> = Link {
    name: "packet6",
    family: Family::V6,
    usable: veth_or_skip,
    open: || {
        let (ns, q, b) = (PACKET.open)()?;
        Family::V6.configure(&ns, VETH_KERNEL)?;
        Ok((ns, q, builder6(b)))
    },
};

/// [`XDP`] over IPv6 (neighbour discovery over the veth pair).
pub const XDP6: Link<XdpQueue> = Link {
    name: "xdp6",
    family: Family::V6,
    usable: veth_or_skip,
    open: || {
        let (ns, q, b) = (XDP.open)()?;
        Family::V6.configure(&ns, VETH_KERNEL)?;
        Ok((ns, q, builder6(b)))
    },
};

/// The kernel's TCP sysctls for a cell (its namespace's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sysctls {
    sack: bool,
    timestamps: bool,
    window_scaling: bool,
    cc: &'static str,
}

/// Linux's defaults: all on, CUBIC.
pub const DEFAULTS: Sysctls = Sysctls {
    sack: true,
    timestamps: true,
    window_scaling: true,
    cc: "cubic",
};

impl Sysctls {
    fn name(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "sack={} ts={} ws={} cc={}",
            on(self.sack),
            on(self.timestamps),
            on(self.window_scaling),
            self.cc
        )
    }

    /// Writes SACK, timestamps and window scaling to the namespace's `/proc/sys/net/ipv4`
    /// and reads them back. The congestion control is set on each kernel socket instead
    /// (`TCP_CONGESTION`, through [`PY_CC_ENV`]): a namespace other than the initial one
    /// may only default to an algorithm in `tcp_allowed_congestion_control` (here reno
    /// and bbr; cubic is refused), and that list is global to the machine.
    fn apply(&self, ns: &NetNs) -> io::Result<()> {
        let b = |v: bool| u8::from(v).to_string();
        let values = [
            ("tcp_sack", b(self.sack)),
            ("tcp_timestamps", b(self.timestamps)),
            ("tcp_window_scaling", b(self.window_scaling)),
        ];
        let mut script = String::new();
        for (name, value) in &values {
            script += &format!("echo {value} > /proc/sys/net/ipv4/{name} && ");
        }
        script += "cat";
        for (name, _) in &values {
            script += &format!(" /proc/sys/net/ipv4/{name}");
        }
        let out = ns.run(Duration::from_secs(5), &["sh", "-c", &script])?;
        let read: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let want: Vec<String> = values.iter().map(|(_, v)| v.clone()).collect();
        if read != want {
            return Err(io::Error::other(format!(
                "sysctls read back as {read:?}, wanted {want:?}"
            )));
        }
        Ok(())
    }
}

/// One cell of the matrix.
#[derive(Debug, Clone)]
pub struct Cell {
    sysctls: Sysctls,
    /// The relay's conditions, the same both ways (each way its own random stream).
    faults: FaultConfig,
    label: &'static str,
}

/// A fault condition of the matrix: its label and the relay's configuration (the same
/// both ways).
pub type Fault = (&'static str, FaultConfig);

/// 1% of the frames lost each way.
pub fn loss_1pct() -> Fault {
    (
        "loss 1%",
        FaultConfig {
            loss: 0.01,
            ..FaultConfig::default()
        },
    )
}

/// 5% of the frames lost each way.
pub fn loss_5pct() -> Fault {
    (
        "loss 5%",
        FaultConfig {
            loss: 0.05,
            ..FaultConfig::default()
        },
    )
}

/// 2% of the frames duplicated each way.
pub fn duplication() -> Fault {
    (
        "duplication 2%",
        FaultConfig {
            duplicate: 0.02,
            ..FaultConfig::default()
        },
    )
}

/// Reordering: 1 ms of delay with 0.5 ms of jitter (which alone reorders), and 2% of the
/// frames held 3 ms more.
pub fn reordering() -> Fault {
    (
        "delay 1 ms, jitter 0.5 ms, reorder 2% by 3 ms",
        FaultConfig {
            delay: Duration::from_millis(1),
            jitter: Duration::from_micros(500),
            reorder: 0.02,
            reorder_delay: Duration::from_millis(3),
            ..FaultConfig::default()
        },
    )
}

/// The namespace's kernel counters `Tcp RetransSegs` (`/proc/net/snmp`) and `TcpExt
/// TCPTimeouts` (`/proc/net/netstat`), read inside it with one command.
fn kernel_retrans(ns: &NetNs) -> (u64, u64) {
    let out = ns
        .run(
            Duration::from_secs(5),
            &["cat", "/proc/net/snmp", "/proc/net/netstat"],
        )
        .expect("reading the namespace's /proc/net/snmp and netstat");
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |table: &str, name: &str| -> u64 {
        let mut rows = text.lines().filter(|l| l.starts_with(table));
        let (names, values) = (rows.next().expect("names"), rows.next().expect("values"));
        let i = names
            .split_whitespace()
            .position(|n| n == name)
            .unwrap_or_else(|| panic!("{table} {name}"));
        values
            .split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a {table} {name} value"))
    };
    (get("Tcp:", "RetransSegs"), get("TcpExt:", "TCPTimeouts"))
}

/// What ustack's side of a cell reports.
#[derive(Debug)]
struct UstackOut {
    /// The client's transfer: bytes read from the kernel server, their SHA-256.
    client: (u64, String),
    /// From the start of ustack's side to the kernel server's FIN.
    client_time: Duration,
    server: ServerStats,
    retrans: u64,
    /// ustack's retransmission timeouts (`TcpExt TCPTimeouts`).
    timeouts: u64,
    egress: FaultStats,
    ingress: FaultStats,
    captured: u64,
}

/// ustack's side: the echo server on `echo` (port 7) and, at once, a client of the kernel
/// server on `server_at` that sends `data`, half-closes and reads to the end. Runs until told to stop
/// and the client is done.
fn ustack_side<D: Device + Sleep>(
    rt: &mut Runtime<Dev<D>>,
    stop: &std::sync::atomic::AtomicBool,
    (echo, server_at): (SocketAddr, SocketAddr),
    data: Vec<u8>,
) -> io::Result<UstackOut> {
    const CLIENT: u64 = u64::MAX - 1;
    let mut server = Server::bind(rt, Protocol::Echo, echo, None)?;
    let s = TcpStream::connect(rt, server_at)?;
    rt.register(
        &s,
        CLIENT,
        Interest::READABLE | Interest::WRITABLE,
        Mode::Edge,
    )?;
    let (mut off, mut shut) = (0, false);
    let mut hasher = Sha256::new();
    let mut got = 0;
    let mut buf = vec![0; 64 * 1024];
    let mut client = None;
    let started = std::time::Instant::now();
    let deadline = started + LIMIT;
    let mut client_time = Duration::ZERO;
    while !(client.is_some() && stop.load(Ordering::Relaxed)) {
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("ustack side timed out: client read {got} bytes, wrote {off}"),
            ));
        }
        server.step(rt, Some(Duration::from_millis(5)))?;
        if client.is_none() {
            if !shut && write_from(rt, &s, &data, &mut off)? {
                s.shutdown(rt, Shutdown::Write)?;
                shut = true;
            }
            let (n, fin) = read_into(rt, &s, &mut buf, &mut hasher)?;
            got += n;
            if fin {
                client = Some((got, hex(&core::mem::take(&mut hasher).finalize())));
                client_time = started.elapsed();
            }
        }
    }
    s.close(rt)?;
    // A few more rounds for the last ACKs and FINs.
    for _ in 0..10 {
        server.step(rt, Some(Duration::from_millis(2)))?;
    }
    rt.device_mut().flush()?;
    let relay = rt.device().device();
    Ok(UstackOut {
        client: client.expect("loop ends with the client done"),
        client_time,
        server: *server.stats(),
        retrans: rt.stack().mib().get(Counter::TcpRetransSegs),
        timeouts: rt.stack().mib().get(Counter::TcpExtTCPTimeouts),
        egress: relay.egress().clone(),
        ingress: relay.ingress().clone(),
        captured: rt.device().packets_written(),
    })
}

/// Runs one cell in a namespace of its own with `link` in it (gone after the cell),
/// capturing to a file in `dir`. Panics on any mismatch.
fn run_cell<D: Device + Sleep + Send + 'static>(
    test: &str,
    link: &Link<D>,
    dir: &Path,
    index: usize,
    cell: &Cell,
) {
    let what = format!(
        "{test} cell {index} [{}; {}]",
        cell.sysctls.name(),
        cell.label
    );
    let (ns, queue, builder) = (link.open)().expect("a namespace with the link");
    let ns = &ns;
    cell.sysctls
        .apply(ns)
        .expect("setting the kernel's sysctls");

    let peer = Peer {
        ns,
        family: link.family,
    };
    let addrs = (peer.ustack_at(7), peer.kernel_at(5001));
    let n = CELL_BYTES;
    let server = KernelServer::start(peer, n, 5001, Some(cell.sysctls.cc));
    let pcap = dir.join(format!("cell{index}.pcap"));
    let file = BufWriter::new(File::create(&pcap).expect("creating the capture"));
    let seed = 1000 + index as u64;
    let device = Capture::new(Faulty::symmetric(queue, seed, cell.faults.clone()), file)
        .expect("the capture's header");
    let up = pattern(n, index as u64);
    let up_digest = sha256_hex(&up);
    let started = std::time::Instant::now();
    let app = Ustack::start(builder, device, move |rt, stop| {
        ustack_side(rt, stop, addrs, up)
    });

    // The kernel client through ustack's echo server, while ustack's client runs.
    let echo = ns
        .command(
            LIMIT,
            &python_argv(
                PY_ECHO_CLIENT,
                &[n.to_string(), addrs.0.ip().to_string(), "7".to_owned()],
            ),
        )
        .env(PY_CC_ENV, cell.sysctls.cc)
        .output()
        .expect("running the kernel echo client");
    let echo_time = started.elapsed();
    assert!(
        echo.status.success(),
        "{what}: the kernel echo client: {}: {}",
        echo.status,
        String::from_utf8_lossy(&echo.stderr)
    );
    let echo = String::from_utf8_lossy(&echo.stdout).into_owned();
    let kernel = server.finish();
    let out = app.finish();
    let elapsed = started.elapsed();
    // The namespace is the cell's own: all its retransmissions are the cell's.
    let (retrans_kernel, timeouts_kernel) = kernel_retrans(ns);

    let fields: Vec<&str> = echo.split_whitespace().collect();
    let [sent, echoed, got] = fields[..] else {
        panic!("{what}: echo client printed `{echo}`");
    };
    assert_eq!(got, n.to_string(), "{what}: bytes echoed back");
    assert_eq!(echoed, sent, "{what}: SHA-256 of the echo");
    assert_eq!(
        out.server.bytes_in, n as u64,
        "{what}: bytes the echo server read"
    );
    assert_eq!(out.server.errors, 0, "{what}: echo server errors");
    assert_eq!(
        kernel.read, n as u64,
        "{what}: bytes the kernel server read"
    );
    assert_eq!(
        kernel.read_digest, up_digest,
        "{what}: the kernel read what ustack sent"
    );
    assert_eq!(out.client.0, n as u64, "{what}: bytes ustack's client read");
    assert_eq!(
        out.client.1, kernel.sent_digest,
        "{what}: ustack read what the kernel sent"
    );
    assert!(elapsed < CELL_LIMIT, "{what}: took {elapsed:?}");

    let (e, i) = (&out.egress, &out.ingress);
    let f = &cell.faults;
    if f.loss > 0.0 {
        assert!(
            e.lost > 0 && i.lost > 0,
            "{what}: the relay lost nothing: {e:?} {i:?}"
        );
        assert!(out.retrans > 0, "{what}: ustack did not retransmit");
        assert!(retrans_kernel > 0, "{what}: the kernel did not retransmit");
    } else {
        assert_eq!(e.lost + i.lost, 0, "{what}");
    }
    if f.duplicate > 0.0 {
        assert!(e.duplicated > 0 && i.duplicated > 0, "{what}: {e:?} {i:?}");
    }
    if f.reorder > 0.0 {
        assert!(e.reordered > 0 && i.reordered > 0, "{what}: {e:?} {i:?}");
    }
    eprintln!(
        "{what}: {:.2} s (echo {:.2} s, ustack's client {:.2} s); retransmitted: ustack {} \
         ({} timeouts), kernel {} ({} timeouts); relay out: lost {} dup {} reord {} delayed \
         {}; in: lost {} dup {} reord {} delayed {}; captured {}",
        elapsed.as_secs_f64(),
        echo_time.as_secs_f64(),
        out.client_time.as_secs_f64(),
        out.retrans,
        out.timeouts,
        retrans_kernel,
        timeouts_kernel,
        e.lost,
        e.duplicated,
        e.reordered,
        e.delayed,
        i.lost,
        i.duplicated,
        i.reordered,
        i.delayed,
        out.captured,
    );

    // A storm is many more retransmissions than losses explain. The capture sees what
    // ustack sent before the egress faults, and what the kernel sent after the ingress
    // faults (a duplicate looks like a retransmission there; a reordered segment may
    // too). Both ends are bounded by what the relay did, never by their own counts: a
    // kernel storm that ustack provokes (lost or withheld ACKs, data dropped on receipt)
    // would raise a bound made of the kernel's retransmissions with it. The
    // kernel retransmits spuriously under reordering: its RACK marks a segment held 3 ms
    // (beyond its reordering window) lost, the jitter reorders more than the relay counts
    // as reordered, and a held ACK can fire its tail loss probe (tun, cubic, SACK on: 146
    // and 393 by tshark in two runs of the same cell with 136 and 140 frames reordered;
    // bbr 175 and 183). Hence 4 more per reordered frame for the kernel; without faults
    // its bound is ustack's handful (a storm ustack provokes by dropping every 20th data
    // segment it receives: 62 by tshark, over the 56 allowed).
    let lost = e.lost + i.lost;
    let reordered = e.reordered + i.reordered;
    let ustack_bound = 4 * lost + 2 * reordered + CLEAN_RETRANSMISSIONS;
    let kernel_bound = ustack_bound + 2 * i.duplicated + 4 * reordered;
    let ustack = link.family.ustack();
    if let Some(report) = check_capture(&what, &pcap, ustack, (ustack_bound, kernel_bound)) {
        assert_eq!(
            report.packets, out.captured,
            "{what}: tshark read every packet"
        );
    }
    let _ = std::fs::remove_file(&pcap);
}

/// Runs `cells` over `link` in sequence, each in a namespace of its own; `test` names the
/// test after the link's name. Skips when the link cannot be used here.
pub fn run_matrix<D: Device + Sleep + Send + 'static>(link: &Link<D>, test: &str, cells: &[Cell]) {
    let test = &format!("{}_{test}", link.name);
    let Some(()) = (link.usable)(test) else {
        return;
    };
    let dir = tempdir(test);
    let started = std::time::Instant::now();
    let mut ran = 0;
    for (i, cell) in cells.iter().enumerate() {
        if !kernel_cc_or_skip(&format!("{test} cell {i}"), cell.sysctls.cc) {
            continue;
        }
        run_cell(test, link, &dir, i, cell);
        ran += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{test}: {ran} of {} cells in {:.1} s",
        cells.len(),
        started.elapsed().as_secs_f64()
    );
    // A test that checked nothing must not pass (the bbr cells skip where the kernel has
    // no bbr).
    assert!(ran > 0, "{test}: none of its {} cells ran", cells.len());
}

fn tempdir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ustack-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Every combination of SACK, timestamps and window scaling with one congestion control,
/// without faults.
pub fn clean_cells(cc: &'static str) -> Vec<Cell> {
    let mut cells = Vec::new();
    for sack in [true, false] {
        for timestamps in [true, false] {
            for window_scaling in [true, false] {
                cells.push(Cell {
                    sysctls: Sysctls {
                        sack,
                        timestamps,
                        window_scaling,
                        cc,
                    },
                    faults: FaultConfig::default(),
                    label: "no faults",
                });
            }
        }
    }
    cells
}

/// A spread of the kernel's settings to run a fault with: the defaults, SACK off (NewReno
/// recovery both ways), timestamps and window scaling off too, and bbr.
pub const SPREAD: [Sysctls; 4] = [
    DEFAULTS,
    Sysctls {
        sack: false,
        ..DEFAULTS
    },
    Sysctls {
        sack: false,
        timestamps: false,
        window_scaling: false,
        cc: "reno",
    },
    Sysctls {
        cc: "bbr",
        ..DEFAULTS
    },
];

/// `fault` with each kernel setting of [`SPREAD`], over `link`.
pub fn run_spread<D: Device + Sleep + Send + 'static>(link: &Link<D>, test: &str, fault: Fault) {
    run_matrix(link, test, &fault_cells(&[fault], &SPREAD));
}

/// One cell per fault condition and kernel setting, in that order.
pub fn fault_cells(faults: &[Fault], settings: &[Sysctls]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (label, faults) in faults {
        for sysctls in settings {
            cells.push(Cell {
                sysctls: *sysctls,
                faults: faults.clone(),
                label,
            });
        }
    }
    cells
}
