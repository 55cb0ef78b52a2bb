//! Ordered scans in both directions, one leaf per batch, and the leaves a
//! forward scan will want next (readahead).
//!
//! There are no sibling pointers: a scan moves to the next leaf by descending
//! again with the fence key the previous descent saw (the smallest separator
//! above the leaf, or the largest one at or below it for reverse scans).
//!
//! Invariants:
//! - A batch holds the entries of one leaf inside the range, in the leaf's
//!   order (reversed for reverse scans), at most as many as the leaf has.
//! - The next batch starts past the leaf: forward at its upper fence, reverse
//!   below its lower fence; with no fence, or a key past the far end of the
//!   range seen, the range is done.
//! - Key order across pages is what the pages say; a scan checks nothing it
//!   read against another page (that is `Database::check`'s work).

use std::ops::Bound;

use super::descent::{descend, descend_below, descend_last};
use super::node::{self, Value};
use super::overflow::load_value;
use super::tree::{corrupt, Batch, Entries, Pages};
use crate::buffer::Access;
use crate::error::Result;
use crate::format::page::PageType;
use crate::format::PageId;

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
    leaf: PageId,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
    reverse: bool,
) -> Result<(Entries, bool)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut beyond = false;
    pages.read(leaf, Access::Scan, |p| {
        // Read again by number after the descent: a lock-free reader may
        // find it changed since (its caller then runs again).
        if !node::is_leaf(p) {
            return Err(corrupt(pages, leaf, "expected a leaf"));
        }
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
        assert!(out.len() <= n, "at most the leaf's entries");
        Ok(())
    })??;
    for (i, len, page) in pending {
        out[i].1 = load_value(pages, Value::Overflow { len, page })?;
    }
    Ok((out, beyond))
}

/// The next batch of a forward scan of `(from, to)`: the entries of one leaf.
///
/// # Errors
/// Page read and verification errors.
pub fn scan_forward<P: Pages>(
    pages: &P,
    root: PageId,
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
pub fn following_leaves<P: Pages>(
    pages: &P,
    root: PageId,
    key: &[u8],
    n: usize,
) -> Result<Vec<PageId>> {
    let d = descend(pages, root, key, Access::Normal)?;
    let Some(parent) = d.path.last() else {
        return Ok(Vec::new());
    };
    let first = parent.slot.map_or(0, |i| i + 1);
    let leaves: Vec<PageId> = pages.read(parent.page, Access::Normal, |p| {
        if node::page_type(p) != Some(PageType::Branch) {
            return Err(corrupt(pages, parent.page, "expected a branch"));
        }
        Ok((first..node::count(p).min(first + n))
            .map(|j| node::child(p, j))
            .collect())
    })??;
    assert!(leaves.len() <= n, "at most the leaves asked for");
    Ok(leaves)
}

/// The next batch of a reverse scan of `(from, to)`, entries in descending order.
///
/// # Errors
/// Page read and verification errors.
pub fn scan_reverse<P: Pages>(
    pages: &P,
    root: PageId,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> Result<Batch> {
    // Descend to the leaf holding the upper end; with no upper end, the last leaf.
    let d = match to {
        Bound::Included(k) => descend(pages, root, k, Access::Normal)?,
        Bound::Excluded(k) => descend_below(pages, root, k)?,
        Bound::Unbounded => descend_last(pages, root)?,
    };
    let (out, beyond) = collect_leaf(pages, d.leaf, from, to, true)?;
    let next = match (beyond, d.lower) {
        (true, _) | (false, None) => None,
        (false, Some(low)) => in_lower(&low, from).then_some(Bound::Excluded(low)),
    };
    Ok((out, next))
}
