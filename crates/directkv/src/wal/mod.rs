//! The write-ahead log: records become durable bytes at LSNs. It knows nothing
//! of pages.
//!
//! - `format`: record and segment headers, LSN-to-file mapping.
//! - `reader`: iteration, and the torn-tail versus corruption decision.
//! - `segments`: preallocated, zero-filled, recycled segment files.
//! - `writer`: appends, group commit, poisoning.

pub mod format;
mod reader;
mod segments;
mod writer;

pub use format::{kind, DbId, RECORD_PAYLOAD_MAX};
pub use reader::{Record, Tail, WalReader};
pub use writer::{
    Wal, WalOptions, WalStats, BUFFER_BYTES_DEFAULT, RECYCLE_SEGMENTS_MAX_DEFAULT,
    SEGMENT_BYTES_DEFAULT, SPARE_SEGMENTS_DEFAULT,
};
