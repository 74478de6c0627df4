//! ustack over the shm link: the server runtime on its own thread over side A of a
//! [`ShmLink::pair`], the client runtime on the bench thread over side B. Each loop
//! busy-polls for [`BUSY_POLL`] (`net.core.busy_poll`) before sleeping on its doorbell, so
//! a round trip costs the two stacks and two cache-line hand-offs between cores, and no
//! wake-up while the exchange is steady.
//!
//! The server is measured alone: its thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) from
//! its first round to its last, and its MIB. It runs the same servers as `ustack serve`
//! where one fits (the echo server of `ustack_runtime::servers` for pingpong); udp-rr
//! has a UDP echo loop and stream a sink that checks every byte against the pattern.

use core::net::{Ipv4Addr, SocketAddrV4};
use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::Value;
use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream, UdpSocket};
use ustack_runtime::runtime::{Events, Interest, MonotonicClock, Runtime, RuntimeBuilder, Sleep};
use ustack_runtime::servers::{Protocol, Server};
use ustack_stack::EthernetAddress;
use ustack_stack::tcp::State;

use super::{Outcome, Run, fill_message, stream_chunk, stream_matches, stream_next};

pub(super) const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 5001);
/// How long an idle loop polls before it sleeps on its doorbell: Linux's suggested
/// `net.core.busy_poll` (Documentation/networking/napi.rst suggests 50 µs).
pub const BUSY_POLL: Duration = Duration::from_micros(50);
/// The longest a message, a reply or a connection may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(2);

pub(super) type Rt = Runtime<ShmPort, MonotonicClock>;

/// The link: Ethernet with loopback's MTU (65535, as `--link sim` and Linux's `lo`), so
/// that stream moves segments of the same size on every server. 64 slots of 64 KiB per
/// direction: 4 MiB in flight each way, more than the 4 MiB send buffer can fill.
pub(super) fn link() -> io::Result<(ShmPort, ShmPort)> {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        ring_size: 64,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    })?;
    Ok((a.remove(0), b.remove(0)))
}

/// Both runtimes: TCP buffers the size Linux's autotuning reaches on loopback.
pub(super) fn builder(ip: Ipv4Addr, mac: u8, seed: u64) -> RuntimeBuilder {
    RuntimeBuilder::new()
        .ipv4(ip, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, mac]))
        .seed(seed)
        .busy_poll(BUSY_POLL)
        .sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
        .sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
}

/// The calling thread's CPU time.
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What the server thread measured.
pub(super) struct ServerReport {
    pub(super) cpu: Duration,
    pub(super) counters: Value,
    /// TIME-WAIT records at the end.
    time_wait: usize,
    /// stream: bytes received and checked, whether all matched, and when the last byte
    /// arrived.
    pub(super) sink: Option<(u64, bool, WallClock)>,
}

/// The server's part of a scenario.
#[derive(Clone, Copy)]
pub(super) enum Serve {
    UdpEcho,
    TcpEcho,
    /// cps: read one request of this many bytes, send it back, close.
    ReplyAndClose(usize),
    Sink,
}

/// The server thread; it runs until `stop` (or, for the sink, until the client's FIN).
pub(super) struct ServerThread {
    stop: Arc<AtomicBool>,
    pub(super) handle: JoinHandle<anyhow::Result<ServerReport>>,
}

impl ServerThread {
    /// The server of `serve` on `addr`, a runtime from `builder` over `device`.
    pub(super) fn start<D: Device + Sleep + Send + 'static>(
        serve: Serve,
        builder: RuntimeBuilder,
        device: D,
        addr: SocketAddrV4,
    ) -> io::Result<ServerThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("ustack-server".into())
            .spawn(move || {
                let mut rt = builder.build(device)?;
                let cpu0 = thread_cpu();
                let sink = match serve {
                    Serve::UdpEcho => udp_echo(&mut rt, &flag, addr).map(|()| None),
                    Serve::TcpEcho => tcp_echo(&mut rt, &flag, addr).map(|()| None),
                    Serve::ReplyAndClose(size) => {
                        reply_and_close(&mut rt, &flag, addr, size).map(|()| None)
                    }
                    Serve::Sink => sink(&mut rt, &flag, addr).map(Some),
                }?;
                Ok(ServerReport {
                    cpu: thread_cpu() - cpu0,
                    counters: rt.stack().mib().to_json(),
                    time_wait: rt.stack().tcp_resources().timewait,
                    sink,
                })
            })?;
        Ok(ServerThread { stop, handle })
    }

    pub(super) fn finish(self) -> anyhow::Result<ServerReport> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok(r) => r.context("the ustack server"),
            Err(_) => bail!("the ustack server thread panicked"),
        }
    }
}

