//! The handle of an open database: [`Database`], its operations, and its
//! orderly drop.
//!
//! Invariants:
//! - Every operation checks the engine's health first, and any failure that
//!   stops the engine (a poisoned lock or file, a log failure) latches it
//!   (see [`crate::health`]), so after the first one every call returns
//!   [`Error::Poisoned`](crate::Error::Poisoned).
//! - Dropping the handle stops and joins every background thread before
//!   the engine's state goes away.

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::checkpoint::background::{self, stop_signal, StopSignal};
use super::engine::Inner;
use super::stats::STATS_FILE;
use super::txn::read::{self as txn, ReadTxn};
use super::txn::tables::Tree;
use super::txn::write::WriteTxn;
use super::{CheckReport, CompactOptions, CompactReport, Options, Stats, WriteOptions};
use crate::error::{Error, IoOp, Result};
use crate::health;
use crate::io::{OsStorage, Storage};

/// Attempts [`Database::transaction`] makes at most.
pub const TRANSACTION_ATTEMPTS_MAX: usize = 64;

/// The sleep before attempt `attempt` of a transaction: random, up to a
/// ceiling that doubles from 50 µs to 10 ms, so transactions that collided
/// spread out instead of colliding again.
fn backoff(attempt: usize) -> std::time::Duration {
    assert!(
        attempt > 0 && attempt < TRANSACTION_ATTEMPTS_MAX,
        "a retry's attempt"
    );
    let ceiling_us = (50u64 << attempt.min(8)).min(10_000);
    // A cheap per-thread random number: the low bits of a hashed clock.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    let mixed = nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    std::time::Duration::from_micros(ceiling_us / 2 + mixed % (ceiling_us / 2 + 1))
}

/// An open database. `Send + Sync`: share one handle between threads.
///
/// # Examples
/// ```no_run
/// use directkv::{Database, Options};
/// let db = Database::open("my.db", Options::default())?;
/// let mut w = db.begin_write()?;
/// w.put(b"hello", b"world")?;
/// w.commit()?;
/// assert_eq!(db.begin_read()?.get(b"hello")?, Some(b"world".to_vec()));
/// # Ok::<(), directkv::Error>(())
/// ```
pub struct Database<S: Storage = OsStorage> {
    pub(super) inner: Arc<Inner<S>>,
    pub(super) checkpointer: Option<JoinHandle<()>>,
    pub(super) cleaner: Option<JoinHandle<()>>,
    pub(super) cleaner_stop: StopSignal,
    /// The log archiver (with `Options::wal_archive`); stopped by
    /// `cleaner_stop`.
    pub(super) archiver: Option<JoinHandle<()>>,
    pub(super) readers: Vec<JoinHandle<()>>,
}

impl Database<OsStorage> {
    /// Opens the database in directory `path`, creating it if the directory is
    /// missing or empty (and `create_if_missing`), recovering it after a crash.
    ///
    /// Recovery replays the WAL from the last checkpoint's redo point. Pages
    /// changed since then come from their full-page images in the log, not
    /// from the data file, so its cost follows the log, not the pages it
    /// touches; [`Stats::recovery`] says what it did.
    ///
    /// # Errors
    /// - [`Error::DatabaseLocked`](crate::Error::DatabaseLocked) if it is
    ///   open elsewhere;
    /// - [`Error::NotADatabase`](crate::Error::NotADatabase) for a non-empty
    ///   directory that is not one;
    /// - [`Error::FormatVersion`](crate::Error::FormatVersion) for another
    ///   format;
    /// - [`Error::Corruption`](crate::Error::Corruption) when recovery finds
    ///   damage it must not paper over;
    /// - [`Error::DirectIoUnsupported`](crate::Error::DirectIoUnsupported)
    ///   for `DirectIo::On` where the filesystem refuses;
    /// - [`Error::WritableByOthers`](crate::Error::WritableByOthers) when
    ///   the group or others may write the directory, the WAL directory or a
    ///   file in them (unless `Options::accept_writable_by_others`);
    /// - [`Error::NotARegularFile`](crate::Error::NotARegularFile) when one
    ///   of its files is a symbolic link, a FIFO, a device or a directory;
    /// - [`Error::NotADirectory`](crate::Error::NotADirectory) when the
    ///   database or WAL directory is not one, or the default `wal/` is a
    ///   symbolic link;
    /// - I/O errors.
    ///
    /// The database directory and the WAL directory are resolved once and
    /// held open for as long as the database is: moving or replacing either
    /// afterwards redirects nothing.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Self> {
        Self::open_with(OsStorage::default(), path.as_ref(), opts)
    }
}

