//! B+tree operations over any page store: lookups, ordered batch scans in both
//! directions, inserts with splits, deletes that free empty pages, and overflow
//! chains for large values.
//!
//! Fill policy: a page is split when a cell does not fit; a page that becomes
//! empty is freed and unlinked from its parent, and a root branch left with one
//! child is replaced by it. Under-full pages are not merged: space freed inside
//! a page is reused by later inserts into it, and emptied pages go back to the
//! free list, so update and delete churn does not grow the file without bound.
//!
//! There are no sibling pointers: a scan moves to the next leaf by descending
//! again with the fence key the previous descent saw (the smallest separator
//! above the leaf, or the largest one at or below it for reverse scans). This
//! keeps splits and frees local to one root-to-leaf path.
//!
//! No recursion: descents keep an explicit path of at most [`DEPTH_MAX`] levels.

use std::ops::Bound;

use super::node::{self, Value};
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::page::{PageType, PAGE_HEADER_BYTES};

/// The deepest tree allowed. At 4 KiB pages and 1 KiB keys a branch holds at
/// least 3 children, so 3^32 leaves: far more than any file holds.
pub const DEPTH_MAX: usize = 32;
/// The largest key with 8 and 16 KiB pages; smaller with 4 KiB (see [`key_max`]).
pub const KEY_MAX: usize = 1024;
/// The largest value.
pub const VALUE_MAX: usize = 64 << 20;

const OVERFLOW_NEXT: usize = PAGE_HEADER_BYTES;
const OVERFLOW_LEN: usize = PAGE_HEADER_BYTES + 8;
const OVERFLOW_DATA: usize = PAGE_HEADER_BYTES + 16;
const FREE_NEXT: usize = PAGE_HEADER_BYTES;

/// The largest cell (slot included) a page takes, so a split always leaves room.
pub fn cell_max(page_bytes: usize) -> usize {
    (page_bytes - node::SLOTS) / 4
}

/// The largest key for a page size: 1024, or less where a quarter page is less.
pub fn key_max(page_bytes: usize) -> usize {
    KEY_MAX.min(cell_max(page_bytes) - 2 - node::LEAF_CELL_HEADER - 8)
}

/// Read access to pages.
pub trait Pages {
    /// Runs `f` on page `no`, share-latched.
    ///
    /// # Errors
    /// The page cannot be read or fails verification.
    fn read<R>(&self, no: u64, access: Access, f: impl FnOnce(&[u8]) -> R) -> Result<R>;
    /// The page size.
    fn page_bytes(&self) -> usize;
}

/// Write access to pages, inside a transaction that logs every change.
pub trait PagesMut: Pages {
    /// Runs `f` on page `no`, exclusively latched; the change is logged.
    ///
    /// # Errors
    /// As [`Pages::read`], and logging errors.
    fn modify<R>(&mut self, no: u64, f: impl FnOnce(&mut [u8]) -> R) -> Result<R>;
    /// Allocates a page (from the free list or by growing the file) and lets
    /// `init` format it; the new page is logged.
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    fn allocate(&mut self, init: impl FnOnce(&mut [u8])) -> Result<u64>;
    /// Returns page `no` to the free list.
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    fn free(&mut self, no: u64) -> Result<()>;
    /// The root page.
    fn root(&self) -> u64;
    /// Replaces the root page.
    fn set_root(&mut self, no: u64);
}

/// Formats a free page pointing at the next free page.
pub fn init_free(p: &mut [u8], next: u64) {
    crate::format::page::init(p, PageType::Free);
    p[PAGE_HEADER_BYTES..].fill(0);
    p[FREE_NEXT..FREE_NEXT + 8].copy_from_slice(&next.to_le_bytes());
}

/// The next page of a free page.
pub fn free_next(p: &[u8]) -> u64 {
    u64_at(p, FREE_NEXT)
}

fn u64_at(p: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&p[o..o + 8]);
    u64::from_le_bytes(a)
}

fn corrupt(no: u64, what: &str) -> Error {
    Error::Corruption {
        path: "data".into(),
        offset: no,
        detail: format!("page {no}: {what}"),
    }
}

/// One step of a descent: the page and the cell it routed through.
#[derive(Debug, Clone, Copy)]
struct Step {
    page: u64,
    slot: Option<usize>,
}

/// A descent to the leaf that holds (or would hold) a key.
struct Descent {
    path: Vec<Step>,
    leaf: u64,
    /// Smallest separator above the leaf: the next leaf starts there.
    upper: Option<Vec<u8>>,
    /// Largest separator at or below the leaf's first key: the previous leaf
    /// ends below it.
    lower: Option<Vec<u8>>,
}

