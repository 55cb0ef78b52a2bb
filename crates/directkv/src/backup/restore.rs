//! Restoring a backup into a new database directory: every file is copied
//! into `DEST.restore-tmp` with its CRC32C checked against the manifest as
//! it is copied, synced, and the directory renamed to `DEST` last, so a
//! restore that fails or is killed never leaves a `DEST` that looks whole.
//! The restored directory is still a backup until it is first opened:
//! open replays its log and its first checkpoint makes it a database.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::files::{self, Sink, ALIGN_BYTES, CHUNK_BYTES};
use super::manifest::{COMPLETE_NAME, MANIFEST_NAME};
use super::WAL_DIR_NAME;
use crate::error::{Error, Result};
use crate::io::{AlignedBuf, DirectIo, OsStorage, Permissions, Storage, StorageFile};

/// What [`restore_backup`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// The backup restored.
    pub backup_id: String,
    /// Files copied (manifest and marker included).
    pub files: usize,
    /// Bytes copied.
    pub bytes: u64,
}

/// Restores the complete backup in `backup` into `dest`, which must not
/// exist (see the module docs).
///
/// # Errors
/// [`Error::IncompleteBackup`] for a backup never completed;
/// [`Error::Corruption`] naming a file missing or damaged;
/// [`Error::InvalidArgument`] when `dest` (or its scratch name) exists; I/O
/// errors. On an error nothing is left at `dest`.
pub fn restore_backup(backup: impl AsRef<Path>, dest: impl AsRef<Path>) -> Result<RestoreReport> {
    let (backup, dest) = (backup.as_ref(), dest.as_ref());
    let storage = OsStorage::default();
    let m = super::complete_manifest(&storage, backup)?;
    for taken in [dest.to_path_buf(), scratch_of(dest)] {
        if storage.exists(&taken) {
            return Err(Error::InvalidArgument(format!(
                "restore destination {} exists; restore makes a new directory",
                taken.display()
            )));
        }
    }
    let tmp = scratch_of(dest);
    let copied = copy_all(&storage, backup, &tmp, &m);
    let bytes = match copied {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    storage.rename(&tmp, dest)?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        storage.sync_dir(parent)?;
    }
    Ok(RestoreReport {
        backup_id: m.backup_id.clone(),
        files: m.files.len() + 2,
        bytes,
    })
}

/// Where a restore into `dest` builds it.
fn scratch_of(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_owned();
    name.push(".restore-tmp");
    PathBuf::from(name)
}

/// Copies every listed file, checking each, then the manifest and the
/// marker (last); syncs the directories. Returns the bytes copied.
fn copy_all<S: Storage>(
    storage: &S,
    from: &Path,
    to: &Path,
    m: &super::manifest::Manifest,
) -> Result<u64> {
    storage.create_dirs(to, Permissions::Private)?;
    storage.create_dirs(&to.join(WAL_DIR_NAME), Permissions::Private)?;
    let mut buf = AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?;
    let mut bytes = 0;
    for f in &m.files {
        let src_path = from.join(&f.path);
        if !storage.exists(&src_path) {
            return Err(Error::Corruption {
                path: src_path,
                offset: 0,
                detail: "a file the backup's manifest lists is missing".into(),
            });
        }
        let src = storage.open(&src_path, &files::read_options(DirectIo::Auto))?;
        let mut sink = Sink::create(storage, &to.join(&f.path))?;
        let len = files::whole_blocks_len(&src)?;
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            src.read_exact_at(buf.io_mut(0..n)?, at)?;
            sink.append(&buf, n)?;
            at += n as u64;
        }
        let (len, crc) = sink.finish()?;
        if (len, crc) != (f.len, f.crc32c) {
            return Err(files::mismatch(src_path, (len, crc), f));
        }
        bytes += len;
    }
    storage.sync_dir(&to.join(WAL_DIR_NAME))?;
    for name in [MANIFEST_NAME, COMPLETE_NAME] {
        let b = files::read_small(storage, &from.join(name), 64 << 20)?;
        files::write_small(storage, &to.join(name), &b)?;
        bytes += b.len() as u64;
    }
    storage.sync_dir(to)?;
    Ok(bytes)
}
