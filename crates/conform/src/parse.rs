//! The parser for packetdrill's script format (the subset in docs/testing.md).
//!
//! Two stages: a lexer that turns the text into tokens (each with its line and whether
//! whitespace came before it: TCP flags like `S.` are the characters up to the next
//! space), and a recursive-descent parser over the tokens, one event at a time. Every
//! error names its line; no input makes either stage panic (a property test feeds them
//! random text).

use core::fmt;

use crate::script::{
    Event, EventKind, Expect, Expr, Flags, IcmpSpec, PacketSpec, Quoted, Script, Syscall, TcpOpt,
    TcpSpec, When,
};

/// A parse error: the line, and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The line (1-based).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// An integer (decimal or `0x` hex).
    Int(i64),
    /// A number with a fraction (`0.100`, `.1`), in microseconds when read as a time.
    Float(f64),
    Ident(String),
    Str(String),
    /// `` `...` ``.
    Shell(String),
    /// `%{ ... }%`.
    Code(String),
    /// `--name[=value]` at the start of a line.
    Opt(String, Option<String>),
    Ellipsis,
    /// Any other single character of punctuation.
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
    /// Whitespace (or a comment, or the start of the text) came right before it.
    spaced: bool,
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line = 1;
    let mut spaced = true;
    let mut line_start = true;
    // Text between byte offsets, lossily (the offsets are always at ASCII characters).
    let slice = |from: usize, to: usize| String::from_utf8_lossy(&b[from..to]).into_owned();
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            spaced = true;
            line_start = true;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            spaced = true;
            continue;
        }
        let start_line = line;
        let at_line_start = line_start;
        line_start = false;
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            spaced = true;
            continue;
        }
        if rest.starts_with(b"/*") {
            let Some(end) = find(&b[i + 2..], b"*/") else {
                return err(start_line, "unterminated /* comment");
            };
            line += count_lines(&b[i..i + 2 + end]);
            i += end + 4;
            spaced = true;
            continue;
        }
        let tok = if rest.starts_with(b"%{") {
            let Some(end) = find(&b[i + 2..], b"}%") else {
                return err(start_line, "unterminated %{ ... }% block");
            };
            let body = slice(i + 2, i + 2 + end);
            line += count_lines(&b[i..i + 2 + end]);
            i += end + 4;
            Tok::Code(body.trim().to_owned())
        } else if c == b'`' {
            let Some(end) = b[i + 1..].iter().position(|&x| x == b'`') else {
                return err(start_line, "unterminated ` shell command");
            };
            let body = slice(i + 1, i + 1 + end);
            line += count_lines(&b[i..i + 1 + end]);
            i += end + 2;
            Tok::Shell(body.trim().to_owned())
        } else if at_line_start && rest.starts_with(b"--") {
            let end = rest.iter().position(|&x| x == b'\n').unwrap_or(rest.len());
            let body = slice(i + 2, i + end);
            i += end;
            let body = body.trim();
            match body.split_once('=') {
                Some((k, v)) => Tok::Opt(k.to_owned(), Some(v.to_owned())),
                None => Tok::Opt(body.to_owned(), None),
            }
        } else if c == b'"' {
            let mut s = Vec::new();
            let mut j = i + 1;
            loop {
                match b.get(j) {
                    None => return err(start_line, "unterminated string"),
                    Some(b'"') => break,
                    Some(b'\\') => {
                        match b.get(j + 1) {
                            Some(b'n') => s.push(b'\n'),
                            Some(b't') => s.push(b'\t'),
                            Some(&x) => s.push(x),
                            None => return err(start_line, "unterminated string"),
                        }
                        j += 2;
                    }
                    Some(&x) => {
                        if x == b'\n' {
                            line += 1;
                        }
                        s.push(x);
                        j += 1;
                    }
                }
            }
            i = j + 1;
            Tok::Str(String::from_utf8_lossy(&s).into_owned())
        } else if rest.starts_with(b"...") {
            i += 3;
            Tok::Ellipsis
        } else if c.is_ascii_digit() || (c == b'.' && rest.get(1).is_some_and(u8::is_ascii_digit)) {
            let (tok, used) = number(rest).map_err(|m| ParseError {
                line: start_line,
                message: m,
            })?;
            i += used;
            tok
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = rest
                .iter()
                .position(|x| !(x.is_ascii_alphanumeric() || *x == b'_'))
                .unwrap_or(rest.len());
            i += end;
            Tok::Ident(slice(i - end, i))
        } else if c.is_ascii_punctuation() {
            i += 1;
            Tok::Punct(c as char)
        } else {
            let ch = text.get(i..).and_then(|s| s.chars().next()).unwrap_or('?');
            return err(start_line, format!("unexpected character {ch:?}"));
        };
        toks.push(Token {
            tok,
            line: start_line,
            spaced,
        });
        spaced = false;
    }
    Ok(toks)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn count_lines(b: &[u8]) -> usize {
    b.iter().filter(|&&x| x == b'\n').count()
}

