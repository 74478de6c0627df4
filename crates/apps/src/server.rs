//! [`Server`]: the echo, discard and HTTP servers on one runtime.
//!
//! The server is built like the baseline's workers: every connection is registered once
//! for `READABLE | WRITABLE | RDHUP`, edge-triggered; output the socket does not take at
//! once waits in the connection's buffer for the next WRITABLE edge, and the connection is
//! not read again until that buffer is flushed (backpressure).
//!
//! A static file is never read whole: its body is read in pieces of at most [`FILE_CHUNK`]
//! bytes, the next only once the socket has taken the last one whole (so a connection holds
//! at most one piece besides what its socket buffers, and one WRITABLE event reads at most
//! the socket's free send space plus one piece). The reads are ordinary blocking `read(2)`s
//! of a regular file (from the page cache, as nginx without `aio` does): each is bounded,
//! and requests that follow on the same connection wait until the body is sent.
//!
//! After an error response the server closes in stages, as nginx's `lingering_close` does
//! (RFC 9112 §9.6): it half-closes, then reads and drops what the client still sends until
//! the client closes too, for at most [`LINGERING_TIMEOUT`] without data and
//! [`LINGERING_TIME`] in all, after which it closes (a reset if data is still unread, as
//! `close(2)` on Linux).

use core::net::SocketAddr;
use core::time::Duration;
use std::fs::File;
use std::io::{self, ErrorKind, Read};
use std::net::Shutdown;
use std::path::{Path, PathBuf};

use ustack_dev::Device;
use ustack_runtime::api::{HandleCloser, TcpListener, TcpStream};
use ustack_runtime::dense;
use ustack_runtime::poller::Mode;
use ustack_runtime::runtime::{Clock, Events, Interest, Runtime, Sleep};
use ustack_runtime::timer::TimerId;
use ustack_stack::inspect::MemoryKind;
use ustack_stack::{Instant, TcpHandle};

use crate::{FILE_CHUNK, FIXED_BODY, Protocol, http, would_block};

/// Output buffered per connection above which it is not read again until some is sent.
const OUT_HIGH: usize = 64 * 1024;
const LISTENER: u64 = u64::MAX;
/// The largest output buffer kept (as the spare's) from one event to the next.
const SPARE_KEEP: usize = OUT_HIGH / 16;
/// How long a lingering close waits for more data from the client before it closes
/// (nginx's `lingering_timeout`, 5 s).
pub const LINGERING_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a lingering close lasts in all (nginx's `lingering_time`, 30 s).
pub const LINGERING_TIME: Duration = Duration::from_secs(30);

/// What a [`Server`] has done, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed (by either side, or reset).
    pub closed: u64,
    /// Bytes read from clients.
    pub bytes_in: u64,
    /// Bytes accepted by the sockets for sending.
    pub bytes_out: u64,
    /// HTTP responses queued, by status: 200, 400, 404, 405, 431, others.
    pub http_200: u64,
    /// 400 Bad Request.
    pub http_400: u64,
    /// 404 Not Found.
    pub http_404: u64,
    /// 405 Method Not Allowed.
    pub http_405: u64,
    /// 431 Request Header Fields Too Large.
    pub http_431: u64,
    /// 501 and 505.
    pub http_other: u64,
    /// Connections that ended in an error (reset, timeout).
    pub errors: u64,
    /// Lingering closes cut short by [`LINGERING_TIMEOUT`] or [`LINGERING_TIME`] (counted
    /// in `closed` too).
    pub linger_timeouts: u64,
}

impl ServerStats {
    /// Add `other`'s counts to these (the servers of several shards).
    pub fn merge(&mut self, other: &ServerStats) {
        let ServerStats {
            accepted,
            closed,
            bytes_in,
            bytes_out,
            http_200,
            http_400,
            http_404,
            http_405,
            http_431,
            http_other,
            errors,
            linger_timeouts,
        } = *other;
        self.accepted += accepted;
        self.closed += closed;
        self.bytes_in += bytes_in;
        self.bytes_out += bytes_out;
        self.http_200 += http_200;
        self.http_400 += http_400;
        self.http_404 += http_404;
        self.http_405 += http_405;
        self.http_431 += http_431;
        self.http_other += http_other;
        self.errors += errors;
        self.linger_timeouts += linger_timeouts;
    }
}

