//! IPv4 fragment reassembly: [RFC 791 §3.2](https://www.rfc-editor.org/rfc/rfc791#section-3.2)
//! ("Fragmentation and Reassembly"), with Linux's queue discipline, limits and counters.
//!
//! Reading list:
//! - RFC 791 §3.1 (Identification, Flags, Fragment Offset) and §3.2 (the reassembly procedure).
//! - [RFC 815](https://www.rfc-editor.org/rfc/rfc815), "IP datagram reassembly algorithms":
//!   track which parts are still missing instead of a bit per 8-byte block. RFC 815 keeps a
//!   list of holes; like Linux we keep the received ranges, sorted by offset, and know the
//!   datagram is whole when the last fragment is in and the bytes held ("meat") equal its
//!   length.
//! - [RFC 5722 §4](https://www.rfc-editor.org/rfc/rfc5722#section-4) (written for IPv6; Linux
//!   applies it to IPv4 since 2018): an overlapping fragment discards the whole datagram.
//! - [RFC 3168 §5.3](https://www.rfc-editor.org/rfc/rfc3168#section-5.3): ECN codepoints across
//!   fragments.
//! - [RFC 792](https://www.rfc-editor.org/rfc/rfc792) Time Exceeded, code 1 ("fragment reassembly
//!   time exceeded"), sent by the stack from what [`Reassembler::expire`] returns.
//! - Linux `net/ipv4/ip_fragment.c` (`ip_defrag`, `ip_frag_queue`, `ip_frag_too_far`,
//!   `ip_frag_reinit`, `ip_frag_reasm`, `ip_expire`) and `net/ipv4/inet_fragment.c`
//!   (`inet_frag_find`, `inet_frag_queue_insert`, `ip_frag_ecn_table`).
//!
//! Call graph (the stack is sans-I/O; every entry point takes `now`):
//! ```text
//! Stack::receive -> ipv4 input (MF set or offset != 0) -> Reassembler::add
//!     add: ReasmReqds++ -> expire_due -> memory check (inet_frag_find) -> find/create queue
//!          -> ip_frag_too_far / reinit -> length checks -> insert (dup / overlap)
//!          -> all bytes present? -> reassemble (ip_frag_reasm) -> Outcome::Complete
//! Stack::poll_timeout  -> Reassembler::poll_at
//! Stack::handle_timeout -> Reassembler::expire -> ICMP Time Exceeded (code 1) for each
//!                          Expired with `first` (offset 0) present, as ip_expire does
//! ```
//!
//! # Where this differs from Linux, and why
//! - Memory bound: Linux's `inet_frag_find` refuses every fragment (new queue or not) while the
//!   memory charged exceeds `ipfrag_high_thresh`, so one fragment can overshoot it. We refuse a
//!   fragment if accepting it would take [`Reassembler::mem`] above `high_thresh`, so `mem()`
//!   never exceeds it. Like Linux since 4.17 we never evict queues to make room: an attacker
//!   filling memory with incomplete datagrams stalls reassembly until their timers run out, but
//!   cannot make us drop datagrams that were already in progress.
//! - A datagram that would exceed 65,535 bytes is discarded as soon as a fragment shows it
//!   (end of data + a minimal 20-byte header > 65,535), not when it completes ("Oversized IP
//!   packet" in `ip_frag_reasm`); it could never complete, so holding it only wastes memory.
//! - A queue past its deadline is expired by the next call that sees a later `now` ([`add`]
//!   too, not only [`expire`]), since Linux's timer would have fired; [`expire`] returns it.
//! - Memory is charged as payload bytes plus [`FRAG_OVERHEAD`] per fragment and
//!   [`QUEUE_OVERHEAD`] per queue, where Linux charges `skb->truesize` and `sizeof(struct ipq)`.
//! - Fragments per datagram are capped at [`IPFRAG_MAX_FRAGS`] (1,365, what the largest
//!   datagram needs over a 68-byte MTU); a datagram that needs more is discarded whole
//!   (`FRAG_TOO_MANY`). Linux has no such cap (FragmentSmack, CVE-2018-5391, was fixed there
//!   by the rbtree queue, coalescing of in-order runs and a lower `ipfrag_high_thresh`); here
//!   it bounds a queue's tree depth and memory whatever `ipfrag_high_thresh` is. Held
//!   fragments are keyed in a B-tree, so an insert costs O(log fragments).
//! - Counting: every fragment dropped is one `Mib::drop`, and the drop reasons bump
//!   `Ip ReasmFails` (see [`Reassembler`]), so ReasmFails counts fragments, where Linux counts
//!   failed datagrams.
//!
//! [`add`]: Reassembler::add
//! [`expire`]: Reassembler::expire

use core::fmt;
use core::net::Ipv4Addr;
use core::ops::Deref;
use core::time::Duration;
use std::collections::BTreeMap;

use crate::secret::KeyedState;
use hashbrown::HashMap;
use hashbrown::hash_map::Entry;
use ustack_obs::{Counter, DropReason, Instant, Mib};
use ustack_wire::checksum;

use crate::counted::Key;

/// Bytes charged per held fragment on top of its payload: its entry in the queue's ordered map
/// (offset, end, boxed slice: 32 bytes, doubled for B-tree nodes that are half full) plus the
/// allocator's header for the payload allocation, rounded up. Checked against the real type
/// sizes by a test.
pub const FRAG_OVERHEAD: usize = 96;

/// Bytes charged per queue (one incomplete datagram): the queue state with its key in the hash
/// table (slot and control byte at the table's maximum load), its deadline entry, and its share
/// of the per-source counters used by `ipfrag_max_dist`; Linux charges `sizeof(struct ipq)`.
/// Checked against the real type sizes by a test.
pub const QUEUE_OVERHEAD: usize = 320;

/// The most fragments one datagram may be held in (FragmentSmack, CVE-2018-5391: a
/// datagram cut into thousands of 8-byte fragments costs a queue entry per fragment). The
/// smallest MTU an IPv4 path may have is 68 bytes (RFC 791 §3.2: "Every internet module
/// must be able to forward a datagram of 68 octets without further fragmentation"), which
/// with a 20-byte header carries 48 bytes per fragment: 1,365 fragments for the largest
/// datagram. A datagram that needs more is discarded whole (`FRAG_TOO_MANY`).
/// ustack-specific: Linux relies on `ipfrag_high_thresh` and the per-skb truesize alone
/// (FreeBSD has `net.inet.ip.maxfragsperpacket`, default 16).
pub const IPFRAG_MAX_FRAGS: usize =
    (MAX_DATAGRAM_LEN - MIN_HEADER_LEN).div_ceil(68 - MIN_HEADER_LEN);

/// IHL bounds: 5..=15 32-bit words (RFC 791 §3.1).
const MIN_HEADER_LEN: usize = 20;
const MAX_HEADER_LEN: usize = 60;
/// Total Length is a 16-bit field, header included (RFC 791 §3.1).
const MAX_DATAGRAM_LEN: usize = 65_535;

/// The DF bit in the Flags/Fragment Offset word (RFC 791 §3.1).
const IP_DF: u16 = 0x4000;

/// ECN codepoints seen among a datagram's fragments, one bit each (Linux `IPFRAG_ECN_*`,
/// `include/net/inet_ecn.h` / `inet_frag.h`): bit `1 << (tos & 3)`.
const IPFRAG_ECN_NOT_ECT: u8 = 0x01;
const IPFRAG_ECN_ECT_1: u8 = 0x02;
const IPFRAG_ECN_ECT_0: u8 = 0x04;
const IPFRAG_ECN_CE: u8 = 0x08;
/// The CE codepoint in the TOS byte's low two bits.
const INET_ECN_CE: u8 = 0x03;
/// Marks a combination that must be dropped.
const ECN_DROP: u8 = 0xff;

/// Linux `ip_frag_ecn_table` (`net/ipv4/inet_fragment.c`), RFC 3168 §5.3: indexed by the OR of
/// the fragments' `IPFRAG_ECN_*` bits; CE on some fragment and ECT on the others gives a CE
/// datagram; Not-ECT mixed with any ECN-capable codepoint is dropped; anything else is kept as
/// the first fragment's header says.
const IP_FRAG_ECN_TABLE: [u8; 16] = {
    let mut table = [0u8; 16];
    let mut seen = 0;
    while seen < 16 {
        let s = seen as u8;
        let ect_or_ce = IPFRAG_ECN_ECT_0 | IPFRAG_ECN_ECT_1 | IPFRAG_ECN_CE;
        table[seen] = if s & IPFRAG_ECN_NOT_ECT != 0 && s & ect_or_ce != 0 {
            ECN_DROP
        } else if s & IPFRAG_ECN_CE != 0 && s & (IPFRAG_ECN_ECT_0 | IPFRAG_ECN_ECT_1) != 0 {
            INET_ECN_CE
        } else {
            0
        };
        seen += 1;
    }
    table
};

