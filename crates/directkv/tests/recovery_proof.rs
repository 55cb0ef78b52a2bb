//! Recovery proves it has the whole log it needs (issue 17, cases 1–3), on
//! real files through the public API.
//!
//! The scenario of each test: a database takes 300 transactions, a
//! checkpoint, then 500 more that update the same keys, and the process
//! stops without a checkpoint (the handle is dropped: every commit was
//! acknowledged, so every one is in the log). Then one thing is done to its
//! files, and open must either give back every acknowledged commit or
//! refuse with `Corruption` naming the file, changing nothing on disk.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use directkv::internals::io::OsStorage;
use directkv::internals::wal::Layout;
use directkv::internals::wal::WalReader;
use directkv::{Database, Error, Lsn, Options, SyncMethod, SyncVariant};

const SEGMENT_BYTES: u64 = 1 << 20;
const KEYS: u32 = 2500;

fn opts() -> Options {
    Options {
        create_if_missing: true,
        ..common::quiet(4 << 20, SEGMENT_BYTES)
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    common::numbered_key(i, KEYS)
}

/// Commits transaction `t` (ten keys) and records it in `model`.
fn commit(db: &Database, model: &mut Model, t: u32) {
    common::commit_ten(db, model, t, KEYS);
}

/// The scenario of the module docs; returns the acknowledged state and the
/// state before the last transaction.
fn scenario(dir: &Path, close: bool) -> (Model, Model) {
    let db = Database::open(dir, opts()).expect("create");
    let mut model = Model::new();
    for t in 0..300 {
        commit(&db, &mut model, t);
    }
    db.checkpoint().expect("checkpoint");
    for t in 300..799 {
        commit(&db, &mut model, t);
    }
    let before_last = model.clone();
    commit(&db, &mut model, 799);
    if close {
        db.close().expect("close");
    } else {
        drop(db);
    }
    (model, before_last)
}

fn redo_lsn(dir: &Path) -> Lsn {
    common::redo_lsn(dir)
}

fn segment_path(dir: &Path, lsn: Lsn) -> PathBuf {
    dir.join(common::segment_rel_path(SEGMENT_BYTES, lsn))
}

/// A reader of the log from the redo point.
fn log_reader(dir: &Path) -> WalReader<OsStorage> {
    common::log_reader(dir, SEGMENT_BYTES)
}

/// The LSN and payload length of the log's last caller record.
fn last_record(dir: &Path) -> (Lsn, usize) {
    let mut reader = log_reader(dir);
    let mut last = None;
    while let Some(rec) = reader.next_user_record().expect("read the log") {
        last = Some((rec.lsn, rec.payload.len()));
    }
    last.expect("the log has records")
}

/// Flips `n` bytes of the log at `lsn`.
fn flip_log(dir: &Path, lsn: Lsn, n: usize) {
    use std::os::unix::fs::FileExt;
    let layout = Layout {
        segment_bytes: SEGMENT_BYTES,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(segment_path(dir, lsn))
        .expect("segment");
    let mut b = vec![0u8; n];
    let at = layout.file_offset(lsn);
    f.read_exact_at(&mut b, at).expect("read");
    for x in &mut b {
        *x ^= 0x5a;
    }
    f.write_all_at(&b, at).expect("write");
}

/// Open refuses with `Corruption` naming `path`, and nothing on disk changed.
fn refused_naming(dir: &Path, path: &Path, words: &str) -> String {
    let before = common::files_snapshot(dir);
    let detail = match Database::open(dir, opts()) {
        Err(Error::Corruption {
            path: named,
            detail,
            ..
        }) => {
            assert_eq!(named, path, "the error names the file: {detail}");
            detail
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("expected Corruption, the open succeeded"),
    };
    assert!(detail.contains(words), "{detail}");
    assert_eq!(
        common::files_snapshot(dir).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "a refused open makes and removes no file"
    );
    assert!(
        common::files_snapshot(dir) == before,
        "a refused open changes no byte"
    );
    detail
}

fn reads_back(dir: &Path, model: &Model) -> Database {
    let db = Database::open(dir, opts()).expect("open");
    {
        let r = db.begin_read().expect("begin_read");
        for (k, v) in model {
            assert_eq!(
                r.get(k).expect("get").as_ref(),
                Some(v),
                "{}",
                String::from_utf8_lossy(k)
            );
        }
    }
    db
}

#[test]
fn issue17_case1_a_short_wal_segment_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), false);
    let seg = segment_path(dir.path(), redo_lsn(dir.path()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .expect("segment");
    f.set_len(SEGMENT_BYTES / 2).expect("truncate");
    drop(f);
    refused_naming(dir.path(), &seg, "bytes, not the");
}

#[test]
fn issue17_case2_a_missing_wal_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), false);
    std::fs::remove_dir_all(dir.path().join("wal")).expect("rm wal");
    refused_naming(
        dir.path(),
        &dir.path().join("wal"),
        "WAL directory is missing",
    );
    assert!(!dir.path().join("wal").exists(), "the log is not made anew");
}

