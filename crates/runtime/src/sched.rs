//! How long the calling thread has waited for a CPU: the second field of
//! `/proc/thread-self/schedstat` (`struct sched_info`'s `run_delay`, nanoseconds spent
//! runnable on a run queue but not running; Documentation/scheduler/sched-stats.rst). The
//! runtime's adaptive busy polling reads it before it sleeps: a loop that waited for its
//! CPU shares its core with other work, and spinning there takes the CPU from that work
//! and from the peer it waits for.

use core::time::Duration;

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};

/// The thread's run-queue wait, read through a file kept open (one `pread(2)` a read).
#[derive(Debug)]
pub struct RunDelay {
    file: Option<OwnedFd>,
}

impl RunDelay {
    /// For the calling thread (`/proc/thread-self/schedstat`); without the file (no
    /// procfs, a kernel without schedstats) every read is `None`.
    pub fn open() -> RunDelay {
        let file = rustix::fs::open(
            "/proc/thread-self/schedstat",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok();
        RunDelay { file }
    }

    /// The time the thread has spent waiting for a CPU since it started.
    pub fn read(&self) -> Option<Duration> {
        let file = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        let n = rustix::io::pread(file, &mut buf, 0).ok()?;
        parse(&buf[..n])
    }
}

/// The second of the three numbers of a schedstat line.
fn parse(text: &[u8]) -> Option<Duration> {
    let text = core::str::from_utf8(text).ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_run_delay_and_reads_this_thread() {
        assert_eq!(
            parse(b"123 456789 3\n"),
            Some(Duration::from_nanos(456_789))
        );
        assert_eq!(parse(b"123"), None);
        assert_eq!(parse(b"1 x 2"), None);
        // This thread's: present on Linux with procfs, and never going back.
        let d = RunDelay::open();
        let (a, b) = (d.read().unwrap(), d.read().unwrap());
        assert!(b >= a);
    }
}
