//! The executor: runs a [`Script`] against a [`Backend`], as packetdrill runs one.
//!
//! Events run in time order on the backend's clock, each at its script time from the
//! run's start: an inbound packet is built and handed over at its time; a system call is
//! made at its time and must return within the tolerance (a blocking call written
//! `start...end` runs on a thread of its own while later events go on, and must return by
//! `end`); an outbound packet must be the next packet the stack sends, within the
//! tolerance of its time (`*`: at any time, waiting at most [`Config::any_wait_us`]).
//!
//! Sequence numbers are relative to the ISNs, as in packetdrill: the remote ISN is the
//! executor's ([`Config::remote_isn`]), the local ISN is learned from each SYN the stack
//! sends where the script expects one (until the first, inbound acknowledgment numbers are
//! sent as written). SACK
//! blocks follow the same rule (relative to the ISN of the side whose data they cover).
//! Timestamps: inbound TSval is sent as written; inbound TSecr is offset by the
//! difference between the stack's first TSval and the script's value there, so a script
//! echoes `TS val 100` as `ecr 100`; outbound TSecr must equal what the script sent;
//! outbound TSval is not checked (packetdrill checks it against the clock's tick rate).
//!
//! Outbound segments are compared field by field: flags exactly, sequence number,
//! payload length, acknowledgment number, window (when the line writes `win`), options
//! (all of them, in order, unless the line writes `<...>`; none when it writes none).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::mpsc;

use crate::backend::{Backend, EpollEvent, PollFd, SysResult};
use crate::packet::{self, LiveBody, LivePacket, LiveTcp};
use crate::script::{
    Event, EventKind, Expect, Expr, Flags, IcmpSpec, PacketSpec, Quoted, Script, Syscall, TcpOpt,
    TcpSpec, When, fmt_time,
};
use crate::symbols;

/// The address family a script runs in: packetdrill's `--ip_version`. A script written for
/// IPv4 runs unchanged in all three (packetdrill's `config.c`):
///
/// | version | sockets | bind/connect addresses | packets on the wire |
/// |---|---|---|---|
/// | `ipv4` | `AF_INET` | IPv4 | IPv4 |
/// | `ipv4-mapped-ipv6` | `AF_INET6` | `::ffff:` + the IPv4 ones | IPv4 |
/// | `ipv6` | `AF_INET6` | IPv6 | IPv6 (ICMP is ICMPv6) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum IpVersion {
    /// `ipv4` (the default).
    #[default]
    Ipv4,
    /// `ipv4-mapped-ipv6`.
    Ipv4MappedIpv6,
    /// `ipv6`.
    Ipv6,
}

impl IpVersion {
    /// The three, in packetdrill's order.
    pub const ALL: [IpVersion; 3] = [IpVersion::Ipv4, IpVersion::Ipv4MappedIpv6, IpVersion::Ipv6];

    /// From packetdrill's name (`ipv4`, `ipv4-mapped-ipv6`, `ipv6`).
    pub fn parse(name: &str) -> Option<IpVersion> {
        match name {
            "ipv4" => Some(IpVersion::Ipv4),
            "ipv4-mapped-ipv6" => Some(IpVersion::Ipv4MappedIpv6),
            "ipv6" => Some(IpVersion::Ipv6),
            _ => None,
        }
    }

    /// packetdrill's name.
    pub fn name(self) -> &'static str {
        match self {
            IpVersion::Ipv4 => "ipv4",
            IpVersion::Ipv4MappedIpv6 => "ipv4-mapped-ipv6",
            IpVersion::Ipv6 => "ipv6",
        }
    }

    /// The domain of the script's sockets (`socket(..., ...)` and `socket(AF_INET, ...)`).
    pub fn socket_domain(self) -> i32 {
        match self {
            IpVersion::Ipv4 => libc::AF_INET,
            _ => libc::AF_INET6,
        }
    }

    /// Whether packets on the wire are IPv6.
    pub fn wire_ipv6(self) -> bool {
        self == IpVersion::Ipv6
    }

    /// Why the script at `path` does not run in this family, if it does not: packetdrill's
    /// `run_all.py` rule, by file name: `*v4.pkt` runs over IPv4 only (`ipv4` and
    /// `ipv4-mapped-ipv6`: its packets are IPv4, e.g. ICMPv4 codes IPv6 has not), `*v6.pkt`
    /// over IPv6 only (`ipv6`).
    pub fn skips(self, path: &std::path::Path) -> Option<&'static str> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match self {
            IpVersion::Ipv6 if name.ends_with("v4.pkt") => Some("an IPv4-only script (*v4.pkt)"),
            IpVersion::Ipv4 | IpVersion::Ipv4MappedIpv6 if name.ends_with("v6.pkt") => {
                Some("an IPv6-only script (*v6.pkt)")
            }
            _ => None,
        }
    }
}

impl fmt::Display for IpVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The address family ([`IpVersion`]).
    pub ip_version: IpVersion,
    /// The stack's IPv4 address (packetdrill's default local address).
    pub local_ip: Ipv4Addr,
    /// The script's remote end over IPv4.
    pub remote_ip: Ipv4Addr,
    /// The stack's IPv6 address (`ipv6`): in packetdrill's local prefix,
    /// fd3d:fa7b:d17d::/48 (RFC 4193).
    pub local_ip6: Ipv6Addr,
    /// The script's remote end over IPv6 (`ipv6`): packetdrill's, 2001:db8::1 (RFC 3849).
    pub remote_ip6: Ipv6Addr,
    /// The port `bind(fd, ..., ...)` binds (packetdrill's `--bind_port`).
    pub local_port: u16,
    /// The remote end's port, and the one `connect(fd, ..., ...)` connects to.
    pub remote_port: u16,
    /// The remote end's ISN (the live sequence number of its relative 0).
    pub remote_isn: u32,
    /// How far from its script time an event may happen (packetdrill's
    /// `--tolerance_usecs`, 4 ms by default).
    pub tolerance_us: i64,
    /// How long an outbound packet at time `*` is waited for.
    pub any_wait_us: i64,
    /// How long a system call not written as blocking may take before the run gives up
    /// on it (its return time is still checked against the tolerance).
    pub call_wait_us: i64,
    /// The window of inbound segments whose line writes no `win`.
    pub default_win: u16,
    /// Print every packet and call to stderr as it happens.
    pub trace: bool,
    /// The latest script time a run may reach (every wait is bounded by it plus the
    /// tolerance and the waits above): 120 s.
    pub max_script_us: i64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ip_version: IpVersion::Ipv4,
            local_ip: Ipv4Addr::new(192, 168, 0, 1),
            remote_ip: Ipv4Addr::new(192, 0, 2, 1),
            local_ip6: Ipv6Addr::new(0xfd3d, 0xfa7b, 0xd17d, 0, 0, 0, 0, 1),
            remote_ip6: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
            local_port: 8080,
            remote_port: 48_879,
            remote_isn: 0x2f7a_3c41,
            tolerance_us: 4_000,
            any_wait_us: 5_000_000,
            call_wait_us: 2_000_000,
            default_win: 65_535,
            trace: false,
            max_script_us: 120_000_000,
        }
    }
}

impl Config {
    /// The stack's address on the wire (IPv6 under `ipv6`, else IPv4).
    pub fn local_wire(&self) -> IpAddr {
        if self.ip_version.wire_ipv6() {
            self.local_ip6.into()
        } else {
            self.local_ip.into()
        }
    }

    /// The remote end's address on the wire.
    pub fn remote_wire(&self) -> IpAddr {
        if self.ip_version.wire_ipv6() {
            self.remote_ip6.into()
        } else {
            self.remote_ip.into()
        }
    }

    /// `a` as the script's sockets see it: IPv4-mapped under `ipv4-mapped-ipv6`.
    fn socket_ip(&self, a: IpAddr) -> IpAddr {
        match (self.ip_version, a) {
            (IpVersion::Ipv4MappedIpv6, IpAddr::V4(v4)) => v4.to_ipv6_mapped().into(),
            _ => a,
        }
    }

    /// The address `bind(fd, ..., ...)` binds (packetdrill's `live_bind_ip`).
    pub fn bind_ip(&self) -> IpAddr {
        self.socket_ip(self.local_wire())
    }

    /// The address `connect(fd, ..., ...)` connects to (packetdrill's `live_connect_ip`).
    pub fn connect_ip(&self) -> IpAddr {
        self.socket_ip(self.remote_wire())
    }

    /// An IPv4 address a script writes (`inet_addr("A.B.C.D")`) in this family: as is
    /// under `ipv4`, IPv4-mapped under `ipv4-mapped-ipv6`; under `ipv6` the local and
    /// remote IPv4 addresses are the IPv6 ones, any other IPv4-mapped.
    pub fn script_ip(&self, a: Ipv4Addr) -> IpAddr {
        match self.ip_version {
            IpVersion::Ipv4 => a.into(),
            IpVersion::Ipv4MappedIpv6 => a.to_ipv6_mapped().into(),
            IpVersion::Ipv6 if a == self.local_ip => self.local_ip6.into(),
            IpVersion::Ipv6 if a == self.remote_ip => self.remote_ip6.into(),
            IpVersion::Ipv6 => a.to_ipv6_mapped().into(),
        }
    }

