//! The ustack protocol stack, sans-I/O.
//!
//! A [`Stack`] is one interface's worth of protocol state: neighbour table (ARP and IPv6
//! neighbour discovery), IPv4 and IPv6 with reassembly and fragmentation, ICMP and
//! ICMPv6, UDP sockets (over IPv4 and IPv6) and TCP sockets (both over IPv4 and IPv6), its
//! counters ([`Mib`]) and tunables ([`Sysctl`]). It never touches a device or a clock:
//!
//! ```text
//!   device frame ──► Stack::receive(now, frame)
//!   application   ──► Stack::udp_send_to(now, ..) / Stack::ping(now, ..)
//!   timers        ──► Stack::handle_timeout(now)         when now >= Stack::poll_timeout()
//!   device        ◄── Stack::poll_transmit(now)          until None, after any of the above
//! ```
//!
//! The runtime (or a test on a virtual clock) owns the loop. Call order within one
//! iteration does not matter for correctness; calling `poll_transmit` until it returns
//! `None` after every other call keeps latency lowest.
//!
//! What the crate offers:
//!
//! - [`Stack`], made from a [`Config`]: the calls above, and the socket calls on it,
//!   `tcp_*` (listen, accept, connect, send, recv, shutdown, close, socket options; see
//!   [`tcp`]), `udp_*` ([`udp`]) and `ping` ([`icmp`]), each failing with an [`Error`] that
//!   maps to Linux's errno.
//! - Socket handles: [`TcpHandle`], [`ListenerHandle`], [`UdpHandle`]; for a poller,
//!   [`SocketKey`], [`Readiness`] and the ready list ([`socket`]).
//! - What an operator looks at: the counters ([`Mib`], Linux's SNMP and netstat names, and
//!   drop reasons), the tunables ([`Sysctl`], by Linux's names), [`TcpInfo`] (`ss -i`),
//!   [`TcpResources`], and [`inspect`]'s socket list and memory by kind (`ss`,
//!   `/proc/net/sockstat`).
//!
//! Module map, after Linux's files: `stack` (the interface: Ethernet in/out, ARP —
//! `net/ethernet/eth.c`, `net/ipv4/arp.c`), `neigh` (`net/core/neighbour.c`), `ip`
//! (`net/ipv4/ip_input.c`, `ip_output.c`; `ip::reassembly` is `ip_fragment.c`; `ip::ipv6`
//! is `net/ipv6/ip6_input.c`, `ip6_output.c`, `exthdrs.c`, and `ip::reasm6` is
//! `net/ipv6/reassembly.c`), `icmp` (`net/ipv4/icmp.c`), `icmpv6` (`net/ipv6/icmp.c`,
//! `ndisc.c`), `udp` (`net/ipv4/udp.c`), `tcp` (`net/ipv4/tcp*.c`; its own map
//! is in [`tcp`]), `sysctl` (`sysctl_net_ipv4.c`). Most users want the sockets of
//! `ustack-runtime`, which runs this loop for them. Two stacks pinging over the simulated
//! link on a virtual clock (the test kit's `Pair` runs the loop above):
//!
//! ```
//! use core::time::Duration;
//! use ustack_dev::sim::SimLinkConfig;
//! use ustack_obs::Counter;
//! use ustack_stack::Mib;
//! use ustack_testkit::{B_IP, Pair};
//!
//! let mut p = Pair::new(SimLinkConfig::default());
//! p.a.ping(p.now, B_IP, 0x1234, 1, b"hello").unwrap();
//! p.run_for(Duration::from_millis(5)); // ARP, the request, the reply
//! let reply = p.a.recv_echo_reply().expect("B answered");
//! assert_eq!((reply.src, reply.seq_no, &reply.data[..]), (B_IP, 1, &b"hello"[..]));
//! let in_msgs = |m: &Mib| m.get(Counter::IcmpInMsgs);
//! assert_eq!((in_msgs(p.a.mib()), in_msgs(p.b.mib())), (1, 1));
//! ```

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

pub(crate) mod counted;
pub mod icmp;
pub mod icmpv6;
pub mod inspect;
pub mod ip;
pub mod neigh;
pub mod secret;
pub(crate) mod slab;
pub mod socket;
pub mod stack;
pub mod sysctl;
pub mod tcp;
pub mod udp;

pub use icmp::EchoReply;
pub use icmpv6::EchoReply6;
pub use ip::ipv6::AddrState;
pub use socket::{Readiness, SocketKey};
pub use stack::Stack;
pub use sysctl::{Sysctl, SysctlError, SysctlInfo};
pub use tcp::buffer::lent::LentReader;
pub use tcp::rx_direct::DirectFrame;
pub use tcp::tx_lend::{LEND_MIN, TxFrame, TxPayload};
pub use tcp::{ListenerHandle, Shutdown, TcpHandle, TcpInfo, TcpOpt, TcpOptValues, TcpResources};
pub use udp::UdpHandle;
pub use ustack_obs::{DropReason, Instant, Mib};
pub use ustack_wire::{EthernetAddress, Medium};

