//! TCP, segment by segment: a fixture per state, the test as the peer, each test naming
//! the rule it checks.

use core::time::Duration;

use ustack_obs::{Counter, DropReason};
use ustack_stack::tcp::State;
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_wire::tcp::Flags;

/// A passive open completed from peer ISN 1000; returns (our ISN, the accepted handle).
fn established(t: &mut SegTest) -> (u32, ustack_stack::TcpHandle) {
    let iss = t.handshake(1000);
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    (iss, h)
}

/// RFC 9293 §3.10.7.2 LISTEN: "An incoming RST should be ignored"; "Any acknowledgment
/// is bad ... form a reset: <SEQ=SEG.ACK><CTL=RST>"; a SYN gets <SEQ=ISS><ACK=RCV.NXT><CTL=SYN,ACK>.
#[test]
fn listen_ignores_rst_resets_ack_answers_syn() {
    let mut t = SegTest::listening(80);
    t.send(Seg::rst(5));
    assert_eq!(t.recv(), None, "RST to a listener: silence");
    t.send(Seg::ack(5, 777));
    let r = t.recv().expect("a reset");
    assert!(
        r.has(Flags::RST) && !r.has(Flags::ACK) && r.seq == 777,
        "{r:?}"
    );
    t.send(Seg::syn(1000).mss(1400).wscale(7).sack_perm().ts(100, 0));
    let s = t.recv().expect("SYN-ACK");
    assert!(s.has(Flags::SYN | Flags::ACK) && s.ack == 1001, "{s:?}");
    assert_eq!(s.mss, Some(1460));
    assert!(
        s.wscale.is_some() && s.sack_perm && s.ts.map(|ts| ts.1) == Some(100),
        "options echoed: {s:?}"
    );
}

/// RFC 9293 §3.10.7.4 SYN-RECEIVED: "If the segment acknowledgment is not acceptable,
/// form a reset segment <SEQ=SEG.ACK><CTL=RST>"; the right ACK enters ESTABLISHED.
#[test]
fn syn_received_resets_bad_ack_and_establishes_on_good_one() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    let s = t.recv().unwrap();
    t.send(Seg::ack(1001, s.seq.wrapping_add(5)));
    let r = t.recv().expect("reset for a bad ACK");
    assert!(r.has(Flags::RST) && r.seq == s.seq.wrapping_add(5));
    assert_eq!(
        t.stack.tcp_accept(t.listener.unwrap()).map(|_| ()),
        Err(ustack_stack::Error::WouldBlock)
    );
    t.send(Seg::ack(1001, s.seq.wrapping_add(1)));
    let (h, peer) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    assert_eq!(peer, ustack_testkit::tcp::PEER);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    assert_eq!(t.stack.mib().get(Counter::TcpPassiveOpens), 1);
}

/// SYN-ACK retransmission: 1 s, then doubling (RFC 6298 §2.1, §5.5), up to
/// tcp_synack_retries (5); then the request is dropped.
#[test]
fn synack_is_retransmitted_with_backoff_then_dropped() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    let first = t.recv().unwrap();
    let start = t.now;
    let sent = t.advance(Duration::from_secs(120));
    let gaps: Vec<u64> = sent
        .iter()
        .map(|(at, s)| {
            assert_eq!(s.seq, first.seq, "same ISN");
            (*at - start).as_secs()
        })
        .collect();
    assert_eq!(
        gaps,
        [1, 3, 7, 15, 31],
        "retransmitted at 1, 2, 4, 8, 16 s intervals"
    );
    assert_eq!(
        t.stack.tcp_resources().requests,
        0,
        "dropped after tcp_synack_retries"
    );
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPSynRetrans), 5);
}

