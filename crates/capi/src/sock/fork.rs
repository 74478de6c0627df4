//! `fork(2)` with ustack sockets open (the LD_PRELOAD library calls these from its
//! `pthread_atfork` handlers; docs/preload.md, "fork").
//!
//! A stack is threads and memory of one process: the child of a `fork` has the parent's
//! memory but none of its loop threads, so nothing of the parent's stacks may run or even
//! be dropped there (dropping would join threads that do not exist). So:
//!
//! - [`prepare`] takes the descriptor table's lock and [`parent`] / [`child`] release it,
//!   so the child's copy of the table is never half-changed.
//! - In the child, every descriptor inherited is set aside (leaked on purpose, never
//!   dropped) and the parent's stacks are forgotten. The child starts a stack of its own
//!   on its first call that needs one, over the same TUN interface on a queue of its own
//!   (a multi-queue TUN: each process one queue, the kernel spreading flows over them by
//!   hash, as RSS spreads them over a NIC's). Every listening socket inherited is re-made
//!   on that stack, at the same number with its options, before the queue is attached;
//!   one made by `socket`, bound or not, not yet connected, on its first use in the
//!   child: so each worker of a pre-forking server (nginx's `worker_processes N`) listens
//!   on its own stack. Connections, UDP sockets and
//!   epoll sets are not carried: a call on one fails with `EBADFD` (the connection stays
//!   the parent's); `close` releases the number. The parent's TUN queue files the child
//!   inherited are closed in the child, so that a queue dies with its process. The
//!   child's queue is opened by the parent before the fork ([`prepare`]) and detached
//!   until the child starts its stack: opening takes `CAP_NET_ADMIN`, which a worker
//!   often drops (nginx's run as `nobody`); attaching does not.
//! - In the parent, if it has no connection and no UDP socket (a master that only
//!   listened and forks its workers), its TUN queues are detached (`TUNSETQUEUE`) before
//!   the fork: the kernel stops handing it new flows, which its listeners would queue
//!   without anyone accepting them (until a child attaches its queue, new flows wait for
//!   their SYN's retransmission). Its next call on a ustack socket (or new socket)
//!   attaches them again.
//! - `packet` and `xdp` links are not carried: a second `AF_PACKET` or `AF_XDP` socket on the
//!   interface would see every frame the parent's sees, and both stacks would answer.
//!   The child's calls fail with `ENETDOWN` there.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLockWriteGuard};

use ustack_dev::capture::{Tap, TapSwitch};
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_net::{KernelQueue, Net};

use super::{
    DEFAULT, Entry, File, NEXT_STACK, Obj, Sock, Stack, State2, builder, entry_of, listen, lock,
    new_file, new_stack, table, write_table,
};
use crate::config::{Config, LinkConfig};
use crate::error::{Error, Result};
use crate::links::QueueFiles;

/// Stacks numbered below this are a parent's (0 in a process that never forked).
static LIVE_FROM: AtomicU64 = AtomicU64::new(0);
/// The configuration a forked child opens its own stack with (a TUN link's, one queue on
/// the interface the parent attached to); `None` if the link is not carried.
static CHILD_CONFIG: Mutex<Option<Config>> = Mutex::new(None);
/// `dup`s of this process's TUN queue files (to detach and attach them), and their
/// original numbers (the files the stack reads, to close in a child).
static QUEUES: Mutex<QueueFiles> = Mutex::new(Vec::new());
/// Whether [`parent`] detached the queues.
static DETACHED: AtomicBool = AtomicBool::new(false);

type Inherited = HashMap<i32, Arc<Entry>>;
/// The descriptors a child inherited and has not used or closed yet (never dropped).
static INHERITED: Mutex<Option<Inherited>> = Mutex::new(None);
/// The parent's files a child re-made on its stack, by address: descriptors `dup`ed from
/// one socket stay one socket.
static REMADE: Mutex<Option<HashMap<usize, Arc<File>>>> = Mutex::new(None);

type TableGuard = RwLockWriteGuard<'static, HashMap<i32, Arc<Entry>>>;
thread_local! {
    /// The table's lock, held by the forking thread from [`prepare`] to [`parent`]/[`child`].
    static HELD: RefCell<Option<TableGuard>> = const { RefCell::new(None) };
}

