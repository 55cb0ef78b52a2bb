//! The engine's inspection surface, for its own command-line tool, tests and
//! fuzz targets: the storage seam and direct files, the WAL and its
//! records, the page and `CONTROL` decoders, the simulated disk, and the
//! few engine parts the tests drive alone.
//!
//! **Not a stable API.** Nothing here is needed to use the database, and it
//! changes with the engine's insides; a user who writes pages or log records
//! directly bypasses the log, the locks and the checks. Every item is named
//! here one by one: a new use outside the crate is a decision, made here.
//! Items of the user API (`SyncMethod`, `DirectIo`, `AioOptions`, ...) are
//! named at the crate root only.

/// The storage seam every file goes through, direct-I/O files, aligned
/// buffers, asynchronous I/O and what the device and filesystem report.
pub mod io {
    pub use crate::io::{
        Aio, AlignedBuf, Alignment, At, DeviceInfo, DirectFile, FaultOp, FaultyStorage, FileMeta,
        FileOptions, Fill, FsInfo, IoMut, IoRef, OsStorage, Storage, StorageFile, IO_BACKEND_ENV,
    };

    /// The device profile: what `directkv test-fsync` measures and
    /// saves, and open reads to choose the WAL's sync method.
    pub mod profile {
        pub use crate::io::profile::{DeviceProfile, Outcome, Scratch, Verdict};
    }
}

/// The write-ahead log: writer, reader, segment and record formats, and
/// the engine's own record payloads.
pub mod wal {
    pub use crate::wal::format::{segment_file_name, Layout, RecordHeader, SegmentHeader};
    pub use crate::wal::{Record, Wal, WalOptions, WalReader, RECORD_PAYLOAD_MAX};

    /// The engine's log records (page changes, commits, aborts,
    /// checkpoints): their kinds, names and one decoder for all of them.
    pub mod records {
        pub use crate::db::records::{decode, kind_name, Decoded, Meta, KINDS};
    }
}

/// On-disk pages and `CONTROL`: identifiers, decoders and checks, and
/// the bounds a decoded field must lie within.
pub mod pages {
    pub use crate::constants::{PAGE_COUNT_MAX, PAGE_COUNT_MIN, SECTOR_BYTES, TXN_ID_MAX};
    pub use crate::db::ControlFile;
    pub use crate::format::PageId;

    /// A page's header, checksum and type.
    pub mod page {
        pub use crate::format::page::{
            seal_in_place, verify, PageType, PAGE_HEADER_BYTES, PAGE_SIZES,
        };
    }

    /// The head of the data file (page 0).
    pub mod data_head {
        pub use crate::format::data_head::{decode, encode, DATA_HEAD_MAGIC};
    }

    /// B+tree nodes: the structural check of a decoded node.
    pub mod node {
        pub use crate::btree::node::validate;
    }
}

/// Engine parts the tests and the command-line tool name: the scheduler's
/// I/O classes, the log's hard limit, and restoring backups on any storage.
pub mod engine {
    pub use crate::backup::is_restored_copy;
    pub use crate::backup::restore::restore_chain_with;
    pub use crate::db::WAL_HARD_LIMIT_FACTOR;
    pub use crate::sched::IoClass;
}

/// The simulated disk and the crash campaigns.
#[cfg(feature = "sim")]
pub mod sim {
    pub use crate::sim::{run_seed, sweep_corruption, Rng, SimStorage};
}
