//! Round-trip latency over the bare `shm` link, no TCP: the floor under pingpong at one
//! connection.
//!
//! ```text
//! cargo run --release -p ustack-dev --example shm_ping [-- ROUNDS]   # default 200,000
//! ```
//!
//! Two threads pinned to cpus 0 and 1 busy-poll. Cases:
//!
//! - **cache line**: the hardware floor. Each side stores a counter in its own 128-byte
//!   block and spins on the other's: a round trip moves two lines between the cores, one
//!   each way, and nothing else.
//! - **3 lines, sequence in the first**: a 130-byte message laid out as a descriptor with
//!   the frame inline would be: each side writes lines 1 and 2 of its 192-byte block,
//!   then the round number in line 0 (Release), and spins on line 0 of the other's, then
//!   reads its lines 1 and 2 (checked). The floor for a link that carries small frames in
//!   the descriptor's lines (one line polled, the rest fetched after it), where the
//!   `shm` link polls the descriptor and then fetches the slot's lines.
//! - **shm link, N bytes**: side A sends a frame of N bytes with `Device::send` and spins
//!   on `Device::recv`; side B spins on `recv` and sends the frame back. 130 bytes is the
//!   frame of a 64-byte TCP message (Ethernet 14, IPv4 20, TCP with timestamps 32).
//!
//! Round trips are timed in batches of 1,000; the figures are the fastest batch's mean
//! (the cost with both threads on their cores throughout: on a shared machine most
//! batches lose a core for part of the time) and the median batch's. Every echo is checked
//! (its first 8 bytes carry the round number), so a lost or stale frame fails the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant as WallClock;

use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_obs::time::Instant;

const NOW: Instant = Instant::ZERO;
const BATCH: u64 = 1_000;

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("(could not pin to cpu {cpu}: {e})");
    }
}

/// Runs `round(i)` for i = 1..=rounds, timed in batches of [`BATCH`]; nanoseconds per
/// round trip: (fastest batch's mean, median batch's mean).
fn timed(rounds: u64, mut round: impl FnMut(u64)) -> (f64, f64) {
    let mut batches = Vec::new();
    let mut i = 0;
    while i < rounds {
        let t = WallClock::now();
        for _ in 0..BATCH.min(rounds - i) {
            i += 1;
            round(i);
        }
        batches.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    batches.sort_by(f64::total_cmp);
    (batches[0], batches[batches.len() / 2])
}

/// A 64-byte line padded to 128 bytes (the adjacent-line prefetcher pulls pairs).
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

fn cache_line(rounds: u64) -> (f64, f64) {
    let lines = Arc::new([Line::default(), Line::default()]);
    let echo = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            pin(1);
            for i in 1..=rounds {
                while lines[0].0.load(Ordering::Acquire) != i {
                    core::hint::spin_loop();
                }
                lines[1].0.store(i, Ordering::Release);
            }
        })
    };
    pin(0);
    let r = timed(rounds, |i| {
        lines[0].0.store(i, Ordering::Release);
        while lines[1].0.load(Ordering::Acquire) != i {
            core::hint::spin_loop();
        }
    });
    echo.join().unwrap();
    r
}

/// Three lines padded to 256 bytes: line 0 the round number, lines 1 and 2 payload.
#[repr(align(128))]
#[derive(Default)]
struct Block([AtomicU64; 32]);

impl Block {
    /// Writes round `i`: the payload words (Relaxed), then the number (Release).
    fn put(&self, i: u64) {
        for w in 8..24 {
            self.0[w].store(i ^ w as u64, Ordering::Relaxed);
        }
        self.0[0].store(i, Ordering::Release);
    }
    /// Spins until round `i` is there, then checks its payload.
    fn take(&self, i: u64) {
        while self.0[0].load(Ordering::Acquire) != i {
            core::hint::spin_loop();
        }
        for w in 8..24 {
            assert_eq!(self.0[w].load(Ordering::Relaxed), i ^ w as u64);
        }
    }
}

fn three_lines(rounds: u64) -> (f64, f64) {
    let blocks = Arc::new([Block::default(), Block::default()]);
    let echo = {
        let blocks = blocks.clone();
        std::thread::spawn(move || {
            pin(1);
            for i in 1..=rounds {
                blocks[0].take(i);
                blocks[1].put(i);
            }
        })
    };
    pin(0);
    let r = timed(rounds, |i| {
        blocks[0].put(i);
        blocks[1].take(i);
    });
    echo.join().unwrap();
    r
}

fn echo_side(mut b: ShmPort, rounds: u64, stop: &AtomicBool) {
    pin(1);
    let mut buf = vec![0u8; 2048];
    let mut done = 0;
    while done < rounds && !stop.load(Ordering::Relaxed) {
        if let Some(n) = b.recv(NOW, &mut buf) {
            assert!(b.send(NOW, &buf[..n]), "echo: no slot");
            done += 1;
        }
    }
}

fn link(size: usize, rounds: u64) -> (f64, f64) {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig::default()).unwrap();
    let (mut a, b) = (a.remove(0), b.remove(0));
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || echo_side(b, rounds, &stop))
    };
    pin(0);
    let mut frame = vec![0x5a; size];
    let mut buf = vec![0u8; 2048];
    let r = timed(rounds, |i| {
        frame[..8].copy_from_slice(&i.to_le_bytes());
        assert!(a.send(NOW, &frame), "no slot");
        let n = loop {
            if let Some(n) = a.recv(NOW, &mut buf) {
                break n;
            }
            core::hint::spin_loop();
        };
        assert_eq!(&buf[..n], &frame[..], "echo {i}");
    });
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    r
}

fn main() {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
        .max(BATCH);
    println!("{rounds} round trips a case, batches of {BATCH}, ns per round trip");
    println!("{:<28} {:>10} {:>10}", "case", "fastest", "median");
    let (min, med) = cache_line(rounds);
    println!("{:<28} {min:>10.1} {med:>10.1}", "cache line");
    let (min, med) = three_lines(rounds);
    println!(
        "{:<28} {min:>10.1} {med:>10.1}",
        "3 lines, sequence in first"
    );
    for size in [64, 130, 1514] {
        let (min, med) = link(size, rounds);
        println!(
            "{:<28} {min:>10.1} {med:>10.1}",
            format!("shm link, {size} bytes")
        );
    }
}
