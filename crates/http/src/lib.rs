//! HTTP/1.1 request parsing and response writing (RFC 9112 message syntax, RFC 9110 semantics).
//!
//! The request-head syntax is `httparse`'s (fuzzed, zero-copy, what hyper uses); [`parse`]
//! adds the server's semantics on top: the request target's path, persistence, framing by
//! `Content-Length`, the rules for `Host`, and the status to answer a bad request with. It is a
//! pure function over the bytes received so far: it either needs more bytes, returns one
//! request head (and its length, so pipelined requests that follow stay in the buffer), or
//! names the error status to answer with before closing. It never panics and never looks at
//! more than [`MAX_REQUEST_HEAD`] bytes.
//!
//! The response writer ([`write_head`], [`imf_fixdate`], [`DateCache`]) is our own.
//! Parsing what a connection received so far:
//!
//! ```
//! use ustack_http::{Method, Parsed, parse};
//!
//! let buf = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\nGET /next";
//! let Parsed::Request { request, head_len } = parse(buf) else { panic!("a complete head") };
//! assert_eq!((request.method, request.path), (Method::Get, &b"/index.html"[..]));
//! assert!(request.keep_alive); // HTTP/1.1's default
//! assert_eq!(&buf[head_len..], b"GET /next"); // the pipelined request stays in the buffer
//! assert_eq!(parse(&buf[head_len..]), Parsed::Incomplete);
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

/// The largest request head (request line, header fields and the empty line that ends them)
/// the server accepts; a longer one is answered with 431 and the connection is closed.
pub const MAX_REQUEST_HEAD: usize = 8192;

/// The largest piece of a static file a server reads at once (one `read(2)`): ustack's
/// servers (`ustack-apps`) and the Linux baseline alike send a file's body in pieces of at
/// most this size, the next read only once the socket has taken the last, never the file
/// whole.
pub const FILE_CHUNK: usize = 64 * 1024;

/// The body of the fixed response to `GET /` (as in the TechEmpower "plaintext" test).
pub const FIXED_BODY: &[u8] = b"Hello, World!";

/// The most header fields a request head may have; more are answered with 431 (an 8 KiB
/// head holds at most about 2700 of the shortest, `a:\n`; real clients send a dozen).
const MAX_HEADERS: usize = 100;

/// The statuses this server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    HeaderFieldsTooLarge,
    NotImplemented,
    VersionNotSupported,
}

impl Status {
    pub fn line(self) -> &'static [u8] {
        match self {
            Status::Ok => b"HTTP/1.1 200 OK\r\n",
            Status::BadRequest => b"HTTP/1.1 400 Bad Request\r\n",
            Status::NotFound => b"HTTP/1.1 404 Not Found\r\n",
            Status::MethodNotAllowed => b"HTTP/1.1 405 Method Not Allowed\r\n",
            Status::HeaderFieldsTooLarge => b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            Status::NotImplemented => b"HTTP/1.1 501 Not Implemented\r\n",
            Status::VersionNotSupported => b"HTTP/1.1 505 HTTP Version Not Supported\r\n",
        }
    }

    /// A short plain-text body for error responses.
    pub fn error_body(self) -> &'static [u8] {
        match self {
            Status::Ok => b"",
            Status::BadRequest => b"400 Bad Request\n",
            Status::NotFound => b"404 Not Found\n",
            Status::MethodNotAllowed => b"405 Method Not Allowed\n",
            Status::HeaderFieldsTooLarge => b"431 Request Header Fields Too Large\n",
            Status::NotImplemented => b"501 Not Implemented\n",
            Status::VersionNotSupported => b"505 HTTP Version Not Supported\n",
        }
    }
}

/// The request method, as far as the server cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// Any other syntactically valid method: answered with 405.
    Other,
}

/// One parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: Method,
    /// The path of the request target (origin-form, or the path of an absolute-form target),
    /// without the query, still percent-encoded. Always starts with `/`, except for `*`.
    pub path: &'a [u8],
    /// HTTP/1.0 (true) or HTTP/1.1 (false): decides the default persistence and the
    /// `Connection` header of the response.
    pub http10: bool,
    /// Whether the connection persists after the response (RFC 9112 §9.3).
    pub keep_alive: bool,
    /// The body length to skip after the head (RFC 9112 §6.3 rule 6; 0 without Content-Length).
    pub content_length: u64,
}

