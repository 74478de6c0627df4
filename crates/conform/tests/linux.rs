//! Every scenario under `tests/conformance/` against the Linux kernel (the `linux`
//! backend: kernel sockets in a network namespace of its own, the remote end on a TUN).
//!
//! Needs root: without it the test prints why and passes, unless `USTACK_REQUIRE_ROOT` is
//! set (`.ci/run` sets it), which makes that a failure. A script with a
//! `// linux: expected-fail <reason>` header must fail (and its reason is printed); any
//! other must pass.
//!
//! Real time on a shared machine: the tolerance is 50 ms (packetdrill's default is 4 ms;
//! the scenarios keep their timed events at least 100 ms apart), and a script that fails
//! only on timing (`timing error`) is run again, up to three times, with the retry printed. A
//! mismatch of any other kind fails at once. Three scripts run at a time ([`WORKERS`]),
//! each in its own namespace.

use std::path::Path;

mod common;

use ustack_conform::exec::{Config, IpVersion};
use ustack_testkit::netns::root_or_skip;

use common::scenarios_dir;

/// The two tests take turns, also when a runner puts them in processes of their own
/// (nextest): real-time scenarios side by side would disturb each other's timing on a
/// small machine. An exclusive `flock` on a file in the temporary directory, released when
/// the file closes.
fn turn() -> std::fs::File {
    let path = std::env::temp_dir().join("ustack-conform-linux.lock");
    let f = std::fs::File::create(&path).expect("creating the lock file");
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive).expect("flock");
    f
}

fn config(family: IpVersion) -> Config {
    Config {
        tolerance_us: 50_000,
        ip_version: family,
        ..Config::default()
    }
}

/// Runs one script over IPv4, again (up to three times) when it fails on timing alone.
fn run(path: &Path) -> Result<(), String> {
    run_in(path, IpVersion::Ipv4)
}

/// Runs one script in `family`, again (up to three times) when it fails on timing alone.
fn run_in(path: &Path, family: IpVersion) -> Result<(), String> {
    let mut tries = 0;
    loop {
        tries += 1;
        match ustack_conform::run_linux(path, &config(family)) {
            Ok(_) => return Ok(()),
            Err(e) if tries < 4 && e.contains("timing error") => {
                eprintln!("retrying after a timing error: {e}");
            }
            Err(e) => return Err(e),
        }
    }
}

/// How many scripts run at once: each has a namespace and a TUN of its own, and most of a
/// script's time is spent waiting for its timed events, so a few side by side keep the
/// whole run short (about 200 scripts of up to 3.5 s each) without making the kernel's
/// packets late on a 2-core machine (a timing error is retried anyway, see [`run`]).
const WORKERS: usize = 3;

#[test]
fn every_scenario_passes_against_linux() {
    if root_or_skip("every_scenario_passes_against_linux").is_none() {
        return;
    }
    every_scenario_in(IpVersion::Ipv4);
}

/// The same scenarios over `AF_INET6` sockets and IPv6 on the TUN (packetdrill's
/// `--ip_version=ipv6`; `*v4.pkt` skipped).
#[test]
fn every_scenario_passes_over_ipv6_against_linux() {
    if root_or_skip("every_scenario_passes_over_ipv6_against_linux").is_none() {
        return;
    }
    every_scenario_in(IpVersion::Ipv6);
}

/// The same scenarios over `AF_INET6` sockets on IPv4-mapped addresses, IPv4 on the TUN
/// (`--ip_version=ipv4-mapped-ipv6`; `*v6.pkt` skipped).
#[test]
fn every_scenario_passes_over_ipv4_mapped_ipv6_against_linux() {
    if root_or_skip("every_scenario_passes_over_ipv4_mapped_ipv6_against_linux").is_none() {
        return;
    }
    every_scenario_in(IpVersion::Ipv4MappedIpv6);
}

fn every_scenario_in(family: IpVersion) {
    let _turn = turn();
    let all = ustack_conform::scripts_under(&scenarios_dir()).expect("listing the scenarios");
    let scripts: Vec<_> = all
        .iter()
        .filter(|p| match family.skips(p) {
            Some(why) => {
                eprintln!("skip  {} ({why})", p.display());
                false
            }
            None => true,
        })
        .cloned()
        .collect();
    assert!(
        scripts.len() >= 150,
        "only {} scenarios to run over {family}",
        scripts.len()
    );
    let started = std::time::Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<(usize, Result<(), String>)>> = Default::default();
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(path) = scripts.get(i) else { break };
                    let r = run_in(path, family);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((i, r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    assert_eq!(results.len(), scripts.len(), "a worker stopped early");
    let mut failures = Vec::new();
    for (i, result) in results {
        let path = &scripts[i];
        let text = std::fs::read_to_string(path).expect("reading a scenario");
        let script = ustack_conform::parse::parse(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match (&script.linux_expected_fail, result) {
            (None, Ok(())) => eprintln!("ok    {}", path.display()),
            (None, Err(e)) => failures.push(e),
            (Some(reason), Err(e)) => {
                eprintln!("xfail {} ({reason}): {e}", path.display());
            }
            (Some(reason), Ok(())) => failures.push(format!(
                "{}: marked `linux: expected-fail {reason}` but passed",
                path.display()
            )),
        }
    }
    eprintln!(
        "{family}: {} scenarios run against Linux, {} failed, {} skipped, in {:.1} s",
        scripts.len(),
        failures.len(),
        all.len() - scripts.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {} scenarios failed against Linux over {family}:\n{}",
        failures.len(),
        scripts.len(),
        failures.join("\n")
    );
}

/// The runner is not a rubber stamp: a scenario that passes, with one number changed in
/// an outbound line, fails with a packetdrill-style diff naming the field and the line.
#[test]
fn a_wrong_expectation_fails_with_a_diff() {
    if root_or_skip("a_wrong_expectation_fails_with_a_diff").is_none() {
        return;
    }
    let _turn = turn();
    common::wrong_expectations_fail_with_a_diff("mut", run);
}
