//! `Stack::sockets` and `Stack::memory`, what `ustack ss` and `ustack stat --memory` show:
//! over a sim pair, a listener, connections with data queued both ways, a TIME-WAIT record
//! and a UDP socket with a datagram waiting are each listed as `ss -tanm` would, and the
//! memory by kind counts them and gives everything back once they are gone.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_stack::inspect::Protocol;
use ustack_testkit::{A_IP, B_IP, Pair};

#[test]
fn sockets_and_memory_as_ss_and_stat_show_them() {
    let mut p = Pair::new(SimLinkConfig::default());
    let now = p.now;
    let listener = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let c1 = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let c2 = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.settle();
    // One accepted, one left in the accept queue.
    let (s1, peer1) = p.b.tcp_accept(listener).unwrap();
    p.a.tcp_send(p.now, c1, &[7u8; 3000]).unwrap();
    p.settle();
    let udp = p.b.udp_bind(SocketAddrV4::new(B_IP, 53)).unwrap();
    let ua = p.a.udp_bind(SocketAddrV4::new(A_IP, 0)).unwrap();
    p.a.udp_send_to(p.now, ua, b"query", SocketAddrV4::new(B_IP, 53))
        .unwrap();
    p.settle();

    let socks = p.b.sockets(p.now);
    let listen = socks.iter().find(|s| s.state == "LISTEN").unwrap();
    assert_eq!(listen.local, SocketAddrV4::new(B_IP, 80).into());
    assert_eq!(listen.remote, None);
    assert_eq!(
        (listen.recv_q, listen.send_q),
        (1, 16),
        "accept queue, backlog"
    );
    let estab: Vec<_> = socks.iter().filter(|s| s.state == "ESTAB").collect();
    assert_eq!(estab.len(), 2, "{socks:?}");
    let s1_view = estab
        .iter()
        .find(|s| s.remote == Some(peer1.into()))
        .unwrap();
    assert_eq!(s1_view.recv_q, 3000, "unread bytes");
    let (rmem, rcvbuf, wmem, sndbuf) = s1_view.mem.unwrap();
    assert!(rmem >= 3000 && rcvbuf > rmem, "{:?}", s1_view.mem);
    assert_eq!(wmem, 0);
    assert!(sndbuf > 0);
    let info = s1_view.info.as_ref().unwrap();
    assert!(info.cwnd > 0 && info.mss > 0, "{info:?}");
    // The client's view has the RTT its SYN measured.
    let a_view = p.a.sockets(p.now);
    let c1_view = a_view.iter().find(|s| s.local == peer1.into()).unwrap();
    assert!(c1_view.info.as_ref().unwrap().srtt.is_some(), "{c1_view:?}");
    let u = socks.iter().find(|s| s.protocol == Protocol::Udp).unwrap();
    assert_eq!(
        (u.state, u.local),
        ("UNCONN", SocketAddrV4::new(B_IP, 53).into())
    );
    assert!(u.recv_q >= 5, "the datagram waits: {u:?}");

    let mem = p.b.memory();
    assert_eq!(mem.get("tcb").unwrap().count, 2);
    assert!(mem.get("tcb").unwrap().bytes >= 2 * 400);
    assert!(mem.get("buffers").unwrap().bytes >= 3000);
    assert_eq!(mem.get("udp").unwrap().count, 1);
    assert_eq!(mem.get("time_wait").unwrap().count, 0);
    assert_eq!(
        mem.total(),
        mem.kinds.iter().map(|k| k.bytes).sum::<usize>()
    );

    // B closes first: its side of connection 1 ends in TIME-WAIT, listed with its timer.
    let mut buf = [0u8; 4096];
    while p.b.tcp_recv(p.now, s1, &mut buf).is_ok_and(|n| n > 0) {}
    p.b.tcp_close(p.now, s1).unwrap();
    p.settle();
    p.a.tcp_close(p.now, c1).unwrap();
    p.settle();
    let socks = p.b.sockets(p.now);
    let tw = socks.iter().find(|s| s.state == "TIME-WAIT").unwrap();
    assert_eq!(tw.remote, Some(peer1.into()));
    let left = tw.timewait_left.unwrap();
    assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
    assert_eq!(p.b.memory().get("time_wait").unwrap().count, 1);
    assert_eq!(
        p.b.memory().get("buffers").unwrap().bytes,
        0,
        "buffers freed"
    );

    // Everything else closed and 60 s passed: no connection, no record; memory that stays
    // is table capacity and free pool, not objects.
    let (s2, _) = p.b.tcp_accept(listener).unwrap();
    p.a.tcp_close(p.now, c2).unwrap();
    p.settle();
    p.b.tcp_close(p.now, s2).unwrap();
    p.b.udp_close(udp).unwrap();
    p.run_for(Duration::from_secs(61));
    let mem = p.b.memory();
    for kind in ["tcb", "time_wait", "requests", "udp"] {
        assert_eq!(mem.get(kind).unwrap().count, 0, "{kind}: {mem:?}");
    }
    assert_eq!(mem.get("buffers").unwrap().bytes, 0);
    let socks = p.b.sockets(p.now);
    assert_eq!(socks.len(), 1, "only the listener: {socks:?}");
}

