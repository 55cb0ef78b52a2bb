//! Tests of [`super`]: the unit tests of `commit.rs`, kept beside it.

use std::path::Path;
use std::sync::Arc;

use super::super::super::checkpoint::summary::PageSet;
use super::*;
use crate::btree::tree::PagesMut;
use crate::buffer::BufferPool;
use crate::io::FileOptions;
use crate::sched::{ScheduledFile, Scheduler};
use crate::sim::SimStorage;
use crate::wal::{Wal, WalOptions, WalReader};

const WAL_DIR: &str = "/db/wal";
const SEGMENT_BYTES: u64 = 1 << 20;

/// Everything a [`CommitEnv`] borrows.
struct Parts {
    disk: SimStorage,
    log: Arc<EngineLog<SimStorage>>,
    pool: Pool<SimStorage>,
    shape: TreeShape,
    spare: SpareBuffers,
    clock: Counters,
    summaries: Summaries,
}

/// A pool of 16 pages of 4 KiB and an open log on a fresh simulated
/// disk, the commit clock starting at `clock_us`.
fn parts(clock_us: u64) -> Parts {
    let disk = SimStorage::new();
    let opts = FileOptions {
        create: true,
        ..FileOptions::default()
    };
    let file = disk.open(Path::new("/db/data"), &opts).expect("data file");
    let file = ScheduledFile::new(file, Scheduler::fifo());
    let log = Arc::new(EngineLog::replaying(Lsn::ZERO));
    let pool = BufferPool::new(file, 4096, 16 * 4096, [7; 16], Arc::clone(&log)).expect("pool");
    let mut wal_opts = WalOptions::new(WAL_DIR, [7; 16]);
    wal_opts.segment_bytes = SEGMENT_BYTES;
    wal_opts.background_prepare = false;
    let (wal, _) = Wal::open(disk.clone(), wal_opts, Lsn::ZERO, |_| Ok(())).expect("wal");
    log.open(wal);
    let summaries = Summaries::open(
        &disk,
        Path::new("/db"),
        Lsn::ZERO,
        PageSet::default(),
        Scheduler::fifo(),
    )
    .expect("summaries");
    Parts {
        disk,
        log,
        pool,
        shape: TreeShape::new(PageId::new(1)),
        spare: SpareBuffers::default(),
        clock: Counters::starting_at(TxnId::new(1), clock_us),
        summaries,
    }
}

fn env(p: &Parts) -> CommitEnv<'_, SimStorage> {
    CommitEnv {
        pool: &p.pool,
        log: &p.log,
        shape: &p.shape,
        spare: &p.spare,
        clock: &p.clock,
        summaries: &p.summaries,
        compress_page_images: false,
    }
}

/// A tree of a root (page 1) past the head page, nothing free.
const META: Meta = Meta {
    root: PageId::new(1),
    page_count: 2,
    freelist: PageId::ZERO,
    catalog: PageId::ZERO,
    free_pages: Some(0),
    compaction: None,
};

/// Runs one transaction that applies `change` and commits; returns the
/// commit's LSN and the tree after it.
fn commit_one(
    p: &Parts,
    meta: Meta,
    txn: u64,
    change: impl FnOnce(&mut CommitCtx<'_, SimStorage>) -> PageId,
) -> Result<(Lsn, Meta, PageId)> {
    let horizon = p.log.wal().appended_lsn();
    let mut ctx = CommitCtx::new(env(p), meta, TxnId::new(txn), horizon);
    let page = change(&mut ctx);
    let after = ctx.meta;
    let lsn = ctx.commit()?;
    Ok((lsn, after, page))
}

/// The commit records in the log, in log order: (end LSN, time).
fn commit_records(p: &Parts) -> Vec<(Lsn, u64)> {
    let mut r = WalReader::new(
        p.disk.clone(),
        Path::new(WAL_DIR),
        SEGMENT_BYTES,
        None,
        Lsn::ZERO,
    );
    let mut out = Vec::new();
    while let Some(rec) = r.next_user_record().expect("the log reads back") {
        if rec.kind == records::COMMIT {
            let t = records::decode_commit_time(&rec.payload).expect("a time");
            out.push((rec.end(), t));
        }
    }
    out
}

fn fill(page: &mut [u8], byte: u8) {
    page[64..128].fill(byte);
}

/// Commits get rising LSNs and commit times that never go back, even
/// when the wall clock is behind the last commit's time; every changed
/// page is stamped with its commit and noted for the next summary.
#[test]
fn commits_get_rising_lsns_and_times_and_note_their_pages() {
    // The last commit (replayed) is an hour ahead of the wall clock.
    let ahead_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros() as u64
        + 3_600_000_000;
    let p = parts(ahead_us);
    let (lsn1, meta, page) = commit_one(&p, META, 1, |c| {
        c.allocate(|b| fill(b, 1)).expect("allocate")
    })
    .expect("first commit");
    assert_eq!(page, PageId::new(2), "the first page past the tree");
    assert_eq!(meta.page_count, 3, "the allocation grew the tree");
    let (lsn2, _, _) = commit_one(&p, meta, 2, |c| {
        c.modify(page, |b| fill(b, 2)).expect("modify");
        page
    })
    .expect("second commit");
    assert!(lsn2 > lsn1, "a later commit ends later in the log");
    p.log.wal().flush(lsn2).expect("flush");
    let recs = commit_records(&p);
    assert_eq!(
        recs.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![lsn1, lsn2]
    );
    assert!(recs[0].1 >= ahead_us, "a commit time never goes back");
    assert!(recs[1].1 >= recs[0].1, "commit times rise with LSNs");
    let read = p.pool.read(page, Access::Normal).expect("page");
    assert!(
        read.data()[64..128].iter().all(|&b| b == 2),
        "the change is in"
    );
    drop(read);
    let (_, noted) = p.summaries.cut(lsn2);
    assert!(
        noted.pages().any(|n| n == page),
        "the changed page is noted"
    );
}

/// A commit whose record cannot be appended (the log failed under an
/// earlier flush) returns the error and puts every page it changed
/// back: no reader sees a change of a transaction that did not commit.
#[test]
fn a_failed_commit_append_leaves_no_change_visible() {
    let p = parts(0);
    let (lsn1, meta, page) = commit_one(&p, META, 1, |c| {
        c.allocate(|b| fill(b, 1)).expect("allocate")
    })
    .expect("first commit");
    let failed = commit_one(&p, meta, 2, |c| {
        c.modify(page, |b| fill(b, 2)).expect("modify");
        // The page record is in; now the log fails under a flush (its
        // sync fails), so the commit record's append is refused.
        p.disk.fail_sync_linux_style(1);
        let wal = p.log.wal();
        assert!(wal.flush(wal.appended_lsn()).is_err(), "the sync fails");
        page
    });
    assert!(failed.is_err(), "the commit reports the failed append");
    let read = p.pool.read(page, Access::Normal).expect("page");
    assert!(
        read.data()[64..128].iter().all(|&b| b == 1),
        "the page is as the last commit left it"
    );
    drop(read);
    assert_eq!(p.shape.root(), META.root, "the root did not move");
    let (_, noted) = p.summaries.cut(lsn1);
    assert_eq!(
        noted.pages().collect::<Vec<_>>(),
        vec![page],
        "the first commit noted it"
    );
}
