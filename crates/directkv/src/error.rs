//! Errors of the engine.
//!
//! Operating errors (the disk, the filesystem, bad input) are values of [`Error`];
//! programmer errors (a broken invariant inside the engine) panic. Every error
//! that concerns a file names it, and where it concerns a position, the offset.
//!
//! Invariants:
//! - An error from a write or a sync is never mapped to success, and a
//!   direct-I/O file that saw one answers every later
//!   write and sync with [`Error::Poisoned`] (DESIGN.md invariant 3).
//! - `ENOSPC`/`EDQUOT` become [`Error::DiskFull`] and `EROFS` becomes
//!   [`Error::ReadOnlyFilesystem`], so a caller can act on them without parsing
//!   errno values.

use std::fmt;
use std::path::PathBuf;

/// The result type of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Locks `m` even when poisoned. Only for teardown (a `Drop` that must stop
/// threads whatever happened), for reading diagnostics, and for critical
/// sections a panic cannot leave half done (a push, a pop, a counter's
/// arithmetic); never for state a panic could leave inconsistent. It lives
/// here, at the bottom of the layers, so that `io` and `sched` can use it;
/// `health` re-exports it beside its poison-aware locks.
pub(crate) fn lock_even_poisoned<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The system call an I/O error came from. More may be added: a match on
/// it needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    /// `open(2)`.
    Open,
    /// `pread(2)` or an equivalent read.
    Read,
    /// `pwrite(2)`, `pwritev2(2)` or an equivalent write.
    Write,
    /// `fsync(2)` or `fdatasync(2)`.
    Sync,
    /// `fallocate(2)`, `ftruncate(2)` or the zero fill after them.
    Allocate,
    /// `statx(2)`, `fstat(2)` or `statfs(2)`.
    Stat,
    /// `unlink(2)`.
    Remove,
    /// `rename(2)`.
    Rename,
    /// `mkdir(2)`.
    CreateDir,
    /// Listing a directory.
    ListDir,
    /// `flock(2)`.
    Lock,
    /// `posix_fadvise(2)`.
    Advise,
    /// Starting a background thread (`clone(2)`); the path is the
    /// database's.
    SpawnThread,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            IoOp::Open => "open",
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Sync => "sync",
            IoOp::Allocate => "allocate",
            IoOp::Stat => "stat",
            IoOp::Remove => "remove",
            IoOp::Rename => "rename",
            IoOp::CreateDir => "create directory",
            IoOp::ListDir => "list directory",
            IoOp::Lock => "lock",
            IoOp::Advise => "advise",
            IoOp::SpawnThread => "starting a background thread",
        };
        f.write_str(name)
    }
}

