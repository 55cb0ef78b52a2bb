//! Online backups on real files.
//!
//! - A backup taken while 8 threads commit bank transfers, with small log
//!   segments and checkpoints forced meanwhile (so recycling would eat the
//!   log the backup needs were it not pinned), verifies, restores, opens to
//!   a state whose structure checks and whose money adds up, and holds at
//!   least every transfer acknowledged before the backup began.
//! - A backup never completed (marker missing), a truncated manifest, a
//!   missing or damaged file: open, restore and verify each refuse, naming
//!   what is wrong, and a failed restore leaves nothing at its destination.
//! - A damaged page of the database fails the backup, naming the page.
//! - A chain of a full backup and three increments restores, link by link,
//!   to exactly the database's contents when each was taken; every broken
//!   chain is refused naming the culprit.
//! - Destinations inside the database, or not empty, are refused.
//! - A manifest edited and sealed again (its CRC line and marker made to
//!   match) with its end lowered, its last segment dropped with the file,
//!   or beside a file it does not list: restore refuses each with the
//!   error verify gives, and leaves nothing at its destination.
//! - A restore of one full backup reads each of the backup's files once,
//!   counted by a storage that counts the bytes read from each file.
//! - What a restore makes is a database and no backup, wherever it is
//!   moved: verify, restore and incremental backups refuse it as one.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use directkv::internals::engine::restore_chain_with;
use directkv::internals::io::{
    Alignment, FileMeta, FileOptions, Fill, IoMut, IoRef, OsStorage, Storage, StorageFile,
};
use directkv::{
    restore_backup, restore_backup_chain, verify_backup, BackupOptions, Database, Error, Options,
    WriteOptions,
};
use directkv::{IoPath, Permissions};

const ACCOUNTS: u64 = 500;
const START_BALANCE: u64 = 1000;

fn options() -> Options {
    Options {
        cache_bytes: 8 << 20,
        wal_segment_bytes: 256 << 10,
        checkpoint_wal_bytes: 512 << 10,
        ..Options::default()
    }
}

fn account(i: u64) -> Vec<u8> {
    format!("acct/{i:05}").into_bytes()
}

fn balance(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().expect("an 8-byte balance"))
}

fn fill(db: &Database) {
    let mut w = db.begin_write().expect("begin");
    for i in 0..ACCOUNTS {
        // Padding makes the data span many pages.
        let mut v = START_BALANCE.to_le_bytes().to_vec();
        v.resize(200, 0x5A);
        w.put(&account(i), &v).expect("put");
    }
    w.commit().expect("commit");
}

/// Moves `amount` (or what there is) from `from` to `to`.
fn transfer(db: &Database, from: u64, to: u64, amount: u64) -> directkv::Result<()> {
    db.transaction(&WriteOptions::default(), |w| {
        let (fk, tk) = (account(from), account(to));
        let have = w.get(&fk)?.map_or(0, |v| balance(&v));
        let moved = amount.min(have);
        let to_before = w.get(&tk)?.map_or(0, |v| balance(&v));
        let mut a = (have - moved).to_le_bytes().to_vec();
        a.resize(200, 0x5A);
        let mut b = (to_before + moved).to_le_bytes().to_vec();
        b.resize(200, 0x5A);
        w.put(&fk, &a)?;
        w.put(&tk, &b)?;
        Ok(())
    })
}

/// The money in the database, and how many transfers the `done/` counter
/// keys say were made.
fn total(db: &Database) -> u64 {
    let r = db.begin_read().expect("read");
    r.prefix(b"acct/")
        .map(|e| balance(&e.expect("entry").1))
        .sum()
}

fn marks(db: &Database) -> u64 {
    let r = db.begin_read().expect("read");
    r.prefix(b"mark/").count() as u64
}

