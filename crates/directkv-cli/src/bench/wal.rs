//! `directkv bench wal`: group commit measured.
//!
//! For every (sync method, record size) the same method's single-write rate is
//! measured first (the `test-fsync` figure, same filesystem, same run), then the
//! WAL with 1, 4, 16, 64 … threads, each appending a record and waiting for it
//! to be durable, in a loop. Reported: commits/s, latency percentiles from an HDR
//! histogram, flushes (syncs) and the average group size, and the ratios the
//! design cares about: 1-thread commits/s to the raw sync rate, N threads to 1.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use directkv::internals::io::profile::{self, Outcome};
use directkv::internals::io::{At, OsStorage};
use directkv::internals::wal::{Wal, WalOptions};
use directkv::Lsn;
use directkv::SyncVariant;
use serde::{Deserialize, Serialize};

use super::args::{non_empty, parse_seconds};
use super::driver::{self, Run, Runs, Spec};
use super::latency::{Latency, LatencyHistogram};
use super::output::{col, Column, TableRow};

/// Options of `directkv bench wal`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory on the filesystem to measure (a scratch directory is made in it).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Committing thread counts (each at least 1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16,64",
        value_parser = super::args::whole_in::<usize>(1, super::args::THREADS_MAX)
    )]
    threads: Vec<usize>,
    /// Sync methods (`fdatasync`, `open_datasync+direct`, …; `all` for every durable one).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fdatasync,fdatasync+direct,open_datasync+direct,pwrite_dsync+direct"
    )]
    methods: Vec<String>,
    /// Record payload sizes in bytes (each at least 1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,4096",
        value_parser = super::args::whole_in::<usize>(1, super::args::RECORD_BYTES_MAX)
    )]
    record_sizes: Vec<usize>,
    /// Seconds per measurement (more than 0).
    #[arg(long, default_value_t = 3.0, value_parser = parse_seconds)]
    seconds: f64,
    #[command(flatten)]
    runs: Runs,
}

/// One (sync method, record size, thread count): a row of `bench wal`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    record_bytes: usize,
    threads: usize,
    commits: u64,
    seconds: f64,
    commits_per_sec: f64,
    #[serde(flatten)]
    latency: Latency,
    flushes: u64,
    commits_per_flush: f64,
    /// The same method's one-write rate (`test-fsync`), same run.
    raw_sync_per_sec: f64,
    /// commits/s over the raw sync rate.
    ratio_to_raw_sync: f64,
    /// commits/s over the 1-thread commits/s of the same method and size.
    ratio_to_one_thread: Option<f64>,
}

impl TableRow for Row {
    const COLUMNS: &'static [Column] = &[
        col("record", 6),
        col("thr", 4),
        col("commits/s", 10),
        col("p50 us", 8),
        col("p99 us", 8),
        col("p99.9us", 8),
        col("max us", 8),
        col("group", 6),
        col("raw sync", 9),
        col("/raw", 7),
        col("/1thr", 7),
    ];

    fn cells(&self) -> Vec<String> {
        let l = &self.latency;
        vec![
            self.record_bytes.to_string(),
            self.threads.to_string(),
            format!("{:.0}", self.commits_per_sec),
            l.latency_us_p50.to_string(),
            l.latency_us_p99.to_string(),
            l.latency_us_p999.to_string(),
            l.latency_us_max.to_string(),
            format!("{:.1}", self.commits_per_flush),
            format!("{:.0}", self.raw_sync_per_sec),
            format!("{:.2}", self.ratio_to_raw_sync),
            self.ratio_to_one_thread
                .map_or_else(|| "-".into(), |v| format!("{v:.2}")),
        ]
    }
}

/// `bench wal` as the driver runs it: one configuration per sync method.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WalSpec {
    dir: PathBuf,
    methods: Vec<String>,
    threads: Vec<usize>,
    record_sizes: Vec<usize>,
    seconds: f64,
}

fn methods(names: &[String]) -> Result<Vec<SyncVariant>> {
    if names.iter().any(|n| n == "all") {
        return Ok(SyncVariant::all()
            .filter(|v| v.method.is_durable())
            .collect());
    }
    names
        .iter()
        .map(|n| n.parse::<SyncVariant>().map_err(anyhow::Error::from))
        .collect()
}