/// An IPv4 address with its prefix length, e.g. `192.0.2.1/24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// Panics if `prefix_len > 32` (a programming error in configuration, not input).
    pub const fn new(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Cidr {
        assert!(prefix_len <= 32, "IPv4 prefix length above 32");
        Ipv4Cidr { addr, prefix_len }
    }

    fn mask(&self) -> u32 {
        if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix_len)
        }
    }

    /// Whether `ip` is on this subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) ^ u32::from(self.addr)) & self.mask() == 0
    }

    /// The subnet's directed broadcast address (none for /31 and /32, RFC 3021).
    pub fn broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix_len < 31).then(|| Ipv4Addr::from(u32::from(self.addr) | !self.mask()))
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// An IPv6 address with its prefix length, e.g. `2001:db8::1/64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Cidr {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
}

impl Ipv6Cidr {
    /// Panics if `prefix_len > 128` (a programming error in configuration, not input).
    pub const fn new(addr: Ipv6Addr, prefix_len: u8) -> Ipv6Cidr {
        assert!(prefix_len <= 128, "IPv6 prefix length above 128");
        Ipv6Cidr { addr, prefix_len }
    }

    /// Whether `ip` is on this prefix.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let mask = if self.prefix_len == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(self.prefix_len))
        };
        (u128::from(ip) ^ u128::from(self.addr)) & mask == 0
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// How to build a [`Stack`].
#[derive(Debug, Clone)]
pub struct Config {
    pub medium: Medium,
    /// Our MAC address (unused for `Medium::Ip`).
    pub mac: EthernetAddress,
    pub ipv4: Ipv4Cidr,
    /// Next hop for destinations off the subnet; without one they are unreachable.
    pub gateway: Option<Ipv4Addr>,
    /// IPv6 addresses (static; [`Config::with_ipv6`]). Empty: IPv6 is off and IPv6 frames
    /// are dropped as `UNHANDLED_PROTO`, unless `net.ipv6.conf.default.accept_ra` is set
    /// on Ethernet (addresses then come from router advertisements). With any, or with
    /// `accept_ra`, an Ethernet interface also gets its link-local address from the MAC
    /// (RFC 4291 Appendix A), first in the list.
    pub ipv6: Vec<Ipv6Cidr>,
    /// IPv6 next hop for destinations off the configured prefixes (usually a router's
    /// link-local address); without one they are unreachable.
    pub gateway6: Option<Ipv6Addr>,
    /// IP MTU of the link (the L2 header is not included).
    pub mtu: usize,
    pub sysctl: Sysctl,
    /// `None` (the default): the stack's secrets (ISN and timestamp-offset keys, SYN-cookie
    /// secrets, hash-table keys, IP identification) are drawn from the OS random number
    /// generator, as Linux draws its own from the kernel's. `Some(seed)`: derived from
    /// `seed`, so that a run replays exactly; only for tests and simulation, since anyone
    /// who knows the seed can predict ISNs and forge SYN cookies.
    pub seed: Option<u64>,
    /// Neither compute nor verify TCP and UDP checksums, as Linux's loopback (whose
    /// device claims `NETIF_F_HW_CSUM`, so no checksum is ever computed, and marks what it
    /// delivers `CHECKSUM_UNNECESSARY`). Only for a link that cannot corrupt a frame and
    /// whose other end is a ustack stack set the same way: a shm link between two ustack
    /// processes. Segments leave with a zero checksum, which any other receiver drops.
    pub checksum_offload: bool,
}

impl Config {
    /// An Ethernet interface with MTU 1500 and Linux's default tunables.
    pub fn ethernet(mac: EthernetAddress, ipv4: Ipv4Cidr) -> Config {
        Config {
            medium: Medium::Ethernet,
            mac,
            ipv4,
            gateway: None,
            ipv6: Vec::new(),
            gateway6: None,
            mtu: 1500,
            sysctl: Sysctl::default(),
            seed: None,
            checksum_offload: false,
        }
    }

    /// An IP-only interface (TUN) with MTU 1500 and Linux's default tunables.
    pub fn ip(ipv4: Ipv4Cidr) -> Config {
        Config {
            medium: Medium::Ip,
            mac: EthernetAddress::default(),
            ipv4,
            gateway: None,
            ipv6: Vec::new(),
            gateway6: None,
            mtu: 1500,
            sysctl: Sysctl::default(),
            seed: None,
            checksum_offload: false,
        }
    }
}

impl Config {
    /// Add a static IPv6 address (turning IPv6 on; see [`Config::ipv6`]).
    pub fn with_ipv6(mut self, cidr: Ipv6Cidr) -> Config {
        self.ipv6.push(cidr);
        self
    }
}

