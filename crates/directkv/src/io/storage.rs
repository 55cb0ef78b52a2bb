//! The seam between the engine and the operating system: [`Storage`] opens files
//! and changes directories, [`StorageFile`] reads, writes and syncs one file.
//!
//! Every layer above `io` is generic over `S: Storage` (not `dyn`), so the real
//! backend ([`OsStorage`]), the fault-injecting wrapper ([`FaultyStorage`](super::FaultyStorage)) and
//! the simulated disk are monomorphised and cost nothing at run time.
//!
//! Invariants every implementation keeps:
//! - a failed write or sync latches the file: later writes and syncs return
//!   [`Error::Poisoned`](crate::Error::Poisoned) (see [`DirectFile`]);
//! - directory changes (create, rename, remove) are durable only after
//!   [`Storage::sync_dir`] on the parent directory;
//! - the rules of [`super::perms`] hold for every file: opened without
//!   following a symlink, refused unless a regular file, created with the
//!   mode of [`FileOptions::permissions`], and `exclusive` creation fails on
//!   an existing path. The simulated disk has no symlinks or modes, but
//!   refuses an exclusive create the same way and answers [`Storage::stat`].

use std::path::Path;
use std::sync::Arc;

use super::aio::{Aio, BatchOp};
use super::buf::{IoMut, IoRef};
use super::dir::{At, Dir};
use super::file::{DirectFile, FileOptions, Fill, IoPath};
use super::perms::{FileMeta, Permissions};
use super::Alignment;
use crate::error::{Error, Result};

/// One open file of a [`Storage`].
pub trait StorageFile: Send + Sync + 'static {
    /// The path it was opened with.
    fn path(&self) -> &Path;
    /// Its direct-I/O alignment.
    fn alignment(&self) -> Alignment;
    /// How its bytes travel.
    fn io_path(&self) -> IoPath;
    /// Reads until `buf` is full or the file ends; returns the bytes read.
    ///
    /// # Errors
    /// I/O errors, typed as [`DirectFile::read_at`] types them.
    fn read_at(&self, buf: IoMut<'_>, offset: u64) -> Result<usize>;
    /// Writes all of `data` at `offset`.
    ///
    /// # Errors
    /// As [`DirectFile::write_all_at`].
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()>;
    /// Makes completed writes durable per the file's sync method.
    ///
    /// # Errors
    /// As [`DirectFile::sync`].
    fn sync(&self) -> Result<()>;
    /// `fsync`: data and all metadata.
    ///
    /// # Errors
    /// As [`DirectFile::sync_all`].
    fn sync_all(&self) -> Result<()>;
    /// The size in bytes.
    ///
    /// # Errors
    /// I/O errors of `fstat`.
    fn len(&self) -> Result<u64>;
    /// Whether the file is empty.
    ///
    /// # Errors
    /// As [`len`](Self::len).
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Allocates (and optionally zero-fills) the first `len` bytes, then syncs.
    ///
    /// # Errors
    /// As [`DirectFile::allocate`].
    fn allocate(&self, len: u64, fill: Fill) -> Result<()>;
    /// Sets the file's size: the bytes past `len` are gone, or zeros are
    /// added up to it. The new size is durable after the next
    /// [`sync_all`](Self::sync_all); a crash before it may leave either.
    ///
    /// # Errors
    /// As [`DirectFile::set_len`].
    fn set_len(&self, len: u64) -> Result<()>;

    /// Lets [`run_batch`](Self::run_batch) put many requests in flight at
    /// once through `aio`. Files that cannot (simulated ones) ignore it.
    ///
    /// # Errors
    /// None by default; a file that can fail to attach says why.
    fn attach_aio(&self, aio: &std::sync::Arc<Aio>) -> Result<()> {
        let _ = aio;
        Ok(())
    }

    /// Runs a batch of reads and writes and returns each request's outcome,
    /// in order. Reads must fill their buffers ([`Error::UnexpectedEof`]
    /// otherwise); a failed write poisons the file as
    /// [`write_all_at`](Self::write_all_at) does. With an attached
    /// [`Aio`], the requests are in flight together; without, they run one
    /// after another.
    fn run_batch(&self, ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        run_one_by_one(self, ops)
    }

    /// Reads exactly `buf.len()` bytes.
    ///
    /// # Errors
    /// As [`read_at`](Self::read_at), and [`Error::UnexpectedEof`] when the file
    /// ends first.
    fn read_exact_at(&self, buf: IoMut<'_>, offset: u64) -> Result<()> {
        let wanted = buf.len();
        let got = self.read_at(buf, offset)?;
        if got < wanted {
            return Err(Error::UnexpectedEof {
                path: self.path().to_path_buf(),
                offset,
                wanted,
                got,
            });
        }
        Ok(())
    }
}

