//! The receive fast path's guards (Linux `tcp_rcv_established`'s header prediction,
//! `crates/stack/src/tcp/fast_path.rs`), each test run for IPv4 and IPv6: a predicted
//! segment (in-order data, or a pure ACK advancing SND.UNA) takes the fast path
//! ([`Stack::tcp_rcv_fast_hits`]), and a segment that fails any one guard goes to the slow
//! path, which does what RFC 9293 (and RFC 7323, 5681, 6675, 6582, 5961) says for it:
//! a sequence number other than RCV.NXT (an old retransmission, one beyond the window),
//! a timestamp older than TS.Recent (PAWS), flags other than ACK and PSH (FIN, URG, RST,
//! SYN), a window other than SND.WND, data with something queued out of order (a hole
//! it fills, a FIN beyond it), SACK blocks, a duplicate ACK, an ACK in recovery, data
//! after the peer's FIN, data into a zero window. Each test asserts the behaviour a user or the peer sees (bytes
//! read, ACKs and retransmissions sent, windows used), so that taking the segment on the
//! fast path (a guard removed) fails it.
//!
//! [`Stack::tcp_rcv_fast_hits`]: ustack_stack::Stack::tcp_rcv_fast_hits

use core::time::Duration;

use ustack_obs::{Counter, DropReason};
use ustack_stack::{Error, TcpHandle, tcp::State};
use ustack_testkit::for_both_families;
use ustack_testkit::tcp::{Family, PEER, Seg, SegTest, all_counters};
use ustack_wire::tcp::Flags;

const PEER_PORT: u16 = PEER.port();
/// The peer's window field: with its shift of 2, SND.WND = 65,535 * 4.
const WIN: u16 = 65_535;

for_both_families!(
    predicted_segments_take_the_fast_path_as_the_slow_path_would,
    an_old_or_out_of_window_sequence_number_takes_the_slow_path,
    an_old_timestamp_is_refused_by_paws_on_the_slow_path,
    flags_other_than_ack_and_psh_take_the_slow_path,
    a_window_change_takes_the_slow_path,
    data_filling_a_hole_takes_the_slow_path,
    data_reaching_a_queued_fin_takes_the_slow_path,
    sack_blocks_take_the_slow_path,
    duplicate_acks_and_acks_in_recovery_take_the_slow_path,
    data_after_the_peers_fin_takes_the_slow_path,
    data_into_a_zero_window_takes_the_slow_path,
    a_timestamp_option_other_than_negotiated_takes_the_slow_path,
    data_while_a_probe_timer_runs_with_nothing_in_flight_takes_the_slow_path,
    with_profile_on_the_fast_path_times_each_of_its_stages,
);

/// An accepted connection on port 80 (timestamps, window scaling with the peer's shift
/// 2, SACK if asked) and where its peer stands.
struct Conn {
    fam: Family,
    t: SegTest,
    h: TcpHandle,
    /// The peer's next sequence number, its acknowledgment, and its next TSval.
    seq: u32,
    ack: u32,
    tsval: u32,
    /// The last TSval the stack sent (the peer's TSecr).
    tsecr: u32,
    /// What the stack sent since the last [`Conn::take`].
    out: Vec<Seg>,
}

fn established(fam: Family, sack: bool, early_demux: bool) -> Conn {
    let mut t = fam.listening(fam.config(), 80);
    t.stack.set_tcp_early_demux(early_demux);
    let mut syn = Seg::syn(1000).mss(1200).wscale(2).ts(100, 0);
    if sack {
        syn = syn.sack_perm();
    }
    (syn.src_port, syn.dst_port) = (PEER_PORT, 80);
    let (h, synack) = fam.accept(&mut t, &syn, WIN);
    t.stack.tcp_set_nodelay(t.now, h, true).unwrap();
    Conn {
        ack: synack.seq.wrapping_add(1),
        tsecr: synack.ts.expect("timestamps").0,
        seq: 1001,
        tsval: 102,
        out: Vec::new(),
        fam,
        t,
        h,
    }
}

