//! std::net-shaped sockets over a [`Net`]: [`TcpListener`], [`TcpStream`] and
//! [`UdpSocket`], with the methods of their std namesakes (the constructors take the
//! `Net` first), blocking by default, `std::io::Read`/`Write` on the stream and on
//! `&TcpStream`, errors with std's [`io::ErrorKind`]s on Linux. Dropping a socket closes
//! it (its last handle, after [`TcpStream::try_clone`]).
//!
//! IPv4 and IPv6 alike: a listener or UDP socket on `::` is dual-stack (IPv4 peers as
//! `::ffff:a.b.c.d`), as std's on Linux. A listener needs a port other than 0.

use core::time::Duration;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};

use crate::core::{Fd, Net, Wait};

/// The backlog std's `TcpListener::bind` asks for on Linux (`listen(fd, -1)`, clamped to
/// `net.core.somaxconn`).
const BACKLOG: u32 = u32::MAX;

fn addrs(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let all: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if all.is_empty() {
        // std's message for a name that resolves to nothing.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        ));
    }
    Ok(all)
}

/// Try `f` on each address, as std does: the first success, or the last error.
fn each_addr<T>(
    addr: impl ToSocketAddrs,
    mut f: impl FnMut(SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for a in addrs(addr)? {
        match f(a) {
            Ok(v) => return Ok(v),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::InvalidInput)))
}

/// A handle that closes itself.
#[derive(Debug)]
struct Handle {
    net: Net,
    fd: Fd,
}

impl Handle {
    fn try_clone(&self) -> io::Result<Handle> {
        Ok(Handle {
            net: self.net.clone(),
            fd: self.net.dup(self.fd)?,
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.net.close(self.fd);
    }
}

// ---- TcpListener -----------------------------------------------------------------------------

/// A TCP listener, as [`std::net::TcpListener`].
#[derive(Debug)]
pub struct TcpListener {
    h: Handle,
}

impl TcpListener {
    /// Listen on `addr` (every shard of the `Net`). `AddrInUse`, `AddrNotAvailable`.
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        each_addr(addr, |a| net.tcp_listen(a, BACKLOG)).map(|fd| TcpListener {
            h: Handle {
                net: net.clone(),
                fd,
            },
        })
    }

    /// Accept a connection: the stream and the peer's address. Waits unless non-blocking
    /// (`WouldBlock` then).
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let wait = self.h.net.read_wait(self.h.fd)?;
        let (fd, peer) = self.h.net.accept(self.h.fd, wait)?;
        Ok((
            TcpStream {
                h: Handle {
                    net: self.h.net.clone(),
                    fd,
                },
            },
            peer,
        ))
    }

    /// An iterator over the connections accepted (never `None`).
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.h.net.local_addr(self.h.fd)
    }

    /// `accept` returns `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.h.net.set_nonblocking(self.h.fd, on)
    }

    /// Another handle on the same listener.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        Ok(TcpListener {
            h: self.h.try_clone()?,
        })
    }

    /// The handle (for [`Epoll`](crate::Epoll) and the core calls of [`Net`]).
    pub fn fd(&self) -> Fd {
        self.h.fd
    }
}

/// The connections of a [`TcpListener`], as [`std::net::Incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

// ---- TcpStream -------------------------------------------------------------------------------

/// A TCP connection, as [`std::net::TcpStream`].
#[derive(Debug)]
pub struct TcpStream {
    h: Handle,
}

impl TcpStream {
    /// Connect to `addr`, waiting for the handshake. `ConnectionRefused` if nobody
    /// listens, `TimedOut` after the SYN retries.
    pub fn connect(net: &Net, addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        each_addr(addr, |a| net.tcp_connect(a, Wait::Forever)).map(|fd| TcpStream {
            h: Handle {
                net: net.clone(),
                fd,
            },
        })
    }

    /// Connect, giving up after `timeout` (`TimedOut`, as std; a zero timeout is
    /// `InvalidInput`, as std).
    pub fn connect_timeout(
        net: &Net,
        addr: &SocketAddr,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        each_addr(*addr, |a| net.tcp_connect(a, Wait::timeout(Some(timeout)))).map(|fd| TcpStream {
            h: Handle {
                net: net.clone(),
                fd,
            },
        })
    }

