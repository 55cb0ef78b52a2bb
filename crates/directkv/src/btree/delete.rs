//! Deletes: a key removed from its leaf; a leaf left empty is freed and
//! unlinked from its parent, branches left empty likewise up the path (an
//! explicit stack, no recursion), and a root branch with one child is replaced
//! by that child.
//!
//! Under-full pages are not merged: space freed inside a page is reused by
//! later inserts into it, and emptied pages go back to the free list, so
//! update and delete churn does not grow the file without bound.
//!
//! Invariants:
//! - The root is never freed while it is the root: an emptied root becomes an
//!   empty leaf, and a root is replaced only by its only child.
//! - Unlinking walks at most the path ([`DEPTH_MAX`] steps), and root
//!   shrinking at most [`DEPTH_MAX`] levels; a deeper chain of one-child
//!   roots is corruption, reported as an error.

use super::descent::Step;
use super::node::{self, Value};
use super::overflow::{chain_pages, free_chain_head, free_overflow, read_overflow};
use super::tree::{corrupt, descend_or_follow, leaf_or_corrupt, Pages, PagesMut, Trail, DEPTH_MAX};
use crate::buffer::Access;
use crate::error::Result;
use crate::format::page::PageType;
use crate::format::PageId;

/// Deletes `key`, starting from `trail` (a descent for `key` taken while
/// the tree had the structure it has now) instead of the root when given;
/// returns whether it was there.
///
/// # Errors
/// Page and logging errors; corruption when the trail's leaf is not a leaf.
pub fn delete_along<P: PagesMut>(pages: &mut P, key: &[u8], trail: Option<Trail>) -> Result<bool> {
    delete_keeping(pages, key, false, trail).map(|(found, _)| found)
}

/// Deletes `key`, like [`delete_along`], and returns the value it held
/// (`None`: absent), read from the leaf it changes.
///
/// # Errors
/// As [`delete_along`].
pub fn remove_along<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    trail: Option<Trail>,
) -> Result<Option<Vec<u8>>> {
    delete_keeping(pages, key, true, trail).map(|(_, before)| before)
}

/// [`delete_along`]: whether the key was there, and its value when `keep` asks.
fn delete_keeping<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    keep: bool,
    trail: Option<Trail>,
) -> Result<(bool, Option<Vec<u8>>)> {
    let root = pages.root();
    let d = descend_or_follow(pages, key, trail)?;
    let found = pages.read(d.leaf, Access::Normal, |p| {
        let p = leaf_or_corrupt(pages, p, d.leaf)?;
        Ok(node::search(p, key).ok().map(|i| match node::value(p, i) {
            Value::Overflow { len, page } => (i, Some((len, page)), None),
            Value::Inline(b) => (i, None, keep.then(|| b.to_vec())),
        }))
    })??;
    let Some((i, overflow, inline)) = found else {
        return Ok((false, None));
    };
    // The value, read before its overflow chain (if any) is freed.
    let before = match overflow {
        Some((len, page)) if keep => Some(read_overflow(&*pages, page, len as usize)?),
        _ => inline,
    };
    assert!(keep || before.is_none(), "a value is kept only when asked");
    let now_empty = pages.modify(d.leaf, |p| {
        let n = node::count(p);
        node::remove(p, i);
        assert_eq!(node::count(p) + 1, n, "one cell removed");
        node::count(p) == 0
    })?;
    if let Some((len, page)) = overflow {
        free_overflow(pages, page, len as usize)?;
    }
    if now_empty && d.leaf != root {
        assert!(!d.path.is_empty(), "a leaf below the root has a parent");
        pages.free(d.leaf)?;
        unlink_child(pages, d.path)?;
    }
    Ok((true, before))
}

/// Frees the first leaf of a tree of id `tree` that is being freed whole (a
/// dropped table's), with its overflow chains, and unlinks it as an emptied
/// leaf is unlinked: one bounded step, of about `budget` pages. A chain
/// longer than what is left of the budget loses only its first pages (its
/// cell then names the rest); a chain freed whole loses its cell, so no
/// later step frees it again. Once only the root is left, the root itself
/// is freed; returns whether it was (the tree is gone, and `pages.root()`
/// names a free page). Every page it reaches must carry `tree`'s id.
///
/// Unlike every other change of a tree, this frees the root: it is only
/// for trees no reader can reach any more.
///
/// # Errors
/// Page and logging errors; corruption when the leftmost path is not a
/// path of branches of `tree` to a leaf of it within [`DEPTH_MAX`].
pub fn free_first_leaf<P: PagesMut>(pages: &mut P, tree: u32, budget: usize) -> Result<bool> {
    let root = pages.root();
    let (path, leaf) = leftmost_path(pages, root, tree)?;
    let chains = pages.read(leaf, Access::Normal, |p| {
        (0..node::count(p))
            .filter_map(|i| match node::value(p, i) {
                Value::Overflow { len, page } => Some((i, page, len as usize)),
                Value::Inline(_) => None,
            })
            .collect::<Vec<_>>()
    })?;
    let chunk = super::overflow::chunk_bytes(pages.page_bytes());
    let mut left = budget.max(1);
    // From the last cell, so removing one leaves the others' slots alone.
    for (i, first, len) in chains.into_iter().rev() {
        let n = len.div_ceil(chunk).max(1);
        match free_chain_head(pages, (first, len), left, tree)? {
            None => {
                pages.modify(leaf, |p| node::remove(p, i))?;
                left = left.saturating_sub(n);
            }
            Some((page, rest)) => {
                let len = u32::try_from(rest).expect("a rest of a value is shorter than it");
                let v = Value::Overflow { len, page };
                let same = pages.modify(leaf, |p| node::leaf_overwrite(p, i, &v))?;
                assert!(same, "an overflow cell keeps its size");
                return Ok(false);
            }
        }
    }
    pages.free(leaf)?;
    if leaf == root {
        assert!(path.is_empty(), "the root is the path's first page");
        return Ok(true);
    }
    unlink_child(pages, path)?;
    Ok(false)
}

