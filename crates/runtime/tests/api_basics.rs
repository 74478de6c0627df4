//! The public API's basics, as a Rust user expects them: a dropped socket closes (the
//! peer sees the FIN, the socket table and counters show it closed, the port is free
//! again), `write_all`, `peer_addr`/`local_addr`, a connect polled or awaited with a
//! timeout, UDP `connect` (default peer, other senders filtered out), a random MAC.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::sim::SimLinkConfig;
use ustack_dev::{DeviceCaps, Medium};
use ustack_obs::Counter;
use ustack_runtime::api::{TcpListener, TcpStream, UdpSocket};
use ustack_runtime::runtime::{Clock, RuntimeBuilder, VirtualClock, random_mac, sim_pair};
use ustack_stack::Instant;
use ustack_stack::inspect::Protocol;
use ustack_stack::tcp::State;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ADDR: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 9000);

/// Linux's errno values.
const ECONNREFUSED: i32 = 111;
const ENOTCONN: i32 = 107;
const EDESTADDRREQ: i32 = 89;
const ETIMEDOUT: i32 = 110;

mod sim;
use sim::{Rt, run_until};

/// A server and a client runtime on one sim link and one virtual clock (each with the
/// builder's random MAC).
fn pair() -> (Rt, Rt, VirtualClock) {
    pair_with_server(|b| b)
}

/// [`pair`], the server's builder first given to `server`.
fn pair_with_server(
    server: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> (Rt, Rt, VirtualClock) {
    let (a, b) = sim_pair(SimLinkConfig::default());
    let clock = VirtualClock::new(Instant::ZERO);
    let srt = server(RuntimeBuilder::new().ipv4(SERVER_IP, 24).seed(1))
        .build_with_clock(a, clock.participant())
        .unwrap();
    let crt = RuntimeBuilder::new()
        .ipv4(CLIENT_IP, 24)
        .seed(2)
        .build_with_clock(b, clock.participant())
        .unwrap();
    (srt, crt, clock)
}

/// An established connection: (listener, server's stream, client's stream).
fn connected(
    srt: &mut Rt,
    crt: &mut Rt,
    clock: &VirtualClock,
) -> (TcpListener, TcpStream, TcpStream) {
    let listener = TcpListener::bind(srt, ADDR, 16).unwrap();
    let client = TcpStream::connect(crt, ADDR).unwrap();
    assert!(!client.poll_connect(crt).unwrap(), "the SYN is only queued");
    let mut server = None;
    run_until(srt, crt, clock, |srt, crt| {
        if server.is_none() {
            server = listener.accept(srt).ok().map(|(s, _)| s);
        }
        server.is_some() && client.poll_connect(crt).unwrap()
    });
    (listener, server.unwrap(), client)
}

/// The ss-like state names of the runtime's TCP sockets.
fn tcp_states(rt: &Rt) -> Vec<&'static str> {
    rt.stack()
        .sockets(rt.now())
        .into_iter()
        .filter(|s| s.protocol == Protocol::Tcp)
        .map(|s| s.state)
        .collect()
}

#[test]
fn a_dropped_stream_closes_with_a_fin() {
    let (mut srt, mut crt, clock) = pair();
    let (_listener, server, client) = connected(&mut srt, &mut crt, &clock);
    assert_eq!(srt.stack().mib().get(Counter::TcpCurrEstab), 1);
    drop(server);
    // The next round closes it: a FIN, which the client reads as the end of the stream.
    let mut buf = [0u8; 16];
    run_until(&mut srt, &mut crt, &clock, |_, crt| {
        matches!(client.read(crt, &mut buf), Ok(0))
    });
    assert_eq!(srt.stats().closed_on_drop, 1);
    assert_eq!(srt.stack().mib().get(Counter::TcpCurrEstab), 0);
    assert_eq!(client.state(&crt).unwrap(), State::CloseWait);
    let states = tcp_states(&srt);
    assert!(
        states.iter().any(|s| s.starts_with("FIN-WAIT")) && !states.contains(&"ESTAB"),
        "the server's side is closing: {states:?}"
    );
    // Closing the client by hand is not counted as a close on drop.
    client.close(&mut crt).unwrap();
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        tcp_states(srt).contains(&"TIME-WAIT")
    });
    assert_eq!(crt.stats().closed_on_drop, 0);
}

