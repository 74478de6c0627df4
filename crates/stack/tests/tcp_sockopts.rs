//! Socket options of a TCP connection, as Linux has them: `SO_SNDBUF` and `SO_RCVBUF`
//! (doubled, clamped to `[SOCK_MIN_*BUF, 2 * tcp_*mem.max]`, and no longer autotuned once
//! set: `SOCK_SNDBUF_LOCK` / `SOCK_RCVBUF_LOCK`) and `SO_LINGER` (zero time: close is
//! an abort with a RST, RFC 9293 §3.10.5; otherwise the ordinary FIN close).

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::{SimConfig, SimLinkConfig};
use ustack_obs::Counter;
use ustack_stack::tcp::{SOCK_MIN_RCVBUF, SOCK_MIN_SNDBUF, State};
use ustack_stack::{Error, Instant, TcpHandle};
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_testkit::{B_IP, Pair};
use ustack_wire::tcp::Flags;

/// The peer's ISN in the segment-level tests.
const PEER_ISN: u32 = 1000;
/// Our window-scale shift with the default tcp_rmem.max (6 MiB).
const OUR_WSCALE: u8 = 7;

/// A connection accepted from the scripted peer (MSS 1000, window scale 7 both ways, a
/// 65535 << 7 window): the test, the handle and our ISS.
fn accepted(t: &mut SegTest) -> (TcpHandle, u32) {
    let (h, synack) = t.accept_with(Seg::syn(PEER_ISN).mss(1000).wscale(7), 65_535);
    (h, synack.seq)
}

/// Bytes queued on `h` until the send buffer refuses more (EAGAIN).
fn fill(t: &mut SegTest, h: TcpHandle) -> usize {
    let chunk = [7u8; 1 << 16];
    let mut taken = 0;
    loop {
        let now = t.now;
        match t.stack.tcp_send(now, h, &chunk) {
            Ok(n) => taken += n,
            Err(Error::WouldBlock) => return taken,
            Err(e) => panic!("tcp_send: {e:?}"),
        }
        assert!(taken < 1 << 26, "the send buffer never filled");
    }
}

/// Payload bytes among `segs`.
fn payload(segs: &[Seg]) -> usize {
    segs.iter().map(|s| s.payload.len()).sum()
}

/// Linux sock_setsockopt: min(val, max) * 2, at least SOCK_MIN_*BUF. ustack caps at
/// tcp_wmem.max / tcp_rmem.max (it has no net.core.wmem_max / rmem_max).
#[test]
fn buffer_sizes_are_doubled_and_clamped_like_linux() {
    let mut t = SegTest::listening(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.max", 100_000)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_rmem.max", 300_000)
        .unwrap();
    let (h, _) = accepted(&mut t);
    let s = &mut t.stack;
    // Before any SO_SNDBUF: tcp_wmem.default (16 KiB), grown as the connection became
    // established to two initial windows of the peer's 1000-byte MSS (Linux
    // tcp_init_buffer_space -> tcp_sndbuf_expand; ustack counts payload bytes only).
    assert_eq!(s.tcp_send_buffer(h), Ok(2 * 10 * 1000));
    assert!(2 * 10 * 1000 > s.sysctl().tcp_wmem_default);
    assert_eq!(
        s.tcp_recv_buffer(h),
        Ok(s.sysctl().tcp_rmem_default as usize)
    );
    s.tcp_set_send_buffer(h, 10_000).unwrap();
    s.tcp_set_recv_buffer(h, 10_000).unwrap();
    assert_eq!(s.tcp_send_buffer(h), Ok(20_000), "doubled");
    assert_eq!(s.tcp_recv_buffer(h), Ok(20_000), "doubled");
    for tiny in [0, 1, 1000] {
        s.tcp_set_send_buffer(h, tiny).unwrap();
        s.tcp_set_recv_buffer(h, tiny).unwrap();
        assert_eq!(s.tcp_send_buffer(h), Ok(SOCK_MIN_SNDBUF), "{tiny}");
        assert_eq!(s.tcp_recv_buffer(h), Ok(SOCK_MIN_RCVBUF), "{tiny}");
    }
    assert_eq!((SOCK_MIN_SNDBUF, SOCK_MIN_RCVBUF), (4608, 2304));
    for huge in [300_001, 1 << 30, usize::MAX] {
        s.tcp_set_send_buffer(h, huge).unwrap();
        s.tcp_set_recv_buffer(h, huge).unwrap();
        assert_eq!(s.tcp_send_buffer(h), Ok(200_000), "2 * tcp_wmem.max");
        assert_eq!(s.tcp_recv_buffer(h), Ok(600_000), "2 * tcp_rmem.max");
    }
    let now = t.now;
    t.stack.tcp_abort(now, h).unwrap();
    let s = &mut t.stack;
    assert_eq!(s.tcp_set_send_buffer(h, 1000), Err(Error::BadHandle));
    assert_eq!(s.tcp_set_recv_buffer(h, 1000), Err(Error::BadHandle));
    assert_eq!(s.tcp_send_buffer(h), Err(Error::BadHandle));
    assert_eq!(s.tcp_recv_buffer(h), Err(Error::BadHandle));
    assert_eq!(s.tcp_set_linger(h, None), Err(Error::BadHandle));
}