/// The leftmost path from `root` (branches, each with its leftmost child
/// taken) and the leaf it ends at, every page checked to be of `tree`.
fn leftmost_path<P: Pages>(pages: &P, root: PageId, tree: u32) -> Result<(Vec<Step>, PageId)> {
    let mut path = Vec::new();
    let mut page = root;
    loop {
        let child = pages.read(page, Access::Normal, |p| {
            if crate::format::page::tree_of(p) != tree {
                return Err(corrupt(
                    pages,
                    page,
                    "a page of another tree in a tree being freed",
                ));
            }
            match node::page_type(p) {
                Some(PageType::Branch) => Ok(Some(node::leftmost(p))),
                Some(PageType::Leaf) => Ok(None),
                _ => Err(corrupt(
                    pages,
                    page,
                    "a tree page that is neither branch nor leaf",
                )),
            }
        })??;
        let Some(child) = child else {
            return Ok((path, page));
        };
        if path.len() + 1 >= DEPTH_MAX || child == page {
            return Err(corrupt(
                pages,
                page,
                "a leftmost path deeper than the maximum",
            ));
        }
        path.push(Step { page, slot: None });
        page = child;
    }
}

/// The pages the next steps of [`free_first_leaf`] change, about `leaves`
/// leaves' worth: the leftmost path, the first `leaves` children of its
/// lowest branch and their overflow chains, read through `pages` (a
/// freer reads them outside its commit section, so its steps find them
/// in the cache).
///
/// # Errors
/// Page errors; corruption when the leftmost path is not a path of
/// branches to a leaf within [`DEPTH_MAX`].
pub fn pages_freed_next<P: Pages>(pages: &P, root: PageId, leaves: usize) -> Result<Vec<PageId>> {
    let mut out = Vec::new();
    let mut lowest = vec![root];
    let mut page = root;
    for _ in 0..DEPTH_MAX {
        let kids = pages.read(page, Access::Normal, |p| {
            (node::page_type(p) == Some(PageType::Branch)).then(|| {
                let n = node::count(p);
                let rest = (0..n).map(|i| node::child(p, i));
                std::iter::once(node::leftmost(p))
                    .chain(rest)
                    .take(leaves)
                    .collect::<Vec<_>>()
            })
        })?;
        let Some(kids) = kids else { break };
        out.push(page);
        page = kids[0];
        lowest = kids;
    }
    for &leaf in &lowest {
        out.push(leaf);
        let chains = pages.read(leaf, Access::Normal, |p| {
            let leaf = node::page_type(p) == Some(PageType::Leaf);
            (0..if leaf { node::count(p) } else { 0 })
                .filter_map(|i| match node::value(p, i) {
                    Value::Overflow { len, page } => Some((page, len as usize)),
                    Value::Inline(_) => None,
                })
                .collect::<Vec<_>>()
        })?;
        for (first, len) in chains {
            out.extend(chain_pages(pages, first, len)?);
        }
    }
    Ok(out)
}

/// Removes the child reached by the last step of `path` from its branch,
/// freeing branches that become empty, and shrinks the root.
fn unlink_child<P: PagesMut>(pages: &mut P, mut path: Vec<Step>) -> Result<()> {
    assert!(path.len() < DEPTH_MAX, "a path within the depth bound");
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
            assert!(path.is_empty(), "the root is the first step");
            pages.modify(step.page, node::init_leaf)?;
            break;
        }
        pages.free(step.page)?;
    }
    shrink_root(pages)
}

/// Replaces a root branch without separators (one child) by that child, as
/// many levels as there are.
fn shrink_root<P: PagesMut>(pages: &mut P) -> Result<()> {
    for _ in 0..DEPTH_MAX {
        let root = pages.root();
        let only = pages.read(root, Access::Normal, |p| {
            (node::page_type(p) == Some(PageType::Branch) && node::count(p) == 0)
                .then(|| node::leftmost(p))
        })?;
        let Some(child) = only else {
            return Ok(());
        };
        if child == root {
            return Err(corrupt(pages, root, "a branch is its own child"));
        }
        pages.set_root(child);
        pages.free(root)?;
    }
    Err(corrupt(
        pages,
        pages.root(),
        "a chain of one-child roots deeper than the maximum",
    ))
}
