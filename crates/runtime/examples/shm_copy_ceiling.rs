//! What the copies of a shm stream cost without TCP: the floor under a stream that copies
//! each byte once a side (Linux loopback's count) and under today's (twice sending), on
//! this machine's memory (issue #13 item 6).
//!
//! ```text
//! cargo build --release --locked -p ustack-runtime --example shm_copy_ceiling
//! target/release/examples/shm_copy_ceiling [SECONDS]    # default 2 s per case
//! ```
//!
//! The bench's link (64 KiB frames in 16 slots) and 256 KiB application buffers, as
//! `shm_stream_count` and the stream bench use. Each figure is Gbit of payload per
//! CPU-second of the thread that did the work (`CLOCK_THREAD_CPUTIME_ID`), so it holds on
//! a machine shared with other work, where a wall-clock figure says who got a core:
//!
//! - **memcpy**: 64 KiB copies from the 256 KiB buffer into a 4 MiB ring (a send buffer's
//!   size in the bench: out of L2), and into one 64 KiB buffer (in cache); from the 4 MiB
//!   ring into a 64 KiB frame as the lent path writes a slot (2 KiB pieces, the payload
//!   66 bytes in, after the headers), as one piece, and line-aligned.
//! - **link, both ends on one thread**: 64 KiB frames sent from the 256 KiB buffer
//!   (`Device::send`: one copy into the slot) and received into another
//!   (`Device::recv`: one copy out), 8 at a time: the link's whole cost for both ends,
//!   comparable with `shm_stream_count`'s CPU per byte (also both ends on one thread).
//!   `staged`: the sender first copies each 64 KiB into a 4 MiB ring (the send buffer) and
//!   sends from there: today's copy count, without TCP.

use std::time::Instant as WallClock;

use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_obs::time::Instant;

const FRAME: usize = 64 << 10;
const APP: usize = 256 << 10;
const SNDBUF: usize = 4 << 20;
const NOW: Instant = Instant::ZERO;

/// This thread's CPU time in seconds.
fn cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Gbit of payload per CPU-second of `step` run for `secs` of wall clock, each call
/// moving `per_step` bytes.
fn gbit_per_cpu_s(secs: f64, per_step: usize, mut step: impl FnMut(usize)) -> f64 {
    let (start, c0) = (WallClock::now(), cpu());
    let mut n = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..16 {
            step(n);
            n += 1;
        }
    }
    (n * per_step) as f64 * 8.0 / 1e9 / (cpu() - c0)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2.0);
    let app: Vec<u8> = (0..APP).map(|i| (i % 251) as u8).collect();
    let mut ring = vec![0u8; SNDBUF];
    let cold = gbit_per_cpu_s(secs, FRAME, |n| {
        let at = (n * FRAME) % SNDBUF;
        ring[at..at + FRAME].copy_from_slice(&app[(n * FRAME) % APP..][..FRAME]);
        std::hint::black_box(&ring);
    });
    let mut hot = vec![0u8; FRAME];
    let warm = gbit_per_cpu_s(secs, FRAME, |n| {
        hot.copy_from_slice(&app[(n % 4) * FRAME..][..FRAME]);
        std::hint::black_box(&hot);
    });
    println!("memcpy 64 KiB, 256 KiB buffer -> 4 MiB ring:   {cold:6.1} Gbit per CPU-s");
    println!("memcpy 64 KiB, in cache:                       {warm:6.1} Gbit per CPU-s");
    // The send buffer's copy into a slot as the lent path makes it: 2 KiB pieces (the
    // pool's chunks) from the 4 MiB ring to 66 bytes into a 64 KiB frame (after IPv4 and
    // TCP headers with timestamps), against one piece, and against a line-aligned start.
    let mut frame = vec![0u8; FRAME + 128];
    for (what, at, piece) in [
        ("4 MiB ring -> frame + 66, 2 KiB pieces:", 66, 2048),
        ("4 MiB ring -> frame + 66, one piece:   ", 66, FRAME),
        ("4 MiB ring -> frame + 64, 2 KiB pieces:", 64, 2048),
    ] {
        let r = gbit_per_cpu_s(secs, FRAME, |n| {
            let src = &ring[(n * FRAME) % SNDBUF..][..FRAME];
            for (k, p) in src.chunks(piece).enumerate() {
                frame[at + k * piece..][..p.len()].copy_from_slice(p);
            }
            std::hint::black_box(&frame);
        });
        println!("memcpy {what}  {r:6.1} Gbit per CPU-s");
    }
    let config = ShmConfig {
        ring_size: 16,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    };
    for staged in [false, true] {
        let (mut a, mut b) = ShmLink::pair(&config).expect("a shm link");
        let (mut tx, mut rx) = (a.remove(0), b.remove(0));
        let mut buf = vec![0u8; APP];
        let (mut sent, mut got) = (0usize, 0usize);
        let link = gbit_per_cpu_s(secs, 8 * FRAME, |_| {
            for i in 0..8 {
                let src = &app[(sent * FRAME) % APP..][..FRAME];
                let frame: &[u8] = if staged {
                    let at = (sent * FRAME) % SNDBUF;
                    ring[at..at + FRAME].copy_from_slice(src);
                    &ring[at..at + FRAME]
                } else {
                    src
                };
                assert!(tx.send_more(NOW, frame, i < 7), "a free slot");
                sent += 1;
            }
            for _ in 0..8 {
                let at = (got * FRAME) % APP;
                assert_eq!(rx.recv(NOW, &mut buf[at..at + FRAME]), Some(FRAME));
                got += 1;
            }
        });
        std::hint::black_box(&buf);
        let what = if staged {
            "link, one thread, two copies sending:"
        } else {
            "link, one thread, one copy a side:   "
        };
        println!("{what}          {link:6.1} Gbit per CPU-s (both ends)");
    }
}
