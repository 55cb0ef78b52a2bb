//! The page copy of a backup (step 3 of the parent module's docs): pages
//! read in 1 MiB direct reads in the scheduler's `Backup` class, each one
//! checked, and those the backup keeps written whole (a full backup's data
//! file) or as entries (an incremental backup's `data.incr`: deltas against
//! the chain up to its parent where that chain is found beside it, else
//! whole pages).
//!
//! Invariants:
//! - Pages are taken in ascending order, each at most once; an incremental
//!   backup lists the pages it keeps in the order its entries are written.
//! - No page that fails its check is written as read: it is read again, or
//!   left to the log as zeros, or the backup fails naming it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::checkpoint::run::Checkpointed;
use super::super::checkpoint::summary::PageSet;
use super::super::engine::Inner;
use crate::backup::files::{Sink, ALIGN_BYTES, CHUNK_BYTES};
use crate::backup::increment::{ChainPages, EntryWriter};
use crate::backup::manifest;
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::{page, PageId};
use crate::io::{AlignedBuf, Storage};
use crate::lsn::Lsn;
use crate::sched::IoClass;

/// How the pages were found while copying.
#[derive(Default)]
pub(super) struct PageCounts {
    /// The database's identity, which every page names.
    pub(super) db_id: crate::format::DbId,
    /// Pages read and checked.
    pub(super) scanned: u64,
    /// An incremental backup's pages copied (page 0 aside), in order.
    pub(super) copied: Vec<PageId>,
    /// Pages that passed their check only when read again.
    pub(super) reread: u64,
    /// Pages left to the log's image of them (copied as zeros).
    pub(super) from_log: Vec<PageId>,
}

/// The rate limit: sleeps so the bytes moved stay under `rate` per second.
pub(super) struct Pace {
    pub(super) rate: Option<u64>,
    pub(super) began: Instant,
    pub(super) moved: u64,
    /// The destination is on the database's device: its writes (and the
    /// reads of the chain an incremental backup builds on) take the
    /// scheduler's Backup class too. On another device they do not wait
    /// for it (and overlap the reads).
    pub(super) dest_shares_device: bool,
}

impl Pace {
    pub(super) fn moved(&mut self, bytes: usize) {
        self.moved += bytes as u64;
        let Some(rate) = self.rate.filter(|&r| r > 0) else {
            return;
        };
        let due = Duration::from_secs_f64(self.moved as f64 / rate as f64);
        let elapsed = self.began.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
    }
}

/// Where the pages a backup keeps go.
pub(super) enum PagesOut<S: Storage> {
    /// A full backup's data file: every page, whole, in order.
    Whole(Sink<S>),
    /// An incremental backup's entries: deltas against `chain`'s pages
    /// where it was found, else whole pages.
    Entries {
        writer: EntryWriter<S>,
        chain: Option<Box<ChainPages<S>>>,
        /// A read of the chain failed: it is read no more.
        chain_failed: bool,
        /// The chain lies on the database's device: its reads take the
        /// scheduler's Backup class.
        chain_shares_device: bool,
        /// The chain's page, read for the delta.
        base: Vec<u8>,
    },
}

impl<S: Storage> PagesOut<S> {
    /// Writes the first `kept` pages of `buf`, numbered `nos` (an
    /// incremental backup's; a full backup's are in order); returns the
    /// bytes written.
    fn put(&mut self, buf: &AlignedBuf, kept: usize, nos: &[PageId], pb: usize) -> Result<usize> {
        match self {
            PagesOut::Whole(sink) => {
                sink.append(buf, kept * pb)?;
                Ok(kept * pb)
            }
            PagesOut::Entries {
                writer,
                chain,
                chain_failed,
                base,
                ..
            } => {
                assert_eq!(nos.len(), kept, "every kept page is numbered");
                base.resize(pb, 0);
                let mut bytes = 0;
                for (i, &no) in nos.iter().enumerate() {
                    let page = &buf.as_slice()[i * pb..(i + 1) * pb];
                    // The chain only makes entries smaller: one that fails
                    // to read (a stray, damaged copy taken for a link) is
                    // dropped, and the pages go whole.
                    let held = match chain.as_mut().filter(|_| !*chain_failed) {
                        Some(c) => c.page(no, base).unwrap_or_else(|_| {
                            *chain_failed = true;
                            false
                        }),
                        None => false,
                    };
                    bytes += writer.push(no, page, held.then_some(&base[..]))?;
                }
                Ok(bytes)
            }
        }
    }

