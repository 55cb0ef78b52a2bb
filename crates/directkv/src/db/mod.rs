//! The database: open (create or recover), transactions, checkpoints, stats.
//!
//! Files in the database directory (DESIGN.md, "On disk"): `LOCK`, `CONTROL`,
//! `data`, and `wal/` (or `Options::wal_dir`).
//!
//! Open: take `LOCK`; read `CONTROL` (or create the database if the directory
//! is empty); open `data` with the direct-I/O policy; open the WAL from the
//! control's redo LSN, replaying every committed transaction's page records onto
//! pages whose LSN is below the commit's (torn pages are rebuilt from their full
//! images); then accept transactions.

mod check;
mod commit;
mod records;
mod txn;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use check::CheckReport;
pub use records::Meta;
pub use txn::{RangeIter, ReadTxn, WriteTxn};

use crate::btree::node;
use crate::buffer::{Access, BufferPool, LogFlusher, PoolStats};
use crate::error::{Error, Result};
use crate::format::control::{Control, ControlFile};
use crate::format::page;
use crate::io::{
    Aio, AioBackend, AioOptions, AioStats, DirectIo, FileOptions, IoPath, OsStorage, Storage,
    StorageFile, SyncMethod, SyncVariant,
};
use crate::lsn::Lsn;
use crate::sched::{IoClass, SchedOptions, SchedStats, Scheduler};
use crate::stall::{StallCounter, StallHistogram};
use crate::wal::{DbId, Wal, WalOptions, WalStats};

/// Whether `commit()` waits for the log to be durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Durability {
    /// `commit()` returns after the commit record is durable (the default).
    #[default]
    Sync,
    /// `commit()` returns at once; a crash may lose the latest commits (never
    /// part of one). **Not durable**: for tests and bulk loads.
    NoSyncNotDurable,
}

/// Caches this large and larger hold the WAL buffers inside `cache_bytes`.
pub const WAL_BUFFERS_INCLUDED_FROM: usize = 32 << 20;

/// The buffer pool's share of `cache_bytes`.
fn pool_bytes(cache_bytes: usize) -> usize {
    if cache_bytes >= WAL_BUFFERS_INCLUDED_FROM {
        cache_bytes - 2 * crate::wal::BUFFER_BYTES_DEFAULT
    } else {
        cache_bytes
    }
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// The engine's memory for data: the buffer pool and, for caches of
    /// [`WAL_BUFFERS_INCLUDED_FROM`] bytes and more, the two 4 MiB WAL buffers
    /// (smaller caches get them on top). Beyond it: per-transaction state.
    pub cache_bytes: usize,
    /// Page size, fixed at creation: 4096, 8192 or 16384.
    pub page_bytes: u32,
    /// Direct-I/O policy for the data file and the WAL.
    pub direct_io: DirectIo,
    /// The WAL sync method. `None`: the fastest durable method recorded in a
    /// device profile of the WAL directory (`directkv test-fsync --save-profile`),
    /// else `fdatasync` (with direct I/O where available).
    pub wal_sync: Option<SyncVariant>,
    /// Where the WAL lives (default: `wal/` in the database directory). May be
    /// another filesystem.
    pub wal_dir: Option<PathBuf>,
    /// Whether commits wait for durability.
    pub durability: Durability,
    /// WAL segment size.
    pub wal_segment_bytes: u64,
    /// A checkpoint starts by itself once this much WAL was written since the
    /// last one.
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
    /// with adjacent pages coalesced, and readahead. The environment variable
    /// [`IO_BACKEND_ENV`](crate::io::IO_BACKEND_ENV) overrides the backend.
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cache_bytes: 128 << 20,
            page_bytes: 8192,
            direct_io: DirectIo::Auto,
            wal_sync: None,
            wal_dir: None,
            durability: Durability::Sync,
            wal_segment_bytes: crate::wal::SEGMENT_BYTES_DEFAULT,
            checkpoint_wal_bytes: 256 << 20,
            create_if_missing: true,
            background_threads: true,
            readahead_pages: 32,
            io_scheduler: SchedOptions::default(),
            async_io: AioOptions::default(),
            data_extend_bytes: 64 << 20,
            compress_page_images: true,
        }
    }
}

/// Waits over a millisecond in the foreground, counted by cause (DESIGN.md
/// invariant 9). The counts are the histograms' totals; each histogram also
/// sums every foreground wait of its cause, short ones included
/// ([`StallHistogram::waits`], [`StallHistogram::waited_us`]), so the
/// difference of two snapshots divided by the operations between them is
/// what an operation waited for each cause on average.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stalls {
    /// Commits that waited over 1 ms for the WAL sync.
    pub wal_sync_wait: u64,
    /// Transactions that waited over 1 ms for the writer lock.
    pub writer_lock_wait: u64,
    /// Commits that waited over 1 ms for the tree lock (readers or a checkpoint start).
    pub tree_lock_wait: u64,
    /// Foreground page reads (cache misses) that took over 1 ms.
    pub read_miss: u64,
    /// Waits over 1 ms for a free frame (finding a victim, writing it if dirty).
    pub free_frame_wait: u64,
    /// Transactions that waited over 1 ms at the WAL's hard limit for a
    /// checkpoint to free log space (the only place a committer waits on
    /// page writes).
    pub log_space_wait: u64,
    /// The histogram of each cause.
    pub histograms: StallHistograms,
}

/// One histogram per stall cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StallHistograms {
    /// WAL sync waits of committers.
    pub wal_sync_wait: StallHistogram,
    /// Writer-lock waits.
    pub writer_lock_wait: StallHistogram,
    /// Tree-lock waits of commits.
    pub tree_lock_wait: StallHistogram,
    /// Foreground cache-miss reads.
    pub read_miss: StallHistogram,
    /// Free-frame waits.
    pub free_frame_wait: StallHistogram,
    /// Log-space waits.
    pub log_space_wait: StallHistogram,
}

