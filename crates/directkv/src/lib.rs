//! directkv: an embeddable, transactional, ordered key-value storage engine that
//! owns its I/O.
//!
//! Data files are read and written with direct I/O into the engine's own buffer
//! pool (the operating system caches none of the data), the write-ahead log is
//! written with the sync method measured fastest and honest on its disk, and an
//! I/O scheduler inside the engine puts commits and reads before page cleaning
//! and checkpoints.
//!
//! # The whole API
//!
//! | concept | items |
//! | --- | --- |
//! | open and close | [`Database::open`], [`Options`], [`Database::close`] |
//! | read (snapshots) | [`Database::begin_read`], [`ReadTxn::get`], [`ReadTxn::range`], [`ReadTxn::prefix`], [`RangeIter`] |
//! | write (many at once) | [`Database::begin_write`], [`WriteTxn::put`], [`WriteTxn::delete`], [`WriteTxn::get_for_update`], [`WriteTxn::commit`], [`Durability`] |
//! | named tables | [`WriteTxn::create_table`], [`WriteTxn::open_table`], [`WriteTxn::rename_table`], [`WriteTxn::drop_table`], [`WriteTxn::list_tables`], [`WriteTxn::table`] ([`TableMut`]), [`ReadTxn::open_table`], [`ReadTxn::table`] ([`TableRef`]), [`Table`], [`TableInfo`] |
//! | isolation and retries | [`Database::begin_write_with`], [`WriteOptions`], [`Isolation`], [`Database::transaction`], [`Error::is_retryable`] |
//! | I/O policy | [`DirectIo`], [`SyncMethod`], [`SyncVariant`], [`AioOptions`], [`SchedOptions`] |
//! | maintenance | [`Database::checkpoint`], [`Database::check`], [`CheckReport`], [`Database::compact`], [`CompactOptions`], [`CompactReport`] |
//! | observe | [`Database::stats`], [`Stats`] and its parts ([`SnapshotStats`] among them), [`STATS_FILE`] |
//! | errors | [`Error`], [`Result`] |
//!
//! # Open, write, read
//!
//! ```no_run
//! use directkv::{Database, Options};
//!
//! let db = Database::open("my.db", Options::default())?; // creates or recovers
//! let mut w = db.begin_write()?;
//! w.put(b"apple", b"red")?;
//! w.put(b"banana", b"yellow")?;
//! w.commit()?; // durable when it returns
//!
//! let r = db.begin_read()?;
//! assert_eq!(r.get(b"apple")?, Some(b"red".to_vec()));
//! for entry in r.range(&b"a"[..]..&b"c"[..]) {
//!     let (key, value) = entry?; // in key order; `.rev()` for descending
//!     println!("{key:?} = {value:?}");
//! }
//! drop(r); // a read transaction holds its snapshot until dropped
//! db.close()?;
//! # Ok::<(), directkv::Error>(())
//! ```
//!
//! # A transaction is all or nothing
//!
//! ```no_run
//! use directkv::{Database, Options};
//!
//! let db = Database::open("bank.db", Options::default())?;
//! let mut w = db.begin_write()?;
//! w.put(b"alice", b"90")?;
//! w.put(b"bob", b"110")?;
//! w.commit()?; // both or neither, after a crash too
//! let w = db.begin_write()?;
//! w.abort(); // or drop it: nothing of it is applied
//! # Ok::<(), directkv::Error>(())
//! ```
//!
//! # Many writers at once
//!
//! Write transactions run concurrently. Each reads a snapshot plus its own
//! writes; `get_for_update` locks a row and reads its latest value. A
//! commit that would break its isolation level is refused with
//! [`Error::Conflict`] (nothing applied), and [`Database::transaction`]
//! runs the closure again until it commits:
//!
//! ```no_run
//! use directkv::{Database, Options, WriteOptions};
//!
//! let db = Database::open("bank.db", Options::default())?;
//! db.transaction(&WriteOptions::default(), |tx| {
//!     let from = tx.get_for_update(b"alice")?.unwrap_or_default();
//!     let to = tx.get_for_update(b"bob")?.unwrap_or_default();
//!     tx.put(b"alice", &from)?; // a real transfer would compute new balances
//!     tx.put(b"bob", &to)
//! })?;
//! # Ok::<(), directkv::Error>(())
//! ```
//!
//! # Choose the I/O
//!
//! ```no_run
//! use directkv::{Database, DirectIo, Options, SyncMethod, SyncVariant};
//!
//! let opts = Options {
//!     cache_bytes: 256 << 20,
//!     direct_io: DirectIo::Auto, // falls back to buffered I/O where refused
//!     wal_sync: Some(SyncVariant { method: SyncMethod::Fdatasync, direct: true }),
//!     ..Options::default()
//! };
//! let db = Database::open("tuned.db", opts)?;
//! # Ok::<(), directkv::Error>(())
//! ```
//!
//! # Observe
//!
//! ```no_run
//! # let db = directkv::Database::open("my.db", directkv::Options::default())?;
//! let s = db.stats();
//! println!("hits {} misses {} commits {}", s.cache_hits, s.cache_misses, s.commits);
//! println!("WAL sync waits: {}", s.stalls.histograms.wal_sync_wait.waits);
//! # Ok::<(), directkv::Error>(())
//! ```
//!
//! # Errors and failure
//!
//! Bad input and the environment (a full disk, a foreign directory, a
//! filesystem without direct I/O) are typed [`Error`]s, and the database is as
//! it was before the call. A write or sync failure of the log, a poisoned lock
//! or a panicking background thread stops the database: every later call
//! returns [`Error::Poisoned`] until it is closed and reopened, which runs
//! recovery.

#![deny(missing_docs)]

mod backup;
mod btree;
mod buffer;
mod constants;
mod db;
mod error;
mod format;
mod health;
mod io;
mod lsn;
mod sched;
#[cfg(feature = "sim")]
mod sim;
mod stall;
mod wal;

pub use backup::manifest::{Manifest as BackupManifest, ManifestFile as BackupManifestFile};
pub use backup::restore::{
    restore_backup, restore_backup_chain, restore_backup_chain_to, verify_backup, RestoreReport,
    RestoreTarget, RolledForward, VerifyReport,
};
pub use backup::{BackupOptions, BackupReport};
pub use btree::tree::VALUE_MAX;
pub use buffer::{PoolStats, WritesByCause};
pub use db::{
    ArchiveChange, ArchiveStats, BackupProgress, CheckReport, CompactOptions, CompactReport,
    Database, Durability, FileAccess, Isolation, Options, RangeIter, ReadTxn, RecoveryStats,
    SnapshotStats, SpaceStats, StallHistograms, Stalls, Stats, Table, TableCheck, TableInfo,
    TableMut, TablePages, TableRef, TableStats, TxnStats, WriteOptions, WriteTxn,
    CHECKPOINT_WAL_BYTES_MIN, STATS_FILE, TABLES_LISTED, TABLE_NAME_MAX, TRANSACTION_ATTEMPTS_MAX,
    VERSION_STORE_BYTES_MIN,
};
pub use error::{Error, IoOp, Result};
pub use io::{AioBackend, AioOptions, AioStats, DirectIo, IoPath, SyncMethod, SyncVariant};
pub use io::{FileKind, Permissions};
pub use lsn::Lsn;
pub use sched::{SchedMode, SchedOptions, SchedStats};
pub use stall::StallHistogram;
pub use wal::WalStats;

// The inspection surface of the CLI, tests and fuzz targets: internals.rs.
#[doc(hidden)]
pub mod internals;
