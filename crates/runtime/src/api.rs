//! The public socket API: [`TcpListener`], [`TcpStream`], [`UdpSocket`], non-blocking,
//! with `std::io::Error`s carrying Linux's errno (`EAGAIN` is
//! [`io::ErrorKind::WouldBlock`], `ECONNRESET` is [`io::ErrorKind::ConnectionReset`], ...).
//!
//! Every call takes the [`Runtime`] that owns the socket's stack. A socket is a small
//! handle into the stack's tables (slot and generation), not an object with its own
//! state: the stack is sans-I/O and has one owner per shard, so there is nothing to lock
//! and nothing to share, and a handle borrows nothing, so an application can keep its
//! sockets in its own structures and still call the runtime between operations. A stale
//! handle (a socket closed through another path) fails with `EBADF`, never reaches a
//! socket that reused the slot. Handles are not `Clone`: `close` consumes one, as
//! `close(2)` ends a file descriptor.
//!
//! A handle dropped without `close` closes its socket all the same, as the kernel closes
//! the files of a process that exits: `Drop` cannot reach the stack (the runtime owns
//! it), so it queues the socket on its runtime, and the runtime's next round (any
//! [`Runtime::poll`] or [`Runtime::run_once`]) closes it like `close` would: a stream
//! sends its FIN (or a RST if data was left unread), a listener resets its unaccepted
//! connections, a UDP socket frees its port. [`RuntimeStats::closed_on_drop`] counts them.
//!
//! [`RuntimeStats::closed_on_drop`]: crate::runtime::RuntimeStats::closed_on_drop
//!
//! An echo server, epoll-style:
//!
//! ```
//! use core::net::{Ipv4Addr, SocketAddrV4};
//! use std::collections::HashMap;
//! use std::io::ErrorKind;
//! use ustack_runtime::api::{TcpListener, TcpStream};
//! use ustack_runtime::runtime::{Events, Interest, RuntimeBuilder, VirtualClock, sim_pair};
//! use ustack_runtime::Mode;
//! use ustack_stack::Instant;
//!
//! let (a, b) = sim_pair(Default::default());
//! let clock = VirtualClock::new(Instant::ZERO);
//! let mut server = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
//!     .build_with_clock(a, clock.participant())?;
//! let mut client = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
//!     .build_with_clock(b, clock.participant())?;
//!
//! let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7);
//! let listener = TcpListener::bind(&mut server, addr, 128)?;
//! server.register(&listener, 0, Interest::READABLE, Mode::Level)?;
//! let stream = TcpStream::connect(&mut client, addr)?;
//! let mut conns = HashMap::new();
//! let mut events = Events::with_capacity(64);
//! let mut sent = false;
//! let mut echoed = Vec::new();
//! while echoed.len() < 5 {
//!     server.poll(&mut events, Some(core::time::Duration::from_millis(1)))?;
//!     for e in &events {
//!         if e.token == 0 {
//!             while let Ok((s, _peer)) = listener.accept(&mut server) {
//!                 server.register(&s, 1, Interest::READABLE, Mode::Edge)?;
//!                 conns.insert(1, s);
//!             }
//!         } else if let Some(s) = conns.get(&e.token) {
//!             let mut buf = [0; 1500];
//!             loop {
//!                 match s.read(&mut server, &mut buf) {
//!                     Ok(0) => break,
//!                     Ok(n) => { s.write(&mut server, &buf[..n])?; }
//!                     Err(e) if e.kind() == ErrorKind::WouldBlock => break,
//!                     Err(e) => return Err(e),
//!                 }
//!             }
//!         }
//!     }
//!     client.run_once(Some(core::time::Duration::from_millis(1)))?;
//!     if !sent && stream.write(&mut client, b"hello").is_ok() { sent = true; }
//!     let mut buf = [0; 16];
//!     if let Ok(n) = stream.read(&mut client, &mut buf) { echoed.extend_from_slice(&buf[..n]); }
//! }
//! assert_eq!(echoed, b"hello");
//! # Ok::<(), std::io::Error>(())
//! ```

