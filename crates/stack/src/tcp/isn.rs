//! Initial sequence numbers ([RFC 6528](https://www.rfc-editor.org/rfc/rfc6528)), per-peer
//! timestamp offsets ([RFC 7323 §5.4](https://www.rfc-editor.org/rfc/rfc7323#section-5.4))
//! and the TCP timestamp clock, after Linux `net/core/secure_seq.c`.
//!
//! Reading list:
//! - RFC 6528 §3: "TCP SHOULD generate its Initial Sequence Numbers with the expression:
//!   ISN = M + F(localip, localport, remoteip, remoteport, secretkey) where M is the 4
//!   microsecond timer, and F() is a pseudorandom function (PRF) of the connection-id.
//!   F() MUST NOT be computable from the outside, or an attacker could still guess at
//!   sequence numbers from the ISN used for some other connection."
//! - [RFC 9293 §3.4.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.4.1): why the ISN
//!   follows a clock (segments of an old incarnation must not fall into a new one's window).
//! - RFC 7323 §5.4: "A random offset may be added to the timestamp clock on a per-connection
//!   basis. See \[RFC6528\], Section 3 ... The same function with a different secret key can
//!   be used to generate the per-connection timestamp offset"; and a "timestamp clock
//!   frequency in the range 1 ms to 1 sec per tick".
//! - Linux `net/core/secure_seq.c`: `secure_tcp_seq` (SipHash-2-4 of the 4-tuple under
//!   `net_secret`, plus `seq_scale`: `ktime_get_real_ns() >> 6`), `secure_tcp_ts_off`
//!   (SipHash of the address pair under a second key, `ts_secret`); `include/net/tcp.h`:
//!   `tcp_time_stamp_ms`, `TCP_TS_HZ`.
//!
//! Call graph:
//! ```text
//! connect()  (tcp_v4_connect)            -> IsnGenerator::isn(now, local, remote)
//!                                           IsnGenerator::ts_offset(local_ip, remote_ip)
//! SYN on a listener (tcp_conn_request)   -> the same two, from the SYN's addresses
//! every segment with timestamps          -> TSval = ts_clock(now) + ts_offset
//!                                           (RTT from TSecr: ts_clock(now) - (TSecr - ts_offset))
//! ```
//!
//! # Which clock: Linux's 64 ns, not RFC 6528's 4 µs
//! RFC 6528's `M` ticks every 4 µs (RFC 793's 250 kHz, sized for 2 Mb/s networks). We follow
//! Linux's `seq_scale`: one tick per 64 ns, wrapping every 2^32 * 64 ns = 274.9 s, so the ISN
//! clock outruns the sequence numbers a previous incarnation can consume at up to about
//! 125 Mb/s, yet wraps less often than once per MSL (Linux: "we also need to limit the
//! resolution so that the u32 seq overlaps less than one time per MSL (2 minutes)").
//! Linux reads `CLOCK_REALTIME`; we read the stack's `now` (any epoch: the secret hash,
//! not the clock, makes the ISN unpredictable).
//!
//! # Where this differs from Linux
//! - The stack derives both keys from its 128-bit secret (`crate::secret`), drawn from the
//!   OS RNG (`getrandom`) unless a seed is asked for; Linux fills them from the kernel RNG
//!   (`net_get_random_once`). 128 bits is what RFC 6528 §3 asks for ("Key lengths of 128
//!   bits should be adequate"). `IsnGenerator::new` expands a `u64` seed instead: 64 bits
//!   can be searched offline by an attacker who collects ISNs, so only tests and the
//!   simulator use fixed seeds, so that runs replay exactly.
//! - We hash the same fields as Linux (local address, remote address, local port, remote
//!   port: 12 bytes, network byte order) in our own layout; Linux-identical ISNs are not a
//!   goal, the key being secret anyway.
//! - Timestamp offsets are per address pair, as Linux (`secure_tcp_ts_off(saddr, daddr)`),
//!   not per connection as RFC 7323 §5.4 words it: every connection to the same peer shares
//!   one offset, so the peer's PAWS check keeps working across connections (TIME-WAIT
//!   reuse). Linux's `tcp_timestamps = 2` (no offset) is the caller's choice: use 0.

