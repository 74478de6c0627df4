//! The stack's next deadline (`Stack::poll_timeout`) from a runtime's view: a loop that
//! sleeps until that deadline, runs the timers and sends what they produced never misses
//! a timer. One test per kind of timer: it is armed through the public API, the deadline
//! the stack reports is not later than the timer, and a loop that only wakes at reported
//! deadlines sees the timer fire at its exact time (a retransmission, a SYN-ACK
//! retransmission, a tail loss probe, a delayed ACK, a keepalive probe, a zero-window
//! probe, an orphan's FIN-WAIT-2 end, TIME-WAIT's end, an ARP retry and its failure, IPv4
//! reassembly's timeout).
//!
//! The stack keeps its next deadline as timers are armed instead of folding every queue
//! on each call: a queue that files a timer without lowering it would make the loop
//! sleep past it. (Debug builds also check the kept deadline against the fold.)

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use ustack_obs::{Counter, DropReason};
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Shutdown, Stack, TcpOpt};
use ustack_testkit::tcp::{LOCAL_IP, PEER, Seg, SegTest};
use ustack_wire::tcp::Flags;

const MS: Duration = Duration::from_millis(1);

/// `t` rounded up to the millisecond, as the stack keeps its TCP deadlines.
fn ms_ceil(t: Instant) -> Instant {
    Instant::from_millis(t.as_nanos().div_ceil(1_000_000))
}

/// The stack reports a deadline no later than `at`.
fn assert_reported(stack: &Stack, at: Instant, what: &str) {
    let next = stack.poll_timeout();
    assert!(
        next.is_some_and(|n| n <= at),
        "{what}: the stack's next deadline is {next:?}, after the timer at {at:?}"
    );
}

/// The stack reports a deadline no later than `armed`, and a loop that sleeps until the
/// stack's deadlines sees a segment matching `want` leave exactly at `armed`.
fn assert_fires(t: &mut SegTest, armed: Instant, limit: Duration, want: impl Fn(&Seg) -> bool) {
    assert_reported(&t.stack, armed, "the timer");
    let at = sleep_until_seg(t, limit, want);
    assert_eq!(at, armed, "the timer fired late or early");
}

/// A loop that sleeps until the stack's next deadline (nothing arriving) until a segment
/// matching `want` leaves or `limit` passes: when it left.
fn sleep_until_seg(t: &mut SegTest, limit: Duration, want: impl Fn(&Seg) -> bool) -> Instant {
    let end = t.now + limit;
    loop {
        let Some((at, seg)) = t.next_seg(end.saturating_duration_since(t.now)) else {
            panic!("nothing matching left by {end:?}");
        };
        if want(&seg) {
            return at;
        }
    }
}

/// An established passive connection: SYN with `syn`'s options, the final ACK `rtt`
/// after the SYN-ACK. Returns the handle and our ISN.
fn established(t: &mut SegTest, syn: Seg, rtt: Duration) -> (ustack_stack::TcpHandle, u32) {
    let (h, synack) = t.accept_after(syn, 65_535, rtt);
    (h, synack.seq)
}

#[test]
fn a_syn_is_retransmitted_after_one_second() {
    let mut t = SegTest::new(0);
    t.connect();
    let armed = t.now + Duration::from_secs(1);
    // The SYN is retransmitted after TIMEOUT_INIT (RFC 6298 §2.1).
    assert_fires(&mut t, armed, Duration::from_secs(5), |s| s.has(Flags::SYN));
}

#[test]
fn a_listener_retransmits_its_syn_ack_after_one_second() {
    let mut t = SegTest::listening(80);
    t.send(Seg::syn(1000));
    let synack = t.recv().expect("SYN-ACK");
    assert!(synack.has(Flags::SYN | Flags::ACK));
    let armed = t.now + Duration::from_secs(1);
    // The SYN-ACK is retransmitted after 1 s (Linux reqsk_timer_handler).
    assert_fires(&mut t, armed, Duration::from_secs(5), |s| {
        s.has(Flags::SYN | Flags::ACK)
    });
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPSynRetrans), 1);
}

