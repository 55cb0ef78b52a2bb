//! Open looks before it writes, and never takes what is not its own (issue 17,
//! cases 5 and 6). A refused open leaves the path exactly as it was: no
//! directory made, no `LOCK` left. A directory without `CONTROL` is taken for
//! an interrupted creation only when every file in it carries this engine's
//! mark (a `LOCK` naming its holder, a `data` file starting with an engine
//! page, a `CONTROL.tmp` whose two slots are each zero or a control slot,
//! or an empty one of those);
//! a user's file named `data` is refused by name and left untouched.

mod common;

use std::path::Path;

use directkv::{Database, Error, Options};

fn opts(create_if_missing: bool) -> Options {
    Options {
        cache_bytes: 4 << 20,
        wal_sync: common::NO_SYNC,
        create_if_missing,
        ..Options::default()
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn refused(r: directkv::Result<Database>) -> String {
    match r {
        Err(Error::NotADatabase { detail, .. }) => detail,
        Err(e) => panic!("expected NotADatabase, got {e}"),
        Ok(_) => panic!("expected NotADatabase, the open succeeded"),
    }
}

#[test]
fn issue17_a_user_file_named_data_is_refused_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("data"), b"my thesis, chapter one").expect("write");
    let detail = refused(Database::open(dir.path(), opts(true)));
    assert!(
        detail.contains("\"data\""),
        "the refusal names the file: {detail}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("data")).expect("read"),
        b"my thesis, chapter one"
    );
    assert_eq!(entries(dir.path()), ["data"], "nothing was added");
}

#[test]
fn issue17_refused_opens_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no").join("such");
    refused(Database::open(&missing, opts(false)));
    assert!(!dir.path().join("no").exists(), "no directory was made");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    refused(Database::open(&empty, opts(false)));
    assert!(entries(&empty).is_empty(), "no LOCK was left");

    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).expect("mkdir");
    std::fs::write(foreign.join("notes.txt"), b"x").expect("write");
    let detail = refused(Database::open(&foreign, opts(true)));
    assert!(detail.contains("notes.txt"), "{detail}");
    assert_eq!(entries(&foreign), ["notes.txt"], "no LOCK was left");
}

#[test]
fn an_interrupted_creation_is_started_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    // What a creation killed before CONTROL leaves: a lock file naming a
    // holder that is gone, a data file that was created but not written,
    // and a half-made CONTROL.tmp.
    std::fs::write(
        dir.path().join("LOCK"),
        b"held by pid 999999 (gone), since unix time 1",
    )
    .expect("write");
    std::fs::write(dir.path().join("data"), b"").expect("write");
    std::fs::write(dir.path().join("CONTROL.tmp"), b"DKVCTRL1 and then nothing").expect("write");
    let db = Database::open(dir.path(), opts(true)).expect("a fresh database");
    let mut w = db.begin_write().expect("begin");
    w.put(b"k", b"v").expect("put");
    w.commit().expect("commit");
    drop(db);
    let db = Database::open(dir.path(), opts(false)).expect("reopen");
    assert_eq!(
        db.begin_read().expect("read").get(b"k").expect("get"),
        Some(b"v".to_vec())
    );
}

#[test]
fn a_missing_directory_is_created_when_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a").join("b");
    let db = Database::open(&path, opts(true)).expect("open");
    drop(db);
    assert!(path.join("CONTROL").exists());
}

/// A creation stopped at any write, sync or allocation (as a kill leaves
/// it: the calls before it done, none after) is taken for an interrupted
/// creation and started over. `CONTROL.tmp` is allocated zero-filled before
/// its slots are written, so a creation stopped there leaves a file of
/// zeros, or one slot written and one still zero.
#[test]
fn a_creation_stopped_at_any_step_is_started_over() {
    use directkv::internals::io::{FaultOp, FaultyStorage, OsStorage};
    for op in [
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Allocate,
        FaultOp::SyncDir,
    ] {
        let mut ok_calls = 0;
        loop {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("db");
            let storage = FaultyStorage::new(OsStorage::default());
            storage.fail_after(op, ok_calls, false);
            let stopped = Database::open_with(storage, &path, opts(true)).is_err();
            let db = Database::open(&path, opts(true))
                .unwrap_or_else(|e| panic!("{op:?} after {ok_calls}: reopen: {e}"));
            let mut w = db.begin_write().expect("begin");
            w.put(b"k", b"v").expect("put");
            w.commit().expect("commit");
            assert_eq!(
                db.begin_read().expect("read").get(b"k").expect("get"),
                Some(b"v".to_vec())
            );
            if !stopped {
                break;
            }
            ok_calls += 1;
            assert!(ok_calls < 200, "{op:?}: a creation ends within 200 calls");
        }
    }
}

