//! An established connection writes its IPv6 segments from a per-connection header
//! template (`tcp::xmit6`: Linux keeps the route, the flow label and the header fields in
//! the socket). The template path must give the frames the general path gives, byte for
//! byte: the same scripted exchange is run with the template on and off and every frame
//! compared (data, pure ACKs, SACK blocks, a hop-limit change and the flow label turned
//! off on the established connection, a Packet Too Big lowering the path MTU, FIN), with
//! and without checksum offload, and over Ethernet.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use core::time::Duration;

use ustack_obs::Instant;
use ustack_stack::{Config, Ipv4Cidr, Ipv6Cidr, Stack};
use ustack_testkit::tcp::{
    LOCAL_IP, Seg, SegTest, all_counters, build6, ethernet6_exchange, parse6,
};
use ustack_wire::checksum::{combine, data, pseudo_header_v6};
use ustack_wire::{IpProtocol, icmpv6, ipv6};

const LOCAL6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const PEER_PORT: u16 = 40000;
const PEER_ISN: u32 = 1000;

/// `frame` checked as a receiver would check it (TCP checksum over the IPv6
/// pseudo-header verified). With the checksum offloaded, the field must be zero and is
/// filled in here first.
fn check(frame: &[u8], offload: bool) -> Seg {
    let mut frame = frame.to_vec();
    if offload {
        assert_eq!(frame[56..58], [0, 0], "an offloaded checksum is left zero");
        let ph = pseudo_header_v6(LOCAL6, PEER6, IpProtocol::Tcp, (frame.len() - 40) as u32);
        let sum = combine(&[ph, data(&frame[40..])]);
        frame[56..58].copy_from_slice(&(!sum).to_be_bytes());
    }
    parse6(&frame).expect("a well-formed TCP/IPv6 frame, checksum right")
}

/// Deliver the peer's segment `seg` (its ports filled in).
fn send(t: &mut SegTest, mut seg: Seg) {
    (seg.src_port, seg.dst_port) = (PEER_PORT, 80);
    let now = t.now;
    t.stack.receive(now, &build6(&seg, PEER6, LOCAL6));
}

/// Every frame the stack has to send now, each [`check`]ed.
fn drain(t: &mut SegTest, offload: bool, out: &mut Vec<Vec<u8>>) -> Vec<Seg> {
    let mut segs = Vec::new();
    while let Some(frame) = t.stack.poll_transmit(t.now) {
        // A fragment (Next Header 44) is compared as bytes only.
        if frame[6] != 44 {
            segs.push(check(&frame, offload));
        }
        out.push(frame);
    }
    segs
}

/// A router's ICMPv6 Packet Too Big (RFC 4443 §3.2) with MTU `mtu`, quoting `packet`.
fn packet_too_big(mtu: u32, packet: &[u8]) -> Vec<u8> {
    let router = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe);
    let quote = &packet[..packet.len().min(1280 - 48)];
    let repr = icmpv6::Repr::PacketTooBig { mtu, data: quote };
    let mut out = vec![0u8; 40 + repr.buffer_len()];
    ipv6::Repr {
        src_addr: router,
        dst_addr: LOCAL6,
        next_header: IpProtocol::Icmpv6,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ipv6::Packet::new_unchecked(&mut out[..]));
    repr.emit(
        &mut icmpv6::Packet::new_unchecked(&mut out[40..]),
        &router,
        &LOCAL6,
        true,
    );
    out
}

/// The flow label of an IPv6 frame.
fn flow_label(f: &[u8]) -> u32 {
    u32::from_be_bytes([0, f[1] & 0x0f, f[2], f[3]])
}

/// What one run of the exchange produced: every frame after the handshake, the frames
/// of each step (for the test to check that each kind of segment was there), and the
/// counters at the end.
struct Run {
    frames: Vec<Vec<u8>>,
    data: Vec<Seg>,
    pure_ack: Vec<Seg>,
    sack: Vec<Seg>,
    after_hop_limit: usize,
    after_flowlabel: usize,
    after_pmtu: Vec<Seg>,
    counters: String,
}

