//! pingpong (N connections exchanging messages in lock-step, every echo checked) and cps
//! (rounds of N short connections, the server closing first): the same rounds, with
//! connections kept or opened anew.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use rustix::event::epoll;
use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, sockopt};

use super::linux::{self, ClientPin, Waiter};
use super::measure::{LinuxMode, Run, cpu_between, workers};
use super::outcome::Outcome;
use super::pattern::fill_message;
use super::sim::Sim;

/// pingpong (`cps` false: `conns` connections kept for the run) or cps (a new set of
/// connections every round, closed by the server after its reply) over sim, in lock-step
/// rounds ([`Sim::round`]).
pub fn ustack(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let mut sim = Sim::new(run);
    let listener = sim.listener(conns)?;
    let mut kept = if cps {
        None
    } else {
        Some(sim.connections(listener, conns)?)
    };
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let (clients, servers) = match &kept {
            Some(pairs) => pairs.clone(),
            None => sim.connections(listener, conns)?,
        };
        let seq0 = rounds * u64::from(conns);
        verified &= sim.round((&clients, &servers), seq0, size, cps)?;
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    kept.take();
    let count = rounds * u64::from(conns);
    let scenario = if cps { "cps" } else { "pingpong" };
    let o = Outcome::echo(
        scenario,
        "ustack",
        "sim",
        conns,
        size,
        count,
        m.elapsed(),
        verified,
        rtt_ns,
    );
    let o = if cps {
        o.with_time_wait(sim.p.b.tcp_resources().timewait)
    } else {
        o
    };
    Ok(o.with_pair(&sim.p))
}

/// `n` non-blocking kernel connections to `dst` (loopback, nodelay), opened at once and
/// registered with `w` for input, keyed by their index.
fn linux_connections(w: &mut Waiter, dst: SocketAddr, n: u32) -> anyhow::Result<Vec<OwnedFd>> {
    let mut socks = Vec::with_capacity(n as usize);
    let connecting = Waiter::new(false)?;
    for i in 0..n {
        let fd = nonblocking_socket(dst)?;
        sockopt::set_tcp_nodelay(&fd, true)?;
        match rustix::net::connect(&fd, &dst) {
            Ok(()) | Err(Errno::INPROGRESS) => {}
            Err(e) => return Err(e).context("Linux: connect over loopback"),
        }
        connecting.add(&fd, u64::from(i), epoll::EventFlags::OUT)?;
        socks.push(fd);
    }
    let mut connecting = connecting;
    let mut open = vec![false; n as usize];
    let mut left = n as usize;
    while left > 0 {
        for (i, _) in connecting.wait(Duration::from_secs(5), "connecting")? {
            let fd = &socks[i as usize];
            if !std::mem::replace(&mut open[i as usize], true) {
                if let Err(e) = sockopt::socket_error(fd)? {
                    bail!("Linux: connect over loopback: {e}");
                }
                epoll::delete(&connecting.epoll, fd)?;
                w.add(fd, i, epoll::EventFlags::IN)?;
                left -= 1;
            }
        }
    }
    Ok(socks)
}

