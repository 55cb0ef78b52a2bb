//! The database: the handle and its transactions, and the parts of the
//! engine around them, each in its own file.
//!
//! - [`database`]: `Database`, its operations and orderly drop.
//! - [`txn`]: transactions: reads, writes, row locks, the writer ticket,
//!   the commit pipeline, versions and the tree's shape; [`records`]: the
//!   engine's WAL records.
//! - [`open`]: create or recover, and start the threads (with `open::claim`,
//!   taking the directory, and `open::recovery`, the replay of the WAL).
//! - [`checkpoint`]: checkpoints and log-space pacing, the control file,
//!   the changed-page summaries, and the background threads.
//! - [`engine`]: the state they share, cut into parts that own their
//!   fields: [`env`] (fixed at open), `txn::core` (tree, gates, row locks,
//!   versions), `checkpoint::state` (control file, checkpoint gate,
//!   log-space pacing), [`vitals`] (health, counters); [`options`] and [`stats`]:
//!   what a user sets and reads; [`check`]: the structural check.
//! - [`backup_access`]: the one door to and from `backup/` (the backup's
//!   and the log archiver's `Engine`, and the archiver's entry points).

mod access;
mod backup_access;
mod check;
mod checkpoint;
mod compact;
mod database;
mod engine;
mod engine_log;
mod env;
mod lock_rank;
mod open;
mod options;
pub mod records;
mod report;
mod stats;
mod txn;
mod vitals;

pub use crate::backup::archive::{ArchiveChange, ArchiveStats};
pub use access::FileAccess;
pub use check::{CheckReport, TableCheck};
pub use checkpoint::control::ControlFile;
pub use checkpoint::run::WAL_HARD_LIMIT_FACTOR;
pub use compact::{CompactOptions, CompactReport};
pub use database::{Database, TRANSACTION_ATTEMPTS_MAX};
pub use options::{
    Durability, Isolation, Options, WriteOptions, CHECKPOINT_WAL_BYTES_MIN, VERSION_STORE_BYTES_MIN,
};
pub(crate) use records::{decode_commit_time as commit_record_time, COMMIT as COMMIT_RECORD};
pub use stats::{BackupProgress, RecoveryStats, StallHistograms, Stalls, Stats, STATS_FILE};
pub use stats::{SpaceStats, TablePages, TableStats, TxnStats, TABLES_LISTED};
pub use txn::read::{RangeIter, ReadTxn, TableRef};
pub use txn::tables::{Table, TableInfo, TABLE_NAME_MAX};
pub use txn::versions::SnapshotStats;
pub use txn::write::{TableMut, WriteTxn};
