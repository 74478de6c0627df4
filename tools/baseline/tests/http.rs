//! HTTP/1.1: keep-alive, pipelining, static files, and the error statuses, with a std client
//! (and curl when it is installed).

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{Rng, TempDir, assert_eof, connect, read_response, start, wait_stats};
use ustack_baseline::{FIXED_BODY, MAX_REQUEST_HEAD, Proto, Server};
use ustack_testkit::peak_rss_kb;

/// A server with a document root holding `hello.txt`, `index.html`, `data.bin` (300 KB of
/// random bytes), `sub/a b.txt` and an empty directory `empty/`.
struct Fixture {
    server: Server,
    data: Vec<u8>,
    _root: TempDir,
}

fn fixture(workers: usize) -> Fixture {
    let root = TempDir::new("http");
    let data = Rng::new(42).bytes(300_000);
    std::fs::write(root.path().join("hello.txt"), b"hello, file\n").unwrap();
    std::fs::write(root.path().join("index.html"), b"<p>hi</p>").unwrap();
    std::fs::write(root.path().join("data.bin"), &data).unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    std::fs::write(root.path().join("sub/a b.txt"), b"spaced").unwrap();
    std::fs::create_dir(root.path().join("empty")).unwrap();
    let server = start(Proto::Http, workers, Some(root.path().to_owned()));
    Fixture {
        server,
        data,
        _root: root,
    }
}

fn client(server: &Server) -> (TcpStream, BufReader<TcpStream>) {
    let s = connect(server.local_addr());
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let f = fixture(2);
    let (mut w, mut r) = client(&f.server);
    for _ in 0..5 {
        w.write_all(get("/").as_bytes()).unwrap();
        let resp = read_response(&mut r, false);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body, FIXED_BODY);
        assert_eq!(resp.header("Connection"), None);
        assert!(resp.header("Date").is_some_and(|d| d.ends_with(" GMT")));
    }
    let s = wait_stats(&f.server, "5 requests", |s| s.requests == 5);
    assert_eq!(s.connections_accepted, 1);
    assert_eq!(s.connections_closed, 0);
    f.server.stop().unwrap();
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let f = fixture(1);
    let (mut w, mut r) = client(&f.server);
    let mut batch = String::new();
    for p in ["/", "/hello.txt", "/missing", "/", "/index.html"] {
        batch += &get(p);
    }
    batch += "HEAD /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
    batch += "POST /upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\n\r\nGET /nope\r\n";
    batch += &get("/");
    w.write_all(batch.as_bytes()).unwrap();
    let expect: [(u16, &[u8]); 5] = [
        (200, FIXED_BODY),
        (200, b"hello, file\n"),
        (404, b"404 Not Found\n"),
        (200, FIXED_BODY),
        (200, b"<p>hi</p>"),
    ];
    for (status, body) in expect {
        let resp = read_response(&mut r, false);
        assert_eq!((resp.status, &resp.body[..]), (status, body));
    }
    let head = read_response(&mut r, true);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("Content-Length"), Some("12"));
    // The POST's body ("GET /nope\r\n") is skipped, not taken for a request.
    let post = read_response(&mut r, false);
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("GET, HEAD"));
    let last = read_response(&mut r, false);
    assert_eq!((last.status, &last.body[..]), (200, FIXED_BODY));
    wait_stats(&f.server, "8 requests", |s| s.requests == 8);
    f.server.stop().unwrap();
}

