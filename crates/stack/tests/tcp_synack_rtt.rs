//! A passive open's first RTT sample comes from the handshake (Linux
//! `tcp_synack_rtt_meas`: from the SYN-ACK's send time when it was sent once, else by its
//! echoed timestamp), so the first RTO after accept follows the path instead of the 1 s
//! initial RTO (RFC 6298 §2.1).

use core::time::Duration;

use ustack_testkit::tcp::{Seg, SegTest};
use ustack_wire::tcp::Flags;

/// The handshake as the peer runs it, `rtt` between our SYN-ACK and its ACK; the
/// accepted connection's (srtt, rto).
fn accept_after(rtt: Duration, timestamps: bool) -> (Option<Duration>, Duration) {
    let mut t = SegTest::listening(80);
    let syn = Seg::syn(1000);
    t.send(if timestamps { syn.ts(77, 0) } else { syn });
    let synack = t.recv().expect("SYN-ACK");
    assert!(t.advance(rtt).is_empty());
    let ack = Seg::ack(1001, synack.seq.wrapping_add(1));
    t.send(match synack.ts {
        Some((tsval, _)) if timestamps => ack.ts(78, tsval),
        _ => ack,
    });
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    let info = t.stack.tcp_info(h).unwrap();
    (info.srtt, info.rto)
}

#[test]
fn a_passive_open_takes_its_first_rtt_sample_from_the_handshake() {
    let (srtt, rto) = accept_after(Duration::from_millis(5), true);
    assert_eq!(srtt, Some(Duration::from_millis(5)));
    // RFC 6298 §2.2 with the 200 ms floor (Linux TCP_RTO_MIN), far below 1 s.
    assert!(
        rto >= Duration::from_millis(200) && rto < Duration::from_millis(300),
        "{rto:?}"
    );
}

#[test]
fn without_timestamps_a_passive_open_samples_the_synack_send_time() {
    // Linux measures the handshake from the request's SYN-ACK stamp, timestamps or not.
    let (srtt, rto) = accept_after(Duration::from_millis(5), false);
    assert_eq!(srtt, Some(Duration::from_millis(5)));
    assert!(rto < Duration::from_millis(300), "{rto:?}");
}

/// RFC 6298 §5.7 (Linux `tcp_init_transfer` -> `tcp_init_metrics`, `TCP_TIMEOUT_FALLBACK`):
/// a handshake whose SYN (active open) or SYN-ACK (passive) was retransmitted gives no RTT
/// sample without timestamps (Karn), so the connection starts with RTO 3 s, not 1 s: its
/// first data segment, unanswered, is retransmitted 3 s after it left. Catches: the
/// fallback not applied on either side (a retransmission after 1 s).
#[test]
fn a_retransmitted_handshake_without_a_sample_starts_with_rto_three_seconds() {
    // Active open: the first SYN is lost.
    let mut t = SegTest::new(80);
    let (h, syn) = t.connect();
    let resent = t.advance(Duration::from_millis(1_500));
    assert_eq!(resent.len(), 1, "the SYN once again: {resent:?}");
    t.send(
        Seg::syn(5000)
            .flags(Flags::SYN | Flags::ACK)
            .with_ack(syn.seq.wrapping_add(1)),
    );
    t.recv_all();
    check_first_rto(&mut t, h);

    // Passive open: the SYN-ACK is retransmitted before the ACK arrives.
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    let synack = t.recv().expect("SYN-ACK");
    assert_eq!(
        t.advance(Duration::from_millis(1_500)).len(),
        1,
        "SYN-ACK again"
    );
    t.send(Seg::ack(1001, synack.seq.wrapping_add(1)));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
    check_first_rto(&mut t, h);
}

/// Send a first data segment on `h`, leave it unanswered: it must come again 3 s later.
fn check_first_rto(t: &mut SegTest, h: ustack_stack::TcpHandle) {
    assert_eq!(t.stack.tcp_info(h).unwrap().srtt, None, "no sample");
    t.write(h, b"hello");
    let (sent, first) = t.next_seg(Duration::ZERO).expect("data");
    assert_eq!(first.len(), 5);
    let (again, rtx) = t.next_seg(Duration::from_secs(10)).expect("retransmission");
    assert_eq!(rtx.seq, first.seq);
    assert_eq!(again - sent, Duration::from_secs(3));
}