/// Runs `directkv bench wal`.
pub fn run(args: Args) -> Result<()> {
    non_empty("--threads", &args.threads)?;
    non_empty("--record-sizes", &args.record_sizes)?;
    non_empty("--methods", &args.methods)?;
    let variants = methods(&args.methods)?;
    let spec = WalSpec {
        dir: args.dir,
        methods: variants.iter().map(ToString::to_string).collect(),
        threads: args.threads,
        record_sizes: args.record_sizes,
        seconds: args.seconds,
    };
    driver::run(&spec, &args.runs)
}

impl Spec for WalSpec {
    const KIND: &'static str = "wal";
    type Row = Row;

    fn configs(&self) -> &[String] {
        &self.methods
    }

    fn measure(&self, run: &Run) -> Result<Vec<Row>> {
        let variant: SyncVariant = run.config.parse().map_err(anyhow::Error::from)?;
        let scratch = super::sys::scratch_dir(&self.dir, "directkv-bench-wal-")?;
        let mut rows = Vec::new();
        for &size in &self.record_sizes {
            // The unit the WAL writes per commit at one thread: header, record,
            // padding to the I/O unit; test-fsync measures a write of that size.
            let block = (24 + 16 + size).next_multiple_of(4096);
            let raw = match profile::Scratch::create(At::cwd(&scratch.path().join("raw.tmp")))?
                .measure_sync(variant, 1, block, self.seconds)?
            {
                Outcome::Measured { ops_per_sec, .. } => ops_per_sec,
                Outcome::NotAvailable { reason } => {
                    eprintln!("{variant}: not available here ({reason})");
                    continue;
                }
            };
            let mut one_thread = None;
            for &threads in &self.threads {
                let row = measure(scratch.path(), variant, size, threads, self.seconds, raw)?;
                let one = *one_thread.get_or_insert(row.commits_per_sec);
                rows.push(Row {
                    ratio_to_one_thread: (threads > 1).then(|| row.commits_per_sec / one),
                    ..row
                });
            }
        }
        Ok(rows)
    }
}

/// One committer: append a record and wait for it to be durable, until
/// `stop`; its latencies.
fn commit_until(
    wal: &Wal<OsStorage>,
    stop: &AtomicBool,
    start: &Barrier,
    payload: &[u8],
) -> Result<LatencyHistogram> {
    let mut h = LatencyHistogram::new()?;
    start.wait();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let lsn = wal.append(16, payload)?;
        wal.flush(lsn)?;
        h.record(t.elapsed());
    }
    Ok(h)
}

fn measure(
    scratch: &Path,
    variant: SyncVariant,
    size: usize,
    threads: usize,
    seconds: f64,
    raw: f64,
) -> Result<Row> {
    assert!(threads >= 1 && seconds > 0.0, "validated by the options");
    let dir = tempfile::tempdir_in(scratch)?;
    let mut opts = WalOptions::new(dir.path().join("wal"), *b"directkv-benchwl");
    opts.sync = variant;
    let (wal, _) = Wal::open(OsStorage::default(), opts, Lsn::ZERO, |_| Ok(()))?;
    wal.prepare_spares()?;
    let wal = Arc::new(wal);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(threads + 1));
    let payload = Arc::new(vec![0x5Au8; size]);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (wal, stop, start, payload) = (
                Arc::clone(&wal),
                Arc::clone(&stop),
                Arc::clone(&start),
                Arc::clone(&payload),
            );
            std::thread::spawn(move || commit_until(&wal, &stop, &start, &payload))
        })
        .collect();
    let flushes_before = wal.stats().flushes;
    start.wait();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = LatencyHistogram::new()?;
    for h in handles {
        let h = h
            .join()
            .map_err(|_| anyhow::anyhow!("committer panicked"))??;
        all.add(&h)?;
    }
    let elapsed = t.elapsed().as_secs_f64();
    let flushes = wal.stats().flushes - flushes_before;
    let commits = all.count();
    Arc::into_inner(wal)
        .context("bench threads hold no WAL")?
        .close()?;
    let commits_per_sec = commits as f64 / elapsed;
    Ok(Row {
        record_bytes: size,
        threads,
        commits,
        seconds: elapsed,
        commits_per_sec,
        latency: all.latency(),
        flushes,
        commits_per_flush: commits as f64 / flushes.max(1) as f64,
        raw_sync_per_sec: raw,
        ratio_to_raw_sync: commits_per_sec / raw,
        ratio_to_one_thread: None,
    })
}
