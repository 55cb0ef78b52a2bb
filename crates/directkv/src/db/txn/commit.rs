//! Applying one transaction to the tree, logging every page change.
//!
//! The protocol, in the commit section under the tree's write lock (one
//! transaction applies at a time; readers take no lock: they read each page
//! under its latch and retry a descent a structure change crossed, see
//! [`super::shape`]):
//! 1. every page the tree changes is held in the pool (pinned, never written)
//!    and its change logged as a page record: a full image at its first change
//!    since the latest checkpoint began (torn-page protection), else the changed
//!    byte ranges;
//! 2. a commit record follows, carrying the new root, page count and free list;
//! 3. every held page is released, marked dirty at the commit record's end LSN.
//!
//! Because a page's LSN is its last commit's end, the WAL rule (log durable up
//! to the page LSN before the page is written) also guarantees that no page
//! ever reaches disk with changes of a transaction whose commit record is not
//! durable: redo-only recovery suffices.
//!
//! If anything fails before step 2, every held page gets its before-image back
//! and an abort record is written, so the tree is as it was before the commit.
//!
//! The commit section never reads the disk: unless told to read through, a
//! page not in the pool fails the attempt ([`CommitCtx::missed`] names it),
//! which is rolled back so the caller can read the page outside the section
//! and try again.
//!
//! The pipeline reaches the rest of the engine only through [`CommitEnv`]
//! (pool, log, shape, spare buffers, clock, summaries), so its tests below
//! run it over a bare pool and log without a database.
//!
//! Invariants:
//! - A page change that splits a page, frees one, changes a branch or
//!   moves the root happens inside a structure change of [`super::shape`],
//!   which ends once the key that needed it is applied
//!   ([`CommitCtx::settle`]), and at the latest when the context ends.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::super::checkpoint::summary::Summaries;
use super::super::engine_log::{EngineLog, Pool};
use super::super::records::{self, Meta};
use super::super::stats::Counters;
use super::super::stats::RecordCounts;
use super::core::SpareBuffers;
use super::shape::TreeShape;
use super::tables::{self, TableState, Tree};
use crate::btree::node;
use crate::btree::tree::{Pages, PagesMut};
use crate::buffer::{Access, Held};
use crate::error::{Error, Result};
use crate::format::{page, PageId, TxnId};
use crate::io::Storage;
use crate::lsn::Lsn;

/// Read-only page access through the pool.
pub(crate) struct PoolPages<'a, S: Storage> {
    pub pool: &'a Pool<S>,
}

impl<S: Storage> Pages for PoolPages<'_, S> {
    fn read<R>(&self, no: PageId, access: Access, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let p = self.pool.read(no, access)?;
        Ok(f(p.data()))
    }
    fn page_bytes(&self) -> usize {
        self.pool.page_bytes()
    }
    fn corruption(&self, no: PageId, what: &str) -> Error {
        self.pool.page_corruption(no, what)
    }
}

/// Page access that never reads: a page not in the pool fails the operation
/// (readahead, a hint, gives up rather than read a branch).
pub(crate) struct CachedPages<'a, S: Storage> {
    pub pool: &'a Pool<S>,
}

impl<S: Storage> Pages for CachedPages<'_, S> {
    fn read<R>(&self, no: PageId, access: Access, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        match self.pool.try_read(no, access) {
            Some(p) => Ok(f(p.data())),
            None => Err(crate::error::Error::CacheExhausted { frames: 0 }),
        }
    }
    fn page_bytes(&self) -> usize {
        self.pool.page_bytes()
    }
    fn corruption(&self, no: PageId, what: &str) -> Error {
        self.pool.page_corruption(no, what)
    }
}

