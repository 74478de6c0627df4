//! `ustack`: the command-line tool of the ustack user-space TCP/IP stack.

// The bench's JSON record (bench/output.rs) is one `json!` literal of some forty fields.
#![recursion_limit = "256"]

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod bench;
mod client;
mod control;
mod inspect;
mod link;
mod profile;
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
    /// Print a running instance's counters exactly as /proc/net/snmp and /proc/net/netstat
    /// (or --json, or nstat-like --delta), or its memory by kind (--memory).
    Stat(inspect::StatArgs),
    /// List a running instance's sockets like `ss -tn` (-l, -a, -u, -m, -i, -o, --json).
    Ss(inspect::SsArgs),
    /// Read or set a running instance's tunables by their Linux sysctl names, validated
    /// (`ustack sysctl`, `ustack sysctl NAME`, `ustack sysctl NAME=VALUE`); with
    /// --defaults, ustack's defaults, ranges and units without an instance.
    Sysctl(sysctl::Args),
    /// Connect to IP:PORT through ustack over a TUN interface (or packet, xdp, or a served
    /// shm link), like `nc`: stdin to the connection, the connection to stdout.
    Connect(client::ConnectArgs),
    /// Fetch an http:// URL through ustack over a TUN interface (or packet, xdp, or a
    /// served shm link): the body to stdout (or -o FILE), its size and SHA-256 on stderr.
    Get(client::GetArgs),
    /// Capture a running instance's traffic to a pcap file (`-w FILE`, `-c COUNT`,
    /// `--duration`), frames in and out of every shard.
    Capture(inspect::CaptureArgs),
    /// Switch a running instance's built-in profiler on or off, or show where its shard
    /// loops spend their time per packet: device receive, L2/L3, demux, TCP input, socket
    /// queue, application, TCP output, device transmit, timers, idle polling.
    Profile(profile::Args),
    /// A peer of `ustack bench` (a Linux baseline server, a Linux c1m client, or c1m's
    /// ustack server) in a process of its own, driven by the bench over its stdin and
    /// stdout. Internal.
    #[command(name = "bench-peer", hide = true)]
    BenchPeer(bench::linux::PeerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Sysctl(args) => sysctl::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Stat(args) => inspect::stat(&args),
        Command::Ss(args) => inspect::ss(&args),
        Command::Capture(args) => inspect::capture(&args),
        Command::Profile(args) => profile::run(&args),
        Command::Connect(args) => client::connect(&args),
        Command::Get(args) => client::get(&args),
        Command::BenchPeer(args) => bench::linux::peer(&args),
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
