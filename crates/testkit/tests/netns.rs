//! The namespace guard cleans up after a test that fails: the holder process is killed and
//! reaped, so the namespace and the TUN interface in it are gone, and so is any tool a
//! test ran in it whose `timeout` wrapper was killed; [`kill_group`] stops a wrapped tool
//! with its children. Root only (skipped otherwise, unless `USTACK_REQUIRE_ROOT` is set).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ustack_testkit::netns::{NetNs, TunRig, kill_group, root_or_skip};

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

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// A tool in `ns` that forks a child of its own (`sh` running two `sleep`s, one in the
/// background), under `timeout ... nsenter` as tests run tools; returned once both
/// `sleep`s are in the namespace (at most 5 s).
#[expect(
    clippy::zombie_processes,
    reason = "the wrapper is returned to the caller, which reaps it"
)]
fn tool_with_a_child(ns: &NetNs) -> (std::process::Child, Vec<u32>) {
    let mut child = ns
        .command(
            Duration::from_secs(60),
            &["sh", "-c", "sleep 59 & exec sleep 58"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the tool");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = ns.pids_inside();
        let sleeps = pids
            .iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
            .count();
        if sleeps == 2 {
            return (child, pids);
        }
        if Instant::now() >= deadline {
            kill_group(&mut child);
            panic!("the tool did not start: {pids:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A test that fails kills the `timeout` wrapper it holds (or drops it), which cannot
/// pass SIGKILL on: the tool and its child stay in the namespace. The namespace's drop
/// must end them. Catches: a drop that kills only the holder (the tool then lives on,
/// holding the namespace, for up to its whole time limit).
#[test]
fn a_tool_left_behind_by_a_killed_wrapper_is_gone_with_the_namespace() {
    if root_or_skip("a_tool_left_behind_by_a_killed_wrapper_is_gone_with_the_namespace").is_none() {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let (mut wrapper, pids) = tool_with_a_child(&ns);
    let _ = wrapper.kill();
    let _ = wrapper.wait();
    assert!(
        pids.iter().all(|&p| !ended(p)),
        "the tool outlives its killed wrapper: {pids:?}"
    );
    drop(ns);
    let alive: Vec<u32> = pids.into_iter().filter(|&p| !ended(p)).collect();
    assert!(
        alive.is_empty(),
        "still running after the namespace's drop: {alive:?}"
    );
}

/// [`kill_group`] on a wrapped tool ends the tool and its child, the namespace still up.
/// Catches: a stop that kills only `timeout`.
#[test]
fn kill_group_ends_the_tool_and_its_children() {
    if root_or_skip("kill_group_ends_the_tool_and_its_children").is_none() {
        return;
    }
    let ns = NetNs::new().expect("a namespace");
    let (mut wrapper, pids) = tool_with_a_child(&ns);
    kill_group(&mut wrapper);
    // SIGKILL is delivered before kill(2) returns for a process of ours, but the orphaned
    // child's exit is asynchronous: wait for it, bounded.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pids.iter().all(|&p| ended(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let alive: Vec<u32> = pids.into_iter().filter(|&p| !ended(p)).collect();
    assert!(
        alive.is_empty(),
        "still running after kill_group: {alive:?}"
    );
    assert!(ns.pids_inside().iter().all(|&p| ended(p)));
}
