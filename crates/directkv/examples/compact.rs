//! Compacting a database beside a durable commit load: how much of the
//! data file a compaction gives back, what the commits around it do, and
//! whether the operating system caches any of the file.
//!
//! `cargo run --release -p directkv --example compact -- [--dir DIR]
//! [--cache-mib 256] [--table-mib 1024] [--clients 8] [--seconds 30]
//! [--scale 1] [--reduce range|random|drop] [--keep]`
//!
//! DIR (default `/tmp/directkv-compact`) must be absent or empty; it is
//! removed at the end unless `--keep`. The run:
//!
//! 1. loads `--table-mib` MiB of rows (16-byte keys, 1000-byte values, 4,000
//!    puts per transaction, not waiting for the log) into ten tables
//!    `big0`..`big9` and a TPC-B-like default keyspace (`--scale` × 100,000
//!    accounts, 10 tellers and 1 branch of 100 bytes), then checkpoints;
//! 2. reduces the tables to a tenth: `range` deletes the first 90% of each
//!    table's keys, `random` 90% of the rows chosen at random, `drop` drops
//!    nine of the ten tables (and waits for their pages to be freed);
//! 3. runs `--clients` threads of durable TPC-B-like transactions for
//!    `--seconds` (each reads an account, a teller and a branch with
//!    `get_for_update`, writes them back and inserts a history row), timing
//!    each `commit()`, and calls `Database::compact()` at a quarter of the
//!    run; the commits fall in three phases: before the compaction, during
//!    it, after it;
//! 4. prints per phase the commits per second, commit latency percentiles
//!    and the `commit_wait` stalls, then the compaction's report, the data
//!    file's size against the live data (the rows' bytes, and the pages in
//!    use), and the data file's bytes in the operating system's page cache
//!    (`fincore`).
// Row keys are big-endian numbers so that byte order is numeric order.
#![allow(clippy::big_endian_bytes)]

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use directkv::{CompactReport, Database, Durability, Options, WriteOptions};

#[path = "common/tpcb.rs"]
mod tpcb;

use tpcb::*;

const PHASE_NAMES: [&str; PHASES] = ["before", "compacting", "after"];
/// Tables the rows are spread over.
const TABLES: u64 = 10;
/// The longest dropped tables' freeing may take.
const FREEING_WAIT_MAX: Duration = Duration::from_secs(900);

struct Args {
    dir: PathBuf,
    cache_mib: usize,
    table_mib: u64,
    clients: usize,
    seconds: u64,
    scale: u64,
    keep: bool,
    reduce: Reduce,
}

/// How the tables are reduced to a tenth.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reduce {
    /// The first 90% of each table's keys deleted.
    Range,
    /// 90% of the rows, chosen at random, deleted.
    Random,
    /// Nine of the ten tables dropped.
    Drop,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        dir: PathBuf::from("/tmp/directkv-compact"),
        cache_mib: 256,
        table_mib: 1024,
        clients: 8,
        seconds: 30,
        scale: 1,
        keep: false,
        reduce: Reduce::Range,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--keep" {
            a.keep = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || -> Res<u64> {
            let n: u64 = value.parse().map_err(|_| format!("{flag} {value:?}"))?;
            if n == 0 {
                return Err(format!("{flag} must be at least 1").into());
            }
            Ok(n)
        };
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(&value),
            "--cache-mib" => a.cache_mib = usize::try_from(num()?)?,
            "--table-mib" => a.table_mib = num()?,
            "--clients" => a.clients = usize::try_from(num()?)?,
            "--seconds" => a.seconds = num()?,
            "--scale" => a.scale = num()?,
            "--reduce" => {
                a.reduce = match value.as_str() {
                    "range" => Reduce::Range,
                    "random" => Reduce::Random,
                    "drop" => Reduce::Drop,
                    _ => return Err(format!("--reduce {value:?}: range, random or drop").into()),
                }
            }
            _ => return Err(format!("unknown argument {flag}").into()),
        }
    }
    Ok(a)
}

