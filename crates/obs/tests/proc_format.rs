//! Our renderings against the running kernel's `/proc/net/snmp` and `/proc/net/netstat`.
//!
//! The header lines must be identical for every table we render, in the same order, so a
//! Linux change (a new counter, a renamed one) is caught here. Then, stronger: we load the
//! kernel's values into a `Mib` and render; the output must be the kernel's file byte for byte
//! (MPTcpExt excluded), which checks the value formatting (MaxConn -1, IcmpMsg line pairs)
//! against the real thing.

use ustack_obs::{Counter, Kind, Mib, ProcFile, Table};

/// A reason to skip part of a comparison with Linux: a note, or a failure under
/// `USTACK_REQUIRE_TOOLS` (`.ci/run` sets it: there the comparison must run whole).
fn skip(reason: &str) {
    assert!(
        std::env::var_os("USTACK_REQUIRE_TOOLS").is_none(),
        "required (USTACK_REQUIRE_TOOLS) but {reason}"
    );
    eprintln!("note: {reason}; skipping (set USTACK_REQUIRE_TOOLS=1 to make this a failure)");
}

/// Read a /proc file, or None (after [`skip`]) where there is no Linux /proc.
fn read_proc(path: &str) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) => {
            skip(&format!("cannot read {path} ({e}) to compare with Linux"));
            None
        }
    }
}

/// ICMP on the loopback address, so that the kernel's ICMP per-type counters are not all
/// zero and the comparison checks where each lands: three UDP datagrams to a closed port
/// (three port unreachables, type 3, in and out: loopback is exempt from ICMP's rate
/// limit) and one echo request (types 8 and 0, in and out; needs `ping`, from
/// iputils-ping, which `.ci/run` installs). A column mapped to the wrong type then reads
/// a different count (a mix-up of types 0 and 8 cannot show: loopback counts one of each).
fn provoke_icmp() {
    let lo = std::net::Ipv4Addr::LOCALHOST;
    let closed = std::net::UdpSocket::bind((lo, 0))
        .and_then(|s| s.local_addr())
        .expect("a loopback UDP port")
        .port();
    let s = std::net::UdpSocket::bind((lo, 0)).expect("a loopback UDP socket");
    for _ in 0..3 {
        let _ = s.send_to(b"closed?", (lo, closed));
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ping").is_file()));
    if !on_path {
        return skip("`ping` is not installed: the ICMP echo columns may all be zero");
    }
    let ok = std::process::Command::new("ping")
        .args(["-c", "1", "-W", "2", "127.0.0.1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skip("`ping -c 1 127.0.0.1` failed: the ICMP echo columns may all be zero");
    }
}

/// One table as printed: its name, the header line and the value line (without the
/// `Name:` prefixes, split on spaces).
#[derive(Debug)]
struct Printed {
    name: String,
    header_line: String,
    fields: Vec<String>,
    values: Vec<String>,
}

/// Split a /proc/net/{snmp,netstat} text into its tables (line pairs).
fn parse(text: &str) -> Vec<Printed> {
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len().is_multiple_of(2),
        "odd number of lines in:\n{text}"
    );
    lines
        .chunks(2)
        .map(|pair| {
            let (name, fields) = pair[0].split_once(':').expect("header line has a colon");
            let (name2, values) = pair[1].split_once(':').expect("value line has a colon");
            assert_eq!(name, name2, "header and value lines of one table");
            let fields: Vec<String> = fields.split_whitespace().map(str::to_owned).collect();
            let values: Vec<String> = values.split_whitespace().map(str::to_owned).collect();
            assert_eq!(
                fields.len(),
                values.len(),
                "table {name}: one value per field"
            );
            Printed {
                name: name.to_owned(),
                header_line: pair[0].to_owned(),
                fields,
                values,
            }
        })
        .collect()
}

/// Tables Linux prints that ustack does not render as fixed tables.
fn rendered_by_us(name: &str) -> bool {
    name != "IcmpMsg" && name != "MPTcpExt"
}

fn check_headers(path: &str, file: ProcFile, ours: &str) {
    let Some(text) = read_proc(path) else { return };
    let linux = parse(&text);
    let ours = parse(ours);
    let linux_names: Vec<&str> = linux
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| rendered_by_us(n))
        .collect();
    let our_names: Vec<&str> = ours
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| rendered_by_us(n))
        .collect();
    assert_eq!(our_names, linux_names, "{path}: the tables and their order");
    let expected: Vec<&str> = Table::ALL
        .iter()
        .filter(|t| t.file() == file)
        .map(|t| t.name())
        .collect();
    assert_eq!(our_names, expected);
    for (l, o) in linux.iter().filter(|t| rendered_by_us(&t.name)).zip(&ours) {
        assert_eq!(
            o.header_line, l.header_line,
            "{path}: header of table {}",
            l.name
        );
    }
}

