//! A backup directory as a whole: sealing it (manifest, then completion
//! marker), reading the manifest of a complete one, checking its files and
//! a chain of them, and the record a restore leaves in the directory it
//! makes in place of a manifest.
//!
//! Invariants:
//! - A manifest is returned only when the completion marker matches it
//!   ([`complete_manifest`]); a restore's record only when it is marked
//!   restored and names no parent ([`restored_record`]).

use std::path::Path;

use super::layout::WHOLE_PAGES;
use super::layout::{CONTROL_NAME, DATA_NAME, MANIFEST_BYTES_MAX, RESTORED_NAME, WAL_DIR_NAME};
use super::manifest::{
    self, Manifest, ManifestFile, COMPLETE_NAME, MANIFEST_FORMAT, MANIFEST_NAME,
};
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, Storage};
use crate::sched::crc_files as files;

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
    let mut buf = AlignedBuf::new(files::CHUNK_BYTES, files::ALIGN_BYTES)?;
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
            return Err(f.mismatch(path, (len, crc)));
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

/// The record of a restored chain in `dir`: the last backup's manifest, as
/// a full backup holding the files now in `dir` (`CONTROL`, `data` and the
/// log's segments), marked as a restore's.
pub(crate) fn combined_manifest<S: Storage>(
    storage: &S,
    dir: &Path,
    last: &Manifest,
    buf: &mut AlignedBuf,
) -> Result<Manifest> {
    let mut m = last.clone();
    m.parent_id = None;
    m.parent_start_lsn = None;
    m.incremental_pages = Vec::new();
    m.changed_pages_method = None;
    m.increment_format = WHOLE_PAGES;
    m.format = MANIFEST_FORMAT;
    m.pages_as_deltas = 0;
    m.restored = true;
    m.files = Vec::new();
    let mut names = vec![CONTROL_NAME.to_string(), DATA_NAME.to_string()];
    for n in crate::wal::list_segments(storage, &dir.join(WAL_DIR_NAME))? {
        let name = crate::wal::format::segment_file_name(n);
        names.push(format!("{WAL_DIR_NAME}/{name}"));
    }
    for name in names {
        let (len, crc32c) = files::crc_of(storage, &dir.join(&name), buf)?;
        m.files.push(ManifestFile {
            path: name,
            len,
            crc32c,
        });
    }
    Ok(m)
}
