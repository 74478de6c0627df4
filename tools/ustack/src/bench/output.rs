//! What `ustack bench` prints: the table (with c1m's own figures and the ustack/Linux
//! ratios under it) or, with `--json`, one JSON object per server and scenario.

use serde_json::{Value, json};

use super::args::{ALL_SCENARIOS, Args, MODED_SCENARIOS};
use super::outcome::Outcome;
use super::{c1m, kernel_link, shm};

/// A Linux mode asked for that this machine could not run (io_uring on a kernel without
/// it), and why.
#[derive(Debug)]
pub struct Skipped {
    pub scenario: &'static str,
    pub mode: &'static str,
    pub reason: String,
}

/// Print the outcomes: one JSON array with `--json`, the table otherwise.
pub fn print(outcomes: &[Outcome], skipped: &[Skipped], args: &Args) -> anyhow::Result<()> {
    if args.json {
        let all: Vec<Value> = representatives(outcomes)
            .into_iter()
            .map(|o| {
                let mut v = o.to_json();
                if o.server == "linux" {
                    let modes: Vec<&Outcome> = linux_runs(outcomes, o.scenario).collect();
                    let mut list: Vec<Value> = modes.iter().map(|m| m.mode_json()).collect();
                    list.extend(skipped.iter().filter(|s| s.scenario == o.scenario).map(
                        |s| json!({ "mode": s.mode, "available": false, "reason": s.reason }),
                    ));
                    v["linux_modes"] = json!(list);
                    v["linux_best_mode"] = json!(o.mode);
                } else if let Some(l) = best_linux(outcomes, o.scenario) {
                    v["vs_linux"] = vs_linux(o, l);
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        print_table(outcomes, skipped, args);
    }
    Ok(())
}

/// ustack's run `u` against Linux's best `l` of the same scenario: the ratio of their
/// rates (messages/s, connections/s or Gbit/s), and what Linux ran as (mode, link,
/// connections, shards).
fn vs_linux(u: &Outcome, l: &Outcome) -> Value {
    json!({
        "ratio": u.rate() / l.rate(),
        "of": u.rate_unit(),
        "linux_mode": l.mode,
        "linux_link": l.link,
        "linux_conns": l.conns,
        "linux_shards": l.shards,
    })
}

/// Linux's runs of `scenario`, one a mode.
fn linux_runs<'a>(outcomes: &'a [Outcome], scenario: &'a str) -> impl Iterator<Item = &'a Outcome> {
    outcomes
        .iter()
        .filter(move |o| o.server == "linux" && o.scenario == scenario)
}

/// Linux's best run of `scenario`: the verified one with the highest rate (messages/s,
/// connections/s or Gbit/s); an unverified one only if none verified.
pub fn best_linux<'a>(outcomes: &'a [Outcome], scenario: &'a str) -> Option<&'a Outcome> {
    let key = |o: &&Outcome| (o.verified, o.rate());
    linux_runs(outcomes, scenario).max_by(|a, b| {
        key(a)
            .partial_cmp(&key(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    })
}

/// One outcome per server and scenario, in the order run: Linux's best mode stands for
/// its scenario.
pub fn representatives(outcomes: &[Outcome]) -> Vec<&Outcome> {
    let mut out: Vec<&Outcome> = Vec::new();
    for o in outcomes {
        if out
            .iter()
            .any(|r| r.server == o.server && r.scenario == o.scenario)
        {
            continue;
        }
        out.push(if o.server == "linux" {
            best_linux(outcomes, o.scenario).unwrap_or(o)
        } else {
            o
        });
    }
    out
}

impl Outcome {
    /// The outcome as `--json` prints it (docs/bench.md lists the fields).
    fn to_json(&self) -> Value {
        let latency = match (
            self.percentile_us(0.5),
            self.percentile_us(0.99),
            self.percentile_us(0.999),
        ) {
            (Some(p50), Some(p99), Some(p999)) => json!({ "p50": p50, "p99": p99, "p999": p999 }),
            _ => Value::Null,
        };
        json!({
            "scenario": self.scenario,
            "server": self.server,
            "link": self.link,
            "family": self.family,
            "addresses": self.addresses,
            "profile": self.profile,
            "shards": self.shards,
            "cpus": self.cpus,
            "verified": self.verified,
            "conns": self.conns,
            "msg_size": if self.scenario == "stream" { Value::Null } else { json!(self.msg_size) },
            "duration_s": self.elapsed.as_secs_f64(),
            "round_trips": if self.msgs_per_s().is_some() { json!(self.count) } else { Value::Null },
            "connections": if matches!(self.scenario, "cps" | "c1m") { json!(self.count) } else { Value::Null },
            "bytes": self.bytes,
            "throughput_gbps": self.gbps(),
            "msgs_per_s": self.msgs_per_s(),
            "conns_per_s": self.conns_per_s(),
            "latency_us": latency,
            "server_cpu_s": self.server_cpu.map(|d| d.as_secs_f64()),
            "mode": self.mode,
            "api": self.api,
            "machine_cpu_s": self.machine_cpu.map(|d| d.as_secs_f64()),
            "cpu_per_msg_ns": self.cpu_per_msg_ns(),
            "process_cpu_s": self.process_cpu.map(|d| d.as_secs_f64()),
            "process_cpu_per_msg_ns": self.process_cpu_per_msg_ns(),
            "latency_of": latency_of(self.scenario),
            "linux_modes": Value::Null,
            "linux_best_mode": Value::Null,
            "vs_linux": Value::Null,
            "server_time_wait": self.time_wait,
            "server_mem_bytes": self.c1m.as_ref().map(|c| c.mem_bytes),
            "server_mem_per_conn_bytes": self.mem_per_conn(),
            "server_mem": self.c1m.as_ref().map_or(Value::Null, |c| c.mem_detail.clone()),
            "phases_s": self.c1m.as_ref().map_or(Value::Null, |c| json!({
                "establish": c.establish.as_secs_f64(),
                "exchange": c.exchange.as_secs_f64(),
                "close": c.close.as_secs_f64(),
            })),
            "syn_flood": self.c1m.as_ref().map_or(Value::Null, |c| c.syn_flood.clone()),
            "surge": self.c1m.as_ref().map_or(Value::Null, |c| c.surge.clone()),
            "active": self.c1m.as_ref().map_or(Value::Null, |c| c.active.clone()),
            "counters": self.counters.clone().unwrap_or(Value::Null),
            "per_shard": self.per_shard.clone(),
            "client_counters": self.client_counters.clone().unwrap_or(Value::Null),
            "faults": self.faults,
            "link_stats": self.link_stats,
            "contend": self.contend,
        })
    }
}

/// What one latency sample of `scenario` times.
fn latency_of(scenario: &str) -> Value {
    match scenario {
        "udp-rr" => json!("round trip"),
        "pingpong" => json!("round: one message on every connection, all echoes back"),
        "cps" => json!("round: every connection of the round opened, answered and closed"),
        "c1m" => json!("exchange: one connection's message and its echo"),
        _ => Value::Null,
    }
}

impl Outcome {
    /// One entry of `linux_modes`: what this mode's run measured.
    fn mode_json(&self) -> Value {
        json!({
            "mode": self.mode,
            "available": true,
            "verified": self.verified,
            "duration_s": self.elapsed.as_secs_f64(),
            "msgs_per_s": self.msgs_per_s(),
            "conns_per_s": self.conns_per_s(),
            "throughput_gbps": self.gbps(),
            "p50": self.percentile_us(0.5),
            "p99": self.percentile_us(0.99),
            "p999": self.percentile_us(0.999),
            "server_cpu_s": self.server_cpu.map(|d| d.as_secs_f64()),
            "machine_cpu_s": self.machine_cpu.map(|d| d.as_secs_f64()),
            "cpu_per_msg_ns": self.cpu_per_msg_ns(),
            "process_cpu_s": self.process_cpu.map(|d| d.as_secs_f64()),
            "process_cpu_per_msg_ns": self.process_cpu_per_msg_ns(),
            "server_waits": self.server_waits,
            "contend": self.contend,
        })
    }
}

/// How ustack's side waited for work, in words.
fn ustack_how(o: &Outcome) -> String {
    match o.mode {
        "inline" => format!("{}, client and server in one thread", o.link),
        "tokio" => format!("{}, the stack driven inside tokio", o.link),
        "sleep" => format!("{}, sleeping on its doorbell or device at once", o.link),
        "adaptive" => format!(
            "{}, busy-polling adaptively (at most {} µs, only while work keeps arriving) \
             then sleeping",
            o.link,
            shm::BUSY_POLL.as_micros()
        ),
        _ => format!(
            "{}, busy-polling {} µs then sleeping",
            o.link,
            shm::BUSY_POLL.as_micros()
        ),
    }
}

/// The address family the runs used, and a connection's addresses on each server (as
/// its client saw them).
fn print_family(outcomes: &[Outcome], args: &Args) {
    let family = if args.ipv6 { "IPv6" } else { "IPv4" };
    let mut said: Vec<String> = Vec::new();
    for server in ["ustack", "linux"] {
        let addrs = outcomes
            .iter()
            .filter(|o| o.server == server)
            .find_map(|o| {
                Some((
                    o.addresses["local"].as_str()?,
                    o.addresses["peer"].as_str()?,
                ))
            });
        if let Some((local, peer)) = addrs {
            said.push(format!("{server} {local} -> {peer}"));
        }
    }
    if args.ipv6 || !said.is_empty() {
        println!("{family}: {}", said.join("; "));
    }
}

fn print_table(outcomes: &[Outcome], skipped: &[Skipped], args: &Args) {
    println!();
    let linux = "Linux over loopback (the server in processes of its own)";
    if args.api == "tokio" && outcomes.iter().any(|o| o.scenario == "c1m") {
        println!(
            "tokio (--api tokio): c1m's servers are tokio, a task per connection, in processes \
             of their own: ustack through ustack-tokio's LocalStack over shm, Linux through \
             tokio::net over loopback; the clients are c1m's"
        );
    } else if args.api == "tokio" {
        println!(
            "tokio (--api tokio): server and client each a current-thread runtime on a thread \
             of its own, in the bench process; ustack through ustack-tokio's LocalStack over \
             shm (the stack driven inside tokio, waiting in its reactor), Linux through \
             tokio::net over loopback"
        );
    } else if args.link == "tun" {
        let offloads = if args.no_offload {
            "without offloads"
        } else {
            "with offloads"
        };
        println!(
            "ustack over TUN, Linux over veth ({offloads}; the server in a namespace, a \
             kernel client in another, its socket written from the bench process)"
        );
    } else if matches!(args.link.as_str(), "packet" | "xdp") {
        let how = if args.link == "packet" {
            "AF_PACKET sockets with TPACKET_V3 rings"
        } else {
            "AF_XDP sockets in copy mode"
        };
        println!(
            "ustack over {} ({how} on a veth end), Linux over veth (the kernel client's end \
             without transmit offloads on both; the server in a namespace, its socket \
             written from the bench process)",
            args.link
        );
    } else if !args.server.iter().any(|s| s == "ustack") {
        println!("{linux}");
    } else if args.link == "shm" && args.shards > 1 {
        println!(
            "ustack over shm, the server on {} shards (a thread, a queue pair and a stack \
             each; the client steers flows to them by RSS), all busy-polling {} µs; Linux \
             over loopback, the udp-rr and pingpong servers with {} SO_REUSEPORT workers",
            args.shards,
            shm::BUSY_POLL.as_micros(),
            args.shards
        );
    } else if args.link == "shm" {
        println!(
            "ustack over shm (server and client on their own threads, busy-polling {} µs); \
             {linux}",
            shm::BUSY_POLL.as_micros()
        );
    } else {
        println!("ustack over sim (client and server in one thread on one core); {linux}");
    }
    if kernel_link::LINKS.contains(&args.link.as_str()) {
        let conns = args.conns.unwrap_or(1);
        println!(
            "{conns} connection(s), each written from a thread of its own; {} queue(s) on \
             each interface, a ustack server shard on each (the kernel picks a flow's \
             queue by its hash; the run's flows_per_shard in --json)",
            args.shards
        );
    }
    if outcomes
        .iter()
        .any(|o| o.server == "linux" && o.api == "native" && MODED_SCENARIOS.contains(&o.scenario))
    {
        let said: Vec<String> = args
            .linux_modes()
            .iter()
            .map(|m| {
                let cpus = m.cpus().map_or(String::new(), |(s, c)| {
                    format!(" (server on CPU {s}, client on CPU {c})")
                });
                format!("{}: {}{cpus}", m.name(), m.describe())
            })
            .collect();
        println!("Linux modes: {}", said.join("; "));
    }
    print_family(outcomes, args);
    let faults = args.faults();
    if !faults.is_empty() {
        let said: Vec<String> = faults
            .iter()
            .map(|(name, v)| match *name {
                "--delay" => format!("delay {v} ms"),
                _ => format!("{} {v}%", &name[2..]),
            })
            .collect();
        println!(
            "sim faults, each direction: {} (seed {})",
            said.join(", "),
            args.seed
        );
    }
    println!(
        "{:<9} {:<7} {:<9} {:<9} {:>5} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8}",
        "scenario",
        "server",
        "link",
        "mode",
        "conns",
        "msgs/s",
        "conns/s",
        "Gbit/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "CPU ns/msg",
        "own ns/msg",
        "verified"
    );
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_owned(), |v| format!("{v:.prec$}"));
    for o in outcomes {
        println!(
            "{:<9} {:<7} {:<9} {:<9} {:>5} {:>12} {:>10} {:>9.2} {:>9} {:>9} {:>9} {:>10} {:>10} {:>8}",
            o.scenario,
            o.server,
            o.link,
            o.mode,
            o.conns,
            opt(o.msgs_per_s(), 0),
            opt(o.conns_per_s(), 0),
            o.gbps(),
            opt(o.percentile_us(0.50), 2),
            opt(o.percentile_us(0.99), 2),
            opt(o.percentile_us(0.999), 2),
            opt(o.cpu_per_msg_ns(), 0),
            opt(o.process_cpu_per_msg_ns(), 0),
            if o.verified { "yes" } else { "NO" }
        );
    }
    for s in skipped {
        println!(
            "{:<9} linux   {:<9} {:<9} not run: {}",
            s.scenario, "loopback", s.mode, s.reason
        );
    }
    let scenarios: Vec<&str> = outcomes.iter().map(|o| o.scenario).collect();
    let mut said = Vec::new();
    for (scenario, what) in [
        ("udp-rr", "udp-rr's per round trip"),
        (
            "pingpong",
            "pingpong's per round (one message on every connection)",
        ),
        (
            "cps",
            "cps's per round (every connection of the round opened and closed)",
        ),
    ] {
        if scenarios.contains(&scenario) {
            said.push(what);
        }
    }
    if !said.is_empty() {
        println!("latency: {}", said.join("; "));
    }
    if outcomes.iter().any(|o| o.machine_cpu.is_some()) {
        println!(
            "CPU ns/msg: the whole machine's busy CPU time over the run (/proc/stat, every core) \
             per message (cps: per connection); own ns/msg: the bench's and the server's \
             processes' only (what other work on the machine does not inflate)"
        );
    }
    print_c1m(outcomes);
    for scenario in ALL_SCENARIOS {
        let u = outcomes
            .iter()
            .find(|o| o.scenario == scenario && o.server == "ustack");
        if let (Some(u), Some(l)) = (u, best_linux(outcomes, scenario)) {
            let modes: Vec<&Outcome> = linux_runs(outcomes, scenario).collect();
            let mut how = format!("ustack over {}; Linux {}", ustack_how(u), l.mode);
            if kernel_link::LINKS.contains(&u.link) {
                // The kernel links: Linux over veth, as many connections and queues.
                how += &format!(
                    " over {}, {} connection(s), {} queue(s) a side",
                    l.link, l.conns, l.shards
                );
            }
            if modes.len() > 1 {
                how = format!("{how}, the best of {}", modes.len());
                let each: Vec<String> = modes
                    .iter()
                    .map(|m| format!("{} {:.2}x", m.mode, u.rate() / m.rate()))
                    .collect();
                how += &format!("; against each: {}", each.join(", "));
            }
            let how = format!(" ({how})");
            if let (Some(um), Some(lm)) = (u.mem_per_conn(), l.mem_per_conn()) {
                println!(
                    "{scenario}: ustack/linux {:.2}x conns/s, {:.2}x p50 latency, {:.2}x memory per connection{how}",
                    u.conns_per_s().unwrap_or(0.0) / l.conns_per_s().unwrap_or(1.0),
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0),
                    um / lm.max(1.0),
                );
                continue;
            }
            if let (Some(uc), Some(lc)) = (u.conns_per_s(), l.conns_per_s()) {
                println!(
                    "{scenario}: ustack/linux {:.2}x conns/s, {:.2}x p50 round latency{how}",
                    uc / lc,
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0)
                );
                continue;
            }
            match (u.msgs_per_s(), l.msgs_per_s()) {
                (Some(um), Some(lm)) => println!(
                    "{scenario}: ustack/linux {:.2}x msgs/s, {:.2}x p50 {} latency{how}",
                    um / lm,
                    u.percentile_us(0.5).unwrap_or(0.0) / l.percentile_us(0.5).unwrap_or(1.0),
                    if scenario == "udp-rr" {
                        "round-trip"
                    } else {
                        "round"
                    },
                ),
                _ => println!(
                    "{scenario}: ustack/linux {:.2}x Gbit/s{how}",
                    u.gbps() / l.gbps()
                ),
            }
        }
    }
}

/// c1m's own figures under the table: the phases, the server's memory and CPU time.
fn print_c1m(outcomes: &[Outcome]) {
    let c1m: Vec<(&Outcome, &c1m::C1m)> = outcomes
        .iter()
        .filter_map(|o| Some((o, o.c1m.as_ref()?)))
        .collect();
    if c1m.is_empty() {
        return;
    }
    println!(
        "{:<9} {:<7} {:>8} {:>12} {:>11} {:>8} {:>14} {:>10} {:>11}",
        "c1m",
        "server",
        "conns",
        "establish s",
        "exchange s",
        "close s",
        "server mem MiB",
        "B/conn",
        "server cpu s"
    );
    for (o, c) in c1m {
        println!(
            "{:<9} {:<7} {:>8} {:>12.3} {:>11.3} {:>8.3} {:>14.1} {:>10.0} {:>11}",
            "",
            o.server,
            o.conns,
            c.establish.as_secs_f64(),
            c.exchange.as_secs_f64(),
            c.close.as_secs_f64(),
            c.mem_bytes as f64 / f64::from(1u32 << 20),
            o.mem_per_conn().unwrap_or(0.0),
            o.server_cpu
                .map_or("-".to_owned(), |d| format!("{:.3}", d.as_secs_f64())),
        );
    }
    for (o, c) in outcomes.iter().filter_map(|o| Some((o, o.c1m.as_ref()?))) {
        println!("{}", c1m_memory_line(o.server, o.conns, &c.mem_detail));
        if !c.active.is_null() {
            println!("{}", c1m_active_line(&c.active));
        }
        if c.mem_detail["held_accounting"].is_object() {
            println!(
                "the server's accounting holding every connection, as `ustack stat --memory`:"
            );
            crate::inspect::print_memory(&c.mem_detail["held_accounting"]);
        }
    }
}

/// c1m `--active`: the active connections' pingpong alone and beside the idle ones.
fn c1m_active_line(a: &Value) -> String {
    let phase = |p: &Value| {
        format!(
            "{:.0} msgs/s, p99 round {:.0} µs",
            p["msgs_per_s"].as_f64().unwrap_or(0.0),
            p["round_latency_us"]["p99"].as_f64().unwrap_or(0.0)
        )
    };
    format!(
        "{} active connections: alone {}; beside {} idle {}: {:.1}% of the messages/s, \
         {:.1}% of the p99 (target: at least 90%, at most 110%: {})",
        a["conns"],
        phase(&a["alone"]),
        a["idle_conns"],
        phase(&a["beside_idle"]),
        100.0 * a["msgs_per_s_ratio"].as_f64().unwrap_or(0.0),
        100.0 * a["p99_ratio"].as_f64().unwrap_or(0.0),
        if a["target_met"] == true {
            "met"
        } else {
            "not met"
        },
    )
}

/// c1m: the server's memory per connection as the kernel sees it (RSS, PSS; for Linux,
/// its slab) and, for ustack, as its own accounting sees it, kind by kind.
fn c1m_memory_line(server: &str, conns: u32, m: &Value) -> String {
    let per = |v: &Value| {
        v.as_f64()
            .map_or("-".to_owned(), |b| format!("{:.0}", b / f64::from(conns)))
    };
    let mut line = format!(
        "{server} server memory per connection: RSS {} B, PSS {} B",
        per(&m["server_rss_bytes"]),
        per(&m["server_pss_bytes"]),
    );
    if let Some(kinds) = m["stack_kinds"].as_object() {
        let mut kinds: Vec<(&String, i64)> = kinds
            .iter()
            .map(|(name, k)| (name, k["bytes"].as_i64().unwrap_or(0)))
            .filter(|(_, b)| *b != 0)
            .collect();
        kinds.sort_by_key(|(_, b)| -b);
        let said: Vec<String> = kinds
            .iter()
            .map(|(name, b)| format!("{name} {:.0}", *b as f64 / f64::from(conns)))
            .collect();
        line += &format!(
            "; its own accounting {} B ({})",
            per(&m["stack_bytes"]),
            said.join(", ")
        );
    } else if m["kernel_slab_bytes"].is_i64() {
        line += &format!(
            "; kernel slab {} B (half of it counted as the server's)",
            per(&m["kernel_slab_bytes"])
        );
    }
    line
}
