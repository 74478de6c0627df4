//! Servers on the public API: echo (RFC 862), discard (RFC 863) and a small HTTP/1.1 server
//! (RFC 9112: keep-alive and pipelining, a fixed response for `GET /`, static files from a
//! directory, 400/404/405/431 like the Linux baseline in `tools/baseline`), each an
//! edge-triggered event loop over one [`Runtime`]'s poller; and [`Load`], verifying clients
//! for them (every echoed byte, every HTTP response), used by the tests and by
//! `ustack serve --link sim`.
//!
//! The server is built like the baseline's workers: every connection is registered once
//! for `READABLE | WRITABLE | RDHUP`, edge-triggered; output the socket does not take at
//! once waits in the connection's buffer for the next WRITABLE edge, and the connection is
//! not read again until that buffer is flushed (backpressure).
//!
//! The HTTP request parser and response writer are `ustack_http`'s, shared with the Linux
//! baseline (`tools/baseline`), so both answer the same requests with the same statuses.
//!
//! After an error response the server closes in stages, as nginx's `lingering_close` does
//! (RFC 9112 §9.6): it half-closes, then reads and drops what the client still sends until
//! the client closes too, for at most [`LINGERING_TIMEOUT`] without data and
//! [`LINGERING_TIME`] in all, after which it closes (a reset if data is still unread, as
//! `close(2)` on Linux).

use core::net::SocketAddrV4;
use core::time::Duration;
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::Shutdown;
use std::path::{Path, PathBuf};

use ustack_dev::Device;
use ustack_stack::Instant;

use crate::api::{TcpListener, TcpStream};
use crate::poller::Mode;
use crate::runtime::{Clock, Events, Interest, Runtime, Sleep};
use crate::timer::TimerId;

/// The fixed response body and the request-head limit, the baseline's.
pub use ustack_http::{FIXED_BODY, MAX_REQUEST_HEAD};
/// Output buffered per connection above which it is not read again until some is sent.
const OUT_HIGH: usize = 64 * 1024;
const LISTENER: u64 = u64::MAX;
/// How long a lingering close waits for more data from the client before it closes
/// (nginx's `lingering_timeout`, 5 s).
pub const LINGERING_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a lingering close lasts in all (nginx's `lingering_time`, 30 s).
pub const LINGERING_TIME: Duration = Duration::from_secs(30);

/// Which protocol a [`Server`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP echo (RFC 862): every byte received is sent back.
    Echo,
    /// TCP discard (RFC 863): every byte received is read and dropped.
    Discard,
    /// HTTP/1.1 (RFC 9112).
    Http,
}

impl Protocol {
    /// By its command-line name: `echo`, `discard`, `http`.
    pub fn from_name(name: &str) -> Option<Protocol> {
        match name {
            "echo" => Some(Protocol::Echo),
            "discard" => Some(Protocol::Discard),
            "http" => Some(Protocol::Http),
            _ => None,
        }
    }
}

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

struct Conn {
    stream: TcpStream,
    /// Queued output; the socket took `out[..out_sent]` already.
    out: Vec<u8>,
    /// How much of `out` was written: the front is dropped only once it is at least half
    /// of `out`, so that a large response (a 50 MiB file) is not moved in memory after
    /// every write the socket takes (that was a memmove of the rest of the body per
    /// ACK-sized write, a 3-4 ms stall each with a 50 MiB body).
    out_sent: usize,
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
}

