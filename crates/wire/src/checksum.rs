//! The Internet checksum: [RFC 1071](https://www.rfc-editor.org/rfc/rfc1071), pseudo-headers
//! for UDP/TCP over IPv4 ([RFC 768](https://www.rfc-editor.org/rfc/rfc768),
//! [RFC 9293 §3.1](https://www.rfc-editor.org/rfc/rfc9293#section-3.1)) and IPv6
//! ([RFC 8200 §8.1](https://www.rfc-editor.org/rfc/rfc8200#section-8.1)), and incremental
//! update ([RFC 1624](https://www.rfc-editor.org/rfc/rfc1624)).
//!
//! Values here are *sums*: the 16-bit ones'-complement sum of the data read as big-endian
//! words, folded, not yet complemented. Sums of pieces combine with [`combine`]; a header
//! field gets [`finish`]`(sum)`. A buffer whose stored checksum is right sums to `0xffff`.
//!
//! Speed: [`data`] reads 8 bytes at a time in native byte order into a 64-bit accumulator
//! (the words of a step added in one carry chain, `adc` on x86-64) and swaps once at the
//! end; RFC 1071 §2(B) ("byte order independence") is why that is correct. `cargo bench -p ustack-wire` measures it (docs/bench.md has figures).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::IpProtocol;

/// Fold a wide accumulator of native-order 16-bit sums (any `u64`: ones'-complement
/// addition modulo 2^64 - 1, which 2^16 - 1 divides) into 16 bits: the halves added with
/// their end-around carry, twice.
#[inline]
fn fold(acc: u64) -> u16 {
    let (s, c) = (acc as u32).overflowing_add((acc >> 32) as u32);
    // After an add that carried the sum is at most 2^32 - 2: adding the carry back
    // cannot overflow (the same below).
    let s = s + u32::from(c);
    let (t, c) = (s as u16).overflowing_add((s >> 16) as u16);
    t + u16::from(c)
}

/// The ones'-complement sum of `data` as big-endian 16-bit words; an odd last byte is
/// padded with zero (RFC 1071 §1). Pieces summed separately must split at even offsets.
#[inline]
pub fn data(data: &[u8]) -> u16 {
    // Native-order sum -> big-endian value (a no-op on big-endian machines).
    u16::from_be(fold(sum_ne(0, data)))
}

/// `a + b + carry` with the carry out: one `adc` on x86-64, where LLVM chains them (the
/// carry stays in the flags from one word to the next).
#[inline(always)]
fn adc(carry: u8, a: u64, b: u64) -> (u8, u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut out = 0;
        let carry = core::arch::x86_64::_addcarry_u64(carry, a, b, &mut out);
        (carry, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let (s, c1) = a.overflowing_add(b);
        let (s, c2) = s.overflowing_add(u64::from(carry));
        (u8::from(c1 | c2), s)
    }
}

/// Eight bytes of `b` from `i`, in native order.
#[inline(always)]
fn word(b: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(*b[i..].first_chunk::<8>().expect("a whole word"))
}

/// The unfolded sum behind [`data`], starting from `init` (words already summed, such as
/// a pseudo-header's): 16-bit words read in native byte order, added as 64-bit words with
/// end-around carry (ones'-complement addition modulo 2^64 - 1, which [`fold`] takes to
/// 16 bits), the carry chained through each step's words (Linux's x86 `csum_partial`
/// does the same with `adc`): 64 bytes a step, then 32, 16 and 8, and the last 0..7
/// bytes as one word.
#[inline]
fn sum_ne(init: u64, data: &[u8]) -> u64 {
    let (mut acc, mut c) = (init, 0u8);
    let mut rest = data;
    while let Some((b, r)) = rest.split_first_chunk::<64>() {
        for i in 0..8 {
            (c, acc) = adc(c, acc, word(b, 8 * i));
        }
        rest = r;
    }
    if let Some((b, r)) = rest.split_first_chunk::<32>() {
        for i in 0..4 {
            (c, acc) = adc(c, acc, word(b, 8 * i));
        }
        rest = r;
    }
    if let Some((b, r)) = rest.split_first_chunk::<16>() {
        (c, acc) = adc(c, acc, word(b, 0));
        (c, acc) = adc(c, acc, word(b, 8));
        rest = r;
    }
    if let Some((b, r)) = rest.split_first_chunk::<8>() {
        (c, acc) = adc(c, acc, word(b, 0));
        rest = r;
    }
    // The last 0..7 bytes as one word, each 16-bit piece in its own lane (the lanes'
    // order does not matter to the sum).
    let mut tail = 0u64;
    if let Some((b, r)) = rest.split_first_chunk::<4>() {
        tail = u64::from(u32::from_ne_bytes(*b));
        rest = r;
    }
    if let Some((b, r)) = rest.split_first_chunk::<2>() {
        tail |= u64::from(u16::from_ne_bytes(*b)) << 32;
        rest = r;
    }
    if let [last] = rest {
        tail |= u64::from(u16::from_ne_bytes([*last, 0])) << 48;
    }
    (c, acc) = adc(c, acc, tail);
    // The last carry back in: after an add that carried the sum is at most 2^64 - 2.
    let (s, c2) = acc.overflowing_add(u64::from(c));
    s + u64::from(c2)
}

