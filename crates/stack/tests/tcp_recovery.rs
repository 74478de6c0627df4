//! Loss recovery and throughput, per RFC rule and against Linux's behaviour: the SACK
//! blocks a receiver reports (RFC 2018 §4) and D-SACK (RFC 2883), fast retransmit and
//! Proportional Rate Reduction (RFC 6675, RFC 6937), lost retransmissions, undo of
//! needless reductions (RFC 2883 §5, RFC 3522), Nagle with Minshall's refinement, and
//! receive-buffer autotuning bounded by tcp_rmem.
//!
//! The stack under test is driven segment by segment by a scripted peer ([`SegTest`]),
//! except the end-to-end checks, which run two stacks over a `sim` link.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::{Side, SimConfig, SimLinkConfig};
use ustack_obs::Counter;
use ustack_stack::tcp::State;
use ustack_stack::{Instant, TcpHandle};
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_testkit::{B_IP, Pair};

/// The peer's MSS; without timestamps the stack's segments carry this many bytes.
const MSS: u32 = 1000;
/// The peer's ISN; its data starts at PEER_ISN + 1.
const PEER_ISN: u32 = 1000;
/// The peer's window field: 8192 << 7 = 1 MiB.
const PEER_WIN: u16 = 8192;

/// One accepted connection with SACK (and timestamps if `ts`), the peer offering a 1 MiB
/// window; `cc`: 0 Reno, 1 CUBIC.
struct Conn {
    t: SegTest,
    h: TcpHandle,
    /// Sequence number of the stack's first data byte (its ISN + 1).
    base: u32,
}

impl Conn {
    fn open(cc: u64, ts: bool) -> Conn {
        // The handshake takes one round trip of this path (its RTT sample sets the
        // minimum RTT that RACK's reordering window is a quarter of).
        Conn::open_after(cc, ts, Duration::from_millis(20))
    }

    /// [`Conn::open`] on a path of round trip `rtt`.
    fn open_after(cc: u64, ts: bool, rtt: Duration) -> Conn {
        let mut t = SegTest::listening(80);
        t.stack
            .set_sysctl("net.ipv4.tcp_congestion_control", cc)
            .unwrap();
        t.stack
            .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
            .unwrap();
        let mut syn = Seg::syn(PEER_ISN).mss(MSS as u16).wscale(7).sack_perm();
        if ts {
            syn = syn.ts(100, 0);
        }
        let (h, synack) = t.accept_after(syn, PEER_WIN, rtt);
        Conn {
            t,
            h,
            base: synack.seq.wrapping_add(1),
        }
    }

    /// The start of the stack's `i`-th data segment (from 0).
    fn seg(&self, i: u32) -> u32 {
        self.base.wrapping_add(i * MSS)
    }

    /// The peer acknowledges up to the start of segment `upto`, SACKing segments
    /// `sacked` (each a `[first, last]` range of segment indexes). ACKs come 100 µs apart,
    /// as from a 100 Mbit/s link.
    fn ack(&mut self, upto: u32, sacked: &[(u32, u32)]) {
        self.t.now += Duration::from_micros(100);
        let blocks: Vec<(u32, u32)> = sacked
            .iter()
            .map(|&(a, b)| (self.seg(a), self.seg(b + 1)))
            .collect();
        let a = Seg::ack(PEER_ISN + 1, self.seg(upto))
            .win(PEER_WIN)
            .sack(&blocks);
        self.t.send(a);
    }

    /// A round trip passes (20 ms, as on the goodput table's path).
    fn rtt(&mut self) {
        self.t.now += Duration::from_millis(20);
    }

    /// Queue `n` full segments of data.
    fn write_segments(&mut self, n: u32) {
        let data = vec![0x5a; (n * MSS) as usize];
        assert_eq!(self.t.write(self.h, &data), data.len());
    }

    /// Data segments the stack sends now, as segment indexes.
    fn sent(&mut self) -> Vec<u32> {
        let base = self.base;
        self.t
            .recv_all()
            .into_iter()
            .filter(|s| !s.payload.is_empty())
            .map(|s| s.seq.wrapping_sub(base) / MSS)
            .collect()
    }

    fn counter(&self, c: Counter) -> u64 {
        self.t.stack.mib().get(c)
    }
}

