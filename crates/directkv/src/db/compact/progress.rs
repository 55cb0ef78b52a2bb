//! How far a compaction got, kept between the calls of `compact` that run
//! it (see the parent module).

use super::super::txn::tables;

/// Where a walk is: a tree and the key its next leaf holds.
#[derive(Debug, Clone)]
pub(super) struct Cursor {
    /// The tree's id.
    pub(super) tree: u32,
    /// The key (empty: the tree's start).
    pub(super) key: Vec<u8>,
}

/// How far the compaction of one epoch got, kept between the calls that
/// run it (lost with the process: the scan and the pass then start over).
#[derive(Debug, Clone)]
pub(crate) struct Progress {
    /// The compaction's epoch.
    pub(super) epoch: u64,
    /// Pages below this were scanned.
    pub(super) scanned: u64,
    pub(super) cursor: Cursor,
    /// Passes ended.
    pub(super) passes: u64,
    /// The page count when the pass (or the raise of the boundary) began.
    pub(super) pass_start: u64,
    /// A pass is under way.
    pub(super) pass_open: bool,
}

impl Progress {
    pub(super) fn new(epoch: u64) -> Progress {
        Progress {
            epoch,
            scanned: 1,
            cursor: Cursor {
                tree: tables::DEFAULT,
                key: Vec::new(),
            },
            passes: 0,
            pass_start: 0,
            pass_open: false,
        }
    }
}
