//! The interposed libc functions, and libc's own (the "kernel path", found with
//! `dlsym(RTLD_NEXT, name)`). The only module with `unsafe`: each function looks where
//! its descriptor goes ([`route::classify`]) and calls the C API's function
//! (`ustack::ffi::ustack_*`, which checks the caller's pointers and sets `errno`) or
//! libc's, with the caller's arguments unchanged.
#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_long, c_ulong, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{
    epoll_event, fd_set, iovec, msghdr, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t,
    ssize_t, timespec, timeval,
};
use ustack::ffi as u;

use crate::route::{self, Route, Where};

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// libc's `name` (the next definition after this library), resolved once into `slot`.
/// A libc without it is a broken install: say so on stderr (by raw system call: libc's
/// `write` is one of ours) and abort.
fn resolve(name: &'static [u8], slot: &AtomicPtr<c_void>) -> *mut c_void {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    // SAFETY: `name` is NUL-terminated (the macro below appends the NUL); RTLD_NEXT is a
    // valid pseudo-handle.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast::<c_char>()) };
    if f.is_null() {
        let msg = b"ustack preload: libc has no function the preload needs; aborting\n";
        // SAFETY: a write(2) of a static buffer to stderr, then abort.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    slot.store(f, Ordering::Relaxed);
    f
}

/// `mod real`: libc's functions of these C signatures, by name.
macro_rules! real {
    ($( fn $name:ident($($a:ident: $t:ty),*) -> $r:ty; )*) => {
        mod real {
            use super::*;
            $(
                pub(super) unsafe fn $name($($a: $t),*) -> $r {
                    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
                    let p = resolve(concat!(stringify!($name), "\0").as_bytes(), &SLOT);
                    // SAFETY: `p` is libc's function of this name, whose C signature this is.
                    let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { core::mem::transmute(p) };
                    // SAFETY: the caller's arguments, unchanged, to libc's function.
                    unsafe { f($($a),*) }
                }
            )*
        }
    };
}

real! {
    fn socket(d: c_int, t: c_int, p: c_int) -> c_int;
    fn bind(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int;
    fn listen(fd: c_int, b: c_int) -> c_int;
    fn accept(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int;
    fn accept4(fd: c_int, a: *mut sockaddr, l: *mut socklen_t, f: c_int) -> c_int;
    fn connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int;
    fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, bl: size_t) -> ssize_t;
    fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t;
    fn readv(fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    fn writev(fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    fn recv(fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t;
    fn __recv_chk(fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, b: *mut c_void, n: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t;
    fn __recvfrom_chk(fd: c_int, b: *mut c_void, n: size_t, bl: size_t, f: c_int, a: *mut sockaddr, l: *mut socklen_t) -> ssize_t;
    fn send(fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t;
    fn sendto(fd: c_int, b: *const c_void, n: size_t, f: c_int, a: *const sockaddr, l: socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t;
    fn sendmsg(fd: c_int, m: *const msghdr, f: c_int) -> ssize_t;
    fn close(fd: c_int) -> c_int;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn getsockopt(fd: c_int, l: c_int, n: c_int, v: *mut c_void, vl: *mut socklen_t) -> c_int;
    fn setsockopt(fd: c_int, l: c_int, n: c_int, v: *const c_void, vl: socklen_t) -> c_int;
    fn getsockname(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int;
    fn getpeername(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int;
    fn poll(f: *mut pollfd, n: nfds_t, t: c_int) -> c_int;
    fn ppoll(f: *mut pollfd, n: nfds_t, t: *const timespec, m: *const sigset_t) -> c_int;
    fn select(n: c_int, r: *mut fd_set, w: *mut fd_set, x: *mut fd_set, t: *mut timeval) -> c_int;
    fn epoll_create(size: c_int) -> c_int;
    fn epoll_create1(flags: c_int) -> c_int;
    fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int;
    fn epoll_pwait(ep: c_int, ev: *mut epoll_event, n: c_int, t: c_int, m: *const sigset_t) -> c_int;
    fn dup(fd: c_int) -> c_int;
    fn dup2(fd: c_int, to: c_int) -> c_int;
    fn dup3(fd: c_int, to: c_int, f: c_int) -> c_int;
    fn sendfile(out: c_int, in_fd: c_int, off: *mut libc::off_t, n: size_t) -> ssize_t;
    fn recvmmsg(fd: c_int, v: *mut libc::mmsghdr, n: core::ffi::c_uint, f: c_int, t: *mut timespec) -> c_int;
    fn sendmmsg(fd: c_int, v: *mut libc::mmsghdr, n: core::ffi::c_uint, f: c_int) -> c_int;
    fn pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, x: *mut fd_set, t: *const timespec, m: *const sigset_t) -> c_int;
}

/// libc's C-variadic `fcntl`, `fcntl64` and `ioctl`, called with the one argument.
mod real_variadic {
    use super::*;

    pub(super) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: c_long, is64: bool) -> c_int {
        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        static SLOT64: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        let p = if is64 {
            resolve(b"fcntl64\0", &SLOT64)
        } else {
            resolve(b"fcntl\0", &SLOT)
        };
        // SAFETY: libc's `int fcntl(int, int, ...)` (or fcntl64, the same signature).
        let f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int =
            unsafe { core::mem::transmute(p) };
        // SAFETY: the caller's arguments, unchanged.
        unsafe { f(fd, cmd, arg) }
    }

    pub(super) unsafe fn ioctl(fd: c_int, req: c_ulong, arg: c_long) -> c_int {
        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
        let p = resolve(b"ioctl\0", &SLOT);
        // SAFETY: libc's `int ioctl(int, unsigned long, ...)`.
        let f: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int =
            unsafe { core::mem::transmute(p) };
        // SAFETY: the caller's arguments, unchanged.
        unsafe { f(fd, req, arg) }
    }
}

/// Route a call on `$fd`: ustack's expression, the kernel's, or `EBADFD` for an orphan.
macro_rules! on_fd {
    ($fd:expr, ustack => $u:expr, kernel => $k:expr) => {
        match route::classify($fd) {
            Where::Kernel => $k,
            Where::Ustack => $u,
            Where::Orphan => fail(route::orphan($fd)) as _,
        }
    };
}

// recvmmsg, sendmmsg.
mod mmsg;

fn register_hooks() {
    // SAFETY: `route::fork_prepare`, `fork_parent` and `forked` are `extern "C" fn()`s
    // that do not unwind: they take and release the C API's table lock, detach or close
    // TUN queues and store atomics (crates/capi `sock::fork`).
    unsafe {
        libc::pthread_atfork(
            Some(route::fork_prepare),
            Some(route::fork_parent),
            Some(route::forked),
        )
    };
    // SAFETY: `route::at_exit` is an `extern "C" fn()` that does not unwind (it only
    // waits on the loop threads, bounded) and may run after `main` returns.
    unsafe { libc::atexit(route::at_exit) };
}

// ---- sockets ---------------------------------------------------------------------------

/// `socket(2)`: `AF_INET` stream and datagram sockets to ustack, the rest to the kernel.
#[unsafe(no_mangle)]
pub extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    match route::socket(domain, ty, protocol, register_hooks) {
        // SAFETY: plain integers to libc.
        Route::Kernel => unsafe { real::socket(domain, ty, protocol) },
        Route::Ustack => u::ustack_socket(domain, ty, protocol),
        Route::Fail(e) => fail(e),
    }
}

/// `bind(2)`.
///
/// # Safety
/// As `bind(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    // SAFETY (both arms): the caller's arguments, as bind(2) takes them.
    on_fd!(fd, ustack => unsafe { u::ustack_bind(fd, a, l) }, kernel => unsafe { real::bind(fd, a, l) })
}

/// `listen(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: integers to libc.
    on_fd!(fd, ustack => u::ustack_listen(fd, backlog), kernel => unsafe { real::listen(fd, backlog) })
}

/// `accept(2)`.
///
/// # Safety
/// As `accept(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY (both arms): the caller's arguments, as accept(2) takes them.
    on_fd!(fd, ustack => unsafe { u::ustack_accept(fd, a, l) }, kernel => unsafe { real::accept(fd, a, l) })
}

/// `accept4(2)`.
///
/// # Safety
/// As `accept4(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
    f: c_int,
) -> c_int {
    // SAFETY (both arms): the caller's arguments, as accept4(2) takes them.
    on_fd!(fd, ustack => unsafe { u::ustack_accept4(fd, a, l, f) }, kernel => unsafe { real::accept4(fd, a, l, f) })
}

/// `connect(2)`.
///
/// # Safety
/// As `connect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    // SAFETY (both arms): the caller's arguments, as connect(2) takes them.
    on_fd!(fd, ustack => unsafe { u::ustack_connect(fd, a, l) }, kernel => unsafe { real::connect(fd, a, l) })
}

// ---- data ------------------------------------------------------------------------------

/// `read(2)`.
///
/// # Safety
/// As `read(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY (both arms): the caller's buffer of `n` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_read(fd, b, n) }, kernel => unsafe { real::read(fd, b, n) })
}

/// `__read_chk`: `read` as `_FORTIFY_SOURCE` builds call it (`bl`: the buffer's size).
///
/// # Safety
/// As `read(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(fd: c_int, b: *mut c_void, n: size_t, bl: size_t) -> ssize_t {
    // SAFETY (kernel arm): libc checks `n <= bl` and reads.
    on_fd!(fd, ustack => {
        // SAFETY: libc's check, which aborts on an overflow.
        if n > bl { unsafe { real::__read_chk(-1, b, n, bl) } }
        // SAFETY: the caller's buffer of `n` bytes.
        else { unsafe { u::ustack_read(fd, b, n) } }
    }, kernel => unsafe { real::__read_chk(fd, b, n, bl) })
}

