//! The `bpf(2)` calls behind the `xdp` link, for [`crate::xdp`]: an `XSKMAP`
//! (`BPF_MAP_CREATE`), the redirect program (`BPF_PROG_LOAD`, eBPF instructions written
//! out here: no compiler at build time), the socket put into the map
//! (`BPF_MAP_UPDATE_ELEM`) and the program attached to an interface (`BPF_LINK_CREATE`,
//! generic mode). The `AF_XDP` socket, its UMEM registration, ring sizes and mapping
//! offsets go through rustix (`rustix::net::sockopt::set_xdp_*`), its rings through
//! [`super::mapping::Mapping`].
//!
//! Each `bpf(2)` call takes a `union bpf_attr`, of which a command reads its own leading
//! fields and requires the rest to be zero: here each command has a `#[repr(C)]` struct
//! of its fields, zero-padded to [`ATTR_LEN`] bytes, passed with that size.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The size passed for every `union bpf_attr` (the kernel zero-checks bytes past the
/// fields it knows, and accepts any size up to a page).
const ATTR_LEN: usize = 128;

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`'s `BPF_XDP`.
const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, after the kernel built the `sk_buff`.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver's own XDP (veth's: in its NAPI poll, per receive queue).
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// `BPF_FUNC_redirect_map`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`: the program's answer when no socket is in the map at the queue's index.
const XDP_PASS: i32 = 2;

/// One eBPF instruction (`struct bpf_insn`): opcode, destination and source registers
/// (low and high nibble), offset, immediate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// The redirect program, for the map `map_fd`:
///
/// ```text
/// r2 = *(u32 *)(r1 + 16)       ; xdp_md->rx_queue_index
/// r1 = map_fd ll               ; the XSKMAP (BPF_PSEUDO_MAP_FD)
/// r3 = XDP_PASS                ; what to do if no socket sits at that index
/// call bpf_redirect_map
/// exit                         ; r0: XDP_REDIRECT, or XDP_PASS
/// ```
fn program(map_fd: i32) -> [Insn; 6] {
    [
        insn(0x61, 2, 1, 16, 0),                    // BPF_LDX | BPF_MEM | BPF_W
        insn(0x18, 1, 1, 0, map_fd),                // BPF_LD | BPF_DW | BPF_IMM, src 1
        insn(0, 0, 0, 0, 0),                        // ... its upper 32 bits
        insn(0xb7, 3, 0, 0, XDP_PASS),              // BPF_ALU64 | BPF_MOV | BPF_K
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // BPF_JMP | BPF_CALL
        insn(0x95, 0, 0, 0, 0),                     // BPF_JMP | BPF_EXIT
    ]
}

/// `bpf(cmd, attr, ATTR_LEN)`: the attribute is a `#[repr(C)]` struct of plain integers
/// no larger than [`ATTR_LEN`], copied into a zeroed buffer of that size.
fn bpf<A: Copy>(cmd: libc::c_long, attr: &A) -> io::Result<libc::c_long> {
    const { assert!(size_of::<A>() <= ATTR_LEN) };
    let mut buf = [0u8; ATTR_LEN];
    // SAFETY: `attr` is a live `A` of `size_of::<A>()` initialised bytes (the structs
    // here have no padding: fields laid out to their alignment), copied into our own
    // buffer, which is large enough (checked at compile time).
    unsafe {
        core::ptr::copy_nonoverlapping(
            (attr as *const A).cast::<u8>(),
            buf.as_mut_ptr(),
            size_of::<A>(),
        );
    }
    // SAFETY: `buf` is a `union bpf_attr` of ATTR_LEN bytes that lives through the call;
    // the kernel reads it (and, for these commands, writes nothing back into it). Pointers
    // inside it (instructions, license, keys, values, log) point at live memory of the
    // caller's that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, buf.as_mut_ptr(), ATTR_LEN) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// A file descriptor the kernel just returned, owned from here on.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf: bad descriptor"))?;
    // SAFETY: `fd` was just returned by a successful bpf(2) call that creates a new file
    // descriptor (map, program, link); nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `XSKMAP` with `entries` slots (one per receive queue).
pub(crate) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct MapCreate {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
    }
    let attr = MapCreate {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_flags: 0,
    };
    owned(bpf(BPF_MAP_CREATE, &attr)?)
}

/// Puts the `AF_XDP` socket `xsk` into `map` at `key` (the receive queue it is bound to).
pub(crate) fn xskmap_insert(map: BorrowedFd<'_>, key: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct MapElem {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let value: u32 = xsk.as_raw_fd() as u32;
    let attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: (&raw const key) as u64,
        value: (&raw const value) as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &attr).map(|_| ())
}

/// Loads the redirect program for `map`. On a verifier refusal the error carries the
/// verifier's log.
pub(crate) fn load_redirect(map: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
        prog_name: [u8; 16],
        prog_ifindex: u32,
        expected_attach_type: u32,
    }
    let insns = program(map.as_raw_fd());
    let license = b"GPL\0";
    let mut log = vec![0u8; 64 * 1024];
    let mut name = [0u8; 16];
    name[..13].copy_from_slice(b"ustack_xskmap");
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: BPF_XDP,
    };
    match bpf(BPF_PROG_LOAD, &attr) {
        Ok(fd) => owned(fd),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err(io::Error::new(
                e.kind(),
                format!(
                    "BPF_PROG_LOAD: {e}: {}",
                    String::from_utf8_lossy(&log[..end]).trim()
                ),
            ))
        }
    }
}

/// Attaches `prog` to interface `ifindex` through a BPF link, in generic (SKB) mode or,
/// with `driver`, in the driver's mode; the program stays attached while the returned link
/// is open.
pub(crate) fn attach_xdp(prog: BorrowedFd<'_>, ifindex: u32, driver: bool) -> io::Result<OwnedFd> {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct LinkCreate {
        prog_fd: u32,
        target_ifindex: u32,
        attach_type: u32,
        flags: u32,
    }
    let attr = LinkCreate {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: if driver {
            XDP_FLAGS_DRV_MODE
        } else {
            XDP_FLAGS_SKB_MODE
        },
    };
    owned(bpf(BPF_LINK_CREATE, &attr)?)
}

/// `SOL_XDP`.
const SOL_XDP: libc::c_int = 283;
/// `XDP_MAX_TX_SKB_BUDGET` (`linux/if_xdp.h`, Linux 6.17): how many transmit descriptors
/// one `sendto(2)` of a copy-mode socket hands to the driver (32 before, or without it).
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// Raises the copy-mode transmit budget of one `sendto(2)` to `budget` descriptors
/// (32 to the transmit ring's size; the kernel's `xsk_setsockopt`). Errors: the OS's,
/// `ENOPROTOOPT` on a kernel before 6.17.
pub(crate) fn set_tx_budget(fd: BorrowedFd<'_>, budget: u32) -> io::Result<()> {
    // SAFETY: `budget` is a live `u32` for the call and the length passed is its size;
    // the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            XDP_MAX_TX_SKB_BUDGET,
            (&raw const budget).cast(),
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
