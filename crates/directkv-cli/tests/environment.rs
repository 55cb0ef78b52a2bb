//! The engine on a full filesystem (RELIABILITY.md C10, F13/F14): a database
//! on a 32 MiB loop-mounted ext4 is written until a commit fails; the error is
//! typed (no space, or the outcome-unknown/poisoned errors that follow one),
//! nothing panics, a reopen while the disk is still full is `DiskFull` (or
//! whole), and once space is freed, reopening recovers every acknowledged
//! commit. Needs root, losetup and mkfs.ext4; skips otherwise.

use directkv::{Database, Error, Options};

mod common;

#[test]
fn a_full_filesystem_is_a_clear_error_and_loses_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let Some(fs) = common::loop_fs(dir.path(), "mkfs.ext4", 32, 512) else {
        return;
    };
    // Space to give back later.
    std::fs::write(fs.mount.join("filler"), vec![7u8; 4 << 20]).expect("filler");
    let db_dir = fs.mount.join("db");
    let opts = Options {
        cache_bytes: 2 << 20,
        page_bytes: 4096,
        wal_segment_bytes: 1 << 20,
        checkpoint_wal_bytes: 4 << 20,
        ..Options::default()
    };
    let db = Database::open(&db_dir, opts.clone()).expect("open");
    let value = vec![0x42u8; 60_000];
    let mut acked = 0u32;
    let err = loop {
        let result = db.begin_write().and_then(|mut w| {
            w.put(format!("key{acked:06}").as_bytes(), &value)?;
            w.commit()
        });
        match result {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 2000, "32 MiB never filled up");
    };
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::DiskFull { .. } | Error::CommitOutcomeUnknown { .. } | Error::Poisoned { .. }
        ) && text.contains("space"),
        "{err}"
    );
    drop(db);
    // Still full: the reopen either fails with `DiskFull` (its replay or
    // end-of-recovery checkpoint found no space) or gives back every
    // acknowledged commit; never an open that fails reads later.
    match Database::open(&db_dir, opts.clone()) {
        Err(Error::DiskFull { .. }) => {}
        Err(e) => panic!("a reopen on a full disk: expected DiskFull, got {e}"),
        Ok(db) => {
            let r = db.begin_read().expect("read");
            for i in 0..acked {
                let got = r
                    .get(format!("key{i:06}").as_bytes())
                    .expect("get on a full disk");
                assert_eq!(got.as_deref(), Some(value.as_slice()), "commit {i}");
            }
        }
    }
    std::fs::remove_file(fs.mount.join("filler")).expect("free space");
    let db = Database::open(&db_dir, opts).expect("reopen once space is back");
    let r = db.begin_read().expect("read");
    for i in 0..acked {
        let got = r.get(format!("key{i:06}").as_bytes()).expect("get");
        assert_eq!(
            got.as_deref(),
            Some(value.as_slice()),
            "acknowledged commit {i}"
        );
    }
    eprintln!("filled after {acked} commits: {text}");
}

/// The engine on a device with 4096-byte logical sectors (F20): direct I/O
/// aligns to 4096, commits and recovery work.
#[test]
fn the_engine_runs_on_a_4k_sector_device() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let Some(fs) = common::loop_fs(dir.path(), "mkfs.ext4", 64, 4096) else {
        return;
    };
    let db_dir = fs.mount.join("db");
    let opts = Options {
        cache_bytes: 1 << 20,
        page_bytes: 8192,
        wal_segment_bytes: 1 << 20,
        ..Options::default()
    };
    let db = Database::open(&db_dir, opts.clone()).expect("open");
    assert_eq!(db.stats().data_io, directkv::IoPath::Direct);
    for i in 0..300u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("k{i:04}").as_bytes(), &[i as u8; 700])
            .expect("put");
        w.commit().expect("commit");
    }
    drop(db);
    let db = Database::open(&db_dir, opts).expect("reopen");
    let n = db
        .begin_read()
        .expect("read")
        .range::<std::ops::RangeFull>(..)
        .count();
    assert_eq!(n, 300);
}
