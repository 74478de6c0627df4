//! Every scenario under `tests/conformance/` against ustack (the `ustack` backend: the
//! stack on a virtual clock, in this process; no root, deterministic, fast).
//!
//! A script with a `// ustack: differs <reason>` header is a known, explained difference
//! from Linux: it must fail (and its reason and failure are printed); any other must pass.
//! Packetdrill's default tolerance (4 ms) applies: on a virtual clock ustack's packets
//! leave exactly when its timers say.

mod common;

use ustack_conform::exec::{Config, IpVersion};

use common::scenarios_dir;

#[test]
fn every_scenario_passes_against_ustack_or_is_a_known_difference() {
    every_scenario_in(IpVersion::Ipv4);
}

/// The same scenarios over `AF_INET6` sockets and IPv6 packets (ICMPv6 for ICMP), as
/// packetdrill's `--ip_version=ipv6` runs them; `*v4.pkt` scripts are skipped (printed).
#[test]
fn every_scenario_passes_over_ipv6_against_ustack_or_is_a_known_difference() {
    every_scenario_in(IpVersion::Ipv6);
}

/// The same scenarios over `AF_INET6` sockets bound and connected to IPv4-mapped
/// addresses, IPv4 on the wire (`--ip_version=ipv4-mapped-ipv6`).
#[test]
fn every_scenario_passes_over_ipv4_mapped_ipv6_against_ustack_or_is_a_known_difference() {
    every_scenario_in(IpVersion::Ipv4MappedIpv6);
}

/// Runs every scenario in `family`: a script marked as a known difference there must
/// fail, any other must pass, and a script for another family is skipped.
fn every_scenario_in(family: IpVersion) {
    let scripts = ustack_conform::scripts_under(&scenarios_dir()).expect("listing the scenarios");
    assert!(
        scripts.len() >= 150,
        "only {} scenarios found",
        scripts.len()
    );
    let cfg = Config {
        ip_version: family,
        ..Config::default()
    };
    let mut failures = Vec::new();
    let (mut differs, mut skipped) = (0, 0);
    for path in &scripts {
        if let Some(why) = family.skips(path) {
            skipped += 1;
            eprintln!("skip    {} ({why})", path.display());
            continue;
        }
        let text = std::fs::read_to_string(path).expect("reading a scenario");
        let script = ustack_conform::parse::parse(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let result = ustack_conform::run_ustack(path, &cfg);
        match (script.ustack_differs_in(family), result) {
            (None, Ok(_)) => eprintln!("ok      {}", path.display()),
            (None, Err(e)) => failures.push(e),
            (Some(reason), Err(e)) => {
                differs += 1;
                eprintln!("differs {} ({reason}):\n  {e}", path.display());
            }
            (Some(reason), Ok(_)) => failures.push(format!(
                "{}: marked `ustack: differs {reason}` but passed over {family} (remove the mark)",
                path.display()
            )),
        }
    }
    // A family that ran nothing would pass vacuously.
    assert!(
        scripts.len() - skipped >= 150,
        "only {} scenarios ran over {family}",
        scripts.len() - skipped
    );
    eprintln!(
        "{family}: {} scenarios: {} pass, {differs} known differences, {skipped} skipped (other family)",
        scripts.len(),
        scripts.len() - skipped - differs - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed against ustack over {family}:\n{}",
        failures.len(),
        scripts.len(),
        failures.join("\n")
    );
}

/// A run is deterministic: the same script twice gives the same packets at the same
/// (virtual) times, so a failure reproduces exactly.
#[test]
fn runs_replay_exactly() {
    let path = scenarios_dir().join("data/fast-retransmit-3-dupacks.pkt");
    let cfg = Config {
        // The tightest tolerance: any jitter in when packets leave would fail it.
        tolerance_us: 1,
        ..Config::default()
    };
    for _ in 0..3 {
        let r = ustack_conform::run_ustack(&path, &cfg).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.packets_matched, 6);
    }
}

/// The runner is not a rubber stamp against ustack either: a passing scenario with one
/// number changed fails with a diff naming the field and the line.
#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    common::wrong_expectations_fail_with_a_diff("umut", |p| {
        ustack_conform::run_ustack(p, &Config::default()).map(|_| ())
    });
}

/// A blocking read written as an ordinary call fails at once with a clear message (on a
/// virtual clock nothing would move time on to unblock it), while the same read written
/// `start...end` returns when the data arrives, at that data's time.
#[test]
fn a_call_that_blocks_must_be_written_as_blocking() {
    let head = "    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 <mss 1000>
   +0 > S. 0:0(0) ack 1 <mss 1460>
  +.1 < . 1:1(0) ack 1 win 257
   +0 accept(3, ..., ...) = 4
";
    let dir = std::env::temp_dir().join(format!("ustack-conform-blk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("blocking-read.pkt");
    std::fs::write(&path, format!("{head}  +.1 read(4, ..., 100) = 10\n")).expect("writing");
    let err = ustack_conform::run_ustack(&path, &Config::default()).expect_err("passed");
    assert!(
        err.contains("read() blocked (a call that blocks is written `start...end`)"),
        "{err}"
    );
    std::fs::write(
        &path,
        format!("{head}  +.1...0.3 read(4, ..., 100) = 10\n  +.1 < P. 1:11(10) ack 1 win 257\n"),
    )
    .expect("writing");
    let r = ustack_conform::run_ustack(&path, &Config::default());
    let _ = std::fs::remove_dir_all(&dir);
    r.unwrap_or_else(|e| panic!("{e}"));
}
