//! The poller's semantics over two stacks on `sim`: level, edge and one-shot; readiness
//! after partial reads and writes; wake-ups on accept, on connect, on FIN, on RST, on
//! buffer space; registration errors; closed sockets.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::poller::{Event, Mode, Poller, PollerError};
use ustack_stack::tcp::State;
use ustack_stack::{Error, ListenerHandle, Readiness, SocketKey, Stack, TcpHandle};
use ustack_testkit::{A_IP, B_IP, Pair};

const PORT: u16 = 80;
const R: Readiness = Readiness::READABLE;
const W: Readiness = Readiness::WRITABLE;

/// Everything the poller reports now (up to 64 events).
fn wait(poller: &mut Poller, stack: &mut Stack) -> Vec<Event> {
    let mut events = Vec::new();
    let n = poller.wait(stack, &mut events, 64);
    assert_eq!(
        n,
        events.len(),
        "wait returns the number of events it appended"
    );
    events
}

/// The events' (token, readiness) pairs.
fn summary(events: &[Event]) -> Vec<(u64, Readiness)> {
    events.iter().map(|e| (e.token, e.readiness)).collect()
}

/// B listens; A connects; returns (B's listener, A's handle, B's accepted handle).
fn connect(p: &mut Pair) -> (ListenerHandle, TcpHandle, TcpHandle) {
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, PORT), 16).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    p.run_for(Duration::from_millis(10));
    let (b, _) = p.b.tcp_accept(l).expect("the handshake completes");
    assert_eq!(p.a.tcp_state(a), Ok(State::Established));
    (l, a, b)
}

/// Send `data` from A to B and let it arrive (and be acknowledged).
fn a_sends(p: &mut Pair, a: TcpHandle, data: &[u8]) {
    assert_eq!(p.a.tcp_send(p.now, a, data), Ok(data.len()));
    p.run_for(Duration::from_millis(300));
}

fn read(stack: &mut Stack, now: ustack_stack::Instant, h: TcpHandle, n: usize) -> usize {
    let mut buf = vec![0; n];
    stack.tcp_recv(now, h, &mut buf).unwrap()
}

#[test]
fn level_triggered_reports_while_readable_even_after_a_partial_read() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(b.into(), 7, R, Mode::Level, false).unwrap();
    assert!(
        wait(&mut poller, &mut p.b).is_empty(),
        "nothing to read yet"
    );
    assert!(
        !poller.has_pending(&p.b),
        "an idle socket is not looked at again"
    );

    a_sends(&mut p, a, &[1; 1000]);
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(7, R)]);
    // Not read: reported again, and again.
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(7, R)]);
    assert_eq!(read(&mut p.b, p.now, b, 400), 400);
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(7, R)],
        "600 bytes are still there"
    );
    assert_eq!(read(&mut p.b, p.now, b, 1000), 600);
    assert!(wait(&mut poller, &mut p.b).is_empty(), "drained");
    assert!(!poller.has_pending(&p.b));
}

#[test]
fn edge_triggered_reports_once_per_wake_up_and_a_partial_read_does_not_rearm() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(b.into(), 1, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());

    a_sends(&mut p, a, &[1; 1000]);
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R)]);
    assert!(wait(&mut poller, &mut p.b).is_empty(), "once per wake-up");
    assert_eq!(read(&mut p.b, p.now, b, 400), 400);
    assert!(
        wait(&mut poller, &mut p.b).is_empty(),
        "a partial read is no new edge (epoll(7): read until EAGAIN)"
    );
    // New data is a new wake-up, even though old data is still unread (as Linux).
    a_sends(&mut p, a, &[2; 10]);
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R)]);
    // Two arrivals between waits make one event.
    a_sends(&mut p, a, &[3; 10]);
    a_sends(&mut p, a, &[4; 10]);
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R)]);
    assert_eq!(read(&mut p.b, p.now, b, 4096), 630);
    assert!(wait(&mut poller, &mut p.b).is_empty());
}

