//! Opening a device on a kernel interface, maybe inside another network namespace: the
//! checks every such device's configuration shares, and [`in_netns`].
//!
//! A TUN interface is created, and an `AF_PACKET` socket bound, in the network namespace
//! of the calling thread. [`in_netns`] runs the opening code on a short-lived thread of
//! its own that enters the namespace with `setns(2)` first, so no other thread changes
//! namespace; the files it opens keep working from any thread afterwards.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// Runs `open` in the network namespace named by `netns` (a `/proc/<pid>/ns/net` or
/// `/run/netns/<name>` file), or in the caller's if `None`. Errors name `what` (the
/// device kind) and the namespace file. What `open` makes (a TUN queue, a socket) stays
/// in that namespace and works from any thread.
pub fn in_netns<T: Send>(
    what: &str,
    netns: Option<&Path>,
    open: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let Some(path) = netns else {
        return open();
    };
    let ns = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: netns {}: {e}", path.display())))?;
    // setns(2) moves only the calling thread: do it on a thread of our own that ends once
    // the files are open.
    std::thread::scope(|s| {
        s.spawn(|| {
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("{what}: entering netns {}: {e}", path.display()),
                )
            })?;
            open()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other(format!("{what}: opening thread panicked"))))
    })
}

/// The checks of an interface name and a queue count every kernel-facing device's
/// configuration shares: `InvalidInput` naming `kind` (the device) and the bad field.
pub(crate) fn check_interface(kind: &str, name: &str, queues: usize, max: usize) -> io::Result<()> {
    if !crate::sys::netif::valid_name(name) {
        return Err(invalid(format!(
            "{kind}: interface name `{name}`: 1 to 15 bytes, no `/`, `:`, whitespace or NUL"
        )));
    }
    if queues == 0 || queues > max {
        return Err(invalid(format!("{kind}: {queues} queues: 1 to {max}")));
    }
    Ok(())
}

/// An `InvalidInput` error with `msg`.
pub(crate) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// An Ethernet interface as a device on it sees it: index, MAC, and caps (Ethernet, the
/// interface MTU), read in the calling thread's namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EthernetInterface {
    pub(crate) ifindex: u32,
    pub(crate) mac: [u8; 6],
    pub(crate) caps: crate::DeviceCaps,
}

/// Looks up interface `name` for device `kind`: errors name both (the OS error for an
/// interface that does not exist, `InvalidInput` for one that is not Ethernet).
pub(crate) fn ethernet_interface(kind: &str, name: &str) -> io::Result<EthernetInterface> {
    use crate::sys::netif;
    let ctx = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{kind}: {what} `{name}`: {e}"))
    };
    let ifindex = netif::index(name).map_err(|e| ctx("interface", e))?;
    let (mac, hwtype) = netif::hwaddr(name).map_err(|e| ctx("hardware address of", e))?;
    if hwtype != libc::ARPHRD_ETHER {
        return Err(invalid(format!(
            "{kind}: `{name}` is not an Ethernet interface (ARPHRD {hwtype})"
        )));
    }
    let mtu = netif::mtu(name).map_err(|e| ctx("MTU of", e))?;
    let caps = crate::DeviceCaps {
        medium: crate::Medium::Ethernet,
        mtu,
        gro_max_size: 0,
        gso_max_size: 0,
    };
    Ok(EthernetInterface { ifindex, mac, caps })
}
