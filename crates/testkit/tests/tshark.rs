//! The capture check's reading of payloads: arbitrary bytes on a port that tshark decodes
//! as some protocol must not count as a malformed packet.

use ustack_testkit::tshark::{analyse, tshark_or_skip};

/// A pcap (`LINKTYPE_RAW`) of one IPv4 TCP segment from port `sport` to port 9 carrying
/// `payload`; checksums zero (tshark does not verify them unless asked).
fn one_segment(sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut tcp = Vec::new();
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&9u16.to_be_bytes());
    tcp.extend_from_slice(&1u32.to_be_bytes()); // seq
    tcp.extend_from_slice(&1u32.to_be_bytes()); // ack
    tcp.extend_from_slice(&[5 << 4, 0x18]); // 20 bytes, PSH|ACK
    tcp.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]); // window, checksum, urgent
    tcp.extend_from_slice(payload);
    let total = (20 + tcp.len()) as u16;
    let mut pkt = vec![0x45, 0];
    pkt.extend_from_slice(&total.to_be_bytes());
    pkt.extend_from_slice(&[0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    pkt.extend_from_slice(&tcp);
    let mut file = Vec::new();
    for word in [0xa1b2_c3d4u32.to_le_bytes(), [2, 0, 4, 0], [0; 4], [0; 4]] {
        file.extend_from_slice(&word);
    }
    file.extend_from_slice(&65_535u32.to_le_bytes());
    file.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    file.extend_from_slice(&[0; 8]); // the record's time
    let len = (pkt.len() as u32).to_le_bytes();
    file.extend_from_slice(&len);
    file.extend_from_slice(&len);
    file.extend_from_slice(&pkt);
    file
}

/// A kernel client's ephemeral port can be one tshark decodes by port (57000 is IRC's in
/// tshark 4.0): a stream's bytes that happen to start like an IRC prefix made tshark flag
/// the segment as malformed and failed a clean interop run in CI.
#[test]
fn payload_on_a_port_tshark_decodes_is_not_a_malformed_packet() {
    if !tshark_or_skip("payload_on_a_port_tshark_decodes_is_not_a_malformed_packet") {
        return;
    }
    let pcap = std::env::temp_dir().join(format!(
        "ustack-tshark-ephemeral-port-{}.pcap",
        std::process::id()
    ));
    std::fs::write(&pcap, one_segment(57_000, b":prefix-without-a-space\r\n")).unwrap();
    let report = analyse(&pcap);
    std::fs::remove_file(&pcap).ok();
    let report = report.expect("tshark reads the capture");
    assert_eq!(report.packets, 1);
    assert!(
        report.problems.is_empty(),
        "frames flagged: {:?}",
        report.problems
    );
}
