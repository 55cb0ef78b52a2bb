//! A database's files are its owner's, and opening one cannot be redirected
//! (issue 19). Pins, on real files in temporary directories:
//! - a database whose directory, WAL directory or files its group or others
//!   may write is refused with `WritableByOthers` naming the path and mode,
//!   and opens with `accept_writable_by_others`; one others may only read
//!   opens, listing the paths in `stats().readable_by_others` and `check()`;
//! - `data`, `CONTROL`, a WAL segment or `LOCK` replaced by a symlink (to a
//!   file inside or outside the directory), a FIFO or a directory is refused
//!   with `NotARegularFile` naming it, and the symlink's target is not
//!   written (before, `LOCK` through a symlink truncated its target);
//! - the scratch files of a sync probe killed mid-measurement, carrying the
//!   engine's magic, are removed by the next open, and nothing else is (that
//!   a scratch file carries the magic from its first write is a unit test of
//!   `io`, `io::tests`);
//! - a database copied with `cp -r` or `cp -a` keeps working.
//!
//! The modes of created files under different umasks are in
//! `umask_modes.rs`, a binary of its own (the umask is per process).
//!
//! The tests here run one at a time ([`serial`]): some spawn `cp`, `true` or
//! `mkfifo`, and a child between `fork` and `exec` holds every descriptor of
//! the parent, `LOCK`'s `flock` included, so another test's reopen right
//! after its close would meet a lock still held.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use directkv::internals::io::profile;
use directkv::{Database, Error, Options};

/// Holds the lock that runs the tests of this file one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn opts() -> Options {
    Options {
        cache_bytes: 4 << 20,
        wal_sync: common::NO_SYNC,
        background_threads: false,
        publish_stats: false,
        ..Options::default()
    }
}

/// A closed database at `dir/db` holding keys `k0..k49`; returns its path.
fn made(dir: &Path) -> PathBuf {
    let path = dir.join("db");
    let db = Database::open(&path, opts()).expect("create");
    let mut w = db.begin_write().expect("begin");
    for i in 0..50u32 {
        w.put(format!("k{i}").as_bytes(), &i.to_le_bytes())
            .expect("put");
    }
    w.commit().expect("commit");
    db.close().expect("close");
    path
}

fn assert_keys(path: &Path) {
    let db = Database::open(path, opts()).expect("reopen");
    let r = db.begin_read().expect("read");
    for i in 0..50u32 {
        let v = r.get(format!("k{i}").as_bytes()).expect("get");
        assert_eq!(v.as_deref(), Some(&i.to_le_bytes()[..]), "k{i}");
    }
    drop(r);
    assert_eq!(db.check().expect("check").keys, 50);
    db.close().expect("close");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The lowest-numbered WAL segment: the one recovery reads first.
fn first_segment(db: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(db.join("wal"))
        .expect("wal dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.into_iter().next().expect("a segment")
}

fn writable_refusal(r: directkv::Result<Database>) -> (PathBuf, u32) {
    match r {
        Err(Error::WritableByOthers { path, mode }) => (path, mode),
        Err(e) => panic!("expected WritableByOthers, got {e}"),
        Ok(_) => panic!("expected WritableByOthers, the open succeeded"),
    }
}

#[test]
fn issue19_group_writable_directory_is_refused_unless_accepted() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = made(dir.path());
    chmod(&db, 0o770);
    let (path, mode) = writable_refusal(Database::open(&db, opts()));
    assert_eq!((path.as_path(), mode), (db.as_path(), 0o770));
    let msg = Database::open(&db, opts()).err().map(|e| e.to_string());
    assert!(msg.is_some_and(|m| m.contains("0770") && m.contains("chmod go-w")));
    let accepting = Options {
        accept_writable_by_others: true,
        ..opts()
    };
    let open = Database::open(&db, accepting).expect("accepted");
    let report = open.check().expect("check");
    assert_eq!(report.writable_by_others, vec![db.clone()]);
    open.close().expect("close");
    chmod(&db, 0o700);
    assert_keys(&db);
}

#[test]
fn issue19_world_writable_files_are_refused_naming_them() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = made(dir.path());
    for victim in [db.join("CONTROL"), db.join("data"), first_segment(&db)] {
        chmod(&victim, 0o602);
        let (path, mode) = writable_refusal(Database::open(&db, opts()));
        assert_eq!((path, mode), (victim.clone(), 0o602));
        chmod(&victim, 0o600);
    }
    chmod(&db.join("wal"), 0o777);
    let (path, _) = writable_refusal(Database::open(&db, opts()));
    assert_eq!(path, db.join("wal"));
    chmod(&db.join("wal"), 0o700);
    assert_keys(&db);
}