/// Accept-queue overflow (Linux tcp_check_req -> listen_overflow): the final ACK is
/// dropped and counted (ListenOverflows, ListenDrops); with tcp_abort_on_overflow a RST.
/// A backlog of N holds N + 1 connections, as Linux's `sk_acceptq_is_full` (`>`).
#[test]
fn backlog_overflow_drops_final_ack_or_resets() {
    for abort in [0, 1] {
        let mut t = SegTest::new(80);
        t.stack
            .set_sysctl("net.ipv4.tcp_abort_on_overflow", abort)
            .unwrap();
        t.listen(1);
        // Two fit; the SYN-ACK of a third goes out (the SYN is admitted while the queue
        // is not over), its final ACK finds the queue over the backlog.
        let mut syns = Vec::new();
        for port in [40000u16, 40001, 40002] {
            let mut s = Seg::syn(5000);
            s.src_port = port;
            t.send(s);
            syns.push((port, t.recv().expect("SYN-ACK")));
        }
        for (port, s) in &syns[..2] {
            let mut ack = Seg::ack(5001, s.seq.wrapping_add(1));
            ack.src_port = *port;
            t.send(ack);
        }
        assert_eq!(t.stack.tcp_accept_queue_len(t.listener.unwrap()), Ok(2));
        let (port, s) = &syns[2];
        let mut ack = Seg::ack(5001, s.seq.wrapping_add(1));
        ack.src_port = *port;
        t.send(ack);
        let m = t.stack.mib();
        assert_eq!(
            (
                m.get(Counter::TcpExtListenOverflows),
                m.get(Counter::TcpExtListenDrops)
            ),
            (1, 1)
        );
        let reply = t.recv();
        if abort == 1 {
            assert!(
                reply.is_some_and(|r| r.has(Flags::RST)),
                "tcp_abort_on_overflow resets"
            );
        } else {
            // Dropped silently (the third SYN had found the SYN queue over the backlog and
            // got a cookie, so no state was kept either). Once the application accepts, the
            // peer's retransmitted ACK gets in: nothing is lost.
            assert_eq!(reply, None, "the ACK is silently dropped");
            assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesSent), 1);
            t.stack.tcp_accept(t.listener.unwrap()).unwrap();
            let mut again = Seg::ack(5001, s.seq.wrapping_add(1));
            again.src_port = *port;
            t.send(again);
            assert_eq!(
                t.stack.tcp_accept_queue_len(t.listener.unwrap()),
                Ok(2),
                "the retried ACK is a connection"
            );
        }
    }
}

/// SYN cookies (Linux tcp_syncookies = 2: always): no request kept; the cookie ACK
/// creates the connection with the options the timestamp encoded.
#[test]
fn syn_cookies_create_connections_without_state() {
    let mut t = SegTest::new(80);
    t.stack.set_sysctl("net.ipv4.tcp_syncookies", 2).unwrap();
    t.listen(128);
    t.send(Seg::syn(1000).mss(1460).wscale(7).sack_perm().ts(100, 0));
    let s = t.recv().expect("cookie SYN-ACK");
    assert_eq!(t.stack.tcp_resources().requests, 0, "no state for a cookie");
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesSent), 1);
    let (tsval, _) = s.ts.expect("timestamps carry the options");
    // A tampered cookie fails.
    t.send(Seg::ack(1001, s.seq.wrapping_add(2)).ts(101, tsval));
    assert!(t.recv().is_some_and(|r| r.has(Flags::RST)));
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesFailed), 1);
    t.send(Seg::ack(1001, s.seq.wrapping_add(1)).ts(101, tsval));
    let (h, _) = t
        .stack
        .tcp_accept(t.listener.unwrap())
        .expect("cookie connection accepted");
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesRecv), 1);
    assert!(
        info.sack && info.timestamps && info.wscale.map(|w| w.0) == Some(7),
        "{info:?}"
    );
}

