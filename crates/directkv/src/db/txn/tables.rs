//! Named tables: each its own B+tree, written and read by the same
//! transactions as the default keyspace (see `docs/tables.md`).
//!
//! A table is known by a `u32` id that is never reused. Id 0 is the
//! default keyspace, whose root is `Meta::root`; id 1 is the catalog, the
//! tree of the names and roots of the others, whose root is
//! `Meta::catalog`; tables created by users take ids from 2 up. The catalog
//! holds two rows per table:
//!
//! | key | value | read by |
//! |---|---|---|
//! | `n` + name | id (u32 big-endian) | snapshots: a logical row, written, locked and versioned like any key |
//! | `i` + id (u32 big-endian) | root page u64, state u8 (0 live, 1 dropped: its pages are being freed), pages u64 (tree and overflow), all little-endian but the key | open and `check` only: written in the commit section, never versioned |
//! | `m` | the next table id (u32 big-endian) | open only: written by each commit that creates a table |
//!
//! Everything a transaction keeps by key (its writes, its row locks, the
//! versions snapshots read, the keys and ranges validation checks) is keyed
//! by the *qualified* key: the table id (4 bytes, big-endian) then the
//! user's key, so the same bytes in two tables are two keys, and the keys of
//! one table are one contiguous range.
//!
//! Invariants:
//! - A table's root atomic moves only inside a structure change of the
//!   commit section (as the default root does, `super::shape`), so a reader
//!   that saw the structure sequence unchanged read one tree.
//! - A root is 0 only while the table has never been written; once it has
//!   a root leaf it keeps a root until its pages are freed after a drop.
//! - A dropped table's pages are freed only once no snapshot older than the
//!   drop is live, and only by the freer (`super::drops`).
//! - A table's page count is the pages whose header names it: every commit
//!   that allocates or frees one of its pages writes its info row, in the
//!   same commit (`CommitCtx::allocate` and `free` count them).

// Table ids in keys are big-endian so that byte order is id order: one
// table's qualified keys are one contiguous range.
#![allow(clippy::big_endian_bytes)]

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::format::PageId;
use crate::health;

mod rows;

pub(crate) use rows::{
    decode_name_value, info_key, info_value, load, name_key, name_value, names, next_id_value,
    InfoRow, NAME_PREFIX, NEXT_ID_KEY,
};

/// A key range, by its bounds.
pub(in crate::db) type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The default keyspace's id.
pub(crate) const DEFAULT: u32 = 0;
/// The catalog's id.
pub(crate) const CATALOG: u32 = 1;
/// The first id a created table gets.
pub(crate) const FIRST_ID: u32 = 2;
/// Bytes of the table id in front of a qualified key.
pub(crate) const ID_BYTES: usize = 4;
/// The longest table name, in bytes.
pub const TABLE_NAME_MAX: usize = 255;
/// A `created` or `dropped` CSN not reached yet.
const NEVER: u64 = u64::MAX;

/// State of a table in an `i` row: live.
pub(crate) const LIVE: u8 = 0;
/// State of a table in an `i` row: dropped, its pages being freed.
pub(crate) const DROPPED: u8 = 1;

/// A named table of a database: a handle got from
/// [`WriteTxn::create_table`](crate::WriteTxn::create_table) or
/// `open_table`, valid in any later transaction of the same database (a
/// table created by a transaction that has not committed is known only to
/// it). Cheap to clone; its operations look nothing up by name.
#[derive(Clone)]
pub struct Table {
    pub(crate) state: Arc<TableState>,
}

impl Table {
    /// The table's id: unique in its database, never reused.
    pub fn id(&self) -> u32 {
        self.state.id
    }
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("id", &self.state.id).finish()
    }
}

/// A table as [`ReadTxn::list_tables`](crate::ReadTxn::list_tables) lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TableInfo {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u32,
}

/// A table's in-memory state, shared by every handle of it.
pub(crate) struct TableState {
    /// Its id.
    pub(crate) id: u32,
    /// The registry (one per open database) it belongs to.
    owner: u64,
    /// Its root page's raw number; 0 while it has no tree.
    root: AtomicU64,
    /// The CSN of the commit that created it ([`NEVER`] until that commit
    /// is applied; 0 for a table that existed when the database opened).
    created: AtomicU64,
    /// The CSN of the commit that dropped it ([`NEVER`] while live; 0 for
    /// one dropped before the database opened).
    dropped: AtomicU64,
    /// Its pages as of the last commit applied (tree and overflow).
    pages: AtomicU64,
    /// Its name as of the last commit applied (figures only: operations
    /// go by id).
    name: Mutex<String>,
}

