//! `SO_REUSEPORT` listeners on one port of one stack: one ustack listener, shared.
//!
//! A ustack stack has one listener per port (per shard). Linux lets several sockets with
//! `SO_REUSEPORT` listen on one port, each with its own accept queue, new connections
//! spread over them by hash; nginx's `listen ... reuseport` makes one per worker in the
//! master, and each worker keeps its own after `fork`. Here the descriptors listening on
//! a port with `SO_REUSEPORT` share one ustack listener (so one accept queue, in one
//! process); the listener closes with the last of them. Across processes each worker's
//! stack is its own after `fork` ([`super::fork`]), which is where the spreading happens.

use std::collections::HashMap;
use std::sync::Mutex;

use ustack_net::Fd;

use super::lock;

/// (stack, port) -> the listener and how many descriptors' files share it.
type Shared = HashMap<(u64, u16), (Fd, usize)>;
static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// The shared listener on `port` of stack `stack`, if any.
pub(super) fn listener(stack: u64, port: u16) -> Option<Fd> {
    lock(&SHARED)
        .as_ref()
        .and_then(|m| m.get(&(stack, port)).map(|(fd, _)| *fd))
}

/// One more file listens through `fd` on `port` of `stack` (the first one made it).
pub(super) fn join(stack: u64, port: u16, fd: Fd) {
    lock(&SHARED)
        .get_or_insert_with(HashMap::new)
        .entry((stack, port))
        .or_insert((fd, 0))
        .1 += 1;
}

/// A file listening through `fd` on `port` of `stack` closes: whether the listener is
/// to close too (it was the last, or it was never shared).
pub(super) fn leave(stack: u64, port: u16, fd: Fd) -> bool {
    let mut m = lock(&SHARED);
    let Some(map) = m.as_mut() else { return true };
    match map.get_mut(&(stack, port)) {
        Some((f, n)) if *f == fd => {
            *n -= 1;
            if *n == 0 {
                map.remove(&(stack, port));
                true
            } else {
                false
            }
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, SocketAddr};

    use super::super::{
        accept, bind, close, close_stacks, connect, listen, open, setsockopt, socket,
    };

    fn reuseport_socket(st: &std::sync::Arc<super::super::Stack>) -> i32 {
        let s = socket(Some(st), libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        setsockopt(s, libc::SOL_SOCKET, libc::SO_REUSEPORT, &1i32.to_ne_bytes()).unwrap();
        s
    }

    /// Two `SO_REUSEPORT` descriptors listen on one port (a socket without it is refused
    /// the port); closing the first leaves the port listening through the second, which
    /// accepts; closing the second closes the listener (a connection is refused).
    #[test]
    fn reuseport_listeners_share_the_port_until_the_last_closes() {
        let (st, peer) = open("link=sim addr=10.7.0.1/24 peer=10.7.0.2/24 seed=1").unwrap();
        let peer = peer.unwrap();
        let a = SocketAddr::from((Ipv4Addr::new(10, 7, 0, 1), 8080));
        let (l1, l2) = (reuseport_socket(&st), reuseport_socket(&st));
        bind(l1, a).unwrap();
        listen(l1, 8).unwrap();
        bind(l2, a).unwrap();
        listen(l2, 8).unwrap();
        let plain = socket(Some(&st), libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        assert_eq!(bind(plain, a).unwrap_err().errno, libc::EADDRINUSE);
        close(l1).unwrap();
        let c = socket(Some(&peer), libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        connect(c, a).unwrap();
        let (s, _) = accept(l2, 0).unwrap();
        close(s).unwrap();
        close(c).unwrap();
        close(l2).unwrap();
        // The last one closed the ustack listener: a connection is refused.
        let c = socket(Some(&peer), libc::AF_INET, libc::SOCK_STREAM, 0).unwrap();
        assert_eq!(connect(c, a).unwrap_err().errno, libc::ECONNREFUSED);
        close(c).unwrap();
        close(plain).unwrap();
        close_stacks(&[&st, &peer]);
    }
}
