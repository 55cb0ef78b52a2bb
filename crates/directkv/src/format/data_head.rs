//! Page 0 of the data file, the data file's own head: a free-type page (no
//! tree or list ever links to it) that names how far the data file is
//! complete: every change logged before `flushed_through` is in its pages.
//! Each checkpoint writes it with its redo point, in the same pass and the
//! same sync as the pages it writes, before `CONTROL` names the checkpoint.
//!
//! At open, `flushed_through` below `CONTROL`'s redo point proves the data
//! file older than the checkpoint that names it (say, restored from an older
//! copy): replay from the redo point would leave its older pages stale, so
//! open refuses. A head ahead of `CONTROL` is the normal trace of a
//! checkpoint interrupted before it wrote `CONTROL`.
//!
//! Layout, after the 48-byte page header and the free page's 8-byte link
//! (little-endian):
//!
//! | offset | size | field |
//! |--------|------|-------|
//! | 56 | 8 | magic `DKVDHEAD` |
//! | 64 | 8 | `flushed_through` LSN |
//! | 72 | 8 | `log_reached` LSN |
//!
//! `log_reached` says the log was durable at least that far when the head
//! was written. Besides each checkpoint, the first commit that finds the
//! log durable in a new segment writes the head again (one page write and
//! a data-file sync per segment of log), so a log found ending before it
//! has lost its newest part: say, the WAL directory restored from an older
//! copy after a crash, which nothing in the log itself could show.
//!
//! A page 0 without the magic (a database made before the head existed)
//! has no claim to check; its first checkpoint writes one. Nor has a torn
//! one: the head is the one page without an image in the log, so a
//! checkpoint writes it whole (never read-modify-write) and open takes a
//! head that fails its checksum as no claim.

use super::page::PAGE_HEADER_BYTES;
use super::{le, PageId};
use crate::lsn::Lsn;

/// The page number of the data file's head.
pub const DATA_HEAD_PAGE: PageId = PageId::ZERO;
/// The head's magic.
pub const DATA_HEAD_MAGIC: [u8; 8] = *b"DKVDHEAD";
const MAGIC_AT: usize = PAGE_HEADER_BYTES + 8;
const FLUSHED_AT: usize = MAGIC_AT + 8;
const REACHED_AT: usize = FLUSHED_AT + 8;

/// The head's claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHead {
    /// Every change logged before this LSN is in the data file's pages.
    pub flushed_through: Lsn,
    /// The log was durable at least this far when the head was written.
    pub log_reached: Lsn,
}

/// Writes the head's fields into page 0's bytes (its page header and free
/// link are the caller's, and stay).
pub fn encode(page: &mut [u8], head: DataHead) {
    assert!(page.len() >= REACHED_AT + 8, "page 0 holds the head");
    page[MAGIC_AT..MAGIC_AT + 8].copy_from_slice(&DATA_HEAD_MAGIC);
    page[FLUSHED_AT..FLUSHED_AT + 8].copy_from_slice(&head.flushed_through.get().to_le_bytes());
    page[REACHED_AT..REACHED_AT + 8].copy_from_slice(&head.log_reached.get().to_le_bytes());
    assert_eq!(decode(page), Some(head), "the head reads back");
}

/// The head, or `None` for a page 0 without one.
pub fn decode(page: &[u8]) -> Option<DataHead> {
    let magic = page.get(MAGIC_AT..MAGIC_AT + 8)?;
    (magic == DATA_HEAD_MAGIC && page.len() >= REACHED_AT + 8).then(|| DataHead {
        flushed_through: Lsn::new(le::u64_at(page, FLUSHED_AT)),
        log_reached: Lsn::new(le::u64_at(page, REACHED_AT)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_round_trips_and_old_pages_have_none() {
        let mut p = vec![0u8; 4096];
        assert_eq!(decode(&p), None, "a page 0 of an older database");
        let head = DataHead {
            flushed_through: Lsn::new(123_456),
            log_reached: Lsn::new(200_000),
        };
        encode(&mut p, head);
        assert_eq!(decode(&p), Some(head));
        p[MAGIC_AT] ^= 1;
        assert_eq!(decode(&p), None, "a damaged magic is no claim");
    }
}
