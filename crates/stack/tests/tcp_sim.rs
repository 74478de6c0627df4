//! TCP between two ustack stacks over `sim`: handshake, data, close, reset, loss.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_obs::Counter;
use ustack_stack::tcp::State;
use ustack_stack::{Error, TcpHandle, TcpResources};
use ustack_testkit::{B_IP, Pair};

const PORT: u16 = 80;

/// B listens; A connects; returns (A's handle, B's accepted handle).
fn connect(p: &mut Pair) -> (TcpHandle, TcpHandle) {
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, PORT), 128).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    let b = accept_established(p, l, a, Duration::from_secs(30));
    (a, b.expect("handshake completes"))
}

/// Run until B has accepted a connection and A's `a` is established (within `limit`):
/// B's handle.
fn accept_established(
    p: &mut Pair,
    l: ustack_stack::ListenerHandle,
    a: TcpHandle,
    limit: Duration,
) -> Option<TcpHandle> {
    let mut accepted = None;
    let ok = p.run_until_cond(limit, |p| {
        if accepted.is_none() {
            accepted = p.b.tcp_accept(l).ok();
        }
        accepted.is_some() && p.a.tcp_state(a) == Ok(State::Established)
    });
    accepted.filter(|_| ok).map(|(b, _)| b)
}

/// Move `data` from `from` to `to` over the pair, reading as it arrives. Returns what was read.
fn transfer(
    p: &mut Pair,
    from: Side,
    fh: TcpHandle,
    th: TcpHandle,
    data: &[u8],
    limit: Duration,
) -> Vec<u8> {
    let mut sent = 0;
    let mut got = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 65536];
    let deadline = p.now + limit;
    while got.len() < data.len() && p.now < deadline {
        let now = p.now;
        if sent < data.len()
            && let Ok(n) = p.stack(from).tcp_send(now, fh, &data[sent..])
        {
            sent += n;
        }
        p.settle();
        loop {
            let now = p.now;
            match p.stack(from.peer()).tcp_recv(now, th, &mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        let next = p.next_event().unwrap_or(p.now + Duration::from_millis(1));
        p.now = next.min(deadline);
    }
    got
}

/// `rounds` request-response exchanges of 64 bytes: A writes, B reads it and writes it
/// back, A reads it; each checked intact.
fn echo_rounds(p: &mut Pair, a: TcpHandle, b: TcpHandle, rounds: u8) {
    for round in 0..rounds {
        let msg = [round; 64];
        let got = transfer(p, Side::A, a, b, &msg, Duration::from_secs(5));
        assert_eq!(got, msg, "request {round}");
        let got = transfer(p, Side::B, b, a, &msg, Duration::from_secs(5));
        assert_eq!(got, msg, "reply {round}");
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn handshake_counts_and_negotiates_options() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    assert_eq!(p.b.tcp_state(b), Ok(State::Established));
    assert_eq!(p.a.mib().get(Counter::TcpActiveOpens), 1);
    assert_eq!(p.b.mib().get(Counter::TcpPassiveOpens), 1);
    assert_eq!(p.a.mib().get(Counter::TcpCurrEstab), 1);
    assert_eq!(p.b.mib().get(Counter::TcpCurrEstab), 1);
    let info = p.a.tcp_info(a).unwrap();
    assert!(
        info.sack && info.timestamps && info.wscale.is_some(),
        "{info:?}"
    );
    assert_eq!(info.mss, 1460 - 12, "MSS less the timestamp option");
}

/// Both ends size their send buffer as they become established (Linux
/// `tcp_init_buffer_space` -> `tcp_sndbuf_expand`): two initial windows of the MSS,
/// above `tcp_wmem.default`'s 16 KiB, before any write or ACK has found the writer out of
/// room.
#[test]
fn the_send_buffer_holds_two_initial_windows_once_established() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    for (side, h) in [(&p.a, a), (&p.b, b)] {
        let mss = side.tcp_info(h).unwrap().mss as usize;
        assert_eq!(side.tcp_send_buffer(h), Ok(2 * 10 * mss), "{h:?}");
    }
}

#[test]
fn data_both_ways_arrives_intact() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    let data = pattern(1 << 20);
    let got = transfer(&mut p, Side::A, a, b, &data, Duration::from_secs(60));
    assert_eq!(got.len(), data.len());
    assert!(got == data, "A->B stream intact");
    let data = pattern(300_000);
    let got = transfer(&mut p, Side::B, b, a, &data, Duration::from_secs(60));
    assert!(got == data, "B->A stream intact");
}

