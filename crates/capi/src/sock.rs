//! The C-shaped socket layer over [`ustack_net`]: stacks, the descriptor table, and each
//! call with POSIX's meaning and Linux's errno, in safe Rust (the [`ffi`](crate::ffi)
//! module only turns C pointers into slices and results into `-1` + `errno`).
//!
//! A descriptor is the number of a reserved kernel file (a `dup` of one eventfd, close-
//! on-exec), so ustack's descriptors never collide with the process's own files: the
//! ground for the LD_PRELOAD library (issue 17), which must tell them apart by number.
//! A POSIX socket exists before it is bound, listens or connects, while ustack-net's
//! sockets are made by `listen` and `connect`: a descriptor holds a fresh socket's
//! address and options until then, and applies the options to the stream it gets.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::collections::HashMap;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, RwLock};

use rustix::event::{EventfdFlags, eventfd};
use ustack_dev::capture::TapSwitch;
use ustack_dev::sim::SimLinkConfig;
use ustack_net::{Epoll, EpollEvent, Fd, Mode, Net, Readiness, Wait};
use ustack_runtime::RuntimeBuilder;
use ustack_stack::tcp::State;
use ustack_stack::{TcpOpt, TcpOptValues};

use crate::config::{Config, LinkConfig};
use crate::error::{Error, Result};
use crate::opts::{self, Opt};

pub mod fork;
mod reuseport;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- stacks -------------------------------------------------------------------------------

/// One ustack stack (a [`Net`]) and what the C API keeps for it.
#[derive(Debug)]
pub struct Stack {
    id: u64,
    net: Net,
    addr: Ipv4Addr,
    /// The IPv6 address (`addr6=`), if any.
    addr6: Option<Ipv6Addr>,
    /// TCP ports bound by descriptors of this stack (`bind` before `listen`), and how many
    /// hold each.
    ports: Mutex<HashMap<u16, usize>>,
    next_port: AtomicU16,
    /// The capture switch of a kernel link's queues (`ustack capture`).
    tap: Option<Arc<TapSwitch>>,
}

static NEXT_STACK: AtomicU64 = AtomicU64::new(1);
/// The stack `ustack_socket` uses: the first opened, or as `ustack_set_default` says.
static DEFAULT: Mutex<Option<Arc<Stack>>> = Mutex::new(None);

fn builder(addr: (Ipv4Addr, u8), addr6: Option<(Ipv6Addr, u8)>, c: &Config) -> RuntimeBuilder {
    let mut b = RuntimeBuilder::new().ipv4(addr.0, addr.1);
    if let Some((a, len)) = addr6 {
        b = b.ipv6(a, len);
    }
    if let Some(gw) = c.gateway {
        b = b.gateway(gw);
    }
    if let Some(seed) = c.seed {
        b = b.seed(seed);
    }
    for (name, value) in &c.sysctls {
        b = b.sysctl(name, *value);
    }
    b
}

fn new_stack(net: Net, addr: Ipv4Addr, addr6: Option<(Ipv6Addr, u8)>) -> Arc<Stack> {
    Arc::new(Stack {
        id: NEXT_STACK.fetch_add(1, Ordering::Relaxed),
        net,
        addr,
        addr6: addr6.map(|a| a.0),
        ports: Mutex::new(HashMap::new()),
        next_port: AtomicU16::new(0),
        tap: None,
    })
}

/// Start a stack as `config` says (see [`crate::config`]): the stack, and for a sim link
/// the stack at the other end. The first one started becomes the default.
pub fn open(config: &str) -> Result<(Arc<Stack>, Option<Arc<Stack>>)> {
    open_config(Config::parse(config)?)
}

/// [`open`] of a parsed configuration.
fn open_config(c: Config) -> Result<(Arc<Stack>, Option<Arc<Stack>>)> {
    let (stack, peer) = match &c.link {
        LinkConfig::Sim { peer, peer6 } => {
            let (a, b) = Net::sim_pair(
                builder(c.addr, c.addr6, &c),
                builder(*peer, *peer6, &c),
                SimLinkConfig::default(),
            )
            .map_err(|e| {
                Error::new(
                    crate::error::errno_of(&e),
                    format!("ustack_stack_open: sim link: {e}"),
                )
            })?;
            (
                new_stack(a, c.addr.0, c.addr6),
                Some(new_stack(b, peer.0, *peer6)),
            )
        }
        link => {
            let tap = TapSwitch::new(crate::links::TAP_LIMIT);
            let (net, name, queues) =
                crate::links::open_net(builder(c.addr, c.addr6, &c), link, &tap)?;
            fork::opened(&c, &name, queues);
            let mut stack = new_stack(net, c.addr.0, c.addr6);
            if let Some(s) = Arc::get_mut(&mut stack) {
                s.tap = Some(tap);
            }
            (stack, None)
        }
    };
    let mut d = lock(&DEFAULT);
    if d.is_none() {
        *d = Some(stack.clone());
    }
    Ok((stack, peer))
}

impl Stack {
    /// The stack's [`Net`] (its shards' loop threads), for the LD_PRELOAD library's
    /// control socket.
    pub fn net(&self) -> &Net {
        &self.net
    }

    /// The capture switch of its link's queues (a kernel link's; `None` for sim), for
    /// the control socket's `capture`.
    pub fn tap(&self) -> Option<&Arc<TapSwitch>> {
        self.tap.as_ref()
    }
}

/// Make `stack` the one `ustack_socket` uses.
pub fn set_default(stack: &Arc<Stack>) {
    *lock(&DEFAULT) = Some(stack.clone());
}

/// Stop stacks: close every descriptor on them; their loop threads stop once the last
/// call in progress on them returns.
pub fn close_stacks(these: &[&Arc<Stack>]) {
    let stacks: Vec<u64> = these.iter().map(|s| s.id).collect();
    let doomed: Vec<i32> = table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, e)| stacks.contains(&e.stack.id))
        .map(|(&fd, _)| fd)
        .collect();
    for fd in doomed {
        let _ = close(fd);
    }
    let mut d = lock(&DEFAULT);
    if d.as_ref().is_some_and(|s| stacks.contains(&s.id)) {
        *d = None;
    }
}

// ---- the descriptor table -----------------------------------------------------------------

/// The state of a socket descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State2 {
    /// Made by `socket`, perhaps bound: no ustack socket yet.
    Fresh { bound: Option<SocketAddr> },
    /// Listening.
    Listener { fd: Fd, addr: SocketAddr },
    /// A connection (connecting until the handshake is seen done).
    Stream { fd: Fd, connecting: bool },
    /// A bound UDP socket.
    Udp { fd: Fd },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
}

/// Options set on the descriptor (applied to a stream when it exists).
#[derive(Debug, Clone, Copy, Default)]
struct Opts {
    reuseaddr: bool,
    reuseport: bool,
    rcvbuf: Option<usize>,
    sndbuf: Option<usize>,
    keepalive: bool,
    linger: Option<Duration>,
    nodelay: bool,
    cork: bool,
    rcvtimeo: Option<Duration>,
    sndtimeo: Option<Duration>,
    /// `TCP_MAXSEG`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT` as set, applied to a
    /// stream when it exists.
    tcp: TcpOptValues,
    /// `IPV6_V6ONLY` (an `AF_INET6` socket; Linux's default `net.ipv6.bindv6only` 0).
    v6only: bool,
}

#[derive(Debug)]
struct Sock {
    proto: Proto,
    /// `AF_INET` or `AF_INET6`.
    domain: i32,
    state: Mutex<State2>,
    opts: Mutex<Opts>,
    nonblock: AtomicBool,
}

#[derive(Debug)]
struct EpollSet {
    /// The stack of the first descriptor added, and the set on it.
    on: Mutex<Option<(Arc<Stack>, Arc<Epoll>)>>,
}

#[derive(Debug)]
enum Obj {
    Sock(Sock),
    Epoll(EpollSet),
}

/// What descriptors refer to (Linux's open file): a socket or an epoll set, shared by the
/// descriptors `dup` makes.
#[derive(Debug)]
struct File {
    stack: Arc<Stack>,
    obj: Obj,
    /// The descriptors referring to it: the socket closes when the last one does.
    descs: AtomicUsize,
    /// Its number, never reused ([`file_id`]).
    id: u64,
}

/// A descriptor: its file, and what is the descriptor's own.
#[derive(Debug)]
struct Entry {
    file: Arc<File>,
    cloexec: AtomicBool,
    /// The reserved kernel descriptor whose number this is (taken out, not closed, when
    /// `dup2` puts another file at the number: the kernel's `dup3` replaced it).
    reserved: Mutex<Option<OwnedFd>>,
}

impl core::ops::Deref for Entry {
    type Target = File;
    fn deref(&self) -> &File {
        &self.file
    }
}

type Table = RwLock<HashMap<i32, Arc<Entry>>>;

