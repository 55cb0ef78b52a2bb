//! One seed of the crash campaign: random knobs, random transactions, a power
//! failure at a random operation, a crash that loses and tears unsynced writes,
//! recovery (sometimes itself crashed), and the checks of RELIABILITY.md:
//! - I1: every acknowledged commit is present;
//! - I2/I3: the recovered state equals the state after some prefix of the
//!   commit order (whole transactions only);
//! - I6: a crash during recovery, then recovery again, gives such a state too;
//! - I7: failures surface as errors, never panics (a panic fails the seed).
//!
//! Everything follows from the seed, so a failure replays exactly with
//! `directkv sim --seeds 1 --from SEED`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use super::damage::{self, Outcome, Snapshot};
use super::disk::SimStorage;
use super::rng::Rng;
use crate::db::{Database, Durability, Isolation, Options, ReadTxn, WriteOptions, WriteTxn};
use crate::error::Error;
use crate::io::{DirectIo, FaultOp, FaultyStorage, Storage, SyncMethod, SyncVariant};

/// What a passing seed did.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Commits acknowledged across all rounds.
    pub acked: u64,
    /// Crashes simulated.
    pub crashes: u64,
    /// Commits acknowledged while another logical thread's write
    /// transaction was open beside them.
    pub overlapped: u64,
    /// Transactions refused as conflicts, at commit or (under Snapshot) at
    /// a write (nothing of them applied).
    pub refused: u64,
    /// The knobs the seed chose.
    pub knobs: String,
}

/// A seed whose run broke an invariant.
#[derive(Debug, Clone)]
pub struct SeedFailure {
    /// The seed.
    pub seed: u64,
    /// The knobs it chose.
    pub knobs: String,
    /// What went wrong.
    pub what: String,
}

impl fmt::Display for SeedFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed ({}): {}\nreplay: directkv sim --seeds 1 --from {}",
            self.seed, self.knobs, self.what, self.seed
        )
    }
}

type Txn = Vec<(Vec<u8>, Option<Vec<u8>>)>;

fn knobs(rng: &mut Rng) -> (Options, String) {
    let page = [4096u32, 8192, 16384][rng.range(0, 3) as usize];
    let frames = rng.range(24, 160) as usize;
    let method = SyncMethod::DURABLE[rng.range(0, 5) as usize];
    let segment = (64u64 << 10) << rng.range(0, 4);
    let checkpoint = (32u64 << 10) << rng.range(0, 6);
    let compress = rng.range(0, 4) != 0;
    let opts = Options {
        cache_bytes: frames * page as usize,
        page_bytes: page,
        direct_io: DirectIo::Auto,
        wal_sync: Some(SyncVariant {
            method,
            direct: true,
        }),
        durability: Durability::Sync,
        wal_segment_bytes: segment,
        checkpoint_wal_bytes: checkpoint,
        background_threads: false,
        data_extend_bytes: 0,
        compress_page_images: compress,
        publish_stats: false,
        ..Options::default()
    };
    assert!(
        opts.wal_sync.is_some_and(|v| v.method.is_durable()),
        "the simulator checks durability"
    );
    assert!(
        !opts.background_threads,
        "a seed replays only without background threads"
    );
    let text = format!(
        "page {page}, cache {frames} pages, sync {method}, segment {segment}, checkpoint every \
         {checkpoint} bytes of WAL, page images {}",
        if compress { "compressed" } else { "whole" }
    );
    (opts, text)
}

fn random_txn(rng: &mut Rng, n: u64) -> Txn {
    let mut ops = Vec::new();
    for _ in 0..rng.range(1, 8) {
        let key = format!("k{:03}", rng.range(0, 200)).into_bytes();
        if rng.chance(1, 4) {
            ops.push((key, None));
        } else {
            let len = match rng.range(0, 10) {
                0 => rng.range(2000, 9000),
                1..=3 => rng.range(100, 600),
                _ => rng.range(0, 60),
            } as usize;
            let fill = rng.next_u64() as u8;
            ops.push((key, Some(vec![fill; len])));
        }
    }
    ops.push((b"next".to_vec(), Some((n + 1).to_le_bytes().to_vec())));
    assert!(
        ops.len() >= 2 && ops.len() <= 8,
        "a transaction changes 1 to 7 keys and the counter"
    );
    ops
}

