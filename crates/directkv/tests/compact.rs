//! Compaction gives the free space inside the data file back to the
//! filesystem while transactions run: the pages in use move below a
//! boundary, the file is cut, and nothing is lost, at any step, across a
//! reopen, in the default keyspace, in tables, in dropped tables and in
//! long values' overflow chains.

// Keys are big-endian numbers, so that a run of numbers is a run of keys
// and deleting it frees whole leaves.
#![allow(clippy::big_endian_bytes)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use directkv::internals::io::Storage;
use directkv::internals::sim::SimStorage;
use directkv::{CompactOptions, Database, Error, Options};

use common::sim_opts;

type Model = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// The value of key `i`: every seventh long enough for an overflow chain.
fn value(i: u32, round: u8) -> Vec<u8> {
    let len = if i % 7 == 0 { 9000 } else { 150 };
    vec![round ^ (i as u8); len]
}

/// Puts keys `from..to` in the default keyspace (table "") or in table
/// `table`, in commits of 200, and notes them in `model`.
fn put_range<S: Storage>(db: &Database<S>, model: &mut Model, table: &str, from: u32, to: u32) {
    for chunk in (from..to).collect::<Vec<_>>().chunks(200) {
        let mut w = db.begin_write().expect("begin");
        let t = (!table.is_empty()).then(|| match w.open_table(table) {
            Ok(t) => t,
            Err(_) => w.create_table(table).expect("create"),
        });
        for &i in chunk {
            let (k, v) = (i.to_be_bytes(), value(i, 1));
            match &t {
                Some(t) => w.table(t).put(&k, &v).expect("put"),
                None => w.put(&k, &v).expect("put"),
            }
            model.insert((table.to_string(), k.to_vec()), v);
        }
        w.commit().expect("commit");
    }
}

/// Deletes keys `from..to` of `table` ("": the default keyspace).
fn delete_range<S: Storage>(db: &Database<S>, model: &mut Model, table: &str, from: u32, to: u32) {
    for chunk in (from..to).collect::<Vec<_>>().chunks(500) {
        let mut w = db.begin_write().expect("begin");
        let t = (!table.is_empty()).then(|| w.open_table(table).expect("open"));
        for &i in chunk {
            let k = i.to_be_bytes();
            match &t {
                Some(t) => w.table(t).delete(&k).expect("delete"),
                None => w.delete(&k).expect("delete"),
            }
            model.remove(&(table.to_string(), k.to_vec()));
        }
        w.commit().expect("commit");
    }
}

/// Everything the database holds, as the model keeps it.
fn read_all<S: Storage>(db: &Database<S>) -> Model {
    let r = db.begin_read().expect("read");
    let mut out = Model::new();
    for kv in r.range::<std::ops::RangeFull>(..) {
        let (k, v) = kv.expect("row");
        out.insert((String::new(), k), v);
    }
    for t in r.list_tables().expect("list") {
        let h = r.open_table(&t.name).expect("open");
        for kv in r.table(&h).range::<std::ops::RangeFull>(..) {
            let (k, v) = kv.expect("row");
            out.insert((t.name.clone(), k), v);
        }
    }
    out
}

/// Asserts that `db` holds exactly `model`, naming the first key that
/// differs (never printing the values).
fn assert_holds<S: Storage>(db: &Database<S>, model: &Model, ctx: &str) {
    let got = read_all(db);
    let differ = |a: &Model, b: &Model| {
        a.iter()
            .find(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.len(), b.get(k).map(Vec::len)))
    };
    assert!(
        got == *model,
        "{ctx}: {} keys held, {} expected; held but not so expected: {:?}; expected but not \
         so held: {:?}",
        got.len(),
        model.len(),
        differ(&got, model),
        differ(model, &got)
    );
}

/// A database of 12,000 keys in the default keyspace and two tables, of
/// which the first 90% of each are deleted and a third table dropped.
fn shrunk_database<S: Storage>(db: &Database<S>) -> Model {
    let mut model = Model::new();
    put_range(db, &mut model, "", 0, 4000);
    put_range(db, &mut model, "a", 0, 4000);
    put_range(db, &mut model, "b", 0, 4000);
    let mut gone = Model::new();
    put_range(db, &mut gone, "dropped", 0, 2000);
    let mut w = db.begin_write().expect("begin");
    w.drop_table("dropped").expect("drop");
    w.commit().expect("commit");
    for t in ["", "a", "b"] {
        delete_range(db, &mut model, t, 0, 3600);
    }
    // The dropped table's pages go back in steps, one per commit without
    // background threads.
    loop {
        let mut w = db.begin_write().expect("begin");
        w.put(b"tick", b"").expect("put");
        w.commit().expect("commit");
        if db.stats().tables.dropped == 0 {
            break;
        }
    }
    model.insert((String::new(), b"tick".to_vec()), Vec::new());
    model
}

