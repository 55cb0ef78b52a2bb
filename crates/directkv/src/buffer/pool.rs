//! The buffer pool: one aligned arena of page frames over the data file.
//!
//! Invariants:
//! - Every frame's memory is a slot of one [`AlignedArena`]; the pool allocates
//!   nothing per page and nothing on the hot path.
//! - A page is in at most one frame; the page table maps it there. A frame
//!   being loaded is already in the table and exclusively latched, so a second
//!   reader of the same page waits for the load instead of loading it again.
//! - A pinned frame is never evicted. A dirty frame is written back before its
//!   frame is reused, and only after the WAL is durable up to the page's LSN
//!   (DESIGN.md invariant 1, asserted at every write).
//! - Dirty frames are on the flush list, keyed by the LSN of their first change
//!   since they were last written. Flushing walks that list, never the frames
//!   (invariant 7); `flush_list_visits` counts every entry a walk looks at.
//! - Every page read is verified (checksum, own page number, database identity)
//!   before anyone sees it; every page written is sealed first.
//! - The data file grows ahead of use, in zero-filled extents
//!   ([`extend_ahead`](BufferPool::extend_ahead)), so page writes are
//!   overwrites that need no filesystem metadata and a checkpoint's sync
//!   commits no journal. Pages at or past the allocated end have never been
//!   written: a write there first moves the end past its page (under the
//!   extension lock), and an extension fills only from that end, so it never
//!   zeroes a written page.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

use super::replacer::{Access, Replacer};
use crate::error::{Error, Result};
use crate::format::page::{self, PageError, PAGE_HEADER_BYTES, PAGE_SIZES};
use crate::format::DbId;
use crate::io::{Aio, AlignedArena, AlignedBuf, BatchOp, Fill, Storage, StorageFile};
use crate::lsn::Lsn;
use crate::sched::{IoClass, SchedMode, SchedOptions, Scheduler};

/// The fewest frames a pool may have: a B+tree operation pins a root-to-leaf
/// path plus a sibling and a new page at once.
pub const FRAMES_MIN: usize = 16;
/// The smallest extension of the data file, in pages (1 MiB of 8 KiB pages).
const EXTEND_MIN_PAGES: u64 = 128;
/// Bytes of zeros per write (and scheduler admission) of an extension.
const EXTEND_STEP_BYTES: usize = 256 << 10;
/// The rate of an extension's zero writes while the file is still well
/// ahead of use. Unpaced, a 64 MiB fill went out in about 70 ms, and on a
/// disk with a volatile cache the log syncs meanwhile had to flush it: reads
/// and commits stalled together for 30–140 ms.
const EXTEND_PACE_BYTES_PER_SEC: u64 = 32 << 20;
/// How many times a miss retries when every frame is pinned before giving up.
const VICTIM_RETRIES_MAX: u32 = 1000;

/// The log as the pool sees it: what is durable, and a way to make more so.
pub trait LogFlusher: Send + Sync + 'static {
    /// The LSN up to which the log is durable.
    fn durable_lsn(&self) -> Lsn;
    /// Makes the log durable up to `lsn`.
    ///
    /// # Errors
    /// The log's errors.
    fn flush_to(&self, lsn: Lsn) -> Result<()>;
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
}

#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    pages_read: AtomicU64,
    pages_written: AtomicU64,
    write_requests: AtomicU64,
    evictions: AtomicU64,
    flush_list_visits: AtomicU64,
    eviction_writes: AtomicU64,
    read_miss_stalls: crate::stall::StallCounter,
    free_frame_stalls: crate::stall::StallCounter,
    wal_rule_flushes: AtomicU64,
    extensions: AtomicU64,
}

const NO_PAGE: u64 = u64::MAX;

struct Frame {
    data: RwLock<AlignedBuf>,
    page: AtomicU64,
    valid: AtomicBool,
    /// Changed by a commit whose record is not yet in the log: never written.
    held: AtomicBool,
    pins: AtomicU32,
    dirty: AtomicBool,
    rec_lsn: AtomicU64,
}

/// A pool of page frames over one data file.
pub struct BufferPool<S: Storage, L: LogFlusher> {
    file: S::File,
    path: PathBuf,
    page_bytes: usize,
    db_id: DbId,
    log: std::sync::Arc<L>,
    frames: Box<[Frame]>,
    table: Mutex<HashMap<u64, u32>>,
    replacer: Mutex<Replacer>,
    flush_list: Mutex<BTreeSet<(u64, u32)>>,
    free: Mutex<Vec<u32>>,
    counters: Counters,
    /// The I/O scheduler every read and write asks; unset, a FIFO one.
    sched: std::sync::OnceLock<std::sync::Arc<Scheduler>>,
    /// Pages below this are allocated on disk (zero-filled or written);
    /// changed only under `extend`.
    extended: AtomicU64,
    /// Serialises extensions against writes past `extended`.
    extend: Mutex<()>,
    /// The largest extension in pages; 0: the file grows by page writes.
    extend_pages: AtomicU64,
    /// The end of the extension under way (reserved, being zero-filled up
    /// to it); at most `extended` when none is.
    extend_target: AtomicU64,
    /// When the next paced zero write of an extension may go.
    extend_paced_until: Mutex<Instant>,
    _arena: AlignedArena,
}

