//! UDP: [RFC 768](https://www.rfc-editor.org/rfc/rfc768), host rules of
//! [RFC 1122 §4.1](https://www.rfc-editor.org/rfc/rfc1122#section-4.1), and Linux's
//! counting from `net/ipv4/udp.c`:
//! - `InDatagrams` counts datagrams *read by the application* (`udp_recvmsg`), not
//!   datagrams queued;
//! - a full receive queue drops the datagram: `RcvbufErrors` and `InErrors`
//!   (`__udp_queue_rcv_skb`);
//! - no socket: `NoPorts` and an ICMP port unreachable (RFC 1122 §4.1.3.1 "If a datagram
//!   arrives addressed to a UDP port for which there is no pending LISTEN call, UDP SHOULD
//!   send an ICMP Port Unreachable message");
//! - `OutDatagrams` counts datagrams handed to IP.
//!
//! A socket's receive queue is bounded by `rmem_default` bytes, each datagram charged its
//! payload plus [`DATAGRAM_OVERHEAD`]; like Linux, the check is made before adding, so the
//! queue may pass the bound by one datagram.

use core::hash::BuildHasher;
use core::net::SocketAddrV4;
use std::collections::VecDeque;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::{IpProtocol, udp};

use crate::ip::{Inbound, Outbound};
use crate::slab::Slab;
use crate::socket::{Readiness, SocketKey};
use crate::sysctl::PortRange;
use crate::{Error, Stack, Sysctl};

/// Bytes charged to a receive queue per datagram on top of its payload: the queue entry
/// and allocation bookkeeping (Linux charges `skb->truesize`, which is larger).
pub const DATAGRAM_OVERHEAD: usize = 64;
/// Largest UDP payload over IPv4: 65535 - 20 (IP header) - 8 (UDP header).
pub const MAX_PAYLOAD: usize = 65_507;

/// A UDP socket's handle: an index and a generation, so a stale handle never reaches a
/// socket that reused its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

#[derive(Debug)]
struct UdpSocket {
    local: SocketAddrV4,
    /// The peer of `connect(2)`: the default destination, and the only source received.
    peer: Option<SocketAddrV4>,
    rx: VecDeque<(SocketAddrV4, Vec<u8>)>,
    rx_charged: usize,
    rcvbuf: usize,
}

/// The UDP socket table: a slab of sockets and a port index (one socket per port; there is
/// no SO_REUSEADDR or SO_REUSEPORT).
#[derive(Debug)]
pub struct UdpTable {
    sockets: Slab<UdpSocket>,
    by_port: HashMap<u16, u32, foldhash::fast::FixedState>,
    /// Where the next ephemeral port search starts.
    port_hint: u16,
}

impl UdpTable {
    pub fn new(seed: u64, sysctl: &Sysctl) -> Self {
        let hasher = foldhash::fast::FixedState::with_seed(seed);
        UdpTable {
            sockets: Slab::new(),
            port_hint: PortRange::first_hint(sysctl, hasher.hash_one(0xed5eu16)),
            by_port: HashMap::with_hasher(hasher),
        }
    }

    /// Open sockets.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Every socket: (local address, bytes queued for reading (charged), receive buffer).
    pub(crate) fn views(&self) -> impl Iterator<Item = (SocketAddrV4, usize, usize)> + '_ {
        self.sockets
            .iter()
            .map(|(_, s)| (s.local, s.rx_charged, s.rcvbuf))
    }

    /// Heap bytes: the socket slab, the port map, each receive queue and its datagrams.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.sockets.heap_bytes()
            + self.by_port.allocation_size()
            + self
                .sockets
                .iter()
                .map(|(_, s)| {
                    s.rx.capacity() * size_of::<(SocketAddrV4, Vec<u8>)>()
                        + s.rx.iter().map(|(_, d)| d.capacity()).sum::<usize>()
                })
                .sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.by_port.is_empty()
    }

    fn get(&self, h: UdpHandle) -> Option<&UdpSocket> {
        self.sockets.get(h.index, h.generation)
    }

    fn get_mut(&mut self, h: UdpHandle) -> Option<&mut UdpSocket> {
        self.sockets.get_mut(h.index, h.generation)
    }

    fn insert(&mut self, socket: UdpSocket) -> UdpHandle {
        let port = socket.local.port();
        let (index, generation) = self.sockets.insert(socket);
        self.by_port.insert(port, index);
        UdpHandle { index, generation }
    }

    /// A free port in [min, max], searched from a moving hint (Linux `udp_lib_get_port`
    /// picks a random start; the hint keeps successive binds spread).
    fn ephemeral(&mut self, sysctl: &Sysctl) -> Option<u16> {
        let range = PortRange::of(sysctl)?;
        let port = range
            .from(self.port_hint)
            .find(|p| !self.by_port.contains_key(p))?;
        self.port_hint = range.after(port);
        Some(port)
    }
}