/// Errors of the socket calls, each mapping to the errno Linux would return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// EADDRINUSE: the local port is taken.
    AddrInUse,
    /// EADDRNOTAVAIL: the local address is not ours, or no ephemeral port is free.
    AddrNotAvailable,
    /// EMSGSIZE: too large for one datagram (or for the path with DF set).
    MessageTooLong,
    /// ENETUNREACH: no route to the destination.
    NetUnreachable,
    /// EHOSTUNREACH: an ICMP host unreachable (or administratively prohibited) for what
    /// we sent.
    HostUnreachable,
    /// EACCES: sending to a broadcast address (Linux needs SO_BROADCAST, which ustack does
    /// not have).
    BroadcastDenied,
    /// EINVAL: an argument no call accepts (port 0 as a destination, say).
    InvalidArgument,
    /// EBADF: the handle names no open socket.
    BadHandle,
    /// EAGAIN: nothing to read now.
    WouldBlock,
    /// EPIPE: writing after shutdown or close.
    BrokenPipe,
    /// ECONNRESET: the peer reset the connection.
    ConnectionReset,
    /// ECONNREFUSED: the peer answered the SYN with a reset.
    ConnectionRefused,
    /// ETIMEDOUT: retransmissions (or keepalive probes) ran out.
    TimedOut,
    /// ENOTCONN: the socket is not connected.
    NotConnected,
    /// EDESTADDRREQ: sending without a destination on an unconnected socket.
    DestAddrRequired,
    /// EAFNOSUPPORT: an address of the other family than the socket's (an IPv6
    /// destination for an IPv4 socket), or an IPv4-only call on an IPv6 socket.
    AddrFamily,
    /// EACCES: an ICMPv6 administratively prohibited (or source-policy, reject-route)
    /// Destination Unreachable for what we sent (Linux `icmpv6_err_convert`).
    PermissionDenied,
    /// EPROTO: an ICMPv6 Parameter Problem (or an unknown Destination Unreachable code)
    /// for what we sent (Linux `icmpv6_err_convert`).
    Protocol,
}

impl Error {
    /// The Linux errno value.
    pub fn errno(self) -> i32 {
        match self {
            Error::AddrInUse => 98,
            Error::AddrNotAvailable => 99,
            Error::MessageTooLong => 90,
            Error::NetUnreachable => 101,
            Error::HostUnreachable => 113,
            Error::BroadcastDenied => 13,
            Error::InvalidArgument => 22,
            Error::BadHandle => 9,
            Error::WouldBlock => 11,
            Error::BrokenPipe => 32,
            Error::ConnectionReset => 104,
            Error::ConnectionRefused => 111,
            Error::TimedOut => 110,
            Error::NotConnected => 107,
            Error::DestAddrRequired => 89,
            Error::AddrFamily => 97,
            Error::PermissionDenied => 13,
            Error::Protocol => 71,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::AddrInUse => "address in use (EADDRINUSE)",
            Error::AddrNotAvailable => "address not available (EADDRNOTAVAIL)",
            Error::MessageTooLong => "message too long (EMSGSIZE)",
            Error::NetUnreachable => "network unreachable (ENETUNREACH)",
            Error::HostUnreachable => "no route to host (EHOSTUNREACH)",
            Error::BroadcastDenied => "broadcast not permitted (EACCES)",
            Error::InvalidArgument => "invalid argument (EINVAL)",
            Error::BadHandle => "bad socket handle (EBADF)",
            Error::WouldBlock => "would block (EAGAIN)",
            Error::BrokenPipe => "broken pipe (EPIPE)",
            Error::ConnectionReset => "connection reset by peer (ECONNRESET)",
            Error::ConnectionRefused => "connection refused (ECONNREFUSED)",
            Error::TimedOut => "connection timed out (ETIMEDOUT)",
            Error::NotConnected => "not connected (ENOTCONN)",
            Error::DestAddrRequired => "destination address required (EDESTADDRREQ)",
            Error::AddrFamily => "address family not supported (EAFNOSUPPORT)",
            Error::PermissionDenied => "permission denied (EACCES)",
            Error::Protocol => "protocol error (EPROTO)",
        })
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr() {
        let c = Ipv4Cidr::new(Ipv4Addr::new(192, 0, 2, 1), 24);
        assert!(c.contains(Ipv4Addr::new(192, 0, 2, 200)));
        assert!(!c.contains(Ipv4Addr::new(192, 0, 3, 1)));
        assert_eq!(c.broadcast(), Some(Ipv4Addr::new(192, 0, 2, 255)));
        assert_eq!(
            Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 32).broadcast(),
            None
        );
        assert!(Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, 1), 0).contains(Ipv4Addr::new(8, 8, 8, 8)));
    }
}
