//! Compaction in the crash campaign: on about a third of the seeds (a knob
//! drawn from a generator of its own, so the other seeds replay as they
//! did), a round grows runs of long values and deletes runs of them while
//! no logical thread's write transaction is open, and calls
//! [`Database::compact_with`] a few steps at a time (sometimes to the end)
//! between any two steps, beside open transactions and held snapshots.
//! The round's power failure then lands anywhere in a compaction: its
//! start, scan, walk and finish commits, the checkpoint before the cut,
//! and the cut itself.
//!
//! The long values live under keys `b000..` of the default keyspace or of
//! a table (`t<N>/b000..`), so table drops free them too; each value spans
//! one to three pages, and a run of them 240 to 480 pages, enough for a
//! compaction to have work once a run is deleted. Two compacting seeds in
//! three raise the cache to [`COMPACT_CACHE_PAGES`] pages, which a
//! compaction's steps fit; on the others a step may not fit, and the
//! compaction then stays under way while the round goes on beside it.
//!
//! Invariants checked (beside the round's and recovery's):
//! - a compaction, or a commit of a run, returns no `Corruption` (no crash
//!   happened since the database was opened, and the simulated disk fails
//!   requests but never alters bytes);
//! - a compaction that ended, with no backup holding its cut off, leaves
//!   the data file no longer than the page count.

use super::round::{RoundState, Step};
use super::{tables, Txn};
use crate::db::{CompactOptions, Database, Options};
use crate::error::Error;
use crate::io::Storage;
use crate::sim::rng::Rng;

/// Keys of one run of long values, at most.
const RUN_KEYS_MAX: u64 = 480;
/// Pages one long value spans, at most.
const VALUE_PAGES_MAX: u64 = 3;
/// The cache, in pages, of the compacting seeds that raise it: a
/// compaction's scan step lists up to 256 pages in one internal commit,
/// which a smaller cache cannot hold (`CacheExhausted`), so on the other
/// seeds a compaction may never get past its scan.
const COMPACT_CACHE_PAGES: usize = 384;
/// Steps one call of a compaction cut short makes, at most.
const COMPACT_STEPS_MAX: u64 = 32;

/// How a seed's rounds grow and compact.
#[derive(Debug, Clone, Copy)]
pub(super) struct Knob {
    /// Keys of a run of long values.
    keys: u64,
    /// Bytes of each long value.
    value_bytes: usize,
    /// Keys one transaction of a run writes: the pages it changes fit a
    /// quarter of the cache.
    chunk_keys: usize,
    /// Pages the cache holds.
    frames: u64,
}

impl Knob {
    /// The knob of `seed` (`None`: the seed does not compact), from a
    /// generator of its own; on two seeds in three of those that compact,
    /// raises the cache in `opts` to [`COMPACT_CACHE_PAGES`] pages.
    pub(super) fn of(seed: u64, opts: &mut Options) -> Option<Knob> {
        let mut rng = Rng::new(seed ^ 0xC0DE_C0DE_5EED_0001);
        if !rng.chance(1, 3) {
            return None;
        }
        let page_bytes = opts.page_bytes;
        let roomy = rng.chance(2, 3);
        if roomy {
            opts.cache_bytes = opts
                .cache_bytes
                .max(COMPACT_CACHE_PAGES * page_bytes as usize);
        }
        let frames = (opts.cache_bytes / page_bytes as usize) as u64;
        let pages = rng.range(1, VALUE_PAGES_MAX + 1);
        // A run spans 240 to 480 pages: once it is deleted, past the least
        // a compaction gives back (64 pages, a sixteenth of the file) and
        // the slack it leaves (64 pages, a sixteenth of those in use).
        let keys = (rng.range(240, 481) / pages).min(RUN_KEYS_MAX);
        let value_bytes = (pages * u64::from(page_bytes)) as usize - 64;
        // A value's pages and its leaf's, and the tree's pages above.
        let chunk_keys = (frames / 4 / (pages + 1)).max(1) as usize;
        assert!(keys > 0 && keys <= RUN_KEYS_MAX, "a run has keys");
        assert!(value_bytes > 0, "a long value has bytes");
        assert!(!roomy || frames >= COMPACT_CACHE_PAGES as u64);
        Some(Knob {
            keys,
            value_bytes,
            chunk_keys,
            frames,
        })
    }

