//! The engine's WAL records (kinds 20–23), encoded little-endian.
//!
//! | kind | name | payload |
//! |------|------|---------|
//! | 20 | page | txn u64, page u64, flags u8 (1 = full image), n u16, then n × (offset u16, len u16, bytes); a full image is one range covering the page |
//! | 21 | commit | txn u64, root u64, page count u64, free-list head u64, time µs u64 (since the epoch; absent in logs of older builds) |
//! | 22 | checkpoint | redo LSN u64, root u64, page count u64, free-list head u64, time µs u64 of the last commit before it (absent in logs of older builds) |
//! | 23 | abort | txn u64 |
//!
//! Page records are physical: replaying one writes bytes at offsets. A page's
//! LSN is the end of the commit record of the last transaction that changed it,
//! so redo applies a committed transaction's page records to a page exactly when
//! the page's LSN is below that commit's LSN.

use crate::constants::{PAGE_COUNT_MAX, PAGE_COUNT_MIN, TXN_ID_MAX};
use crate::error::{Error, Result};
use crate::format::page::PAGE_SIZES;
use crate::format::{le, PageId, TxnId};
use crate::lsn::Lsn;

/// Kind of a page record.
pub const PAGE: u8 = 20;
/// Kind of a commit record.
pub const COMMIT: u8 = 21;
/// Kind of a checkpoint record.
pub const CHECKPOINT: u8 = 22;
/// Kind of an abort record.
pub const ABORT: u8 = 23;

/// The tree's root state, carried by commit and checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The root page.
    pub root: PageId,
    /// Pages in the data file (the next page to allocate past the free list).
    pub page_count: u64,
    /// Head of the free-page list; [`PageId::ZERO`] when empty.
    pub freelist: PageId,
}

fn bad(what: &str) -> Error {
    Error::Corruption {
        path: "wal".into(),
        offset: 0,
        page: None,
        detail: format!("malformed {what} record"),
    }
}

/// A record whose bytes parse but whose field is out of its range: what no
/// build writes (a bug's record, or a crafted log).
fn out_of_range(kind: &str, detail: String) -> Error {
    Error::Corruption {
        path: "wal".into(),
        offset: 0,
        page: None,
        detail: format!("{kind} record's {detail}"),
    }
}

/// Checks a transaction id a record carries.
fn check_txn(kind: &str, txn: u64) -> Result<TxnId> {
    if txn > TXN_ID_MAX {
        return Err(out_of_range(
            kind,
            format!("transaction id {txn} is past the largest, {TXN_ID_MAX}"),
        ));
    }
    Ok(TxnId::new(txn))
}

/// Checks the tree state a commit or checkpoint record carries: a page
/// count in [`PAGE_COUNT_MIN`]..=[`PAGE_COUNT_MAX`], the root and the
/// free-list head pages of it (as `CONTROL`'s are checked).
fn check_meta(kind: &str, meta: &Meta) -> Result<()> {
    let count = meta.page_count;
    if !(PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&count) {
        return Err(out_of_range(
            kind,
            format!("page count {count} is outside {PAGE_COUNT_MIN}..={PAGE_COUNT_MAX}"),
        ));
    }
    crate::format::control::check_tree_pages(meta.root, meta.freelist, count)
        .map_err(|(_, detail)| out_of_range(kind, detail))?;
    assert!(meta.root.get() < count && meta.freelist.get() < count);
    Ok(())
}

/// Page record flag: changed byte ranges.
const DELTA: u8 = 0;
/// Page record flag: the whole page as one range.
const FULL: u8 = 1;
/// Page record flag: the whole page, LZ4-compressed (a block, no frame).
const FULL_LZ4: u8 = 2;
/// Bytes before a page record's body: txn, page, flag.
const PAGE_HEADER: usize = 17;

/// Encodes a page record from the changed ranges of `after`.
#[cfg(test)]
pub fn encode_page(
    txn: TxnId,
    page: PageId,
    full: bool,
    ranges: &[(usize, usize)],
    after: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_page_into(&mut out, txn, page, full, ranges, after);
    out
}

fn put_header(out: &mut Vec<u8>, txn: TxnId, page: PageId, flag: u8) {
    out.extend_from_slice(&txn.get().to_le_bytes());
    out.extend_from_slice(&page.get().to_le_bytes());
    out.push(flag);
}

