//! axum on ustack, unchanged but for the listener: `GET /` answers "Hello, World!",
//! `GET /files/NAME` streams a file from `--root`, `POST /echo` returns its JSON body.
//!
//! ```text
//! cargo run --release -p ustack-tokio --example axum_hello -- \
//!     --link tun --netns NS --addr 192.0.2.2:80 --root DIR
//! ```
//!
//! The link flags are `ustack serve`'s: `--link tun` creates the TUN interface (`--tun`,
//! in `--netns`) and prints `tun-ready <interface>` once it exists (then configure the
//! kernel's end: `ip netns exec NS ip addr add 192.0.2.1/24 dev <interface>; ip netns
//! exec NS ip link set <interface> up`); `--link shm` creates a shm link, prints
//! `shm-offer <name>` and serves once a client attaches; `--link sim` runs the server and
//! a hyper client in this process over the in-process sim link, checks the three routes
//! and exits; `--link kernel` serves the same application on tokio's own (kernel)
//! sockets at `--addr`, in the namespace it is started in (the comparison docs/api.md
//! measures with wrk). `--workers N` sets tokio's worker threads (default: one per core).
//! `--local` (with `--link tun` or `shm`) runs model (b): the stack driven inside a current-thread
//! runtime (`ustack_tokio::local::LocalStack`), each connection served by hyper on the
//! `LocalSet` (`axum::serve` spawns `Send` tasks, and these sockets are not `Send`).

use core::net::Ipv4Addr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::{Net, TcpListener};