/// What the commit pipeline needs from the rest of the engine, and no
/// more (Pebble's `commitEnv`): the pages, the log it appends to, the
/// shape readers descend by, the spare buffers, the clock of commit times,
/// and the summary of changed pages. Built by
/// [`Inner::commit_env`](super::super::engine::Inner::commit_env) in the engine,
/// and over a bare pool and log in this file's tests.
pub(crate) struct CommitEnv<'a, S: Storage> {
    /// The buffer pool the pages are changed in.
    pub(in crate::db) pool: &'a Pool<S>,
    /// The log the page and commit records are appended to (open).
    pub(in crate::db) log: &'a EngineLog<S>,
    /// The structure sequence readers descend by.
    pub(in crate::db) shape: &'a TreeShape,
    /// Page-sized buffers to borrow.
    pub(in crate::db) spare: &'a SpareBuffers,
    /// The clock of commit times (and transaction ids).
    pub(in crate::db) clock: &'a Counters,
    /// Where the pages a commit changed are noted for the next summary.
    pub(in crate::db) summaries: &'a Summaries,
    /// Whether full page images are compressed.
    pub(in crate::db) compress_page_images: bool,
}

struct HeldPage {
    held: Held,
    before: Vec<u8>,
}

/// A table (or the catalog) a transaction changes: its root before the
/// transaction and now.
pub(crate) struct TouchedTree {
    /// The table.
    pub(crate) state: Arc<TableState>,
    /// Its root when the transaction first reached it.
    pub(crate) before: Option<PageId>,
    /// Its root now.
    pub(crate) now: Option<PageId>,
    /// Its pages now: those of `state` as of the last commit, plus the
    /// ones this transaction allocated, less the ones it freed.
    pub(crate) pages: u64,
}

/// How an attempt to apply a transaction ended.
pub(crate) enum Applied {
    /// Applied and logged; the commit record ends at this LSN.
    Done(Lsn),
    /// Rolled back: this page was not in the pool.
    Missed(PageId),
}

/// A transaction being applied.
pub(crate) struct CommitCtx<'a, S: Storage> {
    env: CommitEnv<'a, S>,
    pub meta: Meta,
    /// Read missing pages from disk; otherwise a miss fails the attempt.
    pub read_through: bool,
    /// The page whose absence failed this attempt.
    missed: std::cell::Cell<Option<PageId>>,
    txn: TxnId,
    horizon: Lsn,
    held: HashMap<PageId, HeldPage>,
    order: Vec<PageId>,
    scratch: Vec<u8>,
    rec: Vec<u8>,
    pub full_images: u64,
    pub full_image_bytes: u64,
    pub deltas: u64,
    pub logged_bytes: u64,
    /// Inside a structure change begun by this transaction.
    reshaping: bool,
    /// The root when the transaction began applying.
    root_before: PageId,
    /// The tree the page changes are for ([`tables::DEFAULT`] or a key of
    /// `trees`).
    current: u32,
    /// The tables it reached, by id.
    trees: BTreeMap<u32, TouchedTree>,
}

impl<'a, S: Storage> CommitCtx<'a, S> {
    pub fn new(env: CommitEnv<'a, S>, meta: Meta, txn: TxnId, horizon: Lsn) -> Self {
        let (scratch, rec) = (env.spare.take(), env.spare.take());
        CommitCtx {
            env,
            meta,
            read_through: true,
            missed: std::cell::Cell::new(None),
            txn,
            horizon,
            held: HashMap::new(),
            order: Vec::new(),
            scratch,
            rec,
            full_images: 0,
            full_image_bytes: 0,
            deltas: 0,
            logged_bytes: 0,
            reshaping: false,
            root_before: meta.root,
            current: tables::DEFAULT,
            trees: BTreeMap::new(),
        }
    }

    /// Makes `tree` the one the next page changes are for. A table without
    /// a tree gets an empty root leaf first (inside a structure change: its
    /// root moves).
    pub fn select(&mut self, tree: &Tree) -> Result<()> {
        let Tree::Table(state) = tree else {
            self.current = tables::DEFAULT;
            return Ok(());
        };
        let root = state.root();
        self.trees.entry(state.id).or_insert_with(|| TouchedTree {
            state: Arc::clone(state),
            before: root,
            now: root,
            pages: state.pages(),
        });
        self.current = state.id;
        if self.trees[&state.id].now.is_none() {
            let leaf = self.allocate(node::init_leaf)?;
            self.set_root(leaf);
        }
        assert!(
            self.trees[&state.id].now.is_some(),
            "a selected table has a tree"
        );
        Ok(())
    }

