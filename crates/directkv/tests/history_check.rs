//! Concurrent write transactions keep their isolation level's promise,
//! checked on recorded histories in the style of Adya's dependency graphs (as
//! Elle checks them), on real files. Under `Isolation::Serializable` the
//! committed transactions and the read snapshots form an acyclic dependency
//! graph; under `Isolation::Snapshot` there is no G0, G1a, G1b, G1c,
//! G-single nor lost update, every read snapshot is one consistent cut, and
//! a locking read reads the transaction's snapshot (no read skew through it).
//!
//! The history. Five threads run random transactions (get, get_for_update,
//! put, delete, read-lock-write: a `get` from the snapshot, then
//! `get_for_update` of the same key, then a put derived from the first
//! read; forward, reverse and prefix scans) over twelve keys
//! `k00`..`k11`, and read-only snapshots, and record what each committed one
//! read and wrote, and how (from the snapshot, or under the row lock).
//!
//! Version order. Every value is `{txn}.{n}|{pred}`: the transaction that
//! wrote it (each attempt has its own id, so a value names its writer, and an
//! aborted or intermediate value is recognised) and the version it overwrote.
//! Every write is preceded, in its transaction, by a read of the key, and
//! `pred` is what that read returned: under the key's row lock
//! (get_for_update) the latest value, which stays the latest until the
//! commit; else the snapshot's, which the engine validates (at commit a key
//! read under Serializable; at its lock a key written under Snapshot). A
//! read-lock-write names the version its snapshot read saw, not the locked
//! one: where a commit came between them the engine must refuse it
//! (Serializable at commit, Snapshot at the lock), or the chain forks. So each key's
//! versions form a chain rebuilt from the values alone, which must be one
//! line from the initial state to the final one (two versions overwriting one
//! = a lost update). An absent key has no value to name its delete, so
//! deleting `kNN` also writes the grave `gNN` (same scheme); whoever sees
//! `kNN` absent reads `gNN` the same way (from its snapshot, or under the
//! lock) and so knows which delete, or the initial absence, it saw.
//!
//! The graph. From the chains come the edges: ww (the version order), wr
//! (read the version written by) and rw (read the version that the other
//! transaction overwrote). Each transaction has two points, its start (where
//! its snapshot reads happen) and its commit (where its writes and its reads
//! under a row lock hold); an edge joins the points it orders (wr: commit to
//! start for a snapshot read, commit to commit for a locked one; rw: start or
//! commit to the overwriter's commit; ww: commit to the start or commit of
//! the overwriter, as it read the key). Under Serializable every read holds
//! at the commit point, so a transaction is one node and the graph must be
//! acyclic (no G0, G1c, G-single nor G2). Under Snapshot the two-point graph
//! must be acyclic: a cycle there is G0, G1c, G-single or a start/commit
//! order no snapshot can have, while write skew (two rw edges) is allowed.
//! Under Snapshot a locking read is refused for a key changed since the
//! snapshot, so its wr edge, like a snapshot read's, ends at the start: a
//! locking read that saw a commit newer than the snapshot (read skew) is a
//! cycle. A read snapshot is one point, so a torn snapshot is a cycle too.
//!
//! The checker is itself tested on planted anomalies. A last test shows
//! write skew ("doctors on call") happening under Snapshot and refused under
//! Serializable. `DIRECTKV_HISTORY_TXNS` (default 1000) sets the transactions
//! per thread, `DIRECTKV_HISTORY_SEED` the seed; a failure prints the seed,
//! the anomaly and the transactions in it, with their operations. CI sets
//! neither (`cargo test --workspace` with defaults, `.ci/run`), so it
//! checks two histories a run, one per level, each of 5 threads x 1000
//! transactions from the default seed; the threads' interleaving, and so
//! the history, differs from run to run.

mod common;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use directkv::{Database, Error, Isolation, Options, RangeIter, ReadTxn, WriteOptions, WriteTxn};

type DbResult<T> = directkv::Result<T>;
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Keys `k00`..`k11` (and their graves `g00`..`g11`).
const KEYS: usize = 12;
const THREADS: u64 = 5;
const TXNS_PER_THREAD: u64 = 1000;
const SEED: u64 = 0x00d1_5ec7_ed00_c0de;
const LOCK_TIMEOUT: Duration = Duration::from_secs(1);
const READ_ONLY_PERCENT: u64 = 15;
/// The writer of the initial state (every key absent).
const INITIAL: u64 = 0;
/// The transaction that writes the even keys before the threads start.
const SETUP: u64 = 1;

fn options() -> Options {
    common::unsynced(8 << 20)
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn key(i: usize) -> String {
    format!("k{i:02}")
}

/// The grave of `kNN`: `gNN`, written by every delete of `kNN`.
fn grave(key: &str) -> String {
    format!("g{}", &key[1..])
}

fn is_main(key: &str) -> bool {
    key.starts_with('k')
}

/// Every key the test touches, in key order (graves first).
fn universe() -> Vec<String> {
    let graves = (0..KEYS).map(|i| grave(&key(i)));
    graves.chain((0..KEYS).map(key)).collect()
}

/// A small deterministic generator (xorshift), one per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A version of one key: the value a transaction put, or the absence its
/// delete left (`Absent(INITIAL)`: the initial absence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Ver {
    Present(u64),
    Absent(u64),
}

impl Ver {
    fn writer(self) -> u64 {
        match self {
            Ver::Present(t) | Ver::Absent(t) => t,
        }
    }

    fn encode(self) -> String {
        match self {
            Ver::Present(t) => format!("p{t}"),
            Ver::Absent(t) => format!("a{t}"),
        }
    }

    fn decode(s: &str) -> Option<Ver> {
        if let Some(t) = s.strip_prefix('p') {
            return t.parse().ok().map(Ver::Present);
        }
        s.strip_prefix('a')?.parse().ok().map(Ver::Absent)
    }
}

impl fmt::Display for Ver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ver::Present(t) => write!(f, "T{t}'s value"),
            Ver::Absent(INITIAL) => write!(f, "the initial absence"),
            Ver::Absent(t) => write!(f, "T{t}'s delete"),
        }
    }
}