#[test]
fn backup_under_load_restores_a_consistent_state() {
    for round in 0..3u64 {
        let dir = common::scratch();
        let src = dir.path().join("db");
        // The smallest segments: any backup spans several.
        let small = Options {
            wal_segment_bytes: 64 << 10,
            checkpoint_wal_bytes: 256 << 10,
            ..options()
        };
        let db = Arc::new(Database::open(&src, small).expect("open"));
        fill(&db);
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for t in 0..8u64 {
            let (db, stop, acked) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&acked));
            threads.push(std::thread::spawn(move || {
                let mut x = round * 1_000 + t * 7 + 1;
                while !stop.load(Ordering::Relaxed) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let (a, b) = ((x >> 33) % ACCOUNTS, (x >> 13) % ACCOUNTS);
                    if a == b {
                        continue;
                    }
                    transfer(&db, a, b, x % 50).expect("transfer");
                    // A mark per acknowledged transfer of thread 0, so the
                    // restore can be shown to hold everything before the
                    // backup began.
                    if t == 0 {
                        let n = acked.fetch_add(1, Ordering::AcqRel);
                        let mut w = db.begin_write().expect("begin");
                        w.put(format!("mark/{n:08}").as_bytes(), b"").expect("put");
                        w.commit().expect("commit");
                    }
                }
            }));
        }
        // Checkpoints keep coming while the backup runs.
        let cp = {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    db.checkpoint().expect("checkpoint");
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let before = acked.load(Ordering::Acquire);
        let dest = dir.path().join("backup");
        // Paced, so the copy lasts while many checkpoints run.
        let opts = BackupOptions {
            fast_checkpoint: round != 1,
            rate_bytes: Some(512 << 10),
            ..BackupOptions::default()
        };
        let checkpoints = db.stats().checkpoints;
        // Progress is visible while the backup runs.
        let (report, running_seen) = std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                let mut seen = 0;
                while db.stats().backups == 0 {
                    seen = seen.max(db.stats().backup.running);
                    std::thread::sleep(Duration::from_millis(2));
                }
                seen
            });
            let report = db.backup(&dest, &opts).expect("backup");
            (report, watcher.join().expect("watcher"))
        });
        assert_eq!(running_seen, 1, "stats().backup showed the backup running");
        // Checkpoints ran while the backup did (besides its own): without
        // its pin, each would have recycled log it still had to copy.
        let checkpoints = db.stats().checkpoints - checkpoints;
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().expect("writer");
        }
        cp.join().expect("checkpointer");
        assert!(report.end_lsn > report.start_lsn, "{report:?}");
        assert!(report.wal_bytes > 0 && report.pages > 1, "{report:?}");
        assert!(
            checkpoints > 1,
            "round {round}: no checkpoint during {report:?}"
        );
        assert!(
            report.wal_bytes > 64 << 10,
            "round {round}: one segment in {report:?}"
        );
        assert_eq!(
            total(&db),
            ACCOUNTS * START_BALANCE,
            "the source is unharmed"
        );
        db.check().expect("source checks");

        let verified = verify_backup(&dest).expect("verify");
        assert_eq!(verified.end_lsn, report.end_lsn);
        assert!(verified.log_records > 0);
        let restored = dir.path().join("restored");
        restore_backup(&dest, &restored).expect("restore");
        let copy = Database::open(&restored, options()).expect("open restored");
        copy.check().expect("restored checks");
        assert_eq!(
            total(&copy),
            ACCOUNTS * START_BALANCE,
            "round {round}: money adds up"
        );
        let m = marks(&copy);
        assert!(
            m >= before,
            "round {round}: {m} marks restored, {before} acked before"
        );
        drop(copy);
        // The backup itself opens too, and is then a database.
        let opened = Database::open(&dest, options()).expect("open the backup in place");
        assert_eq!(total(&opened), ACCOUNTS * START_BALANCE);
        drop(opened);
        let err = verify_backup(&dest).expect_err("no longer a backup");
        assert!(matches!(err, Error::Corruption { .. }), "{err}");
    }
}

/// A closed database with some data, and a backup of it.
fn made_backup(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = dir.join("db");
    let db = Database::open(&src, options()).expect("open");
    fill(&db);
    let dest = dir.join("backup");
    db.backup(&dest, &BackupOptions::default()).expect("backup");
    db.close().expect("close");
    (src, dest)
}

#[test]
fn incomplete_or_damaged_backups_are_refused_by_name() {
    let dir = common::scratch();
    let (_, good) = made_backup(dir.path());
    verify_backup(&good).expect("a good backup verifies");
    // A destination named with a trailing slash is built beside itself,
    // not inside, and the rename that finishes the restore succeeds.
    let slash = dir.path().join("slash-restored");
    let mut with_slash = slash.clone().into_os_string();
    with_slash.push("/");
    restore_backup(&good, std::path::Path::new(&with_slash)).expect("restores");
    assert!(!slash.join(".restore-tmp").exists(), "no scratch inside");
    assert!(!dir.path().join("slash-restored.restore-tmp").exists());
    Database::open(&slash, options()).expect("the restored database opens");
    let case = |name: &str, damage: &dyn Fn(&std::path::Path)| {
        let b = dir.path().join(name);
        common::copy_tree(&good, &b);
        damage(&b);
        let restored = dir.path().join(format!("{name}-restored"));
        let errs = [
            verify_backup(&b).map(drop).expect_err("verify refuses"),
            restore_backup(&b, &restored)
                .map(drop)
                .expect_err("restore refuses"),
        ];
        assert!(
            !restored.exists(),
            "{name}: nothing left at the destination"
        );
        assert!(
            !dir.path()
                .join(format!("{name}-restored.restore-tmp"))
                .exists(),
            "{name}: no scratch left"
        );
        errs
    };
    let errs = case("no-marker", &|b| {
        std::fs::remove_file(b.join("backup_complete")).expect("rm")
    });
    for e in &errs {
        assert!(matches!(e, Error::IncompleteBackup { .. }), "{e}");
    }
    let b = dir.path().join("no-marker");
    let err = Database::open(&b, options())
        .map(drop)
        .expect_err("open refuses");
    assert!(matches!(err, Error::IncompleteBackup { .. }), "{err}");

    let errs = case("cut-manifest", &|b| {
        let p = b.join("backup_manifest");
        let len = std::fs::metadata(&p).expect("stat").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .expect("open")
            .set_len(len / 2)
            .expect("cut");
    });
    for e in &errs {
        assert!(e.to_string().contains("backup_manifest"), "{e}");
    }
    // A manifest whose CRC is right but whose fields are not.
    let errs = case("bad-fields", &|b| {
        let p = b.join("backup_manifest");
        let text = std::fs::read_to_string(&p).expect("read");
        let body = text[..text.trim_end().rfind('\n').expect("crc line") + 1]
            .replace("\"page_bytes\": 8192", "\"page_bytes\": 0");
        let crc = crc32c::crc32c(body.as_bytes());
        std::fs::write(&p, format!("{body}crc32c {crc:08x}\n")).expect("write");
    });
    for e in &errs {
        assert!(e.to_string().contains("page size 0"), "{e}");
    }
    let errs = case("missing-segment", &|b| {
        let seg = std::fs::read_dir(b.join("wal"))
            .expect("list")
            .next()
            .expect("a segment");
        std::fs::remove_file(seg.expect("entry").path()).expect("rm");
    });
    for e in &errs {
        assert!(e.to_string().contains("missing"), "{e}");
    }
    let pb = u64::from(options().page_bytes);
    let errs = case("flipped-data", &|b| {
        common::flip_byte(&b.join("data"), 3 * pb + 100, 0x40)
    });
    for e in &errs {
        assert!(
            e.to_string().contains("data") && e.to_string().contains("damaged"),
            "{e}"
        );
    }
}

