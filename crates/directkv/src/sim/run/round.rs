//! One round of a seed: up to [`LOGICAL_THREADS_MAX`] logical threads'
//! write transactions interleaved step by step, with read transactions held
//! across commits and checked against the state they began in.
//!
//! Invariants checked:
//! - a held snapshot reads exactly the state of the commit it began after;
//! - a committed Serializable transaction read the state just before its
//!   commit;
//! - commit order is log order: a commit refused as a conflict applied
//!   nothing and leaves the log.

use std::collections::BTreeMap;

use super::compaction::{self, Compacted, Knob};
use super::{differing_keys, model, random_txn, tables, Txn};
use crate::db::{Database, Isolation, ReadTxn, WriteOptions, WriteTxn};
use crate::error::Error;
use crate::io::Storage;
use crate::sim::rng::Rng;

/// Read transactions a round holds at once, at most.
const HELD_SNAPSHOTS_MAX: usize = 3;

/// Checks a read transaction begun after commit `upto` against the model:
/// its whole scan and its counter are that commit's state. An error is no
/// failure (reads meet injected faults, and a snapshot may be given up);
/// a wrong value is.
fn check_snapshot<S: Storage>(r: &ReadTxn<'_, S>, log: &[Txn], upto: u64) -> Result<(), String> {
    assert!(
        upto as usize <= log.len(),
        "a snapshot began after a commit of the log"
    );
    let expect = model(log, upto);
    let Ok(got) = tables::read_all(r) else {
        return Ok(());
    };
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
pub(super) enum Step {
    Go,
    /// An error of the environment (an injected fault): the round ends.
    Stop,
}

/// What a round has done so far: the model's state (the database's, as of
/// the last commit), the acknowledged count, the commits and what its
/// compactions did.
pub(super) struct RoundState {
    state: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(super) acked: Option<u64>,
    pub(super) committed: u64,
    pub(super) overlapped: u64,
    pub(super) refused: u64,
    pub(super) compacted: Compacted,
}

impl RoundState {
    /// Whether the state after the last commit holds `key`.
    pub(super) fn holds(&self, key: &[u8]) -> bool {
        self.state.contains_key(key)
    }

    /// Notes the last transaction of `log` as committed and acknowledged.
    pub(super) fn record_commit(&mut self, log: &[Txn]) {
        let last = log.last().expect("a commit is in the log");
        for (k, v) in last {
            match v {
                Some(v) => self.state.insert(k.clone(), v.clone()),
                None => self.state.remove(k),
            };
        }
        self.acked = Some(log.len() as u64);
        self.committed += 1;
        assert!(self.committed <= log.len() as u64, "commits are in the log");
    }
}

/// One round of `run_seed`: random write transactions from up to
/// [`LOGICAL_THREADS_MAX`] logical threads, interleaved step by step (a
/// read, a write, or a commit of one of them), checkpoints now and then,
/// until the first error of the environment; with read transactions begun
/// between them and checked later against the state they began in. With
/// a compaction `knob`, runs of long values grow and go while no write
/// transaction is open, and compactions run between steps
/// ([`compaction::act`]).
/// Returns what it did: the log length after the last acknowledged commit
/// (if any was) and the commits. Commit order is log order: a commit
/// refused as a conflict applied nothing and leaves the log.
///
/// # Errors
/// A held snapshot that read a state other than its own; a committed
/// Serializable transaction that read a value other than the state just
/// before its commit.
pub(super) fn commit_round<S: Storage>(
    db: &Database<S>,
    rng: &mut Rng,
    log: &mut Vec<Txn>,
    knob: Option<Knob>,
) -> Result<RoundState, String> {
    let mut rs = RoundState {
        state: model(log, log.len() as u64),
        acked: None,
        committed: 0,
        overlapped: 0,
        refused: 0,
        compacted: Compacted::default(),
    };
    let mut held: Vec<(ReadTxn<'_, S>, u64)> = Vec::new();
    let mut open: Vec<Open<'_, S>> = Vec::new();
    for _ in 0..rng.range(1, ROUND_STEPS_MAX) {
        let n = log.len() as u64;
        if rng.chance(1, 12) && held.len() < HELD_SNAPSHOTS_MAX {
            if let Ok(r) = db.begin_read() {
                held.push((r, n));
            }
            assert!(
                held.len() <= HELD_SNAPSHOTS_MAX,
                "a round holds few snapshots"
            );
        }
        if !held.is_empty() && rng.chance(1, 10) {
            let (r, upto) = &held[rng.range(0, held.len() as u64) as usize];
            check_snapshot(r, log, *upto)?;
        }
        if let Some(k) = knob {
            let idle = open.is_empty();
            if let Step::Stop = compaction::act(db, rng, k, idle, log, &mut rs)? {
                break;
            }
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
    assert!(!plan.is_empty(), "a logical thread plans a write");
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
    assert!(i < open.len(), "a step is of an open logical thread");
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
    match tables::apply(&mut o.w, &k, &v) {
        Ok(true) => o.done.push((k, v)),
        // A drop of a table that is not there: nothing done.
        Ok(false) => {}
        // Another logical thread holds the key (or the table's name, or
        // created the table since this one's snapshot): skipped.
        Err(Error::LockTimeout { .. } | Error::TableExists { .. }) => {}
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
    assert_eq!(log.len() as u64, n + 1, "the commit is the last in the log");
    rs.record_commit(log);
    if rng.chance(1, 12) && db.checkpoint().is_err() {
        return Ok(Step::Stop);
    }
    Ok(Step::Go)
}