/// RFC 5961 §3.2: a RST in the window but not at RCV.NXT gets a challenge ACK; one at
/// RCV.NXT resets the connection (ECONNRESET, EstabResets).
#[test]
fn rfc5961_rst_in_window_is_challenged_exact_rst_resets() {
    let mut t = SegTest::listening(80);
    let (_, h) = established(&mut t);
    t.send(Seg::rst(1001 + 100));
    let c = t.recv().expect("challenge ACK");
    assert!(c.has(Flags::ACK) && c.ack == 1001, "{c:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPChallengeACK), 1);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    t.send(Seg::rst(1001));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let mut buf = [0u8; 1];
    let now = t.now;
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Err(ustack_stack::Error::ConnectionReset)
    );
    assert_eq!(t.stack.mib().get(Counter::TcpEstabResets), 1);
}

/// RFC 5961 §4: any SYN in a synchronized state gets a challenge ACK, never a reset.
#[test]
fn rfc5961_syn_in_established_gets_challenge_ack() {
    let mut t = SegTest::listening(80);
    let (_, h) = established(&mut t);
    t.send(Seg::syn(1001));
    let c = t.recv().expect("challenge ACK");
    assert!(c.has(Flags::ACK) && !c.has(Flags::RST) && c.ack == 1001);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    assert_eq!(t.stack.mib().drops(DropReason::TcpInvalidSyn), 1);
}

/// RFC 5961 §5.2 / RFC 9293: an ACK for data never sent is answered with an ACK and
/// dropped; the connection is unharmed.
#[test]
fn ack_of_unsent_data_is_dropped_with_an_ack() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    t.send(Seg::ack(1001, iss.wrapping_add(1000)).data(b"x"));
    let a = t.recv().expect("an ACK");
    assert!(
        a.has(Flags::ACK) && a.ack == 1001,
        "data not accepted: {a:?}"
    );
    assert_eq!(t.stack.mib().drops(DropReason::TcpAckUnsentData), 1);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
}

/// RFC 9293 §3.10.7.4 first check: a segment outside the window is answered with an
/// ACK and dropped.
#[test]
fn out_of_window_segment_gets_ack_and_is_dropped() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    t.send(Seg::ack(1001 + 10_000_000, iss.wrapping_add(1)).data(b"far away"));
    let a = t.recv().expect("ACK");
    assert_eq!(a.ack, 1001);
    let mut buf = [0u8; 16];
    let now = t.now;
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Err(ustack_stack::Error::WouldBlock)
    );
}

/// RFC 7323 §5.3 PAWS: a segment whose TSval is older than TS.Recent is dropped (and
/// ACKed), counted PAWSEstab.
#[test]
fn paws_drops_old_timestamps() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000).ts(5000, 0));
    let s = t.recv().unwrap();
    let ours = s.ts.unwrap().0;
    t.send(Seg::ack(1001, s.seq.wrapping_add(1)).ts(5001, ours));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
    t.send(
        Seg::ack(1001, s.seq.wrapping_add(1))
            .ts(4000, ours)
            .data(b"old"),
    );
    assert!(t.recv().is_some(), "an ACK goes back");
    assert_eq!(t.stack.mib().get(Counter::TcpExtPAWSEstab), 1);
    let mut buf = [0u8; 8];
    let now = t.now;
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Err(ustack_stack::Error::WouldBlock),
        "old data not accepted"
    );
    t.send(
        Seg::ack(1001, s.seq.wrapping_add(1))
            .ts(5002, ours)
            .data(b"new"),
    );
    let now = t.now;
    assert_eq!(t.stack.tcp_recv(now, h, &mut buf), Ok(3));
}

