//! MIB counters with Linux's names, and their renderings.
//!
//! One table (the `mib_tables!` invocation below) gives every counter's table, Linux field
//! name, order and [`Kind`]; the [`Counter`] enum, [`Table`], the text renderings and the JSON
//! all come from it, so a name cannot be spelled two ways. Tables, field names and field
//! order are exactly those of Linux 6.18's `/proc/net/snmp` (Ip, Icmp, IcmpMsg, Tcp, Udp,
//! UdpLite) and `/proc/net/netstat` (TcpExt, IpExt), printed by `net/ipv4/proc.c`, and of
//! `/proc/net/snmp6` (Ip6, Icmp6), printed by `net/ipv6/proc.c`; the
//! counters are those of `include/uapi/linux/snmp.h`. A test compares our output with the
//! running kernel's, so a drift is caught.
//!
//! Storage ([`Mib`]) is a flat array of `u64` indexed by `Counter as usize`, plus the two
//! IcmpMsg per-type arrays and one count per [`DropReason`]: an increment is an index and an
//! add, with no hashing and no allocation. Each shard of the stack owns one `Mib`; readers sum
//! them with [`Mib::merge`] ("counters per shard, summed on read", as Linux folds its per-CPU
//! counters in `snmp_fold_field`).
//!
//! Arithmetic wraps, like Linux's `unsigned long` counters: a gauge decremented on another
//! shard than the one that incremented it goes "negative" there and the sum is still right.

use core::fmt::{self, Write as _};

#[cfg(feature = "json")]
use serde_json::{Map, Value};

use crate::drop::DropReason;

/// The file a [`Table`] is printed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcFile {
    /// `/proc/net/snmp`: Ip, Icmp, IcmpMsg, Tcp, Udp, UdpLite ([`Mib::render_snmp`]).
    Snmp,
    /// `/proc/net/netstat`: TcpExt, IpExt ([`Mib::render_netstat`]).
    Netstat,
    /// `/proc/net/snmp6`: Ip6, Icmp6 ([`Mib::render_snmp6`]), one `Ip6InReceives  n` line
    /// per counter.
    Snmp6,
}

/// How a counter behaves: what [`Mib::new`] sets it to, and what [`Mib::merge`] does with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An event count that only goes up. Starts at 0; `merge` sums.
    Counter,
    /// A level that goes up and down (`Tcp CurrEstab`): `inc` on entry, `dec` on exit.
    /// Starts at 0; `merge` sums (the shards' levels add up to the stack's level).
    Gauge,
    /// A configuration value, not a count (`Ip Forwarding`, `Tcp RtoMin`, `Tcp MaxConn`, ...).
    /// [`Mib::new`] sets it to Linux's value given here; `merge` copies the other side's value
    /// instead of summing (every shard has the same configuration); it is printed signed
    /// (Linux prints Forwarding and DefaultTTL with `%d` and MaxConn with `%ld`; the other
    /// constants are small positive numbers, so signedness does not show).
    Constant(i64),
    /// An `Icmp In<Type>` column: a view of the IcmpMsg `InType<N>` count, sharing its storage,
    /// exactly as Linux's `icmp_put` reads `icmpmsg_statistics`. `inc` on it is
    /// [`Mib::icmp_in_type`].
    IcmpMsgIn(u8),
    /// An `Icmp Out<Type>` column: a view of the IcmpMsg `OutType<N>` count, as [`Kind::IcmpMsgIn`].
    IcmpMsgOut(u8),
    /// An `Icmp6 In<Type>` line of `/proc/net/snmp6`: a view of the `Icmp6InType<N>` count,
    /// as Linux's `snmp6_seq_show_icmpv6msg` reads `icmpv6msg_statistics`. `inc` on it is
    /// [`Mib::icmp6_in_type`].
    Icmp6MsgIn(u8),
    /// An `Icmp6 Out<Type>` line: a view of the `Icmp6OutType<N>` count.
    Icmp6MsgOut(u8),
}

/// What the table says about one counter.
#[derive(Clone, Copy, Debug)]
struct CounterInfo {
    table: Table,
    name: &'static str,
    kind: Kind,
}

