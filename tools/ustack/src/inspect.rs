//! `ustack stat`, `ustack ss` and `ustack capture`: a running `ustack serve` seen the way
//! Linux shows itself (`/proc/net/snmp`, `nstat`, `ss`, `tcpdump -w`), through its
//! control socket ([`crate::control`]).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use ustack_obs::pcap;

use crate::control;

// ---- stat -------------------------------------------------------------------------------

/// Arguments of `ustack stat`.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The counters as one JSON object (tables keyed by Linux's names) instead.
    #[arg(long)]
    json: bool,
    /// Like `nstat`: only the counters that changed since the last `ustack stat --delta`
    /// against the same instance (the first time: since it started), with their rate per
    /// second. The last values are kept beside the control socket (`<socket>.nstat`).
    #[arg(long, conflicts_with = "memory")]
    delta: bool,
    /// With --delta, also the counters that did not change (`nstat -z`).
    #[arg(short = 'z', long, requires = "delta")]
    zeros: bool,
    /// Memory by kind, summed over the shards: TCBs, socket buffers, the free pool,
    /// TIME-WAIT records, SYN-queue requests, tables, UDP. That is the stack's memory only:
    /// the server's own buffers (an HTTP response being built, a file being read) are not
    /// in the table; the process's resident size, printed below it, includes everything.
    #[arg(long)]
    memory: bool,
    /// The IPv6 counters (Ip6, Icmp6) in the format of `/proc/net/snmp6` instead.
    #[arg(long, conflicts_with_all = ["memory", "delta", "json"])]
    snmp6: bool,
    /// The instance's control socket (see `ustack serve --help`).
    #[arg(long)]
    control: Option<PathBuf>,
}