/// Reduces the tables `big0`..`big9` of `rows` rows each to a tenth (see
/// [`Reduce`]); returns the rows left in all.
fn reduce(db: &Database, how: Reduce, rows: u64) -> Res<u64> {
    let nosync = WriteOptions {
        durability: Some(Durability::NoSyncNotDurable),
        ..WriteOptions::default()
    };
    let mut left = 0;
    let mut rng = Rng(7);
    for t in 0..TABLES {
        let name = format!("big{t}");
        if how == Reduce::Drop {
            if t > 0 {
                let mut w = db.begin_write_with(&nosync)?;
                w.drop_table(&name)?;
                w.commit()?;
            } else {
                left += rows;
            }
            continue;
        }
        let mut row = 0;
        while row < rows {
            let mut w = db.begin_write_with(&nosync)?;
            let table = w.open_table(&name)?;
            let end = (row + LOAD_BATCH).min(rows);
            for r in row..end {
                let gone = match how {
                    Reduce::Range => r < rows / 10 * 9,
                    _ => rng.below(10) < 9,
                };
                if gone {
                    w.table(&table).delete(&row_key(r))?;
                } else {
                    left += 1;
                }
            }
            w.commit()?;
            row = end;
        }
    }
    let t = Instant::now();
    while db.stats().tables.dropped > 0 {
        if t.elapsed() > FREEING_WAIT_MAX {
            return Err("the dropped tables were not freed in time".into());
        }
        std::thread::sleep(POLL);
    }
    db.checkpoint()?;
    Ok(left)
}

/// What the run measured besides the latencies.
struct Run {
    /// Phase boundaries: the start, the compaction's begin and end (or
    /// the load's end, if the compaction outlasted it), the end.
    marks: [Mark; PHASES + 1],
    report: CompactReport,
    took: Duration,
    /// Whether the compaction ended before the load.
    within: bool,
    /// The data file's pages when the compaction returned.
    at_cut: directkv::SpaceStats,
}

/// The main thread's part of the run: the compaction at a quarter (on a
/// thread of its own), the phase changes, the stop.
fn conduct(db: &Database, shared: &Shared, args: &Args) -> Res<Run> {
    let start = mark(db);
    let run = Duration::from_secs(args.seconds);
    std::thread::sleep(run / 4);
    let begin = mark(db);
    shared.phase.store(1, Ordering::Relaxed);
    std::thread::scope(|s| {
        let compaction = s.spawn(|| {
            let t = Instant::now();
            let r = db.compact();
            shared.phase.store(2, Ordering::Relaxed);
            let space = db.stats().space;
            (r, t.elapsed(), mark(db), space)
        });
        while start.at.elapsed() < run && !compaction.is_finished() {
            std::thread::sleep(POLL);
        }
        let within = compaction.is_finished();
        let end_of_load = (!within).then(|| mark(db));
        if within {
            std::thread::sleep(run.saturating_sub(start.at.elapsed()));
        }
        let end = end_of_load.unwrap_or_else(|| mark(db));
        shared.stop.store(true, Ordering::Relaxed);
        let (report, took, ended, at_cut) = compaction.join().map_err(|_| "compaction panicked")?;
        let ended = if within { ended } else { end.clone() };
        Ok(Run {
            marks: [start, begin, ended, end],
            report: report?,
            took,
            within,
            at_cut,
        })
    })
}

/// Runs the clients and the compaction; returns the latencies per phase.
fn run_load(db: &Database, args: &Args) -> Res<(Latencies, Run)> {
    run_clients(db, args.clients, args.scale, |shared| {
        conduct(db, shared, args)
    })
}