/// Declares every MIB table: `Table in File { Variant = "LinuxName" [=> Kind], ... }`, in
/// Linux's order. Generates [`Counter`] (one flat enum, variants in this order), its
/// `ALL`/`COUNT`/info table, and [`Table`] with `ALL`, `name`, `counters` and `file`.
macro_rules! mib_tables {
    ($(
        $(#[$tdoc:meta])*
        $table:ident in $file:ident {
            $(
                $(#[$cdoc:meta])*
                $variant:ident = $name:literal $(=> $kind:expr)?
            ),+ $(,)?
        }
    )+) => {
        /// Every counter of every table, one flat enum with Linux's names: variants are
        /// `<Table><Field>` (`IpInReceives`, `TcpExtListenOverflows`, ...), in the order Linux
        /// prints them, table after table. `Counter as usize` indexes [`Mib`]'s storage.
        ///
        /// The meaning of each counter is Linux's (`include/uapi/linux/snmp.h`, and the RFC
        /// MIB named by its table); the stack bumps it where Linux does.
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Counter {
            $($(
                $(#[$cdoc])*
                #[doc = concat!("\n\nPrinted as `", stringify!($table), ": ", $name, "`.")]
                $variant,
            )+)+
        }

        impl Counter {
            /// Every counter, in Linux's print order (`ALL[i] as usize == i`).
            pub const ALL: &'static [Counter] = &[$($(Counter::$variant,)+)+];
            /// Number of counters.
            pub const COUNT: usize = Counter::ALL.len();
            const INFO: [CounterInfo; Counter::COUNT] = [$($(
                CounterInfo {
                    table: Table::$table,
                    name: $name,
                    kind: mib_tables!(@kind $($kind)?),
                },
            )+)+];
        }

        /// A MIB table, as printed by Linux: one header line of field names and one line of
        /// values, both starting `<Name>:`. IcmpMsg is not here: its columns are dynamic
        /// (see [`Mib::icmp_in_type`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Table {
            $($(#[$tdoc])* $table,)+
        }

        impl Table {
            /// Every table, in print order (the `/proc/net/snmp` ones, then `/proc/net/netstat`'s).
            pub const ALL: &'static [Table] = &[$(Table::$table,)+];

            /// The table's name as printed before the colon: `"Ip"`, `"TcpExt"`, ...
            pub const fn name(self) -> &'static str {
                match self {
                    $(Table::$table => stringify!($table),)+
                }
            }

            /// The table's counters, in print order.
            pub const fn counters(self) -> &'static [Counter] {
                match self {
                    $(Table::$table => &[$(Counter::$variant,)+],)+
                }
            }

            /// The file the table is printed in.
            pub const fn file(self) -> ProcFile {
                match self {
                    $(Table::$table => ProcFile::$file,)+
                }
            }
        }
    };
    (@kind) => { Kind::Counter };
    (@kind $kind:expr) => { $kind };
}

mib_tables! {
    /// IP, RFC 4293 `ipSystemStats` (Linux `snmp4_ipstats_list`). First line of `/proc/net/snmp`.
    Ip in Snmp {
        /// 1 if forwarding, 2 if not (RFC 4293 ipForwarding). ustack does not forward: 2.
        IpForwarding = "Forwarding" => Kind::Constant(2),
        /// TTL put in datagrams we originate (sysctl `ip_default_ttl`).
        IpDefaultTTL = "DefaultTTL" => Kind::Constant(64),
        /// Datagrams received from the link, counted before any check (Linux `ip_rcv_core`).
        IpInReceives = "InReceives",
        /// Datagrams discarded for a bad header: version, IHL, total length, checksum.
        IpInHdrErrors = "InHdrErrors",
        /// Datagrams discarded because the destination is not ours (and we do not forward).
        IpInAddrErrors = "InAddrErrors",
        IpForwDatagrams = "ForwDatagrams",
        /// Datagrams for us whose protocol we do not handle (an ICMP protocol-unreachable is sent).
        IpInUnknownProtos = "InUnknownProtos",
        /// Datagrams received without error but discarded, e.g. for lack of memory.
        IpInDiscards = "InDiscards",
        /// Datagrams handed to a transport protocol (ICMP, UDP, TCP), after reassembly.
        IpInDelivers = "InDelivers",
        /// Datagrams our transports handed to IP for sending (ICMP included; forwarded ones excluded).
        IpOutRequests = "OutRequests",
        /// Outgoing datagrams discarded without a problem in them, e.g. a full queue.
        IpOutDiscards = "OutDiscards",
        /// Outgoing datagrams discarded because no route matched.
        IpOutNoRoutes = "OutNoRoutes",
        /// Reassemblies abandoned because `ipfrag_time` passed (once per datagram).
        IpReasmTimeout = "ReasmTimeout",
        /// Fragments received that needed reassembly.
        IpReasmReqds = "ReasmReqds",
        /// Datagrams successfully reassembled.
        IpReasmOKs = "ReasmOKs",
        /// Failures of the reassembly algorithm (timeouts, overlaps, memory limit, ...).
        IpReasmFails = "ReasmFails",
        /// Datagrams successfully fragmented.
        IpFragOKs = "FragOKs",
        /// Datagrams that needed fragmenting but could not be (DF set).
        IpFragFails = "FragFails",
        /// Fragments created by fragmentation.
        IpFragCreates = "FragCreates",
        /// Datagrams handed to the link layer (Linux 6.3+, after fragmentation).
        IpOutTransmits = "OutTransmits",
    }
    /// ICMP, RFC 2011 (Linux `icmp_put`). The per-type columns are views of IcmpMsg.
    Icmp in Snmp {
        /// ICMP messages received, counted before the checksum check (Linux `icmp_rcv`).
        IcmpInMsgs = "InMsgs",
        /// ICMP messages received but found bad (checksum, length).
        IcmpInErrors = "InErrors",
        /// ICMP messages received with a bad checksum.
        IcmpInCsumErrors = "InCsumErrors",
        IcmpInDestUnreachs = "InDestUnreachs" => Kind::IcmpMsgIn(3),
        IcmpInTimeExcds = "InTimeExcds" => Kind::IcmpMsgIn(11),
        IcmpInParmProbs = "InParmProbs" => Kind::IcmpMsgIn(12),
        IcmpInSrcQuenchs = "InSrcQuenchs" => Kind::IcmpMsgIn(4),
        IcmpInRedirects = "InRedirects" => Kind::IcmpMsgIn(5),
        IcmpInEchos = "InEchos" => Kind::IcmpMsgIn(8),
        IcmpInEchoReps = "InEchoReps" => Kind::IcmpMsgIn(0),
        IcmpInTimestamps = "InTimestamps" => Kind::IcmpMsgIn(13),
        IcmpInTimestampReps = "InTimestampReps" => Kind::IcmpMsgIn(14),
        IcmpInAddrMasks = "InAddrMasks" => Kind::IcmpMsgIn(17),
        IcmpInAddrMaskReps = "InAddrMaskReps" => Kind::IcmpMsgIn(18),
        /// ICMP messages sent.
        IcmpOutMsgs = "OutMsgs",
        /// ICMP messages not sent because of a problem inside ICMP (e.g. no buffer).
        IcmpOutErrors = "OutErrors",
        /// ICMP messages suppressed by the global limit (`icmp_msgs_per_sec`, `icmp_msgs_burst`).
        IcmpOutRateLimitGlobal = "OutRateLimitGlobal",
        /// ICMP messages suppressed by the per-destination limit (`icmp_ratelimit`).
        IcmpOutRateLimitHost = "OutRateLimitHost",
        IcmpOutDestUnreachs = "OutDestUnreachs" => Kind::IcmpMsgOut(3),
        IcmpOutTimeExcds = "OutTimeExcds" => Kind::IcmpMsgOut(11),
        IcmpOutParmProbs = "OutParmProbs" => Kind::IcmpMsgOut(12),
        IcmpOutSrcQuenchs = "OutSrcQuenchs" => Kind::IcmpMsgOut(4),
        IcmpOutRedirects = "OutRedirects" => Kind::IcmpMsgOut(5),
        IcmpOutEchos = "OutEchos" => Kind::IcmpMsgOut(8),
        IcmpOutEchoReps = "OutEchoReps" => Kind::IcmpMsgOut(0),
        IcmpOutTimestamps = "OutTimestamps" => Kind::IcmpMsgOut(13),
        IcmpOutTimestampReps = "OutTimestampReps" => Kind::IcmpMsgOut(14),
        IcmpOutAddrMasks = "OutAddrMasks" => Kind::IcmpMsgOut(17),
        IcmpOutAddrMaskReps = "OutAddrMaskReps" => Kind::IcmpMsgOut(18),
    }
    /// TCP, RFC 4022 (Linux `snmp4_tcp_list`).
    Tcp in Snmp {
        /// 1 = "other" (RFC 4022 tcpRtoAlgorithm): Linux's RFC 6298 variant.
        TcpRtoAlgorithm = "RtoAlgorithm" => Kind::Constant(1),
        /// Minimum retransmission timeout, milliseconds.
        TcpRtoMin = "RtoMin" => Kind::Constant(200),
        /// Maximum retransmission timeout, milliseconds.
        TcpRtoMax = "RtoMax" => Kind::Constant(120_000),
        /// -1: no fixed limit on connections (printed signed, RFC 4022 tcpMaxConn).
        TcpMaxConn = "MaxConn" => Kind::Constant(-1),
        /// Transitions CLOSED -> SYN-SENT (connect).
        TcpActiveOpens = "ActiveOpens",
        /// Transitions LISTEN -> SYN-RECEIVED (a connection request accepted for handshake).
        TcpPassiveOpens = "PassiveOpens",
        /// Transitions SYN-SENT/SYN-RECEIVED -> CLOSED, plus SYN-RECEIVED -> LISTEN.
        TcpAttemptFails = "AttemptFails",
        /// Transitions ESTABLISHED/CLOSE-WAIT -> CLOSED.
        TcpEstabResets = "EstabResets",
        /// Connections now in ESTABLISHED or CLOSE-WAIT: a gauge (`inc` on entry, `dec` on exit).
        TcpCurrEstab = "CurrEstab" => Kind::Gauge,
        /// Segments received, including those in error.
        TcpInSegs = "InSegs",
        /// Segments sent, excluding retransmissions.
        TcpOutSegs = "OutSegs",
        /// Segments retransmitted.
        TcpRetransSegs = "RetransSegs",
        /// Segments received in error (bad checksum, bad header).
        TcpInErrs = "InErrs",
        /// Segments sent with RST set.
        TcpOutRsts = "OutRsts",
        /// Segments received with a bad checksum.
        TcpInCsumErrors = "InCsumErrors",
    }
    /// UDP, RFC 4113 (Linux `snmp4_udp_list`).
    Udp in Snmp {
        /// Datagrams delivered to a socket.
        UdpInDatagrams = "InDatagrams",
        /// Datagrams for a port with no socket (an ICMP port-unreachable is sent).
        UdpNoPorts = "NoPorts",
        /// Datagrams received but not delivered for a reason other than no socket.
        UdpInErrors = "InErrors",
        /// Datagrams sent.
        UdpOutDatagrams = "OutDatagrams",
        /// Datagrams dropped because the socket's receive buffer was full.
        UdpRcvbufErrors = "RcvbufErrors",
        /// Datagrams not sent for lack of send buffer.
        UdpSndbufErrors = "SndbufErrors",
        /// Datagrams received with a bad checksum.
        UdpInCsumErrors = "InCsumErrors",
        /// Broadcast/multicast datagrams no socket wanted (not counted in NoPorts).
        UdpIgnoredMulti = "IgnoredMulti",
        /// Datagrams dropped because protocol memory (`udp_mem`) was exhausted.
        UdpMemErrors = "MemErrors",
    }
    /// UDP-Lite: same fields as Udp (Linux prints `snmp4_udp_list` again). ustack has no UDP-Lite: all zero.
    UdpLite in Snmp {
        UdpLiteInDatagrams = "InDatagrams",
        UdpLiteNoPorts = "NoPorts",
        UdpLiteInErrors = "InErrors",
        UdpLiteOutDatagrams = "OutDatagrams",
        UdpLiteRcvbufErrors = "RcvbufErrors",
        UdpLiteSndbufErrors = "SndbufErrors",
        UdpLiteInCsumErrors = "InCsumErrors",
        UdpLiteIgnoredMulti = "IgnoredMulti",
        UdpLiteMemErrors = "MemErrors",
    }
    /// Linux's TCP (and some socket/IP) extensions (`snmp4_net_list`). First line of `/proc/net/netstat`.
    TcpExt in Netstat {
        /// SYN cookies sent (SYN queue full).
        TcpExtSyncookiesSent = "SyncookiesSent",
        /// Valid SYN cookies received in an ACK.
        TcpExtSyncookiesRecv = "SyncookiesRecv",
        /// ACKs with an invalid SYN cookie.
        TcpExtSyncookiesFailed = "SyncookiesFailed",
        TcpExtEmbryonicRsts = "EmbryonicRsts",
        TcpExtPruneCalled = "PruneCalled",
        TcpExtRcvPruned = "RcvPruned",
        TcpExtOfoPruned = "OfoPruned",
        TcpExtOutOfWindowIcmps = "OutOfWindowIcmps",
        TcpExtLockDroppedIcmps = "LockDroppedIcmps",
        TcpExtArpFilter = "ArpFilter",
        /// Connections that finished TIME-WAIT normally.
        TcpExtTW = "TW",
        TcpExtTWRecycled = "TWRecycled",
        TcpExtTWKilled = "TWKilled",
        TcpExtPAWSActive = "PAWSActive",
        /// Segments dropped by the PAWS check (RFC 7323 section 5) in a synchronized state.
        TcpExtPAWSEstab = "PAWSEstab",
        TcpExtBeyondWindow = "BeyondWindow",
        TcpExtTSEcrRejected = "TSEcrRejected",
        TcpExtPAWSOldAck = "PAWSOldAck",
        TcpExtPAWSTimewait = "PAWSTimewait",
        /// Delayed ACKs sent by the delayed-ACK timer.
        TcpExtDelayedACKs = "DelayedACKs",
        TcpExtDelayedACKLocked = "DelayedACKLocked",
        /// Old data received again: our ACK was probably lost (a D-SACK is sent).
        TcpExtDelayedACKLost = "DelayedACKLost",
        /// Connection requests dropped because the accept queue was full.
        TcpExtListenOverflows = "ListenOverflows",
        /// Connection requests dropped at a listener, for any reason (includes ListenOverflows).
        TcpExtListenDrops = "ListenDrops",
        TcpExtTCPHPHits = "TCPHPHits",
        TcpExtTCPPureAcks = "TCPPureAcks",
        TcpExtTCPHPAcks = "TCPHPAcks",
        TcpExtTCPRenoRecovery = "TCPRenoRecovery",
        TcpExtTCPSackRecovery = "TCPSackRecovery",
        TcpExtTCPSACKReneging = "TCPSACKReneging",
        TcpExtTCPSACKReorder = "TCPSACKReorder",
        TcpExtTCPRenoReorder = "TCPRenoReorder",
        TcpExtTCPTSReorder = "TCPTSReorder",
        TcpExtTCPFullUndo = "TCPFullUndo",
        TcpExtTCPPartialUndo = "TCPPartialUndo",
        TcpExtTCPDSACKUndo = "TCPDSACKUndo",
        TcpExtTCPLossUndo = "TCPLossUndo",
        TcpExtTCPLostRetransmit = "TCPLostRetransmit",
        TcpExtTCPRenoFailures = "TCPRenoFailures",
        TcpExtTCPSackFailures = "TCPSackFailures",
        TcpExtTCPLossFailures = "TCPLossFailures",
        TcpExtTCPFastRetrans = "TCPFastRetrans",
        TcpExtTCPSlowStartRetrans = "TCPSlowStartRetrans",
        /// Retransmission timeouts (RTO fired) outside recovery.
        TcpExtTCPTimeouts = "TCPTimeouts",
        TcpExtTCPLossProbes = "TCPLossProbes",
        TcpExtTCPLossProbeRecovery = "TCPLossProbeRecovery",
        TcpExtTCPRenoRecoveryFail = "TCPRenoRecoveryFail",
        TcpExtTCPSackRecoveryFail = "TCPSackRecoveryFail",
        TcpExtTCPRcvCollapsed = "TCPRcvCollapsed",
        TcpExtTCPBacklogCoalesce = "TCPBacklogCoalesce",
        TcpExtTCPDSACKOldSent = "TCPDSACKOldSent",
        TcpExtTCPDSACKOfoSent = "TCPDSACKOfoSent",
        TcpExtTCPDSACKRecv = "TCPDSACKRecv",
        TcpExtTCPDSACKOfoRecv = "TCPDSACKOfoRecv",
        TcpExtTCPAbortOnData = "TCPAbortOnData",
        TcpExtTCPAbortOnClose = "TCPAbortOnClose",
        TcpExtTCPAbortOnMemory = "TCPAbortOnMemory",
        TcpExtTCPAbortOnTimeout = "TCPAbortOnTimeout",
        TcpExtTCPAbortOnLinger = "TCPAbortOnLinger",
        TcpExtTCPAbortFailed = "TCPAbortFailed",
        TcpExtTCPMemoryPressures = "TCPMemoryPressures",
        TcpExtTCPMemoryPressuresChrono = "TCPMemoryPressuresChrono",
        TcpExtTCPSACKDiscard = "TCPSACKDiscard",
        TcpExtTCPDSACKIgnoredOld = "TCPDSACKIgnoredOld",
        TcpExtTCPDSACKIgnoredNoUndo = "TCPDSACKIgnoredNoUndo",
        TcpExtTCPSpuriousRTOs = "TCPSpuriousRTOs",
        TcpExtTCPMD5NotFound = "TCPMD5NotFound",
        TcpExtTCPMD5Unexpected = "TCPMD5Unexpected",
        TcpExtTCPMD5Failure = "TCPMD5Failure",
        TcpExtTCPSackShifted = "TCPSackShifted",
        TcpExtTCPSackMerged = "TCPSackMerged",
        TcpExtTCPSackShiftFallback = "TCPSackShiftFallback",
        TcpExtTCPBacklogDrop = "TCPBacklogDrop",
        TcpExtPFMemallocDrop = "PFMemallocDrop",
        TcpExtTCPMinTTLDrop = "TCPMinTTLDrop",
        TcpExtTCPDeferAcceptDrop = "TCPDeferAcceptDrop",
        TcpExtIPReversePathFilter = "IPReversePathFilter",
        TcpExtTCPTimeWaitOverflow = "TCPTimeWaitOverflow",
        /// SYNs answered with a cookie because the SYN queue was full.
        TcpExtTCPReqQFullDoCookies = "TCPReqQFullDoCookies",
        /// SYNs dropped because the SYN queue was full and SYN cookies were off.
        TcpExtTCPReqQFullDrop = "TCPReqQFullDrop",
        TcpExtTCPRetransFail = "TCPRetransFail",
        TcpExtTCPRcvCoalesce = "TCPRcvCoalesce",
        /// Segments queued out of order.
        TcpExtTCPOFOQueue = "TCPOFOQueue",
        TcpExtTCPOFODrop = "TCPOFODrop",
        TcpExtTCPOFOMerge = "TCPOFOMerge",
        /// Challenge ACKs sent (RFC 5961).
        TcpExtTCPChallengeACK = "TCPChallengeACK",
        /// Challenge ACKs sent in answer to a SYN in a synchronized state (RFC 5961 section 4).
        TcpExtTCPSYNChallenge = "TCPSYNChallenge",
        TcpExtTCPFastOpenActive = "TCPFastOpenActive",
        TcpExtTCPFastOpenActiveFail = "TCPFastOpenActiveFail",
        TcpExtTCPFastOpenPassive = "TCPFastOpenPassive",
        TcpExtTCPFastOpenPassiveFail = "TCPFastOpenPassiveFail",
        TcpExtTCPFastOpenListenOverflow = "TCPFastOpenListenOverflow",
        TcpExtTCPFastOpenCookieReqd = "TCPFastOpenCookieReqd",
        TcpExtTCPFastOpenBlackhole = "TCPFastOpenBlackhole",
        TcpExtTCPSpuriousRtxHostQueues = "TCPSpuriousRtxHostQueues",
        TcpExtBusyPollRxPackets = "BusyPollRxPackets",
        TcpExtTCPAutoCorking = "TCPAutoCorking",
        TcpExtTCPFromZeroWindowAdv = "TCPFromZeroWindowAdv",
        TcpExtTCPToZeroWindowAdv = "TCPToZeroWindowAdv",
        TcpExtTCPWantZeroWindowAdv = "TCPWantZeroWindowAdv",
        TcpExtTCPSynRetrans = "TCPSynRetrans",
        /// Segments sent with new data (not retransmissions).
        TcpExtTCPOrigDataSent = "TCPOrigDataSent",
        TcpExtTCPHystartTrainDetect = "TCPHystartTrainDetect",
        TcpExtTCPHystartTrainCwnd = "TCPHystartTrainCwnd",
        TcpExtTCPHystartDelayDetect = "TCPHystartDelayDetect",
        TcpExtTCPHystartDelayCwnd = "TCPHystartDelayCwnd",
        TcpExtTCPACKSkippedSynRecv = "TCPACKSkippedSynRecv",
        TcpExtTCPACKSkippedPAWS = "TCPACKSkippedPAWS",
        TcpExtTCPACKSkippedSeq = "TCPACKSkippedSeq",
        TcpExtTCPACKSkippedFinWait2 = "TCPACKSkippedFinWait2",
        TcpExtTCPACKSkippedTimeWait = "TCPACKSkippedTimeWait",
        TcpExtTCPACKSkippedChallenge = "TCPACKSkippedChallenge",
        TcpExtTCPWinProbe = "TCPWinProbe",
        TcpExtTCPKeepAlive = "TCPKeepAlive",
        TcpExtTCPMTUPFail = "TCPMTUPFail",
        TcpExtTCPMTUPSuccess = "TCPMTUPSuccess",
        TcpExtTCPDelivered = "TCPDelivered",
        TcpExtTCPDeliveredCE = "TCPDeliveredCE",
        TcpExtTCPAckCompressed = "TCPAckCompressed",
        /// Segments dropped because our receive window was zero.
        TcpExtTCPZeroWindowDrop = "TCPZeroWindowDrop",
        TcpExtTCPRcvQDrop = "TCPRcvQDrop",
        TcpExtTCPWqueueTooBig = "TCPWqueueTooBig",
        TcpExtTCPFastOpenPassiveAltKey = "TCPFastOpenPassiveAltKey",
        TcpExtTcpTimeoutRehash = "TcpTimeoutRehash",
        TcpExtTcpDuplicateDataRehash = "TcpDuplicateDataRehash",
        TcpExtTCPDSACKRecvSegs = "TCPDSACKRecvSegs",
        TcpExtTCPDSACKIgnoredDubious = "TCPDSACKIgnoredDubious",
        TcpExtTCPMigrateReqSuccess = "TCPMigrateReqSuccess",
        TcpExtTCPMigrateReqFailure = "TCPMigrateReqFailure",
        TcpExtTCPPLBRehash = "TCPPLBRehash",
        TcpExtTCPAORequired = "TCPAORequired",
        TcpExtTCPAOBad = "TCPAOBad",
        TcpExtTCPAOKeyNotFound = "TCPAOKeyNotFound",
        TcpExtTCPAOGood = "TCPAOGood",
        TcpExtTCPAODroppedIcmps = "TCPAODroppedIcmps",
    }
    /// Linux's IP extensions (`snmp4_ipextstats_list`), 64-bit octet counts and ECN.
    IpExt in Netstat {
        /// Received datagrams dropped because no route matched.
        IpExtInNoRoutes = "InNoRoutes",
        /// Received datagrams shorter than their IP total length.
        IpExtInTruncatedPkts = "InTruncatedPkts",
        IpExtInMcastPkts = "InMcastPkts",
        IpExtOutMcastPkts = "OutMcastPkts",
        IpExtInBcastPkts = "InBcastPkts",
        IpExtOutBcastPkts = "OutBcastPkts",
        /// Octets received in IP datagrams (IP headers included).
        IpExtInOctets = "InOctets",
        /// Octets sent in IP datagrams (IP headers included).
        IpExtOutOctets = "OutOctets",
        IpExtInMcastOctets = "InMcastOctets",
        IpExtOutMcastOctets = "OutMcastOctets",
        IpExtInBcastOctets = "InBcastOctets",
        IpExtOutBcastOctets = "OutBcastOctets",
        /// Received datagrams with a bad IP header checksum.
        IpExtInCsumErrors = "InCsumErrors",
        /// Received datagrams with ECN field 00 (Not-ECT).
        IpExtInNoECTPkts = "InNoECTPkts",
        IpExtInECT1Pkts = "InECT1Pkts",
        IpExtInECT0Pkts = "InECT0Pkts",
        IpExtInCEPkts = "InCEPkts",
        /// Reassemblies abandoned because fragments overlapped.
        IpExtReasmOverlaps = "ReasmOverlaps",
    }
    /// IPv6, RFC 4293 `ipSystemStats` for IPv6 (Linux `snmp6_ipstats_list`), first in
    /// `/proc/net/snmp6`.
    Ip6 in Snmp6 {
        /// IPv6 packets received from the link, counted before any check (Linux `ip6_rcv_core`).
        Ip6InReceives = "InReceives",
        /// Packets discarded for a bad header: version, hop-by-hop, extension headers.
        Ip6InHdrErrors = "InHdrErrors",
        Ip6InTooBigErrors = "InTooBigErrors",
        Ip6InNoRoutes = "InNoRoutes",
        /// Packets discarded because the destination is not ours (we do not forward), or its
        /// source is multicast.
        Ip6InAddrErrors = "InAddrErrors",
        /// Packets for us whose next header we do not handle (ICMPv6 parameter problem sent).
        Ip6InUnknownProtos = "InUnknownProtos",
        /// Packets shorter than their Payload Length.
        Ip6InTruncatedPkts = "InTruncatedPkts",
        /// Packets received without error but discarded.
        Ip6InDiscards = "InDiscards",
        /// Packets handed to an upper layer (ICMPv6, UDP), after reassembly.
        Ip6InDelivers = "InDelivers",
        Ip6OutForwDatagrams = "OutForwDatagrams",
        /// Packets our upper layers handed to IPv6 for sending (NDP included).
        Ip6OutRequests = "OutRequests",
        /// Outgoing packets discarded without a problem in them (neighbour failure, full queue).
        Ip6OutDiscards = "OutDiscards",
        /// Outgoing packets with no route (no source address of the destination's scope).
        Ip6OutNoRoutes = "OutNoRoutes",
        /// Reassemblies abandoned because `ip6frag_time` passed.
        Ip6ReasmTimeout = "ReasmTimeout",
        /// Fragments received that needed reassembly.
        Ip6ReasmReqds = "ReasmReqds",
        /// Packets successfully reassembled.
        Ip6ReasmOKs = "ReasmOKs",
        /// Failures of reassembly (timeouts, overlaps, memory limit, bad fragments).
        Ip6ReasmFails = "ReasmFails",
        /// Packets successfully fragmented.
        Ip6FragOKs = "FragOKs",
        /// Packets that needed fragmenting but could not be.
        Ip6FragFails = "FragFails",
        /// Fragments created.
        Ip6FragCreates = "FragCreates",
        /// Multicast packets received (NDP to solicited-node and all-nodes groups).
        Ip6InMcastPkts = "InMcastPkts",
        /// Multicast packets sent (neighbour solicitations).
        Ip6OutMcastPkts = "OutMcastPkts",
        /// Octets received in IPv6 packets (headers included).
        Ip6InOctets = "InOctets",
        /// Octets sent in IPv6 packets (headers included).
        Ip6OutOctets = "OutOctets",
        Ip6InMcastOctets = "InMcastOctets",
        Ip6OutMcastOctets = "OutMcastOctets",
        Ip6InBcastOctets = "InBcastOctets",
        Ip6OutBcastOctets = "OutBcastOctets",
        /// Received packets with ECN field 00 (Not-ECT).
        Ip6InNoECTPkts = "InNoECTPkts",
        Ip6InECT1Pkts = "InECT1Pkts",
        Ip6InECT0Pkts = "InECT0Pkts",
        Ip6InCEPkts = "InCEPkts",
        /// Packets handed to the link layer (after fragmentation).
        Ip6OutTransmits = "OutTransmits",
    }
    /// ICMPv6, RFC 4293 `icmpStatsTable` for IPv6 (Linux `snmp6_icmp6_list`, then the named
    /// per-type lines of `icmp6type2name`, views of `Icmp6InType<N>`/`Icmp6OutType<N>`).
    Icmp6 in Snmp6 {
        /// ICMPv6 messages received, counted before the checksum check (Linux `icmpv6_rcv`).
        Icmp6InMsgs = "InMsgs",
        /// ICMPv6 messages received but found bad (checksum, length, NDP validity).
        Icmp6InErrors = "InErrors",
        /// ICMPv6 messages sent.
        Icmp6OutMsgs = "OutMsgs",
        /// ICMPv6 messages not sent (no route, full queue).
        Icmp6OutErrors = "OutErrors",
        /// ICMPv6 messages received with a bad checksum.
        Icmp6InCsumErrors = "InCsumErrors",
        /// ICMPv6 errors not sent because of the per-host limit (`net.ipv6.icmp.ratelimit`).
        Icmp6OutRateLimitHost = "OutRateLimitHost",
        Icmp6InDestUnreachs = "InDestUnreachs" => Kind::Icmp6MsgIn(1),
        Icmp6InPktTooBigs = "InPktTooBigs" => Kind::Icmp6MsgIn(2),
        Icmp6InTimeExcds = "InTimeExcds" => Kind::Icmp6MsgIn(3),
        Icmp6InParmProblems = "InParmProblems" => Kind::Icmp6MsgIn(4),
        Icmp6InEchos = "InEchos" => Kind::Icmp6MsgIn(128),
        Icmp6InEchoReplies = "InEchoReplies" => Kind::Icmp6MsgIn(129),
        Icmp6InGroupMembQueries = "InGroupMembQueries" => Kind::Icmp6MsgIn(130),
        Icmp6InGroupMembResponses = "InGroupMembResponses" => Kind::Icmp6MsgIn(131),
        Icmp6InGroupMembReductions = "InGroupMembReductions" => Kind::Icmp6MsgIn(132),
        Icmp6InRouterSolicits = "InRouterSolicits" => Kind::Icmp6MsgIn(133),
        Icmp6InRouterAdvertisements = "InRouterAdvertisements" => Kind::Icmp6MsgIn(134),
        Icmp6InNeighborSolicits = "InNeighborSolicits" => Kind::Icmp6MsgIn(135),
        Icmp6InNeighborAdvertisements = "InNeighborAdvertisements" => Kind::Icmp6MsgIn(136),
        Icmp6InRedirects = "InRedirects" => Kind::Icmp6MsgIn(137),
        Icmp6InMLDv2Reports = "InMLDv2Reports" => Kind::Icmp6MsgIn(143),
        Icmp6OutDestUnreachs = "OutDestUnreachs" => Kind::Icmp6MsgOut(1),
        Icmp6OutPktTooBigs = "OutPktTooBigs" => Kind::Icmp6MsgOut(2),
        Icmp6OutTimeExcds = "OutTimeExcds" => Kind::Icmp6MsgOut(3),
        Icmp6OutParmProblems = "OutParmProblems" => Kind::Icmp6MsgOut(4),
        Icmp6OutEchos = "OutEchos" => Kind::Icmp6MsgOut(128),
        Icmp6OutEchoReplies = "OutEchoReplies" => Kind::Icmp6MsgOut(129),
        Icmp6OutGroupMembQueries = "OutGroupMembQueries" => Kind::Icmp6MsgOut(130),
        Icmp6OutGroupMembResponses = "OutGroupMembResponses" => Kind::Icmp6MsgOut(131),
        Icmp6OutGroupMembReductions = "OutGroupMembReductions" => Kind::Icmp6MsgOut(132),
        Icmp6OutRouterSolicits = "OutRouterSolicits" => Kind::Icmp6MsgOut(133),
        Icmp6OutRouterAdvertisements = "OutRouterAdvertisements" => Kind::Icmp6MsgOut(134),
        Icmp6OutNeighborSolicits = "OutNeighborSolicits" => Kind::Icmp6MsgOut(135),
        Icmp6OutNeighborAdvertisements = "OutNeighborAdvertisements" => Kind::Icmp6MsgOut(136),
        Icmp6OutRedirects = "OutRedirects" => Kind::Icmp6MsgOut(137),
        Icmp6OutMLDv2Reports = "OutMLDv2Reports" => Kind::Icmp6MsgOut(143),
    }
    /// UDP over IPv6 (Linux `snmp6_udp6_list`, printed after Icmp6): the same fields and
    /// meanings as [`Table::Udp`], counted by the same code for datagrams over IPv6.
    Udp6 in Snmp6 {
        /// Datagrams over IPv6 read by the application.
        Udp6InDatagrams = "InDatagrams",
        /// Datagrams over IPv6 for a port with no socket (an ICMPv6 port unreachable is sent).
        Udp6NoPorts = "NoPorts",
        /// Datagrams over IPv6 received but not delivered for a reason other than no socket.
        Udp6InErrors = "InErrors",
        /// Datagrams over IPv6 handed to IPv6.
        Udp6OutDatagrams = "OutDatagrams",
        /// Datagrams over IPv6 dropped because the socket's receive buffer was full.
        Udp6RcvbufErrors = "RcvbufErrors",
        /// Datagrams over IPv6 not sent for lack of device queue space.
        Udp6SndbufErrors = "SndbufErrors",
        /// Datagrams over IPv6 with a bad or zero checksum (RFC 8200 §8.1).
        Udp6InCsumErrors = "InCsumErrors",
        /// Multicast datagrams no socket wanted (ustack joins no UDP groups: always 0).
        Udp6IgnoredMulti = "IgnoredMulti",
        /// Datagrams dropped because protocol memory was exhausted (no `udp_mem`: always 0).
        Udp6MemErrors = "MemErrors",
    }
}

impl Counter {
    /// The table the counter is printed in.
    #[inline]
    pub const fn table(self) -> Table {
        Counter::INFO[self as usize].table
    }

    /// The field name as Linux prints it, without the table: `"InReceives"`, `"TW"`.
    #[inline]
    pub const fn name(self) -> &'static str {
        Counter::INFO[self as usize].name
    }

    /// How the counter behaves (count, gauge, constant, IcmpMsg view).
    #[inline]
    pub const fn kind(self) -> Kind {
        Counter::INFO[self as usize].kind
    }

    /// The counter printed as `<table>: ... <name> ...`, e.g. `from_names("TcpExt", "TW")`.
    pub fn from_names(table: &str, name: &str) -> Option<Counter> {
        let table = Table::ALL.iter().find(|t| t.name() == table)?;
        table.counters().iter().copied().find(|c| c.name() == name)
    }
}

impl fmt::Display for Counter {
    /// `Table.Field`, e.g. `TcpExt.ListenOverflows`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.table().name(), self.name())
    }
}

