//! What the log store and the state machine share: the database and the
//! handles of its tables (opened once, at open), running database work off
//! the async runtime, turning errors into openraft's, JSON records, and
//! deleting key ranges of a table in bounded transactions.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use directkv::{Database, Durability, Isolation, ReadTxn, Table, WriteOptions, WriteTxn};
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{keys, DecodeError, Error, NodeId};

/// Where the storage runs its database work, which waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Exec {
    /// On tokio's blocking pool, off the runtime's workers: a node's.
    #[default]
    BlockingPool,
    /// On the calling task, whose thread waits: for a simulation that runs
    /// every node on one thread in simulated time, where work finishing on
    /// other threads would race with it.
    Inline,
}

/// The database both halves share.
pub(crate) type Db = Arc<Store>;

/// The handles of the crate's tables that [`crate::upgrade`] opens.
pub(crate) struct Tables {
    /// `raft.meta`.
    pub(crate) meta: Table,
    /// `raft.log`.
    pub(crate) log: Table,
    /// The applied state's data generation and its table.
    pub(crate) data: (u64, Table),
    /// The current snapshot's sequence and chunk table, if there is one.
    pub(crate) snap: Option<(u64, Table)>,
}

/// The database, the handles of its tables, and how much one of this
/// crate's transactions may write.
pub(crate) struct Store {
    db: Database,
    /// Constant after open: the metadata table.
    pub(crate) meta: Table,
    /// Constant after open: the log table.
    pub(crate) log: Table,
    /// The current data generation and its table: changed by an install,
    /// after its flip commits (a reader that meets another generation
    /// opens that one's table by name, see [`Store::data_in`]).
    data: RwLock<(u64, Table)>,
    /// The chunk tables of stored snapshots by sequence: every one created
    /// since open or current at open, and not dropped since. Each current
    /// or pinned sequence has its table here.
    snaps: std::sync::Mutex<BTreeMap<u64, Table>>,
    /// Every write of this crate holds it shared; a snapshot build whose
    /// read keeps being given up holds it exclusively, so that nothing
    /// writes while it reads (see [`Store::quiesced`]).
    quiesce: RwLock<()>,
    /// Bytes of keys and values one transaction that writes many records
    /// (an append, a cleanup, a snapshot's pairs or chunks) writes at
    /// most, so that none outgrows the cache: a transaction's pages stay
    /// in it until its commit.
    pub(crate) batch_bytes: usize,
    /// A purge openraft asked for past the applied state (a follower
    /// purges up to a snapshot while it is still installing it): done,
    /// durably, once the applied state covers it, and meanwhile only
    /// shown (see `log_store`).
    pub(crate) purge_pending: std::sync::Mutex<Option<openraft::LogId<NodeId>>>,
    /// The snapshot sequence numbers whose chunks are in use (being read
    /// or received), with how many users each: no cleanup deletes them.
    pins: std::sync::Mutex<BTreeMap<u64, usize>>,
    /// Where database work runs.
    pub(crate) exec: Exec,
}

impl Store {
    pub(crate) fn new(db: Database, tables: Tables, cache_bytes: usize, exec: Exec) -> Db {
        let batch_bytes = batch_bytes(cache_bytes);
        let snaps = tables.snap.into_iter().collect();
        Arc::new(Store {
            db,
            meta: tables.meta,
            log: tables.log,
            data: RwLock::new(tables.data),
            snaps: std::sync::Mutex::new(snaps),
            quiesce: RwLock::new(()),
            batch_bytes,
            purge_pending: std::sync::Mutex::new(None),
            pins: std::sync::Mutex::new(BTreeMap::new()),
            exec,
        })
    }

