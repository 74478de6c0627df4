//! The pcap writer, byte for byte, and read back by tshark or tcpdump when one is installed.

use std::path::PathBuf;
use std::process::Command;

use ustack_obs::{Instant, LinkType, PcapWriter};

/// A 60-byte Ethernet frame: broadcast ARP request from 02:00:00:00:00:01 (192.0.2.1) for
/// 192.0.2.2, padded to the Ethernet minimum.
fn arp_request() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f.extend_from_slice(&[0x08, 0x06]); // EtherType ARP
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]); // Ethernet/IPv4, request
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 192, 0, 2, 1]);
    f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 192, 0, 2, 2]);
    f.resize(60, 0);
    f
}

/// A tiny capture: one ARP request at t=1.5 s, one 100-byte frame at t=2.000001 s cut to a
/// 64-byte snaplen.
fn tiny_capture() -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet, 64).unwrap();
    w.write_packet(Instant::from_millis(1500), &arp_request())
        .unwrap();
    let mut long = arp_request();
    long.resize(100, 0xab);
    w.write_packet(Instant::from_micros(2_000_001), &long)
        .unwrap();
    assert_eq!(w.packets(), 2);
    w.flush().unwrap();
    w.into_inner()
}

#[test]
fn tiny_capture_byte_for_byte() {
    let bytes = tiny_capture();
    let mut expected: Vec<u8> = vec![
        0xd4, 0xc3, 0xb2, 0xa1, // magic 0xa1b2c3d4, little-endian: microsecond timestamps
        0x02, 0x00, 0x04, 0x00, // version 2.4
        0x00, 0x00, 0x00, 0x00, // thiszone
        0x00, 0x00, 0x00, 0x00, // sigfigs
        0x40, 0x00, 0x00, 0x00, // snaplen 64
        0x01, 0x00, 0x00, 0x00, // LINKTYPE_ETHERNET
        // Record 1: 1 s + 500000 us, 60 bytes captured of 60.
        0x01, 0x00, 0x00, 0x00, 0x20, 0xa1, 0x07, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x3c, 0x00, 0x00,
        0x00,
    ];
    expected.extend_from_slice(&arp_request());
    // Record 2: 2 s + 1 us, 64 bytes captured of 100.
    expected.extend_from_slice(&[
        0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00,
        0x00,
    ]);
    let mut long = arp_request();
    long.resize(64, 0xab);
    expected.extend_from_slice(&long);
    assert_eq!(bytes, expected);
}

#[test]
fn raw_link_type_header() {
    let w = PcapWriter::new(Vec::new(), LinkType::Raw, 1500).unwrap();
    assert_eq!(w.link_type(), LinkType::Raw);
    let bytes = w.into_inner();
    assert_eq!(bytes.len(), 24);
    assert_eq!(&bytes[16..24], &[0xdc, 0x05, 0, 0, 101, 0, 0, 0]);
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// Removes the file when dropped, even if the test fails.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_real_reader_reads_it() {
    let file = TempFile(
        std::env::temp_dir().join(format!("ustack-obs-pcap-test-{}.pcap", std::process::id())),
    );
    std::fs::write(&file.0, tiny_capture()).unwrap();
    let path = file.0.to_str().unwrap();
    if on_path("tshark") {
        // One line per packet: captured length, original length, top protocol.
        let out = Command::new("timeout")
            .args(["60", "tshark", "-n", "-r", path, "-T", "fields"])
            .args([
                "-e",
                "frame.cap_len",
                "-e",
                "frame.len",
                "-e",
                "frame.time_relative",
            ])
            .args(["-e", "arp.dst.proto_ipv4"])
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "tshark: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("60\t60\t0.000000000\t192.0.2.2"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("64\t100\t0.500001000\t192.0.2.2"),
            "{text}"
        );
    } else if on_path("tcpdump") {
        let out = Command::new("timeout")
            .args(["60", "tcpdump", "-n", "-tt", "-r", path])
            .output()
            .expect("run tcpdump");
        assert!(
            out.status.success(),
            "tcpdump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[0].starts_with("1.500000 ARP, Request who-has 192.0.2.2"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("2.000001 ARP, Request who-has 192.0.2.2"),
            "{text}"
        );
    } else {
        eprintln!(
            "note: neither tshark nor tcpdump is on PATH; the pcap was checked byte for byte \
             only (the integration test reads captures with tshark)"
        );
    }
}
