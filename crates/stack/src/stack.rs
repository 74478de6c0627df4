//! The interface: Ethernet input and output, ARP (`net/ethernet/eth.c`, `net/ipv4/arp.c`),
//! the transmit queue, and the timers of the layers below the sockets.

use core::net::{IpAddr, Ipv4Addr};
use core::time::Duration;
use std::collections::VecDeque;

use ustack_obs::{DropReason, Instant, Mib};
use ustack_wire::{EthernetAddress, arp, ethernet};

use crate::icmp::IcmpState;
use crate::ip::IdentGen;
use crate::ip::reassembly::{ReasmConfig, Reassembler};
use crate::neigh::{NeighEvent, NeighTable, Resolution};
use crate::secret::Secrets;
use crate::udp::UdpTable;
use crate::{Config, Ipv4Cidr, Medium, Sysctl};

/// Recycled frame buffers a stack keeps (see [`Stack::recycle`]).
pub const FRAME_POOL: usize = 256;

/// Of those, buffers larger than twice the largest frame of the MTU (a TSO super-segment's
/// 64 KiB, [`Stack::set_gso_max_size`]) kept beside them (see [`Stack::recycle`]): one
/// burst of super-segments would otherwise leave up to [`FRAME_POOL`] of them, 16 MiB,
/// held for good by a stack that goes back to small frames.
pub const FRAME_POOL_LARGE: usize = 32;

/// One interface's protocol stack. See the crate docs for the call order.
#[derive(Debug)]
pub struct Stack {
    pub(crate) medium: Medium,
    pub(crate) mac: EthernetAddress,
    pub(crate) ipv4: Ipv4Cidr,
    /// Our IPv4 address is its subnet's directed broadcast address (a configuration no
    /// unicast segment can reach: early demux leaves every datagram to it to the general
    /// path), decided once instead of per datagram.
    pub(crate) ipv4_addr_is_broadcast: bool,
    pub(crate) gateway: Option<Ipv4Addr>,
    pub(crate) mtu: usize,
    /// [`Config::checksum_offload`].
    pub(crate) checksum_offload: bool,
    /// The frame being received came with its transport checksum vouched for by the
    /// link ([`Stack::receive_with`]); set for one call of `receive_with` only.
    pub(crate) rx_csum_ok: bool,
    pub(crate) sysctl: Sysctl,
    pub(crate) mib: Mib,
    pub(crate) neigh: NeighTable,
    pub(crate) reasm: Reassembler,
    pub(crate) ident: IdentGen,
    /// IPv6: addresses, reassembly, path MTUs, echo replies (`ip::ipv6`).
    pub(crate) ip6: crate::ip::ipv6::Ip6State,
    pub(crate) icmp: IcmpState,
    pub(crate) udp: UdpTable,
    pub(crate) tcp: crate::tcp::Tcp,
    /// Sockets whose readiness may have grown, for the poller (see `socket`).
    pub(crate) ready: crate::socket::ReadyList,
    /// The transmit queue's front frame (`None` when the queue is empty), L2 header
    /// filled in: kept beside the ring so that a frame queued alone (a
    /// request-response's every frame) is queued and handed to the device
    /// ([`Stack::poll_transmit_lone`]) with a move each.
    tx_head: Option<Vec<u8>>,
    /// The frames behind `tx_head`, in order.
    tx: VecDeque<Vec<u8>>,
    /// Frames queued: `tx_head`'s and `tx`'s (one load for the checks a driver makes
    /// several times a round).
    tx_len: usize,
    /// Which of them are a data segment's headers, its payload left in the send buffer
    /// (`tcp::tx_lend`).
    pub(crate) tx_splits: crate::tcp::tx_lend::TxSplits,
    /// TCP leaves long segments' payloads in the send buffer ([`Stack::set_tx_lend`]).
    pub(crate) tx_lend: bool,
    /// How many times the driver drained `tx` to empty ([`Stack::poll_transmit`] gave
    /// `None`): the end of a round of its loop, for `tcp_tx_wake`.
    pub(crate) tx_drains: u64,
    /// Frames the driver gave back ([`Stack::recycle`]), reused by TCP output so that a
    /// segment costs neither an allocation nor zeroing its payload: those of at most
    /// `frame_large` bytes of capacity, up to [`FRAME_POOL`].
    frames: Vec<Vec<u8>>,
    /// The larger ones (super-segments), up to [`FRAME_POOL_LARGE`], for frames longer
    /// than the MTU's.
    frames_large: Vec<Vec<u8>>,
    /// Twice the largest frame of the MTU, link header included: no buffer made or grown
    /// for a frame of the MTU has more capacity (a `Vec` at most doubles what it had,
    /// which was less than the frame), so a buffer with more held a super-segment.
    frame_large: usize,
    /// Scratch for timer events, kept to avoid allocating on every timeout.
    neigh_events: Vec<NeighEvent>,
    /// The next deadline, kept as timers are armed rather than folded from every queue
    /// on each [`Stack::poll_timeout`] (see [`Wake`]).
    pub(crate) wake: Wake,
    /// [`Stack::handle_timeout`] calls at which the kept deadline had come but no queue
    /// had anything due (see [`Stack::spurious_timer_wakeups`]).
    timer_spurious: u64,
    /// The generation of what TCP's header templates hold (`tcp::xmit4`): bumped whenever
    /// any of it may change (a sysctl, `ip_default_ttl` among them), so that every
    /// connection's template is rebuilt before its next segment. Starts at 1 (0 marks
    /// "no template").
    pub(crate) tx_gen: u32,
    /// Whether connections write their IPv4 segments from header templates (the default);
    /// off, every segment takes the general path (for tests comparing the two).
    pub(crate) tcp_template_on: bool,
    /// The largest IP packet the device segments itself ([`Stack::set_gso_max_size`]);
    /// 0: none, every TCP segment fits the MTU.
    pub(crate) gso_max_size: usize,
}

