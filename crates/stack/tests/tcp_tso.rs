//! TSO inside TCP (`Stack::set_gso_max_size`; Linux `tcp_tso_autosize`, `tcp_write_xmit`):
//! for a device that cuts super-segments itself, a run of full segments the windows allow
//! leaves as one frame. Cut as the kernel cuts it (`tcp_gso_segment`: the headers copied,
//! sequence numbers and IPv4 IDs counted on, PSH and FIN on the last piece only, checksums
//! made), it must give byte for byte the frames the same connection sends one segment at a
//! time; and a loss inside it is retransmitted as one segment, not the whole run.

use core::time::Duration;

use ustack_stack::TcpHandle;
use ustack_testkit::tcp::{LOCAL_IP, PEER, Seg, SegTest, parse};
use ustack_wire::IpProtocol;
use ustack_wire::checksum::{checksum, combine, data, finish, pseudo_header_v4};

const PEER_ISN: u32 = 1000;
/// 1460 less the timestamp option.
const MSS: usize = 1448;
/// IPv4 (20) and TCP with timestamps (32).
const HDR: usize = 52;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// A connection accepted from [`PEER`] (MSS 1460, window scale, SACK, timestamps, 1 ms
/// RTT), the device taking super-segments up to `gso` bytes (0: none). Returns the test,
/// the handle, our first data sequence number and our timestamp to echo.
fn established(gso: usize) -> (SegTest, TcpHandle, u32, u32) {
    let mut t = SegTest::listening(80);
    t.stack.set_gso_max_size(gso);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    let syn = Seg::syn(PEER_ISN)
        .mss(1460)
        .wscale(7)
        .sack_perm()
        .ts(100, 0);
    let (h, synack) = t.accept_after(syn, 65_535, Duration::from_millis(1));
    let our_ts = synack.ts.map_or(0, |ts| ts.0);
    (t, h, synack.seq.wrapping_add(1), our_ts)
}

/// Every frame the stack has to send now, as it made them.
fn frames(t: &mut SegTest) -> Vec<Vec<u8>> {
    core::iter::from_fn(|| t.stack.poll_transmit(t.now)).collect()
}

/// What the kernel makes of a TCP/IPv4 super-segment (`tcp_gso_segment`,
/// `inet_gso_segment`): pieces of `mss` bytes, each with the headers, its sequence number,
/// IPv4 ID and total length, PSH and FIN only on the last, both checksums computed.
fn gso_segment(sup: &[u8], mss: usize) -> Vec<Vec<u8>> {
    let hdr = 20 + usize::from(sup[32] >> 4) * 4;
    let seq0 = u32::from_be_bytes(sup[24..28].try_into().unwrap());
    let id0 = u16::from_be_bytes([sup[4], sup[5]]);
    let chunks: Vec<&[u8]> = sup[hdr..].chunks(mss).collect();
    let n = chunks.len();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut f = sup[..hdr].to_vec();
            f.extend_from_slice(chunk);
            let len = f.len() as u16;
            f[2..4].copy_from_slice(&len.to_be_bytes());
            f[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            f[10..12].fill(0);
            let c = checksum(&f[..20]);
            f[10..12].copy_from_slice(&c.to_be_bytes());
            let seq = seq0.wrapping_add((i * mss) as u32);
            f[24..28].copy_from_slice(&seq.to_be_bytes());
            if i + 1 < n {
                f[33] &= !(PSH | FIN);
            }
            f[36..38].fill(0);
            let ph = pseudo_header_v4(LOCAL_IP, *PEER.ip(), IpProtocol::Tcp, len - 20);
            let c = finish(combine(&[ph, data(&f[20..])]));
            f[36..38].copy_from_slice(&c.to_be_bytes());
            f
        })
        .collect()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn a_super_segment_carries_what_the_segments_would() {
    let data = pattern(10 * MSS);
    // One segment at a time: the device takes nothing larger than the MTU.
    let (mut t, h, base, _) = established(0);
    t.now += Duration::from_millis(1);
    assert_eq!(t.write(h, &data), data.len());
    let reference = frames(&mut t);
    assert_eq!(reference.len(), 10, "ten MSS-sized segments without TSO");
    assert!(reference.iter().all(|f| f.len() == HDR + MSS));

    // The same connection with a device that takes super-segments: one frame.
    let (mut t, h, base2, _) = established(65_535);
    assert_eq!(base, base2, "the same seed gives the same connection");
    t.now += Duration::from_millis(1);
    assert_eq!(t.write(h, &data), data.len());
    let sent = frames(&mut t);
    assert_eq!(
        sent.len(),
        1,
        "one super-segment for the whole cwnd of data"
    );
    let sup = &sent[0];
    assert_eq!(sup.len(), HDR + 10 * MSS);
    assert_eq!(
        usize::from(u16::from_be_bytes([sup[2], sup[3]])),
        sup.len(),
        "IPv4 total length is the whole super-segment's"
    );
    assert_eq!(checksum(&sup[..20]), 0, "IPv4 header checksum right");
    assert_eq!(&sup[HDR..], &data[..], "the payload is the data, in order");
    // Cut as the kernel cuts it: the frames sent one at a time, byte for byte (headers,
    // IDs, timestamps, window, flags, checksums).
    let cut = gso_segment(sup, MSS);
    assert_eq!(cut.len(), reference.len());
    for (i, (a, b)) in cut.iter().zip(&reference).enumerate() {
        assert_eq!(a, b, "segment {i} of the super-segment differs");
    }
    // The MIB counts the segments the wire carries (Linux OutSegs by tcp_skb_pcount).
    let out = t.stack.mib().get(ustack_obs::Counter::TcpOutSegs);
    assert!(out >= 10, "OutSegs {out}");
}

