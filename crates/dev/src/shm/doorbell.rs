//! Doorbells: arming the need-wakeup flags, sleeping on a futex or the eventfd, and
//! ringing the peer only when it sleeps (the Dekker protocol of the module docs).

use core::sync::atomic::{AtomicU32, Ordering, fence};
use core::time::Duration;
use std::io;

use rustix::event::{PollFd, PollFlags};
use rustix::thread::futex;

use super::ShmPort;
use crate::sleep::timespec;

/// A need-wakeup flag's value while its side sleeps: how to wake it. Any other nonzero
/// value (a garbled or hostile peer's) is rung both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Bell {
    /// Asleep in `poll(2)` (or epoll, tokio) on its eventfd: [`ShmPort::fd`],
    /// [`wait_any`].
    EventFd = 1,
    /// Asleep in `futex(2)` `FUTEX_WAIT` on its own `rx_need_wakeup` word
    /// ([`ShmPort::wait`]): the waker's `FUTEX_WAKE` is the one system call of a wake-up
    /// (no eventfd write, poll registration or read to drain it).
    Futex = 2,
}

impl ShmPort {
    /// After a publishing store: rings the peer if its need-wakeup flag at `flag_off` is
    /// set, clearing the flag (one ring per sleep). Dekker with the peer's
    /// `prepare_sleep`: our index store, a SeqCst fence, then the load of its flag. A peer
    /// asleep on its futex sleeps on its `rx_need_wakeup` word, which is
    /// `self.tx.peer_need_wakeup_off` (the flag of the direction we send on).
    pub(super) fn wake_peer_if_asleep(&mut self, flag_off: usize) {
        fence(Ordering::SeqCst);
        let flag = self.shared.map.u32_at(flag_off);
        if flag.load(Ordering::Relaxed) == 0 {
            return;
        }
        let how = flag.swap(0, Ordering::Relaxed);
        if how == 0 {
            return;
        }
        self.stats.doorbells += 1;
        if how != Bell::Futex as u32 {
            // EAGAIN (counter at its maximum) means the peer has a wakeup pending anyway.
            let _ = rustix::io::write(&self.shared.bells[self.peer_bell], &1u64.to_ne_bytes());
        }
        if how != Bell::EventFd as u32 {
            let word = self.shared.map.u32_at(self.tx.peer_need_wakeup_off);
            // The peer waits while its word holds `Futex`: clear it before waking, so a
            // peer not yet in `futex_wait` (woken here for free slots, its word still
            // armed) returns at once instead of sleeping through this ring.
            word.store(0, Ordering::Relaxed);
            let _ = futex::wake(word, futex::Flags::empty(), 1);
        }
    }

    /// Arms the doorbell before sleeping on [`fd`](Self::fd): returns false, without
    /// arming, if there is work (frames to receive, or returned slots when a send was
    /// refused for lack of them), so the caller must not sleep; true if it may sleep,
    /// and then the peer will ring when it posts a frame (or returns slots we wait for).
    /// Call [`finish_sleep`](Self::finish_sleep) after waking either way.
    pub fn prepare_sleep(&mut self) -> bool {
        self.arm(Bell::EventFd)
    }

    /// [`prepare_sleep`](Self::prepare_sleep), the flags set to `bell`: how the peer is
    /// to wake us.
    fn arm(&mut self, bell: Bell) -> bool {
        // Nothing placed stays invisible while we sleep (a `send_more` run left open), and
        // no slot stays held.
        self.publish_tx();
        self.release_held();
        self.publish_rx();
        if self.rx_ready() {
            return false;
        }
        let want_tx = self.tx.starved && !self.tx.stopped;
        self.stats.arms += 1;
        let m = &self.shared.map;
        m.u32_at(self.rx.need_wakeup_off)
            .store(bell as u32, Ordering::Relaxed);
        if want_tx {
            m.u32_at(self.tx.need_wakeup_off)
                .store(bell as u32, Ordering::Relaxed);
        }
        // Dekker with the peer's publish: flag store, fence, index load.
        fence(Ordering::SeqCst);
        let tx_ready = want_tx && self.tx_reclaimable();
        if self.rx_ready() || tx_ready {
            self.clear_wakeup_flags();
            return false;
        }
        true
    }

    fn tx_reclaimable(&self) -> bool {
        let head = self.load_acquire(self.tx.comp_head_off);
        head != self.tx.comp_tail
    }

    pub(super) fn clear_wakeup_flags(&self) {
        let m = &self.shared.map;
        m.u32_at(self.rx.need_wakeup_off)
            .store(0, Ordering::Relaxed);
        m.u32_at(self.tx.need_wakeup_off)
            .store(0, Ordering::Relaxed);
    }