    /// The knob's part of a seed's knobs string.
    pub(super) fn describe(knob: Option<Knob>) -> String {
        match knob {
            None => "no compaction".to_string(),
            Some(k) => format!(
                "compaction between commits, runs of {} values of {} bytes, {} a commit, \
                 cache {} pages",
                k.keys, k.value_bytes, k.chunk_keys, k.frames
            ),
        }
    }
}

/// What the compactions of a round did.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Compacted {
    /// Calls of `compact_with` that returned.
    pub(super) calls: u64,
    /// Pages they moved.
    pub(super) moved: u64,
    /// Compactions that ended.
    pub(super) ended: u64,
}

/// Maybe grows a run or deletes one (only when `idle`: no logical
/// thread's write transaction is open), or compacts (also beside open
/// ones: a compaction's steps take no key locks). Returns whether the
/// round goes on.
///
/// # Errors
/// A compaction or a run's commit that reported `Corruption`, or a
/// compaction that ended leaving the file longer than the page count.
pub(super) fn act<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    knob: Knob,
    idle: bool,
    log: &mut Vec<Txn>,
    rs: &mut RoundState,
) -> Result<Step, String> {
    let last = knob.keys - 1;
    let held: Vec<&str> = RUN_PREFIXES
        .into_iter()
        .filter(|p| {
            rs.holds(format!("{p}b000").as_bytes()) || rs.holds(format!("{p}b{last:03}").as_bytes())
        })
        .collect();
    // A compaction is due when there is one under way or one would run;
    // else one is called now and then, to find nothing to do.
    let space = db.stats().space;
    let due = space.compactable_pages.is_some_and(|n| n > 0) || space.compacting_to.is_some();
    match rng.range(0, 48) {
        // Grow a run while none is there (and mostly delete it at once,
        // leaving the file's end free), delete one while one is.
        0..=11 if idle && held.is_empty() => {
            let prefix = RUN_PREFIXES[rng.range(0, RUN_PREFIXES.len() as u64) as usize];
            match commit_run(db, grow_run(rng, prefix, knob), knob, log, rs)? {
                Step::Go if rng.chance(2, 3) => {
                    commit_run(db, delete_run(rng, prefix, knob), knob, log, rs)
                }
                step => Ok(step),
            }
        }
        12..=17 if idle && !held.is_empty() => {
            let prefix = held[rng.range(0, held.len() as u64) as usize];
            commit_run(db, delete_run(rng, prefix, knob), knob, log, rs)
        }
        18..=33 if due => compact(db, rng, log.len(), rs),
        34 => compact(db, rng, log.len(), rs),
        _ => Ok(Step::Go),
    }
}

/// The keyspaces a run may be in: the default one and the tables'.
const RUN_PREFIXES: [&str; 4] = ["", "t0/", "t1/", "t2/"];

/// Puts every key of a run in keyspace `prefix`, each a long value.
fn grow_run(rng: &mut Rng, prefix: &str, knob: Knob) -> Txn {
    assert!(prefix.is_empty() || prefix.ends_with('/'), "a table's keys");
    let fill = rng.next_u64() as u8;
    let ops: Txn = (0..knob.keys)
        .map(|i| {
            let key = format!("{prefix}b{i:03}").into_bytes();
            (key, Some(vec![fill ^ i as u8; knob.value_bytes]))
        })
        .collect();
    assert_eq!(ops.len() as u64, knob.keys, "a run puts every key");
    ops
}

/// Deletes keys of a run in keyspace `prefix`: all, or those before a
/// random key (what stays then lies near the file's end, for a
/// compaction to move), or those from it on.
fn delete_run(rng: &mut Rng, prefix: &str, knob: Knob) -> Txn {
    let at = rng.range(1, knob.keys.max(2));
    let (from, to) = match rng.range(0, 3) {
        0 => (0, knob.keys),
        1 => (0, at.min(knob.keys)),
        _ => (at.min(knob.keys - 1), knob.keys),
    };
    let ops: Txn = (from..to)
        .map(|i| (format!("{prefix}b{i:03}").into_bytes(), None))
        .collect();
    assert!(!ops.is_empty(), "a delete of a run deletes keys");
    ops
}

