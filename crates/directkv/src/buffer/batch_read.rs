//! Reading many pages at once: readahead and recovery's lookahead claim
//! frames for a batch (at most a quarter of the pool) and read them as one
//! asynchronous batch, adjacent pages as one request.

use std::sync::atomic::Ordering;
use std::sync::RwLockWriteGuard;

use super::pool::*;
use super::replacer::Access;
use crate::format::page::{self};
use crate::format::{FrameIndex, PageId};
use crate::io::{AlignedBuf, BatchOp, Storage};
use crate::sched::IoClass;

impl<S: Storage, L: LogFlusher> BufferPool<S, L> {
    /// Reads those of `pages` not in the pool into it, all in flight at once
    /// (adjacent pages as one request), placed as `access` says; returns how
    /// many it loaded. For readahead: best effort, so a page that cannot get a
    /// frame now, fails to read or fails verification is left out (a reader
    /// that needs it meets the error itself). A batch holds at most a
    /// quarter of the frames while it reads, so concurrent batches never
    /// leave a foreground reader without a frame to claim.
    pub fn read_batch(&self, pages: &[PageId], access: Access) -> usize {
        self.read_batch_as(pages, access, IoClass::Read)
    }

    /// As [`read_batch`](Self::read_batch), the reads admitted as `class`
    /// (maintenance reads below the foreground's: `IoClass::Background`).
    pub fn read_batch_as(&self, pages: &[PageId], access: Access, class: IoClass) -> usize {
        let mut pages: Vec<PageId> = pages.iter().copied().filter(|&p| p != NO_PAGE).collect();
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
        // A panic inside the batch is not caught: requests may still be in
        // flight into these frames, which must then never be reused.
        let results = {
            let mut ops = Vec::with_capacity(runs.len());
            let mut rest = loading.as_mut_slice();
            for run in &runs {
                let (head, tail) = rest.split_at_mut(run.len());
                rest = tail;
                ops.push(BatchOp::Read {
                    offset: head[0].1.offset(pb),
                    bufs: head.iter_mut().map(|(_, _, g)| g.io_all_mut()).collect(),
                });
            }
            assert_eq!(ops.iter().map(|op| op.len() as u64).sum::<u64>(), bytes);
            self.file.run_batch(class, ops)
        };
        let outcome = runs.iter().zip(results).flat_map(|(run, r)| {
            let ok = r.is_ok();
            run.clone().map(move |_| ok)
        });
        self.settle_batch(loading, outcome, access)
    }

    /// Makes valid each frame of `loading` whose read succeeded (`read`, in
    /// the same order) and whose page passes its checks; gives the others
    /// up. Returns how many it made valid.
    fn settle_batch(
        &self,
        loading: Vec<(FrameIndex, PageId, RwLockWriteGuard<'_, AlignedBuf>)>,
        mut read: impl Iterator<Item = bool>,
        access: Access,
    ) -> usize {
        let mut loaded = 0;
        // Every request has ended: a panic in a page's checks (a bug below
        // them) gives up this frame and the rest (see `fix`), then goes on.
        let mut loading = loading.into_iter();
        while let Some((f, page, guard)) = loading.next() {
            let read = read.next().unwrap_or(false);
            let good = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                read && page::verify(guard.as_slice(), page, &self.db_id).is_ok()
                    && self.check_layout(page, guard.as_slice()).is_ok()
                    && self.check_read_lsn(page, guard.as_slice()).is_ok()
            }));
            let good = match good {
                Ok(good) => good,
                Err(panic) => {
                    self.abandon(f, page, guard);
                    for (f, page, guard) in loading {
                        self.abandon(f, page, guard);
                    }
                    std::panic::resume_unwind(panic);
                }
            };
            if !good {
                self.abandon(f, page, guard);
                continue;
            }
            self.counters.pages_read.fetch_add(1, Ordering::Relaxed);
            let frame = &self.frames[f.index()];
            frame.valid.store(true, Ordering::Release);
            lock(&self.replacer).loaded(f, access);
            drop(guard);
            self.unpin(f);
            loaded += 1;
        }
        loaded
    }
}
