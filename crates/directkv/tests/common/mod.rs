//! Helpers the integration tests share: scratch directories on the build's
//! filesystem, the option values many tests open with, reading a closed
//! database's log from its redo point, and copying, damaging and
//! snapshotting a database's files.
//!
//! Each test file declares `mod common;` and compiles this module into its
//! own crate; a file uses some of the helpers, never all, hence the
//! `dead_code` allowance below.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use directkv::internals::io::OsStorage;
use directkv::internals::pages::page::{self, PageType};
use directkv::internals::pages::{ControlFile, PageId};
use directkv::internals::wal::{segment_file_name, Layout, WalReader};
use directkv::{AioOptions, Database, Lsn, Options, SyncMethod, SyncVariant};

/// A WAL sync that never syncs: for tests whose subject is not durability
/// across power loss, so they do not pay for fsyncs.
pub const NO_SYNC: Option<SyncVariant> = Some(SyncVariant {
    method: SyncMethod::None,
    direct: false,
});

/// The durable WAL sync the simulated disk's tests use: `fdatasync` on a
/// log opened for direct I/O.
pub const SIM_SYNC: Option<SyncVariant> = Some(SyncVariant {
    method: SyncMethod::Fdatasync,
    direct: true,
});

/// A fresh directory under `CARGO_TARGET_TMPDIR`: on the build's filesystem,
/// where direct I/O is usually allowed (a tmpfs `/tmp` refuses it), and
/// removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir")
}

/// The default options with a cache of `cache_bytes` and a WAL that never
/// syncs ([`NO_SYNC`]).
pub fn unsynced(cache_bytes: usize) -> Options {
    Options {
        cache_bytes,
        wal_sync: NO_SYNC,
        ..Options::default()
    }
}

/// Options for a database on the simulated disk that replays exactly: a
/// 1 MiB cache of 4 KiB pages, the simulator's sync, 256 KiB log segments,
/// and nothing running behind the test's back (no background threads, no
/// stats file).
pub fn sim_opts() -> Options {
    Options {
        cache_bytes: 256 * 4096,
        page_bytes: 4096,
        wal_sync: SIM_SYNC,
        wal_segment_bytes: 256 << 10,
        background_threads: false,
        publish_stats: false,
        ..Options::default()
    }
}

/// The default asynchronous-I/O options, with the backend
/// `DIRECTKV_IO_BACKEND` names where it is set (CI runs the tests once per
/// backend).
pub fn env_async_io() -> AioOptions {
    AioOptions::default()
        .with_env_override()
        .expect("a valid DIRECTKV_IO_BACKEND")
}

/// The redo point recorded in the `CONTROL` file of the database in `dir`.
pub fn redo_lsn(dir: &Path) -> Lsn {
    ControlFile::open(&OsStorage::default(), &dir.join("CONTROL"))
        .expect("CONTROL")
        .current()
        .redo_lsn
}

/// A reader of the log of the closed database in `dir` (segments of
/// `segment_bytes`, in `dir/wal`) from its redo point.
pub fn log_reader(dir: &Path, segment_bytes: u64) -> WalReader<OsStorage> {
    WalReader::new(
        OsStorage::default(),
        &dir.join("wal"),
        segment_bytes,
        None,
        redo_lsn(dir),
    )
}

/// The path, relative to the database directory, of the log segment (of
/// `segment_bytes`) that holds `lsn`.
pub fn segment_rel_path(segment_bytes: u64, lsn: Lsn) -> PathBuf {
    let layout = Layout { segment_bytes };
    Path::new("wal").join(segment_file_name(layout.segment_of(lsn)))
}

/// Copies the directory tree `from` (files and subdirectories) to `to`,
/// creating `to`: a database or a backup copied while closed.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().expect("type").is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// Flips the bits of `mask` in the byte at `offset` of the file at `path`:
/// a one-byte corruption a checksum must catch.
pub fn flip_byte(path: &Path, offset: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    assert_ne!(mask, 0, "a mask that flips no bit changes nothing");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).expect("read");
    b[0] ^= mask;
    f.write_all_at(&b, offset).expect("write");
}

