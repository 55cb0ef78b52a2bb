//! Named tables: each its own keyspace, created, renamed and dropped inside
//! ordinary write transactions, all or nothing with the transaction's other
//! writes (also across a power cut), seen by snapshots as of their
//! commit, and apart from each other and from the default keyspace in
//! keys, row locks and conflicts.

mod common;

use std::path::Path;

use directkv::internals::sim::SimStorage;
use directkv::{Database, Error, Isolation, Options, WriteOptions};

use common::sim_opts;

fn names<S: directkv::internals::io::Storage>(r: &directkv::ReadTxn<'_, S>) -> Vec<String> {
    let tables = r.list_tables().expect("list");
    tables.into_iter().map(|t| t.name).collect()
}

/// Create, write, read, rename, list and drop, across a reopen; the same
/// key in two tables and the default keyspace holds three values.
#[test]
fn tables_are_created_written_renamed_and_dropped_across_reopen() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let users = w.create_table("users").expect("create");
    let log = w.create_table("log").expect("create");
    assert!(matches!(
        w.create_table("users"),
        Err(Error::TableExists { .. })
    ));
    w.put(b"k", b"default").expect("put");
    w.table(&users).put(b"k", b"users").expect("put");
    w.table(&log).put(b"k", b"log").expect("put");
    assert_eq!(
        w.table(&users).get(b"k").expect("get"),
        Some(b"users".to_vec())
    );
    w.commit().expect("commit");
    let r = db.begin_read().expect("read");
    assert_eq!(names(&r), ["log", "users"]);
    let u = r.open_table("users").expect("open");
    assert_eq!(u.id(), users.id());
    assert_eq!(r.get(b"k").expect("get"), Some(b"default".to_vec()));
    assert_eq!(r.table(&u).get(b"k").expect("get"), Some(b"users".to_vec()));
    let all: Vec<_> = r.table(&log).prefix(b"").collect();
    assert_eq!(all.len(), 1);
    drop(r);
    let mut w = db.begin_write().expect("begin");
    w.rename_table("log", "audit").expect("rename");
    w.table(&log)
        .put(b"k2", b"via the old handle")
        .expect("put");
    w.commit().expect("commit");
    db.close().expect("close");

    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("reopen");
    let r = db.begin_read().expect("read");
    assert_eq!(names(&r), ["audit", "users"]);
    assert!(matches!(
        r.open_table("log"),
        Err(Error::TableNotFound { .. })
    ));
    let audit = r.open_table("audit").expect("open");
    assert_eq!(audit.id(), log.id(), "a rename keeps the id");
    let kv: Vec<_> = r
        .table(&audit)
        .prefix(b"")
        .map(|e| e.expect("entry"))
        .collect();
    assert_eq!(kv.len(), 2);
    drop(r);
    let mut w = db.begin_write().expect("begin");
    w.drop_table("audit").expect("drop");
    assert!(matches!(
        w.open_table("audit"),
        Err(Error::TableNotFound { .. })
    ));
    w.commit().expect("commit");
    let r = db.begin_read().expect("read");
    assert_eq!(names(&r), ["users"]);
    assert!(matches!(
        r.table(&audit).get(b"k"),
        Err(Error::TableNotVisible { .. })
    ));
    drop(r);
    let report = db.check().expect("check");
    assert!(report.keys >= 2, "{report:?}");
    db.close().expect("close");
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("reopen");
    assert_eq!(names(&db.begin_read().expect("read")), ["users"]);
    db.check().expect("check");
}

/// A transaction that creates, writes and drops tables and does not commit
/// leaves nothing: no name, no id reused, no pages.
#[test]
fn ddl_of_a_transaction_that_does_not_commit_never_happened() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let kept = w.create_table("kept").expect("create");
    w.table(&kept).put(b"a", b"1").expect("put");
    w.commit().expect("commit");
    let mut w = db.begin_write().expect("begin");
    let t = w.create_table("ghost").expect("create");
    w.table(&t).put(b"a", b"1").expect("put");
    w.drop_table("kept").expect("drop");
    w.abort();
    let r = db.begin_read().expect("read");
    assert_eq!(names(&r), ["kept"]);
    assert_eq!(r.table(&kept).get(b"a").expect("get"), Some(b"1".to_vec()));
    assert!(matches!(
        r.table(&t).get(b"a"),
        Err(Error::TableNotVisible { .. })
    ));
    drop(r);
    let mut w = db.begin_write().expect("begin");
    assert!(matches!(
        w.table(&t).put(b"b", b"2"),
        Err(Error::TableNotVisible { .. })
    ));
    let again = w.create_table("ghost").expect("the name is free");
    assert!(again.id() > t.id(), "ids are never reused");
    w.commit().expect("commit");
    db.check().expect("check");
}

