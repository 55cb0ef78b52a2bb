//! Who may touch a database's files: the modes the engine creates files and
//! directories with, what the modes of existing ones allow, and what kind of
//! object a directory entry is.
//!
//! Invariants:
//! - The engine creates directories `0700` and files `0600`, or `0750` and
//!   `0640` with [`Permissions::GroupReadable`]. The mode goes to `open(2)`
//!   and `mkdir(2)`, so the umask may take more away and never adds any.
//! - Nothing the engine creates is writable by its group or by others (the
//!   `const` assertions below).
//! - Every engine file is opened with `O_NOFOLLOW | O_CLOEXEC` and checked
//!   with `fstat` right after: a symlink, a FIFO, a device, a socket or a
//!   directory where a file was expected is [`Error::NotARegularFile`] naming
//!   it, before a byte is read or written ([`ensure_regular`]).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::dir::At;
use crate::error::{Error, IoOp, Result};

/// Who may read the files and directories a database creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permissions {
    /// Only the owner: directories `0700`, files `0600` (PostgreSQL's default).
    #[default]
    Private,
    /// The owner, and the group may read: directories `0750`, files `0640`
    /// (for a backup or monitoring account in the owner's group).
    GroupReadable,
}

impl Permissions {
    /// The mode new files are created with (before the umask).
    pub const fn file_mode(self) -> u32 {
        match self {
            Permissions::Private => 0o600,
            Permissions::GroupReadable => 0o640,
        }
    }

    /// The mode new directories are created with (before the umask).
    pub const fn dir_mode(self) -> u32 {
        match self {
            Permissions::Private => 0o700,
            Permissions::GroupReadable => 0o750,
        }
    }

    /// The read bits this setting grants beyond the owner: a file or
    /// directory readable by anyone else is worth a warning.
    pub const fn granted_read_bits(self) -> u32 {
        match self {
            Permissions::Private => 0,
            Permissions::GroupReadable => 0o050,
        }
    }
}

const _: () = assert!(Permissions::Private.file_mode() & 0o077 == 0);
const _: () = assert!(Permissions::Private.dir_mode() & 0o077 == 0);
const _: () = assert!(Permissions::GroupReadable.file_mode() & MODE_WRITABLE_BY_OTHERS == 0);
const _: () = assert!(Permissions::GroupReadable.dir_mode() & MODE_WRITABLE_BY_OTHERS == 0);

/// The mode bits that let the group or others write.
pub const MODE_WRITABLE_BY_OTHERS: u32 = 0o022;

/// The mode bits that let the group or others read (or list a directory).
pub const MODE_READABLE_BY_OTHERS: u32 = 0o044;

/// What a directory entry is, by `lstat` (a symlink is itself, not its target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A Unix socket.
    Socket,
}

impl FileKind {
    /// The kind of `file_type`.
    pub fn of(file_type: std::fs::FileType) -> FileKind {
        if file_type.is_symlink() {
            FileKind::Symlink
        } else if file_type.is_dir() {
            FileKind::Dir
        } else if file_type.is_fifo() {
            FileKind::Fifo
        } else if file_type.is_char_device() {
            FileKind::CharDevice
        } else if file_type.is_block_device() {
            FileKind::BlockDevice
        } else if file_type.is_socket() {
            FileKind::Socket
        } else {
            assert!(file_type.is_file(), "the seven kinds cover every file type");
            FileKind::File
        }
    }

    /// Its name in errors and reports.
    pub fn name(self) -> &'static str {
        match self {
            FileKind::File => "regular file",
            FileKind::Dir => "directory",
            FileKind::Symlink => "symbolic link",
            FileKind::Fifo => "FIFO",
            FileKind::CharDevice => "character device",
            FileKind::BlockDevice => "block device",
            FileKind::Socket => "socket",
        }
    }
}

/// The kind, mode and owner of a path (its `lstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileMeta {
    /// What it is.
    pub kind: FileKind,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// The owner's user id.
    pub uid: u32,
    /// The owner's group id.
    pub gid: u32,
    /// The device it is on (`st_dev`; 0 on the simulated disk, which is
    /// one device).
    #[serde(default)]
    pub dev: u64,
    /// Its inode number (`st_ino`; 0 on the simulated disk).
    #[serde(default)]
    pub ino: u64,
}

impl FileMeta {
    /// Reads the `lstat` of `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when `lstat` fails (for example, no such path).
    pub fn lstat(path: &Path) -> Result<FileMeta> {
        let m = std::fs::symlink_metadata(path)
            .map_err(|e| Error::from_io(IoOp::Stat, path, None, e))?;
        Ok(FileMeta::of(&m))
    }

    /// The meta of `m`.
    pub fn of(m: &std::fs::Metadata) -> FileMeta {
        let meta = FileMeta {
            kind: FileKind::of(m.file_type()),
            mode: m.mode() & 0o7777,
            uid: m.uid(),
            gid: m.gid(),
            dev: m.dev(),
            ino: m.ino(),
        };
        assert!(meta.mode <= 0o7777, "permission bits only");
        meta
    }

    /// Whether the group or others may write it. A symlink's own mode is
    /// always `0777` and means nothing, so a symlink never is.
    pub fn writable_by_others(&self) -> bool {
        self.kind != FileKind::Symlink && self.mode & MODE_WRITABLE_BY_OTHERS != 0
    }

    /// Whether someone `permissions` does not grant may read it.
    pub fn readable_beyond(&self, permissions: Permissions) -> bool {
        let extra = MODE_READABLE_BY_OTHERS & !permissions.granted_read_bits();
        self.kind != FileKind::Symlink && self.mode & extra != 0
    }
}