#[test]
fn a_damaged_page_fails_the_backup_naming_it() {
    let dir = common::scratch();
    let src = dir.path().join("db");
    let db = Database::open(&src, options()).expect("open");
    fill(&db);
    let pages = db.check().expect("check").pages;
    db.close().expect("close");
    assert!(pages > 4, "the data spans pages");
    let victim = pages - 2;
    let pb = u64::from(options().page_bytes);
    common::flip_byte(&src.join("data"), victim * pb + 200, 0x40);
    // Reopened, the damaged page is not in the cache: the backup reads it.
    let db = Database::open(&src, options()).expect("reopen");
    let dest = dir.path().join("backup");
    let err = db
        .backup(&dest, &BackupOptions::default())
        .expect_err("damage stops the backup");
    assert!(
        matches!(err, Error::Corruption { .. })
            && err.to_string().contains(&format!("(page {victim})")),
        "{err}"
    );
    let err = Database::open(&dest, options())
        .map(drop)
        .expect_err("the partial backup");
    assert!(matches!(err, Error::IncompleteBackup { .. }), "{err}");
}

#[test]
fn backup_destinations_are_checked() {
    let dir = common::scratch();
    let src = dir.path().join("db");
    let db = Database::open(&src, options()).expect("open");
    fill(&db);
    let inside = db
        .backup(src.join("b"), &BackupOptions::default())
        .expect_err("inside the database");
    assert!(matches!(inside, Error::InvalidArgument(_)), "{inside}");
    // Inside it by a path of two missing levels, or through a link and two
    // new levels: resolved as the kernel will once they are made.
    std::os::unix::fs::symlink(&src, dir.path().join("link")).expect("symlink");
    for sneaky in [
        dir.path().join("missing/../db/bk"),
        dir.path().join("link/new/bk"),
    ] {
        let err = db
            .backup(&sneaky, &BackupOptions::default())
            .expect_err("inside the database by another path");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        assert!(!src.join("bk").exists() && !src.join("new").exists());
    }
    let busy = dir.path().join("busy");
    std::fs::create_dir(&busy).expect("mkdir");
    std::fs::write(busy.join("x"), b"x").expect("write");
    let full = db
        .backup(&busy, &BackupOptions::default())
        .expect_err("not empty");
    assert!(matches!(full, Error::InvalidArgument(_)), "{full}");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let report = db
        .backup(
            &empty,
            &BackupOptions {
                rate_bytes: Some(64 << 20),
                ..BackupOptions::default()
            },
        )
        .expect("an empty directory will do");
    assert_eq!(db.stats().backups, 1);
    let p = db.stats().backup;
    assert_eq!(p.running, 0, "{p:?}");
    assert!(
        p.pages_total > 0 && p.pages_done == p.pages_total && p.bytes_copied > 0,
        "{p:?}"
    );
    verify_backup(&empty).expect("verifies");
    assert_eq!(report.pages_covered_by_log, 0);
    // Inside the parent of an increment: the parent would gain an entry its
    // manifest does not list.
    let err = db
        .backup(empty.join("inc"), &increment_of(&empty))
        .expect_err("inside its parent");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    verify_backup(&empty).expect("the parent still verifies");
    drop(db);
    // A restore inside one of the backups it restores.
    let err = restore_backup(&empty, empty.join("restored")).expect_err("inside the backup");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    verify_backup(&empty).expect("the backup still verifies");
    // Inside the log archive.
    let archive = dir.path().join("archive");
    let db = Database::open(
        &src,
        Options {
            wal_archive: Some(archive.clone()),
            ..options()
        },
    )
    .expect("open with an archive");
    let err = db
        .backup(archive.join("bk"), &BackupOptions::default())
        .expect_err("inside the archive");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// Random puts (some past a page, in overflow chains) and deletes.
fn churn(db: &Database, seed: u64, n: u64) {
    let mut x = seed;
    for _ in 0..n {
        let mut w = db.begin_write().expect("begin");
        for _ in 0..20 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("key/{:05}", (x >> 33) % 3000);
            if x % 7 == 0 {
                w.delete(key.as_bytes()).expect("delete");
            } else {
                let len = if x % 50 == 0 { 9000 } else { 100 };
                w.put(key.as_bytes(), &vec![(x >> 8) as u8; len])
                    .expect("put");
            }
        }
        w.commit().expect("commit");
    }
}

/// The manifest of the backup in `dir`.
fn manifest(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("backup_manifest")).expect("manifest");
    let json = text.rsplit_once("crc32c ").expect("a CRC line").0;
    serde_json::from_str(json).expect("JSON")
}

