//! ICMPv4: [RFC 792](https://www.rfc-editor.org/rfc/rfc792), with the host requirements of
//! [RFC 1122 §3.2.2](https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2) and Linux's
//! behaviour from `net/ipv4/icmp.c`: echo replies, errors for datagrams we cannot deliver,
//! and two rate limits on errors (a global token bucket, `icmp_msgs_per_sec` /
//! `icmp_msgs_burst`, and one per destination host, `icmp_ratelimit`, for the types in
//! `icmp_ratemask`).

use core::net::{IpAddr, Ipv4Addr};
use std::collections::VecDeque;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::icmpv4::{self, DstUnreachable, TimeExceeded};
use ustack_wire::{IpProtocol, SeqNumber, ipv4};

use crate::ip::reassembly::Expired;
use crate::ip::{Inbound, Outbound};
use crate::secret::KeyedState;
use crate::socket::{Readiness, SocketKey};
use crate::{Error, Stack};

/// Largest ICMP error datagram: RFC 1812 §4.3.2.3 "the ICMP datagram SHOULD contain as
/// much of the original datagram as possible without the length of the ICMP datagram
/// exceeding 576 bytes" (Linux: `576` in `icmp_send`).
const ICMP_ERROR_MAX: usize = 576;
/// Per-host bucket depth, in intervals: Linux's `XRLIM_BURST_FACTOR`.
const XRLIM_BURST_FACTOR: u64 = 6;
/// Hosts tracked by the per-host limiter; when full, the oldest-idle half is forgotten.
const PEER_LIMIT: usize = 4096;
/// Echo replies kept for [`Stack::recv_echo_reply`]; older ones are dropped (counted).
const ECHO_REPLY_QUEUE: usize = 1024;

/// An echo reply received for a [`Stack::ping`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoReply {
    pub src: Ipv4Addr,
    pub ident: u16,
    pub seq_no: u16,
    pub data: Vec<u8>,
    pub ttl: u8,
    /// When it arrived.
    pub at: Instant,
}

/// ICMP state: the rate limiters and received echo replies.
#[derive(Debug)]
pub struct IcmpState {
    /// Global bucket, in tokens scaled by 10^6 (one token = one message).
    global_credit: u64,
    global_stamp: Instant,
    /// Per-host buckets, in nanoseconds of credit (Linux `inet_peer_xrlim_allow`).
    peers: HashMap<IpAddr, (u64, Instant), KeyedState>,
    replies: VecDeque<EchoReply>,
}

impl IcmpState {
    /// `hasher` keyed with a secret: the peers' addresses are their choice.
    pub fn new(hasher: KeyedState) -> Self {
        IcmpState {
            global_credit: u64::MAX,
            global_stamp: Instant::ZERO,
            peers: HashMap::with_hasher(hasher),
            replies: VecDeque::new(),
        }
    }
}