/// What `Database::stats` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Buffer pool counters.
    #[serde(skip)]
    pub cache: PoolStats,
    /// Cache hits.
    pub cache_hits: u64,
    /// Cache misses.
    pub cache_misses: u64,
    /// Dirty pages now.
    pub dirty_pages: u64,
    /// Pages read from the data file.
    pub pages_read: u64,
    /// Pages written to the data file.
    pub pages_written: u64,
    /// WAL counters.
    #[serde(skip)]
    pub wal: WalStats,
    /// Bytes written to the WAL.
    pub wal_bytes: u64,
    /// Commits.
    pub commits: u64,
    /// Completed checkpoints.
    pub checkpoints: u64,
    /// Whether a checkpoint is running now.
    pub checkpoint_running: bool,
    /// WAL bytes since the last checkpoint's redo point: what recovery would
    /// replay, and what the hard limit bounds.
    pub wal_since_redo_bytes: u64,
    /// Full-page images logged (torn-page protection).
    pub full_page_images: u64,
    /// Bytes of full-page image records: the cost of torn-page protection.
    pub full_page_image_bytes: u64,
    /// Page deltas logged.
    pub page_deltas: u64,
    /// Bytes of all page records (images and deltas).
    pub page_record_bytes: u64,
    /// Pages the page cleaner wrote (off the foreground path).
    pub cleaner_writes: u64,
    /// Dirty pages a foreground eviction had to write itself.
    pub eviction_writes: u64,
    /// Pages read ahead of a sequential scan.
    pub readahead_reads: u64,
    /// Foreground stalls by cause.
    pub stalls: Stalls,
    /// Requests through the I/O scheduler, by class.
    pub io_scheduler: SchedStats,
    /// The asynchronous I/O engine: backend (`off` when turned off or for
    /// storage without one), batches, requests in flight.
    pub async_io: AioStats,
    /// Data-file write requests; `pages_written / write_requests` is how
    /// many adjacent pages a write carries on average.
    pub write_requests: u64,
    /// Zero-filled extensions of the data file (growth ahead of use).
    pub data_extensions: u64,
    /// Bytes of the data file allocated on disk (in use or ready for use).
    pub data_allocated_bytes: u64,
    /// How the data file's bytes travel.
    pub data_io: IoPath,
    /// The WAL's sync method.
    pub wal_sync: SyncVariant,
    /// The torn-page protection in effect.
    pub torn_page_protection: &'static str,
    /// What recovery did when this database was opened.
    pub recovery: RecoveryStats,
}

/// What the replay at open did: how much log it read and how it got the
/// pages it changed. An image record for a page not in the cache is installed
/// without reading the data file (the image and the records after it
/// determine the page); only a delta for a page not in the cache is read.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RecoveryStats {
    /// WAL bytes from the redo point to the end of the log.
    pub wal_bytes: u64,
    /// Committed transactions replayed.
    pub transactions: u64,
    /// Page records applied.
    pub page_records: u64,
    /// Pages installed from a full image without a read (a page replay
    /// evicted and met again in another image counts again).
    pub pages_from_images: u64,
    /// Pages read from the data file: pages replay evicted and met again in
    /// a delta, and any whose first record since the redo point is a delta.
    pub pages_read: u64,
    /// Wall time of the replay, in microseconds.
    pub micros: u64,
}

/// The log as the buffer pool sees it: during recovery everything read is
/// durable already; afterwards, the open WAL.
pub(crate) struct EngineLog<S: Storage> {
    wal: OnceLock<Wal<S>>,
}

impl<S: Storage> LogFlusher for EngineLog<S> {
    fn durable_lsn(&self) -> Lsn {
        self.wal.get().map_or(Lsn(u64::MAX), Wal::durable_lsn)
    }
    fn flush_to(&self, lsn: Lsn) -> Result<()> {
        match self.wal.get() {
            Some(w) => w.flush(lsn),
            None => Ok(()),
        }
    }
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    checkpoints: AtomicU64,
    full_images: AtomicU64,
    full_image_bytes: AtomicU64,
    page_record_bytes: AtomicU64,
    deltas: AtomicU64,
    wal_sync_wait: StallCounter,
    writer_lock_wait: StallCounter,
    tree_lock_wait: StallCounter,
    log_space_wait: StallCounter,
    cleaner_writes: AtomicU64,
    readahead_reads: AtomicU64,
    next_txn: AtomicU64,
}

pub(crate) struct Inner<S: Storage> {
    dir: PathBuf,
    opts: Options,
    wal_sync: SyncVariant,
    pub(crate) log: Arc<EngineLog<S>>,
    pub(crate) pool: BufferPool<S, EngineLog<S>>,
    /// The tree's root state; readers hold it shared per operation, a commit
    /// exclusively while it changes pages.
    pub(crate) tree: RwLock<Meta>,
    writer: txn::TicketLock,
    /// Page-sized buffers commits reuse.
    spare_buffers: commit::SpareBuffers,
    control: Mutex<ControlFile<S>>,
    checkpointing: Mutex<()>,
    /// Stop flag and wake-up of the background checkpointer.
    checkpointer: Arc<(Mutex<bool>, std::sync::Condvar)>,
    /// Pages last changed at or before this LSN get a full image logged.
    fpi_horizon: AtomicU64,
    /// The redo LSN of the last checkpoint.
    last_redo: AtomicU64,
    counters: Counters,
    /// Every disk request's gate.
    sched: Arc<Scheduler>,
    /// What the replay at open did.
    recovery: RecoveryStats,
    /// Callers of [`Database::checkpoint`] waiting for the running one.
    hurry: AtomicU64,
    /// The asynchronous I/O engine of the data file (none for storage that
    /// runs batches one request at a time, such as the simulated disk).
    aio: Option<Arc<Aio>>,
    /// Queue of the readahead readers (none without background threads).
    readahead: Mutex<Option<std::sync::mpsc::SyncSender<u64>>>,
    _lock: S::Lock,
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
    inner: Arc<Inner<S>>,
    checkpointer: Option<std::thread::JoinHandle<()>>,
    cleaner: Option<std::thread::JoinHandle<()>>,
    cleaner_stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

const CONTROL_NAME: &str = "CONTROL";
const DATA_NAME: &str = "data";
const LOCK_NAME: &str = "LOCK";

fn random_id() -> DbId {
    let mut id = [0u8; 16];
    // SAFETY: `id` is a writable buffer of 16 bytes for the call.
    let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
    if n != 16 {
        // Fall back to time and pid: unique enough to tell databases apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        id.copy_from_slice(&(t ^ (u128::from(std::process::id()) << 64)).to_le_bytes());
    }
    id
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
    /// [`Error::DatabaseLocked`] if it is open elsewhere; [`Error::NotADatabase`]
    /// for a non-empty directory that is not one; [`Error::FormatVersion`] for
    /// another format; [`Error::Corruption`] when recovery finds damage it must
    /// not paper over; [`Error::DirectIoUnsupported`] for `DirectIo::On` where
    /// the filesystem refuses; I/O errors.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Self> {
        Self::open_with(OsStorage, path.as_ref(), opts)
    }
}

