//! Log sequence numbers.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A position in the write-ahead log: the byte offset in the log's record stream
/// (segment headers excluded). The end LSN of a record is what a commit waits on
/// and what a page remembers as its last change.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Lsn(u64);

impl Lsn {
    /// The start of the log.
    pub const ZERO: Lsn = Lsn(0);

    /// The position `value` bytes into the log's record stream.
    pub const fn new(value: u64) -> Lsn {
        Lsn(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Segment-friendly hex, like PostgreSQL's 0/16B3740.
        write!(f, "{:X}/{:08X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}
