//! The encoding of a `CONTROL` slot: the database's small, durable root of
//! trust. The file of two slots, and when it is written, is the
//! checkpoint's (`db::control`).
//!
//! Slot layout (little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 0  | 8  | magic `DKVCTRL1` |
//! | 8  | 4  | format version |
//! | 12 | 4  | page size |
//! | 16 | 8  | generation |
//! | 24 | 16 | database identity |
//! | 40 | 8  | checkpoint LSN (where the checkpoint record ends) |
//! | 48 | 8  | redo LSN (replay starts here) |
//! | 56 | 8  | root page |
//! | 64 | 8  | pages in the data file |
//! | 72 | 8  | free-list head page (0: none) |
//! | 80 | 8  | flags |
//! | 88 | 4  | CRC32C of bytes 0..88 |
//! | 92 | 16 | history identity |
//! | 108 | 4 | CRC32C of bytes 92..108 |
//! | 112 | 8 | catalog root page (format version 2 only) |
//! | 120 | 4 | CRC32C of bytes 112..120 (format version 2 only) |
//! | 128 | 8 | pages on the free list (`u64::MAX`: not known) |
//! | 136 | 8 | a compaction's boundary (0: no compaction under way) |
//! | 144 | 8 | a compaction's epoch (0 when no compaction is under way) |
//! | 152 | 24 | zero (reserved) |
//! | 176 | 4 | CRC32C of bytes 128..176 followed by the generation |
//!
//! Bytes 128..180 are an extension that versions 1 and 2 share: builds that
//! know no free-page count never read it, and write zeros there, which fail
//! its CRC (one over the generation too, so bytes of another write never
//! pass for this one's); such a slot's count reads as not known.
//!
//! Format version 2 is version 1 with a catalog of named tables: a slot is
//! written as version 1 while the database has no catalog (so builds that
//! know no tables keep opening it) and as version 2 from the checkpoint
//! after the first table was created (so they refuse it with
//! [`Error::FormatVersion`] instead of losing its tables).
//!
//! A slot whose checksum holds is still checked field by field, and one
//! out of range is [`Error::Corruption`] naming the file, the field's
//! offset and the field (no build writes one; a bug or a crafted file
//! does): the page size is 4096, 8192 or 16384; the generation is in
//! 1..=[`CONTROL_GENERATION_MAX`]; the redo LSN is at most the checkpoint
//! LSN; the page count is in [`PAGE_COUNT_MIN`]..=[`PAGE_COUNT_MAX`]; the
//! root is one of pages 1..page count; the free-list head is 0 or one of
//! them other than the root. Whether the page count fits the data file is
//! open's check, which knows the file (`db::open`). The flags, the
//! identities and the checkpoint LSN take any value.
//!
//! The history identity names one line of the database's history: zero
//! for the line it was created on, and a new random one each time a
//! backup's copy is first opened as a database (from then on the copy's
//! log and the original's differ at the same LSNs). Slots written by
//! builds before it hold zeros at 92..112: the zero history, unless the
//! slot carries [`FLAG_HISTORY`] (a build that records histories wrote it
//! before): then the line is lost, and the next checkpoint starts a new
//! one.

use std::path::Path;

use super::{le, DbId, PageId};
use crate::constants::{CONTROL_GENERATION_MAX, PAGE_COUNT_MAX, PAGE_COUNT_MIN};
use crate::error::{Error, Result};
use crate::lsn::Lsn;