/// IcmpMsg columns per header/value line pair: Linux's `PERLINE` in `icmpmsg_put`. With more
/// non-zero types than this, Linux prints several `IcmpMsg:` line pairs.
const ICMPMSG_PER_LINE: usize = 16;

/// The counters of one stack (or one shard of it): every [`Counter`], the IcmpMsg per-type
/// counts, and one count per [`DropReason`].
///
/// All updates are O(1) array writes; nothing allocates except the renderings.
#[derive(Clone, PartialEq, Eq)]
pub struct Mib {
    /// Indexed by `Counter as usize`. The slots of [`Kind::IcmpMsgIn`]/[`Kind::IcmpMsgOut`]
    /// counters are unused (always 0): those read `icmp_in`/`icmp_out`.
    counters: [u64; Counter::COUNT],
    /// IcmpMsg `InType<N>`, indexed by ICMP type (Linux `icmpmsg_statistics->mibs[N]`).
    icmp_in: [u64; 256],
    /// IcmpMsg `OutType<N>` (Linux `mibs[0x100 | N]`).
    icmp_out: [u64; 256],
    /// `Icmp6InType<N>`, indexed by ICMPv6 type (Linux `icmpv6msg_statistics->mibs[N]`).
    icmp6_in: [u64; 256],
    /// `Icmp6OutType<N>` (Linux `mibs[0x100 | N]`).
    icmp6_out: [u64; 256],
    /// Indexed by `DropReason as usize`.
    drops: [u64; DropReason::COUNT],
}

