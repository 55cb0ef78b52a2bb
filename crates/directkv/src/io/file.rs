//! `DirectFile`: one open file, read and written at positions with direct I/O
//! where the filesystem allows it.
//!
//! Invariants:
//! - All methods take `&self`: positional reads and writes of different ranges
//!   run concurrently from many threads with no lock in the engine or the file
//!   (DESIGN.md invariant 8). Callers serialise overlapping ranges themselves.
//! - Under direct I/O every transfer's offset and length are multiples of the
//!   file's alignment and its buffer is aligned; this is checked before the
//!   system call, so a misaligned request is [`Error::Unaligned`], not `EINVAL`.
//! - A failed write or sync latches the file into a failed state: every later
//!   write or sync returns [`Error::Poisoned`] naming the first failure. A sync is
//!   never retried, because after a failed `fsync` the kernel may have dropped
//!   the dirty data and a second `fsync` can report success for nothing
//!   (DESIGN.md invariant 3). Reads keep working.
//! - Memory-backed filesystems (tmpfs, ramfs) count as refusing `O_DIRECT`: tmpfs
//!   accepts the flag since Linux 6.6, but its pages are the page cache, so the
//!   one-cache guarantee direct I/O stands for cannot hold there.
//! - `DirectIo::On` on a filesystem that refuses `O_DIRECT` is
//!   [`Error::DirectIoUnsupported`] and leaves no new file behind; `Auto` falls
//!   back to buffered I/O, says so in [`DirectFile::io_path`], and drops written
//!   ranges from the page cache (`POSIX_FADV_DONTNEED`) so the engine's cache
//!   stays the only one.
//!
//! - Every open carries `O_NOFOLLOW | O_CLOEXEC`, creates with the mode of
//!   [`FileOptions::permissions`] (never group- or world-writable), and is
//!   checked with `fstat` before use: only a regular file is ever read or
//!   written ([`super::perms`]).
//!
//! States: `Healthy` → (write or sync error) → `Failed(cause)`; there is no way
//! back except closing the file and reopening it.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::aio::{Aio, BatchOp, Outcomes, Request, Target};
use super::align::{self, Alignment, AlignmentSource, AtomicWriteUnit};
use super::buf::{AlignedBuf, IoMut, IoRef};
use super::dir::At;
use super::fs::memory_backed_fs;
use super::perms::{ensure_regular, not_regular, open_error, Permissions, OPEN_FLAGS_ALWAYS};
use super::sync::SyncMethod;
use crate::constants::{SECTOR_BYTES, SHORT_IO_RETRIES_MAX, ZERO_FILL_CHUNK_BYTES};
use crate::error::{Error, IoOp, Result};

mod open;

/// Whether a file bypasses the OS page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectIo {
    /// Direct I/O where the filesystem supports it; elsewhere buffered I/O with
    /// the written ranges dropped from the page cache, reported in `io_path()`.
    #[default]
    Auto,
    /// Direct I/O or an error.
    On,
    /// Buffered I/O through the page cache.
    Off,
}

/// How to open a [`DirectFile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Truncate the file to zero length on open.
    pub truncate: bool,
    /// Open for reading only.
    pub read_only: bool,
    /// Direct-I/O policy.
    pub direct_io: DirectIo,
    /// How writes become durable.
    pub sync: SyncMethod,
    /// With `create`: the file must not exist yet (`O_EXCL`); an existing
    /// file, or a symlink, at the path is an error.
    pub exclusive: bool,
    /// The mode a created file gets (before the umask).
    pub permissions: Permissions,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            create: false,
            truncate: false,
            read_only: false,
            direct_io: DirectIo::Auto,
            sync: SyncMethod::Fdatasync,
            exclusive: false,
            permissions: Permissions::Private,
        }
    }
}

/// How an open file's bytes travel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum IoPath {
    /// `O_DIRECT`: straight between the engine's buffers and the device.
    Direct,
    /// Through the page cache because `DirectIo::Off` asked for it.
    Buffered,
    /// Through the page cache because the filesystem refused `O_DIRECT` under
    /// `DirectIo::Auto`; written ranges are dropped from the cache after writes.
    BufferedFallback {
        /// The filesystem that refused.
        fs_type: String,
    },
}

