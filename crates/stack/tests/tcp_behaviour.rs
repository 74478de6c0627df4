//! TCP behaviour over time, segment by segment: keepalive, zero-window probing, Nagle,
//! half-close, simultaneous close, FIN-WAIT-2 timeout, SYN-SENT, window scaling, MSS,
//! TIME-WAIT reuse and listener drop accounting. The test plays the peer ([`SegTest`]) on
//! a virtual clock; each test names the RFC rule (or the Linux function) it checks, and
//! every scenario ends with the leak check of issue #3 ([`SegTest::assert_released`]).

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_obs::{Counter, DropReason};
use ustack_stack::tcp::State;
use ustack_stack::{Error, Shutdown, TcpHandle, TcpResources};
use ustack_testkit::tcp::{LOCAL_IP, PEER, Seg, SegTest, build};
use ustack_testkit::{B_IP, Pair};
use ustack_wire::tcp::Flags;

const SEC: Duration = Duration::from_secs(1);

/// A passive open from peer ISN 1000 (MSS 1000, no other options) completed with a
/// 65535-byte window; returns (handle, our ISS).
fn open(t: &mut SegTest) -> (TcpHandle, u32) {
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 65_535);
    (h, synack.seq)
}

/// Finish a connection the test still holds: close it, answer its FIN and let TIME-WAIT
/// run out. `peer_seq` is the peer's next sequence number.
fn close_cleanly(t: &mut SegTest, h: TcpHandle, peer_seq: u32) {
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("our FIN");
    assert!(fin.has(Flags::FIN), "{fin:?}");
    t.send(Seg::ack(peer_seq, fin.seq.wrapping_add(1)).fin());
    let ack = t.recv().expect("ACK of the peer's FIN");
    assert_eq!(ack.ack, peer_seq.wrapping_add(1));
}

/// The data segments the stack sends for `total` bytes, the peer acknowledging each
/// burst with window `window` (and echoing timestamps when `ts`). Returns the segments.
fn collect_data(t: &mut SegTest, total: usize, peer_seq: u32, window: u16, ts: bool) -> Vec<Seg> {
    let mut got = Vec::new();
    let mut bytes = 0;
    let mut rounds = 0;
    while bytes < total {
        rounds += 1;
        assert!(rounds < 100, "only {bytes} of {total} bytes sent");
        let burst = t.recv_all();
        let Some(last) = burst.iter().rev().find(|s| !s.payload.is_empty()).cloned() else {
            // Nothing sendable now: let a timer (delayed send, RTO) run.
            t.advance(Duration::from_millis(300));
            continue;
        };
        for s in burst.into_iter().filter(|s| !s.payload.is_empty()) {
            bytes += s.payload.len();
            got.push(s);
        }
        let mut ack =
            Seg::ack(peer_seq, last.seq.wrapping_add(last.payload.len() as u32)).win(window);
        if ts {
            ack = ack.ts(7, last.ts.expect("timestamps on every segment").0);
        }
        t.send(ack);
    }
    got
}

// ---- keepalive --------------------------------------------------------------------------

/// RFC 9293 §3.8.4 (keep-alives: "MUST default to no less than two hours", sent only after
/// an idle interval; an unanswered one is not by itself a reason to abort) with Linux's
/// `tcp_keepalive_timer`: the first probe after `tcp_keepalive_time` of silence, with
/// SEQ = SND.UNA - 1 and no data (`tcp_xmit_probe_skb`) so that the peer must answer; an
/// answer restarts the idle period, however many probes came before; then
/// `tcp_keepalive_probes` unanswered probes `tcp_keepalive_intvl` apart, and at the next
/// interval the connection fails with ETIMEDOUT (TCPKeepAlive per probe, TCPAbortOnTimeout).
#[test]
fn keepalive_probes_after_idle_and_aborts_when_unanswered() {
    let mut t = SegTest::listening(80);
    assert_eq!(
        t.stack.sysctl().tcp_keepalive_time,
        7200,
        "RFC 9293 §3.8.4: the idle time MUST default to no less than two hours"
    );
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_time", 60)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_intvl", 10)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_probes", 3)
        .unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_set_keepalive(now, h, true).unwrap();
    let start = t.now;
    assert_eq!(t.advance(59 * SEC), vec![], "nothing before the idle time");
    // Four probes in a row, each answered: more than tcp_keepalive_probes, and the
    // connection stays, because every answer restarts the idle time.
    for round in 1..=4u64 {
        let (at, probe) = t.next_seg(120 * SEC).expect("a keepalive probe");
        assert_eq!(at - start, Duration::from_secs(60 * round), "probe {round}");
        assert!(
            probe.flags == Flags::ACK && probe.payload.is_empty(),
            "a bare ACK: {probe:?}"
        );
        assert_eq!(probe.seq, iss, "SEQ = SND.UNA - 1 (SND.UNA = ISS + 1)");
        assert_eq!(probe.ack, 1001);
        // The peer's answer: SEQ is out of window for it, so it ACKs with its own SND.NXT.
        t.send(Seg::ack(1001, iss.wrapping_add(1)));
        assert_eq!(t.recv(), None, "the answer itself is not answered");
    }
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    // Now silence: probes at +60, +70, +80 after the last answer, failure at +90.
    let quiet = t.now;
    let sent = t.advance(200 * SEC);
    let probes: Vec<u64> = sent
        .iter()
        .filter(|(_, s)| s.flags == Flags::ACK && s.seq == iss)
        .map(|(at, _)| (*at - quiet).as_secs())
        .collect();
    assert_eq!(
        probes,
        [60, 70, 80],
        "tcp_keepalive_probes probes, intvl apart"
    );
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let now = t.now;
    let mut buf = [0u8; 4];
    assert_eq!(t.stack.tcp_recv(now, h, &mut buf), Err(Error::TimedOut));
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPKeepAlive), 4 + 3);
    assert_eq!(m.get(Counter::TcpExtTCPAbortOnTimeout), 1);
    assert_eq!(m.get(Counter::TcpEstabResets), 1, "ESTABLISHED -> CLOSED");
    assert_eq!(m.get(Counter::TcpCurrEstab), 0);
    t.stack.tcp_close(now, h).unwrap();
    t.assert_released();
}

/// Linux `tcp_keepalive_timer`: when the probes run out it calls
/// `tcp_send_active_reset` before `tcp_write_err`, so the peer (if it is only silent, not
/// gone) learns that the connection is over: a RST with SEQ = SND.NXT.
#[test]
fn keepalive_timeout_resets_the_peer() {
    let mut t = SegTest::listening(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_time", 60)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_intvl", 10)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_keepalive_probes", 2)
        .unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_set_keepalive(now, h, true).unwrap();
    let sent = t.advance(100 * SEC);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let last = &sent.last().expect("segments").1;
    assert!(
        last.has(Flags::RST) && last.seq == iss.wrapping_add(1),
        "a RST ends it: {sent:?}"
    );
}

/// Keepalive is off by default (RFC 9293 §3.8.4: "Keep-alive packets MUST only be sent
/// when the application requests them"): an idle connection sends nothing for hours.
#[test]
fn no_keepalive_unless_asked() {
    let mut t = SegTest::listening(80);
    let (h, _) = open(&mut t);
    assert_eq!(t.advance(Duration::from_secs(5 * 3600)), vec![]);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    close_cleanly(&mut t, h, 1001);
    t.assert_released();
}

// ---- zero window ------------------------------------------------------------------------

/// RFC 9293 §3.8.6.1: a sender facing a zero window "MUST regularly retransmit to the
/// receiver" a probe (MUST-36), the first after one RTO and then "SHOULD increase
/// exponentially the interval between successive probes" (SHLD-29, SHLD-30). Linux
/// `tcp_probe_timer`/`tcp_send_probe0`: a bare ACK with SEQ = SND.UNA - 1, the interval
/// doubling, TCPWinProbe per probe. When the window opens, the data flows at once.
#[test]
fn zero_window_probes_back_off_and_data_flows_when_it_opens() {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 0);
    let iss = synack.seq;
    assert_eq!(t.write(h, &[7u8; 3000]), 3000);
    assert_eq!(t.recv(), None, "nothing may be sent into a zero window");
    let start = t.now;
    let mut times = Vec::new();
    for _ in 0..5 {
        let (at, probe) = t.next_seg(300 * SEC).expect("a window probe");
        assert!(
            probe.flags == Flags::ACK && probe.payload.is_empty() && probe.seq == iss,
            "a bare ACK at SND.UNA - 1: {probe:?}"
        );
        times.push((at - start).as_millis() as u64);
        // The receiver answers, still with a zero window.
        t.send(Seg::ack(1001, iss.wrapping_add(1)).win(0));
        assert_eq!(t.recv(), None);
    }
    // RTO is 200 ms (the handshake's RTT sample, Linux tcp_synack_rtt_meas, puts it at
    // the floor): probes at 0.2, 0.6, 1.4, 3, 6.2 s.
    assert_eq!(times, [200, 600, 1400, 3000, 6200], "exponential backoff");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPWinProbe), 5);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    // The window opens (a window update): the data goes at once, in MSS-sized segments.
    t.send(Seg::ack(1001, iss.wrapping_add(1)).win(65_535));
    let data = t.recv_all();
    assert_eq!(
        data.iter()
            .map(|s| (s.seq.wrapping_sub(iss), s.payload.len()))
            .collect::<Vec<_>>(),
        [(1, 1000), (1001, 1000), (2001, 1000)]
    );
    t.send(Seg::ack(1001, iss.wrapping_add(3001)));
    assert_eq!(t.stack.tcp_info(h).unwrap().send_q, 0);
    close_cleanly(&mut t, h, 1001);
    t.assert_released();
}