#[test]
fn edge_triggered_registration_of_a_ready_socket_reports_it_once() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    a_sends(&mut p, a, b"already here");
    let mut poller = Poller::new();
    // As epoll_ctl ADD polls the file and queues a ready item, in either mode.
    poller
        .register(b.into(), 2, R | W, Mode::Edge, false)
        .unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(2, R | W)]);
    assert!(wait(&mut poller, &mut p.b).is_empty());
    // MOD re-polls too: a ready socket is reported again.
    poller.modify(b.into(), 3, R, Mode::Edge, false).unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(3, R)]);
    assert!(wait(&mut poller, &mut p.b).is_empty());
}

#[test]
fn a_wake_up_reaches_only_registrations_interested_in_it() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(b.into(), 4, W, Mode::Edge, false).unwrap();
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(4, W)],
        "writable at registration"
    );
    // Data arriving is a READABLE wake-up: not for a WRITABLE-only registration, though
    // the socket is still writable (ep_poll_callback filters by the poll key).
    a_sends(&mut p, a, &[9; 100]);
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert_eq!(p.b.readiness(b.into()), R | W);
}

#[test]
fn one_shot_disarms_until_modify() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(b.into(), 5, R, Mode::Level, true).unwrap();
    a_sends(&mut p, a, &[1; 10]);
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(5, R)]);
    assert!(
        wait(&mut poller, &mut p.b).is_empty(),
        "disarmed, though level-triggered and still readable"
    );
    a_sends(&mut p, a, &[2; 10]);
    assert!(
        wait(&mut poller, &mut p.b).is_empty(),
        "new data: still disarmed"
    );
    // Not even ERROR/HUP reach a disarmed registration (epoll clears all its events).
    p.a.tcp_abort(p.now, a).unwrap();
    p.run_for(Duration::from_millis(10));
    assert!(wait(&mut poller, &mut p.b).is_empty());
    poller.modify(b.into(), 6, R, Mode::Level, true).unwrap();
    let ev = wait(&mut poller, &mut p.b);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].token, 6);
    assert!(
        ev[0]
            .readiness
            .contains(R | Readiness::ERROR | Readiness::HUP)
    );
    assert!(wait(&mut poller, &mut p.b).is_empty(), "one shot again");
}

#[test]
fn a_listener_is_woken_when_a_connection_reaches_its_accept_queue() {
    let mut p = Pair::new(SimLinkConfig::default());
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, PORT), 16).unwrap();
    let mut poller = Poller::new();
    poller.register(l.into(), 10, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());

    let a1 =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    // The SYN alone makes a request, not an acceptable connection.
    let mut syn = Vec::new();
    while let Some(f) = p.a.poll_transmit(p.now) {
        syn.push(f);
    }
    for f in &syn {
        p.b.receive(p.now, f);
    }
    // (An ARP request, not a SYN, may be all that went: either way, nothing to accept.)
    assert!(wait(&mut poller, &mut p.b).is_empty());
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.a.tcp_state(a1), Ok(State::Established));
    let ev = wait(&mut poller, &mut p.b);
    assert_eq!(summary(&ev), [(10, R)]);
    assert_eq!(ev[0].key, SocketKey::Listener(l));

    // Two more connections before the next wait: one edge.
    for _ in 0..2 {
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    }
    p.run_for(Duration::from_millis(10));
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(10, R)]);
    assert_eq!(p.b.tcp_accept_queue_len(l), Ok(3));
    // Level-triggered: readable until the queue is empty.
    poller.modify(l.into(), 11, R, Mode::Level, false).unwrap();
    for left in [2, 1, 0] {
        assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(11, R)]);
        p.b.tcp_accept(l).unwrap();
        assert_eq!(p.b.tcp_accept_queue_len(l), Ok(left));
    }
    assert!(wait(&mut poller, &mut p.b).is_empty());
}

#[test]
fn connect_completing_wakes_a_writer() {
    let mut p = Pair::new(SimLinkConfig::default());
    p.b.tcp_listen(SocketAddrV4::new(B_IP, PORT), 16).unwrap();
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    let mut poller = Poller::new();
    poller.register(a.into(), 20, W, Mode::Edge, false).unwrap();
    assert!(
        wait(&mut poller, &mut p.a).is_empty(),
        "SYN-SENT: not writable (tcp_poll)"
    );
    assert_eq!(p.a.readiness(a.into()), Readiness::EMPTY);
    p.run_for(Duration::from_millis(10));
    assert_eq!(summary(&wait(&mut poller, &mut p.a)), [(20, W)]);
}

