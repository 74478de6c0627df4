//! The counter table, `Mib` arithmetic, merging shards, JSON and the drop reasons.

use std::collections::HashSet;

#[cfg(feature = "json")]
use serde_json::json;
use ustack_obs::{Counter, DropReason, Kind, Mib, Table};

#[test]
fn counter_table_is_consistent() {
    for (i, &c) in Counter::ALL.iter().enumerate() {
        assert_eq!(c as usize, i, "ALL is in discriminant order");
        // The variant is `<Table><Field>`: catches a variant paired with the wrong name.
        assert_eq!(
            format!("{c:?}"),
            format!("{}{}", c.table().name(), c.name())
        );
        assert_eq!(Counter::from_names(c.table().name(), c.name()), Some(c));
    }
    assert_eq!(Counter::COUNT, Counter::ALL.len());
    let per_table: usize = Table::ALL.iter().map(|t| t.counters().len()).sum();
    assert_eq!(
        per_table,
        Counter::COUNT,
        "every counter in exactly one table"
    );
    // Tables are contiguous, in Table::ALL order.
    let flat: Vec<Counter> = Table::ALL
        .iter()
        .flat_map(|t| t.counters().iter().copied())
        .collect();
    assert_eq!(flat, Counter::ALL);
    assert_eq!(Counter::from_names("Tcp", "NoSuchField"), None);
    assert_eq!(Counter::from_names("TcpExt", "TW"), Some(Counter::TcpExtTW));
    assert_eq!(
        Counter::TcpExtListenOverflows.to_string(),
        "TcpExt.ListenOverflows"
    );
}

#[test]
fn new_sets_linux_constants() {
    let mib = Mib::new();
    assert_eq!(mib.get(Counter::IpForwarding), 2);
    assert_eq!(mib.get(Counter::IpDefaultTTL), 64);
    assert_eq!(mib.get(Counter::TcpRtoAlgorithm), 1);
    assert_eq!(mib.get(Counter::TcpRtoMin), 200);
    assert_eq!(mib.get(Counter::TcpRtoMax), 120_000);
    assert_eq!(mib.get_signed(Counter::TcpMaxConn), -1);
    let constants: Vec<Counter> = Counter::ALL
        .iter()
        .copied()
        .filter(|c| matches!(c.kind(), Kind::Constant(_)))
        .collect();
    assert_eq!(constants.len(), 6);
    for &c in Counter::ALL {
        if !constants.contains(&c) {
            assert_eq!(mib.get(c), 0, "{c} starts at zero");
        }
    }
    assert_eq!(mib, Mib::default());
}

#[test]
fn inc_add_dec_set_get() {
    let mut mib = Mib::new();
    mib.inc(Counter::UdpInDatagrams);
    mib.add(Counter::UdpInDatagrams, 41);
    assert_eq!(mib.get(Counter::UdpInDatagrams), 42);
    mib.inc(Counter::TcpCurrEstab);
    mib.dec(Counter::TcpCurrEstab);
    mib.dec(Counter::TcpCurrEstab);
    assert_eq!(
        mib.get_signed(Counter::TcpCurrEstab),
        -1,
        "wraps, does not panic"
    );
    mib.set(Counter::IpDefaultTTL, 128);
    assert_eq!(mib.get(Counter::IpDefaultTTL), 128);
    mib.add(Counter::IpExtInOctets, u64::MAX);
    mib.add(Counter::IpExtInOctets, 2);
    assert_eq!(
        mib.get(Counter::IpExtInOctets),
        1,
        "wraps like Linux's counters"
    );
    // Neighbours untouched.
    assert_eq!(mib.get(Counter::UdpNoPorts), 0);
    assert_eq!(mib.get(Counter::IpExtOutOctets), 0);
}

