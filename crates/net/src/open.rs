//! Opening the links whose other end is the Linux kernel — a TUN interface, an
//! `AF_PACKET` socket or an `AF_XDP` socket on an Ethernet interface (a veth end, a NIC)
//! — in one place, for every program that runs a stack over them: the `ustack` tool's
//! `connect` and `get`, and the C API (`link=tun|packet|xdp`), which
//! libustack_preload.so's `USTACK_LINK` selects.
//!
//! [`open_link`] opens a [`LinkSpec`] and gives its queues as [`KernelQueue`]s (one
//! type whatever the link, so that a [`Net`] or a single runtime takes any of them), each
//! behind a capture [`Tap`] when the caller passes a [`TapSwitch`] (`ustack capture`),
//! and the MAC address the stack must take on an Ethernet link (the interface's own:
//! the kernel's neighbours then agree with ustack on who is who).

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use ustack_dev::capture::{Tap, TapSwitch};
use ustack_dev::packet::{Packet, PacketConfig, PacketQueue};
use ustack_dev::sleep::{Clock, Sleep};
use ustack_dev::tun::{Tun, TunConfig, TunQueue};
use ustack_dev::xdp::{Xdp, XdpConfig, XdpQueue};
use ustack_dev::{Device, DeviceCaps};
use ustack_runtime::RuntimeBuilder;
use ustack_stack::{EthernetAddress, Instant};

use crate::core::Net;
use crate::link::Link;

/// A link to the kernel, and how to open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSpec {
    /// A TUN interface (made, or attached to when it exists with `multi_queue`): bare IP
    /// packets, one queue per [`TunConfig::queues`].
    Tun(TunConfig),
    /// `AF_PACKET` sockets on an existing Ethernet interface ([`PacketConfig::queues`]
    /// of them, one `PACKET_FANOUT` group).
    Packet(PacketConfig),
    /// `AF_XDP` sockets on an existing Ethernet interface, one per receive queue id
    /// ([`XdpConfig::queues`]).
    Xdp(XdpConfig),
}

impl LinkSpec {
    /// `tun`, `packet` or `xdp`.
    pub fn kind(&self) -> &'static str {
        match self {
            LinkSpec::Tun(_) => "tun",
            LinkSpec::Packet(_) => "packet",
            LinkSpec::Xdp(_) => "xdp",
        }
    }
}

/// One queue of a link to the kernel: whichever the [`LinkSpec`] opened.
#[derive(Debug)]
pub enum KernelQueue {
    /// A TUN queue.
    Tun(TunQueue),
    /// An `AF_PACKET` socket.
    Packet(PacketQueue),
    /// An `AF_XDP` socket.
    Xdp(XdpQueue),
}

/// An open link: its interface's name, the MAC address the stack takes on it (Ethernet
/// links), and its queues, each tapped if a [`TapSwitch`] was given.
#[derive(Debug)]
pub struct OpenedLink {
    /// The interface's name (for a TUN, as the kernel filled in `%d`).
    pub name: String,
    /// The interface's MAC address: the stack's ([`RuntimeBuilder::mac`]); `None` for TUN.
    pub mac: Option<EthernetAddress>,
    /// The queues, one shard each.
    pub queues: Vec<Tap<KernelQueue>>,
}

/// Open `spec` (in its namespace), each queue behind a [`Tap`] on `tap` (a switch that
/// stays off costs a relaxed load per frame), or on a switch of its own that nobody turns
/// on. The error says which link and interface failed and why (`ENODEV`, `EPERM` ...).
pub fn open_link(spec: &LinkSpec, tap: Option<&Arc<TapSwitch>>) -> io::Result<OpenedLink> {
    let what = |name: &str, e: io::Error| {
        let socket = match spec {
            LinkSpec::Tun(_) => "the TUN interface",
            LinkSpec::Packet(_) => "an AF_PACKET socket on",
            LinkSpec::Xdp(_) => "an AF_XDP socket on",
        };
        io::Error::new(e.kind(), format!("opening {socket} `{name}`: {e}"))
    };
    let (name, mac, queues) = match spec {
        LinkSpec::Tun(c) => {
            let tun = Tun::open(c).map_err(|e| what(&c.name, e))?;
            let name = tun.name().to_owned();
            let q = tun.into_queues().into_iter().map(KernelQueue::Tun);
            (name, None, q.collect::<Vec<_>>())
        }
        LinkSpec::Packet(c) => {
            let p = Packet::open(c).map_err(|e| what(&c.interface, e))?;
            let mac = EthernetAddress(p.mac());
            let q = p.into_queues().into_iter().map(KernelQueue::Packet);
            (c.interface.clone(), Some(mac), q.collect())
        }
        LinkSpec::Xdp(c) => {
            let x = Xdp::open(c).map_err(|e| what(&c.interface, e))?;
            let mac = EthernetAddress(x.mac());
            let q = x.into_queues().into_iter().map(KernelQueue::Xdp);
            (c.interface.clone(), Some(mac), q.collect())
        }
    };
    let switch = tap.cloned().unwrap_or_else(|| TapSwitch::new(0));
    Ok(OpenedLink {
        name,
        mac,
        queues: queues
            .into_iter()
            .map(|q| Tap::new(q, switch.clone()))
            .collect(),
    })
}

