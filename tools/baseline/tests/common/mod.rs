//! Helpers shared by the integration tests: servers on 127.0.0.1, bounded waits, a seeded RNG,
//! a small HTTP/1.1 response reader, temporary directories.
#![allow(dead_code)]

use std::io::{self, BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ustack_baseline::{Proto, Server, ServerConfig, Stats};

/// Every blocking call in the tests gives up after this long.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Starts a server on 127.0.0.1 with an ephemeral port.
pub fn start(proto: Proto, workers: usize, root_dir: Option<PathBuf>) -> Server {
    Server::start(ServerConfig {
        workers,
        root_dir,
        ..ServerConfig::new(proto, "127.0.0.1:0".parse().unwrap())
    })
    .expect("server starts")
}

/// A client connection with read and write timeouts.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.set_write_timeout(Some(TIMEOUT)).unwrap();
    s
}

/// One echo round: a random-sized write (1 byte to 16 KiB) on every connection, then each
/// one read back and compared; the bytes echoed.
pub fn echo_round(conns: &mut [TcpStream], rng: &mut Rng) -> u64 {
    let sent: Vec<Vec<u8>> = conns
        .iter_mut()
        .map(|c| {
            let n = rng.range(1, 16 * 1024);
            let data = rng.bytes(n);
            c.write_all(&data).unwrap();
            data
        })
        .collect();
    let mut total = 0;
    for (c, data) in conns.iter_mut().zip(&sent) {
        let mut back = vec![0; data.len()];
        c.read_exact(&mut back).unwrap();
        assert!(back == *data, "echoed bytes differ");
        total += data.len() as u64;
    }
    total
}

/// Polls the server's counters until `pred` holds; panics with `what` and the last counters
/// after [`TIMEOUT`].
pub fn wait_stats(server: &Server, what: &str, pred: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let s = server.stats();
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads until EOF and asserts that nothing came (the server closed after its last reply).
pub fn assert_eof(s: &mut impl Read) {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "unexpected bytes before EOF: {rest:?}"),
        // A reset after the server's close also ends the connection; a timeout does not.
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected EOF, got {e}"),
    }
}

/// xorshift64*: deterministic test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// One HTTP response as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The value of the first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response: status line, headers, and a body of exactly Content-Length bytes (none
/// for a response to HEAD).
pub fn read_response(r: &mut impl BufRead, head_request: bool) -> Response {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let mut parts = line.trim_end().splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "status line {line:?}");
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).expect("header line");
        assert!(
            line.ends_with("\r\n"),
            "header line {line:?} ends with CRLF"
        );
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').expect("header has a colon");
        headers.push((n.to_owned(), v.trim().to_owned()));
    }
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let len: usize = resp
        .header("Content-Length")
        .expect("every response has Content-Length")
        .parse()
        .expect("numeric Content-Length");
    if !head_request {
        resp.body = vec![0; len];
        r.read_exact(&mut resp.body).expect("body");
    }
    resp
}

/// A directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "ustack-baseline-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
