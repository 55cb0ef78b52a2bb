//! What a benchmark run reports, and how: a table on the terminal, JSON lines,
//! and SVG charts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::latency::Latency;
use super::output::{col, mib, ms, Column, Line, TableRow, SCHEMA};
use super::sys::{Cpu, IoCounters};
use super::workload::Consistency;

/// One configuration's run of a key-value workload: the figures of one JSON
/// line of `--json`, after the fields every bench's lines have.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    /// Client threads.
    pub clients: u64,
    /// What an operation is (`transactions`, `operations`, `keys`, `scans`).
    pub unit: String,
    /// Engine cache size in bytes.
    pub cache_bytes: u64,
    /// Seconds spent loading (0 when an earlier load was reused).
    pub load_seconds: f64,
    /// Seconds the engine took to open before the run (recovery included:
    /// runs end without a checkpoint, as a crash would).
    pub open_seconds: f64,
    /// Measured seconds.
    pub seconds: f64,
    /// Operations completed.
    pub ops: u64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Latency of one operation (one transaction, read or scan).
    #[serde(flatten)]
    pub latency: Latency,
    /// Operations completed in each second of the run.
    pub per_second_ops: Vec<u64>,
    /// 99th-percentile latency in each second of the run, microseconds.
    pub per_second_p99_us: Vec<u64>,
    /// Whether the engine was checkpointing during each second (this
    /// engine only; false for others).
    pub per_second_checkpointing: Vec<bool>,
    /// The slowest operation that ended in each second, microseconds.
    #[serde(default)]
    pub per_second_max_us: Vec<u64>,
    /// The device's mean time per completed request (reads, writes, cache
    /// flushes; every process's) in each second, microseconds; empty where
    /// `/proc/diskstats` has no entry for the data directory's device. A
    /// spike here with one in `per_second_max_us` is the device stalling.
    #[serde(default)]
    pub per_second_device_us: Vec<u64>,
    /// The slowest read of the device probe (one 4 KiB direct read of the
    /// data set's largest file every 10 ms, beside the engine) that ended in
    /// each second, microseconds; empty where the files cannot be read with
    /// direct I/O. A slow probe read in the second of a slow operation says
    /// the device stalled for everyone.
    #[serde(default)]
    pub per_second_probe_max_us: Vec<u64>,
    /// Peak resident set size during the run.
    pub rss_peak_bytes: u64,
    /// Resident set size at the end of the run.
    pub rss_end_bytes: u64,
    /// Size of the database files at the end.
    pub db_bytes: u64,
    /// Bytes of the database files in the OS page cache at the end (mincore).
    pub db_cached_bytes: u64,
    /// `rss_end_bytes + db_cached_bytes`: the memory the data costs.
    pub memory_bytes: u64,
    /// `memory_bytes / cache_bytes`.
    pub memory_per_cache: f64,
    /// Storage I/O during the run (`/proc/self/io`).
    pub io: IoCounters,
    /// CPU seconds during the run.
    pub cpu: Cpu,
    /// The engine's own counters at the end.
    pub engine_stats: serde_json::Value,
    /// This engine only (empty for others): what an operation waited for in
    /// the foreground on average during the run, microseconds, by cause
    /// (`read_miss`: data-file reads of cache misses; `writer_lock_wait`
    /// (one writer at a time only); `commit_wait`: entering the commit
    /// section; `row_lock_wait`; `tree_lock_wait`; `wal_sync_wait`: the
    /// commit's WAL sync;
    /// `free_frame_wait`; `log_space_wait`). Set against `latency_us_mean`,
    /// it says where the time of a transaction went.
    #[serde(default)]
    pub wait_per_op_us: BTreeMap<String, f64>,
    /// This engine only: write transactions' counters per second during
    /// the run (`begun`, `conflicts`, `deadlocks`, `retries`, `lock_waits`,
    /// `lock_timeouts`, `commit_misses`, `lock_wait_us`), with `commits`,
    /// `wal_flushes` and `wal_flush_us` (microseconds the log spent
    /// flushing, per second).
    #[serde(default)]
    pub txn_per_sec: BTreeMap<String, f64>,
    /// The TPC-B consistency check (tpcb only).
    pub consistency: Option<Consistency>,
    /// A read transaction held through the run (`--hold-snapshot`).
    #[serde(default)]
    pub snapshot_hold: Option<super::store::SnapshotHold>,
    /// Backups taken back to back through the run, a full one then an
    /// increment of it in turn (`-backup`).
    #[serde(default)]
    pub backups: Option<super::store::BackupLoad>,
}

