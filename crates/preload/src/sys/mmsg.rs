//! The exported `recvmmsg` and `sendmmsg`: on a ustack socket Linux's loops
//! ([`crate::mmsg`]) over the C API's `recvmsg`/`sendmsg`, on a kernel descriptor libc's.

use core::ffi::c_uint;
use std::time::Instant;

use libc::mmsghdr;

use super::*;

/// The caller's `(msgs, vlen)` as a slice, `vlen` cut to `UIO_MAXIOV` (`None`: NULL).
///
/// # Safety
/// `msgs` is NULL or points to `vlen` valid `mmsghdr`s not otherwise in use.
unsafe fn entries<'a>(msgs: *mut mmsghdr, vlen: c_uint) -> Option<&'a mut [mmsghdr]> {
    let n = usize::try_from(vlen).ok()?.min(crate::mmsg::UIO_MAXIOV);
    if n == 0 {
        return Some(&mut []);
    }
    if msgs.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { core::slice::from_raw_parts_mut(msgs, n) })
}

/// The bytes a message's iovecs hold.
///
/// # Safety
/// `m.msg_iov` is NULL or `m.msg_iovlen` valid iovecs.
unsafe fn iov_len(m: &msghdr) -> usize {
    if m.msg_iov.is_null() {
        return 0;
    }
    // SAFETY: per the contract.
    let v = unsafe { core::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) };
    v.iter().map(|i| i.iov_len).sum()
}

/// `recvmmsg` on ustack socket `fd` into `v`.
///
/// # Safety
/// `t` is NULL or a valid timespec; `v`'s messages' buffers are valid, as recvmsg(2)
/// takes them.
unsafe fn ustack_recvmmsg(fd: c_int, v: &mut [mmsghdr], flags: c_int, t: *mut timespec) -> c_int {
    // SAFETY: the caller's timespec, if any.
    let until = match unsafe { timespec_limit(t) } {
        Ok(limit) => limit.map(|d| Instant::now().checked_add(d).unwrap_or_else(Instant::now)),
        Err(e) => return fail(e),
    };
    let len = v.len();
    let mut one = |i: usize, f: c_int| -> Result<usize, c_int> {
        // SAFETY: the caller's msghdr, as recvmsg(2) takes it.
        let n = unsafe { u::ustack_recvmsg(fd, &mut v[i].msg_hdr, f) };
        let n = usize::try_from(n).map_err(|_| errno())?;
        v[i].msg_len = c_uint::try_from(n).unwrap_or(c_uint::MAX);
        Ok(n)
    };
    match crate::mmsg::recvmmsg(len, flags, until, &mut one) {
        Ok(n) => {
            // Linux `__sys_recvmmsg`: the time left written back when messages came.
            // SAFETY: the caller's timespec, if any.
            if let (Some(ts), Some(d), true) = (unsafe { t.as_mut() }, until, n > 0) {
                let left = d.saturating_duration_since(Instant::now());
                ts.tv_sec = libc::time_t::try_from(left.as_secs()).unwrap_or(libc::time_t::MAX);
                ts.tv_nsec = libc::c_long::from(left.subsec_nanos());
            }
            c_int::try_from(n).unwrap_or(c_int::MAX)
        }
        Err(e) => fail(e),
    }
}

/// `recvmmsg(2)`.
///
/// # Safety
/// As `recvmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    t: *mut timespec,
) -> c_int {
    on_fd!(fd, ustack => {
        // SAFETY: the caller's array of `vlen` messages.
        match unsafe { entries(msgs, vlen) } {
            // SAFETY: the caller's timespec and messages.
            Some(v) => unsafe { ustack_recvmmsg(fd, v, flags, t) },
            None => fail(libc::EFAULT),
        }
    // SAFETY: the caller's arguments.
    }, kernel => unsafe { real::recvmmsg(fd, msgs, vlen, flags, t) })
}

/// `sendmmsg(2)`.
///
/// # Safety
/// As `sendmmsg(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    on_fd!(fd, ustack => {
        // SAFETY: the caller's array of `vlen` messages.
        let Some(v) = (unsafe { entries(msgs, vlen) }) else {
            return fail(libc::EFAULT);
        };
        let len = v.len();
        let mut one = |i: usize| -> Result<(usize, usize), c_int> {
            // SAFETY: the caller's msghdr, as sendmsg(2) takes it.
            let n = unsafe { u::ustack_sendmsg(fd, &v[i].msg_hdr, flags) };
            let n = usize::try_from(n).map_err(|_| errno())?;
            v[i].msg_len = c_uint::try_from(n).unwrap_or(c_uint::MAX);
            // SAFETY: the caller's iovecs, which sendmsg just read.
            Ok((n, unsafe { iov_len(&v[i].msg_hdr) }))
        };
        match crate::mmsg::sendmmsg(len, &mut one) {
            Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
            Err(e) => fail(e),
        }
    // SAFETY: the caller's arguments.
    }, kernel => unsafe { real::sendmmsg(fd, msgs, vlen, flags) })
}