#[test]
fn unacknowledged_data_is_retransmitted_at_the_rto() {
    // No SACK: no tail loss probe comes first.
    let mut t = SegTest::listening(80);
    let (h, _) = established(&mut t, Seg::syn(1000), Duration::from_millis(30));
    t.now += Duration::from_millis(500);
    assert_eq!(t.write(h, b"hello"), 5);
    let first = t.recv().expect("the data");
    let rto = t.stack.tcp_info(h).unwrap().rto;
    let armed = ms_ceil(t.now + rto);
    // Retransmitted at the RTO (RFC 6298 §5.4).
    assert_fires(&mut t, armed, Duration::from_secs(10), |s| {
        s.payload == first.payload
    });
}

#[test]
fn a_tail_loss_probe_goes_out_at_its_timeout() {
    let mut t = SegTest::listening(80);
    let (h, _) = established(
        &mut t,
        Seg::syn(1000).sack_perm(),
        Duration::from_millis(30),
    );
    t.now += Duration::from_millis(500);
    assert_eq!(t.write(h, b"hello"), 5);
    let first = t.recv().expect("the data");
    let info = t.stack.tcp_info(h).unwrap();
    // RFC 8985 §7.2: PTO = 2 * SRTT, plus the peer's delayed-ACK allowance with one
    // segment in flight (Linux TCP_DELACK_MAX, 200 ms), never past the RTO.
    let pto = (2 * info.srtt.expect("a sample") + Duration::from_millis(200)).min(info.rto);
    let armed = ms_ceil(t.now + pto);
    // The probe leaves at the PTO.
    assert_fires(&mut t, armed, Duration::from_secs(10), |s| {
        s.payload == first.payload
    });
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPLossProbes), 1);
}

/// Sixteen 100-byte segments from the peer to a connection established with our ISN
/// `iss`, each ACKed at once: past Linux's quick-ACK phase, a lone segment's ACK waits.
/// The peer's next sequence number.
fn past_quick_acks(t: &mut SegTest, iss: u32) -> u32 {
    let mut seq = 1001u32;
    for _ in 0..16 {
        t.send(Seg::ack(seq, iss.wrapping_add(1)).data(&[1; 100]));
        assert!(t.recv().is_some(), "quick ACK");
        seq += 100;
    }
    seq
}

#[test]
fn a_delayed_ack_leaves_after_the_delayed_ack_timeout() {
    let mut t = SegTest::listening(80);
    let (_, iss) = established(&mut t, Seg::syn(1000), Duration::ZERO);
    let seq = past_quick_acks(&mut t, iss);
    t.now += Duration::from_millis(300);
    t.send(Seg::ack(seq, iss.wrapping_add(1)).data(&[1; 100]));
    assert_eq!(t.recv(), None, "delayed");
    let armed = t.now + Duration::from_millis(40);
    // The ACK leaves after 40 ms (Linux TCP_DELACK_MIN).
    assert_fires(&mut t, armed, Duration::from_secs(1), |s| {
        s.ack == seq + 100
    });
    assert_eq!(t.stack.mib().get(Counter::TcpExtDelayedACKs), 1);
}

/// An ACK that empties the retransmission queue turns the RTO off and arms nothing in its
/// place (`tcp_set_xmit_timer`, RFC 6298 §5.2): that is right only while the timer wheel's
/// entry for the connection is no later than every timer still armed (`Sock::arm` keeps
/// it so; a debug assertion in `tcp_set_xmit_timer` checks it). A delayed ACK armed while
/// our data was outstanding must still leave at its time after that ACK.
#[test]
fn a_delayed_ack_armed_before_the_ack_that_empties_the_retransmission_queue_leaves_on_time() {
    let mut t = SegTest::listening(80);
    let (h, iss) = established(&mut t, Seg::syn(1000), Duration::ZERO);
    let seq = past_quick_acks(&mut t, iss);
    t.now += Duration::from_millis(300);
    assert_eq!(t.write(h, b"request"), 7);
    assert!(t.recv().is_some_and(|s| s.payload == b"request"));
    // The peer's data, not yet acknowledging ours: its ACK is delayed, the RTO runs on.
    t.now += Duration::from_millis(5);
    t.send(Seg::ack(seq, iss.wrapping_add(1)).data(&[1; 100]));
    assert_eq!(t.recv(), None, "delayed");
    let armed = t.now + Duration::from_millis(40);
    // The ACK of our data: the retransmission queue empties and the RTO goes off.
    t.now += Duration::from_millis(5);
    t.send(Seg::ack(seq + 100, iss.wrapping_add(8)));
    assert_eq!(t.recv(), None, "nothing to answer a pure ACK with");
    assert_eq!(t.stack.tcp_info(h).unwrap().unacked, 0);
    // The delayed ACK leaves at its time, not at the RTO's.
    assert_fires(&mut t, armed, Duration::from_secs(1), |s| {
        s.ack == seq + 100
    });
}