/// `{txn}.{n}|{pred}` as (txn, n, pred).
fn parse_value(v: &str) -> Option<(u64, u64, Ver)> {
    let (head, pred) = v.split_once('|')?;
    let (txn, n) = head.split_once('.')?;
    Some((txn.parse().ok()?, n.parse().ok()?, Ver::decode(pred)?))
}

fn writer_of(value: &[u8], reader: u64, key: &str) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(parse_value)
        .unwrap_or_else(|| {
            let shown = String::from_utf8_lossy(value);
            panic!("T{reader} read {key} = {shown:?}, a value no transaction of this test writes")
        })
        .0
}

/// Where a read takes effect, and where a transaction's edges attach: its
/// start (snapshot reads) or its commit (writes, reads under a row lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Start,
    Commit,
}

/// One read of a committed transaction.
#[derive(Clone, Debug)]
struct Obs {
    key: String,
    at: At,
    value: Option<String>,
    ver: Ver,
}

/// A transaction's last write of a key, the version it overwrote and how
/// it read that one.
#[derive(Clone, Debug)]
struct Wrote {
    value: Option<String>,
    pred: Ver,
    at: At,
}

impl Wrote {
    fn installs(&self, id: u64) -> Ver {
        match self.value {
            Some(_) => Ver::Present(id),
            None => Ver::Absent(id),
        }
    }
}

/// A committed transaction (or a read snapshot) as recorded.
#[derive(Clone, Debug, Default)]
struct Rec {
    id: u64,
    read_only: bool,
    reads: Vec<Obs>,
    writes: BTreeMap<String, Wrote>,
    /// What it was asked to do (empty for planted ones).
    ops: Vec<Op>,
}

impl fmt::Display for Rec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.read_only { "snapshot" } else { "write" };
        write!(f, "T{} ({kind}): reads [", self.id)?;
        for o in &self.reads {
            write!(f, "{}={:?} ({}) @{:?}; ", o.key, o.value, o.ver, o.at)?;
        }
        write!(f, "] writes [")?;
        for (k, w) in &self.writes {
            write!(f, "{k}:={:?} over {} read @{:?}; ", w.value, w.pred, w.at)?;
        }
        write!(f, "] ops {:?}", self.ops)
    }
}

#[derive(Clone, Copy, Debug)]
enum Scan {
    All,
    AllReversed,
    /// `prefix(b"k")`: no graves, so absences are attributed by reads.
    Main,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Get(usize),
    ForUpdate(usize),
    Put(usize),
    /// Read from the snapshot (`get`), then lock (`get_for_update`), then
    /// write a value derived from the first read: a read-modify-write
    /// whose lock comes after its read.
    ReadLockWrite(usize),
    Delete(usize),
    Scan(Scan),
}

fn gen_ops(rng: &mut Rng, read_only: bool) -> Vec<Op> {
    let n = 2 + rng.below(5);
    let mut ops = Vec::new();
    for _ in 0..n {
        let k = rng.below(KEYS as u64) as usize;
        let roll = rng.below(100);
        let scan = [Scan::All, Scan::AllReversed, Scan::Main][rng.below(3) as usize];
        ops.push(match (read_only, roll) {
            (true, 0..=59) => Op::Get(k),
            (true, _) => Op::Scan(scan),
            (false, 0..=19) => Op::Get(k),
            (false, 20..=34) => Op::ForUpdate(k),
            (false, 35..=49) => Op::ReadLockWrite(k),
            (false, 50..=79) => Op::Put(k),
            (false, 80..=86) => Op::Delete(k),
            (false, _) => Op::Scan(scan),
        });
    }
    ops
}

/// Scanned entries, in ascending key order, checked to be strictly ordered.
fn sorted(iter: RangeIter<'_>, reversed: bool) -> DbResult<Entries> {
    let mut entries = if reversed {
        iter.rev().collect::<DbResult<Entries>>()?
    } else {
        iter.collect::<DbResult<Entries>>()?
    };
    if reversed {
        entries.reverse();
    }
    assert!(
        entries.windows(2).all(|w| w[0].0 < w[1].0),
        "a scan (reversed: {reversed}) yields each key once, in order"
    );
    Ok(entries)
}

enum Handle<'a> {
    Read(ReadTxn<'a>),
    Write(Box<WriteTxn<'a>>),
}

impl<'a> Handle<'a> {
    fn get(&self, key: &str) -> DbResult<Option<Vec<u8>>> {
        match self {
            Handle::Read(r) => r.get(key.as_bytes()),
            Handle::Write(w) => w.get(key.as_bytes()),
        }
    }

    fn writer(&mut self) -> &mut WriteTxn<'a> {
        match self {
            Handle::Write(w) => w,
            Handle::Read(_) => panic!("read snapshots only get and scan"),
        }
    }

    fn scan(&self, how: Scan) -> DbResult<Entries> {
        let (lo, hi) = (b"g".as_slice(), b"l".as_slice());
        let iter = match (self, how) {
            (Handle::Read(r), Scan::Main) => r.prefix(b"k"),
            (Handle::Read(r), _) => r.range(lo..hi),
            (Handle::Write(w), Scan::Main) => w.prefix(b"k"),
            (Handle::Write(w), _) => w.range(lo..hi),
        };
        sorted(iter, matches!(how, Scan::AllReversed))
    }

    /// The snapshot's value of `key` (a range read: the snapshot's also for
    /// a key this transaction holds the lock of).
    fn snapshot_value(&self, key: &str) -> DbResult<Option<Vec<u8>>> {
        let k = key.as_bytes();
        let iter = match self {
            Handle::Read(r) => r.range(k..=k),
            Handle::Write(w) => w.range(k..=k),
        };
        Ok(sorted(iter, false)?.pop().map(|(_, v)| v))
    }
}

