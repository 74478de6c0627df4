//! The C side: `packetdrill_interface_init`, every callback of packetdrill's table, and
//! the `netdev_receive` deadline extension (`ustack_packetdrill_set_receive_timeout`). The
//! only module with `unsafe`: it turns C pointers into slices and values and results into
//! `-1` plus `errno`; everything else is the backend's safe Rust.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_long, c_longlong, c_uint, c_ulong, c_void};
use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ustack_conform::backend::{Backend, EpollEvent, PollFd, SysResult};
use ustack_conform::so::PacketdrillInterface;
use ustack_conform::ustack::Ustack;

use crate::Flags;

/// What `userdata` points to.
#[derive(Debug)]
struct Handle {
    backend: Ustack,
    default_timeout_us: u64,
    /// The deadline of the next `netdev_receive` (`u64::MAX`: the default).
    next_timeout_us: AtomicU64,
    /// Callbacks running now: `free` waits for them (a call blocked on another thread
    /// returns once the backend is freed) before it releases the handle.
    in_flight: AtomicUsize,
}

/// A callback's hold on the handle (see [`Handle::in_flight`]).
struct Held<'a>(&'a Handle);

impl core::ops::Deref for Held<'_> {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        self.0
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

unsafe extern "C" {
    // The C trampoline (src/trampoline.c): the variadic entry points.
    fn ustack_pd_fcntl(userdata: *mut c_void, fd: c_int, cmd: c_int, ...) -> c_int;
    fn ustack_pd_ioctl(userdata: *mut c_void, fd: c_int, request: c_ulong, ...) -> c_int;
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = e };
}

