//! ustack-tokio over IPv6 on a sim pair of dual-stack stacks: a tokio echo server on
//! `[::]` and tokio clients over IPv6 (every byte checked, both ends' addresses IPv6) and
//! one over IPv4 (seen v4-mapped by the server, as tokio's on Linux), and UDP over IPv6.

use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::RuntimeBuilder;
use ustack_tokio::{Net, TcpListener, TcpStream, UdpSocket};

const LIMIT: Duration = Duration::from_secs(60);
const SERVER4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

/// Two dual-stack stacks, their IPv6 addresses usable at once (`accept_dad` 0).
fn sim_nets() -> (Net, Net) {
    let stack = |v4, v6, seed| {
        RuntimeBuilder::new()
            .ipv4(v4, 24)
            .ipv6(v6, 64)
            .sysctl("net.ipv6.conf.default.accept_dad", 0)
            .seed(seed)
    };
    Net::sim_pair(
        stack(SERVER4, SERVER6, 1),
        stack(CLIENT4, CLIENT6, 2),
        SimLinkConfig::default(),
    )
    .expect("sim pair")
}

/// Connect to `to`, write `len` bytes of pattern `salt` while reading the echo: what came
/// back and our address.
async fn client(net: Net, to: SocketAddr, salt: u64, len: usize) -> (Vec<u8>, SocketAddr) {
    let s = TcpStream::connect(&net, to).await.expect("connect");
    assert_eq!(s.peer_addr().unwrap(), to);
    let me = s.local_addr().unwrap();
    let (mut r, mut w) = s.into_split();
    let data = ustack_testkit::pattern(len, salt);
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.expect("write");
        w.shutdown().await.expect("shutdown");
        w
    });
    let mut got = Vec::with_capacity(len);
    r.read_to_end(&mut got).await.expect("read");
    drop(writer.await.unwrap());
    (got, me)
}

#[test]
fn tokio_echo_over_ipv6_and_a_dual_stack_listener() {
    let (server, client_net) = sim_nets();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind(&server, "[::]:7").unwrap();
        assert_eq!(
            listener.local_addr().unwrap(),
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 7))
        );
        let (peers_tx, mut peers) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (s, peer) = listener.accept().await.expect("accept");
                peers_tx.send((peer, s.local_addr().unwrap())).unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    tokio::io::copy(&mut r, &mut w).await.expect("copy");
                    w.shutdown().await.expect("shutdown");
                });
            }
        });
        let len = 200_000;
        let to6 = SocketAddr::from((SERVER6, 7));
        let clients: Vec<_> = (0..8)
            .map(|i| tokio::spawn(client(client_net.clone(), to6, i, len)))
            .collect();
        let all = async {
            let mut mine = Vec::new();
            for (i, c) in clients.into_iter().enumerate() {
                let (got, me) = c.await.unwrap();
                assert_eq!(got.len(), len, "connection {i}: length");
                assert!(
                    got == ustack_testkit::pattern(len, i as u64),
                    "connection {i}: bytes differ"
                );
                assert_eq!(me.ip(), CLIENT6, "connection {i}: our IPv6 address");
                mine.push(me);
            }
            // An IPv4 client of the same listener.
            let to4 = SocketAddr::from((SERVER4, 7));
            let (got, me4) = client(client_net.clone(), to4, 99, 10_000).await;
            assert!(got == ustack_testkit::pattern(10_000, 99));
            assert!(me4.is_ipv4());
            (mine, me4)
        };
        let (mut mine, me4) = tokio::time::timeout(LIMIT, all).await.expect("in time");
        let mut seen = Vec::new();
        for _ in 0..9 {
            seen.push(peers.recv().await.unwrap());
        }
        let (peer4, local4) = seen.pop().unwrap();
        assert_eq!(
            (peer4, local4),
            (
                SocketAddr::from((CLIENT4.to_ipv6_mapped(), me4.port())),
                SocketAddr::from((SERVER4.to_ipv6_mapped(), 7))
            ),
            "the IPv4 client, v4-mapped at the server"
        );
        let mut peers6: Vec<SocketAddr> = seen.iter().map(|(p, _)| *p).collect();
        peers6.sort();
        mine.sort();
        assert_eq!(peers6, mine, "accept's peers are the clients' addresses");
        assert!(seen.iter().all(|(_, l)| *l == to6));
    });
}

#[test]
fn udp_over_ipv6() {
    let (server, client_net) = sim_nets();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let at = SocketAddr::from((SERVER6, 53));
        let s = UdpSocket::bind(&server, at).unwrap();
        let c = UdpSocket::bind(&client_net, "[::]:0").unwrap();
        let me = c.local_addr().unwrap();
        assert!(me.is_ipv6() && me.port() != 0, "{me}");
        let echo = tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let mut froms = Vec::new();
            for _ in 0..5 {
                let (n, from) = s.recv_from(&mut buf).await.unwrap();
                s.send_to(&buf[..n], from).await.unwrap();
                froms.push(from);
            }
            froms
        });
        let mut buf = [0u8; 2048];
        for i in 0..5u64 {
            let msg = ustack_testkit::pattern(200 + i as usize * 300, i);
            c.send_to(&msg, at).await.unwrap();
            let (n, from) = tokio::time::timeout(LIMIT, c.recv_from(&mut buf))
                .await
                .expect("in time")
                .unwrap();
            assert_eq!(from, at);
            assert_eq!(&buf[..n], &msg[..]);
        }
        for from in echo.await.unwrap() {
            assert_eq!(from, SocketAddr::from((CLIENT6, me.port())));
        }
    });
}