fn descend<P: Pages>(pages: &P, root: u64, key: &[u8], access: Access) -> Result<Descent> {
    descend_to(pages, root, key, false, access)
}

/// Descends to the leaf holding `key`, or with `below`, the leaf holding the
/// largest key strictly below it (a branch cell equal to `key` starts the
/// child *after* the wanted one, so routing must not take it).
fn descend_to<P: Pages>(
    pages: &P,
    root: u64,
    key: &[u8],
    below: bool,
    access: Access,
) -> Result<Descent> {
    let mut path = Vec::with_capacity(8);
    let (mut upper, mut lower) = (None, None);
    let mut page = root;
    loop {
        if path.len() >= DEPTH_MAX {
            return Err(corrupt(page, "tree deeper than the maximum (a cycle?)"));
        }
        let step = pages.read(page, access, |p| match node::page_type(p) {
            Some(PageType::Leaf) => Ok(None),
            Some(PageType::Branch) => {
                let (child, slot) = if below {
                    node::route_below(p, key)
                } else {
                    node::route(p, key)
                };
                let next_i = slot.map_or(0, |i| i + 1);
                let up = (next_i < node::count(p)).then(|| node::key(p, next_i).to_vec());
                let low = slot.map(|i| node::key(p, i).to_vec());
                Ok(Some((child, slot, up, low)))
            }
            _ => Err(corrupt(page, "expected a tree page")),
        })??;
        match step {
            None => {
                return Ok(Descent {
                    path,
                    leaf: page,
                    upper,
                    lower,
                })
            }
            Some((child, slot, up, low)) => {
                if up.is_some() {
                    upper = up;
                }
                if low.is_some() {
                    lower = low;
                }
                path.push(Step { page, slot });
                page = child;
            }
        }
    }
}

/// Reads a value, following its overflow chain.
fn load_value<P: Pages>(pages: &P, v: Value<'_>) -> Result<Vec<u8>> {
    match v {
        Value::Inline(b) => Ok(b.to_vec()),
        Value::Overflow { len, page } => read_overflow(pages, page, len as usize),
    }
}

fn read_overflow<P: Pages>(pages: &P, first: u64, len: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut page = first;
    let chunk_max = pages.page_bytes() - OVERFLOW_DATA;
    let hops_max = len / chunk_max + 1;
    for _ in 0..hops_max {
        if out.len() == len {
            break;
        }
        let next = pages.read(page, Access::Normal, |p| {
            if node::page_type(p) != Some(PageType::Overflow) {
                return Err(corrupt(page, "expected an overflow page"));
            }
            let n = u64_at(p, OVERFLOW_LEN) as usize;
            if n > chunk_max || out.len() + n > len {
                return Err(corrupt(page, "overflow length out of range"));
            }
            out.extend_from_slice(&p[OVERFLOW_DATA..OVERFLOW_DATA + n]);
            Ok(u64_at(p, OVERFLOW_NEXT))
        })??;
        page = next;
    }
    if out.len() != len {
        return Err(corrupt(first, "overflow chain shorter than its value"));
    }
    Ok(out)
}

/// Looks `key` up.
///
/// # Errors
/// Page read and verification errors.
pub fn get<P: Pages>(pages: &P, root: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let d = descend(pages, root, key, Access::Normal)?;
    let found = pages.read(d.leaf, Access::Normal, |p| {
        node::search(p, key).ok().map(|i| match node::value(p, i) {
            Value::Inline(b) => Ok(b.to_vec()),
            Value::Overflow { len, page } => Err((len, page)),
        })
    })?;
    match found {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err((len, page))) => read_overflow(pages, page, len as usize).map(Some),
    }
}

fn in_lower(k: &[u8], b: &Bound<Vec<u8>>) -> bool {
    match b {
        Bound::Included(x) => k >= x.as_slice(),
        Bound::Excluded(x) => k > x.as_slice(),
        Bound::Unbounded => true,
    }
}

fn in_upper(k: &[u8], b: &Bound<Vec<u8>>) -> bool {
    match b {
        Bound::Included(x) => k <= x.as_slice(),
        Bound::Excluded(x) => k < x.as_slice(),
        Bound::Unbounded => true,
    }
}

