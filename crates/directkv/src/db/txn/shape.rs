//! How readers descend the tree while a commit changes it, without a lock:
//! the tree's root and a sequence counting its structure changes.
//!
//! A commit changes pages one at a time under each page's exclusive latch,
//! and a reader reads them one at a time under a shared latch, so every page
//! a reader sees is whole. What a reader may see torn is the *structure*:
//! a child pointer read before a split or a free leads to a page whose keys
//! moved or that is no longer in the tree. Changes of values are not the
//! concern here (a commit stages every before-image in the version store
//! before it changes a leaf; see `super::versions`).
//!
//! A change of structure is one that splits a page (moving keys out of
//! it), frees a page (a leaf or branch unlinked, an overflow chain
//! replaced), changes a branch, or moves the root. The committer makes the
//! sequence odd before the first such page change of a key's apply and even
//! again when that key is applied (and around a rollback, which puts pages
//! back). A reader notes the sequence (even) and the root, runs its
//! descent, and keeps the result only if the sequence is unchanged after;
//! else it runs again. A page taken off the free list or past the file's
//! end is in no path a reader can hold but a stale one, whose free already
//! changed the sequence; an emptied leaf is freed before it is unlinked.
//!
//! Why a read that saw the sequence unchanged is right: any page the reader
//! latched after the committer changed it synchronizes with that change,
//! which the odd store preceded, so the reader's second look sees it; if
//! nothing it read was changed by a structure change, its path was the
//! tree's path all along.
//!
//! The commit section relies on the same sequence for the trails of its
//! own earlier descents (`btree::tree::Trail`): over any interval in which
//! the sequence stayed equal and even, no branch changed, no page was freed
//! or split and the root did not move, so every key is in the leaf it was
//! in and a path read then is the tree's path still.
//!
//! Invariants:
//! - The sequence is odd exactly while a commit is changing the structure;
//!   only the commit section (one committer at a time) moves it.
//! - The root is stored before the sequence goes even again.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::format::PageId;

/// The tree's root and its structure sequence, shared by readers and the
/// committer.
pub(crate) struct TreeShape {
    seq: AtomicU64,
    /// The root page's raw number.
    root: AtomicU64,
}

impl TreeShape {
    /// The shape of a tree rooted at `root`, not changing.
    pub(in crate::db) fn new(root: PageId) -> Self {
        TreeShape {
            seq: AtomicU64::new(0),
            root: AtomicU64::new(root.get()),
        }
    }

    /// The sequence and root to descend from, or `None` while a structure
    /// change is under way.
    pub(in crate::db) fn stable(&self) -> Option<(u64, PageId)> {
        let seq = self.seq.load(Ordering::Acquire);
        if seq % 2 == 1 {
            return None;
        }
        Some((seq, self.root()))
    }

    /// Whether no structure change began since `stable` returned `seq`.
    pub(in crate::db) fn unchanged(&self, seq: u64) -> bool {
        assert!(seq % 2 == 0, "a read starts from a still shape");
        // Orders the reader's page reads before the second look.
        std::sync::atomic::fence(Ordering::Acquire);
        self.seq.load(Ordering::Acquire) == seq
    }

    /// The committer begins a structure change (the sequence goes odd).
    pub(in crate::db) fn begin(&self) {
        let before = self.seq.fetch_add(1, Ordering::AcqRel);
        assert!(before % 2 == 0, "structure changes do not nest");
    }

    /// The committer ends a structure change (the sequence goes even).
    pub(in crate::db) fn end(&self) {
        let before = self.seq.fetch_add(1, Ordering::AcqRel);
        assert!(before % 2 == 1, "a structure change was begun");
    }

    /// The committer moves the root, inside a structure change.
    pub(in crate::db) fn set_root(&self, root: PageId) {
        assert!(
            self.seq.load(Ordering::Acquire) % 2 == 1,
            "the root moves inside a structure change"
        );
        self.root.store(root.get(), Ordering::Release);
    }

    /// The root now (for the committer, and for reads under the tree lock).
    pub(in crate::db) fn root(&self) -> PageId {
        PageId::new(self.root.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_across_a_structure_change_is_not_kept() {
        let shape = TreeShape::new(PageId::new(7));
        let (seq, root) = shape.stable().expect("still");
        assert_eq!(root, PageId::new(7));
        shape.begin();
        assert!(shape.stable().is_none(), "no read starts mid-change");
        shape.set_root(PageId::new(9));
        shape.end();
        assert!(!shape.unchanged(seq), "the change is seen");
        let (seq2, root2) = shape.stable().expect("still again");
        assert_eq!(root2, PageId::new(9));
        assert!(shape.unchanged(seq2));
    }
}
