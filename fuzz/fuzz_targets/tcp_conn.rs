//! One TCP connection driven through its states by a hostile peer and an arbitrary
//! application, with invariants checked after every step.
//!
//! The stack under test is 192.0.2.2 on an IP-only link; the peer is the fuzzer. The first
//! input byte chooses a passive open (a listener on port 80, the peer's SYN opens it) or
//! an active one (the stack connects to the peer), the next four the peer's ISN. Then a
//! sequence of operations, each an opcode byte and its arguments (missing bytes read as 0):
//! - a peer segment: flags, sequence number as an offset from the last ACK the stack sent
//!   (the peer's ISN before that), acknowledgment number as an offset from the highest
//!   sequence number the stack sent, window, options (MSS, window scale, SACK-permitted,
//!   timestamps, a SACK block relative to the stack's sequence space), payload length;
//! - the clock moved on (the stack's timers run as they fall due);
//! - the application writes, reads, shuts down its sending side, closes or aborts.
//!
//! The payload is a function of the absolute sequence number each byte sits at (whatever
//! the offsets), and the application writes a function of its stream offset, so that:
//! - what the application reads is, byte for byte, what the peer sent in order from the
//!   ISN the stack acknowledged (never a byte twice, never a stale retransmission);
//! - every data segment the stack sends carries the bytes written at that offset, never
//!   beyond what was written, and its FIN only after the application's shutdown, right
//!   after the last byte;
//! - the stack acknowledges no byte the peer never sent, and never less than what the
//!   application already read; the bytes acknowledged by the peer (written minus the send
//!   queue) never exceed what the stack sent (SND.UNA <= SND.NXT) and never go back;
//! - windows are non-negative (no wrapped subtraction) and buffers stay inside their
//!   sysctl bounds: rcvbuf <= tcp_rmem max, sndbuf <= tcp_wmem max, bytes held <= the
//!   socket's buffer, the memory of each buffer within twice it (plus chunk rounding), the
//!   transmit queue under txqueuelen, reassembly memory under ipfrag_high_thresh;
//! - once everything is closed and every timer has run, nothing is left held.
//!
//! Reproduce a crash with `TCP_CONN_DEBUG=1` to see the segments each way.
#![no_main]
use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use ustack_stack::tcp::State;
use ustack_stack::{Config, Error, Instant, Ipv4Cidr, Stack, TcpHandle};
use ustack_testkit::tcp::{Seg, build, parse};
use ustack_wire::tcp::Flags;

/// `TCP_CONN_DEBUG=1`: print every segment in and out, to follow a crash.
static DEBUG: LazyLock<bool> = LazyLock::new(|| std::env::var_os("TCP_CONN_DEBUG").is_some());

const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 40000);
/// Chunk rounding of the buffer pool (`ustack_stack::tcp::BUFFER_CHUNK`), twice.
const SLACK: usize = 2 * ustack_stack::tcp::BUFFER_CHUNK;

/// The peer's byte at absolute sequence number `seq`.
fn peer_byte(seq: u32) -> u8 {
    (seq.wrapping_mul(0x9E37_79B1) >> 24) as u8
}

/// The application's byte at stream offset `k`.
fn app_byte(k: u64) -> u8 {
    (k.wrapping_mul(31) ^ (k >> 9)) as u8
}

/// `a - b` in sequence space, as a signed distance.
fn diff(a: u32, b: u32) -> i64 {
    i64::from(a.wrapping_sub(b) as i32)
}

/// Reads the input, zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
}