/// A small SO_SNDBUF bounds what tcp_send takes (EAGAIN after it), and the ACKs that
/// would let Linux's tcp_sndbuf_expand grow the buffer to two congestion windows do not
/// (tcp_should_expand_sndbuf: "If the user specified a specific send buffer setting, do
/// not modify it"). Without it, the same ACKs do grow it.
#[test]
fn a_set_send_buffer_bounds_writes_and_is_not_autotuned() {
    for locked in [false, true] {
        let mut t = SegTest::listening(80);
        let (h, iss) = accepted(&mut t);
        let default = t.stack.tcp_send_buffer(h).unwrap();
        if locked {
            t.stack.tcp_set_send_buffer(h, 3000).unwrap();
            assert_eq!(t.stack.tcp_send_buffer(h), Ok(6000));
        }
        let limit = t.stack.tcp_send_buffer(h).unwrap();
        assert_eq!(
            fill(&mut t, h),
            limit,
            "tcp_send takes the buffer's size, no more"
        );
        let sent = t.recv_all();
        let flight = payload(&sent);
        assert!(flight > 0 && flight <= limit);
        // The peer acknowledges everything sent: space frees, cwnd is not filled.
        t.send(Seg::ack(PEER_ISN + 1, iss.wrapping_add(1 + flight as u32)).win(65_535));
        let after = t.stack.tcp_send_buffer(h).unwrap();
        if locked {
            assert_eq!(after, 6000, "SOCK_SNDBUF_LOCK: not autotuned");
            assert_eq!(
                fill(&mut t, h),
                flight,
                "exactly the acknowledged bytes fit again"
            );
        } else {
            assert!(after > default, "autotuned: {after} <= {default}");
        }
        let now = t.now;
        t.stack.tcp_abort(now, h).unwrap();
        t.assert_released();
    }
}

