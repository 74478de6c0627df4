//! [`Epoll`]: an epoll-like interest set over a [`Net`]'s handles, usable from any thread.
//!
//! It is fed by ustack's poller: the loop thread registers every socket in its runtime's
//! [`Poller`](ustack_runtime::Poller) (edge-triggered, every kind), and each event it reports
//! is a wake-up of the socket ([`Net`]'s blocking calls wait on the same wake-ups). A
//! wake-up queues the socket on every set that holds it with a matching interest, as
//! Linux's `ep_poll_callback` does; [`Epoll::wait`] then reports what each queued socket
//! is ready for as the loop last saw it, with the level, edge and one-shot rules of
//! `ep_send_events` (as [`Poller::wait`](ustack_runtime::Poller::wait) applies them):
//!
//! - level-triggered: reported by every `wait` while ready for the interest;
//! - edge-triggered: reported once per wake-up (new data, a connection, send space, a
//!   state change); read or write until `WouldBlock` before waiting again;
//! - one-shot: disarmed after one event until [`Epoll::modify`];
//! - ERROR and HUP are reported whatever the interest; a socket ready when it is added
//!   (or modified) is reported by the next `wait`, in either mode; a socket closed (its
//!   last handle) leaves the set by itself.

use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

use rustix::event::{EventfdFlags, eventfd};

use ustack_runtime::Mode;
use ustack_stack::Readiness;

use crate::core::{ALWAYS, Fd, Net, SockShared, Watcher};

/// One ready handle, as [`Epoll::wait`] reports it (`struct epoll_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpollEvent {
    /// The token given when the handle was added (`epoll_event.data`).
    pub token: u64,
    /// The handle.
    pub fd: Fd,
    /// What it is ready for: its readiness within the interest, plus ERROR and HUP.
    pub readiness: Readiness,
}

struct Reg {
    token: u64,
    interest: Readiness,
    mode: Mode,
    oneshot: bool,
    armed: bool,
    queued: bool,
    sock: Arc<SockShared>,
}

#[derive(Default)]
struct State {
    regs: HashMap<Fd, Reg>,
    ready: VecDeque<Fd>,
}

/// What the loop threads reach: the registrations and their ready list.
pub(crate) struct EpollShared {
    state: Mutex<State>,
    cv: Condvar,
    /// Readable while handles are queued for a look ([`Epoll::as_fd`]).
    efd: OwnedFd,
}

impl EpollShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `fd` joins the ready list (the caller holds the lock): wake the waiters, and make
    /// the eventfd readable if the list was empty.
    fn queue(&self, st: &mut State, fd: Fd) {
        if st.ready.is_empty() {
            let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
        }
        st.ready.push_back(fd);
        self.cv.notify_all();
    }

    /// A wake-up of socket `id` under `fd` (from the loop thread): queue it if the set
    /// holds it, armed, for a matching interest. Whether the set still holds it (false:
    /// the watcher can go).
    pub(crate) fn wake(&self, fd: Fd, id: u64, r: Readiness) -> bool {
        let mut st = self.lock();
        let Some(reg) = st.regs.get_mut(&fd) else {
            return false;
        };
        if reg.sock.id != id {
            return false;
        }
        if reg.armed && !reg.queued && r.intersects(reg.interest | ALWAYS) {
            reg.queued = true;
            self.queue(&mut st, fd);
        }
        true
    }
}

/// An epoll-like interest set over a [`Net`]'s handles.
///
/// It is fed by ustack's poller: the loop thread registers every socket in its runtime's
/// [`Poller`](ustack_runtime::Poller) (edge-triggered, every kind), and each event it reports
/// is a wake-up of the socket ([`Net`]'s blocking calls wait on the same wake-ups). A
/// wake-up queues the socket on every set that holds it with a matching interest, as
/// Linux's `ep_poll_callback` does; [`Epoll::wait`] then reports what each queued socket
/// is ready for as the loop last saw it, with the level, edge and one-shot rules of
/// `ep_send_events` (as [`Poller::wait`](ustack_runtime::Poller::wait) applies them):
///
/// - level-triggered: reported by every `wait` while ready for the interest;
/// - edge-triggered: reported once per wake-up (new data, a connection, send space, a
///   state change); read or write until `WouldBlock` before waiting again;
/// - one-shot: disarmed after one event until [`Epoll::modify`];
/// - ERROR and HUP are reported whatever the interest; a socket ready when it is added
///   (or modified) is reported by the next `wait`, in either mode; a socket closed (its
///   last handle) leaves the set by itself.
pub struct Epoll {
    net: Net,
    shared: Arc<EpollShared>,
}

impl core::fmt::Debug for Epoll {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Epoll")
            .field("registrations", &self.shared.lock().regs.len())
            .finish_non_exhaustive()
    }
}

