//! Any sequence of frames into two stacks (Ethernet and IP-only), with time moving on:
//! never a panic, and the stacks stay inside their bounds: reassembly memory under
//! ipfrag_high_thresh at every step, the transmit queue under txqueuelen; and once every
//! socket is closed and every timer has run, nothing is left held: no reassembly memory,
//! no TCP connection, request, TIME-WAIT record or buffer byte.
//!
//! Each stack has a UDP socket on port 7, a TCP listener on port 80 (whose connections
//! are accepted, read and written as the frames arrive) and one active TCP connection.
//!
//! Input: a sequence of records `[flags, len, bytes; len]`. Flag bit 0 gives the frame a
//! correct Ethernet header addressed to the stack (so the fuzzer reaches IP quickly), bit
//! 1 advances the clock by `len` * 100 ms first, bit 2 makes that header ARP instead of
//! IPv4, bit 3 repairs the IPv4 header checksum and bit 4 the ICMP/UDP checksum, so that
//! mutated packets get past the checksums into reassembly, ICMP and UDP.
#![no_main]
use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;
use libfuzzer_sys::fuzz_target;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Stack};
use ustack_wire::checksum;

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

fuzz_target!(|data: &[u8]| {
    // Fixed seeds, so that a crash replays (a default stack draws its secrets from the OS).
    let mut eth_config = Config::ethernet(MAC, Ipv4Cidr::new(IP, 24));
    eth_config.seed = Some(1);
    let mut tun_config = Config::ip(Ipv4Cidr::new(IP, 24));
    tun_config.seed = Some(2);
    let mut eth = Stack::new(eth_config);
    let mut tun = Stack::new(tun_config);
    let mut now = Instant::ZERO;
    let mut state = Vec::new();
    for stack in [&mut eth, &mut tun] {
        let _ = stack.udp_bind(SocketAddrV4::new(IP, 7));
        let l = stack
            .tcp_listen(SocketAddrV4::new(IP, 80), 4)
            .expect("listen");
        let c = stack
            .tcp_connect(now, SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 5000))
            .expect("connect");
        state.push((l, vec![c]));
    }
    let mut rest = data;
    let mut frame = Vec::new();
    while let [flags, len, tail @ ..] = rest {
        let take = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(take);
        rest = next;
        if flags & 2 != 0 {
            now += Duration::from_millis(100 * u64::from(*len));
        }
        frame.clear();
        if flags & 1 != 0 {
            frame.extend_from_slice(&MAC.0);
            frame.extend_from_slice(&[
                2,
                0,
                0,
                0,
                0,
                1,
                0x08,
                if flags & 4 != 0 { 0x06 } else { 0x00 },
            ]);
        }
        frame.extend_from_slice(body);
        let l2 = if flags & 1 != 0 { 14 } else { 0 };
        if flags & 8 != 0 {
            repair_checksums(&mut frame[l2..], flags & 16 != 0);
        }
        for (stack, (l, conns)) in [&mut eth, &mut tun].into_iter().zip(state.iter_mut()) {
            if stack.poll_timeout().is_some_and(|t| t <= now) {
                stack.handle_timeout(now);
            }
            stack.receive(now, &frame);
            assert!(stack.reassembly_mem() as u64 <= stack.sysctl().ipfrag_high_thresh);
            assert!(stack.tx_queue_len() as u64 <= stack.sysctl().txqueuelen);
            // The application: accept, read everything, answer with a little data.
            while let Ok((h, _)) = stack.tcp_accept(*l) {
                conns.push(h);
            }
            let mut buf = [0u8; 512];
            for &h in conns.iter() {
                while let Ok(n) = stack.tcp_recv(now, h, &mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                let _ = stack.tcp_send(now, h, &body[..body.len().min(64)]);
            }
            while stack.poll_transmit(now).is_some() {}
        }
    }
    // Close every socket and let every timer run out: nothing may be left held.
    for (stack, (l, conns)) in [&mut eth, &mut tun].into_iter().zip(state) {
        for h in conns {
            let _ = stack.tcp_close(now, h);
        }
        let _ = stack.tcp_close_listener(now, l);
        let mut t = now;
        for _ in 0..10_000 {
            match stack.poll_timeout() {
                Some(at) => {
                    t = t.max(at);
                    stack.handle_timeout(t);
                    while stack.poll_transmit(t).is_some() {}
                }
                None => break,
            }
        }
        assert_eq!(
            stack.reassembly_mem(),
            0,
            "reassembly memory left after every timer ran"
        );
        let r = stack.tcp_resources();
        assert_eq!(
            (r.connections, r.requests, r.timewait, r.buffer_bytes),
            (0, 0, 0, 0),
            "TCP left {r:?}"
        );
    }
});

/// Rewrite the IPv4 header checksum of `ip` (and the ICMP or UDP checksum of an
/// unfragmented datagram when `l4`), if the header is long enough to have one.
fn repair_checksums(ip: &mut [u8], l4: bool) {
    let Some(&vihl) = ip.first() else { return };
    let ihl = usize::from(vihl & 0xf) * 4;
    if ihl < 20 || ip.len() < ihl {
        return;
    }
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = checksum::checksum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    if !l4 || total <= ihl || ip[6] & 0x3f != 0 || ip[7] != 0 {
        return;
    }
    let (header, payload) = ip[..total].split_at_mut(ihl);
    match header[9] {
        1 if payload.len() >= 4 => {
            payload[2..4].copy_from_slice(&[0, 0]);
            let c = checksum::checksum(payload);
            payload[2..4].copy_from_slice(&c.to_be_bytes());
        }
        17 if payload.len() >= 8 => payload[6..8].copy_from_slice(&[0, 0]), // "no checksum"
        6 if payload.len() >= 20 => {
            let src = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
            let dst = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
            payload[16..18].copy_from_slice(&[0, 0]);
            let sum = checksum::combine(&[
                checksum::pseudo_header_v4(
                    src,
                    dst,
                    ustack_wire::IpProtocol::Tcp,
                    payload.len() as u16,
                ),
                checksum::data(payload),
            ]);
            payload[16..18].copy_from_slice(&checksum::finish(sum).to_be_bytes());
        }
        _ => {}
    }
}
