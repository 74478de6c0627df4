//! std::net-shaped, thread-safe sockets over ustack (issue 16, item 1).
//!
//! ustack's own API ([`ustack_runtime::api`]) is an event loop: a runtime owns the stack
//! and every call takes it (`stream.read(&mut rt, buf)`). This crate puts that loop on a
//! thread of its own and gives any number of application threads sockets that look like
//! std's: [`TcpListener`], [`TcpStream`] (`std::io::Read` and `Write`, on `&TcpStream` too),
//! [`UdpSocket`], blocking by default, with timeouts, non-blocking mode and errors with
//! std's [`std::io::ErrorKind`]s on Linux.
//!
//! ```
//! use std::io::{Read, Write};
//! use ustack_dev::sim::SimLinkConfig;
//! use ustack_net::{Net, TcpListener, TcpStream};
//! use ustack_runtime::RuntimeBuilder;
//!
//! let server = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
//! let client = RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24);
//! let (snet, cnet) = Net::sim_pair(server, client, SimLinkConfig::default())?;
//! let listener = TcpListener::bind(&snet, "10.0.0.1:7")?;
//! let echo = std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut s, _peer) = listener.accept()?;
//!     let mut buf = [0; 64];
//!     loop {
//!         match s.read(&mut buf)? {
//!             0 => return Ok(()),
//!             n => s.write_all(&buf[..n])?,
//!         }
//!     }
//! });
//! let mut c = TcpStream::connect(&cnet, "10.0.0.1:7")?;
//! c.write_all(b"hello")?;
//! let mut got = [0; 5];
//! c.read_exact(&mut got)?;
//! assert_eq!(&got, b"hello");
//! drop(c); // closes: the server reads EOF and returns
//! echo.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # The layers
//!
//! - [`Net`]: the thread-safe core, one per stack. Sockets are handles ([`Fd`], small
//!   integers in a table, which the C API can map to file descriptors). Every call is
//!   non-blocking at the core ([`Wait::Never`]: `WouldBlock`) or waits ([`Wait::Forever`],
//!   [`Wait::Until`]): the caller parks on the socket until the loop signals that the
//!   socket woke up, then tries again. Nobody polls: a parked caller costs a futex.
//! - [`Epoll`]: an epoll-like interest set over handles (add, modify, delete, wait with
//!   a timeout; level, edge, one-shot), fed by ustack's poller readiness, with a file
//!   (`AsFd`, an eventfd) a kernel `poll`/`epoll_wait` can wait on beside kernel files.
//!   The C API's `epoll_*` sit on it.
//! - [`Net::register_waker`]: a per-socket waker, woken once when the socket becomes ready
//!   for an interest; the hook an async runtime's reactor (tokio) uses.
//! - [`TcpListener`], [`TcpStream`], [`UdpSocket`]: std's shape on top of `Net`.
//!
//! # Why the loop has its own thread
//!
//! The stack is sans-I/O state with one owner (a shard): something must run its rounds
//! (receive, transmit, timers) whether or not the application is calling, or ACKs,
//! retransmissions, keepalives and the accept queue stall while every application thread
//! is busy or parked in a blocking `read`. Driving the loop from the callers instead would
//! need a lock around the stack taken by every call and by whichever caller happens to run
//! the rounds, and a parked reader would have to be the one that sleeps on the device:
//! that is how one thread programs ustack ([`ustack_runtime::Runtime::poll`]), not how a
//! thread-per-connection program does. With its own thread, the loop owns the stack
//! without a lock, sleeps in one `poll(2)` on the device's file and a *kick* eventfd, and
//! application threads only hand it jobs.
//!
//! # What it costs: a hand-off between threads per call
//!
//! Every call is a job handed to the loop thread: a push on a mutex-guarded queue and a
//! `write(2)` on the kick eventfd when the loop sleeps. Most calls then wait for the
//! loop's answer (a futex wake). Two paths save that: a write that fits the room the loop
//! last saw in the send buffer returns at once (the bytes are copied into the job; were
//! the room overestimated, they wait in order in a backlog on the loop, a shutdown or
//! close waits for them, and an error reaches the next write), and a read takes the bytes
//! the loop already moved from the stack to the stream's caller-side buffer (up to
//! [`RX_CAP`]), parking until the loop's wake-up only when there are none. So a 64-byte
//! ping-pong round trip costs about six thread wake-ups where the event loop makes
//! function calls: docs/api.md gives the measured figures (this API against the event
//! loop and the kernel's own blocking sockets). Use the event loop where that matters
//! (many connections per core, lowest latency), this API where std's shape matters
//! (porting a threaded program, tests, tools).
//!
//! # Shards
//!
//! A `Net` over several links ([`Net::on_links`], e.g. the queue pairs of a shm link) runs
//! one loop thread per link, each with its own runtime. A listener is bound on every shard
//! (as `SO_REUSEPORT` gives each worker one) and `accept` takes a connection from any; a
//! connection opened here goes to the shards in turn, from a local port whose replies hash
//! back to its shard ([`ustack_runtime::rss::pick_local_port`]). A UDP socket is bound on
//! every shard (the port the first one picked) and receives from any; it sends from
//! shard 0. A link that is itself several queues (an
//! [`RssSplitter`](ustack_runtime::RssSplitter) over a shm link's far end, steering each
//! frame by RSS as a NIC does) is one shard.

mod core;
mod epoll;
#[cfg(feature = "control")]
mod inspect;
mod link;
mod open;
mod start;
mod std_net;

pub use crate::core::{Fd, Kind, LoopRuntime, MAX_IO, Net, RX_CAP, Wait};
pub use crate::epoll::{Epoll, EpollEvent};
pub use crate::link::{DynLink, Link};
pub use crate::open::{KernelQueue, LinkSpec, OpenedLink, open_link};
pub use crate::std_net::{Incoming, TcpListener, TcpStream, UdpSocket};
pub use ustack_runtime::Mode;
pub use ustack_stack::Readiness;
