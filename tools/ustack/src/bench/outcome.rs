//! What one server's run of one scenario measured ([`Outcome`]) and the figures derived
//! from it (messages/s, connections/s, percentiles, memory per connection).

use std::time::Duration;

use serde_json::Value;
use ustack_testkit::Pair;

use super::c1m;

/// What one server's run of one scenario measured.
pub struct Outcome {
    pub scenario: &'static str,
    pub server: &'static str,
    pub link: &'static str,
    pub conns: u32,
    pub msg_size: u16,
    /// Round trips (udp-rr, pingpong: messages echoed) or bytes (stream).
    pub count: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    pub verified: bool,
    /// Round-trip times in nanoseconds, sorted (empty for stream).
    pub rtt_ns: Vec<u64>,
    pub counters: Option<Value>,
    pub client_counters: Option<Value>,
    /// The server's CPU time, where it runs alone (ustack: its shard threads, summed).
    pub server_cpu: Option<Duration>,
    /// Server shards (ustack) or worker threads (Linux).
    pub shards: usize,
    /// ustack over shm: the CPUs its server shards and its client were pinned to,
    /// `{"server": [..], "client": ..}` (null when the bench had too few CPUs to pin).
    pub cpus: Value,
    /// ustack with several shards: each shard's CPU time and counters (null otherwise).
    pub per_shard: Value,
    /// cps: TIME-WAIT entries on the server's side at the end of the run (ustack: the
    /// server stack's records; Linux: the machine's, from /proc/net/sockstat).
    pub time_wait: Option<u64>,
    /// The sim link's faults and what they did (null without faults).
    pub faults: Value,
    /// Over shm: each end's link counters (`ShmStats`: frames sent, refused for want of
    /// a slot, ...), `{"server": .., "client": ..}`; null on other links.
    pub link_stats: Value,
    /// c1m: its phases and the server's memory growth.
    pub c1m: Option<c1m::C1m>,
    /// How the server (and its client) waited for work: a Linux mode (`epoll`, `busy`,
    /// `io_uring`; `blocking` for stream's sink), or ustack's (`busy-poll`; `inline` over
    /// sim, where client and server share a thread).
    pub mode: &'static str,
    /// `--api`: what the server and client are written against, `native` (ustack's event
    /// loop; Linux's sockets in the `mode`) or `tokio` (the same tokio code on both).
    pub api: &'static str,
    /// The whole machine's busy CPU time over the measured phase (/proc/stat, every core).
    pub machine_cpu: Option<Duration>,
    /// The CPU time of the run's own processes over the measured phase: the bench process
    /// (client; ustack's server threads over shm) and a server process of its own.
    pub process_cpu: Option<Duration>,
    /// Linux: how its server waited, by its own counters (`empty_polls`: polls that found
    /// nothing, when spinning; `uring_completions`: completions its ring reaped).
    pub server_waits: Value,
    /// `ipv4` or `ipv6` (`--ipv6`).
    pub family: &'static str,
    /// A client connection's (or flow's) two ends as the client saw them, `{"local",
    /// "peer"}` ([`super::linux::addresses_json`]); null where the run does not say.
    pub addresses: Value,
    /// `--contend`: the CPU hogs beside the run and the share they got (null without).
    pub contend: Value,
    /// `--profile`: where the ustack server's loop spent its time per message
    /// ([`super::profile`]); null without it.
    pub profile: Value,
}

impl Outcome {
    /// An echo scenario's result: `count` messages of `msg_size` bytes echoed over `conns`
    /// connections (or flows) in `elapsed`, with the round times `rtt_ns`.
    #[allow(clippy::too_many_arguments)]
    pub fn echo(
        scenario: &'static str,
        server: &'static str,
        link: &'static str,
        conns: u32,
        msg_size: usize,
        count: u64,
        elapsed: Duration,
        verified: bool,
        mut rtt_ns: Vec<u64>,
    ) -> Outcome {
        rtt_ns.sort_unstable();
        Outcome {
            scenario,
            server,
            link,
            conns,
            msg_size: msg_size as u16,
            count,
            bytes: count * 2 * msg_size as u64,
            elapsed,
            verified,
            rtt_ns,
            counters: None,
            client_counters: None,
            server_cpu: None,
            shards: 1,
            cpus: Value::Null,
            per_shard: Value::Null,
            time_wait: None,
            faults: Value::Null,
            link_stats: Value::Null,
            c1m: None,
            mode: "",
            api: "native",
            machine_cpu: None,
            process_cpu: None,
            server_waits: Value::Null,
            family: "ipv4",
            addresses: Value::Null,
            contend: Value::Null,
            profile: Value::Null,
        }
    }