#[test]
fn in_order_data_takes_the_header_prediction_fast_path() {
    // A request-response exchange, the common case Linux's header prediction serves: every
    // data segment after the handshake arrives in order with an acceptable ACK, so each
    // one is counted TCPHPHits; the stream is intact all the same.
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    assert_eq!(p.b.mib().get(Counter::TcpExtTCPHPHits), 0);
    echo_rounds(&mut p, a, b, 10);
    assert_eq!(
        p.b.mib().get(Counter::TcpExtTCPHPHits),
        10,
        "requests predicted"
    );
    assert_eq!(
        p.a.mib().get(Counter::TcpExtTCPHPHits),
        10,
        "replies predicted"
    );
}

#[test]
fn an_echo_exchange_counts_its_acks_as_linux_does() {
    // Linux tcp_ack counts an ACK that advances SND.UNA on header prediction's path as
    // TCPHPAcks, and any other ACK that occupies no sequence space as TCPPureAcks. In a
    // request-response exchange every request acknowledges the previous reply and every
    // reply its request, all predicted: TCPHPAcks; the handshake's last ACK, processed
    // in SYN-RECEIVED by the slow path, is the one pure ACK.
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    let hp = |p: &Pair| {
        (
            p.a.mib().get(Counter::TcpExtTCPHPAcks),
            p.b.mib().get(Counter::TcpExtTCPHPAcks),
        )
    };
    let pure = |p: &Pair| {
        (
            p.a.mib().get(Counter::TcpExtTCPPureAcks),
            p.b.mib().get(Counter::TcpExtTCPPureAcks),
        )
    };
    assert_eq!(hp(&p), (0, 0));
    let pure_after_handshake = pure(&p);
    echo_rounds(&mut p, a, b, 10);
    assert_eq!(
        hp(&p),
        (10, 9),
        "A: each reply acknowledged its request; B: each request but the first the reply before"
    );
    assert_eq!(
        pure(&p),
        pure_after_handshake,
        "no pure ACK in the exchange"
    );
    // The last reply's ACK leaves on the delayed-ACK timer, a pure ACK advancing B's
    // SND.UNA: predicted, TCPHPAcks.
    p.run_for(Duration::from_secs(1));
    assert_eq!(hp(&p), (10, 10));
    assert_eq!(pure(&p), pure_after_handshake);
    assert_eq!(
        pure_after_handshake,
        (0, 1),
        "the handshake's final ACK, at B"
    );
}

#[test]
fn an_echo_exchange_measures_the_paths_round_trip() {
    // Each request and each reply is the only segment in flight, acknowledged whole by
    // the answer: every ACK is an RTT sample (RFC 6298 §2-3, from the echoed timestamp),
    // and the timer stops once it comes (§5.2). Connected over a path of no delay, then
    // 10 ms each way: SRTT moves from about 0 toward each sample, at least the path's
    // 20 ms, by 1/8 of the difference (RFC 6298 (2.3)): at least 20 ms * (1 - (7/8)^9)
    // after nine samples (B's first comes with the second request).
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    let before = p.a.tcp_info(a).unwrap().srtt.unwrap();
    assert!(before < Duration::from_millis(1), "{before:?}");
    let path = SimConfig {
        delay: Duration::from_millis(10),
        ..SimConfig::default()
    };
    p.link.set_config(Side::A, path.clone());
    p.link.set_config(Side::B, path);
    echo_rounds(&mut p, a, b, 10);
    // The last reply's ACK leaves on the delayed-ACK timer; then nothing is outstanding.
    p.run_for(Duration::from_secs(10));
    let floor = 20.0 * (1.0 - (7.0f64 / 8.0).powi(9));
    for (side, info) in [
        ("A", p.a.tcp_info(a).unwrap()),
        ("B", p.b.tcp_info(b).unwrap()),
    ] {
        let srtt = info.srtt.unwrap().as_secs_f64() * 1e3;
        assert!(
            srtt > floor,
            "{side}: SRTT {srtt} ms, at least {floor} expected"
        );
        // RFC 6298 (2.3) with Linux's floor: SRTT + max(4 RTTVAR, 200 ms), in whole µs.
        let rto_floor = Duration::from_millis(200) + info.srtt.unwrap() - Duration::from_micros(1);
        assert!(info.rto >= rto_floor, "{side}: {info:?}");
        assert_eq!((info.unacked, info.retransmits), (0, 0), "{side}");
    }
    // And nothing was retransmitted.
    assert_eq!(p.a.mib().get(Counter::TcpRetransSegs), 0);
    assert_eq!(p.b.mib().get(Counter::TcpRetransSegs), 0);
}

