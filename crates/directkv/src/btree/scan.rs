//! Ordered scans in both directions, one leaf (or a bounded part of one) per
//! batch, and the leaves a forward scan will want next (readahead).
//!
//! There are no sibling pointers: a scan moves to the next leaf by descending
//! again with the fence key the previous descent saw (the smallest separator
//! above the leaf, or the largest one at or below it for reverse scans).
//!
//! Invariants:
//! - A batch holds the entries of one leaf inside the range, in the leaf's
//!   order (reversed for reverse scans), at most as many as the leaf has,
//!   and stops after the entry whose overflow values bring it to
//!   [`SCAN_BATCH_OVERFLOW_BYTES_MAX`] (a leaf of small keys can name
//!   hundreds of large values: a batch holds a bounded part of them).
//! - The next batch starts past the leaf: forward at its upper fence, reverse
//!   below its lower fence; with no fence, or a key past the far end of the
//!   range seen, the range is done. A batch cut short ends at its last key:
//!   the next one starts just past it (`Excluded`), in the same leaf.
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

/// Overflow value bytes one scan batch loads before it stops (it always
/// holds at least one entry, whatever its value's size).
pub const SCAN_BATCH_OVERFLOW_BYTES_MAX: usize = 1 << 20;

/// How a leaf's collection ended.
enum End {
    /// At the leaf's end: the next batch starts at its fence.
    Leaf,
    /// At a key past the far end of the range: no later leaf holds more.
    Beyond,
    /// At the overflow budget: the next batch starts past the last key.
    Budget,
}

/// The entries of `leaf` inside `(from, to)`, in key order (descending when
/// `reverse`), up to [`SCAN_BATCH_OVERFLOW_BYTES_MAX`] of overflow values,
/// and how the collection ended.
fn collect_leaf<P: Pages>(
    pages: &P,
    leaf: PageId,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
    reverse: bool,
) -> Result<(Entries, End)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut end = End::Leaf;
    let mut overflow_bytes = 0usize;
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
                end = End::Beyond;
                break;
            }
            match node::value(p, i) {
                Value::Inline(v) => out.push((k.to_vec(), v.to_vec())),
                Value::Overflow { len, page } => {
                    pending.push((out.len(), len, page));
                    out.push((k.to_vec(), Vec::new()));
                    overflow_bytes = overflow_bytes.saturating_add(len as usize);
                    if overflow_bytes >= SCAN_BATCH_OVERFLOW_BYTES_MAX {
                        end = End::Budget;
                        break;
                    }
                }
            }
        }
        assert!(out.len() <= n, "at most the leaf's entries");
        assert!(
            !matches!(end, End::Budget) || !out.is_empty(),
            "a batch cut at the budget holds an entry"
        );
        Ok(())
    })??;
    for (i, len, page) in pending {
        out[i].1 = load_value(pages, Value::Overflow { len, page })?;
    }
    Ok((out, end))
}

/// Where the batch after `out` starts, when it was cut at the budget.
fn past_last(out: &Entries) -> Option<Bound<Vec<u8>>> {
    let (last, _) = out
        .last()
        .expect("a batch cut at the budget holds an entry");
    Some(Bound::Excluded(last.clone()))
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
    let (out, end) = collect_leaf(pages, d.leaf, from, to, false)?;
    let next = match (end, d.upper) {
        (End::Budget, _) => past_last(&out),
        (End::Beyond, _) | (End::Leaf, None) => None,
        (End::Leaf, Some(up)) => in_upper(&up, to).then_some(Bound::Included(up)),
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
    let (out, end) = collect_leaf(pages, d.leaf, from, to, true)?;
    let next = match (end, d.lower) {
        (End::Budget, _) => past_last(&out),
        (End::Beyond, _) | (End::Leaf, None) => None,
        (End::Leaf, Some(low)) => in_lower(&low, from).then_some(Bound::Excluded(low)),
    };
    Ok((out, next))
}