#[test]
fn icmp_type_columns_share_icmpmsg_storage() {
    let mut mib = Mib::new();
    mib.icmp_in_type(8);
    mib.icmp_in_type(8);
    assert_eq!(mib.get(Counter::IcmpInEchos), 2);
    mib.inc(Counter::IcmpOutEchoReps);
    assert_eq!(mib.icmp_out_count(0), 1);
    mib.set(Counter::IcmpInDestUnreachs, 7);
    assert_eq!(mib.icmp_in_count(3), 7);
    // Unmapped types have no Icmp column but do have IcmpMsg counts.
    mib.icmp_in_type(9);
    assert_eq!(mib.icmp_in_count(9), 1);
    assert_eq!(mib.get(Counter::IcmpInMsgs), 0, "InMsgs is its own counter");
    let mapped: HashSet<(bool, u8)> = Counter::ALL
        .iter()
        .filter_map(|c| match c.kind() {
            Kind::IcmpMsgIn(t) => Some((true, t)),
            Kind::IcmpMsgOut(t) => Some((false, t)),
            _ => None,
        })
        .collect();
    assert_eq!(mapped.len(), 22, "11 types, in and out, each mapped once");
}

#[test]
fn merge_sums_counts_but_not_constants() {
    let mut a = Mib::new();
    let mut b = Mib::new();
    a.add(Counter::TcpInSegs, 10);
    b.add(Counter::TcpInSegs, 5);
    // A connection established on shard a and closed on shard b.
    a.inc(Counter::TcpCurrEstab);
    a.inc(Counter::TcpCurrEstab);
    b.dec(Counter::TcpCurrEstab);
    a.icmp_in_type(8);
    b.icmp_in_type(8);
    b.icmp_out_type(0);
    a.drop(DropReason::IpCsum);
    b.drop(DropReason::IpCsum);
    b.drop(DropReason::UdpNoSocket);

    let mut total = Mib::new();
    total.merge(&a);
    total.merge(&b);
    assert_eq!(total.get(Counter::TcpInSegs), 15);
    assert_eq!(total.get(Counter::TcpCurrEstab), 1);
    assert_eq!(total.get(Counter::IcmpInEchos), 2);
    assert_eq!(total.icmp_out_count(0), 1);
    assert_eq!(total.drops(DropReason::IpCsum), 2);
    assert_eq!(total.get(Counter::IpInHdrErrors), 2);
    assert_eq!(total.get(Counter::UdpNoPorts), 1);
    assert_eq!(total.drops_total(), 3);
    // Constants are not doubled.
    assert_eq!(total.get(Counter::IpForwarding), 2);
    assert_eq!(total.get(Counter::IpDefaultTTL), 64);
    assert_eq!(total.get(Counter::TcpRtoMax), 120_000);
    assert_eq!(total.get_signed(Counter::TcpMaxConn), -1);
    // A constant configured on the shards is what the total shows.
    let mut shard = Mib::new();
    shard.set(Counter::IpDefaultTTL, 100);
    let mut total = Mib::new();
    total.merge(&shard);
    total.merge(&shard);
    assert_eq!(total.get(Counter::IpDefaultTTL), 100);
}

/// Run with the `json` feature (as the workspace's tests are: the tool enables it).
#[cfg(feature = "json")]
#[test]
fn json_shape() {
    let mut mib = Mib::new();
    let fresh = mib.to_json();
    assert_eq!(fresh["Ip"]["Forwarding"], json!(2));
    assert_eq!(fresh["Tcp"]["MaxConn"], json!(-1));
    assert_eq!(fresh["IcmpMsg"], json!({}));
    assert_eq!(fresh["Drops"], json!({}));
    let keys: HashSet<&str> = fresh
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let expected: HashSet<&str> = [
        "Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite", "TcpExt", "IpExt", "Ip6", "Icmp6",
        "Udp6", "Drops",
    ]
    .into();
    assert_eq!(keys, expected);
    for &t in Table::ALL {
        assert_eq!(
            fresh[t.name()].as_object().unwrap().len(),
            t.counters().len()
        );
    }

    for _ in 0..3 {
        mib.icmp_in_type(8);
    }
    mib.drop(DropReason::IpCsum);
    mib.add(Counter::IpExtInOctets, 1500);
    let j = mib.to_json();
    assert_eq!(j["IcmpMsg"], json!({"InType8": 3}));
    assert_eq!(j["Icmp"]["InEchos"], json!(3));
    assert_eq!(j["Drops"], json!({"IP_CSUM": 1}));
    assert_eq!(j["Ip"]["InHdrErrors"], json!(1));
    assert_eq!(j["IpExt"]["InCsumErrors"], json!(1));
    assert_eq!(j["IpExt"]["InOctets"], json!(1500));
    assert_eq!(j["TcpExt"]["TW"], json!(0));
}

