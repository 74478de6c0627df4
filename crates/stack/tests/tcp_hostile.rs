//! The peer as attacker (issue #10): secrets from the OS, SYN cookies only under a flood,
//! challenge ACKs limited per socket (CVE-2016-5696), malformed options kept as Linux
//! keeps them, counters with Linux's meaning, and arithmetic a peer cannot make panic.
//! Crafted segments against one stack on a virtual clock (`ustack_testkit::tcp`).

use core::net::IpAddr;
use core::time::Duration;

use ustack_obs::{Counter, DropReason};
use ustack_stack::tcp::State;
use ustack_stack::{Config, Ipv4Cidr, Stack, TcpHandle};
use ustack_testkit::tcp::{LOCAL_IP, Lcg, PEER, Seg, SegTest, build, parse};
use ustack_wire::SeqNumber;
use ustack_wire::tcp::{self, Flags};

/// A stack as a user builds it, with no seed: its secrets come from the OS.
fn default_stack(t: &mut SegTest) {
    let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24));
    c.gateway = Some(*PEER.ip());
    assert_eq!(c.seed, None, "Config::ip asks for no seed");
    t.stack = Stack::new(c);
}

/// The SYN-ACK's ISN and TSval offset from a listener on port 80 for one fixed SYN at one
/// fixed time.
fn synack_for_fixed_syn(t: &mut SegTest) -> (u32, u32) {
    t.listen(128);
    t.send(Seg::syn(1000).mss(1460).ts(777, 0));
    let s = t.recv().expect("SYN-ACK");
    assert!(s.has(Flags::SYN | Flags::ACK), "{s:?}");
    (s.seq, s.ts.expect("timestamps").0)
}

/// RFC 6528 §3: the ISN is M + F(4-tuple, secretkey) and "F() MUST NOT be computable from
/// the outside". Two default-built stacks answering the same SYN at the same instant (same
/// 4-tuple, same clock) choose different ISNs and timestamp offsets, so the ISN is not a
/// function of the 4-tuple and time alone; with the same explicit seed they agree (a seed
/// replays, and is only for tests). Catches: a default seed (the old `seed: 0`), or keys
/// not drawn from the OS.
#[test]
fn default_stacks_draw_isns_from_secret_keys() {
    let mut a = SegTest::new(80);
    let mut b = SegTest::new(80);
    default_stack(&mut a);
    default_stack(&mut b);
    let (isn_a, ts_a) = synack_for_fixed_syn(&mut a);
    let (isn_b, ts_b) = synack_for_fixed_syn(&mut b);
    assert_ne!(isn_a, isn_b, "same 4-tuple, same time, different secret");
    assert_ne!(ts_a, ts_b, "timestamp offsets are secret too");

    let mut c = SegTest::new(80);
    let mut d = SegTest::new(80);
    assert_eq!(
        synack_for_fixed_syn(&mut c),
        synack_for_fixed_syn(&mut d),
        "an explicit seed replays"
    );
}

/// What a cookie SYN-ACK from a stack with the test seed (42) says for a SYN from `port`
/// with ISN 1000 at the test's time: its sequence number, the cookie.
fn cookie_for(port: u16, at: ustack_stack::Instant) -> u32 {
    let mut oracle = SegTest::new(80);
    oracle.now = at;
    oracle
        .stack
        .set_sysctl("net.ipv4.tcp_syncookies", 2)
        .unwrap();
    oracle.listen(128);
    let mut syn = Seg::syn(1000);
    syn.src_port = port;
    oracle.send(syn);
    let s = oracle.recv().expect("cookie SYN-ACK");
    assert_eq!(oracle.stack.mib().get(Counter::TcpExtSyncookiesSent), 1);
    s.seq
}

fn cookie_ack(port: u16, cookie: u32) -> Seg {
    let mut ack = Seg::ack(1001, cookie.wrapping_add(1));
    ack.src_port = port;
    ack
}

