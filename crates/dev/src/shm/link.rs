//! Creating a link and handing side B's descriptors over: in this process, over a Unix
//! socket (`SCM_RIGHTS`), or by the name of an abstract Unix socket.

use core::mem::MaybeUninit;
use core::time::Duration;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;

use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use super::layout::{MAX_QUEUE_PAIRS, VERSION, read_header, validate_caps, write_header};
use super::{ShmConfig, ShmLayout, ShmPort, ShmSide, bad_data, bad_input, random_u64};
use crate::DeviceCaps;
use crate::sleep::timespec;
use crate::sys::mapping::Mapping;

// The hand-over message sent with the descriptors.
const HANDOVER_MAGIC: u64 = u64::from_le_bytes(*b"ustkfds\0");
const HANDOVER_LEN: usize = 24;
const MAX_FDS: usize = 1 + 2 * MAX_QUEUE_PAIRS;

/// What both sides' ports share: the mapping and the doorbells.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) map: Mapping,
    /// Doorbell of (queue `q`, side s) at `2q + (s == B)`.
    pub(super) bells: Vec<OwnedFd>,
    pub(super) layout: ShmLayout,
    pub(super) caps: DeviceCaps,
    pub(super) link_id: u64,
}

/// Creates shm links.
#[derive(Debug)]
pub struct ShmLink;

impl ShmLink {
    /// Creates a link: the region, side A's ports (one per queue pair, in queue order) and
    /// the [`ShmPeer`] descriptor side B attaches with. Errors: `InvalidInput` for a bad
    /// config; OS errors from `memfd_create`, `ftruncate`, `mmap`, `eventfd`.
    pub fn create(config: &ShmConfig) -> io::Result<(Vec<ShmPort>, ShmPeer)> {
        let layout = ShmLayout::new(config.queue_pairs, config.ring_size, config.slot_size)?;
        let caps = validate_caps(config.medium, config.mtu, layout.slot_size())?;
        let link_id = random_u64();
        let memfd = rustix::fs::memfd_create(
            format!("ustack-shm-{link_id:016x}"),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&memfd, layout.len() as u64)?;
        rustix::fs::fcntl_add_seals(
            &memfd,
            SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
        )?;
        let map = Mapping::map(memfd.as_fd(), Some(layout.len()))?;
        write_header(&map, &layout, &caps, link_id);
        let mut bells = Vec::with_capacity(2 * layout.queue_pairs());
        for _ in 0..2 * layout.queue_pairs() {
            bells.push(rustix::event::eventfd(
                0,
                EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
            )?);
        }
        let peer = ShmPeer {
            memfd,
            bells: bells
                .iter()
                .map(|b| b.try_clone())
                .collect::<io::Result<_>>()?,
            link_id,
        };
        let shared = Arc::new(Shared {
            map,
            bells,
            layout,
            caps,
            link_id,
        });
        Ok((ShmPort::all(&shared, ShmSide::A), peer))
    }

    /// Both ends in this process: side A's and side B's ports (tests, benchmarks).
    pub fn pair(config: &ShmConfig) -> io::Result<(Vec<ShmPort>, Vec<ShmPort>)> {
        let (a, peer) = ShmLink::create(config)?;
        Ok((a, peer.attach()?))
    }
}

/// Side B's share of a link, not yet mapped: the memfd and the doorbell eventfds. Attach
/// in this process with [`attach`](Self::attach), or pass to another process with
/// [`send`](Self::send) or [`offer`](Self::offer).
#[derive(Debug)]
pub struct ShmPeer {
    memfd: OwnedFd,
    bells: Vec<OwnedFd>,
    link_id: u64,
}

impl ShmPeer {
    /// The link's id (random, also in the memfd's name `ustack-shm-<id as 16 hex digits>`).
    pub const fn link_id(&self) -> u64 {
        self.link_id
    }

    /// The region's memfd.
    pub fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// Maps the region and returns side B's ports, one per queue pair in queue order.
    ///
    /// Trusts nothing the creator wrote: checks the seals, magic, version and geometry
    /// (limits, and that the layout it implies is exactly the memfd's size) and the number
    /// of doorbells. Errors: `InvalidData` for any mismatch; OS errors from `mmap`.
    pub fn attach(self) -> io::Result<Vec<ShmPort>> {
        let map = Mapping::map(self.memfd.as_fd(), None)?;
        let (layout, caps) = read_header(&map, self.link_id)?;
        if self.bells.len() != 2 * layout.queue_pairs() {
            return Err(bad_data("shm: wrong number of doorbells"));
        }
        for bell in &self.bells {
            // Ours to read without blocking whatever the sender set (O_NONBLOCK is on the
            // shared file description; the creator sets it too).
            rustix::io::ioctl_fionbio(bell, true)?;
        }
        let shared = Arc::new(Shared {
            map,
            bells: self.bells,
            layout,
            caps,
            link_id: self.link_id,
        });
        Ok(ShmPort::all(&shared, ShmSide::B))
    }

