//! Fail-stop is whole (issue 17, case 4; DESIGN.md invariant 3): after the
//! first failed write, sync or allocation of the data file or the log, every
//! later operation (a read, a new transaction, a commit, a checkpoint)
//! returns an error until the database is reopened; a commit after the
//! failure never returns Ok. Reopening, with the fault gone, recovers every
//! acknowledged commit. Runs on the simulated disk, which fails exactly the
//! operations asked of it.

mod common;

use std::path::Path;

use directkv::internals::sim::SimStorage;
use directkv::{Database, Error, Options};

fn opts() -> Options {
    Options {
        cache_bytes: 32 * 4096,
        page_bytes: 4096,
        wal_sync: common::SIM_SYNC,
        wal_segment_bytes: 256 << 10,
        background_threads: false,
        data_extend_bytes: 0,
        publish_stats: false,
        ..Options::default()
    }
}

fn commit(db: &Database<SimStorage>, i: u32) -> directkv::Result<()> {
    let mut w = db.begin_write()?;
    w.put(format!("key{i:05}").as_bytes(), &[i as u8; 300])?;
    w.commit()
}

fn assert_stopped(db: &Database<SimStorage>) {
    let poisoned = |r: directkv::Result<()>, what: &str| match r {
        Err(Error::Poisoned { .. }) => {}
        other => panic!("{what} after the failure: expected Poisoned, got {other:?}"),
    };
    poisoned(db.begin_read().map(|_| ()), "begin_read");
    poisoned(db.begin_write().map(|_| ()), "begin_write");
    poisoned(db.checkpoint(), "checkpoint");
    poisoned(db.check().map(|_| ()), "check");
}

fn reopened_holds(disk: &SimStorage, path: &Path, acked: u32) {
    let db = Database::open_with(disk.clone(), path, opts()).expect("reopen");
    let r = db.begin_read().expect("read");
    for i in 0..acked {
        let got = r.get(format!("key{i:05}").as_bytes()).expect("get");
        assert_eq!(got, Some(vec![i as u8; 300]), "acknowledged commit {i}");
    }
    db.check().expect("check");
}

#[test]
fn issue17_a_failed_data_write_stops_everything_until_reopen() {
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let db = Database::open_with(disk.clone(), path, opts()).expect("open");
    let mut acked = 0;
    for i in 0..200 {
        commit(&db, i).expect("commit");
        acked = i + 1;
    }
    // Every write fails from now on; the checkpoint is the first to write.
    disk.set_random_faults(1, 0, 7);
    let err = db.checkpoint().expect_err("the checkpoint's writes fail");
    assert!(
        matches!(err, Error::Io { .. }),
        "the first caller sees the failure: {err}"
    );
    disk.set_random_faults(0, 0, 0);
    // The fault is gone, but the database does not trust what it wrote since.
    assert_stopped(&db);
    assert!(
        commit(&db, 999).is_err(),
        "no commit is acknowledged after the failure"
    );
    drop(db);
    reopened_holds(&disk, path, acked);
}

#[test]
fn issue17_a_full_disk_stops_everything_until_reopen_with_space() {
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let db = Database::open_with(disk.clone(), path, opts()).expect("open");
    disk.set_capacity(Some(disk.used_bytes() + (1 << 20)));
    let mut acked = 0;
    let err = loop {
        match commit(&db, acked) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        if acked % 50 == 49 {
            if let Err(e) = db.checkpoint() {
                break e;
            }
        }
        assert!(acked < 100_000, "1 MiB never filled up");
    };
    assert!(err.to_string().contains("space"), "{err}");
    assert_stopped(&db);
    drop(db);
    disk.set_capacity(None);
    reopened_holds(&disk, path, acked);
}