/// Linux `cookie_v4_check`: "if (tcp_synq_no_recent_overflow(sk)) goto out;" — an ACK
/// is checked as a cookie only within TCP_SYNCOOKIE_VALID (2 min) of the listener's last
/// SYN-queue overflow. A cookie right for the secret (forged here by a second stack with
/// the same test seed) is refused with a RST without a recent overflow, accepted just after
/// one, and refused again once the overflow is over 2 minutes old; SyncookiesFailed does
/// not rise when no flood is on. Catches: cookies checked at any time (the old behaviour),
/// the overflow time never recorded, or a window that never closes.
#[test]
fn forged_cookie_ack_is_accepted_only_after_a_recent_overflow() {
    let mut t = SegTest::new(80);
    t.listen(0);
    let listener = t.listener.unwrap();

    // No flood: a bare ACK with a valid cookie is not a cookie. RST, no connection.
    t.send(cookie_ack(40_000, cookie_for(40_000, t.now)));
    let r = t.recv().expect("an answer");
    assert!(r.has(Flags::RST), "{r:?}");
    assert!(t.stack.tcp_accept(listener).is_err(), "no connection");
    // Nor is a garbage one counted as a failed cookie.
    t.send(cookie_ack(40_000, 0xdead_beef));
    assert!(t.recv().is_some_and(|r| r.has(Flags::RST)));
    let m = t.stack.mib();
    assert_eq!(
        m.get(Counter::TcpExtSyncookiesFailed),
        0,
        "no flood, no cookie checks"
    );
    assert_eq!(m.get(Counter::TcpExtSyncookiesRecv), 0);
    assert_eq!(m.drops(DropReason::TcpFlags), 2);

    // The SYN queue overflows (backlog 0: the second SYN gets a cookie).
    for port in [41_000, 41_001] {
        let mut syn = Seg::syn(5000);
        syn.src_port = port;
        t.send(syn);
        assert!(t.recv().is_some_and(|s| s.has(Flags::SYN | Flags::ACK)));
    }
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesSent), 1);
    // Now the same forged ACK makes a connection.
    t.send(cookie_ack(40_000, cookie_for(40_000, t.now)));
    let (h, peer) = t
        .stack
        .tcp_accept(listener)
        .expect("cookie accepted after overflow");
    assert_eq!(peer.port(), 40_000);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesRecv), 1);
    // A wrong cookie during the flood is a failed cookie.
    t.send(cookie_ack(40_001, 0xdead_beef));
    assert!(t.recv_all().iter().any(|r| r.has(Flags::RST)));
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesFailed), 1);

    // 2 minutes and 1 second after the overflow, a fresh cookie is refused again.
    t.advance(Duration::from_secs(121));
    t.recv_all();
    t.send(cookie_ack(40_002, cookie_for(40_002, t.now)));
    assert!(t.recv_all().iter().any(|r| r.has(Flags::RST)));
    assert!(t.stack.tcp_accept(listener).is_err(), "window closed");
    assert_eq!(t.stack.mib().get(Counter::TcpExtSyncookiesRecv), 1);
}

/// An established connection on port 80 from PEER (ISN 1000) and a second one from
/// `PEER.port() + 1`: (handle, our ISN) of each.
fn two_connections(t: &mut SegTest) -> [(TcpHandle, u32); 2] {
    let l = t.listener.unwrap();
    let iss0 = t.handshake(1000);
    let (h0, _) = t.stack.tcp_accept(l).unwrap();
    let mut syn = Seg::syn(1000);
    syn.src_port = PEER.port() + 1;
    t.send(syn);
    let s = t.recv().unwrap();
    let mut ack = Seg::ack(1001, s.seq.wrapping_add(1));
    ack.src_port = PEER.port() + 1;
    t.send(ack);
    let (h1, _) = t.stack.tcp_accept(l).unwrap();
    [(h0, iss0), (h1, s.seq)]
}

fn challenges(t: &SegTest) -> u64 {
    t.stack.mib().get(Counter::TcpExtTCPChallengeACK)
}

