//! `directkv bench` end to end: every workload runs briefly against a
//! temporary directory, the JSON lines keep their schema, configurations run
//! side by side, the memory cgroup path works where the machine allows it
//! (and says why not where it does not), and charts are written; `wal`,
//! `memory` and `updates` report the same latency fields through the same
//! driver. Regression tests named after a case pin that a failed run makes
//! the command exit non-zero and that nonsense options (zero threads,
//! seconds, scale, clients or rounds; a 3k page) are refused with an error
//! naming the option; every numeric option at 0 and past its maximum, where
//! those mean nothing, is refused naming the option and its range before
//! anything is created. Nothing here asserts a speed.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

fn bench(dir: &Path, args: &[&str]) -> (bool, Vec<Value>, String) {
    common::bench_json(dir, args)
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir")
}

/// The fields of a run line and their JSON types.
fn check_run_schema(r: &Value) {
    assert_eq!(r["schema"], "directkv-bench/2", "{r}");
    assert_eq!(r["kind"], "run");
    assert!(r["error"].is_null(), "run failed: {}", r["error"]);
    for k in ["workload", "config", "unit"] {
        assert!(r[k].is_string(), "{k} in {r}");
    }
    for k in [
        "round",
        "clients",
        "cache_bytes",
        "ops",
        "rss_peak_bytes",
        "rss_end_bytes",
        "db_bytes",
        "db_cached_bytes",
        "memory_bytes",
    ] {
        assert!(r[k].is_u64(), "{k} in {r}");
    }
    for k in [
        "load_seconds",
        "open_seconds",
        "seconds",
        "ops_per_sec",
        "memory_per_cache",
    ] {
        assert!(r[k].is_f64() || r[k].is_u64(), "{k} in {r}");
    }
    check_latency(r);
    for k in ["read_bytes", "write_bytes", "rchar", "wchar"] {
        assert!(r["io"][k].is_u64(), "io.{k} in {r}");
    }
    for k in ["user_s", "sys_s"] {
        assert!(r["cpu"][k].is_f64(), "cpu.{k} in {r}");
    }
    let per_second = r["per_second_ops"].as_array().expect("per_second_ops");
    assert_eq!(
        per_second.len(),
        r["per_second_p99_us"].as_array().expect("p99 series").len()
    );
    assert_eq!(
        per_second.len(),
        r["per_second_max_us"].as_array().expect("max series").len()
    );
    // One sample per whole second the run lasted, where the device is known.
    let device = r["per_second_device_us"].as_array().expect("device series");
    assert!(device.len() <= per_second.len());
    // The device probe: a maximum for every second, or nothing where the
    // data set's files refuse direct I/O.
    let probe = r["per_second_probe_max_us"]
        .as_array()
        .expect("probe series");
    assert!(probe.is_empty() || probe.len() == per_second.len(), "{r}");
    assert!(probe.iter().all(Value::is_u64));
    assert_eq!(
        per_second.len(),
        r["per_second_checkpointing"]
            .as_array()
            .expect("checkpoint series")
            .len()
    );
    let sum: u64 = per_second.iter().map(|v| v.as_u64().expect("count")).sum();
    assert!(sum <= r["ops"].as_u64().expect("ops"));
    assert!(r["ops"].as_u64() > Some(0), "no operation completed: {r}");
    assert!(r["engine_stats"].is_object());
    assert!(r["db_bytes"].as_u64() > Some(0));
}

/// The latency fields every bench reports, the same names everywhere.
fn check_latency(r: &Value) {
    assert!(r["latency_us_mean"].is_f64(), "latency_us_mean in {r}");
    for k in [
        "latency_us_p50",
        "latency_us_p99",
        "latency_us_p999",
        "latency_us_max",
    ] {
        assert!(r[k].is_u64(), "{k} in {r}");
    }
    assert!(r["latency_us_p50"].as_u64() <= r["latency_us_p99"].as_u64());
    assert!(r["latency_us_p99"].as_u64() <= r["latency_us_p999"].as_u64());
    assert!(r["latency_us_p999"].as_u64() <= r["latency_us_max"].as_u64());
    assert!(r.get("latency").is_none(), "no nested latency object: {r}");
}