/// The same key bytes in two tables are two keys: writers of each do not
/// wait for, or conflict with, each other, under either isolation.
#[test]
fn the_same_key_in_two_tables_neither_locks_nor_conflicts() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let a = w.create_table("a").expect("create");
    let b = w.create_table("b").expect("create");
    w.commit().expect("commit");
    for isolation in [Isolation::Serializable, Isolation::Snapshot] {
        let k = format!("{isolation:?}").into_bytes();
        let k = k.as_slice();
        let opts = WriteOptions {
            isolation,
            lock_timeout: std::time::Duration::from_millis(50),
            ..WriteOptions::default()
        };
        let mut t1 = db.begin_write_with(&opts).expect("begin");
        let mut t2 = db.begin_write_with(&opts).expect("begin");
        assert_eq!(t1.table(&a).get_for_update(k).expect("lock"), None);
        t2.table(&b)
            .put(k, b"b")
            .expect("another table's key is free");
        t2.put(k, b"default").expect("so is the default keyspace's");
        t1.table(&a).put(k, b"a").expect("put");
        t2.commit().expect("commit");
        t1.commit().expect("no conflict");
        let r = db.begin_read().expect("read");
        assert_eq!(r.table(&a).get(k).expect("get"), Some(b"a".to_vec()));
        assert_eq!(r.table(&b).get(k).expect("get"), Some(b"b".to_vec()));
        assert_eq!(r.get(k).expect("get"), Some(b"default".to_vec()));
    }
}

/// A handle is of one open database: used in another (or in the same one
/// opened again) it is refused, never read through.
#[test]
fn a_handle_of_another_open_database_is_refused() {
    let (d1, d2) = (common::scratch(), common::scratch());
    let one = Database::open(d1.path(), common::unsynced(4 << 20)).expect("open");
    let two = Database::open(d2.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = one.begin_write().expect("begin");
    let t = w.create_table("t").expect("create");
    w.table(&t).put(b"k", b"v").expect("put");
    w.commit().expect("commit");
    let mut w = two.begin_write().expect("begin");
    assert!(matches!(
        w.table(&t).put(b"k", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        w.table(&t).get(b"k"),
        Err(Error::InvalidArgument(_))
    ));
    let r = two.begin_read().expect("read");
    assert!(matches!(
        r.table(&t).get(b"k"),
        Err(Error::InvalidArgument(_))
    ));
    drop((w, r));
    one.close().expect("close");
    let one = Database::open(d1.path(), common::unsynced(4 << 20)).expect("reopen");
    let r = one.begin_read().expect("read");
    assert!(matches!(
        r.table(&t).get(b"k"),
        Err(Error::InvalidArgument(_))
    ));
    let t = r.open_table("t").expect("by name");
    assert_eq!(r.table(&t).get(b"k").expect("get"), Some(b"v".to_vec()));
}

/// A snapshot keeps reading a table dropped after it, whole; a newer one
/// does not see it; a transaction that wrote it and commits after the
/// drop is refused with a retryable conflict.
#[test]
fn a_drop_is_seen_as_of_its_commit() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let t = w.create_table("t").expect("create");
    for i in 0..2000u32 {
        w.table(&t).put(&i.to_le_bytes(), &[7; 50]).expect("put");
    }
    w.commit().expect("commit");
    let old = db.begin_read().expect("read");
    let mut writer = db.begin_write().expect("begin");
    writer.table(&t).put(b"late", b"x").expect("put");
    let mut d = db.begin_write().expect("begin");
    d.drop_table("t").expect("drop");
    d.commit().expect("commit");
    let err = writer.commit().expect_err("the table is gone");
    assert!(err.is_retryable(), "{err}");
    let new = db.begin_read().expect("read");
    assert!(matches!(
        new.open_table("t"),
        Err(Error::TableNotFound { .. })
    ));
    assert!(matches!(
        new.table(&t).get(&0u32.to_le_bytes()),
        Err(Error::TableNotVisible { .. })
    ));
    assert_eq!(old.open_table("t").expect("old snapshot").id(), t.id());
    let n = old.table(&t).prefix(b"").count();
    assert_eq!(n, 2000, "the old snapshot reads it whole");
}

/// One transaction writes ten tables and the default keyspace; a power cut
/// at every point of its commit leaves all of it or none, and the catalog
/// and pages check clean.
#[test]
fn a_commit_across_ten_tables_survives_a_power_cut_whole_or_not_at_all() {
    let path = Path::new("/sim/db");
    let mut saw = [false; 2];
    for after in 1..80u64 {
        let disk = SimStorage::new();
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
        let mut w = db.begin_write().expect("begin");
        let tables: Vec<_> = (0..10)
            .map(|i| w.create_table(&format!("t{i}")).expect("create"))
            .collect();
        w.commit().expect("commit");
        disk.power_fail_after(after);
        let mut w = db.begin_write().expect("begin");
        for (i, t) in tables.iter().enumerate() {
            for k in 0..20u32 {
                w.table(t)
                    .put(&k.to_le_bytes(), &[i as u8; 300])
                    .expect("put");
            }
        }
        w.put(b"marker", b"1").expect("put");
        let committed = w.commit().is_ok();
        std::mem::forget(db);
        disk.crash(after);
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("reopen");
        let r = db.begin_read().expect("read");
        let marker = r.get(b"marker").expect("get").is_some();
        if committed {
            assert!(marker, "after {after}: an acknowledged commit survives");
        }
        saw[usize::from(marker)] = true;
        assert_eq!(names(&r).len(), 10, "after {after}");
        for i in 0..tables.len() {
            let t = r.open_table(&format!("t{i}")).expect("open");
            let n = r.table(&t).prefix(b"").count();
            assert_eq!(n, if marker { 20 } else { 0 }, "after {after}: table {i}");
        }
        drop(r);
        db.check().expect("check");
    }
    assert_eq!(saw, [true, true], "cuts fell before and after the commit");
}

/// Fills table `name` of `db` with `n` keys (every tenth value long enough
/// for an overflow chain), in transactions of 200.
fn fill<S: directkv::internals::io::Storage>(db: &Database<S>, name: &str, n: u32) {
    let mut w = db.begin_write().expect("begin");
    let t = match w.open_table(name) {
        Ok(t) => t,
        Err(_) => w.create_table(name).expect("create"),
    };
    w.commit().expect("commit");
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let mut w = db.begin_write().expect("begin");
        for &i in chunk {
            let len = if i % 10 == 0 { 6000 } else { 200 };
            w.table(&t)
                .put(&i.to_le_bytes(), &vec![i as u8; len])
                .expect("put");
        }
        w.commit().expect("commit");
    }
}

