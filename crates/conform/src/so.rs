//! packetdrill's shared-library interface (`struct packetdrill_interface` of its public
//! header `packetdrill.h`, the `--so_filename` mode), and [`SoBackend`]: any library that
//! exports `packetdrill_interface_init` as a [`Backend`], loaded with `dlopen(3)` and
//! driven only through the table it fills (plus one optional extension, below).
//!
//! The table's functions take the library's `userdata` first, return `-1` and set
//! `errno` on failure, as the system calls they stand for. `netdev_receive` has no
//! timeout in packetdrill's header (the library gives up by itself after a deadline,
//! returning a count of 0); a library may export `ustack_packetdrill_set_receive_timeout
//! (userdata, usecs)`, which sets that deadline for the next call: the runner's waits are
//! bounded by its events' times (ustack's library, `crates/pdlib`, has it; without it the
//! library's own deadline applies). Two more optional exports make a virtual-clock
//! library deterministic under the runner's threads ([`Backend::blocked_calls`],
//! [`Backend::returned_at_us`]): `long long ustack_packetdrill_blocked_calls(userdata)`
//! and `long long ustack_packetdrill_returned_at(userdata)`.
//!
//! The only module of the crate besides `sys` with `unsafe`: the calls through the C
//! table, each with the pointers and lengths of buffers this module owns for the call.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_long, c_longlong, c_uint, c_ulong, c_void};
use core::net::SocketAddr;
use core::time::Duration;
use std::ffi::CString;
use std::io;
use std::path::Path;

use crate::backend::{Backend, EpollEvent, PollFd, SysResult};

type Ud = *mut c_void;

/// `struct packetdrill_interface`, field for field, in the header's order.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PacketdrillInterface {
    pub userdata: Ud,
    pub free: Option<unsafe extern "C" fn(Ud)>,
    pub socket: Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int) -> c_int>,
    pub bind:
        Option<unsafe extern "C" fn(Ud, c_int, *const libc::sockaddr, libc::socklen_t) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    pub accept:
        Option<unsafe extern "C" fn(Ud, c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int>,
    pub connect:
        Option<unsafe extern "C" fn(Ud, c_int, *const libc::sockaddr, libc::socklen_t) -> c_int>,
    pub read: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, usize) -> isize>,
    pub readv: Option<unsafe extern "C" fn(Ud, c_int, *const libc::iovec, c_int) -> isize>,
    pub recv: Option<unsafe extern "C" fn(Ud, c_int, *mut c_void, usize, c_int) -> isize>,
    pub recvfrom: Option<
        unsafe extern "C" fn(
            Ud,
            c_int,
            *mut c_void,
            usize,
            c_int,
            *mut libc::sockaddr,
            *mut libc::socklen_t,
        ) -> isize,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(Ud, c_int, *mut libc::msghdr, c_int) -> isize>,
    pub write: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, usize) -> isize>,
    pub writev: Option<unsafe extern "C" fn(Ud, c_int, *const libc::iovec, c_int) -> isize>,
    pub send: Option<unsafe extern "C" fn(Ud, c_int, *const c_void, usize, c_int) -> isize>,
    pub sendto: Option<
        unsafe extern "C" fn(
            Ud,
            c_int,
            *const c_void,
            usize,
            c_int,
            *const libc::sockaddr,
            libc::socklen_t,
        ) -> isize,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(Ud, c_int, *const libc::msghdr, c_int) -> isize>,
    /// C-variadic in the header: `int (*fcntl)(void *, int fd, int cmd, ...)`.
    pub fcntl: Option<unsafe extern "C" fn(Ud, c_int, c_int, ...) -> c_int>,
    /// C-variadic in the header: `int (*ioctl)(void *, int fd, unsigned long request, ...)`.
    pub ioctl: Option<unsafe extern "C" fn(Ud, c_int, c_ulong, ...) -> c_int>,
    pub close: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    pub shutdown: Option<unsafe extern "C" fn(Ud, c_int, c_int) -> c_int>,
    pub getsockopt: Option<
        unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int,
    >,
    pub setsockopt: Option<
        unsafe extern "C" fn(Ud, c_int, c_int, c_int, *const c_void, libc::socklen_t) -> c_int,
    >,
    pub poll: Option<unsafe extern "C" fn(Ud, *mut libc::pollfd, libc::nfds_t, c_int) -> c_int>,
    pub netdev_send: Option<unsafe extern "C" fn(Ud, *const c_void, usize) -> c_int>,
    pub netdev_receive:
        Option<unsafe extern "C" fn(Ud, *mut c_void, *mut usize, *mut c_longlong) -> c_int>,
    pub usleep: Option<unsafe extern "C" fn(Ud, c_uint) -> c_int>,
    pub gettimeofday: Option<unsafe extern "C" fn(Ud, *mut libc::timeval, *mut c_void) -> c_int>,
    pub epoll_create: Option<unsafe extern "C" fn(Ud, c_int) -> c_int>,
    pub epoll_ctl:
        Option<unsafe extern "C" fn(Ud, c_int, c_int, c_int, *mut libc::epoll_event) -> c_int>,
    pub epoll_wait:
        Option<unsafe extern "C" fn(Ud, c_int, *mut libc::epoll_event, c_int, c_int) -> c_int>,
    pub pipe: Option<unsafe extern "C" fn(Ud, *mut c_int) -> c_int>,
    pub splice:
        Option<unsafe extern "C" fn(Ud, c_int, *mut i64, c_int, *mut i64, usize, c_uint) -> isize>,
}

