//! One TCP stream over a shm link, both ends on threads of their own: every byte arrives,
//! in order, and (both ends skipping checksums, as the bench runs) the receiver takes the
//! payload of its long frames straight from the link's slots into the receive queue
//! (`Device::recv_head`, `Stack::receive_direct`: one copy instead of two). With
//! checksums verified the same stream takes the copying path and arrives all the same.
//! On the sending side, long segments are written into slots the link lends, their
//! payload straight from the send buffer (`Device::send_with`,
//! `Stack::poll_transmit_lent`), every byte at its offset, including when the ring is full
//! and segments wait in the stack's queue.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::shm::{ShmConfig, ShmLink, ShmStats};
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_runtime::shard::ShardStats;
use ustack_stack::DropReason;
use ustack_stack::EthernetAddress;

const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5001);
const SERVER6: SocketAddrV6 = SocketAddrV6::new(ip6(1), 5001, 0, 0);

/// Host `n`'s IPv6 address.
const fn ip6(n: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n)
}

/// Host `n`'s runtime builder: 10.0.0.n, and 2001:db8::n for an IPv6 stream (without
/// duplicate address detection, so that it starts at once).
fn builder(n: u8, ipv6: bool, offload: bool) -> RuntimeBuilder {
    let b = RuntimeBuilder::new()
        .ipv4(Ipv4Addr::new(10, 0, 0, n), 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, n]))
        .seed(u64::from(n))
        .checksum_offload(offload);
    if ipv6 {
        b.ipv6(ip6(u16::from(n)), 64)
            .sysctl("net.ipv6.conf.default.accept_dad", 0)
    } else {
        b
    }
}
const BYTES: usize = 24 << 20;

/// Byte `i` of the stream: not periodic in any power of two, so a piece copied from the
/// wrong offset shows.
fn byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i >> 16) as u8
}

struct Received {
    bytes: usize,
    first_bad: Option<usize>,
    shard: ShardStats,
    link: ShmStats,
    direct_misses: u64,
    /// The sender's loop and link counters, and its stale split segments.
    tx_shard: ShardStats,
    tx_link: ShmStats,
    tx_stale: u64,
    /// Slots the server's port kept when its reader had paused (see [`Reader::pause`]),
    /// and after the stream (`ShmPort::rx_kept_now`).
    kept_at_pause: usize,
    kept_at_end: usize,
    /// Frames the server's stack copied (direct, not kept) while its reader paused.
    copied_in_pause: u64,
    /// The server stack's lent-frame counters: segments held in a lent frame, frames
    /// released, reads refused (`Stack::lent_frame_stats`).
    lent: (u64, u64, u64),
}

/// How the server reads.
#[derive(Clone, Copy)]
struct Reader {
    /// Read sizes, taken in turn.
    reads: &'static [usize],
    /// `ShmPort::set_rx_keep` for the server's port (`None`: the default).
    keep: Option<usize>,
    /// After the first read, run the loop without reading until the port keeps this many
    /// slots, then 50 rounds more (the server's receive buffer 4 MiB, more than the ring).
    pause: Option<usize>,
}

impl Reader {
    const PLAIN: Reader = Reader {
        reads: &[256 << 10],
        keep: None,
        pause: None,
    };
}

/// Streams [`BYTES`] from the client to the server over a shm link of `config`, both
/// stacks skipping checksums if `offload`; what the server read and counted.
fn stream(config: ShmConfig, offload: bool) -> Received {
    stream_lending(config, offload, true)
}

/// [`stream`], the client's port lending its slots (`ShmPort::set_tx_lend`) or not.
fn stream_lending(config: ShmConfig, offload: bool, lend: bool) -> Received {
    stream_family(config, offload, lend, false)
}

/// [`stream_lending`] between IPv4 addresses, or IPv6 ones with `ipv6`.
fn stream_family(config: ShmConfig, offload: bool, lend: bool, ipv6: bool) -> Received {
    stream_read(config, (offload, lend, ipv6), Reader::PLAIN)
}

