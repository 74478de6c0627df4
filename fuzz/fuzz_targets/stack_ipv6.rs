//! Any sequence of IPv6 packets into two dual-stack stacks (Ethernet, with neighbour
//! discovery and DAD, and IP-only): never a panic, IPv6 reassembly memory under
//! ip6frag_high_thresh and the transmit queue under txqueuelen at every step, and nothing
//! left in reassembly once every timer has run.
//!
//! Input: records `[flags, len, bytes; len]`. Flag bit 0 puts a valid fixed header in
//! front of the bytes (from the peer to the stack's address, Next Header = the first byte,
//! Payload Length = the rest), so the fuzzer spends its time in the extension-header chain,
//! fragments and ICMPv6; bit 1 advances the clock by `len` * 100 ms first; bit 2 sends it
//! to the all-nodes group instead; bit 3 repairs the ICMPv6 checksum when Next Header is
//! 58 (so that echo, NS/NA and errors are reached); bit 4 uses the link-local source; bit
//! 5 sets hop limit 64 instead of 255 (which neighbour discovery requires).
#![no_main]
use core::net::{Ipv4Addr, Ipv6Addr};
use core::time::Duration;
use libfuzzer_sys::fuzz_target;
use ustack_stack::{Config, EthernetAddress, Instant, Ipv4Cidr, Ipv6Cidr, Stack};
use ustack_wire::{IpProtocol, checksum};

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
const OURS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const PEER: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const PEER_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

fuzz_target!(|data: &[u8]| {
    let mut eth_config =
        Config::ethernet(MAC, Ipv4Cidr::new(IP, 24)).with_ipv6(Ipv6Cidr::new(OURS, 64));
    eth_config.seed = Some(1);
    let mut tun_config = Config::ip(Ipv4Cidr::new(IP, 24)).with_ipv6(Ipv6Cidr::new(OURS, 64));
    tun_config.seed = Some(2);
    let mut eth = Stack::new(eth_config);
    let mut tun = Stack::new(tun_config);
    let mut now = Instant::ZERO;
    // Past duplicate address detection, so that the Ethernet stack's address is usable.
    for stack in [&mut eth, &mut tun] {
        for _ in 0..4 {
            if let Some(t) = stack.poll_timeout() {
                now = now.max(t);
                stack.handle_timeout(now);
            }
            while stack.poll_transmit(now).is_some() {}
        }
    }
    let mut rest = data;
    let mut packet = Vec::new();
    while let [flags, len, tail @ ..] = rest {
        let take = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(take);
        rest = next;
        if flags & 2 != 0 {
            now += Duration::from_millis(100 * u64::from(*len));
        }
        packet.clear();
        if flags & 1 != 0 && !body.is_empty() {
            let src = if flags & 16 != 0 { PEER_LL } else { PEER };
            let dst = if flags & 4 != 0 { ALL_NODES } else { OURS };
            let payload = &body[1..];
            packet.extend_from_slice(&[0x60, 0, 0, 0]);
            packet.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            packet.extend_from_slice(&[body[0], if flags & 32 != 0 { 64 } else { 255 }]);
            packet.extend_from_slice(&src.octets());
            packet.extend_from_slice(&dst.octets());
            packet.extend_from_slice(payload);
            if flags & 8 != 0 && body[0] == 58 && payload.len() >= 4 {
                let l4 = &mut packet[40..];
                l4[2..4].copy_from_slice(&[0, 0]);
                let sum = checksum::combine(&[
                    checksum::pseudo_header_v6(src, dst, IpProtocol::Icmpv6, l4.len() as u32),
                    checksum::data(l4),
                ]);
                l4[2..4].copy_from_slice(&checksum::finish(sum).to_be_bytes());
            }
        } else {
            packet.extend_from_slice(body);
        }
        let mut frame = Vec::with_capacity(14 + packet.len());
        frame.extend_from_slice(&if flags & 4 != 0 {
            [0x33, 0x33, 0, 0, 0, 1]
        } else {
            MAC.0
        });
        frame.extend_from_slice(&PEER_MAC);
        frame.extend_from_slice(&[0x86, 0xdd]);
        frame.extend_from_slice(&packet);
        for (stack, input) in [(&mut eth, &frame), (&mut tun, &packet)] {
            if stack.poll_timeout().is_some_and(|t| t <= now) {
                stack.handle_timeout(now);
            }
            stack.receive(now, input);
            assert!(stack.reassembly6_mem() as u64 <= stack.sysctl().ip6frag_high_thresh);
            assert!(stack.tx_queue_len() as u64 <= stack.sysctl().txqueuelen);
            while stack.poll_transmit(now).is_some() {}
        }
    }
    for stack in [&mut eth, &mut tun] {
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
            stack.reassembly6_mem(),
            0,
            "IPv6 reassembly memory left after every timer ran"
        );
    }
});
