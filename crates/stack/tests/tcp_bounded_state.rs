//! TCP against a hostile peer (issue #10), the state it can make the stack hold: that state
//! stays bounded, answers to floods are rate-limited, and the SACK/low-MSS CVEs of 2019
//! reproduce without effect. Crafted segments over the sim link; counts, never times.

use core::time::Duration;

use ustack_obs::Counter;
use ustack_stack::TcpHandle;
use ustack_stack::tcp::State;
use ustack_testkit::tcp::{Lcg, PEER, Seg, SegTest};
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
        let seg = if i.is_multiple_of(2) {
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
        if i.is_multiple_of(10_000) {
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
    // Lowered at run time, the limit applies when an orphan's timer runs (Linux
    // tcp_write_timeout -> tcp_out_of_resources): one of the two is reset at its RTO.
    t.stack.set_sysctl("net.ipv4.tcp_max_orphans", 1).unwrap();
    let out = t.advance(Duration::from_secs(2));
    assert_eq!(out.iter().filter(|(_, s)| s.has(Flags::RST)).count(), 1);
    let r = t.stack.tcp_resources();
    assert_eq!((r.orphans, r.connections), (1, 1), "{r:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPAbortOnMemory), 3);
}

/// Our ISN, a handle, and the peer's window scale of 14 with MSS `mss` and SACK: the
/// setting of the 2019 SACK CVEs (a huge window, a tiny MSS). The send buffer is set to
/// 1 MiB (2 MiB once doubled, so at most 4096 retransmission-queue records) and filled.
fn low_mss_sender(t: &mut SegTest, mss: u16) -> (u32, TcpHandle, usize) {
    let (iss, h) = open_from(
        t,
        PEER.port(),
        Seg::syn(1000).mss(mss).wscale(14).sack_perm(),
    );
    t.stack.tcp_set_send_buffer(h, 1 << 20).unwrap();
    let taken = t.write(h, &vec![5u8; 2 << 20]);
    assert!(taken > 1 << 20, "{taken}");
    (iss, h, taken)
}

/// The peer ACKs everything in order until the stack has nothing more to send; returns
/// the bytes it received (each counted once) and checks every data segment's size.
fn drain(t: &mut SegTest, iss: u32, from: u32, floor: usize, total: usize) -> usize {
    let base = iss.wrapping_add(1);
    let mut next = from;
    for _ in 0..1_000_000 {
        let segs = match t.next_seg(Duration::from_secs(300)) {
            Some((_, s)) => core::iter::once(s).chain(t.recv_all()).collect::<Vec<_>>(),
            None => break,
        };
        for s in segs {
            if s.payload.is_empty() {
                continue;
            }
            let off = s.seq.wrapping_sub(base) as usize;
            assert!(
                s.payload.len() >= floor || off + s.payload.len() == total,
                "a {}-byte segment at {off}",
                s.payload.len()
            );
            let end = s.seq.wrapping_add(s.payload.len() as u32);
            if s.seq.wrapping_sub(next) as i32 <= 0 && end.wrapping_sub(next) as i32 > 0 {
                next = end;
            }
        }
        t.send(Seg::ack(1001, next).win(65_535));
        if next.wrapping_sub(base) as usize == total {
            break;
        }
    }
    next.wrapping_sub(base) as usize
}

/// CVE-2019-11479 (low MSS): a peer announcing MSS 1 gets `tcp_min_snd_mss` (48) bytes
/// per segment, never fewer; and SACKing everything but the first segment (so that
/// nothing leaves the queue while cwnd keeps opening) cannot make the retransmission
/// queue hold more than its cap of records (2 MiB / 512 = 4096; counted TCPWqueueTooBig).
/// Once the peer ACKs, everything arrives.
#[test]
fn cve_2019_11479_low_mss_floor_and_bounded_rtx_queue() {
    let mut t = SegTest::listening(80);
    let (iss, h, total) = low_mss_sender(&mut t, 1);
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 48);
    let base = iss.wrapping_add(1);
    let mut highest = base;
    let mut max_unacked = 0;
    for _ in 0..20_000 {
        let segs = t.recv_all();
        if segs.is_empty() {
            break;
        }
        for s in &segs {
            if !s.payload.is_empty() {
                assert_eq!(s.payload.len(), 48, "{s:?}");
                let end = s.seq.wrapping_add(48);
                if end.wrapping_sub(highest) as i32 > 0 {
                    highest = end;
                }
            }
        }
        t.send(Seg::ack(1001, base).sack(&[(base.wrapping_add(48), highest)]));
        max_unacked = max_unacked.max(t.stack.tcp_info(h).unwrap().unacked);
    }
    assert_eq!(
        max_unacked, 4096,
        "the queue filled up to its cap, no further"
    );
    assert!(t.stack.mib().get(Counter::TcpExtTCPWqueueTooBig) > 0);
    assert_eq!(drain(&mut t, iss, base, 48, total), total);
    assert_eq!(t.stack.tcp_info(h).unwrap().unacked, 0);
}

/// A raised `tcp_min_snd_mss` raises the floor (Linux's range starts at 48).
#[test]
fn tcp_min_snd_mss_is_the_floor_on_the_peers_mss() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_min_snd_mss", 200).unwrap();
    assert!(t.stack.set_sysctl("net.ipv4.tcp_min_snd_mss", 47).is_err());
    let (_, h) = open_from(&mut t, PEER.port(), Seg::syn(1000).mss(100));
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 200);
    t.write(h, &[1u8; 1000]);
    let segs = t.recv_all();
    assert!(!segs.is_empty());
    assert!(segs.iter().all(|s| s.payload.len() == 200), "{segs:?}");
}

