//! Durability chosen per transaction (`WriteOptions::durability`): a commit
//! that asks for `Sync` survives a power cut on a database opened without
//! it, and carries every commit logged before it; one that asks for no sync
//! on a `Sync` database does not wait for the log. Runs on the simulated
//! disk, which loses, keeps or tears every unsynced write at a crash.

mod common;

use std::path::Path;

use directkv::internals::sim::SimStorage;
use directkv::{Database, Durability, Options, WriteOptions};

fn opts(durability: Durability) -> Options {
    Options {
        cache_bytes: 32 * 4096,
        page_bytes: 4096,
        wal_sync: common::SIM_SYNC,
        durability,
        wal_segment_bytes: 256 << 10,
        // Nothing flushes the log behind the test's back.
        background_threads: false,
        publish_stats: false,
        ..Options::default()
    }
}

fn with(durability: Durability) -> WriteOptions {
    WriteOptions {
        durability: Some(durability),
        ..WriteOptions::default()
    }
}

fn put(db: &Database<SimStorage>, w: &WriteOptions, i: u32) {
    let mut t = db.begin_write_with(w).expect("begin");
    t.put(format!("key{i:05}").as_bytes(), &[i as u8; 100])
        .expect("put");
    t.commit().expect("commit");
}

fn sync_waits(db: &Database<SimStorage>) -> u64 {
    db.stats().stalls.histograms.wal_sync_wait.waits
}

#[test]
fn a_sync_commit_on_a_no_sync_database_survives_a_crash_with_all_before_it() {
    let path = Path::new("/sim/db");
    for seed in 0..20u64 {
        let disk = SimStorage::new();
        let db = Database::open_with(disk.clone(), path, opts(Durability::NoSyncNotDurable))
            .expect("open");
        let lax = WriteOptions::default();
        for i in 0..30 {
            put(&db, &lax, i);
        }
        let waits = sync_waits(&db);
        put(&db, &with(Durability::Sync), 30);
        assert_eq!(
            sync_waits(&db),
            waits + 1,
            "the Sync commit waited for the log"
        );
        // Logged after the durable commit: may or may not survive.
        put(&db, &lax, 31);
        std::mem::forget(db);
        disk.crash(seed);
        let db = Database::open_with(disk.clone(), path, opts(Durability::NoSyncNotDurable))
            .expect("reopen");
        let r = db.begin_read().expect("read");
        for i in 0..=30u32 {
            let got = r.get(format!("key{i:05}").as_bytes()).expect("get");
            assert_eq!(got, Some(vec![i as u8; 100]), "seed {seed}: commit {i}");
        }
        drop(r);
        db.check().expect("check");
    }
}

#[test]
fn a_no_sync_commit_on_a_sync_database_does_not_wait_and_the_next_sync_carries_it() {
    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let db = Database::open_with(disk.clone(), path, opts(Durability::Sync)).expect("open");
    let waits = sync_waits(&db);
    for i in 0..10 {
        put(&db, &with(Durability::NoSyncNotDurable), i);
    }
    assert_eq!(sync_waits(&db), waits, "no commit waited for the log");
    put(&db, &WriteOptions::default(), 10);
    assert_eq!(sync_waits(&db), waits + 1, "the database's default waited");
    std::mem::forget(db);
    disk.crash(7);
    let db = Database::open_with(disk.clone(), path, opts(Durability::Sync)).expect("reopen");
    let r = db.begin_read().expect("read");
    for i in 0..=10u32 {
        let got = r.get(format!("key{i:05}").as_bytes()).expect("get");
        assert_eq!(got, Some(vec![i as u8; 100]), "commit {i}");
    }
}

/// A commit is visible once its record is appended, before its sync. A
/// write transaction that read it and writes nothing commits only once
/// the log is durable that far (under `Sync`): what it read survives a
/// power cut, and the LSN it returns is durable. With nothing waiting to
/// be synced it syncs nothing.
#[test]
fn a_commit_that_writes_nothing_waits_for_what_it_read_to_be_durable() {
    let path = Path::new("/sim/db");
    for seed in 0..10u64 {
        let disk = SimStorage::new();
        let db = Database::open_with(disk.clone(), path, opts(Durability::Sync)).expect("open");
        put(&db, &with(Durability::NoSyncNotDurable), 1);
        let flushes = db.stats().wal.flushes;
        let t = db.begin_write().expect("begin");
        assert_eq!(
            t.get(b"key00001").expect("get"),
            Some(vec![1u8; 100]),
            "the appended commit is visible"
        );
        let lsn = t.commit_lsn().expect("commit");
        assert!(
            db.stats().wal.durable_lsn >= lsn.get(),
            "the log is durable to the LSN returned"
        );
        assert_eq!(db.stats().wal.flushes, flushes + 1, "one flush carried it");
        // Nothing more to sync: a commit that writes nothing syncs nothing.
        let t = db.begin_write().expect("begin");
        assert!(t.commit_lsn().expect("commit") >= lsn);
        assert_eq!(db.stats().wal.flushes, flushes + 1, "no flush for nothing");
        std::mem::forget(db);
        disk.crash(seed);
        let db = Database::open_with(disk.clone(), path, opts(Durability::Sync)).expect("reopen");
        let r = db.begin_read().expect("read");
        assert_eq!(
            r.get(b"key00001").expect("get"),
            Some(vec![1u8; 100]),
            "seed {seed}: what was read survived"
        );
    }
}