/// How [`DirectFile::allocate`] fills new space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Reserve blocks (`fallocate`) without writing them. Later writes into them
    /// convert unwritten extents, which costs a metadata update per sync.
    Reserve,
    /// Reserve and write zeros through once, so later overwrites need no metadata
    /// update and `fdatasync`/`O_DSYNC` stay cheap (DESIGN.md, WAL sync methods).
    Zero,
}

/// A file opened for positional, optionally direct, I/O.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    path: PathBuf,
    io_path: IoPath,
    sync: SyncMethod,
    alignment: Alignment,
    atomic_write: Option<AtomicWriteUnit>,
    failure: OnceLock<String>,
    /// The asynchronous engine batches go through, and this file's fixed-file
    /// slot in it.
    aio: OnceLock<(Arc<Aio>, Option<u32>)>,
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        // The slot must be free before the descriptor closes.
        if let Some((aio, Some(slot))) = self.aio.get() {
            aio.unregister_file(*slot);
        }
    }
}

/// The memory page size: the unit the page cache writes back.
pub(crate) fn page_bytes() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

impl DirectFile {
    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether transfers bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.io_path == IoPath::Direct
    }

    /// How bytes travel, including why a file is buffered.
    pub fn io_path(&self) -> &IoPath {
        &self.io_path
    }

    /// The alignment transfers must honour.
    pub fn alignment(&self) -> Alignment {
        self.alignment
    }

    /// The device's untorn-write unit for this file, if it promises one.
    pub fn atomic_write(&self) -> Option<AtomicWriteUnit> {
        self.atomic_write
    }

    /// The sync method the file was opened with.
    pub fn sync_method(&self) -> SyncMethod {
        self.sync
    }

    /// The first write or sync failure, if the file has failed.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    fn check_healthy(&self) -> Result<()> {
        match self.failure.get() {
            Some(cause) => Err(Error::Poisoned {
                path: self.path.clone(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn fail(&self, err: Error) -> Error {
        let _ = self.failure.set(err.to_string());
        assert!(self.failure.get().is_some(), "a failure latches");
        err
    }

    fn check_aligned(&self, offset: u64, len: usize, unit: u32, read: bool) -> Result<()> {
        if !self.is_direct() {
            return Ok(());
        }
        let a = &self.alignment;
        let required = if read {
            a.read_offset_bytes
        } else {
            a.offset_bytes
        };
        if offset % u64::from(required) != 0
            || len % required as usize != 0
            || unit < a.memory_bytes
        {
            return Err(Error::Unaligned {
                path: self.path.clone(),
                offset,
                len,
                required,
                buffer_unit: unit,
            });
        }
        assert!(required.is_power_of_two() && unit.is_power_of_two());
        assert!(
            required <= a.offset_bytes,
            "reads are never coarser than writes"
        );
        Ok(())
    }

    /// Asserts what an aligned view guarantees under direct I/O: its address is
    /// a multiple of the memory alignment (views are aligned to their unit, and
    /// `check_aligned` refused units below the memory alignment).
    fn assert_buffer_aligned(&self, addr: *const u8) {
        if self.is_direct() {
            assert_eq!(addr as usize % self.alignment.memory_bytes as usize, 0);
        }
    }

    /// Reads into `buf` from `offset` until it is full or the file ends; returns
    /// the bytes read.
    ///
    /// # Errors
    /// [`Error::Unaligned`] for a misaligned request under direct I/O;
    /// [`Error::Io`] when the read fails.
    pub fn read_at(&self, mut buf: IoMut<'_>, offset: u64) -> Result<usize> {
        self.check_aligned(offset, buf.len(), buf.unit_bytes(), true)?;
        let bytes = buf.bytes_mut();
        self.assert_buffer_aligned(bytes.as_ptr());
        let mut done = 0usize;
        let mut stalls = 0u32;
        while done < bytes.len() {
            match self.file.read_at(&mut bytes[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    stalls += 1;
                    if stalls > SHORT_IO_RETRIES_MAX {
                        return Err(Error::from_io(IoOp::Read, &self.path, Some(offset), e));
                    }
                }
                Err(e) => return Err(Error::from_io(IoOp::Read, &self.path, Some(offset), e)),
            }
        }
        assert!(done <= bytes.len(), "read past the buffer");
        assert!(stalls <= SHORT_IO_RETRIES_MAX);
        Ok(done)
    }

    /// Reads exactly `buf.len()` bytes from `offset`.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), and [`Error::UnexpectedEof`] when the file
    /// ends first.
    pub fn read_exact_at(&self, buf: IoMut<'_>, offset: u64) -> Result<()> {
        let wanted = buf.len();
        let got = self.read_at(buf, offset)?;
        assert!(got <= wanted);
        if got < wanted {
            return Err(Error::UnexpectedEof {
                path: self.path.clone(),
                offset,
                wanted,
                got,
            });
        }
        Ok(())
    }

    /// Writes all of `data` at `offset`. Under `pwrite_dsync` the write is a
    /// `pwritev2(RWF_DSYNC)` and durable when this returns; under `open_sync` and
    /// `open_datasync` every write is.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier failure; [`Error::Unaligned`] for a
    /// misaligned request under direct I/O; otherwise the write's error, which
    /// also poisons the file.
    pub fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()> {
        self.check_healthy()?;
        self.check_aligned(offset, data.len(), data.unit_bytes(), false)?;
        let bytes = data.bytes();
        self.assert_buffer_aligned(bytes.as_ptr());
        let dsync = self.sync == SyncMethod::PwriteDsync;
        assert!(!dsync || self.sync.syncs_each_write());
        write_fully(bytes, offset, |b, at| {
            if dsync {
                pwrite_dsync(self.file.as_fd(), b, at)
            } else {
                self.file.write_at(b, at)
            }
        })
        .map_err(|(e, at)| self.fail(Error::from_io(IoOp::Write, &self.path, Some(at), e)))?;
        if matches!(self.io_path, IoPath::BufferedFallback { .. }) {
            // Best effort: dirty pages are not dropped until written back, which
            // `sync` triggers; the call starts that write-back early.
            self.advise_dontneed(offset, bytes.len() as u64);
        }
        Ok(())
    }

    /// Sends later [`run_batch`](Self::run_batch) calls through `aio`,
    /// registering the descriptor as a fixed file where the backend has them.
    /// A second call keeps the first engine.
    ///
    /// # Errors
    /// None today; kept fallible for backends that can refuse a file.
    pub fn attach_aio(&self, aio: &Arc<Aio>) -> Result<()> {
        if self.aio.get().is_some() {
            return Ok(());
        }
        let slot = aio.register_file(self.file.as_raw_fd());
        if let Err((aio, Some(slot))) = self.aio.set((Arc::clone(aio), slot)) {
            aio.unregister_file(slot);
        }
        Ok(())
    }

    /// Runs a batch of reads and writes, all in flight at once when an
    /// [`Aio`] is attached (one after another on this thread otherwise; a
    /// request of several buffers is one vectored call either way), and returns each
    /// request's outcome in order. Each request is checked for alignment
    /// first; reads must fill their buffers; a failed write poisons the file.
    pub fn run_batch(&self, mut ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        let mut results = Outcomes::new(ops.len());
        let mut reqs = Vec::with_capacity(ops.len());
        let mut which = Vec::with_capacity(ops.len());
        let rw_flags = if self.sync == SyncMethod::PwriteDsync {
            libc::RWF_DSYNC
        } else {
            0
        };
        for (i, op) in ops.iter_mut().enumerate() {
            let checked = self.check_op(op);
            match checked {
                Err(e) => results.set(i, Err(e)),
                Ok(()) => {
                    reqs.push(Request::new(op, rw_flags));
                    which.push(i);
                }
            }
        }
        assert_eq!(reqs.len(), which.len());
        let fd = self.file.as_raw_fd();
        match self.aio.get() {
            Some((aio, slot)) => aio.run(Target { fd, slot: *slot }, &mut reqs),
            // No engine: one request after another, each still one
            // (vectored) system call.
            None => reqs.iter_mut().for_each(|r| r.run_blocking(fd, None)),
        }
        for (req, i) in reqs.into_iter().zip(which) {
            let op = &ops[i];
            let at = op.offset() + req.done as u64;
            let outcome = match req.result {
                Some(Ok(())) => {
                    if op.is_write() && matches!(self.io_path, IoPath::BufferedFallback { .. }) {
                        self.advise_dontneed(op.offset(), op.len() as u64);
                    }
                    Ok(())
                }
                Some(Err(e)) if !op.is_write() && e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Err(Error::UnexpectedEof {
                        path: self.path.clone(),
                        offset: op.offset(),
                        wanted: op.len(),
                        got: req.done,
                    })
                }
                Some(Err(e)) if op.is_write() => {
                    Err(self.fail(Error::from_io(IoOp::Write, &self.path, Some(at), e)))
                }
                Some(Err(e)) => Err(Error::from_io(IoOp::Read, &self.path, Some(at), e)),
                None => Err(Error::InvalidArgument("request did not complete".into())),
            };
            results.set(i, outcome);
        }
        drop(ops);
        results.all()
    }

    /// Refuses `op` before it runs: a write to a file whose earlier write
    /// failed, a request the file's alignment forbids, or one that ends
    /// past the largest offset (the system calls take it signed, and -1
    /// there means "the file's position").
    fn check_op(&self, op: &BatchOp<'_>) -> Result<()> {
        if op.is_write() {
            self.check_healthy()?;
        }
        self.check_aligned(op.offset(), op.len(), op.unit_bytes(), !op.is_write())?;
        let end = op.offset().checked_add(op.len() as u64);
        match end.filter(|&e| i64::try_from(e).is_ok()) {
            Some(_) => Ok(()),
            None => Err(Error::InvalidArgument(format!(
                "{} bytes at offset {} of {} end past the largest file offset",
                op.len(),
                op.offset(),
                self.path.display()
            ))),
        }
    }

    /// Makes every completed write durable as the sync method says: `fsync`,
    /// `fdatasync`, or nothing for methods that sync each write (and for `none`).
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier failure; the sync's own error, which
    /// poisons the file. A failed sync is never retried.
    pub fn sync(&self) -> Result<()> {
        match self.sync {
            SyncMethod::Fsync => self.sync_all(),
            SyncMethod::Fdatasync => self.sync_data(),
            _ => self.check_healthy(),
        }
    }

    /// `fsync(2)`: data and all metadata, whatever the sync method. Needed after
    /// growing or preallocating a file.
    ///
    /// # Errors
    /// As [`sync`](Self::sync).
    pub fn sync_all(&self) -> Result<()> {
        self.check_healthy()?;
        self.file
            .sync_all()
            .map_err(|e| self.fail(Error::from_io(IoOp::Sync, &self.path, None, e)))?;
        self.after_sync();
        Ok(())
    }

    /// `fdatasync(2)`: data and the metadata needed to read it back.
    ///
    /// # Errors
    /// As [`sync`](Self::sync).
    pub fn sync_data(&self) -> Result<()> {
        self.check_healthy()?;
        self.file
            .sync_data()
            .map_err(|e| self.fail(Error::from_io(IoOp::Sync, &self.path, None, e)))?;
        self.after_sync();
        Ok(())
    }

    fn after_sync(&self) {
        if matches!(self.io_path, IoPath::BufferedFallback { .. }) {
            // The pages are clean now, so DONTNEED really drops them.
            self.advise_dontneed(0, 0);
        }
    }

    /// Asks the kernel to drop `len` bytes at `offset` (0 = to the end) from the
    /// page cache. Advisory: failures are ignored.
    pub fn advise_dontneed(&self, offset: u64, len: u64) {
        // SAFETY: plain syscall on an fd we own; no memory is passed.
        let _ = unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }

    /// The file's size in bytes.
    ///
    /// # Errors
    /// [`Error::Io`] when `fstat` fails.
    pub fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::from_io(IoOp::Stat, &self.path, None, e))
    }

    /// Whether the file is empty.
    ///
    /// # Errors
    /// As [`len`](Self::len).
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Sets the file's size (`ftruncate`). Not durable until [`sync_all`](Self::sync_all).
    ///
    /// # Errors
    /// [`Error::Poisoned`] after an earlier failure; the call's own error.
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.check_healthy()?;
        self.file
            .set_len(len)
            .map_err(|e| Error::from_io(IoOp::Allocate, &self.path, Some(len), e))
    }

    /// Makes the first `len` bytes of the file allocated (and, with
    /// [`Fill::Zero`], written with zeros), then syncs data and metadata, so a
    /// later write into that range can neither run out of space nor need a
    /// metadata update. Existing bytes below the current size are left as they are.
    ///
    /// # Errors
    /// [`Error::DiskFull`] when the space is not there (nothing is written then
    /// beyond what fit); [`Error::InvalidArgument`] when `len` is not a multiple of
    /// the file's I/O unit with `Fill::Zero`; other I/O errors as they come.
    pub fn allocate(&self, len: u64, fill: Fill) -> Result<()> {
        self.check_healthy()?;
        let unit = u64::from(self.alignment.io_unit_bytes());
        let current = self.len()?;
        // SAFETY: plain syscall on an fd we own; no memory is passed.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len as libc::off_t) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(Error::from_io(IoOp::Allocate, &self.path, Some(len), e));
            }
            if fill == Fill::Reserve && current < len {
                self.set_len(len)?;
            }
        }
        assert!(unit.is_power_of_two());
        if fill == Fill::Zero && current < len {
            if len % unit != 0 {
                return Err(Error::InvalidArgument(format!(
                    "zero fill of {}: length {len} is not a multiple of {unit}",
                    self.path.display()
                )));
            }
            self.zero_fill(current - current % unit, len)?;
        }
        self.sync_all()
    }

    fn zero_fill(&self, from: u64, to: u64) -> Result<()> {
        let unit = self.alignment.io_unit_bytes();
        let chunk = ZERO_FILL_CHUNK_BYTES.max(unit as usize);
        assert_eq!(chunk % unit as usize, 0);
        assert!(from <= to && from % u64::from(unit) == 0 && to % u64::from(unit) == 0);
        let zeros = AlignedBuf::new(chunk, unit)?;
        let mut at = from;
        while at < to {
            let n = (to - at).min(chunk as u64) as usize;
            self.write_all_at(zeros.io(0..n)?, at)?;
            at += n as u64;
        }
        assert_eq!(at, to, "the fill ends where asked");
        Ok(())
    }
}

