//! Opening a [`DirectFile`](super::DirectFile): `openat(2)` with the flags
//! every open carries, the `O_DIRECT` probe and its fallback, and the checks
//! after it (see the parent module's invariants).

use super::*;

/// `openat(2)` as `opts` say, always with [`OPEN_FLAGS_ALWAYS`] (no symlink
/// followed) and `opts.permissions`' mode for a created file. The caller
/// checks the result with [`ensure_regular`].
fn os_open(at: &At<'_>, opts: &FileOptions, direct: bool) -> std::io::Result<File> {
    let mut flags = OPEN_FLAGS_ALWAYS | opts.sync.open_flags();
    if direct {
        flags |= libc::O_DIRECT;
    }
    let writable = !opts.read_only;
    assert!(
        !opts.exclusive || opts.create,
        "exclusive is a kind of create"
    );
    flags |= if writable {
        libc::O_RDWR
    } else {
        libc::O_RDONLY
    };
    if writable && (opts.create || opts.exclusive) {
        flags |= libc::O_CREAT;
    }
    if writable && opts.exclusive {
        flags |= libc::O_EXCL;
    } else if writable && opts.truncate {
        flags |= libc::O_TRUNC;
    }
    at.open_raw(flags, opts.permissions.file_mode())
}

/// [`os_open`], its error typed (a symlink or other non-file named as such)
/// and its result checked to be a regular file.
fn open_checked(at: &At<'_>, opts: &FileOptions, direct: bool) -> Result<File> {
    let file = os_open(at, opts, direct).map_err(|e| open_error(at, e))?;
    ensure_regular(file, at.path())
}

/// Opens with `O_DIRECT`, reporting whether this call created the file. For a
/// create, the file is first opened without `O_CREAT`; only on `ENOENT` is it
/// created with `O_EXCL`. That tells whether the call created the file without
/// a `stat` beforehand, which costs more than it seems: on ext4 a `stat`
/// between write and fsync slows an open-write-fsync-close loop by a third.
fn open_direct_noting_creation(at: &At<'_>, opts: &FileOptions) -> (std::io::Result<File>, bool) {
    if !opts.create || opts.read_only {
        return (os_open(at, opts, true), false);
    }
    if opts.exclusive {
        // O_EXCL fails on anything already there, so whatever the call left
        // behind (a file, or the half-made one of an EINVAL) is its own.
        let created = os_open(at, opts, true);
        let made = match &created {
            Ok(_) => true,
            Err(e) => e.raw_os_error() == Some(libc::EINVAL),
        };
        return (created, made);
    }
    let existing = FileOptions {
        create: false,
        ..opts.clone()
    };
    match os_open(at, &existing, true) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            let exclusive = FileOptions {
                exclusive: true,
                ..opts.clone()
            };
            let created = os_open(at, &exclusive, true);
            match created {
                // Another opener created it between the two calls: not ours.
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    (os_open(at, &existing, true), false)
                }
                // EINVAL from a filesystem that refuses O_DIRECT may come after
                // the file was created (ramfs does that).
                other => (other, true),
            }
        }
        other => (other, false),
    }
}

