//! Packets per second through the `shm` link, per core.
//!
//! ```text
//! cargo run --release -p ustack-dev --example shm_pps [-- SECONDS]   # default 2 s per case
//! SHM_PPS_RING=512 cargo run ...                                    # another ring size
//! ```
//!
//! Cases, each for 64-byte and 1500-byte frames, with the batch methods (32 frames per
//! call) and with the `Device` methods `send`/`recv` (one frame per call; the shard's loop
//! sends with `Device::send_batch`, which publishes once per batch like the batch method):
//!
//! - **one core**: one thread sends on side A and receives on side B, 32 frames at a
//!   time. CPU time per frame is the link's whole cost for both ends of a frame (copy in,
//!   copy out, ring bookkeeping), i.e. what it adds to a benchmark that runs client and
//!   server on one core.
//! - **two processes**: this program re-runs itself as side B (handed over by name); the
//!   sender and the receiver are each pinned to a core and busy-poll. Each side's cost per
//!   frame is the time spent in calls that moved frames, divided by the frames moved
//!   (calls that found nothing to do, and time the process was not running, are left
//!   out, so the figure holds on a machine shared with other work). It includes the
//!   cache-line transfers between the cores. "Mpps/core" is 1000 / the slower side's ns.
//!
//! The receiver checks every frame's sequence number, so a lost or reordered frame fails
//! the run.

use std::time::{Duration, Instant as WallClock};

use ustack_dev::Device;
use ustack_dev::shm::{FrameBatch, ShmConfig, ShmLink, ShmPeer, ShmPort};
use ustack_obs::time::Instant;

const CHILD_ENV: &str = "USTACK_SHM_PPS_CHILD";
const BATCH: usize = 32;
const NOW: Instant = Instant::ZERO;
/// The sender's last frame: shorter than any measured frame.
const STOP: &[u8] = b"stop";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Batch,
    Device,
}

/// What a case measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    frames: u64,
    /// Wall-clock seconds of the whole run.
    wall: f64,
    /// Nanoseconds per frame spent sending and receiving.
    tx_ns: f64,
    rx_ns: f64,
}

/// A way to run a case: frame size, API, seconds.
type Case = fn(usize, Api, f64) -> Run;

/// CPU time this thread has used.
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("(could not pin to cpu {cpu}: {e})");
    }
}

