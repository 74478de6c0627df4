//! Flow control and timing against what Linux does (issue #10): the receive window as
//! `tcp_select_window` computes it, sender silly-window avoidance, the tail-loss-probe
//! timeout, the handshake's RTT sample, and path MTU discovery. Each test drives the stack
//! segment by segment as a scripted peer ([`SegTest`]).

use core::time::Duration;

use ustack_obs::Counter;
use ustack_stack::TcpHandle;
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_wire::tcp::Flags;

const PEER_ISN: u32 = 1000;
const MS: Duration = Duration::from_millis(1);

/// An accepted connection whose handshake took `rtt`; returns the handle and the first
/// sequence number of the stack's data.
fn accepted(t: &mut SegTest, syn: Seg, window: u16, rtt: Duration) -> (TcpHandle, u32) {
    let (h, synack) = t.accept_after(syn, window, rtt);
    (h, synack.seq.wrapping_add(1))
}

// ---- handshake RTT ----------------------------------------------------------------------

/// Linux `tcp_synack_rtt_meas`: the passive open's handshake is an RTT sample (RFC 6298
/// §2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4 * RTTVAR) with Linux's 200 ms
/// floor), so data lost right after accept is retransmitted after 230 ms for a 30 ms
/// handshake, not after the 1 s initial RTO. With the SYN-ACK sent twice, Karn's rule
/// (RFC 6298 §3) forbids the sample and the RTO stays 1 s.
#[test]
fn the_handshake_gives_the_first_rtt_sample() {
    let mut t = SegTest::listening(80);
    let (h, base) = accepted(&mut t, Seg::syn(PEER_ISN).mss(1000), 65_535, 30 * MS);
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!(info.srtt, Some(30 * MS), "SRTT from the handshake");
    t.write(h, b"lost");
    let sent_at = t.now;
    assert_eq!(t.recv().expect("data").seq, base);
    let (at, again) = t
        .next_seg(Duration::from_secs(5))
        .expect("a retransmission");
    assert_eq!(again.seq, base);
    assert_eq!(at - sent_at, 230 * MS, "RTO = 30 + max(200, 4 * 15) ms");

    // The SYN is retransmitted, so the SYN-ACK goes twice: no sample.
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(PEER_ISN).mss(1000));
    let synack = t.recv().expect("SYN-ACK");
    t.now += 10 * MS;
    t.send(Seg::syn(PEER_ISN).mss(1000));
    assert!(t.recv().expect("SYN-ACK again").has(Flags::SYN));
    t.now += 30 * MS;
    t.send(Seg::ack(PEER_ISN + 1, synack.seq.wrapping_add(1)).win(65_535));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    assert_eq!(t.stack.tcp_info(h).unwrap().srtt, None, "Karn: no sample");
    t.write(h, b"lost");
    let sent_at = t.now;
    t.recv().expect("data");
    let (at, _) = t
        .next_seg(Duration::from_secs(5))
        .expect("a retransmission");
    assert_eq!(at - sent_at, Duration::from_secs(1), "the initial RTO");
}

// ---- tail loss probe --------------------------------------------------------------------

/// RFC 8985 §7.2 / Linux `tcp_schedule_loss_probe`: PTO = 2 * SRTT + 2 ms with several
/// segments in flight, at least 10 ms; with one segment the peer's delayed-ACK allowance
/// (200 ms, WCDelAckT) is added, and the PTO is never later than the RTO.
#[test]
fn loss_probe_timeout_follows_rfc8985() {
    // (handshake RTT, segments written, expected PTO)
    let cases = [
        // 2 * 20 + 2 ms.
        (20 * MS, 2, 42 * MS),
        // 2 * 1 + 2 ms = 4 ms, raised to the 10 ms floor.
        (MS, 2, 10 * MS),
        // 2 * 20 + 200 = 240 ms, capped by the RTO: 20 + max(200, 4 * 10) = 220 ms.
        (20 * MS, 1, 220 * MS),
    ];
    for (rtt, segs, pto) in cases {
        let mut t = SegTest::listening(80);
        let syn = Seg::syn(PEER_ISN).mss(1000).wscale(7).sack_perm();
        let (h, base) = accepted(&mut t, syn, 8192, rtt);
        t.write(h, &vec![1u8; 1000 * segs]);
        let sent_at = t.now;
        assert_eq!(t.recv_all().len(), segs);
        let (at, probe) = t.next_seg(Duration::from_secs(5)).expect("a probe");
        assert_eq!(
            probe.seq,
            base.wrapping_add(1000 * (segs as u32 - 1)),
            "the last segment is probed"
        );
        assert_eq!(at - sent_at, pto, "PTO for rtt {rtt:?}, {segs} segments");
        let m = t.stack.mib();
        assert_eq!(
            (
                m.get(Counter::TcpExtTCPLossProbes),
                m.get(Counter::TcpExtTCPTimeouts)
            ),
            (1, 0),
            "a loss probe, not a timeout"
        );
    }
}

// ---- sender silly window avoidance ------------------------------------------------------

