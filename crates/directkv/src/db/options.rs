//! How a database is opened: [`Options`] and [`Durability`].

use std::path::PathBuf;

use serde::Serialize;

use super::ArchiveChange;
use crate::io::{AioOptions, DirectIo, Permissions, SyncVariant};
use crate::sched::SchedOptions;

/// Whether `commit()` waits for the log to be durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Durability {
    /// `commit()` returns after the commit record is durable (the default).
    #[default]
    Sync,
    /// `commit()` returns at once; a crash may lose the latest commits (never
    /// part of one). **Not durable** on its own: for tests and bulk loads,
    /// or, per transaction ([`WriteOptions::durability`]), for commits a
    /// later durable commit carries.
    NoSyncNotDurable,
}

/// Caches this large and larger hold the WAL buffers inside `cache_bytes`.
pub const WAL_BUFFERS_INCLUDED_FROM: usize = 32 << 20;

/// The version store's cap when `Options::version_store_bytes` is `None`:
/// this fraction of `cache_bytes`...
pub const VERSION_STORE_CACHE_FRACTION: usize = 32;

/// ... but at least this many bytes.
pub const VERSION_STORE_BYTES_MIN: usize = 256 << 10;

impl Options {
    /// The version store's cap: `version_store_bytes`, or by default
    /// `cache_bytes / 32` (at least 256 KiB).
    pub fn version_store_cap(&self) -> usize {
        let cap = self.version_store_bytes.unwrap_or_else(|| {
            (self.cache_bytes / VERSION_STORE_CACHE_FRACTION).max(VERSION_STORE_BYTES_MIN)
        });
        assert!(
            self.version_store_bytes.is_some() || cap >= VERSION_STORE_BYTES_MIN,
            "the default cap is at least the floor"
        );
        cap
    }