/// The exchange, with header templates on or off, checksums computed or offloaded.
/// `foreign_ptb`: the path MTU is lowered (to 1400) by a Packet Too Big quoting a UDP
/// datagram of ours instead of a TCP segment: TCP's MSS stays, and its full segments
/// leave in fragments (RFC 8200 §4.5) from then on.
fn run(template: bool, offload: bool, foreign_ptb: bool) -> Run {
    let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24)).with_ipv6(Ipv6Cidr::new(LOCAL6, 64));
    c.seed = Some(42);
    c.checksum_offload = offload;
    let mut t = SegTest {
        stack: Stack::new(c),
        now: Instant::from_secs(1),
        port: 80,
        listener: None,
    };
    let any = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 80, 0, 0));
    t.listener = Some(t.stack.tcp_listen(any, 128).unwrap());
    t.stack.set_tcp_header_template(template);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    send(
        &mut t,
        Seg::syn(PEER_ISN)
            .mss(1440)
            .wscale(7)
            .sack_perm()
            .ts(100, 0),
    );
    let synack = check(&t.stack.poll_transmit(t.now).expect("SYN-ACK"), offload);
    let base = synack.seq.wrapping_add(1);
    let our_ts = synack.ts.map_or(0, |ts| ts.0);
    send(
        &mut t,
        Seg::ack(PEER_ISN + 1, base).ts(100, our_ts).win(65_535),
    );
    let (h, _) = t
        .stack
        .tcp_accept_addr(t.listener.unwrap())
        .expect("accepted");
    let mut frames = Vec::new();
    let ms = Duration::from_millis(1);

    // Data (with PSH, piggybacking the ACK).
    t.now += ms;
    assert_eq!(t.write(h, b"written from the template"), 25);
    let data = drain(&mut t, offload, &mut frames);
    let mut snd = base.wrapping_add(25);
    // The peer's data in order: a pure ACK (quick-ACK mode at the start).
    t.now += ms;
    let data_from_peer = |t: &mut SegTest, seq: u32, ack: u32, bytes: &[u8], tsval: u32| {
        send(
            t,
            Seg::ack(seq, ack).data(bytes).ts(tsval, our_ts).win(1000),
        );
    };
    data_from_peer(&mut t, PEER_ISN + 1, snd, &[1; 100], 101);
    let pure_ack = drain(&mut t, offload, &mut frames);
    // Two blocks out of order: duplicate ACKs carrying SACK blocks (RFC 2018).
    let mut sack = Vec::new();
    for (off, len) in [(200u32, 50usize), (400, 30)] {
        t.now += ms;
        data_from_peer(&mut t, PEER_ISN + 1 + off, snd, &vec![2; len], 102);
        sack.extend(drain(&mut t, offload, &mut frames));
    }
    // The hole filled.
    t.now += ms;
    data_from_peer(&mut t, PEER_ISN + 101, snd, &[3; 329], 103);
    drain(&mut t, offload, &mut frames);
    // The hop limit changed under the established connection: its next segments carry
    // the new one (the template is rebuilt).
    t.stack
        .set_sysctl("net.ipv6.conf.default.hop_limit", 33)
        .unwrap();
    let after_hop_limit = frames.len();
    t.now += ms;
    t.write(h, b"after the hop limit change");
    drain(&mut t, offload, &mut frames);
    snd = snd.wrapping_add(26);
    send(
        &mut t,
        Seg::ack(PEER_ISN + 431, snd).ts(104, our_ts).win(1000),
    );
    drain(&mut t, offload, &mut frames);
    // Flow labels turned off: label 0 from now on (RFC 6437 §3 "set to zero").
    t.stack.set_sysctl("net.ipv6.auto_flowlabels", 0).unwrap();
    let after_flowlabel = frames.len();
    t.now += ms;
    t.write(h, b"unlabelled");
    drain(&mut t, offload, &mut frames);
    snd = snd.wrapping_add(10);
    send(
        &mut t,
        Seg::ack(PEER_ISN + 431, snd).ts(105, our_ts).win(1000),
    );
    drain(&mut t, offload, &mut frames);
    // Four full segments, then a router's MTU of 1280: resent at once in pieces that fit,
    // and new data at the new size (RFC 8201; Linux tcp_v6_mtu_reduced).
    t.now += ms;
    if foreign_ptb {
        // Data in flight, so that the connection holds its template across the report.
        t.write(h, b"in flight");
        drain(&mut t, offload, &mut frames);
        snd = snd.wrapping_add(9);
        let mut udp = vec![0u8; 48];
        ipv6::Repr {
            src_addr: LOCAL6,
            dst_addr: PEER6,
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut udp[..]));
        let now = t.now;
        t.stack.receive(now, &packet_too_big(1400, &udp));
        assert_eq!(t.stack.path_mtu6(now, PEER6), 1400);
    }
    t.write(h, &vec![5; 4 * 1428]);
    let full = frames.len();
    drain(&mut t, offload, &mut frames);
    let mut after_pmtu = Vec::new();
    if foreign_ptb {
        let fragments = frames[full..].iter().filter(|f| f[6] == 44).count();
        assert_eq!(fragments, 8, "four segments in two fragments each");
    } else {
        assert_eq!(frames.len() - full, 4, "four full segments");
        let ptb = packet_too_big(1280, &frames[full + 1]);
        let now = t.now;
        t.stack.receive(now, &ptb);
        after_pmtu = drain(&mut t, offload, &mut frames);
    }
    snd = snd.wrapping_add(4 * 1428);
    t.now += ms;
    send(
        &mut t,
        Seg::ack(PEER_ISN + 431, snd).ts(106, our_ts).win(1000),
    );
    t.write(h, &vec![6; 2000]);
    after_pmtu.extend(drain(&mut t, offload, &mut frames));
    // FIN.
    t.now += ms;
    t.stack.tcp_close(t.now, h).unwrap();
    drain(&mut t, offload, &mut frames);
    Run {
        frames,
        data,
        pure_ack,
        sack,
        after_hop_limit,
        after_flowlabel,
        after_pmtu,
        counters: all_counters(t.stack.mib()),
    }
}

