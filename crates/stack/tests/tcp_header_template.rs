//! An established connection writes its segments from a per-connection header template
//! (`tcp::xmit4`, `tcp::xmit6`: Linux keeps the route, for IPv6 the flow label, and the
//! header fields in the socket). The template path must give the frames the general path
//! gives, byte for byte, and must be the path taken: the same scripted exchange is run
//! with the template on and off, for IPv4 and for IPv6 (`ipv4::NAME`, `ipv6::NAME`), and
//! every frame and counter compared (data, pure ACKs, SACK blocks, a TTL/hop-limit change
//! on the established connection, for IPv6 the flow label turned off, a path MTU drop,
//! FIN), with and without checksum offload, and over Ethernet; over IPv6 also a path MTU
//! lowered by another protocol's report, and a change of default router.

use core::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use core::time::Duration;

use ustack_stack::{Config, Instant, Ipv4Cidr, Ipv6Cidr, Stack};
use ustack_testkit::for_both_families;
use ustack_testkit::tcp::{
    Family, LOCAL_IP, LOCAL_IP6, PEER, PEER_IP6, Seg, SegTest, all_counters, ethernet6_exchange,
};
use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC};
use ustack_wire::checksum::{checksum, combine, data, pseudo_header_v6};
use ustack_wire::ndisc::{self, Prefixes, RouterAdvert};
use ustack_wire::tcp::Flags;
use ustack_wire::{EthernetAddress, IpProtocol, ethernet, icmpv6};

const PEER_ISN: u32 = 1000;

for_both_families!(
    template_segments_are_the_general_paths_bytes,
    template_segments_are_the_general_paths_bytes_with_checksum_offload,
    ethernet_frames_from_the_template_are_the_general_paths,
);

/// `frame` checked as a receiver would check it (IPv4 and TCP checksums, or the TCP
/// checksum over the IPv6 pseudo-header, verified). With the TCP checksum offloaded, the
/// field must be zero and is filled in here first.
fn check(fam: Family, frame: &[u8], offload: bool) -> Seg {
    let mut frame = frame.to_vec();
    let h = fam.header_len();
    if offload {
        assert_eq!(
            frame[h + 16..h + 18],
            [0, 0],
            "an offloaded checksum is left zero"
        );
        let c = match fam {
            Family::V4 => {
                let mut pseudo = frame[12..20].to_vec();
                pseudo.extend_from_slice(&[0, 6]);
                pseudo.extend_from_slice(&((frame.len() - 20) as u16).to_be_bytes());
                pseudo.extend_from_slice(&frame[20..]);
                checksum(&pseudo)
            }
            Family::V6 => {
                let ph = pseudo_header_v6(
                    LOCAL_IP6,
                    PEER_IP6,
                    IpProtocol::Tcp,
                    (frame.len() - 40) as u32,
                );
                !combine(&[ph, data(&frame[40..])])
            }
        };
        frame[h + 16..h + 18].copy_from_slice(&c.to_be_bytes());
    }
    fam.parse(&frame)
        .expect("a well-formed TCP frame, checksums right")
}

/// Deliver the peer's segment `seg` (its ports filled in).
fn send(fam: Family, t: &mut SegTest, mut seg: Seg) {
    (seg.src_port, seg.dst_port) = (PEER.port(), 80);
    let now = t.now;
    t.stack.receive(now, &fam.build(&seg));
}

/// Every frame the stack has to send now, each [`check`]ed.
fn drain(fam: Family, t: &mut SegTest, offload: bool, out: &mut Vec<Vec<u8>>) -> Vec<Seg> {
    let mut segs = Vec::new();
    while let Some(frame) = t.stack.poll_transmit(t.now) {
        // An IPv6 fragment (Next Header 44) is compared as bytes only.
        if fam == Family::V4 || frame[6] != 44 {
            segs.push(check(fam, &frame, offload));
        }
        out.push(frame);
    }
    segs
}

