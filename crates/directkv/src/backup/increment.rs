//! The changed pages of an incremental backup, `data.incr`, and the chain
//! of backups they build on.
//!
//! A page that changed since the parent backup's start usually changed in
//! a few bytes: a balance, a slot, the page LSN and checksum. So where the
//! backup can read the page as the chain up to its parent holds it, it
//! stores only the bytes that differ (a delta); elsewhere the whole page.
//!
//! Layout of `data.incr` ([`ENTRIES`](super::layout::ENTRIES), the manifest's `increment_format`):
//!
//! | bytes | what |
//! |-------|------|
//! | page size | page 0, the backup's head, whole |
//! | 17 + body | one entry per other page, ascending: kind u8 (1 whole, 2 delta), page u64, CRC32C u32 of the page it makes, body length u32, body |
//! | to 4 KiB | zeros (kind 0 ends the entries; none when they end on a block) |
//!
//! A whole page's body is the page. A delta's body is ranges, each offset
//! u16, length u16 and the bytes, ascending without overlap, to be written
//! over the page the chain up to the parent holds. Backups of older builds
//! ([`WHOLE_PAGES`]) hold whole pages only, in the manifest's page order.
//!
//! Invariants:
//! - Entries ascend by page, each page at most once: exactly the pages the
//!   manifest lists, page 0 aside.
//! - The page an entry makes has the CRC32C the entry carries; restore
//!   checks it and the page's own check before writing the page.
//! - A delta is made only against the chain's bytes of the page, read from
//!   backups whose links [`find_chain`](chain::find_chain) checked; otherwise the page is
//!   stored whole.

use std::path::{Path, PathBuf};

use super::layout::{DATA_NAME, INCREMENT_NAME, WHOLE_PAGES};
use super::manifest::Manifest;
use crate::constants::DELTA_CHAIN_LINKS_MAX;
use crate::error::{Error, Result};
use crate::format::{le, PageId};
use crate::io::{AlignedBuf, DirectIo, Storage, StorageFile};
use crate::sched::crc_files::{self as files, Sink, ALIGN_BYTES, CHUNK_BYTES};

pub mod chain;

const KIND_END: u8 = 0;
const KIND_WHOLE: u8 = 1;
const KIND_DELTA: u8 = 2;
/// Bytes of an entry before its body.
const ENTRY_HEADER: usize = 17;
/// Bytes of a delta range before its bytes.
const RANGE_HEADER: usize = 4;

const _: () = assert!(ENTRY_HEADER == 1 + 8 + 4 + 4, "kind, page, CRC32C, length");
// Range offsets and lengths are u16: every page size fits.
const _: () = {
    let sizes = crate::format::page::PAGE_SIZES;
    let mut i = 0;
    while i < sizes.len() {
        assert!(sizes[i] <= u16::MAX as u32, "a page's offsets fit in u16");
        i += 1;
    }
};

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The whole page.
    Whole,
    /// The ranges that differ from the chain's page.
    Delta,
}

/// One entry, read: its body is in the reader's `body` buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The page it makes.
    pub page: PageId,
    /// What the body holds.
    pub kind: Kind,
    /// CRC32C of the page it makes.
    pub crc: u32,
    /// Where it starts in the file.
    pub offset: u64,
}

fn damaged(path: &Path, offset: u64, detail: String) -> Error {
    Error::Corruption {
        path: path.to_path_buf(),
        offset,
        page: None,
        detail,
    }
}

/// Writes `delta` (a delta entry's body) over `page`.
///
/// # Errors
/// A description of the damage when a range is cut short or leaves the page.
pub fn apply_delta(delta: &[u8], page: &mut [u8]) -> std::result::Result<(), String> {
    let mut at = 0usize;
    let mut floor = 0usize;
    while at < delta.len() {
        let head = delta
            .get(at..at + RANGE_HEADER)
            .ok_or("a delta range's header is cut short")?;
        let field = |at| le::get_u16(head, at).expect("the header was taken whole");
        let (off, len) = (usize::from(field(0)), usize::from(field(2)));
        let bytes = delta
            .get(at + RANGE_HEADER..at + RANGE_HEADER + len)
            .ok_or("a delta range's bytes are cut short")?;
        if off < floor || off + len > page.len() || len == 0 {
            return Err(format!(
                "a delta range {off}+{len} is empty, out of order or outside the page"
            ));
        }
        page[off..off + len].copy_from_slice(bytes);
        floor = off + len;
        at += RANGE_HEADER + len;
    }
    assert_eq!(at, delta.len(), "every range was read");
    Ok(())
}