fn model(log: &[Txn], upto: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    assert!(
        upto as usize <= log.len(),
        "the model replays only transactions it has"
    );
    let mut m = BTreeMap::new();
    for txn in &log[..upto as usize] {
        for (k, v) in txn {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
    }
    m
}

/// Up to five keys whose values differ between two states, for a failure's
/// message.
fn differing_keys(
    expect: &BTreeMap<Vec<u8>, Vec<u8>>,
    got: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Vec<String> {
    expect
        .keys()
        .chain(got.keys())
        .filter(|k| expect.get(*k) != got.get(*k))
        .take(5)
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect()
}

/// Checks a recovered database against the log; returns how many transactions
/// it holds.
fn verify<S: Storage>(db: &Database<S>, log: &[Txn], acked: u64) -> Result<u64, String> {
    let r = db.begin_read().map_err(|e| format!("begin_read: {e}"))?;
    let next = match r.get(b"next").map_err(|e| format!("get next: {e}"))? {
        Some(v) => u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| "the counter is not 8 bytes".to_string())?,
        ),
        None => 0,
    };
    if next < acked {
        return Err(format!(
            "I1: {acked} commits were acknowledged, {next} survived"
        ));
    }
    if next > log.len() as u64 {
        return Err(format!(
            "the database holds {next} commits, only {} were tried",
            log.len()
        ));
    }
    let expect = model(log, next);
    let mut got = BTreeMap::new();
    for e in r.range::<std::ops::RangeFull>(..) {
        let (k, v) = e.map_err(|e| format!("I5: scan failed: {e}"))?;
        got.insert(k, v);
    }
    db.check().map_err(|e| format!("I4: {e}"))?;
    if got != expect {
        let diff = differing_keys(&expect, &got);
        return Err(format!(
            "I2/I3: state differs from the state after commit {next} (keys {diff:?})"
        ));
    }
    Ok(next)
}

/// The knobs and a fixed list of `txns` transactions drawn from `seed`, with
/// the generator positioned after them.
fn fixed_workload(seed: u64, txns: u64) -> (Rng, Options, String, Vec<Txn>) {
    let mut rng = Rng::new(seed);
    let (opts, text) = knobs(&mut rng);
    let log = (0..txns).map(|n| random_txn(&mut rng, n)).collect();
    (rng, opts, text, log)
}

/// Opens (recovers) the database on `disk` and checks it against `log`.
fn recover_and_verify(
    disk: &SimStorage,
    path: &Path,
    opts: &Options,
    log: &[Txn],
    acked: u64,
) -> Result<u64, String> {
    let db = Database::open_with(disk.clone(), path, opts.clone())
        .map_err(|e| format!("recovery failed: {e}"))?;
    verify(&db, log, acked)
}

/// Runs `txns` on a database at `path` on `disk` (creating it if needed), with
/// a checkpoint after every tenth; returns how many commits were acknowledged
/// before the first error.
fn run_workload<S: Storage>(disk: &S, path: &Path, opts: &Options, txns: &[Txn]) -> u64 {
    let Ok(db) = Database::open_with(disk.clone(), path, opts.clone()) else {
        return 0;
    };
    let mut acked = 0;
    for (i, txn) in txns.iter().enumerate() {
        let result = db.begin_write().and_then(|mut w| {
            for (k, v) in txn {
                match v {
                    Some(v) => w.put(k, v)?,
                    None => w.delete(k)?,
                }
            }
            w.commit()
        });
        if result.is_err() {
            break;
        }
        acked = i as u64 + 1;
        if i % 10 == 9 && db.checkpoint().is_err() {
            break;
        }
    }
    assert!(
        acked as usize <= txns.len(),
        "only tried transactions are acknowledged"
    );
    acked
}

