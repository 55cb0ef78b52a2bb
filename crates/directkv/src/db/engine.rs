//! The state one open database shares between its handle, its transactions
//! and its background threads ([`Inner`]), and the log as the buffer pool
//! sees it ([`EngineLog`]).
//!
//! The log has two phases, in this order:
//! - `Replaying` (open's redo): the WAL object does not exist yet, and every
//!   record replay has read is durable, so the WAL rule holds for any page
//!   stamped with an LSN up to what was read ([`EngineLog::replayed_to`]).
//! - `Open`: the WAL accepts appends; durability is the WAL's.
//!
//! [`EngineLog::open`] is the one transition, asserted to happen once and
//! to start the WAL at or past everything replay read.
//!
//! Invariants:
//! - The replayed LSN only grows, and no page write during replay asks for
//!   durability past it.
//! - Every operation of a [`Database`](super::Database) checks
//!   [`Inner::health`] first; once failed, it stays failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::ckpt_state::CheckpointState;
use super::env::Env;
use super::txn_core::TxnCore;
use super::vitals::Vitals;
use crate::buffer::{BufferPool, LogFlusher};
use crate::error::Result;
use crate::format::{PageId, TxnId};
use crate::health;
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::wal::Wal;

/// The buffer pool of a database, over its data file and its log.
pub(crate) type Pool<S> = BufferPool<S, EngineLog<S>>;

/// The log as the buffer pool sees it (see the module docs for its phases).
pub(crate) struct EngineLog<S: Storage> {
    /// `Replaying`: the end of the records replay has read.
    replayed: AtomicU64,
    /// `Open` once set.
    wal: OnceLock<Wal<S>>,
}

impl<S: Storage> EngineLog<S> {
    /// A log in its replay phase, starting at the redo point.
    pub(crate) fn replaying(redo: Lsn) -> Self {
        EngineLog {
            replayed: AtomicU64::new(redo.get()),
            wal: OnceLock::new(),
        }
    }

    /// Replay has read (and so found durable) the log up to `end`.
    pub(crate) fn replayed_to(&self, end: Lsn) {
        assert!(
            self.wal.get().is_none(),
            "replay reads before the WAL opens"
        );
        let before = self.replayed.fetch_max(end.get(), Ordering::AcqRel);
        assert!(before <= end.get(), "replay reads the log in order");
    }

    /// The transition to `Open`: the WAL, opened at the end of what replay
    /// read, takes over.
    pub(crate) fn open(&self, wal: Wal<S>) {
        let replayed = self.replayed.load(Ordering::Acquire);
        assert!(
            wal.end_lsn().get() >= replayed,
            "the WAL opens at or past the replayed log"
        );
        let set = self.wal.set(wal);
        assert!(set.is_ok(), "the log opens once");
    }

    /// The open WAL. Panics in the replay phase: only a bug asks for it there.
    pub(crate) fn wal(&self) -> &Wal<S> {
        match self.wal.get() {
            Some(w) => w,
            None => panic!("the WAL is used before open finished replay"),
        }
    }

    /// The open WAL, or `None` during replay.
    pub(crate) fn wal_if_open(&self) -> Option<&Wal<S>> {
        self.wal.get()
    }

    /// The end of the log: what replay read, or the WAL's end once open.
    pub(crate) fn durable_or_end(&self) -> Lsn {
        match self.wal.get() {
            Some(w) => w.end_lsn(),
            None => Lsn::new(self.replayed.load(Ordering::Acquire)),
        }
    }

    /// Waits until the WAL is durable up to `lsn`.
    pub(crate) fn flush_to_wal(&self, lsn: Lsn) -> Result<()> {
        self.wal().flush(lsn)
    }
}

impl<S: Storage> LogFlusher for EngineLog<S> {
    fn durable_lsn(&self) -> Lsn {
        match self.wal.get() {
            Some(w) => w.durable_lsn(),
            None => Lsn::new(self.replayed.load(Ordering::Acquire)),
        }
    }

