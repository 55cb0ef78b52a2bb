//! Handles on pinned pages: shared (`PageRef`), exclusive (`PageMut`), and
//! held across a commit (`Held`). Dropping a handle unlatches and unpins.

use std::sync::atomic::Ordering;
use std::sync::{RwLockReadGuard, RwLockWriteGuard};

use super::pool::*;
use crate::format::page::{self};
use crate::format::FrameIndex;
use crate::io::{AlignedBuf, Storage};
use crate::lsn::Lsn;

/// A pinned, shared-latched page.
pub struct PageRef<'a, S: Storage, L: LogFlusher> {
    pub(super) pool: &'a BufferPool<S, L>,
    pub(super) frame: FrameIndex,
    pub(super) guard: RwLockReadGuard<'a, AlignedBuf>,
}

/// A pinned, exclusively latched page.
pub struct PageMut<'a, S: Storage, L: LogFlusher> {
    pub(super) pool: &'a BufferPool<S, L>,
    pub(super) frame: FrameIndex,
    pub(super) guard: RwLockWriteGuard<'a, AlignedBuf>,
}

impl<S: Storage, L: LogFlusher> PageRef<'_, S, L> {
    /// The page's bytes.
    pub fn data(&self) -> &[u8] {
        self.guard.as_slice()
    }
}

impl<S: Storage, L: LogFlusher> Drop for PageRef<'_, S, L> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

impl<S: Storage, L: LogFlusher> PageMut<'_, S, L> {
    /// The page's bytes.
    pub fn data(&self) -> &[u8] {
        self.guard.as_slice()
    }
    /// The page's bytes, to change. Call [`mark_dirty`](Self::mark_dirty) with
    /// the LSN of the log record describing the change.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.guard.as_mut_slice()
    }
    /// Keeps the page pinned and unwritable after this guard is dropped, until
    /// [`BufferPool::release_held`]: for changes whose log record (the commit)
    /// does not exist yet. Returns the handle to release it with.
    pub fn hold(&mut self) -> Held {
        let f = &self.pool.frames[self.frame.index()];
        assert!(!f.held.swap(true, Ordering::AcqRel), "a page is held once");
        f.pins.fetch_add(1, Ordering::AcqRel);
        Held { frame: self.frame }
    }

    /// Records that the page now holds a change logged ending at `lsn`: sets
    /// the page LSN and puts the page on the flush list if it was clean.
    pub fn mark_dirty(&mut self, lsn: Lsn) {
        let bytes = self.guard.as_mut_slice();
        assert!(lsn >= page::page_lsn(bytes), "page LSN goes backwards");
        bytes[24..32].copy_from_slice(&lsn.get().to_le_bytes());
        let f = &self.pool.frames[self.frame.index()];
        if !f.dirty.swap(true, Ordering::AcqRel) {
            f.rec_lsn.store(lsn.get(), Ordering::Release);
            lock(&self.pool.flush_list).insert((lsn, self.frame));
        }
    }
}

impl<S: Storage, L: LogFlusher> Drop for PageMut<'_, S, L> {
    fn drop(&mut self) {
        self.pool.unpin(self.frame);
    }
}

/// A page kept in the pool by [`PageMut::hold`].
#[derive(Debug)]
#[must_use = "a held page stays pinned until released"]
pub struct Held {
    pub(super) frame: FrameIndex,
}

pub(super) enum Latch {
    Shared,
    Exclusive,
}

pub(super) enum Fixed<'a> {
    Shared(RwLockReadGuard<'a, AlignedBuf>),
    Exclusive(RwLockWriteGuard<'a, AlignedBuf>),
}
