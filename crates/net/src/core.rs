//! The thread-safe core: [`Net`], its loop threads, the handle table, and the readiness
//! every blocking call, [`Epoll`](crate::Epoll) set and waker waits on. See the
//! [crate docs](crate) for the design and its cost.

use core::net::SocketAddr;
use core::task::Waker;
use core::time::Duration;
use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;

use rustix::event::{EventfdFlags, PollFd, PollFlags, eventfd};
use ustack_runtime::api;
use ustack_runtime::rss::Rss;
use ustack_runtime::runtime::{Events, Interest, MonotonicClock, Runtime, RuntimeStats, Source};
use ustack_runtime::sched::{DelaySampler, SpinPolicy};
use ustack_runtime::{Mode, RssKey};
use ustack_stack::tcp::State;
use ustack_stack::{Readiness, SocketKey, TcpInfo};

use crate::epoll::EpollShared;
use crate::link::DynLink;

/// The runtime each loop thread runs: a ustack [`Runtime`] on a boxed [`Link`](crate::Link).
pub type LoopRuntime = Runtime<DynLink, MonotonicClock>;

/// `EAGAIN`: what a socket with a read or write timeout returns when it expires, as
/// Linux's `SO_RCVTIMEO`/`SO_SNDTIMEO` do (so std's blocking sockets on Linux give
/// [`io::ErrorKind::WouldBlock`] for a timeout).
const EAGAIN: i32 = 11;
const EBADF: i32 = 9;
const ENOTSOCK: i32 = 88;
const EINVAL: i32 = 22;
/// `EAFNOSUPPORT`: an address of a family the socket is not of.
const EAFNOSUPPORT: i32 = 97;

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// The loop thread is gone (stopped, or its device failed): no more calls on this `Net`.
fn loop_gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "ustack-net: the stack's loop has stopped",
    )
}

/// Reported whatever the interest, as epoll does.
pub(crate) const ALWAYS: Readiness = Readiness::ERROR.union(Readiness::HUP);

// ---- handles ----------------------------------------------------------------------------

/// A socket handle: a small integer, the index of the socket in its [`Net`]'s table (the
/// C API maps it to a file descriptor). Freed numbers are reused, lowest first, as file
/// descriptors are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fd(u32);

impl Fd {
    /// The number.
    pub fn raw(self) -> u32 {
        self.0
    }

    /// A handle from its number (a call on a number not in the table fails with `EBADF`).
    pub fn from_raw(n: u32) -> Fd {
        Fd(n)
    }
}

/// How long a call may park its caller when the socket is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Never: `WouldBlock` at once (`O_NONBLOCK`).
    Never,
    /// Until the socket is ready, however long.
    Forever,
    /// Until the socket is ready or this instant passes (then `WouldBlock`, as an expired
    /// `SO_RCVTIMEO`).
    Until(std::time::Instant),
}

impl Wait {
    /// A blocking call with an optional timeout from now (`None`: no limit).
    pub fn timeout(t: Option<Duration>) -> Wait {
        match t {
            None => Wait::Forever,
            Some(t) => std::time::Instant::now()
                .checked_add(t)
                .map_or(Wait::Forever, Wait::Until),
        }
    }
}

/// What kind of socket a handle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A TCP listener.
    Listener,
    /// A TCP connection.
    Stream,
    /// A UDP socket.
    Udp,
}

// ---- readiness, shared between the loop and the callers -----------------------------------

/// Who else hears a socket's readiness change.
pub(crate) enum Watcher {
    /// An [`Epoll`](crate::Epoll) set holding the socket under `fd`.
    Set { set: Weak<EpollShared>, fd: Fd },
    /// A task's waker, woken once when the socket becomes ready for `interest` (or has
    /// an error or hang-up).
    Waker { interest: Readiness, waker: Waker },
}

/// The state of one socket that the callers' threads see: its readiness as the loop last
/// saw it (per shard part), a generation counter the loop bumps at every wake-up, the
/// watchers, and the settings std keeps on the file (non-blocking, timeouts, nodelay).
pub(crate) struct SockShared {
    pub(crate) id: u64,
    /// Bumped by the loop at every wake-up of the socket (an event of ustack's poller).
    generation: AtomicU64,
    /// Callers parked in [`SockShared::wait_change`].
    waiters: AtomicU32,
    lock: Mutex<()>,
    cv: Condvar,
    /// Readiness bits (epoll values) of each part (a listener has one per shard).
    ready: Box<[AtomicU32]>,
    watchers: Mutex<Vec<Watcher>>,
    pub(crate) closed: AtomicBool,
    pub(crate) nonblocking: AtomicBool,
    /// Nanoseconds, 0: none.
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
    pub(crate) nodelay: AtomicBool,
    /// A stream's receive buffer on the callers' side (see [`RxBuf`]).
    rx: Mutex<RxBuf>,
    /// Bytes a caller may hand the loop to send without waiting for its answer: the room
    /// in the stack's send buffer as the loop last saw it, less what callers took since.
    tx_credit: AtomicUsize,
    /// The error a write handed over without waiting met (errno; 0: none), reported by
    /// the next write, as a kernel socket reports an asynchronous error.
    tx_err: AtomicU32,
}

/// The bytes the loop moved out of a stream's receive queue for the callers to read
/// without handing the loop a job: up to [`RX_CAP`] bytes, then the end of the stream or
/// the connection's error, in the order the stack gave them.
#[derive(Debug, Default)]
struct RxBuf {
    data: std::collections::VecDeque<u8>,
    eof: bool,
    err: Option<i32>,
    /// The handshake is over (done or failed): from then on the loop moves the bytes and
    /// the errors here (a failed connect's error too, which [`Net::connect_done`] then
    /// reports from here).
    established: bool,
}

impl RxBuf {
    /// Something for a reader: bytes, the end, or an error.
    fn readable(&self) -> bool {
        !self.data.is_empty() || self.eof || self.err.is_some()
    }

    /// What a reader finding no bytes gets: the pending error (taken; `ready`, the
    /// socket's published readiness, loses READABLE and ERROR unless something else is
    /// there for a reader), or `Ok(0)` at the end of the stream; `None` if neither.
    fn error_or_end(&mut self, ready: &AtomicU32) -> Option<io::Result<usize>> {
        if let Some(e) = self.err.take() {
            if !self.readable() {
                let bits = (Readiness::READABLE | Readiness::ERROR).to_epoll();
                ready.fetch_and(!bits, Ordering::AcqRel);
            }
            return Some(Err(errno(e)));
        }
        self.eof.then_some(Ok(0))
    }
}

/// The most bytes a stream's caller-side receive buffer holds (the rest waits in the
/// stack's receive queue, whose window closes as it fills).
pub const RX_CAP: usize = 64 * 1024;

impl core::fmt::Debug for SockShared {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SockShared")
            .field("id", &self.id)
            .field("readiness", &self.readiness())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SockShared {
    fn new(id: u64, parts: usize) -> SockShared {
        SockShared {
            id,
            generation: AtomicU64::new(0),
            waiters: AtomicU32::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            ready: (0..parts).map(|_| AtomicU32::new(0)).collect(),
            watchers: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            nonblocking: AtomicBool::new(false),
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
            nodelay: AtomicBool::new(false),
            rx: Mutex::new(RxBuf::default()),
            tx_credit: AtomicUsize::new(0),
            tx_err: AtomicU32::new(0),
        }
    }

    /// What the socket is ready for, as the loop last saw it (all parts together).
    pub(crate) fn readiness(&self) -> Readiness {
        let bits = self
            .ready
            .iter()
            .fold(0, |acc, r| acc | r.load(Ordering::Acquire));
        Readiness::from_epoll(bits)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The loop's view of part `part` now; with `wake`, a wake-up: bump the generation,
    /// unpark the callers waiting for it, tell the watchers.
    fn publish(&self, part: usize, r: Readiness, wake: bool) {
        self.ready[part].store(r.to_epoll(), Ordering::Release);
        if wake {
            self.wake();
        }
    }

    /// A wake-up: bump the generation, unpark the callers waiting for it, tell the
    /// watchers.
    fn wake(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.lock);
            self.cv.notify_all();
        }
        let all = self.readiness();
        let mut watchers = lock(&self.watchers);
        if watchers.is_empty() {
            return;
        }
        watchers.retain_mut(|w| match w {
            Watcher::Set { set, fd } => match set.upgrade() {
                Some(set) => set.wake(*fd, self.id, all),
                None => false,
            },
            Watcher::Waker { interest, waker } => {
                if all.intersects(*interest | ALWAYS) {
                    waker.wake_by_ref();
                    false
                } else {
                    true
                }
            }
        });
    }