    /// Runs `body` in a write transaction (again, on a retryable error) and
    /// commits it with `opts`.
    pub(crate) fn write<T>(
        &self,
        opts: &WriteOptions,
        body: impl FnMut(&mut WriteTxn<'_>) -> directkv::Result<T>,
    ) -> Result<T, Error> {
        let _shared = self.quiesce.read().map_err(|_| poisoned())?;
        Ok(self.db.transaction(opts, body)?)
    }

    /// Runs `body` as [`Store::write`] does, for the caller of
    /// [`Store::quiesced`], which holds every other write back.
    pub(crate) fn write_held<T>(
        &self,
        opts: &WriteOptions,
        body: impl FnMut(&mut WriteTxn<'_>) -> directkv::Result<T>,
    ) -> Result<T, Error> {
        assert!(
            self.quiesce.try_read().is_err(),
            "a held write runs only while writes are held back"
        );
        Ok(self.db.transaction(opts, body)?)
    }

    /// The data table of generation `generation` as `r` sees it: the
    /// handle kept when it is the current one, else opened by name (a read
    /// racing an install's flip).
    pub(crate) fn data_in(&self, r: &ReadTxn<'_>, generation: u64) -> Result<Table, Error> {
        let kept = self.data_table();
        if kept.0 == generation {
            return Ok(kept.1);
        }
        Ok(r.open_table(&keys::data_table(generation))?)
    }

    /// The current data generation and its table.
    pub(crate) fn data_table(&self) -> (u64, Table) {
        // Each change is one assignment: a panic cannot leave it half-made.
        match self.data.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Makes `table` the current data table, of generation `generation`
    /// (after the commit that made it so).
    pub(crate) fn set_data_table(&self, generation: u64, table: Table) {
        let mut g = match self.data.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        assert!(g.0 < generation, "generations only grow");
        *g = (generation, table);
    }

    /// The chunk table of snapshot `seq`.
    ///
    /// # Errors
    /// [`Error::Snapshot`] when this database has none.
    pub(crate) fn snap_table(&self, seq: u64) -> Result<Table, Error> {
        self.snaps()
            .get(&seq)
            .cloned()
            .ok_or_else(|| Error::Snapshot(format!("snapshot {seq} has no chunk table")))
    }

    /// Keeps `table` as the chunk table of snapshot `seq`, just created.
    pub(crate) fn add_snap_table(&self, seq: u64, table: Table) {
        let old = self.snaps().insert(seq, table);
        assert!(old.is_none(), "a sequence's chunk table is created once");
    }

    /// Forgets the chunk tables of `seqs`, dropped.
    pub(crate) fn forget_snap_tables(&self, seqs: &[u64]) {
        let mut snaps = self.snaps();
        for seq in seqs {
            snaps.remove(seq);
        }
        assert!(
            seqs.iter().all(|s| !snaps.contains_key(s)),
            "a dropped table's handle is gone"
        );
    }

    fn snaps(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Table>> {
        // Each change of the map is one insert or remove.
        match self.snaps.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Marks the chunks of snapshot `seq` in use until the pin is dropped.
    pub(crate) fn pin(self: &Arc<Self>, seq: u64) -> ChunkPin {
        *self.pins().entry(seq).or_insert(0) += 1;
        ChunkPin {
            db: self.clone(),
            seq,
        }
    }

    /// The sequence numbers whose chunks are in use.
    pub(crate) fn pinned(&self) -> Vec<u64> {
        self.pins().keys().copied().collect()
    }

    fn pins(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, usize>> {
        // Each change of the map is one insert or remove: a panic cannot
        // leave it half-changed.
        match self.pins.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Runs `f` while no write of this crate runs: the database is this
    /// crate's, so nothing changes under `f`'s reads and no snapshot of
    /// them is given up.
    pub(crate) fn quiesced<T>(&self, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let _exclusive = self.quiesce.write().map_err(|_| poisoned())?;
        f()
    }
}

/// The chunks of one snapshot, kept from cleanup while this lives.
pub(crate) struct ChunkPin {
    pub(crate) db: Db,
    pub(crate) seq: u64,
}

impl Clone for ChunkPin {
    fn clone(&self) -> Self {
        self.db.pin(self.seq)
    }
}

impl Drop for ChunkPin {
    fn drop(&mut self) {
        let mut pins = self.db.pins();
        let n = pins
            .get_mut(&self.seq)
            .expect("a pin is counted while it lives");
        assert!(*n > 0, "a counted pin has a user");
        *n -= 1;
        if *n == 0 {
            pins.remove(&self.seq);
        }
    }
}

fn poisoned() -> Error {
    Error::Stopped(
        "a snapshot build panicked while it held writes back; reopen the database".into(),
    )
}

impl std::ops::Deref for Store {
    type Target = Database;
    fn deref(&self) -> &Database {
        &self.db
    }
}

/// Keys one cleanup transaction deletes at most.
pub(crate) const DELETE_BATCH_KEYS: usize = 1024;

/// The least [`Store::batch_bytes`]: one record of any size still goes in
/// a transaction of its own.
const BATCH_BYTES_MIN: usize = 64 << 10;

/// The most [`Store::batch_bytes`].
const BATCH_BYTES_MAX: usize = 4 << 20;

/// Bytes one of the crate's transactions that writes many records writes
/// at most, with a cache of `cache_bytes`.
pub(crate) fn batch_bytes(cache_bytes: usize) -> usize {
    // A record costs about twice its size in pages (half-full leaves,
    // overflow rounding); this keeps one batch under an eighth of the
    // cache.
    let batch_bytes = (cache_bytes / 16).clamp(BATCH_BYTES_MIN, BATCH_BYTES_MAX);
    assert!(
        (BATCH_BYTES_MIN..=BATCH_BYTES_MAX).contains(&batch_bytes),
        "a batch is bounded both ways"
    );
    batch_bytes
}

/// Splits `items` into runs of at most `limit` bytes (as `size` counts
/// them), each run at least one item.
pub(crate) fn runs<'a, T>(
    items: &'a [T],
    limit: usize,
    size: impl Fn(&T) -> usize + 'a,
) -> impl Iterator<Item = &'a [T]> + 'a {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let n = rest
            .iter()
            .take_while(|it| {
                bytes += size(it);
                bytes <= limit
            })
            .count()
            .max(1);
        let (run, tail) = rest.split_at(n);
        assert!(!run.is_empty(), "every run makes progress");
        assert!(
            run.len() == 1 || run.iter().map(&size).sum::<usize>() <= limit,
            "a run of several items stays under the limit"
        );
        rest = tail;
        Some(run)
    })
}

/// A commit that waits for the log: what Raft must not forget (the vote,
/// appended entries, an installed snapshot).
pub(crate) fn durable() -> WriteOptions {
    WriteOptions {
        // Each half is the only writer of its keys: nothing to validate.
        isolation: Isolation::Snapshot,
        durability: Some(Durability::Sync),
        ..WriteOptions::default()
    }
}

/// A commit that does not wait: what the durable log can rebuild (applied
/// entries), or what may be lost without harm (the committed id, cleanup).
/// The next durable commit carries it: the log is one sequence.
pub(crate) fn lazy() -> WriteOptions {
    WriteOptions {
        durability: Some(Durability::NoSyncNotDurable),
        ..durable()
    }
}

/// How many times a read starts over when its snapshot is given up.
const READ_ATTEMPTS: usize = 32;

/// Runs `f` in a read transaction, in a new one when the snapshot is given
/// up ([`directkv::Error::SnapshotTooOld`]: writes went on while it read
/// and the versions it needed passed the version store's cap).
pub(crate) fn read<T>(
    db: &Store,
    f: impl FnMut(&ReadTxn<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    read_some(db, READ_ATTEMPTS, f)
}

/// [`read`], at most `attempts` times.
pub(crate) fn read_some<T>(
    db: &Store,
    attempts: usize,
    mut f: impl FnMut(&ReadTxn<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    assert!(attempts > 0, "a read is tried at least once");
    let mut attempt = 0;
    loop {
        assert!(attempt < attempts, "the attempts are bounded");
        let r = db.begin_read()?;
        match f(&r) {
            Err(Error::Database(e)) if e.is_retryable() && attempt + 1 < attempts => {
                attempt += 1;
                drop(r);
                std::thread::yield_now();
            }
            res => return res,
        }
    }
}

/// The JSON record under `key` in `raft.meta`, read on its own.
pub(crate) fn get_json<T: DeserializeOwned>(
    db: &Store,
    key: &[u8],
    what: &'static str,
) -> Result<Option<T>, Error> {
    read(db, |r| from_json(r.table(&db.meta).get(key)?, what))
}

/// Runs `f` where `exec` says: on the runtime's blocking pool (database
/// calls wait for disk), or inline. A panic in `f` on the pool becomes an
/// error (the database has stopped itself).
pub(crate) async fn blocking<T, F>(
    exec: Exec,
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    f: F,
) -> Result<T, StorageError<NodeId>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Error> + Send + 'static,
{
    if exec == Exec::Inline {
        return f().map_err(|e| storage_error(subject, verb, &e));
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(storage_error(subject, verb, &e)),
        Err(join) => Err(storage_error(subject, verb, &join)),
    }
}

/// openraft's error for `e`.
pub(crate) fn storage_error<E: std::error::Error + 'static>(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: &E,
) -> StorageError<NodeId> {
    StorageIOError::new(subject, verb, AnyError::new(e)).into()
}

/// The JSON record stored as `bytes`.
pub(crate) fn from_json<T: DeserializeOwned>(
    bytes: Option<Vec<u8>>,
    what: &'static str,
) -> Result<Option<T>, Error> {
    bytes
        .map(|b| {
            serde_json::from_slice(&b).map_err(|e| {
                Error::Decode(DecodeError {
                    what,
                    why: e.to_string(),
                })
            })
        })
        .transpose()
}

/// Stores `value` as JSON under `key` in `table` (`raft.meta`).
pub(crate) fn put_json<T: Serialize>(
    w: &mut WriteTxn<'_>,
    table: &Table,
    key: &[u8],
    value: &T,
) -> directkv::Result<()> {
    // The records stored are plain structs of numbers and maps with
    // string or number keys: they serialize.
    let bytes = serde_json::to_vec(value).expect("a record serializes");
    w.table(table).put(key, &bytes)
}

/// Deletes every key of `table` in `[lo, hi)` (`hi` `None`: to the
/// table's end), at most [`DELETE_BATCH_KEYS`] keys or
/// [`Store::batch_bytes`] of values per transaction, from the highest key down
/// when `from_top`. A crash part way leaves what is left contiguous at the
/// end it did not start from. When `sync`, the last transaction waits for
/// the log (and so carries the others). Returns the keys deleted.
pub(crate) fn delete_range(
    db: &Store,
    table: &Table,
    lo: &[u8],
    hi: Option<&[u8]>,
    from_top: bool,
    sync: bool,
) -> Result<u64, Error> {
    delete_range_by(db, table, (lo, hi), from_top, sync, db.batch_bytes)
}

/// [`delete_range`] with transactions of about `batch_bytes` of values
/// (at least one key each): a delete reads each value it deletes, and
/// keeps it while a snapshot may need it, so large values go a few at a
/// time.
pub(crate) fn delete_range_by(
    db: &Store,
    table: &Table,
    (lo, hi): (&[u8], Option<&[u8]>),
    from_top: bool,
    sync: bool,
    batch_bytes: usize,
) -> Result<u64, Error> {
    assert!(
        hi.is_none_or(|hi| lo < hi),
        "a range to delete is not empty or reversed"
    );
    let mut deleted = 0u64;
    loop {
        let (batch, more) = read(db, |r| {
            scan_batch(r, table, (lo, hi), from_top, batch_bytes)
        })?;
        assert!(
            batch
                .iter()
                .all(|k| lo <= k.as_slice() && hi.is_none_or(|hi| k.as_slice() < hi)),
            "a batch holds only keys of the range"
        );
        if batch.is_empty() {
            return Ok(deleted);
        }
        let opts = if sync && !more { durable() } else { lazy() };
        db.write(&opts, |w| {
            let mut t = w.table(table);
            for k in &batch {
                t.delete(k)?;
            }
            Ok(())
        })?;
        let before = deleted;
        deleted += batch.len() as u64;
        assert!(deleted > before, "each round deletes something");
        if !more {
            return Ok(deleted);
        }
    }
}

/// The next keys [`delete_range`] deletes, and whether any are left after
/// them.
fn scan_batch(
    r: &ReadTxn<'_>,
    table: &Table,
    (lo, hi): (&[u8], Option<&[u8]>),
    from_top: bool,
    batch_bytes: usize,
) -> Result<(Vec<Vec<u8>>, bool), Error> {
    let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
    let mut it = r.table(table).range((Bound::Included(lo), hi));
    let mut next = || if from_top { it.next_back() } else { it.next() };
    let mut batch = Vec::new();
    let mut bytes = 0usize;
    while batch.len() < DELETE_BATCH_KEYS && bytes < batch_bytes {
        let Some(kv) = next() else {
            return Ok((batch, false));
        };
        let (k, v) = kv?;
        bytes += k.len() + v.len();
        batch.push(k);
    }
    let more = next().transpose()?.is_some();
    assert!(
        batch.len() <= DELETE_BATCH_KEYS,
        "a batch is bounded in keys"
    );
    assert!(
        batch.windows(2).all(|w| (w[0] < w[1]) != from_top),
        "a batch comes in the order asked"
    );
    Ok((batch, more))
}
