//! A packetdrill-compatible shared library for ustack (issue 14, item 2):
//! `libustack_packetdrill.so`, for google packetdrill's `--so_filename` mode.
//!
//! It exports `packetdrill_interface_init(const char *flags, struct packetdrill_interface
//! *ifc)`, which starts a fresh ustack stack on a virtual clock (the conformance runner's
//! [`ustack_conform::ustack::Ustack`] backend: an IP-level device, packets in and out as
//! raw IPv4, or IPv6 with `ip_version=ipv6` in the flags) and fills every callback of packetdrill's table (`packetdrill.h`):
//! the system calls run on ustack's sockets with Linux's values and errno; `netdev_send`
//! hands the stack a packet; `netdev_receive` returns the next packet the stack sends,
//! moving the virtual clock to the stack's next timer until one comes out, and gives up
//! after a deadline (count 0: packetdrill has no timeout in this mode); `usleep` and
//! `gettimeofday` run on the virtual clock. Callbacks with nothing behind them (`readv`,
//! `writev`, `recvmsg`, `sendmsg`, `pipe`, `splice`, most `ioctl`s) fail with `ENOTSUP`.
//! [`ffi`] is the C side; [`Flags`] parses the flags string.
//!
//! Why not on the C API (`libustack.so`, `ustack-capi`): that layer runs the stack's loop
//! on its own thread on the real clock; a virtual clock needs the stack driven by the
//! caller (see the `ustack_conform::ustack` module docs).

pub mod ffi;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ustack_conform::exec::{Config, IpVersion};

/// The deadline of `netdev_receive` by default: 10 s of virtual time.
pub const DEFAULT_RECEIVE_TIMEOUT_US: u64 = 10_000_000;

/// What `packetdrill_interface_init`'s flags say (packetdrill's `--so_flags`): words
/// separated by spaces or commas, each `name=value`:
/// - `ip_version=ipv4|ipv4-mapped-ipv6|ipv6`: the address family packetdrill runs in
///   (give packetdrill's own `--ip_version` here too: packetdrill hands the library only
///   these flags). `ipv6` gives the stack its IPv6 address and an MTU of 1520, as
///   packetdrill's runners give the TUN (`--mtu=1520`); the other two, IPv4 on the wire,
///   `AF_INET6` sockets taking IPv4-mapped addresses in the second;
/// - `local_ip=A.B.C.D` or `local_ip=IPV6`: the stack's address (packetdrill's
///   `--local_ip`, by default 192.168.0.1, /24, and fd3d:fa7b:d17d::1, /48, each with a
///   route to everything else);
/// - `receive_timeout_us=N`: how much virtual time `netdev_receive` waits for a packet
///   before giving up ([`DEFAULT_RECEIVE_TIMEOUT_US`]);
/// - anything else is a sysctl by its Linux name (`net.ipv4.tcp_sack=0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// The address family.
    pub ip_version: IpVersion,
    /// The stack's IPv4 address.
    pub local_ip: Ipv4Addr,
    /// The stack's IPv6 address.
    pub local_ip6: Ipv6Addr,
    /// The `netdev_receive` deadline, in microseconds of virtual time.
    pub receive_timeout_us: u64,
    /// Sysctls by Linux name.
    pub sysctls: Vec<(String, u64)>,
}

impl Flags {
    /// Parses `flags` (see the type's docs); the error names the word.
    pub fn parse(flags: &str) -> Result<Flags, String> {
        let mut f = Flags {
            ip_version: IpVersion::Ipv4,
            local_ip: Config::default().local_ip,
            local_ip6: Config::default().local_ip6,
            receive_timeout_us: DEFAULT_RECEIVE_TIMEOUT_US,
            sysctls: Vec::new(),
        };
        for word in flags
            .split([' ', ',', '\t', '\n'])
            .filter(|w| !w.is_empty())
        {
            let (k, v) = word
                .trim_start_matches("--")
                .split_once('=')
                .ok_or_else(|| format!("`{word}`: want name=value"))?;
            match k {
                "local_ip" => match v.parse().map_err(|e| format!("`{word}`: {e}"))? {
                    IpAddr::V4(a) => f.local_ip = a,
                    IpAddr::V6(a) => f.local_ip6 = a,
                },
                "ip_version" => {
                    f.ip_version = IpVersion::parse(v)
                        .ok_or_else(|| format!("`{word}`: ipv4, ipv4-mapped-ipv6 or ipv6"))?;
                }
                "receive_timeout_us" => {
                    f.receive_timeout_us = v.parse().map_err(|e| format!("`{word}`: {e}"))?;
                }
                _ => f.sysctls.push((
                    k.to_owned(),
                    v.parse().map_err(|e| format!("`{word}`: {e}"))?,
                )),
            }
        }
        Ok(f)
    }

    /// The runner's configuration these flags make.
    pub fn config(&self) -> Config {
        Config {
            ip_version: self.ip_version,
            local_ip: self.local_ip,
            local_ip6: self.local_ip6,
            ..Config::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_addresses_timeouts_and_sysctls() {
        let f =
            Flags::parse("local_ip=10.0.0.1, receive_timeout_us=5 net.ipv4.tcp_sack=0").unwrap();
        assert_eq!(f.local_ip, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(f.receive_timeout_us, 5);
        assert_eq!(f.sysctls, vec![("net.ipv4.tcp_sack".to_owned(), 0)]);
        assert_eq!(
            Flags::parse("").unwrap().receive_timeout_us,
            DEFAULT_RECEIVE_TIMEOUT_US
        );
        assert!(Flags::parse("nonsense").is_err());
        assert!(Flags::parse("local_ip=x").is_err());
        let f = Flags::parse("ip_version=ipv6 local_ip=fd00::5").unwrap();
        assert_eq!(f.ip_version, IpVersion::Ipv6);
        assert_eq!(f.local_ip6, "fd00::5".parse::<Ipv6Addr>().unwrap());
        assert_eq!(f.config().mtu(), 1520);
        assert!(Flags::parse("ip_version=ipv5").is_err());
    }
}
