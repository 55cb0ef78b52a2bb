//! On-disk encodings: data pages, the `CONTROL` slots, the identities they
//! carry, and the little-endian codec they share. The WAL's own record and
//! segment format lives with the WAL (`wal::format`), on the same codec.
//! Nothing here opens or writes a file.

pub mod control;
pub mod data_head;
pub mod diff;
mod ids;
pub mod le;
pub mod page;

pub use ids::{DbId, FrameIndex, PageId, TxnId};
