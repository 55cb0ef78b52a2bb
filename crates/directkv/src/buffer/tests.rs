//! The buffer pool over a real data file with direct I/O: pages round-trip
//! through eviction and reopening; no page is written before the log is durable
//! up to its LSN (the WAL rule); a flush visits only dirty pages, however many
//! are cached (invariant 7); a scan leaves the hot set cached; a damaged or
//! misdirected page is an error naming file and offset while others stay
//! readable; concurrent latched updates lose nothing.
//!
//! The files live in a temporary directory (`tempfile::tempdir()`); where its
//! filesystem refuses `O_DIRECT`, the data file falls back to buffered I/O
//! (`DirectIo::Auto`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Access, BufferPool, LogFlusher, WriteCause};
use crate::error::{Error, Result};
use crate::format::page::{self, PageType, PAGE_HEADER_BYTES};
use crate::format::PageId;
use crate::io::{DirectFile, DirectIo, FileOptions, OsStorage, SyncMethod};
use crate::lsn::Lsn;
use crate::sched::{IoClass, SchedOptions, ScheduledFile, Scheduler};

const DB: [u8; 16] = *b"buffer-pool-test";
const PAGE: u32 = 8192;

/// A log that is durable up to what `flush_to` was asked for.
#[derive(Default)]
struct FakeLog {
    durable: AtomicU64,
    flushes: AtomicU64,
}

impl LogFlusher for FakeLog {
    fn durable_lsn(&self) -> Lsn {
        Lsn::new(self.durable.load(Ordering::SeqCst))
    }
    fn flush_to(&self, lsn: Lsn) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.durable.fetch_max(lsn.get(), Ordering::SeqCst);
        Ok(())
    }
}

/// The log of a reopened pool: durable past every page written before (the
/// pool refuses a page newer than its log).
fn reopened_log() -> Arc<FakeLog> {
    Arc::new(FakeLog {
        durable: AtomicU64::new(1 << 40),
        ..FakeLog::default()
    })
}

type Pool = BufferPool<OsStorage, FakeLog>;

fn pool(dir: &Path, frames: usize, log: Arc<FakeLog>) -> Pool {
    pool_scheduled(dir, frames, log, Scheduler::fifo())
}

fn pool_scheduled(dir: &Path, frames: usize, log: Arc<FakeLog>, sched: Arc<Scheduler>) -> Pool {
    let file = DirectFile::open(
        dir.join("data"),
        &FileOptions {
            create: true,
            direct_io: DirectIo::Auto,
            sync: SyncMethod::Fdatasync,
            ..FileOptions::default()
        },
    )
    .expect("data file");
    let file = ScheduledFile::new(file, sched);
    BufferPool::new(file, PAGE, frames * PAGE as usize, DB, log).expect("pool")
}

fn put_pattern(pool: &Pool, no: u64, value: u64, lsn: u64) {
    let mut p = pool.create(PageId::new(no)).expect("create");
    page::init(p.data_mut(), PageType::Leaf);
    p.data_mut()[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8].copy_from_slice(&value.to_le_bytes());
    p.mark_dirty(Lsn::new(lsn));
}

