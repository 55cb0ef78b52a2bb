//! The integrity check (RELIABILITY.md I4): walks the whole database and
//! proves its structure, without recursion.
//!
//! Checked: every page verifies (checksum, own number, identity) and passes
//! structural validation; keys are in order within pages and within the fence
//! keys their parents give; branches route to tree pages; overflow chains are
//! well formed; the free list holds free pages; and reachable pages, free pages
//! and the reserved page 0 together are every page exactly once (no page is
//! shared, leaked or outside the file); no page LSN is past the log's end.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;

use super::engine::Inner;
use super::records::{Compaction, Meta};
use super::txn::commit::PoolPages;
use super::txn::tables::{self, TableState};
use crate::btree::node::{self, Value};
use crate::btree::tree::{free_epoch, free_next, free_unlisted, Pages, DEPTH_MAX};
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::page::{self, PageType, PAGE_HEADER_BYTES};
use crate::format::{le, PageId};
use crate::io::Storage;
use crate::lsn::Lsn;

/// What the check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Pages in the file, per the root state.
    pub pages: u64,
    /// Tree pages (leaves and branches).
    pub tree_pages: u64,
    /// Overflow pages.
    pub overflow_pages: u64,
    /// Free pages.
    pub free_pages: u64,
    /// Whether the engine counts its free pages: it did, and the count
    /// matched `free_pages`; or it did not (a database last written by a
    /// build that did not count them) and the check made `free_pages` its
    /// count. False only when a commit came between the walk and that.
    pub free_pages_counted: bool,
    /// Keys, of the default keyspace and every named table (the catalog's
    /// rows not counted).
    pub keys: u64,
    /// Named tables walked (those dropped whose pages are not all freed
    /// yet among them).
    pub tables: u64,
    /// Each named table: its keys and pages, by id.
    pub table_details: Vec<TableCheck>,
    /// Tree depth.
    pub depth: u64,
    /// The kind, mode and owner of the database directory, the WAL
    /// directory and every entry in them.
    pub files: Vec<super::FileAccess>,
    /// Those readable beyond `Options::permissions` (a warning).
    pub readable_by_others: Vec<std::path::PathBuf>,
    /// Those the group or others may write (there only when the database
    /// was opened with `accept_writable_by_others`, or changed since).
    pub writable_by_others: Vec<std::path::PathBuf>,
}

/// One named table as the check found it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableCheck {
    /// Its id.
    pub id: u32,
    /// Its name in the latest committed state (empty for a dropped table).
    pub name: String,
    /// Whether it was dropped (its pages not all freed yet).
    pub dropped: bool,
    /// Its keys.
    pub keys: u64,
    /// Its pages: tree and overflow.
    pub pages: u64,
}

/// The walk's state: what it has claimed and what it found.
struct Checker<'a, S: Storage> {
    inner: &'a Inner<S>,
    pages: PoolPages<'a, S>,
    /// Pages in the file, per the root state.
    page_count: u64,
    /// The log's end: no page may be newer.
    end_lsn: crate::lsn::Lsn,
    /// Every page reached so far, each exactly once.
    seen: HashSet<PageId>,
    /// Overflow chains to walk: (first page, value length).
    overflow: Vec<(PageId, u64)>,
    /// The tree being walked: every page reached has its id.
    tree: u32,
    report: CheckReport,
}

/// A tree page to visit, with the fence keys its parent gives it.
struct Frame {
    page: PageId,
    lo: Option<Vec<u8>>,
    hi: Option<Vec<u8>>,
    depth: u64,
}

