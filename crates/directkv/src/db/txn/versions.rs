//! Snapshot reads: the version store of before-images and the registry of
//! live snapshots (see `docs/mvcc.md` for the design).
//!
//! The B+tree holds the latest committed state, updated in place. Every
//! commit gets a commit sequence number (CSN), one more than the last. While
//! snapshots are live, a commit first records, for each key it changes, the
//! key's value before it (`None`: absent) tagged with its CSN. A snapshot
//! taken at CSN `s` reads a key as the before-image of the oldest version
//! newer than `s`, or, when there is none, as the tree holds it: the oldest
//! change after `s` is the first that snapshot must not see, and its
//! before-image is what the key held at `s`.
//!
//! Invariants:
//! - A commit stages the before-images of every key it changes, tagged
//!   with its CSN (one more than the published one), before it changes a
//!   page, and publishes its CSN after its last page change: a reader that
//!   reads the tree, then the store, finds a version of every key the tree
//!   showed it changed after its snapshot, committed or being applied (so
//!   readers never wait for an apply, and never see one half done). A
//!   commit that fails is retracted before another is staged.
//! - The published CSN only grows; one commit is staged at a time (the
//!   commit section's).
//! - Versions with CSN at or below the oldest live snapshot are dropped by
//!   each commit once it has ended (outside the commit section): no
//!   snapshot can need them. When the store exceeds its cap, the oldest
//!   snapshots are given up (their next read is [`Error::SnapshotTooOld`])
//!   until it fits, except one of the published commit, which needs only
//!   the versions of a commit still being applied: a snapshot never reads a
//!   wrong value, a new snapshot is never too old, and the store never
//!   grows past the cap for long (by the versions of the commit being
//!   applied and of those that ended their section but have not collected
//!   yet, at most one per committing thread, or of one commit when no
//!   snapshot is left to give up).
//! - Lock order: tree, then the store, then the registry.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::tables;
use crate::error::{Error, Result};
use crate::health;

/// What one version costs beyond its key and value bytes, counted against
/// the cap: the map entries that hold it (by key and by commit), its chain,
/// the commit's share of its key list, and the allocator's headers and
/// rounding of each of those blocks (docs/mvcc.md, "The cap"), so that the
/// cap bounds the memory the store takes, not only its payload.
pub(in crate::db) const VERSION_OVERHEAD_BYTES: usize = 272;

/// A key's value before a commit changed it.
pub(in crate::db) type Before = Option<Vec<u8>>;

/// A key's versions: (CSN of the commit that changed it, the value before),
/// oldest first.
type Chain = VecDeque<(u64, Before)>;

/// A key range, by its bounds (of qualified keys in the store, see
/// [`super::tables`]).
pub(in crate::db) use super::tables::KeyRange;

/// The versions of one commit, as the commit path hands them over.
pub(in crate::db) type CommitVersions = Vec<(Vec<u8>, Before)>;

/// The before-images kept for live snapshots.
#[derive(Default)]
struct Store {
    /// Key → (CSN of the commit that changed it, the value before), oldest first.
    by_key: BTreeMap<Vec<u8>, VecDeque<(u64, Before)>>,
    /// CSN → keys it changed, oldest first: what garbage collection drops.
    by_csn: VecDeque<(u64, Vec<Vec<u8>>)>,
    /// Bytes held, as counted against the cap.
    bytes: usize,
    /// Versions held.
    versions: usize,
}

/// The live snapshots: CSN → (how many, when the first began).
#[derive(Default)]
struct Registry {
    live: BTreeMap<u64, (usize, Instant)>,
}

/// Read transactions' snapshots and the version store that serves them
/// (see `docs/mvcc.md`), as [`Stats::snapshots`](crate::Stats::snapshots) reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SnapshotStats {
    /// Read transactions (and their iterators) holding a snapshot now.
    pub active_snapshots: u64,
    /// How long the oldest live snapshot has been held, in milliseconds
    /// (0 with none).
    pub oldest_snapshot_ms: u64,
    /// Bytes of before-images kept for live snapshots, counted against
    /// `version_store_cap_bytes`.
    pub version_store_bytes: u64,
    /// Versions kept.
    pub versions: u64,
    /// Versions stored since open (each a key's before-image, kept because
    /// a snapshot was live when a commit changed the key).
    pub versions_stored: u64,
    /// The cap (`Options::version_store_bytes`, or its default).
    pub version_store_cap_bytes: u64,
    /// Snapshots given up because keeping them would have passed the cap:
    /// each one's next read returned `Error::SnapshotTooOld`.
    pub snapshots_too_old: u64,
    /// The commit sequence number of the last commit.
    pub commit_seq: u64,
}