/// A router's ICMP "fragmentation needed" (RFC 1191 §4) with next-hop MTU `mtu`, quoting
/// our segment at `seq` on the connection from `port`.
fn frag_needed(port: u16, mtu: u16, seq: u32) -> Vec<u8> {
    fn ip_header(src: [u8; 4], dst: [u8; 4], proto: u8, total: usize) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
        h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        let c = checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    }
    let ours = LOCAL_IP.octets();
    let mut quote = ip_header(ours, PEER.ip().octets(), 6, 1500);
    quote.extend_from_slice(&port.to_be_bytes());
    quote.extend_from_slice(&PEER.port().to_be_bytes());
    quote.extend_from_slice(&seq.to_be_bytes());
    let mtu = mtu.to_be_bytes();
    let mut icmp = vec![3, 4, 0, 0, 0, 0, mtu[0], mtu[1]];
    icmp.extend_from_slice(&quote);
    let c = checksum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut packet = ip_header([198, 51, 100, 1], ours, 1, 20 + icmp.len());
    packet.extend_from_slice(&icmp);
    packet
}

/// A router's ICMPv6 Packet Too Big (RFC 4443 §3.2) with MTU `mtu`, quoting `packet`.
fn packet_too_big(mtu: u32, packet: &[u8]) -> Vec<u8> {
    let router = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0xfe);
    let quote = &packet[..packet.len().min(1280 - 48)];
    let repr = icmpv6::Repr::PacketTooBig { mtu, data: quote };
    let mut out = vec![0u8; 40 + repr.buffer_len()];
    ustack_wire::ipv6::Repr {
        src_addr: router,
        dst_addr: LOCAL_IP6,
        next_header: IpProtocol::Icmpv6,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    }
    .emit(&mut ustack_wire::ipv6::Packet::new_unchecked(&mut out[..]));
    repr.emit(
        &mut icmpv6::Packet::new_unchecked(&mut out[40..]),
        &router,
        &LOCAL_IP6,
        true,
    );
    out
}

/// The flow label of an IPv6 frame.
fn flow_label(f: &[u8]) -> u32 {
    u32::from_be_bytes([0, f[1] & 0x0f, f[2], f[3]])
}

/// The family's per-family constants: the peer's MSS, the offset of the TTL/hop limit,
/// its sysctl, the MTU the path drops to.
struct Params {
    mss: u16,
    ttl_at: usize,
    ttl_sysctl: &'static str,
    new_mtu: usize,
}

fn params(fam: Family) -> Params {
    match fam {
        Family::V4 => Params {
            mss: 1460,
            ttl_at: 8,
            ttl_sysctl: "net.ipv4.ip_default_ttl",
            new_mtu: 1000,
        },
        Family::V6 => Params {
            mss: 1440,
            ttl_at: 7,
            ttl_sysctl: "net.ipv6.conf.default.hop_limit",
            new_mtu: 1280,
        },
    }
}

/// What one run of the exchange produced: every frame after the handshake, the frames
/// of each step (for the test to check that each kind of segment was there), the
/// counters, and the segments written from the template.
struct Run {
    frames: Vec<Vec<u8>>,
    data: Vec<Seg>,
    pure_ack: Vec<Seg>,
    sack: Vec<Seg>,
    after_ttl: usize,
    /// IPv6: the frames before the flow label was turned off.
    after_flowlabel: usize,
    after_pmtu: Vec<Seg>,
    counters: String,
    template_hits: u64,
}

