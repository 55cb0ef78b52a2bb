//! Inserts: a key placed in its leaf, splitting full pages and pushing
//! separators up the descent's path (an explicit stack, no recursion).
//!
//! Fill policy: a page is split when a cell does not fit, in half by bytes,
//! except that an append past the last key of the tree's rightmost leaf (a
//! sequential load) starts a new leaf and leaves the full one full.
//!
//! Invariants:
//! - A cell is at most a quarter page ([`cell_max`]), so after a split it fits
//!   in either half, and a separator fits in half a branch.
//! - Separators are pushed up at most once per level of the path, which is at
//!   most [`DEPTH_MAX`] long; a root split adds one level.
//! - Both halves of a split are non-empty (`node::split` asserts it).

use super::descent::{Descent, Step};
use super::node::{self, Value};
use super::overflow::{free_overflow, read_overflow, write_overflow};
use super::tree::{
    cell_max, descend_or_follow, key_max, leaf_or_corrupt, PagesMut, Trail, DEPTH_MAX, VALUE_MAX,
};
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::PageId;

/// Inserts or replaces `key` → `value`, starting from `trail` (a descent
/// for `key` taken while the tree had the structure it has now) instead of
/// the root when given.
///
/// # Errors
/// [`Error::InvalidArgument`] for a key or value over the limits; page and
/// logging errors; corruption when the trail's leaf is not a leaf.
pub fn put_along<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    value: &[u8],
    trail: Option<Trail>,
) -> Result<()> {
    put_keeping(pages, key, value, false, trail).map(drop)
}

/// Sets `key` to `value`, like [`put_along`], and returns the value it replaces
/// (`None`: the key was absent), read from the leaf it changes, so no
/// second descent is needed.
///
/// # Errors
/// As [`put_along`].
#[cfg(test)]
pub fn replace<P: PagesMut>(pages: &mut P, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
    put_keeping(pages, key, value, true, None)
}

/// [`replace`], starting from `trail` as [`put_along`] does.
///
/// # Errors
/// As [`put_along`].
pub fn replace_along<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    value: &[u8],
    trail: Option<Trail>,
) -> Result<Option<Vec<u8>>> {
    put_keeping(pages, key, value, true, trail)
}

/// [`put_along`], returning the replaced value when `keep` asks for it.
fn put_keeping<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    value: &[u8],
    keep: bool,
    trail: Option<Trail>,
) -> Result<Option<Vec<u8>>> {
    check_sizes(pages.page_bytes(), key, value)?;
    let page_bytes = pages.page_bytes();
    let inline = node::leaf_cell_bytes(key, &Value::Inline(value)) <= cell_max(page_bytes);
    let stored = if inline {
        Value::Inline(value)
    } else {
        Value::Overflow {
            len: value.len() as u32,
            page: write_overflow(pages, value)?,
        }
    };
    assert!(
        node::leaf_cell_bytes(key, &stored) <= cell_max(page_bytes),
        "a stored cell is at most a quarter page"
    );
    let d = descend_or_follow(pages, key, trail)?;
    let old = pages.read(d.leaf, Access::Normal, |p| {
        let p = leaf_or_corrupt(pages, p, d.leaf)?;
        Ok(node::search(p, key).ok().map(|i| match node::value(p, i) {
            Value::Inline(b) => OldValue::Inline(keep.then(|| b.to_vec())),
            Value::Overflow { len, page } => OldValue::Overflow(len, page),
        }))
    })??;
    // The replaced value, read before its overflow chain (if any) is freed.
    let before = match &old {
        None => None,
        Some(OldValue::Inline(v)) => v.clone(),
        Some(OldValue::Overflow(len, page)) if keep => {
            Some(read_overflow(&*pages, *page, *len as usize)?)
        }
        Some(OldValue::Overflow(..)) => None,
    };
    assert!(keep || before.is_none(), "a value is kept only when asked");
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
    if let Some(OldValue::Overflow(len, page)) = old {
        free_overflow(pages, page, len as usize)?;
    }
    if !inserted {
        insert_splitting(pages, d, key, &stored)?;
    }
    Ok(before)
}