#[test]
fn a_refused_connect_wakes_with_error_and_hup() {
    let mut p = Pair::new(SimLinkConfig::default());
    // Nobody listens on B: the SYN is answered with a RST.
    let a =
        p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, PORT))
            .unwrap();
    let mut poller = Poller::new();
    poller.register(a.into(), 21, W, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.a).is_empty(), "SYN-SENT");
    p.run_for(Duration::from_millis(10));
    let ev = wait(&mut poller, &mut p.a);
    assert_eq!(
        summary(&ev),
        [(21, W | Readiness::ERROR | Readiness::HUP)],
        "ERROR and HUP are reported whatever the interest"
    );
    assert_eq!(p.a.tcp_send(p.now, a, b"x"), Err(Error::ConnectionRefused));
    assert!(
        !p.a.readiness(a.into()).contains(Readiness::ERROR),
        "the error is reported once"
    );
}

#[test]
fn fin_wakes_the_reader_with_rdhup_and_end_of_stream() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller
        .register(b.into(), 30, R | Readiness::RDHUP, Mode::Edge, false)
        .unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    p.a.tcp_shutdown(p.now, a, ustack_stack::Shutdown::Write)
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(30, R | Readiness::RDHUP)]
    );
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert_eq!(read(&mut p.b, p.now, b, 100), 0, "end of stream");
    // RDHUP is reported only when asked for.
    poller.modify(b.into(), 31, R, Mode::Level, false).unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(31, R)]);
    // Our own FIN makes it HUP (both directions shut), as Linux's SHUTDOWN_MASK.
    p.b.tcp_shutdown(p.now, b, ustack_stack::Shutdown::Write)
        .unwrap();
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(31, R | Readiness::HUP)]
    );
}

#[test]
fn shutdown_of_reading_wakes_with_rdhup() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, _, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller
        .register(b.into(), 32, R | Readiness::RDHUP, Mode::Edge, false)
        .unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    p.b.tcp_shutdown(p.now, b, ustack_stack::Shutdown::Read)
        .unwrap();
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(32, R | Readiness::RDHUP)]
    );
}

#[test]
fn rst_wakes_every_registration_with_error_and_hup() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    // An empty interest still gets ERROR and HUP, as in epoll.
    poller
        .register(b.into(), 40, Readiness::EMPTY, Mode::Edge, false)
        .unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    p.a.tcp_abort(p.now, a).unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(40, Readiness::ERROR | Readiness::HUP)]
    );
    // What tcp_poll reports after a reset: everything, until the error is read.
    assert_eq!(p.b.readiness(b.into()), Readiness::ALL);
    let mut buf = [0; 10];
    assert_eq!(
        p.b.tcp_recv(p.now, b, &mut buf),
        Err(Error::ConnectionReset)
    );
    assert_eq!(
        p.b.readiness(b.into()),
        Readiness::ALL.without(Readiness::ERROR)
    );
    assert!(
        wait(&mut poller, &mut p.b).is_empty(),
        "edge: reported once"
    );
}

#[test]
fn freed_send_space_wakes_the_writer_after_a_partial_write() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(a.into(), 50, W, Mode::Edge, false).unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.a)), [(50, W)]);

    // Fill the send buffer at one instant: the last write is partial, the next refused.
    let chunk = [7u8; 4096];
    let mut queued = 0;
    loop {
        match p.a.tcp_send(p.now, a, &chunk) {
            Ok(n) => {
                queued += n;
                if n < chunk.len() {
                    break;
                }
            }
            Err(e) => panic!("the buffer filled without a short write: {e}"),
        }
    }
    assert_eq!(p.a.tcp_send(p.now, a, &chunk), Err(Error::WouldBlock));
    assert!(queued >= 4096);
    assert!(!p.a.readiness(a.into()).contains(W), "full: not writable");
    assert!(wait(&mut poller, &mut p.a).is_empty());

    // B reads everything; the ACKs free the buffer: one WRITABLE event.
    let mut got = 0;
    let ok = p.run_until_cond(Duration::from_secs(5), |p| {
        let mut buf = [0; 65536];
        while let Ok(n) = p.b.tcp_recv(p.now, b, &mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
        p.a.readiness(a.into()).contains(W)
    });
    assert!(ok, "space is freed");
    assert_eq!(summary(&wait(&mut poller, &mut p.a)), [(50, W)]);
    // The rest of the ACKs (the buffer stays above its mark) are no new edges.
    p.run_for(Duration::from_secs(1));
    assert!(wait(&mut poller, &mut p.a).is_empty());
    assert!(p.a.tcp_send(p.now, a, &chunk).unwrap() > 0);
}