/// `write(2)`.
///
/// # Safety
/// As `write(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    // SAFETY (both arms): the caller's buffer of `n` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_write(fd, b, n) }, kernel => unsafe { real::write(fd, b, n) })
}

/// `readv(2)`.
///
/// # Safety
/// As `readv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, v: *const iovec, n: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's iovecs.
    on_fd!(fd, ustack => unsafe { u::ustack_readv(fd, v, n) }, kernel => unsafe { real::readv(fd, v, n) })
}

/// `writev(2)`.
///
/// # Safety
/// As `writev(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, v: *const iovec, n: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's iovecs.
    on_fd!(fd, ustack => unsafe { u::ustack_writev(fd, v, n) }, kernel => unsafe { real::writev(fd, v, n) })
}

/// `recv(2)`.
///
/// # Safety
/// As `recv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's buffer of `n` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_recv(fd, b, n, f) }, kernel => unsafe { real::recv(fd, b, n, f) })
}

/// `__recv_chk` (`_FORTIFY_SOURCE`'s `recv`).
///
/// # Safety
/// As `recv(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    bl: size_t,
    f: c_int,
) -> ssize_t {
    // SAFETY (kernel arm): libc checks `n <= bl` and receives.
    on_fd!(fd, ustack => {
        // SAFETY: libc's check, which aborts on an overflow.
        if n > bl { unsafe { real::__recv_chk(-1, b, n, bl, f) } }
        // SAFETY: the caller's buffer of `n` bytes.
        else { unsafe { u::ustack_recv(fd, b, n, f) } }
    }, kernel => unsafe { real::__recv_chk(fd, b, n, bl, f) })
}

