//! What a database reports about itself: [`Stats`] and its parts, the
//! counters behind them, and the publication of `stats()` for
//! `directkv stats` in another process.
//!
//! Invariants:
//! - Counters only grow (except gauges such as dirty pages), so the
//!   difference of two snapshots is what happened between them.
//! - Background threads add nothing to the foreground wait causes
//!   ([`crate::stall`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::buffer::PoolStats;
use crate::format::TxnId;
use crate::io::{AioStats, IoPath, SyncVariant};
use crate::sched::SchedStats;
use crate::stall::{StallCounter, StallHistogram};
use crate::wal::WalStats;

/// How often the engine publishes its stats to [`STATS_FILE`].
pub(super) const STATS_EVERY: Duration = Duration::from_secs(1);

/// The file in the database directory where an open database publishes its
/// `stats()` every second, for `directkv stats` in another process.
pub const STATS_FILE: &str = "stats.json";

/// The engine's own counters (the pool, the WAL and the scheduler keep
/// theirs).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) commits: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) backups: AtomicU64,
    /// The running backup's progress (see [`BackupProgress`]).
    pub(super) backup_running: AtomicU64,
    pub(super) backup_pages_total: AtomicU64,
    pub(super) backup_pages_done: AtomicU64,
    pub(super) backup_bytes: AtomicU64,
    pub(super) full_images: AtomicU64,
    pub(super) full_image_bytes: AtomicU64,
    pub(super) page_record_bytes: AtomicU64,
    pub(super) deltas: AtomicU64,
    pub(super) wal_sync_wait: StallCounter,
    pub(super) writer_lock_wait: StallCounter,
    pub(super) tree_lock_wait: StallCounter,
    pub(super) commit_wait: StallCounter,
    pub(super) row_lock_wait: StallCounter,
    pub(super) writers_begun: AtomicU64,
    pub(super) conflicts: AtomicU64,
    pub(super) commit_misses: AtomicU64,
    pub(super) shape_retries: AtomicU64,
    pub(super) commit_section_ns: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(super) log_space_wait: StallCounter,
    pub(super) cleaner_writes: AtomicU64,
    pub(super) dropped_pages_freed: AtomicU64,
    pub(super) readahead_reads: AtomicU64,
    pub(super) next_txn: AtomicU64,
    /// The time (µs since the epoch) of the last commit record written or
    /// replayed: commit times never go backwards.
    pub(super) commit_clock_us: AtomicU64,
    pub(super) summary_failures: AtomicU64,
}

impl Counters {
    /// Counters of a database whose next transaction id is `next_txn` and
    /// whose last commit (replayed) was at `commit_time_us`.
    pub(super) fn starting_at(next_txn: TxnId, commit_time_us: u64) -> Counters {
        Counters {
            next_txn: AtomicU64::new(next_txn.get()),
            commit_clock_us: AtomicU64::new(commit_time_us),
            ..Counters::default()
        }
    }

    /// The time a commit record written now carries: the wall clock in
    /// µs, but never before the last commit's (called in the serial commit
    /// section, so commit times rise with LSNs).
    pub(super) fn commit_time_us(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let last = self.commit_clock_us.fetch_max(now, Ordering::AcqRel);
        let t = now.max(last);
        assert!(t >= last, "commit times never go backwards");
        t
    }

    /// A new transaction id.
    pub(super) fn next_txn(&self) -> TxnId {
        let id = self.next_txn.fetch_add(1, Ordering::Relaxed);
        // Records carry ids up to it, and a decoder refuses one past it.
        assert!(
            id <= crate::constants::TXN_ID_MAX,
            "transaction ids stay decodable"
        );
        TxnId::new(id)
    }

    /// Counts the page records of one commit.
    pub(super) fn add_page_records(&self, r: RecordCounts) {
        assert!(
            r.full_image_bytes <= r.logged_bytes,
            "full images are part of what was logged"
        );
        self.full_images.fetch_add(r.full_images, Ordering::Relaxed);
        self.deltas.fetch_add(r.deltas, Ordering::Relaxed);
        self.full_image_bytes
            .fetch_add(r.full_image_bytes, Ordering::Relaxed);
        self.page_record_bytes
            .fetch_add(r.logged_bytes, Ordering::Relaxed);
    }
}