impl<S: Storage> Inner<S> {
    /// Walks the whole database and proves its structure (see the module
    /// docs).
    pub(crate) fn check(&self) -> Result<CheckReport> {
        let meta = self.txns.tree.read()?;
        // Commits append their records under the tree's lock, which this
        // read holds: the log's appended end names the state walked.
        let appended = self.log.wal_if_open().map(|w| w.appended_lsn());
        let mut c = Checker {
            inner: self,
            pages: PoolPages { pool: &self.pool },
            page_count: meta.page_count,
            end_lsn: self.log.durable_or_end(),
            seen: HashSet::new(),
            overflow: Vec::new(),
            tree: tables::DEFAULT,
            report: CheckReport {
                pages: meta.page_count,
                ..CheckReport::default()
            },
        };
        c.walk_tree(meta.root)?;
        c.walk_overflows()?;
        c.walk_tables(meta.catalog)?;
        c.walk_free_list(meta.freelist, meta.compaction)?;
        c.account(meta.compaction)?;
        if let Some(n) = meta.free_pages.filter(|&n| n != c.report.free_pages) {
            let found = c.report.free_pages;
            let what = format!("{found} pages are free; the root state counts {n}");
            return Err(c.bad(meta.freelist, what));
        }
        c.report.free_pages_counted = meta.free_pages.is_some();
        let walked = *meta;
        drop(meta);
        if walked.free_pages.is_none() {
            c.report.free_pages_counted =
                self.record_free_count(walked, appended, c.report.free_pages)?;
        }
        // Reported, not refused: the database is open already.
        let look = super::Options {
            accept_writable_by_others: true,
            ..self.env.opts.clone()
        };
        let audit = super::access::audit(&self.env.storage, &self.env.dir, &look)?;
        c.report.files = audit.entries;
        c.report.readable_by_others = audit.readable_by_others;
        c.report.writable_by_others = audit.writable_by_others;
        assert_eq!(
            c.seen.len() as u64 + 1,
            c.report.pages,
            "every page accounted for"
        );
        assert_eq!(
            c.report.tree_pages + c.report.overflow_pages + c.report.free_pages + 1,
            c.report.pages,
            "the kinds of page add up to the file"
        );
        Ok(c.report)
    }
}

impl<S: Storage> Inner<S> {
    /// Makes `count`, the free pages a check walked in the state `walked`
    /// (the log's appended end then `appended`), the database's count when
    /// it had none (a database last written by a build that did not count
    /// them) and no commit came since; the next commit record and
    /// checkpoint carry it. Returns whether the count is known now.
    fn record_free_count(&self, walked: Meta, appended: Option<Lsn>, count: u64) -> Result<bool> {
        let mut meta = self.txns.tree.write()?;
        let now = self.log.wal_if_open().map(|w| w.appended_lsn());
        if *meta != walked || appended.is_none() || now != appended || meta.compaction.is_some() {
            return Ok(meta.free_pages.is_some());
        }
        assert!(
            count < meta.page_count && (count == 0) == (meta.freelist == PageId::ZERO),
            "a walked free list is pages of the file, empty exactly when its head is 0"
        );
        meta.free_pages = Some(count);
        Ok(true)
    }
}

