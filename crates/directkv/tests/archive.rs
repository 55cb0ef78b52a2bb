//! Log archiving and restore to a chosen commit, on real files: every
//! segment reaches the archive before it is recycled, a backup plus the
//! archive restores exactly the commits up to an LSN or a time, and a
//! damaged, missing or foreign archived segment is named, never restored
//! past. The archive's directory is recorded with the database, so an open
//! without `wal_archive` leaves no hole; another directory is a typed error
//! unless switched explicitly, and so are a recorded archive that is
//! missing (never created then) and a copy of the database directory. With
//! `archive_timeout` a quiet database's last commit reaches the archive as
//! a partial copy that a fuller one replaces (the timeout is driven by the
//! archiver's test clock, never waited out), a backup past a shorter
//! partial copy still restores, and `stats().archive` reports how far the
//! archive lags, counting neither a seal nor time before the oldest
//! missing record.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use directkv::{
    restore_backup_chain_to, BackupOptions, Database, Error, Lsn, Options, RestoreTarget,
    SyncMethod, SyncVariant,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts(archive: &Path) -> Options {
    Options {
        cache_bytes: 4 << 20,
        page_bytes: 4096,
        wal_sync: Some(SyncVariant {
            method: SyncMethod::Fdatasync,
            direct: false,
        }),
        wal_segment_bytes: 64 << 10,
        checkpoint_wal_bytes: 256 << 10,
        wal_archive: Some(archive.to_path_buf()),
        publish_stats: false,
        ..Options::default()
    }
}

/// A small xorshift generator: the test's choices repeat from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One commit of a few puts and deletes, applied to `model` too; returns
/// the commit's LSN.
fn commit_some(db: &Database, model: &mut Model, rng: &mut Rng) -> Lsn {
    let mut w = db.begin_write().expect("begin");
    for _ in 0..1 + rng.below(4) {
        let key = format!("k{:04}", rng.below(400)).into_bytes();
        if rng.below(5) == 0 {
            w.delete(&key).expect("delete");
            model.remove(&key);
        } else {
            let value = vec![rng.below(256) as u8; 20 + rng.below(300) as usize];
            w.put(&key, &value).expect("put");
            model.insert(key, value);
        }
    }
    w.commit_lsn().expect("commit")
}

/// Writes big values under a key of their own until `n` more segments are
/// complete, so every commit before is archived once a checkpoint runs.
fn push_log_on(db: &Database, model: &mut Model, segments: u64) {
    let seg = 64u64 << 10;
    let until = db.stats().wal.end_lsn + segments * seg;
    let mut i = 0u32;
    while db.stats().wal.end_lsn < until {
        let mut w = db.begin_write().expect("begin");
        let key = format!("pad{:03}", i % 50).into_bytes();
        let value = vec![i as u8; 3000];
        w.put(&key, &value).expect("put");
        w.commit().expect("commit");
        model.insert(key, value);
        i += 1;
    }
}

struct Recorded {
    lsn: Lsn,
    state: Model,
}

/// A database with an archive and a full backup taken after a first batch
/// of commits, then `n` recorded commits, then enough log for all of them
/// to be archived. Returns (database dir, archive, backup, records).
fn setup(root: &Path, n: usize, seed: u64) -> (PathBuf, PathBuf, PathBuf, Vec<Recorded>) {
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    let mut rng = Rng(seed | 1);
    let mut model = Model::new();
    for _ in 0..200 {
        commit_some(&db, &mut model, &mut rng);
    }
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    let mut records = Vec::new();
    for _ in 0..n {
        let lsn = commit_some(&db, &mut model, &mut rng);
        records.push(Recorded {
            lsn,
            state: model.clone(),
        });
    }
    assert_eq!(common::contents(&db), model, "the database holds the model");
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.enabled && s.segments > 0 && s.failures == 0, "{s:?}");
    db.close().expect("close");
    (db_dir, archive, backup, records)
}

fn restored(root: &Path, backup: &Path, archive: &Path, target: RestoreTarget, i: usize) -> Model {
    let dest = root.join(format!("restored{i}"));
    let report = restore_backup_chain_to(&[backup], archive, target, &dest).expect("restore");
    let rolled = report.rolled_forward.expect("rolled forward");
    if let RestoreTarget::Lsn(l) = target {
        // Cut exactly after the commit the target names.
        assert_eq!(rolled.last_commit_lsn, Some(l), "{rolled:?}");
        assert_eq!(rolled.log_end, l, "{rolled:?}");
    }
    // What a point-in-time restore makes is a database to be, never a
    // backup: verify refuses it.
    let e = directkv::verify_backup(&dest).expect_err("not a backup");
    assert!(e.to_string().contains("a database a restore made"), "{e}");
    let db = Database::open(&dest, opts(&root.join(format!("archive-of-restored{i}"))))
        .expect("open restored");
    db.check().expect("check");
    let got = common::contents(&db);
    drop(db);
    got
}

#[test]
fn restoring_to_recorded_commits_gives_exactly_their_states() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (_db, archive, backup, records) = setup(root, 300, 7);
    let mut rng = Rng(99);
    for i in 0..20 {
        let k = rng.below(records.len() as u64) as usize;
        let got = restored(
            root,
            &backup,
            &archive,
            RestoreTarget::Lsn(records[k].lsn),
            i,
        );
        assert!(
            got == records[k].state,
            "restore {i} to commit {k} at {}",
            records[k].lsn
        );
    }
}