/// RFC 2018 §4: "The first SACK block (i.e., the one immediately following the kind and
/// length fields in the option) MUST specify the contiguous block of data containing the
/// segment which triggered this ACK", and the others repeat "the most recently reported
/// SACK blocks". With more holes than the option has room for, the newest block must
/// still come first; otherwise the sender's scoreboard stops growing and a timeout
/// follows (the cause of most retransmissions in the goodput table at 0% loss).
#[test]
fn receiver_reports_the_newest_block_first_with_many_holes() {
    let mut c = Conn::open(1, true);
    let una = c.base;
    let first = PEER_ISN + 1;
    let payload = vec![7u8; 100];
    for k in 0..8u32 {
        // 100-byte segments 1, 3, 5, ... : one more hole each time.
        let s = first + (2 * k + 1) * 100;
        c.t.send(Seg::ack(s, una).win(PEER_WIN).data(&payload).ts(200 + k, 0));
        let a =
            c.t.recv()
                .expect("an immediate duplicate ACK (RFC 5681 §4.2)");
        assert_eq!(a.ack, first, "the cumulative ACK stays at the first hole");
        assert_eq!(
            a.sack.first(),
            Some(&(s, s + 100)),
            "segment {k}: the block holding the newest segment comes first"
        );
        // As many distinct blocks as fit next to the timestamp option (RFC 2018 §3: 3),
        // newest first.
        assert_eq!(a.sack.len(), (k as usize + 1).min(3), "{:?}", a.sack);
        for (j, b) in a.sack.iter().enumerate() {
            let s = s - 200 * j as u32;
            assert_eq!(*b, (s, s + 100), "{:?}", a.sack);
        }
    }
    // Filling the first hole joins it to the first block; the ACK moves past it and no
    // reported block lies below the new cumulative ACK (RFC 2018 §4).
    c.t.send(Seg::ack(first, una).win(PEER_WIN).data(&payload));
    let a =
        c.t.recv()
            .expect("an immediate ACK for a filled hole (RFC 5681 §4.2)");
    assert_eq!(a.ack, first + 200);
    assert!(
        a.sack.iter().all(|&(s, _)| s.wrapping_sub(a.ack) < 1 << 30),
        "{a:?}"
    );
}

/// RFC 2883 §4: a duplicate segment is reported in the first SACK block ("If a D-SACK block
/// is reported, it MUST be the first block"), once; the second block is the out-of-order
/// range holding it when it lies above the cumulative ACK. Linux counts
/// TCPDSACKOldSent / TCPDSACKOfoSent.
#[test]
fn duplicates_are_reported_in_a_dsack_block() {
    let mut c = Conn::open(1, false);
    let una = c.base;
    let first = PEER_ISN + 1;
    let d = vec![1u8; 100];
    c.t.send(Seg::ack(first, una).win(PEER_WIN).data(&d));
    c.t.recv_all();
    // The same segment again: below RCV.NXT.
    c.t.send(Seg::ack(first, una).win(PEER_WIN).data(&d));
    let a = c.t.recv().expect("an immediate ACK for a duplicate");
    assert_eq!(a.ack, first + 100);
    assert_eq!(a.sack, vec![(first, first + 100)], "the D-SACK block");
    assert_eq!(c.counter(Counter::TcpExtTCPDSACKOldSent), 1);
    assert_eq!(c.counter(Counter::TcpExtDelayedACKLost), 1);
    // An out-of-order segment, then the same again: D-SACK first, then its block.
    c.t.send(Seg::ack(first + 300, una).win(PEER_WIN).data(&d));
    let a = c.t.recv().expect("a duplicate ACK");
    assert_eq!(a.sack, vec![(first + 300, first + 400)]);
    c.t.send(Seg::ack(first + 300, una).win(PEER_WIN).data(&d));
    let a = c.t.recv().expect("a duplicate ACK");
    assert_eq!(
        a.sack,
        vec![(first + 300, first + 400), (first + 300, first + 400)]
    );
    assert_eq!(c.counter(Counter::TcpExtTCPDSACKOfoSent), 1);
    // Reported once: the next ACK carries only the out-of-order block.
    c.t.send(Seg::ack(first + 500, una).win(PEER_WIN).data(&d));
    let a = c.t.recv().expect("a duplicate ACK");
    assert_eq!(
        a.sack,
        vec![(first + 500, first + 600), (first + 300, first + 400)]
    );
}

/// Fast retransmit at DupThresh SACKed segments (RFC 6675 §5 "(4.3) Retransmit the first
/// data segment presumed dropped"), then Proportional Rate Reduction (RFC 6937 §3): while
/// the pipe is above ssthresh the sender sends about ssthresh/RecoverFS segments per
/// segment delivered, instead of falling silent until the pipe drains and then sending a
/// burst; at the end cwnd is ssthresh.
#[test]
fn fast_retransmit_then_proportional_rate_reduction() {
    let mut c = Conn::open(0, false); // Reno: ssthresh = cwnd / 2
    c.write_segments(100);
    assert_eq!(c.sent(), (0..10).collect::<Vec<_>>(), "IW10 (RFC 6928)");
    // Slow start: acking all ten opens cwnd to 20 (RFC 5681 §3.1).
    c.rtt();
    for i in 1..=10 {
        c.ack(i, &[]);
    }
    c.rtt();
    let flight: Vec<u32> = c.sent();
    assert_eq!(flight, (10..30).collect::<Vec<_>>());
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().cwnd, 20);
    // Segment 10 is lost; 11.. arrive and are SACKed one by one. Below DupThresh, each
    // SACKed segment lets one new segment out (RFC 3042 Limited Transmit: the pipe
    // counts what left the network).
    c.ack(10, &[(11, 11)]);
    assert_eq!(c.sent(), vec![30]);
    c.ack(10, &[(11, 12)]);
    assert_eq!(c.sent(), vec![31]);
    assert_eq!(c.counter(Counter::TcpExtTCPSackRecovery), 0);
    c.ack(10, &[(11, 13)]);
    assert_eq!(
        c.sent(),
        vec![10],
        "the third SACKed segment: fast retransmit"
    );
    assert_eq!(c.counter(Counter::TcpExtTCPSackRecovery), 1);
    let info = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.ssthresh, 10, "Reno: half of cwnd 20");
    // RecoverFS = 20 (cwnd at the start, Linux prior_cwnd); pipe stays above ssthresh,
    // so PRR sends ceil(prr_delivered * 10 / 20) - prr_out: one segment every other ACK.
    let mut sent_at = Vec::new();
    for k in 14..30 {
        c.ack(10, &[(11, k)]);
        for s in c.sent() {
            sent_at.push((k, s));
        }
    }
    // One new segment on every second ACK, until the pipe is down to ssthresh at the
    // last one (16 more deliveries: the retransmission and seven new segments).
    let expect: Vec<(u32, u32)> = (0..7).map(|i| (15 + 2 * i, 32 + i)).collect();
    assert_eq!(
        sent_at, expect,
        "PRR keeps the ACK clock going from the start of recovery"
    );
    // The retransmission arrives: everything below 32 (the recovery point: SND.NXT when
    // recovery began) is acknowledged and recovery ends with cwnd = ssthresh (RFC 6582
    // §3.2 step 3; RFC 6937).
    c.ack(32, &[]);
    let info = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!((info.cwnd, info.ssthresh), (10, 10));
    assert_eq!(c.counter(Counter::TcpExtTCPFastRetrans), 1);
    assert_eq!(c.counter(Counter::TcpRetransSegs), 1);
}