/// The exchange over `fam`, with header templates on or off, checksums computed or
/// offloaded. `foreign_ptb` (IPv6 only): the path MTU is lowered (to 1400) by a Packet
/// Too Big quoting a UDP datagram of ours instead of a TCP segment: TCP's MSS stays, and
/// its full segments leave in fragments (RFC 8200 §4.5) from then on.
fn run(fam: Family, template: bool, offload: bool, foreign_ptb: bool) -> Run {
    assert!(fam == Family::V6 || !foreign_ptb);
    let p = params(fam);
    let mut c = fam.config();
    c.checksum_offload = offload;
    let mut t = fam.listening(c, 80);
    t.stack.set_tcp_header_template(template);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    send(
        fam,
        &mut t,
        Seg::syn(PEER_ISN)
            .mss(p.mss)
            .wscale(7)
            .sack_perm()
            .ts(100, 0),
    );
    let synack = check(
        fam,
        &t.stack.poll_transmit(t.now).expect("SYN-ACK"),
        offload,
    );
    let base = synack.seq.wrapping_add(1);
    let our_ts = synack.ts.map_or(0, |ts| ts.0);
    send(
        fam,
        &mut t,
        Seg::ack(PEER_ISN + 1, base).ts(100, our_ts).win(65_535),
    );
    let (h, _) = t
        .stack
        .tcp_accept_addr(t.listener.unwrap())
        .expect("accepted");
    let hits_at_start = t.stack.tcp_header_template_hits();
    let mut frames = Vec::new();
    let ms = Duration::from_millis(1);

    // Data (with PSH, piggybacking the ACK).
    t.now += ms;
    assert_eq!(t.write(h, b"written from the template"), 25);
    let data = drain(fam, &mut t, offload, &mut frames);
    let mut snd = base.wrapping_add(25);
    // The peer's data in order: a pure ACK (quick-ACK mode at the start).
    t.now += ms;
    let data_from_peer = |t: &mut SegTest, seq: u32, ack: u32, bytes: &[u8], tsval: u32| {
        send(
            fam,
            t,
            Seg::ack(seq, ack).data(bytes).ts(tsval, our_ts).win(1000),
        );
    };
    data_from_peer(&mut t, PEER_ISN + 1, snd, &[1; 100], 101);
    let pure_ack = drain(fam, &mut t, offload, &mut frames);
    // Two blocks out of order: duplicate ACKs carrying SACK blocks (RFC 2018).
    let mut sack = Vec::new();
    for (off, len) in [(200u32, 50usize), (400, 30)] {
        t.now += ms;
        data_from_peer(&mut t, PEER_ISN + 1 + off, snd, &vec![2; len], 102);
        sack.extend(drain(fam, &mut t, offload, &mut frames));
    }
    // The hole filled.
    t.now += ms;
    data_from_peer(&mut t, PEER_ISN + 101, snd, &[3; 329], 103);
    drain(fam, &mut t, offload, &mut frames);
    // The TTL/hop limit changed under the established connection: its next segments
    // carry the new one (the template is rebuilt).
    t.stack.set_sysctl(p.ttl_sysctl, 33).unwrap();
    let after_ttl = frames.len();
    t.now += ms;
    t.write(h, b"after the TTL change");
    drain(fam, &mut t, offload, &mut frames);
    snd = snd.wrapping_add(20);
    send(
        fam,
        &mut t,
        Seg::ack(PEER_ISN + 431, snd).ts(104, our_ts).win(1000),
    );
    drain(fam, &mut t, offload, &mut frames);
    let mut after_flowlabel = frames.len();
    if fam == Family::V6 {
        // Flow labels turned off: label 0 from now on (RFC 6437 §3 "set to zero").
        t.stack.set_sysctl("net.ipv6.auto_flowlabels", 0).unwrap();
        after_flowlabel = frames.len();
        t.now += ms;
        t.write(h, b"unlabelled");
        drain(fam, &mut t, offload, &mut frames);
        snd = snd.wrapping_add(10);
        send(
            fam,
            &mut t,
            Seg::ack(PEER_ISN + 431, snd).ts(105, our_ts).win(1000),
        );
        drain(fam, &mut t, offload, &mut frames);
    }
    // Four full segments, then a router's smaller MTU: resent at once in pieces that
    // fit, and new data at the new size (RFC 1191, RFC 8201; Linux tcp_simple_retransmit,
    // tcp_v6_mtu_reduced).
    t.now += ms;
    if foreign_ptb {
        // Data in flight, so that the connection holds its template across the report.
        t.write(h, b"in flight");
        drain(fam, &mut t, offload, &mut frames);
        snd = snd.wrapping_add(9);
        let mut udp = vec![0u8; 48];
        ustack_wire::ipv6::Repr {
            src_addr: LOCAL_IP6,
            dst_addr: PEER_IP6,
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
        .emit(&mut ustack_wire::ipv6::Packet::new_unchecked(&mut udp[..]));
        let now = t.now;
        t.stack.receive(now, &packet_too_big(1400, &udp));
        assert_eq!(t.stack.path_mtu6(now, PEER_IP6), 1400);
    }
    let full_seg = usize::from(p.mss) - 12;
    t.write(h, &vec![5; 4 * full_seg]);
    let full = frames.len();
    drain(fam, &mut t, offload, &mut frames);
    let mut after_pmtu = Vec::new();
    if foreign_ptb {
        let fragments = frames[full..].iter().filter(|f| f[6] == 44).count();
        assert_eq!(fragments, 8, "four segments in two fragments each");
    } else {
        assert_eq!(frames.len() - full, 4, "four full segments");
        let report = match fam {
            Family::V4 => frag_needed(t.port, p.new_mtu as u16, snd.wrapping_add(full_seg as u32)),
            Family::V6 => packet_too_big(p.new_mtu as u32, &frames[full + 1]),
        };
        let now = t.now;
        t.stack.receive(now, &report);
        after_pmtu = drain(fam, &mut t, offload, &mut frames);
    }
    snd = snd.wrapping_add(4 * full_seg as u32);
    t.now += ms;
    send(
        fam,
        &mut t,
        Seg::ack(PEER_ISN + 431, snd).ts(106, our_ts).win(1000),
    );
    t.write(h, &vec![6; 2000]);
    after_pmtu.extend(drain(fam, &mut t, offload, &mut frames));
    // FIN, the peer's data read first (closed with data unread, the connection would
    // send a RST instead, RFC 2525 §2.17, Linux `tcp_close`, and by the general path).
    t.now += ms;
    assert_eq!(t.read(h).map(|d| d.len()), Some(430), "the peer's data");
    t.stack.tcp_close(t.now, h).unwrap();
    let fin = drain(fam, &mut t, offload, &mut frames);
    assert!(
        fin.iter().any(|s| s.has(Flags::FIN) && !s.has(Flags::RST)),
        "a FIN: {fin:?}"
    );
    Run {
        frames,
        data,
        pure_ack,
        sack,
        after_ttl,
        after_flowlabel,
        after_pmtu,
        counters: all_counters(t.stack.mib()),
        template_hits: t.stack.tcp_header_template_hits() - hits_at_start,
    }
}

/// The frames of the two paths, compared one by one (the first difference named), and
/// their counters; the template run wrote its segments from the template and the
/// general run none.
fn assert_same(template: &Run, general: &Run) {
    ustack_testkit::tcp::assert_same_frames(&template.frames, &general.frames);
    assert_eq!(template.counters, general.counters, "the counters");
    assert_eq!(general.template_hits, 0, "the template off");
    assert!(
        template.template_hits > 0,
        "the template run wrote from the template"
    );
}

/// Each kind of segment the comparison is meant to cover was sent, and every one of
/// them from the template (the frames are those of the established connection, and a
/// template refused would leave them to the general path unseen).
fn assert_covers(fam: Family, r: &Run) {
    let p = params(fam);
    ustack_testkit::tcp::assert_template_covers(
        &r.data,
        b"written from the template",
        &r.pure_ack,
        PEER_ISN + 101,
        &r.sack,
    );
    assert_eq!(
        r.template_hits,
        r.frames.len() as u64,
        "every segment of the established connection from the template"
    );
    let ttl: Vec<u8> = r.frames[r.after_ttl..]
        .iter()
        .map(|f| f[p.ttl_at])
        .collect();
    assert!(
        !ttl.is_empty() && ttl.iter().all(|&t| t == 33),
        "every frame after the change has TTL/hop limit 33: {ttl:?}"
    );
    assert!(r.frames[..r.after_ttl].iter().all(|f| f[p.ttl_at] == 64));
    if fam == Family::V6 {
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
    }
    let room = p.new_mtu - fam.header_len() - 32;
    let sizes: Vec<usize> = r.after_pmtu.iter().map(|s| s.payload.len()).collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| n > 0 && n <= room),
        "segments that fit the new MTU with their options: {sizes:?}"
    );
    // The write after the peer acknowledged everything left whole, its tail not held by
    // Nagle (the peer's ACK was acceptable and acknowledged the outstanding data).
    let sixes: usize = r
        .after_pmtu
        .iter()
        .map(|s| s.payload.iter().filter(|&&b| b == 6).count())
        .sum();
    assert_eq!(sixes, 2000, "the 2,000 bytes written after the ACK");
    // Every frame TCP, none larger than the link's MTU.
    let proto_at = match fam {
        Family::V4 => 9,
        Family::V6 => 6,
    };
    assert!(r.frames.iter().all(|f| f.len() <= 1500 && f[proto_at] == 6));
}