/// Runs commits until the dropped tables' pages are all free (each commit
/// runs a step without background threads); returns how many it took.
fn commit_until_freed<S: directkv::internals::io::Storage>(db: &Database<S>) -> u32 {
    for n in 0..10_000 {
        if db.stats().tables.dropped == 0 {
            return n;
        }
        let mut w = db.begin_write().expect("begin");
        w.put(b"tick", &n.to_le_bytes()).expect("put");
        w.commit().expect("commit");
    }
    panic!("the dropped tables were never freed");
}

/// A dropped table's pages go back to the free list in bounded steps once
/// no snapshot older than the drop is left, and a table filled after it
/// reuses them: the file does not grow.
#[test]
fn a_dropped_table_is_freed_in_steps_after_its_last_snapshot_and_reused() {
    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
    fill(&db, "big", 3000);
    let full = db.check().expect("check");
    let old = db.begin_read().expect("a snapshot before the drop");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("big").expect("drop");
    w.commit().expect("commit");
    for i in 0..20u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(b"tick", &i.to_le_bytes()).expect("put");
        w.commit().expect("commit");
    }
    assert_eq!(
        db.stats().tables.dropped_pages_freed,
        0,
        "the old snapshot reads it"
    );
    let big = old.open_table("big").expect("open");
    assert_eq!(old.table(&big).prefix(b"").count(), 3000);
    drop(old);
    let steps = commit_until_freed(&db);
    let st = db.stats();
    assert!(steps > 3, "freed in steps, not at once: {steps}");
    assert!(st.tables.dropped_pages_freed >= full.tree_pages + full.overflow_pages - 4);
    let after = db.check().expect("check");
    assert_eq!(after.tables, 0);
    assert!(
        after.free_pages >= full.tree_pages + full.overflow_pages - 4,
        "{after:?}"
    );
    fill(&db, "again", 3000);
    let refilled = db.check().expect("check");
    assert!(
        refilled.pages <= full.pages + 8,
        "the free pages are reused: {} then {}",
        full.pages,
        refilled.pages
    );
}

/// A power cut at any point while a dropped table is being freed leaves a
/// database that checks clean and finishes freeing it after reopening.
#[test]
fn freeing_a_dropped_table_survives_a_power_cut_at_every_point() {
    let path = Path::new("/sim/db");
    let mut mid = 0;
    for after in (1..400u64).step_by(7) {
        let disk = SimStorage::new();
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
        fill(&db, "big", 1000);
        let mut w = db.begin_write().expect("begin");
        w.drop_table("big").expect("drop");
        w.commit().expect("commit");
        disk.power_fail_after(after);
        for i in 0..200u32 {
            let Ok(mut w) = db.begin_write() else { break };
            let _ = w.put(b"tick", &i.to_le_bytes());
            if w.commit().is_err() {
                break;
            }
        }
        let st = db.stats();
        mid += usize::from(st.tables.dropped_pages_freed > 0 && st.tables.dropped > 0);
        std::mem::forget(db);
        disk.crash(after);
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("reopen");
        db.check().unwrap_or_else(|e| panic!("after {after}: {e}"));
        let r = db.begin_read().expect("read");
        assert!(matches!(
            r.open_table("big"),
            Err(Error::TableNotFound { .. })
        ));
        drop(r);
        commit_until_freed(&db);
        let report = db.check().expect("check");
        assert_eq!(report.tables, 0, "after {after}");
    }
    assert!(mid >= 3, "{mid} cuts fell while the table was being freed");
}