use core::fmt;
#[cfg(test)]
use core::net::Ipv4Addr;
use core::net::SocketAddrV4;
use core::net::{IpAddr, SocketAddr};

use ustack_obs::Instant;
use ustack_wire::SeqNumber;

pub(crate) use crate::secret::{SipKey, sip_u64_u32, siphash32};
#[cfg(test)]
pub(crate) use crate::secret::{derive_key, key_from_bytes};

/// Linux `seq_scale`: the ISN clock `M`, one tick per 64 ns (wraps every 274.9 s).
fn isn_clock(now: Instant) -> u32 {
    (now.as_nanos() >> 6) as u32
}

/// The TCP timestamp clock: milliseconds on the stack's clock, wrapping at 2^32 (49.7
/// days), as Linux's `tcp_time_stamp_ms` (`TCP_TS_HZ` = 1000). RFC 7323 §5.4 asks for "a
/// timestamp clock frequency in the range 1 ms to 1 sec per tick". TSval is this plus the
/// connection's [`IsnGenerator::ts_offset`].
pub fn ts_clock(now: Instant) -> u32 {
    now.as_millis() as u32
}

/// Secret-keyed ISNs and timestamp offsets, one per stack (Linux's `net_secret` and
/// `ts_secret`). `Debug` does not print the keys.
#[derive(Clone)]
pub struct IsnGenerator {
    /// Key of F() for ISNs (Linux `net_secret`).
    seq_key: SipKey,
    /// Key for timestamp offsets (Linux `ts_secret`).
    ts_key: SipKey,
}

impl fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IsnGenerator").finish_non_exhaustive()
    }
}

impl IsnGenerator {
    /// Derive both 128-bit SipHash keys from `seed` (independent keys, as Linux's two
    /// secrets). Production seeds come from the OS RNG; a fixed seed makes a simulation
    /// replay exactly. For 128 bits of secret use [`from_keys`](Self::from_keys).
    #[cfg(test)]
    pub fn new(seed: u64) -> Self {
        IsnGenerator {
            seq_key: derive_key(seed, b"ustack tcp isn"),
            ts_key: derive_key(seed, b"ustack tcp ts_off"),
        }
    }

    /// Both keys from the stack's secret (drawn from the OS unless a seed was asked for).
    pub(crate) fn from_secrets(secrets: &crate::secret::Secrets) -> Self {
        IsnGenerator {
            seq_key: secrets.key(b"ustack tcp isn"),
            ts_key: secrets.key(b"ustack tcp ts_off"),
        }
    }

    /// Use the given 128-bit keys (e.g. 32 bytes from `getrandom`): `seq_key` for ISNs,
    /// `ts_key` for timestamp offsets.
    #[cfg(test)]
    pub fn from_keys(seq_key: [u8; 16], ts_key: [u8; 16]) -> Self {
        IsnGenerator {
            seq_key: key_from_bytes(seq_key),
            ts_key: key_from_bytes(ts_key),
        }
    }

