//! SYN cookies, after Linux `net/ipv4/syncookies.c`: answer a SYN with a SYN-ACK whose ISN
//! encodes what the listener must remember, so a SYN flood cannot fill the SYN queue.
//!
//! Reading list:
//! - [RFC 4987 §3.6](https://www.rfc-editor.org/rfc/rfc4987#section-3.6) ("SYN Cookies"):
//!   the idea and its costs (only a few MSS values can be encoded; options the SYN carried
//!   are lost unless encoded elsewhere, here in the timestamp).
//! - D. J. Bernstein, <https://cr.yp.to/syncookies.html>.
//! - Linux `net/ipv4/syncookies.c`: `secure_tcp_syn_cookie`, `check_tcp_syn_cookie`,
//!   `__cookie_v4_init_sequence`, `__cookie_v4_check`, `cookie_init_timestamp`,
//!   `cookie_timestamp_decode`, `cookie_ecn_ok`, `cookie_v4_check`; `include/net/tcp.h`:
//!   `tcp_cookie_time`, `MAX_SYNCOOKIE_AGE`, `TCP_SYNCOOKIE_PERIOD`.
//!
//! The cookie (Linux's layout, 32 bits):
//! ```text
//! cookie = H(k0; saddr, daddr, sport, dport, 0) + their_isn + (count << 24)
//!        + ((H(k1; saddr, daddr, sport, dport, count) + mss_index) mod 2^24)
//! ```
//! `count` is a minute counter; `mss_index` indexes [`MSS_TABLE`]; `H` is SipHash-2-4
//! truncated to 32 bits (Linux `siphash_4u32`), under two independent secret keys. The
//! addresses and ports are the SYN's (source = the peer).
//!
//! Call graph (the listener owns the policy; this module holds only the secrets):
//! ```text
//! SYN, SYN queue full (tcp_conn_request, want_cookie) -> SynCookies::generate     SyncookiesSent++
//!     SYN-ACK: seq = cookie, mss = the rounded MSS, and if the SYN had timestamps
//!     TSval = SynCookies::encode_timestamp(ts_clock(now), &req) + ts_offset
//! ACK to the listener, no request sock (cookie_v4_check), only if the listener sent a
//! cookie in the last 2 minutes (tcp_synq_no_recent_overflow; else the ACK gets a RST)
//!     -> SynCookies::check(seq, ack)                          None: SyncookiesFailed++, drop
//!     -> SynCookies::decode_timestamp(TSecr - ts_offset)     SyncookiesRecv++, child socket
//!        (no timestamp option on the ACK: no wscale, no SACK, no ECN)
//! ```
//!
//! # Where this differs from Linux, and why
//! - The secrets come from the stack's 128-bit secret (from the OS by default, see
//!   `crate::secret`), a seed (`SynCookies::new`, tests) or 128-bit keys
//!   (`SynCookies::from_keys`) instead of the kernel RNG. As Linux's, they do not
//!   rotate: each cookie carries the minute counter and expires with it (see `check`).
//! - The minute counter reads the stack's `now` (`now / 60 s`), where Linux divides jiffies.
//! - The sysctl checks of `cookie_timestamp_decode` (a SACK bit with `tcp_sack` off, a
//!   wscale with `tcp_window_scaling` off, ECN with `tcp_ecn` off) and
//!   `tcp_synq_no_recent_overflow` are the listener's, which has the sysctls and the queue.
//! - What Linux accepts we accept, including its two quirks: a peer MSS below 536 is
//!   encoded as 536 (index 0; such peers are under 0.2 % of the Internet, per the comment
//!   on `msstab`), and because `their_isn` and the MSS index are *added*, an ACK whose
//!   `seq` or `ack` is off by one to three from the right value can still decode, to a
//!   different MSS index. Only someone who saw the SYN-ACK can do that, and they could
//!   complete the handshake anyway.

use core::fmt;
use core::net::SocketAddr;
#[cfg(test)]
use core::net::SocketAddrV4;
use core::time::Duration;

use ustack_obs::Instant;
use ustack_wire::SeqNumber;

