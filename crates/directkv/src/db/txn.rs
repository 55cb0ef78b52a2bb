//! Transactions.
//!
//! Isolation: one write transaction at a time (a first-come, first-served
//! ticket lock, so no writer waits behind later arrivals); its writes are kept
//! in memory and seen by its own reads, and applied to the tree at commit.
//! A read (each `get`, each leaf-sized step of a range) holds the tree
//! shared, so it never sees part of a transaction. A `ReadTxn` is a
//! **snapshot**: it registers the last commit when it begins, and every read
//! in it, and in the iterators it hands out, sees the database as of that
//! commit, however long it lives, through the before-images of the version
//! store ([`super::versions`]). Nothing a write transaction does waits for
//! a reader.
//!
//! Commit: apply and log under the tree lock, release the tree and the writer
//! lock, then wait for the commit record to be durable (early lock release: the
//! next writer runs while this commit's sync is in flight, and concurrent
//! commits share a sync).

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::commit::{CachedPages, CommitCtx, PoolPages};
use super::engine::Inner;
use super::versions::{CommitVersions, Snapshot};
use super::Durability;
use crate::btree::tree;
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::health::{self, PanicGuard};
use crate::io::Storage;
use crate::lsn::Lsn;

/// Condition variables a [`TicketLock`] spreads its waiters over.
const TICKET_SLOTS: usize = 64;

/// A first-come, first-served lock. A waiter sleeps on the condition
/// variable of its ticket's slot, so a release wakes only the waiter whose
/// turn it is (and any waiter 64 tickets behind it), not every waiter: with
/// many writers queued, waking them all to find the one whose turn it is
/// cost more than the transactions themselves on two cores.
///
/// It also remembers which thread holds it, so a thread that asks for it
/// again while holding it gets an error instead of waiting for itself
/// forever.
pub(crate) struct TicketLock {
    /// (next ticket to hand out, ticket being served).
    state: Mutex<(u64, u64)>,
    turn: Box<[Condvar]>,
    /// The holder's [`thread_token`], 0 while free.
    owner: AtomicU64,
}

impl Default for TicketLock {
    fn default() -> Self {
        TicketLock {
            state: Mutex::new((0, 0)),
            turn: (0..TICKET_SLOTS).map(|_| Condvar::new()).collect(),
            owner: AtomicU64::new(0),
        }
    }
}

/// A number unique to the calling thread for the life of the process (never 0).
fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

impl TicketLock {
    fn slot(&self, ticket: u64) -> &Condvar {
        &self.turn[(ticket % TICKET_SLOTS as u64) as usize]
    }

    /// Whether the calling thread holds the lock.
    pub fn held_by_this_thread(&self) -> bool {
        self.owner.load(Ordering::Acquire) == thread_token()
    }

    /// Waits for the lock, first come first served; returns the ticket that
    /// [`release`](Self::release) takes back.
    pub fn acquire(&self) -> u64 {
        assert!(
            !self.held_by_this_thread(),
            "a thread waits for its own lock"
        );
        // The ticket state's critical sections are counter arithmetic: a
        // panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        let mine = s.0;
        s.0 += 1;
        while s.1 != mine {
            s = self.slot(mine).wait(s).unwrap_or_else(|p| p.into_inner());
        }
        assert_eq!(s.1, mine, "served in ticket order");
        let before = self.owner.swap(thread_token(), Ordering::AcqRel);
        assert_eq!(before, 0, "one holder at a time");
        mine
    }

