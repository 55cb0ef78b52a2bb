//! The buffer pool: page frames in one aligned arena, a page table, scan-resistant
//! replacement, and a flush list ordered by first-change LSN.

mod pool;
mod replacer;

pub use pool::{BufferPool, Held, LogFlusher, PageMut, PageRef, PoolStats, FRAMES_MIN};
pub use replacer::Access;
