//! The Linux backend's raw system calls on kernel sockets (libc). The only module of the
//! crate with `unsafe`: each call passes buffers the safe signature owns for the call's
//! duration, with their true lengths.

#![allow(unsafe_code)]

use core::net::SocketAddr;

use crate::backend::{EpollEvent, PollFd, SysResult};

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn ret(r: i64) -> SysResult {
    if r < 0 { Err(errno()) } else { Ok(r) }
}

/// `a` as a `sockaddr_in` or `sockaddr_in6` (in a `sockaddr_storage`) and its length.
pub(crate) fn sockaddr(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all zeros is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in>().write(sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in6>().write(sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

pub(crate) fn socket(domain: i32, ty: i32, protocol: i32) -> SysResult {
    // SAFETY: socket(2) takes no pointers.
    ret(unsafe { libc::socket(domain, ty, protocol) }.into())
}

pub(crate) fn bind(fd: i32, a: SocketAddr) -> SysResult {
    let (sa, len) = sockaddr(a);
    // SAFETY: `sa` holds a valid sockaddr of `len` bytes, alive during the call.
    ret(unsafe { libc::bind(fd, (&raw const sa).cast(), len) }.into())
}

pub(crate) fn connect(fd: i32, a: SocketAddr) -> SysResult {
    let (sa, len) = sockaddr(a);
    // SAFETY: `sa` holds a valid sockaddr of `len` bytes, alive during the call.
    ret(unsafe { libc::connect(fd, (&raw const sa).cast(), len) }.into())
}

pub(crate) fn listen(fd: i32, backlog: i32) -> SysResult {
    // SAFETY: listen(2) takes no pointers.
    ret(unsafe { libc::listen(fd, backlog) }.into())
}

pub(crate) fn accept(fd: i32, flags: i32) -> SysResult {
    // SAFETY: null address pointers ask accept4(2) for no peer address.
    ret(unsafe { libc::accept4(fd, core::ptr::null_mut(), core::ptr::null_mut(), flags) }.into())
}

pub(crate) fn recv(fd: i32, buf: &mut [u8], flags: i32) -> SysResult {
    // SAFETY: `buf` is writable for `buf.len()` bytes during the call.
    ret(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) } as i64)
}

pub(crate) fn read(fd: i32, buf: &mut [u8]) -> SysResult {
    // SAFETY: `buf` is writable for `buf.len()` bytes during the call.
    ret(unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } as i64)
}

pub(crate) fn send(fd: i32, buf: &[u8], flags: i32) -> SysResult {
    // SAFETY: `buf` is readable for `buf.len()` bytes during the call.
    ret(unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), flags) } as i64)
}

pub(crate) fn shutdown(fd: i32, how: i32) -> SysResult {
    // SAFETY: shutdown(2) takes no pointers.
    ret(unsafe { libc::shutdown(fd, how) }.into())
}

pub(crate) fn close(fd: i32) -> SysResult {
    // SAFETY: close(2) takes no pointers; the backend closes only descriptors it opened.
    ret(unsafe { libc::close(fd) }.into())
}

pub(crate) fn getsockopt(fd: i32, level: i32, name: i32, buf: &mut [u8]) -> Result<usize, i32> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` is writable for `len` bytes and `len` is a valid socklen_t, both alive
    // during the call.
    let r = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &raw mut len) };
    if r < 0 {
        Err(errno())
    } else {
        Ok((len as usize).min(buf.len()))
    }
}

pub(crate) fn setsockopt(fd: i32, level: i32, name: i32, val: &[u8]) -> SysResult {
    // SAFETY: `val` is readable for `val.len()` bytes during the call.
    ret(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val.as_ptr().cast(),
            val.len() as libc::socklen_t,
        )
    }
    .into())
}

pub(crate) fn fcntl(fd: i32, cmd: i32, arg: i64) -> SysResult {
    // SAFETY: the commands scripts use (F_GETFL, F_SETFL, F_GETFD, F_SETFD) take an int
    // argument or none, never a pointer.
    ret(unsafe { libc::fcntl(fd, cmd, arg as libc::c_int) }.into())
}

pub(crate) fn poll(fds: &mut [PollFd], timeout_ms: i32) -> SysResult {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|p| libc::pollfd {
            fd: p.fd,
            events: p.events,
            revents: 0,
        })
        .collect();
    // SAFETY: `raw` holds `raw.len()` pollfd entries, writable during the call.
    let r =
        ret(unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, timeout_ms) }.into());
    for (p, r) in fds.iter_mut().zip(&raw) {
        p.revents = r.revents;
    }
    r
}

pub(crate) fn epoll_create(size: i32) -> SysResult {
    // epoll_create(2)'s only check on its size; the descriptor is close-on-exec (see
    // `crate::linux`: a process spawned meanwhile must not hold it).
    if size <= 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: epoll_create1(2) takes no pointers.
    ret(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }.into())
}

pub(crate) fn epoll_ctl(epfd: i32, op: i32, fd: i32, ev: EpollEvent) -> SysResult {
    let mut e = libc::epoll_event {
        events: ev.events,
        u64: ev.data,
    };
    // SAFETY: `e` is a valid epoll_event alive during the call.
    ret(unsafe { libc::epoll_ctl(epfd, op, fd, &raw mut e) }.into())
}

pub(crate) fn epoll_wait(epfd: i32, out: &mut [EpollEvent], timeout_ms: i32) -> SysResult {
    let mut raw = vec![libc::epoll_event { events: 0, u64: 0 }; out.len().max(1)];
    let max = i32::try_from(out.len().max(1)).unwrap_or(i32::MAX);
    // SAFETY: `raw` holds `max` epoll_event entries, writable during the call.
    let r = ret(unsafe { libc::epoll_wait(epfd, raw.as_mut_ptr(), max, timeout_ms) }.into());
    if let Ok(n) = r {
        for (o, e) in out.iter_mut().zip(raw.iter().take(n as usize)) {
            *o = EpollEvent {
                events: e.events,
                data: e.u64,
            };
        }
    }
    r
}
