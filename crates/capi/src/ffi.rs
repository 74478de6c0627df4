//! The C functions (`include/ustack.h`, generated from this file by cbindgen). The only
//! module with `unsafe`: it turns the caller's pointers into slices, calls the safe
//! [`sock`] layer, and reports failures as `-1` with `errno` set (and a
//! message for [`ustack_errmsg`]).
#![allow(unsafe_code)]
#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_long, c_ulong, c_void};
use core::net::SocketAddr;
use std::ffi::CStr;
use std::sync::Arc;

use libc::{epoll_event, iovec, msghdr, nfds_t, pollfd, sockaddr, socklen_t, ssize_t};

use crate::error::{self, Error, Result};
use crate::sock::{self, PollFd};
use crate::sockaddr as sa;

/// A ustack stack started by [`ustack_stack_open`] (opaque).
#[derive(Debug)]
pub struct ustack_t {
    stack: Arc<sock::Stack>,
    /// `link=sim`: the other end.
    peer: Option<Box<ustack_t>>,
}

/// The stacks [`ustack_stack_open`] handed out and not yet closed (by address), so that
/// closing a peer, a stale or a foreign pointer is an error, not a double free.
static OPEN: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

fn open_list() -> std::sync::MutexGuard<'static, Vec<usize>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// `-1` with `errno` and the message set.
fn fail(e: &Error) -> c_int {
    error::set_last(e);
    set_errno(e.errno);
    -1
}

