//! The Linux backend: the kernel's TCP, as packetdrill's local mode runs it.
//!
//! [`Linux::new`] makes a network namespace of its own ([`NetNs`]: held by a background
//! process, gone when the backend is freed or dropped, or after 300 s if this process
//! dies) with a TUN interface `tun0` in it: the local address ([`Config::local_ip`],
//! 192.168.0.1/24) on it, the remote network 192.0.2.0/24 routed to it, IPv6 off on it;
//! under `--ip_version=ipv6` IPv6 on, the local IPv6 address ([`Config::local_ip6`],
//! fd3d:fa7b:d17d::1/48, `nodad`: usable at once) on it, the remote network 2001:db8::/32
//! routed to it, and MTU 1520 ([`Config::mtu`]). The kernel's own IPv6 chatter (router
//! solicitations, MLD reports, from link-local or unspecified sources) is not the
//! script's and is ignored.
//! The kernel's sockets are made inside the namespace (`socket(2)` on a short-lived thread
//! that entered it); what the kernel sends towards the remote end comes out of the TUN
//! queue, read by a thread of its own that stamps each packet as it arrives
//! ([`Backend::netdev_receive`]), and the script's packets go in through it. The
//! interface has no offloads, so the kernel segments to the MSS before the TUN: outbound
//! lines are MSS-sized segments. The namespace's [`SYSCTLS`] are set. The clock is real time (`CLOCK_MONOTONIC`).
//!
//! Every descriptor it opens for a script is close-on-exec: several backends may run in one
//! process (the tests run scripts side by side), and a process another one spawns (the
//! `unshare` holding a namespace lives for the whole run) would otherwise inherit a socket
//! and keep it open after the script's `close()`, holding back its FIN.
//!
//! Needs root (namespaces, TUN) and `unshare`, `nsenter`, `ip`, `timeout`; every command is
//! bounded in time.

use core::net::SocketAddr;
use core::time::Duration;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use ustack_dev::Device;
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_obs::time::Instant;
use ustack_testkit::netns::NetNs;

use crate::backend::{Backend, EpollEvent, PollFd, SysResult};
use crate::exec::Config;
use crate::sys;

/// The namespace's sysctls that scripts depend on, set before the first socket, as
/// packetdrill's `defaults.sh` does: the receive buffer's maximum sets the window scale
/// the kernel offers (7 for 6 MiB, where the host's may be larger).
pub const SYSCTLS: &[(&str, &str)] = &[("net/ipv4/tcp_rmem", "4096 131072 6291456")];

/// The TUN interface's name inside the namespace.
pub const TUN_NAME: &str = "tun0";

/// The kernel as a [`Backend`] (see the module docs).
#[derive(Debug)]
pub struct Linux {
    ns: Mutex<Option<NetNs>>,
    /// A thread inside the namespace that makes the sockets (`setns(2)` once: entering
    /// a namespace per call takes milliseconds, more than the timing tolerance).
    maker: Mutex<Option<mpsc::Sender<SocketRequest>>>,
    tun: Arc<Mutex<Option<TunQueue>>>,
    /// What the TUN reader took, stamped as it came out.
    rx: Mutex<mpsc::Receiver<(Vec<u8>, u64)>>,
    /// Tells the TUN reader to stop.
    stop: Arc<AtomicBool>,
    /// Descriptors the script's calls opened and did not close (closed by `free`).
    open: Mutex<Vec<i32>>,
    epoch: std::time::Instant,
}

impl Linux {
    /// A fresh namespace with the TUN interface configured for `cfg`'s addresses.
    pub fn new(cfg: &Config) -> io::Result<Linux> {
        let ns = NetNs::new()?;
        let tun = Tun::open(&TunConfig {
            name: TUN_NAME.to_owned(),
            queues: 1,
            mtu: cfg.ip_version.wire_ipv6().then(|| cfg.mtu() as u32),
            netns: Some(ns.path().to_owned()),
            offload: false,
        })?;
        let limit = Duration::from_secs(5);
        let v6 = cfg.ip_version.wire_ipv6();
        let ipv6 = format!(
            "f=/proc/sys/net/ipv6/conf/{TUN_NAME}/disable_ipv6; if [ -e $f ]; then echo {} > $f; fi",
            u8::from(!v6)
        );
        ns.run(limit, &["sh", "-c", &ipv6])?;
        for (key, value) in SYSCTLS {
            ns.run(
                limit,
                &["sh", "-c", &format!("echo '{value}' > /proc/sys/{key}")],
            )?;
        }
        let local = format!("{}/24", cfg.local_ip);
        let o = cfg.remote_ip.octets();
        let remote_net = format!("{}.{}.{}.0/24", o[0], o[1], o[2]);
        ns.run(limit, &["ip", "link", "set", "lo", "up"])?;
        ns.run(limit, &["ip", "addr", "add", &local, "dev", TUN_NAME])?;
        ns.run(limit, &["ip", "link", "set", TUN_NAME, "up"])?;
        ns.run(limit, &["ip", "route", "add", &remote_net, "dev", TUN_NAME])?;
        if v6 {
            let local6 = format!("{}/48", cfg.local_ip6);
            let s = cfg.remote_ip6.segments();
            let remote6 = format!("{:x}:{:x}::/32", s[0], s[1]);
            ns.run(
                limit,
                &["ip", "-6", "addr", "add", &local6, "dev", TUN_NAME, "nodad"],
            )?;
            ns.run(
                limit,
                &["ip", "-6", "route", "add", &remote6, "dev", TUN_NAME],
            )?;
        }
        let mut queues = tun.into_queues();
        let queue = queues
            .pop()
            .ok_or_else(|| io::Error::other("tun: no queue"))?;
        let maker = socket_maker(&ns)?;
        let epoch = std::time::Instant::now();
        let tun = Arc::new(Mutex::new(Some(queue)));
        let stop = Arc::new(AtomicBool::new(false));
        let rx = tun_reader(tun.clone(), stop.clone(), epoch)?;
        Ok(Linux {
            maker: Mutex::new(Some(maker)),
            ns: Mutex::new(Some(ns)),
            tun,
            rx: Mutex::new(rx),
            stop,
            open: Mutex::new(Vec::new()),
            epoch,
        })
    }