/// The scheduler of pools not given one: admits everything at once.
static UNSCHEDULED: std::sync::LazyLock<Scheduler> = std::sync::LazyLock::new(|| {
    Scheduler::new(SchedOptions {
        mode: SchedMode::Fifo,
        ..SchedOptions::default()
    })
});

/// See [`crate::health`]: a poisoned lock here means the database has
/// failed already.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    crate::health::lock_even_poisoned(m)
}

/// A pinned, shared-latched page.
pub struct PageRef<'a, S: Storage, L: LogFlusher> {
    pool: &'a BufferPool<S, L>,
    frame: u32,
    guard: RwLockReadGuard<'a, AlignedBuf>,
}

/// A pinned, exclusively latched page.
pub struct PageMut<'a, S: Storage, L: LogFlusher> {
    pool: &'a BufferPool<S, L>,
    frame: u32,
    guard: RwLockWriteGuard<'a, AlignedBuf>,
}

impl<S: Storage, L: LogFlusher> PageRef<'_, S, L> {
    /// The page's bytes.
    pub fn data(&self) -> &[u8] {
        self.guard.as_slice()
    }
    /// The page number.
    pub fn page_no(&self) -> u64 {
        self.pool.frames[self.frame as usize]
            .page
            .load(Ordering::Acquire)
    }
}

impl<S: Storage, L: LogFlusher> Drop for PageRef<'_, S, L> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

impl<S: Storage, L: LogFlusher> PageMut<'_, S, L> {
    /// The page's bytes.
    pub fn data(&self) -> &[u8] {
        self.guard.as_slice()
    }
    /// The page's bytes, to change. Call [`mark_dirty`](Self::mark_dirty) with
    /// the LSN of the log record describing the change.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.guard.as_mut_slice()
    }
    /// The page number.
    pub fn page_no(&self) -> u64 {
        self.pool.frames[self.frame as usize]
            .page
            .load(Ordering::Acquire)
    }
    /// Keeps the page pinned and unwritable after this guard is dropped, until
    /// [`BufferPool::release_held`]: for changes whose log record (the commit)
    /// does not exist yet. Returns the handle to release it with.
    pub fn hold(&mut self) -> Held {
        let f = &self.pool.frames[self.frame as usize];
        assert!(!f.held.swap(true, Ordering::AcqRel), "a page is held once");
        f.pins.fetch_add(1, Ordering::AcqRel);
        Held {
            frame: self.frame,
            page: self.page_no(),
        }
    }

    /// Records that the page now holds a change logged ending at `lsn`: sets
    /// the page LSN and puts the page on the flush list if it was clean.
    pub fn mark_dirty(&mut self, lsn: Lsn) {
        let bytes = self.guard.as_mut_slice();
        assert!(lsn >= page::page_lsn(bytes), "page LSN goes backwards");
        bytes[24..32].copy_from_slice(&lsn.0.to_le_bytes());
        let f = &self.pool.frames[self.frame as usize];
        if !f.dirty.swap(true, Ordering::AcqRel) {
            f.rec_lsn.store(lsn.0, Ordering::Release);
            lock(&self.pool.flush_list).insert((lsn.0, self.frame));
        }
    }
}

impl<S: Storage, L: LogFlusher> Drop for PageMut<'_, S, L> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

/// A page kept in the pool by [`PageMut::hold`].
#[derive(Debug)]
#[must_use = "a held page stays pinned until released"]
pub struct Held {
    frame: u32,
    page: u64,
}

impl Held {
    /// The page number.
    pub fn page_no(&self) -> u64 {
        self.page
    }
}

enum Latch {
    Shared,
    Exclusive,
}

impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
    /// A pool of `cache_bytes / page_bytes` frames over `file`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a page size that is not 4, 8 or 16 KiB or
    /// a cache smaller than [`FRAMES_MIN`] pages; allocation failure.
    pub fn new(
        file: S::File,
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
        // Whole pages on disk now; nothing past them has been written.
        let allocated = file.len()? / u64::from(page_bytes);
        let frames = (0..n)
            .map(|_| {
                let buf = arena.acquire().expect("the arena has a slot per frame");
                Frame {
                    data: RwLock::new(buf),
                    page: AtomicU64::new(NO_PAGE),
                    valid: AtomicBool::new(false),
                    held: AtomicBool::new(false),
                    pins: AtomicU32::new(0),
                    dirty: AtomicBool::new(false),
                    rec_lsn: AtomicU64::new(0),
                }
            })
            .collect();
        Ok(BufferPool {
            path: file.path().to_path_buf(),
            file,
            page_bytes: page_bytes as usize,
            db_id,
            log,
            frames,
            table: Mutex::new(HashMap::with_capacity(n)),
            replacer: Mutex::new(Replacer::new(n)),
            flush_list: Mutex::new(BTreeSet::new()),
            free: Mutex::new((0..n as u32).rev().collect()),
            counters: Counters::default(),
            sched: std::sync::OnceLock::new(),
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
    pub fn file(&self) -> &S::File {
        &self.file
    }

    /// Pins and share-latches `page`, reading it if needed.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the page fails verification; I/O errors.
    pub fn read(&self, page: u64, access: Access) -> Result<PageRef<'_, S, L>> {
        let (frame, latch) = self.fix(page, access, Latch::Shared, false)?;
        match latch {
            Fixed::Shared(guard) => Ok(PageRef {
                pool: self,
                frame,
                guard,
            }),
            Fixed::Exclusive(_) => unreachable!("asked for a shared latch"),
        }
    }

    /// Foreground page reads over a millisecond.
    pub fn read_miss_stalls(&self) -> crate::stall::StallHistogram {
        self.counters.read_miss_stalls.snapshot()
    }

    /// Foreground waits over a millisecond for a free frame.
    pub fn free_frame_stalls(&self) -> crate::stall::StallHistogram {
        self.counters.free_frame_stalls.snapshot()
    }

    /// Routes this pool's reads and writes through `sched` (once; later calls
    /// are ignored).
    pub fn set_scheduler(&self, sched: std::sync::Arc<Scheduler>) {
        let _ = self.sched.set(sched);
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

    /// Turns growth ahead of use on (`chunk_pages` > 0: the largest
    /// extension) or off (0: the file grows by its page writes).
    pub fn set_extension(&self, chunk_pages: u64) {
        self.extend_pages.store(chunk_pages, Ordering::Release);
    }

    /// Extends the data file ahead of use when fewer than half a chunk of
    /// allocated pages is left past `page_count` (the pages in use): reserves
    /// the next chunk (a quarter of the file, from 1 MiB up to the configured
    /// largest), zero-fills it as `class` and syncs it, so later page writes
    /// there are overwrites and later syncs commit no allocation. While the
    /// file is more than a quarter chunk ahead of use the zero writes are
    /// paced (32 MiB/s) and a call makes only those due,
    /// leaving the rest to later calls (the page cleaner calls this on every
    /// pass); closer than that, a call fills the rest at once. Returns the
    /// pages zero-filled by this call.
    ///
    /// # Errors
    /// The fill's or the sync's error (the file is poisoned then, as any
    /// failed write poisons it).
    pub fn extend_ahead(&self, page_count: u64, class: IoClass) -> Result<u64> {
        let most = self.extend_pages.load(Ordering::Acquire);
        if most == 0 {
            return Ok(0);
        }
        let chunk_of = |end: u64| (end / 4).clamp(EXTEND_MIN_PAGES, most.max(EXTEND_MIN_PAGES));
        let ahead = |end: u64| end >= page_count.saturating_add(chunk_of(end) / 2);
        let start = self.extended.load(Ordering::Acquire);
        let mut target = self.extend_target.load(Ordering::Acquire);
        let pb = self.page_bytes as u64;
        if target <= start {
            if ahead(start) {
                return Ok(0);
            }
            target = {
                let _one = lock(&self.extend);
                let end = self.extended.load(Ordering::Acquire);
                if ahead(end) {
                    return Ok(0);
                }
                page_count.max(end) + chunk_of(end)
            };
            // Reserve the blocks first: a full filesystem fails here, where
            // nothing is poisoned, rather than in a zero write, which would
            // poison the file for a speculative extension.
            {
                let _permit = self.sched().admit(class, 0);
                self.file.allocate(target * pb, Fill::Reserve)?;
            }
            self.extend_target.fetch_max(target, Ordering::AcqRel);
        }
        // Step by step: the permit is taken holding no lock, and the lock
        // only around one write, so a writer holding a Background permit
        // and waiting in `cover` never waits on this one waiting for a
        // permit.
        let step = (EXTEND_STEP_BYTES as u64 / pb).max(1);
        let zeros = self.zeros(step)?;
        loop {
            let at = self.extended.load(Ordering::Acquire);
            if at >= target {
                break;
            }
            let urgent = at < page_count.saturating_add(chunk_of(at) / 4);
            if !urgent && !self.extend_paced(step * pb) {
                return Ok(at.saturating_sub(start));
            }
            let _permit = self.sched().admit(class, step * pb);
            let _one = lock(&self.extend);
            let at = self.extended.load(Ordering::Acquire);
            if at >= target {
                break;
            }
            let n = (target - at).min(step);
            self.fill_locked(&zeros, at, n)?;
        }
        // One caller finishes the extension: syncs and counts it.
        if self
            .extend_target
            .compare_exchange(target, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let _permit = self.sched().admit(class, 0);
            self.file.sync_all()?;
            self.counters.extensions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.extended.load(Ordering::Acquire).saturating_sub(start))
    }

    /// Whether a paced zero write of `bytes` may go now (and if so, books
    /// the time it takes at the pace).
    fn extend_paced(&self, bytes: u64) -> bool {
        let mut next = lock(&self.extend_paced_until);
        let now = Instant::now();
        if now < *next {
            return false;
        }
        let secs = bytes as f64 / EXTEND_PACE_BYTES_PER_SEC as f64;
        *next = now + Duration::from_secs_f64(secs);
        true
    }

    /// A buffer of `pages` zero pages.
    fn zeros(&self, pages: u64) -> Result<AlignedBuf> {
        let unit = self.file.alignment().io_unit_bytes().max(4096);
        AlignedBuf::new(pages as usize * self.page_bytes, unit)
    }

    /// Zero-fills `n` pages from `at`, the allocated end (none of them
    /// written yet), and moves the end past them. Under the extension lock.
    fn fill_locked(&self, zeros: &AlignedBuf, at: u64, n: u64) -> Result<()> {
        let pb = self.page_bytes as u64;
        debug_assert_eq!(at, self.extended.load(Ordering::Acquire));
        self.file
            .write_all_at(zeros.io(0..(n * pb) as usize)?, at * pb)?;
        self.extended.store(at + n, Ordering::Release);
        Ok(())
    }

    /// With growth ahead of use on, moves the allocated end past page
    /// `page` before it is written, so no extension ever zeroes it: the page
    /// then extends the file itself, as without growth ahead. No I/O, so it
    /// never fails and never waits on the scheduler (a writer holding a
    /// Background permit can wait on the extension lock).
    fn cover(&self, page: u64) {
        if page < self.extended.load(Ordering::Acquire)
            || self.extend_pages.load(Ordering::Acquire) == 0
        {
            return;
        }
        let _one = lock(&self.extend);
        self.extended.fetch_max(page + 1, Ordering::AcqRel);
    }

    fn sched(&self) -> &Scheduler {
        self.sched.get().map_or(&UNSCHEDULED, |s| s)
    }

    /// Whether `page` is in the pool (or being read into it).
    pub fn contains(&self, page: u64) -> bool {
        lock(&self.table).contains_key(&page)
    }

    /// Pins and share-latches `page` if it is in the pool; never reads.
    pub fn try_read(&self, page: u64, access: Access) -> Option<PageRef<'_, S, L>> {
        match self.try_hit(page, access, &Latch::Shared)? {
            (frame, Fixed::Shared(guard)) => Some(PageRef {
                pool: self,
                frame,
                guard,
            }),
            (_, Fixed::Exclusive(_)) => unreachable!("asked for a shared latch"),
        }
    }

    /// Pins and exclusively latches `page`, reading it if needed.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write(&self, page: u64) -> Result<PageMut<'_, S, L>> {
        self.fix_mut(page, false)
    }

    /// Pins and exclusively latches `page` as a new, zeroed page (not read). The
    /// caller initialises it and marks it dirty.
    ///
    /// # Errors
    /// I/O errors of evicting a dirty page to make room.
    pub fn create(&self, page: u64) -> Result<PageMut<'_, S, L>> {
        let mut p = self.fix_mut(page, true)?;
        p.data_mut().fill(0);
        Ok(p)
    }

    fn fix_mut(&self, page: u64, fresh: bool) -> Result<PageMut<'_, S, L>> {
        let (frame, latch) = self.fix(page, Access::Normal, Latch::Exclusive, fresh)?;
        match latch {
            Fixed::Exclusive(guard) => Ok(PageMut {
                pool: self,
                frame,
                guard,
            }),
            Fixed::Shared(_) => unreachable!("asked for an exclusive latch"),
        }
    }

    fn unpin(&self, frame: u32) {
        let before = self.frames[frame as usize]
            .pins
            .fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "unpin of an unpinned frame");
    }

    fn fix(
        &self,
        page: u64,
        access: Access,
        latch: Latch,
        fresh: bool,
    ) -> Result<(u32, Fixed<'_>)> {
        assert_ne!(page, NO_PAGE);
        for _ in 0..VICTIM_RETRIES_MAX {
            if let Some(hit) = self.try_hit(page, access, &latch) {
                return Ok(hit);
            }
            let claim = std::time::Instant::now();
            let victim = self.claim_victim();
            self.counters.free_frame_stalls.record(claim.elapsed());
            let Some(f) = victim? else {
                std::thread::yield_now();
                continue;
            };
            let Some(mut guard) = self.install(f, page) else {
                continue;
            };
            let frame = &self.frames[f as usize];
            if !fresh {
                let read = std::time::Instant::now();
                let loaded = self.load(page, &mut guard);
                self.counters.read_miss_stalls.record(read.elapsed());
                if let Err(e) = loaded {
                    self.abandon(f, page, guard);
                    return Err(e);
                }
            }
            frame.valid.store(true, Ordering::Release);
            lock(&self.replacer).loaded(f, access);
            let fixed = match latch {
                Latch::Exclusive => Fixed::Exclusive(guard),
                Latch::Shared => {
                    drop(guard);
                    Fixed::Shared(frame.data.read().unwrap_or_else(|p| p.into_inner()))
                }
            };
            return Ok((f, fixed));
        }
        Err(Error::CacheExhausted {
            frames: self.frames.len(),
        })
    }

    /// Makes claimed frame `f` (pinned by us, clean) the home of `page`, not
    /// yet valid and exclusively latched, so readers of `page` wait for its
    /// load. `None` (and `f` unpinned) when someone else holds the frame or
    /// `page` got a frame meanwhile.
    fn install(&self, f: u32, page: u64) -> Option<RwLockWriteGuard<'_, AlignedBuf>> {
        let frame = &self.frames[f as usize];
        let mut table = lock(&self.table);
        if frame.pins.load(Ordering::Acquire) != 1
            || frame.dirty.load(Ordering::Acquire)
            || table.contains_key(&page)
        {
            drop(table);
            self.unpin(f);
            return None;
        }
        let old = frame.page.load(Ordering::Acquire);
        if old != NO_PAGE && table.get(&old) == Some(&f) {
            table.remove(&old);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.replacer).removed(f);
        let guard = frame.data.write().unwrap_or_else(|p| p.into_inner());
        frame.page.store(page, Ordering::Release);
        frame.valid.store(false, Ordering::Release);
        table.insert(page, f);
        drop(table);
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        Some(guard)
    }

    /// Undoes [`install`](Self::install) after a failed load: the page leaves
    /// the table and the frame goes back to the free list.
    fn abandon(&self, f: u32, page: u64, guard: RwLockWriteGuard<'_, AlignedBuf>) {
        lock(&self.table).remove(&page);
        self.frames[f as usize]
            .page
            .store(NO_PAGE, Ordering::Release);
        drop(guard);
        lock(&self.free).push(f);
        self.unpin(f);
    }

    /// Reads those of `pages` not in the pool into it, all in flight at once
    /// (adjacent pages as one request), placed as `access` says; returns how
    /// many it loaded. For readahead: best effort, so a page that cannot get a
    /// frame now, fails to read or fails verification is left out (a reader
    /// that needs it meets the error itself). A batch holds at most a
    /// quarter of the frames while it reads, so concurrent batches never
    /// leave a foreground reader without a frame to claim.
    pub fn read_batch(&self, pages: &[u64], access: Access) -> usize {
        let mut pages: Vec<u64> = pages.iter().copied().filter(|&p| p != NO_PAGE).collect();
        pages.sort_unstable();
        pages.dedup();
        let most = (self.frames() / 4).max(1);
        let mut loading = Vec::with_capacity(pages.len().min(most));
        for page in pages {
            if loading.len() >= most {
                break;
            }
            if self.contains(page) {
                continue;
            }
            let Ok(Some(f)) = self.claim_victim() else {
                break;
            };
            if let Some(guard) = self.install(f, page) {
                loading.push((f, page, guard));
            }
        }
        if loading.is_empty() {
            return 0;
        }
        let pb = self.page_bytes as u64;
        let runs = runs_of(&loading, |(_, page, _)| *page);
        let bytes = loading.len() as u64 * pb;
        let results = {
            let mut ops = Vec::with_capacity(runs.len());
            let mut rest = loading.as_mut_slice();
            for run in &runs {
                let (head, tail) = rest.split_at_mut(run.len());
                rest = tail;
                ops.push(BatchOp::Read {
                    offset: head[0].1 * pb,
                    bufs: head.iter_mut().map(|(_, _, g)| g.io_all_mut()).collect(),
                });
            }
            let _permit = self.sched().admit(IoClass::Read, bytes);
            self.file.run_batch(ops)
        };
        let mut loaded = 0;
        let mut outcome = runs.iter().zip(results).flat_map(|(run, r)| {
            let ok = r.is_ok();
            run.clone().map(move |_| ok)
        });
        for (f, page, guard) in loading {
            let read = outcome.next().unwrap_or(false);
            if !read || page::verify(guard.as_slice(), page, &self.db_id).is_err() {
                self.abandon(f, page, guard);
                continue;
            }
            self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
            let frame = &self.frames[f as usize];
            frame.valid.store(true, Ordering::Release);
            lock(&self.replacer).loaded(f, access);
            drop(guard);
            self.unpin(f);
            loaded += 1;
        }
        loaded
    }

    /// Pins and latches `page` if it is in the pool.
    fn try_hit(&self, page: u64, access: Access, latch: &Latch) -> Option<(u32, Fixed<'_>)> {
        loop {
            let table = lock(&self.table);
            let f = *table.get(&page)?;
            let frame = &self.frames[f as usize];
            frame.pins.fetch_add(1, Ordering::AcqRel);
            drop(table);
            let fixed = self.latch(f, latch);
            if frame.valid.load(Ordering::Acquire) && frame.page.load(Ordering::Acquire) == page {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                lock(&self.replacer).touched(f, access);
                return Some((f, fixed));
            }
            // The load we waited for failed: the entry is gone or replaced.
            drop(fixed);
            self.unpin(f);
        }
    }

    fn latch(&self, f: u32, latch: &Latch) -> Fixed<'_> {
        let data = &self.frames[f as usize].data;
        match latch {
            Latch::Shared => Fixed::Shared(data.read().unwrap_or_else(|p| p.into_inner())),
            Latch::Exclusive => Fixed::Exclusive(data.write().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Finds an unpinned frame (never-used ones first, then the coldest), pins
    /// it and writes it back if dirty. `None` when every candidate is busy now.
    fn claim_victim(&self) -> Result<Option<u32>> {
        if let Some(f) = lock(&self.free).pop() {
            let pinned = self.frames[f as usize].pins.fetch_add(1, Ordering::AcqRel);
            assert_eq!(pinned, 0, "a free frame is unpinned");
            return Ok(Some(f));
        }
        let candidate = {
            let r = lock(&self.replacer);
            let found = r
                .coldest()
                .find(|&f| self.frames[f as usize].pins.load(Ordering::Acquire) == 0);
            found
        };
        let Some(f) = candidate else { return Ok(None) };
        let frame = &self.frames[f as usize];
        if frame
            .pins
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(None);
        }
        let was_dirty = frame.dirty.load(Ordering::Acquire);
        if let Err(e) = self.write_back(f, IoClass::Urgent) {
            self.unpin(f);
            return Err(e);
        }
        if was_dirty && !frame.dirty.load(Ordering::Acquire) {
            self.counters
                .eviction_writes
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(f))
    }

    fn load(&self, page: u64, buf: &mut AlignedBuf) -> Result<()> {
        let offset = page * self.page_bytes as u64;
        let _permit = self.sched().admit(IoClass::Read, self.page_bytes as u64);
        self.file.read_exact_at(buf.io_all_mut(), offset)?;
        self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
        page::verify(buf.as_slice(), page, &self.db_id).map_err(|e| self.corruption(page, &e))?;
        Ok(())
    }

    fn corruption(&self, page: u64, e: &PageError) -> Error {
        Error::Corruption {
            path: self.path.clone(),
            offset: page * self.page_bytes as u64,
            detail: format!("page {page}: {e}"),
        }
    }

    /// Writes frame `f` back if it is dirty: WAL first, then the sealed page.
    fn write_back(&self, f: u32, class: IoClass) -> Result<()> {
        let frame = &self.frames[f as usize];
        let guard = frame.data.write().unwrap_or_else(|p| p.into_inner());
        if !frame.dirty.load(Ordering::Acquire) || frame.held.load(Ordering::Acquire) {
            return Ok(());
        }
        let page_no = frame.page.load(Ordering::Acquire);
        let _permit = self.sched().admit(class, self.page_bytes as u64);
        self.write_held(&mut [(f, page_no, guard)]).map(drop)
    }

    /// Ends a hold: marks the page dirty at `lsn` (its change is now logged,
    /// ending at `lsn`) and lets it be written and evicted again. With `None`,
    /// the change was undone and the page keeps its previous state.
    pub fn release_held(&self, held: Held, lsn: Option<Lsn>) {
        let f = &self.frames[held.frame as usize];
        {
            let guard = f.data.write().unwrap_or_else(|p| p.into_inner());
            let mut page = PageMut {
                pool: self,
                frame: held.frame,
                guard,
            };
            // The guard's drop unpins once: pin for it first.
            f.pins.fetch_add(1, Ordering::AcqRel);
            if let Some(lsn) = lsn {
                page.mark_dirty(lsn);
            }
            f.held.store(false, Ordering::Release);
        }
        self.unpin(held.frame);
    }

    /// Writes back up to `max_pages` dirty pages, oldest first change first;
    /// returns how many were written. Touches only the flush list.
    ///
    /// # Errors
    /// WAL or data-file write errors; the page stays dirty then.
    pub fn flush_oldest(&self, max_pages: usize) -> Result<usize> {
        let batch: Vec<u32> = {
            let list = lock(&self.flush_list);
            list.iter().take(max_pages).map(|&(_, f)| f).collect()
        };
        self.write_frames(&batch, IoClass::Urgent)
    }

    /// Writes back the frames of `batch` (flush-list entries) as `class`;
    /// returns how many were dirty and are clean now. A frame whose latch is
    /// busy waits for a later group, taken when this writer holds no latch.
    fn write_frames(&self, batch: &[u32], class: IoClass) -> Result<usize> {
        self.counters
            .flush_list_visits
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let mut written = 0;
        let mut busy = Vec::new();
        for group in self.groups(batch, class) {
            written += self.write_group(&group, class, Take::Any, Some(&mut busy))?;
        }
        for f in busy {
            written += self.write_group(&[f], class, Take::Any, None)?;
        }
        Ok(written)
    }

    /// `batch` in page order, cut into groups of what `class` may have in
    /// flight at once.
    fn groups(&self, batch: &[u32], class: IoClass) -> Vec<Vec<u32>> {
        let mut order: Vec<(u64, u32)> = batch
            .iter()
            .map(|&f| (self.frames[f as usize].page.load(Ordering::Acquire), f))
            .collect();
        order.sort_unstable();
        let per = (self.sched().batch_bytes(class) / self.page_bytes as u64).max(1) as usize;
        order
            .chunks(per)
            .map(|c| c.iter().map(|&(_, f)| f).collect())
            .collect()
    }

    /// Writes back the dirty frames of `group` (in page order) together:
    /// one scheduler admission, one WAL flush up to the newest page LSN, and
    /// one batch in which adjacent pages are one request. The first frame's
    /// latch is waited for; the others' are only tried (holding a latch while
    /// waiting for another could deadlock with a tree operation), and a busy
    /// one goes to `busy` (or is skipped without it). Returns how many pages
    /// it wrote.
    fn write_group(
        &self,
        group: &[u32],
        class: IoClass,
        take: Take,
        mut busy: Option<&mut Vec<u32>>,
    ) -> Result<usize> {
        let permit = self
            .sched()
            .admit(class, (group.len() * self.page_bytes) as u64);
        let mut held: Vec<(u32, u64, RwLockWriteGuard<'_, AlignedBuf>)> = Vec::new();
        for &f in group {
            let frame = &self.frames[f as usize];
            match take {
                Take::Any => {
                    frame.pins.fetch_add(1, Ordering::AcqRel);
                }
                Take::Unpinned => {
                    if frame
                        .pins
                        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                        .is_err()
                    {
                        continue;
                    }
                }
            }
            let guard = if held.is_empty() {
                frame.data.write().unwrap_or_else(|p| p.into_inner())
            } else {
                match frame.data.try_write() {
                    Ok(g) => g,
                    Err(TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(TryLockError::WouldBlock) => {
                        self.unpin(f);
                        if let Some(b) = busy.as_deref_mut() {
                            b.push(f);
                        }
                        continue;
                    }
                }
            };
            if !frame.dirty.load(Ordering::Acquire) || frame.held.load(Ordering::Acquire) {
                drop(guard);
                self.unpin(f);
                continue;
            }
            // Pinned, so the frame keeps its page.
            held.push((f, frame.page.load(Ordering::Acquire), guard));
        }
        let result = self.write_held(&mut held);
        drop(permit);
        for (f, _, guard) in held {
            drop(guard);
            self.unpin(f);
        }
        result
    }

    /// The I/O of [`write_group`](Self::write_group): WAL rule, seal, write,
    /// and the bookkeeping of the pages that made it.
    fn write_held(
        &self,
        held: &mut [(u32, u64, RwLockWriteGuard<'_, AlignedBuf>)],
    ) -> Result<usize> {
        if held.is_empty() {
            return Ok(0);
        }
        held.sort_unstable_by_key(|h| h.1);
        if let Some(last) = held.last() {
            self.cover(last.1);
        }
        let newest = held
            .iter()
            .map(|(_, _, g)| page::page_lsn(g.as_slice()))
            .max()
            .unwrap_or(Lsn(0));
        if self.log.durable_lsn() < newest {
            self.counters
                .wal_rule_flushes
                .fetch_add(1, Ordering::Relaxed);
            self.log.flush_to(newest)?;
        }
        assert!(
            self.log.durable_lsn() >= newest,
            "WAL rule: log durable past every page LSN"
        );
        for (_, page_no, guard) in held.iter_mut() {
            page::seal_in_place(guard.as_mut_slice(), *page_no, &self.db_id);
        }
        let runs = runs_of(held, |h| h.1);
        let pb = self.page_bytes as u64;
        let ops = runs
            .iter()
            .map(|run| BatchOp::Write {
                offset: held[run.start].1 * pb,
                bufs: held[run.clone()]
                    .iter()
                    .map(|(_, _, g)| g.io_all())
                    .collect(),
            })
            .collect();
        let results = self.file.run_batch(ops);
        let mut written = 0;
        let mut failed = None;
        for (run, r) in runs.into_iter().zip(results) {
            if let Err(e) = r {
                failed.get_or_insert(e);
                continue;
            }
            self.counters.write_requests.fetch_add(1, Ordering::Relaxed);
            for (f, _, _) in &held[run] {
                let frame = &self.frames[*f as usize];
                let rec = frame.rec_lsn.load(Ordering::Acquire);
                lock(&self.flush_list).remove(&(rec, *f));
                frame.dirty.store(false, Ordering::Release);
                self.counters.pages_written.fetch_add(1, Ordering::Relaxed);
                written += 1;
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// The page cleaner's step: writes back the dirty pages, not held by a
    /// commit or pinned, among the `window` coldest frames of the replacement
    /// order (the next victims), adjacent ones together. Returns how many it
    /// wrote.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn clean_cold(&self, window: usize) -> Result<usize> {
        self.clean_cold_as(window, IoClass::Background)
    }

    /// [`clean_cold`](Self::clean_cold) as `class`: recovery, with no
    /// foreground to yield to, cleans as `Urgent` (unpaced, larger batches).
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn clean_cold_as(&self, window: usize, class: IoClass) -> Result<usize> {
        let batch: Vec<u32> = {
            let r = lock(&self.replacer);
            r.coldest()
                .take(window)
                .filter(|&f| {
                    let frame = &self.frames[f as usize];
                    frame.dirty.load(Ordering::Acquire)
                        && !frame.held.load(Ordering::Acquire)
                        && frame.pins.load(Ordering::Acquire) == 0
                })
                .collect()
        };
        let mut written = 0;
        for group in self.groups(&batch, class) {
            written += self.write_group(&group, class, Take::Unpinned, None)?;
        }
        Ok(written)
    }

    /// Dirty pages whose first change since they were last written was
    /// logged by `lsn` (a change's LSN is its commit record's end): what a
    /// checkpoint whose redo starts at `lsn` must write.
    pub fn dirty_through(&self, lsn: Lsn) -> usize {
        lock(&self.flush_list).range(..=(lsn.0, u32::MAX)).count()
    }

    /// Writes back up to `max_pages` of the dirty pages first changed by
    /// `lsn`, oldest first; returns how many it wrote (pages held by a commit
    /// under way are skipped). Touches only the flush list.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn flush_through(&self, lsn: Lsn, max_pages: usize, class: IoClass) -> Result<usize> {
        let batch: Vec<u32> = {
            let list = lock(&self.flush_list);
            list.range(..=(lsn.0, u32::MAX))
                .take(max_pages)
                .map(|&(_, f)| f)
                .collect()
        };
        self.write_frames(&batch, class)
    }

    /// Makes the data file's writes durable.
    ///
    /// # Errors
    /// The sync's error.
    pub fn sync(&self) -> Result<()> {
        let _permit = self.sched().admit(IoClass::Urgent, 0);
        self.file.sync_all()
    }

    /// Writes back every dirty page not held by a commit under way (one walk of
    /// the flush list), then syncs the data file.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest), and the sync's error.
    pub fn flush_all(&self) -> Result<usize> {
        let n = self.flush_oldest(usize::MAX)?;
        self.sync()?;
        Ok(n)
    }

    /// The oldest first-change LSN of any dirty page: recovery must replay from
    /// there (or from the log's end when nothing is dirty).
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        lock(&self.flush_list).iter().next().map(|&(l, _)| Lsn(l))
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        lock(&self.flush_list).len()
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        let c = &self.counters;
        PoolStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            pages_read: c.pages_read.load(Ordering::Relaxed),
            pages_written: c.pages_written.load(Ordering::Relaxed),
            write_requests: c.write_requests.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            dirty_pages: lock(&self.flush_list).len() as u64,
            flush_list_visits: c.flush_list_visits.load(Ordering::Relaxed),
            eviction_writes: c.eviction_writes.load(Ordering::Relaxed),
            wal_rule_flushes: c.wal_rule_flushes.load(Ordering::Relaxed),
            frames: self.frames.len() as u64,
            allocated_pages: self.extended.load(Ordering::Acquire),
            extensions: c.extensions.load(Ordering::Relaxed),
        }
    }

    /// Bytes of page body after the common header.
    pub fn body_bytes(&self) -> usize {
        self.page_bytes - PAGE_HEADER_BYTES
    }
}

/// How a batch writer takes a frame.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// Pinned or not (a flush-list walk: the page must be written).
    Any,
    /// Only if nobody has it pinned (the cleaner: such a page is no victim).
    Unpinned,
}

/// Pages one request carries at most when adjacent pages are coalesced.
pub const COALESCE_PAGES_MAX: usize = 64;

/// Splits `items`, sorted by page number, into runs of consecutive pages of
/// at most [`COALESCE_PAGES_MAX`]: index ranges, in order, covering all.
fn runs_of<T>(items: &[T], page: impl Fn(&T) -> u64) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=items.len() {
        let ends = i == items.len()
            || page(&items[i]) != page(&items[i - 1]) + 1
            || i - start >= COALESCE_PAGES_MAX;
        if ends {
            runs.push(start..i);
            start = i;
        }
    }
    runs
}

enum Fixed<'a> {
    Shared(RwLockReadGuard<'a, AlignedBuf>),
    Exclusive(RwLockWriteGuard<'a, AlignedBuf>),
}
