//! [`FaultyStorage`]: a wrapper around any [`Storage`] that fails the Nth
//! call of a chosen operation (a write, sync, read, allocation or directory
//! sync), once or from then on, with `EIO` or a chosen errno, or panics
//! there: the fault countdowns of STYLE.md 26.
//!
//! Invariants:
//! - a fault injected into a write or sync latches the file as the real
//!   backend does: later writes and syncs answer [`Error::Poisoned`];
//! - a countdown fires at most once per call, and `heal` disarms them all.

use std::path::Path;

use super::aio::{Aio, BatchOp, Outcomes};
use super::buf::{IoMut, IoRef};
use super::dir::At;
use super::file::{FileOptions, Fill, IoPath};
use super::perms::{FileMeta, Permissions};
use super::storage::{Storage, StorageFile};
use super::Alignment;
use crate::error::{Error, IoOp, Result};

/// Which operation a [`FaultyStorage`] fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    /// Writes of file data.
    Write,
    /// `sync`/`sync_all` of files.
    Sync,
    /// Reads of file data.
    Read,
    /// Changes of a file's space (`fallocate`, zero fill, `ftruncate`).
    Allocate,
    /// Syncs of directories (their entries).
    SyncDir,
}

/// How many kinds of [`FaultOp`] there are.
const FAULT_OPS: usize = 5;
const _: () = assert!(FaultOp::SyncDir as usize + 1 == FAULT_OPS);

#[derive(Debug, Default)]
struct Countdowns {
    /// Per op: how many more calls succeed before they start failing; `None` = never.
    remaining: [Option<u64>; FAULT_OPS],
    /// Per op: fail only once (transient) instead of from then on (persistent).
    transient: [bool; FAULT_OPS],
    /// Per op: calls seen so far.
    calls: [u64; FAULT_OPS],
    /// Per op: faults injected so far.
    injected: [u64; FAULT_OPS],
    /// Per op: the errno injected (EIO unless set).
    errno: [Option<i32>; FAULT_OPS],
    /// Per op: the fault is a panic of the calling thread, not an error
    /// (a bug in the engine's I/O path, for tests of how it stops).
    panic: [bool; FAULT_OPS],
}

impl Countdowns {
    /// Counts a call of `op`; whether it is to fail.
    fn inject(&mut self, op: FaultOp) -> bool {
        let i = op as usize;
        self.calls[i] += 1;
        let fire = match self.remaining[i] {
            Some(0) => {
                if self.transient[i] {
                    self.remaining[i] = None;
                }
                true
            }
            Some(n) => {
                self.remaining[i] = Some(n - 1);
                false
            }
            None => false,
        };
        if fire {
            self.injected[i] += 1;
        }
        assert!(
            self.injected[i] <= self.calls[i],
            "more faults injected than calls"
        );
        assert!(!fire || self.remaining[i].is_none_or(|n| n == 0));
        fire
    }
}

/// A [`Storage`] wrapper that fails the Nth write, sync, read, allocation or
/// directory sync with `EIO`
/// (transiently or from then on): the countdown faults of RELIABILITY.md §2.
///
/// Failures go through the wrapped file's own failure path where there is one, so
/// a failed write or sync poisons the file exactly as a real one does.
#[derive(Debug, Clone)]
pub struct FaultyStorage<S: Storage> {
    inner: S,
    faults: std::sync::Arc<std::sync::Mutex<Countdowns>>,
}

/// A file of a [`FaultyStorage`].
#[derive(Debug)]
pub struct FaultyFile<F: StorageFile> {
    inner: F,
    faults: std::sync::Arc<std::sync::Mutex<Countdowns>>,
    failure: std::sync::OnceLock<String>,
}

impl<S: Storage> FaultyStorage<S> {
    /// Wraps `inner` with no faults armed.
    pub fn new(inner: S) -> Self {
        FaultyStorage {
            inner,
            faults: Default::default(),
        }
    }