#[test]
fn pipelined_requests_split_across_tiny_writes() {
    let f = fixture(1);
    let (mut w, mut r) = client(&f.server);
    w.set_nodelay(true).unwrap();
    let mut stream = Vec::new();
    for i in 0..30 {
        let path = if i % 3 == 0 { "/hello.txt" } else { "/" };
        stream.extend_from_slice(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nX-Index: {i}\r\n\r\n").as_bytes(),
        );
    }
    let mut rng = Rng::new(5);
    let mut pos = 0;
    while pos < stream.len() {
        let n = rng.range(1, 7).min(stream.len() - pos);
        w.write_all(&stream[pos..pos + n]).unwrap();
        pos += n;
        if rng.range(0, 9) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for i in 0..30 {
        let resp = read_response(&mut r, false);
        assert_eq!(resp.status, 200, "response {i}");
        let want: &[u8] = if i % 3 == 0 {
            b"hello, file\n"
        } else {
            FIXED_BODY
        };
        assert_eq!(resp.body, want, "response {i}");
    }
    f.server.stop().unwrap();
}

#[test]
fn static_files_come_back_byte_for_byte() {
    let f = fixture(2);
    let (mut w, mut r) = client(&f.server);
    w.write_all(get("/data.bin").as_bytes()).unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("Content-Length"), Some("300000"));
    assert_eq!(
        resp.header("Content-Type"),
        Some("application/octet-stream")
    );
    assert!(resp.body == f.data, "file bytes differ");

    w.write_all(get("/index.html?v=1").as_bytes()).unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!(
        resp.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(resp.body, b"<p>hi</p>");

    w.write_all(get("/sub/a%20b.txt").as_bytes()).unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!((resp.status, &resp.body[..]), (200, &b"spaced"[..]));

    // Absolute-form target (RFC 9112 §3.2.2).
    w.write_all(b"GET http://localhost/hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!((resp.status, &resp.body[..]), (200, &b"hello, file\n"[..]));
    f.server.stop().unwrap();
}

#[test]
fn missing_files_and_directories_are_404_and_the_connection_stays() {
    let f = fixture(1);
    let (mut w, mut r) = client(&f.server);
    for p in ["/missing.txt", "/empty", "/sub/", "/sub/missing/x"] {
        w.write_all(get(p).as_bytes()).unwrap();
        let resp = read_response(&mut r, false);
        assert_eq!(resp.status, 404, "{p}");
        assert_eq!(resp.header("Connection"), None, "{p}");
    }
    w.write_all(get("/").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r, false).status, 200);
    f.server.stop().unwrap();
}

/// Sends `request`, expects one response with `status` and `Connection: close`, then EOF.
fn expect_error_and_close(server: &Server, request: &[u8], status: u16) {
    let (mut w, mut r) = client(server);
    w.write_all(request).unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!(
        resp.status,
        status,
        "{:?}",
        String::from_utf8_lossy(request)
    );
    assert_eq!(resp.header("Connection"), Some("close"));
    assert_eof(&mut r);
}

#[test]
fn malformed_requests_get_400_and_close() {
    let f = fixture(1);
    for req in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\n\r\n", // no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET /../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /sub/%2e%2e/%2e%2e/x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
        // The request after the bad one is never answered.
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        expect_error_and_close(&f.server, req, 400);
    }
    expect_error_and_close(&f.server, b"GET / HTTP/2.0\r\n\r\n", 505);
    expect_error_and_close(
        &f.server,
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        501,
    );
    f.server.stop().unwrap();
}