fn template_segments_are_the_general_paths_bytes(fam: Family) {
    let template = run(fam, true, false, false);
    assert_covers(fam, &template);
    assert_same(&template, &run(fam, false, false, false));
}

fn template_segments_are_the_general_paths_bytes_with_checksum_offload(fam: Family) {
    let template = run(fam, true, true, false);
    assert_covers(fam, &template);
    assert_same(&template, &run(fam, false, true, false));
}

/// A path MTU lowered by another protocol's report (a UDP datagram quoted) leaves TCP's
/// MSS as it was, so its full segments must leave in fragments: the template, which holds
/// the path MTU, is rebuilt and leaves them to the general path, which fragments them.
#[test]
fn ipv6_template_segments_are_fragmented_as_the_general_path_after_a_foreign_packet_too_big() {
    let template = run(Family::V6, true, false, true);
    assert_same(&template, &run(Family::V6, false, false, true));
}

/// Two stacks on an Ethernet link, the frames carried by hand: what A sends (ARP, the
/// handshake, a request answered, FIN) with B answering, with A's templates on or off;
/// and how many segments A wrote from its templates.
fn ethernet_run(template: bool) -> (Vec<Vec<u8>>, u64) {
    use core::net::SocketAddrV4;
    let mut a = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24));
    let mut b = Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24));
    (a.seed, b.seed) = (Some(1), Some(2));
    let (mut a, mut b) = (Stack::new(a), Stack::new(b));
    a.set_tcp_header_template(template);
    let mut now = Instant::from_secs(1);
    let mut sent = Vec::new();
    let mut shuttle = |a: &mut Stack, b: &mut Stack, now: Instant| {
        for _ in 0..16 {
            let mut moved = false;
            while let Some(f) = a.poll_transmit(now) {
                b.receive(now, &f);
                sent.push(f);
                moved = true;
            }
            while let Some(f) = b.poll_transmit(now) {
                a.receive(now, &f);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    };
    let l = b.tcp_listen(SocketAddrV4::new(B_IP, 80), 4).unwrap();
    let c = a.tcp_connect(now, SocketAddrV4::new(B_IP, 80)).unwrap();
    shuttle(&mut a, &mut b, now);
    let (s, _) = b.tcp_accept(l).expect("accepted");
    let mut buf = [0u8; 256];
    for round in 0..4u8 {
        now += Duration::from_millis(1);
        a.tcp_send(now, c, &[round; 64]).unwrap();
        shuttle(&mut a, &mut b, now);
        let n = b.tcp_recv(now, s, &mut buf).unwrap();
        assert_eq!(&buf[..n], &[round; 64]);
        b.tcp_send(now, s, &buf[..n]).unwrap();
        shuttle(&mut a, &mut b, now);
        assert_eq!(a.tcp_recv(now, c, &mut buf).unwrap(), 64);
    }
    now += Duration::from_millis(1);
    a.tcp_close(now, c).unwrap();
    shuttle(&mut a, &mut b, now);
    (sent, a.tcp_header_template_hits())
}

/// On Ethernet, the template path's frames are the general path's. IPv4: every IPv4
/// frame A sends goes to B's address from A's (the neighbour's address written in place
/// on the fast path). IPv6: every frame either stack sends (neighbour discovery, the
/// handshake, four requests echoed, FIN) is the same with A's templates on and off, and
/// so are both stacks' counters.
fn ethernet_frames_from_the_template_are_the_general_paths(fam: Family) {
    match fam {
        Family::V4 => {
            let (frames, hits) = ethernet_run(true);
            let ipv4: Vec<&Vec<u8>> = frames.iter().filter(|f| f[12..14] == [8, 0]).collect();
            assert!(
                ipv4.len() >= 7,
                "SYN, ACK, four requests, FIN: {}",
                ipv4.len()
            );
            for f in &ipv4 {
                assert_eq!(f[0..6], B_MAC.0, "to B");
                assert_eq!(f[6..12], A_MAC.0, "from A");
                check(fam, &f[14..], false);
            }
            assert!(
                hits >= 5,
                "four requests and the FIN from the template: {hits}"
            );
            let (general, off_hits) = ethernet_run(false);
            assert_eq!(off_hits, 0);
            assert_eq!(frames.len(), general.len());
            for (i, (x, y)) in frames.iter().zip(&general).enumerate() {
                assert_eq!(x, y, "frame {i}");
            }
        }
        Family::V6 => {
            let on = ethernet6_exchange(true, true);
            let off = ethernet6_exchange(false, true);
            let ipv6 = on
                .frames
                .iter()
                .filter(|f| f[12..14] == [0x86, 0xdd])
                .count();
            assert!(ipv6 >= 14, "NDP, handshake, requests, echoes, FIN: {ipv6}");
            assert!(
                on.template_hits >= 5,
                "four requests and the FIN from the template: {}",
                on.template_hits
            );
            assert_eq!(off.template_hits, 0);
            assert_eq!(on.frames.len(), off.frames.len());
            for (i, (x, y)) in on.frames.iter().zip(&off.frames).enumerate() {
                assert_eq!(x, y, "frame {i}");
            }
            assert_eq!(on.counters, off.counters, "the counters");
        }
    }
}

// An IPv6 connection to an off-link peer, through a default router learnt from a Router
// Advertisement, whose router changes under it: its header template (`tcp::xmit6`) keeps
// only whether the next hop is the router, so every segment must go to the router of the
// moment, as the general path's route does. (IPv4 has no counterpart: its default route
// is configured, not learnt.) B holds 2001:db8:2::2 (off-link for A) and plays the first
// router (its link-local address advertises); the second router is a link-local address
// with another MAC, which B's link layer does not take.

const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const B_FAR: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const R2_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x99]);