/// Runs `ops` one after another through `file`'s positional calls.
pub(crate) fn run_one_by_one<F: StorageFile + ?Sized>(
    file: &F,
    ops: Vec<BatchOp<'_>>,
) -> Vec<Result<()>> {
    let count = ops.len();
    let results: Vec<Result<()>> = ops
        .into_iter()
        .map(|op| match op {
            BatchOp::Read { bufs, offset } => {
                let mut at = offset;
                for b in bufs {
                    let n = b.len() as u64;
                    assert!(n > 0, "I/O views are never empty");
                    file.read_exact_at(b, at)?;
                    at += n;
                }
                Ok(())
            }
            BatchOp::Write { bufs, offset } => {
                let mut at = offset;
                for b in bufs {
                    assert!(!b.is_empty(), "I/O views are never empty");
                    file.write_all_at(b, at)?;
                    at += b.len() as u64;
                }
                Ok(())
            }
        })
        .collect();
    assert_eq!(results.len(), count, "one outcome per request");
    results
}

/// Files and directories.
pub trait Storage: Clone + Send + Sync + 'static {
    /// The file type.
    type File: StorageFile;
    /// A held exclusive lock on a path, released on drop.
    type Lock: Send + Sync + 'static;
    /// Takes the exclusive lock at `path` (a file created with
    /// `permissions`' mode) or fails at once.
    ///
    /// # Errors
    /// [`Error::DatabaseLocked`](crate::Error::DatabaseLocked) when it is held.
    fn lock_exclusive(&self, path: &Path, permissions: Permissions) -> Result<Self::Lock>;
    /// Opens (or creates) a file.
    ///
    /// # Errors
    /// As [`DirectFile::open`].
    fn open(&self, path: &Path, opts: &FileOptions) -> Result<Self::File>;
    /// Creates a directory and its missing parents with `permissions`'
    /// directory mode.
    ///
    /// # Errors
    /// I/O errors of `mkdir`.
    fn create_dirs(&self, path: &Path, permissions: Permissions) -> Result<()>;
    /// Creates a private directory and its parents (see
    /// [`create_dirs`](Self::create_dirs)).
    ///
    /// # Errors
    /// I/O errors of `mkdir`.
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.create_dirs(path, Permissions::Private)
    }
    /// The kind, mode and owner of `path`, not following a symlink (`lstat`).
    ///
    /// # Errors
    /// I/O errors of `lstat` (for example, no such path).
    fn stat(&self, path: &Path) -> Result<FileMeta>;
    /// The names of the entries of a directory, sorted.
    ///
    /// # Errors
    /// I/O errors of reading the directory.
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Renames a file (atomically replacing `to`).
    ///
    /// # Errors
    /// I/O errors of `rename`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Renames a file to a name nothing holds, atomically: when `to`
    /// exists (even if it appeared a moment ago) the call fails with the
    /// OS's `EEXIST` and neither file changes.
    ///
    /// # Errors
    /// I/O errors of `renameat2(RENAME_NOREPLACE)` (or, where the
    /// filesystem lacks it, of `linkat` and `unlinkat`).
    fn rename_new(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file.
    ///
    /// # Errors
    /// I/O errors of `unlink`.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Makes a directory's entries durable.
    ///
    /// # Errors
    /// I/O errors of opening or syncing the directory.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Whether a path exists (a symlink exists, wherever it points).
    fn exists(&self, path: &Path) -> bool;
    /// This storage with the directory `dir` held open from now on: every
    /// later operation on `dir` or on an entry directly inside it goes
    /// through the handle, so renaming `dir` (or a parent) or putting a
    /// symlink at its name redirects nothing. A `dir` directly inside a
    /// directory already held is reached without following a symlink; any
    /// other `dir` is the caller's path, resolved once, now.
    ///
    /// # Errors
    /// [`Error::NotADirectory`](crate::Error::NotADirectory) naming `dir`
    /// when it is not a directory, or a symlink inside a held directory; I/O
    /// errors of opening it.
    fn anchor(&self, dir: &Path) -> Result<Self>;
    /// Where `path` is for the operating system's own calls that no other
    /// storage has: the device probes and the published stats. Through a
    /// held directory where `path` is in one; by default the plain path.
    fn os_at(&self, path: &Path) -> At<'_> {
        At::cwd(path)
    }
    /// Whether its files put batches in flight through an attached [`Aio`]
    /// (see [`StorageFile::attach_aio`]); engines skip building one if not.
    fn supports_aio(&self) -> bool {
        false
    }
}

/// Most directories one [`OsStorage`] holds: a database's and its log's.
pub const HELD_DIRS_MAX: usize = 2;

