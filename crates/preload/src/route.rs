//! Which calls go to ustack, and the calls that mix ustack sockets and kernel files
//! (`poll`, `select`, a kernel epoll set holding ustack sockets), in safe Rust. The
//! [`sys`](crate::sys) module hands in the kernel's calls as closures.
//!
//! - A descriptor is ustack's if the C API's table holds it ([`ustack::sock::is_ours`]):
//!   its numbers are reserved kernel descriptors, so they never collide with the
//!   program's files. Before the stack starts (the first `AF_INET` socket), every call
//!   goes to the kernel without a look at the table.
//! - `socket(AF_INET, SOCK_STREAM | SOCK_DGRAM, 0 | TCP | UDP)` goes to ustack, and so
//!   does `AF_INET6` when `USTACK_ADDR6` gives ustack an IPv6 address ([`ipv6_configured`]);
//!   every other family, type or protocol (Unix, IPv6 without `USTACK_ADDR6`, netlink,
//!   raw, ICMP) to the kernel.
//! - The stack starts lazily, on the first such `socket`, from the environment
//!   ([`crate::config`]), on the calling thread with a thread-local flag set: a socket the
//!   start itself makes (the TUN's set-up) goes to the kernel.
//! - At `exit` the process waits, at most [`EXIT_LINGER`], until every TCP connection has
//!   its data and FIN acknowledged ([`at_exit`]): the kernel keeps a closed socket's data
//!   going after the program is gone, ustack's stack dies with the process.
//! - After `fork`, the child has no ustack loop threads: it starts a stack of its own on a
//!   TUN queue of its own when it first needs one, and re-makes the listening sockets it
//!   inherited there; connections stay the parent's (`EBADFD` in the child): crates/capi
//!   `sock::fork`, docs/preload.md.

use core::time::Duration;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use ustack::error::Error;
use ustack::sock::{self, PollFd, Stack};
use ustack_obs::pcap::LinkType;
use ustack_runtime::control::ControlServer;

use crate::config;

/// Where a descriptor's calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    /// The kernel (libc's own call).
    Kernel,
    /// ustack (the C API).
    Ustack,
    /// A ustack descriptor no stack serves. Not produced since a `fork` child's inherited
    /// descriptors are the C API's to re-make or refuse (`ustack::sock::fork`); the FFI
    /// still handles it (`EBADFD`, `close` releasing the number).
    Orphan,
}

/// Where a new socket goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The kernel.
    Kernel,
    /// ustack.
    Ustack,
    /// Neither: fail with this errno (the stack could not start, and no fallback).
    Fail(i32),
}

const UNINIT: u8 = 0;
const USTACK: u8 = 1;
const KERNEL: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static FORKED: AtomicBool = AtomicBool::new(false);