    /// `EBADF` unless `fd` is a descriptor this run opened and has not closed: the
    /// kernel's answer for a closed descriptor, given here because the runs in one
    /// process share the descriptor table, so the number may meanwhile name another
    /// run's socket or file (a call on it would get `ENOTSOCK`, or act on that one).
    fn own(&self, fd: i32) -> Result<(), i32> {
        if self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&fd)
        {
            Ok(())
        } else {
            Err(libc::EBADF)
        }
    }

    fn opened(&self, r: SysResult) -> SysResult {
        if let Ok(fd) = r {
            self.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(fd as i32);
        }
        r
    }

    fn instant(&self) -> Instant {
        Instant::from_micros(self.now_us())
    }
}

/// Starts the thread that reads the TUN queue and stamps each packet as it comes out, so
/// that a runner busy with a call does not see a packet late. It polls a duplicate of the
/// queue's descriptor without the lock (the sender takes the lock for a write only), and
/// stops within 20 ms of `stop`.
fn tun_reader(
    tun: Arc<Mutex<Option<TunQueue>>>,
    stop: Arc<AtomicBool>,
    epoch: std::time::Instant,
) -> io::Result<mpsc::Receiver<(Vec<u8>, u64)>> {
    let fd = {
        let guard = tun.lock().unwrap_or_else(|e| e.into_inner());
        let q = guard
            .as_ref()
            .ok_or_else(|| io::Error::other("no TUN queue"))?;
        q.fd().try_clone_to_owned()?
    };
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("conform-tun".to_owned())
        .spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let tick = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            while !stop.load(Ordering::Relaxed) {
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                if rustix::event::poll(&mut fds, Some(&tick)).is_err() {
                    continue;
                }
                loop {
                    let at = epoch.elapsed();
                    let mut guard = tun.lock().unwrap_or_else(|e| e.into_inner());
                    let Some(q) = guard.as_mut() else {
                        return;
                    };
                    let Some(n) = q.recv(Instant::from_micros(at.as_micros() as u64), &mut buf)
                    else {
                        break;
                    };
                    if tx.send((buf[..n].to_vec(), at.as_micros() as u64)).is_err() {
                        return;
                    }
                }
            }
        })?;
    Ok(rx)
}

/// `socket(2)` arguments, and where to send the result.
type SocketRequest = ((i32, i32, i32), mpsc::Sender<SysResult>);

