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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use directkv::{CompactReport, Database, Durability, Options, StallHistogram, WriteOptions};
use hdrhistogram::Histogram;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const KEY_BYTES: usize = 16;
const VALUE_BYTES: usize = 1000;
const LOAD_BATCH: u64 = 4000;
const ROW_BYTES: usize = 100;
const ACCOUNTS_PER_SCALE: u64 = 100_000;
const TELLERS_PER_SCALE: u64 = 10;
const PHASES: usize = 3;
/// `Options::page_bytes`, the default.
const PAGE_BYTES: u64 = 8192;
const PHASE_NAMES: [&str; PHASES] = ["before", "compacting", "after"];
/// Tables the rows are spread over.
const TABLES: u64 = 10;
/// How often the main thread looks at `Stats::tables` during the run.
const POLL: Duration = Duration::from_millis(5);
/// The longest dropped tables' freeing may take.
const FREEING_WAIT_MAX: Duration = Duration::from_secs(900);
/// Retries of one transaction on a conflict or deadlock.
const ATTEMPTS_MAX: u32 = 100;

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

/// A small, fast generator (splitmix64): the row values and the choices of
/// the transactions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "a choice among none");
        self.next() % n
    }
}

/// Loads `rows` rows into a new table `name`, in transactions that do not
/// wait for the log, then checkpoints.
fn load_table(db: &Database, name: &str, rows: u64) -> Res<()> {
    let nosync = WriteOptions {
        durability: Some(Durability::NoSyncNotDurable),
        ..WriteOptions::default()
    };
    let mut w = db.begin_write_with(&nosync)?;
    let table = w.create_table(name)?;
    w.commit()?;
    let mut rng = Rng(rows);
    let mut value = vec![0u8; VALUE_BYTES];
    let mut next = 0u64;
    while next < rows {
        let mut w = db.begin_write_with(&nosync)?;
        let end = (next + LOAD_BATCH).min(rows);
        for row in next..end {
            for chunk in value.chunks_mut(8) {
                let r = rng.next().to_le_bytes();
                chunk.copy_from_slice(&r[..chunk.len()]);
            }
            w.table(&table).put(&row_key(row), &value)?;
        }
        w.commit()?;
        next = end;
    }
    Ok(())
}

fn row_key(row: u64) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    key[KEY_BYTES - 8..].copy_from_slice(&row.to_be_bytes());
    key
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

fn tpcb_key(kind: u8, id: u64) -> Vec<u8> {
    let mut k = vec![kind];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn balance_row(balance: i64) -> Vec<u8> {
    let mut row = vec![b' '; ROW_BYTES];
    row[..8].copy_from_slice(&balance.to_le_bytes());
    row
}

/// The TPC-B-like default keyspace: accounts, tellers and branches, all at
/// balance zero.
fn load_tpcb(db: &Database, scale: u64) -> Res<()> {
    let kinds = [
        (b'A', ACCOUNTS_PER_SCALE * scale),
        (b'T', TELLERS_PER_SCALE * scale),
        (b'B', scale),
    ];
    for (kind, n) in kinds {
        let mut id = 0;
        while id < n {
            let mut w = db.begin_write()?;
            let end = (id + LOAD_BATCH).min(n);
            for i in id..end {
                w.put(&tpcb_key(kind, i), &balance_row(0))?;
            }
            w.commit()?;
            id = end;
        }
    }
    db.checkpoint()?;
    Ok(())
}

/// One TPC-B-like transaction of client `client`; returns how long its
/// successful `commit()` took. A conflict or deadlock runs it again.
fn tpcb_txn(db: &Database, rng: &mut Rng, scale: u64, client: usize, seq: u64) -> Res<Duration> {
    let aid = rng.below(ACCOUNTS_PER_SCALE * scale);
    let tid = rng.below(TELLERS_PER_SCALE * scale);
    let bid = rng.below(scale);
    let delta = i64::try_from(rng.below(10_001))? - 5000;
    let keys = [
        tpcb_key(b'A', aid),
        tpcb_key(b'T', tid),
        tpcb_key(b'B', bid),
    ];
    let mut hist_key = tpcb_key(b'H', u64::try_from(client)?);
    hist_key.extend_from_slice(&seq.to_be_bytes());
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r = (|| -> directkv::Result<Duration> {
            let mut w = db.begin_write()?;
            for key in &keys {
                let old = w
                    .get_for_update(key)?
                    .ok_or_else(|| directkv::Error::InvalidArgument(format!("no row {key:?}")))?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&old[..8]);
                w.put(key, &balance_row(i64::from_le_bytes(b) + delta))?;
            }
            w.put(&hist_key, &balance_row(delta)[..50])?;
            let t = Instant::now();
            w.commit()?;
            Ok(t.elapsed())
        })();
        match r {
            Err(e) if e.is_retryable() && attempt < ATTEMPTS_MAX => continue,
            r => return Ok(r?),
        }
    }
}

/// The run's shared state: the phase commits are counted in, and the stop.
struct Shared {
    phase: AtomicUsize,
    stop: AtomicBool,
}

type Latencies = Vec<Histogram<u64>>;

/// A client: TPC-B-like transactions until told to stop, each commit's
/// latency (microseconds) in the histogram of the phase it ended in.
fn client(db: &Database, shared: &Shared, id: usize, scale: u64) -> Res<Latencies> {
    let mut hists: Latencies = (0..PHASES)
        .map(|_| Histogram::new_with_bounds(1, 600_000_000, 3))
        .collect::<Result<_, _>>()?;
    let mut rng = Rng(0xC0FFEE ^ u64::try_from(id)?);
    let mut seq = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let took = tpcb_txn(db, &mut rng, scale, id, seq)?;
        seq += 1;
        let phase = shared.phase.load(Ordering::Relaxed);
        assert!(phase < PHASES, "phase {phase}");
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        hists[phase].saturating_record(us.max(1));
    }
    Ok(hists)
}

