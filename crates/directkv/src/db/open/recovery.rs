//! Recovery: the replay of the WAL at open.
//!
//! Redo only: the log holds committed transactions' page records (images and
//! deltas) and their commit records; replay buffers each transaction's page
//! records until its commit and applies them, in commit order, to pages
//! whose LSN is below the commit's. A transaction without a commit record in
//! the log is dropped (no undo is needed: pages never hold uncommitted
//! changes on disk, since a commit applies its pages at commit).
//!
//! Invariants:
//! - Commits are applied in log order, each whole; a page takes a commit's
//!   records only if its LSN is below the commit's (idempotent: a crash
//!   during recovery and a second replay give the same state).
//! - Every record replay read is durable: the log is told how far
//!   ([`EngineLog::replayed_to`]), and no page write during replay waits for
//!   the log past it.
//! - Replay holds at most [`REPLAY_LOOKAHEAD`] commits ahead of the one it
//!   applies.
//! - No record out of range is applied: the decoders refuse page 0 and
//!   pages past the commit's count, counts and ids out of range
//!   (`db::records`), and a commit may grow the page count by at most the
//!   pages it logged; the error names the segment file and the record's
//!   offset in it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::Instant;

use super::super::engine_log::{EngineLog, Pool};
use super::super::records::{self, Meta};
use super::super::stats::RecoveryStats;
use crate::buffer::{Access, WriteCause};
use crate::error::{Error, Result};
use crate::format::control::Control;
use crate::format::{page, PageId, TxnId};
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::sched::IoClass;
use crate::wal::format::{segment_file_name, Layout};
use crate::wal::{Record, Wal, WalOptions};

/// What replay leaves for open: the WAL, open at the end of the log, the
/// tree's root state, the next transaction id and what replay did.
pub(super) struct Recovered<S: Storage> {
    pub(super) wal: Wal<S>,
    pub(super) meta: Meta,
    pub(super) next_txn: TxnId,
    /// The latest commit time replayed (0 for none).
    pub(super) last_commit_us: u64,
    /// Pages the replayed commits changed.
    pub(super) changed: super::super::checkpoint::summary::PageSet,
    pub(super) stats: RecoveryStats,
}

/// Opens the WAL of `control`'s checkpoint and replays it into `pool`.
///
/// # Errors
/// The WAL's errors ([`Error::Corruption`] for damage that is not a torn
/// tail), and the pool's.
pub(super) fn recover<S: Storage>(
    storage: &S,
    pool: &Pool<S>,
    log: &EngineLog<S>,
    wal_opts: WalOptions,
    control: &Control,
) -> Result<Recovered<S>> {
    let mut meta = Meta {
        root: control.root_page,
        page_count: control.page_count,
        freelist: control.freelist_head,
        catalog: control.catalog,
        free_pages: control.free_pages,
        compaction: control.compaction,
    };
    let started = Instant::now();
    let pages_read_before = pool.stats().pages_read;
    let mut replay = Replay::new(pool, log, control.page_count);
    let layout = Layout {
        segment_bytes: wal_opts.segment_bytes,
    };
    // Errors name the segment wherever the process's working directory is
    // when they are read.
    let wal_dir = std::path::absolute(&wal_opts.dir).unwrap_or_else(|_| wal_opts.dir.clone());
    let (wal, end) = Wal::open(storage.clone(), wal_opts, control.redo_lsn, |rec| {
        replay
            .record(&rec, &mut meta)
            .map_err(|e| name_record(e, &wal_dir, layout, rec.lsn))
    })?;
    replay.finish(&mut meta)?;
    // Pages on disk are written only after their log: one newer than the
    // whole log proves part of it missing.
    pool.check_reads_within(end)?;
    // A page replay changed in memory has passed no read's check: a record
    // with a right checksum but a wrong page (a bug that logged it, a
    // crafted log) is refused here, before the page is used or written
    // out. A page replay wrote out is checked when it is read again.
    for page in replay.changed.pages() {
        pool.check_cached(page)?;
    }
    let discarded = wal.discarded_tail();
    let stats = RecoveryStats {
        wal_bytes: end.get() - control.redo_lsn.get(),
        torn_tail_lsn: discarded.map(|d| d.from.get()),
        torn_tail_bytes: discarded.map_or(0, |d| d.bytes),
        torn_tail_records: discarded.map_or(0, |d| d.records),
        pages_read: pool.stats().pages_read - pages_read_before,
        micros: started.elapsed().as_micros() as u64,
        ..replay.stats
    };
    assert!(
        stats.read_ahead_pages <= stats.pages_read,
        "pages read ahead are pages read"
    );
    Ok(Recovered {
        wal,
        meta,
        next_txn: replay.max_txn.next(),
        last_commit_us: replay.last_commit_us,
        changed: std::mem::take(&mut replay.changed),
        stats,
    })
}