    /// Park until the generation moves past `seen` or `wait` runs out; false on timeout.
    fn wait_change(&self, seen: u64, wait: Wait) -> bool {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.lock);
        let changed = loop {
            if self.generation() != seen {
                break true;
            }
            match wait {
                Wait::Never => break false,
                Wait::Forever => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Wait::Until(t) => {
                    let now = std::time::Instant::now();
                    if now >= t {
                        break false;
                    }
                    g = self
                        .cv
                        .wait_timeout(g, t - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        };
        drop(g);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        changed
    }

    pub(crate) fn add_watcher(&self, w: Watcher) {
        lock(&self.watchers).push(w);
    }

    fn timeout(slot: &AtomicU64) -> Option<Duration> {
        match slot.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    fn set_timeout(slot: &AtomicU64, t: Option<Duration>) -> io::Result<()> {
        let n = match t {
            None => 0,
            Some(d) if d.is_zero() => {
                // std: "cannot set a 0 duration timeout".
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ));
            }
            Some(d) => u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1),
        };
        slot.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// How a read waits on this socket: never if non-blocking, else up to its read timeout.
    fn read_wait(&self) -> Wait {
        if self.nonblocking.load(Ordering::Relaxed) {
            Wait::Never
        } else {
            Wait::timeout(SockShared::timeout(&self.read_timeout))
        }
    }

    fn write_wait(&self) -> Wait {
        if self.nonblocking.load(Ordering::Relaxed) {
            Wait::Never
        } else {
            Wait::timeout(SockShared::timeout(&self.write_timeout))
        }
    }
}

// ---- the loop side ----------------------------------------------------------------------

/// One of ustack's sockets, as the loop thread owns it (dropping it closes it through the
/// runtime, which counts it in [`RuntimeStats::closed_on_drop`]).
#[derive(Debug)]
enum ApiSock {
    Listener(api::TcpListener),
    Stream(api::TcpStream),
    Udp(api::UdpSocket),
}

impl ApiSock {
    fn listener(&self) -> Option<&api::TcpListener> {
        if let ApiSock::Listener(s) = self {
            Some(s)
        } else {
            None
        }
    }
    fn stream(&self) -> Option<&api::TcpStream> {
        if let ApiSock::Stream(s) = self {
            Some(s)
        } else {
            None
        }
    }
    fn udp(&self) -> Option<&api::UdpSocket> {
        if let ApiSock::Udp(s) = self {
            Some(s)
        } else {
            None
        }
    }
}

impl Source for ApiSock {
    fn key(&self) -> SocketKey {
        match self {
            ApiSock::Listener(s) => s.key(),
            ApiSock::Stream(s) => s.key(),
            ApiSock::Udp(s) => s.key(),
        }
    }
}

#[derive(Debug)]
struct Local {
    sock: ApiSock,
    shared: Arc<SockShared>,
    part: usize,
    /// Bytes written by callers without waiting that the stack's send buffer could not
    /// take yet: sent first, in order, as room comes.
    backlog: std::collections::VecDeque<u8>,
    /// `shutdown(Write)` asked while bytes were in the backlog: done once it is empty.
    shut_pending: Option<Shutdown>,
    /// Closed by the application with bytes in the backlog: dropped once it is empty.
    closing: bool,
}

/// What a job sees on the loop thread: the shard's runtime and the sockets it owns.
pub(crate) struct Ctx<'a> {
    pub(crate) rt: &'a mut LoopRuntime,
    socks: &'a mut HashMap<u64, Local>,
    pub(crate) shard: usize,
    pub(crate) shards: usize,
    pub(crate) rss: &'a Rss,
    recent: &'a mut RecentPorts,
    /// Where a stream's bytes pass from the stack to its caller-side buffer.
    scratch: &'a mut Vec<u8>,
}

/// The local ports this shard connected from lately, which a sharded connect skips: the
/// RSS port search is deterministic (the same port for the same peer every time), and
/// taking a port back at once reuses the 4-tuple of a connection still in TIME-WAIT here
/// or closing at the peer.
#[derive(Debug, Default)]
struct RecentPorts {
    order: std::collections::VecDeque<u16>,
    set: std::collections::HashSet<u16>,
}

impl RecentPorts {
    /// How many ports are remembered.
    const KEEP: usize = 4096;

    fn contains(&self, p: u16) -> bool {
        self.set.contains(&p)
    }

    fn push(&mut self, p: u16) {
        if self.set.insert(p) {
            self.order.push_back(p);
        }
        while self.order.len() > RecentPorts::KEEP {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    fn forget_oldest(&mut self) -> bool {
        match self.order.pop_front() {
            Some(old) => {
                self.set.remove(&old);
                true
            }
            None => false,
        }
    }
}

impl Ctx<'_> {
    /// Adopt a new socket: watch it (edge-triggered, every kind) in the runtime's poller,
    /// whose events the loop turns into wake-ups, and publish its readiness.
    fn adopt(&mut self, shared: Arc<SockShared>, part: usize, sock: ApiSock) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE | Interest::RDHUP;
        self.rt.register(&sock, shared.id, interest, Mode::Edge)?;
        let id = shared.id;
        self.socks.insert(
            id,
            Local {
                sock,
                shared,
                part,
                backlog: std::collections::VecDeque::new(),
                shut_pending: None,
                closing: false,
            },
        );
        self.update(id, true);
        Ok(())
    }

    fn local(&self, id: u64) -> io::Result<&Local> {
        self.socks.get(&id).ok_or_else(|| errno(EBADF))
    }

    /// Run `f` on socket `id` as the kind `pick` takes (`EBADF` if there is no such
    /// socket, `ENOTSOCK` if it is another kind), with the loop's runtime.
    fn with_sock<S, T>(
        &mut self,
        id: u64,
        pick: impl FnOnce(&ApiSock) -> Option<&S>,
        f: impl FnOnce(&S, &mut LoopRuntime) -> io::Result<T>,
    ) -> io::Result<T> {
        let local = self.socks.get(&id).ok_or_else(|| errno(EBADF))?;
        f(pick(&local.sock).ok_or_else(|| errno(ENOTSOCK))?, self.rt)
    }

    fn with_stream<T>(
        &mut self,
        id: u64,
        f: impl FnOnce(&api::TcpStream, &mut LoopRuntime) -> io::Result<T>,
    ) -> io::Result<T> {
        self.with_sock(id, ApiSock::stream, f)
    }

    fn with_listener<T>(
        &mut self,
        id: u64,
        f: impl FnOnce(&api::TcpListener, &mut LoopRuntime) -> io::Result<T>,
    ) -> io::Result<T> {
        self.with_sock(id, ApiSock::listener, f)
    }

    fn with_udp<T>(
        &mut self,
        id: u64,
        f: impl FnOnce(&api::UdpSocket, &mut LoopRuntime) -> io::Result<T>,
    ) -> io::Result<T> {
        self.with_sock(id, ApiSock::udp, f)
    }

    /// Publish socket `id`'s readiness after a call on it (no wake-up: a call makes a
    /// socket less ready, or the stack's own wake-up follows).
    fn refresh(&mut self, id: u64) {
        self.update(id, false);
    }

    /// Publish socket `id`'s readiness, a wake-up with it if `wake`. A stream's received
    /// bytes are moved to its caller-side buffer first (up to [`RX_CAP`]); its READABLE is
    /// then that buffer's, and moving anything is a wake-up.
    fn update(&mut self, id: u64, wake: bool) {
        if self.drain_backlog(id) {
            return;
        }
        let Some(l) = self.socks.get(&id) else {
            return;
        };
        let mut r = self.rt.stack().readiness(l.sock.key());
        let ApiSock::Stream(stream) = &l.sock else {
            l.shared.publish(l.part, r, wake);
            return;
        };
        // The room callers may fill without waiting.
        let credit = match stream.info(self.rt) {
            Ok(i)
                if matches!(i.state, State::Established | State::CloseWait)
                    && l.shut_pending.is_none()
                    && l.shared.tx_err.load(Ordering::Acquire) == 0 =>
            {
                stream
                    .send_buffer_size(self.rt)
                    .unwrap_or(0)
                    .saturating_sub(i.send_q + l.backlog.len())
            }
            _ => 0,
        };
        let credit_back = l.shared.tx_credit.swap(credit, Ordering::AcqRel) == 0 && credit > 0;
        if !l.backlog.is_empty() {
            r = r.without(Readiness::WRITABLE);
        }
        let mut rx = lock(&l.shared.rx);
        if !rx.established {
            rx.established = !matches!(
                stream.state(self.rt),
                Ok(State::SynSent | State::SynReceived) | Err(_)
            );
        }
        let mut moved = false;
        let tmp = &mut self.scratch[..];
        // Only when the stack has something for a reader (bytes, the end, an error).
        let pending = r.intersects(Readiness::READABLE | Readiness::ERROR | Readiness::HUP);
        while pending && rx.established && !rx.eof && rx.err.is_none() && rx.data.len() < RX_CAP {
            let room = (RX_CAP - rx.data.len()).min(tmp.len());
            match stream.read(self.rt, &mut tmp[..room]) {
                Ok(0) => rx.eof = true,
                Ok(n) => rx.data.extend(&tmp[..n]),
                Err(e) if e.raw_os_error() == Some(EAGAIN) => break,
                Err(e) => rx.err = Some(e.raw_os_error().unwrap_or(EINVAL)),
            }
            moved = true;
        }
        if moved {
            r = self.rt.stack().readiness(l.sock.key());
        }
        r = r.without(Readiness::READABLE | Readiness::ERROR);
        if rx.readable() {
            r |= Readiness::READABLE;
        }
        if rx.err.is_some() {
            r |= Readiness::ERROR;
        }
        l.shared.ready[l.part].store(r.to_epoll(), Ordering::Release);
        drop(rx);
        if wake || moved || credit_back {
            l.shared.wake();
        }
    }

    /// Move socket `id`'s backlog into the stack as far as it takes it; then a pending
    /// shutdown, or the close of a socket closed with a backlog (true: it is gone).
    fn drain_backlog(&mut self, id: u64) -> bool {
        let Some(l) = self.socks.get_mut(&id) else {
            return false;
        };
        let ApiSock::Stream(stream) = &l.sock else {
            return false;
        };
        while !l.backlog.is_empty() {
            let (front, _) = l.backlog.as_slices();
            match stream.write(self.rt, front) {
                Ok(n) => {
                    l.backlog.drain(..n);
                }
                Err(e) if e.raw_os_error() == Some(EAGAIN) => break,
                Err(e) => {
                    keep_error(&l.shared, &e);
                    l.backlog.clear();
                }
            }
        }
        if !l.backlog.is_empty() {
            return false;
        }
        if let Some(how) = l.shut_pending.take() {
            let _ = stream.shutdown(self.rt, how);
        }
        if l.closing {
            self.remove(id);
            return true;
        }
        false
    }

