//! What `ustack serve`, `connect` and `get` share: the interface's flags (`--addr` with
//! its prefix, `--gateway`, `--sysctl`, `--netns`, and the TUN's `--tun`, `--mtu`), the
//! runtime builder they make, the TUN they open, and the stop signals.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::str::FromStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, bail};
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_stack::{Ipv4Cidr, Ipv6Cidr, Sysctl};

/// An interface address: `IP[/PREFIX][:PORT]` (or `IP:PORT/PREFIX`); the prefix length
/// defaults to 24. Or an IPv6 one in brackets, `[IP6[/PREFIX]][:PORT]` (prefix 64 by
/// default; `[::]:PORT` for a server listening on every address of both families): the
/// interface then keeps the IPv4 address 192.0.2.2/24, which the stack needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfAddr {
    pub ip: Ipv4Addr,
    pub prefix: u8,
    pub port: Option<u16>,
    /// The IPv6 address given in brackets, if that was the form.
    pub ip6: Option<Ipv6Cidr>,
}

impl IfAddr {
    /// The IPv4 address the interface keeps when `--addr` is an IPv6 one.
    pub const IPV4_BESIDE_IPV6: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

    /// The socket address `IP:PORT` (port 0 without one): IPv6 if given so.
    pub fn socket_addr(&self) -> SocketAddr {
        let port = self.port.unwrap_or(0);
        match self.ip6 {
            Some(c) => SocketAddr::V6(SocketAddrV6::new(c.addr, port, 0, 0)),
            None => SocketAddr::V4(SocketAddrV4::new(self.ip, port)),
        }
    }

    /// `[IP6[/LEN]][:PORT]`.
    fn parse6(s: &str) -> Result<IfAddr, String> {
        let bad = |what: &str| format!("`{s}`: {what} (e.g. [2001:db8::2]:80)");
        let (inner, rest) = s[1..]
            .split_once(']')
            .ok_or_else(|| bad("no closing bracket"))?;
        let (ip, len) = match inner.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (inner, None),
        };
        let ip: Ipv6Addr = ip.parse().map_err(|_| bad("not an IPv6 address"))?;
        let prefix = match len {
            None => 64,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| (1..=128).contains(l))
                .ok_or_else(|| bad("the prefix length must be 1 to 128"))?,
        };
        let port = match rest {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .and_then(|p| p.parse::<u16>().ok())
                    .ok_or_else(|| bad("not a port number"))?,
            ),
        };
        if ip.is_multicast() || ip.is_loopback() {
            return Err(bad("not a unicast address"));
        }
        Ok(IfAddr {
            ip: Self::IPV4_BESIDE_IPV6,
            prefix: 24,
            port,
            ip6: Some(Ipv6Cidr::new(ip, prefix)),
        })
    }
}

impl FromStr for IfAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<IfAddr, String> {
        if s.starts_with('[') {
            return IfAddr::parse6(s);
        }
        let bad = |what: &str| format!("`{s}`: {what} (e.g. 192.0.2.2/24:80 or 192.0.2.2:80)");
        let (head, port) = match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        // The prefix may come after the address or after the port.
        let (ip, prefix, port) = match (head.split_once('/'), port.map(|p| p.split_once('/'))) {
            (Some((ip, len)), None | Some(None)) => (ip, Some(len), port),
            (None, Some(Some((p, len)))) => (head, Some(len), Some(p)),
            (None, None | Some(None)) => (head, None, port),
            (Some(_), Some(Some(_))) => return Err(bad("two prefix lengths")),
        };
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix = match prefix {
            None => 24,
            Some(l) => match l.parse::<u8>() {
                Ok(l) if (1..=32).contains(&l) => l,
                _ => return Err(bad("the prefix length must be 1 to 32")),
            },
        };
        let port = port
            .map(|p| p.parse::<u16>().map_err(|_| bad("not a port number")))
            .transpose()?;
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(bad("not a unicast address"));
        }
        Ok(IfAddr {
            ip,
            prefix,
            port,
            ip6: None,
        })
    }
}

