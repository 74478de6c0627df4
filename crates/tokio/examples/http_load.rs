//! A keep-alive HTTP/1.1 load client: `--conns N` connections, each a hyper HTTP/1 client
//! task sending `GET PATH` and reading the whole answer in a loop for `--secs`, counting
//! the 200s; all on one current-thread tokio runtime. The load for `axum_hello` over shm
//! with a ustack client, and the same client over the kernel's loopback for comparison:
//!
//! ```text
//! axum_hello --link shm --workers 1 &            # prints shm-offer NAME
//! http_load --link shm --offer NAME --addr 192.0.2.2:80 --conns 50 --secs 10
//! axum_hello --link kernel --addr 127.0.0.1:8080 --workers 1 &
//! http_load --link kernel --addr 127.0.0.1:8080 --conns 50 --secs 10
//! ```
//!
//! `--link shm`: attaches to the server's shm offer and runs its own stack (at
//! `--client-ip`) in model (b) (`ustack_tokio::local::LocalStack`) on the same runtime as
//! the client tasks. `--link kernel`: tokio's own sockets. Prints one line: `requests N
//! ok N other N errors N secs S req/s R`. Exits non-zero if no request got a 200, or if any
//! got another status or failed.

use core::net::SocketAddr;
use core::time::Duration;
use std::cell::Cell;
use std::rc::Rc;

use anyhow::{Context, bail};
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

#[derive(Debug, Parser)]
struct Args {
    /// shm (a ustack client over the server's shm offer) or kernel (tokio's sockets).
    #[arg(long, default_value = "shm", value_parser = ["shm", "kernel"])]
    link: String,
    /// The server's shm offer name (`axum_hello --link shm` prints `shm-offer NAME`).
    #[arg(long)]
    offer: Option<String>,
    /// The server's address.
    #[arg(long, default_value = "192.0.2.2:80")]
    addr: SocketAddr,
    /// This client's stack's address over shm (prefix 24).
    #[arg(long, default_value = "192.0.2.1")]
    client_ip: core::net::Ipv4Addr,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 50)]
    conns: usize,
    /// How long to load, in seconds.
    #[arg(long, default_value_t = 10.0)]
    secs: f64,
    /// The path to GET.
    #[arg(long, default_value = "/")]
    path: String,
}

/// What the connections counted.
#[derive(Default)]
struct Counts {
    ok: Cell<u64>,
    other: Cell<u64>,
    errors: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// One keep-alive connection: requests until `stop`, each answer read to its end.
async fn load(
    io: impl AsyncRead + AsyncWrite + Unpin + 'static,
    args: Rc<Args>,
    stop: tokio::time::Instant,
    counts: Rc<Counts>,
) {
    let (mut send, conn) =
        match hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)).await {
            Ok(x) => x,
            Err(_) => return bump(&counts.errors),
        };
    tokio::task::spawn_local(conn);
    let host = args.addr.to_string();
    while tokio::time::Instant::now() < stop {
        if send.ready().await.is_err() {
            return bump(&counts.errors);
        }
        let req = hyper::Request::get(args.path.as_str())
            .header("host", host.as_str())
            .body(Empty::<Bytes>::new())
            .expect("a valid request");
        let answer = match send.send_request(req).await {
            Ok(resp) => {
                let status = resp.status();
                resp.into_body().collect().await.map(|_| status)
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok(s) if s == 200 => bump(&counts.ok),
            Ok(_) => bump(&counts.other),
            Err(_) => return bump(&counts.errors),
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Rc::new(Args::parse());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let counts = Rc::new(Counts::default());
    let secs = Duration::from_secs_f64(args.secs);
    let elapsed = tokio::task::LocalSet::new().block_on(&rt, async {
        // Kept alive until the load is done (the shm client's stack).
        let mut stack = None;
        if args.link == "shm" {
            let name = args
                .offer
                .as_deref()
                .context("--link shm needs --offer NAME")?;
            let ports = ustack_dev::shm::ShmPeer::connect(name, Duration::from_secs(10))
                .context("connecting to the shm offer")?
                .attach()
                .context("attaching to the shm link")?;
            let port = ports.into_iter().next().context("no queue pair")?;
            let builder = ustack_runtime::RuntimeBuilder::new().ipv4(args.client_ip, 24);
            stack = Some(ustack_tokio::local::LocalStack::new(builder, port)?);
        }
        // Connect them all first, then start the clock.
        let mut streams = Vec::new();
        for _ in 0..args.conns {
            match &stack {
                Some(stack) => {
                    let s = connect_local(stack, args.addr).await?;
                    s.set_nodelay(true)?;
                    streams.push(Box::pin(s) as std::pin::Pin<Box<dyn Io>>);
                }
                None => {
                    let s = tokio::net::TcpStream::connect(args.addr).await?;
                    s.set_nodelay(true)?;
                    streams.push(Box::pin(s));
                }
            }
        }
        let start = tokio::time::Instant::now();
        let stop = start + secs;
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|s| tokio::task::spawn_local(load(s, args.clone(), stop, counts.clone())))
            .collect();
        for t in tasks {
            t.await?;
        }
        let elapsed = start.elapsed();
        drop(stack);
        Ok::<_, anyhow::Error>(elapsed)
    })?;
    let (ok, other, errors) = (counts.ok.get(), counts.other.get(), counts.errors.get());
    let t = elapsed.as_secs_f64();
    println!(
        "requests {} ok {ok} other {other} errors {errors} secs {t:.2} req/s {:.0}",
        ok + other,
        ok as f64 / t
    );
    if ok == 0 || other > 0 || errors > 0 {
        bail!("{ok} answered 200, {other} another status, {errors} failed");
    }
    Ok(())
}

/// A ustack connection to `addr`, retried (for up to 10 s) while it is refused: the
/// server binds its listener after the shm hand-over.
async fn connect_local(
    stack: &ustack_tokio::local::LocalStack,
    addr: SocketAddr,
) -> std::io::Result<ustack_tokio::local::LocalTcpStream> {
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ustack_tokio::local::LocalTcpStream::connect(stack, addr).await {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && tokio::time::Instant::now() < end =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// A connection of either kind.
trait Io: AsyncRead + AsyncWrite {}
impl<T: AsyncRead + AsyncWrite> Io for T {}
