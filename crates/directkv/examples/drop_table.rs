//! Dropping a large table beside a durable commit load: what the commits
//! wait while the dropped table's pages are freed, and whether the freed
//! pages are reused.
//!
//! `cargo run --release -p directkv --example drop_table -- [--dir DIR]
//! [--cache-mib 256] [--table-mib 1024] [--clients 8] [--seconds 30]
//! [--scale 1] [--keep] [--no-background-threads]`
//!
//! DIR (default `/tmp/directkv-drop-table`) must be absent or empty; it is
//! removed at the end unless `--keep`. `--no-background-threads` turns
//! `Options::background_threads` off: each commit then runs one freeing
//! step, instead of the page cleaner. The run:
//!
//! 1. loads the table `big` with `--table-mib` MiB of rows (16-byte keys,
//!    1000-byte values, 4,000 puts per transaction, not waiting for the log)
//!    and a TPC-B-like default keyspace (`--scale` × 100,000 accounts, 10
//!    tellers and 1 branch of 100 bytes), then checkpoints;
//! 2. runs `--clients` threads of durable TPC-B-like transactions for
//!    `--seconds` (each reads an account, a teller and a branch with
//!    `get_for_update`, writes them back and inserts a history row), timing
//!    each `commit()`;
//! 3. drops `big` in its own transaction at a quarter of the run, and splits
//!    the commits in three phases: before the drop, while the dropped
//!    table's pages are freed (`Stats::tables.dropped > 0`), after;
//! 4. prints per phase the commits per second, commit latency percentiles
//!    and the `commit_wait` stalls (waits over 1 ms to enter the commit
//!    section), then loads a new table of the same size and prints the data
//!    file's size before the drop, after the freeing and after the refill.
// Row keys are big-endian numbers so that byte order is numeric order.
#![allow(clippy::big_endian_bytes)]

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use directkv::{Database, Options};

#[path = "common/tpcb.rs"]
mod tpcb;

use tpcb::*;

const PHASE_NAMES: [&str; PHASES] = ["before drop", "freeing", "after"];
/// The longest the freeing may take after the load stopped.
const FREEING_WAIT_MAX: Duration = Duration::from_secs(900);

struct Args {
    dir: PathBuf,
    cache_mib: usize,
    table_mib: u64,
    clients: usize,
    seconds: u64,
    scale: u64,
    keep: bool,
    /// `Options::background_threads` off: each commit runs a freeing step.
    foreground_freeing: bool,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        dir: PathBuf::from("/tmp/directkv-drop-table"),
        cache_mib: 256,
        table_mib: 1024,
        clients: 8,
        seconds: 30,
        scale: 1,
        keep: false,
        foreground_freeing: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--keep" || flag == "--no-background-threads" {
            a.keep |= flag == "--keep";
            a.foreground_freeing |= flag == "--no-background-threads";
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
            _ => return Err(format!("unknown argument {flag}").into()),
        }
    }
    Ok(a)
}

/// What the run measured besides the latencies.
struct Run {
    /// Phase boundaries: the start, the drop's begin, the end of the
    /// freeing (or of the load, if the freeing outlasted it), the end.
    marks: [Mark; PHASES + 1],
    drop_took: Duration,
    freeing: Option<Duration>,
    file_before_drop: u64,
    /// Dropped tables' pages freed since open when the drop began.
    freed_before_drop: u64,
}

/// The main thread's part of the run: the drop at a quarter, the phase
/// changes, the stop.
fn conduct(db: &Database, shared: &Shared, args: &Args) -> Res<Run> {
    let start = mark(db);
    let run = Duration::from_secs(args.seconds);
    std::thread::sleep(run / 4);
    let file_before_drop = data_file_bytes(&args.dir)?;
    let freed_before_drop = db.stats().tables.dropped_pages_freed;
    let begin = mark(db);
    shared.phase.store(1, Ordering::Relaxed);
    let t = Instant::now();
    let mut w = db.begin_write()?;
    w.drop_table("big")?;
    w.commit()?;
    let drop_took = t.elapsed();
    let mut freed = None;
    while start.at.elapsed() < run {
        if freed.is_none() && db.stats().tables.dropped == 0 {
            freed = Some(mark(db));
            shared.phase.store(2, Ordering::Relaxed);
        }
        std::thread::sleep(POLL);
    }
    let end = mark(db);
    shared.stop.store(true, Ordering::Relaxed);
    let freeing = freed.as_ref().map(|f| f.at - begin.at);
    Ok(Run {
        marks: [start, begin, freed.unwrap_or_else(|| end.clone()), end],
        drop_took,
        freeing,
        file_before_drop,
        freed_before_drop,
    })
}

