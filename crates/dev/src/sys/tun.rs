//! The TUN driver's control calls, for [`crate::tun`]: `TUNSETIFF` and `TUNSETOFFLOAD` on
//! a `/dev/net/tun` file (the interface MTU is in [`super::netif`]).
//!
//! Opening the file, reading, writing and `poll(2)` need no `unsafe` (rustix covers
//! them); only the two `ioctl(2)` calls here do: one on a `struct ifreq` owned by the
//! call, of the kernel's size, fully initialised, and one that takes its argument by value.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use super::netif::IfReq;

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

/// `TUNSETQUEUE`: attach (`IFF_ATTACH_QUEUE`) or detach (`IFF_DETACH_QUEUE`) the queue
/// `fd` of a multi-queue interface without closing it: a detached queue gets no packets
/// (the kernel spreads flows over the attached ones).
pub(crate) fn set_queue(fd: std::os::fd::BorrowedFd<'_>, attach: bool) -> io::Result<()> {
    let mut req = IfReq::new("");
    let flags = if attach {
        libc::IFF_ATTACH_QUEUE
    } else {
        libc::IFF_DETACH_QUEUE
    } as libc::c_short;
    req.data[..2].copy_from_slice(&flags.to_ne_bytes());
    // The system call itself, not libc's `ioctl`: the LD_PRELOAD library, which defines
    // `ioctl`, calls this from its `fork` hook while holding its descriptor table's lock,
    // which its own `ioctl` would take again.
    // SAFETY: TUNSETQUEUE reads one `struct ifreq` at the pointer (its flags); `req` is a
    // live, initialised `IfReq` of the kernel's layout and size that outlives the call, and
    // `fd` is an open descriptor borrowed for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            fd.as_raw_fd(),
            libc::TUNSETQUEUE,
            &raw mut req,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