/// Moves money between accounts spread over ten tables, from several
/// threads, while readers sum every table in one snapshot: each sum is the
/// total, and so is the last one.
#[test]
fn a_snapshot_across_ten_tables_is_one_consistent_cut() {
    let dir = common::scratch();
    let opts = Options {
        // A slow reader's snapshot is kept, not given up: the test is of
        // what it reads.
        version_store_bytes: Some(256 << 20),
        ..common::unsynced(8 << 20)
    };
    let db = Database::open(dir.path(), opts).expect("open");
    const ACCOUNTS: u32 = 50;
    let mut w = db.begin_write().expect("begin");
    for t in 0..10 {
        let table = w.create_table(&format!("bank{t}")).expect("create");
        for a in 0..ACCOUNTS {
            w.table(&table)
                .put(&a.to_le_bytes(), &100u64.to_le_bytes())
                .expect("put");
        }
    }
    w.commit().expect("commit");
    let total = 10 * u64::from(ACCOUNTS) * 100;
    let sum = |r: &directkv::ReadTxn<'_>| -> u64 {
        let mut s = 0;
        for t in 0..10 {
            let table = r.open_table(&format!("bank{t}")).expect("open");
            for e in r.table(&table).prefix(b"") {
                let (_, v) = e.expect("entry");
                s += u64::from_le_bytes(v.try_into().expect("eight bytes"));
            }
        }
        s
    };
    std::thread::scope(|s| {
        for seed in 1..=3u64 {
            let db = &db;
            s.spawn(move || {
                let mut x = seed;
                let mut next = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                for _ in 0..300 {
                    let (ta, tb) = (next(10), next(10));
                    let (ka, kb) = (
                        (next(50) as u32).to_le_bytes(),
                        (next(50) as u32).to_le_bytes(),
                    );
                    let r = db.transaction(&WriteOptions::default(), |w| {
                        let a = w.open_table(&format!("bank{ta}"))?;
                        let b = w.open_table(&format!("bank{tb}"))?;
                        let va = w.table(&a).get_for_update(&ka)?.expect("account");
                        let va = u64::from_le_bytes(va.try_into().expect("eight"));
                        if va == 0 || (ta, ka) == (tb, kb) {
                            return Ok(());
                        }
                        let vb = w.table(&b).get_for_update(&kb)?.expect("account");
                        let vb = u64::from_le_bytes(vb.try_into().expect("eight"));
                        w.table(&a).put(&ka, &(va - 1).to_le_bytes())?;
                        w.table(&b).put(&kb, &(vb + 1).to_le_bytes())
                    });
                    r.expect("a transfer commits or is retried");
                }
            });
        }
        for _ in 0..2 {
            let db = &db;
            s.spawn(move || {
                for _ in 0..40 {
                    let r = db.begin_read().expect("read");
                    assert_eq!(sum(&r), total, "one snapshot sums to the total");
                }
            });
        }
    });
    assert_eq!(sum(&db.begin_read().expect("read")), total);
    db.check().expect("check");
}

/// Ten thousand tables in one database: created, listed, written one by
/// one, reopened and dropped.
#[test]
fn ten_thousand_tables_are_created_listed_written_and_dropped() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(16 << 20)).expect("open");
    const N: u32 = 10_000;
    for chunk in 0..10 {
        let mut w = db.begin_write().expect("begin");
        for i in chunk * 1000..(chunk + 1) * 1000 {
            w.create_table(&format!("t{i:05}")).expect("create");
        }
        w.commit().expect("commit");
    }
    let r = db.begin_read().expect("read");
    let all = r.list_tables().expect("list");
    assert_eq!(all.len(), N as usize);
    assert_eq!(all[1234].name, "t01234");
    drop(r);
    for i in (0..N).step_by(7) {
        let mut w = db.begin_write().expect("begin");
        let t = w.open_table(&format!("t{i:05}")).expect("open");
        w.table(&t).put(b"k", &i.to_le_bytes()).expect("put");
        w.commit().expect("commit");
    }
    assert_eq!(db.stats().tables.tables, u64::from(N));
    db.close().expect("close");
    let db = Database::open(dir.path(), common::unsynced(16 << 20)).expect("reopen");
    let r = db.begin_read().expect("read");
    let t = r.open_table("t09996").expect("open");
    assert_eq!(
        r.table(&t).get(b"k").expect("get"),
        Some(9996u32.to_le_bytes().to_vec())
    );
    drop(r);
    let mut w = db.begin_write().expect("begin");
    for i in 0..N / 2 {
        w.drop_table(&format!("t{i:05}")).expect("drop");
    }
    w.commit().expect("commit");
    let report = db.check().expect("check");
    assert!(report.tables >= u64::from(N / 2), "{report:?}");
    assert_eq!(
        db.begin_read()
            .expect("read")
            .list_tables()
            .expect("list")
            .len(),
        5000
    );
}