impl Stack {
    /// ICMP input (Linux `icmp_rcv`).
    pub(crate) fn icmp_input(&mut self, now: Instant, inbound: &Inbound) {
        // RFC 2011: icmpInMsgs "includes all those counted by icmpInErrors".
        self.mib.inc(Counter::IcmpInMsgs);
        let Ok(packet) = icmpv4::Packet::new_checked(inbound.payload) else {
            return self.mib.drop(DropReason::IcmpMalformed);
        };
        if !packet.verify_checksum() {
            return self.mib.drop(DropReason::IcmpCsum);
        }
        self.mib.icmp_in_type(packet.msg_type().into());
        let repr = match icmpv4::Repr::parse(&packet, false) {
            Ok(r) => r,
            // Types we do not act on (redirects, timestamps, ...) are counted by type, then ignored.
            Err(ustack_wire::Error::Unsupported) => return,
            Err(_) => return self.mib.drop(DropReason::IcmpMalformed),
        };
        match repr {
            icmpv4::Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                // RFC 1122 §3.2.2.6: "Every host MUST implement an ICMP Echo server".
                // Linux: icmp_echo_ignore_all, and icmp_echo_ignore_broadcasts (RFC 1122
                // allows a host to ignore echo requests to broadcast addresses).
                if self.sysctl.icmp_echo_ignore_all != 0
                    || (inbound.broadcast && self.sysctl.icmp_echo_ignore_broadcasts != 0)
                {
                    return;
                }
                let reply = icmpv4::Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                let _ = self.icmp_send(now, inbound.repr.src_addr, &reply);
            }
            icmpv4::Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                if self.icmp.replies.len() >= ECHO_REPLY_QUEUE {
                    self.icmp.replies.pop_front();
                    self.mib.drop(DropReason::IcmpReplyQueueFull);
                }
                self.icmp.replies.push_back(EchoReply {
                    src: inbound.repr.src_addr,
                    ident,
                    seq_no,
                    data: data.to_vec(),
                    ttl: inbound.repr.ttl,
                    at: now,
                });
            }
            // RFC 1191 §4: "fragmentation needed and DF set" carries the next hop's MTU;
            // TCP lowers its segment size (Linux icmp_unreach -> tcp_v4_err).
            icmpv4::Repr::DstUnreachable {
                reason: DstUnreachable::FragRequired,
                next_hop_mtu,
                data,
            } => self.icmp_frag_needed(now, next_hop_mtu, data),
            // RFC 1122 §4.2.3.9 and §4.1.3.3: the other unreachable codes go to the
            // transport that sent the quoted datagram (Linux icmp_unreach -> tcp_v4_err,
            // __udp4_lib_err).
            icmpv4::Repr::DstUnreachable { reason, data, .. } => {
                self.icmp_unreachable(reason, data);
            }
            // RFC 1122 §4.2.3.9: Time Exceeded is a soft error for TCP (Linux
            // `icmp_unreach`, which ignores a reassembly timeout, then `tcp_v4_err`:
            // EHOSTUNREACH; `__udp4_lib_err` keeps it from UDP sockets: not hard).
            icmpv4::Repr::TimeExceeded {
                reason: TimeExceeded::TtlExpired,
                data,
            } => self.icmp_notify(Error::HostUnreachable, false, data),
            // Other errors about our own datagrams are counted by type above.
            _ => {}
        }
    }

    /// "Fragmentation needed" for a datagram we sent, quoted in `data` (its IP header and
    /// at least 8 bytes of payload, RFC 792): hand a TCP datagram's 4-tuple and quoted
    /// sequence number to TCP (Linux `icmp_unreach` -> `tcp_v4_err`). A quote too short
    /// to name a connection, or of a datagram not from us, counts as InErrors (Linux:
    /// `icmp_unreach`'s `out_err`, or no socket found).
    fn icmp_frag_needed(&mut self, now: Instant, mtu: u16, data: &[u8]) {
        // UDP and ICMP have no path MTU state here.
        if let Some((tuple, seq)) = self.icmp_quoted_tcp(data) {
            self.tcp_pmtu_event(now, tuple, seq, u32::from(mtu), ipv4::HEADER_LEN);
        }
    }

    /// The protocol, our address and port, the peer's, and the second word of the
    /// transport header (TCP's sequence number) of the datagram of ours an ICMP error
    /// quotes in `data`, if it quotes one; a quote too short to name a socket, or of a
    /// datagram not from us, counts as InErrors (Linux: `icmp_unreach`'s `out_err`).
    fn icmp_quoted(
        &mut self,
        data: &[u8],
    ) -> Option<(IpProtocol, crate::tcp::tcb::FourTuple, u32)> {
        let ihl = usize::from(data.first().map_or(0, |b| b & 0x0f)) * 4;
        if data.len() < ihl + 8 || ihl < ipv4::HEADER_LEN || data[0] >> 4 != 4 {
            self.mib.inc(Counter::IcmpInErrors);
            return None;
        }
        let quoted = ipv4::Packet::new_unchecked(&data[..ihl]);
        if quoted.src_addr() != self.ipv4.addr {
            self.mib.inc(Counter::IcmpInErrors);
            return None;
        }
        let l4 = &data[ihl..];
        let port = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
        let tuple = crate::tcp::tcb::FourTuple {
            local: core::net::SocketAddrV4::new(quoted.src_addr(), port(0)),
            remote: core::net::SocketAddrV4::new(quoted.dst_addr(), port(2)),
        };
        let word = u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]);
        Some((quoted.next_header(), tuple, word))
    }

    /// The 4-tuple and sequence number of the TCP segment of ours an ICMP error quotes
    /// in `data`, if it quotes one (see [`Stack::icmp_quoted`]).
    fn icmp_quoted_tcp(
        &mut self,
        data: &[u8],
    ) -> Option<(crate::tcp::tcb::FourTuple, ustack_wire::SeqNumber)> {
        match self.icmp_quoted(data)? {
            (IpProtocol::Tcp, tuple, seq) => Some((tuple, ustack_wire::SeqNumber(seq))),
            _ => None,
        }
    }

    /// A Destination Unreachable (other than fragmentation needed) about a datagram of
    /// ours, quoted in `data`, to the socket that sent it (Linux `icmp_unreach`, which
    /// converts the code with `icmp_err_convert`, see [`unreach_error`]).
    ///
    /// TCP (Linux `tcp_v4_err`; RFC 1122 §4.2.3.9, RFC 5927 §4.1 for the sequence check):
    /// a connection still opening (SYN-SENT, SYN-RECEIVED) whose unacknowledged data the
    /// quote names fails with the error ("sk->sk_err = err; tcp_done(sk)"), whatever the
    /// code; a synchronized one keeps it as a soft error (`sk_err_soft`, "Only an error
    /// on timeout"): `SO_ERROR` reports it once, a timeout reports it instead of
    /// ETIMEDOUT (`tcp_write_err`), and an acceptable ACK forgets it. Linux also reverts
    /// the RTO backoff on a net or host unreachable for the head segment after a timeout
    /// (RFC 6069, `tcp_ld_RTO_revert`), which ustack does not.
    ///
    /// UDP (Linux `__udp4_lib_err`): a hard error to a connected socket, see
    /// [`Stack::udp_icmp_error`].
    fn icmp_unreachable(&mut self, reason: DstUnreachable, data: &[u8]) {
        if let Some((err, hard)) = unreach_error(reason) {
            self.icmp_notify(err, hard, data);
        } else {
            // Still a quote to check (InErrors when it names nothing of ours).
            let _ = self.icmp_quoted(data);
        }
    }

    /// `err` (hard or soft) about the datagram quoted in `data`, to the socket that sent
    /// it: see [`Stack::icmp_unreachable`].
    fn icmp_notify(&mut self, err: Error, hard: bool, data: &[u8]) {
        let Some((proto, tuple, word)) = self.icmp_quoted(data) else {
            return;
        };
        match proto {
            IpProtocol::Tcp => {
                self.tcp_icmp_unreachable(tuple, SeqNumber(word), err, Counter::IcmpInErrors)
            }
            IpProtocol::Udp if hard => {
                self.udp_icmp_error(tuple.local.port(), tuple.remote.into(), err)
            }
            _ => {}
        }
    }

    /// TCP's part of [`Stack::icmp_unreachable`] (Linux `tcp_v4_err`), and of ICMPv6's
    /// port unreachable (Linux `tcp_v6_err`, `icmpv6_err_convert`: ECONNREFUSED): `err`
    /// for the segment of `tuple` that quoted `seq`; `no_socket` counts a quote of no
    /// connection.
    pub(crate) fn tcp_icmp_unreachable(
        &mut self,
        tuple: crate::tcp::tcb::FourTuple,
        seq: SeqNumber,
        err: Error,
        no_socket: Counter,
    ) {
        let Some(index) = self.tcp.lookup(self.tcp.ehash.hash(&tuple), &tuple) else {
            return self.mib.inc(no_socket);
        };
        let h = self.tcp.handle_of(index);
        let Some(tcb) = self.tcp.get(h) else { return };
        // RFC 5927 §4.1 (Linux: "!between(seq, tp->snd_una, tp->snd_nxt)").
        if seq.before(tcb.snd.una) || seq.after(tcb.snd.nxt) {
            return self.mib.inc(Counter::TcpExtOutOfWindowIcmps);
        }
        match tcb.state {
            crate::tcp::State::SynSent | crate::tcp::State::SynReceived => {
                self.tcp_done(h, Some(err));
                // sk_error_report: the connecting caller wakes to find the error.
                self.ready.mark(SocketKey::Tcp(h), Readiness::ALL);
            }
            crate::tcp::State::Closed => {}
            _ => self.tcp_set_err_soft(h, err),
        }
    }

    /// Send an echo request ("ping") to `dst`. Replies appear in [`Stack::recv_echo_reply`].
    pub fn ping(
        &mut self,
        now: Instant,
        dst: Ipv4Addr,
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> Result<(), Error> {
        if dst.is_broadcast() || Some(dst) == self.ipv4.broadcast() {
            return Err(Error::BroadcastDenied);
        }
        self.icmp_send(
            now,
            dst,
            &icmpv4::Repr::EchoRequest {
                ident,
                seq_no,
                data,
            },
        )
    }

    /// The oldest echo reply not yet taken.
    pub fn recv_echo_reply(&mut self) -> Option<EchoReply> {
        self.icmp.replies.pop_front()
    }

    /// Build and send one ICMP message to `dst`.
    fn icmp_send(&mut self, now: Instant, dst: Ipv4Addr, repr: &icmpv4::Repr) -> Result<(), Error> {
        let out = Outbound {
            dst,
            protocol: IpProtocol::Icmp,
            payload_len: repr.buffer_len(),
            dont_frag: false,
            full_reason: DropReason::IcmpOutQueueFull,
        };
        self.mib.inc(Counter::IcmpOutMsgs);
        self.mib.icmp_out_type(icmp_type(repr));
        self.ipv4_output(now, out, |buf, _, _| {
            repr.emit(&mut icmpv4::Packet::new_unchecked(buf), true);
        })
        .inspect_err(|_| self.mib.inc(Counter::IcmpOutErrors))
    }

    /// Destination Unreachable about `inbound` (port or protocol unreachable).
    pub(crate) fn icmp_send_unreach(
        &mut self,
        now: Instant,
        inbound: &Inbound,
        reason: DstUnreachable,
    ) {
        if !self.icmp_error_allowed(inbound.broadcast, &inbound.repr, inbound.payload) {
            return;
        }
        let quoted = quote(inbound.header, inbound.payload);
        let repr = icmpv4::Repr::DstUnreachable {
            reason,
            next_hop_mtu: 0,
            data: &quoted,
        };
        if self.icmp_rate_allowed(now, inbound.repr.src_addr, 3) {
            let _ = self.icmp_send(now, inbound.repr.src_addr, &repr);
        }
    }

    /// Time Exceeded (fragment reassembly) for an expired reassembly queue whose first
    /// fragment had arrived (RFC 792; Linux `ip_expire`).
    pub(crate) fn icmp_frag_expired(&mut self, now: Instant, expired: &Expired) {
        let Some(first) = &expired.first else { return };
        let header = ipv4::Packet::new_unchecked(first.header.as_bytes());
        let repr = ipv4::Repr {
            src_addr: header.src_addr(),
            dst_addr: header.dst_addr(),
            next_header: header.next_header(),
            payload_len: first.data.len(),
            ttl: header.ttl(),
            tos: 0,
            ident: header.ident(),
            dont_frag: header.dont_frag(),
            more_frags: true,
            frag_offset: 0,
        };
        if repr.dst_addr != self.ipv4.addr || !self.icmp_error_allowed(false, &repr, &first.data) {
            return;
        }
        let quoted = quote(first.header.as_bytes(), &first.data);
        let msg = icmpv4::Repr::TimeExceeded {
            reason: TimeExceeded::FragExpired,
            data: &quoted,
        };
        if self.icmp_rate_allowed(now, repr.src_addr, 11) {
            let _ = self.icmp_send(now, repr.src_addr, &msg);
        }
    }

    /// [RFC 1122 §3.2.2](https://www.rfc-editor.org/rfc/rfc1122#section-3.2.2): "An ICMP
    /// error message MUST NOT be sent as the result of receiving: an ICMP error message,
    /// a datagram destined to an IP broadcast or IP multicast address, a datagram sent as
    /// a link-layer broadcast, a non-initial fragment, a datagram whose source address
    /// does not define a single host".
    fn icmp_error_allowed(&self, broadcast: bool, repr: &ipv4::Repr, payload: &[u8]) -> bool {
        if broadcast || repr.frag_offset != 0 || repr.dst_addr.is_multicast() {
            return false;
        }
        let src = repr.src_addr;
        if src.is_unspecified() || src.is_broadcast() || src.is_multicast() || src.is_loopback() {
            return false;
        }
        if repr.next_header == IpProtocol::Icmp {
            // Only informational messages (echo, ...) may trigger an error; the type is
            // the first payload byte. Types 0, 8, 13-18 are queries (RFC 792).
            return matches!(payload.first(), Some(0 | 8 | 13..=18));
        }
        true
    }

    /// The two rate limits on ICMP errors, for types in `icmp_ratemask`, in the order of
    /// Linux >= 6.12 (`icmp: change the order of rate limits`): the global bucket is
    /// checked but not consumed, then the per-host bucket is checked and updated, and only
    /// then is a global token consumed. (Linux consumes a random 0-2 tokens there against
    /// side channels; ustack consumes exactly one, so tests are deterministic.)
    fn icmp_rate_allowed(&mut self, now: Instant, dst: Ipv4Addr, msg_type: u8) -> bool {
        if self.sysctl.icmp_ratemask & (1 << msg_type) == 0 {
            return true;
        }
        let interval_ms = self.sysctl.icmp_ratelimit;
        self.icmp_limits(
            now,
            IpAddr::V4(dst),
            interval_ms,
            Counter::IcmpOutRateLimitHost,
        )
    }

    /// The global bucket then the per-host one (`interval_ms` a message), shared by ICMP
    /// and ICMPv6 as in Linux (`icmp_global_allow` serves both; the host buckets are
    /// per destination, `inet_peer_xrlim_allow`). `host_counter` counts a host refusal.
    pub(crate) fn icmp_limits(
        &mut self,
        now: Instant,
        dst: IpAddr,
        interval_ms: u64,
        host_counter: Counter,
    ) -> bool {
        // Global bucket (`icmp_global_allow`): icmp_msgs_per_sec tokens a second, at most
        // icmp_msgs_burst; kept in millionths of a token.
        const TOKEN: u64 = 1_000_000;
        let burst = self.sysctl.icmp_msgs_burst.saturating_mul(TOKEN);
        let elapsed_us =
            u64::try_from((now - self.icmp.global_stamp).as_micros()).unwrap_or(u64::MAX);
        let credit = self
            .icmp
            .global_credit
            .min(burst)
            .saturating_add(elapsed_us.saturating_mul(self.sysctl.icmp_msgs_per_sec))
            .min(burst);
        self.icmp.global_credit = credit;
        self.icmp.global_stamp = now;
        if credit < TOKEN {
            self.mib.inc(Counter::IcmpOutRateLimitGlobal);
            return false;
        }
        // Per-host bucket (`inet_peer_xrlim_allow`): one message per icmp_ratelimit, in
        // bursts of up to XRLIM_BURST_FACTOR.
        let interval = interval_ms.saturating_mul(1_000_000);
        if interval > 0 && !self.icmp.peer_allow(now, dst, interval) {
            self.mib.inc(host_counter);
            return false;
        }
        self.icmp.global_credit -= TOKEN;
        true
    }
}

