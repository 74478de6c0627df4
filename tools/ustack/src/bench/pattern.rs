//! The bytes the scenarios send and check: numbered messages for the echo scenarios, a
//! periodic pattern for stream.

/// The message for round trip `seq`: the sequence number, then bytes derived from it.
pub fn fill_message(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[8..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_add(i) as u8;
    }
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
