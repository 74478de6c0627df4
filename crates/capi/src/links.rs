//! The kernel links a C API stack runs over (`link=tun|packet|xdp`), opened by
//! [`ustack_net::open_link`] as the `ustack` tool's are, each queue tapped for
//! `ustack capture` on the LD_PRELOAD library's control socket.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use ustack_dev::capture::TapSwitch;
use ustack_dev::packet::PacketConfig;
use ustack_dev::tun::TunConfig;
use ustack_dev::xdp::XdpConfig;
use ustack_net::{KernelQueue, LinkSpec, Net, open_link};
use ustack_runtime::RuntimeBuilder;

use crate::config::LinkConfig;
use crate::error::{Error, Result, errno_of};

/// How many frames a capture holds before it drops (the control server drains it).
pub const TAP_LIMIT: usize = 65536;

/// The [`LinkSpec`] of a kernel link (`None` for `link=sim`).
pub fn spec(link: &LinkConfig) -> Option<LinkSpec> {
    Some(match link {
        LinkConfig::Sim { .. } => return None,
        LinkConfig::Tun {
            name,
            netns,
            queues,
            mtu,
        } => LinkSpec::Tun(TunConfig {
            name: name.clone(),
            queues: *queues,
            mtu: *mtu,
            netns: netns.clone(),
            offload: false,
        }),
        LinkConfig::Ethernet { kind, iface, netns } if kind == "packet" => {
            LinkSpec::Packet(PacketConfig {
                interface: iface.clone(),
                netns: netns.clone(),
                ..PacketConfig::default()
            })
        }
        LinkConfig::Ethernet { iface, netns, .. } => LinkSpec::Xdp(XdpConfig {
            interface: iface.clone(),
            netns: netns.clone(),
            ..XdpConfig::default()
        }),
    })
}

/// A TUN link's queue files: a `dup` of each (to attach and detach it) and its number.
pub type QueueFiles = Vec<(OwnedFd, i32)>;

/// A stack over the kernel link `link`, its frames tapped through `tap`; the interface's
/// name, and for a TUN link each queue's file (a `dup` to attach and detach it, and its
/// number) for `fork` ([`crate::sock::fork`]).
pub fn open_net(
    builder: RuntimeBuilder,
    link: &LinkConfig,
    tap: &Arc<TapSwitch>,
) -> Result<(Net, String, QueueFiles)> {
    let spec = spec(link).ok_or_else(|| Error::new(libc::EINVAL, "not a kernel link"))?;
    let fail = |e: std::io::Error| {
        Error::new(
            errno_of(&e),
            format!("ustack_stack_open: {} link: {e}", spec.kind()),
        )
    };
    let opened = open_link(&spec, Some(tap)).map_err(fail)?;
    let mut queues = Vec::new();
    for q in &opened.queues {
        if let KernelQueue::Tun(t) = q.device() {
            let fd = t.fd();
            queues.push((fd.try_clone_to_owned().map_err(fail)?, fd.as_raw_fd()));
        }
    }
    let name = opened.name.clone();
    let builder = opened.builder(builder);
    let net = Net::on_links(builder, opened.queues).map_err(fail)?;
    Ok((net, name, queues))
}
