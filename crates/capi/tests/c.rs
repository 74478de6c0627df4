//! The C API's tests, written in C (tests/c/*.c): each is compiled with `cc` against
//! include/ustack.h, linked with the libustack.so this build made, and run; it checks what
//! it does and exits non-zero on the first failed check.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The directory holding the libustack.so of this build (target/<profile>/deps, or its
/// parent).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    for dir in [
        deps.clone(),
        deps.parent().expect("profile directory").to_path_buf(),
    ] {
        if dir.join("libustack.so").exists() {
            return dir;
        }
    }
    panic!("libustack.so not found beside {}", exe.display());
}

/// Compile `tests/c/NAME.c` and run it (bounded in time): its output.
fn run_c(name: &str) -> String {
    run_c_with(name, &[])
}

/// [`run_c`] with arguments for the program.
fn run_c_with(name: &str, args: &[&OsStr]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = dir.join("tests/c").join(format!("{name}.c"));
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = out_dir.join(format!("capi-{name}"));
    let lib = lib_dir();
    let include = dir.join("include");
    let tests_c = dir.join("tests/c");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    ustack_testkit::cc::compile_c(
        &src,
        &exe,
        &[
            OsStr::new("-I"),
            include.as_os_str(),
            OsStr::new("-I"),
            tests_c.as_os_str(),
            OsStr::new("-L"),
            lib.as_os_str(),
            OsStr::new(&rpath),
            OsStr::new("-lustack"),
            OsStr::new("-lpthread"),
        ],
    );
    // This build's library, whatever LD_LIBRARY_PATH the test runner set (cargo puts
    // target/<profile> on it, where `cargo build` leaves its own, maybe older, copy).
    let mut child = Command::new(&exe)
        .args(args)
        .env("LD_LIBRARY_PATH", &lib)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the test program");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("waiting").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "{name} did not finish in 60 s:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn blocking_echo_every_byte_checked() {
    let out = run_c("echo");
    assert!(out.contains("1048576 bytes echoed and checked"), "{out}");
}

#[test]
fn nonblocking_connect_and_epoll_readiness() {
    let out = run_c("epoll");
    assert!(out.contains("readiness and FIN checked"), "{out}");
}

#[test]
fn errors_carry_linux_errno_values() {
    let out = run_c("errors");
    assert!(out.contains("every errno checked"), "{out}");
}

#[test]
fn udp_datagrams_and_addresses() {
    let out = run_c("udp");
    assert!(out.contains("datagrams and addresses checked"), "{out}");
}

/// The kernel as the peer: a TUN interface in a namespace of the test's own, made
/// beforehand (`ip tuntap add tun0 mode tun multi_queue`: the C program's
/// `link=tun tun=tun0 netns=...` attaches to it), and socat echoing on the kernel's side.
/// Root: skips without, unless `USTACK_REQUIRE_ROOT` is set.
#[test]
fn tun_echo_against_the_kernel() {
    use ustack_testkit::netns::{NetNs, root_or_skip, tool_or_skip};
    let test = "tun_echo_against_the_kernel";
    if root_or_skip(test).is_none() || !tool_or_skip(test, "socat") {
        return;
    }
    let ns = NetNs::new().expect("a network namespace");
    ns.add_tun("tun0").expect("creating and configuring tun0");
    let mut socat = ns
        .command(
            Duration::from_secs(90),
            &["socat", "TCP-LISTEN:7,bind=192.0.2.1,reuseaddr", "PIPE"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting socat");
    let out = std::panic::catch_unwind(|| run_c_with("tun", &[ns.path().as_os_str()]));
    // socat with everything in its process group (killing only its `timeout` wrapper
    // would leave socat running in the namespace).
    ustack_testkit::netns::kill_group(&mut socat);
    let out = out.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(
        out.contains("262144 bytes echoed by the kernel and checked"),
        "{out}"
    );
}

#[test]
fn options_change_what_the_stack_does() {
    let out = run_c("options");
    assert!(out.contains("every option checked"), "{out}");
}

#[test]
fn many_threads_one_edge_triggered_server() {
    let out = run_c("threads");
    assert!(
        out.contains("160 connections echoed from 8 threads"),
        "{out}"
    );
}

#[test]
fn a_blocking_write_takes_every_byte() {
    let out = run_c("write");
    assert!(
        out.contains("8388608 bytes, every blocking write whole, checked"),
        "{out}"
    );
}

#[test]
fn dup_shares_one_socket_until_the_last_close() {
    let out = run_c("dup");
    assert!(
        out.contains("dup: one socket, many descriptors, checked"),
        "{out}"
    );
}

#[test]
fn af_inet6_sockets_dual_stack_and_v6only() {
    let out = run_c("ipv6");
    assert!(
        out.contains("ipv6: AF_INET6, sockaddr_in6, dual-stack and IPV6_V6ONLY checked"),
        "{out}"
    );
}
