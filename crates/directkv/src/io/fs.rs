//! What filesystem and block device a path lives on: `statfs(2)` for the
//! filesystem type and sysfs (`/sys/dev/block/MAJ:MIN`) for the device's
//! rotational flag, write-cache mode, FUA support and block sizes.
//!
//! These facts decide defaults (direct I/O, sync method) and the honesty verdict
//! of `test-fsync`; none of them is needed for correctness, so a missing sysfs
//! entry is `None`, never an error.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoOp, Result};

/// The filesystem a path is on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsInfo {
    /// A short name: `ext4`, `xfs`, `tmpfs`, `btrfs`, … or `0x…` for an unknown magic.
    pub fs_type: String,
    /// The `statfs` magic number.
    pub magic: u64,
    /// The device number (major, minor) of the filesystem.
    pub dev: (u32, u32),
    /// The filesystem's block size.
    pub block_bytes: u64,
    /// Bytes available to an unprivileged user.
    pub available_bytes: u64,
}

fn fs_name(magic: u64) -> String {
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x9123_683E => "btrfs",
        0x2FC1_2FC1 => "zfs",
        0x6573_5546 => "fuse",
        0x6969 => "nfs",
        0x794C_7630 => "overlayfs",
        0xF2F5_2010 => "f2fs",
        0x5346_544E => "ntfs",
        0x4d44 => "vfat",
        0x0102_1997 => "9p",
        0x6E73_6673 => "nsfs",
        0x8584_58f6 => "ramfs",
        _ => return format!("{magic:#x}"),
    };
    name.to_string()
}

/// `statfs` magic numbers of filesystems whose files live in memory: their pages
/// are the page cache, so `O_DIRECT` (which tmpfs accepts since Linux 6.6) cannot
/// keep data out of it, and the engine treats direct I/O as unavailable there.
pub const MEMORY_BACKED_MAGICS: [u64; 2] = [0x0102_1994, 0x8584_58f6];

/// The filesystem type of an open file, if it is memory-backed (tmpfs, ramfs).
pub(crate) fn memory_backed_fs(file: &impl std::os::fd::AsFd) -> Option<String> {
    use std::os::fd::AsRawFd;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: the fd is borrowed for the call; `st` is writable and sized for
    // `struct statfs`.
    let rc = unsafe { libc::fstatfs(file.as_fd().as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `fstatfs` returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let magic = st.f_type as u64;
    MEMORY_BACKED_MAGICS
        .contains(&magic)
        .then(|| fs_name(magic))
}

impl FsInfo {
    /// The filesystem `path` (a file or directory) is on: see [`fs_info`].
    ///
    /// # Errors
    /// As [`fs_info`].
    pub fn of(path: &Path) -> Result<FsInfo> {
        fs_info(path)
    }

    /// What sysfs says of the filesystem's device ([`device_info`]).
    pub fn device(&self) -> Option<DeviceInfo> {
        device_info(self.dev)
    }
}

/// Reads the filesystem type and device of `path` (a file or directory).
///
/// # Errors
/// [`Error::Io`] when `statfs` or `stat` fails, for example if `path` is missing.
pub fn fs_info(path: &Path) -> Result<FsInfo> {
    // O_PATH: no read permission needed, and a FIFO does not block the open.
    let flags = rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC;
    let file = rustix::fs::openat(rustix::fs::CWD, path, flags, rustix::fs::Mode::empty())
        .map(std::fs::File::from)
        .map_err(|e| Error::from_io(IoOp::Stat, path, None, std::io::Error::from(e)))?;
    fs_info_of(&file, path)
}

/// [`fs_info`] of an open file or directory (`path` names it in errors).
///
/// # Errors
/// [`Error::Io`] when `fstatfs` or `fstat` fails.
pub(crate) fn fs_info_of(file: &std::fs::File, path: &Path) -> Result<FsInfo> {
    let st = rustix::fs::fstatfs(file)
        .map_err(|e| Error::from_io(IoOp::Stat, path, None, std::io::Error::from(e)))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(IoOp::Stat, path, None, e))?;
    let dev = meta.dev();
    // The widths of these fields differ between targets.
    #[allow(clippy::unnecessary_cast)]
    let (magic, bsize, bavail) = (st.f_type as u64, st.f_bsize as u64, st.f_bavail as u64);
    Ok(FsInfo {
        fs_type: fs_name(magic),
        magic,
        dev: (libc::major(dev), libc::minor(dev)),
        block_bytes: bsize,
        available_bytes: bavail.saturating_mul(bsize),
    })
}

/// Facts about a block device from sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The kernel's name of the whole device (`vda`, `nvme0n1`, `loop3`).
    pub name: String,
    /// `queue/rotational`: the device says it spins. Virtual disks often say so
    /// whatever backs them.
    pub rotational: Option<bool>,
    /// `queue/write_cache`: `write back` (a volatile cache that needs flushes) or
    /// `write through`.
    pub write_cache: Option<String>,
    /// `queue/fua`: the device honours Force Unit Access writes.
    pub fua: Option<bool>,
    /// `queue/logical_block_size`: the smallest addressable unit.
    pub logical_block_bytes: Option<u32>,
    /// `queue/physical_block_size`: the unit the device writes internally.
    pub physical_block_bytes: Option<u32>,
    /// `queue/atomic_write_unit_max_bytes`: untorn writes the device promises (0
    /// or absent: none).
    pub atomic_write_max_bytes: Option<u32>,
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_num<T: std::str::FromStr>(path: &Path) -> Option<T> {
    read_trimmed(path)?.parse().ok()
}

/// Reads sysfs for the block device `dev` (major, minor); for a partition, the
/// queue of its whole disk. `None` for devices without a queue (tmpfs, overlay,
/// network filesystems).
pub fn device_info(dev: (u32, u32)) -> Option<DeviceInfo> {
    let link = PathBuf::from(format!("/sys/dev/block/{}:{}", dev.0, dev.1));
    let mut dir = std::fs::canonicalize(&link).ok()?;
    if dir.join("partition").exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let queue = dir.join("queue");
    if !queue.is_dir() {
        return None;
    }
    let name = dir.file_name()?.to_string_lossy().into_owned();
    Some(DeviceInfo {
        name,
        rotational: read_num::<u8>(&queue.join("rotational")).map(|v| v != 0),
        write_cache: read_trimmed(&queue.join("write_cache")),
        fua: read_num::<u8>(&queue.join("fua")).map(|v| v != 0),
        logical_block_bytes: read_num(&queue.join("logical_block_size")),
        physical_block_bytes: read_num(&queue.join("physical_block_size")),
        atomic_write_max_bytes: read_num(&queue.join("atomic_write_unit_max_bytes")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_filesystems() {
        assert_eq!(fs_name(0xEF53), "ext4");
        assert_eq!(fs_name(0x0102_1994), "tmpfs");
        assert_eq!(fs_name(0x1234), "0x1234");
    }

    #[test]
    fn fs_info_of_missing_path_is_typed() {
        let err = fs_info(Path::new("/nonexistent/directkv")).expect_err("missing");
        assert!(matches!(err, Error::Io { op: IoOp::Stat, .. }), "{err}");
    }
}