/// Names the segment file and offset of the record at `lsn` in a decoder's
/// error, which knows neither (its path is `wal`, its offset 0).
fn name_record(e: Error, dir: &Path, layout: Layout, lsn: Lsn) -> Error {
    match e {
        Error::Corruption {
            path,
            offset: 0,
            page,
            detail,
        } if path == Path::new("wal") => Error::Corruption {
            path: dir.join(segment_file_name(layout.segment_of(lsn))),
            offset: layout.file_offset(lsn),
            page,
            detail: format!("{detail} (met at the record at LSN {lsn})"),
        },
        e => e,
    }
}

/// Redo: buffers each transaction's page records until its commit, then
/// applies them to pages whose LSN is below the commit's.
///
/// An image record for a page not in the cache is installed, not read: every
/// change since the redo point is in the log, so the image and the records
/// after it give the page's final state whatever the data file holds (older,
/// newer or torn). The FPI rule makes a page's first record since the redo
/// point an image, so replay reads only pages it evicted and meets again in a
/// delta, and those it reads ahead, in batches, from a lookahead of commits.
struct Replay<'a, S: Storage> {
    pool: &'a Pool<S>,
    log: &'a EngineLog<S>,
    pending: HashMap<TxnId, Vec<Vec<u8>>>,
    max_txn: TxnId,
    /// The latest commit time seen.
    last_commit_us: u64,
    /// Pages the replayed commits changed.
    changed: super::super::checkpoint::summary::PageSet,
    /// The pages of the commit being queued, each once.
    commit_pages: HashSet<PageId>,
    /// Pages a queued commit first changes with an image: how many such
    /// commits are queued.
    queued_images: HashMap<PageId, u32>,
    stats: RecoveryStats,
    /// Commits replayed since the pool's dirty share was last looked at.
    since_clean: u32,
    /// Committed transactions read but not applied yet (the lookahead).
    queue: VecDeque<Committed>,
    /// Pages to read ahead for the queued commits.
    wanted: Vec<PageId>,
    /// The largest page count met so far (`CONTROL`'s, then the commits'):
    /// a commit grows it by at most the pages it logged.
    page_count_max: u64,
}

/// A committed transaction waiting in replay's lookahead.
struct Committed {
    payloads: Vec<Vec<u8>>,
    /// The pages it first changes with an image (counted in `queued_images`).
    images: Vec<PageId>,
    /// The commit record's end: the LSN its pages are stamped with.
    lsn: Lsn,
    meta: Meta,
}

/// Commits replay reads ahead of the one it applies.
const REPLAY_LOOKAHEAD: usize = 256;
/// Pages replay reads ahead in one batch of concurrent reads.
const REPLAY_READ_BATCH: usize = 32;

/// Replay looks at the pool's dirty share once per this many commits.
const REPLAY_CLEAN_EVERY: u32 = 16;