/// The entries of `leaf` inside `(from, to)`, in key order (descending when
/// `reverse`), and whether the scan met a key past the far end (so no later
/// leaf can hold more).
fn collect_leaf<P: Pages>(
    pages: &P,
    leaf: u64,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
    reverse: bool,
) -> Result<(Entries, bool)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut beyond = false;
    pages.read(leaf, Access::Scan, |p| {
        let n = node::count(p);
        let order: Box<dyn Iterator<Item = usize>> = if reverse {
            Box::new((0..n).rev())
        } else {
            Box::new(0..n)
        };
        for i in order {
            let k = node::key(p, i);
            let (near_ok, far_ok) = if reverse {
                (in_upper(k, to), in_lower(k, from))
            } else {
                (in_lower(k, from), in_upper(k, to))
            };
            if !near_ok {
                continue;
            }
            if !far_ok {
                beyond = true;
                break;
            }
            match node::value(p, i) {
                Value::Inline(v) => out.push((k.to_vec(), v.to_vec())),
                Value::Overflow { len, page } => {
                    pending.push((out.len(), len, page));
                    out.push((k.to_vec(), Vec::new()));
                }
            }
        }
    })?;
    for (i, len, page) in pending {
        out[i].1 = load_value(pages, Value::Overflow { len, page })?;
    }
    Ok((out, beyond))
}

/// Key-value pairs.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Entries of one leaf in `[from, to]` (forward) and where the next batch
/// starts: `None` when the range is exhausted.
pub type Batch = (Entries, Option<Bound<Vec<u8>>>);