/// An ACK that advances SND.UNA and also carries SACK blocks is no pure ACK (Linux
/// tcp_ack's fast path is only for one without SACK information): the blocks reach the
/// scoreboard, and three SACKed segments above the hole start a fast retransmit at once.
#[test]
fn a_cumulative_ack_that_also_sacks_updates_the_scoreboard() {
    let mut c = Conn::open(0, false);
    c.write_segments(20);
    assert_eq!(c.sent(), (0..10).collect::<Vec<_>>());
    c.rtt();
    c.ack(1, &[]);
    assert_eq!(c.sent(), vec![10, 11], "slow start after a pure ACK");
    // Segment 2 is lost; 3..5 arrive. The ACK acknowledges 1 and SACKs 3..5.
    c.ack(2, &[(3, 5)]);
    let sent = c.sent();
    assert_eq!(
        sent.first(),
        Some(&2),
        "fast retransmit of the hole: {sent:?}"
    );
    assert_eq!(c.counter(Counter::TcpExtTCPFastRetrans), 1);
    assert_eq!(c.counter(Counter::TcpRetransSegs), 1);
}

/// In fast recovery the queue can be clean again (the retransmission and every SACKed
/// segment acknowledged, what is left never SACKed or lost), yet the ACK of the recovery
/// point must still take the full path: recovery ends there (RFC 6582 §3.2 step 3,
/// RFC 6937) with cwnd = ssthresh, and the next ACKs grow cwnd again.
#[test]
fn recovery_ends_on_an_ack_that_finds_the_queue_clean() {
    let mut c = Conn::open(0, false); // Reno: ssthresh = cwnd / 2
    c.write_segments(100);
    c.sent();
    c.rtt();
    for i in 1..=10 {
        c.ack(i, &[]);
    }
    c.rtt();
    assert_eq!(c.sent(), (10..30).collect::<Vec<_>>());
    // Segment 10 lost, 11..13 SACKed: fast retransmit; recovery point 32 (SND.NXT then,
    // after two limited transmits).
    c.ack(10, &[(11, 11)]);
    c.ack(10, &[(11, 12)]);
    c.ack(10, &[(11, 13)]);
    let mut out = c.sent();
    assert!(out.contains(&10), "fast retransmit: {out:?}");
    // The retransmission arrives: a partial ACK, 14..31 still out, none SACKed.
    c.rtt();
    c.ack(14, &[]);
    out.extend(c.sent());
    let info = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!(info.ssthresh, 10);
    // The recovery point is acknowledged on a queue with nothing SACKed, lost or
    // retransmitted.
    c.ack(32, &[]);
    let info = c.t.stack.tcp_info(c.h).unwrap();
    // Recovery ended at cwnd = ssthresh = 10, and congestion avoidance counted the
    // 18 segments this ACK delivered (Linux tcp_cong_control after tcp_fastretrans_alert).
    assert_eq!((info.cwnd, info.ssthresh), (11, 10), "recovery ended");
    // Back in congestion avoidance: a window's worth of ACKs adds a segment.
    c.sent();
    c.rtt();
    let next = 32 + out.iter().filter(|&&s| s >= 32).count() as u32;
    for i in 33..=next {
        c.ack(i, &[]);
    }
    assert!(
        c.t.stack.tcp_info(c.h).unwrap().cwnd > 10,
        "cwnd grows after recovery"
    );
}