/// SO_RCVBUF sets how far the window we offer may open: with tcp_rmem.default at 16 KiB
/// the connection offers the 16 KiB less what is queued. After SO_RCVBUF of 50000 (a
/// 100000-byte buffer) the window starts from the SYN-ACK's (16,060 = 11 x 1460) and grows
/// by two segments with each segment that arrives (Linux `rcv_ssthresh`,
/// `tcp_grow_window`), until it offers the free 100000 less what is queued (rounded up to
/// the window scale's unit).
#[test]
fn the_advertised_window_follows_so_rcvbuf() {
    for set in [false, true] {
        let mut t = SegTest::new(80);
        t.stack
            .set_sysctl("net.ipv4.tcp_rmem.default", 16_384)
            .unwrap();
        t.listen(8);
        let (h, iss) = accepted(&mut t);
        if set {
            t.stack.tcp_set_recv_buffer(h, 50_000).unwrap();
        }
        let buffer = t.stack.tcp_recv_buffer(h).unwrap() as u32;
        assert_eq!(buffer, if set { 100_000 } else { 16_384 });
        let unit = 1u32 << OUR_WSCALE;
        let full = (buffer - 1000).div_ceil(unit) * unit;
        // Data from the peer, read after each ACK (quick ACKs at the start).
        let mut windows = Vec::new();
        for k in 0..40u32 {
            t.send(
                Seg::ack(PEER_ISN + 1 + 1000 * k, iss.wrapping_add(1))
                    .win(65_535)
                    .data(&[1u8; 1000]),
            );
            // Past the delayed-ACK timer once the quick ACKs are spent.
            let got = t.advance(Duration::from_millis(300));
            let ack = got
                .iter()
                .map(|(_, s)| s)
                .find(|s| s.ack == PEER_ISN + 1 + 1000 * (k + 1))
                .expect("an ACK");
            windows.push(u32::from(ack.window) << OUR_WSCALE);
            assert_eq!(t.read(h), Some(vec![1u8; 1000]));
            if windows.last() == Some(&full) {
                break;
            }
        }
        let first = if set {
            (16_060 + 2 * 1460u32).div_ceil(unit) * unit
        } else {
            full
        };
        assert_eq!(windows[0], first, "set {set}: {windows:?}");
        assert!(
            windows.windows(2).all(|w| w[0] <= w[1]),
            "set {set}: {windows:?}"
        );
        assert_eq!(windows.last(), Some(&full), "set {set}: {windows:?}");
        let now = t.now;
        t.stack.tcp_abort(now, h).unwrap();
        t.assert_released();
    }
}

/// A bulk transfer A -> B over a path whose bandwidth-delay product (250 KB) is larger
/// than B's buffer, B reading as data comes: returns B's largest offered window and B's
/// buffer size at the end. `rcvbuf`: B's SO_RCVBUF, set right after accept, before any
/// data.
fn bulk_to_b(rcvbuf: Option<usize>) -> (u32, usize) {
    let link = SimConfig {
        delay: Duration::from_millis(10),
        rate_bps: Some(100_000_000),
        queue_limit_bytes: Some(256 * 1024),
        ..SimConfig::default()
    };
    let mut p = Pair::new(SimLinkConfig {
        seed: 3,
        a_to_b: link.clone(),
        b_to_a: link,
        ..SimLinkConfig::default()
    });
    p.a.set_sysctl("net.ipv4.tcp_wmem.default", 4 << 20)
        .unwrap();
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), 8).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))
            .unwrap();
    let mut b = None;
    p.run_until_cond(Duration::from_secs(5), |p| {
        b = p.b.tcp_accept(l).ok().map(|(h, _)| h);
        b.is_some()
    });
    let b = b.expect("accepted");
    assert_eq!(p.a.tcp_state(a), Ok(State::Established));
    if let Some(bytes) = rcvbuf {
        p.b.tcp_set_recv_buffer(b, bytes).unwrap();
    }
    let total = 2 << 20;
    let data = vec![5u8; total];
    let (mut sent, mut got, mut max_wnd) = (0, 0, 0);
    let mut buf = vec![0u8; 1 << 16];
    while got < total {
        let now = p.now;
        if sent < total
            && let Ok(n) = p.a.tcp_send(now, a, &data[sent..])
        {
            sent += n;
        }
        while let Ok(n) = p.b.tcp_recv(now, b, &mut buf) {
            assert!(n > 0);
            got += n;
        }
        max_wnd = max_wnd.max(p.b.tcp_info(b).unwrap().rcv_wnd);
        p.settle();
        let next = p.next_event().expect("the transfer stalled");
        assert!(next < Instant::from_secs(120), "too slow");
        p.now = next;
    }
    (max_wnd, p.b.tcp_recv_buffer(b).unwrap())
}