/// The next batch of a forward scan of `(from, to)`: the entries of one leaf.
///
/// # Errors
/// Page read and verification errors.
pub fn scan_forward<P: Pages>(
    pages: &P,
    root: u64,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> Result<Batch> {
    let seek: &[u8] = match from {
        Bound::Included(k) | Bound::Excluded(k) => k,
        Bound::Unbounded => &[],
    };
    // Branch pages are hot for every scan and the leaf's place in the cache
    // is set when it is loaded: the descent reads normally, and only the
    // leaf's collection counts as a scan touch (which never promotes).
    let d = descend(pages, root, seek, Access::Normal)?;
    let (out, beyond) = collect_leaf(pages, d.leaf, from, to, false)?;
    let next = match (beyond, d.upper) {
        (true, _) | (false, None) => None,
        (false, Some(up)) => in_upper(&up, to).then_some(Bound::Included(up)),
    };
    Ok((out, next))
}

/// The pages of up to `n` leaves after the leaf holding `key`, in key order,
/// as far as its parent branch knows them (readahead for a forward scan; a
/// scan that crosses into the next parent asks again from there).
///
/// # Errors
/// Page read and verification errors.
pub fn following_leaves<P: Pages>(pages: &P, root: u64, key: &[u8], n: usize) -> Result<Vec<u64>> {
    let d = descend(pages, root, key, Access::Normal)?;
    let Some(parent) = d.path.last() else {
        return Ok(Vec::new());
    };
    let first = parent.slot.map_or(0, |i| i + 1);
    pages.read(parent.page, Access::Normal, |p| {
        (first..node::count(p).min(first + n))
            .map(|j| node::child(p, j))
            .collect()
    })
}

/// The next batch of a reverse scan of `(from, to)`, entries in descending order.
///
/// # Errors
/// Page read and verification errors.
pub fn scan_reverse<P: Pages>(
    pages: &P,
    root: u64,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> Result<Batch> {
    // Descend to the leaf holding the upper end; with no upper end, the last leaf.
    let d = match to {
        Bound::Included(k) => descend(pages, root, k, Access::Normal)?,
        Bound::Excluded(k) => descend_to(pages, root, k, true, Access::Normal)?,
        Bound::Unbounded => descend_last(pages, root)?,
    };
    let (out, beyond) = collect_leaf(pages, d.leaf, from, to, true)?;
    let next = match (beyond, d.lower) {
        (true, _) | (false, None) => None,
        (false, Some(low)) => in_lower(&low, from).then_some(Bound::Excluded(low)),
    };
    Ok((out, next))
}

fn descend_last<P: Pages>(pages: &P, root: u64) -> Result<Descent> {
    let mut path = Vec::new();
    let mut lower = None;
    let mut page = root;
    loop {
        if path.len() >= DEPTH_MAX {
            return Err(corrupt(page, "tree deeper than the maximum (a cycle?)"));
        }
        let step = pages.read(page, Access::Normal, |p| match node::page_type(p) {
            Some(PageType::Leaf) => Ok(None),
            Some(PageType::Branch) => {
                let n = node::count(p);
                if n == 0 {
                    Ok(Some((node::leftmost(p), None, None)))
                } else {
                    Ok(Some((
                        node::child(p, n - 1),
                        Some(n - 1),
                        Some(node::key(p, n - 1).to_vec()),
                    )))
                }
            }
            _ => Err(corrupt(page, "expected a tree page")),
        })??;
        match step {
            None => {
                return Ok(Descent {
                    path,
                    leaf: page,
                    upper: None,
                    lower,
                })
            }
            Some((child, slot, low)) => {
                if low.is_some() {
                    lower = low;
                }
                path.push(Step { page, slot });
                page = child;
            }
        }
    }
}

fn write_overflow<P: PagesMut>(pages: &mut P, value: &[u8]) -> Result<u64> {
    let chunk = pages.page_bytes() - OVERFLOW_DATA;
    // Written back to front, so each page knows its successor when created.
    let mut next = 0u64;
    let chunks: Vec<&[u8]> = value.chunks(chunk).collect();
    for part in chunks.iter().rev() {
        next = pages.allocate(|p| {
            crate::format::page::init(p, PageType::Overflow);
            p[PAGE_HEADER_BYTES..].fill(0);
            p[OVERFLOW_NEXT..OVERFLOW_NEXT + 8].copy_from_slice(&next.to_le_bytes());
            p[OVERFLOW_LEN..OVERFLOW_LEN + 8].copy_from_slice(&(part.len() as u64).to_le_bytes());
            p[OVERFLOW_DATA..OVERFLOW_DATA + part.len()].copy_from_slice(part);
        })?;
    }
    Ok(next)
}

fn free_overflow<P: PagesMut>(pages: &mut P, first: u64, len: usize) -> Result<()> {
    let chunk = pages.page_bytes() - OVERFLOW_DATA;
    let mut page = first;
    for _ in 0..len.div_ceil(chunk).max(1) {
        if page == 0 {
            break;
        }
        let next = pages.read(page, Access::Normal, |p| u64_at(p, OVERFLOW_NEXT))?;
        pages.free(page)?;
        page = next;
    }
    Ok(())
}

/// Inserts or replaces `key` → `value`.
///
/// # Errors
/// [`Error::InvalidArgument`] for a key or value over the limits; page and
/// logging errors.
pub fn put<P: PagesMut>(pages: &mut P, key: &[u8], value: &[u8]) -> Result<()> {
    let page_bytes = pages.page_bytes();
    if key.len() > key_max(page_bytes) {
        return Err(Error::InvalidArgument(format!(
            "key of {} bytes exceeds the {}-byte limit for {page_bytes}-byte pages",
            key.len(),
            key_max(page_bytes)
        )));
    }
    if value.len() > VALUE_MAX {
        return Err(Error::InvalidArgument(format!(
            "value of {} bytes exceeds the {VALUE_MAX}-byte limit",
            value.len()
        )));
    }
    let inline = node::leaf_cell_bytes(key, &Value::Inline(value)) <= cell_max(page_bytes);
    let stored = if inline {
        Value::Inline(value)
    } else {
        Value::Overflow {
            len: value.len() as u32,
            page: write_overflow(pages, value)?,
        }
    };
    let root = pages.root();
    let d = descend(pages, root, key, Access::Normal)?;
    let old_overflow = pages.read(d.leaf, Access::Normal, |p| {
        node::search(p, key)
            .ok()
            .and_then(|i| match node::value(p, i) {
                Value::Overflow { len, page } => Some((len, page)),
                Value::Inline(_) => None,
            })
    })?;
    // Replace (or insert) in one change of the leaf: one log record.
    let inserted = pages.modify(d.leaf, |p| {
        if let Ok(i) = node::search(p, key) {
            if node::leaf_overwrite(p, i, &stored) {
                return true;
            }
            node::remove(p, i);
        }
        let at = node::search(p, key).expect_err("removed above");
        node::leaf_insert(p, at, key, &stored)
    })?;
    if let Some((len, page)) = old_overflow {
        free_overflow(pages, page, len as usize)?;
    }
    if inserted {
        return Ok(());
    }
    // An append past the last key of the tree's rightmost leaf (a sequential
    // load) starts a new leaf and leaves this one full; any other insert
    // splits the leaf in half. Sequential loads then pack pages fully instead
    // of leaving every one half empty.
    if appends_at_right_edge(pages, &d, key)? {
        let right = pages.allocate(node::init_leaf)?;
        let ok = pages.modify(right, |p| node::leaf_insert(p, 0, key, &stored))?;
        assert!(ok, "a cell of at most a quarter page fits in an empty page");
        return insert_separator(pages, d.path, key.to_vec(), right);
    }
    // Split the leaf, then push separators up the path.
    let right = pages.allocate(node::init_leaf)?;
    let sep = split_into(pages, d.leaf, right)?;
    let target = if key >= sep.as_slice() { right } else { d.leaf };
    let at = pages.read(target, Access::Normal, |p| node::search(p, key))?;
    let at = at.expect_err("absent key");
    let ok = pages.modify(target, |p| node::leaf_insert(p, at, key, &stored))?;
    assert!(ok, "a cell of at most a quarter page fits in half a page");
    insert_separator(pages, d.path, sep, right)
}

/// Whether `key` goes after every key of `d.leaf` and `d.leaf` is the
/// rightmost leaf of the tree (it has no upper fence).
fn appends_at_right_edge<P: PagesMut>(pages: &mut P, d: &Descent, key: &[u8]) -> Result<bool> {
    if d.upper.is_some() {
        return Ok(false);
    }
    pages.read(d.leaf, Access::Normal, |p| {
        node::count(p) > 0 && node::search(p, key) == Err(node::count(p))
    })
}

fn split_into<P: PagesMut>(pages: &mut P, left: u64, right: u64) -> Result<Vec<u8>> {
    let mut moved = vec![0u8; pages.page_bytes()];
    let sep = pages.modify(left, |p| node::split(p, &mut moved))?;
    pages.modify(right, |p| p.copy_from_slice(&moved))?;
    Ok(sep)
}

fn insert_separator<P: PagesMut>(
    pages: &mut P,
    mut path: Vec<Step>,
    mut sep: Vec<u8>,
    mut right: u64,
) -> Result<()> {
    while let Some(step) = path.pop() {
        let at = step.slot.map_or(0, |i| i + 1);
        if pages.modify(step.page, |p| node::branch_insert(p, at, &sep, right))? {
            return Ok(());
        }
        let new_right = pages.allocate(|p| node::init_branch(p, 0))?;
        let up = split_into(pages, step.page, new_right)?;
        let target = if sep >= up { new_right } else { step.page };
        let at = pages.read(target, Access::Normal, |p| node::search(p, &sep))?;
        let at = at.unwrap_or_else(|i| i);
        let ok = pages.modify(target, |p| node::branch_insert(p, at, &sep, right))?;
        assert!(ok, "a separator fits in half a branch");
        sep = up;
        right = new_right;
    }
    let old_root = pages.root();
    let new_root = pages.allocate(|p| node::init_branch(p, old_root))?;
    let ok = pages.modify(new_root, |p| node::branch_insert(p, 0, &sep, right))?;
    assert!(ok, "one separator fits in an empty branch");
    pages.set_root(new_root);
    Ok(())
}

/// Deletes `key`; returns whether it was there.
///
/// # Errors
/// Page and logging errors.
pub fn delete<P: PagesMut>(pages: &mut P, key: &[u8]) -> Result<bool> {
    let root = pages.root();
    let d = descend(pages, root, key, Access::Normal)?;
    let found = pages.read(d.leaf, Access::Normal, |p| {
        node::search(p, key).ok().map(|i| {
            let ov = match node::value(p, i) {
                Value::Overflow { len, page } => Some((len, page)),
                Value::Inline(_) => None,
            };
            (i, ov)
        })
    })?;
    let Some((i, overflow)) = found else {
        return Ok(false);
    };
    let now_empty = pages.modify(d.leaf, |p| {
        node::remove(p, i);
        node::count(p) == 0
    })?;
    if let Some((len, page)) = overflow {
        free_overflow(pages, page, len as usize)?;
    }
    if now_empty && d.leaf != root {
        pages.free(d.leaf)?;
        unlink_child(pages, d.path)?;
    }
    Ok(true)
}

/// Removes the child reached by the last step of `path` from its branch,
/// freeing branches that become empty, and shrinks the root.
fn unlink_child<P: PagesMut>(pages: &mut P, mut path: Vec<Step>) -> Result<()> {
    while let Some(step) = path.pop() {
        let emptied = pages.modify(step.page, |p| {
            match step.slot {
                Some(i) => node::remove(p, i),
                None if node::count(p) > 0 => {
                    let first = node::child(p, 0);
                    node::set_leftmost(p, first);
                    node::remove(p, 0);
                }
                None => return true,
            }
            false
        })?;
        if !emptied {
            break;
        }
        if step.page == pages.root() {
            // The root lost its only child: the tree is empty again.
            pages.modify(step.page, node::init_leaf)?;
            break;
        }
        pages.free(step.page)?;
    }
    // A root branch without separators has one child: make that the root.
    loop {
        let root = pages.root();
        let only = pages.read(root, Access::Normal, |p| {
            (node::page_type(p) == Some(PageType::Branch) && node::count(p) == 0)
                .then(|| node::leftmost(p))
        })?;
        let Some(child) = only else { break };
        pages.set_root(child);
        pages.free(root)?;
    }
    Ok(())
}
