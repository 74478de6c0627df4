//! The ustack backend: ustack's [`Stack`] on a virtual clock, deterministic and fast.
//!
//! The stack has an IP-level interface (raw IPv4 or IPv6 packets in and out, as over a
//! TUN) with the script's local address ([`Config::local_ip`], /24, a gateway for the
//! remote network; under `--ip_version=ipv6` also [`Config::local_ip6`], /48, a gateway for
//! the rest, and the MTU of [`Config::mtu`]); sockets are `AF_INET` or `AF_INET6`, an
//! `AF_INET6` socket taking IPv4-mapped addresses (`ipv4-mapped-ipv6`) as Linux does. It is
//! driven in the caller's thread: [`Backend::netdev_send`] hands it a
//! packet at the current virtual time; [`Backend::netdev_receive`] returns the next packet
//! it sends, moving the clock to the stack's next timer (retransmission, delayed ACK,
//! probes, keepalive) or a blocked call's deadline until one comes out, and returns
//! nothing once the timeout is reached (the clock then stands at the deadline). Nothing
//! sleeps: a script with a 3-second backoff runs in microseconds of real time.
//!
//! Why not the C API (`ustack-capi`, over `ustack-net`): that layer runs the stack's loop
//! on a thread of its own on the monotonic clock, so the time a packet leaves depends on
//! the scheduler, and a virtual clock would need a caller-driven mode in `ustack-net`'s
//! loop and every parked call. The backend owns the stack directly instead, under one
//! lock, and maps the system calls onto the stack's socket calls itself (with `capi`'s
//! option table and `struct tcp_info` layout); the packetdrill shared library
//! (`crates/pdlib`) is a thin FFI over this backend.
//!
//! Blocking calls: a call on a blocking socket that cannot complete (accept with an empty
//! queue, connect before the SYN-ACK, read with nothing to read, poll/epoll_wait with a
//! timeout) is registered as *blocked* and its thread parks. Whoever changes the stack's
//! state next (a packet in, a timer, another call) retries every blocked call in that
//! same step, under the lock, at that virtual time: a blocked call completes exactly when
//! the event that unblocks it happens, whatever the threads do. The time it completed is
//! what [`Backend::returned_at_us`] reports to the thread that made it.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

// The C API crate (`ustack-capi`, whose library is named `ustack`): its option table.
use ::ustack::opts;
use ustack_stack::tcp::State;
use ustack_stack::{
    Error, Instant, Ipv4Cidr, Ipv6Cidr, ListenerHandle, Readiness, Shutdown, SocketKey, Stack,
    TcpHandle, TcpOpt, TcpOptValues, UdpHandle,
};

use crate::backend::{Backend, EpollEvent, PollFd, SysResult};
use crate::exec::Config;

/// Where the virtual clock starts: not at zero, which the stack reads as "never" in
/// places (a request's `synack_at`), as a real clock never reads zero either.
const EPOCH: Instant = Instant::from_micros(1_000_000);

/// The longest one wait may move the clock (a day: far past any script, and no
/// overflow of the clock for a caller's huge timeout).
const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// The first descriptor number the backend hands out (as a process after stdio).
const FIRST_FD: i32 = 3;

/// What a blocked call gives back: its result and what it wrote for the caller.
#[derive(Debug, Clone)]
enum Out {
    None,
    Bytes(Vec<u8>),
    Poll(Vec<PollFd>),
    Epoll(Vec<EpollEvent>),
}

type Done = (SysResult, Out);

/// A try of a call: done, or it must wait (on a blocking socket).
enum Try {
    Done(Done),
    Block,
}

/// A TCP socket's stage.
#[derive(Debug, Clone, Copy)]
enum Tcp {
    /// Made, maybe bound.
    Fresh,
    Listener(ListenerHandle),
    Conn {
        h: TcpHandle,
        /// A connect in progress not yet reported (by connect, SO_ERROR or I/O).
        connecting: bool,
    },
    /// A connection that failed, or was refused, and was reported.
    Dead,
}

/// Socket options held until the connection exists.
#[derive(Debug, Clone, Copy, Default)]
struct Opts {
    reuseaddr: bool,
    nodelay: bool,
    keepalive: bool,
    cork: bool,
    linger: Option<Duration>,
    rcvbuf: Option<usize>,
    sndbuf: Option<usize>,
    /// `TCP_MAXSEG`, `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT` as set.
    tcp: TcpOptValues,
}

#[derive(Debug)]
enum Obj {
    Tcp {
        /// An `AF_INET6` socket.
        v6: bool,
        bound: Option<SocketAddr>,
        stage: Tcp,
        opts: Opts,
        nonblock: bool,
        /// A pending error to report once (a failed non-blocking connect).
        error: i32,
    },
    Udp {
        /// An `AF_INET6` socket.
        v6: bool,
        h: Option<UdpHandle>,
        peer: Option<SocketAddr>,
        nonblock: bool,
    },
    /// An epoll set: descriptor -> (events, data); level-triggered.
    Epoll(BTreeMap<i32, (u32, u64)>),
}

/// A blocked call's next try: its result once it can complete.
type Retry = Box<dyn FnMut(&mut Inner) -> Option<Done> + Send>;

/// A blocked call: retried on every state change until it completes.
struct Blocked {
    retry: Retry,
    /// When it gives up by itself (poll and epoll_wait timeouts).
    deadline: Option<Instant>,
    slot: Arc<Mutex<Option<(Done, u64)>>>,
}

struct Inner {
    stack: Stack,
    now: Instant,
    /// Packets the stack sent, stamped, not yet taken.
    out: VecDeque<(Vec<u8>, u64)>,
    fds: BTreeMap<i32, Obj>,
    blocked: Vec<Blocked>,
    freed: bool,
    next_port: u16,
}

/// ustack as a [`Backend`] (see the module docs).
pub struct Ustack {
    inner: Mutex<Inner>,
    /// Signalled when a blocked call completes or the backend is freed.
    cv: Condvar,
}

impl core::fmt::Debug for Ustack {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Ustack").finish_non_exhaustive()
    }
}

