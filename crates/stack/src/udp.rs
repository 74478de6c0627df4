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
//! Over IPv6 the same code runs (Linux `__udp6_lib_rcv`, `udpv6_sendmsg`): a socket is
//! bound to an IPv6 address of ours or `::`, its datagrams carry the IPv6 pseudo-header
//! checksum, which is mandatory (RFC 8200 §8.1: a zero checksum is dropped and counted
//! `Udp6InCsumErrors`), a closed port is answered with an ICMPv6 port unreachable (RFC
//! 4443 §3.1, code 4), and the counts go to the `Udp6` table. Dual-stack as Linux's
//! default (`bindv6only = 0`): a socket on `::` also takes IPv4 datagrams, their sender
//! seen as `::ffff:a.b.c.d`, and sends to such addresses over IPv4, unless
//! `IPV6_V6ONLY` ([`Stack::udp_set_v6only`]); such datagrams count in `Udp`, by the
//! family on the wire. The port table is shared by both families, so a port is held by
//! one socket of either family (as Linux's bind conflict between `0.0.0.0` and a
//! dual-stack `::`).
//!
//! A socket's receive queue is bounded by `rmem_default` bytes, each datagram charged its
//! payload plus [`DATAGRAM_OVERHEAD`]; like Linux, the check is made before adding, so the
//! queue may pass the bound by one datagram.

use core::hash::BuildHasher;
use core::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::collections::VecDeque;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::icmpv4::DstUnreachable;
use ustack_wire::icmpv6::dst_unreachable;
use ustack_wire::{IpProtocol, udp};

use crate::ip::ipv6::{Inbound6, Outbound6};
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
/// Largest UDP payload over IPv6: 65535 (Payload Length, no jumbograms) - 8 (UDP header)
/// - 8 (the Fragment header it will need).
pub const MAX_PAYLOAD6: usize = 65_519;

/// A UDP socket's handle: an index and a generation, so a stale handle never reaches a
/// socket that reused its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

#[derive(Debug)]
struct UdpSocket {
    /// Its family is the socket's: IPv4 or IPv6 datagrams only.
    local: SocketAddr,
    /// The peer of `connect(2)`: the default destination, and the only source received.
    peer: Option<SocketAddr>,
    rx: VecDeque<(SocketAddr, Vec<u8>)>,
    rx_charged: usize,
    rcvbuf: usize,
    /// `IPV6_V6ONLY`: an IPv6 socket on `::` without it also takes IPv4 datagrams, seen
    /// as IPv4-mapped addresses (RFC 3493 §3.7), and sends to such addresses over IPv4.
    v6only: bool,
    /// An error from ICMP to report once (Linux `sk_err`, set by `__udp4_lib_err`).
    error: Option<Error>,
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

    /// Every IPv4 socket: (local address, bytes queued for reading (charged), receive
    /// buffer). IPv6 sockets are not listed (the socket views are IPv4 only for now).
    pub(crate) fn views(&self) -> impl Iterator<Item = (SocketAddr, usize, usize)> + '_ {
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
                    s.rx.capacity() * size_of::<(SocketAddr, Vec<u8>)>()
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
    /// ephemeral port from `ip_local_port_range`). An IPv6 address makes an IPv6 socket
    /// (on `::`: dual-stack unless [`udp_set_v6only`](Self::udp_set_v6only)); a
    /// `SocketAddrV6`'s flow info and scope are ignored.
    pub fn udp_bind(&mut self, local: impl Into<SocketAddr>) -> Result<UdpHandle, Error> {
        let local = local.into();
        let ours = match local.ip() {
            IpAddr::V4(ip) => ip == self.ipv4.addr,
            IpAddr::V6(ip) => self.ip6.is_ours(ip),
        };
        if !local.ip().is_unspecified() && !ours {
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
            local: SocketAddr::new(local.ip(), port),
            peer: None,
            rx: VecDeque::new(),
            rx_charged: 0,
            rcvbuf: self.sysctl.rmem_default as usize,
            // Linux's default, `net.ipv6.bindv6only = 0`: dual-stack.
            v6only: false,
            error: None,
        };
        Ok(self.udp.insert(socket))
    }

