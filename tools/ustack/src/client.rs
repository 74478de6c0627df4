//! `ustack connect` and `ustack get`: ustack as a client, for a person who wants to reach
//! a server (the kernel's, or anyone's behind it) through ustack without writing code.
//! `connect` is `nc`/`socat`-like (stdin to the connection, the connection to stdout);
//! `get` fetches one URL with HTTP/1.1 and prints the body's size and SHA-256. Both run
//! one ustack runtime over the link `--link` names: a TUN interface (set up with `ustack
//! serve`'s link flags), or an `AF_PACKET` or `AF_XDP` socket on an Ethernet interface
//! (`--interface`, a veth end say) whose MAC address ustack takes, or the shm link a
//! `ustack serve --link shm` offers (`--shm NAME`).

use core::net::SocketAddr;
use core::time::Duration;
use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use ustack_dev::Device;
use ustack_dev::packet::PacketConfig;
use ustack_dev::shm::ShmPeer;
use ustack_dev::xdp::XdpConfig;
use ustack_net::{LinkSpec, open_link};
use ustack_runtime::Mode;
use ustack_runtime::RssSplitter;
use ustack_runtime::api::TcpStream;
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{Events, Interest, Runtime, RuntimeBuilder, Sleep};

use crate::link::{IfAddr, LinkArgs};
use crate::serve::parse_duration;

/// The interface of a client command.
#[derive(Debug, clap::Args)]
pub struct ClientLink {
    /// The link: tun (a TUN interface; the Linux kernel routes between it and the
    /// server), packet (an AF_PACKET socket with TPACKET_V3 rings on --interface), xdp
    /// (an AF_XDP socket in copy mode on --interface, fed by an XDP program ustack loads)
    /// or shm (the shared-memory link a `ustack serve --link shm` offers: --shm NAME).
    #[arg(long, default_value = "tun", value_parser = ["tun", "packet", "xdp", "shm"])]
    link: String,
    /// shm: the name `ustack serve --link shm` printed (`shm-offer NAME`); ustack
    /// attaches to that link as its other end (one process of the same user).
    #[arg(long, value_name = "NAME")]
    shm: Option<String>,
    /// packet, xdp: the Ethernet interface to take (a veth end, say), in --netns; ustack
    /// answers for --addr on it with the interface's MAC address.
    #[arg(long, value_name = "NAME")]
    interface: Option<String>,
    /// ustack's address on the interface and its prefix length: IP[/LEN] (default /24),
    /// or [IP6[/LEN]] (default /64; the interface keeps 192.0.2.2/24 beside it). For an
    /// IPv6 server, give ustack an IPv6 address here or with --addr6.
    #[arg(long, default_value = "192.0.2.2/24")]
    addr: IfAddr,
    #[command(flatten)]
    iface: LinkArgs,
    /// How long the connection may take to be established.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    connect_timeout: Duration,
}

/// Arguments of `ustack connect`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
LINKS:
  tun (default): the TUN interface is created (or attached to, if it exists: `ip tuntap
    add NAME mode tun multi_queue`) in --netns; ustack prints `tun-ready <interface>` on
    stderr. The kernel's end is yours to configure (address on --addr's subnet, link up),
    before or within the connect timeout.
  packet, xdp: ustack takes the Ethernet interface --interface in --netns (a veth end,
    say: `ip link add veth0 type veth peer name veth1`), which must be up and should have
    no address of its own (the kernel would answer for it too), and answers ARP for --addr
    with its MAC address. The peer (veth0, say) must send whole checksummed frames: turn
    its transmit offloads off (`ethtool -K veth0 tx off`). xdp loads an XDP program on the
    interface for the run (one queue, copy mode).
  shm: ustack attaches to the shared-memory link that `ustack serve --link shm` offered
    (it printed `shm-offer NAME`): --shm NAME (the same user; with a sharded server, each
    flow is steered to its shard's queue by RSS). No root needed.
  tun, packet and xdp need root (CAP_NET_ADMIN; packet and xdp CAP_NET_RAW, xdp CAP_BPF).
  With an IPv6 --addr on an Ethernet link (packet, xdp, shm) the connection waits for
  duplicate address detection to pass (a second).

EXAMPLES:
  ip netns exec NS socat TCP-LISTEN:7,fork EXEC:cat &
  echo hello | ustack connect 192.0.2.1:7 --tun tun0 --netns NS --addr 192.0.2.2/24
  echo hello | ustack connect 192.0.2.1:7 --link packet --interface veth1 --netns NS
  ustack serve echo --link shm --addr '[2001:db8::1]:7' &   # prints shm-offer NAME
  echo hello | ustack connect '[2001:db8::1]:7' --link shm --shm NAME --addr '[2001:db8::2]'")]
pub struct ConnectArgs {
    /// The server: IP:PORT, or `[IP6]:PORT` (no name lookup).
    target: SocketAddr,
    #[command(flatten)]
    link: ClientLink,
}

/// Arguments of `ustack get`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Fetches http://IP[:PORT]/PATH with one HTTP/1.1 GET (no name lookup, no TLS, no
redirects), writes the body to stdout or --output, and prints the status, the body's size
and its SHA-256 on stderr. Exits 0 for a 2xx answer. The link (tun, packet or xdp) is set
up as for `ustack connect` (see `ustack connect --help`).

