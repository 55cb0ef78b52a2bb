//! Online backups: what a backup is on disk. Taking one is the open
//! database's work ([`Database::backup`](crate::Database::backup), in
//! `db::backup`, which writes these files); checking and restoring one is
//! `crate::restore`'s, above the database. docs/backup.md has the design.
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
//!   by open, restore and verify ([`Error::IncompleteBackup`]).
//! - Every file a manifest lists is checked against its length and CRC32C
//!   before restore copies it, and while it copies.

pub(crate) mod files;
pub(crate) mod increment;
pub mod manifest;
pub(crate) mod restore;

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::io::Storage;
use crate::lsn::Lsn;
use manifest::{Manifest, COMPLETE_NAME, MANIFEST_NAME};

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

/// How [`Database::backup`](crate::Database::backup) runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupOptions {
    /// At most this many bytes per second read (`None`: as fast
    /// as the I/O scheduler's lowest class goes).
    pub rate_bytes: Option<u64>,
    /// Run the checkpoint that starts the backup at full speed (sooner to
    /// start, harder on commits) instead of paced like a background one
    /// (the default, as `pg_basebackup`'s).
    pub fast_checkpoint: bool,
    /// Make an incremental backup on top of this earlier backup of the
    /// database (full or incremental): only the pages changed since that
    /// backup's start are copied. They are found from the changed-page
    /// summaries the checkpoints keep beside the database, reading only
    /// those pages; where the summaries do not cover the range (a database
    /// restored since, a summary lost), by reading every page's LSN. The
    /// manifest's `changed_pages_method` says which.
    pub incremental_from: Option<std::path::PathBuf>,
}

/// What a backup did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupReport {
    /// The backup's identity, as its manifest names it.
    pub backup_id: String,
    /// Where its log starts (the redo point of its checkpoint).
    pub start_lsn: Lsn,
    /// The end of its checkpoint's record.
    pub checkpoint_lsn: Lsn,
    /// Where its log ends: the backup opens to this point at least.
    pub end_lsn: Lsn,
    /// Whether it is an incremental backup.
    pub incremental: bool,
    /// Pages of the data file at the start (page 0 included).
    pub pages: u64,
    /// Pages read and checked.
    pub pages_scanned: u64,
    /// Pages copied into the backup (all of them, for a full backup).
    pub pages_copied: u64,
    /// Bytes of the data file copied.
    pub data_bytes: u64,
    /// Bytes of log copied.
    pub wal_bytes: u64,
    /// Pages that failed their check when first read and passed when read
    /// again under their frame's latch (a write was under way).
    pub pages_reread: u64,
    /// Pages that failed both reads but had changed since the start: the
    /// log the backup carries holds their image.
    pub pages_covered_by_log: u64,
    /// An incremental backup's pages stored as the bytes that differ from
    /// the chain's page (the rest are whole).
    pub pages_as_deltas: u64,
    /// The backups an incremental backup's deltas were made against, found
    /// beside its parent: `None` when a link of the chain was not there,
    /// and every page is stored whole.
    pub delta_chain_links: Option<u64>,
    /// How long it took.
    pub micros: u64,
    /// Why the log archive could not be brought up to the backup's end,
    /// where it held a shorter partial copy of the backup's last segment
    /// (`archive_timeout`); also counted in `stats().archive`. The backup
    /// is whole and restores, to a point in time too: its own last
    /// segment is kept where the archive's copy is shorter.
    pub archive_failure: Option<String>,
}

