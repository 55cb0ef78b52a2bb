//! Write transactions, many at once (see `docs/mvcc.md`, "Write
//! transactions").
//!
//! A write transaction registers a snapshot when it begins and reads it
//! (plus its own writes, kept in memory until commit). `put`, `delete` and
//! `get_for_update` take the key's row lock ([`super::locks`]), held until
//! the commit record is appended; `get_for_update` reads the latest
//! committed value, which nobody else can change while the lock is held.
//!
//! Commit, in order:
//! 1. *warm*: each key it writes is looked up outside every lock (unless
//!    `get_for_update` read it), for its before-image, so the pages its
//!    change needs are in the pool (cache misses of many transactions
//!    overlap here); each look-up keeps the trail of its descent;
//! 2. the *commit section*, one transaction at a time (a gate a running
//!    thread takes when it is free, then the tree's write lock): validate, stage the
//!    before-images for snapshots, apply to the tree (each key from its
//!    trail while no structure change began since the trail was taken)
//!    and the log, publish the new commit to snapshots. Readers do not wait for it. It never
//!    reads the disk: a page found missing rolls the attempt back, the gate
//!    is let go, the page read, and the section entered again;
//! 3. the row locks go (early lock release), the snapshot ends, the
//!    versions no snapshot needs any more are dropped, and the commit
//!    waits for its record to be durable outside every lock.
//!
//! Validation: under [`Isolation::Serializable`], at commit, every key and
//! range the transaction read from its snapshot must be unchanged since. A
//! committed transaction's reads then equal the state at its commit point:
//! the order of commits is a serial order. Under [`Isolation::Snapshot`]
//! every key it locks (`put`, `delete`, `get_for_update`) must be unchanged
//! since its snapshot, checked as the lock is taken (PostgreSQL's
//! `REPEATABLE READ`): the first committer wins, and a locking read reads
//! the snapshot's value; the commit checks nothing more. The version store
//! holds a version for every key each commit since the snapshot changed,
//! because the transaction's own snapshot is live ([`super::versions`]),
//! so "changed since" is a look-up there.
//!
//! Invariants:
//! - A transaction holds its snapshot from begin until after its commit
//!   section, and its row locks until its commit record is appended or it
//!   ends.
//! - Nothing of a transaction is applied unless it validated, in the same
//!   commit section; a failed validation changes nothing.
//! - With `Options::serial_writers` one writer lock is held from begin to
//!   end, so no two write transactions overlap (and none conflicts).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::super::engine::Inner;
use super::super::options::{Isolation, WriteOptions};
use super::super::Durability;
use super::commit::{Applied, CommitCtx};
use super::read::{self as txn, RangeIter, Traced};
use super::tables::{self, TableState, Tree};
use super::versions::{Before, CommitVersions, KeyRange, Snapshot};
use crate::btree::tree;
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::TxnId;
use crate::health::{self, PanicGuard};
use crate::io::Storage;
use crate::lsn::Lsn;

mod commit;
mod ddl;
pub(in crate::db) use ddl::list_tables;
pub use ddl::TableMut;

/// Commit sections a commit enters that each find a page missing, before
/// its last try reads missing pages inside the section.
const COMMIT_MISSES_MAX: usize = 8;

/// Why a locking read or write under [`Isolation::Snapshot`] is refused
/// (the reason of its [`Error::Conflict`]).
const SNAPSHOT_CHANGED_SINCE: &str = "Snapshot isolation refuses to lock or write a key that \
     another transaction committed a change to after this transaction's snapshot (first \
     committer wins; a locking read must read the snapshot's value)";

/// What ended a transaction before its commit: every later call returns
/// it again.
enum Refused {
    /// It was a deadlock's victim, waiting for `key`.
    Deadlock { key: String },
    /// Under Snapshot it locked a key changed since its snapshot.
    Conflict { key: String },
    /// Under Snapshot it locked a key after its snapshot was given up.
    TooOld {
        snapshot: u64,
        oldest_kept: u64,
        cap_bytes: usize,
    },
}