/// Receive-buffer autotuning (Linux tcp_rcv_space_adjust) grows the buffer of a reader
/// keeping up with a path whose BDP is above tcp_rmem.default, but not once SO_RCVBUF was
/// set (SOCK_RCVBUF_LOCK): the buffer stays at the doubled value and the window offered
/// never exceeds it.
#[test]
fn a_set_receive_buffer_is_not_autotuned() {
    let default = ustack_stack::Sysctl::default().tcp_rmem_default as usize;
    let (wnd, buffer) = bulk_to_b(None);
    assert!(buffer > default, "autotuned: {buffer} <= {default}");
    assert!(wnd as usize > default, "the window grew with it: {wnd}");
    let (wnd, buffer) = bulk_to_b(Some(48_000));
    assert_eq!(
        buffer, 96_000,
        "SOCK_RCVBUF_LOCK: the bulk read did not grow it"
    );
    assert!(
        wnd <= 96_000 + 127,
        "the window stays within SO_RCVBUF: {wnd}"
    );
}

/// SO_LINGER with zero time (Linux __tcp_close: "sock_flag(sk, SOCK_LINGER) &&
/// !sk->sk_lingertime" -> tcp_disconnect): close sends a RST at SND.NXT instead of a FIN,
/// queued data is discarded, counted TCPAbortOnData (and EstabResets, OutRsts), and
/// nothing is left held. Linger time is whole seconds, as struct linger's: 500 ms is 0.
#[test]
fn linger_zero_makes_close_an_abort() {
    for linger in [Duration::ZERO, Duration::from_millis(500)] {
        let mut t = SegTest::listening(80);
        let (h, iss) = accepted(&mut t);
        t.write(h, &[9u8; 3000]);
        let sent = payload(&t.recv_all());
        assert_eq!(sent, 3000);
        t.write(h, &[9u8; 5000]); // queued, then thrown away
        t.stack.tcp_set_linger(h, Some(linger)).unwrap();
        let now = t.now;
        t.stack.tcp_close(now, h).unwrap();
        let out = t.recv_all();
        let rsts: Vec<_> = out.iter().filter(|s| s.has(Flags::RST)).collect();
        assert_eq!(rsts.len(), 1, "{linger:?}: {out:?}");
        assert!(out.iter().all(|s| !s.has(Flags::FIN)), "no FIN: {out:?}");
        let rst = rsts[0];
        let snd_nxt = iss.wrapping_add(1 + payload(&out) as u32 + sent as u32);
        assert_eq!(rst.seq, snd_nxt, "the RST carries SND.NXT");
        let mib = t.stack.mib();
        assert_eq!(mib.get(Counter::TcpExtTCPAbortOnData), 1);
        assert_eq!(mib.get(Counter::TcpExtTCPAbortOnClose), 0);
        assert_eq!(mib.get(Counter::TcpOutRsts), 1);
        assert_eq!(mib.get(Counter::TcpEstabResets), 1);
        assert_eq!(mib.get(Counter::TcpCurrEstab), 0);
        assert_eq!(t.stack.tcp_state(h), Err(Error::BadHandle), "gone at once");
        // Connection and buffers go at once (timer-queue entries are cancelled lazily).
        let held = t.stack.tcp_resources();
        assert_eq!((held.connections, held.buffer_bytes), (0, 0), "{linger:?}");
        t.assert_released();
    }
}

/// Unread data is checked first (Linux: "Check zero linger _after_ checking for unread
/// data"): a RST counted TCPAbortOnClose, not TCPAbortOnData.
#[test]
fn unread_data_takes_precedence_over_linger_zero() {
    let mut t = SegTest::listening(80);
    let (h, iss) = accepted(&mut t);
    t.send(
        Seg::ack(PEER_ISN + 1, iss.wrapping_add(1))
            .win(65_535)
            .data(b"unread"),
    );
    t.recv_all();
    t.stack.tcp_set_linger(h, Some(Duration::ZERO)).unwrap();
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    assert!(t.recv_all().iter().any(|s| s.has(Flags::RST)));
    let mib = t.stack.mib();
    assert_eq!(mib.get(Counter::TcpExtTCPAbortOnClose), 1);
    assert_eq!(mib.get(Counter::TcpExtTCPAbortOnData), 0);
    t.assert_released();
}

