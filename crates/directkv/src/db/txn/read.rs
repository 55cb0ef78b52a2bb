//! Read transactions, and the reads every transaction shares.
//!
//! A read (each `get`, each leaf-sized step of a range) takes no lock: it
//! descends under page latches, runs again when a commit changed the tree's
//! structure under it ([`super::shape`]), and takes what a commit changed
//! since its snapshot, or is changing now, from the version store. Readers
//! never wait for a commit's apply. A `ReadTxn` is a
//! **snapshot**: it registers the last commit when it begins, and every read
//! in it, and in the iterators it hands out, sees the database as of that
//! commit, however long it lives, through the before-images of the version
//! store ([`super::versions`]). Nothing a write transaction does waits for
//! a reader. Write transactions read the same way, from their own snapshot
//! ([`super::write`]).

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::super::engine::Inner;
use super::commit::{CachedPages, PoolPages};
use super::tables::Tree;
use super::versions::{nonempty, Snapshot};
use crate::btree::tree;
use crate::error::{Error, Result};
use crate::format::PageId;
use crate::health::PanicGuard;
use crate::io::Storage;

/// Descents a read runs again when a structure change crossed each,
/// before it takes the tree's shared lock (under which no commit applies).
const SHAPE_RETRIES_MAX: usize = 64;