/// RFC 9293 §3.8.6.1: "A TCP implementation MUST NOT close the connection as long as the
/// receiving TCP continues to send acknowledgments in response to the probe segments"
/// (MUST-37? RFC 1122 §4.2.2.17). Linux `tcp_ack` clears `icsk_probes_out` on every
/// acceptable ACK, so `tcp_retries2` only counts unanswered probes.
#[test]
fn answered_zero_window_probes_never_time_out() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_retries2", 3).unwrap();
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 0);
    let iss = synack.seq;
    t.write(h, b"waiting");
    for i in 0..8 {
        let (_, probe) = t.next_seg(600 * SEC).expect("a window probe");
        assert_eq!(probe.seq, iss, "probe {i}: {probe:?}");
        t.send(Seg::ack(1001, iss.wrapping_add(1)).win(0));
    }
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
}

/// Unanswered zero-window probes (Linux `tcp_probe_timer`: `icsk_probes_out >=
/// tcp_retries2`) end the connection with ETIMEDOUT and TCPAbortOnTimeout.
#[test]
fn unanswered_zero_window_probes_time_out() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_retries2", 3).unwrap();
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 0);
    let iss = synack.seq;
    t.write(h, b"waiting");
    let start = t.now;
    let sent = t.advance(120 * SEC);
    let probes: Vec<u64> = sent
        .iter()
        .filter(|(_, s)| s.seq == iss && s.payload.is_empty())
        .map(|(at, _)| (*at - start).as_millis() as u64)
        .collect();
    // The RTO is 200 ms from the handshake's RTT sample, doubling per probe.
    assert_eq!(probes, [200, 600, 1400], "tcp_retries2 probes");
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let now = t.now;
    let mut buf = [0u8; 4];
    assert_eq!(t.stack.tcp_recv(now, h, &mut buf), Err(Error::TimedOut));
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPAbortOnTimeout), 1);
    t.stack.tcp_close(now, h).unwrap();
    t.assert_released();
}

/// Linux `tcp_ack_probe`: "If this ack opens up a zero window, clear backoff. It was being
/// used to time the probes, and is probably far higher than it needs to be for normal
/// retransmission." After five probes the backoff is 32x; data sent once the window opens
/// must be retransmitted after one RTO (200 ms here, from the handshake's RTT sample;
/// RFC 6298 §5.1), not after 6.4 s.
#[test]
fn window_opening_clears_the_probe_backoff() {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(1000).mss(1000), 0);
    let iss = synack.seq;
    t.write(h, b"payload");
    for _ in 0..5 {
        t.next_seg(300 * SEC).expect("a window probe");
        t.send(Seg::ack(1001, iss.wrapping_add(1)).win(0));
    }
    t.send(Seg::ack(1001, iss.wrapping_add(1)).win(65_535));
    let sent_at = t.now;
    let first = t.recv().expect("the data");
    assert_eq!(first.payload, b"payload");
    let (at, again) = t.next_seg(120 * SEC).expect("a retransmission");
    assert_eq!(again.payload, b"payload");
    assert_eq!(
        at - sent_at,
        Duration::from_millis(200),
        "one un-backed-off RTO"
    );
}

// ---- Nagle ------------------------------------------------------------------------------

/// RFC 9293 §3.7.4 (Nagle, SHLD-7): "if there is unacknowledged data (i.e., SND.NXT >
/// SND.UNA), then the sending TCP endpoint buffers all user data ... until the
/// outstanding data has been acknowledged or until the TCP endpoint can send a
/// full-sized segment". TCP_NODELAY (MUST-... "a TCP implementation MUST include a
/// support for an application to disable the Nagle algorithm", MUST-17) sends each
/// write at once.
#[test]
fn nagle_coalesces_small_writes_nodelay_does_not() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let una = |n: u32| iss.wrapping_add(1).wrapping_add(n);
    t.write(h, b"a");
    let a = t
        .recv()
        .expect("the first small write goes: nothing is unacknowledged");
    assert_eq!((a.seq, &a.payload[..]), (una(0), &b"a"[..]));
    t.write(h, b"b");
    t.write(h, b"c");
    assert_eq!(t.recv(), None, "held while 'a' is unacknowledged");
    // Held for as long as it takes: Nagle has no timer (less than an RTO, 200 ms here,
    // so that no retransmission of 'a' comes either).
    assert_eq!(t.advance(Duration::from_millis(150)), vec![]);
    t.send(Seg::ack(1001, una(1)));
    let bc = t.recv_all();
    assert_eq!(bc.len(), 1, "{bc:?}");
    assert_eq!((bc[0].seq, &bc[0].payload[..]), (una(1), &b"bc"[..]));
    // A full-sized segment goes even with data outstanding; the remainder waits.
    t.write(h, &[b'd'; 1010]);
    let full = t.recv_all();
    assert_eq!(
        full.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
        [1000],
        "one MSS, the 10-byte tail held"
    );
    t.send(Seg::ack(1001, una(1003)));
    let tail = t.recv_all();
    assert_eq!(
        tail.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
        [10]
    );
    t.send(Seg::ack(1001, una(1013)));
    // TCP_NODELAY: every write goes at once, unacknowledged data or not.
    let now = t.now;
    t.stack.tcp_set_nodelay(now, h, true).unwrap();
    for b in [b"x", b"y", b"z"] {
        t.write(h, b);
        let s = t.recv().expect("sent at once with TCP_NODELAY");
        assert_eq!(s.payload, b);
    }
    assert_eq!(
        t.stack.tcp_info(h).unwrap().send_q,
        3,
        "all three outstanding"
    );
    t.send(Seg::ack(1001, una(1016)));
    close_cleanly(&mut t, h, 1001);
    t.assert_released();
}

// ---- receive window ------------------------------------------------------------------------

/// RFC 9293 §3.8.6.2.2 (receiver silly window avoidance: announce the window only when
/// it moves right by min(RCV.BUFF/2, Eff.snd.MSS)) and Linux `tcp_cleanup_rbuf` (a read
/// sends an ACK only if the new window is at least twice the current one). Without window
/// scaling the window field tops out at 65535: with a 128 KiB buffer a read of a few
/// bytes cannot change what we advertise, so it must not send a (duplicate) ACK.
#[test]
fn reading_sends_no_useless_window_update() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    t.send(Seg::ack(1001, iss.wrapping_add(1)).data(&[9u8; 500]));
    let a = t.recv().expect("ACK");
    // 65535 rounded down to the peer's 1000-byte MSS (Linux __tcp_select_window without
    // scaling: "window = rounddown(free_space, mss)").
    assert_eq!((a.ack, a.window), (1501, 65_000));
    assert_eq!(t.read(h).map(|d| d.len()), Some(500));
    assert_eq!(
        t.recv_all(),
        vec![],
        "the window is still 65535 at 1501: nothing new to say"
    );
}

// ---- half-close ---------------------------------------------------------------------------

/// RFC 9293 §3.10.4 CLOSE in ESTABLISHED and §3.6 ("the user who CLOSEs may continue to
/// RECEIVE until the TCP receiver is told that the remote side has CLOSED too"):
/// shutdown(SHUT_WR) sends our FIN (FIN-WAIT-1, then FIN-WAIT-2 once acknowledged);
/// writing fails with EPIPE; the peer's data is still delivered and acknowledged; its FIN
/// is end of stream (read returns 0, and keeps returning 0), after the data before it.
#[test]
fn shutdown_write_keeps_receiving_until_the_peers_fin() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    let fin = t.recv().expect("our FIN");
    assert!(
        fin.has(Flags::FIN | Flags::ACK)
            && fin.payload.is_empty()
            && fin.seq == iss.wrapping_add(1)
    );
    assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait1));
    assert_eq!(t.stack.tcp_send(now, h, b"x"), Err(Error::BrokenPipe));
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait2));
    assert_eq!(t.read(h), Some(vec![]), "nothing yet, not end of stream");
    t.send(Seg::ack(1001, iss.wrapping_add(2)).data(b"hello"));
    let a = t.recv().expect("data acknowledged");
    assert_eq!(a.ack, 1006);
    assert_eq!(t.read(h), Some(b"hello".to_vec()));
    // (Reading may send a window update; see `reading_sends_no_useless_window_update`.)
    t.recv_all();
    t.send(Seg::ack(1006, iss.wrapping_add(2)).data(b", world").fin());
    let a = t.recv().expect("data and FIN acknowledged");
    assert_eq!(a.ack, 1006 + 7 + 1);
    assert_eq!(
        t.stack.tcp_resources().timewait,
        1,
        "FIN-WAIT-2 + FIN -> TIME-WAIT"
    );
    assert_eq!(
        t.read(h),
        Some(b", world".to_vec()),
        "data before the FIN first"
    );
    assert_eq!(t.read(h), None, "then end of stream");
    assert_eq!(t.read(h), None, "and again");
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    assert_eq!(t.recv(), None, "closing after TIME-WAIT sends nothing");
    t.assert_released();
    assert_eq!(t.stack.mib().get(Counter::TcpExtTW), 1);
}