/// How an incremental backup found its pages.
fn method(dir: &std::path::Path) -> String {
    manifest(dir)["changed_pages_method"]
        .as_str()
        .expect("a method")
        .to_string()
}

/// The summaries and the full scan find the same pages: two increments of
/// one parent with no commit between them, the first from the summaries,
/// the second (summaries removed) by reading every page, list the same
/// pages; and they survive a reopen (recovery re-adds the pages it
/// replays).
#[test]
fn summaries_and_a_scan_find_the_same_pages() {
    let dir = common::scratch();
    let path = dir.path().join("db");
    let db = Database::open(&path, options()).expect("open");
    churn(&db, 1, 300);
    let full = dir.path().join("full");
    db.backup(&full, &fast()).expect("full");
    churn(&db, 7, 40);
    // A crash: the commits since the last checkpoint are replayed.
    drop(db);
    let db = Database::open(&path, options()).expect("reopen");
    churn(&db, 9, 40);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let ra = db.backup(&a, &increment_of(&full)).expect("from summaries");
    std::fs::remove_dir_all(path.join("summaries")).expect("remove");
    let rb = db.backup(&b, &increment_of(&full)).expect("by a scan");
    assert_eq!(
        (method(&a).as_str(), method(&b).as_str()),
        ("wal-summary", "page-lsn-scan")
    );
    assert!(ra.pages_scanned < rb.pages_scanned, "{ra:?} {rb:?}");
    assert_eq!(
        manifest(&a)["incremental_pages"],
        manifest(&b)["incremental_pages"],
        "the same pages"
    );
    assert!(ra.pages_copied > 10, "{ra:?}");
}

fn fast() -> BackupOptions {
    BackupOptions {
        fast_checkpoint: true,
        ..BackupOptions::default()
    }
}

fn increment_of(parent: &std::path::Path) -> BackupOptions {
    BackupOptions {
        incremental_from: Some(parent.to_path_buf()),
        ..fast()
    }
}

#[test]
fn a_chain_of_increments_restores_each_state_exactly() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 300);
    let mut chain = vec![dir.path().join("b0")];
    let full = db.backup(&chain[0], &fast()).expect("full");
    let mut states = vec![common::contents(&db)];
    for i in 1..4u64 {
        churn(&db, i * 100, 3);
        let b = dir.path().join(format!("b{i}"));
        // The second increment finds no summary of the log since a
        // checkpoint after its parent's start: it reads every page.
        let scan = i == 2;
        if scan {
            db.checkpoint().expect("checkpoint");
            std::fs::remove_dir_all(dir.path().join("db").join("summaries")).expect("remove");
        }
        let r = db
            .backup(&b, &increment_of(&chain[chain.len() - 1]))
            .expect("increment");
        assert!(r.incremental, "{r:?}");
        // The chain up to the parent lies beside it: pages that changed in
        // a few bytes are stored as those bytes.
        assert_eq!(r.delta_chain_links, Some(i), "{r:?}");
        assert!(r.pages_as_deltas > 0, "{r:?}");
        assert_eq!(
            method(&b),
            if scan { "page-lsn-scan" } else { "wal-summary" }
        );
        if scan {
            assert_eq!(r.pages_scanned + 1, r.pages, "every page read: {r:?}");
        } else {
            assert!(
                r.pages_scanned * 2 < r.pages,
                "only the changed pages read: {r:?}"
            );
        }
        assert!(
            r.pages_copied < full.pages_copied * 3 / 4,
            "{r:?} against {full:?}"
        );
        verify_backup(&b).expect("an increment verifies on its own");
        chain.push(b);
        states.push(common::contents(&db));
    }
    drop(db);
    for upto in 1..=chain.len() {
        let restored = dir.path().join(format!("restored{upto}"));
        let report = restore_backup_chain(&chain[..upto], &restored).expect("restore");
        assert_eq!(report.backups, upto);
        let db = Database::open(&restored, options()).expect("open restored");
        db.check().expect("restored checks");
        assert!(
            common::contents(&db) == states[upto - 1],
            "chain of {upto}: not the state at its end"
        );
    }
}

#[test]
fn broken_chains_are_refused_naming_the_link() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 50);
    let b: Vec<_> = (0..3).map(|i| dir.path().join(format!("b{i}"))).collect();
    db.backup(&b[0], &fast()).expect("full");
    for i in 1..3 {
        churn(&db, i as u64, 10);
        db.backup(&b[i], &increment_of(&b[i - 1]))
            .expect("increment");
    }
    let other = Database::open(dir.path().join("other"), options()).expect("other");
    churn(&other, 9, 10);
    let foreign = dir.path().join("foreign");
    other.backup(&foreign, &fast()).expect("other's full");
    let err = db
        .backup(dir.path().join("x"), &increment_of(&foreign))
        .expect_err("an increment of another database's backup");
    assert!(matches!(err, Error::BackupChain { .. }), "{err}");
    assert!(
        !dir.path().join("x").exists(),
        "a refused increment makes nothing"
    );
    let second_full = dir.path().join("b0-again");
    db.backup(&second_full, &fast()).expect("full");
    let cases: [(&[&std::path::PathBuf], &std::path::PathBuf); 5] = [
        (&[&b[0], &b[2]], &b[2]),
        (&[&b[0], &b[2], &b[1]], &b[2]),
        (&[&b[1], &b[2]], &b[1]),
        (&[&foreign, &b[1]], &b[1]),
        (&[&b[0], &second_full], &second_full),
    ];
    for (i, (chain, culprit)) in cases.into_iter().enumerate() {
        let dest = dir.path().join(format!("r{i}"));
        let err = restore_backup_chain(chain, &dest).expect_err("a broken chain");
        match &err {
            Error::BackupChain { path, .. } => assert_eq!(path, culprit, "{err}"),
            other => panic!("case {i}: {other}"),
        }
        assert!(!dest.exists());
    }
    let err = Database::open(&b[1], options())
        .map(drop)
        .expect_err("an increment alone");
    assert!(matches!(err, Error::BackupChain { .. }), "{err}");
    // The refused open left its LOCK file; the increment still verifies.
    verify_backup(&b[1]).expect("verifies after a refused open");
    let err = restore_backup(&b[1], dir.path().join("r")).expect_err("alone");
    assert!(matches!(err, Error::BackupChain { .. }), "{err}");
}