#[test]
fn issue19_readable_by_others_is_a_warning_in_stats_and_check() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = made(dir.path());
    chmod(&db.join("data"), 0o644);
    chmod(&db.join("CONTROL"), 0o640);
    let open = Database::open(&db, opts()).expect("opens with a warning");
    let mut warned = open.stats().readable_by_others;
    warned.sort();
    assert_eq!(warned, vec![db.join("CONTROL"), db.join("data")]);
    let report = open.check().expect("check");
    assert!(report.writable_by_others.is_empty());
    let data = report
        .files
        .iter()
        .find(|f| f.path == db.join("data"))
        .expect("data is reported");
    assert_eq!(data.mode, "0644");
    assert!(report.files.iter().any(|f| f.path == db.join("wal")));
    open.close().expect("close");
    // Group-readable is what GroupReadable grants: only others warn.
    let group = Options {
        permissions: directkv::Permissions::GroupReadable,
        ..opts()
    };
    let open = Database::open(&db, group).expect("open");
    assert_eq!(open.stats().readable_by_others, vec![db.join("data")]);
    open.close().expect("close");
}

/// How a file of the database is replaced.
#[derive(Debug, Clone, Copy)]
enum Swap {
    /// A symlink to a copy of it inside the directory.
    LinkInside,
    /// A symlink to a copy of it in another directory.
    LinkOutside,
    /// A FIFO.
    Fifo,
    /// An empty directory.
    Dir,
}

/// Replaces `victim` as `swap` says; returns the copy a symlink points to.
fn swap(victim: &Path, swap: Swap, outside: &Path) -> Option<PathBuf> {
    let name = victim.file_name().expect("name").to_string_lossy();
    let target = match swap {
        Swap::LinkInside => Some(victim.with_file_name(format!("{name}.real"))),
        Swap::LinkOutside => Some(outside.join(format!("{name}.real"))),
        Swap::Fifo | Swap::Dir => None,
    };
    match &target {
        Some(t) => std::fs::rename(victim, t).expect("move aside"),
        None => std::fs::remove_file(victim).expect("remove"),
    }
    match swap {
        Swap::LinkInside | Swap::LinkOutside => {
            let t = target.as_ref().expect("a target");
            std::os::unix::fs::symlink(t, victim).expect("symlink");
        }
        Swap::Fifo => {
            let made = Command::new("mkfifo").arg(victim).status().expect("mkfifo");
            assert!(made.success(), "mkfifo");
        }
        Swap::Dir => std::fs::create_dir(victim).expect("mkdir"),
    }
    target
}

#[test]
fn issue19_a_file_replaced_by_a_link_fifo_or_directory_is_refused() {
    let _serial = serial();
    let kinds = [
        (Swap::LinkInside, "symbolic link"),
        (Swap::LinkOutside, "symbolic link"),
        (Swap::Fifo, "FIFO"),
        (Swap::Dir, "directory"),
    ];
    for (how, kind) in kinds {
        for which in ["data", "CONTROL", "segment", "LOCK"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let outside = tempfile::tempdir().expect("outside");
            let db = made(dir.path());
            let victim = match which {
                "segment" => first_segment(&db),
                name => db.join(name),
            };
            let target = swap(&victim, how, outside.path());
            let before = target.as_ref().map(|t| std::fs::read(t).expect("read"));
            match Database::open(&db, opts()) {
                Err(Error::NotARegularFile { path, kind: found }) => {
                    assert_eq!(path, victim, "{which} as {how:?}");
                    assert_eq!(found, kind, "{which} as {how:?}");
                }
                Err(e) => panic!("{which} as {how:?}: expected NotARegularFile, got {e}"),
                Ok(_) => panic!("{which} as {how:?}: the open succeeded"),
            }
            if let (Some(t), Some(b)) = (target, before) {
                assert_eq!(
                    std::fs::read(t).expect("read"),
                    b,
                    "the target is untouched"
                );
            }
        }
    }
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn");
    let pid = child.id();
    child.wait().expect("wait");
    pid
}