fn ret(r: SysResult) -> c_int {
    match r {
        Ok(v) => c_int::try_from(v).unwrap_or(c_int::MAX),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn sret(r: SysResult) -> isize {
    match r {
        Ok(v) => isize::try_from(v).unwrap_or(isize::MAX),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn handle<'a>(ud: *mut c_void) -> Held<'a> {
    // SAFETY: packetdrill passes back the userdata packetdrill_interface_init set: a
    // live Box<Handle> until `free`, which waits for the callbacks holding it.
    let h = unsafe { &*ud.cast::<Handle>() };
    h.in_flight.fetch_add(1, Ordering::SeqCst);
    Held(h)
}

/// The caller's `sockaddr_in` or `sockaddr_in6` (by its family), `EINVAL` if shorter than
/// that, `EAFNOSUPPORT` for another family.
fn addr_in(addr: *const libc::sockaddr, len: libc::socklen_t) -> Result<SocketAddr, i32> {
    let len = len as usize;
    if addr.is_null() || len < core::mem::size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: not null and at least a family long (checked above); read unaligned.
    let family = unsafe { addr.cast::<libc::sa_family_t>().read_unaligned() };
    match i32::from(family) {
        libc::AF_INET if len >= core::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: at least a sockaddr_in long (checked); read unaligned.
            let sin = unsafe { addr.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= core::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: at least a sockaddr_in6 long (checked); read unaligned.
            let sin6 = unsafe { addr.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        libc::AF_INET | libc::AF_INET6 => Err(libc::EINVAL),
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// Writes `a` (a `sockaddr_in` or `sockaddr_in6`) to a caller's `(addr, addrlen)`,
/// truncated to the room, as accept(2) does.
fn addr_out(a: SocketAddr, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let size = match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_in is plain data; all zeroes is a valid value.
            let mut sin: libc::sockaddr_in = unsafe { core::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in>().write(sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_in6 is plain data; all zeroes is a valid value.
            let mut sin6: libc::sockaddr_in6 = unsafe { core::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in6>().write(sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: len is not null; the caller's room is *len bytes at addr.
    let room = unsafe { *len } as usize;
    // SAFETY: copies at most `room` bytes into the caller's buffer, from a local.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&raw const ss).cast::<u8>(),
            addr.cast::<u8>(),
            room.min(size),
        );
        *len = size as libc::socklen_t;
    }
}

fn slice<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if buf.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's buffer of `len` bytes (the system call's contract).
    unsafe { core::slice::from_raw_parts(buf.cast(), len) }
}

fn slice_mut<'a>(buf: *mut c_void, len: usize) -> &'a mut [u8] {
    if buf.is_null() || len == 0 {
        return &mut [];
    }
    // SAFETY: the caller's writable buffer of `len` bytes (the system call's contract).
    unsafe { core::slice::from_raw_parts_mut(buf.cast(), len) }
}

fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], i32> {
    let n = usize::try_from(n).map_err(|_| libc::EINVAL)?;
    if n > 1024 {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's array of `n` iovecs (readv(2)'s contract).
    Ok(unsafe { core::slice::from_raw_parts(iov, n) })
}

/// Fills packetdrill's table with ustack's callbacks on a fresh stack started as
/// `flags` says ([`Flags`]). On bad flags the reason is printed to stderr and the table
/// filled over a stack that is already freed: every call fails with `EBADF`.
///
/// # Safety
/// `flags` is null or a NUL-terminated string; `ifc` points to a writable
/// `struct packetdrill_interface`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn packetdrill_interface_init(
    flags: *const c_char,
    ifc: *mut PacketdrillInterface,
) {
    if ifc.is_null() {
        return;
    }
    let text = if flags.is_null() {
        String::new()
    } else {
        // SAFETY: not null, NUL-terminated (the caller's contract).
        unsafe { std::ffi::CStr::from_ptr(flags) }
            .to_string_lossy()
            .into_owned()
    };
    let (backend, timeout) = match Flags::parse(&text).and_then(|f| {
        Ustack::new(&f.config(), &f.sysctls)
            .map(|b| (b, f.receive_timeout_us))
            .map_err(|e| e.to_string())
    }) {
        Ok(x) => x,
        Err(e) => {
            // packetdrill calls the table without looking (free at the end, too): fill it
            // with a stack that is freed already, so that every call fails (EBADF) and
            // netdev_receive returns nothing.
            eprintln!("ustack packetdrill_interface_init: {e}");
            match Ustack::new(&ustack_conform::exec::Config::default(), &[]) {
                Ok(b) => {
                    b.free();
                    (b, 0)
                }
                Err(_) => {
                    // SAFETY: a writable table (the caller's contract).
                    unsafe { *ifc = PacketdrillInterface::EMPTY };
                    return;
                }
            }
        }
    };
    let h = Box::new(Handle {
        backend,
        default_timeout_us: timeout,
        next_timeout_us: AtomicU64::new(u64::MAX),
        in_flight: AtomicUsize::new(0),
    });
    let table = PacketdrillInterface {
        userdata: Box::into_raw(h).cast(),
        free: Some(pd_free),
        socket: Some(pd_socket),
        bind: Some(pd_bind),
        listen: Some(pd_listen),
        accept: Some(pd_accept),
        connect: Some(pd_connect),
        read: Some(pd_read),
        readv: Some(pd_readv),
        recv: Some(pd_recv),
        recvfrom: Some(pd_recvfrom),
        recvmsg: Some(pd_recvmsg),
        write: Some(pd_write),
        writev: Some(pd_writev),
        send: Some(pd_send),
        sendto: Some(pd_sendto),
        sendmsg: Some(pd_sendmsg),
        fcntl: Some(ustack_pd_fcntl),
        ioctl: Some(ustack_pd_ioctl),
        close: Some(pd_close),
        shutdown: Some(pd_shutdown),
        getsockopt: Some(pd_getsockopt),
        setsockopt: Some(pd_setsockopt),
        poll: Some(pd_poll),
        netdev_send: Some(pd_netdev_send),
        netdev_receive: Some(pd_netdev_receive),
        usleep: Some(pd_usleep),
        gettimeofday: Some(pd_gettimeofday),
        epoll_create: Some(pd_epoll_create),
        epoll_ctl: Some(pd_epoll_ctl),
        epoll_wait: Some(pd_epoll_wait),
        pipe: Some(pd_pipe),
        splice: Some(pd_splice),
    };
    // SAFETY: a writable table (the caller's contract).
    unsafe { *ifc = table };
}

/// The extension: the virtual time the next `netdev_receive` waits before giving up.
///
/// # Safety
/// `userdata` is the table's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_packetdrill_set_receive_timeout(
    userdata: *mut c_void,
    usecs: c_longlong,
) {
    let us = u64::try_from(usecs).unwrap_or(0);
    handle(userdata)
        .next_timeout_us
        .store(us, Ordering::Relaxed);
}

/// The extension for a deterministic runner: how many calls are blocked in the stack
/// now (a runner waits for a call it started on another thread to have returned or
/// blocked before it moves the clock on).
///
/// # Safety
/// `userdata` is the table's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_packetdrill_blocked_calls(userdata: *mut c_void) -> c_longlong {
    let n = handle(userdata).backend.blocked_calls().unwrap_or(0);
    c_longlong::try_from(n).unwrap_or(c_longlong::MAX)
}

/// The extension for a deterministic runner: the virtual time (microseconds) at which
/// the last call this thread made through the table returned. A blocked call completes
/// when the packet or timer that unblocks it is processed, on another thread; the clock
/// may have moved on by the time this thread runs.
///
/// # Safety
/// `userdata` is the table's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ustack_packetdrill_returned_at(userdata: *mut c_void) -> c_longlong {
    let at = handle(userdata).backend.returned_at_us();
    c_longlong::try_from(at).unwrap_or(c_longlong::MAX)
}

unsafe extern "C" fn pd_free(ud: *mut c_void) {
    if ud.is_null() {
        return;
    }
    {
        let h = handle(ud);
        // Wakes every blocked call: each returns EBADF.
        h.backend.free();
    }
    // SAFETY: the live handle (packetdrill frees it once, after its last call started).
    let h = unsafe { &*ud.cast::<Handle>() };
    let limit = std::time::Instant::now() + Duration::from_secs(5);
    while h.in_flight.load(Ordering::SeqCst) > 0 {
        if std::time::Instant::now() > limit {
            // A callback still runs: leak the handle rather than free it under it.
            return;
        }
        std::thread::yield_now();
    }
    // SAFETY: the Box packetdrill_interface_init leaked; no callback holds it now.
    drop(unsafe { Box::from_raw(ud.cast::<Handle>()) });
}

unsafe extern "C" fn pd_socket(ud: *mut c_void, d: c_int, t: c_int, p: c_int) -> c_int {
    ret(handle(ud).backend.socket(d, t, p))
}

unsafe extern "C" fn pd_bind(
    ud: *mut c_void,
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    ret(addr_in(addr, len).and_then(|a| handle(ud).backend.bind(fd, a)))
}

unsafe extern "C" fn pd_listen(ud: *mut c_void, fd: c_int, backlog: c_int) -> c_int {
    ret(handle(ud).backend.listen(fd, backlog))
}

unsafe extern "C" fn pd_accept(
    ud: *mut c_void,
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> c_int {
    let b = &handle(ud).backend;
    let r = b.accept(fd, 0);
    if let Ok(new) = r
        && let Ok(peer) = b.peer_addr(new as i32)
    {
        addr_out(peer, addr, len);
    }
    ret(r)
}

unsafe extern "C" fn pd_connect(
    ud: *mut c_void,
    fd: c_int,
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> c_int {
    ret(addr_in(addr, len).and_then(|a| handle(ud).backend.connect(fd, a)))
}

unsafe extern "C" fn pd_read(ud: *mut c_void, fd: c_int, buf: *mut c_void, n: usize) -> isize {
    sret(handle(ud).backend.read(fd, slice_mut(buf, n)))
}

unsafe extern "C" fn pd_readv(
    ud: *mut c_void,
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
) -> isize {
    let r = iovecs(iov, n).and_then(|v| {
        let total: usize = v.iter().map(|i| i.iov_len).sum();
        let mut tmp = vec![0u8; total];
        let got = handle(ud).backend.read(fd, &mut tmp)?;
        let mut off = 0;
        for i in v {
            let take = i.iov_len.min(got as usize - off);
            slice_mut(i.iov_base, take).copy_from_slice(&tmp[off..off + take]);
            off += take;
        }
        Ok(got)
    });
    sret(r)
}

unsafe extern "C" fn pd_recv(
    ud: *mut c_void,
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
) -> isize {
    sret(handle(ud).backend.recv(fd, slice_mut(buf, n), flags))
}

unsafe extern "C" fn pd_recvfrom(
    ud: *mut c_void,
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> isize {
    let b = &handle(ud).backend;
    let r = b.recv(fd, slice_mut(buf, n), flags);
    if r.is_ok()
        && let Ok(peer) = b.peer_addr(fd)
    {
        addr_out(peer, addr, len);
    }
    sret(r)
}

unsafe extern "C" fn pd_recvmsg(_: *mut c_void, _: c_int, _: *mut libc::msghdr, _: c_int) -> isize {
    sret(Err(libc::ENOTSUP))
}

unsafe extern "C" fn pd_write(ud: *mut c_void, fd: c_int, buf: *const c_void, n: usize) -> isize {
    sret(handle(ud).backend.write(fd, slice(buf, n)))
}

unsafe extern "C" fn pd_writev(
    ud: *mut c_void,
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
) -> isize {
    let r = iovecs(iov, n).and_then(|v| {
        let mut all = Vec::new();
        for i in v {
            all.extend_from_slice(slice(i.iov_base, i.iov_len));
        }
        handle(ud).backend.write(fd, &all)
    });
    sret(r)
}

unsafe extern "C" fn pd_send(
    ud: *mut c_void,
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
) -> isize {
    sret(handle(ud).backend.send(fd, slice(buf, n), flags))
}

unsafe extern "C" fn pd_sendto(
    ud: *mut c_void,
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    _len: libc::socklen_t,
) -> isize {
    if !addr.is_null() {
        // A destination per datagram: not here (connect the socket instead).
        return sret(Err(libc::ENOTSUP));
    }
    sret(handle(ud).backend.send(fd, slice(buf, n), flags))
}

unsafe extern "C" fn pd_sendmsg(
    _: *mut c_void,
    _: c_int,
    _: *const libc::msghdr,
    _: c_int,
) -> isize {
    sret(Err(libc::ENOTSUP))
}

/// `fcntl` with its one argument (from the C trampoline).
#[unsafe(no_mangle)]
extern "C" fn ustack_pd_fcntl_fixed(ud: *mut c_void, fd: c_int, cmd: c_int, arg: c_long) -> c_long {
    c_long::from(ret(handle(ud).backend.fcntl(fd, cmd, arg)))
}

/// `ioctl` with its one argument (from the C trampoline): `FIONBIO` (an `int *`);
/// `ENOTSUP` for anything else.
#[unsafe(no_mangle)]
extern "C" fn ustack_pd_ioctl_fixed(
    ud: *mut c_void,
    fd: c_int,
    request: c_ulong,
    arg: c_long,
) -> c_long {
    let b = &handle(ud).backend;
    let r = if request == libc::FIONBIO as c_ulong {
        let p = arg as *const c_int;
        if p.is_null() {
            Err(libc::EFAULT)
        } else {
            // SAFETY: FIONBIO's argument is an int pointer (ioctl_list(2)); not null.
            let on = unsafe { p.read_unaligned() } != 0;
            b.fcntl(fd, libc::F_GETFL, 0).and_then(|fl| {
                let fl = if on {
                    fl | i64::from(libc::O_NONBLOCK)
                } else {
                    fl & !i64::from(libc::O_NONBLOCK)
                };
                b.fcntl(fd, libc::F_SETFL, fl)
            })
        }
    } else {
        Err(libc::ENOTSUP)
    };
    c_long::from(ret(r))
}

unsafe extern "C" fn pd_close(ud: *mut c_void, fd: c_int) -> c_int {
    ret(handle(ud).backend.close(fd))
}

unsafe extern "C" fn pd_shutdown(ud: *mut c_void, fd: c_int, how: c_int) -> c_int {
    ret(handle(ud).backend.shutdown(fd, how))
}

unsafe extern "C" fn pd_getsockopt(
    ud: *mut c_void,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut libc::socklen_t,
) -> c_int {
    if len.is_null() {
        return ret(Err(libc::EFAULT));
    }
    // SAFETY: not null: the caller's in/out length.
    let room = unsafe { *len } as usize;
    let r = handle(ud)
        .backend
        .getsockopt(fd, level, name, slice_mut(val, room));
    match r {
        Ok(n) => {
            // SAFETY: as above.
            unsafe { *len = n as libc::socklen_t };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

unsafe extern "C" fn pd_setsockopt(
    ud: *mut c_void,
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    ret(handle(ud)
        .backend
        .setsockopt(fd, level, name, slice(val, len as usize)))
}

unsafe extern "C" fn pd_poll(
    ud: *mut c_void,
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    let n = n as usize;
    if n > 4096 || (n > 0 && fds.is_null()) {
        return ret(Err(libc::EINVAL));
    }
    let c: &mut [libc::pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: the caller's array of n pollfds (poll(2)'s contract), not null.
        unsafe { core::slice::from_raw_parts_mut(fds, n) }
    };
    let mut mine: Vec<PollFd> = c
        .iter()
        .map(|p| PollFd {
            fd: p.fd,
            events: p.events,
            revents: 0,
        })
        .collect();
    let r = handle(ud).backend.poll(&mut mine, timeout);
    for (p, m) in c.iter_mut().zip(&mine) {
        p.revents = m.revents;
    }
    ret(r)
}

unsafe extern "C" fn pd_netdev_send(ud: *mut c_void, buf: *const c_void, n: usize) -> c_int {
    match handle(ud).backend.netdev_send(slice(buf, n)) {
        Ok(()) => 0,
        Err(e) => ret(Err(e.raw_os_error().unwrap_or(libc::EIO))),
    }
}

unsafe extern "C" fn pd_netdev_receive(
    ud: *mut c_void,
    buf: *mut c_void,
    count: *mut usize,
    time_usecs: *mut c_longlong,
) -> c_int {
    if count.is_null() {
        return ret(Err(libc::EFAULT));
    }
    let h = handle(ud);
    let next = h.next_timeout_us.swap(u64::MAX, Ordering::Relaxed);
    let wait = if next == u64::MAX {
        h.default_timeout_us
    } else {
        next
    };
    // SAFETY: not null: the caller's buffer size.
    let room = unsafe { *count };
    match h.backend.netdev_receive(Duration::from_micros(wait)) {
        Ok(Some((p, at))) => {
            let n = p.len().min(room);
            slice_mut(buf, n).copy_from_slice(&p[..n]);
            // SAFETY: count is not null; time_usecs is checked.
            unsafe {
                *count = n;
                if !time_usecs.is_null() {
                    *time_usecs = c_longlong::try_from(at).unwrap_or(c_longlong::MAX);
                }
            }
            0
        }
        Ok(None) => {
            // SAFETY: count is not null.
            unsafe { *count = 0 };
            0
        }
        Err(e) => ret(Err(e.raw_os_error().unwrap_or(libc::EIO))),
    }
}

unsafe extern "C" fn pd_usleep(ud: *mut c_void, us: c_uint) -> c_int {
    handle(ud).backend.usleep(u64::from(us));
    0
}

unsafe extern "C" fn pd_gettimeofday(
    ud: *mut c_void,
    tv: *mut libc::timeval,
    _tz: *mut c_void,
) -> c_int {
    if tv.is_null() {
        return ret(Err(libc::EFAULT));
    }
    let us = handle(ud).backend.now_us();
    // SAFETY: not null: the caller's timeval.
    unsafe {
        (*tv).tv_sec = (us / 1_000_000) as libc::time_t;
        (*tv).tv_usec = (us % 1_000_000) as libc::suseconds_t;
    }
    0
}

unsafe extern "C" fn pd_epoll_create(ud: *mut c_void, size: c_int) -> c_int {
    ret(handle(ud).backend.epoll_create(size))
}

unsafe extern "C" fn pd_epoll_ctl(
    ud: *mut c_void,
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut libc::epoll_event,
) -> c_int {
    let event = if ev.is_null() {
        if op != libc::EPOLL_CTL_DEL {
            return ret(Err(libc::EFAULT));
        }
        EpollEvent::default()
    } else {
        // SAFETY: not null: the caller's (packed) epoll_event, read unaligned.
        let e = unsafe { ev.read_unaligned() };
        EpollEvent {
            events: e.events,
            data: e.u64,
        }
    };
    ret(handle(ud).backend.epoll_ctl(epfd, op, fd, event))
}

unsafe extern "C" fn pd_epoll_wait(
    ud: *mut c_void,
    epfd: c_int,
    evs: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    let Ok(n) = usize::try_from(max) else {
        return ret(Err(libc::EINVAL));
    };
    if n == 0 || n > 4096 || evs.is_null() {
        return ret(Err(libc::EINVAL));
    }
    let mut mine = vec![EpollEvent::default(); n];
    let r = handle(ud).backend.epoll_wait(epfd, &mut mine, timeout);
    if let Ok(k) = r {
        for (i, e) in mine.iter().take(k as usize).enumerate() {
            let c = libc::epoll_event {
                events: e.events,
                u64: e.data,
            };
            // SAFETY: i < n, within the caller's array of `max` events.
            unsafe { evs.add(i).write_unaligned(c) };
        }
    }
    ret(r)
}

unsafe extern "C" fn pd_pipe(_: *mut c_void, _: *mut c_int) -> c_int {
    ret(Err(libc::ENOTSUP))
}

unsafe extern "C" fn pd_splice(
    _: *mut c_void,
    _: c_int,
    _: *mut i64,
    _: c_int,
    _: *mut i64,
    _: usize,
    _: c_uint,
) -> isize {
    sret(Err(libc::ENOTSUP))
}