#[test]
fn issue17_case2_a_missing_redo_segment_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), false);
    let seg = segment_path(dir.path(), redo_lsn(dir.path()));
    std::fs::remove_file(&seg).expect("rm segment");
    refused_naming(dir.path(), &seg, "is missing");
}

#[test]
fn issue17_case2_a_missing_segment_after_the_redo_point_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), false);
    let redo = segment_path(dir.path(), redo_lsn(dir.path()));
    let (last, _) = last_record(dir.path());
    let end = segment_path(dir.path(), last);
    assert_ne!(redo, end, "the scenario's log spans segments");
    std::fs::remove_file(&end).expect("rm segment");
    // Its spare successor is there, so the hole shows; the log that ends
    // in the segment before it would otherwise look whole.
    refused_naming(dir.path(), &end, "is missing");
}

/// Zeroes the log's last flush when it holds no commit: the seal a drop or
/// a close writes, or the sealer after a pause. The log there held zeros
/// before the seal, so this is the state a crash leaves when it comes
/// before the seal: the flush before it is then the unproven last one.
fn unseal(dir: &Path) {
    use std::os::unix::fs::FileExt;
    let mut reader = log_reader(dir);
    let mut last_user = Lsn::ZERO;
    while let Some(rec) = reader.next_record().expect("read the log") {
        if !rec.is_framing() {
            last_user = rec.lsn;
        }
    }
    let seal = reader.last_flush_header().expect("a flush");
    assert!(seal > last_user, "the last flush holds no commit: a seal");
    let layout = Layout {
        segment_bytes: SEGMENT_BYTES,
    };
    let at = layout.file_offset(seal);
    let n = 4096.min(SEGMENT_BYTES - at);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(segment_path(dir, seal))
        .expect("segment");
    f.write_all_at(&vec![0u8; n as usize], at).expect("zero");
}

/// Damage in the last flush after a crash that came before its seal cannot
/// be told from a torn write of it: the commit is dropped, and recovery
/// says so.
#[test]
fn issue17_case3_damage_in_an_unsealed_last_flush_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, before_last) = scenario(dir.path(), false);
    unseal(dir.path());
    let (lsn, len) = last_record(dir.path());
    // 8 bytes inside the last commit's payload.
    flip_log(dir.path(), Lsn::new(lsn.get() + 16 + len as u64 - 40), 8);
    let db = reads_back(dir.path(), &before_last);
    let r = db.stats().recovery;
    assert_eq!(r.torn_tail_lsn, Some(lsn.get()), "{r:?}");
    assert!(r.torn_tail_records >= 1 && r.torn_tail_bytes > 40, "{r:?}");
}

/// Refused with `Corruption` naming the segment, its byte offset and the
/// LSN of the damaged record, and nothing on disk changed.
fn refused_at(dir: &Path, lsn: Lsn) {
    let detail = refused_naming(dir, &segment_path(dir, lsn), "corruption, not a torn tail");
    assert!(detail.contains("invalid WAL record at LSN"), "{detail}");
}

/// Issue 43: the drop sealed the last flush (a crash after the seal leaves
/// the same files), so damage in the last commit — 40 bytes before its
/// end, or in its record header — is refused, never taken for a torn write
/// that drops an acknowledged commit.
#[test]
fn issue43_damage_in_a_sealed_last_commit_is_refused() {
    for (what, offset) in [("payload", None), ("header", Some(4u64))] {
        let dir = tempfile::tempdir().expect("tempdir");
        scenario(dir.path(), false);
        let (lsn, len) = last_record(dir.path());
        let at = offset.unwrap_or(16 + len as u64 - 40);
        flip_log(dir.path(), Lsn::new(lsn.get() + at), 8);
        eprintln!("damage in the last commit's {what}");
        refused_at(dir.path(), lsn);
    }
}

/// Issue 43: several commits in the last flush (group commit: four that
/// did not wait, carried by a fifth that did), damage in its last 512
/// bytes: refused.
#[test]
fn issue43_damage_in_the_last_512_bytes_of_a_sealed_group_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), false);
    let db = Database::open(dir.path(), opts()).expect("open");
    let flushes_before = db.stats().wal.flushes;
    for t in 800..805 {
        let mut w = db
            .begin_write_with(&directkv::WriteOptions {
                durability: (t < 804).then_some(directkv::Durability::NoSyncNotDurable),
                ..directkv::WriteOptions::default()
            })
            .expect("begin_write");
        for j in 0..10 {
            w.put(&key(t * 10 + j), format!("group {t} value {j}").as_bytes())
                .expect("put");
        }
        w.commit().expect("commit");
    }
    assert_eq!(
        db.stats().wal.flushes,
        flushes_before + 1,
        "the five commits went out in one flush"
    );
    drop(db);
    let (lsn, len) = last_record(dir.path());
    let end = lsn.get() + 16 + len as u64;
    // The flush ends at the next 512-byte boundary (its pad fills it): 8
    // bytes in its last 512, past the last commit's record when the pad
    // leaves room, else at the end of that record.
    let unit_end = end.next_multiple_of(512);
    let at = if unit_end - end >= 24 {
        end + 16
    } else {
        unit_end - 16
    };
    assert!(
        at + 8 <= unit_end && at + 512 >= unit_end,
        "in the last 512 bytes"
    );
    flip_log(dir.path(), Lsn::new(at), 8);
    refused_naming(
        dir.path(),
        &segment_path(dir.path(), Lsn::new(at)),
        "corruption, not a torn tail",
    );
}

