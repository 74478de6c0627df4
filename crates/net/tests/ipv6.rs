//! ustack-net over IPv6, between two stacks on a sim pair: a TCP echo and a UDP echo over
//! IPv6 (every byte checked, both ends' addresses as std gives them), a dual-stack
//! listener on `::` taking an IPv4 and an IPv6 client (the IPv4 one seen as
//! `::ffff:a.b.c.d` at both ends of the accepted socket, as Linux), `IPV6_V6ONLY`
//! refusing the IPv4 client, a connect to `::ffff:a.b.c.d` going over IPv4, and the
//! family mismatches Linux answers with `EAFNOSUPPORT`; and a sharded client's IPv6
//! connections, each from a port whose replies the device steers back to its own shard.
//!
//! Every blocking call has a timeout, so a broken feature fails the test instead of
//! hanging it.

mod common;

use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};

use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::SimLinkConfig;
use ustack_net::{Net, TcpListener, TcpStream, UdpSocket, Wait};
use ustack_runtime::{Rss, RssKey, RssSplitter, RuntimeBuilder};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const LIMIT: Duration = Duration::from_secs(20);
const EAFNOSUPPORT: i32 = 97;

/// Two dual-stack stacks (an IPv4 and an IPv6 address each) on a sim pair; their IPv6
/// addresses usable at once (`accept_dad` 0, as `ip addr add ... nodad`).
fn sim_nets() -> (Net, Net) {
    let (s, c) = builders();
    Net::sim_pair(s, c, SimLinkConfig::default()).expect("sim pair")
}

/// The server's and the client's stacks: an IPv4 and an IPv6 address each, the IPv6 one
/// usable at once.
fn builders() -> (RuntimeBuilder, RuntimeBuilder) {
    let stack = |v4, v6, seed| {
        RuntimeBuilder::new()
            .ipv4(v4, 24)
            .ipv6(v6, 64)
            .sysctl("net.ipv6.conf.default.accept_dad", 0)
            .seed(seed)
    };
    (stack(SERVER_IP, SERVER6, 1), stack(CLIENT_IP, CLIENT6, 2))
}

fn mapped(ip: Ipv4Addr) -> Ipv6Addr {
    ip.to_ipv6_mapped()
}

fn connect(net: &Net, to: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(net, &to, LIMIT).expect("connect");
    s.set_read_timeout(Some(LIMIT)).unwrap();
    s.set_write_timeout(Some(LIMIT)).unwrap();
    s
}