/// A number at the start of `b`: `123`, `0x1f`, `0.100`, `.1` (a `.` followed by another
/// `.` is left alone: `0...0.2`).
fn number(b: &[u8]) -> Result<(Tok, usize), String> {
    if b.starts_with(b"0x") || b.starts_with(b"0X") {
        let end = 2 + b[2..].iter().take_while(|x| x.is_ascii_hexdigit()).count();
        let s = String::from_utf8_lossy(&b[2..end]);
        return i64::from_str_radix(&s, 16)
            .map(|v| (Tok::Int(v), end))
            .map_err(|_| format!("bad hex number 0x{s}"));
    }
    let mut end = b.iter().take_while(|x| x.is_ascii_digit()).count();
    let frac = b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(u8::is_ascii_digit);
    let s_int = String::from_utf8_lossy(&b[..end]).into_owned();
    if !frac {
        return s_int
            .parse::<i64>()
            .map(|v| (Tok::Int(v), end))
            .map_err(|_| format!("number {s_int} is too large"));
    }
    end += 1;
    end += b[end..].iter().take_while(|x| x.is_ascii_digit()).count();
    let s = String::from_utf8_lossy(&b[..end]).into_owned();
    s.parse::<f64>()
        .map(|v| (Tok::Float(v), end))
        .map_err(|_| format!("bad number {s}"))
}

/// Parses a whole script.
pub fn parse(text: &str) -> Result<Script, ParseError> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        last_line: 1,
    };
    let mut script = Script {
        options: Vec::new(),
        events: Vec::new(),
        linux_expected_fail: header(text, "linux:", "expected-fail"),
        ustack_differs: header(text, "ustack:", "differs"),
        ustack_differs_ipv6: header(text, "ustack ipv6:", "differs"),
    };
    let mut prev = 0i64;
    while let Some(t) = p.peek().cloned() {
        if let Tok::Opt(k, v) = &t.tok {
            if !script.events.is_empty() {
                return err(t.line, format!("option --{k} after the first event"));
            }
            script.options.push((k.clone(), v.clone()));
            p.pos += 1;
            continue;
        }
        let event = p.event(prev)?;
        if event.when.start() < prev {
            return err(
                event.line,
                format!(
                    "time {} is before the previous event's {}",
                    crate::script::fmt_time(event.when.start()),
                    crate::script::fmt_time(prev)
                ),
            );
        }
        prev = event.when.start();
        script.events.push(event);
    }
    Ok(script)
}

/// The reason of a `// <who> <what> <reason>` header line (`// linux: expected-fail
/// ...`, `// ustack: differs ...`), if there is one.
fn header(text: &str, who: &str, what: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let l = l.trim().strip_prefix("//")?.trim();
        let r = l.strip_prefix(who)?.trim().strip_prefix(what)?;
        Some(r.trim().to_owned())
    })
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    last_line: usize,
}