/// [`data`] of a 20-byte IPv4 header without options, in straight-line code: five 32-bit
/// words added and folded (the receive fast path checks every header with it; `data`'s
/// loop costs three times as much on 20 bytes).
#[inline(always)]
pub fn data20(h: &[u8; 20]) -> u16 {
    let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    u16::from_be(fold(w(0) + w(4) + w(8) + w(12) + w(16)))
}

/// The sum over the IPv4 pseudo-header and the whole segment `seg` (header and data) of
/// a TCP or UDP datagram whose 20-byte IPv4 header is `h`: what `combine(&[
/// pseudo_header_v4(..), data(seg)])` gives, with one fold instead of three. A segment
/// whose checksum is right sums to `0xffff` (RFC 9293 §3.1, RFC 768).
#[inline]
pub fn segment_sum_v4(h: &[u8; 20], protocol: IpProtocol, seg: &[u8]) -> u16 {
    let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    // The pseudo-header's last two words (zero and protocol; the length, which fits 16
    // bits in an IPv4 datagram), read in native order like the rest.
    let proto = u64::from(u16::from_ne_bytes([0, u8::from(protocol)]));
    let len = u64::from(u16::from_ne_bytes((seg.len() as u16).to_be_bytes()));
    u16::from_be(fold(sum_ne(w(12) + w(16) + proto + len, seg)))
}

/// [`segment_sum_v4`] over IPv6 (RFC 8200 §8.1): the sum over the pseudo-header (the
/// addresses of the 40-byte IPv6 header `h`, the upper-layer length, `protocol`) and the
/// whole segment `seg` of a datagram whose upper-layer header follows `h` directly. A
/// segment whose checksum is right sums to `0xffff`.
#[inline]
pub fn segment_sum_v6(h: &[u8; 40], protocol: IpProtocol, seg: &[u8]) -> u16 {
    // The addresses are bytes 8..40, contiguous and at an even offset: one sum. The
    // length is 32 bits in the pseudo-header; a datagram without a jumbo payload has it
    // below 2^16.
    let proto = u64::from(u16::from_ne_bytes([0, u8::from(protocol)]));
    let len = seg.len() as u32;
    let len = u64::from(u16::from_ne_bytes((len as u16).to_be_bytes()))
        + u64::from(u16::from_ne_bytes(((len >> 16) as u16).to_be_bytes()));
    u16::from_be(fold(sum_ne(sum_ne(proto + len, &h[8..40]), seg)))
}

/// The sum over `seg` (a TCP or UDP segment, header and data, shorter than 2^16 bytes)
/// and its pseudo-header, given the pseudo-header's sum without the length, `pseudo` (as
/// [`pseudo_header_v4`] or [`pseudo_header_v6`] give it with length 0): what
/// `combine(&[pseudo, seg.len() as u16, data(seg)])` gives, with one fold instead of three.
/// `pseudo` and the length are added to the native-order accumulator byte-swapped like
/// the data (RFC 1071 §2(B): the sum commutes with swapping bytes). A transmit path keeps
/// `pseudo` per connection and sums each segment once.
#[inline(always)]
pub fn segment_sum(pseudo: u16, seg: &[u8]) -> u16 {
    let pseudo = u64::from(u16::from_ne_bytes(pseudo.to_be_bytes()));
    let len = u64::from(u16::from_ne_bytes((seg.len() as u16).to_be_bytes()));
    u16::from_be(fold(sum_ne(pseudo + len, seg)))
}

/// Add ones'-complement sums.
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| s as u64).sum())
}

