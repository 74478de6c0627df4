//! `ustack bench`: the same workload against ustack and against Linux, side by side.
//!
//! Today's scenario is `udp-rr`: one client and one server exchange fixed-size UDP
//! messages in lock-step (request, echo), every echo checked byte for byte. The ustack run
//! puts two ustack stacks on the in-process `sim` link (real clock, no faults); the Linux
//! run sends the same messages through the kernel over loopback. Both run client and
//! server in one thread on one core, so neither pays a cross-core wake-up: the figure is
//! the cost of the stack itself (for Linux, four system calls and the loopback path per
//! round trip). TCP scenarios (stream, pingpong, cps, c1m) arrive with TCP.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant as WallClock};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_dev::sim::SimLinkConfig;
use ustack_stack::Instant;
use ustack_testkit::{A_IP, B_IP, Pair};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario to run. Only `udp-rr` exists until TCP lands.
    #[arg(default_value = "udp-rr", value_parser = ["udp-rr"])]
    scenario: String,
    /// Servers under test, comma-separated: ustack, linux, or both (side by side).
    #[arg(long, default_value = "ustack,linux", value_delimiter = ',', value_parser = ["ustack", "linux"])]
    server: Vec<String>,
    /// How long each server is measured, e.g. 500ms, 2s.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    duration: Duration,
    /// Message size in bytes (8 to 1472: one unfragmented datagram).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(8..=1472))]
    msg_size: u16,
    /// Print one JSON array (one object per server) instead of the table.
    #[arg(long)]
    json: bool,
}