#[test]
fn a_keepalive_probe_goes_out_after_the_idle_time() {
    let mut t = SegTest::listening(80);
    let (h, iss) = established(&mut t, Seg::syn(1000), Duration::ZERO);
    let now = t.now;
    t.stack.tcp_set_opt(now, h, TcpOpt::KeepIdle, 10).unwrap();
    t.stack.tcp_set_keepalive(now, h, true).unwrap();
    let armed = t.now + Duration::from_secs(10);
    // The first probe after TCP_KEEPIDLE: an old sequence number, no data (RFC 9293
    // §3.8.4).
    assert_fires(&mut t, armed, Duration::from_secs(60), |s| s.seq == iss);
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPKeepAlive), 1);
}

#[test]
fn a_zero_window_is_probed_at_the_rto() {
    let mut t = SegTest::listening(80);
    let (h, iss) = established(&mut t, Seg::syn(1000), Duration::from_millis(30));
    // The peer closes its window.
    t.send(Seg::ack(1001, iss.wrapping_add(1)).win(0));
    t.now += Duration::from_millis(100);
    assert_eq!(t.write(h, b"held"), 4);
    assert_eq!(t.recv(), None, "nothing fits the window");
    let rto = t.stack.tcp_info(h).unwrap().rto;
    let armed = ms_ceil(t.now + rto);
    // The first probe one RTO on (RFC 9293 §3.8.6.1).
    assert_fires(&mut t, armed, Duration::from_secs(10), |_| true);
    assert_eq!(t.stack.mib().get(Counter::TcpExtTCPWinProbe), 1);
}

#[test]
fn an_orphan_in_fin_wait_2_ends_after_tcp_fin_timeout() {
    let mut t = SegTest::listening(80);
    t.stack.set_sysctl("net.ipv4.tcp_fin_timeout", 5).unwrap();
    let (h, iss) = established(&mut t, Seg::syn(1000), Duration::ZERO);
    let now = t.now;
    t.stack.tcp_close(now, h).unwrap();
    let fin = t.recv().expect("our FIN");
    assert!(fin.has(Flags::FIN));
    // The peer acknowledges the FIN and says no more: FIN-WAIT-2, an orphan.
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    let armed = t.now + Duration::from_secs(5);
    assert_reported(&t.stack, armed, "FIN-WAIT-2");
    t.advance(Duration::from_secs(5) - MS);
    assert_eq!(
        t.stack.tcp_resources().connections,
        1,
        "alive until the timeout"
    );
    t.advance(MS);
    assert_eq!(
        t.stack.tcp_resources().connections,
        0,
        "gone at tcp_fin_timeout"
    );
}

#[test]
fn a_time_wait_record_ends_after_sixty_seconds() {
    let mut t = SegTest::listening(80);
    let (h, iss) = established(&mut t, Seg::syn(1000), Duration::ZERO);
    let now = t.now;
    t.stack.tcp_shutdown(now, h, Shutdown::Write).unwrap();
    assert!(t.recv().expect("our FIN").has(Flags::FIN));
    t.send(Seg::ack(1001, iss.wrapping_add(2)));
    // FIN-WAIT-2, not an orphan: once the entries of the timers the FIN's ACK settled
    // have come up, nothing is armed. (The peer's FIN then files the connection for
    // giving its active state back a second on, which wakes the loop before TIME-WAIT
    // ends: that `TimeWaits::insert` lowers the deadline itself is checked by its unit
    // test, `a_million_time_wait_records_expire_on_time`.)
    t.run_timers(Duration::from_secs(10));
    assert_eq!(t.stack.poll_timeout(), None, "no timer before TIME-WAIT");
    t.now += Duration::from_millis(7);
    t.send(Seg::ack(1001, iss.wrapping_add(2)).fin());
    assert!(t.recv().is_some(), "the last ACK");
    let list = t.stack.tcp_timewait_list();
    assert_eq!(list.len(), 1, "TIME-WAIT");
    let armed = t.now + Duration::from_secs(60);
    assert_eq!(list[0].2, armed, "2*MSL (Linux TCP_TIMEWAIT_LEN)");
    assert_reported(&t.stack, armed, "TIME-WAIT");
    t.advance(Duration::from_secs(60) - MS);
    assert_eq!(t.stack.tcp_resources().timewait, 1, "kept until 2*MSL");
    t.advance(MS);
    assert_eq!(t.stack.tcp_resources().timewait, 0, "ended at 2*MSL");
    assert_eq!(t.stack.mib().get(Counter::TcpExtTW), 1);
}

