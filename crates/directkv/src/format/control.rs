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
//! | 136 | 40 | zero (reserved for the state of a compaction under way) |
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
    /// Pages on the free list; `None` when not known.
    pub free_pages: Option<u64>,
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
        assert!(
            check_free_count(self.free_pages, self.freelist_head, self.page_count).is_ok(),
            "the free-page count fits the free list: {:?}",
            self.free_pages
        );
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

    /// Writes what follows the history: the catalog root (making the slot
    /// version 2) and the free-page extension.
    fn encode_extensions(&self, out: &mut [u8]) {
        le::put_u64(out, EXT_AT, self.free_pages.unwrap_or(FREE_UNKNOWN));
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
        let extended = b.len() >= SLOT_USED_BYTES && u32_at(EXT_CRC_AT) == ext_crc(b, generation);
        if extended && b[EXT_AT + 8..EXT_CRC_AT].iter().any(|&x| x != 0) {
            return Err(Error::Corruption {
                path: path.to_path_buf(),
                offset: (EXT_AT + 8) as u64,
                page: None,
                detail: "control slot: reserved bytes 136..176 are not zero".into(),
            });
        }
        let free_pages = Some(u64_at(EXT_AT)).filter(|&n| extended && n != FREE_UNKNOWN);
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
        check_free_count(self.free_pages, self.freelist_head, self.page_count)
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

/// The CRC of a slot's extension: bytes 128..176, then the generation.
fn ext_crc(slot: &[u8], generation: u64) -> u32 {
    let crc = crc32c::crc32c(&slot[EXT_AT..EXT_CRC_AT]);
    crc32c::crc32c_append(crc, &generation.to_le_bytes())
}

/// Checks a free-page count against the free-list head and the page
/// count: not known, or 0 exactly when the list is empty, and fewer than
/// the pages past the data file's head and the root. Errs with the
/// field's offset in a `CONTROL` slot (128) and what is wrong.
pub fn check_free_count(
    free_pages: Option<u64>,
    freelist: PageId,
    page_count: u64,
) -> std::result::Result<(), (u64, String)> {
    let Some(n) = free_pages else {
        return Ok(());
    };
    if (n == 0) != (freelist == PageId::ZERO) || n > page_count.saturating_sub(2) {
        return Err((
            EXT_AT as u64,
            format!(
                "free page count {n} does not fit free-list head {freelist} and                  {page_count} pages"
            ),
        ));
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
mod tests {
    use super::*;

    fn sample() -> Control {
        Control {
            page_bytes: 8192,
            generation: 3,
            db_id: [9; 16],
            checkpoint_lsn: Lsn::new(200),
            redo_lsn: Lsn::new(100),
            root_page: PageId::new(1),
            catalog: PageId::ZERO,
            page_count: 5,
            freelist_head: PageId::ZERO,
            free_pages: Some(0),
            flags: FLAG_HISTORY,
            history: [4; 16],
            history_lost: false,
        }
    }

    /// A slot with a catalog is format version 2 and carries its root under
    /// a CRC of its own; one without stays version 1, byte for byte what a
    /// build without tables writes.
    #[test]
    fn a_catalog_makes_the_slot_version_2() {
        let path = Path::new("CONTROL");
        let mut slot = vec![0u8; SLOT_BYTES];
        sample().encode(&mut slot);
        assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION);
        assert!(slot[112..128].iter().all(|&b| b == 0));
        let with = Control {
            catalog: PageId::new(3),
            ..sample()
        };
        with.encode(&mut slot);
        assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION_TABLES);
        assert_eq!(Control::decode(&slot, path).expect("ok"), Some(with));
        let mut damaged = slot.clone();
        damaged[113] ^= 1;
        assert_eq!(Control::decode(&damaged, path).expect("ok"), None);
        let on_root = Control {
            catalog: PageId::new(1),
            ..sample()
        };
        let mut raw = vec![0u8; SLOT_BYTES];
        with.encode(&mut raw);
        le::put_u64(&mut raw, 112, on_root.catalog.get());
        let crc = crc32c::crc32c(&raw[112..120]);
        le::put_u32(&mut raw, 120, crc);
        assert!(matches!(
            Control::decode(&raw, path),
            Err(Error::Corruption { offset: 112, .. })
        ));
    }

    /// The free-page count rides in the extension under its own CRC (over
    /// the generation too): a slot of a build that writes zeros there reads
    /// as not knowing it, as does one whose extension is another
    /// generation's; reserved bytes set, or a count that does not fit the
    /// free list, are corruption naming offset 128 or 136.
    #[test]
    fn the_free_page_count_is_an_extension_older_builds_leave_unknown() {
        let path = Path::new("CONTROL");
        let counted = Control {
            page_count: 9,
            freelist_head: PageId::new(4),
            free_pages: Some(3),
            ..sample()
        };
        let mut slot = vec![0u8; SLOT_BYTES];
        counted.encode(&mut slot);
        assert_eq!(le::u32_at(&slot, 8), FORMAT_VERSION, "no new version");
        assert_eq!(Control::decode(&slot, path).expect("ok"), Some(counted));
        let unknown = Control {
            free_pages: None,
            ..counted
        };
        let mut raw = vec![0u8; SLOT_BYTES];
        unknown.encode(&mut raw);
        assert_eq!(Control::decode(&raw, path).expect("ok"), Some(unknown));
        // An older build's slot: zeros past 124.
        let mut old = slot.clone();
        old[EXT_AT..SLOT_USED_BYTES].fill(0);
        assert_eq!(Control::decode(&old, path).expect("ok"), Some(unknown));
        // The same extension under another generation is not this one's.
        let mut other = slot.clone();
        le::put_u64(&mut other, 16, counted.generation + 1);
        let crc = crc32c::crc32c(&other[..88]);
        le::put_u32(&mut other, 88, crc);
        let got = Control::decode(&other, path).expect("ok").expect("valid");
        assert_eq!(got.free_pages, None);
        let reseal = |s: &mut Vec<u8>| {
            let crc = ext_crc(s, counted.generation);
            le::put_u32(s, EXT_CRC_AT, crc);
        };
        let mut reserved = slot.clone();
        reserved[150] = 1;
        reseal(&mut reserved);
        assert!(matches!(
            Control::decode(&reserved, path),
            Err(Error::Corruption { offset: 136, .. })
        ));
        for n in [0u64, 8] {
            let mut wrong = slot.clone();
            le::put_u64(&mut wrong, EXT_AT, n);
            reseal(&mut wrong);
            assert!(
                matches!(
                    Control::decode(&wrong, path),
                    Err(Error::Corruption { offset: 128, .. })
                ),
                "{n}"
            );
        }
    }

    /// The history round-trips; a slot of a build that records none reads
    /// as the first line, and one such a build wrote over a newer one's (the
    /// flag kept, the id zeroed) reads as a lost line; damaged history bytes
    /// make the slot invalid.
    #[test]
    fn histories_read_back_and_lost_ones_are_told_apart() {
        let path = Path::new("CONTROL");
        let mut slot = vec![0u8; SLOT_BYTES];
        sample().encode(&mut slot);
        let back = Control::decode(&slot, path)
            .expect("version")
            .expect("valid");
        assert_eq!(back, sample());
        // The first line, recorded: zeros with their CRC.
        let first = Control {
            history: HISTORY_ZERO,
            ..sample()
        };
        first.encode(&mut slot);
        assert!(slot[108..112].iter().any(|&b| b != 0), "a CRC of zeros");
        assert_eq!(Control::decode(&slot, path).expect("ok"), Some(first));
        // An older build's slot: no flag, zeros.
        let mut old = slot.clone();
        old[92..112].fill(0);
        le::put_u64(&mut old, 80, 0);
        let crc = crc32c::crc32c(&old[..88]);
        le::put_u32(&mut old, 88, crc);
        let got = Control::decode(&old, path).expect("ok").expect("valid");
        assert_eq!((got.history, got.history_lost), (HISTORY_ZERO, false));
        // An older build wrote it after a newer one: the flag, no id.
        let mut lost = slot.clone();
        lost[92..112].fill(0);
        let got = Control::decode(&lost, path).expect("ok").expect("valid");
        assert!(got.history_lost, "{got:?}");
        // Damage in the history bytes.
        let mut damaged = slot.clone();
        damaged[95] ^= 1;
        assert_eq!(Control::decode(&damaged, path).expect("ok"), None);
    }
}