/// Remember how a stack was opened: a TUN link is carried into forked children, one
/// queue each on the interface `name` (as the kernel named it); `queues` are the stack's
/// queue files.
pub(crate) fn opened(c: &Config, name: &str, queues: QueueFiles) {
    if let LinkConfig::Tun { netns, mtu, .. } = &c.link {
        let mut child = c.clone();
        child.link = LinkConfig::Tun {
            name: name.to_owned(),
            netns: netns.clone(),
            queues: 1,
            mtu: *mtu,
        };
        lock(&CHILD_CONFIG).get_or_insert(child);
    }
    lock(&QUEUES).extend(queues);
}

/// A TUN queue opened (and detached) before `fork` for the child: opening one takes
/// `CAP_NET_ADMIN`, which a child often gives up (nginx's workers run as `nobody`), while
/// attaching a detached queue does not.
static SPARE: Mutex<Option<TunQueue>> = Mutex::new(None);

/// Open the child's queue on the parent's TUN interface, detached: `None` if the link is
/// not carried or the queue cannot be had (the child's calls then fail).
fn spare_queue() -> Option<TunQueue> {
    let c = lock(&CHILD_CONFIG).clone()?;
    let LinkConfig::Tun { name, netns, .. } = c.link else {
        return None;
    };
    let tun = Tun::open(&TunConfig {
        name,
        queues: 1,
        mtu: None,
        netns,
        offload: false,
    })
    .ok()?;
    let q = tun.into_queues().pop()?;
    ustack_dev::tun::set_queue_attached(q.fd(), false).ok()?;
    Some(q)
}

/// Before `fork`: a queue for the child opened, and the table's lock taken, so that the
/// child's copy is whole.
pub fn prepare() {
    // A process with only listeners stops taking flows first thing: a handshake its
    // listener completed before the fork would be lost to the child.
    let connected = read_table().values().any(|e| match &e.obj {
        Obj::Sock(s) => s.state.try_lock().map_or(true, |st| {
            !matches!(*st, State2::Fresh { .. } | State2::Listener { .. })
        }),
        Obj::Epoll(_) => false,
    });
    if !connected && set_attached(false) {
        DETACHED.store(true, Ordering::Release);
    }
    // Then the child's queue (opening it may close files: not under the table's lock,
    // which the program's `close` takes), then the lock, held through the fork.
    let spare = spare_queue();
    *lock(&SPARE) = spare;
    let guard = write_table();
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(guard));
}

fn read_table() -> std::sync::RwLockReadGuard<'static, HashMap<i32, Arc<Entry>>> {
    table().read().unwrap_or_else(|e| e.into_inner())
}

/// After `fork`, in the parent: the lock released (and the child's queue closed here).
/// The queues stay detached if [`prepare`] detached them, until the next call.
pub fn parent() {
    let guard = HELD.try_with(|h| h.borrow_mut().take()).ok().flatten();
    drop(guard);
    // After the table's lock: closing a file goes through the program's `close`.
    drop(lock(&SPARE).take());
}

/// Attach or detach this process's TUN queues: whether there were any and all went.
fn set_attached(on: bool) -> bool {
    let q = lock(&QUEUES);
    !q.is_empty()
        && q.iter()
            .all(|(fd, _)| ustack_dev::tun::set_queue_attached(fd.as_fd(), on).is_ok())
}

/// A call in the parent: its queues attached again if [`parent`] detached them.
pub(crate) fn in_use() {
    if DETACHED.load(Ordering::Acquire) && DETACHED.swap(false, Ordering::AcqRel) {
        set_attached(true);
    }
}