/// The other half (RFC 9293 §3.10.7.4 eighth step, CLOSE-WAIT): after the peer's FIN we
/// read end of stream but may go on sending; our close then sends FIN (LAST-ACK), and its
/// ACK deletes the connection without TIME-WAIT.
#[test]
fn peer_half_close_we_keep_writing() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    t.send(
        Seg::ack(1001, iss.wrapping_add(1))
            .data(b"last words")
            .fin(),
    );
    assert_eq!(t.recv().expect("ACK").ack, 1012);
    assert_eq!(t.stack.tcp_state(h), Ok(State::CloseWait));
    assert_eq!(t.read(h), Some(b"last words".to_vec()));
    assert_eq!(t.read(h), None);
    t.write(h, b"reply");
    let d = t.recv().expect("we still send");
    assert_eq!(
        (d.seq, &d.payload[..]),
        (iss.wrapping_add(1), &b"reply"[..])
    );
    t.send(Seg::ack(1012, iss.wrapping_add(6)));
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("FIN");
    assert!(fin.has(Flags::FIN) && fin.seq == iss.wrapping_add(6));
    assert_eq!(t.stack.tcp_resources().connections, 1, "LAST-ACK");
    t.send(Seg::ack(1012, iss.wrapping_add(7)));
    assert_eq!(t.stack.tcp_resources().connections, 0);
    assert_eq!(
        t.stack.tcp_resources().timewait,
        0,
        "the passive closer skips TIME-WAIT"
    );
    t.assert_released();
}

/// RFC 1122 §4.2.2.13 / RFC 9293 §3.10.4: "If such a host issues a CLOSE call while
/// received data is still pending in TCP ... its TCP SHOULD send a RST to show that data
/// was lost"; Linux `tcp_close` counts TCPAbortOnClose and sends the RST at SND.NXT. A
/// shutdown(SHUT_RD) alone sends nothing (Linux only marks the socket); the close after it
/// does the same as a plain close.
#[test]
fn close_with_unread_data_resets() {
    for shut_rd_first in [false, true] {
        let mut t = SegTest::listening(80);
        let (h, iss) = open(&mut t);
        t.send(Seg::ack(1001, iss.wrapping_add(1)).data(b"never read"));
        t.recv_all();
        let now = t.now;
        if shut_rd_first {
            t.stack.tcp_shutdown(now, h, Shutdown::Read).unwrap();
            assert_eq!(t.recv(), None, "SHUT_RD sends nothing");
            assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
        }
        t.stack.tcp_close(now, h).unwrap();
        let r = t.recv().expect("a reset");
        assert!(r.has(Flags::RST) && !r.has(Flags::FIN), "{r:?}");
        assert_eq!(r.seq, iss.wrapping_add(1), "SEQ = SND.NXT");
        assert_eq!(t.recv(), None);
        let m = t.stack.mib();
        assert_eq!(m.get(Counter::TcpExtTCPAbortOnClose), 1);
        assert_eq!(m.get(Counter::TcpOutRsts), 1);
        assert_eq!(m.get(Counter::TcpEstabResets), 1);
        assert_eq!(
            t.stack.tcp_resources().timewait,
            0,
            "no TIME-WAIT after a reset"
        );
        t.assert_released();
    }
}

/// RFC 1122 §4.2.2.13 ("or if new data is received after CLOSE is called, its TCP SHOULD
/// send a RST"), Linux `tcp_rcv_state_process` in FIN-WAIT-1/2 with RCV_SHUTDOWN:
/// TCPAbortOnData, the connection is reset and forgotten. Linux answers through
/// `tcp_v4_send_reset`, whose SEQ is the segment's ACK.
#[test]
fn data_after_close_is_answered_with_rst() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("our FIN");
    assert_eq!(fin.seq, iss.wrapping_add(1));
    // The peer acknowledges the FIN and sends data anyway.
    t.send(Seg::ack(1001, iss.wrapping_add(2)).data(b"too late"));
    let r = t.recv().expect("a reset");
    assert!(r.has(Flags::RST), "{r:?}");
    assert_eq!(r.seq, iss.wrapping_add(2), "SEQ = SEG.ACK");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPAbortOnData), 1);
    assert_eq!(t.stack.tcp_resources().connections, 0);
    t.assert_released();
}

/// As above, but the peer's data does not yet acknowledge our FIN. The RST must carry
/// the SEQ the peer expects (SEG.ACK, Linux `tcp_v4_send_reset`), or an RFC 5961 peer
/// answers it with a challenge ACK instead of resetting (RFC 5961 §3.2: only a RST at
/// exactly RCV.NXT resets).
#[test]
fn rst_for_data_after_close_uses_the_segments_ack() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    t.recv().expect("our FIN");
    t.send(Seg::ack(1001, iss.wrapping_add(1)).data(b"crossing"));
    let r = t.recv().expect("a reset");
    assert!(r.has(Flags::RST), "{r:?}");
    assert_eq!(
        r.seq,
        iss.wrapping_add(1),
        "SEQ = SEG.ACK = the peer's RCV.NXT"
    );
}

/// Linux `tcp_rcv_state_process` resets on new data in FIN-WAIT-1/2 whenever the socket
/// has RCV_SHUTDOWN, closed or not: shutdown(SHUT_RDWR) and then data is TCPAbortOnData
/// with a RST, like data after close.
#[test]
fn data_after_shutdown_both_is_answered_with_rst() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Both).unwrap();
    t.recv().expect("our FIN");
    t.send(Seg::ack(1001, iss.wrapping_add(2)).data(b"unwanted"));
    let r = t.recv().expect("a reset");
    assert!(r.has(Flags::RST), "{r:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPAbortOnData), 1);
}

// ---- simultaneous close -------------------------------------------------------------------

/// RFC 9293 §3.6 figure 13 (simultaneous close) and §3.10.7.4: a FIN in FIN-WAIT-1 that
/// does not acknowledge ours gives CLOSING (and an ACK of it); the ACK of our FIN then
/// gives TIME-WAIT for 2*MSL (60 s as Linux), during which a retransmitted FIN is
/// acknowledged again; then nothing is left (TW counted).
#[test]
fn simultaneous_close_goes_through_closing_to_time_wait() {
    let mut t = SegTest::listening(80);
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    let fin = t.recv().expect("our FIN");
    assert_eq!(fin.seq, iss.wrapping_add(1));
    // The peer's FIN crossed ours: it acknowledges only up to our FIN.
    t.send(Seg::ack(1001, iss.wrapping_add(1)).fin());
    let a = t.recv().expect("ACK of the peer's FIN");
    assert!(
        a.has(Flags::ACK) && !a.has(Flags::FIN) && a.ack == 1002,
        "{a:?}"
    );
    assert_eq!(a.seq, iss.wrapping_add(2), "SND.NXT is past our FIN");
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closing));
    // The peer's ACK of our FIN.
    t.send(Seg::ack(1002, iss.wrapping_add(2)));
    assert_eq!(t.recv(), None);
    let tw = t.stack.tcp_timewait_list();
    assert_eq!(tw.len(), 1);
    assert_eq!(
        (tw[0].1, tw[0].2),
        (PEER.into(), t.now + Duration::from_secs(60))
    );
    assert_eq!(t.stack.tcp_resources().connections, 0);
    // Half-way through the wait the peer retransmits its FIN (its ACK of ours was lost,
    // as it sees it): RFC 9293 §3.10.7.4 "Acknowledge it, and restart the 2 MSL timeout".
    // The clock moves first, so that a restart and no restart differ (issue #10).
    t.advance(Duration::from_secs(30));
    assert_eq!(t.recv(), None);
    assert_eq!(t.stack.tcp_resources().timewait, 1);
    t.send(Seg::ack(1001, iss.wrapping_add(2)).fin());
    let again = t.recv().expect("a retransmitted FIN is acknowledged");
    assert_eq!((again.seq, again.ack), (iss.wrapping_add(2), 1002));
    let tw = t.stack.tcp_timewait_list();
    assert_eq!(
        (tw.len(), tw[0].2),
        (1, t.now + Duration::from_secs(60)),
        "the wait restarted at the retransmitted FIN"
    );
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    // 59 s after the FIN is 89 s after TIME-WAIT began: only a restarted wait is still on.
    t.advance(Duration::from_secs(59));
    assert_eq!(
        t.stack.tcp_resources().timewait,
        1,
        "2*MSL, restarted by the FIN"
    );
    t.advance(Duration::from_secs(2));
    assert_eq!(t.stack.tcp_resources().timewait, 0);
    assert_eq!(t.stack.mib().get(Counter::TcpExtTW), 1);
    t.assert_released();
}