/// A backup carries the tables, and a point-in-time restore cuts DDL as it
/// cuts writes: before a create the table is not there, after a drop it is
/// gone, in between it holds what was committed.
#[test]
fn backups_and_point_in_time_restores_carry_tables() {
    let root = common::scratch();
    let (db_dir, archive, backup) = (
        root.path().join("db"),
        root.path().join("archive"),
        root.path().join("backup"),
    );
    let opts = Options {
        wal_segment_bytes: 64 << 10,
        checkpoint_wal_bytes: 256 << 10,
        wal_archive: Some(archive.clone()),
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(&db_dir, opts).expect("open");
    let mut w = db.begin_write().expect("begin");
    let a = w.create_table("a").expect("create");
    w.table(&a).put(b"k", b"a1").expect("put");
    w.commit().expect("commit");
    db.backup(&backup, &directkv::BackupOptions::default())
        .expect("backup");
    let mut w = db.begin_write().expect("begin");
    let b = w.create_table("b").expect("create");
    w.table(&b).put(b"k", b"b1").expect("put");
    let created = w.commit_lsn().expect("commit");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("a").expect("drop");
    let dropped = w.commit_lsn().expect("commit");
    for i in 0..200u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(&(i % 20).to_le_bytes(), &[i as u8; 3000])
            .expect("put");
        w.commit().expect("commit");
    }
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    let restore = |target: directkv::RestoreTarget, i: u32| -> Vec<String> {
        let dest = root.path().join(format!("restored{i}"));
        directkv::restore_backup_chain_to(&[&backup], &archive, target, &dest).expect("restore");
        let db = Database::open(&dest, common::unsynced(4 << 20)).expect("open");
        db.check().expect("check");
        let r = db.begin_read().expect("read");
        let got = names(&r);
        for name in &got {
            let t = r.open_table(name).expect("open");
            let want = format!("{name}1").into_bytes();
            assert_eq!(r.table(&t).get(b"k").expect("get"), Some(want));
        }
        got
    };
    use directkv::RestoreTarget::Lsn as At;
    assert_eq!(restore(At(created), 0), ["a", "b"]);
    assert_eq!(restore(At(dropped), 1), ["b"]);
    assert_eq!(restore(directkv::RestoreTarget::End, 2), ["b"]);
    let before = directkv::Lsn::new(created.get() - 1);
    let early = restore(At(before), 3);
    assert_eq!(early, ["a"]);
}

/// `check` reports each table's keys and pages by name, a dropped one's
/// until it is freed, and the totals add up.
#[test]
fn check_reports_each_table() {
    let dir = common::scratch();
    let opts = Options {
        background_threads: false,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let mut w = db.begin_write().expect("begin");
    let a = w.create_table("a").expect("create");
    let b = w.create_table("b").expect("create");
    for i in 0..500u32 {
        w.table(&a).put(&i.to_le_bytes(), &[1; 100]).expect("put");
    }
    w.table(&b).put(b"big", &[2; 20_000]).expect("put");
    w.put(b"k", b"v").expect("put");
    w.commit().expect("commit");
    let report = db.check().expect("check");
    let d = &report.table_details;
    assert_eq!(d.len(), 2);
    assert_eq!(
        (d[0].name.as_str(), d[0].keys, d[0].dropped),
        ("a", 500, false)
    );
    assert!(d[0].pages > 5, "{d:?}");
    assert_eq!((d[1].name.as_str(), d[1].keys), ("b", 1));
    assert!(d[1].pages >= 4, "the overflow chain is the table's: {d:?}");
    assert_eq!(report.keys, 502);
    let old = db.begin_read().expect("a snapshot keeps the dropped table");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("a").expect("drop");
    w.commit().expect("commit");
    let report = db.check().expect("check");
    let dropped = report
        .table_details
        .iter()
        .find(|t| t.id == a.id())
        .expect("a");
    assert!(dropped.dropped && dropped.name.is_empty(), "{dropped:?}");
    drop(old);
}

/// A reader whose snapshot was given up never descends a dropped table's
/// pages once they are freed (and reused): its reads and its iterator fail
/// with `SnapshotTooOld`, and the database goes on, healthy.
#[test]
fn a_given_up_snapshot_never_reads_a_freed_table() {
    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let opts = Options {
        version_store_bytes: Some(64 << 10),
        ..sim_opts()
    };
    let db = Database::open_with(disk.clone(), path, opts).expect("open");
    fill(&db, "big", 1000);
    let old = db.begin_read().expect("read");
    let big = old.open_table("big").expect("open");
    let mut it = old.table(&big).prefix(b"");
    assert!(it.next().expect("an entry").is_ok());
    let mut w = db.begin_write().expect("begin");
    w.drop_table("big").expect("drop");
    w.commit().expect("commit");
    // Changes past the version store's cap give the old snapshot up; the
    // commits then free the table, and a new table takes its pages.
    for i in 0..200u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(&(i % 10).to_le_bytes(), &[i as u8; 2000])
            .expect("put");
        w.commit().expect("commit");
    }
    assert!(db.stats().snapshots.snapshots_too_old >= 1);
    commit_until_freed(&db);
    fill(&db, "new", 1000);
    let err = old
        .table(&big)
        .get(&5u32.to_le_bytes())
        .expect_err("given up");
    assert!(matches!(err, Error::SnapshotTooOld { .. }), "{err}");
    let rest: Vec<_> = it.collect();
    assert!(
        matches!(rest.first(), Some(Err(Error::SnapshotTooOld { .. }))),
        "the iterator fails, reads nothing more"
    );
    drop(old);
    db.check().expect("check");
    let mut w = db.begin_write().expect("the database is healthy");
    w.put(b"after", b"1").expect("put");
    w.commit().expect("commit");
}