impl Conn {
    /// The peer's next segment: at its sequence number, acknowledging what it has, with
    /// `data` and `flags` and the window it has been offering.
    fn seg(&self, data: &[u8], flags: Flags) -> Seg {
        let mut s = Seg::ack(self.seq, self.ack)
            .data(data)
            .ts(self.tsval, self.tsecr)
            .win(WIN)
            .flags(flags);
        (s.src_port, s.dst_port) = (PEER_PORT, 80);
        s
    }

    /// Deliver `seg`, collecting what the stack sends; returns whether the fast path took
    /// it.
    fn send(&mut self, seg: &Seg) -> bool {
        let before = self.t.stack.tcp_rcv_fast_hits();
        let now = self.t.now;
        self.t.stack.receive(now, &self.fam.build(seg));
        while let Some(f) = self.t.stack.poll_transmit(now) {
            let s = self.fam.parse(&f).expect("TCP");
            if let Some((tsval, _)) = s.ts {
                self.tsecr = tsval;
            }
            self.out.push(s);
        }
        self.t.stack.tcp_rcv_fast_hits() - before == 1
    }

    /// Move the clock on by `d`, running the stack's timers as they fall due; returns
    /// the segments sent meanwhile, with when they left.
    fn advance(&mut self, d: Duration) -> Vec<(ustack_obs::Instant, Seg)> {
        let end = self.t.now + d;
        let mut out = Vec::new();
        loop {
            let now = self.t.now;
            while let Some(f) = self.t.stack.poll_transmit(now) {
                out.push((now, self.fam.parse(&f).expect("TCP")));
            }
            match self.t.stack.poll_timeout().filter(|t| *t <= end) {
                Some(t) => {
                    self.t.now = now.max(t);
                    self.t.stack.handle_timeout(self.t.now);
                }
                None => break,
            }
        }
        self.t.now = end;
        out
    }

    /// In-order data from the peer, the peer's state moved past it.
    fn data(&mut self, data: &[u8]) -> bool {
        let s = self.seg(data, Flags::ACK | Flags::PSH);
        self.seq = self.seq.wrapping_add(data.len() as u32);
        self.tsval += 1;
        self.send(&s)
    }

    /// The last segment the stack sent since the last [`Conn::take`] acknowledges all the
    /// peer sent (`why` says what it answers); takes what was sent.
    fn assert_acked(&mut self, why: &str) {
        let last = self.take().pop().map(|s| s.ack);
        assert_eq!(last, Some(self.seq), "{why}");
    }

    /// What the stack sent since the last call.
    fn take(&mut self) -> Vec<Seg> {
        core::mem::take(&mut self.out)
    }

    fn read(&mut self) -> Vec<u8> {
        self.t.read(self.h).expect("not at end of stream")
    }

    /// The stack writes `n` bytes; returns the data segments it sent.
    fn write(&mut self, n: usize) -> Vec<Seg> {
        let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
        assert_eq!(self.t.write(self.h, &data), n);
        let now = self.t.now;
        while let Some(f) = self.t.stack.poll_transmit(now) {
            let s = self.fam.parse(&f).expect("TCP");
            if let Some((tsval, _)) = s.ts {
                self.tsecr = tsval;
            }
            self.out.push(s);
        }
        self.take()
            .into_iter()
            .filter(|s| !s.payload.is_empty())
            .collect()
    }

    /// A pure ACK from the peer of `ack` (no data), with SACK blocks `sack`.
    fn ack_of(&mut self, ack: u32, sack: &[(u32, u32)]) -> bool {
        let mut s = self.seg(&[], Flags::ACK);
        s.ack = ack;
        if !sack.is_empty() {
            s = s.sack(sack);
        }
        self.ack = ack;
        self.tsval += 1;
        self.send(&s)
    }
}