impl Stack {
    /// Open a UDP socket bound to `local` (address unspecified or ours; port 0 picks an
    /// ephemeral port from `ip_local_port_range`).
    pub fn udp_bind(&mut self, local: SocketAddrV4) -> Result<UdpHandle, Error> {
        if !local.ip().is_unspecified() && *local.ip() != self.ipv4.addr {
            return Err(Error::AddrNotAvailable);
        }
        let port = match local.port() {
            0 => self
                .udp
                .ephemeral(&self.sysctl)
                .ok_or(Error::AddrNotAvailable)?,
            p if self.udp.by_port.contains_key(&p) => return Err(Error::AddrInUse),
            p => p,
        };
        let socket = UdpSocket {
            local: SocketAddrV4::new(*local.ip(), port),
            peer: None,
            rx: VecDeque::new(),
            rx_charged: 0,
            rcvbuf: self.sysctl.rmem_default as usize,
        };
        Ok(self.udp.insert(socket))
    }

    /// The address a socket is bound to.
    pub fn udp_local_addr(&self, h: UdpHandle) -> Result<SocketAddrV4, Error> {
        self.udp.get(h).map(|s| s.local).ok_or(Error::BadHandle)
    }

    /// `connect(2)` (Linux `ip4_datagram_connect`): `peer` becomes the socket's default
    /// destination and the only source it receives from; `None` dissolves the association
    /// (`AF_UNSPEC`). Datagrams already queued stay. `EINVAL` for 0.0.0.0 or port 0 (Linux
    /// accepts a port 0 there; ustack has no use for it), `ENETUNREACH` without a route.
    pub fn udp_connect(&mut self, h: UdpHandle, peer: Option<SocketAddrV4>) -> Result<(), Error> {
        if let Some(p) = peer {
            if p.port() == 0 || p.ip().is_unspecified() {
                return Err(Error::InvalidArgument);
            }
            if self.route(*p.ip()).is_none() {
                return Err(Error::NetUnreachable);
            }
        }
        self.udp.get_mut(h).ok_or(Error::BadHandle)?.peer = peer;
        Ok(())
    }

    /// The connected peer, if any (`getpeername(2)`).
    pub fn udp_peer_addr(&self, h: UdpHandle) -> Result<Option<SocketAddrV4>, Error> {
        self.udp.get(h).map(|s| s.peer).ok_or(Error::BadHandle)
    }

    /// Datagrams waiting in a socket's receive queue.
    pub fn udp_rx_queued(&self, h: UdpHandle) -> Result<usize, Error> {
        self.udp.get(h).map(|s| s.rx.len()).ok_or(Error::BadHandle)
    }

    /// Close a socket; its queued datagrams are freed. A stale handle is refused.
    pub fn udp_close(&mut self, h: UdpHandle) -> Result<(), Error> {
        let socket = self
            .udp
            .sockets
            .remove(h.index, h.generation)
            .ok_or(Error::BadHandle)?;
        self.udp.by_port.remove(&socket.local.port());
        // Readiness: a poller drops the registration of a closed socket when it sees it.
        self.ready.mark(SocketKey::Udp(h), Readiness::ALL);
        Ok(())
    }