/// A Router Advertisement from `router` (link-layer address `mac`) with lifetime
/// `lifetime` seconds, as an Ethernet frame to all nodes.
fn ra(router: Ipv6Addr, mac: EthernetAddress, lifetime: u16) -> Vec<u8> {
    let ra = RouterAdvert {
        cur_hop_limit: 0,
        managed: false,
        other: false,
        router_lifetime: lifetime,
        reachable_time: 0,
        retrans_timer: 0,
        source_lladdr: Some(mac),
        mtu: None,
        prefixes: Prefixes::List(&[]),
    };
    let mut msg = vec![0u8; ra.buffer_len()];
    ra.emit(&mut msg, &router, &ALL_NODES);
    let mut f = ustack_testkit::ipv6_frame(
        (mac, ndisc::multicast_mac(ALL_NODES)),
        router,
        ALL_NODES,
        58,
        &msg,
    );
    f[ethernet::HEADER_LEN + 7] = 255;
    f
}

/// Frames between A and B until both are quiet: B takes A's frames to its MAC (or to a
/// multicast group), A takes all of B's; A's are appended to `sent`.
fn shuttle_to_router(a: &mut Stack, b: &mut Stack, now: Instant, sent: &mut Vec<Vec<u8>>) {
    for _ in 0..16 {
        let out: Vec<_> = core::iter::from_fn(|| a.poll_transmit(now)).collect();
        for f in out.iter().filter(|f| f[0..6] == B_MAC.0 || f[0] & 1 == 1) {
            b.receive(now, f);
        }
        let back: Vec<_> = core::iter::from_fn(|| b.poll_transmit(now)).collect();
        back.iter().for_each(|f| a.receive(now, f));
        let quiet = out.is_empty() && back.is_empty();
        sent.extend(out);
        if quiet {
            return;
        }
    }
}