impl Stack {
    /// A stack for one interface.
    pub fn new(config: Config) -> Stack {
        let Config {
            medium,
            mac,
            ipv4,
            gateway,
            ipv6,
            gateway6,
            mtu,
            sysctl,
            seed,
            checksum_offload,
        } = config;
        let secrets = Secrets::new(seed);
        let reasm = Reassembler::new(
            reasm_config(&sysctl),
            secrets.hasher(b"ip reasm queues"),
            secrets.hasher(b"ip reasm peers"),
        );
        let ip6 = crate::ip::ipv6::Ip6State::new(medium, mac, ipv6, gateway6, &sysctl, &secrets);
        let mut stack = Stack {
            ip6,
            medium,
            mac,
            ipv4,
            ipv4_addr_is_broadcast: ipv4.broadcast() == Some(ipv4.addr),
            gateway,
            mtu,
            checksum_offload,
            rx_csum_ok: false,
            mib: Mib::new(),
            neigh: NeighTable::new(secrets.hasher(b"neigh")),
            reasm,
            ident: IdentGen::new(secrets.hasher(b"ip ident")),
            icmp: IcmpState::new(secrets.hasher(b"icmp peers")),
            udp: UdpTable::new(secrets.u64(b"udp"), &sysctl),
            tcp: crate::tcp::Tcp::new(&secrets, &sysctl),
            sysctl,
            ready: Default::default(),
            tx_head: None,
            tx: VecDeque::new(),
            tx_len: 0,
            tx_splits: Default::default(),
            tx_lend: false,
            tx_drains: 0,
            neigh_events: Vec::new(),
            frames: Vec::new(),
            frames_large: Vec::new(),
            frame_large: 2 * (mtu + medium.header_len()),
            tx_gen: 1,
            tcp_template_on: true,
            gso_max_size: 0,
            wake: Wake::NONE,
            timer_spurious: 0,
        };
        // Duplicate address detection and router solicitation may be due at once.
        stack.wake = Wake::from(stack.deadline_full());
        stack
    }

    /// The device takes TCP/IPv4 super-segments up to `size` bytes and cuts them into
    /// MTU-sized segments itself (`ustack_dev::DeviceCaps::gso_max_size`; a TUN with
    /// offloads). TCP then sends a run of full segments the windows allow as one frame
    /// (TSO inside TCP, Linux `tcp_tso_autosize`): its headers are the first segment's,
    /// its payload the run's, and every segment it carries fills the MTU, so the device
    /// knows the segment size from the headers. The retransmission queue keeps one record
    /// per segment (Linux `tcp_skb_pcount`), and retransmissions are single segments. 0
    /// (the default) or anything not above the MTU: off.
    pub fn set_gso_max_size(&mut self, size: usize) {
        self.gso_max_size = size.min(65_535);
    }

    /// Whether established connections write their IPv4 segments from per-connection
    /// header templates (on by default) or through the general path that builds every
    /// header from scratch. Both give the same bytes: tests compare them.
    #[doc(hidden)]
    pub fn set_tcp_header_template(&mut self, on: bool) {
        self.tcp_template_on = on;
    }

    /// What TCP's header templates hold may have changed: each connection rebuilds its own
    /// before its next segment.
    pub(crate) fn invalidate_tx_templates(&mut self) {
        self.tx_gen = self.tx_gen.wrapping_add(1).max(1);
    }

    /// The counters.
    pub fn mib(&self) -> &Mib {
        &self.mib
    }

    /// The tunables in force.
    pub fn sysctl(&self) -> &Sysctl {
        &self.sysctl
    }

    /// Set a tunable by its Linux name, validated.
    pub fn set_sysctl(&mut self, name: &str, value: u64) -> Result<(), crate::SysctlError> {
        self.sysctl.set(name, value)?;
        // ip_default_ttl is in every connection's header template.
        self.invalidate_tx_templates();
        self.reasm.set_config(reasm_config(&self.sysctl));
        self.ip6.set_sysctl(&self.sysctl);
        crate::tcp::Tcp::apply_tcp_mem(&mut self.tcp.pool, &self.sysctl);
        // A sysctl may start router solicitation: the deadline is folded again (rare).
        self.wake = Wake::from(self.deadline_full());
        Ok(())
    }

