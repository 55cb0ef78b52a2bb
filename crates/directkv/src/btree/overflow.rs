//! Overflow chains: values too large for a leaf cell, stored in a chain of
//! overflow pages the cell points at.
//!
//! Overflow page body after the common header (little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 48 | 8 | next page of the chain (0 at the end) |
//! | 56 | 8 | bytes of the value in this page |
//! | 64 | …  | the bytes |
//!
//! Invariants:
//! - A chain for a value of `len` bytes has `len.div_ceil(chunk)` pages, each
//!   but the last full; walks follow at most that many links, so a cycle on
//!   disk ends in an error, not a loop.
//! - A chain read back must add up to its value's length exactly, or the read
//!   is an [`Error::Corruption`](crate::Error::Corruption).

use super::node::{self, Value};
use super::tree::{corrupt, u64_at, Pages, PagesMut, VALUE_MAX};
use crate::buffer::Access;
use crate::error::Result;
use crate::format::page::{tree_of, PageType, PAGE_HEADER_BYTES};
use crate::format::PageId;

const OVERFLOW_NEXT: usize = PAGE_HEADER_BYTES;
const OVERFLOW_LEN: usize = PAGE_HEADER_BYTES + 8;
const OVERFLOW_DATA: usize = PAGE_HEADER_BYTES + 16;

/// Links overflow page `p` to `next` (the chain's next page; 0: its end).
pub(super) fn set_next(p: &mut [u8], next: PageId) {
    assert_eq!(node::page_type(p), Some(PageType::Overflow), "a chain page");
    p[OVERFLOW_NEXT..OVERFLOW_NEXT + 8].copy_from_slice(&next.get().to_le_bytes());
}

/// Bytes of a value one overflow page carries.
pub(super) fn chunk_bytes(page_bytes: usize) -> usize {
    assert!(
        page_bytes > OVERFLOW_DATA,
        "a page has room past its header"
    );
    page_bytes - OVERFLOW_DATA
}

/// Reads a value, following its overflow chain.
pub(super) fn load_value<P: Pages>(pages: &P, v: Value<'_>) -> Result<Vec<u8>> {
    match v {
        Value::Inline(b) => Ok(b.to_vec()),
        Value::Overflow { len, page } => read_overflow(pages, page, len as usize),
    }
}

/// Reads the `len` bytes of the chain starting at page `first`.
/// The pages of the overflow chain of a value of `len` bytes starting at
/// `first`, in chain order (read to follow the links).
///
/// # Errors
/// Page errors; corruption when a link leaves the chain's pages.
pub(super) fn chain_pages<P: Pages>(pages: &P, first: PageId, len: usize) -> Result<Vec<PageId>> {
    let chunk = chunk_bytes(pages.page_bytes());
    let mut out = Vec::new();
    let mut page = first;
    for _ in 0..len.div_ceil(chunk).max(1) {
        if page == PageId::ZERO {
            break;
        }
        out.push(page);
        page = pages.read(page, Access::Normal, |p| {
            PageId::new(u64_at(p, OVERFLOW_NEXT))
        })?;
    }
    assert!(
        out.len() <= len.div_ceil(chunk).max(1),
        "a chain within its length"
    );
    Ok(out)
}

pub(super) fn read_overflow<P: Pages>(pages: &P, first: PageId, len: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut page = first;
    let chunk_max = chunk_bytes(pages.page_bytes());
    let hops_max = len / chunk_max + 1;
    for _ in 0..hops_max {
        if out.len() == len {
            break;
        }
        let next = pages.read(page, Access::Normal, |p| {
            if node::page_type(p) != Some(PageType::Overflow) {
                return Err(corrupt(pages, page, "expected an overflow page"));
            }
            let n = u64_at(p, OVERFLOW_LEN) as usize;
            if n > chunk_max || out.len() + n > len {
                return Err(corrupt(pages, page, "overflow length out of range"));
            }
            out.extend_from_slice(&p[OVERFLOW_DATA..OVERFLOW_DATA + n]);
            Ok(PageId::new(u64_at(p, OVERFLOW_NEXT)))
        })??;
        page = next;
    }
    if out.len() != len {
        return Err(corrupt(
            pages,
            first,
            "overflow chain shorter than its value",
        ));
    }
    Ok(out)
}