    /// Whether writing a page also reads the chain's, on the database's
    /// device.
    fn reads_chain_here(&self) -> bool {
        matches!(
            self,
            PagesOut::Entries {
                chain: Some(_),
                chain_shares_device: true,
                ..
            }
        )
    }

    /// Bytes read from the chain so far.
    fn chain_bytes(&self) -> u64 {
        match self {
            PagesOut::Entries { chain: Some(c), .. } => c.bytes_read(),
            _ => 0,
        }
    }

    /// The file, every page written (page 0 still to write), and the pages
    /// written as deltas.
    pub(super) fn finish(self) -> Result<(Sink<S>, u64)> {
        match self {
            PagesOut::Whole(sink) => Ok((sink, 0)),
            PagesOut::Entries { writer, .. } => {
                let deltas = writer.deltas;
                Ok((writer.into_sink()?, deltas))
            }
        }
    }
}

/// One backup's page copy.
pub(super) struct PageCopy<'a, S: Storage> {
    /// The checkpoint that began the backup.
    pub(super) cp: &'a Checkpointed,
    /// An incremental backup's parent's start: only pages changed after it
    /// are kept.
    pub(super) since: Option<Lsn>,
    pub(super) pace: Pace,
    pub(super) counts: PageCounts,
    pub(super) out: PagesOut<S>,
}

impl<S: Storage> Inner<S> {
    /// Reads pages 1 to the checkpoint's page count, checking each one, and
    /// writes those the backup keeps (all, or those changed after its
    /// parent's start), in page order (page 0 is written last, by the
    /// caller).
    ///
    /// A reader thread reads the next chunk while this one checks and
    /// writes the last: two buffers go round between them.
    pub(super) fn copy_pages(&self, run: &mut PageCopy<'_, S>) -> Result<()> {
        let pb = self.pool.page_bytes();
        let per_chunk = (CHUNK_BYTES / pb) as u64;
        assert!(per_chunk >= 1, "a chunk holds a page");
        let first = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let second = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
        let (give, free) = std::sync::mpsc::sync_channel::<AlignedBuf>(2);
        let (fill, filled) = std::sync::mpsc::sync_channel::<Result<(u64, u64, AlignedBuf)>>(2);
        for b in [first, second] {
            give.send(b).expect("the reader has not started");
        }
        let pages = run.cp.meta.page_count;
        std::thread::scope(|s| {
            s.spawn(move || self.read_chunks(pages, per_chunk, free, fill));
            // Dropped on every return, which ends the reader.
            let (give, filled) = (give, filled);
            let mut next = 1u64;
            while next < pages {
                let (no, k, mut b) = filled
                    .recv()
                    .map_err(|_| Error::InvalidArgument("the backup's reader stopped".into()))??;
                assert_eq!(no, next, "chunks arrive in order");
                self.take_chunk(run, &mut b, no, k)?;
                next += k;
                // Once it has read every chunk the reader is gone, and the
                // buffer is not needed back.
                let _ = give.send(b);
            }
            assert_eq!(next, pages.max(1), "every page was copied");
            Ok(())
        })
    }

