//! The page table: which frame holds each page, in shards.
//!
//! Every page hit looks its page up and pins the frame under the lock of
//! the page's shard, so hits of pages in different shards (nearly all of
//! them: pages are numbered densely and a shard is the page number modulo
//! [`SHARDS`]) take different locks, and a hot page's lock is not every
//! page's lock. PostgreSQL splits its buffer mapping table the same way.
//!
//! Invariants:
//! - An entry of page `p` lives in shard `p % SHARDS` and is read or
//!   changed only under that shard's lock.
//! - A frame is pinned through the table only under the lock of the shard
//!   of the page it is looked up by. So a change of a frame's page (an
//!   eviction) made under the old page's shard lock, after checking that
//!   only its claimer pins the frame, cannot race a hit of the old page.
//! - Two shards are locked in ascending shard order, and never more than
//!   two; while they are held the replacer's lock may be taken, then the
//!   claimed frame's latch, never the other way round: no lock-order
//!   cycle.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::pool::lock;
use crate::format::{FrameIndex, PageId};

/// How many shards the table has.
pub(crate) const SHARDS: usize = 64;

type Shard = HashMap<PageId, FrameIndex>;

/// The page table of a pool of `frames` frames.
pub(crate) struct PageTable {
    shards: Box<[Mutex<Shard>]>,
    frames: usize,
}

/// The shard that holds `page`'s entry.
fn shard_of(page: PageId) -> usize {
    (page.get() % SHARDS as u64) as usize
}

impl PageTable {
    /// An empty table for a pool of `frames` frames.
    pub fn new(frames: usize) -> Self {
        let per_shard = frames.div_ceil(SHARDS);
        PageTable {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_capacity(per_shard)))
                .collect(),
            frames,
        }
    }

    /// The shard of `page`, locked.
    pub fn shard(&self, page: PageId) -> MutexGuard<'_, Shard> {
        lock(&self.shards[shard_of(page)])
    }

    /// Whether `page` has a frame (or is being read into one).
    pub fn contains(&self, page: PageId) -> bool {
        self.shard(page).contains_key(&page)
    }

    /// Takes `page`'s entry out; returns its frame.
    pub fn remove(&self, page: PageId) -> Option<FrameIndex> {
        self.shard(page).remove(&page)
    }

    /// The shards of `a` and `b` locked together (one lock when they share
    /// a shard), in shard order.
    pub fn pair(&self, a: PageId, b: PageId) -> Pair<'_> {
        let (x, y) = (shard_of(a), shard_of(b));
        let (lo, hi) = (x.min(y), x.max(y));
        let first = (lo, lock(&self.shards[lo]));
        let second = (hi != lo).then(|| (hi, lock(&self.shards[hi])));
        Pair {
            first,
            second,
            frames: self.frames,
        }
    }

    /// Entries in the table. Locks every shard in turn: for tests, not
    /// for a moment that must be consistent.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

/// Two pages' shards, locked: see [`PageTable::pair`].
pub(crate) struct Pair<'a> {
    first: (usize, MutexGuard<'a, Shard>),
    second: Option<(usize, MutexGuard<'a, Shard>)>,
    frames: usize,
}

impl Pair<'_> {
    /// The locked shard of `page`.
    ///
    /// # Panics
    /// When `page`'s shard is not one of the two locked (a bug).
    fn of(&mut self, page: PageId) -> &mut Shard {
        let s = shard_of(page);
        if self.first.0 == s {
            return &mut self.first.1;
        }
        match &mut self.second {
            Some((i, g)) if *i == s => g,
            _ => panic!("page {page}'s shard is not locked"),
        }
    }

    /// The frame of `page`.
    pub fn get(&mut self, page: PageId) -> Option<FrameIndex> {
        self.of(page).get(&page).copied()
    }

    /// Whether `page` has a frame.
    pub fn contains(&mut self, page: PageId) -> bool {
        self.of(page).contains_key(&page)
    }

    /// Takes `page`'s entry out; returns its frame.
    pub fn remove(&mut self, page: PageId) -> Option<FrameIndex> {
        self.of(page).remove(&page)
    }

    /// Maps `page` to `f`; returns the frame it was mapped to before.
    pub fn insert(&mut self, page: PageId, f: FrameIndex) -> Option<FrameIndex> {
        let frames = self.frames;
        let shard = self.of(page);
        let before = shard.insert(page, f);
        assert!(shard.len() <= frames, "the table maps frames");
        before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_found_in_their_shard_and_pairs_lock_once_or_twice() {
        let t = PageTable::new(1000);
        let (a, b, c) = (
            PageId::new(3),
            PageId::new(3 + SHARDS as u64),
            PageId::new(4),
        );
        {
            let mut p = t.pair(a, b);
            assert!(p.second.is_none(), "one shard, one lock");
            assert_eq!(p.insert(a, FrameIndex::new(1)), None);
            assert_eq!(p.insert(b, FrameIndex::new(2)), None);
            assert_eq!(p.insert(a, FrameIndex::new(5)), Some(FrameIndex::new(1)));
        }
        {
            let mut p = t.pair(c, a);
            assert_eq!(p.first.0, shard_of(a), "the lower shard first");
            assert_eq!(p.get(a), Some(FrameIndex::new(5)));
            assert!(!p.contains(c));
            assert_eq!(p.insert(c, FrameIndex::new(7)), None);
        }
        assert!(t.contains(b) && t.contains(c));
        assert_eq!(t.len(), 3);
        assert_eq!(t.remove(b), Some(FrameIndex::new(2)));
        assert_eq!(t.remove(b), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    #[should_panic(expected = "shard is not locked")]
    fn a_page_outside_the_pair_is_a_bug() {
        let t = PageTable::new(10);
        let mut p = t.pair(PageId::new(1), PageId::new(2));
        p.get(PageId::new(5));
    }
}
