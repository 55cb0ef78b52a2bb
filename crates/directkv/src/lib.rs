//! directkv: an embeddable, transactional, ordered key-value storage engine that
//! owns its I/O.
//!
//! Data files are read and written with direct I/O into the engine's own buffer
//! pool, the write-ahead log is written with a sync method the user picks or the
//! engine measures, and every disk request passes through the engine's I/O
//! scheduler. This crate currently provides the I/O layer ([`io`]) and the
//! measurement behind `directkv test-fsync` ([`fsync_test`]); see `DESIGN.md` for
//! the layers above.

#![deny(missing_docs)]

pub mod btree;
pub mod buffer;
pub mod constants;
mod db;
mod error;
pub mod format;
pub mod fsync_test;
pub mod io;
mod lsn;
pub mod sim;
pub mod wal;

pub use db::{
    CheckReport, Database, Durability, Options, RangeIter, ReadTxn, Stalls, Stats, WriteTxn,
    WAL_BUFFERS_INCLUDED_FROM,
};
pub use error::{Error, IoOp, Result};
pub use lsn::Lsn;