/// Commit times rise with LSNs; a time target takes every commit at or
/// before it. Targets between two commits' times restore the earlier one.
#[test]
fn restoring_to_a_time_and_to_the_end() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup, records) = setup(root, 120, 11);
    let times = commit_times(&db_dir, &archive, &records);
    let mut rng = Rng(5);
    let mut done = 0;
    while done < 6 {
        let k = rng.below(records.len() as u64 - 1) as usize;
        // A time shared with the next commit would take that one in too.
        if times[k] == times[k + 1] {
            continue;
        }
        let got = restored(
            root,
            &backup,
            &archive,
            RestoreTarget::TimeUs(times[k]),
            100 + done,
        );
        assert!(got == records[k].state, "restore to the time of commit {k}");
        done += 1;
    }
    // The end: everything archived, padding included; at least the last
    // recorded commit's keys as it left them.
    let end = restored(root, &backup, &archive, RestoreTarget::End, 200);
    let last = &records.last().expect("records").state;
    for (k, v) in last.iter().filter(|(k, _)| !k.starts_with(b"pad")) {
        assert_eq!(end.get(k), Some(v), "{}", String::from_utf8_lossy(k));
    }
}

/// The commit time each recorded commit's record carries, read from the
/// archive by restoring to each LSN and reading the report.
fn commit_times(_db: &Path, archive: &Path, records: &[Recorded]) -> Vec<u64> {
    let root = archive.parent().expect("root");
    let backup = root.join("backup");
    records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let dest = root.join(format!("times{i}"));
            let report =
                restore_backup_chain_to(&[&backup], archive, RestoreTarget::Lsn(r.lsn), &dest)
                    .expect("restore");
            std::fs::remove_dir_all(&dest).expect("remove");
            let rolled = report.rolled_forward.expect("rolled");
            assert_eq!(
                rolled.last_commit_lsn,
                Some(r.lsn),
                "the commit the LSN names"
            );
            rolled
                .last_commit_time_us
                .expect("commits carry their time")
        })
        .collect()
}

/// Every way a point-in-time restore cannot be done is refused with the
/// reason, and leaves nothing at the destination.
#[test]
fn impossible_targets_and_damaged_archives_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (_db, archive, backup, records) = setup(root, 60, 13);
    let dest = root.join("dest");
    let refuse = |archive: &Path, target: RestoreTarget| -> Error {
        let e = restore_backup_chain_to(&[&backup], archive, target, &dest).expect_err("refused");
        assert!(!dest.exists(), "nothing is left at the destination: {e}");
        e
    };
    // Before the backup's end.
    let e = refuse(&archive, RestoreTarget::Lsn(Lsn::new(1)));
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("before the backup")),
        "{e}"
    );
    let e = refuse(&archive, RestoreTarget::TimeUs(1));
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("before the backup")),
        "{e}"
    );
    // Beyond the archive.
    let e = refuse(&archive, RestoreTarget::Lsn(Lsn::new(u64::MAX / 2)));
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("does not reach")),
        "{e}"
    );
    let e = refuse(&archive, RestoreTarget::TimeUs(u64::MAX));
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("does not reach")),
        "{e}"
    );
    // No archive at all.
    let e = refuse(&root.join("nowhere"), RestoreTarget::End);
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("does not exist")),
        "{e}"
    );

    let last_lsn = records.last().expect("records").lsn;
    // Segments of 64 KiB hold 60 KiB of log each.
    let seg_of = |lsn: Lsn| lsn.get() / (60 << 10);
    // A segment missing in the middle: the log stops before it.
    let broken = copy_archive(&archive, &root.join("holed"));
    let hole = seg_of(last_lsn);
    std::fs::remove_file(broken.join(seg_name(hole))).expect("remove");
    let e = refuse(&broken, RestoreTarget::Lsn(last_lsn));
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("does not reach")),
        "{e}"
    );
    // To the end: the hole is named, never restored short.
    let e = refuse(&broken, RestoreTarget::End);
    match &e {
        Error::Corruption { path, .. } => assert_eq!(path, &broken.join(seg_name(hole)), "{e}"),
        other => panic!("unexpected {other}"),
    }
    // A damaged record inside an archived segment: named with its file.
    let damaged = copy_archive(&archive, &root.join("damaged"));
    let victim = damaged.join(seg_name(seg_of(records[40].lsn)));
    common::flip_byte(
        &victim,
        4096 + (records[40].lsn.get() % (60 << 10)) - 100,
        0x5A,
    );
    let e = refuse(&damaged, RestoreTarget::Lsn(last_lsn));
    match &e {
        Error::Corruption { path, .. } => assert_eq!(path, &victim, "{e}"),
        other => panic!("unexpected {other}"),
    }
    let e = refuse(&damaged, RestoreTarget::End);
    assert!(matches!(e, Error::Corruption { .. }), "{e}");
    // Another database's archive.
    let other_root = root.join("other");
    let (_o, other_archive, _ob, _or) = setup(&other_root, 10, 17);
    let e = refuse(&other_archive, RestoreTarget::End);
    assert!(matches!(e, Error::Corruption { .. }), "{e}");
}