    /// The scheduler's permit for a write of `bytes` to the backup, when its
    /// destination shares the database's device.
    pub(super) fn write_permit(
        &self,
        pace: &Pace,
        bytes: usize,
    ) -> Option<crate::sched::Permit<'_>> {
        pace.dest_shares_device
            .then(|| self.env.sched.admit(IoClass::Backup, bytes as u64))
    }

    /// The reader of [`copy_pages`](Self::copy_pages): reads pages 1 to
    /// `pages` in chunks of at most `per_chunk` (the scheduler's
    /// [`backup_request_bytes`](crate::sched::Scheduler::backup_request_bytes):
    /// smaller while the foreground is busy) into the buffers `free` gives
    /// and sends them, in order, to `fill`; stops after an error, or when
    /// the other side hangs up.
    fn read_chunks(
        &self,
        pages: u64,
        per_chunk: u64,
        free: std::sync::mpsc::Receiver<AlignedBuf>,
        fill: std::sync::mpsc::SyncSender<Result<(u64, u64, AlignedBuf)>>,
    ) {
        let pb = self.pool.page_bytes();
        let mut no = 1u64;
        while no < pages {
            let Ok(mut b) = free.recv() else { return };
            let request = (self.env.sched.backup_request_bytes() / pb as u64).max(1);
            let k = per_chunk.min(request).min(pages - no);
            let bytes = k as usize * pb;
            let read = b.io_mut(0..bytes).and_then(|io| {
                self.pool
                    .file()
                    .read_exact_at(IoClass::Backup, io, no * pb as u64)
            });
            let failed = read.is_err();
            if fill.send(read.map(|()| (no, k, b))).is_err() || failed {
                return;
            }
            no += k;
        }
    }

    /// An incremental backup's pages from the changed-page summaries:
    /// reads only `pages` (page 0 aside), in runs, each checked, and keeps
    /// those changed after its parent's start (a summary may name a page
    /// whose last change came before it: a merged summary's range starts
    /// earlier).
    pub(super) fn copy_listed_pages(
        &self,
        run: &mut PageCopy<'_, S>,
        pages: &PageSet,
        buf: &mut AlignedBuf,
    ) -> Result<()> {
        let pb = self.pool.page_bytes();
        let per_chunk = (buf.len() / pb) as u64;
        let wanted: Vec<u64> = pages
            .pages()
            .map(PageId::get)
            .filter(|&p| p >= 1 && p < run.cp.meta.page_count)
            .collect();
        self.vitals
            .counters
            .backup_pages_total
            .store(wanted.len() as u64, Ordering::Relaxed);
        for [first, count] in manifest::runs(wanted) {
            let mut done = 0;
            while done < count {
                let request = (self.env.sched.backup_request_bytes() / pb as u64).max(1);
                let (no, k) = (first + done, per_chunk.min(request).min(count - done));
                let bytes = k as usize * pb;
                self.pool.file().read_exact_at(
                    IoClass::Backup,
                    buf.io_mut(0..bytes)?,
                    no * pb as u64,
                )?;
                self.take_chunk(run, buf, no, k)?;
                done += k;
            }
        }
        Ok(())
    }

    /// Checks the `k` pages from `no` read into `buf`, writes those the
    /// backup keeps, and counts the progress.
    fn take_chunk(
        &self,
        run: &mut PageCopy<'_, S>,
        buf: &mut AlignedBuf,
        no: u64,
        k: u64,
    ) -> Result<()> {
        let pb = self.pool.page_bytes();
        let listed = run.counts.copied.len();
        let kept = self.keep_changed(buf, no, k, run.since, run.cp.redo, &mut run.counts)?;
        let mut written = 0;
        let chain_before = run.out.chain_bytes();
        if kept > 0 {
            // One permit for the writes and the chain's reads (at most a
            // page each per page kept) that share the database's device.
            let here =
                usize::from(run.pace.dest_shares_device) + usize::from(run.out.reads_chain_here());
            let _permit = (here > 0).then(|| {
                self.env
                    .sched
                    .admit(IoClass::Backup, (here * kept * pb) as u64)
            });
            let nos = &run.counts.copied[listed..];
            written = run.out.put(buf, kept, nos, pb)?;
        }
        let c = &self.vitals.counters;
        c.backup_pages_done.fetch_add(k, Ordering::Relaxed);
        c.backup_bytes.fetch_add(written as u64, Ordering::Relaxed);
        let chain_read = run.out.chain_bytes() - chain_before;
        run.pace.moved(k as usize * pb + chain_read as usize);
        Ok(())
    }

    /// Checks the `k` pages from `no` read into `buf` and moves those
    /// changed after `since` (all, for a full backup) to its front, noting
    /// an incremental backup's; returns how many.
    fn keep_changed(
        &self,
        buf: &mut AlignedBuf,
        no: u64,
        k: u64,
        since: Option<Lsn>,
        redo: Lsn,
        counts: &mut PageCounts,
    ) -> Result<usize> {
        let pb = self.pool.page_bytes();
        let mut kept = 0usize;
        for i in 0..k as usize {
            let page = &mut buf.as_mut_slice()[i * pb..(i + 1) * pb];
            let p = PageId::new(no + i as u64);
            self.check_copied(p, page, redo, counts)?;
            counts.scanned += 1;
            // A page left to the log (zeros) changed after the start.
            let changed = since
                .is_none_or(|s| counts.from_log.last() == Some(&p) || page::page_lsn(page) > s);
            if changed {
                if kept != i {
                    buf.as_mut_slice()
                        .copy_within(i * pb..(i + 1) * pb, kept * pb);
                }
                kept += 1;
                if since.is_some() {
                    counts.copied.push(p);
                }
            }
        }
        assert!(kept <= k as usize, "a chunk keeps at most its pages");
        Ok(kept)
    }

    /// Checks page `no` as read into `page`; on failure reads it again
    /// under its frame's latch into `page` (see the module docs).
    fn check_copied(
        &self,
        no: PageId,
        page: &mut [u8],
        redo: Lsn,
        counts: &mut PageCounts,
    ) -> Result<()> {
        let durable = self.wal().durable_lsn();
        let Err(first) = check_page(page, no, &counts.db_id, durable) else {
            return Ok(());
        };
        let pb = self.pool.page_bytes();
        let mut one = AlignedBuf::new(pb, ALIGN_BYTES)?;
        // The permit first: waiting for it while holding the latch would
        // hold up a commit that needs the page.
        let io = self.pool.file().admit(IoClass::Backup, pb as u64);
        let resident = self.pool.try_read(no, Access::Scan);
        io.read_exact_at(one.io_all_mut(), no.offset(pb as u64))?;
        drop(io);
        page.copy_from_slice(one.as_slice());
        let durable = self.wal().durable_lsn();
        if check_page(page, no, &counts.db_id, durable).is_ok() {
            counts.reread += 1;
            return Ok(());
        }
        if resident.is_some_and(|r| page::page_lsn(r.data()) > redo) {
            // Zeros, not the damaged bytes: the backup's files hold no page
            // that fails its check, and replay installs the image without
            // reading this one.
            page.fill(0);
            counts.from_log.push(no);
            return Ok(());
        }
        Err(self.pool.page_corruption(
            no,
            format!(
                "{first}; read again, it is still damaged, and the log since the backup's \
                 start holds no image of it: the backup stops rather than copy damage"
            ),
        ))
    }
}

