//! The check of a leaf or branch page read from disk, before the tree uses
//! it: the layout of the parent module, verified byte by byte, returning an
//! error (never panicking) for anything a damaged or misdirected page can
//! hold. Pages the engine builds itself keep the same rules by construction.

use super::*;

/// Checks a page read from disk before the tree uses it; an error describes
/// what is wrong. The buffer pool runs it on every leaf and branch it
/// reads (other page types pass; their readers check what they use): the
/// slot array and cells lie inside the page, apart, each no larger than a
/// cell may be, and with the garbage count fill the cell area exactly,
/// keys ascend, a child or an
/// overflow chain names a page that can be one (not the head, page 0, nor
/// the no-page mark; an empty branch, being built, may have no leftmost
/// child yet), and an overflow value is at most
/// [`VALUE_MAX`](crate::btree::tree::VALUE_MAX).
pub fn validate(p: &[u8]) -> Result<(), String> {
    let t = page_type(p).ok_or("unknown page type")?;
    if !matches!(t, PageType::Leaf | PageType::Branch) {
        return validate_free(p, t);
    }
    let n = count(p);
    let start = cell_start(p);
    if SLOTS + 2 * n > start || start > p.len() {
        return Err(format!("slot array ({n} slots) overlaps cells at {start}"));
    }
    if t == PageType::Branch {
        // A branch being built is empty with no leftmost child yet (page
        // zero); a commit's page records pass through that state, and
        // replay may write a page out in it.
        let leftmost = u64_at(p, LEFTMOST);
        if n > 0 || leftmost != 0 {
            check_link(leftmost, "the leftmost child")?;
        }
    }
    let h = if t == PageType::Leaf {
        LEAF_CELL_HEADER
    } else {
        BRANCH_CELL_HEADER
    };
    let mut prev: Option<&[u8]> = None;
    let mut cells = Vec::with_capacity(n);
    for i in 0..n {
        let c = slot(p, i);
        if c < start || c + h > p.len() {
            return Err(format!("cell {i} at {c} is outside the cell area"));
        }
        let klen = u16_at(p, c);
        let (vlen, overflow) =
            value_len(p, t, c).ok_or_else(|| format!("cell {i} has unknown flags"))?;
        if c + h + klen + vlen > p.len() {
            return Err(format!("cell {i} runs past the page end"));
        }
        if 2 + h + klen + vlen > crate::btree::tree::cell_max(p.len()) {
            return Err(format!("cell {i} is larger than a cell may be"));
        }
        cells.push((c, h + klen + vlen));
        if t == PageType::Branch {
            check_link(u64_at(p, c + 2), &format!("cell {i}'s child"))?;
        }
        if overflow {
            let total = u32_at(p, c + 3) as usize;
            if total > crate::btree::tree::VALUE_MAX {
                return Err(format!(
                    "cell {i}'s overflow value of {total} bytes is over the limit"
                ));
            }
            check_link(
                u64_at(p, c + h + klen),
                &format!("cell {i}'s overflow chain"),
            )?;
        }
        let k = &p[c + h..c + h + klen];
        if prev.is_some_and(|pk| pk >= k) {
            return Err(format!("keys out of order at cell {i}"));
        }
        prev = Some(k);
    }
    check_cell_area(p, start, cells)
}

/// The bytes a cell at `c` of a page of type `t` keeps after its key for
/// its value (8 for an overflow link), and whether it links an overflow
/// chain; `None` for a leaf cell with unknown flags.
fn value_len(p: &[u8], t: PageType, c: usize) -> Option<(usize, bool)> {
    if t != PageType::Leaf {
        return Some((0, false));
    }
    let flags = p[c + 2];
    if flags & !OVERFLOW_FLAG != 0 {
        return None;
    }
    let overflow = flags & OVERFLOW_FLAG != 0;
    Some((
        if overflow {
            8
        } else {
            u32_at(p, c + 3) as usize
        },
        overflow,
    ))
}

/// Fails unless the cells (offset and length each) lie apart and, with the
/// garbage count, fill the cell area from `start` to the page end exactly:
/// what free space, compaction and removal reckon with.
fn check_cell_area(p: &[u8], start: usize, mut cells: Vec<(usize, usize)>) -> Result<(), String> {
    cells.sort_unstable();
    if let Some(w) = cells.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(format!("cells at {} and {} overlap", w[0].0, w[1].0));
    }
    let live: usize = cells.iter().map(|c| c.1).sum();
    let garbage = u16_at(p, GARBAGE);
    if live + garbage != p.len() - start {
        return Err(format!(
            "cells of {live} bytes and {garbage} of garbage do not fill the {} bytes from {start}",
            p.len() - start
        ));
    }
    Ok(())
}

/// Fails for a page number no link may hold: the head page, or
/// `u64::MAX` (the buffer pool's mark of a frame without a page).
/// A free page's link (0: the end of the list) names a page a file can
/// hold; other types than the tree's carry nothing more to check here.
fn validate_free(p: &[u8], t: PageType) -> Result<(), String> {
    if t != PageType::Free {
        return Ok(());
    }
    let next = crate::btree::tree::free_next(p).get();
    if next >= crate::constants::PAGE_COUNT_MAX {
        return Err(format!("the free-list link is page {next}, past any file"));
    }
    assert!(next < crate::constants::PAGE_COUNT_MAX);
    Ok(())
}

fn check_link(page: u64, what: &str) -> Result<(), String> {
    if page == 0 || page == u64::MAX {
        return Err(format!("{what} is page {page}, which no link may name"));
    }
    Ok(())
}