/// `recvfrom(2)`.
///
/// # Safety
/// As `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    f: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> ssize_t {
    // SAFETY (both arms): the caller's buffer and address, as recvfrom(2) takes them.
    on_fd!(fd, ustack => unsafe { u::ustack_recvfrom(fd, b, n, f, a, l) }, kernel => unsafe { real::recvfrom(fd, b, n, f, a, l) })
}

/// `__recvfrom_chk` (`_FORTIFY_SOURCE`'s `recvfrom`).
///
/// # Safety
/// As `recvfrom(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    b: *mut c_void,
    n: size_t,
    bl: size_t,
    f: c_int,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> ssize_t {
    // SAFETY (kernel arm): libc checks `n <= bl` and receives.
    on_fd!(fd, ustack => {
        // SAFETY: libc's check, which aborts on an overflow.
        if n > bl { unsafe { real::__recvfrom_chk(-1, b, n, bl, f, a, l) } }
        // SAFETY: the caller's buffer and address.
        else { unsafe { u::ustack_recvfrom(fd, b, n, f, a, l) } }
    }, kernel => unsafe { real::__recvfrom_chk(fd, b, n, bl, f, a, l) })
}

/// `send(2)`.
///
/// # Safety
/// As `send(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's buffer of `n` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_send(fd, b, n, f) }, kernel => unsafe { real::send(fd, b, n, f) })
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    b: *const c_void,
    n: size_t,
    f: c_int,
    a: *const sockaddr,
    l: socklen_t,
) -> ssize_t {
    // SAFETY (both arms): the caller's buffer and address.
    on_fd!(fd, ustack => unsafe { u::ustack_sendto(fd, b, n, f, a, l) }, kernel => unsafe { real::sendto(fd, b, n, f, a, l) })
}

/// `recvmsg(2)` (ustack: no control messages).
///
/// # Safety
/// As `recvmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's msghdr.
    on_fd!(fd, ustack => unsafe { u::ustack_recvmsg(fd, m, f) }, kernel => unsafe { real::recvmsg(fd, m, f) })
}

