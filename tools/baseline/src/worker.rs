//! One worker: its own socket, its own epoll instance, its connections.
//!
//! The loop: `epoll_wait` (blocking, or polling when some connection used up its read budget),
//! handle each event, serve the connections that still have input pending, publish counters.
//! A write to the worker's eventfd ends the loop; returning drops every connection, the
//! socket and the epoll instance.
//!
//! A static file is never read whole: its body goes out in pieces of at most
//! [`http::FILE_CHUNK`] bytes (as ustack's own servers send it), the next piece read only
//! once the socket has taken the last whole, so a connection holds at most one piece besides
//! what its socket buffers. The reads are ordinary blocking `read(2)`s of a regular file
//! (from the page cache, as nginx without `aio` does), each bounded; requests pipelined
//! behind a file wait until its body is sent.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::buffer::spare_capacity;
use rustix::event::{Timespec, epoll};
use rustix::fd::OwnedFd;
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendFlags, Shutdown, SocketFlags, sockopt};

use crate::Proto;
use crate::stats::{SharedStats, Stats};
use ustack_http::{self as http, DateCache, Method, Parsed, Status};

/// Events taken per `epoll_wait`.
const EVENTS: usize = 256;
/// The worker's receive buffer (shared by all its connections).
const SCRATCH: usize = 64 * 1024;
/// Reads (TCP) or datagrams (UDP) or accepts one source gets per turn before the others run.
const BUDGET: usize = 16;
/// Output buffers kept for reuse, per worker.
const POOL_MAX: usize = 256;
/// Output buffers larger than this are freed rather than pooled (a large static file).
const POOL_BUF_MAX: usize = 256 * 1024;
/// Capacity of a fresh output buffer.
const OUT_INITIAL: usize = 16 * 1024;
/// After an HTTP error or `Connection: close`, bytes read and dropped (after shutting down the
/// sending side) before the socket is closed anyway: a "lingering close" (RFC 9112 §9.6), so
/// that unread pipelined requests do not make the kernel reset the connection before the client
/// has read the response (`net/ipv4/tcp.c`, `__tcp_close`: unread data => RST).
const LINGER_MAX: usize = 64 * 1024;

const TOKEN_SOCKET: u64 = u64::MAX;
const TOKEN_WAKE: u64 = u64::MAX - 1;

/// What a worker thread is given.
#[derive(Debug)]
pub(crate) struct WorkerCtx {
    pub proto: Proto,
    /// The listening TCP socket or the bound UDP socket (non-blocking).
    pub socket: OwnedFd,
    pub wake: Arc<OwnedFd>,
    pub stats: Arc<SharedStats>,
    pub root_dir: Option<PathBuf>,
    /// Spin in `epoll_wait` with a zero timeout instead of sleeping.
    pub busy_poll: bool,
    /// The CPU this worker is pinned to.
    pub cpu: Option<usize>,
}

/// The worker thread's body.
pub(crate) fn run(ctx: WorkerCtx) -> io::Result<()> {
    if let Some(cpu) = ctx.cpu {
        crate::pin_current_thread(cpu)?;
    }
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(
        &epoll,
        &ctx.socket,
        epoll::EventData::new_u64(TOKEN_SOCKET),
        epoll::EventFlags::IN | epoll::EventFlags::ET,
    )?;
    epoll::add(
        &epoll,
        &*ctx.wake,
        epoll::EventData::new_u64(TOKEN_WAKE),
        epoll::EventFlags::IN,
    )?;
    let mut worker = Worker {
        proto: ctx.proto,
        socket: ctx.socket,
        epoll,
        conns: Slab::default(),
        ready: Vec::new(),
        socket_ready: false,
        accept_starved: false,
        busy_poll: ctx.busy_poll,
        shared: Shared {
            scratch: vec![0; SCRATCH],
            pool: Vec::new(),
            stats: Stats::default(),
            date: DateCache::new(),
            root_dir: ctx.root_dir,
            path_buf: Vec::new(),
        },
    };
    let result = worker.run(&ctx.stats);
    ctx.stats.publish(&worker.shared.stats);
    result
}

/// State shared by the connections of one worker.
#[derive(Debug)]
struct Shared {
    /// Every read lands here first.
    scratch: Vec<u8>,
    /// Empty buffers for reuse as connection output / partial-request buffers.
    pool: Vec<Vec<u8>>,
    stats: Stats,
    date: DateCache,
    root_dir: Option<PathBuf>,
    /// Decoded request path.
    path_buf: Vec<u8>,
}