/// What the server holds for a connection, in the slot of its stream's TCB
/// ([`TcpHandle::index`]): 8 bytes, all an idle connection has.
#[derive(Debug, Clone, Copy)]
struct Slot {
    /// The stream's generation ([`TcpHandle::generation`]): with the slot, its handle.
    generation: u32,
    /// [`VACANT`] (no connection), [`IDLE`] (nothing buffered, no close in progress: the
    /// connection's whole state is its handle), or the index of its [`Conn`] in
    /// `Server::busy`.
    busy: u32,
}

/// `Slot::busy`: the slot holds no connection.
const VACANT: u32 = u32::MAX;
/// `Slot::busy`: the connection has no [`Conn`] (its state would be the default one).
const IDLE: u32 = u32::MAX - 1;

impl Slot {
    const EMPTY: Slot = Slot {
        generation: 0,
        busy: VACANT,
    };
}

/// The poller token of a connection: its handle, slot in the low half, generation in the
/// high half (so a token outlives neither its connection nor a reuse of the slot).
fn token_of(handle: TcpHandle) -> u64 {
    u64::from(handle.index()) | (u64::from(handle.generation()) << 32)
}

fn handle_of(token: u64) -> TcpHandle {
    TcpHandle::from_parts(token as u32, (token >> 32) as u32)
}

/// A connection's state beyond its handle, only while it has some: output or input
/// buffered, a close in progress, a file being sent. Taken from `Server::busy` (or the
/// spare) when an event comes, given back when the connection is idle again.
#[derive(Default)]
struct Conn {
    /// Queued output: at most one file piece (`FILE_CHUNK`) or the answers to the requests
    /// read so far, so dropping its sent front after each flush moves little memory.
    out: Vec<u8>,
    /// HTTP: received bytes not yet parsed.
    inbuf: Vec<u8>,
    /// HTTP: request body bytes still to skip.
    skip: u64,
    /// Close once `out` is flushed (an error response, `Connection: close`, EOF).
    close_after: bool,
    /// The peer's FIN was read.
    peer_done: bool,
    /// Our FIN was queued (`shutdown(SHUT_WR)`), for a lingering close.
    fin_sent: bool,
    /// The lingering close's timer and its hard end ([`LINGERING_TIME`] after the FIN).
    linger: Option<(TimerId, Instant)>,
    /// HTTP: the static file whose body is being sent, after what is in `out`.
    file: Option<FileBody>,
}

impl Conn {
    /// Nothing buffered nor in progress: the connection needs no more than its [`Slot`].
    fn is_idle(&self) -> bool {
        self.out.is_empty()
            && self.inbuf.is_empty()
            && self.skip == 0
            && !self.close_after
            && !self.peer_done
            && !self.fin_sent
            && self.linger.is_none()
            && self.file.is_none()
    }
}

/// A static file's body still to send: read in pieces of [`FILE_CHUNK`] bytes as the
/// socket takes them.
struct FileBody {
    file: File,
    /// Bytes of the body not yet read (the `Content-Length` sent, less what was read).
    left: u64,
}

