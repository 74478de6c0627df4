//! `Net::peek`, `Net::peek_from` and `Net::write_urgent` (the C API's `MSG_PEEK` and
//! `MSG_OOB`) over a sim pair: a peek leaves the bytes or the datagram for the next read;
//! urgent bytes go out in order behind the bytes written before them. (That a Linux peer
//! sees them urgent is checked by crates/preload's C test over TUN.) Every wait is bounded.

use core::net::Ipv4Addr;
use core::time::Duration;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};

use ustack_dev::sim::SimLinkConfig;
use ustack_net::{Net, TcpListener, TcpStream, UdpSocket, Wait};
use ustack_runtime::RuntimeBuilder;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const LIMIT: Duration = Duration::from_secs(20);

fn nets() -> (Net, Net) {
    Net::sim_pair(
        RuntimeBuilder::new().ipv4(SERVER_IP, 24).seed(1),
        RuntimeBuilder::new().ipv4(CLIENT_IP, 24).seed(2),
        SimLinkConfig::default(),
    )
    .expect("sim pair")
}

/// A connection on `port` between the two: (server net, client net, the client's
/// stream, the server's, with a read timeout).
fn connected(port: u16) -> (Net, Net, TcpStream, TcpStream) {
    let (server, client) = nets();
    let at = SocketAddr::from((SERVER_IP, port));
    let listener = TcpListener::bind(&server, at).unwrap();
    let c = TcpStream::connect_timeout(&client, &at, LIMIT).unwrap();
    let (s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    (server, client, c, s)
}

fn bounded() -> Wait {
    Wait::timeout(Some(LIMIT))
}

#[test]
fn a_stream_peek_leaves_the_bytes_for_the_next_read() {
    let (server, _client, mut c, mut s) = connected(7100);
    let mut buf = [0u8; 32];
    assert_eq!(
        server
            .peek(s.fd(), &mut buf, Wait::Never, false)
            .unwrap_err()
            .kind(),
        ErrorKind::WouldBlock
    );
    c.write_all(b"hello world").unwrap();
    // All 11 bytes, waited for, then a shorter peek: the same bytes each time.
    assert_eq!(
        server
            .peek(s.fd(), &mut buf[..11], bounded(), true)
            .unwrap(),
        11
    );
    assert_eq!(&buf[..11], b"hello world");
    assert_eq!(
        server
            .peek(s.fd(), &mut buf[..5], bounded(), false)
            .unwrap(),
        5
    );
    assert_eq!(&buf[..5], b"hello");
    let mut got = [0u8; 11];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello world");
    // The end of the stream: a peek says 0, as a read does.
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(server.peek(s.fd(), &mut buf, bounded(), false).unwrap(), 0);
}

#[test]
fn urgent_bytes_follow_the_bytes_written_before_them() {
    let (_server, client, mut c, mut s) = connected(7101);
    c.write_all(b"first;").unwrap();
    assert_eq!(client.write_urgent(c.fd(), b"urg!", bounded()).unwrap(), 4);
    c.write_all(b";after").unwrap();
    // ustack reads an urgent byte in line (as Linux with SO_OOBINLINE).
    let mut got = [0u8; 16];
    s.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"first;urg!;after");
}

/// Nothing queued: a peek that does not wait says `WouldBlock`.
fn assert_empty(net: &Net, s: &UdpSocket) {
    let mut buf = [0u8; 16];
    let e = net.peek_from(s.fd(), &mut buf, Wait::Never).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
}

#[test]
fn a_datagram_peek_leaves_the_datagram_queued() {
    let (server, client) = nets();
    let at = SocketAddr::from((SERVER_IP, 5300));
    let srv = UdpSocket::bind(&server, at).unwrap();
    let cli = UdpSocket::bind(&client, (CLIENT_IP, 0)).unwrap();
    let from = cli.local_addr().unwrap();
    let mut buf = [0u8; 16];
    assert_empty(&server, &srv);
    cli.send_to(b"datagram", at).unwrap();
    // Cut to the buffer, then whole; the sender each time; then taken by a receive.
    let (n, a) = server
        .peek_from(srv.fd(), &mut buf[..4], bounded())
        .unwrap();
    assert_eq!((&buf[..n], a), (&b"data"[..], from));
    let (n, _) = server.peek_from(srv.fd(), &mut buf, bounded()).unwrap();
    assert_eq!(&buf[..n], b"datagram");
    let (n, _) = server.recv_from(srv.fd(), &mut buf, bounded()).unwrap();
    assert_eq!(&buf[..n], b"datagram");
    assert_empty(&server, &srv);
}