/// `sendmsg(2)` (ustack: no control messages).
///
/// # Safety
/// As `sendmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, m: *const msghdr, f: c_int) -> ssize_t {
    // SAFETY (both arms): the caller's msghdr.
    on_fd!(fd, ustack => unsafe { u::ustack_sendmsg(fd, m, f) }, kernel => unsafe { real::sendmsg(fd, m, f) })
}

// ---- sendfile ----------------------------------------------------------------------------------

/// `sendfile(2)` (and `sendfile64`, the same on 64-bit Linux): onto a ustack socket, the
/// file's bytes read and written ([`route::sendfile`]); `offset` NULL: from the file's
/// position, which moves by the count sent; else from `*offset`, which does.
///
/// # Safety
/// As `sendfile(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    match route::classify(in_fd) {
        Where::Ustack | Where::Orphan => return fail(libc::EINVAL) as ssize_t,
        Where::Kernel => {}
    }
    on_fd!(out, ustack => {
        // SAFETY: the caller's offset, if not NULL.
        let at = match unsafe { offset.as_ref() } {
            Some(o) => *o,
            // SAFETY: integers to libc.
            None => unsafe { libc::lseek(in_fd, 0, libc::SEEK_CUR) },
        };
        if at < 0 {
            return fail(if offset.is_null() { errno() } else { libc::EINVAL }) as ssize_t;
        }
        let mut pread = |b: &mut [u8], off: i64| -> Result<usize, c_int> {
            // SAFETY: `b` is a valid, exclusive buffer of `b.len()` bytes.
            let n = unsafe { libc::pread(in_fd, b.as_mut_ptr().cast(), b.len(), off) };
            usize::try_from(n).map_err(|_| errno())
        };
        match route::sendfile(out, at, count, &mut pread) {
            Ok(n) => {
                let end = at + n as i64;
                // SAFETY: the caller's offset, if not NULL; else integers to libc.
                match unsafe { offset.as_mut() } {
                    Some(o) => *o = end,
                    None => unsafe { libc::lseek(in_fd, end, libc::SEEK_SET); },
                }
                n as ssize_t
            }
            Err(e) => fail(e) as ssize_t,
        }
    // SAFETY: the caller's arguments.
    }, kernel => unsafe { real::sendfile(out, in_fd, offset, count) })
}

/// `sendfile64`: [`sendfile`] (`off_t` is 64 bits on the targets this builds for).
///
/// # Safety
/// As `sendfile(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    in_fd: c_int,
    offset: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { sendfile(out, in_fd, offset, count) }
}

// ---- close, shutdown, dup ----------------------------------------------------------------

/// `close(2)`. A kernel epoll set's ustack shadow goes with it; an orphan (after `fork`)
/// gives back its number only.
#[unsafe(no_mangle)]
pub extern "C" fn close(fd: c_int) -> c_int {
    match route::classify(fd) {
        Where::Ustack => u::ustack_close(fd),
        Where::Kernel => {
            route::forget(fd);
            // SAFETY: an integer to libc.
            unsafe { real::close(fd) }
        }
        // SAFETY: an integer to libc: the reserved number this process inherited.
        Where::Orphan => unsafe { real::close(fd) },
    }
}

/// `shutdown(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    // SAFETY: integers to libc.
    on_fd!(fd, ustack => u::ustack_shutdown(fd, how), kernel => unsafe { real::shutdown(fd, how) })
}

/// `dup(2)`: on a ustack socket, another descriptor for it (the C API's `dup`: the socket
/// closes with its last descriptor).
#[unsafe(no_mangle)]
pub extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: an integer to libc.
    on_fd!(fd, ustack => u::ustack_dup(fd), kernel => unsafe { real::dup(fd) })
}

/// Before kernel file `fd` is put at `to` by the kernel's `dup2`/`dup3`: a ustack socket
/// there is closed (its number left for the kernel's call to replace atomically), a
/// kernel epoll set's shadow dropped. Nothing is touched if `fd` is not open (the
/// kernel's call then fails with `EBADF`, leaving `to` alone).
fn replace(fd: c_int, to: c_int) {
    // SAFETY: F_GETFD takes no argument; integers to libc.
    if unsafe { real_variadic::fcntl(fd, libc::F_GETFD, 0, false) } < 0 {
        return;
    }
    match route::classify(to) {
        Where::Ustack => {
            let _ = ustack::sock::close_replaced(to);
        }
        Where::Kernel => route::forget(to),
        Where::Orphan => {}
    }
}

