//! `directkv bench updates`: random single-key durable updates over a loaded
//! table, with checkpoints, reporting commits/s, latency percentiles, WAL bytes
//! per commit, and the share of those bytes that are full-page images (the
//! price of torn-page protection; it grows with checkpoint frequency).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use directkv::{Database, Durability, Options};
use serde::{Deserialize, Serialize};

use super::args::{parse_positive_bytes, parse_seconds};
use super::driver::{self, Run, Runs, Spec};
use super::latency::{Latency, LatencyHistogram};
use super::output::{col, Column, TableRow};

/// Options of `directkv bench updates`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the scratch database.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Keys in the table (at least 1).
    #[arg(
        long,
        default_value_t = 200_000,
        value_parser = super::args::whole_in::<u64>(1, super::args::KEYS_MAX)
    )]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100, value_parser = super::kv::value_size())]
    value_size: usize,
    /// Cache size.
    #[arg(long, default_value = "64M", value_parser = parse_positive_bytes)]
    cache: u64,
    /// Seconds of updates (more than 0).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    seconds: f64,
    /// Seconds between checkpoints (0: only the automatic, WAL-size ones).
    #[arg(long, default_value_t = 2.0, value_parser = parse_checkpoint_every)]
    checkpoint_every: f64,
    #[command(flatten)]
    runs: Runs,
}

fn parse_checkpoint_every(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
        _ => Err(format!("{text:?} is not a number of seconds, 0 or more")),
    }
}

/// What the updates measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    commits: u64,
    commits_per_sec: f64,
    #[serde(flatten)]
    latency: Latency,
    checkpoints: u64,
    wal_bytes_per_commit: f64,
    page_record_bytes_per_commit: f64,
    full_page_image_share: f64,
    full_page_images: u64,
    page_deltas: u64,
    wal_sync: String,
}

impl TableRow for Report {
    const COLUMNS: &'static [Column] = &[
        col("commits/s", 10),
        col("p50 us", 8),
        col("p99 us", 8),
        col("p99.9us", 8),
        col("max us", 8),
        col("ckpts", 6),
        col("WAL B/commit", 13),
        col("FPI share", 10),
        col("WAL sync", 0),
    ];

    fn cells(&self) -> Vec<String> {
        let l = &self.latency;
        vec![
            format!("{:.0}", self.commits_per_sec),
            l.latency_us_p50.to_string(),
            l.latency_us_p99.to_string(),
            l.latency_us_p999.to_string(),
            l.latency_us_max.to_string(),
            self.checkpoints.to_string(),
            format!("{:.0}", self.wal_bytes_per_commit),
            format!("{:.2}", self.full_page_image_share),
            self.wal_sync.clone(),
        ]
    }
}

/// `bench updates` as the driver runs it: one configuration, the engine's
/// defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpdatesSpec {
    dir: PathBuf,
    keys: u64,
    value_size: usize,
    cache: u64,
    seconds: f64,
    checkpoint_every: f64,
    configs: Vec<String>,
}

/// Runs `directkv bench updates`.
pub fn run(args: Args) -> Result<()> {
    let spec = UpdatesSpec {
        dir: args.dir,
        keys: args.keys,
        value_size: args.value_size,
        cache: args.cache,
        seconds: args.seconds,
        checkpoint_every: args.checkpoint_every,
        configs: vec!["default".into()],
    };
    driver::run(&spec, &args.runs)
}

impl Spec for UpdatesSpec {
    const KIND: &'static str = "updates";
    type Row = Report;

    fn configs(&self) -> &[String] {
        &self.configs
    }

    fn measure(&self, _run: &Run) -> Result<Vec<Report>> {
        Ok(vec![measure(self)?])
    }
}

/// Big-endian, so the table's keys sort in numeric order (a key, not an
/// on-disk integer).
#[allow(clippy::big_endian_bytes)]
fn table_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn measure(args: &UpdatesSpec) -> Result<Report> {
    let scratch = super::sys::scratch_dir(&args.dir, "directkv-bench-updates-")?;
    let opts = Options {
        cache_bytes: args.cache as usize,
        ..Options::default()
    };
    let load = Options {
        durability: Durability::NoSyncNotDurable,
        ..opts.clone()
    };
    let value = vec![0x33u8; args.value_size];
    {
        let db = Database::open(scratch.path(), load)?;
        let mut k = 0;
        while k < args.keys {
            let mut w = db.begin_write()?;
            for i in k..(k + 2000).min(args.keys) {
                w.put(&table_key(i), &value)?;
            }
            w.commit()?;
            k += 2000;
        }
        db.close()?;
    }
    let db = Database::open(scratch.path(), opts)?;
    let before = db.stats();
    let mut h = LatencyHistogram::new()?;
    let t = Instant::now();
    let mut last_ck = Instant::now();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    while t.elapsed().as_secs_f64() < args.seconds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let start = Instant::now();
        let mut w = db.begin_write()?;
        w.put(&table_key(x % args.keys), &value)?;
        w.commit()?;
        h.record(start.elapsed());
        if args.checkpoint_every > 0.0
            && last_ck.elapsed() >= Duration::from_secs_f64(args.checkpoint_every)
        {
            db.checkpoint()?;
            last_ck = Instant::now();
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    let after = db.stats();
    let commits = h.count();
    let per = |a: u64, b: u64| (a - b) as f64 / commits.max(1) as f64;
    let images = after.full_page_image_bytes - before.full_page_image_bytes;
    let records = after.page_record_bytes - before.page_record_bytes;
    let report = Report {
        commits,
        commits_per_sec: commits as f64 / elapsed,
        latency: h.latency(),
        checkpoints: after.checkpoints - before.checkpoints,
        wal_bytes_per_commit: per(after.wal_bytes, before.wal_bytes),
        page_record_bytes_per_commit: per(after.page_record_bytes, before.page_record_bytes),
        full_page_image_share: images as f64 / records.max(1) as f64,
        full_page_images: after.full_page_images - before.full_page_images,
        page_deltas: after.page_deltas - before.page_deltas,
        wal_sync: after.wal_sync.to_string(),
    };
    Ok(report)
}
