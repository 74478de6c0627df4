//! Doorbells: arming the need-wakeup flags, sleeping on the eventfd, and ringing the
//! peer only when it sleeps (the Dekker protocol of the module docs).

use core::sync::atomic::{Ordering, fence};
use core::time::Duration;
use std::io;

use rustix::event::{PollFd, PollFlags};

use super::ShmPort;
use crate::sleep::timespec;

impl ShmPort {
    /// After a publishing store: rings the peer if its need-wakeup flag at `flag_off` is
    /// set, clearing the flag (one ring per sleep). Dekker with the peer's
    /// `prepare_sleep`: our index store, a SeqCst fence, then the load of its flag.
    pub(super) fn wake_peer_if_asleep(&mut self, flag_off: usize) {
        fence(Ordering::SeqCst);
        let flag = self.shared.map.u32_at(flag_off);
        if flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0 {
            self.ring_peer();
        }
    }

    fn ring_peer(&mut self) {
        self.stats.doorbells += 1;
        // EAGAIN (counter at its maximum) means the peer has a wakeup pending anyway.
        let _ = rustix::io::write(&self.shared.bells[self.peer_bell], &1u64.to_ne_bytes());
    }

    /// Arms the doorbell before sleeping on [`fd`](Self::fd): returns false, without
    /// arming, if there is work (frames to receive, or returned slots when a send was
    /// refused for lack of them), so the caller must not sleep; true if it may sleep,
    /// and then the peer will ring when it posts a frame (or returns slots we wait for).
    /// Call [`finish_sleep`](Self::finish_sleep) after waking either way.
    pub fn prepare_sleep(&mut self) -> bool {
        // Nothing placed stays invisible while we sleep (a `send_more` run left open).
        self.publish_tx();
        self.publish_rx();
        if self.rx_ready() {
            return false;
        }
        let want_tx = self.tx.starved && !self.tx.stopped;
        let m = &self.shared.map;
        m.u32_at(self.rx.need_wakeup_off)
            .store(1, Ordering::Relaxed);
        if want_tx {
            m.u32_at(self.tx.need_wakeup_off)
                .store(1, Ordering::Relaxed);
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
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if !self.prepare_sleep() {
                return Ok(true);
            }
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                self.clear_wakeup_flags();
                return Ok(false);
            }
            self.stats.sleeps += 1;
            let ts = left.map(timespec);
            let mut fds = [PollFd::new(&self.shared.bells[self.bell], PollFlags::IN)];
            let res = rustix::event::poll(&mut fds, ts.as_ref());
            self.finish_sleep();
            match res {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
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
