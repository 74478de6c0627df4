//! The IPv6 addresses of TCP connections, kept beside the 12-byte [`FourTuple`] so that
//! an IPv4 connection pays nothing for IPv6 (docs/stack.md, "Stage 2, TCP").
//!
//! An IPv6 connection's tuple holds ids where an IPv4 one holds addresses: the local
//! address slot holds `1 + i`, an index into the few local addresses seen
//! ([`Intern6::locals`], append-only: they are the stack's own), which puts it in
//! `0.0.0.0/8`, a block no IPv4 connection can have as its address (RFC 1122 §3.2.1.3
//! (a): "this host on this network", "MUST NOT be sent, except as a source address as
//! part of an initialization procedure"); that is the family bit
//! ([`FourTuple::is_v6`]). The remote address slot holds an id into the remote
//! addresses, found by a map keyed with the stack's secret (SipHash over the full 128
//! bits: the addresses are the peers' choice). The tuple tables hash the ids under their
//! own key, so one 128-bit address maps to one id and the tables see distinct tuples for
//! distinct address pairs, as Linux's `inet6_ehashfn` over the full addresses does.
//!
//! Ids are not counted per user: a remote address no connection, request or TIME-WAIT
//! record names any more is reclaimed by a sweep ([`Intern6::needs_sweep`],
//! `Tcp::intern6_sweep`) once the table has grown by as many entries as the tuple tables
//! hold (and at least [`SWEEP_MIN`]), so a sweep's cost is paid for by the entries that
//! led to it. A SYN flood from random IPv6 sources adds at most one entry per SYN between
//! sweeps; the live ones are bounded by the SYN queue and TIME-WAIT bounds.

use core::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use hashbrown::HashMap;

use super::tcb::FourTuple;
use crate::secret::KeyedState;

/// Entries added between two sweeps at least.
pub(crate) const SWEEP_MIN: usize = 1024;

/// The IPv6 addresses TCP tuples name by id.
#[derive(Debug)]
pub(crate) struct Intern6 {
    /// Local addresses, by `id - 1` (the id is the local address slot of the tuple).
    locals: Vec<Ipv6Addr>,
    /// Remote addresses by id; `None`: a free slot (its id is in `free`).
    remotes: Vec<Option<Ipv6Addr>>,
    free: Vec<u32>,
    by_addr: HashMap<Ipv6Addr, u32, KeyedState>,
    /// Entries in `by_addr` at which the next sweep is due.
    sweep_at: usize,
}

impl Intern6 {
    pub(crate) fn new(hasher: KeyedState) -> Self {
        Intern6 {
            locals: Vec::new(),
            remotes: Vec::new(),
            free: Vec::new(),
            by_addr: HashMap::with_hasher(hasher),
            sweep_at: SWEEP_MIN,
        }
    }