use core::net::{SocketAddr, SocketAddrV4};
use core::time::Duration;
use std::io;
use std::net::Shutdown;
use std::sync::Arc;

use ustack_dev::Device;
use ustack_stack::tcp::State;
use ustack_stack::{Error, ListenerHandle, SocketKey, TcpHandle, TcpInfo, UdpHandle};

use crate::runtime::{Clock, DropQueue, Runtime, Sleep, Source};

/// The stack's error as an `io::Error` with its errno.
fn err(e: Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

/// What closes a handle's socket when the handle is dropped without `close`: its key and
/// the queue of the runtime that owns it ([`DropQueue`]). Disarmed by an explicit close.
#[derive(Debug)]
struct OnDrop {
    key: SocketKey,
    queue: Option<Arc<DropQueue>>,
}

impl OnDrop {
    fn new<D: Device + Sleep, C: Clock>(rt: &Runtime<D, C>, key: SocketKey) -> OnDrop {
        OnDrop {
            key,
            queue: Some(rt.drop_queue()),
        }
    }

    /// The socket is closed by hand: nothing left to do on drop.
    fn disarm(&mut self) {
        self.queue = None;
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.push(self.key);
        }
    }
}

impl PartialEq for OnDrop {
    fn eq(&self, other: &OnDrop) -> bool {
        self.key == other.key
    }
}

impl Eq for OnDrop {}

/// A listening TCP socket (`socket` + `bind` + `listen`). Dropping it closes it (see the
/// [module docs](self)).
#[derive(Debug, PartialEq, Eq)]
pub struct TcpListener {
    handle: ListenerHandle,
    local: SocketAddr,
    on_drop: OnDrop,
}

impl TcpListener {
    /// Listen on `addr` (our address, 0.0.0.0 or `::`; a port other than 0) with
    /// `backlog`, clamped to `net.core.somaxconn`. `EADDRINUSE`, `EADDRNOTAVAIL`, `EINVAL`.
    /// A listener on `::` takes IPv4 connections too, their peers v4-mapped, unless
    /// [`set_only_v6`](Self::set_only_v6).
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: impl Into<SocketAddr>,
        backlog: u32,
    ) -> io::Result<TcpListener> {
        Self::bind_only_v6(rt, addr, backlog, false)
    }

    /// [`bind`](Self::bind) with `IPV6_V6ONLY` set before it listens, as a program sets
    /// it before `bind(2)` (`Stack::tcp_listen_v6only`): with `only_v6` the IPv6
    /// listener takes no IPv4 connections and may share its port with an IPv4 listener.
    /// `EAFNOSUPPORT` for `only_v6` on an IPv4 address.
    pub fn bind_only_v6<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: impl Into<SocketAddr>,
        backlog: u32,
        only_v6: bool,
    ) -> io::Result<TcpListener> {
        let addr = addr.into();
        let (stack, _) = rt.stack_now();
        let handle = match (addr, only_v6) {
            (_, false) => stack.tcp_listen(addr, backlog),
            (SocketAddr::V6(a), true) => stack.tcp_listen_v6only(a, backlog),
            (SocketAddr::V4(_), true) => Err(Error::AddrFamily),
        }
        .map_err(err)?;
        Ok(TcpListener {
            handle,
            local: addr,
            on_drop: OnDrop::new(rt, SocketKey::Listener(handle)),
        })
    }

    /// Take an established connection from the accept queue (`accept4` with
    /// `SOCK_NONBLOCK`): the stream and the peer's address (an IPv4 peer of an IPv6
    /// listener as `::ffff:a.b.c.d`). `EAGAIN` when none is waiting.
    pub fn accept<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
    ) -> io::Result<(TcpStream, SocketAddr)> {
        let (stack, _) = rt.stack_now();
        let (handle, peer) = stack.tcp_accept_addr(self.handle).map_err(err)?;
        Ok((TcpStream::new(rt, handle), peer))
    }

    /// `IPV6_V6ONLY` on an IPv6 listener (`EAFNOSUPPORT` on an IPv4 one).
    pub fn set_only_v6<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        on: bool,
    ) -> io::Result<()> {
        let (stack, _) = rt.stack_now();
        stack.tcp_listener_set_v6only(self.handle, on).map_err(err)
    }

    /// The address it was bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The stack's handle.
    pub fn handle(&self) -> ListenerHandle {
        self.handle
    }

    /// Stop listening; connections not yet accepted are reset.
    pub fn close<D: Device + Sleep, C: Clock>(mut self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        self.on_drop.disarm();
        let (stack, now) = rt.stack_now();
        stack.tcp_close_listener(now, self.handle).map_err(err)
    }
}

