//! `directkv backup`, `verify-backup` and `restore`, and what a killed
//! backup leaves: the backup process is killed (SIGKILL) at spread-out
//! moments; the source still opens, checks and holds every key, and a
//! backup without its completion marker is refused by open, verify and
//! restore, while a completed one verifies and restores to every key.
//! What `restore` makes, from a backup alone or rolled forward from a log
//! archive, is a database every command accepts and `verify-backup`
//! refuses as no backup; and a restore from an archive of over a thousand
//! segments, and the first open of what it made, run with 64 file
//! descriptors.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use directkv::{Database, Error, Options};

const KEYS: u64 = 3_000;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_directkv"))
}

fn options() -> Options {
    Options {
        cache_bytes: 8 << 20,
        ..Options::default()
    }
}

fn source(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("db");
    let db = Database::open(&src, options()).expect("open");
    let mut w = db.begin_write().expect("begin");
    for i in 0..KEYS {
        w.put(format!("k/{i:06}").as_bytes(), &[7u8; 300])
            .expect("put");
    }
    w.commit().expect("commit");
    db.close().expect("close");
    src
}

fn keys(dir: &Path) -> u64 {
    let db = Database::open(dir, options()).expect("open");
    db.check().expect("check");
    let n = db.begin_read().expect("read").prefix(b"k/").count() as u64;
    db.close().expect("close");
    n
}

#[test]
fn a_killed_backup_is_refused_and_the_source_unharmed() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let src = source(dir.path());
    let (mut complete, mut incomplete) = (0, 0);
    // Killed this long after the backup's directory appears (so the kill
    // lands inside the backup however long the process takes to start);
    // the last one is left to finish.
    for (i, delay_ms) in [0u64, 30, 120, 250, 400, u64::MAX].into_iter().enumerate() {
        let dest = dir.path().join(format!("b{i}"));
        let mut child = bin()
            .arg("backup")
            .arg(&src)
            .arg(&dest)
            .args(["--rate", "2M"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        if delay_ms < u64::MAX {
            for _ in 0..20_000 {
                if dest.exists() || child.try_wait().expect("try_wait").is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(delay_ms));
            let _ = child.kill();
        }
        child.wait().expect("wait");
        assert_eq!(keys(&src), KEYS, "the source is unharmed");
        if !dest.exists() {
            continue;
        }
        if dest.join("backup_complete").exists() {
            complete += 1;
            let out = bin()
                .arg("verify-backup")
                .arg(&dest)
                .output()
                .expect("verify");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let restored = dir.path().join(format!("r{i}"));
            let out = bin()
                .arg("restore")
                .arg(&dest)
                .arg(&restored)
                .output()
                .expect("restore");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(keys(&restored), KEYS);
            continue;
        }
        // Killed between making the destination and its log directory
        // (one `create_dir_all`): an empty directory, which an open takes
        // for a new database, as for any empty directory. Nothing of the
        // backup was written; the rest of the checks need some of it.
        let empty = std::fs::read_dir(&dest).map_or(true, |mut d| d.next().is_none());
        if empty {
            continue;
        }
        incomplete += 1;
        match Database::open(&dest, options()) {
            Err(Error::IncompleteBackup { .. }) => {}
            // Killed before its CONTROL existed: not a database at all.
            Err(Error::NotADatabase { .. }) => {}
            other => panic!("a killed backup opened: {:?}", other.map(drop)),
        }
        for cmd in ["verify-backup", "restore"] {
            let mut c = bin();
            c.arg(cmd).arg(&dest);
            if cmd == "restore" {
                c.arg(dir.path().join(format!("r{i}")));
            }
            let out = c.output().expect("run");
            assert!(!out.status.success(), "{cmd} accepted a killed backup");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("incomplete backup"), "{cmd}: {err}");
            assert!(!dir.path().join(format!("r{i}")).exists());
        }
    }
    assert!(incomplete > 0, "some kills landed inside a backup");
    assert!(complete > 0, "a backup left alone completes");
}