impl<S: Storage> Database<S> {
    /// Opens with an explicit storage backend (for the simulated disk).
    ///
    /// # Errors
    /// As [`Database::open`].
    pub fn open_with(storage: S, path: &Path, opts: Options) -> Result<Self> {
        if !crate::format::page::PAGE_SIZES.contains(&opts.page_bytes) {
            return Err(Error::InvalidArgument(format!(
                "page size {} is not one of 4096, 8192, 16384",
                opts.page_bytes
            )));
        }
        storage.create_dir_all(path)?;
        let lock = storage.lock_exclusive(&path.join(LOCK_NAME))?;
        let control_path = path.join(CONTROL_NAME);
        if !storage.exists(&control_path) {
            // What an interrupted creation leaves (it writes CONTROL last) is
            // ours to start over; anything else is someone else's.
            let foreign: Vec<String> = storage
                .list_dir(path)?
                .into_iter()
                .filter(|n| ![LOCK_NAME, DATA_NAME, "CONTROL.tmp"].contains(&n.as_str()))
                .collect();
            if !foreign.is_empty() {
                return Err(Error::NotADatabase {
                    path: path.to_path_buf(),
                    detail: format!(
                        "the directory has no CONTROL file but holds {} other entries (e.g. {:?}); \
                         refusing to create a database over them",
                        foreign.len(),
                        foreign[0]
                    ),
                });
            }
            if !opts.create_if_missing {
                return Err(Error::NotADatabase {
                    path: path.to_path_buf(),
                    detail: "empty directory and create_if_missing is off".into(),
                });
            }
            create(&storage, path, &opts)?;
        }
        let control = ControlFile::open(&storage, &control_path)?;
        // The page size is the database's (from CONTROL), not the caller's.
        let c = control.current();
        let data = storage.open(
            &path.join(DATA_NAME),
            &FileOptions {
                direct_io: opts.direct_io,
                sync: SyncMethod::Fsync,
                ..FileOptions::default()
            },
        )?;
        let log = Arc::new(EngineLog {
            wal: OnceLock::new(),
        });
        let pool = BufferPool::new(
            data,
            c.page_bytes,
            pool_bytes(opts.cache_bytes),
            c.db_id,
            Arc::clone(&log),
        )?;
        let sched = Arc::new(Scheduler::new(opts.io_scheduler));
        pool.set_scheduler(Arc::clone(&sched));
        pool.set_extension(opts.data_extend_bytes / u64::from(c.page_bytes));
        let aio_opts = opts.async_io.with_env_override()?;
        let aio = if storage.supports_aio() && aio_opts.backend != AioBackend::Off {
            let aio = Aio::new(&aio_opts)?;
            pool.attach_aio(&aio)?;
            Some(aio)
        } else {
            None
        };
        let wal_dir = opts.wal_dir.clone().unwrap_or_else(|| path.join("wal"));
        storage.create_dir_all(&wal_dir)?;
        let wal_sync = choose_sync(&opts, &wal_dir);
        let mut wal_opts = WalOptions::new(&wal_dir, c.db_id);
        wal_opts.sync = wal_sync;
        wal_opts.segment_bytes = opts.wal_segment_bytes;
        wal_opts.background_prepare = opts.background_threads;
        wal_opts.sched = Some(Arc::clone(&sched));
        let mut meta = Meta {
            root: c.root_page,
            page_count: c.page_count,
            freelist: c.freelist_head,
        };
        let started = Instant::now();
        let mut replay = Replay::new(&pool);
        let (wal, end) = Wal::open(storage.clone(), wal_opts, c.redo_lsn, |rec| {
            replay.record(&rec, &mut meta)
        })?;
        replay.finish(&mut meta)?;
        let next_txn = replay.max_txn + 1;
        let recovery = RecoveryStats {
            wal_bytes: end.0.saturating_sub(c.redo_lsn.0),
            pages_read: pool.stats().pages_read,
            micros: started.elapsed().as_micros() as u64,
            ..replay.stats
        };
        drop(replay);
        let _ = log.wal.set(wal);
        let inner = Inner {
            dir: path.to_path_buf(),
            wal_sync,
            opts,
            log,
            pool,
            tree: RwLock::new(meta),
            writer: txn::TicketLock::default(),
            spare_buffers: commit::SpareBuffers::default(),
            control: Mutex::new(control),
            checkpointing: Mutex::new(()),
            checkpointer: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            fpi_horizon: AtomicU64::new(c.redo_lsn.0),
            last_redo: AtomicU64::new(c.redo_lsn.0),
            counters: Counters::default(),
            readahead: Mutex::new(None),
            sched,
            hurry: AtomicU64::new(0),
            aio,
            recovery,
            _lock: lock,
        };
        inner.counters.next_txn.store(next_txn, Ordering::Relaxed);
        let signal = Arc::clone(&inner.checkpointer);
        let inner = Arc::new(inner);
        let cleaner_stop = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let (checkpointer, cleaner, readers) = if inner.opts.background_threads {
            (
                spawn_checkpointer(Arc::downgrade(&inner), signal),
                spawn_cleaner(Arc::downgrade(&inner), Arc::clone(&cleaner_stop)),
                spawn_readers(&inner),
            )
        } else {
            (None, None, Vec::new())
        };
        Ok(Database {
            inner,
            checkpointer,
            cleaner,
            cleaner_stop,
            readers,
        })
    }