/// The retransmission queue's board is counted (`rtx_queue`) while data is outstanding,
/// and given back once it is acknowledged: a connection whose ACKs are lost holds one.
#[test]
fn memory_counts_the_retransmission_queue_while_data_is_outstanding() {
    use ustack_dev::sim::{Side, SimConfig};
    let mut p = Pair::new(SimLinkConfig::default());
    let listener = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let c = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.settle();
    p.b.tcp_accept(listener).unwrap();
    let rtx = |p: &mut Pair| *p.a.memory().get("rtx_queue").unwrap();
    assert_eq!((rtx(&mut p).count, rtx(&mut p).bytes), (0, 0), "idle");
    // B's ACKs are lost: A's segments stay outstanding.
    let lossy = SimConfig {
        loss: 1.0,
        ..SimConfig::default()
    };
    p.link.set_config(Side::B, lossy);
    p.a.tcp_send(p.now, c, &[7u8; 3000]).unwrap();
    p.settle();
    let held = rtx(&mut p);
    assert_eq!(held.count, 1, "{held:?}");
    assert!(held.bytes > 0, "{held:?}");
    let mem = p.a.memory();
    assert_eq!(
        mem.total(),
        mem.kinds.iter().map(|k| k.bytes).sum::<usize>()
    );
    // The ACKs get through again: the board is freed.
    p.link.set_config(Side::B, SimConfig::default());
    p.run_for(Duration::from_secs(3));
    assert_eq!(
        (rtx(&mut p).count, rtx(&mut p).bytes),
        (0, 0),
        "acknowledged"
    );
    // The freed board is kept as the stack's one spare, and counted as such.
    let spare = *p.a.memory().get("rtx_spare").unwrap();
    assert_eq!(spare.count, 1, "{spare:?}");
    assert!(spare.bytes >= held.bytes, "{spare:?} {held:?}");
}

/// Issue #12 item 2: the state only a connection moving data needs (`tcb_active`) is not
/// taken by the handshake, is held while data is outstanding, and goes back once the
/// connection has been idle for a second; the TCB an idle connection keeps is at most
/// 216 bytes (`TCB_BYTES`; 224 with its slab generation).
#[test]
fn memory_counts_the_active_state_only_while_data_moves() {
    use ustack_dev::sim::{Side, SimConfig};
    const { assert!(ustack_stack::tcp::TCB_BYTES <= 216) };
    let mut p = Pair::new(SimLinkConfig::default());
    let listener = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let c = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.settle();
    let (s, _) = p.b.tcp_accept(listener).unwrap();
    let active = |st: &ustack_stack::Stack| *st.memory().get("tcb_active").unwrap();
    assert_eq!(active(&p.a).count, 0, "after the handshake");
    assert_eq!(active(&p.b).count, 0, "after the handshake");
    // B's ACKs are lost: A's segments stay outstanding, its retransmission timer fires
    // and loss recovery begins: A holds its active state.
    p.link.set_config(
        Side::B,
        SimConfig {
            loss: 1.0,
            ..SimConfig::default()
        },
    );
    p.a.tcp_send(p.now, c, &[7u8; 3000]).unwrap();
    p.run_for(Duration::from_millis(1500));
    assert!(p.a.tcp_info(c).unwrap().retransmits > 0);
    let held = active(&p.a);
    assert_eq!(held.count, 1, "{held:?}");
    assert!(
        held.bytes >= ustack_stack::tcp::TCB_ACTIVE_BYTES,
        "{held:?}"
    );
    // The ACKs get through again: everything is acknowledged, and a second later the
    // state is given back, on both sides.
    p.link.set_config(Side::B, SimConfig::default());
    p.run_for(Duration::from_secs(5));
    let mut buf = [0u8; 4096];
    assert_eq!(p.b.tcp_recv(p.now, s, &mut buf).unwrap(), 3000);
    p.run_for(Duration::from_secs(3));
    assert_eq!(active(&p.a).count, 0, "idle: {:?}", active(&p.a));
    assert_eq!(active(&p.b).count, 0, "idle: {:?}", active(&p.b));
}

/// A receiver keeps its active state (receive autotuning's measurement) while data keeps
/// arriving, even though it is idle between segments, and gives it back a second after
/// the data stops.
#[test]
fn a_receiver_keeps_its_active_state_while_data_arrives() {
    let mut p = Pair::new(SimLinkConfig::default());
    let listener = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let c = p.a.tcp_connect(p.now, SocketAddrV4::new(B_IP, 80)).unwrap();
    p.settle();
    let (s, _) = p.b.tcp_accept(listener).unwrap();
    let active = |st: &ustack_stack::Stack| st.memory().get("tcb_active").unwrap().count;
    assert_eq!(active(&p.b), 0, "after the handshake");
    let mut buf = [0u8; 4096];
    // A segment every 300 ms for 3 s: B is idle between them (nothing to send, nothing
    // out of order), longer than the grace in all, never a second without data.
    for i in 0..10 {
        p.a.tcp_send(p.now, c, &[9u8; 100]).unwrap();
        p.run_for(Duration::from_millis(290));
        assert_eq!(p.b.tcp_recv(p.now, s, &mut buf).unwrap(), 100);
        assert_eq!(active(&p.b), 1, "segment {i}: the receiver keeps its state");
    }
    p.run_for(Duration::from_secs(3));
    assert_eq!(active(&p.b), 0, "a second after the last segment");
}