impl Default for Mib {
    fn default() -> Mib {
        Mib::new()
    }
}

impl Mib {
    /// All counts zero, constants at Linux's values: Ip Forwarding=2 (ustack does not forward),
    /// DefaultTTL=64, Tcp RtoAlgorithm=1, RtoMin=200, RtoMax=120000, MaxConn=-1. A stack
    /// configured otherwise (e.g. sysctl `ip_default_ttl`) sets the constant with
    /// [`set`](Mib::set).
    pub fn new() -> Mib {
        let mut mib = Mib {
            counters: [0; Counter::COUNT],
            icmp_in: [0; 256],
            icmp_out: [0; 256],
            icmp6_in: [0; 256],
            icmp6_out: [0; 256],
            drops: [0; DropReason::COUNT],
        };
        for &c in Counter::ALL {
            if let Kind::Constant(v) = c.kind() {
                mib.set_signed(c, v);
            }
        }
        mib
    }

    #[inline]
    fn slot(&self, c: Counter) -> &u64 {
        match c.kind() {
            Kind::IcmpMsgIn(ty) => &self.icmp_in[usize::from(ty)],
            Kind::IcmpMsgOut(ty) => &self.icmp_out[usize::from(ty)],
            Kind::Icmp6MsgIn(ty) => &self.icmp6_in[usize::from(ty)],
            Kind::Icmp6MsgOut(ty) => &self.icmp6_out[usize::from(ty)],
            Kind::Counter | Kind::Gauge | Kind::Constant(_) => &self.counters[c as usize],
        }
    }

