//! The engine's health latch, the one way its locks are taken, and the one
//! way a thread sleeps on a futex word ([`sleep_on`], [`wake_on`]).
//!
//! A database is `Running` or `Failed`; the only transition is
//! `Running → Failed`, made by [`Health::fail`], and it is never undone on
//! the same handle (close and reopen, which runs recovery, is the way out).
//! It fails when:
//! - a background thread (checkpointer, cleaner, readahead reader) panics;
//! - a lock is found poisoned: a thread panicked while holding it, so the
//!   state it guards may be half changed;
//! - a write, sync or allocation of the data file or the log fails (after a
//!   failed sync the kernel may have dropped the dirty data, so nothing
//!   written since can be trusted; a failed log write makes the outcome of
//!   the commits it carried unknown, [`Error::CommitOutcomeUnknown`]). A
//!   full disk ([`Error::DiskFull`]) is such a failure too. Read errors are
//!   not: a read may be retried.
//!
//! Invariants:
//! - The first cause is kept; later failures never replace it.
//! - Once `Failed`, [`Health::check`] never returns `Ok` again, so every
//!   later operation returns [`Error::Poisoned`] naming the first cause
//!   (LevelDB's `bg_error_`, SQLite's pager error state, redb's
//!   `PreviousIo`).
//! - A panic inside any database call fails the database before it unwinds
//!   to the caller ([`PanicGuard`]), and so does one in a background round;
//!   so no operation after it reaches state the panic left half changed.
//! - The database's own locks turn poisoning into an error ([`lock`],
//!   [`read`], [`write`]). The layers below (pool, WAL, scheduler, I/O) take
//!   theirs with [`lock_even_poisoned`], the one helper for that: a poisoned
//!   lock of theirs means a panic in a call or round that has failed the
//!   database already, so only teardown and diagnostics still come by.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crate::error::{Error, IoOp, Result};

/// The cause a poisoned lock reports.
const LOCK_POISONED: &str = "a thread panicked while holding a lock of the engine";

/// The path a poisoned lock names before a database claims the error.
const ENGINE_STATE: &str = "(engine state)";

/// The health latch of one open database.
pub(crate) struct Health {
    /// The database directory, named by every error.
    path: PathBuf,
    /// Set once, by [`Health::fail`]; read on every operation.
    failed: AtomicBool,
    /// The first cause; `Some` exactly when `failed` is set.
    cause: Mutex<Option<String>>,
}

impl Health {
    /// A running database at `path`.
    pub(crate) fn new(path: &Path) -> Self {
        Health {
            path: path.to_path_buf(),
            failed: AtomicBool::new(false),
            cause: Mutex::new(None),
        }
    }

    /// `Ok` while running; the latched error after a failure.
    pub(crate) fn check(&self) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.error());
        }
        Ok(())
    }

    /// Whether the database failed.
    pub(crate) fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Latches the failure (the first cause wins) and returns the error every
    /// later operation gets.
    pub(crate) fn fail(&self, cause: &str) -> Error {
        {
            let mut first = lock_even_poisoned(&self.cause);
            if first.is_none() {
                *first = Some(cause.to_string());
            }
            assert!(first.is_some(), "a failed database keeps its cause");
            self.failed.store(true, Ordering::Release);
        }
        let err = self.error();
        assert!(self.is_failed(), "the latch is one-way");
        err
    }

    /// Passes `result` through, latching the failure first when it is one
    /// that stops the database: a poisoned lock or file, or a log failure
    /// whose outcome is unknown. The caller gets its own error back (a
    /// committer learns its outcome is unknown); later calls get `Poisoned`.
    pub(crate) fn observe<T>(&self, result: Result<T>) -> Result<T> {
        match result {
            Err(Error::Poisoned { path, cause }) => {
                let cause = if path.as_os_str() == ENGINE_STATE {
                    cause
                } else {
                    format!("{}: {cause}", path.display())
                };
                Err(self.fail(&cause))
            }
            Err(e) if stops_the_engine(&e) => {
                self.fail(&e.to_string());
                Err(e)
            }
            other => other,
        }
    }

    /// The error of a failed database.
    fn error(&self) -> Error {
        assert!(self.is_failed(), "only a failed database has its error");
        let cause = lock_even_poisoned(&self.cause)
            .clone()
            .unwrap_or_else(|| "unknown failure".to_string());
        Error::Poisoned {
            path: self.path.clone(),
            cause,
        }
    }
}

/// Whether `e` reports a failed write, sync or allocation (see the module
/// docs), after which the engine must stop.
fn stops_the_engine(e: &Error) -> bool {
    match e {
        Error::CommitOutcomeUnknown { .. }
        | Error::DiskFull { .. }
        | Error::ReadOnlyFilesystem { .. } => true,
        Error::Io { op, .. } => matches!(op, IoOp::Write | IoOp::Sync | IoOp::Allocate),
        _ => false,
    }
}

/// Fails the database when dropped during a panic: held for the length of a
/// database call, it turns a bug anywhere below into a stopped database
/// (the panic still reaches the caller), never a half-changed one that runs
/// on.
pub(crate) struct PanicGuard<'a>(pub(crate) &'a Health);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fail("a thread panicked inside a database call");
        }
    }
}

/// The error of a poisoned lock, before a database claims it.
pub(crate) fn lock_poisoned() -> Error {
    Error::Poisoned {
        path: PathBuf::from(ENGINE_STATE),
        cause: LOCK_POISONED.to_string(),
    }
}