/// A loss probe of new data leaves the queue clean (nothing retransmitted), yet the ACK
/// that covers it must still take the full path: the probe is over (RFC 8985 §7.4.2,
/// Linux tcp_process_tlp_ack), so that the next tail gets a probe of its own instead of
/// waiting for the RTO.
#[test]
fn each_tail_gets_a_loss_probe_after_a_probe_of_new_data() {
    let mut c = Conn::open(0, false);
    c.write_segments(11);
    assert_eq!(c.sent(), (0..10).collect::<Vec<_>>(), "IW10");
    // No ACK comes: the probe timer sends the next new segment.
    let base = c.base;
    let data = |out: Vec<(Instant, ustack_testkit::tcp::Seg)>| -> Vec<u32> {
        out.into_iter()
            .filter(|(_, s)| !s.payload.is_empty())
            .map(|(_, s)| s.seq.wrapping_sub(base) / MSS)
            .collect()
    };
    assert_eq!(data(c.t.advance(Duration::from_millis(100))), vec![10]);
    assert_eq!(c.counter(Counter::TcpExtTCPLossProbes), 1);
    // Everything arrived: one cumulative ACK, nothing lost.
    c.ack(11, &[]);
    assert_eq!(c.counter(Counter::TcpRetransSegs), 0);
    // The next tail, unacknowledged: a second probe, no timeout.
    c.write_segments(2);
    assert_eq!(c.sent(), vec![11, 12]);
    let out = data(c.t.advance(Duration::from_millis(100)));
    assert_eq!(c.counter(Counter::TcpExtTCPLossProbes), 2, "sent {out:?}");
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 0);
}

/// A pure cumulative ACK (nothing SACKed, lost or retransmitted: `tcp_ack_pure`) still
/// takes its RTT sample (RFC 6298 §2.3, from the segment it acknowledges: no timestamps
/// here) and grows cwnd in slow start.
#[test]
fn a_pure_ack_samples_the_rtt_and_grows_cwnd() {
    let mut c = Conn::open(0, false);
    let info = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!(
        info.srtt,
        Some(Duration::from_millis(20)),
        "the handshake's"
    );
    c.write_segments(10);
    assert_eq!(c.sent(), (0..10).collect::<Vec<_>>(), "cwnd full");
    c.t.now += Duration::from_millis(100);
    c.ack(1, &[]); // 100.1 ms after segment 0 left
    let info = c.t.stack.tcp_info(c.h).unwrap();
    // SRTT <- 7/8 SRTT + 1/8 R' = 17.5 ms + 12.5125 ms.
    assert_eq!(info.srtt, Some(Duration::from_nanos(30_012_500)));
    assert_eq!(
        info.cwnd, 11,
        "slow start: one more segment per segment acked"
    );
    assert_eq!(info.unacked, 9);
}

/// A retransmission can be lost too. Once a segment sent after it is SACKed, it must have
/// been (RFC 8985 §6.2's rule; Linux counts TCPLostRetransmit) and is sent again at once,
/// instead of holding SND.UNA until the retransmission timer.
#[test]
fn a_lost_retransmission_is_sent_again_without_a_timeout() {
    let mut c = Conn::open(0, false);
    c.write_segments(100);
    c.sent();
    c.rtt();
    for i in 1..=10 {
        c.ack(i, &[]);
    }
    c.sent(); // 10..30 in flight
    c.rtt();
    c.ack(10, &[(11, 11)]);
    c.ack(10, &[(11, 12)]);
    assert_eq!(c.sent(), vec![30, 31], "limited transmit");
    c.ack(10, &[(11, 13)]);
    assert_eq!(c.sent(), vec![10], "fast retransmit");
    // The retransmission is lost. SACKs for the rest of the flight, then for new data
    // sent after the retransmission.
    let mut later = Vec::new();
    for k in 14..30 {
        c.ack(10, &[(11, k)]);
        later.extend(c.sent());
    }
    assert!(
        !later.contains(&10),
        "no second retransmission yet: {later:?}"
    );
    let new = *later.first().expect("PRR sent new data");
    assert_eq!(new, 32);
    // Its SACK comes back one round trip after it left (RFC 8985 §6.2: no sooner than
    // the path's RTT after the retransmission can it be declared lost).
    c.rtt();
    c.ack(10, &[(11, 29), (new, new)]);
    let out = c.sent();
    assert!(
        out.contains(&10),
        "segment {new}, sent after the retransmission, arrived: 10 is sent again: {out:?}"
    );
    assert_eq!(c.counter(Counter::TcpExtTCPLostRetransmit), 1);
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 0);
    assert_eq!(c.counter(Counter::TcpExtTCPSackRecoveryFail), 0);
}

