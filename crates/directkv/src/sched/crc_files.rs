//! Files written whole, in order, with their CRC32C: a new file written
//! chunk by chunk (direct I/O where the destination has it, its CRC32C
//! computed as it is written), small files written or read in one request
//! of the scheduler, and reading or copying a file back in chunks. A
//! backup's files, a restore's, the log archive's copies and setting, and
//! the database's changed-page summaries are written through these.
//!
//! Invariants:
//! - Every file is created exclusively and private, written in whole
//!   aligned blocks, and synced before its length and CRC are reported.

use std::path::Path;
use std::sync::Arc;

use super::{IoClass, ScheduledFile, Scheduler};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirectIo, FileOptions, Permissions, Storage, StorageFile, SyncMethod};

/// Bytes moved per request: large enough for sequential speed, small enough
/// that a request of the backup's class holds the device briefly.
pub const CHUNK_BYTES: usize = 1 << 20;
/// The alignment of every buffer here: a valid direct-I/O unit everywhere.
pub const ALIGN_BYTES: u32 = 4096;

/// A new file being written in order, chunk by chunk.
pub struct Sink<S: Storage> {
    file: S::File,
    len: u64,
    /// CRC32C of the bytes after the skipped start.
    crc: u32,
    /// Bytes at the start not yet written.
    skipped: usize,
}

impl<S: Storage> Sink<S> {
    /// Creates `path` (exclusively: nothing planted there is written
    /// through), private, with direct I/O where the file system has it.
    ///
    /// # Errors
    /// I/O errors, an error of the open when `path` exists.
    pub fn create(storage: &S, path: &Path) -> Result<Sink<S>> {
        let file = storage.open(path, &create_options(DirectIo::Auto))?;
        Ok(Sink {
            file,
            len: 0,
            crc: 0,
            skipped: 0,
        })
    }

    /// Leaves the first `n` bytes to [`write_first`](Self::write_first):
    /// appends go after them.
    pub fn skip(&mut self, n: usize) {
        assert_eq!(self.len, 0, "only the start is skipped");
        assert!(n % ALIGN_BYTES as usize == 0, "whole aligned blocks");
        self.len = n as u64;
        self.skipped = n;
    }

    /// Writes `buf[..n]` into the `n` bytes [`skip`](Self::skip) left.
    ///
    /// # Errors
    /// I/O errors of the write.
    pub fn write_first(&mut self, buf: &AlignedBuf, n: usize) -> Result<()> {
        assert_eq!(n, self.skipped, "the skipped start is written whole");
        self.file.write_all_at(buf.io(0..n)?, 0)?;
        let rest = (self.len - n as u64) as usize;
        self.crc = crc32c::crc32c_combine(crc32c::crc32c(&buf.as_slice()[..n]), self.crc, rest);
        self.skipped = 0;
        Ok(())
    }

    /// Appends `buf[..n]` (`n` a multiple of [`ALIGN_BYTES`]).
    ///
    /// # Errors
    /// I/O errors of the write.
    pub fn append(&mut self, buf: &AlignedBuf, n: usize) -> Result<()> {
        assert!(
            n % ALIGN_BYTES as usize == 0 && n <= buf.len(),
            "appends whole aligned blocks"
        );
        if n == 0 {
            return Ok(());
        }
        self.file.write_all_at(buf.io(0..n)?, self.len)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf.as_slice()[..n]);
        self.len += n as u64;
        Ok(())
    }

    /// Syncs the file and returns its length and CRC32C.
    ///
    /// # Errors
    /// I/O errors of the sync.
    pub fn finish(self) -> Result<(u64, u32)> {
        assert_eq!(self.skipped, 0, "the skipped start was written");
        self.file.sync_all()?;
        let len = self.file.len()?;
        if len != self.len {
            return Err(Error::Corruption {
                path: self.file.path().to_path_buf(),
                offset: len,
                page: None,
                detail: format!(
                    "{len} bytes after {} were written: something else writes it",
                    self.len
                ),
            });
        }
        Ok((self.len, self.crc))
    }
}

/// Writes a small new file (exclusively, private, synced) holding `bytes`.
///
/// # Errors
/// I/O errors.
pub fn write_small<S: Storage>(storage: &S, path: &Path, bytes: &[u8]) -> Result<()> {
    write_small_as(storage, path, bytes, Permissions::Private)
}

/// [`write_small`] with the mode `permissions` gives.
///
/// # Errors
/// I/O errors.
pub fn write_small_as<S: Storage>(
    storage: &S,
    path: &Path,
    bytes: &[u8],
    permissions: Permissions,
) -> Result<()> {
    let io = (&Scheduler::fifo(), IoClass::Backup);
    write_small_admitted(storage, path, bytes, permissions, io)
}

/// [`write_small_as`], the write and sync one `class` request of `sched`.
///
/// # Errors
/// I/O errors.
pub fn write_small_admitted<S: Storage>(
    storage: &S,
    path: &Path,
    bytes: &[u8],
    permissions: Permissions,
    (sched, class): (&Arc<Scheduler>, IoClass),
) -> Result<()> {
    let opts = FileOptions {
        permissions,
        ..create_options(DirectIo::Off)
    };
    let file = ScheduledFile::new(storage.open(path, &opts)?, Arc::clone(sched));
    let mut buf = AlignedBuf::new(bytes.len().max(1), 1)?;
    buf.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
    let io = file.admit(class, bytes.len() as u64);
    if !bytes.is_empty() {
        io.write_all_at(buf.io(0..bytes.len())?, 0)?;
    }
    io.sync_all()
}