/// A transaction being run, and what it has seen so far.
struct Live<'a> {
    h: Handle<'a>,
    rec: Rec,
    /// Keys it read with `get_for_update`: later gets of them are current.
    locked: BTreeSet<String>,
    /// The first version read from the snapshot, per key.
    at_start: BTreeMap<String, Ver>,
    /// The version read under the key's lock (the latest until commit).
    at_commit: BTreeMap<String, Ver>,
    /// Writes so far: numbers its values.
    n: u64,
}

impl<'a> Live<'a> {
    fn new(h: Handle<'a>, id: u64) -> Self {
        let read_only = matches!(h, Handle::Read(_));
        Live {
            h,
            rec: Rec {
                id,
                read_only,
                ..Rec::default()
            },
            locked: BTreeSet::new(),
            at_start: BTreeMap::new(),
            at_commit: BTreeMap::new(),
            n: 0,
        }
    }

    /// Whether `key` is its own write; then `raw` must be that write.
    fn own(&self, key: &str, raw: Option<&[u8]>) -> bool {
        let Some(w) = self.rec.writes.get(key) else {
            return false;
        };
        let want = w.value.as_ref().map(String::as_bytes);
        assert_eq!(raw, want, "T{} reads its own write of {key}", self.rec.id);
        true
    }

    /// Records a read of `key` (an absence left by `absent_by`'s delete).
    fn note(&mut self, key: &str, at: At, raw: Option<Vec<u8>>, absent_by: u64) -> Ver {
        let ver = match &raw {
            Some(v) => Ver::Present(writer_of(v, self.rec.id, key)),
            None => Ver::Absent(absent_by),
        };
        let value = raw.map(|v| String::from_utf8(v).expect("checked by writer_of"));
        let k = key.to_owned();
        self.rec.reads.push(Obs {
            key: k.clone(),
            at,
            value,
            ver,
        });
        match at {
            At::Start => {
                self.at_start.entry(k).or_insert(ver);
            }
            At::Commit => {
                self.at_commit.insert(k, ver);
            }
        }
        ver
    }

    fn get(&mut self, key: &str) -> DbResult<()> {
        let raw = self.h.get(key)?;
        if self.own(key, raw.as_deref()) {
            return Ok(());
        }
        let at = if self.locked.contains(key) {
            At::Commit
        } else {
            At::Start
        };
        let by = match raw {
            None => self.attribute(key, at)?,
            Some(_) => INITIAL,
        };
        self.note(key, at, raw, by);
        Ok(())
    }

    fn get_for_update(&mut self, key: &str) -> DbResult<()> {
        let raw = self.h.writer().get_for_update(key.as_bytes())?;
        if self.own(key, raw.as_deref()) {
            return Ok(());
        }
        self.locked.insert(key.to_owned());
        let by = match raw {
            None => self.attribute(key, At::Commit)?,
            Some(_) => INITIAL,
        };
        self.note(key, At::Commit, raw, by);
        Ok(())
    }

    /// Which delete left `key` absent, as read `at`: its grave read the same
    /// way (under the lock, or from the snapshot).
    fn attribute(&mut self, key: &str, at: At) -> DbResult<u64> {
        if !is_main(key) {
            return Ok(INITIAL); // graves are never deleted
        }
        let g = grave(key);
        assert!(
            !self.rec.writes.contains_key(&g),
            "T{} wrote {g} without writing {key}",
            self.rec.id
        );
        let raw = match at {
            At::Commit => {
                let raw = self.h.writer().get_for_update(g.as_bytes())?;
                self.locked.insert(g.clone());
                raw
            }
            At::Start if self.locked.contains(&g) => self.h.snapshot_value(&g)?,
            At::Start => self.h.get(&g)?,
        };
        Ok(self.note(&g, at, raw, INITIAL).writer())
    }

    fn scan(&mut self, how: Scan) -> DbResult<()> {
        let found: BTreeMap<String, Vec<u8>> = (self.h.scan(how)?.into_iter())
            .map(|(k, v)| (String::from_utf8(k).expect("keys are text"), v))
            .collect();
        let keys = match how {
            Scan::Main => (0..KEYS).map(key).collect(),
            Scan::All | Scan::AllReversed => universe(),
        };
        let stray: Vec<_> = found.keys().filter(|k| !keys.contains(k)).collect();
        assert!(stray.is_empty(), "a {how:?} scan found {stray:?}");
        for k in keys {
            let raw = found.get(&k).cloned();
            if self.own(&k, raw.as_deref()) {
                continue;
            }
            let by = match (&raw, how) {
                (Some(_), _) => INITIAL,
                (None, _) if !is_main(&k) => INITIAL,
                (None, Scan::Main) => self.attribute(&k, At::Start)?,
                (None, _) => found
                    .get(&grave(&k))
                    .map_or(INITIAL, |g| writer_of(g, self.rec.id, &k)),
            };
            self.note(&k, At::Start, raw, by);
        }
        Ok(())
    }

    /// The version a write of `key` overwrites: read under the lock if it
    /// was, else from the snapshot (read now if it was not read yet).
    fn pred(&mut self, key: &str) -> DbResult<(Ver, At)> {
        if let Some(w) = self.rec.writes.get(key) {
            return Ok((w.pred, w.at));
        }
        if !self.at_commit.contains_key(key) && !self.at_start.contains_key(key) {
            self.get(key)?;
        }
        if let Some(v) = self.at_commit.get(key) {
            return Ok((*v, At::Commit));
        }
        let v = self.at_start.get(key).expect("the key was just read");
        Ok((*v, At::Start))
    }

    fn write(&mut self, key: &str, put: bool) -> DbResult<()> {
        let (pred, at) = self.pred(key)?;
        self.write_over(key, put, (pred, at))
    }

    /// Reads `key` from the snapshot (unless it did already, or holds its
    /// lock), then locks it, then writes a value naming the version the
    /// first read saw: the engine must refuse this when the two reads
    /// differ (Serializable at commit, Snapshot at the lock), or the write
    /// loses the update in between.
    fn read_lock_write(&mut self, key: &str) -> DbResult<()> {
        if self.locked.contains(key) || self.rec.writes.contains_key(key) {
            self.get_for_update(key)?;
            return self.write(key, true);
        }
        self.get(key)?;
        let first = *self.at_start.get(key).expect("the key was just read");
        self.get_for_update(key)?;
        self.write_over(key, true, (first, At::Start))
    }

