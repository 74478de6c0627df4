//! TCP memory pressure (issue #12 item 8): Linux's `tcp_mem` (low / pressure / high, in
//! pages) over a stack's buffer pool, and its hard budget. A surge that asks for far more
//! buffer memory than the stack may hold puts it under pressure, is refused past the
//! limits with counted reasons, never takes the pool past its budget, and completes intact
//! once the reader drains. Virtual time, counts and bytes; no wall-clock assertions.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_obs::{Counter, DropReason};
use ustack_stack::tcp::BUFFER_CHUNK;
use ustack_stack::tcp::State;
use ustack_stack::{Stack, TcpHandle};
use ustack_testkit::tcp::{Seg, SegTest};
use ustack_testkit::{B_IP, Pair, pattern};
use ustack_wire::tcp::Flags;

/// `tcp_mem` pages (Linux `PAGE_SIZE`).
const PAGE: usize = 4096;

/// Set the receiving stack's `tcp_mem` (pages).
fn set_tcp_mem(s: &mut Stack, low: u64, pressure: u64, high: u64, budget: u64) {
    for (name, v) in [
        ("net.ipv4.tcp_mem.low", low),
        ("net.ipv4.tcp_mem.pressure", pressure),
        ("net.ipv4.tcp_mem.high", high),
        ("net.ipv4.tcp_mem.budget", budget),
    ] {
        s.set_sysctl(name, v).unwrap();
    }
}