#[test]
fn connect_to_closed_port_is_refused() {
    let mut p = Pair::new(SimLinkConfig::default());
    let a = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 9)).unwrap();
    p.run_for(Duration::from_secs(1));
    assert_eq!(p.a.tcp_state(a), Ok(State::Closed));
    let mut buf = [0u8; 4];
    let now = p.now;
    assert_eq!(
        p.a.tcp_recv(now, a, &mut buf),
        Err(Error::ConnectionRefused)
    );
    assert_eq!(p.a.mib().get(Counter::TcpAttemptFails), 1);
    assert_eq!(p.b.mib().get(Counter::TcpOutRsts), 1);
}

#[test]
fn orderly_close_goes_through_time_wait_and_leaks_nothing() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (a, b) = connect(&mut p);
    let now = p.now;
    p.a.tcp_send(now, a, b"bye").unwrap();
    p.a.tcp_close(now, a).unwrap();
    p.run_for(Duration::from_millis(100));
    let mut buf = [0u8; 16];
    let now = p.now;
    assert_eq!(p.b.tcp_recv(now, b, &mut buf), Ok(3));
    assert_eq!(p.b.tcp_recv(now, b, &mut buf), Ok(0), "EOF after the FIN");
    assert_eq!(p.b.tcp_state(b), Ok(State::CloseWait));
    p.b.tcp_close(now, b).unwrap();
    p.run_for(Duration::from_millis(100));
    assert_eq!(
        p.a.tcp_resources().timewait,
        1,
        "the active closer holds TIME-WAIT"
    );
    // Nothing left, not even a timer entry: the wheel's entry goes with the connection
    // (Linux tcp_done clears its timers).
    assert_eq!(p.b.tcp_resources(), TcpResources::default());
    p.run_for(Duration::from_secs(61));
    for s in [&p.a, &p.b] {
        let r = s.tcp_resources();
        assert_eq!(
            (r.connections, r.timewait, r.requests, r.buffer_bytes),
            (0, 0, 0, 0),
            "{r:?}"
        );
        assert_eq!(s.mib().get(Counter::TcpCurrEstab), 0);
    }
    assert_eq!(p.a.mib().get(Counter::TcpExtTW), 1);
}

#[test]
fn bulk_transfer_survives_loss_both_ways() {
    for seed in 1..=3 {
        let mut p = Pair::new(SimLinkConfig {
            seed,
            ..SimLinkConfig::default()
        });
        let (a, b) = connect(&mut p);
        let lossy = SimConfig {
            loss: 0.05,
            delay: Duration::from_millis(5),
            ..SimConfig::default()
        };
        p.link.set_config(Side::A, lossy.clone());
        p.link.set_config(Side::B, lossy);
        let data = pattern(500_000);
        let got = transfer(&mut p, Side::A, a, b, &data, Duration::from_secs(300));
        assert_eq!(got.len(), data.len(), "seed {seed}: all bytes arrived");
        assert!(got == data, "seed {seed}: intact");
        assert!(p.a.mib().get(Counter::TcpRetransSegs) > 0);
    }
}