fn table() -> &'static Table {
    static T: LazyLock<Table> = LazyLock::new(|| RwLock::new(HashMap::new()));
    &T
}

/// The file every descriptor number is reserved from.
fn base() -> Result<&'static OwnedFd> {
    static BASE: LazyLock<std::io::Result<OwnedFd>> =
        LazyLock::new(|| eventfd(0, EventfdFlags::CLOEXEC).map_err(Into::into));
    BASE.as_ref().map_err(|e| {
        Error::new(
            crate::error::errno_of(e),
            format!("reserving descriptors: {e}"),
        )
    })
}

/// A reserved number: the lowest free one from `min` on.
fn reserve_from(min: i32) -> Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(base()?, min).map_err(|e| {
        let e = std::io::Error::from(e);
        Error::new(
            crate::error::errno_of(&e),
            format!("reserving a descriptor: {e}"),
        )
    })
}

fn reserve() -> Result<OwnedFd> {
    reserve_from(0)
}

fn entry_of(file: Arc<File>, cloexec: bool, reserved: OwnedFd) -> Arc<Entry> {
    Arc::new(Entry {
        file,
        cloexec: AtomicBool::new(cloexec),
        reserved: Mutex::new(Some(reserved)),
    })
}

/// A new open file: `obj` on `stack`, `descs` descriptors referring to it, its own id.
fn new_file(stack: Arc<Stack>, obj: Obj, descs: usize) -> Arc<File> {
    static NEXT_FILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    Arc::new(File {
        stack,
        obj,
        descs: AtomicUsize::new(descs),
        id: NEXT_FILE.fetch_add(1, Ordering::Relaxed),
    })
}

fn insert(stack: Arc<Stack>, obj: Obj, cloexec: bool) -> Result<i32> {
    let reserved = reserve()?;
    let fd = reserved.as_raw_fd();
    let e = entry_of(new_file(stack, obj, 1), cloexec, reserved);
    table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(fd, e);
    Ok(fd)
}

fn write_table() -> std::sync::RwLockWriteGuard<'static, HashMap<i32, Arc<Entry>>> {
    table().write().unwrap_or_else(|e| e.into_inner())
}

/// `dup(2)` (`min` 0) and `fcntl(F_DUPFD, min)`: a new descriptor, the lowest free number
/// from `min` on, for the same socket (or epoll set): the socket closes when both are
/// closed; `O_NONBLOCK` is shared, `FD_CLOEXEC` is the new descriptor's own (`cloexec`).
pub fn dup(fd: i32, min: i32, cloexec: bool) -> Result<i32> {
    if min < 0 {
        return Err(Error::new(libc::EINVAL, format!("F_DUPFD from {min}")));
    }
    entry(fd)?;
    let reserved = reserve_from(min)?;
    let to = reserved.as_raw_fd();
    let mut t = write_table();
    // Looked up again under the lock: a close meanwhile makes this EBADF.
    let file = t.get(&fd).ok_or_else(|| Error::badf(fd))?.file.clone();
    file.descs.fetch_add(1, Ordering::AcqRel);
    t.insert(to, entry_of(file, cloexec, reserved));
    Ok(to)
}

/// `dup3(2)` (`dup2` when `fd != to`): descriptor `to` refers to `fd`'s socket, whatever
/// was at that number closed first, as the kernel does (atomically: the number is never
/// free in between; a kernel file there is closed by the kernel's `dup3`; a ustack
/// descriptor there is closed as by [`close`]). `EINVAL` if `fd == to`.
pub fn dup3(fd: i32, to: i32, cloexec: bool) -> Result<i32> {
    if fd == to {
        return Err(Error::new(libc::EINVAL, "dup3 onto the same descriptor"));
    }
    if to < 0 {
        return Err(Error::badf(to));
    }
    let base = base()?;
    let mut t = write_table();
    let file = t.get(&fd).ok_or_else(|| Error::badf(fd))?.file.clone();
    let old = t.remove(&to);
    if let Some(o) = &old {
        // The kernel's dup3 below replaces the number: its old reservation must not be
        // closed later (it would close the new one).
        if let Some(r) = lock(&o.reserved).take() {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(r);
        }
    }
    let reserved = match crate::ffi::dup_onto(base, to) {
        Ok(r) => r,
        Err(e) => {
            drop(t);
            if let Some(o) = old {
                release(&o);
            }
            return Err(Error::from(e));
        }
    };
    file.descs.fetch_add(1, Ordering::AcqRel);
    t.insert(to, entry_of(file, cloexec, reserved));
    drop(t);
    if let Some(o) = old {
        release(&o);
    }
    Ok(to)
}

/// The program is about to put a kernel file at ustack descriptor `fd`'s number (its own
/// `dup2`/`dup3` onto it, which replaces the number atomically): `fd` is closed, as by
/// [`close`], but its number is left open for the kernel's call to replace.
pub fn close_replaced(fd: i32) -> Result<()> {
    let e = write_table().remove(&fd);
    let Some(e) = e else {
        return fork::close(fd, false)
            .then_some(())
            .ok_or_else(|| Error::badf(fd));
    };
    if let Some(r) = lock(&e.reserved).take() {
        let _ = std::os::fd::IntoRawFd::into_raw_fd(r);
    }
    release(&e);
    Ok(())
}

fn entry(fd: i32) -> Result<Arc<Entry>> {
    let found = table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fd)
        .cloned();
    match found {
        Some(e) => Ok(e),
        // After fork: an inherited descriptor's first use ([`fork::remake`]).
        None if fork::is_inherited(fd) => fork::remake(fd),
        None => Err(Error::badf(fd)),
    }
}

/// Whether `fd` is one of ustack's descriptors (or a parent's, after `fork`).
pub fn is_ours(fd: i32) -> bool {
    table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&fd)
        || fork::is_inherited(fd)
}

/// An identity of the open file (socket or epoll set) descriptor `fd` refers to, the same
/// for every descriptor `dup` made of it (Linux keys an epoll registration on the file
/// and the number: the LD_PRELOAD library tells a second descriptor of a socket from the
/// same one twice by it). Never reused in the process; `EBADF` if `fd` is not ours.
pub fn file_id(fd: i32) -> Result<u64> {
    Ok(entry(fd)?.file.id)
}

/// A socket descriptor: its entry (for the stack) and socket.
struct S {
    e: Arc<Entry>,
}

impl S {
    fn get(fd: i32) -> Result<S> {
        fork::in_use();
        let e = entry(fd)?;
        match e.obj {
            Obj::Sock(_) => Ok(S { e }),
            Obj::Epoll(_) => Err(Error::new(libc::ENOTSOCK, format!("{fd} is an epoll set"))),
        }
    }
    fn sock(&self) -> &Sock {
        match &self.e.obj {
            Obj::Sock(s) => s,
            Obj::Epoll(_) => unreachable!("S::get checked the kind"),
        }
    }
    fn net(&self) -> &Net {
        &self.e.stack.net
    }
    fn state(&self) -> State2 {
        *lock(&self.sock().state)
    }
    fn opts(&self) -> Opts {
        *lock(&self.sock().opts)
    }
    /// How a read waits: never if non-blocking (or `MSG_DONTWAIT`), else up to
    /// `SO_RCVTIMEO`.
    fn read_wait(&self, flags: i32) -> Wait {
        if self.sock().nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0 {
            Wait::Never
        } else {
            Wait::timeout(self.opts().rcvtimeo)
        }
    }
    fn write_wait(&self, flags: i32) -> Wait {
        if self.sock().nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0 {
            Wait::Never
        } else {
            Wait::timeout(self.opts().sndtimeo)
        }
    }
}

/// The stack's error as the `io::Error` the runtime's calls return (its errno).
fn stack_io(e: ustack_stack::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.errno())
}

fn io(e: std::io::Error) -> Error {
    Error::from(e)
}

// ---- socket, bind, listen, accept, connect ------------------------------------------------

/// `socket(2)` on `stack` (`None`: the default stack). `AF_INET` or `AF_INET6`
/// (`EAFNOSUPPORT` for others); `SOCK_STREAM` (TCP) or `SOCK_DGRAM` (UDP), with
/// `SOCK_NONBLOCK` and `SOCK_CLOEXEC`. An `AF_INET6` socket is dual-stack unless
/// `IPV6_V6ONLY`: its IPv4 peers are `::ffff:a.b.c.d`, as on Linux.
pub fn socket(stack: Option<&Arc<Stack>>, domain: i32, ty: i32, protocol: i32) -> Result<i32> {
    fork::in_use();
    let stack = match stack {
        Some(s) => s.clone(),
        None => fork::default_stack()?,
    };
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(Error::new(
            libc::EAFNOSUPPORT,
            format!("address family {domain}: ustack speaks AF_INET and AF_INET6"),
        ));
    }
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let proto = match (base, protocol) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Proto::Tcp,
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Proto::Udp,
        (libc::SOCK_STREAM | libc::SOCK_DGRAM, _) => {
            return Err(Error::new(
                libc::EPROTONOSUPPORT,
                format!("protocol {protocol} for socket type {base}"),
            ));
        }
        _ => {
            return Err(Error::new(
                libc::ESOCKTNOSUPPORT,
                format!("socket type {base}: SOCK_STREAM or SOCK_DGRAM"),
            ));
        }
    };
    let sock = Sock {
        proto,
        domain,
        state: Mutex::new(State2::Fresh { bound: None }),
        opts: Mutex::new(Opts::default()),
        nonblock: AtomicBool::new(ty & libc::SOCK_NONBLOCK != 0),
    };
    insert(stack, Obj::Sock(sock), ty & libc::SOCK_CLOEXEC != 0)
}