/// Out-of-order data gets an immediate duplicate ACK with a SACK block (RFC 5681 §4.2,
/// RFC 2018 §4); the hole's arrival gets an ACK for everything.
#[test]
fn out_of_order_data_is_sacked_then_acked_whole() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000).sack_perm());
    let s = t.recv().unwrap();
    let iss = s.seq;
    t.send(Seg::ack(1001, iss.wrapping_add(1)));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
    t.send(Seg::ack(1011, iss.wrapping_add(1)).data(b"0123456789"));
    let d = t.recv().expect("immediate dup ACK");
    assert_eq!((d.ack, d.sack.clone()), (1001, vec![(1011, 1021)]));
    t.send(Seg::ack(1001, iss.wrapping_add(1)).data(b"abcdefghij"));
    let a = t.recv().expect("ACK of the whole");
    assert_eq!((a.ack, a.sack.len()), (1021, 0));
    let mut buf = [0u8; 32];
    let now = t.now;
    assert_eq!(t.stack.tcp_recv(now, h, &mut buf), Ok(20));
    assert_eq!(&buf[..20], b"abcdefghij0123456789");
}

/// Delayed ACK (RFC 9293 §3.8.6.3): after Linux's quick-ACK phase a lone segment is
/// acknowledged after the delayed-ACK timeout (40 ms), and every second full segment at once.
#[test]
fn delayed_ack_after_quickack_phase() {
    let mut t = SegTest::listening(80);
    let (iss, _) = established(&mut t);
    let mut seq = 1001u32;
    for _ in 0..16 {
        t.send(Seg::ack(seq, iss.wrapping_add(1)).data(&[1; 100]));
        assert!(t.recv().is_some(), "quick ACK");
        seq += 100;
    }
    t.send(Seg::ack(seq, iss.wrapping_add(1)).data(&[1; 100]));
    assert_eq!(t.recv(), None, "delayed");
    let sent = t.advance(Duration::from_millis(50));
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].0 - t.now + Duration::from_millis(50) >= Duration::from_millis(39),
        "after ~40 ms"
    );
    assert_eq!(sent[0].1.ack, seq + 100);
    assert_eq!(t.stack.mib().get(Counter::TcpExtDelayedACKs), 1);
}

/// Passive close (RFC 9293 §3.10.7.4 eighth step, §3.10.4): FIN -> CLOSE-WAIT with an
/// ACK; close -> our FIN (LAST-ACK); its ACK -> CLOSED, nothing left.
#[test]
fn passive_close_close_wait_last_ack_closed() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    t.send(Seg::ack(1001, iss.wrapping_add(1)).flags(Flags::FIN));
    let a = t.recv().expect("ACK of FIN");
    assert_eq!(a.ack, 1002);
    assert_eq!(t.stack.tcp_state(h), Ok(State::CloseWait));
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let f = t.recv().expect("our FIN");
    assert!(f.has(Flags::FIN | Flags::ACK) && f.seq == iss.wrapping_add(1));
    t.send(Seg::ack(1002, iss.wrapping_add(2)));
    let r = t.stack.tcp_resources();
    assert_eq!(
        (r.connections, r.timewait, r.buffer_bytes),
        (0, 0, 0),
        "passive closer holds no TIME-WAIT"
    );
}

/// Passive close after data (the end of a request and its response): the FIN that takes
/// ESTABLISHED to CLOSE-WAIT is acknowledged late, as Linux's `tcp_fin` leaves it
/// (pingpong mode, the delayed-ACK timer), so the close that follows at once sends our
/// FIN with that ACK: three segments end the connection, as on Linux's loopback (FIN,
/// FIN-ACK, ACK), not four.
#[test]
fn passive_close_after_data_acks_the_fin_with_ours() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    t.send(Seg::ack(1001, iss.wrapping_add(1)).data(b"request"));
    assert!(
        t.recv().is_some_and(|a| a.ack == 1008),
        "quick ACK of the data"
    );
    assert_eq!(t.read(h).as_deref(), Some(&b"request"[..]));
    t.send(Seg::ack(1008, iss.wrapping_add(1)).flags(Flags::FIN));
    assert_eq!(t.recv(), None, "the FIN's ACK delayed");
    assert_eq!(t.stack.tcp_state(h), Ok(State::CloseWait));
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let f = t.recv().expect("our FIN");
    assert!(
        f.has(Flags::FIN | Flags::ACK) && f.seq == iss.wrapping_add(1),
        "{f:?}"
    );
    assert_eq!(f.ack, 1009, "our FIN acknowledges theirs");
    assert!(
        t.advance(Duration::from_millis(100)).is_empty(),
        "nothing more (before our FIN's RTO): the delayed ACK went with our FIN"
    );
    assert_eq!(t.stack.mib().get(Counter::TcpExtDelayedACKs), 0);
    t.send(Seg::ack(1009, iss.wrapping_add(2)));
    let r = t.stack.tcp_resources();
    assert_eq!((r.connections, r.timewait), (0, 0));
}