impl IcmpState {
    /// Take one token from `dst`'s bucket (`interval` nanoseconds of credit per message).
    fn peer_allow(&mut self, now: Instant, dst: IpAddr, interval: u64) -> bool {
        let cap = interval.saturating_mul(XRLIM_BURST_FACTOR);
        if self.peers.len() >= PEER_LIMIT && !self.peers.contains_key(&dst) {
            // Forget hosts whose buckets have refilled: they behave as new ones anyway.
            self.peers
                .retain(|_, (_, last)| (now - *last).as_nanos() < u128::from(cap));
            if self.peers.len() >= PEER_LIMIT {
                self.peers.clear();
            }
        }
        let (tokens, last) = self.peers.entry(dst).or_insert((cap, now));
        let refill = u64::try_from((now - *last).as_nanos()).unwrap_or(u64::MAX);
        *tokens = tokens.saturating_add(refill).min(cap);
        *last = now;
        if *tokens >= interval {
            *tokens -= interval;
            true
        } else {
            false
        }
    }
}

/// The invoking datagram as an ICMP error quotes it: the IP header and as much payload
/// as fits in a 576-byte error datagram (20 bytes of our IP header, 8 of ICMP header).
fn quote(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let room = ICMP_ERROR_MAX - ipv4::HEADER_LEN - 8;
    let take = payload.len().min(room.saturating_sub(header.len()));
    let mut q = Vec::with_capacity(header.len() + take);
    q.extend_from_slice(header);
    q.extend_from_slice(&payload[..take]);
    q
}