#[test]
fn snmp_headers_match_linux() {
    check_headers("/proc/net/snmp", ProcFile::Snmp, &Mib::new().render_snmp());
}

#[test]
fn netstat_headers_match_linux() {
    check_headers(
        "/proc/net/netstat",
        ProcFile::Netstat,
        &Mib::new().render_netstat(),
    );
}

/// Load every value of the kernel's text into `mib`. IcmpMsg columns set the per-type arrays.
fn load(mib: &mut Mib, tables: &[Printed]) {
    for t in tables.iter().filter(|t| t.name != "MPTcpExt") {
        for (field, value) in t.fields.iter().zip(&t.values) {
            if t.name == "IcmpMsg" {
                let n: u64 = value.parse().unwrap();
                if let Some(ty) = field.strip_prefix("InType") {
                    mib.set_icmp_in_count(ty.parse().unwrap(), n);
                } else {
                    let ty = field.strip_prefix("OutType").expect("InType or OutType");
                    mib.set_icmp_out_count(ty.parse().unwrap(), n);
                }
                continue;
            }
            let c = Counter::from_names(&t.name, field)
                .unwrap_or_else(|| panic!("no counter for {}: {field}", t.name));
            if matches!(c.kind(), Kind::IcmpMsgIn(_) | Kind::IcmpMsgOut(_)) {
                continue; // Comes from the IcmpMsg lines.
            }
            if let Some(neg) = value.strip_prefix('-') {
                mib.set_signed(c, -neg.parse::<i64>().unwrap());
            } else {
                mib.set(c, value.parse().unwrap());
            }
        }
    }
}

/// Linux reads the IcmpMsg counters twice (`icmp_put`, then `icmpmsg_put`); an ICMP message
/// arriving in between makes its own file inconsistent. True if the Icmp per-type columns
/// agree with the IcmpMsg lines.
fn icmp_consistent(mib: &Mib, tables: &[Printed]) -> bool {
    let Some(icmp) = tables.iter().find(|t| t.name == "Icmp") else {
        return false;
    };
    icmp.fields.iter().zip(&icmp.values).all(|(field, value)| {
        let c = Counter::from_names("Icmp", field).unwrap();
        !matches!(c.kind(), Kind::IcmpMsgIn(_) | Kind::IcmpMsgOut(_))
            || mib.get(c).to_string() == *value
    })
}

/// An ICMP message arriving while Linux prints the file makes it disagree with itself;
/// the file is read again until it does not (a few tries at most on a quiet machine), and
/// a file that never agrees fails the test: a wrong mapping of the Icmp per-type columns
/// onto the IcmpMsg types looks exactly like that, so it must not pass for a race.
#[test]
fn snmp_with_linux_values_is_linux_byte_for_byte() {
    const TRIES: usize = 100;
    provoke_icmp();
    for _ in 0..TRIES {
        let Some(text) = read_proc("/proc/net/snmp") else {
            return;
        };
        let tables = parse(&text);
        let mut mib = Mib::new();
        load(&mut mib, &tables);
        if icmp_consistent(&mib, &tables) {
            assert_eq!(mib.render_snmp(), text);
            return;
        }
    }
    panic!(
        "the Icmp per-type columns never agreed with the IcmpMsg lines in {TRIES} reads of \
         /proc/net/snmp: a wrong type mapping (Kind::IcmpMsgIn/Out), not an ICMP race"
    );
}