/// Ends the round on an error of the environment (an injected fault, a
/// full disk, too small a cache); fails it on `Corruption`: no crash
/// happened since the database was opened, and the disk only fails
/// requests, never alters bytes.
fn stop_unless_corrupt(e: Error, commits: u64) -> Result<Step, String> {
    match e {
        Error::Corruption { .. } => Err(format!("after commit {commits}: {e}")),
        _ => Ok(Step::Stop),
    }
}

/// Commits the operations of a run in transactions of
/// [`Knob::chunk_keys`] keys.
fn commit_run<S: Storage>(
    db: &Database<S>,
    run: Txn,
    knob: Knob,
    log: &mut Vec<Txn>,
    rs: &mut RoundState,
) -> Result<Step, String> {
    assert!(knob.chunk_keys > 0, "a transaction writes keys");
    for chunk in run.chunks(knob.chunk_keys) {
        if let Step::Stop = commit_whole(db, chunk.to_vec(), log, rs)? {
            return Ok(Step::Stop);
        }
    }
    Ok(Step::Go)
}

/// Commits `txn` and the counter as one write transaction.
fn commit_whole<S: Storage>(
    db: &Database<S>,
    txn: Txn,
    log: &mut Vec<Txn>,
    rs: &mut RoundState,
) -> Result<Step, String> {
    let n = log.len() as u64;
    let Ok(mut w) = db.begin_write() else {
        return Ok(Step::Stop);
    };
    let mut done = Txn::new();
    for (k, v) in txn {
        match tables::apply(&mut w, &k, &v) {
            Ok(true) => done.push((k, v)),
            Ok(false) => {}
            Err(e) => return stop_unless_corrupt(e, n),
        }
    }
    let counter = (b"next".to_vec(), Some((n + 1).to_le_bytes().to_vec()));
    if w.put(&counter.0, counter.1.as_deref().unwrap_or_default())
        .is_err()
    {
        return Ok(Step::Stop);
    }
    done.push(counter);
    log.push(done);
    match w.commit() {
        Ok(()) => {}
        Err(e) if e.is_retryable() => {
            // Refused: nothing of it was applied, so it is not in the order.
            log.pop();
            rs.refused += 1;
            return Ok(Step::Go);
        }
        Err(e) => return stop_unless_corrupt(e, n),
    }
    rs.record_commit(log);
    assert_eq!(log.len() as u64, n + 1, "the commit is the last in the log");
    Ok(Step::Go)
}

/// Runs a compaction for a few steps, or to its end.
fn compact<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    commits: usize,
    rs: &mut RoundState,
) -> Result<Step, String> {
    let opts = match rng.chance(1, 2) {
        true => CompactOptions::default(),
        false => CompactOptions {
            max_steps: Some(rng.range(1, COMPACT_STEPS_MAX + 1)),
        },
    };
    let report = match db.compact_with(&opts) {
        Ok(r) => r,
        // A step larger than the cache: the compaction stays under way,
        // and the round goes on beside it.
        Err(Error::CacheExhausted { .. } | Error::TransactionTooLarge { .. }) => {
            rs.compacted.calls += 1;
            return Ok(Step::Go);
        }
        Err(e) => return stop_unless_corrupt(e, commits as u64),
    };
    let space = db.stats().space;
    if report.finished
        && !report.cut_deferred
        && report.file_bytes_after > report.pages_after * space.page_bytes
    {
        return Err(format!(
            "after commit {commits}: a compaction ended uncut: {report:?}"
        ));
    }
    assert!(
        opts.max_steps.is_none_or(|m| report.steps <= m),
        "a compaction keeps to its step limit"
    );
    rs.compacted.calls += 1;
    rs.compacted.moved += report.pages_moved;
    rs.compacted.ended += u64::from(report.finished && report.boundary > 0);
    Ok(Step::Go)
}
