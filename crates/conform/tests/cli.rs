//! The `ustack-conform` binary: usage, exit codes, and a failing script's line (what needs
//! no root: scripts that fail before a namespace is made).

use std::process::Command;

fn conform(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ustack-conform"))
        .args(args)
        .output()
        .expect("running ustack-conform");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn usage_and_bad_arguments() {
    let (code, text) = conform(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("usage: ustack-conform"), "{text}");
    for bad in [
        &[][..],
        &["--backend", "bsd", "x.pkt"],
        &["--tolerance-usecs", "0", "x.pkt"],
        &["--ip_version", "ipv5", "x.pkt"],
        &["--ip_version=", "x.pkt"],
        &["--frob"],
    ] {
        let (code, text) = conform(bad);
        assert_eq!(code, Some(2), "{bad:?}: {text}");
        assert!(text.contains("usage:"), "{bad:?}: {text}");
    }
}

#[test]
fn a_bad_script_fails_with_its_line_and_the_tally() {
    let dir = std::env::temp_dir().join(format!("ustack-conform-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.pkt");
    std::fs::write(
        &bad,
        "// a test\n0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 < Q 0:0(0) win 1\n",
    )
    .unwrap();
    let shell = dir.join("shell.pkt");
    // A sysctl line is taken; any other shell command is refused.
    std::fs::write(&shell, "`ip link set lo down`\n0 close(3) = 0\n").unwrap();
    let sysctl = dir.join("sysctl.pkt");
    std::fs::write(
        &sysctl,
        "`sysctl -q net.ipv4.tcp_sack=0 net.ipv4.tcp_rmem=\"1 2 3\"`\n0 close(3) = 0\n",
    )
    .unwrap();
    let (code, text) = conform(&[dir.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("bad.pkt:3: unknown TCP flag 'Q'"), "{text}");
    assert!(
        text.contains("shell.pkt:1: shell commands are refused"),
        "{text}"
    );
    assert!(
        text.contains("sysctl.pkt:1: `net.ipv4.tcp_rmem=\"1`: a sysctl is `net.NAME=NUMBER`"),
        "{text}"
    );
    assert!(text.contains("0 passed, 3 failed"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend ustack` runs scripts against ustack in the process (no root): a passing
/// scenario prints `ok`, a known difference fails with its diff, and the tally counts both.
#[test]
fn the_ustack_backend_runs_scripts_without_root() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/conformance/");
    let good = format!("{root}close/passive-close.pkt");
    let differs = format!("{root}data/write-split-at-peer-mss.pkt");
    let (code, text) = conform(&["--backend", "ustack", &good]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("ok    ") && text.contains("1 passed, 0 failed"),
        "{text}"
    );
    let (code, text) = conform(&["--backend", "ustack", &good, &differs]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("tcp_flags: expected P., actual ."), "{text}");
    assert!(text.contains("1 passed, 1 failed"), "{text}");
}

/// `--ip_version` runs a script in another family, and skips a script of the other one
/// (packetdrill's file-name rule) with a line saying so.
#[test]
fn ip_version_runs_a_family_and_skips_the_other_ones_scripts() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/conformance/");
    let good = format!("{root}close/passive-close.pkt");
    let v4 = format!("{root}icmp/frag-needed-lowers-mss-v4.pkt");
    let v6 = format!("{root}icmp/packet-too-big-lowers-mss-v6.pkt");
    let (code, text) = conform(&["--backend", "ustack", "--ip_version=ipv6", &good, &v4, &v6]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("skip  ") && text.contains("frag-needed-lowers-mss-v4"),
        "{text}"
    );
    assert!(
        text.contains("2 passed, 0 failed, 1 skipped (ipv6)"),
        "{text}"
    );
    let (code, text) = conform(&[
        "--backend",
        "ustack",
        "--ip_version",
        "ipv4-mapped-ipv6",
        &v4,
        &v6,
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("1 passed, 0 failed, 1 skipped (ipv4-mapped-ipv6)"),
        "{text}"
    );
}