#[test]
fn netstat_with_linux_values_is_linux_byte_for_byte() {
    let Some(text) = read_proc("/proc/net/netstat") else {
        return;
    };
    let tables = parse(&text);
    let mut mib = Mib::new();
    load(&mut mib, &tables);
    // Linux's text minus the MPTcpExt line pair, which we do not render.
    let without_mptcp: String = text
        .lines()
        .filter(|l| !l.starts_with("MPTcpExt:"))
        .flat_map(|l| [l, "\n"])
        .collect();
    assert_eq!(mib.render_netstat(), without_mptcp);
}

/// The value lines of a fresh `Mib`, written out by hand: constants signed, counts zero.
#[test]
fn fresh_values_are_linux_constants() {
    let snmp = Mib::new().render_snmp();
    let lines: Vec<&str> = snmp.lines().collect();
    assert_eq!(
        lines.len(),
        10,
        "no IcmpMsg lines when every ICMP type count is zero"
    );
    assert_eq!(lines[1], "Ip: 2 64 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0");
    assert_eq!(lines[3], format!("Icmp:{}", " 0".repeat(29)));
    assert!(lines[4].starts_with("Tcp: RtoAlgorithm RtoMin"));
    assert_eq!(lines[5], "Tcp: 1 200 120000 -1 0 0 0 0 0 0 0 0 0 0 0");
    assert_eq!(lines[7], "Udp: 0 0 0 0 0 0 0 0 0");
    assert_eq!(lines[9], "UdpLite: 0 0 0 0 0 0 0 0 0");
    assert!(snmp.ends_with("UdpLite: 0 0 0 0 0 0 0 0 0\n"));
    let netstat = Mib::new().render_netstat();
    assert!(netstat.starts_with("TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed "));
    assert_eq!(netstat.lines().count(), 4);
    assert_eq!(
        netstat.lines().nth(3).unwrap(),
        format!("IpExt:{}", " 0".repeat(18))
    );
}

#[test]
fn values_land_in_their_columns() {
    let mut mib = Mib::new();
    mib.add(Counter::IpInReceives, 5);
    mib.inc(Counter::IpInHdrErrors);
    mib.add(Counter::IpOutTransmits, 7);
    mib.inc(Counter::TcpCurrEstab);
    mib.inc(Counter::TcpCurrEstab);
    mib.dec(Counter::TcpCurrEstab);
    mib.add(Counter::TcpInSegs, 1_000_000_000_000);
    mib.inc(Counter::UdpMemErrors);
    mib.add(Counter::IpExtInOctets, u64::MAX);
    mib.inc(Counter::TcpExtTCPAODroppedIcmps);
    mib.inc(Counter::IcmpInMsgs);
    mib.icmp_in_type(8);
    mib.inc(Counter::IcmpOutMsgs);
    mib.inc(Counter::IcmpOutEchoReps);

    let snmp = mib.render_snmp();
    let lines: Vec<&str> = snmp.lines().collect();
    assert_eq!(lines[1], "Ip: 2 64 5 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7");
    // InMsgs=1, InEchos (9th column) = InType8 = 1; OutMsgs=1, OutEchoReps (the 25th) = 1.
    assert_eq!(
        lines[3],
        "Icmp: 1 0 0 0 0 0 0 0 1 0 0 0 0 0 1 0 0 0 0 0 0 0 0 0 1 0 0 0 0"
    );
    assert_eq!(lines[4], "IcmpMsg: InType8 OutType0");
    assert_eq!(lines[5], "IcmpMsg: 1 1");
    assert_eq!(
        lines[7],
        "Tcp: 1 200 120000 -1 0 0 0 0 1 1000000000000 0 0 0 0 0"
    );
    assert_eq!(lines[9], "Udp: 0 0 0 0 0 0 0 0 1");

    let netstat = mib.render_netstat();
    let lines: Vec<&str> = netstat.lines().collect();
    assert!(
        lines[1].ends_with(" 0 0 1"),
        "TCPAODroppedIcmps is TcpExt's last column"
    );
    assert!(lines[3].starts_with(&format!("IpExt: 0 0 0 0 0 0 {} 0 ", u64::MAX)));
}

