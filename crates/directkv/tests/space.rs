//! The data file's space: every commit counts the pages it puts on and
//! takes off the free list, so `stats().space` reports the free pages with
//! no walk, exactly the number `check` walks, through deletes, drops,
//! reuse, power cuts at any point, reopens, backups and restores.

// Keys are big-endian numbers, so that a run of numbers is a run of keys
// and deleting it frees whole leaves.
#![allow(clippy::big_endian_bytes)]

mod common;

use std::path::Path;

use directkv::internals::io::Storage;
use directkv::internals::sim::SimStorage;
use directkv::{Database, Options};

use common::sim_opts;

/// The free pages `stats()` gives, after proving them equal to what
/// `check` walks.
fn free_pages<S: Storage>(db: &Database<S>, ctx: &str) -> u64 {
    let report = db.check().unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let space = db.stats().space;
    assert!(report.free_pages_counted, "{ctx}");
    assert_eq!(space.free_pages, Some(report.free_pages), "{ctx}");
    assert_eq!(space.pages, report.pages, "{ctx}");
    assert_eq!(space.page_bytes, 4096, "{ctx}");
    report.free_pages
}

/// Puts keys `from..to` of the default keyspace (every tenth value long,
/// on an overflow chain) in commits of 200.
fn put_range<S: Storage>(db: &Database<S>, from: u32, to: u32) {
    for chunk in (from..to).collect::<Vec<_>>().chunks(200) {
        let mut w = db.begin_write().expect("begin");
        for &i in chunk {
            let len = if i % 10 == 0 { 6000 } else { 200 };
            w.put(&i.to_be_bytes(), &vec![i as u8; len]).expect("put");
        }
        w.commit().expect("commit");
    }
}

fn delete_range<S: Storage>(db: &Database<S>, from: u32, to: u32) {
    for chunk in (from..to).collect::<Vec<_>>().chunks(500) {
        let mut w = db.begin_write().expect("begin");
        for &i in chunk {
            w.delete(&i.to_be_bytes()).expect("delete");
        }
        w.commit().expect("commit");
    }
}

/// A new database has no free page; deletes and a dropped table's steps
/// free pages, writes reuse them, and the count follows each commit.
#[test]
fn the_free_count_follows_frees_and_reuse() {
    let disk = SimStorage::new();
    let db = Database::open_with(disk.clone(), Path::new("/sim/db"), sim_opts()).expect("open");
    assert_eq!(free_pages(&db, "new"), 0);
    put_range(&db, 0, 3000);
    assert_eq!(free_pages(&db, "filled"), 0, "nothing freed yet");
    delete_range(&db, 0, 2000);
    let freed = free_pages(&db, "deleted");
    assert!(freed > 100, "whole leaves and chains are freed: {freed}");
    let mut w = db.begin_write().expect("begin");
    let t = w.create_table("t").expect("create");
    for i in 0..1000u32 {
        w.table(&t).put(&i.to_be_bytes(), &[1; 300]).expect("put");
    }
    w.commit().expect("commit");
    let reused = free_pages(&db, "reused");
    assert!(
        reused < freed,
        "the table took free pages: {reused} of {freed}"
    );
    let mut w = db.begin_write().expect("begin");
    w.drop_table("t").expect("drop");
    w.commit().expect("commit");
    let mut last = free_pages(&db, "dropped");
    while db.stats().tables.dropped > 0 {
        let mut w = db.begin_write().expect("begin");
        w.put(b"tick", b"").expect("put");
        w.commit().expect("commit");
        let now = free_pages(&db, "a drop step");
        assert!(now >= last, "a step frees pages: {last} then {now}");
        last = now;
    }
    assert!(last > reused, "the table's pages are free again");
    db.close().expect("close");
    let db = Database::open_with(disk, Path::new("/sim/db"), sim_opts()).expect("reopen");
    assert_eq!(free_pages(&db, "reopened"), last);
}

/// A power cut at any point of deletes, reuse and a drop's steps leaves a
/// count that `check` proves after recovery.
#[test]
fn the_free_count_survives_a_power_cut_at_every_point() {
    let path = Path::new("/sim/db");
    let mut counted = 0;
    for after in (1..600u64).step_by(13) {
        let disk = SimStorage::new();
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
        put_range(&db, 0, 1500);
        let mut w = db.begin_write().expect("begin");
        let t = w.create_table("t").expect("create");
        for i in 0..400u32 {
            w.table(&t).put(&i.to_be_bytes(), &[2; 500]).expect("put");
        }
        w.commit().expect("commit");
        disk.power_fail_after(after);
        let run = || -> directkv::Result<()> {
            for chunk in (0..1500u32).collect::<Vec<_>>().chunks(300) {
                let mut w = db.begin_write()?;
                for &i in chunk {
                    w.delete(&i.to_be_bytes())?;
                }
                w.commit()?;
            }
            let mut w = db.begin_write()?;
            w.drop_table("t")?;
            w.commit()?;
            for i in 0..50u32 {
                let mut w = db.begin_write()?;
                w.put(&i.to_be_bytes(), &[3; 5000])?;
                w.commit()?;
            }
            Ok(())
        };
        let _ = run();
        std::mem::forget(db);
        disk.crash(after);
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("reopen");
        counted += usize::from(free_pages(&db, &format!("cut after {after}")) > 0);
    }
    assert!(counted > 10, "{counted} cuts fell after pages were freed");
}