/// What identifies the fragments of one datagram. RFC 791 §3.2: "The internet identification
/// field (ID) is used together with the source and destination address, and the protocol
/// fields, to identify datagram fragments for reassembly."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FragKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Identification field.
    pub ident: u16,
    /// Protocol field.
    pub protocol: u8,
}

/// Reassembly limits, named after Linux's sysctls (`Documentation/networking/ip-sysctl.rst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReasmConfig {
    /// `ipfrag_high_thresh`, bytes: the most memory reassembly may hold, as [`Reassembler::mem`]
    /// counts it. A fragment that would take it higher is refused (`FragMemLimit`). 0 disables
    /// reassembly (every fragment is refused), as in Linux. Default 4 MiB.
    pub high_thresh: usize,
    /// `ipfrag_low_thresh`, bytes. Obsolete in Linux since 4.17 ("Maximum memory used to
    /// reassemble IP fragments before the kernel begins to remove incomplete fragment queues";
    /// nothing evicts queues any more): it survives only as the lower bound of the values
    /// `ipfrag_high_thresh` accepts (and `high_thresh` is its upper bound). Unused here; kept so
    /// the sysctl table is Linux's. Default 3 MiB.
    pub low_thresh: usize,
    /// `ipfrag_time`: how long an incomplete datagram is kept, counted from its first fragment
    /// (and restarted when `max_dist` reinitialises the queue). RFC 791 §3.2 suggested 15 s;
    /// Linux's default is 30 s.
    pub timeout: Duration,
    /// `ipfrag_max_dist`: if this many fragments (or more) from the same source arrive between
    /// two fragments of one datagram, some of its fragments are presumed lost and its queue is
    /// restarted (Linux `ip_frag_too_far`). 0 disables the check. Default 64.
    pub max_dist: u32,
}

impl Default for ReasmConfig {
    /// Linux's defaults (`ipv4_frags_init_net`).
    fn default() -> Self {
        ReasmConfig {
            high_thresh: 4 * 1024 * 1024,
            low_thresh: 3 * 1024 * 1024,
            timeout: Duration::from_secs(30),
            max_dist: 64,
        }
    }
}

/// A copy of an IPv4 header (20 to 60 bytes, options included).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HeaderCopy {
    bytes: [u8; MAX_HEADER_LEN],
    len: u8,
}

impl HeaderCopy {
    /// Copies `header` if its length is a valid IPv4 header length (20..=60).
    fn new(header: &[u8]) -> Option<HeaderCopy> {
        if !(MIN_HEADER_LEN..=MAX_HEADER_LEN).contains(&header.len()) {
            return None;
        }
        let mut bytes = [0u8; MAX_HEADER_LEN];
        bytes[..header.len()].copy_from_slice(header);
        Some(HeaderCopy {
            bytes,
            len: header.len() as u8,
        })
    }

    /// The header bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The header length in bytes (20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.len)
    }
}

impl Deref for HeaderCopy {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for HeaderCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeaderCopy(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A datagram put back together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassembled {
    /// Which datagram.
    pub key: FragKey,
    /// The first fragment's (offset 0) header, options included, fixed up as Linux's
    /// `ip_frag_reasm` does: Total Length covers the whole datagram, the fragment offset and MF
    /// are cleared, DF is set only if the largest fragment had DF set (Linux
    /// `IPSKB_FRAG_PMTU`), CE is set per RFC 3168 §5.3, and the checksum is recomputed. It is
    /// what ICMP errors about this datagram quote.
    pub header: HeaderCopy,
    /// The datagram's payload (everything after the header).
    pub payload: Vec<u8>,
    /// How many fragments it was built from.
    pub fragments: usize,
}

/// The offset-0 fragment of an expired datagram, for the ICMP Time Exceeded message's quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstFragment {
    /// Its IP header as received.
    pub header: HeaderCopy,
    /// Its payload (the leading bytes of the datagram).
    pub data: Vec<u8>,
}

/// A datagram whose reassembly timed out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expired {
    /// Which datagram.
    pub key: FragKey,
    /// When it expired (its deadline).
    pub deadline: Instant,
    /// How many fragments were freed (each counted as a `FragReasmTimeout` drop).
    pub fragments: usize,
    /// The offset-0 fragment, if it had arrived. RFC 792: "If fragment zero is not available then
    /// no time exceeded need be sent at all." Linux `ip_expire` sends ICMP Time Exceeded code 1
    /// only in that case, and only if the datagram was for this host.
    pub first: Option<FirstFragment>,
}

/// What became of one fragment handed to [`Reassembler::add`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Held, waiting for the rest of its datagram.
    Pending,
    /// It completed its datagram.
    Complete(Reassembled),
    /// It was dropped, for this reason (perhaps with the rest of its datagram). Already counted
    /// in the [`Mib`]: the caller must not count it again.
    Dropped(DropReason),
}

/// One held fragment; its offset is the key it is stored under.
struct Frag {
    /// One past its last byte's offset in the datagram's payload.
    end: u32,
    data: Box<[u8]>,
}

/// One incomplete datagram (Linux `struct ipq` / `struct inet_frag_queue`).
struct Queue {
    /// Held fragments by offset; never overlapping.
    frags: BTreeMap<Key, Frag>,
    /// `q.len`: the payload length once the last fragment (MF=0) is in, else the highest end
    /// seen so far.
    len: u32,
    /// `q.meat`: payload bytes held.
    meat: u32,
    /// `INET_FRAG_FIRST_IN`: the offset-0 fragment is held; `head_header` is its header.
    head_header: Option<HeaderCopy>,
    /// `INET_FRAG_LAST_IN`: the MF=0 fragment is held (or was seen), `len` is final.
    last_in: bool,
    /// OR of `IPFRAG_ECN_*` over the fragments held.
    ecn: u8,
    /// Largest fragment (IP header + payload), and largest with DF set (`ip_frag_reasm`).
    max_size: u32,
    max_df_size: u32,
    /// The source's fragment counter when this queue last got a fragment (`qp->rid`).
    rid: u32,
    /// Whether this queue holds a reference on `Reassembler::peers[key.src]`.
    has_peer: bool,
    /// Key of this queue's deadline in `Reassembler::timers`.
    timer: (Instant, u64),
    /// Bytes charged for this queue, [`QUEUE_OVERHEAD`] included.
    mem: usize,
}

impl Queue {
    /// Forget every fragment and all per-datagram state (Linux `ip_frag_reinit`); returns how
    /// many fragments and bytes were freed.
    fn purge(&mut self) -> (usize, usize) {
        let n = self.frags.len();
        let freed = self.mem - QUEUE_OVERHEAD;
        self.frags.clear();
        self.len = 0;
        self.meat = 0;
        self.head_header = None;
        self.last_in = false;
        self.ecn = 0;
        self.max_size = 0;
        self.max_df_size = 0;
        self.mem = QUEUE_OVERHEAD;
        (n, freed)
    }
}

/// Fragments seen from one source (Linux's `inet_peer.rid`), kept while a queue needs it.
#[derive(Debug, Clone, Copy)]
struct Peer {
    /// Fragments received from this source, wrapping.
    rid: u32,
    /// Queues holding a reference.
    refs: u32,
}

/// Where a new fragment `[offset, end)` falls among the held ones
/// (Linux `inet_frag_queue_insert`).
enum Slot {
    /// Touches nothing held.
    Free,
    /// Lies entirely within one held fragment: a duplicate.
    Dup,
    /// Overlaps held data without being contained in one fragment.
    Overlap,
}

/// What `add` decided while it had the queue borrowed.
enum Step {
    Queued,
    Complete,
    Dup,
    Discard(DropReason),
}

