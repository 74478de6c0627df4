//! Applications on ustack's public API (`ustack_runtime`): servers and the clients that
//! verify them, used by `ustack serve`, `ustack bench` and the tests.
//!
//! - [`Server`]: echo (RFC 862), discard (RFC 863) and a small HTTP/1.1 server (RFC 9112:
//!   keep-alive and pipelining, a fixed response for `GET /`, static files from a
//!   directory streamed in bounded chunks, 400/404/405/431 like the Linux baseline in
//!   `tools/baseline`), each an edge-triggered event loop over one runtime's poller;
//! - [`Load`]: verifying clients for them (every echoed byte, every HTTP response).
//!
//! The HTTP request parser (`httparse`) and response writer are [`http`]'s
//! (`ustack_http`), shared with the Linux baseline so that both answer the same requests
//! with the same statuses.
//!
//! ```
//! use core::net::{Ipv4Addr, SocketAddrV4};
//! use core::time::Duration;
//! use ustack_apps::{Load, Protocol, Server};
//! use ustack_runtime::runtime::{RuntimeBuilder, VirtualClock, sim_pair};
//! use ustack_stack::{EthernetAddress, Instant};
//!
//! let (a, b) = sim_pair(Default::default());
//! let clock = VirtualClock::new(Instant::ZERO);
//! let mut srt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 1), 24)
//!     .build_with_clock(a, clock.participant())?;
//! let mut crt = RuntimeBuilder::new().ipv4(Ipv4Addr::new(10, 0, 0, 2), 24)
//!     .mac(EthernetAddress([2, 0, 0, 0, 0, 2])).build_with_clock(b, clock.participant())?;
//! let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
//! let mut server = Server::bind(&mut srt, Protocol::Http, addr, None)?;
//! let mut load = Load::start(&mut crt, Protocol::Http, addr, 3, 4)?;
//! while !load.done() {
//!     server.step(&mut srt, Some(Duration::from_millis(1)))?;
//!     load.step(&mut crt, Some(Duration::from_millis(1)))?;
//! }
//! assert_eq!(load.stats().verified, 12);
//! # Ok::<(), std::io::Error>(())
//! ```

mod load;
mod server;

pub use load::{Load, LoadStats, check_response, message};
pub use server::{LINGERING_TIME, LINGERING_TIMEOUT, Server, ServerStats};
/// HTTP/1.1 message syntax (RFC 9112) for the server, shared with the Linux baseline
/// servers so that both parse and answer alike.
pub use ustack_http as http;
/// The fixed response body and the request-head limit, the baseline's.
pub use ustack_http::{FILE_CHUNK, FIXED_BODY, MAX_REQUEST_HEAD};

/// Which protocol a [`Server`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP echo (RFC 862): every byte received is sent back.
    Echo,
    /// TCP discard (RFC 863): every byte received is read and dropped.
    Discard,
    /// HTTP/1.1 (RFC 9112).
    Http,
}

impl Protocol {
    /// By its command-line name: `echo`, `discard`, `http`.
    pub fn from_name(name: &str) -> Option<Protocol> {
        match name {
            "echo" => Some(Protocol::Echo),
            "discard" => Some(Protocol::Discard),
            "http" => Some(Protocol::Http),
            _ => None,
        }
    }
}

/// A non-blocking call that could not proceed (`EAGAIN`).
fn would_block(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock
}
