//! Descents: from the root to a leaf, keeping the path walked on an explicit
//! stack (no recursion) and the fence keys of the leaf reached.
//!
//! Invariants:
//! - A path holds at most [`DEPTH_MAX`] steps; a deeper tree is corruption
//!   (a cycle among branch pages), reported as an error, never followed.
//! - Every step of a path is a branch page and the slot it routed through;
//!   the last step is the leaf's parent. A root leaf has an empty path.
//! - `upper` is the smallest separator above the leaf on the path and `lower`
//!   the largest at or below its keys, as the branches read then said.

use super::node;
use super::tree::{corrupt, Pages, DEPTH_MAX};
use crate::buffer::Access;
use crate::error::Result;
use crate::format::page::{tree_of, PageType};
use crate::format::PageId;

/// One step of a descent: the page and the cell it routed through.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    pub(super) page: PageId,
    pub(super) slot: Option<usize>,
}

/// A descent to the leaf that holds (or would hold) a key.
pub(super) struct Descent {
    pub(super) path: Vec<Step>,
    pub(super) leaf: PageId,
    /// Smallest separator above the leaf: the next leaf starts there.
    pub(super) upper: Option<Vec<u8>>,
    /// Largest separator at or below the leaf's first key: the previous leaf
    /// ends below it.
    pub(super) lower: Option<Vec<u8>>,
}

/// What a branch says about the way down: the child, the slot routed through
/// (`None`: the leftmost child) and the fences the slot implies.
type Route = (PageId, Option<usize>, Option<Vec<u8>>, Option<Vec<u8>>);

/// Descends to the leaf holding `key`.
pub(super) fn descend<P: Pages>(
    pages: &P,
    root: PageId,
    key: &[u8],
    access: Access,
) -> Result<Descent> {
    descend_by(pages, root, access, |p| node::route(p, key))
}

/// Descends to the leaf holding the largest key strictly below `key` (a
/// branch cell equal to `key` starts the child *after* the wanted one, so
/// routing must not take it).
pub(super) fn descend_below<P: Pages>(pages: &P, root: PageId, key: &[u8]) -> Result<Descent> {
    descend_by(pages, root, Access::Normal, |p| node::route_below(p, key))
}

/// Descends to the last leaf of the tree.
pub(super) fn descend_last<P: Pages>(pages: &P, root: PageId) -> Result<Descent> {
    descend_by(pages, root, Access::Normal, |p| match node::count(p) {
        0 => (node::leftmost(p), None),
        n => (node::child(p, n - 1), Some(n - 1)),
    })
}

/// Descends from `root`, taking at each branch the child `pick` chooses.
fn descend_by<P: Pages>(
    pages: &P,
    root: PageId,
    access: Access,
    pick: impl Fn(&[u8]) -> (PageId, Option<usize>),
) -> Result<Descent> {
    let mut path = Vec::with_capacity(8);
    let (mut upper, mut lower) = (None, None);
    let mut page = root;
    // The tree the root says it is: every page below is of it too.
    let mut tree = None;
    // A leaf is read with at most DEPTH_MAX - 1 branches above it.
    for _ in 0..DEPTH_MAX {
        let (route, of) = pages.read(page, access, |p| {
            (route_at(pages, p, page, &pick), tree_of(p))
        })?;
        let above = *tree.get_or_insert(of);
        if above != of {
            let what =
                format!("a page of tree {of} below one of tree {above} (a pointer across trees)");
            return Err(corrupt(pages, page, &what));
        }
        let route = route?;
        let Some((child, slot, up, low)) = route else {
            assert!(path.len() < DEPTH_MAX, "a path within the depth bound");
            return Ok(Descent {
                path,
                leaf: page,
                upper,
                lower,
            });
        };
        if up.is_some() {
            upper = up;
        }
        if low.is_some() {
            lower = low;
        }
        path.push(Step { page, slot });
        page = child;
    }
    assert_eq!(
        path.len(),
        DEPTH_MAX,
        "every round but a leaf's adds a step"
    );
    Err(corrupt(
        pages,
        page,
        "tree deeper than the maximum (a cycle?)",
    ))
}

/// The route out of page `no` (bytes `p`): `None` at a leaf.
fn route_at<P: Pages>(
    pages: &P,
    p: &[u8],
    no: PageId,
    pick: impl Fn(&[u8]) -> (PageId, Option<usize>),
) -> Result<Option<Route>> {
    match node::page_type(p) {
        Some(PageType::Leaf) => Ok(None),
        Some(PageType::Branch) => {
            let (child, slot) = pick(p);
            let n = node::count(p);
            assert!(
                slot.is_none_or(|i| i < n),
                "a route through a cell of the page"
            );
            let next_i = slot.map_or(0, |i| i + 1);
            let up = (next_i < n).then(|| node::key(p, next_i).to_vec());
            let low = slot.map(|i| node::key(p, i).to_vec());
            Ok(Some((child, slot, up, low)))
        }
        _ => Err(corrupt(pages, no, "expected a tree page")),
    }
}