use super::isn::{SipKey, siphash32};
#[cfg(test)]
use super::isn::{derive_key, key_from_bytes};

/// The MSS values a cookie can carry (Linux `msstab`, chosen from measured MSS
/// distributions: 1460 is the commonest, 1440/1452 PPPoE, 1300-1349 tunnels). Sorted.
pub const MSS_TABLE: [u16; 4] = [536, 1300, 1440, 1460];

/// The MSS values an IPv6 cookie can carry (Linux `net/ipv6/syncookies.c` `msstab`:
/// "1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60").
pub const MSS_TABLE6: [u16; 4] = [1220, 1420, 1440, 8940];

/// The table of `local`'s family.
fn mss_table(local: &SocketAddr) -> &'static [u16; 4] {
    if local.is_ipv4() {
        &MSS_TABLE
    } else {
        &MSS_TABLE6
    }
}

/// A cookie is valid while the minute counter has advanced by less than this (Linux
/// `MAX_SYNCOOKIE_AGE`): between one and two minutes, depending on when in its minute the
/// SYN arrived.
pub const MAX_SYNCOOKIE_AGE: u32 = 2;

/// One step of the cookie's counter (Linux `TCP_SYNCOOKIE_PERIOD`, 60 * HZ).
pub const SYNCOOKIE_PERIOD: Duration = Duration::from_secs(60);

/// Low bits of the cookie holding the keyed hash plus the MSS index; the top 8 carry the
/// counter (Linux `COOKIEBITS`).
const COOKIE_BITS: u32 = 24;
const COOKIE_MASK: u32 = (1 << COOKIE_BITS) - 1;

/// Low 6 bits of the SYN-ACK's TSval (Linux `TSBITS`, `TS_OPT_*`):
/// `| 31 .. 6 timestamp | 5 ECN | 4 SACK | 3..0 wscale (0xf = none) |`.
const TS_BITS: u32 = 6;
const TS_OPT_WSCALE_MASK: u32 = 0xf;
const TS_OPT_SACK: u32 = 1 << 4;
const TS_OPT_ECN: u32 = 1 << 5;

/// RFC 7323 §2.3: a shift above 14 "MUST use 14 instead".
const MAX_WSCALE: u8 = 14;

/// What the SYN asked for, to be rebuilt from the final ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieRequest {
    /// The peer's MSS option (536 if it sent none, RFC 9293 §3.7.1); goes in the cookie.
    pub mss: u16,
    /// The peer's window scale shift, if it sent the option; goes in the timestamp.
    pub wscale: Option<u8>,
    /// The peer sent SACK-permitted; goes in the timestamp.
    pub sack_ok: bool,
    /// The SYN asked for ECN (ECE and CWR set, RFC 3168 §6.1.1); goes in the timestamp.
    pub ecn_ok: bool,
}

/// The listener's cookie secrets (Linux `syncookie_secret[2]`), one per stack. `Debug`
/// does not print them.
#[derive(Clone)]
pub struct SynCookies {
    keys: [SipKey; 2],
}

impl fmt::Debug for SynCookies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SynCookies").finish_non_exhaustive()
    }
}

/// Linux `tcp_cookie_time`: minutes on the stack's clock.
fn cookie_time(now: Instant) -> u32 {
    (now.as_nanos() / SYNCOOKIE_PERIOD.as_nanos() as u64) as u32
}

impl SynCookies {
    /// Derive both secrets from `seed` (production seeds come from the OS RNG; see
    /// `tcp::isn` for why 128-bit keys via [`from_keys`](Self::from_keys) are better).
    #[cfg(test)]
    pub fn new(seed: u64) -> Self {
        SynCookies {
            keys: [
                derive_key(seed, b"ustack tcp syncookie 0"),
                derive_key(seed, b"ustack tcp syncookie 1"),
            ],
        }
    }