/// CVE-2019-11477 (SACK panic: Linux's per-skb segment count overflowed when SACKed skbs
/// of a tiny-MSS flow were merged): MSS 48, then 20,000 ACKs with crafted SACK blocks:
/// reversed, empty, beyond SND.NXT, wrapping around the sequence space, 2^31 long,
/// far below SND.UNA (D-SACK), cutting segments in half, repeated, and reneged (the
/// blocks vanish, then an RTO). No panic; records are never split (the queue never
/// holds more than was sent and not acknowledged, within its cap); and once the peer
/// behaves, every byte arrives and the connection is released.
#[test]
fn cve_2019_11477_crafted_sack_blocks_neither_panic_nor_blow_up_the_scoreboard() {
    let mut t = SegTest::listening(80);
    let (iss, h, total) = low_mss_sender(&mut t, 8);
    let base = iss.wrapping_add(1);
    let mut rng = Lcg(11_477);
    let mut highest = base;
    let mut acked = base;
    for i in 0..20_000u32 {
        for s in t.recv_all() {
            let end = s.seq.wrapping_add(s.payload.len() as u32);
            if end.wrapping_sub(highest) as i32 > 0 {
                highest = end;
            }
        }
        let span = highest.wrapping_sub(acked).max(1);
        let inside = |r: &mut Lcg| acked.wrapping_add(r.next_u32() % span);
        let mut blocks = Vec::new();
        for _ in 0..(rng.next_u32() % 5) {
            let b = match rng.next_u32() % 9 {
                0 => {
                    let a = inside(&mut rng);
                    (a, a.wrapping_sub(1 + rng.next_u32() % 1000)) // reversed
                }
                1 => {
                    let a = inside(&mut rng);
                    (a, a) // empty
                }
                2 => (highest, highest.wrapping_add(1 + rng.next_u32() % 100_000)), // unsent
                3 => (highest.wrapping_sub(100), highest.wrapping_add(1 << 31)),    // wraps
                4 => (acked.wrapping_sub(1 << 30), acked.wrapping_sub(10)),         // old D-SACK
                5 => (acked, acked.wrapping_add(1 << 31)),                          // 2^31 long
                6 => {
                    let a = inside(&mut rng);
                    (a.wrapping_add(24), a.wrapping_add(24 + 48)) // half segments
                }
                _ => {
                    let a = inside(&mut rng);
                    (
                        a,
                        a.wrapping_add(48 * (1 + rng.next_u32() % 64)).min(highest),
                    )
                }
            };
            blocks.push(b);
        }
        if rng.next_u32().is_multiple_of(4) && !blocks.is_empty() {
            let b = blocks[0];
            blocks.extend([b, b, b]);
            blocks.truncate(4);
        }
        // Now and then, a cumulative ACK within what was sent (never beyond).
        if rng.next_u32().is_multiple_of(50) {
            acked = acked.wrapping_add(rng.next_u32() % (span + 1)).min(highest);
        }
        t.send(Seg::ack(1001, acked).sack(&blocks));
        if i % 1000 == 999 {
            // Reneging: blocks stop, time runs, the RTO marks everything lost.
            let later = t
                .advance(Duration::from_secs(2))
                .into_iter()
                .map(|(_, s)| s);
            for s in later.collect::<Vec<_>>() {
                let end = s.seq.wrapping_add(s.payload.len() as u32);
                if end.wrapping_sub(highest) as i32 > 0 {
                    highest = end;
                }
            }
        }
        for s in t.recv_all() {
            let end = s.seq.wrapping_add(s.payload.len() as u32);
            if end.wrapping_sub(highest) as i32 > 0 {
                highest = end;
            }
        }
        let info = t.stack.tcp_info(h).unwrap();
        assert!(info.unacked <= 4096, "{info:?}");
        // 48-byte records, the head perhaps trimmed by a cumulative ACK.
        assert!(
            info.unacked <= highest.wrapping_sub(acked) / 48 + 1,
            "records are never split: {info:?}"
        );
        assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    }
    // (Cumulative ACKs inside a segment leave a trimmed head: no size floor here.)
    assert_eq!(drain(&mut t, iss, acked, 1, total), total);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("our FIN");
    t.send(Seg::ack(1001, fin.seq.wrapping_add(1)).flags(Flags::FIN));
    t.assert_released();
}

/// `tcp_max_orphans` at the zero-window probe timer (Linux `tcp_probe_timer` ->
/// `tcp_out_of_resources`): an orphan stuck behind a zero window is reset there, counted
/// TCPAbortOnMemory, once orphans exceed the limit.
#[test]
fn zero_window_orphan_over_tcp_max_orphans_is_reset_by_its_probe_timer() {
    let mut t = SegTest::listening(80);
    let (iss, h) = open_from(&mut t, PEER.port(), Seg::syn(1000));
    t.stack.tcp_set_send_buffer(h, 100_000).unwrap();
    t.write(h, &[7u8; 100_000]);
    let sent: u32 = t.recv_all().iter().map(|s| s.payload.len() as u32).sum();
    t.send(Seg::ack(1001, iss.wrapping_add(1 + sent)).win(0));
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    assert_eq!(t.stack.tcp_resources().orphans, 1);
    t.stack.set_sysctl("net.ipv4.tcp_max_orphans", 0).unwrap();
    let (_, rst) = t.next_seg(Duration::from_secs(10)).expect("a RST");
    assert!(rst.has(Flags::RST), "{rst:?}");
    let r = t.stack.tcp_resources();
    assert_eq!((r.orphans, r.connections, r.buffer_bytes), (0, 0, 0));
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPAbortOnMemory), 1);
    assert_eq!(m.get(Counter::TcpExtTCPWinProbe), 0);
}