    /// The address an IPv4 socket is bound to (`EAFNOSUPPORT` for an IPv6 socket: see
    /// [`udp_local_sockaddr`](Self::udp_local_sockaddr)).
    pub fn udp_local_addr(&self, h: UdpHandle) -> Result<SocketAddrV4, Error> {
        v4(self.udp_local_sockaddr(h)?)
    }

    /// `setsockopt(IPV6_V6ONLY)`: `true` makes an IPv6 socket take and send IPv6 only;
    /// `false` (the default, as Linux's `bindv6only = 0`) lets a socket on `::` take IPv4
    /// datagrams as `::ffff:a.b.c.d` and send to such addresses over IPv4. `EAFNOSUPPORT`
    /// on an IPv4 socket. (Linux refuses the change once bound; here sockets are created
    /// bound, so it may be changed at any time and applies to later datagrams.)
    pub fn udp_set_v6only(&mut self, h: UdpHandle, on: bool) -> Result<(), Error> {
        let socket = self.udp.get_mut(h).ok_or(Error::BadHandle)?;
        if socket.local.is_ipv4() {
            return Err(Error::AddrFamily);
        }
        socket.v6only = on;
        Ok(())
    }

    /// The address a socket of either family is bound to.
    pub fn udp_local_sockaddr(&self, h: UdpHandle) -> Result<SocketAddr, Error> {
        self.udp.get(h).map(|s| s.local).ok_or(Error::BadHandle)
    }

    /// `connect(2)` on an IPv4 socket (Linux `ip4_datagram_connect`), as
    /// [`udp_connect_addr`](Self::udp_connect_addr); `EAFNOSUPPORT` for an IPv6 socket.
    pub fn udp_connect(&mut self, h: UdpHandle, peer: Option<SocketAddrV4>) -> Result<(), Error> {
        v4(self.udp_local_sockaddr(h)?)?;
        self.udp_connect_addr(h, peer.map(SocketAddr::V4))
    }

    /// `connect(2)` on a socket of either family (Linux `ip4_datagram_connect`,
    /// `ip6_datagram_connect`): `peer` becomes the socket's default destination and the
    /// only source it receives from; `None` dissolves the association (`AF_UNSPEC`).
    /// Datagrams already queued stay. An IPv6 socket takes a `::ffff:a.b.c.d` peer (over
    /// IPv4, Linux `__ip6_datagram_connect` handing it to `__ip4_datagram_connect`;
    /// `ENETUNREACH` on a V6ONLY socket or one bound to an IPv6 address). `EINVAL` for
    /// an unspecified address or port 0 (Linux accepts a port 0 there; ustack has no use
    /// for it), `ENETUNREACH` without a route, `EAFNOSUPPORT` for a peer of the other
    /// family.
    pub fn udp_connect_addr(
        &mut self,
        h: UdpHandle,
        peer: Option<SocketAddr>,
    ) -> Result<(), Error> {
        let socket = self.udp.get(h).ok_or(Error::BadHandle)?;
        if let Some(p) = peer {
            if p.port() == 0 || p.ip().is_unspecified() {
                return Err(Error::InvalidArgument);
            }
            let routed = match (socket.local, p) {
                (SocketAddr::V4(_), SocketAddr::V4(p)) => self.route(*p.ip()).is_some(),
                (SocketAddr::V6(l), SocketAddr::V6(p)) => match p.ip().to_ipv4_mapped() {
                    Some(ip) => {
                        !socket.v6only && l.ip().is_unspecified() && self.route(ip).is_some()
                    }
                    None => self.ip6.route(*p.ip()).is_some(),
                },
                _ => return Err(Error::AddrFamily),
            };
            if !routed {
                return Err(Error::NetUnreachable);
            }
        }
        self.udp.get_mut(h).ok_or(Error::BadHandle)?.peer = peer;
        Ok(())
    }

    /// The connected peer of an IPv4 socket, if any (`getpeername(2)`).
    pub fn udp_peer_addr(&self, h: UdpHandle) -> Result<Option<SocketAddrV4>, Error> {
        self.udp_peer_sockaddr(h)?.map(v4).transpose()
    }

    /// The connected peer of a socket of either family, if any (`getpeername(2)`).
    pub fn udp_peer_sockaddr(&self, h: UdpHandle) -> Result<Option<SocketAddr>, Error> {
        Ok(self.udp.get(h).ok_or(Error::BadHandle)?.peer)
    }