/// An increment whose parent's chain is not beside the parent stores its
/// pages whole, and the chain, wherever its links lie, restores exactly;
/// one whose chain is found stores deltas, and a fraction of the bytes.
#[test]
fn increments_store_deltas_only_against_a_chain_they_find() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 300);
    let full = dir.path().join("x").join("b0");
    let first = dir.path().join("y").join("b1");
    let second = dir.path().join("z").join("b2");
    for d in ["x", "y", "z"] {
        std::fs::create_dir(dir.path().join(d)).expect("mkdir");
    }
    let f = db.backup(&full, &fast()).expect("full");
    churn(&db, 7, 3);
    // The parent is the full backup itself: the chain is found.
    let r1 = db.backup(&first, &increment_of(&full)).expect("increment");
    assert_eq!(r1.delta_chain_links, Some(1), "{r1:?}");
    assert!(r1.pages_as_deltas > 0, "{r1:?}");
    churn(&db, 8, 3);
    // b1's parent lies in another directory: whole pages.
    let r2 = db
        .backup(&second, &increment_of(&first))
        .expect("increment");
    assert_eq!(
        (r2.delta_chain_links, r2.pages_as_deltas),
        (None, 0),
        "{r2:?}"
    );
    let pb = f.data_bytes / f.pages;
    assert!(r2.data_bytes >= r2.pages_copied * pb, "whole pages: {r2:?}");
    assert!(
        r1.data_bytes * 2 < r1.pages_copied * pb,
        "deltas take less than half the pages' bytes: {r1:?}"
    );
    let state = common::contents(&db);
    drop(db);
    for b in [&full, &first, &second] {
        verify_backup(b).expect("each backup verifies");
    }
    assert_restores(
        &[&full, &first, &second],
        &dir.path().join("restored"),
        &state,
    );
}

/// Restores `chain` into `dest`, which then checks and holds `state`
/// exactly: the state at the last backup's end.
fn assert_restores(
    chain: &[&std::path::PathBuf],
    dest: &std::path::Path,
    state: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
) {
    restore_backup_chain(chain, dest).expect("restore");
    let db = Database::open(dest, options()).expect("open restored");
    db.check().expect("restored checks");
    assert!(
        &common::contents(&db) == state,
        "the state at the last backup's end"
    );
}

/// A copy opened from a backup is on a line of history of its own: its
/// backups say so, and an increment of it on a backup of the original's
/// line is refused (the pages the copy changed on its own would be
/// missed), while one on a backup of its own line is taken.
#[test]
fn a_restored_copy_starts_its_own_history() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 100);
    let b0 = dir.path().join("b0");
    db.backup(&b0, &fast()).expect("full");
    let history = |b: &std::path::Path| {
        manifest(b)["history_id"]
            .as_str()
            .expect("a history")
            .to_string()
    };
    assert_eq!(history(&b0), "0".repeat(32), "the line it was created on");
    churn(&db, 2, 50);
    let b1 = dir.path().join("b1");
    db.backup(&b1, &increment_of(&b0)).expect("same line");
    assert_eq!(history(&b1), history(&b0));
    drop(db);
    let copy = dir.path().join("copy");
    restore_backup(&b0, &copy).expect("restore");
    let db = Database::open(&copy, options()).expect("open the copy");
    churn(&db, 3, 100);
    let c0 = dir.path().join("c0");
    db.backup(&c0, &fast()).expect("full of the copy");
    assert_ne!(history(&c0), history(&b0), "a new line");
    let err = db
        .backup(dir.path().join("c1"), &increment_of(&b0))
        .expect_err("a parent of another line");
    assert!(
        matches!(err, Error::BackupChain { .. }) && err.to_string().contains("history"),
        "{err}"
    );
    churn(&db, 4, 20);
    let c2 = dir.path().join("c2");
    db.backup(&c2, &increment_of(&c0)).expect("its own line");
    let state = common::contents(&db);
    drop(db);
    let again = dir.path().join("again");
    restore_backup_chain(&[c0, c2], &again).expect("restore the copy's chain");
    let db = Database::open(&again, options()).expect("open");
    assert!(common::contents(&db) == state, "the copy's state");
}