/// The same FIN when the application does not close at once: its ACK leaves with the
/// delayed-ACK timer, about 40 ms later (Linux `tcp_send_delayed_ack` at the ATO,
/// counted DelayedACKs), and our FIN sent later carries the same acknowledgment.
#[test]
fn fin_after_data_is_acknowledged_by_the_delayed_ack_timer() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    t.send(Seg::ack(1001, iss.wrapping_add(1)).data(b"request"));
    assert!(t.recv().is_some(), "quick ACK of the data");
    assert_eq!(t.read(h).as_deref(), Some(&b"request"[..]));
    let start = t.now;
    t.send(Seg::ack(1008, iss.wrapping_add(1)).flags(Flags::FIN));
    assert_eq!(t.recv(), None, "the FIN's ACK delayed");
    let sent = t.advance(Duration::from_millis(500));
    assert_eq!(sent.len(), 1, "one ACK: {sent:?}");
    let (at, a) = &sent[0];
    assert!(
        a.has(Flags::ACK) && !a.has(Flags::FIN) && a.ack == 1009,
        "{a:?}"
    );
    let waited = *at - start;
    assert!(
        waited >= Duration::from_millis(39) && waited <= Duration::from_millis(200),
        "after the delayed-ACK timeout: {waited:?}"
    );
    assert_eq!(t.stack.mib().get(Counter::TcpExtDelayedACKs), 1);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let f = t.recv().expect("our FIN");
    assert!(f.has(Flags::FIN | Flags::ACK) && f.ack == 1009, "{f:?}");
}

/// TIME-WAIT (RFC 9293 §3.10.7.4): a retransmitted FIN is re-acknowledged; a new SYN with
/// a higher sequence number opens a new connection (Linux TCP_TW_SYN).
#[test]
fn time_wait_reacks_fin_and_accepts_newer_syn() {
    let mut t = SegTest::listening(80);
    let (iss, h) = established(&mut t);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let f = t.recv().expect("our FIN");
    t.send(Seg::ack(1001, f.seq.wrapping_add(1)).flags(Flags::FIN));
    assert!(t.recv().is_some_and(|a| a.ack == 1002), "ACK of their FIN");
    assert_eq!(t.stack.tcp_resources().timewait, 1);
    t.send(Seg::ack(1001, f.seq.wrapping_add(1)).flags(Flags::FIN));
    assert!(
        t.recv().is_some_and(|a| a.has(Flags::ACK) && a.ack == 1002),
        "retransmitted FIN re-ACKed"
    );
    t.send(Seg::syn(1_000_000));
    let s = t.recv().expect("SYN-ACK for the new incarnation");
    assert!(s.has(Flags::SYN | Flags::ACK) && s.ack == 1_000_001);
    assert_eq!(t.stack.tcp_resources().timewait, 0);
    let _ = iss;
}