/// RFC 2883 §5 / Linux tcp_try_undo_recovery: when a D-SACK shows that the only
/// retransmission was not needed (the original was late, not lost), the window reduction
/// is undone (TCPFullUndo) and cwnd and ssthresh come back.
#[test]
fn a_needless_fast_retransmit_is_undone_by_dsack() {
    let mut c = Conn::open(0, false);
    c.write_segments(100);
    c.sent();
    c.rtt();
    for i in 1..=10 {
        c.ack(i, &[]);
    }
    c.sent();
    c.rtt();
    let before = c.t.stack.tcp_info(c.h).unwrap();
    c.ack(10, &[(11, 11)]);
    c.ack(10, &[(11, 12)]);
    assert_eq!(c.sent(), vec![30, 31], "limited transmit");
    c.ack(10, &[(11, 13)]);
    assert_eq!(c.sent(), vec![10]);
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().ssthresh, 10);
    // The late original arrives: everything is acknowledged, and the retransmission,
    // arriving after it, is reported as a duplicate.
    let d = (c.seg(10), c.seg(11));
    c.t.send(Seg::ack(PEER_ISN + 1, c.seg(32)).win(PEER_WIN).sack(&[d]));
    let after = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!(
        c.counter(Counter::TcpExtTCPFullUndo) + c.counter(Counter::TcpExtTCPDSACKUndo),
        1
    );
    assert_eq!(after.ssthresh, before.ssthresh, "ssthresh restored");
    assert!(
        after.cwnd >= before.cwnd,
        "{} < {}",
        after.cwnd,
        before.cwnd
    );
    assert_eq!(c.counter(Counter::TcpExtTCPDSACKRecv), 1);
}

/// RFC 3522 §3.2 (Eifel) and Linux tcp_try_undo_loss: after a timeout, an ACK echoing a
/// timestamp older than the retransmission was sent for the original transmission, so the
/// timeout was spurious: cwnd and ssthresh are restored (TCPLossUndo).
#[test]
fn a_spurious_timeout_is_undone_by_the_echoed_timestamp() {
    let mut c = Conn::open(1, true);
    let data = vec![0x33; 5 * 988];
    c.t.write(c.h, &data);
    let first = c.t.recv_all();
    assert_eq!(first.len(), 5);
    let orig_tsval = first[0].ts.expect("timestamps").0;
    let before = c.t.stack.tcp_info(c.h).unwrap();
    // No ACK: first a tail loss probe of the last segment (RFC 8985 §7), then the
    // retransmission timer fires and resends the head.
    let (_, probe) = c.t.next_seg(Duration::from_secs(5)).expect("a loss probe");
    assert_eq!(probe.seq, c.base + 4 * 988);
    let (_, rtx) =
        c.t.next_seg(Duration::from_secs(5))
            .expect("a retransmission");
    assert_eq!(rtx.seq, c.base);
    assert!(rtx.ts.unwrap().0 > orig_tsval);
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 1);
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().cwnd, 1);
    // The ACK of the originals, delayed, echoing their timestamp.
    c.t.send(
        Seg::ack(PEER_ISN + 1, c.base + 5 * 988)
            .win(PEER_WIN)
            .ts(300, orig_tsval),
    );
    let after = c.t.stack.tcp_info(c.h).unwrap();
    assert_eq!(c.counter(Counter::TcpExtTCPLossUndo), 1);
    assert_eq!(after.ssthresh, before.ssthresh, "ssthresh restored");
    assert!(after.cwnd >= before.cwnd);
}

/// Nagle as Linux applies it (tcp_nagle_check with Minshall's refinement,
/// draft-minshall-nagle): the sub-MSS tail of a write goes out at once when no other
/// sub-MSS segment is unacknowledged; a second small write waits for the first to be
/// acknowledged (RFC 9293 §3.7.4); TCP_NODELAY sends it at once.
#[test]
fn nagle_holds_only_a_second_small_segment() {
    let mut c = Conn::open(1, false);
    c.t.write(c.h, &vec![1u8; MSS as usize + 300]);
    let out = c.t.recv_all();
    let lens: Vec<usize> = out.iter().map(|s| s.payload.len()).collect();
    assert_eq!(
        lens,
        vec![MSS as usize, 300],
        "full segment and the tail at once"
    );
    c.t.write(c.h, &[2u8; 100]);
    assert_eq!(
        c.t.recv_all(),
        vec![],
        "a small segment is unacknowledged: wait"
    );
    // Acknowledging the full segment only: the small one is still out.
    c.t.send(Seg::ack(PEER_ISN + 1, c.base + MSS).win(PEER_WIN));
    assert!(c.t.recv_all().iter().all(|s| s.payload.is_empty()));
    // Acknowledging the 300 bytes releases the 100.
    c.t.send(Seg::ack(PEER_ISN + 1, c.base + MSS + 300).win(PEER_WIN));
    let out = c.t.recv_all();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, vec![2u8; 100]);
    // With TCP_NODELAY the next small write goes out while the 100 bytes are in flight.
    let now = c.t.now;
    c.t.stack.tcp_set_nodelay(now, c.h, true).unwrap();
    c.t.write(c.h, &[3u8; 50]);
    let out = c.t.recv_all();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, vec![3u8; 50]);
}

/// A's tcp_wmem (default, max) when the send buffer is not under test: 4 MiB.
const BIG_WMEM: (u64, u64) = (4 << 20, 4 << 20);

