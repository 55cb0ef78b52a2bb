//! The buffer pool: one aligned arena of page frames over the data file.
//!
//! Invariants:
//! - Every frame's memory is a slot of one [`AlignedArena`]; the pool allocates
//!   nothing per page and nothing on the hot path.
//! - A page is in at most one frame; the page table ([`super::table`],
//!   sharded) maps it there. A frame being loaded is already in the table
//!   and exclusively latched, so a second reader of the same page waits for
//!   the load instead of loading it again.
//! - A pinned frame is never evicted. A dirty frame is written back before its
//!   frame is reused, and only after the WAL is durable up to the page's LSN
//!   (DESIGN.md invariant 1, asserted at every write).
//! - Dirty frames are on the flush list, keyed by the LSN of their first change
//!   since they were last written. Flushing walks that list, never the frames
//!   (invariant 7); `flush_list_visits` counts every entry a walk looks at.
//! - Every page read is verified (checksum, own page number, database identity,
//!   and the layout check the pool was given) before anyone sees it; every
//!   page written is sealed first.
//! - The data file grows ahead of use, in zero-filled extents
//!   ([`extend_ahead`](BufferPool::extend_ahead)), so page writes are
//!   overwrites that need no filesystem metadata and a checkpoint's sync
//!   commits no journal. Pages at or past the allocated end have never been
//!   written: a write there first moves the end past its page (under the
//!   extension lock), and an extension fills only from that end, so it never
//!   zeroes a written page.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::Instant;

use super::replacer::Replacer;
use super::table::PageTable;
use crate::error::{Error, Result};
use crate::format::page::PAGE_SIZES;
use crate::format::{DbId, FrameIndex, PageId};
use crate::io::{Aio, AlignedArena, AlignedBuf, Storage};
use crate::lsn::Lsn;
use crate::sched::{ScheduledFile, Scheduler};

/// The fewest frames a pool may have: a B+tree operation pins a root-to-leaf
/// path plus a sibling and a new page at once.
pub const FRAMES_MIN: usize = 16;
/// How many times a miss retries when every frame is pinned before giving up.
pub(super) const VICTIM_RETRIES_MAX: u32 = 1000;

/// The log as the pool sees it: what is durable, and a way to make more so.
pub trait LogFlusher: Send + Sync + 'static {
    /// The LSN up to which the log is durable.
    fn durable_lsn(&self) -> Lsn;
    /// Makes the log durable up to `lsn`.
    ///
    /// # Errors
    /// The log's errors.
    fn flush_to(&self, lsn: Lsn) -> Result<()>;
    /// Whether the log's end is still being found (recovery's replay): a
    /// page read then may be newer than what is durable so far. Once it is
    /// known, no page on disk can be newer than the durable log (pages are
    /// written only after their log), and one that is proves the log that
    /// wrote it missing.
    fn replaying(&self) -> bool {
        false
    }
}

/// Why a page was written back to the data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteCause {
    /// The background cleaner: the pool ran short of clean frames at its
    /// cold end, and the page was cold.
    Cleaner,
    /// A miss needed the frame of a dirty page and wrote it itself.
    Eviction,
    /// A checkpoint wrote what its redo point needs.
    Checkpoint,
    /// A closing database (or a flush of everything) wrote the rest.
    Shutdown,
    /// Recovery wrote what replay changed.
    Recovery,
}

impl WriteCause {
    const ALL: [WriteCause; 5] = [
        WriteCause::Cleaner,
        WriteCause::Eviction,
        WriteCause::Checkpoint,
        WriteCause::Shutdown,
        WriteCause::Recovery,
    ];
}

/// Pages written to the data file, by why (see `WriteCause`); they add
/// up to [`PoolStats::pages_written`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WritesByCause {
    /// By the background cleaner.
    pub cleaner: u64,
    /// By a miss that needed a dirty page's frame.
    pub eviction: u64,
    /// By checkpoints.
    pub checkpoint: u64,
    /// By a closing database.
    pub shutdown: u64,
    /// By recovery.
    pub recovery: u64,
}

impl WritesByCause {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.cleaner + self.eviction + self.checkpoint + self.shutdown + self.recovery
    }
}