impl core::fmt::Display for IfAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.ip6 {
            Some(c) => write!(f, "[{}/{}]", c.addr, c.prefix_len)?,
            None => write!(f, "{}/{}", self.ip, self.prefix)?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// `NAME=VALUE`, the name one of ustack's sysctls and the value in its range.
pub fn parse_sysctl(s: &str) -> Result<(String, u64), String> {
    if !s.contains('=') {
        return Err(format!(
            "`{s}`: expected NAME=VALUE, e.g. net.ipv4.tcp_sack=0"
        ));
    }
    let (info, value) = crate::sysctl::parse(s).map_err(|e| format!("{e:#}"))?;
    let value = value.ok_or_else(|| format!("`{s}`: no value"))?;
    Sysctl::default()
        .set(info.name, value)
        .map_err(|e| e.to_string())?;
    Ok((info.name.to_owned(), value))
}

/// `ADDR/LEN` as an IPv6 address and prefix length (0 to 128).
fn parse_cidr6(s: &str) -> Result<Ipv6Cidr, String> {
    let (addr, len) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected ADDR/LEN, e.g. 2001:db8::2/64"))?;
    let addr: Ipv6Addr = addr.parse().map_err(|e| format!("{addr:?}: {e}"))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| *l <= 128)
        .ok_or_else(|| format!("{len:?}: a prefix length is 0 to 128"))?;
    Ok(Ipv6Cidr::new(addr, len))
}

/// The interface flags every command that runs a stack takes (beside `--addr` and
/// `--link`, whose defaults differ).
#[derive(Debug, Clone, clap::Args)]
pub struct LinkArgs {
    /// tun: the interface's name (a `%d` is filled in by the kernel). An existing
    /// multi-queue TUN (`ip tuntap add NAME mode tun multi_queue`) is attached to as it is.
    #[arg(long, default_value = "ustack%d")]
    pub tun: String,
    /// The network namespace of the interface: tun creates its interface there; `serve`,
    /// `connect` and `get` over packet or xdp find --interface there. A name (`ip netns
    /// add`) or a path.
    #[arg(long)]
    pub netns: Option<String>,
    /// tun: set the interface MTU (68 to 65535).
    #[arg(long)]
    pub mtu: Option<u32>,
    /// tun: without offloads (no virtio-net header: the kernel checksums what it sends
    /// and ustack sends every segment as a packet of its own). By default the kernel hands
    /// ustack partial checksums and ustack hands the kernel runs of a flow's segments as
    /// one GSO packet, as a veth pair between two kernel namespaces does; a kernel
    /// receiver with small buffers then sees what it sees from a kernel sender and
    /// advertises the same window.
    #[arg(long)]
    pub no_offload: bool,
    /// The next hop (default route) for destinations off --addr's subnet; it must be on
    /// the subnet. Without one, those destinations are unreachable (ENETUNREACH).
    #[arg(long)]
    pub gateway: Option<Ipv4Addr>,
    /// An IPv6 address of the interface, ADDR/LEN (repeatable), e.g. `--addr6
    /// 2001:db8::2/64`: IPv6 is on (ICMPv6 echo, neighbour discovery on Ethernet links,
    /// where the link-local address from the MAC is added; TCP and UDP over IPv6). An
    /// IPv6 `--addr` in brackets is added too.
    #[arg(long = "addr6", value_name = "ADDR/LEN", value_parser = parse_cidr6)]
    pub addr6: Vec<Ipv6Cidr>,
    /// Set a tunable at start by its Linux name, e.g. `--sysctl net.ipv4.tcp_sack=0`
    /// (repeatable; see `ustack sysctl --defaults` for names and ranges).
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = parse_sysctl)]
    pub sysctls: Vec<(String, u64)>,
}

impl LinkArgs {
    /// A runtime builder for the interface `addr` with these flags' gateway and sysctls.
    pub fn builder(&self, addr: &IfAddr) -> anyhow::Result<RuntimeBuilder> {
        let mut b = RuntimeBuilder::new().ipv4(addr.ip, addr.prefix);
        if let Some(gw) = self.gateway {
            let subnet = Ipv4Cidr::new(addr.ip, addr.prefix);
            if !subnet.contains(gw) || gw == addr.ip {
                bail!(
                    "--gateway {gw} is not another address on --addr's subnet {}/{}",
                    addr.ip,
                    addr.prefix
                );
            }
            b = b.gateway(gw);
        }
        for cidr in self.addr6.iter().chain(&addr.ip6) {
            if !cidr.addr.is_unspecified() {
                b = b.ipv6(cidr.addr, cidr.prefix_len);
            }
        }
        for (name, value) in &self.sysctls {
            b = b.sysctl(name, *value);
        }
        Ok(b)
    }