/// A bulk transfer of `bytes` from A to B over `link` (both directions alike) with
/// congestion control `cc` on both stacks, A's tcp_wmem and B's tcp_rmem as given
/// `(default, max)`. Returns the seconds from A's connection being established to B
/// having read everything, the pair and B's handle.
fn bulk(
    link: SimConfig,
    cc: u64,
    bytes: usize,
    a_wmem: (u64, u64),
    b_rmem: (u64, u64),
) -> (f64, Pair, TcpHandle) {
    let mut p = Pair::new(SimLinkConfig {
        seed: 1,
        a_to_b: link.clone(),
        b_to_a: link,
        ..SimLinkConfig::default()
    });
    for s in [&mut p.a, &mut p.b] {
        s.set_sysctl("net.ipv4.tcp_congestion_control", cc).unwrap();
    }
    p.a.set_sysctl("net.ipv4.tcp_wmem.default", a_wmem.0)
        .unwrap();
    p.a.set_sysctl("net.ipv4.tcp_wmem.max", a_wmem.1).unwrap();
    p.b.set_sysctl("net.ipv4.tcp_rmem.default", b_rmem.0)
        .unwrap();
    p.b.set_sysctl("net.ipv4.tcp_rmem.max", b_rmem.1).unwrap();
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 5001), 8).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 5001))
            .unwrap();
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let (mut b, mut sent, mut got, mut start) = (None, 0, 0, None);
    let mut buf = vec![0u8; 1 << 16];
    while got < bytes {
        let now = p.now;
        if b.is_none() {
            b = p.b.tcp_accept(l).ok().map(|(h, _)| h);
        }
        if p.a.tcp_state(a) == Ok(State::Established) {
            start.get_or_insert(now);
            if let Ok(n) = p.a.tcp_send(now, a, &data[sent..]) {
                sent += n;
            }
        }
        if let Some(bh) = b {
            while let Ok(n) = p.b.tcp_recv(now, bh, &mut buf) {
                if n == 0 {
                    break;
                }
                assert!(
                    buf[..n]
                        .iter()
                        .enumerate()
                        .all(|(k, &x)| x == ((got + k) % 251) as u8),
                    "intact"
                );
                got += n;
            }
        }
        p.settle();
        let next = p.next_event().expect("the transfer stalled");
        assert!(next < Instant::from_secs(600), "too slow");
        p.now = next;
    }
    let secs = (p.now - start.unwrap()).as_secs_f64();
    (secs, p, b.unwrap())
}

/// Mbit/s for `bytes` in `secs`.
fn mbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 * 8.0 / secs / 1e6
}

/// The path of the goodput table: 100 Mbit/s each way, 20 ms RTT, 256 KB drop-tail queue.
fn path(loss: f64) -> SimConfig {
    SimConfig {
        loss,
        delay: Duration::from_millis(10),
        rate_bps: Some(100_000_000),
        queue_limit_bytes: Some(256 * 1024),
        ..SimConfig::default()
    }
}

/// Slow start overflows the queue and many segments of one window are dropped. SACK
/// recovery must repair exactly those -- one retransmission per drop, no timeout, no
/// duplicate at the receiver -- and the transfer run near the link rate (the ceiling for
/// 4 MiB from IW10 at 20 ms RTT is about 80 Mbit/s).
#[test]
fn a_queue_overflow_is_repaired_with_one_retransmission_per_drop() {
    for cc in [0, 1] {
        let bytes = 4 << 20;
        let (secs, p, _) = bulk(path(0.0), cc, bytes, BIG_WMEM, (4 << 20, 6 << 20));
        let drops = p.link.stats(Side::A).queue_dropped;
        let a = p.a.mib();
        assert!(drops > 10, "the queue overflowed ({drops} drops)");
        assert_eq!(a.get(Counter::TcpRetransSegs), drops, "cc {cc}");
        assert_eq!(a.get(Counter::TcpExtTCPTimeouts), 0);
        assert_eq!(a.get(Counter::TcpExtTCPSackRecoveryFail), 0);
        assert_eq!(
            p.b.mib().get(Counter::TcpExtDelayedACKLost),
            0,
            "cc {cc}: no needless retransmission reached B"
        );
        let rate = mbps(bytes, secs);
        assert!(rate > 70.0, "cc {cc}: {rate:.1} Mbit/s");
    }
}

/// Receive-buffer autotuning (Linux tcp_rcv_space_adjust): with tcp_rmem at Linux's
/// defaults (128 KiB, below this path's 250 KB bandwidth-delay product) the window grows
/// as the application reads, up to what the path needs, never past tcp_rmem.max; the
/// transfer runs about as fast as with a large fixed buffer. With tcp_rmem.max at the
/// default the window cannot grow, and the transfer is window-limited.
#[test]
fn the_receive_window_grows_with_the_reader_up_to_rmem_max() {
    let bytes = 4 << 20;
    let (fixed, _, _) = bulk(path(0.0), 1, bytes, BIG_WMEM, (6 << 20, 6 << 20));
    let (tuned, p, b) = bulk(path(0.0), 1, bytes, BIG_WMEM, (131_072, 6 << 20));
    let wnd = p.b.tcp_info(b).unwrap().rcv_wnd;
    assert!(wnd > 250_000, "grew past the BDP: {wnd}");
    assert!(wnd <= 6 << 20, "bounded by tcp_rmem.max: {wnd}");
    assert!(
        tuned < fixed * 1.1,
        "autotuned {:.1} Mbit/s vs fixed 6 MiB {:.1}",
        mbps(bytes, tuned),
        mbps(bytes, fixed)
    );
    let (capped, p, b) = bulk(path(0.0), 1, bytes, BIG_WMEM, (131_072, 131_072));
    let wnd = p.b.tcp_info(b).unwrap().rcv_wnd;
    assert!(wnd <= 131_072, "tcp_rmem.max bounds the window: {wnd}");
    assert!(
        capped > tuned * 1.3,
        "a 128 KiB window limits the rate: {:.1} vs {:.1} Mbit/s",
        mbps(bytes, capped),
        mbps(bytes, tuned)
    );
}