/// An Ethernet stack with no neighbour known, and a loop that sleeps until its next
/// deadline: the frames sent, with when.
fn sleep_until(stack: &mut Stack, now: &mut Instant, end: Instant) -> Vec<(Instant, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(t) = stack.poll_timeout().filter(|t| *t <= end) {
        *now = (*now).max(t);
        stack.handle_timeout(*now);
        while let Some(f) = stack.poll_transmit(*now) {
            out.push((*now, f));
        }
    }
    *now = end;
    out
}

const ARP_LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const ARP_LOCAL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const ARP_PEER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 77);

/// An Ethernet stack that has just sent a datagram to a neighbour it does not know yet:
/// the datagram waits, an ARP request left. Returns the stack and the time.
fn resolving_stack() -> (Stack, Instant) {
    let mut c = Config::ethernet(ARP_LOCAL_MAC, Ipv4Cidr::new(ARP_LOCAL, 24));
    c.seed = Some(7);
    let mut s = Stack::new(c);
    let now = Instant::from_secs(3);
    let u = s.udp_bind(SocketAddrV4::new(ARP_LOCAL, 5000)).unwrap();
    s.udp_send_to(now, u, b"ping", SocketAddrV4::new(ARP_PEER, 9))
        .unwrap();
    let first = s.poll_transmit(now).expect("an ARP request");
    assert_eq!(first[12..14], [0x08, 0x06], "ARP");
    assert_eq!(
        s.poll_transmit(now),
        None,
        "the datagram waits for the answer"
    );
    (s, now)
}

#[test]
fn an_arp_request_is_retried_every_second_then_the_packet_dropped() {
    let (mut s, mut now) = resolving_stack();
    let retry = now + Duration::from_secs(1);
    assert_reported(&s, retry, "ARP retry");
    let start = now;
    let sent = sleep_until(&mut s, &mut now, start + Duration::from_secs(10));
    let arp: Vec<Instant> = sent
        .iter()
        .filter(|(_, f)| f[12..14] == [0x08, 0x06])
        .map(|(at, _)| *at)
        .collect();
    // neigh.default.mcast_solicit = 3 requests, retrans_time_ms = 1000 apart.
    assert_eq!(
        arp,
        [retry, start + Duration::from_secs(2)],
        "the retries, one a second"
    );
    assert_eq!(sent.len(), 2, "and nothing else");
    assert_eq!(
        s.mib().drops(DropReason::NeighFailed),
        1,
        "the datagram is dropped when resolution fails"
    );
}

#[test]
fn an_incomplete_datagram_times_out_with_icmp_time_exceeded() {
    let mut t = SegTest::new(80);
    // The first fragment of a UDP datagram from the peer, the rest never coming.
    let payload_len = 64;
    let mut p = vec![0u8; 20 + payload_len];
    ustack_wire::ipv4::Repr {
        src_addr: *PEER.ip(),
        dst_addr: LOCAL_IP,
        next_header: ustack_wire::IpProtocol::Udp,
        payload_len,
        ttl: 64,
        tos: 0,
        ident: 0x1234,
        dont_frag: false,
        more_frags: true,
        frag_offset: 0,
    }
    .emit(
        &mut ustack_wire::ipv4::Packet::new_unchecked(&mut p[..]),
        true,
    );
    t.stack.receive(t.now, &p);
    assert!(t.stack.reassembly_mem() > 0, "held for reassembly");
    let armed = t.now + Duration::from_secs(30);
    assert_reported(&t.stack, armed, "reassembly timeout");
    let start = t.now;
    let mut now = t.now;
    let sent = sleep_until(&mut t.stack, &mut now, start + Duration::from_secs(60));
    assert_eq!(sent.len(), 1, "one ICMP error");
    let (at, icmp) = &sent[0];
    assert_eq!(
        *at, armed,
        "after ipfrag_time (RFC 791 §3.2, Linux ip_expire)"
    );
    assert_eq!(icmp[9], 1, "ICMP");
    assert_eq!((icmp[20], icmp[21]), (11, 1), "Time Exceeded, reassembly");
    assert_eq!(t.stack.reassembly_mem(), 0);
}