/// A backup taken after a clean close and reopen (whose replay meets no
/// commit) still knows the time of its last commit: a time target before
/// it is refused, not restored to the backup's later state. And an archive
/// inside the database's directory is refused at open.
#[test]
fn a_time_before_a_backup_after_a_reopen_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(21));
    for _ in 0..50 {
        commit_some(&db, &mut model, &mut rng);
    }
    db.close().expect("close");
    let db = Database::open(&db_dir, opts(&archive)).expect("reopen");
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    push_log_on(&db, &mut model, 2);
    db.close().expect("close");
    let dest = root.join("early");
    let e = restore_backup_chain_to(&[&backup], &archive, RestoreTarget::TimeUs(1), &dest)
        .expect_err("a time before the backup");
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("before the backup")),
        "{e}"
    );
    assert!(!dest.exists());
    let inside = Options {
        wal_archive: Some(db_dir.join("archive")),
        ..opts(&archive)
    };
    let e = Database::open(&db_dir, inside)
        .map(drop)
        .expect_err("refused");
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("inside")),
        "{e}"
    );
}

fn seg_name(n: u64) -> String {
    format!("{n:016X}.seg")
}

fn archived(archive: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(archive)
        .expect("list")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            u64::from_str_radix(name.strip_suffix(".seg")?, 16).ok()
        })
        .collect();
    v.sort_unstable();
    v
}

fn copy_archive(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
    to.to_path_buf()
}

/// An archive that refuses a segment (a different file under its name)
/// keeps the segment and every later one in the log, counts the failure
/// and lets commits go on; once the way is clear it catches up and the
/// log is recycled again.
#[test]
fn a_failing_archive_keeps_the_log_and_catches_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive) = (root.join("db"), root.join("archive"));
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    let mut model = Model::new();
    let mut rng = Rng(3);
    push_log_on(&db, &mut model, 1);
    db.checkpoint().expect("checkpoint");
    let next = db.stats().archive.next_segment;
    // Someone else's file where the next segment goes.
    let planted = archive.join(seg_name(next));
    std::fs::write(&planted, vec![7u8; 64 << 10]).expect("plant");
    push_log_on(&db, &mut model, 6);
    db.checkpoint()
        .expect("a checkpoint succeeds while archiving fails");
    for _ in 0..20 {
        commit_some(&db, &mut model, &mut rng);
    }
    // A checkpoint that finds an archiver round under way leaves the
    // segments to it, which counts the failure later; waited for, up to a
    // bound.
    for _ in 0..600 {
        if db.stats().archive.failures > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = db.stats().archive;
    assert!(s.failures > 0, "{s:?}");
    assert_eq!(
        s.next_segment, next,
        "archiving stopped at the refused segment"
    );
    let why = s.last_failure.expect("a reason");
    assert!(
        why.contains(&seg_name(next)) && why.contains("never overwritten"),
        "{why}"
    );
    let wal_segments = |db_dir: &Path| archived(&db_dir.join("wal"));
    assert!(
        wal_segments(&db_dir).first().is_some_and(|&f| f <= next),
        "the refused segment is still in the log"
    );
    assert_eq!(
        std::fs::read(&planted).expect("read"),
        vec![7u8; 64 << 10],
        "never overwritten"
    );
    // Clear the way: the archiver catches up, and checkpoints recycle.
    std::fs::remove_file(&planted).expect("remove");
    push_log_on(&db, &mut model, 1);
    // The archiver thread takes the backlog (a checkpoint takes only a
    // few segments while it runs); waited for, up to a generous bound.
    for _ in 0..600 {
        if db.stats().archive.next_segment > next + 6 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.next_segment > next + 6, "{s:?}");
    assert!(s.last_failure.is_none(), "{s:?}");
    assert!(
        wal_segments(&db_dir).first().is_some_and(|&f| f > next),
        "archived segments were recycled"
    );
    assert_eq!(common::contents(&db), model);
    db.close().expect("close");
}

/// A database restored to an earlier commit archives into the same archive
/// without a clash: its line of history goes into a directory of its own,
/// beside the first line's segments, and a backup of it restores to the end
/// of its line from there.
#[test]
fn a_restored_database_archives_its_own_history_beside_the_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (_db, archive, backup, records) = setup(root, 30, 17);
    let first_line = std::fs::read_dir(&archive).expect("archive").count();
    let dest = root.join("pitr");
    restore_backup_chain_to(
        &[&backup],
        &archive,
        RestoreTarget::Lsn(records[9].lsn),
        &dest,
    )
    .expect("restore");
    let mut model = records[9].state.clone();
    let db = Database::open(&dest, opts(&archive)).expect("open with the same archive");
    let mut rng = Rng(99);
    for _ in 0..100 {
        commit_some(&db, &mut model, &mut rng);
    }
    let backup2 = root.join("backup2");
    db.backup(&backup2, &BackupOptions::default())
        .expect("backup of the new line");
    let mut recorded = Vec::new();
    for _ in 0..50 {
        let lsn = commit_some(&db, &mut model, &mut rng);
        recorded.push((lsn, model.clone()));
    }
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.segments > 0 && s.failures == 0, "{s:?}");
    db.close().expect("close");
    let text = std::fs::read_to_string(backup2.join("backup_manifest")).expect("manifest");
    let json: serde_json::Value =
        serde_json::from_str(text.rsplit_once("crc32c ").expect("CRC line").0).expect("JSON");
    let history = json["history_id"].as_str().expect("history");
    assert_ne!(history, "0".repeat(32), "a new line");
    let line = archive.join(history);
    assert!(line.is_dir(), "the new line's segments apart");
    assert!(
        std::fs::read_dir(&archive).expect("archive").count() == first_line + 1,
        "the first line's segments untouched"
    );
    directkv::verify_backup(&backup2).expect("the new line's backup verifies");
    let (lsn, state) = &recorded[25];
    let got = restored(root, &backup2, &archive, RestoreTarget::Lsn(*lsn), 300);
    assert!(got == *state, "the new line's state at a recorded commit");
}