/// The first ephemeral port (`net.ipv4.ip_local_port_range`'s default low end) this
/// layer hands out for `bind` to port 0.
const EPHEMERAL: u16 = 32768;

impl Stack {
    /// Hold `port` for a bound descriptor; 0 picks a free one. `EADDRINUSE` if another
    /// descriptor holds it, unless both set `SO_REUSEADDR` (Linux `inet_csk_bind_conflict`
    /// lets two sockets not listening share a port so).
    fn hold(&self, port: u16, shared: bool) -> Result<u16> {
        let mut ports = lock(&self.ports);
        if port == 0 {
            for _ in 0..=(u16::MAX - EPHEMERAL) {
                let p = EPHEMERAL
                    + self.next_port.fetch_add(1, Ordering::Relaxed) % (u16::MAX - EPHEMERAL);
                if let std::collections::hash_map::Entry::Vacant(v) = ports.entry(p) {
                    v.insert(1);
                    return Ok(p);
                }
            }
            return Err(Error::new(libc::EADDRINUSE, "no free port to bind"));
        }
        match ports.get_mut(&port) {
            Some(n) if shared => *n += 1,
            Some(_) => {
                return Err(Error::new(
                    libc::EADDRINUSE,
                    format!("port {port} is bound by another socket"),
                ));
            }
            None => {
                ports.insert(port, 1);
            }
        }
        Ok(port)
    }

    fn release(&self, port: u16) {
        let mut ports = lock(&self.ports);
        if let Some(n) = ports.get_mut(&port) {
            *n -= 1;
            if *n == 0 {
                ports.remove(&port);
            }
        }
    }
}

/// How a call uses a `sockaddr` argument (see [`addr_arg`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrUse {
    /// `bind(2)`.
    Bind,
    /// `connect(2)`.
    Connect,
    /// `sendto(2)`, `sendmsg(2)`.
    SendTo,
}

/// The address in `bytes` (a `sockaddr` of `bytes.len()` bytes) as socket `fd` takes it
/// for `call`: a `sockaddr_in` for an `AF_INET` socket, a `sockaddr_in6` for an
/// `AF_INET6` one, and for a UDP `AF_INET6` socket's `connect`/`sendto` a `sockaddr_in`
/// too (as its `::ffff:a.b.c.d`). Linux's errno otherwise (`EINVAL` for a short one,
/// `EAFNOSUPPORT` for another family; see [`crate::sockaddr::parse`]).
pub fn addr_arg(fd: i32, bytes: &[u8], call: AddrUse) -> Result<SocketAddr> {
    let s = S::get(fd)?;
    let v4_ok = s.sock().proto == Proto::Udp && call != AddrUse::Bind;
    crate::sockaddr::parse(bytes, s.sock().domain, v4_ok)
}

/// Whether `ip` is an address this stack may bind: unspecified, its IPv4 address, its
/// IPv6 address, or its IPv4 address v4-mapped.
fn bindable(stack: &Stack, ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_unspecified() || a == stack.addr,
        IpAddr::V6(a) => {
            a.is_unspecified() || Some(a) == stack.addr6 || a.to_ipv4_mapped() == Some(stack.addr)
        }
    }
}

/// `bind(2)`. The address must be the stack's (`addr=`, `addr6=`) or unspecified
/// (`EADDRNOTAVAIL`); `EINVAL` if already bound; port 0 picks a free port. `EADDRINUSE`
/// when another descriptor holds the port or the stack does
/// ([`ustack_stack::Stack::tcp_bind_conflict`]), unless both sides set `SO_REUSEADDR`.
/// The address's family is the socket's ([`addr_arg`]).
pub fn bind(fd: i32, addr: SocketAddr) -> Result<()> {
    let s = S::get(fd)?;
    if !bindable(&s.e.stack, addr.ip()) {
        return Err(Error::new(
            libc::EADDRNOTAVAIL,
            format!(
                "{} is not this stack's address ({}{})",
                addr.ip(),
                s.e.stack.addr,
                s.e.stack.addr6.map_or(String::new(), |a| format!(", {a}"))
            ),
        ));
    }
    let mut st = lock(&s.sock().state);
    if *st != (State2::Fresh { bound: None }) {
        return Err(Error::new(libc::EINVAL, "the socket is already bound"));
    }
    match s.sock().proto {
        Proto::Tcp => {
            let o = s.opts();
            let shared = o.reuseaddr;
            // Linux inet_csk_bind_conflict: besides the descriptors bound here, what the
            // stack holds on the port (listeners, connections, orphans included, and
            // TIME-WAIT records) conflicts unless both sockets set SO_REUSEADDR; a port
            // SO_REUSEPORT listeners share takes another (reuseport.rs).
            let port = addr.port();
            let reuse = o.reuseport && reuseport::listener(s.e.stack.id, port).is_some();
            if port != 0
                && !reuse
                && s.net()
                    .on_each_shard(move |rt| rt.stack().tcp_bind_conflict(port, shared))
                    .map_err(io)?
                    .contains(&true)
            {
                return Err(Error::new(
                    libc::EADDRINUSE,
                    format!(
                        "port {port} is held by a connection, a listener or a TIME-WAIT record"
                    ),
                ));
            }
            let port = s.e.stack.hold(addr.port(), shared || reuse)?;
            *st = State2::Fresh {
                bound: Some(SocketAddr::new(addr.ip(), port)),
            };
        }
        Proto::Udp => {
            let u = udp_bind(&s, addr)?;
            *st = State2::Udp { fd: u };
        }
    }
    Ok(())
}

/// `listen(2)` on a bound TCP socket (`EDESTADDRREQ` if not bound; `EOPNOTSUPP` on UDP).
pub fn listen(fd: i32, backlog: i32) -> Result<()> {
    let s = S::get(fd)?;
    if s.sock().proto != Proto::Tcp {
        return Err(Error::new(libc::EOPNOTSUPP, "listen on a UDP socket"));
    }
    let mut st = lock(&s.sock().state);
    match *st {
        State2::Fresh { bound: Some(addr) } => {
            // Linux: a backlog of 0 or less still queues one connection.
            let backlog = u32::try_from(backlog).unwrap_or(0).max(1);
            let id = s.e.stack.id;
            let reuse = s.opts().reuseport;
            let l = match reuse
                .then(|| reuseport::listener(id, addr.port()))
                .flatten()
            {
                Some(l) => l,
                None => s
                    .net()
                    .tcp_listen_only_v6(addr, backlog, addr.is_ipv6() && s.opts().v6only)
                    .map_err(io)?,
            };
            if reuse {
                reuseport::join(id, addr.port(), l);
            }
            *st = State2::Listener { fd: l, addr };
            Ok(())
        }
        State2::Fresh { bound: None } => Err(Error::new(
            libc::EDESTADDRREQ,
            "listen before bind: ustack does not pick a port for an unbound listener",
        )),
        State2::Listener { .. } => Ok(()),
        _ => Err(Error::new(libc::EINVAL, "listen on a connected socket")),
    }
}

/// Apply the options set on a descriptor to its new stream.
fn apply(net: &Net, fd: Fd, o: Opts) -> Result<()> {
    if o.nodelay {
        net.set_nodelay(fd, true).map_err(io)?;
    }
    let tcp_set = o.tcp.iter().next().is_some();
    if o.keepalive
        || o.rcvbuf.is_some()
        || o.sndbuf.is_some()
        || o.linger.is_some()
        || o.cork
        || o.reuseaddr
        || tcp_set
    {
        net.with_stream(fd, move |x, rt| {
            let now = rt.now();
            let st = rt.stack_mut();
            // The listener's (or the fresh socket's) TCP_KEEP*, TCP_MAXSEG, TCP_CORK and
            // SO_REUSEADDR (Linux sk_clone_lock copies them to an accepted socket).
            for (t, v) in o.tcp.iter() {
                st.tcp_set_opt(now, x.handle(), t, v).map_err(stack_io)?;
            }
            if o.cork {
                st.tcp_set_cork(now, x.handle(), true).map_err(stack_io)?;
            }
            if o.reuseaddr {
                st.tcp_set_reuseaddr(x.handle(), true).map_err(stack_io)?;
            }
            if o.keepalive {
                x.set_keepalive(rt, true)?;
            }
            if let Some(n) = o.rcvbuf {
                x.set_recv_buffer_size(rt, n)?;
            }
            if let Some(n) = o.sndbuf {
                x.set_send_buffer_size(rt, n)?;
            }
            if o.linger.is_some() {
                x.set_linger(rt, o.linger)?;
            }
            Ok(())
        })
        .map_err(io)?;
    }
    Ok(())
}