impl Source for TcpListener {
    fn key(&self) -> SocketKey {
        SocketKey::Listener(self.handle)
    }
}

/// A TCP connection. Dropping it closes it (see the [module docs](self)).
#[derive(Debug, PartialEq, Eq)]
pub struct TcpStream {
    handle: TcpHandle,
    on_drop: OnDrop,
}

impl TcpStream {
    fn new<D: Device + Sleep, C: Clock>(rt: &Runtime<D, C>, handle: TcpHandle) -> TcpStream {
        TcpStream {
            handle,
            on_drop: OnDrop::new(rt, SocketKey::Tcp(handle)),
        }
    }

    /// Open a connection to `addr` (non-blocking `connect`: Linux returns `EINPROGRESS`;
    /// here the stream comes back at once, with its SYN queued). The stream becomes
    /// WRITABLE when the handshake completes, or reports ERROR (`ECONNREFUSED`,
    /// `ETIMEDOUT` on the next read or write) if it fails. Data written before then is
    /// queued and sent once the connection is established. `ENETUNREACH`, `EINVAL`,
    /// `EADDRNOTAVAIL` (no ephemeral port).
    pub fn connect<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: impl Into<SocketAddr>,
    ) -> io::Result<TcpStream> {
        let addr = addr.into();
        let (stack, now) = rt.stack_now();
        let handle = stack.tcp_connect(now, addr).map_err(err)?;
        Ok(TcpStream::new(rt, handle))
    }

    /// Open a connection to `addr` and run the runtime's loop until the handshake
    /// completes (`connect(2)` on a blocking socket with `SO_SNDTIMEO`), or fails
    /// (`ECONNREFUSED`, `ETIMEDOUT` after the SYN retries, `ENETUNREACH`...), or `timeout`
    /// passes on the runtime's clock: then the attempt is reset and the error is
    /// `ETIMEDOUT` ([`io::ErrorKind::TimedOut`]). Other sockets of the runtime keep being
    /// served by the stack meanwhile, but their events wait for the next
    /// [`Runtime::poll`]. As with [`write_all`](Self::write_all), only this runtime's loop
    /// runs: for a peer on the same thread, use [`poll_connect`](Self::poll_connect).
    pub fn connect_timeout<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: impl Into<SocketAddr>,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(rt, addr)?;
        let deadline = rt.now() + timeout;
        loop {
            if stream.poll_connect(rt)? {
                return Ok(stream);
            }
            let now = rt.now();
            if now >= deadline {
                stream.abort(rt)?;
                return Err(io::Error::from_raw_os_error(Error::TimedOut.errno()));
            }
            rt.run_once(Some(deadline - now))?;
        }
    }

    /// Whether the connection is established, without waiting (a non-blocking
    /// `connect(2)`'s completion, read as `poll` + `getsockopt(SO_ERROR)` do): `Ok(false)`
    /// while the handshake is in progress, `Ok(true)` once it completed (also after the
    /// peer closed its side), the failure (`ECONNREFUSED`, `ETIMEDOUT`, `ECONNRESET`, once)
    /// if it failed, `ENOTCONN` once the connection is gone and its error was reported.
    pub fn poll_connect<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
    ) -> io::Result<bool> {
        match self.state(rt)? {
            State::SynSent | State::SynReceived => Ok(false),
            State::Closed | State::Listen => {
                let e = rt.stack_mut().tcp_take_error(self.handle).map_err(err)?;
                Err(err(e.unwrap_or(Error::NotConnected)))
            }
            _ => Ok(true),
        }
    }

    /// Open a connection to `addr` from a chosen local port (`bind(2)` then `connect(2)`):
    /// for a sharded runtime, whose outbound ports hash back to their shard
    /// ([`crate::rss::pick_local_port`]). `EADDRINUSE` if the 4-tuple or port is taken.
    pub fn connect_from<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        local_port: u16,
        addr: impl Into<SocketAddr>,
    ) -> io::Result<TcpStream> {
        let (stack, now) = rt.stack_now();
        let handle = stack.tcp_connect_from(now, local_port, addr).map_err(err)?;
        Ok(TcpStream::new(rt, handle))
    }

    /// Read into `buf`: bytes read, `Ok(0)` at end of stream, `EAGAIN` when nothing is
    /// there yet, or a pending error (`ECONNRESET`, ...) once.
    pub fn read<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        let (stack, now) = rt.stack_now();
        stack.tcp_recv(now, self.handle, buf).map_err(err)
    }

    /// Queue bytes to send: how many fit in the send buffer (a short write when it is
    /// nearly full), `EAGAIN` when none fit, `EPIPE` after shutdown. A segment they make
    /// that is the only frame queued goes to the device before this returns (counted by
    /// the loop's next round); the rest go out with that round.
    pub fn write<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &[u8],
    ) -> io::Result<usize> {
        let (stack, now) = rt.stack_now();
        let sent = stack.tcp_send(now, self.handle, buf).map_err(err);
        rt.transmit_now(now);
        sent
    }

    /// Write all of `buf`, running the runtime's loop while the send buffer is full
    /// (`write_all` on a blocking socket): returns once every byte is queued for sending
    /// (not yet acknowledged). Fails with the connection's error (`EPIPE`, `ECONNRESET`,
    /// ...), the bytes before it queued. Other sockets of the runtime keep being served by
    /// the stack meanwhile, but their events wait for the next [`Runtime::poll`]. Only
    /// this runtime's loop runs: with the peer's runtime on the same thread (a sim pair),
    /// nothing would acknowledge, so there use [`write`](Self::write) and poll both.
    pub fn write_all<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        mut buf: &[u8],
    ) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(rt, buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Room comes with ACKs, which a round brings in; a retransmission or
                    // window probe timer is armed while data is unacknowledged, so the
                    // loop always has a wake-up.
                    rt.run_once(None)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The peer's address (`getpeername(2)`).
    pub fn peer_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddr> {
        Ok(self.info(rt)?.remote)
    }

    /// Our address and port (`getsockname(2)`).
    pub fn local_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddr> {
        Ok(self.info(rt)?.local)
    }

    /// `shutdown(2)`: stop reading, writing (a FIN follows the queued data), or both.
    pub fn shutdown<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        how: Shutdown,
    ) -> io::Result<()> {
        let how = match how {
            Shutdown::Read => ustack_stack::Shutdown::Read,
            Shutdown::Write => ustack_stack::Shutdown::Write,
            Shutdown::Both => ustack_stack::Shutdown::Both,
        };
        let (stack, now) = rt.stack_now();
        stack.tcp_shutdown(now, self.handle, how).map_err(err)
    }

    /// `TCP_NODELAY`: true turns Nagle's algorithm off.
    pub fn set_nodelay<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        on: bool,
    ) -> io::Result<()> {
        let (stack, now) = rt.stack_now();
        stack.tcp_set_nodelay(now, self.handle, on).map_err(err)
    }

    /// `SO_KEEPALIVE` (probes after `net.ipv4.tcp_keepalive_time` idle).
    pub fn set_keepalive<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        on: bool,
    ) -> io::Result<()> {
        let (stack, now) = rt.stack_now();
        stack.tcp_set_keepalive(now, self.handle, on).map_err(err)
    }

    /// `SO_SNDBUF`: Linux semantics, the request capped at `net.ipv4.tcp_wmem.max`
    /// (ustack's stand-in for `net.core.wmem_max`), doubled, at least 4608 bytes; the
    /// send buffer is no longer autotuned afterwards. [`TcpStream::write`] then takes up
    /// to [`TcpStream::send_buffer_size`] unacknowledged bytes. `EBADF` for a closed
    /// stream.
    pub fn set_send_buffer_size<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        bytes: usize,
    ) -> io::Result<()> {
        rt.stack_mut()
            .tcp_set_send_buffer(self.handle, bytes)
            .map_err(err)
    }

    /// The send buffer size (`getsockopt(SO_SNDBUF)`: the doubled value once set).
    pub fn send_buffer_size<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<usize> {
        rt.stack().tcp_send_buffer(self.handle).map_err(err)
    }

    /// `SO_RCVBUF`: capped at `net.ipv4.tcp_rmem.max`, doubled, at least 2304 bytes; the
    /// receive window then follows it and is no longer autotuned.
    pub fn set_recv_buffer_size<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        bytes: usize,
    ) -> io::Result<()> {
        rt.stack_mut()
            .tcp_set_recv_buffer(self.handle, bytes)
            .map_err(err)
    }

    /// The receive buffer size (`getsockopt(SO_RCVBUF)`).
    pub fn recv_buffer_size<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<usize> {
        rt.stack().tcp_recv_buffer(self.handle).map_err(err)
    }

    /// `SO_LINGER`, as `std::net::TcpStream::set_linger` (whole seconds): with
    /// `Some(Duration::ZERO)` [`TcpStream::close`] resets the connection (RST, queued
    /// data discarded) instead of finishing it with a FIN. A non-zero time does not make
    /// close wait: ustack is non-blocking, like Linux's close of an `O_NONBLOCK` socket.
    pub fn set_linger<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        linger: Option<core::time::Duration>,
    ) -> io::Result<()> {
        rt.stack_mut()
            .tcp_set_linger(self.handle, linger)
            .map_err(err)
    }

    /// `close(2)`: the connection finishes on its own (FIN after the queued data); with
    /// unread data it is reset instead, as on Linux, and so with `SO_LINGER` of zero
    /// ([`TcpStream::set_linger`]).
    pub fn close<D: Device + Sleep, C: Clock>(mut self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        self.on_drop.disarm();
        let (stack, now) = rt.stack_now();
        stack.tcp_close(now, self.handle).map_err(err)
    }

    /// Reset the connection (`SO_LINGER` with zero time, then close).
    pub fn abort<D: Device + Sleep, C: Clock>(mut self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        self.on_drop.disarm();
        let (stack, now) = rt.stack_now();
        stack.tcp_abort(now, self.handle).map_err(err)
    }

    /// The connection's state.
    pub fn state<D: Device + Sleep, C: Clock>(&self, rt: &Runtime<D, C>) -> io::Result<State> {
        rt.stack().tcp_state(self.handle).map_err(err)
    }

    /// What `ss -tmi` shows for it (addresses, queues, cwnd, RTT, ...).
    pub fn info<D: Device + Sleep, C: Clock>(&self, rt: &Runtime<D, C>) -> io::Result<TcpInfo> {
        rt.stack().tcp_info(self.handle).map_err(err)
    }

    /// The stack's handle.
    pub fn handle(&self) -> TcpHandle {
        self.handle
    }

    /// Give up the stream but not the connection (`IntoRawFd`): its handle, which the
    /// caller must close later through [`TcpStream::from_handle`] (or a [`HandleCloser`]);
    /// dropping a handle closes nothing. For an application that keeps many connections as
    /// compact state of its own (a handle is 8 bytes, a stream 32).
    pub fn into_handle(mut self) -> TcpHandle {
        self.on_drop.disarm();
        self.handle
    }

    /// Take a connection's handle back as a stream (`FromRawFd`), closed on drop again.
    /// The handle should come from [`TcpStream::into_handle`]; one naming no live
    /// connection gives a stream whose every call fails with `EBADF`.
    pub fn from_handle<D: Device + Sleep, C: Clock>(
        rt: &Runtime<D, C>,
        handle: TcpHandle,
    ) -> TcpStream {
        TcpStream::new(rt, handle)
    }
}