/// The outcome of parsing the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// No complete head yet, and the bytes so far are within [`MAX_REQUEST_HEAD`].
    Incomplete,
    /// A request head `head_len` bytes long (leading empty lines included).
    Request {
        request: Request<'a>,
        head_len: usize,
    },
    /// A request that must be answered with this status, after which the connection closes.
    Error(Status),
}

/// Parses one request head from the start of `buf`.
///
/// RFC 9112 §2.2: "a server that is expecting to receive and parse a request-line SHOULD
/// ignore at least one empty line (CRLF) received prior to the request-line" and "a
/// recipient MAY recognize a single LF as a line terminator and ignore any preceding CR":
/// `httparse` does both. Only `HTTP/1.0` and `HTTP/1.1` are parsed; any other well-formed
/// version is answered with 505 (RFC 9110 §15.6.6; a later 1.x minor version too, which
/// RFC 9110 §6.2 would have processed as 1.1: `httparse` does not parse it).
pub fn parse(buf: &[u8]) -> Parsed<'_> {
    let window = &buf[..buf.len().min(MAX_REQUEST_HEAD)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(window) {
        Ok(httparse::Status::Partial) if window.len() >= MAX_REQUEST_HEAD => {
            Parsed::Error(Status::HeaderFieldsTooLarge)
        }
        Ok(httparse::Status::Partial) => Parsed::Incomplete,
        Ok(httparse::Status::Complete(head_len)) => match semantics(&req) {
            Ok(request) => Parsed::Request { request, head_len },
            Err(status) => Parsed::Error(status),
        },
        Err(httparse::Error::TooManyHeaders) => Parsed::Error(Status::HeaderFieldsTooLarge),
        Err(httparse::Error::Version) => Parsed::Error(version_error(window)),
        // RFC 9112 §5.1: whitespace between a field name and the colon, §5.2: obs-fold (this
        // server rejects rather than replaces it), RFC 9110 §5.5: CR, LF or NUL in a field
        // value, a method or target with invalid bytes: all 400 (Bad Request).
        Err(_) => Parsed::Error(Status::BadRequest),
    }
}

/// The status for a request line `httparse` rejected at its version: 505 (HTTP Version Not
/// Supported) for a well-formed `HTTP/x.y` it does not parse, 400 for anything else.
fn version_error(buf: &[u8]) -> Status {
    let line = buf
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    match line.split(|&b| b == b' ').nth(2) {
        Some([b'H', b'T', b'T', b'P', b'/', maj, b'.', min])
            if maj.is_ascii_digit() && min.is_ascii_digit() =>
        {
            Status::VersionNotSupported
        }
        _ => Status::BadRequest,
    }
}