/// A `CONTROL` that a build recording no history wrote after one that did
/// (the flag kept, the id zeroed) has lost its line: the next open starts
/// a new one, and no backup of the line it may have been on is taken as an
/// increment's parent.
#[test]
fn a_lost_history_starts_a_new_line_at_open() {
    use std::os::unix::fs::FileExt;
    let dir = common::scratch();
    let path = dir.path().join("db");
    let db = Database::open(&path, options()).expect("open");
    churn(&db, 1, 50);
    let b0 = dir.path().join("b0");
    db.backup(&b0, &fast()).expect("full");
    db.close().expect("close");
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("CONTROL"))
        .expect("CONTROL");
    for slot in [0u64, 4096] {
        control
            .write_all_at(&[0u8; 20], slot + 92)
            .expect("zero the history");
    }
    control.sync_all().expect("sync");
    let db = Database::open(&path, options()).expect("reopen");
    let b1 = dir.path().join("b1");
    let err = db
        .backup(&b1, &increment_of(&b0))
        .expect_err("the line is not known to be b0's");
    assert!(err.to_string().contains("history"), "{err}");
    let b2 = dir.path().join("b2");
    db.backup(&b2, &fast()).expect("full");
    let h = manifest(&b2)["history_id"]
        .as_str()
        .expect("history")
        .to_string();
    assert_ne!(h, "0".repeat(32), "a new line");
    drop(db);
    verify_backup(&b2).expect("the backup verifies");
}

/// Every directory entry a restore or a backup adds is synced: the levels
/// above the destination that it made, and the destination's own entry,
/// also when the caller made the directory just before.
#[test]
fn new_directory_levels_of_a_restore_and_a_backup_are_synced() {
    use directkv::internals::engine::restore_chain_with;
    use directkv::internals::io::{FaultOp, FaultyStorage, OsStorage};
    let dir = common::scratch();
    let (_, bk) = made_backup(dir.path());
    let restore_syncs = |dest: &std::path::Path| {
        let storage = FaultyStorage::new(OsStorage::default());
        restore_chain_with(&storage, &[&bk], dest, None, |p| {
            let _ = std::fs::remove_dir_all(p);
        })
        .expect("restore");
        storage.calls(FaultOp::SyncDir)
    };
    let flat = restore_syncs(&dir.path().join("r0"));
    let deep = restore_syncs(&dir.path().join("a").join("b").join("r1"));
    assert_eq!(deep, flat + 2, "the entries of a/ and a/b/ are synced too");

    let backup_syncs = |dest: &std::path::Path| {
        let storage = FaultyStorage::new(OsStorage::default());
        let db =
            Database::open_with(storage.clone(), &dir.path().join("db"), options()).expect("open");
        let before = storage.calls(FaultOp::SyncDir);
        db.backup(dest, &BackupOptions::default()).expect("backup");
        let n = storage.calls(FaultOp::SyncDir) - before;
        db.close().expect("close");
        n
    };
    let made = backup_syncs(&dir.path().join("b-new"));
    let existing = dir.path().join("b-existing");
    std::fs::create_dir(&existing).expect("mkdir");
    assert_eq!(
        backup_syncs(&existing),
        made,
        "an existing destination's entry is synced as a new one's"
    );
}

/// A damaged copy of a link beside the chain (say an interrupted `cp -r`
/// of the full backup, whose marker is whole but whose data is cut short)
/// may be taken for the link when an increment looks for its chain; the
/// chain only makes entries smaller, so the increment is made anyway, with
/// whole pages, and the real chain restores it exactly.
#[test]
fn a_damaged_copy_beside_the_chain_fails_no_increment() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 300);
    let b0 = dir.path().join("b0");
    let b1 = dir.path().join("b1");
    let b2 = dir.path().join("b2");
    db.backup(&b0, &fast()).expect("full");
    churn(&db, 2, 3);
    db.backup(&b1, &increment_of(&b0)).expect("increment");
    // Sorted before b0, so found first.
    let stray = dir.path().join("a-copy-of-b0");
    common::copy_tree(&b0, &stray);
    let data = stray.join("data");
    let len = std::fs::metadata(&data).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .expect("open")
        .set_len(len / 2)
        .expect("truncate");
    churn(&db, 3, 3);
    db.backup(&b2, &increment_of(&b1))
        .expect("an increment despite the damaged copy");
    let state = common::contents(&db);
    drop(db);
    assert_restores(&[&b0, &b1, &b2], &dir.path().join("restored"), &state);
}

/// A backup kept read-only verifies and is built on: what only looks at a
/// backup's `CONTROL` opens it read-only. (`chattr +i` refuses writes to
/// root as well; where the filesystem has no such flag, the test says so
/// and checks nothing.)
#[test]
fn a_read_only_backup_verifies_and_takes_an_increment() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 50);
    let b0 = dir.path().join("b0");
    db.backup(&b0, &fast()).expect("full");
    let control = b0.join("CONTROL");
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(&control)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("chattr +i is not available here: nothing checked");
        return;
    }
    let writable = std::fs::OpenOptions::new().write(true).open(&control);
    let verified = verify_backup(&b0);
    churn(&db, 2, 3);
    let increment = db.backup(dir.path().join("b1"), &increment_of(&b0));
    assert!(chattr("-i"), "the flag is taken off again");
    assert!(writable.is_err(), "CONTROL could not be written");
    verified.expect("a read-only backup verifies");
    increment.expect("an increment of a read-only backup");
}

