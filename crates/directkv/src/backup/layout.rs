//! The names and numbers every part of a backup agrees on: the files a
//! backup directory holds, the formats of its changed pages, and where a
//! log archive keeps a history's segments. The bottom of `backup/`: it
//! imports nothing from the rest of it, so every other file may import it.
//!
//! Invariants:
//! - A name here is the one file or directory it names in every backup,
//!   restore and archive this build makes or reads.

use std::path::{Path, PathBuf};

/// The log's directory inside a backup.
pub const WAL_DIR_NAME: &str = "wal";
/// `CONTROL` inside a backup.
pub const CONTROL_NAME: &str = "CONTROL";
/// The data file inside a full backup.
pub const DATA_NAME: &str = "data";
/// An incremental backup's changed pages (in place of `data`; the pages'
/// numbers are in its manifest).
pub const INCREMENT_NAME: &str = "data.incr";
/// The longest manifest read (a manifest lists a few files per GiB of log).
pub(crate) const MANIFEST_BYTES_MAX: u64 = 64 << 20;

/// The record a restore leaves in the directory it makes, in place of a
/// backup's manifest and completion marker: the manifest of what it
/// restored (marked [`Manifest::restored`]), listing the files it made.
/// The directory is a database to be, never a backup: without a marker,
/// verify, restore and incremental backups refuse it, while its open
/// takes from the record the end its log must reach.
pub(crate) const RESTORED_NAME: &str = "restored_from_backup";

/// `increment_format` of backups that hold whole pages, in the manifest's
/// page order, page 0 first.
pub const WHOLE_PAGES: u32 = 0;
/// `increment_format` of backups that hold page 0, then entries.
pub const ENTRIES: u32 = 1;

/// Where a log archive rooted at `root` keeps the segments of history
/// `history` (32 hex digits): the root for the line a database was created
/// on (or a history not recorded), a directory named by the history for
/// every later one, so two lines never share a segment's name.
pub(crate) fn archive_dir_of(root: &Path, history: Option<&str>) -> PathBuf {
    match history {
        Some(h) if h.bytes().any(|b| b != b'0') => {
            assert!(
                h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()),
                "a history is 32 hex digits"
            );
            root.join(h)
        }
        _ => root.to_path_buf(),
    }
}
