//! tokio on ustack (issue 16, items 2 and 3): [`TcpListener`], [`TcpStream`]
//! ([`tokio::io::AsyncRead`] + [`tokio::io::AsyncWrite`], [`TcpStream::into_split`]) and
//! [`UdpSocket`] over a [`ustack_net::Net`], so that tokio code, hyper and axum
//! (`axum::serve` takes a ustack [`TcpListener`]: it implements `axum::serve::Listener`)
//! run on ustack unchanged but for the line that makes the listener.
//!
//! ```
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use ustack_dev::sim::SimLinkConfig;
//! use ustack_runtime::RuntimeBuilder;
//! use ustack_tokio::{Net, TcpListener, TcpStream};
//!
//! let server = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
//! let client = RuntimeBuilder::new().ipv4("10.0.0.2".parse().unwrap(), 24);
//! let (snet, cnet) = Net::sim_pair(server, client, SimLinkConfig::default())?;
//! let rt = tokio::runtime::Builder::new_current_thread().build()?;
//! rt.block_on(async {
//!     let listener = TcpListener::bind(&snet, "10.0.0.1:7")?;
//!     let echo = tokio::spawn(async move {
//!         let (mut s, _peer) = listener.accept().await?;
//!         let mut buf = [0; 64];
//!         loop {
//!             match s.read(&mut buf).await? {
//!                 0 => return Ok::<(), std::io::Error>(()),
//!                 n => s.write_all(&buf[..n]).await?,
//!             }
//!         }
//!     });
//!     let mut c = TcpStream::connect(&cnet, "10.0.0.1:7").await?;
//!     c.write_all(b"hello").await?;
//!     let mut got = [0; 5];
//!     c.read_exact(&mut got).await?;
//!     assert_eq!(&got, b"hello");
//!     drop(c);
//!     echo.await.unwrap()
//! })?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # How it runs: the stack's loop on its own thread, wakers across
//!
//! The stack runs as [`ustack_net`] runs it: a loop thread per shard owns the stack and
//! sleeps on the device's file and a kick eventfd; tokio tasks on any runtime (current-
//! thread or multi-thread) call into it. A socket call never waits for readiness: it is
//! the core's non-blocking call ([`ustack_net::Wait::Never`]), and on `WouldBlock` the
//! task's waker is registered with [`Net::register_waker`] for that socket and interest
//! (readable or writable), and the task returns `Pending`. The loop wakes it when its
//! poller sees the socket become ready: nothing polls a socket that is not ready, and
//! there is no thread per socket. One registration is kept per socket and direction at a
//! time (a later poll only swaps the task's waker), so a task polled often for other
//! reasons does not pile up registrations.
//!
//! What a call costs is what it costs in [`ustack_net`]: a read that finds bytes in the
//! stream's caller-side buffer and a write that fits the send buffer's room as the loop
//! last saw it do not wait for the loop; `accept` and `recv_from` look at the published
//! readiness before handing the loop a job. Other calls (bind, connect's start, a write
//! beyond the credit, shutdown, `send_to`, the address getters) hand the loop a job and
//! wait for its answer on a futex: a few microseconds of blocking inside the task, as a
//! system call is for tokio's own sockets. docs/api.md compares the three ways to program
//! ustack and gives their cost per message.
//!
//! The other model, the stack's loop driven inside tokio (the link's file on tokio's
//! reactor, a task running the rounds, socket calls on the stack directly, no thread
//! hand-off) is [`local::LocalStack`]: one stack per current-thread runtime, `!Send`
//! sockets, about a sixth of this model's CPU per message on one connection.
//! docs/api.md compares them.

