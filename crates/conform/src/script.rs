//! A parsed script: its options, its events in time order, and its headers.
//!
//! Times are resolved at parse time, as packetdrill does: every event carries the absolute
//! script time (microseconds from the script's start) it is due at, whether the line wrote
//! it absolutely (`0.100`) or relative to the previous event's start (`+.1`).

use core::fmt;

/// A whole script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// `--name=value` option lines, in order (see [`crate::exec::Config::apply_options`]).
    pub options: Vec<(String, Option<String>)>,
    /// The events, in the order written (their times never go backwards).
    pub events: Vec<Event>,
    /// `// linux: expected-fail <reason>`: the Linux backend is expected to fail this
    /// script, for the reason given.
    pub linux_expected_fail: Option<String>,
    /// `// ustack: differs <reason>`: ustack is known to behave differently from Linux
    /// here (so the ustack backend fails the script), for the reason given.
    pub ustack_differs: Option<String>,
    /// `// ustack ipv6: differs <reason>`: as `ustack_differs`, over `--ip_version=ipv6`
    /// only (a difference in ustack's IPv6 code alone).
    pub ustack_differs_ipv6: Option<String>,
}

impl Script {
    /// Why ustack is known to fail this script in `family`, if it is (the `ustack:` mark,
    /// or over `ipv6` the `ustack ipv6:` one).
    pub fn ustack_differs_in(&self, family: crate::exec::IpVersion) -> Option<&str> {
        self.ustack_differs.as_deref().or(match family {
            crate::exec::IpVersion::Ipv6 => self.ustack_differs_ipv6.as_deref(),
            _ => None,
        })
    }
}

/// When an event is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// At `start` (microseconds from the script's start), within the tolerance.
    At {
        /// The time.
        start: i64,
    },
    /// Anywhere in `start..=end` (a `0.1~0.2` range), within the tolerance.
    Range {
        /// The earliest time.
        start: i64,
        /// The latest time.
        end: i64,
    },
    /// At any time (`*`).
    Any {
        /// The time of the previous event (where relative times of later events start).
        start: i64,
    },
}

impl When {
    /// The earliest time the event is due.
    pub fn start(&self) -> i64 {
        match *self {
            When::At { start } | When::Range { start, .. } | When::Any { start } => start,
        }
    }
}

/// One line (or several, for a long system call) of the script.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The line it starts on (1-based).
    pub line: usize,
    /// When it is due.
    pub when: When,
    /// What it is.
    pub kind: EventKind,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// A packet the remote end sends (`<`): built and handed to the stack.
    Inbound(PacketSpec),
    /// A packet the stack must send (`>`): compared with the next one it sends.
    Outbound(PacketSpec),
    /// A system call and its expected result.
    Syscall(Syscall),
    /// A `` `shell command` ``: refused by the executor (it would mean nothing to ustack).
    Shell(String),
    /// A `%{ python }%` block: refused by the executor.
    Code(String),
}

/// A system call line: `name(args) = result`, maybe with an end time (`0...0.2`).
#[derive(Debug, Clone, PartialEq)]
pub struct Syscall {
    /// The call's name (`socket`, `accept`, ...).
    pub name: String,
    /// Its arguments.
    pub args: Vec<Expr>,
    /// The result expected.
    pub expect: Expect,
    /// For a blocking call (`start...end`): the script time it must return at. The
    /// executor runs it beside the events that follow until then.
    pub end: Option<i64>,
    /// The earliest it may return at: `end`, or `min` when written `start...min~max`
    /// (then `end` is `max`).
    pub end_min: Option<i64>,
}

/// An expected result: a value, and for `-1` maybe an errno name.
#[derive(Debug, Clone, PartialEq)]
pub struct Expect {
    /// The value (`= 3`, `= -1`), or `None` for `= ...` (any).
    pub value: Option<i64>,
    /// The errno name after `-1` (`EINPROGRESS`).
    pub errno: Option<String>,
}

/// An argument expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `...`: the executor's default (the script's addresses, a buffer of the right size).
    Ellipsis,
    /// An integer.
    Int(i64),
    /// A symbol (`SOCK_STREAM`, `EPOLLIN`), valued by [`crate::symbols`].
    Symbol(String),
    /// A string literal.
    Str(String),
    /// `a|b|c`.
    Or(Vec<Expr>),
    /// `[a, b]`: a list, or a pointer to an int (`[1]`).
    List(Vec<Expr>),
    /// `{name=value, ...}` (or positional members without names).
    Struct(Vec<(Option<String>, Expr)>),
    /// `name(args)`: `htons(8080)`, `inet_addr("192.0.2.1")`.
    Call(String, Vec<Expr>),
}

/// A packet line.
#[derive(Debug, Clone, PartialEq)]
pub enum PacketSpec {
    /// A TCP segment.
    Tcp(TcpSpec),
    /// A UDP datagram of `len` payload bytes.
    Udp {
        /// Payload length.
        len: u32,
    },
    /// An ICMP message.
    Icmp(IcmpSpec),
}

/// A TCP segment: flags, sequence numbers relative to the ISNs, window, options.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpSpec {
    /// `SRC>DST` ports written before the flags (packetdrill's `opt_port_info`): the
    /// remote end's port picks the connection a line belongs to when a script has several
    /// (`None`: the script's default connection).
    pub ports: Option<(u16, u16)>,
    /// The flags as written (`S`, `S.`, `P.`, `F.`, `R`, `R.`, ...).
    pub flags: Flags,
    /// The first sequence number (relative to the sender's ISN).
    pub seq: u32,
    /// The payload length.
    pub len: u32,
    /// The acknowledgment number (relative to the receiver's ISN), when `ack N` is written.
    pub ack: Option<u32>,
    /// The window field, when `win N` is written (outbound: not checked when absent).
    pub win: Option<u32>,
    /// The options: `None` for `<...>` (outbound: not checked); `Some(vec![])` when none
    /// are written (outbound: the segment must carry none).
    pub options: Option<Vec<TcpOpt>>,
}