    pub fn release(&self, ticket: u64) {
        // The ticket state's critical sections are counter arithmetic: a
        // panic cannot leave it half changed.
        let mut s = health::lock_even_poisoned(&self.state);
        assert_eq!(s.1, ticket, "released by its holder");
        let before = self.owner.swap(0, Ordering::AcqRel);
        assert_ne!(before, 0, "released while held");
        s.1 += 1;
        let next = s.1;
        if s.0 > next {
            self.slot(next).notify_all();
        }
    }
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn bounds<'k, R: RangeBounds<&'k [u8]>>(r: &R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
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

fn overlay_range(
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

fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
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

/// A read transaction: `get`, `range`, `prefix` over one consistent
/// committed state, the last commit when it began (a snapshot). Its
/// iterators keep the snapshot while they live, also after the transaction
/// is dropped. Holding one keeps the before-images of later commits in
/// memory, up to `Options::version_store_bytes`; past that the oldest
/// snapshot is given up and its next read returns
/// [`Error::SnapshotTooOld`].
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
    /// [`Error::SnapshotTooOld`] when the snapshot was given up;
    /// [`Error::Corruption`] naming the page when one fails verification; I/O errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let latest = get_committed(self.inner, key)?;
        self.snap.store().read_at(self.snap.csn(), key, latest)
    }

    /// The entries in `range` in the snapshot, in key order; `.rev()` for
    /// descending.
    ///
    /// # Errors
    /// Errors arrive as items.
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = bounds(&range);
        RangeIter::new(
            self.inner,
            from,
            to,
            BTreeMap::new(),
            Some(self.snap.clone()),
        )
    }

    /// The entries whose key starts with `prefix` in the snapshot, in key order.
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = prefix_bounds(prefix);
        RangeIter::new(
            self.inner,
            from,
            to,
            BTreeMap::new(),
            Some(self.snap.clone()),
        )
    }
}

