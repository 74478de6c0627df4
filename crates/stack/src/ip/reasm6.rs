//! IPv6 fragment reassembly, after Linux's `net/ipv6/reassembly.c` (`ip6_frag_queue`,
//! `ip6_frag_reasm`) and the rules of [RFC 8200 §4.5], [RFC 5722] and [RFC 6946]:
//!
//! - Queues are keyed by (source, destination, Identification), in a hash table keyed with
//!   a secret (peers choose all three).
//! - Overlapping fragments discard the whole packet (RFC 5722 §4: "the entire datagram
//!   (and any constituent fragments, including those not yet received) MUST be silently
//!   discarded"); an exact duplicate (same offset and length) is dropped alone, as §4
//!   allows. Later fragments of a discarded packet start a new queue that will time out
//!   (Linux behaves the same: the queue is killed, not remembered).
//! - Atomic fragments (offset 0, M clear) never reach this module: the input path
//!   processes them as whole packets (RFC 6946 §4), as Linux's `ipv6_frag_rcv` does.
//! - Memory: every fragment is charged its length plus [`FRAG_OVERHEAD`], every queue
//!   [`QUEUE_OVERHEAD`]; a fragment that would take the total above `ip6frag_high_thresh`
//!   is refused (Linux: `inet_frag_find` fails above `high_thresh`). A queue holds at most
//!   [`MAX_FRAGS`] fragments (FragmentSmack, CVE-2018-5391; ustack's own bound).
//! - Deadlines live in a sorted map, so expiry never scans all queues; a packet whose first
//!   fragment had arrived gets an ICMPv6 Time Exceeded code 1 (RFC 8200 §4.5) from the
//!   caller, built from [`Expired6::first`].
//!
//! [RFC 8200 §4.5]: https://www.rfc-editor.org/rfc/rfc8200#section-4.5
//! [RFC 5722]: https://www.rfc-editor.org/rfc/rfc5722
//! [RFC 6946]: https://www.rfc-editor.org/rfc/rfc6946

use core::net::Ipv6Addr;
use core::time::Duration;
use std::collections::BTreeMap;

use hashbrown::HashMap;
use ustack_obs::{Counter, DropReason, Instant, Mib};

use ustack_wire::ipv6ext::FragRepr;

use crate::secret::KeyedState;

/// Bytes charged per fragment besides its data (the bookkeeping and allocator overhead).
pub const FRAG_OVERHEAD: usize = 64;
/// Bytes charged per queue.
pub const QUEUE_OVERHEAD: usize = 256;
/// Fragments one packet may be made of: a 65,535-byte payload in 64-byte pieces.
/// Fragments beyond it discard the packet (`IP6_FRAG_INVALID`).
pub const MAX_FRAGS: usize = 1024;
/// The largest fragmentable part: Payload Length is 16 bits (RFC 8200 §3), jumbograms
/// aside.
const MAX_LEN: u32 = 65_535;

/// What identifies one fragmented packet (RFC 8200 §4.5: "Source Address, Destination
/// Address, Fragment Identification").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub ident: u32,
}

/// The limits, from `net.ipv6.ip6frag_*`.
#[derive(Debug, Clone, Copy)]
pub struct Reasm6Config {
    pub high_thresh: usize,
    pub timeout: Duration,
}

/// What is kept of the first fragment (offset 0).
#[derive(Debug, Clone, Copy)]
pub struct First<'a> {
    /// Its packet up to and including the Fragment header (the unfragmentable part).
    pub head: &'a [u8],
    /// Offset in `head` of the Next Header field that names the Fragment header.
    pub nh_field: usize,
    /// The whole packet (for a Time Exceeded quote).
    pub packet: &'a [u8],
}

