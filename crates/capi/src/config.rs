//! The configuration string of `ustack_stack_open`: space-separated `key=value` words.
//!
//! | key | meaning |
//! |---|---|
//! | `link=sim` | an in-process sim link to a second stack (tests): `ustack_peer` gives it |
//! | `link=tun` | a TUN interface; the kernel (or a namespace of it) is the peer (root) |
//! | `link=packet` | `AF_PACKET` on an existing Ethernet interface `iface=` (a veth end) |
//! | `link=xdp` | `AF_XDP` on an existing Ethernet interface `iface=` |
//! | `addr=IP/LEN` | this stack's address and prefix (required) |
//! | `addr6=IP6/LEN` | this stack's IPv6 address and prefix (optional: `AF_INET6` sockets bind it) |
//! | `peer=IP/LEN` | `sim`: the other stack's address (required for `sim`) |
//! | `peer6=IP6/LEN` | `sim`: the other stack's IPv6 address |
//! | `gateway=IP` | the default gateway (on `addr`'s subnet) |
//! | `tun=NAME` | `tun`: the interface name (`ustack%d` by default) |
//! | `iface=NAME` | `packet`, `xdp`: the Ethernet interface (required) |
//! | `netns=NAME` | `tun`: create it in this namespace (`/run/netns/NAME`, or a path); `packet`, `xdp`: find `iface=` there |
//! | `queues=N` | `tun`: queues, one shard (loop thread) each (1 by default) |
//! | `mtu=N` | `tun`: the interface MTU |
//! | `seed=N` | the stack's secrets from this seed instead of the OS (tests) |
//! | `sysctl.NAME=VALUE` | a tunable by its Linux name, e.g. `sysctl.net.ipv4.tcp_sack=0` |

use core::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use crate::error::{Error, Result};

/// Which link the stack runs over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkConfig {
    /// A sim pair: the second stack's address.
    Sim {
        /// `peer=`.
        peer: (Ipv4Addr, u8),
        /// `peer6=`.
        peer6: Option<(Ipv6Addr, u8)>,
    },
    /// A TUN interface.
    Tun {
        /// `tun=`.
        name: String,
        /// `netns=`, as a path.
        netns: Option<PathBuf>,
        /// `queues=`.
        queues: usize,
        /// `mtu=`.
        mtu: Option<u32>,
    },
    /// An Ethernet interface through `AF_PACKET` (`packet`) or `AF_XDP` (`xdp`): one
    /// queue, the interface's MAC and MTU.
    Ethernet {
        /// `link=`: `packet` or `xdp`.
        kind: String,
        /// `iface=`.
        iface: String,
        /// `netns=`, as a path.
        netns: Option<PathBuf>,
    },
}

/// A parsed configuration string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `link=` and its keys.
    pub link: LinkConfig,
    /// `addr=`.
    pub addr: (Ipv4Addr, u8),
    /// `addr6=`.
    pub addr6: Option<(Ipv6Addr, u8)>,
    /// `gateway=`.
    pub gateway: Option<Ipv4Addr>,
    /// `seed=`.
    pub seed: Option<u64>,
    /// `sysctl.NAME=VALUE`, in order.
    pub sysctls: Vec<(String, u64)>,
}

fn invalid(msg: String) -> Error {
    Error::new(libc::EINVAL, format!("ustack_stack_open: {msg}"))
}

fn num<T: core::str::FromStr>(key: &str, v: &str) -> Result<T> {
    v.parse()
        .map_err(|_| invalid(format!("{key}={v}: not a number")))
}

/// An address family as the configuration writes it: its longest prefix, the `IP/PREFIX`
/// form with an example, its name.
trait Family: core::str::FromStr {
    const BITS: u8;
    const FORM: &'static str;
    const NAME: &'static str;
}

impl Family for Ipv4Addr {
    const BITS: u8 = 32;
    const FORM: &'static str = "IP/PREFIX, e.g. 10.0.0.1/24";
    const NAME: &'static str = "IPv4";
}

impl Family for Ipv6Addr {
    const BITS: u8 = 128;
    const FORM: &'static str = "IP6/PREFIX, e.g. 2001:db8::2/64";
    const NAME: &'static str = "IPv6";
}

fn ip<A: Family>(key: &str, v: &str) -> Result<A> {
    v.parse()
        .map_err(|_| invalid(format!("{key}={v}: not an {} address", A::NAME)))
}