    /// The link's MTU: 1500, and 1520 under `ipv6` (as packetdrill's own runners pass
    /// `--mtu=1520` there), so that the MSS a stack announces is 1460 in every family and
    /// the scripts' `<mss 1460>` hold unchanged.
    pub fn mtu(&self) -> usize {
        if self.ip_version.wire_ipv6() {
            1520
        } else {
            1500
        }
    }

    /// Applies a script's `--name=value` lines: `--tolerance_usecs=N` and
    /// `--ip_version=ipv4|ipv4-mapped-ipv6|ipv6` are understood; anything else is refused (a script that relies
    /// on an option the runner ignored would pass for the wrong reason).
    pub fn apply_options(&mut self, options: &[(String, Option<String>)]) -> Result<(), String> {
        for (k, v) in options {
            match (k.as_str(), v.as_deref()) {
                ("tolerance_usecs", Some(n)) => {
                    self.tolerance_us = n
                        .parse()
                        .ok()
                        .filter(|&n: &i64| n > 0)
                        .ok_or_else(|| format!("--tolerance_usecs={n}: a positive number"))?;
                }
                ("ip_version", Some(v)) => {
                    self.ip_version = IpVersion::parse(v).ok_or_else(|| {
                        format!("--ip_version={v}: ipv4, ipv4-mapped-ipv6 or ipv6")
                    })?;
                }
                _ => {
                    return Err(format!(
                        "option --{k}{} is not supported (--tolerance_usecs, --ip_version)",
                        v.as_deref().map(|v| format!("={v}")).unwrap_or_default()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Why a run failed: the script line, and a packetdrill-style explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The line of the event that failed (0: the script as a whole).
    pub line: usize,
    /// What happened (may span lines: expected vs actual).
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for Failure {}

fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        line,
        message: message.into(),
    })
}

/// What a passing run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Events run.
    pub events: usize,
    /// Outbound packets matched.
    pub packets_matched: usize,
    /// Packets the stack sent that were not of the script's flow (skipped).
    pub packets_ignored: usize,
}

/// Checks that the executor can run every event of `script` (no shell commands, no
/// inline code, known system calls) before anything is sent.
pub fn check_supported(script: &Script) -> Result<(), Failure> {
    for e in &script.events {
        match &e.kind {
            EventKind::Shell(cmd) => {
                sysctl_command(cmd).or_else(|m| fail(e.line, m))?;
            }
            EventKind::Code(_) => {
                return fail(e.line, "inline %{ python }% checks are not supported");
            }
            EventKind::Syscall(s) if !SYSCALLS.contains(&s.name.as_str()) => {
                return fail(
                    e.line,
                    format!(
                        "system call `{}` is not supported ({})",
                        s.name,
                        SYSCALLS.join(", ")
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// The settings of a `` `sysctl -q NAME=VALUE ...` `` line (the one shell command the
/// runner takes: it sets the stack's tunables by Linux name, in the Linux backend's
/// namespace or in ustack's configuration); any other command is refused, since it would
/// configure the Linux host, not the stack under test.
pub fn sysctl_command(cmd: &str) -> Result<Vec<(String, String)>, String> {
    let refuse = || {
        format!(
            "shell commands are refused (`{cmd}`): they would configure the Linux host, not the stack under test; only `sysctl -q NAME=VALUE` is taken"
        )
    };
    let mut words = cmd.split_whitespace();
    if words.next() != Some("sysctl") {
        return Err(refuse());
    }
    let mut out = Vec::new();
    for w in words {
        if w == "-q" || w == "-w" {
            continue;
        }
        let (name, value) = w.split_once('=').ok_or_else(refuse)?;
        let ok_name = name.starts_with("net.")
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_');
        if !ok_name || value.is_empty() || !value.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "`{w}`: a sysctl is `net.NAME=NUMBER` (one number; names under net.)"
            ));
        }
        out.push((name.to_owned(), value.to_owned()));
    }
    if out.is_empty() {
        return Err(refuse());
    }
    Ok(out)
}

/// Checks that no event of `script` is due after `max_us` (a bound on the run's time).
pub fn check_duration(script: &Script, max_us: i64) -> Result<(), Failure> {
    for e in &script.events {
        let last = match (&e.when, &e.kind) {
            (_, EventKind::Syscall(Syscall { end: Some(end), .. })) => *end,
            (When::Range { end, .. }, _) => *end,
            (w, _) => w.start(),
        };
        if last > max_us {
            return fail(
                e.line,
                format!(
                    "the event is due at {}, past the run's limit of {}",
                    fmt_time(last),
                    fmt_time(max_us)
                ),
            );
        }
    }
    Ok(())
}

/// The system calls the executor knows.
pub const SYSCALLS: &[&str] = &[
    "socket",
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "read",
    "recv",
    "write",
    "send",
    "shutdown",
    "close",
    "getsockopt",
    "setsockopt",
    "fcntl",
    "poll",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
];

/// Runs `script` against `backend` with `config` (the script's own options applied on
/// top), then frees the backend.
pub fn run<B: Backend + 'static>(
    script: &Script,
    backend: Arc<B>,
    config: &Config,
) -> Result<Report, Failure> {
    let mut cfg = config.clone();
    cfg.apply_options(&script.options).or_else(|m| fail(0, m))?;
    check_supported(script)?;
    check_duration(script, cfg.max_script_us)?;
    let mut r = Runner {
        start: backend.now_us() as i64,
        backend: backend.clone(),
        flows: HashMap::new(),
        cfg,
        fds: HashMap::new(),
        pending: None,
        queue: VecDeque::new(),
        report: Report::default(),
    };
    // The sysctl lines before the first event set the stack up: the script's clock
    // starts after them (setting one in a namespace takes milliseconds).
    let setup = script
        .events
        .iter()
        .take_while(|e| matches!(e.kind, EventKind::Shell(_)))
        .count();
    let result = script.events[..setup]
        .iter()
        .try_for_each(|e| r.event(e))
        .and_then(|()| {
            r.start = r.backend.now_us() as i64;
            script.events[setup..].iter().try_for_each(|e| r.event(e))
        });
    let result = result.and_then(|()| r.finish_pending(None));
    backend.free();
    result.map(|()| r.report)
}

/// The script's flow and what has been learned about it.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Local address (on the wire).
    pub local_ip: IpAddr,
    /// Remote address (on the wire).
    pub remote_ip: IpAddr,
    /// The stack's port (learned from its first SYN when it connects).
    pub local_port: u16,
    /// The remote end's port.
    pub remote_port: u16,
    /// The remote ISN.
    pub remote_isn: u32,
    /// The stack's ISN, once seen.
    pub local_isn: Option<u32>,
    /// The stack's first TSval minus the script's value there, once seen.
    pub ts_offset: Option<u32>,
}

impl Flow {
    /// The flow before anything is learned.
    pub fn new(cfg: &Config) -> Flow {
        Flow {
            local_ip: cfg.local_wire(),
            remote_ip: cfg.remote_wire(),
            local_port: cfg.local_port,
            remote_port: cfg.remote_port,
            remote_isn: cfg.remote_isn,
            local_isn: None,
            ts_offset: None,
        }
    }

    fn local_off(&self) -> u32 {
        self.local_isn.unwrap_or(0)
    }

    /// Builds the packet an inbound line describes.
    pub fn inbound(&self, spec: &PacketSpec, default_win: u16) -> Result<Vec<u8>, String> {
        let (src, dst) = (self.remote_ip, self.local_ip);
        // What fits an IP packet behind the largest headers.
        const MAX_PAYLOAD: u32 = 65_535 - 60 - 60;
        let len = match spec {
            PacketSpec::Tcp(t) => t.len,
            PacketSpec::Udp { len } => *len,
            PacketSpec::Icmp(_) => 0,
        };
        if len > MAX_PAYLOAD {
            return Err(format!(
                "a payload of {len} bytes does not fit an IP packet (at most {MAX_PAYLOAD} here)"
            ));
        }
        Ok(match spec {
            PacketSpec::Tcp(t) => {
                let win = match t.win {
                    Some(w) => u16::try_from(w).map_err(|_| format!("window {w} over 65535"))?,
                    None => default_win,
                };
                let options = t
                    .options
                    .as_ref()
                    .ok_or("`<...>` on an inbound packet: write the options")?
                    .iter()
                    .map(|o| match o {
                        TcpOpt::Sack(b) => TcpOpt::Sack(
                            b.iter()
                                .map(|&(s, e)| {
                                    (
                                        s.wrapping_add(self.local_off()),
                                        e.wrapping_add(self.local_off()),
                                    )
                                })
                                .collect(),
                        ),
                        TcpOpt::Ts { val, ecr } => TcpOpt::Ts {
                            val: *val,
                            ecr: if *ecr == 0 && self.ts_offset.is_none() {
                                0
                            } else {
                                ecr.wrapping_add(self.ts_offset.unwrap_or(0))
                            },
                        },
                        o => o.clone(),
                    })
                    .collect();
                let live = LiveTcp {
                    src_port: self.remote_port,
                    dst_port: self.local_port,
                    seq: t.seq.wrapping_add(self.remote_isn),
                    ack: t.ack.map_or(0, |a| a.wrapping_add(self.local_off())),
                    flags: t.flags,
                    win,
                    options,
                    len: t.len,
                };
                if packet::encode_options(&live.options).len() > 40 {
                    return Err("TCP options over 40 bytes".to_owned());
                }
                packet::ip(src, dst, 6, packet::tcp(&live))
            }
            PacketSpec::Udp { len } => packet::ip(
                src,
                dst,
                17,
                packet::udp(self.remote_port, self.local_port, *len),
            ),
            PacketSpec::Icmp(i) => {
                let (kind, code) = icmp_numbers(i, self.ipv6())?;
                // The segment the stack sent, as quoted back by a router (RFC 792, RFC
                // 4443 section 3): its IP header and first 8 bytes of TCP (ports and
                // sequence number).
                let inner = match i.quoted {
                    Some(Quoted::Udp(len)) => packet::ip(
                        self.local_ip,
                        self.remote_ip,
                        17,
                        packet::udp(self.local_port, self.remote_port, len),
                    ),
                    Some(Quoted::Tcp(s, e)) => {
                        let quoted = LiveTcp {
                            src_port: self.local_port,
                            dst_port: self.remote_port,
                            seq: s.wrapping_add(self.local_off()),
                            ack: 0,
                            flags: Flags(Flags::ACK),
                            win: 0,
                            options: Vec::new(),
                            len: e.wrapping_sub(s).min(1460),
                        };
                        packet::ip(self.local_ip, self.remote_ip, 6, packet::tcp(&quoted))
                    }
                    None => return Err("an inbound ICMP error needs the packet it quotes: [seq:end(len)] or [udp (len)]".to_owned()),
                };
                let rest = u32::from(i.mtu.unwrap_or(0));
                packet::ip(src, dst, 1, packet::icmp_error(kind, code, rest, &inner))
            }
        })
    }

    /// Whether the flow's packets are IPv6.
    fn ipv6(&self) -> bool {
        self.local_ip.is_ipv6()
    }

    /// Whether a packet the stack sent belongs to the script (from the local address to
    /// the remote one).
    pub fn ours(&self, p: &LivePacket) -> bool {
        p.src == self.local_ip && p.dst == self.remote_ip
    }

    /// Compares a packet the stack sent with an outbound line, learning the local ISN,
    /// port and TS offset from it; the fields that differ, as `name: expected X, actual Y`.
    pub fn compare(&mut self, spec: &PacketSpec, live: &LivePacket) -> Vec<String> {
        let mut diffs = Vec::new();
        match (spec, &live.body) {
            (PacketSpec::Tcp(s), LiveBody::Tcp(t)) => self.compare_tcp(s, t, &mut diffs),
            (PacketSpec::Udp { len }, LiveBody::Udp { len: l, .. }) => {
                if len != l {
                    diffs.push(format!("udp_payload_len: expected {len}, actual {l}"));
                }
            }
            (PacketSpec::Icmp(i), LiveBody::Icmp { kind, code }) => {
                match icmp_numbers(i, self.ipv6()) {
                    Ok((k, c)) => {
                        if (k, c) != (*kind, *code) {
                            diffs.push(format!(
                                "icmp type/code: expected {k}/{c}, actual {kind}/{code}"
                            ));
                        }
                    }
                    Err(e) => diffs.push(e),
                }
            }
            (s, _) => diffs.push(format!(
                "protocol: expected {}, actual {}",
                match s {
                    PacketSpec::Tcp(_) => "tcp",
                    PacketSpec::Udp { .. } => "udp",
                    PacketSpec::Icmp(_) => "icmp",
                },
                live_proto(&live.body)
            )),
        }
        diffs
    }

    fn compare_tcp(&mut self, s: &TcpSpec, t: &LiveTcp, diffs: &mut Vec<String>) {
        // Every SYN the script expects sets the stack's ISN (a new connection on the same
        // ports, from TIME-WAIT say, has a new one), as packetdrill does.
        if s.flags.has(Flags::SYN) && t.flags.has(Flags::SYN) {
            self.local_isn = Some(t.seq.wrapping_sub(s.seq));
            self.local_port = t.src_port;
        }
        if t.dst_port != self.remote_port || t.src_port != self.local_port {
            diffs.push(format!(
                "ports: expected {}>{}, actual {}>{}",
                self.local_port, self.remote_port, t.src_port, t.dst_port
            ));
        }
        if s.flags != t.flags {
            diffs.push(format!(
                "tcp_flags: expected {}, actual {}",
                s.flags, t.flags
            ));
        }
        let seq = t.seq.wrapping_sub(self.local_off());
        if seq != s.seq {
            diffs.push(format!("tcp_seq: expected {}, actual {seq}", s.seq));
        }
        if t.len != s.len {
            diffs.push(format!(
                "tcp_payload_len: expected {}, actual {}",
                s.len, t.len
            ));
        }
        if let Some(a) = s.ack {
            let ack = t.ack.wrapping_sub(self.remote_isn);
            if ack != a {
                diffs.push(format!("tcp_ack: expected {a}, actual {ack}"));
            }
        }
        if let Some(w) = s.win
            && u32::from(t.win) != w
        {
            diffs.push(format!("tcp_window: expected {w}, actual {}", t.win));
        }
        if let Some(opts) = &s.options {
            self.compare_options(opts, &t.options, diffs);
        }
    }

    fn compare_options(&mut self, want: &[TcpOpt], live: &[TcpOpt], diffs: &mut Vec<String>) {
        // Padding after the last option reads as EOL; it is not an option the script
        // writes.
        let mut live = live.to_vec();
        if want.last() != Some(&TcpOpt::Eol) {
            while live.last() == Some(&TcpOpt::Eol) {
                live.pop();
            }
        }
        let mut ok = want.len() == live.len();
        for (w, l) in want.iter().zip(&live) {
            ok &= match (w, l) {
                (TcpOpt::Ts { val, ecr }, TcpOpt::Ts { val: lv, ecr: le }) => {
                    // TSval is not checked; the first one sets the offset that inbound
                    // TSecr values are shifted by.
                    self.ts_offset.get_or_insert(lv.wrapping_sub(*val));
                    ecr == le
                }
                (TcpOpt::Sack(a), TcpOpt::Sack(b)) => {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|(&(s, e), &(ls, le))| {
                            ls.wrapping_sub(self.remote_isn) == s
                                && le.wrapping_sub(self.remote_isn) == e
                        })
                }
                (w, l) => w == l,
            };
        }
        if !ok {
            diffs.push(format!(
                "tcp_options: expected <{}>, actual <{}>",
                join(want),
                join(&self.relative_options(&live))
            ));
        }
    }

    fn relative_options(&self, live: &[TcpOpt]) -> Vec<TcpOpt> {
        live.iter()
            .map(|o| match o {
                TcpOpt::Sack(b) => TcpOpt::Sack(
                    b.iter()
                        .map(|&(s, e)| {
                            (
                                s.wrapping_sub(self.remote_isn),
                                e.wrapping_sub(self.remote_isn),
                            )
                        })
                        .collect(),
                ),
                TcpOpt::Ts { val, ecr } => TcpOpt::Ts {
                    val: val.wrapping_sub(self.ts_offset.unwrap_or(0)),
                    ecr: *ecr,
                },
                o => o.clone(),
            })
            .collect()
    }

    /// A packet the stack sent, in script notation (numbers relative to the ISNs).
    pub fn describe(&self, live: &LivePacket) -> String {
        match &live.body {
            LiveBody::Tcp(t) => TcpSpec {
                ports: None,
                flags: t.flags,
                seq: t.seq.wrapping_sub(self.local_off()),
                len: t.len,
                ack: t
                    .flags
                    .has(Flags::ACK)
                    .then(|| t.ack.wrapping_sub(self.remote_isn)),
                win: Some(u32::from(t.win)),
                options: Some(self.relative_options(&t.options)),
            }
            .to_string(),
            LiveBody::Udp { len, .. } => format!("udp ({len})"),
            LiveBody::Icmp { kind, code } => format!("icmp type {kind} code {code}"),
            LiveBody::Other(p) => format!("IP protocol {p}"),
        }
    }
}

fn live_proto(b: &LiveBody) -> String {
    match b {
        LiveBody::Tcp(_) => "tcp".to_owned(),
        LiveBody::Udp { .. } => "udp".to_owned(),
        LiveBody::Icmp { .. } => "icmp".to_owned(),
        LiveBody::Other(p) => format!("IP protocol {p}"),
    }
}

fn join(o: &[TcpOpt]) -> String {
    o.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// ICMP type and code numbers from their names (RFC 792, RFC 1191), or over IPv6 (`v6`)
/// ICMPv6's (RFC 4443), as packetdrill names them (`icmp_packet.c`): a name the family
/// has not (IPv4's `frag_needed`, `host_unreachable`; IPv6's `packet_too_big`) is an
/// error, as there. `type_N` and `code_N` give numbers.
fn icmp_numbers(i: &IcmpSpec, v6: bool) -> Result<(u8, u8), String> {
    let family = if v6 { "ICMPv6" } else { "ICMP" };
    let number = |s: &str, prefix: &str| s.strip_prefix(prefix).and_then(|n| n.parse().ok());
    let kind = match (v6, i.kind.as_str()) {
        (_, k) if number(k, "type_").is_some() => number(k, "type_").unwrap_or(0),
        (false, "echo_reply") => 0,
        (false, "unreachable") => 3,
        (false, "echo_request") => 8,
        (false, "time_exceeded") => 11,
        (true, "unreachable") => 1,
        (true, "packet_too_big") => 2,
        (true, "time_exceeded") => 3,
        (true, "parameter_problem") => 4,
        (true, "echo_request") => 128,
        (true, "echo_reply") => 129,
        (_, k) => return Err(format!("{family} type `{k}` is not supported")),
    };
    let code = match (v6, i.code.as_deref()) {
        (_, None) => 0,
        (_, Some(c)) if number(c, "code_").is_some() => number(c, "code_").unwrap_or(0),
        (false, Some("net_unreachable" | "ttl_exceeded")) => 0,
        (false, Some("host_unreachable")) => 1,
        (false, Some("protocol_unreachable")) => 2,
        (false, Some("port_unreachable")) => 3,
        (false, Some("frag_needed")) => 4,
        // RFC 4443 section 3.1 (net_unreachable is packetdrill's name for code 0 too).
        (true, Some("net_unreachable" | "no_route")) => 0,
        (true, Some("admin_prohibited")) => 1,
        (true, Some("not_neighbour")) => 2,
        (true, Some("address_unreachable")) => 3,
        (true, Some("port_unreachable")) => 4,
        // Section 3.3.
        (true, Some("exceeded_hop_limit")) => 0,
        (true, Some("exceeded_frag_time")) => 1,
        (_, Some(c)) => return Err(format!("{family} code `{c}` is not supported")),
    };
    Ok((kind, code))
}

/// A system call, its arguments evaluated (descriptors live), ready to run anywhere.
#[derive(Debug, Clone)]
enum Call {
    Socket(i32, i32, i32),
    Bind(i32, SocketAddr),
    Listen(i32, i32),
    Accept(i32, i32),
    Connect(i32, SocketAddr),
    Read(i32, usize),
    Recv(i32, usize, i32),
    Write(i32, usize),
    Send(i32, usize, i32),
    Shutdown(i32, i32),
    Close(i32),
    Getsockopt(i32, i32, i32, usize),
    Setsockopt(i32, i32, i32, Vec<u8>),
    Fcntl(i32, i32, i64),
    Poll(Vec<PollFd>, i32),
    EpollCreate(i32),
    EpollCtl(i32, i32, i32, EpollEvent),
    EpollWait(i32, usize, i32),
}

/// What a call returned, with what it wrote for the caller.
#[derive(Debug, Clone)]
enum Out {
    None,
    Bytes(Vec<u8>),
    Poll(Vec<PollFd>),
    Epoll(Vec<EpollEvent>),
}

impl Call {
    fn run<B: Backend + ?Sized>(self, b: &B) -> (SysResult, Out) {
        match self {
            Call::Socket(d, t, p) => (b.socket(d, t, p), Out::None),
            Call::Bind(fd, a) => (b.bind(fd, a), Out::None),
            Call::Listen(fd, n) => (b.listen(fd, n), Out::None),
            Call::Accept(fd, f) => (b.accept(fd, f), Out::None),
            Call::Connect(fd, a) => (b.connect(fd, a), Out::None),
            Call::Read(fd, n) => (b.read(fd, &mut vec![0; n]), Out::None),
            Call::Recv(fd, n, f) => (b.recv(fd, &mut vec![0; n], f), Out::None),
            Call::Write(fd, n) => (b.write(fd, &vec![b'x'; n]), Out::None),
            Call::Send(fd, n, f) => (b.send(fd, &vec![b'x'; n], f), Out::None),
            Call::Shutdown(fd, h) => (b.shutdown(fd, h), Out::None),
            Call::Close(fd) => (b.close(fd), Out::None),
            Call::Getsockopt(fd, l, n, len) => {
                let mut buf = vec![0; len];
                match b.getsockopt(fd, l, n, &mut buf) {
                    Ok(k) => {
                        buf.truncate(k);
                        (Ok(0), Out::Bytes(buf))
                    }
                    Err(e) => (Err(e), Out::None),
                }
            }
            Call::Setsockopt(fd, l, n, v) => (b.setsockopt(fd, l, n, &v), Out::None),
            Call::Fcntl(fd, c, a) => (b.fcntl(fd, c, a), Out::None),
            Call::Poll(mut fds, t) => {
                let r = b.poll(&mut fds, t);
                (r, Out::Poll(fds))
            }
            Call::EpollCreate(n) => (b.epoll_create(n), Out::None),
            Call::EpollCtl(ep, op, fd, ev) => (b.epoll_ctl(ep, op, fd, ev), Out::None),
            Call::EpollWait(ep, n, t) => {
                let mut evs = vec![EpollEvent::default(); n];
                let r = b.epoll_wait(ep, &mut evs, t);
                let k = r.map_or(0, |k| usize::try_from(k).unwrap_or(0).min(n));
                evs.truncate(k);
                (r, Out::Epoll(evs))
            }
        }
    }

    /// Whether a non-negative result is a new descriptor (mapped to the script's number).
    fn makes_fd(&self) -> bool {
        matches!(
            self,
            Call::Socket(..) | Call::Accept(..) | Call::EpollCreate(..)
        )
    }
}

/// What the script checks in a call's output beyond its result.
#[derive(Debug, Clone)]
enum Check {
    None,
    /// getsockopt: the int value expected (`[1]`), if any.
    Int(Option<i64>),
    /// poll: `revents` per entry.
    Revents(Vec<Option<i16>>),
    /// epoll_wait: the events expected (events, data).
    Epoll(Vec<(u32, u64)>),
}

struct Pending {
    line: usize,
    name: String,
    end: i64,
    expect: Expect,
    check: Check,
    makes_fd: bool,
    /// Written `start...end`.
    blocking: bool,
    /// The earliest a blocking call may return (its end, or `min` of `start...min~max`).
    end_min: i64,
    /// When the call was made (script time).
    started: i64,
    rx: mpsc::Receiver<((SysResult, Out), i64)>,
}

struct Runner<B: Backend> {
    backend: Arc<B>,
    cfg: Config,
    start: i64,
    /// The script's connections by the remote end's port (the default one, and those
    /// that lines name with `SRC>DST` ports), each with what has been learned about it.
    flows: HashMap<u16, Flow>,
    /// Script descriptor -> live descriptor.
    fds: HashMap<i64, i32>,
    pending: Option<Pending>,
    /// Packets the stack sent while the runner waited, with their times.
    queue: VecDeque<(Vec<u8>, i64)>,
    report: Report,
}

impl<B: Backend + 'static> Runner<B> {
    fn now(&self) -> i64 {
        self.backend.now_us() as i64 - self.start
    }

    /// The connection a packet line belongs to: the one of the remote port its `SRC>DST`
    /// ports name (the remote end's is the source of an inbound line, the destination of
    /// an outbound one), or the script's default; made on first use, with the local port
    /// as written.
    fn flow(&mut self, spec: &PacketSpec, inbound: bool) -> &mut Flow {
        let ports = match spec {
            PacketSpec::Tcp(t) => t.ports,
            _ => None,
        };
        let (remote, local) = match ports {
            Some((src, dst)) if inbound => (src, Some(dst)),
            Some((src, dst)) => (dst, Some(src)),
            None => (self.cfg.remote_port, None),
        };
        let cfg = &self.cfg;
        let flow = self.flows.entry(remote).or_insert_with(|| {
            let mut f = Flow::new(cfg);
            f.remote_port = remote;
            f
        });
        if let Some(l) = local {
            flow.local_port = l;
        }
        flow
    }

    /// Waits until script time `t`, taking the packets the stack sends meanwhile (each
    /// stamped with the time it came out, so an early packet is seen as early).
    fn sleep_until(&mut self, t: i64) -> Result<(), String> {
        loop {
            let left = t - self.now();
            if left <= 0 {
                return Ok(());
            }
            let got = self
                .backend
                .netdev_receive(Duration::from_micros(left as u64))
                .map_err(|e| format!("netdev_receive: {e}"))?;
            if let Some((p, at)) = got {
                self.queue.push_back((p, at as i64 - self.start));
            }
        }
    }

    /// The next packet the stack sent and when, waiting until script time `until`.
    fn next_packet(&mut self, until: i64) -> Result<Option<(Vec<u8>, i64)>, String> {
        if let Some(p) = self.queue.pop_front() {
            return Ok(Some(p));
        }
        let wait = (until - self.now()).max(0);
        let got = self
            .backend
            .netdev_receive(Duration::from_micros(wait as u64))
            .map_err(|e| format!("netdev_receive: {e}"))?;
        Ok(got.map(|(p, at)| (p, at as i64 - self.start)))
    }

    /// A packet the stack sent, in script notation: relative to the ISNs of the
    /// connection it belongs to (the expected line's when it is none of the script's),
    /// with its ports when the script has several connections or the line writes ports.
    fn describe(&mut self, spec: &PacketSpec, live: &LivePacket) -> String {
        let several =
            self.flows.len() > 1 || matches!(spec, PacketSpec::Tcp(TcpSpec { ports: Some(_), .. }));
        let dst = match &live.body {
            LiveBody::Tcp(t) => Some((t.src_port, t.dst_port)),
            _ => None,
        };
        let text = match dst.and_then(|(_, d)| self.flows.get(&d)) {
            Some(f) => f.describe(live),
            None => self.flow(spec, false).describe(live),
        };
        match dst {
            Some((s, d)) if several => format!("{s}>{d} {text}"),
            _ => text,
        }
    }

    fn event(&mut self, e: &Event) -> Result<(), Failure> {
        self.report.events += 1;
        self.finish_pending(Some(e.when.start()))?;
        match &e.kind {
            EventKind::Inbound(spec) => {
                let win = self.cfg.default_win;
                let pkt = self
                    .flow(spec, true)
                    .inbound(spec, win)
                    .or_else(|m| fail(e.line, m))?;
                self.sleep_until(e.when.start())
                    .or_else(|m| fail(e.line, m))?;
                if self.cfg.trace {
                    eprintln!("line {}: {} < {spec}", e.line, fmt_time(self.now()));
                }
                self.backend
                    .netdev_send(&pkt)
                    .or_else(|err| fail(e.line, format!("netdev_send: {err}")))
            }
            EventKind::Outbound(spec) => self.outbound(e, spec),
            EventKind::Syscall(s) => self.syscall(e, s),
            EventKind::Shell(cmd) => {
                self.sleep_until(e.when.start())
                    .or_else(|m| fail(e.line, m))?;
                for (name, value) in sysctl_command(cmd).or_else(|m| fail(e.line, m))? {
                    self.backend
                        .sysctl(&name, &value)
                        .or_else(|err| fail(e.line, format!("sysctl {name}={value}: {err}")))?;
                }
                Ok(())
            }
            EventKind::Code(_) => fail(e.line, "not supported"),
        }
    }

    fn outbound(&mut self, e: &Event, spec: &PacketSpec) -> Result<(), Failure> {
        let tol = self.cfg.tolerance_us;
        let (lo, hi) = match e.when {
            When::At { start } => (start - tol, start + tol),
            When::Range { start, end } => (start - tol, end + tol),
            When::Any { .. } => (i64::MIN, self.now() + self.cfg.any_wait_us),
        };
        let script_line = format!("{} > {spec}", when_text(&e.when));
        loop {
            let got = self.next_packet(hi).or_else(|m| fail(e.line, m))?;
            let Some((raw, at)) = got else {
                return fail(
                    e.line,
                    format!(
                        "timing error: expected outbound packet at {} (tolerance {} us) was not sent\n  script packet: {script_line}",
                        fmt_time(e.when.start()),
                        tol
                    ),
                );
            };
            let live = match packet::decode(&raw) {
                Ok(p) => p,
                Err(m) => {
                    return fail(
                        e.line,
                        format!("the stack sent a packet that does not parse: {m}"),
                    );
                }
            };
            if !self.flow(spec, false).ours(&live) {
                self.report.packets_ignored += 1;
                continue;
            }
            let diffs = self.flow(spec, false).compare(spec, &live);
            let actual = format!("{} > {}", fmt_time(at), self.describe(spec, &live));
            if self.cfg.trace {
                eprintln!("line {}: sent {actual}", e.line);
            }
            if !diffs.is_empty() {
                return fail(
                    e.line,
                    format!(
                        "outbound packet does not match the script\n  script packet: {script_line}\n  actual packet: {actual}\n  {}",
                        diffs.join("\n  ")
                    ),
                );
            }
            if at < lo || at > hi {
                return fail(
                    e.line,
                    format!(
                        "timing error: expected outbound packet at {} (tolerance {tol} us), sent at {}\n  script packet: {script_line}\n  actual packet: {actual}",
                        fmt_time(e.when.start()),
                        fmt_time(at)
                    ),
                );
            }
            self.report.packets_matched += 1;
            return Ok(());
        }
    }

    fn syscall(&mut self, e: &Event, s: &Syscall) -> Result<(), Failure> {
        let (call, check) = self.prepare(s).or_else(|m| fail(e.line, m))?;
        self.sleep_until(e.when.start())
            .or_else(|m| fail(e.line, m))?;
        let makes_fd = call.makes_fd();
        let started = self.now();
        let (tx, rx) = mpsc::channel();
        let backend = self.backend.clone();
        let start = self.start;
        let blocked_before = self.backend.blocked_calls();
        std::thread::Builder::new()
            .name(format!("conform-{}", s.name))
            .spawn(move || {
                let out = call.run(&*backend);
                let at = backend.returned_at_us() as i64 - start;
                let _ = tx.send((out, at));
            })
            .or_else(|err| fail(e.line, format!("spawning the call's thread: {err}")))?;
        // A virtual clock must not move on before the call has run: wait until it has
        // returned or is blocked in the backend (bounded in real time).
        let mut early = None;
        if let Some(before) = blocked_before {
            let limit = std::time::Instant::now()
                + Duration::from_micros(self.cfg.call_wait_us.max(0) as u64);
            loop {
                match rx.recv_timeout(Duration::from_micros(200)) {
                    Ok(done) => {
                        early = Some(done);
                        break;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                if self.backend.blocked_calls().is_some_and(|n| n > before)
                    || std::time::Instant::now() > limit
                {
                    break;
                }
            }
        }
        let rx = match early {
            Some(done) => {
                // Put it back for the checks below.
                let (tx, rx) = mpsc::channel();
                let _ = tx.send(done);
                rx
            }
            None => rx,
        };
        let pending = Pending {
            line: e.line,
            name: s.name.clone(),
            end: s.end.unwrap_or(e.when.start()),
            expect: s.expect.clone(),
            check,
            makes_fd,
            blocking: s.end.is_some(),
            end_min: s.end_min.or(s.end).unwrap_or(e.when.start()),
            started,
            rx,
        };
        if s.end.is_some() {
            self.pending = Some(pending);
            return Ok(());
        }
        // On a virtual clock a call that blocked cannot return before the clock moves,
        // which it does not while the runner waits for the call: say so at once.
        if let Some(before) = blocked_before
            && self.backend.blocked_calls().is_some_and(|n| n > before)
        {
            return match pending.rx.try_recv() {
                Ok(done) => self.check(&pending, done),
                Err(_) => fail(
                    e.line,
                    format!(
                        "{}() blocked (a call that blocks is written `start...end`)",
                        s.name
                    ),
                ),
            };
        }
        self.complete(pending, true)
    }

    /// Waits for the blocking call in flight (if any) when the next event at `next` is
    /// due after its end, or at the script's end (`None`), and checks it.
    fn finish_pending(&mut self, next: Option<i64>) -> Result<(), Failure> {
        let Some(p) = self.pending.take() else {
            return Ok(());
        };
        // The events at the call's end time may be what unblocks it: wait for it only
        // before a later event (or at the script's end).
        if let Some(next) = next
            && next <= p.end
        {
            // Not due yet: check it only if it has returned already.
            match p.rx.try_recv() {
                Ok(done) => return self.check(&p, done),
                Err(_) => {
                    self.pending = Some(p);
                    return Ok(());
                }
            }
        }
        self.complete(p, false)
    }

    /// Waits (bounded) for a call's result and checks it.
    fn complete(&mut self, p: Pending, immediate: bool) -> Result<(), Failure> {
        let limit = p.end + self.cfg.tolerance_us + self.cfg.call_wait_us;
        if !immediate && self.backend.blocked_calls().is_some() {
            // A virtual clock stands still unless moved: move it to the call's end (plus
            // the tolerance), taking the packets sent meanwhile, until the call returns.
            let end = p.end + self.cfg.tolerance_us;
            loop {
                if let Ok(done) = p.rx.try_recv() {
                    return self.check(&p, done);
                }
                if self.backend.blocked_calls() == Some(0) || self.now() >= end {
                    break;
                }
                let left = (end - self.now()).max(0);
                let got = self
                    .backend
                    .netdev_receive(Duration::from_micros(left as u64))
                    .or_else(|err| fail(p.line, format!("netdev_receive: {err}")))?;
                if let Some((pkt, at)) = got {
                    self.queue.push_back((pkt, at as i64 - self.start));
                }
            }
        }
        let wait = (limit - self.now()).max(0);
        match p.rx.recv_timeout(Duration::from_micros(wait as u64)) {
            Ok(done) => self.check(&p, done),
            Err(_) => fail(
                p.line,
                format!(
                    "{}() did not return by {}{}",
                    p.name,
                    fmt_time(limit),
                    if immediate {
                        " (a call that blocks is written `start...end`)"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }

    fn check(
        &mut self,
        p: &Pending,
        ((ret, out), at): ((SysResult, Out), i64),
    ) -> Result<(), Failure> {
        let tol = self.cfg.tolerance_us;
        let shown = match ret {
            Ok(v) => v.to_string(),
            Err(e) => format!(
                "-1 {} ({})",
                symbols::errno_name(e),
                std::io::Error::from_raw_os_error(e)
            ),
        };
        if let Some(want) = p.expect.value {
            let ok = match (ret, want) {
                (Ok(v), w) if w >= 0 => {
                    if p.makes_fd {
                        if let Ok(fd) = i32::try_from(v) {
                            self.fds.insert(w, fd);
                        }
                        true
                    } else {
                        v == w
                    }
                }
                (Err(errno), -1) => match &p.expect.errno {
                    None => true,
                    Some(name) => symbols::errno_value(name) == Some(errno),
                },
                _ => false,
            };
            if !ok {
                let want_text = match &p.expect.errno {
                    Some(e) => format!("{want} {e}"),
                    None => want.to_string(),
                };
                return fail(
                    p.line,
                    format!("{}() returned {shown}, expected {want_text}", p.name),
                );
            }
        }
        if let Some(e) = &p.expect.errno
            && symbols::errno_value(e).is_none()
        {
            return fail(p.line, format!("unknown errno name {e}"));
        }
        self.check_out(p, &out)?;
        // A blocking call must return by its end time; any other call within the
        // tolerance of when it was made (the runner may be behind the script's clock
        // after an event that matched late in its range).
        let late = if p.blocking {
            at > p.end + tol
        } else {
            at > p.started + tol
        };
        if late {
            return fail(
                p.line,
                format!(
                    "timing error: {}() expected to return by {} (tolerance {tol} us), returned at {}",
                    p.name,
                    fmt_time(if p.blocking { p.end } else { p.started }),
                    fmt_time(at)
                ),
            );
        }
        // A blocking call returns at its end time, not before: packetdrill checks the
        // return of a `start...end` call against `end` both ways (run_system_call.c:
        // "Check end time for the blocking system call", verify_time with the end time
        // and the tolerance).
        if p.blocking && at < p.end_min - tol {
            return fail(
                p.line,
                format!(
                    "timing error: {}() expected to return at {} (tolerance {tol} us), returned early at {}",
                    p.name,
                    fmt_time(p.end_min),
                    fmt_time(at)
                ),
            );
        }
        Ok(())
    }

    fn check_out(&self, p: &Pending, out: &Out) -> Result<(), Failure> {
        match (&p.check, out) {
            (Check::Int(Some(want)), Out::Bytes(b)) => {
                // An int (or the first int of a larger value, as packetdrill reads it).
                let got = match b.len() {
                    4.. => i32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
                    n => {
                        return fail(
                            p.line,
                            format!("{}() wrote {n} bytes, expected an int", p.name),
                        );
                    }
                };
                if c_int(*want) != Ok(got) {
                    return fail(
                        p.line,
                        format!("{}() value: expected [{want}], actual [{got}]", p.name),
                    );
                }
            }
            (Check::Revents(want), Out::Poll(fds)) => {
                for (i, (w, f)) in want.iter().zip(fds).enumerate() {
                    if let Some(w) = w
                        && *w != f.revents
                    {
                        return fail(
                            p.line,
                            format!(
                                "poll() entry {i} revents: expected {}, actual {}",
                                poll_names(*w),
                                poll_names(f.revents)
                            ),
                        );
                    }
                }
            }
            (Check::Epoll(want), Out::Epoll(got)) => {
                // The events written describe what the call returns: as many as it
                // returned (`{events=0, ptr=0}` with `= 0` checks nothing).
                let got: Vec<(u32, u64)> = got.iter().map(|e| (e.events, e.data)).collect();
                let want = &want[..want.len().min(got.len())];
                if want != got {
                    return fail(
                        p.line,
                        format!(
                            "epoll_wait() events: expected {}, actual {}",
                            epoll_text(want),
                            epoll_text(&got)
                        ),
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The live descriptor for a script's descriptor argument: unknown numbers map to a
    /// descriptor that cannot be open (so the call fails with EBADF, as the script's
    /// unknown descriptor would).
    fn fd(&self, e: &Expr) -> Result<i32, String> {
        let n = int(e)?;
        Ok(self.fds.get(&n).copied().unwrap_or_else(|| {
            i32::try_from(1_000_000 + n.clamp(0, 1_000_000)).unwrap_or(i32::MAX)
        }))
    }

    fn prepare(&self, s: &Syscall) -> Result<(Call, Check), String> {
        let a = &s.args;
        let want = |n: usize| -> Result<(), String> {
            if a.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{}() takes {n} arguments, the script gives {}",
                    s.name,
                    a.len()
                ))
            }
        };
        let i32a = |i: usize| -> Result<i32, String> {
            let v = int(&a[i])?;
            i32::try_from(v).map_err(|_| format!("argument {} ({v}) does not fit an int", i + 1))
        };
        let len = |i: usize| -> Result<usize, String> {
            let v = int(&a[i])?;
            usize::try_from(v)
                .ok()
                .filter(|&n| n <= 16 << 20)
                .ok_or_else(|| format!("length {v}: 0 to 16 MiB"))
        };
        let local = SocketAddr::new(self.cfg.bind_ip(), self.cfg.local_port);
        let remote = SocketAddr::new(self.cfg.connect_ip(), self.cfg.remote_port);
        let call = match s.name.as_str() {
            "socket" => {
                want(3)?;
                // packetdrill: the family's domain for `...` and for AF_INET (a script
                // written for IPv4 runs unchanged over IPv6).
                let domain = match &a[0] {
                    Expr::Ellipsis => self.cfg.ip_version.socket_domain(),
                    _ => match i32a(0)? {
                        libc::AF_INET => self.cfg.ip_version.socket_domain(),
                        d => d,
                    },
                };
                Call::Socket(domain, i32a(1)?, i32a(2)?)
            }
            "bind" => {
                want(3)?;
                Call::Bind(self.fd(&a[0])?, addr(&a[1], local, &self.cfg)?)
            }
            "listen" => {
                want(2)?;
                Call::Listen(self.fd(&a[0])?, i32a(1)?)
            }
            "accept" => {
                want(3)?;
                Call::Accept(self.fd(&a[0])?, 0)
            }
            "accept4" => {
                want(4)?;
                Call::Accept(self.fd(&a[0])?, i32a(3)?)
            }
            "connect" => {
                want(3)?;
                Call::Connect(self.fd(&a[0])?, addr(&a[1], remote, &self.cfg)?)
            }
            "read" => {
                want(3)?;
                Call::Read(self.fd(&a[0])?, len(2)?)
            }
            "recv" => {
                want(4)?;
                Call::Recv(self.fd(&a[0])?, len(2)?, i32a(3)?)
            }
            "write" => {
                want(3)?;
                Call::Write(self.fd(&a[0])?, len(2)?)
            }
            "send" => {
                want(4)?;
                Call::Send(self.fd(&a[0])?, len(2)?, i32a(3)?)
            }
            "shutdown" => {
                want(2)?;
                Call::Shutdown(self.fd(&a[0])?, i32a(1)?)
            }
            "close" => {
                want(1)?;
                Call::Close(self.fd(&a[0])?)
            }
            "setsockopt" => {
                want(5)?;
                Call::Setsockopt(self.fd(&a[0])?, i32a(1)?, i32a(2)?, optval(&a[3])?)
            }
            "getsockopt" => {
                want(5)?;
                let value = match &a[3] {
                    Expr::List(items) if items.len() == 1 => Some(int(&items[0])?),
                    Expr::Ellipsis => None,
                    other => {
                        return Err(format!("getsockopt(): value {other:?}: write [N] or ..."));
                    }
                };
                let size = match &a[4] {
                    Expr::List(items) if items.len() == 1 => len_of(&items[0])?,
                    Expr::Ellipsis => 4,
                    other => len_of(other)?,
                };
                return Ok((
                    Call::Getsockopt(self.fd(&a[0])?, i32a(1)?, i32a(2)?, size),
                    Check::Int(value),
                ));
            }
            "fcntl" => {
                if a.len() != 2 && a.len() != 3 {
                    return Err("fcntl() takes 2 or 3 arguments".to_owned());
                }
                let arg = if a.len() == 3 { int(&a[2])? } else { 0 };
                Call::Fcntl(self.fd(&a[0])?, i32a(1)?, arg)
            }
            "poll" => {
                want(3)?;
                let Expr::List(items) = &a[0] else {
                    return Err(
                        "poll(): the first argument is a list [{fd=.., events=.., revents=..}]"
                            .to_owned(),
                    );
                };
                let mut fds = Vec::new();
                let mut revents = Vec::new();
                for it in items {
                    let fd = self.fd(field(it, "fd")?.ok_or("poll(): an entry without fd")?)?;
                    let ev = field(it, "events")?.map(int).transpose()?.unwrap_or(0);
                    let rev = field(it, "revents")?.map(int).transpose()?;
                    fds.push(PollFd {
                        fd,
                        events: ev as i16,
                        revents: 0,
                    });
                    revents.push(rev.map(|r| r as i16));
                }
                return Ok((Call::Poll(fds, i32a(2)?), Check::Revents(revents)));
            }
            "epoll_create" | "epoll_create1" => {
                want(1)?;
                Call::EpollCreate(if s.name == "epoll_create" {
                    i32a(0)?
                } else {
                    1
                })
            }
            "epoll_ctl" => {
                want(4)?;
                let ev = match &a[3] {
                    Expr::Ellipsis => EpollEvent::default(),
                    e => epoll_event(e)?,
                };
                Call::EpollCtl(self.fd(&a[0])?, i32a(1)?, self.fd(&a[2])?, ev)
            }
            "epoll_wait" => {
                want(4)?;
                let expected = match &a[1] {
                    Expr::List(items) => items
                        .iter()
                        .map(epoll_event)
                        .collect::<Result<Vec<_>, _>>()?,
                    Expr::Struct(_) => vec![epoll_event(&a[1])?],
                    Expr::Ellipsis => Vec::new(),
                    other => return Err(format!("epoll_wait(): events {other:?}")),
                };
                let max = len(2)?.clamp(1, 1024);
                let check = if matches!(a[1], Expr::Ellipsis) {
                    Check::None
                } else {
                    Check::Epoll(expected.iter().map(|e| (e.events, e.data)).collect())
                };
                return Ok((Call::EpollWait(self.fd(&a[0])?, max, i32a(3)?), check));
            }
            other => return Err(format!("system call `{other}` is not supported")),
        };
        Ok((call, Check::None))
    }
}

fn when_text(w: &When) -> String {
    match *w {
        When::At { start } => fmt_time(start),
        When::Range { start, end } => format!("{}~{}", fmt_time(start), fmt_time(end)),
        When::Any { .. } => "*".to_owned(),
    }
}

/// An integer expression: a number, a symbol, `a|b`, `htons(n)`.
fn int(e: &Expr) -> Result<i64, String> {
    match e {
        Expr::Int(v) => Ok(*v),
        Expr::Symbol(s) => symbols::value(s)
            .or_else(|| symbols::errno_value(s).map(i64::from))
            .ok_or_else(|| format!("unknown symbol {s}")),
        Expr::Or(parts) => parts.iter().try_fold(0, |acc, p| Ok(acc | int(p)?)),
        Expr::Call(f, args) if f == "htons" && args.len() == 1 => {
            let v = int(&args[0])?;
            u16::try_from(v)
                .map(|v| i64::from(v.to_be()))
                .map_err(|_| format!("htons({v}) out of range"))
        }
        other => Err(format!("expected a number, found {other:?}")),
    }
}

fn len_of(e: &Expr) -> Result<usize, String> {
    let v = int(e)?;
    usize::try_from(v)
        .ok()
        .filter(|&n| n <= 4096)
        .ok_or_else(|| format!("option length {v}: 0 to 4096"))
}

/// `...` (the default), or `{sa_family=AF_INET, sin_port=htons(P), sin_addr=inet_addr("A")}`
/// (its address in the run's family: [`Config::script_ip`]).
fn addr(e: &Expr, default: SocketAddr, cfg: &Config) -> Result<SocketAddr, String> {
    match e {
        Expr::Ellipsis => Ok(default),
        Expr::Struct(_) => {
            let port = match field(e, "sin_port")? {
                Some(Expr::Call(f, a)) if f == "htons" && a.len() == 1 => int(&a[0])?,
                Some(p) => int(p)?,
                None => i64::from(default.port()),
            };
            let ip = match field(e, "sin_addr")? {
                Some(Expr::Call(f, a)) if f == "inet_addr" && a.len() == 1 => match &a[0] {
                    Expr::Str(s) => cfg.script_ip(
                        s.parse()
                            .map_err(|_| format!("inet_addr(\"{s}\"): not an IPv4 address"))?,
                    ),
                    other => return Err(format!("inet_addr({other:?})")),
                },
                Some(other) => {
                    return Err(format!("sin_addr {other:?}: write inet_addr(\"A.B.C.D\")"));
                }
                None => default.ip(),
            };
            let port = u16::try_from(port).map_err(|_| format!("port {port} out of range"))?;
            Ok(SocketAddr::new(ip, port))
        }
        other => Err(format!(
            "address {other:?}: write ... or a sockaddr_in struct"
        )),
    }
}

/// A named member of a struct expression.
fn field<'e>(e: &'e Expr, name: &str) -> Result<Option<&'e Expr>, String> {
    match e {
        Expr::Struct(fields) => Ok(fields
            .iter()
            .find(|(n, _)| n.as_deref() == Some(name))
            .map(|(_, v)| v)),
        other => Err(format!("expected a {{...}} struct, found {other:?}")),
    }
}

/// A setsockopt value: `[N]` (an int), or `{l_onoff=1, l_linger=0}` (struct linger).
fn optval(e: &Expr) -> Result<Vec<u8>, String> {
    match e {
        Expr::List(items) if items.len() == 1 => Ok(c_int(int(&items[0])?)?.to_ne_bytes().to_vec()),
        Expr::Struct(fields) => {
            let mut b = Vec::new();
            for (_, v) in fields {
                b.extend_from_slice(&c_int(int(v)?)?.to_ne_bytes());
            }
            Ok(b)
        }
        Expr::Str(s) => Ok(s.as_bytes().to_vec()),
        other => Err(format!(
            "option value {other:?}: write [N], a struct, or a string"
        )),
    }
}

/// A C `int` from a script number: -2^31 to 2^32 - 1 (`0xffffffff` is -1's bits, as C
/// converts it).
fn c_int(v: i64) -> Result<i32, String> {
    i32::try_from(v)
        .or_else(|_| u32::try_from(v).map(|u| u as i32))
        .map_err(|_| format!("{v} does not fit an int"))
}

/// `{events=EPOLLIN, fd=4}` (the data is the script's descriptor number).
fn epoll_event(e: &Expr) -> Result<EpollEvent, String> {
    let events = field(e, "events")?.map(int).transpose()?.unwrap_or(0);
    let data = match field(e, "fd")?.or(field(e, "u64")?).or(field(e, "ptr")?) {
        Some(d) => int(d)?,
        None => 0,
    };
    Ok(EpollEvent {
        events: events as u32,
        data: data as u64,
    })
}

fn poll_names(v: i16) -> String {
    flag_names(
        i64::from(v) & 0xffff,
        &[
            "POLLIN",
            "POLLPRI",
            "POLLOUT",
            "POLLERR",
            "POLLHUP",
            "POLLNVAL",
            "POLLRDNORM",
            "POLLRDBAND",
            "POLLWRNORM",
            "POLLWRBAND",
            "POLLRDHUP",
        ],
    )
}

fn epoll_text(v: &[(u32, u64)]) -> String {
    let items: Vec<String> = v
        .iter()
        .map(|(ev, d)| {
            format!(
                "{{events={}, fd={d}}}",
                flag_names(
                    i64::from(*ev),
                    &[
                        "EPOLLIN",
                        "EPOLLPRI",
                        "EPOLLOUT",
                        "EPOLLERR",
                        "EPOLLHUP",
                        "EPOLLRDNORM",
                        "EPOLLRDBAND",
                        "EPOLLWRNORM",
                        "EPOLLWRBAND",
                        "EPOLLRDHUP"
                    ]
                )
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// A bit set as `A|B`, by the names given (values from [`symbols`]).
fn flag_names(mut v: i64, names: &[&str]) -> String {
    let mut out = Vec::new();
    for n in names {
        if let Some(bit) = symbols::value(n)
            && bit != 0
            && v & bit == bit
        {
            out.push((*n).to_owned());
            v &= !bit;
        }
    }
    if v != 0 || out.is_empty() {
        out.push(format!("{v:#x}"));
    }
    out.join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_has_packetdrills_addresses_domains_and_icmp_names() {
        use std::path::Path;
        let family = |v| Config {
            ip_version: v,
            ..Config::default()
        };
        let v4 = family(IpVersion::Ipv4);
        let mapped = family(IpVersion::Ipv4MappedIpv6);
        let v6 = family(IpVersion::Ipv6);
        assert_eq!(v4.bind_ip().to_string(), "192.168.0.1");
        assert_eq!(mapped.bind_ip().to_string(), "::ffff:192.168.0.1");
        assert_eq!(mapped.connect_ip().to_string(), "::ffff:192.0.2.1");
        assert_eq!(mapped.local_wire().to_string(), "192.168.0.1");
        assert_eq!(v6.bind_ip().to_string(), "fd3d:fa7b:d17d::1");
        assert_eq!(v6.connect_ip().to_string(), "2001:db8::1");
        assert_eq!(v6.script_ip(v6.remote_ip).to_string(), "2001:db8::1");
        assert_eq!(
            [v4.mtu(), mapped.mtu(), v6.mtu()],
            [1500, 1500, 1520],
            "MSS 1460 in every family"
        );
        assert_eq!(IpVersion::Ipv4.socket_domain(), libc::AF_INET);
        assert_eq!(IpVersion::Ipv4MappedIpv6.socket_domain(), libc::AF_INET6);
        for v in IpVersion::ALL {
            assert_eq!(IpVersion::parse(v.name()), Some(v));
        }
        let (a4, a6, any) = (
            Path::new("icmp/x-v4.pkt"),
            Path::new("x-v6.pkt"),
            Path::new("x.pkt"),
        );
        assert!(IpVersion::Ipv6.skips(a4).is_some() && IpVersion::Ipv6.skips(a6).is_none());
        assert!(IpVersion::Ipv4MappedIpv6.skips(a6).is_some());
        assert!(IpVersion::Ipv4MappedIpv6.skips(a4).is_none());
        assert!(IpVersion::ALL.iter().all(|v| v.skips(any).is_none()));
        let icmp = |kind: &str, code: Option<&str>| IcmpSpec {
            kind: kind.to_owned(),
            code: code.map(str::to_owned),
            mtu: None,
            quoted: None,
        };
        let port = icmp("unreachable", Some("port_unreachable"));
        assert_eq!(icmp_numbers(&port, false), Ok((3, 3)));
        assert_eq!(icmp_numbers(&port, true), Ok((1, 4)));
        assert_eq!(
            icmp_numbers(&icmp("packet_too_big", None), true),
            Ok((2, 0))
        );
        assert!(icmp_numbers(&icmp("unreachable", Some("frag_needed")), true).is_err());
        assert!(icmp_numbers(&icmp("packet_too_big", None), false).is_err());
        assert_eq!(
            icmp_numbers(&icmp("type_7", Some("code_9")), true),
            Ok((7, 9))
        );
    }
    use crate::parse::parse;

    fn spec(line: &str) -> PacketSpec {
        let s = parse(&format!("0 > {line}")).unwrap();
        match &s.events[0].kind {
            EventKind::Outbound(p) => p.clone(),
            _ => unreachable!(),
        }
    }

    fn live(flags: u8, seq: u32, ack: u32, len: u32, options: Vec<TcpOpt>) -> LivePacket {
        let cfg = Config::default();
        LivePacket {
            src: cfg.local_ip.into(),
            dst: cfg.remote_ip.into(),
            body: LiveBody::Tcp(LiveTcp {
                src_port: cfg.local_port,
                dst_port: cfg.remote_port,
                seq,
                ack,
                flags: Flags(flags),
                win: 1000,
                options,
                len,
            }),
        }
    }

    #[test]
    fn the_comparator_learns_the_isn_and_checks_every_field() {
        let cfg = Config::default();
        let mut f = Flow::new(&cfg);
        let isn = 7_000_000u32;
        let syn_ack = live(
            Flags::SYN | Flags::ACK,
            isn,
            cfg.remote_isn.wrapping_add(1),
            0,
            vec![TcpOpt::Mss(1460)],
        );
        assert!(
            f.compare(&spec("S. 0:0(0) ack 1 <mss 1460>"), &syn_ack)
                .is_empty()
        );
        assert_eq!(f.local_isn, Some(isn));
        let ack =
            |flags, seq: u32, a: u32, len| live(flags, isn + seq, cfg.remote_isn + a, len, vec![]);
        assert!(
            f.compare(&spec(". 1:1001(1000) ack 1"), &ack(Flags::ACK, 1, 1, 1000))
                .is_empty()
        );
        // Each field that differs is named.
        let d = f.compare(&spec("P. 1:1001(1000) ack 1"), &ack(Flags::ACK, 1, 1, 1000));
        assert_eq!(d, vec!["tcp_flags: expected P., actual ."]);
        let d = f.compare(&spec(". 1:1001(1000) ack 2"), &ack(Flags::ACK, 1, 1, 1000));
        assert_eq!(d, vec!["tcp_ack: expected 2, actual 1"]);
        let d = f.compare(&spec(". 2:1002(1000) ack 1"), &ack(Flags::ACK, 1, 1, 1000));
        assert_eq!(d, vec!["tcp_seq: expected 2, actual 1"]);
        let d = f.compare(&spec(". 1:1(0) ack 1"), &ack(Flags::ACK, 1, 1, 1000));
        assert_eq!(d, vec!["tcp_payload_len: expected 0, actual 1000"]);
        let d = f.compare(&spec(". 1:1(0) ack 1 win 999"), &ack(Flags::ACK, 1, 1, 0));
        assert_eq!(d, vec!["tcp_window: expected 999, actual 1000"]);
        let d = f.compare(&spec(". 1:1(0) ack 1 <nop>"), &ack(Flags::ACK, 1, 1, 0));
        assert_eq!(d, vec!["tcp_options: expected <nop>, actual <>"]);
        // `<...>` skips the options; no `win` skips the window.
        assert!(
            f.compare(
                &spec(". 1:1(0) ack 1 <...>"),
                &live(
                    Flags::ACK,
                    isn + 1,
                    cfg.remote_isn + 1,
                    0,
                    vec![TcpOpt::Nop]
                )
            )
            .is_empty()
        );
        // TSecr must be what the script sent; TSval is free (it sets the offset).
        let ts = |ecr| {
            live(
                Flags::ACK,
                isn + 1,
                cfg.remote_isn + 1,
                0,
                vec![TcpOpt::Nop, TcpOpt::Nop, TcpOpt::Ts { val: 900, ecr }],
            )
        };
        let want_ts = spec(". 1:1(0) ack 1 <nop,nop,TS val 100 ecr 7>");
        assert!(f.compare(&want_ts, &ts(7)).is_empty());
        assert_eq!(f.ts_offset, Some(800));
        assert_eq!(
            f.compare(&want_ts, &ts(8)),
            vec![
                "tcp_options: expected <nop,nop,TS val 100 ecr 7>, actual <nop,nop,TS val 100 ecr 8>"
            ]
        );
        // SACK blocks are relative to the remote ISN.
        let sack = live(
            Flags::ACK,
            isn + 1,
            cfg.remote_isn + 1,
            0,
            vec![
                TcpOpt::Nop,
                TcpOpt::Nop,
                TcpOpt::Sack(vec![(cfg.remote_isn + 1001, cfg.remote_isn + 2001)]),
            ],
        );
        assert!(
            f.compare(&spec(". 1:1(0) ack 1 <nop,nop,sack 1001:2001>"), &sack)
                .is_empty()
        );
        assert!(
            !f.compare(&spec(". 1:1(0) ack 1 <nop,nop,sack 1001:2002>"), &sack)
                .is_empty()
        );
    }

    #[test]
    fn inbound_numbers_are_offset_by_the_isns() {
        let cfg = Config::default();
        let mut f = Flow::new(&cfg);
        f.local_isn = Some(5000);
        f.ts_offset = Some(100);
        let s = parse("0 < . 1:11(10) ack 1 win 257 <nop,nop,TS val 7 ecr 3>").unwrap();
        let EventKind::Inbound(p) = &s.events[0].kind else {
            unreachable!()
        };
        let pkt = f.inbound(p, 0).unwrap();
        let LiveBody::Tcp(t) = packet::decode(&pkt).unwrap().body else {
            unreachable!()
        };
        assert_eq!(t.seq, cfg.remote_isn + 1);
        assert_eq!(t.ack, 5001);
        assert_eq!(t.win, 257);
        assert_eq!(t.len, 10);
        assert_eq!(
            t.options,
            vec![TcpOpt::Nop, TcpOpt::Nop, TcpOpt::Ts { val: 7, ecr: 103 }]
        );
    }
}
