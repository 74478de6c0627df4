//! Errors as C sees them: an errno with Linux's value and a message, the last one per
//! thread (`ustack_errmsg`).

use std::cell::RefCell;
use std::ffi::CString;
use std::io;

/// A failed call: the errno it sets and what went wrong, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Linux's errno value (`libc::ECONNREFUSED`, ...).
    pub errno: i32,
    /// What failed, for `ustack_errmsg`.
    pub msg: String,
}

impl Error {
    /// An error with `errno` and a message.
    pub fn new(errno: i32, msg: impl Into<String>) -> Error {
        Error {
            errno,
            msg: msg.into(),
        }
    }

    /// `EBADF`: `fd` is not one of ours.
    pub fn badf(fd: i32) -> Error {
        Error::new(
            libc::EBADF,
            format!("{fd} is not an open ustack descriptor"),
        )
    }
}

/// The calls' result.
pub type Result<T> = core::result::Result<T, Error>;

/// The errno of an [`io::Error`]: its OS code if it has one (ustack's errors carry Linux's),
/// else the errno Linux gives for its kind.
pub fn errno_of(e: &io::Error) -> i32 {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    use io::ErrorKind as K;
    match e.kind() {
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EPERM,
        K::ConnectionRefused => libc::ECONNREFUSED,
        K::ConnectionReset => libc::ECONNRESET,
        K::ConnectionAborted => libc::ECONNABORTED,
        K::NotConnected => libc::ENOTCONN,
        K::AddrInUse => libc::EADDRINUSE,
        K::AddrNotAvailable => libc::EADDRNOTAVAIL,
        K::BrokenPipe => libc::EPIPE,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::InvalidInput | K::InvalidData => libc::EINVAL,
        K::TimedOut => libc::ETIMEDOUT,
        K::Interrupted => libc::EINTR,
        K::Unsupported => libc::EOPNOTSUPP,
        K::OutOfMemory => libc::ENOMEM,
        _ => libc::EIO,
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error {
            errno: errno_of(&e),
            msg: e.to_string(),
        }
    }
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Remember `e` as this thread's last error (what `ustack_errmsg` returns).
pub fn set_last(e: &Error) {
    let text = format!("{} ({})", e.msg, io::Error::from_raw_os_error(e.errno));
    // A message with a NUL in it keeps the part before.
    let c = CString::new(text).unwrap_or_else(|e| {
        let n = e.nul_position();
        let mut v = e.into_vec();
        v.truncate(n);
        CString::new(v).unwrap_or_default()
    });
    LAST.with(|l| *l.borrow_mut() = c);
}

/// This thread's last error message, as a NUL-terminated string that stays valid until
/// the thread's next failing call: `f` sees it.
pub fn with_last<T>(f: impl FnOnce(&CString) -> T) -> T {
    LAST.with(|l| f(&l.borrow()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_codes_pass_through_and_kinds_map_to_linux_values() {
        let refused = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(errno_of(&refused), 111);
        let timed = io::Error::new(io::ErrorKind::TimedOut, "connection timed out");
        assert_eq!(errno_of(&timed), 110);
        let gone = io::Error::new(io::ErrorKind::BrokenPipe, "loop stopped");
        assert_eq!(errno_of(&gone), 32);
        assert_eq!(errno_of(&io::Error::other("x")), libc::EIO);
    }

    #[test]
    fn the_last_message_names_the_error_and_the_errno() {
        set_last(&Error::badf(42));
        let s = with_last(|c| c.to_string_lossy().into_owned());
        assert!(s.contains("42 is not an open ustack descriptor"), "{s}");
        assert!(s.contains("os error 9"), "{s}");
        set_last(&Error::new(libc::EINVAL, "a\0b"));
        assert!(with_last(|c| c.to_bytes().starts_with(b"a")));
    }
}