/// A response body: bytes known at once, or a file streamed after the head.
enum Body {
    Bytes(&'static [u8]),
    File(FileBody),
}

/// An echo, discard or HTTP server on one runtime: a listener and its connections (an
/// example is on the crate's front page).
pub struct Server {
    proto: Protocol,
    /// Listener `i` is registered with token `LISTENER - i`.
    listeners: Vec<TcpListener>,
    root: Option<PathBuf>,
    /// The connections, indexed by their TCB slot ([`TcpHandle::index`]); grown as the
    /// runtime's [`dense`] tables are (by an eighth).
    slots: Vec<Slot>,
    /// Connections held.
    live: usize,
    /// The state of the connections that have some (see [`Conn`]), and its free entries.
    busy: Vec<Option<Conn>>,
    busy_free: Vec<u32>,
    /// An idle connection's state while an event is handled: kept from one to the next,
    /// with its output buffer's capacity (at most [`SPARE_KEEP`]), so that echoing a
    /// message allocates nothing. Boxed, to keep `Server` small (it is moved by value).
    spare: Box<Conn>,
    /// Closes the connections still held when the server is dropped.
    closer: HandleCloser,
    events: Events,
    buf: Vec<u8>,
    stats: ServerStats,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("proto", &self.proto)
            .field("listeners", &self.listeners)
            .field("root", &self.root)
            .field("connections", &self.live)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Drop for Server {
    /// Close the connections still held, as dropping their streams would.
    fn drop(&mut self) {
        for (index, slot) in self.slots.iter().enumerate() {
            if slot.busy != VACANT {
                self.closer
                    .close_later(TcpHandle::from_parts(index as u32, slot.generation));
            }
        }
    }
}

impl Server {
    /// Listen on `addr` (backlog `net.core.somaxconn`) and serve `proto`; HTTP serves
    /// files under `root` (without one, only `GET /`). An IPv6 `addr` of `::` serves
    /// IPv4 clients too (a dual-stack listener).
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        addr: impl Into<SocketAddr>,
        root: Option<PathBuf>,
    ) -> io::Result<Server> {
        Server::bind_all(rt, proto, &[addr.into()], root)
    }

