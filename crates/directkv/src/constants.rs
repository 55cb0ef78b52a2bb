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