    /// Sends the descriptors over a connected Unix stream socket (`SCM_RIGHTS`), for
    /// [`ShmPeer::recv`] at the other end. This side's copies stay open until `self` drops.
    pub fn send<S: AsFd>(&self, socket: S) -> io::Result<()> {
        let mut msg = [0u8; HANDOVER_LEN];
        msg[0..8].copy_from_slice(&HANDOVER_MAGIC.to_le_bytes());
        msg[8..12].copy_from_slice(&VERSION.to_le_bytes());
        msg[12..16].copy_from_slice(&(1 + self.bells.len() as u32).to_le_bytes());
        msg[16..24].copy_from_slice(&self.link_id.to_le_bytes());
        let fds: Vec<BorrowedFd<'_>> = core::iter::once(self.memfd.as_fd())
            .chain(self.bells.iter().map(|b| b.as_fd()))
            .collect();
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(bad_input("shm: too many descriptors for one message"));
        }
        let sent = rustix::net::sendmsg(
            socket,
            &[IoSlice::new(&msg)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        if sent != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "shm: short hand-over send",
            ));
        }
        Ok(())
    }

    /// Receives a [`ShmPeer`] sent with [`ShmPeer::send`] on a connected Unix stream
    /// socket (blocking, or failing with `WouldBlock` on a socket's read timeout).
    /// Errors: `InvalidData` for anything but one well-formed hand-over message.
    pub fn recv<S: AsFd>(socket: S) -> io::Result<ShmPeer> {
        let mut msg = [0u8; HANDOVER_LEN];
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        // A signal to this thread (the bench's peers exiting) interrupts the wait: retried,
        // as std's blocking reads retry `EINTR`.
        let got = rustix::io::retry_on_intr(|| {
            rustix::net::recvmsg(
                &socket,
                &mut [IoSliceMut::new(&mut msg)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
        })?;
        // Take ownership of whatever arrived first, so it is closed on any error below.
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        let word = |r: core::ops::Range<usize>| -> u64 {
            msg[r]
                .iter()
                .rev()
                .fold(0u64, |acc, &b| acc << 8 | u64::from(b))
        };
        if got.flags.contains(ReturnFlags::CTRUNC)
            || got.bytes != HANDOVER_LEN
            || word(0..8) != HANDOVER_MAGIC
            || word(8..12) != u64::from(VERSION)
            || word(12..16) != fds.len() as u64
            || fds.len() < 3
            || fds.len() % 2 != 1
        {
            return Err(bad_data("shm: malformed hand-over message"));
        }
        let memfd = fds.remove(0);
        Ok(ShmPeer {
            memfd,
            bells: fds,
            link_id: word(16..24),
        })
    }

    /// Offers the descriptors on an abstract Unix socket with a fresh random name (see
    /// [`ShmOffer`]).
    pub fn offer(self) -> io::Result<ShmOffer> {
        let name = format!("ustack-shm-{:016x}-{:016x}", self.link_id, random_u64());
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        Ok(ShmOffer {
            listener,
            name,
            peer: self,
        })
    }

    /// Connects to an [`ShmOffer`] by name and receives its descriptors; gives up with
    /// `TimedOut` after `timeout`. Retries while the name is not bound yet.
    pub fn connect(name: &str, timeout: Duration) -> io::Result<ShmPeer> {
        let deadline = std::time::Instant::now() + timeout;
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let stream = loop {
            match UnixStream::connect_addr(&addr) {
                Ok(s) => break s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    if std::time::Instant::now() >= deadline {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "shm: no offer"));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        ShmPeer::recv(&stream)
    }
}

/// A [`ShmPeer`] waiting on an abstract Unix socket for the process that will be side B.
/// Give that process [`name`](Self::name) (e.g. in its argv or environment); it calls
/// [`ShmPeer::connect`], and [`hand_over`](Self::hand_over) accepts it.
#[derive(Debug)]
pub struct ShmOffer {
    listener: UnixListener,
    name: String,
    peer: ShmPeer,
}

impl ShmOffer {
    /// The abstract socket name to connect to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `timeout` for one connection from a process of the same user (checked
    /// with `SO_PEERCRED`; others are turned away and the wait goes on), sends it the
    /// descriptors, and closes the socket. Errors: `TimedOut`, or the OS error.
    pub fn hand_over(self, timeout: Duration) -> io::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        let me = rustix::process::geteuid();
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    if rustix::net::sockopt::socket_peercred(&stream)?.uid != me {
                        continue;
                    }
                    return self.peer.send(&stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "shm: no taker"));
                    }
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    match rustix::event::poll(&mut fds, Some(&timespec(left))) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
