//! Every request the engine makes of its files passes the I/O scheduler
//! (DESIGN.md invariant 9): on a storage that counts the calls its files
//! see (a `FaultyStorage` injecting nothing), the reads, writes, syncs and
//! allocations of a database's whole life (creation, commits, misses,
//! evictions, checkpoints, log segments and, after a crash, recovery's
//! reads of the log) equal the requests its scheduler counted under
//! permits, class by class summed.

mod common;

use std::path::Path;

use directkv::internals::engine::IoClass;
use directkv::internals::io::{FaultOp, FaultyStorage, OsStorage};
use directkv::{Database, Options, SchedStats};

fn opts() -> Options {
    Options {
        // A small cache: reads miss and evictions write.
        cache_bytes: 64 * 4096,
        page_bytes: 4096,
        wal_segment_bytes: 256 << 10,
        // No thread works beside the test's counts.
        background_threads: false,
        publish_stats: false,
        ..Options::default()
    }
}

fn storage_calls(s: &FaultyStorage<OsStorage>) -> u64 {
    [
        FaultOp::Read,
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Allocate,
    ]
    .into_iter()
    .map(|op| s.calls(op))
    .sum()
}

fn requests(st: &SchedStats) -> u64 {
    st.requests.iter().sum()
}

fn put_many(db: &Database<FaultyStorage<OsStorage>>, round: u32) {
    for t in 0..40u32 {
        let mut w = db.begin_write().expect("begin");
        for k in 0..25u32 {
            let key = format!("key{:06}", (t * 25 + k) * 7 % 1000);
            w.put(key.as_bytes(), &[round as u8; 200]).expect("put");
        }
        w.commit().expect("commit");
    }
}

#[test]
fn every_request_of_a_database_passes_the_scheduler() {
    let dir = common::scratch();
    let path = dir.path().join("db");
    let storage = FaultyStorage::new(OsStorage::default());

    // Creation, commits, misses and evictions, a checkpoint.
    let before = storage_calls(&storage);
    let db = Database::open_with(storage.clone(), Path::new(&path), opts()).expect("create");
    put_many(&db, 1);
    db.checkpoint().expect("checkpoint");
    put_many(&db, 2);
    let r = db.begin_read().expect("read");
    for k in 0..1000u32 {
        r.get(format!("key{k:06}").as_bytes()).expect("get");
    }
    drop(r);
    let st = db.stats().io_scheduler;
    let seen = storage_calls(&storage) - before;
    assert_eq!(seen, requests(&st), "every call was admitted: {st:?}");
    for class in [IoClass::Wal, IoClass::Read, IoClass::Urgent] {
        assert!(st.requests[class as usize] > 0, "{class:?}: {st:?}");
    }
    // A crash: dropped without a checkpoint, the log holds the last round.
    drop(db);

    // Recovery reads the log and replays it, then checkpoints.
    let before = storage_calls(&storage);
    let db = Database::open_with(storage.clone(), Path::new(&path), opts()).expect("recover");
    assert!(db.stats().recovery.transactions > 0, "the open replayed");
    let r = db.begin_read().expect("read");
    assert_eq!(
        r.get(b"key000007").expect("get"),
        Some(vec![2; 200]),
        "the last round is back"
    );
    drop(r);
    let st = db.stats().io_scheduler;
    let seen = storage_calls(&storage) - before;
    assert_eq!(seen, requests(&st), "every call was admitted: {st:?}");
    assert!(st.requests[IoClass::Read as usize] > 0, "recovery read");
    db.close().expect("close");
}