/// [`stream_family`] with the server reading as `reader` says.
fn stream_read(
    config: ShmConfig,
    (offload, lend, ipv6): (bool, bool, bool),
    reader: Reader,
) -> Received {
    let to = if ipv6 {
        SocketAddr::V6(SERVER6)
    } else {
        SocketAddr::V4(SERVER)
    };
    let (mut a, mut b) = ShmLink::pair(&config).unwrap();
    let (mut a, mut b) = (a.remove(0), b.remove(0));
    b.set_tx_lend(lend);
    if let Some(keep) = reader.keep {
        a.set_rx_keep(keep);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let server = std::thread::spawn(move || {
        let mut b = builder(1, ipv6, offload);
        if reader.pause.is_some() {
            // A window larger than the ring, so that the ring's bound is what stops.
            b = b.sysctl("net.ipv4.tcp_rmem.default", 4 << 20);
        }
        let mut rt = b.build(a).unwrap();
        let listener = TcpListener::bind(&mut rt, to, 16).unwrap();
        let stream = loop {
            match listener.accept(&mut rt) {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    rt.run_once(Some(Duration::from_millis(10))).unwrap();
                }
                Err(e) => panic!("accept: {e}"),
            }
            assert!(std::time::Instant::now() < deadline, "no connection");
        };
        let (mut kept_at_pause, mut copied_in_pause) = (0, 0);
        let mut buf = vec![0u8; 256 << 10];
        let (mut bytes, mut first_bad) = (0, None);
        for i in 0.. {
            let want = reader.reads[i % reader.reads.len()];
            match stream.read(&mut rt, &mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    if first_bad.is_none()
                        && let Some(k) = (0..n).find(|&k| buf[k] != byte(bytes + k))
                    {
                        first_bad = Some(bytes + k);
                    }
                    // The first bytes read (the segment that completed the handshake
                    // was copied: slots are kept only behind an empty queue), the
                    // reader pauses.
                    if let Some(slots) = reader.pause.filter(|_| bytes == 0) {
                        while rt.device().rx_kept_now() < slots {
                            rt.run_once(Some(Duration::from_millis(10))).unwrap();
                            assert!(
                                std::time::Instant::now() < deadline,
                                "{} slots kept",
                                rt.device().rx_kept_now()
                            );
                        }
                        let direct = rt.shard_stats().rx_direct - rt.device().stats().rx_kept;
                        for _ in 0..50 {
                            rt.run_once(Some(Duration::from_millis(2))).unwrap();
                        }
                        kept_at_pause = rt.device().rx_kept_now();
                        copied_in_pause =
                            rt.shard_stats().rx_direct - rt.device().stats().rx_kept - direct;
                    }
                    bytes += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    rt.run_once(Some(Duration::from_millis(10))).unwrap();
                }
                Err(e) => panic!("read: {e}"),
            }
            assert!(std::time::Instant::now() < deadline, "{bytes} bytes read");
        }
        stream.close(&mut rt).unwrap();
        for _ in 0..10 {
            rt.run_once(Some(Duration::from_millis(1))).unwrap();
        }
        Received {
            bytes,
            first_bad,
            shard: *rt.shard_stats(),
            link: rt.device().stats().clone(),
            direct_misses: rt.stack().mib().drops(DropReason::TcpDirectMiss),
            tx_shard: ShardStats::default(),
            tx_link: ShmStats::default(),
            tx_stale: 0,
            kept_at_pause,
            kept_at_end: rt.device().rx_kept_now(),
            copied_in_pause,
            lent: rt.stack().lent_frame_stats(),
        }
    });
    let mut rt = builder(2, ipv6, offload).build(b).unwrap();
    let c = TcpStream::connect(&mut rt, to).unwrap();
    let data: Vec<u8> = (0..BYTES).map(byte).collect();
    // Not `write_all`: it waits as long as TCP keeps retrying (15 minutes of backoff with
    // a peer that stopped reading), past the test's bound.
    let mut sent = 0;
    while sent < BYTES {
        match c.write(&mut rt, &data[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                rt.run_once(Some(Duration::from_millis(10))).unwrap();
            }
            Err(e) => panic!("write: {e}"),
        }
        assert!(std::time::Instant::now() < deadline, "{sent} bytes written");
    }
    c.close(&mut rt).unwrap();
    while !server.is_finished() {
        rt.run_once(Some(Duration::from_millis(5))).unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not finish"
        );
    }
    Received {
        tx_shard: *rt.shard_stats(),
        tx_link: rt.device().stats().clone(),
        tx_stale: rt.stack().mib().drops(DropReason::TcpTxStale),
        ..server.join().unwrap()
    }
}

