//! `ustack bench c1m --syn-flood RATE`: spoofed SYNs at RATE per second from the client
//! side of the shm link while the connections are held (issue #12 item 5).
//!
//! Each SYN comes from a random address of 198.18.0.0/15 (RFC 2544's benchmarking range,
//! never a real host) and a random port at or above 1024, with a random ISN and an MSS
//! option, to the server's first c1m port: what a spoofing attacker sends. The frames go
//! straight onto the client's shm port, beside the client stack's own. The server answers
//! each through its gateway, the client's address (as a server answers a spoofed SYN
//! through its router), and the client stack drops the SYN-ACKs as not its own
//! (`IP_INADDRERRORS`). Nobody completes these handshakes: the server's SYN queue fills to
//! its bound (the listener's backlog + 1) and SYN cookies answer the rest
//! (TcpExtSyncookiesSent, Linux `tcp_syn_flood_action`).

use core::net::Ipv4Addr;
use std::time::Duration;

use ustack_dev::Device;
use ustack_stack::EthernetAddress;
use ustack_wire::tcp::{self, Flags};
use ustack_wire::{IpProtocol, SeqNumber, ethernet, ipv4};

use super::shm::{Rt, SERVER_IP};

/// The server's MAC on the c1m link (`shm::builder(SERVER_IP, 1, ..)`).
const SERVER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
/// The client's (`shm::builder(CLIENT_IP, 2, ..)`): the flood leaves from its port.
const CLIENT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
/// Spoofed sources: 198.18.0.0/15 (RFC 2544 §C.2.2, for benchmarks).
const SPOOF_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const SPOOF_SPAN: u32 = 1 << 17;
/// SYNs written per call at most, so that the client's own traffic keeps its turn.
const BURST: u64 = 2048;

/// The flood's state: what it has sent and its random numbers.
#[derive(Debug)]
pub struct SynFlood {
    rate: u64,
    port: u16,
    rng: u64,
    /// SYNs handed to the link.
    pub sent: u64,
    /// SYNs the link had no room for when they were due (sent later, not lost).
    pub deferred: u64,
    frame: Vec<u8>,
}

impl SynFlood {
    /// A flood of `rate` SYNs per second at the server's `port`.
    pub fn new(rate: u32, port: u16, seed: u64) -> SynFlood {
        SynFlood {
            rate: u64::from(rate),
            port,
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            sent: 0,
            deferred: 0,
            frame: Vec::with_capacity(64),
        }
    }

    fn next(&mut self) -> u64 {
        // xorshift64: spoofed values need spread, not secrecy.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Send the SYNs due `elapsed` into the flood (RATE per second), at most [`BURST`]
    /// at a time and no more than the link has room for.
    pub fn send_due(&mut self, rt: &mut Rt, elapsed: Duration) {
        let due = (u128::from(self.rate) * elapsed.as_micros() / 1_000_000) as u64;
        let mut n = due.saturating_sub(self.sent).min(BURST);
        let now = rt.now();
        while n > 0 {
            let r = self.next();
            let src = Ipv4Addr::from(SPOOF_BASE + (r as u32) % SPOOF_SPAN);
            let sport = 1024 + ((r >> 32) as u16) % (65535 - 1024);
            let isn = (r >> 17) as u32;
            self.build(src, sport, isn);
            if !rt.device_mut().send(now, &self.frame) {
                self.deferred += 1;
                break;
            }
            self.sent += 1;
            n -= 1;
        }
    }

    /// One spoofed SYN from `src:sport` into `self.frame`: Ethernet, IPv4, TCP with an MSS
    /// option, checksums filled in.
    fn build(&mut self, src: Ipv4Addr, sport: u16, isn: u32) {
        let syn = tcp::Repr {
            src_port: sport,
            dst_port: self.port,
            seq_number: SeqNumber(isn),
            flags: Flags::SYN,
            window_len: 64_240,
            max_seg_size: Some(1460),
            ..tcp::Repr::default()
        };
        let ip = ipv4::Repr::atomic(src, SERVER_IP, IpProtocol::Tcp, syn.buffer_len());
        let eth = ethernet::Repr {
            src_addr: CLIENT_MAC,
            dst_addr: SERVER_MAC,
            ethertype: ethernet::EtherType::Ipv4,
        };
        let (e, i) = (ethernet::HEADER_LEN, ethernet::HEADER_LEN + 20);
        self.frame.clear();
        self.frame.resize(i + syn.buffer_len(), 0);
        eth.emit(&mut ethernet::Frame::new_unchecked(&mut self.frame[..]));
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut self.frame[e..]), true);
        syn.emit(
            &mut tcp::Packet::new_unchecked(&mut self.frame[i..]),
            &src.into(),
            &SERVER_IP.into(),
            true,
        );
    }
}