/// How the start went: the stack, the kernel (fallback), or an errno.
#[derive(Debug)]
enum Outcome {
    Ustack(#[allow(dead_code)] Arc<Stack>),
    Kernel,
    Failed(i32),
}

static STARTED: OnceLock<Outcome> = OnceLock::new();

thread_local! {
    /// Set while this thread starts the stack: its own sockets go to the kernel.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn inside() -> bool {
    INSIDE.try_with(Cell::get).unwrap_or(true)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A line on stderr, once per `key` (errors that every call would repeat).
pub fn warn_once(key: &'static str, msg: &str) {
    static SAID: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut said = lock(&SAID);
    if !said.contains(&key) {
        said.push(key);
        drop(said);
        eprintln!("ustack preload: {msg}");
    }
}

/// The hook before `fork` (`pthread_atfork`): the C API's table held still.
pub extern "C" fn fork_prepare() {
    sock::fork::prepare();
}

/// The parent's hook after `fork`: the table released; a parent with listeners only
/// stops taking new flows ([`sock::fork::parent`]).
pub extern "C" fn fork_parent() {
    sock::fork::parent();
}

/// The `fork` child's hook: ustack's loop threads did not come along; the parent's
/// sockets are set aside ([`sock::fork::child`]).
pub extern "C" fn forked() {
    FORKED.store(true, Ordering::Relaxed);
    sock::fork::child();
}

/// Whether this process is a `fork` child of one that started ustack.
pub fn is_forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// How long [`at_exit`] waits for the connections' data to be acknowledged.
pub const EXIT_LINGER: Duration = Duration::from_secs(10);

/// The process's `atexit` hook. A program that writes its last bytes, closes and exits
/// (socat, a CGI-style server) expects them delivered: Linux's sockets outlive the
/// process (an orphan, `tcp_close`), ustack's loop threads do not. So the exit waits
/// until no TCP connection has bytes unacknowledged (`ESTAB`, `CLOSE-WAIT`) or a FIN
/// unanswered (`FIN-WAIT-1`, `CLOSING`, `LAST-ACK`), at most [`EXIT_LINGER`] (a peer
/// that stopped reading cannot hold the exit longer). Nothing to do in a `fork` child.
pub extern "C" fn at_exit() {
    let Some(Outcome::Ustack(started)) = STARTED.get() else {
        return;
    };
    // A forked child's own stack, if it started one (the parent's is not its to wait on).
    let stack = if is_forked() {
        match sock::fork::current() {
            Some(s) => s,
            None => return,
        }
    } else {
        started.clone()
    };
    let deadline = Instant::now() + EXIT_LINGER;
    loop {
        let busy = stack.net().connections_sending().unwrap_or(0);
        if busy == 0 {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "ustack preload: exiting with {busy} connection(s) still sending after {}s",
                EXIT_LINGER.as_secs()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Where `fd`'s calls go.
pub fn classify(fd: i32) -> Where {
    if STATE.load(Ordering::Acquire) != USTACK || fd < 0 || !sock::is_ours(fd) {
        return Where::Kernel;
    }
    Where::Ustack
}

/// The errno of a call on an orphan (see the module docs), with a line on stderr once.
pub fn orphan(fd: i32) -> i32 {
    warn_once(
        "orphan",
        &format!(
            "descriptor {fd} is a ustack socket of the parent process: after fork the child \
             has no ustack stack (docs/preload.md, fork)"
        ),
    );
    libc::EBADFD
}

/// Start the stack from the environment (once).
fn start(atfork: fn()) -> Outcome {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("USTACK_"))
        .collect();
    let fallback = match config::fallback(&vars) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ustack preload: {e}");
            return Outcome::Failed(libc::EINVAL);
        }
    };
    let give_up = |errno: i32, msg: String| {
        if fallback {
            eprintln!(
                "ustack preload: {msg}; USTACK_FALLBACK=kernel: AF_INET sockets go to the kernel"
            );
            Outcome::Kernel
        } else {
            eprintln!(
                "ustack preload: {msg}; AF_INET sockets fail ({}) (USTACK_FALLBACK=kernel runs them on the kernel)",
                std::io::Error::from_raw_os_error(errno)
            );
            Outcome::Failed(errno)
        }
    };
    let env = match config::parse(&vars) {
        Ok(e) => e,
        Err(msg) => return give_up(libc::EINVAL, msg),
    };
    // The control socket first: a path that cannot be bound is a configuration error.
    let control = match env.control.as_deref().map(ControlServer::bind).transpose() {
        Ok(c) => c,
        Err(e) => return give_up(libc::EINVAL, format!("USTACK_CONTROL: {e:#}")),
    };
    match sock::open(&env.capi) {
        Ok((stack, _)) => {
            atfork();
            if let Some(c) = control {
                let link = if env.capi.starts_with("link=tun") {
                    LinkType::Raw
                } else {
                    LinkType::Ethernet
                };
                serve_control(c, &stack, link);
            }
            Outcome::Ustack(stack)
        }
        Err(e) => give_up(
            e.errno,
            format!("starting ustack ({}): {}", env.capi, e.msg),
        ),
    }
}

/// Answer `ustack stat`, `ss`, `sysctl` and `capture` (the frames of the link's queues,
/// of type `link`) on `control` for `stack`, on a thread of its own, for the life of the
/// process.
fn serve_control(control: ControlServer, stack: &Arc<Stack>, link: LinkType) {
    static NEVER: AtomicBool = AtomicBool::new(false);
    let stack = stack.clone();
    let path = control.path().display().to_string();
    let spawned = std::thread::Builder::new()
        .name("ustack-control".into())
        .spawn(move || {
            control.serve_until(stack.net(), stack.tap(), link, None, &NEVER);
        });
    match spawned {
        Ok(_) => eprintln!("ustack preload: control socket {path}"),
        Err(e) => eprintln!("ustack preload: control socket {path}: no thread for it: {e}"),
    }
}

/// Whether `USTACK_ADDR6` is set (read once): `AF_INET6` sockets go to ustack only then.
/// Without it ustack has no IPv6 address, and a program's IPv6 sockets stay the kernel's
/// (a server on `[::]` then gets no IPv4 either: it is the kernel's socket).
fn ipv6_configured() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("USTACK_ADDR6").is_some_and(|v| !v.is_empty()))
}