/// The version store and the snapshot registry of one database.
pub(crate) struct VersionStore {
    cap_bytes: usize,
    /// The CSN of the last published commit.
    visible: AtomicU64,
    /// The CSN of the newest commit whose versions are in the store: the
    /// published one, or one more while a commit applies.
    staged: AtomicU64,
    /// Snapshots below this CSN were given up.
    too_old_below: AtomicU64,
    store: RwLock<Store>,
    registry: Mutex<Registry>,
    given_up: AtomicU64,
    stored: AtomicU64,
}

impl VersionStore {
    /// An empty store holding at most `cap_bytes`.
    pub(in crate::db) fn new(cap_bytes: usize) -> Self {
        VersionStore {
            cap_bytes,
            visible: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            too_old_below: AtomicU64::new(0),
            store: RwLock::new(Store::default()),
            registry: Mutex::new(Registry::default()),
            given_up: AtomicU64::new(0),
            stored: AtomicU64::new(0),
        }
    }

    /// The CSN of the oldest live snapshot, if one is live.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the registry.
    pub(in crate::db) fn oldest_live(&self) -> Result<Option<u64>> {
        let reg = health::lock(&self.registry)?;
        Ok(reg.live.keys().next().copied())
    }

    /// The CSN of the last published commit.
    pub(in crate::db) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Registers a snapshot of the last published commit.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the registry.
    pub(in crate::db) fn register(&self) -> Result<u64> {
        let mut reg = health::lock(&self.registry)?;
        let csn = self.visible();
        assert!(
            csn >= self.too_old_below.load(Ordering::Acquire),
            "a new snapshot is never too old"
        );
        reg.live
            .entry(csn)
            .and_modify(|e| e.0 += 1)
            .or_insert((1, Instant::now()));
        Ok(csn)
    }

    /// Ends a snapshot taken at `csn` (a given-up one is no longer counted).
    pub(in crate::db) fn release(&self, csn: u64) {
        // Counting only: a panic cannot leave the registry half changed.
        let mut reg = health::lock_even_poisoned(&self.registry);
        if csn < self.too_old_below.load(Ordering::Acquire) {
            assert!(!reg.live.contains_key(&csn), "a given-up snapshot is gone");
            return;
        }
        let e = reg
            .live
            .get_mut(&csn)
            .expect("a live snapshot is registered");
        assert!(e.0 > 0, "a registered CSN counts its snapshots");
        e.0 -= 1;
        if e.0 == 0 {
            reg.live.remove(&csn);
        }
    }

    /// Stages commit `csn`, the one after the published one: the
    /// before-images of the keys it changes go into the store, before the
    /// commit changes a page. Called in the commit section.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the store.
    pub(in crate::db) fn stage(&self, csn: u64, versions: CommitVersions) -> Result<()> {
        let mut store = health::write(&self.store)?;
        assert_eq!(csn, self.visible() + 1, "commits are staged in order");
        assert_eq!(
            self.staged.load(Ordering::Acquire),
            csn - 1,
            "one commit is staged at a time"
        );
        self.stored
            .fetch_add(versions.len() as u64, Ordering::Relaxed);
        let mut keys = Vec::with_capacity(versions.len());
        for (key, before) in versions {
            store.bytes += version_bytes(&key, &before);
            store.versions += 1;
            // Most keys have one version: a chain starts with room for one.
            let chain = store
                .by_key
                .entry(key.clone())
                .or_insert_with(|| VecDeque::with_capacity(1));
            assert!(
                chain.back().is_none_or(|v| v.0 < csn),
                "a key's versions are in commit order"
            );
            chain.push_back((csn, before));
            keys.push(key);
        }
        if !keys.is_empty() {
            store.by_csn.push_back((csn, keys));
        }
        // Before the first page change: a reader that sees one sees this.
        self.staged.store(csn, Ordering::Release);
        Ok(())
    }

