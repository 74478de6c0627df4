//! The neighbour table: IP to Ethernet address resolution for both families, ARP for IPv4
//! ([RFC 826]) and Neighbor Discovery for IPv6 ([RFC 4861] §7), in one table keyed by the
//! IP address (as Linux's `neighbour.c` serves `arp_tbl` and `nd_tbl` with one engine),
//! with the states, timers and bounded queue of Linux's `net/core/neighbour.c`, simplified:
//!
//! - `Incomplete`: a request (ARP request, or neighbour solicitation to the solicited-node
//!   multicast address) is out; IP packets for the neighbour wait in a queue of
//!   at most `unres_qlen` packets (overflow drops the *oldest*, as Linux's
//!   `__neigh_event_send` does, counted `NEIGH_QUEUEFULL`). A request goes out every
//!   `retrans_time_ms`; after `mcast_solicit` of them the entry fails and its queue is
//!   dropped (`NEIGH_FAILED`).
//! - `Reachable`: confirmed within `base_reachable_time_ms`.
//! - `Stale`: older than that; still used, and its first use after going stale sends one
//!   unicast request to re-confirm it (where Linux goes DELAY then PROBE).
//!
//! Entries unused for `gc_stale_time` are collected; the table holds at most `gc_thresh3`
//! entries (a new resolution beyond that is refused, `NEIGH_FAILED`). Only incomplete
//! entries have timers, and they are kept on their own list, so no timer work scans the
//! whole table.
//!
//! Linux's NUD states map onto these as [`NudState`] says: `NUD_INCOMPLETE`, then
//! `NUD_REACHABLE` within `base_reachable_time_ms` of a confirmation, `NUD_STALE` after it
//! (or when the address was learnt without confirmation of reachability: an unsolicited
//! advertisement, a solicitation's source link-layer address, RFC 4861 §7.2.3 and §7.2.5),
//! and `NUD_PROBE` while the unicast re-confirmation is out. `NUD_FAILED` entries are
//! removed at once.
//!
//! [RFC 826]: https://www.rfc-editor.org/rfc/rfc826
//! [RFC 4861]: https://www.rfc-editor.org/rfc/rfc4861

use core::net::IpAddr;
use core::time::Duration;
use std::collections::VecDeque;

use hashbrown::HashMap;
use ustack_obs::{DropReason, Instant, Mib};
use ustack_wire::EthernetAddress;

use crate::secret::KeyedState;
use crate::sysctl::Sysctl;

#[derive(Debug)]
enum State {
    Incomplete {
        probes: u64,
        next_probe: Instant,
        queue: VecDeque<Vec<u8>>,
    },
    /// `confirmed`: when the neighbour last proved it holds the address (`None`: learnt
    /// without proof, so stale from the start).
    Known {
        mac: EthernetAddress,
        confirmed: Option<Instant>,
        /// When a stale entry may next be probed (`None`: on its next use).
        next_probe: Option<Instant>,
        /// `next_probe` is the end of a DELAY, not of a probe's wait.
        delay: bool,
    },
}

#[derive(Debug)]
struct Entry {
    state: State,
    used: Instant,
}

/// RFC 4861 §10 DELAY_FIRST_PROBE_TIME (Linux `delay_first_probe_time`, 5 s).
const DELAY_FIRST_PROBE: Duration = Duration::from_secs(5);

/// An entry's state in Linux's terms (`include/net/neighbour.h`, `NUD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NudState {
    /// Resolution in progress; packets wait.
    Incomplete,
    /// Confirmed within `base_reachable_time_ms`.
    Reachable,
    /// Known but not confirmed lately: used, and re-probed on use.
    Stale,
    /// Never confirmed, used: the first probe waits `DELAY_FIRST_PROBE_TIME`.
    Delay,
    /// A unicast probe of a stale entry is out (within `retrans_time_ms` of it).
    Probe,
}

/// What the caller must do with an IP packet it wanted to send to a neighbour.
#[derive(Debug)]
pub enum Resolution {
    /// The neighbour is known: send to this address. `probe`: also send a unicast ARP
    /// request to re-confirm a stale entry.
    Send { mac: EthernetAddress, probe: bool },
    /// The packet waits in the queue; `request`: send a broadcast ARP request now.
    Queued { request: bool },
    /// The table is full: the packet was dropped (and counted).
    Refused,
}