/// Locks `m`; a poisoned lock is an error (see the module docs).
pub(crate) fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock().map_err(|_| lock_poisoned())
}

/// Takes `rw` shared; a poisoned lock is an error.
pub(crate) fn read<T>(rw: &RwLock<T>) -> Result<RwLockReadGuard<'_, T>> {
    rw.read().map_err(|_| lock_poisoned())
}

/// Takes `rw` exclusively; a poisoned lock is an error.
pub(crate) fn write<T>(rw: &RwLock<T>) -> Result<RwLockWriteGuard<'_, T>> {
    rw.write().map_err(|_| lock_poisoned())
}

pub(crate) use crate::error::lock_even_poisoned;

/// Takes `rw` shared even when poisoned, for reading diagnostics (as
/// [`lock_even_poisoned`]).
pub(crate) fn read_even_poisoned<T>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(|p| p.into_inner())
}

/// "Every sleeper" for [`wake_on`]: the kernel reads the count as a signed
/// int, so `u32::MAX` (-1) would wake only one.
pub(crate) const WAKE_ALL: u32 = i32::MAX as u32;

/// Sleeps on `word` while it holds `seen`, at most `limit` (none: until
/// woken). Returns on a wake-up, at once if the word no longer holds
/// `seen`, on a signal or when the time is up: the caller looks again in
/// every case.
///
/// # Panics
/// On any other error of `futex(2)`, which a valid word cannot cause:
/// going on would turn every wait into a spin.
pub(crate) fn sleep_on(word: &std::sync::atomic::AtomicU32, seen: u32, limit: Option<Duration>) {
    use rustix::{io::Errno, thread::futex};
    let limit = limit.map(|d| futex::Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    });
    match futex::wait(word, futex::Flags::PRIVATE, seen, limit.as_ref()) {
        Ok(()) | Err(Errno::AGAIN | Errno::INTR | Errno::TIMEDOUT) => {}
        Err(e) => panic!("futex wait failed: {e}"),
    }
}

/// Wakes at most `n` sleepers of `word` ([`WAKE_ALL`] for all).
///
/// # Panics
/// On an error of `futex(2)`, which a valid word cannot cause.
pub(crate) fn wake_on(word: &std::sync::atomic::AtomicU32, n: u32) {
    assert!(
        (1..=WAKE_ALL).contains(&n),
        "a wake-up count the kernel reads as positive"
    );
    if let Err(e) = rustix::thread::futex::wake(word, rustix::thread::futex::Flags::PRIVATE, n) {
        panic!("futex wake failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cause_wins_and_the_latch_never_reopens() {
        let h = Health::new(Path::new("/db"));
        assert!(h.check().is_ok());
        h.fail("first");
        h.fail("second");
        match h.check() {
            Err(Error::Poisoned { path, cause }) => {
                assert_eq!(path, Path::new("/db"));
                assert_eq!(cause, "first");
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
        assert!(h.observe(Ok(1)).is_ok(), "a success passes through");
        assert!(h.check().is_err());
    }

    #[test]
    fn a_poisoned_lock_is_an_error_that_latches() {
        let m = std::sync::Arc::new(Mutex::new(0));
        let m2 = std::sync::Arc::clone(&m);
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison the lock");
        })
        .join();
        let h = Health::new(Path::new("/db"));
        let err = h
            .observe(lock(&m).map(|_| ()))
            .expect_err("a poisoned lock is an error");
        assert!(matches!(&err, Error::Poisoned { path, .. } if path == Path::new("/db")));
        assert!(h.is_failed());
        assert_eq!(*lock_even_poisoned(&m), 0);
    }

    fn io(op: IoOp) -> Error {
        Error::from_io(
            op,
            Path::new("/db/data"),
            Some(0),
            std::io::Error::from_raw_os_error(5),
        )
    }

    #[test]
    fn a_panic_inside_a_guarded_call_fails_the_database() {
        let h = std::sync::Arc::new(Health::new(Path::new("/db")));
        let h2 = std::sync::Arc::clone(&h);
        let joined = std::thread::spawn(move || {
            let _guard = PanicGuard(&h2);
            panic!("a bug below the database");
        })
        .join();
        assert!(joined.is_err(), "the panic reaches the caller");
        assert!(h.is_failed());
        let calm = Health::new(Path::new("/db2"));
        drop(PanicGuard(&calm));
        assert!(!calm.is_failed(), "a call that returns leaves it running");
    }

    #[test]
    fn ordinary_errors_and_read_errors_do_not_latch() {
        let h = Health::new(Path::new("/db"));
        let r: Result<()> = Err(Error::InvalidArgument("bad key".into()));
        assert!(h.observe(r).is_err());
        assert!(h.observe::<()>(Err(io(IoOp::Read))).is_err());
        assert!(!h.is_failed());
    }

    #[test]
    fn a_failed_write_or_sync_latches_and_its_caller_gets_the_error_itself() {
        for op in [IoOp::Write, IoOp::Sync, IoOp::Allocate] {
            let h = Health::new(Path::new("/db"));
            let err = h.observe::<()>(Err(io(op))).expect_err("passed through");
            assert!(
                matches!(err, Error::Io { .. }),
                "the caller sees the failure itself"
            );
            match h.check() {
                Err(Error::Poisoned { cause, .. }) => {
                    assert!(cause.contains("/db/data"), "{cause}")
                }
                other => panic!("expected Poisoned, got {other:?}"),
            }
        }
    }
}
