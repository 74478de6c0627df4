//! Round-trip latency of one TCP connection over a `shm` link: `ustack bench pingpong
//! --conns 1`'s round, measured so that a loaded machine does not hide it.
//!
//! ```text
//! cargo run --release -p ustack-runtime --example shm_ping_tcp [-- ROUNDS]  # default 200,000
//! cargo run --release -p ustack-runtime --example shm_ping_tcp -- ROUNDS --wait
//! ```
//!
//! An echo server runtime on a thread pinned to cpu 1 over side A, a client runtime on
//! cpu 0 over side B, both busy-polling (`Runtime::poll` with a zero timeout: never
//! asleep, the application's loop the spin; with `--wait`, a 10 ms timeout, as the bench's
//! loops: the runtime's own idle loop spins 50 µs, then sleeps); the client writes a 64-byte message, polls until its echo is back and
//! checked, and writes the next. Round trips are timed in batches of 1,000: the fastest
//! batch's mean (both threads on their cores throughout; on a shared machine most batches
//! lose a core for a while) and the median batch's, in ns. Beside it,
//! `ustack-dev`'s `shm_ping` measures the bare link's round trip, the floor under this.

use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;
use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant as WallClock;

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::{Events, Interest, RuntimeBuilder};
use ustack_stack::EthernetAddress;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ECHO: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 7);
const MSG: usize = 64;
const BATCH: u64 = 1_000;

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
        eprintln!("(could not pin to cpu {cpu}: {e})");
    }
}

fn main() -> io::Result<()> {
    let rounds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000)
        .max(BATCH);
    let wait = std::env::args().any(|a| a == "--wait");
    // The bench's loops spin 50 µs before sleeping (on a quiet machine the adaptive
    // window stays there); fixed here, so that load does not make them sleep.
    let spin = Duration::from_micros(50);
    let timeout = Some(if wait {
        Duration::from_millis(10)
    } else {
        Duration::ZERO
    });
    let (mut a, mut b) = ShmLink::pair(&ShmConfig::default())?;
    let (a, b) = (a.remove(0), b.remove(0));
    let stop = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server = std::thread::spawn(move || -> io::Result<()> {
        pin(1);
        let mut rt = RuntimeBuilder::new()
            .ipv4(SERVER_IP, 24)
            .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
            .seed(1)
            .busy_poll(spin)
            .busy_poll_adaptive(false)
            .build(a)?;
        let listener = TcpListener::bind(&mut rt, SocketAddr::V4(ECHO), 16)?;
        rt.register(&listener, 0, Interest::READABLE, Mode::Edge)?;
        let mut conn: Option<TcpStream> = None;
        let mut events = Events::with_capacity(16);
        let mut buf = [0u8; 4096];
        while !server_stop.load(Ordering::Relaxed) {
            rt.poll(&mut events, timeout)?;
            if conn.is_none() {
                match listener.accept(&mut rt) {
                    Ok((s, _)) => {
                        s.set_nodelay(&mut rt, true)?;
                        rt.register(&s, 1, Interest::READABLE, Mode::Edge)?;
                        conn = Some(s);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            let s = conn.as_ref().expect("accepted");
            match s.read(&mut rt, &mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => assert_eq!(s.write(&mut rt, &buf[..n])?, n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });

    pin(0);
    let mut rt = RuntimeBuilder::new()
        .ipv4(CLIENT_IP, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 2]))
        .seed(2)
        .busy_poll(spin)
        .busy_poll_adaptive(false)
        .build(b)?;
    let stream = TcpStream::connect(&mut rt, SocketAddr::V4(ECHO))?;
    stream.set_nodelay(&mut rt, true)?;
    rt.register(
        &stream,
        0,
        Interest::READABLE | Interest::WRITABLE,
        Mode::Edge,
    )?;
    let mut events = Events::with_capacity(16);
    while events.is_empty() {
        rt.poll(&mut events, Some(Duration::ZERO))?;
    }
    let mut msg = [0x5au8; MSG];
    let mut buf = [0u8; 4096];
    let mut batches = Vec::new();
    let mut i = 0u64;
    while i < rounds {
        let t = WallClock::now();
        for _ in 0..BATCH.min(rounds - i) {
            msg[..8].copy_from_slice(&i.to_le_bytes());
            assert_eq!(stream.write(&mut rt, &msg)?, MSG);
            let mut got = 0;
            while got < MSG {
                rt.poll(&mut events, timeout)?;
                match stream.read(&mut rt, &mut buf[got..MSG]) {
                    Ok(0) => return Err(io::Error::other("server closed")),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            assert_eq!(buf[..MSG], msg, "echo {i}");
            i += 1;
        }
        batches.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    stream.close(&mut rt)?;
    for _ in 0..100 {
        rt.poll(&mut events, Some(Duration::ZERO))?;
    }
    stop.store(true, Ordering::Relaxed);
    server.join().expect("server thread")?;
    batches.sort_by(f64::total_cmp);
    println!(
        "{}{rounds} round trips of {MSG} B over TCP over shm, batches of {BATCH}: \
         fastest {:.1} ns, median {:.1} ns per round trip",
        if wait { "--wait: " } else { "" },
        batches[0],
        batches[batches.len() / 2]
    );
    Ok(())
}
