//! Flow control and timing against what Linux does (issue #10): the receive window as
//! `tcp_select_window` computes it, sender silly-window avoidance, the tail-loss-probe
//! timeout, the handshake's RTT sample, and path MTU discovery. Each test drives the stack
//! segment by segment as a scripted peer ([`SegTest`]).

use core::time::Duration;

use ustack_obs::Counter;
use ustack_stack::tcp::State;
use ustack_stack::{Error, TcpHandle};
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
    // RFC 6298 §5.7 / Linux tcp_init_metrics: no sample from the handshake, so 3 s.
    assert_eq!(at - sent_at, Duration::from_secs(3), "the fallback RTO");
}

/// A connection accepted with timestamps on (the peer's TSval 100, then 101), its
/// handshake taking `rtt`: the first SRTT is `rtt`. Returns the test, the handle and the
/// first sequence number of the stack's data.
fn accepted_with_timestamps(rtt: Duration) -> (SegTest, TcpHandle, u32) {
    let mut t = SegTest::listening(80);
    let syn = Seg::syn(PEER_ISN).mss(1000).ts(100, 0);
    let (h, base) = accepted(&mut t, syn, 65_535, rtt);
    assert_eq!(t.stack.tcp_info(h).unwrap().srtt, Some(rtt));
    (t, h, base)
}

/// The ACK of the one segment outstanding (the request/response case) samples the RTT
/// from that segment's send time, in microseconds, as Linux's `tcp_ack_update_rtt`
/// prefers it ("Prefer RTT measured from ACK's timing to TS-ECR") to the echoed
/// timestamp, which counts whole milliseconds: a 250 µs round trip moves SRTT from the
/// handshake's 30 ms by 250 µs / 8 - 30 ms / 8 (RFC 6298 §2.3, SRTT <- 7/8 SRTT + 1/8 R'),
/// not as a sample of 0 ms would.
#[test]
fn the_ack_of_one_segment_samples_the_rtt_in_microseconds() {
    let (mut t, h, base) = accepted_with_timestamps(30 * MS);
    t.write(h, b"request");
    let data = t.recv().expect("data");
    assert_eq!(data.seq, base);
    let (ours, _) = data.ts.expect("timestamps negotiated");
    let rtt = Duration::from_micros(250);
    t.now += rtt;
    t.send(Seg::ack(PEER_ISN + 1, base + 7).ts(102, ours));
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!(info.srtt, Some(30 * MS * 7 / 8 + rtt / 8), "{info:?}");
}

/// The ACK of several segments (the fast path's queue walk) samples the RTT from the
/// echoed timestamp, on the stack's clock (its per-connection offset taken off): two
/// full segments sent 10 ms apart, both acknowledged 40 ms after the first with the
/// second's TSval echoed, give a 30 ms sample (the first's send time would give 40 ms),
/// so SRTT moves from the handshake's 100 ms to 7/8 * 100 + 30/8 ms.
#[test]
fn an_ack_of_several_segments_samples_the_rtt_from_the_echo() {
    let (mut t, h, base) = accepted_with_timestamps(100 * MS);
    // Full segments: the MSS less the timestamp option's 12 bytes.
    assert_eq!(t.write(h, &[1; 988]), 988);
    let first = t.recv().expect("first segment");
    t.now += 10 * MS;
    assert_eq!(t.write(h, &[2; 988]), 988);
    let second = t.recv().expect("second segment");
    assert_eq!((first.seq, second.seq), (base, base + 988));
    let (echo, _) = second.ts.expect("timestamps negotiated");
    t.now += 30 * MS;
    let fast = t.stack.tcp_rcv_fast_hits();
    t.send(Seg::ack(PEER_ISN + 1, base + 2 * 988).ts(102, echo));
    assert_eq!(t.stack.tcp_rcv_fast_hits(), fast + 1, "the fast path's ACK");
    let info = t.stack.tcp_info(h).unwrap();
    assert_eq!(info.srtt, Some(100 * MS * 7 / 8 + 30 * MS / 8), "{info:?}");
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

/// The segments a write of `total` bytes from `base` sent, taken in rounds of draining
/// the transmit queue at one instant (at most 10), checked in order: the bytes sent and
/// the rounds taken.
fn drain_in_rounds(t: &mut SegTest, base: u32, total: usize) -> (usize, usize) {
    let mut sent = 0usize;
    let mut rounds = 0;
    while sent < total && rounds < 10 {
        for s in t.recv_all() {
            assert_eq!(s.seq, base.wrapping_add(sent as u32), "in order, no gap");
            sent += s.payload.len();
        }
        rounds += 1;
    }
    (sent, rounds)
}

/// A write larger than the transmit queue (`net.core.txqueuelen`) leaves whole while the
/// clock stands still: the connections the full queue held back send again in the driver's
/// next round of draining, not when the clock next moves. (A driver on a virtual clock runs
/// rounds at one instant; holding the rest back until the clock moved stalled such a write
/// until the next timer, a delayed ACK or an RTO away.)
#[test]
fn a_write_larger_than_the_transmit_queue_leaves_in_rounds_at_one_instant() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.core.txqueuelen", 8).unwrap();
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    let (h, base) = accepted(&mut t, Seg::syn(PEER_ISN).mss(1000), 65_535, 10 * MS);
    // The initial congestion window: 10 segments may leave before any ACK.
    let total = 10 * 1000;
    assert_eq!(t.write(h, &vec![5u8; total]), total);
    let (sent, rounds) = drain_in_rounds(&mut t, base, total);
    assert_eq!(
        sent, total,
        "the initial window left within {rounds} rounds at one instant"
    );
    assert!(
        rounds > 1,
        "the queue of 8 held some back for a later round"
    );
    assert_eq!(t.stack.mib().drops_total(), 0, "nothing dropped");
}

