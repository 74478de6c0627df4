//! The neighbour table: IPv4 to Ethernet address resolution ([RFC 826]), with the states,
//! timers and bounded queue of Linux's `net/core/neighbour.c`, simplified:
//!
//! - `Incomplete`: an ARP request is out; IP packets for the neighbour wait in a queue of
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
//! [RFC 826]: https://www.rfc-editor.org/rfc/rfc826

use core::net::Ipv4Addr;
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
    /// `confirmed`: when the neighbour last proved it holds the address.
    Known {
        mac: EthernetAddress,
        confirmed: Instant,
        probed: Option<Instant>,
    },
}

#[derive(Debug)]
struct Entry {
    state: State,
    used: Instant,
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
    /// Send (another) broadcast ARP request for this address.
    Request(Ipv4Addr),
}

/// The ARP cache of one interface.
#[derive(Debug)]
pub struct NeighTable {
    entries: HashMap<Ipv4Addr, Entry, KeyedState>,
    /// Addresses of the `Incomplete` entries: the only ones with retransmit timers.
    resolving: Vec<Ipv4Addr>,
    next_gc: Instant,
}

impl NeighTable {
    /// `hasher` keyed with a secret (peers' ARP requests create entries, keyed by the
    /// address they claim; Linux `arp_hashfn` uses a random `hash_rnd`).
    pub fn new(hasher: KeyedState) -> Self {
        NeighTable {
            entries: HashMap::with_hasher(hasher),
            resolving: Vec::new(),
            next_gc: Instant::ZERO,
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
    pub fn peek(&self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        match self.entries.get(&ip)?.state {
            State::Known { mac, .. } => Some(mac),
            State::Incomplete { .. } => None,
        }
    }

    /// Resolve `ip` for the IP packet `packet` (the whole IP datagram, without L2 header).
    /// When the result is `Send`, the packet is handed back in `packet` untouched; when
    /// `Queued`, the table keeps it.
    pub fn resolve(
        &mut self,
        now: Instant,
        ip: Ipv4Addr,
        packet: &mut Option<Vec<u8>>,
        sysctl: &Sysctl,
        mib: &mut Mib,
    ) -> Resolution {
        let reachable = Duration::from_millis(sysctl.neigh_base_reachable_time_ms);
        let retrans = Duration::from_millis(sysctl.neigh_retrans_time_ms);
        if let Some(entry) = self.entries.get_mut(&ip) {
            entry.used = now;
            return match &mut entry.state {
                State::Known {
                    mac,
                    confirmed,
                    probed,
                } => {
                    // Stale: use it, but ask once per retrans interval whether it still holds.
                    let stale = now - *confirmed >= reachable;
                    let probe = stale && probed.is_none_or(|p| now - p >= retrans);
                    if probe {
                        *probed = Some(now);
                    }
                    Resolution::Send { mac: *mac, probe }
                }
                State::Incomplete { queue, .. } => {
                    enqueue(queue, packet, sysctl, mib);
                    Resolution::Queued { request: false }
                }
            };
        }
        if self.entries.len() as u64 >= sysctl.neigh_gc_thresh3 {
            self.collect(now, sysctl);
            if self.entries.len() as u64 >= sysctl.neigh_gc_thresh3 {
                packet.take();
                mib.drop(DropReason::NeighFailed);
                return Resolution::Refused;
            }
        }
        let mut queue = VecDeque::new();
        enqueue(&mut queue, packet, sysctl, mib);
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
        ip: Ipv4Addr,
        mac: EthernetAddress,
        create: bool,
    ) -> Vec<Vec<u8>> {
        match self.entries.get_mut(&ip) {
            Some(entry) => {
                let old = core::mem::replace(
                    &mut entry.state,
                    State::Known {
                        mac,
                        confirmed: now,
                        probed: None,
                    },
                );
                match old {
                    State::Incomplete { queue, .. } => {
                        self.resolving.retain(|a| *a != ip);
                        queue.into()
                    }
                    State::Known { .. } => Vec::new(),
                }
            }
            None => {
                if create {
                    self.entries.insert(
                        ip,
                        Entry {
                            state: State::Known {
                                mac,
                                confirmed: now,
                                probed: None,
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
    pub fn poll_at(&self) -> Option<Instant> {
        let retrans = self
            .resolving
            .iter()
            .filter_map(|ip| match &self.entries.get(ip)?.state {
                State::Incomplete { next_probe, .. } => Some(*next_probe),
                State::Known { .. } => None,
            })
            .min();
        let gc = (!self.entries.is_empty()).then_some(self.next_gc);
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
                    mib.drop(DropReason::NeighFailed);
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

    /// Remove known entries unused for `gc_stale_time` (Linux `neigh_periodic_work`).
    fn collect(&mut self, now: Instant, sysctl: &Sysctl) {
        let stale = Duration::from_secs(sysctl.neigh_gc_stale_time);
        self.entries
            .retain(|_, e| matches!(e.state, State::Incomplete { .. }) || now - e.used < stale);
        self.next_gc = now + Duration::from_millis(sysctl.neigh_base_reachable_time_ms / 2);
    }
}

/// Queue a packet on an incomplete entry; at `unres_qlen` the oldest is dropped.
fn enqueue(
    queue: &mut VecDeque<Vec<u8>>,
    packet: &mut Option<Vec<u8>>,
    sysctl: &Sysctl,
    mib: &mut Mib,
) {
    let Some(p) = packet.take() else { return };
    if sysctl.neigh_unres_qlen == 0 {
        mib.drop(DropReason::NeighQueueFull);
        return;
    }
    while queue.len() as u64 >= sysctl.neigh_unres_qlen {
        queue.pop_front();
        mib.drop(DropReason::NeighQueueFull);
    }
    queue.push_back(p);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ev, vec![NeighEvent::Request(IP), NeighEvent::Request(IP)]);
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
}