/// Appends to `out` the entry for page `no` holding `page`: a delta
/// against `base` when one is given and the delta is at most half a page,
/// else the whole page. Returns whether it is a delta.
pub fn encode_entry(out: &mut Vec<u8>, no: PageId, page: &[u8], base: Option<&[u8]>) -> bool {
    let ranges = base.map(|b| crate::format::diff::diff(b, page));
    let delta_len = ranges
        .as_ref()
        .map(|r| r.iter().map(|&(_, len)| RANGE_HEADER + len).sum::<usize>());
    let as_delta = delta_len.is_some_and(|n| n <= page.len() / 2);
    let start = out.len();
    out.push(if as_delta { KIND_DELTA } else { KIND_WHOLE });
    out.extend_from_slice(&no.get().to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(page).to_le_bytes());
    let body_len = if as_delta {
        delta_len.expect("a delta has a length")
    } else {
        page.len()
    };
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    match ranges.filter(|_| as_delta) {
        Some(ranges) => {
            for (off, len) in ranges {
                out.extend_from_slice(&(off as u16).to_le_bytes());
                out.extend_from_slice(&(len as u16).to_le_bytes());
                out.extend_from_slice(&page[off..off + len]);
            }
        }
        None => out.extend_from_slice(page),
    }
    assert_eq!(
        out.len() - start,
        ENTRY_HEADER + body_len,
        "an entry is its header and body"
    );
    debug_assert!(
        !as_delta || {
            let mut made = base.expect("a delta has a base").to_vec();
            apply_delta(&out[start + ENTRY_HEADER..], &mut made).is_ok() && made == page
        },
        "a delta applied to its base makes the page"
    );
    as_delta
}

/// Writes the entries of a new `data.incr` after page 0, through a
/// buffer of whole aligned blocks.
pub struct EntryWriter<S: Storage> {
    sink: Sink<S>,
    buf: AlignedBuf,
    used: usize,
    entry: Vec<u8>,
    /// Entries written as deltas.
    pub deltas: u64,
    /// Entries written as whole pages.
    pub wholes: u64,
}

impl<S: Storage> EntryWriter<S> {
    /// Writes after what `sink` holds (page 0 skipped, to be written last).
    ///
    /// # Errors
    /// An allocation error of the buffer.
    pub fn new(sink: Sink<S>) -> Result<EntryWriter<S>> {
        Ok(EntryWriter {
            sink,
            buf: AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?,
            used: 0,
            entry: Vec::new(),
            deltas: 0,
            wholes: 0,
        })
    }

    /// Adds page `no` (see [`encode_entry`]); returns the bytes it took.
    ///
    /// # Errors
    /// I/O errors of a write.
    pub fn push(&mut self, no: PageId, page: &[u8], base: Option<&[u8]>) -> Result<usize> {
        self.entry.clear();
        if encode_entry(&mut self.entry, no, page, base) {
            self.deltas += 1;
        } else {
            self.wholes += 1;
        }
        let n = self.entry.len();
        assert!(n <= self.buf.len() - ALIGN_BYTES as usize, "an entry fits");
        if self.used + n > self.buf.len() {
            self.flush_whole_blocks()?;
        }
        self.buf.as_mut_slice()[self.used..self.used + n].copy_from_slice(&self.entry);
        self.used += n;
        Ok(n)
    }

    /// Writes the buffer's whole blocks and moves the rest to its front.
    fn flush_whole_blocks(&mut self) -> Result<()> {
        let whole = self.used / ALIGN_BYTES as usize * ALIGN_BYTES as usize;
        self.sink.append(&self.buf, whole)?;
        self.buf.as_mut_slice().copy_within(whole..self.used, 0);
        self.used -= whole;
        assert!(
            self.used < ALIGN_BYTES as usize,
            "less than a block is left"
        );
        Ok(())
    }

