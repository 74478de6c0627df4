//! The receive buffer as an application sees it: small segments coalesced into shared
//! chunks (Linux `tcp_try_coalesce`) and read back byte-exact, out-of-order data with holes
//! filled later, reads of every size across chunk boundaries, the buffer memory (the
//! stack's `buffers` kind) held per byte and freed by the read, and the window advertised
//! after partial reads (Linux `tcp_cleanup_rbuf`). The test is the peer, segment by
//! segment.

use ustack_stack::TcpHandle;
use ustack_stack::tcp::BUFFER_CHUNK;
use ustack_testkit::tcp::{Seg, SegTest};

/// The peer's ISN: its first data byte has sequence number `ISN + 1`.
const ISN: u32 = 1000;

/// Stream byte `i` (0-based): a pattern that shows any shift, swap or repeat.
fn byte(i: usize) -> u8 {
    (i % 251) as u8 ^ (i / 251) as u8
}

fn stream(from: usize, len: usize) -> Vec<u8> {
    (from..from + len).map(byte).collect()
}

/// A stack and a passive open with SACK from the peer (MSS 1000, no window scaling): the
/// handle and our ISN + 1 (what the peer acknowledges).
fn open() -> (SegTest, TcpHandle, u32) {
    let mut t = SegTest::listening(80);
    let (h, synack) = t.accept_with(Seg::syn(ISN).mss(1000).sack_perm(), 65_535);
    (t, h, synack.seq.wrapping_add(1))
}

/// The peer sends stream bytes `[from, from + len)`; our ACKs are collected.
fn send(t: &mut SegTest, ack: u32, from: usize, len: usize) -> Vec<Seg> {
    let seq = ISN + 1 + from as u32;
    t.send(Seg::ack(seq, ack).data(&stream(from, len)));
    t.recv_all()
}

/// Socket-buffer memory in use, as the stack's memory-by-kind report and its resource
/// count say it (they must agree).
fn buffer_bytes(t: &SegTest) -> usize {
    let kind = t.stack.memory().get("buffers").map(|k| k.bytes);
    let res = t.stack.tcp_resources().buffer_bytes;
    assert_eq!(kind, Some(res), "memory by kind and tcp_resources disagree");
    res
}

/// Chunks that hold stream bytes `[from, to)` (the first byte of the stream is at the
/// start of a chunk, and each chunk holds one aligned block).
fn chunks_for(from: usize, to: usize) -> usize {
    if from == to {
        0
    } else {
        (to - 1) / BUFFER_CHUNK - from / BUFFER_CHUNK + 1
    }
}

/// The peer sends segments of `lens` bytes in order from stream byte `at`; after each,
/// the buffer holds one chunk per aligned block of the unread stream `[0, end)` (nothing
/// read yet). Returns the end.
fn send_in_order(t: &mut SegTest, ack: u32, mut at: usize, lens: &[usize]) -> usize {
    for &len in lens {
        send(t, ack, at, len);
        at += len;
        assert_eq!(
            buffer_bytes(t),
            chunks_for(0, at) * BUFFER_CHUNK,
            "after {at} bytes"
        );
    }
    at
}

/// One `tcp_recv` of at most `n` bytes.
fn read_n(t: &mut SegTest, h: TcpHandle, n: usize) -> Vec<u8> {
    let now = t.now;
    let mut buf = vec![0u8; n];
    let got = t.stack.tcp_recv(now, h, &mut buf).expect("data to read");
    buf.truncate(got);
    buf
}

/// Many small in-order segments (1 to 13 bytes) share chunks: the buffer holds one chunk
/// per aligned 2 KiB block of the stream, not one per segment, and the application reads
/// the bytes back in order, exactly; reading frees every chunk.
#[test]
fn small_segments_share_chunks_and_read_back_in_order() {
    let (mut t, h, ack) = open();
    let lens: Vec<usize> = (0..700).map(|i| i % 13 + 1).collect();
    let at = send_in_order(&mut t, ack, 0, &lens);
    assert!(at > 2 * BUFFER_CHUNK, "the stream crosses chunk boundaries");
    assert_eq!(t.read(h), Some(stream(0, at)));
    assert_eq!(buffer_bytes(&t), 0, "reading frees every chunk");
}