/// Where `socket(domain, ty, protocol)` goes, starting the stack if this is the first
/// ustack socket. `atfork` registers [`forked`] and [`at_exit`] (the FFI's job).
pub fn socket(domain: i32, ty: i32, protocol: i32, atfork: fn()) -> Route {
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let inet = domain == libc::AF_INET || (domain == libc::AF_INET6 && ipv6_configured());
    let ours = inet
        && matches!(
            (base, protocol),
            (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) | (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP)
        );
    if !ours || inside() {
        return Route::Kernel;
    }
    let outcome = STARTED.get_or_init(|| {
        let _ = INSIDE.try_with(|i| i.set(true));
        let o = start(atfork);
        let _ = INSIDE.try_with(|i| i.set(false));
        STATE.store(
            match o {
                Outcome::Ustack(_) => USTACK,
                Outcome::Kernel => KERNEL,
                Outcome::Failed(_) => FAILED,
            },
            Ordering::Release,
        );
        o
    });
    match outcome {
        Outcome::Ustack(_) => Route::Ustack,
        Outcome::Kernel => Route::Kernel,
        Outcome::Failed(e) => Route::Fail(*e),
    }
}

// ---- sendfile -----------------------------------------------------------------------------------

/// The kernel's `pread(2)` of the file, as the FFI hands it in: `Err(errno)` on failure.
pub type KernelPread<'a> = &'a mut dyn FnMut(&mut [u8], i64) -> Result<usize, i32>;

/// `sendfile(2)` onto ustack socket `out`: up to `count` bytes of a kernel file from
/// offset `at`, read by `pread(buf, offset)` (`Ok(0)` at the end of the file) and written
/// to the socket, 64 KiB at a time (Linux sends from the page cache; this copies). A
/// blocking socket takes every byte read, a non-blocking one what fits (then the count so
/// far, or `EAGAIN`). The bytes sent; the caller moves the file offset by as many.
pub fn sendfile(out: i32, at: i64, count: usize, pread: KernelPread<'_>) -> Result<usize, i32> {
    let mut buf = vec![0u8; count.min(64 * 1024)];
    let mut done = 0usize;
    while done < count {
        let want = (count - done).min(buf.len());
        let off = at.saturating_add(i64::try_from(done).unwrap_or(i64::MAX));
        let n = match pread(&mut buf[..want], off) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if done == 0 => return Err(e),
            Err(_) => break,
        };
        let w = match sock::send_to(out, &buf[..n], 0, None) {
            Ok(w) => w,
            Err(e) if done == 0 => return Err(e.errno),
            Err(_) => break,
        };
        done += w;
        if w < n {
            break;
        }
    }
    Ok(done)
}

// ---- poll and select over ustack sockets and kernel files ----------------------------------

/// A deadline from a timeout in milliseconds (negative: none).
fn deadline(ms: i32) -> Option<Instant> {
    u64::try_from(ms)
        .ok()
        .and_then(|m| Instant::now().checked_add(Duration::from_millis(m)))
}

/// Milliseconds left until `d` (rounded up; -1: no deadline).
fn left_ms(d: Option<Instant>) -> i32 {
    match d {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            let ms = left.as_micros().div_ceil(1000);
            i32::try_from(ms).unwrap_or(i32::MAX)
        }
    }
}

/// A throw-away ustack epoll set over some sockets, for one blocking `poll`: its eventfd
/// joins the kernel's `poll` (the set is closed on drop).
struct TempSet(i32);

impl Drop for TempSet {
    fn drop(&mut self) {
        let _ = sock::close(self.0);
    }
}