    /// Remote addresses held.
    pub(crate) fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Heap bytes of the table.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.locals.capacity() * size_of::<Ipv6Addr>()
            + self.remotes.capacity() * size_of::<Option<Ipv6Addr>>()
            + self.free.capacity() * 4
            + self.by_addr.allocation_size()
    }

    fn local_id(&mut self, ip: Ipv6Addr) -> u32 {
        match self.locals.iter().position(|&a| a == ip) {
            Some(i) => i as u32 + 1,
            None => {
                self.locals.push(ip);
                self.locals.len() as u32
            }
        }
    }

    fn remote_id(&mut self, ip: Ipv6Addr) -> u32 {
        if let Some(&id) = self.by_addr.get(&ip) {
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.remotes[id as usize] = Some(ip);
                id
            }
            None => {
                self.remotes.push(Some(ip));
                self.remotes.len() as u32 - 1
            }
        };
        self.by_addr.insert(ip, id);
        id
    }

    /// The tuple of an IPv6 connection from `local` to `remote`, interning the
    /// addresses. At most 2^24 - 1 local addresses (a host has a handful).
    pub(crate) fn tuple(&mut self, local: SocketAddrV6, remote: SocketAddrV6) -> FourTuple {
        let l = self.local_id(*local.ip());
        debug_assert!(l < 1 << 24, "local address ids live in 0.0.0.0/8");
        let r = self.remote_id(*remote.ip());
        FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::from_bits(l), local.port()),
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(r), remote.port()),
        }
    }

    /// The tuple of `local`, `remote` if both addresses are interned (if not, no
    /// connection, request or TIME-WAIT record has it).
    pub(crate) fn find(&self, local: SocketAddrV6, remote: SocketAddrV6) -> Option<FourTuple> {
        let l = self.locals.iter().position(|a| a == local.ip())? as u32 + 1;
        let r = *self.by_addr.get(remote.ip())?;
        Some(FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::from_bits(l), local.port()),
            remote: SocketAddrV4::new(Ipv4Addr::from_bits(r), remote.port()),
        })
    }

    /// The addresses a tuple names: its own for IPv4, the interned ones for IPv6.
    #[inline]
    pub(crate) fn addrs(&self, t: &FourTuple) -> (SocketAddr, SocketAddr) {
        if !t.is_v6() {
            return (SocketAddr::V4(t.local), SocketAddr::V4(t.remote));
        }
        let l = self.locals[t.local.ip().to_bits() as usize - 1];
        let r = self.remotes[t.remote.ip().to_bits() as usize].unwrap_or(Ipv6Addr::UNSPECIFIED);
        (
            SocketAddr::V6(SocketAddrV6::new(l, t.local.port(), 0, 0)),
            SocketAddr::V6(SocketAddrV6::new(r, t.remote.port(), 0, 0)),
        )
    }

    /// The local and remote IPv6 addresses of the IPv6 tuple `t` (`None` for another
    /// tuple): what a segment's header carries, two indexed reads.
    #[inline]
    pub(crate) fn ips(&self, t: &FourTuple) -> Option<(&Ipv6Addr, &Ipv6Addr)> {
        let l = self
            .locals
            .get((t.local.ip().to_bits() as usize).wrapping_sub(1))?;
        let r = self
            .remotes
            .get(t.remote.ip().to_bits() as usize)?
            .as_ref()?;
        Some((l, r))
    }

    /// Whether `t` is an IPv6 tuple whose addresses are `local` and `remote` (its ports
    /// are the caller's to compare): early demux's check of its remembered connection,
    /// two indexed reads where [`Intern6::find`] hashes.
    #[inline]
    pub(crate) fn names(&self, t: &FourTuple, local: Ipv6Addr, remote: Ipv6Addr) -> bool {
        t.is_v6()
            && self.locals.get(t.local.ip().to_bits() as usize - 1) == Some(&local)
            && self.remotes.get(t.remote.ip().to_bits() as usize) == Some(&Some(remote))
    }

    /// Whether enough entries came since the last sweep; `tuples`: what the tuple tables
    /// hold (the sweep's cost).
    pub(crate) fn needs_sweep(&self, tuples: usize) -> bool {
        self.by_addr.len() >= self.sweep_at.max(tuples)
    }

    /// Free every remote id not in `live` (ids of IPv6 tuples still held), and set when
    /// the next sweep is due.
    pub(crate) fn sweep(&mut self, live: impl Iterator<Item = u32>, tuples: usize) {
        let mut keep = vec![false; self.remotes.len()];
        for id in live {
            if let Some(k) = keep.get_mut(id as usize) {
                *k = true;
            }
        }
        for (id, slot) in self.remotes.iter_mut().enumerate() {
            if let Some(ip) = *slot
                && !keep[id]
            {
                self.by_addr.remove(&ip);
                *slot = None;
                self.free.push(id as u32);
            }
        }
        self.sweep_at = self.by_addr.len() + SWEEP_MIN.max(tuples);
    }
}

impl FourTuple {
    /// Whether this is an IPv6 connection's tuple (see [`Intern6`]): its local address
    /// slot is in `0.0.0.0/8` and not `0.0.0.0`.
    #[inline]
    pub(crate) fn is_v6(&self) -> bool {
        let b = self.local.ip().to_bits();
        b != 0 && b >> 24 == 0
    }

    /// The remote id of an IPv6 tuple.
    #[inline]
    pub(crate) fn remote_id(&self) -> u32 {
        self.remote.ip().to_bits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa6(last: u16, port: u16) -> SocketAddrV6 {
        SocketAddrV6::new(
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last),
            port,
            0,
            0,
        )
    }

    #[test]
    fn tuples_round_trip_and_sweep_frees_only_dead_ids() {
        let mut t = Intern6::new(KeyedState::from_seed(1));
        let a = t.tuple(sa6(1, 80), sa6(100, 5000));
        let b = t.tuple(sa6(1, 80), sa6(101, 5001));
        assert!(a.is_v6() && b.is_v6());
        assert_ne!(a, b);
        assert_eq!(t.tuple(sa6(1, 80), sa6(100, 5000)), a, "one id per address");
        assert_eq!(t.find(sa6(1, 80), sa6(101, 5001)), Some(b));
        assert_eq!(
            t.addrs(&a),
            (SocketAddr::V6(sa6(1, 80)), SocketAddr::V6(sa6(100, 5000)))
        );
        t.sweep([b.remote_id()].into_iter(), 0);
        assert_eq!(t.len(), 1);
        assert_eq!(t.find(sa6(1, 80), sa6(100, 5000)), None);
        assert_eq!(t.find(sa6(1, 80), sa6(101, 5001)), Some(b));
        let v4 = FourTuple {
            local: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
            remote: SocketAddrV4::new(Ipv4Addr::new(0, 0, 0, 9), 1),
        };
        assert!(!v4.is_v6());
        assert_eq!(t.addrs(&v4).1, SocketAddr::V4(v4.remote));
    }
}
