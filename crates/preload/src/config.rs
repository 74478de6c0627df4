//! The preload's configuration, from the environment (docs/preload.md lists it):
//!
//! | variable | meaning |
//! |---|---|
//! | `USTACK_ADDR=IP/LEN` | ustack's address and prefix (required) |
//! | `USTACK_ADDR6=IP6/LEN` | ustack's IPv6 address and prefix: with it, `AF_INET6` sockets go to ustack too |
//! | `USTACK_LINK=tun\|packet\|xdp` | the link (`tun`, the default) |
//! | `USTACK_TUN=NAME` | the TUN interface (`ustack%d` by default) |
//! | `USTACK_IFACE=NAME` | `packet`, `xdp`: the Ethernet interface (required) |
//! | `USTACK_NETNS=NAME` | make or attach the interface in this namespace (a name under `/run/netns`, or a path) |
//! | `USTACK_GATEWAY=IP` | the default gateway |
//! | `USTACK_SHARDS=N` | `tun`: queues, one loop thread (shard) each (1 by default; `packet`, `xdp`: 1) |
//! | `USTACK_MTU=N` | the interface MTU |
//! | `USTACK_SYSCTL_<name>=VALUE` | a tunable: `<name>` is its Linux name (`net.ipv4.tcp_sack`), that name with `_` for `.` (`net_ipv4_tcp_sack`), or its last part (`tcp_sack`) |
//! | `USTACK_CONTROL=PATH` | the control socket, for `ustack stat`, `ss`, `sysctl`, `capture` |
//! | `USTACK_FALLBACK=kernel` | when ustack cannot start, run the program's sockets on the kernel instead of failing them |
//!
//! The result is the C API's configuration string (`ustack_stack_open`, crates/capi
//! `config`), so both read the same keys the same way.

use ustack_stack::Sysctl;

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    /// The C API's configuration string.
    pub capi: String,
    /// `USTACK_FALLBACK=kernel`.
    pub fallback_kernel: bool,
    /// `USTACK_CONTROL=PATH`: the control socket `ustack stat`, `ss`, `sysctl` talk to.
    pub control: Option<std::path::PathBuf>,
}

/// Whether `USTACK_FALLBACK=kernel` is set (read on its own: a program falls back even
/// when the rest of the configuration is wrong). Any other value is an error.
pub fn fallback(vars: &[(String, String)]) -> Result<bool, String> {
    match get(vars, "USTACK_FALLBACK") {
        None => Ok(false),
        Some("kernel") => Ok(true),
        Some(v) => Err(format!(
            "USTACK_FALLBACK={v}: the only fallback is `kernel`"
        )),
    }
}

fn get<'a>(vars: &'a [(String, String)], key: &str) -> Option<&'a str> {
    vars.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The full Linux name of the tunable `USTACK_SYSCTL_<name>` names.
fn sysctl_name(name: &str) -> Result<&'static str, String> {
    let table = Sysctl::TABLE;
    if let Some(i) = table.iter().find(|i| i.name == name) {
        return Ok(i.name);
    }
    if let Some(i) = table.iter().find(|i| i.name.replace('.', "_") == name) {
        return Ok(i.name);
    }
    let tail: Vec<&'static str> = table
        .iter()
        .filter(|i| i.name.rsplit('.').next() == Some(name))
        .map(|i| i.name)
        .collect();
    match tail.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "USTACK_SYSCTL_{name}: no such tunable (docs/sysctl.md lists them)"
        )),
        many => Err(format!(
            "USTACK_SYSCTL_{name}: ambiguous, say which: {}",
            many.join(", ")
        )),
    }
}

fn word(out: &mut String, key: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.contains(char::is_whitespace) {
        return Err(format!("{key}={v:?}: empty or has spaces"));
    }
    out.push(' ');
    out.push_str(v);
    Ok(())
}

