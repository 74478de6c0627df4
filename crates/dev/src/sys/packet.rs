//! An `AF_PACKET` socket's system calls, for [`crate::packet`]: the socket, its
//! `SOL_PACKET` options (`PACKET_VERSION`, `PACKET_RX_RING`/`PACKET_TX_RING` with a
//! `struct tpacket_req3`, `PACKET_FANOUT`, ...), `bind(2)` to an interface with a
//! `struct sockaddr_ll`, and `PACKET_STATISTICS`. The rings themselves are mapped with
//! [`super::mapping::Mapping::map_socket`] and read and written only through it.
//!
//! rustix makes the socket and sends the transmit kick; it has no `sockaddr_ll` and no
//! `SOL_PACKET` options, so those are the `unsafe` calls here, each on a value owned by
//! the call, of the kernel's layout (libc's structs), with its exact size passed.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};

/// `TPACKET_V3` (`enum tpacket_versions`).
const TPACKET_V3: libc::c_int = 2;

/// A new `AF_PACKET`, `SOCK_RAW` socket (non-blocking, close-on-exec) that receives
/// nothing until it is bound ([`bind`] names the protocol).
pub(crate) fn socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::PACKET,
        SocketType::RAW,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}

/// `setsockopt(fd, SOL_PACKET, name, &value, sizeof value)` for an `int` option.
pub(crate) fn set_int(fd: BorrowedFd<'_>, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised `c_int` on our stack, and its exact size is
    // passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// `PACKET_VERSION`: `TPACKET_V3` rings (before the rings are set up).
pub(crate) fn set_v3(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(fd, libc::PACKET_VERSION, TPACKET_V3)
}

/// A ring request (`struct tpacket_req3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingReq {
    pub(crate) block_size: u32,
    pub(crate) block_nr: u32,
    pub(crate) frame_size: u32,
    pub(crate) frame_nr: u32,
    /// Receive only: how long (ms) the kernel fills a block before handing it over anyway.
    pub(crate) retire_blk_tov: u32,
}

/// `PACKET_RX_RING` (`tx == false`) or `PACKET_TX_RING` with `req`.
pub(crate) fn set_ring(fd: BorrowedFd<'_>, tx: bool, req: RingReq) -> io::Result<()> {
    let raw = libc::tpacket_req3 {
        tp_block_size: req.block_size,
        tp_block_nr: req.block_nr,
        tp_frame_size: req.frame_size,
        tp_frame_nr: req.frame_nr,
        tp_retire_blk_tov: req.retire_blk_tov,
        tp_sizeof_priv: 0,
        tp_feature_req_word: 0,
    };
    let name = if tx {
        libc::PACKET_TX_RING
    } else {
        libc::PACKET_RX_RING
    };
    // SAFETY: `raw` is a live, initialised `struct tpacket_req3` (libc's layout) on our
    // stack, and its exact size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            name,
            (&raw const raw).cast(),
            size_of::<libc::tpacket_req3>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// Binds `fd` to interface `ifindex` for frames of EtherType `protocol` (`ETH_P_ALL`:
/// every frame): from here on it receives them.
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    let ifindex = libc::c_int::try_from(ifindex)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?;
    let addr = libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    };
    // SAFETY: `addr` is a live, initialised `struct sockaddr_ll` on our stack and its exact
    // size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// `PACKET_ADD_MEMBERSHIP` with `PACKET_MR_ALLMULTI` on interface `ifindex`: the
/// interface passes every multicast frame (its `IFF_ALLMULTI` count raised, Linux
/// `packet_mc_add` -> `dev_set_allmulti`) for as long as `fd` is open. The stack's IPv6
/// addresses need their solicited-node groups (RFC 4861 §7.2.1), which the kernel, not
/// knowing the addresses, never puts in the interface's multicast filter.
pub(crate) fn all_multicast(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let ifindex = libc::c_int::try_from(ifindex)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?;
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex,
        mr_type: libc::PACKET_MR_ALLMULTI as libc::c_ushort,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    // SAFETY: `mreq` is a live, initialised `struct packet_mreq` (libc's layout) on our
    // stack, and its exact size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            (&raw const mreq).cast(),
            size_of::<libc::packet_mreq>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// Attaches (`SO_ATTACH_FILTER`) a classic BPF program that sorts a sharded link's frames:
/// `neighbour == true` keeps only neighbour resolution (ARP, and IPv6 neighbour discovery:
/// ICMPv6 types 133-137 right after the fixed header, RFC 4861 §4), `false` keeps everything
/// else. Attach before `bind`, so no frame slips past it. A frame too short for a load is
/// dropped by either (the kernel ends the program with 0).
pub(crate) fn filter_neighbour(fd: BorrowedFd<'_>, neighbour: bool) -> io::Result<()> {
    const LDH: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
    const LDB: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
    const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JGT: u16 = (libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K) as u16;
    const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let (keep, drop) = (u32::MAX, 0);
    let (yes, no) = if neighbour {
        (keep, drop)
    } else {
        (drop, keep)
    };
    // Jumps count from the next instruction: 8 is `yes`, 9 is `no`.
    let program = [
        op(LDH, 0, 0, 12),      // 0: EtherType
        op(JEQ, 6, 0, 0x0806),  // 1: ARP -> yes
        op(JEQ, 0, 6, 0x86dd),  // 2: not IPv6 -> no
        op(LDB, 0, 0, 14 + 6),  // 3: IPv6 next header
        op(JEQ, 0, 4, 58),      // 4: not ICMPv6 -> no
        op(LDB, 0, 0, 14 + 40), // 5: ICMPv6 type
        op(JGE, 0, 2, 133),     // 6: below Router Solicitation -> no
        op(JGT, 1, 0, 137),     // 7: above Redirect -> no, else yes
        op(RET, 0, 0, yes),     // 8
        op(RET, 0, 0, no),      // 9
    ];
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` is a live, initialised `struct sock_fprog` on our stack whose `filter`
    // points at `program`'s `len` instructions, alive for the call; its exact size is
    // passed. The kernel copies the program and only reads both.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// `PACKET_STATISTICS` for a `TPACKET_V3` socket: (frames received, frames dropped,
/// times the ring was frozen full) since the last call; the kernel resets them on read.
pub(crate) fn take_stats(fd: BorrowedFd<'_>) -> io::Result<(u32, u32, u32)> {
    let mut st = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `st` is a live, initialised `struct tpacket_stats_v3` on our stack and `len`
    // holds its exact size; the kernel writes at most `len` bytes into it and the length
    // it wrote into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&raw mut st).cast(),
            &raw mut len,
        )
    };
    check(rc)?;
    Ok((st.tp_packets, st.tp_drops, st.tp_freeze_q_cnt))
}

/// Receives one frame from a ringless packet socket into `buf` without waiting: its
/// length (truncated to `buf`), or `None` if nothing is waiting or on an error.
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Option<usize> {
    loop {
        match rustix::net::recv(fd, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((n, _)) => return Some(n.min(buf.len())),
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

/// Asks the kernel to transmit every frame of the TX ring marked `TP_STATUS_SEND_REQUEST`
/// (a zero-length `send`, not waiting for them to go: `MSG_DONTWAIT`). `EINTR` is
/// retried; `EAGAIN`/`ENOBUFS` (the device is busy) leave the frames marked for the
/// next kick and are not errors.
pub(crate) fn kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        match rustix::net::send(fd.as_fd(), &[], SendFlags::DONTWAIT) {
            Ok(_) | Err(Errno::AGAIN) | Err(Errno::NOBUFS) => return Ok(()),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