    /// Both secrets from the stack's secret (drawn from the OS unless a seed was asked
    /// for). Like Linux's `syncookie_secret`, they are fixed for the stack's life: the
    /// cookie itself carries the minute counter (`tcp_cookie_time`), and a cookie is valid
    /// only while the counter has advanced by less than [`MAX_SYNCOOKIE_AGE`], so each
    /// cookie expires after one to two minutes without rotating the secret.
    pub(crate) fn from_secrets(secrets: &crate::secret::Secrets) -> Self {
        SynCookies {
            keys: [
                secrets.key(b"ustack tcp syncookie 0"),
                secrets.key(b"ustack tcp syncookie 1"),
            ],
        }
    }

    /// Use the given 128-bit secrets.
    #[cfg(test)]
    pub fn from_keys(key0: [u8; 16], key1: [u8; 16]) -> Self {
        SynCookies {
            keys: [key_from_bytes(key0), key_from_bytes(key1)],
        }
    }

    /// Linux `cookie_hash`: SipHash of (SYN source address, SYN destination address,
    /// ports, count) under secret `c`.
    fn hash(&self, local: SocketAddr, remote: SocketAddr, count: u32, c: usize) -> u32 {
        match (local, remote) {
            (SocketAddr::V4(l), SocketAddr::V4(r)) => {
                let mut b = [0u8; 16];
                b[0..4].copy_from_slice(&r.ip().octets());
                b[4..8].copy_from_slice(&l.ip().octets());
                b[8..10].copy_from_slice(&r.port().to_be_bytes());
                b[10..12].copy_from_slice(&l.port().to_be_bytes());
                b[12..16].copy_from_slice(&count.to_le_bytes());
                siphash32(self.keys[c], &b)
            }
            // Linux net/ipv6/syncookies.c cookie_hash: the 128-bit addresses.
            _ => {
                let mut b = [0u8; 40];
                b[0..16].copy_from_slice(&super::isn::v6_octets(remote.ip()));
                b[16..32].copy_from_slice(&super::isn::v6_octets(local.ip()));
                b[32..34].copy_from_slice(&remote.port().to_be_bytes());
                b[34..36].copy_from_slice(&local.port().to_be_bytes());
                b[36..40].copy_from_slice(&count.to_le_bytes());
                siphash32(self.keys[c], &b)
            }
        }
    }

    /// The ISN for our SYN-ACK to a SYN from `remote` to `local` whose sequence number is
    /// `their_isn`, and the MSS that the cookie carries, which is the one we must use: the largest
    /// [`MSS_TABLE`] entry not above `mss` (536 if `mss` is below all of them, as Linux).
    /// Linux `__cookie_v4_init_sequence` and `secure_tcp_syn_cookie`.
    pub fn generate(
        &self,
        now: Instant,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
        their_isn: SeqNumber,
        mss: u16,
    ) -> (SeqNumber, u16) {
        let (local, remote) = (local.into(), remote.into());
        let table = mss_table(&local);
        let index = table.iter().rposition(|&m| mss >= m).unwrap_or(0);
        let count = cookie_time(now);
        let cookie = self
            .hash(local, remote, 0, 0)
            .wrapping_add(their_isn.0)
            .wrapping_add(count << COOKIE_BITS)
            .wrapping_add(
                self.hash(local, remote, count, 1)
                    .wrapping_add(index as u32)
                    & COOKIE_MASK,
            );
        (SeqNumber(cookie), table[index])
    }

    /// Check the ACK that completes a cookie handshake: `seq` is the ACK's sequence number
    /// (`their_isn + 1`), `ack` its acknowledgment number (`cookie + 1`). Returns the MSS the
    /// cookie carries if it was made by us, for this 4-tuple and `their_isn`, less than
    /// [`MAX_SYNCOOKIE_AGE`] minute-counter steps ago; otherwise `None`. Linux
    /// `__cookie_v4_check` and `check_tcp_syn_cookie`.
    pub fn check(
        &self,
        now: Instant,
        local: impl Into<SocketAddr>,
        remote: impl Into<SocketAddr>,
        seq: SeqNumber,
        ack: SeqNumber,
    ) -> Option<u16> {
        let (local, remote) = (local.into(), remote.into());
        let cookie = ack.0.wrapping_sub(1);
        let their_isn = seq.0.wrapping_sub(1);
        let count = cookie_time(now);
        // Strip the first layer: what is left is (count << 24) + (hash + index mod 2^24).
        let rest = cookie.wrapping_sub(self.hash(local, remote, 0, 0).wrapping_add(their_isn));
        // Age in minutes, from the counter's low 8 bits (a cookie "from the future" wraps to
        // a large age and fails too).
        let age = count.wrapping_sub(rest >> COOKIE_BITS) & (u32::MAX >> COOKIE_BITS);
        if age >= MAX_SYNCOOKIE_AGE {
            return None;
        }
        // The full counter (not its low 8 bits) goes into the second hash, so a cookie from
        // 256 minutes ago does not pass.
        let index =
            rest.wrapping_sub(self.hash(local, remote, count.wrapping_sub(age), 1)) & COOKIE_MASK;
        mss_table(&local).get(index as usize).copied()
    }

