//! Model (b): the stack's loop driven inside tokio, on the thread of the tasks that use it.
//!
//! A [`LocalStack`] owns one stack (a runtime over one link) on a tokio current-thread
//! runtime, inside a [`tokio::task::LocalSet`]. A *driver* task runs the stack's rounds
//! (receive, transmit, timers, the poller) without blocking; between rounds it waits on
//! tokio's reactor: the link's file (the shm doorbell, the TUN queue) registered with
//! [`AsyncFd`], the stack's next deadline on tokio's clock, or a *kick* from a socket call
//! that queued something for the next round. Socket calls ([`LocalTcpStream`]'s
//! `AsyncRead`/`AsyncWrite`, [`LocalTcpListener::accept`]) call the stack directly (a
//! `RefCell` borrow, no lock, no thread crossed); a call that would block registers the
//! task's waker under the socket's poller token, and the driver wakes it when the
//! poller reports the socket. So a message costs function calls and, when the driver
//! sleeps, one `epoll_wait` in tokio's reactor: no hand-off to a loop thread.
//!
//! The cost of this shape: the stack runs only while the tokio thread runs it (a task
//! that blocks its thread stalls ACKs and timers, as it stalls every other task), the
//! sockets are `!Send` (one stack per thread: a shard per current-thread runtime), and a
//! link needs a file to wait on (shm, TUN; not the in-process sim link).
//!
//! ```no_run
//! use ustack_dev::shm::{ShmConfig, ShmLink};
//! use ustack_runtime::RuntimeBuilder;
//! use ustack_tokio::local::{LocalStack, LocalTcpListener};
//!
//! let (a, _peer) = ShmLink::pair(&ShmConfig::default())?;
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! tokio::task::LocalSet::new().block_on(&rt, async {
//!     let builder = RuntimeBuilder::new().ipv4("10.0.0.1".parse().unwrap(), 24);
//!     let stack = LocalStack::new(builder, a.into_iter().next().unwrap())?;
//!     let listener = LocalTcpListener::bind(&stack, "10.0.0.1:7".parse().unwrap())?;
//!     let (_stream, _peer) = listener.accept().await?;
//!     Ok::<(), std::io::Error>(())
//! })?;
//! # Ok::<(), std::io::Error>(())
//! ```

use core::cell::{Cell, RefCell};
use core::future::poll_fn;
use core::net::SocketAddr;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::collections::HashMap;
use std::io;
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::rc::{Rc, Weak};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use ustack_net::{DynLink, Link, LoopRuntime};
use ustack_runtime::runtime::{Events, Interest, RuntimeBuilder, Source};
use ustack_runtime::{Mode, api};
use ustack_stack::Readiness;

use crate::BACKLOG;
use crate::halves::owned_halves;

/// A connection's (and a UDP socket's) interest: both ways.
const BOTH: Interest = Interest::new(Readiness::READABLE.union(Readiness::WRITABLE));

/// The wakers of the tasks waiting on one socket (by its poller token).
#[derive(Debug, Default)]
struct Waiting {
    read: Option<Waker>,
    write: Option<Waker>,
}

/// The stack and what its driver and sockets share, on one thread.
struct Inner {
    rt: RefCell<LoopRuntime>,
    waiting: RefCell<HashMap<u64, Waiting>>,
    next_token: Cell<u64>,
    /// A socket call queued work for the next round (a segment, a close).
    kicked: Cell<bool>,
    /// The driver's waker while it waits.
    driver: RefCell<Option<Waker>>,
    /// Rounds run and waits on the reactor (for tests and the docs' figures).
    rounds: Cell<u64>,
    waits: Cell<u64>,
    /// Why the driver stopped, if its round failed: every call parked or made after that
    /// gets this error instead of waiting for a round that will not come.
    stopped: RefCell<Option<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The driver holds a weak reference: let it see that the stack is gone.
        if let Some(w) = self.driver.get_mut().take() {
            w.wake();
        }
    }
}

impl Inner {
    fn kick(&self) {
        self.kicked.set(true);
        if let Some(w) = self.driver.borrow_mut().take() {
            w.wake();
        }
    }

    /// A socket `make` opens on the stack, registered with the poller (edge-triggered, for
    /// `interest`) under a new token.
    fn open<S: Source>(
        &self,
        interest: Interest,
        make: impl FnOnce(&mut LoopRuntime) -> io::Result<S>,
    ) -> io::Result<(S, u64)> {
        let mut rt = self.rt.borrow_mut();
        let sock = make(&mut rt)?;
        let token = self.token();
        rt.register(&sock, token, interest, Mode::Edge)?;
        Ok((sock, token))
    }

    fn token(&self) -> u64 {
        let t = self.next_token.get();
        self.next_token.set(t + 1);
        t
    }

    /// Wake `cx`'s task when socket `token` is next reported (for reading if `read`):
    /// `Pending`, or the driver's error if it has stopped.
    fn park<T>(&self, token: u64, read: bool, cx: &Context<'_>) -> Poll<io::Result<T>> {
        if let Some(why) = &*self.stopped.borrow() {
            return Poll::Ready(Err(io::Error::other(format!(
                "ustack-tokio: the stack's driver stopped: {why}"
            ))));
        }
        let mut waiting = self.waiting.borrow_mut();
        let w = waiting.entry(token).or_default();
        let slot = if read { &mut w.read } else { &mut w.write };
        match slot {
            Some(t) if t.will_wake(cx.waker()) => {}
            t => *t = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// What a write or send call `r` on socket `token` gives its task: queued (the
    /// driver's next round sends it), parked until writable, or the error.
    fn queued<T>(&self, r: io::Result<T>, token: u64, cx: &Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Ok(n) => {
                self.kick();
                Poll::Ready(Ok(n))
            }
            Err(e) if would_block(&e) => self.park(token, false, cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The driver's round failed: record why and wake every parked task (each retries
    /// its call and gets the error from [`park`](Self::park)).
    fn stop(&self, why: String) {
        *self.stopped.borrow_mut() = Some(why);
        let parked: Vec<Waiting> = self.waiting.borrow_mut().drain().map(|(_, w)| w).collect();
        for t in parked.into_iter().flat_map(|w| [w.read, w.write]).flatten() {
            t.wake();
        }
    }

    /// The poller reported socket `token`: wake its tasks (they retry their call).
    fn wake(&self, token: u64) {
        let w = self
            .waiting
            .borrow_mut()
            .get_mut(&token)
            .map(core::mem::take);
        if let Some(w) = w {
            for t in [w.read, w.write].into_iter().flatten() {
                t.wake();
            }
        }
    }

    fn forget(&self, token: u64) {
        self.waiting.borrow_mut().remove(&token);
        self.kick();
    }
}

/// A stack driven by a task on the current thread's tokio runtime (model (b), see the
/// [module docs](self)). Clones share the stack.
#[derive(Clone)]
pub struct LocalStack {
    inner: Rc<Inner>,
}

impl core::fmt::Debug for LocalStack {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LocalStack")
            .field("rounds", &self.inner.rounds.get())
            .field("waits", &self.inner.waits.get())
            .finish_non_exhaustive()
    }
}

impl LocalStack {
    /// A stack built by `builder` over `link`, its driver spawned on the current
    /// [`tokio::task::LocalSet`] (panics outside one, as `spawn_local` does).
    /// `InvalidInput` for a link without a file to wait on (the sim link).
    pub fn new(builder: RuntimeBuilder, link: impl Link + 'static) -> io::Result<LocalStack> {
        let mut files = Vec::new();
        link.sleep_fds(&mut files);
        if files.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ustack-tokio: LocalStack needs a link with a file to wait on (shm, TUN)",
            ));
        }
        let fds = files
            .into_iter()
            .map(|f| readable_fd(f.try_clone_to_owned()?))
            .collect::<io::Result<Vec<_>>>()?;
        let rt = builder.build(DynLink::new(link))?;
        let inner = Rc::new(Inner {
            rt: RefCell::new(rt),
            waiting: RefCell::default(),
            next_token: Cell::new(0),
            kicked: Cell::new(false),
            driver: RefCell::default(),
            rounds: Cell::new(0),
            waits: Cell::new(0),
            stopped: RefCell::default(),
        });
        tokio::task::spawn_local(drive(Rc::downgrade(&inner), fds));
        Ok(LocalStack { inner })
    }

    /// Model (b) sharded: one thread per link, each a current-thread runtime with a
    /// [`tokio::task::LocalSet`] and a [`LocalStack`] over its link (built by
    /// `builder.shard(k)` for link `k`), running `f(stack, k)` to its end; its output, or
    /// the error building the runtime or the stack, comes back through the thread's
    /// handle. A shard binds a listener of its own on the shared address, as each thread
    /// of a server does with `SO_REUSEPORT`, and serves the connections its link brings
    /// (over shm, queue pair `k`'s; a `Net` client over the same link spreads its
    /// connections over the queue pairs one after another).
    pub fn spawn_shards<L, F, Fut>(
        builder: RuntimeBuilder,
        links: Vec<L>,
        f: F,
    ) -> io::Result<Vec<std::thread::JoinHandle<io::Result<Fut::Output>>>>
    where
        L: Link + Send + 'static,
        F: Fn(LocalStack, usize) -> Fut + Send + Sync + 'static,
        Fut: core::future::Future + 'static,
        Fut::Output: Send + 'static,
    {
        let f = std::sync::Arc::new(f);
        links
            .into_iter()
            .enumerate()
            .map(|(k, link)| {
                let (f, b) = (f.clone(), builder.clone().shard(k));
                std::thread::Builder::new()
                    .name(format!("local-shard-{k}"))
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        tokio::task::LocalSet::new().block_on(&rt, async move {
                            let stack = LocalStack::new(b, link)?;
                            Ok(f(stack, k).await)
                        })
                    })
            })
            .collect()
    }

    /// Rounds the driver ran and the times it waited on the reactor.
    pub fn driver_counters(&self) -> (u64, u64) {
        (self.inner.rounds.get(), self.inner.waits.get())
    }

    /// The stack's runtime, for what the socket types do not wrap (statistics, sockets,
    /// memory). Do not hold the borrow across an `.await`.
    pub fn runtime(&self) -> core::cell::RefMut<'_, LoopRuntime> {
        self.inner.rt.borrow_mut()
    }
}