impl PacketdrillInterface {
    /// A table with every entry empty.
    pub const EMPTY: PacketdrillInterface = PacketdrillInterface {
        userdata: core::ptr::null_mut(),
        free: None,
        socket: None,
        bind: None,
        listen: None,
        accept: None,
        connect: None,
        read: None,
        readv: None,
        recv: None,
        recvfrom: None,
        recvmsg: None,
        write: None,
        writev: None,
        send: None,
        sendto: None,
        sendmsg: None,
        fcntl: None,
        ioctl: None,
        close: None,
        shutdown: None,
        getsockopt: None,
        setsockopt: None,
        poll: None,
        netdev_send: None,
        netdev_receive: None,
        usleep: None,
        gettimeofday: None,
        epoll_create: None,
        epoll_ctl: None,
        epoll_wait: None,
        pipe: None,
        splice: None,
    };
}

/// `void packetdrill_interface_init(const char *flags, struct packetdrill_interface *)`.
pub type InitFn = unsafe extern "C" fn(*const c_char, *mut PacketdrillInterface);
/// The optional extension (see the module docs).
pub type SetTimeoutFn = unsafe extern "C" fn(Ud, c_longlong);
/// The optional extensions `ustack_packetdrill_blocked_calls` and
/// `ustack_packetdrill_returned_at` (see the module docs).
pub type QueryFn = unsafe extern "C" fn(Ud) -> c_longlong;

/// A packetdrill shared library as a [`Backend`] (see the module docs).
#[derive(Debug)]
pub struct SoBackend {
    ifc: PacketdrillInterface,
    set_timeout: Option<SetTimeoutFn>,
    blocked_calls: Option<QueryFn>,
    returned_at: Option<QueryFn>,
    /// The `dlopen` handle (never closed: the library's threads and statics may live on).
    _lib: usize,
    freed: std::sync::atomic::AtomicBool,
    /// Sysctls the library was started with (its flags): a script's sysctl lines that
    /// set these are done already (see [`run`]).
    preset: Vec<(String, String)>,
}

// SAFETY: packetdrill's contract makes the table callable from any thread (system calls
// run on a thread of their own while packets go on); the pointers are the library's.
unsafe impl Send for SoBackend {}
// SAFETY: as above.
unsafe impl Sync for SoBackend {}