    /// [`Server::bind`] on several addresses at once (one listener each, the same
    /// service behind all): a client with one address gets a full range of ephemeral
    /// ports per server port, so many ports serve more connections from it.
    /// `InvalidInput` without an address.
    pub fn bind_all<D: Device + Sleep, C: Clock, A: Into<SocketAddr> + Copy>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        addrs: &[A],
        root: Option<PathBuf>,
    ) -> io::Result<Server> {
        if addrs.is_empty() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "a server needs an address to listen on",
            ));
        }
        let backlog = u32::try_from(rt.stack().sysctl().somaxconn).unwrap_or(u32::MAX);
        let mut listeners = Vec::with_capacity(addrs.len());
        for (i, &addr) in addrs.iter().enumerate() {
            let listener = TcpListener::bind(rt, addr, backlog)?;
            rt.register(
                &listener,
                LISTENER - i as u64,
                Interest::READABLE,
                Mode::Edge,
            )?;
            listeners.push(listener);
        }
        Ok(Server {
            proto,
            listeners,
            root,
            slots: Vec::new(),
            live: 0,
            busy: Vec::new(),
            busy_free: Vec::new(),
            spare: Box::default(),
            closer: HandleCloser::new(rt),
            events: Events::with_capacity(256),
            buf: vec![0; 64 * 1024],
            stats: ServerStats::default(),
        })
    }

    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// The counters.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.live
    }

    /// Make room for connections in TCB slots below `connections` at once (a server that
    /// knows how many to expect; otherwise its table grows by an eighth at a time).
    pub fn reserve(&mut self, connections: usize) {
        self.slots
            .reserve_exact(connections.saturating_sub(self.slots.len()));
    }

    /// The server's own heap memory for its connections, as a kind of the process's
    /// accounting (`app_conns`): the slot table (8 bytes a slot, allocated capacity), the
    /// busy connections' state and their queued output and unparsed input, the spare.
    pub fn memory(&self) -> MemoryKind {
        let buffers = |c: &Conn| c.out.capacity() + c.inbuf.capacity();
        let busy: usize = self.busy.iter().flatten().map(buffers).sum();
        MemoryKind {
            name: "app_conns",
            count: self.live,
            bytes: self.slots.capacity() * size_of::<Slot>()
                + self.busy.capacity() * size_of::<Option<Conn>>()
                + self.busy_free.capacity() * size_of::<u32>()
                + busy
                + size_of::<Conn>()
                + buffers(&self.spare),
        }
    }

    /// One `epoll_wait` (up to `timeout`) and the handling of its events: how many.
    pub fn step<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        // Taken out for the loop (the handlers borrow `self`); an empty one does not allocate.
        let mut events = core::mem::replace(&mut self.events, Events::with_capacity(0));
        let polled = rt.poll(&mut events, timeout);
        let result = polled.and_then(|n| {
            for e in &events {
                if let Some(i) = self.listener_index(e.token) {
                    self.accept_all(rt, i)?;
                } else {
                    self.service(rt, e.token);
                }
            }
            for &token in events.timers() {
                self.linger_expired(rt, token);
            }
            Ok(n)
        });
        self.events = events;
        result
    }

    /// The listener a token names, if it names one.
    fn listener_index(&self, token: u64) -> Option<usize> {
        let i = usize::try_from(LISTENER - token).ok()?;
        (i < self.listeners.len()).then_some(i)
    }

    fn accept_all<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        listener: usize,
    ) -> io::Result<()> {
        loop {
            match self.listeners[listener].accept(rt) {
                Ok((stream, _peer)) => {
                    stream.set_nodelay(rt, true)?;
                    let handle = stream.handle();
                    rt.register(
                        &stream,
                        token_of(handle),
                        Interest::READABLE | Interest::WRITABLE | Interest::RDHUP,
                        Mode::Edge,
                    )?;
                    self.stats.accepted += 1;
                    let index = handle.index() as usize;
                    dense::ensure(&mut self.slots, index, Slot::EMPTY);
                    let old = core::mem::replace(
                        &mut self.slots[index],
                        Slot {
                            generation: handle.generation(),
                            busy: IDLE,
                        },
                    );
                    if old.busy == VACANT {
                        self.live += 1;
                    } else {
                        // The stack gave the slot of a connection we still held to a new
                        // one: the old one is gone (never the case while we hold its
                        // handle, but its state must not pass to the new one).
                        self.stats.closed += 1;
                        self.stats.errors += 1;
                        if let Some(conn) = self.release(old.busy)
                            && let Some((timer, _)) = conn.linger
                        {
                            rt.cancel_timer(timer);
                        }
                    }
                    stream.into_handle();
                }
                Err(e) if would_block(&e) => return Ok(()),
                // ECONNABORTED and the like: that connection is gone, the listener is not.
                Err(_) => self.stats.errors += 1,
            }
        }
    }

    /// The slot of the connection `token` names, if the server holds it.
    fn slot_of(&self, token: u64) -> Option<usize> {
        let handle = handle_of(token);
        let index = handle.index() as usize;
        let slot = self.slots.get(index)?;
        (slot.busy != VACANT && slot.generation == handle.generation()).then_some(index)
    }

    /// Take the busy state `busy` (a `Slot::busy`) out of the table, if it is an index.
    fn release(&mut self, busy: u32) -> Option<Conn> {
        let conn = self.busy.get_mut(busy as usize)?.take()?;
        self.busy_free.push(busy);
        Some(conn)
    }

    /// The connection's state for the handling of an event: its busy state, or the spare.
    fn take_conn(&mut self, index: usize) -> Conn {
        let busy = self.slots[index].busy;
        match self.release(busy) {
            Some(conn) => conn,
            None => core::mem::take(&mut *self.spare),
        }
    }

    /// Give a connection's state back after an event (`open`: it stays open): nothing for
    /// an idle one (its buffers become the spare's), else a busy entry.
    fn put_conn(&mut self, index: usize, mut conn: Conn, open: bool) {
        let busy = if open && !conn.is_idle() {
            let b = match self.busy_free.pop() {
                Some(b) => b,
                None => {
                    self.busy.push(None);
                    (self.busy.len() - 1) as u32
                }
            };
            self.busy[b as usize] = Some(conn);
            b
        } else {
            if self.spare.out.capacity() == 0 && conn.out.capacity() <= SPARE_KEEP {
                conn.out.clear();
                conn.inbuf = Vec::new();
                conn.skip = 0;
                conn.close_after = false;
                conn.peer_done = false;
                conn.fin_sent = false;
                conn.linger = None;
                conn.file = None;
                *self.spare = conn;
            }
            if open { IDLE } else { VACANT }
        };
        self.slots[index].busy = busy;
        if !open {
            self.live -= 1;
        }
    }

    /// Flush, read while the output is small, answer, flush; close when done.
    fn service<D: Device + Sleep, C: Clock>(&mut self, rt: &mut Runtime<D, C>, token: u64) {
        let Some(index) = self.slot_of(token) else {
            return;
        };
        let mut conn = self.take_conn(index);
        let stream = TcpStream::from_handle(rt, handle_of(token));
        let keep = self.drive(rt, token, &stream, &mut conn);
        if !matches!(keep, Ok(true))
            && let Some((timer, _)) = conn.linger.take()
        {
            rt.cancel_timer(timer);
        }
        match keep {
            Ok(true) => {
                stream.into_handle();
            }
            Ok(false) => {
                self.stats.closed += 1;
                let _ = stream.close(rt);
            }
            Err(_) => {
                self.stats.closed += 1;
                self.stats.errors += 1;
                let _ = stream.abort(rt);
            }
        }
        self.put_conn(index, conn, matches!(keep, Ok(true)));
    }

    /// A lingering close's timer fired: the client neither closed nor sent within the
    /// limits, so close now (a reset if it left data unread, as Linux's `close(2)`).
    fn linger_expired<D: Device + Sleep, C: Clock>(&mut self, rt: &mut Runtime<D, C>, token: u64) {
        if let Some(index) = self.slot_of(token) {
            let mut conn = self.take_conn(index);
            conn.linger = None;
            self.stats.closed += 1;
            self.stats.linger_timeouts += 1;
            let _ = TcpStream::from_handle(rt, handle_of(token)).close(rt);
            self.put_conn(index, conn, false);
        }
    }

    /// Arm (at the FIN) or push back (on data) the lingering close's timer: the next
    /// [`LINGERING_TIMEOUT`], but never past [`LINGERING_TIME`] after the FIN.
    fn linger_rearm<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        token: u64,
        conn: &mut Conn,
    ) {
        let now = rt.now();
        match conn.linger {
            None => {
                let deadline = now + LINGERING_TIMEOUT.min(LINGERING_TIME);
                let id = rt.add_timer(deadline, token);
                conn.linger = Some((id, now + LINGERING_TIME));
            }
            Some((id, end)) => {
                rt.rearm_timer(id, (now + LINGERING_TIMEOUT).min(end));
            }
        }
    }

    /// Ok(false): close it now.
    fn drive<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        token: u64,
        stream: &TcpStream,
        conn: &mut Conn,
    ) -> io::Result<bool> {
        // A pending error (ERROR readiness) comes out of the next read or write.
        loop {
            self.flush(rt, stream, conn)?;
            if conn.close_after {
                if !conn.out.is_empty() || conn.file.is_some() {
                    return Ok(true); // the next WRITABLE edge brings us back
                }
                if conn.peer_done {
                    return Ok(false);
                }
                // RFC 9112 §9.6: "servers typically close a connection in stages. First,
                // the server performs a half-close by closing only the write side of the
                // read/write connection. The server then continues to read from the
                // connection until it receives a corresponding close by the client". A
                // close with unread data would reset the connection (as on Linux) and
                // could destroy the response in flight. (nginx's `lingering_close`, with
                // its `lingering_timeout` and `lingering_time`.)
                if !conn.fin_sent {
                    stream.shutdown(rt, Shutdown::Write)?;
                    conn.fin_sent = true;
                    Self::linger_rearm(rt, token, conn);
                }
                match stream.read(rt, &mut self.buf) {
                    Ok(0) => return Ok(false),
                    Ok(n) => {
                        self.stats.bytes_in += n as u64;
                        Self::linger_rearm(rt, token, conn);
                        continue;
                    }
                    Err(e) if would_block(&e) => return Ok(true),
                    Err(e) => return Err(e),
                }
            }
            if conn.out.len() >= OUT_HIGH || conn.file.is_some() {
                return Ok(true); // the next WRITABLE edge brings us back
            }
            let n = match stream.read(rt, &mut self.buf) {
                Ok(n) => n,
                Err(e) if would_block(&e) => return Ok(true),
                Err(e) => return Err(e),
            };
            if n == 0 {
                // The peer finished sending: finish our output, then close.
                conn.peer_done = true;
                conn.close_after = true;
                continue;
            }
            self.stats.bytes_in += n as u64;
            match self.proto {
                Protocol::Echo => conn.out.extend_from_slice(&self.buf[..n]),
                Protocol::Discard => {}
                Protocol::Http => {
                    let mut data = &self.buf[..n];
                    if conn.skip > 0 {
                        let k = data
                            .len()
                            .min(usize::try_from(conn.skip).unwrap_or(usize::MAX));
                        conn.skip -= k as u64;
                        data = &data[k..];
                    }
                    conn.inbuf.extend_from_slice(data);
                    self.answer(conn);
                }
            }
        }
    }

    /// Send what the socket takes: the buffered output, then a static file's body piece by
    /// piece (the next piece read only once the last was taken whole), then the answers to
    /// requests that waited for that body.
    fn flush<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        stream: &TcpStream,
        conn: &mut Conn,
    ) -> io::Result<()> {
        loop {
            let mut sent = 0;
            while sent < conn.out.len() {
                match stream.write(rt, &conn.out[sent..]) {
                    Ok(0) => break,
                    Ok(n) => sent += n,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            self.stats.bytes_out += sent as u64;
            conn.out.drain(..sent);
            if !conn.out.is_empty() {
                return Ok(()); // the socket is full: the next WRITABLE edge brings us back
            }
            let Some(body) = conn.file.as_mut() else {
                return Ok(());
            };
            if body.left == 0 {
                // The body is sent: release its piece's memory and answer the requests
                // that wait behind it.
                conn.file = None;
                conn.out.shrink_to(OUT_HIGH / 16);
                self.answer(conn);
                if conn.out.is_empty() && conn.file.is_none() {
                    return Ok(());
                }
                continue;
            }
            let want = body.left.min(FILE_CHUNK as u64);
            // Into the buffer's spare room (`read_to_end` reads a `File` without zeroing
            // it first; a 64 KiB fill per piece cost a debug build 8 % of its time).
            conn.out.clear();
            let n = (&mut body.file).take(want).read_to_end(&mut conn.out)?;
            if n == 0 {
                // The file shrank after its length was sent: the response cannot be
                // completed, so the connection is reset (nginx closes it too).
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "a static file shrank while it was sent",
                ));
            }
            body.left -= n as u64;
        }
    }

    /// Answer every complete request in `conn.inbuf`.
    fn answer(&mut self, conn: &mut Conn) {
        let mut pos = 0;
        while !conn.close_after && conn.skip == 0 && conn.file.is_none() {
            match http::parse(&conn.inbuf[pos..]) {
                http::Parsed::Incomplete => break,
                http::Parsed::Error(status) => {
                    self.respond_error(conn, status);
                    conn.close_after = true;
                    pos = conn.inbuf.len();
                }
                http::Parsed::Request { request, head_len } => {
                    let keep_alive = request.keep_alive;
                    let (status, ctype, body) = self.resolve(&request);
                    let head_only = request.method == http::Method::Head;
                    let body_len = match &body {
                        Body::Bytes(b) => b.len() as u64,
                        Body::File(f) => f.left,
                    };
                    http::write_head(
                        &mut conn.out,
                        status,
                        b"ustack",
                        &http::imf_fixdate(unix_now()),
                        ctype,
                        body_len,
                        request.http10,
                        keep_alive,
                    );
                    if status == http::Status::MethodNotAllowed {
                        // RFC 9110 §15.5.6: a 405 "MUST generate an Allow header field".
                        let end = conn.out.len() - 2;
                        conn.out
                            .splice(end..end, b"Allow: GET, HEAD\r\n".iter().copied());
                    }
                    if !head_only {
                        match body {
                            Body::Bytes(b) => conn.out.extend_from_slice(b),
                            Body::File(f) => conn.file = Some(f),
                        }
                    }
                    self.count(status);
                    let body_to_skip = request.content_length;
                    pos += head_len;
                    let avail = (conn.inbuf.len() - pos) as u64;
                    let k = avail.min(body_to_skip);
                    pos += k as usize;
                    conn.skip = body_to_skip - k;
                    if !keep_alive {
                        conn.close_after = true;
                    }
                }
            }
        }
        conn.inbuf.drain(..pos.min(conn.inbuf.len()));
        if conn.close_after {
            conn.inbuf.clear();
        }
    }

    fn count(&mut self, status: http::Status) {
        let c = match status {
            http::Status::Ok => &mut self.stats.http_200,
            http::Status::BadRequest => &mut self.stats.http_400,
            http::Status::NotFound => &mut self.stats.http_404,
            http::Status::MethodNotAllowed => &mut self.stats.http_405,
            http::Status::HeaderFieldsTooLarge => &mut self.stats.http_431,
            _ => &mut self.stats.http_other,
        };
        *c += 1;
    }

    fn respond_error(&mut self, conn: &mut Conn, status: http::Status) {
        let body = status.error_body();
        http::write_head(
            &mut conn.out,
            status,
            b"ustack",
            &http::imf_fixdate(unix_now()),
            b"text/plain; charset=utf-8",
            body.len() as u64,
            false,
            false,
        );
        conn.out.extend_from_slice(body);
        self.count(status);
    }

    /// Status, content type and body for a parsed request.
    fn resolve(&self, req: &http::Request<'_>) -> (http::Status, &'static [u8], Body) {
        let error = |s: http::Status| {
            (
                s,
                &b"text/plain; charset=utf-8"[..],
                Body::Bytes(s.error_body()),
            )
        };
        if req.method == http::Method::Other {
            return error(http::Status::MethodNotAllowed);
        }
        if req.path == b"/" {
            return (http::Status::Ok, b"text/plain", Body::Bytes(FIXED_BODY));
        }
        match static_file(self.root.as_deref(), req.path) {
            Ok(body) => (
                http::Status::Ok,
                http::content_type(req.path),
                Body::File(body),
            ),
            Err(s) => error(s),
        }
    }
}

