//! The namespace guard cleans up after a test that fails: the holder process is killed and
//! reaped, so the namespace and the TUN interface in it are gone. Root only (skipped
//! otherwise, unless `USTACK_REQUIRE_ROOT` is set).

use std::path::Path;

use ustack_testkit::netns::{TunRig, root_or_skip};

#[test]
fn a_failing_test_leaves_no_namespace_behind() {
    if root_or_skip("a_failing_test_leaves_no_namespace_behind").is_none() {
        return;
    }
    let mut seen = None;
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rig = TunRig::new(2, None).expect("setting up the TUN rig");
        let pid = rig.ns.holder_pid();
        let ns = std::fs::read_link(rig.ns.path()).expect("the namespace");
        seen = Some((pid, ns));
        panic!("a test that fails with the rig up");
    }));
    assert!(failed.is_err());
    let (pid, ns) = seen.expect("the rig was up");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the holder {pid} still runs"
    );
    // No process of ours is in that namespace any more.
    let ours = std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .filter_map(|t| std::fs::read_link(t.ok()?.path().join("ns/net")).ok())
        .any(|l| l == ns);
    assert!(!ours, "a thread of ours is still in {ns:?}");
}
