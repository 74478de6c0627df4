//! Socket options under their Linux names and values: which `(level, optname)` is which
//! option, how its value is laid out, and Linux's `struct tcp_info` filled from the
//! stack's [`TcpInfo`].

use core::time::Duration;

use ustack_stack::TcpInfo;
use ustack_stack::tcp::State;

use crate::error::{Error, Result};

/// An option the C API knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    /// `SO_REUSEADDR`.
    ReuseAddr,
    /// `SO_REUSEPORT` (a listener is on every shard already).
    ReusePort,
    /// `SO_ERROR`: the pending error, reported and cleared.
    Error,
    /// `SO_TYPE`.
    Type,
    /// `SO_DOMAIN`.
    Domain,
    /// `SO_PROTOCOL`.
    Protocol,
    /// `SO_ACCEPTCONN`.
    AcceptConn,
    /// `SO_RCVBUF`.
    RcvBuf,
    /// `SO_SNDBUF`.
    SndBuf,
    /// `SO_KEEPALIVE`.
    KeepAlive,
    /// `SO_LINGER` (`struct linger`).
    Linger,
    /// `SO_RCVTIMEO` (`struct timeval`).
    RcvTimeo,
    /// `SO_SNDTIMEO` (`struct timeval`).
    SndTimeo,
    /// `TCP_NODELAY`.
    NoDelay,
    /// `TCP_MAXSEG`.
    MaxSeg,
    /// `TCP_KEEPIDLE` (default `net.ipv4.tcp_keepalive_time`).
    KeepIdle,
    /// `TCP_KEEPINTVL` (default `net.ipv4.tcp_keepalive_intvl`).
    KeepIntvl,
    /// `TCP_KEEPCNT` (default `net.ipv4.tcp_keepalive_probes`).
    KeepCnt,
    /// `TCP_CORK`.
    Cork,
    /// `TCP_INFO` (`struct tcp_info`, read only).
    Info,
    /// `IPV6_V6ONLY` (an `AF_INET6` socket, before `bind`).
    V6Only,
    /// `IPV6_UNICAST_HOPS` (read only here: `net.ipv6.conf.default.hop_limit`).
    UnicastHops,
}

impl Opt {
    /// The option at `(level, name)`: `ENOPROTOOPT` for one ustack does not have.
    pub fn lookup(level: i32, name: i32) -> Result<Opt> {
        let o = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => Opt::ReuseAddr,
            (libc::SOL_SOCKET, libc::SO_REUSEPORT) => Opt::ReusePort,
            (libc::SOL_SOCKET, libc::SO_ERROR) => Opt::Error,
            (libc::SOL_SOCKET, libc::SO_TYPE) => Opt::Type,
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => Opt::Domain,
            (libc::SOL_SOCKET, libc::SO_PROTOCOL) => Opt::Protocol,
            (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => Opt::AcceptConn,
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => Opt::RcvBuf,
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => Opt::SndBuf,
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => Opt::KeepAlive,
            (libc::SOL_SOCKET, libc::SO_LINGER) => Opt::Linger,
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => Opt::RcvTimeo,
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => Opt::SndTimeo,
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) => Opt::NoDelay,
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => Opt::MaxSeg,
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => Opt::KeepIdle,
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => Opt::KeepIntvl,
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => Opt::KeepCnt,
            (libc::IPPROTO_TCP, libc::TCP_CORK) => Opt::Cork,
            (libc::IPPROTO_TCP, libc::TCP_INFO) => Opt::Info,
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => Opt::V6Only,
            (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS) => Opt::UnicastHops,
            _ => {
                return Err(Error::new(
                    libc::ENOPROTOOPT,
                    format!("option level {level} name {name}: ustack does not have it"),
                ));
            }
        };
        Ok(o)
    }

    /// The stack's per-socket option this is, if it is one kept beside the TCB
    /// ([`ustack_stack::TcpOpt`]).
    pub fn tcp_opt(self) -> Option<ustack_stack::TcpOpt> {
        use ustack_stack::TcpOpt;
        Some(match self {
            Opt::MaxSeg => TcpOpt::MaxSeg,
            Opt::KeepIdle => TcpOpt::KeepIdle,
            Opt::KeepIntvl => TcpOpt::KeepIntvl,
            Opt::KeepCnt => TcpOpt::KeepCnt,
            _ => return None,
        })
    }

    /// Whether the option is TCP's (`IPPROTO_TCP`): `EOPNOTSUPP` on a UDP socket.
    pub fn is_tcp(self) -> bool {
        matches!(
            self,
            Opt::NoDelay
                | Opt::MaxSeg
                | Opt::KeepIdle
                | Opt::KeepIntvl
                | Opt::KeepCnt
                | Opt::Cork
                | Opt::Info
        )
    }
}