    /// Our IPv4 address and prefix.
    pub fn ipv4(&self) -> Ipv4Cidr {
        self.ipv4
    }

    /// Our MAC address.
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    /// The neighbour table (read-only view for tools and tests).
    pub fn neighbours(&self) -> &NeighTable {
        &self.neigh
    }

    /// Bytes held by IPv4 reassembly.
    pub fn reassembly_mem(&self) -> usize {
        self.reasm.mem()
    }

    /// Bytes of L2 header this medium puts in front of an IP packet.
    pub(crate) fn l2_len(&self) -> usize {
        match self.medium {
            Medium::Ethernet => ethernet::HEADER_LEN,
            Medium::Ip => 0,
        }
    }

    // ---- input ------------------------------------------------------------------------

    /// One frame from the device: an Ethernet frame or a bare IP packet, per the medium.
    pub fn receive(&mut self, now: Instant, frame: &[u8]) {
        self.receive_with(now, frame, false)
    }

    /// [`receive`](Self::receive), saying whether the link vouched for the frame's TCP or
    /// UDP checksum (`csum_ok`: the device's `rx_csum_unnecessary`, e.g. a TUN queue's
    /// virtio-net header with `DATA_VALID` or `NEEDS_CSUM`): if so it is not verified, as
    /// Linux's `skb_csum_unnecessary` skips `__skb_checksum_complete` for a
    /// `CHECKSUM_UNNECESSARY` or `CHECKSUM_PARTIAL` skb. IP header checksums are still
    /// checked. A datagram reassembled from fragments is always verified.
    pub fn receive_with(&mut self, now: Instant, frame: &[u8], csum_ok: bool) {
        self.rx_csum_ok = csum_ok;
        self.receive_frame(now, frame);
        self.rx_csum_ok = false;
        self.debug_check_wake();
    }

    /// TCP and UDP checksums need no verifying: both ends skip them
    /// ([`Config::checksum_offload`]) or the link vouched for this frame's
    /// ([`Stack::receive_with`]).
    #[inline]
    pub(crate) fn l4_csum_trusted(&self) -> bool {
        self.checksum_offload || self.rx_csum_ok
    }

    /// `--profile`'s switch read once a frame: off (the common case), the receive path's
    /// stage guards (L2/L3, demux, TCP input, socket queue) are compiled out of its copy;
    /// on, each times its stage as before.
    #[inline]
    fn receive_frame(&mut self, now: Instant, frame: &[u8]) {
        if ustack_obs::profile::enabled() {
            self.receive_frame_profiled(now, frame);
        } else {
            self.receive_frame_in::<false>(now, frame);
        }
    }

    /// [`receive_frame`](Self::receive_frame) with `--profile` on: its own copy, out of
    /// line, so that the common copy's code is as it was without the guards.
    #[cold]
    #[inline(never)]
    fn receive_frame_profiled(&mut self, now: Instant, frame: &[u8]) {
        let _stage = ustack_obs::profile::enter(ustack_obs::profile::Stage::L2L3);
        self.receive_frame_in::<true>(now, frame);
    }

    /// [`receive_frame`](Self::receive_frame) with `--profile` on (`PROF`) or off.
    #[inline(always)]
    fn receive_frame_in<const PROF: bool>(&mut self, now: Instant, frame: &[u8]) {
        match self.medium {
            // A TUN device's packets say their family in the version nibble.
            Medium::Ip if frame.first().is_some_and(|b| b >> 4 == 6) => {
                if self.ip6.enabled() {
                    self.ipv6_input::<PROF>(now, frame, false)
                } else {
                    self.mib.drop(DropReason::UnhandledProto)
                }
            }
            Medium::Ip => self.ipv4_input::<PROF>(now, frame, false),
            Medium::Ethernet => self.eth_input::<PROF>(now, frame),
        }
    }

    /// Ethernet II input (Linux `eth_type_trans` then the protocol handlers).
    fn eth_input<const PROF: bool>(&mut self, now: Instant, frame: &[u8]) {
        let Ok(eth) = ethernet::Frame::new_checked(frame) else {
            self.mib.drop(DropReason::MacHdr);
            return;
        };
        let dst = eth.dst_addr();
        // We listen to our address, to broadcast, and to the IPv6 groups we are in
        // (all-nodes, our solicited-node groups: RFC 4861 §7.2.1, RFC 4291 §2.8).
        if dst != self.mac && !dst.is_broadcast() && !self.ip6.listens_mac(dst) {
            self.mib.drop(DropReason::Otherhost);
            return;
        }
        match eth.ethertype() {
            ethernet::EtherType::Arp => self.arp_input(now, eth.payload()),
            ethernet::EtherType::Ipv4 => {
                self.ipv4_input::<PROF>(now, eth.payload(), dst.is_broadcast())
            }
            ethernet::EtherType::Ipv6 if self.ip6.enabled() => {
                self.ipv6_input::<PROF>(now, eth.payload(), dst.is_multicast())
            }
            _ => self.mib.drop(DropReason::UnhandledProto),
        }
    }

