//! Slotted B+tree pages: the byte layout of leaves and branches, and the edits
//! the tree makes to them. Pure functions over a page buffer; no I/O.
//!
//! Body layout after the 48-byte common header (little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 48 | 2 | slot count `n` |
//! | 50 | 2 | cell start: lowest byte used by cells (cells grow down from the end) |
//! | 52 | 2 | garbage: bytes of dead cells that compaction can reclaim |
//! | 54 | 2 | reserved (zero) |
//! | 56 | 8 | branch: leftmost child page; leaf: zero |
//! | 64 | 2n | slot array: offsets of the cells, in key order |
//!
//! Leaf cell: `klen u16 | flags u8 | vlen u32 | key | value` where flags bit 0
//! marks an overflow value, stored as `first page u64` (vlen is then the total).
//! Branch cell: `klen u16 | child u64 | key`; the child holds keys ≥ key, the
//! leftmost child keys below the first key.
//!
//! [`validate`] checks all of this for a page from disk, so the accessors
//! below can index without checks on pages that passed it (or that the engine
//! built itself).
//!
//! Invariants (of pages the engine builds; a page from disk is checked by
//! [`validate`], which returns an error, never panics):
//! - Slots are in strictly ascending key order (checked in debug builds after
//!   every insert and split).
//! - The slot array ends at or before the cell area: `64 + 2n ≤ cell start`.
//! - Compaction changes no cell and frees exactly the garbage.
//! - A split (`node_split.rs`) leaves both halves non-empty.

use crate::format::page::{PageType, PAGE_HEADER_BYTES, PAGE_SIZES};

const N: usize = PAGE_HEADER_BYTES;
const CELL_START: usize = N + 2;
const GARBAGE: usize = N + 4;
const LEFTMOST: usize = N + 8;
/// Where the slot array begins.
pub const SLOTS: usize = N + 16;
/// Bytes of a leaf cell before its key.
pub const LEAF_CELL_HEADER: usize = 7;
/// Bytes of a branch cell before its key.
pub const BRANCH_CELL_HEADER: usize = 10;
const OVERFLOW_FLAG: u8 = 1;

pub use super::node_split::split;
pub use check::validate;

mod check;

/// A page offset or count stored as a `u16` at `o`, as an index.
fn u16_at(p: &[u8], o: usize) -> usize {
    usize::from(le::u16_at(p, o))
}

/// Stores the page offset or count `v` as a `u16` at `o`.
fn set_u16(p: &mut [u8], o: usize, v: usize) {
    let v = u16::try_from(v).expect("page offsets fit in u16 (pages are at most 16 KiB)");
    le::put_u16(p, o, v);
}

use crate::format::le::{self, u32_at, u64_at};
use crate::format::PageId;

/// The page type stored in the common header.
pub fn page_type(p: &[u8]) -> Option<PageType> {
    match u16::from_le_bytes([p[8], p[9]]) {
        1 => Some(PageType::Leaf),
        2 => Some(PageType::Branch),
        3 => Some(PageType::Overflow),
        4 => Some(PageType::Free),
        _ => None,
    }
}

/// Formats `p` as an empty leaf.
pub fn init_leaf(p: &mut [u8]) {
    init(p, PageType::Leaf, PageId::new(0));
}

/// Formats `p` as a branch with only its leftmost child.
pub fn init_branch(p: &mut [u8], leftmost: PageId) {
    init(p, PageType::Branch, leftmost);
}

fn init(p: &mut [u8], t: PageType, leftmost: PageId) {
    assert!(
        PAGE_SIZES.contains(&(p.len() as u32)),
        "a page of {} bytes",
        p.len()
    );
    crate::format::page::init(p, t);
    p[N..].fill(0);
    set_u16(p, CELL_START, p.len());
    p[LEFTMOST..LEFTMOST + 8].copy_from_slice(&leftmost.get().to_le_bytes());
}

/// Cells in the page.
pub fn count(p: &[u8]) -> usize {
    u16_at(p, N)
}

fn cell_start(p: &[u8]) -> usize {
    u16_at(p, CELL_START)
}

pub(super) fn slot(p: &[u8], i: usize) -> usize {
    u16_at(p, SLOTS + 2 * i)
}

pub(super) fn is_leaf(p: &[u8]) -> bool {
    page_type(p) == Some(PageType::Leaf)
}

