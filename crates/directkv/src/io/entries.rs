//! Directory entries made durable: a new directory is an entry of its
//! parent, and survives a power cut only once the parent is synced. Every
//! directory the engine makes (a database's, its log's, a backup's, a
//! restore's, the archive's) is made through here, or its levels synced
//! here once what it holds is done.
//!
//! Invariants:
//! - A level is synced only after it exists, outermost first, so each sync
//!   makes durable an entry whose own parent's entry already is.

use std::path::{Path, PathBuf};

use super::{Permissions, Storage};
use crate::error::Result;

/// The directories from `dir` up that do not exist yet, innermost first:
/// what creating `dir` makes, each an entry of its parent to sync.
pub fn missing_levels<'a, S: Storage>(storage: &S, dir: &'a Path) -> Vec<&'a Path> {
    let mut missing = Vec::new();
    let mut next = Some(dir).filter(|d| !d.as_os_str().is_empty());
    while let Some(d) = next.filter(|d| !storage.exists(d)) {
        missing.push(d);
        next = d.parent().filter(|p| !p.as_os_str().is_empty());
    }
    missing
}

/// Syncs the parent of each of `levels` (from [`missing_levels`], made
/// since), outermost first, so that every new entry survives a power cut.
///
/// # Errors
/// I/O errors.
pub fn sync_levels<S: Storage>(storage: &S, levels: &[&Path]) -> Result<()> {
    for d in levels.iter().rev() {
        assert!(storage.exists(d), "a level is synced once it is made");
        match d.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => storage.sync_dir(parent)?,
            None => storage.sync_dir(Path::new("."))?,
        }
    }
    Ok(())
}

/// Creates directory `dir` (and missing parents) if it does not exist, and
/// syncs the parent of each directory it creates, so that every new entry,
/// not only `dir`'s, survives a power cut.
///
/// # Errors
/// I/O errors.
pub fn create_dir_synced<S: Storage>(
    storage: &S,
    dir: &Path,
    permissions: Permissions,
) -> Result<()> {
    let levels = missing_levels(storage, dir);
    if levels.is_empty() {
        return Ok(());
    }
    storage.create_dirs(dir, permissions)?;
    sync_levels(storage, &levels)
}

/// `p` as the kernel will resolve it once created: its deepest existing
/// ancestor canonicalized (`..` and symbolic links as the kernel follows
/// them), then the rest, which does not exist yet and so holds no link,
/// with `.` and `..` applied. Resolving only the path or its parent let a
/// destination with two missing levels (`missing/../db/bk`, or a link
/// followed by two new levels) pass for one outside the database.
pub fn resolve(p: &Path) -> PathBuf {
    use std::path::Component;
    let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    for anc in p.ancestors() {
        let Ok(mut out) = std::fs::canonicalize(anc) else {
            continue;
        };
        let tail = p.strip_prefix(anc).expect("an ancestor is a prefix");
        for c in tail.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => out.push(name),
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        return out;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::io::{FaultOp, FaultyStorage, OsStorage};

    /// Every directory made gets its entry synced, the outer ones too; an
    /// existing directory syncs nothing; a failed directory sync is an
    /// error, not a silent success.
    #[test]
    fn each_new_level_of_a_directory_is_synced_into_its_parent() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let storage = FaultyStorage::new(OsStorage::default());
        let deep = tmp.path().join("a").join("b").join("c");
        create_dir_synced(&storage, &deep, Permissions::Private).expect("made");
        assert!(deep.is_dir());
        assert_eq!(storage.calls(FaultOp::SyncDir), 3, "a, b and c's parents");
        create_dir_synced(&storage, &deep, Permissions::Private).expect("there");
        assert_eq!(
            storage.calls(FaultOp::SyncDir),
            3,
            "nothing made, nothing synced"
        );
        storage.fail_after(FaultOp::SyncDir, 0, false);
        let e = create_dir_synced(&storage, &tmp.path().join("d"), Permissions::Private)
            .expect_err("the sync fails");
        assert!(matches!(e, Error::Io { .. }), "{e}");
    }
}
