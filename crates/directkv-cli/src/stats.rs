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
    #[arg(long, value_parser = crate::bench::parse_seconds)]
    watch: Option<f64>,
}

pub fn run(args: Args) -> Result<()> {
    loop {
        let path = args.dir.join(directkv::STATS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
                "{} has no {}: {}",
                args.dir.display(),
                directkv::STATS_FILE,
                who_holds(&args.dir)
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

/// Why no stats are published, as far as the database's `LOCK` tells: open
/// in a process that does not publish, or not open at all. Looks without
/// creating or changing anything.
fn who_holds(dir: &std::path::Path) -> String {
    use std::os::fd::AsRawFd;
    let not_open = "the database is not open in any process";
    let Ok(file) = std::fs::File::open(dir.join("LOCK")) else {
        return format!("{not_open} (it has no LOCK file)");
    };
    // SAFETY: flock on a descriptor this function owns; a shared, non-blocking
    // try that is released when `file` closes.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if rc == 0 {
        return not_open.to_string();
    }
    let holder = std::fs::read_to_string(dir.join("LOCK")).unwrap_or_default();
    format!(
        "the database is open ({}) but does not publish its stats (opened without \
         background threads, or with publish_stats off)",
        holder.trim()
    )
}

fn print_human(doc: &Value) {
    let s = &doc["stats"];
    print_header(doc, s);
    print_tables(s);
    print_space(s);
    print_io(s);
    print_waits(s);
}

/// The process, the cache, the data file's and the log's I/O paths.
fn print_header(doc: &Value, s: &Value) {
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
    let w = |cause: &str| s["writes_by_cause"][cause].as_u64().unwrap_or(0);
    println!(
        "data file  pages read {} written {} (cleaner {}, evictions {}, checkpoints {}, \
         shutdown {}, recovery {}), readahead {}",
        n("pages_read"),
        n("pages_written"),
        w("cleaner"),
        w("eviction"),
        w("checkpoint"),
        w("shutdown"),
        w("recovery"),
        n("readahead_reads")
    );
    let io = &s["data_io"];
    let path = match io["kind"].as_str().unwrap_or("?") {
        "buffered_fallback" => format!(
            "buffered (fallback: {} refuses O_DIRECT)",
            io["fs_type"].as_str().unwrap_or("the filesystem")
        ),
        kind => kind.to_string(),
    };
    println!(
        "I/O path   data file {path}; WAL sync {}{}",
        s["wal_sync"]["method"].as_str().unwrap_or("?"),
        if s["wal_sync"]["direct"].as_bool() == Some(true) {
            "+direct"
        } else {
            ""
        }
    );
}

/// The data file's pages, used and free.
fn print_space(s: &Value) {
    let sp = &s["space"];
    let n = |k: &str| sp[k].as_u64().unwrap_or(0);
    let mib = |pages: u64| (pages * n("page_bytes")) as f64 / (1 << 20) as f64;
    let free = match sp["free_pages"].as_u64() {
        Some(f) => format!("{f} free ({:.1} MiB)", mib(f)),
        None => "free pages not counted (last written by an older build)".into(),
    };
    let compactable = match sp["compactable_pages"].as_u64() {
        Some(c) if c > 0 => format!("; `directkv compact` would give back {:.1} MiB", mib(c)),
        _ => String::new(),
    };
    let compacting = match sp["compacting_to"].as_u64() {
        Some(b) => format!("; a compaction to {b} pages is under way"),
        None => String::new(),
    };
    println!(
        "space      {} pages ({:.1} MiB), {free}{compactable}{compacting}",
        n("pages"),
        mib(n("pages"))
    );
}

/// Named tables, when there are any.
fn print_tables(s: &Value) {
    let t = &s["tables"];
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    if n("tables") + n("dropped") + n("dropped_pages_freed") == 0 {
        return;
    }
    println!(
        "tables     {} holding {} pages (dropped, not yet freed: {}; pages freed since open: {})",
        n("tables"),
        n("pages"),
        n("dropped"),
        n("dropped_pages_freed")
    );
    let largest = t["largest"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for e in largest {
        let name = match e["dropped"].as_bool() {
            Some(true) => "(dropped)",
            _ => e["name"].as_str().unwrap_or("?"),
        };
        let id = e["id"].as_u64().unwrap_or(0);
        println!(
            "  {:>10} pages  {name} (id {id})",
            e["pages"].as_u64().unwrap_or(0)
        );
    }
    let listed = largest.len() as u64;
    if n("tables") + n("dropped") > listed {
        println!(
            "  ... and {} smaller tables",
            n("tables") + n("dropped") - listed
        );
    }
}

/// Asynchronous I/O and the log.
fn print_io(s: &Value) {
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
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
    let wal = |k: &str| s["wal"][k].as_u64().unwrap_or(0);
    println!(
        "           {} flushes, {:.1} records each, {:.0} µs each writing and syncing",
        wal("flushes"),
        wal("records") as f64 / wal("flushes").max(1) as f64,
        wal("flush_us") as f64 / wal("flushes").max(1) as f64
    );
    // Every request of the database's files passes the scheduler.
    let sched = &s["io_scheduler"];
    let by_class = |k: &str| -> Vec<u64> {
        sched[k]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(0)).collect())
            .unwrap_or_default()
    };
    let (requests, permits) = (by_class("requests"), by_class("admitted"));
    let classes = ["wal", "read", "urgent", "background", "backup"];
    let each: Vec<String> = classes
        .iter()
        .zip(requests.iter().zip(&permits))
        .map(|(c, (r, p))| format!("{c} {r} ({p} permits)"))
        .collect();
    println!(
        "scheduler  requests by class: {}; {} background waits",
        each.join(", "),
        sched["background_waits"].as_u64().unwrap_or(0)
    );
}

/// Foreground waits by cause, with their stall histograms.
fn print_waits(s: &Value) {
    println!("foreground waits by cause (all of them: count, mean), then the stalls over 1 ms:");
    let labels: Vec<String> = (0..directkv::StallHistogram::BUCKETS)
        .map(|i| match directkv::StallHistogram::bucket_upper_ms(i) {
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