/// A request-response exchange and a bulk of data, both ways: every in-order data segment
/// and every ACK advancing SND.UNA is predicted; the counters and frames are those of the
/// slow path (early demux, and with it the fast path, off).
fn predicted_segments_take_the_fast_path_as_the_slow_path_would(fam: Family) {
    let script = |c: &mut Conn| {
        let mut fast = Vec::new();
        for i in 0..4u8 {
            fast.push(c.data(&[i; 64]));
            assert_eq!(c.read(), vec![i; 64]);
            let sent = c.write(64);
            let end = sent[0].seq.wrapping_add(64);
            fast.push(c.ack_of(end, &[]));
        }
        // Two full segments in: the second is acknowledged at once (RFC 9293 §3.8.6.3).
        fast.push(c.data(&[7; 1188]));
        fast.push(c.data(&[8; 1188]));
        c.assert_acked("ACK every second");
        assert_eq!(c.read().len(), 2 * 1188);
        fast
    };
    let mut on = established(fam, true, true);
    let mut off = established(fam, true, false);
    let fast_on = script(&mut on);
    let fast_off = script(&mut off);
    assert!(fast_on.iter().all(|f| *f), "all predicted: {fast_on:?}");
    assert!(
        fast_off.iter().all(|f| !*f),
        "early demux off: no fast path"
    );
    assert_eq!(
        on.t.counter(Counter::TcpExtTCPHPHits),
        6,
        "data segments counted as Linux's TCPHPHits"
    );
    assert_eq!(
        all_counters(on.t.stack.mib()),
        all_counters(off.t.stack.mib())
    );
    assert_eq!(on.out, off.out);
}

/// RFC 9293 §3.10.7.4 "first, check the sequence number": a segment wholly before
/// RCV.NXT (a retransmission of what we have) or starting beyond the window is not
/// acceptable: "an acknowledgment should be sent in reply", and its text is not
/// delivered (again).
fn an_old_or_out_of_window_sequence_number_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    assert!(c.data(b"hello"));
    assert_eq!(c.read(), b"hello");
    let mut old = c.seg(b"hello", Flags::ACK | Flags::PSH);
    old.seq = c.seq.wrapping_sub(5);
    assert!(!c.send(&old), "old data is not predicted");
    c.assert_acked("an ACK of RCV.NXT at once");
    assert_eq!(c.read(), b"", "nothing delivered twice");
    let mut future = c.seg(b"later", Flags::ACK | Flags::PSH);
    future.seq = c.seq.wrapping_add(1 << 30);
    assert!(!c.send(&future), "data beyond the window is not predicted");
    c.assert_acked("answered by an ACK");
    assert_eq!(c.read(), b"");
    assert!(
        c.data(b"next"),
        "the next in-order segment is predicted again"
    );
    assert_eq!(c.read(), b"next");
}

/// RFC 7323 §5.3 (PAWS): "If SEG.TSval < TS.Recent ... then treat the arriving segment as
/// not acceptable: Send an acknowledgment in reply as specified in [RFC 793] page 69 and
/// drop the segment."
fn an_old_timestamp_is_refused_by_paws_on_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    assert!(c.data(b"one"));
    c.take();
    let mut stale = c.seg(b"two", Flags::ACK | Flags::PSH);
    stale.ts = Some((c.tsval - 50, c.tsecr));
    assert!(!c.send(&stale), "an old TSval is not predicted");
    assert_eq!(c.t.drops(DropReason::TcpPaws), 1, "dropped by PAWS");
    c.assert_acked("an ACK in reply");
    assert_eq!(
        c.read(),
        b"one",
        "the stale segment's text is not delivered"
    );
    assert!(c.data(b"two"));
    assert_eq!(c.read(), b"two");
}

