//! Checkpoints and log-space pacing.
//!
//! A checkpoint is fuzzy: it starts between commits (under the tree lock),
//! takes the log's end as its redo point, and writes every page first
//! changed at or before it while commits go on; then it syncs the data file,
//! logs a checkpoint record, names it in `CONTROL` and recycles the WAL
//! segments recovery no longer needs. A background checkpoint is paced so
//! it finishes while the log grows by half the checkpoint distance (or
//! within [`CHECKPOINT_TIME_TARGET`]); a caller of `checkpoint()` or a
//! closing database has it finish at full speed.
//!
//! Invariants:
//! - One checkpoint runs at a time (`Inner::checkpointing`).
//! - `CONTROL` names a checkpoint only after every page dirty at its start
//!   is written and synced and its record is durable.
//! - The redo point only moves forward.
//! - A committer waits on page writes only at the hard limit
//!   ([`WAL_HARD_LIMIT_FACTOR`] checkpoint distances of log since the redo
//!   point), and that wait is counted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::engine::Inner;
use super::super::lock_rank::RankedMutexGuard;
use super::super::records;
use crate::buffer::WriteCause;
use crate::error::{Error, Result};
use crate::format::control::{Control, FLAG_BACKUP, FLAG_HISTORY};
use crate::format::{data_head, PageId};
use crate::health;
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::sched::IoClass;

/// Log since the redo point, in checkpoint distances, at which new
/// transactions wait for the checkpoint.
pub const WAL_HARD_LIMIT_FACTOR: u64 = 3;

/// A background checkpoint aims to finish while the log grows by this
/// fraction of the checkpoint distance.
const CHECKPOINT_COMPLETION_TARGET: f64 = 0.5;
/// … or within this long, whichever allows more speed.
const CHECKPOINT_TIME_TARGET: Duration = Duration::from_secs(30);

/// How a checkpoint writes its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::db) enum Pace {
    /// At once, in the scheduler's urgent class: a caller waits for it.
    Urgent,
    /// At once, in the background class: below every commit's and read's
    /// I/O (a compaction's, whose caller waits but must not slow others).
    Background,
    /// In the background class, spread over the log's growth and time
    /// (see [`write_dirty_through`](Inner::write_dirty_through)).
    Paced,
}

impl Pace {
    /// `Paced` when `paced`, else `Urgent`.
    pub(in crate::db) fn paced_if(paced: bool) -> Pace {
        if paced {
            Pace::Paced
        } else {
            Pace::Urgent
        }
    }
}
/// Pages a checkpoint writes between looks at its pace.
const CHECKPOINT_STEP_PAGES: usize = 32;
/// Segments a checkpoint archives at most when the archiver thread runs.
const CHECKPOINT_ARCHIVE_MAX: u64 = 2;

/// A committer waits at the hard limit at most this long, rather than hang
/// behind a checkpoint that cannot finish (its error surfaces elsewhere).
const LOG_SPACE_WAIT_MAX: Duration = Duration::from_secs(60);
/// How often a committer waiting at the hard limit looks again without a
/// wake-up.
const LOG_SPACE_RECHECK: Duration = Duration::from_millis(50);
/// Rounds of 1 ms a checkpoint waits for commits holding a page dirty from
/// before its start before it gives up (and reports the page held).
const CHECKPOINT_IDLE_ROUNDS_MAX: u32 = 10_000;

/// What a completed checkpoint names in `CONTROL`.
#[derive(Debug, Clone, Copy)]
pub(in crate::db) struct Checkpointed {
    /// Its redo point: replay from here.
    pub(in crate::db) redo: Lsn,
    /// The end of its record.
    pub(in crate::db) record_end: Lsn,
    /// The tree at its start.
    pub(in crate::db) meta: records::Meta,
    /// The time of the last commit before its start (µs since the epoch; 0
    /// for none): every commit after it has this time or a later one.
    pub(in crate::db) commit_time_us: u64,
}