    /// Writes `key` (a put, or a delete), naming `pred`, the version it
    /// overwrites, read `at` its start or commit.
    fn write_over(&mut self, key: &str, put: bool, (pred, at): (Ver, At)) -> DbResult<()> {
        let value = put.then(|| format!("{}.{}|{}", self.rec.id, self.n, pred.encode()));
        self.n += 1;
        let w = self.h.writer();
        match &value {
            Some(v) => w.put(key.as_bytes(), v.as_bytes())?,
            None => w.delete(key.as_bytes())?,
        }
        let wrote = Wrote { value, pred, at };
        self.rec.writes.insert(key.to_owned(), wrote);
        Ok(())
    }

    fn apply(&mut self, op: Op) -> DbResult<()> {
        match op {
            Op::Get(i) => self.get(&key(i)),
            Op::ForUpdate(i) => self.get_for_update(&key(i)),
            Op::Put(i) => self.write(&key(i), true),
            Op::ReadLockWrite(i) => self.read_lock_write(&key(i)),
            Op::Delete(i) => {
                self.pred(&key(i))?; // reads the grave first if the key is absent
                self.write(&grave(&key(i)), true)?;
                self.write(&key(i), false)
            }
            Op::Scan(how) => self.scan(how),
        }
    }
}

fn run_write(db: &Database, isolation: Isolation, id: u64, ops: &[Op]) -> DbResult<Rec> {
    let opts = WriteOptions {
        isolation,
        lock_timeout: LOCK_TIMEOUT,
        ..WriteOptions::default()
    };
    let mut live = Live::new(Handle::Write(Box::new(db.begin_write_with(&opts)?)), id);
    for op in ops {
        live.apply(*op)?;
    }
    let Live { h, mut rec, .. } = live;
    if let Handle::Write(w) = h {
        w.commit()?;
    }
    rec.ops = ops.to_vec();
    Ok(rec)
}

fn run_read(db: &Database, id: u64, ops: &[Op]) -> DbResult<Rec> {
    let mut live = Live::new(Handle::Read(db.begin_read()?), id);
    for op in ops {
        live.apply(*op)?;
    }
    live.rec.ops = ops.to_vec();
    Ok(live.rec)
}

/// How the attempts ended.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    committed: u64,
    snapshots: u64,
    conflicts: u64,
    deadlocks: u64,
    too_old: u64,
    timeouts: u64,
}

impl Tally {
    fn failed(&mut self, e: &Error, what: impl FnOnce() -> String) {
        match e {
            Error::Conflict { .. } => self.conflicts += 1,
            Error::Deadlock { .. } => self.deadlocks += 1,
            Error::SnapshotTooOld { .. } => self.too_old += 1,
            Error::LockTimeout { .. } => self.timeouts += 1,
            other => panic!(
                "{} failed with {other}; only a conflict, a deadlock, a lock timeout \
                 or SnapshotTooOld may end a transaction",
                what()
            ),
        }
    }

    fn add(&mut self, o: &Tally) {
        self.committed += o.committed;
        self.snapshots += o.snapshots;
        self.conflicts += o.conflicts;
        self.deadlocks += o.deadlocks;
        self.too_old += o.too_old;
        self.timeouts += o.timeouts;
    }
}

fn worker(
    db: &Database,
    isolation: Isolation,
    seed: u64,
    thread: u64,
    txns: u64,
) -> (Vec<Rec>, Tally) {
    let mut rng = Rng::new(seed ^ (thread + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let (mut recs, mut tally) = (Vec::new(), Tally::default());
    for n in 0..txns {
        let id = (thread + 1) * 1_000_000 + n;
        let read_only = rng.below(100) < READ_ONLY_PERCENT;
        let ops = gen_ops(&mut rng, read_only);
        let r = if read_only {
            run_read(db, id, &ops)
        } else {
            run_write(db, isolation, id, &ops)
        };
        match r {
            Ok(rec) => {
                tally.committed += u64::from(!read_only);
                tally.snapshots += u64::from(read_only);
                recs.push(rec);
            }
            Err(e) => tally.failed(&e, || format!("seed {seed}: T{id} {ops:?}")),
        }
    }
    (recs, tally)
}

/// A recorded history and the state it left.
struct History {
    isolation: Isolation,
    seed: u64,
    recs: BTreeMap<u64, Rec>,
    final_state: BTreeMap<String, Option<String>>,
}

fn final_state(db: &Database) -> BTreeMap<String, Option<String>> {
    let r = db.begin_read().expect("a read transaction");
    let value = |k: &str| r.get(k.as_bytes()).expect("a final read");
    let text = |v: Vec<u8>| String::from_utf8(v).expect("values are text");
    universe()
        .into_iter()
        .map(|k| (k.clone(), value(&k).map(text)))
        .collect()
}

/// Runs the threads under `isolation` and records what they did.
fn run_history(isolation: Isolation) -> (History, Tally) {
    let seed = env_u64("DIRECTKV_HISTORY_SEED", SEED);
    let txns = env_u64("DIRECTKV_HISTORY_TXNS", TXNS_PER_THREAD);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), options()).expect("open");
    let setup: Vec<Op> = (0..KEYS).step_by(2).map(Op::Put).collect();
    let rec = run_write(&db, isolation, SETUP, &setup).expect("the setup commits");
    let mut recs = BTreeMap::from([(SETUP, rec)]);
    let mut tally = Tally::default();
    let t = Instant::now();
    std::thread::scope(|s| {
        let db = &db;
        let threads: Vec<_> = (0..THREADS)
            .map(|t| s.spawn(move || worker(db, isolation, seed, t, txns)))
            .collect();
        for th in threads {
            let (r, o) = th.join().expect("a worker thread panicked (see above)");
            recs.extend(r.into_iter().map(|r| (r.id, r)));
            tally.add(&o);
        }
    });
    eprintln!(
        "{isolation:?}, seed {seed}: {} attempts in {:?}: {tally:?}",
        THREADS * txns,
        t.elapsed()
    );
    let final_state = final_state(&db);
    let h = History {
        isolation,
        seed,
        recs,
        final_state,
    };
    (h, tally)
}

