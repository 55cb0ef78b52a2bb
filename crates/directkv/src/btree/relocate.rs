//! Moving a tree's pages below a page number, one root-to-leaf path at a
//! time: the walk a compaction makes over every tree (`db::compact`).
//!
//! At each page of the path to a key's leaf, and at each page of the
//! leaf's overflow chains, a page at or past the boundary is copied into
//! a page the store allocates, the one pointer to it (the parent's slot,
//! the root, the leaf's cell or the previous chain page's link) is set to
//! the copy, and the old page is freed. Keys and values do not change:
//! only where they live. A move is a structure change (it changes a branch
//! or the root, and frees a page), so a lock-free reader whose descent it
//! crossed descends again.
//!
//! Invariants:
//! - After a call that returns [`Relocated::After`] or [`Relocated::End`],
//!   every page on the leaf's path, the leaf and its chains are below the
//!   boundary, if every page the store allocated during it was.
//! - A call moves at most its budget of pages; one that stops early
//!   ([`Relocated::Again`]) leaves every page it moved fully moved, and
//!   the next call at the same key goes on from there.

use super::descent::descend;
use super::node::{self, Value};
use super::overflow::{chain_pages, set_next};
use super::tree::{corrupt, PagesMut};
use crate::buffer::Access;
use crate::error::Result;
use crate::format::page::{self, PageType, PAGE_HEADER_BYTES};
use crate::format::PageId;

/// Where a walk goes on after [`relocate_along`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relocated {
    /// The budget ran out: call again with the same key.
    Again,
    /// The leaf is done; the next leaf starts at this key.
    After(Vec<u8>),
    /// The leaf is done and was the tree's last.
    End,
}

/// Moves the pages at or past `boundary` on the path to `key`'s leaf, the
/// leaf and its overflow chains below it (see the module docs), at most
/// `budget` pages; returns where to go on and the pages moved.
///
/// # Errors
/// Page errors, and corruption found on the way.
pub fn relocate_along<P: PagesMut>(
    pages: &mut P,
    key: &[u8],
    boundary: u64,
    budget: usize,
) -> Result<(Relocated, usize)> {
    assert!(budget > 0, "a call may move a page");
    let d = descend(pages, pages.root(), key, Access::Normal)?;
    let mut moved = 0;
    // The page above the one being looked at (as it is now, moved or
    // not) and the slot of its that leads down.
    let mut above: Option<(PageId, Option<usize>)> = None;
    let path: Vec<(PageId, Option<usize>)> = d.path.iter().map(|s| (s.page, s.slot)).collect();
    for (no, slot) in path.into_iter().chain(std::iter::once((d.leaf, None))) {
        let mut here = no;
        if no.get() >= boundary {
            if moved == budget {
                return Ok((Relocated::Again, moved));
            }
            here = move_page(pages, no)?;
            match above {
                None => pages.set_root(here),
                Some((parent, at)) => pages.modify(parent, |p| match at {
                    None => node::set_leftmost(p, here),
                    Some(i) => node::set_child(p, i, here),
                })?,
            }
            pages.free(no)?;
            moved += 1;
        }
        above = Some((here, slot));
    }
    let (leaf, _) = above.expect("a path ends at a leaf");
    moved += match relocate_chains(pages, leaf, boundary, budget - moved)? {
        Some(n) => n,
        None => return Ok((Relocated::Again, budget)),
    };
    assert!(moved <= budget, "a call moves at most its budget");
    let next = d.upper.map_or(Relocated::End, Relocated::After);
    Ok((next, moved))
}

/// Moves the pages at or past `boundary` of leaf `leaf`'s overflow
/// chains; returns the pages moved, or `None` when the budget ran out
/// first (having moved exactly `budget`).
fn relocate_chains<P: PagesMut>(
    pages: &mut P,
    leaf: PageId,
    boundary: u64,
    budget: usize,
) -> Result<Option<usize>> {
    let values: Vec<(usize, u32, PageId)> = pages.read(leaf, Access::Normal, |p| {
        (0..node::count(p))
            .filter_map(|i| match node::value(p, i) {
                Value::Overflow { len, page } => Some((i, len, page)),
                Value::Inline(_) => None,
            })
            .collect()
    })?;
    let mut moved = 0;
    for (i, len, first) in values {
        let mut prev: Option<PageId> = None;
        for no in chain_pages(pages, first, len as usize)? {
            let mut here = no;
            if no.get() >= boundary {
                if moved == budget {
                    return Ok(None);
                }
                here = move_page(pages, no)?;
                match prev {
                    None => pages.modify(leaf, |p| {
                        let cell = Value::Overflow { len, page: here };
                        // The same length: the cell is rewritten in place.
                        assert!(node::leaf_overwrite(p, i, &cell), "a pointer's size");
                    })?,
                    Some(prev) => pages.modify(prev, |p| set_next(p, here))?,
                }
                pages.free(no)?;
                moved += 1;
            }
            prev = Some(here);
        }
    }
    Ok(Some(moved))
}

/// Copies page `no` (a leaf, branch or overflow page) into a page the
/// store allocates and returns it; the old page is left for the caller to
/// unlink and free.
fn move_page<P: PagesMut>(pages: &mut P, no: PageId) -> Result<PageId> {
    let mut copy = vec![0u8; pages.page_bytes()];
    let kind = pages.read(no, Access::Normal, |p| {
        copy.copy_from_slice(p);
        node::page_type(p)
    })?;
    let kind = match kind {
        Some(k @ (PageType::Leaf | PageType::Branch | PageType::Overflow)) => k,
        _ => return Err(corrupt(pages, no, "expected a tree or overflow page")),
    };
    let to = pages.allocate(|p| {
        page::init(p, kind);
        p[10..12].copy_from_slice(&copy[10..12]);
        p[PAGE_HEADER_BYTES..].copy_from_slice(&copy[PAGE_HEADER_BYTES..]);
    })?;
    assert_ne!(to, no, "a page moves to another");
    Ok(to)
}
