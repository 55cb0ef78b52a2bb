//! The I/O layer: files, alignment, sync methods and aligned memory. Nothing
//! above this layer calls `open(2)`, `pwrite(2)` or `fsync(2)` itself.

mod aio;
mod align;
mod buf;
mod dir;
mod entries;
mod faulty;
mod file;
mod fs;
mod lock;
mod perms;
pub mod profile;
mod random;
mod statx;
mod storage;
mod sync;

pub use aio::{Aio, AioBackend, AioOptions, AioStats, BatchOp, IO_BACKEND_ENV};
#[cfg(test)]
pub(crate) use align::statx_direct_io;
pub use align::Alignment;
#[cfg(any(test, feature = "sim"))]
pub use align::AlignmentSource;
pub use buf::{AlignedArena, AlignedBuf, IoMut, IoRef};
pub use dir::At;
pub use entries::{create_dir_synced, missing_levels, resolve, sync_levels};
pub use faulty::{FaultOp, FaultyStorage};
pub use file::{DirectFile, DirectIo, FileOptions, Fill, IoPath};
pub use fs::{DeviceInfo, FsInfo};
pub use lock::LOCK_HOLDER_PREFIX;
pub use perms::{read_file, write_new_file, FileKind, FileMeta, Permissions};
pub(crate) use random::random_id;
pub use storage::{OsStorage, Storage, StorageFile};
pub use sync::{SyncMethod, SyncVariant};

#[cfg(test)]
mod tests;