/// Control file magic.
pub const CONTROL_MAGIC: [u8; 8] = *b"DKVCTRL1";
/// The format version of a database without a catalog of tables.
pub const FORMAT_VERSION: u32 = 1;
/// The format version of a database with a catalog of tables (the newest
/// this build reads).
pub const FORMAT_VERSION_TABLES: u32 = 2;
/// Flag: the database is an online backup's copy, to be opened only with
/// the backup's completion marker beside it (cleared by its first
/// checkpoint).
pub const FLAG_BACKUP: u64 = 1;
/// Flag: bytes 92..112 hold the history identity. Builds that record none
/// keep the flag (they keep flags they do not know) but write zeros there:
/// a slot with the flag and zeros has lost its line of history.
pub const FLAG_HISTORY: u64 = 2;
/// Bytes per slot block.
pub const SLOT_BYTES: usize = 4096;
/// Bytes of a slot that carry data: the fields and their CRCs.
pub const SLOT_USED_BYTES: usize = 180;
/// Where the extension of bytes 128..180 begins, and its CRC.
const EXT_AT: usize = 128;
/// Where a compaction's boundary and epoch are; reserved bytes follow.
const COMPACTION_AT: usize = 136;
const RESERVED_AT: usize = 152;
const EXT_CRC_AT: usize = 176;
/// The free-page count's encoding when it is not known.
const FREE_UNKNOWN: u64 = u64::MAX;
/// Bytes a slot of format version 1 carries.
const SLOT_V1_BYTES: usize = 112;
/// The history a database is created on (and that of databases whose
/// `CONTROL` was written by builds that recorded none).
pub const HISTORY_ZERO: HistoryId = [0; 16];

/// The identity of one line of a database's history (see the module docs).
pub type HistoryId = [u8; 16];

const _: () = assert!(SLOT_USED_BYTES <= SLOT_BYTES);

/// The state of a compaction under way (see `db::compact`): pages at or
/// past `boundary` are no longer handed out, and the free pages on the
/// list carry `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// The page count the compaction cuts the data file to.
    pub boundary: u64,
    /// The mark the free pages listed since it began carry (never 0).
    pub epoch: u64,
}

/// The contents of one control slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// Page size of the data file.
    pub page_bytes: u32,
    /// Incremented by every write.
    pub generation: u64,
    /// The database identity.
    pub db_id: DbId,
    /// The end of the last checkpoint's record.
    pub checkpoint_lsn: Lsn,
    /// Where recovery starts replaying the WAL.
    pub redo_lsn: Lsn,
    /// The default keyspace's root page.
    pub root_page: PageId,
    /// The catalog of named tables' root page ([`PageId::ZERO`]: none).
    pub catalog: PageId,
    /// Pages in the data file.
    pub page_count: u64,
    /// Head of the free-page list ([`PageId::ZERO`]: empty).
    pub freelist_head: PageId,
    /// Free pages (on the free list, or set aside by a compaction under
    /// way); `None` when not known.
    pub free_pages: Option<u64>,
    /// The compaction under way, if one is.
    pub compaction: Option<Compaction>,
    /// Feature flags.
    pub flags: u64,
    /// The line of history this database is on.
    pub history: HistoryId,
    /// The slot has [`FLAG_HISTORY`] but no history identity: a build that
    /// records none wrote it after one that did (or a write tore between
    /// the two). The line is unknown; the next checkpoint starts a new one.
    pub history_lost: bool,
}

impl Control {
    /// Whether the database is an online backup's copy ([`FLAG_BACKUP`]).
    pub fn is_backup(&self) -> bool {
        self.flags & FLAG_BACKUP != 0
    }