fn ret(r: Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

fn ret_int(r: Result<c_int>) -> c_int {
    r.unwrap_or_else(|e| fail(&e))
}

fn ret_size(r: Result<usize>) -> ssize_t {
    match r {
        Ok(n) => ssize_t::try_from(n).unwrap_or(ssize_t::MAX),
        Err(e) => {
            fail(&e);
            -1
        }
    }
}

fn efault(what: &str) -> Error {
    Error::new(libc::EFAULT, format!("{what} is NULL"))
}

/// The caller's buffer as a slice (NULL is fine for length 0).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for `'a`.
unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(efault(what));
    }
    // SAFETY: the caller promises `len` readable bytes at `p` (checked non-NULL).
    Ok(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// The caller's buffer as a mutable slice (NULL is fine for length 0).
///
/// # Safety
/// `p` is NULL or valid for writes of `len` bytes for `'a`, and not aliased.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize, what: &str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(efault(what));
    }
    // SAFETY: the caller promises `len` writable, unaliased bytes at `p`.
    Ok(unsafe { core::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// A `sockaddr` argument of socket `fd` for `call`, as its domain takes it
/// ([`sock::addr_arg`]).
///
/// # Safety
/// `addr` is NULL or points at `len` readable bytes.
unsafe fn addr_in(
    fd: c_int,
    addr: *const sockaddr,
    len: socklen_t,
    call: sock::AddrUse,
) -> Result<SocketAddr> {
    // SAFETY: forwarded from the caller.
    let b = unsafe { bytes(addr.cast(), len as usize, "the address")? };
    sock::addr_arg(fd, b, call)
}

/// Write `a` to a `(sockaddr *, socklen_t *)` pair as `getsockname(2)` does (both NULL:
/// nothing).
///
/// # Safety
/// `len` is NULL or valid; `addr` is NULL or valid for `*len` bytes.
unsafe fn addr_out(a: SocketAddr, addr: *mut sockaddr, len: *mut socklen_t) -> Result<()> {
    if addr.is_null() || len.is_null() {
        return Ok(());
    }
    // SAFETY: `len` is non-NULL and the caller's.
    let room = unsafe { *len } as usize;
    // SAFETY: `addr` has `*len` bytes, per the contract.
    let out = unsafe { bytes_mut(addr.cast(), room, "the address")? };
    let full = sa::write(a, out);
    // SAFETY: as above.
    unsafe { *len = full as socklen_t };
    Ok(())
}

/// The iovecs of a call as slices.
///
/// # Safety
/// `iov` is NULL (with `n` 0) or `n` valid iovecs, each valid for `iov_len` bytes.
unsafe fn iovecs<'a>(iov: *const iovec, n: c_int) -> Result<&'a [iovec]> {
    let n = usize::try_from(n).map_err(|_| Error::new(libc::EINVAL, "negative iovcnt"))?;
    if n > 1024 {
        return Err(Error::new(libc::EINVAL, "iovcnt over IOV_MAX (1024)"));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(efault("iov"));
    }
    // SAFETY: the caller's `n` iovecs.
    Ok(unsafe { core::slice::from_raw_parts(iov, n) })
}

/// # Safety
/// As [`iovecs`]; the buffers are writable and do not overlap.
unsafe fn iov_mut<'a>(iov: &[iovec]) -> Result<Vec<&'a mut [u8]>> {
    iov.iter()
        // SAFETY: each iovec's buffer is the caller's, writable, not overlapping.
        .map(|v| unsafe { bytes_mut(v.iov_base, v.iov_len, "an iovec") })
        .collect()
}

/// # Safety
/// As [`iovecs`].
unsafe fn iov_ref<'a>(iov: &[iovec]) -> Result<Vec<&'a [u8]>> {
    iov.iter()
        // SAFETY: each iovec's buffer is the caller's, readable.
        .map(|v| unsafe { bytes(v.iov_base.cast_const(), v.iov_len, "an iovec") })
        .collect()
}

// ---- stacks -------------------------------------------------------------------------------

/// Start a stack as `config` says (space-separated `key=value`, see docs/api.md "C API"):
/// e.g. `"link=sim addr=10.0.0.1/24 peer=10.0.0.2/24"`. NULL with `errno` set on failure
/// ([`ustack_errmsg`] says why). The first stack opened is the default one
/// ([`ustack_socket`]).
///
/// # Safety
/// `config` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_stack_open(config: *const c_char) -> *mut ustack_t {
    if config.is_null() {
        fail(&efault("config"));
        return core::ptr::null_mut();
    }
    // SAFETY: a NUL-terminated string, per the contract.
    let c = unsafe { CStr::from_ptr(config) };
    let Ok(c) = c.to_str() else {
        fail(&Error::new(
            libc::EINVAL,
            "ustack_stack_open: config is not UTF-8",
        ));
        return core::ptr::null_mut();
    };
    match sock::open(c) {
        Ok((stack, peer)) => {
            let p = Box::into_raw(Box::new(ustack_t {
                stack,
                peer: peer.map(|stack| Box::new(ustack_t { stack, peer: None })),
            }));
            open_list().push(p as usize);
            p
        }
        Err(e) => {
            fail(&e);
            core::ptr::null_mut()
        }
    }
}

/// A `link=sim` stack's other end (owned by `s`: closed with it); NULL otherwise.
///
/// # Safety
/// `s` is NULL or from [`ustack_stack_open`], not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_stack_peer(s: *mut ustack_t) -> *mut ustack_t {
    // SAFETY: per the contract, `s` is live or NULL.
    let Some(s) = (unsafe { s.as_mut() }) else {
        return core::ptr::null_mut();
    };
    // The peer's box lives inside `s` until `s` is closed.
    s.peer
        .as_deref_mut()
        .map_or(core::ptr::null_mut(), |p| p as *mut ustack_t)
}

/// Make `s` the stack [`ustack_socket`] and [`ustack_epoll_create1`] use. 0, or -1
/// (`EINVAL`) for NULL.
///
/// # Safety
/// `s` is NULL or a live stack.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_stack_default(s: *mut ustack_t) -> c_int {
    // SAFETY: per the contract.
    match unsafe { s.as_ref() } {
        Some(s) => {
            sock::set_default(&s.stack);
            0
        }
        None => fail(&Error::new(libc::EINVAL, "NULL stack")),
    }
}

/// Stop `s` (and its sim peer): every descriptor on it is closed, the loop threads stop.
/// Close sockets and join the threads using them first. 0; -1 with `EINVAL` for a pointer
/// that is not an open stack from [`ustack_stack_open`] (a peer, NULL, one closed already).
///
/// # Safety
/// `s` is not used again after it is closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_stack_close(s: *mut ustack_t) -> c_int {
    {
        let mut open = open_list();
        let Some(i) = open.iter().position(|&p| p == s as usize) else {
            return fail(&Error::new(
                libc::EINVAL,
                "ustack_stack_close: not an open stack from ustack_stack_open",
            ));
        };
        open.swap_remove(i);
    }
    // SAFETY: made by Box::into_raw in ustack_stack_open and still in the open list (so
    // not freed yet); taken out of the list above, so freed once.
    let b = unsafe { Box::from_raw(s) };
    match &b.peer {
        Some(p) => sock::close_stacks(&[&b.stack, &p.stack]),
        None => sock::close_stacks(&[&b.stack]),
    }
    0
}