/// A timer action for the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum NeighEvent {
    /// Send (another) broadcast ARP request, or multicast neighbour solicitation, for this
    /// address.
    Request(IpAddr),
}

/// The ARP cache of one interface.
#[derive(Debug)]
pub struct NeighTable {
    entries: HashMap<IpAddr, Entry, KeyedState>,
    /// Addresses of the `Incomplete` entries: the only ones with retransmit timers.
    resolving: Vec<IpAddr>,
    next_gc: Instant,
    /// The last neighbour `resolve` found reachable, so that a run of frames to it skips
    /// the keyed hash (Linux keeps the neighbour in the route, `dst->neighbour`, and
    /// `neigh_output` takes its fast path while it is `NUD_CONNECTED`).
    hot: Option<Hot>,
}

/// A reachable entry's copy, valid until its confirmation ages (while the entry is
/// unchanged: [`NeighTable::update`] and [`NeighTable::collect`] drop it first).
#[derive(Debug, Clone, Copy)]
struct Hot {
    ip: IpAddr,
    mac: EthernetAddress,
    /// When the entry goes stale: its confirmation plus `reachable_ms`.
    until: Instant,
    reachable_ms: u64,
    /// The last use through this copy (`None`: none since it was taken; the entry's
    /// `used` is current).
    used: Option<Instant>,
}

