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

/// The names of the tables of `db` that start with `prefix` (`raft.data.`
/// for the data generations, `raft.snap.` for the stored snapshots'
/// chunks), by name.
#[allow(dead_code)] // Not every test file looks at the tables.
pub fn tables(db: &directkv::Database, prefix: &str) -> Vec<String> {
    let r = db.begin_read().expect("read");
    let all = r.list_tables().expect("list tables");
    all.into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// The rows of every table of `db` whose name starts with `prefix`, as
/// one snapshot reads them.
#[allow(dead_code)] // Not every test file looks at the tables.
pub fn table_rows(db: &directkv::Database, prefix: &str) -> usize {
    let r = db.begin_read().expect("read");
    tables(db, prefix)
        .iter()
        .map(|name| {
            let t = r.open_table(name).expect("open a listed table");
            r.table(&t).range(..).count()
        })
        .sum()
}