/// The kernel's `poll(2)`, as the FFI hands it in: `Err(errno)` on failure. With `true`
/// it is `ppoll(2)` with the caller's signal mask, if the call has one (`ppoll`,
/// `pselect`).
pub type KernelPoll<'a> = &'a mut dyn FnMut(&mut [libc::pollfd], i32, bool) -> Result<usize, i32>;

/// What is left of a `limit` after `spent` (zero once it ran out): what Linux's
/// `select` writes back into its timeout (`poll_select_finish`).
pub fn time_left(limit: Duration, spent: Duration) -> Duration {
    limit.saturating_sub(spent)
}

/// `poll(2)` over `fds`, which may mix ustack sockets and kernel files (`None`: none of
/// them is ustack's; the caller makes the kernel's call). Nothing spins: a blocking wait
/// sleeps in one kernel `poll` on the kernel files and a ustack epoll set's eventfd.
///
/// The signal mask (`ppoll`, `pselect`): every kernel look made while no ustack socket
/// is ready, the sleep included, is `kernel(.., true)` (the kernel's `ppoll` with the
/// mask, atomic), even with no kernel file in the set; a look made with ustack sockets
/// ready is not (so a pending signal does not hide them, as Linux returns the ready count
/// before it looks at signals).
pub fn poll(
    fds: &mut [libc::pollfd],
    timeout: i32,
    kernel: KernelPoll<'_>,
) -> Option<Result<usize, i32>> {
    if STATE.load(Ordering::Acquire) != USTACK {
        return None;
    }
    let kinds: Vec<Where> = fds.iter().map(|p| classify(p.fd)).collect();
    if !kinds.iter().any(|k| *k != Where::Kernel) {
        return None;
    }
    Some(poll_mixed(fds, &kinds, timeout, kernel))
}

fn poll_mixed(
    fds: &mut [libc::pollfd],
    kinds: &[Where],
    timeout: i32,
    kernel: KernelPoll<'_>,
) -> Result<usize, i32> {
    let until = deadline(timeout);
    let mut ours: Vec<(usize, PollFd)> = Vec::new();
    let mut theirs: Vec<(usize, libc::pollfd)> = Vec::new();
    for (i, (p, k)) in fds.iter_mut().zip(kinds).enumerate() {
        p.revents = 0;
        match k {
            Where::Ustack => ours.push((
                i,
                PollFd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                },
            )),
            Where::Kernel => theirs.push((i, *p)),
            Where::Orphan => p.revents = libc::POLLNVAL,
        }
    }
    let orphans = kinds.iter().filter(|k| **k == Where::Orphan).count();
    // The kernel's files, and a slot at the end for the ustack set's eventfd.
    let mut kfds: Vec<libc::pollfd> = theirs.iter().map(|(_, p)| *p).collect();
    let mut set: Option<TempSet> = None;
    loop {
        // Drain the set's eventfd first: a wake-up after this look makes it readable again.
        if let Some(s) = &set {
            let _ = sock::epoll_wait(s.0, 64, 0);
        }
        let mut u: Vec<PollFd> = ours.iter().map(|(_, p)| *p).collect();
        let ready_u = sock::poll(&mut u, 0).map_err(|e| e.errno)?;
        let nk = theirs.len();
        let ready_k = if nk > 0 || ready_u == 0 {
            kernel(&mut kfds[..nk], 0, ready_u == 0)?
        } else {
            0
        };
        let left = left_ms(until);
        if ready_u + ready_k + orphans > 0 || left == 0 {
            for ((i, _), p) in ours.iter().zip(&u) {
                fds[*i].revents = p.revents;
            }
            for ((i, _), p) in theirs.iter().zip(&kfds) {
                fds[*i].revents = p.revents;
            }
            return Ok(ready_u + ready_k + orphans);
        }
        if set.is_none() {
            let s = TempSet(sock::epoll_create(libc::EPOLL_CLOEXEC).map_err(|e| e.errno)?);
            // A set holds a socket once: its descriptors (`dup`) share one registration,
            // for what any of them asks.
            let mut socks: HashMap<u64, (i32, u32)> = HashMap::new();
            for (_, p) in &ours {
                let ev = u32::from(p.events as u16);
                if let Ok(f) = sock::file_id(p.fd) {
                    socks.entry(f).or_insert((p.fd, 0)).1 |= ev;
                }
            }
            for (fd, ev) in socks.into_values() {
                // A socket without a connection or listener yet cannot join a set: it is
                // ready at once (POLLOUT | POLLHUP), so the look above returned already.
                let _ = sock::epoll_ctl(s.0, libc::EPOLL_CTL_ADD, fd, ev, 0);
            }
            let wake = sock::epoll_wake_fd(s.0).map_err(|e| e.errno)?;
            kfds.push(libc::pollfd {
                fd: wake,
                events: libc::POLLIN,
                revents: 0,
            });
            set = Some(s);
            continue;
        }
        kernel(&mut kfds, left, true)?;
    }
}