/// What the test knows of the connection, from its own actions and the stack's segments.
#[derive(Default)]
struct Track {
    h: Option<TcpHandle>,
    /// The connection is gone (closed, reset, timed out): its checks end.
    over: bool,
    /// Our ISS (from the stack's SYN or SYN-ACK) and the peer's ISN it acknowledged.
    iss: Option<u32>,
    irs: Option<u32>,
    /// The highest sequence number the stack has sent (end of its segment), and the last
    /// acknowledgment number it sent.
    snd_max: Option<u32>,
    last_ack: Option<u32>,
    /// Ends (sequence number + length) of the peer's segments, absolute.
    peer_ends: Vec<u32>,
    written: u64,
    /// Bytes the application has read.
    read: u64,
    shut: bool,
    /// The application closed (or aborted) its handle: the connection may live on.
    closed: bool,
    /// Written minus the send queue, last seen.
    acked: u64,
    /// The highest stream offset (end) of data the stack has sent.
    sent: u64,
}

impl Track {
    /// The furthest the peer has sent, relative to IRS+1 (FIN included).
    fn peer_max(&self, irs: u32) -> i64 {
        self.peer_ends
            .iter()
            .map(|&e| diff(e, irs.wrapping_add(1)))
            .max()
            .unwrap_or(0)
    }
}

struct Harness {
    stack: Stack,
    now: Instant,
    port: u16,
    listener: Option<ustack_stack::ListenerHandle>,
    t: Track,
    ts_peer: u32,
}

impl Harness {
    fn send(&mut self, mut seg: Seg) {
        seg.src_port = PEER.port();
        seg.dst_port = self.port;
        if !seg.payload.is_empty() || seg.has(Flags::SYN) || seg.has(Flags::FIN) {
            self.t.peer_ends.push(seg.seq.wrapping_add(seg.len()));
        }
        if *DEBUG {
            eprintln!(
                "{:?} in {:?} seq {} ack {} len {} win {} mss {:?} ws {:?} sp {} ts {:?} sack {:?}",
                self.now,
                seg.flags,
                seg.seq,
                seg.ack,
                seg.payload.len(),
                seg.window,
                seg.mss,
                seg.wscale,
                seg.sack_perm,
                seg.ts,
                seg.sack
            );
        }
        let packet = build(&seg, *PEER.ip(), LOCAL);
        self.stack.receive(self.now, &packet);
    }