#[test]
fn backup_refuses_a_database_open_elsewhere() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let src = source(dir.path());
    let db = Database::open(&src, options()).expect("open");
    let out = bin()
        .arg("backup")
        .arg(&src)
        .arg(dir.path().join("b"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LOCK"), "{err}");
    assert!(!dir.path().join("b").exists(), "nothing made");
    drop(db);
    let out = bin()
        .args(["backup", "--json"])
        .arg(&src)
        .arg(dir.path().join("b"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(
        doc["end_lsn"].as_u64() >= doc["start_lsn"].as_u64(),
        "{doc}"
    );
}

/// `directkv restore --archive A --to-lsn L` and `--to-time T` restore
/// exactly the commits up to the target from a backup and the log archive.
#[test]
fn restore_to_an_lsn_and_a_time_from_the_archive() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let (archive, backup, lsns) = archived_commits(dir.path(), 40);
    let restore = |target: &[&str], dest: &Path| {
        let out = bin()
            .arg("restore")
            .arg("--archive")
            .arg(&archive)
            .args(target)
            .arg("--json")
            .arg(&backup)
            .arg(dest)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let first = dir.path().join("r1");
    let lsn = lsns[24].to_string();
    let report = restore(&["--to-lsn", &lsn], &first);
    assert_eq!(report["rolled_forward"]["commits"], 25, "{report}");
    assert_eq!(keys(&first), 25, "the commits through the 25th");
    let time = report["rolled_forward"]["last_commit_time_us"]
        .as_u64()
        .expect("a commit time");
    // The 26th commit's time: a time target takes it in too when the two
    // commits share a microsecond.
    let next = restore(
        &["--to-lsn", &lsns[25].to_string()],
        &dir.path().join("r26"),
    );
    let next_time = next["rolled_forward"]["last_commit_time_us"]
        .as_u64()
        .expect("a commit time");
    let want = if next_time > time { 25 } else { 26 };
    let second = dir.path().join("r2");
    let report = restore(&["--to-time", &time.to_string()], &second);
    assert!(
        report["rolled_forward"]["commits"].as_u64() >= Some(want),
        "{report}"
    );
    if next_time > time {
        assert_eq!(report["rolled_forward"]["commits"], 25, "{report}");
        assert_eq!(keys(&second), 25, "exactly the commits through that time");
    }
    // Without a target, --archive is refused.
    let out = bin()
        .arg("restore")
        .arg("--archive")
        .arg(&archive)
        .arg(&backup)
        .arg(dir.path().join("r3"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(!dir.path().join("r3").exists());
}

/// Runs `directkv` with `args`; it must succeed (its stderr says why not).
fn run_ok(args: &[&std::ffi::OsStr]) {
    let out = bin().args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `directkv check` on a backup refuses it (opening would make it a
/// database and end it as a backup) and leaves it a backup that verifies;
/// `--open-backup` opens it as asked.
#[test]
fn check_refuses_a_backup_and_leaves_it_one() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let src = source(dir.path());
    let dest = dir.path().join("bk");
    run_ok(&["backup".as_ref(), src.as_os_str(), dest.as_os_str()]);
    let out = bin().arg("check").arg(&dest).output().expect("check");
    assert!(!out.status.success(), "a backup was opened");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is a backup") && err.contains("verify-backup"),
        "{err}"
    );
    run_ok(&["verify-backup".as_ref(), dest.as_os_str()]);
    run_ok(&["check".as_ref(), "--open-backup".as_ref(), dest.as_os_str()]);
    assert_eq!(keys(&dest), KEYS);
}

/// `directkv backup` given a backup as its source refuses it before
/// opening it (the open would end it as a backup), and a destination that
/// is not new or empty is refused before the source is opened.
#[test]
fn backup_refuses_a_backup_as_source_and_a_used_destination() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let src = source(dir.path());
    let bk = dir.path().join("bk");
    run_ok(&["backup".as_ref(), src.as_os_str(), bk.as_os_str()]);
    let again = dir.path().join("bk2");
    let out = bin()
        .arg("backup")
        .arg(&bk)
        .arg(&again)
        .output()
        .expect("run");
    assert!(!out.status.success(), "a backup was backed up");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a backup"), "{err}");
    assert!(!again.exists(), "nothing was made");
    run_ok(&["verify-backup".as_ref(), bk.as_os_str()]);
    // Arguments swapped: the backup is refused as the source, and stays one.
    let out = bin()
        .arg("backup")
        .arg(&bk)
        .arg(&src)
        .output()
        .expect("run");
    assert!(!out.status.success());
    run_ok(&["verify-backup".as_ref(), bk.as_os_str()]);
    let used = dir.path().join("used");
    std::fs::create_dir(&used).expect("mkdir");
    std::fs::write(used.join("notes"), b"x").expect("write");
    let out = bin()
        .arg("backup")
        .arg(&src)
        .arg(&used)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(keys(&src), KEYS);
}

/// `directkv check` of `dir` succeeds (its stderr says why not).
fn check_ok(dir: &Path) {
    run_ok(&["check".as_ref(), dir.as_os_str()]);
}

/// Opens the database in `dir` publishing its stats, waits (bounded) until
/// `directkv stats` of it succeeds, and returns its keys under `k/`.
fn open_with_stats(dir: &Path) -> u64 {
    let db = Database::open(dir, options()).expect("a restored copy opens");
    let mut out = None;
    // The database publishes about once a second; a bounded wait, so a
    // refused copy fails the test.
    for _ in 0..300 {
        let o = bin().arg("stats").arg(dir).output().expect("stats");
        if o.status.success() {
            out = Some(o);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = out.expect("`directkv stats` of the open copy succeeds");
    assert!(String::from_utf8_lossy(&out.stdout).contains("commits"));
    let n = db.begin_read().expect("read").prefix(b"k/").count() as u64;
    db.close().expect("close");
    n
}

/// A database with a log archive (64 KiB segments) and a backup taken
/// before `commits` commits of a key `k/…` each, then padding that fills
/// the segments holding them (values that do not compress: the log grows
/// by their size); returns the archive, the backup and the commits' LSNs.
fn archived_commits(dir: &Path, commits: u32) -> (PathBuf, PathBuf, Vec<directkv::Lsn>) {
    let (src, archive, backup) = (dir.join("db"), dir.join("archive"), dir.join("backup"));
    let opts = Options {
        wal_segment_bytes: 64 << 10,
        wal_archive: Some(archive.clone()),
        ..options()
    };
    let db = Database::open(&src, opts).expect("open");
    db.backup(&backup, &directkv::BackupOptions::default())
        .expect("backup");
    let mut lsns = Vec::new();
    for i in 0..commits {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("k/{i:06}").as_bytes(), &[1u8; 3000])
            .expect("put");
        lsns.push(w.commit_lsn().expect("commit"));
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in 0..100u32 {
        let mut w = db.begin_write().expect("begin");
        w.put(format!("pad/{i:06}").as_bytes(), &noise(&mut x, 3000))
            .expect("put");
        w.commit().expect("commit");
    }
    db.close().expect("close");
    (archive, backup, lsns)
}

/// `len` bytes that do not compress (xorshift from `x`).
fn noise(x: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x as u8
        })
        .collect()
}

/// What `directkv restore` makes is a database: `check` accepts it (it
/// used to refuse it as a backup), `Database::open` opens it, and while it
/// is open `stats` reports it; the same for a restore rolled forward from
/// the archive to its end and to an LSN.
#[test]
fn every_command_accepts_a_restored_copy() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let (archive, backup, lsns) = archived_commits(dir.path(), 40);
    let plain = dir.path().join("plain");
    run_ok(&["restore".as_ref(), backup.as_os_str(), plain.as_os_str()]);
    let out = bin()
        .arg("verify-backup")
        .arg(&plain)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "no backup to verify");
    assert!(err.contains("a database a restore made"), "{err}");
    check_ok(&plain);
    assert_eq!(open_with_stats(&plain), 0, "the backup's state: no commit");
    let to_end = dir.path().join("to-end");
    let to_lsn = dir.path().join("to-lsn");
    let lsn = lsns[24].to_string();
    for (dest, target) in [
        (&to_end, vec!["--to-end"]),
        (&to_lsn, vec!["--to-lsn", &lsn]),
    ] {
        let mut args: Vec<&std::ffi::OsStr> = vec!["restore".as_ref(), "--archive".as_ref()];
        args.push(archive.as_os_str());
        args.extend(target.iter().map(|a| std::ffi::OsStr::new(*a)));
        args.extend([backup.as_os_str(), dest.as_os_str()]);
        run_ok(&args);
        check_ok(dest);
    }
    assert_eq!(open_with_stats(&to_end), 40, "every archived commit");
    assert_eq!(open_with_stats(&to_lsn), 25, "the commits through the 25th");
    // Opened, each is an ordinary database: `check` still accepts it.
    for d in [&plain, &to_end, &to_lsn] {
        check_ok(d);
    }
}

/// A restore rolled forward through an archive of over a thousand
/// segments (the smallest size, 64 KiB) succeeds with its descriptors
/// limited to 64 (`ulimit -n 64` in the child's shell alone): it holds a
/// bounded number open however long the archive, not one per segment. So
/// does the copy's first open, by `directkv check` under the same limit.
#[test]
fn a_restore_through_a_thousand_segments_runs_with_64_descriptors() {
    const SEGMENTS_MIN: u64 = 1_000;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let (src, archive, backup) = (
        dir.path().join("db"),
        dir.path().join("archive"),
        dir.path().join("backup"),
    );
    let opts = Options {
        wal_segment_bytes: 64 << 10,
        wal_archive: Some(archive.clone()),
        durability: directkv::Durability::NoSyncNotDurable,
        ..options()
    };
    let db = Database::open(&src, opts).expect("open");
    db.backup(&backup, &directkv::BackupOptions::default())
        .expect("backup");
    // About 48 KiB of log a commit, overwriting a few keys: the log grows
    // past a thousand segments while the data file stays small.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let commits = 1_500u32;
    for i in 0..commits {
        let mut w = db.begin_write().expect("begin");
        w.put(
            format!("k/{:02}", i % 8).as_bytes(),
            &noise(&mut x, 48 << 10),
        )
        .expect("put");
        w.commit().expect("commit");
    }
    db.close().expect("close");
    let archived = std::fs::read_dir(&archive).expect("archive").count() as u64;
    assert!(archived >= SEGMENTS_MIN, "{archived} segments archived");
    let dest = dir.path().join("restored");
    let out = with_64_descriptors()
        .args(["restore", "--json", "--to-end", "--archive"])
        .arg(&archive)
        .arg(&backup)
        .arg(&dest)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let taken = report["rolled_forward"]["archived_segments"].as_u64();
    assert!(taken >= Some(SEGMENTS_MIN), "{report}");
    // The copy's first open, by `check` under the same limit, replays the
    // whole log: it too holds no descriptor per segment.
    let out = with_64_descriptors().arg("check").arg(&dest).output();
    let out = out.expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let db = Database::open(&dest, options()).expect("open");
    assert_eq!(db.begin_read().expect("read").prefix(b"k/").count(), 8);
    db.close().expect("close");
}

/// `directkv`, run by `sh -c 'ulimit -n 64 && exec …'` so that the limit
/// applies to that child alone; its arguments are to be added.
fn with_64_descriptors() -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_directkv"));
    c
}