use core::future::poll_fn;
use core::net::SocketAddr;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::io;
use std::net::{Shutdown, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Wake;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use ustack_net::Wait;

use crate::halves::owned_halves;
pub use ustack_net::{Fd, Net, Readiness};

#[cfg(feature = "axum")]
mod axum_listener;
mod halves;
pub mod local;

/// The backlog [`TcpListener::bind`] asks for (Linux's `SOMAXCONN`).
pub const BACKLOG: u32 = 4096;

// ---- readiness: one registration per socket and direction ---------------------------------

/// A socket's registration for one direction: the waker handed to [`Net::register_waker`]
/// (this, behind an `Arc`), and the task to wake, swapped on every poll.
#[derive(Debug, Default)]
struct Arm {
    /// A registration with the core is outstanding (not yet woken).
    armed: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Arm {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.armed.store(false, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = task {
            t.wake();
        }
    }
}

/// A socket handle with its two registrations; dropping it closes the handle (the socket
/// closes when its last handle does).
#[derive(Debug)]
struct Sock {
    net: Net,
    fd: Fd,
    read: Arc<Arm>,
    write: Arc<Arm>,
}

impl Drop for Sock {
    fn drop(&mut self) {
        let _ = self.net.close(self.fd);
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl Sock {
    fn new(net: &Net, fd: Fd) -> Sock {
        Sock {
            net: net.clone(),
            fd,
            read: Arc::default(),
            write: Arc::default(),
        }
    }

    /// Try `f` (a non-blocking call); on `WouldBlock`, wake `cx`'s task when the socket is
    /// next ready for `interest` (the loop's wake-up, or at once if it is ready already)
    /// and return `Pending`.
    fn poll_io<T>(
        &self,
        cx: &mut Context<'_>,
        interest: Readiness,
        mut f: impl FnMut(&Net, Fd) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        match f(&self.net, self.fd) {
            Err(e) if would_block(&e) => {}
            r => return Poll::Ready(r),
        }
        let arm = if interest.contains(Readiness::READABLE) {
            &self.read
        } else {
            &self.write
        };
        {
            let mut task = arm.task.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *task {
                Some(t) if t.will_wake(cx.waker()) => {}
                t => *t = Some(cx.waker().clone()),
            }
        }
        if !arm.armed.swap(true, Ordering::AcqRel) {
            let waker = Waker::from(arm.clone());
            if let Err(e) = self.net.register_waker(self.fd, interest, &waker) {
                arm.armed.store(false, Ordering::Release);
                return Poll::Ready(Err(e));
            }
        }
        Poll::Pending
    }
}

/// The first address `addr` names (IPv4 or IPv6; an IPv6 listener or UDP socket on `::`
/// is dual-stack, IPv4 peers as `::ffff:a.b.c.d`, as tokio's on Linux): `InvalidInput`
/// if it names none.
fn first(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    })
}

// ---- TCP ----------------------------------------------------------------------------------

/// A TCP listener on ustack, as [`tokio::net::TcpListener`]: bound on every shard of its
/// [`Net`] (as `SO_REUSEPORT` gives each worker one); [`accept`](Self::accept) takes a
/// connection from any.
#[derive(Debug)]
pub struct TcpListener {
    sock: Sock,
}

impl TcpListener {
    /// Listen on `addr` (a port other than 0). `AddrInUse`, `AddrNotAvailable`.
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let fd = net.tcp_listen(first(addr)?, BACKLOG)?;
        Ok(TcpListener {
            sock: Sock::new(net, fd),
        })
    }

    /// The next connection and its peer's address; waits (without polling) until one is
    /// there. Cancel-safe: a dropped `accept` takes nothing from the queue.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// [`accept`](Self::accept) as a poll.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        self.sock
            .poll_io(cx, Readiness::READABLE, |net, fd| {
                net.accept(fd, Wait::Never)
            })
            .map_ok(|(fd, peer)| {
                let stream = TcpStream {
                    sock: Arc::new(Sock::new(&self.sock.net, fd)),
                };
                (stream, peer)
            })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.net.local_addr(self.sock.fd)
    }

    /// Its handle in the [`Net`].
    pub fn fd(&self) -> Fd {
        self.sock.fd
    }

    /// The stack it is on.
    pub fn net(&self) -> &Net {
        &self.sock.net
    }
}

/// A TCP connection on ustack, as [`tokio::net::TcpStream`]: [`AsyncRead`] and
/// [`AsyncWrite`]. Dropping it closes the connection (a FIN, or a RST if received bytes
/// were left unread, as `close(2)`); [`poll_shutdown`](AsyncWrite::poll_shutdown) sends the
/// FIN and keeps reading possible.
#[derive(Debug)]
pub struct TcpStream {
    sock: Arc<Sock>,
}

impl TcpStream {
    /// Open a connection to `addr`; waits (without polling) for the handshake. A dropped
    /// `connect` resets and closes the attempt. `ConnectionRefused`, `TimedOut` (SYN
    /// retries), `NetworkUnreachable`.
    pub async fn connect(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let fd = net.tcp_connect(first(addr)?, Wait::Never)?;
        let sock = Sock::new(net, fd);
        poll_fn(|cx| {
            sock.poll_io(cx, Readiness::WRITABLE, |net, fd| {
                match net.connect_done(fd) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(io::ErrorKind::WouldBlock.into()),
                    Err(e) => Err(e),
                }
            })
        })
        .await?;
        Ok(TcpStream {
            sock: Arc::new(sock),
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.net.peer_addr(self.sock.fd)
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.net.local_addr(self.sock.fd)
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.sock.net.set_nodelay(self.sock.fd, on)
    }

    /// `TCP_NODELAY` as last set.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.sock.net.nodelay(self.sock.fd)
    }

    /// Its handle in the [`Net`] (for [`Net::tcp_info`], buffer sizes, keepalive).
    pub fn fd(&self) -> Fd {
        self.sock.fd
    }

    /// The stack it is on.
    pub fn net(&self) -> &Net {
        &self.sock.net
    }

    /// Split into a read half and a write half that can move to different tasks. The
    /// connection closes when both are dropped; dropping the write half sends the FIN
    /// (as tokio's `OwnedWriteHalf`).
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        halves(self.sock)
    }
}