/// After `fork`, in the child: the lock released, every descriptor set aside, the parent's
/// stacks forgotten and its queue files closed (see the module docs).
pub fn child() {
    let guard = HELD.try_with(|h| h.borrow_mut().take()).ok().flatten();
    let Some(mut t) = guard else { return };
    let inherited = core::mem::take(&mut *t);
    drop(t);
    LIVE_FROM.store(NEXT_STACK.load(Ordering::Relaxed), Ordering::Relaxed);
    DETACHED.store(false, Ordering::Relaxed);
    // try_lock: a lock some other thread of the parent held is held for ever here.
    if let Ok(mut i) = INHERITED.try_lock() {
        i.get_or_insert_with(HashMap::new).extend(inherited);
    } else {
        core::mem::forget(inherited);
    }
    if let Ok(mut d) = DEFAULT.try_lock() {
        core::mem::forget(d.take());
    }
    if let Ok(mut r) = REMADE.try_lock() {
        core::mem::forget(r.take());
    }
    if let Ok(mut q) = QUEUES.try_lock() {
        for (dup, original) in q.drain(..) {
            drop(dup);
            crate::ffi::close_inherited(original);
        }
    }
}

/// The stack this process's new sockets go to, if it has one (a forked child: once it
/// started its own).
pub fn current() -> Option<Arc<Stack>> {
    lock(&DEFAULT).clone()
}

/// Whether `fd` is a descriptor inherited across `fork` and not used yet.
pub(crate) fn is_inherited(fd: i32) -> bool {
    LIVE_FROM.load(Ordering::Relaxed) != 0
        && lock(&INHERITED)
            .as_ref()
            .is_some_and(|m| m.contains_key(&fd))
}

/// The stack new sockets go to: the default one, or in a forked child its own, started
/// now over the parent's TUN interface (`ENETDOWN` if the link is not carried).
pub(crate) fn default_stack() -> Result<Arc<Stack>> {
    if let Some(s) = lock(&DEFAULT).clone() {
        return Ok(s);
    }
    if LIVE_FROM.load(Ordering::Relaxed) == 0 {
        return Err(Error::new(
            libc::ENETDOWN,
            "no ustack stack: call ustack_stack_open first",
        ));
    }
    let config = lock(&CHILD_CONFIG).clone().ok_or_else(|| {
        Error::new(
            libc::ENETDOWN,
            "after fork: only a tun link's stack is carried into the child (packet and xdp \
             would see every frame twice)",
        )
    })?;
    let queue = lock(&SPARE).take().ok_or_else(|| {
        Error::new(
            libc::ENETDOWN,
            "after fork: the parent could not open a TUN queue for the child",
        )
    })?;
    // The child's own queue, as the parent's were: to detach it, and to close it in the
    // child's own children.
    let fail = |e: std::io::Error| {
        Error::new(
            crate::error::errno_of(&e),
            format!("after fork: the child's TUN queue: {e}"),
        )
    };
    let attach = queue.fd().try_clone_to_owned().map_err(fail)?;
    lock(&QUEUES).push((attach.try_clone().map_err(fail)?, queue.fd().as_raw_fd()));
    let tap = TapSwitch::new(crate::links::TAP_LIMIT);
    let link = Tap::new(KernelQueue::Tun(queue), tap.clone());
    let net =
        Net::on_links(builder(config.addr, config.addr6, &config), vec![link]).map_err(|e| {
            Error::new(
                crate::error::errno_of(&e),
                format!("after fork: starting the child's stack: {e}"),
            )
        })?;
    let mut stack = new_stack(net, config.addr.0, config.addr6);
    if let Some(s) = Arc::get_mut(&mut stack) {
        s.tap = Some(tap);
    }
    let stack = lock(&DEFAULT).get_or_insert(stack).clone();
    // Every listener inherited is re-made before the queue is attached: a SYN that came
    // to the new stack before its listener would be answered with a reset.
    let listeners: Vec<i32> = lock(&INHERITED).as_ref().map_or_else(Vec::new, |m| {
        m.iter()
            .filter(|(_, e)| match &e.obj {
                Obj::Sock(s) => s
                    .state
                    .try_lock()
                    .is_ok_and(|st| matches!(*st, State2::Listener { .. })),
                Obj::Epoll(_) => false,
            })
            .map(|(fd, _)| *fd)
            .collect()
    });
    for fd in listeners {
        let _ = remake(fd);
    }
    ustack_dev::tun::set_queue_attached(attach.as_fd(), true).map_err(fail)?;
    Ok(stack)
}