impl<S: Storage> Checker<'_, S> {
    /// A corruption error about `page`, naming the data file and the page's
    /// byte offset in it.
    fn bad(&self, page: PageId, what: impl Into<String>) -> Error {
        let what = what.into();
        assert!(!what.is_empty(), "the check says what it found");
        (self.inner.pool).page_corruption(page, format!("integrity check: {what}"))
    }

    /// Marks `no` reached; a page outside the file or reached twice is damage.
    fn claim(&mut self, no: PageId) -> Result<()> {
        if no == PageId::ZERO || no.get() >= self.page_count {
            let what = format!("outside the file's {} pages", self.page_count);
            return Err(self.bad(no, what));
        }
        if !self.seen.insert(no) {
            return Err(self.bad(no, "reached twice (shared page or cycle)"));
        }
        assert!(
            self.seen.len() as u64 <= self.page_count,
            "each page is claimed once"
        );
        Ok(())
    }

    /// Walks the catalog rooted at `catalog` (0: none) and every table it
    /// names, and proves the catalog's info rows are the tables the engine
    /// holds, with their roots.
    fn walk_tables(&mut self, catalog: PageId) -> Result<()> {
        let registry = &self.inner.txns.tables;
        assert_eq!(
            registry.catalog().root().unwrap_or(PageId::ZERO),
            catalog,
            "the catalog's readers descend from its root"
        );
        if catalog == PageId::ZERO {
            return Ok(());
        }
        let keys = self.report.keys;
        self.tree = tables::CATALOG;
        self.walk_tree(catalog)?;
        self.walk_overflows()?;
        self.report.keys = keys;
        let names = tables::names(&self.pages, catalog)?;
        let rows = tables::load(&self.pages, catalog)?.all()?;
        let held = registry.all()?;
        let row = |t: &Arc<TableState>| (t.id, t.root(), t.is_live(), t.pages());
        if rows.iter().map(row).ne(held.iter().map(row)) {
            return Err(self.bad(
                catalog,
                "the catalog's info rows and the open tables differ (ids, roots, states or \
                 page counts)",
            ));
        }
        for t in &held {
            let (keys, pages) = (self.report.keys, self.seen.len());
            self.tree = t.id;
            if let Some(root) = t.root() {
                self.walk_tree(root)?;
                self.walk_overflows()?;
            }
            let walked = (self.seen.len() - pages) as u64;
            if walked != t.pages() {
                let what = format!(
                    "table {} holds {walked} pages; its info row counts {}",
                    t.id,
                    t.pages()
                );
                return Err(self.bad(t.root().unwrap_or(catalog), what));
            }
            self.report.tables += 1;
            self.report.table_details.push(TableCheck {
                id: t.id,
                name: names.get(&t.id).cloned().unwrap_or_default(),
                dropped: !t.is_live(),
                keys: self.report.keys - keys,
                pages: (self.seen.len() - pages) as u64,
            });
        }
        let live: std::collections::HashSet<u32> =
            held.iter().filter(|t| t.is_live()).map(|t| t.id).collect();
        if let Some((id, name)) = names.iter().find(|(id, _)| !live.contains(*id)) {
            let what = format!("the name row of {name:?} names table {id}, not a live table");
            return Err(self.bad(catalog, what));
        }
        let named = live.len();
        if named != names.len() {
            return Err(self.bad(
                catalog,
                format!("{} name rows for {named} live tables", names.len()),
            ));
        }
        Ok(())
    }

    /// Walks the overflow chains found so far.
    fn walk_overflows(&mut self) -> Result<()> {
        for (first, len) in std::mem::take(&mut self.overflow) {
            self.walk_overflow(first, len)?;
        }
        Ok(())
    }

    /// Walks the tree from `root` with an explicit stack, depth first.
    fn walk_tree(&mut self, root: PageId) -> Result<()> {
        let mut stack = vec![Frame {
            page: root,
            lo: None,
            hi: None,
            depth: 1,
        }];
        while let Some(f) = stack.pop() {
            self.claim(f.page)?;
            if f.depth as usize > DEPTH_MAX {
                return Err(self.bad(f.page, "deeper than the maximum"));
            }
            self.report.depth = self.report.depth.max(f.depth);
            self.report.tree_pages += 1;
            let children = self.visit(&f)?;
            assert!(
                stack.len() + children.len() <= STACK_FRAMES_MAX,
                "the walk is bounded"
            );
            stack.extend(children);
        }
        Ok(())
    }

    /// Checks one tree page against its fences; returns its children.
    fn visit(&mut self, f: &Frame) -> Result<Vec<Frame>> {
        let checked = self
            .pages
            .read(f.page, Access::Scan, |p| -> Result<Visited> {
                node::validate(p).map_err(|e| self.bad(f.page, e))?;
                if page::tree_of(p) != self.tree {
                    let what = format!("a page of tree {} in tree {}", page::tree_of(p), self.tree);
                    return Err(self.bad(f.page, what));
                }
                if page::page_lsn(p) > self.end_lsn {
                    return Err(self.bad(f.page, "page LSN past the end of the log"));
                }
                let n = node::count(p);
                for i in 0..n {
                    let k = node::key(p, i);
                    if f.lo.as_deref().is_some_and(|lo| k < lo)
                        || f.hi.as_deref().is_some_and(|hi| k >= hi)
                    {
                        return Err(
                            self.bad(f.page, format!("key {i} outside its parent's fences"))
                        );
                    }
                }
                match node::page_type(p) {
                    Some(PageType::Leaf) => Ok(Visited::Leaf {
                        keys: n as u64,
                        overflow: (0..n)
                            .filter_map(|i| match node::value(p, i) {
                                Value::Overflow { len, page } => Some((page, u64::from(len))),
                                Value::Inline(_) => None,
                            })
                            .collect(),
                    }),
                    Some(PageType::Branch) => Ok(Visited::Branch(children(p, f))),
                    _ => Err(self.bad(f.page, "not a tree page where the tree points")),
                }
            })??;
        match checked {
            Visited::Leaf { keys, overflow } => {
                self.report.keys += keys;
                self.overflow.extend(overflow);
                Ok(Vec::new())
            }
            Visited::Branch(children) => {
                assert!(!children.is_empty(), "a branch has a leftmost child");
                Ok(children)
            }
        }
    }

    /// Walks the overflow chain of a value of `len` bytes from `first`.
    fn walk_overflow(&mut self, first: PageId, len: u64) -> Result<()> {
        let chunk = (self.inner.pool.page_bytes() - PAGE_HEADER_BYTES - 16) as u64;
        let mut page = first;
        let mut left = len;
        for _ in 0..len.div_ceil(chunk).max(1) {
            self.claim(page)?;
            self.report.overflow_pages += 1;
            let (kind, n, next, tree) = self.pages.read(page, Access::Scan, |p| {
                let u = |o: usize| le::get_u64(p, o).unwrap_or(0);
                (
                    node::page_type(p),
                    u(PAGE_HEADER_BYTES + 8),
                    PageId::new(u(PAGE_HEADER_BYTES)),
                    page::tree_of(p),
                )
            })?;
            if kind != Some(PageType::Overflow) {
                return Err(self.bad(page, "expected an overflow page"));
            }
            if tree != self.tree {
                return Err(self.bad(
                    page,
                    format!("an overflow page of tree {tree} in tree {}", self.tree),
                ));
            }
            if n > left || n > chunk {
                return Err(self.bad(page, "overflow length out of range"));
            }
            left -= n;
            if left == 0 {
                return Ok(());
            }
            page = next;
        }
        Err(self.bad(first, "overflow chain shorter than its value"))
    }

    /// Walks the free list from `head`; during a compaction, every page on
    /// it is below the boundary and carries the compaction's epoch.
    fn walk_free_list(&mut self, head: PageId, compaction: Option<Compaction>) -> Result<()> {
        let mut page = head;
        while page != PageId::ZERO {
            self.claim(page)?;
            self.report.free_pages += 1;
            let next = self.pages.read(page, Access::Scan, |p| {
                let free = node::page_type(p) == Some(PageType::Free) && page::tree_of(p) == 0;
                free.then(|| (free_next(p), free_epoch(p)))
            })?;
            let (next, epoch) =
                next.ok_or_else(|| self.bad(page, "on the free list but not a free page"))?;
            if let Some(c) = compaction {
                if page.get() >= c.boundary || epoch != c.epoch {
                    let what = format!(
                        "on the free list of the compaction to {} pages (epoch {}), but \
                         past it or of epoch {epoch}",
                        c.boundary, c.epoch
                    );
                    return Err(self.bad(page, what));
                }
            }
            page = next;
        }
        Ok(())
    }

    /// Every page but the reserved page 0 is in the tree, an overflow chain
    /// or the free list, or, during a compaction, a free page it set aside
    /// (marked with another epoch than its own: see `db::compact`).
    fn account(&mut self, compaction: Option<Compaction>) -> Result<()> {
        if let Some(c) = compaction {
            for no in (1..self.page_count).map(PageId::new) {
                if self.seen.contains(&no) {
                    continue;
                }
                if !self
                    .pages
                    .read(no, Access::Scan, |p| free_unlisted(p, c.epoch))?
                {
                    let what = "neither in a tree, free, nor set aside free by the compaction";
                    return Err(self.bad(no, what));
                }
                self.claim(no)?;
                self.report.free_pages += 1;
            }
        }
        let accounted = self.seen.len() as u64 + 1;
        if accounted == self.page_count {
            return Ok(());
        }
        let leaked: Vec<u64> = (1..self.page_count)
            .filter(|&p| !self.seen.contains(&PageId::new(p)))
            .take(5)
            .collect();
        Err(self.bad(
            PageId::new(leaked.first().copied().unwrap_or(0)),
            format!(
                "{} of {} pages are neither in the tree nor free (leaked: {leaked:?}...)",
                self.page_count - accounted,
                self.page_count
            ),
        ))
    }
}