/// This thread's last error message (valid until its next failing call; "" if none).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_errmsg() -> *const c_char {
    error::with_last(|c| c.as_ptr())
}

/// 1 if `fd` is a ustack descriptor (a socket or an epoll set), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_is_socket(fd: c_int) -> c_int {
    c_int::from(sock::is_ours(fd))
}

// ---- sockets ------------------------------------------------------------------------------

/// `socket(2)` on the default stack: `AF_INET`, `SOCK_STREAM` or `SOCK_DGRAM` (with
/// `SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    ret_int(sock::socket(None, domain, ty, protocol))
}

/// `socket(2)` on stack `s`.
///
/// # Safety
/// `s` is NULL (the default stack) or a live stack.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_socket_on(
    s: *mut ustack_t,
    domain: c_int,
    ty: c_int,
    protocol: c_int,
) -> c_int {
    // SAFETY: per the contract.
    let stack: Option<&Arc<sock::Stack>> = unsafe { s.as_ref() }.map(|s| &s.stack);
    ret_int(sock::socket(stack, domain, ty, protocol))
}

/// `bind(2)`.
///
/// # Safety
/// `addr` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: forwarded.
    ret(unsafe { addr_in(fd, addr, len, sock::AddrUse::Bind) }.and_then(|a| sock::bind(fd, a)))
}

/// `listen(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_listen(fd: c_int, backlog: c_int) -> c_int {
    ret(sock::listen(fd, backlog))
}

/// `accept4(2)`.
///
/// # Safety
/// `addr`/`len` as for `accept(2)` (both may be NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let r = sock::accept(fd, flags).and_then(|(n, peer)| {
        // SAFETY: forwarded.
        match unsafe { addr_out(peer, addr, len) } {
            Ok(()) => Ok(n),
            Err(e) => {
                let _ = sock::close(n);
                Err(e)
            }
        }
    });
    ret_int(r)
}

/// `accept(2)`.
///
/// # Safety
/// As [`ustack_accept4`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_accept(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { ustack_accept4(fd, addr, len, 0) }
}

/// `connect(2)`.
///
/// # Safety
/// `addr` points at `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: forwarded.
    ret(unsafe { addr_in(fd, addr, len, sock::AddrUse::Connect) }
        .and_then(|a| sock::connect(fd, a)))
}

/// `recvfrom(2)`: `MSG_DONTWAIT`, `MSG_WAITALL`.
///
/// # Safety
/// `buf` has `len` writable bytes; `addr`/`addrlen` as for `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: forwarded.
    let r = unsafe { bytes_mut(buf, len, "buf") }.and_then(|b| sock::recv_from(fd, b, flags));
    ret_size(r.and_then(|(n, from)| {
        match from {
            // SAFETY: forwarded.
            Some(a) => unsafe { addr_out(a, addr, addrlen)? },
            None if !addrlen.is_null() && !addr.is_null() => {
                // A stream: no address (Linux leaves a length of 0).
                // SAFETY: non-NULL, the caller's.
                unsafe { *addrlen = 0 };
            }
            None => {}
        }
        Ok(n)
    }))
}

/// `recv(2)`.
///
/// # Safety
/// `buf` has `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_recv(
    fd: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe {
        ustack_recvfrom(
            fd,
            buf,
            len,
            flags,
            core::ptr::null_mut(),
            core::ptr::null_mut(),
        )
    }
}

/// `read(2)`.
///
/// # Safety
/// `buf` has `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_read(fd: c_int, buf: *mut c_void, len: usize) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { ustack_recv(fd, buf, len, 0) }
}

/// `readv(2)`.
///
/// # Safety
/// `iov` has `n` iovecs with writable, non-overlapping buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: forwarded.
    let r = unsafe { iovecs(iov, n).and_then(|v| iov_mut(v)) };
    ret_size(r.and_then(|mut bufs| sock::recv_vec(fd, &mut bufs, 0).map(|(k, _)| k)))
}

