//! The simulated disk's namespace: the [`Storage`] side of [`SimStorage`]
//! (locks, opening and creating files, directories, renames, removals and
//! directory syncs) over its live and durable tables of entries.
//!
//! Invariants:
//! - a path names a file in the live table, a directory, or nothing, never
//!   both a file and a directory;
//! - only a sync of a directory moves that directory's live entries into the
//!   durable table; a crash brings back the durable one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use super::file::SimFile;
use super::{eio, enoent, lock, FileData, SimStorage, State};
use crate::error::{Error, IoOp, Result};
use crate::io::{FileKind, FileMeta, FileOptions, Permissions, Storage};

/// A held lock of a [`SimStorage`].
#[derive(Debug)]
pub struct SimLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        lock(&self.state).locks.remove(&self.path);
    }
}

impl Storage for SimStorage {
    type File = SimFile;
    type Lock = SimLock;

    fn lock_exclusive(&self, path: &Path, _permissions: Permissions) -> Result<SimLock> {
        let mut s = lock(&self.state);
        if !s.locks.insert(path.to_path_buf()) {
            return Err(Error::DatabaseLocked {
                path: path.to_path_buf(),
                holder: "another handle on the simulated disk".into(),
            });
        }
        Ok(SimLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        })
    }

    fn open(&self, path: &Path, opts: &FileOptions) -> Result<SimFile> {
        let mut s = lock(&self.state);
        if s.dirs.contains(path) {
            return Err(Error::NotARegularFile {
                path: path.to_path_buf(),
                kind: FileKind::Dir.name().to_string(),
            });
        }
        let id = match s.live.get(path) {
            Some(_) if opts.exclusive && opts.create => {
                let exists = std::io::Error::from_raw_os_error(libc::EEXIST);
                return Err(Error::from_io(IoOp::Open, path, None, exists));
            }
            Some(&id) => {
                if opts.truncate && !opts.read_only {
                    if !s.step() {
                        return Err(eio(IoOp::Open, path));
                    }
                    let f = s.files.get_mut(&id).expect("named file");
                    f.live.clear();
                    f.pending.push((0, 0));
                }
                id
            }
            None if opts.create && !opts.read_only => {
                if !s.step() {
                    return Err(eio(IoOp::Open, path));
                }
                let id = s.next_id;
                s.next_id += 1;
                let fresh = s.files.insert(id, FileData::default()).is_none();
                assert!(fresh, "file ids are never reused");
                s.live.insert(path.to_path_buf(), id);
                id
            }
            None => return Err(enoent(IoOp::Open, path)),
        };
        Ok(SimFile {
            state: Arc::clone(&self.state),
            id,
            path: path.to_path_buf(),
            each_write_durable: opts.sync.syncs_each_write(),
            failure: OnceLock::new(),
        })
    }

    fn stat(&self, path: &Path) -> Result<FileMeta> {
        let s = lock(&self.state);
        let permissions = Permissions::Private;
        let (kind, mode) = if s.live.contains_key(path) {
            (FileKind::File, permissions.file_mode())
        } else if s.dirs.contains(path) {
            (FileKind::Dir, permissions.dir_mode())
        } else {
            return Err(enoent(IoOp::Stat, path));
        };
        assert!(
            !(s.live.contains_key(path) && s.dirs.contains(path)),
            "a path is a file or a directory"
        );
        Ok(FileMeta {
            kind,
            mode,
            uid: 0,
            gid: 0,
            dev: 0,
            ino: 0,
        })
    }

    /// The simulated disk has no symlinks and no renames of directories, so
    /// a directory stays where it is found: anchoring only checks that it is
    /// one, as the real storage does.
    fn anchor(&self, dir: &Path) -> Result<Self> {
        let kind = self.stat(dir)?.kind;
        if kind != FileKind::Dir {
            return Err(Error::NotADirectory {
                path: dir.to_path_buf(),
                kind: kind.name().to_string(),
            });
        }
        Ok(self.clone())
    }

    fn create_dirs(&self, path: &Path, _permissions: Permissions) -> Result<()> {
        let mut s = lock(&self.state);
        for a in path.ancestors() {
            s.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let s = lock(&self.state);
        let mut names: Vec<String> = s
            .live
            .keys()
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        names.extend(
            s.dirs
                .iter()
                .filter(|p| p.parent() == Some(path))
                .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())),
        );
        names.sort();
        assert!(
            names.windows(2).all(|w| w[0] < w[1]),
            "a name in a directory is a file or a directory, once"
        );
        Ok(names)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(eio(IoOp::Rename, from));
        }
        let id = s
            .live
            .remove(from)
            .ok_or_else(|| enoent(IoOp::Rename, from))?;
        assert!(s.files.contains_key(&id), "a named file has data");
        assert!(
            !s.dirs.contains(to),
            "the engine never renames a file over a directory"
        );
        s.live.insert(to.to_path_buf(), id);
        Ok(())
    }

    fn rename_new(&self, from: &Path, to: &Path) -> Result<()> {
        if lock(&self.state).live.contains_key(to) {
            let exists = std::io::Error::from_raw_os_error(libc::EEXIST);
            return Err(Error::from_io(IoOp::Rename, from, None, exists));
        }
        // One call: nothing else runs on the simulated disk in between
        // but the engine's own threads, which never make this name.
        self.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(eio(IoOp::Remove, path));
        }
        s.live
            .remove(path)
            .ok_or_else(|| enoent(IoOp::Remove, path))?;
        assert!(!s.live.contains_key(path), "a removed name is gone");
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let mut s = lock(&self.state);
        if !s.step() {
            return Err(eio(IoOp::Sync, path));
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(path);
        s.durable.retain(|p, _| !in_dir(p));
        let entries: Vec<(PathBuf, u64)> = s
            .live
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, id)| (p.clone(), *id))
            .collect();
        s.durable.extend(entries);
        assert!(
            s.durable
                .iter()
                .filter(|(p, _)| in_dir(p))
                .all(|(p, id)| s.live.get(p) == Some(id)),
            "a synced directory's durable entries are its live ones"
        );
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let s = lock(&self.state);
        s.live.contains_key(path) || s.dirs.contains(path)
    }
}
