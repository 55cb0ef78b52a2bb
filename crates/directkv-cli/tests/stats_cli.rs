//! `directkv stats`: another process reads the counters an open database
//! publishes, stall histograms included; a closed database says so.

use std::process::Command;

mod common;

fn stats(dir: &std::path::Path, json: bool) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_directkv"));
    c.arg("stats").arg(dir);
    if json {
        c.arg("--json");
    }
    c.output().expect("run directkv stats")
}

#[test]
fn an_open_database_publishes_its_stats() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let db = common::database_with_commits(dir.path(), 50);
    // The cleaner publishes about once a second; wait for a copy that has
    // seen the commits (bounded, so a broken publisher fails the test).
    let mut doc = serde_json::Value::Null;
    for _ in 0..300 {
        let out = stats(dir.path(), true);
        if out.status.success() {
            doc = serde_json::from_slice(&out.stdout).expect("json");
            if doc["stats"]["commits"].as_u64() >= Some(50) {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(doc["pid"].as_u64(), Some(u64::from(std::process::id())));
    assert_eq!(doc["stats"]["commits"].as_u64(), Some(50));
    let h = &doc["stats"]["stalls"]["histograms"];
    for cause in [
        "wal_sync_wait",
        "writer_lock_wait",
        "tree_lock_wait",
        "read_miss",
        "free_frame_wait",
    ] {
        assert_eq!(
            h[cause]["buckets"].as_array().map(Vec::len),
            Some(directkv::StallHistogram::BUCKETS),
            "{cause}"
        );
        assert_eq!(
            doc["stats"]["stalls"][cause], h[cause]["count"],
            "the count is the histogram's total"
        );
        assert!(h[cause]["waits"].as_u64() >= h[cause]["count"].as_u64());
    }
    // Every durable commit waited for the WAL once.
    assert_eq!(h["wal_sync_wait"]["waits"].as_u64(), Some(50));
    let human = stats(dir.path(), false);
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("then the stalls over 1 ms"), "{text}");
    assert!(text.contains("read_miss"), "{text}");
    // The text names the I/O path of the data file and the WAL's sync method
    // (issue 17, case 9).
    let io_path = doc["stats"]["data_io"]["kind"].as_str().expect("data_io");
    assert!(
        text.contains(&format!(
            "I/O path   data file {}",
            io_path.split('_').next().unwrap_or("")
        )),
        "{text}"
    );
    assert!(text.contains("WAL sync"), "{text}");
    // Every request passed the scheduler: 50 commits made at least 50 WAL
    // requests (a write and a sync each), and the text shows them.
    let wal_requests = doc["stats"]["io_scheduler"]["requests"][0].as_u64();
    assert!(wal_requests >= Some(50), "{wal_requests:?}");
    assert!(text.contains("requests by class: wal "), "{text}");
    // Each of the 50 one-at-a-time durable commits needed a flush of its
    // own, and the text gives the flushes.
    let flushes = doc["stats"]["wal"]["flushes"]
        .as_u64()
        .expect("wal.flushes");
    assert!(flushes >= 50, "{flushes}");
    assert!(doc["stats"]["wal"]["flush_us"].as_u64() > Some(0));
    assert!(text.contains(" flushes, "), "{text}");
    // An orderly close withdraws them.
    drop(db);
    let out = stats(dir.path(), false);
    assert!(!out.status.success());
}

#[test]
fn a_closed_database_says_it_is_not_open() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let out = stats(dir.path(), false);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not open in any process"), "{err}");
}

#[test]
fn issue17_an_open_database_that_does_not_publish_is_not_called_closed() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let opts = directkv::Options {
        publish_stats: false,
        ..directkv::Options::default()
    };
    let db = directkv::Database::open(dir.path(), opts).expect("open");
    let out = stats(dir.path(), false);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is open (held by pid"), "{err}");
    assert!(err.contains("does not publish"), "{err}");
    drop(db);
    let err = String::from_utf8_lossy(&stats(dir.path(), false).stderr).into_owned();
    assert!(err.contains("not open in any process"), "{err}");
}

#[test]
fn issue17_stats_of_a_missing_path_creates_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let missing = dir.path().join("no-such-db");
    let out = stats(&missing, false);
    assert!(!out.status.success());
    assert!(!missing.exists(), "stats made the path");
}

/// A watch interval no clock holds is refused when parsed, before any
/// printout, not a panic after the first.
#[test]
fn a_watch_interval_out_of_range_is_refused() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    for watch in ["inf", "1e20", "NaN", "0"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_directkv"))
            .args(["stats", "--watch", watch])
            .arg(dir.path())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "--watch {watch}: a usage error");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("not a number of seconds"),
            "--watch {watch}: {err}"
        );
    }
}