/// The bench's link: 64 KiB super-segments in 16 slots.
fn super_segments() -> ShmConfig {
    ShmConfig {
        ring_size: 16,
        slot_size: 65_600,
        mtu: 65_535,
        ..ShmConfig::default()
    }
}

/// Nearly every data frame of a stream over IPv4 or IPv6 (`ipv6`) goes the direct way
/// (not the handshake, nor a last segment carrying the FIN: the device held it, the stack
/// took it whole), the sender writing them into lent slots, and every byte arrives at its
/// offset.
fn takes_the_payload_from_the_slot(ipv6: bool) {
    for config in [super_segments(), ShmConfig::default()] {
        let r = stream_family(config, true, true, ipv6);
        assert_eq!(r.bytes, BYTES, "{config:?}");
        assert_eq!(r.first_bad, None, "{config:?}: the first wrong byte");
        assert!(r.link.rx_held > 0, "{config:?}: {:?}", r.link);
        assert!(
            r.shard.rx_direct <= r.link.rx_held,
            "{config:?}: {:?}",
            r.link
        );
        let full = BYTES as u64 / config.mtu as u64;
        assert!(
            r.shard.rx_direct >= full * 9 / 10,
            "{config:?}: {} direct frames for about {full} full ones",
            r.shard.rx_direct
        );
        // In a lent slot or sent from the held slot it was written into at `send()`.
        let lent = r.tx_shard.tx_lent + r.tx_shard.tx_in_place;
        assert!(lent >= full * 9 / 10, "{:?}", r.tx_shard);
        assert_eq!(r.direct_misses, 0);
    }
}

#[test]
fn stream_over_shm_takes_the_payload_from_the_slot_and_delivers_every_byte() {
    takes_the_payload_from_the_slot(false);
}

/// The same over IPv6: the receive side's direct path and the sender's lent slots
/// serve IPv6 segments too.
#[test]
fn ipv6_stream_over_shm_takes_the_payload_from_the_slot_and_delivers_every_byte() {
    takes_the_payload_from_the_slot(true);
}

#[test]
fn stream_over_shm_with_checksums_copies_whole_frames_and_delivers_every_byte() {
    let r = stream(super_segments(), false);
    assert_eq!(r.bytes, BYTES);
    assert_eq!(r.first_bad, None, "the first wrong byte");
    // Frames were held past their headers, but the stack verifies the checksum over the
    // payload, so it took every one whole.
    assert!(r.link.rx_held > 0, "{:?}", r.link);
    assert_eq!(r.shard.rx_direct, 0);
}

/// The sender writes nearly every full segment into a slot the link lends, the headers
/// and then the payload from the send buffer, and every byte arrives at its offset: with
/// 64 KiB segments (the bench's link) and 1,500-byte ones.
#[test]
fn stream_over_shm_writes_segments_into_lent_slots_and_delivers_every_byte() {
    for config in [super_segments(), ShmConfig::default()] {
        let r = stream(config, true);
        assert_eq!(r.bytes, BYTES, "{config:?}");
        assert_eq!(r.first_bad, None, "{config:?}: the first wrong byte");
        let full = BYTES as u64 / config.mtu as u64;
        // Written into a lent slot from the send buffer, or sent from the held slot the
        // application's bytes were written into at `send()` (`tests/shm_held.rs`).
        let lent = r.tx_shard.tx_lent + r.tx_shard.tx_in_place;
        assert!(
            lent >= full * 9 / 10,
            "{config:?}: {lent} segments written in place for about {full} full ones"
        );
        // The link counts the same frames, and every slot it lent was filled and posted.
        assert_eq!(r.tx_link.tx_lent, r.tx_shard.tx_lent, "{:?}", r.tx_link);
        assert_eq!(r.tx_link.tx_unfilled, 0, "{:?}", r.tx_link);
        assert_eq!(r.tx_stale, 0);
    }
}