/// RFC 9293 §3.8.6.2.1 and Linux `tcp_bound_to_half_wnd`: against a peer whose window is
/// 1,536 bytes (less than two segments), segments are half the window, so the window is
/// filled by two 768-byte segments, never a full segment plus a tiny tail; and an ACK of
/// everything lets the next ones out at once (no wait with data queued).
#[test]
fn a_small_peer_window_is_filled_with_half_window_segments() {
    let mut t = SegTest::listening(80);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    let (h, base) = accepted(&mut t, Seg::syn(PEER_ISN).mss(1460), 1536, 10 * MS);
    let total = 20_000usize;
    assert_eq!(t.write(h, &vec![3u8; total]), total);
    let mut sizes = Vec::new();
    let mut acked = 0usize;
    while acked < total {
        let segs = t.recv_all();
        assert!(
            !segs.is_empty(),
            "an ACK of everything with {} bytes queued sent nothing",
            total - acked
        );
        for s in &segs {
            assert_eq!(s.seq, base.wrapping_add(acked as u32), "in order, no gap");
            acked += s.payload.len();
            sizes.push(s.payload.len());
        }
        t.now += MS;
        t.send(Seg::ack(PEER_ISN + 1, base.wrapping_add(acked as u32)).win(1536));
    }
    let (last, rest) = sizes.split_last().unwrap();
    assert!(rest.iter().all(|&n| n == 768), "{sizes:?}");
    assert!(*last <= 768, "{sizes:?}");
}

// ---- the receive window -----------------------------------------------------------------

/// The receive window as Linux's `tcp_select_window` computes it, against a reader that
/// pauses: the peer sends exactly what each ACK allows (up to the advertised right edge,
/// which the window scale rounds up), and
/// - the right edge never moves left (RFC 9293 §3.8.6.2.2 "MUST NOT shrink the window"),
/// - every byte inside it is kept (no TCPRcvQDrop: a sender that respects the window never
///   has data dropped),
/// - the window reaches 0 once the buffer is full (TCPToZeroWindowAdv), so the sender
///   probes instead of retransmitting into it,
/// - and when the reader drains the buffer a window update goes out at once (Linux
///   `tcp_cleanup_rbuf`).
#[test]
fn a_pausing_reader_closes_the_window_without_dropping_data() {
    let mut t = SegTest::listening(80);
    let syn = Seg::syn(PEER_ISN).mss(1000).wscale(7).sack_perm();
    let (h, base) = accepted(&mut t, syn, 8192, 10 * MS);
    let shift = 7; // our shift for tcp_rmem.max = 6 MiB
    let mut next = PEER_ISN + 1;
    let mut edge = next.wrapping_add(65_535); // the SYN-ACK's unscaled window
    let mut zero = false;
    let mut sent_total = 0usize;
    for _ in 0..10_000 {
        let room = edge.wrapping_sub(next) as usize;
        if room == 0 {
            zero = true;
            break;
        }
        // 1000-byte segments (not a multiple of the window's unit), the last one cut to
        // the edge; an ACK comes for every other one.
        let len = room.min(1000);
        t.now += Duration::from_micros(100);
        t.send(Seg::ack(next, base).data(&vec![9u8; len]));
        next = next.wrapping_add(len as u32);
        sent_total += len;
        for a in t.recv_all() {
            assert_eq!(a.ack, next, "everything sent was taken");
            let new_edge = a.ack.wrapping_add(u32::from(a.window) << shift);
            assert!(
                (new_edge.wrapping_sub(edge) as i32) >= 0,
                "the right edge moved left: {edge} -> {new_edge}"
            );
            edge = new_edge;
        }
        if t.stack.tcp_info(h).unwrap().recv_q != sent_total {
            panic!("bytes were dropped");
        }
    }
    assert!(zero, "the window never closed");
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPRcvQDrop), 0);
    assert_eq!(m.get(Counter::TcpExtTCPToZeroWindowAdv), 1);
    let rcvbuf = t.stack.tcp_recv_buffer(h).unwrap();
    assert!(
        sent_total >= rcvbuf && sent_total < rcvbuf + (1 << shift) * 64,
        "the buffer ({rcvbuf}) was filled, with at most rounding slack: {sent_total}"
    );
    // A zero-window probe (an old byte) gets the zero window again.
    t.send(Seg::ack(next.wrapping_sub(1), base).data(&[9]));
    let a = t.recv().expect("an ACK of the probe");
    assert_eq!((a.ack, a.window), (next, 0));
    // The reader drains: a window update at once, offering the free buffer.
    let got = t.read(h).unwrap();
    assert_eq!(got.len(), sent_total);
    // (The test reads in 4 KiB calls: an update goes out whenever a read at least
    // doubled the window, the first once 1/16 of the buffer is free.)
    let upd = t.recv_all();
    assert!(!upd.is_empty(), "a window update");
    assert!(upd.iter().all(|u| u.ack == next && u.window > 0), "{upd:?}");
    let last = upd.last().unwrap();
    assert!(
        (usize::from(last.window) << shift) >= rcvbuf / 2,
        "the update offers the drained buffer: {last:?}"
    );
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPFromZeroWindowAdv), 1);
}