fn get_value(pool: &Pool, no: u64, access: Access) -> u64 {
    let p = pool.read(PageId::new(no), access).expect("read");
    let b = &p.data()[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8];
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

#[test]
fn pages_survive_eviction_and_reopen_and_obey_the_wal_rule() {
    let dir = tempfile::tempdir().expect("dir");
    let log = Arc::new(FakeLog::default());
    let p = pool(dir.path(), 16, Arc::clone(&log));
    for no in 0..200u64 {
        put_pattern(&p, no, no * 3, 1000 + no);
    }
    let s = p.stats();
    assert!(s.evictions >= 184 && s.pages_written >= 184, "{s:?}");
    assert!(
        log.durable_lsn() >= Lsn::new(1000 + 183),
        "evicted pages forced the log first"
    );
    assert!(s.wal_rule_flushes > 0);
    for no in (0..200u64).rev() {
        assert_eq!(get_value(&p, no, Access::Normal), no * 3);
    }
    p.flush_all().expect("flush");
    drop(p);
    let p = pool(dir.path(), 32, reopened_log());
    for no in 0..200u64 {
        assert_eq!(get_value(&p, no, Access::Normal), no * 3);
    }
}

/// A pool of 1100 frames holding pages 0..1000, written back, and then ten
/// pages (0, 100, … 900) changed at LSNs 5000 + page number.
fn pool_with_ten_dirty(dir: &Path, sched: Arc<Scheduler>) -> Pool {
    let p = pool_scheduled(dir, 1100, Arc::new(FakeLog::default()), sched);
    for no in 0..1000u64 {
        put_pattern(&p, no, no, 1 + no);
    }
    p.flush_all().expect("flush");
    assert_eq!(p.stats().dirty_pages, 0);
    for no in (0..1000u64).step_by(100) {
        let mut pg = p.write(PageId::new(no)).expect("write");
        pg.data_mut()[PAGE_HEADER_BYTES] ^= 1;
        pg.mark_dirty(Lsn::new(5000 + no));
    }
    p
}

#[test]
fn flushing_visits_only_dirty_pages() {
    let dir = tempfile::tempdir().expect("dir");
    let p = pool_with_ten_dirty(dir.path(), Scheduler::fifo());
    let before = p.stats();
    assert_eq!(p.stats().dirty_pages, 10);
    assert_eq!(p.oldest_dirty_lsn(), Some(Lsn::new(5000)));
    assert_eq!(p.flush_all().expect("flush"), 10);
    let after = p.stats();
    assert_eq!(
        after.flush_list_visits - before.flush_list_visits,
        10,
        "1000 cached pages, 10 dirty: the flush looked at 10"
    );
    assert_eq!(after.pages_written - before.pages_written, 10);
}

#[test]
fn a_checkpoint_writes_only_pages_dirtied_before_it_and_the_cleaner_only_cold_ones() {
    let dir = tempfile::tempdir().expect("dir");
    // Every request goes through the scheduler under its class.
    let sched = Arc::new(Scheduler::default());
    let p = pool_with_ten_dirty(dir.path(), Arc::clone(&sched));
    // A checkpoint starting at 5400 owes the five changed by then (the one
    // whose change ends exactly there included).
    assert_eq!(p.dirty_through(Lsn::new(5400)), 5);
    let base = sched.stats();
    let since = |class: IoClass| {
        let st = sched.stats();
        let c = class as usize;
        (
            st.admitted[c] - base.admitted[c],
            st.bytes[c] - base.bytes[c],
        )
    };
    let before = p.stats();
    let bg = IoClass::Background;
    assert_eq!(
        p.flush_through(Lsn::new(5400), 3, bg, WriteCause::Checkpoint)
            .expect("flush"),
        3
    );
    assert_eq!(
        p.flush_through(Lsn::new(5400), 100, bg, WriteCause::Checkpoint)
            .expect("flush"),
        2
    );
    assert_eq!(
        p.flush_through(Lsn::new(5400), 100, bg, WriteCause::Checkpoint)
            .expect("flush"),
        0
    );
    // Written in groups: one admission per group, for all its bytes.
    let page = p.page_bytes() as u64;
    assert_eq!(since(bg), (2, 5 * page));
    let after = p.stats();
    assert_eq!(after.pages_written - before.pages_written, 5);
    assert_eq!(after.flush_list_visits - before.flush_list_visits, 5);
    assert_eq!(after.dirty_pages, 5);
    assert_eq!(p.oldest_dirty_lsn(), Some(Lsn::new(5500)));

    // The cleaner writes dirty pages only among the coldest frames: the hot
    // pages touched again and again stay dirty until they cool.
    for _ in 0..3 {
        for no in (500..1000u64).step_by(100) {
            get_value(&p, no, Access::Normal);
        }
    }
    assert_eq!(
        p.clean_cold(100).expect("clean"),
        0,
        "no dirty page is cold"
    );
    assert_eq!(p.clean_cold(p.frames()).expect("clean"), 5);
    assert_eq!(p.stats().dirty_pages, 0);
    assert_eq!(since(bg).1, 10 * page, "cleaner writes are Background");
    assert_eq!(since(IoClass::Urgent).0, 0);
    // An explicit flush is Urgent, a miss is a Read.
    put_pattern(&p, 7, 7, 9000);
    p.flush_all().expect("flush");
    assert_eq!(since(IoClass::Urgent).0, 2, "a write and a sync");
}

#[test]
fn scan_does_not_flush_the_hot_set() {
    let dir = tempfile::tempdir().expect("dir");
    let p = pool(dir.path(), 64, Arc::new(FakeLog::default()));
    for no in 0..1000u64 {
        put_pattern(&p, no, no, 1 + no);
    }
    p.flush_all().expect("flush");
    let hot: Vec<u64> = (0..30).collect();
    let round = |p: &Pool| {
        let before = p.stats();
        for _ in 0..5 {
            for &no in &hot {
                assert_eq!(get_value(p, no, Access::Normal), no);
            }
        }
        let after = p.stats();
        let hits = after.hits - before.hits;
        hits as f64 / (hits + after.misses - before.misses) as f64
    };
    round(&p);
    let warm = round(&p);
    assert!(warm > 0.99, "warm hit ratio {warm}");
    // A scan of 15x the cache, several accesses per page as a cursor makes.
    for no in 100..1000u64 {
        for _ in 0..3 {
            assert_eq!(get_value(&p, no, Access::Scan), no);
        }
    }
    let after_scan = round(&p);
    assert!(
        after_scan >= warm - 0.10,
        "hit ratio {warm} before the scan, {after_scan} after"
    );
}

#[test]
fn damaged_and_misdirected_pages_are_errors_not_data() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("dir");
    let p = pool(dir.path(), 32, Arc::new(FakeLog::default()));
    for no in 0..8u64 {
        put_pattern(&p, no, 100 + no, 1);
    }
    p.flush_all().expect("flush");
    drop(p);
    let raw = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("data"))
        .expect("raw");
    // Bit rot in page 2; page 3's image copied over page 5 (misdirected write).
    let mut b = [0u8; 1];
    raw.read_exact_at(&mut b, 2 * 8192 + 4000).expect("read");
    raw.write_all_at(&[b[0] ^ 0x40], 2 * 8192 + 4000)
        .expect("write");
    let mut img = vec![0u8; 8192];
    raw.read_exact_at(&mut img, 3 * 8192).expect("read");
    raw.write_all_at(&img, 5 * 8192).expect("write");
    raw.sync_all().expect("sync");
    let p = pool(dir.path(), 32, reopened_log());
    for (no, what) in [(2u64, "checksum"), (5, "misdirected")] {
        match p
            .read(PageId::new(no), Access::Normal)
            .err()
            .expect("a bad page is an error")
        {
            Error::Corruption {
                path,
                offset,
                page,
                detail,
            } => {
                assert!(path.ends_with("data"));
                assert_eq!(offset, no * 8192);
                assert_eq!(page, Some(no));
                assert!(detail.contains(what), "{detail}");
            }
            other => panic!("page {no}: {other}"),
        }
    }
    for no in [0u64, 1, 3, 4, 6, 7] {
        assert_eq!(get_value(&p, no, Access::Normal), 100 + no);
    }
}