/// RFC 9293 §3.6 figure 13 with two ustack stacks: both close at the same moment, the
/// FINs cross, both pass through CLOSING and both end in TIME-WAIT; after 2*MSL both are
/// empty.
#[test]
fn simultaneous_close_between_two_stacks() {
    let mut p = Pair::new(SimLinkConfig::default());
    let slow = SimConfig {
        delay: Duration::from_millis(10),
        ..SimConfig::default()
    };
    p.link.set_config(Side::A, slow.clone());
    p.link.set_config(Side::B, slow);
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let a = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut b = None;
    assert!(p.run_until_cond(10 * SEC, |p| {
        b = b.or_else(|| p.b.tcp_accept(l).ok().map(|x| x.0));
        b.is_some() && p.a.tcp_state(a) == Ok(State::Established)
    }));
    let b = b.unwrap();
    p.run_for(SEC);
    let now = p.now;
    p.a.tcp_shutdown(now, a, Shutdown::Write).unwrap();
    p.b.tcp_shutdown(now, b, Shutdown::Write).unwrap();
    // The FINs arrive 10 ms later; each side ACKs the other's FIN from CLOSING.
    p.run_until(now + Duration::from_millis(15));
    assert_eq!(p.a.tcp_state(a), Ok(State::Closing));
    assert_eq!(p.b.tcp_state(b), Ok(State::Closing));
    p.run_until(now + Duration::from_millis(25));
    for s in [&p.a, &p.b] {
        let r = s.tcp_resources();
        assert_eq!((r.connections, r.timewait), (0, 1), "both in TIME-WAIT");
    }
    let now = p.now;
    p.a.tcp_close(now, a).unwrap();
    p.b.tcp_close(now, b).unwrap();
    p.run_for(Duration::from_secs(61));
    for s in [&p.a, &p.b] {
        let r = s.tcp_resources();
        assert_eq!(r, TcpResources::default(), "nothing left after 2*MSL");
        assert_eq!(s.mib().get(Counter::TcpExtTW), 1);
        assert_eq!(s.mib().get(Counter::TcpCurrEstab), 0);
    }
}

// ---- FIN-WAIT-2 timeout -------------------------------------------------------------------

/// Linux `tcp_fin_timeout`: a closed (orphaned) connection whose FIN was acknowledged
/// does not wait in FIN-WAIT-2 for the peer's FIN forever; after `tcp_fin_timeout` it is
/// gone (RFC 9293 leaves FIN-WAIT-2 unbounded; a user CLOSE means nobody waits for it).
/// A connection still held by the application (shutdown, not close) waits.
#[test]
fn orphaned_fin_wait_2_times_out() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_fin_timeout", 30).unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    t.recv().expect("our FIN");
    t.advance(5 * SEC);
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    assert_eq!(t.stack.tcp_resources().connections, 1, "FIN-WAIT-2");
    let entered = t.now;
    // The peer keeps the connection half open and says nothing.
    t.advance(Duration::from_millis(29_900));
    assert_eq!(t.stack.tcp_resources().connections, 1);
    t.advance(Duration::from_millis(100));
    assert_eq!(t.now - entered, 30 * SEC);
    assert_eq!(
        t.stack.tcp_resources().connections,
        0,
        "gone after tcp_fin_timeout"
    );
    assert_eq!(t.stack.tcp_resources().timewait, 0);
    t.recv_all();
    // The peer's late FIN finds no connection: RFC 9293 §3.10.7.1, a reset.
    t.send(Seg::ack(1001, iss.wrapping_add(2)).fin());
    let r = t.recv().expect("RST");
    assert!(r.has(Flags::RST) && r.seq == iss.wrapping_add(2));
    t.assert_released();

    // Not orphaned: shutdown(SHUT_WR) only; FIN-WAIT-2 lasts as long as the peer wants.
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_fin_timeout", 30).unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    t.recv().expect("our FIN");
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    assert_eq!(t.advance(Duration::from_secs(600)), vec![]);
    assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait2));
    t.send(Seg::ack(1001, iss.wrapping_add(2)).fin());
    t.recv().expect("ACK");
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    t.assert_released();
}

/// Linux `__tcp_close`: a connection shut down for writing whose FIN was acknowledged
/// (FIN-WAIT-2, still held) and then closed is an orphan in FIN-WAIT-2: it too is gone
/// after `tcp_fin_timeout` (found by the `tcp_conn` fuzz target: it was never freed).
#[test]
fn shutdown_then_close_in_fin_wait_2_times_out() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_fin_timeout", 30).unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    t.recv().expect("our FIN");
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait2));
    t.advance(10 * SEC);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    assert_eq!(t.advance(Duration::from_millis(29_900)), vec![]);
    assert_eq!(
        t.stack.tcp_resources().connections,
        1,
        "still in FIN-WAIT-2"
    );
    t.advance(Duration::from_millis(100));
    assert_eq!(
        t.stack.tcp_resources().connections,
        0,
        "gone tcp_fin_timeout after the close"
    );
    t.assert_released();
}

/// Linux `tcp_rcv_state_process` (FIN-WAIT-1, SOCK_DEAD): with `tcp_fin_timeout` <= 60 s
/// the orphan becomes a FIN-WAIT-2 timewait socket (`tcp_time_wait(sk, TCP_FIN_WAIT2,
/// tmo)`) that simply expires: nothing is sent when the timeout ends (a RST goes only to
/// a peer that sends new data later, `tcp_timewait_state_process` "kill_with_rst").
#[test]
fn orphaned_fin_wait_2_expires_silently() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_fin_timeout", 30).unwrap();
    let (h, iss) = open(&mut t);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    t.recv().expect("our FIN");
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    assert_eq!(t.advance(Duration::from_secs(31)), vec![]);
    assert_eq!(t.stack.tcp_resources().connections, 0);
}

// ---- SYN-SENT -------------------------------------------------------------------------------

/// RFC 6298 §5 and Linux `tcp_retransmit_timer`/`tcp_write_timeout` in SYN-SENT, with
/// `tcp_syn_linear_timeouts` = 0 (Linux before 6.18): the SYN is retransmitted after 1 s
/// (`TCP_TIMEOUT_INIT`), the interval doubling, `tcp_syn_retries` times (6: at 1, 3, 7,
/// 15, 31, 63 s); at 127 s the connect fails with ETIMEDOUT (AttemptFails,
/// TCPAbortOnTimeout; each retransmission in RetransSegs).
#[test]
fn syn_is_retransmitted_with_backoff_then_times_out() {
    let mut t = SegTest::new(40000);
    assert_eq!(t.stack.sysctl().tcp_syn_retries, 6);
    t.stack
        .set_sysctl("net.ipv4.tcp_syn_linear_timeouts", 0)
        .unwrap();
    let (h, syn) = t.connect();
    let start = t.now;
    let sent = t.advance(Duration::from_secs(300));
    let times: Vec<u64> = sent
        .iter()
        .map(|(at, s)| {
            assert!(
                s.flags == Flags::SYN && s.seq == syn.seq,
                "the same SYN: {s:?}"
            );
            assert_eq!(
                (s.mss, s.wscale, s.sack_perm),
                (syn.mss, syn.wscale, syn.sack_perm)
            );
            (*at - start).as_secs()
        })
        .collect();
    assert_eq!(times, [1, 3, 7, 15, 31, 63]);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let now = t.now;
    let mut buf = [0u8; 1];
    assert_eq!(t.stack.tcp_recv(now, h, &mut buf), Err(Error::TimedOut));
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpActiveOpens), 1);
    assert_eq!(m.get(Counter::TcpAttemptFails), 1);
    assert_eq!(m.get(Counter::TcpExtTCPAbortOnTimeout), 1);
    assert_eq!(m.get(Counter::TcpRetransSegs), 6);
    assert_eq!(m.get(Counter::TcpCurrEstab), 0);
    t.stack.tcp_close(now, h).unwrap();
    t.assert_released();

    // tcp_syn_retries = 2: retransmissions at 1 and 3 s, failure at 7 s.
    let mut t = SegTest::new(40000);
    t.stack.set_sysctl("net.ipv4.tcp_syn_retries", 2).unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_syn_linear_timeouts", 0)
        .unwrap();
    let (h, _) = t.connect();
    let start = t.now;
    let sent = t.advance(Duration::from_secs(60));
    assert_eq!(
        sent.iter()
            .map(|(at, _)| (*at - start).as_secs())
            .collect::<Vec<_>>(),
        [1, 3]
    );
    t.advance(Duration::ZERO);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
}

