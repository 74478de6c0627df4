//! The script parser: the packetdrill forms the scenarios use, line-numbered errors, and
//! no panic on any input.

mod common;

use common::soup;
use proptest::prelude::*;
use ustack_conform::parse::parse;
use ustack_conform::script::{EventKind, Expr, Flags, PacketSpec, Quoted, TcpOpt, When};

const SAMPLE: &str = r#"// A comment line.
--tolerance_usecs=10000
/* a block
   comment */
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
  +.1 < S 0:0(0) win 32792 <mss 1000,sackOK,TS val 100 ecr 0,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8>
 0.25~0.3 > P. 1:1001(1000) ack 1 <...>
   +0...0.5 accept(3, ..., ...) = 4
   +0 connect(3, ..., ...) = -1 EINPROGRESS (Operation now in progress)
    * > F. 1001:1001(0) ack 1
   +0 < . 1:1(0) ack 1001 win 257 <sack 2001:3001 4001:5001,nop,nop>
   +0 fcntl(4, F_GETFL) = O_RDWR|O_NONBLOCK
   +0 poll([{fd=4, events=POLLIN|POLLOUT, revents=POLLOUT}], 1, 0) = 1
   +0 < icmp unreachable frag_needed mtu 1200 [1:1461(1460)]
   +0 > udp (100)
   +0 < icmp unreachable port_unreachable [udp (100)]
   +0 `sysctl -q net.ipv4.tcp_sack=1`
   +0 %{ assert tcpi_rto == 300000 }%
"#;

#[test]
fn the_packetdrill_forms_parse_to_what_they_say() {
    let s = parse(SAMPLE).unwrap();
    assert_eq!(
        s.options,
        vec![("tolerance_usecs".to_owned(), Some("10000".to_owned()))]
    );
    let e = &s.events;
    assert_eq!(e.len(), 16);
    assert_eq!(e[0].line, 5);
    // Relative times add to the previous event's start.
    assert_eq!(e[2].when, When::At { start: 100_000 });
    let EventKind::Inbound(PacketSpec::Tcp(syn)) = &e[2].kind else {
        panic!("{:?}", e[2].kind)
    };
    assert_eq!(syn.flags, Flags(Flags::SYN));
    assert_eq!(syn.win, Some(32792));
    assert_eq!(
        syn.options,
        Some(vec![
            TcpOpt::Mss(1000),
            TcpOpt::SackOk,
            TcpOpt::Ts { val: 100, ecr: 0 },
            TcpOpt::Nop,
            TcpOpt::Wscale(7),
        ])
    );
    let EventKind::Outbound(PacketSpec::Tcp(data)) = &e[4].kind else {
        panic!()
    };
    assert_eq!(
        e[4].when,
        When::Range {
            start: 250_000,
            end: 300_000
        }
    );
    assert_eq!(
        (data.seq, data.len, data.ack, data.options.clone()),
        (1, 1000, Some(1), None)
    );
    assert_eq!(data.flags, Flags(Flags::PSH | Flags::ACK));
    let EventKind::Syscall(accept) = &e[5].kind else {
        panic!()
    };
    assert_eq!(accept.end, Some(500_000));
    assert_eq!(accept.expect.value, Some(4));
    let EventKind::Syscall(connect) = &e[6].kind else {
        panic!()
    };
    assert_eq!(connect.expect.value, Some(-1));
    assert_eq!(connect.expect.errno.as_deref(), Some("EINPROGRESS"));
    assert!(matches!(e[7].when, When::Any { .. }));
    let EventKind::Inbound(PacketSpec::Tcp(sack)) = &e[8].kind else {
        panic!()
    };
    assert_eq!(
        sack.options.as_ref().unwrap()[0],
        TcpOpt::Sack(vec![(2001, 3001), (4001, 5001)])
    );
    let EventKind::Syscall(fcntl) = &e[9].kind else {
        panic!()
    };
    assert_eq!(
        fcntl.expect.value,
        Some(i64::from(libc::O_RDWR | libc::O_NONBLOCK))
    );
    let EventKind::Syscall(poll) = &e[10].kind else {
        panic!()
    };
    assert!(
        matches!(&poll.args[0], Expr::List(items) if matches!(&items[0], Expr::Struct(f) if f.len() == 3))
    );
    let EventKind::Inbound(PacketSpec::Icmp(icmp)) = &e[11].kind else {
        panic!()
    };
    assert_eq!(
        (icmp.code.as_deref(), icmp.mtu, icmp.quoted),
        (Some("frag_needed"), Some(1200), Some(Quoted::Tcp(1, 1461)))
    );
    assert_eq!(
        e[12].kind,
        EventKind::Outbound(PacketSpec::Udp { len: 100 })
    );
    let EventKind::Inbound(PacketSpec::Icmp(icmp)) = &e[13].kind else {
        panic!()
    };
    assert_eq!(icmp.quoted, Some(Quoted::Udp(100)));
    assert_eq!(
        e[14].kind,
        EventKind::Shell("sysctl -q net.ipv4.tcp_sack=1".to_owned())
    );
    assert!(matches!(&e[15].kind, EventKind::Code(c) if c.contains("tcpi_rto")));
}