impl Shared {
    /// Gives `buf` a pooled allocation if it has none.
    fn ensure_buf(&mut self, buf: &mut Vec<u8>) {
        if buf.capacity() == 0 {
            *buf = self
                .pool
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(OUT_INITIAL));
        }
    }

    /// Takes `buf`'s allocation back into the pool (the connection no longer needs it).
    fn release_buf(&mut self, buf: &mut Vec<u8>) {
        let mut b = std::mem::take(buf);
        if b.capacity() != 0 && b.capacity() <= POOL_BUF_MAX && self.pool.len() < POOL_MAX {
            b.clear();
            self.pool.push(b);
        }
    }
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading and answering.
    Open,
    /// HTTP: flush the output, then shut down the sending side and linger.
    ShutdownAfterFlush,
    /// HTTP: sending side shut down; reading and dropping until EOF or [`LINGER_MAX`] bytes.
    Lingering { dropped: usize },
}

/// One TCP connection.
#[derive(Debug)]
struct Conn {
    fd: OwnedFd,
    /// Output not yet accepted by the socket: `out[out_pos..]`. No allocation while empty.
    out: Vec<u8>,
    out_pos: usize,
    /// HTTP: the start of a request whose head has not fully arrived. No allocation while empty.
    inbuf: Vec<u8>,
    /// HTTP: request body bytes still to skip.
    body_left: u64,
    /// HTTP: the static file whose body is being sent, after what is in `out`.
    file: Option<FileBody>,
    /// Edge-triggered input hint: input may be pending until a read returns `EAGAIN`.
    readable: bool,
    /// On the worker's ready list (spent its read budget); never queued twice.
    queued: bool,
    phase: Phase,
}

/// A static file's body still to send: read in pieces of [`http::FILE_CHUNK`] bytes as
/// the socket takes them.
#[derive(Debug)]
struct FileBody {
    file: File,
    /// Bytes of the body not yet read (the `Content-Length` sent, less what was read).
    left: u64,
}

/// What to do with a connection after serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Wait for the next event.
    Wait,
    /// Input is still pending but the read budget is spent: serve again after the others.
    Yield,
    /// Close it.
    Close,
}

/// Connections by token: `generation << 32 | index`, so that an event for a closed connection
/// never reaches the one that reused its slot.
#[derive(Debug, Default)]
struct Slab {
    slots: Vec<(u32, Option<Conn>)>,
    free: Vec<u32>,
}