/// The most a script time may be: a day, in microseconds.
const MAX_TIME_US: f64 = 86_400e6;

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn peek_tok(&self) -> Option<&Tok> {
        self.peek().map(|t| &t.tok)
    }

    fn line(&self) -> usize {
        self.peek().map_or(self.last_line, |t| t.line)
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                self.last_line = t.line;
                Ok(t.clone())
            }
            None => err(self.last_line, "unexpected end of script"),
        }
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek_tok() == Some(&Tok::Punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.is_punct(c);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn expect_punct(&mut self, c: char, what: &str) -> Result<(), ParseError> {
        let t = self.next()?;
        if t.tok == Tok::Punct(c) {
            Ok(())
        } else {
            err(
                t.line,
                format!("expected `{c}` {what}, found {}", show(&t.tok)),
            )
        }
    }

    fn is_ident(&self, name: &str) -> bool {
        matches!(self.peek_tok(), Some(Tok::Ident(s)) if s == name)
    }

    fn uint(&mut self, what: &str) -> Result<u64, ParseError> {
        let t = self.next()?;
        match t.tok {
            Tok::Int(v) if v >= 0 => Ok(v as u64),
            other => err(t.line, format!("expected {what}, found {}", show(&other))),
        }
    }

    fn u32(&mut self, what: &str) -> Result<u32, ParseError> {
        let line = self.line();
        let v = self.uint(what)?;
        u32::try_from(v).or_else(|_| err(line, format!("{what} {v} does not fit 32 bits")))
    }

    /// A time in seconds (`0`, `.1`, `1.5`), in microseconds.
    fn seconds(&mut self) -> Result<i64, ParseError> {
        let t = self.next()?;
        let secs = match t.tok {
            Tok::Int(v) => v as f64,
            Tok::Float(v) => v,
            other => return err(t.line, format!("expected a time, found {}", show(&other))),
        };
        if !(0.0..=MAX_TIME_US / 1e6).contains(&secs) {
            return err(t.line, format!("time {secs} is out of range (0 to a day)"));
        }
        Ok((secs * 1e6).round() as i64)
    }

    /// A time that may be relative (`+.1`) to `base`.
    fn time(&mut self, base: i64) -> Result<i64, ParseError> {
        if self.eat_punct('+') {
            Ok(base + self.seconds()?)
        } else {
            self.seconds()
        }
    }

    fn event(&mut self, prev: i64) -> Result<Event, ParseError> {
        let line = self.line();
        // A shell command or code block may stand without a time (packetdrill's scripts
        // start with `` `../common/defaults.sh` ``): it runs at the previous event's time.
        if let Some(Tok::Shell(_) | Tok::Code(_)) = self.peek_tok() {
            let kind = match self.next()?.tok {
                Tok::Shell(s) => EventKind::Shell(s),
                Tok::Code(s) => EventKind::Code(s),
                _ => unreachable!("peeked above"),
            };
            return Ok(Event {
                line,
                when: When::At { start: prev },
                kind,
            });
        }
        let when = if self.eat_punct('*') {
            When::Any { start: prev }
        } else {
            let start = self.time(prev)?;
            if self.eat_punct('~') {
                let end = self.time(prev)?;
                if end < start {
                    return err(line, "time range ends before it starts");
                }
                When::Range { start, end }
            } else {
                When::At { start }
            }
        };
        let mut end = None;
        if self.peek_tok() == Some(&Tok::Ellipsis) {
            self.pos += 1;
            let e = self.time(when.start())?;
            if e < when.start() {
                return err(line, "a system call's end time is before its start");
            }
            // `start...min~max`: the call returns anywhere in [min, max] (ours: a kernel
            // timer that fires late ends a call late).
            let latest = if self.eat_punct('~') {
                let m = self.time(when.start())?;
                if m < e {
                    return err(line, "a system call's end range ends before it starts");
                }
                m
            } else {
                e
            };
            end = Some((e, latest));
        }
        let t = self.next()?;
        let kind = match t.tok {
            Tok::Punct('<') => EventKind::Inbound(self.packet(line)?),
            Tok::Punct('>') => EventKind::Outbound(self.packet(line)?),
            Tok::Shell(s) => EventKind::Shell(s),
            Tok::Code(s) => EventKind::Code(s),
            Tok::Ident(name) => EventKind::Syscall(self.syscall(name, end)?),
            other => {
                return err(
                    t.line,
                    format!(
                        "expected a packet (`<` or `>`), a system call, a `shell` command or a %{{ }}% block, found {}",
                        show(&other)
                    ),
                );
            }
        };
        if end.is_some() && !matches!(kind, EventKind::Syscall(_)) {
            return err(line, "only a system call takes an end time (`start...end`)");
        }
        Ok(Event { line, when, kind })
    }

    fn packet(&mut self, line: usize) -> Result<PacketSpec, ParseError> {
        if self.is_ident("udp") {
            self.pos += 1;
            self.expect_punct('(', "before the UDP payload length")?;
            let len = self.u32("a payload length")?;
            self.expect_punct(')', "after the UDP payload length")?;
            return Ok(PacketSpec::Udp { len });
        }
        if self.is_ident("icmp") {
            self.pos += 1;
            return self.icmp().map(PacketSpec::Icmp);
        }
        // `SRC>DST` ports before the flags (packetdrill's `opt_port_info`).
        let ports = self.ports()?;
        // Flags: every token up to the next whitespace.
        let mut letters = String::new();
        loop {
            let t = self.next()?;
            match &t.tok {
                Tok::Ident(s) => letters.push_str(s),
                Tok::Punct(c) => letters.push(*c),
                Tok::Ellipsis => letters.push_str("..."),
                other => return err(t.line, format!("expected TCP flags, found {}", show(other))),
            }
            if self.peek().is_none_or(|n| n.spaced) {
                break;
            }
        }
        let flags = Flags::from_letters(&letters)
            .or_else(|c| err(line, format!("unknown TCP flag {c:?} in `{letters}`")))?;
        let seq = self.u32("a sequence number")?;
        self.expect_punct(':', "between sequence numbers")?;
        let end = self.u32("an end sequence number")?;
        self.expect_punct('(', "before the payload length")?;
        let len = self.u32("a payload length")?;
        self.expect_punct(')', "after the payload length")?;
        if end.wrapping_sub(seq) != len {
            return err(
                line,
                format!("sequence range {seq}:{end} does not match its length ({len})"),
            );
        }
        let mut spec = TcpSpec {
            ports,
            flags,
            seq,
            len,
            ack: None,
            win: None,
            options: Some(Vec::new()),
        };
        loop {
            if self.is_ident("ack") {
                self.pos += 1;
                spec.ack = Some(self.u32("an ack number")?);
            } else if self.is_ident("win") {
                self.pos += 1;
                spec.win = Some(self.u32("a window")?);
            } else if self.is_punct('<') {
                self.pos += 1;
                spec.options = self.tcp_options()?;
            } else {
                break;
            }
        }
        if spec.ack.is_some() != flags.has(Flags::ACK) {
            return err(
                line,
                if flags.has(Flags::ACK) {
                    "an ACK (`.`) segment needs `ack N`"
                } else {
                    "`ack N` on a segment without the ACK flag (`.`)"
                },
            );
        }
        Ok(spec.into())
    }

    /// `SRC>DST` (two port numbers around `>`), if the next tokens are that.
    fn ports(&mut self) -> Result<Option<(u16, u16)>, ParseError> {
        let is_ports = matches!(
            (
                self.toks.get(self.pos).map(|t| &t.tok),
                self.toks.get(self.pos + 1).map(|t| &t.tok),
                self.toks.get(self.pos + 2).map(|t| &t.tok),
            ),
            (Some(Tok::Int(_)), Some(Tok::Punct('>')), Some(Tok::Int(_)))
        );
        if !is_ports {
            return Ok(None);
        }
        let line = self.line();
        let src = self.uint("a source port")?;
        self.expect_punct('>', "between ports")?;
        let dst = self.uint("a destination port")?;
        match (u16::try_from(src), u16::try_from(dst)) {
            (Ok(s), Ok(d)) => Ok(Some((s, d))),
            _ => err(line, format!("ports {src}>{dst}: each 0 to 65535")),
        }
    }

    fn icmp(&mut self) -> Result<IcmpSpec, ParseError> {
        let t = self.next()?;
        let Tok::Ident(kind) = t.tok else {
            return err(t.line, "expected an ICMP type (`unreachable`, ...)");
        };
        let mut spec = IcmpSpec {
            kind,
            code: None,
            mtu: None,
            quoted: None,
        };
        if let Some(Tok::Ident(c)) = self.peek_tok()
            && c != "mtu"
        {
            spec.code = Some(c.clone());
            self.pos += 1;
        }
        if self.is_ident("mtu") {
            self.pos += 1;
            let line = self.line();
            let m = self.uint("an MTU")?;
            spec.mtu = Some(u16::try_from(m).or_else(|_| err(line, "MTU over 65535"))?);
        }
        if self.eat_punct('[') {
            if self.is_ident("udp") {
                self.pos += 1;
                self.expect_punct('(', "before the quoted UDP length")?;
                let len = self.u32("a quoted UDP length")?;
                self.expect_punct(')', "after the quoted UDP length")?;
                self.expect_punct(']', "after the quoted datagram")?;
                spec.quoted = Some(Quoted::Udp(len));
                return Ok(spec);
            }
            let s = self.u32("a quoted sequence number")?;
            self.expect_punct(':', "in the quoted segment")?;
            let e = self.u32("a quoted end sequence number")?;
            self.expect_punct('(', "in the quoted segment")?;
            self.u32("a quoted length")?;
            self.expect_punct(')', "in the quoted segment")?;
            self.expect_punct(']', "after the quoted segment")?;
            spec.quoted = Some(Quoted::Tcp(s, e));
        }
        Ok(spec)
    }

    /// The options after `<`, through `>`: `None` for `<...>`.
    fn tcp_options(&mut self) -> Result<Option<Vec<TcpOpt>>, ParseError> {
        if self.peek_tok() == Some(&Tok::Ellipsis) {
            self.pos += 1;
            self.expect_punct('>', "after `<...`")?;
            return Ok(None);
        }
        let mut opts = Vec::new();
        if self.eat_punct('>') {
            return Ok(Some(opts));
        }
        loop {
            let t = self.next()?;
            let Tok::Ident(name) = &t.tok else {
                return err(
                    t.line,
                    format!("expected a TCP option, found {}", show(&t.tok)),
                );
            };
            let opt = match name.as_str() {
                "nop" => TcpOpt::Nop,
                "eol" => TcpOpt::Eol,
                "sackOK" => TcpOpt::SackOk,
                "mss" => {
                    let v = self.uint("an MSS")?;
                    TcpOpt::Mss(u16::try_from(v).or_else(|_| err(t.line, "MSS over 65535"))?)
                }
                "wscale" => {
                    let v = self.uint("a window scale")?;
                    TcpOpt::Wscale(u8::try_from(v).or_else(|_| err(t.line, "wscale over 255"))?)
                }
                "sack" => {
                    let mut blocks = Vec::new();
                    while matches!(self.peek_tok(), Some(Tok::Int(_))) {
                        let a = self.u32("a SACK block start")?;
                        self.expect_punct(':', "in a SACK block")?;
                        let b = self.u32("a SACK block end")?;
                        blocks.push((a, b));
                    }
                    if blocks.is_empty() || blocks.len() > 4 {
                        return err(t.line, "`sack` takes 1 to 4 blocks `start:end`");
                    }
                    TcpOpt::Sack(blocks)
                }
                "TS" => {
                    if !self.is_ident("val") {
                        return err(t.line, "expected `TS val N ecr N`");
                    }
                    self.pos += 1;
                    let val = self.u32("a TS value")?;
                    if !self.is_ident("ecr") {
                        return err(t.line, "expected `ecr N` after `TS val N`");
                    }
                    self.pos += 1;
                    let ecr = self.u32("a TS echo reply")?;
                    TcpOpt::Ts { val, ecr }
                }
                other => {
                    return err(
                        t.line,
                        format!(
                            "TCP option `{other}` is not supported (mss, wscale, sackOK, sack, TS, nop, eol)"
                        ),
                    );
                }
            };
            opts.push(opt);
            if self.eat_punct('>') {
                return Ok(Some(opts));
            }
            self.expect_punct(',', "between TCP options")?;
        }
    }

    fn syscall(&mut self, name: String, end: Option<(i64, i64)>) -> Result<Syscall, ParseError> {
        self.expect_punct('(', &format!("after `{name}`"))?;
        let mut args = Vec::new();
        if !self.eat_punct(')') {
            loop {
                args.push(self.expr(0)?);
                if self.eat_punct(')') {
                    break;
                }
                self.expect_punct(',', "between arguments")?;
            }
        }
        self.expect_punct('=', &format!("before the result of `{name}`"))?;
        let expect = self.expect_result()?;
        Ok(Syscall {
            name,
            args,
            expect,
            end: end.map(|(_, latest)| latest),
            end_min: end.map(|(earliest, _)| earliest),
        })
    }

    fn expect_result(&mut self) -> Result<Expect, ParseError> {
        if self.peek_tok() == Some(&Tok::Ellipsis) {
            self.pos += 1;
            return Ok(Expect {
                value: None,
                errno: None,
            });
        }
        let line = self.line();
        if let Some(Tok::Ident(_)) = self.peek_tok() {
            // A symbolic result: `= O_RDWR|O_NONBLOCK`.
            let e = self.expr(0)?;
            let value = symbolic(&e).or_else(|m| err(line, m))?;
            return Ok(Expect {
                value: Some(value),
                errno: None,
            });
        }
        let neg = self.eat_punct('-');
        let mut value = self.uint("a result value")? as i64;
        if neg {
            value = -value;
        }
        let mut errno = None;
        if let Some(Tok::Ident(e)) = self.peek_tok() {
            // An errno name is all capitals, on the result's line.
            if self.peek().is_some_and(|t| t.line == line) && e.starts_with('E') {
                errno = Some(e.clone());
                self.pos += 1;
            }
        }
        // `(Operation now in progress)`: a note for the reader, on the result's line.
        if self.is_punct('(') && self.peek().is_some_and(|t| t.line == line) {
            let mut depth = 0usize;
            loop {
                let t = self.next()?;
                match t.tok {
                    Tok::Punct('(') => depth += 1,
                    Tok::Punct(')') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
        if errno.is_some() && value != -1 {
            return err(line, "an errno name follows only the result -1");
        }
        Ok(Expect {
            value: Some(value),
            errno,
        })
    }

    /// An expression; `depth` bounds nesting so that hostile input cannot overflow the
    /// stack.
    fn expr(&mut self, depth: usize) -> Result<Expr, ParseError> {
        if depth > 32 {
            return err(self.line(), "expression nested too deeply");
        }
        let first = self.atom(depth)?;
        if !self.is_punct('|') {
            return Ok(first);
        }
        let mut parts = vec![first];
        while self.eat_punct('|') {
            parts.push(self.atom(depth)?);
        }
        Ok(Expr::Or(parts))
    }

    fn atom(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let t = self.next()?;
        Ok(match t.tok {
            Tok::Ellipsis => Expr::Ellipsis,
            Tok::Int(v) => Expr::Int(v),
            Tok::Punct('-') => {
                let n = self.next()?;
                match n.tok {
                    Tok::Int(v) => Expr::Int(-v),
                    other => {
                        return err(
                            n.line,
                            format!("expected a number after `-`, found {}", show(&other)),
                        );
                    }
                }
            }
            Tok::Str(s) => Expr::Str(s),
            Tok::Ident(name) => {
                if self.eat_punct('(') {
                    let mut args = Vec::new();
                    if !self.eat_punct(')') {
                        loop {
                            args.push(self.expr(depth + 1)?);
                            if self.eat_punct(')') {
                                break;
                            }
                            self.expect_punct(',', "between arguments")?;
                        }
                    }
                    Expr::Call(name, args)
                } else {
                    Expr::Symbol(name)
                }
            }
            Tok::Punct('[') => {
                let mut items = Vec::new();
                if !self.eat_punct(']') {
                    loop {
                        items.push(self.expr(depth + 1)?);
                        if self.eat_punct(']') {
                            break;
                        }
                        self.expect_punct(',', "between list items")?;
                    }
                }
                Expr::List(items)
            }
            Tok::Punct('{') => {
                let mut fields = Vec::new();
                if !self.eat_punct('}') {
                    loop {
                        let named = matches!(self.peek_tok(), Some(Tok::Ident(_)))
                            && self.toks.get(self.pos + 1).map(|t| &t.tok)
                                == Some(&Tok::Punct('='));
                        let name = if named {
                            let Tok::Ident(n) = self.next()?.tok else {
                                unreachable!("checked above")
                            };
                            self.pos += 1;
                            Some(n)
                        } else {
                            None
                        };
                        fields.push((name, self.expr(depth + 1)?));
                        if self.eat_punct('}') {
                            break;
                        }
                        self.expect_punct(',', "between struct members")?;
                    }
                }
                Expr::Struct(fields)
            }
            other => {
                return err(
                    t.line,
                    format!("expected an argument, found {}", show(&other)),
                );
            }
        })
    }
}

impl From<TcpSpec> for PacketSpec {
    fn from(t: TcpSpec) -> Self {
        PacketSpec::Tcp(t)
    }
}

/// The value of a result written with symbols (`O_RDWR|O_NONBLOCK`).
fn symbolic(e: &Expr) -> Result<i64, String> {
    match e {
        Expr::Int(v) => Ok(*v),
        Expr::Symbol(s) => {
            crate::symbols::value(s).ok_or_else(|| format!("unknown symbol {s} in the result"))
        }
        Expr::Or(parts) => parts.iter().try_fold(0, |acc, p| Ok(acc | symbolic(p)?)),
        other => Err(format!("result {other:?}: write a number or symbols")),
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Int(v) => format!("`{v}`"),
        Tok::Float(v) => format!("`{v}`"),
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Shell(_) => "a `shell` command".to_owned(),
        Tok::Code(_) => "a %{ }% block".to_owned(),
        Tok::Opt(k, _) => format!("option --{k}"),
        Tok::Ellipsis => "`...`".to_owned(),
        Tok::Punct(c) => format!("`{c}`"),
    }
}