    #[inline]
    fn slot_mut(&mut self, c: Counter) -> &mut u64 {
        match c.kind() {
            Kind::IcmpMsgIn(ty) => &mut self.icmp_in[usize::from(ty)],
            Kind::IcmpMsgOut(ty) => &mut self.icmp_out[usize::from(ty)],
            Kind::Icmp6MsgIn(ty) => &mut self.icmp6_in[usize::from(ty)],
            Kind::Icmp6MsgOut(ty) => &mut self.icmp6_out[usize::from(ty)],
            Kind::Counter | Kind::Gauge | Kind::Constant(_) => &mut self.counters[c as usize],
        }
    }

    /// Add one to `c`.
    #[inline]
    pub fn inc(&mut self, c: Counter) {
        self.add(c, 1);
    }

    /// Add `n` to `c` (e.g. octets to `IpExtInOctets`). Wraps like Linux's counters.
    #[inline]
    pub fn add(&mut self, c: Counter, n: u64) {
        let slot = self.slot_mut(c);
        *slot = slot.wrapping_add(n);
    }

    /// Subtract one from `c`: for gauges ([`Kind::Gauge`], `TcpCurrEstab`). Wraps, so a
    /// shard's gauge may read "negative" on its own; the sum over shards is right.
    #[inline]
    pub fn dec(&mut self, c: Counter) {
        let slot = self.slot_mut(c);
        *slot = slot.wrapping_sub(1);
    }

