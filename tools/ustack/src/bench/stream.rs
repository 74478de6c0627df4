//! stream: one TCP connection moving bytes one way as fast as it can, every byte checked
//! against the pattern sent.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};

use super::linux;
use super::measure::{Meter, Run, Until, cpu_between};
use super::outcome::Outcome;
use super::pattern::{stream_chunk, stream_matches, stream_next};
use super::sim::Sim;

/// stream over sim: for `--duration`, or until exactly `--bytes` have arrived.
pub fn ustack(run: &Run) -> anyhow::Result<Outcome> {
    let mut sim = Sim::new(run);
    let listener = sim.listener(1)?;
    let (clients, servers) = sim.connections(listener, 1)?;
    let (c, s) = (clients[0], servers[0]);
    let chunk = stream_chunk();
    let mut buf = vec![0u8; 1 << 16];
    let (mut sent, mut got, mut verified) = (0u64, 0u64, true);
    let mut m = run.meter();
    let limit = m.bytes();
    let mut last_byte = WallClock::now();
    while m.going(got) {
        sim.tick();
        let p = &mut sim.p;
        loop {
            let piece = stream_next(&chunk, sent, limit);
            if piece.is_empty() {
                break;
            }
            match p.a.tcp_send(p.now, c, piece) {
                Ok(n) => {
                    sent += n as u64;
                    if n < piece.len() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        p.settle();
        let (now, before) = (p.now, got);
        while let Ok(n) = p.b.tcp_recv(now, s, &mut buf) {
            if n == 0 {
                break;
            }
            verified &= stream_matches(&chunk, got, &buf[..n]);
            got += n as u64;
        }
        if got > before {
            last_byte = WallClock::now();
        } else if last_byte.elapsed() > sim.patience {
            bail!(
                "ustack stream over sim: no data arrived within {:?} (at byte {got})",
                sim.patience
            );
        }
    }
    verified &= limit.is_none_or(|l| got == l);
    Ok(Outcome::stream("ustack", "sim", got, m.elapsed(), verified).with_pair(&sim.p))
}

/// stream through the kernel over loopback: the client writes from the bench process, a
/// sink in a process of its own reads and checks every byte and says when the last one
/// came (on the monotonic clock both processes share).
pub fn linux(run: &Run) -> anyhow::Result<Outcome> {
    linux_stream_with(run, "loopback", &run.peer_addr_args(), |port| {
        TcpStream::connect((run.loopback(), port))
    })
}

/// stream's kernel client over `conns` connections, each written from a thread of its
/// own: the pattern (from its start on every connection) for the run (for `--duration`,
/// or exactly `--bytes` split evenly over the connections, the first ones taking the
/// remainder), then a half-close; the bytes written on each, and the run's meter.
pub fn kernel_stream_clients(
    run: &Run,
    conns: Vec<TcpStream>,
) -> anyhow::Result<(Vec<u64>, Meter)> {
    let mut m = run.meter();
    let n = conns.len() as u64;
    let deadline = match run.until {
        Until::Time(d) => Some(m.start() + d),
        Until::Bytes(_) => None,
    };
    let share = |k: u64| m.bytes().map(|b| b / n + u64::from(k < b % n));
    let sent = std::thread::scope(|scope| {
        let writers: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(k, c)| {
                let limit = share(k as u64);
                scope.spawn(move || write_pattern(c, limit, deadline))
            })
            .collect();
        writers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| anyhow::anyhow!("a stream writer panicked"))?
                    .map_err(anyhow::Error::from)
            })
            .collect::<anyhow::Result<Vec<u64>>>()
    })?;
    // The measured phase ends with the last writer (a run past its bytes or its time).
    let total = sent.iter().sum();
    while m.going(total) {
        if deadline.is_none() {
            bail!("the writers stopped at {total} bytes, short of --bytes");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((sent, m))
}

/// Writes the pattern on `c` until `limit` bytes (or, without one, until `deadline`),
/// then half-closes; the bytes written.
fn write_pattern(
    mut c: TcpStream,
    limit: Option<u64>,
    deadline: Option<WallClock>,
) -> std::io::Result<u64> {
    let chunk = stream_chunk();
    let mut sent = 0u64;
    while deadline.is_none_or(|d| WallClock::now() < d) {
        let piece = stream_next(&chunk, sent, limit);
        if piece.is_empty() {
            break;
        }
        sent += c.write(piece)? as u64;
    }
    c.shutdown(std::net::Shutdown::Write)?;
    Ok(sent)
}

/// stream to the Linux sink (a `bench-peer` process started with `peer_args`), over
/// `link`, from `run.conns` kernel clients `connect` opens to the sink's port (the sink
/// told how many: `--conns`).
pub fn linux_stream_with(
    run: &Run,
    link: &'static str,
    peer_args: &[String],
    connect: impl Fn(u16) -> std::io::Result<TcpStream>,
) -> anyhow::Result<Outcome> {
    let mut args = peer_args.to_vec();
    args.extend(["--conns".to_owned(), run.conns.to_string()]);
    let (mut server, port) = linux::Peer::spawn("sink", &args)?;
    let conns = (0..run.conns)
        .map(|_| connect(port))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("Linux: connect over {link}"))?;
    let addresses = linux::stream_addresses(&conns[0]);
    let cpu0 = server.cpu();
    let start_ns = linux::monotonic_ns();
    let (sent, m) = kernel_stream_clients(run, conns)?;
    let sent: u64 = sent.iter().sum();
    let limit = m.bytes();
    let words = server.expect("sink", linux::ANSWER)?;
    let cpu = cpu_between(cpu0, server.cpu());
    server.stop()?;
    let field = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    let (Some(got), Some(matched), Some(last_ns)) = (field(0), field(1), field(2)) else {
        bail!("Linux stream: the sink reported {words:?}");
    };
    let mut o = Outcome::stream(
        "linux",
        link,
        got,
        Duration::from_nanos(last_ns.saturating_sub(start_ns)),
        matched == 1 && got == sent && limit.is_none_or(|l| got == l),
    );
    o.conns = run.conns;
    o.server_cpu = cpu;
    o.addresses = addresses;
    Ok(o)
}