/// What an operation waited for, by cause, between two snapshots of this
/// engine's stats (`Stats::stalls` sums every foreground wait); empty for
/// an engine without them.
pub fn wait_per_op(
    before: &serde_json::Value,
    after: &serde_json::Value,
    ops: u64,
) -> BTreeMap<String, f64> {
    let Some(causes) = after["stalls"]["histograms"].as_object() else {
        return BTreeMap::new();
    };
    causes
        .iter()
        .filter_map(|(cause, h)| {
            let end = h["waited_us"].as_u64()?;
            let start = before["stalls"]["histograms"][cause]["waited_us"]
                .as_u64()
                .unwrap_or(0);
            Some((
                cause.clone(),
                end.saturating_sub(start) as f64 / ops.max(1) as f64,
            ))
        })
        .collect()
}

/// The comparison over all runs: one JSON line of `--json`, after the runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// `"summary"`.
    pub kind: String,
    /// Workload name.
    pub workload: String,
    /// The configuration the ratios are relative to (the first one).
    pub baseline: String,
    /// One entry per configuration, in the order given.
    pub configs: Vec<ConfigSummary>,
}

/// One configuration over its rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigSummary {
    /// Configuration name.
    pub config: String,
    /// Median operations per second over the rounds that succeeded.
    pub ops_per_sec: f64,
    /// `ops_per_sec` over the baseline's.
    pub ratio: f64,
    /// Worst p99.9 latency over the rounds, microseconds.
    pub latency_us_p999: u64,
    /// Worst maximum latency over the rounds, microseconds.
    pub latency_us_max: u64,
    /// Largest `memory_per_cache` over the rounds.
    pub memory_per_cache: f64,
    /// Rounds that failed.
    pub failed_rounds: u32,
}

/// The median of `values` (0 when there are none).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// One configuration over the rounds of `lines`.
fn summarize_config(config: &str, lines: &[Line<RunReport>]) -> ConfigSummary {
    let ok: Vec<&RunReport> = lines
        .iter()
        .filter(|l| l.config == config && l.error.is_none())
        .map(|l| &l.row)
        .collect();
    ConfigSummary {
        config: config.to_string(),
        ops_per_sec: median(ok.iter().map(|r| r.ops_per_sec).collect()),
        ratio: 0.0,
        latency_us_p999: ok
            .iter()
            .map(|r| r.latency.latency_us_p999)
            .max()
            .unwrap_or(0),
        latency_us_max: ok
            .iter()
            .map(|r| r.latency.latency_us_max)
            .max()
            .unwrap_or(0),
        memory_per_cache: ok.iter().map(|r| r.memory_per_cache).fold(0.0, f64::max),
        failed_rounds: lines
            .iter()
            .filter(|l| l.config == config && l.error.is_some())
            .count() as u32,
    }
}

/// Builds the summary of `lines` for the configurations in `order`.
pub fn summarize(workload: &str, order: &[String], lines: &[Line<RunReport>]) -> Summary {
    let mut configs: Vec<ConfigSummary> =
        order.iter().map(|c| summarize_config(c, lines)).collect();
    let base = configs.first().map_or(0.0, |c| c.ops_per_sec);
    for c in &mut configs {
        c.ratio = if base > 0.0 {
            c.ops_per_sec / base
        } else {
            0.0
        };
    }
    Summary {
        schema: SCHEMA.into(),
        kind: "summary".into(),
        workload: workload.into(),
        baseline: order.first().cloned().unwrap_or_default(),
        configs,
    }
}

impl TableRow for RunReport {
    const COLUMNS: &'static [Column] = &[
        col("ops/s", 10),
        col("p50", 8),
        col("p99", 8),
        col("p99.9", 8),
        col("max", 8),
        col("dev max", 8),
        col("RSS pk", 8),
        col("OS $", 8),
        col("mem/$", 8),
        col("hit%", 6),
        col("read", 8),
        col("written", 8),
        col("cpu usr/sys", 11),
        col("zero-s", 6),
        col("stalls", 7),
        col("tpcb check", 10),
    ];

    fn cells(&self) -> Vec<String> {
        let hit = self
            .engine_stats
            .get("cache_hit_ratio")
            .and_then(serde_json::Value::as_f64)
            .map_or("-".to_string(), |h| format!("{:.1}", 100.0 * h));
        let check = match &self.consistency {
            Some(c) if c.ok => "ok".to_string(),
            Some(c) => format!(
                "FAILED (accounts {} tellers {} branches {} history {})",
                c.accounts, c.tellers, c.branches, c.history
            ),
            None => "-".to_string(),
        };
        let zero = self.per_second_ops.iter().filter(|&&n| n == 0).count();
        // This engine's foreground waits over 1 ms, all causes.
        let stalls = self.engine_stats["stalls"]["histograms"]
            .as_object()
            .map_or("-".to_string(), |h| {
                h.values()
                    .filter_map(|c| c["count"].as_u64())
                    .sum::<u64>()
                    .to_string()
            });
        let l = &self.latency;
        let dev_max = self.per_second_probe_max_us.iter().max();
        vec![
            format!("{:.0}", self.ops_per_sec),
            ms(l.latency_us_p50),
            ms(l.latency_us_p99),
            ms(l.latency_us_p999),
            ms(l.latency_us_max),
            dev_max.map_or("-".to_string(), |&us| ms(us)),
            mib(self.rss_peak_bytes),
            mib(self.db_cached_bytes),
            format!("{:.2}", self.memory_per_cache),
            hit,
            mib(self.io.read_bytes),
            mib(self.io.write_bytes),
            format!("{:.1}/{:<5.1}", self.cpu.user_s, self.cpu.sys_s),
            zero.to_string(),
            stalls,
            check,
        ]
    }
}

