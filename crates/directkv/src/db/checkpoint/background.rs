//! The background threads of an open database: the checkpointer, the page
//! cleaner and the readahead readers.
//!
//! Each holds only a weak reference to the engine and takes a strong one for
//! one round of work, so dropping the [`Database`](super::super::Database) ends
//! them: it sets their stop flags, wakes them and joins them.
//!
//! Invariants:
//! - Every thread runs its rounds under [`run_guarded`]: a panic (a bug) fails
//!   the database ([`crate::health`]), so every later call returns
//!   `Poisoned` instead of running on beside a dead thread.
//! - The foreground never waits for a background thread except at the
//!   hard log-space limit (see [`super::run`]).
//! - Their waits are not foreground stalls ([`crate::stall`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::super::engine::Inner;
use super::super::stats::STATS_EVERY;
use crate::buffer::Access;
use crate::format::PageId;
use crate::health;
use crate::io::Storage;
use crate::sched::IoClass;

/// A stop flag and the condition variable that wakes its thread.
pub(in crate::db) type StopSignal = Arc<(Mutex<bool>, Condvar)>;

/// A new, unset stop signal.
pub(in crate::db) fn stop_signal() -> StopSignal {
    Arc::new((Mutex::new(false), Condvar::new()))
}

/// Sets `signal` and wakes its thread (teardown: works on a poisoned lock).
pub(in crate::db) fn stop(signal: &StopSignal) {
    let (stop, wake) = &**signal;
    *health::lock_even_poisoned(stop) = true;
    wake.notify_all();
}

/// Waits up to `timeout` for `signal`; returns whether the thread must stop.
/// A poisoned flag stops it too (the database has failed).
fn wait_stop(signal: &StopSignal, timeout: Duration) -> bool {
    let (stop, wake) = &**signal;
    let Ok(flag) = health::lock(stop) else {
        return true;
    };
    if *flag {
        return true;
    }
    match wake.wait_timeout(flag, timeout) {
        Ok((flag, _)) => *flag,
        Err(_) => true,
    }
}

/// Whether `signal` is set (or poisoned).
fn stopped(signal: &StopSignal) -> bool {
    health::lock(&signal.0).map_or(true, |flag| *flag)
}

/// Runs one round of a background thread's work with a strong reference to
/// the engine. Returns `false` when the thread must end: the database is
/// gone or has failed, or the round panicked, in which case the database is
/// failed first.
fn run_guarded<S: Storage>(
    weak: &Weak<Inner<S>>,
    name: &str,
    round: impl FnOnce(&Inner<S>),
) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    if inner.vitals.health.is_failed() {
        return false;
    }
    match catch_unwind(AssertUnwindSafe(|| round(&inner))) {
        Ok(()) => true,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            inner
                .vitals
                .health
                .fail(&format!("background thread {name} panicked: {what}"));
            assert!(inner.vitals.health.is_failed());
            false
        }
    }
}

/// Spawns a named background thread running `body`; the operating system
/// may refuse (no memory for a stack, a limit on threads).
fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    #[cfg(test)]
    if REFUSE_SPAWN.with(|r| r.get() == Some(name)) {
        return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
    }
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            crate::stall::mark_background_thread();
            body();
        })
}

