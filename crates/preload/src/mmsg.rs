//! `recvmmsg(2)` and `sendmmsg(2)` on a ustack socket: Linux's loops (net/socket.c,
//! `do_recvmmsg` and `__sys_sendmmsg`) over one `recvmsg`/`sendmsg` per message, in safe
//! Rust; the FFI (`sys::mmsg`) hands in the per-message call.

use std::time::Instant;

/// Linux's `UIO_MAXIOV`: `vlen` is cut to it (Linux `__sys_sendmmsg`, `do_recvmmsg`).
pub const UIO_MAXIOV: usize = 1024;

/// Receive message `i` with these flags: its byte count, or an errno.
pub type RecvOne<'a> = &'a mut dyn FnMut(usize, i32) -> Result<usize, i32>;

/// Send message `i`: `(bytes taken, bytes it holds)`, or an errno.
pub type SendOne<'a> = &'a mut dyn FnMut(usize) -> Result<(usize, usize), i32>;

/// `recvmmsg(2)` (Linux `do_recvmmsg`): messages `0..vlen` in turn, each by `one`, with
/// `flags` less `MSG_WAITFORONE`; after the first, `MSG_WAITFORONE` adds `MSG_DONTWAIT`.
/// The timeout (`until`) is looked at only after a message is received (so a blocking
/// call waits for the first one whatever it says, as Linux's does): past it, the count so
/// far. An error ends the loop: it is returned if nothing was received, else the count
/// (Linux keeps that error in `sk_err` for the next call unless it is `EAGAIN`; here it is
/// dropped, see docs/preload.md).
pub fn recvmmsg(
    vlen: usize,
    flags: i32,
    until: Option<Instant>,
    one: RecvOne<'_>,
) -> Result<usize, i32> {
    let vlen = vlen.min(UIO_MAXIOV);
    let mut f = flags & !libc::MSG_WAITFORONE;
    let mut got = 0;
    while got < vlen {
        if let Err(e) = one(got, f) {
            return if got == 0 { Err(e) } else { Ok(got) };
        }
        got += 1;
        if flags & libc::MSG_WAITFORONE != 0 {
            f |= libc::MSG_DONTWAIT;
        }
        if until.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    Ok(got)
}

/// `sendmmsg(2)` (Linux `__sys_sendmmsg`): messages `0..vlen` in turn, each by `one`.
/// A message taken only in part (a non-blocking stream with a full send buffer) counts
/// and ends the loop; an error ends it, returned only if no message was sent.
pub fn sendmmsg(vlen: usize, one: SendOne<'_>) -> Result<usize, i32> {
    let vlen = vlen.min(UIO_MAXIOV);
    let mut sent = 0;
    while sent < vlen {
        match one(sent) {
            Err(e) if sent == 0 => return Err(e),
            Err(_) => break,
            Ok((n, want)) => {
                sent += 1;
                if n < want {
                    break;
                }
            }
        }
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn waitforone_makes_every_message_after_the_first_non_blocking() {
        let mut seen = Vec::new();
        // Two messages queued, then nothing (EAGAIN).
        let n = recvmmsg(5, libc::MSG_WAITFORONE, None, &mut |i, f| {
            seen.push(f);
            if i < 2 { Ok(10) } else { Err(libc::EAGAIN) }
        });
        assert_eq!(n, Ok(2));
        assert_eq!(seen, vec![0, libc::MSG_DONTWAIT, libc::MSG_DONTWAIT]);
    }

    #[test]
    fn an_error_is_returned_only_before_the_first_message() {
        assert_eq!(
            recvmmsg(3, 0, None, &mut |_, _| Err(libc::EAGAIN)),
            Err(libc::EAGAIN)
        );
        let r = recvmmsg(3, libc::MSG_DONTWAIT, None, &mut |i, _| {
            if i == 0 { Ok(1) } else { Err(libc::ECONNRESET) }
        });
        assert_eq!(r, Ok(1));
        assert_eq!(
            recvmmsg(0, 0, None, &mut |_, _| panic!("none asked")),
            Ok(0)
        );
        assert_eq!(recvmmsg(5000, 0, None, &mut |_, _| Ok(1)), Ok(UIO_MAXIOV));
    }

    #[test]
    fn the_timeout_is_looked_at_after_each_message() {
        // Already past: the first message is still taken, then the loop ends.
        let past = Instant::now();
        let mut calls = 0;
        let r = recvmmsg(4, 0, Some(past), &mut |_, _| {
            calls += 1;
            Ok(3)
        });
        assert_eq!((r, calls), (Ok(1), 1));
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(recvmmsg(4, 0, Some(later), &mut |_, _| Ok(3)), Ok(4));
    }

    #[test]
    fn sendmmsg_stops_at_a_partial_message_or_an_error() {
        let r = sendmmsg(4, &mut |i| Ok(if i == 1 { (5, 9) } else { (9, 9) }));
        assert_eq!(r, Ok(2));
        let r = sendmmsg(4, &mut |i| {
            if i < 3 { Ok((1, 1)) } else { Err(libc::EPIPE) }
        });
        assert_eq!(r, Ok(3));
        assert_eq!(sendmmsg(4, &mut |_| Err(libc::EPIPE)), Err(libc::EPIPE));
        assert_eq!(sendmmsg(2000, &mut |_| Ok((1, 1))), Ok(UIO_MAXIOV));
    }
}
