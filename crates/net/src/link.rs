//! The links a [`Net`](crate::Net) runs over, and how its loop sleeps on them.
//!
//! The loop thread sleeps in one `poll(2)` on the link's file (the shm doorbell eventfd,
//! the TUN queue) and on its own *kick* eventfd, which a caller writes when it hands the
//! loop a job while the loop sleeps. A [`Link`] says how to arm the device's wake-up and
//! which file to wait on; [`DynLink`] erases the device type, so that sockets and jobs are
//! one type whatever the link (one virtual call per device operation, nothing per byte).

use std::io;
use std::os::fd::BorrowedFd;

use ustack_dev::shm::ShmPort;
use ustack_dev::sim::SimPort;
use ustack_dev::sleep::{Clock, Sleep};
use ustack_dev::tun::TunQueue;
use ustack_dev::{Device, DeviceCaps};
use ustack_runtime::RssSplitter;
use ustack_stack::Instant;

/// A device a [`Net`](crate::Net)'s loop thread can run and sleep on.
pub trait Link: Device + Sleep {
    /// Arm the device's wake-up before sleeping: false if it has work already (frames
    /// waiting), and then the loop must not sleep. Every call is followed by
    /// [`finish_sleep`](Link::finish_sleep).
    fn prepare_sleep(&mut self) -> bool {
        true
    }

    /// The files that become readable when the device has work, appended to `out` (none:
    /// only time and the kick wake the loop, as for the in-process sim link).
    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>);

    /// Disarm the wake-up after the sleep.
    fn finish_sleep(&mut self) {}
}

/// The shm port: its doorbell, armed and disarmed around the sleep
/// ([`ShmPort::prepare_sleep`], race-free against the peer's publish).
impl Link for ShmPort {
    fn prepare_sleep(&mut self) -> bool {
        ShmPort::prepare_sleep(self)
    }
    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        out.push(self.fd());
    }
    fn finish_sleep(&mut self) {
        ShmPort::finish_sleep(self);
    }
}

/// The far end of a sharded shm link, steering each frame to the queue of the shard RSS
/// picks for it (as a NIC would): every queue's doorbell.
impl Link for RssSplitter<ShmPort> {
    fn prepare_sleep(&mut self) -> bool {
        let queues = self.queues_mut();
        for i in 0..queues.len() {
            if !queues[i].prepare_sleep() {
                for q in &mut queues[..i] {
                    q.finish_sleep();
                }
                return false;
            }
        }
        true
    }
    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        out.extend(self.queues().iter().map(ShmPort::fd));
    }
    fn finish_sleep(&mut self) {
        for q in self.queues_mut() {
            q.finish_sleep();
        }
    }
}

/// A TUN queue: its file is readable while a packet waits.
impl Link for TunQueue {
    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        out.push(self.fd());
    }
}

/// The in-process sim link (both ends on one loop thread): frames on the wire are the
/// device's [`Device::poll_at`], part of the loop's wake-up time; nothing to wait on.
impl Link for SimPort {
    fn sleep_fds<'a>(&'a self, _out: &mut Vec<BorrowedFd<'a>>) {}
}

/// Any [`Link`], boxed: the device of every runtime a [`Net`](crate::Net) runs.
pub struct DynLink(Box<dyn Link>);

impl DynLink {
    /// Box `link`.
    pub fn new(link: impl Link + 'static) -> DynLink {
        DynLink(Box::new(link))
    }

    /// The link, to arm its wake-up and wait on its files (a loop driven from elsewhere,
    /// e.g. ustack-tokio's `LocalStack`).
    pub fn link_mut(&mut self) -> &mut dyn Link {
        &mut *self.0
    }

    /// The link.
    pub fn link(&self) -> &dyn Link {
        &*self.0
    }
}

impl core::fmt::Debug for DynLink {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DynLink")
            .field("caps", &self.0.caps())
            .finish_non_exhaustive()
    }
}

impl Device for DynLink {
    fn caps(&self) -> DeviceCaps {
        self.0.caps()
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.0.recv(now, buf)
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        self.0.send(now, frame)
    }
    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        self.0.send_more(now, frame, more)
    }
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        self.0.send_batch(now, frames)
    }
    fn send_swap(&mut self, now: Instant, frames: &mut [Vec<u8>]) -> usize {
        self.0.send_swap(now, frames)
    }
    fn send_one(&mut self, now: Instant, frame: &mut Vec<u8>) -> bool {
        self.0.send_one(now, frame)
    }
    fn tx_direct(&self) -> bool {
        self.0.tx_direct()
    }
    fn recv_swap(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<usize> {
        self.0.recv_swap(now, buf)
    }
    fn tx_space(&mut self) -> Option<usize> {
        self.0.tx_space()
    }
    fn tx_lends(&self) -> bool {
        self.0.tx_lends()
    }
    fn send_with(
        &mut self,
        now: Instant,
        len: usize,
        more: bool,
        fill: &mut dyn FnMut(&mut dyn ustack_dev::FrameWriter) -> bool,
    ) -> bool {
        self.0.send_with(now, len, more, fill)
    }
    fn rx_head_len(&self) -> usize {
        self.0.rx_head_len()
    }
    fn recv_head(&mut self, now: Instant, buf: &mut [u8]) -> Option<(usize, usize)> {
        self.0.recv_head(now, buf)
    }
    fn read_held(&mut self, off: usize, dst: &mut [u8]) -> bool {
        self.0.read_held(off, dst)
    }
    fn poll_at(&self) -> Option<Instant> {
        self.0.poll_at()
    }
    fn rx_csum_unnecessary(&self) -> bool {
        self.0.rx_csum_unnecessary()
    }
    fn trust_rx_csum(&mut self) {
        self.0.trust_rx_csum()
    }
}

impl Sleep for DynLink {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        self.0.sleep_until(clock, deadline)
    }
}
