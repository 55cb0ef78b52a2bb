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
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use directkv::internals::io::DirectIo;
use directkv::{Database, Durability, Options};
use serde::{Deserialize, Serialize};

/// Options of `directkv bench memory`.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Directory for the scratch databases.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Cache size, e.g. 64M.
    #[arg(long, default_value = "64M", value_parser = crate::size::parse_bytes)]
    cache: u64,
    /// Data set size as a multiple of the cache.
    #[arg(long, default_value_t = 4.0)]
    ratio: f64,
    /// Bytes per value.
    #[arg(long, default_value_t = 400)]
    value_size: usize,
    /// Seconds of random reads.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print JSON lines.
    #[arg(long)]
    json: bool,
    /// Run one mode in this process (used by the parent; `direct` or `buffered`).
    #[arg(long, hide = true)]
    child: Option<String>,
}

/// What one mode measured.
#[derive(Debug, Serialize, Deserialize)]
pub struct Outcome {
    mode: String,
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

pub fn run(args: Args) -> Result<()> {
    if let Some(mode) = &args.child {
        let out = measure(&args, mode)?;
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    let exe = std::env::current_exe().context("own executable")?;
    let mut rows = Vec::new();
    for mode in ["direct", "buffered"] {
        let out = Command::new(&exe)
            .args(["bench", "memory", "--child", mode])
            .arg("--dir")
            .arg(&args.dir)
            .args(["--cache", &args.cache.to_string()])
            .args(["--ratio", &args.ratio.to_string()])
            .args(["--value-size", &args.value_size.to_string()])
            .args(["--seconds", &args.seconds.to_string()])
            .output()
            .context("run the measuring child")?;
        if !out.status.success() {
            bail!(
                "{mode} run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let row: Outcome = serde_json::from_slice(&out.stdout).context("child output")?;
        rows.push(row);
    }
    for r in &rows {
        if args.json {
            println!("{}", serde_json::to_string(r)?);
        }
    }
    if !args.json {
        println!(
            "{:<9} {:>9} {:>10} {:>10} {:>14} {:>8} {:>9} {:>9} {:>7}",
            "mode",
            "cache",
            "data file",
            "reads/s",
            "file in OS $",
            "% file",
            "RSS",
            "peak RSS",
            "hit %"
        );
        let mib = |b: u64| format!("{:.0}M", b as f64 / (1 << 20) as f64);
        for r in &rows {
            println!(
                "{:<9} {:>9} {:>10} {:>10.0} {:>14} {:>7.2}% {:>9} {:>9} {:>6.1}%",
                r.mode,
                mib(r.cache_bytes),
                mib(r.data_file_bytes),
                r.reads_per_sec,
                mib(r.data_file_cached_bytes),
                r.data_file_cached_pct,
                mib(r.rss_bytes),
                mib(r.rss_peak_bytes),
                100.0 * r.cache_hit_ratio
            );
        }
        if let [d, b] = rows.as_slice() {
            println!(
                "buffered/direct: memory (RSS + file in OS cache) {:.2}x, reads/s {:.2}x",
                (b.rss_bytes + b.data_file_cached_bytes) as f64
                    / (d.rss_bytes + d.data_file_cached_bytes) as f64,
                b.reads_per_sec / d.reads_per_sec
            );
        }
    }
    Ok(())
}

fn dir_cached_bytes(dir: &Path) -> u64 {
    super::sys::dir_size_and_cached(dir).1
}

fn measure(args: &Args, mode: &str) -> Result<Outcome> {
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
    let per_key = (args.value_size + 16) as f64 * 1.45; // fill and slot overhead
    let keys = (args.cache as f64 * args.ratio / per_key) as u64;
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
        mode: mode.to_string(),
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
