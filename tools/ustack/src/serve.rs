//! `ustack serve`: the echo, discard and HTTP servers of `ustack_apps` on a
//! ustack runtime, over a shm link another process attaches to, over a TUN interface whose
//! other end is the Linux kernel, over `AF_PACKET` or `AF_XDP` sockets on an Ethernet
//! interface (a veth end, say), or over an in-process `sim` link with verifying clients.

use core::net::SocketAddr;
use core::time::Duration;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use ustack_apps::{Load, Protocol, Server, ServerStats};
use ustack_dev::Device;
use ustack_dev::capture::{self, Tap, TapSwitch};
use ustack_dev::packet::{Packet, PacketConfig};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::xdp::{Xdp, XdpConfig};
use ustack_obs::Counter;
use ustack_runtime::multi::{ShardApp, ShardContext, ShardedBuilder};
use ustack_runtime::rss::{Rss, RssKey};
use ustack_runtime::runtime::{Clock, Runtime, RuntimeBuilder, Sleep, VirtualClock, sim_pair};
use ustack_stack::inspect::MemoryKind;
use ustack_stack::{AddrState, EthernetAddress, Instant};

use crate::control::{self, ControlServer};
use crate::link::{self, IfAddr, LinkArgs};

/// The server's MAC address on the link.
pub const SERVER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
/// The MAC address of the built-in clients of `--link sim`.
const CLIENT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// How long the server waits for the client process to attach to the shm link.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// Arguments of `ustack serve`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
LINKS:
  shm (default): the server creates a shared-memory link and offers it on an abstract Unix
    socket; it prints one line to stdout,

        shm-offer <name>

    then waits (up to 60 s) for one process of the same user to attach as side B with
    ustack_dev::shm::ShmPeer::connect(<name>, timeout) and .attach(), and serves over it
    until --duration passes (or forever), or until SIGTERM or SIGINT. The server is --addr's
    address (prefix /24 unless given) with MAC 02:00:00:00:00:02; the client runtime takes
    any other address on that subnet. At the end it prints each shard's counters
    (`shard <k>: ...`) and their sum (`served: ...`), and exits 0.
    With --shards N the link has N queue pairs, one per shard, each shard a thread with its
    own stack and a listener on --addr (SO_REUSEPORT-like). The client must steer every
    frame to the queue of the shard its flow hashes to, as a NIC with RSS does: a Toeplitz
    hash of the 4-tuple with the Microsoft key and a round-robin 128-entry table
    (ustack_runtime::RssSplitter with Rss::new(RssKey::MICROSOFT, N), copying ARP to every
    queue, and IPv6 neighbour discovery too, with replicate_unhashed(true)). An IPv6
    --addr ([2001:db8::2]:7) is bound once duplicate address detection has passed (a second).
  tun: the server creates the TUN interface --tun (bare IP packets, no link layer) in the
    network namespace --netns (a name from `ip netns add`, or a path such as
    /proc/<pid>/ns/net; default: this process's), prints one line to stdout,

        tun-ready <interface>

    and serves until --duration passes (or forever, or SIGTERM/SIGINT); the interface goes
    away when it exits (unless it existed before: see --tun). The kernel's end is yours to configure, e.g. for --addr 192.0.2.2:7:

        ip netns exec NS ip addr add 192.0.2.1/24 dev <interface>
        ip netns exec NS ip link set <interface> up

    With --addr6 2001:db8::2/64, also (the kernel's TUN end may have IPv6 off):

        ip netns exec NS sysctl -w net.ipv6.conf.<interface>.disable_ipv6=0
        ip netns exec NS ip -6 addr add 2001:db8::1/64 dev <interface> nodad
        ip netns exec NS ping -6 2001:db8::2

    Off-subnet peers are reached through --gateway (e.g. a router namespace).
    Needs CAP_NET_ADMIN (root).
  packet, xdp: the server takes the existing Ethernet interface --interface in --netns (a
    veth end, say), answering for --addr with the interface's own MAC address (give the
    interface no address of its own: the kernel would answer for it too), prints one line

        packet-ready <interface>    (or xdp-ready <interface>)

    once every shard listens, and serves until --duration passes (or forever, or
    SIGTERM/SIGINT). packet: AF_PACKET sockets with TPACKET_V3 rings, one per shard in one
    PACKET_FANOUT group (the kernel steers each flow to one of them by its hash). xdp: an
    XDP program ustack loads for the run and AF_XDP sockets in copy mode, one per receive
    queue 0..--shards (a veth end needs that many: `ip link add ... numrxqueues N
    numtxqueues N`), with need_wakeup. The kernel's end of a veth pair should have its
    transmit offloads off (`ethtool -K veth0 tx off`): these links carry whole frames, no
    partial checksums or TSO segments. Needs root (CAP_NET_ADMIN and CAP_NET_RAW; xdp
    CAP_BPF too).
  sim: the server and --clients verifying clients (every echo byte, every HTTP response
    checked) run in this process over the in-process sim link on a virtual clock, until
    every client is done; --duration bounds the virtual time. Prints the result and fails
    on any mismatch.

EXAMPLES:
  ustack serve echo --duration 30s
  ustack serve http --root ./site --addr 192.0.2.2:8080
  ustack serve http --link sim --clients 100
  ustack serve echo --link tun --netns test --tun tun0 --addr 192.0.2.2/24:7 \
      --gateway 192.0.2.1 --sysctl net.ipv4.tcp_sack=0
  ustack serve http --link xdp --interface veth1 --netns test --addr 192.0.2.2:80 \
      --shards 2

CONTROL SOCKET:
  Without --control (and $USTACK_CONTROL), the first server takes the default path; a
  second one, finding it taken, takes serve-<pid>.sock beside it and prints it.")]
pub struct Args {
    /// The protocol: echo (RFC 862), discard (RFC 863) or http (HTTP/1.1: `GET /` answers
    /// "Hello, World!", other paths are files under --root).
    #[arg(value_parser = ["echo", "discard", "http"])]
    proto: String,
    /// The link: shm (another process attaches), tun (the Linux kernel is the peer),
    /// packet or xdp (an AF_PACKET or AF_XDP socket per shard on --interface, the kernel
    /// on the other end of it), or sim (in-process verifying clients).
    #[arg(long, default_value = "shm", value_parser = ["shm", "tun", "packet", "xdp", "sim"])]
    link: String,
    #[command(flatten)]
    iface: LinkArgs,
    /// packet, xdp: the Ethernet interface to take (a veth end, say), in --netns; the
    /// server answers for --addr on it with the interface's MAC address.
    #[arg(long)]
    interface: Option<String>,
    /// The directory the HTTP server serves files from (http only).
    #[arg(long)]
    root: Option<PathBuf>,
    /// The server's address, prefix length (default /24) and port: IP[/LEN]:PORT.
    #[arg(long, default_value = "192.0.2.2/24:80")]
    addr: IfAddr,
    /// How long to serve (e.g. 10s, 500ms, 2m; a plain number is seconds). Default: shm
    /// forever, sim 60 s of virtual time.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// shm, tun, packet, xdp: the control socket `ustack stat`, `ss`, `sysctl` and `capture` talk to
    /// (default: $USTACK_CONTROL, else $XDG_RUNTIME_DIR/ustack/serve.sock, else
    /// `/tmp/ustack-<uid>/serve.sock`; if a running server has it, `serve-<pid>.sock` there).
    #[arg(long)]
    control: Option<PathBuf>,
    /// shm, tun, packet, xdp: shards (threads, each with its own stack and queue), 1 to
    /// 64 (xdp: at most the interface's receive queues).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    shards: u16,
    /// shm, tun, packet, xdp: how long (µs) a shard that ran out of work keeps polling its device before
    /// it sleeps (Linux's `net.core.busy_poll`; 0: sleep at once). A peer's ACK that comes
    /// back within it costs no wake-up: against a kernel client with 4 KB buffers over TUN
    /// a download ran at 27 MB/s sleeping at once and 59 MB/s with 50 µs (docs/tools.md).
    /// The CPU it costs is bounded: at most this long after each burst of work.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    busy_poll: u64,
    /// shm, tun: how the shards busy-poll: `adaptive` (spin within `--busy-poll` only
    /// while work keeps arriving, sleep at once on a core shared with other work; the
    /// runtime's default), `fixed` (the whole `--busy-poll` after every burst of work) or
    /// `sleep` (no busy polling, as `--busy-poll 0`).
    #[arg(long, default_value = "adaptive", value_parser = ["adaptive", "fixed", "sleep"])]
    poll: String,
    /// sim: how many concurrent clients.
    #[arg(long, default_value_t = 100)]
    clients: usize,
    /// sim: exchanges per client (echoes, messages, or requests on one keep-alive
    /// connection).
    #[arg(long, default_value_t = 10)]
    requests: u64,
    /// Derive the stacks' secrets (ISN, SYN-cookie and hash keys) from this seed, so that a
    /// run replays. Default: shm and tun draw them from the OS (predictable secrets let an
    /// off-path attacker guess ISNs and forge SYN cookies); sim uses 1 (server) and 2
    /// (client).
    #[arg(long)]
    seed: Option<u64>,
}

/// `10s`, `500ms`, `2m`, `1.5s`, `3` (seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (e.g. 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (ms, s, m, h)")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!("`{s}` is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `builder` with a fixed seed if the user asked for one; secrets from the OS otherwise.
fn with_seed(builder: RuntimeBuilder, seed: Option<u64>) -> RuntimeBuilder {
    match seed {
        Some(seed) => builder.seed(seed),
        None => builder,
    }
}

impl Args {
    /// The address the servers listen on (an IPv6 one if `--addr` was: `[::]` takes
    /// both families).
    fn listen(&self) -> SocketAddr {
        self.addr.socket_addr()
    }
}

fn print_stats(label: &str, s: &ServerStats) {
    println!(
        "{label}: accepted={} closed={} errors={} bytes_in={} bytes_out={} http_200={} \
         http_400={} http_404={} http_405={} http_431={} http_other={} linger_timeouts={}",
        s.accepted,
        s.closed,
        s.errors,
        s.bytes_in,
        s.bytes_out,
        s.http_200,
        s.http_400,
        s.http_404,
        s.http_405,
        s.http_431,
        s.http_other,
        s.linger_timeouts
    );
}

/// Runs `ustack serve`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let proto = Protocol::from_name(&args.proto).context("unknown protocol")?;
    if let Some(root) = &args.root {
        if proto != Protocol::Http {
            bail!("--root is for the http server only");
        }
        if !root.is_dir() {
            bail!("--root {}: not a directory", root.display());
        }
    }
    if args.addr.port.is_none_or(|p| p == 0) {
        bail!("--addr needs a port other than 0 (IP[/LEN]:PORT)");
    }
    if args.shards > 1 && args.link == "sim" {
        bail!(
            "--shards is for --link shm, tun, packet or xdp (the sim clients run against one \
             shard)"
        );
    }
    let ethernet = matches!(args.link.as_str(), "packet" | "xdp");
    if args.link != "tun" && (args.iface.mtu.is_some() || args.iface.no_offload) {
        bail!("--mtu and --no-offload are for --link tun only");
    }
    if args.link != "tun" && !ethernet && args.iface.netns.is_some() {
        bail!("--netns is for --link tun, packet or xdp");
    }
    if ethernet != args.interface.is_some() {
        bail!(
            "--interface NAME goes with --link packet or xdp (and they need it; tun takes \
             --tun)"
        );
    }
    if args.link == "sim" {
        if args.control.is_some() {
            bail!("--control is for --link shm or tun (the sim run ends by itself)");
        }
        return sim(args, proto);
    }
    match args.link.as_str() {
        "tun" => tun(args, proto),
        "packet" | "xdp" => ethernet_link(args, proto),
        _ => shm(args, proto),
    }
}