    /// Our TSval for the cookie SYN-ACK, before adding the connection's timestamp offset:
    /// `ts_now` (our [`ts_clock`](super::isn::ts_clock)) with its low 6 bits replaced by the
    /// options the SYN carried, then moved back by 64 if that put it ahead of `ts_now`, so
    /// the next TSval (from the clock) never goes backwards (Linux `cookie_init_timestamp`).
    /// A `wscale` above 14 is encoded as 14 (RFC 7323 §2.3). The `mss` field is not used
    /// here (it travels in the cookie).
    pub fn encode_timestamp(ts_now: u32, req: &CookieRequest) -> u32 {
        let mut options = match req.wscale {
            Some(shift) => u32::from(shift.min(MAX_WSCALE)),
            None => TS_OPT_WSCALE_MASK,
        };
        if req.sack_ok {
            options |= TS_OPT_SACK;
        }
        if req.ecn_ok {
            options |= TS_OPT_ECN;
        }
        let ts = (ts_now >> TS_BITS << TS_BITS) | options;
        // Timestamps compare modulo 2^32 (RFC 7323 §5.3): "ahead of ts_now" is a positive
        // wrapping difference. Near zero, moving back by 64 wraps, as it should.
        if (ts.wrapping_sub(ts_now) as i32) > 0 {
            ts.wrapping_sub(1 << TS_BITS)
        } else {
            ts
        }
    }

    /// Recover `(wscale, sack_ok, ecn_ok)` from the final ACK's TSecr, after the caller has
    /// subtracted the connection's timestamp offset (Linux `cookie_timestamp_decode`,
    /// `cookie_ecn_ok`). Only call it if the ACK carries a timestamp option; without one,
    /// the connection has no wscale, SACK or ECN.
    ///
    /// Every 6-bit pattern is a valid encoding in Linux's layout (wscale 0-14, 0xf = none;
    /// a 4-bit field cannot exceed 15), so this returns `Some` for every input today; `None`
    /// is kept for an invalid encoding should the layout change. Refusing options that are
    /// disabled by sysctl, as Linux does, is the caller's job.
    pub fn decode_timestamp(tsecr: u32) -> Option<(Option<u8>, bool, bool)> {
        let shift = (tsecr & TS_OPT_WSCALE_MASK) as u8;
        let wscale = match shift {
            0..=MAX_WSCALE => Some(shift),
            0xf => None,
            _ => return None,
        };
        Some((wscale, tsecr & TS_OPT_SACK != 0, tsecr & TS_OPT_ECN != 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use proptest::prelude::*;

    const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 443);
    const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 9), 51_000);

    /// 40 s into minute 16 of the stack's clock.
    fn t0() -> Instant {
        Instant::from_secs(1_000)
    }

    fn cookies() -> SynCookies {
        SynCookies::new(0x5eed)
    }

    fn after(t: Instant, secs: u64) -> Instant {
        t + Duration::from_secs(secs)
    }