impl Slab {
    fn insert(&mut self, conn: Conn) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.1 = Some(conn);
        (u64::from(slot.0) << 32) | index as u64
    }

    fn get_mut(&mut self, token: u64) -> Option<&mut Conn> {
        let (generation, index) = ((token >> 32) as u32, token as u32 as usize);
        match self.slots.get_mut(index) {
            Some((g, conn)) if *g == generation => conn.as_mut(),
            _ => None,
        }
    }

    fn remove(&mut self, token: u64) -> Option<Conn> {
        let (generation, index) = ((token >> 32) as u32, token as u32 as usize);
        match self.slots.get_mut(index) {
            Some((g, conn)) if *g == generation && conn.is_some() => {
                *g = g.wrapping_add(1);
                self.free.push(index as u32);
                conn.take()
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
struct Worker {
    proto: Proto,
    socket: OwnedFd,
    epoll: OwnedFd,
    conns: Slab,
    /// Connections that spent their read budget with input still pending.
    ready: Vec<u64>,
    /// The socket spent its budget (accepts or datagrams) with more pending.
    socket_ready: bool,
    /// `accept4` failed for lack of file descriptors or memory: retry when a connection closes.
    accept_starved: bool,
    /// Never sleep in `epoll_wait`.
    busy_poll: bool,
    shared: Shared,
}

impl Worker {
    fn run(&mut self, published: &SharedStats) -> io::Result<()> {
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS);
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut pending = Vec::new();
        loop {
            events.clear();
            let busy = self.busy_poll || !self.ready.is_empty() || self.socket_ready;
            match epoll::wait(
                &self.epoll,
                spare_capacity(&mut events),
                busy.then_some(&zero),
            ) {
                Ok(_) => {}
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if self.proto == Proto::Http {
                self.shared.date.refresh();
            }
            let closed_before = self.shared.stats.connections_closed;
            for event in &events {
                // `Event` is packed on x86-64: copy the fields out rather than borrow them.
                let (flags, data) = (event.flags, event.data);
                match data.u64() {
                    TOKEN_WAKE => return Ok(()),
                    TOKEN_SOCKET => self.on_socket(),
                    token => self.on_conn_event(token, flags),
                }
            }
            // Those that spent their budget last time (events above may have served some again:
            // serving one with nothing pending costs one EAGAIN read).
            std::mem::swap(&mut pending, &mut self.ready);
            for token in pending.drain(..) {
                if let Some(conn) = self.conns.get_mut(token) {
                    conn.queued = false;
                    self.serve(token);
                }
            }
            if self.socket_ready {
                self.on_socket();
            }
            if self.accept_starved && self.shared.stats.connections_closed != closed_before {
                self.accept_loop();
            }
            if events.is_empty() && self.busy_poll {
                self.shared.stats.empty_polls += 1;
            }
            // Spinning, the counters go out once in a while rather than on every poll.
            if !events.is_empty()
                || !self.busy_poll
                || self.shared.stats.empty_polls.is_multiple_of(1024)
            {
                published.publish(&self.shared.stats);
            }
        }
    }

    fn on_socket(&mut self) {
        if self.proto.is_tcp() {
            self.accept_loop();
        } else {
            self.udp_echo();
        }
    }

    /// Accepts with `accept4(SOCK_NONBLOCK | SOCK_CLOEXEC)` until `EAGAIN` (edge-triggered) or
    /// the budget is spent.
    fn accept_loop(&mut self) {
        self.socket_ready = false;
        let mut budget = BUDGET * 4;
        loop {
            if budget == 0 {
                self.socket_ready = true;
                return;
            }
            budget -= 1;
            match rustix::net::accept_with(
                &self.socket,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => {
                    self.accept_starved = false;
                    self.shared.stats.connections_accepted += 1;
                    // Best effort: a failure only costs Nagle delays.
                    let _ = sockopt::set_tcp_nodelay(&fd, true);
                    let conn = Conn {
                        fd,
                        out: Vec::new(),
                        out_pos: 0,
                        inbuf: Vec::new(),
                        body_left: 0,
                        file: None,
                        readable: false,
                        queued: false,
                        phase: Phase::Open,
                    };
                    let token = self.conns.insert(conn);
                    let Some(conn) = self.conns.get_mut(token) else {
                        continue;
                    };
                    // Registered once for everything (nginx's way): input and output edges both
                    // arrive without further epoll_ctl calls. Adding reports input that is
                    // already there.
                    let added = epoll::add(
                        &self.epoll,
                        &conn.fd,
                        epoll::EventData::new_u64(token),
                        epoll::EventFlags::IN
                            | epoll::EventFlags::OUT
                            | epoll::EventFlags::RDHUP
                            | epoll::EventFlags::ET,
                    );
                    if added.is_err() {
                        self.close(token);
                    }
                }
                Err(Errno::AGAIN) => return,
                // A connection reset while queued, or a signal: try the next one.
                Err(Errno::CONNABORTED | Errno::INTR) => {}
                Err(Errno::MFILE | Errno::NFILE | Errno::NOBUFS | Errno::NOMEM) => {
                    // The connection stays queued; retried when a connection closes (or at the
                    // next edge, when another one arrives).
                    self.shared.stats.accept_errors += 1;
                    self.accept_starved = true;
                    return;
                }
                Err(_) => {
                    self.shared.stats.accept_errors += 1;
                    return;
                }
            }
        }
    }

    fn on_conn_event(&mut self, token: u64, flags: epoll::EventFlags) {
        let Some(conn) = self.conns.get_mut(token) else {
            return; // closed earlier in this batch
        };
        if flags.intersects(
            epoll::EventFlags::IN
                | epoll::EventFlags::RDHUP
                | epoll::EventFlags::HUP
                | epoll::EventFlags::ERR,
        ) {
            conn.readable = true;
        }
        self.serve(token);
    }

    fn serve(&mut self, token: u64) {
        let Some(conn) = self.conns.get_mut(token) else {
            return;
        };
        match drive(conn, self.proto, &mut self.shared) {
            Next::Wait => {}
            Next::Yield => {
                if !conn.queued {
                    conn.queued = true;
                    self.ready.push(token);
                }
            }
            Next::Close => self.close(token),
        }
    }

    fn close(&mut self, token: u64) {
        if let Some(mut conn) = self.conns.remove(token) {
            self.shared.release_buf(&mut conn.out);
            self.shared.release_buf(&mut conn.inbuf);
            self.shared.stats.connections_closed += 1;
            // Dropping the fd closes it, which also removes it from the epoll set (its only
            // reference).
        }
    }

    /// Echoes datagrams until `EAGAIN` or the budget is spent. A reply that finds the send
    /// buffer full is dropped, as UDP may.
    fn udp_echo(&mut self) {
        self.socket_ready = false;
        let sh = &mut self.shared;
        for _ in 0..BUDGET * 4 {
            match rustix::net::recvfrom(&self.socket, &mut sh.scratch[..], RecvFlags::empty()) {
                Ok((n, _, Some(from))) => {
                    sh.stats.bytes_in += n as u64;
                    match rustix::net::sendto(
                        &self.socket,
                        &sh.scratch[..n],
                        SendFlags::empty(),
                        &from,
                    ) {
                        Ok(m) => {
                            sh.stats.bytes_out += m as u64;
                            sh.stats.requests += 1;
                        }
                        Err(Errno::AGAIN) => sh.stats.writes_blocked += 1,
                        // The sender is gone (ICMP unreachable reported as ECONNREFUSED on a later
                        // call) or similar: nothing to do for a datagram.
                        Err(_) => {}
                    }
                }
                Ok((n, _, None)) => sh.stats.bytes_in += n as u64,
                Err(Errno::AGAIN) => return,
                Err(_) => {}
            }
        }
        self.socket_ready = true;
    }
}

/// Sends `out[out_pos..]`. Ok(true): all sent (the buffer goes back to the pool); Ok(false): the
/// socket buffer is full, wait for `EPOLLOUT`; Err: the connection is dead.
fn flush(conn: &mut Conn, sh: &mut Shared) -> Result<bool, Errno> {
    while conn.out_pos < conn.out.len() {
        match rustix::net::send(&conn.fd, &conn.out[conn.out_pos..], SendFlags::NOSIGNAL) {
            Ok(n) => {
                conn.out_pos += n;
                sh.stats.bytes_out += n as u64;
            }
            Err(Errno::AGAIN) => {
                sh.stats.writes_blocked += 1;
                return Ok(false);
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    conn.out_pos = 0;
    sh.release_buf(&mut conn.out);
    Ok(true)
}

/// Serves one connection as far as it can go without blocking: flush pending output, then
/// a static file's body piece by piece; read only when both are done (backpressure), at
/// most [`BUDGET`] times.
fn drive(conn: &mut Conn, proto: Proto, sh: &mut Shared) -> Next {
    let mut budget = BUDGET;
    loop {
        if conn.out_pos < conn.out.len() {
            match flush(conn, sh) {
                Ok(true) => {}
                Ok(false) => return Next::Wait,
                Err(_) => return Next::Close,
            }
        }
        if conn.file.is_some() {
            if next_file_piece(conn, sh).is_err() {
                return Next::Close;
            }
            continue;
        }
        if conn.phase == Phase::ShutdownAfterFlush {
            if rustix::net::shutdown(&conn.fd, Shutdown::Write).is_err() {
                return Next::Close;
            }
            conn.phase = Phase::Lingering { dropped: 0 };
        }
        if !conn.readable {
            return Next::Wait;
        }
        if budget == 0 {
            return Next::Yield;
        }
        budget -= 1;
        let n = match rustix::net::recv(&conn.fd, &mut sh.scratch[..], RecvFlags::empty()) {
            Ok((n, _)) => n,
            Err(Errno::AGAIN) => {
                conn.readable = false;
                return Next::Wait;
            }
            Err(Errno::INTR) => continue,
            Err(_) => return Next::Close,
        };
        if n == 0 {
            // EOF. Output is empty here (reads happen only then), so nothing is lost.
            return Next::Close;
        }
        sh.stats.bytes_in += n as u64;
        if let Phase::Lingering { dropped } = &mut conn.phase {
            *dropped += n;
            if *dropped > LINGER_MAX {
                return Next::Close;
            }
            continue;
        }
        match proto {
            Proto::Echo => {
                if echo(conn, sh, n).is_err() {
                    return Next::Close;
                }
            }
            Proto::Discard | Proto::UdpEcho => {}
            Proto::Http => http_input(conn, sh, n),
        }
    }
}

/// With the output sent: reads the next piece of the file being sent into the output
/// buffer, or, the body complete, drops the file and answers the requests pipelined behind
/// it. An error if the file cannot be read or shrank after its length was sent (the
/// response cannot be completed: the connection is closed, as nginx does).
fn next_file_piece(conn: &mut Conn, sh: &mut Shared) -> io::Result<()> {
    let Some(body) = conn.file.as_mut() else {
        return Ok(());
    };
    if body.left == 0 {
        conn.file = None;
        if !conn.inbuf.is_empty() {
            http_input(conn, sh, 0);
        }
        return Ok(());
    }
    let want = usize::try_from(body.left).map_or(http::FILE_CHUNK, |l| l.min(http::FILE_CHUNK));
    let mut out = std::mem::take(&mut conn.out);
    sh.ensure_buf(&mut out);
    out.resize(want, 0);
    let read = loop {
        match body.file.read(&mut out) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other,
        }
    };
    let n = *read.as_ref().unwrap_or(&0);
    out.truncate(n);
    conn.out = out;
    conn.out_pos = 0;
    read?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "a static file shrank while it was sent",
        ));
    }
    body.left -= n as u64;
    Ok(())
}

/// Sends back the `n` bytes just read into the scratch buffer; what the socket does not take
/// waits in the connection's output buffer.
fn echo(conn: &mut Conn, sh: &mut Shared, n: usize) -> Result<(), Errno> {
    let mut sent = 0;
    while sent < n {
        match rustix::net::send(&conn.fd, &sh.scratch[sent..n], SendFlags::NOSIGNAL) {
            Ok(m) => {
                sent += m;
                sh.stats.bytes_out += m as u64;
            }
            Err(Errno::AGAIN) => {
                sh.stats.writes_blocked += 1;
                break;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    if sent < n {
        let mut out = std::mem::take(&mut conn.out);
        sh.ensure_buf(&mut out);
        out.extend_from_slice(&sh.scratch[sent..n]);
        conn.out = out;
    }
    Ok(())
}

/// Handles `n` bytes of HTTP input just read into the scratch buffer: skips body bytes, parses
/// every complete request head (pipelining), appends the responses to the output buffer, and
/// keeps an incomplete head in the connection's input buffer.
fn http_input(conn: &mut Conn, sh: &mut Shared, n: usize) {
    let scratch = std::mem::take(&mut sh.scratch);
    let mut inbuf = std::mem::take(&mut conn.inbuf);
    let mut out = std::mem::take(&mut conn.out);
    let data: &[u8] = if inbuf.is_empty() {
        &scratch[..n]
    } else {
        inbuf.extend_from_slice(&scratch[..n]);
        &inbuf
    };
    let mut pos = 0;
    while pos < data.len() {
        if conn.file.is_some() {
            // What follows waits until the file's body is sent (`next_file_piece`).
            break;
        }
        if conn.body_left > 0 {
            let skip = conn.body_left.min((data.len() - pos) as u64);
            pos += skip as usize;
            conn.body_left -= skip;
            continue;
        }
        if conn.phase != Phase::Open {
            // RFC 9112 §9.6: "A server that sends a "close" connection option MUST initiate
            // closure of the connection ... after it sends the response containing "close".
            // The server MUST NOT process any further requests received on that connection."
            pos = data.len();
            break;
        }
        sh.ensure_buf(&mut out);
        match http::parse(&data[pos..]) {
            Parsed::Incomplete => break,
            Parsed::Error(status) => {
                error_response(&mut out, sh, status, false, false, false);
                conn.phase = Phase::ShutdownAfterFlush;
                pos = data.len();
            }
            Parsed::Request { request, head_len } => {
                pos += head_len;
                conn.body_left = request.content_length;
                if !respond(&mut out, &mut conn.file, sh, &request) {
                    conn.phase = Phase::ShutdownAfterFlush;
                }
            }
        }
        sh.stats.requests += 1;
    }
    // Keep what is left: an incomplete head (at most MAX_REQUEST_HEAD bytes, or parse would
    // have said 431), or what was pipelined behind a file (at most one read, as the
    // connection is not read while the file is sent).
    let rest_start = pos.min(data.len());
    if inbuf.is_empty() {
        if rest_start < n {
            sh.ensure_buf(&mut inbuf);
            inbuf.extend_from_slice(&scratch[rest_start..n]);
        }
    } else {
        inbuf.drain(..rest_start);
        if inbuf.is_empty() {
            sh.release_buf(&mut inbuf);
        }
    }
    if out.is_empty() {
        sh.release_buf(&mut out);
    }
    sh.scratch = scratch;
    conn.inbuf = inbuf;
    conn.out = out;
}

/// An error status with its plain-text body (none for a HEAD request).
fn error_response(
    out: &mut Vec<u8>,
    sh: &Shared,
    status: Status,
    http10: bool,
    keep_alive: bool,
    head_only: bool,
) {
    let body = status.error_body();
    http::write_head(
        out,
        status,
        b"ustack-baseline",
        sh.date.get(),
        b"text/plain; charset=utf-8",
        body.len() as u64,
        http10,
        keep_alive,
    );
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// Appends the response to one request: the fixed body for `/`, a static file's head (its
/// body left in `file`, to be sent after the head), or an error. Returns whether the
/// connection persists (false after `close`, HTTP/1.0 without keep-alive, or a malformed
/// path).
fn respond(
    out: &mut Vec<u8>,
    file: &mut Option<FileBody>,
    sh: &mut Shared,
    req: &http::Request<'_>,
) -> bool {
    let head_only = req.method == Method::Head;
    if req.method == Method::Other {
        let body = Status::MethodNotAllowed.error_body();
        // RFC 9110 §15.5.6: "The origin server MUST generate an Allow header field in a 405
        // response".
        http::write_head(
            out,
            Status::MethodNotAllowed,
            b"ustack-baseline",
            sh.date.get(),
            b"text/plain; charset=utf-8",
            body.len() as u64,
            req.http10,
            req.keep_alive,
        );
        let end = out.len() - 2;
        out.splice(end..end, b"Allow: GET, HEAD\r\n".iter().copied());
        out.extend_from_slice(body);
        return req.keep_alive;
    }
    if req.path == b"/" {
        http::write_head(
            out,
            Status::Ok,
            b"ustack-baseline",
            sh.date.get(),
            b"text/plain",
            http::FIXED_BODY.len() as u64,
            req.http10,
            req.keep_alive,
        );
        if !head_only {
            out.extend_from_slice(http::FIXED_BODY);
        }
        return req.keep_alive;
    }
    let status = match open_file(sh, req.path) {
        Ok(body) => {
            http::write_head(
                out,
                Status::Ok,
                b"ustack-baseline",
                sh.date.get(),
                http::content_type(&sh.path_buf),
                body.left,
                req.http10,
                req.keep_alive,
            );
            if !head_only && body.left > 0 {
                *file = Some(body);
            }
            return req.keep_alive;
        }
        Err(status) => status,
    };
    // A 404 keeps the connection; a malformed path is a bad request like any other: close.
    let keep_alive = req.keep_alive && status != Status::BadRequest;
    error_response(out, sh, status, req.http10, keep_alive, head_only);
    keep_alive
}

/// Opens the static file a request path names, with its length (decoded path in
/// `sh.path_buf`). 400 for a path that is malformed or climbs out of the root with `..`; 404 for
/// anything that is not a readable regular file under the root (checked before the open,
/// which would block on a FIFO).
fn open_file(sh: &mut Shared, path: &[u8]) -> Result<FileBody, Status> {
    http::percent_decode(path, &mut sh.path_buf).ok_or(Status::BadRequest)?;
    if !sh.path_buf.starts_with(b"/") {
        return Err(Status::BadRequest);
    }
    if sh.path_buf.split(|&b| b == b'/').any(|seg| seg == b"..") {
        return Err(Status::BadRequest);
    }
    let root = sh.root_dir.as_deref().ok_or(Status::NotFound)?;
    let relative = Path::new(std::ffi::OsStr::from_bytes(&sh.path_buf[1..]));
    let full = root.join(relative);
    if !std::fs::metadata(&full).is_ok_and(|m| m.is_file()) {
        return Err(Status::NotFound);
    }
    let file = File::open(&full).map_err(|_| Status::NotFound)?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(FileBody {
            file,
            left: m.len(),
        }),
        _ => Err(Status::NotFound),
    }
}