    /// ARP input, [RFC 826 "Packet Reception"](https://www.rfc-editor.org/rfc/rfc826):
    /// "If the pair <protocol type, sender protocol address> is already in my translation
    /// table, update the sender hardware address field ... (Merge_flag). ?Am I the target
    /// protocol address? If Merge_flag is false, add the triplet ... ?Is the opcode
    /// ares_op$REQUEST? Swap hardware and protocol fields ... send the packet".
    fn arp_input(&mut self, now: Instant, payload: &[u8]) {
        let Ok(repr) = arp::Packet::new_checked(payload).and_then(|p| arp::Repr::parse(&p)) else {
            self.mib.drop(DropReason::ArpMalformed);
            return;
        };
        let sha = repr.source_hardware_addr;
        let spa = repr.source_protocol_addr;
        // A sender claiming a group MAC, or one of our own, is bogus (Linux arp_process).
        if sha.is_multicast() || spa.is_broadcast() || spa.is_multicast() || spa == self.ipv4.addr {
            self.mib.drop(DropReason::ArpMalformed);
            return;
        }
        let for_us = repr.target_protocol_addr == self.ipv4.addr;
        // Probes (sender 0.0.0.0, RFC 5227) must not enter the table but are answered.
        if !spa.is_unspecified() {
            for frame in self.neigh.confirm(now, spa, sha, for_us) {
                self.eth_send(frame, sha);
            }
            // A new entry starts the table's garbage collection.
            self.wake.lower_opt(self.neigh.poll_at());
        }
        if for_us && repr.operation == arp::Operation::Request {
            let reply = arp::Repr {
                operation: arp::Operation::Reply,
                source_hardware_addr: self.mac,
                source_protocol_addr: self.ipv4.addr,
                target_hardware_addr: sha,
                target_protocol_addr: spa,
            };
            self.arp_send(&reply, sha);
        }
    }

    // ---- output -----------------------------------------------------------------------

    /// Send an ARP packet to `dst_mac`.
    fn arp_send(&mut self, repr: &arp::Repr, dst_mac: EthernetAddress) {
        let mut frame = vec![0u8; ethernet::HEADER_LEN + repr.buffer_len()];
        repr.emit(&mut arp::Packet::new_unchecked(
            &mut frame[ethernet::HEADER_LEN..],
        ));
        self.eth_fill(&mut frame, dst_mac, ethernet::EtherType::Arp);
        self.tx_push(frame, DropReason::DevQueueFull);
    }

    /// Ask who has `ip`: broadcast, or unicast to `known` to re-confirm a stale entry.
    fn arp_request(&mut self, ip: Ipv4Addr, known: Option<EthernetAddress>) {
        let req = arp::Repr {
            operation: arp::Operation::Request,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.ipv4.addr,
            target_hardware_addr: EthernetAddress::default(),
            target_protocol_addr: ip,
        };
        self.arp_send(&req, known.unwrap_or(EthernetAddress::BROADCAST));
    }

    pub(crate) fn eth_fill(
        &self,
        frame: &mut [u8],
        dst: EthernetAddress,
        ethertype: ethernet::EtherType,
    ) {
        let repr = ethernet::Repr {
            src_addr: self.mac,
            dst_addr: dst,
            ethertype,
        };
        repr.emit(&mut ethernet::Frame::new_unchecked(frame));
    }

    /// Fill in the Ethernet header of an IP frame built with L2 headroom, and queue it.
    fn eth_send(&mut self, frame: Vec<u8>, dst: EthernetAddress) {
        self.eth_fill_and_push(frame, dst, DropReason::DevQueueFull);
    }

    /// Hand an IPv4 frame (built with `l2_len()` bytes of headroom) to the link: resolve
    /// the next hop's address on Ethernet, straight to the queue on an IP link. Returns
    /// false when the frame was dropped (and counted with `full_reason` if the queue
    /// was full).
    pub(crate) fn dev_queue_xmit(
        &mut self,
        next_hop: Ipv4Addr,
        frame: Vec<u8>,
        full_reason: DropReason,
        now: Instant,
    ) -> bool {
        self.dev_queue_xmit_inline(next_hop, frame, full_reason, now)
    }

    /// [`Stack::dev_queue_xmit`] in its caller (a connection's segment from its header
    /// template, `tcp_transmit4`): the common cases, an IP link or a reachable
    /// neighbour, inline, then the queue's push; resolving the neighbour out of line.
    #[inline(always)]
    pub(crate) fn dev_queue_xmit_inline(
        &mut self,
        next_hop: Ipv4Addr,
        frame: Vec<u8>,
        full_reason: DropReason,
        now: Instant,
    ) -> bool {
        if self.medium == Medium::Ip {
            return self.tx_push(frame, full_reason);
        }
        // A reachable neighbour (the common case): its address from the table's last
        // answer, the Ethernet header written in place.
        if let Some(mac) = self.neigh.hot(now, IpAddr::V4(next_hop), &self.sysctl) {
            let mut frame = frame;
            self.eth_header_ipv4(&mut frame, mac);
            return self.tx_push(frame, full_reason);
        }
        self.dev_queue_xmit_resolve(next_hop, frame, full_reason, now)
    }