    /// A write handed over without waiting ([`Net::write`] with credit): into the stack
    /// behind any backlog, the rest into the backlog; an error is kept for the next write.
    fn write_behind(&mut self, id: u64, data: &[u8]) {
        let Some(l) = self.socks.get_mut(&id) else {
            return;
        };
        let ApiSock::Stream(stream) = &l.sock else {
            return;
        };
        let mut off = 0;
        if l.backlog.is_empty() {
            match stream.write(self.rt, data) {
                Ok(n) => off = n,
                Err(e) if e.raw_os_error() == Some(EAGAIN) => {}
                Err(e) => {
                    keep_error(&l.shared, &e);
                    off = data.len();
                }
            }
        }
        l.backlog.extend(&data[off..]);
        self.update(id, false);
    }

    /// Drop the loop's socket: the runtime closes it in its next round.
    fn remove(&mut self, id: u64) {
        if let Some(l) = self.socks.get_mut(&id)
            && !l.backlog.is_empty()
            && lock(&l.shared.rx).data.is_empty()
        {
            // Closed with bytes still to hand the stack: they go first, then the close.
            l.closing = true;
            return;
        }
        if let Some(l) = self.socks.remove(&id) {
            let _ = self.rt.deregister(&l.sock);
            // Bytes the application never read: a reset, as Linux's close with data
            // left in the receive queue (the bytes moved to the caller-side buffer were
            // still unread).
            if let ApiSock::Stream(s) = &l.sock
                && !lock(&l.shared.rx).data.is_empty()
            {
                let _ = s.set_linger(self.rt, Some(Duration::ZERO));
            }
        }
    }
}

/// Keep a write's error for the caller's next write (the first one wins).
fn keep_error(shared: &SockShared, e: &io::Error) {
    let n = e
        .raw_os_error()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(32 /* EPIPE */);
    let _ = shared
        .tx_err
        .compare_exchange(0, n, Ordering::AcqRel, Ordering::Acquire);
}

/// A job for a loop thread.
type Job = Box<dyn FnOnce(&mut Ctx<'_>) + Send>;

/// The loop thread's wake-up: an eventfd in its `poll(2)` set, written only while the loop
/// sleeps.
#[derive(Debug)]
pub(crate) struct Kick {
    efd: OwnedFd,
    sleeping: AtomicBool,
}

impl Kick {
    fn new() -> io::Result<Kick> {
        Ok(Kick {
            efd: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
            sleeping: AtomicBool::new(false),
        })
    }

    fn ring(&self) {
        let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
    }

    /// Wake the loop if it sleeps (one `write(2)`); nothing if it runs.
    fn kick(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.ring();
        }
    }

    fn drain(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.efd, &mut b);
    }
}

/// One shard's job queue.
pub(crate) struct Queue {
    jobs: Mutex<Vec<Job>>,
    pending: AtomicBool,
    kick: Arc<Kick>,
}

impl core::fmt::Debug for Queue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Queue")
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl Queue {
    fn new(kick: Arc<Kick>) -> Queue {
        Queue {
            jobs: Mutex::new(Vec::new()),
            pending: AtomicBool::new(false),
            kick,
        }
    }

    /// Hand `job` to the loop (Dekker with the loop's sleep: `pending` stored before
    /// `sleeping` is read, `sleeping` stored before `pending` is read).
    fn push(&self, job: Job) {
        lock(&self.jobs).push(job);
        self.pending.store(true, Ordering::SeqCst);
        self.kick.kick();
    }

    fn take(&self, into: &mut Vec<Job>) {
        if !self.pending.swap(false, Ordering::SeqCst) {
            return;
        }
        core::mem::swap(&mut *lock(&self.jobs), into);
    }
}

/// One stack a loop thread runs (a shard; or one end of a sim pair).
struct Member {
    rt: LoopRuntime,
    socks: HashMap<u64, Local>,
    queue: Arc<Queue>,
    events: Events,
    jobs: Vec<Job>,
    shard: usize,
    shards: usize,
    rss: Rss,
    recent: RecentPorts,
    scratch: Vec<u8>,
}

impl Member {
    /// Jobs, one round, the wake-ups; whether there was anything to do.
    fn turn(&mut self) -> io::Result<bool> {
        self.queue.take(&mut self.jobs);
        let ran = !self.jobs.is_empty();
        let mut ctx = Ctx {
            rt: &mut self.rt,
            socks: &mut self.socks,
            shard: self.shard,
            shards: self.shards,
            rss: &self.rss,
            recent: &mut self.recent,
            scratch: &mut self.scratch,
        };
        for job in self.jobs.drain(..) {
            job(&mut ctx);
        }
        let empty_before = self.rt.stats().empty_rounds;
        // A round and the poller's events, without sleeping (a zero timeout).
        self.rt.poll(&mut self.events, Some(Duration::ZERO))?;
        let worked = self.rt.stats().empty_rounds == empty_before;
        let mut ctx = Ctx {
            rt: &mut self.rt,
            socks: &mut self.socks,
            shard: self.shard,
            shards: self.shards,
            rss: &self.rss,
            recent: &mut self.recent,
            scratch: &mut self.scratch,
        };
        for e in &self.events {
            ctx.update(e.token, true);
        }
        Ok(ran
            || worked
            || !self.events.is_empty()
            || self.rt.poller().has_pending(self.rt.stack()))
    }

    /// How long until this member has work on its own (a timer, a frame in flight).
    fn next_wakeup(&self) -> Option<Duration> {
        let now = self.rt.now();
        self.rt
            .shard()
            .next_wakeup()
            .map(|t| if t <= now { Duration::ZERO } else { t - now })
    }
}

/// Loop counters (for the docs' figures and the tests).
#[derive(Debug, Default)]
pub(crate) struct LoopStats {
    pub(crate) sleeps: AtomicU64,
    pub(crate) turns: AtomicU64,
    /// Sleeps taken at once because the thread waited for its CPU (adaptive busy
    /// polling, [`SpinPolicy::before_sleep`]).
    pub(crate) contended_sleeps: AtomicU64,
}

/// The body of a loop thread: turns until idle, then one `poll(2)` on the devices' files
/// and the kick, up to the earliest wake-up. Idle, it busy-polls first as the runtime's
/// own loop does (its module docs, *Adaptive busy polling*): the window's decisions are
/// the same [`SpinPolicy`]'s, fed what this loop saw (a turn that found work and how
/// soon, an empty spin, its run-queue wait before a sleep, a wake-up and how soon).
fn run_loop(mut members: Vec<Member>, kick: &Kick, stop: &AtomicBool, stats: &LoopStats) {
    let busy_poll = members
        .iter()
        .map(|m| m.rt.busy_poll_time())
        .max()
        .unwrap_or_default();
    let adaptive = members.iter().all(|m| m.rt.busy_poll_adapts());
    let mut policy = SpinPolicy::new(busy_poll, adaptive);
    let mut delay = DelaySampler::default();
    // The idle phase under way: when it began and how long it may spin.
    let mut idle: Option<(std::time::Instant, Duration)> = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        let mut busy = false;
        for m in &mut members {
            match m.turn() {
                Ok(b) => busy |= b,
                Err(_) => return,
            }
        }
        stats.turns.fetch_add(1, Ordering::Relaxed);
        if stopping {
            return;
        }
        if busy {
            if let Some((since, _)) = idle.take() {
                // A spin found work (a job or a frame) this soon.
                policy.hit(since.elapsed());
            }
            continue;
        }
        if busy_poll.is_zero() {
            idle = None;
        } else {
            let (since, window) =
                *idle.get_or_insert_with(|| (std::time::Instant::now(), policy.idle_window()));
            if since.elapsed() < window {
                core::hint::spin_loop();
                continue;
            }
            if !window.is_zero() {
                policy.empty(window);
            }
        }
        let contended = !busy_poll.is_zero() && adaptive && policy.before_sleep(delay.sample());
        if contended {
            stats.contended_sleeps.fetch_add(1, Ordering::Relaxed);
        }
        let slept_from = idle.take().map(|(since, _)| since);
        let timeout = members.iter().filter_map(Member::next_wakeup).min();
        kick.sleeping.store(true, Ordering::SeqCst);
        if members
            .iter()
            .any(|m| m.queue.pending.load(Ordering::SeqCst))
            || stop.load(Ordering::SeqCst)
        {
            kick.sleeping.store(false, Ordering::SeqCst);
            continue;
        }
        let mut armed = 0;
        for m in &mut members {
            if !m.rt.device_mut().link_mut().prepare_sleep() {
                break;
            }
            armed += 1;
        }
        if armed == members.len() {
            stats.sleeps.fetch_add(1, Ordering::Relaxed);
            let mut files = Vec::new();
            for m in &members {
                m.rt.device().link().sleep_fds(&mut files);
            }
            let mut fds: Vec<PollFd<'_>> = files
                .into_iter()
                .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
                .collect();
            fds.push(PollFd::new(&kick.efd, PollFlags::IN));
            let ts = timeout.map(|t| rustix::time::Timespec {
                tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(t.subsec_nanos()),
            });
            // EINTR and the like: the loop just turns again.
            let woken = rustix::event::poll(&mut fds, ts.as_ref()).is_ok_and(|n| n > 0);
            if let Some(since) = slept_from.filter(|_| woken && !contended) {
                policy.woken(since.elapsed());
            }
        }
        for m in members.iter_mut().take(armed) {
            m.rt.device_mut().link_mut().finish_sleep();
        }
        kick.sleeping.store(false, Ordering::SeqCst);
        kick.drain();
    }
}