/// Linux 6.18's default `tcp_syn_linear_timeouts` = 4 (`tcp_retransmit_timer`: no backoff
/// while `total_rto` is at most it; ip-sysctl.rst: "SYN RTOs to be: 1, 1, 1, 1, 1, 2, 4,
/// ..."): SYNs at 1, 2, 3, 4, 5, 7, 11, 19, 35 and 67 s. The give-up time is unchanged
/// (`retransmits_timed_out` with `tcp_model_timeout`: 127 s after the first SYN for 6
/// retries), so it comes at the first expiry past it, 131 s; with `tcp_syn_retries` = 2,
/// at 7 s after five retransmissions.
#[test]
fn syn_timeouts_stay_linear_then_back_off() {
    let mut t = SegTest::new(40000);
    assert_eq!(t.stack.sysctl().tcp_syn_linear_timeouts, 4);
    let (h, _) = t.connect();
    let start = t.now;
    let secs = |sent: &[(ustack_stack::Instant, Seg)]| {
        sent.iter()
            .map(|(at, _)| (*at - start).as_secs())
            .collect::<Vec<_>>()
    };
    let sent = t.advance(Duration::from_secs(130));
    assert_eq!(secs(&sent), [1, 2, 3, 4, 5, 7, 11, 19, 35, 67]);
    assert_eq!(
        t.stack.tcp_state(h),
        Ok(State::SynSent),
        "still trying at 130 s"
    );
    t.advance(Duration::from_secs(1));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed), "given up at 131 s");
    assert_eq!(t.stack.mib().get(Counter::TcpRetransSegs), 10);

    let mut t = SegTest::new(40000);
    t.stack.set_sysctl("net.ipv4.tcp_syn_retries", 2).unwrap();
    let (h, _) = t.connect();
    let sent = t.advance(Duration::from_secs(6));
    assert_eq!(secs(&sent), [1, 2, 3, 4, 5]);
    assert_eq!(t.stack.tcp_state(h), Ok(State::SynSent));
    t.advance(Duration::from_secs(1));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed), "given up at 7 s");
}

/// Linux counts every SYN retransmission in TCPSynRetrans (`tcp_retransmit_skb`: "if
/// (TCP_SKB_CB(skb)->tcp_flags & TCPHDR_SYN) __NET_INC_STATS(.., LINUX_MIB_TCPSYNRETRANS)")
/// and every RTO expiry, the last one included, in TCPTimeouts (`tcp_retransmit_timer`
/// increments it before `tcp_write_timeout`, since Linux 4.19).
#[test]
fn syn_retransmissions_are_counted_like_linux() {
    let mut t = SegTest::new(40000);
    let (_, _) = t.connect();
    t.advance(Duration::from_secs(300));
    let m = t.stack.mib();
    // Ten with tcp_syn_linear_timeouts = 4 (see syn_timeouts_stay_linear_then_back_off).
    assert_eq!(m.get(Counter::TcpExtTCPSynRetrans), 10);
    assert_eq!(
        m.get(Counter::TcpExtTCPTimeouts),
        11,
        "ten retransmissions and the abort"
    );
}

/// RFC 9293 §3.10.7.3 SYN-SENT: "If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset
/// (unless the RST bit is set, if so drop the segment and return) <SEQ=SEG.ACK><CTL=RST>";
/// a RST without an acceptable ACK is dropped ("Otherwise (no ACK), drop the segment");
/// none of these changes the state, and the right SYN-ACK still establishes.
#[test]
fn syn_sent_ignores_bad_rst_and_resets_bad_synack() {
    let mut t = SegTest::new(40000);
    let (h, syn) = t.connect();
    let iss = syn.seq;
    for bad in [iss, iss.wrapping_sub(1000), iss.wrapping_add(2)] {
        t.send(Seg::rst(0).with_ack(bad));
        assert_eq!(t.recv(), None, "RST with a bad ACK {bad}: dropped");
        t.send(Seg::syn(5000).with_ack(bad));
        let r = t.recv().expect("reset for a SYN-ACK with a bad ACK");
        assert!(
            r.flags == Flags::RST && r.seq == bad,
            "<SEQ=SEG.ACK><CTL=RST>: {r:?}"
        );
        // A bare ACK with a bad ACK number: also a reset.
        t.send(Seg::ack(5001, bad));
        let r = t.recv().expect("reset for a bad ACK");
        assert!(r.flags == Flags::RST && r.seq == bad, "{r:?}");
    }
    t.send(Seg::rst(0));
    assert_eq!(t.recv(), None, "RST without ACK: dropped");
    assert_eq!(t.stack.tcp_state(h), Ok(State::SynSent));
    assert_eq!(t.stack.mib().get(Counter::TcpAttemptFails), 0);
    t.send(Seg::syn(5000).with_ack(iss.wrapping_add(1)).mss(1000));
    let a = t.recv().expect("ACK of the SYN-ACK");
    assert!(
        a.flags == Flags::ACK && a.seq == iss.wrapping_add(1) && a.ack == 5001,
        "{a:?}"
    );
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    close_cleanly(&mut t, h, 5001);
    t.assert_released();

    // An acceptable RST: "signal to the user 'error: connection reset'" (ECONNREFUSED),
    // CLOSED (AttemptFails).
    let mut t = SegTest::new(40000);
    let (h, syn) = t.connect();
    t.send(Seg::rst(0).with_ack(syn.seq.wrapping_add(1)));
    assert_eq!(t.recv(), None);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let now = t.now;
    let mut buf = [0u8; 1];
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Err(Error::ConnectionRefused)
    );
    assert_eq!(t.stack.mib().get(Counter::TcpAttemptFails), 1);
    t.stack.tcp_close(now, h).unwrap();
    t.assert_released();
}

// ---- window scaling -----------------------------------------------------------------------

/// Our window-scale shift with the default tcp_rmem (max 6 MiB): 7.
const OUR_WSCALE: u8 = 7;

/// RFC 7323 §2.2-2.3: once both SYNs carried the option, every window field after the
/// handshake is scaled, ours by our shift ("SND.WND = SEG.WND << Snd.Wind.Shift" at the
/// peer; we send RCV.WND >> Rcv.Wind.Shift) and theirs by theirs; "The window field in a
/// SYN (i.e., a <SYN> or <SYN,ACK>) segment itself is never scaled."
#[test]
fn window_scale_applies_after_the_handshake_both_ways() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000).mss(1000).wscale(7).win(4000));
    let synack = t.recv().expect("SYN-ACK");
    assert_eq!(synack.wscale, Some(OUR_WSCALE));
    // Linux tcp_select_initial_window: rounddown(min(rcvbuf, 65535), MSS) = 44 x 1460.
    assert_eq!(
        synack.window, 64_240,
        "min(rcvbuf, 65535), unscaled, whole MSSs"
    );
    let iss = synack.seq;
    // The ACK completing the handshake is the first scaled window: 40 << 7 = 5120.
    t.send(Seg::ack(1001, iss.wrapping_add(1)).win(40));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!(info.wscale, Some((7, OUR_WSCALE)));
    assert_eq!(info.snd_wnd, 5120);
    t.write(h, &[1u8; 8000]);
    let sent = t.recv_all();
    assert_eq!(
        sent.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
        [1000; 5],
        "5120 bytes of window: five MSS-sized segments, the rest waits"
    );
    // Our window field is our receive window shifted right by our scale: no data has
    // arrived, so the window is still the SYN-ACK's (Linux `rcv_ssthresh`), rounded up to
    // the scale's unit (64,256 = 502 << 7).
    for s in &sent {
        assert_eq!(
            u32::from(s.window) << OUR_WSCALE,
            64_240u32.div_ceil(1 << OUR_WSCALE) << OUR_WSCALE,
            "{s:?}"
        );
    }
    // A window update of 80 << 7 = 10240 bytes releases the rest.
    t.send(Seg::ack(1001, iss.wrapping_add(5001)).win(80));
    assert_eq!(t.stack.tcp_info(h).unwrap().snd_wnd, 10_240);
    let rest: usize = t.recv_all().iter().map(|s| s.payload.len()).sum();
    assert_eq!(rest, 3000);
    t.send(Seg::ack(1001, iss.wrapping_add(8001)).win(80));
    close_cleanly(&mut t, h, 1001);
    t.assert_released();
}

