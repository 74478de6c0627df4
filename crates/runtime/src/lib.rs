//! The ustack runtime: shard threads, RSS, the budgeted poll loop, the timer wheel and the
//! epoll-like poller: [`rss`] (which shard owns a flow), [`shard`] (one shard's budgeted
//! poll loop), [`timer`] (the shard's timer wheel), [`runtime`] (one shard's run loop:
//! rounds, sleep, busy poll, clocks), [`api`] (the public sockets) and [`multi`] (shards
//! on their own threads).
//! Where to start: a [`Runtime`] made by a [`RuntimeBuilder`] over a device, and its
//! sockets [`TcpListener`], [`TcpStream`] and [`UdpSocket`] (non-blocking, like std's with
//! the runtime passed in); [`ShardedBuilder`] for one runtime per core. An echo over a
//! [`sim_pair`] on a [`VirtualClock`], both runtimes run in turn on one thread:
//!
//! ```
//! use core::net::{Ipv4Addr, SocketAddrV4};
//! use core::time::Duration;
//! use ustack_runtime::{RuntimeBuilder, TcpListener, TcpStream, VirtualClock, sim_pair};
//! use ustack_stack::Instant;
//!
//! let (a, b) = sim_pair(Default::default());
//! let clock = VirtualClock::new(Instant::ZERO);
//! let mut srt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 1), 24).seed(1)
//!     .build_with_clock(a, clock.participant())?;
//! let mut crt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 2), 24).seed(2)
//!     .build_with_clock(b, clock.participant())?;
//! let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7);
//! let listener = TcpListener::bind(&mut srt, addr, 16)?;
//! let client = TcpStream::connect(&mut crt, addr)?;
//! let (mut server, mut buf, mut echoed) = (None, [0u8; 64], Vec::new());
//! for _ in 0..1000 {
//!     srt.run_once(Some(Duration::from_millis(1)))?;
//!     crt.run_once(Some(Duration::from_millis(1)))?;
//!     if server.is_none() && let Ok((s, _)) = listener.accept(&mut srt) {
//!         server = Some(s);
//!         client.write(&mut crt, b"ping")?;
//!     }
//!     if let Some(s) = &server && let Ok(n) = s.read(&mut srt, &mut buf) {
//!         s.write(&mut srt, &buf[..n])?; // echo what arrived
//!     }
//!     if let Ok(n) = client.read(&mut crt, &mut buf) {
//!         echoed.extend_from_slice(&buf[..n]);
//!     }
//!     if echoed.len() == 4 { break; }
//! }
//! assert_eq!(echoed, b"ping");
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod api;
#[cfg(feature = "control")]
pub mod control;
pub mod dense;
pub mod multi;
pub mod poller;
mod profiling;
pub mod rss;
pub mod runtime;
pub mod sched;
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