/// `select(2)`'s sets as `poll(2)`'s array: `(fd, events)` for every descriptor below
/// `nfds` in a set (read: `POLLIN`, write: `POLLOUT`, except: `POLLPRI`).
pub fn select_to_poll(nfds: usize, r: &[bool], w: &[bool], x: &[bool]) -> Vec<libc::pollfd> {
    let mut v = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if r.get(fd).copied().unwrap_or(false) {
            ev |= libc::POLLIN;
        }
        if w.get(fd).copied().unwrap_or(false) {
            ev |= libc::POLLOUT;
        }
        if x.get(fd).copied().unwrap_or(false) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            v.push(libc::pollfd {
                fd: i32::try_from(fd).unwrap_or(i32::MAX),
                events: ev,
                revents: 0,
            });
        }
    }
    v
}

/// Whether a `poll` result counts as ready for `select`'s read, write and except sets
/// (Linux `select` treats an error or hang-up as readable and writable).
pub fn poll_to_select(p: &libc::pollfd) -> (bool, bool, bool) {
    let err = p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
    (
        p.events & libc::POLLIN != 0 && (p.revents & libc::POLLIN != 0 || err),
        p.events & libc::POLLOUT != 0
            && (p.revents & libc::POLLOUT != 0 || p.revents & libc::POLLERR != 0),
        p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0,
    )
}

// ---- kernel epoll sets holding ustack sockets ---------------------------------------------

/// The token under which a shadow set's eventfd sits in the program's kernel epoll set:
/// a kernel-half address, which no user pointer or descriptor number is.
pub const WAKE_TOKEN: u64 = 0xffff_ffff_7573_7461;

/// The ustack side of a program's kernel epoll set.
#[derive(Debug, Default)]
struct Shadow {
    /// ustack epoll sets (C API epoll descriptors), each with its eventfd in the kernel
    /// set under [`WAKE_TOKEN`]. A ustack set holds a socket once, where Linux keys a
    /// registration on the file *and* the descriptor number: a second descriptor of a
    /// socket (`dup`) goes into the next set ("layer") that does not hold it yet. Shared
    /// with the waits (an `Arc`: a wait takes it without an allocation).
    sets: Arc<[i32]>,
    /// Program descriptor -> (its socket's [`sock::file_id`], the layer it is in).
    regs: HashMap<i32, (u64, usize)>,
}

/// Program's kernel epoll set -> its [`Shadow`].
static SHADOWS: Mutex<Option<HashMap<i32, Shadow>>> = Mutex::new(None);
static ANY_SHADOW: AtomicBool = AtomicBool::new(false);

/// The ustack sets of kernel epoll set `epfd`, if it holds ustack sockets.
fn shadow(epfd: i32) -> Option<Arc<[i32]>> {
    if !ANY_SHADOW.load(Ordering::Acquire) {
        return None;
    }
    lock(&SHADOWS)
        .as_ref()
        .and_then(|m| m.get(&epfd).map(|s| s.sets.clone()))
}

/// The kernel descriptor `fd` is closed or replaced: drop the shadow sets of the epoll
/// set it was, if any.
pub fn forget(fd: i32) {
    if !ANY_SHADOW.load(Ordering::Acquire) {
        return;
    }
    let s = lock(&SHADOWS).as_mut().and_then(|m| m.remove(&fd));
    for set in s.iter().flat_map(|s| s.sets.iter()) {
        let _ = sock::close(*set);
    }
}