/// A backup whose log spans several segments and ends past its
/// checkpoint: a thread commits while the backup, rate-limited, runs.
/// Returns the backup's directory and the end LSN of every commit the
/// thread made.
fn backup_under_commits(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u64>) {
    let small = Options {
        wal_segment_bytes: 64 << 10,
        ..options()
    };
    let db = Arc::new(Database::open(dir.join("db"), small).expect("open"));
    fill(&db);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            let mut lsns = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let mut w = db.begin_write().expect("begin");
                w.put(format!("log/{i:08}").as_bytes(), &[i as u8; 2000])
                    .expect("put");
                lsns.push(w.commit_lsn().expect("commit").get());
                i += 1;
                // Paced, so the log the backup carries stays short.
                std::thread::sleep(Duration::from_millis(1));
            }
            lsns
        })
    };
    let dest = dir.join("backup");
    let opts = BackupOptions {
        rate_bytes: Some(512 << 10),
        ..BackupOptions::default()
    };
    let report = db.backup(&dest, &opts);
    stop.store(true, Ordering::Relaxed);
    let lsns = writer.join().expect("writer");
    report.expect("backup");
    (dest, lsns)
}

/// Rewrites the manifest of the backup in `dir` as `edit` says and seals
/// it again: a CRC line and a completion marker that match it.
fn reseal(dir: &std::path::Path, edit: &dyn Fn(&mut directkv::BackupManifest)) {
    let path = dir.join("backup_manifest");
    let bytes = std::fs::read(&path).expect("read");
    let (mut m, _) = directkv::BackupManifest::decode(&bytes, &path).expect("decodes");
    edit(&mut m);
    let bytes = m.encode();
    let (_, crc) = directkv::BackupManifest::decode(&bytes, &path).expect("sealed");
    std::fs::write(&path, &bytes).expect("write");
    let marker = format!("directkv-backup-complete {} {crc:08x}\n", m.backup_id);
    std::fs::write(dir.join("backup_complete"), marker).expect("write");
}

/// A manifest edited and sealed again, so that its CRC and marker hold:
/// verify refuses it, naming the problem, and restore refuses it with the
/// same error, leaving nothing at its destination (no destination, no
/// scratch directory). The three edits: the end LSN lowered; the last log
/// segment removed with its entry; an unlisted file added.
#[test]
fn restore_refuses_a_resealed_manifest_as_verify_does() {
    let dir = common::scratch();
    let (good, commits) = backup_under_commits(dir.path());
    verify_backup(&good).expect("the backup verifies");
    let m = directkv::BackupManifest::decode(
        &std::fs::read(good.join("backup_manifest")).expect("read"),
        &good,
    )
    .expect("decodes")
    .0;
    let segments = m
        .files
        .iter()
        .filter(|f| f.path.starts_with("wal/"))
        .count();
    // A seal alone moves the end past the checkpoint: a commit must end
    // between them for the backup's log to carry one.
    let carried = commits
        .iter()
        .filter(|&&c| c > m.checkpoint_lsn && c <= m.end_lsn)
        .count();
    assert!(
        carried > 0,
        "the log carries {carried} commits past its checkpoint"
    );
    assert!(segments > 1, "the log spans {segments} segments");
    let case = |name: &str, damage: &dyn Fn(&std::path::Path), names: &str| {
        let b = dir.path().join(name);
        common::copy_tree(&good, &b);
        damage(&b);
        let restored = dir.path().join(format!("{name}-restored"));
        let verify = verify_backup(&b).map(drop).expect_err("verify refuses");
        let restore = restore_backup(&b, &restored)
            .map(drop)
            .expect_err("restore refuses");
        assert!(verify.to_string().contains(names), "{name}: {verify}");
        assert_eq!(restore.to_string(), verify.to_string(), "{name}");
        assert!(!restored.exists(), "{name}: nothing at the destination");
        let tmp = dir.path().join(format!("{name}-restored.restore-tmp"));
        assert!(!tmp.exists(), "{name}: no scratch left");
    };
    case(
        "end-lowered",
        &|b| reseal(b, &|m| m.end_lsn = m.checkpoint_lsn),
        "does not name the backup's start and end",
    );
    case(
        "last-segment-dropped",
        &|b| {
            reseal(b, &|m| {
                let last = m.files.iter().rposition(|f| f.path.starts_with("wal/"));
                let f = m.files.remove(last.expect("a segment"));
                std::fs::remove_file(b.join(&f.path)).expect("rm");
            })
        },
        "before the backup's end",
    );
    case(
        "unlisted-file",
        &|b| std::fs::write(b.join("notes"), b"x").expect("write"),
        "does not list",
    );
}

/// The operating system's files, counting the bytes read from each.
#[derive(Clone, Default)]
struct CountingReads(OsStorage, Arc<Mutex<BTreeMap<PathBuf, u64>>>);

/// A file of [`CountingReads`].
struct CountedFile(
    <OsStorage as Storage>::File,
    Arc<Mutex<BTreeMap<PathBuf, u64>>>,
);