impl<'a, S: Storage> Replay<'a, S> {
    fn new(pool: &'a Pool<S>, log: &'a EngineLog<S>, page_count: u64) -> Self {
        Replay {
            pool,
            log,
            pending: Default::default(),
            max_txn: TxnId::new(0),
            last_commit_us: 0,
            changed: Default::default(),
            commit_pages: HashSet::new(),
            queued_images: HashMap::new(),
            stats: RecoveryStats::default(),
            since_clean: 0,
            queue: Default::default(),
            wanted: Vec::new(),
            page_count_max: page_count,
        }
    }

    /// Refuses a commit whose page count grows past what its records can
    /// explain: each page a transaction allocates gets a full image in its
    /// records, so the count grows by at most the pages it logged.
    fn check_growth(&mut self, txn: TxnId, m: &Meta, pages_logged: usize) -> Result<()> {
        let allowed = self.page_count_max.saturating_add(pages_logged as u64);
        if m.page_count > allowed {
            return Err(Error::Corruption {
                path: "wal".into(),
                offset: 0,
                page: None,
                detail: format!(
                    "commit record's page count {} (transaction {txn}) is past the {} pages \
                     before it and the {pages_logged} it logged",
                    m.page_count, self.page_count_max
                ),
            });
        }
        self.page_count_max = self.page_count_max.max(m.page_count);
        assert!(self.page_count_max <= crate::constants::PAGE_COUNT_MAX);
        Ok(())
    }

    /// Notes the pages of one commit's records: each as changed (for the
    /// changed-page summary), and as wanted when the commit changes it
    /// first with a delta and the cache does not hold it, so it is read
    /// ahead, with others, while the commits before this one are applied
    /// (not when a queued commit installs an image of it first). Returns
    /// the pages it installs images of.
    fn note_pages(&mut self, payloads: &[Vec<u8>], page_count: u64) -> Result<Vec<PageId>> {
        self.commit_pages.clear();
        let mut images = Vec::new();
        for payload in payloads {
            let r = records::decode_page(payload)?;
            if r.page.get() >= page_count {
                return Err(Error::Corruption {
                    path: "wal".into(),
                    offset: 0,
                    page: None,
                    detail: format!(
                        "a page record names page {}, past the {page_count} pages its commit \
                         leaves",
                        r.page
                    ),
                });
            }
            if !self.commit_pages.insert(r.page) {
                continue;
            }
            self.changed.insert(r.page);
            if r.full {
                *self.queued_images.entry(r.page).or_default() += 1;
                images.push(r.page);
            } else if !self.queued_images.contains_key(&r.page) && !self.pool.contains(r.page) {
                self.wanted.push(r.page);
            }
        }
        Ok(images)
    }

    /// Notes the time a commit or checkpoint record carries: a checkpoint's
    /// is its last commit's, so a replay that meets no commit still learns
    /// the time of the last one.
    fn note_time(&mut self, payload: &[u8]) {
        let time = records::decode_commit_time(payload).unwrap_or(0);
        self.last_commit_us = self.last_commit_us.max(time);
    }

