//! The ustack runtime: shard threads, RSS, the budgeted poll loop, the timer wheel and the
//! epoll-like poller (the runtime issue). Built so far: [`rss`] (which shard owns a flow),
//! [`shard`] (one shard's budgeted poll loop) and [`timer`] (the shard's timer wheel).

pub mod poller;
pub mod rss;
pub mod shard;
pub mod timer;

pub use poller::{Event, Mode, Poller, PollerError};
pub use rss::{Reta, Rss, RssKey, pick_local_port, shard_of};
pub use shard::{Budget, PollResult, Shard, ShardStats};
pub use timer::{TimerId, TimerWheel};
