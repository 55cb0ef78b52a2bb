//! Verifying a backup without trusting it: the manifest and marker, every
//! file's length and CRC32C, nothing unlisted, `CONTROL` and page 0 naming
//! the manifest's LSNs, every page's checksum and structure, every log
//! record from the start to past the end; then the backup is restored into
//! a scratch directory, opened (replaying its log) and checked. Restore
//! runs the same checks on every backup it restores. A full backup is
//! checked as it is copied (each file's CRC32C) and then on its copy
//! ([`check_copy`](super::checks::check_copy)), so each of its files is read once; an incremental one
//! is checked where it is ([`check_contents`]).
//!
//! Invariants:
//! - Nothing in the backup is written; the scratch copy is removed whether
//!   the check passes or not.
//! - An incremental backup is checked but not opened (it opens only
//!   restored with its chain).

use std::path::Path;

use serde::Serialize;

use super::checks::{check_contents, check_listing, Contents};
use crate::backup::dir;
use crate::backup::manifest::Manifest;
use crate::db::{CheckReport, Database, Options};
use crate::error::{Error, Result};
use crate::io::OsStorage;
use crate::lsn::Lsn;

/// What [`verify_backup`] checked.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The backup's identity.
    pub backup_id: String,
    /// Where its log starts.
    pub start_lsn: Lsn,
    /// Where its log ends.
    pub end_lsn: Lsn,
    /// Files checked against the manifest.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Pages checked (an incremental backup's deltas not counted: they
    /// are checked when its chain is restored).
    pub pages: u64,
    /// An incremental backup's pages held as deltas: each applies inside a
    /// page, and the page it makes is checked when the chain is restored.
    pub deltas: u64,
    /// Log records read from the start to the end of the log.
    pub log_records: u64,
    /// The structural check of the scratch copy, opened; `None` for an
    /// incremental backup, which opens only restored with its chain.
    pub check: Option<CheckReport>,
}

/// Verifies the backup in `dir` (see the module docs). The scratch copy is
/// made beside `dir` and removed afterwards.
///
/// # Errors
/// [`Error::IncompleteBackup`] for a backup never completed;
/// [`Error::InvalidArgument`] for a directory a restore made, a database
/// and no backup; [`Error::Corruption`] naming the first damage found;
/// open's and the check's errors for the scratch copy; I/O errors.
pub fn verify_backup(dir: impl AsRef<Path>) -> Result<VerifyReport> {
    let dir = dir.as_ref();
    let storage = OsStorage::default();
    let m = dir::complete_manifest(&storage, dir)?;
    // A full backup is checked as restore checks it, while it is copied
    // into the scratch directory: each of its files is read once.
    let (contents, check) = match m.parent_id {
        None => {
            check_listing(&storage, dir, &m)?;
            let (contents, report) = replay_scratch(&storage, dir, m.clone())?;
            (contents, Some(report))
        }
        Some(_) => (check_contents(&storage, dir, &m)?, None),
    };
    Ok(VerifyReport {
        backup_id: m.backup_id.clone(),
        start_lsn: m.start(),
        end_lsn: m.end(),
        files: m.files.len(),
        bytes: contents.bytes,
        pages: contents.pages,
        deltas: m.pages_as_deltas,
        log_records: contents.log_records,
        check,
    })
}

/// Restores the backup into a scratch directory beside it (which checks
/// its contents, [`check_copy`](super::checks::check_copy)), opens it (replaying the log) and checks
/// it; removes the scratch copy. Returns what the contents' check read and
/// the open copy's check.
fn replay_scratch(storage: &OsStorage, dir: &Path, m: Manifest) -> Result<(Contents, CheckReport)> {
    let name = dir
        .file_name()
        .map_or("backup".into(), |n| n.to_string_lossy().into_owned());
    let scratch = dir.with_file_name(format!(".{name}.verify-{}", std::process::id()));
    if scratch.exists() {
        remove_scratch(&scratch)?;
    }
    let copied = super::copy::restore_checked(storage, &[dir], &[m], &scratch, None, |tmp| {
        let _ = std::fs::remove_dir_all(tmp);
    });
    let checked = copied.and_then(|(_, contents)| {
        let contents = contents.expect("a full backup's copy is checked");
        let db = Database::open(
            &scratch,
            Options {
                create_if_missing: false,
                cache_bytes: 16 << 20,
                wal_sync: Some(crate::io::SyncVariant {
                    method: crate::io::SyncMethod::Fdatasync,
                    direct: false,
                }),
                publish_stats: false,
                ..Options::default()
            },
        )?;
        let report = db.check()?;
        db.close()?;
        Ok((contents, report))
    });
    remove_scratch(&scratch)?;
    checked
}

fn remove_scratch(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::from_io(crate::error::IoOp::Remove, path, None, e)),
    }
}