impl StorageFile for CountedFile {
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn alignment(&self) -> Alignment {
        self.0.alignment()
    }
    fn io_path(&self) -> IoPath {
        StorageFile::io_path(&self.0)
    }
    fn read_at(&self, buf: IoMut<'_>, offset: u64) -> directkv::Result<usize> {
        let n = self.0.read_at(buf, offset)?;
        let mut read = self.1.lock().expect("lock");
        *read.entry(self.0.path().to_path_buf()).or_default() += n as u64;
        Ok(n)
    }
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> directkv::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn sync(&self) -> directkv::Result<()> {
        self.0.sync()
    }
    fn sync_all(&self) -> directkv::Result<()> {
        self.0.sync_all()
    }
    fn len(&self) -> directkv::Result<u64> {
        self.0.len()
    }
    fn allocate(&self, len: u64, fill: Fill) -> directkv::Result<()> {
        self.0.allocate(len, fill)
    }
    fn set_len(&self, len: u64) -> directkv::Result<()> {
        self.0.set_len(len)
    }
}

impl Storage for CountingReads {
    type File = CountedFile;
    type Lock = <OsStorage as Storage>::Lock;

    fn lock_exclusive(
        &self,
        path: &Path,
        permissions: Permissions,
    ) -> directkv::Result<Self::Lock> {
        self.0.lock_exclusive(path, permissions)
    }
    fn open(&self, path: &Path, opts: &FileOptions) -> directkv::Result<CountedFile> {
        Ok(CountedFile(self.0.open(path, opts)?, Arc::clone(&self.1)))
    }
    fn create_dirs(&self, path: &Path, permissions: Permissions) -> directkv::Result<()> {
        self.0.create_dirs(path, permissions)
    }
    fn stat(&self, path: &Path) -> directkv::Result<FileMeta> {
        self.0.stat(path)
    }
    fn list_dir(&self, path: &Path) -> directkv::Result<Vec<String>> {
        self.0.list_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> directkv::Result<()> {
        self.0.rename(from, to)
    }
    fn rename_new(&self, from: &Path, to: &Path) -> directkv::Result<()> {
        self.0.rename_new(from, to)
    }
    fn remove_file(&self, path: &Path) -> directkv::Result<()> {
        self.0.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> directkv::Result<()> {
        self.0.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.0.exists(path)
    }
    fn anchor(&self, dir: &Path) -> directkv::Result<Self> {
        Ok(CountingReads(self.0.anchor(dir)?, Arc::clone(&self.1)))
    }
}

/// A restore of one full backup reads each of its files once: every byte
/// of every file the manifest lists is read exactly once (its CRC32C, the
/// pages and the log are checked on the copy, not read from the backup
/// again), and the restored copy opens.
#[test]
fn a_restore_reads_each_file_of_a_backup_once() {
    let dir = common::scratch();
    let (backup, _) = backup_under_commits(dir.path());
    let m = directkv::BackupManifest::decode(
        &std::fs::read(backup.join("backup_manifest")).expect("read"),
        &backup,
    )
    .expect("decodes")
    .0;
    let storage = CountingReads::default();
    let dest = dir.path().join("restored");
    restore_chain_with(&storage, &[&backup], &dest, None, |tmp| {
        let _ = std::fs::remove_dir_all(tmp);
    })
    .expect("restore");
    let read = storage.1.lock().expect("lock").clone();
    for f in &m.files {
        let bytes = read.get(&backup.join(&f.path)).copied().unwrap_or(0);
        assert_eq!(bytes, f.len, "{}: {bytes} bytes read of {}", f.path, f.len);
    }
    let db = Database::open(&dest, options()).expect("the copy opens");
    db.check().expect("check");
    db.close().expect("close");
}

/// What a restore makes is a database to be, never a backup, wherever it
/// lies: a chain restored into one directory, and that directory moved,
/// are each refused as a backup by verify, by restore and as the parent of
/// an incremental backup, naming it a database a restore made; the moved
/// copy opens with the chain's last state, and a backup of it verifies.
#[test]
fn a_restored_chain_is_a_database_and_no_backup() {
    let dir = common::scratch();
    let db = Database::open(dir.path().join("db"), options()).expect("open");
    churn(&db, 1, 300);
    let b0 = dir.path().join("b0");
    db.backup(&b0, &fast()).expect("full");
    churn(&db, 100, 3);
    let b1 = dir.path().join("b1");
    db.backup(&b1, &increment_of(&b0)).expect("increment");
    let state = common::contents(&db);
    let restored = dir.path().join("restored");
    restore_backup_chain(&[&b0, &b1], &restored).expect("restore");
    let moved = dir.path().join("moved");
    std::fs::rename(&restored, &moved).expect("move");
    common::copy_tree(&moved, &restored);
    for copy in [&restored, &moved] {
        let not_a_backup = |e: Error| {
            assert!(
                matches!(&e, Error::InvalidArgument(t) if t.contains("a database a restore made")),
                "{}: {e}",
                copy.display()
            );
        };
        not_a_backup(verify_backup(copy).map(drop).expect_err("verify refuses"));
        let again = dir.path().join("again");
        not_a_backup(restore_backup(copy, &again).map(drop).expect_err("refused"));
        assert!(!again.exists(), "nothing restored");
        let inc = dir.path().join("inc");
        let e = db.backup(&inc, &increment_of(copy)).map(drop);
        not_a_backup(e.expect_err("no parent"));
    }
    drop(db);
    let opened = Database::open(&moved, options()).expect("the moved copy opens");
    opened.check().expect("check");
    assert!(common::contents(&opened) == state, "the chain's last state");
    let b = dir.path().join("of-restored");
    opened.backup(&b, &fast()).expect("a backup of it");
    verify_backup(&b).expect("which verifies");
}
