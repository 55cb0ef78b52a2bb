//! Unit tests of fixing pages in the pool: the replacer's marks across
//! hits and passes, a frame that changes page, frames held while the
//! cleaner steps through an LSN, and loads or write-backs that fail or panic
//! part way, none of which may leave a frame behind. The pool runs over real
//! files in a temporary directory: the buffer layer sits below the simulator
//! and does not reach up to it.

use std::sync::Arc;

use super::*;
use crate::io::FileOptions;
use crate::io::OsStorage;
use crate::lsn::Lsn;

/// A log that is always durable.
struct DurableLog;

impl LogFlusher for DurableLog {
    fn durable_lsn(&self) -> Lsn {
        Lsn::new(u64::MAX)
    }
    fn flush_to(&self, _lsn: Lsn) -> Result<()> {
        Ok(())
    }
}

type Pool = BufferPool<OsStorage, DurableLog>;

fn pool() -> Pool {
    pool_with(Arc::new(DurableLog))
}

/// A pool of 16 frames of 4 KiB over a file in a temporary directory, with
/// `log`. The directory goes when this returns; the open file stays usable
/// until the pool closes it.
fn pool_with<L: LogFlusher>(log: Arc<L>) -> BufferPool<OsStorage, L> {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = FileOptions {
        create: true,
        ..FileOptions::default()
    };
    let file = OsStorage::default()
        .open(&dir.path().join("data"), &opts)
        .expect("data file");
    let file = crate::sched::ScheduledFile::new(file, crate::sched::Scheduler::fifo());
    BufferPool::new(file, 4096, 16 * 4096, [7; 16], log).expect("pool")
}

/// Claims and installs a frame for each of `pages`; all must succeed.
fn fill(pool: &Pool, pages: std::ops::Range<u64>) {
    for page in pages {
        let f = pool.claim_victim().expect("claim").expect("a frame");
        let guard = pool.install(f, PageId::new(page)).expect("installed");
        pool.frames[f.index()].valid.store(true, Ordering::Release);
        lock(&pool.replacer).loaded(f, Access::Normal);
        drop(guard);
        pool.unpin(f);
    }
}

/// Looks `page` up as a normal hit and lets it go; returns its frame.
fn hit(pool: &Pool, page: u64) -> FrameIndex {
    let (f, fixed) = pool
        .try_hit(PageId::new(page), Access::Normal, &Latch::Shared)
        .expect("a hit");
    drop(fixed);
    pool.unpin(f);
    f
}

/// A hit that promotes a frame marks it for the cleaner's pass: its
/// later hits in that pass leave it where it is. A new pass, or the
/// frame being pushed out of protected, ends the mark, and its next hit
/// moves it to protected's head again.
#[test]
fn a_promotion_holds_for_the_pass_or_until_the_frame_leaves_protected() {
    let pool = pool();
    fill(&pool, 0..16);
    let head = || lock(&pool.replacer).coldest().last().expect("frames");
    let protected = |f: FrameIndex| lock(&pool.replacer).is_protected(f);
    let mark = |f: FrameIndex| pool.frames[f.index()].promoted.load(Ordering::Acquire);
    let x = hit(&pool, 0);
    let y = hit(&pool, 1);
    assert_eq!(head(), y);
    assert_eq!(mark(x), 1, "promoted during pass 0");
    assert_eq!(hit(&pool, 0), x);
    assert_eq!(head(), y, "a marked frame keeps its place during the pass");

    let pass = lock(&pool.replacer).begin_pass();
    pool.pass.store(pass, Ordering::Release);
    assert_eq!(hit(&pool, 0), x);
    assert_eq!(head(), x, "in a new pass the hit moves it to the head");
    assert_eq!(mark(x), pass + 1);

    // Pages 1..=10 fill protected (10 of 16 frames) past x, the oldest.
    for page in 1..=10 {
        hit(&pool, page);
    }
    assert!(!protected(x), "pushed out of protected");
    assert_eq!(mark(x), 0, "and unmarked");
    assert_eq!(hit(&pool, 0), x);
    assert!(protected(x), "its next hit promotes it again");
    assert_eq!((head(), mark(x)), (x, pass + 1));
}

/// A marked frame that gets another page in the same pass loses its
/// mark: the new page's first hit promotes it.
#[test]
fn a_frame_that_changes_page_loses_its_mark() {
    let pool = pool();
    fill(&pool, 0..16);
    let x = hit(&pool, 0);
    assert_eq!(pool.frames[x.index()].promoted.load(Ordering::Acquire), 1);
    // Claim x as a victim would (pinned once, by the claimer).
    pool.frames[x.index()].pins.fetch_add(1, Ordering::AcqRel);
    let guard = pool.install(x, PageId::new(100)).expect("installed");
    pool.frames[x.index()].valid.store(true, Ordering::Release);
    lock(&pool.replacer).loaded(x, Access::Normal);
    drop(guard);
    pool.unpin(x);
    assert!(!pool.contains(PageId::new(0)));
    assert_eq!(pool.frames[x.index()].promoted.load(Ordering::Acquire), 0);
    assert!(!lock(&pool.replacer).is_protected(x));
    assert_eq!(hit(&pool, 100), x);
    assert!(
        lock(&pool.replacer).is_protected(x),
        "promoted by its first hit"
    );
}