/// `accept4(2)`: a connection from the listener's queue, its descriptor and the peer;
/// `flags`: `SOCK_NONBLOCK`, `SOCK_CLOEXEC`. The listener's options carry over, as on
/// Linux.
pub fn accept(fd: i32, flags: i32) -> Result<(i32, SocketAddr)> {
    if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        return Err(Error::new(
            libc::EINVAL,
            format!("accept4 flags {flags:#x}"),
        ));
    }
    let s = S::get(fd)?;
    let State2::Listener { fd: l, .. } = s.state() else {
        return Err(Error::new(libc::EINVAL, "accept on a socket not listening"));
    };
    let (c, peer) = s.net().accept(l, s.read_wait(0)).map_err(io)?;
    let peer = crate::sockaddr::for_domain(peer, s.sock().domain);
    let o = s.opts();
    if let Err(e) = apply(s.net(), c, o) {
        let _ = s.net().close(c);
        return Err(e);
    }
    let sock = Sock {
        proto: Proto::Tcp,
        domain: s.sock().domain,
        state: Mutex::new(State2::Stream {
            fd: c,
            connecting: false,
        }),
        opts: Mutex::new(o),
        nonblock: AtomicBool::new(flags & libc::SOCK_NONBLOCK != 0),
    };
    match insert(
        s.e.stack.clone(),
        Obj::Sock(sock),
        flags & libc::SOCK_CLOEXEC != 0,
    ) {
        Ok(n) => Ok((n, peer)),
        Err(e) => {
            let _ = s.net().close(c);
            Err(e)
        }
    }
}

/// `connect(2)`. TCP: blocking, waits for the handshake (up to `SO_SNDTIMEO`); non-blocking,
/// `EINPROGRESS`, then `EALREADY` while in progress, 0 once done (or the failure), then
/// `EISCONN`. UDP: sets the peer (binding an ephemeral port first).
pub fn connect(fd: i32, addr: SocketAddr) -> Result<()> {
    let s = S::get(fd)?;
    if s.sock().proto == Proto::Udp {
        let u = udp_fd(&s)?;
        return s.net().udp_connect(u, Some(addr)).map_err(io);
    }
    // Linux `tcp_v6_connect`: a v4-mapped peer of a V6ONLY socket is unreachable.
    if let SocketAddr::V6(a) = addr
        && a.ip().to_ipv4_mapped().is_some()
        && s.opts().v6only
    {
        return Err(Error::new(
            libc::ENETUNREACH,
            "a v4-mapped address on an IPV6_V6ONLY socket",
        ));
    }
    let mut st = lock(&s.sock().state);
    match *st {
        State2::Fresh { bound } => {
            if bound.is_some_and(|b| b.port() != 0) {
                // ustack-net connects from a port of its choosing.
                return Err(Error::new(
                    libc::EOPNOTSUPP,
                    "connect from a bound port: ustack picks the local port",
                ));
            }
            let wait = s.write_wait(0);
            // The SYN goes out at once; a blocking connect then waits below, without
            // holding the descriptor's lock (another thread may poll or close it).
            let c = s.net().tcp_connect(addr, Wait::Never).map_err(io)?;
            if let Err(e) = apply(s.net(), c, s.opts()) {
                let _ = s.net().close(c);
                return Err(e);
            }
            *st = State2::Stream {
                fd: c,
                connecting: true,
            };
            drop(st);
            if wait == Wait::Never {
                return Err(Error::new(libc::EINPROGRESS, "connecting"));
            }
            wait_connected(&s, c, bound, wait)
        }
        State2::Stream {
            fd: c,
            connecting: true,
        } => match s.net().connect_done(c) {
            Ok(false) => Err(Error::new(libc::EALREADY, "the connection is in progress")),
            Ok(true) => {
                *st = State2::Stream {
                    fd: c,
                    connecting: false,
                };
                Ok(())
            }
            Err(e) => {
                *st = State2::Stream {
                    fd: c,
                    connecting: false,
                };
                Err(io(e))
            }
        },
        State2::Stream { .. } => Err(Error::new(libc::EISCONN, "already connected")),
        State2::Listener { .. } => Err(Error::new(libc::EISCONN, "a listener")),
        State2::Udp { .. } => Err(Error::new(libc::EINVAL, "not TCP")),
    }
}

/// A blocking connect's wait for the end of the handshake (Linux `inet_wait_for_connect`):
/// woken by the stream becoming writable or failing. A failure is returned (`SO_ERROR`
/// then stays 0) and the descriptor is fresh again, as Linux's socket goes back to
/// `CLOSE` and may connect again; a wait that runs out (`SO_SNDTIMEO`) is `EINPROGRESS`,
/// the handshake going on.
fn wait_connected(s: &S, c: Fd, bound: Option<SocketAddr>, wait: Wait) -> Result<()> {
    let ep = Epoll::new(s.net()).map_err(io)?;
    ep.add(c, 0, Readiness::WRITABLE, Mode::Level, false)
        .map_err(io)?;
    let mut events = Vec::with_capacity(1);
    loop {
        let done = s.net().connect_done(c);
        let mut st = lock(&s.sock().state);
        if *st
            != (State2::Stream {
                fd: c,
                connecting: true,
            })
        {
            // Another thread took it over meanwhile (SO_ERROR, connect, close).
            return match *st {
                State2::Stream { fd, .. } if fd == c => Ok(()),
                _ => Err(Error::new(
                    libc::ECONNABORTED,
                    "the socket changed while connecting",
                )),
            };
        }
        match done {
            Ok(true) => {
                *st = State2::Stream {
                    fd: c,
                    connecting: false,
                };
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => {
                *st = State2::Fresh { bound };
                drop(st);
                let _ = s.net().close(c);
                return Err(io(e));
            }
        }
        drop(st);
        let left = match wait {
            Wait::Until(t) => {
                let now = std::time::Instant::now();
                if now >= t {
                    return Err(Error::new(
                        libc::EINPROGRESS,
                        "SO_SNDTIMEO ran out while connecting",
                    ));
                }
                Some(t - now)
            }
            _ => None,
        };
        events.clear();
        ep.wait(&mut events, 1, left).map_err(io)?;
    }
}

/// A UDP descriptor's ustack socket, bound to an ephemeral port on first use (as Linux
/// autobinds on `sendto` or `connect`).
fn udp_fd(s: &S) -> Result<Fd> {
    let mut st = lock(&s.sock().state);
    match *st {
        State2::Udp { fd } => Ok(fd),
        _ => {
            let any = match s.sock().domain {
                libc::AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            };
            let u = udp_bind(s, SocketAddr::new(any, 0))?;
            *st = State2::Udp { fd: u };
            Ok(u)
        }
    }
}

/// A UDP socket of `s` bound to `addr`, with the `IPV6_V6ONLY` set before.
fn udp_bind(s: &S, addr: SocketAddr) -> Result<Fd> {
    let u = s.net().udp_bind(addr).map_err(io)?;
    if addr.is_ipv6()
        && s.opts().v6only
        && let Err(e) = s.net().udp_set_only_v6(u, true)
    {
        let _ = s.net().close(u);
        return Err(io(e));
    }
    Ok(u)
}

// ---- data -----------------------------------------------------------------------------------

const RECV_FLAGS: i32 =
    libc::MSG_DONTWAIT | libc::MSG_WAITALL | libc::MSG_NOSIGNAL | libc::MSG_PEEK | libc::MSG_OOB;
const SEND_FLAGS: i32 = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_MORE | libc::MSG_OOB;

fn check_flags(flags: i32, allowed: i32) -> Result<()> {
    if flags & !allowed != 0 {
        return Err(Error::new(
            libc::EOPNOTSUPP,
            format!(
                "flags {:#x}: ustack does not support them",
                flags & !allowed
            ),
        ));
    }
    Ok(())
}

/// `recvfrom(2)`: bytes read (0 at end of stream) and, for UDP, the sender. Flags:
/// `MSG_DONTWAIT`, `MSG_WAITALL` (TCP: until `buf` is full, end of stream or an error),
/// `MSG_PEEK` (the bytes or the datagram stay for the next read: `Net::peek`,
/// `Net::peek_from`),
/// `MSG_OOB` (TCP: `EINVAL`, as Linux's `tcp_recv_urg` with `SO_OOBINLINE`: ustack reads
/// an urgent byte in line; UDP: `EOPNOTSUPP`).
pub fn recv_from(fd: i32, buf: &mut [u8], flags: i32) -> Result<(usize, Option<SocketAddr>)> {
    check_flags(flags, RECV_FLAGS)?;
    let s = S::get(fd)?;
    let wait = s.read_wait(flags);
    if flags & (libc::MSG_PEEK | libc::MSG_OOB) != 0 {
        return match (s.sock().proto, s.state()) {
            (Proto::Tcp, _) if flags & libc::MSG_OOB != 0 => Err(Error::new(
                libc::EINVAL,
                "no urgent data: ustack reads it in line",
            )),
            (Proto::Tcp, State2::Stream { fd: c, .. }) => {
                let all = flags & libc::MSG_WAITALL != 0;
                Ok((s.net().peek(c, buf, wait, all).map_err(io)?, None))
            }
            (Proto::Tcp, _) => Err(Error::new(libc::ENOTCONN, "not connected")),
            (Proto::Udp, _) if flags & libc::MSG_OOB == 0 => {
                let u = udp_fd(&s)?;
                let (n, from) = s.net().peek_from(u, buf, wait).map_err(io)?;
                Ok((n, Some(crate::sockaddr::for_domain(from, s.sock().domain))))
            }
            (Proto::Udp, _) => Err(Error::new(libc::EOPNOTSUPP, "MSG_OOB on a datagram socket")),
        };
    }
    match s.state() {
        State2::Stream { fd: c, .. } => {
            let mut got = 0;
            loop {
                match s.net().read(c, &mut buf[got..], wait) {
                    Ok(0) => return Ok((got, None)),
                    Ok(n) => got += n,
                    Err(e) if got > 0 => {
                        let _ = e;
                        return Ok((got, None));
                    }
                    Err(e) => return Err(io(e)),
                }
                if flags & libc::MSG_WAITALL == 0 || got == buf.len() {
                    return Ok((got, None));
                }
            }
        }
        State2::Fresh { .. } | State2::Listener { .. } if s.sock().proto == Proto::Tcp => {
            Err(Error::new(libc::ENOTCONN, "not connected"))
        }
        _ => {
            let u = udp_fd(&s)?;
            let (n, from) = s.net().recv_from(u, buf, wait).map_err(io)?;
            Ok((n, Some(crate::sockaddr::for_domain(from, s.sock().domain))))
        }
    }
}

/// `readv(2)`/`recvmsg(2)`: read into `bufs` in turn.
pub fn recv_vec(
    fd: i32,
    bufs: &mut [&mut [u8]],
    flags: i32,
) -> Result<(usize, Option<SocketAddr>)> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut tmp = vec![0u8; total.min(ustack_net::MAX_IO)];
    let (n, from) = recv_from(fd, &mut tmp, flags)?;
    let mut left = &tmp[..n];
    for b in bufs.iter_mut() {
        let k = b.len().min(left.len());
        b[..k].copy_from_slice(&left[..k]);
        left = &left[k..];
    }
    Ok((n, from))
}

