//! Read transactions, and the reads every transaction shares.
//!
//! A read (each `get`, each leaf-sized step of a range) holds the tree
//! shared, so it never sees part of a transaction. A `ReadTxn` is a
//! **snapshot**: it registers the last commit when it begins, and every read
//! in it, and in the iterators it hands out, sees the database as of that
//! commit, however long it lives, through the before-images of the version
//! store ([`super::versions`]). Nothing a write transaction does waits for
//! a reader. Write transactions read the same way, from their own snapshot
//! ([`super::write`]).

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::commit::{CachedPages, PoolPages};
use super::engine::Inner;
use super::versions::Snapshot;
use crate::btree::tree;
use crate::buffer::Access;
use crate::error::Result;
use crate::health::{self, PanicGuard};
use crate::io::Storage;

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(super) fn bounds<'k, R: RangeBounds<&'k [u8]>>(r: &R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        owned(r.start_bound().cloned()),
        owned(r.end_bound().cloned()),
    )
}

/// Whether `(from, to)` can hold any key; an inverted range is empty, never a
/// panic.
pub(super) fn nonempty(from: &Bound<Vec<u8>>, to: &Bound<Vec<u8>>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

pub(super) fn overlay_range(
    writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    if !nonempty(from, to) {
        return BTreeMap::new();
    }
    writes
        .range::<Vec<u8>, _>((from.clone(), to.clone()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The bound that ends a batch where the next one, starting at `next`,
/// begins (the batches of a scan partition its range).
fn batch_end(next: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match next {
        Bound::Included(k) => Bound::Excluded(k.clone()),
        Bound::Excluded(k) => Bound::Included(k.clone()),
        Bound::Unbounded => unreachable!("a scan's next batch starts at a key"),
    }
}

pub(super) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    // The smallest key above every key with the prefix: the prefix with its
    // last non-0xFF byte incremented and the rest dropped.
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last == 0xFF {
            end.pop();
        } else {
            *end.last_mut().expect("non-empty") += 1;
            return (Bound::Included(prefix.to_vec()), Bound::Excluded(end));
        }
    }
    (Bound::Included(prefix.to_vec()), Bound::Unbounded)
}

/// Misses a descent reads outside the tree lock before it reads under it.
const UNLOCKED_READS_MAX: usize = 32;

/// Runs `op` (a descent from the root it is given) under the tree's shared
/// lock, with page reads outside it: when `op` finds a page missing, the lock
/// is let go, the page read into the pool (as `access`) and `op` run again, so
/// a cache miss never holds up a commit (which needs the lock exclusively) for
/// the length of a disk read. After [`UNLOCKED_READS_MAX`] misses the last
/// try reads under the lock.
fn with_unlocked_reads<S: Storage, R>(
    inner: &Inner<S>,
    access: Access,
    op: impl Fn(&CachedPages<'_, S>, u64) -> Result<R>,
) -> Result<R> {
    inner.health.check()?;
    let _guard = PanicGuard(&inner.health);
    let mut misses = 0;
    loop {
        assert!(
            misses <= UNLOCKED_READS_MAX,
            "the last try reads under the lock"
        );
        let meta = inner.health.observe(health::read(&inner.tree))?;
        let mut pages = CachedPages::new(inner);
        pages.read_through = misses == UNLOCKED_READS_MAX;
        let r = op(&pages, meta.root);
        drop(meta);
        match pages.missed.get() {
            // The page was reachable a moment ago, so it is in the pool or
            // on disk (a page leaves the pool only after being written).
            // Reading it may write a dirty victim out: a failure of that
            // write stops the database.
            Some(page) => drop(inner.health.observe(inner.pool.read(page, access))?),
            None => return inner.health.observe(r),
        }
        misses += 1;
    }
}

/// Reads `key`, its missing pages read outside the tree lock.
pub(crate) fn get_committed<S: Storage>(inner: &Inner<S>, key: &[u8]) -> Result<Option<Vec<u8>>> {
    with_unlocked_reads(inner, Access::Normal, |pages, root| {
        tree::get(pages, root, key)
    })
}

/// Reads `key` as of snapshot `snap`: the tree first, then the versions
/// committed since (see [`super::versions`] for why in that order).
pub(super) fn get_at<S: Storage>(
    inner: &Inner<S>,
    snap: &Snapshot<'_>,
    key: &[u8],
) -> Result<Option<Vec<u8>>> {
    let latest = get_committed(inner, key)?;
    snap.store().read_at(snap.csn(), key, latest)
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
        let snap = Arc::new(Snapshot::take(&inner.versions)?);
        Ok(ReadTxn { inner, snap })
    }

    /// The value of `key` in the snapshot.
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`](crate::Error::SnapshotTooOld) when the snapshot was given up;
    /// [`Error::Corruption`](crate::Error::Corruption) naming the page when one fails verification; I/O errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        get_at(self.inner, &self.snap, key)
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
        let snap = Some(self.snap.clone());
        RangeIter::new(self.inner, from, to, BTreeMap::new(), snap)
    }
}

/// An iterator over a key range, forward or (with `.rev()`) backward. Reads a
/// leaf at a time, each under the tree's shared lock.
pub struct RangeIter<'db, S: Storage = crate::io::OsStorage> {
    inner: &'db Inner<S>,
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
    /// The last key yielded from each end: the ends never cross.
    last_front: Option<Vec<u8>>,
    last_back: Option<Vec<u8>>,
    failed: bool,
    /// Leaves read from the front.
    leaves: usize,
    /// Readahead is asked for again when `leaves` reaches this.
    ahead_until: usize,
}

impl<'db, S: Storage> RangeIter<'db, S> {
    pub(super) fn new(
        inner: &'db Inner<S>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
        snap: Option<Arc<Snapshot<'db>>>,
    ) -> Self {
        let live = nonempty(&lo, &hi);
        RangeIter {
            inner,
            front_from: live.then(|| lo.clone()),
            back_to: live.then(|| hi.clone()),
            lo,
            hi,
            front: VecDeque::new(),
            back: VecDeque::new(),
            overlay,
            snap,
            last_front: None,
            last_back: None,
            failed: false,
            leaves: 0,
            ahead_until: 0,
        }
    }

    fn fill_front(&mut self) -> Result<()> {
        self.check_snapshot()?;
        while self.front.is_empty() {
            let Some(from) = self.front_from.take() else {
                return Ok(());
            };
            let scanned = self.scan_forward_unlocked(&from).and_then(|(batch, next)| {
                let hi = match &next {
                    Some(b) => batch_end(b),
                    None => self.hi.clone(),
                };
                Ok((self.at_snapshot(&from, &hi, batch, false)?, next))
            });
            let (batch, next) = match scanned {
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

    /// One leaf of a forward scan, its missing pages read outside the tree
    /// lock (as [`get_committed`]).
    fn scan_forward_unlocked(&self, from: &Bound<Vec<u8>>) -> Result<tree::Batch> {
        with_unlocked_reads(self.inner, Access::Scan, |pages, root| {
            tree::scan_forward(pages, root, from, &self.hi)
        })
    }

    /// Readahead: once a scan has read two leaves in a row it is sequential,
    /// and the leaves after the one holding `at` (just read, so its path is
    /// cached) are queued for asynchronous reads, a window at a time, half a
    /// window before the scan gets there. Direct I/O has no kernel readahead;
    /// a point read never comes here.
    fn read_ahead(&mut self, at: &[u8]) {
        let window = self.inner.opts.readahead_pages;
        if window == 0 || self.leaves < 2 || self.leaves < self.ahead_until {
            return;
        }
        let inner = self.inner;
        let leaves = {
            let Ok(meta) = health::read(&inner.tree) else {
                return;
            };
            tree::following_leaves(&CachedPages::new(inner), meta.root, at, window)
        };
        // Best effort: a branch not in the cache means no readahead this time.
        let Ok(leaves) = leaves else { return };
        let queued = inner.read_ahead(&leaves);
        self.ahead_until = self.leaves + (queued.max(2) / 2);
    }

    fn fill_back(&mut self) -> Result<()> {
        self.check_snapshot()?;
        while self.back.is_empty() {
            let Some(to) = self.back_to.take() else {
                return Ok(());
            };
            let meta = self.inner.health.observe(health::read(&self.inner.tree))?;
            let scanned =
                tree::scan_reverse(&PoolPages { inner: self.inner }, meta.root, &self.lo, &to);
            let (batch, next) = self.inner.health.observe(scanned)?;
            drop(meta);
            let lo = match &next {
                Some(b) => batch_end(b),
                None => self.lo.clone(),
            };
            let batch = match self.at_snapshot(&lo, &to, batch, true) {
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
        match &self.snap {
            Some(snap) => snap.store().check_live(snap.csn()),
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
            Some(snap) => snap.store().batch_at(snap.csn(), lo, hi, batch, rev),
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
                    None => continue,
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
                    None => continue,
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
        let _guard = PanicGuard(&self.inner.health);
        match self.next_front() {
            Ok(Some(e)) => {
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
        let _guard = PanicGuard(&self.inner.health);
        match self.next_back_entry() {
            Ok(Some(e)) => {
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