/// Crashes a fixed workload of `seed` after every one of its mutating I/O
/// operations (database creation included), `tears` times each with different
/// torn and dropped writes, and once more as a kill of the process (every
/// completed operation kept, synced or not: [`SimStorage::kill`]), and
/// checks every recovery (RELIABILITY.md C4). Returns the number of
/// recoveries checked.
///
/// # Errors
/// [`SeedFailure`] naming the crash point.
pub fn sweep_crash_points(seed: u64, txns: u64, tears: u64) -> Result<u64, SeedFailure> {
    let (_, opts, text, log) = fixed_workload(seed, txns);
    let path = Path::new("/sim/db");
    let total = {
        let disk = SimStorage::new();
        run_workload(&disk, path, &opts, &log);
        disk.stats().ops
    };
    let mut checked = 0;
    for point in 1..=total {
        // The last round is the kill.
        for tear in 0..=tears {
            let disk = SimStorage::new();
            disk.power_fail_after(point);
            let acked = run_workload(&disk, path, &opts, &log);
            let how = if tear == tears {
                disk.kill();
                "killed".to_string()
            } else {
                disk.crash(seed ^ point.wrapping_mul(0x9E37_79B9) ^ tear.wrapping_mul(0x85EB_CA6B));
                format!("tear {tear}")
            };
            let fail = |what: String| SeedFailure {
                seed,
                knobs: format!("{text}; crash after I/O {point} of {total}, {how}"),
                what,
            };
            recover_and_verify(&disk, path, &opts, &log, acked).map_err(fail)?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// The I/O-error countdown (RELIABILITY.md C5): the workload of `seed` runs
/// with its Nth write (EIO or ENOSPC), sync, allocation or read failing, transiently or from
/// then on, for every N; then the faults stop, the power fails, and recovery
/// must find every acknowledged commit (a failure is an error, never a panic).
/// Returns the number of runs checked.
///
/// # Errors
/// [`SeedFailure`] naming the operation and N.
pub fn sweep_io_errors(seed: u64, txns: u64) -> Result<u64, SeedFailure> {
    let (_, opts, text, log) = fixed_workload(seed, txns);
    let path = Path::new("/sim/db");
    let mut checked = 0;
    let plan = [
        (FaultOp::Write, libc::EIO),
        (FaultOp::Write, libc::ENOSPC),
        (FaultOp::Sync, libc::EIO),
        (FaultOp::Allocate, libc::ENOSPC),
        (FaultOp::Read, libc::EIO),
    ];
    for (op, errno) in plan {
        let calls = {
            let disk = FaultyStorage::new(SimStorage::new());
            run_workload(&disk, path, &opts, &log);
            disk.calls(op)
        };
        for n in 0..calls {
            for transient in [true, false] {
                let sim = SimStorage::new();
                let disk = FaultyStorage::new(sim.clone());
                disk.fail_after_with(op, n, transient, errno);
                let acked = run_workload(&disk, path, &opts, &log);
                disk.heal();
                sim.crash(seed ^ n ^ u64::from(transient));
                let fail = |what: String| SeedFailure {
                    seed,
                    knobs: format!(
                        "{text}; {op:?} {n} fails with errno {errno}, transient {transient}"
                    ),
                    what,
                };
                recover_and_verify(&sim, path, &opts, &log, acked).map_err(fail)?;
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// fsync-EIO with Linux semantics (RELIABILITY.md C6): the Nth sync fails and
/// silently drops the file's unsynced writes, and the next sync would report
/// success. The engine must not acknowledge any commit after the failure, and
/// recovery after a power loss must find every one acknowledged before it.
/// Returns the number of runs checked.
///
/// # Errors
/// [`SeedFailure`] naming N.
pub fn sweep_fsync_eio(seed: u64, txns: u64) -> Result<u64, SeedFailure> {
    let (_, opts, text, log) = fixed_workload(seed, txns);
    let path = Path::new("/sim/db");
    let syncs = {
        let disk = FaultyStorage::new(SimStorage::new());
        run_workload(&disk, path, &opts, &log);
        disk.calls(FaultOp::Sync)
    };
    let mut checked = 0;
    for n in 1..=syncs {
        let sim = SimStorage::new();
        sim.fail_sync_linux_style(n);
        let acked = run_workload(&sim, path, &opts, &log);
        sim.crash(seed.wrapping_add(n));
        let fail = |what: String| SeedFailure {
            seed,
            knobs: format!("{text}; sync {n} of {syncs} fails Linux-style"),
            what,
        };
        recover_and_verify(&sim, path, &opts, &log, acked).map_err(fail)?;
        checked += 1;
    }
    Ok(checked)
}

/// Corruption injection on a closed database (RELIABILITY.md C7, F7, F8, and
/// issue 17's file × damage matrix): `flips` runs each damage one file of
/// the database one way (`sim::damage`: deleted, truncated, zero-filled,
/// a bit flipped, replaced by the older copy taken halfway through the
/// workload, or a data page copied over another); then opening and reading
/// must give back every acknowledged commit or a typed error, never wrong or
/// stale data (with the two reported exceptions `damage` names). Returns
/// how many runs ended in a detected error (the rest read correct data: the
/// damage hit unused bytes or was repaired from the log).
///
/// # Errors
/// [`SeedFailure`] when wrong or stale data came back.
pub fn sweep_corruption(seed: u64, flips: u64) -> Result<u64, SeedFailure> {
    let (mut rng, opts, text, log) = fixed_workload(seed, 40);
    let path = Path::new("/sim/db");
    let build = |disk: &SimStorage| {
        let first = run_workload(disk, path, &opts, &log[..20]);
        let old = Snapshot::take(disk, path);
        let second = run_workload(disk, path, &opts, &log[first as usize..]);
        (first, first + second, old)
    };
    let (copied, acked, _) = build(&SimStorage::new());
    let page = opts.page_bytes as usize;
    let mut detected = 0;
    for i in 0..flips {
        // Rebuild the same database (deterministic), then damage it.
        let disk = SimStorage::new();
        let (_, again, old) = build(&disk);
        assert_eq!(again, acked, "the workload is deterministic");
        let Some(d) = damage::damage(&disk, path, &old, page, &mut rng) else {
            continue;
        };
        let opened = Database::open_with(disk.clone(), path, opts.clone());
        match damage::classify(opened, |n| model(&log, n), acked, copied, d.limit) {
            Ok(Outcome::Detected) => detected += 1,
            Ok(Outcome::Whole | Outcome::Torn | Outcome::Limit) => {}
            Err(w) => {
                return Err(SeedFailure {
                    seed,
                    knobs: format!("{text}; run {i}: {}", d.what),
                    what: w,
                })
            }
        }
    }
    Ok(detected)
}

/// Runs one seed.
///
/// # Errors
/// [`SeedFailure`] naming the broken invariant.
pub fn run_seed(seed: u64) -> Result<SeedReport, SeedFailure> {
    let mut rng = Rng::new(seed);
    let (opts, text) = knobs(&mut rng);
    let fail = |what: String| SeedFailure {
        seed,
        knobs: text.clone(),
        what,
    };
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let mut log: Vec<Txn> = Vec::new();
    let mut acked = 0u64;
    let mut total_acked = 0u64;
    let (mut overlapped, mut refused) = (0u64, 0u64);
    let rounds = rng.range(1, 5);
    for round in 0..=rounds {
        // Sometimes the power fails during recovery too.
        if round > 0 && rng.chance(1, 4) {
            disk.power_fail_after(rng.range(1, 60));
            if let Ok(db) = Database::open_with(disk.clone(), path, opts.clone()) {
                drop(db);
            }
            disk.crash(rng.next_u64());
        }
        let db = Database::open_with(disk.clone(), path, opts.clone())
            .map_err(|e| fail(format!("recovery failed: {e}")))?;
        let have = verify(&db, &log, acked).map_err(|w| fail(format!("round {round}: {w}")))?;
        assert!(
            have >= acked && have as usize <= log.len(),
            "verify holds I1 and the log's bound"
        );
        log.truncate(have as usize);
        acked = have;
        if round == rounds {
            break;
        }
        disk.power_fail_after(rng.range(1, 600));
        // Per-round fault knobs: random EIO on writes and reads, a disk that
        // runs out of space. Verification above and below runs without them.
        let write_one_in = [0, 0, 50, 300][rng.range(0, 4) as usize];
        let read_one_in = [0, 0, 80, 500][rng.range(0, 4) as usize];
        disk.set_random_faults(write_one_in, read_one_in, rng.next_u64());
        if rng.chance(1, 5) {
            let used = disk.used_bytes();
            disk.set_capacity(Some(used + rng.range(0, 2 << 20)));
        }
        let rs = commit_round(&db, &mut rng, &mut log)
            .map_err(|w| fail(format!("round {round}: {w}")))?;
        if let Some(n) = rs.acked {
            acked = n;
        }
        total_acked += rs.committed;
        overlapped += rs.overlapped;
        refused += rs.refused;
        drop(db);
        disk.set_random_faults(0, 0, 0);
        disk.set_capacity(None);
        disk.crash(rng.next_u64());
    }
    Ok(SeedReport {
        seed,
        acked: total_acked,
        crashes: disk.stats().crashes,
        overlapped,
        refused,
        knobs: text,
    })
}

/// Read transactions a round holds at once, at most.
const HELD_SNAPSHOTS_MAX: usize = 3;

/// Checks a read transaction begun after commit `upto` against the model:
/// its whole scan and its counter are that commit's state. An error is no
/// failure (reads meet injected faults, and a snapshot may be given up);
/// a wrong value is.
fn check_snapshot<S: Storage>(r: &ReadTxn<'_, S>, log: &[Txn], upto: u64) -> Result<(), String> {
    let expect = model(log, upto);
    let mut got = BTreeMap::new();
    for e in r.range::<std::ops::RangeFull>(..) {
        let Ok((k, v)) = e else { return Ok(()) };
        got.insert(k, v);
    }
    if got != expect {
        let diff = differing_keys(&expect, &got);
        return Err(format!(
            "a snapshot begun after commit {upto} read another state (keys {diff:?})"
        ));
    }
    Ok(())
}

/// Write transactions open at once in a round (logical threads).
const LOGICAL_THREADS_MAX: usize = 3;

/// Steps a round takes at most.
const ROUND_STEPS_MAX: u64 = 240;

/// One logical thread's open write transaction: what it was planned to
/// write, what it wrote so far and what it read from its snapshot.
struct Open<'db, S: Storage> {
    w: WriteTxn<'db, S>,
    serializable: bool,
    plan: Txn,
    done: Txn,
    reads: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// What a round's step left to do.
enum Step {
    Go,
    /// An error of the environment (an injected fault): the round ends.
    Stop,
}

/// What a round has done so far: the model's state (the database's, as of
/// the last commit), the acknowledged count and the commits.
struct RoundState {
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    acked: Option<u64>,
    committed: u64,
    overlapped: u64,
    refused: u64,
}

/// One round of `run_seed`: random write transactions from up to
/// [`LOGICAL_THREADS_MAX`] logical threads, interleaved step by step (a
/// read, a write, or a commit of one of them), checkpoints now and then,
/// until the first error of the environment; with read transactions begun
/// between them and checked later against the state they began in.
/// Returns what it did: the log length after the last acknowledged commit
/// (if any was) and the commits. Commit order is log order: a commit
/// refused as a conflict applied nothing and leaves the log.
///
/// # Errors
/// A held snapshot that read a state other than its own; a committed
/// Serializable transaction that read a value other than the state just
/// before its commit.
fn commit_round<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    log: &mut Vec<Txn>,
) -> Result<RoundState, String> {
    let mut rs = RoundState {
        state: model(log, log.len() as u64),
        acked: None,
        committed: 0,
        overlapped: 0,
        refused: 0,
    };
    let mut held: Vec<(ReadTxn<'_, S>, u64)> = Vec::new();
    let mut open: Vec<Open<'_, S>> = Vec::new();
    for _ in 0..rng.range(1, ROUND_STEPS_MAX) {
        let n = log.len() as u64;
        if rng.chance(1, 12) && held.len() < HELD_SNAPSHOTS_MAX {
            if let Ok(r) = db.begin_read() {
                held.push((r, n));
            }
        }
        if !held.is_empty() && rng.chance(1, 10) {
            let (r, upto) = &held[rng.range(0, held.len() as u64) as usize];
            check_snapshot(r, log, *upto)?;
        }
        if open.len() < LOGICAL_THREADS_MAX && (open.is_empty() || rng.chance(1, 4)) {
            match begin_logical(db, rng, n) {
                Some(o) => open.push(o),
                None => break,
            }
        }
        let i = rng.range(0, open.len() as u64) as usize;
        if let Step::Stop = step(db, rng, &mut open, i, log, &mut rs)? {
            break;
        }
    }
    assert!(
        open.len() <= LOGICAL_THREADS_MAX,
        "a round's threads are few"
    );
    drop(open);
    for (r, upto) in &held {
        check_snapshot(r, log, *upto)?;
    }
    Ok(rs)
}

/// Begins a logical thread's transaction (`None`: the database refused).
fn begin_logical<'db, S: Storage>(
    db: &'db Database<S>,
    rng: &mut Rng,
    n: u64,
) -> Option<Open<'db, S>> {
    let serializable = rng.chance(2, 3);
    let opts = WriteOptions {
        isolation: if serializable {
            Isolation::Serializable
        } else {
            Isolation::Snapshot
        },
        // One thread runs every logical one: a key another holds is
        // skipped, never waited for.
        lock_timeout: std::time::Duration::ZERO,
        durability: None,
    };
    let w = db.begin_write_with(&opts).ok()?;
    let mut plan = random_txn(rng, n);
    plan.pop(); // the counter is written at commit, by whoever commits
    plan.reverse();
    Some(Open {
        w,
        serializable,
        plan,
        done: Vec::new(),
        reads: Vec::new(),
    })
}

/// One step of logical thread `i`: a read, its next write, or its commit.
fn step<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    open: &mut Vec<Open<'_, S>>,
    i: usize,
    log: &mut Vec<Txn>,
    rs: &mut RoundState,
) -> Result<Step, String> {
    let o = &mut open[i];
    if o.plan.is_empty() {
        let o = open.swap_remove(i);
        let (beside, before) = (!open.is_empty(), rs.committed);
        let r = commit_logical(db, rng, o, log, rs);
        if beside && rs.committed > before {
            rs.overlapped += 1;
        }
        return r;
    }
    if rng.chance(1, 4) {
        let key = format!("k{:03}", rng.range(0, 200)).into_bytes();
        let Ok(v) = o.w.get(&key) else {
            return Ok(Step::Stop);
        };
        if o.serializable && !o.done.iter().any(|(k, _)| *k == key) {
            o.reads.push((key, v));
        }
        return Ok(Step::Go);
    }
    let (k, v) = o.plan.pop().expect("a planned write");
    let r = match &v {
        Some(v) => o.w.put(&k, v),
        None => o.w.delete(&k),
    };
    match r {
        Ok(()) => o.done.push((k, v)),
        // Another logical thread holds the key: this write is skipped.
        Err(Error::LockTimeout { .. }) => {}
        // Refused (under Snapshot, a key changed since its snapshot): the
        // transaction ends with nothing of it applied.
        Err(e) if e.is_retryable() => {
            drop(open.swap_remove(i));
            rs.refused += 1;
        }
        Err(_) => return Ok(Step::Stop),
    }
    Ok(Step::Go)
}

/// Commits a logical thread's transaction, writing the counter last.
fn commit_logical<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    mut o: Open<'_, S>,
    log: &mut Vec<Txn>,
    rs: &mut RoundState,
) -> Result<Step, String> {
    let n = log.len() as u64;
    let counter = (b"next".to_vec(), Some((n + 1).to_le_bytes().to_vec()));
    match o
        .w
        .put(&counter.0, counter.1.as_deref().unwrap_or_default())
    {
        Ok(()) => {}
        // Refused at the lock (Snapshot: a commit since changed the
        // counter): nothing of it applied, as a refused commit.
        Err(e) if e.is_retryable() => {
            rs.refused += 1;
            return Ok(Step::Go);
        }
        Err(_) => return Ok(Step::Stop),
    }
    o.done.push(counter);
    log.push(o.done.clone());
    match o.w.commit() {
        Ok(()) => {}
        Err(e) if e.is_retryable() => {
            // Refused: nothing of it was applied, so it is not in the order.
            log.pop();
            rs.refused += 1;
            return Ok(Step::Go);
        }
        Err(_) => return Ok(Step::Stop),
    }
    for (k, v) in &o.reads {
        if rs.state.get(k) != v.as_ref() {
            return Err(format!(
                "commit {}: a Serializable transaction read {:?} as {:?}, but just before \
                 its commit it was {:?}",
                n + 1,
                String::from_utf8_lossy(k),
                v.as_ref().map(Vec::len),
                rs.state.get(k).map(Vec::len)
            ));
        }
    }
    for (k, v) in &o.done {
        match v {
            Some(v) => rs.state.insert(k.clone(), v.clone()),
            None => rs.state.remove(k),
        };
    }
    rs.acked = Some(n + 1);
    rs.committed += 1;
    if rng.chance(1, 12) && db.checkpoint().is_err() {
        return Ok(Step::Stop);
    }
    Ok(Step::Go)
}