/// Bytes that differ per position.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Send `data` over `c` and read the echo back to EOF (a writer thread, so a large
/// transfer cannot deadlock on full windows).
fn echo_through(c: TcpStream, data: &[u8]) -> Vec<u8> {
    let mut w = c.try_clone().unwrap();
    let out = data.to_vec();
    let writer = std::thread::spawn(move || {
        w.write_all(&out).expect("client write");
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut echoed = Vec::new();
    (&c).read_to_end(&mut echoed).expect("client read");
    writer.join().unwrap();
    echoed
}

/// Echo what `s` reads until EOF (with the read timeout); the byte count.
fn serve_echo(s: TcpStream) -> usize {
    s.set_read_timeout(Some(LIMIT)).unwrap();
    common::echo_to_eof(s)
}

#[test]
fn tcp_echo_over_ipv6() {
    let (server, client) = sim_nets();
    let at = SocketAddr::from((SERVER6, 8006));
    let listener = TcpListener::bind(&server, at).unwrap();
    assert_eq!(listener.local_addr().unwrap(), at);
    let srv = std::thread::spawn(move || {
        let (s, peer) = listener.accept().expect("accept");
        let local = s.local_addr().unwrap();
        (peer, local, serve_echo(s))
    });
    let c = connect(&client, at);
    assert_eq!(c.peer_addr().unwrap(), at);
    let mine = c.local_addr().unwrap();
    assert_eq!(mine.ip(), CLIENT6, "the source is our IPv6 address");
    let data = pattern(300 * 1024);
    let echoed = echo_through(c, &data);
    assert_eq!(echoed.len(), data.len(), "echo length");
    assert!(echoed == data, "echoed bytes differ");
    let (peer, local, n) = srv.join().unwrap();
    assert_eq!(peer, mine, "accept's peer is the client's address");
    assert_eq!(local, at, "the accepted socket's own address");
    assert_eq!(n, data.len());
}

#[test]
fn udp_echo_over_ipv6_and_connected() {
    let (server, client) = sim_nets();
    let at = SocketAddr::from((SERVER6, 5353));
    let srv = UdpSocket::bind(&server, at).unwrap();
    srv.set_read_timeout(Some(LIMIT)).unwrap();
    let cli = UdpSocket::bind(&client, (Ipv6Addr::UNSPECIFIED, 0)).unwrap();
    cli.set_read_timeout(Some(LIMIT)).unwrap();
    let cli_addr = cli.local_addr().unwrap();
    assert!(cli_addr.is_ipv6() && cli_addr.port() != 0, "{cli_addr}");
    let t = std::thread::spawn(move || {
        let mut froms = Vec::new();
        let mut buf = [0; 2048];
        for _ in 0..2 {
            let (n, from) = srv.recv_from(&mut buf).unwrap();
            let mut reply = buf[..n].to_vec();
            reply.reverse();
            assert_eq!(srv.send_to(&reply, from).unwrap(), n);
            froms.push(from);
        }
        froms
    });
    let msg = pattern(1200);
    assert_eq!(cli.send_to(&msg, at).unwrap(), msg.len());
    let mut buf = [0; 2048];
    let (n, from) = cli.recv_from(&mut buf).unwrap();
    let mut want = msg.clone();
    want.reverse();
    assert_eq!(&buf[..n], &want[..]);
    assert_eq!(from, at);
    // Connected to an IPv6 peer: send/recv/peer_addr.
    cli.connect(at).unwrap();
    assert_eq!(cli.peer_addr().unwrap(), at);
    assert_eq!(cli.send(b"connected").unwrap(), 9);
    let n = cli.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"detcennoc");
    let froms = t.join().unwrap();
    assert_eq!(froms.len(), 2);
    for f in froms {
        assert_eq!(f.ip(), CLIENT6, "the server saw our IPv6 address");
        assert_eq!(f.port(), cli_addr.port());
    }
}

#[test]
fn a_dual_stack_listener_accepts_both_families_unless_v6only() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, (Ipv6Addr::UNSPECIFIED, 8080)).unwrap();
    let srv = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (s, peer) = listener.accept().expect("accept");
            let local = s.local_addr().unwrap();
            let n = serve_echo(s);
            seen.push((peer, local, n));
        }
        seen
    });
    // An IPv4 client and an IPv6 client.
    let c4 = connect(&client, SocketAddr::from((SERVER_IP, 8080)));
    let c4_local = c4.local_addr().unwrap();
    assert!(c4_local.is_ipv4(), "an IPv4 connect is IPv4 at our end");
    assert_eq!(echo_through(c4, b"over ipv4"), b"over ipv4");
    let c6 = connect(&client, SocketAddr::from((SERVER6, 8080)));
    let c6_local = c6.local_addr().unwrap();
    assert_eq!(echo_through(c6, b"over ipv6"), b"over ipv6");
    let seen = srv.join().unwrap();
    assert_eq!(
        seen[0],
        (
            SocketAddr::from((mapped(CLIENT_IP), c4_local.port())),
            SocketAddr::from((mapped(SERVER_IP), 8080)),
            9
        ),
        "the IPv4 client, v4-mapped at both ends"
    );
    assert_eq!(
        seen[1],
        (c6_local, SocketAddr::from((SERVER6, 8080)), 9),
        "the IPv6 client"
    );

    // IPV6_V6ONLY: the IPv4 client finds nobody (a reset), the IPv6 one gets through.
    let only = server
        .tcp_listen_only_v6((Ipv6Addr::UNSPECIFIED, 8081), 16, true)
        .unwrap();
    let refused = TcpStream::connect_timeout(&client, &SocketAddr::from((SERVER_IP, 8081)), LIMIT)
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
    let _c = connect(&client, SocketAddr::from((SERVER6, 8081)));
    let (fd, peer) = server.accept(only, Wait::timeout(Some(LIMIT))).unwrap();
    assert_eq!(peer.ip(), CLIENT6);
    server.close(fd).unwrap();
    server.close(only).unwrap();
}

