//! Frames per second through the `packet` and `xdp` links, one way, between the two ends
//! of a veth pair, and through the `tun` link, one way between two TUN interfaces with
//! the kernel forwarding between them (needs root: a namespace and a veth pair or two TUN
//! interfaces of its own per case, removed at the end).
//!
//! ```text
//! cargo run --release -p ustack-dev --example veth_pps [-- SECONDS]   # default 2 s per case
//! ```
//!
//! A sender thread sends on `pps0`, `BATCH` frames per `send_batch` (one kick each); a
//! receiver thread reads `pps1`, sleeping in `poll(2)` when there is nothing. Each thread
//! runs on a core of its own. `packet`: `TPACKET_V3` TX and RX rings (1 ms retire
//! timeout). `xdp`: `AF_XDP` sockets in copy mode, each interface with the redirect
//! program attached in generic mode. The frames carry a local experimental EtherType (0x88b5), addressed to
//! `pps1`'s MAC, so the kernel's stack on `pps1` drops each right after the packet taps
//! (that per-frame cost is inside the figure: it is what the kernel does for any frame on
//! the veth).
//!
//! Printed per frame size: frames received per second (wall clock), frames the sender's
//! ring refused or the receiving ring dropped, and each side's CPU time per frame (the
//! sender's includes the veth transmit and the kernel's receive processing, which run in
//! its `send(2)`); "Mpps/core" is 1000 / the slower side's ns. The receiver checks every
//! frame's sequence number: it counts frames the kernel dropped (a full ring) and fails
//! on frames out of order.
//!
//! For `xdp` the sender's figure likewise includes the kernel building an `sk_buff` from
//! the UMEM (copy mode) and the receiving side's generic XDP run.
//!
//! `tun`: `pps0` (198.18.0.1/24) and `pps1` (198.19.0.1/24) in one namespace with
//! `ip_forward` on; the sender writes IPv4/UDP packets from 198.18.0.2 to 198.19.0.2 on
//! `pps0`'s queue (one `write(2)` each, no virtio-net header: UDP is not merged), the
//! kernel routes each to `pps1` (its whole receive and forward path runs inside the
//! sender's `write(2)`), the receiver reads them from `pps1`'s queue (one `read(2)` each).
//! The sequence number is in the UDP payload; `txqueuelen` is 4096 (the queue the kernel
//! fills for the reader of `pps1`).
//!
//! Without root it prints why and exits 0, unless `USTACK_REQUIRE_ROOT` is set.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as WallClock};

use ustack_dev::Device;
use ustack_dev::packet::{Packet, PacketConfig, PacketQueue};
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_dev::xdp::{Xdp, XdpConfig, XdpQueue};
use ustack_obs::time::Instant;

/// A link end the cases run on: a device that can sleep until a frame is there.
trait End: Device + Send + 'static {
    fn sleep(&mut self, timeout: Duration);
}

impl End for PacketQueue {
    fn sleep(&mut self, timeout: Duration) {
        self.wait(Some(timeout)).expect("poll");
    }
}

impl End for XdpQueue {
    fn sleep(&mut self, timeout: Duration) {
        self.wait(Some(timeout)).expect("poll");
    }
}

impl End for TunQueue {
    fn sleep(&mut self, timeout: Duration) {
        self.wait(Some(timeout)).expect("poll");
    }
}

/// What the frames are: Ethernet with a local EtherType, or bare IPv4/UDP (TUN).
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    Ethernet,
    Ip,
}

impl Wire {
    /// Where the sequence number goes.
    fn seq_at(self) -> usize {
        match self {
            Wire::Ethernet => 14,
            Wire::Ip => 28,
        }
    }

    /// Whether a received frame is one of ours.
    fn ours(self, f: &[u8]) -> bool {
        let at = self.seq_at();
        f.len() >= at + 8
            && match self {
                Wire::Ethernet => f[12..14] == ETHERTYPE,
                Wire::Ip => f[9] == 17 && f[16..20] == TUN_DST,
            }
    }