/// Records span segments: when the archive's last segment ends inside one
/// (the segment that holds the rest is not archived yet), a restore to the
/// archive's end stops before that record and restores every commit
/// before it: the end is not damage.
#[test]
fn the_end_of_an_archive_may_fall_inside_a_record() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    let mut rng = Rng(23);
    let mut model = Model::new();
    for _ in 0..100 {
        commit_some(&db, &mut model, &mut rng);
    }
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    for _ in 0..50 {
        commit_some(&db, &mut model, &mut rng);
    }
    let before = model.clone();
    // One transaction of incompressible values: its page records fill
    // several segments end to end, so segment ends fall inside records.
    let mut w = db.begin_write().expect("begin");
    for i in 0..120u32 {
        let value: Vec<u8> = (0..1000).map(|_| rng.next() as u8).collect();
        w.put(format!("big{i:03}").as_bytes(), &value).expect("put");
    }
    w.commit().expect("commit");
    db.checkpoint().expect("checkpoint");
    assert_eq!(db.stats().archive.failures, 0);
    db.close().expect("close");
    let got = restored(root, &backup, &archive, RestoreTarget::End, 0);
    for (k, v) in &before {
        assert_eq!(got.get(k), Some(v), "{}", String::from_utf8_lossy(k));
    }
}