/// IPv4 reassembly state for one stack (one shard): the incomplete datagrams, their deadlines
/// and the memory they hold.
///
/// Call order: [`add`](Reassembler::add) for each fragment received;
/// [`poll_at`](Reassembler::poll_at) for the next deadline; [`expire`](Reassembler::expire)
/// when it has passed.
///
/// Counting rules (what the [`Mib`] sees). Every fragment is counted once when it arrives and
/// once when it leaves, so that at any time
/// `Ip ReasmReqds == Σ Reassembled::fragments + Σ drops(Frag* reasons) + fragments()`
/// and `Σ drops(Frag* reasons) == Ip ReasmFails`:
/// - `Ip ReasmReqds`: +1 per [`add`](Reassembler::add) call (Linux `ip_defrag`).
/// - Every fragment ends in exactly one place: held ([`fragments`](Reassembler::fragments)),
///   delivered in a [`Reassembled`] (its `fragments`), or dropped with one [`Mib::drop`] of
///   its reason. When a datagram is discarded, every fragment it held is dropped with the
///   discard's reason, and so is the fragment that caused it. Reasons: `FragMemLimit`
///   (refused, over `high_thresh`), `FragTooFar` (freed by a `max_dist` restart), `DupFrag`,
///   `FragOverlap`, `FragInvalid` (length checks, oversize, caller input, Not-ECT/ECT mix),
///   `FragTooMany` (more than [`IPFRAG_MAX_FRAGS`]), `FragReasmTimeout`.
/// - `Ip ReasmFails` and `IpExt ReasmOverlaps` are bumped by those drops, per the table in
///   `ustack_obs::drop`: every `Frag*`/`DupFrag` drop bumps ReasmFails, `FragOverlap` also
///   ReasmOverlaps. So both count fragments. (Linux counts ReasmFails once per failed
///   datagram, per refused fragment and per `max_dist` restart, not for duplicates, and
///   ReasmOverlaps once per datagram.)
/// - `Ip ReasmOKs`: +1 per datagram reassembled.
/// - `Ip ReasmTimeout`: +1 per datagram expired, by [`expire`](Reassembler::expire) (the
///   stack must not count it again).
pub struct Reassembler {
    cfg: ReasmConfig,
    queues: HashMap<FragKey, Queue, KeyedState>,
    /// Deadlines in order; the `u64` makes keys unique.
    timers: BTreeMap<(Instant, u64), FragKey>,
    next_timer_id: u64,
    /// Per-source fragment counters for `max_dist`.
    peers: HashMap<Ipv4Addr, Peer, KeyedState>,
    /// Bytes charged (queues, their fragments, and `expired`).
    mem: usize,
    /// Fragments held in queues.
    held: usize,
    /// Datagrams expired by `add` (which cannot return them), for the next `expire`.
    expired: Vec<Expired>,
}

impl fmt::Debug for Reassembler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reassembler")
            .field("cfg", &self.cfg)
            .field("queues", &self.queues.len())
            .field("fragments", &self.held)
            .field("mem", &self.mem)
            .field("expired", &self.expired.len())
            .finish()
    }
}

/// The charge for one held fragment of `len` payload bytes.
const fn frag_cost(len: usize) -> usize {
    FRAG_OVERHEAD + len
}

/// Count `n` fragments dropped for `reason`.
fn drop_fragments(mib: &mut Mib, reason: DropReason, n: usize) {
    for _ in 0..n {
        mib.drop(reason);
    }
}

impl Reassembler {
    /// An empty reassembler. `queues` and `peers` key the hashes of the queue table and
    /// the per-source table, whose keys the network chooses: pass states keyed with
    /// secrets (the stack's) so that a sender cannot aim many datagrams at one bucket.
    pub fn new(cfg: ReasmConfig, queues: KeyedState, peers: KeyedState) -> Reassembler {
        Reassembler {
            cfg,
            queues: HashMap::with_hasher(queues),
            timers: BTreeMap::new(),
            next_timer_id: 0,
            peers: HashMap::with_hasher(peers),
            mem: 0,
            held: 0,
            expired: Vec::new(),
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &ReasmConfig {
        &self.cfg
    }

    /// Change the limits (a sysctl write). Like Linux, lowering `high_thresh` frees nothing: it
    /// only refuses fragments until enough datagrams complete or expire; a new `timeout`
    /// applies to queues created from now on.
    pub fn set_config(&mut self, cfg: ReasmConfig) {
        self.cfg = cfg;
    }

    /// Bytes charged: each held fragment's payload plus [`FRAG_OVERHEAD`], [`QUEUE_OVERHEAD`] per
    /// queue, and the offset-0 fragments of expired datagrams not yet handed out by
    /// [`expire`](Reassembler::expire) (payload plus [`FRAG_OVERHEAD`] each). Never exceeds
    /// `high_thresh` through [`add`](Reassembler::add).
    pub fn mem(&self) -> usize {
        self.mem
    }

    /// Incomplete datagrams held.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Fragments held in incomplete datagrams.
    pub fn fragments(&self) -> usize {
        self.held
    }

    /// The earliest deadline, or `None` with nothing held. If it is not later than `now`, call
    /// [`expire`](Reassembler::expire).
    #[inline]
    pub fn poll_at(&self) -> Option<Instant> {
        let queued = self.timers.first_key_value().map(|(&(t, _), _)| t);
        let pending = self.expired.first().map(|e| e.deadline);
        crate::stack::earliest(queued, pending)
    }

    /// Expire every datagram whose deadline is not later than `now` (RFC 791 §3.2: "If the
    /// timer runs out, the all reassembly resources for this buffer identifier are released";
    /// Linux `ip_expire`), and return them, oldest first, with any that [`add`] expired since
    /// the last call. Per datagram: `Ip ReasmTimeout` +1; per fragment freed: one
    /// `FragReasmTimeout` drop (which bumps `Ip ReasmFails`). The stack sends ICMP Time Exceeded, code 1, for each
    /// one whose `first` is `Some` and that was addressed to this host.
    ///
    /// [`add`]: Reassembler::add
    pub fn expire(&mut self, now: Instant, mib: &mut Mib) -> Vec<Expired> {
        self.expire_due(now, mib);
        for e in &self.expired {
            self.mem -= frag_cost(e.first.as_ref().map_or(0, |f| f.data.len()));
        }
        if self.queues.is_empty() && self.queues.capacity() > 1024 {
            // A flood grew the tables; give the memory back once it is over.
            self.queues.shrink_to_fit();
            self.peers.shrink_to_fit();
        }
        core::mem::take(&mut self.expired)
    }

    /// Take one fragment: a datagram's bytes `offset..offset + data.len()` (`offset` in bytes,
    /// a multiple of 8), `more` its MF flag, `header` its IP header (options included; its TOS
    /// and DF bits are read, and the offset-0 fragment's is kept), `data` its payload (bounded
    /// by Total Length). Returns what became of it; counters are already updated (see
    /// [`Reassembler`]'s counting rules).
    ///
    /// Steps, in Linux `ip_defrag` / `ip_frag_queue` order:
    /// 1. expire datagrams past their deadline (their timers would have fired);
    /// 2. refuse the fragment if holding it would exceed `high_thresh` (`FragMemLimit`);
    /// 3. find or create the queue; restart it if more than `max_dist` fragments from the
    ///    source arrived since its last one (`FragTooFar` for what it held);
    /// 4. check lengths against the datagram's end (`FragInvalid` discards the datagram);
    /// 5. insert: a duplicate is dropped (`DupFrag`), an overlap discards the datagram
    ///    (`FragOverlap`), and so does a fragment past [`IPFRAG_MAX_FRAGS`] (`FragTooMany`);
    /// 6. if every byte from 0 to the end is held, reassemble.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        now: Instant,
        key: FragKey,
        offset: u16,
        more: bool,
        header: &[u8],
        data: &[u8],
        mib: &mut Mib,
    ) -> Outcome {
        mib.inc(Counter::IpReasmReqds);
        self.expire_due(now, mib);

        // What the caller parsed from a header; anything else cannot come from a valid one.
        let Some(header) = HeaderCopy::new(header) else {
            return self.drop_one(mib, DropReason::FragInvalid);
        };
        if !offset.is_multiple_of(8) || data.len() > MAX_DATAGRAM_LEN {
            return self.drop_one(mib, DropReason::FragInvalid);
        }
        let offset = u32::from(offset);
        let mut end = offset + data.len() as u32;
        if more {
            // RFC 791 §3.2: "If an internet datagram is fragmented, its data portion must be
            // broken on 8 octet boundaries." Linux (ip_frag_queue) trims a non-last fragment to
            // a multiple of 8 rather than rejecting it; so do we. `offset` is a multiple of 8,
            // so `end` stays >= `offset`.
            end &= !7;
        }
        let kept = (end - offset) as usize;

        // 2. Memory (Linux inet_frag_find refuses when over ipfrag_high_thresh; we refuse when
        // this fragment would take us over, so the bound is exact).
        let is_new = !self.queues.contains_key(&key);
        let cost = frag_cost(kept) + if is_new { QUEUE_OVERHEAD } else { 0 };
        if self.mem + cost > self.cfg.high_thresh {
            return self.drop_one(mib, DropReason::FragMemLimit);
        }

        // 3. Find or create the queue (its timer starts with the first fragment: ip_find).
        let q = match self.queues.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let deadline = now + self.cfg.timeout;
                let timer = (deadline, self.next_timer_id);
                self.next_timer_id += 1;
                self.timers.insert(timer, key);
                let has_peer = self.cfg.max_dist != 0;
                if has_peer {
                    self.peers
                        .entry(key.src)
                        .or_insert(Peer { rid: 0, refs: 0 })
                        .refs += 1;
                }
                self.mem += QUEUE_OVERHEAD;
                e.insert(Queue {
                    frags: BTreeMap::new(),
                    len: 0,
                    meat: 0,
                    head_header: None,
                    last_in: false,
                    ecn: 0,
                    max_size: 0,
                    max_df_size: 0,
                    rid: 0,
                    has_peer,
                    timer,
                    mem: QUEUE_OVERHEAD,
                })
            }
        };