/// `dup2(2)`: from a ustack socket, `to` becomes another descriptor of it (whatever was
/// at `to` closed); from a kernel file, libc's (a ustack socket at `to` closed first).
#[unsafe(no_mangle)]
pub extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    if fd == to {
        // SAFETY: integers to libc.
        return on_fd!(fd, ustack => to, kernel => unsafe { real::dup2(fd, to) });
    }
    on_fd!(fd, ustack => {
        route::forget(to);
        u::ustack_dup2(fd, to)
    }, kernel => {
        replace(fd, to);
        // SAFETY: integers to libc.
        unsafe { real::dup2(fd, to) }
    })
}

/// `dup3(2)`: as [`dup2`] (`EINVAL` if `fd == to`).
#[unsafe(no_mangle)]
pub extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    on_fd!(fd, ustack => {
        if fd != to {
            route::forget(to);
        }
        u::ustack_dup3(fd, to, flags)
    }, kernel => {
        if fd != to {
            replace(fd, to);
        }
        // SAFETY: integers to libc.
        unsafe { real::dup3(fd, to, flags) }
    })
}

// ---- fcntl, ioctl ------------------------------------------------------------------------

// libc declares `int fcntl(int, int, ...)` and `int ioctl(int, unsigned long, ...)`, C-variadic,
// which stable Rust cannot define. Each takes at most one argument after the command (an
// int, a long or a pointer), and on Linux's x86-64 and AArch64 ABIs a variadic call passes
// its integer and pointer arguments in the same registers as a fixed one: a definition with
// a fixed `long` third argument receives what glibc's own `fcntl` reads with
// `va_arg(ap, long)` (garbage when the caller passed none, which the command then ignores,
// as in glibc). A C shim would not do: a Rust cdylib exports only Rust's symbols. libc's
// own are called through their variadic type.

fn fcntl_any(fd: c_int, cmd: c_int, arg: c_long, is64: bool) -> c_int {
    // SAFETY: the caller's arguments to libc's fcntl, which reads `arg` as the command says.
    on_fd!(fd, ustack => u::ustack_fcntl(fd, cmd, arg), kernel => unsafe { real_variadic::fcntl(fd, cmd, arg, is64) })
}

/// `fcntl(2)`: on a ustack socket `F_GETFL`/`F_SETFL` (`O_NONBLOCK`), `F_GETFD`/`F_SETFD`,
/// `F_DUPFD`/`F_DUPFD_CLOEXEC` (the C API's).
///
/// # Safety
/// As `fcntl(2)`: `arg` is what the command takes (a pointer for the lock commands).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_any(fd, cmd, arg, false)
}

/// `fcntl64` (what `_FILE_OFFSET_BITS=64` builds call): as [`fcntl`].
///
/// # Safety
/// As `fcntl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_any(fd, cmd, arg, true)
}

/// `ioctl(2)`: on a ustack socket `FIONBIO` and `FIONREAD` (`ENOTTY` for others).
///
/// # Safety
/// As `ioctl(2)`: `arg` is what the request takes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_long) -> c_int {
    // SAFETY (both arms): the caller's argument, a pointer to an int for FIONBIO and
    // FIONREAD, as ioctl(2) takes it.
    on_fd!(fd, ustack => unsafe { u::ustack_ioctl(fd, req, arg as *mut c_void) },
        kernel => unsafe { real_variadic::ioctl(fd, req, arg) })
}

// ---- options and names ---------------------------------------------------------------------

/// `getsockopt(2)`.
///
/// # Safety
/// As `getsockopt(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    l: c_int,
    n: c_int,
    v: *mut c_void,
    vl: *mut socklen_t,
) -> c_int {
    // SAFETY (both arms): the caller's buffer of `*vl` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_getsockopt(fd, l, n, v, vl) }, kernel => unsafe { real::getsockopt(fd, l, n, v, vl) })
}

/// `setsockopt(2)`.
///
/// # Safety
/// As `setsockopt(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    l: c_int,
    n: c_int,
    v: *const c_void,
    vl: socklen_t,
) -> c_int {
    // SAFETY (both arms): the caller's value of `vl` bytes.
    on_fd!(fd, ustack => unsafe { u::ustack_setsockopt(fd, l, n, v, vl) }, kernel => unsafe { real::setsockopt(fd, l, n, v, vl) })
}