impl DirectFile {
    /// Opens `path` as `opts` says.
    ///
    /// # Errors
    /// - [`Error::DirectIoUnsupported`] for `DirectIo::On` where the filesystem
    ///   refuses `O_DIRECT` (a file this call created is removed again);
    /// - [`Error::NotARegularFile`] when `path` is a symbolic link (never
    ///   followed), a FIFO, a device, a socket or a directory;
    /// - [`Error::Io`], [`Error::ReadOnlyFilesystem`], [`Error::DiskFull`] when
    ///   `open(2)` fails (`EEXIST` for an `exclusive` create of an existing path).
    ///
    /// # Examples
    /// ```no_run
    /// use directkv::{internals::io::{DirectFile, FileOptions}, DirectIo, SyncMethod};
    /// let opts = FileOptions { create: true, direct_io: DirectIo::On,
    ///                          sync: SyncMethod::Fdatasync, ..FileOptions::default() };
    /// let file = DirectFile::open("data", &opts)?;
    /// println!("{:?} aligned to {:?}", file.io_path(), file.alignment());
    /// # Ok::<(), directkv::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>, opts: &FileOptions) -> Result<DirectFile> {
        Self::open_at(&At::cwd(path.as_ref()), opts)
    }

    /// [`open`](Self::open) of the file at `at` (an entry of a held
    /// directory, or a plain path).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_at(at: &At<'_>, opts: &FileOptions) -> Result<DirectFile> {
        let path = at.path();
        if opts.direct_io == DirectIo::Off {
            let file = open_checked(at, opts, false)?;
            return Ok(Self::buffered(file, path, opts, IoPath::Buffered));
        }
        let (attempt, created) = open_direct_noting_creation(at, opts);
        let attempt = match attempt {
            Ok(file) => Ok(ensure_regular(file, path)?),
            Err(e) => Err(e),
        };
        let refused = match attempt {
            Ok(file) if memory_backed_fs(&file).is_some() => true,
            Ok(file) => match align::detect(&file, &at.parent())
                .map_err(|e| Error::from_io(IoOp::Stat, path, None, e))?
            {
                (Some(alignment), atomic_write) => {
                    align::assert_sane(&alignment);
                    assert_ne!(alignment.source, AlignmentSource::Buffered);
                    return Ok(DirectFile {
                        file,
                        path: path.to_path_buf(),
                        io_path: IoPath::Direct,
                        sync: opts.sync,
                        alignment,
                        atomic_write,
                        failure: OnceLock::new(),
                        aio: OnceLock::new(),
                    });
                }
                // statx says this file cannot do direct I/O.
                (None, _) => true,
            },
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => true,
            Err(e) => return Err(open_error(at, e)),
        };
        assert!(refused);
        Self::open_refused(at, opts, created)
    }

    /// The rest of [`open`](Self::open) once the filesystem refused
    /// `O_DIRECT` for `path` (`created`: by that attempt): the error for
    /// `DirectIo::On`, else the buffered fallback.
    fn open_refused(at: &At<'_>, opts: &FileOptions, created: bool) -> Result<DirectFile> {
        assert_ne!(
            opts.direct_io,
            DirectIo::Off,
            "only direct opens are refused"
        );
        let path = at.path();
        if let Some(kind) = not_regular(at) {
            // Not the filesystem refusing O_DIRECT: not a file at all.
            return Err(Error::NotARegularFile {
                path: path.to_path_buf(),
                kind: kind.name().to_string(),
            });
        }
        // The file may have been created by the refused open (ramfs creates it
        // before failing with EINVAL), so the directory still names its type.
        let fs_type = at
            .parent()
            .fs_info()
            .map(|i| i.fs_type)
            .unwrap_or_else(|_| "unknown".to_string());
        if opts.direct_io == DirectIo::On {
            if created {
                // Leave the directory as it was before the call (invariant 10).
                let _ = at.unlink();
            }
            return Err(Error::DirectIoUnsupported {
                path: path.to_path_buf(),
                fs_type,
            });
        }
        // A file the refused open created is there now: open it, not a new one.
        let fallback = FileOptions {
            create: opts.create && !created,
            exclusive: opts.exclusive && !created,
            ..opts.clone()
        };
        let file = open_checked(at, &fallback, false)?;
        Ok(Self::buffered(
            file,
            path,
            opts,
            IoPath::BufferedFallback { fs_type },
        ))
    }

    fn buffered(file: File, path: &Path, opts: &FileOptions, io_path: IoPath) -> DirectFile {
        assert_ne!(
            io_path,
            IoPath::Direct,
            "a buffered file does not travel direct"
        );
        let file = DirectFile {
            file,
            path: path.to_path_buf(),
            io_path,
            sync: opts.sync,
            // Buffered I/O needs no alignment, but the kernel writes back whole
            // pages: a write unit below the page size would make it rewrite bytes
            // already synced (and read a page before a partial write of it).
            alignment: Alignment {
                memory_bytes: page_bytes(),
                offset_bytes: page_bytes(),
                read_offset_bytes: SECTOR_BYTES,
                source: AlignmentSource::Buffered,
            },
            atomic_write: None,
            failure: OnceLock::new(),
            aio: OnceLock::new(),
        };
        assert!(file.alignment.read_offset_bytes <= file.alignment.offset_bytes);
        file
    }
}