impl NeighTable {
    /// `hasher` keyed with a secret (peers' ARP requests create entries, keyed by the
    /// address they claim; Linux `arp_hashfn` uses a random `hash_rnd`).
    pub fn new(hasher: KeyedState) -> Self {
        NeighTable {
            entries: HashMap::with_hasher(hasher),
            resolving: Vec::new(),
            next_gc: Instant::ZERO,
            hot: None,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Packets waiting for resolution, over all entries.
    pub fn queued(&self) -> usize {
        self.entries
            .values()
            .map(|e| match &e.state {
                State::Incomplete { queue, .. } => queue.len(),
                State::Known { .. } => 0,
            })
            .sum()
    }

    /// The address of `ip`, if known (no side effects: for `ss`-like views and tests).
    pub fn peek(&self, ip: impl Into<IpAddr>) -> Option<EthernetAddress> {
        match self.entries.get(&ip.into())?.state {
            State::Known { mac, .. } => Some(mac),
            State::Incomplete { .. } => None,
        }
    }

    /// The NUD state of `ip`'s entry at `now`, if there is one.
    pub fn state(&self, now: Instant, ip: impl Into<IpAddr>, sysctl: &Sysctl) -> Option<NudState> {
        let reachable = Duration::from_millis(sysctl.neigh_base_reachable_time_ms);
        Some(match self.entries.get(&ip.into())?.state {
            State::Incomplete { .. } => NudState::Incomplete,
            State::Known {
                confirmed,
                next_probe,
                delay,
                ..
            } => {
                if confirmed.is_some_and(|c| now - c < reachable) {
                    NudState::Reachable
                } else if next_probe.is_some_and(|p| now < p) {
                    if delay {
                        NudState::Delay
                    } else {
                        NudState::Probe
                    }
                } else {
                    NudState::Stale
                }
            }
        })
    }

    /// The link address of a reachable `ip` from the last resolution's copy, if it still
    /// holds (what [`NeighTable::resolve`] would answer `Send` with, no probe): a transmit
    /// path asks this first and resolves only when it says `None`.
    #[inline]
    pub fn hot(&mut self, now: Instant, ip: IpAddr, sysctl: &Sysctl) -> Option<EthernetAddress> {
        match &mut self.hot {
            Some(h)
                if h.ip == ip
                    && now < h.until
                    && h.reachable_ms == sysctl.neigh_base_reachable_time_ms =>
            {
                h.used = Some(now);
                Some(h.mac)
            }
            _ => None,
        }
    }

    /// Resolve `ip` for the IP packet `packet` (the whole IP datagram, without L2 header).
    /// When the result is `Send`, the packet is handed back in `packet` untouched; when
    /// `Queued`, the table keeps it.
    pub fn resolve(
        &mut self,
        now: Instant,
        ip: impl Into<IpAddr>,
        packet: &mut Option<Vec<u8>>,
        sysctl: &Sysctl,
        mib: &mut Mib,
    ) -> Resolution {
        let ip = ip.into();
        if let Some(h) = &mut self.hot
            && h.ip == ip
            && now < h.until
            && h.reachable_ms == sysctl.neigh_base_reachable_time_ms
        {
            // Reachable: what the walk below would answer, without the hash.
            h.used = Some(now);
            return Resolution::Send {
                mac: h.mac,
                probe: false,
            };
        }
        self.cool();
        let reachable = Duration::from_millis(sysctl.neigh_base_reachable_time_ms);
        let retrans = Duration::from_millis(sysctl.neigh_retrans_time_ms);
        if let Some(entry) = self.entries.get_mut(&ip) {
            entry.used = now;
            return match &mut entry.state {
                State::Known {
                    mac,
                    confirmed,
                    next_probe,
                    delay,
                } => {
                    // Stale: use it, but ask once per retrans interval whether it still holds.
                    let stale = confirmed.is_none_or(|c| now - c >= reachable);
                    if stale && confirmed.is_none() && next_probe.is_none() {
                        // Never confirmed (learnt from a solicitation, RFC 4861 §7.2.3):
                        // Linux's NUD_DELAY, the first probe `delay_first_probe_time`
                        // after the first use (RFC 4861 §7.3.3, DELAY_FIRST_PROBE_TIME).
                        *next_probe = Some(now + DELAY_FIRST_PROBE);
                        *delay = true;
                    }
                    let probe = stale && next_probe.is_none_or(|p| now >= p);
                    if probe {
                        *next_probe = Some(now + retrans);
                        *delay = false;
                    }
                    if let (false, Some(c)) = (stale, confirmed) {
                        self.hot = Some(Hot {
                            ip,
                            mac: *mac,
                            until: *c + reachable,
                            reachable_ms: sysctl.neigh_base_reachable_time_ms,
                            used: None,
                        });
                    }
                    Resolution::Send { mac: *mac, probe }
                }
                State::Incomplete { queue, .. } => {
                    enqueue(ip, queue, packet, sysctl, mib);
                    Resolution::Queued { request: false }
                }
            };
        }
        if self.entries.len() as u64 >= sysctl.neigh_gc_thresh3 {
            self.collect(now, sysctl);
            if self.entries.len() as u64 >= sysctl.neigh_gc_thresh3 {
                packet.take();
                mib.drop(failed(ip));
                return Resolution::Refused;
            }
        }
        let mut queue = VecDeque::new();
        enqueue(ip, &mut queue, packet, sysctl, mib);
        self.entries.insert(
            ip,
            Entry {
                state: State::Incomplete {
                    probes: 1,
                    next_probe: now + retrans,
                    queue,
                },
                used: now,
            },
        );
        self.resolving.push(ip);
        Resolution::Queued { request: true }
    }

    /// An ARP packet from `ip` at `mac` arrived. `create`: add an entry if there is none
    /// (RFC 826: only when the packet was addressed to us). Returns the IP packets that
    /// were waiting for this neighbour, to be sent to `mac` now.
    pub fn confirm(
        &mut self,
        now: Instant,
        ip: impl Into<IpAddr>,
        mac: EthernetAddress,
        create: bool,
    ) -> Vec<Vec<u8>> {
        self.update(
            now,
            ip.into(),
            mac,
            Update {
                create,
                reachable: true,
                override_: true,
            },
        )
    }

    /// What neighbour discovery learnt about `ip` (RFC 4861 §7.2.3 and §7.2.5): `mac` is
    /// its link-layer address, proven reachable or not (`how`). An incomplete entry takes
    /// the address and releases its queue; a known one takes a different address only
    /// with `override_` (becoming stale if not reachable); no entry is created unless
    /// `create`. Returns the packets that were waiting, to be sent to `mac` now.
    pub fn update(
        &mut self,
        now: Instant,
        ip: IpAddr,
        mac: EthernetAddress,
        how: Update,
    ) -> Vec<Vec<u8>> {
        self.cool();
        let confirmed = how.reachable.then_some(now);
        match self.entries.get_mut(&ip) {
            Some(entry) => {
                if let State::Known {
                    mac: old,
                    confirmed: c,
                    ..
                } = &mut entry.state
                {
                    // RFC 4861 §7.2.5: without the override flag a different address does
                    // not replace the cached one (the entry only goes stale), and the same
                    // address is confirmed only by a solicited advertisement.
                    if *old == mac || how.override_ {
                        if *old != mac {
                            *c = None;
                        }
                        *old = mac;
                        if confirmed.is_some() {
                            *c = confirmed;
                        }
                    }
                    return Vec::new();
                }
                let old = core::mem::replace(
                    &mut entry.state,
                    State::Known {
                        mac,
                        confirmed,
                        next_probe: None,
                        delay: false,
                    },
                );
                self.resolving.retain(|a| *a != ip);
                match old {
                    State::Incomplete { queue, .. } => queue.into(),
                    State::Known { .. } => Vec::new(),
                }
            }
            None => {
                if how.create {
                    self.entries.insert(
                        ip,
                        Entry {
                            state: State::Known {
                                mac,
                                confirmed,
                                next_probe: None,
                                delay: false,
                            },
                            used: now,
                        },
                    );
                }
                Vec::new()
            }
        }
    }

    /// When `handle_timeout` next has work: the earliest retransmit of a resolving entry,
    /// or the next garbage collection while the table is not empty.
    #[inline]
    pub fn poll_at(&self) -> Option<Instant> {
        let gc = (!self.entries.is_empty()).then_some(self.next_gc);
        if self.resolving.is_empty() {
            return gc; // nothing being resolved: no retransmit (the usual case)
        }
        let retrans = self
            .resolving
            .iter()
            .filter_map(|ip| match &self.entries.get(ip)?.state {
                State::Incomplete { next_probe, .. } => Some(*next_probe),
                State::Known { .. } => None,
            })
            .min();
        crate::stack::earliest(retrans, gc)
    }

    /// Retransmit requests that are due, fail entries that ran out of probes (dropping
    /// their queues), and collect stale entries when the GC is due.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        sysctl: &Sysctl,
        mib: &mut Mib,
        out: &mut Vec<NeighEvent>,
    ) {
        let retrans = Duration::from_millis(sysctl.neigh_retrans_time_ms);
        let mut i = 0;
        while i < self.resolving.len() {
            let ip = self.resolving[i];
            let Some(entry) = self.entries.get_mut(&ip) else {
                self.resolving.swap_remove(i);
                continue;
            };
            let State::Incomplete {
                probes,
                next_probe,
                queue,
            } = &mut entry.state
            else {
                self.resolving.swap_remove(i);
                continue;
            };
            if *next_probe > now {
                i += 1;
                continue;
            }
            if *probes >= sysctl.neigh_mcast_solicit {
                // Resolution failed: everything queued is dropped (Linux neigh_invalidate).
                for _ in queue.drain(..) {
                    mib.drop(failed(ip));
                }
                self.entries.remove(&ip);
                self.resolving.swap_remove(i);
                continue;
            }
            *probes += 1;
            *next_probe = now + retrans;
            out.push(NeighEvent::Request(ip));
            i += 1;
        }
        if now >= self.next_gc {
            self.collect(now, sysctl);
        }
    }

    /// Drop the hot copy, writing its last use back to the entry (a lookup only when the
    /// copy was used: once per run of frames to one neighbour).
    #[inline]
    fn cool(&mut self) {
        if let Some(Hot {
            ip, used: Some(t), ..
        }) = self.hot.take()
            && let Some(e) = self.entries.get_mut(&ip)
        {
            e.used = e.used.max(t);
        }
    }

    /// Remove known entries unused for `gc_stale_time` (Linux `neigh_periodic_work`).
    fn collect(&mut self, now: Instant, sysctl: &Sysctl) {
        self.cool();
        let stale = Duration::from_secs(sysctl.neigh_gc_stale_time);
        self.entries
            .retain(|_, e| matches!(e.state, State::Incomplete { .. }) || now - e.used < stale);
        self.next_gc = now + Duration::from_millis(sysctl.neigh_base_reachable_time_ms / 2);
    }
}

/// How [`NeighTable::update`] treats what it learnt.
#[derive(Debug, Clone, Copy)]
pub struct Update {
    /// Add an entry if there is none.
    pub create: bool,
    /// The neighbour proved it is reachable (a reply, a solicited advertisement).
    pub reachable: bool,
    /// A known entry takes a different link-layer address.
    pub override_: bool,
}

/// The reason a packet for `ip` is dropped when its neighbour cannot be resolved.
fn failed(ip: IpAddr) -> DropReason {
    match ip {
        IpAddr::V4(_) => DropReason::NeighFailed,
        IpAddr::V6(_) => DropReason::Ip6NeighFailed,
    }
}

/// Queue a packet on an incomplete entry; at `unres_qlen` the oldest is dropped.
fn enqueue(
    ip: IpAddr,
    queue: &mut VecDeque<Vec<u8>>,
    packet: &mut Option<Vec<u8>>,
    sysctl: &Sysctl,
    mib: &mut Mib,
) {
    let Some(p) = packet.take() else { return };
    let full = match ip {
        IpAddr::V4(_) => DropReason::NeighQueueFull,
        IpAddr::V6(_) => DropReason::Ip6NeighQueueFull,
    };
    if sysctl.neigh_unres_qlen == 0 {
        mib.drop(full);
        return;
    }
    while queue.len() as u64 >= sysctl.neigh_unres_qlen {
        queue.pop_front();
        mib.drop(full);
    }
    queue.push_back(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    use core::net::{Ipv4Addr, Ipv6Addr};

    const IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn queues_until_resolved_then_releases_in_order() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        let r = n.resolve(t(0), IP, &mut Some(vec![1]), &s, &mut mib);
        assert!(matches!(r, Resolution::Queued { request: true }));
        let r = n.resolve(t(1), IP, &mut Some(vec![2]), &s, &mut mib);
        assert!(matches!(r, Resolution::Queued { request: false }));
        assert_eq!(n.confirm(t(2), IP, MAC, false), vec![vec![1], vec![2]]);
        let mut p = Some(vec![3]);
        assert!(matches!(
            n.resolve(t(3), IP, &mut p, &s, &mut mib),
            Resolution::Send {
                mac: MAC,
                probe: false
            }
        ));
        assert_eq!(p, Some(vec![3]), "a resolved send hands the packet back");
    }

    #[test]
    fn gives_up_after_mcast_solicit_and_drops_queue() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        n.resolve(t(0), IP, &mut Some(vec![1]), &s, &mut mib);
        n.resolve(t(0), IP, &mut Some(vec![2]), &s, &mut mib);
        let mut ev = Vec::new();
        let mut now = t(0);
        while let Some(at) = n
            .poll_at()
            .filter(|_| n.peek(IP).is_none() && n.queued() > 0)
        {
            now = at;
            n.handle_timeout(now, &s, &mut mib, &mut ev);
        }
        // One request at resolve time plus two retransmits: mcast_solicit = 3 in all.
        assert_eq!(
            ev,
            vec![
                NeighEvent::Request(IP.into()),
                NeighEvent::Request(IP.into())
            ]
        );
        assert_eq!(now, t(3000));
        assert_eq!(mib.drops(DropReason::NeighFailed), 2);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn queue_overflow_drops_oldest() {
        let (mut s, mut mib) = (Sysctl::default(), Mib::new());
        s.neigh_unres_qlen = 2;
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        for i in 0..5u8 {
            n.resolve(t(0), IP, &mut Some(vec![i]), &s, &mut mib);
        }
        assert_eq!(mib.drops(DropReason::NeighQueueFull), 3);
        assert_eq!(n.confirm(t(1), IP, MAC, false), vec![vec![3], vec![4]]);
    }

    #[test]
    fn stale_entry_is_used_and_probed_once() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        n.confirm(t(0), IP, MAC, true);
        let later = t(s.neigh_base_reachable_time_ms + 1);
        assert!(matches!(
            n.resolve(later, IP, &mut Some(vec![]), &s, &mut mib),
            Resolution::Send { probe: true, .. }
        ));
        assert!(matches!(
            n.resolve(later, IP, &mut Some(vec![]), &s, &mut mib),
            Resolution::Send { probe: false, .. }
        ));
    }