    /// Takes back staged commit `csn`, which failed: its pages are back as
    /// they were.
    pub(in crate::db) fn retract(&self, csn: u64) {
        // A poisoned store fails every later stage and read: nothing to undo.
        let Ok(mut guard) = health::write(&self.store) else {
            return;
        };
        let store = &mut *guard;
        assert_eq!(
            self.staged.load(Ordering::Acquire),
            csn,
            "only the staged commit is retracted"
        );
        let keys = match store.by_csn.back() {
            Some((last, _)) if *last == csn => store.by_csn.pop_back().expect("checked").1,
            _ => Vec::new(),
        };
        for key in keys {
            let std::collections::btree_map::Entry::Occupied(mut e) = store.by_key.entry(key)
            else {
                unreachable!("a staged key has a version");
            };
            let (vcsn, before) = e.get_mut().pop_back().expect("a chain has versions");
            assert_eq!(vcsn, csn, "a key's newest version is the staged one");
            store.bytes -= version_bytes(e.key(), &before);
            store.versions -= 1;
            if e.get().is_empty() {
                e.remove();
            }
        }
        self.staged.store(csn - 1, Ordering::Release);
    }

    /// Publishes staged commit `csn` (its pages all changed): snapshots
    /// taken from now on see it. Called in the commit section, once per
    /// commit, in CSN order; what no snapshot needs any more is dropped
    /// after the section, by [`collect`](Self::collect).
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the store.
    pub(in crate::db) fn publish(&self, csn: u64) -> Result<()> {
        // Under the store's lock: a validation sees the commit published
        // together with its versions, or neither.
        let _store = health::write(&self.store)?;
        assert_eq!(csn, self.visible() + 1, "commits are published in order");
        assert_eq!(
            self.staged.load(Ordering::Acquire),
            csn,
            "a commit is staged before it is published"
        );
        self.visible.store(csn, Ordering::Release);
        Ok(())
    }

    /// Drops the versions no live snapshot needs, giving up the oldest
    /// snapshots while the store is over its cap. Called by each commit
    /// once it has ended its own snapshot and let its row locks go, outside
    /// the commit section; the memory it drops is freed after the store's
    /// lock is let go.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the store.
    pub(in crate::db) fn collect(&self) -> Result<()> {
        let mut garbage = Garbage::default();
        {
            let mut store = health::write(&self.store)?;
            self.collect_into(&mut store, &mut garbage);
        }
        drop(garbage);
        Ok(())
    }

    /// [`collect`](Self::collect) under the store's lock: what it drops goes
    /// to `garbage`.
    fn collect_into(&self, store: &mut Store, garbage: &mut Garbage) {
        let mut reg = health::lock_even_poisoned(&self.registry);
        // Publishing takes the store's lock, held here: this stays the
        // published commit throughout.
        let visible = self.visible();
        loop {
            let oldest = reg.live.iter().next().map(|(&csn, &(count, _))| {
                assert!(count > 0, "a registered CSN counts its snapshots");
                assert!(csn <= visible, "a snapshot is of a published commit");
                (csn, count)
            });
            drop_through(store, oldest.map_or(visible, |o| o.0), garbage);
            if store.bytes <= self.cap_bytes {
                break;
            }
            // A snapshot of the published commit needs only the versions of
            // a commit being applied (staged, not published): giving it up
            // would free nothing.
            let Some((csn, count)) = oldest.filter(|o| o.0 < visible) else {
                break;
            };
            reg.live.remove(&csn);
            self.too_old_below.store(csn + 1, Ordering::Release);
            self.given_up.fetch_add(count as u64, Ordering::Relaxed);
        }
        assert!(
            store.bytes <= self.cap_bytes || reg.live.keys().next().is_none_or(|&c| c == visible),
            "over the cap only while no snapshot is left whose end frees a version"
        );
        assert_eq!(
            store.versions == 0,
            store.bytes == 0,
            "bytes count versions"
        );
    }

