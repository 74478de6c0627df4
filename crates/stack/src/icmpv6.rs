//! ICMPv6 ([RFC 4443](https://www.rfc-editor.org/rfc/rfc4443)) and Neighbor Discovery
//! ([RFC 4861](https://www.rfc-editor.org/rfc/rfc4861)) for Ethernet links, after Linux's
//! `net/ipv6/icmp.c` (`icmpv6_rcv`, `icmp6_send`, `icmpv6_echo_reply`) and
//! `net/ipv6/ndisc.c` (`ndisc_recv_ns`, `ndisc_recv_na`, `ndisc_send_ns`):
//!
//! - echo: requests answered (`net.ipv6.icmp.echo_ignore_all`,
//!   `echo_ignore_multicast`), replies queued for [`Stack::recv_echo_reply6`];
//! - errors generated: Parameter Problem (header errors, unknown next headers and
//!   options), Time Exceeded (reassembly) and Destination Unreachable (port unreachable,
//!   for UDP to a closed port), all through `icmp6_error`. Each is sent only
//!   where RFC 4443 §2.4 (e) allows (never about an ICMPv6 error, a
//!   packet from a non-unicast source, or one sent to a multicast address, Packet Too Big
//!   and Parameter Problem code 2 excepted), quoting as much of the packet as keeps the
//!   error within the minimum MTU (§2.4 (c)), and limited by the global bucket shared with
//!   ICMPv4 and a per-host bucket of `net.ipv6.icmp.ratelimit` (Linux `icmpv6_xrlim_allow`;
//!   Packet Too Big exempt, as Linux's default `ratemask` 0-1,3-127);
//! - Destination Unreachable, Time Exceeded and Parameter Problem received: the error
//!   (Linux `icmpv6_err_convert`) to the TCP connection or connected UDP socket that sent
//!   the quoted packet, through the handler ICMPv4's errors use;
//! - Packet Too Big received: the path MTU of the quoted destination lowered
//!   ([`Stack::path_mtu6`]; RFC 8201);
//! - Neighbor Solicitation and Advertisement: address resolution in the neighbour table ARP
//!   uses, solicitations answered for our addresses, duplicate address detection (RFC
//!   4862 §5.4);
//! - Router Advertisements: router discovery and address autoconfiguration when
//!   `accept_ra` is set (`ip::addrconf`); otherwise counted and ignored.

use core::net::{IpAddr, Ipv6Addr, SocketAddrV6};

use ustack_obs::{Counter, DropReason, Instant};
use ustack_wire::icmpv6::{self, Message, time_exceeded};
use ustack_wire::ipv6ext::ExtHeader;
use ustack_wire::ndisc::{self, NaFlags};
use ustack_wire::{IpProtocol, ipv6};

use crate::ip::ipv6::{ALL_NODES, AddrState, Inbound6, Outbound6};
use crate::neigh::Update;
use crate::{Error, Stack};

/// Echo replies kept for [`Stack::recv_echo_reply6`]; older ones are dropped (counted).
const ECHO_REPLY_QUEUE: usize = 1024;
/// Hop limit of every Neighbor Discovery message, checked on receipt (RFC 4861 §7.1: "The
/// IP Hop Limit field has a value of 255, i.e., the packet could not possibly have been
/// forwarded by a router").
const NDISC_HOP_LIMIT: u8 = 255;

/// An ICMPv6 echo reply received for a [`Stack::ping6`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoReply6 {
    pub src: Ipv6Addr,
    pub ident: u16,
    pub seq_no: u16,
    pub data: Vec<u8>,
    pub hop_limit: u8,
    /// When it arrived.
    pub at: Instant,
}