/// Segments with FIN, URG, RST or SYN take the slow path, which handles each: the FIN
/// ends the stream and is acknowledged at once (RFC 9293 §3.10.7.4 eighth); urgent data is
/// delivered in line (ustack keeps no out-of-band byte); a RST at RCV.NXT resets the
/// connection (RFC 5961 §3.2); a SYN is answered with a challenge ACK (RFC 5961 §4).
fn flags_other_than_ack_and_psh_take_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let mut urg = c.seg(b"urgent", Flags::ACK | Flags::PSH | Flags::URG);
    urg.seq = c.seq;
    c.seq = c.seq.wrapping_add(6);
    c.tsval += 1;
    assert!(!c.send(&urg), "URG is not predicted");
    assert_eq!(c.read(), b"urgent", "urgent data is read in line");

    // Each of SYN and RST acknowledges new data: as a plain ACK it would be predicted.
    let sent = c.write(64);
    let mut syn = c.seg(&[], Flags::SYN | Flags::ACK);
    syn.ack = sent[0].seq.wrapping_add(64);
    c.tsval += 1;
    c.take();
    assert!(!c.send(&syn), "SYN is not predicted");
    assert_eq!(c.take().len(), 1, "a challenge ACK");
    assert_eq!(
        c.t.stack.tcp_info(c.h).unwrap().send_q,
        64,
        "the SYN's ACK not taken"
    );
    assert_eq!(c.t.counter(Counter::TcpExtTCPChallengeACK), 1);
    assert_eq!(c.t.stack.tcp_state(c.h), Ok(State::Established));

    let fin = c.seg(b"bye", Flags::ACK | Flags::PSH | Flags::FIN);
    c.seq = c.seq.wrapping_add(4);
    c.tsval += 1;
    assert!(!c.send(&fin), "FIN is not predicted");
    // Past the quick-ACK phase, the FIN's ACK is delayed, as Linux's `tcp_fin` leaves
    // it (see `passive_close_after_data_acks_the_fin_with_ours` in tcp_segments.rs).
    assert!(c.take().is_empty(), "the FIN's ACK delayed");
    let acks: Vec<_> = c
        .advance(Duration::from_millis(50))
        .into_iter()
        .map(|(_, s)| s.ack)
        .collect();
    assert_eq!(
        acks,
        [c.seq],
        "the FIN acknowledged by the delayed-ACK timer"
    );
    assert_eq!(c.read(), b"bye");
    assert_eq!(c.t.read(c.h), None, "end of stream");
    assert_eq!(c.t.stack.tcp_state(c.h), Ok(State::CloseWait));

    let mut d = established(fam, true, true);
    assert!(d.data(b"x"));
    let sent = d.write(64);
    let mut rst = d.seg(&[], Flags::RST | Flags::ACK);
    rst.ack = sent[0].seq.wrapping_add(64);
    assert!(!d.send(&rst), "RST is not predicted");
    let mut buf = [0u8; 8];
    let now = d.t.now;
    assert_eq!(
        d.t.stack.tcp_recv(now, d.h, &mut buf),
        Ok(1),
        "data before the RST is still read"
    );
    assert_eq!(
        d.t.stack.tcp_recv(now, d.h, &mut buf),
        Err(Error::ConnectionReset)
    );
}

/// RFC 9293 §3.10.7.4 fifth: the window a segment carries updates SND.WND ("set SND.WND
/// <- SEG.WND"); the prediction holds only while it is unchanged, so a segment that
/// shrinks it goes to the slow path, and the sender then respects the new window.
fn a_window_change_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    // (A segment at the handshake ACK's sequence number may not shrink the window:
    // SND.WL1 = SEG.SEQ there, Linux's `tcp_may_update_window`.)
    assert!(c.data(b"first,"));
    let mut small = c.seg(b"shrink", Flags::ACK | Flags::PSH).win(100);
    c.seq = c.seq.wrapping_add(6);
    c.tsval += 1;
    assert!(!c.send(&small), "a new window is not predicted");
    assert_eq!(
        c.t.stack.tcp_info(c.h).unwrap().snd_wnd,
        400,
        "SND.WND = 100 << 2"
    );
    let sent = c.write(2000);
    let bytes: usize = sent.iter().map(|s| s.payload.len()).sum();
    assert_eq!(bytes, 400, "no more than the window sent");
    // Growing it again is a change too.
    small.window = 30_000;
    small.seq = c.seq;
    small.payload = b"grow".to_vec();
    small.ts = Some((c.tsval, c.tsecr));
    c.seq = c.seq.wrapping_add(4);
    c.tsval += 1;
    assert!(!c.send(&small));
    assert_eq!(c.t.stack.tcp_info(c.h).unwrap().snd_wnd, 120_000);
    assert_eq!(c.read(), b"first,shrinkgrow");
}