/// Each key's versions in order, from the initial absence.
type Chains = BTreeMap<String, Vec<Ver>>;

/// The chain of one key from its versions' predecessors: one line from the
/// initial absence through every committed version.
fn chain_of(key: &str, preds: &BTreeMap<Ver, Ver>) -> Result<Vec<Ver>, (String, Vec<Ver>)> {
    let root = Ver::Absent(INITIAL);
    let mut succ: BTreeMap<Ver, Vec<Ver>> = BTreeMap::new();
    for (&v, &p) in preds {
        if p != root && !preds.contains_key(&p) {
            let e = format!("{key}: {v} overwrote {p}, which no committed transaction installed");
            return Err((e, vec![v]));
        }
        succ.entry(p).or_default().push(v);
    }
    if let Some((p, s)) = succ.iter().find(|(_, s)| s.len() > 1) {
        let e = format!("lost update on {key}: {s:?} each overwrote {p}; at most one can have");
        return Err((e, [vec![*p], s.clone()].concat()));
    }
    let mut order = vec![root];
    while let Some(s) = order.last().and_then(|v| succ.get(v)) {
        if order.len() > preds.len() {
            break;
        }
        order.push(s[0]);
    }
    if order.len() != preds.len() + 1 {
        let off: Vec<_> = preds
            .keys()
            .filter(|v| !order.contains(v))
            .copied()
            .collect();
        let e =
            format!("{key}: versions {off:?} are off the chain from the initial state {order:?}");
        return Err((e, off));
    }
    Ok(order)
}

fn chains(h: &History) -> Result<Chains, String> {
    let mut preds: BTreeMap<String, BTreeMap<Ver, Ver>> = universe()
        .into_iter()
        .map(|k| (k, BTreeMap::new()))
        .collect();
    for rec in h.recs.values() {
        for (key, w) in &rec.writes {
            let named = w.value.as_deref().map(|v| parse_value(v).map(|p| p.2));
            if named.is_some_and(|n| n != Some(w.pred)) {
                return Err(format!(
                    "T{}'s {key} names {named:?}, not {}",
                    rec.id, w.pred
                ));
            }
            let key_preds = preds.entry(key.clone()).or_default();
            key_preds.insert(w.installs(rec.id), w.pred);
        }
    }
    let chain = |(k, p): (&String, &BTreeMap<Ver, Ver>)| match chain_of(k, p) {
        Ok(c) => Ok((k.clone(), c)),
        Err((e, vers)) => Err(vers.iter().fold(e + "\nthe transactions:", |e, v| {
            match h.recs.get(&v.writer()) {
                Some(r) => e + &format!("\n  {r}"),
                None => e,
            }
        })),
    };
    preds.iter().map(chain).collect()
}

/// The database ends in each key's last version.
fn check_final(h: &History, chains: &Chains) -> Result<(), String> {
    for (key, got) in &h.final_state {
        let tail = *chains
            .get(key)
            .and_then(|c| c.last())
            .expect("a chain per key");
        let want = match tail {
            Ver::Present(t) => h.recs[&t].writes[key].value.clone(),
            Ver::Absent(_) => None,
        };
        if *got != want {
            return Err(format!(
                "{key} ends as {got:?}, but its last version is {tail} ({want:?})"
            ));
        }
    }
    Ok(())
}

