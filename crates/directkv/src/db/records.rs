//! The engine's WAL records (kinds 20–23), encoded little-endian.
//!
//! | kind | name | payload |
//! |------|------|---------|
//! | 20 | page | txn u64, page u64, flags u8 (1 = full image), n u16, then n × (offset u16, len u16, bytes); a full image is one range covering the page |
//! | 21 | commit | txn u64, root u64, page count u64, free-list head u64, time µs u64 (since the epoch; absent in logs of older builds), catalog root u64 (0: no catalog of tables), free pages u64 (`u64::MAX`: not known); each field from the time on absent in logs of older builds |
//! | 22 | checkpoint | redo LSN u64, root u64, page count u64, free-list head u64, time µs u64 of the last commit before it, catalog root u64, free pages u64 (as in a commit) |
//! | 23 | abort | txn u64 |
//!
//! Readers of a commit or checkpoint record read the fields they know by
//! offset and ignore the rest, so each field after the first four is an
//! extension older builds skip: builds before named tables read 40 bytes,
//! builds before the free-page count 48.
//!
//! Page records are physical: replaying one writes bytes at offsets. A page's
//! LSN is the end of the commit record of the last transaction that changed it,
//! so redo applies a committed transaction's page records to a page exactly when
//! the page's LSN is below that commit's LSN.

use crate::constants::{PAGE_COUNT_MAX, PAGE_COUNT_MIN, TXN_ID_MAX};
use crate::error::{Error, Result};
pub use crate::format::control::Compaction;
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

/// The trees' root state, carried by commit and checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The default keyspace's root page.
    pub root: PageId,
    /// Pages in the data file (the next page to allocate past the free list).
    pub page_count: u64,
    /// Head of the free-page list; [`PageId::ZERO`] when empty.
    pub freelist: PageId,
    /// The root of the catalog of named tables; [`PageId::ZERO`] until the
    /// first table is created.
    pub catalog: PageId,
    /// Free pages: on the free list, or set aside by a compaction under
    /// way; `None` when not known (a database last written by a build that
    /// did not count them). Without a compaction, 0 exactly when the list
    /// is empty.
    pub free_pages: Option<u64>,
    /// The compaction under way, if one is (see `db::compact`).
    pub compaction: Option<Compaction>,
}

impl Meta {
    /// A page came off the free list: its head, which linked to `next`.
    ///
    /// # Errors
    /// What is wrong, when the count does not fit the list (the count and
    /// the link are both read from disk: a lost write can part them).
    pub fn took_free(&mut self, next: PageId) -> std::result::Result<(), String> {
        if let Some(n) = self.free_pages {
            // Only without a compaction does the list's last page take the
            // count to 0: during one, the count also holds the pages set
            // aside on no list, and those the scan has yet to list.
            let last = next == PageId::ZERO;
            let listed_only = self.compaction.is_none();
            if n == 0 || (n == 1 && !last) || (listed_only && n > 1 && last) {
                return Err(format!(
                    "the free list's head links to page {next} where the root state counts \
                     {n} free pages"
                ));
            }
            self.free_pages = Some(n - 1);
        }
        self.freelist = next;
        Ok(())
    }

    /// Page `no` went on the free list, as its head (`listed`), or was set
    /// aside free by a compaction, on no list.
    ///
    /// # Errors
    /// What is wrong, when the count would pass the pages that can be free
    /// (all but the data file's head and the root): it was wrong on disk.
    pub fn gave_free(&mut self, no: PageId, listed: bool) -> std::result::Result<(), String> {
        assert!(
            no != PageId::ZERO && no.get() < self.page_count,
            "a page of the file"
        );
        if let Some(n) = self.free_pages {
            if n + 2 >= self.page_count {
                return Err(format!(
                    "the root state counts {n} free pages of {} before page {no} is freed",
                    self.page_count
                ));
            }
            self.free_pages = Some(n + 1);
        }
        if listed {
            self.freelist = no;
        }
        Ok(())
    }

    /// Whether a page freed now goes on the free list: without a
    /// compaction, always; during one, only below its boundary.
    pub fn lists(&self, no: PageId) -> bool {
        self.compaction.is_none_or(|c| no.get() < c.boundary)
    }
}

