/* ustack's C API (libustack.so). Generated from crates/capi/src/ffi.rs by cbindgen:
 * do not edit; see docs/api.md "C API". Every call is thread-safe; errors are -1 (or NULL)
 * with errno set to Linux's value, and ustack_errmsg() says more. */

#ifndef USTACK_H
#define USTACK_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <poll.h>
#include <sys/epoll.h>

// A ustack stack started by [`ustack_stack_open`] (opaque).
typedef struct ustack_t ustack_t;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Start a stack as `config` says (space-separated `key=value`, see docs/api.md "C API"):
// e.g. `"link=sim addr=10.0.0.1/24 peer=10.0.0.2/24"`. NULL with `errno` set on failure
// ([`ustack_errmsg`] says why). The first stack opened is the default one
// ([`ustack_socket`]).
//
// # Safety
// `config` is a NUL-terminated string.
struct ustack_t *ustack_stack_open(const char *config);

// A `link=sim` stack's other end (owned by `s`: closed with it); NULL otherwise.
//
// # Safety
// `s` is NULL or from [`ustack_stack_open`], not yet closed.
struct ustack_t *ustack_stack_peer(struct ustack_t *s);

// Make `s` the stack [`ustack_socket`] and [`ustack_epoll_create1`] use. 0, or -1
// (`EINVAL`) for NULL.
//
// # Safety
// `s` is NULL or a live stack.
int ustack_stack_default(struct ustack_t *s);

// Stop `s` (and its sim peer): every descriptor on it is closed, the loop threads stop.
// Close sockets and join the threads using them first. 0; -1 with `EINVAL` for a pointer
// that is not an open stack from [`ustack_stack_open`] (a peer, NULL, one closed already).
//
// # Safety
// `s` is not used again after it is closed.
int ustack_stack_close(struct ustack_t *s);

// This thread's last error message (valid until its next failing call; "" if none).
const char *ustack_errmsg(void);

// 1 if `fd` is a ustack descriptor (a socket or an epoll set), else 0.
int ustack_is_socket(int fd);

// `socket(2)` on the default stack: `AF_INET`, `SOCK_STREAM` or `SOCK_DGRAM` (with
// `SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
int ustack_socket(int domain, int ty, int protocol);

// `socket(2)` on stack `s`.
//
// # Safety
// `s` is NULL (the default stack) or a live stack.
int ustack_socket_on(struct ustack_t *s, int domain, int ty, int protocol);

// `bind(2)`.
//
// # Safety
// `addr` points at `len` readable bytes.
int ustack_bind(int fd, const struct sockaddr *addr, socklen_t len);

// `listen(2)`.
int ustack_listen(int fd, int backlog);

// `accept4(2)`.
//
// # Safety
// `addr`/`len` as for `accept(2)` (both may be NULL).
int ustack_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);

// `accept(2)`.
//
// # Safety
// As [`ustack_accept4`].
int ustack_accept(int fd, struct sockaddr *addr, socklen_t *len);

// `connect(2)`.
//
// # Safety
// `addr` points at `len` readable bytes.
int ustack_connect(int fd, const struct sockaddr *addr, socklen_t len);

// `recvfrom(2)`: `MSG_DONTWAIT`, `MSG_WAITALL`.
//
// # Safety
// `buf` has `len` writable bytes; `addr`/`addrlen` as for `recvfrom(2)`.
ssize_t ustack_recvfrom(int fd,
                        void *buf,
                        size_t len,
                        int flags,
                        struct sockaddr *addr,
                        socklen_t *addrlen);

// `recv(2)`.
//
// # Safety
// `buf` has `len` writable bytes.
ssize_t ustack_recv(int fd, void *buf, size_t len, int flags);

// `read(2)`.
//
// # Safety
// `buf` has `len` writable bytes.
ssize_t ustack_read(int fd, void *buf, size_t len);

// `readv(2)`.
//
// # Safety
// `iov` has `n` iovecs with writable, non-overlapping buffers.
ssize_t ustack_readv(int fd, const struct iovec *iov, int n);

// `recvmsg(2)`: the data into `msg_iov`, the sender into `msg_name` (UDP); no control
// messages (`msg_controllen` becomes 0), `msg_flags` 0.
//
// # Safety
// `msg` is a valid `struct msghdr` whose buffers are the caller's.
ssize_t ustack_recvmsg(int fd, struct msghdr *msg, int flags);

