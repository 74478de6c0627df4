//! The device crate's system layer: the only place in the workspace where `unsafe` is
//! allowed.
//!
//! Each module wraps one kernel interface in a small safe API whose preconditions are
//! checked at run time, so that the safe device code above it (and the peer at the other
//! end of a shared link) cannot cause undefined behaviour. Every `unsafe` block carries a
//! `// SAFETY:` line saying why it is sound. Modelled on smoltcp's `src/phy/sys/` and mio's
//! `src/sys/` (docs/design EXAMPLES.md item 14).
//!
//! - [`mapping`]: a region shared with a peer process or the kernel (a sealed memfd for
//!   [`crate::shm`], a packet socket's rings for [`crate::packet`]), mapped `MAP_SHARED`,
//!   accessed only through atomics and bounded, volatile copies.
//! - [`tun`]: `TUNSETIFF` on a `struct ifreq` (for [`crate::tun`]).
//! - [`netif`]: the interface MTU and hardware address ioctls on a `struct ifreq`.
//! - [`packet`]: an `AF_PACKET` socket with `TPACKET_V3` rings: its socket options,
//!   `bind(2)` to an interface, statistics (for [`crate::packet`]).
//! - [`xdp`]: the `bpf(2)` calls of the `xdp` link: the `XSKMAP`, the redirect program
//!   as raw eBPF instructions, its attachment to an interface (for [`crate::xdp`]).

#![allow(unsafe_code)]

pub(crate) mod mapping;
pub(crate) mod netif;
pub(crate) mod packet;
pub(crate) mod tun;
pub(crate) mod xdp;
