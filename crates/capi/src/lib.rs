//! A C API over ustack: `libustack.so` and `include/ustack.h` (issue 14, item 1).
//!
//! POSIX-shaped calls on ustack sockets, each under libc's name with a `ustack_` prefix
//! (`ustack_socket`, `ustack_connect`, `ustack_epoll_wait` ...), with Linux's errno values,
//! blocking and non-blocking, callable from any thread. Built on [`ustack_net`], whose loop
//! threads run the stack: a call hands the loop a job, and a blocking call parks its
//! thread until the stack changes state. docs/api.md ("C API") tells how to build, link and
//! configure it.
//!
//! The modules: [`config`] parses `ustack_stack_open`'s string, [`links`] opens the kernel links (`tun`, `packet`, `xdp`), [`sock`] is the socket
//! layer in safe Rust (descriptors, calls, options, poll and epoll), [`opts`] the option
//! table and `struct tcp_info`, [`sockaddr`] the address conversions, [`error`] errno and
//! messages; [`ffi`] alone holds `unsafe`: the `extern "C"` functions.

pub mod config;
pub mod error;
pub mod ffi;
pub mod links;
pub mod opts;
pub mod sock;
pub mod sockaddr;