    /// The ISN for a new connection from `local` to `remote` (either side of the
    /// handshake: for a passive open `local` is the SYN's destination). RFC 6528 §3 with
    /// Linux's `secure_tcp_seq`: `F` = SipHash-2-4 of the 4-tuple under the secret key,
    /// `M` = `now` in 64 ns ticks (see the [module docs](self) for why not 4 µs).
    pub fn isn(
        &self,
        now: Instant,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
    ) -> SeqNumber {
        let (local, remote) = (local.into(), remote.into());
        let f = match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => {
                let mut tuple = [0u8; 12];
                tuple[0..4].copy_from_slice(&l.ip().octets());
                tuple[4..8].copy_from_slice(&r.ip().octets());
                tuple[8..10].copy_from_slice(&l.port().to_be_bytes());
                tuple[10..12].copy_from_slice(&r.port().to_be_bytes());
                siphash32(self.seq_key, &tuple)
            }
            // Linux secure_tcpv6_seq: the same over both 128-bit addresses and the ports.
            _ => {
                let mut tuple = [0u8; 36];
                tuple[0..16].copy_from_slice(&v6_octets(local.ip()));
                tuple[16..32].copy_from_slice(&v6_octets(remote.ip()));
                tuple[32..34].copy_from_slice(&local.port().to_be_bytes());
                tuple[34..36].copy_from_slice(&remote.port().to_be_bytes());
                siphash32(self.seq_key, &tuple)
            }
        };
        SeqNumber(f.wrapping_add(isn_clock(now)))
    }

    /// [`IsnGenerator::isn`] of an IPv4 4-tuple, from the words themselves: SipHash-2-4
    /// of the same 12 bytes (the two addresses, then the two ports, each in network
    /// order) as two message words, without building the byte string and walking it
    /// (Linux `secure_tcp_seq` calls `siphash_3u32` on the same three words).
    #[inline]
    pub fn isn4(&self, now: Instant, local: SocketAddrV4, remote: SocketAddrV4) -> SeqNumber {
        // The bytes' little-endian reading: network-order octets, so the words swapped.
        let addrs = u64::from(local.ip().to_bits().swap_bytes())
            | (u64::from(remote.ip().to_bits().swap_bytes()) << 32);
        let ports =
            u32::from(local.port().swap_bytes()) | (u32::from(remote.port().swap_bytes()) << 16);
        let f = sip_u64_u32::<2, 4>(self.seq_key, addrs, ports) as u32;
        SeqNumber(f.wrapping_add(isn_clock(now)))
    }

    /// The random offset added to [`ts_clock`] for every TSval sent from `local` to
    /// `remote` (Linux `secure_tcp_ts_off`, and `secure_tcpv6_ts_off` over the 128-bit
    /// addresses: SipHash of the address pair under its own key; the same for all
    /// connections between the two addresses, see the module docs).
    pub fn ts_offset(&self, local: impl Into<IpAddr>, remote: impl Into<IpAddr>) -> u32 {
        match (local.into(), remote.into()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                let mut pair = [0u8; 8];
                pair[0..4].copy_from_slice(&l.octets());
                pair[4..8].copy_from_slice(&r.octets());
                siphash32(self.ts_key, &pair)
            }
            (l, r) => {
                let mut pair = [0u8; 32];
                pair[0..16].copy_from_slice(&v6_octets(l));
                pair[16..32].copy_from_slice(&v6_octets(r));
                siphash32(self.ts_key, &pair)
            }
        }
    }
}