/// The resolving stack with its neighbour table's first garbage collection run (due at
/// once, its first entry): the stack, now, and the ARP retry's time, its next deadline.
fn resolving_retry_next() -> (Stack, Instant, Instant) {
    let (mut s, now) = resolving_stack();
    s.handle_timeout(now);
    let retry = now + Duration::from_secs(1);
    assert_eq!(s.poll_timeout(), Some(retry), "the retry is next");
    (s, now, retry)
}

/// The resolving stack's neighbour's ARP reply.
fn arp_reply() -> Vec<u8> {
    let peer_mac = EthernetAddress([2, 0, 0, 0, 0, 0x77]);
    let mut f = vec![0u8; 14 + 28];
    ustack_wire::ethernet::Repr {
        src_addr: peer_mac,
        dst_addr: ARP_LOCAL_MAC,
        ethertype: ustack_wire::ethernet::EtherType::Arp,
    }
    .emit(&mut ustack_wire::ethernet::Frame::new_unchecked(&mut f[..]));
    ustack_wire::arp::Repr {
        operation: ustack_wire::arp::Operation::Reply,
        source_hardware_addr: peer_mac,
        source_protocol_addr: ARP_PEER,
        target_hardware_addr: ARP_LOCAL_MAC,
        target_protocol_addr: ARP_LOCAL,
    }
    .emit(&mut ustack_wire::arp::Packet::new_unchecked(&mut f[14..]));
    f
}

/// `timers_due`, a loop's question before `handle_timeout`: not before the kept
/// deadline, yes at it while its timer stands, and no at it once that timer was cancelled
/// (the deadline folded again: one spurious wake-up counted, nothing to run).
#[test]
fn timers_due_at_the_deadline_of_a_standing_timer_only() {
    let (mut s, now, retry) = resolving_retry_next();
    let before = Instant::from_nanos(retry.as_nanos() - 1);
    assert!(!s.timers_due(before), "not yet");
    assert!(s.timers_due(retry), "the retry, at its time");
    assert_eq!(s.spurious_timer_wakeups(), 0);
    s.receive(now, &arp_reply());
    assert!(s.poll_transmit(now).is_some(), "the datagram, released");
    assert_eq!(s.poll_timeout(), Some(retry), "kept, early");
    assert!(!s.timers_due(retry), "the retry was cancelled");
    assert_eq!(s.spurious_timer_wakeups(), 1);
    assert!(s.poll_timeout().is_some_and(|t| t > retry), "folded again");
}

/// A timer cancelled after it lowered the kept deadline (an ARP request answered before
/// its retry) leaves the deadline early: harmless and counted. The loop that asks
/// `poll_timeout_at` when the deadline comes gets the deadline folded again, with
/// nothing run and nothing sent.
#[test]
fn a_cancelled_timer_costs_one_counted_spurious_wake_up() {
    let (mut s, now, retry) = resolving_retry_next();
    // The neighbour answers.
    s.receive(now, &arp_reply());
    let datagram = s.poll_transmit(now).expect("the datagram, released");
    assert_eq!(datagram[12..14], [0x08, 0x00], "IPv4");
    // The retry is cancelled; the kept deadline stays, early.
    assert_eq!(
        s.poll_timeout(),
        Some(retry),
        "kept: cancelling never raises it"
    );
    assert_eq!(s.spurious_timer_wakeups(), 0);
    let next = s.poll_timeout_at(retry);
    assert!(
        next.is_some_and(|n| n > retry),
        "folded again at the retry's time: {next:?} (the table's garbage collection)"
    );
    assert_eq!(
        s.spurious_timer_wakeups(),
        1,
        "one wake-up for nothing, counted"
    );
    assert_eq!(s.poll_transmit(retry), None, "no second request");
    assert_eq!(s.poll_timeout_at(retry), next, "and only one");
    assert_eq!(s.spurious_timer_wakeups(), 1);
}