    /// The TUN interface with `queues` queues, created (or attached to) in `--netns`:
    /// its name and queues.
    pub fn open_tun(&self, queues: usize) -> anyhow::Result<(String, Vec<TunQueue>)> {
        let tun = Tun::open(&self.tun_config(queues)).context("creating the TUN interface")?;
        let name = tun.name().to_owned();
        Ok((name, tun.into_queues()))
    }

    /// The TUN interface these flags describe, with `queues` queues.
    pub fn tun_config(&self, queues: usize) -> TunConfig {
        TunConfig {
            name: self.tun.clone(),
            queues,
            mtu: self.mtu,
            netns: self.netns_path(),
            offload: !self.no_offload,
        }
    }

    /// `--netns` as a path: a name is `/run/netns/<name>` (`ip netns add`).
    pub fn netns_path(&self) -> Option<PathBuf> {
        self.netns.as_ref().map(|n| {
            if n.contains('/') {
                PathBuf::from(n)
            } else {
                PathBuf::from("/run/netns").join(n)
            }
        })
    }

    /// ` in netns NAME`, or nothing.
    pub fn netns_note(&self) -> String {
        self.netns
            .as_ref()
            .map(|n| format!(" in netns {n}"))
            .unwrap_or_default()
    }
}

/// A flag that SIGTERM and SIGINT set (instead of ending the process), for a loop that
/// stops cleanly and reports.
pub fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, flag.clone())
            .with_context(|| format!("handling signal {sig}"))?;
    }
    Ok(flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_addresses() {
        let a = |s: &str| s.parse::<IfAddr>();
        let ip = Ipv4Addr::new(192, 0, 2, 2);
        assert_eq!(
            a("192.0.2.2/16:80"),
            Ok(IfAddr {
                ip,
                prefix: 16,
                port: Some(80),
                ip6: None,
            })
        );
        assert_eq!(a("192.0.2.2:80/16"), a("192.0.2.2/16:80"));
        assert_eq!(
            a("192.0.2.2:7"),
            Ok(IfAddr {
                ip,
                prefix: 24,
                port: Some(7),
                ip6: None,
            })
        );
        assert_eq!(
            a("192.0.2.2/30"),
            Ok(IfAddr {
                ip,
                prefix: 30,
                port: None,
                ip6: None,
            })
        );
        for bad in [
            "192.0.2.2/33",
            "192.0.2.2/0",
            "x/24",
            "192.0.2.2:99999",
            "0.0.0.0/8",
            "[2001:db8::2",
            "[2001:db8::2]80",
            "[2001:db8::2/129]:80",
            "[ff02::1]:80",
            "[x]:80",
        ] {
            assert!(a(bad).is_err(), "{bad}");
        }
        let six = a("[2001:db8::2]:80").unwrap();
        assert_eq!(
            six.socket_addr(),
            "[2001:db8::2]:80".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(six.ip6.unwrap().prefix_len, 64);
        assert_eq!(a("[2001:db8::2/96]").unwrap().ip6.unwrap().prefix_len, 96);
        assert_eq!(
            a("[::]:80").unwrap().socket_addr(),
            "[::]:80".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(six.to_string(), "[2001:db8::2/64]:80");
    }

    #[test]
    fn sysctl_settings() {
        assert_eq!(
            parse_sysctl("net.ipv4.tcp_sack=0"),
            Ok(("net.ipv4.tcp_sack".to_owned(), 0))
        );
        let unknown = parse_sysctl("net.ipv4.tcp_nope=1").unwrap_err();
        assert!(unknown.contains("unknown sysctl"), "{unknown}");
        let range = parse_sysctl("net.ipv4.tcp_sack=7").unwrap_err();
        assert!(range.contains("tcp_sack"), "{range}");
        assert!(parse_sysctl("net.ipv4.tcp_sack").is_err());
        assert!(parse_sysctl("net.ipv4.tcp_sack=x").is_err());
    }
}
