//! The echo, discard and HTTP servers of `ustack_apps` over `sim` on a virtual
//! clock: 100 concurrent verifying clients each, every echoed byte and every response
//! checked; HTTP static files, 404, 400, 405, 431, pipelining and HTTP/1.0 by hand.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::path::PathBuf;

use ustack_apps::{FIXED_BODY, Load, MAX_REQUEST_HEAD, Protocol, Server};
use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_runtime::api::TcpStream;
use ustack_runtime::runtime::{Clock, Runtime, RuntimeBuilder, SimPort, VirtualClock, sim_pair};
use ustack_stack::{EthernetAddress, Instant};
use ustack_testkit::peak_rss_kb;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

type Rt = Runtime<SimPort, VirtualClock>;

fn pair() -> (Rt, Rt, VirtualClock) {
    pair_on(SimLinkConfig::default())
}

fn pair_on(link: SimLinkConfig) -> (Rt, Rt, VirtualClock) {
    let (a, b) = sim_pair(link);
    let clock = VirtualClock::new(Instant::ZERO);
    let srt = RuntimeBuilder::new()
        .ipv4(SERVER_IP, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 2]))
        .sysctl("net.core.somaxconn", 1024)
        .seed(1)
        .build_with_clock(a, clock.participant())
        .unwrap();
    let crt = RuntimeBuilder::new()
        .ipv4(CLIENT_IP, 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
        .seed(2)
        .build_with_clock(b, clock.participant())
        .unwrap();
    (srt, crt, clock)
}

/// Runs `load` against `server` until it is done (at most 60 s of virtual time).
fn run(server: &mut Server, srt: &mut Rt, load: &mut Load, crt: &mut Rt, clock: &VirtualClock) {
    let limit = clock.now() + Duration::from_secs(60);
    while !load.done() {
        assert!(clock.now() < limit, "not done: {load:?} {server:?}");
        server.step(srt, Some(Duration::from_millis(5))).unwrap();
        load.step(crt, Some(Duration::from_millis(5))).unwrap();
    }
    // The server sees the last closes.
    for _ in 0..50 {
        server.step(srt, Some(Duration::from_millis(5))).unwrap();
        crt.run_once(Some(Duration::from_millis(5))).unwrap();
    }
}

#[test]
fn echo_100_concurrent_clients_every_byte_verified() {
    let (mut srt, mut crt, clock) = pair();
    let addr = SocketAddrV4::new(SERVER_IP, 7);
    let mut server = Server::bind(&mut srt, Protocol::Echo, addr, None).unwrap();
    let mut load = Load::start(&mut crt, Protocol::Echo, addr, 100, 20).unwrap();
    run(&mut server, &mut srt, &mut load, &mut crt, &clock);
    let l = *load.stats();
    assert_eq!((l.finished, l.verified), (100, 2000));
    assert_eq!(l.bytes_in, l.bytes_out, "every byte came back");
    let s = *server.stats();
    assert_eq!((s.accepted, s.closed, s.errors), (100, 100, 0));
    assert_eq!((s.bytes_in, s.bytes_out), (l.bytes_out, l.bytes_out));
    assert_eq!(server.connections(), 0);
}