impl OpenedLink {
    /// `builder` with this link's MAC address, if it has one.
    pub fn builder(&self, builder: RuntimeBuilder) -> RuntimeBuilder {
        match self.mac {
            Some(mac) => builder.mac(mac),
            None => builder,
        }
    }
}

impl Net {
    /// A stack over the link `spec` opens, one shard per queue ([`Net::on_links`]), with
    /// the link's MAC address; its frames tapped through `tap` when given.
    pub fn open(
        builder: RuntimeBuilder,
        spec: &LinkSpec,
        tap: Option<&Arc<TapSwitch>>,
    ) -> io::Result<Net> {
        let link = open_link(spec, tap)?;
        let builder = link.builder(builder);
        Net::on_links(builder, link.queues)
    }
}

/// Each call to the queue the variant holds.
macro_rules! each {
    ($self:ident, $q:ident => $e:expr) => {
        match $self {
            KernelQueue::Tun($q) => $e,
            KernelQueue::Packet($q) => $e,
            KernelQueue::Xdp($q) => $e,
        }
    };
}

impl Device for KernelQueue {
    fn caps(&self) -> DeviceCaps {
        each!(self, q => q.caps())
    }
    fn recv(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        each!(self, q => q.recv(now, buf))
    }
    fn send(&mut self, now: Instant, frame: &[u8]) -> bool {
        each!(self, q => q.send(now, frame))
    }
    fn send_more(&mut self, now: Instant, frame: &[u8], more: bool) -> bool {
        each!(self, q => q.send_more(now, frame, more))
    }
    fn send_batch(&mut self, now: Instant, frames: &[&[u8]]) -> usize {
        each!(self, q => q.send_batch(now, frames))
    }
    fn tx_space(&mut self) -> Option<usize> {
        each!(self, q => q.tx_space())
    }
    // The qdisc bypass each queue asks for (`Device::tx_direct`).
    fn tx_direct(&self) -> bool {
        each!(self, q => q.tx_direct())
    }
    fn poll_at(&self) -> Option<Instant> {
        each!(self, q => q.poll_at())
    }
    fn rx_csum_unnecessary(&self) -> bool {
        each!(self, q => q.rx_csum_unnecessary())
    }
    fn trust_rx_csum(&mut self) {
        each!(self, q => q.trust_rx_csum())
    }
}

impl Sleep for KernelQueue {
    fn sleep_until(&mut self, clock: &dyn Clock, deadline: Option<Instant>) -> io::Result<bool> {
        each!(self, q => q.sleep_until(clock, deadline))
    }
}

/// Each queue's file is readable while a frame waits (a TUN packet, a packet socket's
/// receive block, an XDP receive ring entry).
impl Link for KernelQueue {
    /// An xdp queue with a frame in its mailbox must not sleep: its eventfd was cleared
    /// when the mailbox was last read.
    fn prepare_sleep(&mut self) -> bool {
        !matches!(self, KernelQueue::Xdp(q) if q.ready())
    }

    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        out.push(each!(self, q => q.fd()));
        // An xdp queue's mailbox of neighbour frames from the link's other queues.
        if let KernelQueue::Xdp(q) = self
            && let Some(wake) = q.wake_fd()
        {
            out.push(wake);
        }
    }
}

/// A tapped link sleeps as the link does.
impl<L: Link> Link for Tap<L> {
    fn prepare_sleep(&mut self) -> bool {
        self.device_mut().prepare_sleep()
    }
    fn sleep_fds<'a>(&'a self, out: &mut Vec<BorrowedFd<'a>>) {
        self.device().sleep_fds(out);
    }
    fn finish_sleep(&mut self) {
        self.device_mut().finish_sleep();
    }
}