/// The page records one commit logged, for the counters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RecordCounts {
    pub full_images: u64,
    pub full_image_bytes: u64,
    pub deltas: u64,
    pub logged_bytes: u64,
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
    /// Transactions that waited over 1 ms for the writer lock (only with
    /// `Options::serial_writers`).
    pub writer_lock_wait: u64,
    /// Commits that waited over 1 ms to enter the commit section (where
    /// one transaction at a time validates, applies and logs).
    pub commit_wait: u64,
    /// Row-lock waits over 1 ms (`put`, `delete`, `get_for_update` on a key
    /// another transaction holds).
    pub row_lock_wait: u64,
    /// Commits that waited over 1 ms for the tree lock (a checkpoint start, or
    /// a reader whose lock-free descents kept crossing structure changes).
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
    /// Waits to enter the commit section.
    pub commit_wait: StallHistogram,
    /// Row-lock waits.
    pub row_lock_wait: StallHistogram,
    /// Tree-lock waits of commits.
    pub tree_lock_wait: StallHistogram,
    /// Foreground cache-miss reads.
    pub read_miss: StallHistogram,
    /// Free-frame waits.
    pub free_frame_wait: StallHistogram,
    /// Log-space waits.
    pub log_space_wait: StallHistogram,
}

/// Named tables, as [`Stats::tables`] reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    /// Named tables (live).
    pub tables: u64,
    /// Dropped tables whose pages are not all freed yet.
    pub dropped: u64,
    /// Pages the steps that free dropped tables held since open: the pages
    /// freed, and the paths and catalog leaves they changed.
    pub dropped_pages_freed: u64,
    /// Pages of every table (live, or dropped and not yet freed) together.
    pub pages: u64,
    /// The [`TABLES_LISTED`] tables with the most pages, most first (ties
    /// by id): a call of `stats()` costs the same with 10 tables or
    /// 10,000 (`directkv check` walks and lists every table).
    pub largest: Vec<TablePages>,
}

/// How many tables [`TableStats::largest`] lists.
pub const TABLES_LISTED: usize = 16;

/// One table's figures in [`TableStats::largest`]: exact as of the last
/// commit applied, kept by every commit (no walk).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TablePages {
    /// Its id.
    pub id: u32,
    /// Its name (empty once dropped).
    pub name: String,
    /// Whether it was dropped (its pages are being freed).
    pub dropped: bool,
    /// Its pages: its tree's and its values' overflow pages, the same
    /// figure `directkv check` counts by walking.
    pub pages: u64,
}

/// The data file's pages, as [`Stats::space`] reports them: as of the last
/// commit applied, kept by every commit (no walk).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SpaceStats {
    /// Bytes per page.
    pub page_bytes: u64,
    /// Pages the data file holds (its header page among them).
    pub pages: u64,
    /// Of them, free: freed by deletes and drops, to be reused before the
    /// file grows. `None` when not known: a database last written by a
    /// build that did not count them (the count `directkv check` walks).
    pub free_pages: Option<u64>,
    /// Of the pages, those a compaction would give back
    /// ([`Database::compact`](crate::Database::compact)): the free pages
    /// less the slack it leaves, 0 when too few for it to run. `None`
    /// while the free pages are not known.
    pub compactable_pages: Option<u64>,
    /// The page count a compaction under way cuts the file to (`None`:
    /// none is; a later `compact` call takes one stopped short up again).
    pub compacting_to: Option<u64>,
}

impl SpaceStats {
    /// The free pages' bytes, when they are counted.
    pub fn free_bytes(&self) -> Option<u64> {
        self.free_pages.map(|n| n.saturating_mul(self.page_bytes))
    }

    /// The bytes a compaction would give back, when the free pages are
    /// counted.
    pub fn compactable_bytes(&self) -> Option<u64> {
        self.compactable_pages
            .map(|n| n.saturating_mul(self.page_bytes))
    }
}