    /// The tables it reached, by id.
    pub fn touched(&self) -> &BTreeMap<u32, TouchedTree> {
        &self.trees
    }

    /// Counts a page of tree `id` allocated (`+1`) or freed (`-1`): the
    /// default keyspace and the catalog keep no count.
    ///
    /// # Errors
    /// [`Error::Corruption`] when the count (from the table's info row)
    /// is smaller than the pages the table frees.
    fn count_pages(&mut self, id: u32, delta: i64) -> Result<()> {
        if id < tables::FIRST_ID {
            return Ok(());
        }
        let t = self.trees.get_mut(&id).expect("a counted tree is selected");
        t.pages = t
            .pages
            .checked_add_signed(delta)
            .ok_or_else(|| Error::Corruption {
                path: "catalog".into(),
                offset: 0,
                page: None,
                detail: format!("table {id}'s info row counts fewer pages than the table frees"),
            })?;
        Ok(())
    }

    /// Begins a structure change, unless one of this transaction is under
    /// way.
    fn reshape(&mut self) {
        if !self.reshaping {
            self.env.shape.begin();
            self.reshaping = true;
        }
    }

    /// Ends the structure change under way, if any: the key being applied
    /// is in place, and readers may descend again.
    pub fn settle(&mut self) {
        if self.reshaping {
            assert_eq!(
                self.env.shape.root(),
                self.meta.root,
                "readers descend from the root the tree has"
            );
            if let Some(t) = self.trees.get(&self.current) {
                assert_eq!(
                    t.state.root(),
                    t.now,
                    "readers descend from the root the table has"
                );
            }
            self.env.shape.end();
            self.reshaping = false;
        }
    }

    fn wal(&self) -> &crate::wal::Wal<S> {
        self.env.log.wal()
    }

    /// Pages held so far.
    pub fn held_pages(&self) -> usize {
        self.held.len()
    }

    /// The page whose absence failed this attempt, if one did.
    pub fn missed(&self) -> Option<PageId> {
        self.missed.get()
    }

    /// What it logged so far.
    pub fn counts(&self) -> RecordCounts {
        RecordCounts {
            full_images: self.full_images,
            full_image_bytes: self.full_image_bytes,
            deltas: self.deltas,
            logged_bytes: self.logged_bytes,
        }
    }

    /// The miss of page `no`: remembered, and an error that ends the attempt.
    fn miss(&self, no: PageId) -> Error {
        assert!(!self.read_through, "a read-through attempt never misses");
        if self.missed.get().is_none() {
            self.missed.set(Some(no));
        }
        Error::CacheExhausted { frames: 0 }
    }