impl<S: Storage> Database<S> {
    /// Opens with an explicit storage backend (for the simulated disk).
    ///
    /// # Errors
    /// As [`Database::open`].
    pub fn open_with(storage: S, path: &Path, opts: Options) -> Result<Self> {
        start_threads(super::open::open(storage, path, opts)?)
    }

    /// Begins a read transaction: a snapshot of the last commit, which
    /// every read in it sees (see [`ReadTxn`]). It waits for no writer.
    ///
    /// # Errors
    /// [`Error::Poisoned`](crate::Error::Poisoned) once the database has
    /// failed.
    pub fn begin_read(&self) -> Result<ReadTxn<'_, S>> {
        self.inner.vitals.health.check()?;
        ReadTxn::new(&self.inner)
    }

    /// Begins a write transaction with the default [`WriteOptions`]
    /// (Serializable). Many run at once: each reads a snapshot as of its
    /// start plus its own writes, and its commit checks that what it read
    /// from the snapshot is unchanged since (see [`WriteTxn`]). A thread
    /// that holds a key's row lock in one of its transactions and asks for
    /// it in another waits for itself until the lock timeout
    /// ([`Error::LockTimeout`](crate::Error::LockTimeout)); so does one
    /// whose wait leads back to one of its own transactions through other
    /// threads' (the deadlock check sees transactions, not threads, and a
    /// transaction that is not waiting ends no cycle).
    ///
    /// # Errors
    /// [`Error::Poisoned`](crate::Error::Poisoned) once the database has
    /// failed (after a WAL failure, for example);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) with
    /// `Options::serial_writers` when the calling thread began the write
    /// transaction that is still running (waiting for it would wait
    /// forever; one moved to another thread since still counts);
    /// [`Error::LockTimeout`](crate::Error::LockTimeout) with
    /// `Options::serial_writers` when the running one did not end within
    /// [`WriteOptions::lock_timeout`].
    pub fn begin_write(&self) -> Result<WriteTxn<'_, S>> {
        self.begin_write_with(&WriteOptions::default())
    }

    /// Begins a write transaction with `opts` (its isolation level and lock
    /// timeout).
    ///
    /// # Errors
    /// As [`begin_write`](Self::begin_write).
    pub fn begin_write_with(&self, opts: &WriteOptions) -> Result<WriteTxn<'_, S>> {
        self.inner.vitals.health.check()?;
        self.inner.wait_for_log_space();
        // The database may have failed during the wait.
        self.inner.vitals.health.check()?;
        if !self.inner.env.opts.serial_writers {
            return WriteTxn::new(&self.inner, *opts, None);
        }
        if self.inner.txns.writer.held_by_this_thread() {
            return Err(Error::InvalidArgument(
                "this thread already holds the database's write transaction; commit or drop \
                 it before beginning another (Options::serial_writers runs one at a time)"
                    .into(),
            ));
        }
        let t = Instant::now();
        let ticket = self.inner.txns.writer.acquire(opts.lock_timeout);
        self.inner
            .vitals
            .counters
            .writer_lock_wait
            .record(t.elapsed());
        let Some(ticket) = ticket else {
            return Err(Error::LockTimeout {
                key: "(the one write transaction of Options::serial_writers)".into(),
                waited_ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        };
        WriteTxn::new(&self.inner, *opts, Some(ticket))
    }

    /// Runs `body` in a write transaction and commits it, running it again
    /// (in a new transaction, after a short randomized backoff) when it or
    /// its commit fails with a retryable error
    /// ([`Error::is_retryable`](crate::Error::is_retryable): a conflict, a
    /// deadlock, a snapshot given up), at most [`TRANSACTION_ATTEMPTS_MAX`]
    /// times. `body` may run more than once: it should have no effect
    /// outside the transaction.
    ///
    /// # Errors
    /// The first error that is not retryable, from `body` or the commit; the
    /// last retryable one when every attempt failed.
    pub fn transaction<T>(
        &self,
        opts: &WriteOptions,
        mut body: impl FnMut(&mut WriteTxn<'_, S>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            assert!(
                attempt < TRANSACTION_ATTEMPTS_MAX,
                "the attempts are bounded"
            );
            let mut w = self.begin_write_with(opts)?;
            let r = body(&mut w).and_then(|v| w.commit().map(|()| v));
            match r {
                Err(e) if e.is_retryable() && attempt + 1 < TRANSACTION_ATTEMPTS_MAX => {
                    attempt += 1;
                    self.inner
                        .vitals
                        .counters
                        .retries
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    std::thread::sleep(backoff(attempt));
                }
                r => return r,
            }
        }
    }

    /// Brings the pages that hold `keys` into the cache, holding no lock a
    /// writer waits for while it reads. Writers run one at a time, so a cache
    /// miss inside a write transaction delays every writer queued behind it;
    /// prefetching the keys a transaction will read, before
    /// [`begin_write`](Self::begin_write), moves those misses out of the
    /// writers' critical section. Purely a hint: it changes nothing.
    ///
    /// # Errors
    /// As [`ReadTxn::get`].
    pub fn prefetch(&self, keys: &[&[u8]]) -> Result<()> {
        self.inner.vitals.health.check()?;
        for key in keys {
            txn::get_committed(&self.inner, &Tree::Default, key)?;
        }
        Ok(())
    }

    /// Runs a checkpoint now: writes every page dirty when it starts (commits
    /// go on meanwhile), logs a checkpoint record, updates `CONTROL`, and
    /// recycles WAL segments recovery no longer needs.
    ///
    /// # Errors
    /// I/O errors; the previous checkpoint stays valid then.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        self.inner.checkpoint()
    }

    /// Backs the database up into the directory `dest` (new, or empty)
    /// while transactions go on: a checkpoint, a copy of the data file read
    /// with direct I/O in the I/O scheduler's lowest class, every page
    /// checked as it is read, and the log from the checkpoint to past the
    /// copy's end; then a manifest and a completion marker. The backup is a
    /// directory [`Database::open`] opens (recovering to the backup's end)
    /// and [`crate::restore_backup`] copies; docs/backup.md has the design.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// destination inside the database's directories or not empty, and
    /// for an `incremental_from` that a restore made (a database, no
    /// backup); [`Error::Corruption`](crate::Error::Corruption) naming a damaged page
    /// of the database (the backup stops); I/O errors. A backup that fails
    /// is left without its completion marker, which open and restore
    /// refuse.
    pub fn backup(
        &self,
        dest: impl AsRef<Path>,
        opts: &crate::backup::BackupOptions,
    ) -> Result<crate::backup::BackupReport> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        crate::backup::take::backup(&*self.inner, dest.as_ref(), opts)
    }

    /// Walks the whole database and proves its structure: pages verify, keys
    /// are ordered within their fences, overflow chains and the free list are
    /// well formed, and every page is in the tree or free exactly once.
    ///
    /// # Errors
    /// [`Error::Corruption`](crate::Error::Corruption) describing the first
    /// problem found.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        let report = self.inner.check();
        self.inner.vitals.health.observe(report)
    }

    /// Gives the free space inside the data file back to the filesystem
    /// while transactions go on: moves the pages in use from the file's end
    /// into free pages nearer its start, in short internal commits paced
    /// beside the others, then cuts the file once a checkpoint names its
    /// new length (docs/compaction.md). Nothing is done when less than a
    /// sixteenth of the file would go. A compaction cut short by a crash
    /// is taken up again by the next call.
    ///
    /// # Errors
    /// As a commit and a checkpoint; I/O errors of the cut (which stop
    /// the database, as a failed write does).
    pub fn compact(&self) -> Result<CompactReport> {
        self.compact_with(&CompactOptions::default())
    }

    /// As [`compact`](Self::compact), stopping after `opts.max_steps`
    /// internal commits: the compaction stays under way (in the database
    /// too, across a reopen) until a later call ends it.
    ///
    /// # Errors
    /// As [`compact`](Self::compact).
    pub fn compact_with(&self, opts: &CompactOptions) -> Result<CompactReport> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        let report = self.inner.compact(opts);
        self.inner.vitals.health.observe(report)
    }

    /// Runs one round of the log archiver now, with its clock moved
    /// `clock_ahead` forward for good (a simulated clock for tests of
    /// `archive_timeout`): complete segments first, then the segment being
    /// written if its records have waited the timeout. Returns whether it
    /// made a partial copy. Not a stable API: for the engine's own tests.
    ///
    /// # Errors
    /// The round's failure (counted in `stats().archive`).
    #[doc(hidden)]
    pub fn archive_round_for_test(&self, clock_ahead: std::time::Duration) -> Result<bool> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        self.inner.archive_round_for_test(clock_ahead)
    }

    /// The engine's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.env.dir
    }

    /// Checkpoints and closes. Dropping without closing is safe too: the next
    /// open recovers from the WAL.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint).
    pub fn close(self) -> Result<()> {
        self.inner.vitals.health.check()?;
        let _guard = health::PanicGuard(&self.inner.vitals.health);
        self.inner
            .checkpoint_as(crate::buffer::WriteCause::Shutdown)
    }
}