#[test]
fn a_dropped_listener_stops_listening_and_a_dropped_udp_socket_frees_its_port() {
    let (mut srt, mut crt, clock) = pair();
    let listener = TcpListener::bind(&mut srt, ADDR, 16).unwrap();
    let udp = UdpSocket::bind(&mut srt, ADDR).unwrap();
    drop(listener);
    drop(udp);
    srt.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(srt.stats().closed_on_drop, 2);
    assert!(tcp_states(&srt).is_empty(), "{:?}", tcp_states(&srt));
    // The port is free for both again, and a connection to the old listener is refused.
    let _udp = UdpSocket::bind(&mut srt, ADDR).unwrap();
    let client = TcpStream::connect(&mut crt, ADDR).unwrap();
    let mut result = Ok(false);
    run_until(&mut srt, &mut crt, &clock, |_, crt| {
        result = client.poll_connect(crt);
        !matches!(result, Ok(false))
    });
    assert_eq!(result.unwrap_err().raw_os_error(), Some(ECONNREFUSED));
    // SO_ERROR is reported once; then the socket is simply not connected.
    let again = client.poll_connect(&mut crt).unwrap_err();
    assert_eq!(again.raw_os_error(), Some(ENOTCONN));
    let _listener = TcpListener::bind(&mut srt, ADDR, 16).unwrap();
}

#[test]
fn addresses_and_write_all() {
    let (mut srt, mut crt, clock) = pair();
    let (_listener, server, client) = connected(&mut srt, &mut crt, &clock);
    assert_eq!(client.peer_addr(&crt).unwrap(), ADDR.into());
    let local = client.local_addr(&crt).unwrap();
    assert_eq!(local.ip(), CLIENT_IP);
    assert_eq!(server.peer_addr(&srt).unwrap(), local);
    assert_eq!(server.local_addr(&srt).unwrap(), ADDR.into());

    // (Within the send buffer: write_all's wait for room runs only this runtime's loop,
    // which in one thread with the peer's would never see an ACK; the TUN tests of
    // `ustack connect` cover that path.)
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    client.write_all(&mut crt, &data).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        while let Ok(n) = server.read(srt, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.len() >= data.len()
    });
    assert_eq!(got, data);
}

#[test]
fn connect_timeout_gives_up_at_the_deadline() {
    // The link loses everything (nobody answers the ARP request for the server): the
    // connect cannot complete, and gives up after exactly the timeout on the runtime's
    // clock.
    let mut link = SimLinkConfig::default();
    link.a_to_b.loss = 1.0;
    let (a, _b) = sim_pair(link);
    let clock = VirtualClock::new(Instant::ZERO);
    let mut crt = RuntimeBuilder::new()
        .ipv4(CLIENT_IP, 24)
        .build_with_clock(a, clock.participant())
        .unwrap();
    let e = TcpStream::connect_timeout(&mut crt, ADDR, Duration::from_secs(2)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(ETIMEDOUT));
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert_eq!(clock.now(), Instant::ZERO + Duration::from_secs(2));
    // The attempt was reset, not left behind.
    assert!(tcp_states(&crt).is_empty(), "{:?}", tcp_states(&crt));
}

