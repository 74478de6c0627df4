//! One TCP stream over a shm link, both ends on threads of their own: every byte arrives,
//! in order, and (both ends skipping checksums, as the bench runs) the receiver takes the
//! payload of its long frames straight from the link's slots into the receive queue
//! (`Device::recv_head`, `Stack::receive_direct`: one copy instead of two). With
//! checksums verified the same stream takes the copying path and arrives all the same.

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use std::io::ErrorKind;

use ustack_dev::shm::{ShmConfig, ShmLink, ShmStats};
use ustack_runtime::api::{TcpListener, TcpStream};
use ustack_runtime::runtime::RuntimeBuilder;
use ustack_runtime::shard::ShardStats;
use ustack_stack::DropReason;
use ustack_stack::EthernetAddress;

const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5001);
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
}

/// Streams [`BYTES`] from the client to the server over a shm link of `config`, both
/// stacks skipping checksums if `offload`; what the server read and counted.
fn stream(config: ShmConfig, offload: bool) -> Received {
    let (mut a, mut b) = ShmLink::pair(&config).unwrap();
    let (a, b) = (a.remove(0), b.remove(0));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let server = std::thread::spawn(move || {
        let mut rt = RuntimeBuilder::new()
            .ipv4(*SERVER.ip(), 24)
            .mac(EthernetAddress([2, 0, 0, 0, 0, 1]))
            .seed(1)
            .checksum_offload(offload)
            .build(a)
            .unwrap();
        let listener = TcpListener::bind(&mut rt, SERVER, 16).unwrap();
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
        let mut buf = vec![0u8; 256 << 10];
        let (mut bytes, mut first_bad) = (0, None);
        loop {
            match stream.read(&mut rt, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if first_bad.is_none()
                        && let Some(k) = (0..n).find(|&k| buf[k] != byte(bytes + k))
                    {
                        first_bad = Some(bytes + k);
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
        }
    });
    let mut rt = RuntimeBuilder::new()
        .ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
        .mac(EthernetAddress([2, 0, 0, 0, 0, 2]))
        .seed(2)
        .checksum_offload(offload)
        .build(b)
        .unwrap();
    let c = TcpStream::connect(&mut rt, SERVER).unwrap();
    let data: Vec<u8> = (0..BYTES).map(byte).collect();
    c.write_all(&mut rt, &data).unwrap();
    c.close(&mut rt).unwrap();
    while !server.is_finished() {
        rt.run_once(Some(Duration::from_millis(5))).unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not finish"
        );
    }
    server.join().unwrap()
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

#[test]
fn stream_over_shm_takes_the_payload_from_the_slot_and_delivers_every_byte() {
    for config in [super_segments(), ShmConfig::default()] {
        let r = stream(config, true);
        assert_eq!(r.bytes, BYTES, "{config:?}");
        assert_eq!(r.first_bad, None, "{config:?}: the first wrong byte");
        // Nearly every data frame went the direct way (not the handshake, nor a last
        // segment carrying the FIN: the device held it, the stack took it whole).
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
        assert_eq!(r.direct_misses, 0);
    }
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