/// A non-zero linger time (and linger turned off again after zero): close returns at
/// once -- ustack has no blocking close, as Linux's close of a non-blocking socket does
/// not wait -- and the connection finishes with the queued data and a FIN, not a RST.
#[test]
fn linger_with_time_closes_with_a_fin() {
    for linger in [Some(Duration::from_secs(5)), None] {
        let mut t = SegTest::listening(80);
        let (h, iss) = accepted(&mut t);
        t.stack.tcp_set_linger(h, Some(Duration::ZERO)).unwrap();
        t.stack.tcp_set_linger(h, linger).unwrap();
        t.write(h, &[4u8; 2000]);
        let now = t.now;
        t.stack.tcp_close(now, h).unwrap();
        let out = t.recv_all();
        assert!(out.iter().all(|s| !s.has(Flags::RST)), "{out:?}");
        assert_eq!(payload(&out), 2000, "the queued data goes out");
        let fin = out.iter().find(|s| s.has(Flags::FIN)).expect("a FIN");
        assert_eq!(
            fin.seq.wrapping_add(fin.payload.len() as u32),
            iss.wrapping_add(2001)
        );
        assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait1));
        // The peer acknowledges everything and closes its side.
        t.send(
            Seg::ack(PEER_ISN + 1, iss.wrapping_add(2002))
                .win(65_535)
                .fin(),
        );
        let ack = t.recv().expect("ACK of the peer's FIN");
        assert_eq!(ack.ack, PEER_ISN + 2);
        let mib = t.stack.mib();
        assert_eq!(mib.get(Counter::TcpExtTCPAbortOnData), 0);
        assert_eq!(mib.get(Counter::TcpOutRsts), 0);
        assert_eq!(mib.get(Counter::TcpEstabResets), 0);
        t.assert_released();
    }
}

/// `TCP_MAXSEG` on a listener (Linux `user_mss`, copied to its connections by
/// `sk_clone_lock`; `tcp_openreq_init_rwin` and `tcp_mss_clamp`): the SYN-ACK announces
/// 536 and the accepted connection sends 536-byte segments to a peer that announced 1460,
/// without the option being set again on it; `TCP_KEEPIDLE` likewise carries over. Out of
/// Linux's bounds is `EINVAL`.
#[test]
fn a_listeners_tcp_maxseg_and_keepidle_carry_over_to_its_connections() {
    use ustack_stack::TcpOpt;
    let mut t = SegTest::listening(80);
    let l = t.listener.unwrap();
    assert_eq!(
        t.stack.tcp_listener_set_opt(l, TcpOpt::MaxSeg, 87),
        Err(Error::InvalidArgument)
    );
    t.stack
        .tcp_listener_set_opt(l, TcpOpt::MaxSeg, 536)
        .unwrap();
    t.stack
        .tcp_listener_set_opt(l, TcpOpt::KeepIdle, 42)
        .unwrap();
    assert_eq!(t.stack.tcp_listener_opt(l, TcpOpt::MaxSeg), Ok(536));
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1460), 65_535);
    assert_eq!(synack.mss, Some(536), "{synack:?}");
    assert_eq!(t.stack.tcp_opt(h, TcpOpt::MaxSeg), Ok(536));
    assert_eq!(t.stack.tcp_opt(h, TcpOpt::KeepIdle), Ok(42));
    let now = t.now;
    assert_eq!(t.stack.tcp_send(now, h, &[7u8; 1000]), Ok(1000));
    let first = t.recv().expect("the first segment");
    assert_eq!(first.payload.len(), 536, "{first:?}");
    let second = t.recv().expect("the rest");
    assert_eq!(second.payload.len(), 464, "{second:?}");
}