    /// After `ok_calls` more successful calls of `op`, fail: once if
    /// `transient`, else every call from then on.
    pub fn fail_after(&self, op: FaultOp, ok_calls: u64, transient: bool) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.remaining[op as usize] = Some(ok_calls);
        f.transient[op as usize] = transient;
    }

    /// As [`fail_after`](Self::fail_after), failing with `errno` (say `ENOSPC`).
    pub fn fail_after_with(&self, op: FaultOp, ok_calls: u64, transient: bool, errno: i32) {
        assert!(errno > 0, "an injected errno is a real one");
        self.fail_after(op, ok_calls, transient);
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).errno[op as usize] = Some(errno);
    }

    /// As [`fail_after`](Self::fail_after), once, the call panicking
    /// instead of failing.
    pub fn panic_after(&self, op: FaultOp, ok_calls: u64) {
        self.fail_after(op, ok_calls, true);
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).panic[op as usize] = true;
    }

    /// Disarms every fault.
    pub fn heal(&self) {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        f.remaining = [None; FAULT_OPS];
        f.panic = [false; FAULT_OPS];
    }

    /// Calls of `op` seen so far.
    pub fn calls(&self, op: FaultOp) -> u64 {
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).calls[op as usize]
    }

    /// Faults of `op` injected so far.
    pub fn injected(&self, op: FaultOp) -> u64 {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .injected[op as usize]
    }
}

impl<F: StorageFile> FaultyFile<F> {
    fn inject(&self, op: FaultOp) -> bool {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let fire = f.inject(op);
        if fire && std::mem::take(&mut f.panic[op as usize]) {
            drop(f);
            panic!("injected panic in a {op:?} call");
        }
        fire
    }