    /// [`Stack::dev_queue_xmit`] without a reachable neighbour: broadcast, or resolve.
    #[inline(never)]
    fn dev_queue_xmit_resolve(
        &mut self,
        next_hop: Ipv4Addr,
        frame: Vec<u8>,
        full_reason: DropReason,
        now: Instant,
    ) -> bool {
        if next_hop.is_broadcast() || Some(next_hop) == self.ipv4.broadcast() {
            self.eth_fill_and_push(frame, EthernetAddress::BROADCAST, full_reason);
            return true;
        }
        let mut packet = Some(frame);
        let resolution =
            self.neigh
                .resolve(now, next_hop, &mut packet, &self.sysctl, &mut self.mib);
        // A new entry arms its request's retransmission and the garbage collection.
        self.wake.lower_opt(self.neigh.poll_at());
        match resolution {
            Resolution::Send { mac, probe } => {
                if probe {
                    self.arp_request(next_hop, Some(mac));
                }
                let frame = packet.expect("resolve hands the packet back on Send");
                self.eth_fill_and_push(frame, mac, full_reason)
            }
            Resolution::Queued { request } => {
                if request {
                    self.arp_request(next_hop, None);
                }
                true
            }
            Resolution::Refused => false,
        }
    }

    /// Write the Ethernet header of an IPv4 frame to `dst` (Linux `eth_header`).
    #[inline]
    pub(crate) fn eth_header_ipv4(&self, frame: &mut [u8], dst: EthernetAddress) {
        frame[0..6].copy_from_slice(&dst.0);
        frame[6..12].copy_from_slice(&self.mac.0);
        frame[12..14].copy_from_slice(&u16::from(ethernet::EtherType::Ipv4).to_be_bytes());
    }

    /// Fill in the Ethernet header of an IP frame (the EtherType from the IP version) and
    /// queue it.
    pub(crate) fn eth_fill_and_push(
        &mut self,
        mut frame: Vec<u8>,
        mac: EthernetAddress,
        full_reason: DropReason,
    ) -> bool {
        let ethertype = match frame.get(ethernet::HEADER_LEN).map(|b| b >> 4) {
            Some(6) => ethernet::EtherType::Ipv6,
            _ => ethernet::EtherType::Ipv4,
        };
        self.eth_fill(&mut frame, mac, ethertype);
        self.tx_push(frame, full_reason)
    }

    /// The transmit queue, bounded by `txqueuelen` like a device queue. A frame queued
    /// into an empty queue becomes its head (`txqueuelen` is at least 1).
    #[inline(always)]
    pub(crate) fn tx_push(&mut self, frame: Vec<u8>, full_reason: DropReason) -> bool {
        // (`tx_head` is `None` exactly when the queue is empty: tested on it, the
        // assignment has no old frame to drop.)
        if self.tx_head.is_none() {
            self.tx_head = Some(frame);
            self.tx_len = 1;
            return true;
        }
        self.tx_push_back(frame, full_reason)
    }

    /// [`tx_push`](Self::tx_push) behind other frames.
    #[inline(never)]
    fn tx_push_back(&mut self, frame: Vec<u8>, full_reason: DropReason) -> bool {
        if self.tx_len as u64 >= self.sysctl.txqueuelen {
            self.tx_full_drop(full_reason);
            return false;
        }
        self.tx.push_back(frame);
        self.tx_len += 1;
        true
    }

    /// A frame dropped at a full transmit queue: counted (the frame's memory goes).
    #[cold]
    #[inline(never)]
    fn tx_full_drop(&mut self, full_reason: DropReason) {
        self.mib.drop(full_reason);
    }

