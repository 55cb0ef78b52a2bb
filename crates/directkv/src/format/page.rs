//! The page header every data-file page carries, and the seal/verify pair that
//! guards the disk boundary (DESIGN.md invariant 4; RELIABILITY.md F7, F8, F10).
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 0      | 4    | CRC32C of bytes 4..page_size |
//! | 4      | 4    | magic `DKVP` |
//! | 8      | 2    | page type |
//! | 10     | 2    | flags |
//! | 12     | 4    | owning tree: 0 the default keyspace, 1 the catalog, a named table's id; 0 on free pages |
//! | 16     | 8    | page number (the page's own position) |
//! | 24     | 8    | page LSN: end LSN of the last logged change |
//! | 32     | 16   | database identity |
//! | 48     | …    | the page type's body |
//!
//! The page number and database identity sit inside the checksummed region, so
//! a page image written to the wrong place (or taken from another database)
//! fails verification even though its checksum is intact. The owning tree
//! lets a descent refuse a child of another tree (a misdirected pointer
//! across tables) and the check prove every page is in its own tree's walk.
//! Builds before named tables wrote zeros there, which is the default
//! keyspace's id: their pages read as its own.

use super::{le, DbId, PageId};
use crate::lsn::Lsn;

/// Bytes of the common page header.
pub const PAGE_HEADER_BYTES: usize = 48;
/// Page magic.
pub const PAGE_MAGIC: [u8; 4] = *b"DKVP";
/// The page sizes a database may be created with.
pub const PAGE_SIZES: [u32; 3] = [4096, 8192, 16384];

// The largest file the page count allows has a byte size that fits an
// `i64` (`off_t`) at the largest page size.
const _: () = assert!(
    crate::constants::PAGE_COUNT_MAX <= i64::MAX as u64 / PAGE_SIZES[PAGE_SIZES.len() - 1] as u64
);

/// What a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum PageType {
    /// A B+tree leaf.
    Leaf = 1,
    /// A B+tree branch.
    Branch = 2,
    /// A piece of a large value.
    Overflow = 3,
    /// A page on the free list.
    Free = 4,
}

impl PageType {
    fn from_u16(v: u16) -> Option<PageType> {
        Some(match v {
            1 => PageType::Leaf,
            2 => PageType::Branch,
            3 => PageType::Overflow,
            4 => PageType::Free,
            _ => return None,
        })
    }
}

/// The decoded common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// The page type.
    pub page_type: PageType,
    /// Type-specific flags.
    pub flags: u16,
    /// The tree the page belongs to (see the module docs).
    pub tree: u32,
    /// The page's own number.
    pub page_no: PageId,
    /// The end LSN of the last change applied to the page.
    pub lsn: Lsn,
    /// The database it belongs to.
    pub db_id: DbId,
}

/// Why a page image was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageError {
    /// All zeros: the page was never written.
    NeverWritten,
    /// The checksum does not match: a torn write or bit rot.
    Checksum,
    /// Valid, but the image of another page: a misdirected write or read.
    Misdirected {
        /// The page number the image carries.
        found: PageId,
    },
    /// Valid, but from another database.
    ForeignDatabase,
    /// Valid checksum but an unknown magic or type: not a page of this format.
    NotAPage,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::NeverWritten => f.write_str("page was never written (all zeros)"),
            PageError::Checksum => f.write_str("page checksum mismatch (torn write or bit rot)"),
            PageError::Misdirected { found } => write!(
                f,
                "page holds the image of page {found} (misdirected write or read)"
            ),
            PageError::ForeignDatabase => f.write_str("page belongs to another database"),
            PageError::NotAPage => f.write_str("not a directkv page"),
        }
    }
}

/// Writes `header` into the first bytes of `page` and the checksum over the
/// whole page. Call right before the page goes to disk.
pub fn seal(page: &mut [u8], header: &PageHeader) {
    assert!(
        PAGE_SIZES.contains(&(page.len() as u32)),
        "page of {} bytes",
        page.len()
    );
    page[4..8].copy_from_slice(&PAGE_MAGIC);
    page[8..10].copy_from_slice(&(header.page_type as u16).to_le_bytes());
    page[10..12].copy_from_slice(&header.flags.to_le_bytes());
    page[12..16].copy_from_slice(&header.tree.to_le_bytes());
    page[16..24].copy_from_slice(&header.page_no.get().to_le_bytes());
    page[24..32].copy_from_slice(&header.lsn.get().to_le_bytes());
    page[32..48].copy_from_slice(&header.db_id);
    let crc = crc32c::crc32c(&page[4..]);
    page[0..4].copy_from_slice(&crc.to_le_bytes());
    // The pair across the disk boundary: the header reads back as written,
    // and (O(n)) the whole page verifies.
    assert_eq!(le::u64_at(page, 16), header.page_no.get());
    assert_eq!(page_lsn(page), header.lsn);
    assert_eq!(page[32..48], header.db_id);
    assert_eq!(
        u16::from_le_bytes([page[8], page[9]]),
        header.page_type as u16
    );
    debug_assert_eq!(verify(page, header.page_no, &header.db_id), Ok(*header));
}