    /// Begins a read transaction: every read sees only whole committed
    /// transactions (read committed; see [`ReadTxn`]).
    ///
    /// # Errors
    /// None today; reserved for a closed or poisoned database.
    pub fn begin_read(&self) -> Result<ReadTxn<'_, S>> {
        Ok(ReadTxn::new(&self.inner))
    }

    /// Begins the write transaction, waiting (first come, first served) while
    /// another is open.
    ///
    /// # Errors
    /// [`Error::Poisoned`] after a WAL failure.
    pub fn begin_write(&self) -> Result<WriteTxn<'_, S>> {
        self.inner.wait_for_log_space();
        let t = Instant::now();
        let ticket = self.inner.writer.acquire();
        self.inner.counters.writer_lock_wait.record(t.elapsed());
        Ok(WriteTxn::new(&self.inner, ticket))
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
        for key in keys {
            txn::get_committed(&self.inner, key)?;
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
        self.inner.checkpoint()
    }

    /// Walks the whole database and proves its structure: pages verify, keys
    /// are ordered within their fences, overflow chains and the free list are
    /// well formed, and every page is in the tree or free exactly once.
    ///
    /// # Errors
    /// [`Error::Corruption`] describing the first problem found.
    pub fn check(&self) -> Result<CheckReport> {
        self.inner.check()
    }

    /// The engine's counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Checkpoints and closes. Dropping without closing is safe too: the next
    /// open recovers from the WAL.
    ///
    /// # Errors
    /// As [`checkpoint`](Self::checkpoint).
    pub fn close(self) -> Result<()> {
        self.inner.checkpoint()
    }
}