/// Writes all of `bytes` at `offset` through `write`, continuing after short
/// writes and `EINTR` (RELIABILITY.md F23). A write of zero bytes, or more than
/// [`SHORT_IO_RETRIES_MAX`] interruptions in a row, is an error. On error,
/// returns it with the offset it happened at.
fn write_fully(
    bytes: &[u8],
    offset: u64,
    mut write: impl FnMut(&[u8], u64) -> std::io::Result<usize>,
) -> Result<(), (std::io::Error, u64)> {
    let mut done = 0usize;
    let mut interrupted = 0u32;
    while done < bytes.len() {
        let at = offset + done as u64;
        match write(&bytes[done..], at) {
            Ok(0) => {
                let e = std::io::Error::new(std::io::ErrorKind::WriteZero, "wrote 0 bytes");
                return Err((e, at));
            }
            Ok(n) => {
                done += n;
                interrupted = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                interrupted += 1;
                if interrupted > SHORT_IO_RETRIES_MAX {
                    return Err((e, at));
                }
            }
            Err(e) => return Err((e, at)),
        }
    }
    assert_eq!(done, bytes.len(), "a write never goes past its bytes");
    assert!(interrupted <= SHORT_IO_RETRIES_MAX);
    Ok(())
}

fn pwrite_dsync(fd: BorrowedFd<'_>, bytes: &[u8], offset: u64) -> std::io::Result<usize> {
    let iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: `iov` describes `bytes`, which is borrowed for the whole call and
    // only read by the kernel; `fd` is open for the call's duration.
    let n = unsafe {
        libc::pwritev2(
            fd.as_raw_fd(),
            &iov,
            1,
            offset as libc::off_t,
            libc::RWF_DSYNC,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

impl AsFd for DirectFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for DirectFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_writes_and_interruptions_are_continued() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut disk = [0u8; 200];
        let mut calls = 0;
        write_fully(&data, 50, |b, at| {
            calls += 1;
            if calls % 3 == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::Interrupted));
            }
            let n = b.len().min(7);
            disk[at as usize..at as usize + n].copy_from_slice(&b[..n]);
            Ok(n)
        })
        .expect("completes");
        assert_eq!(&disk[50..150], data.as_slice());
        assert!(calls > 14);
        let err = write_fully(&data, 0, |_, _| Ok(0)).expect_err("no progress");
        assert_eq!(err.0.kind(), std::io::ErrorKind::WriteZero);
        let err = write_fully(&data, 0, |_, _| {
            Err(std::io::Error::from(std::io::ErrorKind::Interrupted))
        })
        .expect_err("endless interruption");
        assert_eq!(err.0.kind(), std::io::ErrorKind::Interrupted);
    }
}
