//! `directkv backup`, `verify-backup` and `restore`, and what a killed
//! backup leaves: the backup process is killed (SIGKILL) at spread-out
//! moments; the source still opens, checks and holds every key, and a
//! backup without its completion marker is refused by open, verify and
//! restore, while a completed one verifies and restores to every key.

use std::path::Path;
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
    // The last one is left to finish.
    for (i, delay_ms) in [30u64, 120, 250, 400, 700, u64::MAX]
        .into_iter()
        .enumerate()
    {
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
