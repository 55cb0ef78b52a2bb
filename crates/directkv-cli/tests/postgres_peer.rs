//! PostgreSQL as a bench peer (issue 22, item 4), end to end through the
//! same code path as `directkv bench tpcb --compare postgres`: a tiny run
//! (scale 1, 2 clients, 2 s) makes a scratch cluster, loads it with
//! `pgbench -i`, runs pgbench, and reports one row. The test pins that the
//! figures parsed from pgbench are sane (tps above 0, p50 ≤ p99 ≤ max), that
//! the transactions counted from the per-transaction log are the ones
//! pgbench says it processed (and the log files on disk hold that many
//! lines), that the TPC-B check passed, and that no server is left running.
//! Where PostgreSQL's programs are not installed the test says so and passes
//! (as the bench skips the configuration); the alias `pgbench` is accepted
//! either way. It takes about 5 s.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod common;

/// Where the bench looks first; then `PATH`.
const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

/// Whether the bench finds PostgreSQL's programs, as it looks for them.
fn postgres_installed() -> bool {
    let dirs = match std::env::var_os("DIRECTKV_POSTGRES_BIN") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let mut dirs = vec![PathBuf::from(BIN_DIR)];
            if let Some(path) = std::env::var_os("PATH") {
                dirs.extend(std::env::split_paths(&path));
            }
            dirs
        }
    };
    dirs.iter().any(|d| {
        ["initdb", "pg_ctl", "pgbench", "psql"]
            .iter()
            .all(|t| d.join(t).is_file())
    })
}

/// `directkv bench tpcb` with `args`; success, the JSON lines, stderr.
fn bench(dir: &Path, args: &[&str]) -> (bool, Vec<Value>, String) {
    common::bench_json(dir, &[&["tpcb"], args].concat())
}

/// A scratch directory the `postgres` user can reach when the test runs as
/// root: under the system's temporary directory (a checkout may sit where
/// only its owner can go, as under `/root`), and opened up (temporary
/// directories are made private to their owner); its path is short enough
/// for the server's socket.
fn scratch() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// Lines of every pgbench log file of the last run under `dir`.
fn log_lines(dir: &Path) -> u64 {
    let run = dir.join("postgres-run");
    std::fs::read_dir(&run)
        .expect("the run's log directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("pgbench_log."))
        })
        .map(|p| std::fs::read_to_string(p).expect("log").lines().count() as u64)
        .sum()
}

#[test]
fn postgres_peer_runs_pgbench_and_reports_sane_figures() {
    if !postgres_installed() {
        eprintln!("skipped: PostgreSQL's programs are neither in {BIN_DIR} nor on PATH");
        return;
    }
    let tmp = scratch();
    let dir = tmp.path().join("bench");
    let args = ["--scale", "1", "--clients", "2", "--seconds", "2"];
    let (ok, lines, err) = bench(&dir, &[&args[..], &["--compare", "pgbench"]].concat());
    assert!(ok, "bench failed: {err}");
    let run = lines
        .iter()
        .find(|l| l["kind"] == "run")
        .expect("a run line");
    assert!(run["error"].is_null(), "run failed: {}", run["error"]);
    assert_eq!(run["config"], "postgres", "pgbench is another name for it");
    assert!(run["ops_per_sec"].as_f64().expect("tps") > 0.0, "{run}");
    let us = |k: &str| run[k].as_u64().unwrap_or_else(|| panic!("{k} in {run}"));
    assert!(us("latency_us_p50") > 0);
    assert!(us("latency_us_p50") <= us("latency_us_p99"), "{run}");
    assert!(us("latency_us_p99") <= us("latency_us_max"), "{run}");
    let ops = us("ops");
    assert!(ops > 0);
    assert_eq!(
        Some(ops),
        run["engine_stats"]["pgbench_transactions"].as_u64(),
        "the log's transactions are the ones pgbench processed: {run}"
    );
    assert_eq!(ops, log_lines(&dir), "one log line per transaction");
    let per_second: u64 = run["per_second_ops"]
        .as_array()
        .expect("per second")
        .iter()
        .map(|n| n.as_u64().expect("count"))
        .sum();
    assert!(per_second <= ops && per_second > 0, "{run}");
    assert_eq!(run["consistency"]["ok"], true, "TPC-B check: {run}");
    let cluster = dir.join("postgres-tpcb-s1");
    assert!(cluster.join("PG_VERSION").is_file(), "the cluster is kept");
    assert!(
        !cluster.join("postmaster.pid").exists(),
        "the server was stopped"
    );
}

/// Regression: where PostgreSQL is not installed its configuration is
/// skipped with a message and the others run; the command does not fail,
/// also when nothing is left to run.
#[test]
fn postgres_absent_is_skipped_not_failed() {
    let tmp = scratch();
    let missing = tmp.path().join("no-postgres-here");
    let run = |compare: &str| {
        Command::new(env!("CARGO_BIN_EXE_directkv"))
            .args(["bench", "tpcb", "--scale", "1", "--clients", "1"])
            .args(["--seconds", "0.3", "--compare", compare, "--json"])
            .arg("--dir")
            .arg(tmp.path().join("bench"))
            .env("DIRECTKV_POSTGRES_BIN", &missing)
            .output()
            .expect("run directkv bench")
    };
    let out = run("direct,postgres");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("skipping postgres"), "{err}");
    let configs: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["kind"] == "run")
        .map(|l| l["config"].as_str().expect("config").to_string())
        .collect();
    assert_eq!(configs, ["direct"]);
    let out = run("pgbench");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipping pgbench"));
}

#[test]
fn postgres_runs_only_tpcb() {
    let tmp = scratch();
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["bench", "read", "--compare", "postgres", "--keys", "10"])
        .arg("--dir")
        .arg(tmp.path())
        .output()
        .expect("run directkv bench");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("runs only tpcb"), "{err}");
}
