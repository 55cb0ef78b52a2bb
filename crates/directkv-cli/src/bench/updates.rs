//! `directkv bench updates`: random single-key durable updates over a loaded
//! table, with checkpoints, reporting commits/s, latency percentiles, WAL bytes
//! per commit, and the share of those bytes that are full-page images (the
//! price of torn-page protection; it grows with checkpoint frequency).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use directkv::{Database, Durability, Options};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Options of `directkv bench updates`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory for the scratch database.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Keys in the table.
    #[arg(long, default_value_t = 200_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Cache size.
    #[arg(long, default_value = "64M", value_parser = crate::size::parse_bytes)]
    cache: u64,
    /// Seconds of updates.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Seconds between checkpoints (0: only the automatic, WAL-size ones).
    #[arg(long, default_value_t = 2.0)]
    checkpoint_every: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    commits: u64,
    commits_per_sec: f64,
    latency_us_p50: u64,
    latency_us_p99: u64,
    latency_us_p999: u64,
    latency_us_max: u64,
    checkpoints: u64,
    wal_bytes_per_commit: f64,
    page_record_bytes_per_commit: f64,
    full_page_image_share: f64,
    full_page_images: u64,
    page_deltas: u64,
    wal_sync: String,
}

/// Big-endian, so the table's keys sort in numeric order (a key, not an
/// on-disk integer).
#[allow(clippy::big_endian_bytes)]
fn table_key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

pub fn run(args: Args) -> Result<()> {
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
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
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
        h.saturating_record(start.elapsed().as_micros() as u64);
        if args.checkpoint_every > 0.0
            && last_ck.elapsed() >= Duration::from_secs_f64(args.checkpoint_every)
        {
            db.checkpoint()?;
            last_ck = Instant::now();
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    let after = db.stats();
    let commits = h.len();
    let per = |a: u64, b: u64| (a - b) as f64 / commits.max(1) as f64;
    let images = after.full_page_image_bytes - before.full_page_image_bytes;
    let records = after.page_record_bytes - before.page_record_bytes;
    let report = Report {
        commits,
        commits_per_sec: commits as f64 / elapsed,
        latency_us_p50: h.value_at_quantile(0.5),
        latency_us_p99: h.value_at_quantile(0.99),
        latency_us_p999: h.value_at_quantile(0.999),
        latency_us_max: h.max(),
        checkpoints: after.checkpoints - before.checkpoints,
        wal_bytes_per_commit: per(after.wal_bytes, before.wal_bytes),
        page_record_bytes_per_commit: per(after.page_record_bytes, before.page_record_bytes),
        full_page_image_share: images as f64 / records.max(1) as f64,
        full_page_images: after.full_page_images - before.full_page_images,
        page_deltas: after.page_deltas - before.page_deltas,
        wal_sync: after.wal_sync.to_string(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}