    /// Writes what is left, zeros to the next block, and returns the sink.
    ///
    /// # Errors
    /// I/O errors of the write.
    pub fn into_sink(mut self) -> Result<Sink<S>> {
        let end = self.used.next_multiple_of(ALIGN_BYTES as usize);
        self.buf.as_mut_slice()[self.used..end].fill(KIND_END);
        self.used = end;
        self.flush_whole_blocks()?;
        Ok(self.sink)
    }
}

/// Reads the entries of a `data.incr`, in order.
pub struct EntryReader<F: StorageFile> {
    file: F,
    path: PathBuf,
    page_bytes: usize,
    len: u64,
    /// The next file offset to read.
    at: u64,
    chunk: AlignedBuf,
    window: Vec<u8>,
    pos: usize,
    /// The page numbers of a backup of [`WHOLE_PAGES`], still to come.
    numbers: Option<std::vec::IntoIter<PageId>>,
    /// The body of the last entry read.
    pub body: Vec<u8>,
}

impl<F: StorageFile> EntryReader<F> {
    /// A reader of `file` (at `path`), the `data.incr` of the backup `m`
    /// describes, from its first entry after page 0.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] for a file that is not whole blocks.
    pub fn new(file: F, path: &Path, m: &Manifest) -> Result<EntryReader<F>> {
        let numbers = (m.increment_format == WHOLE_PAGES).then(|| {
            super::manifest::pages_of(&m.incremental_pages)
                .filter(|&p| p != 0)
                .map(PageId::new)
                .collect::<Vec<_>>()
        });
        EntryReader::with(file, path, m.page_bytes as usize, numbers)
    }

    /// [`new`](Self::new) for pages of `page_bytes`, of [`WHOLE_PAGES`]
    /// numbered `numbers` (page 0 aside) when given, else of [`ENTRIES`](super::layout::ENTRIES).
    fn with(
        file: F,
        path: &Path,
        pb: usize,
        numbers: Option<Vec<PageId>>,
    ) -> Result<EntryReader<F>> {
        let len = files::whole_blocks_len(&file)?;
        Ok(EntryReader {
            file,
            path: path.to_path_buf(),
            page_bytes: pb,
            len,
            at: pb as u64,
            chunk: AlignedBuf::new(CHUNK_BYTES, ALIGN_BYTES)?,
            window: Vec::new(),
            pos: 0,
            numbers: numbers.map(Vec::into_iter),
            body: Vec::new(),
        })
    }

    /// Bytes read from the file so far.
    pub fn bytes_read(&self) -> u64 {
        self.at - self.page_bytes as u64
    }

    /// The file offset of the next unread byte.
    fn offset(&self) -> u64 {
        self.at - (self.window.len() - self.pos) as u64
    }

    /// Makes `n` bytes available from `pos`, unless the file ends first;
    /// returns whether they are.
    fn fill(&mut self, n: usize) -> Result<bool> {
        while self.window.len() - self.pos < n && self.at < self.len {
            self.window.drain(..self.pos);
            self.pos = 0;
            let k = (self.len - self.at).min(self.chunk.len() as u64) as usize;
            self.file.read_exact_at(self.chunk.io_mut(0..k)?, self.at)?;
            self.window.extend_from_slice(&self.chunk.as_slice()[..k]);
            self.at += k as u64;
        }
        Ok(self.window.len() - self.pos >= n)
    }

