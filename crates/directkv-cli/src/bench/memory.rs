//! `directkv bench memory`: the one-cache claim, measured (DESIGN.md invariant 6).
//!
//! For direct and buffered I/O in turn, a fresh child process loads a data set
//! `--ratio` times the cache, reads random keys for `--seconds`, and reports its
//! read rate, its resident memory (RSS, peak RSS), and how many bytes of the
//! database's files the OS page cache holds (`mincore` over a mapping of each
//! file). With direct I/O the page cache should hold almost none of the data
//! file and RSS should stay near the cache size; buffered I/O caches the data
//! twice.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Result};
use directkv::DirectIo;
use directkv::{Database, Durability, Options};
use serde::{Deserialize, Serialize};

use super::args::{parse_positive_bytes, parse_ratio, parse_seconds};
use super::driver::{self, Run, Runs, Spec};
use super::output::{col, mib, Column, Line, TableRow, Writer};

/// Options of `directkv bench memory`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Directory for the scratch databases.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Cache size, e.g. 64M.
    #[arg(long, default_value = "64M", value_parser = parse_positive_bytes)]
    cache: u64,
    /// Data set size as a multiple of the cache (more than 0).
    #[arg(long, default_value_t = 4.0, value_parser = parse_ratio)]
    ratio: f64,
    /// Bytes per value.
    #[arg(long, default_value_t = 400, value_parser = super::kv::value_size())]
    value_size: usize,
    /// Seconds of random reads (more than 0).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    seconds: f64,
    #[command(flatten)]
    runs: Runs,
}

/// What one mode (`config`: direct or buffered) measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outcome {
    cache_bytes: u64,
    data_file_bytes: u64,
    keys: u64,
    reads_per_sec: f64,
    data_file_cached_bytes: u64,
    data_file_cached_pct: f64,
    wal_cached_bytes: u64,
    rss_bytes: u64,
    rss_peak_bytes: u64,
    cache_hit_ratio: f64,
}

impl TableRow for Outcome {
    const COLUMNS: &'static [Column] = &[
        col("cache", 9),
        col("data file", 10),
        col("reads/s", 10),
        col("file in OS $", 14),
        col("% file", 8),
        col("RSS", 9),
        col("peak RSS", 9),
        col("hit %", 7),
    ];

    fn cells(&self) -> Vec<String> {
        vec![
            mib(self.cache_bytes),
            mib(self.data_file_bytes),
            format!("{:.0}", self.reads_per_sec),
            mib(self.data_file_cached_bytes),
            format!("{:.2}%", self.data_file_cached_pct),
            mib(self.rss_bytes),
            mib(self.rss_peak_bytes),
            format!("{:.1}%", 100.0 * self.cache_hit_ratio),
        ]
    }
}

/// `bench memory` as the driver runs it: direct, then buffered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemorySpec {
    dir: PathBuf,
    cache: u64,
    ratio: f64,
    value_size: usize,
    seconds: f64,
    modes: Vec<String>,
}

/// Runs `directkv bench memory`.
pub fn run(args: Args) -> Result<()> {
    let spec = MemorySpec {
        dir: args.dir,
        cache: args.cache,
        ratio: args.ratio,
        value_size: args.value_size,
        seconds: args.seconds,
        modes: vec!["direct".into(), "buffered".into()],
    };
    if spec.keys() == 0 {
        bail!("--cache times --ratio holds not one value of --value-size bytes: raise one of them");
    }
    driver::run(&spec, &args.runs)
}

impl MemorySpec {
    /// Keys of the data set: `ratio` times the cache.
    fn keys(&self) -> u64 {
        let per_key = (self.value_size + 16) as f64 * 1.45; // fill and slot overhead
        (self.cache as f64 * self.ratio / per_key) as u64
    }
}

impl Spec for MemorySpec {
    const KIND: &'static str = "memory";
    type Row = Outcome;

    fn configs(&self) -> &[String] {
        &self.modes
    }

    fn measure(&self, run: &Run) -> Result<Vec<Outcome>> {
        Ok(vec![measure(self, &run.config)?])
    }

    fn finish(&self, lines: &[Line<Outcome>], out: Writer) -> Result<()> {
        let ok = |mode: &str| {
            lines
                .iter()
                .find(|l| l.config == mode && l.error.is_none())
                .map(|l| &l.row)
        };
        if let (false, Some(d), Some(b)) = (out.json(), ok("direct"), ok("buffered")) {
            println!(
                "buffered/direct: memory (RSS + file in OS cache) {:.2}x, reads/s {:.2}x",
                (b.rss_bytes + b.data_file_cached_bytes) as f64
                    / (d.rss_bytes + d.data_file_cached_bytes) as f64,
                b.reads_per_sec / d.reads_per_sec
            );
        }
        Ok(())
    }
}

fn dir_cached_bytes(dir: &Path) -> u64 {
    super::sys::dir_size_and_cached(dir).1
}

fn measure(args: &MemorySpec, mode: &str) -> Result<Outcome> {
    let scratch = super::sys::scratch_dir(&args.dir, "directkv-bench-memory-")?;
    let direct_io = match mode {
        "direct" => DirectIo::On,
        "buffered" => DirectIo::Off,
        m => bail!("unknown mode {m}"),
    };
    let opts = Options {
        cache_bytes: args.cache as usize,
        direct_io,
        durability: Durability::NoSyncNotDurable,
        ..Options::default()
    };
    let db = Database::open(scratch.path(), opts)?;
    let keys = args.keys();
    assert!(keys > 0, "run() refuses an empty data set");
    let value = vec![0x5Au8; args.value_size];
    let batch = 2000;
    let mut k = 0u64;
    while k < keys {
        let mut w = db.begin_write()?;
        for i in k..(k + batch).min(keys) {
            // Scatter the keys so the load touches pages at random, as an
            // OLTP table does.
            let key = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys).to_le_bytes();
            w.put(&key, &value)?;
        }
        w.commit()?;
        k += batch;
    }
    db.checkpoint()?;
    let before = db.stats();
    let t = Instant::now();
    let mut reads = 0u64;
    let mut x = 0x1234_5678u64;
    while t.elapsed().as_secs_f64() < args.seconds {
        let r = db.begin_read()?;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = (x % keys).wrapping_mul(0x9E37_79B9_7F4A_7C15) % keys;
            r.get(&key.to_le_bytes())?;
            reads += 1;
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    let after = db.stats();
    let data = scratch.path().join("data");
    let data_len = std::fs::metadata(&data)?.len();
    let cached = super::sys::cached_bytes(&data)?;
    let hits = after.cache_hits - before.cache_hits;
    let misses = after.cache_misses - before.cache_misses;
    Ok(Outcome {
        cache_bytes: args.cache,
        data_file_bytes: data_len,
        keys,
        reads_per_sec: reads as f64 / elapsed,
        data_file_cached_bytes: cached,
        data_file_cached_pct: 100.0 * cached as f64 / data_len.max(1) as f64,
        wal_cached_bytes: dir_cached_bytes(&scratch.path().join("wal")),
        rss_bytes: super::sys::proc_status_kib("VmRSS:") * 1024,
        rss_peak_bytes: super::sys::proc_status_kib("VmHWM:") * 1024,
        cache_hit_ratio: hits as f64 / (hits + misses).max(1) as f64,
    })
}
