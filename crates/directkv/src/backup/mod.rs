//! Online backups. Taking one ([`take`], behind
//! [`Database::backup`](crate::Database::backup)) reads the open database
//! through one interface, [`engine::Engine`], which `db/backup_access.rs`
//! implements; checking and restoring one, and rolling it forward through
//! a log archive, is [`restore`]'s. docs/backup.md has the design.
//!
//! Files, lowest first (each imports only those above it in this list):
//! [`layout`] (names and formats), [`options`], [`manifest`] (the
//! CRC-checked file I/O they write with is `sched::crc_files`),
//! `archive::setting` and `archive::state` (the log archiver's setting and
//! state), [`engine`], the rest of [`archive`] (the log archiver), [`dir`]
//! (sealing a backup and reading a complete one), [`increment`] (then
//! `increment::chain`), [`take`] (`take::pages`, then `take`),
//! [`restore`].
//!
//! A backup is a directory that [`Database::open`](crate::Database::open)
//! opens directly:
//! - `CONTROL`, naming the checkpoint the backup began with and flagged as
//!   a backup's;
//! - `data`, a fuzzy copy of the data file whose page 0 says the log must
//!   reach the backup's end before its pages are consistent;
//! - `wal/`, the log from the checkpoint's redo point to that end;
//! - `backup_manifest` and, written last, `backup_complete`
//!   ([`manifest`]).
//!
//! Invariants:
//! - A backup without a completion marker matching its manifest is refused
//!   by open, restore and verify ([`Error::IncompleteBackup`](crate::Error::IncompleteBackup)).
//! - Every file a manifest lists is checked against its length and CRC32C
//!   before restore copies it, and while it copies.

pub(crate) mod archive;
pub(crate) mod dir;
pub(crate) mod engine;
pub(crate) mod increment;
pub(crate) mod layout;
pub mod manifest;
pub(crate) mod options;
pub(crate) mod restore;
pub(crate) mod take;

pub use dir::is_restored_copy;
pub(crate) use dir::{complete_manifest, restored_record, seal};
pub(crate) use layout::{CONTROL_NAME, DATA_NAME, INCREMENT_NAME, WAL_DIR_NAME};
pub use options::{BackupOptions, BackupReport};