/// A tail loss (RFC 8985 §7): the last segments of a flight are lost, so no SACK can
/// reach DupThresh. Two round trips later the sender probes by retransmitting the last
/// segment (no new data to send; TCPLossProbes); its SACK shows that the segment before
/// it, sent earlier, was lost (RFC 8985 §6.2), and fast recovery repairs it -- no
/// retransmission timeout.
#[test]
fn a_tail_loss_is_repaired_by_a_loss_probe_without_a_timeout() {
    let mut c = Conn::open(1, false);
    c.write_segments(4);
    assert_eq!(c.sent(), vec![0, 1, 2, 3]);
    // An RTT sample: segments 0 and 1 arrive and are acknowledged 20 ms later; 2 and 3
    // are lost.
    c.rtt();
    let acked = c.t.now;
    c.ack(2, &[]);
    assert_eq!(c.sent(), Vec::<u32>::new());
    let (at, probe) = c.t.next_seg(Duration::from_secs(1)).expect("a loss probe");
    assert_eq!(probe.seq, c.seg(3), "the last segment is probed");
    assert!(
        at - acked < Duration::from_millis(100),
        "PTO = 2 * SRTT + 2 ms, well before the 200 ms minimum RTO: {:?}",
        at - acked
    );
    assert_eq!(c.counter(Counter::TcpExtTCPLossProbes), 1);
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 0);
    // The probe arrives: segment 3 is SACKed, 2 is the hole.
    c.ack(2, &[(3, 3)]);
    assert_eq!(
        c.sent(),
        vec![2],
        "the hole before the probe is retransmitted at once"
    );
    assert_eq!(c.counter(Counter::TcpExtTCPSackRecovery), 1);
    c.ack(4, &[]);
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 0);
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().send_q, 0);
}

/// The ACK of a flight is lost, not the data: the loss probe (a retransmission of the last
/// segment) reaches a receiver that already has it, which acknowledges everything and
/// reports the probe as a duplicate (RFC 2883). Nothing was lost, so cwnd is not reduced
/// (Linux tcp_process_tlp_ack) and no timeout fires.
#[test]
fn a_lost_ack_costs_a_probe_not_a_timeout() {
    let mut c = Conn::open(1, false);
    c.write_segments(2);
    assert_eq!(c.sent(), vec![0, 1]);
    let cwnd = c.t.stack.tcp_info(c.h).unwrap().cwnd;
    let (_, probe) = c.t.next_seg(Duration::from_secs(2)).expect("a loss probe");
    assert_eq!(probe.seq, c.seg(1));
    assert_eq!(c.counter(Counter::TcpExtTCPLossProbes), 1);
    let d = (c.seg(1), c.seg(2));
    c.t.send(Seg::ack(PEER_ISN + 1, c.seg(2)).win(PEER_WIN).sack(&[d]));
    let info = c.t.stack.tcp_info(c.h).unwrap();
    assert!(info.cwnd >= cwnd, "{} < {cwnd}", info.cwnd);
    assert_eq!(c.counter(Counter::TcpExtTCPLossProbeRecovery), 0);
    assert_eq!(c.counter(Counter::TcpExtTCPTimeouts), 0);
    assert_eq!(c.counter(Counter::TcpExtTCPSackRecovery), 0);
}

/// Send-buffer autotuning (Linux tcp_sndbuf_expand): with tcp_wmem at Linux's default
/// (16 KiB, a tenth of this path's bandwidth-delay product) the send buffer grows to two
/// congestion windows while the sender is not cwnd-limited, up to tcp_wmem.max; capped
/// at 16 KiB the transfer runs at 16 KiB per round trip.
#[test]
fn the_send_buffer_grows_with_cwnd_up_to_wmem_max() {
    let bytes = 4 << 20;
    let linux = (16_384, 4 << 20);
    let rmem = (131_072, 6 << 20);
    let (tuned, _, _) = bulk(path(0.0), 1, bytes, linux, rmem);
    assert!(
        mbps(bytes, tuned) > 70.0,
        "{:.1} Mbit/s",
        mbps(bytes, tuned)
    );
    let (capped, _, _) = bulk(path(0.0), 1, bytes / 8, (16_384, 16_384), rmem);
    let rate = mbps(bytes / 8, capped);
    assert!(rate < 16_384.0 * 8.0 / 0.020 / 1e6, "{rate:.1} Mbit/s");
}