    /// The buffer pool's share of `cache_bytes`: for caches of
    /// [`WAL_BUFFERS_INCLUDED_FROM`] bytes and more, what the WAL buffers and
    /// the version store's cap leave (at least half); smaller caches get
    /// those on top.
    pub(super) fn pool_bytes(&self) -> usize {
        let cache = self.cache_bytes;
        if cache < WAL_BUFFERS_INCLUDED_FROM {
            return cache;
        }
        let rest = cache - 2 * crate::wal::BUFFER_BYTES_DEFAULT;
        let pool = rest.saturating_sub(self.version_store_cap()).max(cache / 2);
        assert!(pool <= cache, "the pool is inside the cache");
        assert!(pool >= cache / 2, "the pool gets at least half the cache");
        pool
    }
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// The engine's memory for data: the buffer pool and, for caches of
    /// 32 MiB and more, the two 4 MiB WAL buffers and the version store's cap
    /// (smaller caches get them on top). Beyond it: per-transaction state.
    pub cache_bytes: usize,
    /// The most memory the version store may hold for read transactions'
    /// snapshots (before-images of what commits changed since the oldest
    /// snapshot began), counted inside `cache_bytes`. A read transaction
    /// whose snapshot would need more is given up: its next read returns
    /// [`Error::SnapshotTooOld`](crate::Error::SnapshotTooOld). `None` (the
    /// default): `cache_bytes / 32`, at least 256 KiB
    /// ([`VERSION_STORE_BYTES_MIN`](crate::VERSION_STORE_BYTES_MIN)).
    pub version_store_bytes: Option<usize>,
    /// Page size, fixed at creation: 4096, 8192 or 16384.
    pub page_bytes: u32,
    /// Direct-I/O policy for the data file and the WAL.
    pub direct_io: DirectIo,
    /// The WAL sync method. `None`: the fastest durable method recorded in the
    /// device profile of the WAL directory (`directkv test-fsync
    /// --save-profile` writes one). Where there is none, open **measures**:
    /// each durable candidate (`fdatasync`, and with direct I/O where the
    /// filesystem allows it `fdatasync`, `open_datasync` and `pwrite_dsync`)
    /// for 0.15 s on a scratch file it removes, then saves the profile, so
    /// only the first open on a filesystem pays for it. Among the measured
    /// methods it takes the direct ones for a direct-I/O database and the
    /// buffered ones otherwise; if nothing could be measured, `fdatasync`.
    pub wal_sync: Option<SyncVariant>,
    /// Where the WAL lives (default: `wal/` in the database directory). May be
    /// another filesystem. Open resolves it once and holds it open, as it
    /// does the database directory; the default `wal/` must be a directory,
    /// not a symbolic link ([`Error::NotADirectory`](crate::Error::NotADirectory)),
    /// while a path given here may lead through one.
    pub wal_dir: Option<PathBuf>,
    /// A directory every WAL segment is copied into once it is complete
    /// (checked record by record, synced), before a checkpoint may recycle
    /// it: with a backup, the archive restores the database to any later
    /// commit ([`restore_backup_chain_to`](crate::restore_backup_chain_to)).
    /// Created if missing. If archiving fails the segment is kept, the
    /// failure counted in [`Stats::archive`](crate::Stats::archive) and
    /// retried, and commits go on until the log's space runs out. Give each
    /// database its own: the archive is never overwritten. Default: none.
    ///
    /// The directory (made absolute) is recorded with the database, in its
    /// file `ARCHIVE`: every later open archives into it, with or without
    /// this option, until [`wal_archive_change`](Self::wal_archive_change)
    /// switches or stops it. Given while another directory is recorded, it
    /// is [`Error::ArchiveMismatch`](crate::Error::ArchiveMismatch).crate::Error::ArchiveMismatch). An
    /// open without this option never creates the recorded directory: a
    /// missing one is [`Error::ArchiveMissing`](crate::Error::ArchiveMissing),
    /// one without this database's `ARCHIVE_ID`, or a copy of the database
    /// directory, [`Error::ArchiveForeign`](crate::Error::ArchiveForeign)
    /// (docs/backup.md).
    pub wal_archive: Option<PathBuf>,
    /// What this open does to the recorded archive setting: keep it (the
    /// default), switch to [`wal_archive`](Self::wal_archive), or turn
    /// archiving off.
    pub wal_archive_change: ArchiveChange,
    /// PostgreSQL's `archive_timeout`: once the archive has lacked a
    /// durable commit for this long (a seal, holding none, does not count), the segment being written is
    /// archived as it is (a partial copy, replaced by fuller ones and at
    /// last by the whole segment), so the archive lags the durable log by
    /// about this much at most. Needs the background threads. Recorded
    /// with the archive's directory; `None` keeps the recorded one (none at
    /// first), `Some(Duration::ZERO)` turns it off. Given without an
    /// archive (none recorded or given, or with `Off`), it is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub archive_timeout: Option<std::time::Duration>,
    /// Whether commits wait for durability.
    pub durability: Durability,
    /// WAL segment size.
    pub wal_segment_bytes: u64,
    /// How long the log stays idle after a flush that held commits ended
    /// before a background thread writes a *seal* (a flush of no record:
    /// 512 bytes and a sync) that proves that flush complete. Until then,
    /// damage found in the last flush after a crash cannot be told from a
    /// torn write of it and is discarded (and reported) as one; once
    /// sealed, it is refused as corruption. Close and drop seal too.
    /// Commits closer together than this write no seals; each commit
    /// followed by a longer pause costs one seal, which a commit arriving
    /// while it syncs waits for. `None`: seal only on close and drop.
    /// Needs `background_threads` and a durable `wal_sync`. At most one
    /// hour. Default: 10 ms.
    pub wal_seal_delay: Option<std::time::Duration>,
    /// A checkpoint starts by itself once this much WAL was written since the
    /// last one; at least [`CHECKPOINT_WAL_BYTES_MIN`] (a checkpoint's own
    /// record and padding take log space too, so a smaller distance could
    /// never be met). Once the log since the redo point reaches three times
    /// this distance, new write transactions wait for the checkpoint, which
    /// bounds the log a crash leaves to replay.
    pub checkpoint_wal_bytes: u64,
    /// Create the database if the directory is missing or empty.
    pub create_if_missing: bool,
    /// Run automatic checkpoints and WAL segment preparation on background
    /// threads (the default). Off, nothing runs except on the caller's threads:
    /// checkpoints happen only when asked for, segments are prepared when first
    /// needed. The deterministic simulator turns this off.
    pub background_threads: bool,
    /// Leaves a sequential scan reads ahead, asynchronously (0: off). Direct
    /// I/O has no kernel readahead; this is the engine's own.
    pub readahead_pages: usize,
    /// The I/O scheduler's policy and knobs (`SchedMode::Fifo` turns it into
    /// plain first-come-first-served, for comparison).
    pub io_scheduler: SchedOptions,
    /// The asynchronous I/O backend (io_uring or a thread pool) that carries
    /// batched page reads and writes: the cleaner's and checkpoint's writes,
    /// with adjacent pages coalesced, and readahead. The library reads no
    /// environment; the `directkv` command lets `DIRECTKV_IO_BACKEND`
    /// (`uring`, `threads`, `off`, `auto`) override the backend of every
    /// database it opens.
    pub async_io: AioOptions,
    /// The data file grows ahead of use in zero-filled extents of up to this
    /// many bytes (a quarter of the file, from 1 MiB), prepared by the
    /// background cleaner, so page writes are overwrites and a checkpoint's
    /// sync commits no filesystem metadata. 0: the file grows by its page
    /// writes.
    pub data_extend_bytes: u64,
    /// Full page images in the WAL (a page's first change after a checkpoint
    /// begins, the torn-page protection) are compressed with LZ4 where that
    /// makes them smaller. They are most of the log under random updates,
    /// and every committer waits for the log to be written.
    pub compress_page_images: bool,
    /// Publish `stats()` every second to [`STATS_FILE`](crate::STATS_FILE)
    /// in the database directory (removed at close), for `directkv stats` in
    /// another process. Off, the engine writes nothing there but its own
    /// files.
    pub publish_stats: bool,
    /// Who may read the directories and files the engine creates:
    /// [`Permissions::Private`] (the default: directories `0700`, files
    /// `0600`) or [`Permissions::GroupReadable`] (`0750`, `0640`). The umask
    /// may take more away, never add. Files that exist keep their modes;
    /// those readable beyond this setting are listed in
    /// [`Stats::readable_by_others`](crate::Stats::readable_by_others).
    pub permissions: Permissions,
    /// Open a database even though its directory, its WAL directory or a
    /// file in them is writable by the group or by others. Off (the
    /// default), such an open fails with
    /// [`Error::WritableByOthers`](crate::Error::WritableByOthers) naming
    /// the path and its mode, because anyone who may write there may change
    /// or replace the data.
    pub accept_writable_by_others: bool,
    /// Run write transactions one at a time, each holding one writer lock
    /// from `begin_write` to its commit, as the engine did before it ran
    /// them concurrently. Off (the default), write transactions run at once
    /// and only their commits are serialized. For comparison and for
    /// workloads that would only conflict.
    pub serial_writers: bool,
}

