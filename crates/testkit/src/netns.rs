//! Network namespaces and TUN rigs for tests that have the Linux kernel as the peer.
//!
//! [`NetNs`] holds an anonymous network namespace with a background process
//! (`unshare --net sleep 300`): the namespace lives as long as that process, has no name
//! anyone else could collide with, and is gone when the guard drops (it kills exactly that
//! process and reaps it). Should the test process die without dropping it, the holder
//! exits on its own after 300 s. Commands run inside it through `nsenter --net=`, each
//! bounded by `timeout`.
//!
//! [`TunRig::new`] builds the usual rig: a namespace, a TUN interface `tun0` created
//! directly inside it ([`Tun::open`] with [`TunConfig::netns`]), the kernel's end
//! [`KERNEL_IP`]/24 on it, IPv6 off, the link up; ustack takes [`USTACK_IP`] on the queues.
//!
//! Tests that need this call [`root_or_skip`] first: without root, `/dev/net/tun` or the
//! tools (`unshare`, `nsenter`, `ip`, `timeout`) they print why and skip, unless
//! `USTACK_REQUIRE_ROOT` is set (`.ci/run` sets it), which turns that into a failure.

use core::net::Ipv4Addr;
use core::time::Duration;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use ustack_dev::packet::{Packet, PacketConfig, PacketQueue};
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_dev::xdp::{Xdp, XdpConfig, XdpQueue};

/// The kernel's address on the rig's interface (TEST-NET-1).
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// ustack's address on the rig's interface.
pub const USTACK_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The interface's name inside the rig's namespace.
pub const TUN_NAME: &str = "tun0";
/// How long the namespace holder lives if nobody kills it.
const HOLDER_SECS: u32 = 300;

/// Whether a root-only test can run here: `None` to go on, or the reason it cannot, after
/// printing it. Panics with the reason instead when `USTACK_REQUIRE_ROOT` is set.
pub fn root_or_skip(test: &str) -> Option<()> {
    root_with(test, true, &[])
}

/// [`root_or_skip`] for a test over a veth pair ([`PacketRig`]): root and the namespace
/// tools, `/dev/net/tun` not needed, and `ethtool` (a missing `ethtool` skips, or fails
/// under `USTACK_REQUIRE_ROOT`).
pub fn veth_or_skip(test: &str) -> Option<()> {
    root_with(test, false, &["ethtool"])
}

fn root_with(test: &str, tun: bool, more: &[&str]) -> Option<()> {
    let reason = if !rustix::process::geteuid().is_root() {
        Some("not running as root".to_owned())
    } else if tun && !Path::new("/dev/net/tun").exists() {
        Some("/dev/net/tun is missing".to_owned())
    } else {
        ["unshare", "nsenter", "ip", "timeout"]
            .iter()
            .chain(more)
            .find(|t| !on_path(t))
            .map(|t| format!("`{t}` is not installed"))
    };
    skip_unless_required(test, reason, "USTACK_REQUIRE_ROOT")
}

/// Whether `tool` is on PATH; prints a skip note for `test` and returns false if not, or
/// panics when `USTACK_REQUIRE_TOOLS` is set.
pub fn tool_or_skip(test: &str, tool: &str) -> bool {
    let reason = (!on_path(tool)).then(|| format!("`{tool}` is not installed"));
    skip_unless_required(test, reason, "USTACK_REQUIRE_TOOLS").is_some()
}

/// Whether the kernel offers congestion control `cc` (`tcp_available_congestion_control`),
/// after trying `modprobe tcp_<cc>` when it does not. Prints a skip note for `test` and
/// returns false if it still does not, or panics when `USTACK_REQUIRE_ROOT` is set (a
/// kernel-peer test under CI must run every cell it names).
pub fn kernel_cc_or_skip(test: &str, cc: &str) -> bool {
    let offered = || {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .is_ok_and(|s| s.split_whitespace().any(|c| c == cc))
    };
    if !offered() && on_path("modprobe") {
        let _ = Command::new("modprobe")
            .arg(format!("tcp_{cc}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let reason = (!offered()).then(|| {
        format!("the kernel offers no `{cc}` congestion control (`modprobe tcp_{cc}` failed)")
    });
    skip_unless_required(test, reason, "USTACK_REQUIRE_ROOT").is_some()
}

fn skip_unless_required(test: &str, reason: Option<String>, var: &str) -> Option<()> {
    let Some(reason) = reason else {
        return Some(());
    };
    assert!(
        std::env::var_os(var).is_none(),
        "{test}: required ({var}) but {reason}"
    );
    eprintln!("{test}: skipped: {reason} (set {var}=1 to make this a failure)");
    None
}

/// Whether an executable called `name` is in a PATH directory.
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(name)).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        })
    })
}

