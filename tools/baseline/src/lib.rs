//! The Linux baseline servers that ustack's benchmarks compare against.
//!
//! Each protocol ustack serves (echo, discard, a small HTTP/1.1 server, UDP echo) exists here as a
//! tuned server on the kernel's own stack, built the way a careful Linux server is built, so that
//! `ustack bench --server linux` compares like with like:
//!
//! - `workers` threads, each with **its own listening socket** bound with `SO_REUSEPORT` to the
//!   same address (the kernel spreads new connections over the group by a hash of the 4-tuple,
//!   `net/ipv4/inet_hashtables.c`, `inet_lhash2_lookup` / `reuseport_select_sock`), and **its own
//!   epoll instance**; nothing is shared between workers on the data path;
//! - `listen(2)` with a backlog of `/proc/sys/net/core/somaxconn` unless told otherwise (the kernel
//!   caps the backlog there anyway, `net/socket.c`, `__sys_listen`);
//! - **edge-triggered** epoll, with non-blocking `accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)` in a
//!   loop until `EAGAIN`;
//! - every connection registered once for `EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET` (as nginx
//!   does, `src/event/modules/ngx_epoll_module.c`, `ngx_epoll_add_connection`), so a partial write
//!   costs no `epoll_ctl`: the rest waits in the connection's output buffer for the next
//!   `EPOLLOUT` edge, and the connection is not read again until that buffer is flushed
//!   (backpressure);
//! - one receive buffer per worker, shared by its connections; a connection only holds a buffer
//!   of its own while it has unsent output or an incomplete HTTP request, and buffers return to a
//!   per-worker pool to be reused by the next connection that needs one;
//! - `TCP_NODELAY` on every accepted connection (nginx's default for keep-alive connections);
//! - a read budget per connection per turn, so one fast sender cannot starve the others.
//!
//! Two other ways to wait, for the bench's Linux modes: [`ServerConfig::busy_poll`] makes each
//! worker spin on `epoll_wait` with a zero timeout instead of sleeping (with
//! [`ServerConfig::cpus`] pinning it to a core), and [`UringServer`] serves echo, UDP echo or
//! reply-and-close on one io_uring (multishot accept and receive into provided buffers), where
//! [`uring_available`] says the kernel offers it.
//!
//! ```no_run
//! use ustack_baseline::{Proto, Server, ServerConfig};
//! let server = Server::start(ServerConfig::new(Proto::Echo, "127.0.0.1:0".parse().unwrap()))?;
//! println!("echo on {}", server.local_addr());
//! // ... run a client ...
//! println!("{:?}", server.stats());
//! server.stop()?;
//! # Ok::<(), std::io::Error>(())
//! ```

mod stats;
mod uring_sys;
mod worker;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::thread::JoinHandle;

use rustix::event::{EventfdFlags, eventfd};
use rustix::fd::OwnedFd;
use rustix::net::{AddressFamily, SocketFlags, SocketType, bind, getsockname, listen, sockopt};

pub use stats::Stats;
pub use uring_sys::{
    BUF as URING_BUF, BUFS as URING_BUFS, UringProto, UringServer, available as uring_available,
};
pub use ustack_http::{FIXED_BODY, MAX_REQUEST_HEAD};

use stats::SharedStats;

/// The backlog used when `/proc/sys/net/core/somaxconn` cannot be read: Linux's default
/// `SOMAXCONN` since 5.4 (`include/linux/socket.h`).
pub const DEFAULT_SOMAXCONN: u32 = 4096;

/// Which protocol a [`Server`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP echo (RFC 862): every byte received is sent back.
    Echo,
    /// TCP discard (RFC 863): every byte received is read and dropped (and counted).
    Discard,
    /// HTTP/1.1 (RFC 9112) with keep-alive and pipelining: `GET /` answers [`FIXED_BODY`], other
    /// paths are static files under [`ServerConfig::root_dir`].
    Http,
    /// UDP echo (RFC 862): every datagram is sent back to its sender.
    UdpEcho,
}

impl Proto {
    /// Every protocol, in the order of [`Proto::name`]'s documentation.
    pub const ALL: [Proto; 4] = [Proto::Echo, Proto::Discard, Proto::Http, Proto::UdpEcho];