/// `recvmsg(2)`: the data into `msg_iov`, the sender into `msg_name` (UDP); no control
/// messages (`msg_controllen` becomes 0), `msg_flags` 0.
///
/// # Safety
/// `msg` is a valid `struct msghdr` whose buffers are the caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: per the contract.
    let Some(m) = (unsafe { msg.as_mut() }) else {
        return ret_size(Err(efault("msg")));
    };
    let n = c_int::try_from(m.msg_iovlen).unwrap_or(c_int::MAX);
    // SAFETY: the msghdr's iovecs.
    let r = unsafe { iovecs(m.msg_iov, n).and_then(|v| iov_mut(v)) };
    let r = r.and_then(|mut bufs| sock::recv_vec(fd, &mut bufs, flags));
    ret_size(r.and_then(|(k, from)| {
        let mut namelen = m.msg_namelen;
        match from {
            // SAFETY: msg_name has msg_namelen bytes.
            Some(a) => unsafe { addr_out(a, m.msg_name.cast(), &mut namelen)? },
            None => namelen = 0,
        }
        m.msg_namelen = namelen;
        m.msg_controllen = 0;
        m.msg_flags = 0;
        Ok(k)
    }))
}

/// `sendto(2)`: `MSG_DONTWAIT`, `MSG_NOSIGNAL` (no signal is ever raised), `MSG_MORE`
/// (ignored). On a blocking stream socket every byte is taken before it returns (the
/// call waits for send-buffer room, as Linux's `tcp_sendmsg`), unless an error or
/// `SO_SNDTIMEO` ends it (then the count taken, if any); so are `send`, `write`, `writev`
/// and `sendmsg`. A non-blocking one takes what fits.
///
/// # Safety
/// `buf` has `len` readable bytes; `addr` NULL or `addrlen` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_sendto(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    let to = if addr.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded.
        unsafe { addr_in(fd, addr, addrlen, sock::AddrUse::SendTo) }.map(Some)
    };
    // SAFETY: forwarded.
    let r = unsafe { bytes(buf, len, "buf") };
    ret_size(r.and_then(|b| sock::send_to(fd, b, flags, to?)))
}

/// `send(2)`.
///
/// # Safety
/// `buf` has `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_send(
    fd: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { ustack_sendto(fd, buf, len, flags, core::ptr::null(), 0) }
}

/// `write(2)`.
///
/// # Safety
/// `buf` has `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_write(fd: c_int, buf: *const c_void, len: usize) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { ustack_send(fd, buf, len, 0) }
}

/// `writev(2)`.
///
/// # Safety
/// `iov` has `n` iovecs with readable buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: forwarded.
    let r = unsafe { iovecs(iov, n).and_then(|v| iov_ref(v)) };
    ret_size(r.and_then(|bufs| sock::send_vec(fd, &bufs, 0, None)))
}

/// `sendmsg(2)`: `msg_iov` gathered, to `msg_name` if set; control messages refused
/// (`EOPNOTSUPP`).
///
/// # Safety
/// `msg` is a valid `struct msghdr` whose buffers are the caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: per the contract.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return ret_size(Err(efault("msg")));
    };
    if m.msg_controllen != 0 {
        return ret_size(Err(Error::new(libc::EOPNOTSUPP, "control messages")));
    }
    let to = if m.msg_name.is_null() {
        Ok(None)
    } else {
        // SAFETY: msg_name has msg_namelen bytes.
        unsafe {
            addr_in(
                fd,
                m.msg_name.cast_const().cast(),
                m.msg_namelen,
                sock::AddrUse::SendTo,
            )
        }
        .map(Some)
    };
    let n = c_int::try_from(m.msg_iovlen).unwrap_or(c_int::MAX);
    // SAFETY: the msghdr's iovecs.
    let r = unsafe { iovecs(m.msg_iov, n).and_then(|v| iov_ref(v)) };
    ret_size(r.and_then(|bufs| sock::send_vec(fd, &bufs, flags, to?)))
}

/// `shutdown(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_shutdown(fd: c_int, how: c_int) -> c_int {
    ret(sock::shutdown(fd, how))
}

