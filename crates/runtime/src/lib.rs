//! The ustack runtime: shard threads, RSS, the budgeted poll loop, the timer wheel and the
//! epoll-like poller. Arrives with the runtime issue; this crate is a placeholder so the
//! workspace has the shape the architecture describes.