    /// `getsockopt(SO_ERROR)`: the socket's pending error, taken once (Linux
    /// `sock_error`).
    pub fn udp_take_error(&mut self, h: UdpHandle) -> Result<Option<Error>, Error> {
        Ok(self.udp.get_mut(h).ok_or(Error::BadHandle)?.error.take())
    }

    /// Whether an error waits to be reported (Linux `datagram_poll`: EPOLLERR).
    pub(crate) fn udp_error_pending(&self, h: UdpHandle) -> Result<bool, Error> {
        Ok(self.udp.get(h).ok_or(Error::BadHandle)?.error.is_some())
    }

    /// An ICMP error about a datagram sent from `local_port` to `remote` (Linux
    /// `__udp4_lib_err`): without `IP_RECVERR`, which ustack does not have, only a hard
    /// error (`icmp_err_convert[code].fatal`) reaches a socket, and only a connected one
    /// ("if (!harderr || sk->sk_state != TCP_ESTABLISHED) goto out;"), as `sk_err`: its
    /// next receive or send fails with it. Other errors are dropped.
    pub(crate) fn udp_icmp_error(&mut self, local_port: u16, remote: SocketAddr, err: Error) {
        let Some(&index) = self.udp.by_port.get(&local_port) else {
            return;
        };
        let Some(socket) = self.udp.sockets.by_index_mut(index) else {
            return;
        };
        // An IPv4 peer may be named v4-mapped by a dual-stack socket.
        let mapped = match remote {
            SocketAddr::V4(r) => Some(SocketAddr::V6(SocketAddrV6::new(
                r.ip().to_ipv6_mapped(),
                r.port(),
                0,
                0,
            ))),
            SocketAddr::V6(_) => None,
        };
        if socket.peer != Some(remote) && (mapped.is_none() || socket.peer != mapped) {
            return;
        }
        socket.error = Some(err);
        let generation = self.udp.sockets.generation(index).unwrap_or(0);
        // sk_error_report: readers and writers wake to find the error.
        self.ready.mark(
            SocketKey::Udp(UdpHandle { index, generation }),
            Readiness::ALL,
        );
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
    /// queue space is counted (`SndbufErrors`) but not reported to the caller. `dst` is of
    /// the socket's family (`EAFNOSUPPORT` otherwise); over IPv6 a datagram larger than
    /// the path MTU is fragmented by IPv6 (RFC 8200 §4.5).
    pub fn udp_send_to(
        &mut self,
        now: Instant,
        h: UdpHandle,
        payload: &[u8],
        dst: impl Into<SocketAddr>,
    ) -> Result<(), Error> {
        // A pending ICMP error is this call's (Linux `sock_alloc_send_pskb` reports
        // `sock_error` first).
        if let Some(e) = self.udp.get_mut(h).ok_or(Error::BadHandle)?.error.take() {
            return Err(e);
        }
        let socket = self.udp.get(h).ok_or(Error::BadHandle)?;
        let (mut local, mut dst) = (socket.local, dst.into());
        // Linux `udpv6_sendmsg`: an IPv4-mapped destination goes over IPv4
        // (`udp_sendmsg`), refused with ENETUNREACH on a V6ONLY socket. Only a socket on
        // `::` has an IPv4 source to send from.
        if let (SocketAddr::V6(l), SocketAddr::V6(d)) = (local, dst)
            && let Some(v4) = d.ip().to_ipv4_mapped()
        {
            if socket.v6only || !l.ip().is_unspecified() {
                return Err(Error::NetUnreachable);
            }
            local = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), l.port());
            dst = SocketAddr::new(IpAddr::V4(v4), d.port());
        }
        if dst.port() == 0 || dst.ip().is_unspecified() {
            return Err(Error::InvalidArgument);
        }
        let repr = udp::Repr {
            src_port: local.port(),
            dst_port: dst.port(),
        };
        let len = udp::HEADER_LEN + payload.len();
        let emit = |buf: &mut [u8], src: IpAddr, dst: IpAddr, checksum: bool| {
            let mut packet = udp::Packet::new_unchecked(buf);
            repr.emit(
                &mut packet,
                &src,
                &dst,
                payload.len(),
                |p| p.copy_from_slice(payload),
                checksum,
            );
        };
        let checksum_offload = self.checksum_offload;
        match (local, dst) {
            (SocketAddr::V4(_), SocketAddr::V4(dst)) => {
                if payload.len() > MAX_PAYLOAD {
                    return Err(Error::MessageTooLong);
                }
                if dst.ip().is_broadcast() || Some(*dst.ip()) == self.ipv4.broadcast() {
                    return Err(Error::BroadcastDenied);
                }
                let header_len = ustack_wire::ipv4::HEADER_LEN;
                let out = Outbound {
                    dst: *dst.ip(),
                    protocol: IpProtocol::Udp,
                    payload_len: len,
                    // Linux's default IP_PMTUDISC_WANT: DF when the datagram fits the path
                    // MTU, fragmented locally otherwise.
                    dont_frag: header_len + len <= self.mtu,
                    full_reason: DropReason::UdpSndbuf,
                };
                self.ipv4_output(now, out, |buf, src, dst| {
                    emit(buf, src.into(), dst.into(), !checksum_offload)
                })?;
                self.mib.inc(Counter::UdpOutDatagrams);
            }
            (SocketAddr::V6(local), SocketAddr::V6(dst)) => {
                if payload.len() > MAX_PAYLOAD6 {
                    return Err(Error::MessageTooLong);
                }
                let out = Outbound6 {
                    src: (!local.ip().is_unspecified()).then_some(*local.ip()),
                    dst: *dst.ip(),
                    next_header: IpProtocol::Udp,
                    payload_len: len,
                    hop_limit: None,
                    full_reason: DropReason::Udp6Sndbuf,
                    ports: Some((local.port(), dst.port())),
                };
                // The checksum is always computed over IPv6: the fragments of a datagram
                // larger than the MTU cannot have it filled by a device, and the IPv6
                // output path does not offload.
                self.ipv6_output(now, out, |buf, src, dst| {
                    emit(buf, src.into(), dst.into(), true)
                })?;
                self.mib.inc(Counter::Udp6OutDatagrams);
            }
            _ => return Err(Error::AddrFamily),
        }
        Ok(())
    }

    /// Take the oldest datagram of an IPv4 socket: copies at most `buf.len()` bytes (the
    /// rest of a longer datagram is discarded, as without MSG_TRUNC) and returns (bytes
    /// copied, sender). `EAFNOSUPPORT` for an IPv6 socket (nothing is taken): see
    /// [`udp_recv_from_addr`](Self::udp_recv_from_addr).
    pub fn udp_recv_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddrV4), Error> {
        v4(self.udp_local_sockaddr(h)?)?;
        let (n, from) = self.udp_recv_from_addr(h, buf)?;
        Ok((n, v4(from)?))
    }

    /// `recv(MSG_PEEK)` on a socket of either family: copy the oldest datagram (at most
    /// `buf.len()` bytes) and its sender without taking it: the next receive returns it
    /// again (Linux `udp_recvmsg` with `MSG_PEEK`, which leaves the skb queued and does not
    /// count it in `InDatagrams`). A pending error first, taken, as a receive.
    pub fn udp_peek_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddr), Error> {
        let socket = self.udp.get_mut(h).ok_or(Error::BadHandle)?;
        if let Some(e) = socket.error.take() {
            return Err(e);
        }
        let (from, data) = socket.rx.front().ok_or(Error::WouldBlock)?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok((n, *from))
    }

    /// Take the oldest datagram of a socket of either family, as
    /// [`udp_recv_from`](Self::udp_recv_from).
    pub fn udp_recv_from_addr(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddr), Error> {
        let socket = self.udp.get_mut(h).ok_or(Error::BadHandle)?;
        // Linux `__skb_recv_udp`: "error = sock_error(sk); if (error) break;", before the
        // queue is looked at.
        if let Some(e) = socket.error.take() {
            return Err(e);
        }
        let (from, data) = socket.rx.pop_front().ok_or(Error::WouldBlock)?;
        socket.rx_charged -= data.len() + DATAGRAM_OVERHEAD;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        // Counted by the family on the wire, as Linux's `udpv6_recvmsg` (`is_udp4`).
        self.mib.inc(match from {
            SocketAddr::V6(a) if a.ip().to_ipv4_mapped().is_none() => Counter::Udp6InDatagrams,
            _ => Counter::UdpInDatagrams,
        });
        Ok((n, from))
    }

    /// UDP input over IPv4 (Linux `__udp4_lib_rcv`).
    pub(crate) fn udp_input(&mut self, now: Instant, inbound: &Inbound) {
        let src = inbound.repr.src_addr.into();
        let dst = inbound.repr.dst_addr.into();
        let repr = match udp::Packet::new_checked(inbound.payload)
            .and_then(|p| udp::Repr::parse(&p, &src, &dst, !self.l4_csum_trusted()))
        {
            Ok(r) => r,
            Err(ustack_wire::Error::Checksum) => return self.mib.drop(DropReason::UdpCsum),
            Err(_) => return self.mib.drop(DropReason::UdpMalformed),
        };
        let from = SocketAddr::V4(SocketAddrV4::new(inbound.repr.src_addr, repr.src_port));
        let to = inbound.repr.dst_addr.into();
        if !self.udp_deliver(inbound.payload, repr.dst_port, from, to, inbound.broadcast) {
            self.mib.drop(DropReason::UdpNoSocket);
            self.icmp_send_unreach(now, inbound, DstUnreachable::PortUnreachable);
        }
    }

    /// UDP input over IPv6 (Linux `__udp6_lib_rcv`): the same socket lookup and queueing
    /// as over IPv4. The checksum is verified even with receive offload when it is zero,
    /// since RFC 8200 §8.1 forbids a zero checksum ("IPv6 receivers must discard UDP
    /// packets containing a zero checksum").
    pub(crate) fn udp6_input(&mut self, now: Instant, inbound: &Inbound6) {
        let (src, dst) = (IpAddr::V6(inbound.src), IpAddr::V6(inbound.dst));
        let zero = inbound.payload.get(6..8) == Some(&[0, 0]);
        let repr = match udp::Packet::new_checked(inbound.payload)
            .and_then(|p| udp::Repr::parse(&p, &src, &dst, zero || !self.l4_csum_trusted()))
        {
            Ok(r) => r,
            Err(ustack_wire::Error::Checksum) => return self.mib.drop(DropReason::Udp6Csum),
            Err(_) => return self.mib.drop(DropReason::Udp6Malformed),
        };
        let from = SocketAddr::V6(SocketAddrV6::new(inbound.src, repr.src_port, 0, 0));
        if !self.udp_deliver(inbound.payload, repr.dst_port, from, dst, inbound.multicast) {
            self.mib.drop(DropReason::Udp6NoSocket);
            // RFC 4443 §3.1: "the destination node SHOULD send a Destination Unreachable
            // message with Code 4" (Linux `__udp6_lib_rcv` -> `icmpv6_send`); not to a
            // multicast destination (§2.4 (e.3)), rate-limited by `icmp6_error`.
            self.icmp6_error_dst_unreach(now, inbound.packet, dst_unreachable::PORT_UNREACHABLE);
        }
    }

    /// Queue a checked datagram (`datagram`: header and payload) on the socket bound to
    /// `port` for address `to`, if one takes it (Linux `__udp4_lib_lookup`/
    /// `__udp6_lib_lookup` and `__udp_queue_rcv_skb`). `false`: no socket (the caller
    /// counts NoPorts and answers). A full queue is counted here.
    fn udp_deliver(
        &mut self,
        datagram: &[u8],
        port: u16,
        from: SocketAddr,
        to: IpAddr,
        group: bool,
    ) -> bool {
        let packet = udp::Packet::new_unchecked(datagram);
        let target = self.udp.by_port.get(&port).copied();
        // A socket of the datagram's family, bound to its destination (or the wildcard);
        // a connected socket takes only its peer's datagrams (Linux `compute_score`: a
        // socket whose daddr or dport does not match the source scores -1, so the datagram
        // finds no socket).
        let socket = target
            .and_then(|i| self.udp.sockets.by_index_mut(i))
            .filter(|s| s.local.ip().is_unspecified() || s.local.ip() == to || group);
        // The sender as the socket sees it: an IPv4 sender of a dual-stack IPv6 socket as
        // `::ffff:a.b.c.d` (Linux `udp6_lib_lookup` falls back to v4-mapped sockets).
        let seen = socket.as_ref().and_then(|s| match (s.local, from) {
            (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => {
                Some(from)
            }
            (SocketAddr::V6(l), SocketAddr::V4(f)) if l.ip().is_unspecified() && !s.v6only => Some(
                SocketAddr::V6(SocketAddrV6::new(f.ip().to_ipv6_mapped(), f.port(), 0, 0)),
            ),
            _ => None,
        });
        let (Some(socket), Some(from_seen)) = (socket, seen) else {
            return false;
        };
        if socket.peer.is_some_and(|p| p != from_seen) {
            return false;
        }
        let data = packet.payload();
        if socket.rx_charged > socket.rcvbuf {
            self.mib.drop(match from {
                SocketAddr::V4(_) => DropReason::SocketRcvbuff,
                SocketAddr::V6(_) => DropReason::Udp6Rcvbuf,
            });
            return true;
        }
        socket.rx_charged += data.len() + DATAGRAM_OVERHEAD;
        socket.rx.push_back((from_seen, data.to_vec()));
        if let Some(index) = target {
            let generation = self.udp.sockets.generation(index).unwrap_or(0);
            let key = SocketKey::Udp(UdpHandle { index, generation });
            self.ready.mark(key, Readiness::READABLE); // sk_data_ready
        }
        true
    }
}