/// A ring of two slots is full most of the time: segments wait split in the stack's
/// queue (headers, payload left in the send buffer) until a slot comes back, and still
/// every byte arrives at its offset, through lent slots.
#[test]
fn stream_over_a_full_ring_waits_split_and_delivers_every_byte() {
    let config = ShmConfig {
        ring_size: 2,
        ..super_segments()
    };
    let r = stream(config, true);
    assert_eq!(r.bytes, BYTES);
    assert_eq!(r.first_bad, None, "the first wrong byte");
    assert!(
        r.tx_shard.tx_held > 0,
        "the ring was never full: {:?}",
        r.tx_shard
    );
    let full = BYTES as u64 / config.mtu as u64;
    let lent = r.tx_shard.tx_lent + r.tx_shard.tx_in_place;
    assert!(lent >= full * 9 / 10, "{:?}", r.tx_shard);
    assert_eq!(r.tx_link.tx_unfilled, 0, "{:?}", r.tx_link);
}

/// A port that does not lend: the stack builds whole frames and the link copies them in,
/// as before; every byte arrives.
#[test]
fn stream_over_a_port_that_does_not_lend_copies_whole_frames() {
    let r = stream_lending(super_segments(), true, false);
    assert_eq!(r.bytes, BYTES);
    assert_eq!(r.first_bad, None, "the first wrong byte");
    assert_eq!(r.tx_shard.tx_lent, 0);
    assert_eq!(r.tx_link.tx_lent, 0);
    assert!(r.tx_link.tx_frames as usize >= BYTES / 65_535);
}

/// The receive queue holds the slots of in-order segments instead of copies, and the
/// application's reads copy from them: with reads of every size (a byte, pieces of a
/// segment, several segments at once), every byte arrives at its offset, nearly every
/// full segment is held in its slot, and every slot held is given back.
#[test]
fn stream_over_shm_holds_slots_until_read_and_delivers_every_byte() {
    let reader = Reader {
        reads: &[256 << 10, 1, 40_000, 65_483, 7, 200_001, 65_536],
        ..Reader::PLAIN
    };
    for ipv6 in [false, true] {
        let r = stream_read(super_segments(), (true, true, ipv6), reader);
        assert_eq!(r.bytes, BYTES, "ipv6 {ipv6}");
        assert_eq!(r.first_bad, None, "ipv6 {ipv6}: the first wrong byte");
        let full = BYTES as u64 / 65_535;
        assert!(
            r.link.rx_kept >= full * 9 / 10,
            "ipv6 {ipv6}: {} slots kept for about {full} full segments: {:?}",
            r.link.rx_kept,
            r.link
        );
        // The stack asked the port to keep a frame only for a queue that could hold it,
        // held a segment in every slot kept, and gave every one back.
        let (held, released, refused) = r.lent;
        assert_eq!(held, r.link.rx_kept, "ipv6 {ipv6}: {:?}", r.link);
        assert_eq!(released, held, "ipv6 {ipv6}");
        assert_eq!(r.link.rx_kept_released, r.link.rx_kept, "{:?}", r.link);
        assert_eq!((refused, r.link.bad_release, r.kept_at_end), (0, 0, 0));
        assert_eq!(r.direct_misses, 0);
    }
}

/// A reader that stops reading: its receive queue keeps slots up to the port's bound and
/// no more. With the default bound (three quarters of the ring) the frames after that
/// are copied into the queue, up to the window, and the link keeps turning; with the
/// whole ring kept the sender has no slot left and the link stops. Either way nothing is
/// lost: once the reader reads, the stream resumes and every byte arrives at its offset,
/// every slot given back.
#[test]
fn a_reader_that_does_not_read_holds_at_most_its_slots_and_resumes_without_loss() {
    for (keep, held) in [(None, 12), (Some(16), 16)] {
        let reader = Reader {
            keep,
            pause: Some(held),
            ..Reader::PLAIN
        };
        let r = stream_read(super_segments(), (true, true, false), reader);
        assert_eq!(r.kept_at_pause, held, "keep {keep:?}: {:?}", r.link);
        if keep.is_none() {
            // The bound reached, later segments were copied.
            assert!(r.copied_in_pause > 0, "{:?}", r.link);
        }
        assert_eq!(r.bytes, BYTES, "keep {keep:?}");
        assert_eq!(r.first_bad, None, "keep {keep:?}: the first wrong byte");
        assert_eq!(r.link.rx_kept_released, r.link.rx_kept, "{:?}", r.link);
        assert_eq!(r.kept_at_end, 0);
        assert_eq!(r.direct_misses, 0);
    }
}