/// 2,000 connections each send 4 KiB at once to a server that does not read, whose
/// `tcp_mem` allows 1 MiB (high), pressure above 768 KiB, and a hard budget of 2 MiB: a
/// demand of 8 MiB (4,000 chunks). The server enters memory pressure, refuses data past
/// the limits (PROTO_MEM, TCPRcvQDrop), and its pool never holds more than the budget,
/// nor more than `high` plus the one segment each connection with an empty receive queue
/// may take past it (Linux `sk_forced_mem_schedule`). A new connection is accepted and
/// served meanwhile. Then the server reads: every connection's 4 KiB arrive intact, none
/// is aborted, and the stack leaves pressure (TCPMemoryPressuresChrono counts the time).
#[test]
fn a_surge_past_tcp_mem_is_refused_bounded_and_completes_when_read() {
    const CONNS: usize = 2000;
    const EACH: usize = 4096;
    let (low, pressure, high, budget) = (128u64, 192, 256, 512);
    let mut p = Pair::new(SimLinkConfig::default());
    set_tcp_mem(&mut p.b, low, pressure, high, budget);
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4096).unwrap();
    let now = p.now;
    let clients: Vec<TcpHandle> = (0..CONNS)
        .map(|_| p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap())
        .collect();
    let mut servers: Vec<(TcpHandle, u16)> = Vec::with_capacity(CONNS);
    let ok = p.run_until_cond(Duration::from_secs(30), |p| {
        while let Ok((h, peer)) = p.b.tcp_accept(l) {
            servers.push((h, peer.port()));
        }
        servers.len() == CONNS
    });
    assert!(ok, "{} of {CONNS} accepted", servers.len());
    assert_eq!(p.b.tcp_resources().buffer_bytes, 0);

    // The surge: every client writes its 4 KiB at once.
    let now = p.now;
    let mut port_of = std::collections::HashMap::new();
    for (i, &c) in clients.iter().enumerate() {
        assert_eq!(p.a.tcp_send(now, c, &pattern(EACH, i as u64)), Ok(EACH));
        port_of.insert(p.a.tcp_info(c).unwrap().local.port(), i);
    }
    let mut peak = 0;
    p.run_until_cond(Duration::from_secs(3), |p| {
        peak = peak.max(p.b.tcp_resources().buffer_bytes);
        false
    });
    let m = p.b.mib();
    assert!(
        m.get(Counter::TcpExtTCPMemoryPressures) >= 1,
        "pressure entered"
    );
    assert!(
        p.b.tcp_memory_pressure(),
        "still under pressure, nobody read"
    );
    let refused = m.drops(DropReason::ProtoMem);
    assert!(refused > 0, "data refused for memory");
    assert_eq!(
        m.get(Counter::TcpExtTCPRcvQDrop) + m.get(Counter::TcpExtTCPOFODrop),
        refused,
        "each refused segment counted in order or out of order"
    );
    let (high_b, budget_b) = (high as usize * PAGE, budget as usize * PAGE);
    assert!(
        peak <= budget_b,
        "peak {peak} B over the budget {budget_b} B"
    );
    assert!(
        peak <= high_b + CONNS * BUFFER_CHUNK,
        "peak {peak} B over high {high_b} B + one chunk per connection"
    );
    assert!(
        peak > high_b,
        "the forced segments took the pool past high: {peak}"
    );
    eprintln!(
        "peak {peak} B (high {high_b}, budget {budget_b}), {refused} segments refused, \
         pressures {}",
        m.get(Counter::TcpExtTCPMemoryPressures)
    );

    // The control path: a new connection is accepted and echoes a byte while under pressure.
    let now = p.now;
    let extra = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut accepted = None;
    let ok = p.run_until_cond(Duration::from_secs(5), |p| {
        if accepted.is_none() {
            accepted = p.b.tcp_accept(l).ok().map(|(h, _)| h);
        }
        accepted.is_some() && p.a.tcp_state(extra) == Ok(State::Established)
    });
    assert!(ok, "a new connection is accepted under memory pressure");

    // The reader drains: every connection completes with its bytes intact.
    let mut got: Vec<Vec<u8>> = vec![Vec::new(); CONNS];
    let mut buf = vec![0u8; 65536];
    let ok = p.run_until_cond(Duration::from_secs(600), |p| {
        let now = p.now;
        for &(h, port) in &servers {
            let i = port_of[&port];
            while got[i].len() < EACH {
                match p.b.tcp_recv(now, h, &mut buf) {
                    Ok(n) if n > 0 => got[i].extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
        }
        got.iter().all(|g| g.len() >= EACH)
    });
    let done = got.iter().filter(|g| g.len() >= EACH).count();
    assert!(
        ok,
        "{done} of {CONNS} connections completed after the drain"
    );
    for (i, g) in got.iter().enumerate() {
        assert!(
            *g == pattern(EACH, i as u64),
            "connection {i}'s bytes differ"
        );
    }
    for &c in &clients {
        assert_eq!(p.a.tcp_state(c), Ok(State::Established), "not aborted");
    }
    let m = p.b.mib();
    assert_eq!(m.get(Counter::TcpExtTCPAbortOnMemory), 0);
    p.run_for(Duration::from_millis(10));
    assert!(!p.b.tcp_memory_pressure(), "pressure left once drained");
    assert!(p.b.mib().get(Counter::TcpExtTCPMemoryPressuresChrono) > 0);
}

/// Out-of-order data held under memory pressure is pruned to make room for in-order data
/// (Linux `tcp_try_rmem_schedule` -> `tcp_prune_ofo_queue`): eight connections each hold
/// out-of-order segments until the stack is under pressure and each holds its fair share;
/// an in-order segment for one of them is then refused by `tcp_mem`, its connection's out-of-order queue is discarded
/// (PruneCalled, OfoPruned, one TCP_OFO_QUEUE_PRUNE drop per extent) and the segment is
/// queued and readable. With nothing left to prune, the next one is dropped (PROTO_MEM,
/// RcvPruned, TCPRcvQDrop) and the pool does not grow.
#[test]
fn out_of_order_queues_are_pruned_under_pressure() {
    let mut t = SegTest::listening(80);
    // high = 64 chunks, pressure 32, low 24; a budget far above (no forced charge here:
    // every receive queue holds in-order data before the test asks for more).
    set_tcp_mem(&mut t.stack, 12, 16, 32, 1024);
    t.stack.set_sysctl("net.ipv4.tcp_rmem.min", 1).unwrap();
    let mss = 1000u32;
    let mut conns = Vec::new();
    for k in 0..8u16 {
        let port = 1000 + k;
        let mut syn = Seg::syn(1000).mss(mss as u16);
        syn.src_port = port;
        t.send(syn);
        let synack = t.recv().expect("SYN-ACK");
        assert!(synack.has(Flags::SYN | Flags::ACK));
        let mut ack = Seg::ack(1001, synack.seq.wrapping_add(1));
        ack.src_port = port;
        t.send(ack);
        let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).unwrap();
        conns.push((port, h, synack.seq.wrapping_add(1)));
    }
    let seg = |port: u16, ack: u32, off: u32, len: usize| {
        let mut s = Seg::ack(1001 + off, ack).data(&pattern(len, u64::from(off)));
        s.src_port = port;
        s
    };
    // Each connection: 100 bytes in order (so its receive queue is not empty); then
    // connections 0..7 take out-of-order segments with gaps until the pool is at high.
    for &(port, _, ack) in &conns[..7] {
        t.send(seg(port, ack, 0, 100));
    }
    // Connection 7 holds four pages in order (16,000 bytes in 8 chunks).
    let (port7, _, ack7) = conns[7];
    for i in 0..16 {
        t.send(seg(port7, ack7, 1000 * i, 1000));
    }
    // Under pressure (above 32 chunks) a socket gets memory only below its fair share
    // (high / sockets = four pages), so the pool settles between pressure and high.
    let mut k = 0;
    let mut fill = |t: &mut SegTest, from: usize| {
        for _ in 0..100 {
            let (port, _, ack) = conns[from + k % (7 - from)];
            // 500 bytes every 1,024: one chunk and one extent each, within the window.
            t.send(seg(port, ack, 1024 * (1 + (k / (7 - from)) as u32), 500));
            k += 1;
        }
        t.recv_all();
        let held = t.stack.tcp_resources().buffer_bytes;
        assert!(
            (32 * BUFFER_CHUNK..=64 * BUFFER_CHUNK).contains(&held),
            "{held} B between pressure and high"
        );
        held
    };
    fill(&mut t, 0);
    let before = t.stack.mib().clone();
    assert!(t.stack.tcp_memory_pressure());
    assert!(
        before.drops(DropReason::ProtoMem) > 0,
        "out-of-order data refused"
    );
    // In order on connection 0: refused by tcp_mem, its out-of-order queue goes.
    let (port, h, ack) = conns[0];
    t.send(seg(port, ack, 100, 900));
    let m = t.stack.mib();
    let d = |c: Counter| m.get(c) - before.get(c);
    assert_eq!(d(Counter::TcpExtPruneCalled), 1);
    assert_eq!(d(Counter::TcpExtOfoPruned), 1);
    assert!(m.drops(DropReason::TcpOfoQueuePrune) > before.drops(DropReason::TcpOfoQueuePrune));
    assert_eq!(
        m.drops(DropReason::ProtoMem),
        before.drops(DropReason::ProtoMem)
    );
    let mut buf = [0u8; 4096];
    let now = t.now;
    assert_eq!(
        t.stack.tcp_recv(now, h, &mut buf),
        Ok(1000),
        "in-order data queued"
    );
    // Connection 7 holds only in-order data, its fair share: with the stack under
    // pressure there is nothing of its own to prune, and its segment is dropped.
    let held = fill(&mut t, 1);
    let before = t.stack.mib().clone();
    t.send(seg(port7, ack7, 16_000, 900));
    let m = t.stack.mib();
    assert_eq!(
        m.drops(DropReason::ProtoMem) - before.drops(DropReason::ProtoMem),
        1
    );
    assert_eq!(
        m.get(Counter::TcpExtRcvPruned) - before.get(Counter::TcpExtRcvPruned),
        1
    );
    assert_eq!(
        m.get(Counter::TcpExtTCPRcvQDrop) - before.get(Counter::TcpExtTCPRcvQDrop),
        1
    );
    assert_eq!(t.stack.tcp_resources().buffer_bytes, held);
}

