//! The bytes the scenarios send and check: numbered messages for the echo scenarios, a
//! periodic pattern for stream.

/// The message for round trip `seq`: the sequence number, then bytes derived from it.
pub fn fill_message(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
}

/// Whether `got` is message `seq`'s bytes from offset `at` on (what [`fill_message`]
/// writes there), computed byte by byte: an echo is checked as its pieces arrive, with no
/// copy of it kept.
pub fn message_matches(seq: u64, at: usize, got: &[u8]) -> bool {
    let head = seq.to_be_bytes();
    got.iter().enumerate().all(|(k, &b)| {
        let i = at + k;
        b == head
            .get(i)
            .copied()
            .unwrap_or_else(|| (seq as usize).wrapping_add(i - 8) as u8)
    })
}

/// One period block of the stream pattern: 256 periods of 251 bytes.
pub fn stream_chunk() -> Vec<u8> {
    (0..251 * 256).map(|i| stream_byte(i as u64)).collect()
}

/// Byte `pos` of the stream scenario's pattern.
pub fn stream_byte(pos: u64) -> u8 {
    (pos % 251) as u8
}

/// Whether `got` is the stream pattern starting at stream offset `pos`, compared slice by
/// slice against one precomputed period block (`chunk`, a whole number of periods), so
/// that checking costs a `memcmp`, not a modulo per byte: the checker must not be what
/// the benchmark measures.
pub fn stream_matches(chunk: &[u8], mut pos: u64, mut got: &[u8]) -> bool {
    while !got.is_empty() {
        let off = (pos % chunk.len() as u64) as usize;
        let n = got.len().min(chunk.len() - off);
        if got[..n] != chunk[off..off + n] {
            return false;
        }
        got = &got[n..];
        pos += n as u64;
    }
    true
}

/// The next piece of the stream pattern to write after `sent` bytes, at most up to `limit`
/// bytes in all (empty once there): `chunk` is a whole number of the pattern's periods,
/// so writes continue it.
pub fn stream_next(chunk: &[u8], sent: u64, limit: Option<u64>) -> &[u8] {
    let off = (sent % chunk.len() as u64) as usize;
    let left = limit.map_or(u64::MAX, |l| l.saturating_sub(sent));
    let n = (chunk.len() - off).min(usize::try_from(left).unwrap_or(usize::MAX));
    &chunk[off..off + n]
}

/// The sequence number an echo carries (its first 8 bytes).
pub fn message_seq(msg: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(msg.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_matched_piece_by_piece_and_a_wrong_byte_anywhere_fails() {
        for size in [8, 9, 64, 300] {
            let mut m = vec![0u8; size];
            let seq = 0x0102_0304_0506_07f0 + size as u64;
            fill_message(&mut m, seq);
            for cut in 0..=size {
                assert!(message_matches(seq, 0, &m[..cut]), "{size} {cut}");
                assert!(message_matches(seq, cut, &m[cut..]), "{size} {cut}");
            }
            assert!(!message_matches(seq + 1, 0, &m));
            for i in 0..size {
                let mut bad = m.clone();
                bad[i] ^= 0x10;
                assert!(!message_matches(seq, 0, &bad), "{size} {i}");
                assert!(!message_matches(seq, i, &bad[i..]), "{size} {i}");
            }
        }
    }

    #[test]
    fn stream_writes_stop_at_the_byte_count_and_continue_the_pattern() {
        let chunk = stream_chunk();
        // Unlimited: the rest of the block from the offset.
        assert_eq!(stream_next(&chunk, 10, None), &chunk[10..]);
        // Limited: never past the count, and empty once there.
        assert_eq!(stream_next(&chunk, 10, Some(15)), &chunk[10..15]);
        assert!(stream_next(&chunk, 15, Some(15)).is_empty());
        let pos = chunk.len() as u64 + 3;
        assert!(stream_matches(
            &chunk,
            pos,
            stream_next(&chunk, pos, Some(pos + 100))
        ));
    }
}
