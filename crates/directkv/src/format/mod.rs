//! On-disk encodings of the data file and the control file. The WAL's own format
//! lives with the WAL (`wal::format`).

pub mod control;
pub mod page;
