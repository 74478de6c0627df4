//! `struct sockaddr_in` and `struct sockaddr_in6` to and from [`SocketAddr`], on bytes
//! (the FFI module hands over the caller's memory as a slice), with the length and family
//! checks Linux makes for a socket of each domain.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::error::{Error, Result};

/// `sizeof(struct sockaddr_in)`.
pub const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
pub const SOCKADDR_IN6_LEN: usize = 28;
/// Linux's `SIN6_LEN_RFC2133`: a `sockaddr_in6` without `sin6_scope_id`, the shortest
/// an `AF_INET6` socket takes.
const SIN6_LEN_RFC2133: usize = 24;

fn family_of(bytes: &[u8]) -> Result<i32> {
    if bytes.len() < 2 {
        return Err(Error::new(libc::EINVAL, "address too short"));
    }
    Ok(i32::from(u16::from_ne_bytes([bytes[0], bytes[1]])))
}

fn too_short(len: usize, want: usize, what: &str) -> Error {
    Error::new(
        libc::EINVAL,
        format!("address length {len}: a {what} is {want}"),
    )
}

fn wrong_family(family: i32, domain: &str) -> Error {
    Error::new(
        libc::EAFNOSUPPORT,
        format!("address family {family} on an {domain} socket"),
    )
}

/// The `sockaddr_in` in `bytes` (length checked first, as Linux's `inet_bind`,
/// `tcp_v4_connect`, `udp_sendmsg`).
fn parse_in(bytes: &[u8]) -> Result<SocketAddrV4> {
    if bytes.len() < SOCKADDR_IN_LEN {
        return Err(too_short(bytes.len(), SOCKADDR_IN_LEN, "sockaddr_in"));
    }
    let family = family_of(bytes)?;
    if family != libc::AF_INET {
        return Err(wrong_family(family, "AF_INET"));
    }
    let port = u16::from_be_bytes([bytes[2], bytes[3]]);
    let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
    Ok(SocketAddrV4::new(ip, port))
}

/// The address (`bytes`, what the caller passed, `addrlen` long) an `AF_INET` socket
/// (`domain`) or an `AF_INET6` one is given. `AF_INET`: a `sockaddr_in` (`EINVAL`
/// shorter, `EAFNOSUPPORT` another family). `AF_INET6`: a `sockaddr_in6` of at least
/// `SIN6_LEN_RFC2133` bytes (`EINVAL`, then `EAFNOSUPPORT`, Linux `inet6_bind`,
/// `tcp_v6_connect`); with `v4_ok` (a datagram socket's `connect` and `sendto`, Linux
/// `ip6_datagram_connect` and `udpv6_sendmsg`) a `sockaddr_in` too, as its
/// `::ffff:a.b.c.d`. An `AF_INET6` address is always an IPv6 one here (a v4-mapped
/// address stays `::ffff:`); `sin6_flowinfo` and `sin6_scope_id` are not used.
pub fn parse(bytes: &[u8], domain: i32, v4_ok: bool) -> Result<SocketAddr> {
    let family = family_of(bytes)?;
    if domain == libc::AF_INET {
        return parse_in(bytes).map(SocketAddr::V4);
    }
    if family == libc::AF_INET && v4_ok {
        let a = parse_in(bytes)?;
        return Ok(SocketAddr::V6(SocketAddrV6::new(
            a.ip().to_ipv6_mapped(),
            a.port(),
            0,
            0,
        )));
    }
    if bytes.len() < SIN6_LEN_RFC2133 {
        return Err(too_short(bytes.len(), SIN6_LEN_RFC2133, "sockaddr_in6"));
    }
    if family != libc::AF_INET6 {
        return Err(wrong_family(family, "AF_INET6"));
    }
    let port = u16::from_be_bytes([bytes[2], bytes[3]]);
    let mut ip = [0u8; 16];
    ip.copy_from_slice(&bytes[8..24]);
    Ok(SocketAddr::V6(SocketAddrV6::new(
        Ipv6Addr::from(ip),
        port,
        0,
        0,
    )))
}

/// `addr` as an address of a socket of `domain`: an IPv4 one of an `AF_INET6` socket
/// as its `::ffff:a.b.c.d` (Linux reports an IPv4 peer of a dual-stack socket so).
pub fn for_domain(addr: SocketAddr, domain: i32) -> SocketAddr {
    match addr {
        SocketAddr::V4(a) if domain == libc::AF_INET6 => {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        }
        a => a,
    }
}