#[test]
fn icmpmsg_prints_sixteen_columns_per_line_pair() {
    let mut mib = Mib::new();
    // 17 in-types (0..=16) and one out-type: Linux prints 16 columns, then the other 2.
    for ty in 0..=16u8 {
        for _ in 0..=ty {
            mib.icmp_in_type(ty);
        }
    }
    mib.icmp_out_type(255);
    mib.icmp_out_type(3);
    let snmp = mib.render_snmp();
    let msg: Vec<&str> = snmp.lines().filter(|l| l.starts_with("IcmpMsg:")).collect();
    let first_header: String = (0..16).map(|t| format!(" InType{t}")).collect();
    let first_values: String = (1..=16).map(|n| format!(" {n}")).collect();
    assert_eq!(
        msg,
        [
            format!("IcmpMsg:{first_header}"),
            format!("IcmpMsg:{first_values}"),
            "IcmpMsg: InType16 OutType3 OutType255".to_owned(),
            "IcmpMsg: 17 1 1".to_owned(),
        ]
    );
    // The IcmpMsg pairs sit between Icmp and Tcp.
    let names: Vec<&str> = snmp.lines().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "Ip", "Ip", "Icmp", "Icmp", "IcmpMsg", "IcmpMsg", "IcmpMsg", "IcmpMsg", "Tcp", "Tcp",
            "Udp", "Udp", "UdpLite", "UdpLite"
        ]
    );
}

/// `/proc/net/snmp6`'s Ip6, Icmp6 and Udp6 lines (the named ones: `Icmp6InType<N>` lines
/// come and go with the counts) are ours, in Linux's order and spelling; the values of a `Mib`
/// loaded with the kernel's counts print exactly as the kernel prints them.
#[test]
fn snmp6_matches_linux() {
    /// The most increments a per-type count is loaded by (a fraction of a second).
    const INCREMENTS: u64 = 2_000_000;
    let Some(text) = read_proc("/proc/net/snmp6") else {
        return;
    };
    let named = |line: &&str| {
        (line.starts_with("Ip6") || line.starts_with("Icmp6") || line.starts_with("Udp6"))
            && !line.starts_with("Icmp6InType")
            && !line.starts_with("Icmp6OutType")
    };
    let name_of = |line: &str| line.split_whitespace().next().unwrap_or("").to_owned();
    let linux: Vec<String> = text.lines().filter(named).map(name_of).collect();
    let ours = Mib::new().render_snmp6();
    let our_names: Vec<String> = ours.lines().filter(named).map(name_of).collect();
    assert_eq!(
        our_names, linux,
        "Ip6, Icmp6 and Udp6 lines, in Linux's order"
    );
    // Load the kernel's values (the per-type lines through their Icmp6InType<N> counts).
    let mut mib = Mib::new();
    let mut wanted = String::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(name), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        let n: u64 = value.parse().unwrap();
        // The per-type counts load by increments (they have no setter); the others are set.
        let per_type = name.starts_with("Icmp6InType") || name.starts_with("Icmp6OutType");
        if per_type && n > INCREMENTS {
            return skip("the kernel's per-type ICMPv6 counts are too large to load by increments");
        }
        if let Some(ty) = name.strip_prefix("Icmp6InType") {
            for _ in 0..n {
                mib.icmp6_in_type(ty.parse().unwrap());
            }
        } else if let Some(ty) = name.strip_prefix("Icmp6OutType") {
            for _ in 0..n {
                mib.icmp6_out_type(ty.parse().unwrap());
            }
        } else if let Some(field) = name.strip_prefix("Ip6") {
            mib.set(Counter::from_names("Ip6", field).unwrap(), n);
        } else if let Some(field) = name.strip_prefix("Icmp6") {
            let c = Counter::from_names("Icmp6", field).unwrap();
            if !matches!(c.kind(), Kind::Icmp6MsgIn(_) | Kind::Icmp6MsgOut(_)) {
                mib.set(c, n);
            }
        } else if let Some(field) = name.strip_prefix("Udp6") {
            mib.set(Counter::from_names("Udp6", field).unwrap(), n);
        } else {
            continue; // UdpLite6: ustack has no UDP-Lite.
        }
        wanted.push_str(line);
        wanted.push('\n');
    }
    assert_eq!(mib.render_snmp6(), wanted, "byte for byte");
    assert_eq!(ProcFile::Snmp6, Table::Ip6.file());
}