#[test]
fn render_drops_lists_nonzero_reasons() {
    let mut mib = Mib::new();
    assert_eq!(mib.render_drops(), "");
    for _ in 0..3 {
        mib.drop(DropReason::IpCsum);
    }
    mib.drop(DropReason::Otherhost);
    // In DropReason::ALL order: OTHERHOST is declared before IP_CSUM.
    assert_eq!(mib.render_drops(), "OTHERHOST 1\nIP_CSUM 3\n");
    assert_eq!(mib.drops_total(), 4);
}

#[test]
fn every_drop_bumps_exactly_its_counters() {
    for &reason in DropReason::ALL {
        let mut mib = Mib::new();
        mib.drop(reason);
        mib.drop(reason);
        assert_eq!(mib.drops(reason), 2, "{reason}");
        assert_eq!(mib.drops_total(), 2, "{reason}");
        for &c in Counter::ALL {
            let expected = if reason.counters().contains(&c) {
                2
            } else {
                Mib::new().get(c)
            };
            assert_eq!(mib.get(c), expected, "{reason}: {c}");
        }
        for &other in DropReason::ALL {
            if other != reason {
                assert_eq!(mib.drops(other), 0);
            }
        }
    }
}

#[test]
fn drop_reason_names() {
    let mut seen = HashSet::new();
    for (i, &r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(r as usize, i);
        assert!(seen.insert(r.name()), "duplicate name {}", r.name());
        assert!(
            r.name()
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{} is not Linux-style",
            r.name()
        );
        assert_eq!(DropReason::from_name(r.name()), Some(r));
        assert_eq!(r.to_string(), r.name());
        let unique: HashSet<_> = r.counters().iter().collect();
        assert_eq!(
            unique.len(),
            r.counters().len(),
            "{r}: a counter listed twice"
        );
        for c in r.counters() {
            assert!(
                matches!(c.kind(), Kind::Counter),
                "{r}: {c} is not an event counter"
            );
        }
    }
    assert_eq!(DropReason::COUNT, DropReason::ALL.len());
    assert_eq!(DropReason::from_name("NOPE"), None);
    // The contract's mappings, spelled out.
    use Counter::*;
    let cases: &[(DropReason, &str, &[Counter])] = &[
        (DropReason::Otherhost, "OTHERHOST", &[]),
        (DropReason::UnhandledProto, "UNHANDLED_PROTO", &[]),
        (DropReason::MacHdr, "DEV_HDR", &[]),
        (DropReason::ArpMalformed, "ARP_MALFORMED", &[]),
        (DropReason::NeighFailed, "NEIGH_FAILED", &[IpOutDiscards]),
        (
            DropReason::NeighQueueFull,
            "NEIGH_QUEUEFULL",
            &[IpOutDiscards],
        ),
        (DropReason::IpInhdr, "IP_INHDR", &[IpInHdrErrors]),
        (
            DropReason::IpCsum,
            "IP_CSUM",
            &[IpInHdrErrors, IpExtInCsumErrors],
        ),
        (
            DropReason::IpTruncated,
            "PKT_TOO_SMALL",
            &[IpExtInTruncatedPkts],
        ),
        (
            DropReason::IpInaddrErrors,
            "IP_INADDRERRORS",
            &[IpInAddrErrors],
        ),
        (DropReason::IpNoproto, "IP_NOPROTO", &[IpInUnknownProtos]),
        (DropReason::IpNoRoute, "IP_OUTNOROUTES", &[IpOutNoRoutes]),
        (DropReason::PktTooBig, "PKT_TOO_BIG", &[IpFragFails]),
        (
            DropReason::FragReasmTimeout,
            "FRAG_REASM_TIMEOUT",
            &[IpReasmFails],
        ),
        (DropReason::FragTooFar, "FRAG_TOO_FAR", &[IpReasmFails]),
        (DropReason::DupFrag, "DUP_FRAG", &[IpReasmFails]),
        (
            DropReason::FragOverlap,
            "FRAG_OVERLAP",
            &[IpReasmFails, IpExtReasmOverlaps],
        ),
        (DropReason::FragMemLimit, "IPFRAG_MEM", &[IpReasmFails]),
        (DropReason::FragInvalid, "FRAG_INVALID", &[IpReasmFails]),
        (DropReason::FragTooMany, "FRAG_TOO_MANY", &[IpReasmFails]),
        (DropReason::TcpOfoQueuePrune, "TCP_OFO_QUEUE_PRUNE", &[]),
        (DropReason::ProtoMem, "PROTO_MEM", &[]),
        (DropReason::TcpDirectMiss, "TCP_DIRECT_MISS", &[]),
        (DropReason::TcpTxStale, "TCP_TX_STALE", &[]),
        (
            DropReason::TcpOfoMerge,
            "TCP_OFOMERGE",
            &[TcpExtTCPOFOMerge],
        ),
        (
            DropReason::IcmpCsum,
            "ICMP_CSUM",
            &[IcmpInCsumErrors, IcmpInErrors],
        ),
        (DropReason::IcmpMalformed, "ICMP_MALFORMED", &[IcmpInErrors]),
        (
            DropReason::IcmpOutQueueFull,
            "ICMP_OUT_QUEUEFULL",
            &[IcmpOutErrors],
        ),
        (DropReason::IcmpReplyQueueFull, "ICMP_REPLY_QUEUEFULL", &[]),
        (
            DropReason::UdpCsum,
            "UDP_CSUM",
            &[UdpInCsumErrors, UdpInErrors],
        ),
        (DropReason::UdpNoSocket, "NO_SOCKET", &[UdpNoPorts]),
        (
            DropReason::SocketRcvbuff,
            "SOCKET_RCVBUFF",
            &[UdpRcvbufErrors, UdpInErrors],
        ),
        (DropReason::UdpSndbuf, "SOCKET_SNDBUFF", &[UdpSndbufErrors]),
        (
            DropReason::TcpCsum,
            "TCP_CSUM",
            &[TcpInCsumErrors, TcpInErrs],
        ),
        (DropReason::TcpHdr, "TCP_HDR", &[TcpInErrs]),
        (DropReason::TcpNoSocket, "TCP_NO_SOCKET", &[]),
        (DropReason::DevQueueFull, "FULL_RING", &[]),
    ];
    for &(r, name, counters) in cases {
        assert_eq!(r.name(), name);
        assert_eq!(r.counters(), counters, "{r}");
    }
}

#[test]
fn debug_shows_nonzero_values_only() {
    let mut mib = Mib::new();
    mib.drop(DropReason::UdpNoSocket);
    mib.icmp_out_type(3);
    let s = format!("{mib:?}");
    assert!(s.contains("Udp.NoPorts: 1"), "{s}");
    assert!(s.contains("IcmpMsg.OutType3: 1"), "{s}");
    assert!(s.contains("Drops.NO_SOCKET: 1"), "{s}");
    assert!(s.contains("Tcp.MaxConn: -1"), "{s}");
    assert!(!s.contains("InReceives"), "{s}");
}