/// A field value without its optional whitespace (RFC 9110 §5.6.3).
fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// What the server needs of a head `httparse` parsed, and the semantic checks on it.
fn semantics<'a>(req: &httparse::Request<'_, 'a>) -> Result<Request<'a>, Status> {
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(Status::BadRequest);
    };
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    let http10 = minor == 0;
    let path = request_path(target.as_bytes())?;

    let mut hosts = 0;
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut close = false;
    let mut keep_alive_token = false;
    for h in req.headers.iter() {
        let (name, value) = (h.name.as_bytes(), trim_ows(h.value));
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if !valid_host(value) {
                return Err(Status::BadRequest);
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_content_length(value).ok_or(Status::BadRequest)?;
            // RFC 9112 §6.3 rule 5: differing Content-Length values make the framing invalid.
            if content_length.is_some_and(|c| c != n) {
                return Err(Status::BadRequest);
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',').map(trim_ows) {
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive_token |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    // RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any
    // HTTP/1.1 request message that lacks a Host header field and to any request message that
    // contains more than one Host header field line or a Host header field with an invalid
    // field value."
    if hosts > 1 || (hosts == 0 && !http10) {
        return Err(Status::BadRequest);
    }
    // RFC 9112 §6.1: "A server that receives a request message with a transfer coding it does
    // not understand SHOULD respond with 501 (Not Implemented)." This server reads no request
    // bodies but those framed by Content-Length, so every transfer coding is one it does not
    // understand; the connection closes after the 501 because the body cannot be skipped.
    if transfer_encoding {
        return Err(Status::NotImplemented);
    }
    // RFC 9112 §9.3: HTTP/1.1 persists unless "close" is sent; HTTP/1.0 persists only with
    // "keep-alive".
    let keep_alive = !close && (!http10 || keep_alive_token);
    Ok(Request {
        method,
        path,
        http10,
        keep_alive,
        content_length: content_length.unwrap_or(0),
    })
}

/// The path of a request target (RFC 9112 §3.2): origin-form `/path?query`, absolute-form
/// `http://authority/path?query` (a server "MUST accept the absolute-form in requests", §3.2.2),
/// or asterisk-form `*`.
fn request_path(target: &[u8]) -> Result<&[u8], Status> {
    if target.is_empty() || target.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(Status::BadRequest);
    }
    if target == b"*" {
        return Ok(target);
    }
    let path_and_query = if target[0] == b'/' {
        target
    } else {
        let scheme_len = if target.len() >= 7 && target[..7].eq_ignore_ascii_case(b"http://") {
            7
        } else if target.len() >= 8 && target[..8].eq_ignore_ascii_case(b"https://") {
            8
        } else {
            return Err(Status::BadRequest);
        };
        let rest = &target[scheme_len..];
        match rest.iter().position(|&b| b == b'/' || b == b'?') {
            Some(i) if rest[i] == b'/' => &rest[i..],
            // No path: the path is "/" (RFC 9112 §3.2.1).
            _ => b"/",
        }
    };
    let end = path_and_query
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(path_and_query.len());
    let path = &path_and_query[..end];
    Ok(if path.is_empty() { b"/" } else { path })
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2), checked by its character set: reg-name,
/// IPv4address and IP-literal characters, and the port's colon and digits. Empty is allowed.
fn valid_host(v: &[u8]) -> bool {
    v.iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&b))
}

/// `Content-Length = 1*DIGIT` (RFC 9110 §8.6), also accepting a list of identical values
/// ("42, 42"), which §8.6 allows a recipient to take as the one value. None: invalid.
fn parse_content_length(v: &[u8]) -> Option<u64> {
    let mut result: Option<u64> = None;
    for part in v.split(|&b| b == b',').map(trim_ows) {
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = part.iter().try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?;
        if result.is_some_and(|r| r != n) {
            return None;
        }
        result = Some(n);
    }
    result
}

