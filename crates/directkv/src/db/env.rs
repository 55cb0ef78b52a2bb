//! What one open database was opened with: its directory, options,
//! storage and disk gates ([`Env`]). Every field is set by open and never
//! changes after it, so the part needs no lock and any thread reads it.
//!
//! Invariants:
//! - `dir` is the directory `storage` holds the database's files in.
//! - `_lock` is held for the handle's whole life: no second process opens
//!   the same directory while it lives.

use std::path::PathBuf;
use std::sync::Arc;

use super::Options;
use crate::io::{Aio, Storage, SyncVariant};
use crate::sched::Scheduler;

/// The fixed environment of one open database (see the module docs).
pub(crate) struct Env<S: Storage> {
    /// The database directory. Immutable after open.
    pub(super) dir: PathBuf,
    /// The options it was opened with (validated by open). Immutable after
    /// open.
    pub(super) opts: Options,
    /// How the log syncs on this storage (probed at open). Immutable after
    /// open.
    pub(super) wal_sync: SyncVariant,
    /// The storage the database's files are on. Immutable after open (the
    /// handle clones share the storage's own synchronisation).
    pub(super) storage: S,
    /// Paths readable beyond `Options::permissions` when the database was
    /// opened (see [`super::access`]). Immutable after open.
    pub(super) readable_by_others: Vec<PathBuf>,
    /// Every disk request's gate (the scheduler locks its own queues).
    /// Immutable after open.
    pub(super) sched: Arc<Scheduler>,
    /// The asynchronous I/O engine of the data file (none for storage that
    /// runs batches one request at a time, such as the simulated disk).
    /// Immutable after open.
    pub(super) aio: Option<Arc<Aio>>,
    /// The directory's lock file, held until the handle drops. Immutable
    /// after open.
    pub(super) _lock: S::Lock,
}