/// Connect A to B from local port `port`, move `data` A->B, then close with `first`
/// closing first and the other side closing as soon as it reads the EOF; then reconnect
/// from the same port at the first instant the client's stack lets the tuple go (what
/// `ShardContext::connect`'s deterministic port search does). The new connection.
fn close_and_reconnect_at_once(
    p: &mut Pair,
    l: ustack_stack::ListenerHandle,
    port: u16,
    first: Side,
) -> Option<TcpHandle> {
    let remote = SocketAddrV4::new(B_IP, PORT);
    let now = p.now;
    let a = p.a.tcp_connect_from(now, port, remote).unwrap();
    let b = accept_established(p, l, a, Duration::from_secs(30)).expect("handshake");
    let data = pattern(20_000);
    let got = transfer(p, Side::A, a, b, &data, Duration::from_secs(10));
    assert_eq!(got.len(), data.len());
    let (fh, sh) = match first {
        Side::A => (a, b),
        Side::B => (b, a),
    };
    let now = p.now;
    p.stack(first).tcp_close(now, fh).unwrap();
    let mut buf = [0u8; 64];
    let mut closed = false;
    let mut again = None;
    p.run_until_cond(Duration::from_secs(5), |p| {
        let now = p.now;
        if !closed && p.stack(first.peer()).tcp_recv(now, sh, &mut buf) == Ok(0) {
            p.stack(first.peer()).tcp_close(now, sh).unwrap();
            closed = true;
        }
        if closed && again.is_none() {
            again = p.a.tcp_connect_from(now, port, remote).ok();
        }
        again.is_some()
    });
    again
}

/// The reported reconnect bug: a client that reconnects at once from the same local port
/// must get a connection whichever side closed first. Client first: its own TIME-WAIT
/// holds the tuple, so `tcp_connect_from` refuses the port (Linux
/// `__inet_check_established` without `tcp_tw_reuse`) and a port search moves on. Server
/// first: the server's TIME-WAIT must take the new SYN (RFC 9293 §3.10.7.4, RFC 6191,
/// Linux `tcp_timewait_state_process` TCP_TW_SYN): the client's new ISN or TSval is above
/// the old incarnation's. With no delay at all (the sim's time stands still while 20 KB
/// go by), neither is newer: the TIME-WAIT answers with an ACK, the client resets it
/// (assassinating the record, Linux `tcp_rfc1337` = 0) and the SYN's retransmission 1 s
/// later establishes, as between two Linux hosts; `ShardContext::connect` avoids this by
/// moving its port search on (`Rss::pick_local_port`'s `perturb`). Catches: a TIME-WAIT
/// that refuses a newer SYN, or a stale tuple that never recovers.
#[test]
fn reconnecting_at_once_from_the_same_port_establishes() {
    for delay in [Duration::ZERO, Duration::from_millis(5)] {
        for first in [Side::B, Side::A] {
            let mut p = Pair::new(SimLinkConfig::default());
            let cfg = SimConfig {
                delay,
                ..SimConfig::default()
            };
            p.link.set_config(Side::A, cfg.clone());
            p.link.set_config(Side::B, cfg);
            let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, PORT), 128).unwrap();
            let again = close_and_reconnect_at_once(&mut p, l, 40_000, first);
            let Some(a) = again else {
                assert_eq!(
                    first,
                    Side::A,
                    "only the client's own TIME-WAIT holds the port"
                );
                assert_eq!(p.a.tcp_resources().timewait, 1);
                continue;
            };
            let b = accept_established(&mut p, l, a, Duration::from_secs(3));
            assert!(
                b.is_some(),
                "{first:?} closed first, delay {delay:?}: A {:?}, A retrans {}, A RSTs {}, B attempt fails {}",
                p.a.tcp_state(a),
                p.a.mib().get(Counter::TcpRetransSegs),
                p.a.mib().get(Counter::TcpOutRsts),
                p.b.mib().get(Counter::TcpAttemptFails)
            );
            assert_eq!(p.b.mib().get(Counter::TcpAttemptFails), 0);
            if delay > Duration::ZERO {
                // The new SYN's TSval is newer than the old incarnation's: the server's
                // TIME-WAIT hands it to the listener, no ACK-RST exchange, no retransmission.
                let m = p.a.mib();
                assert_eq!(
                    (m.get(Counter::TcpOutRsts), m.get(Counter::TcpRetransSegs)),
                    (0, 0),
                    "{first:?} closed first, delay {delay:?}"
                );
            }
        }
    }
}