fn dlerror() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".to_owned()
    } else {
        // SAFETY: not null, NUL-terminated (above).
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn res(r: i64) -> SysResult {
    if r < 0 { Err(last_errno()) } else { Ok(r) }
}

impl SoBackend {
    /// Loads the library at `path` and calls its `packetdrill_interface_init(flags, ..)`.
    pub fn open(path: &Path, flags: &str) -> io::Result<SoBackend> {
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::other("a NUL in the library's path"))?;
        let cflags = CString::new(flags).map_err(|_| io::Error::other("a NUL in the flags"))?;
        // SAFETY: a NUL-terminated path; RTLD_NOW resolves everything at once.
        let lib = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(io::Error::other(format!(
                "dlopen {}: {}",
                path.display(),
                dlerror()
            )));
        }
        let sym = |name: &core::ffi::CStr| {
            // SAFETY: a live handle and a NUL-terminated name.
            unsafe { libc::dlsym(lib, name.as_ptr()) }
        };
        let init = sym(c"packetdrill_interface_init");
        if init.is_null() {
            return Err(io::Error::other(format!(
                "{}: no packetdrill_interface_init",
                path.display()
            )));
        }
        // SAFETY: the symbol is packetdrill's init function, whose type the header gives.
        let init: InitFn = unsafe { core::mem::transmute::<*mut c_void, InitFn>(init) };
        let set = sym(c"ustack_packetdrill_set_receive_timeout");
        let set_timeout = (!set.is_null()).then(|| {
            // SAFETY: the extension's documented type (module docs).
            unsafe { core::mem::transmute::<*mut c_void, SetTimeoutFn>(set) }
        });
        let query = |name: &core::ffi::CStr| {
            let p = sym(name);
            (!p.is_null()).then(|| {
                // SAFETY: the extensions' documented type (module docs).
                unsafe { core::mem::transmute::<*mut c_void, QueryFn>(p) }
            })
        };
        let blocked_calls = query(c"ustack_packetdrill_blocked_calls");
        let returned_at = query(c"ustack_packetdrill_returned_at");
        let mut ifc = PacketdrillInterface::EMPTY;
        // SAFETY: a NUL-terminated string and a table the library fills in.
        unsafe { init(cflags.as_ptr(), &mut ifc) };
        Ok(SoBackend {
            ifc,
            set_timeout,
            blocked_calls,
            returned_at,
            _lib: lib as usize,
            freed: std::sync::atomic::AtomicBool::new(false),
            preset: Vec::new(),
        })
    }

    /// The table the library filled.
    pub fn table(&self) -> &PacketdrillInterface {
        &self.ifc
    }

    fn now(&self) -> u64 {
        let Some(f) = self.ifc.gettimeofday else {
            return 0;
        };
        let mut tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        // SAFETY: a timeval this function owns; a null timezone, as the header allows.
        unsafe { f(self.ifc.userdata, &mut tv, core::ptr::null_mut()) };
        (tv.tv_sec as u64) * 1_000_000 + tv.tv_usec as u64
    }
}

macro_rules! call {
    ($self:ident, $f:ident, $($a:expr),*) => {
        match $self.ifc.$f {
            // SAFETY: the library's function with the header's signature; every pointer
            // argument points into a buffer owned by the caller for the call.
            Some(f) => res(unsafe { f($self.ifc.userdata, $($a),*) } as i64),
            None => Err(libc::ENOTSUP),
        }
    };
}

