//! Directories held open, and where a path is opened from.
//!
//! A database opens its directory and its WAL directory once ([`Dir`]);
//! every later operation on either, or on an entry of either, goes through
//! that handle (`openat`, `mkdirat`, `fstatat`, `renameat`, `unlinkat`,
//! `fsync` on the handle). Swapping a directory, or one of its parents, for
//! another or for a symlink after open redirects nothing: the engine keeps
//! reading and writing the directory it opened.
//!
//! [`At`] is a path as those system calls see it: a base directory (a held
//! one, or the process's current directory for a plain path) and the rest
//! of the path under it, with the whole path kept for messages.
//!
//! Invariants:
//! - An entry of a held directory is always one name under it (`rel` has one
//!   component, or is `.` for the directory itself), so nothing under a held
//!   directory is resolved through a second name lookup of a directory.
//! - Every open here carries `O_CLOEXEC`; a directory reached through a held
//!   one is opened with `O_NOFOLLOW` (a symlink there is refused, naming it).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::fs::{fs_info_of, FsInfo};
use super::perms::{FileKind, FileMeta, Permissions};
use crate::error::{Error, IoOp, Result};

/// A directory held open by its handle.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Where a path is opened from: a base directory and the path under it.
#[derive(Debug, Clone)]
pub struct At<'a> {
    base: BorrowedFd<'a>,
    rel: PathBuf,
    path: PathBuf,
}

/// Whether `p` is one plain name (not `.`, `..`, a root or several parts).
fn is_one_name(p: &Path) -> bool {
    let mut parts = p.components();
    matches!(
        (parts.next(), parts.next()),
        (Some(Component::Normal(_)), None)
    )
}

fn os_err(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from(e)
}

impl Dir {
    /// Opens the directory at `at`. Its last component is followed when it
    /// is a symlink only if `follow_last` (a path the user gave may be one;
    /// a directory inside a held one may not).
    ///
    /// # Errors
    /// [`Error::NotADirectory`] naming the path when it is a symlink not to
    /// be followed or not a directory; I/O errors of the open.
    pub fn open(at: &At<'_>, follow_last: bool) -> Result<Dir> {
        let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if !follow_last {
            flags |= OFlags::NOFOLLOW;
        }
        match rustix::fs::openat(at.base, &at.rel, flags, Mode::empty()) {
            Ok(fd) => {
                let dir = Dir {
                    fd,
                    path: at.path.clone(),
                };
                assert!(dir.itself().lstat()?.kind == FileKind::Dir, "O_DIRECTORY");
                Ok(dir)
            }
            Err(e @ (rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP)) => {
                // What is there, if the last component is what refused; a
                // component before it (`file/wal`) gives the I/O error.
                match at.lstat().map(|m| m.kind) {
                    Ok(kind) if kind != FileKind::Dir => Err(Error::NotADirectory {
                        path: at.path.clone(),
                        kind: kind.name().to_string(),
                    }),
                    _ => Err(Error::from_io(IoOp::Open, &at.path, None, os_err(e))),
                }
            }
            Err(e) => Err(Error::from_io(IoOp::Open, &at.path, None, os_err(e))),
        }
    }

    /// The path it was opened by (for messages: the name may no longer lead
    /// to it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory itself, through its handle.
    pub fn itself(&self) -> At<'_> {
        At {
            base: self.fd.as_fd(),
            rel: PathBuf::from("."),
            path: self.path.clone(),
        }
    }

    /// The entry `name` (one path component) of the directory.
    pub fn entry(&self, name: &OsStr) -> At<'_> {
        let rel = PathBuf::from(name);
        assert!(
            is_one_name(&rel),
            "an entry is one name under its directory: {}",
            rel.display()
        );
        At {
            base: self.fd.as_fd(),
            path: self.path.join(&rel),
            rel,
        }
    }
}

impl At<'static> {
    /// A plain path, resolved from the current directory at each use.
    pub fn cwd(path: &Path) -> At<'static> {
        At {
            base: rustix::fs::CWD,
            rel: path.to_path_buf(),
            path: path.to_path_buf(),
        }
    }
}