fn icmp_type(repr: &icmpv4::Repr) -> u8 {
    match repr {
        icmpv4::Repr::EchoReply { .. } => 0,
        icmpv4::Repr::DstUnreachable { .. } => 3,
        icmpv4::Repr::EchoRequest { .. } => 8,
        icmpv4::Repr::TimeExceeded { .. } => 11,
    }
}

/// The error a Destination Unreachable code stands for, and whether it is hard (Linux
/// `icmp_err_convert`, net/ipv4/icmp.c: `{errno, fatal}` per code). `None` for
/// fragmentation needed (path MTU, handled apart) and for the codes whose errno ustack's
/// [`Error`] has no variant for (protocol unreachable ENOPROTOOPT, source route failed
/// EOPNOTSUPP, host unknown EHOSTDOWN, host isolated ENONET): those are dropped.
fn unreach_error(reason: DstUnreachable) -> Option<(Error, bool)> {
    use DstUnreachable as D;
    Some(match reason {
        D::NetUnreachable | D::NetUnreachToS => (Error::NetUnreachable, false),
        D::HostUnreachable | D::HostUnreachToS => (Error::HostUnreachable, false),
        D::PortUnreachable => (Error::ConnectionRefused, true),
        D::DstNetUnknown | D::NetProhibited => (Error::NetUnreachable, true),
        D::HostProhibited | D::CommProhibited | D::HostPrecedViol | D::PrecedCutoff => {
            (Error::HostUnreachable, true)
        }
        _ => return None,
    })
}