/// The value to store in a checksum field for a total sum `sum`.
#[inline]
pub fn finish(sum: u16) -> u16 {
    !sum
}

/// The checksum of `bytes` alone, ready for a header field (IPv4 header, ICMPv4).
#[inline]
pub fn checksum(bytes: &[u8]) -> u16 {
    finish(data(bytes))
}

/// Sum of the IPv4 pseudo-header: source, destination, zero, protocol, length
/// (RFC 768; RFC 9293 §3.1).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: IpProtocol, length: u16) -> u16 {
    let s = src.octets();
    let d = dst.octets();
    let acc = u16::from_be_bytes([s[0], s[1]]) as u64
        + u16::from_be_bytes([s[2], s[3]]) as u64
        + u16::from_be_bytes([d[0], d[1]]) as u64
        + u16::from_be_bytes([d[2], d[3]]) as u64
        + u8::from(protocol) as u64
        + length as u64;
    fold(acc)
}

/// Sum of the IPv6 pseudo-header: source, destination, upper-layer length (32 bits),
/// three zero bytes, next header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: IpProtocol, length: u32) -> u16 {
    let acc = data(&src.octets()) as u64
        + data(&dst.octets()) as u64
        + (length >> 16) as u64
        + (length & 0xffff) as u64
        + u8::from(next_header) as u64;
    fold(acc)
}

/// Incremental update of a stored checksum `hc` when a 16-bit field changes from `old`
/// to `new`: RFC 1624 eqn. 3, `HC' = ~(~HC + ~m + m')`, which (unlike eqn. 2 of RFC 1141)
/// never yields the negative zero `0xffff` wrongly... except where the true sum is zero.
#[inline]
pub fn update16(hc: u16, old: u16, new: u16) -> u16 {
    !fold(!hc as u64 + !old as u64 + new as u64)
}

/// Incremental update for a 32-bit field (an IPv4 address, say): two 16-bit updates.
#[inline]
pub fn update32(hc: u16, old: u32, new: u32) -> u16 {
    let acc = !hc as u64
        + !(old >> 16) as u16 as u64
        + !(old as u16) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold(acc)
}

/// Sum of the pseudo-header for either IP version, for UDP and TCP, which take
/// `&IpAddr` pairs: [`pseudo_header_v4`] when both addresses are IPv4 (`length` is the
/// 16-bit UDP/TCP length there, so only its low 16 bits count), [`pseudo_header_v6`] when
/// both are IPv6. A mixed pair cannot occur on the wire; it is summed as IPv6 with the
/// IPv4 address in its IPv4-mapped form (RFC 4291 §2.5.5.2) rather than panicking.
#[inline]
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, protocol: IpProtocol, length: u32) -> u16 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(*s, *d, protocol, length as u16),
        _ => pseudo_header_v6(to_v6(src), to_v6(dst), protocol, length),
    }
}

