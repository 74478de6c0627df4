//! The io_uring baseline servers (the FFI module of this crate: every `unsafe` block of the
//! io_uring submissions is here).
//!
//! One thread, one ring, sleeping in `io_uring_enter` until a completion arrives, as an
//! io_uring server is deployed:
//!
//! - TCP: one **multishot accept** (`IORING_ACCEPT_MULTISHOT`, Linux 5.19) on the listening
//!   socket; on each connection a **multishot receive** (`IORING_RECV_MULTISHOT`, Linux 6.0)
//!   into **provided buffers** (`IORING_OP_PROVIDE_BUFFERS`, a group of [`BUFS`] buffers of
//!   [`BUF`] bytes; each buffer goes back to the kernel as soon as its bytes are copied out,
//!   its completion skipped with `IOSQE_CQE_SKIP_SUCCESS`); the echo goes out with
//!   `IORING_OP_SEND`, one send in flight per connection (the bytes that arrive meanwhile
//!   queue behind it, so they leave in order); a connection closes with `IORING_OP_CLOSE`.
//! - [`UringProto::ReplyClose`] (cps): a single-shot receive per connection (a multishot
//!   one would hold a reference to the socket past its close), the reply sent once the
//!   request is whole, then the close: the server closes first.
//! - UDP echo: one **multishot `recvmsg`** (`IORING_OP_RECVMSG` with
//!   `IORING_RECV_MULTISHOT`) into the provided buffers, each datagram sent back with
//!   `IORING_OP_SEND` to its source address.
//!
//! [`available`] says whether this kernel offers all of that (`io_uring_setup` may be
//! disabled by `kernel.io_uring_disabled`, or refused in a container).

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use io_uring::{IoUring, Probe, cqueue, opcode, squeue, types};
use rustix::event::{EventfdFlags, eventfd};

/// Provided buffers in the group.
pub const BUFS: u16 = 1024;
/// Bytes per provided buffer.
pub const BUF: usize = 2048;
/// The group id of the provided buffers.
const BGID: u16 = 7;
/// Submission queue entries.
const ENTRIES: u32 = 1024;

const TAG_ACCEPT: u64 = 1;
const TAG_RECV: u64 = 2;
const TAG_SEND: u64 = 3;
const TAG_WAKE: u64 = 4;
const TAG_PROVIDE: u64 = 5;
const TAG_CLOSE: u64 = 6;
const TAG_UDP_SEND: u64 = 7;

fn ud(tag: u64, index: usize) -> u64 {
    (tag << 56) | index as u64
}

fn tag_of(user_data: u64) -> (u64, usize) {
    (user_data >> 56, (user_data & 0xffff_ffff) as usize)
}

/// What an io_uring server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UringProto {
    /// TCP echo: every byte received is sent back.
    Echo,
    /// TCP: read one `size`-byte request, send it back, close first (an HTTP/1.0 server).
    ReplyClose {
        /// Bytes per request.
        size: usize,
    },
    /// UDP echo: every datagram back to its sender.
    UdpEcho,
}

/// Whether this kernel offers what the io_uring servers use (a ring, multishot accept and
/// receive, provided buffers, send, close); why not, if it does not.
pub fn available() -> Result<(), String> {
    let ring = IoUring::new(8).map_err(|e| format!("io_uring_setup failed: {e}"))?;
    let mut probe = Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("IORING_REGISTER_PROBE failed: {e}"))?;
    for (code, name) in [
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::RecvMsgMulti::CODE, "recvmsg"),
        (opcode::ProvideBuffers::CODE, "provide_buffers"),
        (opcode::Send::CODE, "send"),
        (opcode::Close::CODE, "close"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("the kernel's io_uring has no IORING_OP_{name}"));
        }
    }
    // Multishot receive came in Linux 6.0: older kernels have the opcodes without it.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let mut v = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (major, _minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    if major < 6 {
        return Err(format!(
            "Linux {release} has no multishot receive (6.0 and later)"
        ));
    }
    Ok(())
}

