//! What the tests with the Linux kernel as the peer share (`tun.rs`, `packet.rs`, `xdp.rs`,
//! `matrix.rs`): ustack on a thread of its own over a device, a bounded drive loop, the
//! read/write helpers that hash what moves, the capture of a run checked by tshark
//! ([`Pcap`]), ([`scenarios`]) the transfers every link carries, and ([`matrix`]) the
//! interop matrix over any link.

#![allow(dead_code)] // each test file uses its part

pub mod matrix;
pub mod scenarios;

use core::net::{IpAddr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::fs::File;
use std::io::{self, BufWriter, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};
use ustack_dev::Device;
use ustack_dev::capture::Capture;
use ustack_runtime::Mode;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::{Events, Interest, Runtime, RuntimeBuilder, Sleep};
use ustack_stack::AddrState;
use ustack_testkit::netns::{KERNEL_IP, NetNs, PY_BULK_SERVER, PY_CC_ENV, USTACK_IP, python_argv};
use ustack_testkit::tshark::{CLEAN_RETRANSMISSIONS, TsharkReport, check_capture};

/// The bound on each kernel-side command and on each ustack application: what a hang is
/// allowed before the test fails. The largest transfer (1 GiB each way over TUN) takes
/// about 25-35 s in a debug build on a loaded 2-core machine.
pub const LIMIT: Duration = Duration::from_secs(60);

/// The runtime builder the tests use: [`USTACK_IP`]/24, seed 7.
pub fn builder() -> RuntimeBuilder {
    RuntimeBuilder::new().ipv4(USTACK_IP, 24).seed(7)
}

/// The kernel's IPv6 address on the rigs' link in the runs over IPv6 (documentation
/// prefix, RFC 3849).
pub const KERNEL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 1);
/// ustack's IPv6 address on the rigs' link.
pub const USTACK6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 2);

/// The address family of a run: the rigs' IPv4 addresses ([`USTACK_IP`], [`KERNEL_IP`])
/// or IPv6 ([`USTACK6`], [`KERNEL6`]/64, with neighbour discovery on an Ethernet link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// ustack's address.
    pub fn ustack(self) -> IpAddr {
        match self {
            Family::V4 => USTACK_IP.into(),
            Family::V6 => USTACK6.into(),
        }
    }

    /// The kernel's address.
    pub fn kernel(self) -> IpAddr {
        match self {
            Family::V4 => KERNEL_IP.into(),
            Family::V6 => KERNEL6.into(),
        }
    }

    /// `builder` with ustack's address of this family ([`USTACK6`]/64 added for IPv6; the
    /// IPv4 one is always there).
    pub fn builder(self, builder: RuntimeBuilder) -> RuntimeBuilder {
        match self {
            Family::V4 => builder,
            Family::V6 => builder.ipv6(USTACK6, 64),
        }
    }

    /// Sets up the kernel's end `dev` of the link in `ns` for this family: for IPv6, IPv6
    /// on with [`KERNEL6`]/64 (the rigs turn IPv6 off).
    pub fn configure(self, ns: &NetNs, dev: &str) -> io::Result<()> {
        match self {
            Family::V4 => Ok(()),
            Family::V6 => ns.add_ipv6(dev, &format!("{KERNEL6}/64")),
        }
    }
}

/// The kernel's side of a run: the namespace it runs in and the family it speaks. A bare
/// `&NetNs` is IPv4.
#[derive(Debug, Clone, Copy)]
pub struct Peer<'a> {
    pub ns: &'a NetNs,
    pub family: Family,
}

impl<'a> Peer<'a> {
    /// IPv6 in `ns`, its kernel end `dev` configured ([`Family::configure`]).
    pub fn v6(ns: &'a NetNs, dev: &str) -> Peer<'a> {
        Family::V6
            .configure(ns, dev)
            .expect("IPv6 on the kernel's end");
        Peer {
            ns,
            family: Family::V6,
        }
    }

    /// ustack's address and `port`.
    pub fn ustack_at(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.family.ustack(), port)
    }

    /// The kernel's address and `port`.
    pub fn kernel_at(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.family.kernel(), port)
    }
}

impl<'a> From<&'a NetNs> for Peer<'a> {
    fn from(ns: &'a NetNs) -> Peer<'a> {
        Peer {
            ns,
            family: Family::V4,
        }
    }
}

