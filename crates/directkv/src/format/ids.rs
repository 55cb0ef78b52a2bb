//! Identities that on-disk structures carry, and the numbers that name pages,
//! buffer-pool frames and transactions.
//!
//! Invariants:
//! - Each number is its own type, so a frame index is never taken for a page
//!   number, nor a page number for a transaction id or a count of pages.
//! - On disk they are the plain little-endian integers they wrap: codecs
//!   convert with `new`/`get` at the byte boundary, and nothing about the
//!   format depends on these types.

use std::fmt;

/// A database's identity: 16 random bytes chosen at creation, carried by
/// every page, every WAL segment header and `CONTROL`, so a page or a
/// segment of another database is recognised as foreign.
pub type DbId = [u8; 16];

/// A page's number in the data file: its byte offset divided by the page
/// size. Page 0 is the data file's head page; every page carries its own
/// number in its header, so a page read from the wrong place is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageId(u64);

impl PageId {
    /// Page 0, the data file's head page. It is never a tree, overflow or
    /// free page, so as a link in a chain of pages (the free list, an
    /// overflow chain) it means the end: no page.
    pub const ZERO: PageId = PageId(0);

    /// Page `no` of the data file.
    pub const fn new(no: u64) -> PageId {
        PageId(no)
    }

    /// The raw page number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The page's byte offset in a data file of `page_bytes`-byte pages:
    /// page 3 of 8 KiB pages starts at byte 24576. A number from damaged
    /// bytes past any file saturates to `u64::MAX`, whose read fails, rather
    /// than wrapping to another page's offset.
    ///
    /// # Panics
    /// On `page_bytes` 0 (a bug: page sizes are checked at open).
    pub fn offset(self, page_bytes: u64) -> u64 {
        assert!(page_bytes > 0, "a page has bytes");
        self.0.saturating_mul(page_bytes)
    }

    /// The page right after this one.
    pub const fn next(self) -> PageId {
        PageId(self.0 + 1)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A transaction's id, from one increasing sequence. A write transaction
/// takes one at its start, which owns its row locks; each attempt to commit
/// takes another, which every WAL record of that commit carries. Recovery
/// resumes the sequence past the largest id it replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId(u64);

impl TxnId {
    /// Transaction id `id`.
    pub const fn new(id: u64) -> TxnId {
        TxnId(id)
    }

    /// The raw id.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The id allocated after this one.
    pub const fn next(self) -> TxnId {
        TxnId(self.0 + 1)
    }
}

impl fmt::Display for TxnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An index into the buffer pool's frame array: which of its page-sized
/// slots of memory. Nothing on disk carries it; the buffer pool is its only
/// user, and it lives here beside the page numbers it is kept apart from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameIndex(u32);

impl FrameIndex {
    /// Frame `index` of the pool.
    pub const fn new(index: u32) -> FrameIndex {
        FrameIndex(index)
    }

    /// The raw index.
    #[cfg(test)]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The index, for indexing the pool's frames.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for FrameIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_offsets_and_successors() {
        let p = PageId::new(3);
        assert_eq!(p.offset(8192), 3 * 8192);
        assert_eq!(p.next(), PageId::new(4));
        assert_eq!(p.next().get(), 4);
        assert_eq!(p.to_string(), "3");
        assert!(PageId::new(0) < p);
    }

    #[test]
    fn txn_ids_and_frames_round_trip() {
        assert_eq!(TxnId::new(41).next().get(), 42);
        assert_eq!(TxnId::new(7).to_string(), "7");
        assert_eq!(FrameIndex::new(9).index(), 9);
        assert_eq!(FrameIndex::new(9).get(), 9);
        assert_eq!(FrameIndex::new(9).to_string(), "9");
    }
}