/// The smallest transmit queue, `net.core.txqueuelen` = 1: a write of several segments
/// queues one frame and waits for room, nothing is dropped at the queue, and the write
/// still leaves whole, a segment per round.
#[test]
fn a_transmit_queue_of_one_frame_takes_a_write_a_segment_at_a_time() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.core.txqueuelen", 1).unwrap();
    let (h, base) = accepted(&mut t, Seg::syn(PEER_ISN).mss(1000), 65_535, 10 * MS);
    let total = 4 * 1000;
    assert_eq!(t.write(h, &vec![7u8; total]), total);
    assert_eq!(
        t.stack.tx_queue_len(),
        1,
        "one frame queued, the rest waits"
    );
    assert_eq!(
        t.stack.mib().drops_total(),
        0,
        "nothing dropped at the queue"
    );
    let (sent, rounds) = drain_in_rounds(&mut t, base, total);
    assert_eq!(sent, total, "the write left within {rounds} rounds");
    assert_eq!(t.stack.mib().drops_total(), 0, "nothing dropped");
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
    let mut edge = next.wrapping_add(64_240); // the SYN-ACK's unscaled window (44 x 1460)
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

// ---- path MTU discovery -----------------------------------------------------------------

/// The Internet checksum (RFC 1071) of `b`.
fn csum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 header of `total` bytes from `src` to `dst` carrying `proto`, checksum right.
fn ip_header(src: [u8; 4], dst: [u8; 4], proto: u8, total: usize, df: bool) -> Vec<u8> {
    let mut h = vec![
        0x45,
        0,
        0,
        0,
        0,
        0,
        if df { 0x40 } else { 0 },
        0,
        64,
        proto,
        0,
        0,
    ];
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// A router's ICMP "fragmentation needed" (type 3 code 4, RFC 1191 §4) with next-hop MTU
/// `mtu`, quoting a 1500-byte TCP datagram of ours on the test connection whose header
/// carried sequence number `seq` (the IP header and the first 8 bytes of TCP, RFC 792).
fn frag_needed(t: &SegTest, mtu: u16, seq: u32) -> Vec<u8> {
    let mtu = mtu.to_be_bytes();
    icmp_quoting(t, [3, 4], [0, 0, mtu[0], mtu[1]], seq)
}

/// An ICMP error of `[type, code]` with the second word `rest`, quoting a segment of
/// ours with sequence number `seq`.
fn icmp_quoting(t: &SegTest, ty_code: [u8; 2], rest: [u8; 4], seq: u32) -> Vec<u8> {
    let ours = ustack_testkit::tcp::LOCAL_IP.octets();
    let peer = ustack_testkit::tcp::PEER.ip().octets();
    let mut quote = ip_header(ours, peer, 6, 1500, true);
    quote.extend_from_slice(&t.port.to_be_bytes());
    quote.extend_from_slice(&ustack_testkit::tcp::PEER.port().to_be_bytes());
    quote.extend_from_slice(&seq.to_be_bytes());
    let mut icmp = vec![ty_code[0], ty_code[1], 0, 0];
    icmp.extend_from_slice(&rest);
    icmp.extend_from_slice(&quote);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let router = [198, 51, 100, 1];
    let mut packet = ip_header(router, ours, 1, 20 + icmp.len(), false);
    packet.extend_from_slice(&icmp);
    packet
}

/// A connection whose peer offers MSS 1460 and a large window, with four full segments
/// in flight; returns the handle and the first data sequence number.
fn four_in_flight(t: &mut SegTest) -> (TcpHandle, u32) {
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    let syn = Seg::syn(PEER_ISN).mss(1460).wscale(7).sack_perm();
    let (h, base) = accepted(t, syn, 8192, 10 * MS);
    t.write(h, &vec![5u8; 4 * 1460]);
    let sent: Vec<usize> = t.recv_all().iter().map(|s| s.payload.len()).collect();
    assert_eq!(sent, [1460; 4]);
    (h, base)
}

/// Sequence ranges of the data segments `segs`, checking each fits in `mss`.
fn ranges_within(segs: &[Seg], mss: usize) -> Vec<(u32, u32)> {
    segs.iter()
        .filter(|s| !s.payload.is_empty())
        .map(|s| {
            assert!(s.payload.len() <= mss, "{} > {mss}", s.payload.len());
            (s.seq, s.seq.wrapping_add(s.payload.len() as u32))
        })
        .collect()
}

/// RFC 1191 §6.3 / Linux `tcp_v4_mtu_reduced`: a fragmentation-needed for a segment in
/// flight (RFC 5927 §4.1: its sequence number within SND.UNA..SND.NXT) lowers the MSS to
/// the hop's MTU less 40 bytes of headers, and the segments too large for it are sent
/// again at once in pieces that fit (Linux `tcp_simple_retransmit`), with no timeout;
/// new data follows at the new size.
#[test]
fn icmp_frag_needed_shrinks_segments_and_retransmits_at_once() {
    let mut t = SegTest::listening(80);
    let (h, base) = four_in_flight(&mut t);
    let icmp = frag_needed(&t, 1000, base.wrapping_add(1460));
    let now = t.now;
    t.stack.receive(now, &icmp);
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 960);
    let again = ranges_within(&t.recv_all(), 960);
    // Every lost byte, contiguous from SND.UNA, in pieces of at most 960 bytes.
    assert_eq!(again.first().map(|r| r.0), Some(base), "{again:?}");
    for w in again.windows(2) {
        assert_eq!(w[0].1, w[1].0, "{again:?}");
    }
    assert_eq!(again.last().unwrap().1, base.wrapping_add(4 * 1460));
    assert_eq!(again.len(), 8, "1460 = 960 + 500, four times: {again:?}");
    let acked = base.wrapping_add(4 * 1460);
    t.send(Seg::ack(PEER_ISN + 1, acked).win(8192));
    t.write(h, &vec![6u8; 3000]);
    let new = ranges_within(&t.recv_all(), 960);
    assert_eq!(new.first().map(|r| r.0), Some(acked));
    let m = t.stack.mib();
    assert_eq!(m.get(Counter::TcpExtTCPTimeouts), 0);
    assert_eq!(m.get(Counter::TcpExtOutOfWindowIcmps), 0);
}