#[test]
fn a_v4_mapped_connect_goes_over_ipv4_and_families_mismatch_as_linux() {
    let (server, client) = sim_nets();
    let listener = TcpListener::bind(&server, (SERVER_IP, 9000)).unwrap();
    let srv = std::thread::spawn(move || {
        let (s, peer) = listener.accept().expect("accept");
        (peer, serve_echo(s))
    });
    let to = SocketAddr::from((mapped(SERVER_IP), 9000));
    let c = connect(&client, to);
    assert_eq!(c.peer_addr().unwrap(), to, "the peer as we named it");
    let local = c.local_addr().unwrap();
    assert_eq!(local.ip(), mapped(CLIENT_IP), "our end is v4-mapped too");
    assert_eq!(echo_through(c, b"mapped"), b"mapped");
    let (peer, n) = srv.join().unwrap();
    assert_eq!(
        peer,
        SocketAddr::from((CLIENT_IP, local.port())),
        "plain IPv4 at the IPv4 listener"
    );
    assert_eq!(n, 6);

    // An IPv4 UDP socket and an IPv6 peer: EAFNOSUPPORT (Linux `ip4_datagram_connect`,
    // `udp_sendmsg`); an IPv6 one bound to an IPv6 address cannot reach a v4-mapped peer.
    let u4 = UdpSocket::bind(&client, (CLIENT_IP, 0)).unwrap();
    let to6 = SocketAddr::from((SERVER6, 53));
    assert_eq!(
        u4.send_to(b"x", to6).unwrap_err().raw_os_error(),
        Some(EAFNOSUPPORT)
    );
    assert_eq!(
        u4.connect(to6).unwrap_err().raw_os_error(),
        Some(EAFNOSUPPORT)
    );
    let u6 = UdpSocket::bind(&client, (CLIENT6, 0)).unwrap();
    assert_eq!(
        u6.connect(SocketAddr::from((mapped(SERVER_IP), 53)))
            .unwrap_err()
            .kind(),
        ErrorKind::NetworkUnreachable
    );
    // IPV6_V6ONLY on an IPv4 socket: EAFNOSUPPORT.
    assert_eq!(
        client
            .udp_set_only_v6(u4.fd(), true)
            .unwrap_err()
            .raw_os_error(),
        Some(EAFNOSUPPORT)
    );
    assert_eq!(
        client
            .tcp_listen_only_v6((CLIENT_IP, 1), 1, true)
            .unwrap_err()
            .raw_os_error(),
        Some(EAFNOSUPPORT)
    );
}

/// A client `Net` with two shards (a queue pair each of a shm link) connects over IPv6 to a
/// one-shard server whose device steers every frame it sends to the queue RSS picks (as a
/// NIC with RSS would for the client): each connection's SYN-ACK and echo reach the shard
/// that opened it only if its local port was chosen to hash home over the IPv6 tuple.
#[test]
fn a_sharded_client_connects_over_ipv6_from_ports_that_hash_home() {
    const SHARDS: usize = 2;
    let config = ShmConfig {
        queue_pairs: SHARDS,
        medium: ustack_dev::Medium::Ip,
        ..ShmConfig::default()
    };
    let (a, b) = ShmLink::pair(&config).expect("shm link");
    let (s, c) = builders();
    let splitter = RssSplitter::new(b, Rss::new(RssKey::MICROSOFT, SHARDS));
    let server = Net::on_links(s, vec![splitter]).expect("server");
    let client = Net::shm(c, a).expect("client");
    assert_eq!(client.shards(), SHARDS);
    let at = SocketAddr::from((SERVER6, 8010));
    let listener = TcpListener::bind(&server, at).unwrap();
    const CONNS: usize = 16;
    let srv = std::thread::spawn(move || {
        (0..CONNS)
            .map(|_| serve_echo(listener.accept().expect("accept").0))
            .sum::<usize>()
    });
    for i in 0..CONNS {
        let c = connect(&client, at);
        assert_eq!(c.local_addr().unwrap().ip(), CLIENT6, "connection {i}");
        let data = pattern(1000 + i);
        assert!(
            echo_through(c, &data) == data,
            "connection {i}: echo differs"
        );
    }
    assert_eq!(
        srv.join().unwrap(),
        (0..CONNS).map(|i| 1000 + i).sum::<usize>()
    );
    // The connections were opened on both shards (the client spreads them).
    let opened = client
        .on_each_shard(|rt| rt.stack().mib().get(ustack_obs::Counter::TcpActiveOpens))
        .unwrap();
    assert!(
        opened.iter().all(|&n| n > 0),
        "a shard opened nothing: {opened:?}"
    );
}