/// A compaction moves what is in use below its boundary and cuts the
/// file: the file ends far shorter, every key reads back, the check
/// proves every page, and so does a reopen.
#[test]
fn compaction_cuts_the_file_and_keeps_every_key() {
    let dir = common::scratch();
    let opts = Options {
        page_bytes: 4096,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    let model = shrunk_database(&db);
    db.checkpoint().expect("checkpoint");
    let before = db.stats().space;
    let report = db.compact().expect("compact");
    assert!(report.finished, "{report:?}");
    assert!(report.pages_moved > 0, "{report:?}");
    let after = db.stats().space;
    let check = db.check().expect("check");
    assert_eq!(check.pages, after.pages);
    assert!(
        after.pages * 3 < before.pages,
        "the page count falls: {before:?} to {after:?}, {report:?}"
    );
    assert!(
        report.file_bytes_after * 3 < report.file_bytes_before,
        "the file is cut: {report:?}"
    );
    let len = std::fs::metadata(dir.path().join("data"))
        .expect("data")
        .len();
    assert!(len <= report.file_bytes_after.max(after.pages * 4096) + (1 << 20));
    assert_holds(&db, &model, "compacted");
    db.close().expect("close");
    let db = Database::open(dir.path(), opts).expect("reopen");
    assert_holds(&db, &model, "reopened");
    db.check().expect("check after reopen");
    db.close().expect("close");
}

/// A compaction stopped by its step limit stays under way: the check
/// proves the database at every step (pages set aside included), commits
/// go on between the calls, and a crash at any of several points keeps
/// it, for later calls to end.
#[test]
fn a_compaction_cut_short_is_checked_at_every_step_and_taken_up_after_a_crash() {
    for crash_after in [0u32, 1, 3, 6] {
        let disk = SimStorage::new();
        let path = Path::new("/sim/db");
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
        let mut model = shrunk_database(&db);
        let mut steps = 0;
        for round in 0..=crash_after {
            let ctx = format!("crash after {crash_after}, round {round}");
            let report = db
                .compact_with(&CompactOptions { max_steps: Some(3) })
                .expect("compact");
            assert!(!report.finished, "{ctx}: {report:?}");
            steps += report.steps;
            db.check()
                .unwrap_or_else(|e| panic!("{ctx}, {steps} steps: {e}"));
            assert_holds(&db, &model, &ctx);
            // Commits go on between the calls.
            put_range(
                &db,
                &mut model,
                "a",
                10_000 + round * 10,
                10_010 + round * 10,
            );
        }
        assert!(db.stats().space.compacting_to.is_some());
        drop(db);
        disk.crash(u64::from(crash_after));
        let db = Database::open_with(disk.clone(), path, sim_opts()).expect("reopen");
        db.check().expect("check after the crash");
        assert!(
            db.stats().space.compacting_to.is_some(),
            "kept across the crash"
        );
        finish(db, &model);
    }
}

/// Ends the compaction under way in `db` and checks it.
fn finish<S: Storage>(db: Database<S>, model: &Model) {
    let report = db.compact().expect("compact");
    assert!(report.finished, "{report:?}");
    assert!(report.pages_after * 3 < report.pages_before, "{report:?}");
    assert!(
        report.file_bytes_after * 3 < report.file_bytes_before,
        "{report:?}"
    );
    assert_eq!(db.stats().space.compacting_to, None);
    db.check().expect("check");
    assert_holds(&db, model, "finished");
}

/// Writers move money between accounts in the default keyspace and a
/// table while a compaction moves their pages, and snapshot readers sum
/// the accounts: every sum holds, nothing conflicts for good, and the
/// check proves the result.
#[test]
fn transactions_run_beside_a_compaction() {
    let dir = common::scratch();
    let opts = Options {
        page_bytes: 4096,
        ..common::unsynced(4 << 20)
    };
    let db = Database::open(dir.path(), opts).expect("open");
    let model = shrunk_database(&db);
    const ACCOUNTS: u32 = 200;
    let mut w = db.begin_write().expect("begin");
    let bank = w.create_table("bank").expect("create");
    for i in 0..ACCOUNTS {
        w.put(&(1_000_000 + i).to_be_bytes(), &100u64.to_le_bytes())
            .expect("put");
        w.table(&bank)
            .put(&i.to_be_bytes(), &100u64.to_le_bytes())
            .expect("put");
    }
    w.commit().expect("commit");
    let stop = std::sync::atomic::AtomicBool::new(false);
    // A snapshot may be refused as too old (`SnapshotTooOld`: the writers
    // outran the version store's cap on a loaded machine); one that reads
    // must read the right sum.
    let sum = |r: &directkv::ReadTxn<'_>| -> directkv::Result<u64> {
        let t = r.open_table("bank")?;
        let rows = r.table(&t).range::<std::ops::RangeFull>(..);
        let own = r.range(&1_000_000u32.to_be_bytes()[..]..&2_000_000u32.to_be_bytes()[..]);
        rows.chain(own)
            .map(|kv| kv.map(|(_, v)| u64::from_le_bytes(v.try_into().expect("u64"))))
            .sum()
    };
    let report = std::thread::scope(|s| {
        for seed in 0..2u32 {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                let mut n = seed;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n = n.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    let (a, b) = (n % ACCOUNTS, (n >> 8) % ACCOUNTS);
                    let r = db.transaction(&directkv::WriteOptions::default(), |tx| {
                        let t = tx.open_table("bank")?;
                        let from = tx.table(&t).get_for_update(&a.to_be_bytes())?;
                        let k = (1_000_000 + b).to_be_bytes();
                        let to = tx.get_for_update(&k)?;
                        let num = |v: Option<Vec<u8>>| {
                            u64::from_le_bytes(v.expect("row").try_into().expect("u64"))
                        };
                        let (from, to) = (num(from), num(to));
                        if from > 0 {
                            tx.table(&t)
                                .put(&a.to_be_bytes(), &(from - 1).to_le_bytes())?;
                            tx.put(&k, &(to + 1).to_le_bytes())?;
                        }
                        Ok(())
                    });
                    r.expect("transfer");
                }
            });
        }
        let (db, stop) = (&db, &stop);
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = db.begin_read().expect("read");
                match sum(&r) {
                    Ok(n) => assert_eq!(n, 2 * u64::from(ACCOUNTS) * 100, "a snapshot's sum"),
                    Err(Error::SnapshotTooOld { .. }) => {}
                    Err(e) => panic!("a snapshot's sum: {e}"),
                }
            }
        });
        let report = db.compact();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        report
    })
    .expect("compact");
    assert!(report.finished && report.pages_moved > 0, "{report:?}");
    assert!(report.pages_after * 2 < report.pages_before, "{report:?}");
    let r = db.begin_read().expect("read");
    assert_eq!(sum(&r).expect("sum"), 2 * u64::from(ACCOUNTS) * 100);
    drop(r);
    db.check().expect("check");
    let mut held = read_all(&db);
    held.retain(|(t, k), _| t != "bank" && !(t.is_empty() && k.len() == 4 && k[1] == 0x0f));
    assert!(
        held == model,
        "the rows no transfer touched are as they were"
    );
    db.close().expect("close");
}