/// Checks one copied page: checksum, identity, node structure, and an LSN
/// the durable log covers. Returns what is wrong.
fn check_page(
    page: &[u8],
    no: PageId,
    db_id: &crate::format::DbId,
    durable: Lsn,
) -> std::result::Result<(), String> {
    let header = page::verify(page, no, db_id).map_err(|e| e.to_string())?;
    crate::btree::node::validate(page)?;
    if header.lsn > durable {
        return Err(format!(
            "its LSN {} is past the durable log's end {durable}",
            header.lsn
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let inner = &db.inner;
        let redo = Lsn::new(inner.ckpt.last_redo.load(Ordering::Acquire));
        let pb = inner.pool.page_bytes();
        // Ten small keys: the root leaf is page 1, the only tree page.
        let no = PageId::new(1);
        let mut counts = PageCounts {
            db_id: inner.pool_db_id().expect("id"),
            ..PageCounts::default()
        };
        let mut torn = vec![0xABu8; pb];
        inner
            .check_copied(no, &mut torn, redo, &mut counts)
            .expect("a torn read passes when read again");
        assert_eq!((counts.reread, counts.from_log.len()), (1, 0));
        page::verify(&torn, no, &inner.pool_db_id().expect("id")).expect("the good copy");

        let data = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("data"))
            .expect("data");
        data.write_all_at(&[0x5A; 64], no.offset(pb as u64) + 100)
            .expect("damage");
        let err = inner
            .check_copied(no, &mut vec![0xABu8; pb], redo, &mut counts)
            .expect_err("damage unchanged since the start");
        assert!(err.to_string().contains("(page 1): "), "{err}");

        let mut w = db.begin_write().expect("begin");
        w.put(b"new", b"value").expect("put");
        w.commit().expect("commit");
        let mut damaged = vec![0u8; pb];
        data.read_exact_at(&mut damaged, no.offset(pb as u64))
            .expect("read");
        inner
            .check_copied(no, &mut damaged, redo, &mut counts)
            .expect("a page changed since the start has its image in the log");
        assert_eq!(
            (counts.reread, counts.from_log.as_slice()),
            (1, [no].as_slice())
        );
        assert!(damaged.iter().all(|&b| b == 0), "copied as zeros");
    }
}
