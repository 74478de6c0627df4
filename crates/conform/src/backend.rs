//! The interface between the executor and a TCP/IP stack under test, shaped like
//! packetdrill's `struct packetdrill_interface` (`packetdrill.h`, the contract of its
//! `--so_filename` shared-library mode).
//!
//! Each callback has a counterpart there: `netdev_send` takes a raw IP packet (IPv4 or
//! IPv6, by the run's family) from the script's remote end into the stack,
//! `netdev_receive` gives back the next IP packet the
//! stack sends (waiting at most a timeout: the executor bounds every wait) with the time it
//! came out (packetdrill reads the clock after the call instead: a backend that stamps
//! packets as they leave keeps a busy runner from seeing them late), `usleep` and
//! `gettimeofday` ([`Backend::usleep`], [`Backend::now_us`]) keep the time, and the system
//! calls take Linux's values (socket types, levels, option names, flags and errno numbers),
//! as a C API would. A backend is `Sync`: the executor runs a blocking call (`0...0.2
//! accept(...)`) on a thread of its own while it goes on sending and receiving packets, as
//! packetdrill does. `free` ([`Backend::free`]) ends the run: it wakes any call still
//! blocked and releases everything.
//!
//! Time: the executor never sleeps by itself. It waits for an event's time by calling
//! `netdev_receive` with the time left (taking the packets that come out meanwhile), and
//! reads the clock with `now_us`. A real-time backend blocks in `netdev_receive`; a backend
//! on a virtual clock runs the stack's timers up to the timeout there and returns at once,
//! so a script runs as fast as the machine allows and to the microsecond (the stand-in in
//! `tests/exec.rs` works that way). Calls that block (`start...end`) run on threads of
//! their own: a virtual-clock backend wakes them when a packet or a timer changes the
//! stack's state.
//!
//! Two backends: [`crate::linux::Linux`] (the kernel, real time, a TUN in a network
//! namespace) and [`crate::ustack::Ustack`] (ustack's stack on a virtual clock:
//! `netdev_receive` advances the clock to the stack's next timer until a packet comes
//! out). The packetdrill shared library (`crates/pdlib`) exports the latter through
//! packetdrill's C table, and [`crate::so::SoBackend`] loads any such library back as a
//! backend.

use core::net::SocketAddr;
use core::time::Duration;
use std::io;

/// A system call's result: the value it returned, or the errno it failed with (Linux's
/// numbers).
pub type SysResult = Result<i64, i32>;

/// One `struct pollfd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollFd {
    /// The (live) descriptor.
    pub fd: i32,
    /// Events asked for (`POLLIN`, ...).
    pub events: i16,
    /// Events returned.
    pub revents: i16,
}

/// One `struct epoll_event`: the events and the 64-bit user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EpollEvent {
    /// `EPOLLIN`, ...
    pub events: u32,
    /// The user data (scripts put the descriptor's script number here).
    pub data: u64,
}

/// A stack under test (see the module docs).
pub trait Backend: Send + Sync {
    /// Hands the stack one IP packet (IPv4 or IPv6) from the remote end.
    fn netdev_send(&self, packet: &[u8]) -> io::Result<()>;
    /// The next IP packet the stack sends, waiting at most `timeout`, and the time it
    /// came out on the backend's clock ([`Backend::now_us`]); `None` if none came.
    fn netdev_receive(&self, timeout: Duration) -> io::Result<Option<(Vec<u8>, u64)>>;
    /// Sleeps `us` microseconds of the backend's clock.
    fn usleep(&self, us: u64);
    /// The backend's clock, in microseconds (from any origin).
    fn now_us(&self) -> u64;

    /// When the call this thread made last returned, on the backend's clock: what the
    /// executor stamps a call's return with. A backend on a virtual clock whose blocked
    /// calls complete in the thread that moves the clock says when that was (the clock
    /// may have moved on before the caller's thread ran); the default reads the clock.
    fn returned_at_us(&self) -> u64 {
        self.now_us()
    }
    /// How many calls are blocked in the backend now, if it can tell (`None`, the
    /// default: a real-time backend, whose blocked calls wait in the kernel). The
    /// executor waits, after starting a call that may block, until the call has returned
    /// or is counted here before it moves a virtual clock on.
    fn blocked_calls(&self) -> Option<usize> {
        None
    }

    /// Sets a tunable by its Linux name (`net.ipv4.tcp_syncookies`) to `value` (a script's
    /// `` `sysctl -q NAME=VALUE` `` line); the default refuses (`Unsupported`).
    fn sysctl(&self, name: &str, value: &str) -> io::Result<()> {
        let _ = value;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("this backend cannot set {name}"),
        ))
    }

    /// `socket(domain, type, protocol)`.
    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> SysResult;
    /// `bind(fd, addr)`.
    fn bind(&self, fd: i32, addr: SocketAddr) -> SysResult;
    /// `listen(fd, backlog)`.
    fn listen(&self, fd: i32, backlog: i32) -> SysResult;
    /// `accept4(fd, NULL, NULL, flags)` (`accept` is `flags` 0).
    fn accept(&self, fd: i32, flags: i32) -> SysResult;
    /// `connect(fd, addr)`.
    fn connect(&self, fd: i32, addr: SocketAddr) -> SysResult;
    /// `read(fd, buf, len)`.
    fn read(&self, fd: i32, buf: &mut [u8]) -> SysResult;
    /// `recv(fd, buf, len, flags)`.
    fn recv(&self, fd: i32, buf: &mut [u8], flags: i32) -> SysResult;
    /// `write(fd, buf, len)`.
    fn write(&self, fd: i32, buf: &[u8]) -> SysResult;
    /// `send(fd, buf, len, flags)`.
    fn send(&self, fd: i32, buf: &[u8], flags: i32) -> SysResult;
    /// `shutdown(fd, how)`.
    fn shutdown(&self, fd: i32, how: i32) -> SysResult;
    /// `close(fd)`.
    fn close(&self, fd: i32) -> SysResult;
    /// `getsockopt(fd, level, name, buf, &len)`: the length written.
    fn getsockopt(&self, fd: i32, level: i32, name: i32, buf: &mut [u8]) -> Result<usize, i32>;
    /// `setsockopt(fd, level, name, val, len)`.
    fn setsockopt(&self, fd: i32, level: i32, name: i32, val: &[u8]) -> SysResult;
    /// `fcntl(fd, cmd, arg)`.
    fn fcntl(&self, fd: i32, cmd: i32, arg: i64) -> SysResult;
    /// `poll(fds, nfds, timeout_ms)`.
    fn poll(&self, fds: &mut [PollFd], timeout_ms: i32) -> SysResult;
    /// `epoll_create(size)`.
    fn epoll_create(&self, size: i32) -> SysResult;
    /// `epoll_ctl(epfd, op, fd, &event)`.
    fn epoll_ctl(&self, epfd: i32, op: i32, fd: i32, event: EpollEvent) -> SysResult;
    /// `epoll_wait(epfd, events, events.len(), timeout_ms)`.
    fn epoll_wait(&self, epfd: i32, events: &mut [EpollEvent], timeout_ms: i32) -> SysResult;

    /// Ends the run: wakes every call still blocked (its descriptors shut down), closes
    /// everything the script left open, and releases the stack.
    fn free(&self);
}
