//! Server counters: each worker keeps plain counters and publishes them to its own cache line of
//! atomics once per batch of events (one writer per line, so a store is enough).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a server (or one worker) has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// TCP connections accepted.
    pub connections_accepted: u64,
    /// TCP connections closed by the server (after EOF, an error, or an HTTP close), not counting
    /// those still open when the server stopped.
    pub connections_closed: u64,
    /// Payload bytes received (TCP stream bytes, UDP datagram payloads).
    pub bytes_in: u64,
    /// Payload bytes sent.
    pub bytes_out: u64,
    /// HTTP responses sent (every status, including 4xx/5xx) or UDP datagrams echoed; 0 for TCP
    /// echo and discard, which have no request boundaries.
    pub requests: u64,
    /// Sends that found the socket buffer full: for TCP the rest of the output then waited for
    /// `EPOLLOUT`; for UDP the datagram was not echoed.
    pub writes_blocked: u64,
    /// `accept4` failures other than `EAGAIN` (for example `EMFILE` at the open-file limit).
    pub accept_errors: u64,
    /// Busy polling: `epoll_wait` calls that found nothing (0 for a sleeping worker).
    pub empty_polls: u64,
}

impl Stats {
    /// The field-by-field sum of `self` and `other`.
    pub fn merged(&self, other: &Stats) -> Stats {
        Stats {
            connections_accepted: self.connections_accepted + other.connections_accepted,
            connections_closed: self.connections_closed + other.connections_closed,
            bytes_in: self.bytes_in + other.bytes_in,
            bytes_out: self.bytes_out + other.bytes_out,
            requests: self.requests + other.requests,
            writes_blocked: self.writes_blocked + other.writes_blocked,
            accept_errors: self.accept_errors + other.accept_errors,
            empty_polls: self.empty_polls + other.empty_polls,
        }
    }
}

/// One worker's published counters, alone on their cache line(s).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct SharedStats {
    connections_accepted: AtomicU64,
    connections_closed: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    requests: AtomicU64,
    writes_blocked: AtomicU64,
    accept_errors: AtomicU64,
    empty_polls: AtomicU64,
}

impl SharedStats {
    /// Publishes the worker's totals. Only the owning worker calls this.
    pub(crate) fn publish(&self, s: &Stats) {
        let r = Ordering::Relaxed;
        self.connections_accepted.store(s.connections_accepted, r);
        self.connections_closed.store(s.connections_closed, r);
        self.bytes_in.store(s.bytes_in, r);
        self.bytes_out.store(s.bytes_out, r);
        self.requests.store(s.requests, r);
        self.writes_blocked.store(s.writes_blocked, r);
        self.empty_polls.store(s.empty_polls, r);
        // Release on the last store: a reader that sees it sees the others.
        self.accept_errors.store(s.accept_errors, Ordering::Release);
    }

    /// The last published totals.
    pub(crate) fn load(&self) -> Stats {
        let r = Ordering::Relaxed;
        let accept_errors = self.accept_errors.load(Ordering::Acquire);
        Stats {
            connections_accepted: self.connections_accepted.load(r),
            connections_closed: self.connections_closed.load(r),
            bytes_in: self.bytes_in.load(r),
            bytes_out: self.bytes_out.load(r),
            requests: self.requests.load(r),
            writes_blocked: self.writes_blocked.load(r),
            accept_errors,
            empty_polls: self.empty_polls.load(r),
        }
    }
}