/// A complete segment zeroed after its header while the archive lagged
/// behind (no record starts in it, where one must) is refused by the
/// archiver's check, kept in the log and named, never archived as if whole.
#[test]
fn a_zeroed_segment_is_refused_not_archived() {
    use std::os::unix::fs::FileExt;
    const SEG: u64 = 2 << 20;
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive) = (root.join("db"), root.join("archive"));
    let big = |archive: &Path| Options {
        wal_segment_bytes: SEG,
        checkpoint_wal_bytes: 4 * SEG,
        ..opts(archive)
    };
    let push = |db: &Database, segments: u64| {
        let until = db.stats().wal.end_lsn + segments * SEG;
        let mut i = 0u32;
        while db.stats().wal.end_lsn < until {
            let mut w = db.begin_write().expect("begin");
            let value: Vec<u8> = (0..3000u32)
                .map(|j| (i.wrapping_mul(31) ^ j) as u8)
                .collect();
            w.put(format!("pad{:03}", i % 50).as_bytes(), &value)
                .expect("put");
            w.commit().expect("commit");
            i += 1;
        }
    };
    let db = Database::open(&db_dir, big(&archive)).expect("open");
    push(&db, 1);
    db.checkpoint().expect("checkpoint");
    // Every whole segment reaches the archive first: a copy still under
    // way when the file is planted would replace it.
    let writing = db.stats().wal.end_lsn / (SEG - 4096);
    for _ in 0..600 {
        if db.stats().archive.next_segment >= writing {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let next = db.stats().archive.next_segment;
    assert_eq!(next, writing, "the whole segments are archived");
    // Archiving stops at `next` while someone else's file is in its way.
    let planted = archive.join(seg_name(next));
    std::fs::write(&planted, vec![7u8; 4096]).expect("plant");
    push(&db, 3);
    db.checkpoint().expect("checkpoint");
    for _ in 0..600 {
        if db.stats().archive.failures > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(db.stats().archive.next_segment, next);
    db.close().expect("close");
    // That segment loses its records, header kept. The segment before it
    // is archived, so no check reads on into this one: only the missing
    // record start shows the damage.
    let victim = db_dir.join("wal").join(seg_name(next));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .expect("segment");
    f.write_all_at(&vec![0u8; (SEG - 4096) as usize], 4096)
        .expect("zero");
    f.sync_all().expect("sync");
    std::fs::remove_file(&planted).expect("clear the way");
    let db = Database::open(&db_dir, big(&archive)).expect("reopen");
    push(&db, 1);
    db.checkpoint().expect("checkpoint");
    for _ in 0..600 {
        if db.stats().archive.last_failure.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let s = db.stats().archive;
    assert_eq!(s.next_segment, next, "archived up to the damage: {s:?}");
    let why = s.last_failure.expect("a reason");
    assert!(
        why.contains(&seg_name(next)) && why.contains("no valid record starts"),
        "{why}"
    );
    assert!(!archived(&archive).contains(&next), "not archived");
    assert!(victim.exists(), "kept in the log");
    db.close().expect("close");
}

/// Makes `n` recorded commits (each with the state it leaves).
fn record_commits(db: &Database, model: &mut Model, rng: &mut Rng, n: usize) -> Vec<Recorded> {
    (0..n)
        .map(|_| Recorded {
            lsn: commit_some(db, model, rng),
            state: model.clone(),
        })
        .collect()
}

/// The archive's directory is recorded with the database: an open without
/// `wal_archive` between two archived runs (as `directkv check` and
/// `directkv backup` open it) archives as configured before it recycles,
/// so a restore reaches every acknowledged commit of all three runs.
#[test]
fn an_open_without_the_archive_option_still_archives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let (mut model, mut rng) = (Model::new(), Rng(31));
    let mut records = Vec::new();
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    record_commits(&db, &mut model, &mut rng, 100);
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    records.extend(record_commits(&db, &mut model, &mut rng, 100));
    db.close().expect("close");
    let without = Options {
        wal_archive: None,
        ..opts(&archive)
    };
    let db = Database::open(&db_dir, without).expect("open without the archive option");
    let s = db.stats().archive;
    assert!(s.enabled, "{s:?}");
    assert_eq!(s.dir.as_deref(), Some(archive.as_path()), "{s:?}");
    records.extend(record_commits(&db, &mut model, &mut rng, 100));
    // Enough log for checkpoints to recycle the segments of all of them.
    push_log_on(&db, &mut model, 6);
    db.checkpoint().expect("checkpoint");
    assert!(
        db.stats().wal.segments_recycled > 0,
        "segments were recycled"
    );
    records.extend(record_commits(&db, &mut model, &mut rng, 100));
    db.close().expect("close");
    let db = Database::open(&db_dir, opts(&archive)).expect("reopen with the archive");
    records.extend(record_commits(&db, &mut model, &mut rng, 100));
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.failures == 0, "{s:?}");
    db.close().expect("close");
    for (i, k) in [0, 150, 250, 330, 399, records.len() - 1]
        .into_iter()
        .enumerate()
    {
        let target = RestoreTarget::Lsn(records[k].lsn);
        let got = restored(root, &backup, &archive, target, i);
        assert!(
            got == records[k].state,
            "restore to commit {k} at {}",
            records[k].lsn
        );
    }
}

/// Another archive directory than the recorded one is a typed error that
/// changes nothing; `Switch` moves the archive explicitly, `Off` stops it
/// (and an open after that does not archive); a damaged `ARCHIVE` file is
/// refused by name, never replaced.
#[test]
fn the_recorded_archive_changes_only_when_told() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, other) = (root.join("db"), root.join("archive"), root.join("other"));
    drop(Database::open(&db_dir, opts(&archive)).expect("open"));
    let e = Database::open(&db_dir, opts(&other))
        .map(drop)
        .expect_err("another archive");
    match &e {
        Error::ArchiveMismatch { recorded, given } => {
            assert_eq!((recorded, given), (&archive, &other), "{e}")
        }
        e => panic!("{e}"),
    }
    let switch = Options {
        wal_archive_change: directkv::ArchiveChange::Switch,
        ..opts(&other)
    };
    drop(Database::open(&db_dir, switch).expect("switch"));
    let plain = Options {
        wal_archive: None,
        ..opts(&archive)
    };
    let db = Database::open(&db_dir, plain.clone()).expect("open");
    assert_eq!(db.stats().archive.dir.as_deref(), Some(other.as_path()));
    drop(db);
    let off = Options {
        wal_archive_change: directkv::ArchiveChange::Off,
        ..plain.clone()
    };
    drop(Database::open(&db_dir, off).expect("off"));
    let db = Database::open(&db_dir, plain.clone()).expect("open");
    assert!(!db.stats().archive.enabled, "archiving stays off");
    drop(db);
    drop(Database::open(&db_dir, opts(&archive)).expect("on again"));
    common::flip_byte(&db_dir.join("ARCHIVE"), 30, 0x5A);
    let e = Database::open(&db_dir, plain)
        .map(drop)
        .expect_err("damaged setting");
    assert!(
        matches!(&e, Error::NotADatabase { path, .. } if path.ends_with("ARCHIVE")),
        "{e}"
    );
}

/// `stats().archive` reports the archive's lag behind the durable log: the
/// bytes of commits not yet archived (and for how long), none once the
/// segments holding them are.
#[test]
fn the_archive_lag_is_in_stats() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    // No archiver thread: the checkpoints archive every complete segment
    // themselves, so what is archived when `stats` is read is decided here,
    // not by a race with the thread's round.
    let quiet = Options {
        background_threads: false,
        ..opts(&root.join("archive"))
    };
    let db = Database::open(root.join("db"), quiet).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(51));
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    let before = db.stats();
    let lsn = commit_some(&db, &mut model, &mut rng);
    let s = db.stats();
    assert!(s.archive.archived_lsn < lsn.get(), "{:?}", s.archive);
    // The commit's record is lag; a seal after it (no record) is not.
    assert!(
        s.archive.lag_bytes >= lsn.get() - s.archive.archived_lsn
            && s.archive.lag_bytes <= s.wal.durable_lsn - s.archive.archived_lsn,
        "{:?}",
        s.archive
    );
    assert!(before.archive.archived_lsn <= s.archive.archived_lsn);
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(
        s.archived_lsn >= lsn.get(),
        "the commit's segment is archived: {s:?}"
    );
    assert!(s.lag_bytes < 64 << 10, "less than a segment behind: {s:?}");
    db.close().expect("close");
}