/// The sending side (Linux `sk_wmem_schedule`): a writer whose stack is over `tcp_mem.high`
/// gets `WouldBlock` (EAGAIN) instead of more buffer, its send buffer shrinks to half of
/// what it holds (`sk_stream_moderate_sndbuf`), the pool stays within `high`; once the peer
/// has read and acknowledged everything, the stack leaves pressure, marks the writer
/// writable, and every byte written arrives intact.
#[test]
fn a_writer_over_tcp_mem_gets_eagain_and_is_woken_when_memory_frees() {
    let mut p = Pair::new(SimLinkConfig::default());
    // A: pressure above 4 KiB, refused above 8 KiB (4 chunks).
    set_tcp_mem(&mut p.a, 1, 1, 2, 2);
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let now = p.now;
    let a = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut b = None;
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        b = b.or_else(|| p.b.tcp_accept(l).ok().map(|(h, _)| h));
        b.is_some() && p.a.tcp_state(a) == Ok(State::Established)
    }));
    let b = b.unwrap();
    let data = pattern(64 * 1024, 7);
    let mut sent = 0;
    let mut refused = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut ready = Vec::new();
    let mut woken = 0;
    let ok = p.run_until_cond(Duration::from_secs(60), |p| {
        let now = p.now;
        // Write whenever woken (or at first); B reads only every other instant.
        p.a.take_ready(&mut ready);
        woken += ready.len();
        let wake = !ready.is_empty() || sent == 0;
        ready.clear();
        if wake && sent < data.len() {
            loop {
                match p.a.tcp_send(now, a, &data[sent..]) {
                    Ok(n) => sent += n,
                    Err(ustack_stack::Error::WouldBlock) => {
                        refused += 1;
                        break;
                    }
                    Err(e) => panic!("{e:?}"),
                }
                if sent == data.len() {
                    break;
                }
            }
        }
        assert!(
            p.a.tcp_resources().buffer_bytes <= 4 * BUFFER_CHUNK,
            "A's pool within high"
        );
        if let Ok(n) = p.b.tcp_recv(now, b, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    });
    assert!(
        ok,
        "{} of {} bytes arrived, {sent} written",
        got.len(),
        data.len()
    );
    assert!(got == data, "the bytes arrived intact");
    assert!(refused > 0, "writes were refused for memory");
    assert!(p.a.mib().get(Counter::TcpExtTCPMemoryPressures) >= 1);
    assert!(woken > 0);
}