/// The value a put replaces, as its leaf holds it: inline (copied only when
/// asked for), or the length and first page of its overflow chain.
enum OldValue {
    Inline(Option<Vec<u8>>),
    Overflow(u32, PageId),
}

/// Refuses a key or value over the limits for pages of `page_bytes`.
fn check_sizes(page_bytes: usize, key: &[u8], value: &[u8]) -> Result<()> {
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
    Ok(())
}

/// Inserts `key` → `stored` where its leaf `d.leaf` is full: in a new
/// rightmost leaf for an append at the right edge, else by splitting the
/// leaf; then pushes the separator up.
fn insert_splitting<P: PagesMut>(
    pages: &mut P,
    d: Descent,
    key: &[u8],
    stored: &Value<'_>,
) -> Result<()> {
    // An append past the last key of the tree's rightmost leaf (a sequential
    // load) starts a new leaf and leaves this one full; any other insert
    // splits the leaf in half. Sequential loads then pack pages fully instead
    // of leaving every one half empty.
    if appends_at_right_edge(pages, &d, key)? {
        let right = pages.allocate(node::init_leaf)?;
        let ok = pages.modify(right, |p| node::leaf_insert(p, 0, key, stored))?;
        assert!(ok, "a cell of at most a quarter page fits in an empty page");
        return insert_separator(pages, d.path, key.to_vec(), right);
    }
    // Split the leaf, then push separators up the path.
    let right = pages.allocate(node::init_leaf)?;
    assert_ne!(right, d.leaf, "a new page is not the page split");
    let sep = split_into(pages, d.leaf, right)?;
    let target = if key >= sep.as_slice() { right } else { d.leaf };
    let at = pages.read(target, Access::Normal, |p| node::search(p, key))?;
    let at = at.expect_err("absent key");
    let ok = pages.modify(target, |p| node::leaf_insert(p, at, key, stored))?;
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

/// Splits page `left` into it and the empty page `right`; returns the
/// separator.
fn split_into<P: PagesMut>(pages: &mut P, left: PageId, right: PageId) -> Result<Vec<u8>> {
    assert_ne!(left, right, "a page splits into another");
    pages.restructure();
    let mut moved = vec![0u8; pages.page_bytes()];
    let sep = pages.modify(left, |p| {
        let sep = node::split(p, &mut moved);
        // The new half is of the split page's tree.
        crate::format::page::set_tree(&mut moved, crate::format::page::tree_of(p));
        sep
    })?;
    assert!(
        node::page_type(&moved).is_some(),
        "a split formats the new half"
    );
    pages.modify(right, |p| p.copy_from_slice(&moved))?;
    Ok(sep)
}

/// Inserts separator `sep` → `right` into the branches of `path`, bottom up,
/// splitting full ones, and grows a new root when the old one split.
fn insert_separator<P: PagesMut>(
    pages: &mut P,
    mut path: Vec<Step>,
    mut sep: Vec<u8>,
    mut right: PageId,
) -> Result<()> {
    assert!(path.len() < DEPTH_MAX, "a path within the depth bound");
    while let Some(step) = path.pop() {
        let at = step.slot.map_or(0, |i| i + 1);
        if pages.modify(step.page, |p| node::branch_insert(p, at, &sep, right))? {
            return Ok(());
        }
        let new_right = pages.allocate(|p| node::init_branch(p, PageId::ZERO))?;
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
    assert_ne!(new_root, old_root, "a new root is a new page");
    let ok = pages.modify(new_root, |p| node::branch_insert(p, 0, &sep, right))?;
    assert!(ok, "one separator fits in an empty branch");
    pages.set_root(new_root);
    Ok(())
}