/// A timeout no test waits out: the archiver thread never finds it passed,
/// so partial copies are made only where a test moves the archiver's clock
/// ([`Database::archive_round_for_test`]).
const LONG: Duration = Duration::from_secs(3600);

/// Archiver rounds: one that sees the durable records (starting the lag
/// clock for those the archive lacks), then one with the clock moved past
/// the timeout; returns whether that one made a partial copy.
fn round_past_timeout(db: &Database) -> bool {
    db.archive_round_for_test(Duration::ZERO)
        .expect("archiver round");
    db.archive_round_for_test(LONG + Duration::from_secs(1))
        .expect("archiver round")
}

/// With `archive_timeout`, a quiet database's last commit reaches the
/// archive as a partial copy of the segment being written, without any
/// further commit, once the timeout has passed (on the archiver's clock,
/// moved by the test) and not before; a restore to the archive's end gives
/// exactly that commit's state. A backup taken while the archive holds a
/// shorter partial copy of its last segment brings the archive up to its
/// end before it returns. Later commits complete the segment, whose whole
/// copy replaces the partial one; a restore to the partial copy's commit
/// and to the last commit both still give their states.
#[test]
fn a_quiet_databases_last_commit_reaches_the_archive_after_the_timeout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    // Segments large enough for every commit up to the second backup.
    let timed = Options {
        archive_timeout: Some(LONG),
        wal_segment_bytes: 1 << 20,
        ..opts(&archive)
    };
    let db = Database::open(&db_dir, timed).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(41));
    record_commits(&db, &mut model, &mut rng, 50);
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    let quiet = record_commits(&db, &mut model, &mut rng, 20)
        .pop()
        .expect("a commit");
    assert!(
        !db.archive_round_for_test(Duration::ZERO).expect("round"),
        "not due before the timeout"
    );
    assert!(db.stats().archive.archived_lsn < quiet.lsn.get());
    assert!(round_past_timeout(&db), "due after the timeout");
    let s = db.stats().archive;
    assert!(s.archived_lsn >= quiet.lsn.get(), "{s:?}");
    assert!(s.partial_copies == 1 && s.failures == 0, "{s:?}");
    let at_end = restored(root, &backup, &archive, RestoreTarget::End, 0);
    assert!(
        at_end == quiet.state,
        "the archive's end is the quiet commit"
    );
    // A backup taken while the archive holds a partial copy shorter than
    // its log: the backup brings the archive up to its end.
    let newer = record_commits(&db, &mut model, &mut rng, 5)
        .pop()
        .expect("a commit");
    assert!(db.stats().archive.archived_lsn < newer.lsn.get());
    let backup2 = root.join("backup2");
    let report = db
        .backup(&backup2, &BackupOptions::default())
        .expect("backup");
    assert_eq!(report.archive_failure, None);
    let s = db.stats().archive;
    assert!(s.archived_lsn >= report.end_lsn.get(), "{s:?} {report:?}");
    assert_eq!(s.partial_copies, 2, "{s:?}");
    let at_end = restored(root, &backup2, &archive, RestoreTarget::End, 3);
    assert!(
        at_end == newer.state,
        "the archive reaches the backup's end"
    );
    let later = record_commits(&db, &mut model, &mut rng, 50);
    push_log_on(&db, &mut model, 40);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.failures == 0 && s.segments > 0, "{s:?}");
    db.close().expect("close");
    let target = RestoreTarget::Lsn(quiet.lsn);
    assert!(restored(root, &backup, &archive, target, 1) == quiet.state);
    let last = later.last().expect("later commits");
    let target = RestoreTarget::Lsn(last.lsn);
    assert!(restored(root, &backup, &archive, target, 2) == last.state);
}

/// A seal (a flush of no record, written once the log goes idle) is not
/// lag: after a partial copy holding the last commit, the seal that
/// follows leaves `lag_bytes` at 0 and makes no further copy due, however
/// long the log then stays quiet.
#[test]
fn a_seal_after_a_partial_copy_is_not_lag() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let timed = Options {
        archive_timeout: Some(LONG),
        wal_segment_bytes: 1 << 20,
        // Long enough for the round below to copy before the seal.
        wal_seal_delay: Some(Duration::from_millis(500)),
        ..opts(&root.join("archive"))
    };
    let db = Database::open(root.join("db"), timed).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(43));
    let seals = db.stats().wal.seals;
    let quiet = record_commits(&db, &mut model, &mut rng, 3)
        .pop()
        .expect("a commit");
    assert!(round_past_timeout(&db), "the commit is copied");
    let copied = db.stats().archive;
    assert!(copied.archived_lsn >= quiet.lsn.get(), "{copied:?}");
    // Polls (60 s at most) for the seal; only its content is asserted.
    for _ in 0..6000 {
        if db.stats().wal.seals > seals {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = db.stats();
    assert!(s.wal.seals > seals, "the log was sealed: {:?}", s.wal);
    assert_eq!(s.archive.lag_bytes, 0, "{:?}", s.archive);
    assert!(!round_past_timeout(&db), "no copy without a new commit");
    assert_eq!(db.stats().archive.partial_copies, copied.partial_copies);
    db.close().expect("close");
}

/// The archive's lag clock counts from when its oldest missing record byte
/// became durable: archiving whole segments restarts it, so a busy
/// database that keeps up reports little lag however long it has run.
#[test]
fn the_lag_clock_restarts_when_whole_segments_are_archived() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let db = Database::open(root.join("db"), opts(&root.join("archive"))).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(45));
    let first = commit_some(&db, &mut model, &mut rng);
    let ahead = Duration::from_secs(1000 * 3600);
    db.archive_round_for_test(Duration::ZERO).expect("round");
    db.archive_round_for_test(ahead).expect("round");
    let s = db.stats().archive;
    assert!(s.archived_lsn < first.get(), "{s:?}");
    assert!(s.lag_ms >= ahead.as_millis() as u64, "{s:?}");
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    db.archive_round_for_test(Duration::ZERO).expect("round");
    let s = db.stats().archive;
    assert!(s.archived_lsn >= first.get(), "{s:?}");
    assert!(s.lag_bytes > 0, "the current segment lags: {s:?}");
    assert!(
        s.lag_ms < ahead.as_millis() as u64,
        "the clock restarted: {s:?}"
    );
    db.close().expect("close");
}