/// A running io_uring server: one thread, one ring. Dropping it stops it.
#[derive(Debug)]
pub struct UringServer {
    local_addr: SocketAddr,
    wake: Arc<OwnedFd>,
    accepted: Arc<AtomicU64>,
    completions: Arc<AtomicU64>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl UringServer {
    /// Open the socket on `addr` (non-blocking, `SO_REUSEPORT`, listening at somaxconn for
    /// TCP) and start the ring's thread, pinned to `cpu` if given.
    pub fn start(proto: UringProto, addr: SocketAddr, cpu: Option<usize>) -> io::Result<Self> {
        let p = match proto {
            UringProto::UdpEcho => crate::Proto::UdpEcho,
            _ => crate::Proto::Echo,
        };
        let socket = crate::open_socket(p, addr, crate::somaxconn())?;
        let local_addr = crate::local_addr_of(&socket)?;
        let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC)?);
        let accepted = Arc::new(AtomicU64::new(0));
        let completions = Arc::new(AtomicU64::new(0));
        let (w, a, c) = (
            Arc::clone(&wake),
            Arc::clone(&accepted),
            Arc::clone(&completions),
        );
        let thread = std::thread::Builder::new()
            .name("baseline-uring".into())
            .spawn(move || {
                if let Some(cpu) = cpu {
                    crate::pin_current_thread(cpu)?;
                }
                Ring::new(proto, socket, w, a, c)?.run()
            })?;
        Ok(UringServer {
            local_addr,
            wake,
            accepted,
            completions,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Completions the ring has reaped so far (every accept, receive, send, close).
    pub fn completions(&self) -> u64 {
        self.completions.load(Ordering::Relaxed)
    }

    /// Stop the thread and close everything; the error it stopped with, if any.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
        thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the io_uring server thread panicked")))
    }
}

impl Drop for UringServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// One TCP connection of the ring.
#[derive(Debug, Default)]
struct Conn {
    fd: RawFd,
    /// Bytes whose send is in flight (not touched until it completes).
    inflight: Vec<u8>,
    /// Bytes arrived while a send was in flight.
    queued: Vec<u8>,
    recv_armed: bool,
    sending: bool,
    /// The peer closed, or the reply is whole (reply-close): close once the sends are done.
    done: bool,
    /// reply-close: request bytes received so far.
    got: usize,
}

/// A UDP echo waiting for its send: the datagram and where it goes (boxed: the kernel
/// reads both until the send completes).
struct UdpSlot {
    data: Vec<u8>,
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
}

struct Ring {
    // Dropped first: the kernel stops using the buffers below before they are freed.
    ring: IoUring,
    proto: UringProto,
    socket: OwnedFd,
    wake: Arc<OwnedFd>,
    accepted: Arc<AtomicU64>,
    completions: Arc<AtomicU64>,
    bufs: Vec<u8>,
    wake_buf: Box<[u8; 8]>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    udp_slots: Vec<Option<Box<UdpSlot>>>,
    free_udp: Vec<usize>,
    msghdr: Box<libc::msghdr>,
    backlog: VecDeque<squeue::Entry>,
}

impl Ring {
    fn new(
        proto: UringProto,
        socket: OwnedFd,
        wake: Arc<OwnedFd>,
        accepted: Arc<AtomicU64>,
        completions: Arc<AtomicU64>,
    ) -> io::Result<Ring> {
        // SAFETY: an all-zero msghdr is a valid value (null pointers, zero lengths).
        let mut msghdr: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        msghdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let mut r = Ring {
            ring: IoUring::new(ENTRIES)?,
            proto,
            socket,
            wake,
            accepted,
            completions,
            bufs: vec![0; usize::from(BUFS) * BUF],
            wake_buf: Box::new([0; 8]),
            conns: Vec::new(),
            free: Vec::new(),
            udp_slots: Vec::new(),
            free_udp: Vec::new(),
            msghdr,
            backlog: VecDeque::new(),
        };
        let all = opcode::ProvideBuffers::new(r.bufs.as_mut_ptr(), BUF as i32, BUFS, BGID, 0)
            .build()
            .user_data(ud(TAG_PROVIDE, 0));
        r.push(all);
        r.arm_wake();
        r.arm_socket();
        Ok(r)
    }

    /// Queue an entry (submitted at the next `submit_and_wait`).
    fn push(&mut self, e: squeue::Entry) {
        self.backlog.push_back(e);
    }

