//! One seed of the crash campaign: random knobs, random transactions, a power
//! failure at a random operation, a crash that loses and tears unsynced writes,
//! recovery (sometimes itself crashed), and the checks of RELIABILITY.md:
//! - I1: every acknowledged commit is present;
//! - I2/I3: the recovered state equals the state after some prefix of the
//!   commit order (whole transactions only);
//! - I6: a crash during recovery, then recovery again, gives such a state too;
//! - I7: failures surface as errors, never panics (a panic fails the seed);
//! - the data file holds every page of the recovered page count (a cut of
//!   the file by a compaction never takes a page the count names).
//!
//! About a third of the seeds also compact between commits
//! ([`compaction`]), so power failures land inside compactions too.
//!
//! Everything follows from the seed, so a failure replays exactly with
//! `directkv sim --seeds 1 --from SEED`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

mod compaction;
mod round;
pub(super) mod tables;

use compaction::Knob;

use round::commit_round;

use super::damage::{self, Outcome, Snapshot};
use super::disk::SimStorage;
use super::rng::Rng;
use crate::db::{Database, Durability, Options};
use crate::io::{DirectIo, Storage, SyncMethod, SyncVariant};
#[cfg(test)]
use crate::io::{FaultOp, FaultyStorage};

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
    /// Calls of `compact_with` that returned (0 on seeds that do not
    /// compact).
    pub compactions: u64,
    /// Pages those compactions moved.
    pub compacted_pages: u64,
    /// Compactions that ended.
    pub compactions_ended: u64,
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
        let key = tables::random_key(rng);
        if rng.chance(1, 150) {
            ops.push((tables::random_drop(rng), None));
        } else if rng.chance(1, 4) {
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
            tables::apply_to_model(&mut m, k, v);
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
    assert!(
        acked as usize <= log.len(),
        "only logged transactions are acknowledged"
    );
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
    let got = tables::read_all(&r).map_err(|e| format!("I5: scan failed: {e}"))?;
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
#[cfg(test)]
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
                // A drop of a table not there is in the model too, and
                // changes nothing in either.
                tables::apply(&mut w, k, v)?;
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
#[cfg(test)]
pub fn sweep_crash_points(seed: u64, txns: u64, tears: u64) -> Result<u64, SeedFailure> {
    let (_, opts, text, log) = fixed_workload(seed, txns);
    let path = Path::new("/sim/db");
    let total = {
        let disk = SimStorage::new();
        run_workload(&disk, path, &opts, &log);
        disk.stats().ops
    };
    assert!(total > 0, "creating a database does I/O");
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
    assert_eq!(checked, total * (tears + 1), "every crash point, every way");
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
#[cfg(test)]
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
#[cfg(test)]
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
    assert_eq!(checked, syncs, "every sync failed once");
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
    run_seed_with(seed, true)
}

/// Checks that the data file at `path` on `disk` holds every page of
/// `db`'s page count.
fn check_data_length<S: Storage>(
    disk: &SimStorage,
    path: &Path,
    db: &Database<S>,
) -> Result<(), String> {
    let space = db.stats().space;
    let len = disk.file_len(&path.join("data")).unwrap_or(0) as u64;
    if len < space.pages * space.page_bytes {
        return Err(format!(
            "the data file is {len} bytes, short of the {} pages of {} bytes the page count names",
            space.pages, space.page_bytes
        ));
    }
    Ok(())
}

/// Runs one seed, compacting between commits when its knob says so and
/// `may_compact`.
pub(super) fn run_seed_with(seed: u64, may_compact: bool) -> Result<SeedReport, SeedFailure> {
    let mut rng = Rng::new(seed);
    let (mut opts, text) = knobs(&mut rng);
    let knob = match may_compact {
        true => Knob::of(seed, &mut opts),
        false => None,
    };
    let text = format!("{text}, {}", Knob::describe(knob));
    let fail = |what: String| SeedFailure {
        seed,
        knobs: text.clone(),
        what,
    };
    let disk = SimStorage::new();
    let path = Path::new("/sim/db");
    let mut log: Vec<Txn> = Vec::new();
    let mut acked = 0u64;
    let mut total = SeedReport {
        seed,
        acked: 0,
        crashes: 0,
        overlapped: 0,
        refused: 0,
        compactions: 0,
        compacted_pages: 0,
        compactions_ended: 0,
        knobs: String::new(),
    };
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
        check_data_length(&disk, path, &db).map_err(|w| fail(format!("round {round}: {w}")))?;
        assert!(
            have >= acked && have as usize <= log.len(),
            "verify holds I1 and the log's bound"
        );
        log.truncate(have as usize);
        acked = have;
        if round == rounds {
            break;
        }
        // Compacting rounds do more I/O (a run of long values alone writes
        // hundreds of pages): half of them take under 70 operations, one
        // in ten over 600, the longest about 2,600; the power fails within
        // 1,200, in most of the longer ones.
        let ops_max = if knob.is_some() { 1200 } else { 600 };
        disk.power_fail_after(rng.range(1, ops_max));
        set_round_faults(&disk, &mut rng);
        let rs = commit_round(&db, &mut rng, &mut log, knob)
            .map_err(|w| fail(format!("round {round}: {w}")))?;
        if let Some(n) = rs.acked {
            acked = n;
        }
        total.add(&rs);
        drop(db);
        disk.set_random_faults(0, 0, 0);
        disk.set_capacity(None);
        disk.crash(rng.next_u64());
    }
    total.crashes = disk.stats().crashes;
    total.knobs = text;
    Ok(total)
}

/// Per-round fault knobs: random EIO on writes and reads, a disk that runs
/// out of space. Verification runs without them.
fn set_round_faults(disk: &SimStorage, rng: &mut Rng) {
    let write_one_in = [0, 0, 50, 300][rng.range(0, 4) as usize];
    let read_one_in = [0, 0, 80, 500][rng.range(0, 4) as usize];
    disk.set_random_faults(write_one_in, read_one_in, rng.next_u64());
    if rng.chance(1, 5) {
        let used = disk.used_bytes();
        disk.set_capacity(Some(used + rng.range(0, 2 << 20)));
    }
}

impl SeedReport {
    /// Adds what a round did.
    fn add(&mut self, rs: &round::RoundState) {
        assert!(
            rs.committed >= u64::from(rs.acked.is_some()),
            "an ack is a commit"
        );
        self.acked += rs.committed;
        self.overlapped += rs.overlapped;
        self.refused += rs.refused;
        self.compactions += rs.compacted.calls;
        self.compacted_pages += rs.compacted.moved;
        self.compactions_ended += rs.compacted.ended;
    }
}