/// Starts the thread that makes sockets inside `ns`; it ends when the sender is dropped.
fn socket_maker(ns: &NetNs) -> io::Result<mpsc::Sender<SocketRequest>> {
    let (tx, rx) = mpsc::channel::<SocketRequest>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let path = ns.path().to_owned();
    std::thread::Builder::new()
        .name("conform-netns".to_owned())
        .spawn(move || {
            let entered = std::fs::File::open(&path).and_then(|f| {
                use std::os::fd::AsFd;
                rustix::thread::move_into_link_name_space(
                    f.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .map_err(io::Error::from)
            });
            let ok = entered.is_ok();
            let _ = ready_tx.send(entered);
            if ok {
                for ((d, t, p), reply) in rx {
                    let _ = reply.send(sys::socket(d, t, p));
                }
            }
        })?;
    ready_rx
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread died")))
        .map_err(|e| io::Error::new(e.kind(), format!("entering the namespace: {e}")))?;
    Ok(tx)
}

impl Backend for Linux {
    fn netdev_send(&self, packet: &[u8]) -> io::Result<()> {
        let now = self.instant();
        let mut tun = self.tun.lock().unwrap_or_else(|e| e.into_inner());
        let q = tun
            .as_mut()
            .ok_or_else(|| io::Error::other("backend freed"))?;
        if q.send(now, packet) {
            Ok(())
        } else {
            Err(io::Error::other("the TUN queue refused the packet"))
        }
    }

    fn netdev_receive(&self, timeout: Duration) -> io::Result<Option<(Vec<u8>, u64)>> {
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        match rx.recv_timeout(timeout) {
            Ok(p) => Ok(Some(p)),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(io::Error::other("the TUN reader stopped"))
            }
        }
    }

    fn usleep(&self, us: u64) {
        std::thread::sleep(Duration::from_micros(us));
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn sysctl(&self, name: &str, value: &str) -> io::Result<()> {
        let ns = self.ns.lock().unwrap_or_else(|e| e.into_inner());
        let ns = ns
            .as_ref()
            .ok_or_else(|| io::Error::other("backend freed"))?;
        // The runner has checked both: `net.` and a dotted name; digits.
        let path = format!("/proc/sys/{}", name.replace('.', "/"));
        ns.run(
            Duration::from_secs(5),
            &["sh", "-c", &format!("echo {value} > {path}")],
        )?;
        Ok(())
    }

    fn socket(&self, domain: i32, ty: i32, protocol: i32) -> SysResult {
        let (tx, rx) = mpsc::channel();
        let sent = self
            .maker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|m| {
                m.send(((domain, ty | libc::SOCK_CLOEXEC, protocol), tx))
                    .is_ok()
            });
        let r = if sent {
            rx.recv().unwrap_or(Err(libc::EIO))
        } else {
            Err(libc::EIO)
        };
        self.opened(r)
    }

    fn bind(&self, fd: i32, addr: SocketAddr) -> SysResult {
        self.own(fd)?;
        sys::bind(fd, addr)
    }

    fn listen(&self, fd: i32, backlog: i32) -> SysResult {
        self.own(fd)?;
        sys::listen(fd, backlog)
    }

    fn accept(&self, fd: i32, flags: i32) -> SysResult {
        self.own(fd)?;
        self.opened(sys::accept(fd, flags | libc::SOCK_CLOEXEC))
    }

    fn connect(&self, fd: i32, addr: SocketAddr) -> SysResult {
        self.own(fd)?;
        sys::connect(fd, addr)
    }

    fn read(&self, fd: i32, buf: &mut [u8]) -> SysResult {
        self.own(fd)?;
        sys::read(fd, buf)
    }

    fn recv(&self, fd: i32, buf: &mut [u8], flags: i32) -> SysResult {
        self.own(fd)?;
        sys::recv(fd, buf, flags)
    }

    fn write(&self, fd: i32, buf: &[u8]) -> SysResult {
        self.own(fd)?;
        // send(2) with MSG_NOSIGNAL: a write on a reset connection is EPIPE, not a SIGPIPE
        // that would end the runner.
        sys::send(fd, buf, libc::MSG_NOSIGNAL)
    }

    fn send(&self, fd: i32, buf: &[u8], flags: i32) -> SysResult {
        self.own(fd)?;
        sys::send(fd, buf, flags | libc::MSG_NOSIGNAL)
    }

    fn shutdown(&self, fd: i32, how: i32) -> SysResult {
        self.own(fd)?;
        sys::shutdown(fd, how)
    }

    fn close(&self, fd: i32) -> SysResult {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = open.iter().position(|&f| f == fd) else {
            // Never a descriptor the backend did not open (the runner's own files).
            return Err(libc::EBADF);
        };
        open.swap_remove(i);
        sys::close(fd)
    }

    fn getsockopt(&self, fd: i32, level: i32, name: i32, buf: &mut [u8]) -> Result<usize, i32> {
        self.own(fd)?;
        sys::getsockopt(fd, level, name, buf)
    }

    fn setsockopt(&self, fd: i32, level: i32, name: i32, val: &[u8]) -> SysResult {
        self.own(fd)?;
        sys::setsockopt(fd, level, name, val)
    }

    fn fcntl(&self, fd: i32, cmd: i32, arg: i64) -> SysResult {
        self.own(fd)?;
        sys::fcntl(fd, cmd, arg)
    }

    fn poll(&self, fds: &mut [PollFd], timeout_ms: i32) -> SysResult {
        sys::poll(fds, timeout_ms)
    }

    fn epoll_create(&self, size: i32) -> SysResult {
        self.opened(sys::epoll_create(size))
    }

    fn epoll_ctl(&self, epfd: i32, op: i32, fd: i32, event: EpollEvent) -> SysResult {
        self.own(epfd)?;
        self.own(fd)?;
        sys::epoll_ctl(epfd, op, fd, event)
    }

    fn epoll_wait(&self, epfd: i32, events: &mut [EpollEvent], timeout_ms: i32) -> SysResult {
        self.own(epfd)?;
        sys::epoll_wait(epfd, events, timeout_ms)
    }

    fn free(&self) {
        let fds: Vec<i32> =
            std::mem::take(&mut *self.open.lock().unwrap_or_else(|e| e.into_inner()));
        // Shut down first: that wakes a call still blocked on the descriptor.
        for &fd in &fds {
            let _ = sys::shutdown(fd, libc::SHUT_RDWR);
        }
        for fd in fds {
            let _ = sys::close(fd);
        }
        self.stop.store(true, Ordering::Relaxed);
        self.maker.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.tun.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.ns.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

impl Drop for Linux {
    fn drop(&mut self) {
        self.free();
    }
}