    /// A frame of `size` bytes to `dst` (a MAC), its sequence number still zero.
    fn frame(self, size: usize, dst: [u8; 6]) -> Vec<u8> {
        let mut f = vec![0u8; size];
        match self {
            Wire::Ethernet => {
                f[..6].copy_from_slice(&dst);
                f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
                f[12..14].copy_from_slice(&ETHERTYPE);
            }
            Wire::Ip => {
                f[0] = 0x45;
                f[2..4].copy_from_slice(&(size as u16).to_be_bytes());
                f[8] = 64;
                f[9] = 17;
                f[12..16].copy_from_slice(&TUN_SRC);
                f[16..20].copy_from_slice(&TUN_DST);
                let sum = ustack_wire::checksum::checksum(&f[..20]);
                f[10..12].copy_from_slice(&sum.to_be_bytes());
                f[20..22].copy_from_slice(&9u16.to_be_bytes());
                f[22..24].copy_from_slice(&9u16.to_be_bytes());
                f[24..26].copy_from_slice(&(size as u16 - 20).to_be_bytes());
            }
        }
        f
    }
}

/// The tun case's source (behind `pps0`) and destination (behind `pps1`).
const TUN_SRC: [u8; 4] = [198, 18, 0, 2];
const TUN_DST: [u8; 4] = [198, 19, 0, 2];

/// Opens a link end on interface `name` in `ns`: the end, and the interface's MAC.
type Open<L> = fn(&Ns, &str) -> (L, [u8; 6]);

const BATCH: usize = 32;
const NOW: Instant = Instant::ZERO;
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

/// CPU time this thread has used.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// An anonymous namespace held by `unshare --net sleep`, killed on drop.
struct Ns(Child);

