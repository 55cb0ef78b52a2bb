//! A raw `statx(2)` binding that knows the fields newer than the C library's
//! headers: direct-I/O alignment (Linux 6.1), atomic (untorn) write units (6.11),
//! and the separate direct-I/O read alignment (6.14).
//!
//! The kernel's `struct statx` is 256 bytes and append-only: a kernel that does not
//! know a field leaves it zero and does not set its bit in `stx_mask`, so reading
//! a field is valid only when its mask bit came back set.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `STATX_DIOALIGN`: `stx_dio_mem_align` and `stx_dio_offset_align`.
pub(crate) const STATX_DIOALIGN: u32 = 0x0000_2000;
/// `STATX_WRITE_ATOMIC`: the `stx_atomic_write_*` fields.
pub(crate) const STATX_WRITE_ATOMIC: u32 = 0x0001_0000;
/// `STATX_DIO_READ_ALIGN`: `stx_dio_read_offset_align`.
pub(crate) const STATX_DIO_READ_ALIGN: u32 = 0x0002_0000;
/// `STATX_ATTR_WRITE_ATOMIC` in `stx_attributes`: the file supports untorn writes.
pub(crate) const STATX_ATTR_WRITE_ATOMIC: u64 = 0x0040_0000;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct StatxTimestamp {
    tv_sec: i64,
    tv_nsec: u32,
    reserved: i32,
}

/// The kernel's `struct statx`, field for field (include/uapi/linux/stat.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct RawStatx {
    pub mask: u32,
    pub blksize: u32,
    pub attributes: u64,
    nlink: u32,
    uid: u32,
    gid: u32,
    mode: u16,
    spare0: u16,
    ino: u64,
    pub size: u64,
    blocks: u64,
    attributes_mask: u64,
    atime: StatxTimestamp,
    btime: StatxTimestamp,
    ctime: StatxTimestamp,
    mtime: StatxTimestamp,
    rdev_major: u32,
    rdev_minor: u32,
    pub dev_major: u32,
    pub dev_minor: u32,
    mnt_id: u64,
    pub dio_mem_align: u32,
    pub dio_offset_align: u32,
    subvol: u64,
    pub atomic_write_unit_min: u32,
    pub atomic_write_unit_max: u32,
    pub atomic_write_segments_max: u32,
    pub dio_read_offset_align: u32,
    pub atomic_write_unit_max_opt: u32,
    spare2: u32,
    spare3: [u64; 8],
}

// The offsets below are the kernel's; a mistake here would read the wrong field.
const _: () = assert!(std::mem::size_of::<RawStatx>() == 256);
const _: () = assert!(std::mem::offset_of!(RawStatx, dev_major) == 0x88);
const _: () = assert!(std::mem::offset_of!(RawStatx, dio_mem_align) == 0x98);
const _: () = assert!(std::mem::offset_of!(RawStatx, atomic_write_unit_min) == 0xa8);
const _: () = assert!(std::mem::offset_of!(RawStatx, dio_read_offset_align) == 0xb4);
const _: () = assert!(std::mem::offset_of!(RawStatx, atomic_write_unit_max_opt) == 0xb8);

/// Calls `statx(fd, "", AT_EMPTY_PATH, mask)`.
pub(crate) fn statx_fd(fd: BorrowedFd<'_>, mask: u32) -> std::io::Result<RawStatx> {
    let mut out = RawStatx::default();
    let empty: &CStr = c"";
    // SAFETY: `out` is a writable, properly sized and aligned `struct statx` that
    // lives across the call; `empty` is a valid NUL-terminated string; the fd is
    // borrowed, so it stays open for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            mask,
            &mut out as *mut RawStatx,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(out)
}