impl Stack {
    /// ICMPv6 input (Linux `icmpv6_rcv`).
    pub(crate) fn icmpv6_input(&mut self, now: Instant, inb: &Inbound6) {
        self.mib.inc(Counter::Icmp6InMsgs);
        let Ok(packet) = icmpv6::Packet::new_checked(inb.payload) else {
            return self.mib.drop(DropReason::Icmp6Malformed);
        };
        // RFC 4443 §2.3: the checksum covers the pseudo-header and is mandatory.
        if !packet.verify_checksum(&inb.src, &inb.dst) {
            return self.mib.drop(DropReason::Icmp6Csum);
        }
        let ty = packet.msg_type();
        self.mib.icmp6_in_type(ty.into());
        match ty {
            Message::NeighborSolicit | Message::NeighborAdvert => {
                self.ndisc_input(now, inb, &packet);
                return self.ndisc_rearmed();
            }
            // Router discovery and autoconfiguration (`ip::addrconf`).
            Message::RouterAdvert => {
                self.ndisc_router_discovery(now, inb);
                return self.ndisc_rearmed();
            }
            // A host has no use for router solicitations, and ustack none for redirects:
            // counted by type above, then ignored.
            Message::RouterSolicit | Message::Redirect => return,
            _ => {}
        }
        let repr = match icmpv6::Repr::parse(&packet, &inb.src, &inb.dst, false) {
            Ok(r) => r,
            // RFC 4443 §2.4 (a), (b): unknown informational messages are discarded; unknown
            // errors go to the upper layer, which has nothing to do with them yet.
            Err(ustack_wire::Error::Unsupported) => return,
            Err(_) => return self.mib.drop(DropReason::Icmp6Malformed),
        };
        match repr {
            icmpv6::Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                // RFC 4443 §4.2: "Every node MUST implement an ICMPv6 Echo responder".
                if self.sysctl.icmp6_echo_ignore_all != 0
                    || (inb.multicast && self.sysctl.icmp6_echo_ignore_multicast != 0)
                {
                    return;
                }
                // A reply to a multicast request comes from a unicast address of ours
                // (§4.2: "the Source Address of the reply MUST be a unicast address
                // belonging to the interface on which the Echo Request message was
                // received").
                let src = (!inb.dst.is_multicast()).then_some(inb.dst);
                let reply = icmpv6::Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                let _ = self.icmp6_send(now, src, inb.src, &reply);
            }
            icmpv6::Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => {
                if self.ip6.replies.len() >= ECHO_REPLY_QUEUE {
                    self.ip6.replies.pop_front();
                    self.mib.drop(DropReason::IcmpReplyQueueFull);
                }
                self.ip6.replies.push_back(EchoReply6 {
                    src: inb.src,
                    ident,
                    seq_no,
                    data: data.to_vec(),
                    hop_limit: inb.hop_limit,
                    at: now,
                });
            }
            icmpv6::Repr::PacketTooBig { mtu, data } => self.icmp6_pkt_too_big(now, mtu, data),
            // RFC 4443 §3.1, §3.3, §3.4 (and RFC 4443 §2.4 (a): errors go to the upper
            // layer that sent the quoted packet): Linux `icmpv6_rcv` ->
            // `icmpv6_notify` -> `tcp_v6_err` / `__udp6_lib_err`, the code converted by
            // `icmpv6_err_convert` ([`icmpv6_err_convert`]).
            icmpv6::Repr::DstUnreachable { code, data } => {
                self.icmp6_notify(icmpv6_err_convert(Message::DstUnreachable, code), data)
            }
            icmpv6::Repr::TimeExceeded { code, data } => {
                self.icmp6_notify(icmpv6_err_convert(Message::TimeExceeded, code), data)
            }
            icmpv6::Repr::ParamProblem { code, data, .. } => {
                self.icmp6_notify(icmpv6_err_convert(Message::ParamProblem, code), data)
            }
        }
    }

    /// An ICMPv6 error about a packet of ours, quoted in `quoted`, to the socket that sent
    /// it (Linux `icmpv6_notify`): TCP through the handler ICMPv4's unreachables use
    /// ([`Stack::tcp_icmp_unreachable`], Linux `tcp_v6_err`: a connection still opening
    /// fails with the error, a synchronized one keeps it as a soft error); UDP as Linux's
    /// `__udp6_lib_err` without `IPV6_RECVERR`: a hard error to a connected socket.
    fn icmp6_notify(&mut self, (err, hard): (Error, bool), quoted: &[u8]) {
        if quoted.len() < ipv6::HEADER_LEN + 8 {
            return self.mib.inc(Counter::Icmp6InErrors);
        }
        let q = ipv6::Packet::new_unchecked(quoted);
        if q.version() != 6 || self.ip6.state_of(q.src_addr()).is_none() {
            return self.mib.inc(Counter::Icmp6InErrors);
        }
        match q.next_header() {
            IpProtocol::Tcp => {
                if let Some((tuple, seq)) = self.icmp6_quoted_tcp(quoted) {
                    self.tcp_icmp_unreachable(tuple, seq, err, Counter::Icmp6InErrors);
                }
            }
            IpProtocol::Udp if hard => {
                let l4 = &quoted[ipv6::HEADER_LEN..];
                let port = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
                let remote = SocketAddrV6::new(q.dst_addr(), port(2), 0, 0);
                self.udp_icmp_error(port(0), remote.into(), err);
            }
            _ => {}
        }
    }

    /// Packet Too Big (RFC 8201 §4): lower the path MTU of the quoted packet's destination,
    /// if the quoted packet is one of ours; a TCP connection it quotes then shrinks its
    /// segments, as for ICMPv4's fragmentation-needed (Linux `tcp_v6_err` ->
    /// `tcp_v6_mtu_reduced`, through `tcp_pmtu_event` with its sequence check).
    fn icmp6_pkt_too_big(&mut self, now: Instant, mtu: u32, quoted: &[u8]) {
        if quoted.len() < ipv6::HEADER_LEN {
            return self.mib.inc(Counter::Icmp6InErrors);
        }
        let q = ipv6::Packet::new_unchecked(quoted);
        if q.version() != 6 || self.ip6.state_of(q.src_addr()).is_none() {
            return self.mib.inc(Counter::Icmp6InErrors);
        }
        // A TCP segment's report reaches the path MTU only through its connection, and
        // only if it quotes a sequence number in flight (Linux `tcp_v6_err` checks it,
        // RFC 5927 §4.1, before `tcp_v6_mtu_reduced` -> `inet6_csk_update_pmtu`;
        // `icmpv6_rcv` updates no route itself): a forged one quoting anything else must
        // not make later segments leave in fragments.
        if q.next_header() != IpProtocol::Tcp {
            self.ip6_pmtu_update(now, q.dst_addr(), mtu);
            return;
        }
        let Some((tuple, seq)) = self.icmp6_quoted_tcp(quoted) else {
            return;
        };
        if self
            .tcp
            .lookup(self.tcp.ehash.hash(&tuple), &tuple)
            .is_none()
        {
            return self.mib.inc(Counter::Icmp6InErrors);
        }
        let tcp_mtu = mtu.max(ipv6::MIN_MTU as u32);
        if self.tcp_pmtu_event(now, tuple, seq, tcp_mtu, ipv6::HEADER_LEN) {
            self.ip6_pmtu_update(now, q.dst_addr(), mtu);
        }
    }

    /// The tuple and sequence number of a TCP segment of ours an ICMPv6 error quotes
    /// (ustack sends TCP with no extension header: the TCP header follows at once); a
    /// quote of a pair no connection has counts as InErrors (Linux: no socket,
    /// `ICMP6_MIB_INERRORS`).
    fn icmp6_quoted_tcp(
        &mut self,
        quoted: &[u8],
    ) -> Option<(crate::tcp::tcb::FourTuple, ustack_wire::SeqNumber)> {
        let l4 = quoted.get(ipv6::HEADER_LEN..)?;
        let q = ipv6::Packet::new_unchecked(quoted);
        if q.version() != 6 || q.next_header() != IpProtocol::Tcp || l4.len() < 8 {
            return None;
        }
        let port = |i: usize| u16::from_be_bytes([l4[i], l4[i + 1]]);
        let local = SocketAddrV6::new(q.src_addr(), port(0), 0, 0);
        let remote = SocketAddrV6::new(q.dst_addr(), port(2), 0, 0);
        let Some(tuple) = self.tcp.intern6.find(local, remote) else {
            self.mib.inc(Counter::Icmp6InErrors);
            return None;
        };
        let seq = ustack_wire::SeqNumber(u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]));
        Some((tuple, seq))
    }

    /// Send an ICMPv6 echo request to `dst`. Replies appear in [`Stack::recv_echo_reply6`].
    pub fn ping6(
        &mut self,
        now: Instant,
        dst: Ipv6Addr,
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> Result<(), Error> {
        let req = icmpv6::Repr::EchoRequest {
            ident,
            seq_no,
            data,
        };
        self.icmp6_send(now, None, dst, &req)
    }

    /// The oldest ICMPv6 echo reply not yet taken.
    pub fn recv_echo_reply6(&mut self) -> Option<EchoReply6> {
        self.ip6.replies.pop_front()
    }

    /// Build and send one ICMPv6 message (Linux `icmpv6_push_pending_frames`).
    fn icmp6_send(
        &mut self,
        now: Instant,
        src: Option<Ipv6Addr>,
        dst: Ipv6Addr,
        repr: &icmpv6::Repr,
    ) -> Result<(), Error> {
        let out = Outbound6 {
            src,
            dst,
            next_header: IpProtocol::Icmpv6,
            payload_len: repr.buffer_len(),
            hop_limit: None,
            full_reason: DropReason::Icmp6OutFailed,
            ports: None,
        };
        self.mib.inc(Counter::Icmp6OutMsgs);
        self.mib.icmp6_out_type(msg_type(repr));
        self.ipv6_output(now, out, |buf, s, d| {
            repr.emit(&mut icmpv6::Packet::new_unchecked(buf), &s, &d, true);
        })
        .inspect_err(|_| self.mib.inc(Counter::Icmp6OutErrors))
    }

    /// Parameter Problem about `packet` (RFC 4443 §3.4), `pointer` bytes into it.
    /// `mcast_ok`: the one case answered even to a multicast destination (an unknown
    /// option whose type's high bits are 10, RFC 4443 §2.4 (e.3)).
    pub(crate) fn icmp6_param_problem(
        &mut self,
        now: Instant,
        packet: &[u8],
        code: u8,
        pointer: usize,
        mcast_ok: bool,
    ) {
        self.icmp6_error(now, packet, mcast_ok, |data| icmpv6::Repr::ParamProblem {
            code,
            pointer: pointer as u32,
            data,
        });
    }

    /// Destination Unreachable about `packet` (RFC 4443 §3.1) with `code` (port
    /// unreachable for UDP to a closed port).
    pub(crate) fn icmp6_error_dst_unreach(&mut self, now: Instant, packet: &[u8], code: u8) {
        self.icmp6_error(now, packet, false, |data| icmpv6::Repr::DstUnreachable {
            code,
            data,
        });
    }

    /// Time Exceeded, fragment reassembly (RFC 8200 §4.5), quoting the first fragment.
    pub(crate) fn icmp6_time_exceeded_reasm(&mut self, now: Instant, first: &[u8]) {
        self.icmp6_error(now, first, false, |data| icmpv6::Repr::TimeExceeded {
            code: time_exceeded::FRAG_REASSEMBLY,
            data,
        });
    }

    /// Send an error about `packet` (Linux `icmp6_send`), if RFC 4443 §2.4 (e) and the
    /// rate limits allow.
    fn icmp6_error<'q>(
        &mut self,
        now: Instant,
        packet: &'q [u8],
        mcast_ok: bool,
        make: impl FnOnce(&'q [u8]) -> icmpv6::Repr<'q>,
    ) {
        let Ok(view) = ipv6::Packet::new_checked(packet) else {
            return;
        };
        let (src, dst) = (view.src_addr(), view.dst_addr());
        // (e.3)-(e.6): not to a multicast destination (but see `mcast_ok`), not to a
        // source that does not name one node; (e.1): never about an ICMPv6 error.
        if (dst.is_multicast() && !mcast_ok)
            || src.is_unspecified()
            || src.is_multicast()
            || about_icmp6_error(packet)
        {
            return;
        }
        // RFC 4443 §2.4 (c): the error fits in the minimum MTU.
        let room = ipv6::MIN_MTU - ipv6::HEADER_LEN - icmpv6::HEADER_LEN;
        let repr = make(&packet[..packet.len().min(room)]);
        let ty = msg_type(&repr);
        // Linux `icmpv6_mask_allow`: Packet Too Big is never limited; the others are.
        if ty != u8::from(Message::PktTooBig) {
            let interval = self.sysctl.icmp6_ratelimit;
            if !self.icmp_limits(
                now,
                IpAddr::V6(src),
                interval,
                Counter::Icmp6OutRateLimitHost,
            ) {
                return;
            }
        }
        // From the address the packet was sent to, when it is one of ours (Linux: `saddr`
        // is the offending packet's `daddr` if local).
        let from = self.ip6.is_ours(dst).then_some(dst);
        let _ = self.icmp6_send(now, from, src, &repr);
    }

    // ---- Neighbor Discovery ---------------------------------------------------------------

    /// A Neighbor Solicitation or Advertisement (checksum verified), RFC 4861 §7.1-§7.2.
    fn ndisc_input(&mut self, now: Instant, inb: &Inbound6, packet: &icmpv6::Packet<&[u8]>) {
        if inb.hop_limit != NDISC_HOP_LIMIT {
            return self.mib.drop(DropReason::NdiscInvalid);
        }
        let Ok(repr) = ndisc::Repr::parse(packet) else {
            return self.mib.drop(DropReason::NdiscInvalid);
        };
        match repr {
            ndisc::Repr::Solicit {
                target,
                source_lladdr,
            } => {
                // §7.1.1: from the unspecified address, only to a solicited-node group and
                // without a source link-layer address option.
                let dad = inb.src.is_unspecified();
                if dad && (source_lladdr.is_some() || !inb.dst.is_multicast()) {
                    return self.mib.drop(DropReason::NdiscInvalid);
                }
                match self.ip6.state_of(target) {
                    // RFC 4862 §5.4.3: another node is checking the address we are
                    // checking: it is a duplicate. From a unicast source, it is address
                    // resolution of a tentative address: ignored.
                    Some(AddrState::Tentative { .. }) => {
                        if dad {
                            self.dad_failed(target);
                        }
                    }
                    Some(AddrState::Preferred | AddrState::Deprecated) => {
                        let mac = self.mac;
                        if dad {
                            // §7.2.4: to all-nodes, Solicited flag clear.
                            let na = ndisc::Repr::Advert {
                                flags: NaFlags {
                                    router: false,
                                    solicited: false,
                                    override_: true,
                                },
                                target,
                                target_lladdr: Some(mac),
                            };
                            self.ndisc_send(now, target, ALL_NODES, &na);
                            return;
                        }
                        // §7.2.3: the sender's address goes into the cache, STALE, and the
                        // advertisement goes back to it, solicited.
                        if let Some(sll) = source_lladdr {
                            let how = Update {
                                create: true,
                                reachable: false,
                                override_: true,
                            };
                            for frame in self.neigh.update(now, IpAddr::V6(inb.src), sll, how) {
                                self.eth_fill_and_push(frame, sll, DropReason::DevQueueFull);
                            }
                        }
                        let na = ndisc::Repr::Advert {
                            flags: NaFlags {
                                router: false,
                                solicited: true,
                                override_: true,
                            },
                            target,
                            target_lladdr: Some(mac),
                        };
                        self.ndisc_send(now, target, inb.src, &na);
                    }
                    // Not ours, or a duplicate: not for us (Linux ignores it too).
                    Some(AddrState::Duplicate) | None => {}
                }
            }
            ndisc::Repr::Advert {
                flags,
                target,
                target_lladdr,
            } => {
                // §7.1.2: "If the IP Destination Address is a multicast address the
                // Solicited flag is zero."
                if inb.dst.is_multicast() && flags.solicited {
                    return self.mib.drop(DropReason::NdiscInvalid);
                }
                if let Some(state) = self.ip6.state_of(target) {
                    // RFC 4862 §5.4.4: an advertisement for a tentative address of ours
                    // means it is a duplicate. For a preferred one, someone else claims
                    // it: Linux logs it and keeps the address; so does ustack.
                    if matches!(state, AddrState::Tentative { .. }) {
                        self.dad_failed(target);
                    }
                    return;
                }
                let Some(mac) = target_lladdr else { return };
                // §7.2.5: no entry, no update; an incomplete entry takes the address,
                // REACHABLE if solicited, else STALE; a known one per the Override flag.
                let how = Update {
                    create: false,
                    reachable: flags.solicited,
                    override_: flags.override_,
                };
                for frame in self.neigh.update(now, IpAddr::V6(target), mac, how) {
                    self.eth_fill_and_push(frame, mac, DropReason::DevQueueFull);
                }
            }
        }
    }

    /// Duplicate address detection found `addr` in use elsewhere (RFC 4862 §5.4.5: "the
    /// address MUST NOT be assigned to the interface").
    /// Neighbour discovery may have armed timers: a neighbour entry (garbage collection),
    /// an autoconfigured address's duplicate address detection and lifetimes, a default
    /// router's lifetime. Folded from those queues (rare messages).
    fn ndisc_rearmed(&mut self) {
        self.wake.lower_opt(self.neigh.poll_at());
        self.wake.lower_opt(self.ip6.poll_at());
    }

    fn dad_failed(&mut self, addr: Ipv6Addr) {
        if let Some(a) = self.ip6.addrs.iter_mut().find(|a| a.cidr.addr == addr) {
            a.state = AddrState::Duplicate;
        }
    }

    /// Solicit `target`'s link-layer address (RFC 4861 §7.2.2): to its solicited-node
    /// group, or to `known` by unicast to re-confirm a stale entry. No usable source
    /// address yet (duplicate address detection still running): nothing is sent, and
    /// the retransmit timer tries again.
    pub(crate) fn ndisc_solicit(
        &mut self,
        now: Instant,
        target: Ipv6Addr,
        known: Option<ustack_wire::EthernetAddress>,
    ) {
        let Some(src) = self.ip6.select_source(target) else {
            return;
        };
        let dst = if known.is_some() {
            target
        } else {
            ndisc::solicited_node(target)
        };
        let ns = ndisc::Repr::Solicit {
            target,
            source_lladdr: Some(self.mac),
        };
        self.ndisc_send(now, src, dst, &ns);
    }

    /// Send a Neighbor Discovery message, hop limit 255.
    pub(crate) fn ndisc_send(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        repr: &ndisc::Repr,
    ) {
        let ty = match repr {
            ndisc::Repr::Solicit { .. } => Message::NeighborSolicit,
            ndisc::Repr::Advert { .. } => Message::NeighborAdvert,
        };
        self.ndisc_send_msg(now, (src, dst), ty, repr.buffer_len(), |buf, s, d| {
            repr.emit(buf, &s, &d)
        });
    }

    /// Send a Neighbor Discovery message of type `ty` and `len` bytes, written by `emit`
    /// given (source, destination), with hop limit 255, counted by type.
    pub(crate) fn ndisc_send_msg(
        &mut self,
        now: Instant,
        (src, dst): (Ipv6Addr, Ipv6Addr),
        ty: Message,
        len: usize,
        emit: impl FnOnce(&mut [u8], Ipv6Addr, Ipv6Addr),
    ) {
        let out = Outbound6 {
            src: Some(src),
            dst,
            next_header: IpProtocol::Icmpv6,
            payload_len: len,
            hop_limit: Some(NDISC_HOP_LIMIT),
            full_reason: DropReason::Icmp6OutFailed,
            ports: None,
        };
        self.mib.inc(Counter::Icmp6OutMsgs);
        self.mib.icmp6_out_type(ty.into());
        if self.ipv6_output(now, out, emit).is_err() {
            self.mib.inc(Counter::Icmp6OutErrors);
        }
    }
}