/// Writers increment counters on pages several times as many as the
/// frames and spread over every shard of the page table (so nearly every
/// access evicts a page of another shard), while readers hit and scan the
/// same pages: no increment is lost.
#[test]
fn concurrent_updates_through_latches_lose_nothing() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 2000;
    const PAGES: u64 = 200;
    let dir = tempfile::tempdir().expect("dir");
    let log = Arc::new(FakeLog::default());
    let p = Arc::new(pool(dir.path(), 16, log));
    for no in 0..PAGES {
        put_pattern(&p, no, 0, 1);
    }
    let lsn = Arc::new(AtomicU64::new(10));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (p, lsn) = (Arc::clone(&p), Arc::clone(&lsn));
            std::thread::spawn(move || {
                let mut x = t * 7919 + 1;
                for _ in 0..ROUNDS {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let no = (x >> 33) % PAGES;
                    let mut pg = p.write(PageId::new(no)).expect("write");
                    let body = &mut pg.data_mut()[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8];
                    let v = u64::from_le_bytes((&*body).try_into().expect("8")) + 1;
                    body.copy_from_slice(&v.to_le_bytes());
                    pg.mark_dirty(Lsn::new(lsn.fetch_add(1, Ordering::SeqCst)));
                }
            })
        })
        .collect();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = [Access::Normal, Access::Scan]
        .into_iter()
        .map(|access| {
            let (p, done) = (Arc::clone(&p), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut no = 0;
                while !done.load(Ordering::Acquire) {
                    no = (no + 37) % PAGES;
                    let v = get_value(&p, no, access);
                    assert!(v <= THREADS * ROUNDS, "page {no} holds {v}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    done.store(true, Ordering::Release);
    for h in readers {
        h.join().expect("reader");
    }
    let total: u64 = (0..PAGES).map(|no| get_value(&p, no, Access::Normal)).sum();
    assert_eq!(total, THREADS * ROUNDS);
}

/// The data file grows ahead of use while pages past its end are created and
/// written in Background groups at the same time: the extender never zeroes
/// a written page, never deadlocks with a writer holding a Background permit
/// (it takes permits holding no lock), and the file ends allocated past
/// every page in use.
#[test]
fn growth_ahead_of_use_races_writes_past_the_end_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    // A tight scheduler: one Background request in flight, a low rate.
    let sched = Arc::new(Scheduler::new(SchedOptions {
        background_inflight_bytes: 64 << 10,
        background_rate_bytes: 8 << 20,
        ..SchedOptions::default()
    }));
    let log = Arc::new(FakeLog::default());
    let p = Arc::new(pool_scheduled(dir.path(), 64, log, Arc::clone(&sched)));
    p.set_extension(256);
    let pages = 3_000u64;
    let made = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        let (p2, made2) = (Arc::clone(&p), Arc::clone(&made));
        s.spawn(move || {
            while made2.load(Ordering::SeqCst) < pages {
                p2.extend_ahead(made2.load(Ordering::SeqCst), IoClass::Background)
                    .expect("extend");
            }
        });
        for no in 0..pages {
            put_pattern(&p, no, no * 7 + 1, 1 + no);
            made.store(no + 1, Ordering::SeqCst);
            if no % 40 == 39 {
                p.flush_through(
                    Lsn::new(no + 1),
                    40,
                    IoClass::Background,
                    WriteCause::Checkpoint,
                )
                .expect("flush");
            }
        }
    });
    p.flush_all().expect("flush");
    let st = p.stats();
    assert!(st.extensions > 0, "{st:?}");
    assert!(st.allocated_pages >= pages, "{st:?}");
    let len = std::fs::metadata(dir.path().join("data"))
        .expect("len")
        .len();
    // An extension still under way (paced) has reserved past the
    // zero-filled end.
    assert!(len >= st.allocated_pages * u64::from(PAGE), "{len} {st:?}");
    drop(p);
    let p = pool(dir.path(), 64, reopened_log());
    for no in 0..pages {
        assert_eq!(get_value(&p, no, Access::Normal), no * 7 + 1, "page {no}");
    }
}

/// Pages reach the data file only after their log: a page on disk newer
/// than the whole durable log proves that log lost, and is refused, never
/// served.
#[test]
fn a_page_newer_than_the_durable_log_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let p = pool(dir.path(), 32, Arc::new(FakeLog::default()));
    put_pattern(&p, 3, 33, 5000);
    put_pattern(&p, 4, 44, 10);
    p.flush_all().expect("flush");
    drop(p);
    // The log that is left reaches LSN 100 only.
    let short = Arc::new(FakeLog::default());
    short.flush_to(Lsn::new(100)).expect("flush");
    let p = pool(dir.path(), 32, short);
    assert_eq!(
        get_value(&p, 4, Access::Normal),
        44,
        "an older page is fine"
    );
    match p
        .read(PageId::new(3), Access::Normal)
        .err()
        .expect("refused")
    {
        Error::Corruption { offset, detail, .. } => {
            assert_eq!(offset, 3 * u64::from(PAGE));
            assert!(
                detail.contains("past the end of the durable log"),
                "{detail}"
            );
        }
        other => panic!("expected Corruption, got {other:?}"),
    }
}

