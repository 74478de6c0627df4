//! A stack's sockets and memory as an operator sees them: what Linux's `sock_diag`
//! (`ss -tanmi`) and `/proc/net/sockstat` with `/proc/slabinfo` show, for `ustack ss` and
//! `ustack stat --memory`.
//!
//! Both are snapshots taken by walking the tables, so they cost O(sockets): tools call
//! them, the packet path never does.

use core::net::SocketAddr;
use core::time::Duration;

use ustack_obs::Instant;

use crate::Stack;
use crate::tcp::TcpInfo;

/// The protocol of a [`SocketView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// One socket, as a line of `ss -tanmi` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SocketView {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// The state as `ss` names it ([`State::ss_name`](crate::tcp::State::ss_name)):
    /// `ESTAB`, `LISTEN`, `TIME-WAIT`, `SYN-SENT`, ..., `UNCONN` for a UDP socket.
    pub state: &'static str,
    /// The local address.
    pub local: SocketAddr,
    /// The peer (`None`: any, as `*:*` for a listener or an unconnected UDP socket).
    pub remote: Option<SocketAddr>,
    /// Bytes received and not read; for a listener, connections waiting in its accept
    /// queue (as `ss` shows).
    pub recv_q: usize,
    /// Bytes written and not acknowledged; for a listener, its backlog (as `ss`).
    pub send_q: usize,
    /// TCP details (`ss -i`) for a connection.
    pub info: Option<TcpInfo>,
    /// Buffer memory (`ss -m`): `(rmem_alloc, rcvbuf, wmem_queued, sndbuf)`, like
    /// `skmem:(r,rb,w,tb)`.
    pub mem: Option<(usize, usize, usize, usize)>,
    /// Time left on the TIME-WAIT timer (`ss -o`'s `timer:(timewait,...)`).
    pub timewait_left: Option<Duration>,
}

/// One kind of memory in [`MemoryUsage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryKind {
    /// The kind, e.g. `tcb`.
    pub name: &'static str,
    /// How many objects of this kind are held (0 where counting makes no sense).
    pub count: usize,
    /// Heap bytes it occupies, allocated capacity included (not only what is in use).
    pub bytes: usize,
}

/// A stack's heap memory by kind, everything its tables and pools have allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryUsage {
    /// `tcb` (the connection slab), `tcb_active` (the boxed state of connections moving
    /// data, see issue #12 item 2), `tcb_active_free` (this thread's free boxes), `rtx_queue` (the retransmission queues' boards, held
    /// while data is outstanding), `rtx_spare` (the one board the stack keeps for the next
    /// queue that fills, so that a round trip does not allocate), `buffers` (pool bytes held by socket buffers),
    /// `pool_free` (pool bytes allocated and free), `time_wait`, `requests` (SYN queue),
    /// `tables` (the established and listener tables, the TCP timer heap), `tcp_addr6`
    /// (the IPv6 addresses TCP tuples name by id), `udp` (sockets
    /// and queued datagrams), in that order. The runtime and the application add their
    /// own kinds after these (e.g. `ustack_runtime::Runtime::memory`).
    pub kinds: Vec<MemoryKind>,
}

/// The bytes a `std` or `hashbrown` hash table of `capacity` (what its `capacity()` says)
/// allocates for entries of `entry` bytes: one control byte and one slot per bucket, the
/// buckets a power of two of which 7/8 are usable (below 8, one more than the capacity),
/// plus a group of trailing control bytes (16).
pub fn hash_table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (entry + 1) + 16
}

impl MemoryUsage {
    /// The sum of every kind's bytes.
    pub fn total(&self) -> usize {
        self.kinds.iter().map(|k| k.bytes).sum()
    }

    /// The kind called `name`.
    pub fn get(&self, name: &str) -> Option<&MemoryKind> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// Add `other`'s figures to these, kind by kind (several shards' stacks).
    pub fn merge(&mut self, other: &MemoryUsage) {
        for k in &other.kinds {
            match self.kinds.iter_mut().find(|m| m.name == k.name) {
                Some(m) => {
                    m.count += k.count;
                    m.bytes += k.bytes;
                }
                None => self.kinds.push(*k),
            }
        }
    }
}