#[test]
fn issue17_case3_damage_at_the_end_after_a_clean_close_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    scenario(dir.path(), true);
    // The last record is the closing checkpoint's, which CONTROL names.
    let (lsn, len) = last_record(dir.path());
    flip_log(dir.path(), Lsn::new(lsn.get() + 16 + len as u64 - 8), 8);
    refused_naming(
        dir.path(),
        &segment_path(dir.path(), lsn),
        "corruption, not a torn tail",
    );
}

#[test]
fn a_clean_end_reports_no_torn_tail_and_a_crash_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, _) = scenario(dir.path(), false);
    let db = reads_back(dir.path(), &model);
    assert_eq!(db.stats().recovery.torn_tail_lsn, None);
    db.close().expect("close");
    let db = reads_back(dir.path(), &model);
    assert_eq!(db.stats().recovery.transactions, 0, "closed cleanly");
}

#[test]
fn a_data_file_older_than_control_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), opts()).expect("create");
    let mut model = Model::new();
    for t in 0..100 {
        commit(&db, &mut model, t);
    }
    db.checkpoint().expect("checkpoint");
    let old = std::fs::read(dir.path().join("data")).expect("copy");
    for t in 100..400 {
        commit(&db, &mut model, t);
    }
    db.close().expect("close");
    std::fs::write(dir.path().join("data"), old).expect("restore the old copy");
    refused_naming(
        dir.path(),
        &dir.path().join("data"),
        "data file is older than CONTROL",
    );
}

/// After a crash, the WAL directory restored from an older copy looks like
/// a crash at the moment of the copy; the data file's head, written once
/// the log is durable in each new segment, says the log went further.
#[test]
fn a_wal_directory_rolled_back_after_a_crash_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), opts()).expect("create");
    let mut model = Model::new();
    for t in 0..100 {
        commit(&db, &mut model, t);
    }
    db.checkpoint().expect("checkpoint");
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(from).expect("read_dir") {
            let e = e.expect("entry");
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    };
    copy(&dir.path().join("wal"), old.path());
    let redo = redo_lsn(dir.path());
    for t in 100..1500 {
        commit(&db, &mut model, t);
    }
    let (last, _) = last_record(dir.path());
    assert!(
        segment_path(dir.path(), last) != segment_path(dir.path(), redo),
        "the log went on into later segments"
    );
    drop(db);
    std::fs::remove_dir_all(dir.path().join("wal")).expect("rm wal");
    copy(old.path(), &dir.path().join("wal"));
    match Database::open(dir.path(), opts()) {
        Err(Error::Corruption { detail, .. }) => {
            assert!(detail.contains("data file's head says so"), "{detail}")
        }
        Err(e) => panic!("expected Corruption, got {e}"),
        Ok(_) => panic!("the rolled-back log was taken for the whole log"),
    }
}

/// The child process of
/// `issue43_damage_after_a_kill_that_followed_the_background_seal_is_refused`:
/// commits with real syncs and the background threads on, waits until the
/// sealer has sealed the last commit's flush, says `sealed`, and waits to
/// be killed. Does nothing unless `DIRECTKV_SEAL_CHILD` names a directory.
#[test]
fn seal_child() {
    let Ok(dir) = std::env::var("DIRECTKV_SEAL_CHILD") else {
        return;
    };
    let db = Database::open(
        Path::new(&dir),
        Options {
            background_threads: true,
            wal_sync: Some(SyncVariant {
                method: SyncMethod::Fdatasync,
                direct: false,
            }),
            ..opts()
        },
    )
    .expect("open");
    let mut model = Model::new();
    for t in 0..20 {
        commit(&db, &mut model, t);
    }
    // The seal follows the last commit's flush once the log is idle.
    // The cap only ends a failing run (the parent then finds no seal).
    let cap = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // (`sealed` turns when the seal's flush ends; `seals` counts it after.)
    while !(db.stats().wal.sealed && db.stats().wal.seals >= 1) {
        assert!(std::time::Instant::now() < cap, "no seal came");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    println!("\nchild: sealed");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Issue 43 on a real process: no drop, no close, a SIGKILL after the
/// background sealer wrote its seal; damage in the last acknowledged commit
/// is then refused.
#[test]
fn issue43_damage_after_a_kill_that_followed_the_background_seal_is_refused() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "seal_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("DIRECTKV_SEAL_CHILD", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("stdout");
    let sealed = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "child: sealed");
    child.kill().expect("kill");
    let _ = child.wait();
    assert!(sealed, "the child sealed its log before it was killed");
    let (lsn, len) = last_record(dir.path());
    flip_log(dir.path(), Lsn::new(lsn.get() + 16 + len as u64 - 40), 8);
    refused_at(dir.path(), lsn);
}
