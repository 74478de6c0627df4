//! TCP against a hostile peer (issue #10): state an attacker can make the stack hold
//! stays bounded, answers to floods are rate-limited, and the SACK/low-MSS CVEs of 2019
//! reproduce without effect. Crafted segments over the sim link; counts, never times.

use core::time::Duration;

use ustack_obs::Counter;
use ustack_stack::TcpHandle;
use ustack_stack::tcp::State;
use ustack_testkit::tcp::{PEER, Seg, SegTest};
use ustack_wire::tcp::Flags;

/// A passive open from the peer's port `port` (ISN 1000, no options), accepted: returns
/// our ISN and the handle.
fn open_from(t: &mut SegTest, port: u16, syn: Seg) -> (u32, TcpHandle) {
    let mut syn = syn;
    syn.src_port = port;
    let isn = syn.seq;
    t.send(syn);
    let synack = t.recv().expect("SYN-ACK");
    assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
    let mut ack = Seg::ack(isn.wrapping_add(1), synack.seq.wrapping_add(1));
    ack.src_port = port;
    t.send(ack);
    let (h, peer) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    assert_eq!(peer.port(), port);
    (synack.seq, h)
}

/// We close first, the peer ACKs our FIN and sends its own: the connection from `port`
/// ends in TIME-WAIT (or not, if the table is full).
fn into_time_wait(t: &mut SegTest, port: u16) -> u32 {
    let (iss, h) = open_from(t, port, Seg::syn(1000));
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("our FIN");
    assert!(fin.has(Flags::FIN), "{fin:?}");
    let mut finack = Seg::ack(1001, iss.wrapping_add(2)).flags(Flags::FIN);
    finack.src_port = port;
    t.send(finack);
    assert!(
        t.recv().is_some_and(|a| a.ack == 1002),
        "ACK of the peer's FIN"
    );
    iss
}

/// A flood of 100,000 ACKs at one TIME-WAIT 4-tuple, one every millisecond, half exactly
/// at RCV.NXT and half out of window: the record and its expiry queue stay at one entry
/// (no per-packet allocation), the in-window ones get no answer, the out-of-window ones
/// at most one answer per `tcp_invalid_ratelimit` (Linux `tcp_timewait_state_process`
/// -> `tcp_oow_rate_limited`), the rest counted TCPACKSkippedTimeWait. Every ACK restarts
/// the 2*MSL wait (Linux `inet_twsk_reschedule`), so the record ends 60 s after the last.
#[test]
fn time_wait_flood_keeps_memory_flat_and_answers_rate_limited() {
    let mut t = SegTest::listening(80);
    let iss = into_time_wait(&mut t, PEER.port());
    let r = t.stack.tcp_resources();
    assert_eq!((r.timewait, r.timewait_queue), (1, 1));
    let ack = iss.wrapping_add(2);
    let (mut answers, mut oow) = (0u64, 0u64);
    for i in 0..100_000u32 {
        let seg = if i % 2 == 0 {
            Seg::ack(1002, ack)
        } else {
            oow += 1;
            Seg::ack(1002u32.wrapping_add(100_000 + i), ack)
        };
        t.send(seg);
        for a in t.advance(Duration::from_millis(1)) {
            assert!(a.1.has(Flags::ACK) && a.1.ack == 1002, "{a:?}");
            answers += 1;
        }
        if i % 10_000 == 0 {
            let r = t.stack.tcp_resources();
            assert_eq!((r.timewait, r.timewait_queue), (1, 1), "after {i} ACKs");
        }
    }
    let r = t.stack.tcp_resources();
    assert_eq!(
        (r.timewait, r.timewait_queue),
        (1, 1),
        "one record, one queue entry"
    );
    // 100 s of flood, one answer per 500 ms at most.
    assert!(answers > 0, "out-of-window segments are answered");
    assert!(
        answers <= 100_000 / 500 + 1,
        "{answers} answers to {oow} out-of-window ACKs"
    );
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPACKSkippedTimeWait), oow - answers);
    // 2*MSL after the last ACK, and not before.
    t.advance(Duration::from_secs(59));
    assert_eq!(
        t.stack.tcp_resources().timewait,
        1,
        "restarted by the flood"
    );
    t.advance(Duration::from_secs(2));
    let r = t.stack.tcp_resources();
    assert_eq!((r.timewait, r.timewait_queue), (0, 0));
    assert_eq!(t.stack.mib().get(Counter::TcpExtTW), 1);
}

/// `tcp_invalid_ratelimit` 0 turns the limit off (Linux: `elapsed <
/// sysctl_tcp_invalid_ratelimit` is never true): every out-of-window ACK is answered.
#[test]
fn time_wait_answers_every_out_of_window_ack_without_a_rate_limit() {
    let mut t = SegTest::listening(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_invalid_ratelimit", 0)
        .unwrap();
    let iss = into_time_wait(&mut t, PEER.port());
    for i in 0..100u32 {
        t.send(Seg::ack(5000 + i, iss.wrapping_add(2)));
        assert!(t.recv().is_some_and(|a| a.ack == 1002), "ACK {i} answered");
    }
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPACKSkippedTimeWait), 0);
}