/// RFC 5927 §4.1: an ICMP error whose quoted sequence number is not in flight (an
/// off-path attacker's guess) is ignored and counted (Linux OutOfWindowIcmps); the MSS
/// stays and nothing is sent.
#[test]
fn a_forged_frag_needed_is_ignored_and_counted() {
    let mut t = SegTest::listening(80);
    let (h, base) = four_in_flight(&mut t);
    for seq in [
        base.wrapping_add(4 * 1460 + 1), // beyond SND.NXT
        base.wrapping_sub(1),            // before SND.UNA
        base.wrapping_add(1 << 30),
    ] {
        let icmp = frag_needed(&t, 576, seq);
        let now = t.now;
        t.stack.receive(now, &icmp);
        assert_eq!(t.recv_all(), vec![], "nothing sent for seq {seq}");
    }
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 1460);
    assert_eq!(t.stack.mib().get(Counter::TcpExtOutOfWindowIcmps), 3);
    // SND.NXT itself is accepted (Linux `between(seq, snd_una, snd_nxt)`).
    let icmp = frag_needed(&t, 576, base.wrapping_add(4 * 1460));
    let now = t.now;
    t.stack.receive(now, &icmp);
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 536);
}

/// Linux `tcp_v4_err` -> `tcp_v4_mtu_reduced` in SYN-SENT: a fragmentation-needed for
/// our SYN (RFC 5927 §4.1: the quoted sequence number must be the ISS, the only one in
/// flight) caps the MSS the SYN-ACK then settles, so the first data segments already fit
/// the hop; one quoting another sequence number is ignored and counted. Catches: SYN-SENT
/// ignoring the ICMP (1460-byte segments), or accepting a forged one.
#[test]
fn frag_needed_while_connecting_shrinks_the_first_segments() {
    let mut t = SegTest::new(80);
    let (h, syn) = t.connect();
    // A forged one first: ISS + 1 is not in flight.
    let now = t.now;
    let forged = frag_needed(&t, 576, syn.seq.wrapping_add(1));
    t.stack.receive(now, &forged);
    assert_eq!(t.stack.mib().get(Counter::TcpExtOutOfWindowIcmps), 1);
    let icmp = frag_needed(&t, 1000, syn.seq);
    t.stack.receive(now, &icmp);
    assert_eq!(t.stack.mib().get(Counter::TcpExtOutOfWindowIcmps), 1);
    assert_eq!(t.recv_all(), vec![], "nothing to resend for a SYN");
    synack_mss_1460(&mut t, &syn);
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 960);
    t.write(h, &vec![7u8; 3000]);
    let sent = ranges_within(&t.recv_all(), 960);
    assert_eq!(sent.len(), 4, "960 * 3 + 120: {sent:?}");

    // Without the ICMP, the same handshake sends 1460-byte segments.
    let mut t = SegTest::new(80);
    let (h, syn) = t.connect();
    synack_mss_1460(&mut t, &syn);
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 1460);
}