/// A send on stream `c` as Linux's `tcp_sendmsg` makes it: a blocking one (`wait` not
/// [`Wait::Never`]) waits for send-buffer room until every byte is taken, or an error or
/// `SO_SNDTIMEO` ends it (then the count taken so far, if any: Linux
/// `sk_stream_wait_memory`, and `tcp_sendmsg_locked`'s `copied ? copied : err`); a
/// non-blocking one takes what fits. ustack-net's write takes at most what fits the send
/// buffer, and at most [`ustack_net::MAX_IO`], per call.
///
/// With `urgent` (`MSG_OOB`) each part is written by `Net::write_urgent`: the urgent
/// pointer ends after the last byte taken, as Linux's `tcp_push` marks it at each push.
fn stream_send(s: &S, c: Fd, buf: &[u8], wait: Wait, urgent: bool) -> Result<usize> {
    let mut done = 0;
    loop {
        let w = if urgent {
            s.net().write_urgent(c, &buf[done..], wait)
        } else {
            s.net().write(c, &buf[done..], wait)
        };
        let n = match w {
            Ok(n) => n,
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(io(e)),
        };
        done += n;
        if done == buf.len() || wait == Wait::Never || n == 0 {
            return Ok(done);
        }
    }
}

/// `sendto(2)`: bytes taken. TCP: a blocking send takes every byte before it returns (see
/// [`stream_send`]), a non-blocking one what fits the send buffer; `to` is ignored, as
/// Linux does for a connected stream. UDP sends to `to` or the connected peer.
pub fn send_to(fd: i32, buf: &[u8], flags: i32, to: Option<SocketAddr>) -> Result<usize> {
    check_flags(flags, SEND_FLAGS)?;
    let s = S::get(fd)?;
    match s.state() {
        State2::Stream { fd: c, .. } => {
            let urgent = flags & libc::MSG_OOB != 0;
            stream_send(&s, c, buf, s.write_wait(flags), urgent)
        }
        State2::Fresh { .. } | State2::Listener { .. } if s.sock().proto == Proto::Tcp => {
            // Linux `sk_stream_wait_connect`: not connecting is EPIPE.
            Err(Error::new(libc::EPIPE, "not connected"))
        }
        _ if flags & libc::MSG_OOB != 0 => {
            // Linux `udp_sendmsg`: "if (msg->msg_flags & MSG_OOB) return -EOPNOTSUPP;".
            Err(Error::new(libc::EOPNOTSUPP, "MSG_OOB on a datagram socket"))
        }
        _ => {
            let u = udp_fd(&s)?;
            match to {
                Some(a) => s.net().send_to(u, buf, a),
                None => s.net().send(u, buf),
            }
            .map_err(io)
        }
    }
}

/// `writev(2)`/`sendmsg(2)`: the buffers gathered into sends of up to
/// [`ustack_net::MAX_IO`] bytes. On a blocking stream every byte is taken, as by
/// [`send_to`]; a non-blocking send, or a datagram, is one send (a datagram of more than
/// `MAX_IO` bytes is cut, and fails as too long).
pub fn send_vec(fd: i32, bufs: &[&[u8]], flags: i32, to: Option<SocketAddr>) -> Result<usize> {
    if bufs.len() == 1 {
        return send_to(fd, bufs[0], flags, to);
    }
    let stream = matches!(S::get(fd)?.state(), State2::Stream { .. });
    let mut at = (0, 0); // (buffer, offset in it)
    let mut done = 0;
    loop {
        let mut all = Vec::with_capacity(
            bufs.iter()
                .map(|b| b.len())
                .sum::<usize>()
                .saturating_sub(done)
                .min(ustack_net::MAX_IO),
        );
        while at.0 < bufs.len() && all.len() < ustack_net::MAX_IO {
            let b = &bufs[at.0][at.1..];
            let k = b.len().min(ustack_net::MAX_IO - all.len());
            all.extend_from_slice(&b[..k]);
            if k == b.len() {
                at = (at.0 + 1, 0);
            } else {
                at.1 += k;
            }
        }
        let more = at.0 < bufs.len();
        let n = match send_to(fd, &all, flags, to) {
            Ok(n) => n,
            Err(_) if done > 0 => return Ok(done),
            Err(e) => return Err(e),
        };
        done += n;
        // A short send (non-blocking, or ended by an error or timeout) ends it; so does a
        // datagram (one send) or the last part.
        if n < all.len() || !more || !stream {
            return Ok(done);
        }
    }
}

/// `shutdown(2)`: `SHUT_RD`, `SHUT_WR`, `SHUT_RDWR`.
pub fn shutdown(fd: i32, how: i32) -> Result<()> {
    let how = match how {
        libc::SHUT_RD => Shutdown::Read,
        libc::SHUT_WR => Shutdown::Write,
        libc::SHUT_RDWR => Shutdown::Both,
        _ => return Err(Error::new(libc::EINVAL, format!("shutdown how {how}"))),
    };
    let s = S::get(fd)?;
    match s.state() {
        State2::Stream { fd: c, .. } => s.net().shutdown(c, how).map_err(io),
        _ => Err(Error::new(libc::ENOTCONN, "not connected")),
    }
}

/// `close(2)`: the descriptor goes; with the last descriptor of the socket (see [`dup`])
/// the socket closes (a stream sends its FIN, or a RST with unread data or `SO_LINGER`
/// zero).
pub fn close(fd: i32) -> Result<()> {
    let e = write_table().remove(&fd);
    let Some(e) = e else {
        return fork::close(fd, true)
            .then_some(())
            .ok_or_else(|| Error::badf(fd));
    };
    release(&e);
    Ok(())
}

