//! The TUN driver's control calls, for [`crate::tun`]: `TUNSETIFF` and `TUNSETOFFLOAD` on
//! a `/dev/net/tun` file, and the interface MTU (`SIOCGIFMTU`/`SIOCSIFMTU`) through an
//! `AF_INET` socket.
//!
//! Opening the file, reading, writing and `poll(2)` need no `unsafe` (rustix covers
//! them); only the four `ioctl(2)` calls here do: three on a `struct ifreq` owned by the
//! call, of the kernel's size, fully initialised, and one that takes its argument by value.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

/// `IFNAMSIZ`: interface names are at most 15 bytes and a NUL.
pub(crate) const IFNAMSIZ: usize = 16;

/// `struct ifreq` (linux/if.h): the name, then a 24-byte union of which we use the
/// `short ifr_flags` and the `int ifr_mtu`, both at its start. 40 bytes on 64-bit Linux.
#[repr(C)]
#[derive(Clone, Copy)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    data: [u8; 24],
}

const _: () = assert!(size_of::<IfReq>() == 40);

impl IfReq {
    /// An `ifreq` for `name`, which the caller validated (shorter than `IFNAMSIZ`, no NUL).
    fn new(name: &str) -> IfReq {
        let mut r = IfReq {
            name: [0; IFNAMSIZ],
            data: [0; 24],
        };
        r.name[..name.len()].copy_from_slice(name.as_bytes());
        r
    }

    /// The name, up to its NUL.
    fn name(&self) -> String {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ);
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }
}

/// Opens `/dev/net/tun` (read-write, non-blocking, close-on-exec) and attaches it to the
/// interface `name` with `TUNSETIFF` and `flags` (`IFF_TUN | IFF_NO_PI | ...`), creating the
/// interface in the calling thread's network namespace if it does not exist. `name` may
/// hold a `%d` for the kernel to fill. Returns the queue's file and the interface's name.
pub(crate) fn open_queue(name: &str, flags: libc::c_short) -> io::Result<(OwnedFd, String)> {
    let fd = rustix::fs::open(
        "/dev/net/tun",
        OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut req = IfReq::new(name);
    req.data[..2].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq` at the pointer; `req` is a live,
    // initialised `IfReq` of the kernel's layout and size (40 bytes, checked above) that
    // outlives the call, and `fd` is an open descriptor we own.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fd, req.name()))
}

/// `TUNSETOFFLOAD`: the offloads (`TUN_F_CSUM`, `TUN_F_TSO4`, ...) the interface takes,
/// so that the kernel may hand it partial checksums and super-segments. Needs a queue
/// opened with `IFF_VNET_HDR`.
pub(crate) fn set_offload(fd: &OwnedFd, offloads: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of `TUN_F_*`
    // bits) and touches no memory of ours; `fd` is an open descriptor we own.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            libc::c_ulong::from(offloads),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The MTU of interface `name` in the calling thread's network namespace.
pub(crate) fn mtu(name: &str) -> io::Result<usize> {
    let sock = inet_socket()?;
    let mut req = IfReq::new(name);
    // SAFETY: SIOCGIFMTU reads the name from and writes `ifr_mtu` into the `struct ifreq`
    // at the pointer; `req` is a live, initialised `IfReq` of the kernel's size that
    // outlives the call; `sock` is an open socket we own.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mtu = libc::c_int::from_ne_bytes([req.data[0], req.data[1], req.data[2], req.data[3]]);
    usize::try_from(mtu).map_err(|_| io::Error::other("tun: negative MTU"))
}

/// Sets the MTU of interface `name` in the calling thread's network namespace.
pub(crate) fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mtu = libc::c_int::try_from(mtu)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "tun: MTU too large"))?;
    let sock = inet_socket()?;
    let mut req = IfReq::new(name);
    req.data[..4].copy_from_slice(&mtu.to_ne_bytes());
    // SAFETY: SIOCSIFMTU reads the name and `ifr_mtu` from the `struct ifreq` at the
    // pointer; `req` is a live, initialised `IfReq` of the kernel's size that outlives the
    // call; `sock` is an open socket we own.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFMTU, &raw mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