    /// Disarms the doorbell after a sleep on [`fd`](Self::fd) and drains the eventfd.
    pub fn finish_sleep(&mut self) {
        self.clear_wakeup_flags();
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.shared.bells[self.bell], &mut count);
    }

    /// Sleeps until frames arrive (or, after a send was refused for lack of slots, until
    /// slots come back), or until `timeout` passes (`None`: no limit). Returns whether
    /// there is work. Returns at once if there already is; never sleeps when the peer has
    /// already posted. Wakeups that find nothing (a stale ring, a signal) sleep again.
    ///
    /// It sleeps on a futex, its `rx_need_wakeup` word armed with `Bell::Futex` (2): the
    /// peer's `FUTEX_WAKE` costs it one system call and this side none to drain, where an
    /// eventfd costs a write, and here a `poll(2)` and a `read(2)`. A ring between the
    /// check and the wait is not lost: the waker clears the word first, and `FUTEX_WAIT`
    /// sleeps only while it still holds `Bell::Futex` (2).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if !self.arm(Bell::Futex) {
                return Ok(true);
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                self.clear_wakeup_flags();
                return Ok(false);
            }
            self.stats.sleeps += 1;
            let ts = left.map(timespec);
            let word: &AtomicU32 = self.shared.map.u32_at(self.rx.need_wakeup_off);
            let res = futex::wait(word, futex::Flags::empty(), Bell::Futex as u32, ts.as_ref());
            self.clear_wakeup_flags();
            match res {
                Ok(()) | Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(rustix::io::Errno::TIMEDOUT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// [`ShmPort::wait`] over several ports (the queues of one multi-queue link, say): sleeps
/// until any of them has work or `timeout` passes, and returns whether one has. Each port
/// arms its doorbell as in `wait`; all are disarmed on waking. With no ports, returns
/// `Ok(false)` at once.
pub fn wait_any(ports: &mut [ShmPort], timeout: Option<Duration>) -> io::Result<bool> {
    if ports.is_empty() {
        return Ok(false);
    }
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        for i in 0..ports.len() {
            if !ports[i].prepare_sleep() {
                for p in &ports[..i] {
                    p.clear_wakeup_flags();
                }
                return Ok(true);
            }
        }
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            for p in ports.iter() {
                p.clear_wakeup_flags();
            }
            return Ok(false);
        }
        let ts = left.map(timespec);
        let mut fds: Vec<PollFd<'_>> = ports
            .iter()
            .map(|p| PollFd::new(&p.shared.bells[p.bell], PollFlags::IN))
            .collect();
        let res = rustix::event::poll(&mut fds, ts.as_ref());
        drop(fds);
        for p in ports.iter_mut() {
            p.stats.sleeps += 1;
            p.finish_sleep();
        }
        match res {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Device;
    use crate::shm::{ShmConfig, ShmLink};
    use ustack_obs::time::Instant;

    fn pair(ring_size: usize) -> (ShmPort, ShmPort) {
        let config = ShmConfig {
            ring_size,
            ..ShmConfig::default()
        };
        let (mut a, mut b) = ShmLink::pair(&config).unwrap();
        (a.remove(0), b.remove(0))
    }

    fn word(p: &ShmPort) -> u32 {
        p.shared
            .map
            .u32_at(p.rx.need_wakeup_off)
            .load(Ordering::Relaxed)
    }

    /// The step `wait` takes between arming and `FUTEX_WAIT`, frozen: a ring that lands
    /// there must leave the word the sleeper is about to wait on without
    /// `Bell::Futex` (2), or `FUTEX_WAIT` would sleep through it. A sender armed for free
    /// slots sleeps on its `rx_need_wakeup` word, not on the `tx_need_wakeup` flag the
    /// receiver clears when it returns them: that ring must clear the word too.
    #[test]
    fn a_ring_between_arming_and_futex_wait_clears_the_word_waited_on() {
        let (mut a, mut b) = pair(4);
        let now = Instant::ZERO;
        while a.send(now, b"fill") {}
        assert!(a.arm(Bell::Futex), "starved, nothing to receive: may sleep");
        assert_eq!(word(&a), Bell::Futex as u32);
        let mut buf = [0u8; 64];
        while b.recv(now, &mut buf).is_some() {}
        assert_eq!(b.stats().doorbells, 1, "the returned slots rang");
        assert_eq!(word(&a), 0, "FUTEX_WAIT would sleep through the ring");
        a.clear_wakeup_flags();
        // A frame rings the word itself.
        let mut buf = [0u8; 64];
        while a.recv(now, &mut buf).is_some() {}
        assert!(b.arm(Bell::Futex));
        assert!(a.send(now, b"x"));
        assert_eq!(word(&b), 0);
    }
}