    /// Send one datagram. Linux semantics: a datagram dropped later for lack of device
    /// queue space is counted (`SndbufErrors`) but not reported to the caller.
    pub fn udp_send_to(
        &mut self,
        now: Instant,
        h: UdpHandle,
        payload: &[u8],
        dst: SocketAddrV4,
    ) -> Result<(), Error> {
        let local = self.udp.get(h).ok_or(Error::BadHandle)?.local;
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::MessageTooLong);
        }
        if dst.port() == 0 || dst.ip().is_unspecified() {
            return Err(Error::InvalidArgument);
        }
        if dst.ip().is_broadcast() || Some(*dst.ip()) == self.ipv4.broadcast() {
            return Err(Error::BroadcastDenied);
        }
        let len = udp::HEADER_LEN + payload.len();
        let header_len = ustack_wire::ipv4::HEADER_LEN;
        let out = Outbound {
            dst: *dst.ip(),
            protocol: IpProtocol::Udp,
            payload_len: len,
            // Linux's default IP_PMTUDISC_WANT: DF when the datagram fits the path MTU,
            // fragmented locally otherwise.
            dont_frag: header_len + len <= self.mtu,
            full_reason: DropReason::UdpSndbuf,
        };
        let repr = udp::Repr {
            src_port: local.port(),
            dst_port: dst.port(),
        };
        let checksum_offload = self.checksum_offload;
        self.ipv4_output(now, out, |buf, src, dst| {
            let mut packet = udp::Packet::new_unchecked(buf);
            repr.emit(
                &mut packet,
                &src.into(),
                &dst.into(),
                payload.len(),
                |p| p.copy_from_slice(payload),
                !checksum_offload,
            );
        })?;
        self.mib.inc(Counter::UdpOutDatagrams);
        Ok(())
    }

    /// Take the oldest datagram: copies at most `buf.len()` bytes (the rest of a longer
    /// datagram is discarded, as without MSG_TRUNC) and returns (bytes copied, sender).
    pub fn udp_recv_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddrV4), Error> {
        let socket = self.udp.get_mut(h).ok_or(Error::BadHandle)?;
        let (from, data) = socket.rx.pop_front().ok_or(Error::WouldBlock)?;
        socket.rx_charged -= data.len() + DATAGRAM_OVERHEAD;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        self.mib.inc(Counter::UdpInDatagrams);
        Ok((n, from))
    }

    /// UDP input (Linux `__udp4_lib_rcv`).
    pub(crate) fn udp_input(&mut self, now: Instant, inbound: &Inbound) {
        let src = inbound.repr.src_addr.into();
        let dst = inbound.repr.dst_addr.into();
        let repr = match udp::Packet::new_checked(inbound.payload)
            .and_then(|p| udp::Repr::parse(&p, &src, &dst, !self.checksum_offload))
        {
            Ok(r) => r,
            Err(ustack_wire::Error::Checksum) => return self.mib.drop(DropReason::UdpCsum),
            Err(_) => return self.mib.drop(DropReason::UdpMalformed),
        };
        let packet = udp::Packet::new_unchecked(inbound.payload);
        let target = self.udp.by_port.get(&repr.dst_port).copied();
        let from = SocketAddrV4::new(inbound.repr.src_addr, repr.src_port);
        // A connected socket takes only its peer's datagrams (Linux `compute_score`: a
        // socket whose daddr or dport does not match the source scores -1, so the datagram
        // finds no socket).
        let socket = target
            .and_then(|i| self.udp.sockets.by_index_mut(i))
            .filter(|s| {
                s.local.ip().is_unspecified()
                    || *s.local.ip() == inbound.repr.dst_addr
                    || inbound.broadcast
            })
            .filter(|s| s.peer.is_none_or(|p| p == from));
        let Some(socket) = socket else {
            self.mib.drop(DropReason::UdpNoSocket);
            self.icmp_send_unreach(now, inbound, DstUnreachable::PortUnreachable);
            return;
        };
        let data = packet.payload();
        if socket.rx_charged > socket.rcvbuf {
            return self.mib.drop(DropReason::SocketRcvbuff);
        }
        socket.rx_charged += data.len() + DATAGRAM_OVERHEAD;
        socket.rx.push_back((from, data.to_vec()));
        if let Some(index) = target {
            let generation = self.udp.sockets.generation(index).unwrap_or(0);
            let key = SocketKey::Udp(UdpHandle { index, generation });
            self.ready.mark(key, Readiness::READABLE); // sk_data_ready
        }
    }
}