impl<'a> At<'a> {
    /// The whole path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` under this one (which must be a directory). Under a held
    /// directory, only one name deep: nothing there is reached through a
    /// second lookup of a directory's name.
    pub fn join(&self, name: impl AsRef<Path>) -> At<'a> {
        let name = name.as_ref();
        assert!(
            !self.in_held() || (self.rel == Path::new(".") && is_one_name(name)),
            "one name under a held directory: {} under {}",
            name.display(),
            self.path.display()
        );
        At {
            base: self.base,
            rel: if self.rel == Path::new(".") {
                name.to_path_buf()
            } else {
                self.rel.join(name)
            },
            path: self.path.join(name),
        }
    }

    /// The directory this one is in (the base itself for an entry of a held
    /// directory).
    pub fn parent(&self) -> At<'a> {
        assert!(
            !(self.in_held() && self.rel == Path::new(".")),
            "a held directory's parent is not reached through it"
        );
        let up = |p: &Path| match p.parent() {
            Some(q) if !q.as_os_str().is_empty() => q.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let parent = At {
            base: self.base,
            rel: up(&self.rel),
            path: up(&self.path),
        };
        assert!(
            !parent.rel.as_os_str().is_empty(),
            "an empty path opens nothing: the directory itself is `.`"
        );
        parent
    }

    /// `openat(2)` with `flags` (`O_CLOEXEC` always added) and `mode` for a
    /// created file.
    ///
    /// # Errors
    /// The system call's error, untyped: the caller names the path.
    pub(crate) fn open_raw(&self, flags: i32, mode: u32) -> std::io::Result<File> {
        let flags = OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC;
        rustix::fs::openat(self.base, &self.rel, flags, Mode::from_raw_mode(mode))
            .map(File::from)
            .map_err(os_err)
    }

    /// The kind, mode and owner, not following a symlink (`fstat` of an
    /// `O_PATH | O_NOFOLLOW` descriptor).
    ///
    /// # Errors
    /// I/O errors of the open or the `fstat` (for example, no such path).
    pub fn lstat(&self) -> Result<FileMeta> {
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let file = rustix::fs::openat(self.base, &self.rel, flags, Mode::empty())
            .map(File::from)
            .map_err(|e| Error::from_io(IoOp::Stat, &self.path, None, os_err(e)))?;
        let m = file
            .metadata()
            .map_err(|e| Error::from_io(IoOp::Stat, &self.path, None, e))?;
        Ok(FileMeta::of(&m))
    }

    /// Whether anything is there (a symlink is, wherever it points).
    pub fn exists(&self) -> bool {
        rustix::fs::statat(self.base, &self.rel, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Creates this directory with `permissions`' directory mode; one that is
    /// already there as a directory is fine.
    ///
    /// # Errors
    /// I/O errors of `mkdirat`; [`Error::NotADirectory`] when something else
    /// is there.
    pub fn mkdir(&self, permissions: Permissions) -> Result<()> {
        let mode = Mode::from_raw_mode(permissions.dir_mode());
        match rustix::fs::mkdirat(self.base, &self.rel, mode) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => match self.lstat()?.kind {
                FileKind::Dir => Ok(()),
                kind => Err(Error::NotADirectory {
                    path: self.path.clone(),
                    kind: kind.name().to_string(),
                }),
            },
            Err(e) => Err(Error::from_io(IoOp::CreateDir, &self.path, None, os_err(e))),
        }
    }

    /// Removes this file.
    ///
    /// # Errors
    /// I/O errors of `unlinkat`.
    pub fn unlink(&self) -> Result<()> {
        rustix::fs::unlinkat(self.base, &self.rel, AtFlags::empty())
            .map_err(|e| Error::from_io(IoOp::Remove, &self.path, None, os_err(e)))
    }

    /// Removes this file if it is there.
    ///
    /// # Errors
    /// I/O errors of `unlinkat` other than "no such file".
    pub fn remove_if_present(&self) -> Result<()> {
        match rustix::fs::unlinkat(self.base, &self.rel, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::from_io(IoOp::Remove, &self.path, None, os_err(e))),
        }
    }

    /// Renames this file to `to` (atomically replacing it).
    ///
    /// # Errors
    /// I/O errors of `renameat`.
    pub fn rename_to(&self, to: &At<'_>) -> Result<()> {
        rustix::fs::renameat(self.base, &self.rel, to.base, &to.rel)
            .map_err(|e| Error::from_io(IoOp::Rename, &self.path, None, os_err(e)))
    }

    /// Renames this file to `to`, which must not exist: `EEXIST` when it
    /// does, and nothing changes. A filesystem without `RENAME_NOREPLACE`
    /// gets [`link_new_to`](Self::link_new_to).
    ///
    /// # Errors
    /// I/O errors of `renameat2`, `linkat`, `unlinkat` or `rename`.
    pub fn rename_new_to(&self, to: &At<'_>) -> Result<()> {
        let flags = rustix::fs::RenameFlags::NOREPLACE;
        match rustix::fs::renameat_with(self.base, &self.rel, to.base, &to.rel, flags) {
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => self.link_new_to(to),
            r => r.map_err(|e| Error::from_io(IoOp::Rename, &self.path, None, os_err(e))),
        }
    }

    /// [`rename_new_to`](Self::rename_new_to) without `RENAME_NOREPLACE`:
    /// a hard link, which refuses a taken name just as atomically, then the
    /// old name's removal. A filesystem without hard links (vfat, exfat,
    /// some CIFS mounts) gets [`checked_rename_to`](Self::checked_rename_to).
    ///
    /// # Errors
    /// I/O errors of `linkat` and `unlinkat`, or of the checked rename.
    pub(crate) fn link_new_to(&self, to: &At<'_>) -> Result<()> {
        match rustix::fs::linkat(self.base, &self.rel, to.base, &to.rel, AtFlags::empty()) {
            Ok(()) => rustix::fs::unlinkat(self.base, &self.rel, AtFlags::empty())
                .map_err(|e| Error::from_io(IoOp::Remove, &self.path, None, os_err(e))),
            Err(rustix::io::Errno::PERM | rustix::io::Errno::OPNOTSUPP) => {
                self.checked_rename_to(to)
            }
            Err(e) => Err(Error::from_io(IoOp::Rename, &self.path, None, os_err(e))),
        }
    }

    /// The last resort of [`rename_new_to`](Self::rename_new_to): `EEXIST`
    /// when `to` exists, else a plain rename. A file that appears under
    /// `to` between the look and the rename is replaced: the one case no
    /// call of this filesystem can refuse.
    ///
    /// # Errors
    /// `EEXIST`; I/O errors of `rename`.
    pub(crate) fn checked_rename_to(&self, to: &At<'_>) -> Result<()> {
        if to.exists() {
            let exists = std::io::Error::from_raw_os_error(libc::EEXIST);
            return Err(Error::from_io(IoOp::Rename, &self.path, None, exists));
        }
        self.rename_to(to)
    }

    /// Whether this is reached through a held directory (not the current
    /// one), where no symlink is followed.
    fn in_held(&self) -> bool {
        self.base.as_raw_fd() != rustix::fs::CWD.as_raw_fd()
    }

    fn open_dir(&self, op: IoOp) -> Result<File> {
        let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if self.in_held() {
            flags |= OFlags::NOFOLLOW;
        }
        rustix::fs::openat(self.base, &self.rel, flags, Mode::empty())
            .map(File::from)
            .map_err(|e| Error::from_io(op, &self.path, None, os_err(e)))
    }

    /// The names of this directory's entries, sorted (without `.` and `..`).
    ///
    /// # Errors
    /// I/O errors of opening or reading the directory.
    pub fn list(&self) -> Result<Vec<String>> {
        let dir = self.open_dir(IoOp::ListDir)?;
        let io = |e| Error::from_io(IoOp::ListDir, &self.path, None, os_err(e));
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Makes this directory's entries durable: `fsync` on the directory.
    ///
    /// # Errors
    /// I/O errors of opening or syncing it.
    pub fn sync_dir(&self) -> Result<()> {
        self.open_dir(IoOp::Open)?
            .sync_all()
            .map_err(|e| Error::from_io(IoOp::Sync, &self.path, None, e))
    }

    /// The filesystem type and device of this directory.
    ///
    /// # Errors
    /// I/O errors of opening it or of `fstatfs`/`fstat`.
    pub fn fs_info(&self) -> Result<FsInfo> {
        fs_info_of(&self.open_dir(IoOp::Stat)?, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_directory_is_used_after_its_name_moves() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let first = tmp.path().join("first");
        std::fs::create_dir(&first).expect("mkdir");
        let dir = Dir::open(&At::cwd(&first), false).expect("open");
        std::fs::rename(&first, tmp.path().join("moved")).expect("rename");
        std::fs::create_dir(&first).expect("mkdir again");
        let f = dir.entry(OsStr::new("x"));
        f.open_raw(libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o600)
            .expect("create");
        assert!(tmp.path().join("moved/x").exists(), "in the held directory");
        assert!(!first.join("x").exists(), "not in the new one at its name");
        assert_eq!(dir.itself().list().expect("list"), vec!["x".to_string()]);
        f.rename_to(&dir.entry(OsStr::new("y"))).expect("rename");
        assert!(dir.entry(OsStr::new("y")).exists());
        assert_eq!(
            dir.entry(OsStr::new("y")).lstat().expect("stat").kind,
            FileKind::File
        );
        dir.entry(OsStr::new("y")).unlink().expect("unlink");
        assert!(!dir.entry(OsStr::new("y")).exists());
        dir.itself().sync_dir().expect("sync");
    }

    #[test]
    fn a_symlink_is_refused_unless_followed_and_mkdir_checks_what_is_there() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let err = Dir::open(&At::cwd(&link), false).expect_err("a link");
        assert!(
            matches!(&err, Error::NotADirectory { path, kind } if *path == link && kind == "symbolic link"),
            "{err}"
        );
        Dir::open(&At::cwd(&link), true).expect("followed when asked");
        let held = Dir::open(&At::cwd(tmp.path()), false).expect("open");
        held.entry(OsStr::new("new"))
            .mkdir(Permissions::Private)
            .expect("mkdir");
        held.entry(OsStr::new("new"))
            .mkdir(Permissions::Private)
            .expect("there already");
        std::fs::write(tmp.path().join("file"), b"x").expect("write");
        let err = held
            .entry(OsStr::new("file"))
            .mkdir(Permissions::Private)
            .expect_err("a file");
        assert!(matches!(err, Error::NotADirectory { .. }), "{err}");
        assert_eq!(At::cwd(&real).join("z").path(), real.join("z"));
        assert_eq!(held.entry(OsStr::new("real")).parent().path(), tmp.path());
        let nested = std::panic::catch_unwind(|| held.entry(OsStr::new("real")).join("z"));
        assert!(
            nested.is_err(),
            "never two names deep under a held directory"
        );
    }
}