/// Every read saw a committed transaction's final write (no G1a, no G1b).
fn check_reads(h: &History) -> Result<(), String> {
    for rec in h.recs.values() {
        for o in &rec.reads {
            let w = o.ver.writer();
            let wrote = h.recs.get(&w).and_then(|r| r.writes.get(&o.key));
            let why = match (o.ver, wrote) {
                (Ver::Absent(INITIAL), _) => continue,
                (Ver::Absent(_), Some(x)) if x.value.is_none() => continue,
                (Ver::Present(_), Some(x)) if x.value == o.value => continue,
                _ if !h.recs.contains_key(&w) => {
                    format!("G1a (aborted read): T{w} never committed")
                }
                (Ver::Present(_), Some(_)) => format!("G1b (intermediate read): not T{w}'s last"),
                (Ver::Absent(_), _) => format!("the grave names T{w}, which did not delete it"),
                (Ver::Present(_), None) => format!("T{w} committed without writing it"),
            };
            return Err(format!(
                "{why}: T{} read {} = {:?} @{:?}\n  {rec}",
                rec.id, o.key, o.value, o.at
            ));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ww,
    Wr,
    Rw,
}

/// A dependency between two points of two transactions.
#[derive(Clone, Debug)]
struct Edge {
    from: (u64, At),
    to: (u64, At),
    kind: Kind,
    key: String,
    /// The version read (wr), overwritten by `to` (rw) or installed (ww).
    ver: Ver,
}

fn edges(h: &History, chains: &Chains) -> Vec<Edge> {
    let mut next: HashMap<(&str, Ver), Ver> = HashMap::new();
    for (k, c) in chains {
        next.extend(c.windows(2).map(|w| ((k.as_str(), w[0]), w[1])));
    }
    let mut out = Vec::new();
    let mut add = |from: (u64, At), to: (u64, At), kind, key: &str, ver| {
        if from.0 != to.0 && from.0 != INITIAL {
            let key = key.to_owned();
            out.push(Edge {
                from,
                to,
                kind,
                key,
                ver,
            });
        }
    };
    // Under Snapshot a locking read reads the snapshot's version too (a key
    // changed since is refused its lock), so every read is seen at the start.
    let seen_at = |o: &Obs| match h.isolation {
        Isolation::Snapshot => At::Start,
        Isolation::Serializable => o.at,
    };
    for rec in h.recs.values() {
        for o in &rec.reads {
            add(
                (o.ver.writer(), At::Commit),
                (rec.id, seen_at(o)),
                Kind::Wr,
                &o.key,
                o.ver,
            );
            if let Some(&n) = next.get(&(o.key.as_str(), o.ver)) {
                add(
                    (rec.id, o.at),
                    (n.writer(), At::Commit),
                    Kind::Rw,
                    &o.key,
                    n,
                );
            }
        }
        for (key, w) in &rec.writes {
            let ver = w.installs(rec.id);
            add(
                (w.pred.writer(), At::Commit),
                (rec.id, w.at),
                Kind::Ww,
                key,
                ver,
            );
        }
    }
    out
}

/// The graph over transaction points: a write transaction's start and
/// commit are two nodes (start before commit) under Snapshot, one under
/// Serializable; a read snapshot is one node.
struct Graph {
    ids: Vec<u64>,
    index: HashMap<u64, usize>,
    split: Vec<bool>,
    /// (to, the edge, or `None` for start-before-commit).
    adj: Vec<Vec<(usize, Option<usize>)>>,
}

impl Graph {
    fn new(h: &History, edges: &[Edge]) -> Graph {
        let ids: Vec<u64> = h.recs.keys().copied().collect();
        let index = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        let snapshot = h.isolation == Isolation::Snapshot;
        let split = h.recs.values().map(|r| snapshot && !r.read_only).collect();
        let mut g = Graph {
            ids,
            index,
            split,
            adj: vec![Vec::new(); 2 * h.recs.len()],
        };
        for i in 0..g.ids.len() {
            if g.split[i] {
                g.adj[2 * i].push((2 * i + 1, None));
            }
        }
        for (e, edge) in edges.iter().enumerate() {
            let (from, to) = (g.node(edge.from), g.node(edge.to));
            g.adj[from].push((to, Some(e)));
        }
        g
    }

    fn node(&self, (id, at): (u64, At)) -> usize {
        let i = self.index[&id];
        2 * i + usize::from(self.split[i] && at == At::Commit)
    }

    fn name(&self, node: usize) -> String {
        let i = node / 2;
        match (self.split[i], node % 2) {
            (false, _) => format!("T{}", self.ids[i]),
            (true, 0) => format!("T{}.start", self.ids[i]),
            (true, _) => format!("T{}.commit", self.ids[i]),
        }
    }
}

/// One step of a cycle: from, to, the edge (`None`: start before commit).
type Step = (usize, usize, Option<usize>);

/// A shortest cycle through some node that lies on one, if there is a cycle.
fn find_cycle(adj: &[Vec<(usize, Option<usize>)>]) -> Option<Vec<Step>> {
    let mut indeg = vec![0usize; adj.len()];
    for &(t, _) in adj.iter().flatten() {
        indeg[t] += 1;
    }
    let mut ready: Vec<usize> = (0..adj.len()).filter(|&v| indeg[v] == 0).collect();
    while let Some(v) = ready.pop() {
        for &(t, _) in &adj[v] {
            indeg[t] -= 1;
            if indeg[t] == 0 {
                ready.push(t);
            }
        }
    }
    // What is left lies on a cycle or after one; walking back from it along
    // the edges that are left reaches a node twice, on a cycle.
    let mut back: HashMap<usize, usize> = HashMap::new();
    for (v, out) in adj.iter().enumerate().filter(|(v, _)| indeg[*v] > 0) {
        for &(t, _) in out {
            back.entry(t).or_insert(v);
        }
    }
    let mut v = (0..adj.len()).find(|&v| indeg[v] > 0)?;
    let mut seen = BTreeSet::new();
    while seen.insert(v) {
        v = back[&v];
    }
    Some(shortest_cycle(adj, &indeg, v))
}

fn shortest_cycle(adj: &[Vec<(usize, Option<usize>)>], indeg: &[usize], r: usize) -> Vec<Step> {
    let mut prev: HashMap<usize, (usize, Option<usize>)> = HashMap::new();
    let mut queue = VecDeque::from([r]);
    while let Some(v) = queue.pop_front() {
        for &(t, e) in &adj[v] {
            if t == r {
                let mut steps = vec![(v, t, e)];
                let mut cur = v;
                while cur != r {
                    let (p, pe) = prev[&cur];
                    steps.push((p, cur, pe));
                    cur = p;
                }
                steps.reverse();
                return steps;
            }
            if indeg[t] > 0 {
                if let Entry::Vacant(slot) = prev.entry(t) {
                    slot.insert((v, e));
                    queue.push_back(t);
                }
            }
        }
    }
    unreachable!("node {r} lies on a cycle")
}

fn classify(isolation: Isolation, kinds: &[Kind]) -> &'static str {
    let rw = kinds.iter().filter(|k| **k == Kind::Rw).count();
    match rw {
        _ if kinds.iter().all(|k| *k == Kind::Ww) => "G0 (a cycle of overwrites)",
        0 => "G1c (a cycle of overwrites and reads)",
        1 => "G-single (a read misses a write that its other reads depend on)",
        _ if isolation == Isolation::Serializable => "G2 (anti-dependency cycle: not serializable)",
        _ => "a cycle of start and commit points, which no snapshot order allows",
    }
}

fn describe(h: &History, g: &Graph, edges: &[Edge], cycle: &[Step]) -> String {
    let kinds: Vec<Kind> = cycle
        .iter()
        .filter_map(|s| s.2)
        .map(|e| edges[e].kind)
        .collect();
    let mut out = format!("{}:\n", classify(h.isolation, &kinds));
    let mut txns = BTreeSet::new();
    for &(from, to, e) in cycle {
        txns.insert(g.ids[from / 2]);
        let (a, b) = (g.name(from), g.name(to));
        let why = match e.map(|e| &edges[e]) {
            None => "a transaction starts before it commits".to_owned(),
            Some(e) => match e.kind {
                Kind::Wr => format!("{b} read {} = {}", e.key, e.ver),
                Kind::Rw => format!("{a} read {} before {}", e.key, e.ver),
                Kind::Ww => format!("{b} overwrote {a}'s {} with {}", e.key, e.ver),
            },
        };
        let kind = e.map_or("then".to_owned(), |e| format!("{:?}", edges[e].kind));
        out += &format!("  {a} -{kind}-> {b}: {why}\n");
    }
    out += "the transactions:\n";
    for t in txns {
        out += &format!("  {}\n", h.recs[&t]);
    }
    out
}

/// What a checked history held.
#[derive(Debug, Default)]
struct Summary {
    txns: usize,
    snapshots: usize,
    reads: usize,
    locked_reads: usize,
    absent_reads: usize,
    deletes: usize,
    ww: usize,
    wr: usize,
    rw: usize,
}

fn summary(h: &History, edges: &[Edge]) -> Summary {
    let reads = || h.recs.values().flat_map(|r| r.reads.iter());
    let writes = || h.recs.values().flat_map(|r| r.writes.values());
    let count = |k| edges.iter().filter(|e| e.kind == k).count();
    Summary {
        txns: h.recs.len(),
        snapshots: h.recs.values().filter(|r| r.read_only).count(),
        reads: reads().count(),
        locked_reads: reads().filter(|o| o.at == At::Commit).count(),
        absent_reads: reads().filter(|o| o.value.is_none()).count(),
        deletes: writes().filter(|w| w.value.is_none()).count(),
        ww: count(Kind::Ww),
        wr: count(Kind::Wr),
        rw: count(Kind::Rw),
    }
}

/// Checks a history; the error describes the anomaly found.
fn check(h: &History) -> Result<Summary, String> {
    let chains = chains(h)?;
    check_final(h, &chains)?;
    check_reads(h)?;
    let edges = edges(h, &chains);
    let g = Graph::new(h, &edges);
    match find_cycle(&g.adj) {
        Some(cycle) => Err(describe(h, &g, &edges, &cycle)),
        None => Ok(summary(h, &edges)),
    }
}

fn run_and_check(isolation: Isolation) {
    let t = Instant::now();
    let (h, tally) = run_history(isolation);
    let s = check(&h).unwrap_or_else(|e| {
        panic!(
            "{isolation:?} history, seed {} (DIRECTKV_HISTORY_SEED): {e}",
            h.seed
        )
    });
    eprintln!("{isolation:?}: {s:?}, checked in {:?}", t.elapsed());
    assert!(tally.committed > 0, "some write transactions commit");
    let recorded = tally.committed + tally.snapshots + 1; // and the setup
    assert_eq!(s.txns as u64, recorded, "every committed one is checked");
    assert!(s.reads >= s.txns, "each transaction reads: {s:?}");
    if env_u64("DIRECTKV_HISTORY_TXNS", TXNS_PER_THREAD) >= 100 {
        // The history exercised what the checker checks.
        assert!(s.snapshots > 0 && s.locked_reads > 0, "{s:?}");
        assert!(s.absent_reads > 0 && s.deletes > 0, "{s:?}");
        assert!(s.ww > 0 && s.wr > 0 && s.rw > 0, "{s:?}");
    }
}

#[test]
fn serializable_histories_have_acyclic_dependency_graphs() {
    run_and_check(Isolation::Serializable);
}

#[test]
fn snapshot_histories_have_no_g0_g1_or_g_single() {
    run_and_check(Isolation::Snapshot);
}

// The checker on hand-made histories with known anomalies.

fn planted(id: u64, n: u64, pred: Ver) -> Wrote {
    Wrote {
        value: Some(format!("{id}.{n}|{}", pred.encode())),
        pred,
        at: At::Start,
    }
}

fn saw(key: &str, at: At, value: &Wrote, ver: Ver) -> Obs {
    let value = value.value.clone();
    let key = key.to_owned();
    Obs {
        key,
        at,
        value,
        ver,
    }
}

fn txn(id: u64, reads: Vec<Obs>, writes: Vec<(&str, Wrote)>) -> Rec {
    let writes = writes.into_iter().map(|(k, w)| (k.to_owned(), w));
    Rec {
        id,
        read_only: false,
        reads,
        writes: writes.collect(),
        ops: Vec::new(),
    }
}

fn history(isolation: Isolation, recs: Vec<Rec>) -> History {
    History {
        isolation,
        seed: 0,
        recs: recs.into_iter().map(|r| (r.id, r)).collect(),
        final_state: BTreeMap::new(),
    }
}

fn verdict(isolation: Isolation, recs: &[Rec]) -> Result<Summary, String> {
    check(&history(isolation, recs.to_vec()))
}

#[test]
fn the_checker_finds_planted_anomalies() {
    let (x, y, p1) = ("k00", "k01", Ver::Present(SETUP));
    let (x1, y1) = (planted(1, 0, Ver::Absent(0)), planted(1, 1, Ver::Absent(0)));
    let setup = txn(1, vec![], vec![(x, x1.clone()), (y, y1.clone())]);
    let both = |at| vec![saw(x, at, &x1, p1), saw(y, at, &y1, p1)];
    // Write skew: a G2 cycle, refused by Serializable only.
    let a = txn(2, both(At::Start), vec![(x, planted(2, 0, p1))]);
    let b = txn(3, both(At::Start), vec![(y, planted(3, 0, p1))]);
    let skew = [setup.clone(), a.clone(), b];
    let e = verdict(Isolation::Serializable, &skew).expect_err("write skew");
    assert!(e.starts_with("G2"), "{e}");
    verdict(Isolation::Snapshot, &skew).expect("write skew is snapshot isolation");
    // Lost update.
    let lost = [
        setup.clone(),
        a.clone(),
        txn(3, both(At::Start), vec![(x, planted(3, 0, p1))]),
    ];
    let e = verdict(Isolation::Snapshot, &lost).expect_err("lost update");
    assert!(e.starts_with("lost update on k00"), "{e}");
    // G-single: T3 sees T2's x but misses its y, from its snapshot.
    let (x2, y2) = (planted(2, 0, p1), planted(2, 1, p1));
    let w = txn(2, both(At::Start), vec![(x, x2.clone()), (y, y2)]);
    let skewed = |at| {
        txn(
            3,
            vec![saw(x, at, &x2, Ver::Present(2)), saw(y, At::Start, &y1, p1)],
            vec![],
        )
    };
    let e = verdict(
        Isolation::Snapshot,
        &[setup.clone(), w.clone(), skewed(At::Start)],
    );
    assert!(e.expect_err("G-single").starts_with("G-single"));
    // ... also through a locking read (read skew; Snapshot refuses the lock
    // of a key changed since the snapshot).
    let locked = [setup.clone(), w.clone(), skewed(At::Commit)];
    let e = verdict(Isolation::Snapshot, &locked);
    assert!(e.expect_err("read skew").starts_with("G-single"));
    verdict(Isolation::Serializable, &locked).expect_err("not serializable");
    // A lost update through a locking read: T3 read x from its snapshot,
    // then locked it (reading T2's x), and wrote over the first read.
    let x3 = planted(3, 0, p1);
    let relocked = txn(
        3,
        vec![
            saw(x, At::Start, &x1, p1),
            saw(x, At::Commit, &x2, Ver::Present(2)),
        ],
        vec![(x, x3)],
    );
    for isolation in [Isolation::Snapshot, Isolation::Serializable] {
        let e = verdict(isolation, &[setup.clone(), w.clone(), relocked.clone()]);
        assert!(e
            .expect_err("lost update")
            .starts_with("lost update on k00"));
    }
    // G1a and G1b.
    let ghost = planted(9, 0, p1);
    let aborted = txn(3, vec![saw(x, At::Start, &ghost, Ver::Present(9))], vec![]);
    let e = verdict(Isolation::Snapshot, &[setup.clone(), aborted]).expect_err("G1a");
    assert!(e.starts_with("G1a"), "{e}");
    let early = planted(2, 0, p1);
    let twice = txn(2, both(At::Start), vec![(x, planted(2, 1, p1))]);
    let inter = txn(3, vec![saw(x, At::Start, &early, Ver::Present(2))], vec![]);
    let e = verdict(Isolation::Snapshot, &[setup, twice, inter]).expect_err("G1b");
    assert!(e.starts_with("G1b"), "{e}");
}

// Write skew: two doctors on call, each goes off call if both are on.

fn reset_doctors(db: &Database) {
    let mut w = db.begin_write().expect("begin");
    w.put(b"x", b"1").expect("put x");
    w.put(b"y", b"1").expect("put y");
    w.commit().expect("reset the doctors");
}

fn on_call(get: impl Fn(&[u8]) -> DbResult<Option<Vec<u8>>>) -> u32 {
    let one = |k: &[u8]| {
        get(k)
            .expect("read a doctor")
            .map_or(0, |v| u32::from(v == b"1"))
    };
    one(b"x") + one(b"y")
}

fn on_call_now(db: &Database) -> u32 {
    let r = db.begin_read().expect("begin_read");
    on_call(|k| r.get(k))
}

/// Both doctors begin and read before either commits (one thread); returns
/// the first and the second commit's results.
fn doctors_in_turn(db: &Database, isolation: Isolation, round: u32) -> [DbResult<()>; 2] {
    reset_doctors(db);
    let opts = WriteOptions {
        isolation,
        lock_timeout: LOCK_TIMEOUT,
        ..WriteOptions::default()
    };
    let mut a = db.begin_write_with(&opts).expect("begin doctor x");
    let mut b = db.begin_write_with(&opts).expect("begin doctor y");
    for (t, me) in [(&mut a, b"x"), (&mut b, b"y")] {
        assert_eq!(on_call(|k| t.get(k)), 2, "both see both on call");
        t.put(me, b"0").expect("go off call");
    }
    if round % 2 == 0 {
        let first = a.commit();
        [first, b.commit()]
    } else {
        let first = b.commit();
        [first, a.commit()]
    }
}

/// The same on two threads that meet at a barrier after reading.
fn doctors_at_once(db: &Database, isolation: Isolation) -> Vec<DbResult<()>> {
    reset_doctors(db);
    let opts = WriteOptions {
        isolation,
        lock_timeout: LOCK_TIMEOUT,
        ..WriteOptions::default()
    };
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let doctor = |me: &'static [u8]| {
            let (opts, barrier) = (&opts, &barrier);
            s.spawn(move || {
                let mut t = db.begin_write_with(opts).expect("begin a doctor");
                let on = on_call(|k| t.get(k));
                barrier.wait();
                assert_eq!(on, 2, "both see both on call");
                t.put(me, b"0").expect("go off call");
                t.commit()
            })
        };
        let threads = [doctor(b"x"), doctor(b"y")];
        threads.map(|t| t.join().expect("a doctor thread")).into()
    })
}

