//! A connection's end gives its memory back for the next one (issue #13 item 3: the cost
//! of a connection's life): the TCB's slab slot, its retransmission-queue board and its
//! congestion-control box go to bounded free lists, and the next connection takes them.
//! What a user checks: a connection opened in a freed slot behaves exactly as one on a
//! fresh stack (nothing of the previous connection's options, windows, timers, queue or
//! counters carries over) and the old handle no longer reaches it; what the stack keeps
//! for reuse stays bounded however many connections end at once; and the connection
//! counters (PassiveOpens, CurrEstab, EstabResets) count every one.

use core::time::Duration;

use ustack_obs::Counter;
use ustack_stack::{Error, TcpHandle, TcpOpt};
use ustack_testkit::tcp::{PEER, Seg, SegTest};
use ustack_wire::tcp::Flags;

/// A passive open from the peer's `port` driven by `syn`, completed and accepted; the
/// accepted handle and our SYN-ACK.
fn open(t: &mut SegTest, port: u16, mut syn: Seg) -> (TcpHandle, Seg) {
    let isn = syn.seq;
    let tsval = syn.ts.map(|ts| ts.0);
    syn.src_port = port;
    t.send(syn);
    let synack = t.recv().expect("SYN-ACK");
    assert!(synack.has(Flags::SYN | Flags::ACK), "{synack:?}");
    let mut ack = Seg::ack(isn.wrapping_add(1), synack.seq.wrapping_add(1)).win(1000);
    if let (Some(tsval), Some((ours, _))) = (tsval, synack.ts) {
        ack = ack.ts(tsval.wrapping_add(1), ours);
    }
    ack.src_port = port;
    t.send(ack);
    let (h, peer) = t
        .stack
        .tcp_accept(t.listener.expect("listening"))
        .expect("accepted");
    assert_eq!(peer.port(), port);
    (h, synack)
}

/// What the second connection does on a stack: its accept (the SYN-ACK), its state, and
/// the segments of a write, a read and its close.
fn second_life(t: &mut SegTest) -> (Vec<String>, TcpHandle) {
    let port = PEER.port() + 1;
    // No options at all: an old connection's SACK, timestamps or scaling would show.
    let (h, synack) = open(t, port, Seg::syn(7000).mss(536));
    let mut seen = vec![format!("{synack:?}"), format!("{:?}", t.stack.tcp_info(h))];
    for opt in [
        TcpOpt::KeepIdle,
        TcpOpt::KeepIntvl,
        TcpOpt::KeepCnt,
        TcpOpt::MaxSeg,
    ] {
        seen.push(format!("{opt:?} {:?}", t.stack.tcp_opt(h, opt)));
    }
    assert_eq!(t.write(h, &[5; 1200]), 1200);
    seen.extend(t.recv_all().iter().map(|s| format!("{s:?}")));
    let mut data = Seg::ack(7001, synack.seq.wrapping_add(1))
        .data(b"request")
        .win(1000);
    data.src_port = port;
    t.send(data);
    seen.push(format!("{:?}", t.read(h)));
    // The keepalive, delayed-ACK and retransmission timers, as they fall due.
    seen.extend(
        t.advance(Duration::from_secs(3))
            .iter()
            .map(|(at, s)| format!("{at:?} {s:?}")),
    );
    seen.push(format!("{:?}", t.stack.tcp_info(h)));
    t.stack.tcp_close(t.now, h).expect("close");
    seen.extend(t.recv_all().iter().map(|s| format!("{s:?}")));
    (seen, h)
}