/// Ring size: the default (256), or `SHM_PPS_RING`.
fn ring_size() -> usize {
    let default = ShmConfig::default().ring_size;
    std::env::var("SHM_PPS_RING")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

fn config() -> ShmConfig {
    ShmConfig {
        ring_size: ring_size(),
        ..ShmConfig::default()
    }
}

/// Writes sequence number `seq` into a frame's first 8 bytes.
fn stamp(frame: &mut [u8], seq: u64) {
    frame[..8].copy_from_slice(&seq.to_le_bytes());
}

fn seq_of(frame: &[u8]) -> u64 {
    u64::from_le_bytes(frame[..8].try_into().unwrap())
}

/// The sending side's inner step: tries to send up to 32 frames numbered from `sent`;
/// returns how many went.
fn send_some(a: &mut ShmPort, api: Api, frame: &mut [u8], frames: &[&[u8]], sent: u64) -> u64 {
    match api {
        // The batch is prepared by the caller, as a stack hands over frames it built.
        Api::Batch => a.send_until_full(frames.iter().copied()) as u64,
        Api::Device => {
            let mut n = 0;
            for k in 0..BATCH as u64 {
                stamp(frame, sent + k);
                if !a.send(NOW, frame) {
                    break;
                }
                n += 1;
            }
            n
        }
    }
}

/// The receiving side's inner step: takes what is there (up to 32 frames with the
/// batch method, until empty with the `Device` one), checks each frame's number, returns
/// how many came and whether `STOP` came after them.
fn recv_some(
    b: &mut ShmPort,
    api: Api,
    rx: &mut FrameBatch,
    buf: &mut [u8],
    received: u64,
) -> (u64, bool) {
    let mut n = 0;
    match api {
        Api::Batch => {
            rx.clear();
            b.recv_batch(rx);
            for f in rx.iter() {
                if f == STOP {
                    return (n, true);
                }
                assert_eq!(seq_of(f), received + n, "lost or reordered");
                n += 1;
            }
        }
        Api::Device => {
            while let Some(len) = b.recv(NOW, buf) {
                if &buf[..len] == STOP {
                    return (n, true);
                }
                assert_eq!(seq_of(&buf[..len]), received + n, "lost or reordered");
                n += 1;
            }
        }
    }
    (n, false)
}

/// 32 numbered frames for a batch send, renumbered in place each round.
struct Frames {
    bufs: Vec<Vec<u8>>,
}

impl Frames {
    fn new(size: usize) -> Frames {
        Frames {
            bufs: vec![vec![0x5a; size]; BATCH],
        }
    }
    fn number_from(&mut self, seq: u64) -> Vec<&[u8]> {
        for (k, f) in self.bufs.iter_mut().enumerate() {
            stamp(f, seq + k as u64);
        }
        self.bufs.iter().map(|f| &f[..]).collect()
    }
}

/// One thread drives both ends.
fn one_core(size: usize, api: Api, secs: f64) -> Run {
    let (mut a, mut b) = ShmLink::pair(&config()).unwrap();
    let (a, b) = (&mut a[0], &mut b[0]);
    let mut frames = Frames::new(size);
    let mut frame = vec![0x5a; size];
    let mut rx = FrameBatch::new(BATCH, 1514);
    let mut buf = vec![0u8; 1514];
    let (mut sent, mut received) = (0u64, 0u64);
    let start = WallClock::now();
    let cpu_start = cpu_time();
    let limit = Duration::from_secs_f64(secs);
    while start.elapsed() < limit {
        for _ in 0..64 {
            let batch = frames.number_from(sent);
            sent += send_some(a, api, &mut frame, &batch, sent);
            while received < sent {
                received += recv_some(b, api, &mut rx, &mut buf, received).0;
            }
        }
    }
    let cpu_ns = (cpu_time() - cpu_start).as_nanos() as f64;
    let per_frame = cpu_ns / received as f64;
    Run {
        frames: received,
        wall: start.elapsed().as_secs_f64(),
        tx_ns: per_frame,
        rx_ns: 0.0,
    }
}

/// Side A in this process (pinned to cpu 0), side B in a child (cpu 1).
fn two_processes(size: usize, api: Api, secs: f64) -> Run {
    let (mut ports, peer) = ShmLink::create(&config()).unwrap();
    let offer = peer.offer().unwrap();
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(exe)
        .env(CHILD_ENV, format!("{} {}", offer.name(), api == Api::Batch))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    offer.hand_over(Duration::from_secs(10)).unwrap();
    pin(0);
    let a = &mut ports[0];
    let mut frames = Frames::new(size);
    let mut frame = vec![0x5a; size];
    let (mut sent, mut busy) = (0u64, Duration::ZERO);
    let start = WallClock::now();
    let limit = Duration::from_secs_f64(secs);
    while start.elapsed() < limit {
        for _ in 0..256 {
            let batch = frames.number_from(sent);
            let t = WallClock::now();
            let n = send_some(a, api, &mut frame, &batch, sent);
            if n > 0 {
                busy += t.elapsed();
                sent += n;
            }
        }
    }
    let wall = start.elapsed().as_secs_f64();
    while !a.send(NOW, STOP) {}
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let report = String::from_utf8(out.stdout).unwrap();
    let (count, rx_busy_ns) = report.trim().split_once(' ').unwrap();
    assert_eq!(
        count.parse::<u64>().unwrap(),
        sent,
        "the receiver saw every frame"
    );
    Run {
        frames: sent,
        wall,
        tx_ns: busy.as_nanos() as f64 / sent as f64,
        rx_ns: rx_busy_ns.parse::<f64>().unwrap() / sent as f64,
    }
}

/// The child: side B, pinned to cpu 1, receives and checks until STOP, then prints how
/// many frames it got and the nanoseconds spent in calls that returned frames.
fn child(arg: &str) {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)).unwrap();
    let (name, batch) = arg.split_once(' ').unwrap();
    let api = if batch == "true" {
        Api::Batch
    } else {
        Api::Device
    };
    pin(1);
    let mut port = ShmPeer::connect(name, Duration::from_secs(10))
        .unwrap()
        .attach()
        .unwrap();
    let b = &mut port[0];
    let mut rx = FrameBatch::new(BATCH, 1514);
    let mut buf = vec![0u8; 1514];
    let (mut received, mut busy) = (0u64, Duration::ZERO);
    let deadline = WallClock::now() + Duration::from_secs(120);
    loop {
        assert!(WallClock::now() < deadline);
        let t = WallClock::now();
        let (n, stop) = recv_some(b, api, &mut rx, &mut buf, received);
        if n > 0 {
            busy += t.elapsed();
            received += n;
        }
        if stop {
            break;
        }
    }
    println!("{received} {}", busy.as_nanos());
}

fn main() {
    if let Ok(arg) = std::env::var(CHILD_ENV) {
        child(&arg);
        return;
    }
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!(
        "shm link, {secs} s per case, ring {}, 2048-byte slots",
        ring_size()
    );
    println!(
        "{:<38} {:>5} {:>9} {:>9} {:>9} {:>10}",
        "case", "bytes", "wall Mpps", "tx ns/fr", "rx ns/fr", "Mpps/core"
    );
    let cases: [(&str, Case, Api); 4] = [
        ("one core, both ends, batch 32", one_core, Api::Batch),
        ("one core, both ends, Device", one_core, Api::Device),
        ("two processes, batch 32", two_processes, Api::Batch),
        ("two processes, Device", two_processes, Api::Device),
    ];
    for (label, run, api) in cases {
        for size in [64, 1500] {
            let r = run(size, api, secs);
            let rx = if r.rx_ns > 0.0 {
                format!("{:.1}", r.rx_ns)
            } else {
                "(both)".into()
            };
            println!(
                "{:<38} {:>5} {:>9.2} {:>9.1} {:>9} {:>10.2}",
                label,
                size,
                r.frames as f64 / r.wall / 1e6,
                r.tx_ns,
                rx,
                1e3 / r.tx_ns.max(r.rx_ns)
            );
        }
    }
}