    /// Page `no`, exclusively latched: created (`fresh`), found in the
    /// pool, or read unless this attempt must not read.
    fn fetch_mut(
        &mut self,
        no: PageId,
        fresh: bool,
    ) -> Result<crate::buffer::PageMut<'a, S, super::super::engine_log::EngineLog<S>>> {
        let pool = &self.env.pool;
        if fresh {
            return pool.create(no);
        }
        if self.read_through {
            return pool.write(no);
        }
        match pool.try_write(no) {
            Some(p) => Ok(p),
            None => Err(self.miss(no)),
        }
    }

    /// Changes page `no` (fresh: not read from disk) and logs the change.
    fn change<R>(&mut self, no: PageId, fresh: bool, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        assert_eq!(
            self.order.len(),
            self.held.len(),
            "each held page is ordered once"
        );
        let got = self.fetch_mut(no, fresh);
        let missed = self.missed.get().is_some();
        let mut p = got.map_err(|e| match e {
            Error::CacheExhausted { frames } if !missed => Error::TransactionTooLarge {
                pages: self.held.len(),
                frames,
            },
            e => e,
        })?;
        if node::page_type(p.data()) == Some(page::PageType::Branch) {
            self.reshape();
        }
        let first = !self.held.contains_key(&no);
        let imaged = first && {
            let mut before = self.env.spare.take();
            before.extend_from_slice(p.data());
            let held = p.hold();
            self.hold(no, fresh, before, held)
        };
        if imaged {
            // The page's full image is logged after the change.
            let r = f(p.data_mut());
            let compress = self.env.compress_page_images;
            records::encode_full_image_into(&mut self.rec, self.txn, no, p.data(), compress);
            drop(p);
            self.log_page(true)?;
            return Ok(r);
        }
        // At a page's first change its before-image is the page as it was;
        // later changes in the same transaction diff against a copy.
        let (r, ranges) = if first {
            let r = f(p.data_mut());
            let before = &self.held.get(&no).expect("held above").before;
            (r, records::diff(before, p.data()))
        } else {
            self.scratch.clear();
            self.scratch.extend_from_slice(p.data());
            let r = f(p.data_mut());
            (r, records::diff(&self.scratch, p.data()))
        };
        if ranges.is_empty() {
            return Ok(r);
        }
        let changed: usize = ranges.iter().map(|r| r.1).sum();
        let full = changed * 2 > p.data().len();
        if full {
            let compress = self.env.compress_page_images;
            records::encode_full_image_into(&mut self.rec, self.txn, no, p.data(), compress);
        } else {
            records::encode_page_into(&mut self.rec, self.txn, no, false, &ranges, p.data());
        }
        drop(p);
        self.log_page(full)?;
        Ok(r)
    }

    /// Holds page `no` at its first change in this transaction, keeping its
    /// before-image; returns whether its change
    /// must be logged as a full image: a fresh page has no image on disk to
    /// repair from, and a page not changed since before the latest
    /// checkpoint began needs its full image logged once (a torn write of it
    /// must be repairable).
    fn hold(&mut self, no: PageId, fresh: bool, before: Vec<u8>, held: Held) -> bool {
        let imaged = fresh || page::page_lsn(&before) <= self.horizon;
        let new = self.held.insert(no, HeldPage { held, before }).is_none();
        assert!(new, "a page is held once per transaction");
        self.order.push(no);
        assert_eq!(
            self.order.len(),
            self.held.len(),
            "each held page is ordered once"
        );
        imaged
    }

    /// Appends the page record encoded in `rec` and counts it.
    fn log_page(&mut self, full: bool) -> Result<()> {
        assert!(self.rec.len() > 17, "a page record has a header and a body");
        self.wal().append(records::PAGE, &self.rec)?;
        let len = self.rec.len() as u64;
        if full {
            self.full_images += 1;
            self.full_image_bytes += len;
        } else {
            self.deltas += 1;
        }
        self.logged_bytes += len;
        Ok(())
    }

    /// Writes the commit record and releases every held page at its LSN.
    pub fn commit(mut self) -> Result<Lsn> {
        self.settle();
        let rec = records::encode_commit(self.txn, &self.meta, self.env.clock.commit_time_us());
        let lsn = match self.wal().append(records::COMMIT, &rec) {
            Ok(lsn) => lsn,
            Err(e) => {
                self.rollback();
                return Err(e);
            }
        };
        // Every page is stamped with the commit's end, which is past the
        // image horizon this transaction started under.
        assert!(lsn > self.horizon, "a commit ends past its image horizon");
        self.env.summaries.note(&self.order);
        for t in self.trees.values() {
            t.state.set_pages(t.pages);
        }
        for no in std::mem::take(&mut self.order) {
            let h = self.held.remove(&no).expect("held page");
            self.env.pool.release_held(h.held, Some(lsn));
            self.env.spare.give(h.before);
        }
        assert!(self.held.is_empty(), "a commit releases every page it held");
        Ok(lsn)
    }

    /// Puts every held page back as it was and logs an abort.
    pub fn rollback(mut self) {
        // Pages go back one at a time: readers wait until all are back.
        self.reshape();
        for no in std::mem::take(&mut self.order).into_iter().rev() {
            let h = self.held.remove(&no).expect("held page");
            if let Ok(mut p) = self.env.pool.write(no) {
                p.data_mut().copy_from_slice(&h.before);
            }
            self.env.pool.release_held(h.held, None);
            self.env.spare.give(h.before);
        }
        assert!(
            self.held.is_empty(),
            "a rollback releases every page it held"
        );
        self.meta.root = self.root_before;
        self.env.shape.set_root(self.root_before);
        for t in self.trees.values_mut() {
            t.state.set_root(t.before.unwrap_or(PageId::ZERO));
            t.now = t.before;
        }
        self.settle();
        // Best effort: recovery ignores page records without a commit anyway.
        let _ = self
            .wal()
            .append(records::ABORT, &records::encode_abort(self.txn));
    }
}