/// What one tree page holds for the walk.
enum Visited {
    Leaf {
        keys: u64,
        overflow: Vec<(PageId, u64)>,
    },
    Branch(Vec<Frame>),
}

/// Pages the walk's stack holds at most: a path of [`DEPTH_MAX`] branches,
/// each with all its children pending (a branch holds fewer children than a
/// page has bytes).
const STACK_FRAMES_MAX: usize = DEPTH_MAX * 16384;

/// The children of branch `p` (visited as `f`), each with its fences.
fn children(p: &[u8], f: &Frame) -> Vec<Frame> {
    let n = node::count(p);
    let mut out = Vec::with_capacity(n + 1);
    let first_hi = (n > 0).then(|| node::key(p, 0).to_vec()).or(f.hi.clone());
    out.push(Frame {
        page: node::leftmost(p),
        lo: f.lo.clone(),
        hi: first_hi,
        depth: f.depth + 1,
    });
    for i in 0..n {
        let hi = if i + 1 < n {
            Some(node::key(p, i + 1).to_vec())
        } else {
            f.hi.clone()
        };
        out.push(Frame {
            page: node::child(p, i),
            lo: Some(node::key(p, i).to_vec()),
            hi,
            depth: f.depth + 1,
        });
    }
    assert_eq!(out.len(), n + 1, "a branch of n keys has n + 1 children");
    out
}