/// A backup carries the count of the checkpoint it copies, and a restore
/// to any point (the log replayed over it) ends with the count `check`
/// walks.
#[test]
fn backups_and_restores_carry_the_free_count() {
    let root = common::scratch();
    let (db_dir, archive, backup) = (
        root.path().join("db"),
        root.path().join("archive"),
        root.path().join("backup"),
    );
    let opts = Options {
        page_bytes: 4096,
        wal_segment_bytes: 64 << 10,
        checkpoint_wal_bytes: 256 << 10,
        wal_archive: Some(archive.clone()),
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(&db_dir, opts).expect("open");
    put_range(&db, 0, 2000);
    delete_range(&db, 0, 1000);
    let at_backup = free_pages(&db, "before the backup");
    db.backup(&backup, &directkv::BackupOptions::default())
        .expect("backup");
    let mut w = db.begin_write().expect("begin");
    w.put(b"mark", b"").expect("put");
    let mark = w.commit_lsn().expect("commit");
    delete_range(&db, 1000, 1999);
    let mut w = db.begin_write().expect("begin");
    w.delete(&1999u32.to_be_bytes()).expect("delete");
    let deleted = w.commit_lsn().expect("commit");
    let at_end = free_pages(&db, "after the deletes");
    assert!(at_end > at_backup);
    // Whole segments after it: the archive holds only whole ones.
    for i in 0..200u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("pad{}", i % 20).as_bytes(), &[i as u8; 3000])
            .expect("put");
        w.commit().expect("commit");
    }
    db.checkpoint().expect("checkpoint");
    let at_close = free_pages(&db, "at close");
    db.close().expect("close");
    for (i, (target, want)) in [
        (directkv::RestoreTarget::Lsn(mark), at_backup),
        (directkv::RestoreTarget::Lsn(deleted), at_end),
        (directkv::RestoreTarget::End, at_close),
    ]
    .into_iter()
    .enumerate()
    {
        let dest = root.path().join(format!("restored{i}"));
        directkv::restore_backup_chain_to(&[&backup], &archive, target, &dest).expect("restore");
        let db = Database::open(&dest, common::unsynced(4 << 20)).expect("open restored");
        assert_eq!(free_pages(&db, &format!("restore {i}")), want);
    }
}

/// Sets the free-page count of `dir`'s newest `CONTROL` slot to `count`
/// and reseals the extension's CRC (bytes 128..176 then the generation,
/// at 176: `docs/file_format.md`).
fn rewrite_free_count(dir: &Path, count: u64) {
    let path = dir.join("CONTROL");
    let mut b = std::fs::read(&path).expect("CONTROL");
    let gen = |at: usize| u64::from_le_bytes(b[at + 16..at + 24].try_into().expect("8"));
    let valid = |at: usize| {
        let crc = u32::from_le_bytes(b[at + 88..at + 92].try_into().expect("4"));
        crc == crc32c::crc32c(&b[at..at + 88])
    };
    let slot = match (valid(0), valid(4096)) {
        (true, true) if gen(4096) > gen(0) => 4096,
        (true, _) => 0,
        _ => 4096,
    };
    let g = gen(slot);
    b[slot + 128..slot + 136].copy_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&b[slot + 128..slot + 176]), &g.to_le_bytes());
    b[slot + 176..slot + 180].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, b).expect("write CONTROL");
}

/// A free-page count that no longer fits the free list (a lost write can
/// part the two: both are read from disk) is corruption, named by `check`
/// and by the commit that meets it, never a panic.
#[test]
fn a_free_count_that_differs_from_the_list_is_corruption_not_a_panic() {
    for delta in [3i64, -3] {
        let root = common::scratch();
        let dir = root.path().join("db");
        let opts = || Options {
            page_bytes: 4096,
            ..common::unsynced(4 << 20)
        };
        let db = Database::open(&dir, opts()).expect("open");
        put_range(&db, 0, 3000);
        delete_range(&db, 0, 2000);
        let free = free_pages(&db, "before");
        db.close().expect("close");
        rewrite_free_count(&dir, free.checked_add_signed(delta).expect("in range"));
        let db = Database::open(&dir, opts()).expect("reopen");
        assert_eq!(
            db.stats().space.free_pages,
            free.checked_add_signed(delta),
            "the count as CONTROL holds it"
        );
        let e = db.check().expect_err("the count differs from the list");
        assert!(
            matches!(&e, directkv::Error::Corruption { .. }) && e.to_string().contains("counts"),
            "{e}"
        );
        let mut refused = None;
        for i in 0..3000u32 {
            let mut w = db.begin_write().expect("begin");
            w.put(&(10_000 + i).to_be_bytes(), &[5; 1000]).expect("put");
            if let Err(e) = w.commit() {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("a commit meets the end of the list");
        assert!(
            matches!(e, directkv::Error::Corruption { .. }),
            "{delta}: {e}"
        );
    }
}

/// A database whose count is not known (last written by a build that did
/// not count its free pages) learns it from a check, and keeps it: the
/// next commit and checkpoint carry it.
#[test]
fn a_check_counts_what_an_older_build_left_uncounted() {
    let root = common::scratch();
    let dir = root.path().join("db");
    let opts = || Options {
        page_bytes: 4096,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(&dir, opts()).expect("open");
    put_range(&db, 0, 3000);
    delete_range(&db, 0, 2000);
    let free = free_pages(&db, "counted");
    db.close().expect("close");
    rewrite_free_count(&dir, u64::MAX);
    let db = Database::open(&dir, opts()).expect("reopen");
    assert_eq!(db.stats().space.free_pages, None, "not known");
    let report = db.check().expect("check");
    assert!(report.free_pages_counted);
    assert_eq!(report.free_pages, free);
    assert_eq!(db.stats().space.free_pages, Some(free), "the check's count");
    put_range(&db, 5000, 5010);
    let after = free_pages(&db, "after a commit");
    db.close().expect("close");
    let db = Database::open(&dir, opts()).expect("reopen");
    assert_eq!(
        db.stats().space.free_pages,
        Some(after),
        "kept across a reopen"
    );
    free_pages(&db, "reopened");
}