/// An error of the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call on a file failed.
    #[error("{op} of {path} failed{}: {source}", at_offset(*.offset))]
    Io {
        /// The failing operation.
        op: IoOp,
        /// The file or directory.
        path: PathBuf,
        /// The byte offset, for reads and writes.
        offset: Option<u64>,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The filesystem or device is out of space (`ENOSPC` or `EDQUOT`).
    #[error(
        "no space left for {op} of {path}{}: {source}; free space on that filesystem, \
         then retry",
        at_offset(*.offset)
    )]
    DiskFull {
        /// The failing operation.
        op: IoOp,
        /// The file.
        path: PathBuf,
        /// The byte offset, for writes.
        offset: Option<u64>,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The filesystem is mounted read-only (`EROFS`).
    #[error("{path} is on a read-only filesystem ({op} refused)")]
    ReadOnlyFilesystem {
        /// The failing operation.
        op: IoOp,
        /// The file.
        path: PathBuf,
    },

    /// Direct I/O was required (`DirectIo::On`) but the filesystem refuses it.
    #[error(
        "direct I/O (O_DIRECT) is not available for {path} on this {fs_type} filesystem (it \
         refuses O_DIRECT, or keeps every page in memory anyway as tmpfs does); \
         use DirectIo::Auto to fall back to buffered I/O (reported in stats), \
         DirectIo::Off, or put the database on a filesystem that supports O_DIRECT \
         (ext4, XFS)"
    )]
    DirectIoUnsupported {
        /// The file that could not be opened with `O_DIRECT`.
        path: PathBuf,
        /// The filesystem type, as far as it could be determined.
        fs_type: String,
    },

    /// A buffer or offset does not meet the alignment that direct I/O requires.
    #[error(
        "unaligned I/O on {path}: offset {offset} and length {len} must be multiples of \
         {required} bytes, and the buffer's unit ({buffer_unit} bytes) at least that"
    )]
    Unaligned {
        /// The file.
        path: PathBuf,
        /// The file offset.
        offset: u64,
        /// The length of the transfer.
        len: usize,
        /// The alignment the file requires.
        required: u32,
        /// The alignment unit the buffer guarantees.
        buffer_unit: u32,
    },

    /// A read ended before the requested range was complete.
    #[error("{path}: expected {wanted} bytes at offset {offset}, the file ends after {got}")]
    UnexpectedEof {
        /// The file.
        path: PathBuf,
        /// Where the read started.
        offset: u64,
        /// The bytes requested.
        wanted: usize,
        /// The bytes that were there.
        got: usize,
    },

    /// A feature the request needs is not available on this kernel or filesystem.
    #[error("{what} is not supported here: {detail}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// Why, and what to do instead.
        detail: String,
    },

    /// An earlier write or sync failed, so nothing written since can be trusted to
    /// be durable. Close and reopen to run recovery.
    #[error(
        "{path}: an earlier write or sync failed ({cause}); the file accepts no more \
         writes or syncs, because a later sync could report success for data the kernel \
         already dropped. Close and reopen to run recovery"
    )]
    Poisoned {
        /// The file or database that failed.
        path: PathBuf,
        /// The first failure, in words.
        cause: String,
    },

    /// A commit's WAL write or sync failed after it may have reached the disk: the
    /// transaction may or may not be durable, and recovery decides. The log is
    /// poisoned; close and reopen.
    #[error(
        "commit outcome unknown: the WAL write or sync covering LSN {lsn} failed ({cause}); \
         the commit may or may not be durable, and recovery on reopen decides"
    )]
    CommitOutcomeUnknown {
        /// The end LSN the commit waited for.
        lsn: crate::lsn::Lsn,
        /// The failure.
        cause: String,
    },

    /// The path is not a directkv database (or its control file is unreadable).
    #[error("{path} is not a directkv database: {detail}")]
    NotADatabase {
        /// The path.
        path: PathBuf,
        /// Why.
        detail: String,
    },

    /// The files are of a format version this build does not read.
    #[error(
        "{path} has format version {found}; this build reads version {supported}. Use a \
         directkv release that supports it"
    )]
    FormatVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },

    /// Another process (or another handle in this process) has the database open.
    #[error("the database at {path} is already open ({holder}); close it first")]
    DatabaseLocked {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as recorded in the lock file.
        holder: String,
    },

    /// Every cache frame is pinned: the cache is too small for what is asked.
    #[error("all {frames} cache frames are pinned; raise cache_bytes")]
    CacheExhausted {
        /// Frames in the cache.
        frames: usize,
    },

    /// A transaction changes more pages than the cache can hold until its commit
    /// record is written. Nothing was changed.
    #[error(
        "the transaction changes more pages ({pages}) than the cache can hold at once \
         ({frames} frames); raise cache_bytes or split the transaction. Nothing was changed"
    )]
    TransactionTooLarge {
        /// Pages the transaction had changed when the cache ran out.
        pages: usize,
        /// Frames in the cache.
        frames: usize,
    },

    /// A read transaction's snapshot was given up: keeping the versions it
    /// needs would have passed the version store's cap
    /// (`Options::version_store_bytes`). Nothing it read before was wrong;
    /// begin a new read transaction (or raise the cap) and read again.
    #[error(
        "snapshot too old: the read transaction's snapshot (commit {snapshot}) was given up \
         because keeping what it needs would pass the version store's cap of {cap_bytes} \
         bytes (snapshots from commit {oldest_kept} on are kept); begin a new read \
         transaction, or raise Options::version_store_bytes"
    )]
    SnapshotTooOld {
        /// The commit sequence number the snapshot saw.
        snapshot: u64,
        /// Snapshots at this commit and later are still served.
        oldest_kept: u64,
        /// The version store's cap.
        cap_bytes: usize,
    },

    /// A write transaction could not commit: another transaction committed
    /// a change, after its snapshot, to what it read from the snapshot
    /// (Serializable, at commit) or to a key it locks or writes (Snapshot,
    /// at that `get_for_update`, `put` or `delete`). The reason names the
    /// rule. Nothing of it was applied; run it again
    /// (`Database::transaction` does).
    #[error(
        "conflict: {reason} (key {key:?}); nothing of the transaction was applied. Run it \
         again: the next try reads the newer state"
    )]
    Conflict {
        /// The key (lossily as text) or range where the conflict was found.
        key: String,
        /// What the other transaction changed.
        reason: String,
    },

    /// No table of that name is visible to the transaction's snapshot (or,
    /// for a create, rename or drop, in the latest committed state).
    #[error("no table named {name:?}")]
    TableNotFound {
        /// The name asked for.
        name: String,
    },

    /// A table of that name exists already (a create, or a rename onto it).
    #[error("a table named {name:?} exists already")]
    TableExists {
        /// The name asked for.
        name: String,
    },

    /// A table handle used where its table is not visible: dropped before
    /// the transaction's snapshot (or by this transaction), or created by a
    /// transaction that committed after it (or has not committed).
    #[error(
        "table {id} is not visible to this transaction: dropped before its snapshot or by \
         it, or created after its snapshot"
    )]
    TableNotVisible {
        /// The table's id.
        id: u32,
    },

    /// Waiting for a row lock would have closed a cycle of transactions
    /// each waiting for the next: this one is the victim. Its locks are
    /// released and nothing of it will be applied; run it again.
    #[error(
        "deadlock: waiting for the lock on key {key:?} would close a cycle of waiting \
         transactions; this transaction was chosen to end it. Nothing of it will be \
         applied; run it again"
    )]
    Deadlock {
        /// The key (lossily as text) it asked to lock.
        key: String,
    },

    /// A row lock was not granted within the transaction's lock timeout
    /// (`WriteOptions::lock_timeout`). The transaction is unchanged: it may
    /// try again or end.
    #[error(
        "lock wait timeout: the lock on key {key:?} was not granted within {waited_ms} ms; \
         another transaction holds it. The transaction is unchanged"
    )]
    LockTimeout {
        /// The key (lossily as text).
        key: String,
        /// How long it waited.
        waited_ms: u64,
    },

    /// An argument is outside what the engine accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A directory or file of the database is writable by its group or by
    /// others, so anyone in them could change or replace its data. Open
    /// refuses it unless `Options::accept_writable_by_others` is set.
    #[error(
        "{path} has mode {mode:04o}: it is writable by its group or by others, who could \
         change or replace the database's data; refusing to open it. Remove their write \
         access (chmod go-w), or set Options::accept_writable_by_others to open it anyway"
    )]
    WritableByOthers {
        /// The directory or file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },

    /// Where the engine expects one of its regular files, the path is
    /// something else: a symbolic link (never followed), a FIFO, a device, a
    /// socket or a directory. Nothing was read from or written to it.
    #[error(
        "{path} is a {kind}, not a regular file; the engine opens only regular files in \
         the database and WAL directories and never follows a symbolic link there. \
         Put the file itself in place of the {kind}"
    )]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is: `symbolic link`, `FIFO`, `directory`, ...
        kind: String,
    },

    /// A database or WAL directory is not a directory, or is a symbolic link
    /// inside the database directory (the engine never follows one there;
    /// `Options::wal_dir` puts the log elsewhere).
    #[error(
        "{path} is a {kind}, not a directory the engine may use: it keeps its files in \
         directories it opens itself and never follows a symbolic link inside the \
         database directory (Options::wal_dir may name a log directory elsewhere)"
    )]
    NotADirectory {
        /// The path.
        path: PathBuf,
        /// What it is: `symbolic link`, `regular file`, ...
        kind: String,
    },

    /// Backups that do not form a chain: an incremental backup without its
    /// parent, of another database, or given out of order.
    #[error("{path}: not a link of this backup chain: {detail}")]
    BackupChain {
        /// The backup directory that does not fit.
        path: PathBuf,
        /// Why.
        detail: String,
    },

    /// A backup that was never completed (no completion marker matching its
    /// manifest): interrupted, or still being written. Open and restore
    /// refuse it.
    #[error("{path} is an incomplete backup: {detail}")]
    IncompleteBackup {
        /// The backup directory.
        path: PathBuf,
        /// What is missing.
        detail: String,
    },

    /// `Options::wal_archive` names another directory than the log archive
    /// recorded with the database: segments would be split between two
    /// archives, and a restore to a point in time would find a hole. Give
    /// the recorded directory (or none), or switch explicitly with
    /// `Options::wal_archive_change`.
    #[error(
        "the database archives its log into {recorded}, but the options name {given}: give \
         the recorded directory, or none, or set wal_archive_change to Switch (or Off)"
    )]
    ArchiveMismatch {
        /// The directory recorded with the database.
        recorded: PathBuf,
        /// The one the options name.
        given: PathBuf,
    },

    /// The log archive recorded with the database does not exist, and the
    /// open did not name it (`Options::wal_archive` unset): it is never
    /// created then, since segments archived into a directory that stands
    /// in for an unmounted file system would be recycled and missing from
    /// the real archive.
    #[error(
        "the log archive {dir} recorded with the database does not exist (a file system not \
         mounted?): mount it, or name it in wal_archive to create it, or set \
         wal_archive_change to Switch (or Off)"
    )]
    ArchiveMissing {
        /// The recorded directory.
        dir: PathBuf,
    },

    /// The log archive recorded with the database `database` cannot be
    /// taken as its archive: the directory holds another archive (or none),
    /// or the record was written in another database directory (this one
    /// is a copy, which must not archive into the original's line of
    /// history). Nothing is archived or recycled; `Switch` (with a
    /// directory of its own) or `Off` in `Options::wal_archive_change`
    /// decides.
    #[error(
        "the log archive {dir} recorded with the database {database} is not its own: \
         {detail}; set wal_archive_change to Switch (with an archive of its own) or Off"
    )]
    ArchiveForeign {
        /// The archive's directory.
        dir: PathBuf,
        /// The database directory.
        database: PathBuf,
        /// Why.
        detail: String,
    },

    /// Bytes read from disk do not decode to what was expected.
    #[error(
        "corrupt data in {path} at byte offset {offset}{}: {detail}",
        in_page(*.page)
    )]
    Corruption {
        /// The file, as an absolute path where the database's was given
        /// relative.
        path: PathBuf,
        /// The byte offset in `path` of the bad structure (a page's start,
        /// page number times page size, when it is a page).
        offset: u64,
        /// The page number, when the bad structure is a page of the data
        /// file (or a copy of one); `offset` is then where it starts.
        page: Option<u64>,
        /// What is wrong.
        detail: String,
    },
}

