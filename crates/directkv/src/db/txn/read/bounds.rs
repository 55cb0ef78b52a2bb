//! Key ranges as reads take them: owned bounds, the transaction's own
//! writes inside a range, a prefix's range, and where a scan's batches end.

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use super::super::versions::nonempty;

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(in crate::db) fn bounds<'k, R: RangeBounds<&'k [u8]>>(
    r: &R,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (
        owned(r.start_bound().cloned()),
        owned(r.end_bound().cloned()),
    )
}

pub(in crate::db) fn overlay_range(
    writes: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    if !nonempty(from, to) {
        return BTreeMap::new();
    }
    writes
        .range::<Vec<u8>, _>((from.clone(), to.clone()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether `key` is inside the range `(lo, hi)`.
pub(super) fn in_bounds(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    let above = match lo {
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// The bound that ends a batch where the next one, starting at `next`,
/// begins (the batches of a scan partition its range).
pub(super) fn batch_end(next: &Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match next {
        Bound::Included(k) => Bound::Excluded(k.clone()),
        Bound::Excluded(k) => Bound::Included(k.clone()),
        Bound::Unbounded => unreachable!("a scan's next batch starts at a key"),
    }
}

pub(in crate::db) fn prefix_bounds(prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    // The smallest key above every key with the prefix: the prefix with its
    // last non-0xFF byte incremented and the rest dropped.
    let mut end = prefix.to_vec();
    while let Some(&last) = end.last() {
        if last == 0xFF {
            end.pop();
        } else {
            *end.last_mut().expect("non-empty") += 1;
            assert!(
                end.as_slice() > prefix && !end.starts_with(prefix),
                "the end is above every key with the prefix"
            );
            return (Bound::Included(prefix.to_vec()), Bound::Excluded(end));
        }
    }
    (Bound::Included(prefix.to_vec()), Bound::Unbounded)
}