        // Linux ip_frag_too_far: a datagram that max_dist or more of its source's fragments
        // overtook has likely lost fragments; restart its queue (ip_frag_reinit) rather than risk
        // gluing fragments of two datagrams that reused the 16-bit ident.
        if self.cfg.max_dist != 0
            && q.has_peer
            && let Some(peer) = self.peers.get_mut(&key.src)
        {
            peer.rid = peer.rid.wrapping_add(1);
            let start = q.rid;
            q.rid = peer.rid;
            if !q.frags.is_empty() && peer.rid.wrapping_sub(start) > self.cfg.max_dist {
                let (n, freed) = q.purge();
                self.mem -= freed;
                self.held -= n;
                drop_fragments(mib, DropReason::FragTooFar, n);
                // mod_timer: the restarted queue gets a full timeout.
                self.timers.remove(&q.timer);
                q.timer = (now + self.cfg.timeout, self.next_timer_id);
                self.next_timer_id += 1;
                self.timers.insert(q.timer, key);
            }
        }

        let step = 'step: {
            // 4. Lengths (Linux ip_frag_queue).
            if !more {
                // The last fragment fixes the length: "If we already have some bits beyond
                // end or have different end, the segment is corrupted."
                if end < q.len || (q.last_in && end != q.len) {
                    break 'step Step::Discard(DropReason::FragInvalid);
                }
                q.last_in = true;
                q.len = end;
            } else if end > q.len {
                // Data beyond the known end: corrupted.
                if q.last_in {
                    break 'step Step::Discard(DropReason::FragInvalid);
                }
                q.len = end;
            }
            if end == offset {
                // An empty fragment (or one trimmed to nothing) carries nothing to place.
                break 'step Step::Discard(DropReason::FragInvalid);
            }
            if MIN_HEADER_LEN + end as usize > MAX_DATAGRAM_LEN {
                // Can never fit a Total Length ("Oversized IP packet", ip_frag_reasm).
                break 'step Step::Discard(DropReason::FragInvalid);
            }

            // 5. Insert (Linux inet_frag_queue_insert). RFC 5722 §4, amended by Errata 3089:
            // "if one or more its constituent fragments is determined to be an overlapping
            // fragment, the entire datagram (and any constituent fragments) MUST be silently
            // discarded." Duplicates (contained in one held fragment) are dropped alone.
            match slot(&q.frags, offset, end) {
                Slot::Dup => break 'step Step::Dup,
                Slot::Overlap => break 'step Step::Discard(DropReason::FragOverlap),
                Slot::Free => {}
            }
            if q.frags.len() >= IPFRAG_MAX_FRAGS {
                // FragmentSmack (CVE-2018-5391): no datagram from a real path needs more
                // fragments than this; one that does is discarded whole.
                break 'step Step::Discard(DropReason::FragTooMany);
            }
            let data = Box::<[u8]>::from(&data[..kept]);
            q.frags.insert(Key(offset), Frag { end, data });
            q.meat += kept as u32;
            q.mem += frag_cost(kept);
            self.mem += frag_cost(kept);
            self.held += 1;
            q.ecn |= 1 << (header.as_bytes()[1] & 3);
            let fragsize = (header.header_len() + kept) as u32;
            q.max_size = q.max_size.max(fragsize);
            let frag_off = u16::from_be_bytes([header[6], header[7]]);
            if frag_off & IP_DF != 0 {
                q.max_df_size = q.max_df_size.max(fragsize);
            }
            if offset == 0 {
                q.head_header = Some(header);
            }