/// The key of cell `i`.
pub fn key(p: &[u8], i: usize) -> &[u8] {
    debug_assert!(i < count(p), "cell {i} of {}", count(p));
    let c = slot(p, i);
    let klen = u16_at(p, c);
    let h = if is_leaf(p) {
        LEAF_CELL_HEADER
    } else {
        BRANCH_CELL_HEADER
    };
    &p[c + h..c + h + klen]
}

/// A leaf cell's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Stored in the cell.
    Inline(&'a [u8]),
    /// Stored in an overflow chain.
    Overflow {
        /// Total length.
        len: u32,
        /// First overflow page.
        page: PageId,
    },
}

impl Value<'_> {
    /// Bytes this value occupies in a cell.
    pub fn cell_bytes(&self) -> usize {
        match self {
            Value::Inline(v) => v.len(),
            Value::Overflow { .. } => 8,
        }
    }
}

/// The value of leaf cell `i`.
pub fn value(p: &[u8], i: usize) -> Value<'_> {
    debug_assert!(is_leaf(p) && i < count(p), "a leaf's cell");
    let c = slot(p, i);
    let klen = u16_at(p, c);
    let flags = p[c + 2];
    let vlen = u32_at(p, c + 3);
    let v = c + LEAF_CELL_HEADER + klen;
    if flags & OVERFLOW_FLAG != 0 {
        Value::Overflow {
            len: vlen,
            page: PageId::new(u64_at(p, v)),
        }
    } else {
        Value::Inline(&p[v..v + vlen as usize])
    }
}

/// The child of branch cell `i`.
pub fn child(p: &[u8], i: usize) -> PageId {
    debug_assert!(!is_leaf(p) && i < count(p), "a branch's cell");
    PageId::new(u64_at(p, slot(p, i) + 2))
}

/// A branch's leftmost child.
pub fn leftmost(p: &[u8]) -> PageId {
    PageId::new(u64_at(p, LEFTMOST))
}

/// Sets a branch's leftmost child.
pub fn set_leftmost(p: &mut [u8], child: PageId) {
    p[LEFTMOST..LEFTMOST + 8].copy_from_slice(&child.get().to_le_bytes());
}

/// Sets the child of branch cell `i` (its key stays).
pub fn set_child(p: &mut [u8], i: usize, child: PageId) {
    assert!(!is_leaf(p) && i < count(p), "a branch's cell");
    let at = slot(p, i) + 2;
    p[at..at + 8].copy_from_slice(&child.get().to_le_bytes());
    debug_assert_eq!(self::child(p, i), child);
}

/// Binary search: `Ok(i)` if cell `i` has `key`, else `Err(i)` where it would go.
pub fn search(p: &[u8], k: &[u8]) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0usize, count(p));
    while lo < hi {
        let mid = (lo + hi) / 2;
        match key(p, mid).cmp(k) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    debug_assert!(lo <= count(p), "an insertion point within the page");
    Err(lo)
}

/// The child a branch routes `k` to, and its position: `None` for the leftmost.
pub fn route(p: &[u8], k: &[u8]) -> (PageId, Option<usize>) {
    match search(p, k) {
        Ok(i) => (child(p, i), Some(i)),
        Err(0) => (leftmost(p), None),
        Err(i) => (child(p, i - 1), Some(i - 1)),
    }
}

/// The child a branch routes keys just below `k` to: like [`route`], but a cell
/// whose key equals `k` is not taken (its child holds keys ≥ `k`).
pub fn route_below(p: &[u8], k: &[u8]) -> (PageId, Option<usize>) {
    match search(p, k) {
        Ok(0) | Err(0) => (leftmost(p), None),
        Ok(i) | Err(i) => (child(p, i - 1), Some(i - 1)),
    }
}

/// Bytes a leaf cell for `key`/`value` takes, slot included.
pub fn leaf_cell_bytes(key: &[u8], v: &Value<'_>) -> usize {
    2 + LEAF_CELL_HEADER + key.len() + v.cell_bytes()
}

/// Free bytes after compaction.
pub fn free_bytes(p: &[u8]) -> usize {
    cell_start(p) - (SLOTS + 2 * count(p)) + u16_at(p, GARBAGE)
}

/// Bytes used by live cells and slots.
pub fn used_bytes(p: &[u8]) -> usize {
    p.len() - SLOTS - free_bytes(p)
}

