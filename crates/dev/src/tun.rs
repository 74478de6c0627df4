//! The `tun` link: a Linux TUN interface, whose other end is the kernel's own IP stack.
//!
//! [`Tun::open`] opens `/dev/net/tun` once per queue and attaches each file to one
//! interface with `TUNSETIFF` and `IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE`: bare IP packets
//! ([`Medium::Ip`], no link-layer header and no packet-information prefix), one file per
//! queue so that each shard can own one ([`TunQueue`]). The kernel spreads the packets it
//! sends over the queues by flow; a packet written on any queue enters the kernel's stack.
//! The files are non-blocking: [`Device::recv`] is one `read(2)` (`None` on `EAGAIN`),
//! [`Device::send`] one `write(2)`; the runtime sleeps in `poll(2)` on
//! [`TunQueue::fd`] until it is readable or its next timer ([`TunQueue::wait`]).
//!
//! # The interface
//!
//! The interface is created when the first queue attaches and disappears with the last
//! queue's file (it is not made persistent). It is created in the network namespace of
//! the thread that opens it: the caller's, or the one named by [`TunConfig::netns`]
//! (a `/proc/<pid>/ns/net` or `/run/netns/<name>` file), which [`Tun::open`] enters with
//! `setns(2)` on a short-lived thread of its own, so no other thread changes namespace and
//! no interface name is ever taken in the root namespace. The files keep working from any
//! thread and namespace afterwards. The kernel side (address, routes, `ip link set up`)
//! is configured by whoever owns the namespace, with `ip`.
//!
//! The MTU is set (if [`TunConfig::mtu`] says so) and read once, at open: it becomes the
//! queues' [`DeviceCaps::mtu`]. Changing it later with `ip link set mtu` is not seen;
//! the kernel would then drop our larger packets or send us larger ones, which
//! [`Device::recv`] truncates to the caller's buffer and counts ([`TunStats::rx_truncated`]).
//!
//! # Later: virtio-net header and offloads
//!
//! `IFF_VNET_HDR` with `TUNSETOFFLOAD` (TSO4/TSO6/USO, checksum offload) would let the
//! kernel hand us 64 KiB super-segments and take ours, one system call for many MSS. It is
//! not done yet. The flags are built in one place ([`Tun::open`]'s `flags`), each queue knows
//! its caps, and a header length can be added to [`TunQueue`] (read into a scratch header,
//! then the packet) without changing the [`Device`] contract.

use core::time::Duration;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use ustack_obs::time::Instant;

use crate::netns::invalid;
use crate::shm::timespec;
use crate::sys::netif;
use crate::sys::tun as sys;
use crate::{Device, DeviceCaps, Medium};

/// The most queues a TUN interface takes (the kernel's `MAX_TAP_QUEUES`).
pub const MAX_QUEUES: usize = 256;

/// How to open a TUN interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunConfig {
    /// The interface's name: up to 15 bytes, no `/`, whitespace or NUL. A `%d` in it is
    /// replaced by the kernel with the lowest free number (`ustack%d` -> `ustack0`).
    pub name: String,
    /// How many queues (files) to open, 1 to [`MAX_QUEUES`].
    pub queues: usize,
    /// Set the interface MTU to this (68 to 65535) at open; `None` keeps the kernel's
    /// (1500 for a new TUN interface).
    pub mtu: Option<u32>,
    /// Create the interface in this network namespace (a `/proc/<pid>/ns/net` or
    /// `/run/netns/<name>` file) instead of the caller's.
    pub netns: Option<PathBuf>,
}

impl Default for TunConfig {
    fn default() -> Self {
        TunConfig {
            name: "ustack%d".to_owned(),
            queues: 1,
            mtu: None,
            netns: None,
        }
    }
}

impl TunConfig {
    /// The configuration with its values checked: `InvalidInput` naming the bad field.
    pub fn validate(&self) -> io::Result<()> {
        crate::netns::check_interface("tun", &self.name, self.queues, MAX_QUEUES)?;
        if let Some(mtu) = self.mtu
            && !(68..=65535).contains(&mtu)
        {
            return Err(invalid(format!("tun: MTU {mtu}: 68 to 65535")));
        }
        Ok(())
    }
}

/// An open TUN interface: its name, MTU and queues. Take the queues out with
/// [`into_queues`](Self::into_queues) to give one to each shard; the interface lives as
/// long as any of them.
#[derive(Debug)]
pub struct Tun {
    name: String,
    mtu: usize,
    queues: Vec<TunQueue>,
}