/// Seals a page whose type, flags and LSN are already in its header bytes:
/// writes magic, own page number, database identity and checksum.
pub fn seal_in_place(page: &mut [u8], page_no: PageId, db_id: &DbId) {
    let page_type = PageType::from_u16(u16::from_le_bytes([page[8], page[9]]))
        .expect("a page in the pool has a known type before it is written");
    let header = PageHeader {
        page_type,
        flags: u16::from_le_bytes([page[10], page[11]]),
        tree: tree_of(page),
        page_no,
        lsn: page_lsn(page),
        db_id: *db_id,
    };
    seal(page, &header);
    assert_eq!(
        u16::from_le_bytes([page[10], page[11]]),
        header.flags,
        "flags kept"
    );
}

/// Sets the page type (and clears the flags) of a page being initialised.
pub fn init(page: &mut [u8], page_type: PageType) {
    assert!(page.len() >= PAGE_HEADER_BYTES);
    page[8..10].copy_from_slice(&(page_type as u16).to_le_bytes());
    page[10..12].fill(0);
    assert_eq!(
        PageType::from_u16(u16::from_le_bytes([page[8], page[9]])),
        Some(page_type)
    );
}

/// Checks a page image read from position `page_no` of database `db_id`.
///
/// # Errors
/// `PageError` saying what is wrong; such an image is never used as data.
pub fn verify(page: &[u8], page_no: PageId, db_id: &DbId) -> Result<PageHeader, PageError> {
    if le::u32_at(page, 0) != crc32c::crc32c(&page[4..]) {
        if page.iter().all(|&b| b == 0) {
            return Err(PageError::NeverWritten);
        }
        return Err(PageError::Checksum);
    }
    if page[4..8] != PAGE_MAGIC {
        return Err(PageError::NotAPage);
    }
    let page_type =
        PageType::from_u16(u16::from_le_bytes([page[8], page[9]])).ok_or(PageError::NotAPage)?;
    let header = PageHeader {
        page_type,
        flags: u16::from_le_bytes([page[10], page[11]]),
        tree: tree_of(page),
        page_no: PageId::new(le::u64_at(page, 16)),
        lsn: Lsn::new(le::u64_at(page, 24)),
        db_id: page[32..48].try_into().map_err(|_| PageError::NotAPage)?,
    };
    if header.page_no != page_no {
        return Err(PageError::Misdirected {
            found: header.page_no,
        });
    }
    if &header.db_id != db_id {
        return Err(PageError::ForeignDatabase);
    }
    assert!(
        page.len() >= PAGE_HEADER_BYTES,
        "a checksummed page holds its header"
    );
    Ok(header)
}

/// The tree a page image says it belongs to (not verified).
pub fn tree_of(page: &[u8]) -> u32 {
    le::u32_at(page, 12)
}

/// Marks a page being initialised as `tree`'s.
pub fn set_tree(page: &mut [u8], tree: u32) {
    page[12..16].copy_from_slice(&tree.to_le_bytes());
    assert_eq!(tree_of(page), tree);
}

/// The page LSN recorded in a page image (not verified).
pub fn page_lsn(page: &[u8]) -> Lsn {
    Lsn::new(le::u64_at(page, 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(no: u64) -> PageHeader {
        PageHeader {
            page_type: PageType::Leaf,
            flags: 3,
            tree: 7,
            page_no: PageId::new(no),
            lsn: Lsn::new(777),
            db_id: [5; 16],
        }
    }

    #[test]
    fn seal_then_verify() {
        let mut page = vec![0u8; 4096];
        page[100] = 42;
        assert_eq!(
            verify(&page, PageId::new(9), &[5; 16]),
            Err(PageError::Checksum)
        );
        assert_eq!(
            verify(&[0u8; 4096], PageId::new(9), &[5; 16]),
            Err(PageError::NeverWritten)
        );
        seal(&mut page, &header(9));
        assert_eq!(verify(&page, PageId::new(9), &[5; 16]), Ok(header(9)));
        assert_eq!(page_lsn(&page), Lsn::new(777));
        assert_eq!(
            verify(&page, PageId::new(10), &[5; 16]),
            Err(PageError::Misdirected {
                found: PageId::new(9)
            })
        );
        assert_eq!(
            verify(&page, PageId::new(9), &[6; 16]),
            Err(PageError::ForeignDatabase)
        );
        for bit in (0..4096 * 8).step_by(97) {
            let mut bad = page.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(verify(&bad, PageId::new(9), &[5; 16]).is_err(), "bit {bit}");
        }
    }
}
