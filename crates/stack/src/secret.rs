//! The stack's secrets: one 128-bit master key, drawn from the OS random number generator
//! by default (crate `getrandom`: `getrandom(2)` on Linux), from which every key the stack
//! uses is derived: the ISN key and the timestamp-offset key (RFC 6528 §3, RFC 7323 §5.4;
//! Linux `net_secret`, `ts_secret`), the SYN-cookie secrets (Linux `syncookie_secret`), the
//! keys of every hash table a peer can fill, the IP identification key (Linux
//! `ip_id_key`) and the challenge-ACK randomisation.
//!
//! Linux fills each of these from the kernel RNG once per boot (`net_get_random_once`,
//! `get_random_bytes`); ustack draws once per [`Stack`](crate::Stack). A deterministic
//! seed ([`Config::seed`](crate::Config::seed) = `Some(n)`) is only for tests, the
//! simulator and runs that must replay: its 64 bits can be searched offline by someone
//! who collects ISNs or cookies.
//!
//! Hash tables whose keys a peer chooses (the connection table, the SYN queue, TIME-WAIT,
//! IP reassembly, the neighbour table, ICMP's per-peer limits) hash with SipHash-1-3 under
//! a secret key ([`KeyedState`]), as Linux hashes them with a secret-seeded jhash or
//! siphash (`inet_ehashfn`, `inet_frag`'s `rhashtable`, `arp_hashfn`): without the key a
//! peer cannot aim many entries at one bucket (HashDoS).

use core::fmt;
use core::hash::BuildHasher;

use siphasher::sip::{SipHasher13, SipHasher24};

/// A 128-bit SipHash key as two words (`SipHasher24::new_with_keys`).
pub(crate) type SipKey = (u64, u64);

/// The master secret of one stack. `Debug` does not print it.
#[derive(Clone)]
pub(crate) struct Secrets {
    master: SipKey,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets").finish_non_exhaustive()
    }
}

impl Secrets {
    /// 128 fresh bits from the OS.
    ///
    /// # Panics
    /// If the OS random number generator fails (`getrandom(2)` cannot fail once the
    /// kernel's pool is initialised; there is no safe fallback to a guessable secret).
    pub(crate) fn from_os() -> Secrets {
        let mut key = [0u8; 16];
        if let Err(e) = getrandom::fill(&mut key) {
            panic!(
                "ustack: the OS random number generator failed ({e}); no secret to key the stack with"
            );
        }
        Secrets {
            master: key_from_bytes(key),
        }
    }

    /// A deterministic secret from `seed` (tests, simulation, replay).
    pub(crate) fn from_seed(seed: u64) -> Secrets {
        Secrets {
            master: derive_key(seed, b"ustack master"),
        }
    }

    /// The secret a [`Config`](crate::Config) asks for: `seed` if given, else the OS's.
    pub(crate) fn new(seed: Option<u64>) -> Secrets {
        seed.map_or_else(Secrets::from_os, Secrets::from_seed)
    }

    /// The key for one purpose (`label`): SipHash-2-4 under the master key is the PRF, so
    /// keys of different labels are independent and none reveals the master.
    pub(crate) fn key(&self, label: &[u8]) -> SipKey {
        prf_key(
            SipHasher24::new_with_keys(self.master.0, self.master.1),
            label,
        )
    }

    /// 64 secret bits for one purpose (a port hint, say).
    pub(crate) fn u64(&self, label: &[u8]) -> u64 {
        self.key(label).0
    }

    /// A keyed hash-table state for one table (`label`).
    pub(crate) fn hasher(&self, label: &[u8]) -> KeyedState {
        KeyedState {
            key: self.key(label),
        }
    }
}

/// Two 64-bit words under `prf`, of `label` followed by 0 and by 1.
fn prf_key(prf: SipHasher24, label: &[u8]) -> SipKey {
    let mut buf = [0u8; 64];
    let n = label.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&label[..n]);
    buf[n] = 0;
    let k0 = prf.hash(&buf[..=n]);
    buf[n] = 1;
    let k1 = prf.hash(&buf[..=n]);
    (k0, k1)
}

/// Expand a 64-bit `seed` into a SipHash key for one purpose (`label`): SipHash-2-4 keyed by
/// the seed is the PRF. The seed is the only entropy (64 bits).
pub(crate) fn derive_key(seed: u64, label: &[u8]) -> SipKey {
    // The second key word is a fixed, public domain constant ("ustack-k" in ASCII).
    prf_key(
        SipHasher24::new_with_keys(seed, 0x7573_7461_636b_2d6b),
        label,
    )
}

/// Split 16 bytes into SipHash's two little-endian key words (as `SipHasher24::new_with_key`).
pub(crate) fn key_from_bytes(key: [u8; 16]) -> SipKey {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&key[..8]);
    hi.copy_from_slice(&key[8..]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// SipHash-2-4 of `bytes` under `key`, truncated to 32 bits as Linux's `siphash_*u32` users.
#[inline]
pub(crate) fn siphash32(key: SipKey, bytes: &[u8]) -> u32 {
    siphash24(key, bytes) as u32
}

/// One SipRound ([SipHash paper](https://www.aumasson.jp/siphash/siphash.pdf) §2).
#[inline(always)]
pub(crate) fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash's state for `key` (the paper's initialisation, §2).
#[inline(always)]
fn sip_init(key: SipKey) -> [u64; 4] {
    [
        key.0 ^ 0x736f_6d65_7073_6575,
        key.1 ^ 0x646f_7261_6e64_6f6d,
        key.0 ^ 0x6c79_6765_6e65_7261,
        key.1 ^ 0x7465_6462_7974_6573,
    ]
}