#[test]
fn untimed_shell_and_code_blocks_take_the_previous_time() {
    let s = parse("`../common/defaults.sh\nmore`\n0.5 close(3) = 0\n%{ print(1) }%\n").unwrap();
    assert_eq!(s.events.len(), 3);
    assert_eq!(s.events[0].when, When::At { start: 0 });
    assert!(matches!(&s.events[0].kind, EventKind::Shell(c) if c.contains("defaults.sh\nmore")));
    assert_eq!(
        (s.events[2].line, s.events[2].when),
        (4, When::At { start: 500_000 })
    );
}

#[test]
fn errors_name_the_line_and_the_problem() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 < Q 0:0(0) win 1",
            2,
            "unknown TCP flag 'Q'",
        ),
        ("\n\n0 < S 0:5(0) win 1", 3, "does not match its length"),
        ("0 < . 1:1(0) win 1", 1, "needs `ack N`"),
        ("0 < S 0:0(0) ack 1 win 1", 1, "without the ACK flag"),
        (
            "0 < S 0:0(0) <mss 1460,bogus 3>",
            1,
            "TCP option `bogus` is not supported",
        ),
        (
            "0.2 close(3) = 0\n0.1 close(4) = 0",
            2,
            "before the previous event",
        ),
        (
            "0 close(3) = 0\n\n  +0 read(3, ..., 10 = 0",
            3,
            "expected `,` between arguments",
        ),
        ("0 close(3) = 0 EBADF", 1, "follows only the result -1"),
        ("0 < S 0:0(0) <sack>", 1, "1 to 4 blocks"),
        ("0 %{ unterminated", 1, "unterminated"),
        (
            "0 close(3) = 0\n0 > S 0:0(0)\n0 < S 99999999999:0(0)",
            3,
            "does not fit 32 bits",
        ),
        ("0 fcntl(3, F_GETFL) = O_BOGUS", 1, "unknown symbol O_BOGUS"),
        ("0 close(3)", 1, "unexpected end of script"),
        ("0 < S 0:0(0) win 1\n0 --option=1", 2, "expected a packet"),
    ];
    for (text, line, msg) in cases {
        let e = parse(text).expect_err(text);
        assert_eq!(e.line, *line, "{text:?}: {e}");
        assert!(
            e.message.contains(msg),
            "{text:?}: `{}` lacks `{msg}`",
            e.message
        );
    }
}

#[test]
fn every_scenario_parses() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let scripts = ustack_conform::scripts_under(&dir).unwrap();
    assert!(!scripts.is_empty());
    for p in scripts {
        let text = std::fs::read_to_string(&p).unwrap();
        let s = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            text.starts_with("//"),
            "{}: a scenario starts with a comment citing its rule",
            p.display()
        );
        ustack_conform::exec::check_supported(&s)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        let _ = parse(&text);
    }

    #[test]
    fn random_token_soup_never_panics(text in soup()) {
        if let Err(e) = parse(&text) {
            // Every error names a line of the text.
            prop_assert!(e.line >= 1 && e.line <= text.lines().count().max(1) + 1, "{e}");
        }
    }
}

/// packetdrill's `SRC>DST` ports before the flags (`opt_port_info`), and a sysctl line.
#[test]
fn ports_and_sysctl_lines_parse() {
    let s = parse("`sysctl -q net.ipv4.tcp_syncookies=2`\n0 < 40001>8080 S 0:0(0) win 1\n+0 > 8080>40001 S. 0:0(0) ack 1 <...>\n+0 > . 1:1(0) ack 1\n").unwrap();
    assert_eq!(s.events.len(), 4);
    assert!(
        matches!(&s.events[0].kind, EventKind::Shell(c) if c == "sysctl -q net.ipv4.tcp_syncookies=2")
    );
    let ports = |i: usize| match &s.events[i].kind {
        EventKind::Inbound(PacketSpec::Tcp(t)) | EventKind::Outbound(PacketSpec::Tcp(t)) => t.ports,
        other => panic!("{other:?}"),
    };
    assert_eq!(ports(1), Some((40001, 8080)));
    assert_eq!(ports(2), Some((8080, 40001)));
    assert_eq!(ports(3), None);
    let e = parse("0 < 70000>8080 S 0:0(0) win 1\n").unwrap_err();
    assert!(e.message.contains("ports 70000>8080"), "{}", e.message);
}