#[cfg(test)]
thread_local! {
    /// The name of a thread [`spawn`] refuses to start on this thread, as
    /// the operating system may.
    static REFUSE_SPAWN: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// Readahead readers: threads that read queued pages into the pool, at the
/// head of the probation queue so they stay until the scan gets there (the
/// scan's own touches never promote them into the hot set). Each takes what
/// is queued, up to a window, and reads it as one asynchronous batch
/// (adjacent pages as one request); two, so one window can be queued while
/// the other is in flight.
const READAHEAD_READERS: usize = 2;
/// Pages queued for readahead at most; more requests are dropped.
const READAHEAD_QUEUE: usize = 256;

/// How often the page cleaner looks at the cold end of the cache when it
/// found nothing to write.
const CLEANER_IDLE: Duration = Duration::from_millis(10);

/// How often the checkpointer looks at the log's growth when no commit
/// woke it.
const CHECKPOINTER_IDLE: Duration = Duration::from_millis(200);

/// Starts the readahead readers (none when readahead is off).
pub(in crate::db) fn spawn_readers<S: Storage>(inner: &Arc<Inner<S>>) -> Vec<JoinHandle<()>> {
    if inner.env.opts.readahead_pages == 0 {
        return Vec::new();
    }
    let window = inner.env.opts.readahead_pages;
    let (tx, rx) = std::sync::mpsc::sync_channel::<PageId>(READAHEAD_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    let handles: Vec<_> = (0..READAHEAD_READERS)
        .filter_map(|i| {
            let (weak, rx) = (Arc::downgrade(inner), Arc::clone(&rx));
            let name = format!("directkv-readahead-{i}");
            // A reader is a hint's: without it, scans read their pages
            // themselves.
            spawn(&name.clone(), move || loop {
                let pages = {
                    let Ok(rx) = health::lock(&rx) else { return };
                    let Ok(first) = rx.recv() else { return };
                    let mut pages = vec![first];
                    pages.extend(rx.try_iter().take(window.saturating_sub(1)));
                    pages
                };
                assert!(!pages.is_empty() && pages.len() <= window.max(1));
                let alive = run_guarded(&weak, &name, |inner| {
                    // A failed read is the scan's to meet and report.
                    let read = inner.pool.read_batch(&pages, Access::Normal);
                    inner
                        .vitals
                        .counters
                        .readahead_reads
                        .fetch_add(read as u64, Ordering::Relaxed);
                });
                if !alive {
                    return;
                }
            })
            .ok()
        })
        .collect();
    if !handles.is_empty() {
        if let Ok(mut queue) = inner.readahead.lock() {
            *queue = Some(tx);
        }
    }
    handles
}

/// The page cleaner: keeps the cold end of the replacement order clean, so a
/// read or a commit that needs a frame takes a clean one instead of writing a
/// dirty page itself (in a writer's critical section, every writer would wait
/// for that write). It writes the dirty pages among the coldest sixteenth of
/// the frames, WAL first, and stops when the database is dropped. It also
/// grows the data file ahead of use and publishes the stats.
pub(in crate::db) fn spawn_cleaner<S: Storage>(
    weak: Weak<Inner<S>>,
    signal: StopSignal,
) -> std::io::Result<JoinHandle<()>> {
    spawn("directkv-cleaner", move || {
        let mut pass = CleanerPass {
            idle: false,
            published: Instant::now(),
            last_evicted: 0,
        };
        loop {
            let stop = if pass.idle {
                wait_stop(&signal, CLEANER_IDLE)
            } else {
                stopped(&signal)
            };
            if stop || !run_guarded(&weak, "directkv-cleaner", |inner| pass.run(inner)) {
                return;
            }
        }
    })
}

/// Steps of freeing dropped tables' pages one cleaner pass runs at most
/// (each holds the commit section for at most
/// [`FREE_STEP_PAGES`](crate::db::txn::drops::FREE_STEP_PAGES) pages).
const FREE_STEPS_PER_PASS: usize = 4;
/// Steps of a compaction left under way a cleaner pass runs at most.
const COMPACT_STEPS_PER_PASS: u64 = 4;

/// What the cleaner carries from one pass to the next.
struct CleanerPass {
    /// The last pass wrote nothing: wait before the next.
    idle: bool,
    /// When the stats were last published.
    published: Instant,
    /// Dirty victims the foreground had written itself, at the last pass.
    last_evicted: u64,
}

impl CleanerPass {
    fn run<S: Storage>(&mut self, inner: &Inner<S>) {
        if inner.env.opts.publish_stats && self.published.elapsed() >= STATS_EVERY {
            inner.publish_stats();
            self.published = Instant::now();
        }
        // Growth ahead of use is speculative: a full filesystem refuses the
        // reservation, which changes nothing, and the file then grows by its
        // page writes (a failure there is a real one, and stops the engine).
        if let Ok(meta) = inner.txns.tree.read() {
            let pages = meta.page_count;
            drop(meta);
            let _ = inner.pool.extend_ahead(pages, IoClass::Background);
        }
        let window = (inner.pool.frames() / 16).max(8);
        // A failed write leaves the page dirty and stops the database: every
        // later operation reports it.
        let written = inner
            .vitals
            .health
            .observe(inner.pool.clean_cold(window))
            .unwrap_or(0);
        assert!(written <= window, "a pass writes at most its window");
        // Dirty victims the foreground had to write itself since the last
        // pass: the cleaner is behind.
        let evicted = inner.pool.stats().eviction_writes;
        assert!(evicted >= self.last_evicted, "counters only grow");
        let behind = evicted - self.last_evicted;
        self.last_evicted = evicted;
        inner.report_pressure(
            written as f64 / window as f64,
            if behind > 0 { 1.0 } else { 0.0 },
        );
        inner
            .vitals
            .counters
            .cleaner_writes
            .fetch_add(written as u64, Ordering::Relaxed);
        // A failed step stops the database (every later call reports it).
        let freeing = inner
            .vitals
            .health
            .observe(inner.free_dropped(FREE_STEPS_PER_PASS))
            .unwrap_or(false);
        let compacting = inner
            .vitals
            .health
            .observe(inner.resume_compaction(COMPACT_STEPS_PER_PASS))
            .unwrap_or(false);
        self.idle = written == 0 && !freeing && !compacting;
    }
}

/// Checkpoints in the background when the WAL since the last checkpoint passes
/// `checkpoint_wal_bytes`, so no committer runs one. It holds the engine only
/// while checkpointing, and stops when the database is dropped.
pub(in crate::db) fn spawn_checkpointer<S: Storage>(
    weak: Weak<Inner<S>>,
    signal: StopSignal,
) -> std::io::Result<JoinHandle<()>> {
    spawn("directkv-checkpoint", move || loop {
        if wait_stop(&signal, CHECKPOINTER_IDLE) {
            return;
        }
        let alive = run_guarded(&weak, "directkv-checkpoint", |inner| {
            // A failed checkpoint leaves the previous one valid; the next try
            // comes with the next wake-up.
            let _ = inner.maybe_checkpoint();
        });
        if !alive {
            return;
        }
    })
}

/// How often the archiver looks for a completed log segment.
const ARCHIVER_IDLE: Duration = Duration::from_millis(100);
/// How long the archiver waits after a failed round before the next.
const ARCHIVER_RETRY: Duration = Duration::from_secs(1);

/// The log archiver (`backup/archive/`): copies each log segment into the
/// archive once it is complete (and, with `archive_timeout`, the segment
/// being written once its commits waited that long). Checkpoints archive what is pending too,
/// before they recycle, so without this thread nothing is lost, only later.
pub(in crate::db) fn spawn_archiver<S: Storage>(
    weak: Weak<Inner<S>>,
    signal: StopSignal,
) -> Option<JoinHandle<()>> {
    spawn("directkv-archiver", move || {
        let mut wait = ARCHIVER_IDLE;
        loop {
            if wait_stop(&signal, wait) {
                return;
            }
            let alive = run_guarded(&weak, "directkv-archiver", |inner| {
                // A failure is counted and kept in the stats; the segment
                // stays until a later round archives it.
                // With `archive_timeout`, the segment being written goes
                // too once its commits waited that long.
                let round = inner.archive_complete_segments(None);
                let round = round.and_then(|_| inner.archive_partial_if_due());
                wait = match round {
                    Ok(_) => ARCHIVER_IDLE,
                    Err(_) => ARCHIVER_RETRY,
                };
            });
            if !alive {
                return;
            }
        }
    })
    // Without it, checkpoints archive what they would recycle.
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Database, Error, Options};

    fn small_db(dir: &std::path::Path) -> Database {
        let opts = Options {
            cache_bytes: 4 << 20,
            wal_sync: Some(crate::io::SyncVariant {
                method: crate::io::SyncMethod::None,
                direct: false,
            }),
            ..Options::default()
        };
        Database::open(dir, opts).expect("open")
    }

    fn assert_poisoned<T: std::fmt::Debug>(r: crate::Result<T>, what: &str) {
        match r {
            Err(Error::Poisoned { cause, .. }) => {
                assert!(cause.contains("panicked"), "{what}: cause {cause:?}")
            }
            other => panic!("{what}: expected Poisoned, got {other:?}"),
        }
    }

    /// A committer waiting at the hard limit for a checkpoint to free log
    /// space stops waiting when the database fails, and gets the failure:
    /// not the wait's minute and then a transaction on a failed database.
    /// Holding the checkpoint lock keeps every checkpoint out, so the log
    /// reaches the limit and the committer waits for certain.
    /// An engine thread the operating system refuses fails the open with
    /// a typed error; a helper thread refused leaves the database working.
    /// Either way the directory opens again at once (the lock was let go).
    #[test]
    fn a_refused_background_thread_fails_open_or_is_done_without() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(small_db(dir.path()));
        for name in ["directkv-checkpoint", "directkv-cleaner"] {
            REFUSE_SPAWN.with(|r| r.set(Some(name)));
            let opts = Options {
                cache_bytes: 4 << 20,
                ..Options::default()
            };
            let got = Database::open(dir.path(), opts).map(drop);
            REFUSE_SPAWN.with(|r| r.set(None));
            match got {
                Err(Error::Io {
                    op: crate::error::IoOp::SpawnThread,
                    ..
                }) => {}
                other => panic!("{name}: expected a refused spawn, got {other:?}"),
            }
        }
        REFUSE_SPAWN.with(|r| r.set(Some("directkv-readahead-0")));
        let db = small_db(dir.path());
        REFUSE_SPAWN.with(|r| r.set(None));
        let mut w = db.begin_write().expect("begin");
        w.put(b"k", b"v").expect("put");
        w.commit().expect("commit");
        assert_eq!(db.readers.len(), 1, "the other reader started");
        drop(db);
        let db = small_db(dir.path());
        assert_eq!(
            db.begin_read().expect("read").get(b"k").expect("get"),
            Some(b"v".to_vec())
        );
    }

    #[test]
    fn a_committer_waiting_for_log_space_meets_a_failure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = Options {
            cache_bytes: 4 << 20,
            checkpoint_wal_bytes: crate::CHECKPOINT_WAL_BYTES_MIN,
            durability: crate::Durability::NoSyncNotDurable,
            ..Options::default()
        };
        let db = Database::open(dir.path(), opts).expect("open");
        let inner = &*db.inner;
        let held = inner.ckpt.checkpointing.lock().expect("checkpoint lock");
        let limit = crate::CHECKPOINT_WAL_BYTES_MIN * crate::db::WAL_HARD_LIMIT_FACTOR;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let r = (0..100_000u32).try_for_each(|i| {
                    let mut w = db.begin_write()?;
                    w.put(&i.to_le_bytes(), &[5u8; 2000])?;
                    w.commit()
                });
                tx.send(r).expect("send");
            });
            while inner.wal_since_checkpoint() < limit {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Past the limit, its next begin waits; give it time to.
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(db.stats().stalls.log_space_wait, 0, "still waiting");
            inner
                .vitals
                .health
                .fail("a failure while a committer waits");
            let r = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("the committer stopped waiting at the failure");
            assert!(matches!(r, Err(Error::Poisoned { .. })), "{r:?}");
        });
        drop(held);
    }

    #[test]
    fn a_panicking_background_thread_stops_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = small_db(dir.path());
        let mut w = db.begin_write().expect("begin");
        w.put(b"k", b"v").expect("put");
        w.commit().expect("commit");
        let weak = Arc::downgrade(&db.inner);
        // A round of background work that hits a bug, on a thread of its own
        // as the real threads run theirs.
        let alive = std::thread::spawn(move || {
            run_guarded(&weak, "directkv-test", |_| panic!("an invariant broke"))
        })
        .join()
        .expect("the panic is caught inside the round");
        assert!(!alive, "the thread ends after the panic");
        assert_poisoned(db.begin_read().map(|_| ()), "begin_read");
        assert_poisoned(db.begin_write().map(|_| ()), "begin_write");
        assert_poisoned(db.checkpoint(), "checkpoint");
        assert_poisoned(db.check(), "check");
        assert_poisoned(db.prefetch(&[b"k"]), "prefetch");
        assert_poisoned(db.close(), "close");
        // Reopening runs recovery: the commit before the failure is there.
        let db = small_db(dir.path());
        let r = db.begin_read().expect("begin_read after reopen");
        assert_eq!(r.get(b"k").expect("get"), Some(b"v".to_vec()));
    }

    #[test]
    fn a_transaction_open_when_the_database_fails_cannot_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = small_db(dir.path());
        let r = db.begin_read().expect("begin_read");
        let mut w = db.begin_write().expect("begin_write");
        w.put(b"k", b"v").expect("put");
        db.inner
            .vitals
            .health
            .fail("background thread directkv-test panicked: test");
        assert_poisoned(r.get(b"k"), "get");
        assert_poisoned(r.range(&b"a"[..]..).next().expect("an item"), "range");
        assert_poisoned(w.put(b"k2", b"v"), "put");
        assert_poisoned(w.commit(), "commit");
    }

    #[test]
    fn a_tree_lock_poisoned_by_a_panic_stops_the_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Arc::new(small_db(dir.path()));
        let db2 = Arc::clone(&db);
        let _ = std::thread::spawn(move || {
            let _held = db2.inner.txns.tree.write();
            panic!("a bug while the tree lock is held");
        })
        .join();
        // Readers take no tree lock: the next commit finds the poison.
        let mut w = db.begin_write().expect("the latch is not tripped yet");
        w.put(b"k", b"v").expect("put");
        match w.commit() {
            Err(Error::Poisoned { path, .. }) => assert_eq!(path, dir.path()),
            other => panic!("expected Poisoned, got {other:?}"),
        }
        assert!(matches!(db.begin_read(), Err(Error::Poisoned { .. })));
        assert!(matches!(db.begin_write(), Err(Error::Poisoned { .. })));
    }
}