/// A reassembled packet.
#[derive(Debug)]
pub struct Reassembled6 {
    /// The first fragment's packet up to and including its Fragment header (the
    /// unfragmentable part), as received.
    pub head: Vec<u8>,
    /// Offset in `head` of the Next Header field that names the Fragment header.
    pub nh_field: usize,
    /// The fragmentable part, whole.
    pub payload: Vec<u8>,
}

/// A packet whose reassembly timed out.
#[derive(Debug)]
pub struct Expired6 {
    pub key: FragKey6,
    /// The first fragment's whole packet, if it had arrived (for the Time Exceeded quote).
    pub first: Option<Vec<u8>>,
}

/// What became of a fragment.
#[derive(Debug)]
pub enum Outcome6 {
    /// Queued; the packet is not complete.
    Pending,
    /// Dropped (counted).
    Dropped,
    /// The packet is complete.
    Complete(Reassembled6),
}

#[derive(Debug)]
struct Queue {
    /// Fragments by offset: (data end, data).
    frags: BTreeMap<u32, (u32, Vec<u8>)>,
    /// The end of the packet, once the last fragment (M clear) arrived.
    end: Option<u32>,
    /// Bytes of data held.
    meat: u32,
    /// The offset-0 fragment's packet up to its Fragment header, its Next Header field's
    /// offset, and the whole packet.
    head: Option<(Vec<u8>, usize, Vec<u8>)>,
    deadline: (Instant, u64),
    mem: usize,
}

/// IPv6 reassembly state of one stack.
#[derive(Debug)]
pub struct Reassembler6 {
    queues: HashMap<FragKey6, Queue, KeyedState>,
    timers: BTreeMap<(Instant, u64), FragKey6>,
    next_timer: u64,
    mem: usize,
    cfg: Reasm6Config,
}

impl Reassembler6 {
    /// `hasher` keyed with a secret.
    pub fn new(cfg: Reasm6Config, hasher: KeyedState) -> Reassembler6 {
        Reassembler6 {
            queues: HashMap::with_hasher(hasher),
            timers: BTreeMap::new(),
            next_timer: 0,
            mem: 0,
            cfg,
        }
    }

    /// New limits (a sysctl changed); held fragments stay.
    pub fn set_config(&mut self, cfg: Reasm6Config) {
        self.cfg = cfg;
    }

    /// Bytes charged now.
    pub fn mem(&self) -> usize {
        self.mem
    }

    /// Packets being reassembled.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The earliest deadline.
    #[inline]
    pub fn poll_at(&self) -> Option<Instant> {
        self.timers.keys().next().map(|(at, _)| *at)
    }

    /// Add one fragment: `frag` its Fragment header (offset, M flag), `data` its
    /// fragmentable part (the caller checked RFC 8200 §4.5's length rules and answered
    /// them with Parameter Problems), `first` what is kept if it is the first fragment.
    pub fn add(
        &mut self,
        now: Instant,
        key: FragKey6,
        frag: FragRepr,
        data: &[u8],
        first: First<'_>,
        mib: &mut Mib,
    ) -> Outcome6 {
        let more = frag.more_frags;
        let start = u32::from(frag.offset);
        let end = start + data.len() as u32;
        let cost = data.len() + FRAG_OVERHEAD;
        let new_queue = !self.queues.contains_key(&key);
        let extra = cost + if new_queue { QUEUE_OVERHEAD } else { 0 };
        if self.mem + extra > self.cfg.high_thresh {
            // Linux: no queue found or created above high_thresh; ReasmFails.
            mib.drop(DropReason::Ip6FragMemLimit);
            return Outcome6::Dropped;
        }
        if new_queue {
            let deadline = (now + self.cfg.timeout, self.next_timer);
            self.next_timer += 1;
            self.timers.insert(deadline, key);
            self.queues.insert(
                key,
                Queue {
                    frags: BTreeMap::new(),
                    end: None,
                    meat: 0,
                    head: None,
                    deadline,
                    mem: QUEUE_OVERHEAD,
                },
            );
            self.mem += QUEUE_OVERHEAD;
        }
        let q = self.queues.get_mut(&key).expect("queue just found or made");
        // The end must agree with a known end, and no fragment may lie past it.
        let contradicts = match q.end {
            Some(e) => end > e || (!more && end != e),
            None => !more && q.frags.values().next_back().is_some_and(|(e, _)| *e > end),
        };
        if end > MAX_LEN || contradicts || q.frags.len() >= MAX_FRAGS {
            return self.discard(key, DropReason::Ip6FragInvalid, mib);
        }
        // RFC 5722: any overlap discards the packet; an exact duplicate only itself.
        if let Some((&s, (e, _))) = q.frags.range(..end).next_back() {
            if s == start && *e == end {
                mib.drop(DropReason::Ip6FragDup);
                return Outcome6::Pending;
            }
            if *e > start {
                return self.discard(key, DropReason::Ip6FragOverlap, mib);
            }
        }
        if !more {
            q.end = Some(end);
        }
        if start == 0 {
            q.head = Some((first.head.to_vec(), first.nh_field, first.packet.to_vec()));
        }
        q.frags.insert(start, (end, data.to_vec()));
        q.meat += end - start;
        q.mem += cost;
        self.mem += cost;
        if q.end == Some(q.meat) && q.head.is_some() {
            return self.reassemble(key);
        }
        Outcome6::Pending
    }