    /// The protocol's name on the command line: `echo`, `discard`, `http`, `udp-echo`.
    pub const fn name(self) -> &'static str {
        match self {
            Proto::Echo => "echo",
            Proto::Discard => "discard",
            Proto::Http => "http",
            Proto::UdpEcho => "udp-echo",
        }
    }

    /// True for the protocols served over TCP.
    pub const fn is_tcp(self) -> bool {
        !matches!(self, Proto::UdpEcho)
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of parsing a [`Proto`] from an unknown name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProto(pub String);

impl fmt::Display for UnknownProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown protocol {:?} (expected one of: echo, discard, http, udp-echo)",
            self.0
        )
    }
}

impl std::error::Error for UnknownProto {}

impl FromStr for Proto {
    type Err = UnknownProto;

    fn from_str(s: &str) -> Result<Proto, UnknownProto> {
        Proto::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownProto(s.to_owned()))
    }
}

/// How to start a [`Server`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The protocol to serve.
    pub proto: Proto,
    /// The address every worker binds (with `SO_REUSEPORT`). Port 0: the first worker's socket
    /// picks an ephemeral port and the others join it; see [`Server::local_addr`].
    pub addr: SocketAddr,
    /// Worker threads, each with its own socket and epoll instance. At least 1.
    pub workers: usize,
    /// The `listen(2)` backlog. `None`: `/proc/sys/net/core/somaxconn` (or
    /// [`DEFAULT_SOMAXCONN`] if it cannot be read). Ignored for UDP.
    pub backlog: Option<u32>,
    /// HTTP only: the directory static files are served from (`GET /a/b` reads `root_dir/a/b`).
    /// `None`: every path but `/` is 404.
    pub root_dir: Option<PathBuf>,
    /// Busy polling: each worker spins in `epoll_wait` with a zero timeout instead of
    /// sleeping in it (a core per worker, as a busy-polling server is deployed).
    pub busy_poll: bool,
    /// Pin worker `i` to CPU `cpus[i % cpus.len()]` (`sched_setaffinity`); empty: not pinned.
    pub cpus: Vec<usize>,
}

impl ServerConfig {
    /// A configuration with one worker per available CPU, the default backlog and no static
    /// files.
    pub fn new(proto: Proto, addr: SocketAddr) -> ServerConfig {
        ServerConfig {
            proto,
            addr,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            backlog: None,
            root_dir: None,
            busy_poll: false,
            cpus: Vec::new(),
        }
    }
}

/// `/proc/sys/net/core/somaxconn`, the listen backlog used when [`ServerConfig::backlog`] is
/// `None`; [`DEFAULT_SOMAXCONN`] if it cannot be read.
pub fn somaxconn() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_SOMAXCONN)
}

/// One worker thread as the [`Server`] sees it.
#[derive(Debug)]
struct WorkerHandle {
    thread: Option<JoinHandle<io::Result<()>>>,
    /// The worker's wake-up eventfd: writing to it makes the worker leave its loop.
    wake: Arc<OwnedFd>,
    stats: Arc<SharedStats>,
}

/// A running baseline server: worker threads serving one protocol on one address.
///
/// Dropping a `Server` stops it as [`Server::stop`] does (errors are then ignored).
#[derive(Debug)]
pub struct Server {
    proto: Proto,
    local_addr: SocketAddr,
    backlog: u32,
    workers: Vec<WorkerHandle>,
}