/// A connection that took every option and moved data both ways, with data still
/// unacknowledged, reset by its user: then a connection without options in the same slot
/// behaves segment for segment, timer for timer, as the same connection on a fresh stack.
#[test]
fn a_connection_in_a_reused_slot_starts_as_a_fresh_one() {
    let mut fresh = SegTest::listening(80);
    let mut t = SegTest::listening(80);
    let (old, synack) = open(
        &mut t,
        PEER.port(),
        Seg::syn(1000).mss(1460).wscale(7).sack_perm().ts(100, 0),
    );
    let now = t.now;
    t.stack.tcp_set_nodelay(now, old, true).unwrap();
    t.stack.tcp_set_keepalive(now, old, true).unwrap();
    t.stack.tcp_set_opt(now, old, TcpOpt::KeepIdle, 5).unwrap();
    t.stack.tcp_set_opt(now, old, TcpOpt::MaxSeg, 1000).unwrap();
    t.stack.tcp_set_send_buffer(old, 100_000).unwrap();
    let (ours, _) = synack.ts.expect("timestamps");
    let mut data = Seg::ack(1001, synack.seq.wrapping_add(1))
        .data(&[1; 700])
        .ts(102, ours)
        .win(1000);
    data.src_port = PEER.port();
    t.send(data);
    assert_eq!(t.read(old).expect("open").len(), 700);
    // Data in flight, unacknowledged (a retransmission queue), more queued behind it.
    assert_eq!(t.write(old, &[2; 20_000]), 20_000);
    assert!(!t.recv_all().is_empty());
    let info = t.stack.tcp_info(old).unwrap();
    assert!(info.unacked > 0 && info.sack && info.timestamps, "{info:?}");
    let before = t.stack.memory();
    assert!(before.get("rtx_queue").unwrap().count == 1, "{before:?}");
    t.stack.tcp_abort(t.now, old).unwrap();
    t.recv_all();
    assert_eq!(
        t.stack.memory().get("rtx_spare").unwrap().count,
        1,
        "the board went to the spares"
    );

    // Both stacks at the same time, so that ISNs and timestamps match.
    fresh.now = t.now;
    let (theirs, h_fresh) = second_life(&mut fresh);
    let (ours, h) = second_life(&mut t);
    assert_eq!(
        ours.join("\n"),
        theirs.join("\n"),
        "the connection in the reused slot differs from a fresh one"
    );
    // Same slot, new generation: the old handle reaches nothing.
    assert_eq!(
        format!("{h:?}"),
        format!("{h_fresh:?}").replace("generation: 0", "generation: 1")
    );
    assert_eq!(t.stack.tcp_state(old), Err(Error::BadHandle));
    assert_eq!(t.stack.tcp_close(t.now, old), Err(Error::BadHandle));
}

/// Many connections with data in flight reset at once: each gives its board and its
/// congestion-control box back, but the stack keeps at most 64 of each; the counters count
/// every connection opened and reset, and CurrEstab comes back to zero.
#[test]
fn freed_connections_keep_a_bounded_free_list_and_are_counted() {
    let mut t = SegTest::listening(80);
    let n = 200u16;
    let mut conns = Vec::new();
    for i in 0..n {
        let (h, _) = open(&mut t, 20_000 + i, Seg::syn(1000).mss(1460).sack_perm());
        assert_eq!(t.write(h, &[3; 2000]), 2000);
        let segs = t.recv_all();
        assert_eq!(segs.len(), 2, "{segs:?}");
        // The first acknowledged (congestion control's state moves: a box is taken),
        // the second in flight (the retransmission queue holds a board).
        let mut ack = Seg::ack(1001, segs[1].seq).win(1000);
        ack.src_port = 20_000 + i;
        t.send(ack);
        t.recv_all();
        conns.push(h);
    }
    t.recv_all();
    let mem = t.stack.memory();
    assert_eq!(mem.get("rtx_queue").unwrap().count, n as usize, "{mem:?}");
    assert_eq!(t.stack.mib().get(Counter::TcpPassiveOpens), u64::from(n));
    assert_eq!(t.stack.mib().get(Counter::TcpCurrEstab), u64::from(n));
    let spare = |t: &SegTest| t.stack.memory().get("rtx_spare").unwrap().bytes;
    let boxes = |t: &SegTest| t.stack.memory().get("tcb_active_free").unwrap().count;
    let active = t.stack.memory().get("tcb_active").unwrap().count;
    for (i, h) in conns.iter().enumerate() {
        t.stack.tcp_abort(t.now, *h).unwrap();
        t.recv_all();
        if i + 1 == 64 {
            assert!(spare(&t) > 0, "boards kept for reuse");
        }
    }
    t.recv_all();
    // The first 64 filled the lists; the other 136 went back to the allocator.
    let kept = spare(&t);
    for h in 0..20u16 {
        let (c, _) = open(&mut t, 30_000 + h, Seg::syn(1000).mss(1460));
        assert_eq!(t.write(c, &[4; 100]), 100);
        t.stack.tcp_abort(t.now, c).unwrap();
        t.recv_all();
    }
    t.recv_all();
    assert_eq!(spare(&t), kept, "the spare boards stay bounded");
    assert!(kept > 0);
    assert_eq!(active, n as usize, "every connection sending holds a box");
    assert_eq!(boxes(&t), 64, "boxes kept for reuse: 64 at most");
    let mib = t.stack.mib();
    assert_eq!(mib.get(Counter::TcpPassiveOpens), u64::from(n) + 20);
    assert_eq!(mib.get(Counter::TcpEstabResets), u64::from(n) + 20);
    assert_eq!(mib.get(Counter::TcpCurrEstab), 0);
    assert_eq!(t.stack.tcp_resources().connections, 0);
}
