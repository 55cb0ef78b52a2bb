//! The checkpointer's state ([`CheckpointState`]): the control file, the
//! gate that runs one checkpoint at a time, the pacing of committers by log
//! space, the background checkpointer's signal, the LSNs the last
//! checkpoint set, and the changed-page summaries.
//!
//! Invariants:
//! - `last_redo` and `fpi_horizon` only grow, and only a checkpoint holding
//!   `checkpointing` moves them.
//! - `CONTROL` names a checkpoint only after every page it covers is
//!   written and its summary exists (see [`super::run`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::super::lock_rank::{Rank, RankedMutex};
use super::control::ControlFile;
use super::summary::Summaries;
use crate::io::Storage;
use crate::lsn::Lsn;

/// The checkpoint side of one open database (see the module docs).
pub(crate) struct CheckpointState<S: Storage> {
    /// The control file; the mutex serialises its rewrites and reads of
    /// its last contents. Rank `CONTROL` in the lock order.
    pub(in crate::db) control: RankedMutex<ControlFile<S>>,
    /// Held by the checkpoint running, so one runs at a time; guards no
    /// data of its own. Rank `CHECKPOINTING` (the first lock a checkpoint
    /// takes).
    pub(in crate::db) checkpointing: RankedMutex<()>,
    /// Signalled when a checkpoint moves the redo point: committers waiting
    /// at the log's hard limit wait on it. The mutex guards no data (the
    /// condition is the WAL's size since `last_redo`). Rank `LOG_SPACE`.
    pub(in crate::db) log_space: (Mutex<()>, Condvar),
    /// Stop flag (under its mutex) and wake-up of the background
    /// checkpointer. A leaf lock.
    pub(in crate::db) checkpointer: Arc<(Mutex<bool>, Condvar)>,
    /// Pages last changed at or before this LSN get a full image logged.
    /// Swapped (AcqRel) by a checkpoint under `checkpointing` and the tree
    /// lock; loaded (Acquire) by commits under the tree lock.
    pub(in crate::db) fpi_horizon: AtomicU64,
    /// The redo LSN of the last checkpoint. Stored (Release) by a
    /// checkpoint under `checkpointing`; loaded (Acquire) by any thread.
    pub(in crate::db) last_redo: AtomicU64,
    /// The log segment the data file's head last named as reached: raised
    /// (AcqRel) by any thread after a commit or a checkpoint, loaded
    /// (Acquire) to skip a head write that names nothing new.
    pub(in crate::db) reach_stamped: AtomicU64,
    /// Callers of [`Database::checkpoint`](super::super::Database::checkpoint)
    /// waiting for the running one: incremented and decremented (AcqRel) by
    /// them, read by the running checkpoint to skip its pacing.
    pub(in crate::db) hurry: AtomicU64,
    /// The pages changed since the last checkpoint, and the summaries of
    /// earlier ones ([`super::summary`]; it locks its own state).
    pub(in crate::db) summaries: Summaries,
}

impl<S: Storage> CheckpointState<S> {
    /// The checkpoint side of a database whose last checkpoint's redo
    /// point is `redo`.
    pub(in crate::db) fn new(
        control: ControlFile<S>,
        redo: Lsn,
        checkpointer: Arc<(Mutex<bool>, Condvar)>,
        summaries: Summaries,
    ) -> Self {
        let state = CheckpointState {
            control: RankedMutex::new(Rank::Control, control),
            checkpointing: RankedMutex::new(Rank::Checkpointing, ()),
            log_space: (Mutex::new(()), Condvar::new()),
            checkpointer,
            fpi_horizon: AtomicU64::new(redo.get()),
            last_redo: AtomicU64::new(redo.get()),
            reach_stamped: AtomicU64::new(0),
            hurry: AtomicU64::new(0),
            summaries,
        };
        assert_eq!(
            state.last_redo.load(Ordering::Relaxed),
            state.fpi_horizon.load(Ordering::Relaxed),
            "pages changed before the redo point get a full image"
        );
        state
    }
}
