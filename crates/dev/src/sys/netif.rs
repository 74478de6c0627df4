//! Interface queries and settings through `struct ifreq` ioctls, for [`crate::tun`] and
//! [`crate::packet`]: the MTU (`SIOCGIFMTU`/`SIOCSIFMTU`) and the hardware address
//! (`SIOCGIFHWADDR`), each through an `AF_INET` socket of the calling thread's network
//! namespace. The interface index comes from rustix (`SIOCGIFINDEX`).
//!
//! Each `ioctl(2)` here is on a `struct ifreq` owned by the call, of the kernel's size,
//! fully initialised.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `IFNAMSIZ`: interface names are at most 15 bytes and a NUL.
pub(crate) const IFNAMSIZ: usize = 16;

/// `struct ifreq` (linux/if.h): the name, then a 24-byte union of which we use the
/// `short ifr_flags` and the `int ifr_mtu`, both at its start, and the `struct sockaddr
/// ifr_hwaddr` (family, then the address bytes). 40 bytes on 64-bit Linux.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IfReq {
    pub(crate) name: [u8; IFNAMSIZ],
    pub(crate) data: [u8; 24],
}

const _: () = assert!(size_of::<IfReq>() == 40);

impl IfReq {
    /// An `ifreq` for `name`, which the caller validated (shorter than `IFNAMSIZ`, no NUL).
    pub(crate) fn new(name: &str) -> IfReq {
        let mut r = IfReq {
            name: [0; IFNAMSIZ],
            data: [0; 24],
        };
        r.name[..name.len()].copy_from_slice(name.as_bytes());
        r
    }

    /// The name, up to its NUL.
    pub(crate) fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// Checks an interface name: 1 to 15 bytes, not `.` or `..`, no `/`, `:`, whitespace or
/// NUL (the kernel's `dev_valid_name`).
pub(crate) fn valid_name(name: &str) -> bool {
    !(name.is_empty()
        || name.len() >= IFNAMSIZ
        || name == "."
        || name == ".."
        || name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace()))
}

/// Runs the interface ioctl `request` on `req` through a fresh `AF_INET` socket.
fn ifreq_ioctl(request: libc::Ioctl, req: &mut IfReq) -> io::Result<()> {
    let sock = inet_socket()?;
    // SAFETY: the SIOC[GS]IF* requests used here read and write one `struct ifreq` at the
    // pointer; `req` is a live, initialised `IfReq` of the kernel's size (40 bytes, checked
    // above) that outlives the call; `sock` is an open socket we own.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request, &raw mut *req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The MTU of interface `name` in the calling thread's network namespace.
pub(crate) fn mtu(name: &str) -> io::Result<usize> {
    let mut req = IfReq::new(name);
    ifreq_ioctl(libc::SIOCGIFMTU, &mut req)?;
    let mtu = libc::c_int::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]);
    usize::try_from(mtu).map_err(|_| io::Error::other("negative MTU"))
}

/// Sets the MTU of interface `name` in the calling thread's network namespace.
pub(crate) fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MTU too large"))?;
    let mut req = IfReq::new(name);
    req.data[..4].copy_from_slice(&mtu.to_ne_bytes());
    ifreq_ioctl(libc::SIOCSIFMTU, &mut req)
}

/// The hardware address of interface `name` (in the calling thread's network namespace)
/// and its `ARPHRD_*` type: `ARPHRD_ETHER` (1) for Ethernet and veth.
pub(crate) fn hwaddr(name: &str) -> io::Result<([u8; 6], u16)> {
    let mut req = IfReq::new(name);
    ifreq_ioctl(libc::SIOCGIFHWADDR, &mut req)?;
    let family = u16::from_ne_bytes([req.data[0], req.data[1]]);
    let mut mac = [0; 6];
    mac.copy_from_slice(&req.data[2..8]);
    Ok((mac, family))
}

/// The index of interface `name` in the calling thread's network namespace.
pub(crate) fn index(name: &str) -> io::Result<u32> {
    Ok(rustix::net::netdevice::name_to_index(inet_socket()?, name)?)
}

/// An `AF_INET` datagram socket: the handle interface ioctls go through.
fn inet_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}