    /// Set `c` to `v` (constants, e.g. `IpDefaultTTL` from sysctl `ip_default_ttl`).
    #[inline]
    pub fn set(&mut self, c: Counter, v: u64) {
        *self.slot_mut(c) = v;
    }

    /// Set `c` to a signed value (`TcpMaxConn` = -1); stored as its two's complement.
    #[inline]
    pub fn set_signed(&mut self, c: Counter, v: i64) {
        self.set(c, u64::from_ne_bytes(v.to_ne_bytes()));
    }

    /// The value of `c` (a constant's two's complement: `TcpMaxConn` reads `u64::MAX`; see
    /// [`get_signed`](Mib::get_signed)).
    #[inline]
    pub fn get(&self, c: Counter) -> u64 {
        *self.slot(c)
    }

    /// The value of `c` read as signed (`TcpMaxConn` reads -1).
    #[inline]
    pub fn get_signed(&self, c: Counter) -> i64 {
        i64::from_ne_bytes(self.get(c).to_ne_bytes())
    }

    /// The per-type count of ICMP (`v6` false) or ICMPv6 messages, received or sent.
    #[inline]
    fn msg_slot(&mut self, v6: bool, out: bool, ty: u8) -> &mut u64 {
        let table = match (v6, out) {
            (false, false) => &mut self.icmp_in,
            (false, true) => &mut self.icmp_out,
            (true, false) => &mut self.icmp6_in,
            (true, true) => &mut self.icmp6_out,
        };
        &mut table[usize::from(ty)]
    }

