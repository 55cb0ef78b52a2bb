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
//! This file holds the limits, the page-store traits, the free-page format and
//! point lookups; descents, scans, inserts, deletes and overflow chains each
//! have their own file, their functions re-exported here.
//!
//! Invariants:
//! - No recursion: descents keep an explicit path of at most [`DEPTH_MAX`]
//!   levels, and every walk up or down it is bounded by that.
//! - A cell is at most [`cell_max`] bytes, a quarter of the page's body, so a
//!   split always leaves room; keys are at most [`key_max`], values at most
//!   [`VALUE_MAX`] (larger ones are refused, never truncated).
//! - Anything read from a page that breaks the tree's shape is an
//!   [`Error::Corruption`], never a panic.

use std::ops::Bound;

use super::descent::{descend, Descent};
use super::node::{self, Value};
use super::overflow::read_overflow;
use crate::buffer::Access;
use crate::error::{Error, Result};
use crate::format::page::{PageType, PAGE_HEADER_BYTES, PAGE_SIZES};
use crate::format::PageId;

pub use super::delete::{delete_along, free_first_leaf, pages_freed_next, remove_along};
#[cfg(test)]
pub use super::insert::replace;
pub use super::insert::{put_along, replace_along};
pub use super::relocate::{relocate_along, Relocated};
pub use super::scan::{following_leaves, scan_forward, scan_reverse};

/// The deepest tree allowed. At 4 KiB pages and 1 KiB keys a branch holds at
/// least 3 children, so 3^32 leaves: far more than any file holds.
pub const DEPTH_MAX: usize = 32;
/// The largest key with 8 and 16 KiB pages; smaller with 4 KiB (see [`key_max`]).
pub const KEY_MAX: usize = 1024;
/// The largest value a write transaction's `put` takes, in bytes (64 MiB);
/// a larger one is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// and nothing is written.
pub const VALUE_MAX: usize = 64 << 20;

const FREE_NEXT: usize = PAGE_HEADER_BYTES;

/// The largest cell (slot included) a page takes, so a split always leaves room.
pub fn cell_max(page_bytes: usize) -> usize {
    assert!(
        page_bytes > node::SLOTS,
        "a page has room past its slot array"
    );
    (page_bytes - node::SLOTS) / 4
}

/// The largest key for a page size: 1024, or less where a quarter page is less.
pub fn key_max(page_bytes: usize) -> usize {
    let max = KEY_MAX.min(cell_max(page_bytes) - 2 - node::LEAF_CELL_HEADER - 8);
    assert!(max > 0, "a page of {page_bytes} bytes holds a key");
    max
}

/// Read access to pages.
pub trait Pages {
    /// Runs `f` on page `no`, share-latched.
    ///
    /// # Errors
    /// The page cannot be read or fails verification.
    fn read<R>(&self, no: PageId, access: Access, f: impl FnOnce(&[u8]) -> R) -> Result<R>;
    /// The page size.
    fn page_bytes(&self) -> usize;
    /// The error for page `no`, whose contents break the tree's shape as
    /// `what` says: it names the store's file, the page's byte offset in it
    /// and the page.
    fn corruption(&self, no: PageId, what: &str) -> Error;
}

/// Write access to pages, inside a transaction that logs every change.
pub trait PagesMut: Pages {
    /// Runs `f` on page `no`, exclusively latched; the change is logged.
    ///
    /// # Errors
    /// As [`Pages::read`], and logging errors.
    fn modify<R>(&mut self, no: PageId, f: impl FnOnce(&mut [u8]) -> R) -> Result<R>;
    /// Allocates a page (from the free list or by growing the file) and lets
    /// `init` format it; the new page is logged.
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    fn allocate(&mut self, init: impl FnOnce(&mut [u8])) -> Result<PageId>;
    /// Announces a change that moves keys from a page to another (a
    /// split): readers descending without a lock must not trust a path
    /// read before it. Page frees, root moves and branch changes are
    /// known as such without it.
    fn restructure(&mut self) {}
    /// Returns page `no` to the free list.
    ///
    /// # Errors
    /// As [`modify`](Self::modify).
    fn free(&mut self, no: PageId) -> Result<()>;
    /// The root page.
    fn root(&self) -> PageId;
    /// Replaces the root page.
    fn set_root(&mut self, no: PageId);
}

/// Formats a free page pointing at the next free page.
pub fn init_free(p: &mut [u8], next: PageId) {
    assert!(p.len() >= FREE_NEXT + 8, "a page holds a free-list link");
    crate::format::page::init(p, PageType::Free);
    crate::format::page::set_tree(p, 0);
    p[PAGE_HEADER_BYTES..].fill(0);
    p[FREE_NEXT..FREE_NEXT + 8].copy_from_slice(&next.get().to_le_bytes());
}

/// The next page of a free page.
pub fn free_next(p: &[u8]) -> PageId {
    PageId::new(u64_at(p, FREE_NEXT))
}

