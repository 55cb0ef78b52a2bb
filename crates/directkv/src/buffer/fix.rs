//! Finding a page and pinning it: the page table, frame latches, victims
//! for a miss, and the verified load of a page from the data file.
//!
//! A frame is, for a page: *free* (on the free list, in no table entry);
//! *loading* (in the table, exclusively latched, not valid: a second reader
//! waits on the latch); *valid* (clean or dirty, pinned by every handle);
//! *held* (changed by a commit not yet logged: never written or evicted).
//! `fix` moves a page in (free or victim → loading → valid), `abandon` takes
//! a failed load out again (loading → free), a victim leaves the table only
//! once clean and unpinned.

use std::sync::atomic::Ordering;
use std::sync::RwLockWriteGuard;

use super::page::*;
use super::pool::*;
use super::replacer::Access;
use crate::error::{Error, Result};
use crate::format::page::{self, PageError};
use crate::format::{FrameIndex, PageId};
use crate::io::{AlignedBuf, Storage};
use crate::lsn::Lsn;
use crate::sched::IoClass;

impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
    /// Pins and share-latches `page`, reading it if needed.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the page fails verification; I/O errors.
    pub fn read(&self, page: PageId, access: Access) -> Result<PageRef<'_, S, L>> {
        let (frame, latch) = self.fix(page, access, Latch::Shared, false)?;
        self.assert_fixed(frame, page);
        match latch {
            Fixed::Shared(guard) => Ok(PageRef {
                pool: self,
                frame,
                guard,
            }),
            Fixed::Exclusive(_) => unreachable!("asked for a shared latch"),
        }
    }

    /// Pins and share-latches `page` if it is in the pool; never reads.
    pub fn try_read(&self, page: PageId, access: Access) -> Option<PageRef<'_, S, L>> {
        match self.try_hit(page, access, &Latch::Shared)? {
            (frame, Fixed::Shared(guard)) => Some(PageRef {
                pool: self,
                frame,
                guard,
            }),
            (_, Fixed::Exclusive(_)) => unreachable!("asked for a shared latch"),
        }
    }

    /// Pins and exclusively latches `page` if it is in the pool; never reads.
    pub fn try_write(&self, page: PageId) -> Option<PageMut<'_, S, L>> {
        match self.try_hit(page, Access::Normal, &Latch::Exclusive)? {
            (frame, Fixed::Exclusive(guard)) => {
                self.assert_fixed(frame, page);
                Some(PageMut {
                    pool: self,
                    frame,
                    guard,
                })
            }
            (_, Fixed::Shared(_)) => unreachable!("asked for an exclusive latch"),
        }
    }

    /// Pins and exclusively latches `page`, reading it if needed.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write(&self, page: PageId) -> Result<PageMut<'_, S, L>> {
        self.fix_mut(page, false)
    }

    /// Pins and exclusively latches `page` as a new, zeroed page (not read). The
    /// caller initialises it and marks it dirty.
    ///
    /// # Errors
    /// I/O errors of evicting a dirty page to make room.
    pub fn create(&self, page: PageId) -> Result<PageMut<'_, S, L>> {
        let mut p = self.fix_mut(page, true)?;
        p.data_mut().fill(0);
        Ok(p)
    }

    pub(super) fn fix_mut(&self, page: PageId, fresh: bool) -> Result<PageMut<'_, S, L>> {
        let (frame, latch) = self.fix(page, Access::Normal, Latch::Exclusive, fresh)?;
        self.assert_fixed(frame, page);
        match latch {
            Fixed::Exclusive(guard) => Ok(PageMut {
                pool: self,
                frame,
                guard,
            }),
            Fixed::Shared(_) => unreachable!("asked for an exclusive latch"),
        }
    }

    /// A frame handed out for `page` is pinned and holds `page`.
    fn assert_fixed(&self, frame: FrameIndex, page: PageId) {
        let f = &self.frames[frame.index()];
        assert!(
            f.pins.load(Ordering::Acquire) > 0,
            "a handed-out frame is pinned"
        );
        assert_eq!(f.page(), page, "the frame holds the page asked for");
    }

    pub(super) fn unpin(&self, frame: FrameIndex) {
        assert!(frame.index() < self.frames.len(), "a frame of this pool");
        let before = self.frames[frame.index()]
            .pins
            .fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "unpin of an unpinned frame");
    }

    pub(super) fn fix(
        &self,
        page: PageId,
        access: Access,
        latch: Latch,
        fresh: bool,
    ) -> Result<(FrameIndex, Fixed<'_>)> {
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
            let frame = &self.frames[f.index()];
            if !fresh {
                let read = std::time::Instant::now();
                // A panic in the load (a bug below it) gives the frame up
                // too: left in the table, never valid and pinned, it would
                // keep every later reader of the page looking it up forever.
                let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.load(page, &mut guard)
                }));
                self.counters.read_miss_stalls.record(read.elapsed());
                match loaded {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        self.abandon(f, page, guard);
                        return Err(e);
                    }
                    Err(panic) => {
                        self.abandon(f, page, guard);
                        std::panic::resume_unwind(panic);
                    }
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
    pub(super) fn install(
        &self,
        f: FrameIndex,
        page: PageId,
    ) -> Option<RwLockWriteGuard<'_, AlignedBuf>> {
        let frame = &self.frames[f.index()];
        assert!(
            frame.pins.load(Ordering::Acquire) >= 1,
            "the claimer pins the frame"
        );
        // The old page's shard too: its hits pin the frame under that lock,
        // so none can pin it between the check and the eviction.
        let old = frame.page();
        let mut table = if old == NO_PAGE {
            self.table.pair(page, page)
        } else {
            self.table.pair(old, page)
        };
        if frame.pins.load(Ordering::Acquire) != 1
            || frame.dirty.load(Ordering::Acquire)
            || table.contains(page)
        {
            drop(table);
            self.refuse_claim(f);
            return None;
        }
        assert_eq!(
            frame.page(),
            old,
            "only the frame's claimer changes its page"
        );
        if old != NO_PAGE && table.get(old) == Some(f) {
            table.remove(old);
            self.counters.evictions.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut r = lock(&self.replacer);
            r.removed(f);
            frame.promoted.store(0, Ordering::Release);
        }
        let guard = frame.data.write().unwrap_or_else(|p| p.into_inner());
        frame.set_page(page);
        frame.valid.store(false, Ordering::Release);
        let before = table.insert(page, f);
        assert!(before.is_none(), "a page is in at most one frame");
        drop(table);
        self.counters.misses.fetch_add(1, Ordering::Relaxed);
        Some(guard)
    }

    /// Lets go of claimed frame `f` that [`install`](Self::install) refused
    /// (someone else pinned it, or the page got a frame meanwhile). A frame
    /// without a page (never used, or given up by a failed load) is in no
    /// replacer list: it goes to the cold end, first to be claimed again, so
    /// it is never lost to the pool.
    fn refuse_claim(&self, f: FrameIndex) {
        let frame = &self.frames[f.index()];
        assert!(
            frame.pins.load(Ordering::Acquire) > 0,
            "a claimed frame is pinned"
        );
        if frame.page() == NO_PAGE {
            lock(&self.replacer).loaded(f, Access::Scan);
        }
        self.unpin(f);
    }

    /// Undoes [`install`](Self::install) after a failed load: the page leaves
    /// the table and the frame, without a page, goes to the cold end of the
    /// replacement order. Not to the free list: readers of the page that
    /// pinned the frame while it loaded may still hold pins, and a frame on
    /// the free list must be unpinned; a claim from the replacer waits for
    /// them.
    pub(super) fn abandon(
        &self,
        f: FrameIndex,
        page: PageId,
        guard: RwLockWriteGuard<'_, AlignedBuf>,
    ) {
        let removed = self.table.remove(page);
        assert_eq!(removed, Some(f), "the failed load's frame was the page's");
        assert!(
            !self.frames[f.index()].valid.load(Ordering::Acquire),
            "a failed load is invalid"
        );
        self.frames[f.index()].set_page(NO_PAGE);
        lock(&self.replacer).loaded(f, Access::Scan);
        drop(guard);
        self.unpin(f);
    }

    /// Pins and latches `page` if it is in the pool.
    pub(super) fn try_hit(
        &self,
        page: PageId,
        access: Access,
        latch: &Latch,
    ) -> Option<(FrameIndex, Fixed<'_>)> {
        loop {
            let shard = self.table.shard(page);
            let f = *shard.get(&page)?;
            let frame = &self.frames[f.index()];
            frame.pins.fetch_add(1, Ordering::AcqRel);
            drop(shard);
            let fixed = self.latch(f, latch);
            if frame.valid.load(Ordering::Acquire) && frame.page() == page {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                self.touch(f, access);
                return Some((f, fixed));
            }
            // The load we waited for failed: the entry is gone or replaced.
            drop(fixed);
            self.unpin(f);
        }
    }

    /// Records a hit of pinned frame `f` in the replacement order, unless
    /// a hit already promoted it into protected during the cleaner's
    /// current pass: then the replacer's lock, which every hit would
    /// otherwise take, is skipped. The frame is then still stamped with
    /// this pass (its promotion did it), so the cleaner sees it used; it
    /// only keeps its place in protected instead of moving to the head,
    /// until the pass ends or it is pushed out (within a pass protected is
    /// first in, first out; a pushed-out frame's next hit promotes it
    /// again). A scan's hit never promotes, so it never skips.
    ///
    /// The mark is read without the lock: a stale read skips one move or
    /// takes the lock once for nothing, and never changes the lists.
    pub(super) fn touch(&self, f: FrameIndex, access: Access) {
        let frame = &self.frames[f.index()];
        let mark = self.pass.load(Ordering::Acquire) + 1;
        if access == Access::Normal && frame.promoted.load(Ordering::Acquire) == mark {
            return;
        }
        let mut r = lock(&self.replacer);
        let demoted = r.touched(f, access);
        if let Some(d) = demoted {
            self.frames[d.index()].promoted.store(0, Ordering::Release);
        }
        if access == Access::Normal && r.is_protected(f) {
            frame.promoted.store(r.pass() + 1, Ordering::Release);
        }
        assert!(
            frame.promoted.load(Ordering::Acquire) != r.pass() + 1 || r.is_protected(f),
            "a frame marked for this pass is in protected"
        );
    }

    pub(super) fn latch(&self, f: FrameIndex, latch: &Latch) -> Fixed<'_> {
        let data = &self.frames[f.index()].data;
        match latch {
            Latch::Shared => Fixed::Shared(data.read().unwrap_or_else(|p| p.into_inner())),
            Latch::Exclusive => Fixed::Exclusive(data.write().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Finds an unpinned frame (never-used ones first, then the coldest), pins
    /// it and writes it back if dirty. `None` when every candidate is busy now.
    pub(super) fn claim_victim(&self) -> Result<Option<FrameIndex>> {
        if let Some(f) = lock(&self.free).pop() {
            let pinned = self.frames[f.index()].pins.fetch_add(1, Ordering::AcqRel);
            assert_eq!(pinned, 0, "a free frame is unpinned");
            return Ok(Some(f));
        }
        let candidate = {
            let r = lock(&self.replacer);
            let found = r
                .coldest()
                .find(|&f| self.frames[f.index()].pins.load(Ordering::Acquire) == 0);
            found
        };
        let Some(f) = candidate else { return Ok(None) };
        assert!(
            f.index() < self.frames.len(),
            "the replacer knows only this pool's frames"
        );
        let frame = &self.frames[f.index()];
        if frame
            .pins
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(None);
        }
        let was_dirty = frame.dirty.load(Ordering::Acquire);
        if let Err(e) = self.write_back(f, IoClass::Urgent, WriteCause::Eviction) {
            self.unpin(f);
            return Err(e);
        }
        assert!(
            frame.pins.load(Ordering::Acquire) >= 1,
            "the victim stays pinned by us"
        );
        if was_dirty && !frame.dirty.load(Ordering::Acquire) {
            self.counters
                .eviction_writes
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(f))
    }

    pub(super) fn load(&self, page: PageId, buf: &mut AlignedBuf) -> Result<()> {
        assert_eq!(buf.len(), self.page_bytes, "a frame is one page");
        let offset = self.offset_of(page);
        self.file
            .read_exact_at(IoClass::Read, buf.io_all_mut(), offset)?;
        self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
        page::verify(buf.as_slice(), page, &self.db_id).map_err(|e| self.corruption(page, &e))?;
        self.check_layout(page, buf.as_slice())?;
        self.check_read_lsn(page, buf.as_slice())
    }

    /// Notes the LSN of a page just read, and refuses it when it is newer
    /// than the durable log (see [`LogFlusher::replaying`]).
    pub(super) fn check_read_lsn(&self, page: PageId, data: &[u8]) -> Result<()> {
        let lsn = page::page_lsn(data);
        if self
            .counters
            .newest_read
            .fetch_max(lsn.get(), Ordering::AcqRel)
            < lsn.get()
        {
            self.counters
                .newest_read_page
                .store(page.get(), Ordering::Relaxed);
        }
        if self.log.replaying() {
            return Ok(());
        }
        self.within_log(page, lsn, self.log.durable_lsn())
    }

    /// Checks that no page read so far (replay's reads included) is newer
    /// than `end`, the end of the log recovery found.
    ///
    /// # Errors
    /// [`Error::Corruption`] naming the newest page read, when it is.
    pub fn check_reads_within(&self, end: Lsn) -> Result<()> {
        let newest = Lsn::new(self.counters.newest_read.load(Ordering::Acquire));
        let page = PageId::new(self.counters.newest_read_page.load(Ordering::Relaxed));
        self.within_log(page, newest, end)
    }

    /// Runs the pool's page check (if it has one) on `page`, read from
    /// disk with a right checksum.
    ///
    /// # Errors
    /// [`Error::Corruption`] saying what the check found wrong.
    pub(super) fn check_layout(&self, page: PageId, data: &[u8]) -> Result<()> {
        let Some(check) = self.page_check else {
            return Ok(());
        };
        check(data).map_err(|detail| self.page_corruption(page, detail))
    }

    /// Runs the pool's page check on `page` if the pool holds it: for a
    /// page changed in memory from data read elsewhere (a logged image or
    /// change replayed at open), which no read of the data file checked.
    ///
    /// # Errors
    /// [`Error::Corruption`] saying what the check found wrong.
    pub fn check_cached(&self, page: PageId) -> Result<()> {
        match self.try_read(page, Access::Scan) {
            Some(p) => self.check_layout(page, p.data()),
            None => Ok(()),
        }
    }

    pub(super) fn corruption(&self, page: PageId, e: &PageError) -> Error {
        self.page_corruption(page, e.to_string())
    }

    /// The error for `page` of the data file, whose bytes are not what
    /// `detail` says they must be: it names the file by its absolute path,
    /// the page's byte offset in it, and the page.
    pub fn page_corruption(&self, page: PageId, detail: impl Into<String>) -> Error {
        let detail = detail.into();
        assert!(!detail.is_empty(), "a corruption says what is wrong");
        Error::Corruption {
            path: self.path.clone(),
            offset: self.offset_of(page),
            page: Some(page.get()),
            detail,
        }
    }

    fn within_log(&self, page: PageId, lsn: Lsn, end: Lsn) -> Result<()> {
        if lsn <= end {
            return Ok(());
        }
        Err(self.page_corruption(
            page,
            format!(
                "its LSN {lsn} is past the end of the durable log ({end}): the log that \
                 wrote it is missing or was replaced by an older copy"
            ),
        ))
    }
}

#[cfg(test)]
mod tests;
