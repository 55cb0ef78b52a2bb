//! The engine's WAL records (kinds 20–23), encoded little-endian.
//!
//! | kind | name | payload |
//! |------|------|---------|
//! | 20 | page | txn u64, page u64, flags u8 (1 = full image), n u16, then n × (offset u16, len u16, bytes); a full image is one range covering the page |
//! | 21 | commit | txn u64, root u64, page count u64, free-list head u64 |
//! | 22 | checkpoint | redo LSN u64, root u64, page count u64, free-list head u64 |
//! | 23 | abort | txn u64 |
//!
//! Page records are physical: replaying one writes bytes at offsets. A page's
//! LSN is the end of the commit record of the last transaction that changed it,
//! so redo applies a committed transaction's page records to a page exactly when
//! the page's LSN is below that commit's LSN.

use crate::error::{Error, Result};

/// Kind of a page record.
pub const PAGE: u8 = 20;
/// Kind of a commit record.
pub const COMMIT: u8 = 21;
/// Kind of a checkpoint record.
pub const CHECKPOINT: u8 = 22;
/// Kind of an abort record.
pub const ABORT: u8 = 23;

/// The tree's root state, carried by commit and checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    /// The root page.
    pub root: u64,
    /// Pages in the data file (the next page to allocate past the free list).
    pub page_count: u64,
    /// Head of the free-page list; 0 when empty.
    pub freelist: u64,
}

fn bad(what: &str) -> Error {
    Error::Corruption {
        path: "wal".into(),
        offset: 0,
        detail: format!("malformed {what} record"),
    }
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn u16_at(b: &[u8], o: usize) -> Option<usize> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?) as usize)
}

/// Encodes a page record from the changed ranges of `after`.
pub fn encode_page(
    txn: u64,
    page: u64,
    full: bool,
    ranges: &[(usize, usize)],
    after: &[u8],
) -> Vec<u8> {
    let bytes: usize = ranges.iter().map(|r| 4 + r.1).sum();
    let mut out = Vec::with_capacity(19 + bytes);
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&page.to_le_bytes());
    out.push(u8::from(full));
    out.extend_from_slice(&(ranges.len() as u16).to_le_bytes());
    for &(off, len) in ranges {
        // A 16 KiB page's full range has length 16384, which fits in u16.
        out.extend_from_slice(&(off as u16).to_le_bytes());
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&after[off..off + len]);
    }
    out
}

/// A decoded page record.
#[derive(Debug)]
pub struct PageRecord<'a> {
    /// The transaction.
    pub txn: u64,
    /// The page.
    pub page: u64,
    /// Whether it is a full image.
    pub full: bool,
    ranges: &'a [u8],
    n: usize,
}

impl PageRecord<'_> {
    /// Writes the record's bytes into `page`.
    ///
    /// # Errors
    /// [`Error::Corruption`] when a range falls outside the page.
    pub fn apply(&self, page: &mut [u8]) -> Result<()> {
        let mut at = 0usize;
        for _ in 0..self.n {
            let off = u16_at(self.ranges, at).ok_or_else(|| bad("page"))?;
            let len = u16_at(self.ranges, at + 2).ok_or_else(|| bad("page"))?;
            let bytes = self
                .ranges
                .get(at + 4..at + 4 + len)
                .ok_or_else(|| bad("page"))?;
            page.get_mut(off..off + len)
                .ok_or_else(|| bad("page (range beyond the page)"))?
                .copy_from_slice(bytes);
            at += 4 + len;
        }
        Ok(())
    }
}

/// Decodes a page record.
///
/// # Errors
/// [`Error::Corruption`] when it is malformed.
pub fn decode_page(b: &[u8]) -> Result<PageRecord<'_>> {
    let txn = u64_at(b, 0).ok_or_else(|| bad("page"))?;
    let page = u64_at(b, 8).ok_or_else(|| bad("page"))?;
    let full = *b.get(16).ok_or_else(|| bad("page"))? == 1;
    let n = u16_at(b, 17).ok_or_else(|| bad("page"))?;
    Ok(PageRecord {
        txn,
        page,
        full,
        ranges: &b[19..],
        n,
    })
}

/// Encodes a commit (or checkpoint, with `first` = redo LSN) record.
pub fn encode_meta(first: u64, meta: &Meta) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    for v in [first, meta.root, meta.page_count, meta.freelist] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Decodes a commit or checkpoint record: (txn or redo LSN, meta).
///
/// # Errors
/// [`Error::Corruption`] when it is malformed.
pub fn decode_meta(b: &[u8]) -> Result<(u64, Meta)> {
    let get = |i: usize| u64_at(b, 8 * i).ok_or_else(|| bad("commit"));
    Ok((
        get(0)?,
        Meta {
            root: get(1)?,
            page_count: get(2)?,
            freelist: get(3)?,
        },
    ))
}

/// The byte ranges where `before` and `after` differ, with gaps of under 16
/// bytes merged, so each range costs its 4-byte header at most once per 16.
pub fn diff(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
    const GAP: usize = 16;
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    let n = before.len();
    while i < n {
        // Skip equal 8-byte words quickly.
        if i + 8 <= n && before[i..i + 8] == after[i..i + 8] {
            i += 8;
            continue;
        }
        if before[i] == after[i] {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        while end < n
            && (before[end] != after[end]
                || (end + GAP < n && before[end..end + GAP] != after[end..end + GAP]))
        {
            end += 1;
        }
        match out.last_mut() {
            Some(last) if start - (last.0 + last.1) < GAP => last.1 = end - last.0,
            _ => out.push((start, end - start)),
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_then_apply_reproduces_the_page() {
        let before = vec![0u8; 4096];
        let mut after = before.clone();
        after[100..110].fill(1);
        after[4000] = 9;
        after[115] = 3;
        let ranges = diff(&before, &after);
        assert!(ranges.len() <= 2, "{ranges:?}");
        let rec = encode_page(7, 3, false, &ranges, &after);
        let d = decode_page(&rec).expect("decode");
        assert_eq!((d.txn, d.page, d.full), (7, 3, false));
        let mut page = before.clone();
        d.apply(&mut page).expect("apply");
        assert_eq!(page, after);
        assert!(diff(&after, &after).is_empty());
    }

    #[test]
    fn meta_round_trip() {
        let m = Meta {
            root: 5,
            page_count: 99,
            freelist: 12,
        };
        assert_eq!(decode_meta(&encode_meta(42, &m)).expect("decode"), (42, m));
        assert!(decode_meta(&[1, 2, 3]).is_err());
        assert!(decode_page(&[0; 5]).is_err());
    }
}
