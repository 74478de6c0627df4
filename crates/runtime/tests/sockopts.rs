//! TcpStream's socket options through the public API: SO_SNDBUF / SO_RCVBUF (Linux's
//! doubling and clamping, a small send buffer making writes short and then EAGAIN) and
//! SO_LINGER with zero time (close resets the connection: the peer reads ECONNRESET).

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::sim::SimLinkConfig;
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::{Clock, Runtime, RuntimeBuilder, SimPort, VirtualClock, sim_pair};
use ustack_stack::tcp::State;
use ustack_stack::{EthernetAddress, Instant};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const ADDR: SocketAddrV4 = SocketAddrV4::new(SERVER_IP, 9000);

/// Linux's errno values.
const ECONNRESET: i32 = 104;
const EBADF: i32 = 9;

type Rt = Runtime<SimPort, VirtualClock>;

/// Run both runtimes until `done` holds (at most 10 s of virtual time).
fn run_until(
    srt: &mut Rt,
    crt: &mut Rt,
    clock: &VirtualClock,
    mut done: impl FnMut(&mut Rt, &mut Rt) -> bool,
) {
    let limit = clock.now() + Duration::from_secs(10);
    while !done(srt, crt) {
        srt.run_once(Some(Duration::from_millis(1))).unwrap();
        crt.run_once(Some(Duration::from_millis(1))).unwrap();
        assert!(clock.now() < limit, "not done in 10 s of virtual time");
    }
}

#[test]
fn buffer_sizes_and_linger_zero_through_the_api() {
    let (a, b) = sim_pair(SimLinkConfig::default());
    let clock = VirtualClock::new(Instant::ZERO);
    let mut srt = RuntimeBuilder::new()
        .ipv4(SERVER_IP, 24)
        .seed(1)
        .build_with_clock(a, clock.participant())
        .unwrap();
    let mut crt = RuntimeBuilder::new()
        .ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 2]))
        .seed(2)
        .build_with_clock(b, clock.participant())
        .unwrap();
    let listener = TcpListener::bind(&mut srt, ADDR, 16).unwrap();
    let client = TcpStream::connect(&mut crt, ADDR).unwrap();
    let mut server = None;
    run_until(&mut srt, &mut crt, &clock, |srt, crt| {
        if server.is_none() {
            server = listener.accept(srt).ok().map(|(s, _)| s);
        }
        server.is_some() && client.state(crt).unwrap() == State::Established
    });
    let server = server.unwrap();

    // SO_SNDBUF / SO_RCVBUF: doubled, at least SOCK_MIN_*BUF, at most 2 * tcp_*mem.max.
    client.set_send_buffer_size(&mut crt, 3000).unwrap();
    assert_eq!(client.send_buffer_size(&crt).unwrap(), 6000);
    server.set_recv_buffer_size(&mut srt, 10).unwrap();
    assert_eq!(server.recv_buffer_size(&srt).unwrap(), 2304);
    server.set_recv_buffer_size(&mut srt, usize::MAX).unwrap();
    let rmem_max = srt.stack().sysctl().tcp_rmem_max as usize;
    assert_eq!(server.recv_buffer_size(&srt).unwrap(), 2 * rmem_max);

    // A short write of the buffer's size, then EAGAIN.
    assert_eq!(client.write(&mut crt, &[1u8; 10_000]).unwrap(), 6000);
    let e = client.write(&mut crt, &[1u8; 10]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    let mut got = 0;
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = server.read(srt, &mut buf) {
            got += n;
        }
        got == 6000
    });

    // SO_LINGER zero: close resets; the server sees ECONNRESET, and the client's
    // counters show the abort (Linux counts TCPAbortOnData).
    client.set_linger(&mut crt, Some(Duration::ZERO)).unwrap();
    client.close(&mut crt).unwrap();
    let mut reset = None;
    run_until(&mut srt, &mut crt, &clock, |srt, _| {
        let mut buf = [0u8; 16];
        match server.read(srt, &mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            r => {
                reset = Some(r);
                true
            }
        }
    });
    let err = reset.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
    assert_eq!(err.raw_os_error(), Some(ECONNRESET));
    let mib = crt.stack().mib();
    assert_eq!(mib.get(ustack_obs::Counter::TcpExtTCPAbortOnData), 1);
    assert_eq!(mib.get(ustack_obs::Counter::TcpOutRsts), 1);

    // A closed stream: EBADF from every option.
    let stale = TcpStream::connect(&mut crt, ADDR).unwrap();
    crt.stack_mut()
        .tcp_abort(clock.now(), stale.handle())
        .unwrap();
    for e in [
        stale.set_send_buffer_size(&mut crt, 1).unwrap_err(),
        stale.set_recv_buffer_size(&mut crt, 1).unwrap_err(),
        stale.send_buffer_size(&crt).unwrap_err(),
        stale.recv_buffer_size(&crt).unwrap_err(),
        stale.set_linger(&mut crt, None).unwrap_err(),
    ] {
        assert_eq!(e.raw_os_error(), Some(EBADF), "EBADF: {e:?}");
    }
    server.close(&mut srt).unwrap();
}