/// An echo, discard or HTTP server on one runtime: a listener and its connections.
///
/// ```
/// use core::net::{Ipv4Addr, SocketAddrV4};
/// use core::time::Duration;
/// use ustack_runtime::runtime::{RuntimeBuilder, VirtualClock, sim_pair};
/// use ustack_runtime::servers::{Load, Protocol, Server};
/// use ustack_stack::{EthernetAddress, Instant};
///
/// let (a, b) = sim_pair(Default::default());
/// let clock = VirtualClock::new(Instant::ZERO);
/// let mut srt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
///     .build_with_clock(a, clock.participant())?;
/// let mut crt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
///     .mac(EthernetAddress([2, 0, 0, 0, 0, 2])).build_with_clock(b, clock.participant())?;
/// let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
/// let mut server = Server::bind(&mut srt, Protocol::Http, addr, None)?;
/// let mut load = Load::start(&mut crt, Protocol::Http, addr, 3, 4)?;
/// while !load.done() {
///     server.step(&mut srt, Some(Duration::from_millis(1)))?;
///     load.step(&mut crt, Some(Duration::from_millis(1)))?;
/// }
/// assert_eq!(load.stats().verified, 12);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Server {
    proto: Protocol,
    /// Listener `i` is registered with token `LISTENER - i`.
    listeners: Vec<TcpListener>,
    root: Option<PathBuf>,
    conns: HashMap<u64, Conn>,
    next: u64,
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
            .field("connections", &self.conns.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

impl Server {
    /// Listen on `addr` (backlog `net.core.somaxconn`) and serve `proto`; HTTP serves
    /// files under `root` (without one, only `GET /`).
    pub fn bind<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        addr: SocketAddrV4,
        root: Option<PathBuf>,
    ) -> io::Result<Server> {
        Server::bind_all(rt, proto, &[addr], root)
    }

    /// [`Server::bind`] on several addresses at once (one listener each, the same
    /// service behind all): a client with one address gets a full range of ephemeral
    /// ports per server port, so many ports serve more connections from it.
    /// `InvalidInput` without an address.
    pub fn bind_all<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        addrs: &[SocketAddrV4],
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
            conns: HashMap::new(),
            next: 0,
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
        self.conns.len()
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
                    let token = self.next;
                    self.next += 1;
                    rt.register(
                        &stream,
                        token,
                        Interest::READABLE | Interest::WRITABLE | Interest::RDHUP,
                        Mode::Edge,
                    )?;
                    self.stats.accepted += 1;
                    self.conns.insert(
                        token,
                        Conn {
                            stream,
                            out: Vec::new(),
                            out_sent: 0,
                            inbuf: Vec::new(),
                            skip: 0,
                            close_after: false,
                            peer_done: false,
                            fin_sent: false,
                            linger: None,
                        },
                    );
                }
                Err(e) if would_block(&e) => return Ok(()),
                // ECONNABORTED and the like: that connection is gone, the listener is not.
                Err(_) => self.stats.errors += 1,
            }
        }
    }

    /// Flush, read while the output is small, answer, flush; close when done.
    fn service<D: Device + Sleep, C: Clock>(&mut self, rt: &mut Runtime<D, C>, token: u64) {
        let Some(mut conn) = self.conns.remove(&token) else {
            return;
        };
        let keep = self.drive(rt, token, &mut conn);
        if !matches!(keep, Ok(true))
            && let Some((timer, _)) = conn.linger
        {
            rt.cancel_timer(timer);
        }
        match keep {
            Ok(true) => {
                self.conns.insert(token, conn);
            }
            Ok(false) => {
                self.stats.closed += 1;
                let _ = conn.stream.close(rt);
            }
            Err(_) => {
                self.stats.closed += 1;
                self.stats.errors += 1;
                let _ = conn.stream.abort(rt);
            }
        }
    }

    /// A lingering close's timer fired: the client neither closed nor sent within the
    /// limits, so close now (a reset if it left data unread, as Linux's `close(2)`).
    fn linger_expired<D: Device + Sleep, C: Clock>(&mut self, rt: &mut Runtime<D, C>, token: u64) {
        if let Some(conn) = self.conns.remove(&token) {
            self.stats.closed += 1;
            self.stats.linger_timeouts += 1;
            let _ = conn.stream.close(rt);
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
        conn: &mut Conn,
    ) -> io::Result<bool> {
        // A pending error (ERROR readiness) comes out of the next read or write.
        loop {
            self.flush(rt, conn)?;
            if conn.close_after {
                if !conn.out.is_empty() {
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
                    conn.stream.shutdown(rt, Shutdown::Write)?;
                    conn.fin_sent = true;
                    Self::linger_rearm(rt, token, conn);
                }
                match conn.stream.read(rt, &mut self.buf) {
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
            if conn.out.len() - conn.out_sent >= OUT_HIGH {
                return Ok(true); // the next WRITABLE edge brings us back
            }
            let n = match conn.stream.read(rt, &mut self.buf) {
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

    fn flush<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        conn: &mut Conn,
    ) -> io::Result<()> {
        let start = conn.out_sent;
        while conn.out_sent < conn.out.len() {
            match conn.stream.write(rt, &conn.out[conn.out_sent..]) {
                Ok(0) => break,
                Ok(n) => conn.out_sent += n,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        self.stats.bytes_out += (conn.out_sent - start) as u64;
        // `out.is_empty()` stays "nothing pending": everything sent empties it.
        if conn.out_sent == conn.out.len() {
            conn.out.clear();
            conn.out_sent = 0;
        } else if conn.out_sent >= conn.out.len() / 2 {
            conn.out.drain(..conn.out_sent);
            conn.out_sent = 0;
        }
        Ok(())
    }

    /// Answer every complete request in `conn.inbuf`.
    fn answer(&mut self, conn: &mut Conn) {
        let mut pos = 0;
        while !conn.close_after && conn.skip == 0 {
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
                    let body_len = body.len() as u64;
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
                        conn.out.extend_from_slice(&body);
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
    fn resolve(&self, req: &http::Request<'_>) -> (http::Status, &'static [u8], Vec<u8>) {
        let error = |s: http::Status| {
            (
                s,
                &b"text/plain; charset=utf-8"[..],
                s.error_body().to_vec(),
            )
        };
        if req.method == http::Method::Other {
            return error(http::Status::MethodNotAllowed);
        }
        if req.path == b"/" {
            return (http::Status::Ok, b"text/plain", FIXED_BODY.to_vec());
        }
        match static_file(self.root.as_deref(), req.path) {
            Ok(body) => (http::Status::Ok, http::content_type(req.path), body),
            Err(s) => error(s),
        }
    }
}

/// The file for a request path under `root`: 400 for a malformed path or one that climbs
/// out of the root with `..`; 404 for anything not a readable regular file under it.
/// Seconds since the Unix epoch, for the `Date` header (RFC 9110 §6.6.1).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn static_file(root: Option<&Path>, path: &[u8]) -> Result<Vec<u8>, http::Status> {
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
    match std::fs::metadata(&full) {
        Ok(m) if m.is_file() => std::fs::read(&full).map_err(|_| http::Status::NotFound),
        _ => Err(http::Status::NotFound),
    }
}

/// HTTP/1.1 message syntax (RFC 9112) for the server, shared with the Linux baseline
/// servers so that both parse and answer alike.
pub use ustack_http as http;

// ---- verifying clients ---------------------------------------------------------------------

/// What a [`Load`] has checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Connections that did all their exchanges and saw the server close.
    pub finished: u64,
    /// Exchanges verified: echoes matched byte for byte, HTTP responses whole and right,
    /// discard messages written.
    pub verified: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Bytes received and checked.
    pub bytes_in: u64,
}

struct LoadConn {
    stream: Option<TcpStream>,
    /// Exchanges started.
    sent: u64,
    /// Output not yet taken by the socket.
    out: Vec<u8>,
    /// The reply expected for the exchange in flight.
    expect: Vec<u8>,
    got: Vec<u8>,
    /// Everything sent, waiting for the server's close.
    closing: bool,
}

/// Verifying clients for a [`Server`]: `conns` connections each doing `per_conn` exchanges
/// one at a time, every reply checked, then a close that the server must answer with its
/// own.
///
/// - echo: exchange `i` of connection `c` is a message of 1 to 3000 bytes, a function of
///   `(c, i)`; the echo must be byte for byte the same;
/// - discard: the same messages; after the last, the client shuts down its side and the
///   server must close (nothing may come back);
/// - HTTP: `GET /` with keep-alive (the last with `Connection: close`); each response must
///   be exactly `200 OK` with `Content-Length: 13` and [`FIXED_BODY`], the last with
///   `Connection: close`, followed by the server's FIN.
///
/// [`Load::step`] fails with `InvalidData` on the first mismatch.
pub struct Load {
    proto: Protocol,
    conns: Vec<LoadConn>,
    per_conn: u64,
    events: Events,
    buf: Vec<u8>,
    stats: LoadStats,
}

impl core::fmt::Debug for Load {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Load")
            .field("proto", &self.proto)
            .field("conns", &self.conns.len())
            .field("per_conn", &self.per_conn)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Message `i` of connection `c` (echo, discard): 1 to 3000 bytes.
pub fn message(c: u64, i: u64) -> Vec<u8> {
    let len = 1 + ((c * 7919 + i * 104_729) % 3000) as usize;
    (0..len)
        .map(|k| (c as u8).wrapping_mul(31) ^ (i as u8).wrapping_add(k as u8))
        .collect()
}

fn invalid(what: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, what)
}

impl Load {
    /// Open `conns` connections to `target`.
    pub fn start<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        target: SocketAddrV4,
        conns: usize,
        per_conn: u64,
    ) -> io::Result<Load> {
        let mut v = Vec::with_capacity(conns);
        for c in 0..conns {
            let stream = TcpStream::connect(rt, target)?;
            stream.set_nodelay(rt, true)?;
            rt.register(
                &stream,
                c as u64,
                Interest::READABLE | Interest::WRITABLE | Interest::RDHUP,
                Mode::Edge,
            )?;
            v.push(LoadConn {
                stream: Some(stream),
                sent: 0,
                out: Vec::new(),
                expect: Vec::new(),
                got: Vec::new(),
                closing: false,
            });
        }
        Ok(Load {
            proto,
            conns: v,
            per_conn,
            events: Events::with_capacity(256),
            buf: vec![0; 64 * 1024],
            stats: LoadStats::default(),
        })
    }

    /// Whether every connection finished.
    pub fn done(&self) -> bool {
        self.stats.finished == self.conns.len() as u64
    }

    /// What was checked.
    pub fn stats(&self) -> &LoadStats {
        &self.stats
    }

    /// One poll (up to `timeout`) and the handling of its events.
    pub fn step<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        rt.poll(&mut self.events, timeout)?;
        let tokens: Vec<u64> = self.events.iter().map(|e| e.token).collect();
        for t in tokens {
            self.drive(rt, t as usize)?;
        }
        Ok(())
    }

    fn begin(&mut self, c: usize) {
        let i = self.conns[c].sent;
        let last = i + 1 == self.per_conn;
        let conn = &mut self.conns[c];
        conn.sent += 1;
        match self.proto {
            Protocol::Echo | Protocol::Discard => {
                let m = message(c as u64, i);
                if self.proto == Protocol::Echo {
                    conn.expect = m.clone();
                }
                conn.out.extend_from_slice(&m);
            }
            Protocol::Http => {
                // A response is outstanding until verified (one request at a time).
                conn.expect = FIXED_BODY.to_vec();
                conn.out
                    .extend_from_slice(b"GET / HTTP/1.1\r\nHost: ustack\r\n");
                if last {
                    conn.out.extend_from_slice(b"Connection: close\r\n");
                }
                conn.out.extend_from_slice(b"\r\n");
            }
        }
    }

    fn drive<D: Device + Sleep, C: Clock>(
        &mut self,
        rt: &mut Runtime<D, C>,
        c: usize,
    ) -> io::Result<()> {
        if self.conns[c].stream.is_none() {
            return Ok(());
        }
        loop {
            // Start the next exchange when the last is complete.
            let conn = &self.conns[c];
            let idle = conn.out.is_empty() && conn.expect.is_empty() && conn.got.is_empty();
            if idle && !conn.closing {
                if conn.sent < self.per_conn {
                    self.begin(c);
                } else {
                    self.conns[c].closing = true;
                    if self.proto != Protocol::Http {
                        let s = self.conns[c].stream.as_ref().expect("open");
                        s.shutdown(rt, Shutdown::Write)?;
                    }
                }
            }
            // Write.
            let conn = &mut self.conns[c];
            let s = conn.stream.as_ref().expect("open");
            let mut sent = 0;
            while sent < conn.out.len() {
                match s.write(rt, &conn.out[sent..]) {
                    Ok(n) => sent += n,
                    Err(e) if would_block(&e) => break,
                    Err(e) => return Err(e),
                }
            }
            conn.out.drain(..sent);
            self.stats.bytes_out += sent as u64;
            if self.proto == Protocol::Discard && conn.out.is_empty() && sent > 0 {
                self.stats.verified += 1;
            }
            // Read.
            let n = match s.read(rt, &mut self.buf) {
                Ok(n) => n,
                Err(e) if would_block(&e) => {
                    if conn.out.is_empty()
                        && conn.expect.is_empty()
                        && conn.got.is_empty()
                        && !conn.closing
                    {
                        continue; // the next exchange
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            if n == 0 {
                if !conn.closing || !conn.got.is_empty() || !conn.expect.is_empty() {
                    return Err(invalid(format!(
                        "connection {c}: the server closed early (exchange {}, {} bytes pending)",
                        conn.sent,
                        conn.got.len()
                    )));
                }
                let s = conn.stream.take().expect("open");
                s.close(rt)?;
                self.stats.finished += 1;
                return Ok(());
            }
            self.stats.bytes_in += n as u64;
            conn.got.extend_from_slice(&self.buf[..n]);
            match self.proto {
                Protocol::Discard => {
                    return Err(invalid(format!("connection {c}: discard sent {n} bytes")));
                }
                Protocol::Echo => {
                    let k = conn.got.len().min(conn.expect.len());
                    if conn.got.len() > conn.expect.len() || conn.got[..k] != conn.expect[..k] {
                        return Err(invalid(format!(
                            "connection {c}: echo {} differs",
                            conn.sent - 1
                        )));
                    }
                    if conn.got.len() == conn.expect.len() {
                        conn.got.clear();
                        conn.expect.clear();
                        self.stats.verified += 1;
                    }
                }
                Protocol::Http => {
                    let last = conn.sent == self.per_conn;
                    match check_response(&conn.got, last)? {
                        None => {}
                        Some(len) if len == conn.got.len() => {
                            conn.got.clear();
                            conn.expect.clear();
                            self.stats.verified += 1;
                            if last {
                                conn.closing = true;
                            }
                        }
                        Some(_) => {
                            return Err(invalid(format!(
                                "connection {c}: bytes after response {}",
                                conn.sent
                            )));
                        }
                    }
                }
            }
        }
    }
}

/// Check one response to `GET /` at the start of `got`: None while incomplete, its length
/// once whole; `InvalidData` if it is not `200 OK` with [`FIXED_BODY`] (and
/// `Connection: close` iff `last`).
pub fn check_response(got: &[u8], last: bool) -> io::Result<Option<usize>> {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = core::str::from_utf8(&got[..end]).map_err(|_| invalid("head not UTF-8".into()))?;
    if !head.starts_with("HTTP/1.1 200 OK\r\n") {
        return Err(invalid(format!("unexpected response: {head}")));
    }
    let mut length = None;
    let mut close = false;
    for line in head.split("\r\n").skip(1) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.trim().eq_ignore_ascii_case("close");
        }
    }
    if length != Some(FIXED_BODY.len()) || close != last {
        return Err(invalid(format!("unexpected head: {head}")));
    }
    let total = end + 4 + FIXED_BODY.len();
    if got.len() < total {
        return Ok(None);
    }
    if &got[end + 4..total] != FIXED_BODY {
        return Err(invalid("wrong body".into()));
    }
    Ok(Some(total))
}