/// CVE-2016-5696, the Linux 6.x fix: challenge ACKs (RFC 5961 §3.2 for a RST in the window
/// but not at RCV.NXT, §4.2 for a SYN) are limited per connection, at most one per
/// `tcp_invalid_ratelimit` (500 ms; Linux `__tcp_oow_rate_limited`, TCPACKSkippedChallenge
/// for the rest), and the stack-wide `tcp_challenge_ack_limit` is off (INT_MAX). A blind
/// flood of RSTs and SYNs at one connection draws one ACK per 500 ms of (virtual) time and
/// leaves the connection open; another connection gets its own. Catches: no per-socket
/// limit (ten ACKs for ten RSTs), a limit that never expires, a stack-wide limit shared by
/// the two connections.
#[test]
fn blind_rst_and_syn_get_one_challenge_ack_per_ratelimit_per_socket() {
    let mut t = SegTest::listening(80);
    assert_eq!(
        t.stack.sysctl().tcp_challenge_ack_limit,
        i32::MAX as u64,
        "Linux 6.0+: no stack-wide limit"
    );
    assert_eq!(t.stack.sysctl().tcp_invalid_ratelimit, 500);
    let [(h0, _), (h1, _)] = two_connections(&mut t);
    for i in 0..10 {
        t.send(Seg::rst(1001 + 100 + i));
        t.send(Seg::syn(1001 + 200 + i));
    }
    let acks = t.recv_all();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert!(acks[0].has(Flags::ACK) && acks[0].ack == 1001, "{acks:?}");
    assert_eq!(challenges(&t), 1);
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPACKSkippedChallenge), 19);
    assert_eq!(t.stack.tcp_state(h0), Ok(State::Established));

    // The other connection is limited on its own.
    let mut rst = Seg::rst(1001 + 100);
    rst.src_port = PEER.port() + 1;
    t.send(rst);
    assert_eq!(t.recv_all().len(), 1, "a second socket has its own limit");
    assert_eq!(challenges(&t), 2);

    // 499 ms on, still limited; at 500 ms, one more.
    t.advance(Duration::from_millis(499));
    t.recv_all();
    t.send(Seg::syn(1001 + 300));
    assert!(t.recv_all().is_empty());
    t.advance(Duration::from_millis(1));
    t.recv_all();
    t.send(Seg::syn(1001 + 301));
    t.send(Seg::rst(1001 + 302));
    assert_eq!(t.recv_all().len(), 1);
    assert_eq!(challenges(&t), 3);
    assert_eq!(t.stack.tcp_state(h0), Ok(State::Established));
    assert_eq!(t.stack.tcp_state(h1), Ok(State::Established));
}

/// With `tcp_challenge_ack_limit` set, Linux draws each second's allowance at random in
/// [limit/2, limit/2 + limit): with a limit of 4, 20 connections each drawing one challenge
/// ACK in the same second get between 2 and 5 of them. Catches: the limit ignored, or a
/// fixed count of exactly `limit` every second (the pre-2016 side channel) — over 20
/// seconds the allowances are not all equal.
#[test]
fn a_set_challenge_ack_limit_is_randomised_per_second() {
    let mut t = SegTest::new(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_challenge_ack_limit", 4)
        .unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_invalid_ratelimit", 0)
        .unwrap();
    t.listen(128);
    let l = t.listener.unwrap();
    let ports: Vec<u16> = (0..20).map(|i| 42_000 + i).collect();
    let mut isns = Vec::new();
    for &port in &ports {
        let mut syn = Seg::syn(1000);
        syn.src_port = port;
        t.send(syn);
        let s = t.recv().unwrap();
        isns.push(s.seq);
        let mut ack = Seg::ack(1001, s.seq.wrapping_add(1));
        ack.src_port = port;
        t.send(ack);
        t.stack.tcp_accept(l).unwrap();
    }
    let mut per_second = Vec::new();
    for _ in 0..20 {
        t.advance(Duration::from_secs(1));
        t.recv_all();
        for &port in &ports {
            let mut rst = Seg::rst(1001 + 10);
            rst.src_port = port;
            t.send(rst);
        }
        let n = t.recv_all().len();
        assert!((2..=5).contains(&n), "{n} challenge ACKs in one second");
        per_second.push(n);
    }
    assert!(
        per_second.iter().any(|&n| n != per_second[0]),
        "the allowance varies: {per_second:?}"
    );
}

/// Linux tcp_validate_incoming: a SYN that fails the sequence test, or PAWS, is still a
/// SYN ("if (th->syn) goto syn_challenge;"): challenge ACK, TCPSYNChallenge, drop reason
/// TCP_INVALID_SYN, not TCP_INVALID_SEQUENCE or TCP_RFC7323_PAWS. Catches: the old path (a
/// dup ACK counted as an invalid sequence) and a PAWS drop of a SYN.
#[test]
fn syn_out_of_window_or_failing_paws_is_a_syn_challenge() {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(1000).ts(1_000, 0), 65_535);
    let (ours, _) = synack.ts.expect("timestamps");
    t.send(Seg::syn(1001u32.wrapping_add(0x4000_0000)).ts(1_001, ours));
    let a = t.recv().expect("challenge ACK");
    assert!(
        a.has(Flags::ACK) && !a.has(Flags::SYN) && a.ack == 1001,
        "{a:?}"
    );
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPSYNChallenge), 1);
    assert_eq!(m.get(Counter::TcpExtTCPChallengeACK), 1);
    assert_eq!(m.drops(DropReason::TcpInvalidSyn), 1);
    assert_eq!(m.drops(DropReason::TcpInvalidSequence), 0);

    // In the window, but with a TSval older than TS.Recent.
    t.advance(Duration::from_secs(1));
    t.recv_all();
    t.send(Seg::syn(1001).ts(500, ours));
    let a = t.recv().expect("challenge ACK");
    assert!(
        a.has(Flags::ACK) && !a.has(Flags::SYN) && a.ack == 1001,
        "{a:?}"
    );
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPSYNChallenge), 2);
    assert_eq!(m.drops(DropReason::TcpPaws), 0);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
}