EXAMPLES:
  ustack get http://192.0.2.1:8000/file.bin -o file.bin --tun tun0 --netns NS
  ustack get http://192.0.2.1:8000/file.bin -o file.bin --link xdp --interface veth1 --netns NS")]
pub struct GetArgs {
    /// The URL: `http://IP[:PORT][/PATH]`.
    url: String,
    /// Write the body to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    link: ClientLink,
}

/// What a client command does once its connection is established, over any device.
trait Client {
    /// `connect` or `get`.
    const NAME: &'static str;
    /// The link flags it was given.
    fn link(&self) -> &ClientLink;
    /// Its work on the established connection `stream` of `rt`, to the end.
    fn run<D: Device + Sleep>(self, rt: Runtime<D>, stream: TcpStream) -> anyhow::Result<ExitCode>;
}

/// Opens `--link`'s device, builds the runtime on it, connects to `target` and hands the
/// connection to `client`.
fn over_link<C: Client>(client: C, target: SocketAddr) -> anyhow::Result<ExitCode> {
    let link = client.link();
    if link.addr.port.is_some() {
        bail!("--addr is ustack's own address, IP[/LEN], without a port");
    }
    if matches!(link.link.as_str(), "tun" | "shm") && link.interface.is_some() {
        bail!("--interface is for --link packet or xdp (tun takes --tun, shm --shm)");
    }
    if link.link != "tun" && link.iface.mtu.is_some() {
        bail!("--mtu is for --link tun (packet and xdp take the interface's own)");
    }
    if link.link != "tun" && link.iface.no_offload {
        bail!("--no-offload is for --link tun (packet and xdp links carry whole frames)");
    }
    if (link.link == "shm") != link.shm.is_some() {
        bail!("--shm NAME goes with --link shm (and --link shm needs it)");
    }
    let builder = link.iface.builder(&link.addr)?;
    let netns = link.iface.netns_path();
    if let Some(name) = link.shm.clone() {
        return over_shm(client, builder, target, &name);
    }
    let spec = match link.link.as_str() {
        "tun" => LinkSpec::Tun(link.iface.tun_config(1)),
        kind => {
            let interface = link
                .interface
                .clone()
                .with_context(|| format!("--link {kind} needs --interface NAME"))?;
            if kind == "packet" {
                LinkSpec::Packet(PacketConfig {
                    interface,
                    netns,
                    ..PacketConfig::default()
                })
            } else {
                LinkSpec::Xdp(XdpConfig {
                    interface,
                    netns,
                    ..XdpConfig::default()
                })
            }
        }
    };
    let mut opened = open_link(&spec, None)?;
    let name = opened.name.clone();
    let how = match spec {
        LinkSpec::Tun(_) => {
            eprintln!("tun-ready {name}");
            format!("tun `{name}`")
        }
        _ => format!("{} on `{name}`", spec.kind()),
    };
    let builder = opened.builder(builder);
    connected(client, builder, target, opened.queues.remove(0), &how)
}

/// The runtime from `builder` on `device`, a connection to `target` established, and
/// `client` run on it.
fn connected<C: Client, D: Device + Sleep>(
    client: C,
    builder: RuntimeBuilder,
    target: SocketAddr,
    device: D,
    how: &str,
) -> anyhow::Result<ExitCode> {
    let link = client.link();
    let mut rt = builder.build(device)?;
    eprintln!(
        "ustack {}: {} over {how}{}, connecting to {target}",
        C::NAME,
        link.addr,
        link.iface.netns_note()
    );
    usable_addresses(&mut rt, link.connect_timeout)?;
    let stream = TcpStream::connect_timeout(&mut rt, target, link.connect_timeout)
        .with_context(|| format!("connecting to {target}"))?;
    client.run(rt, stream)
}

