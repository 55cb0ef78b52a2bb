//! The log as the buffer pool sees it ([`EngineLog`]), and the pool over
//! it ([`Pool`]).
//!
//! The log has two phases, in this order:
//! - `Replaying` (open's redo): the WAL object does not exist yet, and every
//!   record replay has read is durable, so the WAL rule holds for any page
//!   stamped with an LSN up to what was read ([`EngineLog::replayed_to`]).
//! - `Open`: the WAL accepts appends; durability is the WAL's.
//!
//! [`EngineLog::open`] is the one transition, asserted to happen once and
//! to start the WAL at or past everything replay read.
//!
//! Invariants:
//! - The replayed LSN only grows, and no page write during replay asks for
//!   durability past it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::buffer::{BufferPool, LogFlusher};
use crate::error::Result;
use crate::io::Storage;
use crate::lsn::Lsn;
use crate::wal::Wal;

/// The buffer pool of a database, over its data file and its log.
pub(crate) type Pool<S> = BufferPool<S, EngineLog<S>>;

/// The log as the buffer pool sees it (see the module docs for its phases).
pub(crate) struct EngineLog<S: Storage> {
    /// `Replaying`: the end of the records replay has read.
    replayed: AtomicU64,
    /// `Open` once set.
    wal: OnceLock<Wal<S>>,
}

impl<S: Storage> EngineLog<S> {
    /// A log in its replay phase, starting at the redo point.
    pub(crate) fn replaying(redo: Lsn) -> Self {
        EngineLog {
            replayed: AtomicU64::new(redo.get()),
            wal: OnceLock::new(),
        }
    }

    /// Replay has read (and so found durable) the log up to `end`.
    pub(crate) fn replayed_to(&self, end: Lsn) {
        assert!(
            self.wal.get().is_none(),
            "replay reads before the WAL opens"
        );
        let before = self.replayed.fetch_max(end.get(), Ordering::AcqRel);
        assert!(before <= end.get(), "replay reads the log in order");
    }

    /// The transition to `Open`: the WAL, opened at the end of what replay
    /// read, takes over.
    pub(crate) fn open(&self, wal: Wal<S>) {
        let replayed = self.replayed.load(Ordering::Acquire);
        assert!(
            wal.end_lsn().get() >= replayed,
            "the WAL opens at or past the replayed log"
        );
        let set = self.wal.set(wal);
        assert!(set.is_ok(), "the log opens once");
    }

    /// The open WAL. Panics in the replay phase: only a bug asks for it there.
    pub(crate) fn wal(&self) -> &Wal<S> {
        match self.wal.get() {
            Some(w) => w,
            None => panic!("the WAL is used before open finished replay"),
        }
    }

    /// The open WAL, or `None` during replay.
    pub(crate) fn wal_if_open(&self) -> Option<&Wal<S>> {
        self.wal.get()
    }

    /// The end of the log: what replay read, or the WAL's end once open.
    pub(crate) fn durable_or_end(&self) -> Lsn {
        match self.wal.get() {
            Some(w) => w.end_lsn(),
            None => Lsn::new(self.replayed.load(Ordering::Acquire)),
        }
    }

    /// Waits until the WAL is durable up to `lsn`.
    pub(crate) fn flush_to_wal(&self, lsn: Lsn) -> Result<()> {
        self.wal().flush(lsn)
    }
}

impl<S: Storage> LogFlusher for EngineLog<S> {
    fn durable_lsn(&self) -> Lsn {
        match self.wal.get() {
            Some(w) => w.durable_lsn(),
            None => Lsn::new(self.replayed.load(Ordering::Acquire)),
        }
    }

    fn replaying(&self) -> bool {
        self.wal.get().is_none()
    }

    fn flush_to(&self, lsn: Lsn) -> Result<()> {
        match self.wal.get() {
            Some(w) => w.flush(lsn),
            None => {
                // Everything replay read is durable; nothing past it exists.
                let replayed = self.replayed.load(Ordering::Acquire);
                assert!(
                    lsn.get() <= replayed,
                    "a page is newer than the replayed log"
                );
                Ok(())
            }
        }
    }
}