pub(super) fn cell_len(p: &[u8], c: usize) -> usize {
    let klen = u16_at(p, c);
    if is_leaf(p) {
        let flags = p[c + 2];
        let vlen = if flags & OVERFLOW_FLAG != 0 {
            8
        } else {
            u32_at(p, c + 3) as usize
        };
        LEAF_CELL_HEADER + klen + vlen
    } else {
        BRANCH_CELL_HEADER + klen
    }
}

/// Rewrites the cells contiguously at the end of the page, dropping garbage.
pub fn compact(p: &mut [u8]) {
    let n = count(p);
    let free_before = free_bytes(p);
    // One copy of the page to move the cells from: a page-sized copy costs
    // less than an allocation per cell, and compaction runs whenever a full
    // leaf has a value replaced by one of a different size.
    let old = p.to_vec();
    let mut end = p.len();
    for i in 0..n {
        let c = slot(&old, i);
        let len = cell_len(&old, c);
        end -= len;
        p[end..end + len].copy_from_slice(&old[c..c + len]);
        set_u16(p, SLOTS + 2 * i, end);
    }
    let slots_end = SLOTS + 2 * n;
    assert!(slots_end <= end, "live cells fit beside their slots");
    p[slots_end..end].fill(0);
    set_u16(p, CELL_START, end);
    set_u16(p, GARBAGE, 0);
    assert_eq!(
        free_bytes(p),
        free_before,
        "compaction frees exactly the garbage"
    );
}

/// Reserves `len` bytes for a new cell at slot `i`; `None` if it does not fit.
fn reserve(p: &mut [u8], i: usize, len: usize) -> Option<usize> {
    if free_bytes(p) < len + 2 {
        return None;
    }
    let n = count(p);
    assert!(i <= n, "slot {i} of {n}");
    if cell_start(p) < SLOTS + 2 * (n + 1) + len {
        compact(p);
    }
    assert!(
        cell_start(p) >= SLOTS + 2 * (n + 1) + len,
        "free bytes are room after compaction"
    );
    let c = cell_start(p) - len;
    let at = SLOTS + 2 * i;
    p.copy_within(at..SLOTS + 2 * n, at + 2);
    set_u16(p, at, c);
    set_u16(p, N, n + 1);
    set_u16(p, CELL_START, c);
    Some(c)
}

