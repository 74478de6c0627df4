//! Reading a capture of an interop run with tshark: packets, malformed packets and
//! expert errors, and TCP retransmissions per sender, as tshark's TCP analysis sees them.
//!
//! [`tshark_or_skip`] says whether tshark can be used: without it a test skips the check
//! with a note, unless `USTACK_REQUIRE_TSHARK` is set (`.ci/run` sets it), which makes
//! that a failure.

use core::net::Ipv4Addr;
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::process::Command;

use crate::netns::on_path;

/// Whether tshark is on PATH; prints a skip note for `test` and returns false if not, or
/// panics when `USTACK_REQUIRE_TSHARK` is set.
pub fn tshark_or_skip(test: &str) -> bool {
    if on_path("tshark") {
        return true;
    }
    assert!(
        std::env::var_os("USTACK_REQUIRE_TSHARK").is_none(),
        "{test}: tshark is required (USTACK_REQUIRE_TSHARK) but not installed"
    );
    eprintln!("{test}: tshark is not installed: capture not checked");
    false
}

/// What tshark found in a capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TsharkReport {
    /// Packets in the capture.
    pub packets: u64,
    /// TCP packets.
    pub tcp: u64,
    /// Packets tshark could not dissect (`_ws.malformed`) or flagged with an expert
    /// error (`_ws.expert.severity == error`); the frame numbers.
    pub problems: Vec<u64>,
    /// Segments tshark's TCP analysis flags as retransmissions
    /// (`tcp.analysis.retransmission`, fast and spurious included), per source address.
    pub retransmissions: HashMap<Ipv4Addr, u64>,
}

impl TsharkReport {
    /// Retransmissions sent by `src`.
    pub fn retransmitted_by(&self, src: Ipv4Addr) -> u64 {
        self.retransmissions.get(&src).copied().unwrap_or(0)
    }
}

/// Reads `pcap` with `tshark -n` (bounded by `timeout 120`): one pass, every packet's
/// source, protocol and flags.
pub fn analyse(pcap: &Path) -> io::Result<TsharkReport> {
    let out = Command::new("timeout")
        .args(["120", "tshark", "-n", "-r"])
        .arg(pcap)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-e",
            "frame.number",
            "-e",
            "ip.src",
            "-e",
            "tcp.srcport",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
            "-e",
            "tcp.analysis.retransmission",
            "-e",
            "tcp.analysis.fast_retransmission",
            "-e",
            "tcp.analysis.spurious_retransmission",
        ])
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "tshark -r {} failed ({}): {}",
            pcap.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut report = TsharkReport::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        let [
            number,
            src,
            tcp_port,
            malformed,
            severity,
            retrans,
            fast,
            spurious,
        ] = f[..]
        else {
            return Err(io::Error::other(format!("tshark printed `{line}`")));
        };
        report.packets += 1;
        if !tcp_port.is_empty() {
            report.tcp += 1;
        }
        // Severity: a comma-separated list (one per expert item); error is 0x00800000.
        let error = severity
            .split(',')
            .filter_map(|s| s.trim().parse::<u64>().ok())
            .any(|s| s >= 0x0080_0000);
        if !malformed.is_empty() || error {
            report.problems.push(number.parse().unwrap_or(0));
        }
        if !(retrans.is_empty() && fast.is_empty() && spurious.is_empty()) {
            let src: Ipv4Addr = src.split(',').next().unwrap_or("").parse().map_err(|_| {
                io::Error::other(format!(
                    "tshark: retransmission without an IPv4 source: `{line}`"
                ))
            })?;
            *report.retransmissions.entry(src).or_default() += 1;
        }
    }
    Ok(report)
}