#[test]
fn write_skew_happens_under_snapshot_and_is_refused_under_serializable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), options()).expect("open");
    for round in 0..20 {
        for r in doctors_in_turn(&db, Isolation::Snapshot, round) {
            r.expect("Snapshot checks only written keys; the doctors wrote different ones");
        }
        assert_eq!(on_call_now(&db), 0, "write skew: both went off call");
        let [first, second] = doctors_in_turn(&db, Isolation::Serializable, round);
        first.expect("the first commit validates");
        assert!(
            matches!(second, Err(Error::Conflict { .. })),
            "the second read what the first changed: {second:?}"
        );
        assert_eq!(on_call_now(&db), 1, "Serializable keeps one on call");
    }
    for _ in 0..10 {
        let skew = doctors_at_once(&db, Isolation::Snapshot);
        assert!(skew.iter().all(Result::is_ok), "{skew:?}");
        assert_eq!(on_call_now(&db), 0, "write skew between threads");
        let refused = doctors_at_once(&db, Isolation::Serializable);
        let conflicts = (refused.iter())
            .filter(|r| matches!(r, Err(Error::Conflict { .. })))
            .count();
        assert_eq!(
            (conflicts, refused.iter().filter(|r| r.is_ok()).count()),
            (1, 1)
        );
        assert_eq!(on_call_now(&db), 1, "Serializable keeps one on call");
    }
}