/// Reads a whole small file (at most `max` bytes).
///
/// # Errors
/// I/O errors; [`Error::Corruption`] for a file longer than `max`.
pub fn read_small<S: Storage>(storage: &S, path: &Path, max: u64) -> Result<Vec<u8>> {
    read_small_admitted(storage, path, max, (&Scheduler::fifo(), IoClass::Backup))
}

/// [`read_small`], the read one `class` request of `sched`.
///
/// # Errors
/// As [`read_small`].
pub fn read_small_admitted<S: Storage>(
    storage: &S,
    path: &Path,
    max: u64,
    (sched, class): (&Arc<Scheduler>, IoClass),
) -> Result<Vec<u8>> {
    let file = ScheduledFile::new(
        storage.open(path, &read_options(DirectIo::Off))?,
        Arc::clone(sched),
    );
    let len = file.len()?;
    if len > max {
        return Err(Error::Corruption {
            path: path.to_path_buf(),
            offset: max,
            page: None,
            detail: format!("{len} bytes, more than the {max} such a file holds"),
        });
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let mut buf = AlignedBuf::new(len as usize, 1)?;
    file.read_exact_at(class, buf.io_all_mut(), 0)?;
    Ok(buf.as_slice().to_vec())
}

/// Options to create a file of a backup: exclusively (nothing planted at
/// the name is written through) and private.
fn create_options(direct_io: DirectIo) -> FileOptions {
    FileOptions {
        create: true,
        exclusive: true,
        permissions: Permissions::Private,
        direct_io,
        sync: SyncMethod::Fsync,
        ..FileOptions::default()
    }
}

/// The length of `file`, which must be whole [`ALIGN_BYTES`] blocks (as
/// every file of a database is).
///
/// # Errors
/// I/O errors; [`Error::Corruption`] for a length that is not.
pub fn whole_blocks_len<F: StorageFile>(file: &F) -> Result<u64> {
    let len = file.len()?;
    if len % u64::from(ALIGN_BYTES) != 0 {
        return Err(not_whole_blocks(file.path(), len));
    }
    Ok(len)
}

/// The error for a file at `path` of `len` bytes, not whole blocks.
pub fn not_whole_blocks(path: &Path, len: u64) -> Error {
    Error::Corruption {
        path: path.to_path_buf(),
        offset: len,
        page: None,
        detail: format!("{len} bytes is not a whole number of {ALIGN_BYTES}-byte blocks"),
    }
}

/// Options to read a file of a backup or a database.
pub fn read_options(direct_io: DirectIo) -> FileOptions {
    FileOptions {
        read_only: true,
        direct_io,
        ..FileOptions::default()
    }
}

/// Reads `file` from the start in chunks of `buf`'s size, passing each
/// chunk (its offset and bytes) to `each`. Returns the file's length.
///
/// # Errors
/// I/O errors, `each`'s errors, and [`Error::Corruption`] for a file whose
/// length is not a multiple of [`ALIGN_BYTES`] (no file of a database is).
pub fn read_chunks<F: StorageFile>(
    file: &F,
    buf: &mut AlignedBuf,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    let len = whole_blocks_len(file)?;
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        file.read_exact_at(buf.io_mut(0..n)?, at)?;
        each(at, &buf.as_slice()[..n])?;
        at += n as u64;
    }
    Ok(len)
}

/// Appends the first `len` bytes of `src` (whole blocks) to `sink` through
/// `buf`, a chunk at a time: each chunk's read a `class` request of
/// `src`'s scheduler, then its write under `admit_write`'s guard (a permit
/// of the sink's own pacing, or none).
///
/// # Errors
/// I/O errors of the reads and writes.
pub fn copy_into<S: Storage, F: StorageFile, G>(
    (src, class): (&ScheduledFile<F>, IoClass),
    len: u64,
    sink: &mut Sink<S>,
    buf: &mut AlignedBuf,
    mut admit_write: impl FnMut(u64) -> G,
) -> Result<()> {
    assert!(len % ALIGN_BYTES as u64 == 0, "whole blocks");
    let mut at = 0u64;
    while at < len {
        let k = (len - at).min(buf.len() as u64) as usize;
        src.read_exact_at(class, buf.io_mut(0..k)?, at)?;
        let _write = admit_write(k as u64);
        sink.append(buf, k)?;
        at += k as u64;
    }
    assert_eq!(at, len, "every chunk was copied");
    Ok(())
}

/// The length and CRC32C of the file at `path`.
///
/// # Errors
/// As [`read_chunks`].
pub fn crc_of<S: Storage>(storage: &S, path: &Path, buf: &mut AlignedBuf) -> Result<(u64, u32)> {
    let file = storage.open(path, &read_options(DirectIo::Auto))?;
    let mut crc = 0u32;
    let len = read_chunks(&file, buf, |_, bytes| {
        crc = crc32c::crc32c_append(crc, bytes);
        Ok(())
    })?;
    Ok((len, crc))
}