/// The cleaner's policy (issue 22): a page changed before every pass is never
/// its to write, nor is anything while free frames are plentiful; when the
/// pool runs short it writes the cold dirty pages; a checkpoint writes the
/// hot one; the writes by cause add up to the pages written.
#[test]
fn the_cleaner_writes_only_cold_pages_and_only_when_the_pool_runs_short() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("dir");
    let p = pool(dir.path(), 64, Arc::new(FakeLog::default()));
    let window = 8;
    let touch_hot = |v: u64| {
        let mut g = p.write(PageId::new(1)).expect("write");
        g.data_mut()[PAGE_HEADER_BYTES..PAGE_HEADER_BYTES + 8].copy_from_slice(&v.to_le_bytes());
        g.mark_dirty(Lsn::new(1000 + v));
    };
    put_pattern(&p, 1, 0, 10);
    for v in 1..20 {
        touch_hot(v);
        assert_eq!(p.clean_cold(window).expect("pass"), 0, "free frames abound");
    }
    // Cold dirty pages fill the pool: it runs short of clean frames.
    for no in 2..64u64 {
        put_pattern(&p, no, no, 100 + no);
    }
    let mut cleaned = 0;
    for v in 20..40 {
        touch_hot(v);
        cleaned += p.clean_cold(window).expect("pass");
    }
    assert!(cleaned >= window, "cold pages were written: {cleaned}");
    let raw = std::fs::File::open(dir.path().join("data")).expect("data");
    let on_disk = |no: u64| {
        let mut b = [0u8; 8];
        raw.read_exact_at(&mut b, no * u64::from(PAGE) + PAGE_HEADER_BYTES as u64)
            .map(|()| u64::from_le_bytes(b))
            .unwrap_or(0)
    };
    assert_eq!(on_disk(1), 0, "the hot page was never written");
    let s = p.stats();
    assert_eq!(s.writes_by_cause.cleaner, cleaned as u64, "{s:?}");
    // A checkpoint writes what its redo point needs, the hot page included.
    let n = p
        .flush_through(
            Lsn::new(1 << 40),
            1000,
            IoClass::Urgent,
            WriteCause::Checkpoint,
        )
        .expect("checkpoint writes");
    assert_eq!(on_disk(1), 39, "the checkpoint wrote the hot page");
    let s = p.stats();
    assert_eq!(s.writes_by_cause.checkpoint, n as u64, "{s:?}");
    assert_eq!(s.writes_by_cause.total(), s.pages_written, "{s:?}");
    assert_eq!(s.dirty_pages, 0);
}