    /// Encodes the slot into the first [`SLOT_BYTES`] of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(
            out.len() >= SLOT_BYTES,
            "a slot block is {SLOT_BYTES} bytes"
        );
        assert!(
            crate::format::page::PAGE_SIZES.contains(&self.page_bytes),
            "page size {} is not one a database is created with",
            self.page_bytes
        );
        assert!(
            self.root_page.get() < self.page_count,
            "root page {} past the end",
            self.root_page
        );
        assert!(
            self.freelist_head.get() < self.page_count,
            "free-list head past the end"
        );
        assert!(
            self.flags & FLAG_HISTORY != 0 && !self.history_lost,
            "a slot is written with its history"
        );
        // What decode refuses is never written.
        assert!(
            self.redo_lsn <= self.checkpoint_lsn,
            "the redo point is not past its checkpoint"
        );
        assert!((PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&self.page_count));
        assert!((1..=CONTROL_GENERATION_MAX).contains(&self.generation));
        self.assert_extension_fits();
        out[..SLOT_BYTES].fill(0);
        out[0..8].copy_from_slice(&CONTROL_MAGIC);
        le::put_u32(out, 8, FORMAT_VERSION);
        le::put_u32(out, 12, self.page_bytes);
        le::put_u64(out, 16, self.generation);
        out[24..40].copy_from_slice(&self.db_id);
        for (i, v) in [
            self.checkpoint_lsn.get(),
            self.redo_lsn.get(),
            self.root_page.get(),
            self.page_count,
            self.freelist_head.get(),
            self.flags,
        ]
        .into_iter()
        .enumerate()
        {
            le::put_u64(out, 40 + 8 * i, v);
        }
        let crc = crc32c::crc32c(&out[..88]);
        le::put_u32(out, 88, crc);
        out[92..108].copy_from_slice(&self.history);
        let crc = crc32c::crc32c(&out[92..108]);
        le::put_u32(out, 108, crc);
        self.encode_extensions(out);
        assert_eq!(le::u64_at(out, 16), self.generation);
        assert!(out[SLOT_USED_BYTES..SLOT_BYTES].iter().all(|&b| b == 0));
        debug_assert!(
            matches!(Control::decode(out, Path::new("")), Ok(Some(c)) if c == *self),
            "encode and decode pair"
        );
    }

    /// Asserts that the free-page count and the compaction fit the slot's
    /// other fields: what decode refuses is never written.
    fn assert_extension_fits(&self) {
        let compacting = self.compaction.is_some();
        let (freelist, count) = (self.freelist_head, self.page_count);
        assert!(
            check_free_count(self.free_pages, freelist, count, compacting).is_ok(),
            "the free-page count fits the free list: {:?}",
            self.free_pages
        );
        assert!(
            check_compaction(self.compaction, freelist, count).is_ok(),
            "a compaction within the file: {:?}",
            self.compaction
        );
    }

    /// Writes what follows the history: the catalog root (making the slot
    /// version 2) and the free-page extension.
    fn encode_extensions(&self, out: &mut [u8]) {
        le::put_u64(out, EXT_AT, self.free_pages.unwrap_or(FREE_UNKNOWN));
        if let Some(c) = self.compaction {
            le::put_u64(out, COMPACTION_AT, c.boundary);
            le::put_u64(out, COMPACTION_AT + 8, c.epoch);
        }
        le::put_u32(out, EXT_CRC_AT, ext_crc(out, self.generation));
        if self.catalog != PageId::ZERO {
            le::put_u32(out, 8, FORMAT_VERSION_TABLES);
            le::put_u64(out, 112, self.catalog.get());
            let crc = crc32c::crc32c(&out[112..120]);
            le::put_u32(out, 120, crc);
            // The version is under the first CRC.
            let crc = crc32c::crc32c(&out[..88]);
            le::put_u32(out, 88, crc);
        }
    }

    /// Decodes one slot read from `path`; `Ok(None)` for a slot that is
    /// short, empty or damaged.
    ///
    /// # Errors
    /// [`Error::FormatVersion`] for a valid slot of another format version;
    /// [`Error::Corruption`] naming `path` and the field for a valid slot
    /// whose field is out of its range (see the module docs).
    pub fn decode(b: &[u8], path: &Path) -> Result<Option<Control>> {
        if b.len() < SLOT_V1_BYTES {
            return Ok(None);
        }
        let u64_at = |o: usize| le::u64_at(b, o);
        let u32_at = |o: usize| le::u32_at(b, o);
        if b[0..8] != CONTROL_MAGIC || u32_at(88) != crc32c::crc32c(&b[..88]) {
            return Ok(None);
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION && version != FORMAT_VERSION_TABLES {
            return Err(Error::FormatVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION_TABLES,
            });
        }
        let catalog = if version == FORMAT_VERSION_TABLES {
            if b.len() < SLOT_USED_BYTES || u32_at(120) != crc32c::crc32c(&b[112..120]) {
                return Ok(None);
            }
            PageId::new(u64_at(112))
        } else {
            PageId::ZERO
        };
        let mut db_id = [0u8; 16];
        db_id.copy_from_slice(&b[24..40]);
        let mut history = HISTORY_ZERO;
        history.copy_from_slice(&b[92..108]);
        let unrecorded = b[92..112].iter().all(|&x| x == 0);
        if !unrecorded && u32_at(108) != crc32c::crc32c(&b[92..108]) {
            return Ok(None);
        }
        let history_lost = unrecorded && u64_at(80) & FLAG_HISTORY != 0;
        let generation = u64_at(16);
        let (free_pages, compaction) = decode_extension(b, generation, path)?;
        let c = Control {
            page_bytes: u32_at(12),
            generation,
            db_id,
            checkpoint_lsn: Lsn::new(u64_at(40)),
            redo_lsn: Lsn::new(u64_at(48)),
            root_page: PageId::new(u64_at(56)),
            catalog,
            page_count: u64_at(64),
            freelist_head: PageId::new(u64_at(72)),
            free_pages,
            compaction,
            flags: u64_at(80),
            history,
            history_lost,
        };
        c.check_fields(path)?;
        Ok(Some(c))
    }

    /// Range-checks the fields of a slot whose checksum holds: a value no
    /// build writes is a bug's or a crafted file's, and must not reach the
    /// engine (a page count of 2^60 would have the data file grown without
    /// end, a page size of 0 divide by zero).
    ///
    /// # Errors
    /// [`Error::Corruption`] naming `path`, the field's offset and the field.
    fn check_fields(&self, path: &Path) -> Result<()> {
        let bad = |offset: u64, detail: String| {
            Err(Error::Corruption {
                path: path.to_path_buf(),
                offset,
                page: None,
                detail: format!("CONTROL's {detail}"),
            })
        };
        if !crate::format::page::PAGE_SIZES.contains(&self.page_bytes) {
            let found = self.page_bytes;
            return bad(
                12,
                format!("page size {found} is not one of 4096, 8192, 16384"),
            );
        }
        if !(1..=CONTROL_GENERATION_MAX).contains(&self.generation) {
            let found = self.generation;
            return bad(
                16,
                format!("generation {found} is outside 1..={CONTROL_GENERATION_MAX}"),
            );
        }
        if self.redo_lsn > self.checkpoint_lsn {
            let (redo, end) = (self.redo_lsn, self.checkpoint_lsn);
            return bad(
                48,
                format!("redo LSN {redo} is past its checkpoint's end {end}"),
            );
        }
        if !(PAGE_COUNT_MIN..=PAGE_COUNT_MAX).contains(&self.page_count) {
            let found = self.page_count;
            return bad(
                64,
                format!("page count {found} is outside {PAGE_COUNT_MIN}..={PAGE_COUNT_MAX}"),
            );
        }
        check_tree_pages(self.root_page, self.freelist_head, self.page_count)
            .or_else(|(offset, detail)| bad(offset, detail))?;
        check_catalog_page(
            self.catalog,
            self.root_page,
            self.freelist_head,
            self.page_count,
        )
        .or_else(|(offset, detail)| bad(offset, detail))?;
        check_free_count(
            self.free_pages,
            self.freelist_head,
            self.page_count,
            self.compaction.is_some(),
        )
        .or_else(|(offset, detail)| bad(offset, detail))?;
        check_compaction(self.compaction, self.freelist_head, self.page_count)
            .or_else(|(offset, detail)| bad(offset, detail))?;
        assert!(self.page_count >= PAGE_COUNT_MIN && self.root_page.get() < self.page_count);
        assert!(self.freelist_head.get() < self.page_count);
        Ok(())
    }
}

