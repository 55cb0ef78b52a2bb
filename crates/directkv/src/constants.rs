//! Limits and sizes shared by the layers, with the relations between them checked
//! at compile time.

/// The smallest unit a block device writes: the granularity of a torn write.
pub const SECTOR_BYTES: u32 = 512;

/// The alignment assumed for direct I/O when neither `statx` nor probing tells.
pub const DIRECT_IO_ALIGN_DEFAULT: u32 = 4096;

/// The largest direct-I/O alignment the engine accepts from `statx` or a probe.
/// A larger value is treated as a bogus report and replaced by probing.
pub const DIRECT_IO_ALIGN_MAX: u32 = 64 * 1024;

/// The alignments tried, smallest first, when probing a filesystem by writing.
pub const DIRECT_IO_PROBE_ALIGNS: [u32; 2] = [SECTOR_BYTES, DIRECT_IO_ALIGN_DEFAULT];

/// Every arena is aligned to at least this, so its memory can also be registered
/// with io_uring and mapped page by page.
pub const ARENA_ALIGN_MIN: u32 = 4096;

/// The most slots one arena holds (the slot index is a `u32`).
pub const ARENA_SLOTS_MAX: usize = 1 << 28;

/// The chunk in which preallocated space is zero-filled.
pub const ZERO_FILL_CHUNK_BYTES: usize = 1024 * 1024;

/// The most retries of a short read or write before it is reported as an error.
/// A short transfer that makes progress is continued; one that makes none fails.
pub const SHORT_IO_RETRIES_MAX: u32 = 64;

const _: () = assert!(SECTOR_BYTES.is_power_of_two());
const _: () = assert!(DIRECT_IO_ALIGN_DEFAULT.is_power_of_two());
const _: () = assert!(DIRECT_IO_ALIGN_DEFAULT % SECTOR_BYTES == 0);
const _: () = assert!(DIRECT_IO_ALIGN_MAX % DIRECT_IO_ALIGN_DEFAULT == 0);
const _: () = assert!(ARENA_ALIGN_MIN >= DIRECT_IO_ALIGN_DEFAULT);
const _: () = assert!(ZERO_FILL_CHUNK_BYTES % DIRECT_IO_ALIGN_MAX as usize == 0);
const _: () = assert!(ARENA_SLOTS_MAX <= u32::MAX as usize);

/// The most backups a chain an incremental backup stores deltas against
/// may hold (each one read alongside the copy holds a few MiB of
/// buffers); a longer chain makes it store whole pages.
pub const DELTA_CHAIN_LINKS_MAX: usize = 64;

/// The most pages a data file may hold: 2^40, 16 PiB of 16 KiB pages, past
/// what any filesystem the engine runs on stores in one file. A page count
/// read from disk (`CONTROL`, a commit or checkpoint record, a backup's
/// manifest) above it is corruption, and allocation stops there, so no
/// page number reaches the buffer pool's reserved `u64::MAX` and no byte
/// offset of a page overflows a file offset (`i64`).
pub const PAGE_COUNT_MAX: u64 = 1 << 40;

/// The fewest pages a data file holds: its head (page 0) and the tree's
/// first root (page 1), both written at creation.
pub const PAGE_COUNT_MIN: u64 = 2;

/// The fewest bytes of log one page record takes: its 16-byte header and
/// the 19 bytes of the smallest payload (txn, page, flag, count), rounded
/// up to the 8-byte alignment of records. Every page a data file grew by
/// since a redo point has a full image in the log after it, so the log
/// between two LSNs explains at most `(b - a) / LOG_BYTES_PER_PAGE_MIN`
/// new pages.
pub const LOG_BYTES_PER_PAGE_MIN: u64 = 40;

/// The highest transaction id a record may carry: the ids after it must
/// still count up without overflow for as long as any database runs.
pub const TXN_ID_MAX: u64 = 1 << 62;

/// The highest `CONTROL` generation: each checkpoint adds one, so a
/// generation read from disk above it is corruption, not history.
pub const CONTROL_GENERATION_MAX: u64 = 1 << 62;

const _: () = assert!(PAGE_COUNT_MIN < PAGE_COUNT_MAX);
const _: () = assert!(
    PAGE_COUNT_MAX < u64::MAX,
    "u64::MAX is the pool's empty frame"
);
const _: () = assert!(LOG_BYTES_PER_PAGE_MIN >= 16 + 19 && LOG_BYTES_PER_PAGE_MIN % 8 == 0);
const _: () = assert!(TXN_ID_MAX < u64::MAX / 2 && CONTROL_GENERATION_MAX < u64::MAX / 2);