/// `archive_timeout` is recorded too: an open without any archive option
/// copies the segment being written after the timeout, replacing the
/// partial copy an earlier open made, and the whole segment replaces both;
/// restores to a commit of each open give exactly their states.
#[test]
fn a_partial_copy_is_replaced_after_a_reopen() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let timed = Options {
        archive_timeout: Some(LONG),
        wal_segment_bytes: 1 << 20,
        ..opts(&archive)
    };
    let db = Database::open(&db_dir, timed.clone()).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(61));
    record_commits(&db, &mut model, &mut rng, 30);
    db.backup(&backup, &BackupOptions::default())
        .expect("backup");
    let first = record_commits(&db, &mut model, &mut rng, 10)
        .pop()
        .expect("a commit");
    assert!(round_past_timeout(&db), "the first open's copy");
    drop(db);
    let plain = Options {
        wal_archive: None,
        archive_timeout: None,
        ..timed
    };
    let db = Database::open(&db_dir, plain).expect("open without archive options");
    assert_eq!(
        db.stats().archive.timeout_ms,
        LONG.as_millis() as u64,
        "the timeout is recorded"
    );
    let second = record_commits(&db, &mut model, &mut rng, 10)
        .pop()
        .expect("a commit");
    assert!(round_past_timeout(&db), "the second open's copy");
    let s = db.stats().archive;
    assert!(s.archived_lsn >= second.lsn.get(), "{s:?}");
    assert!(s.partial_copies == 1 && s.failures == 0, "{s:?}");
    let at_end = restored(root, &backup, &archive, RestoreTarget::End, 0);
    assert!(
        at_end == second.state,
        "the archive's end is the second open's"
    );
    push_log_on(&db, &mut model, 20);
    db.checkpoint().expect("checkpoint");
    let s = db.stats().archive;
    assert!(s.failures == 0 && s.segments > 0, "{s:?}");
    drop(db);
    for (i, r) in [&first, &second].into_iter().enumerate() {
        let got = restored(root, &backup, &archive, RestoreTarget::Lsn(r.lsn), i + 1);
        assert!(got == r.state, "restore to {}", r.lsn);
    }
}

/// A partial copy after one the same open made does not read that copy
/// back: the second copy's reads in the scheduler's `Read` class (the
/// archiver's checks) are no more than the first copy's, which had no
/// archived copy to compare.
#[test]
fn a_second_partial_copy_does_not_read_the_first_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let timed = Options {
        archive_timeout: Some(LONG),
        wal_segment_bytes: 1 << 20,
        ..opts(&root.join("archive"))
    };
    let db = Database::open(root.join("db"), timed).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(75));
    let read = || db.stats().io_scheduler.bytes[1];
    let mut copies = Vec::new();
    for _ in 0..2 {
        let last = record_commits(&db, &mut model, &mut rng, 10)
            .pop()
            .expect("a commit");
        let before = read();
        assert!(round_past_timeout(&db), "a partial copy");
        copies.push(read() - before);
        let s = db.stats().archive;
        assert!(s.archived_lsn >= last.lsn.get(), "{s:?}");
    }
    assert_eq!(db.stats().archive.partial_copies, 2);
    assert!(copies[1] <= copies[0], "bytes read per copy: {copies:?}");
    db.close().expect("close");
}

/// A backup whose last segment the archive holds only as a shorter partial
/// copy (the backup could not bring the archive up to its end: a full
/// disk, say) still restores to a point in time: the restore keeps the
/// backup's own segment, never taking the shorter copy for another
/// history.
#[test]
fn a_backup_past_the_archives_partial_copy_still_restores() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, backup) = (root.join("db"), root.join("archive"), root.join("backup"));
    let timed = Options {
        archive_timeout: Some(LONG),
        wal_segment_bytes: 1 << 20,
        ..opts(&archive)
    };
    let db = Database::open(&db_dir, timed).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(71));
    record_commits(&db, &mut model, &mut rng, 20);
    assert!(round_past_timeout(&db), "a partial copy");
    // The database's first line of history is archived in the root.
    let seg = archive.join(seg_name(0));
    let shorter = std::fs::read(&seg).expect("the partial copy");
    let newer = record_commits(&db, &mut model, &mut rng, 5)
        .pop()
        .expect("a commit");
    let report = db
        .backup(&backup, &BackupOptions::default())
        .expect("backup");
    assert!(report.end_lsn >= newer.lsn, "{report:?}");
    db.close().expect("close");
    // As if the backup's copy into the archive had failed.
    std::fs::write(&seg, &shorter).expect("put the shorter copy back");
    let at_end = restored(root, &backup, &archive, RestoreTarget::End, 0);
    assert!(at_end == newer.state, "the backup's state");
}

