//! directkv: an embeddable, transactional, ordered key-value storage engine that
//! owns its I/O.
//!
//! Data files are read and written with direct I/O into the engine's own buffer
//! pool ([`buffer`]), the write-ahead log ([`wal`]) is written with a sync method
//! the user picks or the engine measures ([`fsync_test`]), and [`Database`] puts
//! a B+tree ([`btree`]) of transactions on top, with recovery, checkpoints, a
//! page cleaner and readahead. [`io`] is the layer every file goes through;
//! [`sim`] is the simulated disk for fault injection; [`stall`] counts
//! foreground waits by cause.

#![deny(missing_docs)]

pub mod btree;
pub mod buffer;
pub mod constants;
mod db;
mod error;
mod health;
pub mod format;
pub mod fsync_test;
pub mod io;
mod lsn;
pub mod sched;
pub mod sim;
pub mod stall;
pub mod wal;

pub use db::{
    CheckReport, Database, Durability, Options, RangeIter, ReadTxn, RecoveryStats, StallHistograms,
    Stalls, Stats, WriteTxn, STATS_FILE, WAL_BUFFERS_INCLUDED_FROM, WAL_HARD_LIMIT_FACTOR,
};
pub use error::{Error, IoOp, Result};
pub use lsn::Lsn;
