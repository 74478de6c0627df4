//! `--link tun`, `--link packet` and `--link xdp`: ustack and Linux each reached by the
//! same kernel client over a kernel link, in network namespaces the bench makes and
//! removes (root only).
//!
//! - **ustack over tun**: a TUN interface `tun0` created inside a fresh namespace (with
//!   the kernel's offloads unless `--no-offload`: `IFF_VNET_HDR`, TSO4/TSO6 and checksum,
//!   so 64 KiB super-segments move both ways, see `ustack_dev::tun` and `ustack_dev::gso`),
//!   the kernel's end 192.0.2.1/24;
//! - **ustack over packet or xdp**: a veth pair inside a fresh namespace
//!   (`ustack_testkit::netns::PacketRig`, `XdpRig`), the kernel's end `veth0` with
//!   192.0.2.1/24 and its transmit offloads off (the links take no partial checksums or
//!   TSO segments), ustack on the other end through a `TPACKET_V3` socket or an `AF_XDP`
//!   socket (copy mode, fed by the link's XDP program), with the veth end's MAC;
//! - in each, the ustack server at 192.0.2.2 on shard threads of the bench process, one
//!   per queue of the link (`--shards`: the TUN, or the veth pair with that many receive
//!   and transmit queues a side; the same server as over shm, busy-polling 50 µs before it
//!   sleeps in `poll(2)`), the `--conns` connections spread over the shards
//!   ([`balanced_conns`]);
//! - **Linux**: two fresh namespaces joined by a veth pair (192.0.2.1 and 192.0.2.2; for
//!   tun the veth's own offloads on unless `--no-offload`, for packet and xdp the client's
//!   end with its transmit offloads off as in ustack's rig), the Linux server a `ustack
//!   bench-peer` process that enters the server's namespace first.
//!
//! The client is the kernel in both: `--conns` sockets the bench opens inside the client's
//! namespace (`setns(2)` on a short-lived thread, `ustack_dev::in_netns`) and writes from
//! a thread each; the Linux veth pair has as many queues as ustack's link. Each namespace is held by an `unshare --net sleep` process that is
//! killed when the run ends, failed or not (`ustack_testkit::netns::NetNs`); every
//! command in them is bounded by `timeout`.