impl Stack {
    /// Every socket: TCP listeners, connections and TIME-WAIT records, then UDP sockets.
    /// SYN-queue requests are not sockets here (Linux lists them as `SYN-RECV` request
    /// socks; `ustack stat --memory` counts them).
    pub fn sockets(&self, now: Instant) -> Vec<SocketView> {
        let mut out = Vec::new();
        for l in self.tcp.listeners.iter() {
            out.push(SocketView {
                protocol: Protocol::Tcp,
                state: "LISTEN",
                local: l.local,
                remote: None,
                recv_q: l.accept_queue.len(),
                send_q: l.backlog as usize,
                info: None,
                mem: None,
                timewait_left: None,
            });
        }
        for (index, tcb) in self.tcp.conns.iter() {
            let Ok(info) = self.tcp_info(self.tcp.handle_of(index)) else {
                continue;
            };
            out.push(SocketView {
                protocol: Protocol::Tcp,
                state: tcb.state.ss_name(),
                local: info.local,
                remote: Some(info.remote),
                recv_q: info.recv_q,
                send_q: info.send_q,
                mem: Some((
                    tcb.rcvbuf.mem_bytes(),
                    tcb.rcvbuf_limit as usize,
                    tcb.sndbuf.mem_bytes(),
                    tcb.sndbuf_limit as usize,
                )),
                info: Some(info),
                timewait_left: None,
            });
        }
        for (tuple, tw) in self.tcp.timewait.iter() {
            let (local, remote) = self.tcp.addrs(tuple);
            out.push(SocketView {
                protocol: Protocol::Tcp,
                state: "TIME-WAIT",
                local,
                remote: Some(remote),
                recv_q: 0,
                send_q: 0,
                info: None,
                mem: None,
                timewait_left: Some(tw.expires.instant(now).saturating_duration_since(now)),
            });
        }
        for (local, queued, rcvbuf) in self.udp.views() {
            out.push(SocketView {
                protocol: Protocol::Udp,
                state: "UNCONN",
                local,
                remote: None,
                recv_q: queued,
                send_q: 0,
                info: None,
                mem: Some((queued, rcvbuf, 0, 0)),
                timewait_left: None,
            });
        }
        out
    }

    /// Heap memory by kind (see [`MemoryUsage::kinds`]).
    pub fn memory(&self) -> MemoryUsage {
        let tcp = &self.tcp;
        let pool_in_use = tcp.pool.in_use_bytes();
        let spare = tcp.spare_board.heap_bytes();
        let (mut rtx_boards, mut rtx_bytes) = (0, 0);
        let (mut active, mut active_bytes) = (0, 0);
        for (_, tcb) in tcp.conns.iter() {
            let bytes = tcb.rtx().heap_bytes();
            rtx_boards += usize::from(bytes > 0);
            rtx_bytes += bytes;
            active += usize::from(tcb.active.is_held());
            active_bytes += tcb.active.heap_bytes();
        }
        let active_free = crate::tcp::tcb::Active::free_bytes();
        active_bytes += tcp.idle_active.capacity() * size_of::<(Instant, crate::tcp::TcpHandle)>();
        let kinds = vec![
            MemoryKind {
                name: "tcb",
                count: tcp.conns.len(),
                bytes: tcp.conns.heap_bytes(),
            },
            MemoryKind {
                name: "tcb_active",
                count: active,
                bytes: active_bytes,
            },
            MemoryKind {
                name: "tcb_active_free",
                count: active_free / crate::tcp::tcb::Active::BOX_BYTES,
                bytes: active_free,
            },
            MemoryKind {
                name: "rtx_queue",
                count: rtx_boards,
                bytes: rtx_bytes,
            },
            MemoryKind {
                name: "rtx_spare",
                count: usize::from(spare > 0),
                bytes: spare,
            },
            MemoryKind {
                name: "buffers",
                count: 0,
                bytes: pool_in_use,
            },
            MemoryKind {
                name: "pool_free",
                count: 0,
                bytes: tcp.pool.heap_bytes() - pool_in_use,
            },
            MemoryKind {
                name: "time_wait",
                count: tcp.timewait.len(),
                bytes: tcp.timewait.heap_bytes(),
            },
            MemoryKind {
                name: "requests",
                count: tcp.requests.len(),
                bytes: tcp.requests.heap_bytes(),
            },
            MemoryKind {
                name: "tables",
                count: 0,
                bytes: tcp.ehash.allocation_size()
                    + tcp.listeners.heap_bytes()
                    + tcp.timers.heap_bytes()
                    // The rarely set per-socket options (none for an idle connection
                    // that set none).
                    + tcp.xopts.allocation_size(),
            },
            MemoryKind {
                name: "tcp_addr6",
                count: tcp.intern6.len(),
                bytes: tcp.intern6.heap_bytes(),
            },
            MemoryKind {
                name: "udp",
                count: self.udp.len(),
                bytes: self.udp.heap_bytes(),
            },
        ];
        MemoryUsage { kinds }
    }
}