/// Runs `ustack stat`.
pub fn stat(args: &StatArgs) -> anyhow::Result<ExitCode> {
    let path = control::path(args.control.as_deref());
    if args.memory {
        let v = control::request(&path, &json!({ "cmd": "memory" }))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print_memory(&v);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let v = control::request(&path, &json!({ "cmd": "stat" }))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v["counters"])?);
    } else if args.snmp6 {
        print!("{}", v["snmp6"].as_str().unwrap_or_default());
    } else if args.delta {
        let history = PathBuf::from(format!("{}.nstat", path.display()));
        print_delta(&v["counters"], &history, args.zeros)?;
    } else {
        print!(
            "{}{}",
            v["snmp"].as_str().unwrap_or_default(),
            v["netstat"].as_str().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `ustack stat --memory`'s table, from the control socket's `memory` answer (`ustack
/// bench c1m` prints its server's the same way).
pub fn print_memory(v: &Value) {
    let kinds: Vec<&Value> = v["kinds"].as_array().into_iter().flatten().collect();
    // The first column fits the longest kind's name (`tcb_active_free` is 15).
    let w = kinds
        .iter()
        .filter_map(|k| k["kind"].as_str())
        .map(str::len)
        .fold("total".len(), usize::max);
    println!("{:<w$} {:>12} {:>14}", "kind", "count", "bytes");
    let mut tcbs = 0;
    for k in kinds {
        let count = k["count"].as_u64().unwrap_or(0);
        if k["kind"] == "tcb" {
            tcbs = count;
        }
        println!(
            "{:<w$} {:>12} {:>14}",
            k["kind"].as_str().unwrap_or("?"),
            count,
            k["bytes"].as_u64().unwrap_or(0)
        );
    }
    let total = v["total_bytes"].as_u64().unwrap_or(0);
    println!("{:<w$} {:>12} {:>14}", "total", "", total);
    if let Some(each) = total.checked_div(tcbs) {
        println!(
            "per connection: {each} bytes of the server's memory, all of it counted \
             ({tcbs} connections over {} shard(s))",
            v["shards"]
        );
    }
    // The table is the stack's, the runtime's and the server's heap; the RSS has the rest.
    match v["process_rss_bytes"].as_u64() {
        Some(rss) => println!(
            "process RSS: {rss} bytes (everything: the table's heap as far as it is touched, \
             allocator slack, code, libraries, the link's rings; the table counts the \
             stack, the runtime's poller and timers and the server's connections)"
        ),
        None => println!(
            "(the table counts the stack, the runtime's poller and timers and the server's \
             connections; not allocator slack, code or the link's rings)"
        ),
    }
}

/// Flatten `{"Tcp": {"InSegs": 3}}` into nstat's names (`TcpInSegs`); constants (negative
/// values) and the drop reasons are not counters nstat shows.
fn flatten(counters: &Value) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (table, fields) in counters.as_object().into_iter().flatten() {
        if table == "Drops" {
            continue;
        }
        for (name, value) in fields.as_object().into_iter().flatten() {
            if let Some(n) = value.as_u64() {
                out.insert(format!("{table}{name}"), n);
            }
        }
    }
    out
}

fn print_delta(counters: &Value, history: &PathBuf, zeros: bool) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let current = flatten(counters);
    let (then, before): (Option<f64>, BTreeMap<String, u64>) =
        match std::fs::read_to_string(history) {
            Ok(text) => {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let before = v["counters"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                    .collect();
                (v["time"].as_f64(), before)
            }
            Err(_) => (None, BTreeMap::new()),
        };
    let elapsed = then.map(|t| now - t).filter(|e| *e > 0.0);
    println!("#ustack");
    for (name, &value) in &current {
        // A counter that went down means the instance restarted: count from zero.
        let base = before
            .get(name)
            .copied()
            .filter(|&b| b <= value)
            .unwrap_or(0);
        let delta = value - base;
        if delta == 0 && !zeros {
            continue;
        }
        let rate = elapsed.map_or(0.0, |e| delta as f64 / e);
        println!("{name:<32}{delta:<19}{rate:.1}");
    }
    let saved = json!({ "time": now, "counters": current });
    std::fs::write(history, serde_json::to_string(&saved)?)
        .with_context(|| format!("saving {}", history.display()))?;
    Ok(())
}

// ---- ss ---------------------------------------------------------------------------------

/// Arguments of `ustack ss`.
#[derive(Debug, clap::Args)]
pub struct SsArgs {
    /// Listening sockets only.
    #[arg(short = 'l', long)]
    listening: bool,
    /// Listening and non-listening sockets.
    #[arg(short = 'a', long, conflicts_with = "listening")]
    all: bool,
    /// TCP sockets (the default when neither -t nor -u is given).
    #[arg(short = 't', long)]
    tcp: bool,
    /// UDP sockets.
    #[arg(short = 'u', long)]
    udp: bool,
    /// Socket memory: `skmem:(r<rmem>,rb<rcvbuf>,w<queued>,tb<sndbuf>)`.
    #[arg(short = 'm', long)]
    memory: bool,
    /// TCP internals: options, rto, rtt, mss, cwnd, ssthresh, windows, retransmissions.
    #[arg(short = 'i', long)]
    info: bool,
    /// Timers (TIME-WAIT's time left).
    #[arg(short = 'o', long)]
    options: bool,
    /// One JSON array of sockets instead.
    #[arg(long)]
    json: bool,
    /// The instance's control socket (see `ustack serve --help`).
    #[arg(long)]
    control: Option<PathBuf>,
}

/// Runs `ustack ss`.
pub fn ss(args: &SsArgs) -> anyhow::Result<ExitCode> {
    let path = control::path(args.control.as_deref());
    let v = control::request(&path, &json!({ "cmd": "ss" }))?;
    let (tcp, udp) = (args.tcp || !args.udp, args.udp);
    let shown: Vec<&Value> = v["sockets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| match s["proto"].as_str() {
            Some("tcp") => tcp,
            Some("udp") => udp,
            _ => false,
        })
        .filter(|s| {
            // As ss: listening sockets (and unconnected UDP ones) only with -l or -a.
            let listening = matches!(s["state"].as_str(), Some("LISTEN" | "UNCONN"));
            args.all || listening == args.listening
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&shown)?);
        return Ok(ExitCode::SUCCESS);
    }
    let netid = udp;
    if netid {
        print!("{:<6} ", "Netid");
    }
    println!(
        "{:<10} {:>6} {:>6} {:>21} {:>21}",
        "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port"
    );
    for s in shown {
        if netid {
            print!("{:<6} ", s["proto"].as_str().unwrap_or("?"));
        }
        print!(
            "{:<10} {:>6} {:>6} {:>21} {:>21}",
            s["state"].as_str().unwrap_or("?"),
            s["recv_q"],
            s["send_q"],
            s["local"].as_str().unwrap_or("?"),
            s["peer"].as_str().unwrap_or("*:*"),
        );
        if args.options
            && let Some(ms) = s["timewait_ms"].as_u64()
        {
            print!(" timer:(timewait,{:.1}sec,0)", ms as f64 / 1000.0);
        }
        println!();
        if args.memory
            && let Some(m) = s["skmem"].as_object()
        {
            println!(
                "\t skmem:(r{},rb{},w{},tb{})",
                m["r"], m["rb"], m["w"], m["tb"]
            );
        }
        if args.info
            && let Some(i) = s["info"].as_object()
        {
            println!("\t{}", info_line(i));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The `ss -i` line: `ts sack wscale:7,7 rto:201 rtt:0.052 mss:1460 cwnd:10 ...`.
fn info_line(i: &serde_json::Map<String, Value>) -> String {
    let mut parts = Vec::new();
    if i["timestamps"] == true {
        parts.push("ts".to_owned());
    }
    if i["sack"] == true {
        parts.push("sack".to_owned());
    }
    if let Some(w) = i["wscale"].as_array() {
        parts.push(format!("wscale:{},{}", w[0], w[1]));
    }
    parts.push(format!("rto:{}", i["rto_ms"]));
    if let Some(us) = i["rtt_us"].as_u64() {
        parts.push(format!("rtt:{:.3}", us as f64 / 1000.0));
    }
    parts.push(format!("mss:{}", i["mss"]));
    parts.push(format!("cwnd:{}", i["cwnd"]));
    // Linux prints ssthresh only once it is set (below the "infinite" initial value).
    if let Some(t) = i["ssthresh"].as_u64().filter(|&t| t < 0x7fff_ffff) {
        parts.push(format!("ssthresh:{t}"));
    }
    parts.push(format!("snd_wnd:{}", i["snd_wnd"]));
    parts.push(format!("rcv_wnd:{}", i["rcv_wnd"]));
    if i["retransmits"].as_u64().is_some_and(|r| r > 0) {
        parts.push(format!("retrans:{}", i["retransmits"]));
    }
    parts.join(" ")
}

// ---- capture ------------------------------------------------------------------------------

/// Arguments of `ustack capture`.
#[derive(Debug, clap::Args)]
pub struct CaptureArgs {
    /// The pcap file to write (`-`: standard output), like `tcpdump -w`.
    #[arg(short = 'w', long = "write")]
    file: PathBuf,
    /// Stop after this many packets.
    #[arg(short = 'c', long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Stop after this long (e.g. 10s, 500ms). Default: 10 s unless -c is given.
    #[arg(long, value_parser = crate::serve::parse_duration)]
    duration: Option<Duration>,
    /// The instance's control socket (see `ustack serve --help`).
    #[arg(long)]
    control: Option<PathBuf>,
}

/// Runs `ustack capture`.
pub fn capture(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    let path = control::path(args.control.as_deref());
    let duration = match (args.duration, args.count) {
        (Some(d), _) => Some(d),
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs(10)),
    };
    let mut stream = control::connect(&path)?;
    let req = json!({
        "cmd": "capture",
        "count": args.count,
        "seconds": duration.map(|d| d.as_secs_f64()),
    });
    stream.write_all(format!("{req}\n").as_bytes())?;
    // The pcap file header comes as soon as the capture is on (or a line of JSON with an
    // error): say so, as tcpdump says it is listening, then read to the end.
    let mut data = Vec::new();
    (&mut stream)
        .take(pcap::FILE_HEADER_LEN as u64)
        .read_to_end(&mut data)?;
    if data.first() == Some(&b'{') {
        stream.read_to_end(&mut data)?;
        let v: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
        bail!("{}", v["error"].as_str().unwrap_or("a malformed answer"));
    }
    if data.len() == pcap::FILE_HEADER_LEN {
        let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
        let link = match word(20) {
            1 => "EN10MB (Ethernet)".to_owned(),
            101 => "RAW (Raw IP)".to_owned(),
            other => other.to_string(),
        };
        eprintln!(
            "capturing from {}, link-type {link}, snapshot length {} bytes",
            path.display(),
            word(16)
        );
    }
    stream.read_to_end(&mut data)?;
    let packets = pcap::count_records(&data).context("the capture stream is not a pcap file")?;
    if args.file.as_os_str() == "-" {
        std::io::stdout().write_all(&data)?;
    } else {
        std::fs::write(&args.file, &data)
            .with_context(|| format!("writing {}", args.file.display()))?;
    }
    eprintln!("{packets} packets captured");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nstat_names_skip_constants_and_drops() {
        let v = json!({"Tcp": {"RtoMin": 200, "MaxConn": -1, "InSegs": 5},
                       "IcmpMsg": {"InType8": 2}, "Drops": {"IP_CSUM": 1}});
        let f = flatten(&v);
        assert_eq!(f.get("TcpInSegs"), Some(&5));
        assert_eq!(f.get("IcmpMsgInType8"), Some(&2));
        assert_eq!(f.get("TcpMaxConn"), None);
        assert!(!f.keys().any(|k| k.starts_with("Drops")));
    }
}