    /// The next frame for the device, if any. Once the queue has drained to half of
    /// `txqueuelen`, connections that found it full send what they held back first
    /// (`tcp_tx_wake`), so a burst larger than the queue leaves in order, without a drop.
    ///
    /// A data segment whose payload was left in the send buffer ([`Stack::set_tx_lend`])
    /// comes whole: the payload is copied after its headers here (one whose bytes were
    /// acknowledged meanwhile is dropped, `TCP_TX_STALE`, and the next frame given).
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        if !self.tx_splits.is_empty() {
            return self.tx_whole(now);
        }
        self.tx_pop(now)
    }

    /// [`poll_transmit`](Self::poll_transmit) for a driver whose device lends its transmit
    /// memory ([`Stack::set_tx_lend`]): a data segment whose payload was left in the send
    /// buffer comes as its headers and the payload's place ([`TxFrame::Split`]), for the
    /// driver to write both into the device ([`Stack::write_tx_payload`]).
    ///
    /// [`TxFrame::Split`]: crate::TxFrame::Split
    #[inline]
    pub fn poll_transmit_lent(&mut self, now: Instant) -> Option<crate::TxFrame> {
        let frame = self.tx_pop(now)?;
        Some(self.tx_split_of(frame))
    }

    /// The one frame queued, whole, for a driver that hands it to the device at once,
    /// as soon as the call that made it returns (Linux `__dev_xmit_skb`: a packet meeting
    /// an empty qdisc that may be bypassed, `TCQ_F_CAN_BYPASS`, goes straight to
    /// `sch_direct_xmit` and the driver, in the sender's context). `None` unless it is
    /// the only frame queued, not a segment whose payload stays in the send buffer
    /// ([`TxFrame::Split`](crate::TxFrame::Split)), and no connection waits for room in
    /// the queue (those frames go through [`poll_transmit`](Self::poll_transmit), which
    /// lets the waiting connections queue more). A frame the device has no room for now
    /// is left queued: the caller checks first.
    #[inline(always)]
    pub fn poll_transmit_lone(&mut self) -> Option<Vec<u8>> {
        if self.tx_len != 1 || !self.tx_splits.is_empty() || !self.tcp.tx_waiters.is_empty() {
            return None;
        }
        self.tx_len = 0;
        self.tx_head.take()
    }

    /// The front of the transmit queue, after letting waiting connections queue more
    /// once it has drained to half (see [`poll_transmit`](Self::poll_transmit)).
    #[inline(always)]
    fn tx_pop(&mut self, now: Instant) -> Option<Vec<u8>> {
        if !self.tcp.tx_waiters.is_empty()
            && (self.tx_queue_len() as u64) <= self.tx_tcp_limit() / 2
        {
            self.tcp_tx_wake(now);
            self.debug_check_wake();
        }
        if self.tx_len == 0 {
            self.tx_drains = self.tx_drains.wrapping_add(1);
            return None;
        }
        self.tx_len -= 1;
        let frame = self.tx_head.take();
        if self.tx_len > 0 {
            self.tx_head = self.tx.pop_front();
        }
        frame
    }

    /// [`poll_transmit`](Self::poll_transmit) while split segments are queued: the next
    /// frame, made whole (one whose payload is gone is skipped).
    #[cold]
    #[inline(never)]
    fn tx_whole(&mut self, now: Instant) -> Option<Vec<u8>> {
        loop {
            let frame = self.tx_pop(now)?;
            match self.tx_split_of(frame) {
                crate::TxFrame::Whole(frame) => return Some(frame),
                crate::TxFrame::Split { head, payload } => {
                    if let Some(frame) = self.tx_join(head, payload) {
                        return Some(frame);
                    }
                }
            }
        }
    }

    /// The frames TCP connections may fill the transmit queue with: `txqueuelen` less a
    /// reserve of `netdev_budget` (at most half the queue) for the replies that have no
    /// connection to hold them back (a listener's SYN-ACK, a RST, a TIME-WAIT ACK, ARP),
    /// one per received frame at most, which [`tx_room`](Self::tx_room) bounds.
    #[inline]
    fn tx_tcp_limit(&self) -> u64 {
        let q = self.sysctl.txqueuelen;
        q - self.sysctl.netdev_budget.min(q / 2)
    }

    /// Whether TCP may queue no more frames (see `tx_tcp_limit`): connections wait.
    #[inline]
    pub(crate) fn tx_queue_full(&self) -> bool {
        // The limit is at least 1 (`txqueuelen` is): an empty queue, the common case at a
        // write, is never full, found without the limit's arithmetic.
        self.tx_len != 0 && self.tx_queue_len() as u64 >= self.tx_tcp_limit()
    }

    /// Frames the transmit queue has room for before `txqueuelen`. A driver receives no
    /// more frames than this in a round (each may need a reply that cannot wait), so
    /// replies are not dropped while the device is backed up: the frames wait in the
    /// device's ring instead, and the peer waits for slots.
    #[inline]
    pub fn tx_room(&self) -> usize {
        usize::try_from(
            self.sysctl
                .txqueuelen
                .saturating_sub(self.tx_queue_len() as u64),
        )
        .unwrap_or(usize::MAX)
    }

    /// Give a transmitted frame's buffer back for reuse (optional: a driver that drops
    /// frames instead only costs allocations). At most [`FRAME_POOL`] are kept, of which
    /// at most [`FRAME_POOL_LARGE`] are larger than twice the MTU's largest frame (TSO
    /// super-segments): the rest is freed, so that what the pool holds stays bounded by
    /// the MTU after a burst of super-segments ([`frame_pool_bytes`](Self::frame_pool_bytes)).
    #[inline]
    pub fn recycle(&mut self, frame: Vec<u8>) {
        if frame.capacity() > self.frame_large {
            return self.recycle_large(frame);
        }
        if self.frames.len() < FRAME_POOL {
            self.frames.push(frame);
        }
    }

    /// [`recycle`](Self::recycle) of a super-segment's buffer.
    #[cold]
    #[inline(never)]
    fn recycle_large(&mut self, frame: Vec<u8>) {
        if self.frames_large.len() < FRAME_POOL_LARGE {
            self.frames_large.push(frame);
        }
    }

    /// The bytes of memory the recycled frame buffers hold (their capacities): at most
    /// [`FRAME_POOL`] buffers of twice the MTU's largest frame and [`FRAME_POOL_LARGE`]
    /// super-segments.
    pub fn frame_pool_bytes(&self) -> usize {
        self.frames
            .iter()
            .chain(&self.frames_large)
            .map(Vec::capacity)
            .sum()
    }

    /// A frame buffer of `len` bytes whose first `zeroed` bytes are zero (the headers'
    /// room): a recycled buffer when there is one, its old bytes past `zeroed` left for
    /// the caller to overwrite entirely, else a fresh zeroed one.
    pub(crate) fn frame_for(&mut self, len: usize, zeroed: usize) -> Vec<u8> {
        if zeroed == 0 {
            return self.frame_overwritten(len);
        }
        match self.frames.pop() {
            Some(mut f) if f.len() >= len => {
                f.truncate(len);
                f[..zeroed].fill(0);
                f
            }
            short => self.frame_short(short, len, zeroed),
        }
    }

    /// A frame buffer of `len` bytes that the caller overwrites entirely (a recycled
    /// buffer's old bytes are left in it).
    #[inline]
    pub(crate) fn frame_overwritten(&mut self, len: usize) -> Vec<u8> {
        match self.frames.pop() {
            Some(mut f) if f.len() >= len => {
                f.truncate(len);
                f
            }
            short => self.frame_short(short, len, 0),
        }
    }

    /// [`frame_for`](Self::frame_for) (`zeroed` 0: [`frame_overwritten`](Self::frame_overwritten))
    /// when the pool's top buffer (`short`, if any) is shorter than `len`: for a frame
    /// longer than the MTU's (a super-segment), a kept large buffer if there is one
    /// (`short` goes back to the pool), else `short` grown, else a new one. Out of the
    /// common path: an MTU-sized frame finds a long enough buffer on top of the pool.
    #[cold]
    #[inline(never)]
    fn frame_short(&mut self, short: Option<Vec<u8>>, len: usize, zeroed: usize) -> Vec<u8> {
        if 2 * len > self.frame_large
            && let Some(mut big) = self.frames_large.pop()
        {
            if let Some(f) = short {
                self.frames.push(f);
            }
            if big.len() >= len {
                big.truncate(len);
                big[..zeroed].fill(0);
                return big;
            }
            big.clear();
            big.resize(len, 0);
            return big;
        }
        match short {
            Some(mut f) => {
                f.clear();
                f.resize(len, 0);
                f
            }
            None => vec![0; len],
        }
    }

    /// Frames waiting in the transmit queue.
    #[inline]
    pub fn tx_queue_len(&self) -> usize {
        self.tx_len
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) may have a frame to give: frames
    /// are queued, or connections wait for room in the queue. A driver with nothing to
    /// send skips its transmit path on this one test.
    #[inline]
    pub fn tx_pending(&self) -> bool {
        self.tx_len != 0 || !self.tcp.tx_waiters.is_empty()
    }

    /// Whether connections wait for room in the transmit queue (their output held back
    /// while it was full): [`poll_transmit`](Self::poll_transmit) may then let them queue
    /// more as it takes a frame. Without them, the frames queued are all there is.
    #[inline]
    pub fn tx_waiting(&self) -> bool {
        !self.tcp.tx_waiters.is_empty()
    }

    // ---- timers -----------------------------------------------------------------------

    /// When [`Stack::handle_timeout`] next has work, if ever: never later than the
    /// earliest armed timer, possibly earlier (see [`Stack::spurious_timer_wakeups`]).
    ///
    /// O(1): the stack keeps its next deadline as timers are armed, as Linux keeps its
    /// timers armed rather than scanning for them (every queue a timer is filed in lowers
    /// it; a timer cancelled or moved later leaves it, and it is folded again from every
    /// queue when `handle_timeout` runs). Debug builds check it against that fold.
    #[inline]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.debug_check_wake();
        self.wake.get()
    }

    /// [`poll_timeout`](Self::poll_timeout), made exact when it has come by `now`: then
    /// the deadline is folded again from every queue, so that a timer cancelled or moved
    /// later (an ARP request answered, a retransmission acknowledged) costs this fold
    /// rather than a [`handle_timeout`](Self::handle_timeout) with nothing to do (counted
    /// in [`spurious_timer_wakeups`](Self::spurious_timer_wakeups)). A loop asks this
    /// before deciding that timers are due; one load and a comparison otherwise.
    #[inline]
    pub fn poll_timeout_at(&mut self, now: Instant) -> Option<Instant> {
        if self.wake.0 <= now {
            self.refold_wake(now);
        }
        self.poll_timeout()
    }

    /// Whether a timer is due at `now` (`poll_timeout_at(now)` has come), for a loop
    /// deciding whether to run [`handle_timeout`](Self::handle_timeout): one load and a
    /// comparison while the kept deadline is later, the fold as `poll_timeout_at` once it
    /// has come.
    #[inline]
    pub fn timers_due(&mut self, now: Instant) -> bool {
        if self.wake.0 > now {
            return false;
        }
        self.refold_wake(now);
        self.poll_timeout().is_some_and(|at| at <= now)
    }

    /// Fold the kept deadline again, counting a spurious wake-up if it had come by `now`
    /// and nothing is due.
    #[cold]
    fn refold_wake(&mut self, now: Instant) {
        let full = self.deadline_full();
        debug_assert!(
            full.is_none_or(|f| self.wake.0 <= f),
            "a timer was armed without lowering the kept next deadline"
        );
        if self.wake.0 <= now && full.is_none_or(|f| f > now) {
            self.timer_spurious += 1;
        }
        self.wake = Wake::from(full);
    }

    /// The next deadline folded from every timer queue: neighbour retransmits and garbage
    /// collection, IPv4 and IPv6 reassembly, duplicate address detection and router
    /// discovery, TCP's connection timers, SYN-ACK retransmits, idle connections and
    /// TIME-WAIT records.
    pub(crate) fn deadline_full(&self) -> Option<Instant> {
        earliest(
            earliest(
                earliest(self.neigh.poll_at(), self.reasm.poll_at()),
                self.ip6.poll_at(),
            ),
            self.tcp_poll_timeout(),
        )
    }

    /// Debug builds: the kept deadline is not later than the earliest armed timer (a later
    /// one would be a lost timer: a runtime sleeping until it would wake too late).
    #[inline]
    pub(crate) fn debug_check_wake(&self) {
        #[cfg(debug_assertions)]
        {
            let full = self.deadline_full();
            assert!(
                full.is_none_or(|f| self.wake.0 <= f),
                "the kept next deadline {:?} is later than the earliest timer {full:?}: a \
                 timer was armed without lowering it",
                self.wake.get(),
            );
        }
    }

    /// How many [`handle_timeout`](Self::handle_timeout) or
    /// [`poll_timeout_at`](Self::poll_timeout_at) calls found the kept deadline come but
    /// nothing due: the cost of keeping the deadline instead of folding it (a timer
    /// cancelled or moved later leaves it early until the next such call, which folds it
    /// again: at most one per fold). Wake-ups for TCP entries cancelled lazily (a
    /// retransmission timer moved later by an ACK) are not counted: the fold finds those
    /// entries too.
    pub fn spurious_timer_wakeups(&self) -> u64 {
        self.timer_spurious
    }

    /// Run the timers that are due at `now`: ARP retransmits and failures, neighbour
    /// garbage collection, reassembly timeouts (with ICMP Time Exceeded, as Linux's
    /// `ip_expire`), IPv6's and TCP's timers; then fold the next deadline again.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.refold_wake(now);
        let mut events = core::mem::take(&mut self.neigh_events);
        self.neigh
            .handle_timeout(now, &self.sysctl, &mut self.mib, &mut events);
        for ev in events.drain(..) {
            match ev {
                NeighEvent::Request(IpAddr::V4(ip)) => self.arp_request(ip, None),
                NeighEvent::Request(IpAddr::V6(ip)) => self.ndisc_solicit(now, ip, None),
            }
        }
        self.neigh_events = events;
        for expired in self.reasm.expire(now, &mut self.mib) {
            self.icmp_frag_expired(now, &expired);
        }
        self.ipv6_handle_timeout(now);
        self.tcp_handle_timeout(now);
        self.wake = Wake::from(self.deadline_full());
    }
}