#[test]
fn a_connected_udp_socket_talks_to_its_peer_only() {
    let (mut srt, mut crt, clock) = pair();
    let server = UdpSocket::bind(&mut srt, ADDR).unwrap();
    let peer = UdpSocket::bind(&mut crt, SocketAddrV4::new(CLIENT_IP, 5000)).unwrap();
    let other = UdpSocket::bind(&mut crt, SocketAddrV4::new(CLIENT_IP, 5001)).unwrap();
    assert_eq!(
        server.send(&mut srt, b"x").unwrap_err().raw_os_error(),
        Some(EDESTADDRREQ)
    );
    assert_eq!(
        server.peer_addr(&srt).unwrap_err().raw_os_error(),
        Some(ENOTCONN)
    );
    server
        .connect(&mut srt, Some(SocketAddrV4::new(CLIENT_IP, 5000)))
        .unwrap();
    assert_eq!(
        server.peer_addr(&srt).unwrap(),
        SocketAddrV4::new(CLIENT_IP, 5000)
    );

    // The stranger's datagram finds no socket (NoPorts, and an ICMP port unreachable
    // comes back); the peer's is received.
    other.send_to(&mut crt, b"stranger", ADDR).unwrap();
    peer.send_to(&mut crt, b"peer", ADDR).unwrap();
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    run_until(&mut srt, &mut crt, &clock, |srt, crt| {
        while let Ok(n) = server.recv(srt, &mut buf) {
            got.push(buf[..n].to_vec());
        }
        !got.is_empty() && crt.stack().mib().get(Counter::IcmpInDestUnreachs) == 1
    });
    assert_eq!(got, vec![b"peer".to_vec()]);
    assert_eq!(srt.stack().mib().get(Counter::UdpNoPorts), 1);

    // send() goes to the peer.
    server.send(&mut srt, b"reply").unwrap();
    let mut reply = None;
    run_until(&mut srt, &mut crt, &clock, |_, crt| {
        reply = peer.recv_from(crt, &mut buf).ok();
        reply.is_some()
    });
    assert_eq!(reply, Some((5, ADDR)));
    assert_eq!(&buf[..5], b"reply");

    // Dissolved, it takes anyone's again.
    server.connect(&mut srt, None).unwrap();
    other.send_to(&mut crt, b"stranger", ADDR).unwrap();
    let mut from = None;
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        from = server.recv_from(srt, &mut buf).ok().map(|(_, f)| f);
        from.is_some()
    });
    assert_eq!(from, Some(SocketAddrV4::new(CLIENT_IP, 5001)));
}

#[test]
fn every_builder_draws_its_own_locally_administered_unicast_mac() {
    let caps = DeviceCaps {
        medium: Medium::Ethernet,
        mtu: 1500,
        gro_max_size: 0,
        gso_max_size: 0,
    };
    let config = |b: RuntimeBuilder| b.ipv4(SERVER_IP, 24).stack_config(caps).unwrap().mac;
    let macs: Vec<_> = (0..8).map(|_| config(RuntimeBuilder::new())).collect();
    for m in &macs {
        assert_eq!(m.0[0] & 0x03, 0x02, "{m:?}: locally administered, unicast");
    }
    let mut distinct = macs.clone();
    distinct.sort_by_key(|m| m.0);
    distinct.dedup();
    assert_eq!(distinct.len(), macs.len(), "{macs:?}");
    // The clones of one builder (the shards of one interface) share its MAC.
    let b = RuntimeBuilder::new();
    assert_eq!(config(b.clone()), config(b));
    assert_ne!(random_mac(), random_mac());
}

/// A runtime with no registration leaves the stack's wake-ups on its list (nobody would
/// hear them), reports nothing pending for them (so it does not keep a shared virtual
/// clock from moving), drops them every 64 rounds (the list stays bounded), and a socket
/// registered afterwards is still reported as ready.
#[test]
fn wake_ups_with_no_registration_wait_unharvested_and_registering_still_reports() {
    use ustack_runtime::Mode;
    use ustack_runtime::runtime::{Events, Interest, Source};
    use ustack_stack::Readiness;
    let (mut srt, mut crt, clock) = pair();
    let (_l, server, client) = connected(&mut srt, &mut crt, &clock);
    assert!(crt.poller().is_empty());
    server.write(&mut srt, b"ping").unwrap();
    run_until(&mut srt, &mut crt, &clock, |_, crt| {
        crt.stack()
            .readiness(client.key())
            .intersects(Readiness::READABLE)
    });
    assert!(
        !crt.poller().has_pending(crt.stack()),
        "wake-ups no registration hears are not work"
    );
    // Still on the list a round later (unless that round is a 64th).
    let rounds = crt.stats().rounds;
    crt.run_once(Some(Duration::ZERO)).unwrap();
    if (rounds + 1) % 64 != 0 {
        assert!(crt.stack().has_ready(), "left for a registration to take");
    }
    // Within 64 rounds the list is dropped.
    for _ in 0..64 {
        crt.run_once(Some(Duration::ZERO)).unwrap();
    }
    assert!(!crt.stack().has_ready(), "dropped within 64 rounds");
    crt.register(&client, 5, Interest::READABLE, Mode::Edge)
        .unwrap();
    let mut events = Events::with_capacity(4);
    assert_eq!(crt.poll(&mut events, Some(Duration::ZERO)).unwrap(), 1);
    let e = events.iter().next().unwrap();
    assert_eq!(e.token, 5);
    let mut buf = [0u8; 8];
    assert_eq!(client.read(&mut crt, &mut buf).unwrap(), 4);
}

