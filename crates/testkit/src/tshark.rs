//! Reading a capture of an interop run with tshark: packets, malformed packets and
//! expert errors, and TCP retransmissions per sender, as tshark's TCP analysis sees them.
//!
//! [`tshark_or_skip`] says whether tshark can be used: without it a test skips the check
//! with a note, unless `USTACK_REQUIRE_TSHARK` is set (`.ci/run` sets it), which makes
//! that a failure. [`check_capture`] is the check every interop run makes of its capture.

use core::net::IpAddr;
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
    /// (`tcp.analysis.retransmission`, fast and spurious included), per source address
    /// (IPv4 or IPv6).
    pub retransmissions: HashMap<IpAddr, u64>,
}

impl TsharkReport {
    /// Retransmissions sent by `src`.
    pub fn retransmitted_by(&self, src: impl Into<IpAddr>) -> u64 {
        self.retransmissions.get(&src.into()).copied().unwrap_or(0)
    }

    /// Retransmissions sent by every address but `src` (the kernel's, when `src` is
    /// ustack's: it may use several addresses).
    pub fn retransmitted_by_others(&self, src: impl Into<IpAddr>) -> u64 {
        let all: u64 = self.retransmissions.values().sum();
        all - self.retransmitted_by(src)
    }
}

/// The retransmissions a run without faults may show from each side: a handful. None is
/// lost on these links, but a few segments are retransmitted all the same: a tail loss
/// probe (RFC 8985: the last segment again when its ACK is late, which a delayed ACK can
/// make it), and on a veth pair the odd frame reordered between the two CPUs' backlogs
/// (the rigs keep receive work on one CPU to avoid that) looks like one to tshark. A storm
/// (a lost or withheld ACK stream, a timer gone wrong) is hundreds.
pub const CLEAN_RETRANSMISSIONS: u64 = 8;

/// Reads the capture at `pcap` with tshark and asserts what every interop run must show:
/// a well-formed file that tshark reads whole, no malformed packet or expert error, and
/// at most `bounds.0` retransmissions by `ustack` and `bounds.1` by every other address,
/// each plus 1% of the captured TCP packets: a receive ring that overflows while its
/// reader is descheduled (an AF_XDP ring of 2,048 frames on a loaded 2-core machine) loses
/// a handful of segments, and their retransmissions are recovery, not a storm; a storm is
/// retransmissions by the hundred.
/// Prints what it found, naming the run `what`. `None` if tshark is not installed
/// (skipped with a note, unless `USTACK_REQUIRE_TSHARK`).
pub fn check_capture(
    what: &str,
    pcap: &Path,
    ustack: impl Into<IpAddr>,
    bounds: (u64, u64),
) -> Option<TsharkReport> {
    let ustack = ustack.into();
    if !tshark_or_skip(what) {
        return None;
    }
    let data = std::fs::read(pcap).unwrap_or_else(|e| panic!("{what}: reading {pcap:?}: {e}"));
    let records = ustack_obs::pcap::count_records(&data)
        .unwrap_or_else(|| panic!("{what}: {} is not a whole pcap file", pcap.display()));
    let started = std::time::Instant::now();
    let report = analyse(pcap).unwrap_or_else(|e| panic!("{what}: tshark: {e}"));
    let (by_ustack, by_others) = (
        report.retransmitted_by(ustack),
        report.retransmitted_by_others(ustack),
    );
    let bounds = (bounds.0 + report.tcp / 100, bounds.1 + report.tcp / 100);
    eprintln!(
        "{what}: tshark read {} packets ({} TCP, {} bytes of capture) in {:.2} s; \
         retransmissions by ustack {by_ustack} (at most {}), by the kernel {by_others} (at \
         most {})",
        report.packets,
        report.tcp,
        data.len(),
        started.elapsed().as_secs_f64(),
        bounds.0,
        bounds.1
    );
    assert_eq!(report.packets, records, "{what}: tshark read every packet");
    assert!(
        report.problems.is_empty(),
        "{what}: tshark found malformed packets or errors in frames {:?} ({})",
        report.problems,
        pcap.display()
    );
    assert!(
        by_ustack <= bounds.0,
        "{what}: ustack retransmission storm ({})",
        pcap.display()
    );
    assert!(
        by_others <= bounds.1,
        "{what}: kernel retransmission storm ({})",
        pcap.display()
    );
    Some(report)
}

/// `--disable-protocol NAME` for every protocol that tshark would try by heuristic on TCP
/// or UDP payloads or by a port in the ephemeral range, HTTP but excepted. The runs move arbitrary bytes (patterns, random
/// data), in which a heuristic now and then finds its protocol (Thrift, in a 64 MiB
/// transfer) and then flags the packet as malformed; HTTP is what the curl and wrk runs
/// carry (read by its port dissector on 80), and its heuristic needs a request or status
/// line to match. (`--disable-heuristic` takes names that `tshark -G heuristic-decodes`
/// does not print.)
fn no_payload_heuristics() -> io::Result<Vec<String>> {
    let out = Command::new("timeout")
        .args(["30", "tshark", "-G", "heuristic-decodes"])
        .output()?;
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| match line.split('\t').collect::<Vec<_>>()[..] {
            ["tcp" | "udp", name, "T"] if name != "http" => Some(name.to_owned()),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        return Err(io::Error::other(
            "tshark -G heuristic-decodes listed no heuristic dissector on TCP or UDP",
        ));
    }
    // And every protocol tshark decodes by a port in Linux's default ephemeral range
    // (`net.ipv4.ip_local_port_range`, 32768-60999): a client's port picked there (57000
    // is IRC's in tshark 4.0) would have its bytes read as that protocol.
    let out = Command::new("timeout")
        .args(["30", "tshark", "-G", "decodes"])
        .output()?;
    names.extend(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| match line.split('\t').collect::<Vec<_>>()[..] {
                ["tcp.port" | "udp.port", port, name]
                    if name != "http"
                        && port
                            .parse::<u16>()
                            .is_ok_and(|p| (32768..=60999).contains(&p)) =>
                {
                    Some(name.to_owned())
                }
                _ => None,
            }),
    );
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        .flat_map(|n| ["--disable-protocol".to_owned(), n])
        .collect())
}

/// Reads `pcap` with `tshark -n` (bounded by `timeout 120`), payload heuristics off
/// (`no_payload_heuristics`): one
/// pass, every packet's source, protocol and flags.
pub fn analyse(pcap: &Path) -> io::Result<TsharkReport> {
    let out = Command::new("timeout")
        .args(["120", "tshark", "-n"])
        .args(no_payload_heuristics()?)
        .arg("-r")
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
            "ipv6.src",
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
            src4,
            src6,
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
            // The outer header's source (the first of a list: an ICMP error quotes one).
            let src = if src4.is_empty() { src6 } else { src4 };
            let src: IpAddr = src.split(',').next().unwrap_or("").parse().map_err(|_| {
                io::Error::other(format!(
                    "tshark: retransmission without an IP source: `{line}`"
                ))
            })?;
            *report.retransmissions.entry(src).or_default() += 1;
        }
    }
    Ok(report)
}