/// Linux `icmp_unreach` -> `tcp_v4_err`, the handler ICMPv6's errors share: a Time
/// Exceeded in transit for our SYN fails the connection with EHOSTUNREACH; for a
/// segment of an established connection it is a soft error (reported once by
/// `SO_ERROR`, the connection stays); a reassembly timeout (code 1) is ignored.
#[test]
fn time_exceeded_fails_an_opening_connection_and_is_soft_once_established() {
    let mut t = SegTest::new(80);
    let (h, syn) = t.connect();
    let now = t.now;
    t.stack
        .receive(now, &icmp_quoting(&t, [11, 1], [0; 4], syn.seq));
    assert_eq!(
        t.stack.tcp_state(h),
        Ok(State::SynSent),
        "reassembly: ignored"
    );
    t.stack
        .receive(now, &icmp_quoting(&t, [11, 0], [0; 4], syn.seq));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Closed));
    assert_eq!(t.stack.tcp_take_error(h), Ok(Some(Error::HostUnreachable)));

    let mut t = SegTest::listening(80);
    let (h, base) = four_in_flight(&mut t);
    let now = t.now;
    t.stack
        .receive(now, &icmp_quoting(&t, [11, 0], [0; 4], base));
    assert_eq!(t.stack.tcp_state(h), Ok(State::Established));
    assert_eq!(t.stack.tcp_take_error(h), Ok(Some(Error::HostUnreachable)));
    assert_eq!(t.stack.tcp_take_error(h), Ok(None));
}

/// The peer's SYN-ACK to our `syn`, offering MSS 1460, and our ACK.
fn synack_mss_1460(t: &mut SegTest, syn: &Seg) {
    t.send(
        Seg::syn(PEER_ISN)
            .flags(Flags::SYN | Flags::ACK)
            .with_ack(syn.seq.wrapping_add(1))
            .mss(1460)
            .win(65_535),
    );
    t.recv_all();
}

/// An absurd MTU (68, the IPv4 minimum) is raised to `net.ipv4.route.min_pmtu` (552, Linux
/// `__ip_rt_update_pmtu`), so segments become 512 bytes, not 28.
#[test]
fn a_tiny_mtu_is_clamped_to_min_pmtu() {
    let mut t = SegTest::listening(80);
    let (h, base) = four_in_flight(&mut t);
    let icmp = frag_needed(&t, 68, base);
    let now = t.now;
    t.stack.receive(now, &icmp);
    assert_eq!(t.stack.tcp_info(h).unwrap().mss, 512);
    let again = ranges_within(&t.recv_all(), 512);
    assert!(
        again.iter().any(|r| r.1.wrapping_sub(r.0) == 512),
        "{again:?}"
    );
}