/// `close(2)` of a ustack descriptor (a socket or an epoll set). The socket closes with
/// its last descriptor (see [`ustack_dup`]).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_close(fd: c_int) -> c_int {
    ret(sock::close(fd))
}

/// `dup(2)`: a new descriptor for the same socket (the lowest free number): the socket
/// closes when every descriptor of it is closed; `O_NONBLOCK` is shared, `FD_CLOEXEC`
/// is each descriptor's own (clear on the new one).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_dup(fd: c_int) -> c_int {
    ret_int(sock::dup(fd, 0, false))
}

/// `dup2(2)`: descriptor `to` refers to `fd`'s socket; whatever file was at `to` (the
/// kernel's or ustack's) is closed first, atomically. `to` if `fd == to` and `fd` is
/// valid.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_dup2(fd: c_int, to: c_int) -> c_int {
    if fd == to {
        return ret_int(sock::fcntl(fd, libc::F_GETFD, 0).map(|_| to));
    }
    ret_int(sock::dup3(fd, to, false))
}

/// `dup3(2)`: as [`ustack_dup2`], `flags` 0 or `O_CLOEXEC`; `EINVAL` if `fd == to`.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    if flags & !libc::O_CLOEXEC != 0 {
        return ret_int(Err(Error::new(
            libc::EINVAL,
            format!("dup3 flags {flags:#x}"),
        )));
    }
    ret_int(sock::dup3(fd, to, flags & libc::O_CLOEXEC != 0))
}

/// The kernel's `dup3(base, to, O_CLOEXEC)`, by raw system call (libc's `dup3` may be the
/// LD_PRELOAD library's): `to` then holds a reservation of `base`'s, whatever was there
/// closed by the kernel.
pub(crate) fn dup_onto(
    base: &std::os::fd::OwnedFd,
    to: c_int,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: dup3(2) on integers; no memory is passed.
    let r = unsafe { libc::syscall(libc::SYS_dup3, base.as_raw_fd(), to, libc::O_CLOEXEC) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: dup3 succeeded: `to` is now an open descriptor of this process, which
    // nothing else owns (the caller holds the table's lock and took any old reservation
    // of the number out).
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(to) })
}

/// `getsockopt(2)`: see docs/api.md for the options; `ENOPROTOOPT` for others.
///
/// # Safety
/// `optlen` is valid; `optval` has `*optlen` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    if optlen.is_null() {
        return fail(&efault("optlen"));
    }
    let r = sock::getsockopt(fd, level, name).and_then(|v| {
        // SAFETY: non-NULL, the caller's.
        let room = unsafe { *optlen } as usize;
        let n = room.min(v.len());
        // SAFETY: `optval` has `*optlen` bytes.
        let out = unsafe { bytes_mut(optval, n, "optval")? };
        out.copy_from_slice(&v[..n]);
        // SAFETY: as above.
        unsafe { *optlen = n as socklen_t };
        Ok(())
    });
    ret(r)
}

/// `setsockopt(2)`.
///
/// # Safety
/// `optval` has `optlen` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    // SAFETY: forwarded.
    let r = unsafe { bytes(optval, optlen as usize, "optval") };
    ret(r.and_then(|v| sock::setsockopt(fd, level, name, v)))
}

/// `getsockname(2)`.
///
/// # Safety
/// `addr`/`len` as for `getsockname(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_getsockname(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded.
    ret(sock::sock_name(fd).and_then(|a| unsafe { addr_out(a, addr, len) }))
}

/// `getpeername(2)`.
///
/// # Safety
/// `addr`/`len` as for `getpeername(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_getpeername(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: forwarded.
    ret(sock::peer_name(fd).and_then(|a| unsafe { addr_out(a, addr, len) }))
}

/// `fcntl(2)`, not variadic: `F_GETFL` (`O_RDWR`, plus `O_NONBLOCK`), `F_SETFL`
/// (`O_NONBLOCK`), `F_GETFD`/`F_SETFD` (`FD_CLOEXEC`), `F_DUPFD`/`F_DUPFD_CLOEXEC` (as
/// [`ustack_dup`], the lowest free number from `arg` on).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    // `long` is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let arg = i64::from(arg);
    ret_int(sock::fcntl(fd, cmd, arg))
}