/// `fd` registered with tokio's reactor for reading. tokio 1.54 deprecates the safe
/// constructors for types whose `as_raw_fd` might change or close; an [`OwnedFd`] moved
/// into the `AsyncFd` is open and the same file for the `AsyncFd`'s whole life, the case
/// the unsafe `register` asks its caller to promise (and this workspace forbids `unsafe`).
#[allow(deprecated)]
fn readable_fd(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    AsyncFd::with_interest(fd, tokio::io::Interest::READABLE)
}

/// The driver: a round, wake the reported sockets' tasks, then (when the round found
/// nothing to do) wait on the link's files, the next deadline or a kick.
async fn drive(inner: Weak<Inner>, fds: Vec<AsyncFd<OwnedFd>>) {
    let mut events = Events::with_capacity(1024);
    let noop = Waker::noop();
    loop {
        let Some(s) = inner.upgrade() else {
            return;
        };
        // Take the files' readiness before the round: a frame that arrives after this
        // sets it again, so the wait below cannot miss it.
        let mut ncx = Context::from_waker(noop);
        for fd in &fds {
            if let Poll::Ready(Ok(mut g)) = fd.poll_read_ready(&mut ncx) {
                g.clear_ready();
            }
        }
        s.kicked.set(false);
        let (busy, timeout) = {
            let mut rt = s.rt.borrow_mut();
            let empty_before = rt.stats().empty_rounds;
            if let Err(e) = rt.poll(&mut events, Some(Duration::ZERO)) {
                drop(rt);
                s.stop(e.to_string());
                return;
            }
            let busy = rt.stats().empty_rounds == empty_before
                || !events.is_empty()
                || rt.poller().has_pending(rt.stack());
            let now = rt.now();
            let timeout = rt
                .shard()
                .next_wakeup()
                .map(|t| if t <= now { Duration::ZERO } else { t - now });
            (busy, timeout)
        };
        s.rounds.set(s.rounds.get() + 1);
        for e in &events {
            s.wake(e.token);
        }
        if busy || s.kicked.get() || timeout == Some(Duration::ZERO) {
            // Let the woken tasks run, then turn again.
            drop(s);
            tokio::task::yield_now().await;
            continue;
        }
        if !s.rt.borrow_mut().device_mut().link_mut().prepare_sleep() {
            s.rt.borrow_mut().device_mut().link_mut().finish_sleep();
            drop(s);
            tokio::task::yield_now().await;
            continue;
        }
        s.waits.set(s.waits.get() + 1);
        let mut sleep = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
        let weak = Rc::downgrade(&s);
        drop(s);
        poll_fn(|cx| {
            let Some(s) = weak.upgrade() else {
                return Poll::Ready(());
            };
            if s.kicked.get() {
                return Poll::Ready(());
            }
            *s.driver.borrow_mut() = Some(cx.waker().clone());
            if fds.iter().any(|fd| fd.poll_read_ready(cx).is_ready()) {
                return Poll::Ready(());
            }
            match &mut sleep {
                Some(t) => t.as_mut().poll(cx),
                None => Poll::Pending,
            }
        })
        .await;
        if let Some(s) = weak.upgrade() {
            s.driver.borrow_mut().take();
            s.rt.borrow_mut().device_mut().link_mut().finish_sleep();
        }
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// A TCP listener on a [`LocalStack`].
#[derive(Debug)]
pub struct LocalTcpListener {
    stack: LocalStack,
    listener: api::TcpListener,
    token: u64,
}

impl LocalTcpListener {
    /// Listen on `addr`.
    pub fn bind(stack: &LocalStack, addr: SocketAddr) -> io::Result<LocalTcpListener> {
        let (listener, token) = stack.inner.open(Interest::READABLE, |rt| {
            api::TcpListener::bind(rt, addr, BACKLOG)
        })?;
        Ok(LocalTcpListener {
            stack: stack.clone(),
            listener,
            token,
        })
    }

    /// The next connection and its peer's address. Cancel-safe.
    pub async fn accept(&self) -> io::Result<(LocalTcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// [`accept`](Self::accept) as a poll.
    pub fn poll_accept(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<(LocalTcpStream, SocketAddr)>> {
        let s = &self.stack.inner;
        let mut rt = s.rt.borrow_mut();
        match self.listener.accept(&mut rt) {
            Ok((stream, peer)) => {
                let token = s.token();
                rt.register(&stream, token, BOTH, Mode::Edge)?;
                Poll::Ready(Ok((
                    LocalTcpStream {
                        stack: self.stack.clone(),
                        stream,
                        token,
                    },
                    peer,
                )))
            }
            Err(e) if would_block(&e) => s.park(self.token, true, cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }
}

impl Drop for LocalTcpListener {
    fn drop(&mut self) {
        self.stack.inner.forget(self.token);
    }
}

/// A TCP connection on a [`LocalStack`]: [`AsyncRead`] + [`AsyncWrite`]. Dropping it
/// closes it (a FIN, or a RST with unread bytes), at the driver's next round.
#[derive(Debug)]
pub struct LocalTcpStream {
    stack: LocalStack,
    stream: api::TcpStream,
    token: u64,
}

impl LocalTcpStream {
    /// Open a connection to `addr`; waits for the handshake. A dropped `connect` closes
    /// the attempt.
    pub async fn connect(stack: &LocalStack, addr: SocketAddr) -> io::Result<LocalTcpStream> {
        let s = &stack.inner;
        let (stream, token) = s.open(BOTH, |rt| api::TcpStream::connect(rt, addr))?;
        let conn = LocalTcpStream {
            stack: stack.clone(),
            stream,
            token,
        };
        s.kick();
        poll_fn(|cx| {
            let mut rt = s.rt.borrow_mut();
            match conn.stream.poll_connect(&mut rt) {
                Ok(true) => Poll::Ready(Ok(())),
                Ok(false) => s.park(conn.token, false, cx),
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await?;
        Ok(conn)
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.stream
            .set_nodelay(&mut self.stack.inner.rt.borrow_mut(), on)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr(&self.stack.inner.rt.borrow())
    }

    /// Wait until a read would not block: bytes are waiting, the peer has closed its
    /// side, or the connection failed (as tokio's `TcpStream::readable`). With
    /// [`try_read`](Self::try_read) a task can wait for a connection holding no buffer,
    /// allocating one only once there is something to read: an idle connection then
    /// costs its task's future and no buffer. Cancel-safe.
    pub async fn readable(&self) -> io::Result<()> {
        poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// [`readable`](Self::readable) as a poll.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = &self.stack.inner;
        let ready = match self.stream.info(&s.rt.borrow()) {
            // Bytes waiting, or nothing more can come (the peer's FIN is in: its states
            // after CLOSE-WAIT; or the connection is gone): a read returns at once.
            Ok(info) => {
                use ustack_stack::tcp::State::*;
                info.recv_q > 0
                    || !matches!(
                        info.state,
                        SynSent | SynReceived | Established | FinWait1 | FinWait2
                    )
            }
            // No connection any more: the read gives the error.
            Err(_) => true,
        };
        if ready {
            Poll::Ready(Ok(()))
        } else {
            s.park(self.token, true, cx)
        }
    }

    /// Read what is waiting without waiting: bytes read, `Ok(0)` at the end of the
    /// stream, `WouldBlock` when nothing is there (as tokio's `TcpStream::try_read`).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let s = &self.stack.inner;
        let n = self.stream.read(&mut s.rt.borrow_mut(), buf)?;
        // The window may have opened: the next round sends the update.
        s.kick();
        Ok(n)
    }
}

impl Drop for LocalTcpStream {
    fn drop(&mut self) {
        self.stack.inner.forget(self.token);
    }
}

impl LocalTcpStream {
    fn poll_read_shared(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let s = &self.stack.inner;
        let r = self
            .stream
            .read(&mut s.rt.borrow_mut(), buf.initialize_unfilled());
        match r {
            Ok(n) => {
                buf.advance(n);
                // The window may have opened: the next round sends the update.
                s.kick();
                Poll::Ready(Ok(()))
            }
            Err(e) if would_block(&e) => s.park(self.token, true, cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_shared(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let s = &self.stack.inner;
        let r = self.stream.write(&mut s.rt.borrow_mut(), buf);
        s.queued(r, self.token, cx)
    }

    fn shutdown_shared(&self) -> io::Result<()> {
        let s = &self.stack.inner;
        let r = self
            .stream
            .shutdown(&mut s.rt.borrow_mut(), Shutdown::Write);
        s.kick();
        match r {
            // Shut already, or never connected: nothing left to do, as tokio's.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            r => r,
        }
    }

    /// Split into a read half and a write half that can go to different tasks (on this
    /// thread), as tokio's `TcpStream::into_split`: a task reading and one writing wait
    /// each for their own readiness. Dropping the write half sends the FIN; the
    /// connection closes when both are dropped.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        halves(Rc::new(self))
    }
}

impl AsyncRead for LocalTcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_shared(cx, buf)
    }
}

impl AsyncWrite for LocalTcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_shared(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.shutdown_shared())
    }
}

owned_halves!(
    Rc,
    LocalTcpStream,
    LocalTcpStream,
    |s: Rc<LocalTcpStream>| Rc::try_unwrap(s)
        .map_err(|_| io::Error::other("ustack-tokio: the stream is still shared")),
    "[`LocalTcpStream::into_split`]"
);

impl OwnedReadHalf {
    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.shared.peer_addr()
    }
}

impl OwnedWriteHalf {
    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.shared.peer_addr()
    }
}

/// A UDP socket on a [`LocalStack`], as tokio's `UdpSocket` (`send_to`, `recv_from`).
#[derive(Debug)]
pub struct LocalUdpSocket {
    stack: LocalStack,
    sock: api::UdpSocket,
    token: u64,
}

impl LocalUdpSocket {
    /// A socket bound to `addr` (port 0: an ephemeral port).
    pub fn bind(stack: &LocalStack, addr: SocketAddr) -> io::Result<LocalUdpSocket> {
        let (sock, token) = stack
            .inner
            .open(BOTH, |rt| api::UdpSocket::bind(rt, addr))?;
        Ok(LocalUdpSocket {
            stack: stack.clone(),
            sock,
            token,
        })
    }

    /// Send one datagram to `addr`: its length. It leaves with the driver's next round.
    pub async fn send_to(&self, buf: &[u8], addr: SocketAddr) -> io::Result<usize> {
        let s = &self.stack.inner;
        poll_fn(|cx| {
            let r = self.sock.send_to(&mut s.rt.borrow_mut(), buf, addr);
            s.queued(r, self.token, cx)
        })
        .await
    }

    /// The next datagram: its length (cut to `buf`) and sender. Cancel-safe.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let s = &self.stack.inner;
        poll_fn(|cx| {
            let r = self.sock.recv_from_addr(&mut s.rt.borrow_mut(), buf);
            match r {
                Ok((n, from)) => Poll::Ready(Ok((n, from))),
                Err(e) if would_block(&e) => s.park(self.token, true, cx),
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_sockaddr(&self.stack.inner.rt.borrow())
    }
}

impl Drop for LocalUdpSocket {
    fn drop(&mut self) {
        self.stack.inner.forget(self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ustack_dev::shm::{ShmConfig, ShmLink};

    /// A driver whose round failed stops the stack: an accept parked before that and
    /// one made after both get the error instead of waiting forever.
    #[test]
    fn a_stopped_driver_fails_parked_and_later_calls() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let (a, _b) = ShmLink::pair(&ShmConfig::default()).unwrap();
            let builder = RuntimeBuilder::new()
                .ipv4("10.0.0.1".parse().unwrap(), 24)
                .seed(1);
            let stack = LocalStack::new(builder, a.into_iter().next().unwrap()).unwrap();
            let listener = LocalTcpListener::bind(&stack, "10.0.0.1:7".parse().unwrap()).unwrap();
            let listener = Rc::new(listener);
            let parked = tokio::task::spawn_local({
                let l = listener.clone();
                async move { l.accept().await.map(|_| ()) }
            });
            tokio::task::yield_now().await;
            stack.inner.stop("the link failed".into());
            let limit = Duration::from_secs(10);
            let first = tokio::time::timeout(limit, parked).await.expect("woken");
            let err = first.unwrap().expect_err("the parked accept fails");
            assert!(err.to_string().contains("the link failed"), "{err}");
            let later = tokio::time::timeout(limit, listener.accept()).await;
            assert!(later.expect("not parked").is_err());
        });
    }
}
