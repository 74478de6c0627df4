//! A shared mapping: of a sealed memfd, for [`crate::shm`], or of a socket's kernel
//! rings, for [`crate::packet`] (`AF_PACKET` `PACKET_RX_RING`/`PACKET_TX_RING`).
//!
//! The region is shared with another party that may be buggy or hostile (the peer process
//! of a shm link), or that writes into it concurrently by design (the kernel filling a
//! packet ring): it can write any bytes anywhere in the region at any moment, without
//! synchronising with us. The API here is built so that this can never turn into undefined
//! behaviour on our side:
//!
//! - **No references to shared bytes.** Safe code never gets a `&[u8]` or `&mut [u8]`
//!   into the region (those would promise Rust that the bytes do not change underneath).
//!   Frame bytes move only through [`Mapping::read`] (volatile loads, or for a large
//!   frame one `rep movsb` in an `asm!` block, into a private buffer: each shared byte is
//!   read exactly once, so the compiler can neither re-read a
//!   value after it was checked nor assume two reads agree) and [`Mapping::write`]
//!   (a plain `memcpy` into the region: nothing of ours reads those bytes back, and the
//!   Release store that publishes them keeps the compiler from dropping or delaying it).
//! - **Control words are atomics.** [`Mapping::u32_at`] / [`Mapping::u64_at`] hand out
//!   `&AtomicU32` / `&AtomicU64`. Atomics have interior mutability, so concurrent changes
//!   by the peer are exactly what the type allows; every bit pattern is a valid integer,
//!   and the peer can at worst make us read a wrong number, which callers validate.
//! - **Bounds are checked here**, on every access, against the mapped length, with
//!   overflow-checked arithmetic: an index from the peer can never reach outside the map.
//! - **No SIGBUS.** A file mapping faults with SIGBUS where the file is shorter than the
//!   mapping. [`Mapping::map`] maps only a memfd sealed with `F_SEAL_SHRINK` (no one,
//!   including its creator, can shrink it any more: memfd_create(2), fcntl(2) "File
//!   Sealing") and only up to its size measured after the seal was verified.
//!   [`Mapping::map_socket`] maps a socket's rings, whose pages the kernel allocated when
//!   the rings were set up and keeps until the last mapping of them goes (it refuses to
//!   change the rings of a socket while they are mapped, and refuses a mapping larger than
//!   the rings).

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::SealFlags;
use rustix::mm::{MapFlags, ProtFlags};

/// Regions up to this size are pre-faulted (`MAP_POPULATE`), so that the first frames
/// through a fresh link do not pay for page faults.
const POPULATE_MAX: usize = 256 << 20;

/// [`Mapping::read`]s of at least this many bytes copy with one `rep movsb` (x86-64):
/// on CPUs with fast string moves (ERMS/FSRM) it moves a cache line per cycle or more,
/// where the 16-byte volatile loop below moves 16 bytes; shorter frames take the loop,
/// which has no start-up cost.
const REP_MOVSB_MIN: usize = 512;