impl TableState {
    /// A table's state: `created` and `dropped` as described on the fields.
    fn new(owner: u64, id: u32, root: PageId, created: u64, dropped: u64) -> Self {
        assert!(id >= CATALOG, "the default keyspace has no table state");
        TableState {
            id,
            owner,
            root: AtomicU64::new(root.get()),
            created: AtomicU64::new(created),
            dropped: AtomicU64::new(dropped),
            pages: AtomicU64::new(0),
            name: Mutex::new(String::new()),
        }
    }

    /// Its pages as of the last commit applied.
    pub(crate) fn pages(&self) -> u64 {
        self.pages.load(Ordering::Acquire)
    }

    /// A commit that changed its page count to `pages` is applied (in the
    /// commit section, after the commit record).
    pub(crate) fn set_pages(&self, pages: u64) {
        assert!(
            pages == 0 || self.root().is_some(),
            "only a table with a tree has pages"
        );
        self.pages.store(pages, Ordering::Release);
    }

    /// Its name as of the last commit applied.
    pub(crate) fn name(&self) -> String {
        // Figures only: a poisoned lock still holds a whole name.
        self.name.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A commit that named it `name` is applied (or it was loaded so).
    pub(crate) fn set_name(&self, name: &str) {
        assert!(check_name(name).is_ok(), "a table's name is a valid one");
        *self.name.lock().unwrap_or_else(|p| p.into_inner()) = name.to_owned();
    }

    /// Its root, `None` while it has no tree.
    pub(crate) fn root(&self) -> Option<PageId> {
        match self.root.load(Ordering::Acquire) {
            0 => None,
            r => Some(PageId::new(r)),
        }
    }

    /// Moves its root: only in the commit section, inside a structure
    /// change (see the module invariants).
    pub(crate) fn set_root(&self, root: PageId) {
        self.root.store(root.get(), Ordering::Release);
    }

    /// Whether a snapshot at `csn` sees the table: created at or before it,
    /// dropped after it.
    pub(crate) fn visible_at(&self, csn: u64) -> bool {
        self.created.load(Ordering::Acquire) <= csn && csn < self.dropped.load(Ordering::Acquire)
    }

    /// Whether no commit has dropped it.
    pub(crate) fn is_live(&self) -> bool {
        self.dropped.load(Ordering::Acquire) == NEVER
    }

    /// Whether its creating commit has been applied.
    pub(crate) fn is_created(&self) -> bool {
        self.created.load(Ordering::Acquire) != NEVER
    }

    /// The CSN of the commit that dropped it, if one did.
    pub(crate) fn dropped_at(&self) -> Option<u64> {
        match self.dropped.load(Ordering::Acquire) {
            NEVER => None,
            csn => Some(csn),
        }
    }

    /// Its creating commit, `csn`, is applied (in the commit section).
    pub(crate) fn mark_created(&self, csn: u64) {
        let was = self.created.swap(csn, Ordering::AcqRel);
        assert_eq!(was, NEVER, "a table is created once");
    }

    /// Its dropping commit, `csn`, is applied (in the commit section;
    /// through [`Registry::mark_dropped`], which counts it).
    fn mark_dropped(&self, csn: u64) {
        let was = self.dropped.swap(csn, Ordering::AcqRel);
        assert_eq!(was, NEVER, "a table is dropped once");
    }
}

/// Registries made so far in this process: each open database's tables
/// carry its number.
static REGISTRIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Which tree an operation reads or writes.
#[derive(Clone)]
pub(crate) enum Tree {
    /// The default keyspace.
    Default,
    /// A table (or the catalog).
    Table(Arc<TableState>),
}

impl Tree {
    /// Its id.
    pub(crate) fn id(&self) -> u32 {
        match self {
            Tree::Default => DEFAULT,
            Tree::Table(t) => t.id,
        }
    }