/// Checks a root page and a free-list head against the page count that
/// carries them (in `CONTROL`, a commit or a checkpoint record): the root
/// is a page of the file past the head page, the free-list head one too or
/// 0 (no free page), and they differ. Errs with the field's offset in a
/// `CONTROL` slot (56: the root, 72: the free-list head) and what is wrong.
pub fn check_tree_pages(
    root: PageId,
    freelist: PageId,
    page_count: u64,
) -> std::result::Result<(), (u64, String)> {
    if root == PageId::ZERO || root.get() >= page_count {
        return Err((
            56,
            format!("root page {root} is not one of pages 1..{page_count}"),
        ));
    }
    if freelist.get() >= page_count || freelist == root {
        return Err((
            72,
            format!(
                "free-list head {freelist} is not 0 or one of pages 1..{page_count} \
                 other than the root"
            ),
        ));
    }
    Ok(())
}

/// The free-page count and the compaction a slot's extension carries:
/// none when it has no valid extension (an older build's slot).
///
/// # Errors
/// [`Error::Corruption`] naming `path` for reserved bytes set, or an epoch
/// without a boundary.
fn decode_extension(
    b: &[u8],
    generation: u64,
    path: &Path,
) -> Result<(Option<u64>, Option<Compaction>)> {
    let extended =
        b.len() >= SLOT_USED_BYTES && le::u32_at(b, EXT_CRC_AT) == ext_crc(b, generation);
    if !extended {
        return Ok((None, None));
    }
    let bad = |offset: usize, detail: String| Error::Corruption {
        path: path.to_path_buf(),
        offset: offset as u64,
        page: None,
        detail: format!("control slot: {detail}"),
    };
    if b[RESERVED_AT..EXT_CRC_AT].iter().any(|&x| x != 0) {
        return Err(bad(
            RESERVED_AT,
            "reserved bytes 152..176 are not zero".into(),
        ));
    }
    let free_pages = Some(le::u64_at(b, EXT_AT)).filter(|&n| n != FREE_UNKNOWN);
    let (boundary, epoch) = (
        le::u64_at(b, COMPACTION_AT),
        le::u64_at(b, COMPACTION_AT + 8),
    );
    if boundary == 0 && epoch != 0 {
        let what = format!("compaction epoch {epoch} without a boundary");
        return Err(bad(COMPACTION_AT + 8, what));
    }
    Ok((
        free_pages,
        (boundary != 0).then_some(Compaction { boundary, epoch }),
    ))
}