/// Counters of the pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Accesses that found their page in the pool.
    pub hits: u64,
    /// Accesses that had to read their page.
    pub misses: u64,
    /// Pages read from the data file.
    pub pages_read: u64,
    /// Pages written to the data file.
    pub pages_written: u64,
    /// Write requests that carried them: adjacent dirty pages written
    /// together are one request, so `pages_written / write_requests` is the
    /// coalescing factor.
    pub write_requests: u64,
    /// Frames reused for another page.
    pub evictions: u64,
    /// Dirty pages now.
    pub dirty_pages: u64,
    /// Flush-list entries looked at by flush walks (invariant 7's counter).
    pub flush_list_visits: u64,
    /// Dirty pages written by the eviction that needed their frame.
    pub eviction_writes: u64,
    /// Times a page write first had to make the WAL durable (WAL rule waits).
    pub wal_rule_flushes: u64,
    /// Frames in the pool.
    pub frames: u64,
    /// Pages of the data file allocated on disk ahead of use.
    pub allocated_pages: u64,
    /// Extensions of the data file (zero fill and sync).
    pub extensions: u64,
    /// Pages written, by why.
    pub writes_by_cause: WritesByCause,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) pages_read: AtomicU64,
    pub(super) write_requests: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) flush_list_visits: AtomicU64,
    pub(super) eviction_writes: AtomicU64,
    pub(super) read_miss_stalls: crate::stall::StallCounter,
    pub(super) free_frame_stalls: crate::stall::StallCounter,
    pub(super) wal_rule_flushes: AtomicU64,
    pub(super) extensions: AtomicU64,
    /// Pages written, by [`WriteCause`] (its discriminant order).
    pub(super) writes_by: [AtomicU64; 5],
    /// The highest page LSN read from the data file, and its page.
    pub(super) newest_read: AtomicU64,
    pub(super) newest_read_page: AtomicU64,
}

/// The page number of a frame that holds no page.
pub(super) const NO_PAGE: PageId = PageId::new(u64::MAX);

pub(super) struct Frame {
    pub(super) data: RwLock<AlignedBuf>,
    /// The page the frame holds ([`NO_PAGE`]: none), as its raw number;
    /// read and set through [`Frame::page`] and [`Frame::set_page`].
    pub(super) page: AtomicU64,
    pub(super) valid: AtomicBool,
    /// Changed by a commit whose record is not yet in the log: never written.
    pub(super) held: AtomicBool,
    pub(super) pins: AtomicU32,
    pub(super) dirty: AtomicBool,
    pub(super) rec_lsn: AtomicU64,
    /// One more than the cleaner's pass during which a hit last promoted
    /// the frame into protected; 0: not since it got its page, or pushed
    /// out of protected since. Set and cleared under the replacer's lock,
    /// read without it (see `BufferPool::touch` in `fix.rs`).
    pub(super) promoted: AtomicU64,
}

impl Frame {
    /// The page the frame holds ([`NO_PAGE`]: none).
    pub(super) fn page(&self) -> PageId {
        PageId::new(self.page.load(Ordering::Acquire))
    }

    /// Makes the frame the home of `page` ([`NO_PAGE`]: of none).
    pub(super) fn set_page(&self, page: PageId) {
        self.page.store(page.get(), Ordering::Release);
    }
}

/// A pool of page frames over one data file.
pub struct BufferPool<S: Storage, L: LogFlusher> {
    pub(super) file: ScheduledFile<S::File>,
    pub(super) path: PathBuf,
    pub(super) page_bytes: usize,
    pub(super) db_id: DbId,
    pub(super) log: std::sync::Arc<L>,
    /// The check of a page's layout every read runs after its checksum
    /// (see [`with_page_check`](Self::with_page_check)).
    pub(super) page_check: Option<PageCheck>,
    pub(super) frames: Box<[Frame]>,
    pub(super) table: PageTable,
    pub(super) replacer: Mutex<Replacer>,
    /// The replacer's pass, mirrored for hits that skip its lock.
    pub(super) pass: AtomicU64,
    /// Dirty frames by the LSN of their first change since last written.
    pub(super) flush_list: Mutex<BTreeSet<(Lsn, FrameIndex)>>,
    pub(super) free: Mutex<Vec<FrameIndex>>,
    pub(super) counters: Counters,
    /// Pages below this are allocated on disk (zero-filled or written);
    /// changed only under `extend`.
    pub(super) extended: AtomicU64,
    /// Serialises extensions against writes past `extended`.
    pub(super) extend: Mutex<()>,
    /// The largest extension in pages; 0: the file grows by page writes.
    pub(super) extend_pages: AtomicU64,
    /// The end of the extension under way (reserved, being zero-filled up
    /// to it); at most `extended` when none is.
    pub(super) extend_target: AtomicU64,
    /// When the next paced zero write of an extension may go.
    pub(super) extend_paced_until: Mutex<Instant>,
    pub(super) _arena: AlignedArena,
}

