//! The sim harness: two ustack stacks over the in-process sim link, in the bench thread,
//! on the real clock (`--link sim`), and the faults it injected.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant as WallClock};

use anyhow::bail;
use serde_json::{Value, json};
use ustack_stack::{Instant, ListenerHandle, TcpHandle};
use ustack_testkit::{B_IP, Pair};

use super::measure::Run;
use super::pattern::fill_message;

/// How long connecting may take over sim: a lost SYN is sent again after 1 s, then 3 s.
pub const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Two ustack stacks over the sim link (the run's faults, loopback's MTU) on the real
/// clock, with TCP buffers the size Linux's autotuning reaches on loopback.
pub struct Sim {
    pub p: Pair,
    /// Time zero of the pair's clock.
    start: WallClock,
    /// How long a message or an echo may take before the run fails.
    pub patience: Duration,
}

impl Sim {
    pub fn new(run: &Run) -> Sim {
        let mut p = Pair::new(run.sim.clone());
        for s in [&mut p.a, &mut p.b] {
            s.set_sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
                .expect("valid sysctl");
            s.set_sysctl("net.ipv4.tcp_rmem.default", 4 << 20)
                .expect("valid sysctl");
        }
        Sim {
            p,
            start: WallClock::now(),
            patience: run.patience,
        }
    }

    /// Move the pair's clock to the wall clock's present.
    pub fn tick(&mut self) {
        self.p.now = Instant::from_nanos(self.start.elapsed().as_nanos() as u64).max(self.p.now);
    }

    /// Run the pair on the real clock until `step` yields, failing after `patience`:
    /// `what` says what did not happen.
    pub fn until<T>(
        &mut self,
        patience: Duration,
        what: &str,
        mut step: impl FnMut(&mut Pair) -> anyhow::Result<Option<T>>,
    ) -> anyhow::Result<T> {
        let deadline = WallClock::now() + patience;
        loop {
            if let Some(v) = step(&mut self.p)? {
                return Ok(v);
            }
            if WallClock::now() > deadline {
                bail!("ustack over sim: {what} within {patience:?}");
            }
            self.tick();
            self.p.settle();
        }
    }

