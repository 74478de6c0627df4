//! What the tests share.

use proptest::prelude::*;

/// Text built from the format's own pieces, so that random input gets deep into the
/// parser rather than failing on the first character.
#[allow(dead_code)]
pub fn soup() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "0",
        "+",
        ".1",
        "+.1",
        "...",
        "~",
        "*",
        "<",
        ">",
        "S",
        "S.",
        ".",
        "F.",
        "P.",
        "R",
        "0:0(0)",
        "1:1001(1000)",
        "ack",
        "win",
        "1",
        "<mss 1460,",
        "nop",
        "sackOK",
        "TS val 1 ecr 2",
        "wscale",
        "sack 1:2",
        ">",
        "socket(",
        "...",
        ",",
        ")",
        "=",
        "-1",
        "EAGAIN",
        "(",
        "[",
        "]",
        "{",
        "}",
        "fd=4",
        "|",
        "POLLIN",
        "\"s\"",
        "`x`",
        "%{",
        "}%",
        "/*",
        "*/",
        "//",
        "\n",
        " ",
        "udp",
        "icmp",
        "unreachable",
        "mtu",
        "--x=1",
        "0x1f",
        "99999999999999999999",
        "é",
    ]);
    prop::collection::vec(piece, 0..60).prop_map(|v| v.join(" "))
}

/// The scenarios' directory.
#[allow(dead_code)]
pub fn scenarios_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance")
}

/// The runner is not a rubber stamp: `close/passive-close.pkt`, which passes, with one
/// expectation changed at a time, fails through `run` with a packetdrill-style diff
/// naming the field and the line. `tag` names the temporary directory.
#[allow(dead_code)]
pub fn wrong_expectations_fail_with_a_diff(
    tag: &str,
    run: impl Fn(&std::path::Path) -> Result<(), String>,
) {
    let good = scenarios_dir().join("close/passive-close.pkt");
    let text = std::fs::read_to_string(&good).expect("reading the scenario");
    let cases = [
        // The ACK of the peer's FIN acknowledges 2, not 3.
        (
            "   +0 > . 1:1(0) ack 2\n",
            "   +0 > . 1:1(0) ack 3\n",
            "tcp_ack: expected 3, actual 2",
        ),
        // Our FIN is a FIN: the flags are compared.
        (
            "   +0 > F. 1:1(0) ack 2\n",
            "   +0 > . 1:1(0) ack 2\n",
            "tcp_flags: expected ., actual F.",
        ),
        // read() at the end of the stream returns 0.
        (
            "read(4, ..., 100) = 0",
            "read(4, ..., 100) = 1",
            "read() returned 0, expected 1",
        ),
    ];
    let dir = std::env::temp_dir().join(format!("ustack-conform-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (from, to, want) in cases {
        assert!(text.contains(from), "the scenario no longer has `{from}`");
        let bad = dir.join("mutated.pkt");
        std::fs::write(&bad, text.replacen(from, to, 1)).expect("writing the mutant");
        let line = text[..text.find(from).expect("checked")]
            .matches('\n')
            .count()
            + 1;
        let err = match run(&bad) {
            Ok(()) => panic!("the mutant `{}` passed", to.trim()),
            Err(e) => e,
        };
        assert!(
            err.contains(want),
            "the failure does not say `{want}`:\n{err}"
        );
        assert!(
            err.contains(&format!("mutated.pkt:{line}:")),
            "the failure does not name line {line}:\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