    /// Move what is queued into the submission ring, as much as fits.
    fn flush(&mut self) -> io::Result<()> {
        loop {
            {
                let mut sq = self.ring.submission();
                while let Some(e) = self.backlog.front() {
                    // SAFETY: every buffer an entry names (the provided buffers, a
                    // connection's `inflight`, a UDP slot, `msghdr`, `wake_buf`) lives in
                    // `self` and is not touched or freed until that entry's completion (or
                    // until the ring is dropped, which is first).
                    if unsafe { sq.push(e) }.is_err() {
                        break;
                    }
                    self.backlog.pop_front();
                }
            }
            if self.backlog.is_empty() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn arm_wake(&mut self) {
        let fd = types::Fd(self.wake.as_raw_fd());
        let e = opcode::Read::new(fd, self.wake_buf.as_mut_ptr(), 8)
            .build()
            .user_data(ud(TAG_WAKE, 0));
        self.push(e);
    }

    fn arm_socket(&mut self) {
        let fd = types::Fd(self.socket.as_raw_fd());
        let e = match self.proto {
            UringProto::UdpEcho => opcode::RecvMsgMulti::new(fd, &*self.msghdr, BGID)
                .build()
                .user_data(ud(TAG_RECV, usize::MAX >> 32)),
            _ => opcode::AcceptMulti::new(fd)
                .flags(libc::SOCK_CLOEXEC)
                .build()
                .user_data(ud(TAG_ACCEPT, 0)),
        };
        self.push(e);
    }

    fn arm_recv(&mut self, index: usize) {
        let Some(c) = self.conns[index].as_mut() else {
            return;
        };
        c.recv_armed = true;
        let fd = types::Fd(c.fd);
        let e = match self.proto {
            UringProto::ReplyClose { .. } => {
                opcode::Recv::new(fd, std::ptr::null_mut(), BUF as u32)
                    .buf_group(BGID)
                    .build()
                    .flags(squeue::Flags::BUFFER_SELECT)
            }
            _ => opcode::RecvMulti::new(fd, BGID).build(),
        };
        self.push(e.user_data(ud(TAG_RECV, index)));
    }

    /// Give provided buffer `bid` back to the kernel.
    fn reprovide(&mut self, bid: u16) {
        let at = usize::from(bid) * BUF;
        let ptr = self.bufs[at..].as_mut_ptr();
        let e = opcode::ProvideBuffers::new(ptr, BUF as i32, 1, BGID, bid)
            .build()
            .flags(squeue::Flags::SKIP_SUCCESS)
            .user_data(ud(TAG_PROVIDE, 0));
        self.push(e);
    }

    fn run(mut self) -> io::Result<()> {
        loop {
            self.flush()?;
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            let cqes: Vec<cqueue::Entry> = self.ring.completion().collect();
            self.completions
                .fetch_add(cqes.len() as u64, Ordering::Relaxed);
            for cqe in cqes {
                let (tag, index) = tag_of(cqe.user_data());
                match tag {
                    TAG_WAKE => return Ok(()),
                    TAG_ACCEPT => self.on_accept(&cqe),
                    TAG_RECV if self.proto == UringProto::UdpEcho => self.on_datagram(&cqe),
                    TAG_RECV => self.on_recv(index, &cqe),
                    TAG_SEND => self.on_sent(index, cqe.result()),
                    TAG_UDP_SEND => {
                        self.udp_slots[index] = None;
                        self.free_udp.push(index);
                    }
                    TAG_PROVIDE if cqe.result() < 0 => {
                        return Err(io::Error::from_raw_os_error(-cqe.result()));
                    }
                    _ => {} // TAG_CLOSE, TAG_PROVIDE: nothing to do
                }
            }
        }
    }

    fn on_accept(&mut self, cqe: &cqueue::Entry) {
        if !cqueue::more(cqe.flags()) {
            self.arm_socket();
        }
        let fd = cqe.result();
        if fd < 0 {
            return;
        }
        self.accepted.fetch_add(1, Ordering::Relaxed);
        if self.proto == UringProto::Echo {
            // SAFETY: the kernel just gave us this descriptor; borrowed for one call.
            let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            let _ = rustix::net::sockopt::set_tcp_nodelay(b, true);
        }
        let conn = Conn {
            fd,
            ..Conn::default()
        };
        let index = insert(&mut self.conns, &mut self.free, conn);
        self.arm_recv(index);
    }

    fn on_recv(&mut self, index: usize, cqe: &cqueue::Entry) {
        let more = cqueue::more(cqe.flags());
        let res = cqe.result();
        let bid = cqueue::buffer_select(cqe.flags());
        let Some(c) = self.conns[index].as_mut() else {
            return;
        };
        c.recv_armed = more;
        if res > 0 {
            let Some(bid) = bid else { return };
            let at = usize::from(bid) * BUF;
            let bytes = &self.bufs[at..at + res as usize];
            c.queued.extend_from_slice(bytes);
            c.got += bytes.len();
            self.reprovide(bid);
        } else if res != -libc::ENOBUFS {
            // End of stream or an error: no more input.
            c.done = true;
        }
        let c = self.conns[index].as_mut().expect("present above");
        if let UringProto::ReplyClose { size } = self.proto
            && c.got >= size
        {
            c.done = true;
        }
        let rearm = !c.recv_armed && !c.done;
        if rearm {
            self.arm_recv(index);
        }
        self.send_or_close(index);
    }

    /// Start the next send of connection `index` if none is in flight; close it once it is
    /// done and has nothing left to send.
    fn send_or_close(&mut self, index: usize) {
        let Some(c) = self.conns[index].as_mut() else {
            return;
        };
        if c.sending {
            return;
        }
        if c.inflight.is_empty() {
            std::mem::swap(&mut c.inflight, &mut c.queued);
        }
        if !c.inflight.is_empty() {
            c.sending = true;
            let e = opcode::Send::new(
                types::Fd(c.fd),
                c.inflight.as_ptr(),
                c.inflight.len() as u32,
            )
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(ud(TAG_SEND, index));
            self.push(e);
            return;
        }
        if c.done && !c.recv_armed {
            let fd = c.fd;
            self.conns[index] = None;
            self.free.push(index);
            let e = opcode::Close::new(types::Fd(fd))
                .build()
                .user_data(ud(TAG_CLOSE, 0));
            self.push(e);
        }
    }

    fn on_sent(&mut self, index: usize, res: i32) {
        let Some(c) = self.conns[index].as_mut() else {
            return;
        };
        c.sending = false;
        if res < 0 {
            c.inflight.clear();
            c.queued.clear();
            c.done = true;
        } else {
            c.inflight.drain(..res as usize);
        }
        self.send_or_close(index);
    }

    fn on_datagram(&mut self, cqe: &cqueue::Entry) {
        if !cqueue::more(cqe.flags()) {
            self.arm_socket();
        }
        let (res, Some(bid)) = (cqe.result(), cqueue::buffer_select(cqe.flags())) else {
            return;
        };
        let at = usize::from(bid) * BUF;
        let slot = if res > 0 {
            types::RecvMsgOut::parse(&self.bufs[at..at + res as usize], &self.msghdr)
                .ok()
                .filter(|m| !m.is_payload_truncated())
                .map(|m| {
                    // SAFETY: an all-zero sockaddr_storage is a valid (unspecified) address.
                    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                    let name = m.name_data();
                    let n = name.len().min(std::mem::size_of_val(&addr));
                    // SAFETY: `n` bytes fit in `addr` (checked above) and `name` has them.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            name.as_ptr(),
                            (&raw mut addr).cast::<u8>(),
                            n,
                        );
                    }
                    Box::new(UdpSlot {
                        data: m.payload_data().to_vec(),
                        addr,
                        addr_len: n as libc::socklen_t,
                    })
                })
        } else {
            None
        };
        self.reprovide(bid);
        let Some(slot) = slot else { return };
        let e = opcode::Send::new(
            types::Fd(self.socket.as_raw_fd()),
            slot.data.as_ptr(),
            slot.data.len() as u32,
        )
        .dest_addr((&raw const slot.addr).cast())
        .dest_addr_len(slot.addr_len);
        let index = insert(&mut self.udp_slots, &mut self.free_udp, slot);
        self.push(e.build().user_data(ud(TAG_UDP_SEND, index)));
    }
}

/// Put `v` in a free slot of `slots` (one listed in `free`, else a new one); its index.
fn insert<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<usize>, v: T) -> usize {
    match free.pop() {
        Some(i) => {
            slots[i] = Some(v);
            i
        }
        None => {
            slots.push(Some(v));
            slots.len() - 1
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The ring goes first (fields drop in order after this), then the descriptors the
        // connections still hold are closed.
        for c in self.conns.iter().flatten() {
            // SAFETY: a live connection's descriptor is ours and closed only here.
            drop(unsafe { OwnedFd::from_raw_fd(c.fd) });
        }
    }
}