/// The RACK loop (RFC 8985 §6.2): a retransmission is lost only once its own
/// (re)transmission time plus the RTT (and reordering window) has passed (Linux
/// `tcp_rack_detect_loss` against the retransmission's send time): a SACK that arrives
/// sooner cannot reflect it. A peer on a path of near-zero RTT (50 µs) crafts ACKs 10 µs
/// apart that keep the first segment a hole and SACK each new segment as it leaves, some
/// at the very instant a retransmission went out. Each such SACK is for data sent at or
/// after the retransmission, so without the time rule every ACK resends segment 0 at
/// once. Catches: the time rule dropped (retransmissions of segment 0 on every ACK, some
/// at the same instant), or measured from the first transmission.
#[test]
fn a_retransmission_is_declared_lost_at_most_once_per_rtt() {
    let srtt = Duration::from_micros(50);
    let mut c = Conn::open_after(0, false, srtt);
    c.write_segments(200);
    assert_eq!(c.sent(), (0..10).collect::<Vec<_>>());
    let mut rtx0: Vec<Instant> = Vec::new();
    let mut newest = 9;
    for step in 0..60 {
        // Every third ACK at the same instant as the previous one.
        if step % 3 != 0 {
            c.t.now += Duration::from_micros(10);
        }
        let blocks = [(c.seg(1), c.seg(newest + 1))];
        c.t.send(Seg::ack(PEER_ISN + 1, c.seg(0)).win(PEER_WIN).sack(&blocks));
        for s in c.sent() {
            if s == 0 {
                rtx0.push(c.t.now);
            }
            newest = newest.max(s);
        }
    }
    assert!(
        rtx0.len() >= 2,
        "segment 0 is resent when lost again: {rtx0:?}"
    );
    for w in rtx0.windows(2) {
        assert!(
            w[1] - w[0] >= srtt,
            "segment 0 resent {:?} after its last retransmission, sooner than one RTT: {rtx0:?}",
            w[1] - w[0]
        );
    }
    let rtx = c.counter(Counter::TcpRetransSegs);
    assert!(rtx <= 60 * 10 / 50 + 2, "{rtx} retransmissions in 600 µs");
}

/// One segment in flight is kept inline in the retransmission queue (the `rtx_queue`
/// memory kind counts no board), yet it is the whole queue's: when it is lost the
/// timeout resends it (RFC 6298 §5.4), its ACK empties the queue, and the queue then
/// grows to several segments and takes SACKs, three SACKed above a hole starting a fast
/// retransmit of it (RFC 6675 §5).
#[test]
fn a_lone_segment_in_flight_is_resent_then_the_queue_grows_and_takes_sacks() {
    let mut c = Conn::open(1, false);
    let boards = |c: &Conn| c.t.stack.memory().get("rtx_queue").unwrap().count;
    assert_eq!(c.t.write(c.h, &[1u8; 100]), 100);
    let data: Vec<Seg> =
        c.t.recv_all()
            .into_iter()
            .filter(|s| !s.payload.is_empty())
            .collect();
    assert_eq!(data.len(), 1, "{data:?}");
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().unacked, 1);
    assert_eq!(boards(&c), 0, "one segment in flight holds no board");
    // It is lost: the retransmission timer resends the same 100 bytes.
    let resent: Vec<Seg> =
        c.t.advance(Duration::from_secs(2))
            .into_iter()
            .map(|(_, s)| s)
            .filter(|s| !s.payload.is_empty())
            .collect();
    assert!(!resent.is_empty(), "no retransmission");
    assert_eq!(
        (resent[0].seq, resent[0].payload.len()),
        (c.base, 100),
        "the lost segment, whole"
    );
    assert!(c.counter(Counter::TcpRetransSegs) >= 1);
    // Its ACK empties the queue.
    c.t.now += Duration::from_millis(20);
    c.t.send(Seg::ack(PEER_ISN + 1, c.base.wrapping_add(100)).win(PEER_WIN));
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().unacked, 0);
    assert_eq!(boards(&c), 0);
    c.base = c.base.wrapping_add(100);
    // Growth: acknowledged in full, each round sends more, until four are in flight.
    c.write_segments(40);
    let mut flight = c.sent();
    for _ in 0..8 {
        if flight.len() >= 4 {
            break;
        }
        c.rtt();
        let upto = flight.last().map_or(0, |&l| l + 1);
        c.ack(upto, &[]);
        flight = c.sent();
    }
    assert!(flight.len() >= 4, "the window never opened: {flight:?}");
    assert_eq!(
        c.t.stack.tcp_info(c.h).unwrap().unacked as usize,
        flight.len()
    );
    assert_eq!(boards(&c), 1, "several segments in flight: a board");
    // The first is lost, the next three SACKed: fast retransmit of the first.
    let first = flight[0];
    let before = c.counter(Counter::TcpRetransSegs);
    c.ack(first, &[(first + 1, first + 1)]);
    c.ack(first, &[(first + 1, first + 2)]);
    c.ack(first, &[(first + 1, first + 3)]);
    let sent = c.sent();
    assert!(
        sent.contains(&first),
        "no fast retransmit of {first}: {sent:?}"
    );
    assert_eq!(c.counter(Counter::TcpRetransSegs), before + 1);
    assert!(c.counter(Counter::TcpExtTCPSackRecovery) >= 1);
}
