//! The ready list across a connection's close (Linux `sk_state_change` and `sock_orphan`):
//! a socket the user still holds is queued at each state change; one closed with
//! `tcp_close` is queued once, by the close, and its later state changes (FIN-WAIT-2,
//! TIME-WAIT, CLOSED) wake no one.

use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_dev::sim::SimLinkConfig;
use ustack_stack::tcp::State;
use ustack_stack::{Error, Readiness, Shutdown, SocketKey, TcpHandle};
use ustack_testkit::{B_IP, Pair};

/// The wake-up kinds the ready list holds for `h`, if it is queued.
fn queued(ready: &[(SocketKey, Readiness)], h: TcpHandle) -> Option<Readiness> {
    ready
        .iter()
        .find(|(k, _)| *k == SocketKey::Tcp(h))
        .map(|&(_, r)| r)
}

#[test]
fn an_orphans_state_changes_wake_no_one_a_held_sockets_do() {
    let mut p = Pair::new(SimLinkConfig::default());
    let l = p.b.tcp_listen(SocketAddrV4::new(B_IP, 80), 16).unwrap();
    let now = p.now;
    let closed = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let held = p.a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    let mut accepted = Vec::new();
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        while let Ok((h, _)) = p.b.tcp_accept(l) {
            accepted.push(h);
        }
        accepted.len() == 2
            && [closed, held]
                .iter()
                .all(|&h| p.a.tcp_state(h) == Ok(State::Established))
    }));
    let mut ready = Vec::new();
    p.a.take_ready(&mut ready);
    ready.clear();

    // Both send their FIN: one closed (an orphan now), one shut down for writing.
    let now = p.now;
    p.a.tcp_close(now, closed).unwrap();
    p.a.tcp_shutdown(now, held, Shutdown::Write).unwrap();
    p.a.take_ready(&mut ready);
    assert_eq!(
        queued(&ready, closed),
        Some(Readiness::ALL),
        "the close queues the socket once, so that a poller drops it: {ready:?}"
    );
    assert_eq!(queued(&ready, held), Some(Readiness::ALL), "{ready:?}");
    assert_eq!(
        p.a.socket_readiness(SocketKey::Tcp(closed)),
        Err(Error::BadHandle)
    );
    ready.clear();

    // B acknowledges both FINs: FIN-WAIT-1 -> FIN-WAIT-2 on A.
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        p.a.tcp_state(held) == Ok(State::FinWait2)
    }));
    p.a.take_ready(&mut ready);
    assert_eq!(
        queued(&ready, held),
        Some(Readiness::ALL),
        "the held socket's state change is queued: {ready:?}"
    );
    assert_eq!(
        queued(&ready, closed),
        None,
        "the orphan's FIN-WAIT-2 wakes no one: {ready:?}"
    );
    ready.clear();

    // B closes both: A enters TIME-WAIT (the orphan's connection ends; the held socket
    // reads end of stream and hangs up).
    let now = p.now;
    for &h in &accepted {
        p.b.tcp_close(now, h).unwrap();
    }
    assert!(p.run_until_cond(Duration::from_secs(5), |p| {
        p.a.tcp_state(held) == Ok(State::Closed) && p.a.tcp_resources().timewait == 2
    }));
    p.a.take_ready(&mut ready);
    let r = queued(&ready, held).expect("the held socket is queued");
    assert!(r.contains(Readiness::READABLE), "{ready:?}");
    let now_ready = p.a.readiness(SocketKey::Tcp(held));
    assert!(
        now_ready.contains(Readiness::READABLE | Readiness::RDHUP | Readiness::HUP),
        "{now_ready:?}"
    );
    assert_eq!(queued(&ready, closed), None, "{ready:?}");
}