/// Linux tcp_validate_incoming: the duplicate ACK answering an out-of-window or
/// PAWS-failing bare segment is rate-limited per socket by `tcp_oow_rate_limited` (one per
/// `tcp_invalid_ratelimit`, the rest counted TCPACKSkippedSeq / TCPACKSkippedPAWS), so a
/// flood cannot turn the stack into an ACK reflector or start an ACK loop; segments with
/// data are always answered. Catches: no limit (20 answers), a limit that never expires,
/// the wrong counter, data left unanswered.
#[test]
fn out_of_window_and_paws_dup_acks_are_rate_limited_per_socket() {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(1000).ts(1_000, 0), 65_535);
    let (ours, _) = synack.ts.expect("timestamps");
    let far = 1001u32.wrapping_add(0x4000_0000);
    for i in 0..10 {
        t.send(Seg::ack(far + i, synack.seq + 1).ts(2_000, ours));
    }
    let acks = t.recv_all();
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert!(acks[0].has(Flags::ACK) && acks[0].ack == 1001, "{acks:?}");
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPACKSkippedSeq), 9);
    assert_eq!(m.drops(DropReason::TcpInvalidSequence), 10);

    // Out-of-window data is answered all the same (Linux: "Data packets without SYNs are
    // not likely part of an ACK loop").
    t.send(Seg::ack(far, synack.seq + 1).ts(2_000, ours).data(b"x"));
    assert_eq!(t.recv_all().len(), 1);
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPACKSkippedSeq), 9);

    // 500 ms on: PAWS-failing bare ACKs (TSval older than TS.Recent 2000... TS.Recent
    // stays 1000, the out-of-window ones did not update it) get one answer, PAWS counted.
    t.advance(Duration::from_millis(500));
    t.recv_all();
    for _ in 0..10 {
        t.send(Seg::ack(1001, synack.seq + 1).ts(500, ours));
    }
    assert_eq!(t.recv_all().len(), 1);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPACKSkippedPAWS), 9);
    assert_eq!(m.get(Counter::TcpExtPAWSEstab), 10);
    assert_eq!(m.get(Counter::TcpExtTCPACKSkippedSeq), 9);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
}

/// Linux tcp_check_req: a RST that removes a SYN-RECV request counts the failed attempt
/// (AttemptFails) and EmbryonicRsts. Catches: the request dropped uncounted.
#[test]
fn rst_removing_a_request_counts_attempt_fails() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    assert!(t.recv().is_some_and(|s| s.has(Flags::SYN | Flags::ACK)));
    assert_eq!(t.stack.tcp_resources().requests, 1);
    t.send(Seg::rst(1001));
    assert_eq!(t.stack.tcp_resources().requests, 0);
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpAttemptFails), 1);
    assert_eq!(m.get(Counter::TcpExtEmbryonicRsts), 1);
    assert_eq!(m.drops(DropReason::TcpReset), 1);
}

/// `seg` as a packet from PEER whose 4 option bytes are replaced by `options`, checksum
/// fixed. `seg` must carry exactly an MSS option (4 bytes).
fn with_raw_options(seg: &Seg, options: [u8; 4]) -> Vec<u8> {
    let mut seg = seg.clone();
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    let mut p = build(&seg, *PEER.ip(), LOCAL_IP);
    let ihl = usize::from(p[0] & 0x0f) * 4;
    assert_eq!(p[ihl + 12] >> 4, 6, "a 24-byte TCP header");
    p[ihl + 20..ihl + 24].copy_from_slice(&options);
    let (src, dst) = (IpAddr::V4(*PEER.ip()), IpAddr::V4(LOCAL_IP));
    tcp::Packet::new_unchecked(&mut p[ihl..]).fill_checksum(&src, &dst);
    p
}