/// Read the configuration from `vars` (the environment, `(name, value)` pairs). An error
/// names the variable and what is wrong with it.
pub fn parse(vars: &[(String, String)]) -> Result<Env, String> {
    let fallback_kernel = fallback(vars)?;
    let link = get(vars, "USTACK_LINK").unwrap_or("tun");
    let iface_key = match link {
        "tun" => "USTACK_TUN",
        "packet" | "xdp" => "USTACK_IFACE",
        _ => return Err(format!("USTACK_LINK={link}: want tun, packet or xdp")),
    };
    for (key, other) in [
        ("USTACK_TUN", "USTACK_IFACE"),
        ("USTACK_IFACE", "USTACK_TUN"),
    ] {
        if iface_key == key && get(vars, other).is_some() {
            return Err(format!(
                "{other} is not for USTACK_LINK={link} (it takes {key})"
            ));
        }
    }
    if link != "tun" && get(vars, "USTACK_IFACE").is_none() {
        return Err(format!(
            "USTACK_LINK={link} needs USTACK_IFACE: the Ethernet interface, e.g. USTACK_IFACE=veth1"
        ));
    }
    let mut s = format!("link={link}");
    let addr = get(vars, "USTACK_ADDR").ok_or(
        "USTACK_ADDR is not set: give ustack's address, e.g. USTACK_ADDR=192.0.2.2/24".to_owned(),
    )?;
    for (key, cap) in [
        ("USTACK_ADDR", "addr="),
        ("USTACK_ADDR6", "addr6="),
        ("USTACK_TUN", "tun="),
        ("USTACK_IFACE", "iface="),
        ("USTACK_NETNS", "netns="),
        ("USTACK_GATEWAY", "gateway="),
        ("USTACK_SHARDS", "queues="),
        ("USTACK_MTU", "mtu="),
    ] {
        let v = if key == "USTACK_ADDR" {
            Some(addr)
        } else {
            get(vars, key)
        };
        if let Some(v) = v {
            word(&mut s, key, &format!("{cap}{v}"))?;
        }
    }
    for (k, v) in vars {
        let Some(name) = k.strip_prefix("USTACK_SYSCTL_") else {
            continue;
        };
        let full = sysctl_name(name)?;
        let n: u64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
        Sysctl::default()
            .set(full, n)
            .map_err(|e| format!("{k}={v}: {e}"))?;
        word(&mut s, k, &format!("sysctl.{full}={n}"))?;
    }
    // The C API's own checks (addresses, prefixes, numbers), with the variable's name.
    ustack::config::Config::parse(&s).map_err(|e| {
        let msg = e.msg.trim_start_matches("ustack_stack_open: ");
        format!("{msg} (from the USTACK_* variables: {s})")
    })?;
    let control = match get(vars, "USTACK_CONTROL") {
        Some("") => return Err("USTACK_CONTROL is empty: give the control socket's path".into()),
        v => v.map(std::path::PathBuf::from),
    };
    Ok(Env {
        capi: s,
        fallback_kernel,
        control,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn every_variable_becomes_a_capi_word() {
        let e = parse(&vars(&[
            ("PATH", "/bin"),
            ("USTACK_ADDR", "192.0.2.2/24"),
            ("USTACK_ADDR6", "2001:db8::2/64"),
            ("USTACK_TUN", "tun0"),
            ("USTACK_NETNS", "ns1"),
            ("USTACK_GATEWAY", "192.0.2.1"),
            ("USTACK_SHARDS", "2"),
            ("USTACK_SYSCTL_net.ipv4.tcp_sack", "0"),
            ("USTACK_SYSCTL_net_ipv4_tcp_timestamps", "0"),
            ("USTACK_SYSCTL_somaxconn", "128"),
        ]))
        .unwrap();
        assert_eq!(
            e.capi,
            "link=tun addr=192.0.2.2/24 addr6=2001:db8::2/64 tun=tun0 netns=ns1 gateway=192.0.2.1 queues=2 \
             sysctl.net.ipv4.tcp_sack=0 sysctl.net.ipv4.tcp_timestamps=0 \
             sysctl.net.core.somaxconn=128"
        );
        assert!(!e.fallback_kernel);
    }

    #[test]
    fn packet_and_xdp_take_an_interface() {
        for link in ["packet", "xdp"] {
            let e = parse(&vars(&[
                ("USTACK_LINK", link),
                ("USTACK_IFACE", "veth1"),
                ("USTACK_NETNS", "ns1"),
                ("USTACK_ADDR", "10.9.0.2/24"),
            ]))
            .unwrap();
            assert_eq!(
                e.capi,
                format!("link={link} addr=10.9.0.2/24 iface=veth1 netns=ns1")
            );
        }
    }

    #[test]
    fn bad_values_say_which_variable() {
        for (v, want) in [
            (vec![], "USTACK_ADDR is not set"),
            (
                vec![("USTACK_ADDR", "192.0.2.2")],
                "addr=192.0.2.2: want IP/PREFIX",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_LINK", "xdp")],
                "USTACK_LINK=xdp needs USTACK_IFACE",
            ),
            (
                vec![
                    ("USTACK_ADDR", "1.2.3.4/8"),
                    ("USTACK_LINK", "packet"),
                    ("USTACK_TUN", "tun0"),
                ],
                "USTACK_TUN is not for USTACK_LINK=packet",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_IFACE", "veth1")],
                "USTACK_IFACE is not for USTACK_LINK=tun",
            ),
            (
                vec![
                    ("USTACK_ADDR", "1.2.3.4/8"),
                    ("USTACK_LINK", "packet"),
                    ("USTACK_IFACE", "veth1"),
                    ("USTACK_SHARDS", "2"),
                ],
                "queues=2: link=packet runs one queue",
            ),
            (
                vec![
                    ("USTACK_ADDR", "1.2.3.4/8"),
                    ("USTACK_LINK", "carrier-pigeon"),
                ],
                "USTACK_LINK=carrier-pigeon: want tun, packet or xdp",
            ),
            (
                vec![
                    ("USTACK_ADDR", "1.2.3.4/8"),
                    ("USTACK_SYSCTL_tcp_bogus", "1"),
                ],
                "USTACK_SYSCTL_tcp_bogus: no such tunable",
            ),
            (
                vec![
                    ("USTACK_ADDR", "1.2.3.4/8"),
                    ("USTACK_SYSCTL_tcp_sack", "7"),
                ],
                "USTACK_SYSCTL_tcp_sack=7:",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_SYSCTL_max", "7")],
                "ambiguous",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_GATEWAY", "router")],
                "gateway=router: not an IPv4 address",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_ADDR6", "1.2.3.5/64")],
                "addr6=1.2.3.5: not an IPv6 address",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_TUN", "a b")],
                "has spaces",
            ),
            (
                vec![("USTACK_ADDR", "1.2.3.4/8"), ("USTACK_FALLBACK", "yes")],
                "USTACK_FALLBACK=yes",
            ),
        ] {
            let e = parse(&vars(&v)).unwrap_err();
            assert!(e.contains(want), "{v:?}: {e}");
        }
    }

    #[test]
    fn fallback_is_read_even_when_the_rest_is_wrong() {
        let v = vars(&[("USTACK_FALLBACK", "kernel"), ("USTACK_ADDR", "nonsense")]);
        assert_eq!(fallback(&v), Ok(true));
        assert!(parse(&v).is_err());
    }
}