/// Attach to the shm link offered as `name` (side B; with several queue pairs, one per
/// server shard, through an RSS splitter that steers each flow to its shard's queue as a
/// NIC would, copying ARP and neighbour discovery to every queue) and run `client` on it.
fn over_shm<C: Client>(
    client: C,
    builder: RuntimeBuilder,
    target: SocketAddr,
    name: &str,
) -> anyhow::Result<ExitCode> {
    let peer = ShmPeer::connect(name, Duration::from_secs(10))
        .with_context(|| format!("connecting to the shm offer `{name}`"))?;
    let mut ports = peer.attach().context("attaching to the shm link")?;
    let how = format!("shm `{name}`");
    if ports.len() == 1 {
        return connected(client, builder, target, ports.remove(0), &how);
    }
    let shards = ports.len();
    let splitter = RssSplitter::new(ports, Rss::new(RssKey::MICROSOFT, shards));
    connected(
        client,
        builder,
        target,
        splitter.replicate_unhashed(true),
        &how,
    )
}

/// Run `rt` until none of its IPv6 addresses is tentative (duplicate address detection
/// on an Ethernet link, RFC 4862 §5.4: a tentative address is no source), or fail after
/// `timeout`. At once without IPv6, or on an IP link (no DAD).
fn usable_addresses<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let Some(addr) = crate::serve::tentative(rt.stack()) else {
            return Ok(());
        };
        if std::time::Instant::now() > deadline {
            bail!("{addr}: still tentative (duplicate address detection)");
        }
        rt.run_once(Some(Duration::from_millis(10)))?;
    }
}

/// Close `stream` and run the loop until the FIN is acknowledged (or a short while), so
/// that the peer sees the end before the process (and its interface queue) goes.
fn finish<D: Device + Sleep>(rt: &mut Runtime<D>, stream: TcpStream) -> anyhow::Result<()> {
    stream.close(rt)?;
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < until {
        let closing = rt
            .stack()
            .sockets(rt.now())
            .iter()
            .any(|s| matches!(s.state, "FIN-WAIT-1" | "LAST-ACK" | "CLOSING"));
        if !closing {
            break;
        }
        rt.run_once(Some(Duration::from_millis(10)))?;
    }
    Ok(())
}

/// Runs `ustack connect`: stdin to the connection (a FIN at its end), the connection to
/// stdout, until the server closes its side.
pub fn connect(args: &ConnectArgs) -> anyhow::Result<ExitCode> {
    over_link(args, args.target)
}

impl Client for &ConnectArgs {
    const NAME: &'static str = "connect";

    fn link(&self) -> &ClientLink {
        &self.link
    }