/// Names are read at the snapshot and DDL locks the name's row: under
/// Serializable a transaction that opened a name another commit then
/// dropped or renamed is refused; under Snapshot a create, rename or drop
/// of a name changed since the snapshot is refused at once; two creates
/// of one name queue, and the second finds the first's table.
#[test]
fn ddl_follows_the_isolation_rules_of_keys() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    w.create_table("a").expect("create");
    w.commit().expect("commit");
    let with = |isolation| WriteOptions {
        isolation,
        lock_timeout: std::time::Duration::from_millis(50),
        ..WriteOptions::default()
    };
    // Serializable: the name read is validated at commit.
    let mut reader = db
        .begin_write_with(&with(Isolation::Serializable))
        .expect("begin");
    let a = reader.open_table("a").expect("open");
    reader.put(b"saw a", &a.id().to_le_bytes()).expect("put");
    let mut r = db.begin_write().expect("begin");
    r.rename_table("a", "b").expect("rename");
    r.commit().expect("commit");
    let err = reader.commit().expect_err("its read of the name changed");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    // Snapshot: DDL on a name changed since the snapshot is refused.
    let mut late = db
        .begin_write_with(&with(Isolation::Snapshot))
        .expect("begin");
    let mut d = db.begin_write().expect("begin");
    d.drop_table("b").expect("drop");
    d.commit().expect("commit");
    let err = late
        .drop_table("b")
        .expect_err("changed since the snapshot");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    drop(late);
    // Two creates of one name: the second waits for the first's lock and
    // then finds the table.
    let mut first = db
        .begin_write_with(&with(Isolation::Serializable))
        .expect("begin");
    first.create_table("c").expect("create");
    let mut second = db
        .begin_write_with(&with(Isolation::Serializable))
        .expect("begin");
    let err = second.create_table("c").expect_err("the name is locked");
    assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
    drop(second);
    first.commit().expect("commit");
    let mut third = db.begin_write().expect("begin");
    let err = third.create_table("c").expect_err("taken");
    assert!(matches!(err, Error::TableExists { .. }), "{err}");
    assert!(matches!(
        third.drop_table("a"),
        Err(Error::TableNotFound { .. })
    ));
}