/// A writer refused for memory that other connections hold, with nothing of its own
/// queued (so no acknowledgment will ever wake it), is marked writable when the stack
/// leaves memory pressure: here when the application reads the data another connection
/// received. Without that wake-up an edge-triggered writer would wait forever.
#[test]
fn a_writer_refused_for_others_memory_is_woken_when_pressure_ends() {
    // B sends 8 KiB on a1, which A does not read: A's pool reaches high (the rest of it
    // is refused until A reads).
    let (mut p, [a1, a2]) = a1_holds_unread(8192);
    assert_eq!(p.a.tcp_resources().buffer_bytes, 4 * BUFFER_CHUNK);
    assert!(p.a.tcp_memory_pressure());
    let now = p.now;
    assert_eq!(
        p.a.tcp_send(now, a2, &pattern(100, 2)),
        Err(ustack_stack::Error::WouldBlock),
        "refused: the stack is at tcp_mem.high"
    );
    let mut ready = Vec::new();
    p.a.take_ready(&mut ready);
    ready.clear();
    p.run_for(Duration::from_millis(500));
    p.a.take_ready(&mut ready);
    assert!(
        !writable(&ready, a2),
        "nothing wakes a2 while memory is short"
    );
    // The application reads a1: the pool empties, pressure ends, a2 is woken by the read
    // itself (before the stack sends or receives anything).
    let mut buf = vec![0u8; 16384];
    let now = p.now;
    assert!(matches!(p.a.tcp_recv(now, a1, &mut buf), Ok(n) if n > 0));
    p.a.take_ready(&mut ready);
    assert!(!p.a.tcp_memory_pressure());
    assert!(writable(&ready, a2), "a2 woken: {ready:?}");
    let now = p.now;
    assert_eq!(p.a.tcp_send(now, a2, &pattern(100, 2)), Ok(100));
}

