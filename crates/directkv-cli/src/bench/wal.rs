//! `directkv bench wal`: group commit measured.
//!
//! For every (sync method, record size) the same method's single-write rate is
//! measured first (the `test-fsync` figure, same filesystem, same run), then the
//! WAL with 1, 4, 16, 64 … threads, each appending a record and waiting for it
//! to be durable, in a loop. Reported: commits/s, latency percentiles from an HDR
//! histogram, flushes (syncs) and the average group size, and the ratios the
//! design cares about: 1-thread commits/s to the raw sync rate, N threads to 1.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use directkv::internals::io::profile::{self, Outcome};
use directkv::internals::io::{OsStorage, SyncVariant};
use directkv::internals::wal::{Wal, WalOptions};
use directkv::Lsn;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Options of `directkv bench wal`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory on the filesystem to measure (a scratch directory is made in it).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Committing thread counts.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    threads: Vec<usize>,
    /// Sync methods (`fdatasync`, `open_datasync+direct`, …; `all` for every durable one).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fdatasync,fdatasync+direct,open_datasync+direct,pwrite_dsync+direct"
    )]
    methods: Vec<String>,
    /// Record payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "100,4096")]
    record_sizes: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    method: String,
    record_bytes: usize,
    threads: usize,
    commits: u64,
    seconds: f64,
    commits_per_sec: f64,
    latency_us_p50: u64,
    latency_us_p99: u64,
    latency_us_p999: u64,
    latency_us_max: u64,
    flushes: u64,
    commits_per_flush: f64,
    /// The same method's one-write rate (`test-fsync`), same run.
    raw_sync_per_sec: f64,
    /// commits/s over the raw sync rate.
    ratio_to_raw_sync: f64,
    /// commits/s over the 1-thread commits/s of the same method and size.
    ratio_to_one_thread: Option<f64>,
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

pub fn run(args: Args) -> Result<()> {
    let variants = methods(&args.methods)?;
    let scratch = super::sys::scratch_dir(&args.dir, "directkv-bench-wal-")?;
    if !args.json {
        println!(
            "{:<22} {:>6} {:>4} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9} {:>7} {:>7}",
            "method",
            "record",
            "thr",
            "commits/s",
            "p50 us",
            "p99 us",
            "p99.9us",
            "max us",
            "group",
            "raw sync",
            "/raw",
            "/1thr"
        );
    }
    for variant in &variants {
        for &size in &args.record_sizes {
            // The unit the WAL writes per commit at one thread: header, record,
            // padding to the I/O unit; test-fsync measures a write of that size.
            let block = (24 + 16 + size).next_multiple_of(4096);
            let raw = match profile::measure_one(
                &scratch.path().join("raw.tmp"),
                *variant,
                block,
                args.seconds,
            )? {
                Outcome::Measured { ops_per_sec, .. } => ops_per_sec,
                Outcome::NotAvailable { reason } => {
                    eprintln!("{variant}: not available here ({reason})");
                    continue;
                }
            };
            let mut one_thread = None;
            for &threads in &args.threads {
                let row = measure(scratch.path(), *variant, size, threads, args.seconds, raw)?;
                let one = *one_thread.get_or_insert(row.commits_per_sec);
                let row = Row {
                    ratio_to_one_thread: (threads > 1).then(|| row.commits_per_sec / one),
                    ..row
                };
                print_row(&row, args.json)?;
            }
        }
    }
    Ok(())
}

fn print_row(r: &Row, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
        return Ok(());
    }
    let one = r
        .ratio_to_one_thread
        .map(|v| format!("{v:.2}"))
        .unwrap_or_else(|| "-".into());
    println!(
        "{:<22} {:>6} {:>4} {:>10.0} {:>8} {:>8} {:>8} {:>8} {:>6.1} {:>9.0} {:>7.2} {:>7}",
        r.method,
        r.record_bytes,
        r.threads,
        r.commits_per_sec,
        r.latency_us_p50,
        r.latency_us_p99,
        r.latency_us_p999,
        r.latency_us_max,
        r.commits_per_flush,
        r.raw_sync_per_sec,
        r.ratio_to_raw_sync,
        one
    );
    Ok(())
}

fn measure(
    scratch: &std::path::Path,
    variant: SyncVariant,
    size: usize,
    threads: usize,
    seconds: f64,
    raw: f64,
) -> Result<Row> {
    let dir = tempfile::tempdir_in(scratch)?;
    let mut opts = WalOptions::new(dir.path().join("wal"), *b"directkv-benchwl");
    opts.sync = variant;
    let (wal, _) = Wal::open(OsStorage, opts, Lsn::ZERO, |_| Ok(()))?;
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
            std::thread::spawn(move || -> directkv::Result<Histogram<u64>> {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
                    .expect("valid histogram bounds");
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let lsn = wal.append(16, &payload)?;
                    wal.flush(lsn)?;
                    h.saturating_record(t.elapsed().as_micros() as u64);
                }
                Ok(h)
            })
        })
        .collect();
    let flushes_before = wal.stats().flushes;
    start.wait();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for h in handles {
        let h = h
            .join()
            .map_err(|_| anyhow::anyhow!("committer panicked"))??;
        all.add(&h)?;
    }
    let elapsed = t.elapsed().as_secs_f64();
    let flushes = wal.stats().flushes - flushes_before;
    let commits = all.len();
    Arc::into_inner(wal)
        .context("bench threads hold no WAL")?
        .close()?;
    let commits_per_sec = commits as f64 / elapsed;
    Ok(Row {
        method: variant.to_string(),
        record_bytes: size,
        threads,
        commits,
        seconds: elapsed,
        commits_per_sec,
        latency_us_p50: all.value_at_quantile(0.5),
        latency_us_p99: all.value_at_quantile(0.99),
        latency_us_p999: all.value_at_quantile(0.999),
        latency_us_max: all.max(),
        flushes,
        commits_per_flush: commits as f64 / flushes.max(1) as f64,
        raw_sync_per_sec: raw,
        ratio_to_raw_sync: commits_per_sec / raw,
        ratio_to_one_thread: None,
    })
}
