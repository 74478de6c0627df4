//! The device crate's system layer: the only place in the workspace where `unsafe` is
//! allowed.
//!
//! Each module wraps one kernel interface in a small safe API whose preconditions are
//! checked at run time, so that the safe device code above it (and the peer at the other
//! end of a shared link) cannot cause undefined behaviour. Every `unsafe` block carries a
//! `// SAFETY:` line saying why it is sound. Modelled on smoltcp's `src/phy/sys/` and mio's
//! `src/sys/` (docs/design EXAMPLES.md item 14).
//!
//! - [`shm`]: a sealed memfd mapped `MAP_SHARED`, accessed only through atomics and
//!   bounded, volatile copies (for [`crate::shm`]).
//! - [`tun`]: `TUNSETIFF` and the interface MTU ioctls on a `struct ifreq` (for
//!   [`crate::tun`]).

#![allow(unsafe_code)]

pub(crate) mod shm;
pub(crate) mod tun;