            // 6. Complete when the first and last fragments are in and no hole remains.
            if q.head_header.is_some() && q.last_in && q.meat == q.len {
                Step::Complete
            } else {
                Step::Queued
            }
        };

        match step {
            Step::Queued => Outcome::Pending,
            Step::Complete => self.reassemble(key, mib),
            Step::Dup => self.drop_one(mib, DropReason::DupFrag),
            Step::Discard(reason) => {
                self.discard(key, reason, mib);
                self.drop_one(mib, reason)
            }
        }
    }

    /// Drop the fragment being added, alone.
    fn drop_one(&mut self, mib: &mut Mib, reason: DropReason) -> Outcome {
        mib.drop(reason);
        Outcome::Dropped(reason)
    }

    /// Unlink a queue: table, timer, peer reference, memory and fragment counts.
    fn remove_queue(&mut self, key: &FragKey) -> Option<Queue> {
        let q = self.queues.remove(key)?;
        self.timers.remove(&q.timer);
        if q.has_peer
            && let Some(peer) = self.peers.get_mut(&key.src)
        {
            peer.refs -= 1;
            if peer.refs == 0 {
                self.peers.remove(&key.src);
            }
        }
        self.mem -= q.mem;
        self.held -= q.frags.len();
        Some(q)
    }

    /// Discard a datagram and everything it holds (Linux `inet_frag_kill`).
    fn discard(&mut self, key: FragKey, reason: DropReason, mib: &mut Mib) {
        if let Some(q) = self.remove_queue(&key) {
            drop_fragments(mib, reason, q.frags.len());
        }
    }

    /// Glue a complete datagram together (Linux `ip_frag_reasm`).
    fn reassemble(&mut self, key: FragKey, mib: &mut Mib) -> Outcome {
        let Some(q) = self.remove_queue(&key) else {
            return self.drop_one(mib, DropReason::FragInvalid);
        };
        let n = q.frags.len();
        let fail = |mib: &mut Mib| {
            drop_fragments(mib, DropReason::FragInvalid, n);
            Outcome::Dropped(DropReason::FragInvalid)
        };
        let Some(mut header) = q.head_header else {
            return fail(mib);
        };
        let total_len = header.header_len() + q.len as usize;
        if total_len > MAX_DATAGRAM_LEN {
            // "Oversized IP packet": the first fragment's options made it too long.
            return fail(mib);
        }
        let ecn = IP_FRAG_ECN_TABLE[usize::from(q.ecn & 0x0f)];
        if ecn == ECN_DROP {
            // RFC 3168 §5.3: Not-ECT and ECN-capable fragments in one datagram.
            return fail(mib);
        }

        let mut payload = Vec::with_capacity(q.len as usize);
        for frag in q.frags.into_values() {
            payload.extend_from_slice(&frag.data);
        }

        let hlen = header.header_len();
        let h = &mut header.bytes[..hlen];
        h[1] |= ecn;
        h[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
        // DF only if every fragment of the largest size had it (path MTU discovery in
        // progress: forwarding must keep it), as ip_frag_reasm.
        let frag_off = if q.max_df_size == q.max_size {
            IP_DF
        } else {
            0
        };
        h[6..8].copy_from_slice(&frag_off.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let sum = checksum::checksum(h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());

        mib.inc(Counter::IpReasmOKs);
        Outcome::Complete(Reassembled {
            key,
            header,
            payload,
            fragments: n,
        })
    }

    /// Move every queue whose deadline is not later than `now` to `expired`.
    fn expire_due(&mut self, now: Instant, mib: &mut Mib) {
        while let Some((&(deadline, _), &key)) = self.timers.first_key_value() {
            if deadline > now {
                break;
            }
            let Some(mut q) = self.remove_queue(&key) else {
                // Unreachable: every timer belongs to a queue. Drop the stray entry.
                self.timers.pop_first();
                continue;
            };
            let n = q.frags.len();
            mib.inc(Counter::IpReasmTimeout);
            drop_fragments(mib, DropReason::FragReasmTimeout, n);
            let first = match (q.head_header, q.frags.remove(&Key(0))) {
                (Some(header), Some(frag)) => {
                    let data = Vec::from(frag.data);
                    // Held until handed out by `expire`.
                    self.mem += frag_cost(data.len());
                    Some(FirstFragment { header, data })
                }
                _ => None,
            };
            if first.is_none() {
                self.mem += frag_cost(0);
            }
            self.expired.push(Expired {
                key,
                deadline,
                fragments: n,
                first,
            });
        }
    }
}

/// Where `[offset, end)` falls among `frags` (Linux `inet_frag_queue_insert`).
fn slot(frags: &BTreeMap<Key, Frag>, offset: u32, end: u32) -> Slot {
    // The held fragment starting at or before `offset`: it either contains the new one (a
    // duplicate), overlaps its start, or ends before it.
    if let Some((_, prev)) = frags.range(..=Key(offset)).next_back()
        && prev.end > offset
    {
        return if end <= prev.end {
            Slot::Dup
        } else {
            Slot::Overlap
        };
    }
    // The first held fragment starting after `offset` must start at or after `end`.
    match frags.range(Key(offset + 1)..).next() {
        Some((&Key(next_offset), _)) if next_offset < end => Slot::Overlap,
        _ => Slot::Free,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
    const UDP: u8 = 17;

    /// Every reason a fragment can be dropped for.
    const FRAG_REASONS: [DropReason; 7] = [
        DropReason::FragReasmTimeout,
        DropReason::FragTooFar,
        DropReason::DupFrag,
        DropReason::FragOverlap,
        DropReason::FragMemLimit,
        DropReason::FragInvalid,
        DropReason::FragTooMany,
    ];

    fn key(ident: u16) -> FragKey {
        FragKey {
            src: SRC,
            dst: DST,
            ident,
            protocol: UDP,
        }
    }

    /// A 20-byte IPv4 header for one fragment (checksum left zero: the reassembler does not
    /// read it).
    fn header(key: FragKey, tos: u8, df: bool, more: bool, offset: u16, len: usize) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[1] = tos;
        h[2..4].copy_from_slice(&((20 + len) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&key.ident.to_be_bytes());
        let flags = if df { IP_DF } else { 0 } | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&(flags | (offset / 8)).to_be_bytes());
        h[8] = 64;
        h[9] = key.protocol;
        h[12..16].copy_from_slice(&key.src.octets());
        h[16..20].copy_from_slice(&key.dst.octets());
        h
    }

    /// A recognisable payload.
    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// `(offset, more, bytes)` for each fragment of `data` cut every `size` bytes (a multiple of 8).
    fn fragment(data: &[u8], size: usize) -> Vec<(u16, bool, Vec<u8>)> {
        let mut out = Vec::new();
        let mut off = 0;
        while off < data.len() {
            let end = (off + size).min(data.len());
            out.push((off as u16, end < data.len(), data[off..end].to_vec()));
            off = end;
        }
        out
    }

    /// A reassembler, its MIB, a clock, and the tally of fragments delivered.
    struct Harness {
        r: Reassembler,
        mib: Mib,
        now: Instant,
        delivered: u64,
        expired: Vec<Expired>,
    }

    impl Harness {
        fn new(cfg: ReasmConfig) -> Harness {
            Harness {
                r: Reassembler::new(cfg, KeyedState::from_seed(1), KeyedState::from_seed(2)),
                mib: Mib::new(),
                now: Instant::ZERO,
                delivered: 0,
                expired: Vec::new(),
            }
        }

        fn add_tos(
            &mut self,
            k: FragKey,
            tos: u8,
            df: bool,
            off: u16,
            more: bool,
            data: &[u8],
        ) -> Outcome {
            let h = header(k, tos, df, more, off, data.len());
            let out = self.r.add(self.now, k, off, more, &h, data, &mut self.mib);
            if let Outcome::Complete(d) = &out {
                self.delivered += d.fragments as u64;
            }
            assert!(self.r.mem() <= self.r.config().high_thresh);
            self.check_identity();
            out
        }

        fn add(&mut self, k: FragKey, off: u16, more: bool, data: &[u8]) -> Outcome {
            self.add_tos(k, 0, false, off, more, data)
        }

        fn expire(&mut self) -> Vec<Expired> {
            let out = self.r.expire(self.now, &mut self.mib);
            self.expired.extend(out.iter().cloned());
            self.check_identity();
            out
        }

        fn drops(&self) -> u64 {
            FRAG_REASONS.iter().map(|&r| self.mib.drops(r)).sum()
        }

        /// Fragments received = delivered + dropped (by reason) + held; each drop is one
        /// ReasmFails.
        fn check_identity(&self) {
            assert_eq!(
                self.mib.get(Counter::IpReasmReqds),
                self.delivered + self.drops() + self.r.fragments() as u64,
                "accounting identity"
            );
            assert_eq!(self.mib.get(Counter::IpReasmFails), self.drops());
            assert_eq!(
                self.mib.get(Counter::IpExtReasmOverlaps),
                self.mib.drops(DropReason::FragOverlap)
            );
        }

        /// Nothing held, nothing charged.
        fn assert_empty(&self) {
            assert_eq!(self.r.mem(), 0);
            assert_eq!(self.r.queues(), 0);
            assert_eq!(self.r.fragments(), 0);
            assert_eq!(self.r.poll_at(), None);
        }
    }

    fn complete(out: Outcome) -> Reassembled {
        match out {
            Outcome::Complete(d) => d,
            other => panic!("expected Complete, got {other:?}"),
        }
    }

    #[test]
    fn in_order_reassembles_and_fixes_the_header() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(4000);
        let frags = fragment(&data, 1480);
        assert_eq!(frags.len(), 3);
        assert_eq!(
            h.add(key(1), frags[0].0, true, &frags[0].2),
            Outcome::Pending
        );
        assert_eq!(h.r.queues(), 1);
        assert_eq!(h.r.mem(), QUEUE_OVERHEAD + FRAG_OVERHEAD + 1480);
        assert_eq!(h.r.poll_at(), Some(Instant::from_secs(30)));
        assert_eq!(
            h.add(key(1), frags[1].0, true, &frags[1].2),
            Outcome::Pending
        );
        let d = complete(h.add(key(1), frags[2].0, false, &frags[2].2));
        assert_eq!(d.key, key(1));
        assert_eq!(d.payload, data);
        assert_eq!(d.fragments, 3);
        let hdr = d.header.as_bytes();
        assert_eq!(hdr.len(), 20);
        assert_eq!(u16::from_be_bytes([hdr[2], hdr[3]]), 4020, "Total Length");
        assert_eq!(u16::from_be_bytes([hdr[6], hdr[7]]), 0, "no MF, no offset");
        assert_eq!(checksum::data(hdr), 0xffff, "valid header checksum");
        assert_eq!(&hdr[12..20], &header(key(1), 0, false, false, 0, 0)[12..20]);
        assert_eq!(h.mib.get(Counter::IpReasmReqds), 3);
        assert_eq!(h.mib.get(Counter::IpReasmOKs), 1);
        assert_eq!(h.mib.get(Counter::IpReasmFails), 0);
        h.assert_empty();
    }

    #[test]
    fn reverse_order_reassembles() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(3001);
        let frags = fragment(&data, 512);
        let n = frags.len();
        for (i, (off, more, bytes)) in frags.iter().rev().enumerate() {
            let out = h.add(key(9), *off, *more, bytes);
            if i + 1 < n {
                assert_eq!(out, Outcome::Pending);
            } else {
                assert_eq!(complete(out).payload, data);
            }
        }
        h.assert_empty();
    }

    #[test]
    fn interleaved_datagrams_stay_apart() {
        let mut h = Harness::new(ReasmConfig::default());
        let a = payload(2000);
        let b: Vec<u8> = payload(2000).iter().map(|x| !x).collect();
        let fa = fragment(&a, 1000);
        let fb = fragment(&b, 1000);
        // Same addresses and ident, different protocol: another datagram (RFC 791 §3.2).
        let kb = FragKey {
            protocol: 6,
            ..key(5)
        };
        assert_eq!(h.add(key(5), fa[0].0, true, &fa[0].2), Outcome::Pending);
        assert_eq!(h.add(kb, fb[1].0, false, &fb[1].2), Outcome::Pending);
        assert_eq!(h.r.queues(), 2);
        assert_eq!(complete(h.add(kb, fb[0].0, true, &fb[0].2)).payload, b);
        assert_eq!(complete(h.add(key(5), fa[1].0, false, &fa[1].2)).payload, a);
        h.assert_empty();
    }

    #[test]
    fn duplicates_are_dropped_and_the_queue_kept() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(48);
        assert_eq!(h.add(key(2), 0, true, &data[..24]), Outcome::Pending);
        // Exact duplicate.
        assert_eq!(
            h.add(key(2), 0, true, &data[..24]),
            Outcome::Dropped(DropReason::DupFrag)
        );
        // Contained in a held fragment: also a duplicate (Linux inet_frag_queue_insert).
        assert_eq!(
            h.add(key(2), 8, true, &data[8..16]),
            Outcome::Dropped(DropReason::DupFrag)
        );
        assert_eq!(h.r.queues(), 1);
        assert_eq!(h.r.fragments(), 1);
        assert_eq!(h.r.mem(), QUEUE_OVERHEAD + FRAG_OVERHEAD + 24);
        assert_eq!(
            complete(h.add(key(2), 24, false, &data[24..])).payload,
            data
        );
        assert_eq!(h.mib.drops(DropReason::DupFrag), 2);
        assert_eq!(
            h.mib.get(Counter::IpReasmFails),
            2,
            "one per dropped fragment"
        );
        h.assert_empty();
    }

    #[test]
    fn overlap_discards_the_whole_datagram() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(64);
        assert_eq!(h.add(key(3), 0, true, &data[..16]), Outcome::Pending);
        assert_eq!(h.add(key(3), 32, true, &data[32..48]), Outcome::Pending);
        // [8, 24) overlaps [0, 16) without being inside it.
        assert_eq!(
            h.add(key(3), 8, true, &data[8..24]),
            Outcome::Dropped(DropReason::FragOverlap)
        );
        h.assert_empty();
        assert_eq!(
            h.mib.drops(DropReason::FragOverlap),
            3,
            "two held + the overlapping one"
        );
        assert_eq!(h.mib.get(Counter::IpReasmFails), 3);
        assert_eq!(h.mib.get(Counter::IpExtReasmOverlaps), 3);
        // A later fragment with the same key starts a new datagram.
        assert_eq!(h.add(key(3), 48, false, &data[48..]), Outcome::Pending);
        assert_eq!(h.r.queues(), 1);
    }

    #[test]
    fn overlap_spanning_two_held_fragments_discards() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(64);
        h.add(key(4), 8, true, &data[8..16]);
        h.add(key(4), 24, true, &data[24..32]);
        // [0, 40) covers both.
        assert_eq!(
            h.add(key(4), 0, true, &data[..40]),
            Outcome::Dropped(DropReason::FragOverlap)
        );
        h.assert_empty();
    }

    #[test]
    fn inconsistent_ends_discard_the_datagram() {
        // A second, different last fragment.
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(100);
        h.add(key(1), 8, true, &data[8..48]);
        assert_eq!(h.add(key(1), 48, false, &data[48..96]), Outcome::Pending);
        assert_eq!(
            h.add(key(1), 96, false, &data[96..]),
            Outcome::Dropped(DropReason::FragInvalid)
        );
        h.assert_empty();
        assert_eq!(h.mib.drops(DropReason::FragInvalid), 3);
        assert_eq!(h.mib.get(Counter::IpReasmFails), 3);

        // Data beyond a known end.
        let mut h = Harness::new(ReasmConfig::default());
        h.add(key(1), 48, false, &data[48..64]);
        assert_eq!(
            h.add(key(1), 64, true, &data[64..72]),
            Outcome::Dropped(DropReason::FragInvalid)
        );
        h.assert_empty();

        // A last fragment that ends before data already held.
        let mut h = Harness::new(ReasmConfig::default());
        h.add(key(1), 64, true, &data[64..72]);
        assert_eq!(
            h.add(key(1), 0, false, &data[..16]),
            Outcome::Dropped(DropReason::FragInvalid)
        );
        h.assert_empty();
    }

    #[test]
    fn empty_and_short_non_last_fragments_are_invalid() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(64);
        h.add(key(1), 0, true, &data[..16]);
        // Zero-length with MF set: discards the datagram (Linux: end == offset).
        assert_eq!(
            h.add(key(1), 16, true, &[]),
            Outcome::Dropped(DropReason::FragInvalid)
        );
        h.assert_empty();
        // Seven bytes with MF set trim to nothing.
        assert_eq!(
            h.add(key(2), 0, true, &data[..7]),
            Outcome::Dropped(DropReason::FragInvalid)
        );
        h.assert_empty();
        assert_eq!(h.mib.drops(DropReason::FragInvalid), 3);
    }

    #[test]
    fn non_last_fragment_is_trimmed_to_a_multiple_of_8() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(40);
        // 13 bytes with MF: the first 8 are kept (Linux ip_frag_queue).
        assert_eq!(h.add(key(1), 0, true, &data[..13]), Outcome::Pending);
        assert_eq!(h.r.mem(), QUEUE_OVERHEAD + FRAG_OVERHEAD + 8);
        let d = complete(h.add(key(1), 8, false, &data[8..]));
        assert_eq!(d.payload, data);
        h.assert_empty();
    }

    #[test]
    fn oversized_datagrams_are_discarded() {
        let mut h = Harness::new(ReasmConfig::default());
        // Ends at 65,536: with any header that is more than 65,535.
        let out = h.add(key(1), 65_528, false, &[0; 8]);
        assert_eq!(out, Outcome::Dropped(DropReason::FragInvalid));
        h.assert_empty();

        // 65,515 payload bytes fit a 20-byte header but not the first fragment's 60.
        let data = payload(65_515);
        let k = key(2);
        let mut head = [0u8; 60];
        head[..20].copy_from_slice(&header(k, 0, false, true, 0, 65_488));
        head[0] = 0x4f;
        let out =
            h.r.add(h.now, k, 0, true, &head, &data[..65_488], &mut h.mib);
        assert_eq!(out, Outcome::Pending);
        let out = h.add(k, 65_488, false, &data[65_488..]);
        assert_eq!(out, Outcome::Dropped(DropReason::FragInvalid));
        assert_eq!(h.mib.drops(DropReason::FragInvalid), 3);
        h.assert_empty();

        // With a 20-byte header the same datagram is the largest there can be.
        let out = h.add(k, 0, true, &data[..65_488]);
        assert_eq!(out, Outcome::Pending);
        let d = complete(h.add(k, 65_488, false, &data[65_488..]));
        assert_eq!(u16::from_be_bytes([d.header[2], d.header[3]]), 65_535);
        assert_eq!(d.payload, data);
        h.assert_empty();
    }

    #[test]
    fn malformed_caller_input_is_dropped_not_queued() {
        let mut h = Harness::new(ReasmConfig::default());
        let hdr = header(key(1), 0, false, true, 0, 8);
        for (hdr, off) in [(&hdr[..19], 0), (&hdr[..], 3)] {
            let out = h.r.add(h.now, key(1), off, true, hdr, &[0; 8], &mut h.mib);
            assert_eq!(out, Outcome::Dropped(DropReason::FragInvalid));
        }
        h.check_identity();
        h.assert_empty();
    }

    #[test]
    fn timeout_frees_memory_and_reports_the_first_fragment() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(3000);
        h.add(key(1), 0, true, &data[..1000]);
        h.add(key(1), 2000, false, &data[2000..]);
        h.now = Instant::from_secs(10);
        h.add(key(2), 1000, true, &data[1000..2000]); // no offset 0
        assert_eq!(h.r.poll_at(), Some(Instant::from_secs(30)));

        h.now = Instant::from_millis(29_999);
        assert!(h.expire().is_empty());
        assert_eq!(h.r.queues(), 2);

        h.now = Instant::from_secs(30);
        let e = h.expire();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, key(1));
        assert_eq!(e[0].deadline, Instant::from_secs(30));
        assert_eq!(e[0].fragments, 2);
        let first = e[0].first.as_ref().expect("offset 0 had arrived");
        assert_eq!(
            first.header.as_bytes(),
            &header(key(1), 0, false, true, 0, 1000)[..]
        );
        assert_eq!(first.data, &data[..1000]);
        assert_eq!(h.r.queues(), 1);
        assert_eq!(h.r.mem(), QUEUE_OVERHEAD + FRAG_OVERHEAD + 1000);
        assert_eq!(h.r.poll_at(), Some(Instant::from_secs(40)));

        h.now = Instant::from_secs(40);
        let e = h.expire();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].key, key(2));
        assert_eq!(e[0].first, None, "offset 0 never arrived: no ICMP");
        h.assert_empty();
        assert_eq!(h.mib.get(Counter::IpReasmTimeout), 2);
        assert_eq!(h.mib.get(Counter::IpReasmFails), 3);
        assert_eq!(h.mib.drops(DropReason::FragReasmTimeout), 3);
    }

    #[test]
    fn a_fragment_after_the_deadline_starts_a_new_datagram() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(2000);
        h.add(key(1), 0, true, &data[..1000]);
        // The stack was late calling expire; the old queue's timer has run out all the same.
        h.now = Instant::from_secs(31);
        assert_eq!(h.add(key(1), 1000, false, &data[1000..]), Outcome::Pending);
        assert!(h.r.poll_at().is_some_and(|t| t <= h.now), "expire is due");
        assert_eq!(
            h.r.mem(),
            2 * FRAG_OVERHEAD + QUEUE_OVERHEAD + 2000,
            "expired head still held"
        );
        let e = h.expire();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].first.as_ref().map(|f| f.data.len()), Some(1000));
        assert_eq!(h.r.mem(), QUEUE_OVERHEAD + FRAG_OVERHEAD + 1000);
        assert_eq!(h.r.poll_at(), Some(Instant::from_secs(61)));
        h.now = Instant::from_secs(61);
        assert_eq!(h.expire().len(), 1);
        h.assert_empty();
    }

    /// FragmentSmack (CVE-2018-5391): a datagram may be held in at most IPFRAG_MAX_FRAGS
    /// fragments; the next one discards it whole, each fragment counted once.
    #[test]
    fn too_many_fragments_discard_the_datagram() {
        assert_eq!(IPFRAG_MAX_FRAGS, 1365);
        let mut h = Harness::new(ReasmConfig::default());
        let k = key(7);
        for i in 0..IPFRAG_MAX_FRAGS {
            assert_eq!(h.add(k, (8 * i) as u16, true, &[1; 8]), Outcome::Pending);
        }
        assert_eq!(h.r.fragments(), IPFRAG_MAX_FRAGS);
        assert_eq!(
            h.add(k, (8 * IPFRAG_MAX_FRAGS) as u16, true, &[1; 8]),
            Outcome::Dropped(DropReason::FragTooMany)
        );
        assert_eq!(
            h.mib.drops(DropReason::FragTooMany),
            IPFRAG_MAX_FRAGS as u64 + 1
        );
        assert_eq!(
            h.mib.get(Counter::IpReasmFails),
            IPFRAG_MAX_FRAGS as u64 + 1
        );
        h.assert_empty();
        // A datagram in exactly IPFRAG_MAX_FRAGS fragments still completes.
        let data = payload(8 * IPFRAG_MAX_FRAGS);
        for i in (0..IPFRAG_MAX_FRAGS).rev() {
            let more = i + 1 < IPFRAG_MAX_FRAGS;
            let out = h.add(k, (8 * i) as u16, more, &data[8 * i..8 * i + 8]);
            if i > 0 {
                assert_eq!(out, Outcome::Pending);
            } else {
                assert_eq!(complete(out).payload, data);
            }
        }
        h.assert_empty();
    }

    /// A flood of 100,000 8-byte fragments, 2,000 per datagram in a scrambled order: every
    /// insert costs O(log n) key comparisons (counted, not timed), memory stays under
    /// `ipfrag_high_thresh`, and each datagram is discarded at the fragment cap.
    #[test]
    fn tiny_fragment_flood_costs_n_log_n_and_stays_bounded() {
        let cfg = ReasmConfig::default();
        let mut h = Harness::new(cfg);
        let (n, per) = (100_000usize, 2000usize);
        let p = 2003; // prime: j -> j * 7919 mod p permutes 0..p
        crate::counted::work::take();
        for f in 0..n {
            let (ident, j) = ((f / per) as u16, f % per);
            let off = 8 * ((j * 7919) % p);
            let out = h.add(key(ident), off as u16, true, &[3; 8]);
            assert!(
                matches!(
                    out,
                    Outcome::Pending
                        | Outcome::Dropped(DropReason::FragTooMany | DropReason::FragMemLimit)
                ),
                "{out:?}"
            );
            assert!(h.r.mem() <= cfg.high_thresh);
            assert!(h.r.fragments() <= h.r.queues() * IPFRAG_MAX_FRAGS);
        }
        let work = crate::counted::work::take();
        let nlogn = n as f64 * (n as f64).log2();
        eprintln!(
            "fragment flood: work {work} ({:.2} n log2 n)",
            work as f64 / nlogn
        );
        assert!(
            (work as f64) < 4.0 * nlogn,
            "work {work} for n log n {nlogn:.0}"
        );
        assert_eq!(
            h.mib.drops(DropReason::FragTooMany),
            (n / per * (IPFRAG_MAX_FRAGS + 1)) as u64
        );
    }

    #[test]
    fn memory_bound_holds_under_a_flood() {
        let cfg = ReasmConfig::default();
        let mut h = Harness::new(cfg);
        let data = payload(1480);
        let mut refused = 0u64;
        for ident in 0..10_000u16 {
            let k = FragKey {
                src: Ipv4Addr::from(0x0a00_0000 + u32::from(ident)),
                ..key(ident)
            };
            match h.add(k, 0, true, &data) {
                Outcome::Pending => {}
                Outcome::Dropped(DropReason::FragMemLimit) => refused += 1,
                other => panic!("unexpected {other:?}"),
            }
            assert!(h.r.mem() <= cfg.high_thresh);
        }
        let per_queue = QUEUE_OVERHEAD + FRAG_OVERHEAD + 1480;
        assert_eq!(h.r.queues(), cfg.high_thresh / per_queue);
        assert_eq!(refused, 10_000 - h.r.queues() as u64);
        assert_eq!(h.mib.drops(DropReason::FragMemLimit), refused);
        assert_eq!(h.mib.get(Counter::IpReasmFails), refused);
        assert_eq!(h.mib.get(Counter::IpReasmReqds), 10_000);

        // A fragment that completes a held datagram is refused too while memory is full.
        let k0 = FragKey {
            src: Ipv4Addr::from(0x0a00_0000),
            ..key(0)
        };
        let tail = payload(cfg.high_thresh - h.r.mem());
        assert_eq!(
            h.add(k0, 1480, false, &tail),
            Outcome::Dropped(DropReason::FragMemLimit)
        );

        h.now = Instant::from_secs(30);
        let e = h.expire();
        assert_eq!(e.len(), cfg.high_thresh / per_queue);
        assert!(e.iter().all(|e| e.first.is_some()));
        h.assert_empty();
    }

    #[test]
    fn zero_high_thresh_disables_reassembly() {
        let mut h = Harness::new(ReasmConfig {
            high_thresh: 0,
            ..ReasmConfig::default()
        });
        assert_eq!(
            h.add(key(1), 0, true, &[1; 8]),
            Outcome::Dropped(DropReason::FragMemLimit)
        );
        h.assert_empty();
    }

    #[test]
    fn max_dist_restarts_a_queue_that_fell_behind() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(48);
        h.add(key(1), 0, true, &data[..16]);
        // 63 fragments of other datagrams from the same source in between: still fine.
        for ident in 100..163 {
            h.add(key(ident), 8, true, &[0; 8]);
        }
        assert_eq!(h.add(key(1), 16, true, &data[16..32]), Outcome::Pending);
        assert_eq!(h.mib.drops(DropReason::FragTooFar), 0);
        // 64 (ipfrag_max_dist): fragments are presumed lost; what it held is freed and the
        // datagram starts again.
        for ident in 200..264 {
            h.add(key(ident), 8, true, &[0; 8]);
        }
        // Fragments from another source do not count.
        let other = FragKey {
            src: Ipv4Addr::new(198, 51, 100, 1),
            ..key(7)
        };
        h.add(other, 8, true, &[0; 8]);
        h.now = Instant::from_secs(5);
        assert_eq!(h.add(key(1), 32, false, &data[32..]), Outcome::Pending);
        assert_eq!(h.mib.drops(DropReason::FragTooFar), 2);
        // The queue holds just the new fragment, and its timer restarted.
        h.now = Instant::from_secs(30);
        let e = h.expire();
        assert!(e.iter().all(|e| e.key != key(1)));
        h.now = Instant::from_secs(35);
        let e = h.expire();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0].key, e[0].fragments, e[0].first.is_none()),
            (key(1), 1, true)
        );
        h.assert_empty();
    }

    #[test]
    fn max_dist_zero_disables_the_check() {
        let mut h = Harness::new(ReasmConfig {
            max_dist: 0,
            ..ReasmConfig::default()
        });
        let data = payload(32);
        h.add(key(1), 0, true, &data[..16]);
        for ident in 100..300 {
            h.add(key(ident), 8, true, &[0; 8]);
        }
        assert_eq!(
            complete(h.add(key(1), 16, false, &data[16..])).payload,
            data
        );
    }

    #[test]
    fn max_dist_can_be_changed_with_queues_held() {
        let mut h = Harness::new(ReasmConfig {
            max_dist: 0,
            ..ReasmConfig::default()
        });
        let data = payload(32);
        h.add(key(1), 0, true, &data[..8]);
        h.r.set_config(ReasmConfig::default());
        h.add(key(2), 0, true, &data[..8]);
        h.add(key(2), 8, true, &data[8..16]);
        h.r.set_config(ReasmConfig {
            max_dist: 0,
            ..ReasmConfig::default()
        });
        h.add(key(2), 16, true, &data[16..24]);
        assert_eq!(h.mib.drops(DropReason::FragTooFar), 0);
        assert_eq!(complete(h.add(key(1), 8, false, &data[8..])).payload, data);
        assert_eq!(
            complete(h.add(key(2), 24, false, &data[24..])).payload,
            data
        );
        h.assert_empty();
    }

    #[test]
    fn ecn_is_combined_per_rfc_3168() {
        const ECT0: u8 = 2;
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(32);
        h.add_tos(key(1), 0xb8 | ECT0, false, 0, true, &data[..16]);
        let d = complete(h.add_tos(key(1), 0xb8 | INET_ECN_CE, false, 16, false, &data[16..]));
        assert_eq!(
            d.header[1],
            0xb8 | INET_ECN_CE,
            "CE on one fragment marks the datagram"
        );
        assert_eq!(checksum::data(&d.header), 0xffff);

        // Not-ECT mixed with ECT(0): dropped.
        h.add_tos(key(2), 0, false, 0, true, &data[..16]);
        let out = h.add_tos(key(2), ECT0, false, 16, false, &data[16..]);
        assert_eq!(out, Outcome::Dropped(DropReason::FragInvalid));
        assert_eq!(h.mib.drops(DropReason::FragInvalid), 2);
        h.assert_empty();
    }

    #[test]
    fn df_survives_only_if_the_largest_fragment_had_it() {
        let mut h = Harness::new(ReasmConfig::default());
        let data = payload(40);
        h.add_tos(key(1), 0, true, 0, true, &data[..24]);
        let d = complete(h.add_tos(key(1), 0, false, 24, false, &data[24..]));
        assert_eq!(u16::from_be_bytes([d.header[6], d.header[7]]), IP_DF);

        h.add_tos(key(2), 0, false, 0, true, &data[..24]);
        let d = complete(h.add_tos(key(2), 0, true, 24, false, &data[24..]));
        assert_eq!(u16::from_be_bytes([d.header[6], d.header[7]]), 0);
    }

    #[test]
    fn overhead_constants_cover_the_real_structures() {
        use core::mem::size_of;
        // Hash table slot at 7/8 load plus a control byte; a B-tree entry with nodes half full.
        let queue = size_of::<(FragKey, Queue)>() * 8 / 7
            + 1
            + 2 * size_of::<((Instant, u64), FragKey)>()
            + size_of::<(Ipv4Addr, Peer)>() * 8 / 7
            + 1;
        assert!(queue <= QUEUE_OVERHEAD, "queue needs {queue}");
        // A B-tree entry with nodes half full, plus a 16-byte allocator header for the payload.
        let frag = 2 * size_of::<(u32, Frag)>() + 16;
        assert!(frag <= FRAG_OVERHEAD, "fragment needs {frag}");
    }

    /// The random traffic of `accounting_identity_holds`, long and seeded: it reaches every
    /// outcome, so the identity is checked on all of them.
    #[test]
    fn random_traffic_reaches_every_outcome() {
        let cfg = ReasmConfig {
            high_thresh: 3000,
            max_dist: 4,
            ..ReasmConfig::default()
        };
        let mut h = Harness::new(cfg);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..20_000 {
            h.now += Duration::from_millis(next(2000));
            if next(50) == 0 {
                h.expire();
                continue;
            }
            let len = next(5) as usize * 8 + if next(4) == 0 { next(8) as usize } else { 0 };
            let (ident, off, more) = (next(6) as u16, next(6) as u16 * 8, next(2) == 0);
            h.add(key(ident), off, more, &payload(len));
        }
        h.now += Duration::from_secs(31);
        h.expire();
        h.assert_empty();
        assert!(h.mib.get(Counter::IpReasmOKs) > 0);
        // FragTooMany needs 1,366 fragments in one datagram: its own tests reach it.
        for r in FRAG_REASONS
            .into_iter()
            .filter(|&r| r != DropReason::FragTooMany)
        {
            assert!(h.mib.drops(r) > 0, "{r:?} never happened");
        }
    }

    proptest! {
        /// Any order of any fragmentation gives back the original bytes, on the last fragment.
        #[test]
        fn any_permutation_reassembles(
            (len, size, order) in (1usize..6000, 1usize..=185).prop_flat_map(|(len, size8)| {
                let n = len.div_ceil(size8 * 8);
                (Just(len), Just(size8 * 8), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
            })
        ) {
            let mut h = Harness::new(ReasmConfig::default());
            let data = payload(len);
            let frags = fragment(&data, size);
            for (i, &j) in order.iter().enumerate() {
                let (off, more, bytes) = &frags[j];
                let out = h.add(key(42), *off, *more, bytes);
                if i + 1 < order.len() {
                    prop_assert_eq!(out, Outcome::Pending);
                } else {
                    let d = complete(out);
                    prop_assert_eq!(d.fragments, frags.len());
                    prop_assert_eq!(d.payload, data.clone());
                }
            }
            h.assert_empty();
        }

        /// Duplicates anywhere before completion change nothing but the DupFrag count.
        #[test]
        fn duplicates_do_not_disturb(
            (len, order) in (8usize..3000).prop_flat_map(|len| {
                let n = len.div_ceil(256);
                let all: Vec<usize> = (0..n).chain(0..n).collect();
                (Just(len), Just(all).prop_shuffle())
            })
        ) {
            let mut h = Harness::new(ReasmConfig::default());
            let data = payload(len);
            let frags = fragment(&data, 256);
            let mut seen = vec![false; frags.len()];
            let mut done = false;
            for &j in &order {
                if done {
                    break;
                }
                let (off, more, bytes) = &frags[j];
                match h.add(key(7), *off, *more, bytes) {
                    Outcome::Pending => prop_assert!(!seen[j]),
                    Outcome::Dropped(DropReason::DupFrag) => prop_assert!(seen[j]),
                    Outcome::Complete(d) => {
                        prop_assert_eq!(d.payload, data.clone());
                        done = true;
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
                seen[j] = true;
            }
            prop_assert!(done);
            h.assert_empty();
        }

        /// Random traffic (overlaps, duplicates, bad lengths, timeouts, a tight memory limit):
        /// every fragment is accounted for exactly once, memory stays under the limit, and
        /// everything is freed in the end.
        #[test]
        fn accounting_identity_holds(
            high_thresh in 0usize..4000,
            max_dist in 0u32..6,
            ops in prop::collection::vec(
                (0u16..4, 0u16..6, 0usize..5, any::<bool>(), 0u8..4, 0u64..8, 0u8..10),
                1..200,
            ),
        ) {
            let cfg = ReasmConfig { high_thresh, max_dist, ..ReasmConfig::default() };
            let mut h = Harness::new(cfg);
            for (ident, off8, len8, more, extra, dt, expire) in ops {
                h.now += Duration::from_secs(dt);
                if expire == 0 {
                    h.expire();
                } else {
                    let len = len8 * 8 + usize::from(extra);
                    h.add(key(ident), off8 * 8, more, &payload(len));
                }
                prop_assert!(h.r.mem() <= high_thresh);
            }
            h.now += Duration::from_secs(31);
            h.expire();
            h.assert_empty();
            let reqds = h.mib.get(Counter::IpReasmReqds);
            prop_assert_eq!(reqds, h.delivered + h.drops());
            let expired: usize = h.expired.iter().map(|e| e.fragments).sum();
            prop_assert_eq!(expired as u64, h.mib.drops(DropReason::FragReasmTimeout));
        }
    }
}
