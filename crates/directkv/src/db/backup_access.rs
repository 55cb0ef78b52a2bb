//! The open database as `backup/` sees it: [`Engine`] for [`Inner`], the
//! one place where taking a backup and archiving the log reach the
//! engine's state (its checkpoint and log pins, `CONTROL`, the changed-page
//! summaries, the buffer pool's latches, the archiver's state and the
//! counters). It is also the one door the other way: the log archiver's
//! entry points, as the checkpoint, the archiver thread, `stats` and open
//! call them, and the archiver's types they name.
//!
//! Invariants:
//! - A log pin is pushed under the checkpoint lock, so no checkpoint
//!   recycles a segment from the pinned redo point on, and removed once.
//! - The running-backup count goes up once per backup and down once.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::checkpoint::control::ControlFile;
use super::checkpoint::run::Pace;
use super::engine::Inner;
use crate::backup::archive;
use crate::backup::engine::{ChangedPages, Checkpointed, Engine, Meta, Progress};
use crate::buffer::{Access, WriteCause};
use crate::error::{Error, Result};
use crate::format::control::Control;
use crate::format::{page, DbId, PageId};
use crate::health;
use crate::io::{AlignedBuf, Permissions, Storage};
use crate::lsn::Lsn;
use crate::sched::{IoClass, ScheduledFile, Scheduler};
use crate::wal::Wal;

impl<S: Storage> Engine for Inner<S> {
    type S = S;

    fn storage(&self) -> &S {
        &self.env.storage
    }

    fn dir(&self) -> &Path {
        &self.env.dir
    }

    fn sched(&self) -> &Arc<Scheduler> {
        &self.env.sched
    }

    fn wal(&self) -> &Wal<S> {
        Inner::wal(self)
    }

    fn page_bytes(&self) -> usize {
        self.pool.page_bytes()
    }

    fn data_file(&self) -> &ScheduledFile<S::File> {
        self.pool.file()
    }

    fn archive_dir(&self) -> Option<PathBuf> {
        self.archive.as_ref().map(|a| a.dir().to_path_buf())
    }

    fn checkpoint_and_pin(&self, fast: bool) -> Result<Checkpointed> {
        if fast {
            self.ckpt.hurry.fetch_add(1, Ordering::AcqRel);
        }
        let started = self.ckpt.checkpointing.lock().and_then(|one| {
            let cp = self.checkpoint_locked(&one, Pace::paced_if(!fast), WriteCause::Checkpoint)?;
            health::lock(&self.log_pins)?.push(cp.redo);
            Ok(cp)
        });
        if fast {
            let before = self.ckpt.hurry.fetch_sub(1, Ordering::AcqRel);
            assert!(before > 0, "every hurry is counted before it is taken back");
        }
        let cp = self.vitals.health.observe(started)?;
        assert!(
            cp.redo < cp.record_end,
            "a checkpoint's record follows its redo point"
        );
        Ok(Checkpointed {
            redo: cp.redo,
            record_end: cp.record_end,
            meta: Meta {
                root: cp.meta.root,
                page_count: cp.meta.page_count,
                freelist: cp.meta.freelist,
                catalog: cp.meta.catalog,
                free_pages: cp.meta.free_pages,
                compaction: cp.meta.compaction,
            },
            commit_time_us: cp.commit_time_us,
        })
    }

    fn unpin_log(&self, lsn: Lsn) {
        let mut pins = health::lock_even_poisoned(&self.log_pins);
        let at = pins.iter().position(|&p| p == lsn);
        let at = at.expect("a pin is removed once, by its holder");
        pins.swap_remove(at);
    }

    fn control(&self) -> Result<Control> {
        Ok(self.ckpt.control.lock()?.current())
    }

    fn create_control(&self, path: &Path, control: Control) -> Result<()> {
        // The backup's file, not the database's: its 8 KiB take no permit
        // of the database's scheduler (a FIFO one of its own).
        let (private, fifo) = (Permissions::Private, Scheduler::fifo());
        ControlFile::create_with(&self.env.storage, path, private, control, fifo)?;
        Ok(())
    }

    fn read_control(&self, path: &Path) -> Result<Control> {
        ControlFile::read(&self.env.storage, path)
    }

    fn changed_pages(&self, from: Lsn, to: Lsn) -> Result<Option<ChangedPages>> {
        assert!(from <= to, "a range runs forward");
        let io = (&self.env.sched, IoClass::Backup);
        let set = super::checkpoint::summary::changed_pages(
            &self.env.storage,
            &self.env.dir,
            (from, to),
            io,
        )?;
        Ok(set.map(|s| ChangedPages(s.pages().collect())))
    }

    fn reread_page(&self, no: PageId, out: &mut AlignedBuf) -> Result<Option<Lsn>> {
        let pb = self.pool.page_bytes();
        assert_eq!(out.len(), pb, "a page's buffer");
        // The permit first: waiting for it while holding the latch would
        // hold up a commit that needs the page.
        let io = self.pool.file().admit(IoClass::Backup, pb as u64);
        let resident = self.pool.try_read(no, Access::Scan);
        io.read_exact_at(out.io_all_mut(), no.offset(pb as u64))?;
        drop(io);
        Ok(resident.map(|r| page::page_lsn(r.data())))
    }