/// SipHash's finalisation: `D` rounds, then the state folded to 64 bits.
#[inline(always)]
fn sip_finish<const D: usize>(mut v: [u64; 4]) -> u64 {
    v[2] ^= 0xff;
    for _ in 0..D {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// SipHash-`C`-`D` (`C` compression rounds per 8-byte block, `D` finalisation rounds) of
/// the 12-byte message `a` (little-endian) then `b` (little-endian), from the words
/// themselves: a 4-tuple's addresses and ports (SipHash-1-3 for the tuple tables'
/// hash, 2-4 for IPv4 ISNs, as Linux's `siphash_3u32`).
#[inline(always)]
pub(crate) fn sip_u64_u32<const C: usize, const D: usize>(key: SipKey, a: u64, b: u32) -> u64 {
    let mut v = sip_init(key);
    v[3] ^= a;
    for _ in 0..C {
        sip_round(&mut v);
    }
    v[0] ^= a;
    // The last block: the 4 bytes left and the message length (12) in the top byte.
    let last = (12u64 << 56) | u64::from(b);
    v[3] ^= last;
    for _ in 0..C {
        sip_round(&mut v);
    }
    v[0] ^= last;
    sip_finish::<D>(v)
}

/// SipHash-2-4 of `bytes` under `key` in one pass over the message's 8-byte blocks: the
/// value `SipHasher24::hash` gives (tested below), without its buffering, for the short
/// messages of ISNs and timestamp offsets (Linux `siphash_3u32` and the like are such
/// one-pass forms too).
#[inline]
pub(crate) fn siphash24(key: SipKey, bytes: &[u8]) -> u64 {
    let mut v = sip_init(key);
    let mut blocks = bytes.chunks_exact(8);
    for block in &mut blocks {
        let m = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        v[3] ^= m;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= m;
    }
    // The last block: the bytes left (little-endian) and the length's low byte on top.
    let mut last = [0u8; 8];
    let rest = blocks.remainder();
    last[..rest.len()].copy_from_slice(rest);
    let m = u64::from_le_bytes(last) | ((bytes.len() as u64) << 56);
    v[3] ^= m;
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^= m;
    sip_finish::<4>(v)
}

/// The hasher of a table a peer can fill: SipHash-1-3 under a secret 128-bit key (the
/// variant Rust's std `HashMap` uses; Linux's `siphash` is 2-4, its `hsiphash` fewer
/// rounds). Each lookup hashes its key once. `Debug` does not print the key.
#[derive(Clone)]
pub struct KeyedState {
    key: SipKey,
}

impl KeyedState {
    /// A state with the given key, for tests.
    #[cfg(test)]
    pub(crate) fn with_key(key: SipKey) -> KeyedState {
        KeyedState { key }
    }

    /// A state keyed from a fixed `seed`, for tests; a stack keys its tables from its
    /// secret.
    pub fn from_seed(seed: u64) -> KeyedState {
        KeyedState {
            key: derive_key(seed, b"ustack table"),
        }
    }
}

impl fmt::Debug for KeyedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedState").finish_non_exhaustive()
    }
}

impl BuildHasher for KeyedState {
    type Hasher = SipHasher13;
    #[inline]
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.key.0, self.key.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_secrets_differ_and_seeds_replay() {
        assert_ne!(
            Secrets::from_os().key(b"x"),
            Secrets::from_os().key(b"x"),
            "two draws from the OS"
        );
        assert_eq!(
            Secrets::from_seed(3).key(b"x"),
            Secrets::from_seed(3).key(b"x")
        );
        assert_ne!(
            Secrets::from_seed(3).key(b"x"),
            Secrets::from_seed(3).key(b"y")
        );
        assert_ne!(
            Secrets::from_seed(3).key(b"x"),
            Secrets::from_seed(4).key(b"x")
        );
    }

    /// The one-pass SipHash-2-4 gives the reference implementation's value for every
    /// length a message may have here (the ISN's 12 and 36 bytes, the offsets' 8 and 32)
    /// and around the block boundaries.
    #[test]
    fn one_pass_siphash24_matches_the_reference() {
        let key = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        let msg: Vec<u8> = (0u8..64).collect();
        for len in 0..=msg.len() {
            assert_eq!(
                siphash24(key, &msg[..len]),
                SipHasher24::new_with_keys(key.0, key.1).hash(&msg[..len]),
                "{len} bytes"
            );
        }
        // The paper's test vector (appendix A): 15 bytes 00..0e under key 00..0f.
        assert_eq!(siphash24(key, &msg[..15]), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn keyed_tables_hash_differently_under_different_keys() {
        let a = Secrets::from_seed(1).hasher(b"t");
        let b = Secrets::from_seed(2).hasher(b"t");
        assert_eq!(a.hash_one(42u64), a.hash_one(42u64));
        assert_ne!(a.hash_one(42u64), b.hash_one(42u64));
    }
}