impl Backend for SoBackend {
    fn sysctl(&self, name: &str, value: &str) -> io::Result<()> {
        if self.preset.iter().any(|(n, v)| n == name && v == value) {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "a packetdrill library takes sysctls when it starts (its flags): {name} can be set by a sysctl line before the script's first event only"
            ),
        ))
    }

    fn netdev_send(&self, packet: &[u8]) -> io::Result<()> {
        call!(self, netdev_send, packet.as_ptr().cast(), packet.len())
            .map(|_| ())
            .map_err(io::Error::from_raw_os_error)
    }

    fn netdev_receive(&self, timeout: Duration) -> io::Result<Option<(Vec<u8>, u64)>> {
        if let Some(set) = self.set_timeout {
            let us = c_longlong::try_from(timeout.as_micros()).unwrap_or(c_longlong::MAX);
            // SAFETY: the extension's signature; the library's userdata.
            unsafe { set(self.ifc.userdata, us) };
        }
        let mut buf = vec![0u8; 65_536];
        let mut count = buf.len();
        let mut at: c_longlong = 0;
        call!(
            self,
            netdev_receive,
            buf.as_mut_ptr().cast(),
            &mut count,
            &mut at
        )
        .map_err(io::Error::from_raw_os_error)?;
        if count == 0 {
            return Ok(None);
        }
        buf.truncate(count.min(65_536));
        Ok(Some((buf, at as u64)))
    }

    fn usleep(&self, us: u64) {
        let _ = call!(self, usleep, us.min(u64::from(u32::MAX)) as c_uint);
    }

    fn now_us(&self) -> u64 {
        self.now()
    }

    fn returned_at_us(&self) -> u64 {
        match self.returned_at {
            // SAFETY: the extension's signature; the library's userdata.
            Some(f) => u64::try_from(unsafe { f(self.ifc.userdata) }).unwrap_or(0),
            None => self.now(),
        }
    }

    fn blocked_calls(&self) -> Option<usize> {
        let f = self.blocked_calls?;
        // SAFETY: the extension's signature; the library's userdata.
        usize::try_from(unsafe { f(self.ifc.userdata) }).ok()
    }

    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> SysResult {
        call!(self, socket, domain, ty, protocol)
    }

    fn bind(&self, fd: i32, addr: SocketAddr) -> SysResult {
        let (sa, len) = crate::sys::sockaddr(addr);
        call!(self, bind, fd, (&raw const sa).cast(), len)
    }

    fn listen(&self, fd: i32, backlog: i32) -> SysResult {
        call!(self, listen, fd, backlog)
    }

    fn accept(&self, fd: i32, flags: i32) -> SysResult {
        let _ = flags;
        // SAFETY: sockaddr_storage is plain data; all zeroes is a valid value.
        let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
        let mut len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        call!(self, accept, fd, (&raw mut ss).cast(), &mut len)
    }

    fn connect(&self, fd: i32, addr: SocketAddr) -> SysResult {
        let (sa, len) = crate::sys::sockaddr(addr);
        call!(self, connect, fd, (&raw const sa).cast(), len)
    }

    fn read(&self, fd: i32, buf: &mut [u8]) -> SysResult {
        call!(self, read, fd, buf.as_mut_ptr().cast(), buf.len())
    }

    fn recv(&self, fd: i32, buf: &mut [u8], flags: i32) -> SysResult {
        call!(self, recv, fd, buf.as_mut_ptr().cast(), buf.len(), flags)
    }

    fn write(&self, fd: i32, buf: &[u8]) -> SysResult {
        call!(self, write, fd, buf.as_ptr().cast(), buf.len())
    }

    fn send(&self, fd: i32, buf: &[u8], flags: i32) -> SysResult {
        call!(self, send, fd, buf.as_ptr().cast(), buf.len(), flags)
    }

    fn shutdown(&self, fd: i32, how: i32) -> SysResult {
        call!(self, shutdown, fd, how)
    }

    fn close(&self, fd: i32) -> SysResult {
        call!(self, close, fd)
    }

    fn getsockopt(&self, fd: i32, level: i32, name: i32, buf: &mut [u8]) -> Result<usize, i32> {
        let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
        call!(
            self,
            getsockopt,
            fd,
            level,
            name,
            buf.as_mut_ptr().cast(),
            &mut len
        )?;
        Ok((len as usize).min(buf.len()))
    }

    fn setsockopt(&self, fd: i32, level: i32, name: i32, val: &[u8]) -> SysResult {
        let len = libc::socklen_t::try_from(val.len()).map_err(|_| libc::EINVAL)?;
        call!(self, setsockopt, fd, level, name, val.as_ptr().cast(), len)
    }

    fn fcntl(&self, fd: i32, cmd: i32, arg: i64) -> SysResult {
        call!(self, fcntl, fd, cmd, arg as c_long)
    }

    fn poll(&self, fds: &mut [PollFd], timeout_ms: i32) -> SysResult {
        let mut c: Vec<libc::pollfd> = fds
            .iter()
            .map(|p| libc::pollfd {
                fd: p.fd,
                events: p.events,
                revents: 0,
            })
            .collect();
        let r = call!(
            self,
            poll,
            c.as_mut_ptr(),
            c.len() as libc::nfds_t,
            timeout_ms
        );
        for (p, q) in fds.iter_mut().zip(&c) {
            p.revents = q.revents;
        }
        r
    }

    fn epoll_create(&self, size: i32) -> SysResult {
        call!(self, epoll_create, size)
    }

    fn epoll_ctl(&self, epfd: i32, op: i32, fd: i32, event: EpollEvent) -> SysResult {
        let mut ev = libc::epoll_event {
            events: event.events,
            u64: event.data,
        };
        call!(self, epoll_ctl, epfd, op, fd, &mut ev)
    }

    fn epoll_wait(&self, epfd: i32, events: &mut [EpollEvent], timeout_ms: i32) -> SysResult {
        let mut c = vec![libc::epoll_event { events: 0, u64: 0 }; events.len()];
        let max = c_int::try_from(c.len()).map_err(|_| libc::EINVAL)?;
        let r = call!(self, epoll_wait, epfd, c.as_mut_ptr(), max, timeout_ms);
        if let Ok(n) = r {
            for (e, k) in events.iter_mut().zip(c.iter().take(n as usize)) {
                *e = EpollEvent {
                    events: k.events,
                    data: k.u64,
                };
            }
        }
        r
    }

    fn free(&self) {
        if self.freed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if let Some(f) = self.ifc.free {
            // SAFETY: the library's free, once, with its own userdata.
            unsafe { f(self.ifc.userdata) };
        }
    }
}

