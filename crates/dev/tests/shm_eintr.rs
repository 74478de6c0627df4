//! The shm link's hand-over waits in a blocking `recvmsg(2)` with a read timeout
//! (`ShmPeer::connect` sets one), which a signal with a handler ends with `EINTR` even
//! when the handler was installed with `SA_RESTART` (signal(7): socket calls with a
//! timeout are never restarted): the bench's process gets such signals while its peers
//! start and exit. `ShmPeer::recv` retries it, as std's blocking reads do, so a signal
//! during the wait does not fail the hand-over.
//!
//! No libtest here (`harness = false`): the wait runs on the process's main thread, the
//! one Linux hands a signal sent to the process to while it can take it; libtest would
//! run it on a thread of its own and its idle main thread would take the signals. `main`
//! answers nextest's `--list` (one test) and runs it otherwise.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rustix::process::{Signal, getpid, kill_process};
use ustack_dev::shm::{ShmConfig, ShmLink, ShmPeer};

const NAME: &str = "a_signal_during_the_hand_over_wait_does_not_fail_it";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        if !args.iter().any(|a| a == "--ignored") {
            println!("{NAME}: test");
        }
        return;
    }
    // A filter naming another test (nextest's `--exact NAME`): nothing to run.
    if let Some(f) = args.iter().find(|a| !a.starts_with("--"))
        && !NAME.contains(f.as_str())
    {
        return;
    }
    a_signal_during_the_hand_over_wait_does_not_fail_it();
    println!("test {NAME} ... ok");
}

fn a_signal_during_the_hand_over_wait_does_not_fail_it() {
    let caught = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, caught.clone())
        .expect("a SIGUSR1 handler");
    let (_a, peer) = ShmLink::create(&ShmConfig::default()).expect("link");
    let (s1, s2) = UnixStream::pair().unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let signaller = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            // Signals while the main thread waits in the hand-over, then the hand-over.
            let me = getpid();
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(5));
                kill_process(me, Signal::USR1).expect("kill(2)");
                sent.fetch_add(1, Ordering::Relaxed);
            }
            peer.send(&s1).expect("the hand-over message");
            s1
        })
    };
    let got = ShmPeer::recv(&s2);
    let _s1 = signaller.join().unwrap();
    assert_eq!(sent.load(Ordering::Relaxed), 40);
    assert!(caught.load(Ordering::Relaxed), "the handler ran");
    let ports = got
        .expect("the hand-over, signals or not")
        .attach()
        .expect("attach");
    assert_eq!(ports.len(), 1, "the link's one queue pair");
}
