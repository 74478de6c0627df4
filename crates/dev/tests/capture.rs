//! The pcap `Capture` wrapper: what it writes parses back as pcap, with the frames in order
//! and their timestamps; it never changes the traffic, even when writing fails.

use std::io::{self, Write};
use std::time::Duration;

use ustack_dev::capture::{Capture, Tap, TapSwitch};
use ustack_dev::shm::{ShmConfig, ShmLink};
use ustack_dev::sim::{Side, SimConfig, SimLink, SimLinkConfig};
use ustack_dev::{Device, Medium};
use ustack_obs::time::Instant;

/// One parsed pcap record: timestamp (seconds, microseconds), original length, data.
#[derive(Debug, PartialEq, Eq)]
struct Record {
    ts_sec: u32,
    ts_usec: u32,
    orig_len: u32,
    data: Vec<u8>,
}

/// Parse a classic pcap stream (either byte order, microsecond magic). Returns the link
/// type and the records; panics (failing the test) on anything malformed.
fn parse_pcap(bytes: &[u8]) -> (u32, Vec<Record>) {
    assert!(bytes.len() >= 24, "no global header");
    let magic_le = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let le = match magic_le {
        0xa1b2_c3d4 => true,
        0xd4c3_b2a1 => false,
        m => panic!("bad magic {m:#x}"),
    };
    let u16_at = |b: &[u8], i: usize| {
        let v = [b[i], b[i + 1]];
        if le {
            u16::from_le_bytes(v)
        } else {
            u16::from_be_bytes(v)
        }
    };
    let u32_at = |b: &[u8], i: usize| {
        let v = b[i..i + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(v)
        } else {
            u32::from_be_bytes(v)
        }
    };
    assert_eq!((u16_at(bytes, 4), u16_at(bytes, 6)), (2, 4), "version");
    let snaplen = u32_at(bytes, 16);
    let linktype = u32_at(bytes, 20);
    let mut records = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        assert!(bytes.len() - at >= 16, "truncated record header at {at}");
        let ts_sec = u32_at(bytes, at);
        let ts_usec = u32_at(bytes, at + 4);
        let incl_len = u32_at(bytes, at + 8) as usize;
        let orig_len = u32_at(bytes, at + 12);
        assert!(ts_usec < 1_000_000, "microseconds out of range");
        assert!(incl_len as u32 <= snaplen && incl_len as u32 <= orig_len);
        at += 16;
        assert!(
            bytes.len() - at >= incl_len,
            "truncated record data at {at}"
        );
        records.push(Record {
            ts_sec,
            ts_usec,
            orig_len,
            data: bytes[at..at + incl_len].to_vec(),
        });
        at += incl_len;
    }
    (linktype, records)
}

fn frame(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i as u8)).collect()
}

fn link(medium: Medium) -> SimLink {
    SimLink::new(SimLinkConfig {
        seed: 1,
        a_to_b: SimConfig::default(),
        b_to_a: SimConfig {
            delay: Duration::from_millis(3),
            ..SimConfig::default()
        },
        medium,
        mtu: 1500,
    })
}

fn record(t: Instant, data: Vec<u8>) -> Record {
    let d = t.since_epoch();
    Record {
        ts_sec: d.as_secs() as u32,
        ts_usec: d.subsec_micros(),
        orig_len: data.len() as u32,
        data,
    }
}