    /// Run the timers due up to `now + d`.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.stack.poll_timeout().filter(|t| *t <= end) {
            self.now = self.now.max(t);
            self.stack.handle_timeout(self.now);
            self.drain();
        }
        self.now = end;
    }

    /// Take every segment the stack has to send and check it.
    fn drain(&mut self) {
        while let Some(frame) = self.stack.poll_transmit(self.now) {
            let seg = parse(&frame).expect("the stack sends well-formed TCP/IPv4");
            if *DEBUG {
                eprintln!(
                    "{:?} out {:?} seq {} ack {} len {} win {}",
                    self.now,
                    seg.flags,
                    seg.seq,
                    seg.ack,
                    seg.payload.len(),
                    seg.window
                );
            }
            if seg.dst_port != PEER.port() || seg.src_port != self.port {
                continue;
            }
            self.check_segment(&seg);
        }
    }

    fn check_segment(&mut self, seg: &Seg) {
        let t = &mut self.t;
        if *DEBUG {
            eprintln!(
                "check: over {} iss {:?} irs {:?} h {:?} closed {}",
                t.over, t.iss, t.irs, t.h, t.closed
            );
        }
        if t.over {
            return;
        }
        if seg.has(Flags::RST) {
            // A reset from an orphan ends it (with a handle, `check_state` sees the end).
            t.over |= t.closed;
            return;
        }
        if seg.has(Flags::SYN) {
            // Before the connection is accepted, a new SYN-ACK (a new request after a
            // reset one) starts it over; after, a SYN with another ISS is a new
            // incarnation (the tracked one is gone).
            if t.iss.is_none() || (t.h.is_none() && !t.closed) {
                t.iss = Some(seg.seq);
                if seg.has(Flags::ACK) {
                    t.irs = Some(seg.ack.wrapping_sub(1));
                }
            } else if t.iss != Some(seg.seq)
                || (seg.has(Flags::ACK) && t.irs.is_some_and(|irs| seg.ack != irs.wrapping_add(1)))
            {
                t.over = true;
                return;
            } else if seg.has(Flags::ACK) && t.irs.is_none() {
                // Our SYN-ACK of a simultaneous open.
                t.irs = Some(seg.ack.wrapping_sub(1));
            }
        } else if seg.has(Flags::ACK) && t.irs.is_none() {
            t.irs = Some(seg.ack.wrapping_sub(1));
        }
        let end = seg.seq.wrapping_add(seg.len());
        t.snd_max = Some(match t.snd_max {
            Some(m) if diff(end, m) <= 0 => m,
            _ => end,
        });
        let Some(iss) = t.iss else { return };
        // Data: what the application wrote at that offset, nothing beyond.
        if !seg.payload.is_empty() {
            let off = diff(seg.seq, iss.wrapping_add(1));
            assert!(off >= 0, "data before ISS+1: {seg:?} (ISS {iss})");
            let off = off as u64;
            let end = off + seg.payload.len() as u64;
            assert!(
                end <= t.written,
                "data beyond what was written ({}): {seg:?}",
                t.written
            );
            for (i, b) in seg.payload.iter().enumerate() {
                assert_eq!(
                    *b,
                    app_byte(off + i as u64),
                    "byte {} of the stream sent wrong",
                    off + i as u64
                );
            }
            t.sent = t.sent.max(end);
        }
        if seg.has(Flags::FIN) {
            assert!(t.shut, "a FIN before the application shut down: {seg:?}");
            let at = diff(
                seg.seq.wrapping_add(seg.payload.len() as u32),
                iss.wrapping_add(1),
            );
            assert_eq!(
                at, t.written as i64,
                "the FIN right after the last byte: {seg:?}"
            );
        }
        if seg.has(Flags::ACK)
            && let Some(irs) = t.irs
        {
            let acked = diff(seg.ack, irs.wrapping_add(1));
            assert!(
                acked >= t.read as i64,
                "ACK {} below the {} bytes already read: {seg:?}",
                acked,
                t.read
            );
            assert!(
                acked <= t.peer_max(irs).max(0),
                "ACK {acked} of bytes the peer never sent (it sent {}): {seg:?}",
                t.peer_max(irs)
            );
            t.last_ack = Some(seg.ack);
        }
    }

    /// Invariants of the stack's state, after every step.
    fn check_state(&mut self) {
        let s = &self.stack;
        assert!(s.reassembly_mem() as u64 <= s.sysctl().ipfrag_high_thresh);
        assert!(s.tx_queue_len() as u64 <= s.sysctl().txqueuelen);
        let Some(h) = self.t.h else { return };
        if self.t.over {
            return;
        }
        let Ok(info) = s.tcp_info(h) else {
            self.t.over = true;
            return;
        };
        if info.state == State::Closed {
            self.t.over = true;
            return;
        }
        assert!(
            (info.rcv_wnd as i32) >= 0,
            "receive window {}",
            info.rcv_wnd
        );
        assert!((info.snd_wnd as i32) >= 0, "send window {}", info.snd_wnd);
        let sys = s.sysctl();
        let view = s
            .sockets(self.now)
            .into_iter()
            .find(|v| {
                v.remote == Some(PEER.into()) && v.local.port() == self.port && v.info.is_some()
            })
            .expect("the connection is listed");
        let (rmem, rcvbuf, wmem, sndbuf) = view.mem.expect("a connection's memory");
        assert!(rcvbuf as u64 <= sys.tcp_rmem_max, "rcvbuf {rcvbuf}");
        assert!(sndbuf as u64 <= sys.tcp_wmem_max, "sndbuf {sndbuf}");
        for (side, held, mem, buf) in [
            ("receive", info.recv_q, rmem, rcvbuf),
            ("send", info.send_q, wmem, sndbuf),
        ] {
            assert!(
                held <= buf,
                "{side}: {held} bytes held over its buffer {buf}"
            );
            assert!(
                mem <= 2 * buf + SLACK,
                "{side}: memory {mem} for a buffer of {buf}"
            );
        }
        // SND.UNA <= SND.NXT, and SND.UNA never goes back.
        let t = &mut self.t;
        let acked = t.written - info.send_q as u64;
        assert!(
            acked <= t.sent,
            "{acked} bytes acknowledged, {} sent",
            t.sent
        );
        assert!(
            acked >= t.acked,
            "SND.UNA went back: {acked} after {}",
            t.acked
        );
        t.acked = acked;
        // In-order bytes (read, or held to read) are bytes the peer sent.
        if let Some(irs) = t.irs {
            let in_order = (t.read + info.recv_q as u64) as i64;
            assert!(
                in_order <= t.peer_max(irs).max(0),
                "{in_order} bytes in order, the peer sent {} (IRS {irs}, read {}, ends {:?})",
                t.peer_max(irs),
                t.read,
                t.peer_ends
            );
        }
    }

    fn read(&mut self, max: usize) {
        let Some(h) = self.t.h else { return };
        let mut buf = vec![0u8; max.max(1)];
        match self.stack.tcp_recv(self.now, h, &mut buf) {
            Ok(n) => {
                if self.t.over {
                    return;
                }
                let irs = self
                    .t
                    .irs
                    .expect("data read before the stack acknowledged a SYN");
                for (i, b) in buf[..n].iter().enumerate() {
                    let seq = irs
                        .wrapping_add(1)
                        .wrapping_add((self.t.read + i as u64) as u32);
                    assert_eq!(
                        *b,
                        peer_byte(seq),
                        "byte {} read is not the peer's",
                        self.t.read + i as u64
                    );
                }
                self.t.read += n as u64;
            }
            Err(Error::WouldBlock) => {}
            Err(_) => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let mode = input.u8();
    let peer_isn = input.u32();
    let mut c = Config::ip(Ipv4Cidr::new(LOCAL, 24));
    c.seed = Some(7);
    c.gateway = Some(*PEER.ip());
    let mut h = Harness {
        stack: Stack::new(c),
        now: Instant::from_secs(1),
        port: 80,
        listener: None,
        t: Track::default(),
        ts_peer: 1,
    };
    if mode & 1 == 0 {
        h.listener = Some(
            h.stack
                .tcp_listen(SocketAddrV4::new(LOCAL, 80), 4)
                .expect("listen"),
        );
    } else {
        let now = h.now;
        let c = h.stack.tcp_connect(now, PEER).expect("connect");
        h.t.h = Some(c);
        let frame = h.stack.poll_transmit(now).expect("our SYN");
        let syn = parse(&frame).expect("a SYN");
        h.port = syn.src_port;
        h.check_segment(&syn);
    }
    let mut steps = 0;
    while !input.0.is_empty() && steps < 2000 {
        steps += 1;
        match input.u8() % 8 {
            0 | 1 => {
                let flags = Flags(input.u8());
                let seq_off = input.u16() as i16;
                let ack_off = input.u16() as i16;
                let window = input.u16();
                let opts = input.u8();
                let optval = input.u8();
                let len = usize::from(input.u16() % 3000);
                let base = h.t.last_ack.unwrap_or(peer_isn);
                let seq = base.wrapping_add(seq_off as i32 as u32);
                let ack = h.t.snd_max.unwrap_or(0).wrapping_add(ack_off as i32 as u32);
                let first = seq.wrapping_add(u32::from(flags.contains(Flags::SYN)));
                let payload: Vec<u8> = (0..len as u32)
                    .map(|i| peer_byte(first.wrapping_add(i)))
                    .collect();
                let mut seg = Seg {
                    flags,
                    seq,
                    ack,
                    window,
                    payload,
                    ..Seg::default()
                };
                if opts & 1 != 0 {
                    seg.mss = Some(u16::from(optval) * 8 + 48);
                }
                if opts & 2 != 0 {
                    seg.wscale = Some(optval & 15);
                }
                if opts & 4 != 0 {
                    seg.sack_perm = true;
                }
                if opts & 8 != 0 {
                    h.ts_peer = h.ts_peer.wrapping_add(u32::from(optval));
                    seg.ts = Some((h.ts_peer, u32::from(opts >> 4)));
                }
                if opts & 16 != 0 {
                    let top = h.t.snd_max.unwrap_or(0);
                    let hi = top.wrapping_sub(u32::from(optval & 15) * 500);
                    seg.sack = vec![(hi.wrapping_sub(u32::from(optval >> 4) * 700 + 1), hi)];
                }
                h.send(seg);
            }
            2 => {
                let ms = u64::from(input.u16()) * 4;
                h.advance(Duration::from_millis(ms));
            }
            3 => {
                let len = usize::from(input.u16());
                if let Some(c) = h.t.h {
                    let start = h.t.written;
                    let data: Vec<u8> = (0..len as u64).map(|i| app_byte(start + i)).collect();
                    let now = h.now;
                    if let Ok(n) = h.stack.tcp_send(now, c, &data) {
                        h.t.written += n as u64;
                    }
                }
            }
            4 => {
                let len = usize::from(input.u16());
                h.read(len);
            }
            5 => {
                if let Some(c) = h.t.h {
                    let now = h.now;
                    if h.stack
                        .tcp_shutdown(now, c, ustack_stack::Shutdown::Write)
                        .is_ok()
                    {
                        h.t.shut = true;
                    }
                }
            }
            6 => {
                if let Some(c) = h.t.h.take() {
                    let now = h.now;
                    let _ = if input.u8() & 1 == 0 {
                        h.stack.tcp_close(now, c)
                    } else {
                        h.stack.tcp_abort(now, c)
                    };
                    h.t.shut = true;
                    h.t.closed = true;
                }
            }
            _ => {
                // A bare ACK of everything the stack sent, at the stack's last ACK: the
                // peer keeping up, so that the fuzzer reaches the later states.
                let seq = h.t.last_ack.unwrap_or(peer_isn);
                let ack = h.t.snd_max.unwrap_or(0);
                let window = input.u16() | 0x100;
                h.send(Seg {
                    flags: Flags::ACK,
                    seq,
                    ack,
                    window,
                    ..Seg::default()
                });
            }
        }
        if h.t.h.is_none()
            && !h.t.over
            && !h.t.closed
            && let Some(l) = h.listener
            && let Ok((c, peer)) = h.stack.tcp_accept(l)
        {
            assert_eq!(peer, PEER);
            h.t.h = Some(c);
        }
        h.drain();
        h.check_state();
    }
    // Close everything and let every timer run out: nothing may be left held.
    let now = h.now;
    if let Some(c) = h.t.h.take() {
        let _ = h.stack.tcp_close(now, c);
    }
    if let Some(l) = h.listener.take() {
        while let Ok((c, _)) = h.stack.tcp_accept(l) {
            let _ = h.stack.tcp_close(now, c);
        }
        let _ = h.stack.tcp_close_listener(now, l);
    }
    h.t.over = true;
    for _ in 0..10_000 {
        match h.stack.poll_timeout() {
            Some(at) => {
                h.now = h.now.max(at);
                h.stack.handle_timeout(h.now);
                h.drain();
            }
            None => break,
        }
    }
    let r = h.stack.tcp_resources();
    if *DEBUG {
        eprintln!("{:?}", h.stack.sockets(h.now));
    }
    assert_eq!(
        (r.connections, r.requests, r.timewait, r.buffer_bytes),
        (0, 0, 0, 0),
        "TCP left {r:?}"
    );
});