/// Prints the comparison of the configurations, when there are several.
pub fn print_summary(lines: &[Line<RunReport>], summary: &Summary) {
    if summary.configs.len() < 2 {
        return;
    }
    println!();
    println!(
        "{} ({} per second), relative to {}:",
        summary.workload,
        lines
            .iter()
            .find(|l| l.error.is_none())
            .map_or("operations", |l| l.row.unit.as_str()),
        summary.baseline
    );
    for c in &summary.configs {
        println!(
            "  {:<22} {:>10.0}/s  {:>6.2}x   p99.9 {:>8}  max {:>8}  memory/cache {:.2}{}",
            c.config,
            c.ops_per_sec,
            c.ratio,
            ms(c.latency_us_p999),
            ms(c.latency_us_max),
            c.memory_per_cache,
            if c.failed_rounds > 0 {
                format!("  ({} rounds failed)", c.failed_rounds)
            } else {
                String::new()
            }
        );
    }
}

/// Where an operation's time went, for the runs of this engine: its mean
/// latency split into the foreground waits by cause and the rest (CPU,
/// waiting to be scheduled, everything not counted as a wait).
/// Prints what each run's held read transaction cost (`--hold-snapshot`).
pub fn print_snapshot_holds(lines: &[Line<RunReport>]) {
    let held: Vec<_> = lines
        .iter()
        .filter_map(|l| l.row.snapshot_hold.as_ref().map(|h| (l, h)))
        .collect();
    if held.is_empty() {
        return;
    }
    println!();
    println!("a read transaction held through the run:");
    for (l, h) in held {
        println!(
            "{:<22} {:>3}  held {:.1} s: {}; version store peak {:.1} MiB of a {:.1} MiB cap; \
             {} snapshot(s) given up; RSS peak {:.1} MiB, memory/cache {:.2}",
            l.config,
            l.round,
            h.held_seconds,
            h.outcome,
            h.version_store_peak_bytes as f64 / f64::from(1 << 20),
            h.version_store_cap_bytes as f64 / f64::from(1 << 20),
            h.snapshots_too_old,
            l.row.rss_peak_bytes as f64 / f64::from(1 << 20),
            l.row.memory_per_cache,
        );
    }
}

/// Prints what the backups taken through each `-backup` run did.
pub fn print_backups(lines: &[Line<RunReport>]) {
    let runs: Vec<_> = lines
        .iter()
        .filter_map(|l| l.row.backups.as_ref().map(|b| (l, b)))
        .collect();
    if runs.is_empty() {
        return;
    }
    println!();
    println!("backups taken back to back through the run (a full one, then an increment of it):");
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    for (l, b) in runs {
        println!(
            "{:<22} {:>3}  {} done in {:.1} s, {:.0} MiB/s; page cache added at most {:.1} MiB \
             ({:.2}% of the {:.0} MiB data file); {} pages read again or covered by the log",
            l.config,
            l.round,
            b.completed,
            b.seconds,
            mib(b.bytes) / b.seconds.max(1e-9),
            mib(b.cached_bytes_max),
            100.0 * b.cached_bytes_max as f64 / b.data_bytes.max(1) as f64,
            mib(b.data_bytes),
            b.pages_reread,
        );
        if b.increments > 0 {
            println!(
                "{:<22} {:>3}  {} increments; the last, {:.1} s of load after its parent's start: \
                 {} pages changed, {} as deltas, {:.1} MiB of data ({:.1}% of the full's)",
                l.config,
                l.round,
                b.increments,
                b.increment_after_seconds,
                b.increment_pages,
                b.increment_deltas,
                mib(b.increment_data_bytes),
                100.0 * b.increment_data_bytes as f64 / b.data_bytes.max(1) as f64,
            );
        }
    }
}