#[test]
fn level_triggered_writable_stops_when_the_buffer_passes_its_mark() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, _) = connect(&mut p);
    let mut poller = Poller::new();
    poller
        .register(a.into(), 51, W, Mode::Level, false)
        .unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.a)), [(51, W)]);
    // Writes that leave more than a third free keep it writable; past that it is not,
    // though a write would still take bytes (Linux __sk_stream_is_writeable).
    let mut writable_refusing = false;
    loop {
        let before = p.a.readiness(a.into()).contains(W);
        match p.a.tcp_send(p.now, a, &[1u8; 1000]) {
            Ok(_) => {}
            Err(Error::WouldBlock) => {
                writable_refusing |= before;
                break;
            }
            Err(e) => panic!("{e}"),
        }
        if !p.a.readiness(a.into()).contains(W) {
            assert!(
                p.a.tcp_send(p.now, a, &[1u8; 10]).is_ok(),
                "not writable, but not yet full"
            );
            break;
        }
    }
    assert!(!writable_refusing);
    assert!(wait(&mut poller, &mut p.a).is_empty());
}

#[test]
fn udp_datagrams_wake_the_reader() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let ub = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let mut poller = Poller::new();
    poller
        .register(ub.into(), 60, R, Mode::Edge, false)
        .unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    for i in 0..2u8 {
        p.a.udp_send_to(p.now, ua, &[i; 20], SocketAddrV4::new(B_IP, 53))
            .unwrap();
    }
    p.run_for(Duration::from_millis(10));
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(60, R)]);
    assert!(wait(&mut poller, &mut p.b).is_empty());
    poller
        .modify(ub.into(), 61, R | W, Mode::Level, false)
        .unwrap();
    let mut buf = [0; 64];
    for _ in 0..2 {
        assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(61, R | W)]);
        p.b.udp_recv_from(ub, &mut buf).unwrap();
    }
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(61, W)],
        "UDP is always writable"
    );
}

#[test]
fn registration_errors_match_epoll_ctl() {
    let mut p = Pair::new(SimLinkConfig::default());
    let u = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let mut poller = Poller::new();
    poller.register(u.into(), 1, R, Mode::Level, false).unwrap();
    let again = poller.register(u.into(), 2, R, Mode::Level, false);
    assert_eq!(again, Err(PollerError::AlreadyRegistered));
    assert_eq!(PollerError::AlreadyRegistered.errno(), 17);
    poller.deregister(u.into()).unwrap();
    assert_eq!(poller.deregister(u.into()), Err(PollerError::NotRegistered));
    assert_eq!(
        poller.modify(u.into(), 3, R, Mode::Level, false),
        Err(PollerError::NotRegistered)
    );
    assert_eq!(PollerError::NotRegistered.errno(), 2);
    assert!(poller.is_empty());
}

#[test]
fn deregistered_and_closed_sockets_are_not_reported() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, b) = connect(&mut p);
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let ub = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let mut poller = Poller::new();
    poller.register(b.into(), 1, R, Mode::Level, false).unwrap();
    poller
        .register(ub.into(), 2, R, Mode::Level, false)
        .unwrap();
    a_sends(&mut p, a, b"hello");
    p.a.udp_send_to(p.now, ua, b"hi", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    // Removed after its wake-up was queued: not reported.
    poller.deregister(b.into()).unwrap();
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(2, R)]);
    // Re-registered, removed and registered again before a wait: reported once, not
    // once per registration made.
    poller.register(b.into(), 3, R, Mode::Level, false).unwrap();
    poller.deregister(b.into()).unwrap();
    poller.register(b.into(), 3, R, Mode::Level, false).unwrap();
    let mut tokens: Vec<u64> = summary(&wait(&mut poller, &mut p.b))
        .iter()
        .map(|e| e.0)
        .collect();
    tokens.sort();
    assert_eq!(tokens, [2, 3]);
    // Closed without deregistering: dropped at the next wait, as a close drops an epitem.
    p.b.udp_close(ub).unwrap();
    p.b.tcp_close(p.now, b).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert!(poller.is_empty());
}

