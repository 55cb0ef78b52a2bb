//! Writing dirty pages back: the flush list by first-change LSN, the WAL
//! rule before every write, groups of adjacent pages written as one
//! request, the cleaner's pass over the cold end, and the checkpoint's
//! writes through an LSN.

use std::sync::atomic::Ordering;
use std::sync::{RwLockWriteGuard, TryLockError};

use super::page::*;
use super::pool::*;
use crate::error::Result;
use crate::format::page::{self};
use crate::format::{FrameIndex, PageId};
use crate::io::{AlignedBuf, BatchOp, Storage};
use crate::lsn::Lsn;
use crate::sched::{Admitted, IoClass};

impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
    /// Writes frame `f` back if it is dirty: WAL first, then the sealed page.
    pub(super) fn write_back(
        &self,
        f: FrameIndex,
        class: IoClass,
        cause: WriteCause,
    ) -> Result<()> {
        let frame = &self.frames[f.index()];
        let guard = frame.data.write().unwrap_or_else(|p| p.into_inner());
        if !frame.dirty.load(Ordering::Acquire) || frame.held.load(Ordering::Acquire) {
            return Ok(());
        }
        let page_no = frame.page();
        assert_ne!(page_no, NO_PAGE, "a dirty frame holds a page");
        let io = self.file.admit(class, self.page_bytes as u64);
        self.write_held(&io, &mut [(f, page_no, guard)], cause)
            .map(drop)
    }

    /// Writes `page` back now if it is cached and dirty (WAL first, as
    /// always); returns whether it wrote it.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn write_now(&self, page: PageId, class: IoClass, cause: WriteCause) -> Result<bool> {
        let f = {
            let shard = self.table.shard(page);
            let Some(&f) = shard.get(&page) else {
                return Ok(false);
            };
            // Pinned, the frame keeps its page until we let go.
            self.frames[f.index()].pins.fetch_add(1, Ordering::AcqRel);
            f
        };
        let frame = &self.frames[f.index()];
        // A pin keeps a loaded frame's page, but a load under way may fail
        // and give its frame up (`abandon`) while its readers hold pins.
        // Such a frame was never dirty: nothing to write.
        if frame.page() != page {
            assert!(
                !frame.dirty.load(Ordering::Acquire),
                "a frame given up by its load was never dirty"
            );
            self.unpin(f);
            return Ok(false);
        }
        let was_dirty = frame.dirty.load(Ordering::Acquire);
        let written = self.write_back(f, class, cause);
        self.unpin(f);
        written.map(|()| was_dirty && !frame.dirty.load(Ordering::Acquire))
    }

    /// Ends a hold: marks the page dirty at `lsn` (its change is now logged,
    /// ending at `lsn`) and lets it be written and evicted again. With `None`,
    /// the change was undone and the page keeps its previous state.
    pub fn release_held(&self, held: Held, lsn: Option<Lsn>) {
        let f = &self.frames[held.frame.index()];
        assert!(
            f.held.load(Ordering::Acquire),
            "only a held page is released"
        );
        assert!(
            f.pins.load(Ordering::Acquire) > 0,
            "a held page stays pinned"
        );
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
    /// returns how many were written (counted as [`WriteCause::Shutdown`]: the
    /// write-everything path). Touches only the flush list.
    ///
    /// # Errors
    /// WAL or data-file write errors; the page stays dirty then.
    #[cfg(test)]
    pub fn flush_oldest(&self, max_pages: usize) -> Result<usize> {
        let batch: Vec<FrameIndex> = {
            let list = lock(&self.flush_list);
            list.iter().take(max_pages).map(|&(_, f)| f).collect()
        };
        self.write_frames(&batch, IoClass::Urgent, WriteCause::Shutdown)
    }

    /// Writes back the frames of `batch` (flush-list entries) as `class`;
    /// returns how many were dirty and are clean now. A frame whose latch is
    /// busy waits for a later group, taken when this writer holds no latch.
    pub(super) fn write_frames(
        &self,
        batch: &[FrameIndex],
        class: IoClass,
        cause: WriteCause,
    ) -> Result<usize> {
        self.counters
            .flush_list_visits
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let mut written = 0;
        let mut busy = Vec::new();
        debug_assert!(
            {
                let mut seen = std::collections::HashSet::new();
                batch.iter().all(|f| seen.insert(*f))
            },
            "a batch names each frame once"
        );
        for group in self.groups(batch, class) {
            written += self.write_group(&group, class, cause, Take::Any, Some(&mut busy))?;
        }
        for f in busy {
            written += self.write_group(&[f], class, cause, Take::Any, None)?;
        }
        assert!(
            written <= batch.len(),
            "a walk writes each frame of its batch at most once"
        );
        Ok(written)
    }

    /// `batch` in page order, cut into groups of what `class` may have in
    /// flight at once.
    pub(super) fn groups(&self, batch: &[FrameIndex], class: IoClass) -> Vec<Vec<FrameIndex>> {
        let mut order: Vec<(PageId, FrameIndex)> = batch
            .iter()
            .map(|&f| (self.frames[f.index()].page(), f))
            .collect();
        order.sort_unstable();
        let per = (self.sched().batch_bytes(class) / self.page_bytes as u64).max(1) as usize;
        let groups: Vec<Vec<FrameIndex>> = order
            .chunks(per)
            .map(|c| c.iter().map(|&(_, f)| f).collect())
            .collect();
        assert_eq!(
            groups.iter().map(Vec::len).sum::<usize>(),
            batch.len(),
            "the groups cover the batch"
        );
        groups
    }

    /// Writes back the dirty frames of `group` (in page order) together:
    /// one scheduler admission, one WAL flush up to the newest page LSN, and
    /// one batch in which adjacent pages are one request. The first frame's
    /// latch is waited for; the others' are only tried (holding a latch while
    /// waiting for another could deadlock with a tree operation), and a busy
    /// one goes to `busy` (or is skipped without it). Returns how many pages
    /// it wrote.
    pub(super) fn write_group(
        &self,
        group: &[FrameIndex],
        class: IoClass,
        cause: WriteCause,
        take: Take,
        mut busy: Option<&mut Vec<FrameIndex>>,
    ) -> Result<usize> {
        let io = self
            .file
            .admit(class, (group.len() * self.page_bytes) as u64);
        let mut held: Vec<(FrameIndex, PageId, RwLockWriteGuard<'_, AlignedBuf>)> = Vec::new();
        for &f in group {
            let frame = &self.frames[f.index()];
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
            held.push((f, frame.page(), guard));
        }
        assert!(
            held.len() <= group.len(),
            "a group writes only its own frames"
        );
        let result = self.write_held(&io, &mut held, cause);
        drop(io);
        for (f, _, guard) in held {
            drop(guard);
            self.unpin(f);
        }
        result
    }

    /// The I/O of [`write_group`](Self::write_group): WAL rule, seal, write,
    /// and the bookkeeping of the pages that made it.
    pub(super) fn write_held(
        &self,
        io: &Admitted<'_, S::File>,
        held: &mut [(FrameIndex, PageId, RwLockWriteGuard<'_, AlignedBuf>)],
        cause: WriteCause,
    ) -> Result<usize> {
        if held.is_empty() {
            return Ok(0);
        }
        held.sort_unstable_by_key(|h| h.1);
        assert!(
            held.windows(2).all(|w| w[0].1 < w[1].1),
            "a write group holds each page once"
        );
        if let Some(last) = held.last() {
            self.cover(last.1);
        }
        self.wal_rule(held)?;
        for (_, page_no, guard) in held.iter_mut() {
            page::seal_in_place(guard.as_mut_slice(), *page_no, &self.db_id);
        }
        let runs = runs_of(held, |h| h.1);
        let pb = self.page_bytes as u64;
        let ops = runs
            .iter()
            .map(|run| BatchOp::Write {
                offset: held[run.start].1.offset(pb),
                bufs: held[run.clone()]
                    .iter()
                    .map(|(_, _, g)| g.io_all())
                    .collect(),
            })
            .collect();
        let results = io.run_batch(ops);
        let mut written = 0;
        let mut failed = None;
        for (run, r) in runs.into_iter().zip(results) {
            if let Err(e) = r {
                failed.get_or_insert(e);
                continue;
            }
            self.counters.write_requests.fetch_add(1, Ordering::Relaxed);
            for (f, _, _) in &held[run] {
                let frame = &self.frames[f.index()];
                let rec = Lsn::new(frame.rec_lsn.load(Ordering::Acquire));
                let listed = lock(&self.flush_list).remove(&(rec, *f));
                assert!(
                    listed,
                    "a dirty frame is on the flush list under its first change"
                );
                frame.dirty.store(false, Ordering::Release);
                self.counters.writes_by[cause as usize].fetch_add(1, Ordering::Relaxed);
                written += 1;
            }
        }
        assert!(
            written <= held.len(),
            "each held page is written at most once"
        );
        match failed {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// The WAL rule for `held`: the log is made durable past the newest page
    /// LSN before any of them is written (DESIGN.md invariant 1).
    fn wal_rule(
        &self,
        held: &[(FrameIndex, PageId, RwLockWriteGuard<'_, AlignedBuf>)],
    ) -> Result<()> {
        let newest = held
            .iter()
            .map(|(_, _, g)| page::page_lsn(g.as_slice()))
            .max()
            .unwrap_or(Lsn::new(0));
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
        Ok(())
    }

    /// The cleaner's pass: keeps clean frames ready at the cold end, so a
    /// miss never has to write a dirty victim itself. It writes only when
    /// the pool runs short (free frames plus clean frames among the
    /// `window` coldest are fewer than `window`), and then only dirty pages
    /// among the coldest that went unused since its previous pass, adjacent
    /// ones together: a page touched by every commit is the worst one to
    /// write, since it is dirty again at once. Returns how many it wrote.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn clean_cold(&self, window: usize) -> Result<usize> {
        let free = lock(&self.free).len();
        let batch: Vec<FrameIndex> = {
            let mut r = lock(&self.replacer);
            let pass = r.begin_pass();
            self.pass.store(pass, Ordering::Release);
            if free >= window {
                return Ok(0);
            }
            let coldest: Vec<FrameIndex> = r.coldest().take(window).collect();
            let clean = coldest
                .iter()
                .filter(|&&f| !self.frames[f.index()].dirty.load(Ordering::Acquire))
                .count();
            if free + clean >= window {
                return Ok(0);
            }
            coldest
                .into_iter()
                .filter(|&f| r.unused_since_last_pass(f, pass) && self.writable_now(f))
                .collect()
        };
        self.write_unpinned(&batch, window, IoClass::Background, WriteCause::Cleaner)
    }

    /// Writes the dirty frames among the `window` coldest, used or not:
    /// recovery, which runs no cleaner passes, makes room this way (as
    /// `Urgent`: unpaced, larger batches, with no foreground to yield to).
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn clean_coldest(&self, window: usize, class: IoClass, cause: WriteCause) -> Result<usize> {
        let batch: Vec<FrameIndex> = {
            let r = lock(&self.replacer);
            r.coldest()
                .take(window)
                .filter(|&f| self.writable_now(f))
                .collect()
        };
        self.write_unpinned(&batch, window, class, cause)
    }

    /// Whether frame `f` is dirty and nobody holds or pins it.
    fn writable_now(&self, f: FrameIndex) -> bool {
        let frame = &self.frames[f.index()];
        frame.dirty.load(Ordering::Acquire)
            && !frame.held.load(Ordering::Acquire)
            && frame.pins.load(Ordering::Acquire) == 0
    }

    fn write_unpinned(
        &self,
        batch: &[FrameIndex],
        window: usize,
        class: IoClass,
        cause: WriteCause,
    ) -> Result<usize> {
        assert!(
            batch.len() <= window,
            "the cleaner looks at most at its window"
        );
        let mut written = 0;
        for group in self.groups(batch, class) {
            written += self.write_group(&group, class, cause, Take::Unpinned, None)?;
        }
        assert!(written <= batch.len(), "the cleaner writes only its batch");
        Ok(written)
    }

    /// Dirty pages whose first change since they were last written was
    /// logged by `lsn` (a change's LSN is its commit record's end): what a
    /// checkpoint whose redo starts at `lsn` must write.
    pub fn dirty_through(&self, lsn: Lsn) -> usize {
        lock(&self.flush_list)
            .range(..=(lsn, FrameIndex::new(u32::MAX)))
            .count()
    }

    /// Writes back up to `max_pages` of the dirty pages first changed by
    /// `lsn`, oldest first; returns how many it wrote. Pages held by a
    /// commit under way are passed over, so the pages behind them go out
    /// meanwhile. Touches only the flush list.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest).
    pub fn flush_through(
        &self,
        lsn: Lsn,
        max_pages: usize,
        class: IoClass,
        cause: WriteCause,
    ) -> Result<usize> {
        let batch: Vec<FrameIndex> = {
            let list = lock(&self.flush_list);
            list.range(..=(lsn, FrameIndex::new(u32::MAX)))
                .map(|&(_, f)| f)
                .filter(|f| !self.frames[f.index()].held.load(Ordering::Acquire))
                .take(max_pages)
                .collect()
        };
        assert!(batch.len() <= max_pages, "a step writes at most its pages");
        self.write_frames(&batch, class, cause)
    }

    /// Makes the data file's writes durable.
    ///
    /// # Errors
    /// The sync's error.
    pub fn sync(&self) -> Result<()> {
        self.file.admit(IoClass::Urgent, 0).sync_all()
    }

    /// Writes back every dirty page not held by a commit under way (one walk of
    /// the flush list), then syncs the data file.
    ///
    /// # Errors
    /// As [`flush_oldest`](Self::flush_oldest), and the sync's error.
    #[cfg(test)]
    pub fn flush_all(&self) -> Result<usize> {
        let n = self.flush_oldest(usize::MAX)?;
        self.sync()?;
        Ok(n)
    }

    /// The oldest first-change LSN of any dirty page: recovery must replay from
    /// there (or from the log's end when nothing is dirty).
    pub fn oldest_dirty_lsn(&self) -> Option<Lsn> {
        lock(&self.flush_list).iter().next().map(|&(l, _)| l)
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        lock(&self.flush_list).len()
    }
}

/// How a batch writer takes a frame.
#[derive(Debug, Clone, Copy)]
pub(super) enum Take {
    /// Pinned or not (a flush-list walk: the page must be written).
    Any,
    /// Only if nobody has it pinned (the cleaner: such a page is no victim).
    Unpinned,
}