/// `encode_page` (the tests' encoder) into `out` (cleared first), reusing its allocation.
pub fn encode_page_into(
    out: &mut Vec<u8>,
    txn: TxnId,
    page: PageId,
    full: bool,
    ranges: &[(usize, usize)],
    after: &[u8],
) {
    assert!(
        ranges.len() <= usize::from(u16::MAX),
        "a page has fewer ranges than u16 counts"
    );
    assert!(
        ranges
            .last()
            .is_none_or(|&(off, len)| off + len <= after.len()),
        "ranges lie inside the page"
    );
    debug_assert!(
        ranges.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
        "ranges are sorted and disjoint"
    );
    let bytes: usize = ranges.iter().map(|r| 4 + r.1).sum();
    out.clear();
    out.reserve(PAGE_HEADER + 2 + bytes);
    put_header(out, txn, page, if full { FULL } else { DELTA });
    out.extend_from_slice(&(ranges.len() as u16).to_le_bytes());
    for &(off, len) in ranges {
        // A 16 KiB page's full range has length 16384, which fits in u16.
        out.extend_from_slice(&(off as u16).to_le_bytes());
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(&after[off..off + len]);
    }
    assert_eq!(
        out.len(),
        PAGE_HEADER + 2 + bytes,
        "the record is as long as computed"
    );
}

/// Encodes the full image of `image` into `out` (cleared first): LZ4-
/// compressed when `compress` is set and that saves at least an eighth,
/// else as one range. Returns whether it compressed.
pub fn encode_full_image_into(
    out: &mut Vec<u8>,
    txn: TxnId,
    page: PageId,
    image: &[u8],
    compress: bool,
) -> bool {
    assert!(
        image.len() <= usize::from(u16::MAX) + 1,
        "a page image fits a u16 length"
    );
    if compress {
        out.clear();
        put_header(out, txn, page, FULL_LZ4);
        out.extend_from_slice(&(image.len() as u16).to_le_bytes());
        let at = out.len();
        out.resize(
            at + lz4_flex::block::get_maximum_output_size(image.len()),
            0,
        );
        if let Ok(n) = lz4_flex::block::compress_into(image, &mut out[at..]) {
            if n <= image.len() - image.len() / 8 {
                out.truncate(at + n);
                return true;
            }
        }
    }
    encode_page_into(out, txn, page, true, &[(0, image.len())], image);
    false
}

/// The body of a page record.
#[derive(Debug)]
enum Body<'a> {
    /// `n` ranges of `off u16 | len u16 | bytes`.
    Ranges { bytes: &'a [u8], n: usize },
    /// An LZ4 block that decompresses to `len` bytes: the whole page.
    Lz4 { len: usize, bytes: &'a [u8] },
}

/// A decoded page record.
#[derive(Debug)]
pub struct PageRecord<'a> {
    /// The transaction.
    pub txn: TxnId,
    /// The page.
    pub page: PageId,
    /// Whether it is a full image.
    pub full: bool,
    body: Body<'a>,
}

impl PageRecord<'_> {
    /// Writes the record's bytes into `page`.
    ///
    /// # Errors
    /// [`Error::Corruption`] when a range falls outside the page, or a
    /// compressed image does not decompress to exactly the page.
    pub fn apply(&self, page: &mut [u8]) -> Result<()> {
        match self.body {
            Body::Ranges { bytes: ranges, n } => {
                let mut at = 0usize;
                for _ in 0..n {
                    let off = le::get_u16(ranges, at)
                        .map(usize::from)
                        .ok_or_else(|| bad("page"))?;
                    let len = le::get_u16(ranges, at + 2)
                        .map(usize::from)
                        .ok_or_else(|| bad("page"))?;
                    let bytes = ranges
                        .get(at + 4..at + 4 + len)
                        .ok_or_else(|| bad("page"))?;
                    page.get_mut(off..off + len)
                        .ok_or_else(|| bad("page (range beyond the page)"))?
                        .copy_from_slice(bytes);
                    at += 4 + len;
                }
                Ok(())
            }
            Body::Lz4 { len, bytes } => {
                if len != page.len() {
                    return Err(bad("page (compressed image of another page size)"));
                }
                match lz4_flex::block::decompress_into(bytes, page) {
                    Ok(n) if n == len => Ok(()),
                    _ => Err(bad("page (compressed image does not decompress)")),
                }
            }
        }
    }
}