/// RFC 5681 §4.2: "an immediate ACK SHOULD be sent when the incoming segment fills in all
/// or part of a gap in the sequence space"; the out-of-order data it joins is delivered
/// with it, and the SACK block that reported it is gone (RFC 2018 §4).
fn data_filling_a_hole_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let mut ahead = c.seg(&[2; 100], Flags::ACK | Flags::PSH);
    ahead.seq = c.seq.wrapping_add(100);
    assert!(!c.send(&ahead));
    let dup = c.take();
    let right = c.seq.wrapping_add(200);
    assert_eq!(
        dup.last().map(|s| (s.ack, s.sack.clone())),
        Some((c.seq, vec![(right - 100, right)]))
    );
    c.tsval += 1;
    let fill = c.seg(&[1; 100], Flags::ACK | Flags::PSH);
    c.seq = right;
    c.tsval += 1;
    assert!(
        !c.send(&fill),
        "data with out-of-order data queued is not predicted"
    );
    let ack = c.take();
    assert_eq!(ack.len(), 1, "acknowledged at once: {ack:?}");
    assert_eq!((ack[0].ack, ack[0].sack.clone()), (right, vec![]));
    let mut want = vec![1; 100];
    want.extend([2; 100]);
    assert_eq!(c.read(), want);
    assert!(c.data(b"after"), "predicted again once the hole is filled");
}

/// A FIN that arrived beyond a hole is processed when the data before it arrives (Linux
/// queues it with its segment): the stream ends after that data.
fn data_reaching_a_queued_fin_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let mut fin = c.seg(&[], Flags::ACK | Flags::FIN);
    fin.seq = c.seq.wrapping_add(10);
    assert!(!c.send(&fin));
    c.tsval += 1;
    c.take();
    let data = c.seg(&[5; 10], Flags::ACK | Flags::PSH);
    c.seq = c.seq.wrapping_add(11);
    assert!(
        !c.send(&data),
        "data reaching a queued FIN is not predicted"
    );
    c.assert_acked("data and FIN acknowledged");
    assert_eq!(c.read(), vec![5; 10]);
    assert_eq!(c.t.read(c.h), None, "end of stream");
    assert_eq!(c.t.stack.tcp_state(c.h), Ok(State::CloseWait));
}

/// RFC 6675: an ACK whose SACK blocks show three segments above a hole has the segment
/// in the hole lost (IsLost, DupThresh = 3) and retransmitted at once, though the ACK
/// also advanced SND.UNA: SACK blocks make the header longer than predicted.
fn sack_blocks_take_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let sent = c.write(5 * 1188);
    assert_eq!(sent.len(), 5, "{sent:?}");
    let (s1, s2) = (sent[1].seq, sent[2].seq);
    let end = sent[4].seq.wrapping_add(1188);
    assert!(
        !c.ack_of(s1, &[(s2, end)]),
        "an ACK with SACK blocks is not predicted"
    );
    let out = c.take();
    assert!(
        out.iter().any(|s| s.seq == s1 && s.payload.len() == 1188),
        "the segment in the hole retransmitted: {out:?}"
    );
    assert_eq!(c.t.counter(Counter::TcpExtTCPSackRecovery), 1);
}

/// RFC 5681 §3.2: the third duplicate ACK (no data, SEG.ACK = SND.UNA, the window
/// unchanged) retransmits the first unacknowledged segment (no SACK: Reno); RFC 6582 §3.2
/// step 3: in recovery, a partial ACK retransmits the next segment at once. Neither is a
/// pure ACK advancing SND.UNA outside recovery, so neither is predicted.
fn duplicate_acks_and_acks_in_recovery_take_the_slow_path(fam: Family) {
    let mut c = established(fam, false, true);
    let sent = c.write(5 * 1188);
    assert_eq!(sent.len(), 5);
    let una = sent[0].seq;
    for i in 0..3 {
        assert!(!c.ack_of(una, &[]), "duplicate ACK {i} is not predicted");
    }
    let out = c.take();
    assert!(
        out.iter().any(|s| s.seq == una && s.payload.len() == 1188),
        "fast retransmit after the third duplicate: {out:?}"
    );
    assert_eq!(c.t.counter(Counter::TcpExtTCPRenoRecovery), 1);
    let s1 = sent[1].seq;
    assert!(
        !c.ack_of(s1, &[]),
        "a partial ACK in recovery is not predicted"
    );
    let out = c.take();
    assert!(
        out.iter().any(|s| s.seq == s1 && s.payload.len() == 1188),
        "the next hole retransmitted at once (NewReno): {out:?}"
    );
}