/// Every page carries the tree it belongs to: a descent that reaches a
/// page of another tree (a pointer across tables) and the check both refuse
/// it as corruption naming the page, never read it as the table's.
#[test]
fn a_page_of_another_tree_below_a_table_is_corruption() {
    use directkv::internals::pages::page;
    use std::os::unix::fs::FileExt;
    let dir = common::scratch();
    let opts = Options {
        page_bytes: 4096,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    let mut w = db.begin_write().expect("begin");
    let a = w.create_table("a").expect("create");
    let b = w.create_table("b").expect("create");
    for i in 0..2000u32 {
        w.table(&a).put(&i.to_le_bytes(), &[1; 60]).expect("put");
        w.table(&b).put(&i.to_le_bytes(), &[2; 60]).expect("put");
    }
    w.commit().expect("commit");
    db.close().expect("close");
    // The first leaf of table a, marked as table b's.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("data"))
        .expect("data");
    let pages = file.metadata().expect("meta").len() / 4096;
    let mut hit = None;
    for no in 1..pages {
        let mut p = vec![0u8; 4096];
        file.read_exact_at(&mut p, no * 4096).expect("read");
        let id: [u8; 16] = p[32..48].try_into().expect("16 bytes");
        let Ok(h) = page::verify(&p, directkv::internals::pages::PageId::new(no), &id) else {
            continue;
        };
        if h.page_type == page::PageType::Leaf && h.tree == a.id() {
            p[12..16].copy_from_slice(&b.id().to_le_bytes());
            page::seal_in_place(&mut p, directkv::internals::pages::PageId::new(no), &id);
            file.write_all_at(&p, no * 4096).expect("write");
            hit = Some(no);
            break;
        }
    }
    let no = hit.expect("a leaf of table a");
    drop(file);
    let db = Database::open(dir.path(), opts).expect("reopen");
    let r = db.begin_read().expect("read");
    let a = r.open_table("a").expect("open");
    let err = r
        .table(&a)
        .prefix(b"")
        .find_map(|e| e.err())
        .expect("the scan meets the page");
    assert!(
        matches!(err, Error::Corruption { page: Some(p), .. } if p == no),
        "{err}"
    );
    let err = db.check().expect_err("the check refuses it");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
}

/// Table ids are never given twice: not after the highest table was
/// dropped and freed, and not after a reopen.
#[test]
fn table_ids_are_not_reused_after_a_drop_and_a_reopen() {
    let dir = common::scratch();
    let opts = Options {
        background_threads: false,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    let mut w = db.begin_write().expect("begin");
    let a = w.create_table("a").expect("create");
    let b = w.create_table("b").expect("create");
    w.commit().expect("commit");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("b").expect("drop");
    w.commit().expect("commit");
    commit_until_freed(&db);
    db.close().expect("close");
    let db = Database::open(dir.path(), opts).expect("reopen");
    let mut w = db.begin_write().expect("begin");
    let c = w.create_table("c").expect("create");
    w.commit().expect("commit");
    assert!(c.id() > b.id() && b.id() > a.id(), "{a:?} {b:?} {c:?}");
    db.check().expect("check");
}

/// A table created and dropped in one transaction never existed; a table
/// dropped and created again under its name in one transaction is a new,
/// empty table; under Serializable, a name opened and then dropped by
/// another commit refuses the commit.
#[test]
fn ddl_within_one_transaction_and_a_drop_beside_an_open() {
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(4 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let gone = w.create_table("gone").expect("create");
    w.table(&gone).put(b"k", b"v").expect("put");
    w.drop_table("gone").expect("drop");
    let t = w.create_table("t").expect("create");
    w.table(&t).put(b"k", b"old").expect("put");
    w.commit().expect("commit");
    let r = db.begin_read().expect("read");
    assert_eq!(names(&r), ["t"]);
    drop(r);
    let mut w = db.begin_write().expect("begin");
    w.drop_table("t").expect("drop");
    let again = w.create_table("t").expect("the name is free again");
    assert_ne!(again.id(), t.id());
    assert_eq!(w.table(&again).get(b"k").expect("get"), None);
    w.table(&again).put(b"new", b"1").expect("put");
    w.commit().expect("commit");
    let r = db.begin_read().expect("read");
    let now = r.open_table("t").expect("open");
    assert_eq!(now.id(), again.id());
    assert_eq!(r.table(&now).prefix(b"").count(), 1);
    drop(r);
    let mut reader = db.begin_write().expect("begin");
    let opened = reader.open_table("t").expect("open");
    reader
        .put(b"saw t", &opened.id().to_le_bytes())
        .expect("put");
    let mut d = db.begin_write().expect("begin");
    d.drop_table("t").expect("drop");
    d.commit().expect("commit");
    let err = reader.commit().expect_err("the name it read is gone");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    db.check().expect("check");
}

/// The page cleaner frees a dropped table in the background, and a step
/// frees a bounded number of pages even when the table's values are long
/// overflow chains (a chain is freed a piece at a time).
#[test]
fn the_cleaner_frees_a_dropped_table_of_long_values_in_bounded_steps() {
    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
    let mut w = db.begin_write().expect("begin");
    let t = w.create_table("long").expect("create");
    w.commit().expect("commit");
    for i in 0..8u32 {
        let mut w = db.begin_write().expect("begin");
        w.table(&t)
            .put(&i.to_le_bytes(), &vec![i as u8; 600_000])
            .expect("put");
        w.commit().expect("commit");
    }
    let pages = db.check().expect("check").table_details[0].pages;
    assert!(pages > 1000, "{pages} pages");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("long").expect("drop");
    w.commit().expect("commit");
    let steps = u64::from(commit_until_freed(&db)) + 1;
    let freed = db.stats().tables.dropped_pages_freed;
    assert!(freed >= pages, "{freed} of {pages}");
    assert!(
        freed / steps <= 32 + 8,
        "a step holds at most 32 pages and a path: {freed} in {steps} steps"
    );
    db.check().expect("check");
    drop(db);
    // With background threads, the cleaner frees a drop by itself.
    let dir = common::scratch();
    let db = Database::open(dir.path(), common::unsynced(8 << 20)).expect("open");
    let mut w = db.begin_write().expect("begin");
    let t = w.create_table("t").expect("create");
    for i in 0..3000u32 {
        w.table(&t).put(&i.to_le_bytes(), &[3; 200]).expect("put");
    }
    w.commit().expect("commit");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("t").expect("drop");
    w.commit().expect("commit");
    let mut waited = 0;
    while db.stats().tables.dropped > 0 {
        assert!(waited < 6000, "the cleaner never freed the table");
        std::thread::sleep(std::time::Duration::from_millis(10));
        waited += 1;
    }
    let report = db.check().expect("check");
    assert_eq!(report.tables, 0);
    assert!(report.free_pages > 50, "{report:?}");
}

/// A table's id, name, whether dropped, and pages.
type Figures = Vec<(u32, String, bool, u64)>;

/// What `stats()` gives for each table (kept by every commit) and what
/// `check` counts by walking.
fn each_table<S: directkv::internals::io::Storage>(db: &Database<S>) -> (Figures, Figures) {
    let mut kept = db.stats().tables.largest;
    kept.sort_by_key(|t| t.id);
    let kept = kept.into_iter().map(|t| (t.id, t.name, t.dropped, t.pages));
    let walked = db.check().expect("check").table_details;
    let walked = walked
        .into_iter()
        .map(|t| (t.id, t.name, t.dropped, t.pages));
    (kept.collect(), walked.collect())
}

/// Each table's page count in `stats()` is what `check` walks, through
/// splits, overflow chains written and replaced, deletes, a rename, every
/// step of a drop, and a power cut in the middle of them.
#[test]
fn each_tables_pages_in_stats_are_what_check_walks() {
    let path = Path::new("/sim/db");
    let disk = SimStorage::new();
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
    fill(&db, "a", 2000);
    fill(&db, "b", 500);
    let (kept, walked) = each_table(&db);
    assert_eq!(kept, walked);
    assert!(kept[0].3 > 50 && kept[1].3 > 10, "{kept:?}");
    assert_eq!(db.stats().tables.pages, kept[0].3 + kept[1].3);
    let mut w = db.begin_write().expect("begin");
    let b = w.open_table("b").expect("open");
    for i in 0..500u32 {
        if i % 2 == 0 {
            w.table(&b).delete(&i.to_le_bytes()).expect("delete");
        } else {
            // Long values become short: their chains are freed.
            w.table(&b).put(&i.to_le_bytes(), b"short").expect("put");
        }
    }
    w.rename_table("a", "renamed").expect("rename");
    w.commit().expect("commit");
    let (kept, walked) = each_table(&db);
    assert_eq!(kept, walked);
    assert_eq!(kept[0].1, "renamed");
    let old = db.begin_read().expect("a snapshot keeps the drop waiting");
    let mut w = db.begin_write().expect("begin");
    w.drop_table("renamed").expect("drop");
    w.commit().expect("commit");
    let (kept, walked) = each_table(&db);
    assert_eq!(kept, walked);
    assert!(kept[0].2 && kept[0].1.is_empty(), "{kept:?}");
    drop(old);
    let mut counts = Vec::new();
    for i in 0..3u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(b"tick", &i.to_le_bytes()).expect("put");
        w.commit().expect("commit");
        let (kept, walked) = each_table(&db);
        assert_eq!(kept, walked, "step {i}");
        counts.push(kept[0].3);
    }
    assert!(
        counts.windows(2).all(|w| w[1] < w[0]),
        "freed step by step: {counts:?}"
    );
    disk.power_fail_after(40);
    for i in 0..100u32 {
        let Ok(mut w) = db.begin_write() else { break };
        let _ = w.put(b"tick", &i.to_le_bytes());
        if w.commit().is_err() {
            break;
        }
    }
    std::mem::forget(db);
    disk.crash(40);
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("reopen");
    let (kept, walked) = each_table(&db);
    assert_eq!(kept, walked, "after a power cut");
    assert!(kept.len() == 2 || kept.len() == 1, "{kept:?}");
    commit_until_freed(&db);
    let (kept, walked) = each_table(&db);
    assert_eq!(kept, walked);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].1, "b");
}