impl<S: Storage> Drop for CommitCtx<'_, S> {
    fn drop(&mut self) {
        if self.reshaping {
            if std::thread::panicking() {
                // A panic mid-apply: the pages are neither committed nor put
                // back. The sequence stays odd, so readers end up under the
                // tree's lock, which the unwinding commit section poisons,
                // and get an error instead of a torn tree.
                return self.give_back_buffers();
            }
            // Every error path rolls back or commits, which settle; this
            // is a context dropped unused past a structure change.
            self.env.shape.set_root(self.meta.root);
            self.settle();
        }
        self.give_back_buffers();
    }
}

impl<S: Storage> CommitCtx<'_, S> {
    /// Returns the context's page buffers to the spares.
    fn give_back_buffers(&mut self) {
        let spare = &self.env.spare;
        spare.give(std::mem::take(&mut self.scratch));
        spare.give(std::mem::take(&mut self.rec));
    }
}

impl<S: Storage> Pages for CommitCtx<'_, S> {
    fn read<R>(&self, no: PageId, access: Access, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if self.read_through {
            let p = self.env.pool.read(no, access)?;
            return Ok(f(p.data()));
        }
        match self.env.pool.try_read(no, access) {
            Some(p) => Ok(f(p.data())),
            None => Err(self.miss(no)),
        }
    }
    fn page_bytes(&self) -> usize {
        self.env.pool.page_bytes()
    }
    fn corruption(&self, no: PageId, what: &str) -> Error {
        self.env.pool.page_corruption(no, what)
    }
}

impl<S: Storage> PagesMut for CommitCtx<'_, S> {
    fn modify<R>(&mut self, no: PageId, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.change(no, false, f)
    }

    fn allocate(&mut self, init: impl FnOnce(&mut [u8])) -> Result<PageId> {
        self.take_free_page(init)
    }

    fn restructure(&mut self) {
        self.reshape();
    }

    fn free(&mut self, no: PageId) -> Result<()> {
        self.give_free_page(no)
    }

    fn root(&self) -> PageId {
        match self.current {
            tables::DEFAULT => self.meta.root,
            id => self.trees[&id].now.expect("a selected table has a tree"),
        }
    }

    fn set_root(&mut self, no: PageId) {
        self.reshape();
        if self.current == tables::DEFAULT {
            self.meta.root = no;
            self.env.shape.set_root(no);
            return;
        }
        let t = self
            .trees
            .get_mut(&self.current)
            .expect("the selected table is reached");
        t.now = Some(no);
        t.state.set_root(no);
        if self.current == tables::CATALOG {
            self.meta.catalog = no;
        }
    }
}

mod free_sets;

/// The commit pipeline over a bare pool and log on the simulated disk, with
/// no `Database` around it: what [`CommitEnv`] hands it is all it uses.
#[cfg(test)]
#[cfg(feature = "sim")]
mod tests;