    #[inline]
    fn bump_msg(&mut self, v6: bool, out: bool, ty: u8) {
        let slot = self.msg_slot(v6, out, ty);
        *slot = slot.wrapping_add(1);
    }

    /// Count one ICMP message of type `ty` received (IcmpMsg `InType<ty>`; for the types with an
    /// `Icmp In<Type>` column, that column too, since it is the same count). Linux
    /// `ICMPMSGIN_INC_STATS`. `IcmpInMsgs` is separate: bump it too.
    #[inline]
    pub fn icmp_in_type(&mut self, ty: u8) {
        self.bump_msg(false, false, ty);
    }

    /// Count one ICMP message of type `ty` sent (IcmpMsg `OutType<ty>`). Linux
    /// `ICMPMSGOUT_INC_STATS`. `IcmpOutMsgs` is separate: bump it too.
    #[inline]
    pub fn icmp_out_type(&mut self, ty: u8) {
        self.bump_msg(false, true, ty);
    }

    /// IcmpMsg `InType<ty>`.
    #[inline]
    pub fn icmp_in_count(&self, ty: u8) -> u64 {
        self.icmp_in[usize::from(ty)]
    }

    /// IcmpMsg `OutType<ty>`.
    #[inline]
    pub fn icmp_out_count(&self, ty: u8) -> u64 {
        self.icmp_out[usize::from(ty)]
    }

    /// Set IcmpMsg `InType<ty>` to `n` (restoring a snapshot; counting is
    /// [`icmp_in_type`](Mib::icmp_in_type)).
    pub fn set_icmp_in_count(&mut self, ty: u8, n: u64) {
        *self.msg_slot(false, false, ty) = n;
    }

    /// Set IcmpMsg `OutType<ty>` to `n`.
    pub fn set_icmp_out_count(&mut self, ty: u8, n: u64) {
        *self.msg_slot(false, true, ty) = n;
    }

    /// Count one ICMPv6 message of type `ty` received (`Icmp6InType<ty>`, and its named
    /// line if it has one). Linux `ICMP6MSGIN_INC_STATS`. `Icmp6InMsgs` is separate.
    #[inline]
    pub fn icmp6_in_type(&mut self, ty: u8) {
        self.bump_msg(true, false, ty);
    }

    /// Count one ICMPv6 message of type `ty` sent (`Icmp6OutType<ty>`). Linux
    /// `ICMP6MSGOUT_INC_STATS`. `Icmp6OutMsgs` is separate.
    #[inline]
    pub fn icmp6_out_type(&mut self, ty: u8) {
        self.bump_msg(true, true, ty);
    }

    /// `Icmp6InType<ty>`.
    #[inline]
    pub fn icmp6_in_count(&self, ty: u8) -> u64 {
        self.icmp6_in[usize::from(ty)]
    }

    /// `Icmp6OutType<ty>`.
    #[inline]
    pub fn icmp6_out_count(&self, ty: u8) -> u64 {
        self.icmp6_out[usize::from(ty)]
    }