    fn record(&mut self, rec: &Record, meta: &mut Meta) -> Result<()> {
        self.log.replayed_to(rec.end());
        match rec.kind {
            records::PAGE => {
                let txn = records::decode_page(&rec.payload)?.txn;
                self.max_txn = self.max_txn.max(txn);
                self.pending
                    .entry(txn)
                    .or_default()
                    .push(rec.payload.clone());
            }
            records::COMMIT => {
                let (txn, m) = records::decode_commit(&rec.payload)?;
                self.max_txn = self.max_txn.max(txn);
                self.note_time(&rec.payload);
                let payloads = self.pending.remove(&txn).unwrap_or_default();
                let images = self.note_pages(&payloads, m.page_count)?;
                self.check_growth(txn, &m, self.commit_pages.len())?;
                if self.wanted.len() >= REPLAY_READ_BATCH {
                    let loaded = self.pool.read_batch(&self.wanted, Access::Normal) as u64;
                    assert!(
                        loaded <= self.wanted.len() as u64,
                        "a batch reads what it is asked"
                    );
                    self.stats.read_ahead_pages += loaded;
                    self.stats.read_ahead_batch_max = self.stats.read_ahead_batch_max.max(loaded);
                    self.wanted.clear();
                }
                self.queue.push_back(Committed {
                    payloads,
                    images,
                    lsn: rec.end(),
                    meta: m,
                });
                while self.queue.len() > REPLAY_LOOKAHEAD {
                    self.apply_next(meta)?;
                }
                assert!(
                    self.queue.len() <= REPLAY_LOOKAHEAD,
                    "the lookahead is bounded"
                );
            }
            records::CHECKPOINT => {
                records::decode_checkpoint(&rec.payload, rec.lsn)?;
                self.note_time(&rec.payload);
            }
            records::ABORT => {
                let txn = records::decode_abort(&rec.payload)?;
                self.pending.remove(&txn);
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the committed transactions still queued; replay is complete
    /// after it.
    fn finish(&mut self, meta: &mut Meta) -> Result<()> {
        while !self.queue.is_empty() {
            self.apply_next(meta)?;
        }
        Ok(())
    }

    /// Applies the oldest queued commit.
    fn apply_next(&mut self, meta: &mut Meta) -> Result<()> {
        let Some(c) = self.queue.pop_front() else {
            return Ok(());
        };
        // Whether a page needs this commit is decided at its first record,
        // before any is applied: applying marks the page at the commit's
        // LSN, which must not hide the transaction's later records for the
        // same page.
        let mut needs: HashMap<PageId, bool> = HashMap::new();
        for payload in &c.payloads {
            self.apply(payload, c.lsn, &mut needs)?;
        }
        for page in &c.images {
            if let Some(n) = self.queued_images.get_mut(page) {
                assert!(*n > 0, "a queued image is counted until its commit applies");
                *n -= 1;
                if *n == 0 {
                    self.queued_images.remove(page);
                }
            }
        }
        self.stats.transactions += 1;
        *meta = c.meta;
        self.make_room()
    }

    /// Keeps half the pool clean while replay dirties it: the coldest dirty
    /// pages go out in batches of concurrent writes, so replay does not stop
    /// for one synchronous eviction write per page it brings in.
    fn make_room(&mut self) -> Result<()> {
        self.since_clean += 1;
        if self.since_clean < REPLAY_CLEAN_EVERY {
            return Ok(());
        }
        self.since_clean = 0;
        let frames = self.pool.frames();
        if self.pool.dirty_pages() * 2 >= frames {
            self.pool
                .clean_coldest((frames / 8).max(8), IoClass::Urgent, WriteCause::Recovery)?;
        }
        Ok(())
    }

    fn apply(&mut self, payload: &[u8], lsn: Lsn, needs: &mut HashMap<PageId, bool>) -> Result<()> {
        let r = records::decode_page(payload)?;
        if needs.get(&r.page) == Some(&false) {
            return Ok(());
        }
        let install = r.full && !needs.contains_key(&r.page) && !self.pool.contains(r.page);
        let mut p = if install {
            self.stats.pages_from_images += 1;
            self.pool.create(r.page)?
        } else {
            match self.pool.write(r.page) {
                Ok(p) => p,
                // A torn, never-written or missing page is rebuilt from its image.
                Err(Error::Corruption { .. } | Error::UnexpectedEof { .. }) if r.full => {
                    self.pool.create(r.page)?
                }
                Err(e) => return Err(e),
            }
        };
        let need = *needs
            .entry(r.page)
            .or_insert_with(|| page::page_lsn(p.data()) < lsn);
        if !need {
            return Ok(());
        }
        // A page takes a commit only if it is older (or is being given this
        // commit's records already).
        assert!(
            page::page_lsn(p.data()) <= lsn,
            "replay never moves a page back"
        );
        r.apply(p.data_mut())?;
        p.mark_dirty(lsn);
        self.stats.page_records += 1;
        Ok(())
    }
}
