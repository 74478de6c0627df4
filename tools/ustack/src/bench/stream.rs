//! stream: one TCP connection moving bytes one way as fast as it can, every byte checked
//! against the pattern sent.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};

use super::linux;
use super::measure::{Meter, Run, cpu_between};
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

/// stream's kernel client: writes the pattern on `c` for the run (for `--duration`, or
/// exactly `--bytes`), then half-closes; the bytes written and the run's meter.
pub fn kernel_stream_client(run: &Run, c: &mut TcpStream) -> anyhow::Result<(u64, Meter)> {
    let chunk = stream_chunk();
    let mut sent = 0u64;
    let mut m = run.meter();
    let limit = m.bytes();
    while m.going(sent) {
        let piece = stream_next(&chunk, sent, limit);
        if piece.is_empty() {
            break;
        }
        sent += c.write(piece)? as u64;
    }
    c.shutdown(std::net::Shutdown::Write)?;
    Ok((sent, m))
}

/// stream to the Linux sink (a `bench-peer` process started with `peer_args`), over
/// `link`, from the kernel client `connect` opens to the sink's port.
pub fn linux_stream_with(
    run: &Run,
    link: &'static str,
    peer_args: &[String],
    connect: impl FnOnce(u16) -> std::io::Result<TcpStream>,
) -> anyhow::Result<Outcome> {
    let (mut server, port) = linux::Peer::spawn("sink", peer_args)?;
    let mut c = connect(port).with_context(|| format!("Linux: connect over {link}"))?;
    let addresses = linux::stream_addresses(&c);
    let cpu0 = server.cpu();
    let start_ns = linux::monotonic_ns();
    let (sent, m) = kernel_stream_client(run, &mut c)?;
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
    o.server_cpu = cpu;
    o.addresses = addresses;
    Ok(o)
}