/// The server of one shard: `ustack_apps`' server, bound on the shard's own
/// stack when the shard starts.
struct ShardServer {
    proto: Protocol,
    addr: SocketAddr,
    root: Option<PathBuf>,
    server: Option<Server>,
}

impl ShardServer {
    /// Bind the server, unless its IPv6 address is still tentative (duplicate address
    /// detection on an Ethernet link, RFC 4862 §5.4: Linux refuses to bind one,
    /// EADDRNOTAVAIL, so this waits for it to become usable and binds then).
    fn bind<D: Device + Sleep>(&mut self, rt: &mut Runtime<D>) -> std::io::Result<()> {
        if let SocketAddr::V6(a) = self.addr
            && let Some(AddrState::Tentative { .. }) = rt.stack().ipv6_addr_state(*a.ip())
        {
            return Ok(());
        }
        let server = Server::bind(rt, self.proto, self.addr, self.root.clone())?;
        self.server = Some(server);
        Ok(())
    }
}

impl<D: Device + Sleep> ShardApp<D> for ShardServer {
    fn start(&mut self, ctx: &mut ShardContext<'_, D>) -> std::io::Result<()> {
        self.bind(ctx.rt)
    }

    fn poll(&mut self, ctx: &mut ShardContext<'_, D>) -> std::io::Result<()> {
        match &mut self.server {
            Some(server) => server.step(ctx.rt, Some(Duration::ZERO)).map(drop),
            None => self.bind(ctx.rt),
        }
    }

