//! The `LOCK` file: one open database per directory, across processes and within
//! one (RELIABILITY.md F21).
//!
//! `flock(LOCK_EX | LOCK_NB)` locks an open file description, not a process, so
//! a second open of the same database in the same process conflicts too, and
//! closing some other descriptor of the file does not drop the lock (the trap of
//! POSIX `fcntl` locks). The holder writes who it is into the file, so the error
//! a second opener gets names the holder.

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::dir::At;
use super::perms::{ensure_regular, open_error, Permissions, OPEN_FLAGS_ALWAYS};
use crate::error::{Error, IoOp, Result};

/// How the holder's line in a lock file starts: the lock file names its
/// holder, and open recognises a lock file of this engine by it.
pub const LOCK_HOLDER_PREFIX: &str = "held by pid ";

/// Tries of a lock held with no holder named (see [`DirLock::acquire`]),
/// 2 ms apart.
const LOCK_RELEASE_RETRIES: u32 = 50;

/// A held `LOCK` file; the lock is released when this is dropped.
#[derive(Debug)]
pub struct DirLock {
    file: std::fs::File,
    path: PathBuf,
}

impl DirLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock at `path` (creating the file with `permissions`' mode)
    /// or fails at once. A symlink or anything but a regular file at `path`
    /// is refused, as for every engine file.
    ///
    /// # Errors
    /// [`Error::DatabaseLocked`] naming the holder when it is held;
    /// [`Error::NotARegularFile`]; I/O errors of opening or writing the file.
    pub fn acquire(at: &At<'_>, permissions: Permissions) -> Result<DirLock> {
        let path = at.path();
        let io = |op, e| Error::from_io(op, path, None, e);
        let file = at
            .open_raw(
                libc::O_RDWR | libc::O_CREAT | OPEN_FLAGS_ALWAYS,
                permissions.file_mode(),
            )
            .map_err(|e| open_error(at, e))?;
        let mut file = ensure_regular(file, path)?;
        let mut attempt = 0;
        loop {
            // SAFETY: plain syscall on a descriptor we own.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io(IoOp::Lock, err));
            }
            let mut holder = String::new();
            let _ = file.seek(std::io::SeekFrom::Start(0));
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            // A holder clears its line before it lets go. Held with no
            // holder named: a child process forked while the holder had the
            // file open keeps the lock until its exec closes the descriptor
            // (`O_CLOEXEC`), a moment later. Waited for briefly.
            if holder.is_empty() && attempt < LOCK_RELEASE_RETRIES {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
                continue;
            }
            return Err(Error::DatabaseLocked {
                path: path.to_path_buf(),
                holder: if holder.is_empty() {
                    "holder unknown".into()
                } else {
                    holder.to_string()
                },
            });
        }
        let me = format!(
            "{LOCK_HOLDER_PREFIX}{} ({}), since unix time {}",
            std::process::id(),
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "unknown program".into()),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        );
        file.set_len(0).map_err(|e| io(IoOp::Write, e))?;
        file.rewind().map_err(|e| io(IoOp::Write, e))?;
        file.write_all(me.as_bytes())
            .map_err(|e| io(IoOp::Write, e))?;
        Ok(DirLock {
            file,
            path: path.to_path_buf(),
        })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Leave no stale holder text behind; the lock itself ends with the fd.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_in_the_same_process_fails_and_names_the_holder() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("LOCK");
        let first = DirLock::acquire(&At::cwd(&path), Permissions::Private).expect("first");
        let err = DirLock::acquire(&At::cwd(&path), Permissions::Private).expect_err("second");
        match err {
            Error::DatabaseLocked { holder, .. } => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                )
            }
            other => panic!("{other}"),
        }
        drop(first);
        DirLock::acquire(&At::cwd(&path), Permissions::Private).expect("free again after drop");
    }
}