/// RFC 7323 §2.2 for an active open: our SYN offers the option with an unscaled window;
/// the SYN-ACK's window is taken as is ("never scaled"), later windows shifted by the
/// peer's scale.
#[test]
fn syn_windows_are_never_scaled() {
    let mut t = SegTest::new(40000);
    let (h, syn) = t.connect();
    assert_eq!(syn.wscale, Some(OUR_WSCALE));
    assert_eq!(syn.window, 64_240, "unscaled in a SYN, 44 x 1460");
    t.send(
        Seg::syn(5000)
            .with_ack(syn.seq.wrapping_add(1))
            .mss(1000)
            .wscale(2)
            .win(3000),
    );
    t.recv().expect("ACK");
    assert_eq!(t.stack.tcp_info(h).unwrap().snd_wnd, 3000, "not 3000 << 2");
    t.write(h, &[2u8; 10_000]);
    let first: usize = t.recv_all().iter().map(|s| s.payload.len()).sum();
    assert_eq!(first, 3000);
    // After the SYN-ACK the peer's windows are scaled: 3000 << 2 = 12000.
    t.send(Seg::ack(5001, syn.seq.wrapping_add(3001)).win(3000));
    assert_eq!(t.stack.tcp_info(h).unwrap().snd_wnd, 12_000);
    let rest: usize = t.recv_all().iter().map(|s| s.payload.len()).sum();
    assert_eq!(rest, 7000);
    t.send(Seg::ack(5001, syn.seq.wrapping_add(10_001)).win(3000));
    close_cleanly(&mut t, h, 5001);
    t.assert_released();
}

/// RFC 7323 §2.2: scaling is used only if both SYNs carry the option ("If a Window Scale
/// option is received in an initial <SYN> segment, ... it MAY be sent in the <SYN,ACK>";
/// without it in the <SYN>, none in the <SYN,ACK>), and a side with scaling turned off
/// (net.ipv4.tcp_window_scaling = 0) neither sends nor honours it. Without it windows are
/// plain 16-bit byte counts both ways.
#[test]
fn no_window_scaling_unless_both_syns_carry_the_option() {
    // (a) The peer's SYN has no option.
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000).mss(1000));
    let synack = t.recv().unwrap();
    assert_eq!(
        synack.wscale, None,
        "no option in a SYN-ACK to a SYN without one"
    );
    t.send(Seg::ack(1001, synack.seq.wrapping_add(1)).win(2000));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
    assert_eq!(t.stack.tcp_info(h).unwrap().wscale, None);
    t.write(h, &[3u8; 5000]);
    let sent = t.recv_all();
    assert_eq!(
        sent.iter().map(|s| s.payload.len()).sum::<usize>(),
        2000,
        "2000 bytes, not 2000 << n"
    );
    // No data received yet: the window is the SYN-ACK's (64,240 = 44 x 1460, Linux
    // `rcv_ssthresh = rcv_wnd`), kept as it is while within one MSS of what may be offered
    // (`__tcp_select_window` without scaling); it would be 65,000 once data had arrived.
    assert!(
        sent.iter().all(|s| s.window == 64_240),
        "our window unscaled, the SYN-ACK's until data arrives: {sent:?}"
    );
    t.send(Seg::ack(1001, synack.seq.wrapping_add(2001)).win(10_000));
    assert_eq!(
        t.recv_all().iter().map(|s| s.payload.len()).sum::<usize>(),
        3000
    );
    t.send(Seg::ack(1001, synack.seq.wrapping_add(5001)));
    close_cleanly(&mut t, h, 1001);
    t.assert_released();

    // (b) We have scaling off; the peer offers it.
    let mut t = SegTest::new(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_window_scaling", 0)
        .unwrap();
    t.listen(16);
    t.send(Seg::syn(1000).mss(1000).wscale(7));
    let synack = t.recv().unwrap();
    assert_eq!(synack.wscale, None);
    t.send(Seg::ack(1001, synack.seq.wrapping_add(1)).win(3000));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
    assert_eq!(
        t.stack.tcp_info(h).unwrap().snd_wnd,
        3000,
        "the peer's shift is not applied"
    );
    t.write(h, &[4u8; 1]);
    let s = t.recv().unwrap();
    assert_eq!(s.window, 64_240, "unscaled, the SYN-ACK's (rcv_ssthresh)");
    t.send(Seg::ack(1001, synack.seq.wrapping_add(2)).win(3000));
    close_cleanly(&mut t, h, 1001);
    t.assert_released();

    // (c) Active open: our SYN offers it, the SYN-ACK does not.
    let mut t = SegTest::new(40000);
    let (h, syn) = t.connect();
    t.send(
        Seg::syn(5000)
            .with_ack(syn.seq.wrapping_add(1))
            .mss(1000)
            .win(2000),
    );
    let ack = t.recv().expect("ACK");
    assert_eq!(
        ack.window, 64_240,
        "our window no longer scaled: our SYN's (rcv_ssthresh)"
    );
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!((info.wscale, info.snd_wnd), (None, 2000));
    t.send(Seg::ack(5001, syn.seq.wrapping_add(1)).win(2000));
    assert_eq!(t.stack.tcp_info(h).unwrap().snd_wnd, 2000);
    close_cleanly(&mut t, h, 5001);
    t.assert_released();
}

// ---- MSS ------------------------------------------------------------------------------------

/// RFC 9293 §3.7.1: "If an MSS Option is not received at connection setup, TCP
/// implementations MUST assume a default send MSS of 536 (576 - 40)" (MUST-15), and the
/// effective send MSS is the smaller of the peer's MSS and what our MTU allows, less the
/// TCP options carried on every segment (RFC 6691 §2, RFC 9293 §3.7.1 "Eff.snd.MSS");
/// no data segment is ever larger. Our own MSS option is MTU - 40 (1460).
#[test]
fn mss_defaults_to_536_and_bounds_every_segment() {
    // (peer MSS option, timestamps, expected payload per segment)
    let cases = [
        (None, false, 536),
        (None, true, 536 - 12),
        (Some(1000), false, 1000),
        (Some(1000), true, 1000 - 12),
        (Some(9000), false, 1460),
        (Some(9000), true, 1460 - 12),
        (Some(100), false, 100),
    ];
    for (mss, ts, expect) in cases {
        let mut t = SegTest::listening(80);
        let mut syn = Seg::syn(1000);
        syn.mss = mss;
        if ts {
            syn = syn.ts(1, 0);
        }
        let (h, synack) = t.accept_with(syn, 65_535);
        assert_eq!(synack.mss, Some(1460), "our MSS: MTU 1500 - 40");
        assert_eq!(
            usize::from(t.stack.tcp_info(h).unwrap().mss),
            expect,
            "{mss:?} ts={ts}"
        );
        let now = t.now;
        t.stack.tcp_set_nodelay(now, h, true).unwrap();
        let total = 6000;
        t.write(h, &vec![5u8; total]);
        let segs = collect_data(&mut t, total, 1001, 65_535, ts);
        let sizes: Vec<usize> = segs.iter().map(|s| s.payload.len()).collect();
        assert_eq!(
            *sizes.iter().max().unwrap(),
            expect,
            "{mss:?} ts={ts}: {sizes:?}"
        );
        assert!(
            sizes[..sizes.len() - 1].iter().all(|&n| n == expect),
            "full segments but the last: {sizes:?}"
        );
        let end = segs
            .last()
            .map(|s| s.seq.wrapping_add(s.payload.len() as u32))
            .unwrap();
        assert_eq!(end, synack.seq.wrapping_add(1 + total as u32));
        let now = t.now;
        t.stack.tcp_close(now, h).unwrap();
        let fin = t.recv().expect("FIN");
        let mut last = Seg::ack(1001, fin.seq.wrapping_add(1)).fin();
        if ts {
            last = last.ts(8, fin.ts.unwrap().0);
        }
        t.send(last);
        t.recv().expect("ACK of FIN");
        t.assert_released();
    }
}

// ---- listener timers ---------------------------------------------------------------------

/// Linux `reqsk_timer_handler` calls `tcp_syn_ack_timeout` (TCPTimeouts) on every expiry
/// of a request's timer: `tcp_synack_retries` (5) retransmissions and the final expiry.
#[test]
fn synack_timeouts_count_in_tcp_timeouts() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    t.recv().expect("SYN-ACK");
    let sent = t.advance(Duration::from_secs(120));
    assert_eq!(sent.len(), 5);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPTimeouts), 6);
    assert_eq!(m.get(Counter::TcpExtTCPSynRetrans), 5);
    assert_eq!(m.get(Counter::TcpRetransSegs), 5);
    t.assert_released();
}

// ---- listener drops (Linux tcp_listendrop) ------------------------------------------------

/// Close the test's listener (queued connections are reset, requests dropped: Linux
/// `inet_csk_listen_stop`) and run the leak check.
fn release_listener(t: &mut SegTest) {
    let now = t.now;
    t.stack
        .tcp_close_listener(now, t.listener.take().unwrap())
        .unwrap();
    t.assert_released();
}