/// Decodes a page record.
///
/// # Errors
/// [`Error::Corruption`] when it is malformed.
pub fn decode_page(b: &[u8]) -> Result<PageRecord<'_>> {
    let txn = TxnId::new(le::get_u64(b, 0).ok_or_else(|| bad("page"))?);
    let page = PageId::new(le::get_u64(b, 8).ok_or_else(|| bad("page"))?);
    let flag = *b.get(16).ok_or_else(|| bad("page"))?;
    let n = le::get_u16(b, PAGE_HEADER)
        .map(usize::from)
        .ok_or_else(|| bad("page"))?;
    let bytes = &b[PAGE_HEADER + 2..];
    let txn = check_txn("page", txn.get())?;
    // Page 0 is the data file's head, written whole by checkpoints and
    // never logged: a record naming it would overwrite the head's claims.
    if page == PageId::ZERO || page.get() >= PAGE_COUNT_MAX {
        return Err(out_of_range(
            "page",
            format!("page {page} is not one of pages 1..{PAGE_COUNT_MAX} (page 0 is the head)"),
        ));
    }
    let (full, body) = match flag {
        DELTA => (false, Body::Ranges { bytes, n }),
        FULL => (true, Body::Ranges { bytes, n }),
        FULL_LZ4 => (true, Body::Lz4 { len: n, bytes }),
        _ => return Err(bad("page (unknown record flag)")),
    };
    match body {
        // Each range takes at least its 4-byte offset and length.
        Body::Ranges { n, .. } if n > bytes.len() / 4 => {
            return Err(out_of_range(
                "page",
                format!(
                    "range count {n} is past the {} its body holds",
                    bytes.len() / 4
                ),
            ));
        }
        Body::Lz4 { len, .. } if !PAGE_SIZES.contains(&(len as u32)) => {
            return Err(out_of_range(
                "page",
                format!("image size {len} is not one of 4096, 8192, 16384"),
            ));
        }
        _ => {}
    }
    assert!(page != PageId::ZERO && txn.get() <= TXN_ID_MAX);
    Ok(PageRecord {
        txn,
        page,
        full,
        body,
    })
}

/// Encodes a commit (or checkpoint, with `first` = redo LSN) record.
pub fn encode_meta(first: u64, meta: &Meta) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    for v in [first, meta.root.get(), meta.page_count, meta.freelist.get()] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(out.len(), 32, "four u64s");
    debug_assert_eq!(
        decode_meta(&out).ok(),
        Some((first, *meta)),
        "encode and decode pair"
    );
    out
}

/// Encodes a commit record: [`encode_meta`]'s 32 bytes, then the commit's
/// wall-clock time in microseconds since the epoch (for a checkpoint
/// record, with the redo LSN first: the last commit's time). Readers of the meta
/// read only the first 32 bytes, so the time is an extension older builds
/// skip.
pub fn encode_commit(txn: TxnId, meta: &Meta, time_us: u64) -> Vec<u8> {
    encode_timed(txn.get(), meta, time_us)
}

/// Encodes a checkpoint record: as [`encode_commit`], with the redo LSN
/// first and the time of the last commit before the checkpoint.
pub fn encode_checkpoint(redo: Lsn, meta: &Meta, time_us: u64) -> Vec<u8> {
    encode_timed(redo.get(), meta, time_us)
}

/// [`encode_meta`]'s 32 bytes with `first` first, then `time_us`.
fn encode_timed(first: u64, meta: &Meta, time_us: u64) -> Vec<u8> {
    let mut out = encode_meta(first, meta);
    out.extend_from_slice(&time_us.to_le_bytes());
    assert_eq!(out.len(), COMMIT_BYTES, "five u64s");
    debug_assert_eq!(decode_commit_time(&out), Some(time_us));
    out
}

/// Encodes an abort record: the transaction's id.
pub fn encode_abort(txn: TxnId) -> [u8; 8] {
    txn.get().to_le_bytes()
}

/// Decodes an abort record.
///
/// # Errors
/// [`Error::Corruption`] for a payload that is not one id, or an id past
/// [`TXN_ID_MAX`].
pub fn decode_abort(b: &[u8]) -> Result<TxnId> {
    let id = <[u8; 8]>::try_from(b)
        .map(u64::from_le_bytes)
        .map_err(|_| bad("abort"))?;
    check_txn("abort", id)
}

/// Bytes of a commit record's payload (with its time).
pub const COMMIT_BYTES: usize = 40;

/// The wall-clock time (µs since the epoch) a commit record carries;
/// `None` for a record written before commits carried one.
pub fn decode_commit_time(b: &[u8]) -> Option<u64> {
    le::get_u64(b, 32)
}

/// Decodes a commit or checkpoint record: (txn or redo LSN, meta), the
/// meta range-checked (see [`decode_commit`] and [`decode_checkpoint`] for
/// the first field's check).
///
/// # Errors
/// [`Error::Corruption`] when it is malformed or a field is out of range.
pub fn decode_meta(b: &[u8]) -> Result<(u64, Meta)> {
    let get = |i: usize| le::get_u64(b, 8 * i).ok_or_else(|| bad("commit"));
    let meta = Meta {
        root: PageId::new(get(1)?),
        page_count: get(2)?,
        freelist: PageId::new(get(3)?),
    };
    check_meta("commit or checkpoint", &meta)?;
    Ok((get(0)?, meta))
}