/// Runs the clients and the drop; returns the latencies per phase.
fn run_load(db: &Database, args: &Args) -> Res<(Latencies, Run)> {
    run_clients(db, args.clients, args.scale, |shared| {
        conduct(db, shared, args)
    })
}

/// Waits for the freeing to end when it outlasted the load; returns how
/// long it took since the drop began and the pages freed.
fn finish_freeing(db: &Database, run: &Run) -> Res<(Duration, u64)> {
    let begin = &run.marks[1];
    let took = match run.freeing {
        Some(d) => d,
        None => {
            while db.stats().tables.dropped > 0 {
                if begin.at.elapsed() > FREEING_WAIT_MAX {
                    return Err("the dropped table was not freed in time".into());
                }
                std::thread::sleep(POLL);
            }
            begin.at.elapsed()
        }
    };
    let freed = db.stats().tables.dropped_pages_freed - run.freed_before_drop;
    Ok((took, freed))
}

/// Loads the new table of the same size and reports what it took from the
/// free pages and how much the file grew.
fn refill(db: &Database, args: &Args, rows: u64, run: &Run) -> Res<()> {
    let after_freeing = data_file_bytes(&args.dir)?;
    let (p1, f1) = pages(db, "after the freeing")?;
    let t = Instant::now();
    load_table(db, "big2", rows)?;
    db.checkpoint()?;
    println!("refill: {rows} rows in {:.1} s", t.elapsed().as_secs_f64());
    let after_refill = data_file_bytes(&args.dir)?;
    let (p2, f2) = pages(db, "after the refill")?;
    assert!(p2 >= p1, "the file's pages never shrink");
    println!(
        "pages in use: {} after the freeing, {} after the refill (the new table: {})",
        p1 - f1,
        p2 - f2,
        (p2 - f2) - (p1 - f1)
    );
    println!(
        "the refill took {} free pages and {} new pages ({:+.1} MiB)",
        f1.saturating_sub(f2),
        p2 - p1,
        mib((p2 - p1) * PAGE_BYTES)
    );
    println!(
        "data file: {:.1} MiB before the drop, {:.1} after freeing, {:.1} after the refill ({:+.1} MiB)",
        mib(run.file_before_drop),
        mib(after_freeing),
        mib(after_refill),
        mib(after_refill) - mib(run.file_before_drop)
    );
    Ok(())
}

fn bench(db: &Database, args: &Args) -> Res<()> {
    let rows = (args.table_mib << 20) / u64::try_from(KEY_BYTES + VALUE_BYTES)?;
    let t = Instant::now();
    load_table(db, "big", rows)?;
    db.checkpoint()?;
    load_tpcb(db, args.scale)?;
    println!(
        "loaded {rows} rows ({} MiB) into \"big\" and {} accounts in {:.1} s",
        args.table_mib,
        ACCOUNTS_PER_SCALE * args.scale,
        t.elapsed().as_secs_f64(),
    );
    pages(db, "after the load")?;
    let (lat, run) = run_load(db, args)?;
    print_phases(&lat, &run.marks, PHASE_NAMES);
    let (took, freed) = finish_freeing(db, &run)?;
    println!(
        "drop transaction {:.2} ms; freeing {:.2} s{} ({freed} pages)",
        run.drop_took.as_secs_f64() * 1000.0,
        took.as_secs_f64(),
        if run.freeing.is_none() {
            ", finished after the load stopped"
        } else {
            ""
        }
    );
    refill(db, args, rows, &run)
}

fn main() -> Res<()> {
    let args = parse_args()?;
    if args.dir.exists() && std::fs::read_dir(&args.dir)?.next().is_some() {
        return Err(format!("{} is not empty", args.dir.display()).into());
    }
    let opts = Options {
        cache_bytes: args.cache_mib << 20,
        background_threads: !args.foreground_freeing,
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
