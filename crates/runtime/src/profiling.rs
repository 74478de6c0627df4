//! The shard loop's hooks for the sampled profiler ([`ustack_obs::profile`]): the thread's
//! CPU clock for a sampled iteration, so that time the thread was not running shows apart.

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`), where this
/// build can read it (the `control` feature brings rustix); `None` otherwise.
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    #[cfg(feature = "control")]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    }
    #[cfg(not(feature = "control"))]
    {
        None
    }
}