/// Closes connections an application keeps as bare handles ([`TcpStream::into_handle`])
/// when the application goes away without closing them, as a [`TcpStream`]'s `Drop`
/// would: queued on the runtime, closed by its next round.
#[derive(Debug)]
pub struct HandleCloser {
    queue: Arc<DropQueue>,
}

impl HandleCloser {
    /// A closer for the connections of `rt`.
    pub fn new<D: Device + Sleep, C: Clock>(rt: &Runtime<D, C>) -> HandleCloser {
        HandleCloser {
            queue: rt.drop_queue(),
        }
    }

    /// Queue `handle`'s connection for closing by the runtime's next round.
    pub fn close_later(&self, handle: TcpHandle) {
        self.queue.push(SocketKey::Tcp(handle));
    }
}

impl Source for TcpStream {
    fn key(&self) -> SocketKey {
        SocketKey::Tcp(self.handle)
    }
}

/// A UDP socket. Dropping it closes it (see the [module docs](self)).
#[derive(Debug, PartialEq, Eq)]
pub struct UdpSocket {
    handle: UdpHandle,
    on_drop: OnDrop,
}

impl UdpSocket {
    /// Bind to `addr` (port 0: an ephemeral port). `EADDRINUSE`, `EADDRNOTAVAIL`. An IPv6
    /// address makes an IPv6 socket (on `::`: dual-stack unless
    /// [`set_only_v6`](Self::set_only_v6)), which is read with
    /// [`recv_from_addr`](Self::recv_from_addr).
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: impl Into<SocketAddr>,
    ) -> io::Result<UdpSocket> {
        let (stack, _) = rt.stack_now();
        let handle = stack.udp_bind(addr).map_err(err)?;
        Ok(UdpSocket {
            handle,
            on_drop: OnDrop::new(rt, SocketKey::Udp(handle)),
        })
    }

    /// `connect(2)` on a UDP socket: `peer` becomes the default destination of
    /// [`send`](Self::send), and only datagrams from `peer` are received; others find no
    /// socket (counted `NoPorts`, answered with an ICMP port unreachable), as Linux's
    /// `udp4_lib_lookup` skips a connected socket whose peer does not match. `None`
    /// dissolves the association (`AF_UNSPEC`). `EINVAL` for address 0.0.0.0 or port 0,
    /// `ENETUNREACH` with no route to `peer`.
    pub fn connect<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        peer: Option<SocketAddrV4>,
    ) -> io::Result<()> {
        rt.stack_mut().udp_connect(self.handle, peer).map_err(err)
    }

    /// `connect(2)` on a socket of either family (see `Stack::udp_connect_addr`): an IPv6
    /// socket takes an IPv6 peer or a `::ffff:a.b.c.d` one; `EAFNOSUPPORT` for a peer of
    /// the other family.
    pub fn connect_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        peer: Option<SocketAddr>,
    ) -> io::Result<()> {
        rt.stack_mut()
            .udp_connect_addr(self.handle, peer)
            .map_err(err)
    }

    /// The connected peer of a socket of either family: `ENOTCONN` if not connected.
    pub fn peer_sockaddr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddr> {
        rt.stack()
            .udp_peer_sockaddr(self.handle)
            .map_err(err)?
            .ok_or_else(|| err(Error::NotConnected))
    }

    /// The connected peer (`getpeername(2)`): `ENOTCONN` if not connected.
    pub fn peer_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddrV4> {
        rt.stack()
            .udp_peer_addr(self.handle)
            .map_err(err)?
            .ok_or_else(|| err(Error::NotConnected))
    }

    /// Send one datagram to the connected peer: its length. `EDESTADDRREQ` if not
    /// connected; otherwise as [`send_to`](Self::send_to).
    pub fn send<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &[u8],
    ) -> io::Result<usize> {
        let peer = rt
            .stack()
            .udp_peer_sockaddr(self.handle)
            .map_err(err)?
            .ok_or_else(|| err(Error::DestAddrRequired))?;
        self.send_to(rt, buf, peer)
    }

    /// Take one datagram (from the connected peer, if connected): its length, cut to `buf`.
    /// `EAGAIN` when none.
    pub fn recv<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        self.recv_from_addr(rt, buf).map(|(n, _)| n)
    }

    /// The bound address (with the ephemeral port picked) of an IPv4 socket
    /// (`EAFNOSUPPORT` for an IPv6 one: see [`local_sockaddr`](Self::local_sockaddr)).
    pub fn local_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddrV4> {
        rt.stack().udp_local_addr(self.handle).map_err(err)
    }

    /// `IPV6_V6ONLY` on an IPv6 socket (see `Stack::udp_set_v6only`): off by default, so
    /// a socket on `::` also takes IPv4 datagrams (their sender as `::ffff:a.b.c.d`).
    /// `EAFNOSUPPORT` on an IPv4 socket.
    pub fn set_only_v6<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        only_v6: bool,
    ) -> io::Result<()> {
        rt.stack_mut()
            .udp_set_v6only(self.handle, only_v6)
            .map_err(err)
    }

    /// The bound address of a socket of either family.
    pub fn local_sockaddr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddr> {
        rt.stack().udp_local_sockaddr(self.handle).map_err(err)
    }

    /// Send one datagram to `dst`: its length. `EMSGSIZE`, `ENETUNREACH`, `EACCES`
    /// (broadcast), `EAFNOSUPPORT` (`dst` not of the socket's family).
    pub fn send_to<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &[u8],
        dst: impl Into<SocketAddr>,
    ) -> io::Result<usize> {
        let (stack, now) = rt.stack_now();
        let sent = stack.udp_send_to(now, self.handle, buf, dst).map_err(err);
        rt.transmit_now(now);
        sent.map(|()| buf.len())
    }

    /// Take one datagram: its length (cut to `buf`) and sender. `EAGAIN` when none;
    /// `EAFNOSUPPORT` on an IPv6 socket (use [`recv_from_addr`](Self::recv_from_addr)).
    pub fn recv_from<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddrV4)> {
        let (stack, _) = rt.stack_now();
        stack.udp_recv_from(self.handle, buf).map_err(err)
    }

    /// Take one datagram from a socket of either family: its length (cut to `buf`) and
    /// sender. `EAGAIN` when none.
    pub fn recv_from_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddr)> {
        let (stack, _) = rt.stack_now();
        stack.udp_recv_from_addr(self.handle, buf).map_err(err)
    }

    /// Close it; queued datagrams are freed.
    pub fn close<D: Device + Sleep, C: Clock>(mut self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        self.on_drop.disarm();
        let (stack, _) = rt.stack_now();
        stack.udp_close(self.handle).map_err(err)
    }

    /// The stack's handle.
    pub fn handle(&self) -> UdpHandle {
        self.handle
    }
}

impl Source for UdpSocket {
    fn key(&self) -> SocketKey {
        SocketKey::Udp(self.handle)
    }
}
