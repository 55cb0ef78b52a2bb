//! Growing the data file ahead of use, in zero-filled extents, so page
//! writes are overwrites and a checkpoint's sync commits no filesystem
//! metadata. An extension reserves its blocks first (a full filesystem
//! fails there, where nothing is poisoned), then fills zeros in paced steps;
//! pages at or past the allocated end have never been written, and a write
//! there first moves the end past its page (`cover`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::pool::*;
use crate::constants::PAGE_COUNT_MAX;
use crate::error::Result;
use crate::format::PageId;
use crate::io::{AlignedBuf, Fill, Storage};
use crate::sched::{Admitted, IoClass};

/// The smallest extension of the data file, in pages (1 MiB of 8 KiB pages).
const EXTEND_MIN_PAGES: u64 = 128;
/// Bytes of zeros per write (and scheduler admission) of an extension.
const EXTEND_STEP_BYTES: usize = 256 << 10;
/// The rate of an extension's zero writes while the file is still well
/// ahead of use. Unpaced, a 64 MiB fill went out in about 70 ms, and on a
/// disk with a volatile cache the log syncs meanwhile had to flush it: reads
/// and commits stalled together for 30–140 ms.
const EXTEND_PACE_BYTES_PER_SEC: u64 = 32 << 20;
impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
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
                if ahead(end) || end >= PAGE_COUNT_MAX {
                    return Ok(0);
                }
                // Never past the most pages a data file may hold.
                (page_count.max(end).saturating_add(chunk_of(end))).min(PAGE_COUNT_MAX)
            };
            // Reserve the blocks first: a full filesystem fails here, where
            // nothing is poisoned, rather than in a zero write, which would
            // poison the file for a speculative extension.
            {
                self.file
                    .admit(class, 0)
                    .allocate(target * pb, Fill::Reserve)?;
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
            let io = self.file.admit(class, step * pb);
            let _one = lock(&self.extend);
            let at = self.extended.load(Ordering::Acquire);
            if at >= target {
                break;
            }
            if self.extend_target.load(Ordering::Acquire) < target {
                return Ok(0); // called off by a cut of the file (`cut_file`)
            }
            let n = (target - at).min(step);
            self.fill_locked(&io, &zeros, at, n)?;
        }
        self.finish_extension(target, class)?;
        Ok(self.extended.load(Ordering::Acquire).saturating_sub(start))
    }

    /// Ends the extension to `target`: one caller syncs and counts it.
    fn finish_extension(&self, target: u64, class: IoClass) -> Result<()> {
        let ended =
            self.extend_target
                .compare_exchange(target, 0, Ordering::AcqRel, Ordering::Acquire);
        if ended.is_ok() {
            self.file.admit(class, 0).sync_all()?;
            self.counters.extensions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether a paced zero write of `bytes` may go now (and if so, books
    /// the time it takes at the pace).
    pub(super) fn extend_paced(&self, bytes: u64) -> bool {
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
    pub(super) fn zeros(&self, pages: u64) -> Result<AlignedBuf> {
        let unit = self.file.alignment().io_unit_bytes().max(4096);
        AlignedBuf::new(pages as usize * self.page_bytes, unit)
    }

    /// Zero-fills `n` pages from `at`, the allocated end (none of them
    /// written yet), and moves the end past them. Under the extension lock.
    pub(super) fn fill_locked(
        &self,
        io: &Admitted<'_, S::File>,
        zeros: &AlignedBuf,
        at: u64,
        n: u64,
    ) -> Result<()> {
        let pb = self.page_bytes as u64;
        debug_assert_eq!(at, self.extended.load(Ordering::Acquire));
        io.write_all_at(zeros.io(0..(n * pb) as usize)?, at * pb)?;
        self.extended.store(at + n, Ordering::Release);
        Ok(())
    }

    /// Cuts the data file to `pages` pages when it is longer, as `class`;
    /// returns the bytes cut. The caller guarantees that no page at or past
    /// `pages` is in use or will be written but as a page allocated
    /// afterwards (which extends the file again, as growth does). The cut
    /// is durable at the file's next sync; lost in a crash, it leaves the
    /// file longer than its pages, which is harmless.
    ///
    /// # Errors
    /// The cut's error (the file is poisoned then).
    pub fn cut_file(&self, pages: u64, class: IoClass) -> Result<u64> {
        assert!(
            pages >= crate::constants::PAGE_COUNT_MIN,
            "a file keeps its head"
        );
        let pb = self.page_bytes as u64;
        let _one = lock(&self.extend);
        let len = self.file.len()?;
        if len <= pages * pb {
            return Ok(0);
        }
        let io = self.file.admit(class, 0);
        io.set_len(pages * pb)?;
        // An extension under way fills again from here, past every page
        // in use, and leaves the sync to a later one.
        self.extended.store(pages, Ordering::Release);
        self.extend_target.store(0, Ordering::Release);
        Ok(len - pages * pb)
    }

    /// With growth ahead of use on, moves the allocated end past page
    /// `page` before it is written, so no extension ever zeroes it: the page
    /// then extends the file itself, as without growth ahead. No I/O, so it
    /// never fails and never waits on the scheduler (a writer holding a
    /// Background permit can wait on the extension lock).
    pub(super) fn cover(&self, page: PageId) {
        if page.get() < self.extended.load(Ordering::Acquire)
            || self.extend_pages.load(Ordering::Acquire) == 0
        {
            return;
        }
        let _one = lock(&self.extend);
        self.extended.fetch_max(page.next().get(), Ordering::AcqRel);
    }
}