fn scratch_bytes(pid: u32) -> Vec<u8> {
    let mut bytes = vec![0u8; 1 << 20];
    bytes[..8].copy_from_slice(&profile::Scratch::MAGIC);
    bytes[8..12].copy_from_slice(&pid.to_le_bytes());
    bytes
}

#[test]
fn issue19_probe_leftovers_are_removed_at_the_next_open() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = made(dir.path());
    let pid = dead_pid();
    let wal = db.join("wal");
    let leftover = wal.join(format!(".directkv-sync-probe-{pid}"));
    let direct_leftover = db.join(format!(".directkv-direct-probe-{pid}"));
    std::fs::write(&leftover, scratch_bytes(pid)).expect("leftover");
    std::fs::write(&direct_leftover, scratch_bytes(pid)).expect("leftover");
    // Named like one but not carrying the magic (or another pid's): kept.
    let foreign = wal.join(format!(".directkv-sync-probe-{}", pid + 1));
    std::fs::write(&foreign, b"not ours").expect("foreign");
    let other_pid = wal.join(format!(".directkv-direct-probe-{}", pid + 2));
    std::fs::write(&other_pid, scratch_bytes(pid)).expect("mismatch");
    assert_keys(&db);
    assert!(!leftover.exists(), "the sync probe's leftover is gone");
    assert!(
        !direct_leftover.exists(),
        "the direct probe's leftover is gone"
    );
    assert!(foreign.exists() && other_pid.exists(), "others are kept");
}

#[test]
fn issue19_a_copied_database_keeps_working() {
    let _serial = serial();
    for flags in ["-r", "-a"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = made(dir.path());
        let copy = dir.path().join(format!("copy{flags}"));
        let status = Command::new("cp")
            .arg(flags)
            .arg(&db)
            .arg(&copy)
            .status()
            .expect("cp");
        assert!(status.success(), "cp {flags}");
        assert_keys(&copy);
        let open = Database::open(&copy, opts()).expect("open the copy");
        assert!(
            open.stats().readable_by_others.is_empty(),
            "private modes survive cp {flags}"
        );
        open.close().expect("close");
    }
}

/// Every entry under `dir`, recursively (empty when `dir` is empty).
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read dir") {
        let p = e.expect("entry").path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(entries(&p));
        }
        out.push(p);
    }
    out
}

/// Asserts `dir` is empty and `log` holds at least three segments.
fn assert_empty_and_log_grew(dir: &Path, log: &Path) {
    assert_eq!(entries(dir), Vec::<PathBuf>::new(), "{}", dir.display());
    let segments = entries(log)
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .count();
    assert!(
        segments >= 3,
        "the log grew where it is held: {segments} segments"
    );
}

#[test]
fn issue19_directories_moved_after_open_are_still_the_ones_written() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (db_path, wal_path) = (tmp.path().join("db"), tmp.path().join("log"));
    let o = Options {
        wal_dir: Some(wal_path.clone()),
        wal_segment_bytes: 1 << 20,
        background_threads: true,
        publish_stats: true,
        ..opts()
    };
    let db = Database::open(&db_path, o.clone()).expect("create");
    // Both directories move away; an empty directory takes the database's
    // name and a symlink to another one the log's.
    let (db_moved, wal_moved) = (tmp.path().join("db.moved"), tmp.path().join("log.moved"));
    std::fs::rename(&db_path, &db_moved).expect("move db");
    std::fs::rename(&wal_path, &wal_moved).expect("move log");
    let decoy = tmp.path().join("decoy");
    std::fs::create_dir(&db_path).expect("mkdir");
    std::fs::create_dir(&decoy).expect("mkdir");
    std::os::unix::fs::symlink(&decoy, &wal_path).expect("symlink");
    // Enough log for several new segments, checkpoints (CONTROL rewritten
    // through CONTROL.tmp and a rename) and a published stats file.
    let value = vec![7u8; 2000];
    for round in 0..40u32 {
        let mut w = db.begin_write().expect("begin");
        for i in 0..50u32 {
            w.put(format!("r{round}-{i}").as_bytes(), &value)
                .expect("put");
        }
        w.commit().expect("commit");
        if round % 10 == 9 {
            db.checkpoint().expect("checkpoint");
        }
    }
    while !db_moved.join(directkv::STATS_FILE).exists() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    db.close().expect("close");
    assert_eq!(
        entries(&db_path),
        Vec::<PathBuf>::new(),
        "nothing at the old name"
    );
    assert_empty_and_log_grew(&decoy, &wal_moved);
    let reopened = Options {
        wal_dir: Some(wal_moved),
        ..o
    };
    let db = Database::open(&db_moved, reopened).expect("reopen where it went");
    let r = db.begin_read().expect("read");
    assert_eq!(r.get(b"r39-49").expect("get").as_deref(), Some(&value[..]));
    drop(r);
    assert_eq!(db.check().expect("check").keys, 40 * 50);
    db.close().expect("close");
}