impl Refused {
    fn error(&self) -> Error {
        match self {
            Refused::Deadlock { key } => Error::Deadlock { key: key.clone() },
            Refused::Conflict { key } => Error::Conflict {
                key: key.clone(),
                reason: SNAPSHOT_CHANGED_SINCE.into(),
            },
            &Refused::TooOld {
                snapshot,
                oldest_kept,
                cap_bytes,
            } => Error::SnapshotTooOld {
                snapshot,
                oldest_kept,
                cap_bytes,
            },
        }
    }
}

/// The keys and ranges a transaction read from its snapshot (qualified,
/// see [`super::tables`]).
#[derive(Default)]
struct ReadSet {
    keys: BTreeSet<Vec<u8>>,
    ranges: Vec<KeyRange>,
}

/// The write transaction. Dropping it without `commit` aborts it. Many run
/// at once (see [`Database::begin_write`](crate::Database::begin_write)).
pub struct WriteTxn<'db, S: Storage = crate::io::OsStorage> {
    inner: &'db Inner<S>,
    /// Its id: its row locks' owner.
    id: TxnId,
    opts: WriteOptions,
    snap: Option<Arc<Snapshot<'db>>>,
    /// The writer lock's ticket under `Options::serial_writers`.
    serial: Option<u64>,
    /// Its writes, by qualified key (see [`super::tables`]).
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Qualified keys whose row lock it holds.
    locked: Vec<Vec<u8>>,
    /// The tables (and the catalog) it reached, by id.
    tables: BTreeMap<u32, Arc<TableState>>,
    /// Tables it created, and dropped, by id.
    created: BTreeMap<u32, Arc<TableState>>,
    dropped: BTreeMap<u32, Arc<TableState>>,
    /// Keys whose latest committed value `get_for_update` read under the
    /// lock before this transaction wrote them, with that value: their
    /// writes are based on the latest, not the snapshot, and the value
    /// stays the latest while the lock is held. With each, the trail of the
    /// descent that read it, until the commit takes it: the commit may
    /// change the key from there while the tree's structure holds.
    for_update: BTreeMap<Vec<u8>, (Before, Option<Traced>)>,
    /// What it read from its snapshot (Serializable only).
    read_set: Mutex<ReadSet>,
    /// Set when it was a deadlock's victim, or a locking read or write
    /// of it was refused under Snapshot: it can only end.
    refused: Option<Refused>,
    /// Its writes were applied (it committed, or its commit's outcome is
    /// unknown): they are no longer only its own.
    committed: bool,
    /// Set when it ends without committing: its iterators merge writes
    /// that are gone. Made by the first iterator that merges any, so a
    /// transaction without one allocates nothing for it.
    discarded: std::sync::OnceLock<Arc<AtomicBool>>,
}

impl<'db, S: Storage> WriteTxn<'db, S> {
    /// Begins a write transaction (with the writer lock's `serial` ticket
    /// under `Options::serial_writers`).
    pub(in crate::db) fn new(
        inner: &'db Inner<S>,
        opts: WriteOptions,
        serial: Option<u64>,
    ) -> Result<Self> {
        assert_eq!(
            serial.is_some(),
            inner.env.opts.serial_writers,
            "serial writers hold the writer lock"
        );
        let snap = Snapshot::take(&inner.txns.versions).map(Arc::new);
        let snap = match snap {
            Ok(s) => s,
            Err(e) => {
                if let Some(t) = serial {
                    inner.txns.writer.release(t);
                }
                return Err(e);
            }
        };
        inner
            .vitals
            .counters
            .writers_begun
            .fetch_add(1, Ordering::Relaxed);
        Ok(WriteTxn {
            inner,
            id: inner.vitals.counters.next_txn(),
            opts,
            snap: Some(snap),
            serial,
            writes: BTreeMap::new(),
            locked: Vec::new(),
            tables: BTreeMap::new(),
            created: BTreeMap::new(),
            dropped: BTreeMap::new(),
            for_update: BTreeMap::new(),
            read_set: Mutex::new(ReadSet::default()),
            refused: None,
            committed: false,
            discarded: std::sync::OnceLock::new(),
        })
    }