/// A descriptor of `e`'s file is gone: the file closes with the last one.
fn release(e: &Entry) {
    if e.descs.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    if let Obj::Sock(s) = &e.obj {
        let st = *lock(&s.state);
        match st {
            State2::Fresh { bound: Some(a) } | State2::Listener { addr: a, .. } => {
                e.stack.release(a.port());
            }
            _ => {}
        }
        match st {
            State2::Listener { fd: n, addr } if !reuseport::leave(e.stack.id, addr.port(), n) => {}
            State2::Listener { fd: n, .. } => {
                let _ = e.stack.net.close(n);
                // The loop closes a listener in the round after its close job: wait for
                // that round (two empty jobs: the second runs after the first's round),
                // so that the port is free when close returns, as on Linux (a server
                // restarting binds it at once).
                for _ in 0..2 {
                    let _ = e.stack.net.on_each_shard(|_| ());
                }
            }
            State2::Stream { fd: n, .. } | State2::Udp { fd: n } => {
                let _ = e.stack.net.close(n);
            }
            State2::Fresh { .. } => {}
        }
    }
}

// ---- names ------------------------------------------------------------------------------------

/// `getsockname(2)`: a `sockaddr_in` for an `AF_INET` socket, a `sockaddr_in6` for an
/// `AF_INET6` one (a connection over IPv4 as `::ffff:a.b.c.d`).
pub fn sock_name(fd: i32) -> Result<SocketAddr> {
    let s = S::get(fd)?;
    let domain = s.sock().domain;
    let a = match s.state() {
        State2::Fresh { bound } => bound.unwrap_or(SocketAddr::new(
            match domain {
                libc::AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            },
            0,
        )),
        State2::Listener { addr, .. } => addr,
        State2::Stream { fd: n, .. } | State2::Udp { fd: n } => {
            s.net().local_addr(n).map_err(io)?
        }
    };
    Ok(crate::sockaddr::for_domain(a, domain))
}

/// `getpeername(2)`: `ENOTCONN` if there is no peer; the family as [`sock_name`]'s.
pub fn peer_name(fd: i32) -> Result<SocketAddr> {
    let s = S::get(fd)?;
    match s.state() {
        State2::Stream { fd: n, .. } | State2::Udp { fd: n } => s
            .net()
            .peer_addr(n)
            .map(|a| crate::sockaddr::for_domain(a, s.sock().domain))
            .map_err(io),
        _ => Err(Error::new(libc::ENOTCONN, "not connected")),
    }
}

// ---- options ----------------------------------------------------------------------------------

fn int_bytes(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

fn sat(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A sysctl of the stack (shard 0).
fn sysctl(net: &Net, f: fn(&ustack_stack::Sysctl) -> u64) -> Result<i32> {
    let v = net
        .on_each_shard(move |rt| f(rt.stack().sysctl()))
        .map_err(io)?;
    Ok(v.first()
        .map_or(0, |&n| i32::try_from(n).unwrap_or(i32::MAX)))
}

/// The option at `(level, name)` for socket `s`: `EOPNOTSUPP` for a TCP option on a UDP
/// socket; `ENOPROTOOPT` for an `IPPROTO_IPV6` one on an `AF_INET` socket (Linux's
/// `ip_setsockopt`/`ip_getsockopt` know no such level).
fn lookup(s: &S, level: i32, name: i32) -> Result<Opt> {
    let opt = Opt::lookup(level, name)?;
    if opt.is_tcp() && s.sock().proto != Proto::Tcp {
        return Err(Error::new(libc::EOPNOTSUPP, "a TCP option on a UDP socket"));
    }
    if level == libc::IPPROTO_IPV6 && s.sock().domain != libc::AF_INET6 {
        return Err(Error::new(
            libc::ENOPROTOOPT,
            "an IPPROTO_IPV6 option on an AF_INET socket",
        ));
    }
    Ok(opt)
}

/// `getsockopt(2)`: the value's bytes (the caller copies what fits).
pub fn getsockopt(fd: i32, level: i32, name: i32) -> Result<Vec<u8>> {
    let s = S::get(fd)?;
    let opt = lookup(&s, level, name)?;
    let st = s.state();
    let o = s.opts();
    let stream = match st {
        State2::Stream { fd, .. } => Some(fd),
        _ => None,
    };
    let net = s.net();
    let v = match opt {
        Opt::ReuseAddr => int_bytes(i32::from(o.reuseaddr)),
        Opt::ReusePort => int_bytes(i32::from(o.reuseport)),
        Opt::Type => int_bytes(match s.sock().proto {
            Proto::Tcp => libc::SOCK_STREAM,
            Proto::Udp => libc::SOCK_DGRAM,
        }),
        Opt::Domain => int_bytes(s.sock().domain),
        Opt::V6Only => int_bytes(i32::from(o.v6only)),
        // Linux `ipv6_getsockopt`: the socket's hop limit, else the route's, else
        // `net.ipv6.conf.*.hop_limit`; ustack sends with the sysctl's.
        Opt::UnicastHops => int_bytes(sysctl(net, |c| c.ip6_hop_limit)?),
        Opt::Protocol => int_bytes(match s.sock().proto {
            Proto::Tcp => libc::IPPROTO_TCP,
            Proto::Udp => libc::IPPROTO_UDP,
        }),
        Opt::AcceptConn => int_bytes(i32::from(matches!(st, State2::Listener { .. }))),
        Opt::Error => int_bytes(take_error(&s)?),
        Opt::RcvBuf => match stream {
            Some(c) => int_bytes(sat(net
                .with_stream(c, |x, rt| x.recv_buffer_size(rt))
                .map_err(io)?)),
            None => int_bytes(sat(o.rcvbuf.map_or(131_072, |n| n.saturating_mul(2)))),
        },
        Opt::SndBuf => match stream {
            Some(c) => int_bytes(sat(net
                .with_stream(c, |x, rt| x.send_buffer_size(rt))
                .map_err(io)?)),
            None => int_bytes(sat(o.sndbuf.map_or(16_384, |n| n.saturating_mul(2)))),
        },
        Opt::KeepAlive => int_bytes(i32::from(o.keepalive)),
        Opt::Linger => opts::linger_bytes(o.linger),
        Opt::RcvTimeo => opts::timeval_bytes(o.rcvtimeo),
        Opt::SndTimeo => opts::timeval_bytes(o.sndtimeo),
        Opt::NoDelay => match stream {
            // What the stream was given (an option set before connect is applied then).
            Some(c) => int_bytes(i32::from(net.nodelay(c).map_err(io)?)),
            None => int_bytes(i32::from(o.nodelay)),
        },
        Opt::Cork => int_bytes(i32::from(o.cork)),
        Opt::MaxSeg | Opt::KeepIdle | Opt::KeepIntvl | Opt::KeepCnt => {
            let t = opt
                .tcp_opt()
                .ok_or_else(|| Error::new(libc::ENOPROTOOPT, "not a per-socket TCP option"))?;
            int_bytes(match (stream, o.tcp.get(t), t) {
                (Some(c), _, _) => net
                    .with_stream(c, move |x, rt| {
                        rt.stack().tcp_opt(x.handle(), t).map_err(stack_io)
                    })
                    .map_err(io)?,
                // A listener or a fresh socket: the value set, else Linux's default
                // (TCP_MSS_DEFAULT, the sysctl).
                (None, Some(v), _) => v,
                (None, None, TcpOpt::MaxSeg) => 536,
                (None, None, TcpOpt::KeepIdle) => sysctl(net, |c| c.tcp_keepalive_time)?,
                (None, None, TcpOpt::KeepIntvl) => sysctl(net, |c| c.tcp_keepalive_intvl)?,
                (None, None, TcpOpt::KeepCnt) => sysctl(net, |c| c.tcp_keepalive_probes)?,
            })
        }
        Opt::Info => match st {
            State2::Stream { fd: c, .. } => match net.tcp_info(c) {
                Ok(i) => opts::tcp_info_bytes(&i).to_vec(),
                // The connection is gone (reset, timed out): Linux reports CLOSE.
                Err(_) => opts::tcp_info_state_only(State::Closed).to_vec(),
            },
            State2::Listener { .. } => opts::tcp_info_state_only(State::Listen).to_vec(),
            _ => opts::tcp_info_state_only(State::Closed).to_vec(),
        },
    };
    Ok(v)
}

/// `SO_ERROR`: the pending error, reported once (Linux `sock_error`).
fn take_error(s: &S) -> Result<i32> {
    let mut st = lock(&s.sock().state);
    match *st {
        State2::Stream {
            fd: c,
            connecting: true,
        } => match s.net().connect_done(c) {
            Ok(false) => Ok(0),
            Ok(true) => {
                *st = State2::Stream {
                    fd: c,
                    connecting: false,
                };
                Ok(0)
            }
            Err(e) => {
                *st = State2::Stream {
                    fd: c,
                    connecting: false,
                };
                Ok(crate::error::errno_of(&e))
            }
        },
        State2::Stream { fd: c, .. } => s
            .net()
            .with_stream(c, |x, rt| {
                Ok(rt
                    .stack_mut()
                    .tcp_take_error(x.handle())
                    .ok()
                    .flatten()
                    .map_or(0, |e| e.errno()))
            })
            .or(Ok(0)),
        // No connection: nothing pending (a failed blocking connect reported its error).
        _ => Ok(0),
    }
}

/// `setsockopt(2)`. Options set before a connection exists apply when it does.
pub fn setsockopt(fd: i32, level: i32, name: i32, v: &[u8]) -> Result<()> {
    let s = S::get(fd)?;
    let opt = lookup(&s, level, name)?;
    let stream = match s.state() {
        State2::Stream { fd, .. } => Some(fd),
        _ => None,
    };
    let net = s.net().clone();
    let mut o = lock(&s.sock().opts);
    let on = || opts::int(v).map(|n| n != 0);
    let size = || opts::int(v).map(|n| usize::try_from(n).unwrap_or(0));
    match opt {
        Opt::ReuseAddr => o.reuseaddr = on()?,
        Opt::ReusePort => o.reuseport = on()?,
        Opt::RcvBuf => {
            let n = size()?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| x.set_recv_buffer_size(rt, n))
                    .map_err(io)?;
            }
            o.rcvbuf = Some(n);
        }
        Opt::SndBuf => {
            let n = size()?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| x.set_send_buffer_size(rt, n))
                    .map_err(io)?;
            }
            o.sndbuf = Some(n);
        }
        Opt::KeepAlive => {
            let b = on()?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| x.set_keepalive(rt, b))
                    .map_err(io)?;
            }
            o.keepalive = b;
        }
        Opt::Linger => {
            let l = opts::linger(v)?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| x.set_linger(rt, l))
                    .map_err(io)?;
            }
            o.linger = l;
        }
        Opt::RcvTimeo => o.rcvtimeo = opts::timeval(v)?,
        Opt::SndTimeo => o.sndtimeo = opts::timeval(v)?,
        Opt::NoDelay => {
            let b = on()?;
            if let Some(c) = stream {
                net.set_nodelay(c, b).map_err(io)?;
            }
            o.nodelay = b;
        }
        Opt::V6Only => {
            let b = on()?;
            // Linux `do_ipv6_setsockopt`: "if (sk->sk_protocol == IPPROTO_UDP ...) or
            // inet_num: return -EINVAL": fixed once the socket has a port.
            let bound = !matches!(s.state(), State2::Fresh { bound: None });
            if bound {
                return Err(Error::new(
                    libc::EINVAL,
                    "IPV6_V6ONLY on a bound socket: set it before bind",
                ));
            }
            o.v6only = b;
        }
        Opt::Error
        | Opt::Type
        | Opt::Domain
        | Opt::Protocol
        | Opt::AcceptConn
        | Opt::Info
        | Opt::UnicastHops => {
            return Err(Error::new(libc::ENOPROTOOPT, "a read-only option"));
        }
        Opt::Cork => {
            let b = on()?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| {
                    let now = rt.now();
                    rt.stack_mut()
                        .tcp_set_cork(now, x.handle(), b)
                        .map_err(stack_io)
                })
                .map_err(io)?;
            }
            o.cork = b;
        }
        // Kept per socket beside the TCB (Stack::tcp_set_opt). On a listener they are held
        // here and given to each accepted connection; a listener's TCP_MAXSEG does not
        // lower the MSS its SYN-ACKs announce through this API (the listener is the
        // runtime's, on every shard), only what its connections send with.
        Opt::MaxSeg | Opt::KeepIdle | Opt::KeepIntvl | Opt::KeepCnt => {
            let t = opt
                .tcp_opt()
                .ok_or_else(|| Error::new(libc::ENOPROTOOPT, "not a per-socket TCP option"))?;
            let n = opts::int(v)?;
            t.check(n)
                .map_err(|_| Error::new(libc::EINVAL, format!("{t:?} {n}: out of range")))?;
            if let Some(c) = stream {
                net.with_stream(c, move |x, rt| {
                    let now = rt.now();
                    rt.stack_mut()
                        .tcp_set_opt(now, x.handle(), t, n)
                        .map_err(stack_io)
                })
                .map_err(io)?;
            }
            o.tcp.set(t, n);
        }
    }
    Ok(())
}