#[test]
fn closing_an_idle_registered_socket_drops_its_registration() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (l, _, b) = connect(&mut p);
    let u = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let mut poller = Poller::new();
    poller.register(b.into(), 1, R, Mode::Edge, false).unwrap();
    poller.register(l.into(), 2, R, Mode::Edge, false).unwrap();
    poller.register(u.into(), 3, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty(), "none is readable");
    assert_eq!(poller.len(), 3);
    // Nothing about them changes but the close; no event, and the registrations go.
    p.b.udp_close(u).unwrap();
    p.b.tcp_close_listener(p.now, l).unwrap();
    p.b.tcp_close(p.now, b).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert!(poller.is_empty());
}

#[test]
fn the_stack_ready_list_tells_a_reused_slot_from_its_predecessor() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let old = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    p.a.udp_send_to(p.now, ua, b"1", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    p.b.udp_close(old).unwrap();
    let new = p.b.udp_bind(SocketAddrV4::new(B_IP, 54)).unwrap();
    p.a.udp_send_to(p.now, ua, b"2", SocketAddrV4::new(B_IP, 54))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    let mut ready = Vec::new();
    p.b.take_ready(&mut ready);
    assert!(
        ready.contains(&(SocketKey::from(new), R)),
        "the new socket's wake-up is not lost: {ready:?}"
    );
    assert!(!p.b.has_ready());
}

#[test]
fn a_connection_timing_out_wakes_with_error_and_hup() {
    let mut p = Pair::new(SimLinkConfig::default());
    let (_, a, _) = connect(&mut p);
    let mut poller = Poller::new();
    poller.register(a.into(), 70, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.a).is_empty());
    // The link goes dead: the data is retransmitted until tcp_retries2 runs out.
    let dead = ustack_dev::sim::SimConfig {
        loss: 1.0,
        ..Default::default()
    };
    p.link.set_config(ustack_dev::sim::Side::A, dead);
    p.a.tcp_send(p.now, a, b"lost").unwrap();
    let done = p.run_until_cond(Duration::from_secs(3600), |p| {
        p.a.tcp_state(a) == Ok(State::Closed)
    });
    assert!(done, "the connection times out");
    let all = R | Readiness::ERROR | Readiness::HUP;
    assert_eq!(summary(&wait(&mut poller, &mut p.a)), [(70, all)]);
    let mut buf = [0; 8];
    assert_eq!(p.a.tcp_recv(p.now, a, &mut buf), Err(Error::TimedOut));
}

#[test]
fn max_events_leaves_the_rest_first_in_line() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let mut poller = Poller::new();
    for port in 1..=3u16 {
        let u = p.b.udp_bind(SocketAddrV4::new(B_IP, port)).unwrap();
        poller
            .register(u.into(), u64::from(port), R, Mode::Level, false)
            .unwrap();
        p.a.udp_send_to(p.now, ua, b"x", SocketAddrV4::new(B_IP, port))
            .unwrap();
    }
    p.run_for(Duration::from_millis(10));
    let mut events = Vec::new();
    assert_eq!(poller.wait(&mut p.b, &mut events, 0), 0);
    assert!(poller.has_pending(&p.b));
    assert_eq!(poller.wait(&mut p.b, &mut events, 2), 2);
    assert_eq!(poller.wait(&mut p.b, &mut events, 2), 2);
    let tokens: Vec<u64> = events.iter().map(|e| e.token).collect();
    // Third first (left over), then the first again (level-triggered, back in line).
    assert_eq!(tokens, [1, 2, 3, 1]);
}