/// RFC 9293 §3.10.7.4 seventh, CLOSE-WAIT: "This should not occur since a FIN has been
/// received from the remote side. Ignore the segment text." The prediction is for
/// ESTABLISHED only.
fn data_after_the_peers_fin_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let fin = c.seg(&[], Flags::ACK | Flags::FIN);
    c.seq = c.seq.wrapping_add(1);
    c.tsval += 1;
    assert!(!c.send(&fin));
    assert_eq!(c.t.stack.tcp_state(c.h), Ok(State::CloseWait));
    assert!(!c.data(b"late"), "CLOSE-WAIT is not predicted");
    assert_eq!(c.t.read(c.h), None, "nothing after the end of the stream");
    c.t.advance(Duration::from_millis(1));
}

/// RFC 9293 §3.10.7.4 seventh and §3.8.6.1: data into a zero window is not accepted
/// (Linux `tcp_data_queue`: TCPZeroWindowDrop) and is answered at once with an ACK that
/// gives the window again; the prediction holds only for data within the window.
fn data_into_a_zero_window_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    c.t.stack.tcp_set_recv_buffer(c.h, 8192).unwrap();
    let shift = c.t.stack.tcp_info(c.h).unwrap().wscale.map_or(0, |w| w.1);
    let mut edge = c.seq.wrapping_add(1);
    for _ in 0..400 {
        if let Some(a) = c.out.iter().rev().find(|s| s.has(Flags::ACK)) {
            edge = a.ack.wrapping_add(u32::from(a.window) << shift);
        }
        let left = edge.wrapping_sub(c.seq) as i32;
        if left <= 0 {
            break;
        }
        let n = left.min(1188) as usize;
        c.data(&vec![9; n]);
    }
    let last = c.take().into_iter().last().expect("an ACK");
    assert_eq!((last.ack, last.window), (c.seq, 0), "the window closed");
    let probe = c.seg(&[1], Flags::ACK | Flags::PSH);
    c.tsval += 1;
    assert!(!c.send(&probe), "data into a zero window is not predicted");
    assert_eq!(c.t.drops(DropReason::TcpZeroWindow), 1);
    let ack = c.take();
    assert_eq!(ack.len(), 1, "answered at once: {ack:?}");
    assert_eq!((ack[0].ack, ack[0].window), (c.seq, 0));
}

/// The data offset predicted is the connection's: with timestamps negotiated (RFC 7323
/// §3.2) exactly `NOP NOP TS`, without them none. A segment that differs (no timestamp
/// where they are in use, one where they are not) goes to the slow path, which delivers
/// its data (and, without negotiation, ignores the option: RFC 7323 §3.2).
fn a_timestamp_option_other_than_negotiated_takes_the_slow_path(fam: Family) {
    let mut c = established(fam, true, true);
    let mut bare = c.seg(b"no ts", Flags::ACK | Flags::PSH);
    bare.ts = None;
    c.seq = c.seq.wrapping_add(5);
    assert!(
        !c.send(&bare),
        "no timestamp where they are in use: not predicted"
    );
    assert_eq!(c.read(), b"no ts");

    let mut t = fam.listening(fam.config(), 80);
    let mut syn = Seg::syn(1000).mss(1200).wscale(2);
    (syn.src_port, syn.dst_port) = (PEER_PORT, 80);
    let (h, synack) = fam.accept(&mut t, &syn, WIN);
    assert!(synack.ts.is_none(), "no timestamps negotiated");
    let ack = synack.seq.wrapping_add(1);
    let mut plain = Seg::ack(1001, ack)
        .data(b"plain")
        .win(WIN)
        .flags(Flags::ACK | Flags::PSH);
    (plain.src_port, plain.dst_port) = (PEER_PORT, 80);
    let before = t.stack.tcp_rcv_fast_hits();
    t.stack.receive(t.now, &fam.build(&plain));
    assert_eq!(
        t.stack.tcp_rcv_fast_hits(),
        before + 1,
        "predicted without timestamps"
    );
    let mut with_ts = Seg::ack(1006, ack)
        .data(b"ts")
        .ts(5, 1)
        .win(WIN)
        .flags(Flags::ACK | Flags::PSH);
    (with_ts.src_port, with_ts.dst_port) = (PEER_PORT, 80);
    t.stack.receive(t.now, &fam.build(&with_ts));
    assert_eq!(
        t.stack.tcp_rcv_fast_hits(),
        before + 1,
        "a timestamp not negotiated: not predicted"
    );
    assert_eq!(t.read(h), Some(b"plaints".to_vec()));
}

