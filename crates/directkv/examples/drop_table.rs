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

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use directkv::{Database, Durability, Options, StallHistogram, WriteOptions};
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
const PHASE_NAMES: [&str; PHASES] = ["before drop", "freeing", "after"];
/// How often the main thread looks at `Stats::tables` during the run.
const POLL: Duration = Duration::from_millis(5);
/// The longest the freeing may take after the load stopped.
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
            let mut key = [0u8; KEY_BYTES];
            key[KEY_BYTES - 8..].copy_from_slice(&row.to_be_bytes());
            w.table(&table).put(&key, &value)?;
        }
        w.commit()?;
        next = end;
    }
    db.checkpoint()?;
    Ok(())
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
    pages_freed: u64,
}

fn mark(db: &Database) -> Mark {
    let s = db.stats();
    Mark {
        at: Instant::now(),
        commit_wait: s.stalls.histograms.commit_wait,
        tree_lock_wait: s.stalls.histograms.tree_lock_wait,
        pages_freed: s.tables.dropped_pages_freed,
    }
}

fn data_file_bytes(dir: &Path) -> Res<u64> {
    Ok(std::fs::metadata(dir.join("data"))?.len())
}

/// What the run measured besides the latencies.
struct Run {
    /// Phase boundaries: the start, the drop's begin, the end of the
    /// freeing (or of the load, if the freeing outlasted it), the end.
    marks: [Mark; PHASES + 1],
    drop_took: Duration,
    freeing: Option<Duration>,
    file_before_drop: u64,
}

/// The main thread's part of the run: the drop at a quarter, the phase
/// changes, the stop.
fn conduct(db: &Database, shared: &Shared, args: &Args) -> Res<Run> {
    let start = mark(db);
    let run = Duration::from_secs(args.seconds);
    std::thread::sleep(run / 4);
    let file_before_drop = data_file_bytes(&args.dir)?;
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
    })
}

/// Runs the clients and the drop; returns the latencies per phase.
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
    let freed = db.stats().tables.dropped_pages_freed - begin.pages_freed;
    Ok((took, freed))
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

/// Loads the new table of the same size and reports what it took from the
/// free pages and how much the file grew.
fn refill(db: &Database, args: &Args, rows: u64, run: &Run) -> Res<()> {
    let after_freeing = data_file_bytes(&args.dir)?;
    let (p1, f1) = pages(db, "after the freeing")?;
    let t = Instant::now();
    load_table(db, "big2", rows)?;
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
    load_tpcb(db, args.scale)?;
    println!(
        "loaded {rows} rows ({} MiB) into \"big\" and {} accounts in {:.1} s",
        args.table_mib,
        ACCOUNTS_PER_SCALE * args.scale,
        t.elapsed().as_secs_f64(),
    );
    pages(db, "after the load")?;
    let (lat, run) = run_load(db, args)?;
    print_phases(&lat, &run);
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
