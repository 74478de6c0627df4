//! The ustack runtime: shard threads, RSS, the budgeted poll loop, the timer wheel and the
//! epoll-like poller (the runtime issue). Built so far: [`rss`] (which shard owns a flow),
//! [`shard`] (one shard's budgeted poll loop), [`timer`] (the shard's timer wheel),
//! [`runtime`] (one shard's run loop: rounds, sleep, busy poll, clocks), [`api`] (the
//! public sockets) and [`multi`] (shards on their own threads).

pub mod api;
pub mod multi;
pub mod poller;
pub mod rss;
pub mod runtime;
pub mod shard;
pub mod timer;

pub use api::{TcpListener, TcpStream, UdpSocket};
pub use multi::{RssSplitter, ShardApp, ShardContext, ShardedBuilder, ShardedRuntime};
pub use poller::{Event, Mode, Poller, PollerError};
pub use rss::{Reta, Rss, RssKey, pick_local_port, shard_of};
pub use runtime::{
    Clock, Events, Interest, MonotonicClock, Runtime, RuntimeBuilder, RuntimeStats, SimPort, Sleep,
    Source, VirtualClock, random_mac, sim_pair,
};
pub use shard::{Budget, PollResult, Shard, ShardStats};
pub use timer::{TimerId, TimerWheel};