/// A SYN from `port` of `ip` to port 80.
fn syn_from(t: &mut SegTest, ip: Ipv4Addr, port: u16, isn: u32) {
    let mut s = Seg::syn(isn);
    s.src_port = port;
    s.dst_port = 80;
    let packet = build(&s, ip, LOCAL_IP);
    t.stack.receive(t.now, &packet);
}

/// Linux `tcp_conn_request`: every SYN it drops goes through `tcp_listendrop`
/// (ListenDrops), whatever the reason: the accept queue full (plus ListenOverflows), the
/// SYN queue full without cookies (plus TCPReqQFullDrop), and the last quarter of
/// `tcp_max_syn_backlog` kept free without cookies (ListenDrops alone). The SYN-queue
/// test (and so TCPReqQFullDoCookies) comes before the accept-queue test.
#[test]
fn every_dropped_syn_counts_in_listen_drops() {
    let peer = Ipv4Addr::new(192, 0, 2, 1);
    // Accept queue full (backlog 0 holds one connection), cookies on: overflow.
    let mut t = SegTest::new(80);
    t.listen(0);
    syn_from(&mut t, peer, 1000, 1);
    let sa = t.recv().unwrap();
    let mut ack = Seg::ack(2, sa.seq.wrapping_add(1));
    ack.src_port = 1000;
    t.send(ack);
    assert_eq!(t.stack.tcp_accept_queue_len(t.listener.unwrap()), Ok(1));
    syn_from(&mut t, peer, 1001, 1);
    assert_eq!(t.recv(), None, "dropped");
    let m = t.stack.mib();
    assert_eq!(
        (
            m.get(Counter::TcpExtListenOverflows),
            m.get(Counter::TcpExtListenDrops)
        ),
        (1, 1)
    );
    assert_eq!(m.drops(DropReason::TcpListenOverflow), 1);

    // SYN queue full, cookies off: TCPReqQFullDrop and ListenDrops.
    release_listener(&mut t);
    let mut t = SegTest::new(80);
    t.stack.set_sysctl("net.ipv4.tcp_syncookies", 0).unwrap();
    t.listen(1);
    for port in 1000..1003 {
        syn_from(&mut t, peer, port, 1);
    }
    assert_eq!(
        t.recv_all().len(),
        2,
        "backlog 1: two requests, the third dropped"
    );
    let m = t.stack.mib();
    assert_eq!(
        (
            m.get(Counter::TcpExtTCPReqQFullDrop),
            m.get(Counter::TcpExtListenDrops)
        ),
        (1, 1)
    );

    // tcp_syncookies = 2 and the accept queue full: the cookie decision comes first
    // (TCPReqQFullDoCookies), then the overflow drop.
    release_listener(&mut t);
    let mut t = SegTest::new(80);
    t.stack.set_sysctl("net.ipv4.tcp_syncookies", 2).unwrap();
    t.listen(0);
    syn_from(&mut t, peer, 1000, 1);
    let sa = t.recv().unwrap();
    let mut ack = Seg::ack(2, sa.seq.wrapping_add(1));
    ack.src_port = 1000;
    t.send(ack);
    assert_eq!(t.stack.tcp_accept_queue_len(t.listener.unwrap()), Ok(1));
    syn_from(&mut t, peer, 1001, 1);
    assert_eq!(t.recv(), None);
    let m = t.stack.mib();
    assert_eq!(
        (
            m.get(Counter::TcpExtTCPReqQFullDoCookies),
            m.get(Counter::TcpExtListenOverflows),
            m.get(Counter::TcpExtListenDrops),
            m.get(Counter::TcpExtSyncookiesSent)
        ),
        (2, 1, 1, 1)
    );

    // Without cookies the last quarter of tcp_max_syn_backlog is refused: ListenDrops only
    // (Linux drops it at "drop_and_release" without TCPReqQFullDrop).
    release_listener(&mut t);
    let mut t = SegTest::new(80);
    t.stack.set_sysctl("net.ipv4.tcp_syncookies", 0).unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_max_syn_backlog", 8)
        .unwrap();
    t.listen(128);
    for port in 1000..1010 {
        syn_from(&mut t, peer, port, 1);
    }
    assert_eq!(t.recv_all().len(), 7, "8 - 8/4 + 1 requests");
    assert_eq!(t.stack.tcp_resources().requests, 7);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtListenDrops), 3);
    assert_eq!(m.get(Counter::TcpExtTCPReqQFullDrop), 0);
    assert_eq!(m.get(Counter::TcpExtListenOverflows), 0);
    release_listener(&mut t);
}

/// Linux `tcp_syn_flood_action`: with `tcp_syncookies` = 2 every SYN is answered with a
/// cookie and counted TCPReqQFullDoCookies (it runs for every SYN in that mode); with
/// cookies on and the SYN queue over the backlog, likewise.
#[test]
fn cookies_count_req_q_full_do_cookies() {
    let mut t = SegTest::new(80);
    t.stack.set_sysctl("net.ipv4.tcp_syncookies", 2).unwrap();
    t.listen(16);
    for port in 1000..1004 {
        syn_from(&mut t, Ipv4Addr::new(192, 0, 2, 1), port, 1);
    }
    assert_eq!(t.recv_all().len(), 4);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtSyncookiesSent), 4);
    assert_eq!(m.get(Counter::TcpExtTCPReqQFullDoCookies), 4);
    assert_eq!(m.get(Counter::TcpExtListenDrops), 0);
    release_listener(&mut t);
}

/// Linux `tcp_rcv_state_process` in LISTEN: "if (th->fin) { SKB_DR_SET(reason, TCP_FLAGS);
/// goto discard; }" for a SYN: a SYN+FIN gets no SYN-ACK and leaves no request (it is
/// not a `tcp_conn_request` drop, so not ListenDrops). (ustack's parser already refuses
/// SYN with FIN as malformed; the listener refuses it too.)
#[test]
fn syn_fin_to_a_listener_is_dropped() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000).fin());
    assert_eq!(t.recv(), None);
    assert_eq!(t.stack.tcp_resources().requests, 0);
    let m = t.stack.mib();
    assert_eq!(m.drops_total(), 1, "one counted drop");
    assert_eq!(m.get(Counter::TcpExtListenDrops), 0);
    release_listener(&mut t);
}

/// Linux `tcp_conn_request`: a SYN whose SYN-ACK cannot be routed (`route_req` fails:
/// OutNoRoutes) is dropped with `tcp_listendrop`, and no request is kept.
#[test]
fn syn_without_a_route_back_counts_in_listen_drops() {
    let mut t = SegTest::new(80);
    let mut c = ustack_stack::Config::ip(ustack_stack::Ipv4Cidr::new(LOCAL_IP, 24));
    c.seed = Some(42);
    t.stack = ustack_stack::Stack::new(c); // no gateway: only 192.0.2.0/24 is reachable
    t.listen(16);
    syn_from(&mut t, Ipv4Addr::new(198, 51, 100, 7), 1000, 1);
    assert_eq!(t.recv(), None);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtListenDrops), 1);
    assert_eq!(m.get(Counter::IpOutNoRoutes), 1);
    assert_eq!(t.stack.tcp_resources().requests, 0);
    t.assert_released();
}

// ---- bind conflicts ------------------------------------------------------------------------

/// Linux `inet_csk_bind_conflict`, as `Stack::tcp_bind_conflict` answers a `bind(2)`: a
/// listener holds its port against everyone, SO_REUSEADDR or not; an open connection and a
/// TIME-WAIT record hold theirs unless both the new socket and the old one set
/// SO_REUSEADDR (an accepted connection has its listener's, a TIME-WAIT record its
/// connection's); a port nothing uses is free.
#[test]
fn bind_conflicts_with_listeners_connections_and_time_wait() {
    for old_reuse in [false, true] {
        let mut t = SegTest::listening(80);
        let l = t.listener.unwrap();
        t.stack.tcp_listener_set_reuseaddr(l, old_reuse).unwrap();
        for reuse in [false, true] {
            assert!(
                t.stack.tcp_bind_conflict(80, reuse),
                "a listener, reuse {reuse}"
            );
            assert!(!t.stack.tcp_bind_conflict(81, reuse), "a free port");
        }
        let (h, _) = open(&mut t);
        let now = t.now;
        t.stack
            .tcp_close_listener(now, t.listener.take().unwrap())
            .unwrap();
        assert!(t.stack.tcp_bind_conflict(80, false), "an open connection");
        assert_eq!(
            t.stack.tcp_bind_conflict(80, true),
            !old_reuse,
            "SO_REUSEADDR on the new socket, {old_reuse} on the connection"
        );
        close_cleanly(&mut t, h, 1001);
        assert_eq!(t.stack.tcp_resources().timewait, 1);
        assert!(t.stack.tcp_bind_conflict(80, false), "a TIME-WAIT record");
        assert_eq!(
            t.stack.tcp_bind_conflict(80, true),
            !old_reuse,
            "SO_REUSEADDR on the new socket, {old_reuse} on the TIME-WAIT record"
        );
        t.advance(Duration::from_secs(61));
        assert_eq!(t.stack.tcp_resources().timewait, 0);
        assert!(!t.stack.tcp_bind_conflict(80, false), "TIME-WAIT over");
    }
}