    /// The next entry, its body in [`body`](Self::body); `None` after the
    /// last.
    ///
    /// # Errors
    /// I/O errors; [`Error::Corruption`] for an entry that is cut short or
    /// of an unknown kind, or padding that is not zeros. Whether entries
    /// are in page order is the caller's to check.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        let offset = self.offset();
        if self.numbers.is_some() {
            return self.next_whole_page(offset);
        }
        if !self.fill(1)? {
            return Ok(None);
        }
        if self.window[self.pos] == KIND_END {
            // Padding to the block: zeros, less than a block, to the end.
            let rest = (self.len - offset) as usize;
            let padding = rest < ALIGN_BYTES as usize
                && self.fill(rest)?
                && self.window[self.pos..self.pos + rest]
                    .iter()
                    .all(|&b| b == 0);
            if !padding {
                let d = "bytes after the last entry are not its padding".to_string();
                return Err(damaged(&self.path, offset, d));
            }
            return Ok(None);
        }
        if !self.fill(ENTRY_HEADER)? {
            return Err(damaged(&self.path, offset, "an entry is cut short".into()));
        }
        let head = &self.window[self.pos..self.pos + ENTRY_HEADER];
        let kind = match head[0] {
            KIND_WHOLE => Kind::Whole,
            KIND_DELTA => Kind::Delta,
            k => return Err(damaged(&self.path, offset, format!("entry kind {k}"))),
        };
        const WHOLE: &str = "the header was taken whole";
        let page = PageId::new(le::get_u64(head, 1).expect(WHOLE));
        let crc = le::get_u32(head, 9).expect(WHOLE);
        let body_len = le::get_u32(head, 13).expect(WHOLE) as usize;
        let fits = match kind {
            Kind::Whole => body_len == self.page_bytes,
            Kind::Delta => body_len <= self.page_bytes,
        };
        if !fits || !self.fill(ENTRY_HEADER + body_len)? {
            return Err(damaged(
                &self.path,
                offset,
                format!("the entry of page {page} ({body_len} bytes) does not fit"),
            ));
        }
        let body_at = self.pos + ENTRY_HEADER;
        self.body.clear();
        self.body
            .extend_from_slice(&self.window[body_at..body_at + body_len]);
        self.pos = body_at + body_len;
        Ok(Some(Entry {
            page,
            kind,
            crc,
            offset,
        }))
    }

    /// [`next_entry`](Self::next_entry) for a backup of [`WHOLE_PAGES`]:
    /// the next page, numbered by the manifest, from `offset`.
    fn next_whole_page(&mut self, offset: u64) -> Result<Option<Entry>> {
        let numbers = self.numbers.as_mut().expect("a backup of whole pages");
        let Some(page) = numbers.next() else {
            return Ok(None);
        };
        if !self.fill(self.page_bytes)? {
            return Err(damaged(&self.path, offset, "cut short".into()));
        }
        self.body.clear();
        self.body
            .extend_from_slice(&self.window[self.pos..self.pos + self.page_bytes]);
        self.pos += self.page_bytes;
        Ok(Some(Entry {
            page,
            kind: Kind::Whole,
            crc: crc32c::crc32c(&self.body),
            offset,
        }))
    }

    /// Makes the page of `entry` (just read) in `page` (see [`make_page`]).
    ///
    /// # Errors
    /// As [`make_page`].
    pub fn make_page(&self, entry: &Entry, page: &mut [u8]) -> Result<()> {
        make_page(&self.path, entry, &self.body, page)
    }
}