fn poll_read(sock: &Sock, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
    if buf.remaining() == 0 {
        return Poll::Ready(Ok(()));
    }
    // Copied into the unfilled part as it is: zeroing it first (`initialize_unfilled`)
    // would touch every page of a reader's buffer (hyper's 8 KiB per connection) however
    // little arrives, as tokio's own sockets do not.
    let max = buf.remaining();
    sock.poll_io(cx, Readiness::READABLE, |net, fd| {
        net.read_with(fd, max, Wait::Never, |piece| buf.put_slice(piece))
    })
    .map_ok(|_| ())
}

fn poll_write(sock: &Sock, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    sock.poll_io(cx, Readiness::WRITABLE, |net, fd| {
        net.write(fd, buf, Wait::Never)
    })
}

/// What the halves of [`TcpStream::into_split`] call ([`halves::owned_halves`]).
impl Sock {
    fn poll_read_shared(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read(self, cx, buf)
    }

    fn poll_write_shared(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        poll_write(self, cx, buf)
    }

    fn shutdown_shared(&self) -> io::Result<()> {
        match poll_shutdown(self) {
            Poll::Ready(r) => r,
            Poll::Pending => Ok(()),
        }
    }
}

fn poll_shutdown(sock: &Sock) -> Poll<io::Result<()>> {
    match sock.net.shutdown(sock.fd, Shutdown::Write) {
        // Shut already, or never connected: nothing left to do, as tokio's.
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
        r => Poll::Ready(r),
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        poll_read(&self.sock, cx, buf)
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        poll_write(&self.sock, cx, buf)
    }

    /// Nothing to flush: a write hands its bytes to the stack.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        poll_shutdown(&self.sock)
    }
}

owned_halves!(
    Arc,
    Sock,
    TcpStream,
    |sock| Ok(TcpStream { sock }),
    "[`TcpStream::into_split`]"
);

// ---- UDP ----------------------------------------------------------------------------------

/// A UDP socket on ustack, as [`tokio::net::UdpSocket`] (`send_to`, `recv_from`).
#[derive(Debug)]
pub struct UdpSocket {
    sock: Sock,
}

impl UdpSocket {
    /// A socket bound to `addr` (port 0: an ephemeral port).
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        let fd = net.udp_bind(first(addr)?)?;
        Ok(UdpSocket {
            sock: Sock::new(net, fd),
        })
    }

    /// Send one datagram to `addr`: its length. `MessageTooLong`-style errors as the
    /// core's (`EMSGSIZE`), `NetworkUnreachable`.
    pub async fn send_to(&self, buf: &[u8], addr: impl ToSocketAddrs) -> io::Result<usize> {
        let dst = first(addr)?;
        poll_fn(|cx| {
            self.sock
                .poll_io(cx, Readiness::WRITABLE, |net, fd| net.send_to(fd, buf, dst))
        })
        .await
    }

    /// Take one datagram (cut to `buf`) and its sender; waits (without polling) until one
    /// is there. Cancel-safe.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        poll_fn(|cx| {
            self.sock.poll_io(cx, Readiness::READABLE, |net, fd| {
                net.recv_from(fd, buf, Wait::Never)
            })
        })
        .await
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.net.local_addr(self.sock.fd)
    }

    /// Its handle in the [`Net`].
    pub fn fd(&self) -> Fd {
        self.sock.fd
    }
}

// ---- a stack over a new TUN interface --------------------------------------------------------

/// A stack on a new TUN interface `name` (a `%d` is filled in by the kernel; one queue),
/// created in the network namespace `netns` (a name from `ip netns add`, or a path such as
/// `/proc/PID/ns/net`; `None`: this process's), with `builder`'s address: the [`Net`] and
/// the interface's name. The kernel's end still needs its address and `ip link set up`.
pub fn net_over_tun(
    builder: ustack_runtime::RuntimeBuilder,
    name: &str,
    netns: Option<&str>,
) -> io::Result<(Net, String)> {
    let (queue, name) = tun_queue(name, netns)?;
    Ok((Net::tun(builder, vec![queue])?, name))
}

/// A new TUN interface `name` in `netns`, as [`net_over_tun`] makes it: its one queue (for
/// [`local::LocalStack::new`]) and the interface's name.
pub fn tun_queue(
    name: &str,
    netns: Option<&str>,
) -> io::Result<(ustack_dev::tun::TunQueue, String)> {
    let netns = netns.map(|n| {
        if n.contains('/') {
            std::path::PathBuf::from(n)
        } else {
            std::path::Path::new("/run/netns").join(n)
        }
    });
    let tun = ustack_dev::tun::Tun::open(&ustack_dev::tun::TunConfig {
        name: name.to_owned(),
        queues: 1,
        mtu: None,
        netns,
        offload: false,
    })?;
    let name = tun.name().to_owned();
    let queue = tun
        .into_queues()
        .pop()
        .ok_or_else(|| io::Error::other("the TUN interface has no queue"))?;
    Ok((queue, name))
}