    fn page_corruption(&self, no: PageId, detail: String) -> Error {
        self.pool.page_corruption(no, detail)
    }

    fn archive(&self) -> Option<&Archive> {
        self.archive.as_ref()
    }

    fn progress(&self, p: Progress) {
        let c = &self.vitals.counters;
        match p {
            Progress::Started { pages } => {
                c.backup_pages_total.store(pages, Ordering::Relaxed);
                c.backup_pages_done.store(0, Ordering::Relaxed);
                c.backup_bytes.store(0, Ordering::Relaxed);
                c.backup_running.fetch_add(1, Ordering::AcqRel);
            }
            Progress::Total { pages } => c.backup_pages_total.store(pages, Ordering::Relaxed),
            Progress::Copied { pages, bytes } => {
                c.backup_pages_done.fetch_add(pages, Ordering::Relaxed);
                c.backup_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Progress::Ended => {
                let before = c.backup_running.fetch_sub(1, Ordering::AcqRel);
                assert!(before > 0, "a running backup was counted");
            }
            Progress::Sealed => {
                c.backups.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn new_id(&self) -> DbId {
        crate::io::random_id()
    }
}

pub(super) use crate::backup::archive::{setting as archive_setting, Archive};
/// What open reads of a backup's or a restore's directory: the end its log
/// must reach, and whether it is an increment (which open refuses).
pub(super) use crate::backup::{complete_manifest, restored_record};

/// The log archiver ([`crate::backup::archive`]) as the rest of the
/// database calls it, each a no-op when it does not archive.
impl<S: Storage> Inner<S> {
    /// Archives complete segments not yet archived: at most `limit`, and
    /// none when a round is under way, when it is given.
    ///
    /// # Errors
    /// The failure of the first segment that could not be archived.
    pub(super) fn archive_complete_segments(&self, limit: Option<u64>) -> Result<u64> {
        archive::complete_segments(self, limit)
    }

    /// Archives the segment being written once `archive_timeout` says so.
    ///
    /// # Errors
    /// The copy's failure, counted as a failed round.
    pub(super) fn archive_partial_if_due(&self) -> Result<bool> {
        archive::partial_if_due(self)
    }

    /// A test's archiver round, its clock moved `ahead`.
    ///
    /// # Errors
    /// As the archiver's round.
    pub(super) fn archive_round_for_test(&self, ahead: std::time::Duration) -> Result<bool> {
        archive::round_for_test(self, ahead)
    }

    /// The end of the last durable record: what the archive must hold to
    /// lack no commit.
    pub(super) fn durable_records_end(&self) -> Lsn {
        archive::durable_records_end(Inner::wal(self))
    }

    /// The first LSN checkpoints must keep for the archiver, if archiving.
    pub(super) fn archive_keep(&self) -> Option<Lsn> {
        archive::keep(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::take::pages::PageCounts;
    use crate::backup::take::pages::Take;
    use crate::{Database, Options};
    use std::os::unix::fs::FileExt;

    /// The three outcomes of a page that fails its first check: a read torn
    /// by a write passes when read again; damage on disk fails, naming the
    /// page; damage on disk of a page changed since the start is covered by
    /// the log's image of it.
    #[test]
    fn a_failed_page_is_read_again_then_covered_or_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = Options {
            cache_bytes: 8 << 20,
            background_threads: false,
            ..Options::default()
        };
        let db = Database::open(dir.path(), opts).expect("open");
        let mut w = db.begin_write().expect("begin");
        for i in 0..10u32 {
            w.put(format!("k{i:02}").as_bytes(), b"value").expect("put");
        }
        w.commit().expect("commit");
        db.checkpoint().expect("checkpoint");
        let inner = &*db.inner;
        let take = Take::new(inner);
        let redo = Lsn::new(inner.ckpt.last_redo.load(Ordering::Acquire));
        let pb = inner.pool.page_bytes();
        // Ten small keys: the root leaf is page 1, the only tree page.
        let no = PageId::new(1);
        let mut counts = PageCounts {
            db_id: inner.control().expect("control").db_id,
            ..PageCounts::default()
        };
        let mut torn = vec![0xABu8; pb];
        take.check_copied(no, &mut torn, redo, &mut counts)
            .expect("a torn read passes when read again");
        assert_eq!((counts.reread, counts.from_log.len()), (1, 0));
        page::verify(&torn, no, &inner.control().expect("control").db_id).expect("the good copy");

        let data = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("data"))
            .expect("data");
        data.write_all_at(&[0x5A; 64], no.offset(pb as u64) + 100)
            .expect("damage");
        let err = take
            .check_copied(no, &mut vec![0xABu8; pb], redo, &mut counts)
            .expect_err("damage unchanged since the start");
        assert!(err.to_string().contains("(page 1): "), "{err}");

        let mut w = db.begin_write().expect("begin");
        w.put(b"new", b"value").expect("put");
        w.commit().expect("commit");
        let mut damaged = vec![0u8; pb];
        data.read_exact_at(&mut damaged, no.offset(pb as u64))
            .expect("read");
        take.check_copied(no, &mut damaged, redo, &mut counts)
            .expect("a page changed since the start has its image in the log");
        assert_eq!(
            (counts.reread, counts.from_log.as_slice()),
            (1, [no].as_slice())
        );
        assert!(damaged.iter().all(|&b| b == 0), "copied as zeros");
    }
}