fn to_v6(addr: &IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => *a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `segment_sum` is the three-piece sum it stands for, at every length up to a
    /// few words past the loop's 16-byte step and odd lengths, for pseudo-header sums
    /// near the fold's edges.
    #[test]
    fn segment_sum_is_pseudo_length_and_data_combined() {
        let bytes: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(151) >> 2) as u8 ^ 0xa5)
            .collect();
        for pseudo in [0u16, 1, 0x1234, 0xfffe, 0xffff] {
            for len in 0..bytes.len() {
                let seg = &bytes[..len];
                let want = combine(&[pseudo, len as u16, model(seg)]);
                assert_eq!(
                    segment_sum(pseudo, seg),
                    want,
                    "pseudo {pseudo:#x} len {len}"
                );
            }
        }
        // All ones: the sum that must fold to 0xffff, not 0.
        let ones = [0xffu8; 40];
        assert_eq!(segment_sum(0xffff, &ones[..0]), combine(&[0xffff, 0, 0]));
        assert_eq!(segment_sum(0, &ones), combine(&[0, 40, model(&ones)]));
    }

    /// The straightforward RFC 1071 loop, as the model to check the fast one against.
    fn model(bytes: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            acc += word as u32;
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn every_word_carrying_still_sums_like_the_model() {
        // All-ones words make each 64-bit add carry: the end-around carry must be kept.
        for len in [16, 17, 84, 1500, 4096] {
            let ones = vec![0xffu8; len];
            assert_eq!(data(&ones), model(&ones), "{len} bytes of 0xff");
            let mixed: Vec<u8> = (0..len)
                .map(|i| if i % 8 == 7 { 0xfe } else { 0xff })
                .collect();
            assert_eq!(data(&mixed), model(&mixed), "{len} bytes of 0xff..fe");
        }
    }

    /// The carry chain at every length through each step (64, 32, 16, 8 bytes and the
    /// 0..7-byte tail), from every alignment: all-ones words carry out of every add, and
    /// the last carry must come back in.
    #[test]
    fn carry_chain_at_every_length_and_alignment_sums_like_the_model() {
        let ones = [0xffu8; 208];
        let mixed: Vec<u8> = (0..208u32)
            .map(|i| {
                if i % 8 == 7 {
                    0xfe
                } else {
                    (0xff - (i % 3)) as u8
                }
            })
            .collect();
        for start in 0..8 {
            for end in start..ones.len() {
                let (a, b) = (&ones[start..end], &mixed[start..end]);
                assert_eq!(data(a), model(a), "ones {start}..{end}");
                assert_eq!(data(b), model(b), "mixed {start}..{end}");
            }
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
    }

    #[test]
    fn ipv4_header_golden() {
        // A real IPv4 header (Wikipedia's worked example) whose checksum is 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(data(&h), 0xffff, "a correct header sums to all ones");
    }

    #[test]
    fn odd_lengths_and_combine() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        assert_eq!(data(&bytes), model(&bytes));
        let (a, b) = bytes.split_at(500);
        assert_eq!(combine(&[data(a), data(b)]), model(&bytes));
    }

    #[test]
    fn incremental_update_matches_recompute() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let c = checksum(&h);
        // Decrement the TTL (bytes 8..10 hold TTL and protocol).
        let old = u16::from_be_bytes([h[8], h[9]]);
        h[8] -= 1;
        let new = u16::from_be_bytes([h[8], h[9]]);
        assert_eq!(update16(c, old, new), checksum(&h));
        // Rewrite the destination address.
        let old32 = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        h[16..20].copy_from_slice(&[10, 1, 2, 3]);
        let new32 = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
        assert_eq!(
            update32(
                checksum(&{
                    let mut g = h;
                    g[16..20].copy_from_slice(&old32.to_be_bytes());
                    g
                }),
                old32,
                new32
            ),
            checksum(&h)
        );
    }

    proptest::proptest! {
        #[test]
        fn fast_sum_matches_model(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2000)) {
            proptest::prop_assert_eq!(data(&bytes), model(&bytes));
        }

        #[test]
        fn segment_sum_matches_pseudo_header_and_data(h: [u8; 20],
                seg in proptest::collection::vec(proptest::num::u8::ANY, 0..1600)) {
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            let ph = pseudo_header_v4(src, dst, IpProtocol::Tcp, seg.len() as u16);
            proptest::prop_assert_eq!(
                segment_sum_v4(&h, IpProtocol::Tcp, &seg),
                combine(&[ph, model(&seg)])
            );
        }

        #[test]
        fn segment_sum_v6_matches_pseudo_header_and_data(src: [u8; 16], dst: [u8; 16],
                seg in proptest::collection::vec(proptest::num::u8::ANY, 0..1600)) {
            let mut h = [0u8; 40];
            h[8..24].copy_from_slice(&src);
            h[24..40].copy_from_slice(&dst);
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let ph = pseudo_header_v6(src, dst, IpProtocol::Tcp, seg.len() as u32);
            proptest::prop_assert_eq!(
                segment_sum_v6(&h, IpProtocol::Tcp, &seg),
                combine(&[ph, model(&seg)])
            );
        }

        #[test]
        fn header_sum_matches_the_model(h: [u8; 20]) {
            proptest::prop_assert_eq!(data20(&h), model(&h));
        }

        #[test]
        fn update16_matches_recompute(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 2..200),
                                      idx in 0usize..100, new: u16) {
            let i = (idx % (bytes.len() / 2)) * 2;
            let before = checksum(&bytes);
            let old = u16::from_be_bytes([bytes[i], bytes[i + 1]]);
            bytes[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let after = checksum(&bytes);
            // 0x0000 and 0xffff are the two zeros of ones'-complement arithmetic.
            let got = update16(before, old, new);
            proptest::prop_assert!(got == after || (got ^ after) == 0xffff && (got == 0 || got == 0xffff));
        }
    }
}