/// A copy of the database directory never archives into the original's
/// archive: its first open, with or without `wal_archive`, is a typed
/// error naming the archive and the copy, and nothing is archived; `Off`
/// (or `Switch` to an archive of its own) lets it open. The original goes
/// on archiving.
#[test]
fn a_copied_database_directory_is_refused_the_originals_archive() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, clone) = (root.join("db"), root.join("archive"), root.join("clone"));
    let db = Database::open(&db_dir, opts(&archive)).expect("open");
    let (mut model, mut rng) = (Model::new(), Rng(73));
    record_commits(&db, &mut model, &mut rng, 20);
    push_log_on(&db, &mut model, 2);
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    common::copy_tree(&db_dir, &clone);
    let before = std::fs::read_dir(&archive).expect("list").count();
    let plain = Options {
        wal_archive: None,
        ..opts(&archive)
    };
    for o in [plain.clone(), opts(&archive)] {
        let e = Database::open(&clone, o).map(drop).expect_err("a copy");
        match &e {
            Error::ArchiveForeign { dir, database, .. } => {
                assert_eq!((dir, database), (&archive, &clone), "{e}")
            }
            e => panic!("{e}"),
        }
    }
    let after = std::fs::read_dir(&archive).expect("list").count();
    assert_eq!(before, after, "nothing archived");
    let other = Options {
        wal_archive_change: directkv::ArchiveChange::Switch,
        ..opts(&root.join("other"))
    };
    drop(Database::open(&clone, other).expect("switched to its own archive"));
    let db = Database::open(&db_dir, plain).expect("the original opens");
    assert!(db.stats().archive.enabled);
    db.close().expect("close");
}

/// A recorded archive directory that is missing (its file system not
/// mounted) is a typed error naming it, and is not created by an open that
/// did not name it; an empty directory in its place (a mount point), or
/// another database's archive, is refused as not the archive. Once the
/// archive is back, the open archives into it.
#[test]
fn a_missing_archive_is_refused_never_created() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let (db_dir, archive, away) = (root.join("db"), root.join("archive"), root.join("away"));
    drop(Database::open(&db_dir, opts(&archive)).expect("open"));
    std::fs::rename(&archive, &away).expect("unmount");
    let plain = Options {
        wal_archive: None,
        ..opts(&archive)
    };
    let e = Database::open(&db_dir, plain.clone())
        .map(drop)
        .expect_err("a missing archive");
    assert!(
        matches!(&e, Error::ArchiveMissing { dir } if dir == &archive),
        "{e}"
    );
    assert!(!archive.exists(), "not created");
    std::fs::create_dir(&archive).expect("a mount point");
    let e = Database::open(&db_dir, plain.clone())
        .map(drop)
        .expect_err("an empty directory");
    assert!(
        matches!(&e, Error::ArchiveForeign { dir, .. } if dir == &archive),
        "{e}"
    );
    // Another database's archive in its place.
    drop(Database::open(root.join("other"), opts(&archive)).expect("another database"));
    let e = Database::open(&db_dir, plain.clone())
        .map(drop)
        .expect_err("another database's archive");
    assert!(
        matches!(&e, Error::ArchiveForeign { dir, .. } if dir == &archive),
        "{e}"
    );
    std::fs::remove_dir_all(&archive).expect("unmount");
    std::fs::rename(&away, &archive).expect("mount");
    let db = Database::open(&db_dir, plain).expect("the archive is back");
    assert!(db.stats().archive.enabled);
    db.close().expect("close");
}

/// The child's half of the test below: it runs with the working directory
/// removed.
const NO_CWD_CHILD: &str = "DIRECTKV_TEST_NO_CWD_CHILD";

/// A relative `wal_archive` when the working directory cannot be read is
/// a typed error, not a panic. The test runs itself again in a child
/// process (removing a process's working directory would disturb the other
/// tests) and checks the child's verdict.
#[test]
fn a_relative_archive_without_a_working_directory_is_an_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    if let Some(db_dir) = std::env::var_os(NO_CWD_CHILD) {
        let gone = tmp.path().join("gone");
        std::fs::create_dir(&gone).expect("mkdir");
        std::env::set_current_dir(&gone).expect("chdir");
        std::fs::remove_dir(&gone).expect("rmdir");
        let e = Database::open(PathBuf::from(db_dir), opts(Path::new("relative")))
            .map(drop)
            .expect_err("no working directory");
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("absolute")),
            "{e}"
        );
        return;
    }
    let name = "a_relative_archive_without_a_working_directory_is_an_error";
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(NO_CWD_CHILD, tmp.path().join("db"))
        .output()
        .expect("run the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}
