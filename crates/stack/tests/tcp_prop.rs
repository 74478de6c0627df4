//! Issue #3's property: for random seeds, random fault mixes (loss up to 20%, duplication,
//! reordering, corruption, delay) and random write/read patterns, every byte written
//! arrives exactly once and in order; never silent corruption, never a hang past the
//! timers; and afterwards nothing is left held.
//!
//! With loss at most 20% and `tcp_retries2` 15 a connection has no reason to fail, so
//! the only error allowed is `TimedOut` on a side whose counters show it spent its retries
//! (TCPAbortOnTimeout, and at least as many TCPTimeouts as the retry limit allows): a
//! reset, a refused connection or an early give-up fails the case (issue #10: a stack
//! that reset the connection on every fully duplicate segment failed a third of the cases
//! and the property, which accepted any error, still passed).
//!
//! The same property holds over IPv6 (issue #15: the same TCP code, the tuple's addresses
//! interned), between two dual-stack stacks, on the same fault mixes.
//!
//! Cases: `USTACK_TCP_PROP_CASES` (`.ci/run` sets thousands; the default here is 64, and
//! 32 over IPv6). Debugging: `TCP_PROP_DEBUG=1` prints how each case ended (virtual time,
//! both sides' `tcp_info`); `TCP_PROP_PCAP=FILE` records side A of the IPv4 run as pcap.

use core::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;

use proptest::prelude::*;
use ustack_dev::sim::{SimConfig, SimLinkConfig};
use ustack_obs::Counter;
use ustack_stack::tcp::State;
use ustack_stack::{Error, Stack};
use ustack_testkit::{B_IP, B_IP6, Pair};

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    delay_ms: u64,
    len: usize,
    /// Sizes of successive writes (cycled) and reads (cycled).
    writes: Vec<usize>,
    reads: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        0.0..0.20f64,
        prop_oneof![Just(0.0), 0.0..0.05f64],
        prop_oneof![Just(0.0), 0.0..0.10f64],
        prop_oneof![Just(0.0), 0.0..0.02f64],
        0u64..30,
        1usize..200_000,
        proptest::collection::vec(1usize..20_000, 1..8),
        proptest::collection::vec(1usize..20_000, 1..8),
    )
        .prop_map(
            |(seed, loss, dup, reorder, corrupt, delay_ms, len, writes, reads)| Case {
                seed,
                loss,
                dup,
                reorder,
                corrupt,
                delay_ms,
                len,
                writes,
                reads,
            },
        )
}

fn faults(c: &Case) -> SimConfig {
    SimConfig {
        loss: c.loss,
        duplicate: c.dup,
        reorder: c.reorder,
        corrupt: c.corrupt,
        delay: Duration::from_millis(c.delay_ms),
        jitter: Duration::from_millis(c.delay_ms / 4),
        reorder_delay: Duration::from_millis(c.delay_ms + 3),
        ..SimConfig::default()
    }
}

/// The retry limit the property relies on (Linux's default).
const RETRIES2: u64 = 15;

/// An error is allowed only as the end of a connection that spent its retries: `TimedOut`,
/// counted as TCPAbortOnTimeout, after at least as many retransmission timeouts as the
/// smaller retry limit (`tcp_syn_retries` while connecting, `tcp_retries2` after).
fn honest_timeout(side: &str, s: &Stack, e: &Error) -> Result<(), String> {
    let timeouts = s.mib().get(Counter::TcpExtTCPTimeouts);
    let aborts = s.mib().get(Counter::TcpExtTCPAbortOnTimeout);
    let limit = s.sysctl().tcp_syn_retries.min(s.sysctl().tcp_retries2);
    if *e != Error::TimedOut || aborts == 0 || timeouts <= limit {
        return Err(format!(
            "{side} failed with {e:?} (TCPTimeouts {timeouts}, TCPAbortOnTimeout {aborts}): \
             with loss <= 20% and tcp_retries2 {RETRIES2} the only allowed failure is \
             TimedOut after the retries were spent"
        ));
    }
    Ok(())
}