/// Parse `250ms`, `2s`, `1.5s`, `1m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((s, "s"), |i| s.split_at(i));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with a unit, like 500ms or 2s"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("{s:?}: unit must be ms, s or m")),
    };
    if !(0.01..=3600.0).contains(&secs) {
        return Err(format!("{s:?}: must be between 10ms and 1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// What one server's run measured.
struct Outcome {
    server: &'static str,
    link: &'static str,
    round_trips: u64,
    elapsed: Duration,
    verified: bool,
    /// Round-trip times in nanoseconds, sorted.
    rtt_ns: Vec<u64>,
    counters: Option<Value>,
    client_counters: Option<Value>,
}

impl Outcome {
    fn msgs_per_s(&self) -> f64 {
        self.round_trips as f64 / self.elapsed.as_secs_f64()
    }
    fn percentile_us(&self, p: f64) -> f64 {
        if self.rtt_ns.is_empty() {
            return 0.0;
        }
        let i = ((self.rtt_ns.len() as f64 * p).ceil() as usize).clamp(1, self.rtt_ns.len()) - 1;
        self.rtt_ns[i] as f64 / 1000.0
    }
    fn to_json(&self, msg_size: u16) -> Value {
        json!({
            "scenario": "udp-rr",
            "server": self.server,
            "link": self.link,
            "shards": 1,
            "verified": self.verified,
            "conns": 1,
            "msg_size": msg_size,
            "duration_s": self.elapsed.as_secs_f64(),
            "round_trips": self.round_trips,
            "throughput_gbps": self.msgs_per_s() * f64::from(msg_size) * 2.0 * 8.0 / 1e9,
            "msgs_per_s": self.msgs_per_s(),
            "conns_per_s": Value::Null,
            "latency_us": { "p50": self.percentile_us(0.50), "p99": self.percentile_us(0.99), "p999": self.percentile_us(0.999) },
            "server_cpu_s": Value::Null,
            "server_mem_bytes": Value::Null,
            "server_mem_per_conn_bytes": Value::Null,
            "counters": self.counters.clone().unwrap_or(Value::Null),
            "client_counters": self.client_counters.clone().unwrap_or(Value::Null),
        })
    }
}

/// The message for round trip `seq`: the sequence number, then bytes derived from it.
fn fill_message(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
}

fn run_ustack(duration: Duration, size: usize) -> anyhow::Result<Outcome> {
    let mut p = Pair::new(SimLinkConfig::default());
    let client = p.a.udp_bind(SocketAddrV4::new(A_IP, 0))?;
    let server = p.b.udp_bind(SocketAddrV4::new(B_IP, 7))?;
    let server_addr = SocketAddrV4::new(B_IP, 7);
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let start = WallClock::now();
    let clock = |start: WallClock| Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let mut rtt_ns = Vec::new();
    let mut verified = true;
    let mut seq = 0u64;
    while start.elapsed() < duration {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        p.now = clock(start);
        p.a.udp_send_to(p.now, client, &req, server_addr)?;
        p.settle();
        // The server echoes whatever arrived.
        while let Ok((n, from)) = p.b.udp_recv_from(server, &mut srv_buf) {
            p.b.udp_send_to(p.now, server, &srv_buf[..n], from)?;
        }
        p.settle();
        match p.a.udp_recv_from(client, &mut resp) {
            Ok((n, _)) if resp[..n] == req[..] => {}
            Ok(_) => verified = false,
            Err(e) => bail!("ustack udp-rr: round trip {seq} got no echo ({e})"),
        }
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = start.elapsed();
    rtt_ns.sort_unstable();
    Ok(Outcome {
        server: "ustack",
        link: "sim",
        round_trips: seq,
        elapsed,
        verified,
        rtt_ns,
        counters: Some(p.b.mib().to_json()),
        client_counters: Some(p.a.mib().to_json()),
    })
}

fn run_linux(duration: Duration, size: usize) -> anyhow::Result<Outcome> {
    let server = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("bind the Linux server socket on loopback")?;
    let client = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .context("bind the Linux client socket on loopback")?;
    client.connect(server.local_addr()?)?;
    for s in [&server, &client] {
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
    }
    let (mut req, mut srv_buf, mut resp) = (vec![0u8; size], vec![0u8; 2048], vec![0u8; 2048]);
    let start = WallClock::now();
    let mut rtt_ns = Vec::new();
    let mut verified = true;
    let mut seq = 0u64;
    while start.elapsed() < duration {
        let t0 = WallClock::now();
        fill_message(&mut req, seq);
        client.send(&req)?;
        let (n, from) = server
            .recv_from(&mut srv_buf)
            .context("Linux udp-rr: the server got no request")?;
        server.send_to(&srv_buf[..n], from)?;
        let n = client
            .recv(&mut resp)
            .context("Linux udp-rr: the client got no echo")?;
        verified &= resp[..n] == req[..];
        rtt_ns.push(t0.elapsed().as_nanos() as u64);
        seq += 1;
    }
    let elapsed = start.elapsed();
    rtt_ns.sort_unstable();
    Ok(Outcome {
        server: "linux",
        link: "loopback",
        round_trips: seq,
        elapsed,
        verified,
        rtt_ns,
        counters: None,
        client_counters: None,
    })
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let size = usize::from(args.msg_size);
    let mut outcomes = Vec::new();
    for server in &args.server {
        if !args.json {
            eprintln!(
                "ustack bench: {} on {} for {:?} ...",
                args.scenario, server, args.duration
            );
        }
        outcomes.push(match server.as_str() {
            "ustack" => run_ustack(args.duration, size)?,
            _ => run_linux(args.duration, size)?,
        });
    }
    if args.json {
        let all: Vec<Value> = outcomes.iter().map(|o| o.to_json(args.msg_size)).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_table(&outcomes, args.msg_size);
    }
    if outcomes.iter().all(|o| o.verified) {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("ustack bench: a run did not verify what it moved (\"verified\": false)");
        Ok(ExitCode::FAILURE)
    }
}

fn print_table(outcomes: &[Outcome], msg_size: u16) {
    println!();
    println!(
        "udp-rr: {msg_size}-byte UDP request/response, 1 flow, client and server in one thread"
    );
    println!(
        "{:<8} {:<9} {:>13} {:>9} {:>9} {:>9} {:>9}",
        "server", "link", "round trips/s", "p50 us", "p99 us", "p99.9 us", "verified"
    );
    for o in outcomes {
        println!(
            "{:<8} {:<9} {:>13.0} {:>9.2} {:>9.2} {:>9.2} {:>9}",
            o.server,
            o.link,
            o.msgs_per_s(),
            o.percentile_us(0.50),
            o.percentile_us(0.99),
            o.percentile_us(0.999),
            if o.verified { "yes" } else { "NO" }
        );
    }
    if let (Some(u), Some(l)) = (
        outcomes.iter().find(|o| o.server == "ustack"),
        outcomes.iter().find(|o| o.server == "linux"),
    ) {
        println!(
            "ustack/linux: {:.2}x round trips/s, {:.2}x p50 latency",
            u.msgs_per_s() / l.msgs_per_s(),
            u.percentile_us(0.5) / l.percentile_us(0.5)
        );
    }
}