/// Linux tcp_parse_options: a malformed option (length 0 or 1, or past the header) ends
/// option parsing and the segment is processed; a known option of the wrong length is
/// ignored. So a SYN with one gets a SYN-ACK (with MSS 536 assumed, RFC 9293 §3.7.1), and
/// data with one is delivered. Catches: the old drop of the whole segment (TCP_HDR).
#[test]
fn segments_with_malformed_options_are_kept() {
    for (i, options) in [
        [30, 0, 0, 0], // length 0
        [30, 1, 0, 0], // length 1
        [30, 9, 0, 0], // past the header
        [2, 3, 5, 0],  // MSS of length 3
        [2, 0, 0, 0],  // MSS of length 0
    ]
    .into_iter()
    .enumerate()
    {
        let mut t = SegTest::listening(80);
        let syn = Seg::syn(1000).mss(1460);
        let now = t.now;
        t.stack.receive(now, &with_raw_options(&syn, options));
        let s = t
            .recv()
            .unwrap_or_else(|| panic!("{options:?}: no SYN-ACK"));
        assert!(s.has(Flags::SYN | Flags::ACK) && s.ack == 1001, "{s:?}");
        assert_eq!(t.stack.mib().drops(DropReason::TcpHdr), 0, "{options:?}");
        t.send(Seg::ack(1001, s.seq.wrapping_add(1)));
        let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
        assert_eq!(t.stack.tcp_info(h).unwrap().mss, 536, "{options:?}");

        // Data on an established connection with the same options.
        let data = Seg::ack(1001, s.seq.wrapping_add(1))
            .data(&[i as u8; 10])
            .mss(1460);
        let now = t.now;
        t.stack.receive(now, &with_raw_options(&data, options));
        assert_eq!(t.read(h).unwrap(), vec![i as u8; 10], "{options:?}");
    }
}

/// Sequence arithmetic cannot be made to panic: `SeqNumber` subtraction in the wrong order
/// is 0 (not a panic, in debug or release builds), and 20,000 segments with arbitrary
/// flags, sequence and acknowledgment numbers, windows and options thrown at a listener and
/// an established connection leave the stack running. Catches: the old `assert!` in
/// `SeqNumber - SeqNumber`, and any path a peer can drive into a misordered subtraction.
#[test]
fn arbitrary_segments_do_not_panic_the_stack() {
    assert_eq!(SeqNumber(5) - SeqNumber(6), 0);
    assert_eq!(SeqNumber(0) - SeqNumber(u32::MAX), 1);
    let mut t = SegTest::listening(80);
    let iss = t.handshake(1000);
    let l = t.listener.unwrap();
    let (h, _) = t.stack.tcp_accept(l).unwrap();
    t.write(h, &[7u8; 20_000]);
    let mut rng = Lcg(0x5eed);
    let near = |rng: &mut Lcg, base: u32| {
        base.wrapping_add(rng.next_u32() % 70_000)
            .wrapping_sub(5_000)
    };
    for i in 0..20_000u32 {
        let flags = Flags((rng.next_u32() & 0xff) as u8);
        let seq = if i % 2 == 0 {
            near(&mut rng, 1001)
        } else {
            rng.next_u32()
        };
        let ack = if i % 3 == 0 {
            near(&mut rng, iss)
        } else {
            rng.next_u32()
        };
        let mut seg = Seg {
            flags,
            seq,
            ack,
            window: rng.next_u32() as u16,
            src_port: PEER.port() + u16::from(i % 4 == 0) * 7,
            ..Seg::default()
        };
        if rng.next_u32().is_multiple_of(4) {
            seg.payload = vec![1; (rng.next_u32() % 1500) as usize];
        }
        if rng.next_u32().is_multiple_of(3) {
            let a = rng.next_u32();
            seg.sack = vec![(a, a.wrapping_add(rng.next_u32() % 5000))];
        }
        if rng.next_u32().is_multiple_of(3) {
            seg.ts = Some((rng.next_u32(), rng.next_u32()));
        }
        if flags.contains(Flags::SYN) && flags.intersects(Flags::FIN | Flags::RST) {
            continue; // not a segment the parser lets through; nothing to test
        }
        t.send(seg);
        if i.is_multiple_of(64) {
            t.advance(Duration::from_millis(u64::from(rng.next_u32() % 300)));
        }
        for s in t.recv_all() {
            assert!(parse(&build(&s, LOCAL_IP, *PEER.ip())).is_some());
        }
    }
    t.advance(Duration::from_secs(5));
}
