//! [`Load`]: verifying clients for a [`Server`](crate::Server)(crate::Server) (every echoed byte, every
//! HTTP response), used by the tests and by `ustack serve --link sim`.

use core::net::SocketAddr;
use core::time::Duration;
use std::io::{self, ErrorKind};
use std::net::Shutdown;

use ustack_dev::Device;
use ustack_runtime::api::TcpStream;
use ustack_runtime::poller::Mode;
use ustack_runtime::runtime::{Clock, Events, Interest, Runtime, Sleep};

use crate::{FIXED_BODY, Protocol, would_block};

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

/// Verifying clients for a [`Server`](crate::Server)(crate::Server): `conns` connections each doing `per_conn` exchanges
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
    /// Open `conns` connections to `target` (either family).
    pub fn start<D: Device + Sleep, C: Clock>(
        rt: &mut Runtime<D, C>,
        proto: Protocol,
        target: impl Into<SocketAddr>,
        conns: usize,
        per_conn: u64,
    ) -> io::Result<Load> {
        let target = target.into();
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