/// Decodes a commit record: its transaction and the tree state it leaves.
///
/// # Errors
/// [`Error::Corruption`] when it is malformed or a field is out of range.
pub fn decode_commit(b: &[u8]) -> Result<(TxnId, Meta)> {
    let (txn, meta) = decode_meta(b)?;
    Ok((check_txn("commit", txn)?, meta))
}

/// Decodes a checkpoint record that starts at `at`: its redo LSN (at most
/// `at`: a checkpoint's redo point is where it began) and tree state.
///
/// # Errors
/// [`Error::Corruption`] when it is malformed or a field is out of range.
pub fn decode_checkpoint(b: &[u8], at: Lsn) -> Result<(Lsn, Meta)> {
    let (redo, meta) = decode_meta(b)?;
    if redo > at.get() {
        return Err(out_of_range(
            "checkpoint",
            format!("redo LSN {redo} is past the record's own LSN {at}"),
        ));
    }
    Ok((Lsn::new(redo), meta))
}

pub use crate::format::diff::diff;

#[cfg(test)]
mod tests {
    use super::*;

    fn tid(id: u64) -> TxnId {
        TxnId::new(id)
    }

    fn pid(no: u64) -> PageId {
        PageId::new(no)
    }

    #[test]
    fn diff_then_apply_reproduces_the_page() {
        let before = vec![0u8; 4096];
        let mut after = before.clone();
        after[100..110].fill(1);
        after[4000] = 9;
        after[115] = 3;
        let ranges = diff(&before, &after);
        assert!(ranges.len() <= 2, "{ranges:?}");
        let rec = encode_page(tid(7), pid(3), false, &ranges, &after);
        let d = decode_page(&rec).expect("decode");
        assert_eq!((d.txn, d.page, d.full), (tid(7), pid(3), false));
        let mut page = before.clone();
        d.apply(&mut page).expect("apply");
        assert_eq!(page, after);
        assert!(diff(&after, &after).is_empty());
    }

    proptest::proptest! {
        /// Arbitrary payloads (a page record as read back from a damaged
        /// log), flagged as any kind of page record: decoding and applying
        /// return an error or change the page, never panic.
        #[test]
        fn arbitrary_page_records_never_panic(
            flag in 0u8..4,
            n in proptest::num::u16::ANY,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        ) {
            let mut rec = Vec::new();
            put_header(&mut rec, tid(1), pid(2), flag);
            rec.extend_from_slice(&n.to_le_bytes());
            rec.extend_from_slice(&body);
            if let Ok(d) = decode_page(&rec) {
                let mut page = vec![0u8; 8192];
                let _ = d.apply(&mut page);
            }
        }

        /// Applying the ranges of `diff` to the old page gives the new one,
        /// and the ranges are ordered, disjoint and start and end at
        /// differing bytes.
        #[test]
        fn diff_covers_every_change(
            changes in proptest::collection::vec((0usize..512, proptest::num::u8::ANY), 0..40),
        ) {
            let before: Vec<u8> = (0..512).map(|i| (i * 7) as u8).collect();
            let mut after = before.clone();
            for (at, v) in changes {
                after[at] = v;
            }
            let ranges = diff(&before, &after);
            let mut page = before.clone();
            let mut prev_end = 0;
            for &(off, len) in &ranges {
                proptest::prop_assert!(len > 0 && off >= prev_end);
                proptest::prop_assert!(before[off] != after[off]);
                proptest::prop_assert!(before[off + len - 1] != after[off + len - 1]);
                page[off..off + len].copy_from_slice(&after[off..off + len]);
                prev_end = off + len;
            }
            proptest::prop_assert_eq!(page, after);
        }
    }