/// A probe timer running with nothing in flight (here TCP_CORK's: a corked write shorter
/// than the MSS arms it, Linux `tcp_push_pending_frames` -> `tcp_check_probe_timer`) is
/// the slow path's `tcp_ack` to settle (Linux `tcp_ack` -> `tcp_ack_probe`: the window
/// holds the data, so the timer stops and `tcp_data_snd_check` arms it again from now):
/// a data segment from the peer that arrives meanwhile is not predicted, and the corked
/// bytes leave one probe timeout after that segment, not after the write.
fn data_while_a_probe_timer_runs_with_nothing_in_flight_takes_the_slow_path(fam: Family) {
    // When the corked bytes leave, measured from the write, with `peer_after` set: data
    // from the peer that long after the write.
    let corked_wait = |peer_after: Option<Duration>| {
        let mut c = established(fam, true, true);
        let now = c.t.now;
        c.t.stack.tcp_set_cork(now, c.h, true).unwrap();
        assert!(c.write(100).is_empty(), "corked");
        let wrote = c.t.now;
        if let Some(d) = peer_after {
            let early = c.advance(d);
            assert!(early.iter().all(|(_, s)| s.payload.is_empty()), "{early:?}");
            assert!(!c.data(b"meanwhile"), "not predicted");
            assert_eq!(c.read(), b"meanwhile");
        }
        let sent = c.advance(Duration::from_secs(10));
        let (at, seg) = sent
            .into_iter()
            .find(|(_, s)| !s.payload.is_empty())
            .expect("the corked bytes leave on the probe timer");
        assert_eq!(seg.payload.len(), 100);
        at - wrote
    };
    let probe = corked_wait(None);
    let half = probe / 2;
    assert_eq!(
        corked_wait(Some(half)),
        half + probe,
        "the timer restarted by the peer's segment"
    );
}

/// `--profile` on: the receive path reads the switch once a frame and, on, takes its copy
/// with the stage guards, so a fast-path segment's time is charged to each of its stages
/// (Ethernet/IP input, the early demux, TCP input, the socket queue) as before; off, the
/// guards are compiled out of the common copy. Summed over 200 sampled iterations, so that
/// each stage's own time is well above the clock read the profiler subtracts.
fn with_profile_on_the_fast_path_times_each_of_its_stages(fam: Family) {
    use ustack_obs::profile::{self, Iteration, Stage};
    let mut c = established(fam, false, true);
    profile::reset();
    profile::set_sample_every(1);
    profile::set_enabled(true);
    let mut it = Iteration::new();
    for i in 0..200u32 {
        assert!(it.begin(|| None, || 0), "every iteration sampled");
        let fast = c.data(&[i as u8; 64]);
        it.end(|| None, || 1);
        assert!(fast, "segment {i} predicted");
        assert_eq!(c.read(), vec![i as u8; 64]);
    }
    profile::set_enabled(false);
    let snap = profile::snapshot();
    for stage in [
        Stage::L2L3,
        Stage::Demux,
        Stage::TcpInput,
        Stage::SocketQueue,
    ] {
        assert!(snap.stage_ns(stage) > 0, "{stage:?} charged nothing");
    }
    profile::reset();
}