/// Writes `value` as a new chain; returns its first page.
pub(super) fn write_overflow<P: PagesMut>(pages: &mut P, value: &[u8]) -> Result<PageId> {
    assert!(
        !value.is_empty() && value.len() <= VALUE_MAX,
        "a value for a chain"
    );
    let chunk = chunk_bytes(pages.page_bytes());
    // Written back to front, so each page knows its successor when created.
    let mut next = PageId::ZERO;
    let chunks: Vec<&[u8]> = value.chunks(chunk).collect();
    assert_eq!(
        chunks.len(),
        value.len().div_ceil(chunk),
        "a page per chunk"
    );
    for part in chunks.iter().rev() {
        next = pages.allocate(|p| {
            crate::format::page::init(p, PageType::Overflow);
            p[PAGE_HEADER_BYTES..].fill(0);
            p[OVERFLOW_NEXT..OVERFLOW_NEXT + 8].copy_from_slice(&next.get().to_le_bytes());
            p[OVERFLOW_LEN..OVERFLOW_LEN + 8].copy_from_slice(&(part.len() as u64).to_le_bytes());
            p[OVERFLOW_DATA..OVERFLOW_DATA + part.len()].copy_from_slice(part);
        })?;
    }
    assert_ne!(next, PageId::ZERO, "a chain has a first page");
    Ok(next)
}

/// Frees at most `most` pages (at least one) from the head of the chain of
/// a `len`-byte value starting at `first`, each checked to be a page of
/// tree `tree`; returns the rest of the chain (its first page and the bytes
/// it holds), `None` once the whole chain is free. Every page of a chain
/// but its last holds a whole chunk, so the rest is a chain of its own.
///
/// # Errors
/// Page and logging errors; corruption for a page of another tree.
pub(super) fn free_chain_head<P: PagesMut>(
    pages: &mut P,
    (first, len): (PageId, usize),
    most: usize,
    tree: u32,
) -> Result<Option<(PageId, usize)>> {
    let chunk = chunk_bytes(pages.page_bytes());
    let n = len.div_ceil(chunk).max(1);
    let mut page = first;
    let mut left = len;
    for _ in 0..n.min(most.max(1)) {
        if page == PageId::ZERO {
            return Ok(None);
        }
        let (next, of) = pages.read(page, Access::Normal, |p| {
            (PageId::new(u64_at(p, OVERFLOW_NEXT)), tree_of(p))
        })?;
        if of != tree {
            let what = format!("an overflow page of tree {of} in a chain of tree {tree}");
            return Err(corrupt(pages, page, &what));
        }
        pages.free(page)?;
        left = left.saturating_sub(chunk);
        page = next;
    }
    if n <= most.max(1) || page == PageId::ZERO {
        return Ok(None);
    }
    assert!(left > 0, "a rest of a chain holds bytes");
    Ok(Some((page, left)))
}

/// Frees the chain of a `len`-byte value starting at page `first`.
pub(super) fn free_overflow<P: PagesMut>(pages: &mut P, first: PageId, len: usize) -> Result<()> {
    let chunk = chunk_bytes(pages.page_bytes());
    let mut page = first;
    for _ in 0..len.div_ceil(chunk).max(1) {
        if page == PageId::ZERO {
            break;
        }
        let next = pages.read(page, Access::Normal, |p| {
            PageId::new(u64_at(p, OVERFLOW_NEXT))
        })?;
        pages.free(page)?;
        page = next;
    }
    Ok(())
}
