//! `directkv bench recovery` on a small TPC-B load: the load is killed near
//! its checkpoint distance, the reopen replays what the crash left, and the
//! report's figures hang together. How little the reopen replays is not
//! bounded here: the stats the kill goes by are published once a second,
//! and a checkpoint that ends between the last of them and the kill moves
//! the redo point past most of that log. How much it replays is: new
//! transactions wait once the log since the redo point reaches the hard
//! limit.

use std::process::Command;

#[test]
fn bench_recovery_kills_reopens_and_reports() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["bench", "recovery", "--scale", "1", "--clients", "2"])
        .args([
            "--cache",
            "16M",
            "--checkpoint-wal",
            "4M",
            "--timeout",
            "120",
        ])
        .arg("--dir")
        .arg(dir.path())
        .arg("--json")
        .output()
        .expect("run directkv bench recovery");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let r = &doc["recovery"];
    let transactions = r["transactions"].as_u64().expect("transactions");
    assert!(transactions > 0, "the crash left log to replay: {doc}");
    const DISTANCE: u64 = 4 << 20;
    let wal_bytes = r["wal_bytes"].as_u64().expect("wal_bytes");
    // Every TPC-B transaction logs changes to four pages and a commit
    // record; two clients' transactions under way pass the limit by little.
    assert!(wal_bytes >= transactions * 64, "{doc}");
    assert!(
        wal_bytes <= directkv::internals::engine::WAL_HARD_LIMIT_FACTOR * DISTANCE + (1 << 20),
        "the replay starts at the redo point, within the hard limit: {doc}"
    );
    assert!(
        doc["killed_at_wal_since_redo_bytes"].as_u64() >= Some(DISTANCE * 9 / 10),
        "killed once the log since the redo point reached 90% of the distance: {doc}"
    );
    assert!(doc["commit_rate"].as_f64() > Some(0.0), "{doc}");
    let ratio = doc["replay_over_commit"].as_f64().expect("ratio");
    assert!(ratio > 0.0, "{doc}");
    assert!(
        doc["open_seconds"].as_f64() >= doc["replay_seconds"].as_f64(),
        "the replay is part of the open: {doc}"
    );
}