#[test]
fn issue19_a_wal_directory_that_is_a_symlink_is_refused() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = made(tmp.path());
    let elsewhere = tmp.path().join("wal-elsewhere");
    std::fs::rename(path.join("wal"), &elsewhere).expect("move");
    std::os::unix::fs::symlink(&elsewhere, path.join("wal")).expect("symlink");
    // A dead probe's leftover in the link's target: open must refuse before
    // it reaches through the link to remove it.
    let pid = dead_pid();
    let leftover = elsewhere.join(format!(".directkv-sync-probe-{pid}"));
    std::fs::write(&leftover, scratch_bytes(pid)).expect("leftover");
    match Database::open(&path, opts()) {
        Err(Error::NotADirectory { path: p, kind }) => {
            assert_eq!(p, path.join("wal"));
            assert_eq!(kind, "symbolic link");
        }
        Err(e) => panic!("expected NotADirectory, got {e}"),
        Ok(_) => panic!("a symlinked wal/ was followed"),
    }
    assert!(
        leftover.exists(),
        "nothing in the link's target was touched"
    );
    // Given as `wal_dir`, the same directory is the user's choice and opens.
    let o = Options {
        wal_dir: Some(elsewhere),
        ..opts()
    };
    let db = Database::open(&path, o).expect("open with wal_dir");
    assert_eq!(db.check().expect("check").keys, 50);
    db.close().expect("close");
}

#[test]
fn issue19_the_default_wal_directory_moved_after_open_is_still_the_one_written() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("db");
    let o = Options {
        wal_segment_bytes: 1 << 20,
        ..opts()
    };
    let db = Database::open(&path, o.clone()).expect("create");
    // wal/ moves inside the database directory: first nothing has its name,
    // then a symlink to a decoy. Every segment made and every directory
    // sync after the move must go to the directory open holds.
    let moved = path.join("wal.moved");
    std::fs::rename(path.join("wal"), &moved).expect("move");
    let decoy = tmp.path().join("decoy");
    std::fs::create_dir(&decoy).expect("mkdir");
    let value = vec![3u8; 2000];
    for round in 0..30u32 {
        if round == 15 {
            std::os::unix::fs::symlink(&decoy, path.join("wal")).expect("symlink");
        }
        let mut w = db.begin_write().expect("begin");
        for i in 0..50u32 {
            w.put(format!("r{round}-{i}").as_bytes(), &value)
                .expect("put");
        }
        w.commit().expect("commit");
    }
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    assert_empty_and_log_grew(&decoy, &moved);
    // Put back, it reopens with every commit.
    std::fs::remove_file(path.join("wal")).expect("unlink");
    std::fs::rename(&moved, path.join("wal")).expect("move back");
    let db = Database::open(&path, o).expect("reopen");
    assert_eq!(db.check().expect("check").keys, 30 * 50);
    db.close().expect("close");
}

#[test]
fn issue19_a_wal_directory_that_is_the_database_directory_works() {
    let _serial = serial();
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("db");
    let o = Options {
        wal_dir: Some(path.clone()),
        ..opts()
    };
    let db = Database::open(&path, o.clone()).expect("create");
    let mut w = db.begin_write().expect("begin");
    w.put(b"k", b"v").expect("put");
    w.commit().expect("commit");
    db.checkpoint().expect("checkpoint");
    db.close().expect("close");
    assert!(
        path.join("0000000000000000.seg").exists(),
        "segments beside data"
    );
    let db = Database::open(&path, o).expect("reopen");
    let r = db.begin_read().expect("read");
    assert_eq!(r.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
    drop(r);
    db.close().expect("close");
}