/// The operating system's files, through [`DirectFile`], with the
/// directories given to [`Storage::anchor`] held open (see `Dir`).
#[derive(Debug, Clone, Default)]
pub struct OsStorage {
    held: Arc<[Arc<Dir>]>,
}

impl OsStorage {
    /// Where `path` is opened from: through a held directory when `path` is
    /// one (an exact match wins over everything else, so a held directory
    /// inside another held one is reached through its own handle) or names
    /// an entry directly inside one, else the plain path.
    fn at<'a>(&'a self, path: &Path) -> At<'a> {
        let found = match self.held(path) {
            Some(dir) => dir.itself(),
            None => self.held_parent(path).unwrap_or_else(|| At::cwd(path)),
        };
        assert_eq!(found.path(), path, "resolved where asked");
        found
    }

    /// `path` as the entry of the held directory it is directly inside.
    fn held_parent<'a>(&'a self, path: &Path) -> Option<At<'a>> {
        let (parent, name) = (path.parent()?, path.file_name()?);
        let dir = self.held.iter().find(|d| d.path() == parent)?;
        Some(dir.entry(name))
    }

    /// The held directory `path` is, if it is one.
    fn held(&self, path: &Path) -> Option<&Arc<Dir>> {
        self.held.iter().find(|d| d.path() == path)
    }
}

impl StorageFile for DirectFile {
    fn path(&self) -> &Path {
        DirectFile::path(self)
    }
    fn alignment(&self) -> Alignment {
        DirectFile::alignment(self)
    }
    fn io_path(&self) -> IoPath {
        DirectFile::io_path(self).clone()
    }
    fn read_at(&self, buf: IoMut<'_>, offset: u64) -> Result<usize> {
        DirectFile::read_at(self, buf, offset)
    }
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()> {
        DirectFile::write_all_at(self, data, offset)
    }
    fn sync(&self) -> Result<()> {
        DirectFile::sync(self)
    }
    fn sync_all(&self) -> Result<()> {
        DirectFile::sync_all(self)
    }
    fn len(&self) -> Result<u64> {
        DirectFile::len(self)
    }
    fn allocate(&self, len: u64, fill: Fill) -> Result<()> {
        DirectFile::allocate(self, len, fill)
    }
    fn set_len(&self, len: u64) -> Result<()> {
        DirectFile::set_len(self, len)
    }
    fn attach_aio(&self, aio: &std::sync::Arc<Aio>) -> Result<()> {
        DirectFile::attach_aio(self, aio)
    }
    fn run_batch(&self, ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        DirectFile::run_batch(self, ops)
    }
}

impl Storage for OsStorage {
    type File = DirectFile;
    type Lock = super::lock::DirLock;

    fn lock_exclusive(&self, path: &Path, permissions: Permissions) -> Result<Self::Lock> {
        super::lock::DirLock::acquire(&self.at(path), permissions)
    }

    fn open(&self, path: &Path, opts: &FileOptions) -> Result<DirectFile> {
        DirectFile::open_at(&self.at(path), opts)
    }

    fn create_dirs(&self, path: &Path, permissions: Permissions) -> Result<()> {
        if self.held(path).is_some() {
            return Ok(());
        }
        match self.held_parent(path) {
            // One level under a held directory: made through its handle.
            Some(at) => at.mkdir(permissions),
            None => super::perms::create_dirs(path, permissions),
        }
    }

    fn stat(&self, path: &Path) -> Result<FileMeta> {
        self.at(path).lstat()
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.at(path).list()
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.at(from).rename_to(&self.at(to))
    }

    fn rename_new(&self, from: &Path, to: &Path) -> Result<()> {
        self.at(from).rename_new_to(&self.at(to))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.at(path).unlink()
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.at(path).sync_dir()
    }

    fn supports_aio(&self) -> bool {
        true
    }

    fn exists(&self, path: &Path) -> bool {
        self.at(path).exists()
    }

    fn os_at(&self, path: &Path) -> At<'_> {
        self.at(path)
    }

    fn anchor(&self, dir: &Path) -> Result<Self> {
        if self.held(dir).is_some() {
            return Ok(self.clone());
        }
        assert!(
            self.held.len() < HELD_DIRS_MAX,
            "a database holds its directory and its log's"
        );
        // Inside a held directory, a symlink is refused; the user's own path
        // may lead through one.
        let opened = match self.held_parent(dir) {
            Some(at) => Dir::open(&at, false)?,
            None => Dir::open(&At::cwd(dir), true)?,
        };
        let mut held: Vec<Arc<Dir>> = self.held.iter().cloned().collect();
        held.push(Arc::new(opened));
        let anchored = OsStorage { held: held.into() };
        assert!(anchored.held(dir).is_some(), "the directory is held");
        Ok(anchored)
    }
}