fn at_offset(offset: Option<u64>) -> String {
    match offset {
        Some(offset) => format!(" at offset {offset}"),
        None => String::new(),
    }
}

fn in_page(page: Option<u64>) -> String {
    match page {
        Some(page) => format!(" (page {page})"),
        None => String::new(),
    }
}

impl Error {
    /// The same error naming another file: `rename` maps the path of a
    /// corruption or an I/O error (the byte offset, page and detail stay);
    /// every other error is returned as it is.
    pub(crate) fn with_path(self, rename: impl FnOnce(PathBuf) -> PathBuf) -> Error {
        match self {
            Error::Corruption {
                path,
                offset,
                page,
                detail,
            } => Error::Corruption {
                path: rename(path),
                offset,
                page,
                detail,
            },
            Error::Io {
                op,
                path,
                offset,
                source,
            } => Error::Io {
                op,
                path: rename(path),
                offset,
                source,
            },
            other => other,
        }
    }

    /// Classifies an operating-system error from `op` on `path`.
    pub fn from_io(
        op: IoOp,
        path: impl Into<PathBuf>,
        offset: Option<u64>,
        source: std::io::Error,
    ) -> Error {
        let path = path.into();
        let errno = source.raw_os_error();
        // Errno 0 is success: a caller that made an error of it lost the
        // real one.
        assert!(
            errno.is_none_or(|e| e > 0),
            "an OS error's errno is positive"
        );
        let classified = match errno {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::DiskFull {
                op,
                path,
                offset,
                source,
            },
            Some(libc::EROFS) => Error::ReadOnlyFilesystem { op, path },
            _ => Error::Io {
                op,
                path,
                offset,
                source,
            },
        };
        assert_eq!(
            classified.raw_os_error(),
            errno,
            "classification keeps the errno"
        );
        assert!(
            !classified.is_retryable(),
            "an I/O error is never retried as a conflict is"
        );
        classified
    }

