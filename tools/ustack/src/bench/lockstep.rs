//! pingpong (N connections exchanging messages in lock-step, every echo checked) and cps
//! (rounds of N short connections, the server closing first): the same rounds, with
//! connections kept or opened anew.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant as WallClock};

use anyhow::Context;

use super::linux;
use super::measure::{Run, cpu_between, workers};
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

/// `n` kernel connections to the Linux server on 127.0.0.1:`port` (nodelay, reads time
/// out after 1 s).
fn linux_connections(port: u16, n: u32) -> anyhow::Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .context("Linux: connect over loopback")?;
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(Duration::from_secs(1)))?;
        conns.push(c);
    }
    Ok(conns)
}

/// pingpong or cps against a Linux server in a process of its own (the baseline echo
/// server; for cps, one that replies and closes first), in the same lock-step rounds as
/// ustack's ([`Sim::round`]), the client on kernel sockets in the bench process: with
/// `cps`, new connections every round, the client reading the end of stream and closing.
pub fn linux(run: &Run, cps: bool) -> anyhow::Result<Outcome> {
    let (conns, size) = (run.conns, run.size);
    let (server, port) = if cps {
        linux::Peer::spawn("reply-close", &["--size".into(), size.to_string()])?
    } else {
        linux::Peer::spawn("echo", &workers(run))?
    };
    let mut kept = if cps {
        Vec::new()
    } else {
        linux_connections(port, conns)?
    };
    let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
    let (mut rtt_ns, mut verified, mut rounds) = (Vec::new(), true, 0u64);
    let cpu0 = server.cpu();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        let mut fresh = if cps {
            linux_connections(port, conns)?
        } else {
            Vec::new()
        };
        let streams = if cps { &mut fresh } else { &mut kept };
        let seq0 = rounds * u64::from(conns);
        for (i, c) in streams.iter_mut().enumerate() {
            fill_message(&mut msg, seq0 + i as u64);
            c.write_all(&msg)?;
        }
        for (i, c) in streams.iter_mut().enumerate() {
            c.read_exact(&mut buf)
                .context("Linux: the client got no echo")?;
            fill_message(&mut msg, seq0 + i as u64);
            verified &= buf == msg;
            if cps {
                verified &= matches!(c.read(&mut buf), Ok(0));
            }
        }
        // cps: the client's sockets close here, after the server's FIN.
        drop(fresh);
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        rounds += 1;
    }
    let elapsed = m.elapsed();
    let cpu = cpu_between(cpu0, server.cpu());
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
    if cps {
        // The reply-and-close checker has one thread: --shards does not apply.
        return Ok(o.with_linux_time_wait());
    }
    o.shards = run.shards;
    Ok(o)
}