    /// Its root: `default_root` for the default keyspace, `None` for a
    /// table without a tree.
    pub(crate) fn root_or(&self, default_root: PageId) -> Option<PageId> {
        match self {
            Tree::Default => Some(default_root),
            Tree::Table(t) => t.root(),
        }
    }
}

/// Every table of an open database, by id, with the catalog's state and
/// the next id to give.
pub(crate) struct Registry {
    /// This registry's own number (see [`REGISTRIES`]).
    owner: u64,
    by_id: RwLock<HashMap<u32, Arc<TableState>>>,
    /// Of those, the dropped ones (not yet freed): the freer's and the
    /// stats' look-up without walking every table.
    dropped: AtomicUsize,
    next_id: AtomicU32,
    catalog: Arc<TableState>,
}

impl Registry {
    /// The registry of a database whose catalog is rooted at `catalog`
    /// (0: none yet), holding `tables`, loaded from its `i` rows, named by
    /// `names` (its `n` rows), whose next id is at least `next` (its `m`
    /// row).
    pub(crate) fn new(
        catalog: PageId,
        tables: Vec<InfoRow>,
        names: &HashMap<u32, String>,
        next: u32,
    ) -> Self {
        let owner = REGISTRIES.fetch_add(1, Ordering::Relaxed);
        assert!(
            tables.iter().all(|t| t.id < u32::MAX),
            "a loaded table's id is one a table can have"
        );
        let next = tables
            .iter()
            .map(|t| t.id + 1)
            .max()
            .unwrap_or(FIRST_ID)
            .max(next);
        let dropped = tables.iter().filter(|t| t.dropped).count();
        let by_id: HashMap<u32, Arc<TableState>> = tables
            .into_iter()
            .map(|row| {
                let dropped = if row.dropped { 0 } else { NEVER };
                let root = row.root.unwrap_or(PageId::ZERO);
                let t = TableState::new(owner, row.id, root, 0, dropped);
                t.set_pages(row.pages);
                if let Some(name) = names.get(&row.id).filter(|_| !row.dropped) {
                    t.set_name(name);
                }
                (row.id, Arc::new(t))
            })
            .collect();
        assert!(
            by_id.keys().all(|&id| id >= FIRST_ID),
            "a loaded table has a user's id"
        );
        Registry {
            owner,
            by_id: RwLock::new(by_id),
            dropped: AtomicUsize::new(dropped),
            next_id: AtomicU32::new(next.max(FIRST_ID)),
            catalog: Arc::new(TableState::new(owner, CATALOG, catalog, 0, NEVER)),
        }
    }

    /// The state of a table a transaction is creating: it gets the next
    /// id, never given before.
    ///
    /// # Errors
    /// [`Error::Unsupported`] once every id was given.
    pub(crate) fn creating(&self) -> Result<Arc<TableState>> {
        let id = self.next_id()?;
        Ok(Arc::new(TableState::new(
            self.owner,
            id,
            PageId::ZERO,
            NEVER,
            NEVER,
        )))
    }

    /// Fails unless `t` is a table of this database (a handle of another
    /// open database would read and write pages that are not its own).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`].
    pub(crate) fn check_owns(&self, t: &TableState) -> Result<()> {
        if t.owner != self.owner {
            return Err(Error::InvalidArgument(format!(
                "table {} is a handle of another open database (or of this one before it \
                 was closed and opened again): open the table by name in this one",
                t.id
            )));
        }
        Ok(())
    }

    /// The catalog's state.
    pub(crate) fn catalog(&self) -> &Arc<TableState> {
        &self.catalog
    }

    /// The table `id`, if it was created (and not yet freed after a drop).
    ///
    /// # Errors
    /// [`Error::Poisoned`] when a thread panicked holding the registry.
    pub(crate) fn get(&self, id: u32) -> Result<Option<Arc<TableState>>> {
        if id == CATALOG {
            return Ok(Some(Arc::clone(&self.catalog)));
        }
        Ok(health::read(&self.by_id)?.get(&id).cloned())
    }

    /// The id the next created table gets: what a creating commit records
    /// (the catalog's `m` row), so that no id is given again after a reopen.
    pub(crate) fn next_unused(&self) -> u32 {
        self.next_id.load(Ordering::Acquire)
    }