    fn run<D: Device + Sleep>(
        self,
        mut rt: Runtime<D>,
        stream: TcpStream,
    ) -> anyhow::Result<ExitCode> {
        stream.set_nodelay(&mut rt, true)?;
        rt.register(
            &stream,
            0,
            Interest::READABLE | Interest::RDHUP,
            Mode::Level,
        )?;
        // stdin blocks: a thread reads it and hands the chunks over (None: its end).
        let (tx, rx) = mpsc::sync_channel::<Option<Vec<u8>>>(16);
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(None);
                        return;
                    }
                    Ok(n) => {
                        if tx.send(Some(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let mut stdout = std::io::stdout().lock();
        let mut events = Events::with_capacity(4);
        let mut buf = vec![0u8; 64 * 1024];
        let (mut sent, mut received) = (0u64, 0u64);
        let mut stdin_open = true;
        loop {
            while stdin_open {
                match rx.try_recv() {
                    Ok(Some(chunk)) => {
                        stream.write_all(&mut rt, &chunk)?;
                        sent += chunk.len() as u64;
                    }
                    Ok(None) | Err(mpsc::TryRecvError::Disconnected) => {
                        stream.shutdown(&mut rt, std::net::Shutdown::Write)?;
                        stdin_open = false;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let mut eof = false;
            loop {
                match stream.read(&mut rt, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        stdout.write_all(&buf[..n])?;
                        received += n as u64;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e).context("reading from the connection"),
                }
            }
            stdout.flush()?;
            if eof {
                break;
            }
            // Short waits while stdin may bring more: its thread cannot wake the loop.
            let wait = if stdin_open { 5 } else { 100 };
            rt.poll(&mut events, Some(Duration::from_millis(wait)))?;
        }
        finish(&mut rt, stream)?;
        eprintln!("ustack connect: {sent} bytes sent, {received} bytes received");
        Ok(ExitCode::SUCCESS)
    }
}

/// `http://IP[:PORT][/PATH]` (an IPv6 host in brackets, RFC 3986 §3.2.2): the server
/// and the path (with its query).
fn parse_url(url: &str) -> anyhow::Result<(SocketAddr, String, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = match host.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => {
            let ip = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
            let ip = match ip {
                Some(ip) => ip.parse::<core::net::Ipv6Addr>().map(core::net::IpAddr::V6),
                None => host
                    .parse::<core::net::Ipv4Addr>()
                    .map(core::net::IpAddr::V4),
            };
            SocketAddr::new(
                ip.with_context(|| format!("{url}: the host must be an IP address"))?,
                80,
            )
        }
    };
    Ok((addr, host.to_owned(), path.to_owned()))
}

/// The response head: status code, and how the body is framed.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    length: Option<u64>,
    chunked: bool,
}

/// Parse a response head (the bytes before the blank line).
fn parse_head(head: &[u8]) -> anyhow::Result<Head> {
    let text = std::str::from_utf8(head).context("a response head that is not text")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1.x response: {status_line:?}");
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status code in {status_line:?}"))?;
    let mut h = Head {
        status,
        length: None,
        chunked: false,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            h.length = Some(value.parse().context("a bad Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            h.chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    Ok(h)
}

/// A chunked body's decoder (RFC 9112 §7.1), fed in pieces.
#[derive(Debug, Default)]
struct Dechunk {
    /// Bytes not yet decoded (a partial size line).
    pending: Vec<u8>,
    /// Body bytes left in the current chunk (+2 for its CRLF once seen).
    left: u64,
    in_chunk: bool,
    done: bool,
}

impl Dechunk {
    /// Decode `input`, passing body bytes to `out`.
    fn feed(
        &mut self,
        input: &[u8],
        out: &mut impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.pending.extend_from_slice(input);
        let mut at = 0;
        while !self.done && at < self.pending.len() {
            if self.in_chunk {
                let take = (self.left as usize).min(self.pending.len() - at);
                // The chunk's data, then its CRLF (not body).
                let data_left = self.left.saturating_sub(2) as usize;
                let data = take.min(data_left);
                out(&self.pending[at..at + data])?;
                at += take;
                self.left -= take as u64;
                if self.left == 0 {
                    self.in_chunk = false;
                }
                continue;
            }
            let Some(nl) = self.pending[at..].windows(2).position(|w| w == b"\r\n") else {
                break;
            };
            let line = std::str::from_utf8(&self.pending[at..at + nl]).context("a chunk size")?;
            let size = line.split(';').next().unwrap_or_default().trim();
            let size =
                u64::from_str_radix(size, 16).with_context(|| format!("chunk size {size:?}"))?;
            at += nl + 2;
            if size == 0 {
                self.done = true;
            } else {
                self.left = size + 2;
                self.in_chunk = true;
            }
        }
        self.pending.drain(..at);
        Ok(())
    }
}

/// Runs `ustack get`.
pub fn get(args: &GetArgs) -> anyhow::Result<ExitCode> {
    let (target, host, path) = parse_url(&args.url)?;
    let out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    over_link(
        Get {
            link: &args.link,
            host,
            path,
            out,
        },
        target,
    )
}

/// `ustack get` once the URL is parsed and the output opened.
struct Get<'a> {
    link: &'a ClientLink,
    host: String,
    path: String,
    out: Box<dyn Write>,
}

impl Client for Get<'_> {
    const NAME: &'static str = "get";

    fn link(&self) -> &ClientLink {
        self.link
    }

    fn run<D: Device + Sleep>(
        self,
        mut rt: Runtime<D>,
        stream: TcpStream,
    ) -> anyhow::Result<ExitCode> {
        let Get {
            host,
            path,
            mut out,
            ..
        } = self;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ustack/{}\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n",
            env!("CARGO_PKG_VERSION")
        );
        stream.write_all(&mut rt, request.as_bytes())?;
        rt.register(
            &stream,
            0,
            Interest::READABLE | Interest::RDHUP,
            Mode::Level,
        )?;
        let mut events = Events::with_capacity(4);
        let mut buf = vec![0u8; 64 * 1024];
        let mut head_buf = Vec::new();
        let mut head: Option<Head> = None;
        let mut hasher = Sha256::new();
        let mut body = 0u64;
        let mut dechunk = Dechunk::default();
        let mut emit = |data: &[u8], body: &mut u64| -> anyhow::Result<()> {
            hasher.update(data);
            *body += data.len() as u64;
            out.write_all(data)?;
            Ok(())
        };
        let mut eof = false;
        loop {
            let n = match stream.read(&mut rt, &mut buf) {
                Ok(0) => {
                    eof = true;
                    0
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    rt.poll(&mut events, Some(Duration::from_millis(100)))?;
                    continue;
                }
                Err(e) => return Err(e).context("reading the response"),
            };
            let mut data = &buf[..n];
            if head.is_none() {
                head_buf.extend_from_slice(data);
                let Some(end) = head_buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    if eof {
                        bail!("the connection ended inside the response head");
                    }
                    if head_buf.len() > 64 * 1024 {
                        bail!("a response head over 64 KiB");
                    }
                    continue;
                };
                head = Some(parse_head(&head_buf[..end])?);
                let rest = head_buf.split_off(end + 4);
                head_buf = rest;
                data = &head_buf;
            }
            let h = head.as_ref().expect("parsed");
            if h.chunked {
                dechunk.feed(data, &mut |d| emit(d, &mut body))?;
                if dechunk.done {
                    break;
                }
            } else {
                let take = match h.length {
                    Some(len) => data.len().min((len - body) as usize),
                    None => data.len(),
                };
                emit(&data[..take], &mut body)?;
                if h.length.is_some_and(|len| body >= len) {
                    break;
                }
            }
            head_buf.clear();
            if eof {
                if h.chunked || h.length.is_some() {
                    bail!("the connection ended after {body} bytes of the body");
                }
                break;
            }
        }
        out.flush()?;
        finish(&mut rt, stream)?;
        let status = head.map_or(0, |h| h.status);
        let digest: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        eprintln!("ustack get: HTTP {status}, {body} bytes, sha256 {digest}");
        Ok(if (200..300).contains(&status) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let (a, host, path) = parse_url("http://192.0.2.1:8000/a/b?c=1").unwrap();
        assert_eq!(a, "192.0.2.1:8000".parse().unwrap());
        assert_eq!(
            (host.as_str(), path.as_str()),
            ("192.0.2.1:8000", "/a/b?c=1")
        );
        let (a, _, path) = parse_url("http://192.0.2.1").unwrap();
        assert_eq!((a.port(), path.as_str()), (80, "/"));
        assert!(parse_url("https://192.0.2.1/").is_err());
        assert!(parse_url("http://example.com/").is_err());
        let (a, host, path) = parse_url("http://[2001:db8::1]:8000/f").unwrap();
        assert_eq!(a, "[2001:db8::1]:8000".parse().unwrap());
        assert_eq!((host.as_str(), path.as_str()), ("[2001:db8::1]:8000", "/f"));
        let (a, _, _) = parse_url("http://[2001:db8::1]/").unwrap();
        assert_eq!(a, "[2001:db8::1]:80".parse().unwrap());
        assert!(parse_url("http://[2001:db8::1/").is_err());
    }

    #[test]
    fn heads() {
        let h = parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nServer: x").unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                length: Some(12),
                chunked: false
            }
        );
        let h = parse_head(b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked").unwrap();
        assert!(h.chunked && h.status == 404);
        assert!(parse_head(b"SSH-2.0 hello").is_err());
    }

    #[test]
    fn chunked_bodies_in_pieces() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        for split in 0..wire.len() {
            let mut d = Dechunk::default();
            let mut got = Vec::new();
            let mut sink = |b: &[u8]| -> anyhow::Result<()> {
                got.extend_from_slice(b);
                Ok(())
            };
            d.feed(&wire[..split], &mut sink).unwrap();
            d.feed(&wire[split..], &mut sink).unwrap();
            assert!(d.done, "split at {split}");
            assert_eq!(got, b"hello, world", "split at {split}");
        }
    }
}