/// An IPv4 address of a V4-only call, or `EAFNOSUPPORT`.
fn v4(addr: SocketAddr) -> Result<SocketAddrV4, Error> {
    match addr {
        SocketAddr::V4(a) => Ok(a),
        SocketAddr::V6(_) => Err(Error::AddrFamily),
    }
}

#[cfg(test)]
mod tests {
    use core::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};

    use ustack_wire::{IpProtocol, icmpv6, ipv6};

    use super::*;
    use crate::{Config, Ipv4Cidr, Ipv6Cidr};

    const A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);

    /// An ICMPv6 error of `ty` (1 or 3) and `code` from B to A quoting `quoted`, as a
    /// bare IPv6 packet (a TUN link).
    fn icmp6_error(ty: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
        let repr = match ty {
            1 => icmpv6::Repr::DstUnreachable { code, data: quoted },
            _ => icmpv6::Repr::TimeExceeded { code, data: quoted },
        };
        let mut p = vec![0u8; ipv6::HEADER_LEN + repr.buffer_len()];
        ipv6::Repr {
            src_addr: B,
            dst_addr: A,
            next_header: IpProtocol::Icmpv6,
            payload_len: repr.buffer_len(),
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut p[..]));
        repr.emit(
            &mut icmpv6::Packet::new_unchecked(&mut p[ipv6::HEADER_LEN..]),
            &B,
            &A,
            true,
        );
        p
    }

    /// Linux `__udp6_lib_err` without `IPV6_RECVERR`: a hard ICMPv6 error (port
    /// unreachable: ECONNREFUSED; administratively prohibited: EACCES) about a datagram of
    /// a connected IPv6 socket becomes its error; a soft one (address unreachable, Time
    /// Exceeded) does not, nor does any error reach an unconnected socket. (Connecting
    /// an IPv6 socket has no public call here yet: the peer is set directly.)
    #[test]
    fn icmpv6_hard_errors_reach_a_connected_udp6_socket() {
        let mut s = Stack::new(
            Config::ip(Ipv4Cidr::new(Ipv4Addr::new(192, 0, 2, 1), 24))
                .with_ipv6(Ipv6Cidr::new(A, 64)),
        );
        let now = Instant::ZERO;
        let h = s.udp_bind(SocketAddrV6::new(A, 5000, 0, 0)).unwrap();
        let peer = SocketAddrV6::new(B, 53, 0, 0);
        s.udp_send_to(now, h, b"query", peer).unwrap();
        let sent = s.poll_transmit(now).expect("the datagram");
        // Unconnected: nothing.
        s.receive(now, &icmp6_error(1, 4, &sent));
        assert_eq!(s.udp_take_error(h), Ok(None));
        s.udp.get_mut(h).unwrap().peer = Some(SocketAddr::V6(peer));
        for (ty, code) in [(1, 3), (3, 0)] {
            s.receive(now, &icmp6_error(ty, code, &sent));
            assert_eq!(s.udp_take_error(h), Ok(None), "soft: type {ty} code {code}");
        }
        for (code, err) in [(4, Error::ConnectionRefused), (1, Error::PermissionDenied)] {
            s.receive(now, &icmp6_error(1, code, &sent));
            assert_eq!(s.udp_take_error(h), Ok(Some(err)), "code {code}");
        }
    }
}