    /// A new id, never given before.
    fn next_id(&self) -> Result<u32> {
        let id = self.next_id.fetch_add(1, Ordering::AcqRel);
        if id == u32::MAX {
            self.next_id.store(u32::MAX, Ordering::Release);
            return Err(Error::Unsupported {
                what: "more tables",
                detail: format!("table ids up to {} were all given", u32::MAX - 1),
            });
        }
        assert!(id >= FIRST_ID, "user ids start past the catalog's");
        Ok(id)
    }

    /// Adds a table its commit just created (after its commit record: it
    /// cannot fail).
    pub(crate) fn insert(&self, t: Arc<TableState>) {
        // An insert cannot leave the map half changed: a poisoned lock
        // (a panic elsewhere, which failed the database) is taken anyway.
        let mut by_id = self.by_id.write().unwrap_or_else(|p| p.into_inner());
        let was = by_id.insert(t.id, t);
        assert!(was.is_none(), "a table id is registered once");
    }

    /// Forgets a dropped table whose pages are all free.
    pub(crate) fn remove(&self, id: u32) -> Result<()> {
        let mut by_id = health::write(&self.by_id)?;
        let was = by_id.remove(&id);
        assert!(
            was.is_some_and(|t| !t.is_live()),
            "only a dropped table is forgotten"
        );
        let before = self.dropped.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a forgotten table was counted dropped");
        Ok(())
    }

    /// Table `t`'s drop, at commit `csn`, is applied (in the commit section).
    pub(crate) fn mark_dropped(&self, t: &TableState, csn: u64) {
        t.mark_dropped(csn);
        self.dropped.fetch_add(1, Ordering::AcqRel);
    }

    /// (tables registered, of them dropped and not yet freed).
    pub(crate) fn counts(&self) -> (usize, usize) {
        // Figures only: a poisoned lock (the database has failed) counts none.
        let all = health::read(&self.by_id).map_or(0, |m| m.len());
        let dropped = self.dropped.load(Ordering::Acquire);
        (all.max(dropped), dropped)
    }

    /// Every registered table, live or dropped, by id.
    pub(crate) fn all(&self) -> Result<Vec<Arc<TableState>>> {
        let by_id = health::read(&self.by_id)?;
        let mut all: Vec<_> = by_id.values().cloned().collect();
        all.sort_by_key(|t| t.id);
        Ok(all)
    }

    /// The pages of every registered table together, and the `n` tables
    /// with the most pages, most first (ties by id), found under the
    /// registry's lock without a handle cloned but theirs.
    pub(crate) fn largest(&self, n: usize) -> Result<(u64, Vec<Arc<TableState>>)> {
        let by_id = health::read(&self.by_id)?;
        let mut total = 0u64;
        // The n largest so far, smallest first: (pages, Reverse(id)).
        let mut top: std::collections::BinaryHeap<
            std::cmp::Reverse<(u64, std::cmp::Reverse<u32>)>,
        > = std::collections::BinaryHeap::with_capacity(n + 1);
        for t in by_id.values() {
            let pages = t.pages();
            total = total.saturating_add(pages);
            top.push(std::cmp::Reverse((pages, std::cmp::Reverse(t.id))));
            if top.len() > n {
                top.pop();
            }
        }
        let mut ids: Vec<(u64, std::cmp::Reverse<u32>)> = top.into_iter().map(|r| r.0).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let listed: Vec<Arc<TableState>> = ids
            .iter()
            .filter_map(|(_, id)| by_id.get(&id.0).cloned())
            .collect();
        assert!(listed.len() <= n, "at most n tables are listed");
        Ok((total, listed))
    }