/// Segments that end one byte short of a chunk boundary, exactly at it, and one byte
/// past it (the edges of the room left in the tail chunk): the bytes read back in order
/// and the buffer holds one chunk per block the stream touches.
#[test]
fn segments_ending_at_either_side_of_a_chunk_boundary() {
    let (mut t, h, ack) = open();
    // Ends: 1000, 2047 (one short), 2049 (one past), 3049, 4047, 4048 (at), 4049, 5048,
    // 6048, 6144 (at), 6145.
    let lens = [1000, 1047, 2, 1000, 998, 1, 1, 999, 1000, 96, 1];
    let at = send_in_order(&mut t, ack, 0, &lens);
    assert_eq!(t.read(h), Some(stream(0, at)));
    assert_eq!(buffer_bytes(&t), 0);
}

/// Reads of every size from 1 to a little over two chunks, one after another over a
/// stream that crosses many chunk boundaries: every read returns the next bytes, and the
/// buffer holds exactly the chunks of the bytes not yet read.
#[test]
fn reads_of_every_size_across_chunk_boundaries() {
    let (mut t, h, ack) = open();
    let mut sent = 0;
    let mut read = 0;
    let mut size = 1;
    while size <= 2 * BUFFER_CHUNK + 3 {
        // Keep enough queued for the next read, in segments of assorted sizes.
        while sent - read < size {
            let len = [1000, 7, 333, 1, 999][sent % 5];
            send(&mut t, ack, sent, len);
            sent += len;
        }
        let got = read_n(&mut t, h, size);
        assert_eq!(got, stream(read, size), "read of {size} at {read}");
        read += size;
        assert_eq!(
            buffer_bytes(&t),
            chunks_for(read, sent) * BUFFER_CHUNK,
            "after reading {read} of {sent}"
        );
        t.recv_all();
        size += 1;
    }
    assert_eq!(t.read(h), Some(stream(read, sent - read)));
    assert_eq!(buffer_bytes(&t), 0);
}

/// Small in-order segments, then segments beyond holes (SACKed), then the holes filled
/// in a scrambled order: nothing is readable past the first hole until it fills, the
/// stream reads back whole, and no memory stays held.
#[test]
fn out_of_order_segments_and_filled_holes_read_back_in_order() {
    let (mut t, h, ack) = open();
    let base = send_in_order(&mut t, ack, 0, &[5, 1, 60, 17, 3]);
    // Segments of 100 bytes at base + 100 * k; the odd ones first (holes at the even).
    let seg = |k: usize| (base + 100 * k, 100);
    for k in (1..40).step_by(2) {
        let (from, len) = seg(k);
        let acks = send(&mut t, ack, from, len);
        let a = acks.last().expect("a duplicate ACK for out-of-order data");
        assert_eq!(a.ack, ISN + 1 + base as u32, "rcv_nxt stays at the hole");
        assert!(!a.sack.is_empty(), "SACK blocks for the queued data");
    }
    assert_eq!(t.read(h), Some(stream(0, base)), "only the in-order bytes");
    // Fill the holes: 2k for k in a scrambled order, the first hole last.
    let mut holes: Vec<usize> = (0..20).map(|k| 2 * k).collect();
    holes.sort_by_key(|k| (k * 7) % 20);
    holes.retain(|&k| k != 0);
    holes.push(0);
    for k in holes {
        let (from, len) = seg(k);
        send(&mut t, ack, from, len);
    }
    let end = base + 100 * 40;
    let acks = send(&mut t, ack, end - 100, 100); // a duplicate of the last segment
    assert_eq!(acks.last().map(|a| a.ack), Some(ISN + 1 + end as u32));
    assert_eq!(t.read(h), Some(stream(base, end - base)));
    assert_eq!(buffer_bytes(&t), 0);
}