impl Epoll {
    /// An empty set (`epoll_create1`). Fails only if the OS refuses an eventfd.
    pub fn new(net: &Net) -> io::Result<Epoll> {
        Ok(Epoll {
            net: net.clone(),
            shared: Arc::new(EpollShared {
                state: Mutex::new(State::default()),
                cv: Condvar::new(),
                efd: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
            }),
        })
    }

    /// Watch `fd` for `interest` with `token` (`EPOLL_CTL_ADD`). `EEXIST` if it is in the
    /// set, `EBADF` if not open.
    pub fn add(
        &self,
        fd: Fd,
        token: u64,
        interest: Readiness,
        mode: Mode,
        oneshot: bool,
    ) -> io::Result<()> {
        let sock = self.net.sock(fd)?.shared.clone();
        {
            let mut st = self.shared.lock();
            if st.regs.get(&fd).is_some_and(|r| r.sock.id == sock.id) {
                return Err(io::Error::from_raw_os_error(17 /* EEXIST */));
            }
            st.regs.insert(
                fd,
                Reg {
                    token,
                    interest,
                    mode,
                    oneshot,
                    armed: true,
                    queued: true,
                    sock: sock.clone(),
                },
            );
            self.shared.queue(&mut st, fd);
        }
        sock.add_watcher(Watcher::Set {
            set: Arc::downgrade(&self.shared),
            fd,
        });
        Ok(())
    }

    /// Change a registration and re-arm it (`EPOLL_CTL_MOD`). `ENOENT` if not in the set.
    pub fn modify(
        &self,
        fd: Fd,
        token: u64,
        interest: Readiness,
        mode: Mode,
        oneshot: bool,
    ) -> io::Result<()> {
        let mut st = self.shared.lock();
        let reg = st
            .regs
            .get_mut(&fd)
            .ok_or_else(|| io::Error::from_raw_os_error(2 /* ENOENT */))?;
        reg.token = token;
        reg.interest = interest;
        reg.mode = mode;
        reg.oneshot = oneshot;
        reg.armed = true;
        if !reg.queued {
            reg.queued = true;
            self.shared.queue(&mut st, fd);
        }
        Ok(())
    }

    /// Stop watching `fd` (`EPOLL_CTL_DEL`). `ENOENT` if not in the set.
    pub fn delete(&self, fd: Fd) -> io::Result<()> {
        self.shared
            .lock()
            .regs
            .remove(&fd)
            .map(|_| ())
            .ok_or_else(|| io::Error::from_raw_os_error(2 /* ENOENT */))
    }

    /// Wait until a handle is ready or `timeout` passes (`None`: no limit; zero: just
    /// look), and append up to `max` events to `events`; returns how many (`epoll_wait`).
    pub fn wait(
        &self,
        events: &mut Vec<EpollEvent>,
        max: usize,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut st = self.shared.lock();
        loop {
            let n = report(&mut st, events, max);
            if st.ready.is_empty() {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&self.shared.efd, &mut b);
            }
            if n > 0 || max == 0 {
                return Ok(n);
            }
            match (timeout, deadline) {
                (None, _) | (Some(_), None) => {
                    st = self.shared.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                (Some(_), Some(d)) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        return Ok(0);
                    }
                    st = self
                        .shared
                        .cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }
}

/// The set's eventfd: readable while handles are queued for a look, so that one `poll(2)`
/// or kernel `epoll_wait` covers this set beside kernel files (how LD_PRELOAD's mixed sets
/// and an async reactor wait on it). As an epoll fd inside another epoll set, it may be
/// readable when a [`Epoll::wait`] then finds nothing ready (the item queued was not ready
/// any more): wait with a zero timeout and go back to sleep.
impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.efd.as_fd()
    }
}

/// `ep_send_events`: look at each handle queued before this pass, once.
fn report(st: &mut State, events: &mut Vec<EpollEvent>, max: usize) -> usize {
    let mut reported = 0;
    let mut to_look_at = st.ready.len();
    while reported < max && to_look_at > 0 {
        to_look_at -= 1;
        let Some(fd) = st.ready.pop_front() else {
            break;
        };
        let Some(reg) = st.regs.get_mut(&fd) else {
            continue;
        };
        if !reg.queued {
            continue;
        }
        reg.queued = false;
        if reg.sock.closed.load(std::sync::atomic::Ordering::Acquire) {
            st.regs.remove(&fd);
            continue;
        }
        if !reg.armed {
            continue;
        }
        let r = reg.sock.readiness() & (reg.interest | ALWAYS);
        if r.is_empty() {
            continue;
        }
        events.push(EpollEvent {
            token: reg.token,
            fd,
            readiness: r,
        });
        reported += 1;
        if reg.oneshot {
            reg.armed = false;
        } else if reg.mode == Mode::Level {
            reg.queued = true;
            st.ready.push_back(fd);
        }
    }
    reported
}