/// Inserts a leaf cell at slot `i`; false if it does not fit.
pub fn leaf_insert(p: &mut [u8], i: usize, key: &[u8], v: &Value<'_>) -> bool {
    assert!(is_leaf(p), "a leaf cell goes into a leaf");
    assert!(
        key.len() <= u16::MAX as usize,
        "a key of {} bytes",
        key.len()
    );
    let len = LEAF_CELL_HEADER + key.len() + v.cell_bytes();
    let Some(c) = reserve(p, i, len) else {
        return false;
    };
    p[c..c + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    let k = c + LEAF_CELL_HEADER;
    p[k..k + key.len()].copy_from_slice(key);
    write_value(p, c, key.len(), v);
    debug_assert!(ordered_around(p, i), "keys in order after an insert");
    true
}

/// Whether cell `i`'s key sorts strictly between its neighbours'.
fn ordered_around(p: &[u8], i: usize) -> bool {
    let k = key(p, i);
    (i == 0 || key(p, i - 1) < k) && (i + 1 >= count(p) || k < key(p, i + 1))
}

/// Writes the flags, length and bytes of `v` into the leaf cell at `c` whose
/// key is `klen` bytes long.
fn write_value(p: &mut [u8], c: usize, klen: usize, v: &Value<'_>) {
    let at = c + LEAF_CELL_HEADER + klen;
    let (flags, vlen) = match v {
        Value::Inline(b) => {
            assert!(
                b.len() <= u32::MAX as usize,
                "an inline value's length fits"
            );
            p[at..at + b.len()].copy_from_slice(b);
            (0, b.len() as u32)
        }
        Value::Overflow { len, page } => {
            p[at..at + 8].copy_from_slice(&page.get().to_le_bytes());
            (OVERFLOW_FLAG, *len)
        }
    };
    p[c + 2] = flags;
    p[c + 3..c + 7].copy_from_slice(&vlen.to_le_bytes());
}

/// Replaces the value of leaf cell `i` where it stands when the new value
/// takes exactly the bytes of the old one (an update of a fixed-size row);
/// false, changing nothing, otherwise. The cell does not move, so the change
/// is the value's bytes alone: no compaction, and a page record of a few
/// bytes instead of a moved cell and a shifted slot array.
pub fn leaf_overwrite(p: &mut [u8], i: usize, v: &Value<'_>) -> bool {
    assert!(is_leaf(p) && i < count(p), "a leaf's cell");
    let c = slot(p, i);
    let klen = u16_at(p, c);
    if cell_len(p, c) != LEAF_CELL_HEADER + klen + v.cell_bytes() {
        return false;
    }
    write_value(p, c, klen, v);
    true
}

/// Inserts a branch cell at slot `i`; false if it does not fit.
pub fn branch_insert(p: &mut [u8], i: usize, key: &[u8], child: PageId) -> bool {
    assert!(!is_leaf(p), "a branch cell goes into a branch");
    assert!(
        key.len() <= u16::MAX as usize,
        "a key of {} bytes",
        key.len()
    );
    let len = BRANCH_CELL_HEADER + key.len();
    let Some(c) = reserve(p, i, len) else {
        return false;
    };
    p[c..c + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    p[c + 2..c + 10].copy_from_slice(&child.get().to_le_bytes());
    p[c + BRANCH_CELL_HEADER..c + BRANCH_CELL_HEADER + key.len()].copy_from_slice(key);
    debug_assert!(ordered_around(p, i), "keys in order after an insert");
    true
}

/// Removes cell `i` (its bytes become garbage).
pub fn remove(p: &mut [u8], i: usize) {
    let n = count(p);
    assert!(i < n, "cell {i} of {n}");
    let c = slot(p, i);
    let len = cell_len(p, c);
    p[c..c + len].fill(0);
    let at = SLOTS + 2 * i;
    p.copy_within(at + 2..SLOTS + 2 * n, at);
    p[SLOTS + 2 * (n - 1)..SLOTS + 2 * n].fill(0);
    set_u16(p, N, n - 1);
    let g = u16_at(p, GARBAGE) + len;
    set_u16(p, GARBAGE, g);
    assert!(
        SLOTS + 2 * (n - 1) <= cell_start(p),
        "the slot array shrank"
    );
}

#[cfg(test)]
// Big-endian keys sort in numeric order, which these tests rely on; no on-disk
// integer is written this way.
#[allow(clippy::big_endian_bytes)]
pub(super) mod tests {
    use super::*;

    /// An empty leaf of `size` bytes.
    pub(in crate::btree) fn leaf(size: usize) -> Vec<u8> {
        let mut p = vec![0u8; size];
        init_leaf(&mut p);
        p
    }

    /// Links no page can be are refused, except the missing leftmost child
    /// of an empty branch: the state a new branch is logged in before a
    /// split fills it.
    #[test]
    fn links_to_no_page_are_refused_but_a_branch_being_built_passes() {
        let mut p = vec![0u8; 4096];
        init_branch(&mut p, PageId::ZERO);
        validate(&p).expect("an empty branch being built");
        set_leftmost(&mut p, PageId::new(u64::MAX));
        assert!(validate(&p).is_err(), "the no-page mark");
        set_leftmost(&mut p, PageId::new(9));
        assert!(branch_insert(&mut p, 0, b"m", PageId::new(10)));
        validate(&p).expect("a branch with children");
        set_leftmost(&mut p, PageId::ZERO);
        assert!(
            validate(&p).is_err(),
            "a branch with cells needs its leftmost child"
        );
        set_leftmost(&mut p, PageId::new(9));
        assert!(branch_insert(&mut p, 1, b"t", PageId::ZERO));
        assert!(validate(&p).is_err(), "a child that is the head page");
    }

    /// The cell area must add up: cells apart, and live bytes plus the
    /// garbage count equal to the area. Each case passes every other check
    /// (keys ascend, cells inside the page), so only this one refuses it;
    /// compaction and removal would otherwise panic on it.
    #[test]
    fn a_cell_area_that_does_not_add_up_is_refused() {
        let mut p = leaf(4096);
        // Cell "a" whose value is the bytes of a whole cell "b" (klen 1,
        // flags 0, vlen 0, "b"), with room for a second cell before it.
        let embedded = [1u8, 0, 0, 0, 0, 0, 0, b'b'];
        assert!(leaf_insert(&mut p, 0, b"a", &Value::Inline(&embedded)));
        validate(&p).expect("one cell");
        let a = slot(&p, 0);
        assert_eq!(cell_len(&p, a), 16);
        let mut bad_garbage = p.clone();
        set_u16(&mut bad_garbage, GARBAGE, 0xFFF0);
        assert!(validate(&bad_garbage).is_err(), "garbage past the area");
        // A second slot, for "b", pointing inside "a"'s value; the area
        // grown by its length so that the bytes add up.
        set_u16(&mut p, N, 2);
        set_u16(&mut p, SLOTS + 2, a + 8);
        set_u16(&mut p, CELL_START, a - 8);
        assert_eq!(key(&p, 1), b"b");
        let err = validate(&p).expect_err("the cells overlap");
        assert!(err.contains("overlap"), "{err}");
        set_u16(&mut p, SLOTS + 2, a - 8);
        p[a - 8..a].copy_from_slice(&embedded);
        validate(&p).expect("the same cells apart");
    }

    #[test]
    fn insert_search_remove_compact() {
        let mut p = leaf(4096);
        for (i, k) in [b"b", b"d", b"a", b"c"].iter().enumerate() {
            let at = search(&p, *k).expect_err("absent");
            assert!(leaf_insert(&mut p, at, *k, &Value::Inline(&[i as u8; 10])));
        }
        assert_eq!(count(&p), 4);
        let keys: Vec<_> = (0..4).map(|i| key(&p, i).to_vec()).collect();
        assert_eq!(
            keys,
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        assert_eq!(value(&p, 0), Value::Inline(&[2u8; 10]));
        validate(&p).expect("valid");
        let free = free_bytes(&p);
        remove(&mut p, 1);
        assert_eq!(free_bytes(&p), free + 2 + LEAF_CELL_HEADER + 1 + 10);
        compact(&mut p);
        validate(&p).expect("valid after compaction");
        assert_eq!(search(&p, b"c"), Ok(1));
    }

    #[test]
    fn same_size_values_are_replaced_in_place() {
        let mut p = leaf(4096);
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            assert!(leaf_insert(&mut p, i, *k, &Value::Inline(&[i as u8; 10])));
        }
        let before = p.clone();
        let at = slot(&p, 1);
        assert!(leaf_overwrite(&mut p, 1, &Value::Inline(&[9u8; 10])));
        assert_eq!(slot(&p, 1), at, "the cell did not move");
        assert_eq!(value(&p, 1), Value::Inline(&[9u8; 10]));
        validate(&p).expect("valid");
        let changed: Vec<usize> = (0..p.len()).filter(|&i| p[i] != before[i]).collect();
        assert!(
            changed.iter().all(|&i| (at..at + 18).contains(&i)),
            "{changed:?}"
        );
        // A value of another size, or an overflow pointer in place of 10
        // inline bytes, is refused and changes nothing.
        let kept = p.clone();
        assert!(!leaf_overwrite(&mut p, 1, &Value::Inline(&[9u8; 11])));
        assert!(!leaf_overwrite(
            &mut p,
            1,
            &Value::Overflow {
                len: 5000,
                page: PageId::new(3)
            }
        ));
        assert_eq!(p, kept);
        // An 8-byte inline value and an overflow pointer take the same bytes.
        assert!(leaf_insert(&mut p, 3, b"d", &Value::Inline(&[1u8; 8])));
        assert!(leaf_overwrite(
            &mut p,
            3,
            &Value::Overflow {
                len: 5000,
                page: PageId::new(3)
            }
        ));
        assert_eq!(
            value(&p, 3),
            Value::Overflow {
                len: 5000,
                page: PageId::new(3)
            }
        );
        validate(&p).expect("valid");
    }

    #[test]
    fn validate_rejects_garbage() {
        let mut p = leaf(4096);
        assert!(leaf_insert(&mut p, 0, b"k", &Value::Inline(b"v")));
        let mut bad = p.clone();
        bad[SLOTS] = 0xFF;
        bad[SLOTS + 1] = 0xFF;
        assert!(validate(&bad).is_err());
        let mut bad = p.clone();
        set_u16(&mut bad, N, 2000);
        assert!(validate(&bad).is_err());
    }
}
