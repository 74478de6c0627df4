//! The `shm` link gives everything back: once both sides are dropped, the region is
//! unmapped and every descriptor (memfd, eventfds) closed.
//!
//! Alone in its own test binary, so that no other test opens or closes descriptors in this
//! process while it counts them.

use std::fs;

use ustack_dev::Device;
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_obs::time::Instant;

/// Mappings of this link's memfd, from /proc/self/maps.
fn mappings(link_id: u64) -> usize {
    let name = format!("ustack-shm-{link_id:016x}");
    fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&name))
        .count()
}

/// Open descriptors of this process: (this link's memfds, eventfds).
fn descriptors(link_id: u64) -> (usize, usize) {
    let name = format!("ustack-shm-{link_id:016x}");
    let (mut memfds, mut eventfds) = (0, 0);
    for entry in fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(target) = fs::read_link(entry.unwrap().path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        memfds += usize::from(target.contains(&name));
        eventfds += usize::from(target == "anon_inode:[eventfd]");
    }
    (memfds, eventfds)
}

#[test]
fn memory_and_descriptors_are_released_when_both_sides_drop() {
    let (_, eventfds_before) = descriptors(0);
    let cfg = ShmConfig {
        queue_pairs: 4,
        ..ShmConfig::default()
    };
    let (mut a, peer) = ShmLink::create(&cfg).unwrap();
    let id = peer.link_id();
    assert_eq!(mappings(id), 1);
    // Side A's doorbells and side B's copies.
    assert_eq!(descriptors(id), (1, eventfds_before + 16));
    let mut b = peer.attach().unwrap();
    assert_eq!(mappings(id), 2, "each side maps the region");
    assert_eq!(
        descriptors(id).0,
        0,
        "the memfd is closed once both sides have mapped it"
    );
    for (pa, pb) in a.iter_mut().zip(b.iter_mut()) {
        assert!(pa.send(Instant::ZERO, b"frame"));
        let mut buf = [0u8; 16];
        assert_eq!(pb.recv(Instant::ZERO, &mut buf), Some(5));
    }
    drop(a);
    assert_eq!(mappings(id), 1, "side B's mapping stays while B lives");
    assert!(
        b[3].send(Instant::ZERO, b"into the void"),
        "sending to a departed peer is fine"
    );
    drop(b);
    assert_eq!(mappings(id), 0);
    assert_eq!(descriptors(id), (0, eventfds_before));

    // A peer descriptor that is never attached releases its share too.
    let (a, peer) = ShmLink::create(&ShmConfig::default()).unwrap();
    let id = peer.link_id();
    drop(peer);
    drop(a);
    assert_eq!(mappings(id), 0);
    assert_eq!(descriptors(id), (0, eventfds_before));
}