/// The window after partial reads (RFC 9293 §3.8.6.2.2, Linux `tcp_cleanup_rbuf` and
/// `__tcp_select_window`): the peer fills every window offered until the offer falls to
/// zero; a read too small to be worth announcing sends nothing; a read that opens the
/// window sends one update, offering the free space (buffer less unread bytes, at most
/// the unscaled field's 65,535) rounded down to the MSS; a further small read that does
/// not double the window sends nothing, and one that opens a nearly used window to the
/// whole buffer does. The unread data stays counted in the buffer memory, chunk by chunk.
#[test]
fn window_after_partial_reads() {
    let (mut t, h, ack) = open();
    let mut sent = 0usize;
    let mut edge = 65_000; // what the SYN-ACK offered
    let mut last = None;
    loop {
        while sent + 1000 <= edge {
            let acks = send(&mut t, ack, sent, 1000);
            sent += 1000;
            for a in &acks {
                let right = (a.ack - ISN - 1) as usize + usize::from(a.window);
                assert!(right >= edge, "the window never shrinks: {a:?}");
                edge = right;
            }
            last = acks.last().cloned().or(last);
        }
        // The last segment waits for the delayed ACK.
        let delayed = t.advance(std::time::Duration::from_millis(200));
        let a = delayed.last().map(|(_, s)| s.clone()).or(last.clone());
        let a = a.expect("an ACK");
        assert_eq!(a.ack, ISN + 1 + sent as u32);
        if a.window == 0 {
            break;
        }
        edge = sent + usize::from(a.window);
        assert!(sent < 1 << 20, "the window never closed");
    }
    let limit = t.stack.tcp_recv_buffer(h).unwrap();
    assert!(sent <= limit, "{sent} bytes queued in a buffer of {limit}");
    assert_eq!(buffer_bytes(&t), chunks_for(0, sent) * BUFFER_CHUNK);
    let offer = |unread: usize| {
        let free = (limit - unread).min(65_535);
        free - free % 1000
    };

    // A read of 1000 bytes leaves too little free to offer (under a sixteenth of the
    // window): no update.
    assert_eq!(read_n(&mut t, h, 1000), stream(0, 1000));
    assert_eq!(
        t.recv_all(),
        vec![],
        "no update for a window under the SWS floor"
    );
    assert_eq!(buffer_bytes(&t), chunks_for(1000, sent) * BUFFER_CHUNK);

    // A read of 20,000 more: one update, the free space rounded down to the MSS.
    assert_eq!(read_n(&mut t, h, 20_000), stream(1000, 20_000));
    let upd = t.recv_all();
    assert_eq!(upd.len(), 1, "one window update: {upd:?}");
    assert_eq!(upd[0].ack, ISN + 1 + sent as u32);
    assert_eq!(usize::from(upd[0].window), offer(sent - 21_000));
    assert_eq!(buffer_bytes(&t), chunks_for(21_000, sent) * BUFFER_CHUNK);

    // A small read after that does not double the window: nothing.
    assert_eq!(read_n(&mut t, h, 100), stream(21_000, 100));
    assert_eq!(t.recv_all(), vec![]);

    // The peer sends into the window offered until 5000 of it is left; a read of
    // everything opens it to the whole buffer's worth: one update.
    let right = sent + usize::from(upd[0].window);
    while sent + 1000 <= right - 5000 {
        send(&mut t, ack, sent, 1000);
        sent += 1000;
    }
    t.advance(std::time::Duration::from_millis(200));
    let unread = sent - 21_100;
    assert_eq!(read_n(&mut t, h, unread), stream(21_100, unread));
    let upd = t.recv_all();
    assert_eq!(upd.len(), 1, "one window update: {upd:?}");
    assert_eq!(usize::from(upd[0].window), offer(0));
    assert_eq!(buffer_bytes(&t), 0);
}