thread_local! {
    /// When the last call this thread made returned, on the virtual clock.
    static RETURNED_AT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The stack's configuration for a run: an IP interface at `cfg.local_ip`/24, routed to
/// the remote end through a gateway, Linux's defaults, a fixed seed (a run replays
/// exactly), and `sysctls` by Linux name.
pub fn stack_config(cfg: &Config, sysctls: &[(String, u64)]) -> io::Result<ustack_stack::Config> {
    let mut c = ustack_stack::Config::ip(Ipv4Cidr::new(cfg.local_ip, 24));
    let o = cfg.local_ip.octets();
    c.gateway = Some(Ipv4Addr::new(
        o[0],
        o[1],
        o[2],
        if o[3] == 254 { 1 } else { 254 },
    ));
    c.mtu = cfg.mtu();
    if cfg.ip_version.wire_ipv6() {
        // packetdrill's local prefix is a /48, its gateway in it (`config.c`).
        c.ipv6.push(Ipv6Cidr::new(cfg.local_ip6, 48));
        let s = cfg.local_ip6.segments();
        c.gateway6 = Some(Ipv6Addr::new(s[0], s[1], s[2], 0x8888, 0, 0, 0, 1));
    }
    c.seed = Some(1);
    for (name, value) in sysctls {
        c.sysctl
            .set(name, *value)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: {e}")))?;
    }
    Ok(c)
}

fn errno(e: Error) -> i32 {
    e.errno()
}

/// `addr` for a socket of the family `v6` says: an IPv6 address (IPv4-mapped ones
/// included) for `AF_INET6`, IPv4 for `AF_INET` (Linux `inet_bind`, `inet6_bind`: the
/// other family is `EAFNOSUPPORT` / `EINVAL`).
fn of_family(addr: SocketAddr, v6: bool) -> Result<SocketAddr, i32> {
    match (addr, v6) {
        (SocketAddr::V4(_), false) | (SocketAddr::V6(_), true) => Ok(addr),
        (SocketAddr::V6(_), false) => Err(libc::EAFNOSUPPORT),
        (SocketAddr::V4(_), true) => Err(libc::EINVAL),
    }
}

/// The unspecified address of the family (`0.0.0.0` or `::`).
fn any(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)
    } else {
        SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port)
    }
}

/// An address as an `AF_INET6` socket sees it: IPv4 ones mapped (the stack reports an
/// IPv4 connection's ends as IPv4).
fn as_family(a: SocketAddr, v6: bool) -> SocketAddr {
    match (a, v6) {
        (SocketAddr::V4(a4), true) => SocketAddr::new(a4.ip().to_ipv6_mapped().into(), a.port()),
        _ => a,
    }
}