/// Commits that allocate more than the compaction's slack run its free
/// list dry mid-way: the file grows past the boundary, the passes see it,
/// and the compaction still ends (cutting less, or raising its boundary and
/// cutting nothing) with every key kept and the check clean.
#[test]
fn a_compaction_outgrown_by_commits_still_ends_with_everything_kept() {
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
    let mut model = shrunk_database(&db);
    let mut n = 20_000;
    for _ in 0..30 {
        let report = db
            .compact_with(&CompactOptions { max_steps: Some(4) })
            .expect("compact");
        db.check().expect("check");
        if report.finished {
            break;
        }
        // Far more pages than the slack (a sixteenth of the pages in use).
        put_range(&db, &mut model, "b", n, n + 600);
        n += 600;
    }
    let report = db.compact().expect("compact");
    assert!(report.finished, "{report:?}");
    db.check().expect("check");
    assert_holds(&db, &model, "outgrown");
    assert_eq!(db.stats().space.compacting_to, None);
    drop(db);
    disk.crash(3);
    let db = Database::open_with(disk, path, sim_opts()).expect("reopen");
    db.check().expect("check after a crash");
    assert_holds(&db, &model, "reopened");
}

/// A cut the filesystem did not keep, and a cut that took too much: after
/// a compaction ended and the database closed, (a) the data file put back
/// to its length before the cut, stale pages past the page count, opens,
/// checks clean, reads every key, and the next compaction cuts it again;
/// (b) the data file cut below the page count by more than the log could
/// have written since the checkpoint is refused at open as corrupt (the
/// error on `CONTROL`'s page count, its detail naming the data file as
/// shorter), and the refusal changes no file: put back, the database is
/// whole.
#[test]
fn a_cut_undone_is_cut_again_and_one_past_the_count_is_refused() {
    let dir = common::scratch();
    // The file grows only by page writes, so its length is the count's
    // whenever no page past it was written.
    let opts = Options {
        page_bytes: 4096,
        cache_bytes: 4 << 20,
        data_extend_bytes: 0,
        ..Options::default()
    };
    let data = dir.path().join("data");
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    let model = shrunk_database(&db);
    db.checkpoint().expect("checkpoint");
    let before = std::fs::read(&data).expect("read data");
    let report = db.compact().expect("compact");
    assert!(
        report.finished && report.pages_after < report.pages_before,
        "{report:?}"
    );
    db.close().expect("close");
    let cut_len = std::fs::metadata(&data).expect("data").len();
    assert_eq!(cut_len, report.pages_after * 4096, "cut to the count");
    assert!(cut_len < before.len() as u64);

    // (a) The cut undone: the old bytes back past the count.
    let mut undone = std::fs::read(&data).expect("read data");
    undone.extend_from_slice(&before[cut_len as usize..]);
    std::fs::write(&data, &undone).expect("write data");
    let db = Database::open(dir.path(), opts.clone()).expect("open with the cut undone");
    let check = db.check().expect("check with the cut undone");
    assert_eq!(check.pages, report.pages_after, "the count, not the file");
    assert_holds(&db, &model, "the cut undone");
    let again = db.compact().expect("compact again");
    assert!(again.finished, "{again:?}");
    assert_eq!(again.file_bytes_before, before.len() as u64, "{again:?}");
    assert_eq!(
        again.file_bytes_after,
        report.pages_after * 4096,
        "{again:?}"
    );
    db.close().expect("close");
    assert_eq!(std::fs::metadata(&data).expect("data").len(), cut_len);

    // (b) Cut past the count, by more than the log explains.
    let whole = std::fs::read(&data).expect("read data");
    let short = cut_len - 40 * 4096;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .and_then(|f| f.set_len(short))
        .expect("cut the data file");
    match Database::open(dir.path(), opts.clone()) {
        // The count is CONTROL's (the error's offset is its field there);
        // the detail names the data file as the likely cause.
        Err(Error::Corruption { path, detail, .. }) => {
            assert!(
                path.ends_with("CONTROL") && detail.contains("the data file is shorter"),
                "{}: {detail}",
                path.display()
            );
        }
        Err(e) => panic!("refused as other than corrupt: {e}"),
        Ok(_) => panic!("a data file short of its page count opened"),
    }
    assert_eq!(
        std::fs::metadata(&data).expect("data").len(),
        short,
        "left as found"
    );
    // Put back, the database is whole.
    std::fs::write(&data, &whole).expect("write data");
    let db = Database::open(dir.path(), opts).expect("open put back");
    db.check().expect("check put back");
    assert_holds(&db, &model, "put back");
    db.close().expect("close");
}

/// A small cache: the steps are sized to it (a scan step lists at most a
/// quarter of the cache's pages, a walk step moves at most a sixteenth), so
/// a compaction with a cache of 160 pages ends like one with a large cache.
#[test]
fn a_compaction_fits_its_steps_to_a_small_cache() {
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let db = Database::open_with(disk.clone(), path, sim_opts()).expect("open");
    let model = shrunk_database(&db);
    db.close().expect("close");
    let opts = Options {
        cache_bytes: 160 * 4096,
        ..sim_opts()
    };
    let db = Database::open_with(disk, path, opts).expect("reopen");
    let report = db.compact().expect("compact");
    assert!(report.finished, "{report:?}");
    assert!(report.pages_after * 3 < report.pages_before, "{report:?}");
    db.check().expect("check");
    assert_holds(&db, &model, "small cache");
}
