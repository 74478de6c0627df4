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
//! `close(2)` ends a file descriptor. Dropping one without `close` leaves the socket open
//! in the stack until the runtime goes.
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
//! use ustack_stack::{EthernetAddress, Instant};
//!
//! let (a, b) = sim_pair(Default::default());
//! let clock = VirtualClock::new(Instant::ZERO);
//! let mut server = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
//!     .build_with_clock(a, clock.participant())?;
//! let mut client = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
//!     .mac(EthernetAddress([2, 0, 0, 0, 0, 2])).build_with_clock(b, clock.participant())?;
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

use core::net::SocketAddrV4;
use std::io;
use std::net::Shutdown;

use ustack_dev::Device;
use ustack_stack::tcp::State;
use ustack_stack::{Error, ListenerHandle, SocketKey, TcpHandle, TcpInfo, UdpHandle};

use crate::runtime::{Clock, Runtime, Sleep, Source};

/// The stack's error as an `io::Error` with its errno.
fn err(e: Error) -> io::Error {
    io::Error::from_raw_os_error(e.errno())
}

/// A listening TCP socket (`socket` + `bind` + `listen`).
#[derive(Debug, PartialEq, Eq)]
pub struct TcpListener {
    handle: ListenerHandle,
    local: SocketAddrV4,
}

impl TcpListener {
    /// Listen on `addr` (our address or 0.0.0.0; a port other than 0) with `backlog`,
    /// clamped to `net.core.somaxconn`. `EADDRINUSE`, `EADDRNOTAVAIL`, `EINVAL`.
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: SocketAddrV4,
        backlog: u32,
    ) -> io::Result<TcpListener> {
        let (stack, _) = rt.stack_now();
        let handle = stack.tcp_listen(addr, backlog).map_err(err)?;
        Ok(TcpListener {
            handle,
            local: addr,
        })
    }

    /// Take an established connection from the accept queue (`accept4` with
    /// `SOCK_NONBLOCK`): the stream and the peer's address. `EAGAIN` when none is waiting.
    pub fn accept<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
    ) -> io::Result<(TcpStream, SocketAddrV4)> {
        let (stack, _) = rt.stack_now();
        let (handle, peer) = stack.tcp_accept(self.handle).map_err(err)?;
        Ok((TcpStream { handle }, peer))
    }

    /// The address it was bound to.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The stack's handle.
    pub fn handle(&self) -> ListenerHandle {
        self.handle
    }

    /// Stop listening; connections not yet accepted are reset.
    pub fn close<D: Device + Sleep, C: Clock>(self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        let (stack, now) = rt.stack_now();
        stack.tcp_close_listener(now, self.handle).map_err(err)
    }
}

impl Source for TcpListener {
    fn key(&self) -> SocketKey {
        SocketKey::Listener(self.handle)
    }
}

/// A TCP connection.
#[derive(Debug, PartialEq, Eq)]
pub struct TcpStream {
    handle: TcpHandle,
}

impl TcpStream {
    /// Open a connection to `addr` (non-blocking `connect`: Linux returns `EINPROGRESS`;
    /// here the stream comes back at once, with its SYN queued). The stream becomes
    /// WRITABLE when the handshake completes, or reports ERROR (`ECONNREFUSED`,
    /// `ETIMEDOUT` on the next read or write) if it fails. Data written before then is
    /// queued and sent once the connection is established. `ENETUNREACH`, `EINVAL`,
    /// `EADDRNOTAVAIL` (no ephemeral port).
    pub fn connect<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: SocketAddrV4,
    ) -> io::Result<TcpStream> {
        let (stack, now) = rt.stack_now();
        let handle = stack.tcp_connect(now, addr).map_err(err)?;
        Ok(TcpStream { handle })
    }

    /// Open a connection to `addr` from a chosen local port (`bind(2)` then `connect(2)`):
    /// for a sharded runtime, whose outbound ports hash back to their shard
    /// ([`crate::rss::pick_local_port`]). `EADDRINUSE` if the 4-tuple or port is taken.
    pub fn connect_from<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        local_port: u16,
        addr: SocketAddrV4,
    ) -> io::Result<TcpStream> {
        let (stack, now) = rt.stack_now();
        let handle = stack.tcp_connect_from(now, local_port, addr).map_err(err)?;
        Ok(TcpStream { handle })
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
    /// nearly full), `EAGAIN` when none fit, `EPIPE` after shutdown. They go out with the
    /// loop's next round.
    pub fn write<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &[u8],
    ) -> io::Result<usize> {
        let (stack, now) = rt.stack_now();
        stack.tcp_send(now, self.handle, buf).map_err(err)
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
    pub fn close<D: Device + Sleep, C: Clock>(self, rt: &mut Runtime<D, C>) -> io::Result<()> {
        let (stack, now) = rt.stack_now();
        stack.tcp_close(now, self.handle).map_err(err)
    }

    /// Reset the connection (`SO_LINGER` with zero time, then close).
    pub fn abort<D: Device + Sleep, C: Clock>(self, rt: &mut Runtime<D, C>) -> io::Result<()> {
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
}

impl Source for TcpStream {
    fn key(&self) -> SocketKey {
        SocketKey::Tcp(self.handle)
    }
}

/// A UDP socket.
#[derive(Debug, PartialEq, Eq)]
pub struct UdpSocket {
    handle: UdpHandle,
}

impl UdpSocket {
    /// Bind to `addr` (port 0: an ephemeral port). `EADDRINUSE`, `EADDRNOTAVAIL`.
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        addr: SocketAddrV4,
    ) -> io::Result<UdpSocket> {
        let (stack, _) = rt.stack_now();
        let handle = stack.udp_bind(addr).map_err(err)?;
        Ok(UdpSocket { handle })
    }

    /// The bound address (with the ephemeral port picked).
    pub fn local_addr<D: Device + Sleep, C: Clock>(
        &self,
        rt: &Runtime<D, C>,
    ) -> io::Result<SocketAddrV4> {
        rt.stack().udp_local_addr(self.handle).map_err(err)
    }

    /// Send one datagram to `dst`: its length. `EMSGSIZE`, `ENETUNREACH`, `EACCES`
    /// (broadcast).
    pub fn send_to<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &[u8],
        dst: SocketAddrV4,
    ) -> io::Result<usize> {
        let (stack, now) = rt.stack_now();
        stack.udp_send_to(now, self.handle, buf, dst).map_err(err)?;
        Ok(buf.len())
    }

    /// Take one datagram: its length (cut to `buf`) and sender. `EAGAIN` when none.
    pub fn recv_from<D: Device + Sleep, C: Clock>(
        &self,
        rt: &mut Runtime<D, C>,
        buf: &mut [u8],
    ) -> io::Result<(usize, SocketAddrV4)> {
        let (stack, _) = rt.stack_now();
        stack.udp_recv_from(self.handle, buf).map_err(err)
    }

    /// Close it; queued datagrams are freed.
    pub fn close<D: Device + Sleep, C: Clock>(self, rt: &mut Runtime<D, C>) -> io::Result<()> {
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