impl Server {
    /// Opens one socket per worker (`SO_REUSEPORT`, bound to `config.addr`, listening with the
    /// configured backlog for TCP) and starts the worker threads.
    ///
    /// Errors: `InvalidInput` for zero workers or a `root_dir` that is not a directory; any
    /// error of `socket`, `setsockopt`, `bind`, `listen`, `eventfd` or thread creation (every
    /// socket and thread made so far is then closed and joined).
    pub fn start(config: ServerConfig) -> io::Result<Server> {
        if config.workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a server needs at least one worker",
            ));
        }
        if let Some(dir) = &config.root_dir
            && !std::fs::metadata(dir)?.is_dir()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("root_dir {} is not a directory", dir.display()),
            ));
        }
        let backlog = config.backlog.unwrap_or_else(somaxconn);

        // Every socket first, so a bind error leaves no thread behind; the first socket fixes
        // the port when the configuration asks for an ephemeral one.
        let mut addr = config.addr;
        let mut sockets = Vec::with_capacity(config.workers);
        for _ in 0..config.workers {
            let socket = open_socket(config.proto, addr, backlog)?;
            if sockets.is_empty() {
                addr = local_addr_of(&socket)?;
            }
            sockets.push(socket);
        }

        let mut server = Server {
            proto: config.proto,
            local_addr: addr,
            backlog,
            workers: Vec::with_capacity(config.workers),
        };
        for (index, socket) in sockets.into_iter().enumerate() {
            let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
            let stats = Arc::new(SharedStats::default());
            let ctx = worker::WorkerCtx {
                proto: config.proto,
                socket,
                wake: Arc::clone(&wake),
                stats: Arc::clone(&stats),
                root_dir: config.root_dir.clone(),
                busy_poll: config.busy_poll,
                cpu: (!config.cpus.is_empty()).then(|| config.cpus[index % config.cpus.len()]),
            };
            // On error `server` is dropped here, which stops the workers already started.
            let thread = std::thread::Builder::new()
                .name(format!("baseline-{}-{index}", config.proto))
                .spawn(move || worker::run(ctx))?;
            server.workers.push(WorkerHandle {
                thread: Some(thread),
                wake,
                stats,
            });
        }
        Ok(server)
    }

    /// The protocol served.
    pub fn proto(&self) -> Proto {
        self.proto
    }

    /// The address the workers listen on (with the port chosen if the configuration said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The `listen(2)` backlog each TCP worker's socket was given.
    pub fn backlog(&self) -> u32 {
        self.backlog
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Counters summed over every worker. Workers publish their counters after each batch of
    /// events, so a reply a client has just read may not be counted yet.
    pub fn stats(&self) -> Stats {
        self.workers
            .iter()
            .fold(Stats::default(), |sum, w| sum.merged(&w.stats.load()))
    }

    /// Counters of each worker, in worker order (shows how `SO_REUSEPORT` spread the load).
    pub fn worker_stats(&self) -> Vec<Stats> {
        self.workers.iter().map(|w| w.stats.load()).collect()
    }

    /// Stops the server: wakes every worker through its eventfd, joins the threads (which close
    /// every connection and their listening socket and epoll instance), and closes the
    /// eventfds. Returns the first error a worker stopped with, if any.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        for w in &self.workers {
            // An eventfd write only fails if the counter would overflow, which one write a
            // worker never reads cannot cause.
            let _ = rustix::io::write(&*w.wake, &1u64.to_ne_bytes());
        }
        let mut result = Ok(());
        for mut w in self.workers.drain(..) {
            let Some(thread) = w.thread.take() else {
                continue;
            };
            let outcome = match thread.join() {
                Ok(r) => r,
                Err(_) => Err(io::Error::other("a baseline worker thread panicked")),
            };
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Pin the calling thread to CPU `cpu` (`sched_setaffinity`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// The calling thread's CPU affinity now, to put back with [`restore_affinity`].
pub fn current_affinity() -> io::Result<rustix::thread::CpuSet> {
    Ok(rustix::thread::sched_getaffinity(None)?)
}

/// Put back an affinity read by [`current_affinity`].
pub fn restore_affinity(set: &rustix::thread::CpuSet) -> io::Result<()> {
    rustix::thread::sched_setaffinity(None, set)?;
    Ok(())
}

/// One worker's socket: non-blocking, close-on-exec, `SO_REUSEADDR` and `SO_REUSEPORT` set before
/// `bind`, and for TCP listening with `backlog`.
fn open_socket(proto: Proto, addr: SocketAddr, backlog: u32) -> io::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let ty = if proto.is_tcp() {
        SocketType::STREAM
    } else {
        SocketType::DGRAM
    };
    let fd = rustix::net::socket_with(
        family,
        ty,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    sockopt::set_socket_reuseport(&fd, true)?;
    bind(&fd, &addr)?;
    if proto.is_tcp() {
        listen(&fd, i32::try_from(backlog).unwrap_or(i32::MAX))?;
    }
    Ok(fd)
}

fn local_addr_of(fd: &OwnedFd) -> io::Result<SocketAddr> {
    SocketAddr::try_from(getsockname(fd)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "getsockname returned a non-IP address",
        )
    })
}
