//! Splitting a full slotted page in two, by bytes: the edit that makes room
//! when a cell does not fit. Pure functions over page buffers; no I/O.
//!
//! Invariants:
//! - The split point leaves both halves cells: the left keeps at least one,
//!   the right gets at least one (a leaf) or its leftmost child (a branch).
//! - Every cell ends up in exactly one half, except a branch's middle key,
//!   which moves up as the separator.
//! - Both halves are well formed (checked in debug builds by `validate`).

use super::node::{
    branch_insert, cell_len, child, compact, count, init_branch, init_leaf, is_leaf, key,
    leaf_insert, remove, slot, used_bytes, validate, value, Value,
};

/// Moves the upper part of a full page into the empty page `right` (same type),
/// splitting by bytes. Returns the separator: the first key of `right` for a
/// leaf; for a branch, the middle key, which moves up (its child becomes
/// `right`'s leftmost).
pub fn split(p: &mut [u8], right: &mut [u8]) -> Vec<u8> {
    let n = count(p);
    assert!(n >= 2, "a page with fewer than two cells is never split");
    let leaf = is_leaf(p);
    let total = used_bytes(p);
    let mut acc = 0;
    let mut mid = n / 2;
    for i in 0..n {
        acc += 2 + cell_len(p, slot(p, i));
        if acc >= total / 2 {
            mid = (i + 1).clamp(1, n - 1);
            break;
        }
    }
    assert!(
        mid >= 1 && mid < n,
        "split point {mid} of {n} leaves both halves cells"
    );
    let sep = key(p, mid).to_vec();
    let (first_moved, sep_out) = if leaf {
        init_leaf(right);
        (mid, sep)
    } else {
        init_branch(right, child(p, mid));
        (mid + 1, sep)
    };
    for (j, i) in (first_moved..n).enumerate() {
        let k = key(p, i).to_vec();
        let ok = if leaf {
            let (inline, v) = match value(p, i) {
                Value::Inline(b) => (b.to_vec(), None),
                o => (Vec::new(), Some(o)),
            };
            leaf_insert(right, j, &k, &v.unwrap_or(Value::Inline(&inline)))
        } else {
            branch_insert(right, j, &k, child(p, i))
        };
        assert!(ok, "half a page fits in an empty page");
    }
    for i in (mid..n).rev() {
        remove(p, i);
    }
    compact(p);
    assert_eq!(
        count(p),
        mid,
        "the left half keeps the cells below the split"
    );
    assert_eq!(
        count(right),
        n - first_moved,
        "the right half gets the rest"
    );
    assert!(
        !leaf || count(right) > 0,
        "both halves of a leaf split hold cells"
    );
    debug_assert!(
        validate(p).is_ok() && validate(right).is_ok(),
        "halves well formed"
    );
    sep_out
}

#[cfg(test)]
// Big-endian keys sort in numeric order, which these tests rely on; no on-disk
// integer is written this way.
#[allow(clippy::big_endian_bytes)]
mod tests {
    use super::super::node::tests::leaf;
    use super::super::node::{
        branch_insert, count, free_bytes, init_branch, key, leaf_insert, leftmost, route, search,
        validate, Value,
    };
    use super::*;
    use crate::format::PageId;

    #[test]
    fn fills_then_splits() {
        let mut p = leaf(4096);
        let mut i = 0u32;
        loop {
            let k = i.to_be_bytes();
            let at = search(&p, &k).expect_err("absent");
            if !leaf_insert(&mut p, at, &k, &Value::Inline(&[7; 50])) {
                break;
            }
            i += 1;
        }
        let mut right = vec![0u8; 4096];
        let sep = split(&mut p, &mut right);
        validate(&p).expect("left");
        validate(&right).expect("right");
        assert_eq!(count(&p) + count(&right), i as usize);
        assert_eq!(key(&right, 0), sep.as_slice());
        assert!(key(&p, count(&p) - 1) < sep.as_slice());
        assert!(free_bytes(&p) > 1500 && free_bytes(&right) > 1500);
    }

    #[test]
    fn branch_routes_and_splits() {
        let mut b = vec![0u8; 4096];
        init_branch(&mut b, PageId::new(100));
        for i in 0..150u32 {
            let k = (i * 10).to_be_bytes();
            assert!(branch_insert(
                &mut b,
                i as usize,
                &k,
                PageId::new(1000 + u64::from(i))
            ));
        }
        assert_eq!(route(&b, &[0, 0, 0, 0]), (PageId::new(1000), Some(0)));
        assert_eq!(route(&b, &5u32.to_be_bytes()), (PageId::new(1000), Some(0)));
        assert_eq!(
            route(&b, &15u32.to_be_bytes()),
            (PageId::new(1001), Some(1))
        );
        let mut empty_key_branch = vec![0u8; 4096];
        init_branch(&mut empty_key_branch, PageId::new(7));
        assert_eq!(route(&empty_key_branch, b"x"), (PageId::new(7), None));
        let mut right = vec![0u8; 4096];
        let sep = split(&mut b, &mut right);
        validate(&b).expect("left");
        validate(&right).expect("right");
        assert_eq!(count(&b) + count(&right) + 1, 150);
        assert_eq!(route(&right, &sep).0, leftmost(&right));
    }
}
