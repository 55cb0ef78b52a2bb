//! The state one open database shares between its handle, its transactions
//! and its background threads ([`Inner`]), cut into parts that own their
//! fields: [`Env`] (fixed at open), [`TxnCore`], [`CheckpointState`],
//! [`Vitals`], beside the log ([`super::engine_log`]) and the pool.
//!
//! # Lock order
//!
//! The engine's locks, outermost first. A thread holding one may wait only
//! for a lock below it in this list; the ranked ones carry their
//! [`Rank`](super::lock_rank::Rank) and debug builds panic on a wait out of
//! order ([`super::lock_rank`]). A `try_lock` never waits and may go
//! against the order.
//!
//! | rank | lock | held by |
//! |------|------|---------|
//! | (0)  | `TxnCore::writer`, the ticket of `serial_writers` | a write transaction, begin to end |
//! | (0)  | row locks (`TxnCore::locks`) | a write transaction, first write to end; waited for outside the commit section |
//! | (0)  | `Inner::compactor` | a compaction, begin to end |
//! | 1    | `CheckpointState::checkpointing` | a checkpoint, a backup's checkpoint |
//! | 2    | `TxnCore::committer` | the commit section |
//! | 3    | `TxnCore::tree` | a commit's apply (exclusive), a checkpoint's start (exclusive), a reader retrying (shared) |
//! | 4    | `CheckpointState::control` | a checkpoint naming itself, open, backups, the archiver |
//! | 5    | `Inner::readahead` | a queue of readahead |
//!
//! Leaves (no engine lock is taken while one is held, so they are not
//! ranked): the locks inside `VersionStore`, `LockTable`'s table,
//! `SpareBuffers`, `Summaries`, `CheckpointState::log_space` and
//! `checkpointer` (condvar mutexes guarding a flag or nothing),
//! `Inner::log_pins`, the archiver's own, and every lock of the layers
//! below (pool, WAL, scheduler, I/O), which never call back up.
//!
//! Invariants:
//! - Every operation of a [`Database`](super::Database) checks
//!   [`Vitals::health`] first; once failed, it stays failed.
//! - Ranked locks are taken in increasing rank on every thread.

use std::sync::{Arc, Mutex};

use super::checkpoint::state::CheckpointState;
use super::env::Env;
use super::lock_rank::RankedMutex;
use super::txn::core::TxnCore;
use super::vitals::Vitals;

use super::engine_log::{EngineLog, Pool};
use crate::format::PageId;
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::wal::Wal;

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
    /// Ranked last: no engine lock is taken while it is held.
    pub(super) readahead: RankedMutex<Option<std::sync::mpsc::SyncSender<PageId>>>,
    /// Where running backups need the log from: no segment from the
    /// oldest's on is recycled (a multiset: one entry per backup). The
    /// mutex guards the list. A leaf lock.
    pub(super) log_pins: Mutex<Vec<Lsn>>,
    /// Held by the one compaction that may run at a time (`db::compact`),
    /// before any ranked lock.
    pub(super) compactor: Mutex<Option<super::compact::progress::Progress>>,
    /// The log archiver's state (with `Options::wal_archive`); it locks its
    /// own state. Immutable after open.
    pub(super) archive: Option<super::backup_access::Archive>,
}

impl<S: Storage> Inner<S> {
    /// The open WAL.
    pub(super) fn wal(&self) -> &Wal<S> {
        self.log.wal()
    }

    /// What the commit pipeline needs of the engine (see
    /// [`CommitEnv`](super::txn::commit::CommitEnv)).
    pub(crate) fn commit_env(&self) -> super::txn::commit::CommitEnv<'_, S> {
        super::txn::commit::CommitEnv {
            pool: &self.pool,
            log: &self.log,
            shape: &self.txns.shape,
            spare: &self.txns.spare_buffers,
            clock: &self.vitals.counters,
            summaries: &self.ckpt.summaries,
            compress_page_images: self.env.opts.compress_page_images,
        }
    }

    /// Queues reads of those of `pages` not in the pool; returns how many it
    /// queued (a full queue drops the rest).
    pub(crate) fn read_ahead(&self, pages: &[PageId]) -> usize {
        // Readahead is a hint: with its queue's lock poisoned, none is queued
        // (the reader that panicked has failed the database already).
        let Ok(q) = self.readahead.lock() else {
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
        if !self.env.opts.background_threads {
            // No cleaner frees dropped tables' pages: each commit runs a step.
            let _ = self.vitals.health.observe(self.free_dropped(1));
        }
    }
}