/// `getsockname(2)`.
///
/// # Safety
/// As `getsockname(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY (both arms): the caller's address buffer.
    on_fd!(fd, ustack => unsafe { u::ustack_getsockname(fd, a, l) }, kernel => unsafe { real::getsockname(fd, a, l) })
}

/// `getpeername(2)`.
///
/// # Safety
/// As `getpeername(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, a: *mut sockaddr, l: *mut socklen_t) -> c_int {
    // SAFETY (both arms): the caller's address buffer.
    on_fd!(fd, ustack => unsafe { u::ustack_getpeername(fd, a, l) }, kernel => unsafe { real::getpeername(fd, a, l) })
}

// ---- poll, select ----------------------------------------------------------------------------

/// The kernel's `poll` on a slice, or its `ppoll` with signal mask `mask` when
/// `masked` and `mask` is not NULL (the mask applied atomically for the wait, as
/// `ppoll(2)` does).
fn kernel_poll(
    fds: &mut [pollfd],
    timeout: c_int,
    masked: bool,
    mask: *const sigset_t,
) -> Result<usize, c_int> {
    if fds.is_empty() && (!masked || mask.is_null()) {
        return Ok(0);
    }
    let n = if masked && !mask.is_null() {
        let ts = (timeout >= 0).then(|| timespec {
            tv_sec: libc::time_t::from(timeout / 1000),
            tv_nsec: libc::c_long::from(timeout % 1000) * 1_000_000,
        });
        let tp = ts
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const timespec);
        // SAFETY: `fds` is a valid, exclusive array; `tp` NULL or a timespec on the
        // stack; `mask` the caller's sigset.
        unsafe { real::ppoll(fds.as_mut_ptr(), fds.len() as nfds_t, tp, mask) }
    } else {
        // SAFETY: `fds` is a valid, exclusive array of `len` pollfds.
        unsafe { real::poll(fds.as_mut_ptr(), fds.len() as nfds_t, timeout) }
    };
    usize::try_from(n).map_err(|_| errno())
}

/// [`kernel_poll`] without a signal mask, for `poll` and `select`.
fn kernel_poll_plain(fds: &mut [pollfd], timeout: c_int, _masked: bool) -> Result<usize, c_int> {
    kernel_poll(fds, timeout, false, core::ptr::null())
}

/// The caller's `(fds, n)` as a slice (`None`: NULL with `n` > 0).
///
/// # Safety
/// `fds` is NULL or `n` valid pollfds, not otherwise in use during the call.
unsafe fn pollfds<'a>(fds: *mut pollfd, n: nfds_t) -> Option<&'a mut [pollfd]> {
    if n == 0 {
        return Some(&mut []);
    }
    if fds.is_null() {
        return None;
    }
    let n = usize::try_from(n).ok()?;
    // SAFETY: per the contract.
    Some(unsafe { core::slice::from_raw_parts_mut(fds, n) })
}

fn ret_count(r: Result<usize, c_int>) -> c_int {
    match r {
        Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        Err(e) => fail(e),
    }
}

/// `poll(2)`: ustack sockets and kernel files in one array; one sleep covers both.
///
/// # Safety
/// As `poll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's array.
    let Some(slice) = (unsafe { pollfds(fds, n) }) else {
        // SAFETY: libc reports the fault.
        return unsafe { real::poll(fds, n, timeout) };
    };
    match route::poll(slice, timeout, &mut kernel_poll_plain) {
        Some(r) => ret_count(r),
        // SAFETY: the caller's arguments.
        None => unsafe { real::poll(fds, n, timeout) },
    }
}

/// `__poll_chk` (`_FORTIFY_SOURCE`'s `poll`; `fdslen`: the array's size in bytes).
///
/// # Safety
/// As `poll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if (n as usize).saturating_mul(size_of::<pollfd>()) > fdslen {
        // SAFETY: libc's fortify failure report; it does not return.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded.
    unsafe { poll(fds, n, timeout) }
}

/// `ppoll(2)`: with ustack sockets in the array, every kernel look made while no ustack
/// socket is ready (the sleep included) is the kernel's `ppoll` with the caller's mask,
/// which applies it atomically: a signal it unblocks, pending before the call or arriving
/// during it, ends the call with `EINTR` unless something is ready (docs/preload.md);
/// otherwise libc's.
///
/// # Safety
/// As `ppoll(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const timespec,
    m: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's timespec, if any.
    let timeout = match unsafe { timespec_limit(t) } {
        Ok(limit) => timeout_ms(limit),
        Err(e) => return fail(e),
    };
    // SAFETY: the caller's array.
    let Some(slice) = (unsafe { pollfds(fds, n) }) else {
        // SAFETY: libc reports the fault.
        return unsafe { real::ppoll(fds, n, t, m) };
    };
    let mut kernel = |f: &mut [pollfd], t: c_int, masked: bool| kernel_poll(f, t, masked, m);
    match route::poll(slice, timeout, &mut kernel) {
        Some(r) => ret_count(r),
        // SAFETY: the caller's arguments.
        None => unsafe { real::ppoll(fds, n, t, m) },
    }
}