/// Two connections a1, a2 from A to B, A's `tcp_mem` low = pressure = 2 chunks, high =
/// budget = 4 chunks, and every receive buffer below its guaranteed minimum (so a1 may take
/// A's pool up to high, and no further); B has sent `bytes` on a1, which A does not read.
fn a1_holds_unread(bytes: usize) -> (Pair, [TcpHandle; 2]) {
    let mut p = Pair::new(SimLinkConfig::default());
    set_tcp_mem(&mut p.a, 1, 1, 2, 2);
    p.a.set_sysctl("net.ipv4.tcp_rmem.min", 65536).unwrap();
    let (a, [b1, _]) = two_conns(&mut p);
    let now = p.now;
    assert_eq!(p.b.tcp_send(now, b1, &pattern(bytes, 1)), Ok(bytes));
    p.run_for(Duration::from_millis(100));
    (p, a)
}

/// Hand every frame `from` has queued straight to `to` (no link, no timers): the frames
/// one stack sends, delivered without the receiving stack transmitting anything.
fn deliver(from: &mut Stack, to: &mut Stack, now: ustack_stack::Instant) -> usize {
    let mut n = 0;
    while let Some(frame) = from.poll_transmit(now) {
        to.receive(now, &frame);
        from.recycle(frame);
        n += 1;
    }
    n
}

/// `write` on A's connection `h` is refused memory; then, with A's ready list emptied,
/// A's queued frames go to B, B acknowledges them (quick ACKs, and its delayed ACK if one
/// is left) and the ACKs reach A, which transmits nothing meanwhile. Returns A's ready list
/// after the ACKs and the instant they arrived at.
fn refused_then_acked(
    p: &mut Pair,
    h: TcpHandle,
    write: &[u8],
) -> (
    Vec<(ustack_stack::SocketKey, ustack_stack::Readiness)>,
    ustack_stack::Instant,
) {
    let now = p.now;
    assert_eq!(
        p.a.tcp_send(now, h, write),
        Err(ustack_stack::Error::WouldBlock),
        "refused: A's pool is at tcp_mem.high"
    );
    assert!(p.a.tcp_memory_pressure());
    let mut ready = Vec::new();
    p.a.take_ready(&mut ready);
    ready.clear();
    assert!(deliver(&mut p.a, &mut p.b, now) > 0);
    let later = now + Duration::from_millis(500);
    p.b.handle_timeout(later);
    assert!(deliver(&mut p.b, &mut p.a, later) > 0);
    p.a.take_ready(&mut ready);
    (ready, later)
}

/// Whether `ready` holds a WRITABLE wake-up for `h`.
fn writable(ready: &[(ustack_stack::SocketKey, ustack_stack::Readiness)], h: TcpHandle) -> bool {
    use ustack_stack::{Readiness, SocketKey};
    ready
        .iter()
        .any(|(k, r)| *k == SocketKey::Tcp(h) && r.contains(Readiness::WRITABLE))
}