/// A `MAP_SHARED`, read-write mapping of a whole sealed memfd. Unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Mapping` is an address range, not data: every access through it goes through
// atomics or volatile/bulk copies with bounds checks (see the module docs), which are sound
// from any thread at any time, and the range stays mapped until the `Mapping` is dropped.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`: `&Mapping` only offers atomic loads/stores and copies, all of
// which tolerate concurrent use (the peer process already writes concurrently).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all of `fd`, which must be a memfd sealed against shrinking (`F_SEAL_SHRINK`);
    /// `expect_len`, if given, must equal its size. Errors: `InvalidData` if the seal is
    /// missing or the size is wrong or zero; the OS error if `fcntl`, `fstat` or `mmap`
    /// fail.
    pub(crate) fn map(fd: BorrowedFd<'_>, expect_len: Option<usize>) -> io::Result<Mapping> {
        // The seal first, then the size: once F_SEAL_SHRINK is set it cannot be removed,
        // so the size read afterwards can only grow (or not change, with F_SEAL_GROW).
        let seals = rustix::fs::fcntl_get_seals(fd)?;
        if !seals.contains(SealFlags::SHRINK) {
            return Err(invalid("shm: memfd is not sealed against shrinking"));
        }
        let size = rustix::fs::fstat(fd)?.st_size;
        let len = usize::try_from(size).map_err(|_| invalid("shm: memfd size"))?;
        if len == 0 || len > isize::MAX as usize || expect_len.is_some_and(|e| e != len) {
            return Err(invalid("shm: memfd size does not match the region"));
        }
        let mut flags = MapFlags::SHARED;
        if len <= POPULATE_MAX {
            flags |= MapFlags::POPULATE;
        }
        // SAFETY: a null hint lets the kernel choose a fresh address range, so no existing
        // memory is replaced; `len` is non-zero and within the file, which cannot shrink.
        let ptr = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                fd.as_fd(),
                0,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| invalid("shm: mmap at 0"))?;
        Ok(Mapping { ptr, len })
    }

    /// Maps `len` bytes of the rings of socket `fd` at `offset` (an `AF_PACKET` socket
    /// after `PACKET_RX_RING`/`PACKET_TX_RING`: offset 0, `len` their total size; an
    /// `AF_XDP` socket: one ring at its `XDP_PGOFF_*`), read-write, shared with the
    /// kernel, pre-faulted. The OS error if `mmap` fails (`EINVAL` when `len` is larger
    /// than the ring).
    pub(crate) fn map_socket(fd: BorrowedFd<'_>, len: usize, offset: u64) -> io::Result<Mapping> {
        if len == 0 || len > isize::MAX as usize {
            return Err(invalid("mmap: ring size"));
        }
        // SAFETY: a null hint lets the kernel choose a fresh address range, so no existing
        // memory is replaced; the kernel checks `len` and `offset` against the socket's
        // rings (packet_mmap: EINVAL unless exactly their size; xsk_mmap: EINVAL if larger
        // than the ring) and backs every page.
        let ptr = unsafe {
            rustix::mm::mmap(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                offset,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| invalid("mmap at 0"))?;
        Ok(Mapping { ptr, len })
    }

    /// A private anonymous mapping of `len` bytes (zeroed, pre-faulted): an `AF_XDP`
    /// UMEM, which the kernel pins and writes received frames into.
    pub(crate) fn map_anonymous(len: usize) -> io::Result<Mapping> {
        if len == 0 || len > isize::MAX as usize {
            return Err(invalid("mmap: region size"));
        }
        // SAFETY: a null hint lets the kernel choose a fresh address range, so no existing
        // memory is replaced; an anonymous mapping has no file to shrink under it.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::POPULATE,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| invalid("mmap at 0"))?;
        Ok(Mapping { ptr, len })
    }

    /// The mapping's address, for registering it with the kernel (`XDP_UMEM_REG`).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Address of `off` if `[off, off + size)` lies in the mapping and `off` is a multiple
    /// of `align`.
    #[inline]
    fn checked(&self, off: usize, size: usize, align: usize) -> Option<*mut u8> {
        let end = off.checked_add(size)?;
        if end > self.len || !off.is_multiple_of(align) {
            return None;
        }
        // SAFETY: `off <= end <= len`, so the result stays inside (or one past) the mapped
        // allocation that `ptr` points to.
        Some(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// The 32-bit control word at byte offset `off`.
    ///
    /// Offsets come from the validated layout, never from the peer; a bad one is a bug in
    /// this crate and panics.
    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        let p = self
            .checked(off, 4, align_of::<AtomicU32>())
            .expect("shm: control word offset outside the region");
        // SAFETY: `p` is in bounds and aligned for `AtomicU32` (checked), the memory is
        // mapped for as long as `&self` lives, and `AtomicU32` may alias memory that others
        // (the peer) modify concurrently: all its accesses are atomic and all bit patterns
        // are valid `u32`s.
        unsafe { &*p.cast::<AtomicU32>() }
    }

    /// The 64-bit control word at byte offset `off`. Panics like [`u32_at`](Self::u32_at).
    #[inline]
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        let p = self
            .checked(off, 8, align_of::<AtomicU64>())
            .expect("shm: control word offset outside the region");
        // SAFETY: as in `u32_at`, for `AtomicU64` (8-byte aligned, checked).
        unsafe { &*p.cast::<AtomicU64>() }
    }

    /// Copies `dst.len()` bytes from offset `off` into `dst`. Returns false (copying
    /// nothing) if the range is not inside the mapping.
    ///
    /// Every shared byte is loaded once with a volatile load, so what lands in `dst` is a
    /// snapshot the peer can no longer change; checks belong on `dst`, never on the region.
    #[inline]
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        let Some(src) = self.checked(off, dst.len(), 1) else {
            return false;
        };
        let n = dst.len();
        #[cfg(target_arch = "x86_64")]
        if n >= REP_MOVSB_MIN {
            // SAFETY: `[src, src + n)` is inside the checked range and `dst` is our own
            // slice of `n` bytes; the two do not overlap (`dst` is private memory, never
            // the region). `rep movsb` copies `n` bytes forward (the ABI guarantees the
            // direction flag clear at a call boundary and nothing here sets it), reading
            // each source byte once; the compiler cannot see into the `asm!` block, so it
            // can neither re-read the region nor assume anything about the bytes copied,
            // as with the volatile loads below. No stack, flags preserved.
            unsafe {
                core::arch::asm!(
                    "rep movsb",
                    inout("rcx") n => _,
                    inout("rsi") src.cast_const() => _,
                    inout("rdi") dst.as_mut_ptr() => _,
                    options(nostack, preserves_flags),
                );
            }
            return true;
        }
        let mut i = 0;
        // Bytes up to a 16-byte boundary of the source (none for slot starts, which are
        // 64-byte aligned), then 16-byte vectors (SSE2, part of x86-64) or 8-byte words,
        // then the tail.
        while i < n && !(src.addr() + i).is_multiple_of(16) {
            // SAFETY: `src + i` is inside the checked range `[src, src + n)`; a volatile
            // load of a `u8` from mapped memory is sound whatever the peer writes there.
            dst[i] = unsafe { src.add(i).read_volatile() };
            i += 1;
        }
        #[cfg(target_arch = "x86_64")]
        while i + 16 <= n {
            use core::arch::x86_64::__m128i;
            // SAFETY: `[src + i, src + i + 16)` is inside the checked range and 16-byte
            // aligned (the loop above aligned it); `__m128i` is plain bits, any pattern is
            // valid. The store goes to `dst[i..i + 16]`, in bounds of our own slice.
            unsafe {
                let v = src.add(i).cast::<__m128i>().read_volatile();
                dst.as_mut_ptr().add(i).cast::<__m128i>().write_unaligned(v);
            }
            i += 16;
        }
        while i + 8 <= n {
            // SAFETY: `[src + i, src + i + 8)` is inside the checked range and 8-byte
            // aligned (16-byte aligned above); every bit pattern is a valid `u64`.
            let word = unsafe { src.add(i).cast::<u64>().read_volatile() };
            dst[i..i + 8].copy_from_slice(&word.to_ne_bytes());
            i += 8;
        }
        while i < n {
            // SAFETY: as for the leading bytes.
            dst[i] = unsafe { src.add(i).read_volatile() };
            i += 1;
        }
        true
    }

    /// Copies `src` to offset `off`. Returns false (copying nothing) if the range is not
    /// inside the mapping.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> bool {
        let Some(dst) = self.checked(off, src.len(), 1) else {
            return false;
        };
        // SAFETY: `[dst, dst + len)` is inside the mapping (checked) and cannot overlap
        // `src`, a Rust slice in private memory. No Rust reference to the shared bytes
        // exists, so nothing assumes they stay as written; the peer may read or overwrite
        // them concurrently, which can only garble the frame it receives, never our memory.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what `mmap` returned; the range is unmapped once.
        // Every `&AtomicU32`/`&AtomicU64` handed out borrows `self`, so none outlives it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the `rep movsb` threshold, from aligned and unaligned offsets,
    /// copies exactly the bytes at that offset (none short, none past the end).
    #[test]
    fn read_copies_exactly_the_range_asked() {
        let len = 1 << 17;
        let map = Mapping::map_anonymous(len).expect("mapping");
        let pattern: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        assert!(map.write(0, &pattern));
        for off in [0, 1, 15, 64, 4093] {
            for n in [
                0,
                1,
                17,
                REP_MOVSB_MIN - 1,
                REP_MOVSB_MIN,
                REP_MOVSB_MIN + 1,
                4097,
                65_549,
            ] {
                let mut dst = vec![0xee; n + 8];
                assert!(map.read(off, &mut dst[..n]), "{off} {n}");
                assert_eq!(&dst[..n], &pattern[off..off + n], "{off} {n}");
                assert_eq!(dst[n..], [0xee; 8], "nothing written past {n} bytes");
            }
        }
        // Out of range: refused, nothing copied.
        let mut dst = vec![0xee; 1024];
        assert!(!map.read(len - 1000, &mut dst));
        assert!(dst.iter().all(|&b| b == 0xee));
        assert!(!map.read(usize::MAX - 10, &mut dst));
    }
}