/// Runs `op`, a descent of `tree` from the root it is given (`None`: a
/// table without a tree yet), without a lock: it reads
/// each page under that page's latch (reading a missing one from disk), and
/// its result is kept only if no structure change began meanwhile (see
/// [`super::shape`]); else it runs again. A commit applying beside it never
/// holds it up: a key's value it changes is read from the version store.
/// After [`SHAPE_RETRIES_MAX`] crossed descents the last runs under the
/// tree's shared lock.
fn read_tree<S: Storage, R>(
    inner: &Inner<S>,
    tree: &Tree,
    op: impl Fn(&PoolPages<'_, S>, Option<PageId>) -> Result<R>,
) -> Result<R> {
    read_tree_at(inner, tree, op).map(|(r, _)| r)
}

/// [`read_tree`], also returning the structure sequence the result was
/// read at: the tree had that structure all through the read.
fn read_tree_at<S: Storage, R>(
    inner: &Inner<S>,
    tree: &Tree,
    op: impl Fn(&PoolPages<'_, S>, Option<PageId>) -> Result<R>,
) -> Result<(R, u64)> {
    inner.vitals.health.check()?;
    let _guard = PanicGuard(&inner.vitals.health);
    let pages = PoolPages { pool: &inner.pool };
    for _ in 0..SHAPE_RETRIES_MAX {
        let Some((seq, root)) = inner.txns.shape.stable() else {
            inner
                .vitals
                .counters
                .shape_retries
                .fetch_add(1, Ordering::Relaxed);
            std::thread::yield_now();
            continue;
        };
        assert_eq!(seq % 2, 0, "a stable structure sequence is even");
        // An error may come of a path a change crossed: judged after.
        let r = op(&pages, tree.root_or(root));
        if inner.txns.shape.unchanged(seq) {
            return inner.vitals.health.observe(r).map(|r| (r, seq));
        }
        inner
            .vitals
            .counters
            .shape_retries
            .fetch_add(1, Ordering::Relaxed);
    }
    let meta = inner.vitals.health.observe(inner.txns.tree.read())?;
    assert_eq!(meta.root, inner.txns.shape.root(), "no commit applies");
    let (seq, _) = inner
        .txns
        .shape
        .stable()
        .expect("no structure change while the tree is shared");
    let r = op(&pages, tree.root_or(meta.root));
    drop(meta);
    inner.vitals.health.observe(r).map(|r| (r, seq))
}

/// Reads `key` as `tree` holds it: the latest committed value, or one a
/// commit is applying (callers hold the key's row lock, or merge the
/// version store as [`get_at`] does).
pub(crate) fn get_committed<S: Storage>(
    inner: &Inner<S>,
    tree: &Tree,
    key: &[u8],
) -> Result<Option<Vec<u8>>> {
    read_tree(inner, tree, |pages, root| {
        check_live(tree)?;
        match root {
            Some(root) => tree::get(pages, root, key),
            None => Ok(None),
        }
    })
}

/// Before each descent of a table by its latest state: it was not dropped.
/// Its pages are freed once no live snapshot predates the drop, which a
/// writer whose snapshot was given up does not hold back; the drop refuses
/// its commit anyway (a freeing step is a structure change, so a descent
/// it crosses runs again, and comes here first).
fn check_live(tree: &Tree) -> Result<()> {
    match tree {
        Tree::Table(t) if !t.is_live() => Err(Error::Conflict {
            key: format!("table {}", t.id),
            reason: "the table was dropped by a transaction that committed after this \
                     transaction reached it"
                .into(),
        }),
        _ => Ok(()),
    }
}

/// [`get_committed`], also returning the trail of its descent and the
/// structure sequence it holds for: a commit may start its change of `key`
/// there while the sequence is unchanged (no trail: the table has no tree
/// yet).
pub(crate) fn get_committed_traced<S: Storage>(
    inner: &Inner<S>,
    tree: &Tree,
    key: &[u8],
) -> Result<(Option<Vec<u8>>, Option<Traced>)> {
    let (found, seq) = read_tree_at(inner, tree, |pages, root| {
        check_live(tree)?;
        match root {
            Some(root) => tree::get_traced(pages, root, key).map(Some),
            None => Ok(None),
        }
    })?;
    Ok(match found {
        Some((v, trail)) => (v, Some(Traced { seq, trail })),
        None => (None, None),
    })
}

/// A descent's trail and the structure sequence it was taken at.
pub(crate) struct Traced {
    seq: u64,
    trail: tree::Trail,
}

impl Traced {
    /// The trail, if the tree's structure is still the one it was taken
    /// in (no structure change began since).
    pub(crate) fn valid<S: Storage>(self, inner: &Inner<S>) -> Option<tree::Trail> {
        inner.txns.shape.unchanged(self.seq).then_some(self.trail)
    }
}

/// Reads `key` as of snapshot `snap`: the tree first, then the versions
/// committed since (see [`super::versions`] for why in that order), both
/// in one checked descent. A commit that fails after changing the key puts
/// its pages back inside a structure change and only then retracts its
/// versions, so a read that took the tree's value before the rollback and
/// missed the versions after it sees the sequence moved, and runs again.
pub(in crate::db) fn get_at<S: Storage>(
    inner: &Inner<S>,
    tree: &Tree,
    snap: &Snapshot<'_>,
    key: &[u8],
) -> Result<Option<Vec<u8>>> {
    read_tree(inner, tree, |pages, root| {
        snap.check_reachable(tree)?;
        let latest = match root {
            Some(root) => tree::get(pages, root, key)?,
            None => None,
        };
        snap.store().read_at(snap.csn(), tree.id(), key, latest)
    })
}

/// A read transaction: `get`, `range`, `prefix` over one consistent
/// committed state, the last commit when it began (a snapshot). Its
/// iterators keep the snapshot while they live, also after the transaction
/// is dropped. Holding one keeps the before-images of later commits in
/// memory, up to `Options::version_store_bytes`; past that the oldest
/// snapshot is given up and its next read returns
/// [`Error::SnapshotTooOld`](crate::Error::SnapshotTooOld).
pub struct ReadTxn<'db, S: Storage = crate::io::OsStorage> {
    inner: &'db Inner<S>,
    snap: Arc<Snapshot<'db>>,
}

impl<'db, S: Storage> ReadTxn<'db, S> {
    pub(crate) fn new(inner: &'db Inner<S>) -> Result<Self> {
        let snap = Arc::new(Snapshot::take(&inner.txns.versions)?);
        Ok(ReadTxn { inner, snap })
    }

    /// The value of `key` in the snapshot.
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`](crate::Error::SnapshotTooOld) when the snapshot was given up;
    /// [`Error::Corruption`](crate::Error::Corruption) naming the page when one fails verification; I/O errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        get_at(self.inner, &Tree::Default, &self.snap, key)
    }

    /// The entries in `range` in the snapshot, in key order; `.rev()` for
    /// descending.
    ///
    /// # Errors
    /// Errors arrive as items.
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = bounds(&range);
        self.scan(from, to)
    }

    /// The entries whose key starts with `prefix` in the snapshot, in key order.
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = prefix_bounds(prefix);
        self.scan(from, to)
    }

    fn scan(&self, from: Bound<Vec<u8>>, to: Bound<Vec<u8>>) -> RangeIter<'db, S> {
        self.scan_in(Tree::Default, from, to)
    }

    /// A scan of `tree` between `from` and `to` at the snapshot.
    pub(in crate::db) fn scan_in(
        &self,
        tree: Tree,
        from: Bound<Vec<u8>>,
        to: Bound<Vec<u8>>,
    ) -> RangeIter<'db, S> {
        let snap = Some(self.snap.clone());
        RangeIter::new(self.inner, tree, (from, to), BTreeMap::new(), snap)
    }
}

/// An iterator over a key range, forward or (with `.rev()`) backward. Reads a
/// leaf at a time (or its part up to 1 MiB of overflow values), each a
/// lock-free descent.
pub struct RangeIter<'db, S: Storage = crate::io::OsStorage> {
    inner: &'db Inner<S>,
    /// The tree it reads.
    tree: Tree,
    /// Where the next front batch starts; `None` when the front is exhausted.
    front_from: Option<Bound<Vec<u8>>>,
    /// Where the next back batch ends.
    back_to: Option<Bound<Vec<u8>>>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: VecDeque<(Vec<u8>, Vec<u8>)>,
    back: VecDeque<(Vec<u8>, Vec<u8>)>,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The snapshot read (a read transaction's); `None`: the latest commit.
    snap: Option<Arc<Snapshot<'db>>>,
    /// Set when the write transaction whose own writes are in `overlay`
    /// ends without committing: the iterator then fails.
    discarded: Option<Arc<AtomicBool>>,
    /// The last key yielded from each end: the ends never cross.
    last_front: Option<Vec<u8>>,
    last_back: Option<Vec<u8>>,
    failed: bool,
    /// An error to yield before anything else (the table cannot be read).
    refused: Option<Error>,
    /// Leaves read from the front.
    leaves: usize,
    /// Readahead is asked for again when `leaves` reaches this.
    ahead_until: usize,
}

impl<'db, S: Storage> RangeIter<'db, S> {
    pub(in crate::db) fn new(
        inner: &'db Inner<S>,
        tree: Tree,
        (lo, hi): (Bound<Vec<u8>>, Bound<Vec<u8>>),
        overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        snap: Option<Arc<Snapshot<'db>>>,
    ) -> Self {
        let live = nonempty(&lo, &hi);
        RangeIter {
            inner,
            tree,
            front_from: live.then(|| lo.clone()),
            back_to: live.then(|| hi.clone()),
            lo,
            hi,
            front: VecDeque::new(),
            back: VecDeque::new(),
            overlay,
            snap,
            discarded: None,
            last_front: None,
            last_back: None,
            failed: false,
            refused: None,
            leaves: 0,
            ahead_until: 0,
        }
    }

    /// Fails the iterator once the flag `flag` gives is set, if it merges
    /// writes of a transaction (a write transaction's, which sets it when it ends
    /// without committing).
    pub(in crate::db) fn discarded_when(mut self, flag: impl FnOnce() -> Arc<AtomicBool>) -> Self {
        if !self.overlay.is_empty() {
            self.discarded = Some(flag());
        }
        self
    }

    /// An iterator that yields `e`, then ends.
    pub(in crate::db) fn failing(mut self, e: Error) -> Self {
        assert!(
            self.refused.is_none() && self.leaves == 0,
            "an iterator is refused before it reads"
        );
        self.refused = Some(e);
        self
    }

    fn fill_front(&mut self) -> Result<()> {
        self.check_snapshot()?;
        while self.front.is_empty() {
            let Some(from) = self.front_from.take() else {
                return Ok(());
            };
            let (batch, next) = match self.scan_forward_at(&from) {
                Ok(b) => b,
                Err(e) => {
                    self.front_from = Some(from);
                    return Err(e);
                }
            };
            self.front.extend(batch);
            self.leaves += 1;
            if next.is_some() {
                let at: &[u8] = match &from {
                    Bound::Included(k) | Bound::Excluded(k) => k,
                    Bound::Unbounded => &[],
                };
                self.read_ahead(at);
            }
            self.front_from = next;
        }
        Ok(())
    }

    /// One leaf of a forward scan as of the snapshot, read without a lock
    /// and merged with the versions in one checked descent (as [`get_at`]).
    fn scan_forward_at(&self, from: &Bound<Vec<u8>>) -> Result<tree::Batch> {
        read_tree(self.inner, &self.tree, |pages, root| {
            self.check_reachable()?;
            let (batch, next) = match root {
                Some(root) => tree::scan_forward(pages, root, from, &self.hi)?,
                None => (Vec::new(), None),
            };
            let hi = match &next {
                Some(b) => batch_end(b),
                None => self.hi.clone(),
            };
            Ok((self.at_snapshot(from, &hi, batch, false)?, next))
        })
    }

    /// Readahead: once a scan has read two leaves in a row it is sequential,
    /// and the leaves after the one holding `at` (just read, so its path is
    /// cached) are queued for asynchronous reads, a window at a time, half a
    /// window before the scan gets there. Direct I/O has no kernel readahead;
    /// a point read never comes here.
    fn read_ahead(&mut self, at: &[u8]) {
        let window = self.inner.env.opts.readahead_pages;
        if window == 0 || self.leaves < 2 || self.leaves < self.ahead_until {
            return;
        }
        let inner = self.inner;
        let Some((seq, root)) = inner.txns.shape.stable() else {
            return;
        };
        let Some(root) = self.tree.root_or(root) else {
            return;
        };
        let leaves = tree::following_leaves(&CachedPages { pool: &inner.pool }, root, at, window);
        // Best effort: a branch not in the cache, or a structure change
        // meanwhile, means no readahead this time.
        let Ok(leaves) = leaves else { return };
        if !inner.txns.shape.unchanged(seq) {
            return;
        }
        let queued = inner.read_ahead(&leaves);
        self.ahead_until = self.leaves + (queued.max(2) / 2);
    }

    /// One leaf of a reverse scan as of the snapshot (as
    /// [`scan_forward_at`](Self::scan_forward_at)).
    fn scan_reverse_at(&self, to: &Bound<Vec<u8>>) -> Result<tree::Batch> {
        read_tree(self.inner, &self.tree, |pages, root| {
            self.check_reachable()?;
            let (batch, next) = match root {
                Some(root) => tree::scan_reverse(pages, root, &self.lo, to)?,
                None => (Vec::new(), None),
            };
            let lo = match &next {
                Some(b) => batch_end(b),
                None => self.lo.clone(),
            };
            Ok((self.at_snapshot(&lo, to, batch, true)?, next))
        })
    }

    fn fill_back(&mut self) -> Result<()> {
        self.check_snapshot()?;
        while self.back.is_empty() {
            let Some(to) = self.back_to.take() else {
                return Ok(());
            };
            let (batch, next) = match self.scan_reverse_at(&to) {
                Ok(b) => b,
                Err(e) => {
                    self.back_to = Some(to);
                    return Err(e);
                }
            };
            self.back.extend(batch);
            self.back_to = next;
        }
        Ok(())
    }

    /// Fails once the iterator's snapshot was given up, also when the
    /// rest of its range is buffered or empty: every read of a given-up
    /// snapshot says so.
    fn check_snapshot(&self) -> Result<()> {
        if self
            .discarded
            .as_ref()
            .is_some_and(|d| d.load(Ordering::Acquire))
        {
            return Err(Error::InvalidArgument(
                "the write transaction this iterator reads ended without committing: the \
                 writes of its own that the iterator merges are gone"
                    .into(),
            ));
        }
        match &self.snap {
            Some(snap) => snap.store().check_live(snap.csn()),
            None => Ok(()),
        }
    }

    /// Before each descent of a table: its snapshot (if any) is live.
    fn check_reachable(&self) -> Result<()> {
        match &self.snap {
            Some(snap) => snap.check_reachable(&self.tree),
            None => Ok(()),
        }
    }

    /// `batch`, what the tree held in `(lo, hi)`, as of the iterator's
    /// snapshot (unchanged without one).
    fn at_snapshot(
        &self,
        lo: &Bound<Vec<u8>>,
        hi: &Bound<Vec<u8>>,
        batch: tree::Entries,
        rev: bool,
    ) -> Result<tree::Entries> {
        match &self.snap {
            Some(snap) => snap
                .store()
                .batch_at(snap.csn(), self.tree.id(), (lo, hi), batch, rev),
            None => Ok(batch),
        }
    }

    /// The next committed entry from the front merged with the overlay.
    fn next_front(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            self.fill_front()?;
            let tree_key = self.front.front().map(|e| e.0.clone());
            let over_key = self.overlay.keys().next().cloned();
            let take_overlay = match (&tree_key, &over_key) {
                (None, None) => return Ok(None),
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(t), Some(o)) => o <= t,
            };
            let (k, v) = if take_overlay {
                let (k, v) = self.overlay.pop_first().expect("overlay entry");
                if tree_key.as_ref() == Some(&k) {
                    self.front.pop_front();
                }
                match v {
                    Some(v) => (k, v),
                    None => {
                        // A deletion is passed as if yielded: the back end
                        // must not bring the key back from the tree.
                        if self.last_back.as_ref().is_some_and(|b| &k >= b) {
                            self.front.clear();
                            self.front_from = None;
                            return Ok(None);
                        }
                        self.last_front = Some(k);
                        continue;
                    }
                }
            } else {
                self.front.pop_front().expect("tree entry")
            };
            if self.last_back.as_ref().is_some_and(|b| &k >= b) {
                self.front.clear();
                self.front_from = None;
                return Ok(None);
            }
            return Ok(Some((k, v)));
        }
    }

    /// Asserts what a key about to be yielded from the front (`front`) or
    /// the back must be: in the range, past what its end yielded or passed,
    /// and short of what the other end did (the ends never cross).
    fn check_yield(&self, key: &[u8], front: bool) {
        assert!(
            in_bounds(&self.lo, &self.hi, key),
            "a key yielded is in the range"
        );
        let (own, other) = match front {
            true => (&self.last_front, &self.last_back),
            false => (&self.last_back, &self.last_front),
        };
        let onward = |k: &Vec<u8>| match front {
            true => key > k.as_slice(),
            false => key < k.as_slice(),
        };
        assert!(own.as_ref().is_none_or(onward), "each end moves one way");
        let short_of = |k: &Vec<u8>| match front {
            true => key < k.as_slice(),
            false => key > k.as_slice(),
        };
        assert!(
            other.as_ref().is_none_or(short_of),
            "the two ends never cross"
        );
    }

    fn next_back_entry(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            self.fill_back()?;
            let tree_key = self.back.front().map(|e| e.0.clone());
            let over_key = self.overlay.keys().next_back().cloned();
            let take_overlay = match (&tree_key, &over_key) {
                (None, None) => return Ok(None),
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(t), Some(o)) => o >= t,
            };
            let (k, v) = if take_overlay {
                let (k, v) = self.overlay.pop_last().expect("overlay entry");
                if tree_key.as_ref() == Some(&k) {
                    self.back.pop_front();
                }
                match v {
                    Some(v) => (k, v),
                    None => {
                        // As from the front: a passed deletion bounds the
                        // other end.
                        if self.last_front.as_ref().is_some_and(|f| &k <= f) {
                            self.back.clear();
                            self.back_to = None;
                            return Ok(None);
                        }
                        self.last_back = Some(k);
                        continue;
                    }
                }
            } else {
                self.back.pop_front().expect("tree entry")
            };
            if self.last_front.as_ref().is_some_and(|f| &k <= f) {
                self.back.clear();
                self.back_to = None;
                return Ok(None);
            }
            return Ok(Some((k, v)));
        }
    }
}

impl<S: Storage> Iterator for RangeIter<'_, S> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(e) = self.refused.take() {
            self.failed = true;
            return Some(Err(e));
        }
        let _guard = PanicGuard(&self.inner.vitals.health);
        match self.next_front() {
            Ok(Some(e)) => {
                self.check_yield(&e.0, true);
                self.last_front = Some(e.0.clone());
                Some(Ok(e))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl<S: Storage> DoubleEndedIterator for RangeIter<'_, S> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if let Some(e) = self.refused.take() {
            self.failed = true;
            return Some(Err(e));
        }
        let _guard = PanicGuard(&self.inner.vitals.health);
        match self.next_back_entry() {
            Ok(Some(e)) => {
                self.check_yield(&e.0, false);
                self.last_back = Some(e.0.clone());
                Some(Ok(e))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

mod bounds;
mod tables;
use bounds::{batch_end, in_bounds};
pub(in crate::db) use bounds::{bounds, overlay_range, prefix_bounds};
pub use tables::TableRef;

#[cfg(test)]
mod tests;