fn cidr<A: Family>(key: &str, v: &str) -> Result<(A, u8)> {
    let (a, len) = v
        .split_once('/')
        .ok_or_else(|| invalid(format!("{key}={v}: want {}", A::FORM)))?;
    let len: u8 = num(key, len)?;
    if len > A::BITS {
        return Err(invalid(format!("{key}={v}: prefix over {}", A::BITS)));
    }
    Ok((ip(key, a)?, len))
}

impl Config {
    /// Parse `s`. `EINVAL` with the offending word for a bad key or value, a missing
    /// `link=` or `addr=`, or a key that does not belong to the link.
    pub fn parse(s: &str) -> Result<Config> {
        let mut link = None;
        let mut addr = None;
        let mut addr6 = None;
        let mut peer = None;
        let mut peer6 = None;
        let mut gateway = None;
        let mut seed = None;
        let mut sysctls = Vec::new();
        let mut tun_name = None;
        let mut netns = None;
        let mut queues = None;
        let mut mtu = None;
        let mut iface = None;
        for word in s.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| invalid(format!("{word}: want key=value")))?;
            match k {
                "link" => match v {
                    "sim" | "tun" | "packet" | "xdp" => link = Some(v.to_owned()),
                    _ => return Err(invalid(format!("link={v}: sim, tun, packet or xdp"))),
                },
                "addr" => addr = Some(cidr(k, v)?),
                "peer" => peer = Some(cidr(k, v)?),
                "addr6" => addr6 = Some(cidr(k, v)?),
                "peer6" => peer6 = Some(cidr(k, v)?),
                "gateway" => gateway = Some(ip(k, v)?),
                "seed" => seed = Some(num(k, v)?),
                "tun" => tun_name = Some(v.to_owned()),
                "iface" => iface = Some(v.to_owned()),
                "netns" => {
                    netns = Some(if v.contains('/') {
                        PathBuf::from(v)
                    } else {
                        PathBuf::from("/run/netns").join(v)
                    })
                }
                "queues" => {
                    let n: usize = num(k, v)?;
                    if n == 0 {
                        return Err(invalid("queues=0: at least 1".into()));
                    }
                    queues = Some(n);
                }
                "mtu" => mtu = Some(num(k, v)?),
                _ => match k.strip_prefix("sysctl.") {
                    Some(name) if !name.is_empty() => sysctls.push((name.to_owned(), num(k, v)?)),
                    _ => return Err(invalid(format!("{k}: unknown key"))),
                },
            }
        }
        let link = match link.as_deref() {
            Some("sim") => {
                if tun_name.is_some()
                    || netns.is_some()
                    || queues.is_some()
                    || mtu.is_some()
                    || iface.is_some()
                {
                    return Err(invalid(
                        "tun=, netns=, queues=, mtu=, iface= are not for link=sim".into(),
                    ));
                }
                LinkConfig::Sim {
                    peer: peer.ok_or_else(|| invalid("link=sim needs peer=IP/PREFIX".into()))?,
                    peer6,
                }
            }
            Some(kind @ ("packet" | "xdp")) => {
                if peer.is_some() || tun_name.is_some() || mtu.is_some() {
                    return Err(invalid(format!(
                        "link={kind} takes iface= and netns= (not peer=, tun=, mtu=: the \
                         interface's own MTU)"
                    )));
                }
                if queues.is_some_and(|q| q > 1) {
                    return Err(invalid(format!(
                        "queues={}: link={kind} runs one queue (one shard)",
                        queues.unwrap_or(1)
                    )));
                }
                LinkConfig::Ethernet {
                    kind: kind.to_owned(),
                    iface: iface.ok_or_else(|| invalid(format!("link={kind} needs iface=NAME")))?,
                    netns,
                }
            }
            Some(_) => {
                if peer.is_some() || peer6.is_some() {
                    return Err(invalid("peer= and peer6= are for link=sim".into()));
                }
                if iface.is_some() {
                    return Err(invalid(
                        "iface= is for link=packet|xdp (tun takes tun=)".into(),
                    ));
                }
                LinkConfig::Tun {
                    name: tun_name.unwrap_or_else(|| "ustack%d".into()),
                    netns,
                    queues: queues.unwrap_or(1),
                    mtu,
                }
            }
            None => return Err(invalid("link=sim|tun|packet|xdp is required".into())),
        };
        let addr = addr.ok_or_else(|| invalid("addr=IP/PREFIX is required".into()))?;
        Ok(Config {
            link,
            addr,
            addr6,
            gateway,
            seed,
            sysctls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sim_pair() {
        let c = Config::parse(
            "link=sim addr=10.0.0.1/24  peer=10.0.0.2/24 seed=7 sysctl.net.ipv4.tcp_sack=0",
        )
        .unwrap();
        assert_eq!(c.addr, (Ipv4Addr::new(10, 0, 0, 1), 24));
        assert_eq!(
            c.link,
            LinkConfig::Sim {
                peer: (Ipv4Addr::new(10, 0, 0, 2), 24),
                peer6: None
            }
        );
        let c6 = Config::parse(
            "link=sim addr=10.0.0.1/24 peer=10.0.0.2/24 addr6=2001:db8::1/64 peer6=2001:db8::2/64",
        )
        .unwrap();
        assert_eq!(c6.addr6, Some(("2001:db8::1".parse().unwrap(), 64)));
        let peer6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        assert!(matches!(c6.link, LinkConfig::Sim { peer6: Some((a, 64)), .. } if a == peer6));
        assert_eq!(c.seed, Some(7));
        assert_eq!(c.sysctls, vec![("net.ipv4.tcp_sack".to_owned(), 0)]);
    }

    #[test]
    fn a_tun_in_a_namespace() {
        let c =
            Config::parse("link=tun tun=u0 netns=ns1 addr=192.0.2.2/24 gateway=192.0.2.1 queues=2")
                .unwrap();
        assert_eq!(
            c.link,
            LinkConfig::Tun {
                name: "u0".into(),
                netns: Some(PathBuf::from("/run/netns/ns1")),
                queues: 2,
                mtu: None
            }
        );
        assert_eq!(c.gateway, Some(Ipv4Addr::new(192, 0, 2, 1)));
    }

    #[test]
    fn packet_and_xdp_on_an_interface() {
        for kind in ["packet", "xdp"] {
            let c = Config::parse(&format!(
                "link={kind} iface=veth1 netns=ns1 addr=192.0.2.2/24 queues=1"
            ))
            .unwrap();
            assert_eq!(
                c.link,
                LinkConfig::Ethernet {
                    kind: kind.into(),
                    iface: "veth1".into(),
                    netns: Some(PathBuf::from("/run/netns/ns1")),
                }
            );
        }
    }

    #[test]
    fn errors_name_the_word() {
        for (s, want) in [
            ("", "link=sim|tun|packet|xdp is required"),
            ("link=tun", "addr=IP/PREFIX is required"),
            ("link=sim addr=10.0.0.1/24", "needs peer="),
            ("link=xdp addr=10.0.0.1/24", "link=xdp needs iface=NAME"),
            (
                "link=ppp addr=10.0.0.1/24",
                "link=ppp: sim, tun, packet or xdp",
            ),
            (
                "link=packet addr=10.0.0.1/24 iface=veth1 queues=2",
                "link=packet runs one queue",
            ),
            ("link=packet addr=10.0.0.1/24 iface=v tun=t", "takes iface="),
            (
                "link=tun addr=10.0.0.1/24 iface=veth1",
                "iface= is for link=packet",
            ),
            (
                "link=sim addr=10.0.0.1 peer=10.0.0.2/24",
                "addr=10.0.0.1: want IP/PREFIX",
            ),
            (
                "link=sim addr=10.0.0.1/33 peer=10.0.0.2/24",
                "prefix over 32",
            ),
            (
                "link=tun addr=10.0.0.1/24 colour=red",
                "colour: unknown key",
            ),
            ("link=tun addr=10.0.0.1/24 queues=0", "queues=0"),
            (
                "link=tun addr=10.0.0.1/24 peer=10.0.0.2/24",
                "peer= and peer6= are for link=sim",
            ),
            (
                "link=tun addr=10.0.0.1/24 addr6=2001:db8::1/129",
                "prefix over 128",
            ),
            (
                "link=tun addr=10.0.0.1/24 addr6=10.0.0.1/64",
                "not an IPv6 address",
            ),
            (
                "link=sim addr=1.2.3.4/8 peer=1.2.3.5/8 tun=x",
                "are not for link=sim",
            ),
            ("addr", "addr: want key=value"),
        ] {
            let e = Config::parse(s).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "{s}");
            assert!(e.msg.contains(want), "{s}: {}", e.msg);
        }
    }
}