fn int_bytes(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

fn sat(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl Ustack {
    /// A fresh stack as `stack_config` says, its clock at zero.
    pub fn new(cfg: &Config, sysctls: &[(String, u64)]) -> io::Result<Ustack> {
        let stack = Stack::new(stack_config(cfg, sysctls)?);
        Ok(Ustack {
            inner: Mutex::new(Inner {
                stack,
                now: EPOCH,
                out: VecDeque::new(),
                fds: BTreeMap::new(),
                blocked: Vec::new(),
                freed: false,
                next_port: 40_000,
            }),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a call: at once if it can complete, else (blocking) until a state change lets
    /// it, or its deadline passes (`retry` is asked once more then, and must answer).
    fn call(
        &self,
        deadline: Option<Instant>,
        mut retry: impl FnMut(&mut Inner) -> Try + Send + 'static,
    ) -> Done {
        let mut g = self.lock();
        if g.freed {
            return (Err(libc::EBADF), Out::None);
        }
        let first = retry(&mut g);
        g.settle(&self.cv);
        let at = g.now.as_micros();
        let slot = match first {
            Try::Done(d) => {
                RETURNED_AT.with(|c| c.set(Some(at)));
                return d;
            }
            Try::Block => {
                let slot = Arc::new(Mutex::new(None));
                g.blocked.push(Blocked {
                    retry: Box::new(move |i: &mut Inner| match retry(i) {
                        Try::Done(d) => Some(d),
                        Try::Block => None,
                    }),
                    deadline,
                    slot: slot.clone(),
                });
                self.cv.notify_all();
                slot
            }
        };
        loop {
            if let Some((d, at)) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                RETURNED_AT.with(|c| c.set(Some(at)));
                return d;
            }
            if g.freed {
                RETURNED_AT.with(|c| c.set(Some(g.now.as_micros())));
                return (Err(libc::EBADF), Out::None);
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn simple(&self, f: impl FnOnce(&mut Inner) -> SysResult) -> SysResult {
        let mut g = self.lock();
        if g.freed {
            return Err(libc::EBADF);
        }
        let r = f(&mut g);
        g.settle(&self.cv);
        RETURNED_AT.with(|c| c.set(Some(g.now.as_micros())));
        r
    }

    /// Moves the clock towards `until`, running the stack's timers and blocked calls'
    /// deadlines on the way, until a packet comes out (returned) or `until` is reached.
    fn advance(&self, until: Instant, want_packet: bool) -> Option<(Vec<u8>, u64)> {
        let mut g = self.lock();
        loop {
            g.settle(&self.cv);
            if want_packet && let Some(p) = g.out.pop_front() {
                return Some(p);
            }
            if g.freed {
                return None;
            }
            let next = [
                g.stack.poll_timeout(),
                g.blocked.iter().filter_map(|b| b.deadline).min(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= until => {
                    if t > g.now {
                        g.now = t;
                    }
                    let now = g.now;
                    g.stack.handle_timeout(now);
                    // A timer that is due but did nothing would spin: step past it.
                    g.settle(&self.cv);
                    if g.out.is_empty()
                        && g.stack.poll_timeout().is_some_and(|n| n <= now)
                        && g.blocked.iter().all(|b| b.deadline.is_none_or(|d| d > now))
                    {
                        g.now = now + Duration::from_micros(1);
                    }
                }
                _ => {
                    if until > g.now {
                        g.now = until;
                    }
                    g.settle(&self.cv);
                    return if want_packet { g.out.pop_front() } else { None };
                }
            }
        }
    }
}

impl Inner {
    /// After any change: takes what the stack sends (stamped now) and retries the
    /// blocked calls until none completes any more, waking the threads of those done.
    fn settle(&mut self, cv: &Condvar) {
        loop {
            self.drain();
            let mut progressed = false;
            let mut blocked = core::mem::take(&mut self.blocked);
            let mut i = 0;
            while i < blocked.len() {
                let done = (blocked[i].retry)(self);
                if let Some(d) = done {
                    let b = blocked.swap_remove(i);
                    *b.slot.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((d, self.now.as_micros()));
                    progressed = true;
                } else {
                    i += 1;
                }
            }
            blocked.append(&mut self.blocked);
            self.blocked = blocked;
            if progressed {
                cv.notify_all();
            } else {
                self.drain();
                return;
            }
        }
    }

    fn drain(&mut self) {
        let now = self.now;
        while let Some(p) = self.stack.poll_transmit(now) {
            self.out.push_back((p, now.as_micros()));
        }
    }

    fn obj(&mut self, fd: i32) -> Result<&mut Obj, i32> {
        self.fds.get_mut(&fd).ok_or(libc::EBADF)
    }

    fn add(&mut self, obj: Obj) -> i32 {
        let mut fd = FIRST_FD;
        while self.fds.contains_key(&fd) {
            fd += 1;
        }
        self.fds.insert(fd, obj);
        fd
    }

    /// What `fd` is ready for (Linux's poll bits), `None` for a descriptor that is gone.
    fn readiness(&mut self, fd: i32) -> Option<u32> {
        let r = match self.fds.get(&fd)? {
            Obj::Tcp { stage, error, .. } => match *stage {
                // Linux tcp_poll on a CLOSE socket: EPOLLOUT | EPOLLHUP.
                Tcp::Fresh | Tcp::Dead => {
                    let mut r = Readiness::HUP | Readiness::WRITABLE;
                    if *error != 0 {
                        r |= Readiness::ERROR;
                    }
                    r
                }
                Tcp::Listener(l) => self.stack.readiness(SocketKey::Listener(l)),
                Tcp::Conn { h, .. } => self.stack.readiness(SocketKey::Tcp(h)),
            },
            Obj::Udp { h: Some(h), .. } => self.stack.readiness(SocketKey::Udp(*h)),
            Obj::Udp { h: None, .. } => Readiness::WRITABLE,
            Obj::Epoll(_) => Readiness::EMPTY,
        };
        Some(r.to_epoll())
    }

    fn ephemeral(&mut self) -> u16 {
        self.next_port = if self.next_port >= 60_999 {
            40_000
        } else {
            self.next_port + 1
        };
        self.next_port
    }

    /// Gives a new connection the options set on its socket before it existed.
    fn apply(&mut self, h: TcpHandle, o: Opts) {
        let now = self.now;
        let s = &mut self.stack;
        if o.nodelay {
            s.tcp_set_nodelay(now, h, true).ok();
        }
        if o.keepalive {
            s.tcp_set_keepalive(now, h, true).ok();
        }
        if o.linger.is_some() {
            s.tcp_set_linger(h, o.linger).ok();
        }
        if let Some(n) = o.rcvbuf {
            s.tcp_set_recv_buffer(h, n).ok();
        }
        if let Some(n) = o.sndbuf {
            s.tcp_set_send_buffer(h, n).ok();
        }
        if o.reuseaddr {
            s.tcp_set_reuseaddr(h, true).ok();
        }
        if o.cork {
            s.tcp_set_cork(now, h, true).ok();
        }
        for (opt, v) in o.tcp.iter() {
            s.tcp_set_opt(now, h, opt, v).ok();
        }
    }

    /// Gives a new listener the options its connections inherit (Linux `sk_clone_lock`).
    fn apply_listener(&mut self, l: ListenerHandle, o: Opts) {
        let s = &mut self.stack;
        s.tcp_listener_set_reuseaddr(l, o.reuseaddr).ok();
        for (opt, v) in o.tcp.iter() {
            s.tcp_listener_set_opt(l, opt, v).ok();
        }
    }

    /// The connection of a TCP descriptor; a connect in progress that has finished is
    /// settled here (its error, if it failed, is returned once).
    fn conn(&mut self, fd: i32) -> Result<(TcpHandle, bool), i32> {
        let Obj::Tcp { stage, error, .. } = self.fds.get_mut(&fd).ok_or(libc::EBADF)? else {
            return Err(libc::ENOTCONN);
        };
        if *error != 0 {
            return Err(core::mem::take(error));
        }
        match *stage {
            Tcp::Conn { h, connecting } => Ok((h, connecting)),
            Tcp::Dead => Err(libc::EPIPE),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// `read`/`recv` on a TCP or UDP descriptor.
    fn recv(&mut self, fd: i32, len: usize, flags: i32) -> Try {
        let now = self.now;
        let nb_flag = flags & libc::MSG_DONTWAIT != 0;
        let peek = flags & libc::MSG_PEEK != 0;
        if flags & !(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_PEEK) != 0 {
            // MSG_OOB (ustack has no urgent data), MSG_WAITALL ...: not here.
            return Try::Done((Err(libc::EOPNOTSUPP), Out::None));
        }
        let (nonblock, udp) = match self.fds.get(&fd) {
            None => return Try::Done((Err(libc::EBADF), Out::None)),
            Some(Obj::Tcp { nonblock, .. }) => (*nonblock || nb_flag, None),
            Some(Obj::Udp { h, nonblock, .. }) => (*nonblock || nb_flag, Some(*h)),
            Some(Obj::Epoll(_)) => return Try::Done((Err(libc::EINVAL), Out::None)),
        };
        let mut buf = vec![0u8; len];
        let r = match udp {
            // MSG_PEEK on a datagram socket: not here.
            Some(_) if peek => Err(libc::EOPNOTSUPP),
            Some(None) => Err(libc::EAGAIN),
            Some(Some(h)) => self
                .stack
                .udp_recv_from_addr(h, &mut buf)
                .map(|(n, _)| n)
                .map_err(errno),
            None => match self.conn(fd) {
                Err(e) => Err(e),
                Ok((h, _)) if peek => self.stack.tcp_peek(now, h, &mut buf).map_err(errno),
                Ok((h, _)) => self.stack.tcp_recv(now, h, &mut buf).map_err(errno),
            },
        };
        match r {
            Ok(n) => {
                buf.truncate(n);
                Try::Done((Ok(n as i64), Out::Bytes(buf)))
            }
            Err(libc::EAGAIN) if !nonblock => Try::Block,
            Err(e) => Try::Done((Err(e), Out::None)),
        }
    }

    /// `write`/`send`: all of `data` on a blocking socket (waiting for room), what fits
    /// on a non-blocking one.
    fn send(&mut self, fd: i32, data: &[u8], sent: &mut usize, flags: i32) -> Try {
        let now = self.now;
        let oob = flags & libc::MSG_OOB != 0;
        if flags & !(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_OOB) != 0 {
            return Try::Done((Err(libc::EOPNOTSUPP), Out::None));
        }
        let nb_flag = flags & libc::MSG_DONTWAIT != 0;
        let (nonblock, udp) = match self.fds.get(&fd) {
            None => return Try::Done((Err(libc::EBADF), Out::None)),
            Some(Obj::Tcp { nonblock, .. }) => (*nonblock || nb_flag, None),
            Some(Obj::Udp { h, peer, .. }) => (true, Some((*h, *peer))),
            Some(Obj::Epoll(_)) => return Try::Done((Err(libc::EINVAL), Out::None)),
        };
        if let Some((h, peer)) = udp {
            // Linux udp_sendmsg: "if (msg->msg_flags & MSG_OOB) return -EOPNOTSUPP;".
            if oob {
                return Try::Done((Err(libc::EOPNOTSUPP), Out::None));
            }
            let (Some(h), Some(peer)) = (h, peer) else {
                return Try::Done((Err(libc::EDESTADDRREQ), Out::None));
            };
            let r = self.stack.udp_send_to(now, h, data, peer).map_err(errno);
            return Try::Done((r.map(|()| data.len() as i64), Out::None));
        }
        let h = match self.conn(fd) {
            Ok((h, _)) => h,
            // Linux sk_stream_wait_connect: writing on a socket that is not connecting
            // or connected is EPIPE.
            Err(libc::ENOTCONN) => return Try::Done((Err(libc::EPIPE), Out::None)),
            Err(e) => return Try::Done((Err(e), Out::None)),
        };
        loop {
            if *sent == data.len() {
                return Try::Done((Ok(*sent as i64), Out::None));
            }
            let r = if oob {
                self.stack.tcp_send_urgent(now, h, &data[*sent..])
            } else {
                self.stack.tcp_send(now, h, &data[*sent..])
            };
            match r {
                Ok(0) | Err(Error::WouldBlock) => {
                    if nonblock {
                        return Try::Done(if *sent > 0 {
                            (Ok(*sent as i64), Out::None)
                        } else {
                            (Err(libc::EAGAIN), Out::None)
                        });
                    }
                    return Try::Block;
                }
                Ok(n) => *sent += n,
                Err(e) if *sent > 0 => {
                    let _ = e;
                    return Try::Done((Ok(*sent as i64), Out::None));
                }
                Err(e) => return Try::Done((Err(errno(e)), Out::None)),
            }
        }
    }

    fn accept(&mut self, fd: i32, flags: i32) -> Try {
        let (l, nonblock, opts, v6) = match self.fds.get(&fd) {
            Some(Obj::Tcp {
                stage: Tcp::Listener(l),
                nonblock,
                opts,
                v6,
                ..
            }) => (*l, *nonblock, *opts, *v6),
            Some(Obj::Tcp { .. }) | Some(Obj::Udp { .. }) | Some(Obj::Epoll(_)) => {
                return Try::Done((Err(libc::EINVAL), Out::None));
            }
            None => return Try::Done((Err(libc::EBADF), Out::None)),
        };
        match self.stack.tcp_accept_addr(l) {
            Ok((h, _peer)) => {
                // Linux: the accepted socket inherits the listener's options
                // (sk_clone_lock), not O_NONBLOCK (unless accept4 asks for it).
                self.apply(h, opts);
                let local = self.stack.tcp_info(h).ok().map(|i| as_family(i.local, v6));
                let new = self.add(Obj::Tcp {
                    v6,
                    bound: local,
                    stage: Tcp::Conn {
                        h,
                        connecting: false,
                    },
                    opts,
                    nonblock: flags & libc::SOCK_NONBLOCK != 0,
                    error: 0,
                });
                Try::Done((Ok(i64::from(new)), Out::None))
            }
            Err(Error::WouldBlock) if !nonblock => Try::Block,
            Err(e) => Try::Done((Err(errno(e)), Out::None)),
        }
    }

    /// A connect in progress: done once established (0) or failed (its errno).
    fn connect_progress(&mut self, fd: i32, h: TcpHandle, nonblock: bool) -> Try {
        let set = |i: &mut Inner, stage: Tcp| {
            if let Some(Obj::Tcp { stage: s, .. }) = i.fds.get_mut(&fd) {
                *s = stage;
            }
        };
        match self.stack.tcp_state(h) {
            Ok(State::SynSent | State::SynReceived) => {
                if nonblock {
                    Try::Done((Err(libc::EALREADY), Out::None))
                } else {
                    Try::Block
                }
            }
            Ok(_) => match self.stack.tcp_take_error(h) {
                Ok(Some(e)) => {
                    set(self, Tcp::Dead);
                    self.stack.tcp_abort(self.now, h).ok();
                    Try::Done((Err(errno(e)), Out::None))
                }
                _ => {
                    set(
                        self,
                        Tcp::Conn {
                            h,
                            connecting: false,
                        },
                    );
                    Try::Done((Ok(0), Out::None))
                }
            },
            Err(e) => {
                set(self, Tcp::Dead);
                Try::Done((Err(errno(e)), Out::None))
            }
        }
    }

    fn getsockopt(&mut self, fd: i32, level: i32, name: i32) -> Result<Vec<u8>, i32> {
        let opt = opts::Opt::lookup(level, name).map_err(|e| e.errno)?;
        let (stage, o, udp, v6) = match self.fds.get(&fd).ok_or(libc::EBADF)? {
            Obj::Tcp {
                stage, opts, v6, ..
            } => (Some(*stage), *opts, false, *v6),
            Obj::Udp { v6, .. } => (None, Opts::default(), true, *v6),
            Obj::Epoll(_) => return Err(libc::ENOTSOCK),
        };
        if udp && opt.is_tcp() {
            return Err(libc::EOPNOTSUPP);
        }
        let conn = match stage {
            Some(Tcp::Conn { h, .. }) => Some(h),
            _ => None,
        };
        use opts::Opt;
        let s = &self.stack;
        Ok(match opt {
            Opt::ReuseAddr => int_bytes(i32::from(o.reuseaddr)),
            Opt::ReusePort => int_bytes(0),
            Opt::Type => int_bytes(if udp {
                libc::SOCK_DGRAM
            } else {
                libc::SOCK_STREAM
            }),
            Opt::Domain => int_bytes(if v6 { libc::AF_INET6 } else { libc::AF_INET }),
            Opt::Protocol => int_bytes(if udp {
                libc::IPPROTO_UDP
            } else {
                libc::IPPROTO_TCP
            }),
            Opt::AcceptConn => int_bytes(i32::from(matches!(stage, Some(Tcp::Listener(_))))),
            Opt::Error => int_bytes(self.take_error(fd)),
            Opt::RcvBuf => match conn {
                Some(h) => int_bytes(sat(s.tcp_recv_buffer(h).map_err(errno)?)),
                None => int_bytes(sat(o.rcvbuf.map_or(131_072, |n| n.saturating_mul(2)))),
            },
            Opt::SndBuf => match conn {
                Some(h) => int_bytes(sat(s.tcp_send_buffer(h).map_err(errno)?)),
                None => int_bytes(sat(o.sndbuf.map_or(16_384, |n| n.saturating_mul(2)))),
            },
            Opt::KeepAlive => int_bytes(i32::from(o.keepalive)),
            Opt::Linger => opts::linger_bytes(o.linger),
            Opt::RcvTimeo | Opt::SndTimeo => opts::timeval_bytes(None),
            Opt::NoDelay => int_bytes(i32::from(o.nodelay)),
            Opt::Cork => int_bytes(i32::from(o.cork)),
            Opt::MaxSeg | Opt::KeepIdle | Opt::KeepIntvl | Opt::KeepCnt => {
                let t = opt.tcp_opt().ok_or(libc::ENOPROTOOPT)?;
                int_bytes(match stage {
                    Some(Tcp::Conn { h, .. }) => s.tcp_opt(h, t).map_err(errno)?,
                    Some(Tcp::Listener(l)) => s.tcp_listener_opt(l, t).map_err(errno)?,
                    // Linux: the value set, else TCP_MSS_DEFAULT (536) or the sysctl.
                    _ => match (o.tcp.get(t), t) {
                        (Some(v), _) => v,
                        (None, TcpOpt::MaxSeg) => 536,
                        (None, TcpOpt::KeepIdle) => sat(s.sysctl().tcp_keepalive_time as usize),
                        (None, TcpOpt::KeepIntvl) => sat(s.sysctl().tcp_keepalive_intvl as usize),
                        (None, TcpOpt::KeepCnt) => sat(s.sysctl().tcp_keepalive_probes as usize),
                    },
                })
            }
            // Its sockets are AF_INET: Linux's ip_getsockopt knows no IPPROTO_IPV6.
            Opt::V6Only | Opt::UnicastHops => return Err(libc::ENOPROTOOPT),
            Opt::Info => match stage {
                Some(Tcp::Conn { h, .. }) => match s.tcp_info(h) {
                    Ok(i) => opts::tcp_info_bytes(&i).to_vec(),
                    Err(_) => opts::tcp_info_state_only(State::Closed).to_vec(),
                },
                Some(Tcp::Listener(_)) => opts::tcp_info_state_only(State::Listen).to_vec(),
                _ => opts::tcp_info_state_only(State::Closed).to_vec(),
            },
        })
    }

    /// `SO_ERROR`: the pending error, reported and cleared (Linux `sock_error`).
    fn take_error(&mut self, fd: i32) -> i32 {
        let (stage, err) = match self.fds.get_mut(&fd) {
            Some(Obj::Tcp { stage, error, .. }) => (*stage, core::mem::take(error)),
            Some(Obj::Udp { h: Some(h), .. }) => {
                let h = *h;
                return self.stack.udp_take_error(h).ok().flatten().map_or(0, errno);
            }
            _ => return 0,
        };
        if err != 0 {
            return err;
        }
        match stage {
            Tcp::Conn {
                h,
                connecting: true,
            } => match self.connect_progress(fd, h, true) {
                Try::Done((Err(libc::EALREADY), _)) | Try::Block => 0,
                Try::Done((Err(e), _)) => e,
                Try::Done((Ok(_), _)) => 0,
            },
            Tcp::Conn { h, .. } => self.stack.tcp_take_error(h).ok().flatten().map_or(0, errno),
            _ => 0,
        }
    }

    fn setsockopt(&mut self, fd: i32, level: i32, name: i32, v: &[u8]) -> SysResult {
        use opts::Opt;
        let opt = Opt::lookup(level, name).map_err(|e| e.errno)?;
        let now = self.now;
        let on = || opts::int(v).map(|n| n != 0).map_err(|e| e.errno);
        let size = || {
            opts::int(v)
                .map(|n| usize::try_from(n).unwrap_or(0))
                .map_err(|e| e.errno)
        };
        let Some(Obj::Tcp { stage, opts: o, .. }) = self.fds.get_mut(&fd) else {
            return match self.fds.get(&fd) {
                None => Err(libc::EBADF),
                Some(Obj::Epoll(_)) => Err(libc::ENOTSOCK),
                // UDP: the generic socket options are accepted and have no effect here.
                Some(_) if !opt.is_tcp() => Ok(0),
                Some(_) => Err(libc::EOPNOTSUPP),
            };
        };
        let conn = match *stage {
            Tcp::Conn { h, .. } => Some(h),
            _ => None,
        };
        let listener = match *stage {
            Tcp::Listener(l) => Some(l),
            _ => None,
        };
        let s = &mut self.stack;
        match opt {
            Opt::ReuseAddr => {
                let b = on()?;
                if let Some(h) = conn {
                    s.tcp_set_reuseaddr(h, b).map_err(errno)?;
                }
                if let Some(l) = listener {
                    s.tcp_listener_set_reuseaddr(l, b).map_err(errno)?;
                }
                o.reuseaddr = b;
            }
            Opt::ReusePort => {
                on()?;
            }
            Opt::RcvBuf => {
                let n = size()?;
                if let Some(h) = conn {
                    s.tcp_set_recv_buffer(h, n).map_err(errno)?;
                }
                o.rcvbuf = Some(n);
            }
            Opt::SndBuf => {
                let n = size()?;
                if let Some(h) = conn {
                    s.tcp_set_send_buffer(h, n).map_err(errno)?;
                }
                o.sndbuf = Some(n);
            }
            Opt::KeepAlive => {
                let b = on()?;
                if let Some(h) = conn {
                    s.tcp_set_keepalive(now, h, b).map_err(errno)?;
                }
                o.keepalive = b;
            }
            Opt::Linger => {
                let l = opts::linger(v).map_err(|e| e.errno)?;
                if let Some(h) = conn {
                    s.tcp_set_linger(h, l).map_err(errno)?;
                }
                o.linger = l;
            }
            Opt::RcvTimeo | Opt::SndTimeo => return Err(libc::ENOPROTOOPT),
            // AF_INET sockets: Linux's ip_setsockopt knows no IPPROTO_IPV6.
            Opt::V6Only | Opt::UnicastHops => return Err(libc::ENOPROTOOPT),
            Opt::NoDelay => {
                let b = on()?;
                if let Some(h) = conn {
                    s.tcp_set_nodelay(now, h, b).map_err(errno)?;
                }
                o.nodelay = b;
            }
            Opt::Error | Opt::Type | Opt::Domain | Opt::Protocol | Opt::AcceptConn | Opt::Info => {
                return Err(libc::ENOPROTOOPT);
            }
            Opt::Cork => {
                let b = on()?;
                if let Some(h) = conn {
                    s.tcp_set_cork(now, h, b).map_err(errno)?;
                }
                o.cork = b;
            }
            Opt::MaxSeg | Opt::KeepIdle | Opt::KeepIntvl | Opt::KeepCnt => {
                let t = opt.tcp_opt().ok_or(libc::ENOPROTOOPT)?;
                let v = opts::int(v).map_err(|e| e.errno)?;
                t.check(v).map_err(errno)?;
                if let Some(h) = conn {
                    s.tcp_set_opt(now, h, t, v).map_err(errno)?;
                }
                if let Some(l) = listener {
                    s.tcp_listener_set_opt(l, t, v).map_err(errno)?;
                }
                o.tcp.set(t, v);
            }
        }
        Ok(0)
    }

    fn poll(&mut self, fds: &[PollFd]) -> (usize, Vec<PollFd>) {
        let mut out = fds.to_vec();
        let mut n = 0;
        for p in &mut out {
            p.revents = match self.readiness(p.fd) {
                None => libc::POLLNVAL,
                Some(r) => {
                    let mask =
                        (p.events as u16 as u32) | libc::POLLERR as u32 | libc::POLLHUP as u32;
                    (r & mask) as i16
                }
            };
            if p.revents != 0 {
                n += 1;
            }
        }
        (n, out)
    }

    fn epoll_wait(&mut self, epfd: i32, max: usize) -> Result<Vec<EpollEvent>, i32> {
        let Some(Obj::Epoll(set)) = self.fds.get(&epfd) else {
            return Err(if self.fds.contains_key(&epfd) {
                libc::EINVAL
            } else {
                libc::EBADF
            });
        };
        let set: Vec<(i32, (u32, u64))> = set.iter().map(|(&k, &v)| (k, v)).collect();
        let mut evs = Vec::new();
        for (fd, (want, data)) in set {
            let Some(r) = self.readiness(fd) else {
                continue;
            };
            let got = r & (want | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32);
            if got != 0 && evs.len() < max {
                evs.push(EpollEvent { events: got, data });
            }
        }
        Ok(evs)
    }

    fn close(&mut self, fd: i32) -> SysResult {
        let obj = self.fds.remove(&fd).ok_or(libc::EBADF)?;
        let now = self.now;
        match obj {
            Obj::Tcp { stage, .. } => match stage {
                Tcp::Listener(l) => self.stack.tcp_close_listener(now, l).map_err(errno)?,
                Tcp::Conn { h, .. } => self.stack.tcp_close(now, h).map_err(errno)?,
                Tcp::Fresh | Tcp::Dead => {}
            },
            Obj::Udp { h: Some(h), .. } => self.stack.udp_close(h).map_err(errno)?,
            Obj::Udp { h: None, .. } => {}
            Obj::Epoll(_) => {}
        }
        for o in self.fds.values_mut() {
            if let Obj::Epoll(set) = o {
                set.remove(&fd);
            }
        }
        Ok(0)
    }
}

fn done(r: SysResult) -> Try {
    Try::Done((r, Out::None))
}

impl Backend for Ustack {
    fn netdev_send(&self, packet: &[u8]) -> io::Result<()> {
        let mut g = self.lock();
        if g.freed {
            return Err(io::Error::other("backend freed"));
        }
        let now = g.now;
        g.stack.receive(now, packet);
        g.settle(&self.cv);
        Ok(())
    }

    fn netdev_receive(&self, timeout: Duration) -> io::Result<Option<(Vec<u8>, u64)>> {
        let until = self.lock().now + timeout.min(MAX_WAIT);
        Ok(self.advance(until, true))
    }

    fn usleep(&self, us: u64) {
        let until = self.lock().now + Duration::from_micros(us).min(MAX_WAIT);
        // Packets sent meanwhile stay queued for netdev_receive.
        self.advance(until, false);
    }

    fn now_us(&self) -> u64 {
        self.lock().now.as_micros()
    }

    fn returned_at_us(&self) -> u64 {
        RETURNED_AT
            .with(|c| c.take())
            .unwrap_or_else(|| self.now_us())
    }

    fn blocked_calls(&self) -> Option<usize> {
        Some(self.lock().blocked.len())
    }

    fn sysctl(&self, name: &str, value: &str) -> io::Result<()> {
        let v: u64 = value
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not a number"))?;
        self.lock()
            .stack
            .set_sysctl(name, v)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }

    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> SysResult {
        self.simple(|i| {
            let v6 = match domain {
                libc::AF_INET => false,
                libc::AF_INET6 => true,
                _ => return Err(libc::EAFNOSUPPORT),
            };
            let nonblock = ty & libc::SOCK_NONBLOCK != 0;
            let obj = match (ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC), protocol) {
                (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Obj::Tcp {
                    v6,
                    bound: None,
                    stage: Tcp::Fresh,
                    opts: Opts::default(),
                    nonblock,
                    error: 0,
                },
                (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Obj::Udp {
                    v6,
                    h: None,
                    peer: None,
                    nonblock,
                },
                (libc::SOCK_STREAM | libc::SOCK_DGRAM, _) => return Err(libc::EPROTONOSUPPORT),
                _ => return Err(libc::ESOCKTNOSUPPORT),
            };
            Ok(i64::from(i.add(obj)))
        })
    }

    fn bind(&self, fd: i32, addr: SocketAddr) -> SysResult {
        self.simple(|i| {
            let v6 = match i.obj(fd)? {
                Obj::Tcp { v6, .. } | Obj::Udp { v6, .. } => *v6,
                Obj::Epoll(_) => return Err(libc::ENOTSOCK),
            };
            let a = of_family(addr, v6)?;
            let ours = match a.ip() {
                IpAddr::V4(ip) => ip == i.stack.ipv4().addr,
                IpAddr::V6(ip) => {
                    ip.to_ipv4_mapped() == Some(i.stack.ipv4().addr)
                        || i.stack.ipv6_addr_state(ip).is_some()
                }
            };
            if !a.ip().is_unspecified() && !ours {
                return Err(libc::EADDRNOTAVAIL);
            }
            // Linux inet_csk_bind_conflict: the process's bound sockets not yet in the
            // stack (a listener's or a connection's port is also the stack's), and what
            // the stack holds: listeners, connections and TIME-WAIT records.
            let reuse = matches!(i.obj(fd)?, Obj::Tcp { opts, .. } if opts.reuseaddr);
            let taken = |i: &Inner, port: u16| {
                i.fds.iter().any(|(&f, o)| {
                    f != fd && matches!(o, Obj::Tcp { bound: Some(b), .. } if b.port() == port)
                }) || i.stack.tcp_bind_conflict(port, reuse)
            };
            let port = a.port();
            let busy = port != 0 && taken(i, port);
            let port = if port == 0 { i.ephemeral() } else { port };
            match i.obj(fd)? {
                Obj::Tcp { bound, .. } => {
                    if bound.is_some() {
                        return Err(libc::EINVAL);
                    }
                    if busy {
                        return Err(libc::EADDRINUSE);
                    }
                    *bound = Some(SocketAddr::new(a.ip(), port));
                    Ok(0)
                }
                Obj::Udp { h, .. } => {
                    if h.is_some() {
                        return Err(libc::EINVAL);
                    }
                    // Linux `inet6_bind`: an `AF_INET6` socket bound to `::ffff:a.b.c.d`
                    // is an IPv4 socket in all but name; the stack's socket is IPv4 then
                    // (its addresses mapped back for the script: `as_family`).
                    let local = match a.ip() {
                        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
                            Some(v4) => SocketAddr::new(v4.into(), port),
                            None => SocketAddr::new(a.ip(), port),
                        },
                        IpAddr::V4(_) => SocketAddr::new(a.ip(), port),
                    };
                    let u = i.stack.udp_bind(local).map_err(errno)?;
                    if let Ok(Obj::Udp { h, .. }) = i.obj(fd) {
                        *h = Some(u);
                    }
                    Ok(0)
                }
                Obj::Epoll(_) => Err(libc::ENOTSOCK),
            }
        })
    }

    fn listen(&self, fd: i32, backlog: i32) -> SysResult {
        self.simple(|i| {
            let (bound, stage, v6) = match i.obj(fd)? {
                Obj::Tcp {
                    bound, stage, v6, ..
                } => (*bound, *stage, *v6),
                Obj::Udp { .. } => return Err(libc::EOPNOTSUPP),
                Obj::Epoll(_) => return Err(libc::ENOTSOCK),
            };
            match stage {
                Tcp::Fresh => {}
                // Linux: listen() again on a listener only changes the backlog.
                Tcp::Listener(l) => {
                    let backlog = u32::try_from(backlog.max(0)).unwrap_or(0);
                    return i
                        .stack
                        .tcp_listen_backlog(l, backlog)
                        .map(|()| 0)
                        .map_err(errno);
                }
                _ => return Err(libc::EINVAL),
            }
            let local = match bound {
                Some(b) => b,
                None => any(v6, i.ephemeral()),
            };
            let l = i
                .stack
                .tcp_listen(local, u32::try_from(backlog.max(0)).unwrap_or(0))
                .map_err(errno)?;
            let mut opts = Opts::default();
            if let Ok(Obj::Tcp {
                stage,
                bound,
                opts: o,
                ..
            }) = i.obj(fd)
            {
                *stage = Tcp::Listener(l);
                *bound = Some(local);
                opts = *o;
            }
            i.apply_listener(l, opts);
            Ok(0)
        })
    }

    fn accept(&self, fd: i32, flags: i32) -> SysResult {
        self.call(None, move |i| i.accept(fd, flags)).0
    }

    fn connect(&self, fd: i32, addr: SocketAddr) -> SysResult {
        let mut started: Option<(TcpHandle, bool)> = None;
        self.call(None, move |i| {
            if let Some((h, nonblock)) = started {
                return i.connect_progress(fd, h, nonblock);
            }
            let now = i.now;
            let v6 = match i.obj(fd) {
                Ok(Obj::Tcp { v6, .. } | Obj::Udp { v6, .. }) => *v6,
                _ => false,
            };
            let remote = match of_family(addr, v6) {
                Ok(a) => a,
                Err(e) => return done(Err(e)),
            };
            let (bound, stage, opts, nonblock) = match i.obj(fd) {
                Ok(Obj::Tcp {
                    bound,
                    stage,
                    opts,
                    nonblock,
                    ..
                }) => (*bound, *stage, *opts, *nonblock),
                Ok(Obj::Udp { h, .. }) => {
                    let h = match *h {
                        Some(h) => h,
                        None => {
                            let any = any(v6, i.ephemeral());
                            match i.stack.udp_bind(any) {
                                Ok(u) => {
                                    if let Ok(Obj::Udp { h, .. }) = i.obj(fd) {
                                        *h = Some(u);
                                    }
                                    u
                                }
                                Err(e) => return done(Err(errno(e))),
                            }
                        }
                    };
                    // The peer in the stack socket's family (IPv4 for one bound to an
                    // IPv4-mapped address).
                    let remote = match (i.stack.udp_local_sockaddr(h), remote) {
                        (Ok(SocketAddr::V4(_)), SocketAddr::V6(r)) => match r.ip().to_ipv4_mapped()
                        {
                            Some(v4) => SocketAddr::new(v4.into(), r.port()),
                            None => return done(Err(libc::ENETUNREACH)),
                        },
                        _ => remote,
                    };
                    let r = i.stack.udp_connect_addr(h, Some(remote));
                    if r.is_ok()
                        && let Ok(Obj::Udp { peer, .. }) = i.obj(fd)
                    {
                        *peer = Some(remote);
                    }
                    return done(r.map(|()| 0).map_err(errno));
                }
                Ok(Obj::Epoll(_)) => return done(Err(libc::ENOTSOCK)),
                Err(e) => return done(Err(e)),
            };
            match stage {
                Tcp::Fresh => {}
                Tcp::Conn {
                    h,
                    connecting: true,
                } => return i.connect_progress(fd, h, true),
                // Linux __inet_stream_connect: a listener is SS_UNCONNECTED but not in
                // TCP_CLOSE: "err = -EISCONN; if (sk->sk_state != TCP_CLOSE) goto out;".
                Tcp::Conn { .. } | Tcp::Listener(_) => return done(Err(libc::EISCONN)),
                Tcp::Dead => return done(Err(libc::EINVAL)),
            }
            // The options set before connect hold from the SYN on (TCP_MAXSEG: its MSS).
            let r = i
                .stack
                .tcp_connect_with(now, remote, bound.map(|b| b.port()), &opts.tcp);
            let h = match r {
                Ok(h) => h,
                Err(e) => return done(Err(errno(e))),
            };
            i.apply(h, opts);
            if let Ok(Obj::Tcp { stage, .. }) = i.obj(fd) {
                *stage = Tcp::Conn {
                    h,
                    connecting: true,
                };
            }
            if nonblock {
                return done(Err(libc::EINPROGRESS));
            }
            started = Some((h, false));
            i.connect_progress(fd, h, false)
        })
        .0
    }

    fn read(&self, fd: i32, buf: &mut [u8]) -> SysResult {
        self.recv(fd, buf, 0)
    }

    fn recv(&self, fd: i32, buf: &mut [u8], flags: i32) -> SysResult {
        let len = buf.len();
        let (r, out) = self.call(None, move |i| i.recv(fd, len, flags));
        if let Out::Bytes(b) = out {
            buf[..b.len()].copy_from_slice(&b);
        }
        r
    }

    fn write(&self, fd: i32, buf: &[u8]) -> SysResult {
        self.send(fd, buf, 0)
    }

    fn send(&self, fd: i32, buf: &[u8], flags: i32) -> SysResult {
        let data = buf.to_vec();
        let mut sent = 0;
        self.call(None, move |i| i.send(fd, &data, &mut sent, flags))
            .0
    }

    fn shutdown(&self, fd: i32, how: i32) -> SysResult {
        self.simple(|i| {
            let how = match how {
                libc::SHUT_RD => Shutdown::Read,
                libc::SHUT_WR => Shutdown::Write,
                libc::SHUT_RDWR => Shutdown::Both,
                _ => return Err(libc::EINVAL),
            };
            let now = i.now;
            match i.obj(fd)? {
                Obj::Tcp {
                    stage: Tcp::Conn { h, .. },
                    ..
                } => {
                    let h = *h;
                    i.stack.tcp_shutdown(now, h, how).map_err(errno)?;
                    Ok(0)
                }
                Obj::Tcp {
                    stage: Tcp::Listener(l),
                    ..
                } => {
                    // Linux: shutting down a listener stops it (inet_shutdown: tcp_disconnect).
                    let l = *l;
                    i.stack.tcp_close_listener(now, l).map_err(errno)?;
                    if let Ok(Obj::Tcp { stage, .. }) = i.obj(fd) {
                        *stage = Tcp::Dead;
                    }
                    Ok(0)
                }
                Obj::Epoll(_) => Err(libc::ENOTSOCK),
                _ => Err(libc::ENOTCONN),
            }
        })
    }

    fn close(&self, fd: i32) -> SysResult {
        self.simple(|i| i.close(fd))
    }

    fn getsockopt(&self, fd: i32, level: i32, name: i32, buf: &mut [u8]) -> Result<usize, i32> {
        let mut len = 0;
        self.simple(|i| {
            let v = i.getsockopt(fd, level, name)?;
            len = v.len().min(buf.len());
            buf[..len].copy_from_slice(&v[..len]);
            Ok(0)
        })?;
        Ok(len)
    }

    fn setsockopt(&self, fd: i32, level: i32, name: i32, val: &[u8]) -> SysResult {
        self.simple(|i| i.setsockopt(fd, level, name, val))
    }

    fn fcntl(&self, fd: i32, cmd: i32, arg: i64) -> SysResult {
        self.simple(|i| {
            let nb = match i.obj(fd)? {
                Obj::Tcp { nonblock, .. } | Obj::Udp { nonblock, .. } => Some(nonblock),
                Obj::Epoll(_) => None,
            };
            match cmd {
                libc::F_GETFL => Ok(i64::from(
                    libc::O_RDWR
                        | if nb.is_some_and(|n| *n) {
                            libc::O_NONBLOCK
                        } else {
                            0
                        },
                )),
                libc::F_SETFL => {
                    if let Some(n) = nb {
                        *n = arg & i64::from(libc::O_NONBLOCK) != 0;
                    }
                    Ok(0)
                }
                libc::F_GETFD | libc::F_SETFD => Ok(0),
                _ => Err(libc::EINVAL),
            }
        })
    }

    fn poll(&self, fds: &mut [PollFd], timeout_ms: i32) -> SysResult {
        let want = fds.to_vec();
        let deadline = self.deadline(timeout_ms);
        let (r, out) = self.call(deadline, move |i| {
            let (n, out) = i.poll(&want);
            if n > 0 || timeout_ms == 0 || deadline.is_some_and(|d| i.now >= d) {
                Try::Done((Ok(n as i64), Out::Poll(out)))
            } else {
                Try::Block
            }
        });
        if let Out::Poll(o) = out {
            fds.copy_from_slice(&o);
        }
        r
    }

    fn epoll_create(&self, size: i32) -> SysResult {
        self.simple(|i| {
            if size <= 0 {
                return Err(libc::EINVAL);
            }
            Ok(i64::from(i.add(Obj::Epoll(BTreeMap::new()))))
        })
    }

    fn epoll_ctl(&self, epfd: i32, op: i32, fd: i32, event: EpollEvent) -> SysResult {
        self.simple(|i| {
            if !i.fds.contains_key(&fd) {
                return Err(libc::EBADF);
            }
            if fd == epfd {
                return Err(libc::EINVAL);
            }
            let Obj::Epoll(set) = i.obj(epfd)? else {
                return Err(libc::EINVAL);
            };
            if event.events & (libc::EPOLLET | libc::EPOLLONESHOT | libc::EPOLLEXCLUSIVE) as u32
                != 0
                && op != libc::EPOLL_CTL_DEL
            {
                // Level-triggered only, here.
                return Err(libc::EINVAL);
            }
            match op {
                libc::EPOLL_CTL_ADD => {
                    if set.contains_key(&fd) {
                        return Err(libc::EEXIST);
                    }
                    set.insert(fd, (event.events, event.data));
                }
                libc::EPOLL_CTL_MOD => {
                    *set.get_mut(&fd).ok_or(libc::ENOENT)? = (event.events, event.data);
                }
                libc::EPOLL_CTL_DEL => {
                    set.remove(&fd).ok_or(libc::ENOENT)?;
                }
                _ => return Err(libc::EINVAL),
            }
            Ok(0)
        })
    }

    fn epoll_wait(&self, epfd: i32, events: &mut [EpollEvent], timeout_ms: i32) -> SysResult {
        let max = events.len();
        if max == 0 {
            return Err(libc::EINVAL);
        }
        let deadline = self.deadline(timeout_ms);
        let (r, out) = self.call(deadline, move |i| match i.epoll_wait(epfd, max) {
            Err(e) => done(Err(e)),
            Ok(evs)
                if !evs.is_empty() || timeout_ms == 0 || deadline.is_some_and(|d| i.now >= d) =>
            {
                Try::Done((Ok(evs.len() as i64), Out::Epoll(evs)))
            }
            Ok(_) => Try::Block,
        });
        if let Out::Epoll(evs) = out {
            events[..evs.len()].copy_from_slice(&evs);
        }
        r
    }

    fn free(&self) {
        let mut g = self.lock();
        g.freed = true;
        let fds: Vec<i32> = g.fds.keys().copied().collect();
        for fd in fds {
            let _ = g.close(fd);
        }
        g.blocked.clear();
        self.cv.notify_all();
    }
}

impl Ustack {
    /// `getpeername(fd)`: the remote address of a connection (accept fills it in).
    pub fn peer_addr(&self, fd: i32) -> Result<SocketAddr, i32> {
        let g = self.lock();
        match g.fds.get(&fd).ok_or(libc::EBADF)? {
            Obj::Tcp {
                stage: Tcp::Conn { h, .. },
                v6,
                ..
            } => g
                .stack
                .tcp_info(*h)
                .map_err(errno)
                .map(|i| as_family(i.remote, *v6)),
            Obj::Udp {
                peer: Some(p), v6, ..
            } => Ok(as_family(*p, *v6)),
            _ => Err(libc::ENOTCONN),
        }
    }

    fn deadline(&self, timeout_ms: i32) -> Option<Instant> {
        (timeout_ms > 0).then(|| {
            self.lock().now + Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
        })
    }
}