    fn memory(&self) -> Vec<MemoryKind> {
        self.server.iter().map(Server::memory).collect()
    }
}

/// The control socket of `--control` (or the default path; if another running server
/// has that, `serve-<pid>.sock` beside it).
fn bind_control(args: &Args) -> anyhow::Result<ControlServer> {
    let path = control::path(args.control.as_deref());
    let chosen = args.control.is_some() || std::env::var_os("USTACK_CONTROL").is_some();
    let control = match ControlServer::bind(&path) {
        Err(e) if !chosen && std::os::unix::net::UnixStream::connect(&path).is_ok() => {
            let own = control::path_for_pid(&path, std::process::id());
            let control = ControlServer::bind(&own).context(e)?;
            eprintln!(
                "ustack serve: {} belongs to another running ustack serve; this one's is \
                 {} (pass --control {} to ustack stat, ss, sysctl, capture)",
                path.display(),
                own.display(),
                own.display()
            );
            control
        }
        r => r?,
    };
    eprintln!("ustack serve: control socket {}", control.path().display());
    Ok(control)
}

/// Serve on one shard per device until `--duration` passes (or forever), then print every
/// shard's counters and their sum. Flows reach shards as the device steers them: by
/// Toeplitz RSS (the shm client's `RssSplitter`), or by the kernel's flow hash (TUN queues).
fn serve<D: Device + Sleep + Send + 'static>(
    devices: Vec<D>,
    mac: EthernetAddress,
    args: &Args,
    proto: Protocol,
    control: ControlServer,
    on_ready: impl FnOnce() -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    let shards = devices.len();
    let Some(first) = devices.first() else {
        bail!("no device queue to serve on");
    };
    let link = capture::link_type(first.caps().medium);
    let tap = TapSwitch::new(control::TAP_QUEUE);
    let devices: Vec<Tap<D>> = devices
        .into_iter()
        .map(|d| Tap::new(d, tap.clone()))
        .collect();
    let (addr, root) = (args.listen(), args.root.clone());
    let rt = ShardedBuilder::new(
        with_seed(args.iface.builder(&args.addr)?.mac(mac), args.seed)
            .busy_poll(Duration::from_micros(match args.poll.as_str() {
                "sleep" => 0,
                _ => args.busy_poll,
            }))
            .busy_poll_adaptive(args.poll != "fixed"),
        Rss::new(RssKey::MICROSOFT, shards),
    )
    .start(devices, move |_shard| ShardServer {
        proto,
        addr,
        root: root.clone(),
        server: None,
    })
    .with_context(|| format!("starting {shards} shard(s) listening on {}", args.addr))?;
    let stop = link::stop_on_signals()?;
    on_ready()?;
    let until = args.duration.map(|d| std::time::Instant::now() + d);
    control.serve_until(&rt, Some(&tap), link, until, &stop);
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("ustack serve: stopping on a signal");
    }
    let mut total = ServerStats::default();
    for (k, app) in rt.stop().into_iter().enumerate() {
        let app = app.with_context(|| format!("shard {k}"))?;
        let stats = app.server.as_ref().map(|s| *s.stats()).unwrap_or_default();
        print_stats(&format!("shard {k}"), &stats);
        total.merge(&stats);
    }
    print_stats("served", &total);
    Ok(ExitCode::SUCCESS)
}