/// A non-blocking TCP socket of `dst`'s family.
fn nonblocking_socket(dst: SocketAddr) -> anyhow::Result<OwnedFd> {
    let family = match dst {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    Ok(rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}

/// The Linux client's connections' echoes: each one's bytes so far.
struct Echoes {
    got: Vec<Vec<u8>>,
    msg: Vec<u8>,
    scratch: Vec<u8>,
}

impl Echoes {
    fn new(n: usize, size: usize) -> Echoes {
        Echoes {
            got: (0..n).map(|_| Vec::with_capacity(size)).collect(),
            msg: vec![0; size],
            scratch: vec![0; size.max(64)],
        }
    }
}

/// One pingpong round over `socks`: message `seq0 + i` on connection `i`, every echo
/// awaited (sleeping or spinning, as `w` does) and checked.
fn pingpong_round(
    w: &mut Waiter,
    socks: &[OwnedFd],
    e: &mut Echoes,
    seq0: u64,
    patience: Duration,
) -> anyhow::Result<bool> {
    let size = e.msg.len();
    for (i, fd) in socks.iter().enumerate() {
        fill_message(&mut e.msg, seq0 + i as u64);
        if rustix::net::send(fd, &e.msg, SendFlags::NOSIGNAL)? != size {
            bail!("Linux: a {size}-byte message did not fit the send buffer");
        }
        e.got[i].clear();
    }
    let (mut left, mut ok) = (socks.len(), true);
    while left > 0 {
        for (i, _) in w.wait(patience, "the client got no echo")? {
            let i = i as usize;
            let want = size - e.got[i].len();
            if want == 0 {
                continue;
            }
            match rustix::net::recv(&socks[i], &mut e.scratch[..want], RecvFlags::DONTWAIT) {
                Ok((0, _)) => bail!("Linux: the server closed a connection"),
                Ok((n, _)) => {
                    e.got[i].extend_from_slice(&e.scratch[..n]);
                    if e.got[i].len() == size {
                        fill_message(&mut e.msg, seq0 + i as u64);
                        ok &= e.got[i] == e.msg;
                        left -= 1;
                    }
                }
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(err) => return Err(err.into()),
            }
        }
    }
    Ok(ok)
}

/// One cps round: `n` connections opened at once (non-blocking, edge-triggered for input
/// and output: one `epoll_ctl` each), each sending message `seq0 + i` once connected,
/// reading its echo and the server's end of stream, then closing. Whether every reply was
/// right.
fn cps_round(
    w: &mut Waiter,
    (dst, addresses): (SocketAddr, &mut Option<serde_json::Value>),
    n: usize,
    e: &mut Echoes,
    seq0: u64,
    patience: Duration,
) -> anyhow::Result<bool> {
    let size = e.msg.len();
    let mut socks: Vec<Option<OwnedFd>> = Vec::with_capacity(n);
    let mut sent = vec![false; n];
    for i in 0..n {
        let fd = nonblocking_socket(dst)?;
        match rustix::net::connect(&fd, &dst) {
            Ok(()) | Err(Errno::INPROGRESS) => {}
            Err(err) => return Err(err).context("Linux: connect over loopback"),
        }
        w.add(
            &fd,
            i as u64,
            epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::ET,
        )?;
        socks.push(Some(fd));
        e.got[i].clear();
    }
    let (mut left, mut ok) = (n, true);
    while left > 0 {
        for (i, flags) in w.wait(patience, "a short connection got no reply")? {
            let i = i as usize;
            let Some(fd) = socks[i].as_ref() else {
                continue;
            };
            if !sent[i] {
                if !flags.contains(epoll::EventFlags::OUT) {
                    continue;
                }
                if addresses.is_none() {
                    *addresses = Some(fd_addresses(fd));
                }
                fill_message(&mut e.msg, seq0 + i as u64);
                let n = rustix::net::send(fd, &e.msg, SendFlags::NOSIGNAL)
                    .context("Linux: connect over loopback")?;
                if n != size {
                    bail!("Linux: a {size}-byte request did not fit the send buffer");
                }
                sent[i] = true;
            }
            // Edge-triggered: read until the socket has nothing more.
            loop {
                match rustix::net::recv(fd, &mut e.scratch, RecvFlags::DONTWAIT) {
                    Ok((0, _)) => {
                        fill_message(&mut e.msg, seq0 + i as u64);
                        ok &= e.got[i] == e.msg;
                        // Closed here, after the server's FIN.
                        socks[i] = None;
                        left -= 1;
                        break;
                    }
                    Ok((k, _)) => e.got[i].extend_from_slice(&e.scratch[..k]),
                    Err(Errno::AGAIN | Errno::INTR) => break,
                    Err(err) => return Err(err).context("Linux: reading a reply"),
                }
            }
        }
    }
    Ok(ok)
}

/// pingpong or cps against a Linux server in a process of its own, in `run.linux_mode`
/// (the baseline echo server, or for cps one that replies and closes first: sleeping in
/// epoll, spinning, or on io_uring), in the same lock-step rounds as ustack's
/// ([`Sim::round`]). The client is the bench thread on non-blocking kernel sockets, every
/// connection of a round at once, waiting in epoll (spinning in busy mode, pinned to its
/// own core); with `cps`, new connections every round, the client reading the end of
/// stream and closing.
pub fn linux(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let mode = run.linux_mode;
    let (conns, size) = (run.conns, run.size);
    let mut args = linux::mode_args(mode);
    args.extend(run.peer_addr_args());
    let (mut server, port) = if cps {
        args.extend(["--size".into(), size.to_string()]);
        linux::Peer::spawn("reply-close", &args)?
    } else {
        args.extend(workers(run));
        linux::Peer::spawn("echo", &args)?
    };
    let _pin = ClientPin::new(mode.cpus().map(|(_, client)| client))?;
    let mut w = Waiter::new(mode == LinuxMode::Busy)?;
    let dst = SocketAddr::new(run.loopback(), port);
    let kept = if cps {
        Vec::new()
    } else {
        linux_connections(&mut w, dst, conns)?
    };
    // cps: the first round's first connection says its addresses.
    let mut addresses = kept.first().map(fd_addresses);
    let mut echoes = Echoes::new(conns as usize, size);
    let patience = Duration::from_secs(1);
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let cpu0 = server.cpu();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let seq0 = rounds * u64::from(conns);
        verified &= if cps {
            let c = (dst, &mut addresses);
            cps_round(&mut w, c, conns as usize, &mut echoes, seq0, patience)?
        } else {
            pingpong_round(&mut w, &kept, &mut echoes, seq0, patience)?
        };
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let elapsed = m.elapsed();
    let cpu = cpu_between(cpu0, server.cpu());
    let waits = server.waits()?;
    drop(kept);
    server.stop()?;
    let count = rounds * u64::from(conns);
    let mut o = Outcome::echo(
        if cps { "cps" } else { "pingpong" },
        "linux",
        "loopback",
        conns,
        size,
        count,
        elapsed,
        verified,
        rtt_ns,
    );
    o.server_cpu = cpu;
    o.mode = mode.name();
    o.server_waits = waits;
    o.addresses = addresses.unwrap_or_default();
    if cps {
        // The reply-and-close server has one thread: --shards does not apply.
        return Ok(o.with_linux_time_wait());
    }
    // io_uring's server is one thread, whatever --shards says.
    o.shards = if mode == LinuxMode::IoUring {
        1
    } else {
        run.shards
    };
    Ok(o)
}

/// A kernel socket's two ends as the JSON's `addresses` (`getsockname`, `getpeername`).
fn fd_addresses(fd: &OwnedFd) -> serde_json::Value {
    let name = |a: rustix::io::Result<Option<rustix::net::SocketAddrAny>>| {
        a.ok()
            .flatten()
            .and_then(|a| SocketAddr::try_from(a).ok())
            .map(|a| a.to_string())
    };
    linux::addresses_json(
        name(rustix::net::getsockname(fd).map(Some)),
        name(rustix::net::getpeername(fd)),
    )
}
