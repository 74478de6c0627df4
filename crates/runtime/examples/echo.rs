//! An echo server on ustack and clients on a second ustack, in one process, no root.
//!
//! ```text
//! cargo run --release -p ustack-runtime --example echo                  # shm, 2 threads
//! cargo run --release -p ustack-runtime --example echo -- --conns 64 --secs 5
//! cargo run --release -p ustack-runtime --example echo -- --sim 100000  # per-message cost
//! cargo run --release -p ustack-runtime --example echo -- --sim 100000 --ipv6  # over IPv6
//! ```
//!
//! `--ipv6` (either mode): the connections go over IPv6 (`2001:db8::1` and `::2`, /64,
//! without duplicate address detection, as `ustack bench --ipv6`) instead of IPv4.
//!
//! **shm** (default): the server runtime runs on its own thread over side A of a shm link
//! (`ShmLink::pair`), the client runtime on the main thread over side B; `--conns`
//! connections each keep one 64-byte message in flight for `--secs` seconds. Every echo is
//! checked (connection, sequence number, bytes); it prints messages per second and what
//! the loops did (rounds, sleeps, wake-ups).
//!
//! **sim** (`--sim N`): both runtimes on one thread over a `sim` link on a virtual clock,
//! one connection, N round trips of 64 bytes through the public API (write, the server's
//! poll, read, write back, the client's round, the client's read: a write hands its
//! segment to the sim link as it returns, so neither side runs a round only to send). It
//! prints ns per round trip: the stack's and the runtime's cost of an echo, with no link
//! cost to speak of; and the loops' passes per round trip (each runtime's rounds, of them
//! the empty ones, and the server's events: 1, 0, 1, 0 and 1). Under callgrind, run it
//! twice with different N and divide the difference in instructions by the difference in
//! N to leave out the set-up.
//!
//! Measured on the development machine (2 vCPUs, AMD EPYC Zen 5 under KVM), release:
//!
//! ```text
//! for n in 10000 30000; do valgrind --tool=callgrind --callgrind-out-file=cg.$n \
//!     target/release/examples/echo --sim $n; done
//! (504,509,957 - 179,514,915) / 20,000 = 16,250 instructions per 64-byte round trip
//! echo --sim 300000: 1,180-1,230 ns per round trip (about 830,000 round trips/s)
//! ```
//!
//! Of those 16,250 instructions (callgrind, inclusive): the two segment receives
//! (`Stack::receive`) about 5,950; `tcp_send` with its output path about 4,600; the sim
//! link (send with its ChaCha draws, recv) about 1,350; `Stack::poll_timeout`, asked 7
//! times per round trip, about 1,200; the poller about 700; malloc and free about 1,450
//! of the above (measured before the shard handed transmitted frames back to
//! `Stack::recycle`).
//!
//! shm, two threads, `--secs 3`, medians of 3 runs: with the shard transmitting frame by
//! frame (one ring publication, fence and wake-up check per frame), 307,000 messages/s
//! at `--conns 16` and 447,000 at `--conns 64`; with transmit batches
//! (`Device::send_batch`: one publication and at most one doorbell per batch), 727,000
//! and 966,000. Runs vary by about a quarter on this shared machine. `--sim` did not
//! change (1,270-1,280 ns per round trip): the sim link has no publication step to save.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;
use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::{
    Clock, Events, Interest, Runtime, RuntimeBuilder, Sleep, VirtualClock, sim_pair,
};
use ustack_stack::{EthernetAddress, Instant};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ECHO: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 7);
const SERVER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const MSG: usize = 64;
const LISTENER: u64 = u64::MAX;

/// The address family of the run: IPv4, or IPv6 with `--ipv6`.
#[derive(Clone, Copy)]
struct Family {
    ipv6: bool,
}

impl Family {
    /// The echo server's address.
    fn echo(self) -> SocketAddr {
        if self.ipv6 {
            SocketAddr::new(SERVER_IP6.into(), ECHO.port())
        } else {
            ECHO.into()
        }
    }

    /// `builder` with the IPv6 address `ip6`/64 too for an IPv6 run, without duplicate
    /// address detection so that a run starts at once.
    fn with(self, builder: RuntimeBuilder, ip6: Ipv6Addr) -> RuntimeBuilder {
        if self.ipv6 {
            builder
                .ipv6(ip6, 64)
                .sysctl("net.ipv6.conf.default.accept_dad", 0)
        } else {
            builder
        }
    }

    fn server_builder(self) -> RuntimeBuilder {
        let b = RuntimeBuilder::new()
            .ipv4(SERVER_IP, 24)
            .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
            .seed(1);
        self.with(b, SERVER_IP6)
    }

    fn client_builder(self) -> RuntimeBuilder {
        let b = RuntimeBuilder::new()
            .ipv4(CLIENT_IP, 24)
            .mac(EthernetAddress([2, 0, 0, 0, 0, 2]))
            .seed(2);
        self.with(b, CLIENT_IP6)
    }
}