    /// Fails a read of the snapshot at `csn` if it was given up.
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`] then.
    pub(in crate::db) fn check_live(&self, csn: u64) -> Result<()> {
        let below = self.too_old_below.load(Ordering::Acquire);
        if csn < below {
            return Err(Error::SnapshotTooOld {
                snapshot: csn,
                oldest_kept: below,
                cap_bytes: self.cap_bytes,
            });
        }
        Ok(())
    }

    /// The value of table `table`'s `key` at snapshot `csn`, given
    /// `latest`, what the tree held when read (after the snapshot was
    /// registered, before this call).
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`] when the snapshot was given up.
    pub(in crate::db) fn read_at(
        &self,
        csn: u64,
        table: u32,
        key: &[u8],
        latest: Before,
    ) -> Result<Before> {
        assert!(csn <= self.visible(), "a snapshot is of a published commit");
        if self.staged.load(Ordering::Acquire) == csn {
            // Nothing committed or being applied since the snapshot: the
            // tree read was it.
            return Ok(latest);
        }
        let store = health::read(&self.store)?;
        self.check_live(csn)?;
        // A read allocates nothing for the look-up.
        let found = tables::with_qualified(table, key, |q| {
            store
                .by_key
                .get(q)
                .and_then(|c| newer_than(c, csn))
                .cloned()
        });
        match found {
            Some(before) => Ok(before),
            None => Ok(latest),
        }
    }

    /// Turns `entries`, what the tree held in `(lo, hi)` when read (in key
    /// order, or descending with `rev`), into what it held at snapshot `csn`.
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`] when the snapshot was given up.
    pub(in crate::db) fn batch_at(
        &self,
        csn: u64,
        table: u32,
        (lo, hi): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        rev: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        assert!(csn <= self.visible(), "a snapshot is of a published commit");
        if self.staged.load(Ordering::Acquire) == csn {
            return Ok(entries);
        }
        let store = health::read(&self.store)?;
        self.check_live(csn)?;
        if !nonempty(lo, hi) {
            return Ok(entries);
        }
        let changed: Vec<(&[u8], &Before)> = store
            .by_key
            .range::<Vec<u8>, _>(tables::qualify_range(table, lo, hi))
            .filter_map(|(k, chain)| newer_than(chain, csn).map(|b| (&k[tables::ID_BYTES..], b)))
            .collect();
        if changed.is_empty() {
            return Ok(entries);
        }
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = entries.into_iter().collect();
        for (k, before) in changed {
            match before {
                Some(v) => merged.insert(k.to_vec(), v.clone()),
                None => merged.remove(k),
            };
        }
        let out: Vec<_> = if rev {
            merged.into_iter().rev().collect()
        } else {
            merged.into_iter().collect()
        };
        Ok(out)
    }

    /// The first of `keys`, or of the keys in `ranges`, that a commit after
    /// `csn` changed, with what it was ("the key" or "a key in a range it
    /// read"); `None` when none was. Complete while the snapshot at `csn`
    /// is live: every commit since stored a version of every key it changed
    /// (see the module invariants).
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`] when the snapshot was given up (what
    /// changed since is no longer known).
    pub(in crate::db) fn changed_since<'k>(
        &self,
        csn: u64,
        mut keys: impl Iterator<Item = &'k [u8]>,
        ranges: &[KeyRange],
    ) -> Result<Option<(Vec<u8>, &'static str)>> {
        if self.visible() == csn {
            // Nothing published since the snapshot, which is then the
            // newest and never given up: no look-up, no lock.
            return Ok(None);
        }
        // The store's lock first: a collection (which may give the snapshot
        // up and drop versions it needs) cannot run between the liveness
        // check and the look-up.
        let store = health::read(&self.store)?;
        self.check_live(csn)?;
        let visible = self.visible();
        assert!(csn <= visible, "a snapshot is of a published commit");
        if visible == csn {
            return Ok(None);
        }
        // A commit staged but not published (only while a transaction
        // that writes nothing validates beside the commit section) has not
        // changed anything yet.
        let newer = |chain: &VecDeque<(u64, Before)>| {
            chain.iter().rev().any(|v| v.0 > csn && v.0 <= visible)
        };
        if let Some(k) = keys.find(|k| store.by_key.get(*k).is_some_and(newer)) {
            return Ok(Some((k.to_vec(), "the key")));
        }
        for (lo, hi) in ranges {
            if !nonempty(lo, hi) {
                continue;
            }
            let hit = store
                .by_key
                .range::<Vec<u8>, _>((lo.clone(), hi.clone()))
                .find(|(_, chain)| newer(chain));
            if let Some((k, _)) = hit {
                return Ok(Some((k.clone(), "a key in a range it read")));
            }
        }
        Ok(None)
    }

    /// What the store reports.
    pub(in crate::db) fn stats(&self) -> SnapshotStats {
        let (bytes, versions) = {
            let s = health::read_even_poisoned(&self.store);
            (s.bytes, s.versions)
        };
        let reg = health::lock_even_poisoned(&self.registry);
        let active: usize = reg.live.values().map(|e| e.0).sum();
        let oldest = reg
            .live
            .values()
            .map(|e| e.1.elapsed())
            .max()
            .unwrap_or(Duration::ZERO);
        SnapshotStats {
            active_snapshots: active as u64,
            oldest_snapshot_ms: oldest.as_millis() as u64,
            version_store_bytes: bytes as u64,
            versions: versions as u64,
            versions_stored: self.stored.load(Ordering::Relaxed),
            version_store_cap_bytes: self.cap_bytes as u64,
            snapshots_too_old: self.given_up.load(Ordering::Relaxed),
            commit_seq: self.visible(),
        }
    }
}

