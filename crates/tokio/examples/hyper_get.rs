//! A hyper client on ustack: `GET --url` from a server on the TUN's kernel side, the body
//! streamed and counted, its SHA-256 printed (compare it with `sha256sum` of the file).
//!
//! ```text
//! ip netns add NS
//! cargo run --release -p ustack-tokio --example hyper_get -- \
//!     --netns NS --addr 192.0.2.2/24 --url http://192.0.2.1:8000/FILE
//! # when it prints `tun-ready tun0`, in another shell:
//! ip netns exec NS ip addr add 192.0.2.1/24 dev tun0
//! ip netns exec NS ip link set tun0 up
//! ip netns exec NS python3 -m http.server 8000 --bind 192.0.2.1 --directory DIR
//! ```
//!
//! It retries the connection (refused, or the interface not yet up) for `--wait` seconds.

use core::net::Ipv4Addr;
use core::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use http_body_util::{BodyExt, Empty};
use sha2::{Digest, Sha256};
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::TcpStream;

#[derive(Debug, Parser)]
struct Args {
    /// The network namespace to create the TUN interface in (a name or a path).
    #[arg(long)]
    netns: Option<String>,
    /// The TUN interface's name.
    #[arg(long, default_value = "tun0")]
    tun: String,
    /// ustack's address: IP[/PREFIX] (prefix 24 by default).
    #[arg(long, default_value = "192.0.2.2/24")]
    addr: String,
    /// What to fetch: http://IP:PORT/PATH (an IPv4 address on --addr's subnet).
    #[arg(long)]
    url: String,
    /// How long to retry the connection, in seconds.
    #[arg(long, default_value_t = 30)]
    wait: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (ip, prefix) = args.addr.split_once('/').unwrap_or((&args.addr, "24"));
    let ip: Ipv4Addr = ip.parse().context("--addr")?;
    let rest = args
        .url
        .strip_prefix("http://")
        .context("--url: http://IP:PORT/PATH")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let server: core::net::SocketAddrV4 = authority.parse().context("--url: IP:PORT")?;
    let builder = RuntimeBuilder::new().ipv4(ip, prefix.parse().context("--addr: the prefix")?);
    let (net, name) = ustack_tokio::net_over_tun(builder, &args.tun, args.netns.as_deref())
        .context("creating the TUN interface")?;
    println!("tun-ready {name}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let until = tokio::time::Instant::now() + Duration::from_secs(args.wait);
        let stream = loop {
            match TcpStream::connect(&net, server).await {
                Ok(s) => break s,
                Err(e) if tokio::time::Instant::now() < until => {
                    eprintln!("hyper_get: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => bail!("connecting to {server}: {e}"),
            }
        };
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = hyper::Request::get(format!("/{path}"))
            .header("host", authority)
            .body(Empty::<hyper::body::Bytes>::new())?;
        let resp = send.send_request(req).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        let (mut len, mut hash) = (0usize, Sha256::new());
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                len += data.len();
                hash.update(&data);
            }
        }
        let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        println!("{status} {len} bytes sha256 {hex}");
        if !status.is_success() {
            bail!("{status}");
        }
        Ok(())
    })
}