/// RFC 6298 §5: unacknowledged data is retransmitted when the RTO expires, the RTO
/// doubling each time; after tcp_retries2 the connection fails with ETIMEDOUT.
#[test]
fn rto_backoff_and_timeout() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_retries2", 4).unwrap();
    let (_, h) = established(&mut t);
    let now = t.now;
    t.stack.tcp_send(now, h, b"hello").unwrap();
    let first = t.recv().expect("data");
    assert_eq!(first.payload, b"hello");
    let start = t.now;
    let sent = t.advance(Duration::from_secs(600));
    let times: Vec<u64> = sent
        .iter()
        .filter(|(_, s)| s.payload == b"hello")
        .map(|(at, _)| (*at - start).as_millis() as u64)
        .collect();
    assert_eq!(times.len(), 4, "{times:?}");
    // RFC 6298 §5.5: each expiry doubles the RTO, so the gaps between successive
    // transmissions (the first at 0) double: 200, 400, 800, 1600 ms. The handshake gave
    // an RTT sample of 0 (Linux tcp_synack_rtt_meas), so the first RTO is the 200 ms
    // floor (RFC 6298 §2.4 rounds up to 1 s; Linux's TCP_RTO_MIN is 200 ms).
    let sends: Vec<u64> = core::iter::once(0).chain(times.iter().copied()).collect();
    let gaps: Vec<u64> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps[0], 200, "the first RTO is the 200 ms floor: {gaps:?}");
    for g in gaps.windows(2) {
        assert_eq!(g[1], 2 * g[0], "the RTO doubles: {gaps:?}");
    }
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    let mut buf = [0u8; 1];
    let now = t.now;
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Err(ustack_stack::Error::TimedOut)
    );
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpRetransSegs), 4);
    // Linux 6.x counts every expiry, the final one (which aborts) included.
    assert_eq!(m.get(Counter::TcpExtTCPTimeouts), 5);
    assert_eq!(m.get(Counter::TcpExtTCPAbortOnTimeout), 1);
}

/// Simultaneous open (RFC 9293 §3.5 figure 7): SYN-SENT receives a SYN, answers SYN-ACK,
/// and the ACK of its SYN makes it ESTABLISHED.
#[test]
fn simultaneous_open() {
    let mut t = SegTest::new(40000);
    let now = t.now;
    let h = t.stack.tcp_connect(now, ustack_testkit::tcp::PEER).unwrap();
    let syn = t.recv().expect("our SYN");
    let mut theirs = Seg::syn(7000);
    theirs.dst_port = syn.src_port;
    t.send(theirs);
    let sa = t.recv().expect("SYN-ACK");
    assert!(
        sa.has(Flags::SYN | Flags::ACK) && sa.seq == syn.seq && sa.ack == 7001,
        "{sa:?}"
    );
    assert_eq!(t.stack.tcp_state(h), Ok(State::SynReceived));
    let mut ack = Seg::ack(7001, syn.seq.wrapping_add(1));
    ack.dst_port = syn.src_port;
    t.send(ack);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
}