/// The CRC of a slot's extension: bytes 128..176, then the generation.
fn ext_crc(slot: &[u8], generation: u64) -> u32 {
    let crc = crc32c::crc32c(&slot[EXT_AT..EXT_CRC_AT]);
    crc32c::crc32c_append(crc, &generation.to_le_bytes())
}

/// Checks a free-page count against the free-list head and the page
/// count: not known, or fewer than the pages past the data file's head
/// and the root, and (unless a compaction sets free pages aside, off the
/// list) 0 exactly when the list is empty. Errs with the field's offset
/// in a `CONTROL` slot (128) and what is wrong.
pub fn check_free_count(
    free_pages: Option<u64>,
    freelist: PageId,
    page_count: u64,
    compacting: bool,
) -> std::result::Result<(), (u64, String)> {
    let Some(n) = free_pages else {
        return Ok(());
    };
    let listed = freelist != PageId::ZERO;
    let fits = match compacting {
        false => (n == 0) != listed,
        true => n > 0 || !listed,
    };
    if !fits || n > page_count.saturating_sub(2) {
        return Err((
            EXT_AT as u64,
            format!(
                "free page count {n} does not fit free-list head {freelist} and                  {page_count} pages"
            ),
        ));
    }
    Ok(())
}

/// Checks a compaction's state against the free-list head and the page
/// count: its boundary is a page count of at least [`PAGE_COUNT_MIN`] and
/// at most the file's, the free list is below it, and its epoch is not 0.
/// Errs with the field's offset in a `CONTROL` slot (136 or 144) and what
/// is wrong.
pub fn check_compaction(
    compaction: Option<Compaction>,
    freelist: PageId,
    page_count: u64,
) -> std::result::Result<(), (u64, String)> {
    let Some(c) = compaction else {
        return Ok(());
    };
    if !(PAGE_COUNT_MIN..=page_count).contains(&c.boundary) || freelist.get() >= c.boundary {
        return Err((
            COMPACTION_AT as u64,
            format!(
                "compaction boundary {} is outside {PAGE_COUNT_MIN}..={page_count} or not past \
                 free-list head {freelist}",
                c.boundary
            ),
        ));
    }
    if c.epoch == 0 {
        return Err(((COMPACTION_AT + 8) as u64, "compaction epoch is 0".into()));
    }
    Ok(())
}

/// Checks a catalog root against the page count and the other roots that
/// come with it: 0 (no catalog) or a page of the file other than the
/// default root and the free-list head. Errs with the field's offset in a
/// `CONTROL` slot (112) and what is wrong.
pub fn check_catalog_page(
    catalog: PageId,
    root: PageId,
    freelist: PageId,
    page_count: u64,
) -> std::result::Result<(), (u64, String)> {
    if catalog == PageId::ZERO {
        return Ok(());
    }
    if catalog.get() >= page_count || catalog == root || catalog == freelist {
        return Err((
            112,
            format!(
                "catalog root {catalog} is not 0 or one of pages 1..{page_count} other than \
                 the root and the free-list head"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