/// The stack's next deadline, kept as timers are armed: every place that files a timer in
/// one of the stack's queues lowers it ([`Wake::lower`]); nothing raises it but
/// [`Stack::handle_timeout`] (and a sysctl change), which fold it again from every queue.
/// So it is never later than the earliest timer (a lost timer), at worst earlier (a
/// spurious wake-up, counted). `FAR_FUTURE` stands for none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake(Instant);

impl Wake {
    /// No deadline.
    pub(crate) const NONE: Wake = Wake(Instant::FAR_FUTURE);

    /// A timer was armed for `at`.
    #[inline(always)]
    pub(crate) fn lower(&mut self, at: Instant) {
        if at < self.0 {
            self.0 = at;
        }
    }

    /// A timer may have been armed for `at`.
    #[inline(always)]
    pub(crate) fn lower_opt(&mut self, at: Option<Instant>) {
        if let Some(at) = at {
            self.lower(at);
        }
    }

    #[inline(always)]
    fn get(self) -> Option<Instant> {
        (self.0 != Instant::FAR_FUTURE).then_some(self.0)
    }
}

impl From<Option<Instant>> for Wake {
    fn from(at: Option<Instant>) -> Wake {
        Wake(at.unwrap_or(Instant::FAR_FUTURE))
    }
}

/// The earlier of two deadlines, either of which may be absent. (A runtime asks for the
/// next deadline several times per packet: this is cheaper than a chain of iterators.)
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reassembly limits from the sysctls of the same names.
fn reasm_config(sysctl: &Sysctl) -> ReasmConfig {
    ReasmConfig {
        high_thresh: sysctl.ipfrag_high_thresh as usize,
        low_thresh: sysctl.ipfrag_low_thresh as usize,
        timeout: Duration::from_secs(sysctl.ipfrag_time),
        max_dist: sysctl.ipfrag_max_dist as u32,
    }
}