/// TCP flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
    /// URG.
    pub const URG: u8 = 0x20;
    /// ECE.
    pub const ECE: u8 = 0x40;
    /// CWR.
    pub const CWR: u8 = 0x80;

    /// Whether `bit` is set.
    pub fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// The flags from packetdrill's letters (`S`, `.` for ACK, `F`, `P`, `R`, `U`, `E`,
    /// `W`), or the first letter that is none of them.
    pub fn from_letters(s: &str) -> Result<Flags, char> {
        let mut f = 0;
        for c in s.chars() {
            f |= match c {
                'F' => Self::FIN,
                'S' => Self::SYN,
                'R' => Self::RST,
                'P' => Self::PSH,
                '.' => Self::ACK,
                'U' => Self::URG,
                'E' => Self::ECE,
                'W' => Self::CWR,
                '-' => 0,
                other => return Err(other),
            };
        }
        Ok(Flags(f))
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        for (bit, c) in [
            (Self::SYN, 'S'),
            (Self::FIN, 'F'),
            (Self::RST, 'R'),
            (Self::PSH, 'P'),
            (Self::URG, 'U'),
            (Self::ECE, 'E'),
            (Self::CWR, 'W'),
            (Self::ACK, '.'),
        ] {
            if self.has(bit) {
                s.push(c);
            }
        }
        if s.is_empty() {
            s.push('-');
        }
        f.write_str(&s)
    }
}

/// A TCP option as a script writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOpt {
    /// `nop`.
    Nop,
    /// `eol`.
    Eol,
    /// `mss N`.
    Mss(u16),
    /// `wscale N`.
    Wscale(u8),
    /// `sackOK`.
    SackOk,
    /// `sack a:b c:d` (relative to the data sender's ISN).
    Sack(Vec<(u32, u32)>),
    /// `TS val V ecr E`.
    Ts {
        /// TSval.
        val: u32,
        /// TSecr.
        ecr: u32,
    },
}

impl fmt::Display for TcpOpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpOpt::Nop => f.write_str("nop"),
            TcpOpt::Eol => f.write_str("eol"),
            TcpOpt::Mss(v) => write!(f, "mss {v}"),
            TcpOpt::Wscale(v) => write!(f, "wscale {v}"),
            TcpOpt::SackOk => f.write_str("sackOK"),
            TcpOpt::Sack(blocks) => {
                f.write_str("sack")?;
                for (a, b) in blocks {
                    write!(f, " {a}:{b}")?;
                }
                Ok(())
            }
            TcpOpt::Ts { val, ecr } => write!(f, "TS val {val} ecr {ecr}"),
        }
    }
}

/// An ICMP message line: `icmp unreachable frag_needed mtu 1200 [1:1461(1460)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpSpec {
    /// The type's name (`unreachable`, `time_exceeded`, `echo_request`, ...).
    pub kind: String,
    /// The code's name (`frag_needed`, `port_unreachable`, ...), if written.
    pub code: Option<String>,
    /// `mtu N` (fragmentation needed).
    pub mtu: Option<u16>,
    /// The packet quoted inside: the stack's TCP segment `[seq:end(len)]` (relative to
    /// the local ISN) or its UDP datagram `[udp (len)]`.
    pub quoted: Option<Quoted>,
}

/// The packet an ICMP error quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoted {
    /// A TCP segment `start:end`.
    Tcp(u32, u32),
    /// A UDP datagram with this payload length.
    Udp(u32),
}

impl fmt::Display for TcpSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((a, b)) = self.ports {
            write!(f, "{a}>{b} ")?;
        }
        write!(
            f,
            "{} {}:{}({})",
            self.flags,
            self.seq,
            self.seq.wrapping_add(self.len),
            self.len
        )?;
        if let Some(a) = self.ack {
            write!(f, " ack {a}")?;
        }
        if let Some(w) = self.win {
            write!(f, " win {w}")?;
        }
        match &self.options {
            None => f.write_str(" <...>"),
            Some(o) if o.is_empty() => Ok(()),
            Some(o) => {
                let o: Vec<String> = o.iter().map(ToString::to_string).collect();
                write!(f, " <{}>", o.join(","))
            }
        }
    }
}

impl fmt::Display for PacketSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PacketSpec::Tcp(t) => t.fmt(f),
            PacketSpec::Udp { len } => write!(f, "udp ({len})"),
            PacketSpec::Icmp(i) => {
                write!(f, "icmp {}", i.kind)?;
                if let Some(c) = &i.code {
                    write!(f, " {c}")?;
                }
                if let Some(m) = i.mtu {
                    write!(f, " mtu {m}")?;
                }
                match i.quoted {
                    Some(Quoted::Tcp(s, e)) => write!(f, " [{s}:{e}({})]", e.wrapping_sub(s))?,
                    Some(Quoted::Udp(len)) => write!(f, " [udp ({len})]")?,
                    None => {}
                }
                Ok(())
            }
        }
    }
}

/// A script time in packetdrill's notation (`0.100`).
pub fn fmt_time(us: i64) -> String {
    let sign = if us < 0 { "-" } else { "" };
    let us = us.unsigned_abs();
    format!("{sign}{}.{:06}", us / 1_000_000, us % 1_000_000)
}