/// Where a log archive rooted at `root` keeps the segments of history
/// `history` (32 hex digits): the root for the line a database was created
/// on (or a history not recorded), a directory named by the history for
/// every later one, so two lines never share a segment's name.
pub(crate) fn archive_dir_of(root: &Path, history: Option<&str>) -> std::path::PathBuf {
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

/// Seals a backup whose files are written and synced: writes the manifest,
/// syncs, then writes the completion marker and syncs again.
pub(crate) fn seal<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<()> {
    let bytes = m.encode();
    let (_, crc) = Manifest::decode(&bytes, &dir.join(MANIFEST_NAME))?;
    files::write_small(storage, &dir.join(MANIFEST_NAME), &bytes)?;
    storage.sync_dir(dir)?;
    files::write_small(
        storage,
        &dir.join(COMPLETE_NAME),
        &manifest::encode_marker(&m.backup_id, crc),
    )?;
    storage.sync_dir(dir)
}

/// The manifest of the complete backup in `dir`.
///
/// # Errors
/// [`Error::IncompleteBackup`] when the marker is missing or does not
/// match the manifest (or the manifest is missing); [`Error::Corruption`]
/// for a damaged manifest; I/O errors.
pub(crate) fn complete_manifest<S: Storage>(storage: &S, dir: &Path) -> Result<Manifest> {
    let incomplete = |detail: &str| Error::IncompleteBackup {
        path: dir.to_path_buf(),
        detail: detail.to_string(),
    };
    let marker_path = dir.join(COMPLETE_NAME);
    if !storage.exists(&marker_path) && storage.exists(&dir.join(RESTORED_NAME)) {
        return Err(Error::InvalidArgument(format!(
            "{} is a database a restore made, not a backup: open it as a database (`directkv \
             check` does), and take a backup of it to keep one",
            dir.display()
        )));
    }
    if !storage.exists(&marker_path) {
        return Err(incomplete(
            "it has no completion marker (backup_complete): the backup was interrupted or is \
             still running",
        ));
    }
    let marker = files::read_small(storage, &marker_path, 4096)?;
    let (id, crc) = manifest::decode_marker(&marker)
        .ok_or_else(|| incomplete("its completion marker is damaged"))?;
    let manifest_path = dir.join(MANIFEST_NAME);
    if !storage.exists(&manifest_path) {
        return Err(incomplete("its manifest (backup_manifest) is missing"));
    }
    let bytes = files::read_small(storage, &manifest_path, MANIFEST_BYTES_MAX)?;
    let (m, found) = Manifest::decode(&bytes, &manifest_path)?;
    if found != crc || m.backup_id != id {
        return Err(incomplete(
            "its manifest is not the one its completion marker completes",
        ));
    }
    assert!(m.start_lsn <= m.end_lsn, "decode checks the order");
    Ok(m)
}

/// The record a restore leaves in the directory it makes, in place of a
/// backup's manifest and completion marker: the manifest of what it
/// restored (marked [`Manifest::restored`]), listing the files it made.
/// The directory is a database to be, never a backup: without a marker,
/// verify, restore and incremental backups refuse it, while its open
/// takes from the record the end its log must reach.
pub(crate) const RESTORED_NAME: &str = "restored_from_backup";

/// Writes the record of a restore into `dir` (see [`RESTORED_NAME`]) and
/// syncs the directory.
pub(crate) fn write_restored<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<()> {
    assert!(m.restored, "the record of a restore is marked restored");
    assert!(m.parent_id.is_none(), "a restore makes a whole database");
    let path = dir.join(RESTORED_NAME);
    let bytes = m.encode();
    let (back, _) = Manifest::decode(&bytes, &path)?;
    assert_eq!(back.backup_id, m.backup_id, "the record decodes as written");
    files::write_small(storage, &path, &bytes)?;
    storage.sync_dir(dir)
}

/// The record of the restore that made `dir` ([`RESTORED_NAME`]), if one
/// did.
///
/// # Errors
/// [`Error::Corruption`] for a record that does not decode or is not a
/// restore's; I/O errors.
pub(crate) fn restored_record<S: Storage>(storage: &S, dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(RESTORED_NAME);
    if !storage.exists(&path) {
        return Ok(None);
    }
    let bytes = files::read_small(storage, &path, MANIFEST_BYTES_MAX)?;
    let (m, _) = Manifest::decode(&bytes, &path)?;
    if !m.restored || m.parent_id.is_some() {
        return Err(Error::Corruption {
            path,
            offset: 0,
            page: None,
            detail: "the record of a restore is not marked restored, or names a parent".into(),
        });
    }
    assert!(m.start_lsn <= m.end_lsn, "decode checks the order");
    Ok(Some(m))
}

/// Whether `dir` is a database a restore made and no backup: it holds the
/// restore's record (`restored_from_backup`) and no backup's completion marker.
/// Commands open it (its first open replays its log and makes it a
/// database), where a backup kept as one is refused by them. A copy of it,
/// wherever it is, is the same: nothing reads it as a backup.
pub fn is_restored_copy<S: Storage>(storage: &S, dir: &Path) -> bool {
    let restored = restored_record(storage, dir).is_ok_and(|m| m.is_some());
    restored && !storage.exists(&dir.join(COMPLETE_NAME))
}

/// Checks that every file `m` lists in `dir` has its length and CRC32C;
/// returns the bytes checked.
///
/// # Errors
/// [`Error::Corruption`] naming the first file missing or different.
pub(crate) fn check_files<S: Storage>(storage: &S, dir: &Path, m: &Manifest) -> Result<u64> {
    let mut buf = crate::io::AlignedBuf::new(files::CHUNK_BYTES, files::ALIGN_BYTES)?;
    let mut bytes = 0;
    for f in &m.files {
        let path = dir.join(&f.path);
        if !storage.exists(&path) {
            return Err(Error::Corruption {
                path,
                offset: 0,
                page: None,
                detail: "a file the backup's manifest lists is missing".into(),
            });
        }
        let (len, crc) = files::crc_of(storage, &path, &mut buf)?;
        if (len, crc) != (f.len, f.crc32c) {
            return Err(files::mismatch(path, (len, crc), f));
        }
        bytes += len;
    }
    Ok(bytes)
}

/// The manifests of `chain`, once it is shown to be one: complete backups
/// of one database, a full one first, each next one an increment of the
/// one before.
pub(crate) fn check_chain<S: Storage>(storage: &S, chain: &[&Path]) -> Result<Vec<Manifest>> {
    let Some(&first) = chain.first() else {
        return Err(Error::InvalidArgument("no backup to restore".into()));
    };
    let ms = chain
        .iter()
        .map(|d| complete_manifest(storage, d))
        .collect::<Result<Vec<_>>>()?;
    let broken = |path: &Path, detail: String| Error::BackupChain {
        path: path.to_path_buf(),
        detail,
    };
    if let Some(parent) = &ms[0].parent_id {
        return Err(broken(
            first,
            format!(
                "it is an incremental backup (of backup {parent}); a chain starts with the \
                 full backup it builds on, then each increment in order"
            ),
        ));
    }
    for (i, m) in ms.iter().enumerate().skip(1) {
        let prev = &ms[i - 1];
        let detail = if m.db_id != ms[0].db_id || m.page_bytes != ms[0].page_bytes {
            Some(format!(
                "it is a backup of database {}, the chain's is {}",
                m.db_id, ms[0].db_id
            ))
        } else {
            match &m.parent_id {
                None => Some("it is a full backup, which only starts a chain".to_string()),
                Some(p) if *p != prev.backup_id || m.parent_start_lsn != Some(prev.start_lsn) => {
                    Some(format!(
                        "it is an increment of backup {p}, but the backup before it in the \
                         chain is {}: a link is missing or the order is wrong",
                        prev.backup_id
                    ))
                }
                Some(_) if m.history() != prev.history() => Some(format!(
                    "it was taken on history {} of the database, the backup before it on {}",
                    m.history(),
                    prev.history()
                )),
                Some(_) => None,
            }
        };
        if let Some(detail) = detail {
            return Err(broken(chain[i], detail));
        }
    }
    Ok(ms)
}