/// The kernel's `epoll_ctl(2)` as the FFI hands it in: `(epfd, op, fd, events, data)`.
pub type KernelCtl<'a> = &'a mut dyn FnMut(i32, i32, i32, u32, u64) -> Result<(), i32>;

/// A new ustack set whose eventfd is in kernel set `epfd` under [`WAKE_TOKEN`].
fn new_layer(epfd: i32, kernel: KernelCtl<'_>) -> Result<i32, Error> {
    let s = sock::epoll_create(libc::EPOLL_CLOEXEC)?;
    let added = sock::epoll_wake_fd(s).and_then(|w| {
        kernel(
            epfd,
            libc::EPOLL_CTL_ADD,
            w,
            libc::EPOLLIN as u32,
            WAKE_TOKEN,
        )
        .map_err(|e| Error::new(e, format!("{epfd}: not a kernel epoll set")))
    });
    match added {
        Ok(()) => Ok(s),
        Err(e) => {
            let _ = sock::close(s);
            Err(e)
        }
    }
}

/// `epoll_ctl(2)` of ustack socket `fd` in the program's kernel set `epfd`: it goes into
/// a ustack set shadowing `epfd` (made on the first `EPOLL_CTL_ADD`, its eventfd put in
/// `epfd` under [`WAKE_TOKEN`]). As Linux (`ep_find` keys on file and number): the same
/// descriptor twice is `EEXIST`, a second descriptor of the socket its own registration
/// (in the next layer), `MOD`/`DEL` of a descriptor not added `ENOENT`.
pub fn epoll_ctl(
    epfd: i32,
    op: i32,
    fd: i32,
    events: u32,
    data: u64,
    kernel: KernelCtl<'_>,
) -> Result<(), Error> {
    let file = sock::file_id(fd)?;
    let mut g = lock(&SHADOWS);
    let map = g.get_or_insert_with(HashMap::new);
    let reg = map
        .get(&epfd)
        .and_then(|s| s.regs.get(&fd))
        .filter(|(f, _)| *f == file)
        .map(|&(_, layer)| layer);
    match (op, reg) {
        (libc::EPOLL_CTL_ADD, Some(_)) => Err(Error::new(
            libc::EEXIST,
            format!("{fd} is in the set already"),
        )),
        (libc::EPOLL_CTL_ADD, None) => {
            for layer in 0.. {
                let have = map.get(&epfd).map_or(0, |s| s.sets.len());
                if layer == have {
                    let s = new_layer(epfd, kernel)?;
                    let sh = map.entry(epfd).or_default();
                    sh.sets = sh.sets.iter().copied().chain([s]).collect();
                    ANY_SHADOW.store(true, Ordering::Release);
                }
                let sh = map.entry(epfd).or_default();
                match sock::epoll_ctl(sh.sets[layer], op, fd, events, data) {
                    Ok(()) => {
                        sh.regs.insert(fd, (file, layer));
                        return Ok(());
                    }
                    // Another descriptor of the socket is in this layer.
                    Err(e) if e.errno == libc::EEXIST => continue,
                    Err(e) => return Err(e),
                }
            }
            unreachable!("a new layer takes any socket")
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, Some(layer)) => {
            let sh = map.entry(epfd).or_default();
            sock::epoll_ctl(sh.sets[layer], op, fd, events, data)?;
            if op == libc::EPOLL_CTL_DEL {
                sh.regs.remove(&fd);
            }
            Ok(())
        }
        (libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL, None) => {
            Err(Error::new(libc::ENOENT, format!("{fd} is not in the set")))
        }
        _ => Err(Error::new(libc::EINVAL, format!("epoll_ctl op {op}"))),
    }
}

/// The kernel's `epoll_wait`/`epoll_pwait` on the program's set, as the FFI hands it in.
pub type KernelWait<'a> = &'a mut dyn FnMut(&mut [libc::epoll_event], i32) -> Result<usize, i32>;

