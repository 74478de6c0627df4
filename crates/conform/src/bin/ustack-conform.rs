//! `ustack-conform SCRIPT... [--backend linux|ustack|so:PATH] [--ip_version V] [--tolerance-usecs N]`: runs
//! packetdrill-format scripts (files, or directories of `*.pkt`) and prints one line per script;
//! exits 1 if any failed (a failure prints the script line and a packetdrill-style diff).

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: ustack-conform SCRIPT|DIR... [--backend linux|ustack|so:PATH]
         [--ip_version ipv4|ipv4-mapped-ipv6|ipv6] [--tolerance-usecs N] [-v]
  Runs packetdrill-format scripts. --ip_version as packetdrill's (ipv4 by default): the
  scripts run unchanged over AF_INET6 sockets on IPv4 (ipv4-mapped-ipv6) or over IPv6
  (ipv6); a script named *v4.pkt is skipped over ipv6, *v6.pkt over the other two. Backends: linux (the default: kernel sockets in a network
  namespace of its own, the remote end on a TUN; needs root); ustack (ustack's stack on a
  virtual clock, in this process); so:PATH (a packetdrill shared library, such as
  libustack_packetdrill.so, through its packetdrill_interface table).
  -v prints every packet and call as it happens.";

enum Which {
    Linux,
    Ustack,
    So(PathBuf),
}

fn main() -> ExitCode {
    let mut paths = Vec::new();
    let mut cfg = ustack_conform::exec::Config::default();
    let mut args = std::env::args().skip(1);
    let mut backend = Which::Linux;
    while let Some(a) = args.next() {
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "-v" | "--verbose" => cfg.trace = true,
            "--backend" => match args.next().as_deref() {
                Some("linux") => backend = Which::Linux,
                Some("ustack") => backend = Which::Ustack,
                Some(so) if so.starts_with("so:") => backend = Which::So(PathBuf::from(&so[3..])),
                other => {
                    eprintln!("unknown backend {other:?}\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            s if s == "--ip_version" || s.starts_with("--ip_version=") => {
                let v = match s.strip_prefix("--ip_version=") {
                    Some(v) => Some(v.to_owned()),
                    None => args.next(),
                };
                match v
                    .as_deref()
                    .and_then(ustack_conform::exec::IpVersion::parse)
                {
                    Some(v) => cfg.ip_version = v,
                    None => {
                        eprintln!("--ip_version takes ipv4, ipv4-mapped-ipv6 or ipv6\n{USAGE}");
                        return ExitCode::from(2);
                    }
                }
            }
            "--tolerance-usecs" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => cfg.tolerance_us = n,
                _ => {
                    eprintln!("--tolerance-usecs takes a positive number\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            s if s.starts_with('-') => {
                eprintln!("unknown option {s}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => paths.push(PathBuf::from(a)),
        }
    }
    if paths.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let mut scripts = Vec::new();
    for p in paths {
        if p.is_dir() {
            match ustack_conform::scripts_under(&p) {
                Ok(s) => scripts.extend(s),
                Err(e) => {
                    eprintln!("{}: {e}", p.display());
                    return ExitCode::from(2);
                }
            }
        } else {
            scripts.push(p);
        }
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for s in &scripts {
        if let Some(why) = cfg.ip_version.skips(s) {
            skipped += 1;
            println!(
                "skip  {} ({why}, not run over {})",
                s.display(),
                cfg.ip_version
            );
            continue;
        }
        let result = match &backend {
            Which::Linux => ustack_conform::run_linux(s, &cfg),
            Which::Ustack => ustack_conform::run_ustack(s, &cfg),
            Which::So(lib) => ustack_conform::run_so(lib, "", s, &cfg),
        };
        match result {
            Ok(r) => {
                passed += 1;
                println!(
                    "ok    {} ({} events, {} packets matched)",
                    s.display(),
                    r.events,
                    r.packets_matched
                );
            }
            Err(e) => {
                failed += 1;
                println!("FAIL  {e}");
            }
        }
    }
    println!(
        "{passed} passed, {failed} failed, {skipped} skipped ({})",
        cfg.ip_version
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