/// `EBADFD` for inherited descriptor `fd`, said on stderr once per process (the
/// program's own message would only say "File descriptor in bad state").
fn orphan(fd: i32, what: &str) -> Error {
    static SAID: AtomicU64 = AtomicU64::new(0);
    let msg = format!(
        "descriptor {fd} is a ustack {what} of the parent process: after fork only \
         listening (and unconnected) sockets are carried into the child"
    );
    let live = LIVE_FROM.load(Ordering::Relaxed);
    if SAID.swap(live, Ordering::Relaxed) != live {
        eprintln!("ustack: {msg} (docs/preload.md, fork)");
    }
    Error::new(libc::EBADFD, msg)
}

/// Close inherited descriptor `fd` (not used in the child): its number released
/// (`close_number`, else left to a `dup2` that replaced it). `false` if not inherited.
pub(crate) fn close(fd: i32, close_number: bool) -> bool {
    let e = lock(&INHERITED).as_mut().and_then(|m| m.remove(&fd));
    let Some(e) = e else { return false };
    if let Ok(mut r) = e.reserved.try_lock()
        && let Some(n) = r.take()
    {
        if close_number {
            drop(n);
        } else {
            let _ = std::os::fd::IntoRawFd::into_raw_fd(n);
        }
    }
    core::mem::forget(e);
    true
}

/// Inherited descriptor `fd`'s first use in the child: a listening or unconnected socket
/// re-made on the child's stack at the same number; anything else `EBADFD`.
pub(super) fn remake(fd: i32) -> Result<Arc<Entry>> {
    let old = lock(&INHERITED)
        .as_ref()
        .and_then(|m| m.get(&fd).cloned())
        .ok_or_else(|| Error::badf(fd))?;
    let Obj::Sock(s) = &old.obj else {
        return Err(orphan(fd, "epoll set"));
    };
    let (st, opts) = match (s.state.try_lock(), s.opts.try_lock()) {
        (Ok(st), Ok(o)) => (*st, *o),
        _ => return Err(orphan(fd, "socket (busy at fork)")),
    };
    let (bound, listening) = match st {
        State2::Fresh { bound } => (bound, false),
        State2::Listener { addr, .. } => (Some(addr), true),
        State2::Stream { .. } => return Err(orphan(fd, "connection")),
        State2::Udp { .. } => return Err(orphan(fd, "UDP socket")),
    };
    let stack = default_stack()?;
    // Starting the stack re-made every inherited listener, perhaps this one.
    let done = table()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fd)
        .cloned();
    if let Some(e) = done {
        return Ok(e);
    }
    let key = Arc::as_ptr(&old.file) as usize;
    let known = lock(&REMADE).as_ref().and_then(|m| m.get(&key).cloned());
    let first = known.is_none();
    let file = match known {
        Some(f) => f,
        None => {
            if let Some(a) = bound {
                stack.hold(a.port(), opts.reuseaddr || opts.reuseport)?;
            }
            let f = new_file(
                stack,
                Obj::Sock(Sock {
                    proto: s.proto,
                    domain: s.domain,
                    state: Mutex::new(State2::Fresh { bound }),
                    opts: Mutex::new(opts),
                    nonblock: AtomicBool::new(s.nonblock.load(Ordering::Relaxed)),
                }),
                0,
            );
            lock(&REMADE)
                .get_or_insert_with(HashMap::new)
                .insert(key, f.clone());
            f
        }
    };
    let reserved = old
        .reserved
        .try_lock()
        .ok()
        .and_then(|mut r| r.take())
        .ok_or_else(|| orphan(fd, "socket (its number busy at fork)"))?;
    debug_assert_eq!(reserved.as_raw_fd(), fd);
    file.descs.fetch_add(1, Ordering::AcqRel);
    let e = entry_of(file, old.cloexec.load(Ordering::Relaxed), reserved);
    table()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(fd, e.clone());
    if let Some(gone) = lock(&INHERITED).as_mut().and_then(|m| m.remove(&fd)) {
        core::mem::forget(gone);
    }
    if listening && first {
        // Linux's backlog is not kept by ustack's listener state: nginx's default.
        listen(fd, 511)?;
    }
    Ok(e)
}