/// A `CONTROL.tmp` of the creation's size whose slots hold something other
/// than zeros or a control slot is not taken for an interrupted creation.
#[test]
fn a_control_tmp_holding_something_else_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bytes = vec![0u8; 8192];
    bytes[4096..4104].copy_from_slice(b"my notes");
    std::fs::write(dir.path().join("CONTROL.tmp"), &bytes).expect("write");
    let detail = refused(Database::open(dir.path(), opts(true)));
    assert!(detail.contains("CONTROL.tmp"), "{detail}");
    std::fs::write(dir.path().join("CONTROL.tmp"), vec![0u8; 3 * 4096]).expect("write");
    refused(Database::open(dir.path(), opts(true)));
    assert_eq!(entries(dir.path()), ["CONTROL.tmp"], "nothing was added");
}

/// A `data` file sized by a creation but still zero (a crash before its
/// sync) is taken for an interrupted creation; a larger zero file, or a
/// small one holding anything else, is not.
#[test]
fn a_zero_data_file_is_taken_only_at_a_creation_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("data"), vec![0u8; 16384]).expect("write");
    drop(Database::open(dir.path(), opts(true)).expect("a fresh database"));

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("data"), vec![0u8; 1 << 20]).expect("write");
    refused(Database::open(dir.path(), opts(true)));
    let mut bytes = vec![0u8; 8192];
    bytes[5000] = 1;
    std::fs::write(dir.path().join("data"), &bytes).expect("write");
    refused(Database::open(dir.path(), opts(true)));
    assert_eq!(entries(dir.path()), ["data"], "nothing was added");
}

/// The direct-I/O alignment probe (on kernels whose `statx` does not report
/// the alignment) writes a scratch file in the directory of the file being
/// opened, `data`'s at creation; a creation killed before the probe removed
/// it is started over and the file removed. A file of that name holding
/// anything else is refused and kept.
#[test]
fn an_alignment_probe_left_by_a_killed_creation_is_removed() {
    let gone = i32::MAX; // above every pid_max: no such process
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join(format!(".directkv-align-probe-{gone}"));
    let mut bytes = vec![0u8; 8192];
    bytes[4096..].fill(0xA5);
    std::fs::write(&probe, &bytes).expect("write");
    std::fs::write(dir.path().join("data"), b"").expect("write");
    drop(Database::open(dir.path(), opts(true)).expect("a fresh database"));
    assert!(!probe.exists(), "the probe's leftover is removed");

    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join(format!(".directkv-align-probe-{gone}"));
    std::fs::write(&probe, b"my notes").expect("write");
    let detail = refused(Database::open(dir.path(), opts(true)));
    assert!(detail.contains("align-probe"), "{detail}");
    assert_eq!(std::fs::read(&probe).expect("read"), b"my notes");
}

/// Every directory a creation makes is synced into its parent, so a power
/// cut cannot take the database's directory (an open would then make a new,
/// empty database there) or a separate log directory (an open would refuse
/// the database): missing levels above the database or the log directory
/// each add one directory sync.
#[test]
fn the_directories_a_creation_makes_are_synced_into_their_parents() {
    use directkv::internals::io::{FaultOp, FaultyStorage, OsStorage};
    let dir = tempfile::tempdir().expect("tempdir");
    let syncs = |path: std::path::PathBuf, wal: std::path::PathBuf| {
        let storage = FaultyStorage::new(OsStorage::default());
        let opts = Options {
            wal_dir: Some(wal),
            ..opts(true)
        };
        drop(Database::open_with(storage.clone(), &path, opts).expect("create"));
        storage.calls(FaultOp::SyncDir)
    };
    let flat = syncs(dir.path().join("db0"), dir.path().join("log0"));
    let deep = syncs(
        dir.path().join("a").join("b").join("db1"),
        dir.path().join("w").join("log1"),
    );
    assert_eq!(deep, flat + 3, "the entries of a/, a/b/ and w/ are synced");
}