/// Write transactions, as [`Stats::transactions`] reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TxnStats {
    /// Write transactions begun since open.
    pub begun: u64,
    /// Transactions refused because another transaction committed a change
    /// to what this one read or wrote (`Error::Conflict`), or because its
    /// snapshot was given up: at commit, or (under Snapshot) at the
    /// `put`, `delete` or `get_for_update` that locked a changed key.
    pub conflicts: u64,
    /// Transactions chosen as a deadlock's victim (`Error::Deadlock`).
    pub deadlocks: u64,
    /// Row-lock waits that ran out (`Error::LockTimeout`).
    pub lock_timeouts: u64,
    /// Row-lock waits (a key another transaction held), and their time.
    pub lock_waits: u64,
    /// Total time of the row-lock waits, in microseconds.
    pub lock_wait_us: u64,
    /// Keys locked now.
    pub locked_keys: u64,
    /// Transactions waiting for a row lock now.
    pub waiting_for_locks: u64,
    /// Attempts `Database::transaction` ran again after a retryable error.
    pub retries: u64,
    /// Commit sections that found a page missing, let go of the section to
    /// read it and entered again (the section itself never reads the disk).
    pub commit_misses: u64,
    /// Lock-free tree reads run again because a commit changed the tree's
    /// structure (a split or a freed page) under them, or found one under
    /// way (readers never wait for a commit otherwise).
    pub shape_retries: u64,
    /// Time transactions held the commit section (the part of a commit that
    /// runs one at a time: validate, apply, log, publish), in microseconds;
    /// divided by the commits, what each one serializes.
    pub commit_section_us: u64,
}

/// How far the running backup is ([`Database::backup`](super::Database::backup)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BackupProgress {
    /// Backups running now.
    pub running: u64,
    /// Pages of the data file the latest one reads.
    pub pages_total: u64,
    /// Pages it has read and checked.
    pub pages_done: u64,
    /// Bytes it has written (pages and log).
    pub bytes_copied: u64,
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
    pub wal: WalStats,
    /// Bytes written to the WAL.
    pub wal_bytes: u64,
    /// Commits.
    pub commits: u64,
    /// Completed checkpoints.
    pub checkpoints: u64,
    /// Completed backups ([`Database::backup`](super::Database::backup)).
    pub backups: u64,
    /// The progress of a running backup (the latest started, if several).
    pub backup: BackupProgress,
    /// Log archiving ([`Options::wal_archive`](super::Options::wal_archive)).
    pub archive: super::ArchiveStats,
    /// Checkpoints that could not write their changed-page summary: an
    /// incremental backup spanning one reads every page.
    pub summary_write_failures: u64,
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
    /// Named tables.
    pub tables: TableStats,
    /// The data file's pages, used and free.
    pub space: SpaceStats,
    /// Dirty pages a foreground eviction had to write itself.
    pub eviction_writes: u64,
    /// Pages written, by why: the answer to "why was this page written?".
    pub writes_by_cause: crate::buffer::WritesByCause,
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
    /// Read transactions' snapshots and the version store that serves them.
    pub snapshots: super::SnapshotStats,
    /// Write transactions: how many ran, conflicted, deadlocked, waited.
    pub transactions: TxnStats,
    /// A warning: the database's directories and files that were readable
    /// beyond `Options::permissions` (by others, or by the group unless
    /// `GroupReadable`) when it was opened. Empty when all is private.
    pub readable_by_others: Vec<std::path::PathBuf>,
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
    /// Of `pages_read`, pages read ahead: met in a delta of a commit still
    /// in replay's lookahead, and read with others in one batch, all in
    /// flight at once.
    pub read_ahead_pages: u64,
    /// The most pages one read-ahead batch had in flight together.
    pub read_ahead_batch_max: u64,
    /// Wall time of the replay, in microseconds.
    pub micros: u64,
    /// Where the log ended in a torn flush whose records open found and
    /// discarded: the LSN they started at. `None`: the log ended cleanly.
    /// Those records' sync never completed, so no commit among them was
    /// acknowledged (damage to the last acknowledged flush looks the same;
    /// this says that something was dropped, and where).
    pub torn_tail_lsn: Option<u64>,
    /// Bytes of the discarded tail, to the end of its last record.
    pub torn_tail_bytes: u64,
    /// Records found in the discarded tail.
    pub torn_tail_records: u64,
    /// Wall time of the checkpoint an open runs after a replay (or at a
    /// new database's first open), in microseconds.
    pub checkpoint_micros: u64,
}
