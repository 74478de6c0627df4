//! `libustack_preload.so`: unmodified programs on ustack by `LD_PRELOAD` (issue 17).
//!
//! The library defines libc's socket calls (`socket`, `bind`, `read`, `poll`,
//! `epoll_wait` ...). A program started with `LD_PRELOAD=.../libustack_preload.so` calls
//! them instead of libc's: `AF_INET` stream and datagram sockets go to ustack through the
//! C API (crates/capi), everything else (files, pipes, Unix sockets, IPv6) to libc
//! untouched. docs/preload.md says what works, what does not yet, and how to configure
//! it (`USTACK_ADDR`, `USTACK_TUN`, `USTACK_NETNS` ...; `USTACK_CONTROL` serves
//! `ustack stat`, `ss` and `capture` with ustack-runtime's control server).
//!
//! The modules: [`config`] reads the environment, [`route`] decides where each call goes
//! and mixes ustack sockets with kernel files in `poll`, `select` and epoll sets, in safe
//! Rust; `sys` alone holds `unsafe`: the exported functions and libc's own (found by
//! `dlsym(RTLD_NEXT)`). `fcntl` and `ioctl`, C-variadic in libc, are defined with a fixed third argument (see `sys`).

pub mod config;
pub mod mmsg;
pub mod route;
mod sys;