    /// Count one dropped packet: bumps the reason's own drop count and every MIB counter the
    /// reason names ([`DropReason::counters`]).
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        let slot = &mut self.drops[reason as usize];
        *slot = slot.wrapping_add(1);
        for &c in reason.counters() {
            self.inc(c);
        }
    }

    /// Packets dropped for `reason`.
    #[inline]
    pub fn drops(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    /// Packets dropped for any reason.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().fold(0, |sum, &n| sum.wrapping_add(n))
    }

    /// Add `other`'s counts into `self`, for summing shards: counters, gauges, IcmpMsg and drop
    /// counts are summed; constants ([`Kind::Constant`]) take `other`'s value, since every
    /// shard has the same configuration (summing would double them). So
    /// `let mut total = Mib::new(); for s in shards { total.merge(s) }` is the stack's view.
    pub fn merge(&mut self, other: &Mib) {
        for &c in Counter::ALL {
            let i = c as usize;
            match c.kind() {
                Kind::Counter | Kind::Gauge => {
                    self.counters[i] = self.counters[i].wrapping_add(other.counters[i]);
                }
                Kind::Constant(_) => self.counters[i] = other.counters[i],
                // Summed with the IcmpMsg arrays below.
                Kind::IcmpMsgIn(_)
                | Kind::IcmpMsgOut(_)
                | Kind::Icmp6MsgIn(_)
                | Kind::Icmp6MsgOut(_) => {}
            }
        }
        for (mine, theirs) in self.icmp_in.iter_mut().zip(&other.icmp_in) {
            *mine = mine.wrapping_add(*theirs);
        }
        for (mine, theirs) in self.icmp_out.iter_mut().zip(&other.icmp_out) {
            *mine = mine.wrapping_add(*theirs);
        }
        for (mine, theirs) in self.icmp6_in.iter_mut().zip(&other.icmp6_in) {
            *mine = mine.wrapping_add(*theirs);
        }
        for (mine, theirs) in self.icmp6_out.iter_mut().zip(&other.icmp6_out) {
            *mine = mine.wrapping_add(*theirs);
        }
        for (mine, theirs) in self.drops.iter_mut().zip(&other.drops) {
            *mine = mine.wrapping_add(*theirs);
        }
    }

    /// The value of `c` as printed: constants signed, everything else unsigned.
    fn printed(&self, c: Counter) -> Printed {
        match c.kind() {
            Kind::Constant(_) => Printed::Signed(self.get_signed(c)),
            _ => Printed::Unsigned(self.get(c)),
        }
    }

    /// Append a table's header line and value line, as Linux's `snmp_seq_show_*` do.
    fn write_table(&self, out: &mut String, table: Table) {
        out.push_str(table.name());
        out.push(':');
        for c in table.counters() {
            out.push(' ');
            out.push_str(c.name());
        }
        out.push('\n');
        out.push_str(table.name());
        out.push(':');
        for &c in table.counters() {
            // Writing to a String cannot fail.
            let _ = write!(out, " {}", self.printed(c));
        }
        out.push('\n');
    }

    /// The non-zero IcmpMsg counts as (column name, count): every `InType<N>` in ascending N,
    /// then every `OutType<N>` (Linux walks `mibs[0..512]`, out types being `0x100 | N`).
    fn icmpmsg_columns(&self) -> impl Iterator<Item = (IcmpMsgColumn, u64)> + '_ {
        let ins = (0..=u8::MAX).map(|ty| (IcmpMsgColumn::In(ty), self.icmp_in_count(ty)));
        let outs = (0..=u8::MAX).map(|ty| (IcmpMsgColumn::Out(ty), self.icmp_out_count(ty)));
        ins.chain(outs).filter(|&(_, n)| n != 0)
    }

    /// Append the IcmpMsg lines exactly as Linux's `icmpmsg_put`: nothing when every count is
    /// zero, else header/value line pairs of at most 16 columns each.
    fn write_icmpmsg(&self, out: &mut String) {
        let columns: Vec<(IcmpMsgColumn, u64)> = self.icmpmsg_columns().collect();
        for chunk in columns.chunks(ICMPMSG_PER_LINE) {
            out.push_str("IcmpMsg:");
            for (column, _) in chunk {
                let _ = write!(out, " {column}");
            }
            out.push_str("\nIcmpMsg:");
            for (_, n) in chunk {
                let _ = write!(out, " {n}");
            }
            out.push('\n');
        }
    }

    /// The counters in the format of Linux's `/proc/net/snmp`, byte for byte: Ip, Icmp,
    /// IcmpMsg (only if some count is non-zero), Tcp, Udp, UdpLite; for each a header line
    /// (`Ip: Forwarding DefaultTTL ...`) and a value line (`Ip: 2 64 ...`).
    pub fn render_snmp(&self) -> String {
        let mut out = String::with_capacity(2048);
        for &table in Table::ALL.iter().filter(|t| t.file() == ProcFile::Snmp) {
            self.write_table(&mut out, table);
            if table == Table::Icmp {
                self.write_icmpmsg(&mut out);
            }
        }
        out
    }

    /// The counters in the format of Linux's `/proc/net/netstat`: TcpExt, then IpExt. Linux
    /// then prints `MPTcpExt`; ustack has no MPTCP and leaves that table out.
    pub fn render_netstat(&self) -> String {
        let mut out = String::with_capacity(4096);
        for &table in Table::ALL.iter().filter(|t| t.file() == ProcFile::Netstat) {
            self.write_table(&mut out, table);
        }
        out
    }

    /// The IPv6 counters in the format of Linux's `/proc/net/snmp6` (`snmp6_seq_show`):
    /// one `%-32s\t%lu` line per counter, the Ip6 table, then Icmp6's counters and named
    /// per-type lines, then an `Icmp6InType<N>`/`Icmp6OutType<N>` line per non-zero type.
    /// then Udp6. Linux goes on with UdpLite6; ustack has no UDP-Lite, so that table is
    /// left out.
    pub fn render_snmp6(&self) -> String {
        let mut out = String::with_capacity(4096);
        for &table in Table::ALL.iter().filter(|t| t.file() == ProcFile::Snmp6) {
            for &c in table.counters() {
                let name = format!("{}{}", table.name(), c.name());
                let _ = writeln!(out, "{name:<32}\t{}", self.printed(c));
            }
            if table == Table::Icmp6 {
                for (dir, counts) in [("In", &self.icmp6_in), ("Out", &self.icmp6_out)] {
                    for (ty, &n) in counts.iter().enumerate().filter(|(_, n)| **n != 0) {
                        let name = format!("Icmp6{dir}Type{ty}");
                        let _ = writeln!(out, "{name:<32}\t{n}");
                    }
                }
            }
        }
        out
    }

    /// One line per drop reason with a non-zero count, in [`DropReason::ALL`] order:
    /// `IP_CSUM 3`. Empty when nothing was dropped.
    pub fn render_drops(&self) -> String {
        let mut out = String::new();
        for &reason in DropReason::ALL {
            let n = self.drops(reason);
            if n != 0 {
                let _ = writeln!(out, "{} {n}", reason.name());
            }
        }
        out
    }

    /// Every table as a JSON object of field => value (constants signed: `"MaxConn": -1`),
    /// plus `"IcmpMsg"` (`{"InType8": 3}`, non-zero types only) and `"Drops"`
    /// (`{"IP_CSUM": 1}`, non-zero reasons only):
    /// `{"Ip": {"Forwarding": 2, ...}, "Icmp": {...}, "IcmpMsg": {...}, "Tcp": {...}, "Udp": {...},
    /// "UdpLite": {...}, "TcpExt": {...}, "IpExt": {...}, "Drops": {...}}`. With the `json`
    /// feature.
    #[cfg(feature = "json")]
    pub fn to_json(&self) -> Value {
        let mut root = Map::new();
        for &table in Table::ALL {
            let fields: Map<String, Value> = table
                .counters()
                .iter()
                .map(|&c| (c.name().to_owned(), self.printed(c).into()))
                .collect();
            root.insert(table.name().to_owned(), Value::Object(fields));
            if table == Table::Icmp {
                let msgs: Map<String, Value> = self
                    .icmpmsg_columns()
                    .map(|(column, n)| (column.to_string(), Value::from(n)))
                    .collect();
                root.insert("IcmpMsg".to_owned(), Value::Object(msgs));
            }
        }
        let drops: Map<String, Value> = DropReason::ALL
            .iter()
            .filter(|&&r| self.drops(r) != 0)
            .map(|&r| (r.name().to_owned(), Value::from(self.drops(r))))
            .collect();
        root.insert("Drops".to_owned(), Value::Object(drops));
        Value::Object(root)
    }
}

impl fmt::Debug for Mib {
    /// The non-zero values only (`Ip.InReceives: 3`, `IcmpMsg.InType8: 1`, `Drops.IP_CSUM: 1`):
    /// the full arrays are thousands of zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for &c in Counter::ALL {
            if self.get(c) != 0 {
                map.entry(&format_args!("{c}"), &format_args!("{}", self.printed(c)));
            }
        }
        for (column, n) in self.icmpmsg_columns() {
            map.entry(&format_args!("IcmpMsg.{column}"), &n);
        }
        for &r in DropReason::ALL {
            if self.drops(r) != 0 {
                map.entry(&format_args!("Drops.{}", r.name()), &self.drops(r));
            }
        }
        map.finish()
    }
}

/// A value as Linux prints it.
#[derive(Clone, Copy)]
enum Printed {
    Unsigned(u64),
    Signed(i64),
}

impl fmt::Display for Printed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Printed::Unsigned(n) => write!(f, "{n}"),
            Printed::Signed(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(feature = "json")]
impl From<Printed> for Value {
    fn from(p: Printed) -> Value {
        match p {
            Printed::Unsigned(n) => Value::from(n),
            Printed::Signed(n) => Value::from(n),
        }
    }
}

/// An IcmpMsg column: `InType<N>` or `OutType<N>`.
#[derive(Clone, Copy)]
enum IcmpMsgColumn {
    In(u8),
    Out(u8),
}

impl fmt::Display for IcmpMsgColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IcmpMsgColumn::In(ty) => write!(f, "InType{ty}"),
            IcmpMsgColumn::Out(ty) => write!(f, "OutType{ty}"),
        }
    }
}
