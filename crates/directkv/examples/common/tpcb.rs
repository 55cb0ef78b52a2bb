//! What the examples that run a durable TPC-B-like load beside some
//! maintenance share: the rows they load, the load's transactions and
//! clients, and the phase table they print.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use directkv::{Database, Durability, StallHistogram, WriteOptions};
use hdrhistogram::Histogram;

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const KEY_BYTES: usize = 16;
pub const VALUE_BYTES: usize = 1000;
pub const LOAD_BATCH: u64 = 4000;
pub const ROW_BYTES: usize = 100;
pub const ACCOUNTS_PER_SCALE: u64 = 100_000;
const TELLERS_PER_SCALE: u64 = 10;
pub const PHASES: usize = 3;
/// `Options::page_bytes`, the default.
pub const PAGE_BYTES: u64 = 8192;
/// How often the main thread looks at the database's figures.
pub const POLL: Duration = Duration::from_millis(5);
/// Retries of one transaction on a conflict or deadlock.
const ATTEMPTS_MAX: u32 = 100;

/// A small, fast generator (splitmix64): the row values and the choices of
/// the transactions.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "a choice among none");
        self.next() % n
    }
}

/// Loads `rows` rows into a new table `name`, in transactions that do not
/// wait for the log, then checkpoints.
pub fn load_table(db: &Database, name: &str, rows: u64) -> Res<()> {
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

/// The key of row `row`: big-endian, so that key order is row order.
pub fn row_key(row: u64) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    key[KEY_BYTES - 8..].copy_from_slice(&row.to_be_bytes());
    key
}

pub fn tpcb_key(kind: u8, id: u64) -> Vec<u8> {
    let mut k = vec![kind];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

pub fn balance_row(balance: i64) -> Vec<u8> {
    let mut row = vec![b' '; ROW_BYTES];
    row[..8].copy_from_slice(&balance.to_le_bytes());
    row
}

/// The TPC-B-like default keyspace: accounts, tellers and branches, all at
/// balance zero.
pub fn load_tpcb(db: &Database, scale: u64) -> Res<()> {
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
pub fn tpcb_txn(
    db: &Database,
    rng: &mut Rng,
    scale: u64,
    client: usize,
    seq: u64,
) -> Res<Duration> {
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
pub struct Shared {
    pub phase: AtomicUsize,
    pub stop: AtomicBool,
}

pub type Latencies = Vec<Histogram<u64>>;

/// A client: TPC-B-like transactions until told to stop, each commit's
/// latency (microseconds) in the histogram of the phase it ended in.
pub fn client(db: &Database, shared: &Shared, id: usize, scale: u64) -> Res<Latencies> {
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
pub struct Mark {
    pub at: Instant,
    pub commit_wait: StallHistogram,
    pub tree_lock_wait: StallHistogram,
    /// Commits that missed a page in the commit section, and descents a
    /// structure change sent back, so far.
    pub misses: (u64, u64),
}

pub fn mark(db: &Database) -> Mark {
    let s = db.stats();
    Mark {
        at: Instant::now(),
        commit_wait: s.stalls.histograms.commit_wait,
        tree_lock_wait: s.stalls.histograms.tree_lock_wait,
        misses: (s.transactions.commit_misses, s.transactions.shape_retries),
    }
}

pub fn data_file_bytes(dir: &Path) -> Res<u64> {
    Ok(std::fs::metadata(dir.join("data"))?.len())
}

/// The longest stall of a cause between two marks: exact when the
/// all-time longest grew in between, else bounded by the highest bucket
/// that counted one.
pub fn max_stall(a: &StallHistogram, b: &StallHistogram) -> String {
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
pub fn print_phases(lat: &Latencies, marks: &[Mark; PHASES + 1], names: [&str; PHASES]) {
    println!(
        "phase          secs commits/s   p50 ms   p99 ms p99.9 ms   max ms \
         cw stalls     cw max tl stalls     tl max"
    );
    for (i, h) in lat.iter().enumerate() {
        let (a, b) = (&marks[i], &marks[i + 1]);
        let secs = (b.at - a.at).as_secs_f64();
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{:<12} {:>6.1} {:>9.0} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9} {:>10} {:>9} {:>10}",
            names[i],
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
    for (i, name) in names.iter().enumerate() {
        let (a, b) = (marks[i].misses, marks[i + 1].misses);
        println!(
            "{name}: commits that missed a page {}, descents sent back {}",
            b.0 - a.0,
            b.1 - a.1
        );
    }
    let (a, b) = (&marks[1].commit_wait, &marks[2].commit_wait);
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
    println!(
        "commit_wait stalls while {}, by length: {buckets}",
        names[1]
    );
}

/// The data file's pages and free pages, walked by `Database::check`.
pub fn pages(db: &Database, when: &str) -> Res<(u64, u64)> {
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

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// Runs `clients` clients of TPC-B-like transactions while `conduct` runs
/// on this thread, stops them when it returns, and returns their
/// latencies per phase with what `conduct` returned.
pub fn run_clients<R>(
    db: &Database,
    clients: usize,
    scale: u64,
    conduct: impl FnOnce(&Shared) -> Res<R>,
) -> Res<(Latencies, R)> {
    let shared = Shared {
        phase: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    };
    std::thread::scope(|s| {
        let clients: Vec<_> = (0..clients)
            .map(|id| {
                let shared = &shared;
                s.spawn(move || client(db, shared, id, scale))
            })
            .collect();
        let run = conduct(&shared);
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