#[test]
fn idle_registrations_cost_nothing_per_wait() {
    let mut p = Pair::new(SimLinkConfig::default());
    let mut poller = Poller::new();
    let socks: Vec<_> = (1000..1500u16)
        .map(|port| p.b.udp_bind(SocketAddrV4::new(B_IP, port)).unwrap())
        .collect();
    for (i, u) in socks.iter().enumerate() {
        poller
            .register((*u).into(), i as u64, R, Mode::Level, false)
            .unwrap();
    }
    // The first wait looks at each new registration once; after that nothing is queued.
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert!(!poller.has_pending(&p.b));
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    p.a.udp_send_to(p.now, ua, b"x", SocketAddrV4::new(B_IP, 1234))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert!(p.b.has_ready(), "one wake-up, on the stack's ready list");
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(234, R)]);
}

#[test]
fn a_socket_registered_in_the_slot_of_a_closed_one_is_reported_once_under_its_own_key() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let old = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let mut poller = Poller::new();
    // Registered (so queued for a look) and closed before any wait, not deregistered.
    poller
        .register(old.into(), 1, R, Mode::Level, false)
        .unwrap();
    p.b.udp_close(old).unwrap();
    let new = p.b.udp_bind(SocketAddrV4::new(B_IP, 54)).unwrap();
    let (old_key, new_key) = (SocketKey::from(old), SocketKey::from(new));
    assert_eq!(
        old_key.index(),
        new_key.index(),
        "the stack reused the slot"
    );
    assert_ne!(old_key.generation(), new_key.generation());
    let token = (7 << 40) | 5; // both halves of the 64-bit token survive
    poller
        .register(new.into(), token, R, Mode::Level, false)
        .unwrap();
    assert_eq!(poller.len(), 1, "the closed socket's registration is gone");
    p.a.udp_send_to(p.now, ua, b"x", SocketAddrV4::new(B_IP, 54))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    for _ in 0..2 {
        let events = wait(&mut poller, &mut p.b);
        assert_eq!(summary(&events), [(token, R)], "once a wait: {events:?}");
        assert_eq!(events[0].key, new_key);
    }
    poller.deregister(new.into()).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    assert!(poller.is_empty());
}

/// A wait with one wake-up and nothing queued from before takes a shorter way (the key
/// straight from the stack's list): a level-triggered registration still ready from the
/// last wait is reported all the same, and first, beside the new wake-up.
#[test]
fn a_new_wake_up_does_not_pass_a_level_triggered_socket_still_ready() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let u1 = p.b.udp_bind(SocketAddrV4::new(B_IP, 1)).unwrap();
    let u2 = p.b.udp_bind(SocketAddrV4::new(B_IP, 2)).unwrap();
    let mut poller = Poller::new();
    poller
        .register(u1.into(), 1, R, Mode::Level, false)
        .unwrap();
    poller.register(u2.into(), 2, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty(), "nothing queued yet");
    p.a.udp_send_to(p.now, ua, b"x", SocketAddrV4::new(B_IP, 1))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R)]);
    // Socket 1 is still readable (level: back on the list); one wake-up, for socket 2.
    p.a.udp_send_to(p.now, ua, b"y", SocketAddrV4::new(B_IP, 2))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R), (2, R)]);
    assert_eq!(
        summary(&wait(&mut poller, &mut p.b)),
        [(1, R)],
        "edge-triggered 2 waits for its next wake-up"
    );
}

/// `max == 0` reports nothing and leaves a lone wake-up queued for the next wait, as it
/// leaves several.
#[test]
fn a_lone_wake_up_waits_through_a_wait_for_no_events() {
    let mut p = Pair::new(SimLinkConfig::default());
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    let u = p.b.udp_bind(SocketAddrV4::new(B_IP, 1)).unwrap();
    let mut poller = Poller::new();
    poller.register(u.into(), 1, R, Mode::Edge, false).unwrap();
    assert!(wait(&mut poller, &mut p.b).is_empty());
    p.a.udp_send_to(p.now, ua, b"x", SocketAddrV4::new(B_IP, 1))
        .unwrap();
    p.run_for(Duration::from_millis(10));
    let mut events = Vec::new();
    assert_eq!(poller.wait(&mut p.b, &mut events, 0), 0);
    assert!(events.is_empty());
    assert!(poller.has_pending(&p.b));
    assert_eq!(summary(&wait(&mut poller, &mut p.b)), [(1, R)]);
}