/// The before-image of the oldest version in `chain` newer than `csn`.
fn newer_than(chain: &VecDeque<(u64, Before)>, csn: u64) -> Option<&Before> {
    let i = chain.partition_point(|v| v.0 <= csn);
    chain.get(i).map(|v| &v.1)
}

/// What a version of `key` holding `before` counts against the cap.
fn version_bytes(key: &[u8], before: &Before) -> usize {
    2 * key.len() + before.as_ref().map_or(0, Vec::len) + VERSION_OVERHEAD_BYTES
}

/// What garbage collection took out of the store: freed once the store's
/// lock is let go.
#[derive(Default)]
struct Garbage {
    /// Each dropped commit's keys.
    keys: Vec<Vec<Vec<u8>>>,
    /// The dropped before-images.
    befores: Vec<Before>,
    /// The emptied chains, with their keys in the map.
    chains: Vec<(Vec<u8>, Chain)>,
}

/// Drops every version with CSN at or below `horizon` into `garbage`.
fn drop_through(store: &mut Store, horizon: u64, garbage: &mut Garbage) {
    while store.by_csn.front().is_some_and(|c| c.0 <= horizon) {
        let (csn, keys) = store.by_csn.pop_front().expect("front checked");
        for key in &keys {
            let chain = store
                .by_key
                .get_mut(key)
                .expect("a commit's keys have versions");
            let (vcsn, before) = chain.pop_front().expect("a chain has versions");
            assert_eq!(
                vcsn, csn,
                "the oldest version of a key is the oldest commit's"
            );
            if chain.is_empty() {
                let emptied = store.by_key.remove_entry(key).expect("found above");
                garbage.chains.push(emptied);
            }
            store.bytes -= version_bytes(key, &before);
            store.versions -= 1;
            garbage.befores.push(before);
        }
        garbage.keys.push(keys);
    }
}

/// A registered snapshot; dropping the last handle of it ends it.
pub(crate) struct Snapshot<'db> {
    store: &'db VersionStore,
    csn: u64,
}

impl<'db> Snapshot<'db> {
    /// Registers a snapshot of the last published commit.
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the registry.
    pub(in crate::db) fn take(store: &'db VersionStore) -> Result<Self> {
        Ok(Snapshot {
            store,
            csn: store.register()?,
        })
    }

    /// The commit this snapshot sees.
    pub(in crate::db) fn csn(&self) -> u64 {
        self.csn
    }

    /// Before each descent of a named table: fails once the snapshot was
    /// given up. A dropped table's pages are freed once no live snapshot
    /// predates the drop, which a given-up one no longer counts as: its
    /// reader must not descend pages that may be free (a descent that a
    /// freeing step crosses runs again, and comes here first).
    ///
    /// # Errors
    /// [`Error::SnapshotTooOld`].
    pub(in crate::db) fn check_reachable(&self, tree: &tables::Tree) -> Result<()> {
        match tree {
            tables::Tree::Table(_) => self.store.check_live(self.csn),
            tables::Tree::Default => Ok(()),
        }
    }

    /// The store it reads.
    pub(in crate::db) fn store(&self) -> &'db VersionStore {
        self.store
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        self.store.release(self.csn);
    }
}

/// Whether `(from, to)` can hold any key; an inverted range is empty, never a
/// panic.
pub(in crate::db) fn nonempty(from: &Bound<Vec<u8>>, to: &Bound<Vec<u8>>) -> bool {
    match (from, to) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}

#[cfg(test)]
mod tests;