impl<S: Storage> Drop for Database<S> {
    fn drop(&mut self) {
        // An orderly drop writes what was committed to the log (best effort:
        // a failure here is what recovery is for); it does not checkpoint.
        if let Some(wal) = self.inner.log.wal_if_open() {
            let _ = wal.flush(wal.appended_lsn());
        }
        background::stop(&self.inner.ckpt.checkpointer);
        if let Some(h) = self.checkpointer.take() {
            let _ = h.join();
        }
        background::stop(&self.cleaner_stop);
        if let Some(h) = self.cleaner.take() {
            let _ = h.join();
        }
        if let Some(h) = self.archiver.take() {
            let _ = h.join();
        }
        // Once no background thread can append (a checkpoint's record), the
        // log is sealed, so that damage found in its last flush later is
        // refused, never taken for a torn write of it.
        if let Some(wal) = self.inner.log.wal_if_open() {
            let _ = wal.seal();
        }
        // Published stats describe an open database only.
        if self.inner.env.opts.publish_stats {
            let _ = self
                .inner
                .env
                .storage
                .remove_file(&self.inner.env.dir.join(STATS_FILE));
        }
        // Closing the queue ends the readers once they finish their read.
        drop(self.inner.readahead.lock_even_poisoned().take());
        for h in self.readers.drain(..) {
            let _ = h.join();
        }
        assert!(self.checkpointer.is_none() && self.cleaner.is_none() && self.archiver.is_none());
        assert!(self.readers.is_empty(), "every background thread is joined");
    }
}

