//! What taking a backup needs of the open database, and nothing more: the
//! one interface through which `backup/` reaches the engine. The database
//! implements it in `db/backup_access.rs`; `backup/take` is written against
//! it alone.
//!
//! The engine's lower layers (storage, scheduler, log, page formats) are
//! named directly; what belongs to the database (its checkpoint, log pins,
//! `CONTROL`, changed-page summaries, archive and counters) is reached
//! only through [`Engine`]. The log archiver (`archive/`) works through it
//! too, on the archiver's state the database holds.
//!
//! Invariants:
//! - A log pin taken by [`Engine::checkpoint_and_pin`] holds every segment
//!   from the checkpoint's redo point until [`Engine::unpin_log`] is
//!   called with that same LSN, once.
//! - [`Checkpointed::redo`] < [`Checkpointed::record_end`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backup::archive::state::Archive;
use crate::error::{Error, Result};
use crate::format::control::Control;
use crate::format::{DbId, PageId};
use crate::io::{AlignedBuf, Storage};
use crate::lsn::Lsn;
use crate::sched::{ScheduledFile, Scheduler};
use crate::wal::Wal;

/// The tree a checkpoint began with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    /// The root page.
    pub(crate) root: PageId,
    /// Pages in the data file.
    pub(crate) page_count: u64,
    /// Head of the free-page list.
    pub(crate) freelist: PageId,
    /// The catalog of named tables' root (0: none).
    pub(crate) catalog: PageId,
    /// Free pages (`None`: not known).
    pub(crate) free_pages: Option<u64>,
    /// The compaction under way, if one is.
    pub(crate) compaction: Option<crate::format::control::Compaction>,
}

/// The checkpoint a backup begins with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checkpointed {
    /// Its redo point: the backup's log starts here.
    pub(crate) redo: Lsn,
    /// The end of its record.
    pub(crate) record_end: Lsn,
    /// The tree at its start.
    pub(crate) meta: Meta,
    /// The time of the last commit before its start (µs since the epoch;
    /// 0 for none).
    pub(crate) commit_time_us: u64,
}

/// The pages the changed-page summaries name for a range of the log,
/// ascending.
pub(crate) struct ChangedPages(pub(crate) Vec<PageId>);

impl ChangedPages {
    /// The pages, ascending.
    pub(crate) fn pages(&self) -> impl Iterator<Item = PageId> + '_ {
        self.0.iter().copied()
    }
}

/// A backup's progress, for `stats().backup`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Progress {
    /// A backup starts that will read about `pages` pages.
    Started { pages: u64 },
    /// The pages it will read are `pages` after all (an increment's).
    Total { pages: u64 },
    /// `pages` more pages read and `bytes` more bytes written.
    Copied { pages: u64, bytes: u64 },
    /// The backup stopped, sealed or not.
    Ended,
    /// The backup was sealed.
    Sealed,
}

/// What taking a backup needs of the open database (shared with the
/// backup's reader thread, hence `Sync`).
pub(crate) trait Engine: Sync {
    /// The storage the database's files are on.
    type S: Storage;

    /// The storage the database's files are on.
    fn storage(&self) -> &Self::S;
    /// The database's directory.
    fn dir(&self) -> &Path;
    /// The database's I/O scheduler.
    fn sched(&self) -> &Arc<Scheduler>;
    /// The open log.
    fn wal(&self) -> &Wal<Self::S>;
    /// Bytes of a page.
    fn page_bytes(&self) -> usize;
    /// The data file, read through the scheduler.
    fn data_file(&self) -> &ScheduledFile<<Self::S as Storage>::File>;
    /// The log archive's root directory, when the database archives.
    fn archive_dir(&self) -> Option<PathBuf>;
    /// Runs a checkpoint (paced like a background one unless `fast`) and,
    /// under its lock, pins the log at its redo point.
    fn checkpoint_and_pin(&self, fast: bool) -> Result<Checkpointed>;
    /// Takes back the pin at `lsn` that [`checkpoint_and_pin`](Self::checkpoint_and_pin) took.
    fn unpin_log(&self, lsn: Lsn);
    /// The database's `CONTROL` as last written.
    fn control(&self) -> Result<Control>;
    /// Writes `control` as a new `CONTROL` file at `path` (a backup's).
    fn create_control(&self, path: &Path, control: Control) -> Result<()>;
    /// Reads the `CONTROL` file at `path` (a backup's).
    fn read_control(&self, path: &Path) -> Result<Control>;
    /// The pages changed from `from` to `to` by the summaries, `None`
    /// where they do not cover the range.
    fn changed_pages(&self, from: Lsn, to: Lsn) -> Result<Option<ChangedPages>>;
    /// Reads page `no` into `out` under its frame's shared latch when the
    /// pool holds it (a write-back holds the exclusive one for its whole
    /// write); returns the LSN of the pool's copy when it holds one.
    fn reread_page(&self, no: PageId, out: &mut AlignedBuf) -> Result<Option<Lsn>>;
    /// The error for damage to page `no`, naming it.
    fn page_corruption(&self, no: PageId, detail: String) -> Error;
    /// The log archiver's state, when the database archives: the
    /// archiver ([`crate::backup::archive`]) works on it and this engine.
    fn archive(&self) -> Option<&Archive>;
    /// Counts a backup's progress.
    fn progress(&self, p: Progress);
    /// A new random id.
    fn new_id(&self) -> DbId;
}