/// What the main thread saw at a phase boundary.
#[derive(Clone)]
struct Mark {
    at: Instant,
    commit_wait: StallHistogram,
    tree_lock_wait: StallHistogram,
}

fn mark(db: &Database) -> Mark {
    let s = db.stats();
    Mark {
        at: Instant::now(),
        commit_wait: s.stalls.histograms.commit_wait,
        tree_lock_wait: s.stalls.histograms.tree_lock_wait,
    }
}

fn data_file_bytes(dir: &Path) -> Res<u64> {
    Ok(std::fs::metadata(dir.join("data"))?.len())
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
            (r, t.elapsed(), mark(db))
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
        let (report, took, ended) = compaction.join().map_err(|_| "compaction panicked")?;
        let ended = if within { ended } else { end.clone() };
        Ok(Run {
            marks: [start, begin, ended, end],
            report: report?,
            took,
            within,
        })
    })
}

/// Runs the clients and the compaction; returns the latencies per phase.
fn run_load(db: &Database, args: &Args) -> Res<(Latencies, Run)> {
    let shared = Shared {
        phase: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    };
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..args.clients)
            .map(|id| {
                let shared = &shared;
                s.spawn(move || client(db, shared, id, args.scale))
            })
            .collect();
        let run = conduct(db, &shared, args);
        shared.stop.store(true, Ordering::Relaxed);
        let mut total: Latencies = Vec::new();
        for c in clients {
            let hists = c.join().map_err(|_| "a client panicked")??;
            if total.is_empty() {
                total = hists;
            } else {
                for (t, h) in total.iter_mut().zip(&hists) {
                    t.add(h)?;
                }
            }
        }
        assert_eq!(total.len(), PHASES, "a histogram per phase");
        Ok((total, run?))
    })
}

/// The longest stall of a cause between two marks: exact when the
/// all-time longest grew in between, else bounded by the highest bucket
/// that counted one.
fn max_stall(a: &StallHistogram, b: &StallHistogram) -> String {
    if b.count == a.count {
        return "-".into();
    }
    if b.max_us > a.max_us {
        return format!("{:.1} ms", b.max_us as f64 / 1000.0);
    }
    let top = (0..StallHistogram::BUCKETS)
        .rev()
        .find(|&i| b.buckets[i] > a.buckets[i])
        .expect("a stall was counted in some bucket");
    match StallHistogram::bucket_upper_ms(top) {
        Some(ms) => format!("<= {ms} ms"),
        None => "> 2048 ms".into(),
    }
}

/// The phase table: commits per second, commit latency, and the stalls
/// to enter the commit section (`cw`) and to take the tree lock (`tl`).
fn print_phases(lat: &Latencies, run: &Run) {
    println!(
        "phase          secs commits/s   p50 ms   p99 ms p99.9 ms   max ms \
         cw stalls     cw max tl stalls     tl max"
    );
    for (i, h) in lat.iter().enumerate() {
        let (a, b) = (&run.marks[i], &run.marks[i + 1]);
        let secs = (b.at - a.at).as_secs_f64();
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{:<12} {:>6.1} {:>9.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9} {:>10} {:>9} {:>10}",
            PHASE_NAMES[i],
            secs,
            h.len() as f64 / secs.max(1e-9),
            ms(0.5),
            ms(0.99),
            ms(0.999),
            h.max() as f64 / 1000.0,
            b.commit_wait.count - a.commit_wait.count,
            max_stall(&a.commit_wait, &b.commit_wait),
            b.tree_lock_wait.count - a.tree_lock_wait.count,
            max_stall(&a.tree_lock_wait, &b.tree_lock_wait),
        );
    }
    let (a, b) = (&run.marks[1].commit_wait, &run.marks[2].commit_wait);
    let buckets: Vec<String> = (0..StallHistogram::BUCKETS)
        .filter(|&i| b.buckets[i] > a.buckets[i])
        .map(|i| {
            let upper =
                StallHistogram::bucket_upper_ms(i).map_or("more".into(), |ms| ms.to_string());
            format!("<={upper} ms: {}", b.buckets[i] - a.buckets[i])
        })
        .collect();
    let buckets = if buckets.is_empty() {
        "none".to_string()
    } else {
        buckets.join(", ")
    };
    println!("commit_wait stalls while freeing, by length: {buckets}");
}

/// The data file's pages and free pages, walked by `Database::check`.
fn pages(db: &Database, when: &str) -> Res<(u64, u64)> {
    let t = Instant::now();
    let r = db.check()?;
    assert!(r.free_pages <= r.pages, "free pages are pages of the file");
    println!(
        "{when}: {} pages in the file ({:.1} MiB), {} free (check {:.1} s)",
        r.pages,
        mib(r.pages * PAGE_BYTES),
        r.free_pages,
        t.elapsed().as_secs_f64()
    );
    Ok((r.pages, r.free_pages))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
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
    print_phases(&lat, &run);
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
    let (p1, f1) = pages(db, "after the run")?;
    let file_after = data_file_bytes(&args.dir)?;
    let live_rows = left * u64::try_from(KEY_BYTES + VALUE_BYTES)?;
    let live_tpcb = ACCOUNTS_PER_SCALE * args.scale * u64::try_from(ROW_BYTES + 9)?;
    let live = live_rows + live_tpcb;
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