// `sendto(2)`: `MSG_DONTWAIT`, `MSG_NOSIGNAL` (no signal is ever raised), `MSG_MORE`
// (ignored). On a blocking stream socket every byte is taken before it returns (the
// call waits for send-buffer room, as Linux's `tcp_sendmsg`), unless an error or
// `SO_SNDTIMEO` ends it (then the count taken, if any); so are `send`, `write`, `writev`
// and `sendmsg`. A non-blocking one takes what fits.
//
// # Safety
// `buf` has `len` readable bytes; `addr` NULL or `addrlen` readable bytes.
ssize_t ustack_sendto(int fd,
                      const void *buf,
                      size_t len,
                      int flags,
                      const struct sockaddr *addr,
                      socklen_t addrlen);

// `send(2)`.
//
// # Safety
// `buf` has `len` readable bytes.
ssize_t ustack_send(int fd, const void *buf, size_t len, int flags);

// `write(2)`.
//
// # Safety
// `buf` has `len` readable bytes.
ssize_t ustack_write(int fd, const void *buf, size_t len);

// `writev(2)`.
//
// # Safety
// `iov` has `n` iovecs with readable buffers.
ssize_t ustack_writev(int fd, const struct iovec *iov, int n);

// `sendmsg(2)`: `msg_iov` gathered, to `msg_name` if set; control messages refused
// (`EOPNOTSUPP`).
//
// # Safety
// `msg` is a valid `struct msghdr` whose buffers are the caller's.
ssize_t ustack_sendmsg(int fd, const struct msghdr *msg, int flags);

// `shutdown(2)`.
int ustack_shutdown(int fd, int how);

// `close(2)` of a ustack descriptor (a socket or an epoll set). The socket closes with
// its last descriptor (see [`ustack_dup`]).
int ustack_close(int fd);

// `dup(2)`: a new descriptor for the same socket (the lowest free number): the socket
// closes when every descriptor of it is closed; `O_NONBLOCK` is shared, `FD_CLOEXEC`
// is each descriptor's own (clear on the new one).
int ustack_dup(int fd);

// `dup2(2)`: descriptor `to` refers to `fd`'s socket; whatever file was at `to` (the
// kernel's or ustack's) is closed first, atomically. `to` if `fd == to` and `fd` is
// valid.
int ustack_dup2(int fd, int to);

// `dup3(2)`: as [`ustack_dup2`], `flags` 0 or `O_CLOEXEC`; `EINVAL` if `fd == to`.
int ustack_dup3(int fd, int to, int flags);

// `getsockopt(2)`: see docs/api.md for the options; `ENOPROTOOPT` for others.
//
// # Safety
// `optlen` is valid; `optval` has `*optlen` writable bytes.
int ustack_getsockopt(int fd, int level, int name, void *optval, socklen_t *optlen);

// `setsockopt(2)`.
//
// # Safety
// `optval` has `optlen` readable bytes.
int ustack_setsockopt(int fd, int level, int name, const void *optval, socklen_t optlen);

// `getsockname(2)`.
//
// # Safety
// `addr`/`len` as for `getsockname(2)`.
int ustack_getsockname(int fd, struct sockaddr *addr, socklen_t *len);

// `getpeername(2)`.
//
// # Safety
// `addr`/`len` as for `getpeername(2)`.
int ustack_getpeername(int fd, struct sockaddr *addr, socklen_t *len);

// `fcntl(2)`, not variadic: `F_GETFL` (`O_RDWR`, plus `O_NONBLOCK`), `F_SETFL`
// (`O_NONBLOCK`), `F_GETFD`/`F_SETFD` (`FD_CLOEXEC`), `F_DUPFD`/`F_DUPFD_CLOEXEC` (as
// [`ustack_dup`], the lowest free number from `arg` on).
int ustack_fcntl(int fd, int cmd, long arg);

// `ioctl(2)`, not variadic: `FIONBIO` (`arg`: `int *`), `FIONREAD` (`arg`: `int *`);
// `ENOTTY` for other requests.
//
// # Safety
// `arg` points at an `int` (read for `FIONBIO`, written for `FIONREAD`).
int ustack_ioctl(int fd, unsigned long request, void *arg);

// `poll(2)` over ustack descriptors (of one stack).
//
// # Safety
// `fds` has `n` valid `struct pollfd`s.
int ustack_poll(struct pollfd *fds, nfds_t n, int timeout);

// `epoll_create1(2)`: `EPOLL_CLOEXEC`.
int ustack_epoll_create1(int flags);

// `epoll_create(2)` (`size` > 0, otherwise unused).
int ustack_epoll_create(int size);

// `epoll_ctl(2)`.
//
// # Safety
// `event` is NULL (`EPOLL_CTL_DEL`) or a valid `struct epoll_event`.
int ustack_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);

// `epoll_wait(2)`.
//
// # Safety
// `events` has room for `max` `struct epoll_event`s.
int ustack_epoll_wait(int epfd, struct epoll_event *events, int max, int timeout);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* USTACK_H */