#[test]
fn frames_in_and_out_are_written_in_order_with_timestamps() {
    let mut link = link(Medium::Ethernet);
    // B sends two frames towards A before A's capture starts; they arrive 3 ms later.
    let t0 = Instant::from_micros(1_000_250);
    assert!(link.send(t0, Side::B, &frame(0xb0, 60)));
    assert!(link.send(t0 + Duration::from_micros(10), Side::B, &frame(0xb1, 1514)));

    let mut port = Capture::new(link.port(Side::A), Vec::new()).unwrap();
    assert_eq!(port.caps().medium, Medium::Ethernet);
    let t1 = Instant::from_micros(1_000_500);
    assert!(port.send(t1, &frame(0xa0, 100)));
    let mut buf = [0u8; 1514];
    assert_eq!(
        port.recv(t1, &mut buf),
        None,
        "nothing has arrived yet: nothing written"
    );
    let arrive = t0 + Duration::from_millis(3);
    assert_eq!(port.poll_at(), Some(arrive));
    assert_eq!(port.recv(arrive, &mut buf), Some(60));
    let t2 = Instant::from_secs(7) + Duration::from_nanos(999_999_999);
    assert_eq!(port.recv(t2, &mut buf), Some(1514));
    assert!(port.send(t2, &frame(0xa1, 42)));
    assert!(
        !port.send(t2, &frame(0xa2, 1515)),
        "too big: refused, so not captured"
    );
    assert_eq!((port.packets_written(), port.write_errors()), (4, 0));

    let (_device, writer) = port.into_parts();
    let (linktype, records) = parse_pcap(&writer.into_inner());
    assert_eq!(linktype, 1, "LINKTYPE_ETHERNET");
    assert_eq!(
        records,
        [
            record(t1, frame(0xa0, 100)),
            record(arrive, frame(0xb0, 60)),
            record(t2, frame(0xb1, 1514)),
            record(t2, frame(0xa1, 42)),
        ]
    );
    assert_eq!((records[2].ts_sec, records[2].ts_usec), (7, 999_999));

    // The captured frames went through: B receives what A sent.
    let mut got = Vec::new();
    while let Some(n) = link.recv(t2, Side::B, &mut buf) {
        got.push(buf[..n].to_vec());
    }
    assert_eq!(got, [frame(0xa0, 100), frame(0xa1, 42)]);
    assert_eq!(link.stats(Side::A).too_big, 1);
}

#[test]
fn ip_medium_is_written_as_linktype_raw() {
    let mut link = link(Medium::Ip);
    let mut port = Capture::new(link.port(Side::A), Vec::new()).unwrap();
    let packet = frame(0x45, 1500);
    assert!(port.send(Instant::from_millis(5), &packet));
    let (_, writer) = port.into_parts();
    let (linktype, records) = parse_pcap(&writer.into_inner());
    assert_eq!(linktype, 101, "LINKTYPE_RAW");
    assert_eq!(records, [record(Instant::from_millis(5), packet)]);
}