    /// Dropped tables whose pages are still being freed.
    pub(crate) fn dropped(&self) -> Result<Vec<Arc<TableState>>> {
        if self.dropped.load(Ordering::Acquire) == 0 {
            return Ok(Vec::new());
        }
        Ok(self.all()?.into_iter().filter(|t| !t.is_live()).collect())
    }
}

/// The bytes of table `id` in front of its qualified keys.
pub(crate) fn id_prefix(id: u32) -> [u8; ID_BYTES] {
    id.to_be_bytes()
}

/// `key` of table `id`, qualified (see the module docs).
pub(crate) fn qualify(id: u32, key: &[u8]) -> Vec<u8> {
    let mut q = Vec::with_capacity(ID_BYTES + key.len());
    q.extend_from_slice(&id_prefix(id));
    q.extend_from_slice(key);
    q
}

/// Qualified keys up to this long are built on the stack by
/// [`with_qualified`]; longer ones (only long keys) on the heap.
const QUALIFIED_ON_STACK: usize = 260;

/// Runs `f` on `key` of table `id`, qualified, without allocating for a
/// key of up to 256 bytes: a look-up by a qualified key (a write's own
/// writes, the version store) need not own it.
pub(crate) fn with_qualified<R>(id: u32, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let n = ID_BYTES + key.len();
    if n > QUALIFIED_ON_STACK {
        return f(&qualify(id, key));
    }
    let mut stack = [0u8; QUALIFIED_ON_STACK];
    stack[..ID_BYTES].copy_from_slice(&id_prefix(id));
    stack[ID_BYTES..n].copy_from_slice(key);
    f(&stack[..n])
}

/// A qualified key's table id and user key.
pub(crate) fn split(q: &[u8]) -> (u32, &[u8]) {
    assert!(q.len() >= ID_BYTES, "a qualified key starts with its table");
    let (id, key) = q.split_at(ID_BYTES);
    let id = u32::from_be_bytes(id.try_into().expect("four bytes"));
    (id, key)
}

/// A qualified key as errors show it: the user's key, with its table's id
/// unless it is the default keyspace's.
pub(crate) fn shown(q: &[u8]) -> String {
    if q.len() < ID_BYTES {
        // Not qualified (a unit test's own key).
        return String::from_utf8_lossy(q).into_owned();
    }
    let (id, key) = split(q);
    let key = String::from_utf8_lossy(key);
    match id {
        DEFAULT => key.into_owned(),
        id => format!("{key} (table {id})"),
    }
}

/// The bounds of a range of table `id`'s keys, qualified: an unbounded end
/// stops at the table's own keys.
pub(crate) fn qualify_range(id: u32, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> KeyRange {
    let q = |k: &Vec<u8>| qualify(id, k);
    let lo = match lo {
        Bound::Included(k) => Bound::Included(q(k)),
        Bound::Excluded(k) => Bound::Excluded(q(k)),
        Bound::Unbounded => Bound::Included(qualify(id, &[])),
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Included(q(k)),
        Bound::Excluded(k) => Bound::Excluded(q(k)),
        Bound::Unbounded if id == u32::MAX => Bound::Unbounded,
        Bound::Unbounded => Bound::Excluded(qualify(id + 1, &[])),
    };
    (lo, hi)
}

/// Checks a table name: 1 to [`TABLE_NAME_MAX`] bytes of UTF-8 without NUL.
///
/// # Errors
/// [`Error::InvalidArgument`] saying what is wrong.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > TABLE_NAME_MAX || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "table name {name:?}: a name is 1 to {TABLE_NAME_MAX} bytes, without NUL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qualified keys order by table, then key; a table's unbounded range
    /// holds exactly its keys.
    #[test]
    fn qualified_keys_keep_tables_apart() {
        let a = qualify(2, b"zz");
        let b = qualify(3, b"");
        assert!(a < b, "table 2's keys sort before table 3's");
        assert_eq!(split(&a), (2, &b"zz"[..]));
        let (lo, hi) = qualify_range(2, &Bound::Unbounded, &Bound::Unbounded);
        let inside = |k: &[u8]| (lo.as_ref(), hi.as_ref()).contains(&k.to_vec());
        use std::ops::RangeBounds;
        assert!(inside(&a));
        assert!(inside(&qualify(2, b"")));
        assert!(!inside(&b));
        assert!(!inside(&qualify(1, b"\xff\xff")));
        assert_eq!(shown(&qualify(0, b"k")), "k");
        for len in [0, 1, 256, 257, 1024] {
            let key = vec![7u8; len];
            assert_eq!(
                with_qualified(9, &key, <[u8]>::to_vec),
                qualify(9, &key),
                "{len}"
            );
        }
        assert_eq!(shown(&qualify(7, b"k")), "k (table 7)");
    }

    /// Names are 1 to 255 bytes without NUL.
    #[test]
    fn names_are_checked() {
        assert!(check_name("").is_err());
        assert!(check_name("a\0b").is_err());
        assert!(check_name(&"x".repeat(256)).is_err());
        assert!(check_name("users").is_ok());
    }
}
