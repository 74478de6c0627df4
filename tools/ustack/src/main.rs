//! `ustack`: the command-line tool of the ustack user-space TCP/IP stack.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod bench;
mod serve;
mod sysctl;

/// ustack: a TCP/IP stack that runs inside a user process, built the way Linux's is.
///
/// The tool runs ustack's servers and benchmarks and inspects a running instance with
/// the views Linux users know (/proc/net/snmp counters, ss, sysctl, pcap capture).
#[derive(Debug, Parser)]
#[command(name = "ustack", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a workload against ustack and against Linux, side by side, and print the ratios.
    ///
    /// Scenarios: `udp-rr` (UDP request/response), `pingpong` (N TCP connections exchanging
    /// messages in lock-step), `cps` (short connections, the server closing first) and
    /// `stream` (one TCP connection, bulk, every byte checked). ustack runs over `shm`
    /// (server and client on threads of their own) or `sim` (both stacks in one thread, with
    /// faults if asked), Linux over loopback. Without a scenario: all four, one second each.
    /// `--plot` draws the comparison as PNG or SVG.
    Bench(bench::Args),
    /// Run a server (echo, discard, http) on ustack, over a shm link another process
    /// attaches to (it prints `shm-offer <name>`), or over `sim` with verifying clients.
    Serve(serve::Args),
    /// Print a running instance's counters like /proc/net/snmp and /proc/net/netstat.
    /// Not yet: needs `serve` and its control socket.
    Stat,
    /// List a running instance's sockets like `ss -tn`. Not yet: needs `serve`.
    Ss,
    /// Show ustack's tunables (Linux sysctl names, defaults, ranges, units), or check a
    /// `name=value` setting against them. Setting a running instance comes with `serve`.
    Sysctl(sysctl::Args),
    /// Capture a running instance's traffic to a pcap file. Not yet: needs `serve`.
    Capture,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Sysctl(args) => sysctl::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Stat => not_yet("stat", "`ustack serve` and its control socket (#6)"),
        Command::Ss => not_yet("ss", "`ustack serve` and its control socket (#6)"),
        Command::Capture => not_yet("capture", "`ustack serve` and its control socket (#6)"),
    };
    match result {
        Ok(code) => code,
        // Options that parse but cannot go together: clap's error, with bench's usage.
        Err(e) if e.is::<bench::UsageError>() => {
            let mut cli = Cli::command();
            cli.build();
            let bench = cli
                .find_subcommand_mut("bench")
                .expect("bench is a subcommand");
            let e = bench.error(clap::error::ErrorKind::ArgumentConflict, e);
            let _ = e.print();
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("ustack: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn not_yet(what: &str, needs: &str) -> anyhow::Result<ExitCode> {
    eprintln!("ustack {what}: not yet implemented; it arrives with {needs}.");
    Ok(ExitCode::from(2))
}