/// A writer that accepts `budget` bytes, then fails every write.
#[derive(Debug)]
struct FailAfter {
    budget: usize,
    written: Vec<u8>,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.budget == 0 {
            return Err(io::Error::other("disk full"));
        }
        let n = buf.len().min(self.budget);
        self.budget -= n;
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_errors_are_counted_and_never_affect_traffic() {
    let mut link = link(Medium::Ethernet);
    for i in 0..3 {
        link.send(Instant::ZERO, Side::B, &frame(i, 80));
    }
    // Room for the global header and one 80-byte record, not more.
    let out = FailAfter {
        budget: 24 + 16 + 80,
        written: Vec::new(),
    };
    let mut port = Capture::new(link.port(Side::A), out).unwrap();
    let now = Instant::from_millis(3);
    let mut buf = [0u8; 1514];
    let mut received = Vec::new();
    while let Some(n) = port.recv(now, &mut buf) {
        received.push(buf[..n].to_vec());
    }
    for i in 10..15 {
        assert!(
            port.send(now, &frame(i, 80)),
            "sending is unaffected by the failing writer"
        );
    }
    assert_eq!(received, [frame(0, 80), frame(1, 80), frame(2, 80)]);
    // 3 received + 5 sent: the first made it, the other 7 failed.
    assert_eq!((port.packets_written(), port.write_errors()), (1, 7));
    drop(port);
    let mut got = 0;
    while link.recv(now, Side::B, &mut buf).is_some() {
        got += 1;
    }
    assert_eq!(got, 5);
}

#[test]
fn failing_header_write_is_an_error_not_a_panic() {
    let mut link = link(Medium::Ethernet);
    let out = FailAfter {
        budget: 0,
        written: Vec::new(),
    };
    assert!(Capture::new(link.port(Side::A), out).is_err());
}

/// A batch through a capture of a shm port: every frame the port takes is captured, in
/// order, the one it drops is not, and the port still publishes the batch once.
#[test]
fn batches_are_captured_frame_by_frame_and_stay_batched() {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        ring_size: 8,
        ..ShmConfig::default()
    })
    .unwrap();
    let mut port = Capture::new(a.remove(0), Vec::new()).unwrap();
    let frames: Vec<Vec<u8>> = (0..9).map(|i| frame(i, 60 + usize::from(i))).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let t = Instant::from_millis(5);
    assert_eq!(
        port.send_batch(t, &refs),
        1,
        "8 slots: the ninth is dropped"
    );
    assert_eq!(port.packets_written(), 8);
    assert_eq!(port.device().stats().tx_publishes, 1);
    let mut buf = [0u8; 1514];
    for f in &frames[..8] {
        let n = b[0].recv(t, &mut buf).unwrap();
        assert_eq!(&buf[..n], &f[..]);
    }
    let (_, writer) = port.into_parts();
    let (_, records) = parse_pcap(&writer.into_inner());
    let want: Vec<Record> = frames[..8].iter().map(|f| record(t, f.clone())).collect();
    assert_eq!(records, want);
}

#[test]
fn a_tap_captures_only_while_on_and_never_blocks_the_link() {
    let (mut a, mut b) = ShmLink::pair(&ShmConfig {
        ring_size: 8,
        ..ShmConfig::default()
    })
    .unwrap();
    let switch = TapSwitch::new(4);
    let mut port = Tap::new(a.remove(0), switch.clone());
    let t = Instant::from_millis(5);
    let frames: Vec<Vec<u8>> = (0..3).map(|i| frame(i, 60)).collect();
    let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
    let mut buf = [0u8; 1514];

    // Off: nothing is kept, and a batch stays one publication.
    assert_eq!(port.send_batch(t, &refs), 0);
    assert_eq!(port.device().stats().tx_publishes, 1);
    assert!(switch.take().is_empty());
    for _ in 0..3 {
        b[0].recv(t, &mut buf).unwrap();
    }

    // On: frames out (as accepted) and in (as delivered), in order, with wall-clock times.
    switch.set(true);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    assert_eq!(port.send_batch(t, &refs[..2]), 0);
    assert_eq!(port.device().stats().tx_publishes, 2, "still one per batch");
    assert!(b[0].send(t, &frame(9, 70)));
    let n = port.recv(t, &mut buf).unwrap();
    assert_eq!(&buf[..n], &frame(9, 70)[..]);
    let got = switch.take();
    let data: Vec<&[u8]> = got.iter().map(|(_, f)| &f[..]).collect();
    assert_eq!(data, [&frames[0][..], &frames[1][..], &frame(9, 70)[..]]);
    for (at, _) in &got {
        assert!(at.since_epoch() >= before, "a Unix time: {at:?}");
    }

    // A reader that falls behind loses frames, counted; the link does not wait for it.
    for _ in 0..3 {
        assert!(port.send(t, &frames[2]));
        b[0].recv(t, &mut buf).unwrap();
        assert!(b[0].send(t, &frame(8, 60)));
        port.recv(t, &mut buf).unwrap();
    }
    assert_eq!(switch.take().len(), 4, "the queue's limit");
    assert_eq!(switch.dropped(), 2);

    // Off again: what was queued is dropped, nothing more is kept.
    assert!(port.send(t, &frames[0]));
    switch.set(false);
    assert!(port.send(t, &frames[1]));
    assert!(switch.take().is_empty());
}