    #[test]
    fn every_mss_round_trips_to_its_table_entry() {
        let c = cookies();
        let cases = [
            (0, 536),
            (100, 536),
            (535, 536),
            (536, 536),
            (1299, 536),
            (1300, 1300),
            (1439, 1300),
            (1440, 1440),
            (1452, 1440),
            (1459, 1440),
            (1460, 1460),
            (8960, 1460),
            (u16::MAX, 1460),
        ];
        for their_isn in [0u32, 1, 0x7fff_ffff, 0xffff_ffff, 0x1234_5678] {
            for (peer_mss, used) in cases {
                let isn = SeqNumber(their_isn);
                let (cookie, mss) = c.generate(t0(), LOCAL, REMOTE, isn, peer_mss);
                assert_eq!(mss, used, "peer MSS {peer_mss}");
                let got = c.check(t0(), LOCAL, REMOTE, isn + 1, cookie + 1);
                assert_eq!(
                    got,
                    Some(used),
                    "peer MSS {peer_mss}, their ISN {their_isn:#x}"
                );
            }
        }
    }

    /// Over IPv6 the cookie carries an index into Linux's IPv6 table (1220, 1420, 1440,
    /// 8940), the hash covers the 128-bit addresses (a change in the low 64 bits of either
    /// fails the check), and a cookie made for IPv4 does not pass for the v4-mapped pair.
    #[test]
    fn ipv6_cookies_use_the_ipv6_table_and_the_whole_addresses() {
        use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
        let c = cookies();
        let v6 = |last: u16, port: u16| {
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last),
                port,
                0,
                0,
            ))
        };
        let (local, remote) = (v6(1, 443), v6(2, 51_000));
        let isn = SeqNumber(0x1234_5678);
        for (peer_mss, used) in [
            (536, 1220),
            (1220, 1220),
            (1419, 1220),
            (1420, 1420),
            (1440, 1440),
            (8939, 1440),
            (8940, 8940),
            (u16::MAX, 8940),
        ] {
            let (cookie, mss) = c.generate(t0(), local, remote, isn, peer_mss);
            assert_eq!(mss, used, "peer MSS {peer_mss}");
            assert_eq!(
                c.check(t0(), local, remote, isn + 1, cookie + 1),
                Some(used)
            );
            assert_eq!(
                c.check(t0(), local, v6(3, 51_000), isn + 1, cookie + 1),
                None
            );
            assert_eq!(c.check(t0(), v6(4, 443), remote, isn + 1, cookie + 1), None);
        }
        let (cookie, _) = c.generate(t0(), LOCAL, REMOTE, isn, 1460);
        let mapped = |a: SocketAddrV4| {
            SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
        };
        assert_eq!(
            c.check(t0(), mapped(LOCAL), mapped(REMOTE), isn + 1, cookie + 1),
            None
        );
    }

    #[test]
    fn every_option_combination_round_trips_through_the_timestamp() {
        for ts_now in [0u32, 1, 63, 64, 65, 1_000_000, 0xffff_ffc0, u32::MAX] {
            for wscale in core::iter::once(None).chain((0..=14).map(Some)) {
                for sack_ok in [false, true] {
                    for ecn_ok in [false, true] {
                        let req = CookieRequest {
                            mss: 1460,
                            wscale,
                            sack_ok,
                            ecn_ok,
                        };
                        let ts = SynCookies::encode_timestamp(ts_now, &req);
                        assert_eq!(
                            SynCookies::decode_timestamp(ts),
                            Some((wscale, sack_ok, ecn_ok)),
                            "ts_now {ts_now:#x} {req:?}"
                        );
                        // Never ahead of the clock, and at most 63 ms behind it.
                        assert!(
                            ts_now.wrapping_sub(ts) < 64,
                            "ts_now {ts_now:#x} ts {ts:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn timestamp_layout_is_linuxs() {
        // wscale 7, SACK, no ECN: low bits 0b01_0111; ts_now 1000 = 0b1111101000.
        let req = CookieRequest {
            mss: 1460,
            wscale: Some(7),
            sack_ok: true,
            ecn_ok: false,
        };
        // (1000 >> 6 << 6) | 0x17 = 960 + 23 = 983 <= 1000, kept.
        assert_eq!(SynCookies::encode_timestamp(1000, &req), 983);
        // No wscale is 0xf; with ECN: 0x2f. 960 + 47 = 1007 > 1000, so 1007 - 64 = 943.
        let req = CookieRequest {
            mss: 1460,
            wscale: None,
            sack_ok: false,
            ecn_ok: true,
        };
        assert_eq!(SynCookies::encode_timestamp(1000, &req), 943);
        // A shift above 14 is sent as 14 (RFC 7323 §2.3).
        let req = CookieRequest {
            mss: 536,
            wscale: Some(15),
            sack_ok: false,
            ecn_ok: false,
        };
        let ts = SynCookies::encode_timestamp(1 << 20, &req);
        assert_eq!(
            SynCookies::decode_timestamp(ts),
            Some((Some(14), false, false))
        );
    }

    #[test]
    fn wrong_four_tuple_fails() {
        let c = cookies();
        let isn = SeqNumber(0xdead_beef);
        let (cookie, _) = c.generate(t0(), LOCAL, REMOTE, isn, 1460);
        let others = [
            (SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 443), REMOTE),
            (SocketAddrV4::new(*LOCAL.ip(), 444), REMOTE),
            (
                LOCAL,
                SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 10), 51_000),
            ),
            (LOCAL, SocketAddrV4::new(*REMOTE.ip(), 51_001)),
            (REMOTE, LOCAL),
        ];
        for (l, r) in others {
            assert_eq!(c.check(t0(), l, r, isn + 1, cookie + 1), None, "{r} -> {l}");
        }
        assert_eq!(
            c.check(t0(), LOCAL, REMOTE, isn + 1, cookie + 1),
            Some(1460)
        );
    }

    #[test]
    fn wrong_sequence_number_fails() {
        let c = cookies();
        let isn = SeqNumber(1_000_000);
        let (cookie, mss) = c.generate(t0(), LOCAL, REMOTE, isn, 1460);
        // The SYN's own seq (not +1), and any distant one.
        for seq in [
            isn,
            isn + 1000,
            isn + (1 << 24),
            SeqNumber(isn.0 ^ 0x8000_0000),
        ] {
            assert_eq!(
                c.check(t0(), LOCAL, REMOTE, seq, cookie + 1),
                None,
                "seq {seq:?}"
            );
        }
        // Off by 1-3 (Linux's additive layout): never the original MSS.
        for d in 1..=3usize {
            assert_ne!(
                c.check(t0(), LOCAL, REMOTE, isn + 1 + d, cookie + 1),
                Some(mss)
            );
        }
    }

    #[test]
    fn tampered_ack_fails() {
        let c = cookies();
        for port in 1000..1100u16 {
            let remote = SocketAddrV4::new(*REMOTE.ip(), port);
            let isn = SeqNumber(u32::from(port).wrapping_mul(0x9e37_79b9));
            let (cookie, mss) = c.generate(t0(), LOCAL, remote, isn, 1440);
            for bit in 0..32 {
                let ack = SeqNumber((cookie + 1).0 ^ (1 << bit));
                let got = c.check(t0(), LOCAL, remote, isn + 1, ack);
                if bit >= 2 {
                    assert_eq!(got, None, "port {port}, bit {bit}");
                } else {
                    // Bits 0-1 move the additive MSS index (Linux's layout): at worst a
                    // different table entry, never the original.
                    assert_ne!(got, Some(mss), "port {port}, bit {bit}");
                }
            }
        }
    }

    #[test]
    fn cookies_expire_after_two_minute_steps() {
        let c = cookies();
        let isn = SeqNumber(42);
        // Generated at the very start of a minute: valid for just under two minutes.
        let start = Instant::from_secs(600);
        let (cookie, _) = c.generate(start, LOCAL, REMOTE, isn, 1460);
        let check = |now| c.check(now, LOCAL, REMOTE, isn + 1, cookie + 1);
        assert_eq!(check(after(start, 59)), Some(1460));
        assert_eq!(check(start + Duration::from_millis(119_999)), Some(1460));
        assert_eq!(check(after(start, 120)), None);
        assert_eq!(check(after(start, 121)), None);
        // Generated late in a minute: still good a minute later, never 2 minutes later.
        let late = Instant::from_secs(659);
        let (cookie, _) = c.generate(late, LOCAL, REMOTE, isn, 1460);
        let check = |now| c.check(now, LOCAL, REMOTE, isn + 1, cookie + 1);
        assert_eq!(check(after(late, 60)), Some(1460));
        assert_eq!(check(after(late, 61)), None);
        // From the future (clock stepped back) fails too.
        assert_eq!(check(Instant::from_secs(659 - 61)), None);
    }

    #[test]
    fn counter_wrap_after_256_minutes_does_not_revive_a_cookie() {
        let c = cookies();
        let isn = SeqNumber(7);
        let (cookie, _) = c.generate(t0(), LOCAL, REMOTE, isn, 1460);
        for minutes in [256u64, 257, 512] {
            let now = t0() + Duration::from_secs(60 * minutes);
            assert_eq!(
                c.check(now, LOCAL, REMOTE, isn + 1, cookie + 1),
                None,
                "{minutes} min"
            );
        }
    }

    #[test]
    fn cookies_from_different_seeds_differ() {
        let a = SynCookies::new(1);
        let b = SynCookies::new(2);
        let isn = SeqNumber(99);
        let (ca, _) = a.generate(t0(), LOCAL, REMOTE, isn, 1460);
        let (cb, _) = b.generate(t0(), LOCAL, REMOTE, isn, 1460);
        assert_ne!(ca, cb);
        assert_eq!(b.check(t0(), LOCAL, REMOTE, isn + 1, ca + 1), None);
        assert_eq!(a.check(t0(), LOCAL, REMOTE, isn + 1, ca + 1), Some(1460));
        // The cookie secrets are not the ISN secrets of the same seed.
        let isn_gen = crate::tcp::isn::IsnGenerator::new(1);
        assert_ne!(ca, isn_gen.isn(t0(), LOCAL, REMOTE));
    }

    #[test]
    fn from_keys_round_trips_and_debug_hides_them() {
        let c = SynCookies::from_keys([0x11; 16], [0x22; 16]);
        let (cookie, mss) = c.generate(t0(), LOCAL, REMOTE, SeqNumber(5), 1300);
        assert_eq!(
            c.check(t0(), LOCAL, REMOTE, SeqNumber(6), cookie + 1),
            Some(mss)
        );
        let s = format!("{c:?}");
        assert!(
            !s.contains("1229782938247303441") && !s.contains("keys"),
            "{s}"
        );
    }

    proptest! {
        #[test]
        fn round_trip_for_any_tuple_isn_and_time(
            l in any::<[u8; 4]>(), lp in 1u16.., r in any::<[u8; 4]>(), rp in 1u16..,
            isn in any::<u32>(), mss in any::<u16>(), gen_s in 0u64..1 << 32, wait_ms in 0u64..60_000,
        ) {
            let c = cookies();
            let local = SocketAddrV4::new(Ipv4Addr::from(l), lp);
            let remote = SocketAddrV4::new(Ipv4Addr::from(r), rp);
            let now = Instant::from_secs(gen_s);
            let (cookie, used) = c.generate(now, local, remote, SeqNumber(isn), mss);
            prop_assert!(MSS_TABLE.contains(&used));
            prop_assert!(used <= mss.max(536));
            let later = now + Duration::from_millis(wait_ms);
            prop_assert_eq!(c.check(later, local, remote, SeqNumber(isn) + 1, cookie + 1), Some(used));
        }

        #[test]
        fn random_acks_are_rejected(ack in any::<u32>(), seq in any::<u32>()) {
            // A blind attacker guesses: valid with probability about 2^-29 per try.
            let c = cookies();
            prop_assert_eq!(c.check(t0(), LOCAL, REMOTE, SeqNumber(seq), SeqNumber(ack)), None);
        }

        #[test]
        fn decode_accepts_any_tsecr(tsecr in any::<u32>()) {
            let (wscale, _, _) = SynCookies::decode_timestamp(tsecr).unwrap();
            prop_assert!(wscale.is_none_or(|w| w <= 14));
        }
    }
}
