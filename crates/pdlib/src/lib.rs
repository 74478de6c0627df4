//! A packetdrill-compatible shared library for ustack (issue 14, item 2):
//! `libustack_packetdrill.so`, for google packetdrill's `--so_filename` mode.
//!
//! It exports `packetdrill_interface_init(const char *flags, struct packetdrill_interface
//! *ifc)`, which starts a fresh ustack stack on a virtual clock (the conformance runner's
//! [`ustack_conform::ustack::Ustack`] backend: an IP-level device, packets in and out as
//! raw IPv4) and fills every callback of packetdrill's table (`packetdrill.h`):
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

use std::net::Ipv4Addr;

use ustack_conform::exec::Config;

/// The deadline of `netdev_receive` by default: 10 s of virtual time.
pub const DEFAULT_RECEIVE_TIMEOUT_US: u64 = 10_000_000;

/// What `packetdrill_interface_init`'s flags say (packetdrill's `--so_flags`): words
/// separated by spaces or commas, each `name=value`:
/// - `local_ip=A.B.C.D`: the stack's address (packetdrill's `--local_ip`, by default
///   192.168.0.1; the stack has it /24, with a route to everything else);
/// - `receive_timeout_us=N`: how much virtual time `netdev_receive` waits for a packet
///   before giving up ([`DEFAULT_RECEIVE_TIMEOUT_US`]);
/// - anything else is a sysctl by its Linux name (`net.ipv4.tcp_sack=0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// The stack's address.
    pub local_ip: Ipv4Addr,
    /// The `netdev_receive` deadline, in microseconds of virtual time.
    pub receive_timeout_us: u64,
    /// Sysctls by Linux name.
    pub sysctls: Vec<(String, u64)>,
}

impl Flags {
    /// Parses `flags` (see the type's docs); the error names the word.
    pub fn parse(flags: &str) -> Result<Flags, String> {
        let mut f = Flags {
            local_ip: Config::default().local_ip,
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
                "local_ip" => f.local_ip = v.parse().map_err(|e| format!("`{word}`: {e}"))?,
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
            local_ip: self.local_ip,
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
    }
}