impl<S: Storage> Drop for Database<S> {
    fn drop(&mut self) {
        // An orderly drop writes what was committed to the log (best effort: a
        // failure here is what recovery is for); it does not checkpoint.
        if let Some(wal) = self.inner.log.wal.get() {
            let _ = wal.flush(wal.end_lsn());
        }
        let (stop, wake) = &*self.inner.checkpointer;
        *stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
        if let Some(h) = self.checkpointer.take() {
            let _ = h.join();
        }
        let (stop, wake) = &*self.cleaner_stop;
        *stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        wake.notify_all();
        if let Some(h) = self.cleaner.take() {
            let _ = h.join();
        }
        // Published stats describe an open database only.
        let _ = std::fs::remove_file(self.inner.dir.join(STATS_FILE));
        // Closing the queue ends the readers once they finish their read.
        drop(lock_ignoring_poison(&self.inner.readahead).take());
        for h in self.readers.drain(..) {
            let _ = h.join();
        }
    }
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Readahead readers: threads that read queued pages into the pool, at the
/// head of the probation queue so they stay until the scan gets there (the
/// scan's own touches never promote them into the hot set). Each takes what
/// is queued, up to a window, and reads it as one asynchronous batch
/// (adjacent pages as one request); two, so one window can be queued while
/// the other is in flight.
const READAHEAD_READERS: usize = 2;
/// Pages queued for readahead at most; more requests are dropped.
const READAHEAD_QUEUE: usize = 256;

fn spawn_readers<S: Storage>(inner: &Arc<Inner<S>>) -> Vec<std::thread::JoinHandle<()>> {
    if inner.opts.readahead_pages == 0 {
        return Vec::new();
    }
    let window = inner.opts.readahead_pages;
    let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(READAHEAD_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    let handles: Vec<_> = (0..READAHEAD_READERS)
        .filter_map(|i| {
            let (weak, rx) = (Arc::downgrade(inner), Arc::clone(&rx));
            std::thread::Builder::new()
                .name(format!("directkv-readahead-{i}"))
                .spawn(move || loop {
                    crate::stall::mark_background_thread();
                    let pages = {
                        let rx = lock_ignoring_poison(&rx);
                        let Ok(first) = rx.recv() else { return };
                        let mut pages = vec![first];
                        pages.extend(rx.try_iter().take(window.saturating_sub(1)));
                        pages
                    };
                    let Some(inner) = weak.upgrade() else { return };
                    // A failed read is the scan's to meet and report.
                    let read = inner.pool.read_batch(&pages, crate::buffer::Access::Normal);
                    inner
                        .counters
                        .readahead_reads
                        .fetch_add(read as u64, Ordering::Relaxed);
                })
                .ok()
        })
        .collect();
    if !handles.is_empty() {
        *lock_ignoring_poison(&inner.readahead) = Some(tx);
    }
    handles
}

/// Log since the redo point, in checkpoint distances, at which new
/// transactions wait for the checkpoint.
pub const WAL_HARD_LIMIT_FACTOR: u64 = 3;

/// A background checkpoint aims to finish while the log grows by this
/// fraction of the checkpoint distance.
const CHECKPOINT_COMPLETION_TARGET: f64 = 0.5;
/// … or within this long, whichever allows more speed.
const CHECKPOINT_TIME_TARGET: Duration = Duration::from_secs(30);
/// Pages a checkpoint writes between looks at its pace.
const CHECKPOINT_STEP_PAGES: usize = 32;

/// How often the engine publishes its stats to [`STATS_FILE`].
const STATS_EVERY: Duration = Duration::from_secs(1);

/// The file in the database directory where an open database publishes its
/// `stats()` every second, for `directkv stats` in another process.
pub const STATS_FILE: &str = "stats.json";

/// How often the page cleaner looks at the cold end of the cache when it
/// found nothing to write.
const CLEANER_IDLE: Duration = Duration::from_millis(10);

/// The page cleaner: keeps the cold end of the replacement order clean, so a
/// read or a commit that needs a frame takes a clean one instead of writing a
/// dirty page itself (in a writer's critical section, every writer would wait
/// for that write). It writes the dirty pages among the coldest sixteenth of
/// the frames, WAL first, and stops when the database is dropped.
fn spawn_cleaner<S: Storage>(
    weak: std::sync::Weak<Inner<S>>,
    signal: Arc<(Mutex<bool>, std::sync::Condvar)>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("directkv-cleaner".into())
        .spawn(move || {
            crate::stall::mark_background_thread();
            let mut idle = false;
            let mut published = Instant::now();
            let mut last_evicted = 0u64;
            loop {
                if idle {
                    let (stop, wake) = &*signal;
                    let stop = stop.lock().unwrap_or_else(|p| p.into_inner());
                    let (stop, _) = wake
                        .wait_timeout(stop, CLEANER_IDLE)
                        .unwrap_or_else(|p| p.into_inner());
                    if *stop {
                        return;
                    }
                } else if *signal.0.lock().unwrap_or_else(|p| p.into_inner()) {
                    return;
                }
                let Some(inner) = weak.upgrade() else { return };
                if published.elapsed() >= STATS_EVERY {
                    inner.publish_stats();
                    published = Instant::now();
                }
                // Growth ahead of use; a failure poisons the data file and
                // the next page write reports it.
                let pages = inner
                    .tree
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .page_count;
                let _ = inner.pool.extend_ahead(pages, IoClass::Background);
                let window = (inner.pool.frames() / 16).max(8);
                // A failed write leaves the page dirty; a foreground eviction
                // then meets the error itself.
                let written = inner.pool.clean_cold(window).unwrap_or(0);
                // Dirty victims the foreground had to write itself since the
                // last pass: the cleaner is behind.
                let evicted = inner.pool.stats().eviction_writes;
                let behind = evicted.saturating_sub(last_evicted);
                last_evicted = evicted;
                inner.report_pressure(
                    written as f64 / window as f64,
                    if behind > 0 { 1.0 } else { 0.0 },
                );
                inner
                    .counters
                    .cleaner_writes
                    .fetch_add(written as u64, Ordering::Relaxed);
                idle = written == 0;
            }
        })
        // Without the thread, evictions write dirty pages themselves.
        .ok()
}

/// Checkpoints in the background when the WAL since the last checkpoint passes
/// `checkpoint_wal_bytes`, so no committer runs one. It holds the engine only
/// while checkpointing, and stops when the database is dropped.
fn spawn_checkpointer<S: Storage>(
    weak: std::sync::Weak<Inner<S>>,
    signal: Arc<(Mutex<bool>, std::sync::Condvar)>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("directkv-checkpoint".into())
        .spawn(move || loop {
            crate::stall::mark_background_thread();
            {
                let (stop, wake) = &*signal;
                let stop = stop.lock().unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
                let (stop, _) = wake
                    .wait_timeout(stop, Duration::from_millis(200))
                    .unwrap_or_else(|p| p.into_inner());
                if *stop {
                    return;
                }
            }
            let Some(inner) = weak.upgrade() else { return };
            // A failed checkpoint leaves the previous one valid; the next try
            // comes with the next wake-up.
            let _ = inner.maybe_checkpoint();
        })
        // Without the thread, checkpoints still run on demand and at close.
        .ok()
}

/// The WAL's sync method when none is given: the fastest durable one the
/// device profile of `wal_dir` recorded (measured now and saved if there is
/// none), among the direct variants when the database uses direct I/O and
/// among the buffered ones otherwise. A buffered log under a direct-I/O
/// database would fill the page cache with log the engine never reads again
/// and evict what others need (one cache, invariant 6).
fn choose_sync(opts: &Options, wal_dir: &Path) -> SyncVariant {
    if let Some(v) = opts.wal_sync {
        return v;
    }
    let direct_ok = direct_io_works(wal_dir);
    let want_direct = opts.direct_io != DirectIo::Off && direct_ok;
    let fastest = |measured: &[(SyncVariant, f64)]| {
        measured
            .iter()
            .filter(|(v, _)| v.direct == want_direct)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|&(v, _)| v)
    };
    if let Some(p) = crate::fsync_test::DeviceProfile::load_for_dir(wal_dir) {
        if let Some(v) = fastest(&p.measured) {
            return v;
        }
    }
    let candidates: Vec<SyncVariant> = [
        (SyncMethod::Fdatasync, false),
        (SyncMethod::Fdatasync, true),
        (SyncMethod::OpenDatasync, true),
        (SyncMethod::PwriteDsync, true),
    ]
    .into_iter()
    .filter(|&(_, direct)| !direct || direct_ok)
    .map(|(method, direct)| SyncVariant { method, direct })
    .collect();
    let fallback = SyncVariant {
        method: SyncMethod::Fdatasync,
        direct: want_direct,
    };
    crate::fsync_test::measure_and_save(wal_dir, &candidates)
        .and_then(|_| crate::fsync_test::DeviceProfile::load_for_dir(wal_dir))
        .and_then(|p| fastest(&p.measured))
        .unwrap_or(fallback)
}

/// Whether a file in `dir` can be opened for direct I/O (and is not on a
/// memory-backed filesystem).
fn direct_io_works(dir: &Path) -> bool {
    let probe = dir.join(format!(".directkv-direct-probe-{}", std::process::id()));
    let ok = crate::io::DirectFile::open(
        &probe,
        &FileOptions {
            create: true,
            direct_io: DirectIo::On,
            sync: SyncMethod::None,
            ..FileOptions::default()
        },
    )
    .is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

fn create<S: Storage>(storage: &S, path: &Path, opts: &Options) -> Result<()> {
    let db_id = random_id();
    let data = storage.open(
        &path.join(DATA_NAME),
        &FileOptions {
            create: true,
            truncate: true,
            direct_io: opts.direct_io,
            sync: SyncMethod::Fsync,
            ..FileOptions::default()
        },
    )?;
    // Page 0 is reserved; page 1 is the empty root leaf.
    let unit = data.alignment().io_unit_bytes();
    let mut buf = crate::io::AlignedBuf::new(2 * opts.page_bytes as usize, unit)?;
    let pb = opts.page_bytes as usize;
    for no in 0..2u64 {
        let p = &mut buf.as_mut_slice()[no as usize * pb..(no as usize + 1) * pb];
        if no == 0 {
            crate::btree::tree::init_free(p, 0);
        } else {
            node::init_leaf(p);
        }
        page::seal_in_place(p, no, &db_id);
    }
    data.write_all_at(buf.io_all(), 0)?;
    data.sync_all()?;
    let tmp = path.join("CONTROL.tmp");
    if storage.exists(&tmp) {
        storage.remove_file(&tmp)?;
    }
    ControlFile::create(
        storage,
        &tmp,
        Control {
            page_bytes: opts.page_bytes,
            generation: 0,
            db_id,
            checkpoint_lsn: Lsn::ZERO,
            redo_lsn: Lsn::ZERO,
            root_page: 1,
            page_count: 2,
            freelist_head: 0,
            flags: 0,
        },
    )?;
    storage.rename(&tmp, &path.join(CONTROL_NAME))?;
    storage.sync_dir(path)
}

/// Redo: buffers each transaction's page records until its commit, then
/// applies them to pages whose LSN is below the commit's.
///
/// An image record for a page not in the cache is installed, not read: every
/// change since the redo point is in the log, so the image and the records
/// after it give the page's final state whatever the data file holds (older,
/// newer or torn). The FPI rule makes a page's first record since the redo
/// point an image, so replay reads only pages it evicted and meets again in a
/// delta, and those it reads ahead, in batches, from a lookahead of commits.
struct Replay<'a, S: Storage> {
    pool: &'a BufferPool<S, EngineLog<S>>,
    pending: HashMap<u64, Vec<Vec<u8>>>,
    max_txn: u64,
    /// The pages of the commit being queued, each once.
    commit_pages: HashSet<u64>,
    /// Pages a queued commit first changes with an image: how many such
    /// commits are queued.
    queued_images: HashMap<u64, u32>,
    stats: RecoveryStats,
    /// Commits replayed since the pool's dirty share was last looked at.
    since_clean: u32,
    /// Committed transactions read but not applied yet (the lookahead).
    queue: std::collections::VecDeque<Committed>,
    /// Pages to read ahead for the queued commits.
    wanted: Vec<u64>,
}

/// A committed transaction waiting in replay's lookahead.
struct Committed {
    payloads: Vec<Vec<u8>>,
    /// The pages it first changes with an image (counted in `queued_images`).
    images: Vec<u64>,
    /// The commit record's end: the LSN its pages are stamped with.
    lsn: Lsn,
    meta: Meta,
}

/// Commits replay reads ahead of the one it applies.
const REPLAY_LOOKAHEAD: usize = 256;
/// Pages replay reads ahead in one batch of concurrent reads.
const REPLAY_READ_BATCH: usize = 32;

/// Replay looks at the pool's dirty share once per this many commits.
const REPLAY_CLEAN_EVERY: u32 = 16;

impl<'a, S: Storage> Replay<'a, S> {
    fn new(pool: &'a BufferPool<S, EngineLog<S>>) -> Self {
        Replay {
            pool,
            pending: Default::default(),
            max_txn: 0,
            commit_pages: HashSet::new(),
            queued_images: HashMap::new(),
            stats: RecoveryStats::default(),
            since_clean: 0,
            queue: Default::default(),
            wanted: Vec::new(),
        }
    }