/// Makes the page of `entry`, whose body is `body`, in `page`: the body, or
/// the body written over what `page` holds (the chain's page); checks it
/// against the entry's CRC32C. `path` names the file in errors.
///
/// # Errors
/// [`Error::Corruption`] for a delta that does not apply or a page whose
/// CRC differs.
pub fn make_page(path: &Path, entry: &Entry, body: &[u8], page: &mut [u8]) -> Result<()> {
    match entry.kind {
        Kind::Whole if body.len() == page.len() => page.copy_from_slice(body),
        Kind::Whole => {
            return Err(damaged(
                path,
                entry.offset,
                format!("page {}: a whole page of {} bytes", entry.page, body.len()),
            ))
        }
        Kind::Delta => apply_delta(body, page)
            .map_err(|d| damaged(path, entry.offset, format!("page {}: {d}", entry.page)))?,
    }
    if crc32c::crc32c(page) != entry.crc {
        return Err(damaged(
            path,
            entry.offset,
            format!(
                "page {}: the page its entry makes has another CRC32C than the entry says",
                entry.page
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_make_their_pages_and_deltas_are_small() {
        let base: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        let mut page = base.clone();
        page[100..108].copy_from_slice(&[9; 8]);
        page[5000] ^= 0xff;
        let mut out = Vec::new();
        assert!(encode_entry(&mut out, PageId::new(7), &page, Some(&base)));
        assert!(out.len() < 64, "two small ranges: {} bytes", out.len());
        let body = &out[ENTRY_HEADER..];
        let mut made = base.clone();
        apply_delta(body, &mut made).expect("applies");
        assert_eq!(made, page);
        // Nothing to diff against, or too much changed: whole.
        out.clear();
        assert!(!encode_entry(&mut out, PageId::new(7), &page, None));
        assert_eq!(out.len(), ENTRY_HEADER + page.len());
        let other: Vec<u8> = page.iter().map(|b| b ^ 0x55).collect();
        out.clear();
        assert!(!encode_entry(&mut out, PageId::new(7), &other, Some(&base)));
    }

    /// Entries written through the block buffer (more than one buffer's
    /// worth) read back as the pages they were made from; a delta over
    /// another base than its own fails its CRC.
    #[test]
    fn written_entries_read_back_and_a_wrong_base_is_caught() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = crate::io::OsStorage::default();
        let path = dir.path().join(INCREMENT_NAME);
        let pb = 4096;
        let mut sink = Sink::create(&storage, &path).expect("create");
        sink.skip(pb);
        let mut w = EntryWriter::new(sink).expect("writer");
        let base = vec![1u8; pb];
        let mut pages = Vec::new();
        for no in 1..400u64 {
            let mut p = base.clone();
            p[(no as usize * 13) % pb] = no as u8 ^ 0x80;
            w.push(PageId::new(no), &p, (no % 3 != 0).then_some(&base[..]))
                .expect("push");
            pages.push((no, p));
        }
        assert_eq!((w.deltas, w.wholes), (266, 133));
        let mut sink = w.into_sink().expect("flush");
        sink.write_first(&AlignedBuf::new(pb, ALIGN_BYTES).expect("buf"), pb)
            .expect("page 0");
        sink.finish().expect("finish");
        let opts = files::read_options(DirectIo::Auto);
        let file = storage.open(&path, &opts).expect("open");
        let mut r = EntryReader::with(file, &path, pb, None).expect("reader");
        for (no, want) in &pages {
            let e = r.next_entry().expect("read").expect("an entry");
            assert_eq!(e.page, PageId::new(*no));
            assert_eq!(e.kind == Kind::Delta, no % 3 != 0);
            let mut made = base.clone();
            r.make_page(&e, &mut made).expect("makes its page");
            assert!(made == *want, "page {no}");
            if e.kind == Kind::Delta {
                let mut other = vec![2u8; pb];
                let err = r.make_page(&e, &mut other).expect_err("another base");
                assert!(err.to_string().contains("CRC32C"), "{err}");
            }
        }
        assert!(r.next_entry().expect("read").is_none(), "zeros end it");
    }

    /// Arbitrary bytes in `data.incr` give entries or errors, never a
    /// panic, and never an entry whose body does not fit a page.
    #[test]
    fn arbitrary_files_read_without_panics() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = crate::io::OsStorage::default();
        let pb = 4096usize;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..64 {
            let path = dir.path().join(format!("f{round}"));
            let blocks = 1 + (next() % 6) as usize;
            let mut bytes: Vec<u8> = (0..blocks * 4096).map(|_| next() as u8).collect();
            // Some rounds: plausible headers, so bodies and deltas are read.
            if round % 2 == 0 {
                let mut at = pb;
                while at + ENTRY_HEADER < bytes.len() {
                    bytes[at] = 1 + (next() % 2) as u8;
                    let len = (next() % 300) as u32;
                    bytes[at + 13..at + 17].copy_from_slice(&len.to_le_bytes());
                    at += ENTRY_HEADER + len as usize;
                }
            }
            std::fs::write(&path, &bytes).expect("write");
            let opts = files::read_options(DirectIo::Auto);
            let file = storage.open(&path, &opts).expect("open");
            let mut r = EntryReader::with(file, &path, pb, None).expect("reader");
            let mut page = vec![0u8; pb];
            for _ in 0..10_000 {
                match r.next_entry() {
                    Ok(Some(e)) => {
                        assert!(r.body.len() <= pb, "a body fits a page");
                        let _ = r.make_page(&e, &mut page);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn damaged_deltas_are_refused() {
        let mut page = vec![0u8; 4096];
        // Cut short, past the page, out of order, empty.
        for bad in [
            vec![1u8, 0, 5],
            [&4095u16.to_le_bytes()[..], &2u16.to_le_bytes(), &[1, 2]].concat(),
            [&[10u8, 0, 1, 0, 1][..], &[5u8, 0, 1, 0, 1][..]].concat(),
            vec![3u8, 0, 0, 0],
        ] {
            assert!(apply_delta(&bad, &mut page).is_err(), "{bad:?}");
        }
    }
}