/// The kernel's wait into `out[from..]`, the wake-up event taken out: the events left.
/// When the wake-up took a slot of a full answer, a second look (not waiting) fills it.
fn kernel_part(
    out: &mut [libc::epoll_event],
    from: usize,
    timeout: i32,
    kernel: KernelWait<'_>,
) -> Result<usize, i32> {
    let mut at = from;
    let mut t = timeout;
    for _ in 0..2 {
        let room = out.len() - at;
        let k = kernel(&mut out[at..], t)?;
        let mut j = at;
        for i in at..at + k {
            let ev = out[i];
            if ev.u64 != WAKE_TOKEN {
                out[j] = ev;
                j += 1;
            }
        }
        let woke = j < at + k;
        at = j;
        if !(woke && k == room) {
            break;
        }
        t = 0;
    }
    Ok(at - from)
}

/// Turns of a one-slot `epoll_wait`: every other one looks at the kernel's files first.
static TURN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `epoll_wait(2)` on the program's kernel set `epfd` (`None`: it holds no ustack socket;
/// the caller makes the kernel's call). ustack's events come first, in all but one slot,
/// so that ready ustack sockets never starve the kernel's files (a one-slot wait takes
/// turns); the kernel's wait sleeps on both (the shadow set's eventfd is in it), and its
/// wake-up event is never reported.
pub fn epoll_wait(
    epfd: i32,
    out: &mut [libc::epoll_event],
    timeout: i32,
    kernel: KernelWait<'_>,
) -> Option<Result<usize, i32>> {
    let sets = shadow(epfd)?;
    if out.is_empty() {
        return Some(Err(libc::EINVAL));
    }
    let until = deadline(timeout);
    let ucap = out.len().saturating_sub(1).max(1);
    if out.len() == 1 && TURN.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
        match kernel_part(out, 0, 0, kernel) {
            Ok(0) => {}
            r => return Some(r),
        }
    }
    Some(loop {
        let mut n = 0;
        let mut failed = None;
        for &set in sets.iter() {
            let room = i32::try_from(ucap - n).unwrap_or(i32::MAX);
            if room == 0 {
                break;
            }
            match sock::epoll_wait(set, room, 0) {
                Ok(evs) => {
                    for (slot, &(events, data)) in out[n..].iter_mut().zip(&evs) {
                        *slot = libc::epoll_event { events, u64: data };
                    }
                    n += evs.len();
                }
                Err(e) => failed = Some(e.errno),
            }
        }
        if let (Some(e), 0) = (failed, n) {
            break Err(e);
        }
        if n < out.len() {
            let t = if n > 0 { 0 } else { left_ms(until) };
            match kernel_part(out, n, t, kernel) {
                Ok(k) => n += k,
                Err(e) if n == 0 => break Err(e),
                Err(_) => {}
            }
        }
        if n > 0 || left_ms(until) == 0 {
            break Ok(n);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_sets_round_trip_through_poll() {
        let r = [false, true, false, true];
        let w = [false, false, true, true];
        let v = select_to_poll(4, &r, &w, &[]);
        assert_eq!(
            v.iter().map(|p| (p.fd, p.events)).collect::<Vec<_>>(),
            vec![
                (1, libc::POLLIN),
                (2, libc::POLLOUT),
                (3, libc::POLLIN | libc::POLLOUT)
            ]
        );
        let mut p = v[2];
        p.revents = libc::POLLHUP;
        assert_eq!(poll_to_select(&p), (true, false, false));
        p.revents = libc::POLLOUT;
        assert_eq!(poll_to_select(&p), (false, true, false));
    }

    #[test]
    fn timeouts_round_up_and_none_is_forever() {
        assert_eq!(left_ms(None), -1);
        assert_eq!(left_ms(deadline(-1)), -1);
        let d = deadline(50);
        let l = left_ms(d);
        assert!((1..=50).contains(&l), "{l}");
        assert_eq!(left_ms(deadline(0)), 0);
    }

    #[test]
    fn sockets_other_than_inet_stream_and_datagram_go_to_the_kernel() {
        for (d, t, p) in [
            (libc::AF_UNIX, libc::SOCK_STREAM, 0),
            (libc::AF_INET6, libc::SOCK_STREAM, 0),
            (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
            (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
            (libc::AF_NETLINK, libc::SOCK_DGRAM, 0),
        ] {
            assert_eq!(socket(d, t, p, || {}), Route::Kernel);
        }
        assert_eq!(STATE.load(Ordering::Relaxed), UNINIT);
    }
}
