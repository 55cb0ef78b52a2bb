//! What the integration tests share: small, quick databases in scratch
//! directories.

/// Options for a test database: an 8 MiB cache, `page_bytes` pages, a
/// named WAL sync (not measured at each open of a new directory) and
/// 1 MiB WAL segments (not 64 MiB zero-filled at creation).
pub fn options(page_bytes: u32) -> directkv::Options {
    directkv::Options {
        cache_bytes: 8 << 20,
        page_bytes,
        wal_sync: Some(directkv::SyncVariant {
            method: directkv::SyncMethod::Fdatasync,
            direct: true,
        }),
        wal_segment_bytes: 1 << 20,
        data_extend_bytes: 0,
        publish_stats: false,
        ..directkv::Options::default()
    }
}

/// A scratch directory under the target directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("scratch dir")
}