    #[test]
    fn repeated_sends_follow_address_changes_and_go_stale_on_time() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        let send = |n: &mut NeighTable, ms: u64, mib: &mut Mib| match n.resolve(
            t(ms),
            IP,
            &mut Some(vec![]),
            &s,
            mib,
        ) {
            Resolution::Send { mac, probe } => (mac, probe),
            r => panic!("{r:?}"),
        };
        n.confirm(t(0), IP, MAC, true);
        assert_eq!(send(&mut n, 1, &mut mib), (MAC, false));
        assert_eq!(send(&mut n, 2, &mut mib), (MAC, false));
        let moved = EthernetAddress([2, 0, 0, 0, 0, 9]);
        n.confirm(t(3), IP, moved, true);
        assert_eq!(send(&mut n, 4, &mut mib), (moved, false), "the new address");
        assert_eq!(send(&mut n, 5, &mut mib), (moved, false));
        let stale = 3 + s.neigh_base_reachable_time_ms;
        assert_eq!(
            send(&mut n, stale, &mut mib),
            (moved, true),
            "stale: probed"
        );
    }

    #[test]
    fn entries_used_by_a_run_of_sends_are_not_collected() {
        let (mut s, mut mib) = (Sysctl::default(), Mib::new());
        s.neigh_base_reachable_time_ms = 2 * 1000 * s.neigh_gc_stale_time;
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        n.confirm(t(0), IP, MAC, true);
        let gc = 1000 * s.neigh_gc_stale_time;
        for ms in [1, gc - 1000] {
            n.resolve(t(ms), IP, &mut Some(vec![]), &s, &mut mib);
        }
        let mut ev = Vec::new();
        n.handle_timeout(t(gc + 1), &s, &mut mib, &mut ev);
        assert_eq!(n.peek(IP), Some(MAC), "used a second ago");
        n.handle_timeout(t(3 * gc), &s, &mut mib, &mut ev);
        assert!(n.is_empty(), "unused since");
    }

    #[test]
    fn unsolicited_reply_does_not_create_entries() {
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        n.confirm(t(0), IP, MAC, false);
        assert_eq!(n.peek(IP), None);
    }

    #[test]
    fn table_limit_refuses_new_resolutions() {
        let (mut s, mut mib) = (Sysctl::default(), Mib::new());
        s.neigh_gc_thresh3 = 4;
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        for i in 0..4 {
            n.resolve(
                t(0),
                Ipv4Addr::new(10, 0, 0, i),
                &mut Some(vec![]),
                &s,
                &mut mib,
            );
        }
        let r = n.resolve(
            t(0),
            Ipv4Addr::new(10, 0, 0, 9),
            &mut Some(vec![]),
            &s,
            &mut mib,
        );
        assert!(matches!(r, Resolution::Refused));
        assert_eq!(mib.drops(DropReason::NeighFailed), 1);
    }

    #[test]
    fn unused_entries_are_collected() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        n.confirm(t(0), IP, MAC, true);
        let mut ev = Vec::new();
        n.handle_timeout(t(s.neigh_gc_stale_time * 1000 + 1), &s, &mut mib, &mut ev);
        assert!(n.is_empty());
    }

    #[test]
    fn one_table_for_both_families_with_nud_states() {
        let (s, mut mib) = (Sysctl::default(), Mib::new());
        let mut n = NeighTable::new(KeyedState::from_seed(1));
        let v6: Ipv6Addr = "2001:db8::2".parse().unwrap();
        n.resolve(t(0), v6, &mut Some(vec![6]), &s, &mut mib);
        n.resolve(t(0), IP, &mut Some(vec![4]), &s, &mut mib);
        assert_eq!(n.state(t(0), v6, &s), Some(NudState::Incomplete));
        // An incomplete entry takes the address of any advertisement, even unsolicited and
        // without override (RFC 4861 §7.2.5), but stale then, not reachable.
        let how = Update {
            create: false,
            reachable: false,
            override_: false,
        };
        assert_eq!(n.update(t(1), v6.into(), MAC, how), vec![vec![6]]);
        assert_eq!(n.state(t(1), v6, &s), Some(NudState::Stale));
        assert_eq!(n.state(t(1), IP, &s), Some(NudState::Incomplete));
        // Without override, another address is not taken.
        let other = EthernetAddress([2, 0, 0, 0, 0, 9]);
        n.update(t(2), v6.into(), other, how);
        assert_eq!(n.peek(v6), Some(MAC));
        // A solicited advertisement makes it reachable; the stale probe state follows.
        let solicited = Update {
            reachable: true,
            ..how
        };
        n.update(t(3), v6.into(), MAC, solicited);
        assert_eq!(n.state(t(3), v6, &s), Some(NudState::Reachable));
        let later = t(3 + s.neigh_base_reachable_time_ms);
        assert_eq!(n.state(later, v6, &s), Some(NudState::Stale));
        assert!(matches!(
            n.resolve(later, v6, &mut Some(vec![]), &s, &mut mib),
            Resolution::Send { probe: true, .. }
        ));
        assert_eq!(n.state(later, v6, &s), Some(NudState::Probe));
        assert_eq!(n.len(), 2);
    }
}