#[test]
fn one_server_on_two_ports_echoes_clients_of_both() {
    let (mut srt, mut crt, clock) = pair();
    let addrs = [7, 8].map(|p| SocketAddrV4::new(SERVER_IP, p));
    let mut server = Server::bind_all(&mut srt, Protocol::Echo, &addrs, None).unwrap();
    for addr in addrs {
        let mut load = Load::start(&mut crt, Protocol::Echo, addr, 10, 5).unwrap();
        run(&mut server, &mut srt, &mut load, &mut crt, &clock);
        assert_eq!(load.stats().verified, 50, "port {}", addr.port());
    }
    assert_eq!(server.stats().accepted, 20);
    assert_eq!(server.connections(), 0);
    let err = Server::bind_all(&mut srt, Protocol::Echo, &[] as &[SocketAddrV4], None).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn discard_100_concurrent_clients_reads_every_byte_and_sends_none() {
    let (mut srt, mut crt, clock) = pair();
    let addr = SocketAddrV4::new(SERVER_IP, 9);
    let mut server = Server::bind(&mut srt, Protocol::Discard, addr, None).unwrap();
    let mut load = Load::start(&mut crt, Protocol::Discard, addr, 100, 10).unwrap();
    run(&mut server, &mut srt, &mut load, &mut crt, &clock);
    let l = *load.stats();
    assert_eq!((l.finished, l.verified, l.bytes_in), (100, 1000, 0));
    let s = *server.stats();
    assert_eq!((s.accepted, s.closed, s.bytes_out), (100, 100, 0));
    assert_eq!(s.bytes_in, l.bytes_out);
}

#[test]
fn http_100_concurrent_keep_alive_clients_every_response_verified() {
    let (mut srt, mut crt, clock) = pair();
    let addr = SocketAddrV4::new(SERVER_IP, 80);
    let mut server = Server::bind(&mut srt, Protocol::Http, addr, None).unwrap();
    let mut load = Load::start(&mut crt, Protocol::Http, addr, 100, 10).unwrap();
    run(&mut server, &mut srt, &mut load, &mut crt, &clock);
    let l = *load.stats();
    assert_eq!((l.finished, l.verified), (100, 1000));
    let s = *server.stats();
    assert_eq!((s.accepted, s.closed, s.http_200), (100, 100, 1000));
    assert_eq!(s.accepted, 100, "keep-alive: one connection per client");
}

/// 2% loss and 100 µs of delay each way: retransmissions, and still every echoed byte
/// and every response right.
#[test]
fn echo_and_http_100_clients_over_a_lossy_link() {
    for (proto, port) in [(Protocol::Echo, 7), (Protocol::Http, 80)] {
        let dir = SimConfig {
            delay: Duration::from_micros(100),
            loss: 0.02,
            ..SimConfig::default()
        };
        let (mut srt, mut crt, clock) = pair_on(SimLinkConfig {
            seed: 11,
            a_to_b: dir.clone(),
            b_to_a: dir,
            ..SimLinkConfig::default()
        });
        let addr = SocketAddrV4::new(SERVER_IP, port);
        let mut server = Server::bind(&mut srt, proto, addr, None).unwrap();
        let mut load = Load::start(&mut crt, proto, addr, 100, 5).unwrap();
        run(&mut server, &mut srt, &mut load, &mut crt, &clock);
        assert_eq!(load.stats().finished, 100, "{proto:?}");
        assert_eq!(load.stats().verified, 500, "{proto:?}");
        let s = *server.stats();
        assert_eq!((s.accepted, s.errors), (100, 0), "{proto:?}");
        let link = srt.device().link().borrow();
        assert!(
            link.stats(Side::A).lost + link.stats(Side::B).lost > 0,
            "{proto:?}: frames were lost"
        );
    }
}

// ---- HTTP by hand -----------------------------------------------------------------------

/// Sends `request` on a new connection and returns everything the server sent until it
/// closed or `rounds` passed.
fn exchange(server: &mut Server, srt: &mut Rt, crt: &mut Rt, request: &[u8]) -> (Vec<u8>, bool) {
    exchange_with(server, srt, crt, request, true)
}

/// [`exchange`], reading only once the whole request is written if `read_while_writing`
/// is false (a write error ends the writing).
fn exchange_with(
    server: &mut Server,
    srt: &mut Rt,
    crt: &mut Rt,
    request: &[u8],
    read_while_writing: bool,
) -> (Vec<u8>, bool) {
    let s = TcpStream::connect(crt, SocketAddrV4::new(SERVER_IP, 80)).unwrap();
    let mut written = 0;
    let mut got = Vec::new();
    let mut eof = false;
    let mut buf = [0u8; 4096];
    for _ in 0..20_000 {
        server.step(srt, Some(Duration::from_millis(1))).unwrap();
        crt.run_once(Some(Duration::from_millis(1))).unwrap();
        if written < request.len() {
            match s.write(crt, &request[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => written = request.len(),
            }
        }
        if !read_while_writing && written < request.len() {
            continue;
        }
        loop {
            match s.read(crt, &mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        if eof {
            break;
        }
    }
    let _ = s.close(crt);
    (got, eof)
}

fn head_and_body(resp: &[u8]) -> (String, &[u8]) {
    let end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    (
        String::from_utf8(resp[..end].to_vec()).unwrap(),
        &resp[end + 4..],
    )
}

fn temp_root() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ustack-servers-test-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("index.html"), b"<h1>hi</h1>\n").unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(dir.join("sub/big.bin"), &big).unwrap();
    dir
}

#[test]
fn http_static_files_errors_pipelining_and_http10() {
    let root = temp_root();
    let (mut srt, mut crt, _clock) = pair();
    let addr = SocketAddrV4::new(SERVER_IP, 80);
    let mut server = Server::bind(&mut srt, Protocol::Http, addr, Some(root.clone())).unwrap();
    let mut ex = |req: &[u8]| exchange(&mut server, &mut srt, &mut crt, req);

    // A static file, and a big one (many segments, the server's output waiting for room).
    let (resp, eof) = ex(b"GET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(eof);
    let (head, body) = head_and_body(&resp);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/html; charset=utf-8"),
        "{head}"
    );
    assert!(head.contains("Content-Length: 12"), "{head}");
    assert!(
        head.contains("\r\nDate: ") && head.contains(" GMT"),
        "{head}"
    );
    assert_eq!(body, b"<h1>hi</h1>\n");
    let (resp, eof) = ex(b"GET /sub/big.bin HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(eof);
    let (head, body) = head_and_body(&resp);
    assert!(head.contains("Content-Length: 200000"), "{head}");
    assert_eq!(body, std::fs::read(root.join("sub/big.bin")).unwrap());
    // Pipelined behind the big file (sent in pieces as the socket takes them): a HEAD of it
    // and a small file, answered in order after the whole body.
    let (resp, eof) = ex(b"GET /sub/big.bin HTTP/1.1\r\nHost: a\r\n\r\nHEAD /sub/big.bin HTTP/1.1\r\nHost: a\r\n\r\nGET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(eof);
    let (h1, rest) = head_and_body(&resp);
    assert!(h1.contains("Content-Length: 200000"), "{h1}");
    assert_eq!(&rest[..200_000], body);
    let (h2, rest) = head_and_body(&rest[200_000..]);
    assert!(h2.contains("Content-Length: 200000"), "{h2}");
    let (h3, rest) = head_and_body(rest);
    assert!(h3.contains("Content-Length: 12"), "{h3}");
    assert_eq!(rest, b"<h1>hi</h1>\n");

    // 404, 400 for `..`, 405, and 400 for garbage (closing).
    let (resp, _) = ex(b"GET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let (head, body) = head_and_body(&resp);
    assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
    assert_eq!(body, b"404 Not Found\n");
    let (resp, _) = ex(b"GET /sub/../index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(resp.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    let (resp, _) = ex(b"GET /sub HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(
        resp.starts_with(b"HTTP/1.1 404 "),
        "a directory is not a file"
    );
    let (resp, _) = ex(b"DELETE / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    let (head, _) = head_and_body(&resp);
    assert!(head.starts_with("HTTP/1.1 405 "), "{head}");
    assert!(head.contains("Allow: GET, HEAD"), "{head}");
    let (resp, eof) = ex(b"GARBAGE\r\n\r\n");
    assert!(eof, "an error response closes");
    let (head, _) = head_and_body(&resp);
    assert!(head.starts_with("HTTP/1.1 400 ") && head.contains("Connection: close"));
    let (resp, eof) = ex(b"GET / HTTP/1.1\r\n\r\n");
    assert!(eof && resp.starts_with(b"HTTP/1.1 400 "), "no Host");

    // 431 for a head over the limit, then close.
    let mut long = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    long.resize(MAX_REQUEST_HEAD + 100, b'x');
    let (resp, eof) = ex(&long);
    assert!(eof);
    assert!(
        resp.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{}",
        String::from_utf8_lossy(&resp)
    );

    // Pipelined: three requests in one write, three answers in order; HEAD has no body.
    let (resp, eof) = ex(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD /index.html HTTP/1.1\r\nHost: a\r\n\r\nGET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert!(eof);
    let (h1, rest) = head_and_body(&resp);
    assert!(h1.starts_with("HTTP/1.1 200 OK") && !h1.contains("Connection"));
    assert_eq!(&rest[..FIXED_BODY.len()], FIXED_BODY);
    let (h2, rest) = head_and_body(&rest[FIXED_BODY.len()..]);
    assert!(h2.contains("Content-Length: 12"), "{h2}");
    let (h3, body) = head_and_body(rest);
    assert!(h3.contains("Connection: close"), "{h3}");
    assert_eq!(body, b"<h1>hi</h1>\n");

    // HTTP/1.0: closes unless keep-alive; a body framed by Content-Length is skipped.
    let (resp, eof) = ex(b"GET / HTTP/1.0\r\n\r\n");
    assert!(eof);
    assert!(head_and_body(&resp).0.contains("Connection: close"));
    let (resp, eof) = ex(
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(eof);
    let (h1, rest) = head_and_body(&resp);
    assert!(h1.contains("Connection: keep-alive"), "{h1}");
    let (h2, body) = head_and_body(&rest[FIXED_BODY.len()..]);
    assert!(h2.starts_with("HTTP/1.1 200 OK"), "{h2}");
    assert_eq!(body, FIXED_BODY);

    // The client keeps sending after the error: the server half-closes and reads on
    // (RFC 9112 §9.6) instead of closing with unread data, which would reset the
    // connection; the response arrives whole and the connection ends with a FIN. The
    // client writes the whole megabyte before it reads. Without the lingering close the
    // server would close while the client still sends, and answer the rest with a reset
    // (TcpExtTCPAbortOnData, as Linux does): the server's counters show it.
    let mut junk = b"GARBAGE\r\n\r\n".to_vec();
    junk.resize(1_000_000, b'x');
    let (resp, eof) = exchange_with(&mut server, &mut srt, &mut crt, &junk, false);
    assert!(eof, "a FIN, not a reset");
    let (head, body) = head_and_body(&resp);
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    assert_eq!(body, b"400 Bad Request\n");
    let m = srt.stack().mib();
    assert_eq!(
        m.get(ustack_obs::Counter::TcpExtTCPAbortOnClose),
        0,
        "no close with unread data"
    );
    assert_eq!(
        m.get(ustack_obs::Counter::TcpExtTCPAbortOnData),
        0,
        "no data arriving after close"
    );
    assert_eq!(
        m.get(ustack_obs::Counter::TcpOutRsts),
        0,
        "the server never reset the client"
    );
    let s = *server.stats();
    assert_eq!(s.http_404, 2);
    assert_eq!(s.http_400, 4);
    assert_eq!(s.http_405, 1);
    assert_eq!(s.http_431, 1);
    std::fs::remove_dir_all(&root).unwrap();
}

/// Ten parallel downloads of a 50 MiB file: every byte of every download checked (SHA-256
/// against the file's), and the peak resident set of the process, the server's runtime and
/// the clients' together, under 100 MB. The server streams the file in pieces as the
/// sockets take them; read whole per request, the ten bodies alone would be 500 MiB (the
/// server's RSS went from 5 MB to 527 MB). The clients' receive buffers are capped at
/// 1 MiB so that what is measured is mostly the server's.
#[test]
fn http_ten_parallel_50_mib_downloads_every_byte_checked_peak_rss_under_100_mb() {
    use sha2::{Digest, Sha256};
    use std::io::Write;

    const SIZE: usize = 50 << 20;
    const DOWNLOADS: usize = 10;
    let root = std::env::temp_dir().join(format!("ustack-download-test-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    // The file, written and hashed in pieces (never whole in this process's memory): a
    // xorshift stream, no long runs for a bug to hide in.
    let mut want = Sha256::new();
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(root.join("big.bin")).unwrap());
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut piece = Vec::with_capacity(64 * 1024);
        for _ in 0..SIZE / piece.capacity() {
            piece.clear();
            while piece.len() < piece.capacity() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                piece.extend_from_slice(&x.to_le_bytes());
            }
            want.update(&piece);
            f.write_all(&piece).unwrap();
        }
        f.flush().unwrap();
    }
    let want = want.finalize();

    let (mut srt, mut crt, clock) = pair();
    let addr = SocketAddrV4::new(SERVER_IP, 80);
    let mut server = Server::bind(&mut srt, Protocol::Http, addr, Some(root.clone())).unwrap();
    let before_kb = peak_rss_kb();
    struct Download {
        stream: TcpStream,
        head: Vec<u8>,
        body: Option<Sha256>,
        len: usize,
        done: bool,
    }
    let request = b"GET /big.bin HTTP/1.1\r\nHost: ustack\r\nConnection: close\r\n\r\n";
    let mut downloads: Vec<Download> = (0..DOWNLOADS)
        .map(|_| {
            let stream = TcpStream::connect(&mut crt, addr).unwrap();
            stream.set_recv_buffer_size(&mut crt, 1 << 20).unwrap();
            Download {
                stream,
                head: Vec::new(),
                body: None,
                len: 0,
                done: false,
            }
        })
        .collect();
    let mut requested = [false; DOWNLOADS];
    let mut buf = vec![0u8; 64 * 1024];
    let limit = clock.now() + Duration::from_secs(600);
    while !downloads.iter().all(|d| d.done) {
        assert!(
            clock.now() < limit,
            "not done: {:?} {server:?}",
            downloads.iter().map(|d| d.len).collect::<Vec<_>>()
        );
        server
            .step(&mut srt, Some(Duration::from_millis(1)))
            .unwrap();
        crt.run_once(Some(Duration::from_millis(1))).unwrap();
        for (d, requested) in downloads.iter_mut().zip(&mut requested) {
            if !*requested {
                match d.stream.write(&mut crt, request) {
                    Ok(n) => {
                        assert_eq!(n, request.len(), "the request in one write");
                        *requested = true;
                    }
                    Err(_) => continue, // not connected yet
                }
            }
            while !d.done {
                let n = match d.stream.read(&mut crt, &mut buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                };
                if n == 0 {
                    d.done = true;
                    break;
                }
                let mut data = &buf[..n];
                if d.body.is_none() {
                    d.head.extend_from_slice(data);
                    let Some(end) = d.head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&d.head[..end]).into_owned();
                    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
                    assert!(
                        head.contains(&format!("\r\nContent-Length: {SIZE}\r\n")),
                        "{head}"
                    );
                    let mut h = Sha256::new();
                    h.update(&d.head[end + 4..]);
                    d.len = d.head.len() - end - 4;
                    d.body = Some(h);
                    data = &[];
                }
                d.body.as_mut().expect("the body's hash").update(data);
                d.len += data.len();
            }
        }
    }
    let peak_kb = peak_rss_kb();
    for (i, d) in downloads.into_iter().enumerate() {
        assert_eq!(
            d.len, SIZE,
            "download {i}: the whole body, nothing after it"
        );
        assert_eq!(
            d.body.expect("a response").finalize(),
            want,
            "download {i}: every byte"
        );
        let _ = d.stream.close(&mut crt);
    }
    std::fs::remove_dir_all(&root).unwrap();
    eprintln!("peak RSS: {before_kb} kB before the downloads, {peak_kb} kB after");
    assert!(
        peak_kb < 100_000,
        "peak RSS {peak_kb} kB (before the downloads: {before_kb} kB): over 100 MB"
    );
    assert_eq!(server.stats().http_200, DOWNLOADS as u64);
}

/// An HTTP server and a client runtime on one virtual clock, for tests that run time on.
struct Scene {
    server: Server,
    srt: Rt,
    crt: Rt,
    clock: VirtualClock,
}

impl Scene {
    fn http() -> Scene {
        let (mut srt, crt, clock) = pair();
        let addr = SocketAddrV4::new(SERVER_IP, 80);
        let server = Server::bind(&mut srt, Protocol::Http, addr, None).unwrap();
        Scene {
            server,
            srt,
            crt,
            clock,
        }
    }

    /// Run both loops for `d` of virtual time; the client only reads what `stream` gets.
    fn run_for(&mut self, d: Duration, stream: &TcpStream) -> Vec<u8> {
        let until = self.clock.now() + d;
        let (mut got, mut buf) = (Vec::new(), [0u8; 4096]);
        while self.clock.now() < until {
            let step = Some(Duration::from_millis(50));
            self.server.step(&mut self.srt, step).unwrap();
            self.crt.run_once(step).unwrap();
            while let Ok(n @ 1..) = stream.read(&mut self.crt, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        got
    }
}

#[test]
fn a_lingering_close_ends_after_its_timeouts_when_the_client_never_closes() {
    let mut t = Scene::http();
    let addr = SocketAddrV4::new(SERVER_IP, 80);

    // A bad request, then silence: the 400 and a FIN come at once; the connection lingers
    // for LINGERING_TIMEOUT (5 s) and is closed then, though the client never closes.
    let quiet = TcpStream::connect(&mut t.crt, addr).unwrap();
    quiet.write(&mut t.crt, b"BAD\r\n\r\n").unwrap();
    let got = t.run_for(Duration::from_secs(4), &quiet);
    assert!(head_and_body(&got).0.starts_with("HTTP/1.1 400 "));
    assert_eq!(t.server.connections(), 1, "lingering, within its 5 s");
    t.run_for(Duration::from_secs(2), &quiet);
    assert_eq!(t.server.connections(), 0, "closed after 5 s without data");
    assert_eq!(t.server.stats().linger_timeouts, 1);
    assert_eq!(t.srt.timers_armed(), 0, "nothing left armed");

    // A client that keeps trickling data pushes the timeout back, but not past
    // LINGERING_TIME (30 s) after the FIN.
    let chatty = TcpStream::connect(&mut t.crt, addr).unwrap();
    chatty.write(&mut t.crt, b"BAD\r\n\r\n").unwrap();
    let start = t.clock.now();
    for _ in 0..7 {
        t.run_for(Duration::from_secs(4), &chatty);
        assert_eq!(
            t.server.connections(),
            1,
            "data every 4 s keeps it lingering"
        );
        chatty.write(&mut t.crt, b"more").unwrap();
    }
    t.run_for(Duration::from_secs(4), &chatty);
    assert_eq!(t.server.connections(), 0, "lingering_time is a hard limit");
    assert!(t.clock.now() - start < Duration::from_secs(33));
    assert_eq!(t.server.stats().linger_timeouts, 2);
    let (_, _) = (quiet.close(&mut t.crt), chatty.close(&mut t.crt));
}

// ---- the request parser ------------------------------------------------------------------

mod parser {
    use proptest::prelude::*;
    use ustack_apps::MAX_REQUEST_HEAD;
    use ustack_apps::http::{Method, Parsed, Status, parse};

    #[test]
    fn requests_prefixes_and_errors() {
        let req = b"\r\nGET /a%20b?q=1 HTTP/1.1\r\nHost: example.com:80\r\nX-A:  b \r\n\r\nGET";
        let head_len = req.len() - 3;
        for i in 0..head_len {
            assert_eq!(parse(&req[..i]), Parsed::Incomplete, "prefix {i}");
        }
        match parse(req) {
            Parsed::Request {
                request,
                head_len: n,
            } => {
                assert_eq!(n, head_len, "the pipelined rest stays");
                assert_eq!(request.method, Method::Get);
                assert_eq!(request.path, b"/a%20b");
                assert!(request.keep_alive && !request.http10);
            }
            other => panic!("{other:?}"),
        }
        for (bad, status) in [
            (&b"GET / HTTP/2.0\r\n\r\n"[..], Status::VersionNotSupported),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
                Status::NotImplemented,
            ),
            (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", Status::BadRequest),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
                Status::BadRequest,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                Status::BadRequest,
            ),
            (
                b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Status::BadRequest,
            ),
            (b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n", Status::BadRequest),
        ] {
            assert_eq!(
                parse(bad),
                Parsed::Error(status),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse(&vec![b'a'; MAX_REQUEST_HEAD]),
            Parsed::Error(Status::HeaderFieldsTooLarge)
        );
    }

    proptest! {
        /// Any bytes: no panic, a head never longer than the limit or the input.
        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..10_000)) {
            if let Parsed::Request { head_len, .. } = parse(&buf) {
                prop_assert!(head_len <= buf.len() && head_len <= MAX_REQUEST_HEAD);
            }
        }

        /// Request-like bytes (lines of header-ish characters) exercise the header paths.
        #[test]
        fn parse_never_panics_on_request_like_input(
            lines in proptest::collection::vec("[ -~\t]{0,40}", 0..12),
            crlf in any::<bool>(),
        ) {
            let eol = if crlf { "\r\n" } else { "\n" };
            let text = format!("GET / HTTP/1.1{eol}{}{eol}{eol}", lines.join(eol));
            let _ = parse(text.as_bytes());
        }
    }
}
