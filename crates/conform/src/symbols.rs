//! Symbols scripts use, with their Linux values: the values a backend receives are
//! Linux's (a ustack backend takes the same numbers, as its C API does).

/// The value of a symbol (`SOCK_STREAM`, `TCP_NODELAY`, `EPOLLIN`, ...), if known.
pub fn value(name: &str) -> Option<i64> {
    SYMBOLS.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

/// An errno's value from its name (`EINPROGRESS`).
pub fn errno_value(name: &str) -> Option<i32> {
    ERRNOS.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
}

/// An errno's name from its value, or the number as text.
pub fn errno_name(value: i32) -> String {
    ERRNOS
        .iter()
        .find(|(_, v)| *v == value)
        .map_or_else(|| format!("errno {value}"), |(n, _)| (*n).to_owned())
}

macro_rules! table {
    ($name:ident: $ty:ty = [$($sym:ident),* $(,)?]) => {
        const $name: &[(&str, $ty)] = &[$((stringify!($sym), libc::$sym as $ty)),*];
    };
}

table!(SYMBOLS: i64 = [
    AF_INET, AF_INET6, AF_UNSPEC, SOCK_STREAM, SOCK_DGRAM, SOCK_NONBLOCK, SOCK_CLOEXEC,
    IPPROTO_IP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_ICMP, SOL_SOCKET, SOL_TCP, SOL_IP,
    SO_REUSEADDR, SO_REUSEPORT, SO_KEEPALIVE, SO_LINGER, SO_RCVBUF, SO_SNDBUF, SO_ERROR,
    SO_RCVLOWAT, SO_SNDLOWAT, SO_OOBINLINE, SO_TYPE, SO_DOMAIN, SO_PROTOCOL, SO_ACCEPTCONN,
    TCP_NODELAY, TCP_MAXSEG, TCP_CORK, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_SYNCNT,
    TCP_LINGER2, TCP_DEFER_ACCEPT, TCP_WINDOW_CLAMP, TCP_INFO, TCP_QUICKACK, TCP_USER_TIMEOUT,
    TCP_NOTSENT_LOWAT, TCP_CONGESTION, TCP_FASTOPEN,
    F_GETFL, F_SETFL, F_GETFD, F_SETFD, O_RDWR, O_RDONLY, O_WRONLY, O_NONBLOCK, FD_CLOEXEC,
    SHUT_RD, SHUT_WR, SHUT_RDWR, MSG_PEEK, MSG_DONTWAIT, MSG_OOB, MSG_WAITALL, MSG_TRUNC,
    MSG_NOSIGNAL, MSG_MORE,
    POLLIN, POLLPRI, POLLOUT, POLLERR, POLLHUP, POLLNVAL, POLLRDNORM, POLLRDBAND, POLLWRNORM,
    POLLWRBAND, POLLRDHUP,
    EPOLLIN, EPOLLPRI, EPOLLOUT, EPOLLERR, EPOLLHUP, EPOLLRDNORM, EPOLLRDBAND, EPOLLWRNORM,
    EPOLLWRBAND, EPOLLRDHUP, EPOLLET, EPOLLONESHOT, EPOLLEXCLUSIVE,
    EPOLL_CTL_ADD, EPOLL_CTL_MOD, EPOLL_CTL_DEL, EPOLL_CLOEXEC,
]);

table!(ERRNOS: i32 = [
    EPERM, ENOENT, EINTR, EIO, EBADF, EAGAIN, ENOMEM, EACCES, EFAULT, EBUSY, EEXIST, ENODEV,
    EINVAL, ENFILE, EMFILE, ENOSPC, EPIPE, ERANGE, ENOSYS, ENOTSOCK, EDESTADDRREQ, EMSGSIZE,
    EPROTOTYPE, ENOPROTOOPT, EPROTONOSUPPORT, ESOCKTNOSUPPORT, EOPNOTSUPP, EPFNOSUPPORT,
    EAFNOSUPPORT, EADDRINUSE, EADDRNOTAVAIL, ENETDOWN, ENETUNREACH, ENETRESET, ECONNABORTED,
    ECONNRESET, ENOBUFS, EISCONN, ENOTCONN, ESHUTDOWN, ETIMEDOUT, ECONNREFUSED, EHOSTDOWN,
    EHOSTUNREACH, EALREADY, EINPROGRESS, ENOTSUP,
]);