/// Whether `packet` carries an ICMPv6 error (or an ICMPv6 message too short to tell), so
/// that no error may be sent about it (RFC 4443 §2.4 (e.1); Linux `is_ineligible`, which
/// walks the extension headers to the upper layer the same way).
fn about_icmp6_error(packet: &[u8]) -> bool {
    let mut nh = IpProtocol::from(packet[6]);
    let mut off = ipv6::HEADER_LEN;
    loop {
        match nh {
            IpProtocol::HopByHop | IpProtocol::Ipv6Opts | IpProtocol::Ipv6Route => {
                let Some(h) = packet
                    .get(off..)
                    .and_then(|b| ExtHeader::new_checked(b).ok())
                else {
                    return false;
                };
                nh = h.next_header();
                off += h.header_len();
            }
            IpProtocol::Ipv6Frag => {
                // A non-first fragment says nothing about the upper layer (Linux: not
                // ineligible); the first one does.
                let Some(f) = packet.get(off..off + 8) else {
                    return false;
                };
                if u16::from_be_bytes([f[2], f[3]]) & !7 != 0 {
                    return false;
                }
                nh = IpProtocol::from(f[0]);
                off += 8;
            }
            IpProtocol::Icmpv6 => {
                return packet.get(off).is_none_or(|&t| t & 0x80 == 0);
            }
            _ => return false,
        }
    }
}