/// The 16 bytes of an address as IPv6 (an IPv4 one v4-mapped).
pub(crate) fn v6_octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    fn sa(ip: [u8; 4], port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(ip), port)
    }

    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 80);
    const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 7), 40_000);

    fn t0() -> Instant {
        Instant::from_secs(1_000)
    }

    /// Over IPv6 (Linux `secure_tcpv6_seq`, `secure_tcpv6_ts_off`) every bit of both
    /// 128-bit addresses counts: addresses that differ only in their low 64 bits, or only
    /// in their high 64 bits, give other ISNs and offsets.
    #[test]
    fn ipv6_isns_and_offsets_cover_the_whole_addresses() {
        use core::net::{Ipv6Addr, SocketAddrV6};
        let g = IsnGenerator::new(7);
        let now = Instant::from_secs(1);
        let a = |hi: u16, lo: u16, port: u16| {
            SocketAddrV6::new(Ipv6Addr::new(0x2001, 0xdb8, hi, 0, 0, 0, 0, lo), port, 0, 0)
        };
        let base = g.isn(now, a(0, 1, 80), a(0, 2, 40_000));
        assert_eq!(base, g.isn(now, a(0, 1, 80), a(0, 2, 40_000)));
        for (l, r) in [
            (a(0, 1, 80), a(0, 3, 40_000)),
            (a(0, 1, 80), a(9, 2, 40_000)),
            (a(0, 5, 80), a(0, 2, 40_000)),
            (a(9, 1, 80), a(0, 2, 40_000)),
            (a(0, 1, 81), a(0, 2, 40_000)),
        ] {
            assert_ne!(g.isn(now, l, r), base, "{l} {r}");
        }
        let off = g.ts_offset(*a(0, 1, 0).ip(), *a(0, 2, 0).ip());
        assert_ne!(g.ts_offset(*a(0, 1, 0).ip(), *a(9, 2, 0).ip()), off);
        assert_ne!(g.ts_offset(*a(0, 1, 0).ip(), *a(0, 3, 0).ip()), off);
    }

    /// The IPv4 ISN from the tuple's words is the one of the byte string (addresses,
    /// then ports, in network order) under SipHash-2-4, whatever the octets: checked
    /// against the generic path and against the reference implementation.
    #[test]
    fn isn4_is_siphash_2_4_of_the_tuple_bytes() {
        use core::hash::Hasher;
        let g = IsnGenerator::new(11);
        let now = Instant::from_nanos(0);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let l = SocketAddrV4::new(Ipv4Addr::from_bits(x as u32), (x >> 32) as u16);
            let r = SocketAddrV4::new(Ipv4Addr::from_bits((x >> 16) as u32), (x >> 48) as u16);
            assert_eq!(g.isn4(now, l, r), g.isn(now, l, r), "{l} {r}");
            let mut h = siphasher::sip::SipHasher24::new_with_keys(g.seq_key.0, g.seq_key.1);
            h.write(&l.ip().octets());
            h.write(&r.ip().octets());
            h.write(&l.port().to_be_bytes());
            h.write(&r.port().to_be_bytes());
            assert_eq!(g.isn4(now, l, r).0, h.finish() as u32, "{l} {r}");
        }
        let later = Instant::from_secs(3);
        assert_eq!(g.isn4(later, LOCAL, REMOTE), g.isn(later, LOCAL, REMOTE));
    }

    #[test]
    fn same_inputs_give_the_same_isn() {
        let a = IsnGenerator::new(1);
        let b = IsnGenerator::new(1);
        assert_eq!(a.isn(t0(), LOCAL, REMOTE), b.isn(t0(), LOCAL, REMOTE));
        assert_eq!(
            a.ts_offset(*LOCAL.ip(), *REMOTE.ip()),
            b.ts_offset(*LOCAL.ip(), *REMOTE.ip())
        );
    }

    #[test]
    fn isn_clock_ticks_every_64_ns() {
        let g = IsnGenerator::new(7);
        let base = g.isn(t0(), LOCAL, REMOTE);
        for ticks in [1u64, 2, 1000, 15_625_000] {
            let later = t0() + Duration::from_nanos(64 * ticks);
            assert_eq!(g.isn(later, LOCAL, REMOTE) - base, ticks as usize);
        }
        // Less than one tick: unchanged.
        assert_eq!(g.isn(t0() + Duration::from_nanos(63), LOCAL, REMOTE), base);
        // One second is 15,625,000 ticks (Linux: 2^32 ticks = 274.9 s).
        let one_s = g.isn(t0() + Duration::from_secs(1), LOCAL, REMOTE);
        assert_eq!(one_s - base, 15_625_000);
    }

    #[test]
    fn isn_clock_wraps_every_274_9_seconds() {
        let g = IsnGenerator::new(7);
        let period = Duration::from_nanos(64 << 32);
        assert_eq!(period.as_millis(), 274_877);
        assert_eq!(
            g.isn(t0() + period, LOCAL, REMOTE),
            g.isn(t0(), LOCAL, REMOTE)
        );
    }

    #[test]
    fn a_later_incarnation_starts_after_the_earlier_one() {
        // RFC 9293 §3.4.1: same 4-tuple, later ISN is ahead in sequence space (for gaps
        // under half the 274.9 s wrap).
        let g = IsnGenerator::new(3);
        let first = g.isn(t0(), LOCAL, REMOTE);
        for gap_ms in [1, 60_000, 120_000, 137_000] {
            let again = g.isn(t0() + Duration::from_millis(gap_ms), LOCAL, REMOTE);
            assert!(again.after(first), "gap {gap_ms} ms");
        }
    }

    #[test]
    fn every_field_of_the_four_tuple_changes_the_isn() {
        let g = IsnGenerator::new(11);
        let base = g.isn(t0(), LOCAL, REMOTE);
        let variants = [
            (sa([192, 0, 2, 2], 80), REMOTE),
            (sa([192, 0, 2, 1], 81), REMOTE),
            (LOCAL, sa([198, 51, 100, 8], 40_000)),
            (LOCAL, sa([198, 51, 100, 7], 40_001)),
            (REMOTE, LOCAL), // direction matters
        ];
        for (l, r) in variants {
            assert_ne!(g.isn(t0(), l, r), base, "{l} -> {r}");
        }
    }

    #[test]
    fn neighbouring_ports_get_unrelated_isns() {
        // F() must not be computable from outside: the ISNs of successive source ports
        // (what an attacker can open) must not predict each other.
        let g = IsnGenerator::new(5);
        let isns: Vec<u32> = (0..4096u16)
            .map(|p| g.isn(t0(), LOCAL, sa([198, 51, 100, 7], 30_000 + p)).0)
            .collect();
        let mut sorted = isns.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert!(sorted.len() >= 4095, "collisions: {}", 4096 - sorted.len());
        let close = isns
            .windows(2)
            .filter(|w| w[1].wrapping_sub(w[0]).min(w[0].wrapping_sub(w[1])) < 1 << 20)
            .count();
        // Random 32-bit values are within 2^20 of each other with probability 2^-11.
        assert!(close <= 10, "{close} near-sequential pairs");
        let high = isns.iter().filter(|&&x| x >> 31 == 1).count();
        assert!(
            (1800..=2300).contains(&high),
            "top bit set in {high} of 4096"
        );
    }

    #[test]
    fn different_seeds_give_different_secrets() {
        let a = IsnGenerator::new(1);
        let b = IsnGenerator::new(2);
        assert_ne!(a.isn(t0(), LOCAL, REMOTE), b.isn(t0(), LOCAL, REMOTE));
        assert_ne!(
            a.ts_offset(*LOCAL.ip(), *REMOTE.ip()),
            b.ts_offset(*LOCAL.ip(), *REMOTE.ip())
        );
    }

    #[test]
    fn ts_offset_is_per_address_pair() {
        let g = IsnGenerator::new(9);
        let (l, r) = (*LOCAL.ip(), *REMOTE.ip());
        let off = g.ts_offset(l, r);
        assert_ne!(g.ts_offset(l, Ipv4Addr::new(198, 51, 100, 8)), off);
        assert_ne!(g.ts_offset(Ipv4Addr::new(192, 0, 2, 2), r), off);
        assert_ne!(g.ts_offset(r, l), off);
        // Deterministic, so every connection to this peer uses the same offset.
        assert_eq!(g.ts_offset(l, r), off);
    }

    #[test]
    fn isn_and_ts_offset_use_independent_keys() {
        // Same seed: the ts key is not the seq key (else ts_offset would leak F()).
        let g = IsnGenerator::new(9);
        assert_ne!(g.seq_key, g.ts_key);
        let swapped = IsnGenerator {
            seq_key: g.ts_key,
            ts_key: g.seq_key,
        };
        assert_ne!(swapped.isn(t0(), LOCAL, REMOTE), g.isn(t0(), LOCAL, REMOTE));
    }

    #[test]
    fn from_keys_uses_the_given_128_bit_keys() {
        let a = IsnGenerator::from_keys([1; 16], [2; 16]);
        let b = IsnGenerator::from_keys([1; 16], [2; 16]);
        let c = IsnGenerator::from_keys([1; 16], [3; 16]);
        let mut d_key = [1; 16];
        d_key[15] = 0; // the last byte matters: all 128 bits are used
        let d = IsnGenerator::from_keys(d_key, [2; 16]);
        assert_eq!(a.isn(t0(), LOCAL, REMOTE), b.isn(t0(), LOCAL, REMOTE));
        assert_eq!(a.isn(t0(), LOCAL, REMOTE), c.isn(t0(), LOCAL, REMOTE));
        assert_ne!(
            a.ts_offset(*LOCAL.ip(), *REMOTE.ip()),
            c.ts_offset(*LOCAL.ip(), *REMOTE.ip())
        );
        assert_ne!(a.isn(t0(), LOCAL, REMOTE), d.isn(t0(), LOCAL, REMOTE));
    }

    #[test]
    fn debug_does_not_print_the_secrets() {
        let g = IsnGenerator::from_keys([0xab; 16], [0xcd; 16]);
        let s = format!("{g:?}");
        assert!(
            !s.contains("171") && !s.contains("ab") && !s.contains("key"),
            "{s}"
        );
    }

    #[test]
    fn ts_clock_counts_milliseconds_and_wraps_at_2_32() {
        assert_eq!(ts_clock(Instant::from_micros(1_999)), 1);
        assert_eq!(ts_clock(Instant::from_secs(5)), 5_000);
        assert_eq!(ts_clock(Instant::from_millis((1 << 32) + 7)), 7);
    }
}