/// A checkpoint's step passes over the pages a commit holds, oldest
/// first or not, and writes the dirty pages behind them: held pages
/// at the head of the flush list do not stop it.
#[test]
fn a_step_through_an_lsn_passes_over_held_pages() {
    let pool = pool();
    let mut held = Vec::new();
    for no in 1..=6u64 {
        let mut p = pool.create(PageId::new(no)).expect("create");
        page::init(p.data_mut(), crate::format::page::PageType::Leaf);
        p.mark_dirty(Lsn::new(no));
        if no <= 3 {
            // The three oldest, held by a commit under way.
            held.push(p.hold());
        }
    }
    let through = Lsn::new(6);
    assert_eq!(pool.dirty_through(through), 6);
    let n = pool
        .flush_through(through, 3, IoClass::Urgent, WriteCause::Checkpoint)
        .expect("step");
    assert_eq!(n, 3, "the three pages behind the held ones");
    assert_eq!(pool.dirty_through(through), 3, "only the held remain");
    for h in held {
        pool.release_held(h, None);
    }
    let n = pool
        .flush_through(through, 3, IoClass::Urgent, WriteCause::Checkpoint)
        .expect("step");
    assert_eq!(n, 3, "released, they go out");
    assert_eq!(pool.dirty_through(through), 0);
}

/// A log whose `durable_lsn` panics once when armed: a bug met while
/// a page loads.
#[derive(Default)]
struct PanickyLog(std::sync::atomic::AtomicBool);

impl LogFlusher for PanickyLog {
    fn durable_lsn(&self) -> Lsn {
        assert!(!self.0.swap(false, Ordering::AcqRel), "the armed bug");
        Lsn::new(u64::MAX)
    }
    fn flush_to(&self, _lsn: Lsn) -> Result<()> {
        Ok(())
    }
}

/// A panic while a page loads (by one read, or in a batch) gives its
/// frame up: a later read of the page loads it again instead of
/// finding, forever, a frame that never becomes valid.
#[test]
fn a_panic_in_a_load_leaves_no_frame_behind() {
    let log = Arc::new(PanickyLog::default());
    let pool = Arc::new(pool_with(Arc::clone(&log)));
    for no in 1..=40u64 {
        let mut p = pool.create(PageId::new(no)).expect("create");
        page::init(p.data_mut(), crate::format::page::PageType::Leaf);
        p.data_mut()[60] = no as u8;
        p.mark_dirty(Lsn::new(1));
    }
    pool.flush_all().expect("flush");
    // Pages 1.. were evicted by the later ones.
    let (one, two) = (PageId::new(1), PageId::new(2));
    assert!(!pool.contains(one) && !pool.contains(two));
    for batch in [false, true] {
        let page = if batch { two } else { one };
        log.0.store(true, Ordering::Release);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if batch {
                pool.read_batch(&[page], Access::Normal);
            } else {
                drop(pool.read(page, Access::Normal));
            }
        }));
        assert!(panicked.is_err(), "the load met the bug");
        assert!(!pool.contains(page), "the frame was given up");
        // On a thread of its own: a reader that finds the frame left
        // behind never returns, and the test must fail, not hang.
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = Arc::clone(&pool);
        std::thread::spawn(move || {
            // The pin is let go before the byte is sent: the pins are
            // counted as soon as it arrives.
            let byte = reader
                .read(page, Access::Normal)
                .expect("read again")
                .data()[60];
            tx.send(byte).expect("send");
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(30));
        assert_eq!(got, Ok(page.get() as u8), "the page loads again");
    }
    for f in &pool.frames {
        assert_eq!(f.pins.load(Ordering::Acquire), 0, "every pin let go");
    }
}

/// A write-back of a page whose load fails beside it (the load gives
/// its frame up while the write-back holds a pin) writes nothing and
/// lets the frame go: no panic, no pin left behind.
#[test]
fn a_write_back_meets_a_failed_load_and_writes_nothing() {
    use crate::sched::IoClass;
    let pool = pool();
    let page = PageId::new(3);
    let rounds = 200_000;
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                let f = pool.claim_victim().expect("claim").expect("a frame");
                let guard = pool.install(f, page).expect("installed");
                // The load failed.
                pool.abandon(f, page, guard);
            }
        });
        s.spawn(|| {
            for _ in 0..rounds {
                let wrote = pool
                    .write_now(page, IoClass::Urgent, WriteCause::Checkpoint)
                    .expect("no I/O error");
                assert!(!wrote, "a page never loaded is never written");
            }
        });
    });
    assert!(!pool.contains(page));
    for f in &pool.frames {
        assert_eq!(f.pins.load(Ordering::Acquire), 0, "every pin let go");
    }
}

/// Two misses of one page race and the first's load fails: neither
/// frame is lost, and every frame can still hold a page.
#[test]
fn a_frame_refused_or_abandoned_stays_in_the_pool() {
    let pool = pool();
    let n = pool.frames() as u64;
    let f1 = pool.claim_victim().expect("claim").expect("a frame");
    let page = PageId::new(100);
    let g1 = pool.install(f1, page).expect("installed");
    let f2 = pool.claim_victim().expect("claim").expect("a frame");
    assert!(
        pool.install(f2, page).is_none(),
        "the page has a frame already"
    );
    pool.abandon(f1, page, g1);
    assert!(!pool.contains(page));
    fill(&pool, 0..n);
    assert_eq!(pool.table.len() as u64, n);
}