/// `stats()` lists the tables with the most pages, most first, at most
/// `TABLES_LISTED` of them, and counts every table's pages in its total.
#[test]
fn stats_list_the_largest_tables_and_count_them_all() {
    let disk = SimStorage::new();
    let db = Database::open_with(disk, Path::new("/sim/db"), sim_opts()).expect("open");
    let n = directkv::TABLES_LISTED as u32 + 4;
    for i in 0..n {
        let mut w = db.begin_write().expect("begin");
        let t = w.create_table(&format!("t{i:02}")).expect("create");
        // Table i holds i + 1 overflow values: more pages the later.
        for k in 0..=i {
            w.table(&t).put(&k.to_le_bytes(), &[7; 5000]).expect("put");
        }
        w.commit().expect("commit");
    }
    let s = db.stats().tables;
    let walked = db.check().expect("check").table_details;
    assert_eq!(s.largest.len(), directkv::TABLES_LISTED);
    assert_eq!(s.pages, walked.iter().map(|t| t.pages).sum::<u64>());
    let mut by_pages: Vec<_> = walked.iter().map(|t| (t.pages, t.id)).collect();
    by_pages.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let listed: Vec<_> = s.largest.iter().map(|t| (t.pages, t.id)).collect();
    assert_eq!(
        listed,
        by_pages[..directkv::TABLES_LISTED],
        "the largest, most first"
    );
    assert_eq!(s.largest[0].name, format!("t{:02}", n - 1));
}