/// `ioctl(2)`, not variadic: `FIONBIO` (`arg`: `int *`), `FIONREAD` (`arg`: `int *`);
/// `ENOTTY` for other requests.
///
/// # Safety
/// `arg` points at an `int` (read for `FIONBIO`, written for `FIONREAD`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let p = arg.cast::<c_int>();
    if p.is_null() {
        return fail(&efault("arg"));
    }
    match request {
        libc::FIONBIO => {
            // SAFETY: an int, per the contract.
            let on = unsafe { *p } != 0;
            ret(sock::set_nonblocking(fd, on))
        }
        libc::FIONREAD => match sock::bytes_readable(fd) {
            Ok(n) => {
                // SAFETY: an int, per the contract.
                unsafe { *p = n };
                0
            }
            Err(e) => fail(&e),
        },
        _ => {
            if !sock::is_ours(fd) {
                return fail(&Error::badf(fd));
            }
            fail(&Error::new(
                libc::ENOTTY,
                format!("ioctl request {request:#x}"),
            ))
        }
    }
}

/// `poll(2)` over ustack descriptors (of one stack).
///
/// # Safety
/// `fds` has `n` valid `struct pollfd`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > 0 && fds.is_null() {
        return fail(&efault("fds"));
    }
    let p: &mut [pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: `n` pollfds, per the contract.
        unsafe { core::slice::from_raw_parts_mut(fds, n) }
    };
    let mut mine: Vec<PollFd> = p
        .iter()
        .map(|x| PollFd {
            fd: x.fd,
            events: x.events,
            revents: 0,
        })
        .collect();
    match sock::poll(&mut mine, timeout) {
        Ok(k) => {
            for (x, m) in p.iter_mut().zip(&mine) {
                x.revents = m.revents;
            }
            c_int::try_from(k).unwrap_or(c_int::MAX)
        }
        Err(e) => fail(&e),
    }
}

/// `epoll_create1(2)`: `EPOLL_CLOEXEC`.
#[unsafe(no_mangle)]
pub extern "C" fn ustack_epoll_create1(flags: c_int) -> c_int {
    ret_int(sock::epoll_create(flags))
}

/// `epoll_create(2)` (`size` > 0, otherwise unused).
#[unsafe(no_mangle)]
pub extern "C" fn ustack_epoll_create(size: c_int) -> c_int {
    if size <= 0 {
        return fail(&Error::new(
            libc::EINVAL,
            "epoll_create size must be positive",
        ));
    }
    ret_int(sock::epoll_create(0))
}

/// `epoll_ctl(2)`.
///
/// # Safety
/// `event` is NULL (`EPOLL_CTL_DEL`) or a valid `struct epoll_event`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    // SAFETY: per the contract (epoll_event is packed on x86-64: read it unaligned).
    let ev = unsafe { event.as_ref() }.map(|e| (e.events, e.u64));
    let (events, data) = match (ev, op) {
        (Some(e), _) => e,
        (None, libc::EPOLL_CTL_DEL) => (0, 0),
        (None, _) => return fail(&efault("event")),
    };
    ret(sock::epoll_ctl(epfd, op, fd, events, data))
}

/// `epoll_wait(2)`.
///
/// # Safety
/// `events` has room for `max` `struct epoll_event`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if max > 0 && events.is_null() {
        return fail(&efault("events"));
    }
    match sock::epoll_wait(epfd, max, timeout) {
        Ok(v) => {
            for (i, &(ev, data)) in v.iter().enumerate() {
                // SAFETY: `i < max` (epoll_wait returns at most `max`), within the array.
                unsafe {
                    events.add(i).write(epoll_event {
                        events: ev,
                        u64: data,
                    })
                };
            }
            c_int::try_from(v.len()).unwrap_or(c_int::MAX)
        }
        Err(e) => fail(&e),
    }
}

/// Close descriptor `fd` by number, with the system call itself: in a `fork` child, a TUN
/// queue file of the parent's stack, which the child's leaked copy of that stack owns and
/// never closes (crates/capi `sock::fork`).
pub(crate) fn close_inherited(fd: i32) {
    // SAFETY: `fd` is the number of a queue file owned by a stack of the parent that the
    // child never runs nor drops (`sock::fork::child` leaks it), so nothing else closes or
    // uses this number; closing it only releases the child's reference to the queue.
    unsafe { rustix::io::close(fd) };
}