/// `addr` as a `struct sockaddr_in` (IPv4) or `struct sockaddr_in6` (IPv6), in a buffer
/// of [`SOCKADDR_IN6_LEN`] bytes: the bytes and the length used.
pub fn encode(addr: SocketAddr) -> ([u8; SOCKADDR_IN6_LEN], usize) {
    let mut b = [0u8; SOCKADDR_IN6_LEN];
    b[2..4].copy_from_slice(&addr.port().to_be_bytes());
    let (family, len) = match addr {
        SocketAddr::V4(a) => {
            b[4..8].copy_from_slice(&a.ip().octets());
            (libc::AF_INET, SOCKADDR_IN_LEN)
        }
        SocketAddr::V6(a) => {
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            (libc::AF_INET6, SOCKADDR_IN6_LEN)
        }
    };
    b[0..2].copy_from_slice(&u16::try_from(family).unwrap_or(0).to_ne_bytes());
    (b, len)
}

/// Write `addr` into the caller's buffer as `getsockname(2)` does: as much as fits, and
/// the full length (what `*addrlen` becomes).
pub fn write(addr: SocketAddr, out: &mut [u8]) -> usize {
    let (b, len) = encode(addr);
    let n = out.len().min(len);
    out[..n].copy_from_slice(&b[..n]);
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    const IN: i32 = libc::AF_INET;
    const IN6: i32 = libc::AF_INET6;

    #[test]
    fn round_trip_in_network_order() {
        let a = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 8080));
        let (b, len) = encode(a);
        assert_eq!(len, 16);
        assert_eq!(&b[2..8], &[0x1f, 0x90, 10, 0, 0, 1]);
        assert_eq!(parse(&b[..len], IN, false), Ok(a));
        let a6 = SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2), 443));
        let (b, len) = encode(a6);
        assert_eq!(len, 28);
        assert_eq!(&b[2..4], &[1, 0xbb]);
        assert_eq!(&b[8..10], &[0x20, 0x01]);
        assert_eq!(b[23], 2);
        assert_eq!(parse(&b[..len], IN6, false), Ok(a6));
        // The RFC 2133 length, without the scope id, is enough.
        assert_eq!(parse(&b[..24], IN6, false), Ok(a6));
    }

    #[test]
    fn lengths_and_families_as_linux() {
        let (v4, _) = encode(SocketAddr::from((Ipv4Addr::LOCALHOST, 1)));
        let (v6, _) = encode(SocketAddr::from((Ipv6Addr::LOCALHOST, 1)));
        let e = |r: Result<SocketAddr>| r.map_err(|e| e.errno);
        assert_eq!(e(parse(&v4[..8], IN, false)), Err(libc::EINVAL));
        assert_eq!(e(parse(&[], IN, false)), Err(libc::EINVAL));
        // An AF_INET socket given a sockaddr_in6: EAFNOSUPPORT (inet_bind, tcp_v4_connect).
        assert_eq!(e(parse(&v6, IN, false)), Err(libc::EAFNOSUPPORT));
        // An AF_INET6 socket given a sockaddr_in: its 16 bytes are short of
        // SIN6_LEN_RFC2133 (EINVAL first, as inet6_bind); longer, EAFNOSUPPORT.
        assert_eq!(e(parse(&v4[..16], IN6, false)), Err(libc::EINVAL));
        assert_eq!(e(parse(&v4, IN6, false)), Err(libc::EAFNOSUPPORT));
        assert_eq!(e(parse(&v6[..23], IN6, false)), Err(libc::EINVAL));
        // A datagram AF_INET6 socket's connect/sendto takes it, v4-mapped.
        assert_eq!(
            parse(&v4[..16], IN6, true),
            Ok(SocketAddr::from((Ipv4Addr::LOCALHOST.to_ipv6_mapped(), 1)))
        );
    }

    #[test]
    fn write_truncates_and_reports_the_full_length() {
        let a = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 9), 7));
        let mut small = [0u8; 4];
        assert_eq!(write(a, &mut small), 16);
        assert_eq!(&small[2..4], &[0, 7]);
        let mut big = [0xffu8; 30];
        assert_eq!(write(a, &mut big), 16);
        assert_eq!(&big[4..8], &[192, 0, 2, 9]);
        assert_eq!(&big[8..16], &[0; 8]);
        assert_eq!(big[16], 0xff);
        let mapped = for_domain(a, IN6);
        assert_eq!(write(mapped, &mut big), 28);
        assert_eq!(
            &big[8..24],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 9]
        );
    }
}
