//! A frame a write makes goes to the link before the write returns when it is the only
//! one queued (`Shard::transmit_lone`, Linux's qdisc bypass), and waits in the stack's
//! transmit queue when the link has no room: what a user checks is that the peer gets the
//! data without the writer's loop running again, that nothing is lost or reordered when
//! the ring is full, and that a capture still sees every frame.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use ustack_dev::Device;
use ustack_dev::capture::Capture;
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_dev::sim::{Side, SimLinkConfig};
use ustack_obs::Counter;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::{Clock, Runtime, RuntimeBuilder, VirtualClock, sim_pair};
use ustack_stack::Instant;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ADDR: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 9000);

/// A client whose device is captured, in memory.
type Captured<D> = Capture<D, Vec<u8>>;

/// The server's runtime on `a` and the client's on `b`, captured, on one virtual clock.
fn runtimes<D: Device + ustack_dev::Sleep>(
    a: D,
    b: D,
) -> (
    VirtualClock,
    Runtime<D, VirtualClock>,
    Runtime<Captured<D>, VirtualClock>,
) {
    let clock = VirtualClock::new(Instant::ZERO);
    let srt = RuntimeBuilder::new()
        .ipv4(SERVER_IP, 24)
        .seed(1)
        .build_with_clock(a, clock.participant())
        .unwrap();
    let capture = Capture::new(b, Vec::new()).unwrap();
    let crt = RuntimeBuilder::new()
        .ipv4(CLIENT_IP, 24)
        .seed(2)
        .build_with_clock(capture, clock.participant())
        .unwrap();
    (clock, srt, crt)
}

/// Run both loops until `done` holds (at most 10 s of virtual time, and at most 100,000
/// rounds each: a loop whose clock stands still fails, not hangs).
fn run_until<A: Device + ustack_dev::Sleep, B: Device + ustack_dev::Sleep>(
    srt: &mut Runtime<A, VirtualClock>,
    crt: &mut Runtime<B, VirtualClock>,
    clock: &VirtualClock,
    mut done: impl FnMut(&mut Runtime<A, VirtualClock>, &mut Runtime<B, VirtualClock>) -> bool,
) {
    let limit = clock.now() + Duration::from_secs(10);
    let mut rounds = 0;
    while !done(srt, crt) {
        srt.run_once(Some(Duration::from_millis(1))).unwrap();
        crt.run_once(Some(Duration::from_millis(1))).unwrap();
        rounds += 1;
        assert!(clock.now() < limit, "not done in 10 s of virtual time");
        assert!(rounds < 100_000, "not done in 100,000 rounds");
    }
}

/// A connection from `crt` to a listener on `srt`, Nagle off on the client (each write a
/// segment): (server's stream, client's stream).
fn connect<A: Device + ustack_dev::Sleep, B: Device + ustack_dev::Sleep>(
    srt: &mut Runtime<A, VirtualClock>,
    crt: &mut Runtime<B, VirtualClock>,
    clock: &VirtualClock,
) -> (TcpListener, TcpStream, TcpStream) {
    let listener = TcpListener::bind(srt, ADDR, 16).unwrap();
    let client = TcpStream::connect(crt, ADDR).unwrap();
    client.set_nodelay(crt, true).unwrap();
    let mut server = None;
    run_until(srt, crt, clock, |srt, crt| {
        if server.is_none() {
            server = listener.accept(srt).ok().map(|(s, _)| s);
        }
        server.is_some() && client.poll_connect(crt).unwrap()
    });
    // Let the last ACKs land, so that nothing is queued on either side.
    for _ in 0..4 {
        srt.run_once(Some(Duration::ZERO)).unwrap();
        crt.run_once(Some(Duration::ZERO)).unwrap();
    }
    (listener, server.unwrap(), client)
}

