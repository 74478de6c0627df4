//! `struct sockaddr_in` to and from [`SocketAddrV4`], on bytes (the FFI module hands over
//! the caller's memory as a slice).

use core::net::{Ipv4Addr, SocketAddrV4};

use crate::error::{Error, Result};

/// `sizeof(struct sockaddr_in)`.
pub const SOCKADDR_IN_LEN: usize = 16;

/// The address in a `struct sockaddr_in` (`bytes` is what the caller passed, `addrlen`
/// long). `EINVAL` if shorter than a `sockaddr_in`, `EAFNOSUPPORT` for a family other
/// than `AF_INET` (ustack speaks IPv4), as Linux's `inet_bind`/`inet_stream_connect` say.
pub fn parse(bytes: &[u8]) -> Result<SocketAddrV4> {
    if bytes.len() < 2 {
        return Err(Error::new(libc::EINVAL, "address too short"));
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    if i32::from(family) != libc::AF_INET {
        return Err(Error::new(
            libc::EAFNOSUPPORT,
            format!("address family {family}: ustack speaks AF_INET"),
        ));
    }
    if bytes.len() < SOCKADDR_IN_LEN {
        return Err(Error::new(
            libc::EINVAL,
            format!(
                "address length {}: a sockaddr_in is {SOCKADDR_IN_LEN}",
                bytes.len()
            ),
        ));
    }
    let port = u16::from_be_bytes([bytes[2], bytes[3]]);
    let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
    Ok(SocketAddrV4::new(ip, port))
}

/// `addr` as a `struct sockaddr_in`.
pub fn encode(addr: SocketAddrV4) -> [u8; SOCKADDR_IN_LEN] {
    let mut b = [0u8; SOCKADDR_IN_LEN];
    let family = u16::try_from(libc::AF_INET).unwrap_or(2);
    b[0..2].copy_from_slice(&family.to_ne_bytes());
    b[2..4].copy_from_slice(&addr.port().to_be_bytes());
    b[4..8].copy_from_slice(&addr.ip().octets());
    b
}

/// Write `addr` into the caller's buffer as `getsockname(2)` does: as much as fits, and
/// the full length (what `*addrlen` becomes).
pub fn write(addr: SocketAddrV4, out: &mut [u8]) -> usize {
    let b = encode(addr);
    let n = out.len().min(b.len());
    out[..n].copy_from_slice(&b[..n]);
    SOCKADDR_IN_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_in_network_order() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 8080);
        let b = encode(a);
        assert_eq!(&b[2..8], &[0x1f, 0x90, 10, 0, 0, 1]);
        assert_eq!(parse(&b), Ok(a));
    }

    #[test]
    fn bad_family_and_length() {
        let mut b = encode(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1));
        assert_eq!(parse(&b[..8]).map_err(|e| e.errno), Err(libc::EINVAL));
        assert_eq!(parse(&[]).map_err(|e| e.errno), Err(libc::EINVAL));
        b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        assert_eq!(parse(&b).map_err(|e| e.errno), Err(libc::EAFNOSUPPORT));
    }

    #[test]
    fn write_truncates_and_reports_the_full_length() {
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), 7);
        let mut small = [0u8; 4];
        assert_eq!(write(a, &mut small), 16);
        assert_eq!(&small[2..4], &[0, 7]);
        let mut big = [0xffu8; 20];
        assert_eq!(write(a, &mut big), 16);
        assert_eq!(&big[4..8], &[192, 0, 2, 9]);
        assert_eq!(&big[8..16], &[0; 8]);
        assert_eq!(big[16], 0xff);
    }
}