/// Two connections of stack A to B, established, and B's ends in A's order.
fn two_conns(p: &mut Pair) -> ([TcpHandle; 2], [TcpHandle; 2]) {
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let now = p.now;
    let a = [
        p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap(),
        p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap(),
    ];
    let mut bs = Vec::new();
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        while let Ok((h, peer)) = p.b.tcp_accept(l) {
            bs.push((h, peer.port()));
        }
        bs.len() == 2
            && a.iter()
                .all(|&h| p.a.tcp_state(h) == Ok(State::Established))
    }));
    let b_of = |h: TcpHandle| {
        let port = p.a.tcp_info(h).unwrap().local.port();
        bs.iter().find(|(_, q)| *q == port).unwrap().0
    };
    (a, [b_of(a[0]), b_of(a[1])])
}

/// The stall after c1m's surge (issue #12 item 8): an echo server's write was refused
/// memory while the pool was full of data its peers had not yet acknowledged; their ACKs
/// then freed the memory, and nothing was left to transmit. The writer must be woken by
/// the segment that freed the memory, not by the stack's next transmission: a driver
/// skips its transmit path when nothing is queued (`Stack::tx_pending`), so a wake-up
/// hung on that path never came, and the connection's echo waited forever. Here A's pool
/// is full of a1's unacknowledged data; a2, with nothing of its own queued, is refused;
/// B's ACK arrives, and a2 is on A's ready list before A transmits anything.
#[test]
fn a_writer_refused_memory_is_woken_by_the_ack_that_frees_it_with_nothing_to_send() {
    let mut p = Pair::new(SimLinkConfig::default());
    // Pressure above 4 KiB, refused above 8 KiB (4 chunks).
    set_tcp_mem(&mut p.a, 1, 1, 2, 2);
    let ([a1, a2], _) = two_conns(&mut p);
    let now = p.now;
    assert_eq!(p.a.tcp_send(now, a1, &pattern(8192, 1)), Ok(8192));
    assert_eq!(p.a.tcp_resources().buffer_bytes, 4 * BUFFER_CHUNK);
    let (ready, later) = refused_then_acked(&mut p, a2, &pattern(64, 2));
    assert_eq!(
        p.a.tcp_resources().buffer_bytes,
        0,
        "a1's data acknowledged"
    );
    assert!(
        !p.a.tcp_memory_pressure(),
        "the pool is empty: pressure ends"
    );
    assert!(!p.a.tx_pending(), "A has nothing to send");
    assert!(
        writable(&ready, a2),
        "a2 woken by the ACK that freed the memory: {ready:?}"
    );
    assert_eq!(p.a.tcp_send(later, a2, &pattern(64, 2)), Ok(64));
}

/// A writer refused memory while it has data in flight is woken by its own ACK (Linux
/// `SOCK_NOSPACE`, `tcp_check_space`), even when its send buffer was not full by size and
/// the stack stays under pressure (another connection holds unread data above
/// `tcp_mem.low`): it may write again, within its guaranteed minimum (`tcp_wmem.min`).
/// Waiting for the pressure to end would freeze it for as long as the other reader sleeps.
#[test]
fn a_writer_refused_memory_with_data_in_flight_is_woken_by_its_own_ack() {
    // B sends 6 KiB on a1, which A does not read: 3 chunks held.
    let (mut p, [_, a2]) = a1_holds_unread(6144);
    assert_eq!(p.a.tcp_resources().buffer_bytes, 3 * BUFFER_CHUNK);
    // a2 writes 1,000 bytes (the pool's last chunk), then is refused the next chunk.
    let now = p.now;
    assert_eq!(p.a.tcp_send(now, a2, &pattern(1000, 2)), Ok(1000));
    let (ready, later) = refused_then_acked(&mut p, a2, &pattern(2000, 3));
    assert_eq!(
        p.a.tcp_info(a2).unwrap().send_q,
        0,
        "a2's data acknowledged"
    );
    assert!(
        p.a.tcp_memory_pressure(),
        "a1's unread data keeps A under pressure"
    );
    assert!(writable(&ready, a2), "a2 woken by its ACK: {ready:?}");
    assert_eq!(p.a.tcp_send(later, a2, &pattern(2000, 3)), Ok(2000));
}
