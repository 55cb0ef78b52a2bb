//! directkv as the storage of an [openraft](https://docs.rs/openraft/0.9)
//! node: the Raft log, the vote, the committed and purged log ids, and a
//! replicated key-value state machine, all in one directkv database.
//!
//! - [`LogStore`] implements `RaftLogStorage`: entries keyed by index in
//!   big-endian order; [`append`](openraft::storage::RaftLogStorage::append)
//!   reports entries flushed only after its commit is durable (the engine's
//!   group commit); truncate and purge delete in bounded transactions,
//!   from the end and from the start, so the log stays contiguous at
//!   every crash point.
//! - [`StateMachine`] implements `RaftStateMachine`: puts, deletes and
//!   compare-and-sets ([`Request`]), whose last applied log id and
//!   membership commit in the same transaction as the entries they apply,
//!   so a crash never applies an entry twice or skips one. Snapshots are
//!   built from one snapshot read while entries keep being applied, carry
//!   a CRC32C, and installing one replaces the state in one commit.
//! - [`SnapshotBytes`] is openraft's snapshot data: chunks in the database,
//!   built, sent, received and installed one chunk at a time, so neither
//!   side holds a snapshot whole in memory.
//!
//! [`open`] opens a database and returns the two halves; docs/raft.md
//! describes the layout and the durability argument.
//!
//! ```no_run
//! # fn main() -> Result<(), directkv_raft::Error> {
//! let (log, sm) = directkv_raft::open("/var/lib/node1", directkv::Options::default())?;
//! let reader = sm.reader();
//! // `directkv_raft::Raft::new(id, config, network, log, sm)` then runs the
//! // node; a read served after `raft.ensure_linearizable()` uses `reader`.
//! println!("{:?}", reader.get(b"key")?);
//! # drop(log);
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod chunks;
mod codec;
mod keys;
mod log_store;
mod snapshot;
mod state_machine;
mod store;
mod upgrade;

use std::path::Path;

pub use chunks::SnapshotBytes;
pub use codec::{DecodeError, Entry, Request, Response, BATCH_MAX_BYTES, KEY_MAX, VALUE_MAX};
pub use log_store::LogStore;
pub use state_machine::{KvReader, SnapshotBuilder, StateMachine};
pub use store::Exec;

openraft::declare_raft_types!(
    /// The Raft types of a directkv-backed node: [`Request`] in,
    /// [`Response`] out, `u64` node ids, [`openraft::BasicNode`] addresses,
    /// snapshots as [`SnapshotBytes`]: chunks in the database, moved one at
    /// a time.
    pub TypeConfig:
        D = Request,
        R = Response,
        SnapshotData = SnapshotBytes,
);

/// A node's id.
pub type NodeId = u64;

/// A Raft node over this storage.
pub type Raft = openraft::Raft<TypeConfig>;

/// What can go wrong below openraft.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database failed.
    #[error(transparent)]
    Database(#[from] directkv::Error),
    /// A stored record does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A snapshot's bytes are damaged or do not match their metadata.
    #[error("bad snapshot: {0}")]
    Snapshot(String),
    /// The storage stopped after a thread panicked in it.
    #[error("stopped: {0}")]
    Stopped(String),
}

/// Opens (or creates) the database at `path` and returns the node's log
/// store and state machine, which share it. Moves a database of the
/// prefix layout of earlier releases into tables (docs/raft.md), and
/// finishes what a crash interrupted: that move, a purge of the log, a
/// snapshot install (the table of a generation not current), a snapshot
/// being stored. From the move's first commit on, and on a database it
/// creates, a build of the prefix layout refuses the database.
///
/// # Errors
/// As [`directkv::Database::open`]; [`Error::Decode`] for a damaged record.
pub fn open(
    path: impl AsRef<Path>,
    options: directkv::Options,
) -> Result<(LogStore, StateMachine), Error> {
    open_with(path, options, Exec::BlockingPool)
}

/// [`open`], with the database work run as `exec` says.
///
/// # Errors
/// As [`open`].
pub fn open_with(
    path: impl AsRef<Path>,
    options: directkv::Options,
    exec: Exec,
) -> Result<(LogStore, StateMachine), Error> {
    let cache_bytes = options.cache_bytes;
    let database = directkv::Database::open(path, options)?;
    let tables = upgrade::open_tables(&database, store::batch_bytes(cache_bytes))?;
    let db = store::Store::new(database, tables, cache_bytes, exec);
    let log = LogStore::load(db.clone())?;
    let sm = StateMachine::load(db)?;
    Ok((log, sm))
}