/// `select`/`pselect` with ustack sockets in a set, done as a `poll` of `timeout` ms
/// (`mask`: `pselect`'s, applied as by [`ppoll`]). `None`: no ustack socket in the sets
/// (the caller makes libc's call).
///
/// # Safety
/// `r`, `w`, `x` NULL or the caller's fd_sets; `mask` NULL or a sigset.
unsafe fn select_mixed(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    x: *mut fd_set,
    timeout: c_int,
    mask: *const sigset_t,
) -> Option<c_int> {
    let n = usize::try_from(nfds).unwrap_or(0).min(libc::FD_SETSIZE);
    let bits = |s: *mut fd_set| -> Vec<bool> {
        if s.is_null() {
            return Vec::new();
        }
        // SAFETY: a non-NULL fd_set of the caller's; fds below FD_SETSIZE.
        (0..n)
            .map(|fd| unsafe { libc::FD_ISSET(fd as c_int, s) })
            .collect()
    };
    let (rb, wb, xb) = (bits(r), bits(w), bits(x));
    let mut fds = route::select_to_poll(n, &rb, &wb, &xb);
    let mut kernel = |f: &mut [pollfd], t: c_int, masked: bool| kernel_poll(f, t, masked, mask);
    Some(match route::poll(&mut fds, timeout, &mut kernel)? {
        Err(e) => fail(e),
        Ok(_) => {
            let mut count = 0;
            for s in [r, w, x] {
                if !s.is_null() {
                    // SAFETY: the caller's fd_set.
                    unsafe { libc::FD_ZERO(s) };
                }
            }
            for p in &fds {
                if p.revents & libc::POLLNVAL != 0 {
                    return Some(fail(libc::EBADF));
                }
                let (rr, ww, xx) = route::poll_to_select(p);
                for (on, s) in [(rr, r), (ww, w), (xx, x)] {
                    if on && !s.is_null() {
                        // SAFETY: the caller's fd_set; fd below FD_SETSIZE.
                        unsafe { libc::FD_SET(p.fd, s) };
                        count += 1;
                    }
                }
            }
            count
        }
    })
}

/// A timeout given as a `timespec` (`ppoll`, `pselect`, `recvmmsg`): `None` for NULL (no
/// limit), `EINVAL` for a negative or unnormalized one (Linux `poll_select_set_timeout`).
///
/// # Safety
/// `t` is NULL or a readable timespec.
unsafe fn timespec_limit(t: *const timespec) -> Result<Option<core::time::Duration>, c_int> {
    // SAFETY: per the contract.
    match unsafe { t.as_ref() } {
        None => Ok(None),
        Some(ts) if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) => Err(libc::EINVAL),
        Some(ts) => Ok(Some(core::time::Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        ))),
    }
}

/// Milliseconds of a timeout, rounded up (`None`: -1, no limit).
fn timeout_ms(t: Option<core::time::Duration>) -> c_int {
    t.map_or(-1, |d| {
        c_int::try_from(d.as_micros().div_ceil(1000)).unwrap_or(c_int::MAX)
    })
}

/// `select(2)`: with ustack sockets in a set, done as a `poll`; the timeout is then
/// updated with the time left, as Linux's `poll_select_finish` does (zero once it ran
/// out); otherwise libc's.
///
/// # Safety
/// As `select(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    x: *mut fd_set,
    t: *mut timeval,
) -> c_int {
    // SAFETY: the caller's timeval, if any.
    let limit = unsafe { t.as_ref() }.map(|tv| {
        let us = i128::from(tv.tv_sec) * 1_000_000 + i128::from(tv.tv_usec);
        core::time::Duration::from_micros(u64::try_from(us.max(0)).unwrap_or(u64::MAX))
    });
    let start = std::time::Instant::now();
    // SAFETY: the caller's sets; no mask.
    match unsafe { select_mixed(nfds, r, w, x, timeout_ms(limit), core::ptr::null()) } {
        // SAFETY: the caller's arguments.
        None => unsafe { real::select(nfds, r, w, x, t) },
        Some(ret) => {
            let e = errno();
            // SAFETY: the caller's timeval, if any.
            if let (Some(tv), Some(limit)) = (unsafe { t.as_mut() }, limit) {
                let left = route::time_left(limit, start.elapsed());
                tv.tv_sec = libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX);
                tv.tv_usec = libc::suseconds_t::from(left.subsec_micros());
            }
            set_errno(e);
            ret
        }
    }
}

