//! `ustack bench pingpong --api tokio`: the pingpong written once against tokio's traits
//! (`AsyncRead + AsyncWrite`) and run on ustack through ustack-tokio's `LocalStack` (model
//! (b): the stack driven inside tokio, over the bench's shm link) and on the kernel through
//! `tokio::net` over loopback. On both, the server and the client are each a
//! current-thread tokio runtime on a thread of their own; the client runs the same
//! lock-step rounds as the native pingpong (a message on every connection, then every
//! echo read and checked), one latency sample a round.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Instant as WallClock;

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use ustack_tokio::local::{LocalStack, LocalTcpListener, LocalTcpStream};

use super::measure::Run;
use super::outcome::Outcome;
use super::pattern::fill_message;
use super::shm::{self, CLIENT_IP, SERVER_IP};

/// The port the server listens on (ustack: on [`SERVER_IP`]; the kernel: on loopback).
const PORT: u16 = 5001;

/// pingpong on ustack-tokio's `LocalStack` over shm.
pub fn ustack(run: &Run) -> anyhow::Result<Outcome> {
    let (a, b) = shm::link(1)?;
    let (sb, cb) = (
        shm::shm_builder(SERVER_IP, 1, 0, run),
        shm::shm_builder(CLIENT_IP, 2, run.seed.wrapping_add(2), run),
    );
    let addr = SocketAddr::from((SERVER_IP, PORT));
    let one = |v: Vec<_>| v.into_iter().next().context("an shm queue pair");
    let (a, b) = (one(a)?, one(b)?);
    let server = serve(move || async move {
        let stack = LocalStack::new(sb, a)?;
        Ok(LocalTcpListener::bind(&stack, addr)?)
    })?;
    let o = on_local(move || async move {
        let stack = LocalStack::new(cb, b)?;
        let mut conns = Vec::new();
        for _ in 0..run.conns {
            let s = LocalTcpStream::connect(&stack, addr).await?;
            s.set_nodelay(true)?;
            conns.push(s);
        }
        rounds(run, conns, "ustack", "shm").await
    })?;
    server.stop()?;
    Ok(o)
}

/// pingpong on tokio's own sockets over the kernel's loopback.
pub fn linux(run: &Run) -> anyhow::Result<Outcome> {
    let (tx, rx) = mpsc::channel();
    let server = serve(move || async move {
        // A backlog as deep as the kernel allows (somaxconn), not tokio's 1,024: the
        // client opens up to 10,000 connections back to back.
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let l = sock.listen(65_535)?;
        let _ = tx.send(l.local_addr()?);
        Ok(l)
    })?;
    let addr = rx.recv().context("the tokio server's address")?;
    let o = on_local(move || async move {
        let mut conns = Vec::new();
        for _ in 0..run.conns {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            conns.push(s);
        }
        rounds(run, conns, "linux", "loopback").await
    })?;
    server.stop()?;
    Ok(o)
}

/// `f()` on a new current-thread runtime inside a `LocalSet`, on this thread.
fn on_local<T, F: Future<Output = anyhow::Result<T>>>(f: impl FnOnce() -> F) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, f())
}

/// The echo server's thread; [`Server::stop`] ends it.
struct Server {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<anyhow::Result<()>>,
}

impl Server {
    fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the tokio echo server panicked"))?
    }
}

/// A listener the echo server takes connections from (with `TCP_NODELAY` set).
trait Accept {
    type Stream: AsyncRead + AsyncWrite + Unpin + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Stream>>;
}

impl Accept for LocalTcpListener {
    type Stream = LocalTcpStream;
    async fn accept(&self) -> std::io::Result<LocalTcpStream> {
        let (s, _) = LocalTcpListener::accept(self).await?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<tokio::net::TcpStream> {
        let (s, _) = tokio::net::TcpListener::accept(self).await?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

/// An echo server on a thread of its own (a current-thread runtime): `setup` makes the
/// listener; every connection it gives is echoed by a task of its own. Returns once the
/// server listens.
fn serve<L, SF>(setup: impl FnOnce() -> SF + Send + 'static) -> anyhow::Result<Server>
where
    L: Accept + 'static,
    SF: Future<Output = anyhow::Result<L>>,
{
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready, listening) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("tokio-echo".into())
        .spawn(move || {
            on_local(move || async move {
                let listener = match setup().await {
                    Ok(l) => {
                        let _ = ready.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e.to_string()));
                        return Err(e);
                    }
                };
                tokio::task::spawn_local(async move {
                    while let Ok(s) = listener.accept().await {
                        tokio::task::spawn_local(echo(s));
                    }
                });
                let _ = stopped.await;
                Ok(())
            })
        })?;
    listening
        .recv()
        .context("the tokio echo server")?
        .map_err(|e| anyhow::anyhow!("the tokio echo server: {e}"))?;
    Ok(Server { stop, thread })
}

/// Echo until the peer closes (or the connection fails).
async fn echo(mut s: impl AsyncRead + AsyncWrite + Unpin) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = s.read(&mut buf).await {
        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Lock-step rounds over `conns` until the run's time is up: every echo checked.
async fn rounds<S: AsyncRead + AsyncWrite + Unpin>(
    run: &Run,
    mut conns: Vec<S>,
    server: &'static str,
    link: &'static str,
) -> anyhow::Result<Outcome> {
    let size = run.size;
    let (mut msg, mut got) = (vec![0u8; size], vec![0u8; size]);
    let (mut rtt_ns, mut verified, mut count) = (Vec::new(), true, 0u64);
    let mut m = run.meter();
    while m.going(0) {
        let t0 = WallClock::now();
        for (i, s) in conns.iter_mut().enumerate() {
            fill_message(&mut msg, count + i as u64);
            s.write_all(&msg).await?;
        }
        for (i, s) in conns.iter_mut().enumerate() {
            s.read_exact(&mut got).await?;
            fill_message(&mut msg, count + i as u64);
            verified &= got == msg;
        }
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        count += conns.len() as u64;
    }
    let elapsed = m.elapsed();
    drop(conns);
    let mut o = Outcome::echo(
        "pingpong", server, link, run.conns, size, count, elapsed, verified, rtt_ns,
    );
    // Both wait in tokio's reactor (epoll): ustack's driver on its link's file.
    o.mode = "tokio";
    o.api = "tokio";
    Ok(o)
}