impl Tun {
    /// Creates (or attaches to) the TUN interface `config.name` with `config.queues`
    /// queues, in `config.netns` if given. Errors: `InvalidInput` for a bad config; the OS
    /// error otherwise, with what failed (`ENOENT` without `/dev/net/tun`, `EPERM` without
    /// `CAP_NET_ADMIN`, `EINVAL` if an existing interface of that name is not a
    /// multi-queue TUN, `EBUSY` if its queues are all taken).
    pub fn open(config: &TunConfig) -> io::Result<Tun> {
        config.validate()?;
        crate::netns::in_netns("tun", config.netns.as_deref(), || Tun::open_here(config))
    }

    /// [`open`](Self::open) in the calling thread's namespace.
    fn open_here(config: &TunConfig) -> io::Result<Tun> {
        let ctx = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("tun: {what} `{}`: {e}", config.name))
        };
        let flags = (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_MULTI_QUEUE) as libc::c_short;
        let (first, name) =
            sys::open_queue(&config.name, flags).map_err(|e| ctx("TUNSETIFF", e))?;
        let mut fds = vec![first];
        // Further queues attach to the name the kernel gave the first (`%d` resolved).
        for _ in 1..config.queues {
            let (fd, _) = sys::open_queue(&name, flags).map_err(|e| ctx("TUNSETIFF", e))?;
            fds.push(fd);
        }
        if let Some(mtu) = config.mtu {
            netif::set_mtu(&name, mtu).map_err(|e| ctx("setting the MTU of", e))?;
        }
        let mtu = netif::mtu(&name).map_err(|e| ctx("reading the MTU of", e))?;
        let caps = DeviceCaps {
            medium: Medium::Ip,
            mtu,
        };
        let queues = fds
            .into_iter()
            .enumerate()
            .map(|(index, fd)| TunQueue {
                fd,
                index,
                name: name.clone(),
                caps,
                stats: TunStats::default(),
            })
            .collect();
        Ok(Tun { name, mtu, queues })
    }

    /// The interface's name, as the kernel made it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface MTU read at open.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The queues, in order.
    pub fn queues(&self) -> &[TunQueue] {
        &self.queues
    }

    /// The queues, to hand out (one per shard).
    pub fn into_queues(self) -> Vec<TunQueue> {
        self.queues
    }
}

/// What a [`TunQueue`] has done, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunStats {
    /// Packets read.
    pub rx_packets: u64,
    /// Bytes read.
    pub rx_bytes: u64,
    /// Packets longer than the caller's buffer (truncated).
    pub rx_truncated: u64,
    /// Reads that failed with an error other than `EAGAIN`/`EINTR`.
    pub rx_errors: u64,
    /// Packets written.
    pub tx_packets: u64,
    /// Bytes written.
    pub tx_bytes: u64,
    /// Writes refused: the packet is larger than the MTU, or the kernel said no (`EIO`
    /// while the interface is down, `EINVAL` for a packet that is not IP, `EAGAIN`).
    pub tx_errors: u64,
    /// Times [`TunQueue::wait`] slept in `poll(2)`.
    pub sleeps: u64,
}

/// One queue of a TUN interface: a non-blocking file that carries bare IP packets.
#[derive(Debug)]
pub struct TunQueue {
    fd: OwnedFd,
    index: usize,
    name: String,
    caps: DeviceCaps,
    stats: TunStats,
}

impl TunQueue {
    /// The queue's file, for an event loop (readable: a packet is waiting).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Which queue of the interface this is (0-based, in opening order).
    pub fn queue(&self) -> usize {
        self.index
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters.
    pub fn stats(&self) -> &TunStats {
        &self.stats
    }

    /// Sleeps in `poll(2)` until a packet is waiting or `timeout` passes (`None`: no
    /// limit). Returns whether a packet is waiting. A signal ends the sleep early
    /// (returns `false`).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let ts = timeout.map(timespec);
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        self.stats.sleeps += 1;
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) => Ok(n > 0 && fds[0].revents().contains(PollFlags::IN)),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl Device for TunQueue {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn recv(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        loop {
            match rustix::io::read(&self.fd, &mut *buf) {
                Ok(n) => {
                    // Should the kernel report more than it copied (a packet longer than
                    // `buf`: the MTU changed behind our back), count it as truncated.
                    if n > buf.len() {
                        self.stats.rx_truncated += 1;
                    }
                    let n = n.min(buf.len());
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += n as u64;
                    return Some(n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return None,
                Err(_) => {
                    self.stats.rx_errors += 1;
                    return None;
                }
            }
        }
    }

    fn send(&mut self, _now: Instant, frame: &[u8]) -> bool {
        if frame.len() > self.caps.mtu {
            self.stats.tx_errors += 1;
            return false;
        }
        loop {
            match rustix::io::write(&self.fd, frame) {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                    return true;
                }
                Err(Errno::INTR) => {}
                Err(_) => {
                    self.stats.tx_errors += 1;
                    return false;
                }
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }
}
