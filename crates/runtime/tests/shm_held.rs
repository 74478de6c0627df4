//! A stream whose sender writes the application's bytes straight into transmit slots it
//! holds (`Stack::set_tx_held`, `Device::tx_hold`): both ends' shards polled in turn on
//! one thread with a virtual clock, as `examples/shm_stream_count.rs` does, the receiver
//! optionally behind a lossy relay (`Faulty`), so that segments sent from held slots are
//! lost and retransmitted from them.

use core::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use core::time::Duration;

use ustack_dev::fault::{FaultConfig, Faulty};
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPort};
use ustack_obs::Counter;
use ustack_runtime::shard::Shard;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Stack};

const BYTES: usize = 24 << 20;

fn stack(n: u8) -> Stack {
    let ip = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 0, n), 24);
    let mut c = Config::ethernet(EthernetAddress([2, 0, 0, 0, 0, n]), ip);
    for name in ["net.ipv4.tcp_wmem.default", "net.ipv4.tcp_rmem.default"] {
        c.sysctl.set(name, 4 << 20).expect("a known sysctl");
    }
    c.seed = Some(u64::from(n));
    c.mtu = 65_535;
    c.checksum_offload = true;
    Stack::new(c)
}

fn byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i >> 16) as u8
}

/// What a stream did: the bytes read, the first wrong one, the sender's counters.
struct Run {
    got: usize,
    first_bad: Option<usize>,
    /// `Stack::held_slot_stats`: pieces written, sent in place, over pieces copied, refused.
    held: (u64, u64, u64, u64),
    in_place: u64,
    retrans: u64,
    lost: u64,
    /// Slots the sender's port still holds at the end, those in its stack's reserve (not
    /// written), and held slots the port counted taken and released.
    held_at_end: usize,
    reserve: usize,
    released: u64,
    taken: u64,
}

/// Streams [`BYTES`] from a sender holding its slots to a receiver whose frames cross
/// `ingress` (a `Faulty` relay on the receiver's port), and closes.
fn stream(ingress: FaultConfig) -> Run {
    let config = ShmConfig {
        ring_size: 16,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    };
    let (mut a, mut b) = ShmLink::pair(&config).expect("a shm link");
    let (a, b): (ShmPort, ShmPort) = (a.remove(0), b.remove(0));
    let a = Faulty::new(a, 7, FaultConfig::default(), ingress);
    let mut server = Shard::new(0, stack(1), a);
    let mut client = Shard::new(0, stack(2), b);
    assert!(client.hold_tx_slots(), "the client holds transmit slots");
    let to = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5001));
    let l = server.stack_mut().tcp_listen(to, 4).expect("listen");
    let mut now = Instant::from_secs(1);
    let c = client.stack_mut().tcp_connect(now, to).expect("connect");
    let data: Vec<u8> = (0..BYTES).map(byte).collect();
    let mut buf = vec![0u8; 256 << 10];
    let (mut sent, mut got, mut s, mut first_bad, mut closed) = (0, 0, None, None, false);
    let mut rounds = 0u64;
    while got < BYTES || rounds < 2_000 {
        rounds += 1;
        assert!(rounds < 5_000_000, "stuck at {got} bytes");
        now += Duration::from_micros(100);
        while sent < BYTES {
            let n = (BYTES - sent).min(256 << 10);
            match client.stack_mut().tcp_send(now, c, &data[sent..sent + n]) {
                Ok(k @ 1..) => sent += k,
                _ => break,
            }
        }
        if sent == BYTES && !closed {
            client.stack_mut().tcp_close(now, c).expect("close");
            closed = true;
        }
        let budget = client.budget();
        client.poll_once(now, budget);
        let budget = server.budget();
        server.poll_once(now, budget);
        if s.is_none() {
            s = server.stack_mut().tcp_accept_addr(l).ok().map(|(h, _)| h);
        }
        if let Some(s) = s {
            while let Ok(n @ 1..) = server.stack_mut().tcp_recv(now, s, &mut buf) {
                if first_bad.is_none()
                    && let Some(k) = (0..n).find(|&k| buf[k] != byte(got + k))
                {
                    first_bad = Some(got + k);
                }
                got += n;
            }
        }
    }
    let link = client.device().stats().clone();
    Run {
        got,
        first_bad,
        held: client.stack().held_slot_stats(),
        in_place: client.stats().tx_in_place,
        retrans: client.stack().mib().get(Counter::TcpRetransSegs),
        lost: server.device().ingress().lost,
        held_at_end: client.device().tx_held_now(),
        reserve: client.stack().tx_held_reserve(),
        released: link.tx_held_released,
        taken: link.tx_held,
    }
}

/// Every slot the sender's port let it hold went back, but those in its stack's reserve.
fn assert_slots_back(r: &Run) {
    assert_eq!(
        r.held_at_end, r.reserve,
        "slots held at the end beyond the reserve"
    );
    assert_eq!(
        r.released + r.reserve as u64,
        r.taken,
        "every written held slot released"
    );
}

/// Nearly every segment of a stream leaves from the slot its bytes were written into at
/// `send()`, every byte arrives in order, and every slot the sender held is given back
/// once its bytes are acknowledged.
#[test]
fn a_held_slot_stream_sends_segments_in_place_and_delivers_every_byte() {
    let r = stream(FaultConfig::default());
    assert_eq!(r.got, BYTES);
    assert_eq!(r.first_bad, None, "the first wrong byte");
    let full = (BYTES / 65_483) as u64;
    let (written, in_place, _copied, errors) = r.held;
    assert!(written >= full * 9 / 10, "{:?} for {full} segments", r.held);
    assert!(
        in_place >= full * 9 / 10,
        "{:?} for {full} segments",
        r.held
    );
    assert_eq!(r.in_place, in_place, "posted in place");
    assert_eq!(errors, 0);
    assert_slots_back(&r);
}

/// Frames lost on the way (2% of what reaches the receiver): the segments sent from held
/// slots are retransmitted from the bytes kept there (read back through the held reader
/// and copied into a free slot: a piece goes in place once only, its slot may still be
/// with the peer), and the stream still arrives byte for byte; the slots all go back.
#[test]
fn a_held_slot_stream_survives_loss_and_retransmission_byte_for_byte() {
    let r = stream(FaultConfig {
        loss: 0.02,
        ..FaultConfig::default()
    });
    assert_eq!(r.got, BYTES);
    assert_eq!(r.first_bad, None, "the first wrong byte");
    assert!(
        r.lost > 0 && r.retrans > 0,
        "lost {} retrans {}",
        r.lost,
        r.retrans
    );
    let (written, in_place, copied, errors) = r.held;
    assert!(written > 0 && in_place > 0, "{:?}", r.held);
    assert!(copied > 0, "no retransmission over pieces: {:?}", r.held);
    assert_eq!(errors, 0);
    assert_slots_back(&r);
}