pub fn print_waits(lines: &[Line<RunReport>]) {
    let ours: Vec<&Line<RunReport>> = lines
        .iter()
        .filter(|l| l.error.is_none() && !l.row.wait_per_op_us.is_empty())
        .collect();
    if ours.is_empty() {
        return;
    }
    println!();
    println!("where an operation's time went (mean, microseconds per operation):");
    println!(
        "{:<22} {:>3} {:>8} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>10}",
        "config",
        "rnd",
        "latency",
        "data read",
        "writer lk",
        "commit sec",
        "row locks",
        "WAL sync",
        "other",
        "rest",
        "retries/s",
        "log busy",
        "per flush"
    );
    for l in ours {
        let r = &l.row;
        let w = |cause: &str| r.wait_per_op_us.get(cause).copied().unwrap_or(0.0);
        let named = [
            "read_miss",
            "writer_lock_wait",
            "commit_wait",
            "row_lock_wait",
            "wal_sync_wait",
        ]
        .map(w);
        let waited: f64 = r.wait_per_op_us.values().sum();
        let other = waited - named.iter().sum::<f64>();
        let mean = r.latency.latency_us_mean;
        let [read, writer, commit, rows, sync] = named;
        let per_sec = |name: &str| r.txn_per_sec.get(name).copied().unwrap_or(0.0);
        // The share of the run the log spent flushing (about: a flush
        // under way at either end of the run counts whole), and commits
        // per flush.
        let busy = per_sec("wal_flush_us") / 1e4;
        let per_flush = per_sec("commits") / per_sec("wal_flushes").max(1e-9);
        print!(
            "{:<22} {:>3} {:>8.0} {:>9.0} {:>9.0} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>8.0} {:>9.1}",
            l.config,
            l.round,
            mean,
            read,
            writer,
            commit,
            rows,
            sync,
            other,
            mean - waited,
            per_sec("retries"),
        );
        println!(" {busy:>7.0}% {per_flush:>10.1}");
    }
}

/// A sweep's throughput by clients: a row per configuration, a column per
/// client count, each the mean over the rounds.
pub fn print_by_clients(lines: &[Line<RunReport>], clients: &[u64]) {
    let mut names: Vec<&str> = Vec::new();
    for l in lines {
        let name = super::kv::split_clients(&l.config).0;
        if !names.contains(&name) {
            names.push(name);
        }
    }
    println!();
    println!("throughput by clients (ops/s, mean of the rounds):");
    let head: Vec<String> = clients.iter().map(|c| format!("{c:>10}")).collect();
    println!("{:<28} {}", "config", head.join(" "));
    for name in names {
        let cells: Vec<String> = clients
            .iter()
            .map(|&c| {
                let runs: Vec<f64> = lines
                    .iter()
                    .filter(|l| l.error.is_none())
                    .filter(|l| super::kv::split_clients(&l.config) == (name, Some(c)))
                    .map(|l| l.row.ops_per_sec)
                    .collect();
                match runs.len() {
                    0 => format!("{:>10}", "-"),
                    n => format!("{:>10.0}", runs.iter().sum::<f64>() / n as f64),
                }
            })
            .collect();
        println!("{name:<28} {}", cells.join(" "));
    }
}

/// Write transactions' counters per second between two snapshots of this
/// engine's stats (`Stats::transactions`: conflicts, deadlocks, retries,
/// lock waits, ...), with the commits (`commits`) and the log's flushes
/// (`wal_flushes`, and `wal_flush_us`: microseconds spent flushing per
/// second); empty for an engine without them.
pub fn txn_per_sec(
    before: &serde_json::Value,
    after: &serde_json::Value,
    seconds: f64,
) -> BTreeMap<String, f64> {
    let Some(counters) = after["transactions"].as_object() else {
        return BTreeMap::new();
    };
    let rate = |end: &serde_json::Value, start: &serde_json::Value| {
        let end = end.as_u64()?;
        Some(end.saturating_sub(start.as_u64().unwrap_or(0)) as f64 / seconds.max(1e-9))
    };
    let log = [
        ("commits", &after["commits"], &before["commits"]),
        (
            "wal_flushes",
            &after["wal"]["flushes"],
            &before["wal"]["flushes"],
        ),
        (
            "wal_flush_us",
            &after["wal"]["flush_us"],
            &before["wal"]["flush_us"],
        ),
    ];
    counters
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "locked_keys" | "waiting_for_locks"))
        .filter_map(|(name, v)| Some((name.clone(), rate(v, &before["transactions"][name])?)))
        .chain(
            log.into_iter()
                .filter_map(|(name, end, start)| Some((name.to_string(), rate(end, start)?))),
        )
        .collect()
}

mod charts;
pub use charts::plot;
