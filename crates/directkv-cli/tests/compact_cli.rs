//! `directkv compact`: a database most of whose keys were deleted ends
//! with a data file cut to what it holds, every key kept; `--max-steps`
//! stops a compaction short and the next run ends it; a directory that is
//! not a database is a clear error.

// Keys are big-endian numbers, so that a run of numbers is a run of keys.
#![allow(clippy::big_endian_bytes)]

use std::process::Command;

use directkv::{Database, Options};

fn compact(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("compact")
        .arg(dir)
        .arg("--json")
        .args(args)
        .output()
        .expect("run directkv compact");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn compact_cuts_the_file_and_a_short_run_is_ended_by_the_next() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let opts = Options {
        page_bytes: 4096,
        ..Options::default()
    };
    let db = Database::open(dir.path(), opts.clone()).expect("open");
    for chunk in (0..20_000u32).collect::<Vec<_>>().chunks(2000) {
        let mut w = db.begin_write().expect("begin");
        for &i in chunk {
            w.put(&i.to_be_bytes(), &[7; 200]).expect("put");
        }
        w.commit().expect("commit");
    }
    let mut w = db.begin_write().expect("begin");
    for i in 0..18_000u32 {
        w.delete(&i.to_be_bytes()).expect("delete");
    }
    w.commit().expect("commit");
    db.close().expect("close");

    let short = compact(dir.path(), &["--max-steps", "2"]);
    assert_eq!(
        short["report"]["finished"].as_bool(),
        Some(false),
        "{short}"
    );
    let done = compact(dir.path(), &[]);
    let r = &done["report"];
    assert_eq!(r["finished"].as_bool(), Some(true), "{done}");
    let (before, after) = (r["pages_before"].as_u64(), r["pages_after"].as_u64());
    assert!(after.zip(before).is_some_and(|(a, b)| a * 4 < b), "{done}");
    let len = std::fs::metadata(dir.path().join("data"))
        .expect("data")
        .len();
    assert!(
        len <= after.expect("pages") * 4096 + (1 << 20),
        "{len}: {done}"
    );

    let db = Database::open(dir.path(), opts).expect("reopen");
    db.check().expect("check");
    let r = db.begin_read().expect("read");
    assert_eq!(r.range::<std::ops::RangeFull>(..).count(), 2000);
    drop(r);
    db.close().expect("close");
}

#[test]
fn compact_refuses_a_directory_that_is_no_database() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("compact")
        .arg(dir.path())
        .output()
        .expect("run directkv compact");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("open"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").next().is_none(),
        "nothing created"
    );
}
