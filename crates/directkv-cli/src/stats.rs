//! `directkv stats DBDIR`: the counters an open database publishes every
//! second (`stats.json` in its directory): cache, I/O, WAL, checkpoints, the
//! page cleaner and readahead, and foreground stalls by cause with their
//! histograms.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Options of `directkv stats`.
#[derive(clap::Args)]
pub struct Args {
    /// The database directory.
    dir: PathBuf,
    /// Print the published JSON as it is.
    #[arg(long)]
    json: bool,
    /// Print again every N seconds until interrupted.
    #[arg(long)]
    watch: Option<f64>,
}

pub fn run(args: Args) -> Result<()> {
    loop {
        let path = args.dir.join(directkv::STATS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "{} has no {}: the database is not open in any process (an open \
                 database publishes its stats every second, unless opened without \
                 background threads)",
                args.dir.display(),
                directkv::STATS_FILE
            ),
            Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
        };
        let doc: Value = serde_json::from_str(&text).context("parse the published stats")?;
        if args.json {
            println!("{doc}");
        } else {
            print_human(&doc);
        }
        match args.watch {
            Some(secs) if secs > 0.0 => std::thread::sleep(Duration::from_secs_f64(secs)),
            _ => return Ok(()),
        }
    }
}

fn print_human(doc: &Value) {
    let s = &doc["stats"];
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let age_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .saturating_sub(doc["unix_ms"].as_u64().unwrap_or(0));
    println!(
        "process {}, published {:.1} s ago",
        doc["pid"],
        age_ms as f64 / 1000.0
    );
    let hits = n("cache_hits");
    let total = (hits + n("cache_misses")).max(1);
    println!(
        "cache      hits {} misses {} ({:.2}% hit), dirty pages {}",
        hits,
        n("cache_misses"),
        100.0 * hits as f64 / total as f64,
        n("dirty_pages")
    );
    println!(
        "data file  pages read {} written {} (cleaner {}, evictions {}), readahead {}",
        n("pages_read"),
        n("pages_written"),
        n("cleaner_writes"),
        n("eviction_writes"),
        n("readahead_reads")
    );
    let aio = &s["async_io"];
    let an = |k: &str| aio[k].as_u64().unwrap_or(0);
    println!(
        "async I/O  {}: {} batches, {} requests, up to {} in flight, {} with fixed buffers; \
         {:.2} pages per data write{}",
        aio["backend"].as_str().unwrap_or("?"),
        an("batches"),
        an("requests"),
        an("max_in_flight"),
        an("fixed_buffer_requests"),
        n("pages_written") as f64 / n("write_requests").max(1) as f64,
        aio["note"]
            .as_str()
            .map(|note| format!(" ({note})"))
            .unwrap_or_default()
    );
    println!(
        "WAL        {} bytes, {} commits, {} checkpoints, {} full-page images ({} bytes)",
        n("wal_bytes"),
        n("commits"),
        n("checkpoints"),
        n("full_page_images"),
        n("full_page_image_bytes")
    );
    println!("foreground waits by cause (all of them: count, mean), then the stalls over 1 ms:");
    let labels: Vec<String> = (0..directkv::internals::stall::BUCKETS)
        .map(|i| match directkv::internals::stall::bucket_upper_ms(i) {
            Some(ms) => format!("<={ms}ms"),
            None => "longer".into(),
        })
        .collect();
    if let Some(hists) = s["stalls"]["histograms"].as_object() {
        for (cause, h) in hists {
            let count = h["count"].as_u64().unwrap_or(0);
            let waits = h["waits"].as_u64().unwrap_or(0);
            let mean_us = h["waited_us"].as_u64().unwrap_or(0) as f64 / waits.max(1) as f64;
            let mut line = format!(
                "  {cause:<17} {waits:>10} {mean_us:>9.1} us  stalls {count:>8}  max {:>8.1} ms",
                h["max_us"].as_u64().unwrap_or(0) as f64 / 1000.0
            );
            if let Some(b) = h["buckets"].as_array() {
                for (label, c) in labels.iter().zip(b) {
                    let c = c.as_u64().unwrap_or(0);
                    if c > 0 {
                        line.push_str(&format!("  {label}:{c}"));
                    }
                }
            }
            println!("{line}");
        }
    }
}