/// Seconds since the Unix epoch, for the `Date` header (RFC 9110 §6.6.1).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The file for a request path under `root`, opened, with its length: 400 for a malformed
/// path or one that climbs out of the root with `..`; 404 for anything not a readable
/// regular file under it (checked before the open, which would block on a FIFO).
fn static_file(root: Option<&Path>, path: &[u8]) -> Result<FileBody, http::Status> {
    let mut decoded = Vec::new();
    http::percent_decode(path, &mut decoded).ok_or(http::Status::BadRequest)?;
    if !decoded.starts_with(b"/") {
        return Err(http::Status::NotFound);
    }
    if decoded.split(|&b| b == b'/').any(|seg| seg == b"..") {
        return Err(http::Status::BadRequest);
    }
    let root = root.ok_or(http::Status::NotFound)?;
    let rel = core::str::from_utf8(&decoded[1..]).map_err(|_| http::Status::NotFound)?;
    let full = root.join(rel);
    if !std::fs::metadata(&full).is_ok_and(|m| m.is_file()) {
        return Err(http::Status::NotFound);
    }
    let file = File::open(&full).map_err(|_| http::Status::NotFound)?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(FileBody {
            file,
            left: m.len(),
        }),
        _ => Err(http::Status::NotFound),
    }
}