    /// `shutdown(2)`: `Write` sends a FIN after the queued data (the peer reads EOF).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.h.net.shutdown(self.h.fd, how)
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.h.net.set_nodelay(self.h.fd, on)
    }

    /// `TCP_NODELAY`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.h.net.nodelay(self.h.fd)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.h.net.peer_addr(self.h.fd)
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.h.net.local_addr(self.h.fd)
    }

    /// `SO_LINGER`, as std's (unstable) `set_linger`: `Some(Duration::ZERO)` makes the
    /// close (the drop of the last handle) a reset.
    pub fn set_linger(&self, linger: Option<Duration>) -> io::Result<()> {
        self.h.net.set_linger(self.h.fd, linger)
    }

    /// `SO_RCVTIMEO`: a read that waits longer fails with `WouldBlock`, as std's on Linux.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.h.net.set_read_timeout(self.h.fd, t)
    }

    /// `SO_SNDTIMEO`: a write that waits longer fails with `WouldBlock`.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.h.net.set_write_timeout(self.h.fd, t)
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        self.h.net.read_timeout(self.h.fd)
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        self.h.net.write_timeout(self.h.fd)
    }

    /// Reads and writes return `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.h.net.set_nonblocking(self.h.fd, on)
    }

    /// Another handle on the same connection (settings shared, as `dup(2)`); the
    /// connection closes when the last is dropped.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream {
            h: self.h.try_clone()?,
        })
    }

    /// The handle (for [`Epoll`](crate::Epoll) and the core calls of [`Net`]).
    pub fn fd(&self) -> Fd {
        self.h.fd
    }

    /// The `Net` it lives on.
    pub fn net(&self) -> &Net {
        &self.h.net
    }

    fn read_from(&self, buf: &mut [u8]) -> io::Result<usize> {
        let wait = self.h.net.read_wait(self.h.fd)?;
        self.h.net.read(self.h.fd, buf, wait)
    }

    fn write_from(&self, buf: &[u8]) -> io::Result<usize> {
        let wait = self.h.net.write_wait(self.h.fd)?;
        self.h.net.write(self.h.fd, buf, wait)
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_from(buf)
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_from(buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_from(buf)
    }
    /// Nothing to do: bytes written are queued for sending, as with a kernel socket.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_from(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---- UdpSocket -------------------------------------------------------------------------------

/// A UDP socket, as [`std::net::UdpSocket`].
#[derive(Debug)]
pub struct UdpSocket {
    h: Handle,
}

impl UdpSocket {
    /// Bind to `addr` (port 0: an ephemeral port).
    pub fn bind(net: &Net, addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        each_addr(addr, |a| net.udp_bind(a)).map(|fd| UdpSocket {
            h: Handle {
                net: net.clone(),
                fd,
            },
        })
    }

    /// Send one datagram to `addr`.
    pub fn send_to(&self, buf: &[u8], addr: impl ToSocketAddrs) -> io::Result<usize> {
        let dst = addrs(addr)?[0];
        self.h.net.send_to(self.h.fd, buf, dst)
    }

    /// Take one datagram (cut to `buf`) and its sender; waits unless non-blocking, up to
    /// the read timeout (`WouldBlock`).
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let wait = self.h.net.read_wait(self.h.fd)?;
        let (n, from) = self.h.net.recv_from(self.h.fd, buf, wait)?;
        Ok((n, from))
    }

    /// Set the default peer: [`send`](Self::send) goes to it, only its datagrams arrive.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        each_addr(addr, |a| self.h.net.udp_connect(self.h.fd, Some(a)))
    }

    /// Send one datagram to the connected peer.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.h.net.send(self.h.fd, buf)
    }

    /// Take one datagram from the connected peer.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_from(buf).map(|(n, _)| n)
    }

    /// `SO_RCVTIMEO`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.h.net.set_read_timeout(self.h.fd, t)
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        self.h.net.read_timeout(self.h.fd)
    }

    /// `SO_SNDTIMEO` (kept for std's shape: a ustack datagram send never waits).
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.h.net.set_write_timeout(self.h.fd, t)
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.h.net.local_addr(self.h.fd)
    }

    /// The connected peer (`NotConnected` if none).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.h.net.peer_addr(self.h.fd)
    }

    /// `recv_from` returns `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.h.net.set_nonblocking(self.h.fd, on)
    }

    /// Another handle on the same socket.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        Ok(UdpSocket {
            h: self.h.try_clone()?,
        })
    }

    /// The handle.
    pub fn fd(&self) -> Fd {
        self.h.fd
    }
}