/// `pselect(2)`: with ustack sockets in a set, done as a [`ppoll`] with the caller's mask
/// (the timeout is `const`: not updated); otherwise libc's.
///
/// # Safety
/// As `pselect(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    x: *mut fd_set,
    t: *const timespec,
    m: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's timespec, if any.
    let limit = match unsafe { timespec_limit(t) } {
        Ok(limit) => limit,
        Err(e) => return fail(e),
    };
    // SAFETY: the caller's sets and mask.
    match unsafe { select_mixed(nfds, r, w, x, timeout_ms(limit), m) } {
        // SAFETY: the caller's arguments.
        None => unsafe { real::pselect(nfds, r, w, x, t, m) },
        Some(ret) => ret,
    }
}

// ---- epoll ------------------------------------------------------------------------------------

/// `epoll_create(2)`: the kernel's (a set that later holds ustack sockets gets a ustack
/// shadow set, see `route`).
#[unsafe(no_mangle)]
pub extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: an integer to libc.
    let fd = unsafe { real::epoll_create(size) };
    if fd >= 0 {
        // A shadow left under this number belonged to a set closed behind our back.
        route::forget(fd);
    }
    fd
}

/// `epoll_create1(2)`.
#[unsafe(no_mangle)]
pub extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: an integer to libc.
    let fd = unsafe { real::epoll_create1(flags) };
    if fd >= 0 {
        route::forget(fd);
    }
    fd
}

fn kernel_ctl(ep: c_int, op: c_int, fd: c_int, events: u32, data: u64) -> Result<(), c_int> {
    let mut ev = epoll_event { events, u64: data };
    // SAFETY: a valid epoll_event on the stack.
    match unsafe { real::epoll_ctl(ep, op, fd, &mut ev) } {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

/// `epoll_ctl(2)`: a ustack socket goes into the set's ustack shadow, a kernel file into
/// the kernel's set.
///
/// # Safety
/// As `epoll_ctl(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(ep: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    on_fd!(fd, ustack => {
        // SAFETY: the caller's epoll_event, if any (packed: copied out by value).
        let e = unsafe { ev.as_ref() }.map(|e| (e.events, e.u64));
        let (events, data) = match (e, op) {
            (Some(e), _) => e,
            (None, libc::EPOLL_CTL_DEL) => (0, 0),
            (None, _) => return fail(libc::EFAULT),
        };
        match route::epoll_ctl(ep, op, fd, events, data, &mut kernel_ctl) {
            Ok(()) => 0,
            Err(e) => fail(e.errno),
        }
    // SAFETY: the caller's arguments.
    }, kernel => unsafe { real::epoll_ctl(ep, op, fd, ev) })
}

/// `epoll_pwait(2)`; `epoll_wait(2)` with no mask.
///
/// # Safety
/// As `epoll_pwait(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    ep: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    let n = usize::try_from(max).unwrap_or(0);
    if n == 0 || evs.is_null() {
        // SAFETY: libc reports EINVAL or EFAULT.
        return unsafe { real::epoll_pwait(ep, evs, max, timeout, mask) };
    }
    // SAFETY: the caller's array of `max` events.
    let out = unsafe { core::slice::from_raw_parts_mut(evs, n) };
    let mut kernel = |o: &mut [epoll_event], t: c_int| -> Result<usize, c_int> {
        let len = c_int::try_from(o.len()).unwrap_or(c_int::MAX);
        // SAFETY: `o` is a part of the caller's array.
        let k = unsafe { real::epoll_pwait(ep, o.as_mut_ptr(), len, t, mask) };
        usize::try_from(k).map_err(|_| errno())
    };
    match route::epoll_wait(ep, out, timeout, &mut kernel) {
        Some(r) => ret_count(r),
        // SAFETY: the caller's arguments.
        None => unsafe { real::epoll_pwait(ep, evs, max, timeout, mask) },
    }
}

/// `epoll_wait(2)`.
///
/// # Safety
/// As `epoll_wait(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    ep: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: forwarded; a NULL mask is epoll_wait.
    unsafe { epoll_pwait(ep, evs, max, timeout, core::ptr::null()) }
}