/// RFC 4821 §7.1 black-hole detection, Linux `tcp_mtu_probing` = 1: a path that drops
/// large segments without any ICMP. After `tcp_retries1` (3) timeouts the MSS falls to
/// `tcp_base_mss` (1024), and at the next timeout it halves (512), so the retransmissions
/// shrink until one gets through. With the sysctl at its default 0 they stay full-sized.
#[test]
fn black_hole_fallback_with_tcp_mtu_probing() {
    for probing in [0, 1] {
        let mut t = SegTest::listening(80);
        t.stack
            .set_sysctl("net.ipv4.tcp_mtu_probing", probing)
            .unwrap();
        let (h, base) = four_in_flight(&mut t);
        let sent = t.advance(Duration::from_secs(7));
        let head: Vec<usize> = sent
            .iter()
            .filter(|(_, s)| s.seq == base)
            .map(|(_, s)| s.payload.len())
            .collect();
        if probing == 0 {
            assert_eq!(head, [1460; 5], "timeouts at 0.2, 0.6, 1.4, 3, 6.2 s");
            assert_eq!(t.stack.tcp_info(h).unwrap().mss, 1460);
        } else {
            assert_eq!(head, [1460, 1460, 1460, 1024, 512]);
            assert_eq!(t.stack.tcp_info(h).unwrap().mss, 512);
            // The path carries 512-byte segments: the rest follows at that size.
            t.send(Seg::ack(PEER_ISN + 1, base.wrapping_add(512)).win(8192));
            let rest = ranges_within(&t.recv_all(), 512);
            assert_eq!(rest.first().map(|r| r.0), Some(base.wrapping_add(512)));
        }
    }
}

/// Linux `__tcp_ack_snd_check`: once the window offered is the whole free buffer, a
/// segment the window cannot grow past is acknowledged by the read that takes it ("right
/// edge of window advances far enough. (tcp_recvmsg() will send ACK otherwise)",
/// `tcp_cleanup_rbuf`), not every other segment: one ACK for what came since the last,
/// as long as the peer has half the window last offered left to send into; an unread
/// stream gets an ACK each time that halves.
#[test]
fn a_reader_acknowledges_what_came_since_its_last_read_while_half_the_window_is_left() {
    let mut t = SegTest::listening(80);
    let syn = Seg::syn(PEER_ISN).mss(1000).wscale(7).sack_perm();
    let (h, base) = accepted(&mut t, syn, 8192, 10 * MS);
    // A fixed buffer (`SO_RCVBUF`: no autotuning), so that the window soon offers all of
    // its free space.
    t.stack.tcp_set_recv_buffer(h, 32 * 1024).unwrap();
    let mut next = PEER_ISN + 1;
    let send = |t: &mut SegTest, next: &mut u32, n: usize| {
        for _ in 0..n {
            t.now += Duration::from_micros(10);
            t.send(Seg::ack(*next, base).data(&[7u8; 1000]));
            *next = next.wrapping_add(1000);
        }
    };
    // Past the quick-ACK start: segment pairs, each read at once.
    for _ in 0..40 {
        send(&mut t, &mut next, 2);
        t.read(h).unwrap();
        t.recv_all();
    }
    // Eight segments, half the window not reached: no ACK until the read, then one.
    send(&mut t, &mut next, 8);
    assert_eq!(t.recv_all(), vec![], "no ACK before the read");
    assert_eq!(t.read(h).unwrap().len(), 8000);
    let acks = t.recv_all();
    assert_eq!(acks.len(), 1, "one ACK at the read: {acks:?}");
    assert_eq!(acks[0].ack, next, "for everything read");
    // Unread: an ACK while the window still grows (rcv_ssthresh), then one each time what
    // is left of the window (about 64 KiB: the buffer Linux makes of SO_RCVBUF's 32)
    // halves, instead of one every other segment (25).
    send(&mut t, &mut next, 50);
    let acks = t.recv_all();
    assert!(
        (2..=5).contains(&acks.len()),
        "ACKs as the window is used: {acks:?}"
    );
}