/// A UDP server socket on `srt` at [`ADDR`] and a client on `crt`, one datagram
/// exchanged (the neighbours resolved): (server, client).
fn udp_exchanged(srt: &mut Rt, crt: &mut Rt, clock: &VirtualClock) -> (UdpSocket, UdpSocket) {
    let server = UdpSocket::bind(srt, ADDR).unwrap();
    let client = UdpSocket::bind(crt, SocketAddrV4::new(CLIENT_IP, 0)).unwrap();
    let mut buf = [0u8; 64];
    client.send_to(crt, b"first", ADDR).unwrap();
    run_until(srt, crt, clock, |srt, _| {
        server.recv_from(srt, &mut buf).is_ok()
    });
    (server, client)
}

/// The runtime's rounds keep the receive time limit: with `net.core.netdev_budget_usecs`
/// 0 every round takes one frame (the round's start is the `now` it was given, on the
/// same clock), counted as a time squeeze.
#[test]
fn a_zero_receive_time_budget_takes_one_frame_a_round() {
    let (mut srt, mut crt, clock) =
        pair_with_server(|b| b.sysctl("net.core.netdev_budget_usecs", 0));
    let (_server, client) = udp_exchanged(&mut srt, &mut crt, &clock);
    for _ in 0..5 {
        client.send_to(&mut crt, b"more", ADDR).unwrap();
    }
    crt.run_once(Some(Duration::ZERO)).unwrap();
    let squeezed = srt.shard_stats().time_squeeze;
    let r = srt.run_once(Some(Duration::ZERO)).unwrap();
    assert_eq!(r.rx, 1, "one frame, then the time is out");
    assert!(r.work_left);
    assert_eq!(srt.shard_stats().time_squeeze, squeezed + 1);
}

/// The rounds take their receive budget from the sysctls as they are: written while the
/// runtime runs (through `Runtime::stack_mut`), `net.core.netdev_budget` and
/// `net.core.netdev_budget_usecs` apply from the next round, and so does their undoing.
#[test]
fn receive_budget_sysctls_written_while_running_apply_from_the_next_round() {
    let (mut srt, mut crt, clock) = pair();
    let (_server, client) = udp_exchanged(&mut srt, &mut crt, &clock);
    // (datagrams sent first, the sysctl written, what the next round received, whether
    // it left work)
    let steps = [
        (5, "net.core.netdev_budget", 2, 2, true),
        (0, "net.core.netdev_budget", 300, 3, false),
        (3, "net.core.netdev_budget_usecs", 0, 1, true),
        (0, "net.core.netdev_budget_usecs", 2000, 2, false),
    ];
    for (sent, name, value, rx, left) in steps {
        for _ in 0..sent {
            client.send_to(&mut crt, b"more", ADDR).unwrap();
        }
        crt.run_once(Some(Duration::ZERO)).unwrap();
        srt.stack_mut().set_sysctl(name, value).unwrap();
        let r = srt.run_once(Some(Duration::ZERO)).unwrap();
        assert_eq!((r.rx, r.work_left), (rx, left), "after {name} = {value}");
    }
}