fn tun(args: &Args, proto: Protocol) -> anyhow::Result<ExitCode> {
    let (name, queues) = args.iface.open_tun(usize::from(args.shards))?;
    let control = bind_control(args)?;
    eprintln!(
        "ustack serve: {} on {} over tun `{name}`{}",
        args.proto,
        args.addr,
        args.iface.netns_note()
    );
    // `tun-ready` once every shard listens: a kernel client may connect right after it.
    serve(queues, SERVER_MAC, args, proto, control, || {
        ready("tun", &name)
    })
}

/// `KIND-ready NAME` on stdout: every shard listens.
fn ready(kind: &str, name: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{kind}-ready {name}")?;
    out.flush()
}

/// `--link packet` or `xdp`: a socket per shard on `--interface` in `--netns`, the
/// server with the interface's MAC address.
fn ethernet_link(args: &Args, proto: Protocol) -> anyhow::Result<ExitCode> {
    let interface = args.interface.clone().unwrap_or_default();
    let (queues, netns) = (usize::from(args.shards), args.iface.netns_path());
    let what = format!(
        "opening {} on `{interface}`{}",
        if args.link == "packet" {
            "AF_PACKET sockets"
        } else {
            "AF_XDP sockets"
        },
        args.iface.netns_note()
    );
    let control = bind_control(args)?;
    eprintln!(
        "ustack serve: {} on {} over {} on `{interface}`{}, {queues} shard(s)",
        args.proto,
        args.addr,
        args.link,
        args.iface.netns_note()
    );
    let on_ready = || ready(&args.link, &interface);
    if args.link == "packet" {
        let config = PacketConfig {
            interface: interface.clone(),
            queues,
            netns,
            ..PacketConfig::default()
        };
        let link = Packet::open(&config).context(what)?;
        let mac = EthernetAddress(link.mac());
        serve(link.into_queues(), mac, args, proto, control, on_ready)
    } else {
        let config = XdpConfig {
            interface: interface.clone(),
            queues,
            netns,
            ..XdpConfig::default()
        };
        let link = Xdp::open(&config).context(what)?;
        let mac = EthernetAddress(link.mac());
        serve(link.into_queues(), mac, args, proto, control, on_ready)
    }
}