/// `tcp_max_tw_buckets` (Linux `inet_twsk_alloc`): with the table full, a connection
/// that would enter TIME-WAIT closes without it, counted TCPTimeWaitOverflow.
#[test]
fn tcp_max_tw_buckets_overflow_is_counted_and_closes_without_time_wait() {
    let mut t = SegTest::listening(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_max_tw_buckets", 2)
        .unwrap();
    for port in 41_000..41_005 {
        into_time_wait(&mut t, port);
    }
    let r = t.stack.tcp_resources();
    assert_eq!((r.connections, r.timewait), (0, 2), "{r:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPTimeWaitOverflow), 3);
    t.assert_released();
}

/// The peer asks for a large response, takes the first flight, then advertises window 0
/// forever, answering every probe; the server closes. Linux `tcp_probe_timer` kills the
/// orphan once its backed-off RTO reaches `TCP_RTO_MAX` (`tcp_orphan_retries` 0: 8 while
/// alive, 0 after), counted TCPAbortOnTimeout, and its send buffer is freed. A
/// connection that is not orphaned keeps probing (RFC 9293 §3.8.6.1).
#[test]
fn zero_window_orphan_dies_after_its_retries() {
    for orphan in [true, false] {
        let mut t = SegTest::listening(80);
        let (iss, h) = open_from(&mut t, PEER.port(), Seg::syn(1000));
        t.stack.tcp_set_send_buffer(h, 100_000).unwrap();
        let response = vec![7u8; 200_000];
        let taken = t.write(h, &response);
        assert!(taken > 50_000, "{taken}");
        let sent: u32 = t.recv_all().iter().map(|s| s.payload.len() as u32).sum();
        assert!(sent > 0);
        let una = iss.wrapping_add(1).wrapping_add(sent);
        t.send(Seg::ack(1001, una).win(0));
        if orphan {
            let now = t.now;
            t.stack.tcp_close(now, h).unwrap();
            assert_eq!(t.stack.tcp_resources().orphans, 1);
        }
        let mut probes = 0;
        let start = t.now;
        while t.now - start < Duration::from_secs(3 * 3600) {
            let Some((_, s)) = t.next_seg(Duration::from_secs(600)) else {
                continue;
            };
            if s.has(Flags::RST) {
                break;
            }
            assert!(
                s.payload.is_empty(),
                "nothing sent into a zero window: {s:?}"
            );
            probes += 1;
            t.send(Seg::ack(1001, una).win(0));
            if t.stack.tcp_resources().connections == 0 {
                break;
            }
        }
        let r = t.stack.tcp_resources();
        let m = t.stack.mib();
        if orphan {
            assert_eq!(
                (r.connections, r.orphans, r.buffer_bytes),
                (0, 0, 0),
                "{r:?}"
            );
            assert_eq!(m.get(Counter::TcpExtTCPAbortOnTimeout), 1);
            // RTO 1 s (no RTT sample) doubled per probe: 120 s after 7 backoffs.
            assert!((5..=16).contains(&probes), "{probes} probes");
            assert_eq!(m.get(Counter::TcpExtTCPWinProbe), probes);
            t.assert_released();
        } else {
            assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
            assert_eq!(m.get(Counter::TcpExtTCPAbortOnTimeout), 0);
            assert!(probes > 50, "{probes} probes in 3 h, still alive");
        }
    }
}

/// `tcp_max_orphans` (Linux `__tcp_close` -> `tcp_check_oom` -> `tcp_too_many_orphans`):
/// closing a connection beyond the limit resets it, counted TCPAbortOnMemory; the
/// orphans within the limit live on.
#[test]
fn tcp_max_orphans_is_enforced_at_close() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_max_orphans", 2).unwrap();
    let mut handles = Vec::new();
    for port in 42_000..42_004 {
        let (_, h) = open_from(&mut t, port, Seg::syn(1000));
        t.stack.tcp_set_send_buffer(h, 100_000).unwrap();
        t.write(h, &[1u8; 100_000]);
        t.recv_all();
        handles.push(h);
    }
    for (i, h) in handles.into_iter().enumerate() {
        let now = t.now;
        t.stack.tcp_close(now, h).unwrap();
        let out = t.recv_all();
        let reset = out.iter().any(|s| s.has(Flags::RST));
        assert_eq!(reset, i >= 2, "close {i}: {out:?}");
    }
    let r = t.stack.tcp_resources();
    assert_eq!((r.orphans, r.connections), (2, 2), "{r:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPAbortOnMemory), 2);
}