/// Maps an `open(2)` error of `at`: a symlink refused by `O_NOFOLLOW`
/// (`ELOOP`), a directory opened for writing (`EISDIR`), or a FIFO, socket or
/// device that cannot be opened (`ENXIO`, `ENODEV`) is
/// [`Error::NotARegularFile`] naming what it is; anything else is the I/O
/// error.
pub(crate) fn open_error(at: &At<'_>, e: std::io::Error) -> Error {
    let maybe_not_regular = matches!(
        e.raw_os_error(),
        Some(libc::ELOOP | libc::EISDIR | libc::ENXIO | libc::ENODEV)
    );
    if maybe_not_regular {
        if let Some(kind) = not_regular(at) {
            return not_a_regular_file(at.path(), kind);
        }
    }
    Error::from_io(IoOp::Open, at.path(), None, e)
}

/// What `at` is if it exists and is not a regular file (not following a
/// symlink).
pub(crate) fn not_regular(at: &At<'_>) -> Option<FileKind> {
    let kind = at.lstat().ok()?.kind;
    (kind != FileKind::File).then_some(kind)
}

fn not_a_regular_file(path: &Path, kind: FileKind) -> Error {
    assert_ne!(kind, FileKind::File, "only other kinds are refused");
    Error::NotARegularFile {
        path: path.to_path_buf(),
        kind: kind.name().to_string(),
    }
}

/// Checks, with `fstat` on the open descriptor (so nothing can be swapped in
/// between), that `file` is a regular file, then clears the `O_NONBLOCK`
/// every engine open carries (it keeps an open of a FIFO from waiting for a
/// writer; for regular files it means nothing, and it is cleared anyway so
/// the descriptor is plain).
///
/// # Errors
/// [`Error::NotARegularFile`] naming `path` and what it is; [`Error::Io`]
/// when `fstat` or `fcntl` fails.
pub(crate) fn ensure_regular(file: File, path: &Path) -> Result<File> {
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(IoOp::Stat, path, None, e))?;
    let kind = FileKind::of(meta.file_type());
    if kind != FileKind::File {
        return Err(not_a_regular_file(path, kind));
    }
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is owned by `file`, open for the whole call; F_GETFL takes
    // no pointer.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above; F_SETFL takes an integer, not a pointer.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::from_io(IoOp::Open, path, None, e));
    }
    assert!(meta.is_file(), "only regular files pass");
    Ok(file)
}

/// The flags every open of an engine file carries: no symlink is followed
/// (`O_NOFOLLOW`), no descriptor leaks into a child (`O_CLOEXEC`), and an
/// open of a FIFO does not wait for a writer (`O_NONBLOCK`, cleared by
/// [`ensure_regular`]).
pub(crate) const OPEN_FLAGS_ALWAYS: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;

/// Writes `bytes` to a new file at `at` (a leftover there is removed
/// first: only the engine writes such names), created with `O_EXCL`,
/// `O_NOFOLLOW` and `permissions`, and returns it open for a sync if the
/// caller needs one. For the engine's small side files: the device profile
/// and the published stats.
///
/// # Errors
/// I/O errors of the removal, creation or write.
pub fn write_new_file(at: &At<'_>, bytes: &[u8], permissions: Permissions) -> Result<File> {
    use std::io::Write;
    assert_eq!(permissions.file_mode() & MODE_WRITABLE_BY_OTHERS, 0);
    at.remove_if_present()?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | OPEN_FLAGS_ALWAYS;
    let file = at
        .open_raw(flags, permissions.file_mode())
        .map_err(|e| open_error(at, e))?;
    let mut file = ensure_regular(file, at.path())?;
    file.write_all(bytes)
        .map_err(|e| Error::from_io(IoOp::Write, at.path(), None, e))?;
    Ok(file)
}

/// Reads the whole file at `at`, refusing a symlink or anything but a
/// regular file.
///
/// # Errors
/// [`Error::NotARegularFile`]; I/O errors of the open or read.
pub fn read_file(at: &At<'_>) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = at
        .open_raw(libc::O_RDONLY | OPEN_FLAGS_ALWAYS, 0)
        .map_err(|e| open_error(at, e))?;
    let mut file = ensure_regular(file, at.path())?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::from_io(IoOp::Read, at.path(), None, e))?;
    Ok(bytes)
}

/// Creates `path` and its missing parents with `permissions`' directory mode.
///
/// # Errors
/// I/O errors of `mkdir`.
pub fn create_dirs(path: &Path, permissions: Permissions) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    assert_eq!(permissions.dir_mode() & MODE_WRITABLE_BY_OTHERS, 0);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(permissions.dir_mode())
        .create(path)
        .map_err(|e| Error::from_io(IoOp::CreateDir, path, None, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_grant_no_write_and_read_as_documented() {
        let meta = |mode| FileMeta {
            kind: FileKind::File,
            mode,
            uid: 0,
            gid: 0,
            dev: 0,
            ino: 0,
        };
        assert!(meta(0o620).writable_by_others());
        assert!(meta(0o602).writable_by_others());
        assert!(!meta(0o644).writable_by_others());
        assert!(meta(0o640).readable_beyond(Permissions::Private));
        assert!(!meta(0o640).readable_beyond(Permissions::GroupReadable));
        assert!(meta(0o604).readable_beyond(Permissions::GroupReadable));
        let link = FileMeta {
            kind: FileKind::Symlink,
            ..meta(0o777)
        };
        assert!(!link.writable_by_others() && !link.readable_beyond(Permissions::Private));
    }
}