/// The free-page count's encoding when it is not known.
const FREE_UNKNOWN: u64 = u64::MAX;

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
    crate::format::control::check_catalog_page(meta.catalog, meta.root, meta.freelist, count)
        .map_err(|(_, detail)| out_of_range(kind, detail))?;
    let compacting = meta.compaction.is_some();
    crate::format::control::check_free_count(meta.free_pages, meta.freelist, count, compacting)
        .map_err(|(_, detail)| out_of_range(kind, detail))?;
    crate::format::control::check_compaction(meta.compaction, meta.freelist, count)
        .map_err(|(_, detail)| out_of_range(kind, detail))?;
    assert!(meta.root.get() < count && meta.freelist.get() < count);
    assert!(meta.catalog.get() < count);
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
/// The catalog root is not among its 32 bytes ([`encode_commit`] appends
/// it after the time).
pub fn encode_meta(first: u64, meta: &Meta) -> Vec<u8> {
    let mut out = Vec::with_capacity(COMMIT_BYTES + 8);
    for v in [first, meta.root.get(), meta.page_count, meta.freelist.get()] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(out.len(), 32, "four u64s");
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

/// [`encode_meta`]'s 32 bytes with `first` first, then `time_us`, the
/// catalog root and the free-page count.
fn encode_timed(first: u64, meta: &Meta, time_us: u64) -> Vec<u8> {
    let mut out = encode_meta(first, meta);
    out.extend_from_slice(&time_us.to_le_bytes());
    assert_eq!(out.len(), COMMIT_BYTES, "five u64s");
    out.extend_from_slice(&meta.catalog.get().to_le_bytes());
    out.extend_from_slice(&meta.free_pages.unwrap_or(FREE_UNKNOWN).to_le_bytes());
    assert_eq!(out.len(), META_RECORD_BYTES, "seven u64s");
    if let Some(c) = meta.compaction {
        out.extend_from_slice(&c.boundary.to_le_bytes());
        out.extend_from_slice(&c.epoch.to_le_bytes());
        assert_eq!(out.len(), META_RECORD_COMPACTING_BYTES, "nine u64s");
    }
    debug_assert_eq!(decode_commit_time(&out), Some(time_us));
    debug_assert_eq!(decode_meta(&out).ok(), Some((first, *meta)));
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

/// Bytes of a commit record's payload up to its time (the first five
/// fields, what builds before named tables wrote).
pub const COMMIT_BYTES: usize = 40;
/// Bytes of a commit or checkpoint record's payload as this build writes
/// it: the catalog root and the free-page count after the time.
pub const META_RECORD_BYTES: usize = 56;
/// Bytes of one written while a compaction is under way: its boundary and
/// epoch follow (a record without them has none under way).
pub const META_RECORD_COMPACTING_BYTES: usize = 72;

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
        // Records of older builds end before these.
        catalog: PageId::new(le::get_u64(b, COMMIT_BYTES).unwrap_or(0)),
        free_pages: le::get_u64(b, COMMIT_BYTES + 8).filter(|&n| n != FREE_UNKNOWN),
        compaction: match le::get_u64(b, META_RECORD_BYTES) {
            Some(boundary) => Some(Compaction {
                boundary,
                epoch: le::get_u64(b, META_RECORD_BYTES + 8).ok_or_else(|| bad("commit"))?,
            }),
            None => None,
        },
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

/// The kinds of the engine's records, in their order above.
pub const KINDS: [u8; 4] = [PAGE, COMMIT, CHECKPOINT, ABORT];

/// An engine record, decoded with every field range-checked.
#[derive(Debug)]
pub enum Decoded<'a> {
    /// A page record.
    Page(PageRecord<'a>),
    /// A commit record: the transaction and the tree state it leaves.
    Commit {
        /// The transaction.
        txn: TxnId,
        /// The tree state.
        meta: Meta,
    },
    /// A checkpoint record: where redo starts, and the tree state.
    Checkpoint {
        /// The redo LSN (at most the record's own).
        redo: Lsn,
        /// The tree state.
        meta: Meta,
    },
    /// An abort record.
    Abort {
        /// The transaction.
        txn: TxnId,
    },
}

/// Decodes the payload of a record of `kind` that starts at `at`; `None`
/// when `kind` is not one of the engine's ([`KINDS`]).
///
/// # Errors
/// [`Error::Corruption`] when it is malformed or a field is out of range.
pub fn decode(kind: u8, payload: &[u8], at: Lsn) -> Option<Result<Decoded<'_>>> {
    let decoded = match kind {
        PAGE => decode_page(payload).map(Decoded::Page),
        COMMIT => decode_commit(payload).map(|(txn, meta)| Decoded::Commit { txn, meta }),
        CHECKPOINT => {
            decode_checkpoint(payload, at).map(|(redo, meta)| Decoded::Checkpoint { redo, meta })
        }
        ABORT => decode_abort(payload).map(|txn| Decoded::Abort { txn }),
        _ => return None,
    };
    Some(decoded)
}

/// The name of a record kind as `directkv wal dump` prints it: the log's
/// own framing kinds, the engine's four, and `user(N)` for any other.
pub fn kind_name(kind: u8) -> String {
    use crate::wal::kind::{FLUSH_HEADER, PAD};
    let name = match kind {
        FLUSH_HEADER => "flush_header",
        PAD => "pad",
        PAGE => "page",
        COMMIT => "commit",
        CHECKPOINT => "checkpoint",
        ABORT => "abort",
        k => return format!("user({k})"),
    };
    name.to_string()
}

pub use crate::format::diff::diff;

#[cfg(test)]
mod tests;