/// Starts the background threads of an engine just opened (unless the
/// options turn them off) and returns the handle that owns them.
///
/// The checkpointer and the cleaner are the engine's: without the first
/// the log would grow until committers wait for a checkpoint nobody runs.
/// If the operating system refuses either thread, open fails (those started
/// are stopped when the handle drops). The readahead readers, the archiver
/// and the log's segment preparer are helpers whose work the foreground
/// does without them.
fn start_threads<S: Storage>(inner: Arc<Inner<S>>) -> Result<Database<S>> {
    let mut db = Database {
        inner,
        checkpointer: None,
        cleaner: None,
        cleaner_stop: stop_signal(),
        archiver: None,
        readers: Vec::new(),
    };
    if !db.inner.env.opts.background_threads {
        return Ok(db);
    }
    let weak = Arc::downgrade(&db.inner);
    let refused = |source| Error::from_io(IoOp::SpawnThread, &db.inner.env.dir, None, source);
    db.checkpointer = Some(
        background::spawn_checkpointer(weak.clone(), Arc::clone(&db.inner.ckpt.checkpointer))
            .map_err(refused)?,
    );
    db.cleaner = Some(
        background::spawn_cleaner(weak.clone(), Arc::clone(&db.cleaner_stop)).map_err(refused)?,
    );
    db.readers = background::spawn_readers(&db.inner);
    if db.inner.archive.is_some() {
        db.archiver = background::spawn_archiver(weak, Arc::clone(&db.cleaner_stop));
    }
    Ok(db)
}