impl Ns {
    fn new() -> Ns {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "120"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net");
        let ns = Ns(child);
        let ours = std::fs::read_link("/proc/self/ns/net").expect("our namespace");
        let deadline = WallClock::now() + Duration::from_secs(5);
        while std::fs::read_link(ns.path()).is_ok_and(|l| l == ours) {
            assert!(WallClock::now() < deadline, "unshare did not unshare");
            std::thread::sleep(Duration::from_millis(2));
        }
        ns
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.0.id())
    }

    fn run(&self, argv: &[&str]) {
        let status = Command::new("timeout")
            .args(["5", "nsenter", &format!("--net={}", self.path())])
            .args(argv)
            .status()
            .expect("nsenter");
        assert!(status.success(), "{argv:?}: {status}");
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one run measured.
struct Run {
    received: u64,
    lost: u64,
    refused: u64,
    wall: f64,
    tx_ns: f64,
    rx_ns: f64,
}

/// One packet queue on interface `name` in `ns`, and the interface's MAC.
fn open_packet(ns: &Ns, name: &str) -> (PacketQueue, [u8; 6]) {
    let link = Packet::open(&PacketConfig {
        interface: name.to_owned(),
        netns: Some(ns.path().into()),
        rx_blocks: 64,
        ..PacketConfig::default()
    })
    .expect("opening the packet link");
    let mac = link.mac();
    (link.into_queues().remove(0), mac)
}

/// The xdp link on interface `name` in `ns`, and the interface's MAC.
fn open_xdp(ns: &Ns, name: &str) -> (XdpQueue, [u8; 6]) {
    let link = Xdp::open(&XdpConfig {
        interface: name.to_owned(),
        netns: Some(ns.path().into()),
        ..XdpConfig::default()
    })
    .expect("opening the xdp link");
    let mac = link.mac();
    (link.into_queue(), mac)
}

/// A TUN interface `name` with one queue in `ns` (no MAC: bare IP).
fn open_tun(ns: &Ns, name: &str) -> (TunQueue, [u8; 6]) {
    let tun = Tun::open(&TunConfig {
        name: name.to_owned(),
        netns: Some(ns.path().into()),
        ..TunConfig::default()
    })
    .expect("opening the tun link");
    (tun.into_queues().remove(0), [0; 6])
}

/// IPv6 off on `dev` and the link up.
fn up(ns: &Ns, dev: &str) {
    ns.run(&[
        "sh",
        "-c",
        &format!("echo 1 > /proc/sys/net/ipv6/conf/{dev}/disable_ipv6"),
    ]);
    ns.run(&["ip", "link", "set", dev, "up"]);
}

fn run<L: End>(open: Open<L>, wire: Wire, size: usize, secs: f64) -> Run {
    let ns = Ns::new();
    if wire == Wire::Ethernet {
        ns.run(&[
            "ip", "link", "add", "pps0", "type", "veth", "peer", "name", "pps1",
        ]);
        up(&ns, "pps0");
        up(&ns, "pps1");
    }
    let (mut tx, _) = open(&ns, "pps0");
    let (mut rx, dst) = open(&ns, "pps1");
    if wire == Wire::Ip {
        ns.run(&["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
        for (dev, addr) in [("pps0", "198.18.0.1/24"), ("pps1", "198.19.0.1/24")] {
            ns.run(&["ip", "addr", "add", addr, "dev", dev]);
            // The queue towards the reader: deep enough to ride out its wake-ups.
            ns.run(&["ip", "link", "set", dev, "txqueuelen", "4096"]);
            up(&ns, dev);
        }
    }
    let at = wire.seq_at();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || {
        let _ = rustix::thread::sched_setaffinity(None, &one_cpu(1));
        let mut buf = vec![0; 2048];
        let (mut got, mut lost, mut next) = (0u64, 0u64, 0u64);
        let mut busy = Duration::ZERO;
        let start = WallClock::now();
        while !stop_rx.load(std::sync::atomic::Ordering::Relaxed) {
            let t = cpu_time();
            let mut n = 0;
            while let Some(len) = rx.recv(NOW, &mut buf) {
                if !wire.ours(&buf[..len]) {
                    continue;
                }
                let seq = u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
                assert!(seq >= next, "frame {seq} after {next}: out of order");
                lost += seq - next;
                next = seq + 1;
                got += 1;
                n += 1;
            }
            if n > 0 {
                busy += cpu_time() - t;
            }
            rx.sleep(Duration::from_millis(10));
        }
        (got, lost, busy, start.elapsed().as_secs_f64())
    });
    let _ = rustix::thread::sched_setaffinity(None, &one_cpu(0));
    let mut frames = vec![wire.frame(size, dst); BATCH];
    let (mut seq, mut refused) = (0u64, 0u64);
    let t0 = cpu_time();
    let end = WallClock::now() + Duration::from_secs_f64(secs);
    while WallClock::now() < end {
        for f in &mut frames {
            f[at..at + 8].copy_from_slice(&seq.to_be_bytes());
            seq += 1;
        }
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        refused += tx.send_batch(NOW, &refs) as u64;
    }
    let tx_cpu = cpu_time() - t0;
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (got, lost, busy, wall) = receiver.join().expect("receiver");
    let sent = seq - refused;
    Run {
        received: got,
        lost,
        refused,
        wall,
        tx_ns: tx_cpu.as_nanos() as f64 / sent.max(1) as f64,
        rx_ns: busy.as_nanos() as f64 / got.max(1) as f64,
    }
}

fn one_cpu(cpu: usize) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    set.set(cpu % n);
    set
}

fn main() {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("USTACK_REQUIRE_ROOT").is_none(),
            "veth_pps needs root"
        );
        println!("veth_pps: skipped: not running as root");
        return;
    }
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!(
        "veth pair (tun: two TUN interfaces, the kernel forwarding), {secs} s per case, TX \
         batches of {BATCH}, sender on cpu 0, receiver on cpu 1"
    );
    println!(
        "{:<7} {:>5} {:>10} {:>9} {:>8} {:>9} {:>9} {:>10}",
        "link", "bytes", "wall Mpps", "lost", "refused", "tx ns/fr", "rx ns/fr", "Mpps/core"
    );
    let cases = [
        ("packet", 64),
        ("packet", 1500),
        ("xdp", 64),
        ("xdp", 1500),
        ("tun", 64),
        ("tun", 1500),
    ];
    for (link, size) in cases {
        let r = match link {
            "packet" => run(open_packet, Wire::Ethernet, size, secs),
            "xdp" => run(open_xdp, Wire::Ethernet, size, secs),
            _ => run(open_tun, Wire::Ip, size, secs),
        };
        assert!(r.received > 0, "nothing arrived");
        println!(
            "{link:<7} {size:>5} {:>10.3} {:>9} {:>8} {:>9.1} {:>9.1} {:>10.3}",
            r.received as f64 / r.wall / 1e6,
            r.lost,
            r.refused,
            r.tx_ns,
            r.rx_ns,
            1000.0 / r.tx_ns.max(r.rx_ns),
        );
    }
}