/// Poll the server's loop until `stop`, waking at least every 10 ms to look at it.
pub(super) const STOP_CHECK: Option<Duration> = Some(Duration::from_millis(10));

fn udp_echo<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    addr: SocketAddrV4,
) -> anyhow::Result<()> {
    let sock = UdpSocket::bind(rt, addr)?;
    rt.register(&sock, 0, Interest::READABLE, Mode::Edge)?;
    let (mut events, mut buf) = (Events::with_capacity(4), vec![0u8; 65_536]);
    while !stop.load(Ordering::Relaxed) {
        if rt.poll(&mut events, STOP_CHECK)? == 0 {
            continue;
        }
        loop {
            match sock.recv_from(rt, &mut buf) {
                Ok((n, from)) => {
                    sock.send_to(rt, &buf[..n], from)?;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

fn tcp_echo<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    addr: SocketAddrV4,
) -> anyhow::Result<()> {
    let mut server = Server::bind(rt, Protocol::Echo, addr, None)?;
    while !stop.load(Ordering::Relaxed) {
        server.step(rt, STOP_CHECK)?;
    }
    Ok(())
}

/// cps's server: accept, read a `size`-byte request, send it back and close (the server
/// closes first, as an HTTP/1.0 server does, so TIME-WAIT stays here).
fn reply_and_close<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    addr: SocketAddrV4,
    size: usize,
) -> anyhow::Result<()> {
    let backlog = u32::try_from(rt.stack().sysctl().somaxconn).unwrap_or(u32::MAX);
    let listener = TcpListener::bind(rt, addr, backlog)?;
    const LISTENER: u64 = u64::MAX;
    rt.register(&listener, LISTENER, Interest::READABLE, Mode::Edge)?;
    let mut events = Events::with_capacity(256);
    let mut conns: std::collections::HashMap<u64, (TcpStream, Vec<u8>)> = Default::default();
    let (mut next, mut buf) = (0u64, vec![0u8; 4096]);
    while !stop.load(Ordering::Relaxed) {
        rt.poll(&mut events, STOP_CHECK)?;
        for e in &events {
            if e.token == LISTENER {
                loop {
                    match listener.accept(rt) {
                        Ok((s, _)) => {
                            s.set_nodelay(rt, true)?;
                            rt.register(&s, next, Interest::READABLE, Mode::Edge)?;
                            conns.insert(next, (s, Vec::with_capacity(size)));
                            next += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.into()),
                    }
                }
                continue;
            }
            let Some((s, got)) = conns.get_mut(&e.token) else {
                continue;
            };
            let done = loop {
                match s.read(rt, &mut buf) {
                    Ok(0) => break true,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        if got.len() >= size {
                            s.write(rt, got)?;
                            break true;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if done && let Some((s, _)) = conns.remove(&e.token) {
                s.close(rt)?;
            }
        }
    }
    Ok(())
}

/// Accept one connection and read it to its end, checking every byte; when the last byte
/// came.
fn sink<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    addr: SocketAddrV4,
) -> anyhow::Result<(u64, bool, WallClock)> {
    let listener = TcpListener::bind(rt, addr, 16)?;
    rt.register(&listener, 0, Interest::READABLE, Mode::Edge)?;
    let mut events = Events::with_capacity(4);
    let stream = loop {
        match listener.accept(rt) {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    bail!("stopped before the client connected");
                }
                rt.poll(&mut events, STOP_CHECK)?;
            }
            Err(e) => return Err(e.into()),
        }
    };
    rt.register(&stream, 1, Interest::READABLE, Mode::Edge)?;
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut got, mut verified, mut last) = (0u64, true, WallClock::now());
    loop {
        match stream.read(rt, &mut buf) {
            Ok(0) => return Ok((got, verified, last)),
            Ok(n) => {
                verified &= stream_matches(&chunk, got, &buf[..n]);
                got += n as u64;
                last = WallClock::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    bail!("stopped before the client's FIN");
                }
                rt.poll(&mut events, STOP_CHECK)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The client's runtime and the server thread, set up for `serve`; the stacks' seeds
/// from `--seed` (server: seed + 1, client: seed + 2).
fn start(serve: Serve, seed: u64) -> anyhow::Result<(Rt, ServerThread)> {
    let (a, b) = link().context("creating the shm link")?;
    let server = ServerThread::start(
        serve,
        builder(SERVER_IP, 1, seed.wrapping_add(1)),
        a,
        SERVER,
    )
    .context("starting the server thread")?;
    let rt = builder(CLIENT_IP, 2, seed.wrapping_add(2))
        .build(b)
        .context("building the client runtime")?;
    Ok((rt, server))
}

/// Run the client's loop until `done` holds, failing after [`PATIENCE`]; `done` sees the
/// events of the last poll (none the first time).
fn until(
    rt: &mut Rt,
    events: &mut Events,
    what: &str,
    mut done: impl FnMut(&mut Rt, &Events) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = WallClock::now() + PATIENCE;
    events.clear();
    while !done(rt, events)? {
        if WallClock::now() > deadline {
            bail!("ustack over shm: {what} within {PATIENCE:?}");
        }
        rt.poll(events, Some(PATIENCE))?;
    }
    Ok(())
}

/// The outcome with the server's and the client's counters and the server's CPU time.
fn finish(rt: &Rt, server: ServerReport, o: Outcome) -> Outcome {
    let mut o = o.with_counters(server.counters, rt.stack().mib().to_json());
    o.server_cpu = Some(server.cpu);
    o
}

pub fn udp_rr(run: &Run) -> anyhow::Result<Outcome> {
    let size = run.size;
    let (mut rt, server) = start(Serve::UdpEcho, run.seed)?;
    let sock = UdpSocket::bind(&mut rt, SocketAddrV4::new(CLIENT_IP, 0))?;
    rt.register(&sock, 0, Interest::READABLE, Mode::Edge)?;
    let mut events = Events::with_capacity(4);
    let (mut req, mut resp) = (vec![0u8; size], vec![0u8; 65_536]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        sock.send_to(&mut rt, &req, SERVER)?;
        let mut n = 0;
        until(
            &mut rt,
            &mut events,
            "a UDP echo came back",
            |rt, _| match sock.recv_from(rt, &mut resp) {
                Ok((len, _)) => {
                    n = len;
                    Ok(true)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
                Err(e) => Err(e.into()),
            },
        )?;
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = m.elapsed();
    let report = server.finish()?;
    let o = Outcome::echo(
        "udp-rr", "ustack", "shm", 1, size, seq, elapsed, verified, rtt_ns,
    );
    Ok(finish(&rt, report, o))
}

/// Open `n` connections to the server and wait until all are established (writable);
/// then each is registered for `interest`, with its index as the token.
fn connect(
    rt: &mut Rt,
    events: &mut Events,
    n: u32,
    interest: Interest,
) -> anyhow::Result<Vec<TcpStream>> {
    let mut streams = Vec::new();
    for i in 0..n {
        let s = TcpStream::connect(rt, SERVER)?;
        s.set_nodelay(rt, true)?;
        rt.register(&s, u64::from(i), Interest::WRITABLE, Mode::Edge)?;
        streams.push(s);
    }
    until(rt, events, "every connection established", |rt, _| {
        for s in &streams {
            if s.state(rt)? != State::Established {
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    for (i, s) in streams.iter().enumerate() {
        rt.reregister(s, i as u64, interest, Mode::Edge)?;
    }
    Ok(streams)
}

fn close_all(rt: &mut Rt, streams: Vec<TcpStream>) -> anyhow::Result<()> {
    for s in streams {
        s.close(rt)?;
    }
    // Let the FINs go out and be answered before the server stops.
    let end = WallClock::now() + Duration::from_millis(5);
    while WallClock::now() < end {
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    Ok(())
}

/// One lock-step round: every stream sends one `size`-byte message (message `seq0 + i` on
/// stream `i`) and reads its echo; with `to_fin`, also the server's FIN after it. Whether
/// every echo was right.
fn round(
    rt: &mut Rt,
    events: &mut Events,
    streams: &[TcpStream],
    seq0: u64,
    size: usize,
    to_fin: bool,
) -> anyhow::Result<bool> {
    let mut msg = vec![0u8; size];
    let mut got: Vec<Vec<u8>> = vec![Vec::with_capacity(size); streams.len()];
    for (i, s) in streams.iter().enumerate() {
        fill_message(&mut msg, seq0 + i as u64);
        if s.write(rt, &msg)? != size {
            bail!("ustack: a {size}-byte message did not fit the send buffer");
        }
    }
    let mut buf = [0u8; 4096];
    let mut ended = vec![false; streams.len()];
    let mut left = streams.len();
    until(
        rt,
        events,
        "every echo of a round came back",
        |rt, events| {
            for e in events {
                let i = e.token as usize;
                while !ended[i] {
                    match streams[i].read(rt, &mut buf) {
                        Ok(0) if to_fin => ended[i] = true,
                        Ok(0) => bail!("ustack: the server closed a connection"),
                        Ok(n) => {
                            got[i].extend_from_slice(&buf[..n]);
                            ended[i] = !to_fin && got[i].len() == size;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e.into()),
                    }
                    if ended[i] {
                        left -= 1;
                    }
                }
            }
            Ok(left == 0)
        },
    )?;
    let mut verified = true;
    for (i, echo) in got.iter().enumerate() {
        fill_message(&mut msg, seq0 + i as u64);
        verified &= *echo == msg;
    }
    Ok(verified)
}

/// pingpong: `conns` connections kept for the run, one message each per round.
pub fn pingpong(run: &Run) -> anyhow::Result<Outcome> {
    lockstep(run, false)
}

/// cps: rounds of `conns` short connections, each: connect, one `size`-byte request, its
/// echo, the server's FIN, our close. A round's time is the latency recorded.
pub fn cps(run: &Run) -> anyhow::Result<Outcome> {
    lockstep(run, true)
}

fn lockstep(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let serve = if cps {
        Serve::ReplyAndClose(size)
    } else {
        Serve::TcpEcho
    };
    let (mut rt, server) = start(serve, run.seed)?;
    let mut events = Events::with_capacity(1024);
    let kept = if cps {
        Vec::new()
    } else {
        connect(&mut rt, &mut events, conns, Interest::READABLE)?
    };
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let seq0 = rounds * u64::from(conns);
        if cps {
            let fresh = connect(&mut rt, &mut events, conns, Interest::READABLE)?;
            verified &= round(&mut rt, &mut events, &fresh, seq0, size, true)?;
            for s in fresh {
                s.close(&mut rt)?;
            }
        } else {
            verified &= round(&mut rt, &mut events, &kept, seq0, size, false)?;
        }
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let elapsed = m.elapsed();
    close_all(&mut rt, kept)?;
    let report = server.finish()?;
    let count = rounds * u64::from(conns);
    let time_wait = report.time_wait;
    let scenario = if cps { "cps" } else { "pingpong" };
    let o = Outcome::echo(
        scenario, "ustack", "shm", conns, size, count, elapsed, verified, rtt_ns,
    );
    let o = finish(&rt, report, o);
    Ok(if cps { o.with_time_wait(time_wait) } else { o })
}

/// stream: for `--duration`, or until exactly `--bytes` are sent; the rate is the bytes
/// the server read over the time to the last of them.
pub fn stream(run: &Run) -> anyhow::Result<Outcome> {
    let (mut rt, server) = start(Serve::Sink, run.seed)?;
    let mut events = Events::with_capacity(4);
    let s = connect(&mut rt, &mut events, 1, Interest::WRITABLE)?.remove(0);
    let chunk = stream_chunk();
    let mut sent = 0u64;
    let mut m = run.meter();
    let limit = m.bytes();
    while m.going(sent) {
        loop {
            let piece = stream_next(&chunk, sent, limit);
            if piece.is_empty() {
                break;
            }
            match s.write(&mut rt, piece) {
                Ok(n) => sent += n as u64,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
    }
    // The sender's FIN: the server reads to it and notes when it came.
    s.shutdown(&mut rt, Shutdown::Write)?;
    let server_done = &server.handle;
    let deadline = WallClock::now() + PATIENCE;
    while !server_done.is_finished() {
        if WallClock::now() > deadline {
            bail!("ustack stream over shm: the server did not read to the end");
        }
        rt.run_once(Some(Duration::from_millis(1)))?;
    }
    let mut report = server.finish()?;
    let Some((got, matched, last_byte)) = report.sink.take() else {
        bail!("ustack stream over shm: the server reported no transfer");
    };
    close_all(&mut rt, vec![s])?;
    let o = Outcome::stream(
        "ustack",
        "shm",
        got,
        last_byte.saturating_duration_since(m.start()),
        matched && got == sent && limit.is_none_or(|l| got == l),
    );
    Ok(finish(&rt, report, o))
}