// ---- TIME-WAIT reuse for outgoing connections ---------------------------------------------

/// An active open from the single ephemeral port 50000 to [`PEER`] with timestamps,
/// closed by us first so that it ends in TIME-WAIT. Returns (the FIN's SEQ, the TSval of
/// our last segment).
fn connection_into_time_wait(t: &mut SegTest, ts: bool) -> (u32, u32) {
    t.stack
        .set_sysctl("net.ipv4.ip_local_port_range.min", 50_000)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.ip_local_port_range.max", 50_000)
        .unwrap();
    let (h, syn) = t.connect();
    assert_eq!(syn.src_port, 50_000);
    let mut synack = Seg::syn(5000).with_ack(syn.seq.wrapping_add(1));
    if ts {
        synack = synack.ts(100, syn.ts.unwrap().0);
    }
    t.send(synack);
    t.recv().expect("ACK");
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("FIN");
    let mut last = Seg::ack(5001, fin.seq.wrapping_add(1)).fin();
    if ts {
        last = last.ts(101, fin.ts.unwrap().0);
    }
    t.send(last);
    let ack = t.recv().expect("ACK of the peer's FIN");
    assert_eq!(t.stack.tcp_resources().timewait, 1);
    (fin.seq, ack.ts.map_or(0, |t| t.0))
}

/// `net.ipv4.tcp_tw_reuse` = 1 (Linux `tcp_twsk_unique`, `__inet_check_established`): a
/// new outgoing connection may take over a 4-tuple still in TIME-WAIT if the old
/// connection used timestamps and the record is more than `tcp_tw_reuse_delay` (1 s) old.
/// The record goes (TWRecycled); the new ISS is the old SND.NXT + 65537 and the new TSvals
/// are newer than the old ones, so the peer's PAWS (RFC 7323 §5) and sequence checks
/// tell the incarnations apart. Mode 2 (loopback only) is off in ustack, which has no
/// loopback; without timestamps there is no reuse.
#[test]
fn tw_reuse_takes_over_a_time_wait_tuple_for_outgoing_connections() {
    let mut t = SegTest::new(40000);
    let (fin_seq, last_tsval) = connection_into_time_wait(&mut t, true);
    let now = t.now;
    assert_eq!(t.stack.sysctl().tcp_tw_reuse, 2, "Linux's default");
    assert_eq!(
        t.stack.tcp_connect(now, PEER),
        Err(Error::AddrNotAvailable),
        "the only port is in TIME-WAIT; mode 2 is loopback-only"
    );
    t.stack.set_sysctl("net.ipv4.tcp_tw_reuse", 1).unwrap();
    t.advance(SEC);
    let now = t.now;
    assert_eq!(
        t.stack.tcp_connect(now, PEER),
        Err(Error::AddrNotAvailable),
        "not before tcp_tw_reuse_delay"
    );
    t.advance(Duration::from_millis(1));
    let (h, syn) = t.connect();
    assert_eq!(syn.src_port, 50_000, "the TIME-WAIT tuple, reused");
    assert_eq!(
        syn.seq,
        fin_seq.wrapping_add(1).wrapping_add(65_537),
        "ISS = old SND.NXT + 65535 + 2"
    );
    let tsval = syn.ts.expect("timestamps").0;
    assert!(
        (tsval.wrapping_sub(last_tsval) as i32) > 0,
        "newer TSval: {tsval} after {last_tsval}"
    );
    let r = t.stack.tcp_resources();
    assert_eq!((r.timewait, r.connections), (0, 1), "the record is gone");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTWRecycled), 1);
    assert_eq!(
        t.stack.mib().get(Counter::TcpExtTW),
        0,
        "recycled, not expired"
    );
    // The new incarnation works.
    t.send(
        Seg::syn(900_000)
            .with_ack(syn.seq.wrapping_add(1))
            .ts(200, tsval),
    );
    let ack = t.recv().expect("ACK");
    assert_eq!(ack.ack, 900_001);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    let now = t.now;
    t.stack.tcp_abort(now, h).unwrap();
    t.assert_released();

    // Without timestamps on the old connection there is nothing to protect the new one
    // from its old duplicates: no reuse, even with mode 1.
    let mut t = SegTest::new(40000);
    t.stack.set_sysctl("net.ipv4.tcp_tw_reuse", 1).unwrap();
    t.stack.set_sysctl("net.ipv4.tcp_timestamps", 0).unwrap();
    connection_into_time_wait(&mut t, false);
    t.advance(Duration::from_secs(30));
    let now = t.now;
    assert_eq!(t.stack.tcp_connect(now, PEER), Err(Error::AddrNotAvailable));
    // Once the record expires the port is free again, reuse or not.
    t.advance(Duration::from_secs(31));
    assert_eq!(t.stack.tcp_resources().timewait, 0);
    let (h, _) = t.connect();
    let now = t.now;
    t.stack.tcp_abort(now, h).unwrap();
    t.assert_released();
}

/// RFC 9293 §3.10.4 (CLOSE in ESTABLISHED: "queue [the FIN] until all preceding SENDs have
/// been segmentized, then form a FIN segment and send it") and RFC 6298 §5.1: a FIN
/// occupies sequence space and is retransmitted on the RTO like data. A FIN that never
/// reaches the peer (lost on the link, or dropped by a full device queue after the stack
/// handed it over) comes again, with backoff, until the peer acknowledges it.
#[test]
fn a_lost_fin_is_retransmitted_until_acknowledged() {
    for with_data in [false, true] {
        let mut t = SegTest::listening(80);
        let (h, iss) = open(&mut t);
        let mut fin_seq = iss.wrapping_add(1);
        if with_data {
            t.write(h, b"last words");
            let data = t.recv().expect("the data");
            fin_seq = fin_seq.wrapping_add(data.payload.len() as u32);
            // The data is acknowledged; the FIN is what gets lost.
            t.send(Seg::ack(1001, fin_seq));
        }
        let now = t.now;
        t.stack.tcp_close(now, h).unwrap();
        let fin = t.recv().expect("our FIN");
        assert!(fin.has(Flags::FIN) && fin.seq == fin_seq, "{fin:?}");
        // Lost: nothing from the peer. It must come back on the RTO, then again, backed off.
        let again = t.advance(10 * SEC);
        let fins: Vec<_> = again
            .iter()
            .filter(|(_, s)| s.has(Flags::FIN) && s.seq == fin_seq)
            .map(|(at, _)| *at)
            .collect();
        assert!(
            fins.len() >= 2,
            "with data {with_data}: FIN resent {fins:?}"
        );
        assert!(fins[1] - fins[0] > fins[0] - now, "backed off: {fins:?}");
        assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait1));
        // Acknowledged at last: FIN-WAIT-2, then the peer's FIN, TIME-WAIT, gone.
        t.send(Seg::ack(1001, fin_seq.wrapping_add(1)));
        assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait2));
        t.send(Seg::ack(1001, fin_seq.wrapping_add(1)).fin());
        t.recv().expect("ACK of the peer's FIN");
        t.advance(61 * SEC);
        t.assert_released();
    }
}

/// RFC 9293 §3.6 simultaneous open, then a shutdown before our SYN is acknowledged:
/// SYN-RECEIVED goes to FIN-WAIT-1 with the SYN still unacknowledged. Its retransmission
/// is the SYN-ACK again (Linux resends the SYN skb at the head of its queue), never a data
/// byte at ISS (found by the `tcp_conn` fuzz target: one garbage byte went out at ISS).
#[test]
fn syn_unacknowledged_in_fin_wait_1_is_retransmitted_as_a_syn() {
    let mut t = SegTest::new(0);
    let (h, syn) = t.connect();
    // The peer's SYN crosses ours.
    t.send(Seg::syn(5000));
    let synack = t.recv().expect("SYN-ACK");
    assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
    assert_eq!(t.stack.tcp_state(h), Ok(State::SynReceived));
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    assert_eq!(t.stack.tcp_state(h), Ok(State::FinWait1));
    t.recv_all();
    let again: Vec<Seg> = t
        .advance(Duration::from_secs(3))
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert!(!again.is_empty(), "retransmitted");
    for s in &again {
        assert!(s.payload.is_empty(), "no data was written: {s:?}");
        if s.seq == syn.seq {
            assert!(s.has(Flags::SYN | Flags::ACK), "{s:?}");
        }
    }
    assert!(again.iter().any(|s| s.has(Flags::SYN)), "{again:?}");
    let now = t.now;
    t.stack.tcp_abort(now, h).unwrap();
    t.assert_released();
}