#[test]
fn a_loss_inside_a_super_segment_is_retransmitted_in_mss_pieces() {
    let (mut t, h, base, our_ts) = established(65_535);
    let data = pattern(10 * MSS);
    t.now += Duration::from_millis(1);
    t.write(h, &data);
    let sent = frames(&mut t);
    assert_eq!(sent.len(), 1, "one super-segment");
    assert_eq!(sent[0].len(), HDR + 10 * MSS);
    // The fourth segment is lost on the wire: the peer acknowledges three and SACKs
    // what arrived after the hole, one duplicate ACK per segment.
    let seg = |i: usize| base.wrapping_add((i * MSS) as u32);
    let hole = seg(3);
    for (n, last) in (5..=10).enumerate() {
        t.now += Duration::from_micros(100);
        t.send(
            Seg::ack(PEER_ISN + 1, hole)
                .ts(101 + n as u32, our_ts)
                .sack(&[(seg(4), seg(last))]),
        );
    }
    let resent: Vec<(u32, usize)> = t
        .advance(Duration::from_millis(50))
        .into_iter()
        .filter(|(_, s)| s.dst_port == PEER.port() && !s.payload.is_empty())
        .map(|(_, s)| (s.seq, s.payload.len()))
        .collect();
    assert_eq!(
        resent,
        vec![(hole, MSS)],
        "only the lost segment is resent, MSS-sized"
    );
    // The whole is delivered once the hole is filled.
    t.send(Seg::ack(PEER_ISN + 1, seg(10)).ts(110, our_ts));
    assert!(frames(&mut t).iter().all(|f| parse(f).is_some()));
}

/// A driver gives what it sent back to the stack (`Stack::recycle`), super-segments too.
/// After a burst of them the stack keeps at most `FRAME_POOL_LARGE` of their buffers, not
/// up to `FRAME_POOL` (256 buffers of 64 KiB, 16 MiB held for good by a stack that goes
/// back to small frames), and the next super-segment is written into one of those it kept.
#[test]
fn the_frame_pool_keeps_a_bounded_number_of_super_segment_buffers() {
    use ustack_stack::stack::{FRAME_POOL, FRAME_POOL_LARGE};
    let (mut t, h, _, _) = established(65_535);
    assert_eq!(t.stack.frame_pool_bytes(), 0);
    // A burst's worth of super-segment buffers given back, and MTU-sized ones.
    for _ in 0..FRAME_POOL + 10 {
        t.stack.recycle(Vec::with_capacity(65_535));
    }
    let large = t.stack.frame_pool_bytes();
    assert!(
        large <= FRAME_POOL_LARGE * 65_535,
        "{large} bytes kept of {} super-segment buffers given back",
        FRAME_POOL + 10
    );
    assert!(large >= 65_535, "some are kept for the next burst");
    for _ in 0..FRAME_POOL + 10 {
        t.stack.recycle(Vec::with_capacity(1500));
    }
    assert_eq!(
        t.stack.frame_pool_bytes(),
        large + FRAME_POOL * 1500,
        "MTU-sized buffers: up to FRAME_POOL of them, beside the large ones"
    );
    // The next super-segment takes a kept large buffer, not a small one grown.
    let data = pattern(10 * MSS);
    t.now += Duration::from_millis(1);
    assert_eq!(t.write(h, &data), data.len());
    let sent = frames(&mut t);
    assert_eq!(sent.len(), 1, "one super-segment");
    assert_eq!(&sent[0][HDR..], &data[..]);
    assert_eq!(
        t.stack.frame_pool_bytes(),
        large - 65_535 + FRAME_POOL * 1500,
        "the super-segment was written into a large buffer the pool kept"
    );
}