/// Every frame A sends (B takes those to its MAC), how many were sent before the router
/// changed, and how many segments A wrote from its templates after the change.
fn router_change_run(template: bool) -> (Vec<Vec<u8>>, usize, u64) {
    let mut ca = Config::ethernet(A_MAC, Ipv4Cidr::new(A_IP, 24)).with_ipv6(Ipv6Cidr::new(A6, 64));
    let mut cb =
        Config::ethernet(B_MAC, Ipv4Cidr::new(B_IP, 24)).with_ipv6(Ipv6Cidr::new(B_FAR, 64));
    for c in [&mut ca, &mut cb] {
        c.sysctl
            .set("net.ipv6.conf.default.accept_dad", 0)
            .expect("a sysctl");
    }
    ca.sysctl
        .set("net.ipv6.conf.default.accept_ra", 1)
        .expect("a sysctl");
    cb.gateway6 = Some(ndisc::link_local_from_mac(A_MAC));
    ca.seed = Some(1);
    cb.seed = Some(2);
    let (mut a, mut b) = (Stack::new(ca), Stack::new(cb));
    a.set_tcp_header_template(template);
    let mut now = Instant::from_secs(1);
    let mut sent = Vec::new();
    let r1 = ndisc::link_local_from_mac(B_MAC);
    a.receive(now, &ra(r1, B_MAC, 1800));
    let server = SocketAddr::V6(SocketAddrV6::new(B_FAR, 80, 0, 0));
    let l = b.tcp_listen(server, 4).expect("listen");
    let c = a.tcp_connect(now, server).expect("connect");
    shuttle_to_router(&mut a, &mut b, now, &mut sent);
    let (s, _) = b
        .tcp_accept_addr(l)
        .expect("accepted through the first router");
    let mut buf = [0u8; 256];
    for round in 0..2u8 {
        now += Duration::from_millis(1);
        a.tcp_send(now, c, &[round; 64]).expect("send");
        shuttle_to_router(&mut a, &mut b, now, &mut sent);
        assert_eq!(b.tcp_recv(now, s, &mut buf).expect("recv"), 64);
    }
    // The first router leaves (lifetime 0, RFC 4861 §6.3.4) and a second one arrives.
    let before = sent.len();
    now += Duration::from_millis(1);
    a.receive(
        now,
        &ra(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99), R2_MAC, 1800),
    );
    a.receive(now, &ra(r1, B_MAC, 0));
    let hits = a.tcp_header_template_hits();
    a.tcp_send(now, c, b"through the second router")
        .expect("send");
    shuttle_to_router(&mut a, &mut b, now, &mut sent);
    (sent, before, a.tcp_header_template_hits() - hits)
}

#[test]
fn ipv6_segments_follow_a_change_of_default_router_as_the_general_paths() {
    let (on, before, hits) = router_change_run(true);
    let (off, _, off_hits) = router_change_run(false);
    assert!(
        on[..before].iter().filter(|f| f[0..6] == B_MAC.0).count() >= 4,
        "the handshake and data went to the first router"
    );
    let to_r2: Vec<_> = on[before..]
        .iter()
        .filter(|f| f.ends_with(b"through the second router"))
        .collect();
    assert!(!to_r2.is_empty(), "the data after the change was sent");
    assert!(
        to_r2.iter().all(|f| f[0..6] == R2_MAC.0),
        "to the second router's link-layer address"
    );
    assert!(hits >= 1, "the data after the change from the template");
    assert_eq!(off_hits, 0);
    assert_eq!(on.len(), off.len(), "frames with the template on and off");
    for (i, (x, y)) in on.iter().zip(&off).enumerate() {
        assert_eq!(x, y, "frame {i}");
    }
}