/// An `int` option value (`EINVAL` if `optlen` is under 4, as Linux's `sock_setsockopt`).
pub fn int(v: &[u8]) -> Result<i32> {
    match v.get(..4) {
        Some(b) => Ok(i32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
        None => Err(Error::new(libc::EINVAL, "option value shorter than an int")),
    }
}

/// `struct linger { int l_onoff; int l_linger; }` as `Some(seconds)` when on.
pub fn linger(v: &[u8]) -> Result<Option<Duration>> {
    if v.len() < 8 {
        return Err(Error::new(libc::EINVAL, "SO_LINGER wants a struct linger"));
    }
    let on = int(&v[..4])?;
    let secs = int(&v[4..8])?;
    Ok((on != 0).then(|| Duration::from_secs(u64::try_from(secs).unwrap_or(0))))
}

/// The bytes of `struct linger`.
pub fn linger_bytes(l: Option<Duration>) -> Vec<u8> {
    let (on, secs) = match l {
        Some(d) => (1i32, i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
        None => (0, 0),
    };
    [on.to_ne_bytes(), secs.to_ne_bytes()].concat()
}

/// `struct timeval { long tv_sec; long tv_usec; }` (64-bit) as a timeout: zero is none.
/// `EDOM` for a `tv_usec` out of range, as Linux's `sock_set_timeout`.
pub fn timeval(v: &[u8]) -> Result<Option<Duration>> {
    if v.len() < 16 {
        return Err(Error::new(libc::EINVAL, "want a struct timeval"));
    }
    let sec = i64::from_ne_bytes(v[..8].try_into().unwrap_or_default());
    let usec = i64::from_ne_bytes(v[8..16].try_into().unwrap_or_default());
    if !(0..1_000_000).contains(&usec) {
        return Err(Error::new(libc::EDOM, "tv_usec out of range"));
    }
    if sec < 0 || (sec == 0 && usec == 0) {
        // Linux: a negative time is "no timeout" too (sock_set_timeout).
        return Ok(None);
    }
    Ok(Some(
        Duration::from_secs(sec.unsigned_abs()) + Duration::from_micros(usec.unsigned_abs()),
    ))
}

/// The bytes of `struct timeval` for a timeout (zero: none).
pub fn timeval_bytes(t: Option<Duration>) -> Vec<u8> {
    let (s, us) = t.map_or((0, 0), |d| {
        (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            i64::from(d.subsec_micros()),
        )
    });
    [s.to_ne_bytes(), us.to_ne_bytes()].concat()
}

/// Linux's `TCP_*` state numbers (include/net/tcp_states.h), as `tcpi_state` has them.
pub fn linux_state(s: State) -> u8 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

/// How many bytes of Linux's `struct tcp_info` we fill: up to and including
/// `tcpi_rcv_wnd` (Linux 6.x's layout, include/uapi/linux/tcp.h); the rest of a larger
/// caller buffer is zero.
pub const TCP_INFO_LEN: usize = 236;

/// `tcpi_options` bits (include/uapi/linux/tcp.h).
const TCPI_OPT_TIMESTAMPS: u8 = 1;
const TCPI_OPT_SACK: u8 = 2;
const TCPI_OPT_WSCALE: u8 = 4;

/// Linux's `struct tcp_info` (Linux: `tcp_get_info`) from the stack's [`TcpInfo`]: the
/// fields ustack keeps; the others (pacing, delivery, byte counters ...) are zero.
pub fn tcp_info_bytes(i: &TcpInfo) -> [u8; TCP_INFO_LEN] {
    let mut b = [0u8; TCP_INFO_LEN];
    let put32 = |b: &mut [u8; TCP_INFO_LEN], at: usize, v: u32| {
        b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    };
    let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
    let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    b[0] = linux_state(i.state); // tcpi_state
    b[2] = i.retransmits; // tcpi_retransmits
    b[4] = i.retransmits; // tcpi_backoff
    let mut options = 0;
    if i.timestamps {
        options |= TCPI_OPT_TIMESTAMPS;
    }
    if i.sack {
        options |= TCPI_OPT_SACK;
    }
    if let Some((snd, rcv)) = i.wscale {
        options |= TCPI_OPT_WSCALE;
        // tcpi_snd_wscale : 4, tcpi_rcv_wscale : 4 (low bits first on x86/arm LE).
        b[6] = (snd & 0xf) | ((rcv & 0xf) << 4);
    }
    b[5] = options;
    put32(&mut b, 8, us(i.rto)); // tcpi_rto
    put32(&mut b, 16, u32::from(i.mss)); // tcpi_snd_mss
    put32(&mut b, 20, u32::from(i.mss)); // tcpi_rcv_mss
    put32(&mut b, 24, i.unacked); // tcpi_unacked
    put32(&mut b, 68, i.srtt.map_or(0, us)); // tcpi_rtt
    put32(&mut b, 76, i.ssthresh); // tcpi_snd_ssthresh
    put32(&mut b, 80, i.cwnd); // tcpi_snd_cwnd
    put32(&mut b, 84, u32::from(i.mss)); // tcpi_advmss
    put32(&mut b, 144, sat(i.send_q)); // tcpi_notsent_bytes (queued, not sent or acked)
    put32(&mut b, 228, i.snd_wnd); // tcpi_snd_wnd
    put32(&mut b, 232, i.rcv_wnd); // tcpi_rcv_wnd
    b
}

/// `struct tcp_info` of a socket with no connection (a listener: `LISTEN`; a fresh
/// socket: `CLOSE`): only the state is set.
pub fn tcp_info_state_only(state: State) -> [u8; TCP_INFO_LEN] {
    let mut b = [0u8; TCP_INFO_LEN];
    b[0] = linux_state(state);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, SocketAddrV4};

    #[test]
    fn names_and_values_are_linuxs() {
        assert_eq!(Opt::lookup(1, 4), Ok(Opt::Error)); // SOL_SOCKET, SO_ERROR
        assert_eq!(Opt::lookup(6, 1), Ok(Opt::NoDelay)); // IPPROTO_TCP, TCP_NODELAY
        assert_eq!(Opt::lookup(6, 11), Ok(Opt::Info)); // TCP_INFO
        assert_eq!(Opt::lookup(1, 13), Ok(Opt::Linger));
        assert_eq!(
            Opt::lookup(6, 13 /* TCP_CONGESTION */).map_err(|e| e.errno),
            Err(libc::ENOPROTOOPT)
        );
        assert_eq!(Opt::lookup(0, 1).map_err(|e| e.errno), Err(92));
        assert!(Opt::Info.is_tcp() && !Opt::SndBuf.is_tcp());
    }

    #[test]
    fn values() {
        assert_eq!(int(&7i32.to_ne_bytes()), Ok(7));
        assert_eq!(int(&[1, 0]).map_err(|e| e.errno), Err(libc::EINVAL));
        let l = linger_bytes(Some(Duration::from_secs(3)));
        assert_eq!(linger(&l), Ok(Some(Duration::from_secs(3))));
        assert_eq!(linger(&linger_bytes(None)), Ok(None));
        let t = timeval_bytes(Some(Duration::from_millis(1500)));
        assert_eq!(timeval(&t), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(timeval(&timeval_bytes(None)), Ok(None));
        let bad = [0i64.to_ne_bytes(), 2_000_000i64.to_ne_bytes()].concat();
        assert_eq!(timeval(&bad).map_err(|e| e.errno), Err(libc::EDOM));
    }

    #[test]
    fn tcp_info_at_linuxs_offsets() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1);
        let i = TcpInfo {
            state: State::Established,
            local: a.into(),
            remote: a.into(),
            recv_q: 0,
            send_q: 5,
            mss: 1460,
            cwnd: 10,
            ssthresh: 0x7fff_ffff,
            srtt: Some(Duration::from_micros(250)),
            rto: Duration::from_millis(201),
            snd_wnd: 65535,
            rcv_wnd: 64240,
            retransmits: 0,
            unacked: 2,
            sack: true,
            timestamps: true,
            wscale: Some((7, 9)),
        };
        let b = tcp_info_bytes(&i);
        let u32_at = |at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!(b[0], 1);
        assert_eq!(b[5], TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK | TCPI_OPT_WSCALE);
        assert_eq!(b[6], 7 | (9 << 4));
        assert_eq!(u32_at(8), 201_000);
        assert_eq!(u32_at(16), 1460);
        assert_eq!(u32_at(24), 2);
        assert_eq!(u32_at(68), 250);
        assert_eq!(u32_at(80), 10);
        assert_eq!(u32_at(228), 65535);
        assert_eq!(u32_at(232), 64240);
        // libc's struct tcp_info (glibc's layout) agrees on the offsets we fill.
        assert_eq!(core::mem::offset_of!(libc::tcp_info, tcpi_snd_cwnd), 80);
        assert_eq!(core::mem::offset_of!(libc::tcp_info, tcpi_rtt), 68);
        assert_eq!(tcp_info_state_only(State::Listen)[0], 10);
    }
}