fn check_summary(s: &Value, configs: &[&str]) {
    assert_eq!(s["schema"], "directkv-bench/2");
    assert_eq!(s["kind"], "summary");
    assert_eq!(s["baseline"], configs[0]);
    let got: Vec<&str> = s["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|c| c["config"].as_str().expect("name"))
        .collect();
    assert_eq!(got, configs);
    assert_eq!(s["configs"][0]["ratio"].as_f64(), Some(1.0));
    for c in s["configs"].as_array().expect("configs") {
        assert!(
            c["latency_us_p999"].is_u64() && c["latency_us_max"].is_u64(),
            "{c}"
        );
    }
}

#[test]
fn tpcb_runs_side_by_side_and_passes_its_consistency_check() {
    let dir = scratch();
    let (ok, lines, err) = bench(
        dir.path(),
        &[
            "tpcb",
            "--scale",
            "1",
            "--clients",
            "3",
            "--seconds",
            "1",
            "--cache",
            "8M",
            "--compare",
            "direct,buffered,direct-whole-images",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(lines.len(), 4, "three runs and a summary");
    for (r, config) in lines[..3]
        .iter()
        .zip(["direct", "buffered", "direct-whole-images"])
    {
        check_run_schema(r);
        assert_eq!(r["workload"], "tpcb");
        assert_eq!(r["config"], config);
        let c = &r["consistency"];
        assert_eq!(c["ok"], true, "{c}");
        assert!(c["history_records"].as_u64() > Some(0));
        // Where a transaction's time went: every durable commit waited for
        // the WAL sync, and the waits lie inside the transactions.
        let waits = r["wait_per_op_us"].as_object().expect("wait_per_op_us");
        for cause in ["read_miss", "commit_wait", "row_lock_wait", "wal_sync_wait"] {
            assert!(waits[cause].as_f64() >= Some(0.0), "{cause} in {r}");
        }
        assert!(waits["wal_sync_wait"].as_f64() > Some(0.0), "{r}");
        let waited: f64 = waits.values().filter_map(Value::as_f64).sum();
        let mean = r["latency_us_mean"].as_f64().expect("mean latency");
        assert!(
            waited <= mean * 1.01 + 1.0,
            "waits {waited} > latency {mean}"
        );
    }
    // The first run loaded the data set, the second reused it.
    assert!(lines[0]["load_seconds"].as_f64() > Some(0.0));
    assert_eq!(lines[1]["load_seconds"].as_f64(), Some(0.0));
    // Direct I/O leaves the data out of the page cache.
    assert_eq!(lines[0]["engine_stats"]["data_io"]["kind"], "direct");
    // So the device probe could read the data set with direct I/O too.
    let probe = lines[0]["per_second_probe_max_us"]
        .as_array()
        .expect("probe");
    assert!(!probe.is_empty(), "{}", lines[0]);
    check_summary(&lines[3], &["direct", "buffered", "direct-whole-images"]);
    // TPC-B rows are padded, so their full-page images compress; the
    // `-whole-images` configuration logs them whole.
    let per_image = |r: &Value| {
        let s = &r["engine_stats"];
        let n = s["full_page_images"].as_u64().expect("images");
        assert!(n > 0, "{s}");
        s["full_page_image_bytes"].as_u64().expect("bytes") / n
    };
    assert!(per_image(&lines[0]) < 4096, "{}", per_image(&lines[0]));
    assert!(per_image(&lines[2]) >= 8192, "{}", per_image(&lines[2]));
}

/// `--clients 1,4` sweeps: every configuration runs with each count, named
/// CONFIG@CLIENTS, the configurations alternating within a count; the
/// default runs concurrent writers, `-serial` one at a time (no
/// commit-section wait is then a row lock's), and both pass the TPC-B check
/// and report their transactions' counters.
#[test]
fn tpcb_sweeps_clients_beside_one_writer_at_a_time() {
    let dir = scratch();
    let (ok, lines, err) = bench(
        dir.path(),
        &[
            "tpcb",
            "--scale",
            "1",
            "--clients",
            "1,4",
            "--seconds",
            "1",
            "--cache",
            "8M",
            "--compare",
            "direct,direct-serial",
        ],
    );
    assert!(ok, "{err}");
    let runs: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "run").collect();
    let names: Vec<&str> = runs.iter().filter_map(|r| r["config"].as_str()).collect();
    assert_eq!(
        names,
        ["direct@1", "direct-serial@1", "direct@4", "direct-serial@4"]
    );
    for r in &runs {
        assert_eq!(r["consistency"]["ok"], true, "{r}");
        let want = if r["config"].as_str().is_some_and(|c| c.ends_with("@4")) {
            4
        } else {
            1
        };
        assert_eq!(r["clients"], want, "{r}");
        let txn = r["txn_per_sec"].as_object().expect("txn_per_sec");
        assert!(txn["begun"].as_f64() > Some(0.0), "{r}");
        let waits = r["wait_per_op_us"].as_object().expect("waits");
        let serial = r["config"].as_str().is_some_and(|c| c.contains("-serial"));
        if !serial {
            assert_eq!(waits["writer_lock_wait"].as_f64(), Some(0.0), "{r}");
        }
    }
}

#[test]
fn every_ycsb_workload_runs() {
    let dir = scratch();
    for w in ["a", "b", "c", "d", "e", "f"] {
        for dist in ["zipfian", "uniform"] {
            let (ok, lines, err) = bench(
                dir.path(),
                &[
                    "ycsb",
                    "--workload",
                    w,
                    "--distribution",
                    dist,
                    "--keys",
                    "3000",
                    "--clients",
                    "2",
                    "--seconds",
                    "0.3",
                    "--cache",
                    "4M",
                ],
            );
            assert!(ok, "ycsb {w} {dist}: {err}");
            check_run_schema(&lines[0]);
            assert_eq!(lines[0]["workload"], format!("ycsb-{w}-{dist}"));
            check_summary(&lines[1], &["direct"]);
        }
    }
}

#[test]
fn fill_read_and_scan_run() {
    let dir = scratch();
    for args in [
        &["fill", "--order", "seq", "--keys", "5000", "--batch", "50"][..],
        &["fill", "--order", "random", "--keys", "5000"][..],
        &["read", "--keys", "5000"][..],
        &["read", "--keys", "5000", "--distribution", "zipfian"][..],
        &["scan", "--keys", "5000", "--length", "50"][..],
        &[
            "scan",
            "--keys",
            "5000",
            "--length",
            "50",
            "--compare",
            "direct-threads,direct-no-aio",
        ][..],
    ] {
        let mut all = args.to_vec();
        all.extend(["--clients", "2", "--seconds", "0.3", "--cache", "4M"]);
        let (ok, lines, err) = bench(dir.path(), &all);
        assert!(ok, "{args:?}: {err}");
        check_run_schema(&lines[0]);
        if args.contains(&"direct-threads,direct-no-aio") {
            // The backend a configuration names is the one its engine used.
            let backends: Vec<_> = lines
                .iter()
                .filter_map(|l| l["engine_stats"]["async_io"]["backend"].as_str())
                .collect();
            if std::env::var(directkv::internals::io::IO_BACKEND_ENV).is_err() {
                assert_eq!(backends, ["threads", "off"], "{lines:?}");
            }
        }
        if args[0] == "fill" {
            // A fill stops when every key is stored (or at the deadline).
            assert!(lines[0]["ops"].as_u64() <= Some(5000));
            assert_eq!(lines[0]["unit"], "keys");
        }
    }
}

#[test]
fn sync_methods_are_compared_as_configurations() {
    let dir = scratch();
    let (ok, lines, err) = bench(
        dir.path(),
        &[
            "read",
            "--keys",
            "2000",
            "--seconds",
            "0.3",
            "--clients",
            "1",
            "--cache",
            "4M",
            "--compare-sync",
            "fdatasync,fdatasync+direct",
            "--rounds",
            "2",
        ],
    );
    assert!(ok, "{err}");
    let configs = ["direct", "direct/fdatasync", "direct/fdatasync+direct"];
    // Two rounds alternate the three configurations.
    let order: Vec<&str> = lines[..6]
        .iter()
        .map(|r| r["config"].as_str().expect("config"))
        .collect();
    assert_eq!(order, [configs, configs].concat());
    assert_eq!(lines[1]["engine_stats"]["wal_sync"]["direct"], false);
    assert_eq!(lines[2]["engine_stats"]["wal_sync"]["direct"], true);
    check_summary(&lines[6], &configs);
}

#[test]
fn a_memory_limit_runs_inside_a_cgroup_or_says_why_not() {
    let dir = scratch();
    let (ok, lines, err) = bench(
        dir.path(),
        &[
            "read",
            "--keys",
            "20000",
            "--seconds",
            "0.5",
            "--clients",
            "2",
            "--memory-limit",
            "96M",
            "--cache",
            "32M",
        ],
    );
    if !ok {
        assert!(
            err.contains("memory cgroup") || err.contains("cgroup"),
            "a failure must name the cgroup problem: {err}"
        );
        eprintln!("skipped: this machine cannot make a memory cgroup: {err}");
        return;
    }
    check_run_schema(&lines[0]);
    assert_eq!(lines[0]["memory_limit_bytes"].as_u64(), Some(96 << 20));
    let peak = lines[0]["cgroup_peak_bytes"]
        .as_u64()
        .expect("the cgroup's peak is reported");
    assert!(peak > 0 && peak <= 96 << 20, "peak {peak}");
}

#[test]
fn charts_are_written() {
    let dir = scratch();
    let plots = dir.path().join("charts");
    let (ok, _, err) = bench(
        dir.path(),
        &[
            "read",
            "--keys",
            "2000",
            "--seconds",
            "1.2",
            "--clients",
            "1",
            "--cache",
            "4M",
            "--compare",
            "direct,buffered",
            "--plot",
            plots.to_str().expect("utf-8 path"),
        ],
    );
    assert!(ok, "{err}");
    for f in [
        "throughput.svg",
        "latency.svg",
        "slowest.svg",
        "compare.svg",
    ] {
        let text = std::fs::read_to_string(plots.join(f)).expect(f);
        assert!(text.starts_with("<svg") && text.contains("direct"), "{f}");
    }
}

#[test]
fn bad_configurations_are_refused_clearly() {
    let dir = scratch();
    let (ok, _, err) = bench(dir.path(), &["read", "--compare", "direct,nosuch"]);
    assert!(!ok);
    assert!(err.contains("unknown configuration \"nosuch\""), "{err}");
    if !cfg!(feature = "peers") {
        let (ok, _, err) = bench(dir.path(), &["read", "--compare", "rocksdb"]);
        assert!(!ok);
        assert!(err.contains("--features peers"), "{err}");
    }
    let (ok, _, err) = bench(
        dir.path(),
        &["read", "--cache", "64M", "--memory-limit", "32M"],
    );
    assert!(!ok);
    assert!(err.contains("must be below --memory-limit"), "{err}");
    // More keys than memory can sort for the load: an error, not a panic.
    let (ok, _, err) = bench(
        dir.path(),
        &["read", "--keys", &u64::MAX.to_string(), "--seconds", "0.3"],
    );
    assert!(!ok);
    assert!(err.contains("--keys") && !err.contains("panicked"), "{err}");
}

#[test]
fn concurrent_writers_are_measured_for_each_thread_count() {
    let dir = scratch();
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(["bench", "writers", "--threads", "1,2", "--seconds", "0.3"])
        .args(["--file-size", "16M", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let shape: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["config"].as_str().expect("config").to_string(),
                r["threads"].as_u64().expect("n"),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("direct", 1),
            ("direct", 2),
            ("buffered", 1),
            ("buffered", 2)
        ]
        .map(|(io, n)| (io.to_string(), n))
    );
    for r in &rows {
        assert!(r["writes_per_sec"].as_f64() > Some(0.0));
    }
    assert_eq!(rows[0]["scaling"].as_f64(), Some(1.0));
    // The scratch file is removed.
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

/// Runs `directkv ARGS` (no `--dir`, no `--json` added).
fn directkv(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_directkv"))
        .args(args)
        .output()
        .expect("run directkv")
}

/// Asserts `args` are refused before anything runs, with an error that
/// names every one of `words`.
fn refused(args: &[&str], words: &[&str]) {
    let out = directkv(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted");
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
    }
}

#[test]
fn tpcb_cache_1_run_fails_and_the_command_exits_non_zero() {
    let dir = scratch();
    let (ok, lines, _) = bench(
        dir.path(),
        &[
            "tpcb",
            "--scale",
            "1",
            "--cache",
            "1",
            "--seconds",
            "0.3",
            "--clients",
            "1",
        ],
    );
    assert!(!ok, "a failed configuration must fail the command");
    // What could be printed still is: the failed run, then the summary.
    assert!(lines[0]["error"].is_string(), "{}", lines[0]);
    assert_eq!(lines[0]["config"], "direct");
    assert_eq!(lines[1]["kind"], "summary");
    assert_eq!(lines[1]["configs"][0]["failed_rounds"], 1);
}

#[test]
fn memory_limit_1k_exits_non_zero() {
    let dir = scratch();
    let (ok, _, err) = bench(
        dir.path(),
        &[
            "read",
            "--keys",
            "1000",
            "--seconds",
            "0.3",
            "--memory-limit",
            "1K",
        ],
    );
    assert!(!ok, "{err}");
}

#[test]
fn wal_threads_0_is_refused() {
    refused(
        &["bench", "wal", "--threads", "0"],
        &["--threads", "at least 1"],
    );
    refused(&["bench", "wal", "--threads", "1,0,4"], &["--threads"]);
    refused(&["bench", "wal", "--threads", ""], &["--threads"]);
    refused(
        &["bench", "wal", "--record-sizes", "0"],
        &["--record-sizes"],
    );
    refused(&["bench", "writers", "--threads", "0"], &["--threads"]);
    refused(&["bench", "wal", "--methods", "nosuch"], &["nosuch"]);
}

#[test]
fn page_size_3k_is_refused() {
    refused(
        &["bench", "read", "--page-size", "3k"],
        &["--page-size", "4k, 8k or 16k"],
    );
}

#[test]
fn nonsense_bench_options_are_refused() {
    refused(
        &["bench", "read", "--seconds", "0"],
        &["--seconds", "above 0"],
    );
    refused(
        &["bench", "read", "--seconds=-1"],
        &["--seconds", "above 0"],
    );
    refused(&["bench", "--seconds", "0"], &["--seconds"]);
    refused(
        &["bench", "tpcb", "--scale", "0"],
        &["--scale", "at least 1"],
    );
    refused(&["bench", "read", "--clients", "0"], &["--clients"]);
    refused(&["bench", "read", "--rounds", "0"], &["--rounds"]);
    refused(&["bench", "read", "--keys", "0"], &["--keys"]);
    refused(&["bench", "read", "--cache", "0"], &["--cache", "above 0"]);
    refused(&["bench", "scan", "--length", "0"], &["--length"]);
    refused(&["bench", "fill", "--batch", "0"], &["--batch"]);
    refused(&["bench", "wal", "--seconds", "0"], &["--seconds"]);
    refused(&["bench", "memory", "--ratio", "0"], &["--ratio"]);
    refused(&["bench", "updates", "--keys", "0"], &["--keys"]);
    refused(
        &["bench", "writers", "--block-size", "1000"],
        &["multiple of 512"],
    );
}

/// `directkv bench ARGS --dir DIR/bench` exits non-zero with an error naming
/// `option` and `range`, and creates nothing (the directory stays absent).
fn refused_before_anything(args: &[&str], option: &str, range: &str) {
    let dir = scratch();
    let bench_dir = dir.path().join("bench");
    let out = Command::new(env!("CARGO_BIN_EXE_directkv"))
        .arg("bench")
        .args(args)
        .arg("--dir")
        .arg(&bench_dir)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was accepted: {err}");
    assert!(err.contains(option), "{args:?}: {option:?} not in {err}");
    assert!(err.contains(range), "{args:?}: {range:?} not in {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        !bench_dir.exists(),
        "{args:?} created {}",
        bench_dir.display()
    );
}

/// The ranges the errors name.
const VALUE_SIZE: &str = "at least 8 and at most 67108864";
const SCALE: &str = "at least 1 and at most 42949";
const THREADS: &str = "at least 1 and at most 4096";
const KEYS: &str = "at least 1 and at most 10000000000";
const ROUNDS: &str = "at least 1 and at most 1000";
const BATCH: &str = "at least 1 and at most 1000000";
const RECORD: &str = "at least 1 and at most 1048576";
const TIMEOUT: &str = "at least 1 and at most 86400";
const ABOVE_0: &str = "above 0";

/// Subcommand, option, values out of its range, the range the error names.
type RangeCase = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
);

/// Every numeric bench option, at 0 and past its maximum where those mean
/// nothing.
const OUT_OF_RANGE: &[RangeCase] = &[
    ("tpcb", "--value-size", &["0", "7", "67108865"], VALUE_SIZE),
    ("read", "--value-size", &["0", "67108865"], VALUE_SIZE),
    ("memory", "--value-size", &["0", "67108865"], VALUE_SIZE),
    ("updates", "--value-size", &["0", "67108865"], VALUE_SIZE),
    ("tpcb", "--scale", &["0", "42950"], SCALE),
    ("recovery", "--scale", &["0", "42950"], SCALE),
    ("read", "--clients", &["0", "4097", "1,4097"], THREADS),
    ("recovery", "--clients", &["0", "4097"], THREADS),
    ("wal", "--threads", &["0", "4097"], THREADS),
    ("writers", "--threads", &["0", "4097"], THREADS),
    ("fill", "--keys", &["0", "10000000001"], KEYS),
    ("updates", "--keys", &["0", "10000000001"], KEYS),
    ("read", "--rounds", &["0", "1001"], ROUNDS),
    ("wal", "--rounds", &["0", "1001"], ROUNDS),
    ("fill", "--batch", &["0", "1000001"], BATCH),
    ("scan", "--length", &["0", "1000001"], BATCH),
    ("ycsb", "--scan-length", &["0", "1000001"], BATCH),
    ("wal", "--record-sizes", &["0", "1048577"], RECORD),
    ("recovery", "--at", &["0", "2.5"], "above 0 and at most 2"),
    ("recovery", "--timeout", &["0", "86401"], TIMEOUT),
    ("read", "--memory-limit", &["0"], ABOVE_0),
    ("read", "--cache", &["0"], ABOVE_0),
    ("read", "--checkpoint-wal", &["0"], ABOVE_0),
    ("recovery", "--cache", &["0"], ABOVE_0),
    ("recovery", "--checkpoint-wal", &["0"], ABOVE_0),
    ("memory", "--cache", &["0"], ABOVE_0),
    ("memory", "--ratio", &["0"], ABOVE_0),
    ("updates", "--checkpoint-every", &["-1"], "0 or more"),
    ("writers", "--block-size", &["0"], ABOVE_0),
    ("writers", "--file-size", &["0"], ABOVE_0),
    ("ycsb", "--seconds", &["0"], ABOVE_0),
];

/// `SUB --OPT=VALUE` (so that a negative value is not taken for a flag),
/// and for the key-value workloads options valid and small otherwise, so a
/// value wrongly accepted ends quickly in a run that exits 0.
fn out_of_range_args(sub: &str, opt: &str, value: &str) -> Vec<String> {
    let small = [
        ("--seconds", "0.3"),
        ("--keys", "1000"),
        ("--clients", "1"),
        ("--scale", "1"),
    ];
    let mut args = vec![sub.to_string(), format!("{opt}={value}")];
    if ["tpcb", "read", "fill", "scan", "ycsb"].contains(&sub) {
        for (o, v) in small {
            if o != opt && (o != "--scale" || sub == "tpcb") {
                args.extend([o.to_string(), v.to_string()]);
            }
        }
    }
    args
}

#[test]
fn every_bench_option_out_of_range_is_refused_naming_its_range() {
    for (sub, opt, values, range) in OUT_OF_RANGE {
        for v in *values {
            let args = out_of_range_args(sub, opt, v);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            refused_before_anything(&args, opt, range);
        }
    }
}

/// Runs `directkv bench SUB ARGS --json --dir DIR`; every line.
fn sub_bench(sub: &str, dir: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec![sub];
    all.extend(args);
    let (ok, lines, err) = bench(dir, &all);
    assert!(ok, "bench {sub}: {err}");
    assert!(!lines.is_empty(), "bench {sub} printed nothing");
    for l in &lines {
        assert_eq!(l["schema"], "directkv-bench/2", "{l}");
        assert_eq!(l["kind"], "run", "{l}");
        assert_eq!(l["workload"], sub, "{l}");
        assert!(l["error"].is_null(), "{l}");
        assert_eq!(l["round"], 1, "{l}");
    }
    lines
}

#[test]
fn wal_memory_and_updates_report_the_same_latency_fields() {
    let dir = scratch();
    let wal = sub_bench(
        "wal",
        dir.path(),
        &[
            "--threads",
            "1,2",
            "--methods",
            "fdatasync",
            "--record-sizes",
            "100",
            "--seconds",
            "0.2",
        ],
    );
    assert_eq!(wal.len(), 2, "one row per thread count");
    for (r, threads) in wal.iter().zip([1, 2]) {
        assert_eq!(r["config"], "fdatasync");
        assert_eq!(r["threads"], threads);
        assert!(r["commits"].as_u64() > Some(0), "{r}");
        check_latency(r);
    }
    assert!(wal[0]["ratio_to_one_thread"].is_null());
    let updates = sub_bench(
        "updates",
        dir.path(),
        &["--keys", "2000", "--seconds", "0.2", "--cache", "4M"],
    );
    check_latency(&updates[0]);
    assert!(updates[0]["commits"].as_u64() > Some(0));
    let memory = sub_bench(
        "memory",
        dir.path(),
        &["--cache", "4M", "--ratio", "1", "--seconds", "0.2"],
    );
    let modes: Vec<&str> = memory.iter().filter_map(|r| r["config"].as_str()).collect();
    assert_eq!(modes, ["direct", "buffered"]);
    assert!(memory[0]["reads_per_sec"].as_f64() > Some(0.0));
    // Every scratch directory is removed.
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}