/// Where a free page keeps the epoch of the compaction that listed it.
const FREE_EPOCH: usize = FREE_NEXT + 8;

/// The epoch of the compaction under which a free page was listed (0: no
/// compaction's; see `db::compact`).
pub fn free_epoch(p: &[u8]) -> u64 {
    u64_at(p, FREE_EPOCH)
}

/// Marks a free page as listed under the compaction of `epoch`.
pub fn set_free_epoch(p: &mut [u8], epoch: u64) {
    assert_eq!(
        node::page_type(p),
        Some(PageType::Free),
        "only a free page carries an epoch"
    );
    p[FREE_EPOCH..FREE_EPOCH + 8].copy_from_slice(&epoch.to_le_bytes());
}

/// Whether `p` is a free page a compaction of `epoch` has not listed: a
/// free page of another epoch (or of none).
pub fn free_unlisted(p: &[u8], epoch: u64) -> bool {
    node::page_type(p) == Some(PageType::Free)
        && crate::format::page::tree_of(p) == 0
        && free_epoch(p) != epoch
}

pub(super) use crate::format::le::u64_at;

/// The error for page `no` of `pages` whose contents break the tree's
/// shape: the store names its file and the page's byte offset in it.
pub(super) fn corrupt<P: Pages>(pages: &P, no: PageId, what: &str) -> Error {
    let e = pages.corruption(no, what);
    assert!(
        matches!(e, Error::Corruption { page: Some(p), .. } if p == no.get()),
        "a page store's corruption error names the page"
    );
    e
}

/// Where a descent for a key ended: the path from the root and the leaf.
/// A change of that key can start there instead of descending again, but
/// it is the tree's path only while the tree's structure is unchanged since
/// the descent: whoever keeps a trail checks that before handing it back
/// (see `db::shape`). The leaf's type is checked again where it is used.
pub struct Trail(pub(super) Descent);

/// Looks `key` up.
///
/// # Errors
/// Page read and verification errors.
pub fn get<P: Pages>(pages: &P, root: PageId, key: &[u8]) -> Result<Option<Vec<u8>>> {
    get_traced(pages, root, key).map(|(v, _)| v)
}

/// Looks `key` up, like [`get`], and returns the trail its descent took.
///
/// # Errors
/// As [`get`].
pub fn get_traced<P: Pages>(
    pages: &P,
    root: PageId,
    key: &[u8],
) -> Result<(Option<Vec<u8>>, Trail)> {
    let d = descend(pages, root, key, Access::Normal)?;
    let found = pages.read(d.leaf, Access::Normal, |p| {
        // A lock-free reader may find it changed since (its caller then
        // runs again).
        let p = leaf_or_corrupt(pages, p, d.leaf)?;
        Ok(node::search(p, key).ok().map(|i| match node::value(p, i) {
            Value::Inline(b) => Ok(b.to_vec()),
            Value::Overflow { len, page } => Err((len, page)),
        }))
    })??;
    let v = match found {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err((len, page))) => Some(read_overflow(pages, page, len as usize)?),
    };
    Ok((v, Trail(d)))
}

/// The descent for `key`: `trail` when given, else a new one from the root.
/// The caller's read of the leaf checks that it is one ([`leaf_or_corrupt`]).
pub(super) fn descend_or_follow<P: PagesMut>(
    pages: &P,
    key: &[u8],
    trail: Option<Trail>,
) -> Result<Descent> {
    let Some(Trail(d)) = trail else {
        return descend(pages, pages.root(), key, Access::Normal);
    };
    assert!(d.path.len() < DEPTH_MAX, "a path within the depth bound");
    assert!(
        d.lower.as_deref().is_none_or(|low| low <= key)
            && d.upper.as_deref().is_none_or(|up| key < up),
        "a trail is followed only for a key within its leaf's fences"
    );
    Ok(d)
}

/// `p`, page `no`, if it is a leaf: a descent's last page, read again by
/// number (a followed trail's, or a lock-free reader's that may have
/// changed since), is checked, never trusted.
pub(super) fn leaf_or_corrupt<'p, P: Pages>(
    pages: &P,
    p: &'p [u8],
    no: PageId,
) -> Result<&'p [u8]> {
    if node::is_leaf(p) {
        Ok(p)
    } else {
        Err(corrupt(pages, no, "expected a leaf"))
    }
}

/// Key-value pairs.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Entries of one leaf in `[from, to]` (forward) and where the next batch
/// starts: `None` when the range is exhausted.
pub type Batch = (Entries, Option<Bound<Vec<u8>>>);

// Key lengths are stored in a u16, value lengths in a u32; the smallest page
// size holds a cell of some key.
const _: () = assert!(KEY_MAX < u16::MAX as usize);
const _: () = assert!(VALUE_MAX <= u32::MAX as usize);
const _: () = assert!((PAGE_SIZES[0] as usize - node::SLOTS) / 4 > node::LEAF_CELL_HEADER + 10);