    /// A stream's result: `bytes` moved one way on one connection in `elapsed`.
    pub fn stream(
        server: &'static str,
        link: &'static str,
        bytes: u64,
        elapsed: Duration,
        verified: bool,
    ) -> Outcome {
        // `count` is the bytes too: the one figure a stream has.
        let mut o = Outcome::echo(
            "stream",
            server,
            link,
            1,
            0,
            bytes,
            elapsed,
            verified,
            vec![],
        );
        o.bytes = bytes;
        o
    }

    /// The MIB snapshots of a sim pair's server (B) and client (A), and its link's faults.
    pub fn with_pair(mut self, p: &Pair) -> Outcome {
        self.faults = super::sim::faults(p);
        self.with_counters(p.b.mib().to_json(), p.a.mib().to_json())
    }

    pub fn with_time_wait(mut self, records: usize) -> Outcome {
        self.time_wait = Some(records as u64);
        self
    }

    /// Linux's TIME-WAIT sockets now (the `tw` of /proc/net/sockstat: the whole machine's,
    /// the bench's own on a quiet one).
    pub fn with_linux_time_wait(mut self) -> Outcome {
        self.time_wait = std::fs::read_to_string("/proc/net/sockstat")
            .ok()
            .and_then(|s| sockstat_tw(&s));
        self
    }

    pub fn with_counters(mut self, server: Value, client: Value) -> Outcome {
        self.counters = Some(server);
        self.client_counters = Some(client);
        self
    }

    /// Messages echoed per second (c1m: over its exchange phase).
    pub fn msgs_per_s(&self) -> Option<f64> {
        if let Some(c) = &self.c1m {
            return Some(self.count as f64 / c.exchange.as_secs_f64());
        }
        matches!(self.scenario, "udp-rr" | "pingpong")
            .then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    /// Connections per second (c1m: established, over its establishment phase).
    pub fn conns_per_s(&self) -> Option<f64> {
        if let Some(c) = &self.c1m {
            return Some(self.count as f64 / c.establish.as_secs_f64());
        }
        (self.scenario == "cps").then(|| self.count as f64 / self.elapsed.as_secs_f64())
    }
    /// c1m: the server's memory growth per connection, in bytes.
    pub fn mem_per_conn(&self) -> Option<f64> {
        let c = self.c1m.as_ref()?;
        Some(c.mem_bytes as f64 / f64::from(self.conns))
    }
    /// The unit its CPU cost is counted in: messages echoed, or connections for cps
    /// (none for stream).
    pub fn units(&self) -> Option<u64> {
        (self.scenario != "stream" && self.count > 0).then_some(self.count)
    }

    /// The machine's busy CPU time per message (per connection for cps), in nanoseconds:
    /// both ends and the kernel's work on every core, whoever it was charged to.
    pub fn cpu_per_msg_ns(&self) -> Option<f64> {
        Some(self.machine_cpu?.as_secs_f64() * 1e9 / self.units()? as f64)
    }

    /// The run's own processes' CPU time per message (per connection for cps), in
    /// nanoseconds: both ends, and the kernel's work charged to them.
    pub fn process_cpu_per_msg_ns(&self) -> Option<f64> {
        Some(self.process_cpu?.as_secs_f64() * 1e9 / self.units()? as f64)
    }

    /// The figure that ranks Linux's modes: messages/s, connections/s, or Gbit/s.
    pub fn rate(&self) -> f64 {
        self.msgs_per_s()
            .or_else(|| self.conns_per_s())
            .unwrap_or_else(|| self.gbps())
    }

    /// What [`rate`](Self::rate) counts: `msgs/s`, `conns/s` or `Gbit/s`.
    pub fn rate_unit(&self) -> &'static str {
        if self.msgs_per_s().is_some() {
            "msgs/s"
        } else if self.conns_per_s().is_some() {
            "conns/s"
        } else {
            "Gbit/s"
        }
    }

    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        if self.rtt_ns.is_empty() {
            return None;
        }
        let i = ((self.rtt_ns.len() as f64 * p).ceil() as usize).clamp(1, self.rtt_ns.len()) - 1;
        Some(self.rtt_ns[i] as f64 / 1000.0)
    }
}

/// The `tw` count of the `TCP:` line of /proc/net/sockstat.
fn sockstat_tw(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "tw")?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockstat_tw_is_read_from_the_tcp_line() {
        let s =
            "sockets: used 9\nTCP: inuse 1 orphan 0 tw 10790 alloc 1 mem 194\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tw(s), Some(10790));
        assert_eq!(sockstat_tw("TCP: inuse 1 orphan 0\n"), None);
        assert_eq!(sockstat_tw("UDP: tw 5\n"), None);
    }
}
