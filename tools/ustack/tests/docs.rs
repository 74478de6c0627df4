//! The reference pages stay true: docs/sysctl.md lists every tunable with the default and
//! range the code has, and docs/counters.md lists every drop reason with the counters it
//! bumps.

use ustack_obs::DropReason;
use ustack_stack::Sysctl;

fn doc(name: &str) -> String {
    let path = format!("{}/../../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn sysctl_page_matches_the_table() {
    let page = doc("sysctl.md");
    let rows = page.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(rows, Sysctl::TABLE.len(), "one row per tunable");
    for info in Sysctl::TABLE {
        let row = format!(
            "| `{}` | {} | {}..={} | {} |",
            info.name, info.default, info.min, info.max, info.unit
        );
        assert!(
            page.contains(&row),
            "docs/sysctl.md lacks or misstates: {row}"
        );
    }
}

#[test]
fn counters_page_lists_every_drop_reason_with_its_counters() {
    let page = doc("counters.md");
    let rows = page.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(rows, DropReason::ALL.len(), "one row per drop reason");
    for &r in DropReason::ALL {
        let counters: Vec<String> = r
            .counters()
            .iter()
            .map(|c| format!("{} {}", c.table().name(), c.name()))
            .collect();
        let cell = if counters.is_empty() {
            "—".to_owned()
        } else {
            counters.join(", ")
        };
        let row = format!("| `{}` | {} |", r.name(), cell);
        assert!(
            page.contains(&row),
            "docs/counters.md lacks or misstates: {row}"
        );
    }
}