/// Decodes the percent-encoding of a path (RFC 3986 §2.1) into `out`. None: a malformed escape
/// or an encoded NUL.
pub fn percent_decode(path: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let hi = hex(*path.get(i + 1)?)?;
            let lo = hex(*path.get(i + 2)?)?;
            let v = hi << 4 | lo;
            if v == 0 {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Some(())
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The media type for a file name's extension (a handful; the rest are octet streams).
pub fn content_type(path: &[u8]) -> &'static [u8] {
    let ext = match path.iter().rposition(|&b| b == b'.') {
        Some(i) if !path[i..].contains(&b'/') => &path[i + 1..],
        _ => b"",
    };
    let lower = |e: &[u8]| ext.eq_ignore_ascii_case(e);
    if lower(b"html") || lower(b"htm") {
        b"text/html; charset=utf-8"
    } else if lower(b"txt") {
        b"text/plain; charset=utf-8"
    } else if lower(b"css") {
        b"text/css"
    } else if lower(b"js") {
        b"text/javascript"
    } else if lower(b"json") {
        b"application/json"
    } else if lower(b"png") {
        b"image/png"
    } else if lower(b"jpg") || lower(b"jpeg") {
        b"image/jpeg"
    } else if lower(b"svg") {
        b"image/svg+xml"
    } else {
        b"application/octet-stream"
    }
}

/// Appends a response head: status line, `Server`, `Date`, `Content-Type`, `Content-Length`, and
/// `Connection` when it differs from the request version's default (RFC 9112 §9.3, §9.6).
// One argument per field of the head it writes: a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub fn write_head(
    out: &mut Vec<u8>,
    status: Status,
    server: &[u8],
    date: &[u8],
    content_type: &[u8],
    content_length: u64,
    http10: bool,
    keep_alive: bool,
) {
    out.extend_from_slice(status.line());
    out.extend_from_slice(b"Server: ");
    out.extend_from_slice(server);
    out.extend_from_slice(b"\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type);
    out.extend_from_slice(b"\r\nContent-Length: ");
    push_decimal(out, content_length);
    if !keep_alive {
        out.extend_from_slice(b"\r\nConnection: close");
    } else if http10 {
        out.extend_from_slice(b"\r\nConnection: keep-alive");
    }
    out.extend_from_slice(b"\r\n\r\n");
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// The `Date` header's value, formatted once per second. RFC 9110 §6.6.1: "An origin server
/// with a clock ... MUST generate a Date header field in all 2xx (Successful), 3xx
/// (Redirection), and 4xx (Client Error) responses".
#[derive(Debug)]
pub struct DateCache {
    secs: u64,
    text: [u8; 29],
}

impl Default for DateCache {
    fn default() -> Self {
        DateCache::new()
    }
}

impl DateCache {
    pub fn new() -> DateCache {
        let mut d = DateCache {
            secs: u64::MAX,
            text: [b' '; 29],
        };
        d.refresh();
        d
    }

    /// Re-reads the clock; formats only when the second has changed.
    pub fn refresh(&mut self) {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs != self.secs {
            self.secs = secs;
            self.text = imf_fixdate(secs);
        }
    }

    pub fn get(&self) -> &[u8] {
        &self.text
    }
}

/// `IMF-fixdate` (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn imf_fixdate(unix_secs: u64) -> [u8; 29] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = unix_secs / 86_400;
    let sod = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    let mut t = [0u8; 29];
    t[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    t[3..5].copy_from_slice(b", ");
    two(&mut t[5..7], day);
    t[7] = b' ';
    t[8..11].copy_from_slice(MONTHS[(month - 1) as usize]);
    t[11] = b' ';
    let y = year % 10_000;
    two(&mut t[12..14], y / 100);
    two(&mut t[14..16], y % 100);
    t[16] = b' ';
    two(&mut t[17..19], sod / 3600);
    t[19] = b':';
    two(&mut t[20..22], sod / 60 % 60);
    t[22] = b':';
    two(&mut t[23..25], sod % 60);
    t[25..29].copy_from_slice(b" GMT");
    t
}

fn two(dst: &mut [u8], v: u64) {
    dst[0] = b'0' + (v / 10 % 10) as u8;
    dst[1] = b'0' + (v % 10) as u8;
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(buf: &[u8]) -> (Request<'_>, usize) {
        match parse(buf) {
            Parsed::Request { request, head_len } => (request, head_len),
            other => panic!("expected a request from {buf:?}, got {other:?}"),
        }
    }

    #[test]
    fn simple_get_and_pipelined_rest() {
        let buf = b"GET /a/b?x=1 HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\n";
        let (r, n) = req(buf);
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, b"/a/b");
        assert!(r.keep_alive && !r.http10);
        assert_eq!(n, 34);
        assert_eq!(parse(&buf[n..]), Parsed::Incomplete);
    }

    #[test]
    fn every_prefix_of_a_request_is_incomplete() {
        let buf = b"\r\nGET /x HTTP/1.1\r\nHost: example.com:80\r\nX-A:  b \r\n\r\n";
        for i in 0..buf.len() {
            assert_eq!(parse(&buf[..i]), Parsed::Incomplete, "prefix {i}");
        }
        assert_eq!(req(buf).1, buf.len());
    }

    #[test]
    fn bare_lf_lines_are_accepted() {
        let (r, n) = req(b"HEAD / HTTP/1.0\nConnection: keep-alive\n\n");
        assert_eq!(r.method, Method::Head);
        assert!(r.http10 && r.keep_alive);
        assert_eq!(n, 40);
    }

    #[test]
    fn persistence_rules() {
        assert!(!req(b"GET / HTTP/1.0\r\n\r\n").0.keep_alive);
        assert!(
            !req(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n")
                .0
                .keep_alive
        );
        assert!(req(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").0.keep_alive);
    }

    #[test]
    fn malformed_requests_are_400() {
        for bad in [
            &b"GARBAGE\r\n\r\n"[..],
            b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n",
            b"GET / HTTX/1.1\r\nHost: a\r\n\r\n",
            b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n",
            b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        ] {
            assert_eq!(
                parse(bad),
                Parsed::Error(Status::BadRequest),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn other_errors() {
        assert_eq!(
            parse(b"GET / HTTP/2.0\r\n\r\n"),
            Parsed::Error(Status::VersionNotSupported)
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Parsed::Error(Status::NotImplemented)
        );
        let big = vec![b'a'; MAX_REQUEST_HEAD];
        assert_eq!(parse(&big), Parsed::Error(Status::HeaderFieldsTooLarge));
        let mut long = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
        long.resize(MAX_REQUEST_HEAD - 3, b'x');
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&long), Parsed::Error(Status::HeaderFieldsTooLarge));
        long.truncate(MAX_REQUEST_HEAD - 4);
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(req(&long).1, MAX_REQUEST_HEAD);
    }

    #[test]
    fn httparse_errors_map_to_statuses() {
        // More header fields than the parser holds: 431, like a head over the byte limit.
        let mut many = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
        for _ in 0..MAX_HEADERS {
            many.extend_from_slice(b"X: y\r\n");
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many), Parsed::Error(Status::HeaderFieldsTooLarge));
        // A well-formed version httparse does not parse: 505; a malformed one: 400.
        for v in ["HTTP/3.0", "HTTP/1.2", "HTTP/0.9"] {
            let req = format!("\r\nGET / {v}\r\nHost: a\r\n\r\n");
            assert_eq!(
                parse(req.as_bytes()),
                Parsed::Error(Status::VersionNotSupported),
                "{v}"
            );
        }
        for v in ["HTTP/1.10", "HTTP/x.1", "http/1.1"] {
            let req = format!("GET / {v}\r\nHost: a\r\n\r\n");
            assert_eq!(
                parse(req.as_bytes()),
                Parsed::Error(Status::BadRequest),
                "{v}"
            );
        }
        // NUL in a field value, a control byte in the target, an empty field name.
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n"[..],
            b"GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
        ] {
            assert_eq!(parse(bad), Parsed::Error(Status::BadRequest), "{bad:?}");
        }
        // A complete head followed by more than MAX_REQUEST_HEAD bytes of the next request
        // is still one request: only the head is looked at.
        let mut buf = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        let n = buf.len();
        buf.resize(n + 2 * MAX_REQUEST_HEAD, b'G');
        assert_eq!(req(&buf).1, n);
    }

    #[test]
    fn content_length_and_methods() {
        let (r, _) = req(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n");
        assert_eq!(r.method, Method::Other);
        assert_eq!(r.content_length, 5);
    }

    #[test]
    fn absolute_form_targets() {
        assert_eq!(
            req(b"GET http://a:1/p/q?z HTTP/1.1\r\nHost: a:1\r\n\r\n")
                .0
                .path,
            b"/p/q"
        );
        assert_eq!(
            req(b"GET HTTP://a HTTP/1.1\r\nHost: a\r\n\r\n").0.path,
            b"/"
        );
        assert_eq!(
            req(b"GET http://a?q HTTP/1.1\r\nHost: a\r\n\r\n").0.path,
            b"/"
        );
    }

    #[test]
    fn percent_decoding() {
        let mut out = Vec::new();
        assert!(percent_decode(b"/a%20b%2Fc", &mut out).is_some());
        assert_eq!(out, b"/a b/c");
        assert!(percent_decode(b"/a%2", &mut out).is_none());
        assert!(percent_decode(b"/a%zz", &mut out).is_none());
        assert!(percent_decode(b"/a%00", &mut out).is_none());
    }

    #[test]
    fn dates() {
        assert_eq!(&imf_fixdate(784_111_777), b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(&imf_fixdate(0), b"Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(&imf_fixdate(951_782_400), b"Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(
            &imf_fixdate(1_767_225_599),
            b"Wed, 31 Dec 2025 23:59:59 GMT"
        );
    }

    #[test]
    fn head_writing() {
        let mut out = Vec::new();
        write_head(
            &mut out,
            Status::NotFound,
            b"ustack-baseline",
            b"Thu, 01 Jan 1970 00:00:00 GMT",
            b"text/plain",
            1234,
            true,
            true,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 404 Not Found\r\nServer: ustack-baseline\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\nConnection: keep-alive\r\n\r\n"
        );
        assert_eq!(content_type(b"/x/index.HTML"), b"text/html; charset=utf-8");
        assert_eq!(content_type(b"/x.d/file"), b"application/octet-stream");
    }
}