    /// Join a complete queue's fragments (Linux `ip6_frag_reasm`).
    fn reassemble(&mut self, key: FragKey6) -> Outcome6 {
        let q = self.remove(&key).expect("the caller holds the key");
        let mut payload = Vec::with_capacity(q.meat as usize);
        for (_, (_, data)) in q.frags {
            payload.extend_from_slice(&data);
        }
        let (head, nh_field, _) = q.head.expect("complete queues have their head");
        Outcome6::Complete(Reassembled6 {
            head,
            nh_field,
            payload,
        })
    }

    fn remove(&mut self, key: &FragKey6) -> Option<Queue> {
        let q = self.queues.remove(key)?;
        self.timers.remove(&q.deadline);
        self.mem -= q.mem;
        Some(q)
    }

    /// Abandon a packet: this fragment and every held one are dropped for `reason`;
    /// ReasmFails once for the packet (Linux `inet_frag_kill` then `REASMFAILS`).
    fn discard(&mut self, key: FragKey6, reason: DropReason, mib: &mut Mib) -> Outcome6 {
        let held = self.remove(&key).map_or(0, |q| q.frags.len());
        for _ in 0..=held {
            mib.drop(reason);
        }
        mib.inc(Counter::Ip6ReasmFails);
        Outcome6::Dropped
    }