// ---- fcntl, ioctl -------------------------------------------------------------------------

/// `fcntl(2)`: `F_GETFL` (`O_RDWR`, plus `O_NONBLOCK` when set), `F_SETFL` (`O_NONBLOCK`;
/// other bits ignored, as Linux ignores those it cannot change), `F_GETFD`/`F_SETFD`
/// (`FD_CLOEXEC`), `F_DUPFD`/`F_DUPFD_CLOEXEC` ([`dup`]). `EINVAL` for other commands.
pub fn fcntl(fd: i32, cmd: i32, arg: i64) -> Result<i32> {
    let e = entry(fd)?;
    let nonblock = match &e.obj {
        Obj::Sock(s) => Some(&s.nonblock),
        Obj::Epoll(_) => None,
    };
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR
            | if nonblock.is_some_and(|n| n.load(Ordering::Relaxed)) {
                libc::O_NONBLOCK
            } else {
                0
            }),
        libc::F_SETFL => {
            if let Some(n) = nonblock {
                n.store(arg & i64::from(libc::O_NONBLOCK) != 0, Ordering::Relaxed);
            }
            Ok(0)
        }
        libc::F_GETFD => Ok(if e.cloexec.load(Ordering::Relaxed) {
            libc::FD_CLOEXEC
        } else {
            0
        }),
        libc::F_SETFD => {
            e.cloexec
                .store(arg & i64::from(libc::FD_CLOEXEC) != 0, Ordering::Relaxed);
            Ok(0)
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => dup(
            fd,
            i32::try_from(arg).unwrap_or(i32::MAX),
            cmd == libc::F_DUPFD_CLOEXEC,
        ),
        _ => Err(Error::new(libc::EINVAL, format!("fcntl command {cmd}"))),
    }
}

/// `ioctl(FIONBIO)`.
pub fn set_nonblocking(fd: i32, on: bool) -> Result<()> {
    S::get(fd)?.sock().nonblock.store(on, Ordering::Relaxed);
    Ok(())
}

/// `ioctl(FIONREAD)`: bytes waiting to be read on a stream (`EINVAL` on a listener, as
/// Linux).
pub fn bytes_readable(fd: i32) -> Result<i32> {
    let s = S::get(fd)?;
    match s.state() {
        State2::Stream { fd: c, .. } => Ok(s.net().bytes_readable(c).map_or(0, sat)),
        State2::Listener { .. } => Err(Error::new(libc::EINVAL, "FIONREAD on a listener")),
        State2::Udp { .. } => Err(Error::new(libc::EOPNOTSUPP, "FIONREAD on UDP: not yet")),
        State2::Fresh { .. } => Ok(0),
    }
}

// ---- poll and epoll -------------------------------------------------------------------------

/// The ustack socket of a descriptor, for a readiness set: `None` for a fresh socket
/// (no connection or listener yet).
fn net_fd(s: &S) -> Option<Fd> {
    match s.state() {
        State2::Listener { fd, .. } | State2::Stream { fd, .. } | State2::Udp { fd } => Some(fd),
        State2::Fresh { .. } => None,
    }
}

/// What a fresh TCP socket is ready for (Linux `tcp_poll` in `TCP_CLOSE`).
const FRESH: u32 = (libc::EPOLLOUT | libc::EPOLLHUP) as u32;
const ALWAYS: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;

fn timeout(ms: i32) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// `epoll_create1(2)` (`EPOLL_CLOEXEC`): an empty set on the default stack until a
/// descriptor is added (then on that descriptor's stack).
pub fn epoll_create(flags: i32) -> Result<i32> {
    if flags & !libc::EPOLL_CLOEXEC != 0 {
        return Err(Error::new(
            libc::EINVAL,
            format!("epoll_create1 flags {flags:#x}"),
        ));
    }
    let stack = fork::default_stack()?;
    let set = EpollSet {
        on: Mutex::new(None),
    };
    insert(stack, Obj::Epoll(set), flags & libc::EPOLL_CLOEXEC != 0)
}

fn epoll_set(epfd: i32) -> Result<Arc<Entry>> {
    let e = entry(epfd)?;
    if !matches!(e.obj, Obj::Epoll(_)) {
        return Err(Error::new(
            libc::EINVAL,
            format!("{epfd} is not an epoll set"),
        ));
    }
    Ok(e)
}