    fn replaying(&self) -> bool {
        self.wal.get().is_none()
    }

    fn flush_to(&self, lsn: Lsn) -> Result<()> {
        match self.wal.get() {
            Some(w) => w.flush(lsn),
            None => {
                // Everything replay read is durable; nothing past it exists.
                let replayed = self.replayed.load(Ordering::Acquire);
                assert!(
                    lsn.get() <= replayed,
                    "a page is newer than the replayed log"
                );
                Ok(())
            }
        }
    }
}

/// The shared state of one open database: its parts, each owning its
/// fields and saying what guards each (see the lock order in the module
/// docs).
pub(crate) struct Inner<S: Storage> {
    /// Directory, options, storage and disk gates. Immutable after open.
    pub(crate) env: Env<S>,
    /// The log (its phases: see the module docs). The `Arc` is immutable
    /// after open; the log synchronises itself.
    pub(crate) log: Arc<EngineLog<S>>,
    /// The buffer pool (it locks its own frames and tables). Immutable
    /// after open.
    pub(crate) pool: Pool<S>,
    /// The tree, writer and commit gates, row locks and version store.
    pub(crate) txns: TxnCore,
    /// The control file, the checkpoint gate, log-space pacing and the
    /// LSNs the last checkpoint set.
    pub(crate) ckpt: CheckpointState<S>,
    /// Health, replay figures and counters.
    pub(crate) vitals: Vitals,
    /// Queue of the readahead readers (none without background threads);
    /// the mutex guards the sender, set once by open and taken by close.
    /// A leaf lock.
    pub(super) readahead: Mutex<Option<std::sync::mpsc::SyncSender<PageId>>>,
    /// Where running backups need the log from: no segment from the
    /// oldest's on is recycled (a multiset: one entry per backup). The
    /// mutex guards the list. A leaf lock.
    pub(super) log_pins: Mutex<Vec<Lsn>>,
    /// The log archiver's state (with `Options::wal_archive`); it locks its
    /// own state. Immutable after open.
    pub(super) archive: Option<super::archive::Archive>,
}

impl<S: Storage> Inner<S> {
    /// The open WAL.
    pub(super) fn wal(&self) -> &Wal<S> {
        self.log.wal()
    }

    /// The time a commit record written now carries: the wall clock in
    /// µs, but never before the last commit's (called in the serial commit
    /// section, so commit times rise with LSNs).
    pub(crate) fn commit_time_us(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let last = self
            .vitals
            .counters
            .commit_clock_us
            .fetch_max(now, Ordering::AcqRel);
        let t = now.max(last);
        assert!(t >= last, "commit times never go backwards");
        t
    }

    /// A new transaction id.
    pub(crate) fn next_txn(&self) -> TxnId {
        TxnId::new(
            self.vitals
                .counters
                .next_txn
                .fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Queues reads of those of `pages` not in the pool; returns how many it
    /// queued (a full queue drops the rest).
    pub(crate) fn read_ahead(&self, pages: &[PageId]) -> usize {
        // Readahead is a hint: with its queue's lock poisoned, none is queued
        // (the reader that panicked has failed the database already).
        let Ok(q) = health::lock(&self.readahead) else {
            return 0;
        };
        let Some(tx) = q.as_ref() else { return 0 };
        pages
            .iter()
            .filter(|&&p| !self.pool.contains(p))
            .take_while(|&&p| tx.try_send(p).is_ok())
            .count()
    }

    /// After a commit: wakes the background checkpointer when the log has
    /// grown enough, and names a new log segment in the data file's head.
    pub(crate) fn after_commit(&self) {
        if self.wal_since_checkpoint() >= self.env.opts.checkpoint_wal_bytes {
            self.ckpt.checkpointer.1.notify_one();
        }
        // The commit is durable either way; a failed head write stops the
        // engine like any failed write.
        let _ = self.vitals.health.observe(self.stamp_log_reach());
    }
}