use std::io::{self, ErrorKind};
use std::net::{SocketAddrV4, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_dev::Device;
use ustack_dev::in_netns;
use ustack_dev::xdp::XdpQueue;
use ustack_runtime::runtime::{RuntimeBuilder, Sleep};
use ustack_stack::EthernetAddress;
use ustack_testkit::netns::{
    KERNEL_IP, NetNs, PacketRig, TUN_NAME, TunRig, USTACK_IP, XdpQueuesRig, on_path, veth_add_argv,
};

use super::shm::{self, Serve, Servers, builder};
use super::{Outcome, Run, kernel_stream_clients, linux_stream_with};

/// The server's port.
const PORT: u16 = 5001;
/// How long the server may take to start listening, or to read to the end.
const PATIENCE: Duration = Duration::from_secs(5);

/// The links of this module.
pub const LINKS: [&str; 3] = ["tun", "packet", "xdp"];

/// Why `--link LINK` (tun, packet or xdp) cannot run here, if it cannot: it needs root
/// (namespaces and their interfaces need `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`; packet and
/// xdp sockets `CAP_NET_RAW`, the XDP program `CAP_BPF`), `/dev/net/tun` for tun, and the
/// tools it runs (`ethtool` for packet and xdp, whose rig turns the kernel end's transmit
/// offloads off, and for `--no-offload`).
pub fn unavailable(link: &str, no_offload: bool) -> Option<String> {
    let why = match link {
        "tun" => {
            "creates a TUN interface, network namespaces and a veth pair \
                  (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
        }
        "packet" => {
            "creates network namespaces and veth pairs and opens AF_PACKET \
                     sockets (CAP_NET_ADMIN, CAP_NET_RAW and CAP_SYS_ADMIN)"
        }
        _ => {
            "creates network namespaces and veth pairs, loads an XDP program and opens \
              an AF_XDP socket (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_SYS_ADMIN)"
        }
    };
    if !rustix::process::geteuid().is_root() {
        return Some(format!(
            "--link {link} needs root: `ustack bench --link {link}` {why}; run it as root \
             (`sudo ustack bench stream --link {link}`)"
        ));
    }
    if link == "tun" && !Path::new("/dev/net/tun").exists() {
        return Some("--link tun: /dev/net/tun is missing (no TUN driver here)".into());
    }
    let mut tools = vec!["unshare", "nsenter", "ip", "timeout"];
    if no_offload || link != "tun" {
        tools.push("ethtool");
    }
    tools.into_iter().find(|t| !on_path(t)).map(|t| {
        format!("--link {link}: `{t}` is not installed; `ustack bench --link {link}` runs it")
    })
}

/// A socket connected from inside `ns` to `to`, again while the server is not listening
/// yet (refused), for up to [`PATIENCE`].
fn connect_in(ns: &NetNs, to: SocketAddrV4) -> anyhow::Result<TcpStream> {
    let deadline = WallClock::now() + PATIENCE;
    loop {
        match in_netns("bench", Some(ns.path()), || TcpStream::connect(to)) {
            Ok(c) => return Ok(c),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused && WallClock::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {to}")),
        }
    }
}

/// stream to the ustack server over `link` (tun, with the kernel's offloads unless
/// `no_offload`; packet; xdp), its interface with `run.shards` queues and the server a
/// shard on each.
pub fn ustack_stream(run: &Run, link: &str, no_offload: bool) -> anyhow::Result<Outcome> {
    let b = shm::ustack_poll(builder(USTACK_IP, 1, 0), run);
    let veth = "setting up the veth pair in a namespace";
    let queues = run.shards;
    match link {
        "packet" => {
            let rig = PacketRig::new(queues).context(veth)?;
            let b = b.mac(EthernetAddress(rig.mac));
            stream_over(run, "packet", &rig.ns, b, rig.queues)
        }
        "xdp" => {
            let XdpQueuesRig { queues, mac, ns } = XdpQueuesRig::new(queues).context(veth)?;
            stream_over(run, "xdp", &ns, b.mac(EthernetAddress(mac)), queues)
        }
        _ => {
            let rig = if no_offload {
                TunRig::new(queues, None)
            } else {
                TunRig::with_offload(queues)
            }
            .context("setting up the TUN interface in a namespace")?;
            stream_over(run, "tun", &rig.ns, b, rig.queues)
        }
    }
}

/// How many connections [`balanced_conns`] may open and close again, per connection it
/// keeps, looking for flows that land on the shards evenly.
const SPARES_PER_CONN: u32 = 8;

/// `run.conns` connections from `ns` to the ustack `server` at `addr`, spread over its
/// shards as evenly as the kernel lets them: the kernel picks a flow's queue by its
/// socket's random hash (`sk_txhash`; veth and TUN have no RSS to steer by), so a
/// connection landing on a shard that already has its share is closed again at once
/// (it carries no byte) and another opened, at most [`SPARES_PER_CONN`] per connection;
/// then the rest are taken as they land. The connections, how many each shard took, and
/// how many were closed again.
fn balanced_conns(
    run: &Run,
    ns: &NetNs,
    addr: SocketAddrV4,
    server: &Servers,
) -> anyhow::Result<(Vec<TcpStream>, Vec<u32>, u32)> {
    let shards = run.shards.max(1);
    let quota = run.conns.div_ceil(shards as u32);
    let (mut kept, mut per_shard, mut spares) = (Vec::new(), vec![0u32; shards], 0u32);
    while kept.len() < run.conns as usize {
        let c = connect_in(ns, addr)?;
        let port = c.local_addr()?.port();
        let deadline = WallClock::now() + PATIENCE;
        let shard = loop {
            if let Some(k) = server.book().shard_of(port) {
                break k;
            }
            if WallClock::now() > deadline {
                bail!("the ustack server did not accept the connection from port {port}");
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let slot = per_shard.get_mut(shard).context("a shard out of range")?;
        if *slot < quota || spares >= SPARES_PER_CONN * run.conns {
            *slot += 1;
            kept.push(c);
        } else {
            spares += 1;
        }
    }
    Ok((kept, per_shard, spares))
}

/// stream from `run.conns` kernel clients in `ns` to the ustack server (a runtime from
/// `builder`, a shard on each of `devices`, the link's queues in `ns`).
fn stream_over<D: Device + Sleep + Send + 'static>(
    run: &Run,
    link: &'static str,
    ns: &NetNs,
    builder: RuntimeBuilder,
    devices: Vec<D>,
) -> anyhow::Result<Outcome> {
    let addr = SocketAddrV4::new(USTACK_IP, PORT);
    let server = Servers::start(
        Serve::Sink,
        builder,
        run.seed.wrapping_add(1),
        devices,
        addr.into(),
    )?;
    let (conns, flows, spares) = balanced_conns(run, ns, addr, &server)?;
    let ports = conns
        .iter()
        .map(|c| c.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<u16>>>()?;
    let (sent, m) = kernel_stream_clients(run, conns)?;
    let deadline = WallClock::now() + PATIENCE;
    while !ports.iter().all(|&p| server.book().read(p).is_some()) {
        if WallClock::now() > deadline {
            bail!("ustack stream over {link}: the server did not read every stream to its end");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The interface goes with the server's queues: read its kernel end's counters first.
    let kernel = if link == "tun" {
        Some(tun_kernel_stats(ns)?)
    } else {
        None
    };
    let report = server.finish()?;
    // Each connection read exactly what was written on it, every byte as the pattern.
    let (mut got, mut verified, mut last_byte) = (0u64, true, m.start());
    for (&port, &sent) in ports.iter().zip(&sent) {
        let (g, matched, last) = report.sink.read(port).context("a stream's report")?;
        got += g;
        verified &= matched && g == sent;
        last_byte = last_byte.max(last);
    }
    let limit = m.bytes();
    let mut o = Outcome::stream(
        "ustack",
        link,
        got,
        last_byte.saturating_duration_since(m.start()),
        verified && limit.is_none_or(|l| got == l),
    )
    .with_counters(report.counters, Value::Null);
    o.conns = run.conns;
    o.shards = run.shards;
    o.per_shard = report.per_shard;
    o.server_cpu = Some(report.cpu);
    let mut stats = json!({
        "server": report.link,
        "flows_per_shard": flows,
        "connections_closed_unused": spares,
    });
    if let Some(kernel) = kernel {
        stats["kernel"] = kernel;
    }
    o.link_stats = stats;
    Ok(o)
}

/// An xdp queue's counters as JSON (the server's `link_stats` over `--link xdp`): frames
/// each way, the kicks (`sendto(2)`) its transmit made and those `need_wakeup` saved,
/// and how many descriptors one kick may hand to the driver.
pub(super) fn xdp_stats(q: &XdpQueue) -> Value {
    let s = q.stats();
    json!({
        "rx_packets": s.rx_packets,
        "tx_packets": s.tx_packets,
        "tx_kicks": s.tx_kicks,
        "tx_kicks_saved": s.tx_kicks_saved,
        "tx_ring_full": s.tx_ring_full,
        "sleeps": s.sleeps,
        "need_wakeup": q.need_wakeup(),
        "tx_budget": q.tx_budget(),
    })
}

/// The kernel's counters for its end of the TUN interface in `ns` (`/proc/net/dev` and
/// `ip link`, read inside the namespace; `/sys/class/net` shows the namespace that
/// mounted it): what it sent ustack (`tx_packets`, one `read(2)` each), what it dropped
/// because ustack's queue was full (`tx_dropped`: `tun_net_xmit` found the ring of
/// `txqueuelen` packets full), what ustack wrote to it (`rx_packets`), and `txqueuelen`.
fn tun_kernel_stats(ns: &NetNs) -> anyhow::Result<Value> {
    let script = format!("cat /proc/net/dev; ip -o link show dev {TUN_NAME}");
    let out = ns
        .run(Duration::from_secs(5), &["sh", "-c", &script])
        .context("reading the TUN interface's counters")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = parse_tun_stats(&text);
    let Some([rx_packets, tx_packets, tx_dropped, txqueuelen]) = parsed else {
        bail!("the TUN interface's counters: {text:?}");
    };
    Ok(json!({
        "tx_packets": tx_packets,
        "tx_dropped": tx_dropped,
        "rx_packets": rx_packets,
        "txqueuelen": txqueuelen,
    }))
}

/// From `/proc/net/dev` and `ip -o link` output: [`TUN_NAME`]'s received and sent
/// packets, sent packets dropped, and its `qlen`.
fn parse_tun_stats(text: &str) -> Option<[u64; 4]> {
    let dev = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{TUN_NAME}:")))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit:
    // bytes packets errs drop ...
    let n: Vec<u64> = dev
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let words: Vec<&str> = text.split_whitespace().collect();
    // `ip -o` ends each line with a backslash where the line would break.
    let qlen = words.windows(2).find(|w| w[0] == "qlen")?[1];
    let qlen = qlen.trim_end_matches('\\').parse().ok()?;
    Some([*n.get(1)?, *n.get(9)?, *n.get(11)?, qlen])
}

/// The veth ends: the client's (in the first namespace) and the server's.
const VETH_CLIENT: &str = "veth0";
const VETH_SERVER: &str = "veth1";

/// Two namespaces joined by a veth pair of `queues` receive and transmit queues a side
/// (as ustack's rigs have them): the client's end [`KERNEL_IP`]/24, the server's
/// [`USTACK_IP`]/24 (the addresses of the rigs), IPv6 off, with the veth's offloads
/// (TSO, GSO, GRO) unless `no_offload`; with `client_tx_off`, the client's end without
/// its transmit offloads (checksum, and with it TSO), as the packet and xdp rigs have it.
fn veth_namespaces(
    queues: usize,
    no_offload: bool,
    client_tx_off: bool,
) -> anyhow::Result<(NetNs, NetNs)> {
    let client = NetNs::new().context("creating the client's namespace")?;
    let server = NetNs::new().context("creating the server's namespace")?;
    let limit = Duration::from_secs(5);
    let pid = server.holder_pid().to_string();
    let mut argv = veth_add_argv(VETH_CLIENT, VETH_SERVER, queues);
    argv.extend(["netns".to_owned(), pid]);
    client.run(limit, &argv)?;
    for (ns, dev, ip) in [
        (&client, VETH_CLIENT, KERNEL_IP),
        (&server, VETH_SERVER, USTACK_IP),
    ] {
        let ipv6 = format!("echo 1 > /proc/sys/net/ipv6/conf/{dev}/disable_ipv6 || true");
        ns.run(limit, &["sh", "-c", &ipv6])?;
        if client_tx_off && dev == VETH_CLIENT {
            ns.run(limit, &["ethtool", "-K", dev, "tx", "off"])?;
        }
        if no_offload {
            ns.run(
                limit,
                &[
                    "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off",
                ],
            )?;
        }
        ns.run(
            limit,
            &["ip", "addr", "add", &format!("{ip}/24"), "dev", dev],
        )?;
        ns.run(limit, &["ip", "link", "set", "lo", "up"])?;
        ns.run(limit, &["ip", "link", "set", dev, "up"])?;
    }
    Ok((client, server))
}

/// stream to a Linux server over a veth pair between two namespaces (`run.shards` queues
/// a side), the same kernel clients as for ustack over `link` (`run.conns` of them; for
/// packet and xdp, their veth end's transmit offloads off as in the rigs).
pub fn linux_stream(run: &Run, link: &str, no_offload: bool) -> anyhow::Result<Outcome> {
    let (client, server) = veth_namespaces(run.shards, no_offload, link != "tun")?;
    let peer_args = [
        "--netns".to_owned(),
        server.path().display().to_string(),
        "--addr".to_owned(),
        USTACK_IP.to_string(),
    ];
    let connect = |port: u16| -> io::Result<TcpStream> {
        in_netns("bench", Some(client.path()), || {
            TcpStream::connect(SocketAddrV4::new(USTACK_IP, port))
        })
    };
    let mut o = linux_stream_with(run, "veth", &peer_args, connect)?;
    o.shards = run.shards;
    drop((client, server));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tun_counters_are_read_from_proc_net_dev_and_ip_link() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame \
                    compressed multicast|bytes packets errs drop fifo colls carrier compressed\n    \
                    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n  tun0:  887752   17072    0    0    0     \
                    0          0         0 1094335424   17110    0    926    0     0       0          \
                    0\n2: tun0: <POINTOPOINT,UP> mtu 1500 qdisc mq state UNKNOWN mode DEFAULT group \
                    default qlen 500\\    link/none \n";
        assert_eq!(parse_tun_stats(text), Some([17072, 17110, 926, 500]));
        assert_eq!(parse_tun_stats("  lo: 0 0 0\n"), None);
    }
}