    #[test]
    fn full_images_compress_when_that_pays_and_restore_exactly() {
        // A leaf-like page: padded rows compress.
        let mut image = vec![b' '; 8192];
        for (i, chunk) in image.chunks_mut(100).enumerate() {
            chunk[..8].copy_from_slice(&(i as u64).to_le_bytes());
        }
        let mut rec = Vec::new();
        assert!(encode_full_image_into(
            &mut rec,
            tid(9),
            pid(4),
            &image,
            true
        ));
        assert!(rec.len() < image.len() / 4, "{} bytes", rec.len());
        let d = decode_page(&rec).expect("decode");
        assert_eq!((d.txn, d.page, d.full), (tid(9), pid(4), true));
        let mut page = vec![0u8; 8192];
        d.apply(&mut page).expect("apply");
        assert_eq!(page, image);
        // The wrong page size, or a damaged block, is corruption, not a panic.
        assert!(d.apply(&mut [0u8; 4096]).is_err());
        let mut damaged = rec.clone();
        damaged.truncate(rec.len() - 5);
        let mut page = vec![0u8; 8192];
        assert!(decode_page(&damaged)
            .expect("decode")
            .apply(&mut page)
            .is_err());

        // Random bytes do not compress: stored whole, flagged full.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..8192)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(!encode_full_image_into(
            &mut rec,
            tid(9),
            pid(5),
            &noise,
            true
        ));
        let mut page = vec![0u8; 8192];
        decode_page(&rec)
            .expect("decode")
            .apply(&mut page)
            .expect("apply");
        assert_eq!(page, noise);
        // Compression off: stored whole.
        assert!(!encode_full_image_into(
            &mut rec,
            tid(9),
            pid(4),
            &image,
            false
        ));
        assert_eq!(rec.len(), 19 + 4 + 8192);
    }

    /// Each field of each record kind at 0, 1, its largest value and just
    /// past it: in range it decodes, out of range it is corruption naming
    /// the field (24 cases).
    #[test]
    fn record_fields_are_range_checked_at_their_edges() {
        let meta = |root: u64, count: u64, free: u64| Meta {
            root: pid(root),
            page_count: count,
            freelist: pid(free),
        };
        let max = PAGE_COUNT_MAX;
        let metas = [
            (meta(1, 2, 0), None),
            (meta(max - 1, max, max - 2), None),
            (meta(1, 0, 0), Some("page count")),
            (meta(1, 1, 0), Some("page count")),
            (meta(1, max + 1, 0), Some("page count")),
            (meta(0, 5, 0), Some("root page")),
            (meta(5, 5, 0), Some("root page")),
            (meta(2, 5, 2), Some("free-list head")),
            (meta(2, 5, 5), Some("free-list head")),
        ];
        // Raw bytes: the encoders assert what they write is in range.
        let raw = |first: u64, m: &Meta| -> Vec<u8> {
            [first, m.root.get(), m.page_count, m.freelist.get(), 0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        };
        for (m, want) in metas {
            let got = decode_commit(&raw(1, &m));
            match want {
                None => assert_eq!(got.expect("in range"), (tid(1), m)),
                Some(w) => assert!(got.expect_err(w).to_string().contains(w), "{w}"),
            }
        }
        let m = meta(1, 2, 0);
        for (txn, ok) in [
            (0, true),
            (1, true),
            (TXN_ID_MAX, true),
            (TXN_ID_MAX + 1, false),
        ] {
            assert_eq!(decode_commit(&raw(txn, &m)).is_ok(), ok);
            assert_eq!(decode_abort(&encode_abort(tid(txn))).is_ok(), ok);
        }
        let at = Lsn::new(1000);
        for (redo, ok) in [(0, true), (1000, true), (1001, false)] {
            let rec = raw(redo, &m);
            assert_eq!(decode_checkpoint(&rec, at).is_ok(), ok, "{redo}");
        }
        for (page, ok) in [(0, false), (1, true), (max - 1, true), (max, false)] {
            let rec = encode_page(tid(1), pid(page), false, &[], &[]);
            assert_eq!(decode_page(&rec).is_ok(), ok, "page {page}");
        }
    }

    #[test]
    fn meta_round_trip() {
        let m = Meta {
            root: pid(5),
            page_count: 99,
            freelist: pid(12),
        };
        assert_eq!(decode_meta(&encode_meta(42, &m)).expect("decode"), (42, m));
        assert!(decode_meta(&[1, 2, 3]).is_err());
        // A commit carries its time after the meta; one without reads as
        // having none.
        let c = encode_commit(tid(42), &m, 1_700_000_000_000_123);
        assert_eq!(decode_meta(&c).expect("decode"), (42, m));
        assert_eq!(decode_commit_time(&c), Some(1_700_000_000_000_123));
        assert_eq!(decode_commit_time(&encode_meta(42, &m)), None);
        assert_eq!(decode_abort(&encode_abort(tid(42))).ok(), Some(tid(42)));
        assert!(decode_abort(&[1, 2, 3]).is_err());
        assert!(decode_page(&[0; 5]).is_err());
        let mut unknown = encode_page(tid(1), pid(2), false, &[], &[]);
        unknown[16] = 7;
        assert!(decode_page(&unknown).is_err());
    }
}
