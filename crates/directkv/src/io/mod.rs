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
mod statx;
mod storage;
mod sync;

pub use aio::{Aio, AioBackend, AioOptions, AioStats, BatchOp, IO_BACKEND_ENV};
pub use align::{probe as probe_alignment, statx_direct_io, Alignment, AlignmentSource};
pub use align::{AtomicWriteUnit, StatxDirectIo};
pub use buf::{AlignedArena, AlignedBuf, IoMut, IoRef};
pub use dir::{At, Dir};
pub use entries::{create_dir_synced, missing_levels, resolve, sync_levels};
pub use faulty::{FaultOp, FaultyFile, FaultyStorage};
pub use file::{DirectFile, DirectIo, FileOptions, Fill, IoPath};
pub use fs::{device_info, fs_info, sync_dir, DeviceInfo, FsInfo, MEMORY_BACKED_MAGICS};
pub use lock::{DirLock, LOCK_HOLDER_PREFIX};
pub use perms::{create_dirs, read_file, write_new_file, FileKind, FileMeta, Permissions};
pub use perms::{MODE_READABLE_BY_OTHERS, MODE_WRITABLE_BY_OTHERS};
pub use storage::{OsStorage, Storage, StorageFile};
pub use sync::{SyncMethod, SyncVariant};
