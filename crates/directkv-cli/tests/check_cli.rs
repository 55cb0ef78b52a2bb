//! `directkv check`: opens a database left without a checkpoint, reports the
//! replay (pages from full images, none read), proves the tree, and with
//! `--checkpoint` leaves nothing for the next open; a directory that is not a
//! database is a clear error that creates nothing.

use std::process::Command;

mod common;

fn check(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("check")
        .arg(dir)
        .args(args)
        .output()
        .expect("run directkv check")
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn check_reports_the_replay_and_proves_the_tree() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let db = common::database_with_commits(dir.path(), 300);
    // Dropped, not closed: the next open replays the log.
    drop(db);

    let doc = json(&check(dir.path(), &["--json"]));
    let r = &doc["recovery"];
    assert_eq!(r["transactions"].as_u64(), Some(300), "{doc}");
    assert!(r["wal_bytes"].as_u64() > Some(0), "{doc}");
    assert_eq!(r["pages_read"].as_u64(), Some(0), "{doc}");
    assert!(r["pages_from_images"].as_u64() > Some(0), "{doc}");
    assert_eq!(doc["check"]["keys"].as_u64(), Some(300), "{doc}");
    assert_eq!(doc["checkpointed"].as_bool(), Some(false));

    // The open that replayed ended with a checkpoint: the next replays
    // nothing.
    let out = check(dir.path(), &["--recover-only", "--checkpoint"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no transaction to replay"), "{text}");
    assert!(text.contains("checkpointed"), "{text}");
    assert!(!text.contains("check: ok"), "{text}");
    let doc = json(&check(dir.path(), &["--json"]));
    assert_eq!(doc["recovery"]["transactions"].as_u64(), Some(0), "{doc}");
    assert_eq!(doc["check"]["keys"].as_u64(), Some(300), "{doc}");
    let out = check(dir.path(), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no transaction to replay"), "{text}");
    assert!(text.contains("check: ok"), "{text}");
}

#[test]
fn check_refuses_a_directory_that_is_not_a_database() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let out = check(dir.path(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("create_if_missing is off"), "{err}");
    assert!(!dir.path().join("CONTROL").exists());
    // Nothing at all is left behind, not even a LOCK (issue 17, case 6).
    assert_eq!(std::fs::read_dir(dir.path()).expect("read_dir").count(), 0);
}

#[test]
fn issue17_check_of_a_missing_path_creates_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let missing = dir.path().join("mistyped").join("db");
    let out = check(&missing, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such directory"), "{err}");
    assert!(!dir.path().join("mistyped").exists(), "check made the path");
}

/// A crashed database of 50 commits (the handle dropped: the drop seals
/// the log), its last commit damaged with 8 bytes in its payload, and its
/// seal zeroed first when `unseal`. Returns the damaged commit's LSN.
fn damaged_last_commit(dir: &std::path::Path, unseal: bool) -> directkv::Lsn {
    use directkv::internals::io::OsStorage;
    use directkv::internals::pages::ControlFile;
    use directkv::internals::wal::WalReader;
    use directkv::internals::wal::{segment_file_name, Layout};
    use std::os::unix::fs::FileExt;
    drop(common::database_with_commits(dir, 50));
    let wal = dir.join("wal");
    let redo = ControlFile::open(&OsStorage::default(), &dir.join("CONTROL"))
        .expect("CONTROL")
        .current()
        .redo_lsn;
    let segment_bytes = directkv::Options::default().wal_segment_bytes;
    let mut reader = WalReader::new(OsStorage::default(), &wal, segment_bytes, None, redo);
    let mut last = None;
    while let Some(rec) = reader.next_record().expect("read") {
        if !rec.is_framing() {
            last = Some((rec.lsn, rec.payload.len()));
        }
    }
    let (lsn, len) = last.expect("records");
    let seal = reader.last_flush_header().expect("a flush");
    assert!(seal > lsn, "the drop sealed the log");
    let layout = Layout { segment_bytes };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(wal.join(segment_file_name(layout.segment_of(lsn))))
        .expect("segment");
    assert_eq!(layout.segment_of(seal), layout.segment_of(lsn));
    if unseal {
        // The log held zeros there before the seal: a crash before it.
        f.write_all_at(&[0; 512], layout.file_offset(seal))
            .expect("unseal");
    }
    let at = layout.file_offset(lsn) + 16 + len as u64 / 2;
    f.write_all_at(&[0x5a; 8], at).expect("flip");
    lsn
}

/// Damage in the log's last flush after a crash that came before its seal
/// reads as a torn write of it: `check` opens, and says what was discarded
/// and from where.
#[test]
fn check_reports_a_discarded_torn_tail() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let lsn = damaged_last_commit(dir.path(), true);
    let out = check(dir.path(), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("from LSN {lsn} were discarded")) && text.contains("torn tail"),
        "{text}"
    );
    assert!(text.contains("check: ok"), "{text}");
}

/// Issue 43: damage in a sealed last flush is corruption: `check` fails,
/// naming the segment, the byte offset and the LSN, and changes nothing.
#[test]
fn check_fails_on_damage_in_a_sealed_last_commit() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let lsn = damaged_last_commit(dir.path(), false);
    let out = check(dir.path(), &[]);
    assert!(!out.status.success(), "check passed a damaged log");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt")
            && err.contains(".seg")
            && err.contains(&format!("invalid WAL record at LSN {lsn}"))
            && err.contains("not a torn tail"),
        "{err}"
    );
}

/// Issue 19: `check` reports the mode, owner and kind of every path of the
/// database, warns about those others may read, and refuses one others may
/// write unless told to accept it.
#[test]
fn issue19_check_reports_modes_owners_and_warnings() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    common::database_with_commits(dir.path(), 10)
        .close()
        .expect("close");
    let data = dir.path().join("data");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).expect("chmod");

    let doc = json(&check(dir.path(), &["--json"]));
    let files = doc["check"]["files"].as_array().expect("files");
    let entry = files
        .iter()
        .find(|f| f["path"].as_str() == data.to_str())
        .expect("data is listed");
    assert_eq!(entry["mode"].as_str(), Some("0644"), "{doc}");
    assert_eq!(entry["kind"].as_str(), Some("file"), "{doc}");
    assert!(entry["uid"].is_u64() && entry["gid"].is_u64(), "{doc}");
    // The temporary directory itself may be 0755 too: look for data only.
    let warned = doc["readable_by_others"].as_array().expect("warnings");
    assert!(warned.iter().any(|p| p.as_str() == data.to_str()), "{doc}");
    assert!(!warned
        .iter()
        .any(|p| p.as_str() == dir.path().join("CONTROL").to_str()));

    let out = check(dir.path(), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("files (mode, owner"), "{text}");
    assert!(text.contains("is readable by others"), "{text}");

    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let out = check(dir.path(), &["--json"]);
    assert!(!out.status.success(), "a world-writable file is refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0666") && err.contains("data"), "{err}");
    let doc = json(&check(
        dir.path(),
        &["--json", "--accept-writable-by-others"],
    ));
    let writable = doc["check"]["writable_by_others"].as_array().expect("list");
    assert_eq!(writable.len(), 1, "{doc}");
}
