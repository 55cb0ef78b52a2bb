//! The write-ahead log: records become durable bytes at LSNs. It knows nothing
//! of pages.
//!
//! - `coverage`: what open proves about the log before it trusts its end.
//! - `format`: record and segment headers, LSN-to-file mapping.
//! - `preparer`: the thread that keeps spare segments ready.
//! - `reader`: iteration, and the torn-tail versus corruption decision.
//! - `sealer`: the thread that proves the last flush complete once the log
//!   goes idle.
//! - `segments`: preallocated, zero-filled, recycled segment files.
//! - `writer`: appends, group commit, poisoning.

mod coverage;
pub mod format;
mod preparer;
mod reader;
mod sealer;
mod segments;
mod writer;

pub(crate) use coverage::missing_dir;
pub use coverage::DiscardedTail;
pub use format::{kind, RECORD_PAYLOAD_MAX};
pub(crate) use reader::read_options as reader_options;
pub(crate) use reader::{list_segments, read_segment_header};
pub use reader::{Record, WalReader};
pub use writer::{
    Wal, WalOptions, WalStats, BUFFER_BYTES_DEFAULT, SEAL_DELAY_DEFAULT, SEGMENT_BYTES_DEFAULT,
};

#[cfg(test)]
mod tests;