    /// Whether running the transaction again may succeed: a
    /// [`Conflict`](Error::Conflict), a [`Deadlock`](Error::Deadlock), or a
    /// [`SnapshotTooOld`](Error::SnapshotTooOld) of a write transaction's
    /// reads. `Database::transaction` retries exactly these.
    pub fn is_retryable(&self) -> bool {
        let retryable = matches!(
            self,
            Error::Conflict { .. } | Error::Deadlock { .. } | Error::SnapshotTooOld { .. }
        );
        assert!(
            !retryable || self.raw_os_error().is_none(),
            "a retryable error comes from the engine, never from the OS"
        );
        retryable
    }

    /// The errno behind this error, where there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::DiskFull { source, .. } => source.raw_os_error(),
            Error::ReadOnlyFilesystem { .. } => Some(libc::EROFS),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classification() {
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = Error::from_io(IoOp::Write, "/x", Some(8192), enospc);
        assert!(matches!(e, Error::DiskFull { .. }));
        assert!(e.to_string().contains("offset 8192"), "{e}");
        let erofs = std::io::Error::from_raw_os_error(libc::EROFS);
        assert!(matches!(
            Error::from_io(IoOp::Open, "/x", None, erofs),
            Error::ReadOnlyFilesystem { .. }
        ));
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        let e = Error::from_io(IoOp::Sync, "/x", None, eio);
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
}