/// Loads `lib` with `flags` and runs the script at `path` through it (errors as
/// [`crate::run_linux`]'s).
pub fn run(
    lib: &Path,
    flags: &str,
    path: &Path,
    config: &crate::exec::Config,
) -> Result<crate::exec::Report, String> {
    let (script, cfg) = crate::load(path, config)?;
    // The sysctl lines before the first event go to the library as flags (as packetdrill's
    // `--so_flags` would carry them): it has no call to set one later.
    let mut preset = Vec::new();
    for e in &script.events {
        let crate::script::EventKind::Shell(cmd) = &e.kind else {
            break;
        };
        preset.extend(
            crate::exec::sysctl_command(cmd)
                .map_err(|m| format!("{}:{}: {m}", path.display(), e.line))?,
        );
    }
    let mut flags = preset
        .iter()
        .fold(flags.to_owned(), |f, (n, v)| format!("{f} {n}={v}"));
    // The library learns the family from its flags only (packetdrill hands it nothing
    // else): the run's, unless the caller's flags say.
    if !flags.contains("ip_version=") {
        flags = format!("{flags} ip_version={}", cfg.ip_version);
    }
    let mut backend =
        SoBackend::open(lib, &flags).map_err(|e| format!("{}: {e}", path.display()))?;
    backend.preset = preset;
    crate::exec::run(&script, std::sync::Arc::new(backend), &cfg)
        .map_err(|f| format!("{}:{}: {}", path.display(), f.line, f.message))
}

impl Drop for SoBackend {
    fn drop(&mut self) {
        self.free();
    }
}