#[test]
fn a_request_head_over_the_limit_gets_431_and_close() {
    let f = fixture(1);
    // Twice the limit, never terminated.
    let mut req = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    while req.len() < 2 * MAX_REQUEST_HEAD {
        req.extend_from_slice(b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    expect_error_and_close(&f.server, &req, 431);
    // One header line longer than the limit.
    let mut req = b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: ".to_vec();
    req.resize(MAX_REQUEST_HEAD + 100, b'z');
    req.extend_from_slice(b"\r\n\r\n");
    expect_error_and_close(&f.server, &req, 431);
    f.server.stop().unwrap();
}

#[test]
fn connection_close_and_http_1_0_end_the_connection_after_the_response() {
    let f = fixture(1);
    {
        let (mut w, mut r) = client(&f.server);
        // The second request comes after "close": it must not be answered (RFC 9112 §9.6).
        w.write_all(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .unwrap();
        let resp = read_response(&mut r, false);
        assert_eq!(
            (resp.status, resp.header("Connection")),
            (200, Some("close"))
        );
        assert_eof(&mut r);
    }
    {
        let (mut w, mut r) = client(&f.server);
        w.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
        let resp = read_response(&mut r, false);
        assert_eq!((resp.status, &resp.body[..]), (200, &b"hello, file\n"[..]));
        assert_eof(&mut r);
    }
    // HTTP/1.0 with keep-alive persists, and says so.
    let (mut w, mut r) = client(&f.server);
    for _ in 0..2 {
        w.write_all(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let resp = read_response(&mut r, false);
        assert_eq!(resp.header("Connection"), Some("keep-alive"));
    }
    wait_stats(&f.server, "two connections closed", |s| {
        s.connections_closed == 2 && s.requests == 4
    });
    f.server.stop().unwrap();
}

#[test]
fn a_client_that_half_closes_after_its_request_still_gets_the_response() {
    let f = fixture(1);
    let (mut w, mut r) = client(&f.server);
    w.write_all(get("/data.bin").as_bytes()).unwrap();
    w.shutdown(std::net::Shutdown::Write).unwrap();
    let resp = read_response(&mut r, false);
    assert!(resp.status == 200 && resp.body == f.data);
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    f.server.stop().unwrap();
}

#[test]
fn curl_gets_the_fixed_response_and_a_file_over_one_connection() {
    let have_curl = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_curl {
        assert!(
            std::env::var_os("USTACK_REQUIRE_TOOLS").is_none(),
            "curl is required (USTACK_REQUIRE_TOOLS) but not installed"
        );
        println!("note: curl is not installed; skipping the curl test");
        return;
    }
    let f = fixture(2);
    let addr = f.server.local_addr();
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "20", "--fail"])
        .arg(format!("http://{addr}/"))
        .arg(format!("http://{addr}/data.bin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut want = FIXED_BODY.to_vec();
    want.extend_from_slice(&f.data);
    assert!(out.stdout == want, "curl output differs");
    let s = wait_stats(&f.server, "curl's connection closed", |s| {
        s.connections_closed == 1
    });
    // Both URLs went over one keep-alive connection.
    assert_eq!((s.connections_accepted, s.requests), (1, 2));
    let out = Command::new("curl")
        .args([
            "--silent",
            "--max-time",
            "20",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
        ])
        .arg(format!("http://{addr}/missing"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    f.server.stop().unwrap();
}

#[test]
fn requests_pipelined_behind_a_file_wait_for_its_whole_body() {
    let f = fixture(1);
    let (mut w, mut r) = client(&f.server);
    // data.bin (300,000 bytes) is several pieces, more than a socket takes at once.
    let batch = get("/data.bin")
        + "HEAD /data.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"
        + &get("/hello.txt")
        + &get("/data.bin");
    w.write_all(batch.as_bytes()).unwrap();
    let resp = read_response(&mut r, false);
    assert_eq!(resp.status, 200);
    assert!(resp.body == f.data, "the first body differs");
    let head = read_response(&mut r, true);
    assert_eq!(head.header("Content-Length"), Some("300000"));
    let resp = read_response(&mut r, false);
    assert_eq!((resp.status, &resp.body[..]), (200, &b"hello, file\n"[..]));
    let resp = read_response(&mut r, false);
    assert!(resp.body == f.data, "the second body differs");
    wait_stats(&f.server, "4 requests", |s| s.requests == 4);
    f.server.stop().unwrap();
}

/// The bytes of the big file: a xorshift stream (no long runs for a bug to hide in),
/// produced 64 KiB at a time.
struct Xorshift(u64);

impl Xorshift {
    fn new() -> Xorshift {
        Xorshift(0x9E37_79B9_7F4A_7C15)
    }
    fn fill(&mut self, piece: &mut Vec<u8>) {
        piece.clear();
        while piece.len() < 64 * 1024 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            piece.extend_from_slice(&self.0.to_le_bytes());
        }
    }
}

/// Downloads `path` on a connection of its own, reading the body 64 KiB at a time and
/// comparing every byte with the xorshift stream as it comes; returns the body's length.
fn download_and_check(server: &Server, path: &str, size: usize) -> usize {
    let (mut w, mut r) = client(server);
    w.write_all(get(path).as_bytes()).unwrap();
    let mut line = String::new();
    let mut length = None;
    loop {
        line.clear();
        std::io::BufRead::read_line(&mut r, &mut line).expect("a head line");
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            length = v.trim().parse::<usize>().ok();
        }
        assert!(!line.is_empty(), "the connection ended inside the head");
    }
    assert_eq!(length, Some(size), "Content-Length");
    let (mut want, mut expect, mut at) = (Xorshift::new(), Vec::new(), 0);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0;
    while got < size {
        let n = r.read(&mut buf).expect("the body");
        assert!(n > 0, "the body ended after {got} bytes");
        let mut data = &buf[..n];
        while !data.is_empty() {
            if at == expect.len() {
                want.fill(&mut expect);
                at = 0;
            }
            let k = data.len().min(expect.len() - at);
            assert!(data[..k] == expect[at..at + k], "a byte differs near {got}");
            at += k;
            got += k;
            data = &data[k..];
        }
    }
    got
}

/// Eight parallel downloads of a 32 MiB file from two workers: every byte checked, and the
/// peak resident set of the process (server and clients) under 64 MB. The server sends a
/// file in pieces of `FILE_CHUNK` as the sockets take them; read whole per request, the
/// bodies alone would be 256 MiB (and as much again in the output buffers).
#[test]
fn eight_parallel_32_mib_downloads_stream_the_file_peak_rss_under_64_mb() {
    const SIZE: usize = 32 << 20;
    const DOWNLOADS: usize = 8;
    let root = TempDir::new("big");
    {
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(root.path().join("big.bin")).unwrap());
        let (mut x, mut piece) = (Xorshift::new(), Vec::new());
        for _ in 0..SIZE / (64 * 1024) {
            x.fill(&mut piece);
            f.write_all(&piece).unwrap();
        }
        f.flush().unwrap();
    }
    let server = start(Proto::Http, 2, Some(root.path().to_owned()));
    let before_kb = peak_rss_kb();
    std::thread::scope(|s| {
        let downloads: Vec<_> = (0..DOWNLOADS)
            .map(|_| s.spawn(|| download_and_check(&server, "/big.bin", SIZE)))
            .collect();
        for d in downloads {
            assert_eq!(d.join().expect("a download"), SIZE);
        }
    });
    let peak_kb = peak_rss_kb();
    eprintln!("peak RSS: {before_kb} kB before the downloads, {peak_kb} kB after");
    assert!(
        peak_kb < 64_000,
        "peak RSS {peak_kb} kB (before the downloads: {before_kb} kB): over 64 MB"
    );
    wait_stats(&server, "the downloads", |st| {
        st.requests == DOWNLOADS as u64
    });
    server.stop().unwrap();
}