/// Every key and value `db` holds, read in one snapshot.
pub fn contents(db: &Database) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let r = db.begin_read().expect("read");
    r.range::<std::ops::RangeFull>(..)
        .map(|kv| kv.expect("row"))
        .collect()
}

/// Every file under `dir` with its bytes, and every subdirectory (with no
/// bytes), but not the `LOCK` file: what a refused open must leave as it
/// was.
pub fn files_snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p.clone());
                out.insert(p, Vec::new());
            } else if p.file_name().is_some_and(|n| n != "LOCK") {
                out.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

/// The first page of type `t` in the data file of the closed database in
/// `dir` (pages of `page_bytes`): its number, its bytes, checked intact, and
/// the database's identity read from its header.
pub fn first_page_of_type(dir: &Path, page_bytes: usize, t: PageType) -> (u64, Vec<u8>, [u8; 16]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(dir.join("data")).expect("data");
    let pages = file.metadata().expect("meta").len() / page_bytes as u64;
    for no in 1..pages {
        let mut p = vec![0u8; page_bytes];
        file.read_exact_at(&mut p, no * page_bytes as u64)
            .expect("read");
        if u16::from_le_bytes([p[8], p[9]]) == t as u16 {
            let id: [u8; 16] = p[32..48].try_into().expect("16 bytes");
            page::verify(&p, PageId::new(no), &id).expect("an intact page");
            return (no, p, id);
        }
    }
    panic!("no {t:?} page");
}

/// Options for a test that reads and damages the files of a database it
/// built: 4 KiB pages, a cache of `cache_bytes`, log segments of
/// `segment_bytes`, an unsynced WAL, no background threads (no checkpoint
/// but the test's own), no stats file, and an existing database.
pub fn quiet(cache_bytes: usize, segment_bytes: u64) -> Options {
    Options {
        page_bytes: 4096,
        cache_bytes,
        wal_sync: NO_SYNC,
        wal_segment_bytes: segment_bytes,
        background_threads: false,
        create_if_missing: false,
        publish_stats: false,
        ..Options::default()
    }
}

/// Key `i` of a key space of `keys` keys (`i` wraps around).
pub fn numbered_key(i: u32, keys: u32) -> Vec<u8> {
    assert!(keys > 0, "an empty key space");
    format!("key{:05}", i % keys).into_bytes()
}

/// Commits transaction `t`, ten keys of a space of `keys` with 70-byte
/// values naming `t`, and records it in `model`.
pub fn commit_ten(db: &Database, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, t: u32, keys: u32) {
    let mut w = db.begin_write().expect("begin_write");
    for j in 0..10 {
        let k = numbered_key(t * 10 + j, keys);
        let v = format!("txn {t} value {j} {}", "x".repeat(60)).into_bytes();
        w.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    w.commit().expect("commit");
}

/// Key `i` of the page-damaging tests: `key-` and six digits.
pub fn page_key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// Builds and closes a database in `dir` of `keys` keys ([`page_key`]),
/// one transaction: 40-byte values, but key `long` holds three pages of
/// `page_bytes` (an overflow chain).
pub fn build_with_overflow(dir: &Path, opts: Options, keys: u32, long: u32, page_bytes: usize) {
    assert!(long < keys, "the long value's key is one of the keys");
    let db = Database::open(dir, opts).expect("open");
    let mut tx = db.begin_write().expect("begin");
    for i in 0..keys {
        let v = if i == long {
            vec![7u8; 3 * page_bytes]
        } else {
            vec![1u8; 40]
        };
        tx.put(&page_key(i), &v).expect("put");
    }
    tx.commit().expect("commit");
    db.close().expect("close");
}