/// Issue #3: "A listener must be able to absorb a burst of 100,000 SYNs without losing a
/// connection (backlog at 4096 and cookies on)". The SYNs arrive at once from 100,000
/// distinct peers; the first backlog+1 get request records, the rest cookies. Then the
/// final ACKs come in waves while the application accepts; an ACK that finds the accept
/// queue full is dropped and retried by its peer (as a real peer's retransmission or
/// data would), and in the end every one of the 100,000 is accepted.
#[test]
fn listener_absorbs_a_burst_of_100k_syns() {
    use core::net::{Ipv4Addr, SocketAddrV4};
    const N: u32 = 100_000;
    let mut t = SegTest::new(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_max_syn_backlog", 4096)
        .unwrap();
    t.listen(4096);
    let l = t.listener.unwrap();
    // Peers 198.18.x.y (RFC 2544 benchmarking space): built directly, as the harness speaks as one peer.
    let peer = |i: u32| {
        SocketAddrV4::new(
            Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8),
            1024 + (i >> 16) as u16,
        )
    };
    let send = |t: &mut SegTest, i: u32, seg: Seg| {
        let mut seg = seg;
        let p = peer(i);
        seg.src_port = p.port();
        seg.dst_port = 80;
        let packet = ustack_testkit::tcp::build(&seg, *p.ip(), ustack_testkit::tcp::LOCAL_IP);
        t.stack.receive(t.now, &packet);
    };
    let mut synack_seq = vec![0u32; N as usize];
    for i in 0..N {
        send(&mut t, i, Seg::syn(i * 7).mss(1460).ts(1, 0));
        let s = t.recv().expect("every SYN is answered");
        assert!(s.has(Flags::SYN | Flags::ACK) && s.ack == i * 7 + 1);
        synack_seq[i as usize] = s.seq;
    }
    let m = t.stack.mib();
    assert_eq!(
        m.get(Counter::TcpExtSyncookiesSent),
        u64::from(N) - 4097,
        "past the backlog, cookies"
    );
    assert_eq!(m.get(Counter::TcpExtListenDrops), 0, "no SYN dropped");
    let mut accepted = 0u32;
    let mut pending: Vec<u32> = (0..N).collect();
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        assert!(rounds < 100, "{} never got in", pending.len());
        let mut retry = Vec::new();
        for &i in &pending {
            let before = t.stack.tcp_accept_queue_len(l).unwrap();
            send(
                &mut t,
                i,
                Seg::ack(i * 7 + 1, synack_seq[i as usize].wrapping_add(1)),
            );
            if t.stack.tcp_accept_queue_len(l).unwrap() == before {
                retry.push(i);
            }
            // The application accepts at its own pace: one for every two ACKs.
            if i % 2 == 0 && t.stack.tcp_accept(l).is_ok() {
                accepted += 1;
            }
        }
        while t.stack.tcp_accept(l).is_ok() {
            accepted += 1;
        }
        while t.recv().is_some() {}
        pending = retry;
    }
    assert_eq!(accepted, N, "every connection accepted");
    assert_eq!(t.stack.mib().get(Counter::TcpPassiveOpens), u64::from(N));
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesFailed), 0);
}

/// `bind(2)` then `connect(2)`: a connection from a chosen local port uses exactly that
/// port, and a port whose 4-tuple is taken is refused with EADDRINUSE.
#[test]
fn connect_from_a_chosen_port() {
    let mut t = SegTest::new(80);
    let now = t.now;
    let h = t
        .stack
        .tcp_connect_from(now, 45_000, ustack_testkit::tcp::PEER)
        .unwrap();
    let syn = t.recv().expect("SYN");
    assert_eq!(syn.src_port, 45_000);
    assert_eq!(t.stack.tcp_info(h).unwrap().local.port(), 45_000);
    assert_eq!(
        t.stack
            .tcp_connect_from(now, 45_000, ustack_testkit::tcp::PEER),
        Err(ustack_stack::Error::AddrInUse)
    );
    assert_eq!(
        t.stack.tcp_connect_from(now, 0, ustack_testkit::tcp::PEER),
        Err(ustack_stack::Error::InvalidArgument)
    );
}

/// Recycled frame buffers (`Stack::recycle`) never leak an old frame's bytes: a stack
/// given buffers full of 0xAA sends byte for byte what a stack allocating fresh ones sends.
#[test]
fn recycled_frames_never_leak_old_bytes() {
    let run = |poison: bool| {
        let mut t = SegTest::listening(80);
        let (_, h) = established(&mut t);
        if poison {
            t.stack.recycle(vec![0xAA; 70_000]);
            t.stack.recycle(vec![0xAA; 60]);
        }
        let now = t.now;
        t.stack.tcp_send(now, h, b"hello").unwrap();
        let mut frames = Vec::new();
        while let Some(f) = t.stack.poll_transmit(now) {
            frames.push(f);
        }
        frames
    };
    let fresh = run(false);
    assert!(!fresh.is_empty());
    assert_eq!(run(true), fresh);
}
