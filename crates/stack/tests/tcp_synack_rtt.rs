//! A passive open's first RTT sample comes from the handshake (Linux
//! `tcp_synack_rtt_meas`: from the SYN-ACK's send time when it was sent once, else by its
//! echoed timestamp), so the first RTO after accept follows the path instead of the 1 s
//! initial RTO (RFC 6298 §2.1).

use core::time::Duration;

use ustack_testkit::tcp::{Seg, SegTest};

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