/// Read what `stream` has, appending it to `into`.
fn read_all<D: Device + ustack_dev::Sleep>(
    rt: &mut Runtime<D, VirtualClock>,
    stream: &TcpStream,
    into: &mut Vec<u8>,
) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(rt, &mut buf) {
        if n == 0 {
            break;
        }
        into.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_written_segment_is_on_the_link_before_write_returns_and_captured() {
    let (a, b) = sim_pair(SimLinkConfig::default());
    let link = b.link().clone();
    let (clock, mut srt, mut crt) = runtimes(a, b);
    let (_listener, server, client) = connect(&mut srt, &mut crt, &clock);

    let mut got = Vec::new();
    for (i, msg) in [&b"ping"[..], b"second", b"third one"].iter().enumerate() {
        let sent = link.borrow().stats(Side::B).sent;
        let captured = crt.device().packets_written();
        assert_eq!(client.write(&mut crt, msg).unwrap(), msg.len());
        // No round of the client's loop ran: the segment is on the wire already, the
        // capture has it, and the stack's queue is empty.
        assert_eq!(link.borrow().stats(Side::B).sent, sent + 1, "message {i}");
        assert_eq!(crt.device().packets_written(), captured + 1, "message {i}");
        assert_eq!(crt.stack().tx_queue_len(), 0);
        // The server gets it with only its own loop run.
        let before = got.len();
        srt.run_once(Some(Duration::ZERO)).unwrap();
        read_all(&mut srt, &server, &mut got);
        assert_eq!(&got[before..], *msg, "message {i}");
        // The client's next round reports and counts the frame as its own transmit.
        let stats = *crt.shard_stats();
        let r = crt.run_once(Some(Duration::ZERO)).unwrap();
        assert!(
            r.tx >= 1,
            "the round reports the frame the write sent: {r:?}"
        );
        let after = crt.shard_stats();
        assert_eq!(after.tx_direct, stats.tx_direct + 1);
        assert!(after.transmitted > stats.transmitted);
        // The server's ACK may have come back meanwhile; run both to settle.
        srt.run_once(Some(Duration::ZERO)).unwrap();
        crt.run_once(Some(Duration::ZERO)).unwrap();
    }
    assert_eq!(got, b"pingsecondthird one");
    // Every frame in and out of the client is in the capture.
    let s = crt.shard_stats();
    assert_eq!(
        crt.device().packets_written(),
        s.transmitted + s.processed,
        "capture against the shard's counters: {s:?}"
    );
}

/// A device that does not ask for the bypass (`Device::tx_direct` false: the kernel links,
/// and here the fault relay around a sim port) gets a write's frame from the loop's next
/// round, as before the bypass: the write leaves it queued.
#[test]
fn a_device_that_does_not_ask_for_the_bypass_gets_the_frame_from_the_round() {
    use ustack_dev::fault::{FaultConfig, Faulty};
    let (a, b) = sim_pair(SimLinkConfig::default());
    let link = b.link().clone();
    let clean = FaultConfig::default;
    let (a, b) = (
        Faulty::new(a, 1, clean(), clean()),
        Faulty::new(b, 2, clean(), clean()),
    );
    assert!(!b.tx_direct());
    let (clock, mut srt, mut crt) = runtimes(a, b);
    let (_listener, server, client) = connect(&mut srt, &mut crt, &clock);

    let sent = link.borrow().stats(Side::B).sent;
    assert_eq!(client.write(&mut crt, b"ping").unwrap(), 4);
    assert_eq!(
        link.borrow().stats(Side::B).sent,
        sent,
        "nothing on the wire yet"
    );
    assert_eq!(
        crt.stack().tx_queue_len(),
        1,
        "the frame waits for the round"
    );
    let r = crt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(r.tx >= 1, "{r:?}");
    assert_eq!(link.borrow().stats(Side::B).sent, sent + 1);
    assert_eq!(crt.shard_stats().tx_direct, 0);
    let mut got = Vec::new();
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        read_all(srt, &server, &mut got);
        got.len() == 4
    });
    assert_eq!(got, b"ping");
}

#[test]
fn writes_wait_in_order_while_the_ring_is_full_and_none_is_lost() {
    // Four slots each way: the fifth frame finds no room until the server reads.
    let config = ShmConfig {
        ring_size: 4,
        ..ShmConfig::default()
    };
    let (mut sa, mut sb) = ShmLink::pair(&config).unwrap();
    let (a, b): (ShmPort, ShmPort) = (sa.remove(0), sb.remove(0));
    let (clock, mut srt, mut crt) = runtimes(a, b);
    let (_listener, server, client) = connect(&mut srt, &mut crt, &clock);
    let direct_before = {
        crt.run_once(Some(Duration::ZERO)).unwrap();
        crt.shard_stats().tx_direct
    };

    // Six messages, the server's loop not run: the first writes fill the ring, the rest
    // wait in the client's transmit queue.
    const FIRST: usize = 6;
    const N: usize = 9; // within the initial congestion window (10 segments)
    let msgs: Vec<Vec<u8>> = (0..N)
        .map(|i| (0..100).map(|j| (i * 7 + j) as u8).collect())
        .collect();
    for m in &msgs[..FIRST] {
        assert_eq!(client.write(&mut crt, m).unwrap(), m.len());
    }
    assert!(
        crt.stack().tx_queue_len() > 1,
        "with the ring full, frames wait in the stack's queue"
    );
    // A round of the client's loop with the ring still full holds them (nothing dropped).
    crt.run_once(Some(Duration::ZERO)).unwrap();
    assert!(crt.stack().tx_queue_len() > 1);
    assert!(crt.shard_stats().tx_held > 0);
    let direct = crt.shard_stats().tx_direct - direct_before;
    assert!(
        (1..FIRST as u64).contains(&direct),
        "some writes went to the ring at once, not all: {direct}"
    );
    // The server reads, so the ring has room again; the client writes on before its loop
    // runs: those frames go behind the ones waiting, not past them.
    let mut got = Vec::new();
    for _ in 0..4 {
        srt.run_once(Some(Duration::ZERO)).unwrap();
        read_all(&mut srt, &server, &mut got);
    }
    for m in &msgs[FIRST..] {
        assert_eq!(client.write(&mut crt, m).unwrap(), m.len());
    }

    // Now both loops run: everything arrives, in order.
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        read_all(srt, &server, &mut got);
        got.len() >= N * 100
    });
    assert_eq!(got, msgs.concat(), "the bytes arrive whole and in order");
    let s = *crt.shard_stats();
    assert_eq!(s.tx_dropped, 0, "no frame refused: {s:?}");
    let shm = crt.device().device().stats().clone();
    assert_eq!(shm.tx_full, 0, "the ring never dropped a frame: {shm:?}");
    // Nothing lost (no retransmission) and nothing reordered (the receiver never had
    // to hold a segment out of order).
    assert_eq!(crt.stack().mib().get(Counter::TcpRetransSegs), 0);
    assert_eq!(srt.stack().mib().get(Counter::TcpExtTCPOFOQueue), 0);
    // The capture saw every frame the client sent and received.
    for _ in 0..4 {
        srt.run_once(Some(Duration::ZERO)).unwrap();
        crt.run_once(Some(Duration::ZERO)).unwrap();
    }
    let s = crt.shard_stats();
    assert_eq!(crt.device().packets_written(), s.transmitted + s.processed);
}