/// The data file's bytes in the operating system's page cache, as
/// `fincore` reports them (`None` where it does not run).
fn page_cache_bytes(dir: &Path) -> Option<u64> {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(dir.join("data"))
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

fn bench(db: &Database, args: &Args) -> Res<()> {
    let rows = (args.table_mib << 20) / u64::try_from(KEY_BYTES + VALUE_BYTES)? / TABLES;
    let t = Instant::now();
    for i in 0..TABLES {
        load_table(db, &format!("big{i}"), rows)?;
    }
    load_tpcb(db, args.scale)?;
    println!(
        "loaded {} rows ({} MiB) into {TABLES} tables and {} accounts in {:.1} s",
        rows * TABLES,
        args.table_mib,
        ACCOUNTS_PER_SCALE * args.scale,
        t.elapsed().as_secs_f64(),
    );
    pages(db, "after the load")?;
    let t = Instant::now();
    let left = reduce(db, args.reduce, rows)?;
    println!(
        "reduced ({:?}) to {left} rows in {:.1} s",
        args.reduce,
        t.elapsed().as_secs_f64()
    );
    let (p0, f0) = pages(db, "before the run")?;
    let file_before = data_file_bytes(&args.dir)?;
    let (lat, run) = run_load(db, args)?;
    print_phases(&lat, &run.marks, PHASE_NAMES);
    println!(
        "compaction {:.2} s{}: {:?}",
        run.took.as_secs_f64(),
        if run.within {
            ""
        } else {
            ", ended after the load"
        },
        run.report
    );
    let s = &run.at_cut;
    let in_use = (s.pages - 1 - s.free_pages.unwrap_or(0)) * PAGE_BYTES;
    println!(
        "when it returned: file {:.1} MiB, {} pages ({:.1} MiB), in use {:.1} MiB: \
         file / in use {:.2}, pages / in use {:.2}",
        mib(run.report.file_bytes_after),
        s.pages,
        mib(s.pages * PAGE_BYTES),
        mib(in_use),
        run.report.file_bytes_after as f64 / in_use as f64,
        (s.pages * PAGE_BYTES) as f64 / in_use as f64
    );
    let (p1, f1) = pages(db, "after the run")?;
    let file_after = data_file_bytes(&args.dir)?;
    let live_rows = left * u64::try_from(KEY_BYTES + VALUE_BYTES)?;
    let live_tpcb = ACCOUNTS_PER_SCALE * args.scale * u64::try_from(ROW_BYTES + 9)?;
    let live = live_rows + live_tpcb;
    // Each commit adds a history row: a 17-byte key and a 50-byte value.
    let history = (lat[0].len() + lat[1].len()) * 67;
    println!(
        "live data when it returned (rows, accounts, history) {:.1} MiB: file / live data {:.2}",
        mib(live + history),
        run.report.file_bytes_after as f64 / (live + history) as f64
    );
    println!(
        "data file {:.1} MiB before, {:.1} MiB after; pages in use {} before, {} after",
        mib(file_before),
        mib(file_after),
        p0 - f0,
        p1 - f1
    );
    println!(
        "live data {:.1} MiB (rows and accounts): file / live data {:.2}; file / pages in use {:.2}",
        mib(live),
        file_after as f64 / live as f64,
        file_after as f64 / ((p1 - f1) * PAGE_BYTES) as f64
    );
    match page_cache_bytes(&args.dir) {
        Some(b) => println!("data file bytes in the OS page cache: {b}"),
        None => println!("data file bytes in the OS page cache: fincore did not run"),
    }
    Ok(())
}

fn main() -> Res<()> {
    let args = parse_args()?;
    if args.dir.exists() && std::fs::read_dir(&args.dir)?.next().is_some() {
        return Err(format!("{} is not empty", args.dir.display()).into());
    }
    let opts = Options {
        cache_bytes: args.cache_mib << 20,
        ..Options::default()
    };
    let db = Database::open(&args.dir, opts)?;
    let r = bench(&db, &args);
    db.close()?;
    if !args.keep {
        std::fs::remove_dir_all(&args.dir)?;
    }
    r
}