fn shm(args: &Args, proto: Protocol) -> anyhow::Result<ExitCode> {
    // Bound first, so that a second instance on the same socket fails before it offers a
    // link.
    let control = bind_control(args)?;
    let shards = usize::from(args.shards);
    let config = ShmConfig {
        queue_pairs: shards,
        ..ShmConfig::default()
    };
    let (ports, peer) = ShmLink::create(&config).context("creating the shm link")?;
    let offer = peer.offer().context("offering the shm link")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "shm-offer {}", offer.name())?;
        out.flush()?;
    }
    eprintln!(
        "ustack serve: {} on {} over shm, {shards} shard(s); waiting for a client to attach \
         to `{}`",
        args.proto,
        args.addr,
        offer.name()
    );
    offer
        .hand_over(ATTACH_TIMEOUT)
        .context("waiting for the client to attach")?;
    serve(ports, SERVER_MAC, args, proto, control, || Ok(()))
}

fn sim(args: &Args, proto: Protocol) -> anyhow::Result<ExitCode> {
    let ip = args.addr.ip;
    let octets = ip.octets();
    let client_ip = core::net::Ipv4Addr::new(
        octets[0],
        octets[1],
        octets[2],
        if octets[3] == 1 { 2 } else { 1 },
    );
    let (a, b) = sim_pair(Default::default());
    let clock = VirtualClock::new(Instant::ZERO);
    let seed = args.seed.unwrap_or(1);
    let mut srt = args
        .iface
        .builder(&args.addr)?
        .mac(SERVER_MAC)
        .seed(seed)
        .build_with_clock(a, clock.participant())?;
    let mut client = RuntimeBuilder::new()
        .ipv4(client_ip, args.addr.prefix)
        .mac(CLIENT_MAC)
        .seed(seed.wrapping_add(1));
    if let Some(c) = args.addr.ip6 {
        client = client.ipv6(sim_client_ip6(c.addr), c.prefix_len);
    }
    let mut crt = client.build_with_clock(b, clock.participant())?;
    // IPv6: both ends' addresses are tentative until duplicate address detection ends
    // (RFC 4862 §5.4, a second of virtual time); the server binds and the clients
    // connect once they may.
    while tentative(srt.stack()).or(tentative(crt.stack())).is_some() {
        if clock.now() >= Instant::ZERO + Duration::from_secs(10) {
            bail!("the IPv6 addresses are still tentative after 10 s of virtual time");
        }
        srt.run_once(Some(Duration::from_millis(5)))?;
        crt.run_once(Some(Duration::from_millis(5)))?;
    }
    let mut server = Server::bind(&mut srt, proto, args.listen(), args.root.clone())?;
    // The clients reach the server at --addr, of its family.
    let target = args.listen();
    let mut load = Load::start(&mut crt, proto, target, args.clients, args.requests)?;
    let limit = Instant::ZERO + args.duration.unwrap_or(Duration::from_secs(60));
    let wall = std::time::Instant::now();
    while !load.done() {
        if clock.now() >= limit {
            bail!(
                "not done after {:?} of virtual time: {load:?}",
                limit.since_epoch()
            );
        }
        server.step(&mut srt, Some(Duration::from_millis(5)))?;
        load.step(&mut crt, Some(Duration::from_millis(5)))
            .context("a client found a wrong reply")?;
    }
    for _ in 0..20 {
        server.step(&mut srt, Some(Duration::from_millis(5)))?;
        crt.run_once(Some(Duration::from_millis(5)))?;
    }
    let l = load.stats();
    let mib = srt.stack().mib();
    println!(
        "sim: the clients connected to {target}; the server received {} IPv4 and {} IPv6 \
         packets",
        mib.get(Counter::IpInReceives),
        mib.get(Counter::Ip6InReceives),
    );
    println!(
        "sim: {} clients, {} exchanges verified ({} bytes sent, {} received and checked) in \
         {:.3} s virtual, {:.3} s real",
        l.finished,
        l.verified,
        l.bytes_out,
        l.bytes_in,
        clock.now().since_epoch().as_secs_f64(),
        wall.elapsed().as_secs_f64()
    );
    print_stats("served", server.stats());
    Ok(ExitCode::SUCCESS)
}

/// One of `stack`'s IPv6 addresses that is not yet usable (tentative: duplicate address
/// detection running, RFC 4862 §5.4), if any.
pub fn tentative(stack: &ustack_stack::Stack) -> Option<core::net::Ipv6Addr> {
    let mut addrs = stack.ipv6_addrs().into_iter().map(|c| c.addr);
    addrs.find(|&a| matches!(stack.ipv6_addr_state(a), Some(AddrState::Tentative { .. })))
}

/// The sim clients' IPv6 address beside the server's `server`: the last bit flipped
/// (2001:db8::3 for a server at 2001:db8::2), or 2001:db8::2 for 2001:db8::1 (whose flip
/// would be the subnet-router anycast address).
fn sim_client_ip6(server: core::net::Ipv6Addr) -> core::net::Ipv6Addr {
    let bits = u128::from(server);
    core::net::Ipv6Addr::from(if bits & 0xffff == 1 {
        bits + 1
    } else {
        bits ^ 1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("").is_err());
    }
}