    /// B's listener for the TCP scenarios, with room for `n` connections at once.
    pub fn listener(&mut self, n: u32) -> anyhow::Result<ListenerHandle> {
        Ok(self.p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), n)?)
    }

    /// Open `n` connections A -> B's `listener`; returns (client handles, server
    /// handles), paired by index.
    pub fn connections(
        &mut self,
        listener: ListenerHandle,
        n: u32,
    ) -> anyhow::Result<(Vec<TcpHandle>, Vec<TcpHandle>)> {
        let mut clients = Vec::new();
        for _ in 0..n {
            self.tick();
            let p = &mut self.p;
            clients.push(p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))?);
        }
        let mut by_port = std::collections::HashMap::new();
        self.until(
            CONNECT_PATIENCE,
            "not every connection was established",
            |p| {
                while let Ok((h, peer)) = p.b.tcp_accept(listener) {
                    by_port.insert(peer.port(), h);
                }
                Ok((by_port.len() == n as usize).then_some(()))
            },
        )?;
        let mut servers = Vec::new();
        self.tick();
        let p = &mut self.p;
        for &c in &clients {
            let port = p.a.tcp_info(c)?.local.port();
            servers.push(by_port[&port]);
            p.a.tcp_set_nodelay(p.now, c, true)?;
            p.b.tcp_set_nodelay(p.now, by_port[&port], true)?;
        }
        Ok((clients, servers))
    }

    /// Read exactly `buf.len()` bytes from `h` on side A (`client`) or B.
    pub fn read_exact(&mut self, client: bool, h: TcpHandle, buf: &mut [u8]) -> anyhow::Result<()> {
        let mut got = 0;
        self.until(self.patience, "a message did not arrive", |p| {
            let now = p.now;
            let stack = if client { &mut p.a } else { &mut p.b };
            loop {
                match stack.tcp_recv(now, h, &mut buf[got..]) {
                    Ok(0) => bail!("ustack: connection closed mid-message"),
                    Ok(n) => got += n,
                    Err(ustack_stack::Error::WouldBlock) => return Ok(None),
                    Err(e) => bail!("ustack: {e}"),
                }
                if got == buf.len() {
                    return Ok(Some(()));
                }
            }
        })
    }

    /// Wait for the end of stream on client `h`; whether nothing came before it.
    pub fn read_eof(&mut self, h: TcpHandle) -> anyhow::Result<bool> {
        let mut byte = [0u8; 1];
        self.until(
            self.patience,
            "the server's FIN did not arrive",
            |p| match p.a.tcp_recv(p.now, h, &mut byte) {
                Ok(0) => Ok(Some(true)),
                Ok(_) => Ok(Some(false)),
                Err(ustack_stack::Error::WouldBlock) => Ok(None),
                Err(e) => bail!("ustack: {e}"),
            },
        )
    }

    /// One lock-step round: every client sends one `size`-byte message (message
    /// `seq0 + i` on connection `i`), the server echoes each (and, with `close`, closes
    /// after its reply), every client reads its echo (and, with `close`, the end of
    /// stream, then closes). Whether every echo was right.
    pub fn round(
        &mut self,
        (clients, servers): (&[TcpHandle], &[TcpHandle]),
        seq0: u64,
        size: usize,
        close: bool,
    ) -> anyhow::Result<bool> {
        let (mut msg, mut buf) = (vec![0u8; size], vec![0u8; size]);
        self.tick();
        for (i, &c) in clients.iter().enumerate() {
            fill_message(&mut msg, seq0 + i as u64);
            if self.p.a.tcp_send(self.p.now, c, &msg)? != size {
                bail!("ustack: a {size}-byte message did not fit the send buffer");
            }
        }
        self.p.settle();
        for &s in servers {
            self.read_exact(false, s, &mut buf)?;
            let p = &mut self.p;
            p.b.tcp_send(p.now, s, &buf)?;
            if close {
                p.b.tcp_close(p.now, s)?;
            }
        }
        self.p.settle();
        let mut verified = true;
        for (i, &c) in clients.iter().enumerate() {
            self.read_exact(true, c, &mut buf)?;
            fill_message(&mut msg, seq0 + i as u64);
            verified &= buf == msg;
            if close {
                // The server's FIN follows its reply: end of stream, then our close.
                verified &= self.read_eof(c)?;
                self.p.a.tcp_close(self.p.now, c)?;
            }
        }
        if close {
            self.p.settle();
        }
        Ok(verified)
    }
}

/// The faults of a sim pair's link (the same each way) and what they did to the frames
/// of each direction (A, the client, to B, the server, and back); null for a clean link.
pub fn faults(p: &Pair) -> Value {
    use ustack_dev::sim::Side;
    let c = p.link.config(Side::A);
    if c.loss == 0.0
        && c.duplicate == 0.0
        && c.reorder == 0.0
        && c.corrupt == 0.0
        && c.delay.is_zero()
    {
        return Value::Null;
    }
    let frames = |from: Side| {
        let s = p.link.stats(from);
        json!({
            "sent": s.sent,
            "lost": s.lost,
            "duplicated": s.duplicated,
            "reordered": s.reordered,
            "corrupted": s.corrupted,
        })
    };
    json!({
        "loss_pct": c.loss * 100.0,
        "dup_pct": c.duplicate * 100.0,
        "reorder_pct": c.reorder * 100.0,
        "corrupt_pct": c.corrupt * 100.0,
        "delay_ms": c.delay.as_secs_f64() * 1e3,
        "to_server": frames(Side::A),
        "to_client": frames(Side::B),
    })
}