/// Message `seq` of connection `conn`.
fn message(conn: u64, seq: u64) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[..8].copy_from_slice(&conn.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    for (k, b) in m[16..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(k as u8);
    }
    m
}

// ---- the server: an edge-triggered event loop ---------------------------------------------

/// The echo server's state: the listener and the accepted streams by token.
///
/// The streams are kept in a `Vec` indexed by their token (a slab: a stream's token is
/// its index, given when it is accepted; a closed stream leaves `None`), as a server
/// keeping connections by a token it chose would, instead of a `HashMap`, whose SipHash
/// of the token and table probe on every event cost 115 instructions of the round trip
/// (7,763 -> 7,648, `bash scripts/instr-check`). What the API costs is unchanged: every
/// event is still looked up, every read and write is a call into the runtime, and the
/// read that ends each event's loop still returns `EAGAIN` as an `io::Error` (made from
/// the errno, as std's sockets make it: no allocation; its `kind()` decodes the errno).
struct Server {
    listener: TcpListener,
    conns: Vec<Option<TcpStream>>,
    events: Events,
    buf: Vec<u8>,
}

impl Server {
    fn start<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        family: Family,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind(rt, family.echo(), 1024)?;
        rt.register(&listener, LISTENER, Interest::READABLE, Mode::Edge)?;
        Ok(Server {
            listener,
            conns: Vec::new(),
            events: Events::with_capacity(256),
            buf: vec![0; 16 * 1024],
        })
    }

    /// One `epoll_wait` and its events.
    fn step<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        rt.poll(&mut self.events, timeout)?;
        for i in 0..self.events.len() {
            let token = self.events.iter().nth(i).map_or(0, |e| e.token);
            if token == LISTENER {
                loop {
                    match self.listener.accept(rt) {
                        Ok((s, _)) => {
                            s.set_nodelay(rt, true)?;
                            let token = self.conns.len() as u64;
                            rt.register(&s, token, Interest::READABLE, Mode::Edge)?;
                            self.conns.push(Some(s));
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            } else {
                self.echo(rt, token)?;
            }
        }
        Ok(())
    }

    /// Read until EAGAIN, writing everything back (small messages always fit).
    fn echo<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        token: u64,
    ) -> io::Result<()> {
        let Some(Some(s)) = usize::try_from(token).ok().and_then(|i| self.conns.get(i)) else {
            return Ok(());
        };
        loop {
            match s.read(rt, &mut self.buf) {
                Ok(0) => {
                    let s = self.conns[token as usize].take().expect("present");
                    return s.close(rt);
                }
                Ok(n) => {
                    let w = s.write(rt, &self.buf[..n])?;
                    assert_eq!(w, n, "the echo fits in the send buffer");
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

// ---- shm: two threads, real clock --------------------------------------------------------

struct Conn {
    stream: TcpStream,
    seq: u64,
    got: Vec<u8>,
    started: bool,
}

fn shm(conns: usize, secs: f64, family: Family) -> io::Result<()> {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig::default())?;
    let (a, b) = (a.remove(0), b.remove(0));
    let stop = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server = std::thread::spawn(move || -> io::Result<_> {
        let mut rt = family.server_builder().build(a)?;
        let mut server = Server::start(&mut rt, family)?;
        while !server_stop.load(Ordering::Relaxed) {
            server.step(&mut rt, Some(Duration::from_millis(10)))?;
        }
        Ok((*rt.stats(), *rt.shard_stats()))
    });

    let mut rt = family.client_builder().build(b)?;
    let mut cs = Vec::with_capacity(conns);
    for i in 0..conns {
        let stream = TcpStream::connect(&mut rt, family.echo())?;
        stream.set_nodelay(&mut rt, true)?;
        rt.register(
            &stream,
            i as u64,
            Interest::READABLE | Interest::WRITABLE,
            Mode::Edge,
        )?;
        cs.push(Conn {
            stream,
            seq: 0,
            got: Vec::with_capacity(MSG),
            started: false,
        });
    }
    let mut events = Events::with_capacity(256);
    let mut buf = [0u8; 4096];
    let mut echoed = 0u64;
    let start = std::time::Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    while std::time::Instant::now() < until {
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        for e in &events {
            let i = e.token;
            let c = &mut cs[i as usize];
            if !c.started {
                c.started = true;
                c.stream.write(&mut rt, &message(i, 0))?;
            }
            loop {
                match c.stream.read(&mut rt, &mut buf) {
                    Ok(0) => return Err(io::Error::other("server closed")),
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            while c.got.len() >= MSG {
                assert_eq!(c.got[..MSG], message(i, c.seq), "echo of {i}/{}", c.seq);
                c.got.drain(..MSG);
                c.seq += 1;
                echoed += 1;
                c.stream.write(&mut rt, &message(i, c.seq))?;
            }
        }
    }
    let elapsed = start.elapsed();
    for c in cs {
        c.stream.close(&mut rt)?;
    }
    for _ in 0..10 {
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    stop.store(true, Ordering::Relaxed);
    let (sstats, sshard) = server.join().expect("server thread")?;
    println!(
        "shm: {conns} connections, {echoed} messages of {MSG} B echoed and verified in {:.2} s: \
         {:.0} messages/s ({:.2} µs per message)",
        elapsed.as_secs_f64(),
        echoed as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / echoed.max(1) as f64,
    );
    println!("client loop: {:?}", rt.stats());
    println!("client shard: {:?}", rt.shard_stats());
    println!("server loop: {sstats:?}");
    println!("server shard: {sshard:?}");
    if echoed == 0 {
        return Err(io::Error::other("nothing echoed"));
    }
    Ok(())
}

// ---- sim: one thread, virtual clock, per-message cost ------------------------------------

fn sim(round_trips: u64, family: Family) -> io::Result<()> {
    let (a, b) = sim_pair(SimLinkConfig::default());
    let clock = VirtualClock::new(Instant::ZERO);
    let mut srt = family
        .server_builder()
        .build_with_clock(a, clock.participant())?;
    let mut crt = family
        .client_builder()
        .build_with_clock(b, clock.participant())?;
    let mut server = Server::start(&mut srt, family)?;
    let stream = TcpStream::connect(&mut crt, family.echo())?;
    stream.set_nodelay(&mut crt, true)?;
    // Handshake (ARP or neighbour discovery first).
    while server.conns.is_empty() {
        crt.run_once(Some(Duration::from_millis(1)))?;
        server.step(&mut srt, Some(Duration::from_millis(1)))?;
    }
    let mut buf = [0u8; MSG];
    let mut one_trip = |crt: &mut Runtime<_, _>, srt: &mut Runtime<_, _>, seq: u64| {
        let m = message(0, seq);
        // The write hands its segment to the link as it returns (`Device::tx_direct`,
        // Linux's qdisc bypass), so no round of the client's is needed to send it; nor
        // one of the server's for the echo its write sends the same way. One round a
        // side: the server's `poll` receives the request and reports it, its read and
        // write answer it; the client's `run_once` receives the echo.
        assert_eq!(stream.write(crt, &m)?, MSG);
        server.step(srt, Some(Duration::ZERO))?; // received, READABLE, read, echoed
        crt.run_once(Some(Duration::ZERO))?; // received
        let mut got = 0;
        while got < MSG {
            got += stream.read(crt, &mut buf[got..])?;
        }
        assert_eq!(buf, m, "echo {seq}");
        io::Result::Ok(())
    };
    // Warm up (buffers, tables), then measure.
    for seq in 0..1000 {
        one_trip(&mut crt, &mut srt, seq)?;
    }
    let (c0, s0) = (*crt.stats(), *srt.stats());
    let start = std::time::Instant::now();
    for seq in 1000..1000 + round_trips {
        one_trip(&mut crt, &mut srt, seq)?;
    }
    let elapsed = start.elapsed();
    println!(
        "sim: {round_trips} round trips of {MSG} B through the API on one thread: {:.0} ns per \
         round trip ({:.0} round trips/s)",
        elapsed.as_nanos() as f64 / round_trips.max(1) as f64,
        round_trips as f64 / elapsed.as_secs_f64(),
    );
    // The loops' passes: rounds (of them, empty ones) and events per round trip.
    let (c1, s1) = (*crt.stats(), *srt.stats());
    let per = |a: u64, b: u64| (b - a) as f64 / round_trips.max(1) as f64;
    println!(
        "per round trip: client {:.2} rounds ({:.2} empty), server {:.2} rounds ({:.2} empty), \
         {:.2} events",
        per(c0.rounds, c1.rounds),
        per(c0.empty_rounds, c1.empty_rounds),
        per(s0.rounds, s1.rounds),
        per(s0.empty_rounds, s1.empty_rounds),
        per(s0.events, s1.events),
    );
    println!("server shard: {:?}", srt.shard_stats());
    Ok(())
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let bad = |what: &str| io::Error::new(ErrorKind::InvalidInput, what.to_owned());
    let family = Family {
        ipv6: args.iter().any(|a| a == "--ipv6"),
    };
    if args.iter().any(|a| a == "--sim") {
        let n = value("--sim")
            .map_or(Ok(100_000), str::parse)
            .map_err(|_| bad("--sim takes a number of round trips"))?;
        return sim(n, family);
    }
    let conns = value("--conns")
        .map_or(Ok(16), str::parse)
        .map_err(|_| bad("--conns takes a number"))?;
    let secs = value("--secs")
        .map_or(Ok(2.0), str::parse)
        .map_err(|_| bad("--secs takes seconds"))?;
    shm(conns, secs, family)
}