impl<S: Storage> Inner<S> {
    /// Runs a checkpoint now, at full speed (see the module docs).
    pub(in crate::db) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_as(WriteCause::Checkpoint)
    }

    /// [`checkpoint`](Self::checkpoint), its page writes counted as `cause`
    /// (a closing database's as `Shutdown`, the end of recovery's as
    /// `Recovery`).
    pub(in crate::db) fn checkpoint_as(&self, cause: WriteCause) -> Result<()> {
        // A paced background checkpoint under way finishes at full speed
        // instead of making this caller wait out its pace.
        self.ckpt.hurry.fetch_add(1, Ordering::AcqRel);
        let done = self
            .ckpt
            .checkpointing
            .lock()
            .and_then(|one| self.checkpoint_locked(&one, Pace::Urgent, cause).map(drop));
        let before = self.ckpt.hurry.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "every hurry is counted before it is taken back");
        self.vitals.health.observe(done)
    }

    /// The checkpoint itself, with `checkpointing` held.
    pub(in crate::db) fn checkpoint_locked(
        &self,
        _one: &RankedMutexGuard<'_, ()>,
        pace: Pace,
        cause: WriteCause,
    ) -> Result<Checkpointed> {
        let (start, meta, commit_time_us) = self.checkpoint_start()?;
        let redo_before = self.ckpt.last_redo.load(Ordering::Acquire);
        assert!(
            redo_before <= start.get(),
            "the redo point only moves forward"
        );
        let reached = self.stage_data_head(start)?;
        self.write_dirty_through(start, pace, cause)?;
        self.pool.sync()?;
        // The head went out with the pages: it names the log's reach.
        self.ckpt
            .reach_stamped
            .fetch_max(self.log_segment_of(reached), Ordering::AcqRel);
        if self.pool.oldest_dirty_lsn().is_some_and(|l| l <= start) {
            return Err(Error::InvalidArgument(
                "checkpoint could not write a page held by a commit".into(),
            ));
        }
        // With the time of the last commit before it: replay learns it from
        // here when it meets no commit.
        let rec = records::encode_checkpoint(start, &meta, commit_time_us);
        let end = self.wal().append(records::CHECKPOINT, &rec)?;
        self.wal().flush(end)?;
        assert!(end > start, "the checkpoint record follows its redo point");
        self.name_checkpoint(start, end, &meta)?;
        // The checkpoint is complete once CONTROL names it: count it before
        // the log space it frees can be seen, so a writer that waited for
        // that space never finds the checkpoint uncounted.
        self.vitals
            .counters
            .checkpoints
            .fetch_add(1, Ordering::Relaxed);
        self.ckpt.last_redo.store(start.get(), Ordering::Release);
        {
            // Committers waiting at the hard limit look again.
            let _held = health::lock_even_poisoned(&self.ckpt.log_space.0);
            self.ckpt.log_space.1.notify_all();
        }
        // Segments a running backup still copies stay, and those not yet
        // archived (archived now if they can be: a failure is counted, and
        // the segments wait for the archiver's next round).
        // With the archiver thread running, a checkpoint takes only a few
        // (it must not hold its lock through a backlog); without it, and
        // at close, all.
        let limit = (self.env.opts.background_threads && cause != WriteCause::Shutdown)
            .then_some(CHECKPOINT_ARCHIVE_MAX);
        let _ = self.archive_complete_segments(limit);
        let keep = [self.oldest_log_pin(), self.archive_keep()]
            .into_iter()
            .flatten()
            .fold(start, Lsn::min);
        self.wal().recycle_before(keep)?;
        Ok(Checkpointed {
            redo: start,
            record_end: end,
            meta,
            commit_time_us,
        })
    }

    /// The checkpoint's start: between commits, so every commit before it
    /// is in the pages about to be written and every one after it is in the
    /// log from here on, with full images for pages it finds unchanged
    /// since. Returns it, the tree then, and the last commit's time; ends
    /// the changed-page summary there and writes it.
    fn checkpoint_start(&self) -> Result<(Lsn, records::Meta, u64)> {
        let (start, meta, commit_time_us, summary) = {
            let tree = self.txns.tree.write()?;
            let start = self.wal().end_lsn();
            let summary = self.ckpt.summaries.cut(start);
            let commit_time_us = self.vitals.counters.commit_clock_us.load(Ordering::Acquire);
            let horizon = self.ckpt.fpi_horizon.swap(start.get(), Ordering::AcqRel);
            assert!(
                horizon <= start.get(),
                "the image horizon only moves forward"
            );
            (start, *tree, commit_time_us, summary)
        };
        // Before any page is written, so a summary exists before CONTROL
        // names this checkpoint. Not written, it leaves a gap that
        // incremental backups spanning it fill by reading every page.
        let written = self.ckpt.summaries.write(
            &self.env.storage,
            self.env.opts.permissions,
            summary.0,
            start,
            &summary.1,
        );
        if written.is_err() {
            self.vitals
                .counters
                .summary_failures
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok((start, meta, commit_time_us))
    }

    /// Makes `CONTROL` name the checkpoint starting at `start` whose record
    /// ends at `end`.
    fn name_checkpoint(&self, start: Lsn, end: Lsn, meta: &records::Meta) -> Result<()> {
        let mut control = self.ckpt.control.lock()?;
        let c = control.current();
        assert!(
            c.redo_lsn.get() <= start.get(),
            "CONTROL's redo point only moves forward"
        );
        control.write(Control {
            checkpoint_lsn: end,
            redo_lsn: start,
            root_page: meta.root,
            catalog: meta.catalog,
            page_count: meta.page_count,
            freelist_head: meta.freelist,
            free_pages: meta.free_pages,
            compaction: meta.compaction,
            // A database opened from a backup is one from its first
            // checkpoint on, on a history of its own: its log from here
            // differs from the original's at the same LSNs. So is one
            // whose line was lost (see `Control::history_lost`).
            flags: (c.flags & !FLAG_BACKUP) | FLAG_HISTORY,
            history: match c.is_backup() || c.history_lost {
                false => c.history,
                true => crate::io::random_id(),
            },
            history_lost: false,
            ..c
        })
    }

    /// The oldest LSN a running backup still needs the log from.
    fn oldest_log_pin(&self) -> Option<Lsn> {
        // Poisoned only after a panic under it, which failed the database;
        // keeping every segment is the safe answer then.
        match self.log_pins.lock() {
            Ok(pins) => pins.iter().min().copied(),
            Err(_) => Some(Lsn::ZERO),
        }
    }

    /// Dirties the data file's head with `flushed_through` (the pages of a
    /// checkpoint starting there go out with it, in the same sync) and the
    /// durable end of the log as `log_reached`. Returns the latter.
    fn stage_data_head(&self, flushed_through: Lsn) -> Result<Lsn> {
        // Made whole, not read: a torn head (it has no image in the log) is
        // simply written anew.
        let mut head = self.pool.create(data_head::DATA_HEAD_PAGE)?;
        crate::btree::tree::init_free(head.data_mut(), PageId::ZERO);
        let log_reached = self.wal().durable_lsn();
        data_head::encode(
            head.data_mut(),
            data_head::DataHead {
                flushed_through,
                log_reached,
            },
        );
        // Stamped with what is durable already, so writing it never waits
        // for the log.
        head.mark_dirty(log_reached.min(flushed_through));
        assert!(
            log_reached <= self.wal().durable_lsn(),
            "the head claims only what is durable"
        );
        Ok(log_reached)
    }

    /// After a commit: once the log is durable in a segment the data file's
    /// head has not yet named, writes the head with the log's reach and
    /// syncs it (see [`data_head`]); once per segment of log. Skipped while
    /// a checkpoint runs (its own head names its start), never waited for.
    pub(in crate::db) fn stamp_log_reach(&self) -> Result<()> {
        let segment = self.log_segment_of(self.wal().durable_lsn());
        if segment <= self.ckpt.reach_stamped.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(_one) = self.ckpt.checkpointing.try_lock() else {
            return Ok(());
        };
        // Under the checkpoint lock the last redo point is CONTROL's.
        let redo = Lsn::new(self.ckpt.last_redo.load(Ordering::Acquire));
        let reached = self.stage_data_head(redo)?;
        self.pool.write_now(
            data_head::DATA_HEAD_PAGE,
            IoClass::Urgent,
            WriteCause::Checkpoint,
        )?;
        self.pool.sync()?;
        assert!(
            self.log_segment_of(reached) >= segment,
            "the stamp covers the segment"
        );
        self.ckpt.reach_stamped.fetch_max(segment, Ordering::AcqRel);
        Ok(())
    }

    /// The log segment `lsn` lies in.
    fn log_segment_of(&self, lsn: Lsn) -> u64 {
        let payload = self.wal().segment_bytes() - crate::wal::format::SEGMENT_HEADER_BYTES;
        lsn.get() / payload
    }

    /// Writes every page first changed at or before `start` (a change's LSN
    /// is its commit record's end, so one ending exactly at the start is
    /// before it; later changes are in the log after it). Paced, the writes
    /// are spread so they are done when the log has grown by half the
    /// checkpoint distance (or after [`CHECKPOINT_TIME_TARGET`]), keeping
    /// the device free for commits and reads meanwhile.
    fn write_dirty_through(
        &self,
        start: crate::lsn::Lsn,
        pace: Pace,
        cause: WriteCause,
    ) -> Result<()> {
        let mut paced = pace == Pace::Paced;
        let total = self.pool.dirty_through(start).max(1);
        let began = Instant::now();
        let mut written = 0usize;
        let mut idle_rounds = 0;
        while self.pool.oldest_dirty_lsn().is_some_and(|l| l <= start) {
            // A paced checkpoint hurried by a waiting caller goes urgent.
            let class = match (pace, paced) {
                (Pace::Background, _) | (Pace::Paced, true) => IoClass::Background,
                _ => IoClass::Urgent,
            };
            let n = self
                .pool
                .flush_through(start, CHECKPOINT_STEP_PAGES, class, cause)?;
            assert!(
                n <= CHECKPOINT_STEP_PAGES,
                "a step writes at most its pages"
            );
            written += n;
            if n > 0 {
                // Only rounds in a row without a page written count: a
                // long checkpoint beside busy commits is not a stuck one.
                idle_rounds = 0;
            }
            if n == 0 {
                // A commit holds a page dirty from before the start; it
                // releases it within its (short) apply phase. A short sleep,
                // not a wake-up: signalling every commit's release would cost
                // every commit for a wait that is rare.
                idle_rounds += 1;
                if idle_rounds > CHECKPOINT_IDLE_ROUNDS_MAX {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            // Paced only between writes: once the last page is out there is
            // nothing left to spread, and the checkpoint completes.
            if paced && self.pool.oldest_dirty_lsn().is_some_and(|l| l <= start) {
                paced = self.pace(start, began, written as f64 / total as f64);
            }
        }
        Ok(())
    }

    /// Waits while a paced checkpoint is ahead of its schedule (`done`, the
    /// share of its pages written, against the log's growth and the time
    /// since it began). Returns whether it stays paced: a closing database,
    /// or a caller waiting to checkpoint, has it finish at full speed.
    fn pace(&self, start: crate::lsn::Lsn, began: Instant, done: f64) -> bool {
        let distance =
            self.env.opts.checkpoint_wal_bytes.max(1) as f64 * CHECKPOINT_COMPLETION_TARGET;
        loop {
            let closing = health::lock(&self.ckpt.checkpointer.0).map_or(true, |stop| *stop);
            if closing || self.ckpt.hurry.load(Ordering::Acquire) > 0 {
                return false;
            }
            // Past twice the distance the log itself is short of space
            // (committers may be waiting at the hard limit, producing no
            // log to pace by): no pacing then.
            if self.wal_since_checkpoint() >= self.env.opts.checkpoint_wal_bytes.saturating_mul(2) {
                return true;
            }
            let by_wal = (self.wal().end_lsn().get() - start.get()) as f64 / distance;
            let by_time = began.elapsed().as_secs_f64() / CHECKPOINT_TIME_TARGET.as_secs_f64();
            if done <= by_wal.max(by_time) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs a checkpoint if the WAL grew past the threshold since the last one
    /// and no checkpoint is running.
    pub(in crate::db) fn maybe_checkpoint(&self) -> Result<bool> {
        if self.wal_since_checkpoint() < self.env.opts.checkpoint_wal_bytes {
            return Ok(false);
        }
        let Some(one) = self.ckpt.checkpointing.try_lock() else {
            return Ok(false);
        };
        // Plain FIFO scheduling is the baseline without pacing too.
        let paced = self.env.opts.io_scheduler.mode == crate::sched::SchedMode::Classes;
        let done = self
            .checkpoint_locked(&one, Pace::paced_if(paced), WriteCause::Checkpoint)
            .map(|_| true);
        self.vitals.health.observe(done)
    }

    /// Log written since the last checkpoint's redo point.
    pub(crate) fn wal_since_checkpoint(&self) -> u64 {
        let redo = self.ckpt.last_redo.load(Ordering::Acquire);
        let end = self.wal().end_lsn().get();
        assert!(redo <= end, "the redo point is inside the log");
        end - redo
    }

    /// The hard limit: with background checkpoints and the log grown to
    /// [`WAL_HARD_LIMIT_FACTOR`] times the checkpoint distance since the
    /// redo point, a new transaction waits for the checkpoint (which runs
    /// uncapped by then) to free log space. Counted as a `log_space_wait`
    /// stall; it gives up waiting after a minute rather than hang.
    pub(in crate::db) fn wait_for_log_space(&self) {
        let limit = self
            .env
            .opts
            .checkpoint_wal_bytes
            .saturating_mul(WAL_HARD_LIMIT_FACTOR);
        if !self.env.opts.background_threads || self.wal_since_checkpoint() < limit {
            return;
        }
        let t = Instant::now();
        let (lock, freed) = &self.ckpt.log_space;
        let mut guard = health::lock_even_poisoned(lock);
        // A failed database frees no space: the caller's next step reports
        // the failure (the recheck below bounds how late it sees it).
        while self.wal_since_checkpoint() >= limit
            && t.elapsed() < LOG_SPACE_WAIT_MAX
            && !self.vitals.health.is_failed()
        {
            // The checkpointer runs uncapped by now; wake it in case it sleeps,
            // then wait for a checkpoint to move the redo point. The timeout
            // only bounds a wake-up missed between the look and the wait.
            self.ckpt.checkpointer.1.notify_one();
            guard = match freed.wait_timeout(guard, LOG_SPACE_RECHECK) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(guard);
        self.vitals.counters.log_space_wait.record(t.elapsed());
    }

    /// Tells the scheduler how urgent background writing is: the shortage
    /// of clean frames (the dirty share of the cache's cold end, half dirty
    /// being full pressure; full pressure outright when the foreground had
    /// to write a dirty victim itself since the last pass), or how far the
    /// log has grown past the checkpoint distance (twice the distance is
    /// full pressure).
    pub(in crate::db) fn report_pressure(&self, cold_dirty_share: f64, foreground_wrote: f64) {
        let frames = (cold_dirty_share * 2.0).max(foreground_wrote).min(1.0);
        let log = self.wal_since_checkpoint() as f64
            / self.env.opts.checkpoint_wal_bytes.max(1) as f64
            - 1.0;
        self.env.sched.set_pressure(frames.max(log).clamp(0.0, 1.0));
    }
}
