//! udp-rr: one flow of UDP request/response in lock-step, every echo checked.

use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant as WallClock};

use anyhow::Context;
use rustix::event::epoll;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags};
use ustack_testkit::{A_IP, B_IP};

use super::args::REORDER_HOLD;
use super::linux::{self, ClientPin, Waiter};
use super::measure::{LinuxMode, Run, cpu_between, workers};
use super::outcome::Outcome;
use super::pattern::{fill_message, message_seq};
use super::sim::Sim;

/// udp-rr over sim. A lost request or echo never comes back by itself, so the client
/// sends the request again when its echo is late (twice the one-way delay and reorder
/// hold, plus 10 ms); echoes of earlier requests (resent or duplicated) are skipped.
pub fn ustack(run: &Run) -> anyhow::Result<Outcome> {
    let size = run.size;
    let mut sim = Sim::new(run);
    let p = &mut sim.p;
    let client = p.a.udp_bind(SocketAddrV4::new(A_IP, 0))?;
    let server = p.b.udp_bind(SocketAddrV4::new(B_IP, 7))?;
    let server_addr = SocketAddrV4::new(B_IP, 7);
    let resend_after = 2 * (run.sim.a_to_b.delay + REORDER_HOLD) + Duration::from_millis(10);
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        sim.tick();
        sim.p.a.udp_send_to(sim.p.now, client, &req, server_addr)?;
        sim.p.settle();
        let mut sent_at = t0;
        verified &= sim.until(sim.patience, "no UDP echo came back", |p| {
            while let Ok((n, from)) = p.b.udp_recv_from(server, &mut srv_buf) {
                p.b.udp_send_to(p.now, server, &srv_buf[..n], from)?;
            }
            p.settle();
            while let Ok((n, _)) = p.a.udp_recv_from(client, &mut resp) {
                match message_seq(&resp[..n]) {
                    Some(s) if s < seq => continue,
                    Some(s) if s == seq => return Ok(Some(resp[..n] == req[..])),
                    _ => return Ok(Some(false)),
                }
            }
            if sent_at.elapsed() > resend_after {
                p.a.udp_send_to(p.now, client, &req, server_addr)?;
                sent_at = WallClock::now();
            }
            Ok(None)
        })?;
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    Ok(Outcome::echo(
        "udp-rr",
        "ustack",
        "sim",
        1,
        size,
        seq,
        m.elapsed(),
        verified,
        rtt_ns,
    )
    .with_pair(&sim.p))
}

/// udp-rr against the baseline UDP echo server in a process of its own, in
/// `run.linux_mode`; the client a non-blocking kernel socket of the bench thread, waiting
/// in epoll (spinning in busy mode, pinned to its own core).
pub fn linux(run: &Run) -> anyhow::Result<Outcome> {
    let (size, mode) = (run.size, run.linux_mode);
    let mut args = linux::mode_args(mode);
    args.extend(workers(run));
    args.extend(run.peer_addr_args());
    let (mut server, port) = linux::Peer::spawn("udp-echo", &args)?;
    let _pin = ClientPin::new(mode.cpus().map(|(_, client)| client))?;
    let client =
        UdpSocket::bind((run.loopback(), 0)).context("bind the Linux client socket on loopback")?;
    client.connect((run.loopback(), port))?;
    let addresses = linux::addresses_json(
        client.local_addr().ok().map(|a| a.to_string()),
        client.peer_addr().ok().map(|a| a.to_string()),
    );
    client.set_nonblocking(true)?;
    let client = OwnedFd::from(client);
    let mut w = Waiter::new(mode == LinuxMode::Busy)?;
    w.add(&client, 0, epoll::EventFlags::IN)?;
    let (mut req, mut resp) = (vec![0u8; size], vec![0u8; 2048]);
    let (mut rtt_ns, mut verified, mut seq) = (Vec::new(), true, 0u64);
    let cpu0 = server.cpu();
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        rustix::net::send(&client, &req, SendFlags::empty())?;
        let n = loop {
            w.wait(Duration::from_secs(1), "udp-rr: the client got no echo")?;
            match rustix::net::recv(&client, &mut resp, RecvFlags::DONTWAIT) {
                Ok((n, _)) => break n,
                Err(Errno::AGAIN | Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = m.elapsed();
    let cpu = cpu_between(cpu0, server.cpu());
    let waits = server.waits()?;
    server.stop()?;
    let mut o = Outcome::echo(
        "udp-rr", "linux", "loopback", 1, size, seq, elapsed, verified, rtt_ns,
    );
    o.server_cpu = cpu;
    o.mode = mode.name();
    o.server_waits = waits;
    o.addresses = addresses;
    o.shards = if mode == LinuxMode::IoUring {
        1
    } else {
        run.shards
    };
    Ok(o)
}