    fn record(&mut self, rec: &crate::wal::Record, meta: &mut Meta) -> Result<()> {
        match rec.kind {
            records::PAGE => {
                let txn = records::decode_page(&rec.payload)?.txn;
                self.max_txn = self.max_txn.max(txn);
                self.pending
                    .entry(txn)
                    .or_default()
                    .push(rec.payload.clone());
            }
            records::COMMIT => {
                let (txn, m) = records::decode_meta(&rec.payload)?;
                self.max_txn = self.max_txn.max(txn);
                let payloads = self.pending.remove(&txn).unwrap_or_default();
                // A page this commit changes first with a delta and the
                // cache does not hold is read ahead, with others, while the
                // commits before this one are applied.
                // (Not when a queued commit installs an image of it first.)
                self.commit_pages.clear();
                let mut images = Vec::new();
                for payload in &payloads {
                    let r = records::decode_page(payload)?;
                    if !self.commit_pages.insert(r.page) {
                        continue;
                    }
                    if r.full {
                        *self.queued_images.entry(r.page).or_default() += 1;
                        images.push(r.page);
                    } else if !self.queued_images.contains_key(&r.page)
                        && !self.pool.contains(r.page)
                    {
                        self.wanted.push(r.page);
                    }
                }
                if self.wanted.len() >= REPLAY_READ_BATCH {
                    self.pool.read_batch(&self.wanted, Access::Normal);
                    self.wanted.clear();
                }
                self.queue.push_back(Committed {
                    payloads,
                    images,
                    lsn: rec.end(),
                    meta: m,
                });
                while self.queue.len() > REPLAY_LOOKAHEAD {
                    self.apply_next(meta)?;
                }
            }
            records::ABORT => {
                if let Ok(b) = <[u8; 8]>::try_from(rec.payload.as_slice()) {
                    self.pending.remove(&u64::from_le_bytes(b));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the committed transactions still queued; replay is complete
    /// after it.
    fn finish(&mut self, meta: &mut Meta) -> Result<()> {
        while !self.queue.is_empty() {
            self.apply_next(meta)?;
        }
        Ok(())
    }

    /// Applies the oldest queued commit.
    fn apply_next(&mut self, meta: &mut Meta) -> Result<()> {
        let Some(c) = self.queue.pop_front() else {
            return Ok(());
        };
        // Whether a page needs this commit is decided at its first record,
        // before any is applied: applying marks the page at the commit's
        // LSN, which must not hide the transaction's later records for the
        // same page.
        let mut needs: HashMap<u64, bool> = HashMap::new();
        for payload in &c.payloads {
            self.apply(payload, c.lsn, &mut needs)?;
        }
        for page in &c.images {
            if let Some(n) = self.queued_images.get_mut(page) {
                *n -= 1;
                if *n == 0 {
                    self.queued_images.remove(page);
                }
            }
        }
        self.stats.transactions += 1;
        *meta = c.meta;
        self.make_room()
    }

    /// Keeps half the pool clean while replay dirties it: the coldest dirty
    /// pages go out in batches of concurrent writes, so replay does not stop
    /// for one synchronous eviction write per page it brings in.
    fn make_room(&mut self) -> Result<()> {
        self.since_clean += 1;
        if self.since_clean < REPLAY_CLEAN_EVERY {
            return Ok(());
        }
        self.since_clean = 0;
        let frames = self.pool.frames();
        if self.pool.dirty_pages() * 2 >= frames {
            self.pool
                .clean_cold_as((frames / 8).max(8), IoClass::Urgent)?;
        }
        Ok(())
    }

    fn apply(&mut self, payload: &[u8], lsn: Lsn, needs: &mut HashMap<u64, bool>) -> Result<()> {
        let r = records::decode_page(payload)?;
        if needs.get(&r.page) == Some(&false) {
            return Ok(());
        }
        let install = r.full && !needs.contains_key(&r.page) && !self.pool.contains(r.page);
        let mut p = if install {
            self.stats.pages_from_images += 1;
            self.pool.create(r.page)?
        } else {
            match self.pool.write(r.page) {
                Ok(p) => p,
                // A torn, never-written or missing page is rebuilt from its image.
                Err(Error::Corruption { .. } | Error::UnexpectedEof { .. }) if r.full => {
                    self.pool.create(r.page)?
                }
                Err(e) => return Err(e),
            }
        };
        let need = *needs
            .entry(r.page)
            .or_insert_with(|| page::page_lsn(p.data()) < lsn);
        if !need {
            return Ok(());
        }
        r.apply(p.data_mut())?;
        p.mark_dirty(lsn);
        self.stats.page_records += 1;
        Ok(())
    }
}

impl<S: Storage> EngineLog<S> {
    /// The end of the log (or everything, during recovery).
    pub(crate) fn durable_or_end(&self) -> Lsn {
        self.wal.get().map_or(Lsn(u64::MAX), Wal::end_lsn)
    }

    /// Waits until the WAL is durable up to `lsn`.
    pub(crate) fn flush_to_wal(&self, lsn: Lsn) -> Result<()> {
        self.wal.get().expect("open").flush(lsn)
    }
}

impl<S: Storage> Inner<S> {
    fn wal(&self) -> &Wal<S> {
        self.log.wal.get().expect("open")
    }

    pub(crate) fn next_txn(&self) -> u64 {
        self.counters.next_txn.fetch_add(1, Ordering::Relaxed)
    }

    fn checkpoint(&self) -> Result<()> {
        // A paced background checkpoint under way finishes at full speed
        // instead of making this caller wait out its pace.
        self.hurry.fetch_add(1, Ordering::AcqRel);
        let one = self.checkpointing.lock().unwrap_or_else(|p| p.into_inner());
        let done = self.checkpoint_locked(&one, false);
        self.hurry.fetch_sub(1, Ordering::AcqRel);
        done
    }

    fn checkpoint_locked(
        &self,
        _one: &std::sync::MutexGuard<'_, ()>,
        mut paced: bool,
    ) -> Result<()> {
        // The start: between commits, so every commit before it is in the
        // pages we are about to write and every one after it is in the log
        // from here on, with full images for pages it finds unchanged since.
        let (start, meta) = {
            let tree = self.tree.write().unwrap_or_else(|p| p.into_inner());
            let start = self.wal().end_lsn();
            self.fpi_horizon.store(start.0, Ordering::Release);
            (start, *tree)
        };
        // Only pages first changed by the start need writing (a change's LSN
        // is its commit record's end, so one ending exactly at the start is
        // before it); later changes are in the log after it. A paced checkpoint spreads the
        // writes so it is done when the log has grown by half the checkpoint
        // distance (or after CHECKPOINT_TIME_TARGET), keeping the device free
        // for commits and reads meanwhile.
        let total = self.pool.dirty_through(start).max(1);
        let began = Instant::now();
        let distance = self.opts.checkpoint_wal_bytes.max(1) as f64 * CHECKPOINT_COMPLETION_TARGET;
        let mut written = 0usize;
        let mut idle_rounds = 0;
        while self.pool.oldest_dirty_lsn().is_some_and(|l| l <= start) {
            let class = if paced {
                IoClass::Background
            } else {
                IoClass::Urgent
            };
            let n = self
                .pool
                .flush_through(start, CHECKPOINT_STEP_PAGES, class)?;
            written += n;
            if n == 0 {
                // A commit holds a page dirty from before the start; it
                // releases it within its (short) apply phase.
                idle_rounds += 1;
                if idle_rounds > 10_000 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            while paced {
                // A closing database, or a caller waiting to checkpoint,
                // has the checkpoint finish at full speed.
                if *lock_ignoring_poison(&self.checkpointer.0)
                    || self.hurry.load(Ordering::Acquire) > 0
                {
                    paced = false;
                    break;
                }
                // Past twice the distance the log itself is short of space
                // (committers may be waiting at the hard limit, producing no
                // log to pace by): no pacing then.
                if self.wal_since_checkpoint() >= self.opts.checkpoint_wal_bytes.saturating_mul(2) {
                    break;
                }
                let done = written as f64 / total as f64;
                let by_wal = (self.wal().end_lsn().0.saturating_sub(start.0)) as f64 / distance;
                let by_time = began.elapsed().as_secs_f64() / CHECKPOINT_TIME_TARGET.as_secs_f64();
                if done <= by_wal.max(by_time) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.pool.sync()?;
        if self.pool.oldest_dirty_lsn().is_some_and(|l| l <= start) {
            return Err(Error::InvalidArgument(
                "checkpoint could not write a page held by a commit".into(),
            ));
        }
        let rec = records::encode_meta(start.0, &meta);
        let end = self.wal().append(records::CHECKPOINT, &rec)?;
        self.wal().flush(end)?;
        {
            let mut control = self.control.lock().unwrap_or_else(|p| p.into_inner());
            let c = control.current();
            let _permit = self.sched.admit(IoClass::Urgent, 0);
            control.write(Control {
                checkpoint_lsn: end,
                redo_lsn: start,
                root_page: meta.root,
                page_count: meta.page_count,
                freelist_head: meta.freelist,
                ..c
            })?;
        }
        // The checkpoint is complete once CONTROL names it: count it before
        // the log space it frees can be seen, so a writer that waited for
        // that space never finds the checkpoint uncounted.
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.last_redo.store(start.0, Ordering::Release);
        self.wal().recycle_before(start)?;
        Ok(())
    }

    /// Runs a checkpoint if the WAL grew past the threshold since the last one
    /// and no checkpoint is running.
    fn maybe_checkpoint(&self) -> Result<bool> {
        if self.wal_since_checkpoint() < self.opts.checkpoint_wal_bytes {
            return Ok(false);
        }
        let Ok(one) = self.checkpointing.try_lock() else {
            return Ok(false);
        };
        // Plain FIFO scheduling is the baseline without pacing too.
        let paced = self.opts.io_scheduler.mode == crate::sched::SchedMode::Classes;
        self.checkpoint_locked(&one, paced).map(|()| true)
    }

    pub(crate) fn wal_since_checkpoint(&self) -> u64 {
        self.wal().end_lsn().0 - self.last_redo.load(Ordering::Acquire)
    }

    /// The hard limit: with background checkpoints and the log grown to
    /// [`WAL_HARD_LIMIT_FACTOR`] times the checkpoint distance since the
    /// redo point, a new transaction waits for the checkpoint (which runs
    /// uncapped by then) to free log space. Counted as a `log_space_wait`
    /// stall; it gives up waiting after a minute rather than hang.
    fn wait_for_log_space(&self) {
        let limit = self
            .opts
            .checkpoint_wal_bytes
            .saturating_mul(WAL_HARD_LIMIT_FACTOR);
        if !self.opts.background_threads || self.wal_since_checkpoint() < limit {
            return;
        }
        let t = Instant::now();
        while self.wal_since_checkpoint() >= limit && t.elapsed() < Duration::from_secs(60) {
            self.checkpointer.1.notify_one();
            std::thread::sleep(Duration::from_millis(1));
        }
        self.counters.log_space_wait.record(t.elapsed());
    }

    /// Tells the scheduler how urgent background writing is: the shortage
    /// of clean frames (the dirty share of the cache's cold end, half dirty
    /// being full pressure; full pressure outright when the foreground had
    /// to write a dirty victim itself since the last pass), or how far the
    /// log has grown past the checkpoint distance (twice the distance is
    /// full pressure).
    fn report_pressure(&self, cold_dirty_share: f64, foreground_wrote: f64) {
        let frames = (cold_dirty_share * 2.0).max(foreground_wrote).min(1.0);
        let log =
            self.wal_since_checkpoint() as f64 / self.opts.checkpoint_wal_bytes.max(1) as f64 - 1.0;
        self.sched.set_pressure(frames.max(log).clamp(0.0, 1.0));
    }

    /// Writes `stats()` to [`STATS_FILE`] (write then rename, so a reader
    /// never sees half a file). Diagnostic only: failures are ignored.
    fn publish_stats(&self) {
        let doc = serde_json::json!({
            "pid": std::process::id(),
            "unix_ms": std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            "stats": self.stats(),
        });
        let tmp = self.dir.join(format!("{STATS_FILE}.tmp"));
        if std::fs::write(&tmp, doc.to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, self.dir.join(STATS_FILE));
        }
    }

    /// Queues reads of those of `pages` not in the pool; returns how many it
    /// queued (a full queue drops the rest).
    pub(crate) fn read_ahead(&self, pages: &[u64]) -> usize {
        let q = lock_ignoring_poison(&self.readahead);
        let Some(tx) = q.as_ref() else { return 0 };
        pages
            .iter()
            .filter(|&&p| !self.pool.contains(p))
            .take_while(|&&p| tx.try_send(p).is_ok())
            .count()
    }

    /// Wakes the background checkpointer (after a commit).
    pub(crate) fn after_commit(&self) {
        if self.wal_since_checkpoint() >= self.opts.checkpoint_wal_bytes {
            self.checkpointer.1.notify_one();
        }
    }

    fn stats(&self) -> Stats {
        let cache = self.pool.stats();
        let wal = self.wal().stats();
        let c = &self.counters;
        Stats {
            cache,
            cache_hits: cache.hits,
            cache_misses: cache.misses,
            dirty_pages: cache.dirty_pages,
            pages_read: cache.pages_read,
            pages_written: cache.pages_written,
            wal,
            wal_bytes: wal.bytes_written,
            commits: c.commits.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            checkpoint_running: self.checkpointing.try_lock().is_err(),
            wal_since_redo_bytes: self.wal_since_checkpoint(),
            full_page_images: c.full_images.load(Ordering::Relaxed),
            page_deltas: c.deltas.load(Ordering::Relaxed),
            full_page_image_bytes: c.full_image_bytes.load(Ordering::Relaxed),
            page_record_bytes: c.page_record_bytes.load(Ordering::Relaxed),
            cleaner_writes: c.cleaner_writes.load(Ordering::Relaxed),
            readahead_reads: c.readahead_reads.load(Ordering::Relaxed),
            io_scheduler: self.sched.stats(),
            async_io: self
                .aio
                .as_ref()
                .map(|a| a.stats())
                .unwrap_or_else(|| AioStats {
                    backend: AioBackend::Off.to_string(),
                    ..AioStats::default()
                }),
            write_requests: cache.write_requests,
            data_extensions: cache.extensions,
            data_allocated_bytes: cache.allocated_pages * self.pool.page_bytes() as u64,
            eviction_writes: cache.eviction_writes,
            stalls: {
                let h = StallHistograms {
                    wal_sync_wait: c.wal_sync_wait.snapshot(),
                    writer_lock_wait: c.writer_lock_wait.snapshot(),
                    tree_lock_wait: c.tree_lock_wait.snapshot(),
                    read_miss: self.pool.read_miss_stalls(),
                    free_frame_wait: self.pool.free_frame_stalls(),
                    log_space_wait: c.log_space_wait.snapshot(),
                };
                Stalls {
                    wal_sync_wait: h.wal_sync_wait.count,
                    writer_lock_wait: h.writer_lock_wait.count,
                    tree_lock_wait: h.tree_lock_wait.count,
                    read_miss: h.read_miss.count,
                    free_frame_wait: h.free_frame_wait.count,
                    log_space_wait: h.log_space_wait.count,
                    histograms: h,
                }
            },
            data_io: self.pool.file().io_path(),
            wal_sync: self.wal_sync,
            torn_page_protection: "full_page_images_after_checkpoint",
            recovery: self.recovery,
        }
    }
}