/// The frames of the two paths, compared one by one (the first difference named), and
/// their counters.
fn assert_same(template: &Run, general: &Run) {
    ustack_testkit::tcp::assert_same_frames(&template.frames, &general.frames);
    assert_eq!(template.counters, general.counters, "the counters");
}

/// Each kind of segment the comparison is meant to cover was sent.
fn assert_covers(r: &Run) {
    ustack_testkit::tcp::assert_template_covers(
        &r.data,
        b"written from the template",
        &r.pure_ack,
        PEER_ISN + 101,
        &r.sack,
    );
    let hops: Vec<u8> = r.frames[r.after_hop_limit..].iter().map(|f| f[7]).collect();
    assert!(
        !hops.is_empty() && hops.iter().all(|&t| t == 33),
        "every frame after the change has hop limit 33: {hops:?}"
    );
    assert!(r.frames[..r.after_hop_limit].iter().all(|f| f[7] == 64));
    let label = flow_label(&r.frames[0]);
    assert_ne!(label, 0, "a flow label while auto_flowlabels is on");
    assert!(
        r.frames[..r.after_flowlabel]
            .iter()
            .all(|f| flow_label(f) == label),
        "one label for the connection"
    );
    let unlabelled = &r.frames[r.after_flowlabel..];
    assert!(
        unlabelled.iter().any(|f| f.ends_with(b"unlabelled")),
        "the data written after the change left at once"
    );
    assert!(
        unlabelled.iter().all(|f| flow_label(f) == 0),
        "label 0 once off"
    );
    let sizes: Vec<usize> = r.after_pmtu.iter().map(|s| s.payload.len()).collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| n > 0 && n <= 1280 - 72),
        "segments that fit the new MTU with their options: {sizes:?}"
    );
    assert!(r.frames.iter().all(|f| f.len() <= 1500 && f[6] == 6));
}

#[test]
fn template_segments_are_the_general_paths_bytes() {
    let template = run(true, false, false);
    assert_covers(&template);
    assert_same(&template, &run(false, false, false));
}

/// A path MTU lowered by another protocol's report (a UDP datagram quoted) leaves TCP's
/// MSS as it was, so its full segments must leave in fragments: the template, which holds
/// the path MTU, is rebuilt and leaves them to the general path, which fragments them.
#[test]
fn template_segments_are_fragmented_as_the_general_path_after_a_foreign_packet_too_big() {
    let template = run(true, false, true);
    assert_same(&template, &run(false, false, true));
}

#[test]
fn template_segments_are_the_general_paths_bytes_with_checksum_offload() {
    let template = run(true, true, false);
    assert_covers(&template);
    assert_same(&template, &run(false, true, false));
}

/// On Ethernet, every IPv6 frame either stack sends (neighbour discovery, the handshake,
/// four requests echoed, FIN) is the same with A's templates on and off, and so are both
/// stacks' counters.
#[test]
fn ethernet_frames_from_the_template_are_the_general_paths() {
    let on = ethernet6_exchange(true, true);
    let off = ethernet6_exchange(false, true);
    let ipv6 = on
        .frames
        .iter()
        .filter(|f| f[12..14] == [0x86, 0xdd])
        .count();
    assert!(ipv6 >= 14, "NDP, handshake, requests, echoes, FIN: {ipv6}");
    assert_eq!(on.frames.len(), off.frames.len());
    for (i, (x, y)) in on.frames.iter().zip(&off.frames).enumerate() {
        assert_eq!(x, y, "frame {i}");
    }
    assert_eq!(on.counters, off.counters, "the counters");
}