/// The error an ICMPv6 error message stands for, and whether it is hard (Linux
/// `icmpv6_err_convert`, net/ipv6/icmp.c, its `tab_unreach` per Destination Unreachable
/// code): no route ENETUNREACH (soft), administratively prohibited, source address
/// failed policy and reject route EACCES (hard), beyond scope (Linux's former
/// "not a neighbour") and address unreachable EHOSTUNREACH (soft), port unreachable
/// ECONNREFUSED (hard), other codes EPROTO (hard); Time Exceeded EHOSTUNREACH (soft);
/// Parameter Problem EPROTO (hard).
pub(crate) fn icmpv6_err_convert(ty: Message, code: u8) -> (Error, bool) {
    use icmpv6::dst_unreachable as du;
    match ty {
        Message::DstUnreachable => match code {
            du::NO_ROUTE => (Error::NetUnreachable, false),
            du::ADMIN_PROHIBITED | du::FAILED_POLICY | 6 => (Error::PermissionDenied, true),
            du::BEYOND_SCOPE | du::ADDR_UNREACHABLE => (Error::HostUnreachable, false),
            du::PORT_UNREACHABLE => (Error::ConnectionRefused, true),
            _ => (Error::Protocol, true),
        },
        Message::PktTooBig => (Error::MessageTooLong, false),
        Message::TimeExceeded => (Error::HostUnreachable, false),
        Message::ParamProblem => (Error::Protocol, true),
        _ => (Error::Protocol, false),
    }
}

fn msg_type(repr: &icmpv6::Repr) -> u8 {
    let m = match repr {
        icmpv6::Repr::EchoRequest { .. } => Message::EchoRequest,
        icmpv6::Repr::EchoReply { .. } => Message::EchoReply,
        icmpv6::Repr::DstUnreachable { .. } => Message::DstUnreachable,
        icmpv6::Repr::PacketTooBig { .. } => Message::PktTooBig,
        icmpv6::Repr::TimeExceeded { .. } => Message::TimeExceeded,
        icmpv6::Repr::ParamProblem { .. } => Message::ParamProblem,
    };
    m.into()
}