/// An anonymous network namespace, held by a background process; removed on drop, with
/// every process still in it (see [`NetNs::kill_all_inside`]).
#[derive(Debug)]
pub struct NetNs {
    holder: Child,
    path: PathBuf,
    /// The namespace's identity (`net:[INODE]`, the link `/proc/PID/ns/net` reads as),
    /// known once the holder has unshared.
    id: PathBuf,
}

impl NetNs {
    /// A new namespace (only `lo` in it, down). Waits up to 5 s for the holder to have
    /// unshared.
    pub fn new() -> io::Result<NetNs> {
        let holder = Command::new("unshare")
            .args(["--net", "sleep", &HOLDER_SECS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("spawning unshare: {e}")))?;
        let mut ns = NetNs {
            path: PathBuf::from(format!("/proc/{}/ns/net", holder.id())),
            holder,
            id: PathBuf::new(),
        };
        let ours = std::fs::read_link("/proc/self/ns/net")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = ns.holder.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = ns.holder.stderr.take() {
                    let _ = io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(io::Error::other(format!(
                    "unshare --net exited ({status}): {}",
                    err.trim()
                )));
            }
            // Until unshare(2) has run, the holder is still in our namespace.
            if let Ok(id) = std::fs::read_link(&ns.path)
                && id != ours
            {
                ns.id = id;
                return Ok(ns);
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "unshare --net did not enter a new namespace within 5 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The process that holds the namespace.
    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// The namespace's file (`/proc/<holder>/ns/net`), for `setns(2)` or `nsenter`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace's identity: what `/proc/PID/ns/net` reads as (`net:[INODE]`) for
    /// a process in it.
    pub fn id(&self) -> &Path {
        &self.id
    }

    /// The processes in the namespace but the holder and this test process (thread-group
    /// leaders whose `/proc/PID/ns/net` is [`NetNs::id`]).
    pub fn pids_inside(&self) -> Vec<u32> {
        let (me, holder) = (std::process::id(), self.holder.id());
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&pid| pid != me && pid != holder)
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|l| l == self.id)
            })
            .collect()
    }

    /// SIGKILL every process in the namespace but the holder and this test process, until
    /// none is left (each pass may find children forked meanwhile; at most 50 passes).
    /// Tools run through [`NetNs::command`] are children of `timeout` outside the
    /// namespace, so killing the `Child` a test holds (`timeout`, which cannot pass
    /// SIGKILL on) leaves the tool running in the namespace, and holding it open: this is
    /// what reaches them. [`NetNs`]'s drop calls it.
    pub fn kill_all_inside(&self) {
        for _ in 0..50 {
            let pids = self.pids_inside();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A command that runs `argv` inside the namespace, killed after `limit`:
    /// `timeout -k 1 <limit> nsenter --net=<path> argv...`. `timeout` runs in a process
    /// group of its own (GNU `timeout` without `--foreground`), with the tool in it: stop
    /// it with [`kill_group`], not `Child::kill`, which kills only `timeout` and leaves
    /// the tool running (until the namespace's drop).
    pub fn command<S: AsRef<OsStr>>(&self, limit: Duration, argv: &[S]) -> Command {
        let mut c = Command::new("timeout");
        c.arg("-k")
            .arg("1")
            .arg(format!("{:.3}", limit.as_secs_f64()))
            .arg("nsenter")
            .arg(format!("--net={}", self.path.display()))
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    /// Runs `argv` inside the namespace (bounded by `limit`) and returns its output; an
    /// error, with its stderr, if it fails or times out.
    pub fn run<S: AsRef<OsStr>>(&self, limit: Duration, argv: &[S]) -> io::Result<Output> {
        let out = self.command(limit, argv).output()?;
        if !out.status.success() {
            let line: Vec<_> = argv.iter().map(|a| a.as_ref().to_string_lossy()).collect();
            return Err(io::Error::other(format!(
                "`{}` in the namespace failed ({}{}): {}{}",
                line.join(" "),
                out.status,
                if out.status.code() == Some(124) {
                    ", timed out"
                } else {
                    ""
                },
                String::from_utf8_lossy(&out.stderr).trim(),
                String::from_utf8_lossy(&out.stdout).trim(),
            )));
        }
        Ok(out)
    }
}

impl NetNs {
    /// Makes the multi-queue TUN interface `name` in this namespace (`ip tuntap add dev
    /// NAME mode tun multi_queue`: it stays until the namespace goes, for a process the
    /// test starts to attach to) and configures its kernel end ([`NetNs::configure_tun`]).
    pub fn add_tun(&self, name: &str) -> io::Result<()> {
        let argv = [
            "ip",
            "tuntap",
            "add",
            "dev",
            name,
            "mode",
            "tun",
            "multi_queue",
        ];
        self.run(Duration::from_secs(5), &argv)?;
        self.configure_tun(name)
    }

    /// Configures the kernel's end of the interface `name` in this namespace:
    /// [`KERNEL_IP`]/24 on it, IPv6 off on it (no router solicitations or MLD reports: the
    /// rigs are for IPv4), `lo` and the link up.
    pub fn configure_tun(&self, name: &str) -> io::Result<()> {
        let limit = Duration::from_secs(5);
        self.disable_ipv6(name)?;
        let addr = format!("{KERNEL_IP}/24");
        self.run(limit, &["ip", "addr", "add", &addr, "dev", name])?;
        self.run(limit, &["ip", "link", "set", "lo", "up"])?;
        // The depth of each TUN queue's ring (`tun_net_xmit` drops when it is full, counted
        // as TX dropped on the kernel's side): at the default 500 a kernel bulk sender
        // overruns a ustack reader that is descheduled for a moment on a 2-core machine,
        // and the kernel's retransmissions of those drops read as a storm in the capture.
        self.run(limit, &["ip", "link", "set", name, "txqueuelen", "4096"])?;
        self.run(limit, &["ip", "link", "set", name, "up"])?;
        Ok(())
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Whatever still runs in the namespace (a tool a failed test left behind would
        // hold the namespace, and its interfaces, for as long as it lives), then our
        // holder: once it is gone, nothing holds the namespace (files opened in it, like
        // TUN queues, keep their interface only until they close).
        if !self.id.as_os_str().is_empty() {
            self.kill_all_inside();
        }
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Stop a command started from [`NetNs::command`] (or any `timeout ...` wrapper) with
/// everything it started: SIGKILL to its process group (`timeout` makes itself the
/// leader of one, and the tool it runs, with the tool's own children, stays in it), then
/// to the child itself in case it had not made the group yet, and reap it. A child
/// already reaped is left alone.
pub fn kill_group(child: &mut Child) {
    // Only while the child is not reaped: until then its pid, and so the group's id, is
    // still its own (once reaped, the number may belong to another process).
    if let Ok(None) = child.try_wait()
        && let Some(pgid) = rustix::process::Pid::from_raw(child.id() as i32)
    {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A namespace with a TUN interface in it, configured on the kernel's side.
#[derive(Debug)]
pub struct TunRig {
    /// The interface's queues, for ustack (take them out to give to runtimes).
    pub queues: Vec<TunQueue>,
    /// The interface MTU.
    pub mtu: usize,
    /// Dropped last: the queues close first.
    pub ns: NetNs,
}

impl TunRig {
    /// A fresh namespace with [`TUN_NAME`] (`queues` queues, the kernel's MTU unless `mtu`
    /// says otherwise), [`KERNEL_IP`]/24 on it, IPv6 off and the link up.
    pub fn new(queues: usize, mtu: Option<u32>) -> io::Result<TunRig> {
        TunRig::open(queues, mtu, false)
    }

    /// [`new`](Self::new) with the kernel's offloads taken ([`TunConfig::offload`]): the
    /// kernel hands the queues super-segments of up to 64 KiB.
    pub fn with_offload(queues: usize) -> io::Result<TunRig> {
        TunRig::open(queues, None, true)
    }

    fn open(queues: usize, mtu: Option<u32>, offload: bool) -> io::Result<TunRig> {
        let ns = NetNs::new()?;
        let tun = Tun::open(&TunConfig {
            name: TUN_NAME.to_owned(),
            queues,
            mtu,
            netns: Some(ns.path().to_owned()),
            offload,
        })?;
        ns.configure_tun(TUN_NAME)?;
        let mtu = tun.mtu();
        Ok(TunRig {
            queues: tun.into_queues(),
            mtu,
            ns,
        })
    }
}

/// The kernel's end of a [`PacketRig`]'s veth pair.
pub const VETH_KERNEL: &str = "veth0";
/// ustack's end of a [`PacketRig`]'s veth pair.
pub const VETH_USTACK: &str = "veth1";

/// A namespace with a veth pair in it: the kernel's end [`VETH_KERNEL`] with
/// [`KERNEL_IP`]/24 and its transmit offloads off, ustack's end [`VETH_USTACK`] up with no
/// address (IPv6 off on both), and `AF_PACKET` queues on ustack's end.
#[derive(Debug)]
pub struct PacketRig {
    /// The queues on ustack's end, for ustack (take them out to give to runtimes).
    pub queues: Vec<PacketQueue>,
    /// ustack's end's MAC address: give it to the stack.
    pub mac: [u8; 6],
    /// The MTU.
    pub mtu: usize,
    /// Dropped last: the queues close first.
    pub ns: NetNs,
}

impl PacketRig {
    /// A fresh namespace with the veth pair and `queues` queues on ustack's end
    /// (receive blocks as in `PacketConfig::default()`).
    pub fn new(queues: usize) -> io::Result<PacketRig> {
        let ns = NetNs::new()?;
        ns.veth_pair()?;
        let packet = Packet::open(&PacketConfig {
            interface: VETH_USTACK.to_owned(),
            queues,
            netns: Some(ns.path().to_owned()),
            ..PacketConfig::default()
        })?;
        Ok(PacketRig {
            mac: packet.mac(),
            mtu: packet.mtu(),
            queues: packet.into_queues(),
            ns,
        })
    }
}

/// A namespace with the veth pair of a [`PacketRig`] and the `xdp` link on ustack's end
/// (its XDP program attached to [`VETH_USTACK`]).
#[derive(Debug)]
pub struct XdpRig {
    /// The queue on ustack's end.
    pub queue: XdpQueue,
    /// ustack's end's MAC address: give it to the stack.
    pub mac: [u8; 6],
    /// Dropped last: the queue closes first.
    pub ns: NetNs,
}

impl XdpRig {
    /// A fresh namespace with the veth pair and the `xdp` link on ustack's end.
    pub fn new() -> io::Result<XdpRig> {
        let ns = NetNs::new()?;
        ns.veth_pair()?;
        let xdp = Xdp::open(&XdpConfig {
            interface: VETH_USTACK.to_owned(),
            netns: Some(ns.path().to_owned()),
            ..XdpConfig::default()
        })?;
        Ok(XdpRig {
            mac: xdp.mac(),
            queue: xdp.into_queue(),
            ns,
        })
    }
}

/// The veth pair with `queues` receive and transmit queues on each end, and the `xdp`
/// link on ustack's end with one socket per queue.
#[derive(Debug)]
pub struct XdpQueuesRig {
    /// The queues on ustack's end, in order of queue id.
    pub queues: Vec<XdpQueue>,
    /// ustack's end's MAC address: give it to the stack.
    pub mac: [u8; 6],
    /// Dropped last: the queues close first.
    pub ns: NetNs,
}

impl XdpQueuesRig {
    /// A fresh namespace with a veth pair of `queues` queues a side
    /// ([`NetNs::veth_pair_queues`]) and an xdp link of `queues` sockets on ustack's end.
    pub fn new(queues: usize) -> io::Result<XdpQueuesRig> {
        let ns = NetNs::new()?;
        ns.veth_pair_queues(queues)?;
        let xdp = Xdp::open(&XdpConfig {
            interface: VETH_USTACK.to_owned(),
            netns: Some(ns.path().to_owned()),
            queues,
            ..XdpConfig::default()
        })?;
        Ok(XdpQueuesRig {
            mac: xdp.mac(),
            queues: xdp.into_queues(),
            ns,
        })
    }
}

/// `ip link add A numrxqueues N numtxqueues N type veth peer name B numrxqueues N
/// numtxqueues N`: a veth pair of `queues` receive and transmit queues a side.
pub fn veth_add_argv(a: &str, b: &str, queues: usize) -> Vec<String> {
    let n = queues.to_string();
    let q = ["numrxqueues", &n, "numtxqueues", &n];
    let mut argv = vec!["ip", "link", "add", a];
    argv.extend(q);
    argv.extend(["type", "veth", "peer", "name", b]);
    argv.extend(q);
    argv.into_iter().map(str::to_owned).collect()
}

impl NetNs {
    /// Adds the veth pair [`VETH_KERNEL`]–[`VETH_USTACK`] in this namespace: the kernel's
    /// end configured ([`configure_tun`](Self::configure_tun)) with transmit checksum
    /// offload and TSO off (`ethtool -K veth0 tx off`: a raw socket on the other end would
    /// see partial checksums and 64 KiB segments otherwise), ustack's end up without an
    /// address and with IPv6 off, so the kernel never answers for it.
    ///
    /// Both ends take their receive work to one CPU (RPS: the namespace's
    /// `net.core.rps_default_mask` set to 1 before the pair is made, where the kernel has
    /// it). A veth end hands each frame to the backlog of the CPU that sent it, and two
    /// CPUs' backlogs drain at once: a kernel flow sent now from the application's CPU, now
    /// from the softirq answering an ACK on the other, reached a packet socket out of order
    /// (seen as several segments a few milliseconds late in a transfer without faults). One
    /// backlog keeps the pair in order, as a wire is.
    pub fn veth_pair(&self) -> io::Result<()> {
        self.veth_pair_queues(1)
    }

    /// [`veth_pair`](Self::veth_pair) with `queues` receive and transmit queues on each end
    /// (`numrxqueues`, `numtxqueues`): a frame the kernel sends on transmit queue `k` of
    /// its end arrives on receive queue `k` of ustack's.
    pub fn veth_pair_queues(&self, queues: usize) -> io::Result<()> {
        let limit = Duration::from_secs(5);
        let rps = "f=/proc/sys/net/core/rps_default_mask; if [ -e $f ]; then echo 1 > $f; fi";
        self.run(limit, &["sh", "-c", rps])?;
        self.run(limit, &veth_add_argv(VETH_KERNEL, VETH_USTACK, queues))?;
        self.run(limit, &["ethtool", "-K", VETH_KERNEL, "tx", "off"])?;
        self.configure_tun(VETH_KERNEL)?;
        self.disable_ipv6(VETH_USTACK)?;
        self.run(limit, &["ip", "link", "set", VETH_USTACK, "up"])?;
        Ok(())
    }

    /// IPv6 back on for interface `name` (the rigs turn it off) with the address `cidr`
    /// (`2001:db8::1/64`, say) without duplicate address detection (`nodad`), for the
    /// tests over IPv6. Returns once the kernel has the address's local route (it is
    /// added by the address's DAD work, after `ip addr add` returns even with `nodad`:
    /// until then a packet to the address is dropped as `Ip6InAddrErrors`), at most 5 s.
    pub fn add_ipv6(&self, name: &str, cidr: &str) -> io::Result<()> {
        let limit = Duration::from_secs(5);
        let on = format!("net.ipv6.conf.{name}.disable_ipv6=0");
        self.run(limit, &["sysctl", "-qw", &on])?;
        self.run(
            limit,
            &["ip", "-6", "addr", "add", cidr, "dev", name, "nodad"],
        )?;
        let addr = cidr.split('/').next().unwrap_or(cidr);
        let argv = ["ip", "-6", "route", "show", "table", "local", addr];
        let deadline = std::time::Instant::now() + limit;
        loop {
            let out = self.run(limit, &argv)?;
            if String::from_utf8_lossy(&out.stdout).contains("local") {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no local route for {addr} on {name} within 5 s"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// IPv6 off on interface `name` (if the kernel has IPv6): no router solicitations or
    /// MLD reports.
    fn disable_ipv6(&self, name: &str) -> io::Result<()> {
        let ipv6 = format!(
            "f=/proc/sys/net/ipv6/conf/{name}/disable_ipv6; if [ -e $f ]; then echo 1 > $f; fi"
        );
        self.run(Duration::from_secs(5), &["sh", "-c", &ipv6])
            .map(|_| ())
    }
}

/// The environment variable naming the congestion control the kernel-side scripts set on
/// their TCP sockets (`TCP_CONGESTION`), if any: see [`PY_PRELUDE`]'s `tune`.
pub const PY_CC_ENV: &str = "USTACK_TCP_CC";

/// What every kernel-side Python script starts with ([`python_argv`]): its imports,
/// `drain(sock)`, which reads to the end of the stream and returns the SHA-256 (hex) and
/// the byte count, and `tune(sock)`, which sets the congestion control named by
/// [`PY_CC_ENV`] on a TCP socket (checked by reading it back) and returns the socket, and
/// `stream(sock, n, seed)`, which sends `n` pseudo-random bytes drawn from
/// `random.Random(seed)` 1 MiB at a time (so any size fits in memory) and returns their
/// SHA-256 (hex).
pub const PY_PRELUDE: &str = r#"
import hashlib, os, random, socket, sys, threading, time
CC = os.environ.get("USTACK_TCP_CC")
def tune(s):
    if CC:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, CC.encode())
        got = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0")
        if got != CC.encode():
            sys.exit(f"congestion control {got} instead of {CC}")
    return s
def drain(s):
    h, got = hashlib.sha256(), 0
    while True:
        b = s.recv(65536)
        if not b:
            return h.hexdigest(), got
        h.update(b)
        got += len(b)
def stream(s, n, seed):
    r, h, left = random.Random(seed), hashlib.sha256(), n
    while left:
        b = r.randbytes(min(left, 1 << 20))
        h.update(b)
        s.sendall(b)
        left -= len(b)
    return h.hexdigest()
"#;

/// A kernel client of a TCP echo server, arguments `n host port`: a thread sends `n`
/// pseudo-random bytes and half-closes while the main thread reads the echo to its end;
/// prints the SHA-256 of what it sent, of what came back, and how many bytes came back.
pub const PY_ECHO_CLIENT: &str = r#"
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
data = random.Random(n).randbytes(n)
s = tune(socket.create_connection((host, port), timeout=20))
def send():
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send)
t.start()
echoed, got = drain(s)
t.join()
print(hashlib.sha256(data).hexdigest(), echoed, got)
"#;

/// A kernel bulk server, arguments `n host port` (`host` IPv4 or IPv6): accepts one
/// connection, reads to its end, then sends `n` pseudo-random bytes and closes; prints
/// `ready` once listening, then the bytes read, their SHA-256 and the SHA-256 of what it
/// sent.
pub const PY_BULK_SERVER: &str = r#"
n, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
l = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((host, port))
l.listen(1)
l.settimeout(20)
print("ready", flush=True)
c, _ = l.accept()
tune(c).settimeout(20)
digest, got = drain(c)
sent = stream(c, n, n)
c.close()
print(got, digest, sent, flush=True)
"#;

/// `python3 -c <PY_PRELUDE + script> args...`, for [`NetNs::run`] or [`NetNs::command`].
pub fn python_argv(script: &str, args: &[String]) -> Vec<String> {
    let mut argv = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        format!("{PY_PRELUDE}{script}"),
    ];
    argv.extend_from_slice(args);
    argv
}

/// `ustack serve ... --link tun` running in a namespace: spawned with its interface
/// [`TUN_NAME`] created inside the namespace, its `tun-ready` line read and the kernel's
/// end configured ([`NetNs::configure_tun`]). Or over another kernel link
/// ([`ServeOverTun::start_on`]: packet or xdp on a veth end in the namespace). Killed and
/// reaped on drop.
#[derive(Debug)]
pub struct ServeOverTun {
    child: Child,
    stdout: io::BufReader<std::process::ChildStdout>,
    /// Its control socket: a path of its own, so that tests run side by side.
    control: std::path::PathBuf,
}

impl ServeOverTun {
    /// Runs `bin serve <args> --link tun --tun tun0 --netns <ns>` (`args` should bound it
    /// with `--duration`) and waits for it to be ready.
    pub fn start(bin: &Path, ns: &NetNs, args: &[&str]) -> io::Result<ServeOverTun> {
        let link = ["--link", "tun", "--tun", TUN_NAME];
        let server =
            ServeOverTun::start_on(bin, ns, args, &link, &format!("tun-ready {TUN_NAME}"))?;
        ns.configure_tun(TUN_NAME)?;
        Ok(server)
    }

    /// Runs `bin serve <args> <link> --netns <ns>` (`link`: `--link xdp --interface
    /// veth1`, say; `args` should bound it with `--duration`) and waits for its first
    /// line, which must be `ready` (`xdp-ready veth1`).
    pub fn start_on(
        bin: &Path,
        ns: &NetNs,
        args: &[&str],
        link: &[&str],
        ready: &str,
    ) -> io::Result<ServeOverTun> {
        use std::io::BufRead;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let control = std::env::temp_dir().join(format!(
            "ustack-tun-{}-{}.sock",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut child = Command::new(bin)
            .arg("serve")
            .args(args)
            .args(link)
            .arg("--netns")
            .arg(ns.path())
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let mut server = ServeOverTun {
            child,
            stdout: io::BufReader::new(stdout),
            control,
        };
        let mut line = String::new();
        server.stdout.read_line(&mut line)?;
        if line.trim() != ready {
            return Err(io::Error::other(format!(
                "ustack serve printed `{}` instead of `{ready}`",
                line.trim()
            )));
        }
        Ok(server)
    }

    /// Stops the server with SIGTERM (it reports and exits 0) and returns the rest of
    /// what it printed, as [`finish`](Self::finish) does.
    pub fn terminate(self) -> io::Result<String> {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32)
            .ok_or_else(|| io::Error::other("no process id"))?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
        self.finish()
    }

    /// Its control socket (for `ustack stat --control`, say).
    pub fn control(&self) -> &Path {
        &self.control
    }

    /// The server's process id (for its `/proc/<pid>/status`, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Runs `bin capture -w <pcap> <args> --control <its socket>` beside it (`args`
    /// bound it: `-c`, `--duration`; it also ends when the server does), and returns
    /// once the capture is on (`ustack capture` says so when the pcap header arrives).
    pub fn capture(&self, bin: &Path, pcap: &Path, args: &[&str]) -> io::Result<ToolCapture> {
        use std::io::BufRead;
        let mut child = Command::new(bin)
            .arg("capture")
            .arg("-w")
            .arg(pcap)
            .args(args)
            .arg("--control")
            .arg(&self.control)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = io::BufReader::new(child.stderr.take().expect("piped"));
        let mut capture = ToolCapture { child, stderr };
        let mut line = String::new();
        capture.stderr.read_line(&mut line)?;
        if !line.starts_with("capturing from ") {
            return Err(io::Error::other(format!(
                "ustack capture printed `{}` instead of `capturing from ...`",
                line.trim()
            )));
        }
        Ok(capture)
    }

    /// Waits for the server to end (after its `--duration`) and returns the rest of what
    /// it printed (its counters); an error if it failed.
    pub fn finish(mut self) -> io::Result<String> {
        let mut rest = String::new();
        io::Read::read_to_string(&mut self.stdout, &mut rest)?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!("ustack serve: {status}: {rest}")));
        }
        Ok(rest)
    }
}

impl Drop for ServeOverTun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.control);
    }
}

/// A running `ustack capture` ([`ServeOverTun::capture`]); killed and reaped on drop.
#[derive(Debug)]
pub struct ToolCapture {
    child: Child,
    stderr: io::BufReader<std::process::ChildStderr>,
}

impl ToolCapture {
    /// Waits for the capture to end and returns the packets it wrote (from its `N packets
    /// captured`); an error if it failed.
    pub fn finish(mut self) -> io::Result<u64> {
        let mut text = String::new();
        io::Read::read_to_string(&mut self.stderr, &mut text)?;
        let status = self.child.wait()?;
        let text = text.trim();
        if !status.success() {
            return Err(io::Error::other(format!(
                "ustack capture: {status}: {text}"
            )));
        }
        text.lines()
            .find_map(|l| l.strip_suffix(" packets captured"))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| io::Error::other(format!("ustack capture printed `{text}`")))
    }
}

impl Drop for ToolCapture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
