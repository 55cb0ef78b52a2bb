//! Who may touch a database: the modes and owners of its directory, its WAL
//! directory and every entry in them, read at open (which refuses what
//! others may write) and by the check (which reports them).
//!
//! Invariants:
//! - An open refuses, before it writes anything, a database directory, WAL
//!   directory or entry of either that its group or others may write
//!   ([`Error::WritableByOthers`] naming the first, by path), unless
//!   `Options::accept_writable_by_others` says the user accepts it.
//! - Entries readable by anyone `Options::permissions` does not grant are
//!   a warning, not a refusal: `Stats::readable_by_others` and `directkv
//!   check` list them.
//! - Only `lstat` is used: a symlink is reported as one, never followed (the
//!   open of an engine file then refuses it, naming it).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Options;
use crate::error::{Error, Result};
use crate::io::{FileKind, FileMeta, Storage};

/// Entries of one directory the audit looks at, at most: a database
/// directory holds a handful of files and its log a bounded number of
/// segments, so more means someone else's directory.
pub(super) const AUDIT_ENTRIES_MAX: usize = 1 << 16;

/// The kind, mode and owner of one of a database's paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileAccess {
    /// The path.
    pub path: PathBuf,
    /// What it is (`file`, `dir`, `symlink`, ...), by `lstat`.
    pub kind: FileKind,
    /// Its permission bits, in octal (`"0600"`).
    pub mode: String,
    /// The owner's user id.
    pub uid: u32,
    /// The owner's group id.
    pub gid: u32,
}

/// What the audit found.
#[derive(Debug, Clone, Default)]
pub(super) struct Audit {
    /// Every directory and entry looked at, directories first.
    pub(super) entries: Vec<FileAccess>,
    /// Those readable beyond what the options grant.
    pub(super) readable_by_others: Vec<PathBuf>,
    /// Those the group or others may write (only with
    /// `accept_writable_by_others`: otherwise the first is an error).
    pub(super) writable_by_others: Vec<PathBuf>,
}

/// The WAL directory of the database at `path` under `opts`.
pub(super) fn wal_dir(path: &Path, opts: &Options) -> PathBuf {
    opts.wal_dir.clone().unwrap_or_else(|| path.join("wal"))
}

/// Looks at the database directory `path`, the WAL directory and every
/// entry of both (a missing WAL directory is skipped: creation makes it).
///
/// # Errors
/// [`Error::WritableByOthers`] for the first path the group or others may
/// write, unless `opts.accept_writable_by_others`; I/O errors of `lstat` or
/// of listing a directory.
pub(super) fn audit<S: Storage>(storage: &S, path: &Path, opts: &Options) -> Result<Audit> {
    let wal = wal_dir(path, opts);
    let mut audit = Audit::default();
    let dirs: Vec<&Path> = if wal == path {
        vec![path]
    } else {
        vec![path, &wal]
    };
    for dir in dirs {
        if dir == wal && !storage.exists(dir) {
            continue;
        }
        note(&mut audit, opts, dir, storage.stat(dir)?)?;
        let names = storage.list_dir(dir)?;
        if names.len() > AUDIT_ENTRIES_MAX {
            return Err(Error::NotADatabase {
                path: dir.to_path_buf(),
                detail: format!("{} entries, more than a database holds", names.len()),
            });
        }
        for name in names {
            let entry = dir.join(name);
            if entry == wal {
                continue; // looked at as a directory of its own
            }
            match storage.stat(&entry) {
                Ok(meta) => note(&mut audit, opts, &entry, meta)?,
                // Removed since the listing (a stats file being replaced).
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    assert!(!audit.entries.is_empty(), "the database directory is there");
    assert!(audit.readable_by_others.len() <= audit.entries.len());
    assert!(opts.accept_writable_by_others || audit.writable_by_others.is_empty());
    Ok(audit)
}

/// Records `meta` of `path`, refusing it if others may write it.
fn note(audit: &mut Audit, opts: &Options, path: &Path, meta: FileMeta) -> Result<()> {
    if meta.writable_by_others() && !opts.accept_writable_by_others {
        return Err(Error::WritableByOthers {
            path: path.to_path_buf(),
            mode: meta.mode,
        });
    }
    if meta.writable_by_others() {
        audit.writable_by_others.push(path.to_path_buf());
    }
    if meta.readable_beyond(opts.permissions) {
        audit.readable_by_others.push(path.to_path_buf());
    }
    audit.entries.push(FileAccess {
        path: path.to_path_buf(),
        kind: meta.kind,
        mode: format!("{:04o}", meta.mode),
        uid: meta.uid,
        gid: meta.gid,
    });
    assert!(meta.kind != FileKind::Symlink || !meta.writable_by_others());
    Ok(())
}