/// Run one case, over IPv6 if `v6`; Err(description) on a property violation.
fn run(c: &Case, v6: bool) -> Result<(), String> {
    let link = SimLinkConfig {
        seed: c.seed,
        a_to_b: faults(c),
        b_to_a: faults(c),
        ..SimLinkConfig::default()
    };
    let (mut p, server) = if v6 {
        let p = Pair::dual_stack(link);
        (p, SocketAddr::V6(SocketAddrV6::new(B_IP6, 80, 0, 0)))
    } else {
        (Pair::new(link), SocketAddr::V4(SocketAddrV4::new(B_IP, 80)))
    };
    for s in [&mut p.a, &mut p.b] {
        s.set_sysctl("net.ipv4.tcp_retries2", RETRIES2).unwrap();
        if v6 {
            // Over IPv6 every case must complete (a connection that cannot even open
            // must not pass as an honest timeout): SYNs get as many retries as data.
            s.set_sysctl("net.ipv4.tcp_syn_retries", RETRIES2).unwrap();
        }
    }
    if let Some(f) = std::env::var_os("TCP_PROP_PCAP")
        && !v6
    {
        p.record(Box::new(std::fs::File::create(f).unwrap()))
            .unwrap();
    }
    let data: Vec<u8> = (0..c.len)
        .map(|i| (i as u64).wrapping_mul(c.seed | 1).wrapping_shr(7) as u8)
        .collect();
    let l = p.b.tcp_listen(server, 16).unwrap();
    let a = p.a.tcp_connect(p.now, server).unwrap();
    let mut b = None;
    let (mut sent, mut wi, mut ri) = (0usize, 0usize, 0usize);
    let mut got: Vec<u8> = Vec::with_capacity(c.len);
    let mut a_closed = false;
    let mut eof = false;
    let mut a_error: Option<Error> = None;
    let mut b_error: Option<Error> = None;
    let mut buf = vec![0u8; 20_000];
    // Bounded in virtual time: a connection that stops making progress runs out of
    // retries (ETIMEDOUT) well before this; one that keeps making progress may take long:
    // at 20% loss with one-byte writes and reads, 24,062 bytes took 4.0 hours of virtual
    // time over IPv6 and 7.7 over IPv4 (its RTT estimate inflated to ~10 s, RTO ~80 s:
    // `a_lossy_byte_at_a_time_transfer_completes`), hence 48 hours.
    let deadline = p.now + Duration::from_secs(48 * 3600);
    loop {
        let now = p.now;
        if b.is_none() {
            b = match p.b.tcp_accept_addr(l) {
                Ok((_, peer)) if peer.is_ipv6() != v6 => {
                    return Err(format!("accepted {peer} over the other family"));
                }
                r => r.ok().map(|(h, _)| h),
            };
        }
        if a_error.is_none() && sent < data.len() {
            let w = c.writes[wi % c.writes.len()].min(data.len() - sent);
            match p.a.tcp_send(now, a, &data[sent..sent + w]) {
                Ok(n) => {
                    sent += n;
                    wi += 1;
                }
                Err(Error::WouldBlock) => {}
                Err(e) => a_error = Some(e),
            }
        }
        if sent == data.len()
            && !a_closed
            && a_error.is_none()
            && p.a.tcp_state(a) == Ok(State::Established)
        {
            p.a.tcp_shutdown(now, a, ustack_stack::Shutdown::Write)
                .unwrap();
            a_closed = true;
        }
        if let Some(bh) = b {
            while b_error.is_none() && !eof {
                let r = c.reads[ri % c.reads.len()];
                match p.b.tcp_recv(now, bh, &mut buf[..r]) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        ri += 1;
                    }
                    Err(Error::WouldBlock) => break,
                    Err(e) => b_error = Some(e),
                }
            }
        }
        // Exactly once, in order: what arrived so far is a prefix of what was sent.
        if got.len() > data.len() || got[..] != data[..got.len()] {
            let at = got
                .iter()
                .zip(&data)
                .position(|(x, y)| x != y)
                .unwrap_or(data.len());
            return Err(format!(
                "stream differs at byte {at} (got {} of {})",
                got.len(),
                data.len()
            ));
        }
        if eof {
            if got.len() != data.len() {
                return Err(format!("EOF after {} of {} bytes", got.len(), data.len()));
            }
            p.finish_recording();
            if std::env::var_os("TCP_PROP_DEBUG").is_some() {
                eprintln!("complete: {} bytes at {:?}", data.len(), p.now);
                eprintln!("A: {:?}", p.a.tcp_info(a));
                if let Some(bh) = b {
                    eprintln!("B: {:?}", p.b.tcp_info(bh));
                }
            }
            break;
        }
        if p.a.tcp_state(a).is_ok_and(|s| s == State::Closed)
            && a_error.is_none()
            && let Err(e) = p.a.tcp_recv(now, a, &mut buf)
        {
            // A's socket closed with an error it has reported through recv.
            a_error = Some(e);
        }
        if v6 && (a_error.is_some() || b_error.is_some()) {
            return Err(format!(
                "over IPv6: A {a_error:?} B {b_error:?}, {} of {} bytes",
                got.len(),
                data.len()
            ));
        }
        if a_error.is_some() || b_error.is_some() {
            if std::env::var_os("TCP_PROP_DEBUG").is_some() {
                eprintln!(
                    "error outcome: A {a_error:?} B {b_error:?} sent {sent} got {} of {}",
                    got.len(),
                    data.len()
                );
            }
            // Allowed only as a connection that gave up after its retries, and said so.
            if let Some(e) = &a_error {
                honest_timeout("A", &p.a, e)?;
            }
            if let Some(e) = &b_error {
                honest_timeout("B", &p.b, e)?;
            }
            break;
        }
        p.settle();
        match p.next_event() {
            Some(t) if t <= deadline => p.now = t,
            _ => {
                if std::env::var_os("TCP_PROP_DEBUG").is_some() {
                    eprintln!(
                        "now {:?} next {:?} a {:?} b {:?} deadline {:?}",
                        p.now,
                        p.next_event(),
                        p.a.poll_timeout(),
                        p.b.poll_timeout(),
                        deadline
                    );
                    eprintln!("A: {:#?}", p.a.tcp_info(a));
                    if let Some(bh) = b {
                        eprintln!("B: {:#?}", p.b.tcp_info(bh));
                    }
                }
                return Err(format!(
                    "hang: no event before the deadline; sent {sent}, got {}, A {:?}, B {:?}",
                    got.len(),
                    p.a.tcp_state(a),
                    b.map(|h| p.b.tcp_state(h))
                ));
            }
        }
    }
    // The family the case asked for carried the connection (IPv6: no TCP over IPv4).
    let v4_segs = p.a.mib().get(Counter::IpOutRequests);
    let v6_segs = p.a.mib().get(Counter::Ip6OutRequests);
    if v6 && (v4_segs != 0 || v6_segs == 0) || !v6 && v4_segs == 0 {
        return Err(format!(
            "IPv6 {v6}: A sent {v4_segs} IPv4, {v6_segs} IPv6 datagrams"
        ));
    }
    // Close everything and let every timer run out: nothing may be left held.
    let now = p.now;
    let _ = p.a.tcp_close(now, a);
    if let Some(bh) = b {
        let _ = p.b.tcp_close(now, bh);
    }
    p.run_for(Duration::from_secs(4 * 3600));
    for (name, s) in [("A", &p.a), ("B", &p.b)] {
        let r = s.tcp_resources();
        if (r.connections, r.timewait, r.requests, r.buffer_bytes) != (0, 0, 0, 0) {
            return Err(format!("{name} still holds {r:?} after every timer ran"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("USTACK_TCP_PROP_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_byte_arrives_once_in_order_or_the_connection_says_why(c in case()) {
        if let Err(e) = run(&c, false) {
            prop_assert!(false, "{e}\n{c:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("USTACK_TCP_PROP_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(32),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn over_ipv6_every_byte_arrives_once_in_order_or_the_connection_says_why(c in case()) {
        if let Err(e) = run(&c, true) {
            prop_assert!(false, "{e}\n{c:?}");
        }
    }
}

/// A case proptest found (`.ci/run`, 2026-11-26): 20% loss, one-byte writes and reads,
/// 24,062 bytes. Every byte arrives, over both families, but slowly (hours of virtual
/// time: the RTT estimate grows to ~10 s), past the 4-hour bound the property had then.
#[test]
fn a_lossy_byte_at_a_time_transfer_completes() {
    let c = Case {
        seed: 0,
        loss: 0.199_518_055_512_700_33,
        dup: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
        delay_ms: 0,
        len: 24_062,
        writes: vec![1],
        reads: vec![1],
    };
    for v6 in [true, false] {
        assert_eq!(run(&c, v6), Ok(()), "over IPv6: {v6}");
    }
}