/// The write transaction. Dropping it without `commit` aborts it.
pub struct WriteTxn<'db, S: Storage = crate::io::OsStorage> {
    inner: &'db Inner<S>,
    ticket: Option<u64>,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'db, S: Storage> WriteTxn<'db, S> {
    pub(crate) fn new(inner: &'db Inner<S>, ticket: u64) -> Self {
        assert!(
            inner.writer.held_by_this_thread(),
            "a write transaction holds the writer lock"
        );
        WriteTxn {
            inner,
            ticket: Some(ticket),
            writes: BTreeMap::new(),
        }
    }

    fn check_key(&self, key: &[u8]) -> Result<()> {
        let max = tree::key_max(self.inner.pool.page_bytes());
        if key.len() > max {
            return Err(Error::InvalidArgument(format!(
                "key of {} bytes exceeds the {max}-byte limit",
                key.len()
            )));
        }
        Ok(())
    }

    /// Sets `key` to `value`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key over the limit (1024 bytes; less
    /// with 4 KiB pages) or a value over [`tree::VALUE_MAX`]. The transaction is
    /// unchanged then.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner.health.check()?;
        self.check_key(key)?;
        if value.len() > tree::VALUE_MAX {
            return Err(Error::InvalidArgument(format!(
                "value of {} bytes exceeds the {}-byte limit",
                value.len(),
                tree::VALUE_MAX
            )));
        }
        self.writes.insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key over the limit.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.inner.health.check()?;
        self.check_key(key)?;
        self.writes.insert(key.to_vec(), None);
        Ok(())
    }

    /// The value of `key`, this transaction's writes included.
    ///
    /// # Errors
    /// As [`ReadTxn::get`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.writes.get(key) {
            Some(v) => Ok(v.clone()),
            None => get_committed(self.inner, key),
        }
    }

    /// The entries in `range`, this transaction's writes included.
    pub fn range<'k, R: RangeBounds<&'k [u8]>>(&self, range: R) -> RangeIter<'db, S> {
        let (from, to) = bounds(&range);
        let overlay = overlay_range(&self.writes, &from, &to);
        RangeIter::new(self.inner, from, to, overlay, None)
    }

    /// The entries whose key starts with `prefix`, this transaction's writes included.
    pub fn prefix(&self, prefix: &[u8]) -> RangeIter<'db, S> {
        let (from, to) = prefix_bounds(prefix);
        let overlay = overlay_range(&self.writes, &from, &to);
        RangeIter::new(self.inner, from, to, overlay, None)
    }

    /// Discards the transaction's writes.
    pub fn abort(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.inner.writer.release(t);
        }
    }

    /// Makes the transaction's writes durable (under `Durability::Sync`) and
    /// visible, all or nothing.
    ///
    /// # Errors
    /// [`Error::CommitOutcomeUnknown`] when the WAL sync failed (recovery
    /// decides); [`Error::Poisoned`] after an earlier log failure; I/O and
    /// corruption errors before the commit record, with nothing changed.
    pub fn commit(mut self) -> Result<()> {
        self.inner.health.check()?;
        let _guard = PanicGuard(&self.inner.health);
        let writes = std::mem::take(&mut self.writes);
        if writes.is_empty() {
            self.release();
            return Ok(());
        }
        let lsn = self.apply(writes);
        self.release();
        assert!(
            self.ticket.is_none(),
            "the writer lock is released before the sync"
        );
        let lsn = self.inner.health.observe(lsn)?;
        if self.inner.opts.durability == Durability::Sync {
            let t = Instant::now();
            self.inner
                .health
                .observe(self.inner.log.flush_to_wal(lsn))?;
            self.inner.counters.wal_sync_wait.record(t.elapsed());
        }
        self.inner.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.inner.after_commit();
        Ok(())
    }

    fn apply(&self, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Result<Lsn> {
        let inner = self.inner;
        let t = Instant::now();
        let mut meta = health::write(&inner.tree)?;
        inner.counters.tree_lock_wait.record(t.elapsed());
        let horizon = Lsn::new(inner.fpi_horizon.load(Ordering::Acquire));
        let mut ctx = CommitCtx::new(inner, *meta, inner.next_txn(), horizon);
        // Before-images are kept only while a snapshot may need them (see
        // the invariants of `super::versions`).
        let versioned = inner.versions.versions_wanted();
        let mut versions: CommitVersions = Vec::new();
        for (k, v) in &writes {
            let r = versioned
                .then(|| tree::get(&ctx, ctx.meta.root, k))
                .transpose()
                .and_then(|before| {
                    if let Some(before) = before {
                        versions.push((k.clone(), before));
                    }
                    match v {
                        Some(v) => tree::put(&mut ctx, k, v),
                        None => tree::delete(&mut ctx, k).map(|_| ()),
                    }
                });
            if let Err(e) = r {
                let e = match e {
                    Error::CacheExhausted { frames } => Error::TransactionTooLarge {
                        pages: ctx.held_pages(),
                        frames,
                    },
                    e => e,
                };
                ctx.rollback();
                return Err(e);
            }
        }
        let (full, full_bytes, deltas) = (ctx.full_images, ctx.full_image_bytes, ctx.deltas);
        let logged = ctx.logged_bytes;
        let new_meta = ctx.meta;
        let lsn = ctx.commit()?;
        *meta = new_meta;
        assert!(
            !versioned || versions.len() == writes.len(),
            "a version per key"
        );
        // Published before the tree lock is let go.
        inner
            .versions
            .publish(inner.versions.visible() + 1, versions)?;
        inner
            .counters
            .full_images
            .fetch_add(full, Ordering::Relaxed);
        inner.counters.deltas.fetch_add(deltas, Ordering::Relaxed);
        let c = &inner.counters;
        c.full_image_bytes.fetch_add(full_bytes, Ordering::Relaxed);
        c.page_record_bytes.fetch_add(logged, Ordering::Relaxed);
        Ok(lsn)
    }
}

impl<S: Storage> Drop for WriteTxn<'_, S> {
    fn drop(&mut self) {
        self.release();
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
    fn new(
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Holders are mutually exclusive and served in ticket order, also with
    /// more waiters than the lock has slots (two share a slot then).
    #[test]
    fn ticket_lock_excludes_and_serves_in_order() {
        for threads in [4usize, 80] {
            let lock = Arc::new(TicketLock::default());
            let inside = Arc::new(AtomicU64::new(0));
            let served = Arc::new(Mutex::new(Vec::new()));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (lock, inside, served) = (lock.clone(), inside.clone(), served.clone());
                    std::thread::spawn(move || {
                        for _ in 0..200 {
                            let t = lock.acquire();
                            // A second holder would see 1 here.
                            assert_eq!(inside.swap(1, Ordering::SeqCst), 0);
                            served.lock().expect("not poisoned").push(t);
                            std::thread::yield_now();
                            inside.store(0, Ordering::SeqCst);
                            lock.release(t);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("no holder panicked");
            }
            let served = served.lock().expect("not poisoned");
            let expected: Vec<u64> = (0..(threads * 200) as u64).collect();
            assert_eq!(*served, expected, "{threads} threads");
        }
    }
}