#[derive(Debug, Parser)]
struct Args {
    /// tun (the kernel is the peer), shm (another process attaches), sim (a built-in
    /// client in this process) or kernel (tokio's own sockets, for comparison).
    #[arg(long, default_value = "tun", value_parser = ["tun", "shm", "sim", "kernel"])]
    link: String,
    /// tokio worker threads (default: one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// With --link tun or shm: the stack driven inside one current-thread runtime (model (b)).
    #[arg(long)]
    local: bool,
    /// The network namespace to create the TUN interface in (a name or a path).
    #[arg(long)]
    netns: Option<String>,
    /// The TUN interface's name (a `%d` is filled in by the kernel).
    #[arg(long, default_value = "ustack%d")]
    tun: String,
    /// ustack's address and port: IP[/PREFIX]:PORT (prefix 24 by default).
    #[arg(long, default_value = "192.0.2.2:80")]
    addr: String,
    /// The directory `GET /files/NAME` serves from.
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

/// The application: what a user writes for the kernel's sockets, unchanged.
pub fn app(root: PathBuf) -> Router {
    Router::new()
        .route("/", get(|| async { "Hello, World!" }))
        .route("/files/{name}", get(file))
        .route(
            "/echo",
            post(|axum::Json(v): axum::Json<serde_json::Value>| async { axum::Json(v) }),
        )
        .with_state(root)
}

/// `GET /files/NAME`: the file, streamed (no path separators or `..` in NAME).
async fn file(State(root): State<PathBuf>, UrlPath(name): UrlPath<String>) -> Response {
    if name.contains('/') || name.starts_with('.') {
        return StatusCode::NOT_FOUND.into_response();
    }
    match tokio::fs::File::open(root.join(&name)).await {
        Ok(f) => {
            let len = f.metadata().await.map(|m| m.len()).ok();
            let body = Body::from_stream(tokio_util::io::ReaderStream::new(f));
            let mut r = Response::new(body);
            if let Some(len) = len {
                r.headers_mut()
                    .insert(axum::http::header::CONTENT_LENGTH, len.into());
            }
            r
        }
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `IP[/PREFIX]:PORT`.
fn parse_addr(s: &str) -> anyhow::Result<(Ipv4Addr, u8, u16)> {
    let (ip, port) = s
        .rsplit_once(':')
        .with_context(|| format!("--addr {s}: expected IP[/PREFIX]:PORT"))?;
    let (ip, prefix) = ip.split_once('/').unwrap_or((ip, "24"));
    Ok((
        ip.parse().context("--addr: the IP")?,
        prefix.parse().context("--addr: the prefix")?,
        port.parse().context("--addr: the port")?,
    ))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (ip, prefix, port) = parse_addr(&args.addr)?;
    let builder = RuntimeBuilder::new().ipv4(ip, prefix);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.workers {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build()?;
    match args.link.as_str() {
        "tun" if args.local => {
            let (queue, name) = ustack_tokio::tun_queue(&args.tun, args.netns.as_deref())
                .context("creating the TUN interface")?;
            let ready = format!("tun-ready {name}");
            serve_on_local_stack(builder, queue, ip, port, args.root, Some(ready))?;
        }
        "tun" => {
            let (net, name) = ustack_tokio::net_over_tun(builder, &args.tun, args.netns.as_deref())
                .context("creating the TUN interface")?;
            let listener = TcpListener::bind(&net, (ip, port))?;
            println!("tun-ready {name}");
            rt.block_on(axum::serve(listener, app(args.root)).into_future())?;
        }
        "shm" => {
            let (ports, peer) = ustack_dev::shm::ShmLink::create(&Default::default())
                .context("creating the shm link")?;
            let offer = peer.offer().context("offering the shm link")?;
            println!("shm-offer {}", offer.name());
            offer
                .hand_over(core::time::Duration::from_secs(60))
                .context("waiting for a client to attach")?;
            if args.local {
                let port_ = ports.into_iter().next().context("no queue pair")?;
                serve_on_local_stack(builder, port_, ip, port, args.root, None)?;
            } else {
                let net = Net::shm(builder, ports)?;
                let listener = TcpListener::bind(&net, (ip, port))?;
                rt.block_on(axum::serve(listener, app(args.root)).into_future())?;
            }
        }
        "kernel" => rt.block_on(async {
            let listener = tokio::net::TcpListener::bind((ip, port)).await?;
            println!("kernel-ready {}", listener.local_addr()?);
            axum::serve(listener, app(args.root)).await
        })?,
        _ => rt.block_on(sim(builder, ip, port, args.root))?,
    }
    Ok(())
}

/// Model (b): a `LocalStack` over `link` on a current-thread runtime, `app` served on
/// its listener at `ip:port`; `ready` printed once the listener is bound.
fn serve_on_local_stack(
    builder: RuntimeBuilder,
    link: impl ustack_net::Link + 'static,
    ip: Ipv4Addr,
    port: u16,
    root: PathBuf,
    ready: Option<String>,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, async {
        let stack = ustack_tokio::local::LocalStack::new(builder, link)?;
        let addr = core::net::SocketAddr::from((ip, port));
        let listener = ustack_tokio::local::LocalTcpListener::bind(&stack, addr)?;
        if let Some(ready) = ready {
            println!("{ready}");
        }
        serve_local(listener, app(root)).await;
        Ok(())
    })
}

/// `app` on a model (b) listener: each connection served by hyper's HTTP/1 server in a
/// task on the `LocalSet` (keep-alive as `axum::serve`).
pub async fn serve_local(listener: ustack_tokio::local::LocalTcpListener, app: Router) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(core::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::task::spawn_local(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// The server and a hyper client over the in-process sim link: check the three routes.
async fn sim(
    builder: RuntimeBuilder,
    ip: Ipv4Addr,
    port: u16,
    root: PathBuf,
) -> anyhow::Result<()> {
    use http_body_util::{BodyExt, Full};
    let o = ip.octets();
    let client_ip = Ipv4Addr::new(o[0], o[1], o[2], if o[3] == 1 { 2 } else { 1 });
    let client = RuntimeBuilder::new().ipv4(client_ip, 24);
    let (snet, cnet) = Net::sim_pair(builder, client, Default::default())?;
    let listener = TcpListener::bind(&snet, (ip, port))?;
    tokio::spawn(axum::serve(listener, app(root)).into_future());
    let stream = ustack_tokio::TcpStream::connect(&cnet, (ip, port)).await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let json = r#"{"hello":"ustack"}"#;
    let requests = [
        ("GET", "/", String::new(), "Hello, World!"),
        ("POST", "/echo", json.to_owned(), json),
    ];
    for (method, path, body, want) in requests {
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("{ip}:{port}"))
            .header("content-type", "application/json")
            .body(Full::new(bytes_of(body)))?;
        // The connection takes one request at a time: wait until the last one is done.
        send.ready().await?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        let got = resp.into_body().collect().await?.to_bytes();
        if status != 200 || got != want.as_bytes() {
            bail!("{method} {path}: {status} {got:?}, expected 200 {want:?}");
        }
        println!(
            "{method} {path}: {status} {}",
            String::from_utf8_lossy(&got)
        );
    }
    println!("sim: ok");
    Ok(())
}

fn bytes_of(s: String) -> hyper::body::Bytes {
    hyper::body::Bytes::from(s)
}