    /// Drop the packets whose time is up (Linux `ip6_frag_expire`): each counts
    /// ReasmTimeout and ReasmFails once, its fragments `IP6_FRAG_REASM_TIMEOUT`.
    pub fn expire(&mut self, now: Instant, mib: &mut Mib) -> Vec<Expired6> {
        let mut out = Vec::new();
        while let Some((&(at, seq), &key)) = self.timers.iter().next() {
            if at > now {
                break;
            }
            self.timers.remove(&(at, seq));
            let Some(q) = self.queues.remove(&key) else {
                continue;
            };
            self.mem -= q.mem;
            for _ in 0..q.frags.len() {
                mib.drop(DropReason::Ip6FragTimeout);
            }
            mib.inc(Counter::Ip6ReasmTimeout);
            mib.inc(Counter::Ip6ReasmFails);
            out.push(Expired6 {
                key,
                first: q.head.map(|(_, _, packet)| packet),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ustack_wire::IpProtocol;

    const KEY: FragKey6 = FragKey6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
        ident: 7,
    };

    fn r() -> (Reassembler6, Mib) {
        let cfg = Reasm6Config {
            high_thresh: 64 * 1024,
            timeout: Duration::from_secs(60),
        };
        (Reassembler6::new(cfg, KeyedState::from_seed(3)), Mib::new())
    }

    const FIRST: First<'static> = First {
        head: b"head",
        nh_field: 6,
        packet: b"p",
    };

    fn piece(offset: u16, more_frags: bool) -> FragRepr {
        FragRepr {
            next_header: IpProtocol::Icmpv6,
            offset,
            more_frags,
            ident: KEY.ident,
        }
    }

    fn add(r: &mut Reassembler6, mib: &mut Mib, off: u16, more: bool, data: &[u8]) -> Outcome6 {
        r.add(Instant::ZERO, KEY, piece(off, more), data, FIRST, mib)
    }

    #[test]
    fn any_order_reassembles() {
        let (mut r, mut mib) = r();
        let data: Vec<u8> = (0..=255).cycle().take(3000).collect();
        assert!(matches!(
            add(&mut r, &mut mib, 2000, false, &data[2000..]),
            Outcome6::Pending
        ));
        assert!(matches!(
            add(&mut r, &mut mib, 0, true, &data[..1000]),
            Outcome6::Pending
        ));
        let Outcome6::Complete(done) = add(&mut r, &mut mib, 1000, true, &data[1000..2000]) else {
            panic!("three fragments make the packet");
        };
        assert_eq!(done.payload, data);
        assert_eq!(done.head, b"head");
        assert_eq!((r.mem(), r.queues()), (0, 0));
    }

    #[test]
    fn overlap_discards_the_packet_and_duplicate_only_itself() {
        let (mut r, mut mib) = r();
        add(&mut r, &mut mib, 0, true, &[1; 16]);
        assert!(matches!(
            add(&mut r, &mut mib, 0, true, &[1; 16]),
            Outcome6::Pending
        ));
        assert_eq!(mib.drops(DropReason::Ip6FragDup), 1);
        assert_eq!(r.queues(), 1, "a duplicate keeps the packet");
        assert!(matches!(
            add(&mut r, &mut mib, 8, true, &[2; 16]),
            Outcome6::Dropped
        ));
        assert_eq!(
            mib.drops(DropReason::Ip6FragOverlap),
            2,
            "the held one and the new one"
        );
        assert_eq!(mib.get(Counter::Ip6ReasmFails), 1);
        assert_eq!((r.mem(), r.queues()), (0, 0));
    }

    #[test]
    fn memory_bound_refuses_and_expiry_frees() {
        let (mut r, mut mib) = r();
        let mut refused = 0;
        for i in 0..200u32 {
            let key = FragKey6 { ident: i, ..KEY };
            if matches!(
                r.add(
                    Instant::ZERO,
                    key,
                    piece(0, true),
                    &[0; 1024],
                    FIRST,
                    &mut mib
                ),
                Outcome6::Dropped
            ) {
                refused += 1;
            }
            assert!(r.mem() <= 64 * 1024);
        }
        assert!(refused > 100, "{refused} refused");
        assert_eq!(mib.drops(DropReason::Ip6FragMemLimit), refused);
        let expired = r.expire(Instant::ZERO + Duration::from_secs(60), &mut mib);
        assert_eq!(expired.len() as u64, 200 - refused);
        assert!(
            expired
                .iter()
                .all(|e| e.first.as_deref() == Some(&b"p"[..]))
        );
        assert_eq!(mib.get(Counter::Ip6ReasmTimeout), 200 - refused);
        assert_eq!((r.mem(), r.queues()), (0, 0));
    }

    #[test]
    fn contradicting_ends_are_invalid() {
        let (mut r, mut mib) = r();
        add(&mut r, &mut mib, 8, false, &[0; 56]);
        // Data past the known end (64).
        assert!(matches!(
            add(&mut r, &mut mib, 64, true, &[0; 8]),
            Outcome6::Dropped
        ));
        assert!(mib.drops(DropReason::Ip6FragInvalid) >= 1);
    }
}