    fn check_healthy(&self) -> Result<()> {
        match self.failure.get() {
            Some(cause) => Err(Error::Poisoned {
                path: self.inner.path().to_path_buf(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn injected_error(&self, op: IoOp, offset: Option<u64>, poison: bool) -> Error {
        let which = match op {
            IoOp::Read => FaultOp::Read,
            IoOp::Sync => FaultOp::Sync,
            IoOp::Allocate => FaultOp::Allocate,
            _ => FaultOp::Write,
        };
        let errno = self.faults.lock().unwrap_or_else(|p| p.into_inner()).errno[which as usize];
        let err = Error::from_io(
            op,
            self.inner.path(),
            offset,
            std::io::Error::from_raw_os_error(errno.unwrap_or(libc::EIO)),
        );
        if poison {
            let _ = self.failure.set(err.to_string());
            assert!(
                self.failure.get().is_some(),
                "an injected write or sync failure latches"
            );
        }
        err
    }
}

impl<F: StorageFile> StorageFile for FaultyFile<F> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn alignment(&self) -> Alignment {
        self.inner.alignment()
    }
    fn io_path(&self) -> IoPath {
        self.inner.io_path()
    }
    fn read_at(&self, buf: IoMut<'_>, offset: u64) -> Result<usize> {
        if self.inject(FaultOp::Read) {
            return Err(self.injected_error(IoOp::Read, Some(offset), false));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_all_at(&self, data: IoRef<'_>, offset: u64) -> Result<()> {
        self.check_healthy()?;
        if self.inject(FaultOp::Write) {
            return Err(self.injected_error(IoOp::Write, Some(offset), true));
        }
        self.inner.write_all_at(data, offset)
    }
    fn sync(&self) -> Result<()> {
        self.check_healthy()?;
        if self.inject(FaultOp::Sync) {
            return Err(self.injected_error(IoOp::Sync, None, true));
        }
        self.inner.sync()
    }
    fn sync_all(&self) -> Result<()> {
        self.check_healthy()?;
        if self.inject(FaultOp::Sync) {
            return Err(self.injected_error(IoOp::Sync, None, true));
        }
        self.inner.sync_all()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn allocate(&self, len: u64, fill: Fill) -> Result<()> {
        self.check_healthy()?;
        if self.inject(FaultOp::Allocate) {
            return Err(self.injected_error(IoOp::Allocate, Some(len), true));
        }
        self.inner.allocate(len, fill)
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.check_healthy()?;
        if self.inject(FaultOp::Allocate) {
            // A failed cut changes nothing: the file is not poisoned, as
            // the real file's is not.
            return Err(self.injected_error(IoOp::Allocate, Some(len), false));
        }
        self.inner.set_len(len)
    }
    fn attach_aio(&self, aio: &std::sync::Arc<Aio>) -> Result<()> {
        self.inner.attach_aio(aio)
    }
    fn run_batch(&self, ops: Vec<BatchOp<'_>>) -> Vec<Result<()>> {
        // Each request counts as one call of its kind and may be the one that
        // fails; the others go to the inner file's batch together.
        let mut outcomes = Outcomes::new(ops.len());
        let mut passed = Vec::with_capacity(ops.len());
        let mut which = Vec::with_capacity(ops.len());
        for (i, op) in ops.into_iter().enumerate() {
            let failed = if op.is_write() {
                match self.check_healthy() {
                    Err(e) => Some(e),
                    Ok(()) if self.inject(FaultOp::Write) => {
                        Some(self.injected_error(IoOp::Write, Some(op.offset()), true))
                    }
                    Ok(()) => None,
                }
            } else if self.inject(FaultOp::Read) {
                Some(self.injected_error(IoOp::Read, Some(op.offset()), false))
            } else {
                None
            };
            match failed {
                Some(e) => outcomes.set(i, Err(e)),
                None => {
                    passed.push(op);
                    which.push(i);
                }
            }
        }
        let passed_count = passed.len();
        assert_eq!(passed_count, which.len());
        let ran = self.inner.run_batch(passed);
        assert_eq!(ran.len(), passed_count, "one outcome per request");
        for (i, r) in which.into_iter().zip(ran) {
            outcomes.set(i, r);
        }
        outcomes.all()
    }
}

impl<S: Storage> Storage for FaultyStorage<S> {
    type File = FaultyFile<S::File>;
    type Lock = S::Lock;

    fn lock_exclusive(&self, path: &Path, permissions: Permissions) -> Result<Self::Lock> {
        self.inner.lock_exclusive(path, permissions)
    }

    fn open(&self, path: &Path, opts: &FileOptions) -> Result<Self::File> {
        Ok(FaultyFile {
            inner: self.inner.open(path, opts)?,
            faults: std::sync::Arc::clone(&self.faults),
            failure: std::sync::OnceLock::new(),
        })
    }
    fn create_dirs(&self, path: &Path, permissions: Permissions) -> Result<()> {
        self.inner.create_dirs(path, permissions)
    }
    fn stat(&self, path: &Path) -> Result<FileMeta> {
        self.inner.stat(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }
    fn rename_new(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename_new(from, to)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        let fire = {
            let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
            let fire = f.inject(FaultOp::SyncDir);
            if fire && std::mem::take(&mut f.panic[FaultOp::SyncDir as usize]) {
                drop(f);
                panic!("injected panic in a SyncDir call");
            }
            let errno = f.errno[FaultOp::SyncDir as usize];
            fire.then(|| errno.unwrap_or(libc::EIO))
        };
        if let Some(errno) = fire {
            return Err(Error::from_io(
                IoOp::Sync,
                path,
                None,
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        self.inner.sync_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn os_at(&self, path: &Path) -> At<'_> {
        self.inner.os_at(path)
    }

    fn anchor(&self, dir: &Path) -> Result<Self> {
        Ok(FaultyStorage {
            inner: self.inner.anchor(dir)?,
            faults: std::sync::Arc::clone(&self.faults),
        })
    }
    fn supports_aio(&self) -> bool {
        self.inner.supports_aio()
    }
}