/// Runs `rt` until each of its IPv6 addresses has passed duplicate address detection
/// (RFC 4862 §5.4: a tentative address neither answers nor sends), at most 5 s.
pub fn settle<D: Device + Sleep>(rt: &mut Runtime<D>) -> io::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while matches!(
        rt.stack().ipv6_addr_state(USTACK6),
        Some(AddrState::Tentative { .. })
    ) {
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(
                ErrorKind::TimedOut,
                "duplicate address detection did not end in 5 s",
            ));
        }
        rt.run_once(Some(Duration::from_millis(10)))?;
    }
    Ok(())
}

/// ustack's device in a test: the link's queue, its traffic captured to a file.
pub type Captured<D> = Capture<D, BufWriter<File>>;

/// The snapshot length of the captures of bulk transfers: the headers (Ethernet 14, IPv4
/// 20 to 60, TCP 20 to 60 bytes), not the data, so that the file stays small.
pub const HEADERS: u32 = 128;

/// The most frames a capture keeps, the first ones: about 4 s of tshark's time on a
/// loaded machine (1 MiB each way is about 2,200 frames, 64 MiB each way about 120,000;
/// 1 GiB each way would be 2.2 million, a minute of tshark).
pub const MAX_FRAMES: u64 = 150_000;

/// The capture of one run, in a file of its own, read by tshark after the run.
pub struct Pcap {
    what: String,
    path: PathBuf,
    /// ustack's address in the capture (whose retransmissions tshark counts as ustack's).
    ustack: IpAddr,
}

impl Pcap {
    /// Wraps `device` so that its traffic, in and out, goes to a file named after `what`
    /// in the temporary directory: the first [`MAX_FRAMES`] frames, `snaplen` bytes of
    /// each (0: whole).
    pub fn wrap<D: Device>(what: &str, device: D, snaplen: u32) -> (Captured<D>, Pcap) {
        let path = std::env::temp_dir().join(format!("ustack-{what}-{}.pcap", std::process::id()));
        let file = BufWriter::new(File::create(&path).expect("creating the capture"));
        let device = Capture::with_snaplen(device, file, snaplen)
            .expect("the capture's header")
            .limit(MAX_FRAMES);
        let what = what.to_owned();
        let ustack = USTACK_IP.into();
        (device, Pcap { what, path, ustack })
    }

    /// The capture's file.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The capture of a run over `family`.
    pub fn of(self, family: Family) -> Pcap {
        Pcap {
            ustack: family.ustack(),
            ..self
        }
    }

    /// After the run, once the capture is dropped (which flushes the file; a runtime is
    /// when its thread ends): tshark's check of a run without faults
    /// ([`check_capture`], [`CLEAN_RETRANSMISSIONS`] each side). The file is removed
    /// when the check passes.
    pub fn check(self) -> Option<TsharkReport> {
        self.check_with((CLEAN_RETRANSMISSIONS, CLEAN_RETRANSMISSIONS))
    }

    /// [`check`](Self::check) with `bounds` on the retransmissions (ustack's, the
    /// kernel's).
    pub fn check_with(self, bounds: (u64, u64)) -> Option<TsharkReport> {
        let report = check_capture(&self.what, &self.path, self.ustack, bounds);
        let _ = std::fs::remove_file(&self.path);
        report
    }
}

/// ustack on a thread: a runtime over a device, running `app` until it returns. `app` is
/// told to stop through the flag (set by [`Ustack::finish`] or on drop, so a failing test
/// does not leave it running).
pub struct Ustack<T> {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<T>>>,
}

impl<T: Send + 'static> Ustack<T> {
    /// A runtime from `builder` over `device`, running `app` once its IPv6 addresses have
    /// passed DAD ([`settle`]); returns then.
    pub fn start<D: Device + Sleep + Send + 'static>(
        builder: RuntimeBuilder,
        device: D,
        app: impl FnOnce(&mut Runtime<D>, &AtomicBool) -> io::Result<T> + Send + 'static,
    ) -> Ustack<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready, settled) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            let mut rt = builder.build(device)?;
            settle(&mut rt)?;
            let _ = ready.send(());
            app(&mut rt, &flag)
        });
        // Returns once ustack's addresses are usable (a peer that starts at once would see
        // its first packets dropped during DAD), or the thread ended (its error is for
        // `join`).
        let _ = settled.recv();
        Ustack {
            stop,
            handle: Some(handle),
        }
    }

    /// Tell the application to stop and take its result.
    pub fn finish(self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Wait for the application to end on its own (it is bounded by [`LIMIT`]) and take
    /// its result.
    pub fn join(mut self) -> T {
        let handle = self.handle.take().expect("finished once");
        handle
            .join()
            .expect("the ustack thread panicked")
            .expect("the ustack application failed")
    }
}