/// Checks the layout of a page whose checksum, number and database id
/// are right; an error says what is wrong. A page that passes may be used
/// by accessors that index without checks.
pub type PageCheck = fn(&[u8]) -> std::result::Result<(), String>;

impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
    /// The pool, checking every page it reads from disk with `check` as
    /// well: a page that fails is [`Error::Corruption`], never data. The
    /// engine passes its B+tree's node check, so that a page with a right
    /// checksum but a wrong layout (a bug that sealed it, a crafted file)
    /// is refused where it is read, not met by an accessor.
    #[must_use]
    pub fn with_page_check(mut self, check: PageCheck) -> Self {
        self.page_check = Some(check);
        self
    }

    /// A pool of `cache_bytes / page_bytes` frames over `file`, whose
    /// scheduler admits every read and write of the pool.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a page size that is not 4, 8 or 16 KiB or
    /// a cache smaller than [`FRAMES_MIN`] pages; allocation failure.
    pub fn new(
        file: ScheduledFile<S::File>,
        page_bytes: u32,
        cache_bytes: usize,
        db_id: DbId,
        log: std::sync::Arc<L>,
    ) -> Result<Self> {
        if !PAGE_SIZES.contains(&page_bytes) {
            return Err(Error::InvalidArgument(format!(
                "page size {page_bytes} is not one of 4096, 8192, 16384"
            )));
        }
        let n = cache_bytes / page_bytes as usize;
        if n < FRAMES_MIN {
            return Err(Error::InvalidArgument(format!(
                "cache of {cache_bytes} bytes holds {n} pages; at least {FRAMES_MIN} are needed"
            )));
        }
        let unit = file.alignment().io_unit_bytes().max(page_bytes.min(4096));
        if page_bytes % unit != 0 {
            return Err(Error::Unsupported {
                what: "this page size on this device",
                detail: format!("page size {page_bytes} is not a multiple of the I/O unit {unit}"),
            });
        }
        let arena = AlignedArena::new(page_bytes as usize, n, unit)?;
        assert!(n < u32::MAX as usize, "a frame's index fits its u32");
        // Whole pages on disk now; nothing past them has been written.
        let allocated = file.len()? / u64::from(page_bytes);
        let frames: Box<[Frame]> = (0..n)
            .map(|_| {
                let buf = arena.acquire().expect("the arena has a slot per frame");
                Frame {
                    data: RwLock::new(buf),
                    page: AtomicU64::new(NO_PAGE.get()),
                    valid: AtomicBool::new(false),
                    held: AtomicBool::new(false),
                    pins: AtomicU32::new(0),
                    dirty: AtomicBool::new(false),
                    rec_lsn: AtomicU64::new(0),
                    promoted: AtomicU64::new(0),
                }
            })
            .collect();
        assert_eq!(frames.len(), n, "a frame per slot of the arena");
        Ok(BufferPool {
            // Errors name the file wherever the process's working
            // directory is when they are read.
            path: std::path::absolute(file.path()).unwrap_or_else(|_| file.path().to_path_buf()),
            file,
            page_bytes: page_bytes as usize,
            db_id,
            log,
            page_check: None,
            frames,
            table: PageTable::new(n),
            replacer: Mutex::new(Replacer::new(n)),
            pass: AtomicU64::new(0),
            flush_list: Mutex::new(BTreeSet::new()),
            free: Mutex::new((0..n as u32).rev().map(FrameIndex::new).collect()),
            counters: Counters::default(),
            extended: AtomicU64::new(allocated),
            extend: Mutex::new(()),
            extend_pages: AtomicU64::new(0),
            extend_target: AtomicU64::new(0),
            extend_paced_until: Mutex::new(Instant::now()),
            _arena: arena,
        })
    }

    /// Frames in the pool.
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// The page size.
    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    /// The data file.
    pub fn file(&self) -> &ScheduledFile<S::File> {
        &self.file
    }

    /// Foreground page reads over a millisecond.
    pub fn read_miss_stalls(&self) -> crate::stall::StallHistogram {
        self.counters.read_miss_stalls.snapshot()
    }

    /// Foreground waits over a millisecond for a free frame.
    pub fn free_frame_stalls(&self) -> crate::stall::StallHistogram {
        self.counters.free_frame_stalls.snapshot()
    }

    /// Sends the pool's batched reads and writes through `aio`: the data
    /// file is attached and the frame arena registered (fixed buffers under
    /// io_uring). Returns whether the arena was registered.
    ///
    /// # Errors
    /// The file's refusal to attach.
    pub fn attach_aio(&self, aio: &std::sync::Arc<Aio>) -> Result<bool> {
        self.file.attach_aio(aio)?;
        Ok(aio.register_arena(&self._arena))
    }

    pub(super) fn sched(&self) -> &Scheduler {
        self.file.scheduler()
    }

    /// Whether `page` is in the pool (or being read into it).
    pub fn contains(&self, page: PageId) -> bool {
        self.table.contains(page)
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        let c = &self.counters;
        let writes_by_cause = self.writes_by_cause();
        PoolStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            pages_read: c.pages_read.load(Ordering::Relaxed),
            pages_written: writes_by_cause.total(),
            write_requests: c.write_requests.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            dirty_pages: lock(&self.flush_list).len() as u64,
            flush_list_visits: c.flush_list_visits.load(Ordering::Relaxed),
            eviction_writes: c.eviction_writes.load(Ordering::Relaxed),
            wal_rule_flushes: c.wal_rule_flushes.load(Ordering::Relaxed),
            frames: self.frames.len() as u64,
            allocated_pages: self.extended.load(Ordering::Acquire),
            extensions: c.extensions.load(Ordering::Relaxed),
            writes_by_cause,
        }
    }

    fn writes_by_cause(&self) -> WritesByCause {
        let n = |cause: WriteCause| self.counters.writes_by[cause as usize].load(Ordering::Relaxed);
        assert_eq!(WriteCause::ALL.len(), self.counters.writes_by.len());
        WritesByCause {
            cleaner: n(WriteCause::Cleaner),
            eviction: n(WriteCause::Eviction),
            checkpoint: n(WriteCause::Checkpoint),
            shutdown: n(WriteCause::Shutdown),
            recovery: n(WriteCause::Recovery),
        }
    }

    /// Where `page` starts in the data file.
    pub(super) fn offset_of(&self, page: PageId) -> u64 {
        assert!(page != NO_PAGE, "the no-page mark has no place in the file");
        page.offset(self.page_bytes as u64)
    }
}

/// See [`crate::health`]: a poisoned lock here means the database has
/// failed already.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::health::lock_even_poisoned(m)
}

/// Pages one request carries at most when adjacent pages are coalesced.
pub(super) const COALESCE_PAGES_MAX: usize = 64;

/// Splits `items`, sorted by page number, into runs of consecutive pages of
/// at most [`COALESCE_PAGES_MAX`]: index ranges, in order, covering all.
pub(super) fn runs_of<T>(items: &[T], page: impl Fn(&T) -> PageId) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        let ends = i == items.len()
            || page(&items[i]) != page(&items[i - 1]).next()
            || i - start >= COALESCE_PAGES_MAX;
        if ends {
            assert!(
                i - start <= COALESCE_PAGES_MAX,
                "a run is at most {COALESCE_PAGES_MAX} pages"
            );
            runs.push(start..i);
            start = i;
        }
    }
    assert_eq!(start, items.len(), "the runs cover every item");
    runs
}
