//! A tokio echo server and `--conns` tokio clients ping-ponging 64-byte messages (each
//! reply checked) for `--secs`, on ustack or on the kernel: messages/s.
//!
//! ```text
//! cargo run --release -p ustack-tokio --example tokio_echo -- --link shm --conns 100
//! cargo run --release -p ustack-tokio --example tokio_echo -- --link kernel --conns 100
//! ```
//!
//! `--link sim`: both stacks on one loop thread over the in-process sim link; `shm`: a
//! shm link, a loop thread per side; `kernel`: the same tokio code on tokio's own
//! sockets over the kernel's loopback. One multi-thread tokio runtime (`--workers`,
//! default 2) runs the server and the clients. `--link local-shm`: model (b), both
//! stacks over a shm link driven inside one current-thread tokio runtime
//! ([`ustack_tokio::local::LocalStack`]), with the server and the clients on it (no loop
//! thread; `--workers` does not apply).

use core::time::Duration;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Parser;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::Net;

#[derive(Debug, Parser)]
struct Args {
    /// sim, shm, kernel or local-shm.
    #[arg(long, default_value = "shm")]
    link: String,
    /// Concurrent connections.
    #[arg(long, default_value_t = 1)]
    conns: u64,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// tokio worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

const MSG: usize = 64;
const PORT: u16 = 7;

/// Echo until the peer closes.
async fn echo(mut s: impl AsyncRead + AsyncWrite + Unpin) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await? {
            0 => return Ok(()),
            n => s.write_all(&buf[..n]).await?,
        }
    }
}

/// Ping-pong 64-byte messages until `stop`, checking each reply: messages exchanged.
async fn pingpong(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    salt: u8,
    stop: tokio::time::Instant,
) -> io::Result<u64> {
    let mut msg = [0u8; MSG];
    let mut got = [0u8; MSG];
    let mut n = 0u64;
    while tokio::time::Instant::now() < stop {
        msg.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (n as u8).wrapping_add(i as u8) ^ salt);
        s.write_all(&msg).await?;
        s.read_exact(&mut got).await?;
        if got != msg {
            return Err(io::Error::other("the echo differs"));
        }
        n += 1;
    }
    Ok(n)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.link == "local-shm" {
        return local(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()?;
    let total = Arc::new(AtomicU64::new(0));
    let secs = Duration::from_secs_f64(args.secs);
    let t = rt.block_on(async {
        let stop = tokio::time::Instant::now() + secs;
        let mut clients = Vec::new();
        let start = std::time::Instant::now();
        if args.link == "kernel" {
            let l = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
            let addr = l.local_addr()?;
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let _ = s.set_nodelay(true);
                    tokio::spawn(echo(s));
                }
            });
            for i in 0..args.conns {
                let s = tokio::net::TcpStream::connect(addr).await?;
                s.set_nodelay(true)?;
                let total = total.clone();
                clients.push(tokio::spawn(async move {
                    let n = pingpong(s, i as u8, stop).await?;
                    total.fetch_add(n, Ordering::Relaxed);
                    Ok::<_, io::Error>(())
                }));
            }
        } else {
            let (snet, cnet) = nets(&args.link)?;
            let l = ustack_tokio::TcpListener::bind(&snet, ("10.0.0.1", PORT))?;
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let _ = s.set_nodelay(true);
                    tokio::spawn(echo(s));
                }
            });
            for i in 0..args.conns {
                let s = ustack_tokio::TcpStream::connect(&cnet, ("10.0.0.1", PORT)).await?;
                s.set_nodelay(true)?;
                let total = total.clone();
                clients.push(tokio::spawn(async move {
                    let n = pingpong(s, i as u8, stop).await?;
                    total.fetch_add(n, Ordering::Relaxed);
                    Ok::<_, io::Error>(())
                }));
            }
        }
        for c in clients {
            c.await??;
        }
        Ok::<_, anyhow::Error>(start.elapsed())
    })?;
    report(&args, total.load(Ordering::Relaxed), t);
    Ok(())
}

fn report(args: &Args, n: u64, t: Duration) {
    println!(
        "tokio echo, --link {}, {} connection(s): {n} messages in {:.2} s, {:.0} messages/s",
        args.link,
        args.conns,
        t.as_secs_f64(),
        n as f64 / t.as_secs_f64()
    );
}

/// `--link local-shm`: both stacks and every task on one current-thread runtime.
fn local(args: &Args) -> anyhow::Result<()> {
    use ustack_tokio::local::{LocalStack, LocalTcpListener, LocalTcpStream};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let total = std::rc::Rc::new(core::cell::Cell::new(0u64));
    let secs = Duration::from_secs_f64(args.secs);
    let t = tokio::task::LocalSet::new().block_on(&rt, async {
        let (a, b) = ShmLink::pair(&ShmConfig::default())?;
        let server = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
        let client = RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24);
        let one = |v: Vec<_>| v.into_iter().next().expect("one queue pair");
        let snet = LocalStack::new(server, one(a))?;
        let cnet = LocalStack::new(client, one(b))?;
        let addr = "10.0.0.1:7".parse()?;
        let l = LocalTcpListener::bind(&snet, addr)?;
        tokio::task::spawn_local(async move {
            while let Ok((s, _)) = l.accept().await {
                let _ = s.set_nodelay(true);
                tokio::task::spawn_local(echo(s));
            }
        });
        let stop = tokio::time::Instant::now() + secs;
        let start = std::time::Instant::now();
        let mut clients = Vec::new();
        for i in 0..args.conns {
            let s = LocalTcpStream::connect(&cnet, addr).await?;
            s.set_nodelay(true)?;
            let total = total.clone();
            clients.push(tokio::task::spawn_local(async move {
                let n = pingpong(s, i as u8, stop).await?;
                total.set(total.get() + n);
                Ok::<_, io::Error>(())
            }));
        }
        for c in clients {
            c.await??;
        }
        Ok::<_, anyhow::Error>(start.elapsed())
    })?;
    report(args, total.get(), t);
    Ok(())
}

/// The two stacks: (server, client).
fn nets(link: &str) -> io::Result<(Net, Net)> {
    let server = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
    let client = RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24);
    match link {
        "sim" => Net::sim_pair(server, client, SimLinkConfig::default()),
        "shm" => {
            let (a, b) = ShmLink::pair(&ShmConfig::default())?;
            Ok((Net::shm(server, a)?, Net::shm(client, b)?))
        }
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--link {other}: sim, shm, kernel or local-shm"),
        )),
    }
}