    fn read_set(&self) -> Result<std::sync::MutexGuard<'_, ReadSet>> {
        health::lock(&self.read_set)
    }

    fn snap(&self) -> &Arc<Snapshot<'db>> {
        self.snap
            .as_ref()
            .expect("a live transaction holds its snapshot")
    }

    /// Fails every operation of a deadlock's victim, or of a transaction
    /// whose locking read or write was refused, with the same error.
    fn check_alive(&self) -> Result<()> {
        self.inner.vitals.health.check()?;
        match &self.refused {
            Some(r) => Err(r.error()),
            None => Ok(()),
        }
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        let max = tree::key_max(self.inner.pool.page_bytes());
        if key.len() > max {
            return Err(Error::InvalidArgument(format!(
                "key of {} bytes exceeds the {max}-byte limit",
                key.len()
            )));
        }
        Ok(())
    }

    /// Takes `key`'s row lock (waiting first come first served). A deadlock
    /// makes this transaction the victim: its locks go at once. Under
    /// Snapshot a key newly locked is checked unchanged since the snapshot
    /// ([`check_locked_unchanged`](Self::check_locked_unchanged)).
    fn lock(&mut self, key: &[u8]) -> Result<()> {
        let _guard = PanicGuard(&self.inner.vitals.health);
        let t = Instant::now();
        let held = self.locked.len();
        match self
            .inner
            .txns
            .locks
            .lock(self.id, key, self.opts.lock_timeout)
        {
            Ok(true) => {
                self.locked.push(key.to_vec());
                self.inner.vitals.counters.row_lock_wait.record(t.elapsed());
                self.check_locked_unchanged(key)
            }
            Ok(false) => {
                assert_eq!(
                    self.locked.len(),
                    held,
                    "a lock held already is not taken again"
                );
                Ok(())
            }
            Err(e @ Error::Poisoned { .. }) => self.inner.vitals.health.observe(Err(e)),
            Err(e) => {
                self.inner.vitals.counters.row_lock_wait.record(t.elapsed());
                if let Error::Deadlock { key } = &e {
                    self.refused = Some(Refused::Deadlock { key: key.clone() });
                    self.release_locks();
                }
                Err(e)
            }
        }
    }

    /// Under [`Isolation::Snapshot`], fails when another transaction
    /// committed a change to `key`, whose row lock this one just took,
    /// since its snapshot (PostgreSQL's `REPEATABLE READ` rule): whatever
    /// this transaction does with the key would otherwise rest on a value
    /// its snapshot does not hold (a lost update, or a locking read that
    /// mixes two states). Once the lock is held no other commit changes the
    /// key, so the check holds to the commit, which checks no written key
    /// again. A commit that held the lock before published its change
    /// before letting the lock go, so the look-up sees it. A refusal
    /// ([`Error::Conflict`], or [`Error::SnapshotTooOld`] when what changed
    /// is no longer known) ends the transaction: its locks go, and every
    /// later call returns the same error.
    fn check_locked_unchanged(&mut self, key: &[u8]) -> Result<()> {
        assert!(
            self.locked.last().is_some_and(|k| k == key),
            "the key was just locked"
        );
        if self.opts.isolation != Isolation::Snapshot {
            return Ok(());
        }
        assert!(
            !self.writes.contains_key(key) && !self.for_update.contains_key(key),
            "a key is written or read under its lock only once it is locked"
        );
        let snap = self.snap();
        let found = snap
            .store()
            .changed_since(snap.csn(), std::iter::once(key), &[]);
        let refused = match found {
            Ok(None) => return Ok(()),
            Ok(Some(_)) => Refused::Conflict {
                key: tables::shown(key),
            },
            Err(Error::SnapshotTooOld {
                snapshot,
                oldest_kept,
                cap_bytes,
            }) => Refused::TooOld {
                snapshot,
                oldest_kept,
                cap_bytes,
            },
            Err(e) => return self.inner.vitals.health.observe(Err(e)),
        };
        let e = refused.error();
        self.refused = Some(refused);
        self.release_locks();
        self.count_refusal(Err(e))
    }

    /// Sets `key` to `value`, taking the key's row lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key over the limit (1024 bytes; less
    /// with 4 KiB pages) or a value over [`tree::VALUE_MAX`]: the transaction
    /// is unchanged then. [`Error::Deadlock`] or [`Error::LockTimeout`]
    /// waiting for the lock. Under [`Isolation::Snapshot`],
    /// [`Error::Conflict`] when another transaction committed a change to
    /// the key since this one's snapshot (first committer wins), or
    /// [`Error::SnapshotTooOld`] when the snapshot was given up before the
    /// key was locked: the transaction then ends (its locks go, every later
    /// call fails the same way); run it again.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_in(&Tree::Default, key, value)
    }

    /// [`put`](Self::put) into `tree`.
    fn put_in(&mut self, tree: &Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_alive()?;
        self.check_key(key)?;
        self.check_writable(tree)?;
        if value.len() > tree::VALUE_MAX {
            return Err(Error::InvalidArgument(format!(
                "value of {} bytes exceeds the {}-byte limit",
                value.len(),
                tree::VALUE_MAX
            )));
        }
        let q = tables::qualify(tree.id(), key);
        self.lock(&q)?;
        self.reach(tree);
        self.writes.insert(q, Some(value.to_vec()));
        Ok(())
    }

    /// Deletes `key`, taking the key's row lock.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.delete_in(&Tree::Default, key)
    }

    /// [`delete`](Self::delete) from `tree`.
    fn delete_in(&mut self, tree: &Tree, key: &[u8]) -> Result<()> {
        self.check_alive()?;
        self.check_key(key)?;
        self.check_writable(tree)?;
        let q = tables::qualify(tree.id(), key);
        self.lock(&q)?;
        self.reach(tree);
        self.writes.insert(q, None);
        Ok(())
    }

    /// The value of `key`: this transaction's write, else the latest
    /// committed value if it holds the key's lock from
    /// [`get_for_update`](Self::get_for_update), else the snapshot's
    /// (a read validated at commit under [`Isolation::Serializable`]).
    ///
    /// # Errors
    /// As [`ReadTxn::get`](crate::ReadTxn::get).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_in(&Tree::Default, key)
    }

    /// [`get`](Self::get) from `tree`.
    fn get_in(&self, tree: &Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_alive()?;
        self.check_readable(tree)?;
        let own = tables::with_qualified(tree.id(), key, |q| {
            let locked = self.for_update.get(q).map(|(v, _)| v);
            self.writes.get(q).or(locked).cloned()
        });
        if let Some(v) = own {
            return Ok(v);
        }
        let v = txn::get_at(self.inner, tree, self.snap(), key)?;
        if self.opts.isolation == Isolation::Serializable {
            self.read_set()?
                .keys
                .insert(tables::qualify(tree.id(), key));
        }
        Ok(v)
    }

    /// Locks `key` (as a write would) and returns its latest committed
    /// value, or this transaction's own write: the `SELECT … FOR UPDATE`
    /// of a read-modify-write. Another transaction writing or locking the
    /// key waits until this one commits or ends, so the value read stays
    /// the latest and is not validated at commit.
    ///
    /// Under [`Isolation::Snapshot`] the key must be unchanged since the
    /// snapshot, so the value read is also the snapshot's.
    ///
    /// # Errors
    /// [`Error::Deadlock`] (this transaction is the victim: end it and run
    /// it again), [`Error::LockTimeout`]; under Snapshot the
    /// [`Error::Conflict`] or [`Error::SnapshotTooOld`] of
    /// [`put`](Self::put); as [`get`](Self::get).
    pub fn get_for_update(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_for_update_in(&Tree::Default, key)
    }

    /// [`get_for_update`](Self::get_for_update) in `tree`.
    fn get_for_update_in(&mut self, tree: &Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_alive()?;
        self.check_key(key)?;
        self.check_writable(tree)?;
        let q = tables::qualify(tree.id(), key);
        self.lock(&q)?;
        self.reach(tree);
        if let Some(v) = self.writes.get(&q) {
            // Its own write: nothing committed was read, so nothing the
            // validation of its writes may skip.
            return Ok(v.clone());
        }
        if let Some((v, _)) = self.for_update.get(&q) {
            return Ok(v.clone());
        }
        let (v, traced) = txn::get_committed_traced(self.inner, tree, key)?;
        self.for_update.insert(q, (v.clone(), traced));
        Ok(v)
    }

    /// The entries in `range` in the snapshot, this transaction's writes
    /// included (the range is validated at commit under
    /// [`Isolation::Serializable`], so a key committed into it since by
    /// another transaction is a conflict). The writes are those made
    /// before this call. The iterator may outlive the transaction: after
    /// a commit it goes on reading the same state; once the transaction
    /// ends without committing (aborted, dropped, or its commit refused),
    /// an iterator that merges its writes fails with
    /// [`Error::InvalidArgument`] (they were never committed).
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = txn::bounds(&range);
        self.scan(from, to)
    }

    /// The entries whose key starts with `prefix`, as [`range`](Self::range).
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = txn::prefix_bounds(prefix);
        self.scan(from, to)
    }

    fn scan(&self, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> RangeIter<'db, S> {
        self.scan_in(&Tree::Default, from, to)
    }

    /// [`range`](Self::range) of `tree` between `from` and `to`.
    fn scan_in(&self, tree: &Tree, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> RangeIter<'db, S> {
        let range = tables::qualify_range(tree.id(), &from, &to);
        let overlay = txn::overlay_range(&self.writes, &range.0, &range.1)
            .into_iter()
            .map(|(q, v)| (q[tables::ID_BYTES..].to_vec(), v))
            .collect();
        if self.opts.isolation == Isolation::Serializable {
            // Only a panic while recording a read poisons the set; the
            // database is stopped then, and the commit's validation says so.
            if let Ok(mut set) = self.read_set() {
                set.ranges.push(range);
            }
        }
        let snap = Some(self.snap().clone());
        RangeIter::new(self.inner, tree.clone(), (from, to), overlay, snap)
            .discarded_when(|| Arc::clone(self.discarded.get_or_init(Default::default)))
    }

    /// Discards the transaction's writes and releases its locks.
    pub fn abort(mut self) {
        self.end();
    }

    fn release_locks(&mut self) {
        let keys = std::mem::take(&mut self.locked);
        self.inner.txns.locks.release_all(self.id, &keys);
    }

    /// Ends the transaction: its locks, its snapshot, the writer lock.
    fn end(&mut self) {
        if let (false, Some(flag)) = (self.committed, self.discarded.get()) {
            flag.store(true, Ordering::Release);
        }
        self.release_locks();
        self.snap = None;
        if let Some(t) = self.serial.take() {
            self.inner.txns.writer.release(t);
        }
    }

    /// Makes the transaction's writes durable (under `Durability::Sync`, from
    /// [`WriteOptions::durability`] or else `Options::durability`) and
    /// visible, all or nothing, if it validates (see the module docs).
    ///
    /// # Errors
    /// [`Error::Conflict`] (nothing applied; run it again), the error of
    /// a deadlock's victim; [`Error::CommitOutcomeUnknown`] when the WAL
    /// sync failed (recovery decides); [`Error::Poisoned`] after an earlier
    /// log failure; I/O and corruption errors before the commit record, with
    /// nothing changed.
    pub fn commit(self) -> Result<()> {
        self.commit_lsn().map(drop)
    }
}

impl<S: Storage> Drop for WriteTxn<'_, S> {
    fn drop(&mut self) {
        self.end();
    }
}