/// `epoll_ctl(2)`: `EPOLL_CTL_ADD`/`MOD`/`DEL` with `EPOLLIN`, `EPOLLOUT`, `EPOLLRDHUP`,
/// `EPOLLET`, `EPOLLONESHOT` (`EPOLLERR`/`EPOLLHUP` always). A set holds the sockets of
/// one stack (`EINVAL` for another's), and sockets with a connection or a listener
/// (`EINVAL` for a fresh one).
pub fn epoll_ctl(epfd: i32, op: i32, fd: i32, events: u32, data: u64) -> Result<()> {
    let e = epoll_set(epfd)?;
    let Obj::Epoll(set) = &e.obj else {
        unreachable!("epoll_set checked the kind")
    };
    if fd == epfd {
        return Err(Error::new(libc::EINVAL, "an epoll set cannot watch itself"));
    }
    let s = S::get(fd).map_err(|err| match err.errno {
        libc::ENOTSOCK => Error::new(libc::EINVAL, "nested epoll sets are not supported"),
        _ => err,
    })?;
    let n = net_fd(&s).ok_or_else(|| {
        Error::new(
            libc::EINVAL,
            "a socket not yet connected or listening cannot be watched (ustack makes the socket at connect or listen)",
        )
    })?;
    let mut on = lock(&set.on);
    let ep = match &*on {
        Some((stack, ep)) if stack.id == s.e.stack.id => ep.clone(),
        Some(_) => {
            return Err(Error::new(
                libc::EINVAL,
                "the socket is on another stack than the set's",
            ));
        }
        None => {
            let ep = Arc::new(Epoll::new(&s.e.stack.net).map_err(io)?);
            *on = Some((s.e.stack.clone(), ep.clone()));
            ep
        }
    };
    drop(on);
    let interest = Readiness::from_epoll(events);
    let mode = if events & libc::EPOLLET as u32 != 0 {
        Mode::Edge
    } else {
        Mode::Level
    };
    let oneshot = events & libc::EPOLLONESHOT as u32 != 0;
    match op {
        libc::EPOLL_CTL_ADD => ep.add(n, data, interest, mode, oneshot),
        libc::EPOLL_CTL_MOD => ep.modify(n, data, interest, mode, oneshot),
        libc::EPOLL_CTL_DEL => ep.delete(n),
        _ => return Err(Error::new(libc::EINVAL, format!("epoll_ctl op {op}"))),
    }
    .map_err(io)
}

/// The file a kernel `poll(2)` or `epoll_wait(2)` can wait on for the epoll set `epfd`:
/// its eventfd ([`Epoll`]'s `AsFd`), readable while sockets are queued for a look. An
/// empty set is made on its descriptor's stack first. The number stays valid while `epfd`
/// is open. The hook the LD_PRELOAD library (crates/preload) puts in a program's kernel
/// epoll set beside its files, so that one wait covers both.
pub fn epoll_wake_fd(epfd: i32) -> Result<i32> {
    let e = epoll_set(epfd)?;
    let Obj::Epoll(set) = &e.obj else {
        unreachable!("epoll_set checked the kind")
    };
    let mut on = lock(&set.on);
    if on.is_none() {
        let ep = Arc::new(Epoll::new(&e.stack.net).map_err(io)?);
        *on = Some((e.stack.clone(), ep));
    }
    let Some((_, ep)) = &*on else {
        unreachable!("made above")
    };
    Ok(std::os::fd::AsFd::as_fd(&**ep).as_raw_fd())
}

/// `epoll_wait(2)`: up to `max` events as `(events, data)`, waiting up to `timeout_ms`
/// (-1: no limit).
pub fn epoll_wait(epfd: i32, max: i32, timeout_ms: i32) -> Result<Vec<(u32, u64)>> {
    let e = epoll_set(epfd)?;
    let Obj::Epoll(set) = &e.obj else {
        unreachable!("epoll_set checked the kind")
    };
    let max = usize::try_from(max)
        .ok()
        .filter(|&m| m > 0)
        .ok_or_else(|| Error::new(libc::EINVAL, "maxevents must be positive"))?;
    let ep = lock(&set.on).as_ref().map(|(_, ep)| ep.clone());
    let Some(ep) = ep else {
        // An empty set: nothing can become ready; wait out the timeout.
        match timeout(timeout_ms) {
            Some(t) => std::thread::sleep(t),
            None => loop {
                std::thread::park();
            },
        }
        return Ok(Vec::new());
    };
    let mut events: Vec<EpollEvent> = Vec::with_capacity(max.min(1024));
    ep.wait(&mut events, max, timeout(timeout_ms)).map_err(io)?;
    Ok(events
        .iter()
        .map(|ev| (ev.readiness.to_epoll(), ev.token))
        .collect())
}

/// One `struct pollfd`: the descriptor, the events asked for, the events returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollFd {
    /// `fd` (negative: ignored).
    pub fd: i32,
    /// `events`.
    pub events: i16,
    /// `revents`.
    pub revents: i16,
}

/// `poll(2)` over ustack descriptors of one stack (`EINVAL` if they span stacks):
/// `POLLIN`, `POLLOUT`, `POLLRDHUP`; `POLLERR`, `POLLHUP` always; `POLLNVAL` for a
/// descriptor not ours. How many have events.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> Result<usize> {
    let mut stack: Option<Arc<Stack>> = None;
    let mut socks: Vec<Option<(S, Option<Fd>)>> = Vec::with_capacity(fds.len());
    for p in fds.iter() {
        if p.fd < 0 {
            socks.push(None);
            continue;
        }
        match S::get(p.fd) {
            Ok(s) => {
                if stack.as_ref().is_some_and(|st| st.id != s.e.stack.id) {
                    return Err(Error::new(libc::EINVAL, "poll over sockets of two stacks"));
                }
                stack = Some(s.e.stack.clone());
                let n = net_fd(&s);
                socks.push(Some((s, n)));
            }
            Err(_) => socks.push(None),
        }
    }
    let revents = |fds: &mut [PollFd], socks: &[Option<(S, Option<Fd>)>]| -> usize {
        let mut ready = 0;
        for (p, s) in fds.iter_mut().zip(socks) {
            let bits = match s {
                None if p.fd < 0 => 0,
                None => libc::POLLNVAL as u32,
                Some((s, None)) => match s.sock().proto {
                    Proto::Tcp => FRESH,
                    Proto::Udp => libc::EPOLLOUT as u32,
                },
                Some((s, Some(n))) => s.net().readiness(*n).map_or(ALWAYS, Readiness::to_epoll),
            };
            let want = u32::from(p.events as u16) | ALWAYS | libc::POLLNVAL as u32;
            let got = bits & want;
            p.revents = i16::try_from(got & 0xffff).unwrap_or(0);
            if got != 0 {
                ready += 1;
            }
        }
        ready
    };
    let n = revents(fds, &socks);
    if n > 0 || timeout_ms == 0 {
        return Ok(n);
    }
    let Some(stack) = stack else {
        if let Some(t) = timeout(timeout_ms) {
            std::thread::sleep(t);
        }
        return Ok(0);
    };
    // Wait on a set of our own over the descriptors that have a ustack socket.
    let ep = Epoll::new(&stack.net).map_err(io)?;
    for (p, s) in fds.iter().zip(&socks) {
        if let Some((_, Some(n))) = s {
            let interest = Readiness::from_epoll(u32::from(p.events as u16));
            ep.add(*n, 0, interest, Mode::Level, false).map_err(io)?;
        }
    }
    let deadline = timeout(timeout_ms).and_then(|t| std::time::Instant::now().checked_add(t));
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let mut evs = Vec::new();
        ep.wait(&mut evs, 1, left).map_err(io)?;
        let n = revents(fds, &socks);
        if n > 0 || left.is_some_and(|l| l.is_zero()) {
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_reserved_kernel_numbers_and_calls_check_them() {
        let fd = reserve().unwrap();
        // A number the kernel handed out, above stdio.
        assert!(fd.as_raw_fd() > 2);
        assert_eq!(close(fd.as_raw_fd()).map_err(|e| e.errno), Err(libc::EBADF));
        assert_eq!(sock_name(-1).map_err(|e| e.errno), Err(libc::EBADF));
        assert!(!is_ours(fd.as_raw_fd()));
    }

    #[test]
    fn ports_held_by_bind_conflict_unless_both_reuse() {
        let (st, peer) = open("link=sim addr=10.9.0.1/24 peer=10.9.0.2/24 seed=1").unwrap();
        assert_eq!(st.hold(80, false), Ok(80));
        assert_eq!(
            st.hold(80, false).map_err(|e| e.errno),
            Err(libc::EADDRINUSE)
        );
        assert_eq!(st.hold(80, true), Ok(80));
        st.release(80);
        st.release(80);
        assert_eq!(st.hold(80, false), Ok(80));
        let p = st.hold(0, false).unwrap();
        assert!(p >= EPHEMERAL);
        assert_ne!(st.hold(0, false).unwrap(), p);
        close_stacks(&[&st, &peer.unwrap()]);
    }

    #[test]
    fn a_closed_listeners_port_is_free_at_once() {
        let (st, peer) = open("link=sim addr=10.8.0.1/24 peer=10.8.0.2/24 seed=1").unwrap();
        let a = SocketAddr::from((Ipv4Addr::new(10, 8, 0, 1), 8080));
        for _ in 0..3 {
            let s = socket(Some(&st), libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
            bind(s, a).unwrap();
            listen(s, 4).unwrap();
            close(s).unwrap();
        }
        close_stacks(&[&st, &peer.unwrap()]);
    }
}