/// A loop thread; dropping it stops and joins the thread.
#[derive(Debug)]
pub(crate) struct LoopThread {
    stop: Arc<AtomicBool>,
    kick: Arc<Kick>,
    handle: Mutex<Option<JoinHandle<()>>>,
    pub(crate) stats: Arc<LoopStats>,
    /// The runtimes' busy-poll time.
    busy_poll: Duration,
}

impl Drop for LoopThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.kick.ring();
        if let Some(h) = lock(&self.handle).take() {
            let _ = h.join();
        }
    }
}

/// What a loop thread is asked to run: a function building its runtimes on the thread
/// (devices such as the sim port cannot move between threads), one per member.
pub(crate) type Build = Box<dyn FnOnce() -> io::Result<Vec<LoopRuntime>> + Send>;

/// One member's place in the shard list of its [`Net`].
pub(crate) struct MemberSpec {
    pub(crate) shard: usize,
    pub(crate) shards: usize,
    pub(crate) rss: Rss,
}

/// Start a loop thread running `specs`; the job queue of each member, in order.
pub(crate) fn spawn_loop(
    name: String,
    build: Build,
    specs: Vec<MemberSpec>,
) -> io::Result<(Arc<LoopThread>, Vec<Arc<Queue>>)> {
    let kick = Arc::new(Kick::new()?);
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(LoopStats::default());
    let queues: Vec<Arc<Queue>> = specs
        .iter()
        .map(|_| Arc::new(Queue::new(kick.clone())))
        .collect();
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<Duration>>();
    let thread = {
        let (kick, stop, stats, queues) =
            (kick.clone(), stop.clone(), stats.clone(), queues.clone());
        std::thread::Builder::new().name(name).spawn(move || {
            let runtimes = match build() {
                Ok(r) if r.len() == specs.len() => r,
                Ok(_) => {
                    let _ = tx.send(Err(io::Error::other("ustack-net: runtimes miscounted")));
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let members: Vec<Member> = runtimes
                .into_iter()
                .zip(specs)
                .zip(queues)
                .map(|((rt, spec), queue)| Member {
                    rt,
                    socks: HashMap::new(),
                    queue,
                    events: Events::with_capacity(256),
                    jobs: Vec::new(),
                    shard: spec.shard,
                    shards: spec.shards,
                    rss: spec.rss,
                    recent: RecentPorts::default(),
                    scratch: vec![0; 16 * 1024],
                })
                .collect();
            let busy_poll = members
                .iter()
                .map(|m| m.rt.busy_poll_time())
                .max()
                .unwrap_or_default();
            let _ = tx.send(Ok(busy_poll));
            run_loop(members, &kick, &stop, &stats);
        })?
    };
    let started = rx.recv();
    let lt = Arc::new(LoopThread {
        stop,
        kick,
        handle: Mutex::new(Some(thread)),
        stats,
        busy_poll: match &started {
            Ok(Ok(d)) => *d,
            _ => Duration::ZERO,
        },
    });
    match started {
        Ok(Ok(_)) => Ok((lt, queues)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::other(
            "ustack-net: the loop thread died while starting",
        )),
    }
}

// ---- replies ------------------------------------------------------------------------------

enum SlotState<T> {
    Empty,
    Full(T),
    Gone,
}

/// Where the loop puts a job's result for the caller parked on it.
struct Slot<T> {
    state: Mutex<SlotState<T>>,
    cv: Condvar,
    /// Set once the state is filled: what a spinning caller watches.
    done: AtomicBool,
}

impl<T> Slot<T> {
    fn set(&self, s: SlotState<T>) {
        *lock(&self.state) = s;
        self.done.store(true, Ordering::Release);
        self.cv.notify_one();
    }

    /// The result; with `spin`, first watch for it that long before parking (a busy-poll
    /// `Net`: the loop answers within microseconds when it is running on another core).
    fn wait(&self, spin: Duration) -> io::Result<T> {
        if !spin.is_zero() {
            let t0 = std::time::Instant::now();
            let mut i = 0u32;
            while !self.done.load(Ordering::Acquire) {
                core::hint::spin_loop();
                i = i.wrapping_add(1);
                if i.is_multiple_of(64) && t0.elapsed() >= spin {
                    break;
                }
            }
        }
        let mut g = lock(&self.state);
        loop {
            match core::mem::replace(&mut *g, SlotState::Empty) {
                SlotState::Full(v) => return Ok(v),
                SlotState::Gone => return Err(loop_gone()),
                SlotState::Empty => g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

/// The loop's end of a [`Slot`]: dropped without an answer (the loop stopped with the job
/// queued), it tells the caller so.
struct Reply<T>(Option<Arc<Slot<T>>>);

impl<T> Reply<T> {
    fn send(mut self, v: T) {
        if let Some(s) = self.0.take() {
            s.set(SlotState::Full(v));
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(s) = self.0.take() {
            s.set(SlotState::Gone);
        }
    }
}

// ---- the table and the Net ----------------------------------------------------------------

/// A socket as the handle table holds it. Dropped with its last handle (a socket may have
/// several, after [`Net::dup`]): it asks each shard holding a part to close it.
pub(crate) struct Sock {
    kind: Kind,
    pub(crate) shared: Arc<SockShared>,
    /// The shard of each part.
    shards: Vec<usize>,
    queues: Arc<[Arc<Queue>]>,
}

impl core::fmt::Debug for Sock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sock")
            .field("kind", &self.kind)
            .field("shared", &self.shared)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let id = self.shared.id;
        for &k in &self.shards {
            self.queues[k].push(Box::new(move |ctx| ctx.remove(id)));
        }
        // Wake whoever waits on it (an epoll set drops it at its next look).
        if !self.shards.is_empty() {
            let r = self.shared.readiness();
            self.shared.publish(0, r | Readiness::HUP, true);
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<Arc<Sock>>>,
    /// Free numbers, kept sorted descending so that `pop` gives the lowest.
    free: Vec<u32>,
}

#[derive(Debug)]
pub(crate) struct Core {
    queues: Arc<[Arc<Queue>]>,
    /// How long a caller watches for the loop's answer before parking.
    spin: Duration,
    table: RwLock<Table>,
    next_id: AtomicU64,
    next_shard: AtomicUsize,
}

/// A ustack stack whose loop runs on its own thread(s), with thread-safe sockets: the core
/// of [`crate`]. Cheap to clone (a reference); the loop threads stop when the last clone
/// and the last socket are gone. See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Net {
    inner: Arc<NetInner>,
}

#[derive(Debug)]
struct NetInner {
    // Dropped first: the sockets' close jobs reach the loops before they stop.
    core: Core,
    threads: Vec<Arc<LoopThread>>,
}

impl Drop for NetInner {
    fn drop(&mut self) {
        let slots = core::mem::take(
            &mut self
                .core
                .table
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .slots,
        );
        drop(slots);
    }
}

/// The key every runtime of a sharded `Net` uses to steer flows (the device's RSS key):
/// [`RssKey::MICROSOFT`], as ustack's shm links and `ustack serve` use.
pub(crate) fn default_rss(shards: usize) -> Rss {
    Rss::new(RssKey::MICROSOFT, shards)
}

impl Net {
    /// A `Net` over loop threads already started: `queues[k]` is shard `k`'s.
    pub(crate) fn from_parts(threads: Vec<Arc<LoopThread>>, queues: Vec<Arc<Queue>>) -> Net {
        let spin = threads
            .iter()
            .map(|t| t.busy_poll)
            .max()
            .unwrap_or_default();
        Net {
            inner: Arc::new(NetInner {
                core: Core {
                    queues: queues.into(),
                    spin,
                    table: RwLock::new(Table::default()),
                    next_id: AtomicU64::new(1),
                    next_shard: AtomicUsize::new(0),
                },
                threads,
            }),
        }
    }

    fn core(&self) -> &Core {
        &self.inner.core
    }

    /// The number of shards (loop runtimes) of this stack.
    pub fn shards(&self) -> usize {
        self.core().queues.len()
    }

    /// Times the loop threads slept and turns they ran (all threads of this `Net`,
    /// including those it shares with another `Net`, as a sim pair's ends do).
    pub fn loop_counters(&self) -> (u64, u64) {
        self.inner.threads.iter().fold((0, 0), |(s, t), lt| {
            (
                s + lt.stats.sleeps.load(Ordering::Relaxed),
                t + lt.stats.turns.load(Ordering::Relaxed),
            )
        })
    }

    // ---- the call machinery ------------------------------------------------------------

    /// Run `f` on shard `shard`'s loop thread, between two rounds, and wait for its result
    /// (one hand-off each way).
    pub(crate) fn call<T, F>(&self, shard: usize, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> T + Send + 'static,
    {
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Empty),
            cv: Condvar::new(),
            done: AtomicBool::new(false),
        });
        let reply = Reply(Some(slot.clone()));
        self.core().queues[shard].push(Box::new(move |ctx| reply.send(f(ctx))));
        slot.wait(self.core().spin)
    }

    /// Hand `f` to shard `shard`'s loop thread without waiting for it.
    fn post<F>(&self, shard: usize, f: F)
    where
        F: FnOnce(&mut Ctx<'_>) + Send + 'static,
    {
        self.core().queues[shard].push(Box::new(f));
    }

    /// Run `f` on every shard's loop thread with its runtime, and return what each gave, in
    /// shard order: counters ([`LoopRuntime::stats`], `stack().mib()`), socket tables,
    /// sysctls.
    pub fn on_each_shard<T, F>(&self, f: F) -> io::Result<Vec<T>>
    where
        T: Send + 'static,
        F: Fn(&mut LoopRuntime) -> T + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        (0..self.shards())
            .map(|k| {
                let f = f.clone();
                self.call(k, move |ctx| f(ctx.rt))
            })
            .collect()
    }

    /// How many TCP connections on all shards still have bytes unacknowledged
    /// (`ESTAB`, `CLOSE-WAIT`) or their FIN unanswered (`FIN-WAIT-1`, `CLOSING`,
    /// `LAST-ACK`), closed ones included: what a process must wait for before it exits,
    /// since its stack dies with it (the kernel's orphaned sockets outlive their process).
    pub fn connections_sending(&self) -> io::Result<usize> {
        let per_shard = self.on_each_shard(|rt| {
            let now = rt.now();
            rt.stack()
                .sockets(now)
                .iter()
                .filter(|v| match v.state {
                    "ESTAB" | "CLOSE-WAIT" => v.send_q > 0,
                    "FIN-WAIT-1" | "CLOSING" | "LAST-ACK" => true,
                    _ => false,
                })
                .count()
        })?;
        Ok(per_shard.iter().sum())
    }

    /// The loop counters of every shard's runtime ([`RuntimeStats`]), summed. The loop
    /// threads sleep on their own (in one `poll(2)` with the kick), so `sleeps`,
    /// `wakeups` and `timeouts` stay 0 here: [`Net::loop_counters`] counts those.
    pub fn runtime_stats(&self) -> io::Result<RuntimeStats> {
        let all = self.on_each_shard(|rt| *rt.stats())?;
        Ok(all.iter().fold(RuntimeStats::default(), |mut a, s| {
            a.rounds += s.rounds;
            a.empty_rounds += s.empty_rounds;
            a.sleeps += s.sleeps;
            a.wakeups += s.wakeups;
            a.timeouts += s.timeouts;
            a.busy_polls += s.busy_polls;
            a.busy_poll_hits += s.busy_poll_hits;
            a.events += s.events;
            a.timers_fired += s.timers_fired;
            a.closed_on_drop += s.closed_on_drop;
            a
        }))
    }

    /// A call on socket `s`'s part `part` that may wait: `f` runs on the loop; if it says
    /// `WouldBlock` and `wait` allows, the caller parks until the loop sees the socket
    /// wake up (no polling), then tries again. An expired wait returns the `WouldBlock`.
    fn op<T, F>(&self, s: &Sock, part: usize, wait: Wait, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut Ctx<'_>, u64) -> io::Result<T> + Clone + Send + 'static,
    {
        loop {
            let f = f.clone();
            let shared = s.shared.clone();
            let (r, generation) = self.call(s.shards[part], move |ctx| {
                let r = f(ctx, shared.id);
                ctx.refresh(shared.id);
                (r, shared.generation())
            })?;
            match r {
                Err(e) if e.raw_os_error() == Some(EAGAIN) && wait != Wait::Never => {
                    if !s.shared.wait_change(generation, wait) {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// A call that can only succeed once the socket is readable (accept, recv), on a
    /// socket with a part per shard: `attempt(part)` is tried on the parts the loop saw
    /// readable first. While the loop's last view says no part is readable (nor has an
    /// error or hang-up), the caller waits for a wake-up without handing the loop a job,
    /// and a non-blocking call returns `WouldBlock` at once. The readiness is published
    /// before the generation moves, so a wake-up between the two loads is not missed.
    fn on_any_part<T>(
        &self,
        s: &Sock,
        wait: Wait,
        mut attempt: impl FnMut(usize) -> io::Result<T>,
    ) -> io::Result<T> {
        let readable = Readiness::READABLE.to_epoll();
        loop {
            let seen = s.shared.generation();
            if s.shared
                .readiness()
                .intersects(Readiness::READABLE | ALWAYS)
            {
                let mut order: Vec<usize> = (0..s.shards.len()).collect();
                order.sort_by_key(|&p| s.shared.ready[p].load(Ordering::Acquire) & readable == 0);
                for part in order {
                    match attempt(part) {
                        Err(e) if e.raw_os_error() == Some(EAGAIN) => {}
                        r => return r,
                    }
                }
            }
            if !s.shared.wait_change(seen, wait) {
                return Err(errno(EAGAIN));
            }
        }
    }

    // ---- the table -----------------------------------------------------------------------

    pub(crate) fn sock(&self, fd: Fd) -> io::Result<Arc<Sock>> {
        let t = self.core().table.read().unwrap_or_else(|e| e.into_inner());
        t.slots
            .get(fd.0 as usize)
            .and_then(Clone::clone)
            .ok_or_else(|| errno(EBADF))
    }

    fn insert(&self, sock: Arc<Sock>) -> Fd {
        let mut t = self.core().table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.free.pop() {
            t.slots[n as usize] = Some(sock);
            Fd(n)
        } else {
            t.slots.push(Some(sock));
            Fd(u32::try_from(t.slots.len() - 1).unwrap_or(u32::MAX))
        }
    }

    fn new_shared(&self, parts: usize) -> Arc<SockShared> {
        let id = self.core().next_id.fetch_add(1, Ordering::Relaxed);
        Arc::new(SockShared::new(id, parts))
    }

    fn sock_from(&self, kind: Kind, shared: Arc<SockShared>, shards: Vec<usize>) -> Sock {
        Sock {
            kind,
            shared,
            shards,
            queues: self.core().queues.clone(),
        }
    }

    fn new_sock(&self, kind: Kind, shards: Vec<usize>) -> Sock {
        let shared = self.new_shared(shards.len());
        self.sock_from(kind, shared, shards)
    }

    /// Close handle `fd`: the socket closes when its last handle is closed (a stream sends
    /// its FIN, or a RST if data was left unread, as `close(2)`). `EBADF` if not open.
    pub fn close(&self, fd: Fd) -> io::Result<()> {
        let sock = {
            let mut t = self.core().table.write().unwrap_or_else(|e| e.into_inner());
            let sock = t
                .slots
                .get_mut(fd.0 as usize)
                .and_then(Option::take)
                .ok_or_else(|| errno(EBADF))?;
            let pos = t.free.partition_point(|&n| n > fd.0);
            t.free.insert(pos, fd.0);
            sock
        };
        drop(sock);
        Ok(())
    }

    /// Another handle on the same socket (`dup(2)`).
    pub fn dup(&self, fd: Fd) -> io::Result<Fd> {
        let s = self.sock(fd)?;
        Ok(self.insert(s))
    }

    /// The kind of socket `fd` is.
    pub fn kind(&self, fd: Fd) -> io::Result<Kind> {
        Ok(self.sock(fd)?.kind)
    }

    /// What `fd` is ready for, as the loop last saw it (`EPOLLIN`, `EPOLLOUT`, ... as
    /// [`Readiness`]).
    pub fn readiness(&self, fd: Fd) -> io::Result<Readiness> {
        Ok(self.sock(fd)?.shared.readiness())
    }

    /// Wake `waker` once, when `fd` is next ready for `interest` (or has an error or
    /// hang-up); at once if it is ready now. The hook an async runtime's reactor uses:
    /// one waker per waiting task, nothing polled while the socket is not ready.
    pub fn register_waker(&self, fd: Fd, interest: Readiness, waker: &Waker) -> io::Result<()> {
        let s = self.sock(fd)?;
        if s.shared.readiness().intersects(interest | ALWAYS) {
            waker.wake_by_ref();
            return Ok(());
        }
        s.shared.add_watcher(Watcher::Waker {
            interest,
            waker: waker.clone(),
        });
        // Ready meanwhile (the loop may have published before the watcher was in).
        if s.shared.readiness().intersects(interest | ALWAYS) {
            waker.wake_by_ref();
        }
        Ok(())
    }

    /// `O_NONBLOCK`: calls that follow the socket's mode ([`read`](Self::read) with
    /// [`Net::read_wait`], ...) return `WouldBlock` instead of waiting. Shared by every
    /// handle of the socket, as the flag is shared by `dup`'d descriptors.
    pub fn set_nonblocking(&self, fd: Fd, on: bool) -> io::Result<()> {
        self.sock(fd)?
            .shared
            .nonblocking
            .store(on, Ordering::Relaxed);
        Ok(())
    }

    /// `SO_RCVTIMEO` (`None`: none). A zero duration is `InvalidInput`, as in std.
    pub fn set_read_timeout(&self, fd: Fd, t: Option<Duration>) -> io::Result<()> {
        SockShared::set_timeout(&self.sock(fd)?.shared.read_timeout, t)
    }

    /// `SO_SNDTIMEO` (`None`: none). A zero duration is `InvalidInput`, as in std.
    pub fn set_write_timeout(&self, fd: Fd, t: Option<Duration>) -> io::Result<()> {
        SockShared::set_timeout(&self.sock(fd)?.shared.write_timeout, t)
    }

    /// The read timeout.
    pub fn read_timeout(&self, fd: Fd) -> io::Result<Option<Duration>> {
        Ok(SockShared::timeout(&self.sock(fd)?.shared.read_timeout))
    }

    /// The write timeout.
    pub fn write_timeout(&self, fd: Fd) -> io::Result<Option<Duration>> {
        Ok(SockShared::timeout(&self.sock(fd)?.shared.write_timeout))
    }

    /// How a read on `fd` waits by its settings: never if non-blocking, else up to its
    /// read timeout.
    pub fn read_wait(&self, fd: Fd) -> io::Result<Wait> {
        Ok(self.sock(fd)?.shared.read_wait())
    }

    /// How a write (or connect) on `fd` waits by its settings.
    pub fn write_wait(&self, fd: Fd) -> io::Result<Wait> {
        Ok(self.sock(fd)?.shared.write_wait())
    }

    // ---- TCP -------------------------------------------------------------------------------

    /// Listen on `addr` (`socket`, `bind`, `listen`), on every shard (as `SO_REUSEPORT`
    /// gives each worker its listener: the device's RSS decides which shard accepts a
    /// connection). `EADDRINUSE`, `EADDRNOTAVAIL`, `EINVAL` (port 0).
    /// An IPv6 address makes an IPv6 listener, which on `::` takes IPv4 connections too
    /// (their peers `::ffff:a.b.c.d`), as Linux's default `net.ipv6.bindv6only = 0`.
    pub fn tcp_listen(&self, addr: impl Into<SocketAddr>, backlog: u32) -> io::Result<Fd> {
        self.tcp_listen_only_v6(addr, backlog, false)
    }

    /// [`tcp_listen`](Net::tcp_listen) with `IPV6_V6ONLY` set before it listens (as a
    /// socket sets it before `bind(2)`): with `only_v6`, an IPv6 listener takes IPv6
    /// connections only. `EAFNOSUPPORT` for `only_v6` on an IPv4 address.
    pub fn tcp_listen_only_v6(
        &self,
        addr: impl Into<SocketAddr>,
        backlog: u32,
        only_v6: bool,
    ) -> io::Result<Fd> {
        let addr = addr.into();
        if only_v6 && addr.is_ipv4() {
            return Err(errno(EAFNOSUPPORT));
        }
        let sock = Arc::new(self.new_sock(Kind::Listener, (0..self.shards()).collect()));
        for k in 0..self.shards() {
            let shared = sock.shared.clone();
            self.call(k, move |ctx| {
                let l = api::TcpListener::bind_only_v6(ctx.rt, addr, backlog, only_v6)?;
                ctx.adopt(shared, k, ApiSock::Listener(l))
            })??;
        }
        Ok(self.insert(sock))
    }

    /// Take a connection from the listener's queue (of any shard): the new handle and the
    /// peer. Waits as `wait` says.
    /// An IPv4 peer of an IPv6 listener is `::ffff:a.b.c.d`, as Linux gives it.
    pub fn accept(&self, fd: Fd, wait: Wait) -> io::Result<(Fd, SocketAddr)> {
        let l = self.sock(fd)?;
        if l.kind != Kind::Listener {
            return Err(errno(EINVAL));
        }
        self.on_any_part(&l, wait, |part| {
            let shared = self.new_shared(1);
            let adopted = shared.clone();
            let peer = self.op(&l, part, Wait::Never, move |ctx, id| {
                let (s, peer) = ctx.with_listener(id, |x, rt| x.accept(rt))?;
                ctx.adopt(adopted.clone(), 0, ApiSock::Stream(s))?;
                Ok(peer)
            })?;
            let stream = self.sock_from(Kind::Stream, shared, vec![l.shards[part]]);
            Ok((self.insert(Arc::new(stream)), peer))
        })
    }

    /// Open a connection to `addr`. With [`Wait::Never`] the handle comes back at once,
    /// the handshake in progress (a non-blocking `connect`; [`Net::connect_done`] says
    /// when it completes); otherwise the caller waits for the handshake, and a wait that
    /// runs out resets the attempt and fails with `TimedOut`. Errors: `ECONNREFUSED`,
    /// `ETIMEDOUT` (SYN retries), `ENETUNREACH`, `EADDRNOTAVAIL`. An IPv6 `addr` of the
    /// form `::ffff:a.b.c.d` connects over IPv4, the connection's addresses then seen
    /// v4-mapped (Linux `tcp_v6_connect`).
    pub fn tcp_connect(&self, addr: impl Into<SocketAddr>, wait: Wait) -> io::Result<Fd> {
        let addr = addr.into();
        let shards = self.shards();
        let k = self.core().next_shard.fetch_add(1, Ordering::Relaxed) % shards;
        let shared = self.new_shared(1);
        let adopted = shared.clone();
        self.call(k, move |ctx| {
            let s = if ctx.shards == 1 {
                api::TcpStream::connect(ctx.rt, addr)?
            } else {
                connect_on_shard(ctx, addr)?
            };
            ctx.adopt(adopted, 0, ApiSock::Stream(s))
        })??;
        let sock = Arc::new(self.sock_from(Kind::Stream, shared, vec![k]));
        let fd = self.insert(sock.clone());
        if wait == Wait::Never {
            return Ok(fd);
        }
        loop {
            let seen = sock.shared.generation();
            match self.connect_done(fd) {
                Ok(true) => return Ok(fd),
                Ok(false) => {}
                Err(e) => {
                    let _ = self.close(fd);
                    return Err(e);
                }
            }
            if !sock.shared.wait_change(seen, wait) {
                let _ = self.op(&sock, 0, Wait::Never, |ctx, id| {
                    ctx.with_stream(id, |x, rt| x.set_linger(rt, Some(Duration::ZERO)))
                });
                let _ = self.close(fd);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection timed out",
                ));
            }
        }
    }

    /// Whether `fd`'s handshake is done (`poll` + `SO_ERROR` after a non-blocking
    /// connect): `Ok(false)` in progress, `Ok(true)` established, or its failure once.
    pub fn connect_done(&self, fd: Fd) -> io::Result<bool> {
        let s = self.stream_sock(fd)?;
        let r = self.op(&s, 0, Wait::Never, |ctx, id| {
            ctx.with_stream(id, |x, rt| x.poll_connect(rt))
        });
        match r {
            // The loop took the failure to the receive buffer (see `RxBuf`).
            Err(e) if e.raw_os_error() == Some(107 /* ENOTCONN */) => {
                match lock(&s.shared.rx).err.take() {
                    Some(err) => Err(errno(err)),
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    /// A call on stream `fd` that never waits: `f` with the runtime's stream, on the loop.
    fn stream_op<T, F>(&self, fd: Fd, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: Fn(&api::TcpStream, &mut LoopRuntime) -> io::Result<T> + Clone + Send + 'static,
    {
        let s = self.stream_sock(fd)?;
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            ctx.with_stream(id, f.clone())
        })
    }

    fn stream_sock(&self, fd: Fd) -> io::Result<Arc<Sock>> {
        let s = self.sock(fd)?;
        if s.kind != Kind::Stream {
            return Err(errno(ENOTSOCK));
        }
        Ok(s)
    }

    fn udp_sock(&self, fd: Fd) -> io::Result<Arc<Sock>> {
        let s = self.sock(fd)?;
        if s.kind != Kind::Udp {
            return Err(errno(ENOTSOCK));
        }
        Ok(s)
    }

    /// Read into `buf`: bytes read, `Ok(0)` at end of stream; waits as `wait` says while
    /// nothing is there (`WouldBlock` when it runs out). A pending error (`ECONNRESET`)
    /// once.
    pub fn read(&self, fd: Fd, buf: &mut [u8], wait: Wait) -> io::Result<usize> {
        let mut at = 0;
        self.read_with(fd, buf.len(), wait, |piece| {
            buf[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        })
    }

    /// [`read`](Net::read) of up to `max` bytes handed to `put` in one or two pieces
    /// (in order) instead of copied into a slice: for a caller whose buffer is not
    /// initialized yet (tokio's `ReadBuf`), which would otherwise have to zero all of it
    /// first and so touch pages a short read never needs.
    pub fn read_with(
        &self,
        fd: Fd,
        max: usize,
        wait: Wait,
        mut put: impl FnMut(&[u8]),
    ) -> io::Result<usize> {
        let s = self.stream_sock(fd)?;
        if max == 0 {
            return Ok(0);
        }
        loop {
            let seen = s.shared.generation();
            {
                let mut rx = lock(&s.shared.rx);
                if !rx.data.is_empty() {
                    let was_full = rx.data.len() >= RX_CAP;
                    let n = max.min(rx.data.len());
                    let (a, b) = rx.data.as_slices();
                    let first = n.min(a.len());
                    put(&a[..first]);
                    if n > first {
                        put(&b[..n - first]);
                    }
                    rx.data.drain(..n);
                    if !rx.readable() {
                        let bits = (Readiness::READABLE | Readiness::ERROR).to_epoll();
                        s.shared.ready[0].fetch_and(!bits, Ordering::AcqRel);
                    }
                    drop(rx);
                    if was_full {
                        // The loop stopped moving bytes at the cap: room again.
                        let id = s.shared.id;
                        self.post(s.shards[0], move |ctx| ctx.update(id, false));
                    }
                    return Ok(n);
                }
                if let Some(r) = rx.error_or_end(&s.shared.ready[0]) {
                    return r;
                }
            }
            if !s.shared.wait_change(seen, wait) {
                return Err(errno(EAGAIN));
            }
        }
    }

    /// Queue bytes from `buf` for sending: how many were taken (a short write when the
    /// send buffer is nearly full); waits as `wait` says while none fit. `EPIPE` after
    /// shutdown, the connection's error after a reset.
    pub fn write(&self, fd: Fd, buf: &[u8], wait: Wait) -> io::Result<usize> {
        self.write_any(fd, buf, wait, false)
    }

    /// `send(MSG_OOB)`: queue bytes from `buf` as [`write`](Net::write) does, the last
    /// byte taken urgent (the stack's `tcp_send_urgent`, Linux `tcp_sendmsg` with
    /// `MSG_OOB`: the segments up to it carry URG). Always a job on the loop, behind the
    /// bytes written before it (never through the write-behind credit).
    pub fn write_urgent(&self, fd: Fd, buf: &[u8], wait: Wait) -> io::Result<usize> {
        self.write_any(fd, buf, wait, true)
    }

    fn write_any(&self, fd: Fd, buf: &[u8], wait: Wait, urgent: bool) -> io::Result<usize> {
        let s = self.stream_sock(fd)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let err = s.shared.tx_err.swap(0, Ordering::AcqRel);
        if err != 0 {
            return Err(errno(i32::try_from(err).unwrap_or(EINVAL)));
        }
        // With credit: hand the bytes over and return (one hand-off, no answer to wait
        // for); they fit in the stack's send buffer as the loop last saw it.
        let credit = s.shared.tx_credit.load(Ordering::Acquire);
        if credit > 0 && !urgent {
            let n = credit.min(buf.len()).min(MAX_IO);
            if s.shared
                .tx_credit
                .compare_exchange(credit, credit - n, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let data = buf[..n].to_vec();
                let id = s.shared.id;
                self.post(s.shards[0], move |ctx| ctx.write_behind(id, &data));
                return Ok(n);
            }
        }
        self.write_on_loop(&s, buf, wait, urgent)
    }

    /// A write handed to the loop (behind the bytes written before it): the stack's
    /// `tcp_send`, or its `tcp_send_urgent` if `urgent`.
    fn write_on_loop(&self, s: &Sock, buf: &[u8], wait: Wait, urgent: bool) -> io::Result<usize> {
        let data: Arc<[u8]> = Arc::from(&buf[..buf.len().min(MAX_IO)]);
        self.op(s, 0, wait, move |ctx, id| {
            let l = ctx.local(id)?;
            if l.shut_pending.is_some() {
                return Err(errno(32 /* EPIPE */));
            }
            if !l.backlog.is_empty() {
                // Behind the backlog: wait for it to drain.
                return Err(errno(EAGAIN));
            }
            if urgent {
                ctx.with_stream(id, |x, rt| {
                    let now = rt.now();
                    rt.stack_mut()
                        .tcp_send_urgent(now, x.handle(), &data)
                        .map_err(|e| errno(e.errno()))
                })
            } else {
                ctx.with_stream(id, |x, rt| x.write(rt, &data))
            }
        })
    }

    /// `recv(MSG_PEEK)`: copy up to `buf.len()` received bytes without taking them (the
    /// next read returns them again; Linux `tcp_recvmsg` with `MSG_PEEK`): those the loop
    /// moved to the callers' side, at most [`RX_CAP`]. With nothing there, what a read
    /// says: `Ok(0)` at end of stream, the pending error (taken, as Linux's peek takes
    /// `sk_err`), or a wait as `wait` says. With `all` (`MSG_WAITALL`) it waits until
    /// `buf.len()` bytes (at most [`RX_CAP`]) are there, or the end or an error.
    pub fn peek(&self, fd: Fd, buf: &mut [u8], wait: Wait, all: bool) -> io::Result<usize> {
        let s = self.stream_sock(fd)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let want = if all { buf.len().min(RX_CAP) } else { 1 };
        loop {
            let seen = s.shared.generation();
            {
                let mut rx = lock(&s.shared.rx);
                let n = buf.len().min(rx.data.len());
                if n >= want || (n > 0 && (rx.eof || rx.err.is_some())) {
                    let (a, b) = rx.data.as_slices();
                    let first = n.min(a.len());
                    buf[..first].copy_from_slice(&a[..first]);
                    buf[first..n].copy_from_slice(&b[..n - first]);
                    return Ok(n);
                }
                if n == 0
                    && let Some(r) = rx.error_or_end(&s.shared.ready[0])
                {
                    return r;
                }
            }
            if !s.shared.wait_change(seen, wait) {
                return Err(errno(EAGAIN));
            }
        }
    }

    /// `shutdown(2)`.
    pub fn shutdown(&self, fd: Fd, how: Shutdown) -> io::Result<()> {
        let s = self.stream_sock(fd)?;
        if how != Shutdown::Read {
            s.shared.tx_credit.store(0, Ordering::Release);
        }
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            let l = ctx.socks.get_mut(&id).ok_or_else(|| errno(EBADF))?;
            if how != Shutdown::Read && !l.backlog.is_empty() {
                // The FIN goes after the bytes already written.
                l.shut_pending = Some(how);
                return Ok(());
            }
            ctx.with_stream(id, |x, rt| x.shutdown(rt, how))
        })
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, fd: Fd, on: bool) -> io::Result<()> {
        let s = self.stream_sock(fd)?;
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            ctx.with_stream(id, |x, rt| x.set_nodelay(rt, on))
        })?;
        s.shared.nodelay.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// `SO_LINGER` (whole seconds, as std's): `Some(Duration::ZERO)` makes the close a
    /// reset (RST, queued data dropped); a non-zero time does not make close wait.
    pub fn set_linger(&self, fd: Fd, linger: Option<Duration>) -> io::Result<()> {
        self.stream_op(fd, move |x, rt| x.set_linger(rt, linger))
    }

    /// `SO_KEEPALIVE`.
    pub fn set_keepalive(&self, fd: Fd, on: bool) -> io::Result<()> {
        self.stream_op(fd, move |x, rt| x.set_keepalive(rt, on))
    }

    /// `SO_SNDBUF` with Linux's semantics (doubled, autotuning off; see the runtime's
    /// `TcpStream::set_send_buffer_size`).
    pub fn set_send_buffer_size(&self, fd: Fd, bytes: usize) -> io::Result<()> {
        self.stream_op(fd, move |x, rt| x.set_send_buffer_size(rt, bytes))
    }

    /// `getsockopt(SO_SNDBUF)`.
    pub fn send_buffer_size(&self, fd: Fd) -> io::Result<usize> {
        self.stream_op(fd, move |x, rt| x.send_buffer_size(rt))
    }

    /// `SO_RCVBUF` with Linux's semantics (the caller-side buffer of up to [`RX_CAP`]
    /// comes on top).
    pub fn set_recv_buffer_size(&self, fd: Fd, bytes: usize) -> io::Result<()> {
        self.stream_op(fd, move |x, rt| x.set_recv_buffer_size(rt, bytes))
    }

    /// `getsockopt(SO_RCVBUF)`.
    pub fn recv_buffer_size(&self, fd: Fd) -> io::Result<usize> {
        self.stream_op(fd, move |x, rt| x.recv_buffer_size(rt))
    }

    /// `TCP_NODELAY` as last set.
    pub fn nodelay(&self, fd: Fd) -> io::Result<bool> {
        Ok(self.stream_sock(fd)?.shared.nodelay.load(Ordering::Relaxed))
    }

    /// Run `f` on the loop thread with `fd`'s stream and its runtime, and return its
    /// result (no wait): the socket options the C API sets and reads (`SO_KEEPALIVE`,
    /// `SO_LINGER`, `SO_RCVBUF`, `SO_SNDBUF`, `SO_ERROR`, ...). `ENOTSOCK` if not a
    /// stream.
    pub fn with_stream<T, F>(&self, fd: Fd, f: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: Fn(&api::TcpStream, &mut LoopRuntime) -> io::Result<T> + Clone + Send + 'static,
    {
        let s = self.stream_sock(fd)?;
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            ctx.with_stream(id, f.clone())
        })
    }

    /// What `ss -tmi` shows for the connection (addresses, state, queues, cwnd, RTT).
    pub fn tcp_info(&self, fd: Fd) -> io::Result<TcpInfo> {
        self.stream_op(fd, move |x, rt| x.info(rt))
    }

    /// Bytes a read would find (`ioctl(FIONREAD)`, `SIOCINQ`): those already moved to the
    /// callers' side ([`RX_CAP`] at most) and those still in the stack's receive queue.
    pub fn bytes_readable(&self, fd: Fd) -> io::Result<usize> {
        let s = self.stream_sock(fd)?;
        let here = lock(&s.shared.rx).data.len();
        let queued = self.tcp_info(fd).map_or(0, |i| i.recv_q);
        Ok(here + queued)
    }

    /// The connection's state.
    pub fn tcp_state(&self, fd: Fd) -> io::Result<State> {
        self.stream_op(fd, move |x, rt| x.state(rt))
    }

    /// Our address (`getsockname(2)`): a stream's, a listener's, a UDP socket's. A
    /// connection over IPv4 that an IPv6 socket made or accepted has `::ffff:a.b.c.d`.
    pub fn local_addr(&self, fd: Fd) -> io::Result<SocketAddr> {
        let s = self.sock(fd)?;
        self.op(&s, 0, Wait::Never, |ctx, id| match &ctx.local(id)?.sock {
            ApiSock::Listener(l) => Ok(l.local_addr()),
            ApiSock::Stream(t) => t.local_addr(ctx.rt),
            ApiSock::Udp(u) => u.local_sockaddr(ctx.rt),
        })
    }

    /// The peer's address (`getpeername(2)`): `ENOTCONN` for a UDP socket not connected.
    pub fn peer_addr(&self, fd: Fd) -> io::Result<SocketAddr> {
        let s = self.sock(fd)?;
        self.op(&s, 0, Wait::Never, |ctx, id| match &ctx.local(id)?.sock {
            ApiSock::Listener(_) => Err(errno(107 /* ENOTCONN */)),
            ApiSock::Stream(t) => t.peer_addr(ctx.rt),
            ApiSock::Udp(u) => u.peer_sockaddr(ctx.rt),
        })
    }

    /// `IPV6_V6ONLY` on an IPv6 UDP socket (every shard's part): on, it takes and sends
    /// IPv6 only; off (the default), a socket on `::` also takes IPv4 datagrams, their
    /// senders `::ffff:a.b.c.d`. `EAFNOSUPPORT` on an IPv4 socket; `ENOTSOCK` on a TCP
    /// one (a listener's is set as it listens: [`Net::tcp_listen_only_v6`]).
    pub fn udp_set_only_v6(&self, fd: Fd, on: bool) -> io::Result<()> {
        let s = self.udp_sock(fd)?;
        for part in 0..s.shards.len() {
            self.op(&s, part, Wait::Never, move |ctx, id| {
                ctx.with_udp(id, |x, rt| x.set_only_v6(rt, on))
            })?;
        }
        Ok(())
    }

    // ---- UDP -------------------------------------------------------------------------------

    /// A UDP socket bound to `addr` (port 0: an ephemeral port), on every shard (a
    /// sharded `Net` receives a datagram on the shard its 4-tuple hashes to; the port the
    /// first shard picks is bound on the others). It sends from shard 0.
    /// An IPv6 address makes an IPv6 socket (on `::`: dual-stack, see
    /// [`Net::udp_set_only_v6`]).
    pub fn udp_bind(&self, addr: impl Into<SocketAddr>) -> io::Result<Fd> {
        let addr = addr.into();
        let sock = Arc::new(self.new_sock(Kind::Udp, (0..self.shards()).collect()));
        let mut at = addr;
        for k in 0..self.shards() {
            let shared = sock.shared.clone();
            let local = self.call(k, move |ctx| {
                let u = api::UdpSocket::bind(ctx.rt, at)?;
                let local = u.local_sockaddr(ctx.rt)?;
                ctx.adopt(shared, k, ApiSock::Udp(u))?;
                Ok::<_, io::Error>(local)
            })??;
            // The other shards bind the port the first one picked.
            at = SocketAddr::new(addr.ip(), local.port());
        }
        Ok(self.insert(sock))
    }

    /// Send one datagram to `dst`: its length. `EMSGSIZE`, `ENETUNREACH`,
    /// `EAFNOSUPPORT` (`dst` of the other family; an IPv6 socket takes `::ffff:a.b.c.d`).
    pub fn send_to(&self, fd: Fd, buf: &[u8], dst: impl Into<SocketAddr>) -> io::Result<usize> {
        let dst = dst.into();
        let s = self.udp_sock(fd)?;
        let data: Arc<[u8]> = Arc::from(buf);
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            ctx.with_udp(id, |x, rt| x.send_to(rt, &data, dst))
        })
    }

    /// Send one datagram to the connected peer. `EDESTADDRREQ` if not connected.
    pub fn send(&self, fd: Fd, buf: &[u8]) -> io::Result<usize> {
        let s = self.udp_sock(fd)?;
        let data: Arc<[u8]> = Arc::from(buf);
        self.op(&s, 0, Wait::Never, move |ctx, id| {
            ctx.with_udp(id, |x, rt| x.send(rt, &data))
        })
    }

    /// Take one datagram (cut to `buf`) and its sender; waits as `wait` says.
    pub fn recv_from(&self, fd: Fd, buf: &mut [u8], wait: Wait) -> io::Result<(usize, SocketAddr)> {
        self.recv_from_any(fd, buf, wait, false)
    }

    /// `recv(MSG_PEEK)`: [`recv_from`](Net::recv_from) leaving the datagram queued (the
    /// stack's `udp_peek_from`): the next receive returns it again.
    pub fn peek_from(&self, fd: Fd, buf: &mut [u8], wait: Wait) -> io::Result<(usize, SocketAddr)> {
        self.recv_from_any(fd, buf, wait, true)
    }

    fn recv_from_any(
        &self,
        fd: Fd,
        buf: &mut [u8],
        wait: Wait,
        peek: bool,
    ) -> io::Result<(usize, SocketAddr)> {
        let s = self.udp_sock(fd)?;
        let n = buf.len();
        let (data, from) = self.on_any_part(&s, wait, |part| {
            self.op(&s, part, Wait::Never, move |ctx, id| {
                let mut v = vec![0u8; n];
                let (got, from) = ctx.with_udp(id, |x, rt| {
                    if peek {
                        let h = x.handle();
                        rt.stack_mut()
                            .udp_peek_from(h, &mut v)
                            .map_err(|e| errno(e.errno()))
                    } else {
                        x.recv_from_addr(rt, &mut v)
                    }
                })?;
                v.truncate(got);
                Ok((v, from))
            })
        })?;
        buf[..data.len()].copy_from_slice(&data);
        Ok((data.len(), from))
    }

    /// `connect(2)` on a UDP socket (`None`: dissolve). `EAFNOSUPPORT` for a peer of the
    /// other family (an IPv6 socket takes `::ffff:a.b.c.d`).
    pub fn udp_connect(&self, fd: Fd, peer: Option<SocketAddr>) -> io::Result<()> {
        let s = self.udp_sock(fd)?;
        for part in 0..s.shards.len() {
            self.op(&s, part, Wait::Never, move |ctx, id| {
                ctx.with_udp(id, |x, rt| x.connect_addr(rt, peer))
            })?;
        }
        Ok(())
    }
}

/// The most bytes one read or write call moves through the loop (a bigger buffer gets a
/// short count, as a socket's buffer sizes give).
pub const MAX_IO: usize = 256 * 1024;

/// Connect from a port whose replies hash back to this shard (a sharded `Net`), over the
/// IPv4 tuple or the IPv6 one (`::ffff:a.b.c.d` hashes as IPv4, as it goes over IPv4).
fn connect_on_shard(ctx: &mut Ctx<'_>, addr: SocketAddr) -> io::Result<api::TcpStream> {
    let stack = ctx.rt.stack();
    let sysctl = stack.sysctl();
    let lo = u16::try_from(sysctl.ip_local_port_min).unwrap_or(u16::MAX);
    let hi = u16::try_from(sysctl.ip_local_port_max).unwrap_or(u16::MAX);
    // The source the SYN will carry, whose tuple the port must hash home with: the
    // interface's IPv4 address, or for IPv6 the source the stack selects for `addr`
    // (`EADDRNOTAVAIL` without one, as Linux's `ip6_route_output` failing).
    let local_ip = stack
        .source_for(addr)
        .ok_or_else(|| errno(99 /* EADDRNOTAVAIL */))?;
    let mut refused: Vec<u16> = Vec::new();
    loop {
        let recent = &*ctx.recent;
        let Some(port) = ctx
            .rss
            .pick_local_port(local_ip, addr, ctx.shard, lo..=hi, &mut 0, |p| {
                refused.contains(&p) || recent.contains(p)
            })
        else {
            // Every free port was used lately: take the oldest back, or give up.
            if ctx.recent.forget_oldest() {
                continue;
            }
            return Err(errno(99 /* EADDRNOTAVAIL */));
        };
        // As it came: the stack marks a `::ffff:` connect v4-mapped.
        match api::TcpStream::connect_from(ctx.rt, port, addr) {
            Ok(s) => {
                ctx.recent.push(port);
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => refused.push(port),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, SocketAddrV4};
    use ustack_dev::sim::SimLinkConfig;
    use ustack_runtime::runtime::{RuntimeBuilder, sim_pair};

    /// A write handed over beyond the room in the send buffer (the credit overshot) waits
    /// in the loop's backlog, goes out in order as room comes, and a close waits for it:
    /// the peer reads every byte, in order, then EOF.
    #[test]
    fn the_backlog_keeps_order_and_delays_the_close() {
        let (a, b) = sim_pair(SimLinkConfig::default());
        let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7);
        let mut srt = RuntimeBuilder::new()
            .ipv4(*addr.ip(), 24)
            .seed(1)
            .build(DynLink::new(a))
            .unwrap();
        let crt = RuntimeBuilder::new()
            .ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
            .seed(2)
            .build(DynLink::new(b))
            .unwrap();
        let listener = api::TcpListener::bind(&mut srt, addr, 8).unwrap();
        let kick = Arc::new(Kick::new().unwrap());
        let mut client = Member {
            rt: crt,
            socks: HashMap::new(),
            queue: Arc::new(Queue::new(kick)),
            events: Events::with_capacity(64),
            jobs: Vec::new(),
            shard: 0,
            shards: 1,
            rss: default_rss(1),
            recent: RecentPorts::default(),
            scratch: vec![0; 16 * 1024],
        };
        let shared = Arc::new(SockShared::new(1, 1));
        let adopted = shared.clone();
        client.queue.push(Box::new(move |ctx| {
            let s = api::TcpStream::connect(ctx.rt, addr).unwrap();
            ctx.adopt(adopted, 0, ApiSock::Stream(s)).unwrap();
        }));
        let mut server = None;
        for _ in 0..10_000 {
            client.turn().unwrap();
            srt.run_once(Some(Duration::ZERO)).unwrap();
            if let Ok((s, _)) = listener.accept(&mut srt) {
                server = Some(s);
                break;
            }
        }
        let server = server.expect("accepted");
        // More than the send buffer holds, in one write: the rest waits in the backlog.
        let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let out = data.clone();
        client
            .queue
            .push(Box::new(move |ctx| ctx.write_behind(1, &out)));
        client.turn().unwrap();
        assert!(
            !client.socks[&1].backlog.is_empty(),
            "the stack took all {} bytes at once",
            data.len()
        );
        // Closed by the application now: the close waits for the backlog.
        client.queue.push(Box::new(|ctx| ctx.remove(1)));
        client.turn().unwrap();
        assert!(client.socks.get(&1).is_some_and(|l| l.closing));
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        for _ in 0..1_000_000 {
            client.turn().unwrap();
            srt.run_once(Some(Duration::ZERO)).unwrap();
            match server.read(&mut srt, &mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("server read: {e}"),
            }
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "bytes out of order or changed");
        assert!(client.socks.is_empty(), "closed once the backlog drained");
        assert_eq!(shared.tx_err.load(Ordering::Relaxed), 0);
    }
}