impl<T> Drop for Ustack<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Poll `rt` in steps of at most 10 ms, calling `step` after each, until `step` returns
/// a result, `stop` is set (then `Ok(None)`), or [`LIMIT`] passes (`TimedOut`).
pub fn drive<D: Device + Sleep, T>(
    rt: &mut Runtime<D>,
    stop: &AtomicBool,
    mut step: impl FnMut(&mut Runtime<D>) -> io::Result<Option<T>>,
) -> io::Result<Option<T>> {
    let deadline = std::time::Instant::now() + LIMIT;
    let mut events = Events::with_capacity(64);
    while !stop.load(Ordering::Relaxed) {
        if std::time::Instant::now() >= deadline {
            return Err(io::Error::new(ErrorKind::TimedOut, "ustack app timed out"));
        }
        rt.poll(&mut events, Some(Duration::from_millis(10)))?;
        if let Some(r) = step(rt)? {
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Keep the runtime going (retransmissions, FINs, ACKs) until told to stop.
pub fn idle<D: Device + Sleep>(rt: &mut Runtime<D>, stop: &AtomicBool) -> io::Result<()> {
    drive(rt, stop, |_| Ok(None::<()>)).map(|_| ())
}

/// The one connection a test waits for on `listener`, once it arrives: accepted and
/// registered (token 1) for readable and writable edges; `None` while none is waiting.
pub fn accept_one<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    listener: &TcpListener,
) -> io::Result<Option<TcpStream>> {
    match listener.accept(rt) {
        Ok((s, _)) => {
            rt.register(&s, 1, Interest::READABLE | Interest::WRITABLE, Mode::Edge)?;
            Ok(Some(s))
        }
        Err(e) if would_block(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

pub fn would_block(e: &io::Error) -> bool {
    e.kind() == ErrorKind::WouldBlock
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Read what is there into `hasher`: bytes read, and whether the peer's FIN came.
pub fn read_into<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    s: &TcpStream,
    buf: &mut [u8],
    hasher: &mut Sha256,
) -> io::Result<(u64, bool)> {
    let mut n = 0;
    loop {
        match s.read(rt, buf) {
            Ok(0) => return Ok((n, true)),
            Ok(k) => {
                hasher.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if would_block(&e) => return Ok((n, false)),
            Err(e) => return Err(e),
        }
    }
}

/// Write as much of `data[*off..]` as the socket takes; true once all of it is queued.
pub fn write_from<D: Device + Sleep>(
    rt: &mut Runtime<D>,
    s: &TcpStream,
    data: &[u8],
    off: &mut usize,
) -> io::Result<bool> {
    while *off < data.len() {
        match s.write(rt, &data[*off..]) {
            Ok(k) => *off += k,
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// `total` bytes to send, made of one pattern block (1 MiB and 13 bytes, so that no
/// power-of-two shift of the stream looks like it) over and over, hashed as the socket takes
/// them: a transfer of any size without holding it in memory.
pub struct Source {
    block: Vec<u8>,
    total: u64,
    sent: u64,
    hasher: Sha256,
}

impl Source {
    pub fn new(total: u64, salt: u64) -> Source {
        Source {
            block: ustack_testkit::pattern((1 << 20) + 13, salt),
            total,
            sent: 0,
            hasher: Sha256::new(),
        }
    }

    /// Write as much as the socket takes; true once all of it is queued.
    pub fn write<D: Device + Sleep>(
        &mut self,
        rt: &mut Runtime<D>,
        s: &TcpStream,
    ) -> io::Result<bool> {
        let len = self.block.len() as u64;
        while self.sent < self.total {
            let at = (self.sent % len) as usize;
            let end = (at as u64 + (self.total - self.sent)).min(len) as usize;
            match s.write(rt, &self.block[at..end]) {
                Ok(k) => {
                    self.hasher.update(&self.block[at..at + k]);
                    self.sent += k as u64;
                }
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Bytes written so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// The hex SHA-256 of everything written.
    pub fn digest(self) -> String {
        hex(&self.hasher.finalize())
    }
}

/// The hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Runs a Python script in the namespace (bounded by [`LIMIT`]) and returns its stdout;
/// panics with its stderr if it fails.
pub fn python(ns: &NetNs, script: &str, args: &[String]) -> String {
    let out = ns
        .run(LIMIT, &python_argv(script, args))
        .expect("the kernel-side script");
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// How many times interface `dev` in `ns` has been asked to pass every multicast frame
/// (its allmulti count, as `ip -d link show` prints it).
pub fn allmulti(ns: &NetNs, dev: &str) -> u64 {
    let out = ns
        .run(LIMIT, &["ip", "-d", "link", "show", dev])
        .expect("ip -d link show");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words
        .find(|w| *w == "allmulti")
        .and_then(|_| words.next()?.parse().ok())
        .unwrap_or_else(|| panic!("no allmulti count in {text}"))
}

/// An ARP request from ustack's end for the kernel's address, as an Ethernet frame.
pub fn arp_request(mac: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&USTACK_IP.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&KERNEL_IP.octets());
    f
}

/// Waits up to 5 s for an ARP reply from the kernel to `mac` on `q` (`wait` sleeps on
/// the device a little); the frame.
pub fn arp_reply<D: Device>(q: &mut D, mac: [u8; 6], mut wait: impl FnMut(&mut D)) -> Vec<u8> {
    let mut buf = vec![0; q.caps().max_frame_len()];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        assert!(std::time::Instant::now() < deadline, "no ARP reply");
        wait(q);
        while let Some(n) = q.recv(ustack_stack::Instant::ZERO, &mut buf) {
            let f = &buf[..n];
            // ARP (0x0806), operation 2 (reply), to us.
            if n >= 42 && f[12..14] == [8, 6] && f[20..22] == [0, 2] && f[..6] == mac {
                return f.to_vec();
            }
        }
    }
}

/// A kernel bulk server ([`PY_BULK_SERVER`]) running in a namespace, listening once
/// [`start`](Self::start) returns.
pub struct KernelServer {
    child: std::process::Child,
    lines: std::io::BufReader<std::process::ChildStdout>,
}

impl KernelServer {
    /// Starts the server on the kernel's address of `peer` (IPv4: [`KERNEL_IP`]) and
    /// `port`, to send `n` bytes to the connection after reading it to its end, with
    /// congestion control `cc` on it if given; returns once it prints `ready`.
    pub fn start<'a>(
        peer: impl Into<Peer<'a>>,
        n: usize,
        port: u16,
        cc: Option<&str>,
    ) -> KernelServer {
        let peer = peer.into();
        KernelServer::start_on(peer.ns, peer.family.kernel(), n, port, cc)
    }

    /// [`start`](Self::start) on `host` in `ns`.
    pub fn start_on(
        ns: &NetNs,
        host: IpAddr,
        n: usize,
        port: u16,
        cc: Option<&str>,
    ) -> KernelServer {
        use std::io::BufRead;
        let mut command = ns.command(
            LIMIT,
            &python_argv(
                PY_BULK_SERVER,
                &[n.to_string(), host.to_string(), port.to_string()],
            ),
        );
        if let Some(cc) = cc {
            command.env(PY_CC_ENV, cc);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawning the kernel server");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut first = String::new();
        lines.read_line(&mut first).expect("reading the server");
        assert_eq!(first.trim(), "ready", "the kernel server did not start");
        KernelServer { child, lines }
    }

    /// Waits for the server to end (it does once it has sent everything and closed) and
    /// returns what it reports. Panics with its stderr if it failed, or if it printed
    /// something else.
    pub fn finish(mut self) -> KernelServerReport {
        use std::io::Read;
        let mut rest = String::new();
        self.lines
            .read_to_string(&mut rest)
            .expect("reading the server");
        let status = self.child.wait().expect("waiting for the server");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert!(status.success(), "kernel server: {status}: {err}");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let [read, read_digest, sent_digest] = fields[..] else {
            panic!("kernel server printed `{rest}`");
        };
        KernelServerReport {
            read: read.parse().expect("a byte count"),
            read_digest: read_digest.to_owned(),
            sent_digest: sent_digest.to_owned(),
        }
    }
}

/// What a [`KernelServer`] reports at its end.
#[derive(Debug)]
pub struct KernelServerReport {
    /// Bytes it read from the connection.
    pub read: u64,
    /// Their SHA-256 (hex).
    pub read_digest: String,
    /// The SHA-256 (hex) of what it sent.
    pub sent_digest: String,
}

impl Drop for KernelServer {
    fn drop(&mut self) {
        // Our child's process group: `timeout` and the server it runs (SIGKILL to
        // `timeout` alone would leave the server running in the namespace); reaped.
        ustack_testkit::netns::kill_group(&mut self.child);
    }
}
