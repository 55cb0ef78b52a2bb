//! The state transactions share ([`TxnCore`]): the tree's root state and
//! the shape readers descend by, the writer ticket and the commit gate, the
//! row locks, the version store, and the buffers commits reuse.
//!
//! Invariants:
//! - A commit changes pages only while it holds `committer` and `tree`
//!   exclusively (in that order; see the lock order in [`super::super::engine`]).
//! - `shape` changes only in the commit section, so a reader that saw the
//!   same even shape sequence before and after its descent saw one tree.

use std::sync::Mutex;

use super::super::lock_rank::{Rank, RankedMutex, RankedRwLock};

use super::super::records::Meta;
use super::locks::LockTable;
use super::shape::TreeShape;
use super::tables::Registry;
use super::ticket::TicketLock;
use super::versions::VersionStore;

/// The transaction side of one open database (see the module docs).
pub(crate) struct TxnCore {
    /// The tree's root state. A commit holds it exclusively while it
    /// changes pages (the checkpoint, to start between commits); readers
    /// take it shared only when the shape kept changing under them. Rank
    /// `TREE` in the lock order.
    pub(crate) tree: RankedRwLock<Meta>,
    /// The root and structure sequence readers descend by, lock-free:
    /// atomics moved only by the commit section (under `committer` and
    /// `tree` held exclusively), read by readers without a lock (see
    /// [`super::shape`] for their orderings).
    pub(crate) shape: TreeShape,
    /// The one writer lock of `Options::serial_writers` (first come, first
    /// served). Rank `WRITER` in the lock order.
    pub(in crate::db) writer: TicketLock,
    /// The commit section's gate: one transaction validates and applies at
    /// a time. Not first come, first served: a thread that is running takes
    /// it when it is free instead of waiting for a sleeping next-in-line to
    /// be woken, which, with many committers on few cores, left it idle
    /// between holders for longer than it was held. Fairness among writers
    /// comes from the row locks, whose queues are first come, first served.
    /// Guards no data of its own: it serialises validation, apply and the
    /// commit record. Rank `COMMITTER`.
    pub(in crate::db) committer: RankedMutex<()>,
    /// Row locks of write transactions (the table locks its own shards).
    pub(in crate::db) locks: LockTable,
    /// Read transactions' snapshots and the before-images they need (the
    /// store locks its own state; see [`super::versions`]).
    pub(in crate::db) versions: VersionStore,
    /// Page-sized buffers commits reuse (its own mutex, a leaf: held for a
    /// push or a pop only).
    pub(in crate::db) spare_buffers: SpareBuffers,
    /// The named tables and the catalog (its own lock, a leaf).
    pub(in crate::db) tables: Registry,
}

impl TxnCore {
    /// The transaction side of a database whose tree is `meta`, with a
    /// version store of at most `version_cap` bytes.
    pub(in crate::db) fn new(meta: Meta, version_cap: usize, tables: Registry) -> Self {
        let core = TxnCore {
            tree: RankedRwLock::new(Rank::Tree, meta),
            shape: TreeShape::new(meta.root),
            writer: TicketLock::default(),
            committer: RankedMutex::new(Rank::Committer, ()),
            locks: LockTable::default(),
            versions: VersionStore::new(version_cap),
            spare_buffers: SpareBuffers::default(),
            tables,
        };
        assert_eq!(core.shape.root(), meta.root, "readers start at the root");
        core
    }
}

/// Buffers kept for reuse at most; a transaction larger than this allocates
/// the rest.
const SPARE_BUFFERS_MAX: usize = 64;

/// Page-sized buffers that commits borrow (before-images, the diff scratch,
/// encoded records) and give back. A commit runs while every other writer
/// waits, and allocating and freeing two or three page-sized blocks for every
/// page it changes was a fifth of that time.
#[derive(Default)]
pub(crate) struct SpareBuffers {
    bufs: Mutex<Vec<Vec<u8>>>,
}

impl SpareBuffers {
    /// An empty buffer, with a page's capacity when one is spare.
    pub(in crate::db) fn take(&self) -> Vec<u8> {
        // A push or a pop cannot leave the list half changed.
        crate::health::lock_even_poisoned(&self.bufs)
            .pop()
            .unwrap_or_default()
    }

    /// Keeps `buf` for a later commit.
    pub(in crate::db) fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut bufs = crate::health::lock_even_poisoned(&self.bufs);
        assert!(bufs.len() <= SPARE_BUFFERS_MAX, "the spare list is bounded");
        if bufs.len() < SPARE_BUFFERS_MAX {
            bufs.push(buf);
        }
    }
}
