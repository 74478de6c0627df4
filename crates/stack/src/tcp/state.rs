//! The TCP connection states, spelled as in
//! [RFC 9293 §3.3.2](https://www.rfc-editor.org/rfc/rfc9293#section-3.3.2), with the
//! groups of states the processing rules name as predicates (never ordering tricks such
//! as `state >= FinWait1`).
//!
//! TIME-WAIT connections are kept as compact records outside the connection table (Linux
//! `inet_timewait_sock`), and SYN-RECEIVED connections of a listener as request records
//! (Linux `request_sock`); both still have their state here, for views and for the
//! connections that reach those states another way (simultaneous open).

use core::fmt;

/// A TCP connection's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection (a socket not yet used, or one that has finished).
    Closed,
    /// Waiting for a connection request from any remote TCP.
    Listen,
    /// Sent a SYN, waiting for a matching SYN(-ACK).
    SynSent,
    /// Received and sent a SYN, waiting for the ACK of ours.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// We closed first (sent FIN), waiting for its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer closed first; waiting for our user to close.
    CloseWait,
    /// Both sides sent FIN at once (simultaneous close); waiting for the ACK of ours.
    Closing,
    /// The peer closed first and so did we; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; waiting 2*MSL so that old duplicates die.
    TimeWait,
}

impl State {
    /// RFC 9293 §3.3.2: the synchronized states, where both sequence spaces are known:
    /// everything from ESTABLISHED on. Segments there get the full §3.10.7.4 processing.
    pub const fn is_synchronized(self) -> bool {
        matches!(
            self,
            State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait
                | State::Closing
                | State::LastAck
                | State::TimeWait
        )
    }

    /// States in which the user may still send data (our FIN not yet queued).
    pub const fn can_send(self) -> bool {
        matches!(self, State::Established | State::CloseWait)
    }

    /// States in which data from the peer is still accepted (the peer's FIN not yet
    /// received): RFC 9293 §3.10.7.4 "seventh, process the segment text".
    pub const fn can_receive(self) -> bool {
        matches!(self, State::Established | State::FinWait1 | State::FinWait2)
    }

    /// States where we have sent a FIN (it may not be acknowledged yet).
    pub const fn fin_sent(self) -> bool {
        matches!(
            self,
            State::FinWait1 | State::FinWait2 | State::Closing | State::LastAck | State::TimeWait
        )
    }

    /// States where the peer's FIN has been received.
    pub const fn fin_received(self) -> bool {
        matches!(
            self,
            State::CloseWait | State::Closing | State::LastAck | State::TimeWait
        )
    }

    /// Counted in the Tcp `CurrEstab` gauge (RFC 4022 tcpCurrEstab: ESTABLISHED or
    /// CLOSE-WAIT).
    pub const fn counts_as_established(self) -> bool {
        matches!(self, State::Established | State::CloseWait)
    }

    /// The name `ss` prints (`ESTAB`, `SYN-SENT`, ...).
    pub const fn ss_name(self) -> &'static str {
        match self {
            State::Closed => "UNCONN",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECV",
            State::Established => "ESTAB",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }
}

impl fmt::Display for State {
    /// The RFC's spelling: `ESTABLISHED`, `FIN-WAIT-1`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::State::*;
    use super::*;

    const ALL: [State; 11] = [
        Closed,
        Listen,
        SynSent,
        SynReceived,
        Established,
        FinWait1,
        FinWait2,
        CloseWait,
        Closing,
        LastAck,
        TimeWait,
    ];

    #[test]
    fn groups_match_rfc_9293() {
        let sync: Vec<_> = ALL.iter().filter(|s| s.is_synchronized()).collect();
        assert_eq!(
            sync,
            [
                &Established,
                &FinWait1,
                &FinWait2,
                &CloseWait,
                &Closing,
                &LastAck,
                &TimeWait
            ]
        );
        // A state never has both "can send" and "FIN sent", nor "can receive" and "FIN received".
        for s in ALL {
            assert!(!(s.can_send() && s.fin_sent()), "{s}");
            assert!(!(s.can_receive() && s.fin_received()), "{s}");
        }
        assert_eq!(ALL.iter().filter(|s| s.counts_as_established()).count(), 2);
        assert_eq!(FinWait1.to_string(), "FIN-WAIT-1");
        assert_eq!(Established.ss_name(), "ESTAB");
    }
}
