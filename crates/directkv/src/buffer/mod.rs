//! The buffer pool: page frames in one aligned arena, a page table, scan-resistant
//! replacement, and a flush list ordered by first-change LSN.

mod batch_read;
mod fix;
mod growth;
mod page;
mod pool;
mod replacer;
mod table;
mod write_back;

pub use page::{Held, PageMut};
pub use pool::{BufferPool, LogFlusher, PoolStats, WriteCause, WritesByCause};
pub use replacer::Access;

#[cfg(test)]
mod tests;