/// How a write transaction is isolated from the write transactions that run
/// beside it. Either way it reads one snapshot (as of its start) plus its
/// own writes, and [`WriteTxn::get_for_update`](crate::WriteTxn::get_for_update)
/// reads the latest committed value under a row lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// The outcome is that of running the committed transactions one after
    /// another in commit order: at commit, every key and range the
    /// transaction read from its snapshot (not under a row lock) is checked
    /// unchanged since, so a phantom counts; a change is
    /// [`Error::Conflict`](crate::Error::Conflict). The default.
    #[default]
    Serializable,
    /// Snapshot isolation (PostgreSQL's `REPEATABLE READ`): a key it
    /// locks (`put`, `delete`, `get_for_update`) must be unchanged since its
    /// snapshot, checked as the lock is taken, else that call fails with
    /// [`Error::Conflict`](crate::Error::Conflict): the first committer of a
    /// key wins, and a locking read reads the snapshot's value. Plain reads
    /// are not checked, so write skew can happen.
    Snapshot,
}

/// The smallest [`Options::checkpoint_wal_bytes`]: open refuses less.
pub const CHECKPOINT_WAL_BYTES_MIN: u64 = 32 << 10;

/// The options of one write transaction
/// ([`Database::begin_write_with`](crate::Database::begin_write_with)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Its isolation level (default [`Isolation::Serializable`]).
    pub isolation: Isolation,
    /// How long it waits for a row lock (and, with
    /// [`Options::serial_writers`], to begin) before
    /// [`Error::LockTimeout`](crate::Error::LockTimeout) (default 10 s);
    /// `Duration::MAX` waits as long as it takes (a deadlock is still
    /// detected at once).
    pub lock_timeout: std::time::Duration,
    /// Whether its commit waits for durability; `None` (the default) takes
    /// [`Options::durability`]. A commit that does not wait is made durable
    /// by the next one that does (or by the log's own writer, when its
    /// buffers fill or a checkpoint runs): the log is one sequence, so a
    /// durable commit carries every commit before it.
    pub durability: Option<Durability>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            isolation: Isolation::Serializable,
            lock_timeout: std::time::Duration::from_secs(10),
            durability: None,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cache_bytes: 128 << 20,
            version_store_bytes: None,
            page_bytes: 8192,
            direct_io: DirectIo::Auto,
            wal_sync: None,
            wal_dir: None,
            wal_archive: None,
            wal_archive_change: ArchiveChange::Keep,
            archive_timeout: None,
            durability: Durability::Sync,
            wal_segment_bytes: crate::wal::SEGMENT_BYTES_DEFAULT,
            wal_seal_delay: Some(crate::wal::SEAL_DELAY_DEFAULT),
            checkpoint_wal_bytes: 256 << 20,
            create_if_missing: true,
            background_threads: true,
            readahead_pages: 32,
            io_scheduler: SchedOptions::default(),
            async_io: AioOptions::default(),
            data_extend_bytes: 64 << 20,
            compress_page_images: true,
            publish_stats: true,
            permissions: Permissions::Private,
            accept_writable_by_others: false,
            serial_writers: false,
        }
    }
}
