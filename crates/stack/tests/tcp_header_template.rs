//! An established connection writes its IPv4 segments from a per-connection header
//! template (`tcp::xmit4`: Linux keeps the route and the header fields in the socket). The
//! template path must give the frames the general path gives, byte for byte: the same
//! scripted exchange is run with the template on and off and every frame compared (data,
//! pure ACKs, SACK blocks, a TTL change on the established connection, a path MTU drop,
//! FIN), with and without checksum offload.

use core::time::Duration;

use ustack_obs::Instant;
use ustack_stack::{Config, Ipv4Cidr, Stack};
use ustack_testkit::tcp::{LOCAL_IP, PEER, Seg, SegTest, parse};
use ustack_wire::checksum::checksum;

const PEER_ISN: u32 = 1000;

/// `frame` checked as a receiver would check it (IPv4 and TCP checksums verified). With
/// the TCP checksum offloaded, the field must be zero and is filled in here first.
fn check(frame: &[u8], offload: bool) -> Seg {
    let mut frame = frame.to_vec();
    if offload {
        assert_eq!(frame[36..38], [0, 0], "an offloaded checksum is left zero");
        let mut pseudo = frame[12..20].to_vec();
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&((frame.len() - 20) as u16).to_be_bytes());
        pseudo.extend_from_slice(&frame[20..]);
        let c = checksum(&pseudo);
        frame[36..38].copy_from_slice(&c.to_be_bytes());
    }
    parse(&frame).expect("a well-formed TCP/IPv4 frame, checksums right")
}

/// Every frame the stack has to send now, each [`check`]ed.
fn drain(t: &mut SegTest, offload: bool, out: &mut Vec<Vec<u8>>) -> Vec<Seg> {
    let mut segs = Vec::new();
    while let Some(frame) = t.stack.poll_transmit(t.now) {
        segs.push(check(&frame, offload));
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

/// What one run of the exchange produced: every frame after the handshake, and the frames
/// of each step (for the test to check that each kind of segment was there).
struct Run {
    frames: Vec<Vec<u8>>,
    data: Vec<Seg>,
    pure_ack: Vec<Seg>,
    sack: Vec<Seg>,
    after_ttl: usize,
    after_pmtu: Vec<Seg>,
}

/// The exchange, with header templates on or off, checksums computed or offloaded.
fn run(template: bool, offload: bool) -> Run {
    let mut c = Config::ip(Ipv4Cidr::new(LOCAL_IP, 24));
    c.seed = Some(42);
    c.gateway = Some(*PEER.ip());
    c.checksum_offload = offload;
    let mut t = SegTest {
        stack: Stack::new(c),
        now: Instant::from_secs(1),
        port: 80,
        listener: None,
    };
    t.listen(128);
    t.stack.set_tcp_header_template(template);
    t.stack
        .set_sysctl("net.ipv4.tcp_wmem.default", 1 << 20)
        .unwrap();
    t.send(
        Seg::syn(PEER_ISN)
            .mss(1460)
            .wscale(7)
            .sack_perm()
            .ts(100, 0),
    );
    let synack = check(&t.stack.poll_transmit(t.now).expect("SYN-ACK"), offload);
    let base = synack.seq.wrapping_add(1);
    let our_ts = synack.ts.map_or(0, |ts| ts.0);
    t.send(Seg::ack(PEER_ISN + 1, base).ts(100, our_ts).win(65_535));
    let (h, _) = t.stack.tcp_accept(t.listener.unwrap()).expect("accepted");
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
        t.send(Seg::ack(seq, ack).data(bytes).ts(tsval, our_ts).win(1000));
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
    // The TTL changed under the established connection: its next segments carry the new
    // one (the template is rebuilt).
    t.stack.set_sysctl("net.ipv4.ip_default_ttl", 33).unwrap();
    let after_ttl = frames.len();
    t.now += ms;
    t.write(h, b"after the TTL change");
    drain(&mut t, offload, &mut frames);
    snd = snd.wrapping_add(20);
    t.send(Seg::ack(PEER_ISN + 431, snd).ts(104, our_ts).win(1000));
    drain(&mut t, offload, &mut frames);
    // Four full segments, then a router's MTU of 1000: resent at once in pieces that fit,
    // and new data at the new size (RFC 1191; Linux tcp_simple_retransmit).
    t.now += ms;
    t.write(h, &vec![5; 4 * 1448]);
    drain(&mut t, offload, &mut frames);
    let icmp = frag_needed(t.port, 1000, snd.wrapping_add(1448));
    let now = t.now;
    t.stack.receive(now, &icmp);
    let mut after_pmtu = drain(&mut t, offload, &mut frames);
    snd = snd.wrapping_add(4 * 1448);
    t.now += ms;
    t.send(Seg::ack(PEER_ISN + 431, snd).ts(105, our_ts).win(1000));
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
        after_ttl,
        after_pmtu,
    }
}

/// The frames of the two paths, compared one by one (the first difference named).
fn assert_same(template: &Run, general: &Run) {
    ustack_testkit::tcp::assert_same_frames(&template.frames, &general.frames);
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
    let ttl: Vec<u8> = r.frames[r.after_ttl..].iter().map(|f| f[8]).collect();
    assert!(
        !ttl.is_empty() && ttl.iter().all(|&t| t == 33),
        "every frame after the change has TTL 33: {ttl:?}"
    );
    assert!(r.frames[..r.after_ttl].iter().all(|f| f[8] == 64));
    let sizes: Vec<usize> = r.after_pmtu.iter().map(|s| s.payload.len()).collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| n > 0 && n <= 1000 - 52),
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
}

#[test]
fn template_segments_are_the_general_paths_bytes() {
    let template = run(true, false);
    assert_covers(&template);
    assert_same(&template, &run(false, false));
}

#[test]
fn template_segments_are_the_general_paths_bytes_with_checksum_offload() {
    let template = run(true, true);
    assert_covers(&template);
    assert_same(&template, &run(false, true));
}

/// Two stacks on an Ethernet link, the frames carried by hand: what A sends (ARP, the
/// handshake, a request answered, FIN) with B answering, with A's templates on or off.
fn ethernet_run(template: bool) -> Vec<Vec<u8>> {
    use core::net::SocketAddrV4;
    use ustack_testkit::{A_IP, A_MAC, B_IP, B_MAC};
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
    sent
}

/// On Ethernet, every IPv4 frame A sends goes to B's address from A's (the neighbour's
/// address written in place on the fast path), and the template path's frames are the
/// general path's.
#[test]
fn ethernet_frames_from_the_template_are_the_general_paths() {
    use ustack_testkit::{A_MAC, B_MAC};
    let frames = ethernet_run(true);
    let ipv4: Vec<&Vec<u8>> = frames.iter().filter(|f| f[12..14] == [8, 0]).collect();
    assert!(
        ipv4.len() >= 7,
        "SYN, ACK, four requests, FIN: {}",
        ipv4.len()
    );
    for f in &ipv4 {
        assert_eq!(f[0..6], B_MAC.0, "to B");
        assert_eq!(f[6..12], A_MAC.0, "from A");
        check(&f[14..], false);
    }
    let general = ethernet_run(false);
    assert_eq!(frames.len(), general.len());
    for (i, (x, y)) in frames.iter().zip(&general).enumerate() {
        assert_eq!(x, y, "frame {i}");
    }
}
